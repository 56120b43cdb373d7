/* gst-dflash — the DFlash drafter on a CUDA device: its weights, a context
 * per sequence, the block and the selection, all on the card.
 *
 * The math and the bookkeeping are the CPU drafter's (core/drafter.h,
 * DESIGN.md "The math"): the same windows, the same
 * DFL_DRAFTER_BLOCK_SLACK kept past them, the same refusal of a block whose
 * context is no longer held. A round keeps everything on the device: the
 * target's taps go in as device rows, the block's rows and logits stay in a
 * device buffer, and only token ids and positions cross the bus.
 *
 * The block is captured once as a CUDA graph and replayed: every value that
 * changes from round to round (the anchor's position and id, the key ranges
 * of each row, the context rows a windowed layer reads) lives in device
 * memory the kernels read. A graph is captured again when a context buffer
 * is reallocated or the width changes; it writes the drafter's own buffer,
 * copied to the caller's after each replay, so any output buffer will do.
 *
 * Not thread-safe: one caller at a time per drafter (a drafter's contexts
 * share its scratch).
 */
#pragma once

#include <glib.h>
#include "drafter.h"
#include "dfl-cuda.h"

G_BEGIN_DECLS

typedef struct _DflCudaDrafter DflCudaDrafter;
typedef struct _DflCudaDraftCtx DflCudaDraftCtx;

/* Upload `d`'s weights to `dev`. Matrices: with `weights_as` DFL_DTYPE_F32
 * all as F32 (F32 products: parity with the CPU); with F16 or BF16 each F16
 * or BF16 matrix as stored (multiplied on the tensor cores) and each F32 one
 * converted to `weights_as`. Vectors F32, codebooks F16.
 * `embed` and `head` are the target's token embedding and head on the same
 * device ([vocab][hidden]); they are borrowed, not copied, and must outlive
 * the drafter. The drafter's geometry must match them (hidden, vocab). */
DflCudaDrafter *dfl_cuda_drafter_new (DflCudaDevice *dev, const DflDrafterWeights *d,
                                      const DflCudaWeights *embed, const DflCudaWeights *head,
                                      DflDtype weights_as, GError **error);
/* The type the drafter's fc matrix is stored in (as a DflDtype): what to
 * pass as `weights_as` for "as stored". */
DflDtype dfl_cuda_drafter_stored_type (const DflDrafterWeights *d);
/* A drafter of geometry `g` whose weights are made on the card (uniform,
 * scaled by 1/sqrt(fan-in); norm weights one; convolution base kernels a
 * sane identity-like start), for benches: no file, no host copy. */
DflCudaDrafter *dfl_cuda_drafter_new_random (DflCudaDevice *dev, const DflDrafterGeometry *g,
                                             gboolean conv, gboolean selector,
                                             DflDtype weights_as, const DflCudaWeights *embed,
                                             const DflCudaWeights *head, guint64 seed,
                                             GError **error);
void dfl_cuda_drafter_free (DflCudaDrafter *cd);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (DflCudaDrafter, dfl_cuda_drafter_free)

const DflDrafterGeometry *dfl_cuda_drafter_geometry (const DflCudaDrafter *cd);
DflCudaDevice *dfl_cuda_drafter_device (const DflCudaDrafter *cd);
gboolean dfl_cuda_drafter_has_selector (const DflCudaDrafter *cd);
/* Bytes of weights on the device (what a block streams, less the head). */
guint64 dfl_cuda_drafter_weight_bytes (const DflCudaDrafter *cd);

/* Upload a CPU target's embedding and head (F32, or converted to `as` on the
 * card) for tests and CPU-target pipelines: `*embed` and `*head` point into
 * one allocation returned in `*d_mem` (free with dfl_cuda_free); a tied head
 * is the embedding. */
gboolean dfl_cuda_upload_target_trunk (DflCudaDevice *dev, const DflSafetensors *target,
                                       gboolean tied, int vocab, int hidden, DflDtype as,
                                       DflCudaWeights *embed, DflCudaWeights *head,
                                       void **d_mem, GError **error);

/* --- the context of one sequence --- */

