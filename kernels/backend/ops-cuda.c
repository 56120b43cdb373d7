/* gst-dflash — the CUDA table of operations: the launchers of dfl-cuda.h
 * on device pointers, queued on the device's one stream.
 *
 * Each op holds the device (dfl_cuda_device_lock) while it launches, so
 * another thread's ops wait while one thread captures a graph rather than
 * land inside it. Index tensors live on the card and are read when the
 * stream runs: a graph replays at the positions they hold then. The
 * scratch F16/BF16 products round x into grows outside a capture only, and
 * a graph captured before a scratch moved is refused at launch.
 */
#include "backend-private.h"
#include "dfl-cuda.h"

typedef struct {
  void *d_scratch;
  gsize scratch_bytes;
  guint64 scratch_generation;
  gboolean capturing;
} CudaState;

typedef struct {
  DflCudaGraph *graph;
  guint64 scratch_generation, attention_generation;
} CudaGraph;

#define NATIVE(dev) ((DflCudaDevice *) (dev)->native)
#define STATE(dev) ((CudaState *) (dev)->state)
#define F32(t) ((float *) dfl_tensor_data (t))
#define I32(t) ((int32_t *) dfl_tensor_data (t))
#define I64(t) ((int64_t *) dfl_tensor_data (t))

/* the limits of dfl-cuda.h's top_k, select_rescore and attention */
#define TOP_K_MAX 64
#define RANK_MAX 8192
#define HEAD_DIM_MAX 256

static DflOpCaps
cuda_caps (DflDevice *dev, DflOp op, DflDtype dtype)
{
  /* a KV cache of BF16 (its keys and values widened as attention reads
   * them, rounded as the rows are written), besides every op's F32 */
  gboolean bf16_kv = dtype == DFL_DTYPE_BF16
      && (op == DFL_OP_ATTENTION || op == DFL_OP_ATTENTION_TABLE || op == DFL_OP_COPY_ROWS
          || op == DFL_OP_COPY_ROWS_TABLE);

  if (!bf16_kv && !dfl_op_takes_dtype (op, dtype))
    return DFL_OP_CAP_NONE;
  /* attention splits keys at fixed positions; matmul is row-invariant
   * only from 1 to 32 rows of 16-bit weights (dfl-cuda-matmul.cu's kernel),
   * beyond them and for F32 weights cuBLAS's, which picks its algorithm by
   * the shape, rows included */
  return DFL_OP_CAP_RUNS | (op == DFL_OP_ATTENTION || op == DFL_OP_ATTENTION_TABLE
                            ? DFL_OP_CAP_ROW_INVARIANT : 0);
}

static gpointer
cuda_init (DflDevice *dev, GError **error)
{
  return g_new0 (CudaState, 1);
}

static void
cuda_fini (DflDevice *dev, gpointer state)
{
  CudaState *s = state;

  dfl_cuda_free (NATIVE (dev), s->d_scratch);
  g_free (s);
}

/* --- ops --- */

/* Room for `bytes` of scratch; it cannot move inside a capture. */
static gboolean
scratch_for (DflDevice *dev, gsize bytes, GError **error)
{
  CudaState *s = STATE (dev);
  void *d;

  if (bytes <= s->scratch_bytes)
    return TRUE;
  if (s->capturing) {
    dfl_op_refuse (error, dev, DFL_OP_MATMUL, "a scratch of %" G_GSIZE_FORMAT " bytes cannot be "
                   "made inside a graph capture: run the op once before capturing", bytes);
    return FALSE;
  }
  /* the work queued may still read the old one */
  if (!dfl_cuda_sync (NATIVE (dev), error) || !(d = dfl_cuda_alloc (NATIVE (dev), bytes, error)))
    return FALSE;
  dfl_cuda_free (NATIVE (dev), s->d_scratch);
  s->d_scratch = d;
  s->scratch_bytes = bytes;
  s->scratch_generation++;
  return TRUE;
}

