/* gst-dflash — the DFlash drafter: its weights, its context, its block.
 *
 * Two layouts load:
 *
 * - A DFlash 2 sidecar: one safetensors file (`dflash.safetensors` in the
 *   target's folder, or named explicitly). Tensors are named with the
 *   `dflash.` prefix (`dflash.fc.weight`, `dflash.layers.N.self_attn.q_proj.weight`,
 *   `dflash.layers.N.attention_conv.kernel_projection.weight`,
 *   `dflash.candidate_selector.predecessor_codebook`, …). Its `__metadata__`
 *   holds three JSON strings:
 *     "dflash"       the geometry (DflDrafterGeometry, same keys);
 *     "base_binding" {"trunk_hash64": "<16 lowercase hex>"}: the target it was
 *                    made for (dfl_trunk_hash64);
 *     "dflash_route" (optional) the router, plain JSON numbers:
 *                    {"block": {"mean": [hidden floats],
 *                               "basis": [rank·hidden floats, row after row]
 *                                        (or [[hidden floats] × rank]),
 *                               "rank": r},
 *                     "chain": {the same}, "block_rows": n, "chain_rows": n}
 *                    A router that does not read is warned about and the
 *                    sidecar loads without one (as the reference does).
 * - A released DFlash (v1) drafter: a folder with `config.json`
 *   (architectures DFlashDraftModel) and `model.safetensors` (or shards),
 *   names without prefix, no convolution and no selector: the block's
 *   convolutions are the identity and selection is a plain argmax.
 *
 * Matrices (F32, F16 or BF16 in the file: released drafters are BF16
 * throughout) stay in their stored dtype and are read in place from the
 * mapping: every product goes through dfl_matmul_w, which converts as it
 * reads and is batch-invariant (a row's numbers do not depend on how many
 * rows come with it, so settling in any batches gives the same keys and
 * values). Vectors (norms, base kernels) are held as F32: F32 data 4-byte
 * aligned in the mapping is read in place, anything else is converted at
 * load. The selector's codebooks must be F16 and stay F16 (read a row at a
 * time).
 *
 * The math is DESIGN.md's ("The math"); the bookkeeping is the reference's
 * (queue / settle / truncate / windows) with one change: a windowed layer
 * keeps DFL_DRAFTER_BLOCK_SLACK rows past its window, so a rewind of up to
 * that many positions stays exact, and a block whose context is no longer
 * held is refused (dfl_draft_ctx_check) instead of drafted short.
 *
 * Two objects: DflDrafterWeights, immutable once loaded (a blank one's
 * weights may be filled before its first use) and shared by any number of
 * sequences and threads; and DflDraftCtx, one sequence's context, used by
 * one thread at a time. A context drafts for a target: the weights are
 * first bound to the target's embedding and head on a back end
 * (dfl_drafter_weights_bind: the CPU, or uploaded to a CUDA or Vulkan
 * device), and every context made from the bound weights runs there,
 * through the same calls whatever the back end.
 */
#pragma once

#include <glib.h>
#include "dfl-backend.h"
#include "safetensors.h"
#include "target.h"

G_BEGIN_DECLS

/* Positions past a layer's window a windowed layer still holds: a rewind of
 * up to this many positions (from the furthest the context reached) stays
 * exact. Rows are dropped lazily: when a layer holds more than
 * 2·(window + BLOCK_SLACK) rows it is cut back to window + BLOCK_SLACK. */
#define DFL_DRAFTER_BLOCK_SLACK 256
/* Rows that may wait unsettled (dfl_draft_ctx_queue); past that the
 * oldest are settled, a multiple of DFL_DRAFTER_CONTEXT_CHUNK of them. */
#define DFL_DRAFTER_PENDING_ROWS 512
#define DFL_DRAFTER_CONTEXT_CHUNK 64
/* Rows settled per pass of each matrix: a 512-row prompt is one pass. */
#define DFL_DRAFTER_SETTLE_BATCH 512

