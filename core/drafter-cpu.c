/* gst-dflash — the drafter on the CPU: a sequence's context (each layer's
 * keys and values, a buffer per KV head) and the block: a few
 * Qwen3-shaped layers over the rows [anchor, MASK …], each wrapped in a
 * grouped causal convolution over the block's rows, attending to the
 * context's keys and values before the anchor and to every row of the
 * block (DESIGN.md, "The math"), then the target's head. The bookkeeping
 * is draft-context.c's.
 */
#include "draft-context.h"
#include "dfl-error.h"
#include "dfl-kernels.h"

#include <math.h>
#include <string.h>

/* A layer's keys and values per KV head, a row of head_dim per position, in
 * buffers of `cap` rows; the module's rows say which are live. */
typedef struct {
  float **k, **v;
  gsize cap;
} CpuLayer;

typedef struct {
  DflDraftCtx base;
  const DflDrafterWeights *hw;      /* the host weights */
  DflWeights embed, head;           /* the target's */
  CpuLayer *layers;
  /* the block's rows, all of them after the last norm */
  float *h;
  guint16 *row16;
  /* the block's scratch, sized at first use; the scores grow with the context */
  float *s_x, *s_x2, *s_q, *s_k, *s_v, *s_y, *s_o, *s_d, *s_gate, *s_up;
  float *s_qg, *s_kb, *s_og, *s_sc, *s_vt;
  gsize s_sc_cap, s_vt_cap;
} CpuDraftCtx;

