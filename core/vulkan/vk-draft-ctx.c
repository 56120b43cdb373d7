/* gst-dflash — a sequence's drafter context on a Vulkan device: the
 * bookkeeping of drafter-context.c (queue, settle, truncate, reset, windows,
 * lazy drops, the slack past each window, the short-context check), decision
 * for decision, with each layer's keys and values in a ring of device rows.
 * A ring lets a drop or a rewind move no data: only growth copies.
 */
#include "vk-drafter-private.h"
#include "dfl-error.h"

#include <string.h>

#define ROW_BYTES(g) ((gsize) (g)->kv_heads * (g)->head_dim * sizeof (float))

static void
free_scratch (DflVkBuffer **b)
{
  g_clear_pointer (b, dfl_vk_buffer_free);
}

DflVkDraftCtx *
dfl_vk_draft_ctx_new (DflVkDrafter *vd, GError **error)
{
  DflVkDraftCtx *c = g_new0 (DflVkDraftCtx, 1);

  c->vd = vd;
  c->ring = g_new0 (DflVkRing, vd->g.layers);
  if (!(c->s = dfl_vk_stream_new (vd->dev, error))) {
    dfl_vk_draft_ctx_free (c);
    return NULL;
  }
  return c;
}

void
dfl_vk_draft_ctx_free (DflVkDraftCtx *c)
{
  DflVkBuffer **scratch[] = {
    &c->taps_h, &c->taps_d, &c->cs_h, &c->cs_d, &c->t, &c->k, &c->v, &c->h, &c->x, &c->x2,
    &c->q, &c->kb, &c->vb, &c->y, &c->o, &c->dyn, &c->gate, &c->up, &c->bcs_h, &c->bcs_d,
    &c->scores, &c->vals, &c->idx, &c->hp, &c->ids_d, &c->ids_h,
  };

  if (!c)
    return;
  for (guint i = 0; i < G_N_ELEMENTS (scratch); i++)
    free_scratch (scratch[i]);
  for (int l = 0; c->ring && l < c->vd->g.layers; l++) {
    free_scratch (&c->ring[l].k);
    free_scratch (&c->ring[l].v);
  }
  g_free (c->ring);
  g_clear_pointer (&c->s, dfl_vk_stream_free);
  g_free (c->pending);
  g_free (c);
}

gint64
dfl_vk_draft_ctx_next_position (const DflVkDraftCtx *c)
{
  return c->first + c->len + (gint64) c->pending_rows;
}

void
dfl_vk_draft_ctx_span (const DflVkDraftCtx *c, gint64 *first, gint64 *end)
{
  if (first)
    *first = c->first;
  if (end)
    *end = dfl_vk_draft_ctx_next_position (c);
}

void
dfl_vk_draft_ctx_truncate (DflVkDraftCtx *c, gint64 pos)
{
  gint64 held_end = c->first + c->len, keep;

  c->pending_rows = MIN (c->pending_rows, (gsize) MAX (pos - held_end, 0));
  keep = MIN (MAX (pos - c->first, 0), c->len);
  for (int l = 0; l < c->vd->g.layers; l++) {
    DflVkRing *r = &c->ring[l];
    r->held = (gsize) MAX (keep - r->dropped, 0);
    r->dropped = MIN (r->dropped, keep);
    if (r->held == 0)
      r->start = 0;
  }
  c->len = keep;
}

void
dfl_vk_draft_ctx_reset (DflVkDraftCtx *c)
{
  dfl_vk_draft_ctx_truncate (c, 0);
  c->first = 0;
}

/* As drafter-context.c's keep_rows. */
static gsize
keep_rows (int window)
{
  return (gsize) window + DFL_DRAFTER_BLOCK_SLACK;
}

/* Room for `n` more rows in a ring: a larger ring, the live rows copied to
 * its front. The stream holds no other work here (settle_rows finishes each
 * batch), so the old ring can go once the copy is done. */
