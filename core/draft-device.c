/* gst-dflash — the drafter's weights as tensors on a device: borrowed in
 * place from host memory on the CPU, uploaded in one allocation elsewhere,
 * and checked once, when bound, against what the device runs: a drafter
 * whose block needs an op the device lacks is refused there, with the op
 * named, never drafted some other way.
 */
#include "draft-forward.h"

#include <string.h>

#include "arena-cache.h"
#include "dfl-error.h"
#include "matrix-upload.h"
#include "weight-arena.h"

DflTensor
dfl_draft_rows (const DflTensor *t, gint64 r0, gint64 n)
{
  DflTensor v = *t;

  v.offset += (gsize) r0 * t->nb[1];
  v.ne[1] = n;
  v.nb[2] = v.nb[3] = v.nb[1] * (gsize) MAX (n, 1);
  return v;
}

DflTensor
dfl_draft_heads (const DflTensor *t, gint64 heads)
{
  DflTensor v = *t;
  gint64 rows = t->ne[1];

  v.ne[0] = t->ne[0] / heads;
  v.ne[1] = heads;
  v.ne[2] = rows;
  v.ne[3] = 1;
  v.nb[1] = v.nb[0] * (gsize) v.ne[0];
  v.nb[2] = v.nb[1] * (gsize) heads;
  v.nb[3] = v.nb[2] * (gsize) MAX (rows, 1);
  return v;
}

/* --- placing the weights on a device ---
 *
 * The same walk runs twice: once to count the bytes (mem NULL), once to
 * place and fill them. On the CPU nothing is placed, every tensor a view
 * of host memory, but where the matrices are asked for as Q8_0: those are
 * quantized into an arena of the net's own (counted, then filled, the
 * same way). */
typedef struct {
  DflDevice *dev;               /* NULL: the CPU, borrow */
  gpointer mem;
  gsize off;
  DflDtype as;
  DflWeightArena *arena;        /* the CPU's Q8_0 matrices (NULL while counting) */
  gboolean arena_filled;        /* mapped from a previous run's (arena-cache.c): read only */
  DflArenaKey *key;             /* while counting: what the Q8_0 matrices are made of */
  GError **error;
  gboolean failed;
} Placer;

static gsize
place (Placer *P, gsize bytes)
{
  gsize at = P->off;

  P->off += dfl_draft_aligned (bytes);
  return at;
}

/* The type a matrix goes up as: F32 when asked (parity with the CPU's
 * products), else an F16 or BF16 matrix as stored and an F32 one as asked. */
static DflDtype
mat_type (const Placer *P, DflDtype stored)
{
  if (P->as == DFL_DTYPE_F32 || stored == DFL_DTYPE_F32)
    return P->as;
  return stored;
}

/* A float matrix [rows][cols] as Q8_0 in the CPU's arena: the rows
 * quantized (dfl_quantize_row, ggml's reference rounding), and the layout
 * of the SIMD products beside them where the CPU has one. Counted only
 * while there is no arena. */
