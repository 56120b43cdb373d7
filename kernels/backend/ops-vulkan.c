/* gst-dflash — the Vulkan table of operations: the kernels of dfl-vk.h,
 * recorded on one stream per device, which dfl_op_sync (or a host copy)
 * submits and waits for.
 *
 * The stream is shared by the threads that use the device, a recursive
 * lock around each op: ops are recorded in the order they are dispatched,
 * and a failure of any of them shows at the next finish, whoever calls it.
 *
 * Where a kernel's signature is narrower than the interface's, the op is
 * built from it: the rope's table is made on the host from the positions
 * (so they are host memory, and the op waits for the queue to read
 * inv_freq); attention runs one query row a launch, its keys [lo, hi − 1)
 * the kernel's context and key hi − 1 its block row (in key order, so the
 * softmax sums as a plain pass would); embed one id a launch. Convert and
 * fill_random have no kernel and graphs no Vulkan form: the capabilities
 * say so.
 */
#include "backend-private.h"
#include "dfl-vk.h"

#include <string.h>

typedef struct {
  GRecMutex lock;
  DflVkStream *stream;
  /* scratch the recorded ops use one after another (each op is ordered
   * after the one before, so one buffer serves them all): the attention's
   * scores, the re-scoring's ids; zeros for empty attention rows; the
   * rope's table (written by the host: only with the queue empty) */
  DflVkBuffer *scratch, *zeros, *table;
} VkState;

#define NATIVE(dev) ((DflVkDevice *) (dev)->native)
#define STATE(dev) ((VkState *) (dev)->state)

/* a tensor's device address */
static VkDeviceAddress
addr (const DflTensor *t)
{
  return dfl_vk_buffer_address (t->handle) + t->offset;
}

/* dfl_vk_attention's, dfl_vk_select_rescore's and dfl_vk_top_k's limits */
#define HEAD_DIM_MAX 256
#define RESCORE_K_MAX 256
#define TOP_K_ROWS_MAX 65535

static DflOpCaps
vk_caps (DflDevice *dev, DflOp op, DflDtype dtype)
{
  if (!dfl_op_takes_dtype (op, dtype))
    return DFL_OP_CAP_NONE;
  switch (op) {
  case DFL_OP_CONVERT:
  case DFL_OP_FILL_RANDOM:
  case DFL_OP_CAPTURE_BEGIN:
  case DFL_OP_CAPTURE_END:
  case DFL_OP_GRAPH_LAUNCH:
  /* a table's tensors would need their buffers' addresses in one table */
  case DFL_OP_COPY_ROWS_TABLE:
  case DFL_OP_ATTENTION_TABLE:
    return DFL_OP_CAP_NONE;
  default:
    /* one workgroup a row: a row's sums do not depend on the others */
    return DFL_OP_CAP_RUNS | DFL_OP_CAP_ROW_INVARIANT
           | (dfl_op_has_indices (op) ? DFL_OP_CAP_HOST_INDICES : 0);
  }
}

static void
vk_fini (DflDevice *dev, gpointer state)
{
  VkState *s = state;

  /* nothing recorded runs any more; a failure of it has no one to go to */
  dfl_vk_stream_finish (s->stream, NULL);
  dfl_vk_stream_free (s->stream);
  dfl_vk_buffer_free (s->scratch);
  dfl_vk_buffer_free (s->zeros);
  dfl_vk_buffer_free (s->table);
  g_rec_mutex_clear (&s->lock);
  g_free (s);
}

static gpointer
vk_init (DflDevice *dev, GError **error)
{
  VkState *s = g_new0 (VkState, 1);

  g_rec_mutex_init (&s->lock);
  if (!(s->stream = dfl_vk_stream_new (NATIVE (dev), error))) {
    g_rec_mutex_clear (&s->lock);
    g_free (s);
    return NULL;
  }
  return s;
}

static gboolean
vk_flush (DflDevice *dev, GError **error)
{
  VkState *s = STATE (dev);
  gboolean ok;

  g_rec_mutex_lock (&s->lock);
  ok = dfl_vk_stream_finish (s->stream, error);
  g_rec_mutex_unlock (&s->lock);
  return ok;
}

/* *buf with room for `bytes` (the lock held): a bigger one replaces it
 * once the queue no longer reads it; zeros are uploaded into a new one. */
static gboolean
room (DflDevice *dev, DflVkBuffer **buf, gsize bytes, DflVkMemory memory, gboolean zero,
      GError **error)
{
  DflVkBuffer *b;

  if (*buf && dfl_vk_buffer_size (*buf) >= bytes)
    return TRUE;
  bytes = MAX (bytes, *buf ? 2 * dfl_vk_buffer_size (*buf) : 4096);
  if (!dfl_vk_stream_finish (STATE (dev)->stream, error)
      || !(b = dfl_vk_buffer_new (NATIVE (dev), bytes, memory, error)))
    return FALSE;
  if (zero) {
    g_autofree void *z = g_malloc0 (bytes);
    if (!dfl_vk_upload (NATIVE (dev), b, 0, z, bytes, error)) {
      dfl_vk_buffer_free (b);
      return FALSE;
    }
  }
  dfl_vk_buffer_free (*buf);
  *buf = b;
  return TRUE;
}

