/* gst-dflash — the CPU's table of operations: the kernels of kernels/cpu
 * on host memory, run when dispatched. Index tensors are read then, and
 * checked: an index out of range is an error, never a stray read.
 */
#include "backend-private.h"
#include "dfl-kernels.h"
#include "dfl-parallel.h"

#include <stdatomic.h>
#include <string.h>

#define F32(t) ((float *) dfl_tensor_data (t))
#define I32(t) ((int32_t *) dfl_tensor_data (t))

/* --- element-wise ops shared out between the kernels' threads ---
 *
 * A model's steps between its products (norms, rope, the activation, the
 * residual adds) are cheap next to them, but left on one thread they take
 * a visible part of a verification of a few rows while the other cores
 * wait. So they are cut into pieces (whole rows, or runs of elements) that
 * the pool of dfl-parallel.h takes one at a time; each piece is computed as
 * it would be alone, so the bits do not depend on the threads or the
 * pieces. */

typedef struct {
  /* work on items from … from + count − 1 */
  void (*run) (gpointer args, gint64 from, gint64 count);
  gpointer args;
  gint64 items, per_piece;
  atomic_llong next;
} Pieces;

static void
pieces_work (void *data, int slot)
{
  Pieces *p = data;
  gint64 i, n_pieces = (p->items + p->per_piece - 1) / p->per_piece;

  (void) slot;
  while ((i = atomic_fetch_add_explicit (&p->next, 1, memory_order_relaxed)) < n_pieces) {
    gint64 from = i * p->per_piece;
    p->run (p->args, from, MIN (p->per_piece, p->items - from));
  }
}

/* run over `items` items, `per_piece` to a piece; one piece stays on the
 * caller (a pool call costs more than it saves there) */
static void
run_pieces (void (*run) (gpointer, gint64, gint64), gpointer args, gint64 items,
            gint64 per_piece)
{
  Pieces p = { run, args, items, MAX (per_piece, 1) };

  if (items <= p.per_piece) {
    run (args, 0, items);
    return;
  }
  atomic_init (&p.next, 0);
  dfl_parallel_run (dfl_parallel_threads (), pieces_work, &p);
}

/* Elements a piece of element-wise work holds at least: enough that taking
 * a piece costs little next to computing it. */
#define PIECE_ELEMENTS 2048

static gint64
rows_per_piece (gint64 row_elements)
{
  return MAX (1, PIECE_ELEMENTS / MAX (row_elements, 1));
}

static DflOpCaps
cpu_caps (DflDevice *dev, DflOp op, DflDtype dtype)
{
  /* blocks of quantized weights: the products by integer dot products
   * (quant-matmul.c), the embedding by dequantizing its rows */
  gboolean blocks = dfl_dtype_is_quantized (dtype) && (op == DFL_OP_MATMUL || op == DFL_OP_EMBED);
  /* a KV cache of BF16: rows rounded as they are written, keys and values
   * widened as attention reads them */
  gboolean bf16_kv = dtype == DFL_DTYPE_BF16
      && (op == DFL_OP_ATTENTION || op == DFL_OP_ATTENTION_TABLE || op == DFL_OP_COPY_ROWS
          || op == DFL_OP_COPY_ROWS_TABLE);

  if ((!blocks && !bf16_kv && !dfl_op_takes_dtype (op, dtype)) || op == DFL_OP_CAPTURE_BEGIN
      || op == DFL_OP_CAPTURE_END || op == DFL_OP_GRAPH_LAUNCH)
    return DFL_OP_CAP_NONE;
  /* every CPU kernel computes a row the same way whatever rows come with it */
  return DFL_OP_CAP_RUNS | DFL_OP_CAP_ROW_INVARIANT
         | (dfl_op_has_indices (op) ? DFL_OP_CAP_HOST_INDICES : 0);
}

/* What is left to fail in a quantized product once dfl_op_matmul has
 * checked the shapes: the memory for the quantized activations. */
