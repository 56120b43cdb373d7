/* gst-dflash — the CUDA drafter's weights (uploaded from a loaded drafter or
 * made on the card), its scratch, and the selection of a block's tokens.
 */
#include "cuda-drafter-private.h"
#include "dfl-error.h"
#include "dfl-kernels.h"

#include <math.h>
#include <string.h>

/* Elements converted on the host per upload when a matrix changes type. */
#define CONVERT_CHUNK (1 << 20)

static DflDtype
cuda_type_of (DflDtype t)
{
  return t == DFL_DTYPE_BF16 ? DFL_DTYPE_BF16 : t == DFL_DTYPE_F16 ? DFL_DTYPE_F16 : DFL_DTYPE_F32;
}

/* --- laying the weights out in one allocation ---
 *
 * The same walk runs twice: once to count the bytes (base NULL), once to
 * place and fill them. `src` NULL means a random drafter: values are made on
 * the card. */
typedef struct {
  DflCudaDrafter *cd;
  guint8 *base;
  gsize off;
  DflDtype as;
  guint64 seed;
  GError **error;
  gboolean failed;
} Placer;

static gsize
aligned (gsize bytes)
{
  return (bytes + DFL_CUDA_DRAFTER_ALIGN - 1) / DFL_CUDA_DRAFTER_ALIGN * DFL_CUDA_DRAFTER_ALIGN;
}

static void *
place (Placer *P, gsize bytes)
{
  gsize at = P->off;

  P->off += aligned (bytes);
  return P->base ? P->base + at : NULL;
}

static void
upload (Placer *P, void *d_dst, const void *src, gsize bytes)
{
  if (!P->failed && !dfl_cuda_upload (P->cd->dev, d_dst, src, bytes, P->error))
    P->failed = TRUE;
}

/* The type a matrix goes up as: F32 when asked (parity), else an F16 or
 * BF16 matrix as stored and an F32 one as P->as. */
static DflDtype
mat_type (const Placer *P, const DflWeights *src)
{
  if (P->as == DFL_DTYPE_F32 || !src || src->type == DFL_DTYPE_F32)
    return P->as;
  return cuda_type_of (src->type);
}

/* A matrix: copied as stored where the types agree, else converted on the
 * host a chunk at a time (round to nearest even, as the CPU converts). */
static void
put_mat (Placer *P, const DflWeights *src, int rows, int cols, DflCudaWeights *dst)
{
  DflDtype as = mat_type (P, src), st;
  gsize n = (gsize) rows * cols, es = dfl_dtype_size (as);
  guint8 *d = place (P, n * es);

  *dst = (DflCudaWeights) { d, as, rows, cols };
  if (!d || P->failed)
    return;
  if (!src) {
    dfl_cuda_fill_random (P->cd->dev, d, as, n, P->seed++, 1.0f / sqrtf ((float) cols));
    return;
  }
  g_assert (src->rows == rows && src->cols == cols);
  st = cuda_type_of (src->type);
  if (st == as) {
    upload (P, d, src->data, n * es);
    return;
  }
  {
    gsize ss = dfl_dtype_size (st), chunk = MIN (n, (gsize) CONVERT_CHUNK);
    float *f = g_new (float, chunk);
    guint16 *h = g_new (guint16, chunk);
    for (gsize done = 0; done < n && !P->failed; done += chunk) {
      gsize m = MIN (chunk, n - done);
      const guint8 *s = (const guint8 *) src->data + done * ss;
      if (st == DFL_DTYPE_F32)
        memcpy (f, s, m * sizeof (float));
      else {
        memcpy (h, s, m * 2);
        if (st == DFL_DTYPE_BF16)
          dfl_bf16_to_f32_n (h, f, m);
        else
          dfl_f16_to_f32_n (h, f, m);
      }
      if (as == DFL_DTYPE_F32) {
        upload (P, d + done * es, f, m * es);
        continue;
      }
      for (gsize i = 0; i < m; i++)
        h[i] = as == DFL_DTYPE_BF16 ? dfl_f32_to_bf16 (f[i]) : dfl_f32_to_f16 (f[i]);
      upload (P, d + done * es, h, m * es);
    }
    g_free (f);
    g_free (h);
  }
}

