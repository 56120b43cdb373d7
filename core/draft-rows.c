/* gst-dflash — a context's tensors on the drafter's device: each layer's
 * keys and values (grown as the context grows, the dead rows in front let
 * go when it moves), the block's scratch, the selection's, and the index
 * tensors (positions, ids, key ranges, a windowed layer's gather) in one
 * area the device reads them from.
 */
#include "draft-forward.h"
#include "dfl-error.h"

#include <string.h>

/* Rows a layer's keys and values start with: a gather reads row 0 of a
 * layer that holds none yet, so there is always one. */
#define KV_FIRST_ROWS 64

static int
kv_width (const DflDrafterGeometry *g)
{
  return g->kv_heads * g->head_dim;
}

DflTensor
dfl_draft_param (DflDraftRun *run, gsize off, DflDtype dtype, gint64 n)
{
  /* one dimension: n elements */
  if (run->net->host_indices)
    return dfl_tensor_2d (NULL, run->params.host + off, 0, dtype, 1, n);
  return dfl_tensor_2d (run->dev, run->params.dev_mem, off, dtype, 1, n);
}

gboolean
dfl_draft_params_upload (DflDraftRun *run, gsize off, gsize bytes, GError **error)
{
  if (run->net->host_indices)
    return TRUE;
  return dfl_device_upload (run->dev, run->params.dev_mem, off, run->params.host + off, bytes,
                            error);
}

/* The area's layout: a position for the block and one for a settle, a
 * zero start row, the block's ids, each layer's key ranges, each windowed
 * layer's gather slots. */
static gboolean
params_init (DflDraftRun *run, GError **error)
{
  const DflDrafterGeometry *g = run->base.g;
  DflDraftParams *p = &run->params;
  gsize off = 0, b = g->block;

  p->off_pos = off;
  off += 16;
  p->off_settle_pos = off;
  off += 16;
  p->off_zero = off;
  off += 16;
  p->off_ids = off;
  off += dfl_draft_aligned (b * sizeof (gint32));
  p->off_lo = off;
  off += dfl_draft_aligned ((gsize) g->layers * b * sizeof (gint32));
  p->off_hi = off;
  off += dfl_draft_aligned ((gsize) g->layers * b * sizeof (gint32));
  p->off_gather = g_new0 (gsize, g->layers);
  for (int l = 0; l < g->layers; l++) {
    int w = dfl_drafter_geometry_window_of (g, l);
    if (w == 0)
      continue;
    p->off_gather[l] = off;
    off += dfl_draft_aligned ((gsize) w * sizeof (gint32));
  }
  p->bytes = off;
  p->host = g_malloc0 (off);
  if (run->net->host_indices)
    return TRUE;
  if (!(p->dev_mem = dfl_device_alloc (run->dev, off, error)))
    return FALSE;
  /* the zero start row stays zero */
  return dfl_draft_params_upload (run, 0, off, error);
}

DflTensor
dfl_draft_kv_rows (DflDraftRun *run, int layer, gboolean values, gsize row, gsize n)
{
  const DflDraftKv *c = &run->kv[layer];

  return dfl_tensor_2d (run->dev, values ? c->v_mem : c->k_mem,
                        row * kv_width (run->base.g) * sizeof (float), DFL_DTYPE_F32,
                        (gint64) n, kv_width (run->base.g));
}

DflTensor
dfl_draft_kv_all (DflDraftRun *run, int layer, gboolean values)
{
  return dfl_draft_kv_rows (run, layer, values, 0, run->kv[layer].front + run->kv[layer].cap);
}

static gboolean
kv_alloc (DflDraftRun *run, gsize rows, gpointer *k, gpointer *v, GError **error)
{
  gsize bytes = rows * kv_width (run->base.g) * sizeof (float);

  *k = dfl_device_alloc (run->dev, bytes, error);
  *v = *k ? dfl_device_alloc (run->dev, bytes, error) : NULL;
  if (*v)
    return TRUE;
  dfl_device_free (run->dev, *k);
  *k = NULL;
  return FALSE;
}

