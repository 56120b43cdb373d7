/* gst-dflash — a sequence's drafter context on the device: the CPU
 * drafter's bookkeeping (queue, settle, truncate, reset, windows, lazy
 * drops, the slack kept past each window, the check that refuses a short
 * context) over key and value rows held on the card.
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
  return (gsize) cd->g.kv_heads * cd->g.head_dim * sizeof (float);
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
  const DflDrafterGeometry *g = &ctx->cd->g;
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

DflCudaDraftCtx *
dfl_cuda_draft_ctx_new (DflCudaDrafter *cd, GError **error)
{
  const DflDrafterGeometry *g = &cd->g;
  DflCudaDraftCtx *ctx = g_new0 (DflCudaDraftCtx, 1);

  ctx->cd = cd;
  ctx->layers = g_new0 (DflCudaLayerCtx, g->layers);
  if (!alloc_param (ctx, error))
    goto fail;
  for (int l = 0; l < g->layers; l++) {
    DflCudaLayerCtx *c = &ctx->layers[l];
    c->front = dfl_drafter_geometry_window_of (g, l) == 0 ? (gsize) g->block : 0;
    c->cap = 64;
    if (!alloc_layer (ctx, c, c->cap, &c->d_k, &c->d_v, error))
      goto fail;
  }
  return ctx;
fail:
  dfl_cuda_draft_ctx_free (ctx);
  return NULL;
}

void
dfl_cuda_draft_ctx_free (DflCudaDraftCtx *ctx)
{
  DflCudaDevice *dev;

  if (!ctx)
    return;
  dev = ctx->cd->dev;
  dfl_cuda_sync (dev, NULL);
  dfl_cuda_draft_ctx_drop_graph (ctx);
  for (int l = 0; l < ctx->cd->g.layers; l++) {
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
  g_free (ctx);
}

gint64
dfl_cuda_draft_ctx_next_position (const DflCudaDraftCtx *ctx)
{
  return ctx->first + ctx->len + (gint64) ctx->pending_rows;
}

void
dfl_cuda_draft_ctx_span (const DflCudaDraftCtx *ctx, gint64 *first, gint64 *end)
{
  if (first)
    *first = ctx->first;
  if (end)
    *end = dfl_cuda_draft_ctx_next_position (ctx);
}

void
dfl_cuda_draft_ctx_truncate (DflCudaDraftCtx *ctx, gint64 pos)
{
  gint64 held_end = ctx->first + ctx->len, keep;

  /* waiting rows past pos go first, then settled ones */
  ctx->pending_rows = MIN (ctx->pending_rows, (gsize) MAX (pos - held_end, 0));
  keep = MIN (MAX (pos - ctx->first, 0), ctx->len);
  for (int l = 0; l < ctx->cd->g.layers; l++) {
    DflCudaLayerCtx *c = &ctx->layers[l];
    c->held = (gsize) MAX (keep - c->dropped, 0);
    c->dropped = MIN (c->dropped, keep);
    if (c->held == 0)
      c->start = 0;
  }
  ctx->len = keep;
}

void
dfl_cuda_draft_ctx_reset (DflCudaDraftCtx *ctx)
{
  dfl_cuda_draft_ctx_truncate (ctx, 0);
  ctx->first = 0;
}

/* Room for `n` more rows after the live ones. Dead rows in front (let go by
 * drops) are reclaimed first; a move whose source and destination overlap
 * (a device copy may not) goes through a new buffer instead, as growth does.
 * A new buffer makes any captured graph stale. */
static gboolean
reserve_rows (DflCudaDraftCtx *ctx, DflCudaLayerCtx *c, gsize n, GError **error)
{
  DflCudaDevice *dev = ctx->cd->dev;
  gsize rb = kv_row_bytes (ctx->cd), need = c->held + n, cap;
  float *k, *v;

  if (c->start + need <= c->cap)
    return TRUE;
  if (need <= c->cap && c->start >= c->held) {
    gsize from = (c->front + c->start) * rb / sizeof (float), to = c->front * rb / sizeof (float);
    if (c->held) {
      dfl_cuda_copy_d2d (dev, c->d_k + to, c->d_k + from, c->held * rb);
      dfl_cuda_copy_d2d (dev, c->d_v + to, c->d_v + from, c->held * rb);
    }
    c->start = 0;
    return TRUE;
  }
  cap = need <= c->cap ? c->cap : MAX (MAX (need, c->cap * 2), 64);
  if (!alloc_layer (ctx, c, cap, &k, &v, error))
    return FALSE;
  if (c->held) {
    gsize from = (c->front + c->start) * rb / sizeof (float), to = c->front * rb / sizeof (float);
    dfl_cuda_copy_d2d (dev, k + to, c->d_k + from, c->held * rb);
    dfl_cuda_copy_d2d (dev, v + to, c->d_v + from, c->held * rb);
  }
  /* cudaFree waits for the device: the copies above are done before the
   * old rows go */
  dfl_cuda_free (dev, c->d_k);
  dfl_cuda_free (dev, c->d_v);
  c->d_k = k;
  c->d_v = v;
  c->cap = cap;
  c->start = 0;
  ctx->generation++;
  return TRUE;
}