static gboolean
no_memory_for_int8 (const DflTensor *x, GError **error)
{
  g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT, "matmul on the CPU: no memory for %d rows "
               "of %d inputs quantized to int8", DFL_ROWS (x), DFL_COLS (x));
  return FALSE;
}

static gboolean
cpu_matmul (DflDevice *dev, const DflTensor *w, const DflTensor *x, DflTensor *y,
            gboolean accumulate, GError **error)
{
  DflWeights wt = { dfl_tensor_data (w), w->dtype, DFL_ROWS (w), DFL_COLS (w), w->packed };

  if (dfl_dtype_is_quantized (w->dtype)) {
    if (!dfl_matmul_q (&wt, F32 (x), DFL_ROWS (x), DFL_LD (x), F32 (y), DFL_LD (y),
                       DFL_COLS (y), accumulate))
      return no_memory_for_int8 (x, error);
    return TRUE;
  }
  dfl_matmul_w (&wt, F32 (x), DFL_ROWS (x), DFL_LD (x), F32 (y), DFL_LD (y), DFL_COLS (y),
                accumulate);
  return TRUE;
}

static gboolean
cpu_matmul_group (DflDevice *dev, int n, const DflTensor *const *w, const DflTensor *x,
                  DflTensor *const *y, gboolean accumulate, GError **error)
{
  DflWeights wt[DFL_OP_GROUP_MAX];
  float *ys[DFL_OP_GROUP_MAX];
  int ldy[DFL_OP_GROUP_MAX], n_out[DFL_OP_GROUP_MAX];
  int quantized = 0;

  G_STATIC_ASSERT (DFL_OP_GROUP_MAX <= DFL_MATMUL_GROUP_MAX);
  for (int i = 0; i < n; i++) {
    wt[i] = (DflWeights) { dfl_tensor_data (w[i]), w[i]->dtype, DFL_ROWS (w[i]), DFL_COLS (w[i]),
                           w[i]->packed };
    ys[i] = F32 (y[i]);
    ldy[i] = DFL_LD (y[i]);
    n_out[i] = DFL_COLS (y[i]);
    quantized += dfl_dtype_is_quantized (w[i]->dtype);
  }
  if (quantized == n) {
    /* x quantized once for all of them where they read it alike */
    if (!dfl_matmul_q_group (n, wt, F32 (x), DFL_ROWS (x), DFL_LD (x), ys, ldy, n_out,
                             accumulate))
      return no_memory_for_int8 (x, error);
    return TRUE;
  }
  if (quantized) {
    /* quantized beside float weights: a product each */
    for (int j = 0; j < n; j++)
      if (!cpu_matmul (dev, w[j], x, y[j], accumulate, error))
        return FALSE;
    return TRUE;
  }
  dfl_matmul_w_group (n, wt, F32 (x), DFL_ROWS (x), DFL_LD (x), ys, ldy, n_out, accumulate);
  return TRUE;
}

typedef struct {
  const float *x, *w;
  float *y;
  int dim;
  float eps;
} RmsnormArgs;

static void
rmsnorm_rows (gpointer data, gint64 from, gint64 count)
{
  RmsnormArgs *a = data;

  dfl_rmsnorm_to (a->y + from * a->dim, a->x + from * a->dim, (int) count, a->dim, a->w, a->eps);
}

static gboolean
cpu_rmsnorm (DflDevice *dev, const DflTensor *x, const DflTensor *w, DflTensor *y, float eps,
             GError **error)
{
  RmsnormArgs a = { F32 (x), F32 (w), F32 (y), DFL_COLS (x), eps };

  run_pieces (rmsnorm_rows, &a, DFL_ROWS (x), rows_per_piece (a.dim));
  return TRUE;
}

typedef struct {
  float *x;
  const float *inv_freq;
  int heads, head_dim, pos0;
  /* each row's position (NULL: pos0 + the row) */
  const gint64 *pos;
} RopeArgs;

