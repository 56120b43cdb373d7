/* gst-dflash — a sequence's drafter context: the reference's bookkeeping
 * (queue, settle, truncate, reset, per-layer windows, lazy drops), with
 * slack kept past each window so a rewind stays exact, and a check that
 * refuses a block whose context is no longer held rather than drafting it
 * short. Decided here for every back end; each does the compute
 * (draft-context.h).
 */
#include "draft-context.h"
#include "dfl-error.h"


gpointer
dfl_draft_ctx_alloc (gsize size, const DflDraftCtxOps *ops, DflDrafterWeights *w)
{
  DflDraftCtx *ctx = g_malloc0 (size);

  ctx->ops = ops;
  ctx->w = dfl_drafter_weights_ref (w);
  ctx->g = dfl_drafter_weights_geometry (w);
  ctx->name = dfl_drafter_weights_path (w);
  ctx->rows = g_new0 (DflDraftLayerRows, ctx->g->layers);
  return ctx;
}

DflDraftCtx *
dfl_draft_ctx_new (DflDrafterWeights *bound, GError **error)
{
  g_return_val_if_fail (bound != NULL, NULL);
  if (!bound->engine) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "%s: the drafter is not bound to a target (dfl_drafter_weights_bind): a context"
                 " drafts with the target's embedding and head", bound->path);
    return NULL;
  }
  return bound->engine->ctx_new (bound, error);
}

void
dfl_draft_ctx_free (DflDraftCtx *ctx)
{
  if (!ctx)
    return;
  ctx->ops->free (ctx);
  g_free (ctx->rows);
  dfl_drafter_weights_unref (ctx->w);
  g_free (ctx);
}

DflDrafterWeights *
dfl_draft_ctx_weights (const DflDraftCtx *ctx)
{
  return ctx->w;
}

DflDevice *
dfl_draft_ctx_device (const DflDraftCtx *ctx)
{
  return ctx->w->device;
}

int
dfl_draft_ctx_head_rows (const DflDraftCtx *ctx)
{
  return (int) ctx->w->trunk.head.ne[1];
}

gint64
dfl_draft_ctx_next_position (const DflDraftCtx *ctx)
{
  return ctx->first + ctx->len + (gint64) ctx->pending_rows;
}

void
dfl_draft_ctx_span (const DflDraftCtx *ctx, gint64 *first, gint64 *end)
{
  if (first)
    *first = ctx->first;
  if (end)
    *end = dfl_draft_ctx_next_position (ctx);
}

void
dfl_draft_ctx_truncate (DflDraftCtx *ctx, gint64 pos)
{
  gint64 held_end = ctx->first + ctx->len, keep;

  /* waiting rows past pos go first, then settled ones */
  ctx->pending_rows = MIN (ctx->pending_rows, (gsize) MAX (pos - held_end, 0));
  keep = MIN (MAX (pos - ctx->first, 0), ctx->len);
  for (int l = 0; l < ctx->g->layers; l++) {
    DflDraftLayerRows *c = &ctx->rows[l];
    c->held = (gsize) MAX (keep - c->dropped, 0);
    c->dropped = MIN (c->dropped, keep);
    if (c->held == 0)
      c->start = 0;
  }
  ctx->len = keep;
}

void
dfl_draft_ctx_reset (DflDraftCtx *ctx)
{
  dfl_draft_ctx_truncate (ctx, 0);
  ctx->first = 0;
}

/* The rows a windowed layer keeps after a drop, and the count past which it
 * drops: twice that, so drops are rare and each lets go of many rows. */
static gsize
keep_rows (int window)
{
  return (gsize) window + DFL_DRAFTER_BLOCK_SLACK;
}

void
dfl_draft_ctx_settled (DflDraftCtx *ctx, gsize nb)
{
  for (int l = 0; l < ctx->g->layers; l++)
    ctx->rows[l].held += nb;
  ctx->len += (gint64) nb;
}

/* Settle the first `n` waiting rows (the products are batch-invariant, so
 * how the rows are batched changes no key or value), then let a windowed
 * layer go of what it reads no more (its window plus the slack a rewind
 * may need), lazily. */
static gboolean
settle_front (DflDraftCtx *ctx, gsize n, GError **error)
{
  if (!ctx->ops->settle (ctx, n, error))
    return FALSE;
  dfl_draft_ctx_drop_windows (ctx);
  return TRUE;
}