static DflTensor
put_q8_0 (Placer *P, const void *src, DflDtype stored, gint64 rows, gint64 cols)
{
  gsize row_bytes = dfl_dtype_row_bytes (DFL_DTYPE_Q8_0, cols);
  gsize packed = dfl_kernels_cpu_has (DFL_KERNELS_AVX2)
      ? dfl_quant_packed_bytes (DFL_DTYPE_Q8_0, (int) rows, (int) cols) : 0;
  DflTensor t;
  guint8 *q;
  DflWeights w;

  if (!P->arena) {
    P->off += dfl_weight_arena_piece (row_bytes * (gsize) rows)
              + (packed ? dfl_weight_arena_piece (packed) : 0);
    if (P->key) {
      gint64 shape[] = { stored, rows, cols, packed != 0 };
      dfl_arena_key_add (P->key, shape, sizeof shape);
      dfl_arena_key_add (P->key, src, dfl_dtype_row_bytes (stored, cols) * (gsize) rows);
    }
    return dfl_tensor_2d (NULL, NULL, 0, DFL_DTYPE_Q8_0, rows, cols);
  }
  q = dfl_weight_arena_take (P->arena, row_bytes * (gsize) rows);
  if (P->arena_filled) {
    /* as a previous run quantized and packed them (the same inputs, the
     * same code: the key) */
    t = dfl_tensor_2d (NULL, q, 0, DFL_DTYPE_Q8_0, rows, cols);
    if (packed)
      t.packed = dfl_weight_arena_take (P->arena, packed);
    return t;
  }
  if (!dfl_quantize_rows (DFL_DTYPE_Q8_0, stored, src, q, rows, cols)) {
    g_set_error (P->error, DFL_ERROR, DFL_ERROR_IO, "the drafter's matrices as Q8_0: no memory "
                 "for a row of %" G_GINT64_FORMAT " values", cols);
    P->failed = TRUE;
  }
  t = dfl_tensor_2d (NULL, q, 0, DFL_DTYPE_Q8_0, rows, cols);
  w = (DflWeights) { .data = q, .type = DFL_DTYPE_Q8_0, .rows = (int) rows, .cols = (int) cols };
  if (packed) {
    gpointer dst = dfl_weight_arena_take (P->arena, packed);
    if (dfl_quant_pack_into (&w, dst))
      t.packed = dst;
  }
  return t;
}

/* Whether a host matrix goes to the CPU's arena as Q8_0: a float one whose
 * rows are whole blocks, where Q8_0 was asked for. */
static gboolean
as_q8_0 (const Placer *P, DflDtype stored, gint64 cols)
{
  return !P->dev && P->as == DFL_DTYPE_Q8_0 && dfl_dtype_is_float (stored) && cols % 32 == 0;
}

/* Host data stored as `stored`, [rows][cols]: borrowed as it is on the
 * CPU; elsewhere put up as `as`, copied where the types agree, else
 * converted on the host (matrix-upload.h). `what` names it in messages. */
static DflTensor
put_as (Placer *P, const void *src, DflDtype stored, gint64 rows, gint64 cols, DflDtype as,
        const char *what)
{
  gsize off;

  if (!P->dev)
    return dfl_tensor_2d (NULL, (gpointer) src, 0, stored, rows, cols);
  off = place (P, (gsize) rows * dfl_dtype_row_bytes (as, cols));
  if (P->mem && !P->failed
      && !dfl_matrix_upload (P->dev, P->mem, off, stored, src, rows, cols, as, what, P->error))
    P->failed = TRUE;
  return dfl_tensor_2d (P->dev, P->mem, off, as, rows, cols);
}

/* A matrix of the drafter [rows][cols], in the type mat_type says (on the
 * CPU as stored, or as Q8_0 where asked). */
static DflTensor
put_mat (Placer *P, const DflWeights *src)
{
  if (as_q8_0 (P, src->type, src->cols))
    return put_q8_0 (P, src->data, src->type, src->rows, src->cols);
  return put_as (P, src->data, src->type, src->rows, src->cols, mat_type (P, src->type),
                 "a matrix of the drafter");
}

/* Host data of `dtype` as [rows][cols], as it is. */
static DflTensor
put_raw (Placer *P, const void *src, DflDtype dtype, gint64 rows, gint64 cols)
{
  return put_as (P, src, dtype, rows, cols, dtype, "a table of the drafter");
}

/* An F32 vector as a one-dimensional tensor. */
static DflTensor
put_vec (Placer *P, const float *src, gint64 n)
{
  return put_raw (P, src, DFL_DTYPE_F32, 1, n);
}

/* A trunk matrix: borrowed where it is already on the device (or on the
 * CPU), else uploaded as stored, a block-quantized one the device does not
 * multiply dequantized to F32 (its values exactly: matrix-upload.c); a
 * tied head is the embedding's upload. */
