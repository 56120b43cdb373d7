/* gst-dflash — one sequence of the loop, a handle shared by reference.
 *
 * tapsource makes a sequence when it starts a prompt, and every buffer of
 * that sequence's rounds carries a reference to it in its round meta
 * (gstdflashmeta.h): an element reaches the sequence through the buffer it
 * works on, never through a table. Each element reads and writes only its
 * own part of a sequence, and a sequence's round passes the elements in
 * order, so two elements never touch the same part at once.
 *
 * The sequence goes with its last reference: tapsource drops its own when
 * the sequence is done, at a flush and at a stop, and the rounds in flight
 * drop theirs with their buffers. A sequence holds its model, so the
 * engines its state was made from outlive it. A reference-counted boxed
 * type, as GstVideoCodecFrame is: its state is shared and written in
 * place, which a GstMiniObject's copy-on-write would only get in the way of.
 */
#pragma once

#include <gst/gst.h>

#include "gstdflashmodel.h"

G_BEGIN_DECLS

struct _GstDflashSeq {
  gint refcount;
  GstDflashModel *model;     /* held: the engines outlive the sequence's state on them */
  guint id;
  /* the request's settings, fixed when tapsource starts the sequence:
   * tokens to generate at most, the sampling, and the ids besides the
   * target's EOS that end it (NULL: none) */
  int max_new;
  DflSampler sampler;
  GArray *stop_ids;
  /* a request of a serving tapsource (its id is the request's): its text
   * leaves unordered, at once, and its last tokens carry
   * GST_BUFFER_FLAG_MARKER */
  gboolean serving;
  /* set (atomically) by a cancel from any thread; tapsource drops the
   * sequence at its next verdict */
  gint cancelled;
  /* tapsource and verifier: the target's cache, made by tapsource on the
   * target it runs (the model's, or the model's on a device: `device`,
   * held, so its engines outlive the cache) */
  DflTargetSeq *kv;
  GstDflashDevice *device;
  GArray *tokens;            /* prompt, then what was emitted */
  int prompt_len;
  int emitted;
  gboolean done;
  /* the last verification, for tapsource's next round */
  float *taps;               /* accepted rows' taps */
  int taps_rows;
  float *tip;
  /* ctxsettle, dflashblock and selector: this sequence's drafter context
   * (on the back end they draft on) */
  DflDraftCtx *draft;
  /* The GPU back ends' state of the sequence, made on first use, freed
   * with it. Where kv is on a device, taps_buf holds the accepted rows'
   * taps there instead of taps. */
  GstBuffer *taps_buf;
  /* ngramdraft: the tokens its prompt lookup searches */
  GArray *chain_text;
  /* verifier: the text made so far of the tokens (bytes of a character
   * not yet whole wait in it) */
  DflDetokenizer *detok;
  /* the verifier's figures */
  int rounds;
  gint64 round_tokens;
  guint64 draft_ns, verify_ns;
};

#define GST_TYPE_DFLASH_SEQ (gst_dflash_seq_get_type ())
GType gst_dflash_seq_get_type (void);

/* Sequence `id` (tapsource's prompt number) on `m`: an empty cache on the
 * CPU target, no tokens yet; one reference, the caller's. */
GstDflashSeq *gst_dflash_seq_new (GstDflashModel *m, guint id);
GstDflashSeq *gst_dflash_seq_ref (GstDflashSeq *seq);
void gst_dflash_seq_unref (GstDflashSeq *seq);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (GstDflashSeq, gst_dflash_seq_unref)

G_END_DECLS