/* --- ops --- */

/* Record `call` on the device's stream, the lock held around it. */
#define RECORD(dev, call) \
  G_STMT_START { \
    DflVkStream *stream = STATE (dev)->stream; \
    g_rec_mutex_lock (&STATE (dev)->lock); \
    call; \
    g_rec_mutex_unlock (&STATE (dev)->lock); \
  } G_STMT_END

static gboolean
vk_matmul (DflDevice *dev, const DflTensor *w, const DflTensor *x, DflTensor *y,
           gboolean accumulate, GError **error)
{
  DflVkWeights wt = { addr (w), w->dtype, DFL_ROWS (w), DFL_COLS (w) };

  if (wt.addr % 4) {
    dfl_op_refuse (error, dev, DFL_OP_MATMUL, "weights at offset %" G_GSIZE_FORMAT " are not "
                   "4-byte aligned", w->offset);
    return FALSE;
  }
  RECORD (dev, dfl_vk_matmul (stream, &wt, addr (x), DFL_ROWS (x), DFL_LD (x), addr (y),
                              DFL_LD (y), DFL_COLS (y), accumulate));
  return TRUE;
}

static gboolean
vk_rmsnorm (DflDevice *dev, const DflTensor *x, const DflTensor *w, DflTensor *y, float eps,
            GError **error)
{
  RECORD (dev, dfl_vk_rmsnorm (stream, addr (y), addr (x), DFL_ROWS (x), DFL_COLS (x), addr (w),
                               eps));
  return TRUE;
}

static gboolean
vk_rope (DflDevice *dev, DflTensor *x, const DflTensor *inv_freq, const DflTensor *pos,
         GError **error)
{
  VkState *s = STATE (dev);
  int rows = (int) x->ne[2], head_dim = (int) x->ne[0];
  gsize bytes = sizeof (float) * MAX (rows, 1) * head_dim;
  g_autofree float *freq = g_new (float, head_dim / 2);
  gboolean ok;

  g_rec_mutex_lock (&s->lock);
  /* the table buffer is free and inv_freq written once the queue is done */
  ok = dfl_vk_stream_finish (s->stream, error)
       && room (dev, &s->table, bytes, DFL_VK_MEMORY_HOST, FALSE, error)
       && dfl_vk_download (NATIVE (dev), freq, inv_freq->handle, inv_freq->offset,
                           sizeof (float) * (head_dim / 2), error);
  if (ok) {
    const gint64 *p = dfl_tensor_data (pos);
    float *table = dfl_vk_buffer_map (s->table);
    /* one start position, or one a row: the table is made a row at a time */
    if (pos->ne[0] == 1)
      dfl_vk_rope_table (table, rows, head_dim, freq, p[0]);
    else
      for (int r = 0; r < rows; r++)
        dfl_vk_rope_table (table + (gsize) r * head_dim, 1, head_dim, freq, p[r]);
    dfl_vk_rope (s->stream, addr (x), rows, (int) x->ne[1], head_dim,
                 dfl_vk_buffer_address (s->table));
  }
  g_rec_mutex_unlock (&s->lock);
  return ok;
}