/* An F32 vector: `src`, or (random drafters) `fill` everywhere. */
static const float *
put_vec (Placer *P, const float *src, gsize n, float fill)
{
  float *d = place (P, n * sizeof (float));

  if (!d || P->failed)
    return d;
  if (src) {
    upload (P, d, src, n * sizeof (float));
  } else {
    float *h = g_new (float, n);
    for (gsize i = 0; i < n; i++)
      h[i] = fill;
    upload (P, d, h, n * sizeof (float));
    g_free (h);
  }
  return d;
}

/* A convolution's base kernels [2][kernel][hidden]; a random drafter's pass
 * each row through (offset 0 is one, the older rows zero) so the dynamic
 * part's small values do not blow the rows up layer after layer. */
static const float *
put_conv_base (Placer *P, const float *src, int kernel, int hidden)
{
  gsize n = (gsize) 2 * kernel * hidden;
  float *h;
  const float *d;

  if (src || !P->base)
    return put_vec (P, src, n, 0.0f);
  h = g_new0 (float, n);
  for (int s = 0; s < 2; s++)
    for (int i = 0; i < hidden; i++)
      h[(gsize) s * kernel * hidden + i] = 1.0f;
  d = put_vec (P, h, n, 0.0f);
  g_free (h);
  return d;
}

/* A selector codebook, F16 [vocab][rank]. */
static const uint16_t *
put_book (Placer *P, const guint16 *src, gsize n)
{
  uint16_t *d = place (P, n * 2);

  if (!d || P->failed)
    return d;
  if (src)
    upload (P, d, src, n * 2);
  else
    dfl_cuda_fill_random (P->cd->dev, d, DFL_DTYPE_F16, n, P->seed++, 1.0f);
  return d;
}

/* Every weight of the drafter: from `d` (NULL: random). */
static void
lay_out (Placer *P, const DflDrafterWeights *d)
{
  DflCudaDrafter *cd = P->cd;
  const DflDrafterGeometry *g = cd->g;
  int hs = g->hidden, hd = g->head_dim, ffn = g->intermediate;
  int qd = g->heads * hd, kd = g->kv_heads * hd, tw = dfl_drafter_geometry_tap_width (g);
  int kn = g->conv_kernel, kproj = 2 * kn * (cd->conv ? hs / g->conv_group : 0);

  put_mat (P, d ? &d->fc : NULL, hs, tw, &cd->fc);
  cd->hidden_norm = put_vec (P, d ? d->hidden_norm : NULL, hs, 1.0f);
  cd->norm = put_vec (P, d ? d->norm : NULL, hs, 1.0f);
  for (int l = 0; l < g->layers; l++) {
    const DflDrafterLayer *S = d ? &d->layers[l] : NULL;
    DflCudaDrafterLayer *L = &cd->layers[l];
    L->in_norm = put_vec (P, S ? S->in_norm : NULL, hs, 1.0f);
    L->post_norm = put_vec (P, S ? S->post_norm : NULL, hs, 1.0f);
    L->q_norm = put_vec (P, S ? S->q_norm : NULL, hd, 1.0f);
    L->k_norm = put_vec (P, S ? S->k_norm : NULL, hd, 1.0f);
    put_mat (P, S ? &S->q : NULL, qd, hs, &L->q);
    put_mat (P, S ? &S->k : NULL, kd, hs, &L->k);
    put_mat (P, S ? &S->v : NULL, kd, hs, &L->v);
    put_mat (P, S ? &S->o : NULL, hs, qd, &L->o);
    put_mat (P, S ? &S->gate : NULL, ffn, hs, &L->gate);
    put_mat (P, S ? &S->up : NULL, ffn, hs, &L->up);
    put_mat (P, S ? &S->down : NULL, hs, ffn, &L->down);
    if (cd->conv) {
      const DflConv *c[2] = { S ? &S->attn_conv : NULL, S ? &S->mlp_conv : NULL };
      for (int i = 0; i < 2; i++) {
        L->conv_base[i] = put_conv_base (P, c[i] ? c[i]->base : NULL, kn, hs);
        put_mat (P, c[i] ? &c[i]->proj : NULL, kproj, hs, &L->conv_proj[i]);
      }
    }
  }
  if (cd->selector) {
    gsize nb = (gsize) g->vocab * g->selector_rank;
    put_mat (P, d ? &d->sel : NULL, g->selector_rank, hs, &cd->sel);
    cd->books[0] = put_book (P, d ? d->books[0] : NULL, nb);
    cd->books[1] = put_book (P, d ? d->books[1] : NULL, nb);
  }
  {
    float *inv = g_new (float, hd / 2);
    dfl_rope_inv_freq (inv, hd, g->rope_theta);
    cd->inv_freq = put_vec (P, inv, hd / 2, 0.0f);
    g_free (inv);
  }
}