void
dfl_draft_ctx_drop_windows (DflDraftCtx *ctx)
{
  for (int l = 0; l < ctx->g->layers; l++) {
    DflDraftLayerRows *c = &ctx->rows[l];
    int w = dfl_drafter_geometry_window_of (ctx->g, l);
    if (w > 0 && c->held > 2 * keep_rows (w)) {
      gsize cut = c->held - keep_rows (w);
      c->start += cut;
      c->held -= cut;
      c->dropped += (gint64) cut;
    }
  }
}

gboolean
dfl_draft_ctx_settle (DflDraftCtx *ctx, GError **error)
{
  gsize n = ctx->pending_rows;

  if (n == 0)
    return TRUE;
  ctx->pending_rows = 0;
  return settle_front (ctx, n, error);
}

static gboolean
same_place (const DflTensor *t, DflDevice *device)
{
  DflDevice *d = t->device;

  if (d && dfl_device_backend (d) == DFL_BACKEND_CPU)
    d = NULL;
  if (!d || !device)
    return d == device;
  return dfl_device_backend (d) == dfl_device_backend (device)
         && dfl_device_native (d) == dfl_device_native (device);
}

static const char *
place_name (const DflTensor *t)
{
  return t->device ? dfl_device_describe (t->device) : "host memory";
}

static gboolean
check_taps (DflDraftCtx *ctx, gint64 pos, const DflTensor *taps, GError **error)
{
  gint64 tw = dfl_drafter_geometry_tap_width (ctx->g), n_rows = taps ? taps->ne[1] : 0;

  if (pos < 0 || pos + n_rows >= G_MAXINT || !taps) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "%s: context rows at position %" G_GINT64_FORMAT " (%" G_GINT64_FORMAT
                 " rows%s) are out of range", ctx->name, pos, n_rows, taps ? "" : ", no data");
    return FALSE;
  }
  if (taps->dtype != DFL_DTYPE_F32 || taps->ne[0] != tw || taps->ne[2] * taps->ne[3] != 1
      || taps->nb[0] != sizeof (float)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "%s: context rows of %" G_GINT64_FORMAT " %s values; expected rows of n_taps ×"
                 " hidden = %" G_GINT64_FORMAT " F32", ctx->name, taps->ne[0],
                 dfl_dtype_name (taps->dtype), tw);
    return FALSE;
  }
  if (n_rows > 0 && taps->nb[1] < (gsize) tw * sizeof (float)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "%s: context rows of stride %" G_GSIZE_FORMAT " floats are narrower than a row of"
                 " %" G_GINT64_FORMAT " (n_taps × hidden)", ctx->name, taps->nb[1] / sizeof (float),
                 tw);
    return FALSE;
  }
  if (n_rows > 0 && !same_place (taps, NULL)
      && !same_place (taps, ctx->w->device)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                 "%s: context rows on %s; the context takes them in host memory%s%s", ctx->name,
                 place_name (taps), ctx->w->device ? " or on " : "",
                 ctx->w->device ? dfl_device_describe (ctx->w->device) : "");
    return FALSE;
  }
  return TRUE;
}

gboolean
dfl_draft_ctx_queue (DflDraftCtx *ctx, gint64 pos, const DflTensor *taps, GError **error)
{
  gsize n_rows;

  if (!check_taps (ctx, pos, taps, error))
    return FALSE;
  n_rows = (gsize) taps->ne[1];
  if (pos > dfl_draft_ctx_next_position (ctx) || pos < ctx->first) {
    /* a gap, or a jump back before the context: start over at pos */
    dfl_draft_ctx_truncate (ctx, 0);
    ctx->first = pos;
  } else {
    dfl_draft_ctx_truncate (ctx, pos);
  }
  if (n_rows == 0)
    return TRUE;
  if (!ctx->ops->pend (ctx, taps, error))
    return FALSE;
  ctx->pending_rows += n_rows;
  /* past the limit the oldest rows go through at once, a multiple of
   * CONTEXT_CHUNK of them: one move of what stays, not one a chunk */
  if (ctx->pending_rows > DFL_DRAFTER_PENDING_ROWS) {
    gsize over = ctx->pending_rows - DFL_DRAFTER_PENDING_ROWS;
    over = MIN ((over + DFL_DRAFTER_CONTEXT_CHUNK - 1) / DFL_DRAFTER_CONTEXT_CHUNK
                * DFL_DRAFTER_CONTEXT_CHUNK, ctx->pending_rows);
    if (!settle_front (ctx, over, error))
      return FALSE;
    ctx->ops->unpend (ctx, over);
    ctx->pending_rows -= over;
  }
  return TRUE;
}