static gboolean
vk_attention (DflDevice *dev, const DflTensor *q, const DflTensor *k, const DflTensor *v,
              const DflTensor *lo, const DflTensor *hi, DflTensor *out, float scale,
              GError **error)
{
  VkState *s = STATE (dev);
  int rows = (int) q->ne[2], heads = (int) q->ne[1], kv_heads = (int) k->ne[1];
  int head_dim = (int) q->ne[0], most = 1;
  const int32_t *l = dfl_tensor_data (lo), *h = dfl_tensor_data (hi);
  gsize row_bytes = q->nb[2];
  gboolean ok;

  if (head_dim > HEAD_DIM_MAX) {
    dfl_op_refuse (error, dev, DFL_OP_ATTENTION, "head_dim %d is above %d", head_dim,
                   HEAD_DIM_MAX);
    return FALSE;
  }
  /* the kernel's context is a ring of [kv_heads][head_dim] rows */
  if (k->nb[2] != k->nb[1] * (gsize) kv_heads) {
    dfl_op_refuse (error, dev, DFL_OP_ATTENTION, "a key stride of %" G_GSIZE_FORMAT " bytes: the "
                   "keys' heads must be packed rows", k->nb[2]);
    return FALSE;
  }
  if (!dfl_op_ranges_within (dev, l, h, rows, k->ne[2], error))
    return FALSE;
  for (int r = 0; r < rows; r++)
    most = MAX (most, h[r] - l[r]);
  g_rec_mutex_lock (&s->lock);
  ok = room (dev, &s->scratch, sizeof (float) * heads * (gsize) most, DFL_VK_MEMORY_DEVICE,
             FALSE, error)
       && room (dev, &s->zeros, row_bytes, DFL_VK_MEMORY_DEVICE, TRUE, error);
  for (int r = 0; ok && r < rows; r++) {
    gsize at = (gsize) r * row_bytes;
    if (h[r] <= l[r]) {
      dfl_vk_copy (s->stream, out->handle, out->offset + at, s->zeros, 0, row_bytes);
      continue;
    }
    /* context: keys lo … hi − 2 as a ring that does not wrap; block: key hi − 1 */
    dfl_vk_attention (s->stream, addr (q) + at, 1, heads, kv_heads, head_dim, addr (k), addr (v),
                      h[r] - l[r] - 1, l[r], (int) k->ne[2], addr (k) + (h[r] - 1) * k->nb[2],
                      addr (v) + (h[r] - 1) * v->nb[2], 0, 0, scale,
                      dfl_vk_buffer_address (s->scratch), addr (out) + at);
  }
  g_rec_mutex_unlock (&s->lock);
  return ok;
}

static gboolean
vk_row_conv (DflDevice *dev, const DflTensor *x, const DflTensor *base, const DflTensor *dyn,
             DflTensor *y, GError **error)
{
  int kernel = DFL_ROWS (base), groups = DFL_COLS (dyn) / kernel;

  RECORD (dev, dfl_vk_row_conv (stream, addr (x), DFL_ROWS (x), DFL_COLS (x),
                                DFL_COLS (x) / groups, kernel, addr (base), addr (dyn),
                                DFL_LD (dyn), addr (y)));
  return TRUE;
}

/* The element-wise kernels count in 32 bits. */
static gboolean
elements_within (DflDevice *dev, DflOp op, gint64 n, GError **error)
{
  if (n >= G_MAXUINT32) {
    dfl_op_refuse (error, dev, op, "%" G_GINT64_FORMAT " elements are too many", n);
    return FALSE;
  }
  return TRUE;
}

static gboolean
vk_silu_mul (DflDevice *dev, DflTensor *gate, const DflTensor *up, GError **error)
{
  gint64 n = dfl_tensor_n_elements (gate);

  if (!elements_within (dev, DFL_OP_SILU_MUL, n, error))
    return FALSE;
  RECORD (dev, dfl_vk_silu_mul (stream, addr (gate), addr (up), n));
  return TRUE;
}

static gboolean
vk_add (DflDevice *dev, DflTensor *x, const DflTensor *y, GError **error)
{
  gint64 n = dfl_tensor_n_elements (x);

  if (!elements_within (dev, DFL_OP_ADD, n, error))
    return FALSE;
  RECORD (dev, dfl_vk_add (stream, addr (x), addr (y), n));
  return TRUE;
}

static gboolean
vk_embed (DflDevice *dev, const DflTensor *table, const DflTensor *ids, DflTensor *out,
          GError **error)
{
  const int32_t *id = dfl_tensor_data (ids);
  int dim = DFL_COLS (table);

  if (!dfl_op_ids_within (dev, DFL_OP_EMBED, "ids", id, ids->ne[0], table->ne[1], error))
    return FALSE;
  /* a block of one row is the anchor's alone */
  RECORD (dev, for (gint64 i = 0; i < ids->ne[0]; i++)
                 dfl_vk_embed_block (stream, addr (table), table->dtype, dim, 1, id[i], 0,
                                     addr (out) + i * out->nb[1]));
  return TRUE;
}

static gboolean
vk_top_k (DflDevice *dev, const DflTensor *x, DflTensor *values, DflTensor *indices,
          GError **error)
{
  if (DFL_ROWS (x) > TOP_K_ROWS_MAX) {
    dfl_op_refuse (error, dev, DFL_OP_TOP_K, "%d rows are above %d", DFL_ROWS (x),
                   TOP_K_ROWS_MAX);
    return FALSE;
  }
  RECORD (dev, dfl_vk_top_k (stream, addr (x), DFL_ROWS (x), DFL_COLS (x), DFL_LD (x),
                             DFL_COLS (values), addr (values), addr (indices)));
  return TRUE;
}

static gboolean
vk_argmax (DflDevice *dev, const DflTensor *x, DflTensor *out, GError **error)
{
  RECORD (dev, dfl_vk_argmax (stream, addr (x), DFL_ROWS (x), DFL_COLS (x), DFL_LD (x),
                              addr (out)));
  return TRUE;
}

