/* gst-dflash — the operations' dispatch (dfl-backend.h): each dfl_op_*
 * checks the device's capability and its tensors' types, shapes and places
 * once for every back end, then calls the device's table (ops-*.c).
 */
#include "backend-private.h"

#include <stdarg.h>

static const char *const op_names[DFL_N_OPS] = {
  [DFL_OP_MATMUL] = "matmul",
  [DFL_OP_RMSNORM] = "rmsnorm",
  [DFL_OP_ROPE] = "rope",
  [DFL_OP_ATTENTION] = "attention",
  [DFL_OP_ROW_CONV] = "row_conv",
  [DFL_OP_SILU_MUL] = "silu_mul",
  [DFL_OP_ADD] = "add",
  [DFL_OP_EMBED] = "embed",
  [DFL_OP_ARGMAX] = "argmax",
  [DFL_OP_TOP_K] = "top_k",
  [DFL_OP_SELECT_RESCORE] = "select_rescore",
  [DFL_OP_COPY_ROWS] = "copy_rows",
  [DFL_OP_CONVERT] = "convert",
  [DFL_OP_SYNC] = "sync",
  [DFL_OP_CAPTURE_BEGIN] = "capture_begin",
  [DFL_OP_CAPTURE_END] = "capture_end",
  [DFL_OP_GRAPH_LAUNCH] = "graph_launch",
  [DFL_OP_FILL_RANDOM] = "fill_random",
  [DFL_OP_COPY_ROWS_TABLE] = "copy_rows_table",
  [DFL_OP_ATTENTION_TABLE] = "attention_table",
  [DFL_OP_NORM_ROPE] = "norm_rope",
};

const char *
dfl_op_name (DflOp op)
{
  return (guint) op < DFL_N_OPS ? op_names[op] : "invalid";
}

DflOpCaps
dfl_device_op_caps (DflDevice *dev, DflOp op, DflDtype dtype)
{
  if ((guint) op >= DFL_N_OPS)
    return DFL_OP_CAP_NONE;
  return dev->backend->ops->caps (dev, op, dtype);
}

gboolean
dfl_device_supports (DflDevice *dev, DflOp op, DflDtype dtype)
{
  return (dfl_device_op_caps (dev, op, dtype) & DFL_OP_CAP_RUNS) != 0;
}

gboolean
dfl_op_takes_dtype (DflOp op, DflDtype dtype)
{
  switch (op) {
  case DFL_OP_MATMUL:
  case DFL_OP_EMBED:
  case DFL_OP_FILL_RANDOM:
    return dfl_dtype_is_float (dtype);
  case DFL_OP_CONVERT:
    return dtype == DFL_DTYPE_F16 || dtype == DFL_DTYPE_BF16;
  case DFL_OP_SELECT_RESCORE:
    return dtype == DFL_DTYPE_F16;
  case DFL_OP_SYNC:
  case DFL_OP_CAPTURE_BEGIN:
  case DFL_OP_CAPTURE_END:
  case DFL_OP_GRAPH_LAUNCH:
    return TRUE;
  default:
    return dtype == DFL_DTYPE_F32;
  }
}

gboolean
dfl_op_has_indices (DflOp op)
{
  return op == DFL_OP_ROPE || op == DFL_OP_NORM_ROPE || op == DFL_OP_ATTENTION || op == DFL_OP_EMBED
         || op == DFL_OP_COPY_ROWS || op == DFL_OP_COPY_ROWS_TABLE
         || op == DFL_OP_ATTENTION_TABLE;
}

static void
set_op_error (GError **error, DflError code, DflDevice *dev, DflOp op, const char *format,
              va_list args)
{
  g_autofree char *why = g_strdup_vprintf (format, args);

  g_set_error (error, DFL_ERROR, code, "%s on %s: %s", dfl_op_name (op),
               dfl_backend_name (dev->id), why);
}

void
dfl_op_refuse (GError **error, DflDevice *dev, DflOp op, const char *format, ...)
{
  va_list args;

  va_start (args, format);
  set_op_error (error, DFL_ERROR_UNSUPPORTED, dev, op, format, args);
  va_end (args);
}

gboolean
dfl_op_ids_within (DflDevice *dev, DflOp op, const char *what, const int32_t *ids, gint64 n,
                   gint64 limit, GError **error)
{
  for (gint64 i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= limit) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID, "%s on %s: %s[%" G_GINT64_FORMAT "] = %d "
                   "is outside [0, %" G_GINT64_FORMAT ")", dfl_op_name (op),
                   dfl_backend_name (dev->id), what, i, ids[i], limit);
      return FALSE;
    }
  return TRUE;
}

gboolean
dfl_op_ranges_within (DflDevice *dev, const int32_t *lo, const int32_t *hi, int rows,
                      gint64 keys, GError **error)
{
  /* an empty range may be anywhere: it reads nothing */
  for (int r = 0; r < rows; r++)
    if (lo[r] < hi[r] && (lo[r] < 0 || hi[r] > keys)) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID, "attention on %s: row %d's keys [%d, %d) "
                   "are outside the %" G_GINT64_FORMAT " there are", dfl_backend_name (dev->id),
                   r, lo[r], hi[r], keys);
      return FALSE;
    }
  return TRUE;
}