typedef struct {
  int hidden;
  int intermediate;
  int layers;
  int heads;
  int kv_heads;
  int head_dim;
  int vocab;
  int block;            /* rows of a block: the anchor and block − 1 drafts */
  guint32 mask_token;
  int conv_group;
  int conv_kernel;      /* 0: no convolution (released v1 drafters) */
  int selector_rank;    /* 0: no selector (released v1 drafters) */
  int selector_top;
  int n_taps;
  int *taps;            /* the target's layers a context row joins, zero-based */
  int target_layers;
  int window;           /* positions a block row sees back; 0: all */
  int *windows;         /* [layers] where the layers differ, else NULL */
  int n_no_rope;
  int *no_rope;         /* layers without rotary positions */
  double rope_theta;
  double eps;
} DflDrafterGeometry;

/* Parse a sidecar's "dflash" record and check it as the reference's
 * Geometry::of does (plus what C needs to be safe: positive sizes, taps
 * inside the target, the mask token and selector_top inside the vocabulary).
 * `origin` names the file in messages; each message says which check failed. */
gboolean dfl_drafter_geometry_parse (DflDrafterGeometry *g, const char *json,
                                     const char *origin, GError **error);
/* A released v1 drafter's config.json (architectures DFlashDraftModel):
 * block_size (top level or in dflash_config), dflash_config.mask_token_id,
 * dflash_config.target_layer_ids (else the public code's default spread
 * over num_target_layers), per-layer windows from layer_types /
 * sliding_window / use_sliding_window; no convolution, no selector. Rope
 * scaling is refused. */
gboolean dfl_drafter_geometry_from_v1_config (DflDrafterGeometry *g, const char *json, gsize len,
                                              const char *origin, GError **error);
gboolean dfl_drafter_geometry_check (const DflDrafterGeometry *g, const char *origin,
                                     GError **error);
void dfl_drafter_geometry_copy (DflDrafterGeometry *dst, const DflDrafterGeometry *src);
void dfl_drafter_geometry_clear (DflDrafterGeometry *g);
int dfl_drafter_geometry_window_of (const DflDrafterGeometry *g, int layer);
gboolean dfl_drafter_geometry_rotary (const DflDrafterGeometry *g, int layer);
/* Width of a context row: n_taps · hidden. */
int dfl_drafter_geometry_tap_width (const DflDrafterGeometry *g);

typedef struct _DflDrafterWeights DflDrafterWeights;
typedef struct _DflDraftCtx DflDraftCtx;

/* --- the weights --- */

/* `path`: a sidecar file, a released v1 drafter's folder, or a target folder
 * holding dflash.safetensors. */
DflDrafterWeights *dfl_drafter_weights_open (const char *path, GError **error);
/* Weights of this geometry, every one zero (norm weights one), for benches
 * and tests that fill them themselves (dfl_drafter_weights_foreach) before
 * their first use. `conv` / `selector`: whether it has them. Its matrices
 * are F32. */
DflDrafterWeights *dfl_drafter_weights_new_blank (const DflDrafterGeometry *g, gboolean conv,
                                                  gboolean selector, GError **error);
/* The same with matrices of `matrix_dtype` (F32, F16 or BF16; released
 * drafters are BF16); vectors F32, codebooks F16 as always. */
DflDrafterWeights *dfl_drafter_weights_new_blank_as (const DflDrafterGeometry *g, gboolean conv,
                                                     gboolean selector, DflDtype matrix_dtype,
                                                     GError **error);
DflDrafterWeights *dfl_drafter_weights_ref (DflDrafterWeights *w);
void dfl_drafter_weights_unref (DflDrafterWeights *w);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (DflDrafterWeights, dfl_drafter_weights_unref)

const DflDrafterGeometry *dfl_drafter_weights_geometry (const DflDrafterWeights *w);
const char *dfl_drafter_weights_path (const DflDrafterWeights *w);
gboolean dfl_drafter_weights_is_v1 (const DflDrafterWeights *w);
gboolean dfl_drafter_weights_has_conv (const DflDrafterWeights *w);
gboolean dfl_drafter_weights_has_selector (const DflDrafterWeights *w);