static gsize
keep_rows (int window)
{
  return (gsize) window + DFL_DRAFTER_BLOCK_SLACK;
}

/* Settle `n` rows of taps (device, packed) at the context's end:
 * t = rms(FC · taps, hidden_norm), then per layer K = rope(rms_head(Wk · t,
 * k_norm)), V = Wv · t, written straight into the layer's rows. The
 * positions of every batch go up in one copy first. */
static gboolean
settle_rows_locked (DflCudaDraftCtx *ctx, const float *d_taps, gsize n, GError **error)
{
  DflCudaDrafter *cd = ctx->cd;
  DflCudaDevice *dev = cd->dev;
  const DflDrafterGeometry *g = &cd->g;
  int hs = g->hidden, hd = g->head_dim, kv = g->kv_heads, kd = kv * hd;
  int tw = dfl_drafter_geometry_tap_width (g);
  gsize batch = DFL_DRAFTER_SETTLE_BATCH, n_batches = (n + batch - 1) / batch;
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
    pos[b] = ctx->first + ctx->len + (gint64) (b * batch);
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
      if (!reserve_rows (ctx, &ctx->layers[l], nb, error))
        return FALSE;
    for (int l = 0; l < g->layers; l++) {
      const DflCudaDrafterLayer *L = &cd->layers[l];
      DflCudaLayerCtx *c = &ctx->layers[l];
      float *k, *v;
      gsize row;
      row = (c->front + c->start + c->held) * kd;
      k = c->d_k + row;
      v = c->d_v + row;
      dfl_cuda_matmul (dev, &L->k, cd->s_t, nb, hs, k, kd, kd, FALSE, cd->s_round);
      dfl_cuda_matmul (dev, &L->v, cd->s_t, nb, hs, v, kd, kd, FALSE, cd->s_round);
      dfl_cuda_rmsnorm (dev, k, k, nb * kv, hd, L->k_norm, eps);
      if (dfl_drafter_geometry_rotary (g, l))
        dfl_cuda_rope (dev, k, nb, kv, hd, cd->inv_freq, ctx->d_settle_pos + b);
      c->held += nb;
    }
    ctx->len += nb;
  }
  /* a windowed layer reads no further back than its window (plus the slack
   * a rewind may need): let go of the rest, lazily */
  for (int l = 0; l < g->layers; l++) {
    DflCudaLayerCtx *c = &ctx->layers[l];
    int w = dfl_drafter_geometry_window_of (g, l);
    if (w > 0 && c->held > 2 * keep_rows (w)) {
      gsize cut = c->held - keep_rows (w);
      c->start += cut;
      c->held -= cut;
      c->dropped += (gint64) cut;
    }
  }
  return TRUE;
}

gboolean
dfl_cuda_draft_ctx_settle_rows (DflCudaDraftCtx *ctx, const float *d_taps, gsize n,
                                GError **error)
{
  gboolean ok;

  /* the batches' launches are the stream's until their positions are read */
  dfl_cuda_device_lock (ctx->cd->dev);
  ok = settle_rows_locked (ctx, d_taps, n, error);
  dfl_cuda_device_unlock (ctx->cd->dev);
  return ok;
}

/* Room for `n` more waiting rows; the waiting rows stay at the front. */
static gboolean
reserve_pending (DflCudaDraftCtx *ctx, gsize n, GError **error)
{
  DflCudaDevice *dev = ctx->cd->dev;
  gsize rb = (gsize) dfl_drafter_geometry_tap_width (&ctx->cd->g) * sizeof (float);
  gsize cap;
  float *a, *b;

  if (ctx->pending_rows + n <= ctx->pending_cap)
    return TRUE;
  cap = MAX (ctx->pending_rows + n, ctx->pending_cap * 2);
  cap = MAX (cap, 64);
  if (!(a = dfl_cuda_alloc (dev, cap * rb, error)))
    return FALSE;
  if (!(b = dfl_cuda_alloc (dev, cap * rb, error))) {
    dfl_cuda_free (dev, a);
    return FALSE;
  }
  if (ctx->pending_rows)
    dfl_cuda_copy_d2d (dev, a, ctx->d_pending, ctx->pending_rows * rb);
  dfl_cuda_free (dev, ctx->d_pending);
  dfl_cuda_free (dev, ctx->d_pending2);
  ctx->d_pending = a;
  ctx->d_pending2 = b;
  ctx->pending_cap = cap;
  return TRUE;
}