gboolean
dfl_op_start_within (DflDevice *dev, DflOp op, const char *what, gint64 start, gint64 count,
                     gint64 limit, GError **error)
{
  if (start < 0 || start > limit - count) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID, "%s on %s: %s %" G_GINT64_FORMAT " with %"
                 G_GINT64_FORMAT " rows after it is outside [0, %" G_GINT64_FORMAT ")",
                 dfl_op_name (op), dfl_backend_name (dev->id), what, start, count, limit);
    return FALSE;
  }
  return TRUE;
}

/* --- the checks --- */

/* One op's checks: the first failure is the error; later checks of a
 * failed call do nothing, so a dispatch reads as a list of conditions. */
typedef struct {
  DflDevice *dev;
  DflOp op;
  DflOpCaps caps;
  GError **error;
  gboolean ok;
} Check;

static G_GNUC_PRINTF (3, 4) gboolean
fail (Check *c, DflError code, const char *format, ...)
{
  va_list args;

  if (!c->ok)
    return FALSE;
  va_start (args, format);
  set_op_error (c->error, code, c->dev, c->op, format, args);
  va_end (args);
  c->ok = FALSE;
  return FALSE;
}

/* The device runs `op` of `dtype`. */
static Check
check_op (DflDevice *dev, DflOp op, DflDtype dtype, GError **error)
{
  Check c = { dev, op, dfl_device_op_caps (dev, op, dtype), error, TRUE };

  if (!(c.caps & DFL_OP_CAP_RUNS))
    fail (&c, DFL_ERROR_UNSUPPORTED, "%s is not supported by %s", dfl_dtype_name (dtype),
          dfl_device_describe (dev));
  return c;
}

static gboolean
is_host (const DflTensor *t)
{
  return !t->device || t->device->id == DFL_BACKEND_CPU;
}

/* Where the op can read t: on its device, or in host memory where the
 * device is the CPU or t holds indices the back end reads on the host. */
static gboolean
reachable (Check *c, const char *name, const DflTensor *t, gboolean index)
{
  if (is_host (t) && (c->dev->id == DFL_BACKEND_CPU
                      || (index && (c->caps & DFL_OP_CAP_HOST_INDICES))))
    return TRUE;
  if (index && (c->caps & DFL_OP_CAP_HOST_INDICES))
    return fail (c, DFL_ERROR_MISMATCH, "%s must be host memory (this back end reads its "
                 "indices on the host)", name);
  if (!t->device || t->device->id != c->dev->id || t->device->native != c->dev->native)
    return fail (c, DFL_ERROR_MISMATCH, "%s is not on %s but on %s", name,
                 dfl_device_describe (c->dev),
                 t->device ? dfl_device_describe (t->device) : "the host");
  return TRUE;
}

/* t is `dtype` with at most `dims` dimensions (the others 1), each within
 * an int, its elements packed and its memory where the op reads it. */
static gboolean
tensor (Check *c, const char *name, const DflTensor *t, DflDtype dtype, int dims,
        gboolean index)
{
  if (!c->ok)
    return FALSE;
  if (!t)
    return fail (c, DFL_ERROR_INVALID, "%s is missing", name);
  if (t->dtype != dtype)
    return fail (c, DFL_ERROR_MISMATCH, "%s is %s, must be %s", name, dfl_dtype_name (t->dtype),
                 dfl_dtype_name (dtype));
  for (int i = 0; i < DFL_TENSOR_DIMS; i++)
    if (t->ne[i] < 0 || t->ne[i] > G_MAXINT || (i >= dims && t->ne[i] != 1))
      return fail (c, DFL_ERROR_MISMATCH, "%s is %" G_GINT64_FORMAT "×%" G_GINT64_FORMAT "×%"
                   G_GINT64_FORMAT "×%" G_GINT64_FORMAT ", must have at most %d dimensions",
                   name, t->ne[0], t->ne[1], t->ne[2], t->ne[3], dims);
  if (dfl_dtype_is_quantized (dtype)) {
    /* a row of blocks: whole blocks, packed (nb[0] a block's bytes) */
    if (t->ne[0] % (gint64) dfl_dtype_block_elems (dtype))
      return fail (c, DFL_ERROR_UNSUPPORTED, "%s's rows of %" G_GINT64_FORMAT " elements are not "
                   "whole %s blocks of %" G_GSIZE_FORMAT, name, t->ne[0], dfl_dtype_name (dtype),
                   dfl_dtype_block_elems (dtype));
    if (t->nb[0] != dfl_dtype_block_bytes (dtype))
      return fail (c, DFL_ERROR_MISMATCH, "%s's %s blocks are %" G_GSIZE_FORMAT " bytes apart, "
                   "must be packed (%" G_GSIZE_FORMAT ")", name, dfl_dtype_name (dtype), t->nb[0],
                   dfl_dtype_block_bytes (dtype));
  } else if (t->nb[0] != dfl_dtype_size (dtype))
    return fail (c, DFL_ERROR_MISMATCH, "%s's elements are %" G_GSIZE_FORMAT " bytes apart, "
                 "must be packed", name, t->nb[0]);
  return reachable (c, name, t, index);
}