static gboolean
cuda_matmul (DflDevice *dev, const DflTensor *w, const DflTensor *x, DflTensor *y,
             gboolean accumulate, GError **error)
{
  DflCudaWeights wt = { dfl_tensor_data (w), w->dtype, DFL_ROWS (w), DFL_COLS (w) };
  gboolean ok;

  dfl_cuda_device_lock (NATIVE (dev));
  ok = w->dtype == DFL_DTYPE_F32
       || scratch_for (dev, (gsize) DFL_ROWS (x) * DFL_COLS (x) * 2, error);
  if (ok)
    dfl_cuda_matmul (NATIVE (dev), &wt, F32 (x), DFL_ROWS (x), DFL_LD (x), F32 (y), DFL_LD (y),
                     DFL_COLS (y), accumulate, STATE (dev)->d_scratch);
  dfl_cuda_device_unlock (NATIVE (dev));
  return ok;
}

/* Products of one x: one launch where dfl_cuda_matmul_group can (one
 * row; 2 to 32 rows of q, k, v), else a product at a time there. */
static gboolean
cuda_matmul_group (DflDevice *dev, int n, const DflTensor *const *w, const DflTensor *x,
                   DflTensor *const *y, gboolean accumulate, GError **error)
{
  DflCudaWeights wt[DFL_OP_GROUP_MAX];
  float *ys[DFL_OP_GROUP_MAX];
  int ldy[DFL_OP_GROUP_MAX], n_out[DFL_OP_GROUP_MAX];
  gboolean ok;

  G_STATIC_ASSERT (DFL_OP_GROUP_MAX <= DFL_CUDA_GROUP_MAX);
  for (int i = 0; i < n; i++) {
    wt[i] = (DflCudaWeights) { dfl_tensor_data (w[i]), w[i]->dtype, DFL_ROWS (w[i]),
                               DFL_COLS (w[i]) };
    ys[i] = F32 (y[i]);
    ldy[i] = DFL_LD (y[i]);
    n_out[i] = DFL_COLS (y[i]);
  }
  dfl_cuda_device_lock (NATIVE (dev));
  ok = scratch_for (dev, (gsize) DFL_ROWS (x) * DFL_COLS (x) * 2, error);
  if (ok)
    dfl_cuda_matmul_group (NATIVE (dev), n, wt, F32 (x), DFL_ROWS (x), DFL_LD (x), ys, ldy,
                           n_out, accumulate, STATE (dev)->d_scratch);
  dfl_cuda_device_unlock (NATIVE (dev));
  return ok;
}

/* One launch, the device held around it. */
#define LAUNCH(dev, call) \
  G_STMT_START { \
    dfl_cuda_device_lock (NATIVE (dev)); \
    call; \
    dfl_cuda_device_unlock (NATIVE (dev)); \
  } G_STMT_END

static gboolean
cuda_rmsnorm (DflDevice *dev, const DflTensor *x, const DflTensor *w, DflTensor *y, float eps,
              GError **error)
{
  LAUNCH (dev, dfl_cuda_rmsnorm (NATIVE (dev), F32 (y), F32 (x), DFL_ROWS (x), DFL_COLS (x),
                                 F32 (w), eps));
  return TRUE;
}

static gboolean
cuda_rope (DflDevice *dev, DflTensor *x, const DflTensor *inv_freq, const DflTensor *pos,
           GError **error)
{
  if (pos->ne[0] > 1)
    LAUNCH (dev, dfl_cuda_rope_at (NATIVE (dev), F32 (x), (int) x->ne[2], (int) x->ne[1],
                                   (int) x->ne[0], F32 (inv_freq), I64 (pos)));
  else
    LAUNCH (dev, dfl_cuda_rope (NATIVE (dev), F32 (x), (int) x->ne[2], (int) x->ne[1],
                                (int) x->ne[0], F32 (inv_freq), I64 (pos)));
  return TRUE;
}

/* The kernel norms a head with one block of 256 threads, as rmsnorm
 * does rows below 4096 values; a wider head is normed as rmsnorm's wider
 * rows are, then roped: the same two launches the dispatch would make. */