static DflTensor
put_trunk (Placer *P, const DflTensor *t, const DflTensor *same_as, const DflTensor *placed,
           const char *what)
{
  gboolean host = !t->device || dfl_device_backend (t->device) == DFL_BACKEND_CPU;

  if (!P->dev || !host)
    return *t;
  if (same_as && same_as->handle == t->handle && same_as->offset == t->offset
      && same_as->dtype == t->dtype && same_as->ne[1] == t->ne[1])
    return *placed;
  return put_as (P, dfl_tensor_data (t), t->dtype, t->ne[1], t->ne[0],
                 dfl_matrix_device_type (P->dev, t->dtype), what);
}

/* Every tensor of the net from the host weights `d`. */
static void
lay_out (Placer *P, DflDraftNet *net, const DflDrafterWeights *d, const DflDraftTrunk *trunk)
{
  const DflDrafterGeometry *g = &d->g;
  int hs = g->hidden, hd = g->head_dim, kn = g->conv_kernel;

  net->fc = put_mat (P, &d->fc);
  net->hidden_norm = put_vec (P, d->hidden_norm, hs);
  net->norm = put_vec (P, d->norm, hs);
  net->inv_freq = put_vec (P, d->inv_freq, hd / 2);
  for (int l = 0; l < g->layers; l++) {
    const DflDrafterLayer *S = &d->layers[l];
    DflDraftLayerNet *L = &net->layers[l];
    const DflConv *convs[2] = { &S->attn_conv, &S->mlp_conv };
    L->in_norm = put_vec (P, S->in_norm, hs);
    L->post_norm = put_vec (P, S->post_norm, hs);
    L->q_norm = put_vec (P, S->q_norm, hd);
    L->k_norm = put_vec (P, S->k_norm, hd);
    L->q = put_mat (P, &S->q);
    L->k = put_mat (P, &S->k);
    L->v = put_mat (P, &S->v);
    L->o = put_mat (P, &S->o);
    L->gate = put_mat (P, &S->gate);
    L->up = put_mat (P, &S->up);
    L->down = put_mat (P, &S->down);
    if (!d->conv)
      continue;
    for (int c = 0; c < 2; c++) {
      for (int s = 0; s < 2; s++)
        L->conv_base[c][s] = put_raw (P, convs[c]->base + (gsize) s * kn * hs, DFL_DTYPE_F32,
                                      kn, hs);
      L->conv_proj[c] = put_mat (P, &convs[c]->proj);
    }
  }
  if (d->selector) {
    gsize rank = g->selector_rank;
    net->sel = put_mat (P, &d->sel);
    for (int b = 0; b < 2; b++)
      net->books[b] = put_raw (P, d->books[b], DFL_DTYPE_F16, g->vocab, rank);
  }
  net->embed = put_trunk (P, &trunk->embed, NULL, NULL, "the target's embedding");
  /* a float target's head as Q8_0 for the drafter's products where its
   * matrices are (the target verifies with its own); the embedding, read a
   * row at a time, stays the target's */
  if (as_q8_0 (P, trunk->head.dtype, trunk->head.ne[0]))
    net->head = put_q8_0 (P, dfl_tensor_data (&trunk->head), trunk->head.dtype, trunk->head.ne[1],
                          trunk->head.ne[0]);
  else
    net->head = put_trunk (P, &trunk->head, &trunk->embed, &net->embed, "the target's LM head");
}

/* --- what the device must run --- */

static gboolean
need_op (DflDevice *dev, DflOp op, DflDtype dtype, const char *name, GError **error)
{
  if (dfl_device_supports (dev, op, dtype))
    return TRUE;
  g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
               "%s: the drafter's block needs %s of %s, which %s does not run", name,
               dfl_op_name (op), dfl_dtype_name (dtype), dfl_device_describe (dev));
  return FALSE;
}

/* Every op of a settle, a block and a selection, of the types the net
 * holds; and one way of reading index tensors for all of them. */
