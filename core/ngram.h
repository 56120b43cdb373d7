/* gst-dflash — the chain drafter: prompt lookup (n-gram) drafting.
 *
 * The text so far is searched for an earlier occurrence of its own last n
 * tokens (n from max_n down to min_n): the latest one with a whole proposal
 * after it, else the one with the most; the tokens that followed it are the
 * proposal. It needs no weights, so routing between it
 * and the block works on any target (as vLLM's `ngram` and llama.cpp's
 * lookup decoding do).
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

typedef struct {
  int min_n;   /* shortest suffix that counts as a match (default 1) */
  int max_n;   /* longest suffix tried first (default 4) */
} DflNgram;

#define DFL_NGRAM_DEFAULT { 1, 4 }

/* Propose up to `max_draft` tokens to follow `tokens[0 … n−1]`. Returns how
 * many were written to `draft` (0: no match); `*match` (may be NULL) gets the
 * length of the suffix that matched. */
int dfl_ngram_propose (const DflNgram *g, const int *tokens, int n, int max_draft,
                       int *draft, int *match);

G_END_DECLS