static gboolean
packed (Check *c, const char *name, const DflTensor *t)
{
  if (c->ok && !dfl_tensor_is_contiguous (t))
    return fail (c, DFL_ERROR_MISMATCH, "%s's rows must be packed", name);
  return c->ok;
}

/* Rows of whole elements, none overlapping the next. */
static gboolean
row_stride (Check *c, const char *name, const DflTensor *t)
{
  if (c->ok && t->ne[1] > 1
      && (t->nb[1] % t->nb[0] || t->nb[1] < t->nb[0] * (gsize) t->ne[0]
          || t->nb[1] / t->nb[0] > G_MAXINT))
    return fail (c, DFL_ERROR_MISMATCH, "%s's row stride of %" G_GSIZE_FORMAT " bytes is not "
                 "whole elements past its row", name, t->nb[1]);
  return c->ok;
}

/* Two sizes that must agree. */
static gboolean
same (Check *c, const char *what_a, gint64 a, const char *what_b, gint64 b)
{
  if (c->ok && a != b)
    return fail (c, DFL_ERROR_MISMATCH, "%s is %" G_GINT64_FORMAT " but %s is %" G_GINT64_FORMAT,
                 what_a, a, what_b, b);
  return c->ok;
}

static gboolean
same_shape (Check *c, const char *a_name, const DflTensor *a, const char *b_name,
            const DflTensor *b)
{
  for (int i = 0; c->ok && i < DFL_TENSOR_DIMS; i++)
    if (a->ne[i] != b->ne[i])
      fail (c, DFL_ERROR_MISMATCH, "%s and %s differ in dimension %d (%" G_GINT64_FORMAT " and %"
            G_GINT64_FORMAT ")", a_name, b_name, i, a->ne[i], b->ne[i]);
  return c->ok;
}

static gboolean
is_float (Check *c, const char *name, const DflTensor *t)
{
  if (c->ok && !dfl_dtype_is_float (t->dtype))
    return fail (c, DFL_ERROR_UNSUPPORTED, "%s of %s is not a floating type",
                 name, dfl_dtype_name (t->dtype));
  return c->ok;
}

/* --- the operations --- */

/* The checks of a product y (+)= x · wᵀ, its errors naming w and y as
 * `wn` and `yn` (w[1], y[1] in a group) and their sizes as `ws`, `ys`
 * (w's, w[1]'s). */
static gboolean
check_matmul (Check *c, const char *wn, const char *ws, const char *yn, const char *ys,
              const DflTensor *w, const DflTensor *x, const DflTensor *y)
{
  if (tensor (c, wn, w, w ? w->dtype : DFL_DTYPE_F32, 2, FALSE) && packed (c, wn, w)
      && tensor (c, "x", x, DFL_DTYPE_F32, 2, FALSE) && row_stride (c, "x", x)
      && tensor (c, yn, y, DFL_DTYPE_F32, 2, FALSE) && row_stride (c, yn, y)
      && same (c, "x's columns", x->ne[0], ws, w->ne[0])
      && same (c, "x's rows", x->ne[1], ys, y->ne[1])
      && y->ne[0] > w->ne[1])
    fail (c, DFL_ERROR_MISMATCH, "%s has %" G_GINT64_FORMAT " columns, %s only %"
          G_GINT64_FORMAT " rows", yn, y->ne[0], wn, w->ne[1]);
  return c->ok;
}

gboolean
dfl_op_matmul (DflDevice *dev, const DflTensor *w, const DflTensor *x, DflTensor *y,
               gboolean accumulate, GError **error)
{
  Check c;

  g_return_val_if_fail (w != NULL, FALSE);
  c = check_op (dev, DFL_OP_MATMUL, w->dtype, error);
  return check_matmul (&c, "w", "w's", "y", "y's", w, x, y)
         && dev->backend->ops->matmul (dev, w, x, y, accumulate, error);
}

gboolean
dfl_op_matmul_group (DflDevice *dev, int n, const DflTensor *const *w, const DflTensor *x,
                     DflTensor *const *y, gboolean accumulate, GError **error)
{
  g_return_val_if_fail (n >= 1 && n <= DFL_OP_GROUP_MAX && w != NULL && y != NULL, FALSE);
  for (int i = 0; i < n; i++) {
    /* each product as dfl_op_matmul checks it, by its weights' type */
    Check c = check_op (dev, DFL_OP_MATMUL, w[i] ? w[i]->dtype : DFL_DTYPE_F32, error);
    char wn[16], ws[16], yn[16], ys[16];

    g_snprintf (wn, sizeof wn, "w[%d]", i);
    g_snprintf (ws, sizeof ws, "w[%d]'s", i);
    g_snprintf (yn, sizeof yn, "y[%d]", i);
    g_snprintf (ys, sizeof ys, "y[%d]'s", i);
    if (!check_matmul (&c, wn, ws, yn, ys, w[i], x, y[i]))
      return FALSE;
  }
  if (dev->backend->ops->matmul_group)
    return dev->backend->ops->matmul_group (dev, n, w, x, y, accumulate, error);
  for (int i = 0; i < n; i++)
    if (!dev->backend->ops->matmul (dev, w[i], x, y[i], accumulate, error))
      return FALSE;
  return TRUE;
}

