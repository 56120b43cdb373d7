/* gst-dflash — settling context rows into the drafter's keys and values:
 * t = rms(FC · taps, hidden_norm), then for every layer K = rope(rms_head(Wk
 * · t, k_norm)) and V = Wv · t, written straight into the layer's rows
 * after the held ones. A batch goes through each matrix in one product
 * (DFL_DRAFTER_SETTLE_BATCH rows); the products are batch-invariant, so
 * how the rows are batched (a prompt at once, a round's few rows, a settle
 * forced by the pending limit) changes no key or value.
 */
#include "draft-forward.h"
#include "dfl-error.h"

/* Room for a batch's rows of hidden. */
static gboolean
settle_room (DflDraftRun *run, gsize batch, GError **error)
{
  const DflDrafterGeometry *g = run->base.g;
  if (batch <= run->settle_cap)
    return TRUE;
  /* the old room is let go once the queued work has read it */
  if (run->settle_mem && !dfl_op_sync (run->dev, error))
    return FALSE;
  dfl_device_free (run->dev, run->settle_mem);
  run->settle_cap = 0;
  batch = MAX (batch, (gsize) DFL_DRAFTER_CONTEXT_CHUNK);
  if (!(run->settle_mem = dfl_device_alloc (run->dev, batch * g->hidden * sizeof (float), error)))
    return FALSE;
  run->settle_cap = batch;
  return TRUE;
}

gboolean
dfl_draft_settle_in (const DflDraftNet *net, const DflDrafterGeometry *g, DflDevice *dev,
                     const DflTensor *taps, DflTensor *t, GError **error)
{
  return dfl_op_matmul (dev, &net->fc, taps, t, FALSE, error)
         && dfl_op_rmsnorm (dev, t, &net->hidden_norm, t, (float) g->eps, error);
}

gboolean
dfl_draft_settle_layer (const DflDraftNet *net, const DflDrafterGeometry *g, DflDevice *dev,
                        int l, const DflTensor *t, DflTensor *k, DflTensor *v,
                        const DflTensor *pos, GError **error)
{
  const DflDraftLayerNet *L = &net->layers[l];
  int kv = g->kv_heads;
  DflTensor k_heads = dfl_draft_heads (k, kv);
  DflTensor k_rows = dfl_tensor_2d (dev, k->handle, k->offset, DFL_DTYPE_F32, k->ne[1] * kv,
                                    g->head_dim);

  if (!(dfl_op_matmul (dev, &L->k, t, k, FALSE, error)
        && dfl_op_matmul (dev, &L->v, t, v, FALSE, error)))
    return FALSE;
  /* k normed per head, then roped where the layer is rotary */
  return dfl_drafter_geometry_rotary (g, l)
         ? dfl_op_norm_rope (dev, &k_heads, &L->k_norm, &net->inv_freq, pos, (float) g->eps, error)
         : dfl_op_rmsnorm (dev, &k_rows, &L->k_norm, &k_rows, (float) g->eps, error);
}

gboolean
dfl_draft_run_settle (DflDraftCtx *ctx, gsize n, GError **error)
{
  DflDraftRun *run = (DflDraftRun *) ctx;
  const DflDrafterGeometry *g = ctx->g;
  DflDevice *dev = run->dev;
  gsize batch = MIN (n, (gsize) DFL_DRAFTER_SETTLE_BATCH);
  DflTensor pos = dfl_draft_param (run, run->params.off_settle_pos, DFL_DTYPE_I64, 1);

  if (n == 0)
    return TRUE;
  if (!settle_room (run, batch, error))
    return FALSE;
  for (gsize done = 0; done < n; done += batch) {
    gsize nb = MIN (batch, n - done);
    DflTensor taps = dfl_draft_pending_rows (run, done, nb);
    DflTensor t = dfl_tensor_2d (dev, run->settle_mem, 0, DFL_DTYPE_F32, (gint64) nb, g->hidden);

    /* the position the rope reads (an upload waits for the last batch's
     * rope to have read it) */
    *(gint64 *) (run->params.host + run->params.off_settle_pos) = ctx->first + ctx->len;
    if (!dfl_draft_params_upload (run, run->params.off_settle_pos, sizeof (gint64), error)
        || !dfl_draft_settle_in (run->net, g, dev, &taps, &t, error))
      return FALSE;
    /* each layer's keys and values straight into its rows after the held ones */
    for (int l = 0; l < g->layers; l++) {
      DflDraftLayerRows *rows = &ctx->rows[l];
      DflTensor k, v;
      gsize at;
      if (!dfl_draft_kv_reserve (run, l, nb, error))
        return FALSE;
      at = run->kv[l].front + rows->start + rows->held;
      k = dfl_draft_kv_rows (run, l, FALSE, at, nb);
      v = dfl_draft_kv_rows (run, l, TRUE, at, nb);
      if (!dfl_draft_settle_layer (run->net, g, dev, l, &t, &k, &v, &pos, error))
        return FALSE;
    }
    dfl_draft_ctx_settled (ctx, nb);
  }
  return TRUE;
}
