/* gst-dflash — the drafter's context: the reference's bookkeeping (queue,
 * settle, truncate, reset, per-layer windows, lazy drops), with slack kept
 * past each window so a rewind stays exact, and a check that refuses a
 * block whose context is no longer held rather than drafting it short.
 */
#include "drafter-private.h"
#include "dfl-error.h"
#include "dfl-kernels.h"

#include <string.h>

void
dfl_drafter_init_state (DflDrafter *d)
{
  const DflDrafterGeometry *g = &d->g;

  d->inv_freq = g_new0 (float, g->head_dim / 2);
  dfl_rope_inv_freq (d->inv_freq, g->head_dim, g->rope_theta);
  d->ctx = g_new0 (DflLayerContext, g->layers);
  for (int l = 0; l < g->layers; l++) {
    d->ctx[l].k = g_new0 (float *, g->kv_heads);
    d->ctx[l].v = g_new0 (float *, g->kv_heads);
  }
}

void
dfl_drafter_free_state (DflDrafter *d)
{
  float **scratch[] = { &d->s_x, &d->s_x2, &d->s_q, &d->s_k, &d->s_v, &d->s_y, &d->s_o, &d->s_d,
                        &d->s_gate, &d->s_up, &d->s_qg, &d->s_kb, &d->s_og, &d->s_sc, &d->s_vt };

  for (guint i = 0; i < G_N_ELEMENTS (scratch); i++)
    g_clear_pointer (scratch[i], g_free);
  if (d->ctx) {
    for (int l = 0; l < d->g.layers; l++) {
      for (int h = 0; h < d->g.kv_heads; h++) {
        g_free (d->ctx[l].k[h]);
        g_free (d->ctx[l].v[h]);
      }
      g_free (d->ctx[l].k);
      g_free (d->ctx[l].v);
    }
    g_clear_pointer (&d->ctx, g_free);
  }
  g_clear_pointer (&d->inv_freq, g_free);
  g_clear_pointer (&d->pending, g_free);
}

gint64
dfl_drafter_next_position (const DflDrafter *d)
{
  return d->first + d->len + (gint64) d->pending_rows;
}

void
dfl_drafter_span (const DflDrafter *d, gint64 *first, gint64 *end)
{
  if (first)
    *first = d->first;
  if (end)
    *end = dfl_drafter_next_position (d);
}

void
dfl_drafter_truncate (DflDrafter *d, gint64 pos)
{
  gint64 held_end = d->first + d->len, keep;

  /* waiting rows past pos go first, then settled ones */
  d->pending_rows = MIN (d->pending_rows, (gsize) MAX (pos - held_end, 0));
  keep = MIN (MAX (pos - d->first, 0), d->len);
  for (int l = 0; l < d->g.layers; l++) {
    DflLayerContext *c = &d->ctx[l];
    c->held = (gsize) MAX (keep - c->dropped, 0);
    c->dropped = MIN (c->dropped, keep);
    if (c->held == 0)
      c->start = 0;
  }
  d->len = keep;
}

void
dfl_drafter_reset (DflDrafter *d)
{
  dfl_drafter_truncate (d, 0);
  d->first = 0;
}

/* Room for `n` more rows after the live ones: the dead rows in front (let go
 * by drops) are reclaimed first, so a long text does not grow the buffers. */
static void
reserve_rows (DflLayerContext *c, int kv_heads, int hd, gsize n)
{
  gsize need = c->held + n;

  if (c->start + need <= c->cap)
    return;
  if (need <= c->cap) {
    for (int h = 0; h < kv_heads; h++) {
      memmove (c->k[h], c->k[h] + c->start * hd, c->held * hd * sizeof (float));
      memmove (c->v[h], c->v[h] + c->start * hd, c->held * hd * sizeof (float));
    }
    c->start = 0;
    return;
  }
  {
    gsize cap = MAX (need, c->cap * 2);
    cap = MAX (cap, 64);
    for (int h = 0; h < kv_heads; h++) {
      float *k = g_new (float, cap * hd), *v = g_new (float, cap * hd);
      if (c->held) {
        memcpy (k, c->k[h] + c->start * hd, c->held * hd * sizeof (float));
        memcpy (v, c->v[h] + c->start * hd, c->held * hd * sizeof (float));
      }
      g_free (c->k[h]);
      g_free (c->v[h]);
      c->k[h] = k;
      c->v[h] = v;
    }
    c->cap = cap;
    c->start = 0;
  }
}