static void
rope_rows (gpointer data, gint64 from, gint64 count)
{
  RopeArgs *a = data;
  float *x = a->x + from * a->heads * a->head_dim;

  if (a->pos)
    dfl_rope_at (x, (int) count, a->heads, a->head_dim, a->inv_freq, a->pos + from);
  else
    dfl_rope (x, (int) count, a->heads, a->head_dim, a->inv_freq, a->pos0 + (int) from);
}

static gboolean
cpu_rope (DflDevice *dev, DflTensor *x, const DflTensor *inv_freq, const DflTensor *pos,
          GError **error)
{
  const gint64 *p = dfl_tensor_data (pos);
  gint64 rows = x->ne[2];
  RopeArgs a = { F32 (x), F32 (inv_freq), (int) x->ne[1], (int) x->ne[0] };

  /* the kernel's positions are ints */
  if (pos->ne[0] == rows && rows > 1) {
    for (gint64 r = 0; r < rows; r++)
      if (!dfl_op_start_within (dev, DFL_OP_ROPE, "position", p[r], 1, G_MAXINT, error))
        return FALSE;
    a.pos = p;
  } else {
    if (!dfl_op_start_within (dev, DFL_OP_ROPE, "position", p[0], rows, G_MAXINT, error))
      return FALSE;
    a.pos0 = (int) p[0];
  }
  run_pieces (rope_rows, &a, rows, rows_per_piece (x->ne[1] * x->ne[0]));
  return TRUE;
}

static gboolean
cpu_attention (DflDevice *dev, const DflTensor *q, const DflTensor *k, const DflTensor *v,
               const DflTensor *lo, const DflTensor *hi, DflTensor *out, float scale,
               GError **error)
{
  int rows = (int) q->ne[2];

  int kv_stride = (int) (k->nb[2] / dfl_dtype_size (k->dtype));

  if (!dfl_op_ranges_within (dev, I32 (lo), I32 (hi), rows, k->ne[2], error))
    return FALSE;
  if (k->dtype == DFL_DTYPE_BF16)
    dfl_attention_ranges_bf16 (F32 (q), rows, (int) q->ne[1], (int) k->ne[1], (int) q->ne[0],
                               dfl_tensor_data (k), dfl_tensor_data (v), kv_stride, I32 (lo),
                               I32 (hi), scale, F32 (out));
  else
    dfl_attention_ranges (F32 (q), rows, (int) q->ne[1], (int) k->ne[1], (int) q->ne[0], F32 (k),
                          F32 (v), kv_stride, I32 (lo), I32 (hi), scale, F32 (out));
  return TRUE;
}

/* Each row's entry of a table: which[r] within the n entries. */
static gboolean
entries_within (DflDevice *dev, DflOp op, const DflTensor *which, int n, GError **error)
{
  return dfl_op_ids_within (dev, op, "which", I32 (which), which->ne[0], n, error);
}

static gboolean
cpu_attention_table (DflDevice *dev, const DflTensor *q, const DflTensor *ks,
                     const DflTensor *vs, int n_kv, const DflTensor *which, const DflTensor *lo,
                     const DflTensor *hi, DflTensor *out, float scale, GError **error)
{
  int rows = (int) q->ne[2];
  const int32_t *w = I32 (which), *l = I32 (lo), *h = I32 (hi);
  int kv_stride = (int) (ks[0].nb[2] / dfl_dtype_size (ks[0].dtype));
  g_autofree const void **k = g_new (const void *, MAX (rows, 1));
  g_autofree const void **v = g_new (const void *, MAX (rows, 1));

  if (!entries_within (dev, DFL_OP_ATTENTION_TABLE, which, n_kv, error))
    return FALSE;
  for (int r = 0; r < rows; r++) {
    /* an empty range may be anywhere: it reads nothing */
    if (l[r] < h[r] && (l[r] < 0 || h[r] > ks[w[r]].ne[2])) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID, "attention_table on cpu: row %d's keys "
                   "[%d, %d) are outside the %" G_GINT64_FORMAT " of its entry %d", r, l[r], h[r],
                   ks[w[r]].ne[2], w[r]);
      return FALSE;
    }
    k[r] = dfl_tensor_data (&ks[w[r]]);
    v[r] = dfl_tensor_data (&vs[w[r]]);
  }
  if (ks[0].dtype == DFL_DTYPE_BF16)
    dfl_attention_rows_bf16 (F32 (q), rows, (int) q->ne[1], (int) ks[0].ne[1], (int) q->ne[0],
                             (const uint16_t *const *) k, (const uint16_t *const *) v,
                             kv_stride, l, h, scale, F32 (out));
  else
    dfl_attention_rows (F32 (q), rows, (int) q->ne[1], (int) ks[0].ne[1], (int) q->ne[0],
                        (const float *const *) k, (const float *const *) v, kv_stride, l, h,
                        scale, F32 (out));
  return TRUE;
}