/* Every weight as held in host memory: matrices in their stored dtype
 * (F32, F16 or BF16), vectors F32, codebooks F16. `data` may be written
 * only where `writable` (a buffer the loader allocated: a blank drafter's,
 * a vector converted at load; never the mapped file), and only before the
 * weights' first use. */
typedef void (*DflDrafterWeightFunc) (const char *name, DflDtype dtype, gsize n_elements,
                                      void *data, gboolean writable, gpointer user_data);
void dfl_drafter_weights_foreach (DflDrafterWeights *w, DflDrafterWeightFunc func,
                                  gpointer user_data);
/* Bytes of weights as held: on the host, matrices as stored (what a block
 * streams, roughly) and vectors as F32; on a device, what was uploaded. */
guint64 dfl_drafter_weights_bytes (const DflDrafterWeights *w);

/* --- binding to the target --- */

/* 64-bit FNV-1a over model.embed_tokens.weight's data bytes, then, where the
 * head is untied, lm_head.weight's; of each its whole bytes when at most
 * 2 MiB, else its first MiB then its last MiB. `hex`: 16 lowercase digits. */
gboolean dfl_trunk_hash64 (const DflSafetensors *target, gboolean tied, char hex[17],
                           GError **error);
/* The sidecar's base_binding.trunk_hash64, or NULL (v1 drafters have none). */
const char *dfl_drafter_weights_binding (const DflDrafterWeights *w);
/* Refuse a drafter made for another target: its target_layers, hidden and
 * vocab must be the target's, and a sidecar's binding must be the target's
 * (trunk-hash.c: the trunk hash, also of the values as F32, F16 or BF16, or
 * the hash of their signs; for a block-quantized embedding or head, a sample
 * of the values within the type's rounding). A v1 drafter is checked on the
 * sizes alone. */
gboolean dfl_drafter_weights_check_target (const DflDrafterWeights *w,
                                           const DflSafetensors *target, gboolean tied,
                                           int target_layers, int hidden, int vocab,
                                           GError **error);

/* What a block reads of the target: its token embedding ([vocab][hidden])
 * and its LM head ([rows][hidden], rows at least the widest shortlist
 * asked for), F32, F16 or BF16, packed, or block-quantized (Q8_0, Q4_0,
 * Q4_K, Q6_K: the CPU reads the blocks in place, another device gets them
 * from host memory dequantized to F32); the same matrix twice when tied. */
typedef struct {
  DflTensor embed;
  DflTensor head;
} DflDraftTrunk;

/* The trunk of a target loaded on the CPU: its matrices in its mapping,
 * borrowed. */
gboolean dfl_draft_trunk_of_target (DflDraftTrunk *trunk, const DflTarget *target,
                                    GError **error);

/* The weights ready to draft for a target on `device` (NULL: the CPU),
 * reading `trunk` there. The drafter is the same on every device (its
 * math over dfl-backend.h's ops); binding checks that the device runs
 * every op a block needs, of the types the weights hold, and refuses it
 * (DFL_ERROR_UNSUPPORTED naming the op) where it does not. On the CPU the
 * trunk is host memory, borrowed (it must outlive the result), and the
 * weights are shared, not copied, unless `matrix_dtype` is Q8_0: then each
 * float matrix whose rows are whole blocks of 32, and a float trunk's
 * head, is quantized to Q8_0 into memory of the result's own (integer
 * products, about twice as fast a block; the drafts near the float
 * ones', the target's embedding untouched); Q8_0 is refused
 * (DFL_ERROR_UNSUPPORTED) on any other device. On another device the
 * weights are uploaded, matrices as F32 where `matrix_dtype` is F32
 * (parity with the CPU), else each F16 or BF16 one as stored and each F32
 * one converted to `matrix_dtype`; the trunk is that device's memory
 * (borrowed) or host memory (uploaded with the weights, as stored, or
 * dequantized to F32 where it is block-quantized and the device does not
 * multiply its type). A bound drafter cannot be bound again. Errors: DFL_ERROR_MISMATCH where the trunk does not fit
 * the drafter (hidden, vocab), DFL_ERROR_UNSUPPORTED for a back end this
 * build lacks or an op or shape past the device, and the device's. */