gboolean
dfl_op_rmsnorm (DflDevice *dev, const DflTensor *x, const DflTensor *w, DflTensor *y, float eps,
                GError **error)
{
  Check c = check_op (dev, DFL_OP_RMSNORM, DFL_DTYPE_F32, error);

  if (!(tensor (&c, "x", x, DFL_DTYPE_F32, 2, FALSE) && packed (&c, "x", x)
        && tensor (&c, "y", y, DFL_DTYPE_F32, 2, FALSE) && packed (&c, "y", y)
        && same_shape (&c, "x", x, "y", y)
        && tensor (&c, "w", w, DFL_DTYPE_F32, 1, FALSE)
        && same (&c, "w's size", w->ne[0], "x's columns", x->ne[0])))
    return FALSE;
  return dev->backend->ops->rmsnorm (dev, x, w, y, eps, error);
}

/* rope's x, inv_freq and pos (norm_rope's too) */
static gboolean
rope_args (Check *c, const DflTensor *x, const DflTensor *inv_freq, const DflTensor *pos)
{
  if (tensor (c, "x", x, DFL_DTYPE_F32, 3, FALSE) && packed (c, "x", x) && x->ne[0] % 2)
    fail (c, DFL_ERROR_MISMATCH, "head_dim %" G_GINT64_FORMAT " is odd", x->ne[0]);
  if (!(tensor (c, "inv_freq", inv_freq, DFL_DTYPE_F32, 1, FALSE)
        && same (c, "inv_freq's size", inv_freq->ne[0], "half of head_dim", x->ne[0] / 2)
        && tensor (c, "pos", pos, DFL_DTYPE_I64, 1, TRUE)))
    return FALSE;
  if (pos->ne[0] != 1 && pos->ne[0] != x->ne[2])
    return fail (c, DFL_ERROR_MISMATCH, "pos has %" G_GINT64_FORMAT " positions: one start "
                 "position or one a row (%" G_GINT64_FORMAT ") is needed", pos->ne[0], x->ne[2]);
  return TRUE;
}

gboolean
dfl_op_rope (DflDevice *dev, DflTensor *x, const DflTensor *inv_freq, const DflTensor *pos,
             GError **error)
{
  Check c = check_op (dev, DFL_OP_ROPE, DFL_DTYPE_F32, error);

  if (!rope_args (&c, x, inv_freq, pos))
    return FALSE;
  return dev->backend->ops->rope (dev, x, inv_freq, pos, error);
}

gboolean
dfl_op_norm_rope (DflDevice *dev, DflTensor *x, const DflTensor *w, const DflTensor *inv_freq,
                  const DflTensor *pos, float eps, GError **error)
{
  Check c = check_op (dev, DFL_OP_NORM_ROPE, DFL_DTYPE_F32, error);
  DflTensor heads;

  if (!(rope_args (&c, x, inv_freq, pos) && tensor (&c, "w", w, DFL_DTYPE_F32, 1, FALSE)
        && same (&c, "w's size", w->ne[0], "head_dim", x->ne[0])))
    return FALSE;
  if (dev->backend->ops->norm_rope)
    return dev->backend->ops->norm_rope (dev, x, w, inv_freq, pos, eps, error);
  /* x is packed: its heads are rows of head_dim one after the other */
  heads = dfl_tensor_2d (x->device, x->handle, x->offset, DFL_DTYPE_F32, x->ne[1] * x->ne[2],
                         x->ne[0]);
  return dfl_op_rmsnorm (dev, &heads, w, &heads, eps, error)
         && dfl_op_rope (dev, x, inv_freq, pos, error);
}

/* The type of a KV cache an op reads or writes: its tensor's where it is
 * F32 or BF16 (whether the device runs it, check_op says), else F32, which
 * the tensor checks then refuse by name. */
static DflDtype
kv_type_of (const DflTensor *t)
{
  return t && t->dtype == DFL_DTYPE_BF16 ? DFL_DTYPE_BF16 : DFL_DTYPE_F32;
}

/* attention's q, out, one key set k, v and the row ranges lo, hi (and
 * which, for a table): the shapes that must agree. */