static gboolean
cpu_row_conv (DflDevice *dev, const DflTensor *x, const DflTensor *base, const DflTensor *dyn,
              DflTensor *y, GError **error)
{
  int kernel = DFL_ROWS (base), groups = DFL_COLS (dyn) / kernel;

  dfl_row_conv (F32 (x), DFL_ROWS (x), DFL_COLS (x), DFL_COLS (x) / groups, kernel, F32 (base),
                F32 (dyn), DFL_LD (dyn), F32 (y));
  return TRUE;
}

typedef struct {
  float *x;
  const float *y;
} PairArgs;

static void
silu_mul_run (gpointer data, gint64 from, gint64 count)
{
  PairArgs *a = data;

  dfl_silu_mul (a->x + from, a->y + from, count);
}

static void
add_run (gpointer data, gint64 from, gint64 count)
{
  PairArgs *a = data;

  dfl_add (a->x + from, a->y + from, count);
}

static gboolean
cpu_silu_mul (DflDevice *dev, DflTensor *gate, const DflTensor *up, GError **error)
{
  PairArgs a = { F32 (gate), F32 (up) };

  run_pieces (silu_mul_run, &a, dfl_tensor_n_elements (gate), PIECE_ELEMENTS);
  return TRUE;
}

static gboolean
cpu_add (DflDevice *dev, DflTensor *x, const DflTensor *y, GError **error)
{
  PairArgs a = { F32 (x), F32 (y) };

  run_pieces (add_run, &a, dfl_tensor_n_elements (x), PIECE_ELEMENTS);
  return TRUE;
}

static gboolean
cpu_embed (DflDevice *dev, const DflTensor *table, const DflTensor *ids, DflTensor *out,
           GError **error)
{
  if (!dfl_op_ids_within (dev, DFL_OP_EMBED, "ids", I32 (ids), ids->ne[0], table->ne[1], error))
    return FALSE;
  dfl_embed_rows (dfl_tensor_data (table), table->dtype, DFL_COLS (table), I32 (ids),
                  (int) ids->ne[0], F32 (out));
  return TRUE;
}

static gboolean
cpu_argmax (DflDevice *dev, const DflTensor *x, DflTensor *out, GError **error)
{
  for (int r = 0; r < DFL_ROWS (x); r++)
    I32 (out)[r] = dfl_argmax (F32 (x) + (gsize) r * DFL_LD (x), DFL_COLS (x));
  return TRUE;
}

static gboolean
cpu_top_k (DflDevice *dev, const DflTensor *x, DflTensor *values, DflTensor *indices,
           GError **error)
{
  int k = DFL_COLS (values);

  for (int r = 0; r < DFL_ROWS (x); r++)
    dfl_top_k_row (F32 (x) + (gsize) r * DFL_LD (x), DFL_COLS (x), k,
                   F32 (values) + (gsize) r * k, I32 (indices) + (gsize) r * k);
  return TRUE;
}

