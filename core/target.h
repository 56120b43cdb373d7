/* gst-dflash — the target: a Qwen3 causal LM on the CPU.
 *
 * DflTarget holds the weights and is read-only once loaded, so one loaded
 * target can serve several sequences (and threads) at once; each sequence
 * owns a DflTargetSeq, its KV cache. A cache can be truncated to any earlier
 * position: that is how a speculative round rewinds what the target rejected.
 *
 * Weights stay as the checkpoint stores them (F32, F16 or BF16) and are read
 * in place from the mapped file; products accumulate in F32 through the
 * batch-invariant kernel (kernels/cpu/matmul.c), so verifying a block of
 * rows gives bitwise the logits decoding them one at a time would.
 */
#pragma once

#include <glib.h>

#include "qwen3-config.h"
#include "safetensors.h"

G_BEGIN_DECLS

typedef struct _DflTarget DflTarget;
typedef struct _DflTargetSeq DflTargetSeq;

/* `dir` is a Hugging Face checkpoint folder: config.json, model.safetensors
 * (or shards and model.safetensors.index.json). The tokenizer is loaded
 * apart (tokenizer.h). */
DflTarget *dfl_target_load (const char *dir, GError **error);
void dfl_target_free (DflTarget *t);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (DflTarget, dfl_target_free)

const DflQwen3Config *dfl_target_config (const DflTarget *t);
const char *dfl_target_dir (const DflTarget *t);
/* The checkpoint's tensors as stored (for the drafter's binding hash). */
const DflSafetensors *dfl_target_tensors (const DflTarget *t);
/* Bytes of weights one decode step reads, as stored: every matrix once, the
 * head, one embedding row. */
guint64 dfl_target_weight_bytes (const DflTarget *t);
gint64 dfl_target_n_params (const DflTarget *t);

/* Rows of the embedding table for `ids` (checked by the caller) into
 * out[n][hidden]. */
void dfl_target_embed (const DflTarget *t, const int *ids, int n, float *out);
/* Logits of `rows` final-normed hidden rows over the head's first `width`
 * rows (width = vocab for the whole head): out[rows][width]. */
void dfl_target_head (const DflTarget *t, const float *hidden, int rows, int width, float *out);

/* What a forward pass hands back; any pointer may be NULL. */
typedef struct {
  /* Taps: the residual stream after each of these layers (zero-based, before
   * any norm), joined per row in this order: taps[n][n_tap_layers·hidden]. */
  const int *tap_layers;
  int n_tap_layers;
  float *taps;
  /* Logits of rows logits_from … n−1: logits[n − logits_from][vocab]. */
  int logits_from;
  float *logits;
  /* The same rows after the final norm: hidden[n − logits_from][hidden]
   * (the router reads the row at the tip). */
  float *hidden;
} DflForwardOut;

DflTargetSeq *dfl_target_seq_new (const DflTarget *t);
void dfl_target_seq_free (DflTargetSeq *s);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (DflTargetSeq, dfl_target_seq_free)
/* Positions held in the cache; the next token goes at this position. */
int dfl_target_seq_length (const DflTargetSeq *s);
/* Forget positions `pos` and later (pos ≤ length). */
void dfl_target_seq_truncate (DflTargetSeq *s, int pos);

/* Run `n` tokens at positions length … length+n−1, append them to the cache,
 * and fill `out`. Fails (and leaves the cache as it was) on a token id out of
 * the vocabulary or past max_position_embeddings. */
gboolean dfl_target_forward (const DflTarget *t, DflTargetSeq *s, const int *ids, int n,
                             DflForwardOut *out, GError **error);

G_END_DECLS
