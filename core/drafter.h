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
 * held is refused (dfl_drafter_context_check) instead of drafted short.
 *
 * A DflDrafter is not thread-safe: one caller at a time.
 */
#pragma once

#include <glib.h>
#include "safetensors.h"

G_BEGIN_DECLS

/* Positions past a layer's window a windowed layer still holds: a rewind of
 * up to this many positions (from the furthest the context reached) stays
 * exact. Rows are dropped lazily: when a layer holds more than
 * 2·(window + BLOCK_SLACK) rows it is cut back to window + BLOCK_SLACK. */
#define DFL_DRAFTER_BLOCK_SLACK 256
/* Rows that may wait unsettled (dfl_drafter_queue_context); past that the
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

typedef struct _DflDrafter DflDrafter;

/* `path`: a sidecar file, a released v1 drafter's folder, or a target folder
 * holding dflash.safetensors. */
DflDrafter *dfl_drafter_open (const char *path, GError **error);
/* A drafter of this geometry with every weight zero (norm weights one), for
 * benches and tests that fill the weights themselves
 * (dfl_drafter_foreach_weight). `conv` / `selector`: whether it has them.
 * Its matrices are F32. */
DflDrafter *dfl_drafter_new_blank (const DflDrafterGeometry *g, gboolean conv,
                                   gboolean selector, GError **error);
/* The same with matrices of `matrix_dtype` (F32, F16 or BF16; released
 * drafters are BF16); vectors F32, codebooks F16 as always. */
DflDrafter *dfl_drafter_new_blank_as (const DflDrafterGeometry *g, gboolean conv,
                                      gboolean selector, DflDtype matrix_dtype, GError **error);
void dfl_drafter_free (DflDrafter *d);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (DflDrafter, dfl_drafter_free)

const DflDrafterGeometry *dfl_drafter_geometry (const DflDrafter *d);
const char *dfl_drafter_path (const DflDrafter *d);
gboolean dfl_drafter_is_v1 (const DflDrafter *d);
gboolean dfl_drafter_has_conv (const DflDrafter *d);
gboolean dfl_drafter_has_selector (const DflDrafter *d);

/* Every weight as held in memory: matrices in their stored dtype (F32, F16
 * or BF16), vectors F32, codebooks F16. `data` may be written only where
 * `writable` (a buffer the drafter allocated: a blank drafter's, a vector
 * converted at load; never the mapped file). */
typedef void (*DflDrafterWeightFunc) (const char *name, DflDtype dtype, gsize n_elements,
                                      void *data, gboolean writable, gpointer user_data);
void dfl_drafter_foreach_weight (DflDrafter *d, DflDrafterWeightFunc func, gpointer user_data);
/* Bytes of weights as held in memory: matrices as stored (what a block
 * streams, roughly), vectors as F32. */
guint64 dfl_drafter_weight_bytes (const DflDrafter *d);

/* --- binding to the target --- */

/* 64-bit FNV-1a over model.embed_tokens.weight's data bytes, then, where the
 * head is untied, lm_head.weight's; of each its whole bytes when at most
 * 2 MiB, else its first MiB then its last MiB. `hex`: 16 lowercase digits. */
gboolean dfl_trunk_hash64 (const DflSafetensors *target, gboolean tied, char hex[17],
                           GError **error);
/* The sidecar's base_binding.trunk_hash64, or NULL (v1 drafters have none). */
const char *dfl_drafter_binding (const DflDrafter *d);
/* Refuse a drafter made for another target: its target_layers, hidden and
 * vocab must be the target's, and a sidecar's binding must be the target's
 * trunk hash. A v1 drafter is checked on the sizes alone. */
gboolean dfl_drafter_check_target (const DflDrafter *d, const DflSafetensors *target,
                                   gboolean tied, int target_layers, int hidden, int vocab,
                                   GError **error);

/* --- context (the reference's bookkeeping) --- */