DflDrafterWeights *dfl_drafter_weights_bind (DflDrafterWeights *w, DflDevice *device,
                                             const DflDraftTrunk *trunk, DflDtype matrix_dtype,
                                             GError **error);
/* Where a CPU binding with `matrix_dtype` Q8_0 keeps its matrices between
 * runs (a folder, made if need be; NULL: nowhere, the default). A binding
 * maps the file a previous one saved there for the same matrices, head and
 * build (arena-cache.c: a key of all of them), instead of quantizing them
 * again, and saves the ones it makes; a folder it cannot write to only
 * costs the next binding the quantization. Set on the weights as opened,
 * before binding. */
void dfl_drafter_weights_set_arena_cache (DflDrafterWeights *w, const char *dir);
/* The device bound weights run on (NULL: the CPU, or not bound). */
DflDevice *dfl_drafter_weights_device (const DflDrafterWeights *w);
/* Whether blocks of bound weights on a device that records graphs
 * (CUDA) replay a captured graph (default TRUE) or dispatch their ops one
 * by one: the same work (tests compare the two). Set before contexts draft. */
void dfl_drafter_weights_set_graphs (DflDrafterWeights *bound, gboolean use);
/* The type the drafter's matrices are stored in (F32, F16 or BF16): what
 * to pass as `matrix_dtype` for "as stored". */
DflDtype dfl_drafter_weights_stored_dtype (const DflDrafterWeights *w);

/* --- a sequence's context --- */

/* A context for bound weights (it keeps a reference to them). */
DflDraftCtx *dfl_draft_ctx_new (DflDrafterWeights *bound, GError **error);
void dfl_draft_ctx_free (DflDraftCtx *ctx);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (DflDraftCtx, dfl_draft_ctx_free)

DflDrafterWeights *dfl_draft_ctx_weights (const DflDraftCtx *ctx);
/* Where its tensors live: the bound weights' device (NULL: host memory). */
DflDevice *dfl_draft_ctx_device (const DflDraftCtx *ctx);

/* The position the next context row belongs to (waiting rows included). */
gint64 dfl_draft_ctx_next_position (const DflDraftCtx *ctx);
/* The positions the context covers: [first, next_position). */
void dfl_draft_ctx_span (const DflDraftCtx *ctx, gint64 *first, gint64 *end);
void dfl_draft_ctx_reset (DflDraftCtx *ctx);
/* Forget the context from position `pos` on (a rewind of the target). */
void dfl_draft_ctx_truncate (DflDraftCtx *ctx, gint64 pos);
/* Add the target's rows of positions pos … pos+n−1: `taps` holds n rows
 * of n_taps·hidden F32 (the taps joined in the geometry's order), in host
 * memory or on the context's device. Rows at held positions replace them
 * and what follows; a gap, or a position before the context's first,
 * starts the context over at `pos`. The rows wait (at most
 * DFL_DRAFTER_PENDING_ROWS; past that the oldest are settled) until
 * settled. The rows are copied (in the device's order) before this
 * returns: the caller may reuse `taps`. FALSE with an error for rows out
 * of range or the device's error (the context is then unusable until
 * reset). */
gboolean dfl_draft_ctx_queue (DflDraftCtx *ctx, gint64 pos, const DflTensor *taps,
                              GError **error);
/* The same from `n_rows` packed host rows. */
gboolean dfl_draft_ctx_queue_host (DflDraftCtx *ctx, gint64 pos, const float *taps,
                                   gsize n_rows, GError **error);
/* Make every waiting row context (batches of DFL_DRAFTER_SETTLE_BATCH). */
gboolean dfl_draft_ctx_settle (DflDraftCtx *ctx, GError **error);
/* Whether a block anchored at `anchor_pos` would see every context row it
 * should: the context must reach the anchor (no gap), start at or before it,
 * and each windowed layer must still hold the rows its window reaches (a
 * rewind deeper than DFL_DRAFTER_BLOCK_SLACK loses them). FALSE with a
 * DFL_ERROR_LIMIT error saying what is missing and from where to queue the
 * target's rows again (a reset then queue from there restarts it). */
