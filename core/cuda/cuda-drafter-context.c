/* gst-dflash — a sequence's drafter context on the device: each layer's
 * key and value rows held on the card, settled there; the bookkeeping is
 * draft-context.c's.
 *
 * A layer's rows are [position][kv_heads·head_dim] for K and for V (the
 * layout the attention kernel reads). A layer that sees all its context
 * keeps `block` rows in front of its first row for the block's own keys
 * and values, so one key range covers the context and the block.
 */
#include "cuda-drafter-private.h"
#include "dfl-error.h"

#include <string.h>

static gsize
kv_row_bytes (const DflCudaDrafter *cd)
{
  return (gsize) cd->g->kv_heads * cd->g->head_dim * sizeof (float);
}

static gsize
align_up (gsize n)
{
  return (n + 7) / 8 * 8;
}

/* Room for the rows a block's kernels read on the device: the anchor's
 * position, the block's ids, every layer's key ranges, the rows a windowed
 * layer gathers. */
static gboolean
alloc_param (DflCudaDraftCtx *ctx, GError **error)
{
  const DflDrafterGeometry *g = ctx->cd->g;
  gsize off = 0;

  ctx->off_gather = g_new0 (gsize, g->layers);
  ctx->off_pos = off;
  off += 8;
  ctx->off_ids = off;
  off = align_up (off + (gsize) g->block * 4);
  ctx->off_lo = off;
  off = align_up (off + (gsize) g->layers * g->block * 4);
  ctx->off_hi = off;
  off = align_up (off + (gsize) g->layers * g->block * 4);
  for (int l = 0; l < g->layers; l++) {
    int w = dfl_drafter_geometry_window_of (g, l);
    ctx->off_gather[l] = off;
    off = align_up (off + (gsize) w * 4);
  }
  ctx->param_bytes = off;
  ctx->h_param = g_malloc0 (off);
  return (ctx->d_param = dfl_cuda_alloc (ctx->cd->dev, off, error)) != NULL;
}

/* A layer's buffers of `front + cap` rows, K and V. */
static gboolean
alloc_layer (DflCudaDraftCtx *ctx, DflCudaLayerCtx *c, gsize cap, float **k, float **v,
             GError **error)
{
  gsize bytes = (c->front + cap) * kv_row_bytes (ctx->cd);

  *k = dfl_cuda_alloc (ctx->cd->dev, bytes, error);
  *v = *k ? dfl_cuda_alloc (ctx->cd->dev, bytes, error) : NULL;
  if (!*v) {
    dfl_cuda_free (ctx->cd->dev, *k);
    return FALSE;
  }
  /* defined values in rows nothing has written yet: a gather may copy them
   * (outside every key range, but copied all the same) */
  dfl_cuda_memset (ctx->cd->dev, *k, 0, bytes);
  dfl_cuda_memset (ctx->cd->dev, *v, 0, bytes);
  return TRUE;
}

static void
cuda_ctx_free (DflDraftCtx *base)
{
  DflCudaDraftCtx *ctx = (DflCudaDraftCtx *) base;
  DflCudaDevice *dev = ctx->cd->dev;

  dfl_cuda_drafter_hold (ctx->cd);
  dfl_cuda_sync (dev, NULL);
  dfl_cuda_draft_ctx_drop_graph (ctx);
  for (int l = 0; ctx->layers && l < base->g->layers; l++) {
    dfl_cuda_free (dev, ctx->layers[l].d_k);
    dfl_cuda_free (dev, ctx->layers[l].d_v);
  }
  g_free (ctx->layers);
  dfl_cuda_free (dev, ctx->d_pending);
  dfl_cuda_free (dev, ctx->d_pending2);
  dfl_cuda_free (dev, ctx->d_param);
  dfl_cuda_free (dev, ctx->d_settle_pos);
  g_free (ctx->h_param);
  g_free (ctx->off_gather);
  dfl_cuda_drafter_release (ctx->cd);
}

/* Room for `n` more rows after the live ones. Dead rows in front (let go by
 * drops) are reclaimed first; a move whose source and destination overlap
 * (a device copy may not) goes through a new buffer instead, as growth does.
 * A new buffer makes any captured graph stale. */