static gboolean
check_attention_keys (Check *c, const DflTensor *q, DflDtype kv_type, const char *k_name,
                      const DflTensor *k, const char *v_name, const DflTensor *v)
{
  g_autofree char *k_dim = g_strdup_printf ("%s's head_dim", k_name);
  g_autofree char *k_head = g_strdup_printf ("%s's head stride", k_name);
  g_autofree char *k_key = g_strdup_printf ("%s's key stride", k_name);
  g_autofree char *v_key = g_strdup_printf ("%s's", v_name);

  /* keys and values of the op's KV type (F32, or BF16 where the device
   * runs it: check_op) */
  if (!(tensor (c, k_name, k, kv_type, 3, FALSE)
        && tensor (c, v_name, v, kv_type, 3, FALSE) && same_shape (c, k_name, k, v_name, v)
        && same (c, k_dim, k->ne[0], "q's", q->ne[0])
        && same (c, k_head, k->nb[1], "head_dim elements", k->ne[0] * dfl_dtype_size (kv_type))
        && same (c, k_key, k->nb[2], v_key, v->nb[2])))
    return FALSE;
  if (k->ne[1] < 1 || q->ne[1] % k->ne[1])
    return fail (c, DFL_ERROR_MISMATCH, "%" G_GINT64_FORMAT " query heads are not groups of %"
                 G_GINT64_FORMAT " kv heads", q->ne[1], k->ne[1]);
  if (k->nb[2] % dfl_dtype_size (kv_type) || k->nb[2] < k->nb[1] * (gsize) k->ne[1])
    return fail (c, DFL_ERROR_MISMATCH, "%s of %" G_GSIZE_FORMAT " bytes is not whole elements "
                 "past its heads", k_key, k->nb[2]);
  return TRUE;
}

static gboolean
check_attention_rows (Check *c, const DflTensor *q, const DflTensor *out, const DflTensor *lo,
                      const DflTensor *hi)
{
  return tensor (c, "q", q, DFL_DTYPE_F32, 3, FALSE) && packed (c, "q", q)
         && tensor (c, "out", out, DFL_DTYPE_F32, 3, FALSE) && packed (c, "out", out)
         && same_shape (c, "q", q, "out", out)
         && tensor (c, "lo", lo, DFL_DTYPE_I32, 1, TRUE) && tensor (c, "hi", hi, DFL_DTYPE_I32, 1, TRUE)
         && same (c, "lo's size", lo->ne[0], "q's rows", q->ne[2])
         && same (c, "hi's size", hi->ne[0], "q's rows", q->ne[2]);
}

gboolean
dfl_op_attention (DflDevice *dev, const DflTensor *q, const DflTensor *k, const DflTensor *v,
                  const DflTensor *lo, const DflTensor *hi, DflTensor *out, float scale,
                  GError **error)
{
  DflDtype kv_type = kv_type_of (k);
  Check c = check_op (dev, DFL_OP_ATTENTION, kv_type, error);

  if (!(check_attention_rows (&c, q, out, lo, hi)
        && check_attention_keys (&c, q, kv_type, "k", k, "v", v)))
    return FALSE;
  return dev->backend->ops->attention (dev, q, k, v, lo, hi, out, scale, error);
}

/* A table of n tensors: 1 … DFL_OP_TABLE_MAX of them. */
static gboolean
table_size (Check *c, const char *name, const DflTensor *table, int n)
{
  if (c->ok && (!table || n < 1 || n > DFL_OP_TABLE_MAX))
    return fail (c, DFL_ERROR_INVALID, "%s holds %d tensors: 1 to %d are taken", name, n,
                 DFL_OP_TABLE_MAX);
  return c->ok;
}

gboolean
dfl_op_attention_table (DflDevice *dev, const DflTensor *q, const DflTensor *ks,
                        const DflTensor *vs, int n_kv, const DflTensor *which,
                        const DflTensor *lo, const DflTensor *hi, DflTensor *out, float scale,
                        GError **error)
{
  DflDtype kv_type = kv_type_of (n_kv > 0 ? ks : NULL);
  Check c = check_op (dev, DFL_OP_ATTENTION_TABLE, kv_type, error);

  if (!(check_attention_rows (&c, q, out, lo, hi) && table_size (&c, "ks", ks, n_kv)
        && table_size (&c, "vs", vs, n_kv)
        && tensor (&c, "which", which, DFL_DTYPE_I32, 1, TRUE)
        && same (&c, "which's size", which->ne[0], "q's rows", q->ne[2])))
    return FALSE;
  for (int i = 0; c.ok && i < n_kv; i++) {
    g_autofree char *k_name = g_strdup_printf ("ks[%d]", i);
    g_autofree char *v_name = g_strdup_printf ("vs[%d]", i);
    g_autofree char *heads = g_strdup_printf ("ks[%d]'s kv heads", i);
    g_autofree char *stride = g_strdup_printf ("ks[%d]'s key stride", i);
    /* one head layout and key stride for all: a launch reads them alike */
    if (check_attention_keys (&c, q, kv_type, k_name, &ks[i], v_name, &vs[i])
        && same (&c, heads, ks[i].ne[1], "ks[0]'s", ks[0].ne[1]))
      same (&c, stride, ks[i].nb[2], "ks[0]'s", ks[0].nb[2]);
  }
  if (!c.ok)
    return FALSE;
  return dev->backend->ops->attention_table (dev, q, ks, vs, n_kv, which, lo, hi, out, scale,
                                             error);
}