gboolean dfl_draft_ctx_check (const DflDraftCtx *ctx, gint64 anchor_pos, GError **error);
/* A layer's settled keys and values for one KV head, copied to the host
 * (tests): `*rows` rows of head_dim for positions from `*from` on (the
 * first position the layer holds); k and v g_malloc'd (either may be
 * NULL: just the counts). */
gboolean dfl_draft_ctx_read_kv (DflDraftCtx *ctx, int layer, int kv_head, float **k, float **v,
                                gsize *rows, gint64 *from, GError **error);

/* --- the block --- */

/* Bytes of a block's output at head width `width`: (block − 1) rows of
 * hidden F32, then (block − 1) rows of `width` logits F32. */
gsize dfl_draft_ctx_block_bytes (const DflDraftCtx *ctx, int width);
/* One block anchored at `anchor_pos` with token `anchor`: the rows
 * [anchor, MASK × (block − 1)] embedded with the target's table, the
 * drafter's layers, the last norm, then the target's head over its first
 * `width` rows (selector_top ≤ width ≤ vocab) for the rows after the
 * anchor's. Into `out` (dfl_draft_ctx_block_bytes, in host memory or on
 * the context's device): those rows, then their logits. Waiting rows are
 * settled first. On a GPU the work is in the device's order when this
 * returns (a read of `out` on the device waits for it). FALSE (out
 * untouched) with DFL_ERROR_LIMIT where the context is short
 * (dfl_draft_ctx_check), DFL_ERROR_INVALID for a bad token, width or
 * output, or the device's error. */
gboolean dfl_draft_ctx_block (DflDraftCtx *ctx, gint64 anchor_pos, guint32 anchor, int width,
                              const DflTensor *out, GError **error);
/* On the CPU, the last block's rows after the last norm, all `block` of
 * them, the anchor's too (the parity tests compare them all; valid until
 * the next block); NULL on a GPU. */
const float *dfl_draft_ctx_block_rows (const DflDraftCtx *ctx);
/* The drafted tokens of a block (`block` as dfl_draft_ctx_block wrote it at
 * `width`, where it wrote it): each row's top selector_top candidates
 * re-scored against the token chosen before it, starting from `anchor`
 * (dfl_drafter_weights_select); only the ids come back to the host.
 * `chosen` (re-scored; the plain argmax without a selector) and `plain`
 * (each row's argmax): block − 1 each; either may be NULL. */
gboolean dfl_draft_ctx_select (DflDraftCtx *ctx, const DflTensor *block, int width,
                               guint32 anchor, guint32 *chosen, guint32 *plain, GError **error);
/* Both: the block, then its selection. */
gboolean dfl_draft_ctx_draft (DflDraftCtx *ctx, gint64 anchor_pos, guint32 anchor, int width,
                              const DflTensor *out, guint32 *chosen, guint32 *plain,
                              GError **error);

/* --- the blocks and settles of several sequences in one pass --- */

/* Room for the blocks (or the settles) of up to `max_sequences` contexts
 * (1 … DFL_OP_TABLE_MAX) in one pass: the stacked rows' scratch on the
 * bound weights' device, made at the first pass of each kind. DFL_ERROR_UNSUPPORTED (naming the op) where the device
 * lacks the table ops a batch needs (copy_rows_table, attention_table);
 * DFL_ERROR_INVALID for unbound weights or a size out of range. One
 * thread at a time. */
typedef struct _DflDraftBatch DflDraftBatch;
DflDraftBatch *dfl_draft_batch_new (DflDrafterWeights *bound, int max_sequences, GError **error);
void dfl_draft_batch_free (DflDraftBatch *batch);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (DflDraftBatch, dfl_draft_batch_free)
int dfl_draft_batch_capacity (const DflDraftBatch *batch);
/* The blocks of `n` contexts (each as dfl_draft_ctx_block drafts it:
 * anchor_pos[i], anchor[i], into out[i]) in one pass: their rows through
 * every matrix and the head together, each row's attention over its own
 * context. The contexts must be distinct and made from the batch's
 * weights. On the CPU every output is bitwise its context's block alone;
 * on a GPU within the products' rounding. FALSE with an error naming the
 * sequence (its index in the call) that was refused; a sequence refused
 * before the pass (its context short, its anchor or output bad) leaves
 * every output untouched. */