/* --- scratch --- */

static gboolean
alloc_scratch (DflCudaDrafter *cd, GError **error)
{
  const DflDrafterGeometry *g = cd->g;
  gsize b = g->block, hs = g->hidden, hd = g->head_dim, ffn = g->intermediate;
  gsize qd = (gsize) g->heads * hd, kd = (gsize) g->kv_heads * hd;
  gsize tw = (gsize) dfl_drafter_geometry_tap_width (g), sb = DFL_DRAFTER_SETTLE_BATCH;
  gsize kproj = cd->conv ? 2 * (gsize) g->conv_kernel * (hs / g->conv_group) : 1;
  gsize top = cd->selector ? (gsize) g->selector_top : 1, rank = MAX (g->selector_rank, 1);
  /* the widest x a product rounds: the block's, the settle's, the head's */
  gsize round = MAX (MAX (b * MAX (MAX (hs, qd), ffn), sb * MAX (tw, hs)), b * hs);
  struct { void *p; gsize bytes; } parts[] = {
    { &cd->s_h, b * hs * 4 }, { &cd->s_x, b * hs * 4 }, { &cd->s_x2, b * hs * 4 },
    { &cd->s_q, b * qd * 4 }, { &cd->s_y, b * qd * 4 }, { &cd->s_o, b * hs * 4 },
    { &cd->s_d, b * kproj * 4 }, { &cd->s_gate, b * ffn * 4 }, { &cd->s_up, b * ffn * 4 },
    { &cd->s_t, sb * hs * 4 }, { &cd->s_round, round * 2 }, { &cd->s_hp, b * rank * 4 },
    { &cd->s_vals, b * top * 4 }, { &cd->s_ids, b * (top + 1) * 4 },
    { &cd->s_block, (b - 1) * (hs + (gsize) cd->head.rows) * 4 },
  };
  gsize total = 0, off = 0;
  guint8 *base;

  cd->s_win_k = g_new0 (float *, g->layers);
  cd->s_win_v = g_new0 (float *, g->layers);
  for (guint i = 0; i < G_N_ELEMENTS (parts); i++)
    total += aligned (parts[i].bytes);
  for (int l = 0; l < g->layers; l++) {
    gsize w = (gsize) dfl_drafter_geometry_window_of (g, l);
    if (w > 0)
      total += 2 * aligned ((w + b) * kd * 4);
  }
  if (!(cd->d_scratch = base = dfl_cuda_alloc (cd->dev, total, error)))
    return FALSE;
  /* nothing reads a row before it is written, but a gathered window's
   * unused rows and the scores' padding are then defined values */
  dfl_cuda_memset (cd->dev, base, 0, total);
  for (guint i = 0; i < G_N_ELEMENTS (parts); i++) {
    *(void **) parts[i].p = base + off;
    off += aligned (parts[i].bytes);
  }
  for (int l = 0; l < g->layers; l++) {
    gsize w = (gsize) dfl_drafter_geometry_window_of (g, l), bytes = (w + b) * kd * 4;
    if (w == 0)
      continue;
    bytes = aligned (bytes);
    cd->s_win_k[l] = (float *) (base + off);
    cd->s_win_v[l] = (float *) (base + off + bytes);
    off += 2 * bytes;
  }
  g_assert (off <= total);
  return TRUE;
}

/* --- creation --- */

static void
cuda_drafter_free (gpointer native)
{
  DflCudaDrafter *cd = native;

  if (!cd)
    return;
  /* the stream may still read the weights */
  dfl_cuda_sync (cd->dev, NULL);
  dfl_cuda_free (cd->dev, cd->d_weights);
  dfl_cuda_free (cd->dev, cd->d_scratch);
  g_free (cd->s_win_k);
  g_free (cd->s_win_v);
  g_free (cd->layers);
  g_mutex_clear (&cd->lock);
  dfl_cuda_device_unref (cd->dev);
  g_free (cd);
}

static const DflDraftEngine cuda_engine = {
  .ctx_new = dfl_cuda_draft_ctx_new,
  .free = cuda_drafter_free,
};