gboolean
dfl_draft_kv_reserve (DflDraftRun *run, int layer, gsize n, GError **error)
{
  DflDraftKv *c = &run->kv[layer];
  DflDraftLayerRows *rows = &run->base.rows[layer];
  gsize need = rows->held + n, cap = c->cap;
  gpointer k, v;

  if (rows->start + need <= c->cap)
    return TRUE;
  /* the dead rows in front (let go by drops) are reclaimed first, so a
   * long text does not grow the buffers; the rows move to new buffers
   * (the copy cannot overlap itself) */
  if (need > cap)
    cap = MAX (MAX (need, cap * 2), KV_FIRST_ROWS);
  if (!kv_alloc (run, c->front + cap, &k, &v, error))
    return FALSE;
  if (rows->held) {
    DflTensor zero = dfl_draft_param (run, run->params.off_zero, DFL_DTYPE_I64, 1);
    gsize from = c->front + rows->start;
    DflTensor src_k = dfl_draft_kv_rows (run, layer, FALSE, from, rows->held);
    DflTensor src_v = dfl_draft_kv_rows (run, layer, TRUE, from, rows->held);
    DflTensor dst_k = dfl_tensor_2d (run->dev, k, c->front * kv_width (run->base.g)
                                     * sizeof (float), DFL_DTYPE_F32, (gint64) cap,
                                     kv_width (run->base.g));
    DflTensor dst_v = dst_k;
    dst_v.handle = v;
    /* the old buffers are freed once the copies have read them */
    if (!dfl_op_copy_rows (run->dev, &src_k, &zero, &dst_k, error)
        || !dfl_op_copy_rows (run->dev, &src_v, &zero, &dst_v, error)
        || !dfl_op_sync (run->dev, error)) {
      dfl_device_free (run->dev, k);
      dfl_device_free (run->dev, v);
      return FALSE;
    }
  }
  dfl_device_free (run->dev, c->k_mem);
  dfl_device_free (run->dev, c->v_mem);
  c->k_mem = k;
  c->v_mem = v;
  c->cap = cap;
  rows->start = 0;
  /* a captured block read the old buffers */
  run->generation++;
  return TRUE;
}

/* The block's scratch: every tensor a block writes, carved from one
 * allocation. */
static gboolean
scratch_init (DflDraftRun *run, GError **error)
{
  const DflDrafterGeometry *g = run->base.g;
  gsize b = g->block, kd = kv_width (g);
  gsize pass = dfl_draft_aligned (dfl_draft_pass_bytes (g, run->net->conv, 1)), off = pass;
  gsize *win_off = g_new0 (gsize, g->layers);

  run->win_k = g_new0 (DflTensor, g->layers);
  run->win_v = g_new0 (DflTensor, g->layers);
  for (int l = 0; l < g->layers; l++) {
    int w = dfl_drafter_geometry_window_of (g, l);
    if (w == 0)
      continue;
    win_off[l] = off;
    off += 2 * dfl_draft_aligned (((gsize) w + b) * kd * sizeof (float));
  }
  if (!(run->scratch = dfl_device_alloc (run->dev, off, error))) {
    g_free (win_off);
    return FALSE;
  }
  dfl_draft_pass_place (&run->pass, run->dev, run->net, g, 1, run->scratch);
  for (int l = 0; l < g->layers; l++) {
    int w = dfl_drafter_geometry_window_of (g, l);
    gsize bytes = dfl_draft_aligned (((gsize) w + b) * kd * sizeof (float));
    if (w == 0)
      continue;
    run->win_k[l] = dfl_tensor_2d (run->dev, run->scratch, win_off[l], DFL_DTYPE_F32,
                                   (gint64) w + (gint64) b, kd);
    run->win_v[l] = dfl_tensor_2d (run->dev, run->scratch, win_off[l] + bytes,
                                   DFL_DTYPE_F32, (gint64) w + (gint64) b, kd);
  }
  g_free (win_off);
  return TRUE;
}

/* --- the waiting rows --- */

DflTensor
dfl_draft_pending_rows (DflDraftRun *run, gsize row, gsize n)
{
  gsize tw = dfl_drafter_geometry_tap_width (run->base.g);

  return dfl_tensor_2d (run->dev, run->pend_mem[0], row * tw * sizeof (float), DFL_DTYPE_F32,
                        (gint64) n, (gint64) tw);
}