gboolean dfl_draft_ctx_block_batch (DflDraftBatch *batch, DflDraftCtx *const *ctxs, int n,
                                    const gint64 *anchor_pos, const guint32 *anchor, int width,
                                    const DflTensor *out, GError **error);
/* The drafted tokens of `n` contexts' blocks (each as dfl_draft_ctx_select
 * chooses them: blocks[i] at `width`, from anchor[i]; chosen and plain
 * n · (block − 1) ids, either may be NULL): every selection queued on the
 * device before the ids come back, so a GPU waits once. */
gboolean dfl_draft_ctx_select_batch (DflDraftBatch *batch, DflDraftCtx *const *ctxs, int n,
                                     const DflTensor *blocks, int width, const guint32 *anchor,
                                     guint32 *chosen, guint32 *plain, GError **error);
/* The waiting rows of `n` contexts (distinct, of the batch's weights)
 * settled in one pass (as dfl_draft_ctx_settle settles each: through FC
 * and every layer's keys and values, all rows together, each into its own
 * context): on the CPU every context's keys and values are bitwise its
 * settle alone's. Where more than DFL_DRAFTER_SETTLE_BATCH rows wait in
 * all (a prompt's), each context settles alone. A failure leaves the
 * contexts unusable until reset, as a settle's does. */
gboolean dfl_draft_ctx_settle_batch (DflDraftBatch *batch, DflDraftCtx *const *ctxs, int n,
                                     GError **error);

/* --- selection on the host --- */

/* The `k` largest of x (n values), largest first; the first of equals is
 * kept. Returns how many were written (min(k, n) less NaNs). */
int dfl_top_k (const float *x, int n, int k, float *values, guint32 *indices);
/* How many of a block's `rows` drafts to keep by their confidence: up to
 * (not including) the first row at which the product of the chosen tokens'
 * probabilities (each row's softmax over its `width` logits) falls below
 * `floor`. */
int dfl_draft_confident_rows (const float *logits, int rows, int width, const guint32 *chosen,
                              double floor);
/* The drafted tokens of `n` block rows (after the anchor's, after the last
 * norm) from their logits (`width` values a row: the head's first `width`
 * rows, selector_top ≤ width ≤ vocab). Each row's top selector_top
 * candidates are re-scored logit + (P[prev] ⊙ S·h) · C[cand] against the
 * token chosen before it, starting from `anchor`; ties keep the earlier
 * candidate. `plain`: every row's own argmax. Without a selector `chosen`
 * is the plain argmax. Either output may be NULL. Host weights (or weights
 * bound from them). */
void dfl_drafter_weights_select (const DflDrafterWeights *w, const float *hidden, int n,
                                 const float *logits, int width, guint32 anchor, guint32 *chosen,
                                 guint32 *plain);
/* The same with the selector's projection already made (`hp`: n rows of
 * selector_rank, S·h). */
void dfl_drafter_weights_select_with (const DflDrafterWeights *w, const float *hp, int n,
                                      const float *logits, int width, guint32 anchor,
                                      guint32 *chosen, guint32 *plain);
/* hp = hidden · Sᵀ: n rows of selector_rank. */
void dfl_drafter_weights_select_project (const DflDrafterWeights *w, const float *hidden, int n,
                                         float *hp);

/* --- the router --- */

gboolean dfl_drafter_weights_has_route (const DflDrafterWeights *w);
/* err_chain(u) − err_block(u), u = row / |row| (hidden values), err the
 * squared residual after projecting onto the subspace: above zero the round
 * is the block's. 0 without a router. */
float dfl_drafter_weights_route_margin (const DflDrafterWeights *w, const float *row);

G_END_DECLS