DflCudaDraftCtx *dfl_cuda_draft_ctx_new (DflCudaDrafter *cd, GError **error);
void dfl_cuda_draft_ctx_free (DflCudaDraftCtx *ctx);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (DflCudaDraftCtx, dfl_cuda_draft_ctx_free)

/* As dfl_drafter_next_position / span / reset / truncate. */
gint64 dfl_cuda_draft_ctx_next_position (const DflCudaDraftCtx *ctx);
void dfl_cuda_draft_ctx_span (const DflCudaDraftCtx *ctx, gint64 *first, gint64 *end);
void dfl_cuda_draft_ctx_reset (DflCudaDraftCtx *ctx);
void dfl_cuda_draft_ctx_truncate (DflCudaDraftCtx *ctx, gint64 pos);
/* As dfl_drafter_queue_context, the taps already on the device: `n_rows`
 * rows of n_taps·hidden floats (the taps joined in the geometry's order), a
 * row every `ld` floats (0: packed). Rows at held positions replace them
 * and what follows; a gap, or a position before the context's first, starts
 * the context over at `pos`. Copied (on the stream) before this returns to
 * the stream's order: the caller may overwrite d_taps with later work on
 * the same stream. FALSE with an error if the device has no room. */
gboolean dfl_cuda_draft_ctx_queue (DflCudaDraftCtx *ctx, gint64 pos, const float *d_taps,
                                   gsize ld, gsize n_rows, GError **error);
/* The same from host rows (a CPU target's taps; tests). */
gboolean dfl_cuda_draft_ctx_queue_host (DflCudaDraftCtx *ctx, gint64 pos, const float *taps,
                                        gsize n_rows, GError **error);
/* Make every waiting row context (batches of DFL_DRAFTER_SETTLE_BATCH). */
gboolean dfl_cuda_draft_ctx_settle (DflCudaDraftCtx *ctx, GError **error);
/* As dfl_drafter_context_check (the same messages, naming the drafter). */
gboolean dfl_cuda_draft_ctx_check (const DflCudaDraftCtx *ctx, gint64 anchor_pos,
                                   GError **error);
/* A layer's settled keys or values, downloaded (tests): `rows` rows of
 * kv_heads·head_dim for positions from `*from` on. Returns a g_malloc'd
 * buffer, or NULL with an error. */
float *dfl_cuda_draft_ctx_download_kv (DflCudaDraftCtx *ctx, int layer, gboolean values,
                                       gsize *rows, gint64 *from, GError **error);

/* --- the block --- */

/* Floats of a block's output at `width`: (block − 1) · (hidden + width). */
gsize dfl_cuda_draft_block_floats (const DflCudaDrafter *cd, int width);

/* One block anchored at `anchor_pos` with token `anchor`: waiting rows are
 * settled first; then into d_out (device, dfl_cuda_draft_block_floats)
 * the block's rows after the anchor's, after the last norm ((block − 1) ·
 * hidden), followed by their logits over the head's first `width` rows
 * ((block − 1) · width). The block's parameters (positions, key ranges,
 * ids) go up in one copy, which waits for the stream's earlier work; the
 * block itself is enqueued, not waited for. FALSE (nothing enqueued)
 * where the context is short (dfl_cuda_draft_ctx_check), the anchor or the
 * width is out of range, or a capture failed. */
gboolean dfl_cuda_draft_block (DflCudaDraftCtx *ctx, gint64 anchor_pos, guint32 anchor, int width,
                               float *d_out, GError **error);
/* Whether blocks replay a captured graph (default TRUE) or launch their
 * kernels one by one (the same work; tests compare the two). */
void dfl_cuda_drafter_set_use_graph (DflCudaDrafter *cd, gboolean use_graph);

/* --- selection --- */

/* The drafted tokens of a block (d_block as dfl_cuda_draft_block wrote it at
 * `width`): with a selector, each row's top selector_top candidates
 * re-scored against the token chosen before it, starting from `anchor`
 * (dfl_drafter_select); without one, the argmax. `chosen`, `plain` (host,
 * block − 1 each; either may be NULL): as dfl_drafter_select's. Waits for
 * the stream (the ids come back). */
gboolean dfl_cuda_draft_select (DflCudaDrafter *cd, const float *d_block, int width,
                                guint32 anchor, guint32 *chosen, guint32 *plain, GError **error);

G_END_DECLS
