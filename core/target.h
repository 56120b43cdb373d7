/* gst-dflash — the target: a Qwen3 causal LM, on the host or on a device.
 *
 * DflTarget holds the weights and is read-only once made, so one target can
 * serve several sequences (and threads) at once; each sequence owns a
 * DflTargetSeq, its KV cache, kept where the target runs. A cache can be
 * truncated to any earlier position: that is how a speculative round
 * rewinds what the target rejected.
 *
 * A target is loaded on the host (dfl_target_load: weights as the
 * checkpoint stores them, F32, F16 or BF16, read in place from the mapped
 * file; products accumulate in F32 through the batch-invariant kernel of
 * kernels/cpu/matmul.c, so verifying a block of rows gives bitwise the
 * logits decoding them one at a time would), then may be put on a device
 * (dfl_target_upload): the same model run by that back end's kernels, its
 * caches on the device. Where a back end runs no target, the upload says
 * so (DFL_ERROR_UNSUPPORTED, naming it).
 *
 * One forward for every back end: DflForwardOut says what the caller wants
 * back and where.
 */
#pragma once

#include <glib.h>
#include <stdint.h>

#include "dfl-backend.h"
#include "qwen3-config.h"
#include "safetensors.h"

G_BEGIN_DECLS

typedef struct _DflTarget DflTarget;
typedef struct _DflTargetSeq DflTargetSeq;

/* `path` is a Hugging Face checkpoint folder (config.json,
 * model.safetensors or shards and model.safetensors.index.json) or a .gguf
 * file (qwen3-gguf.h); dfl_qwen3_checkpoint_open reads either. A tensor of
 * a block-quantized type is refused (naming it and its type) where the CPU
 * back end does not multiply that type (dfl_device_supports). The
 * tokenizer is loaded apart (tokenizer.h). The target is on the host. */
DflTarget *dfl_target_load (const char *path, GError **error);

/* How the weight matrices go onto a device. Norms are always F32. A
 * block-quantized matrix (a GGUF file's Q8_0, Q4_0, Q4_K, Q6_K) goes up as
 * its blocks only where the device multiplies that type; elsewhere it is
 * dequantized on the host to F32, which holds its values exactly
 * (matrix-upload.c), both as stored and as F32. */
typedef enum {
  DFL_TARGET_AS_STORED,   /* F32, F16 or BF16 as the checkpoint has them */
  DFL_TARGET_F32,         /* widened to F32: F32 products and an F32 KV cache, for parity
                           * with the CPU */
  DFL_TARGET_BF16,        /* rounded to BF16 (to nearest even; a BF16 matrix as it is):
                           * half F32's memory, a quantized file's values rounded */
} DflTargetWeights;

/* The host target `host` put on `device` (its tensors are read, not kept:
 * the host target may be freed afterwards). A tied head shares the
 * embedding's copy. Fails with DFL_ERROR_UNSUPPORTED where the device's
 * back end runs no target or not this one (CUDA: attention biases),
 * DFL_ERROR_LIMIT where the device has no room. */
DflTarget *dfl_target_upload (const DflTarget *host, DflDevice *device, DflTargetWeights as,
                              GError **error);
/* A target of config `c` with weights made on `device` (uniform in
 * ±1/sqrt(fan_in), norms one; the embedding uniform in ±1) from `seed`:
 * for benches of a real model's shape without its files. `type` is the
 * matrices' type. DFL_ERROR_UNSUPPORTED on a back end that cannot make
 * them (the CPU reads checkpoints only). */
DflTarget *dfl_target_new_random (DflDevice *device, const DflQwen3Config *c, DflDtype type,
                                  guint64 seed, GError **error);
/* Sequences are freed before their target. */
void dfl_target_free (DflTarget *t);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (DflTarget, dfl_target_free)

const DflQwen3Config *dfl_target_config (const DflTarget *t);
/* The checkpoint folder or .gguf file it was loaded from ("random target"
 * for one made on a device), for messages. */
const char *dfl_target_dir (const DflTarget *t);
/* Where it runs: NULL (and DFL_BACKEND_CPU) for the host. */
DflDevice *dfl_target_device (const DflTarget *t);
DflBackendId dfl_target_backend (const DflTarget *t);
/* Bytes of weights one decode step reads, in the types it holds them in:
 * every matrix once, the head, one embedding row. */
guint64 dfl_target_weight_bytes (const DflTarget *t);
gint64 dfl_target_n_params (const DflTarget *t);
/* What its sequences' KV caches hold: BF16 where the layers' matrices went
 * up as BF16 on a device whose attention reads BF16 (CUDA: the keys and
 * values rounded as they are written, half the bytes of the cache), else
 * F32 (the CPU; a target uploaded as F32, for parity with the CPU, or
 * stored as F32 or F16). */
DflDtype dfl_target_kv_type (const DflTarget *t);
/* The embedding [vocab][hidden] and the head [vocab][hidden] where the
 * target holds them (the same memory when tied): a drafter on the same
 * device reads these instead of keeping its own copy. Valid while the
 * target lives. */