static gboolean
cpu_select_rescore (DflDevice *dev, const DflTensor *cand, const DflTensor *cand_logit,
                    const DflTensor *hp, const DflTensor *pred_book, const DflTensor *succ_book,
                    DflTensor *chosen, gint32 anchor, GError **error)
{
  int rows = DFL_ROWS (cand), k = DFL_COLS (cand);
  const int32_t *c = I32 (cand);

  /* the codebooks are read at each candidate: a row's list ends at −1 */
  for (int r = 0; r < rows; r++) {
    int n = 0;
    while (n < k && c[(gsize) r * k + n] >= 0)
      n++;
    if (!dfl_op_ids_within (dev, DFL_OP_SELECT_RESCORE, "cand", c + (gsize) r * k, n,
                            pred_book->ne[1], error))
      return FALSE;
  }
  dfl_select_rescore (c, F32 (cand_logit), rows, k, F32 (hp), DFL_COLS (hp),
                      dfl_tensor_data (pred_book), dfl_tensor_data (succ_book), anchor,
                      I32 (chosen));
  return TRUE;
}

/* n elements into a cache's row: copied as they are, or F32 rounded to
 * BF16 (nearest even). */
static void
put_row (DflDtype dst_type, void *dst, DflDtype src_type, const void *src, gsize n)
{
  if (dst_type == src_type)
    memcpy (dst, src, n * dfl_dtype_size (src_type));
  else
    dfl_f32_to_bf16_n (src, dst, n);
}

static gboolean
cpu_copy_rows (DflDevice *dev, const DflTensor *src, const DflTensor *row0, DflTensor *dst,
               GError **error)
{
  gint64 first = *(const gint64 *) dfl_tensor_data (row0);

  if (!dfl_op_start_within (dev, DFL_OP_COPY_ROWS, "start row", first, src->ne[1], dst->ne[1],
                            error))
    return FALSE;
  put_row (dst->dtype, (char *) dfl_tensor_data (dst) + first * dst->nb[1], src->dtype,
           dfl_tensor_data (src), dfl_tensor_n_elements (src));
  return TRUE;
}

static gboolean
cpu_copy_rows_table (DflDevice *dev, const DflTensor *src, const DflTensor *dsts, int n_dst,
                     const DflTensor *which, const DflTensor *row, GError **error)
{
  const int32_t *w = I32 (which);
  const gint64 *at = dfl_tensor_data (row);
  gsize row_bytes = src->nb[1];
  DflDtype kv_type = dsts[0].dtype;

  if (!entries_within (dev, DFL_OP_COPY_ROWS_TABLE, which, n_dst, error))
    return FALSE;
  /* every row checked before any is written: a refused call writes nothing */
  for (gint64 r = 0; r < src->ne[1]; r++)
    if (at[r] < 0 || at[r] >= dsts[w[r]].ne[1]) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID, "copy_rows_table on cpu: row %"
                   G_GINT64_FORMAT "'s destination row %" G_GINT64_FORMAT " is outside the %"
                   G_GINT64_FORMAT " rows of its entry %d", r, at[r], dsts[w[r]].ne[1], w[r]);
      return FALSE;
    }
  for (gint64 r = 0; r < src->ne[1]; r++)
    put_row (kv_type, (char *) dfl_tensor_data (&dsts[w[r]]) + at[r] * dsts[w[r]].nb[1],
             src->dtype, (const char *) dfl_tensor_data (src) + r * row_bytes, src->ne[0]);
  return TRUE;
}

static gboolean
cpu_convert (DflDevice *dev, const DflTensor *src, DflTensor *dst, GError **error)
{
  gsize n = dfl_tensor_n_elements (src);

  if (src->dtype == DFL_DTYPE_F16)
    dfl_f16_to_f32_n (dfl_tensor_data (src), F32 (dst), n);
  else if (src->dtype == DFL_DTYPE_BF16)
    dfl_bf16_to_f32_n (dfl_tensor_data (src), F32 (dst), n);
  else if (dst->dtype == DFL_DTYPE_F16)
    dfl_f32_to_f16_n (F32 (src), dfl_tensor_data (dst), n);
  else
    dfl_f32_to_bf16_n (F32 (src), dfl_tensor_data (dst), n);
  return TRUE;
}

