/* gst-dflash — the drafter's block: a few Qwen3-shaped layers over the rows
 * [anchor, MASK …], each wrapped in a grouped causal convolution over the
 * block's rows, attending to the context's keys and values before the
 * anchor and to every row of the block (DESIGN.md, "The math").
 */
#include "drafter-private.h"
#include "dfl-error.h"
#include "dfl-kernels.h"

#include <math.h>
#include <string.h>

static void
ensure_scratch (DflDrafter *d)
{
  const DflDrafterGeometry *g = &d->g;
  gsize b = g->block, hs = g->hidden, hd = g->head_dim;
  gsize qd = (gsize) g->heads * hd, kd = (gsize) g->kv_heads * hd;
  gsize m = (gsize) (g->heads / g->kv_heads) * b;

  if (d->s_x)
    return;
  d->s_x = g_new (float, b * hs);
  d->s_x2 = g_new (float, b * hs);
  d->s_o = g_new (float, b * hs);
  d->s_q = g_new (float, b * qd);
  d->s_y = g_new (float, b * qd);
  d->s_k = g_new (float, b * kd);
  d->s_v = g_new (float, b * kd);
  d->s_d = g_new (float, b * 2 * MAX (g->conv_kernel, 1) * (hs / g->conv_group));
  d->s_gate = g_new (float, b * g->intermediate);
  d->s_up = g_new (float, b * g->intermediate);
  d->s_qg = g_new (float, m * hd);
  d->s_og = g_new (float, m * hd);
  d->s_kb = g_new (float, b * hd);
}

/* y = conv_stage(x) with the row kernels d (rows × [2][kernel][groups]):
 * y[r][i] = Σ_{o < min(kernel, r+1)} (base[s][o][i] + d[r][s][o][i / group]) · x[r−o][i].
 * Causal over the block's rows; `y` must not be `x`. */
static void
conv_stage (const DflDrafterGeometry *g, const DflConv *c, int stage, const float *x,
            const float *d, float *y)
{
  int hs = g->hidden, gs = g->conv_group, kn = g->conv_kernel, groups = hs / gs;

  memset (y, 0, sizeof (float) * g->block * hs);
  for (int r = 0; r < g->block; r++) {
    float *out = y + (gsize) r * hs;
    const float *dyn = d + (gsize) r * 2 * kn * groups + (gsize) stage * kn * groups;
    for (int o = 0; o < MIN (kn, r + 1); o++) {
      const float *src = x + (gsize) (r - o) * hs;
      const float *base = c->base + ((gsize) stage * kn + o) * hs;
      for (int gi = 0; gi < groups; gi++) {
        float k = dyn[o * groups + gi];
        for (int i = gi * gs; i < (gi + 1) * gs; i++)
          out[i] += (base[i] + k) * src[i];
      }
    }
  }
}

/* Attention of the block's rows of one layer. q: rows × heads × hd, k and v:
 * rows × kv_heads × hd (roped where the layer rotates); y: rows × heads × hd.
 * Context rows [lo, hi) of the layer, as seen from each row: row r sees no
 * further back than anchor + r + 1 − window.
 *
 * The products go through dfl_matmul_w (F32 "weights": the keys, then the
 * values transposed) rather than BLAS: OpenBLAS's threads spin after each
 * call and would take the cores the next projection's threads need. */
static void
attend (DflDrafter *d, int layer, gint64 anchor, gint64 lo, gint64 hi)
{
  const DflDrafterGeometry *g = &d->g;
  const DflLayerContext *c = &d->ctx[layer];
  int rows = g->block, hd = g->head_dim, nh = g->heads, kv = g->kv_heads, rep = nh / kv;
  int window = dfl_drafter_geometry_window_of (g, layer);
  int n = (int) (hi - lo), m = rep * rows, w = n + rows;
  gsize off = c->start + (gsize) (lo - (d->first + c->dropped));
  float scale = 1.0f / sqrtf ((float) hd);

  if ((gsize) m * w > d->s_sc_cap) {
    d->s_sc_cap = (gsize) m * w * 2;
    g_free (d->s_sc);
    d->s_sc = g_new (float, d->s_sc_cap);
  }
  if ((gsize) hd * w > d->s_vt_cap) {
    d->s_vt_cap = (gsize) hd * w * 2;
    g_free (d->s_vt);
    d->s_vt = g_new (float, d->s_vt_cap);
  }
  for (int gi = 0; gi < kv; gi++) {
    const float *kc = n > 0 ? c->k[gi] + off * hd : NULL, *vc = n > 0 ? c->v[gi] + off * hd : NULL;
    DflWeights keys = { kc, DFL_DTYPE_F32, n, hd };
    DflWeights block_keys = { d->s_kb, DFL_DTYPE_F32, rows, hd };
    DflWeights values = { d->s_vt, DFL_DTYPE_F32, hd, w };
    /* the group's query heads, a (head, row) a line: one product per group */
    for (int qi = 0; qi < rep; qi++)
      for (int r = 0; r < rows; r++)
        memcpy (d->s_qg + ((gsize) qi * rows + r) * hd,
                d->s_q + ((gsize) r * nh + gi * rep + qi) * hd, hd * sizeof (float));
    for (int r = 0; r < rows; r++)
      memcpy (d->s_kb + (gsize) r * hd, d->s_k + ((gsize) r * kv + gi) * hd, hd * sizeof (float));
    /* values transposed, context then block: [hd][w] */
    for (int j = 0; j < n; j++)
      for (int i = 0; i < hd; i++)
        d->s_vt[(gsize) i * w + j] = vc[(gsize) j * hd + i];
    for (int r = 0; r < rows; r++)
      for (int i = 0; i < hd; i++)
        d->s_vt[(gsize) i * w + n + r] = d->s_v[((gsize) r * kv + gi) * hd + i];
    if (n > 0)
      dfl_matmul_w (&keys, d->s_qg, m, hd, d->s_sc, w, n, 0);
    dfl_matmul_w (&block_keys, d->s_qg, m, hd, d->s_sc + n, w, rows, 0);
    for (int i = 0; i < m; i++) {
      float *row = d->s_sc + (gsize) i * w;
      for (int j = 0; j < w; j++)
        row[j] *= scale;
      if (window > 0 && n > 0) {
        /* a row further on sees less far back */
        gint64 from = anchor + i % rows + 1 - window;
        gint64 masked = CLAMP (from - lo, 0, n);
        for (gint64 j = 0; j < masked; j++)
          row[j] = -INFINITY;
      }
      dfl_softmax (row, w);
    }
    dfl_matmul_w (&values, d->s_sc, m, w, d->s_og, hd, hd, 0);
    for (int qi = 0; qi < rep; qi++)
      for (int r = 0; r < rows; r++)
        memcpy (d->s_y + ((gsize) r * nh + gi * rep + qi) * hd,
                d->s_og + ((gsize) qi * rows + r) * hd, hd * sizeof (float));
  }
}