gboolean
dfl_draft_ctx_queue_host (DflDraftCtx *ctx, gint64 pos, const float *taps, gsize n_rows,
                          GError **error)
{
  DflTensor t = dfl_tensor_2d (NULL, (gpointer) taps, 0, DFL_DTYPE_F32, (gint64) n_rows,
                               dfl_drafter_geometry_tap_width (ctx->g));

  return dfl_draft_ctx_queue (ctx, pos, taps || n_rows == 0 ? &t : NULL, error);
}

gboolean
dfl_draft_ctx_check (const DflDraftCtx *ctx, gint64 anchor_pos, GError **error)
{
  const DflDrafterGeometry *g = ctx->g;
  gint64 end = dfl_draft_ctx_next_position (ctx);

  if (anchor_pos < ctx->first) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT,
                 "%s: a block at position %" G_GINT64_FORMAT " is before the context, which starts at %"
                 G_GINT64_FORMAT "; queue the target's rows from 0 (or from where it should start) first",
                 ctx->name, anchor_pos, ctx->first);
    return FALSE;
  }
  if (anchor_pos > end) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT,
                 "%s: the context ends before position %" G_GINT64_FORMAT "; a block at %" G_GINT64_FORMAT
                 " needs the target's rows of %" G_GINT64_FORMAT " to %" G_GINT64_FORMAT " queued first",
                 ctx->name, end, anchor_pos, end, anchor_pos - 1);
    return FALSE;
  }
  for (int l = 0; l < g->layers; l++) {
    const DflDraftLayerRows *c = &ctx->rows[l];
    int w = dfl_drafter_geometry_window_of (g, l);
    gsize held = c->held + ctx->pending_rows;
    gint64 dropped = c->dropped, base, need;
    if (w == 0)
      continue;
    /* the drop the block's settle will make (settle_front drops once, at its end) */
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
                   ctx->name, l, w, base, anchor_pos, need, DFL_DRAFTER_BLOCK_SLACK, ctx->first, need);
      return FALSE;
    }
  }
  return TRUE;
}

void
dfl_draft_ctx_layer_range (const DflDraftCtx *ctx, int layer, gint64 anchor_pos, gint64 *base,
                           gint64 *lo, gint64 *hi)
{
  int window = dfl_drafter_geometry_window_of (ctx->g, layer);

  *base = ctx->first + ctx->rows[layer].dropped;
  *hi = MAX (MIN (anchor_pos, ctx->first + ctx->len), *base);
  *lo = window > 0 ? CLAMP (anchor_pos + 1 - window, *base, *hi) : *base;
}

gsize
dfl_draft_ctx_widest_range (const DflDraftCtx *ctx, gint64 anchor_pos)
{
  gsize widest = 0;

  for (int l = 0; l < ctx->g->layers; l++) {
    gint64 base, lo, hi;
    dfl_draft_ctx_layer_range (ctx, l, anchor_pos, &base, &lo, &hi);
    widest = MAX (widest, (gsize) (hi - lo));
  }
  return widest;
}

gboolean
dfl_draft_ctx_read_kv (DflDraftCtx *ctx, int layer, int kv_head, float **k, float **v,
                       gsize *rows, gint64 *from, GError **error)
{
  g_return_val_if_fail (layer >= 0 && layer < ctx->g->layers && kv_head >= 0
                        && kv_head < ctx->g->kv_heads, FALSE);
  if (rows)
    *rows = ctx->rows[layer].held;
  if (from)
    *from = ctx->first + ctx->rows[layer].dropped;
  return (!k && !v) || ctx->ops->read_kv (ctx, layer, kv_head, k, v, error);
}

/* --- the block and the selection --- */