/* Waiting rows [from, from + n) of the first buffer to the front of `dst`. */
static gboolean
move_pending (DflDraftRun *run, gsize from, gsize n, gpointer dst, GError **error)
{
  DflTensor zero = dfl_draft_param (run, run->params.off_zero, DFL_DTYPE_I64, 1);
  DflTensor src = dfl_draft_pending_rows (run, from, n);
  DflTensor to = src;

  to.handle = dst;
  to.offset = 0;
  return n == 0 || dfl_op_copy_rows (run->dev, &src, &zero, &to, error);
}

/* Room for `n` more waiting rows: bigger buffers, the rows moved over. */
static gboolean
pending_room (DflDraftRun *run, gsize n, GError **error)
{
  gsize tw = dfl_drafter_geometry_tap_width (run->base.g);
  gsize need = run->base.pending_rows + n, cap;
  gpointer mem[2] = { NULL, NULL };

  if (need <= run->pend_cap)
    return TRUE;
  cap = MAX (MAX (need, run->pend_cap * 2), (gsize) DFL_DRAFTER_CONTEXT_CHUNK);
  for (int i = 0; i < 2; i++)
    if (!(mem[i] = dfl_device_alloc (run->dev, cap * tw * sizeof (float), error)))
      goto fail;
  /* the old buffers go once the copy (and any queued settle) has read them */
  if (!move_pending (run, 0, run->base.pending_rows, mem[0], error)
      || !dfl_op_sync (run->dev, error))
    goto fail;
  for (int i = 0; i < 2; i++) {
    dfl_device_free (run->dev, run->pend_mem[i]);
    run->pend_mem[i] = mem[i];
  }
  run->pend_cap = cap;
  return TRUE;

fail:
  for (int i = 0; i < 2; i++)
    dfl_device_free (run->dev, mem[i]);
  return FALSE;
}

static gboolean
run_pend (DflDraftCtx *ctx, const DflTensor *taps, GError **error)
{
  DflDraftRun *run = (DflDraftRun *) ctx;
  gsize tw = dfl_drafter_geometry_tap_width (ctx->g), n = (gsize) taps->ne[1];
  gsize at = ctx->pending_rows * tw * sizeof (float);
  gboolean host = !taps->device || dfl_device_backend (taps->device) == DFL_BACKEND_CPU;
  gboolean packed = n <= 1 || taps->nb[1] == tw * sizeof (float);

  if (!pending_room (run, n, error))
    return FALSE;
  if (host) {
    const guint8 *src = dfl_tensor_data (taps);
    if (packed)
      return dfl_device_upload (run->dev, run->pend_mem[0], at, src, n * tw * sizeof (float),
                                error);
    for (gsize r = 0; r < n; r++)
      if (!dfl_device_upload (run->dev, run->pend_mem[0], at + r * tw * sizeof (float),
                              src + r * taps->nb[1], tw * sizeof (float), error))
        return FALSE;
    return TRUE;
  }
  {
    /* rows on the device: copied there, a row at a time where they are
     * spaced out */
    DflTensor zero = dfl_draft_param (run, run->params.off_zero, DFL_DTYPE_I64, 1);
    for (gsize r = 0; r < n; r += packed ? n : 1) {
      gsize m = packed ? n : 1;
      DflTensor src = dfl_tensor_2d (taps->device, taps->handle, taps->offset + r * taps->nb[1],
                                     DFL_DTYPE_F32, (gint64) m, (gint64) tw);
      DflTensor dst = dfl_draft_pending_rows (run, ctx->pending_rows + r, m);
      if (!dfl_op_copy_rows (run->dev, &src, &zero, &dst, error))
        return FALSE;
    }
  }
  return TRUE;
}