/* The position the next context row belongs to (waiting rows included). */
gint64 dfl_drafter_next_position (const DflDrafter *d);
/* The positions the context covers: [first, next_position). */
void dfl_drafter_span (const DflDrafter *d, gint64 *first, gint64 *end);
void dfl_drafter_reset (DflDrafter *d);
/* Forget the context from position `pos` on (a rewind of the target). */
void dfl_drafter_truncate (DflDrafter *d, gint64 pos);
/* Add the target's rows of positions pos … pos+n_rows−1 (`taps`: n_rows rows
 * of n_taps·hidden, the taps joined in the geometry's order). Rows at held
 * positions replace them and what follows; a gap, or a position before the
 * context's first, starts the context over at `pos`. The rows wait
 * (at most DFL_DRAFTER_PENDING_ROWS) until settled. */
void dfl_drafter_queue_context (DflDrafter *d, gint64 pos, const float *taps, gsize n_rows);
/* Make every waiting row context. */
void dfl_drafter_settle (DflDrafter *d);
/* queue then settle. */
void dfl_drafter_push_context (DflDrafter *d, gint64 pos, const float *taps, gsize n_rows);
/* Whether a block anchored at `anchor_pos` would see every context row it
 * should: the context must reach the anchor (no gap), start at or before it,
 * and each windowed layer must still hold the rows its window reaches (a
 * rewind deeper than DFL_DRAFTER_BLOCK_SLACK loses them). FALSE with a
 * DFL_ERROR_LIMIT error saying what is missing and from where to queue the
 * target's rows again (a reset then queue from there restarts it). */
gboolean dfl_drafter_context_check (const DflDrafter *d, gint64 anchor_pos, GError **error);
/* A layer's settled keys and values for one KV head: `rows` rows of head_dim
 * for positions from `from` on (the first position the layer holds). */
void dfl_drafter_context_kv (const DflDrafter *d, int layer, int kv_head,
                             const float **k, const float **v, gsize *rows, gint64 *from);

/* --- the block --- */

/* One block anchored at `anchor_pos`: `h` holds block rows of hidden, the
 * target's embeddings of [anchor, MASK × (block − 1)]; on return the rows
 * after the last norm (row j ≥ 1 drafts the token at anchor_pos + j).
 * Waiting rows are settled first. FALSE (h untouched) where the context is
 * short (dfl_drafter_context_check). */
gboolean dfl_drafter_block (DflDrafter *d, gint64 anchor_pos, float *h, GError **error);

/* --- selection --- */

/* The `k` largest of x (n values), largest first; the first of equals is
 * kept. Returns how many were written (min(k, n) less NaNs). */
int dfl_top_k (const float *x, int n, int k, float *values, guint32 *indices);
/* The drafted tokens of `n` block rows (after the anchor's, after the last
 * norm) from their logits (`width` values a row: the head's first `width`
 * rows, selector_top ≤ width ≤ vocab). Each row's top selector_top
 * candidates are re-scored logit + (P[prev] ⊙ S·h) · C[cand] against the
 * token chosen before it, starting from `anchor`; ties keep the earlier
 * candidate. `plain`: every row's own argmax. Without a selector `chosen`
 * is the plain argmax. Either output may be NULL. */
void dfl_drafter_select (const DflDrafter *d, const float *hidden, int n, const float *logits,
                         int width, guint32 anchor, guint32 *chosen, guint32 *plain);
/* The same with the selector's projection already made (`hp`: n rows of
 * selector_rank, S·h). */
void dfl_drafter_select_with (const DflDrafter *d, const float *hp, int n, const float *logits,
                              int width, guint32 anchor, guint32 *chosen, guint32 *plain);
/* hp = hidden · Sᵀ: n rows of selector_rank. */
void dfl_drafter_select_project (const DflDrafter *d, const float *hidden, int n, float *hp);

/* --- the router --- */

gboolean dfl_drafter_has_route (const DflDrafter *d);
/* err_chain(u) − err_block(u), u = row / |row| (hidden values), err the
 * squared residual after projecting onto the subspace: above zero the round
 * is the block's. 0 without a router. */
float dfl_drafter_route_margin (const DflDrafter *d, const float *row);

G_END_DECLS