#define NORM_ROPE_HEAD_MAX 4094

static gboolean
cuda_norm_rope (DflDevice *dev, DflTensor *x, const DflTensor *w, const DflTensor *inv_freq,
                const DflTensor *pos, float eps, GError **error)
{
  if (x->ne[0] > NORM_ROPE_HEAD_MAX) {
    DflTensor heads = dfl_tensor_2d (x->device, x->handle, x->offset, DFL_DTYPE_F32,
                                     x->ne[1] * x->ne[2], x->ne[0]);
    return cuda_rmsnorm (dev, &heads, w, &heads, eps, error)
           && cuda_rope (dev, x, inv_freq, pos, error);
  }
  LAUNCH (dev, dfl_cuda_norm_rope (NATIVE (dev), F32 (x), (int) x->ne[2], (int) x->ne[1],
                                   (int) x->ne[0], F32 (w), eps, F32 (inv_freq), I64 (pos),
                                   pos->ne[0] > 1));
  return TRUE;
}

static gboolean
cuda_attention (DflDevice *dev, const DflTensor *q, const DflTensor *k, const DflTensor *v,
                const DflTensor *lo, const DflTensor *hi, DflTensor *out, float scale,
                GError **error)
{
  int head_dim = (int) q->ne[0], kv_stride = (int) (k->nb[2] / k->nb[0]);
  /* the kernel reads rows 16 bytes at a time */
  int per16 = (int) (16 / k->nb[0]);

  if (head_dim > HEAD_DIM_MAX || head_dim % per16) {
    dfl_op_refuse (error, dev, DFL_OP_ATTENTION, "head_dim %d is not a multiple of %d up to %d "
                   "(%s keys)", head_dim, per16, HEAD_DIM_MAX, dfl_dtype_name (k->dtype));
    return FALSE;
  }
  if (kv_stride % per16 || ((guintptr) dfl_tensor_data (q) | (guintptr) dfl_tensor_data (k)
                            | (guintptr) dfl_tensor_data (v)) % 16) {
    dfl_op_refuse (error, dev, DFL_OP_ATTENTION, "a key stride of %d elements, or q, k or v not "
                   "16-byte aligned (offsets %" G_GSIZE_FORMAT ", %" G_GSIZE_FORMAT ", %"
                   G_GSIZE_FORMAT ")", kv_stride, q->offset, k->offset, v->offset);
    return FALSE;
  }
  LAUNCH (dev, dfl_cuda_attention (NATIVE (dev), F32 (q), (int) q->ne[2], (int) q->ne[1],
                                   (int) k->ne[1], head_dim, dfl_tensor_data (k),
                                   dfl_tensor_data (v), k->dtype == DFL_DTYPE_BF16, kv_stride,
                                   I32 (lo), I32 (hi), (int) k->ne[2], scale, F32 (out)));
  return TRUE;
}

/* A table's tensors as the launch's table of device pointers (the rest
 * NULL). */
static DflCudaTable
cuda_table (const DflTensor *t, int n)
{
  DflCudaTable table = { { NULL } };

  G_STATIC_ASSERT (DFL_OP_TABLE_MAX <= DFL_CUDA_TABLE_MAX);
  for (int i = 0; i < n; i++)
    table.d[i] = dfl_tensor_data (&t[i]);
  return table;
}