/* The queue's bookkeeping before `n_rows` rows at `pos` go in. */
static void
queue_position (DflCudaDraftCtx *ctx, gint64 pos)
{
  if (pos > dfl_cuda_draft_ctx_next_position (ctx) || pos < ctx->first) {
    /* a gap, or a jump back before the context: start over at pos */
    dfl_cuda_draft_ctx_truncate (ctx, 0);
    ctx->first = pos;
  } else {
    dfl_cuda_draft_ctx_truncate (ctx, pos);
  }
}

/* Past the limit the oldest rows go through at once, a multiple of
 * CONTEXT_CHUNK of them; what stays moves to the other buffer (a device
 * copy may not overlap itself). */
static gboolean
settle_over_limit (DflCudaDraftCtx *ctx, GError **error)
{
  gsize rb = (gsize) dfl_drafter_geometry_tap_width (&ctx->cd->g) * sizeof (float);
  gsize over;
  float *t;

  if (ctx->pending_rows <= DFL_DRAFTER_PENDING_ROWS)
    return TRUE;
  over = ctx->pending_rows - DFL_DRAFTER_PENDING_ROWS;
  over = MIN ((over + DFL_DRAFTER_CONTEXT_CHUNK - 1) / DFL_DRAFTER_CONTEXT_CHUNK
              * DFL_DRAFTER_CONTEXT_CHUNK, ctx->pending_rows);
  if (!dfl_cuda_draft_ctx_settle_rows (ctx, ctx->d_pending, over, error))
    return FALSE;
  if (ctx->pending_rows > over)
    dfl_cuda_copy_d2d (ctx->cd->dev, ctx->d_pending2, (guint8 *) ctx->d_pending + over * rb,
                       (ctx->pending_rows - over) * rb);
  t = ctx->d_pending;
  ctx->d_pending = ctx->d_pending2;
  ctx->d_pending2 = t;
  ctx->pending_rows -= over;
  return TRUE;
}

static gboolean
check_queue_args (DflCudaDraftCtx *ctx, gint64 pos, const void *taps, gsize n_rows,
                  GError **error)
{
  if (pos < 0 || pos + (gint64) n_rows >= G_MAXINT || (taps == NULL && n_rows > 0)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "%s: context rows at position %" G_GINT64_FORMAT " (%" G_GSIZE_FORMAT
                 " rows%s) are out of range", ctx->cd->name, pos, n_rows,
                 taps == NULL && n_rows > 0 ? ", no data" : "");
    return FALSE;
  }
  return TRUE;
}

gboolean
dfl_cuda_draft_ctx_queue (DflCudaDraftCtx *ctx, gint64 pos, const float *d_taps, gsize ld,
                          gsize n_rows, GError **error)
{
  gsize tw = (gsize) dfl_drafter_geometry_tap_width (&ctx->cd->g);

  if (!check_queue_args (ctx, pos, d_taps, n_rows, error))
    return FALSE;
  if (ld == 0)
    ld = tw;
  if (ld < tw) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "%s: context rows of stride %" G_GSIZE_FORMAT " floats are narrower than a row of"
                 " %" G_GSIZE_FORMAT " (n_taps × hidden)", ctx->cd->name, ld, tw);
    return FALSE;
  }
  queue_position (ctx, pos);
  if (n_rows == 0)
    return TRUE;
  if (!reserve_pending (ctx, n_rows, error))
    return FALSE;
  dfl_cuda_copy_2d (ctx->cd->dev, ctx->d_pending + ctx->pending_rows * tw, tw * sizeof (float),
                    d_taps, ld * sizeof (float), tw * sizeof (float), n_rows);
  ctx->pending_rows += n_rows;
  return settle_over_limit (ctx, error);
}