/* x (rows × hidden) through the convolution's stage 0, its row kernels into
 * s_d; without a convolution x stays as it is. Returns the rows to use. */
static float *
conv_in (DflDrafter *d, const DflConv *c, float *x, float *tmp)
{
  const DflDrafterGeometry *g = &d->g;
  int hs = g->hidden, kd = 2 * g->conv_kernel * (hs / g->conv_group);

  if (!d->conv)
    return x;
  dfl_matmul_w (&c->proj, x, g->block, hs, d->s_d, kd, kd, 0);
  conv_stage (g, c, 0, x, d->s_d, tmp);
  return tmp;
}

/* h += conv_stage1(x) with the row kernels conv_in made (or h += x). */
static void
conv_out_add (DflDrafter *d, const DflConv *c, float *h, const float *x, float *tmp)
{
  const DflDrafterGeometry *g = &d->g;
  gsize n = (gsize) g->block * g->hidden;

  if (d->conv) {
    conv_stage (g, c, 1, x, d->s_d, tmp);
    x = tmp;
  }
  dfl_add (h, x, n);
}

gboolean
dfl_drafter_block (DflDrafter *d, gint64 anchor_pos, float *h, GError **error)
{
  const DflDrafterGeometry *g = &d->g;
  int rows = g->block, hs = g->hidden, hd = g->head_dim;
  int qd = g->heads * hd, kd = g->kv_heads * hd, ffn = g->intermediate;
  float eps = (float) g->eps;

  g_return_val_if_fail (d != NULL && h != NULL, FALSE);
  if (!dfl_drafter_context_check (d, anchor_pos, error))
    return FALSE;
  dfl_drafter_settle (d);
  ensure_scratch (d);

  for (int l = 0; l < g->layers; l++) {
    const DflDrafterLayer *L = &d->layers[l];
    const DflLayerContext *c = &d->ctx[l];
    int window = dfl_drafter_geometry_window_of (g, l);
    gint64 base = d->first + c->dropped;
    gint64 hi = MAX (MIN (anchor_pos, d->first + d->len), base);
    gint64 lo = window > 0 ? CLAMP (anchor_pos + 1 - window, base, hi) : base;
    float *x;

    /* attention */
    dfl_rmsnorm_to (d->s_x, h, rows, hs, L->in_norm, eps);
    x = conv_in (d, &L->attn_conv, d->s_x, d->s_x2);
    dfl_matmul_w (&L->q, x, rows, hs, d->s_q, qd, qd, 0);
    dfl_matmul_w (&L->k, x, rows, hs, d->s_k, kd, kd, 0);
    dfl_matmul_w (&L->v, x, rows, hs, d->s_v, kd, kd, 0);
    dfl_rmsnorm (d->s_q, rows * g->heads, hd, L->q_norm, eps);
    dfl_rmsnorm (d->s_k, rows * g->kv_heads, hd, L->k_norm, eps);
    if (dfl_drafter_geometry_rotary (g, l)) {
      dfl_rope (d->s_q, rows, g->heads, hd, d->inv_freq, (int) anchor_pos);
      dfl_rope (d->s_k, rows, g->kv_heads, hd, d->inv_freq, (int) anchor_pos);
    }
    attend (d, l, anchor_pos, lo, hi);
    dfl_matmul_w (&L->o, d->s_y, rows, qd, d->s_o, hs, hs, 0);
    conv_out_add (d, &L->attn_conv, h, d->s_o, d->s_x);

    /* the MLP, wrapped the same way */
    dfl_rmsnorm_to (d->s_x, h, rows, hs, L->post_norm, eps);
    x = conv_in (d, &L->mlp_conv, d->s_x, d->s_x2);
    dfl_matmul_w (&L->gate, x, rows, hs, d->s_gate, ffn, ffn, 0);
    dfl_matmul_w (&L->up, x, rows, hs, d->s_up, ffn, ffn, 0);
    dfl_silu_mul (d->s_gate, d->s_up, (gsize) rows * ffn);
    dfl_matmul_w (&L->down, d->s_gate, rows, ffn, d->s_o, hs, hs, 0);
    conv_out_add (d, &L->mlp_conv, h, d->s_o, d->s_x);
  }
  dfl_rmsnorm (h, rows, hs, d->norm, eps);
  return TRUE;
}