/* The rows a windowed layer keeps after a drop, and the count past which it
 * drops: twice that, so drops are rare and each lets go of many rows. */
static gsize
keep_rows (int window)
{
  return (gsize) window + DFL_DRAFTER_BLOCK_SLACK;
}

/* Settle `n` rows of taps at positions pos …: t = rms(FC · taps, hidden_norm),
 * K = rope(rms_head(Wk · t, k_norm)), V = Wv · t, for every layer. A batch
 * goes through each matrix in one product (DFL_DRAFTER_SETTLE_BATCH rows);
 * the products are batch-invariant, so how the rows are batched (a prompt
 * at once, a round's few rows, a settle forced by the pending limit) changes
 * no key or value. */
void
dfl_drafter_settle_rows (DflDrafter *d, gint64 pos, const float *taps, gsize n)
{
  const DflDrafterGeometry *g = &d->g;
  int hs = g->hidden, hd = g->head_dim, kv = g->kv_heads, kd = kv * hd;
  int tw = dfl_drafter_geometry_tap_width (g);
  gsize batch = MIN (n, (gsize) DFL_DRAFTER_SETTLE_BATCH);
  float *t, *k, *v;
  float eps = (float) g->eps;

  g_assert (pos == d->first + d->len);
  if (n == 0)
    return;
  t = g_new (float, batch * hs);
  k = g_new (float, batch * kd);
  v = g_new (float, batch * kd);
  for (gsize done = 0; done < n; done += batch) {
    int nb = (int) MIN (batch, n - done);
    gint64 at = pos + (gint64) done;
    dfl_matmul_w (&d->fc, taps + done * tw, nb, tw, t, hs, hs, 0);
    dfl_rmsnorm (t, nb, hs, d->hidden_norm, eps);
    for (int l = 0; l < g->layers; l++) {
      const DflDrafterLayer *L = &d->layers[l];
      DflLayerContext *c = &d->ctx[l];
      dfl_matmul_w (&L->k, t, nb, hs, k, kd, kd, 0);
      dfl_matmul_w (&L->v, t, nb, hs, v, kd, kd, 0);
      dfl_rmsnorm (k, nb * kv, hd, L->k_norm, eps);
      if (dfl_drafter_geometry_rotary (g, l))
        dfl_rope (k, nb, kv, hd, d->inv_freq, (int) at);
      reserve_rows (c, kv, hd, nb);
      /* [row][kv head][hd] to a buffer per head: attention reads a head's
       * rows as one matrix */
      for (int r = 0; r < nb; r++) {
        gsize dst = (c->start + c->held + r) * hd;
        for (int h = 0; h < kv; h++) {
          memcpy (c->k[h] + dst, k + ((gsize) r * kv + h) * hd, hd * sizeof (float));
          memcpy (c->v[h] + dst, v + ((gsize) r * kv + h) * hd, hd * sizeof (float));
        }
      }
      c->held += nb;
    }
    d->len += nb;
  }
  g_free (t);
  g_free (k);
  g_free (v);
  /* a windowed layer reads no further back than its window (plus the slack
   * a rewind may need): let go of the rest, lazily */
  for (int l = 0; l < g->layers; l++) {
    DflLayerContext *c = &d->ctx[l];
    int w = dfl_drafter_geometry_window_of (g, l);
    if (w > 0 && c->held > 2 * keep_rows (w)) {
      gsize cut = c->held - keep_rows (w);
      c->start += cut;
      c->held -= cut;
      c->dropped += (gint64) cut;
    }
  }
}