/* A trunk matrix on the card, as the kernels take it. */
static DflCudaWeights
trunk_weights (const DflTensor *t)
{
  DflCudaWeights w = { dfl_tensor_data (t), t->dtype, (int) t->ne[1], (int) t->ne[0] };

  return w;
}

/* Bound weights on `device`: `src`'s weights (NULL: random, made on the
 * card) reading `trunk`. */
static DflDrafterWeights *
drafter_new (DflDevice *device, DflDrafterWeights *src, const DflDrafterGeometry *g,
             const char *name, gboolean conv, gboolean selector, DflDtype as,
             const DflDraftTrunk *trunk, guint64 seed, GError **error)
{
  DflDrafterWeights *bound;
  DflCudaDrafter *cd;
  Placer P;

  if (as != DFL_DTYPE_F32 && as != DFL_DTYPE_F16 && as != DFL_DTYPE_BF16) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID, "%s: weight type %d is not F32, F16 or BF16",
                 name, (int) as);
    return NULL;
  }
  bound = dfl_drafter_weights_new_bound (src, g, name, &cuda_engine, device, trunk);
  bound->conv = conv && bound->g.conv_kernel > 0;
  bound->selector = selector && bound->g.selector_rank > 0;
  bound->native = cd = g_new0 (DflCudaDrafter, 1);
  cd->dev = dfl_cuda_device_ref (dfl_device_native (device));
  cd->g = &bound->g;
  cd->name = bound->path;
  cd->conv = bound->conv;
  cd->selector = bound->selector;
  cd->use_graph = TRUE;
  g_mutex_init (&cd->lock);
  cd->embed = trunk_weights (&trunk->embed);
  cd->head = trunk_weights (&trunk->head);
  cd->layers = g_new0 (DflCudaDrafterLayer, bound->g.layers);

  P = (Placer) { cd, NULL, 0, as, seed, error, FALSE };
  lay_out (&P, src ? dfl_drafter_weights_base (src) : NULL);
  cd->weight_bytes = bound->device_bytes = P.off;
  if (!(cd->d_weights = dfl_cuda_alloc (cd->dev, P.off, error)))
    goto fail;
  P.base = cd->d_weights;
  P.off = 0;
  lay_out (&P, src ? dfl_drafter_weights_base (src) : NULL);
  if (P.failed || !alloc_scratch (cd, error) || !dfl_cuda_sync (cd->dev, error))
    goto fail;
  return bound;
fail:
  dfl_drafter_weights_unref (bound);
  return NULL;
}

DflDrafterWeights *
dfl_cuda_drafter_bind (DflDrafterWeights *w, DflDevice *device, const DflDraftTrunk *trunk,
                       DflDtype weights_as, GError **error)
{
  g_return_val_if_fail (w != NULL && device != NULL, NULL);
  return drafter_new (device, w, NULL, NULL, w->conv, w->selector, weights_as, trunk, 0, error);
}

DflDrafterWeights *
dfl_cuda_drafter_new_random (DflDevice *device, const DflDrafterGeometry *g, gboolean conv,
                             gboolean selector, DflDtype weights_as, const DflDraftTrunk *trunk,
                             guint64 seed, GError **error)
{
  const char *name = "random drafter";

  g_return_val_if_fail (device != NULL && g != NULL && trunk != NULL, NULL);
  if (!dfl_drafter_geometry_check (g, name, error)
      || !dfl_draft_trunk_check (trunk, device, TRUE, name, g, selector, error))
    return NULL;
  return drafter_new (device, NULL, g, name, conv, selector, weights_as, trunk, seed, error);
}

void
dfl_cuda_drafter_set_use_graph (DflDrafterWeights *bound, gboolean use_graph)
{
  g_return_if_fail (bound->engine == &cuda_engine);
  ((DflCudaDrafter *) bound->native)->use_graph = use_graph;
}

/* --- the target's trunk from its tensors --- */