gboolean
dfl_op_row_conv (DflDevice *dev, const DflTensor *x, const DflTensor *base, const DflTensor *dyn,
                 DflTensor *y, GError **error)
{
  Check c = check_op (dev, DFL_OP_ROW_CONV, DFL_DTYPE_F32, error);

  if (!(tensor (&c, "x", x, DFL_DTYPE_F32, 2, FALSE) && packed (&c, "x", x)
        && tensor (&c, "y", y, DFL_DTYPE_F32, 2, FALSE) && packed (&c, "y", y)
        && same_shape (&c, "x", x, "y", y)
        && tensor (&c, "base", base, DFL_DTYPE_F32, 2, FALSE) && packed (&c, "base", base)
        && same (&c, "base's columns", base->ne[0], "x's", x->ne[0])
        && tensor (&c, "dyn", dyn, DFL_DTYPE_F32, 2, FALSE) && row_stride (&c, "dyn", dyn)
        && same (&c, "dyn's rows", dyn->ne[1], "x's", x->ne[1])))
    return FALSE;
  if (c.ok && (base->ne[1] < 1 || dyn->ne[0] % base->ne[1] || dyn->ne[0] == 0
               || x->ne[0] % (dyn->ne[0] / base->ne[1])))
    fail (&c, DFL_ERROR_MISMATCH, "dyn's %" G_GINT64_FORMAT " columns are not kernel %"
          G_GINT64_FORMAT " × groups dividing dim %" G_GINT64_FORMAT, dyn->ne[0], base->ne[1],
          x->ne[0]);
  if (c.ok && x->handle == y->handle && x->offset == y->offset && x->ne[1] > 0)
    fail (&c, DFL_ERROR_INVALID, "y must not be x");
  return c.ok && dev->backend->ops->row_conv (dev, x, base, dyn, y, error);
}

/* Two tensors of F32 of the same packed shape. */
static gboolean
check_pair (Check *c, const char *a_name, const DflTensor *a, const char *b_name,
            const DflTensor *b)
{
  return tensor (c, a_name, a, DFL_DTYPE_F32, DFL_TENSOR_DIMS, FALSE) && packed (c, a_name, a)
         && tensor (c, b_name, b, DFL_DTYPE_F32, DFL_TENSOR_DIMS, FALSE) && packed (c, b_name, b)
         && same_shape (c, a_name, a, b_name, b);
}

gboolean
dfl_op_silu_mul (DflDevice *dev, DflTensor *gate, const DflTensor *up, GError **error)
{
  Check c = check_op (dev, DFL_OP_SILU_MUL, DFL_DTYPE_F32, error);

  if (!check_pair (&c, "gate", gate, "up", up))
    return FALSE;
  return dev->backend->ops->silu_mul (dev, gate, up, error);
}

gboolean
dfl_op_add (DflDevice *dev, DflTensor *x, const DflTensor *y, GError **error)
{
  Check c = check_op (dev, DFL_OP_ADD, DFL_DTYPE_F32, error);

  if (!check_pair (&c, "x", x, "y", y))
    return FALSE;
  return dev->backend->ops->add (dev, x, y, error);
}

gboolean
dfl_op_embed (DflDevice *dev, const DflTensor *table, const DflTensor *ids, DflTensor *out,
              GError **error)
{
  Check c;

  g_return_val_if_fail (table != NULL, FALSE);
  c = check_op (dev, DFL_OP_EMBED, table->dtype, error);

  if (!((dfl_dtype_is_quantized (table->dtype) || is_float (&c, "table", table))
        && tensor (&c, "table", table, table->dtype, 2, FALSE) && packed (&c, "table", table)
        && tensor (&c, "ids", ids, DFL_DTYPE_I32, 1, TRUE)
        && tensor (&c, "out", out, DFL_DTYPE_F32, 2, FALSE) && packed (&c, "out", out)
        && same (&c, "out's rows", out->ne[1], "the ids", ids->ne[0])
        && same (&c, "out's columns", out->ne[0], "table's", table->ne[0])))
    return FALSE;
  return dev->backend->ops->embed (dev, table, ids, out, error);
}

gboolean
dfl_op_argmax (DflDevice *dev, const DflTensor *x, DflTensor *out, GError **error)
{
  Check c = check_op (dev, DFL_OP_ARGMAX, DFL_DTYPE_F32, error);

  if (tensor (&c, "x", x, DFL_DTYPE_F32, 2, FALSE) && row_stride (&c, "x", x) && x->ne[0] < 1)
    fail (&c, DFL_ERROR_MISMATCH, "x's rows are empty");
  if (!(tensor (&c, "out", out, DFL_DTYPE_I32, 1, FALSE)
        && same (&c, "out's size", out->ne[0], "x's rows", x->ne[1])))
    return FALSE;
  return dev->backend->ops->argmax (dev, x, out, error);
}