static gboolean
cuda_attention_table (DflDevice *dev, const DflTensor *q, const DflTensor *ks,
                      const DflTensor *vs, int n_kv, const DflTensor *which, const DflTensor *lo,
                      const DflTensor *hi, DflTensor *out, float scale, GError **error)
{
  int head_dim = (int) q->ne[0], kv_stride = (int) (ks[0].nb[2] / ks[0].nb[0]);
  int heads = (int) q->ne[1], kv_heads = (int) ks[0].ne[1], max_keys = 0;
  int per16 = (int) (16 / ks[0].nb[0]);
  guintptr aligned = (guintptr) dfl_tensor_data (q);
  DflCudaTable kt = cuda_table (ks, n_kv), vt = cuda_table (vs, n_kv);

  /* a block holds one row's query heads of a kv head */
  if (head_dim > HEAD_DIM_MAX || head_dim % per16 || heads / kv_heads > 64) {
    dfl_op_refuse (error, dev, DFL_OP_ATTENTION_TABLE, "head_dim %d is not a multiple of %d up "
                   "to %d (%s keys), or %d query heads a kv head are more than 64", head_dim,
                   per16, HEAD_DIM_MAX, dfl_dtype_name (ks[0].dtype), heads / kv_heads);
    return FALSE;
  }
  for (int i = 0; i < n_kv; i++) {
    aligned |= (guintptr) kt.d[i] | (guintptr) vt.d[i];
    max_keys = MAX (max_keys, (int) ks[i].ne[2]);
  }
  if (kv_stride % per16 || aligned % 16) {
    dfl_op_refuse (error, dev, DFL_OP_ATTENTION_TABLE, "a key stride of %d elements, or q or an "
                   "entry not 16-byte aligned", kv_stride);
    return FALSE;
  }
  LAUNCH (dev, dfl_cuda_attention_table (NATIVE (dev), F32 (q), (int) q->ne[2], heads, kv_heads,
                                         head_dim, &kt, &vt, ks[0].dtype == DFL_DTYPE_BF16,
                                         kv_stride, I32 (which), I32 (lo), I32 (hi), max_keys,
                                         scale, F32 (out)));
  return TRUE;
}

static gboolean
cuda_row_conv (DflDevice *dev, const DflTensor *x, const DflTensor *base, const DflTensor *dyn,
               DflTensor *y, GError **error)
{
  int kernel = DFL_ROWS (base), groups = DFL_COLS (dyn) / kernel;

  LAUNCH (dev, dfl_cuda_row_conv (NATIVE (dev), F32 (x), DFL_ROWS (x), DFL_COLS (x),
                                  DFL_COLS (x) / groups, kernel, F32 (base), F32 (dyn),
                                  DFL_LD (dyn), F32 (y)));
  return TRUE;
}

static gboolean
cuda_silu_mul (DflDevice *dev, DflTensor *gate, const DflTensor *up, GError **error)
{
  LAUNCH (dev, dfl_cuda_silu_mul (NATIVE (dev), F32 (gate), F32 (up),
                                  dfl_tensor_n_elements (gate)));
  return TRUE;
}

static gboolean
cuda_add (DflDevice *dev, DflTensor *x, const DflTensor *y, GError **error)
{
  LAUNCH (dev, dfl_cuda_add (NATIVE (dev), F32 (x), F32 (y), dfl_tensor_n_elements (x)));
  return TRUE;
}

static gboolean
cuda_embed (DflDevice *dev, const DflTensor *table, const DflTensor *ids, DflTensor *out,
            GError **error)
{
  LAUNCH (dev, dfl_cuda_embed (NATIVE (dev), dfl_tensor_data (table), table->dtype,
                               DFL_COLS (table), I32 (ids), (int) ids->ne[0], F32 (out)));
  return TRUE;
}

static gboolean
cuda_argmax (DflDevice *dev, const DflTensor *x, DflTensor *out, GError **error)
{
  LAUNCH (dev, dfl_cuda_argmax (NATIVE (dev), F32 (x), DFL_ROWS (x), DFL_COLS (x), DFL_LD (x),
                                I32 (out)));
  return TRUE;
}

static gboolean
k_within (DflDevice *dev, DflOp op, int k, GError **error)
{
  if (k > TOP_K_MAX) {
    dfl_op_refuse (error, dev, op, "k %d is above %d", k, TOP_K_MAX);
    return FALSE;
  }
  return TRUE;
}