gboolean
dfl_cuda_draft_ctx_queue_host (DflCudaDraftCtx *ctx, gint64 pos, const float *taps,
                               gsize n_rows, GError **error)
{
  gsize tw = (gsize) dfl_drafter_geometry_tap_width (&ctx->cd->g);

  if (!check_queue_args (ctx, pos, taps, n_rows, error))
    return FALSE;
  queue_position (ctx, pos);
  if (n_rows == 0)
    return TRUE;
  if (!reserve_pending (ctx, n_rows, error)
      || !dfl_cuda_upload (ctx->cd->dev, ctx->d_pending + ctx->pending_rows * tw, taps,
                           n_rows * tw * sizeof (float), error))
    return FALSE;
  ctx->pending_rows += n_rows;
  return settle_over_limit (ctx, error);
}

gboolean
dfl_cuda_draft_ctx_settle (DflCudaDraftCtx *ctx, GError **error)
{
  gsize n = ctx->pending_rows;

  if (n == 0)
    return TRUE;
  ctx->pending_rows = 0;
  return dfl_cuda_draft_ctx_settle_rows (ctx, ctx->d_pending, n, error);
}

gboolean
dfl_cuda_draft_ctx_check (const DflCudaDraftCtx *ctx, gint64 anchor_pos, GError **error)
{
  const DflDrafterGeometry *g = &ctx->cd->g;
  const char *name = ctx->cd->name;
  gint64 end = dfl_cuda_draft_ctx_next_position (ctx);

  if (anchor_pos < ctx->first) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT,
                 "%s: a block at position %" G_GINT64_FORMAT " is before the context, which starts at %"
                 G_GINT64_FORMAT "; queue the target's rows from 0 (or from where it should start) first",
                 name, anchor_pos, ctx->first);
    return FALSE;
  }
  if (anchor_pos > end) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT,
                 "%s: the context ends before position %" G_GINT64_FORMAT "; a block at %" G_GINT64_FORMAT
                 " needs the target's rows of %" G_GINT64_FORMAT " to %" G_GINT64_FORMAT " queued first",
                 name, end, anchor_pos, end, anchor_pos - 1);
    return FALSE;
  }
  for (int l = 0; l < g->layers; l++) {
    const DflCudaLayerCtx *c = &ctx->layers[l];
    int w = dfl_drafter_geometry_window_of (g, l);
    gsize held = c->held + ctx->pending_rows;
    gint64 dropped = c->dropped, base, need;
    if (w == 0)
      continue;
    /* the drop the block's settle will make (settle_rows drops once, at its end) */
    if (ctx->pending_rows && held > 2 * keep_rows (w))
      dropped += (gint64) (held - keep_rows (w));
    base = ctx->first + dropped;
    need = MAX (ctx->first, anchor_pos + 1 - w);
    if (need < anchor_pos && base > need) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT,
                   "%s: the context is short: layer %d (window %d) holds positions from %" G_GINT64_FORMAT
                   " on, a block at %" G_GINT64_FORMAT " reads it from %" G_GINT64_FORMAT
                   " (a rewind deeper than the %d positions kept past the window); reset and queue the"
                   " target's rows again from %" G_GINT64_FORMAT " (at least from %" G_GINT64_FORMAT ")",
                   name, l, w, base, anchor_pos, need, DFL_DRAFTER_BLOCK_SLACK, ctx->first, need);
      return FALSE;
    }
  }
  return TRUE;
}

void
dfl_cuda_draft_ctx_layer_range (const DflCudaDraftCtx *ctx, int layer, gint64 anchor_pos,
                                gint64 *base, gint64 *lo, gint64 *hi)
{
  const DflCudaLayerCtx *c = &ctx->layers[layer];
  int window = dfl_drafter_geometry_window_of (&ctx->cd->g, layer);

  *base = ctx->first + c->dropped;
  *hi = MAX (MIN (anchor_pos, ctx->first + ctx->len), *base);
  *lo = window > 0 ? CLAMP (anchor_pos + 1 - window, *base, *hi) : *base;
}

float *
dfl_cuda_draft_ctx_download_kv (DflCudaDraftCtx *ctx, int layer, gboolean values, gsize *rows,
                                gint64 *from, GError **error)
{
  const DflCudaLayerCtx *c;
  gsize rb = kv_row_bytes (ctx->cd);
  float *h;

  g_return_val_if_fail (layer >= 0 && layer < ctx->cd->g.layers, NULL);
  c = &ctx->layers[layer];
  h = g_malloc (MAX (c->held * rb, 1));
  if (c->held
      && !dfl_cuda_download (ctx->cd->dev, h, (values ? c->d_v : c->d_k)
                             + (c->front + c->start) * rb / sizeof (float), c->held * rb, error)) {
    g_free (h);
    return NULL;
  }
  *rows = c->held;
  *from = ctx->first + c->dropped;
  return h;
}