static gboolean
reserve_rows (DflCudaDraftCtx *ctx, DflCudaLayerCtx *c, DflDraftLayerRows *rows, gsize n,
              GError **error)
{
  DflCudaDevice *dev = ctx->cd->dev;
  gsize rb = kv_row_bytes (ctx->cd), need = rows->held + n, cap;
  float *k, *v;

  if (rows->start + need <= c->cap)
    return TRUE;
  if (need <= c->cap && rows->start >= rows->held) {
    gsize from = (c->front + rows->start) * rb / sizeof (float), to = c->front * rb / sizeof (float);
    if (rows->held) {
      dfl_cuda_copy_d2d (dev, c->d_k + to, c->d_k + from, rows->held * rb);
      dfl_cuda_copy_d2d (dev, c->d_v + to, c->d_v + from, rows->held * rb);
    }
    rows->start = 0;
    return TRUE;
  }
  cap = need <= c->cap ? c->cap : MAX (MAX (need, c->cap * 2), 64);
  if (!alloc_layer (ctx, c, cap, &k, &v, error))
    return FALSE;
  if (rows->held) {
    gsize from = (c->front + rows->start) * rb / sizeof (float), to = c->front * rb / sizeof (float);
    dfl_cuda_copy_d2d (dev, k + to, c->d_k + from, rows->held * rb);
    dfl_cuda_copy_d2d (dev, v + to, c->d_v + from, rows->held * rb);
  }
  /* cudaFree waits for the device: the copies above are done before the
   * old rows go */
  dfl_cuda_free (dev, c->d_k);
  dfl_cuda_free (dev, c->d_v);
  c->d_k = k;
  c->d_v = v;
  c->cap = cap;
  rows->start = 0;
  ctx->generation++;
  return TRUE;
}

/* Settle the first `n` waiting rows (device, packed) at the context's end:
 * t = rms(FC · taps, hidden_norm), then per layer K = rope(rms_head(Wk · t,
 * k_norm)), V = Wv · t, written straight into the layer's rows. The
 * positions of every batch go up in one copy first. */
static gboolean
settle_rows_locked (DflCudaDraftCtx *ctx, gsize n, GError **error)
{
  DflDraftCtx *base = &ctx->base;
  DflCudaDrafter *cd = ctx->cd;
  DflCudaDevice *dev = cd->dev;
  const DflDrafterGeometry *g = cd->g;
  int hs = g->hidden, hd = g->head_dim, kv = g->kv_heads, kd = kv * hd;
  int tw = dfl_drafter_geometry_tap_width (g);
  gsize batch = DFL_DRAFTER_SETTLE_BATCH, n_batches = (n + batch - 1) / batch;
  const float *d_taps = ctx->d_pending;
  float eps = (float) g->eps;
  int64_t *pos;
  gboolean ok;

  if (n == 0)
    return TRUE;
  if (n_batches > ctx->settle_pos_cap) {
    dfl_cuda_free (dev, ctx->d_settle_pos);
    ctx->settle_pos_cap = MAX (n_batches, 8);
    if (!(ctx->d_settle_pos = dfl_cuda_alloc (dev, ctx->settle_pos_cap * 8, error))) {
      ctx->settle_pos_cap = 0;
      return FALSE;
    }
  }
  pos = g_new (int64_t, n_batches);
  for (gsize b = 0; b < n_batches; b++)
    pos[b] = base->first + base->len + (gint64) (b * batch);
  ok = dfl_cuda_upload (dev, ctx->d_settle_pos, pos, n_batches * 8, error);
  g_free (pos);
  if (!ok)
    return FALSE;

  for (gsize b = 0; b < n_batches; b++) {
    gsize done = b * batch;
    int nb = (int) MIN (batch, n - done);
    dfl_cuda_matmul (dev, &cd->fc, d_taps + done * tw, nb, tw, cd->s_t, hs, hs, FALSE,
                     cd->s_round);
    dfl_cuda_rmsnorm (dev, cd->s_t, cd->s_t, nb, hs, cd->hidden_norm, eps);
    /* room first, so a failure leaves every layer as long as the context */
    for (int l = 0; l < g->layers; l++)
      if (!reserve_rows (ctx, &ctx->layers[l], &base->rows[l], nb, error))
        return FALSE;
    for (int l = 0; l < g->layers; l++) {
      const DflCudaDrafterLayer *L = &cd->layers[l];
      const DflDraftLayerRows *rows = &base->rows[l];
      DflCudaLayerCtx *c = &ctx->layers[l];
      gsize row = (c->front + rows->start + rows->held) * kd;
      float *k = c->d_k + row, *v = c->d_v + row;
      dfl_cuda_matmul (dev, &L->k, cd->s_t, nb, hs, k, kd, kd, FALSE, cd->s_round);
      dfl_cuda_matmul (dev, &L->v, cd->s_t, nb, hs, v, kd, kd, FALSE, cd->s_round);
      dfl_cuda_rmsnorm (dev, k, k, nb * kv, hd, L->k_norm, eps);
      if (dfl_drafter_geometry_rotary (g, l))
        dfl_cuda_rope (dev, k, nb, kv, hd, cd->inv_freq, ctx->d_settle_pos + b);
    }
    dfl_draft_ctx_settled (base, nb);
  }
  return TRUE;
}

