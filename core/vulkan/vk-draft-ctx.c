/* gst-dflash — a sequence's drafter context on a Vulkan device: each
 * layer's keys and values in a ring of device rows, settled there; the
 * bookkeeping is draft-context.c's. A ring lets a drop or a rewind move no
 * data: only growth copies.
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

static const DflDraftCtxOps vk_ops = {
  .settle = dfl_vk_draft_ctx_settle_rows,
  .block = dfl_vk_draft_ctx_block,
  .select = dfl_vk_draft_ctx_select,
  .draft = dfl_vk_draft_ctx_draft,
  .read_kv = dfl_vk_draft_ctx_read_kv,
  .free = (void (*) (DflDraftCtx *)) dfl_vk_draft_ctx_free_rows,
};

DflDraftCtx *
dfl_vk_draft_ctx_new (DflDrafterWeights *w, GError **error)
{
  DflVkDraftCtx *c = dfl_draft_ctx_alloc (sizeof (DflVkDraftCtx), &vk_ops, w);

  c->vd = w->native;
  c->ring = g_new0 (DflVkRing, c->vd->g->layers);
  if (!(c->s = dfl_vk_stream_new (c->vd->dev, error))) {
    dfl_draft_ctx_free (&c->base);
    return NULL;
  }
  return &c->base;
}

void
dfl_vk_draft_ctx_free_rows (DflVkDraftCtx *c)
{
  DflVkBuffer **scratch[] = {
    &c->taps_h, &c->taps_d, &c->cs_h, &c->cs_d, &c->t, &c->k, &c->v, &c->h, &c->x, &c->x2,
    &c->q, &c->kb, &c->vb, &c->y, &c->o, &c->dyn, &c->gate, &c->up, &c->bcs_h, &c->bcs_d,
    &c->scores, &c->vals, &c->idx, &c->hp, &c->ids_d, &c->ids_h,
  };

  for (guint i = 0; i < G_N_ELEMENTS (scratch); i++)
    free_scratch (scratch[i]);
  for (int l = 0; c->ring && l < c->vd->g->layers; l++) {
    free_scratch (&c->ring[l].k);
    free_scratch (&c->ring[l].v);
  }
  g_free (c->ring);
  g_clear_pointer (&c->s, dfl_vk_stream_free);
}

/* Room for `n` more rows in a ring: a larger ring, the live rows copied to
 * its front. The stream holds no other work here (settle_rows finishes each
 * batch), so the old ring can go once the copy is done. */