static gboolean
cuda_top_k (DflDevice *dev, const DflTensor *x, DflTensor *values, DflTensor *indices,
            GError **error)
{
  if (!k_within (dev, DFL_OP_TOP_K, DFL_COLS (values), error))
    return FALSE;
  LAUNCH (dev, dfl_cuda_top_k (NATIVE (dev), F32 (x), DFL_ROWS (x), DFL_COLS (x), DFL_LD (x),
                               DFL_COLS (values), F32 (values), I32 (indices)));
  return TRUE;
}

static gboolean
cuda_select_rescore (DflDevice *dev, const DflTensor *cand, const DflTensor *cand_logit,
                     const DflTensor *hp, const DflTensor *pred_book, const DflTensor *succ_book,
                     DflTensor *chosen, gint32 anchor, GError **error)
{
  if (!k_within (dev, DFL_OP_SELECT_RESCORE, DFL_COLS (cand), error))
    return FALSE;
  if (DFL_COLS (hp) < 1 || DFL_COLS (hp) > RANK_MAX) {
    dfl_op_refuse (error, dev, DFL_OP_SELECT_RESCORE, "rank %d is not from 1 to %d",
                   DFL_COLS (hp), RANK_MAX);
    return FALSE;
  }
  LAUNCH (dev, dfl_cuda_select_rescore (NATIVE (dev), I32 (cand), F32 (cand_logit),
                                        DFL_ROWS (cand), DFL_COLS (cand), F32 (hp),
                                        DFL_COLS (hp), dfl_tensor_data (pred_book),
                                        dfl_tensor_data (succ_book), anchor, I32 (chosen)));
  return TRUE;
}

static gboolean
cuda_copy_rows (DflDevice *dev, const DflTensor *src, const DflTensor *row0, DflTensor *dst,
                GError **error)
{
  LAUNCH (dev, dfl_cuda_copy_rows_at (NATIVE (dev), dfl_tensor_data (dst),
                                      dst->dtype == DFL_DTYPE_BF16, DFL_COLS (dst), I64 (row0),
                                      dfl_tensor_data (src), src->dtype == DFL_DTYPE_BF16,
                                      DFL_ROWS (src)));
  return TRUE;
}

static gboolean
cuda_copy_rows_table (DflDevice *dev, const DflTensor *src, const DflTensor *dsts, int n_dst,
                      const DflTensor *which, const DflTensor *row, GError **error)
{
  DflCudaTable table = cuda_table (dsts, n_dst);

  LAUNCH (dev, dfl_cuda_copy_rows_table (NATIVE (dev), &table, dsts[0].dtype == DFL_DTYPE_BF16,
                                         DFL_COLS (src), I32 (which), I64 (row), F32 (src),
                                         DFL_ROWS (src)));
  return TRUE;
}

static gboolean
cuda_convert (DflDevice *dev, const DflTensor *src, DflTensor *dst, GError **error)
{
  LAUNCH (dev, dfl_cuda_convert (NATIVE (dev), dfl_tensor_data (src), src->dtype,
                                 dfl_tensor_data (dst), dst->dtype,
                                 dfl_tensor_n_elements (src)));
  return TRUE;
}

static gboolean
cuda_fill_random (DflDevice *dev, DflTensor *t, guint64 seed, float scale, GError **error)
{
  LAUNCH (dev, dfl_cuda_fill_random (NATIVE (dev), dfl_tensor_data (t), t->dtype,
                                     dfl_tensor_n_elements (t), seed, scale));
  return TRUE;
}

static gboolean
cuda_sync (DflDevice *dev, GError **error)
{
  return dfl_cuda_sync (NATIVE (dev), error);
}

/* --- graphs --- */

static gboolean
cuda_capture_begin (DflDevice *dev, GError **error)
{
  /* the device stays held by this thread until the capture ends */
  if (!dfl_cuda_capture_begin (NATIVE (dev), error))
    return FALSE;
  STATE (dev)->capturing = TRUE;
  return TRUE;
}