void
dfl_drafter_queue_context (DflDrafter *d, gint64 pos, const float *taps, gsize n_rows)
{
  gsize tw = (gsize) dfl_drafter_geometry_tap_width (&d->g);

  g_return_if_fail (pos >= 0 && pos + (gint64) n_rows < G_MAXINT);
  g_return_if_fail (taps != NULL || n_rows == 0);

  if (pos > dfl_drafter_next_position (d) || pos < d->first) {
    /* a gap, or a jump back before the context: start over at pos */
    dfl_drafter_truncate (d, 0);
    d->first = pos;
  } else {
    dfl_drafter_truncate (d, pos);
  }
  if (n_rows == 0)
    return;
  if (d->pending_rows + n_rows > d->pending_cap) {
    d->pending_cap = MAX (d->pending_rows + n_rows, d->pending_cap * 2);
    d->pending = g_renew (float, d->pending, d->pending_cap * tw);
  }
  memcpy (d->pending + d->pending_rows * tw, taps, n_rows * tw * sizeof (float));
  d->pending_rows += n_rows;
  /* past the limit the oldest rows go through at once, a multiple of
   * CONTEXT_CHUNK of them: one move of what stays, not one a chunk */
  if (d->pending_rows > DFL_DRAFTER_PENDING_ROWS) {
    gsize over = d->pending_rows - DFL_DRAFTER_PENDING_ROWS;
    over = MIN ((over + DFL_DRAFTER_CONTEXT_CHUNK - 1) / DFL_DRAFTER_CONTEXT_CHUNK
                * DFL_DRAFTER_CONTEXT_CHUNK, d->pending_rows);
    dfl_drafter_settle_rows (d, d->first + d->len, d->pending, over);
    memmove (d->pending, d->pending + over * tw, (d->pending_rows - over) * tw * sizeof (float));
    d->pending_rows -= over;
  }
}

void
dfl_drafter_settle (DflDrafter *d)
{
  gsize n = d->pending_rows;

  if (n == 0)
    return;
  d->pending_rows = 0;
  dfl_drafter_settle_rows (d, d->first + d->len, d->pending, n);
}

void
dfl_drafter_push_context (DflDrafter *d, gint64 pos, const float *taps, gsize n_rows)
{
  dfl_drafter_queue_context (d, pos, taps, n_rows);
  dfl_drafter_settle (d);
}

gboolean
dfl_drafter_context_check (const DflDrafter *d, gint64 anchor_pos, GError **error)
{
  const DflDrafterGeometry *g = &d->g;
  gint64 end = dfl_drafter_next_position (d);

  if (anchor_pos < d->first) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT,
                 "%s: a block at position %" G_GINT64_FORMAT " is before the context, which starts at %"
                 G_GINT64_FORMAT "; queue the target's rows from 0 (or from where it should start) first",
                 d->path, anchor_pos, d->first);
    return FALSE;
  }
  if (anchor_pos > end) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT,
                 "%s: the context ends before position %" G_GINT64_FORMAT "; a block at %" G_GINT64_FORMAT
                 " needs the target's rows of %" G_GINT64_FORMAT " to %" G_GINT64_FORMAT " queued first",
                 d->path, end, anchor_pos, end, anchor_pos - 1);
    return FALSE;
  }
  for (int l = 0; l < g->layers; l++) {
    const DflLayerContext *c = &d->ctx[l];
    int w = dfl_drafter_geometry_window_of (g, l);
    gsize held = c->held + d->pending_rows;
    gint64 dropped = c->dropped, base, need;
    if (w == 0)
      continue;
    /* the drop the block's settle will make (settle_rows drops once, at its end) */
    if (d->pending_rows && held > 2 * keep_rows (w))
      dropped += (gint64) (held - keep_rows (w));
    base = d->first + dropped;
    need = MAX (d->first, anchor_pos + 1 - w);
    if (need < anchor_pos && base > need) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT,
                   "%s: the context is short: layer %d (window %d) holds positions from %" G_GINT64_FORMAT
                   " on, a block at %" G_GINT64_FORMAT " reads it from %" G_GINT64_FORMAT
                   " (a rewind deeper than the %d positions kept past the window); reset and queue the"
                   " target's rows again from %" G_GINT64_FORMAT " (at least from %" G_GINT64_FORMAT ")",
                   d->path, l, w, base, anchor_pos, need, DFL_DRAFTER_BLOCK_SLACK, d->first, need);
      return FALSE;
    }
  }
  return TRUE;
}

void
dfl_drafter_context_kv (const DflDrafter *d, int layer, int kv_head, const float **k,
                        const float **v, gsize *rows, gint64 *from)
{
  const DflLayerContext *c;

  g_return_if_fail (layer >= 0 && layer < d->g.layers && kv_head >= 0 && kv_head < d->g.kv_heads);
  c = &d->ctx[layer];
  if (k)
    *k = c->k[kv_head] ? c->k[kv_head] + c->start * d->g.head_dim : NULL;
  if (v)
    *v = c->v[kv_head] ? c->v[kv_head] + c->start * d->g.head_dim : NULL;
  if (rows)
    *rows = c->held;
  if (from)
    *from = d->first + c->dropped;
}