static gboolean
reserve_rows (DflVkDraftCtx *c, DflVkRing *r, gsize n, GError **error)
{
  DflVkDevice *dev = c->vd->dev;
  gsize row = ROW_BYTES (&c->vd->g), cap;
  DflVkBuffer *k, *v;

  if (r->held + n <= r->cap)
    return TRUE;
  cap = MAX (r->held + n, r->cap * 2);
  cap = MAX (cap, 64);
  if (!(k = dfl_vk_buffer_new (dev, cap * row, DFL_VK_MEMORY_DEVICE, error)))
    return FALSE;
  if (!(v = dfl_vk_buffer_new (dev, cap * row, DFL_VK_MEMORY_DEVICE, error))) {
    dfl_vk_buffer_free (k);
    return FALSE;
  }
  if (r->held) {
    gsize first = MIN (r->held, r->cap - r->start);
    dfl_vk_copy (c->s, k, 0, r->k, r->start * row, first * row);
    dfl_vk_copy (c->s, v, 0, r->v, r->start * row, first * row);
    if (first < r->held) {
      dfl_vk_copy (c->s, k, first * row, r->k, 0, (r->held - first) * row);
      dfl_vk_copy (c->s, v, first * row, r->v, 0, (r->held - first) * row);
    }
  }
  if (!dfl_vk_stream_finish (c->s, error)) {
    dfl_vk_buffer_free (k);
    dfl_vk_buffer_free (v);
    return FALSE;
  }
  dfl_vk_buffer_free (r->k);
  dfl_vk_buffer_free (r->v);
  r->k = k;
  r->v = v;
  r->cap = cap;
  r->start = 0;
  return TRUE;
}

static gboolean
ensure_settle_scratch (DflVkDraftCtx *c, gsize rows, GError **error)
{
  const DflDrafterGeometry *g = &c->vd->g;
  DflVkDevice *dev = c->vd->dev;
  gsize tw = (gsize) dfl_drafter_geometry_tap_width (g), kd = (gsize) g->kv_heads * g->head_dim;
  gsize f = sizeof (float);

  if (rows <= c->settle_cap)
    return TRUE;
  rows = MAX (rows, MIN ((gsize) DFL_DRAFTER_SETTLE_BATCH, MAX (c->settle_cap * 2, 64)));
  free_scratch (&c->taps_h);
  free_scratch (&c->taps_d);
  free_scratch (&c->cs_h);
  free_scratch (&c->cs_d);
  free_scratch (&c->t);
  free_scratch (&c->k);
  free_scratch (&c->v);
  c->settle_cap = 0;
  if (!(c->taps_h = dfl_vk_buffer_new (dev, rows * tw * f, DFL_VK_MEMORY_HOST, error))
      || !(c->taps_d = dfl_vk_buffer_new (dev, rows * tw * f, DFL_VK_MEMORY_DEVICE, error))
      || !(c->cs_h = dfl_vk_buffer_new (dev, rows * g->head_dim * f, DFL_VK_MEMORY_HOST, error))
      || !(c->cs_d = dfl_vk_buffer_new (dev, rows * g->head_dim * f, DFL_VK_MEMORY_DEVICE, error))
      || !(c->t = dfl_vk_buffer_new (dev, rows * g->hidden * f, DFL_VK_MEMORY_DEVICE, error))
      || !(c->k = dfl_vk_buffer_new (dev, rows * kd * f, DFL_VK_MEMORY_DEVICE, error))
      || !(c->v = dfl_vk_buffer_new (dev, rows * kd * f, DFL_VK_MEMORY_DEVICE, error)))
    return FALSE;
  c->settle_cap = rows;
  return TRUE;
}

/* `rows` rows of `src` (device, one after another) to ring rows start+held …
 * (two copies where the ring wraps). */
static void
ring_write (DflVkDraftCtx *c, DflVkRing *r, DflVkBuffer *ring_buf, DflVkBuffer *src, gsize rows)
{
  gsize row = ROW_BYTES (&c->vd->g);
  gsize at = (r->start + r->held) % r->cap, first = MIN (rows, r->cap - at);

  dfl_vk_copy (c->s, ring_buf, at * row, src, 0, first * row);
  if (first < rows)
    dfl_vk_copy (c->s, ring_buf, 0, src, first * row, (rows - first) * row);
}

/* Settle `n` rows of taps at positions pos …, as dfl_drafter_settle_rows:
 * t = rms(FC · taps, hidden_norm); per layer K = rope(rms_head(Wk · t,
 * k_norm)), V = Wv · t, in batches of DFL_DRAFTER_SETTLE_BATCH rows, then the
 * lazy drops of windowed layers. */