static gboolean
cuda_settle (DflDraftCtx *base, gsize n, GError **error)
{
  DflCudaDraftCtx *ctx = (DflCudaDraftCtx *) base;
  gboolean ok;

  /* the batches' launches are the stream's until their positions are read */
  dfl_cuda_drafter_hold (ctx->cd);
  ok = settle_rows_locked (ctx, n, error);
  dfl_cuda_drafter_release (ctx->cd);
  return ok;
}

/* Room for `n` more waiting rows; the waiting rows stay at the front. */
static gboolean
reserve_pending (DflCudaDraftCtx *ctx, gsize n, GError **error)
{
  DflCudaDevice *dev = ctx->cd->dev;
  gsize rb = (gsize) dfl_drafter_geometry_tap_width (ctx->cd->g) * sizeof (float);
  gsize pending = ctx->base.pending_rows, cap;
  float *a, *b;

  if (pending + n <= ctx->pending_cap)
    return TRUE;
  cap = MAX (pending + n, ctx->pending_cap * 2);
  cap = MAX (cap, 64);
  if (!(a = dfl_cuda_alloc (dev, cap * rb, error)))
    return FALSE;
  if (!(b = dfl_cuda_alloc (dev, cap * rb, error))) {
    dfl_cuda_free (dev, a);
    return FALSE;
  }
  if (pending)
    dfl_cuda_copy_d2d (dev, a, ctx->d_pending, pending * rb);
  dfl_cuda_free (dev, ctx->d_pending);
  dfl_cuda_free (dev, ctx->d_pending2);
  ctx->d_pending = a;
  ctx->d_pending2 = b;
  ctx->pending_cap = cap;
  return TRUE;
}

/* Rows after the waiting ones: device rows (a strided copy on the stream,
 * in its order before this returns) or host rows (uploaded). */
static gboolean
pend_held (DflDraftCtx *base, const DflTensor *taps, GError **error)
{
  DflCudaDraftCtx *ctx = (DflCudaDraftCtx *) base;
  gsize tw = (gsize) dfl_drafter_geometry_tap_width (base->g), n = (gsize) taps->ne[1];
  float *dst;

  if (!reserve_pending (ctx, n, error))
    return FALSE;
  dst = ctx->d_pending + base->pending_rows * tw;
  if (!taps->device || dfl_device_backend (taps->device) == DFL_BACKEND_CPU) {
    const char *src = dfl_tensor_data (taps);
    if (taps->nb[1] == tw * sizeof (float))
      return dfl_cuda_upload (ctx->cd->dev, dst, src, n * tw * sizeof (float), error);
    for (gsize r = 0; r < n; r++)
      if (!dfl_cuda_upload (ctx->cd->dev, dst + r * tw, src + r * taps->nb[1],
                            tw * sizeof (float), error))
        return FALSE;
    return TRUE;
  }
  dfl_cuda_copy_2d (ctx->cd->dev, dst, tw * sizeof (float), dfl_tensor_data (taps), taps->nb[1],
                    tw * sizeof (float), n);
  return TRUE;
}

static gboolean
cuda_pend (DflDraftCtx *base, const DflTensor *taps, GError **error)
{
  DflCudaDrafter *cd = ((DflCudaDraftCtx *) base)->cd;
  gboolean ok;

  dfl_cuda_drafter_hold (cd);
  ok = pend_held (base, taps, error);
  dfl_cuda_drafter_release (cd);
  return ok;
}