static gboolean
check_device (DflDraftNet *net, const char *name, GError **error)
{
  static const DflOp f32_ops[] = { DFL_OP_RMSNORM, DFL_OP_ROPE, DFL_OP_ATTENTION,
                                   DFL_OP_SILU_MUL, DFL_OP_ADD, DFL_OP_TOP_K,
                                   DFL_OP_COPY_ROWS };
  static const DflOp index_ops[] = { DFL_OP_ROPE, DFL_OP_ATTENTION, DFL_OP_EMBED,
                                     DFL_OP_COPY_ROWS };
  DflDevice *dev = net->dev;
  const DflTensor *mats[] = { &net->fc, &net->layers[0].q, &net->layers[0].down, &net->head };
  DflDtype embed_dtype = net->embed.dtype;

  for (guint i = 0; i < G_N_ELEMENTS (f32_ops); i++)
    if (!need_op (dev, f32_ops[i], DFL_DTYPE_F32, name, error))
      return FALSE;
  for (guint i = 0; i < G_N_ELEMENTS (mats); i++)
    if (!need_op (dev, DFL_OP_MATMUL, mats[i]->dtype, name, error))
      return FALSE;
  /* the embedding, and the gather of a windowed layer's rows (an F32 table) */
  if (!need_op (dev, DFL_OP_EMBED, embed_dtype, name, error)
      || !need_op (dev, DFL_OP_EMBED, DFL_DTYPE_F32, name, error))
    return FALSE;
  if (net->conv && (!need_op (dev, DFL_OP_ROW_CONV, DFL_DTYPE_F32, name, error)
                    || !need_op (dev, DFL_OP_MATMUL, net->layers[0].conv_proj[0].dtype, name,
                                 error)))
    return FALSE;
  if (net->selector && (!need_op (dev, DFL_OP_SELECT_RESCORE, DFL_DTYPE_F16, name, error)
                        || !need_op (dev, DFL_OP_MATMUL, net->sel.dtype, name, error)))
    return FALSE;
  net->can_capture = dfl_device_supports (dev, DFL_OP_CAPTURE_BEGIN, DFL_DTYPE_F32)
                     && dfl_device_supports (dev, DFL_OP_CAPTURE_END, DFL_DTYPE_F32)
                     && dfl_device_supports (dev, DFL_OP_GRAPH_LAUNCH, DFL_DTYPE_F32);
  net->graphs = TRUE;
  net->host_indices = (dfl_device_op_caps (dev, index_ops[0], DFL_DTYPE_F32)
                       & DFL_OP_CAP_HOST_INDICES) != 0;
  for (guint i = 1; i < G_N_ELEMENTS (index_ops); i++) {
    gboolean host = (dfl_device_op_caps (dev, index_ops[i], DFL_DTYPE_F32)
                     & DFL_OP_CAP_HOST_INDICES) != 0;
    if (host != net->host_indices) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                   "%s: %s reads %s indices on the host and %s does not; the drafter keeps "
                   "its index tensors in one place", name, dfl_device_describe (dev),
                   dfl_op_name (net->host_indices ? index_ops[0] : index_ops[i]),
                   dfl_op_name (net->host_indices ? index_ops[i] : index_ops[0]));
      return FALSE;
    }
  }
  return TRUE;
}

static void
net_free (gpointer native)
{
  DflDraftNet *net = native;

  if (!net)
    return;
  if (net->mem)
    dfl_device_free (net->dev, net->mem);
  g_clear_pointer (&net->arena, dfl_weight_arena_free);
  g_free (net->layers);
  g_clear_pointer (&net->dev, dfl_device_unref);
  g_free (net);
}

const DflDraftEngine dfl_draft_engine = {
  .ctx_new = dfl_draft_run_new,
  .free = net_free,
};

/* drafter-private.h's: `w` (host weights) ready to draft on `device`
 * (NULL: the CPU) reading `trunk` (checked by the caller). */