gboolean
dfl_op_top_k (DflDevice *dev, const DflTensor *x, DflTensor *values, DflTensor *indices,
              GError **error)
{
  Check c = check_op (dev, DFL_OP_TOP_K, DFL_DTYPE_F32, error);

  if (!(tensor (&c, "x", x, DFL_DTYPE_F32, 2, FALSE) && row_stride (&c, "x", x)
        && tensor (&c, "values", values, DFL_DTYPE_F32, 2, FALSE) && packed (&c, "values", values)
        && tensor (&c, "indices", indices, DFL_DTYPE_I32, 2, FALSE)
        && packed (&c, "indices", indices)
        && same (&c, "values' rows", values->ne[1], "x's", x->ne[1])
        && same (&c, "indices' rows", indices->ne[1], "x's", x->ne[1])
        && same (&c, "indices' k", indices->ne[0], "values'", values->ne[0])))
    return FALSE;
  if (c.ok && values->ne[0] < 1)
    fail (&c, DFL_ERROR_INVALID, "k is 0");
  return c.ok && dev->backend->ops->top_k (dev, x, values, indices, error);
}

gboolean
dfl_op_select_rescore (DflDevice *dev, const DflTensor *cand, const DflTensor *cand_logit,
                       const DflTensor *hp, const DflTensor *pred_book,
                       const DflTensor *succ_book, DflTensor *chosen, gint32 anchor,
                       GError **error)
{
  Check c;

  g_return_val_if_fail (pred_book != NULL, FALSE);
  c = check_op (dev, DFL_OP_SELECT_RESCORE, pred_book->dtype, error);

  if (!(tensor (&c, "cand", cand, DFL_DTYPE_I32, 2, FALSE) && packed (&c, "cand", cand)
        && tensor (&c, "cand_logit", cand_logit, DFL_DTYPE_F32, 2, FALSE)
        && packed (&c, "cand_logit", cand_logit)
        && same_shape (&c, "cand", cand, "cand_logit", cand_logit)
        && tensor (&c, "hp", hp, DFL_DTYPE_F32, 2, FALSE) && packed (&c, "hp", hp)
        && same (&c, "hp's rows", hp->ne[1], "cand's", cand->ne[1])
        && tensor (&c, "pred_book", pred_book, DFL_DTYPE_F16, 2, FALSE)
        && packed (&c, "pred_book", pred_book)
        && tensor (&c, "succ_book", succ_book, DFL_DTYPE_F16, 2, FALSE)
        && packed (&c, "succ_book", succ_book)
        && same_shape (&c, "pred_book", pred_book, "succ_book", succ_book)
        && same (&c, "the codebooks' rank", pred_book->ne[0], "hp's", hp->ne[0])
        && tensor (&c, "chosen", chosen, DFL_DTYPE_I32, 1, FALSE)
        && same (&c, "chosen's size", chosen->ne[0], "cand's rows", cand->ne[1])))
    return FALSE;
  if (c.ok && (anchor < 0 || anchor >= pred_book->ne[1]))
    fail (&c, DFL_ERROR_INVALID, "anchor %d is not a token of the %" G_GINT64_FORMAT
          " the codebooks hold", anchor, pred_book->ne[1]);
  if (c.ok && cand->ne[0] < 1)
    fail (&c, DFL_ERROR_INVALID, "k is 0");
  return c.ok && dev->backend->ops->select_rescore (dev, cand, cand_logit, hp, pred_book,
                                                          succ_book, chosen, anchor, error);
}

gboolean
dfl_op_copy_rows (DflDevice *dev, const DflTensor *src, const DflTensor *row0, DflTensor *dst,
                  GError **error)
{
  /* F32 rows into F32 or a BF16 cache, or BF16 rows into BF16 (a cache
   * grown) */
  DflDtype kv_type = kv_type_of (dst);
  Check c = check_op (dev, DFL_OP_COPY_ROWS, kv_type, error);

  if (!(tensor (&c, "src", src, src && src->dtype == kv_type ? kv_type : DFL_DTYPE_F32, 2, FALSE)
        && packed (&c, "src", src)
        && tensor (&c, "dst", dst, kv_type, 2, FALSE) && packed (&c, "dst", dst)
        && same (&c, "dst's columns", dst->ne[0], "src's", src->ne[0])
        && tensor (&c, "row0", row0, DFL_DTYPE_I64, 1, TRUE)
        && same (&c, "row0's size", row0->ne[0], "one start row", 1)))
    return FALSE;
  return dev->backend->ops->copy_rows (dev, src, row0, dst, error);
}

