/* gst-dflash — the verifier's `dflash-summary` message: the round's figures
 * (round.h's DflRoundStats) as the bus carries them, written by the
 * verifier and read back by the tools, so every one of them shows the same
 * figures.
 *
 * Fields: sequences (uint), rounds, new-tokens, round-tokens, block-rounds,
 * chain-rounds (int64), tau, tokens-per-second (decode: the tokens after
 * each sequence's first), draft-time, verify-time, wall-time (double,
 * seconds), accept-rate (array of double by draft position, 0 where
 * nothing was proposed), proposed-by-position and accepted-by-position
 * (arrays of int64: the counts behind it).
 */
#pragma once

#include <gst/gst.h>

#include "round.h"

G_BEGIN_DECLS

#define GST_DFLASH_SUMMARY_NAME "dflash-summary"

GstStructure *gst_dflash_summary_new (const DflRoundStats *st);
/* The figures of a summary into `st` (initialized by this call: clear it
 * after). FALSE, the figures zero, where a field is missing. */
gboolean gst_dflash_summary_parse (const GstStructure *s, DflRoundStats *st);

G_END_DECLS