static gboolean
put_trunk_tensor (DflCudaDevice *dev, const DflStoredTensor *t, DflDtype as, guint8 *d,
                  GError **error)
{
  gsize n = (gsize) t->n_elements, chunk = MIN (n, (gsize) CONVERT_CHUNK);
  gsize es = dfl_dtype_size (as);
  float *f = g_new (float, chunk);
  guint16 *h = g_new (guint16, chunk);
  gboolean ok = TRUE;

  for (gsize done = 0; done < n && ok; done += chunk) {
    gsize m = MIN (chunk, n - done);
    dfl_tensor_read_f32 (t, (gint64) done, (gint64) m, f);
    if (as == DFL_DTYPE_F32) {
      ok = dfl_cuda_upload (dev, d + done * es, f, m * es, error);
      continue;
    }
    for (gsize i = 0; i < m; i++)
      h[i] = as == DFL_DTYPE_BF16 ? dfl_f32_to_bf16 (f[i]) : dfl_f32_to_f16 (f[i]);
    ok = dfl_cuda_upload (dev, d + done * es, h, m * es, error);
  }
  g_free (f);
  g_free (h);
  return ok;
}

gboolean
dfl_cuda_upload_target_trunk (DflDevice *device, const DflSafetensors *target, gboolean tied,
                              int vocab, int hidden, DflDtype as, DflDraftTrunk *trunk,
                              void **d_mem, GError **error)
{
  DflCudaDevice *dev = dfl_device_native (device);
  const char *names[2] = { "model.embed_tokens.weight", "lm_head.weight" };
  const DflStoredTensor *t[2] = { NULL, NULL };
  gsize bytes = (gsize) vocab * hidden * dfl_dtype_size (as);
  gsize slot = aligned (bytes);
  int n = tied ? 1 : 2;
  guint8 *d;

  *d_mem = NULL;
  for (int i = 0; i < n; i++) {
    gint64 shape[2] = { vocab, hidden };
    if (!(t[i] = dfl_safetensors_expect (target, names[i], 2, shape, error)))
      return FALSE;
  }
  if (!(d = dfl_cuda_alloc (dev, slot * n, error)))
    return FALSE;
  for (int i = 0; i < n; i++)
    if (!put_trunk_tensor (dev, t[i], as, d + slot * i, error)) {
      dfl_cuda_free (dev, d);
      return FALSE;
    }
  trunk->embed = dfl_tensor_2d (device, d, 0, as, vocab, hidden);
  trunk->head = dfl_tensor_2d (device, d, slot * (n - 1), as, vocab, hidden);
  *d_mem = d;
  return TRUE;
}

/* --- selection --- */

gboolean
dfl_cuda_draft_ctx_select (DflDraftCtx *ctx, const DflTensor *block, int width, guint32 anchor,
                           guint32 *chosen, guint32 *plain, GError **error)
{
  DflCudaDrafter *cd = ((DflCudaDraftCtx *) ctx)->cd;
  const DflDrafterGeometry *g = cd->g;
  int n = g->block - 1, hs = g->hidden, top = cd->selector ? g->selector_top : 1;
  const float *d_block = dfl_tensor_data (block);
  const float *logits = d_block + (gsize) n * hs;
  int32_t *ids;
  gsize n_ids;
  gboolean ok;

  /* the launches and the ids back are the stream's */
  dfl_cuda_drafter_hold (cd);
  if (cd->selector) {
    /* s_ids: [n] chosen, then [n][top] candidates (their first is the plain argmax) */
    dfl_cuda_matmul (cd->dev, &cd->sel, d_block, n, hs, cd->s_hp, g->selector_rank,
                     g->selector_rank, FALSE, cd->s_round);
    dfl_cuda_top_k (cd->dev, logits, n, width, width, top, cd->s_vals, cd->s_ids + n);
    dfl_cuda_select_rescore (cd->dev, cd->s_ids + n, cd->s_vals, n, top, cd->s_hp,
                             g->selector_rank, cd->books[0], cd->books[1], (int32_t) anchor,
                             cd->s_ids);
    n_ids = (gsize) n * (top + 1);
  } else {
    dfl_cuda_argmax (cd->dev, logits, n, width, width, cd->s_ids);
    n_ids = n;
  }
  ids = g_new (int32_t, n_ids);
  ok = dfl_cuda_download (cd->dev, ids, cd->s_ids, n_ids * sizeof (int32_t), error)
      && dfl_cuda_sync (cd->dev, error);
  dfl_cuda_drafter_release (cd);
  if (ok) {
    for (int r = 0; r < n; r++) {
      if (chosen)
        chosen[r] = (guint32) ids[r];
      if (plain)
        plain[r] = (guint32) (cd->selector ? ids[n + r * top] : ids[r]);
    }
  }
  g_free (ids);
  return ok;
}