gsize
dfl_draft_ctx_block_bytes (const DflDraftCtx *ctx, int width)
{
  return (gsize) (ctx->g->block - 1) * (ctx->g->hidden + MAX (width, 0)) * sizeof (float);
}

static gboolean
check_token (const DflDraftCtx *ctx, guint32 anchor, GError **error)
{
  if (anchor >= (guint32) ctx->g->vocab) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "%s: the anchor token %u is outside the vocabulary of %d", ctx->name, anchor,
                 ctx->g->vocab);
    return FALSE;
  }
  return TRUE;
}

/* A head width the selector can take and the head has rows for, and an
 * output (or a block) of its size where the context's tensors live. */
static gboolean
check_width (const DflDraftCtx *ctx, int width, const DflTensor *out, GError **error)
{
  int top = dfl_drafter_weights_has_selector (ctx->w) ? ctx->g->selector_top : 1;
  int head_rows = dfl_draft_ctx_head_rows (ctx);
  gsize want = dfl_draft_ctx_block_bytes (ctx, width);

  if (width < top || width > ctx->g->vocab || width > head_rows) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "%s: a head width of %d; it must be from selector_top %d to vocab %d"
                 " (the head has %d rows)", ctx->name, width, top, ctx->g->vocab, head_rows);
    return FALSE;
  }
  if (!out || dfl_tensor_bytes (out) < want || !dfl_tensor_is_contiguous (out)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "%s: a block's output at width %d takes %" G_GSIZE_FORMAT
                 " bytes; the buffer has %" G_GSIZE_FORMAT "%s", ctx->name, width, want,
                 out ? dfl_tensor_bytes (out) : 0,
                 out && !dfl_tensor_is_contiguous (out) ? ", not packed" : "");
    return FALSE;
  }
  if (!same_place (out, ctx->w->device)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "%s: a block's output on %s; the context runs on %s", ctx->name,
                 place_name (out), ctx->w->device ? dfl_device_describe (ctx->w->device)
                 : "the CPU (host memory)");
    return FALSE;
  }
  return TRUE;
}

/* Everything a block needs before its compute: its arguments, a context
 * that reaches the anchor, the waiting rows settled. */
gboolean
dfl_draft_ctx_block_ready (DflDraftCtx *ctx, gint64 anchor_pos, guint32 anchor, int width,
             const DflTensor *out, GError **error)
{
  if (!check_token (ctx, anchor, error) || !check_width (ctx, width, out, error))
    return FALSE;
  if (anchor_pos + ctx->g->block >= G_MAXINT32) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT,
                 "%s: a block at position %" G_GINT64_FORMAT " is past the positions the drafter"
                 " indexes", ctx->name, anchor_pos);
    return FALSE;
  }
  return dfl_draft_ctx_check (ctx, anchor_pos, error) && dfl_draft_ctx_settle (ctx, error);
}

gboolean
dfl_draft_ctx_block (DflDraftCtx *ctx, gint64 anchor_pos, guint32 anchor, int width,
                     const DflTensor *out, GError **error)
{
  return dfl_draft_ctx_block_ready (ctx, anchor_pos, anchor, width, out, error)
         && ctx->ops->block (ctx, anchor_pos, anchor, width, out, error);
}

gboolean
dfl_draft_ctx_select_ready (DflDraftCtx *ctx, const DflTensor *block, int width, guint32 anchor,
                            GError **error)
{
  return check_token (ctx, anchor, error) && check_width (ctx, width, block, error);
}

gboolean
dfl_draft_ctx_select (DflDraftCtx *ctx, const DflTensor *block, int width, guint32 anchor,
                      guint32 *chosen, guint32 *plain, GError **error)
{
  return dfl_draft_ctx_select_ready (ctx, block, width, anchor, error)
         && ctx->ops->select (ctx, block, width, anchor, chosen, plain, error);
}

gboolean
dfl_draft_ctx_draft (DflDraftCtx *ctx, gint64 anchor_pos, guint32 anchor, int width,
                     const DflTensor *out, guint32 *chosen, guint32 *plain, GError **error)
{
  if (!dfl_draft_ctx_block_ready (ctx, anchor_pos, anchor, width, out, error))
    return FALSE;
  return ctx->ops->block (ctx, anchor_pos, anchor, width, out, error)
         && ctx->ops->select (ctx, out, width, anchor, chosen, plain, error);
}