static void
run_unpend (DflDraftCtx *ctx, gsize n)
{
  DflDraftRun *run = (DflDraftRun *) ctx;
  GError *error = NULL;
  gpointer t;

  /* the rows that stay to the front of the other buffer, which becomes
   * the first: a copy cannot overlap itself */
  if (!move_pending (run, n, ctx->pending_rows - n, run->pend_mem[1], &error)) {
    /* shapes checked by the caller: a refusal here is a bug */
    g_critical ("%s: moving the waiting rows: %s", ctx->name, error->message);
    g_clear_error (&error);
    return;
  }
  t = run->pend_mem[0];
  run->pend_mem[0] = run->pend_mem[1];
  run->pend_mem[1] = t;
}

static gboolean
run_read_kv (DflDraftCtx *ctx, int layer, int kv_head, float **k, float **v, GError **error)
{
  DflDraftRun *run = (DflDraftRun *) ctx;
  const DflDraftLayerRows *rows = &ctx->rows[layer];
  gsize hd = (gsize) ctx->g->head_dim, kd = kv_width (ctx->g), n = rows->held;
  gsize from = (run->kv[layer].front + rows->start) * kd * sizeof (float);
  float **outs[2] = { k, v };
  float *all = g_new (float, MAX (n * kd, 1));

  for (int which = 0; which < 2; which++) {
    gpointer mem = which ? run->kv[layer].v_mem : run->kv[layer].k_mem;
    float *dst;
    if (!outs[which])
      continue;
    if (n && !dfl_device_download (run->dev, mem, from, all, n * kd * sizeof (float), error)) {
      g_free (all);
      return FALSE;
    }
    dst = g_new (float, MAX (n * hd, 1));
    for (gsize r = 0; r < n; r++)
      memcpy (dst + r * hd, all + r * kd + (gsize) kv_head * hd, hd * sizeof (float));
    *outs[which] = dst;
  }
  g_free (all);
  return TRUE;
}

static void
run_free (DflDraftCtx *ctx)
{
  DflDraftRun *run = (DflDraftRun *) ctx;

  for (int l = 0; run->kv && l < ctx->g->layers; l++) {
    dfl_device_free (run->dev, run->kv[l].k_mem);
    dfl_device_free (run->dev, run->kv[l].v_mem);
  }
  g_free (run->kv);
  g_clear_pointer (&run->graph, dfl_graph_free);
  if (run->dev) {
    dfl_device_free (run->dev, run->graph_out);
    dfl_device_free (run->dev, run->scratch);
    dfl_device_free (run->dev, run->settle_mem);
    dfl_device_free (run->dev, run->pick_mem);
    dfl_device_free (run->dev, run->pend_mem[0]);
    dfl_device_free (run->dev, run->pend_mem[1]);
    dfl_device_free (run->dev, run->params.dev_mem);
  }
  g_free (run->params.host);
  g_free (run->params.off_gather);
  g_free (run->win_k);
  g_free (run->win_v);
  g_clear_pointer (&run->dev, dfl_device_unref);
}

static const DflDraftCtxOps run_ops = {
  .pend = run_pend,
  .unpend = run_unpend,
  .settle = dfl_draft_run_settle,
  .block = dfl_draft_run_block,
  .select = dfl_draft_run_select,
  .read_kv = run_read_kv,
  .free = run_free,
};

DflDraftCtx *
dfl_draft_run_new (DflDrafterWeights *bound, GError **error)
{
  DflDraftRun *run = dfl_draft_ctx_alloc (sizeof (DflDraftRun), &run_ops, bound);
  const DflDrafterGeometry *g = run->base.g;

  run->net = bound->native;
  run->dev = dfl_device_ref (run->net->dev);
  run->kv = g_new0 (DflDraftKv, g->layers);
  if (!params_init (run, error) || !scratch_init (run, error))
    goto fail;
  for (int l = 0; l < g->layers; l++) {
    DflDraftKv *c = &run->kv[l];
    /* a layer that sees all its context keeps the block's keys in front of it */
    c->front = dfl_drafter_geometry_window_of (g, l) == 0 ? (gsize) g->block : 0;
    c->cap = KV_FIRST_ROWS;
    if (!kv_alloc (run, c->front + c->cap, &c->k_mem, &c->v_mem, error))
      goto fail;
  }
  return &run->base;

fail:
  dfl_draft_ctx_free (&run->base);
  return NULL;
}
