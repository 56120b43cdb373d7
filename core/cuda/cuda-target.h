/* gst-dflash — the Qwen3 target on a CUDA device.
 *
 * The same model as core/target.h, run by the kernels of kernels/cuda: the
 * weights live on the card (as the checkpoint stores them, or widened to F32
 * for exact parity tests), each sequence's KV cache too. A forward pass
 * uploads only its token ids (with the positions the kernels read on the
 * device) and brings back only what the caller asks for on the host: each
 * logits row's argmax (the greedy verifier's only traffic), the logits, the
 * final-normed rows. Taps and logits may instead stay on the card for a
 * drafter on the same device.
 *
 * Everything runs on the device's one stream; a target may serve several
 * sequences, one forward at a time (forwards are serialised by the target).
 */
#pragma once

#include <glib.h>
#include <stdint.h>

#include "dfl-cuda.h"
#include "qwen3-config.h"
#include "target.h"

G_BEGIN_DECLS

typedef struct _DflCudaTarget DflCudaTarget;
typedef struct _DflCudaTargetSeq DflCudaTargetSeq;

/* How the weight matrices go onto the card. Norms are always F32. */
typedef enum {
  DFL_CUDA_TARGET_AS_STORED,   /* F32, F16 or BF16 as the checkpoint has them */
  DFL_CUDA_TARGET_F32,         /* widened to F32: F32 products, for parity with the CPU */
} DflCudaTargetWeights;

/* Upload the weights of a loaded CPU target (its tensors are read, not kept:
 * the CPU target may be freed afterwards). A tied head shares the
 * embedding's copy. Fails with DFL_ERROR_LIMIT when the card has no room,
 * DFL_ERROR_UNSUPPORTED for what the CUDA path does not run (attention
 * biases). */
DflCudaTarget *dfl_cuda_target_new (DflCudaDevice *dev, const DflTarget *t,
                                    DflCudaTargetWeights weights, GError **error);
/* A target of config `c` with weights made on the card (uniform in
 * ±1/sqrt(fan_in), norms one; the embedding uniform in ±1) from `seed`:
 * for benches of a real model's shape without its files. `type` is the
 * matrices' type. */
DflCudaTarget *dfl_cuda_target_new_random (DflCudaDevice *dev, const DflQwen3Config *c,
                                           DflDtype type, guint64 seed, GError **error);
void dfl_cuda_target_free (DflCudaTarget *t);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (DflCudaTarget, dfl_cuda_target_free)

const DflQwen3Config *dfl_cuda_target_config (const DflCudaTarget *t);
DflCudaDevice *dfl_cuda_target_device (const DflCudaTarget *t);
/* The embedding [vocab][hidden] and the head [vocab][hidden] on the card
 * (the same memory when tied): a drafter on the same device reads these
 * instead of uploading its own copy. Valid while the target lives. */
const DflCudaWeights *dfl_cuda_target_embedding (const DflCudaTarget *t);
const DflCudaWeights *dfl_cuda_target_head (const DflCudaTarget *t);
/* The final norm's weight, F32 [hidden] on the card. */
const float *dfl_cuda_target_final_norm (const DflCudaTarget *t);
/* Bytes of weights one decode step reads on the card: every matrix once, the
 * head, one embedding row (as dfl_target_weight_bytes, in the card's types). */
guint64 dfl_cuda_target_weight_bytes (const DflCudaTarget *t);
/* Whether decode and verify steps (forwards of a few rows) replay a
 * captured CUDA graph of the pass (default TRUE) or launch its kernels one
 * by one: the same numbers either way (tests compare the two). */
void dfl_cuda_target_set_use_graph (DflCudaTarget *t, gboolean use_graph);
/* Rows a forward pass runs at once; longer inputs go through in chunks of
 * this many rows, which bounds the scratch memory (default 512). */
void dfl_cuda_target_set_chunk_rows (DflCudaTarget *t, int rows);

/* What a forward pass hands back; any pointer may be NULL. */
typedef struct {
  /* Taps: the residual stream after each of these layers (zero-based, before
   * any norm), joined per row in this order, on the card:
   * d_taps[n][n_tap_layers·hidden]. */
  const int *tap_layers;
  int n_tap_layers;
  float *d_taps;
  /* Rows logits_from … n−1 give logits: on the card (d_logits[n −
   * logits_from][vocab]) and/or copied to the host (logits, same shape). */
  int logits_from;
  float *d_logits;
  float *logits;
  /* Each of those rows' argmax over the vocabulary, computed on the card
   * (the first of equals): argmax[n − logits_from], on the host. */
  int32_t *argmax;
  /* Those rows after the final norm, on the host: hidden[n − logits_from][hidden]. */
  float *hidden;
} DflCudaForwardOut;

/* A sequence's KV cache on the card, F32 [layers][capacity][kv_heads·head_dim]
 * for K and for V; it grows by doubling up to max_position_embeddings. A
 * sequence is freed before its target. */
DflCudaTargetSeq *dfl_cuda_target_seq_new (DflCudaTarget *t, GError **error);
void dfl_cuda_target_seq_free (DflCudaTargetSeq *s);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (DflCudaTargetSeq, dfl_cuda_target_seq_free)
/* Make room for `positions` up front (no reallocation before then). */
gboolean dfl_cuda_target_seq_reserve (DflCudaTargetSeq *s, int positions, GError **error);
/* Positions held in the cache; the next token goes at this position. */
int dfl_cuda_target_seq_length (const DflCudaTargetSeq *s);
/* Forget positions `pos` and later (pos ≤ length): only the length moves. */
void dfl_cuda_target_seq_truncate (DflCudaTargetSeq *s, int pos);

/* Run `n` tokens (ids on the host) at positions length … length+n−1, append
 * them to the cache and fill `out`. Fails, leaving the cache as it was, on a
 * token id outside the vocabulary, past max_position_embeddings, or a bad tap
 * layer; a CUDA failure is reported as the kernels report it (the sequence's
 * length is then unchanged, its rows past the length undefined). */
gboolean dfl_cuda_target_forward (DflCudaTarget *t, DflCudaTargetSeq *s, const int *ids, int n,
                                  DflCudaForwardOut *out, GError **error);

G_END_DECLS