/* splitmix64's finaliser: a good 64-bit mix of (seed, index); the CUDA
 * kernel's (dfl-cuda-kernels.cu) to the bit */
static guint64
mix64 (guint64 z)
{
  z = (z ^ (z >> 30)) * G_GUINT64_CONSTANT (0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * G_GUINT64_CONSTANT (0x94d049bb133111eb);
  return z ^ (z >> 31);
}

static gboolean
cpu_fill_random (DflDevice *dev, DflTensor *t, guint64 seed, float scale, GError **error)
{
  gsize n = dfl_tensor_n_elements (t);
  guint8 *dst = dfl_tensor_data (t);

  for (gsize i = 0; i < n; i++) {
    guint64 h = mix64 (seed * G_GUINT64_CONSTANT (0x9e3779b97f4a7c15) + i + 1);
    float u = (float) (h >> 40) * (1.0f / 16777216.0f);   /* [0, 1) in 24 bits */
    float v = (2.0f * u - 1.0f) * scale;

    if (t->dtype == DFL_DTYPE_F32)
      ((float *) dst)[i] = v;
    else
      ((guint16 *) dst)[i] = t->dtype == DFL_DTYPE_F16 ? dfl_f32_to_f16 (v) : dfl_f32_to_bf16 (v);
  }
  return TRUE;
}

static gboolean
cpu_sync (DflDevice *dev, GError **error)
{
  /* every op has run when it returned */
  return TRUE;
}

static const DflBackendOps dfl_backend_cpu_ops = {
  .caps = cpu_caps,
  .matmul = cpu_matmul,
  .matmul_group = cpu_matmul_group,
  .rmsnorm = cpu_rmsnorm,
  .rope = cpu_rope,
  .attention = cpu_attention,
  .row_conv = cpu_row_conv,
  .silu_mul = cpu_silu_mul,
  .add = cpu_add,
  .embed = cpu_embed,
  .argmax = cpu_argmax,
  .top_k = cpu_top_k,
  .select_rescore = cpu_select_rescore,
  .copy_rows = cpu_copy_rows,
  .convert = cpu_convert,
  .sync = cpu_sync,
  .fill_random = cpu_fill_random,
  .copy_rows_table = cpu_copy_rows_table,
  .attention_table = cpu_attention_table,
};

/* --- the device: host memory --- */

static gboolean
cpu_open (int index, gpointer *native, GError **error)
{
  *native = NULL;
  return TRUE;
}

static gpointer
cpu_ref (gpointer native)
{
  return NULL;
}

static void
cpu_close (gpointer native)
{
}

static char *
cpu_describe (gpointer native)
{
  return g_strdup ("CPU: host memory");
}

static gpointer
cpu_alloc (gpointer native, gsize bytes, GError **error)
{
  gpointer p = g_try_malloc (bytes ? bytes : 1);

  if (!p)
    g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT, "no room for %" G_GSIZE_FORMAT
                 " bytes of host memory", bytes);
  return p;
}

static void
cpu_free (gpointer native, gpointer handle)
{
  g_free (handle);
}

static gboolean
cpu_upload (gpointer native, gpointer handle, gsize offset, const void *src, gsize bytes,
            GError **error)
{
  memcpy ((char *) handle + offset, src, bytes);
  return TRUE;
}

static gboolean
cpu_download (gpointer native, gpointer handle, gsize offset, void *dst, gsize bytes,
              GError **error)
{
  memcpy (dst, (const char *) handle + offset, bytes);
  return TRUE;
}

const DflBackendDeviceOps dfl_backend_cpu = {
  "cpu", TRUE, cpu_open, cpu_ref, cpu_close, cpu_describe, cpu_alloc, cpu_free, cpu_upload,
  cpu_download, &dfl_backend_cpu_ops,
};