static gboolean
reserve_rows (DflVkDraftCtx *c, DflVkRing *r, DflDraftLayerRows *rows, gsize n, GError **error)
{
  DflVkDevice *dev = c->vd->dev;
  gsize row = ROW_BYTES (c->vd->g), cap, start = r->cap ? rows->start % r->cap : 0;
  DflVkBuffer *k, *v;

  if (rows->held + n <= r->cap)
    return TRUE;
  cap = MAX (rows->held + n, r->cap * 2);
  cap = MAX (cap, 64);
  if (!(k = dfl_vk_buffer_new (dev, cap * row, DFL_VK_MEMORY_DEVICE, error)))
    return FALSE;
  if (!(v = dfl_vk_buffer_new (dev, cap * row, DFL_VK_MEMORY_DEVICE, error))) {
    dfl_vk_buffer_free (k);
    return FALSE;
  }
  if (rows->held) {
    gsize first = MIN (rows->held, r->cap - start);
    dfl_vk_copy (c->s, k, 0, r->k, start * row, first * row);
    dfl_vk_copy (c->s, v, 0, r->v, start * row, first * row);
    if (first < rows->held) {
      dfl_vk_copy (c->s, k, first * row, r->k, 0, (rows->held - first) * row);
      dfl_vk_copy (c->s, v, first * row, r->v, 0, (rows->held - first) * row);
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
  rows->start = 0;
  return TRUE;
}

static gboolean
ensure_settle_scratch (DflVkDraftCtx *c, gsize rows, GError **error)
{
  const DflDrafterGeometry *g = c->vd->g;
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
ring_write (DflVkDraftCtx *c, DflVkRing *r, const DflDraftLayerRows *live, DflVkBuffer *ring_buf,
            DflVkBuffer *src, gsize rows)
{
  gsize row = ROW_BYTES (c->vd->g);
  gsize at = (live->start + live->held) % r->cap, first = MIN (rows, r->cap - at);

  dfl_vk_copy (c->s, ring_buf, at * row, src, 0, first * row);
  if (first < rows)
    dfl_vk_copy (c->s, ring_buf, 0, src, first * row, (rows - first) * row);
}

/* Settle the first `n` waiting rows (host taps): t = rms(FC · taps,
 * hidden_norm); per layer K = rope(rms_head(Wk · t, k_norm)), V = Wv · t,
 * in batches of DFL_DRAFTER_SETTLE_BATCH rows. */
gboolean
dfl_vk_draft_ctx_settle_rows (DflDraftCtx *ctx, gsize n, GError **error)
{
  DflVkDraftCtx *c = (DflVkDraftCtx *) ctx;
  DflVkDrafter *vd = c->vd;
  const DflDrafterGeometry *g = vd->g;
  int hs = g->hidden, hd = g->head_dim, kv = g->kv_heads, kd = kv * hd;
  gsize tw = (gsize) dfl_drafter_geometry_tap_width (g);
  gsize batch = MIN (n, (gsize) DFL_DRAFTER_SETTLE_BATCH);
  const float *taps = ctx->pending;
  float eps = (float) g->eps;

  if (n == 0)
    return TRUE;
  if (!ensure_settle_scratch (c, batch, error))
    return FALSE;
  for (gsize done = 0; done < n; done += batch) {
    int nb = (int) MIN (batch, n - done);
    gint64 at = ctx->first + ctx->len;
    VkDeviceAddress t = dfl_vk_buffer_address (c->t), k = dfl_vk_buffer_address (c->k);
    VkDeviceAddress v = dfl_vk_buffer_address (c->v), cs = dfl_vk_buffer_address (c->cs_d);

    for (int l = 0; l < g->layers; l++)
      if (!reserve_rows (c, &c->ring[l], &ctx->rows[l], nb, error))
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
      ring_write (c, r, &ctx->rows[l], r->k, c->k, nb);
      ring_write (c, r, &ctx->rows[l], r->v, c->v, nb);
    }
    dfl_draft_ctx_settled (ctx, nb);
    if (!dfl_vk_stream_finish (c->s, error))
      return FALSE;
  }
  return TRUE;
}

gboolean
dfl_vk_draft_ctx_read_kv (DflDraftCtx *ctx, int layer, int kv_head, float **k, float **v,
                          GError **error)
{
  DflVkDraftCtx *c = (DflVkDraftCtx *) ctx;
  const DflDrafterGeometry *g = ctx->g;
  const DflVkRing *r = &c->ring[layer];
  const DflDraftLayerRows *rows = &ctx->rows[layer];
  gsize kvd = (gsize) g->kv_heads * g->head_dim;
  DflVkBuffer *src[2] = { r->k, r->v };
  float **dst[2] = { k, v };

  for (int i = 0; i < 2; i++) {
    float *all, *out;
    if (!dst[i])
      continue;
    out = *dst[i] = g_new (float, MAX (rows->held, 1) * g->head_dim);
    if (rows->held == 0)
      continue;
    all = g_new (float, r->cap * kvd);
    if (!dfl_vk_download (c->vd->dev, all, src[i], 0, r->cap * kvd * sizeof (float), error)) {
      g_free (all);
      return FALSE;
    }
    for (gsize j = 0; j < rows->held; j++)
      memcpy (out + j * g->head_dim,
              all + ((rows->start + j) % r->cap) * kvd + (gsize) kv_head * g->head_dim,
              g->head_dim * sizeof (float));
    g_free (all);
  }
  return TRUE;
}