static gboolean
vk_select_rescore (DflDevice *dev, const DflTensor *cand, const DflTensor *cand_logit,
                   const DflTensor *hp, const DflTensor *pred_book, const DflTensor *succ_book,
                   DflTensor *chosen, gint32 anchor, GError **error)
{
  VkState *s = STATE (dev);
  int rows = DFL_ROWS (cand), k = DFL_COLS (cand);
  gboolean ok;

  if (k > RESCORE_K_MAX) {
    dfl_op_refuse (error, dev, DFL_OP_SELECT_RESCORE, "k %d is above %d", k, RESCORE_K_MAX);
    return FALSE;
  }
  if ((addr (pred_book) | addr (succ_book)) % 4) {
    dfl_op_refuse (error, dev, DFL_OP_SELECT_RESCORE, "codebooks at offsets %" G_GSIZE_FORMAT
                   " and %" G_GSIZE_FORMAT " are not 4-byte aligned", pred_book->offset,
                   succ_book->offset);
    return FALSE;
  }
  if (rows == 0)
    return TRUE;
  g_rec_mutex_lock (&s->lock);
  /* the kernel writes the chosen ids, then each row's first candidate */
  ok = room (dev, &s->scratch, sizeof (int32_t) * 2 * rows, DFL_VK_MEMORY_DEVICE, FALSE, error);
  if (ok) {
    dfl_vk_select_rescore (s->stream, addr (cand_logit), addr (cand), rows, k, addr (hp),
                           DFL_COLS (hp), addr (pred_book), addr (succ_book), anchor,
                           dfl_vk_buffer_address (s->scratch));
    dfl_vk_copy (s->stream, chosen->handle, chosen->offset, s->scratch, 0,
                 sizeof (int32_t) * rows);
  }
  g_rec_mutex_unlock (&s->lock);
  return ok;
}

static gboolean
vk_copy_rows (DflDevice *dev, const DflTensor *src, const DflTensor *row0, DflTensor *dst,
              GError **error)
{
  gint64 first = *(const gint64 *) dfl_tensor_data (row0);

  if (!dfl_op_start_within (dev, DFL_OP_COPY_ROWS, "start row", first, src->ne[1], dst->ne[1],
                            error))
    return FALSE;
  RECORD (dev, dfl_vk_copy (stream, dst->handle, dst->offset + first * dst->nb[1], src->handle,
                            src->offset, dfl_tensor_bytes (src)));
  return TRUE;
}

static gboolean
vk_sync (DflDevice *dev, GError **error)
{
  return vk_flush (dev, error);
}

static const DflBackendOps dfl_backend_vulkan_ops = {
  .caps = vk_caps,
  .init = vk_init,
  .fini = vk_fini,
  .flush = vk_flush,
  .matmul = vk_matmul,
  .rmsnorm = vk_rmsnorm,
  .rope = vk_rope,
  .attention = vk_attention,
  .row_conv = vk_row_conv,
  .silu_mul = vk_silu_mul,
  .add = vk_add,
  .embed = vk_embed,
  .top_k = vk_top_k,
  .argmax = vk_argmax,
  .select_rescore = vk_select_rescore,
  .copy_rows = vk_copy_rows,
  .sync = vk_sync,
};

/* --- the device: whole device-local buffers, offsets into them --- */

static gboolean
vk_open (int index, gpointer *native, GError **error)
{
  return (*native = dfl_vk_device_open (index, DFL_VK_DEVICE_DEFAULT, error)) != NULL;
}

static gpointer
vk_ref (gpointer native)
{
  return dfl_vk_device_ref (native);
}

static void
vk_close (gpointer native)
{
  dfl_vk_device_unref (native);
}

static char *
vk_describe (gpointer native)
{
  return g_strdup_printf ("Vulkan: %s", dfl_vk_device_describe (native));
}

static gpointer
vk_alloc (gpointer native, gsize bytes, GError **error)
{
  return dfl_vk_buffer_new (native, bytes, DFL_VK_MEMORY_DEVICE, error);
}

static void
vk_free (gpointer native, gpointer handle)
{
  dfl_vk_buffer_free (handle);
}

static gboolean
vk_upload (gpointer native, gpointer handle, gsize offset, const void *src, gsize bytes,
           GError **error)
{
  return dfl_vk_upload (native, handle, offset, src, bytes, error);
}

static gboolean
vk_download (gpointer native, gpointer handle, gsize offset, void *dst, gsize bytes,
             GError **error)
{
  return dfl_vk_download (native, dst, handle, offset, bytes, error);
}

const DflBackendDeviceOps dfl_backend_vulkan = {
  "vulkan", TRUE, vk_open, vk_ref, vk_close, vk_describe, vk_alloc, vk_free, vk_upload,
  vk_download, &dfl_backend_vulkan_ops,
};