static gpointer
cuda_capture_end (DflDevice *dev, GError **error)
{
  DflCudaGraph *graph;
  CudaGraph *g;

  STATE (dev)->capturing = FALSE;
  if (!(graph = dfl_cuda_capture_end (NATIVE (dev), error)))
    return NULL;
  g = g_new0 (CudaGraph, 1);
  g->graph = graph;
  g->scratch_generation = STATE (dev)->scratch_generation;
  g->attention_generation = dfl_cuda_attention_scratch_generation (NATIVE (dev));
  return g;
}

static gboolean
cuda_graph_launch (DflDevice *dev, gpointer graph, GError **error)
{
  CudaGraph *g = graph;
  gboolean ok;

  dfl_cuda_device_lock (NATIVE (dev));
  /* a graph holds the addresses of the scratch it was captured with */
  ok = g->scratch_generation == STATE (dev)->scratch_generation
       && g->attention_generation == dfl_cuda_attention_scratch_generation (NATIVE (dev));
  if (ok)
    dfl_cuda_graph_launch (NATIVE (dev), g->graph);
  else
    g_set_error (error, DFL_ERROR, DFL_ERROR_MISMATCH, "graph_launch on cuda: the device's "
                 "scratch has moved since the graph was captured; capture it again");
  dfl_cuda_device_unlock (NATIVE (dev));
  return ok;
}

static void
cuda_graph_free (DflDevice *dev, gpointer graph)
{
  CudaGraph *g = graph;

  dfl_cuda_graph_free (g->graph);
  g_free (g);
}

static const DflBackendOps dfl_backend_cuda_ops = {
  .caps = cuda_caps,
  .init = cuda_init,
  .fini = cuda_fini,
  .matmul = cuda_matmul,
  .matmul_group = cuda_matmul_group,
  .rmsnorm = cuda_rmsnorm,
  .rope = cuda_rope,
  .norm_rope = cuda_norm_rope,
  .attention = cuda_attention,
  .row_conv = cuda_row_conv,
  .silu_mul = cuda_silu_mul,
  .add = cuda_add,
  .embed = cuda_embed,
  .argmax = cuda_argmax,
  .top_k = cuda_top_k,
  .select_rescore = cuda_select_rescore,
  .copy_rows = cuda_copy_rows,
  .convert = cuda_convert,
  .sync = cuda_sync,
  .capture_begin = cuda_capture_begin,
  .capture_end = cuda_capture_end,
  .graph_launch = cuda_graph_launch,
  .graph_free = cuda_graph_free,
  .fill_random = cuda_fill_random,
  .copy_rows_table = cuda_copy_rows_table,
  .attention_table = cuda_attention_table,
};

/* --- the device: device pointers --- */

static gboolean
cuda_open (int index, gpointer *native, GError **error)
{
  return (*native = dfl_cuda_device_open (index < 0 ? 0 : index, error)) != NULL;
}

static gpointer
cuda_ref (gpointer native)
{
  return dfl_cuda_device_ref (native);
}

static void
cuda_close (gpointer native)
{
  dfl_cuda_device_unref (native);
}

static char *
cuda_describe (gpointer native)
{
  return g_strdup_printf ("CUDA: %s", dfl_cuda_device_describe (native));
}

static gpointer
cuda_alloc (gpointer native, gsize bytes, GError **error)
{
  return dfl_cuda_alloc (native, bytes, error);
}

static void
cuda_free (gpointer native, gpointer handle)
{
  dfl_cuda_free (native, handle);
}

static gboolean
cuda_upload (gpointer native, gpointer handle, gsize offset, const void *src, gsize bytes,
             GError **error)
{
  return dfl_cuda_upload (native, (char *) handle + offset, src, bytes, error);
}

static gboolean
cuda_download (gpointer native, gpointer handle, gsize offset, void *dst, gsize bytes,
               GError **error)
{
  return dfl_cuda_download (native, dst, (const char *) handle + offset, bytes, error);
}

const DflBackendDeviceOps dfl_backend_cuda = {
  "cuda", TRUE, cuda_open, cuda_ref, cuda_close, cuda_describe, cuda_alloc, cuda_free,
  cuda_upload, cuda_download, &dfl_backend_cuda_ops,
};