gboolean
dfl_op_copy_rows_table (DflDevice *dev, const DflTensor *src, const DflTensor *dsts, int n_dst,
                        const DflTensor *which, const DflTensor *row, GError **error)
{
  DflDtype kv_type = kv_type_of (n_dst > 0 ? dsts : NULL);
  Check c = check_op (dev, DFL_OP_COPY_ROWS_TABLE, kv_type, error);

  if (!(tensor (&c, "src", src, DFL_DTYPE_F32, 2, FALSE) && packed (&c, "src", src)
        && table_size (&c, "dsts", dsts, n_dst)
        && tensor (&c, "which", which, DFL_DTYPE_I32, 1, TRUE)
        && same (&c, "which's size", which->ne[0], "src's rows", src->ne[1])
        && tensor (&c, "row", row, DFL_DTYPE_I64, 1, TRUE)
        && same (&c, "row's size", row->ne[0], "src's rows", src->ne[1])))
    return FALSE;
  for (int i = 0; c.ok && i < n_dst; i++) {
    g_autofree char *name = g_strdup_printf ("dsts[%d]", i);
    g_autofree char *cols = g_strdup_printf ("dsts[%d]'s columns", i);
    if (tensor (&c, name, &dsts[i], kv_type, 2, FALSE) && packed (&c, name, &dsts[i]))
      same (&c, cols, dsts[i].ne[0], "src's", src->ne[0]);
  }
  if (!c.ok)
    return FALSE;
  return dev->backend->ops->copy_rows_table (dev, src, dsts, n_dst, which, row, error);
}

gboolean
dfl_op_fill_random (DflDevice *dev, DflTensor *t, guint64 seed, float scale, GError **error)
{
  Check c;

  g_return_val_if_fail (t != NULL, FALSE);
  c = check_op (dev, DFL_OP_FILL_RANDOM, t->dtype, error);
  if (!(tensor (&c, "t", t, t->dtype, 4, FALSE) && packed (&c, "t", t)))
    return FALSE;
  if (!(scale >= 0.0f && scale < G_MAXFLOAT)) {
    fail (&c, DFL_ERROR_INVALID, "scale %g is not a finite value ≥ 0", scale);
    return FALSE;
  }
  return dev->backend->ops->fill_random (dev, t, seed, scale, error);
}

gboolean
dfl_op_convert (DflDevice *dev, const DflTensor *src, DflTensor *dst, GError **error)
{
  gboolean widen;
  const DflTensor *half;
  Check c;

  g_return_val_if_fail (src != NULL && dst != NULL, FALSE);
  widen = src->dtype != DFL_DTYPE_F32;
  half = widen ? src : dst;
  c = check_op (dev, DFL_OP_CONVERT, half->dtype, error);
  if (c.ok && (half->dtype == DFL_DTYPE_F32 || !dfl_dtype_is_float (half->dtype)
               || (widen && dst->dtype != DFL_DTYPE_F32)))
    fail (&c, DFL_ERROR_UNSUPPORTED, "from %s to %s: one side must be F32, the other F16 or "
          "BF16", dfl_dtype_name (src->dtype), dfl_dtype_name (dst->dtype));
  if (!(tensor (&c, "src", src, src->dtype, DFL_TENSOR_DIMS, FALSE) && packed (&c, "src", src)
        && tensor (&c, "dst", dst, dst->dtype, DFL_TENSOR_DIMS, FALSE) && packed (&c, "dst", dst)
        && same (&c, "dst's elements", dfl_tensor_n_elements (dst), "src's",
             dfl_tensor_n_elements (src))))
    return FALSE;
  return dev->backend->ops->convert (dev, src, dst, error);
}

gboolean
dfl_op_sync (DflDevice *dev, GError **error)
{
  Check c = check_op (dev, DFL_OP_SYNC, DFL_DTYPE_F32, error);

  return c.ok && dev->backend->ops->sync (dev, error);
}

/* --- graphs --- */

gboolean
dfl_op_capture_begin (DflDevice *dev, GError **error)
{
  Check c = check_op (dev, DFL_OP_CAPTURE_BEGIN, DFL_DTYPE_F32, error);

  return c.ok && dev->backend->ops->capture_begin (dev, error);
}

DflGraph *
dfl_op_capture_end (DflDevice *dev, GError **error)
{
  Check c = check_op (dev, DFL_OP_CAPTURE_END, DFL_DTYPE_F32, error);
  DflGraph *graph;
  gpointer native;

  if (!c.ok || !(native = dev->backend->ops->capture_end (dev, error)))
    return NULL;
  graph = g_new0 (DflGraph, 1);
  graph->device = dfl_device_ref (dev);
  graph->native = native;
  return graph;
}

gboolean
dfl_op_graph_launch (DflDevice *dev, DflGraph *graph, GError **error)
{
  Check c = check_op (dev, DFL_OP_GRAPH_LAUNCH, DFL_DTYPE_F32, error);

  if (c.ok && graph->device->native != dev->native)
    fail (&c, DFL_ERROR_MISMATCH, "the graph was captured on %s",
          dfl_device_describe (graph->device));
  return c.ok && dev->backend->ops->graph_launch (dev, graph->native, error);
}

void
dfl_graph_free (DflGraph *graph)
{
  if (!graph)
    return;
  graph->device->backend->ops->graph_free (graph->device, graph->native);
  dfl_device_unref (graph->device);
  g_free (graph);
}