gboolean
dfl_vk_draft_ctx_settle_rows (DflVkDraftCtx *c, gint64 pos, const float *taps, gsize n,
                              GError **error)
{
  DflVkDrafter *vd = c->vd;
  const DflDrafterGeometry *g = &vd->g;
  int hs = g->hidden, hd = g->head_dim, kv = g->kv_heads, kd = kv * hd;
  gsize tw = (gsize) dfl_drafter_geometry_tap_width (g);
  gsize batch = MIN (n, (gsize) DFL_DRAFTER_SETTLE_BATCH);
  float eps = (float) g->eps;

  g_assert (pos == c->first + c->len);
  if (n == 0)
    return TRUE;
  if (!ensure_settle_scratch (c, batch, error))
    return FALSE;
  for (gsize done = 0; done < n; done += batch) {
    int nb = (int) MIN (batch, n - done);
    gint64 at = pos + (gint64) done;
    VkDeviceAddress t = dfl_vk_buffer_address (c->t), k = dfl_vk_buffer_address (c->k);
    VkDeviceAddress v = dfl_vk_buffer_address (c->v), cs = dfl_vk_buffer_address (c->cs_d);

    for (int l = 0; l < g->layers; l++)
      if (!reserve_rows (c, &c->ring[l], nb, error))
        return FALSE;
    memcpy (dfl_vk_buffer_map (c->taps_h), taps + done * tw, nb * tw * sizeof (float));
    dfl_vk_rope_table (dfl_vk_buffer_map (c->cs_h), nb, hd, vd->inv_freq, at);
    dfl_vk_copy (c->s, c->taps_d, 0, c->taps_h, 0, nb * tw * sizeof (float));
    dfl_vk_copy (c->s, c->cs_d, 0, c->cs_h, 0, (gsize) nb * hd * sizeof (float));
    dfl_vk_matmul (c->s, &vd->fc, dfl_vk_buffer_address (c->taps_d), nb, (int) tw, t, hs, hs,
                   FALSE);
    dfl_vk_rmsnorm (c->s, t, t, nb, hs, vd->hidden_norm, eps);
    for (int l = 0; l < g->layers; l++) {
      const DflVkLayer *L = &vd->layers[l];
      DflVkRing *r = &c->ring[l];
      dfl_vk_matmul (c->s, &L->k, t, nb, hs, k, kd, kd, FALSE);
      dfl_vk_matmul (c->s, &L->v, t, nb, hs, v, kd, kd, FALSE);
      dfl_vk_rmsnorm (c->s, k, k, nb * kv, hd, L->k_norm, eps);
      if (dfl_drafter_geometry_rotary (g, l))
        dfl_vk_rope (c->s, k, nb, kv, hd, cs);
      ring_write (c, r, r->k, c->k, nb);
      ring_write (c, r, r->v, c->v, nb);
      r->held += nb;
    }
    c->len += nb;
    if (!dfl_vk_stream_finish (c->s, error))
      return FALSE;
  }
  for (int l = 0; l < g->layers; l++) {
    DflVkRing *r = &c->ring[l];
    int w = dfl_drafter_geometry_window_of (g, l);
    if (w > 0 && r->held > 2 * keep_rows (w)) {
      gsize cut = r->held - keep_rows (w);
      r->start = (r->start + cut) % r->cap;
      r->held -= cut;
      r->dropped += (gint64) cut;
    }
  }
  return TRUE;
}

gboolean
dfl_vk_draft_ctx_queue (DflVkDraftCtx *c, gint64 pos, const float *taps, gsize n_rows,
                        GError **error)
{
  gsize tw = (gsize) dfl_drafter_geometry_tap_width (&c->vd->g);

  if (pos < 0 || pos + (gint64) n_rows >= G_MAXINT || (taps == NULL && n_rows > 0)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "%s: context rows at position %" G_GINT64_FORMAT " (%" G_GSIZE_FORMAT " rows%s)"
                 " cannot be queued", c->vd->path, pos, n_rows, taps ? "" : ", no data");
    return FALSE;
  }
  if (pos > dfl_vk_draft_ctx_next_position (c) || pos < c->first) {
    /* a gap, or a jump back before the context: start over at pos */
    dfl_vk_draft_ctx_truncate (c, 0);
    c->first = pos;
  } else {
    dfl_vk_draft_ctx_truncate (c, pos);
  }
  if (n_rows == 0)
    return TRUE;
  if (c->pending_rows + n_rows > c->pending_cap) {
    c->pending_cap = MAX (c->pending_rows + n_rows, c->pending_cap * 2);
    c->pending = g_renew (float, c->pending, c->pending_cap * tw);
  }
  memcpy (c->pending + c->pending_rows * tw, taps, n_rows * tw * sizeof (float));
  c->pending_rows += n_rows;
  if (c->pending_rows > DFL_DRAFTER_PENDING_ROWS) {
    gsize over = c->pending_rows - DFL_DRAFTER_PENDING_ROWS;
    over = MIN ((over + DFL_DRAFTER_CONTEXT_CHUNK - 1) / DFL_DRAFTER_CONTEXT_CHUNK
                * DFL_DRAFTER_CONTEXT_CHUNK, c->pending_rows);
    if (!dfl_vk_draft_ctx_settle_rows (c, c->first + c->len, c->pending, over, error))
      return FALSE;
    memmove (c->pending, c->pending + over * tw, (c->pending_rows - over) * tw * sizeof (float));
    c->pending_rows -= over;
  }
  return TRUE;
}

