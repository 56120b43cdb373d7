/* gst-dflash — the block's tokens, picked on the drafter's device: each
 * row's top selector_top logits (top-k), and with a selector their
 * re-scoring against the token chosen before (DESIGN.md: logit + (P[prev]
 * ⊙ S·h) · C[cand], a chain from the anchor); without one the top logit.
 * Only the ids come back to the host.
 */
#include "draft-forward.h"
#include "dfl-error.h"

/* The selection's scratch: hp [n][rank], values and ids [n][top], chosen [n]. */
typedef struct {
  gsize hp, vals, ids, chosen, bytes;
} PickLayout;

static PickLayout
pick_layout (const DflDrafterGeometry *g, int top, gboolean selector)
{
  gsize n = (gsize) g->block - 1;
  PickLayout p;

  p.hp = 0;
  p.vals = dfl_draft_aligned (n * (selector ? g->selector_rank : 1) * sizeof (float));
  p.ids = p.vals + dfl_draft_aligned (n * top * sizeof (float));
  p.chosen = p.ids + dfl_draft_aligned (n * top * sizeof (gint32));
  p.bytes = p.chosen + n * sizeof (gint32);
  return p;
}

/* A context's selection sizes: rows, candidates a row, the scratch. */
static PickLayout
run_layout (const DflDraftRun *run, int *n, int *top)
{
  const DflDrafterGeometry *g = run->base.g;

  *n = g->block - 1;
  *top = run->net->selector ? g->selector_top : 1;
  return pick_layout (g, *top, run->net->selector);
}

/* The selection's work queued on the device (top-k, the selector's
 * projection and re-scoring) into the context's pick scratch. */
gboolean
dfl_draft_run_pick (DflDraftCtx *ctx, const DflTensor *block, int width, guint32 anchor,
                    GError **error)
{
  DflDraftRun *run = (DflDraftRun *) ctx;
  const DflDraftNet *net = run->net;
  const DflDrafterGeometry *g = ctx->g;
  DflDevice *dev = run->dev;
  int n, top;
  PickLayout p = run_layout (run, &n, &top);
  DflTensor hidden = dfl_tensor_2d (block->device, block->handle, block->offset, DFL_DTYPE_F32,
                                    n, g->hidden);
  DflTensor logits = dfl_tensor_2d (block->device, block->handle,
                                    block->offset + (gsize) n * g->hidden * sizeof (float),
                                    DFL_DTYPE_F32, n, width);
  DflTensor hp, vals, ids, picked;

  if (!run->pick_mem && !(run->pick_mem = dfl_device_alloc (dev, p.bytes, error)))
    return FALSE;
  hp = dfl_tensor_2d (dev, run->pick_mem, p.hp, DFL_DTYPE_F32, n, MAX (g->selector_rank, 1));
  vals = dfl_tensor_2d (dev, run->pick_mem, p.vals, DFL_DTYPE_F32, n, top);
  ids = dfl_tensor_2d (dev, run->pick_mem, p.ids, DFL_DTYPE_I32, n, top);
  picked = dfl_tensor_2d (dev, run->pick_mem, p.chosen, DFL_DTYPE_I32, 1, n);
  return dfl_op_top_k (dev, &logits, &vals, &ids, error)
         && (!net->selector
             || (dfl_op_matmul (dev, &net->sel, &hidden, &hp, FALSE, error)
                 && dfl_op_select_rescore (dev, &ids, &vals, &hp, &net->books[0],
                                           &net->books[1], &picked, (gint32) anchor, error)));
}

/* The picked ids back to the host (the download waits for the pick). */
gboolean
dfl_draft_run_picked (DflDraftCtx *ctx, guint32 *chosen, guint32 *plain, GError **error)
{
  DflDraftRun *run = (DflDraftRun *) ctx;
  gboolean selector = run->net->selector;
  DflDevice *dev = run->dev;
  int n, top;
  PickLayout p = run_layout (run, &n, &top);
  gint32 *host_ids, *host_chosen;

  host_ids = g_new (gint32, (gsize) n * top);
  host_chosen = g_new (gint32, n);
  if (!dfl_device_download (dev, run->pick_mem, p.ids, host_ids,
                            (gsize) n * top * sizeof (gint32), error)
      || (selector && !dfl_device_download (dev, run->pick_mem, p.chosen, host_chosen,
                                                 (gsize) n * sizeof (gint32), error))) {
    g_free (host_ids);
    g_free (host_chosen);
    return FALSE;
  }
  for (int j = 0; j < n; j++) {
    /* a row with no candidate (its logits all NaN) chooses token 0 */
    gint32 best = MAX (host_ids[(gsize) j * top], 0);
    if (plain)
      plain[j] = (guint32) best;
    if (chosen)
      chosen[j] = (guint32) (selector ? host_chosen[j] : best);
  }
  g_free (host_ids);
  g_free (host_chosen);
  return TRUE;
}

gboolean
dfl_draft_run_select (DflDraftCtx *ctx, const DflTensor *block, int width, guint32 anchor,
                      guint32 *chosen, guint32 *plain, GError **error)
{
  return dfl_draft_run_pick (ctx, block, width, anchor, error)
         && dfl_draft_run_picked (ctx, chosen, plain, error);
}