DflDrafterWeights *
dfl_drafter_weights_bind_net (DflDrafterWeights *w, DflDevice *device, const DflDraftTrunk *trunk,
                              DflDtype matrix_dtype, GError **error)
{
  DflDraftNet *net = g_new0 (DflDraftNet, 1);
  DflDrafterWeights *bound;
  Placer P = { 0 };

  net->conv = w->conv;
  net->selector = w->selector;
  net->layers = g_new0 (DflDraftLayerNet, w->g.layers);
  if (device && dfl_device_backend (device) != DFL_BACKEND_CPU) {
    net->dev = dfl_device_ref (device);
    P.dev = device;
  } else if (!(net->dev = dfl_device_open (DFL_BACKEND_CPU, -1, error))) {
    net_free (net);
    return NULL;
  }
  if (matrix_dtype == DFL_DTYPE_Q8_0 && P.dev) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                 "%s: the drafter's matrices as Q8_0 are the CPU's; %s takes them as stored, "
                 "F32, F16 or BF16", w->path, dfl_device_describe (device));
    net_free (net);
    return NULL;
  }
  P.as = matrix_dtype == DFL_DTYPE_F16 || matrix_dtype == DFL_DTYPE_BF16
             || matrix_dtype == DFL_DTYPE_Q8_0 ? matrix_dtype : DFL_DTYPE_F32;
  P.error = error;
  if (!P.dev && P.as == DFL_DTYPE_Q8_0 && w->arena_cache) {
    P.key = dfl_arena_key_new ("gst-dflash: a drafter's matrices as Q8_0");
    if (!dfl_arena_key_add_code (P.key, (gconstpointer) put_q8_0)
        || !dfl_arena_key_add_code (P.key, (gconstpointer) dfl_quantize_rows))
      g_clear_pointer (&P.key, dfl_arena_key_free);
  }
  lay_out (&P, net, w, trunk);
  if (!P.dev && P.as == DFL_DTYPE_Q8_0) {
    /* counted; now mapped as a previous run made them, or quantized into
     * the arena (in huge pages: weight-arena.c) and kept for the next */
    g_autofree char *key = P.key ? dfl_arena_key_finish (g_steal_pointer (&P.key)) : NULL;
    if (key && (P.arena = net->arena = dfl_arena_cache_load (w->arena_cache, key, P.off)))
      P.arena_filled = TRUE;
    else if (!(P.arena = net->arena = dfl_weight_arena_new (MAX (P.off, 1), error))) {
      g_prefix_error (error, "%s: ", w->path);
      net_free (net);
      return NULL;
    }
    P.off = 0;
    lay_out (&P, net, w, trunk);
    if (P.failed) {
      net_free (net);
      return NULL;
    }
    if (key && !P.arena_filled) {
      g_autoptr (GError) save_error = NULL;
      /* a run that cannot keep them makes them again next time: no more */
      if (!dfl_arena_cache_save (w->arena_cache, key, P.arena, &save_error))
        g_debug ("the drafter's Q8_0 matrices are not kept: %s", save_error->message);
    }
  }
  if (P.dev) {
    /* count, then place and fill */
    if (!(P.mem = dfl_device_alloc (device, MAX (P.off, 1), error))) {
      net_free (net);
      return NULL;
    }
    net->mem = P.mem;
    P.off = 0;
    lay_out (&P, net, w, trunk);
    if (P.failed) {
      net_free (net);
      return NULL;
    }
  }
  if (!check_device (net, w->path, error)) {
    net_free (net);
    return NULL;
  }
  bound = dfl_drafter_weights_new_bound (w, NULL, NULL, &dfl_draft_engine,
                                         P.dev ? device : NULL, trunk);
  bound->native = net;
  bound->device_bytes = P.dev ? P.off : 0;
  return bound;
}

void
dfl_drafter_weights_set_graphs (DflDrafterWeights *bound, gboolean use)
{
  g_return_if_fail (bound != NULL && bound->engine == &dfl_draft_engine);
  ((DflDraftNet *) bound->native)->graphs = use;
}