/* What stays after `n` settled rows moves to the other buffer (a device
 * copy may not overlap itself). */
static void
cuda_unpend (DflDraftCtx *base, gsize n)
{
  DflCudaDraftCtx *ctx = (DflCudaDraftCtx *) base;
  gsize rb = (gsize) dfl_drafter_geometry_tap_width (base->g) * sizeof (float);
  float *t;

  dfl_cuda_drafter_hold (ctx->cd);
  if (base->pending_rows > n)
    dfl_cuda_copy_d2d (ctx->cd->dev, ctx->d_pending2, (guint8 *) ctx->d_pending + n * rb,
                       (base->pending_rows - n) * rb);
  t = ctx->d_pending;
  ctx->d_pending = ctx->d_pending2;
  ctx->d_pending2 = t;
  dfl_cuda_drafter_release (ctx->cd);
}

static gboolean
read_kv_held (DflDraftCtx *base, int layer, int kv_head, float **k, float **v, GError **error)
{
  DflCudaDraftCtx *ctx = (DflCudaDraftCtx *) base;
  const DflCudaLayerCtx *c = &ctx->layers[layer];
  const DflDraftLayerRows *rows = &base->rows[layer];
  gsize rb = kv_row_bytes (ctx->cd), hd = (gsize) base->g->head_dim;
  gsize kvd = rb / sizeof (float);
  float *src[2] = { c->d_k, c->d_v }, **dst[2] = { k, v };

  for (int i = 0; i < 2; i++) {
    float *all;
    if (!dst[i])
      continue;
    *dst[i] = g_new (float, MAX (rows->held, 1) * hd);
    if (rows->held == 0)
      continue;
    all = g_malloc (rows->held * rb);
    if (!dfl_cuda_download (ctx->cd->dev, all, src[i] + (c->front + rows->start) * kvd,
                            rows->held * rb, error)) {
      g_free (all);
      return FALSE;
    }
    for (gsize j = 0; j < rows->held; j++)
      memcpy (*dst[i] + j * hd, all + j * kvd + (gsize) kv_head * hd, hd * sizeof (float));
    g_free (all);
  }
  return TRUE;
}

static gboolean
cuda_read_kv (DflDraftCtx *base, int layer, int kv_head, float **k, float **v, GError **error)
{
  DflCudaDrafter *cd = ((DflCudaDraftCtx *) base)->cd;
  gboolean ok;

  dfl_cuda_drafter_hold (cd);
  ok = read_kv_held (base, layer, kv_head, k, v, error);
  dfl_cuda_drafter_release (cd);
  return ok;
}

static const DflDraftCtxOps cuda_ops = {
  .pend = cuda_pend,
  .unpend = cuda_unpend,
  .settle = cuda_settle,
  .block = dfl_cuda_draft_ctx_block,
  .select = dfl_cuda_draft_ctx_select,
  .read_kv = cuda_read_kv,
  .free = cuda_ctx_free,
};

DflDraftCtx *
dfl_cuda_draft_ctx_new (DflDrafterWeights *w, GError **error)
{
  DflCudaDraftCtx *ctx = dfl_draft_ctx_alloc (sizeof (DflCudaDraftCtx), &cuda_ops, w);
  const DflDrafterGeometry *g = ctx->base.g;
  gboolean ok;

  ctx->cd = w->native;
  ctx->layers = g_new0 (DflCudaLayerCtx, g->layers);
  dfl_cuda_drafter_hold (ctx->cd);
  ok = alloc_param (ctx, error);
  for (int l = 0; ok && l < g->layers; l++) {
    DflCudaLayerCtx *c = &ctx->layers[l];
    c->front = dfl_drafter_geometry_window_of (g, l) == 0 ? (gsize) g->block : 0;
    c->cap = 64;
    ok = alloc_layer (ctx, c, c->cap, &c->d_k, &c->d_v, error);
  }
  dfl_cuda_drafter_release (ctx->cd);
  if (!ok) {
    dfl_draft_ctx_free (&ctx->base);
    return NULL;
  }
  return &ctx->base;
}