static void
ensure_scratch (CpuDraftCtx *d)
{
  const DflDrafterGeometry *g = d->base.g;
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
attend (CpuDraftCtx *d, int layer, gint64 anchor, gint64 lo, gint64 hi)
{
  const DflDrafterGeometry *g = d->base.g;
  const CpuLayer *c = &d->layers[layer];
  const DflDraftLayerRows *rows_of = &d->base.rows[layer];
  int rows = g->block, hd = g->head_dim, nh = g->heads, kv = g->kv_heads, rep = nh / kv;
  int window = dfl_drafter_geometry_window_of (g, layer);
  int n = (int) (hi - lo), m = rep * rows, w = n + rows;
  gsize off = rows_of->start + (gsize) (lo - (d->base.first + rows_of->dropped));
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
conv_in (CpuDraftCtx *d, const DflConv *c, float *x, float *tmp)
{
  const DflDrafterGeometry *g = d->base.g;
  int hs = g->hidden, kd = 2 * g->conv_kernel * (hs / g->conv_group);

  if (!d->hw->conv)
    return x;
  dfl_matmul_w (&c->proj, x, g->block, hs, d->s_d, kd, kd, 0);
  conv_stage (g, c, 0, x, d->s_d, tmp);
  return tmp;
}

/* h += conv_stage1(x) with the row kernels conv_in made (or h += x). */
static void
conv_out_add (CpuDraftCtx *d, const DflConv *c, float *h, const float *x, float *tmp)
{
  const DflDrafterGeometry *g = d->base.g;
  gsize n = (gsize) g->block * g->hidden;

  if (d->hw->conv) {
    conv_stage (g, c, 1, x, d->s_d, tmp);
    x = tmp;
  }
  dfl_add (h, x, n);
}

/* Row `id` of a trunk matrix, as F32. */
static void
trunk_row (CpuDraftCtx *d, const DflWeights *t, int id, float *out)
{
  gsize cols = (gsize) t->cols;
  const guint8 *src = (const guint8 *) t->data + (gsize) id * cols * dfl_dtype_size (t->type);

  if (t->type == DFL_DTYPE_F32) {
    memcpy (out, src, cols * sizeof (float));
    return;
  }
  /* the mapping need not be 2-byte aligned: copy the bytes first */
  memcpy (d->row16, src, cols * sizeof (guint16));
  if (t->type == DFL_DTYPE_BF16)
    dfl_bf16_to_f32_n (d->row16, out, cols);
  else
    dfl_f16_to_f32_n (d->row16, out, cols);
}

static gboolean
cpu_block (DflDraftCtx *ctx, gint64 anchor_pos, guint32 anchor, int width, const DflTensor *out,
           GError **error)
{
  CpuDraftCtx *d = (CpuDraftCtx *) ctx;
  const DflDrafterWeights *hw = d->hw;
  const DflDrafterGeometry *g = ctx->g;
  int rows = g->block, hs = g->hidden, hd = g->head_dim;
  int qd = g->heads * hd, kd = g->kv_heads * hd, ffn = g->intermediate;
  float eps = (float) g->eps, *h = d->h, *o = dfl_tensor_data (out);

  ensure_scratch (d);
  /* [anchor, MASK × (block − 1)] in the target's embedding */
  trunk_row (d, &d->embed, (int) anchor, h);
  for (int r = 1; r < rows; r++)
    trunk_row (d, &d->embed, (int) g->mask_token, h + (gsize) r * hs);

  for (int l = 0; l < g->layers; l++) {
    const DflDrafterLayer *L = &hw->layers[l];
    gint64 base, lo, hi;
    float *x;

    dfl_draft_ctx_layer_range (ctx, l, anchor_pos, &base, &lo, &hi);
    /* attention */
    dfl_rmsnorm_to (d->s_x, h, rows, hs, L->in_norm, eps);
    x = conv_in (d, &L->attn_conv, d->s_x, d->s_x2);
    dfl_matmul_w (&L->q, x, rows, hs, d->s_q, qd, qd, 0);
    dfl_matmul_w (&L->k, x, rows, hs, d->s_k, kd, kd, 0);
    dfl_matmul_w (&L->v, x, rows, hs, d->s_v, kd, kd, 0);
    dfl_rmsnorm (d->s_q, rows * g->heads, hd, L->q_norm, eps);
    dfl_rmsnorm (d->s_k, rows * g->kv_heads, hd, L->k_norm, eps);
    if (dfl_drafter_geometry_rotary (g, l)) {
      dfl_rope (d->s_q, rows, g->heads, hd, d->hw->inv_freq, (int) anchor_pos);
      dfl_rope (d->s_k, rows, g->kv_heads, hd, d->hw->inv_freq, (int) anchor_pos);
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
  dfl_rmsnorm (h, rows, hs, hw->norm, eps);
  /* the rows after the anchor, then their logits over the head's first rows */
  memcpy (o, h + hs, sizeof (float) * (gsize) (rows - 1) * hs);
  dfl_matmul_w (&d->head, h + hs, rows - 1, hs, o + (gsize) (rows - 1) * hs, width, width, 0);
  return TRUE;
}

const float *
dfl_draft_ctx_block_rows (const DflDraftCtx *ctx)
{
  if (ctx->w->engine != &dfl_draft_engine_cpu)
    return NULL;
  return ((const CpuDraftCtx *) ctx)->h;
}

static gboolean
cpu_select (DflDraftCtx *ctx, const DflTensor *block, int width, guint32 anchor, guint32 *chosen,
            guint32 *plain, GError **error)
{
  int n = ctx->g->block - 1;
  const float *hidden = dfl_tensor_data (block);

  dfl_drafter_weights_select (ctx->w, hidden, n, hidden + (gsize) n * ctx->g->hidden, width,
                              anchor, chosen, plain);
  return TRUE;
}

/* --- the context's rows --- */

/* Room for `n` more rows after the live ones: the dead rows in front (let go
 * by drops) are reclaimed first, so a long text does not grow the buffers. */
static void
reserve_rows (CpuLayer *c, DflDraftLayerRows *rows, int kv_heads, int hd, gsize n)
{
  gsize need = rows->held + n;

  if (rows->start + need <= c->cap)
    return;
  if (need <= c->cap) {
    for (int h = 0; h < kv_heads; h++) {
      memmove (c->k[h], c->k[h] + rows->start * hd, rows->held * hd * sizeof (float));
      memmove (c->v[h], c->v[h] + rows->start * hd, rows->held * hd * sizeof (float));
    }
    rows->start = 0;
    return;
  }
  {
    gsize cap = MAX (need, c->cap * 2);
    cap = MAX (cap, 64);
    for (int h = 0; h < kv_heads; h++) {
      float *k = g_new (float, cap * hd), *v = g_new (float, cap * hd);
      if (rows->held) {
        memcpy (k, c->k[h] + rows->start * hd, rows->held * hd * sizeof (float));
        memcpy (v, c->v[h] + rows->start * hd, rows->held * hd * sizeof (float));
      }
      g_free (c->k[h]);
      g_free (c->v[h]);
      c->k[h] = k;
      c->v[h] = v;
    }
    c->cap = cap;
    rows->start = 0;
  }
}

/* Settle `n` waiting rows: t = rms(FC · taps, hidden_norm), K =
 * rope(rms_head(Wk · t, k_norm)), V = Wv · t, for every layer. A batch
 * goes through each matrix in one product (DFL_DRAFTER_SETTLE_BATCH rows);
 * the products are batch-invariant, so how the rows are batched (a prompt
 * at once, a round's few rows, a settle forced by the pending limit)
 * changes no key or value. */
static gboolean
cpu_settle (DflDraftCtx *ctx, gsize n, GError **error)
{
  CpuDraftCtx *d = (CpuDraftCtx *) ctx;
  const DflDrafterWeights *hw = d->hw;
  const DflDrafterGeometry *g = ctx->g;
  int hs = g->hidden, hd = g->head_dim, kv = g->kv_heads, kd = kv * hd;
  int tw = dfl_drafter_geometry_tap_width (g);
  gsize batch = MIN (n, (gsize) DFL_DRAFTER_SETTLE_BATCH);
  const float *taps = ctx->pending;
  float *t, *k, *v;
  float eps = (float) g->eps;

  if (n == 0)
    return TRUE;
  t = g_new (float, batch * hs);
  k = g_new (float, batch * kd);
  v = g_new (float, batch * kd);
  for (gsize done = 0; done < n; done += batch) {
    int nb = (int) MIN (batch, n - done);
    gint64 at = ctx->first + ctx->len;
    dfl_matmul_w (&hw->fc, taps + done * tw, nb, tw, t, hs, hs, 0);
    dfl_rmsnorm (t, nb, hs, hw->hidden_norm, eps);
    for (int l = 0; l < g->layers; l++) {
      const DflDrafterLayer *L = &hw->layers[l];
      CpuLayer *c = &d->layers[l];
      DflDraftLayerRows *rows = &ctx->rows[l];
      dfl_matmul_w (&L->k, t, nb, hs, k, kd, kd, 0);
      dfl_matmul_w (&L->v, t, nb, hs, v, kd, kd, 0);
      dfl_rmsnorm (k, nb * kv, hd, L->k_norm, eps);
      if (dfl_drafter_geometry_rotary (g, l))
        dfl_rope (k, nb, kv, hd, d->hw->inv_freq, (int) at);
      reserve_rows (c, rows, kv, hd, nb);
      /* [row][kv head][hd] to a buffer per head: attention reads a head's
       * rows as one matrix */
      for (int r = 0; r < nb; r++) {
        gsize dst = (rows->start + rows->held + r) * hd;
        for (int h = 0; h < kv; h++) {
          memcpy (c->k[h] + dst, k + ((gsize) r * kv + h) * hd, hd * sizeof (float));
          memcpy (c->v[h] + dst, v + ((gsize) r * kv + h) * hd, hd * sizeof (float));
        }
      }
    }
    dfl_draft_ctx_settled (ctx, nb);
  }
  g_free (t);
  g_free (k);
  g_free (v);
  return TRUE;
}

static gboolean
cpu_read_kv (DflDraftCtx *ctx, int layer, int kv_head, float **k, float **v, GError **error)
{
  const CpuLayer *c = &((CpuDraftCtx *) ctx)->layers[layer];
  const DflDraftLayerRows *rows = &ctx->rows[layer];
  gsize hd = (gsize) ctx->g->head_dim, n = rows->held * hd;

  if (k)
    *k = n ? g_memdup2 (c->k[kv_head] + rows->start * hd, n * sizeof (float)) : g_new (float, 1);
  if (v)
    *v = n ? g_memdup2 (c->v[kv_head] + rows->start * hd, n * sizeof (float)) : g_new (float, 1);
  return TRUE;
}

static void
cpu_free (DflDraftCtx *ctx)
{
  CpuDraftCtx *d = (CpuDraftCtx *) ctx;
  float **scratch[] = { &d->s_x, &d->s_x2, &d->s_q, &d->s_k, &d->s_v, &d->s_y, &d->s_o, &d->s_d,
                        &d->s_gate, &d->s_up, &d->s_qg, &d->s_kb, &d->s_og, &d->s_sc, &d->s_vt,
                        &d->h };

  for (guint i = 0; i < G_N_ELEMENTS (scratch); i++)
    g_clear_pointer (scratch[i], g_free);
  for (int l = 0; d->layers && l < ctx->g->layers; l++) {
    for (int h = 0; h < ctx->g->kv_heads; h++) {
      g_free (d->layers[l].k[h]);
      g_free (d->layers[l].v[h]);
    }
    g_free (d->layers[l].k);
    g_free (d->layers[l].v);
  }
  g_free (d->layers);
  g_free (d->row16);
}

static const DflDraftCtxOps cpu_ops = {
  .settle = cpu_settle,
  .block = cpu_block,
  .select = cpu_select,
  .read_kv = cpu_read_kv,
  .free = cpu_free,
};

static DflDraftCtx *
cpu_ctx_new (DflDrafterWeights *w, GError **error)
{
  CpuDraftCtx *d = dfl_draft_ctx_alloc (sizeof (CpuDraftCtx), &cpu_ops, w);
  const DflDrafterGeometry *g = d->base.g;

  d->hw = w->host;
  d->embed = dfl_draft_trunk_weights (&w->trunk.embed);
  d->head = dfl_draft_trunk_weights (&w->trunk.head);
  d->layers = g_new0 (CpuLayer, g->layers);
  for (int l = 0; l < g->layers; l++) {
    d->layers[l].k = g_new0 (float *, g->kv_heads);
    d->layers[l].v = g_new0 (float *, g->kv_heads);
  }
  d->h = g_new (float, (gsize) g->block * g->hidden);
  d->row16 = g_new (guint16, g->hidden);
  return &d->base;
}

const DflDraftEngine dfl_draft_engine_cpu = {
  .ctx_new = cpu_ctx_new,
  .free = NULL,
};
