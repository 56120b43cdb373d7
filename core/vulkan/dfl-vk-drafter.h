/* gst-dflash — the DFlash drafter on a Vulkan device.
 *
 * The same drafter as DflDrafter (drafter.h), its weights uploaded once, its
 * context (per-layer keys and values) kept on the device, and its block,
 * head and selector run as Vulkan compute (kernels/vulkan). The target stays
 * on the CPU: it hands context rows (taps) in host memory, and the block's
 * rows are embedded with the target's table and scored with its head, both
 * uploaded as the checkpoint stores them (F32, F16 or BF16).
 *
 * Weights: matrices as stored (16-bit ones stay 16-bit on the device),
 * vectors F32, codebooks F16; products accumulate in F32. The bookkeeping
 * of a context (queue / settle / truncate / windows / slack / the short
 * context check) is DflDrafter's, decision for decision, so a context fed
 * the same calls holds the same positions and refuses the same blocks.
 *
 * Threads: a DflVkDrafter is read-only once made and may serve several
 * contexts; each DflVkDraftCtx (one sequence) is used by one thread at a
 * time. Every call that runs on the device waits for it before returning.
 */
#pragma once

#include <glib.h>

#include "dfl-vk.h"
#include "dfl-kernels.h"
#include "drafter.h"
#include "target.h"

G_BEGIN_DECLS

typedef struct _DflVkDrafter DflVkDrafter;
typedef struct _DflVkDraftCtx DflVkDraftCtx;

/* Upload `d`'s weights, the target's embedding table (`embedding`:
 * [vocab][hidden]) and LM head (`head`: [rows][hidden], rows ≥ the widest
 * shortlist asked for; the same matrix as `embedding` when tied, uploaded
 * once). The host matrices may be freed afterwards; `d` is only read here.
 * Errors: DFL_ERROR_MISMATCH where the embedding or head do not fit the
 * drafter's hidden and vocab, DFL_ERROR_UNSUPPORTED where the geometry is
 * past what the kernels take (head_dim > 256, selector_top > 256), and the
 * device's errors (no room). */
DflVkDrafter *dfl_vk_drafter_new (DflVkDevice *dev, const DflDrafter *d,
                                  const DflWeights *embedding, const DflWeights *head,
                                  GError **error);
/* The same with the embedding and head of a loaded target. */
DflVkDrafter *dfl_vk_drafter_new_for_target (DflVkDevice *dev, const DflDrafter *d,
                                             const DflTarget *target, GError **error);
void dfl_vk_drafter_free (DflVkDrafter *vd);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (DflVkDrafter, dfl_vk_drafter_free)

DflVkDevice *dfl_vk_drafter_device (DflVkDrafter *vd);
const DflDrafterGeometry *dfl_vk_drafter_geometry (const DflVkDrafter *vd);
/* Bytes the drafter holds on the device (its weights, the embedding, the head). */
guint64 dfl_vk_drafter_device_bytes (const DflVkDrafter *vd);
/* Bytes a block's output takes at this head width: (block − 1) rows of
 * hidden F32, then (block − 1) rows of `width` logits F32. */
gsize dfl_vk_drafter_block_bytes (const DflVkDrafter *vd, int width);

/* --- a sequence's context --- */

DflVkDraftCtx *dfl_vk_draft_ctx_new (DflVkDrafter *vd, GError **error);
void dfl_vk_draft_ctx_free (DflVkDraftCtx *c);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (DflVkDraftCtx, dfl_vk_draft_ctx_free)

/* As dfl_drafter_next_position / _span / _reset / _truncate. */
gint64 dfl_vk_draft_ctx_next_position (const DflVkDraftCtx *c);
void dfl_vk_draft_ctx_span (const DflVkDraftCtx *c, gint64 *first, gint64 *end);
void dfl_vk_draft_ctx_reset (DflVkDraftCtx *c);
void dfl_vk_draft_ctx_truncate (DflVkDraftCtx *c, gint64 pos);
/* As dfl_drafter_queue_context (host taps, n_rows rows of n_taps·hidden).
 * Past DFL_DRAFTER_PENDING_ROWS waiting rows the oldest are settled on the
 * device, which may fail (FALSE with the device's error; the context is then
 * unusable until reset). */
gboolean dfl_vk_draft_ctx_queue (DflVkDraftCtx *c, gint64 pos, const float *taps, gsize n_rows,
                                 GError **error);
/* Make every waiting row context (keys and values on the device). */
gboolean dfl_vk_draft_ctx_settle (DflVkDraftCtx *c, GError **error);
/* As dfl_drafter_context_check. */
gboolean dfl_vk_draft_ctx_check (const DflVkDraftCtx *c, gint64 anchor_pos, GError **error);

/* A layer's settled keys and values for one KV head, read back (tests):
 * as dfl_drafter_context_kv, into k and v of *rows rows of head_dim (NULL:
 * just the counts; allocated with g_malloc, the caller frees them). */
gboolean dfl_vk_draft_ctx_read_kv (DflVkDraftCtx *c, int layer, int kv_head, float **k, float **v,
                                   gsize *rows, gint64 *from, GError **error);

/* --- the block, the head, the selector --- */

/* One block anchored at `anchor_pos` with token `anchor`: rows [anchor,
 * MASK × (block − 1)] embedded, the drafter's layers, the last norm, then
 * the head's first `width` rows (selector_top ≤ width ≤ vocab) over rows
 * 1 … block − 1. Into `out` (dfl_vk_drafter_block_bytes (width) bytes at
 * least, device or host memory): (block − 1) rows of hidden, then
 * (block − 1) × width logits. Waiting rows are settled first. FALSE (out
 * untouched) with DFL_ERROR_LIMIT where the context is short
 * (dfl_vk_draft_ctx_check), DFL_ERROR_INVALID for a bad token, width or
 * buffer, or the device's error. */
gboolean dfl_vk_draft_ctx_block (DflVkDraftCtx *c, gint64 anchor_pos, guint32 anchor, int width,
                                 DflVkBuffer *out, GError **error);
/* The drafted tokens of a block in `out` (as dfl_vk_draft_ctx_block left
 * it, at the same width): as dfl_drafter_select, on the device; only the
 * ids come back. `chosen` (re-scored; the plain argmax without a selector)
 * and `plain` (each row's argmax): block − 1 each; either may be NULL. */
gboolean dfl_vk_draft_ctx_select (DflVkDraftCtx *c, DflVkBuffer *out, int width, guint32 anchor,
                                  guint32 *chosen, guint32 *plain, GError **error);
/* Both in one submission: block then select. */
gboolean dfl_vk_draft_ctx_draft (DflVkDraftCtx *c, gint64 anchor_pos, guint32 anchor, int width,
                                 DflVkBuffer *out, guint32 *chosen, guint32 *plain,
                                 GError **error);

G_END_DECLS