gboolean
dfl_vk_draft_ctx_settle (DflVkDraftCtx *c, GError **error)
{
  gsize n = c->pending_rows;

  if (n == 0)
    return TRUE;
  c->pending_rows = 0;
  return dfl_vk_draft_ctx_settle_rows (c, c->first + c->len, c->pending, n, error);
}

gboolean
dfl_vk_draft_ctx_check (const DflVkDraftCtx *c, gint64 anchor_pos, GError **error)
{
  const DflDrafterGeometry *g = &c->vd->g;
  const char *path = c->vd->path;
  gint64 end = dfl_vk_draft_ctx_next_position (c);

  if (anchor_pos < c->first) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT,
                 "%s: a block at position %" G_GINT64_FORMAT " is before the context, which starts at %"
                 G_GINT64_FORMAT "; queue the target's rows from 0 (or from where it should start) first",
                 path, anchor_pos, c->first);
    return FALSE;
  }
  if (anchor_pos > end) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT,
                 "%s: the context ends before position %" G_GINT64_FORMAT "; a block at %" G_GINT64_FORMAT
                 " needs the target's rows of %" G_GINT64_FORMAT " to %" G_GINT64_FORMAT " queued first",
                 path, end, anchor_pos, end, anchor_pos - 1);
    return FALSE;
  }
  for (int l = 0; l < g->layers; l++) {
    const DflVkRing *r = &c->ring[l];
    int w = dfl_drafter_geometry_window_of (g, l);
    gsize held = r->held + c->pending_rows;
    gint64 dropped = r->dropped, base, need;
    if (w == 0)
      continue;
    /* the drop the block's settle will make */
    if (c->pending_rows && held > 2 * keep_rows (w))
      dropped += (gint64) (held - keep_rows (w));
    base = c->first + dropped;
    need = MAX (c->first, anchor_pos + 1 - w);
    if (need < anchor_pos && base > need) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT,
                   "%s: the context is short: layer %d (window %d) holds positions from %" G_GINT64_FORMAT
                   " on, a block at %" G_GINT64_FORMAT " reads it from %" G_GINT64_FORMAT
                   " (a rewind deeper than the %d positions kept past the window); reset and queue the"
                   " target's rows again from %" G_GINT64_FORMAT " (at least from %" G_GINT64_FORMAT ")",
                   path, l, w, base, anchor_pos, need, DFL_DRAFTER_BLOCK_SLACK, c->first, need);
      return FALSE;
    }
  }
  return TRUE;
}

gboolean
dfl_vk_draft_ctx_read_kv (DflVkDraftCtx *c, int layer, int kv_head, float **k, float **v,
                          gsize *rows, gint64 *from, GError **error)
{
  const DflDrafterGeometry *g = &c->vd->g;
  const DflVkRing *r;
  gsize kvd = (gsize) g->kv_heads * g->head_dim;
  DflVkBuffer *src[2];
  float **dst[2] = { k, v };

  g_return_val_if_fail (layer >= 0 && layer < g->layers && kv_head >= 0 && kv_head < g->kv_heads,
                        FALSE);
  r = &c->ring[layer];
  src[0] = r->k;
  src[1] = r->v;
  if (rows)
    *rows = r->held;
  if (from)
    *from = c->first + r->dropped;
  for (int i = 0; i < 2; i++) {
    float *all, *out;
    if (!dst[i])
      continue;
    out = *dst[i] = g_new (float, MAX (r->held, 1) * g->head_dim);
    if (r->held == 0)
      continue;
    all = g_new (float, r->cap * kvd);
    if (!dfl_vk_download (c->vd->dev, all, src[i], 0, r->cap * kvd * sizeof (float), error)) {
      g_free (all);
      return FALSE;
    }
    for (gsize j = 0; j < r->held; j++)
      memcpy (out + j * g->head_dim,
              all + ((r->start + j) % r->cap) * kvd + (gsize) kv_head * g->head_dim,
              g->head_dim * sizeof (float));
    g_free (all);
  }
  return TRUE;
}