DflTensor dfl_target_embedding_tensor (const DflTarget *t);
DflTensor dfl_target_head_tensor (const DflTarget *t);

/* --- host targets only (dfl_target_load) --- */

/* The checkpoint's tensors as stored (for the drafter's binding hash). */
const DflSafetensors *dfl_target_tensors (const DflTarget *t);
/* Rows of the embedding table for `ids` (checked by the caller) into
 * out[n][hidden]. */
void dfl_target_embed (const DflTarget *t, const int *ids, int n, float *out);
/* Logits of `rows` final-normed hidden rows over the head's first `width`
 * rows (width = vocab for the whole head): out[rows][width]. */
void dfl_target_head (const DflTarget *t, const float *hidden, int rows, int width, float *out);

/* --- how a device runs its forwards --- */

/* Whether decode and verify steps (forwards of a few rows) replay a
 * captured graph of the pass (default TRUE) or launch its kernels one by
 * one: the same numbers either way (tests compare the two). Device targets
 * with graphs only (CUDA). */
void dfl_target_set_use_graph (DflTarget *t, gboolean use_graph);
/* Rows a forward pass runs at once; longer inputs go through in chunks of
 * this many rows, which bounds the device's scratch memory (default 512).
 * Device targets only (CUDA): the CPU's scratch is the caller's rows. */
void dfl_target_set_chunk_rows (DflTarget *t, int rows);

/* --- sequences and the forward --- */

/* What a forward pass hands back; any pointer may be NULL. Host memory or
 * a tensor on the target's device (for a host target: host memory too);
 * device tensors are F32, packed, with room for the rows. */
typedef struct {
  /* Taps: the residual stream after each of these layers (zero-based, before
   * any norm), joined per row in this order: [n][n_tap_layers·hidden], in
   * host rows (`taps`; host targets) or on the device (`device_taps`). */
  const int *tap_layers;
  int n_tap_layers;
  float *taps;
  const DflTensor *device_taps;
  /* Logits of rows logits_from … n−1: [n − logits_from][vocab], on the host
   * and/or on the device. */
  int logits_from;
  float *logits;
  const DflTensor *device_logits;
  /* Each of those rows' argmax over the vocabulary (the first of equals),
   * on the host: argmax[n − logits_from]. */
  int32_t *argmax;
  /* The same rows after the final norm, on the host: hidden[n −
   * logits_from][hidden] (the router reads the row at the tip). */
  float *hidden;
} DflForwardOut;

/* A sequence's KV cache, where the target runs; it grows by doubling up to
 * max_position_embeddings. */
DflTargetSeq *dfl_target_seq_new (const DflTarget *t);
void dfl_target_seq_free (DflTargetSeq *s);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (DflTargetSeq, dfl_target_seq_free)
/* The target the sequence runs on. */
const DflTarget *dfl_target_seq_target (const DflTargetSeq *s);
/* Make room for `positions` up front (no reallocation before then). */
gboolean dfl_target_seq_reserve (DflTargetSeq *s, int positions, GError **error);
/* Positions held in the cache; the next token goes at this position. */
int dfl_target_seq_length (const DflTargetSeq *s);
/* Forget positions `pos` and later (pos ≤ length). */
void dfl_target_seq_truncate (DflTargetSeq *s, int pos);

/* Run `n` tokens (ids on the host) at positions length … length+n−1, append
 * them to the cache, and fill `out`. Fails, leaving the cache as it was, on
 * a token id out of the vocabulary, past max_position_embeddings, a bad tap
 * layer or an output the target cannot give where it is asked (a device
 * tensor of another device); a device's failure is reported as its kernels
 * report it (the length is then unchanged, the rows past it undefined). */
gboolean dfl_target_forward (const DflTarget *t, DflTargetSeq *s, const int *ids, int n,
                             DflForwardOut *out, GError **error);

/* One sequence's part of a batched forward: `n` ids (on the host) to run
 * at its positions, and what it wants back (NULL: nothing). */
typedef struct {
  DflTargetSeq *seq;
  const int *ids;
  int n;
  DflForwardOut *out;
} DflTargetBatchItem;

/* dfl_target_forward for several sequences at once, each with its own
 * positions and cache (different lengths, different row counts): one pass
 * of the products over all their rows, each sequence's outputs split back
 * to its own DflForwardOut. On the CPU each sequence's outputs are bitwise
 * what its forward alone would give (the kernels are row-invariant); on
 * CUDA up to the rounding of cuBLAS's products, which depends on the rows
 * multiplied together. The sequences must be distinct and of this target.
 * Checked as dfl_target_forward checks (naming the item at fault); a
 * failure leaves every cache as it was. */
gboolean dfl_target_forward_batch (const DflTarget *t, const DflTargetBatchItem *items,
                                   int n_items, GError **error);

G_END_DECLS
