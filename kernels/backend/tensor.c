/* gst-dflash — tensor views (dfl-backend.h). */
#include "dfl-backend.h"

/* Blocks of quantized types are not split: dimension 0 of such a tensor
 * steps a block at a time (nb[0] the block's bytes, as ggml has it), and
 * a row is dfl_dtype_row_bytes long (0 where it is not whole blocks). */
static gsize
element_stride (DflDtype dtype)
{
  return dfl_dtype_is_quantized (dtype) ? dfl_dtype_block_bytes (dtype) : dfl_dtype_size (dtype);
}

DflTensor
dfl_tensor_2d (DflDevice *device, gpointer handle, gsize offset, DflDtype dtype, gint64 rows,
               gint64 cols)
{
  DflTensor t = { device, handle, offset, dtype, { cols, rows, 1, 1 }, { 0 } };
  int i;

  t.nb[0] = element_stride (dtype);
  t.nb[1] = dfl_dtype_row_bytes (dtype, cols);
  for (i = 2; i < DFL_TENSOR_DIMS; i++)
    t.nb[i] = t.nb[i - 1] * (gsize) t.ne[i - 1];
  return t;
}

gint64
dfl_tensor_n_elements (const DflTensor *t)
{
  gint64 n = 1;
  int i;

  for (i = 0; i < DFL_TENSOR_DIMS; i++)
    n *= t->ne[i];
  return n;
}

gboolean
dfl_tensor_is_contiguous (const DflTensor *t)
{
  int i;

  if (t->nb[0] != element_stride (t->dtype))
    return FALSE;
  if (t->ne[1] > 1 && t->nb[1] != dfl_dtype_row_bytes (t->dtype, t->ne[0]))
    return FALSE;
  for (i = 2; i < DFL_TENSOR_DIMS; i++)
    if (t->ne[i] > 1 && t->nb[i] != t->nb[i - 1] * (gsize) t->ne[i - 1])
      return FALSE;
  return TRUE;
}

gsize
dfl_tensor_bytes (const DflTensor *t)
{
  gsize bytes = dfl_dtype_size (t->dtype);
  int i = 0;

  /* a quantized row: its whole blocks */
  if (dfl_dtype_is_quantized (t->dtype)) {
    bytes = dfl_dtype_row_bytes (t->dtype, t->ne[0]);
    i = 1;
  }
  /* the last element's byte past the first, plus one element */
  for (; i < DFL_TENSOR_DIMS; i++)
    if (t->ne[i] > 0)
      bytes += (gsize) (t->ne[i] - 1) * t->nb[i];
  return dfl_tensor_n_elements (t) ? bytes : 0;
}

gpointer
dfl_tensor_data (const DflTensor *t)
{
  if (t->device && dfl_device_backend (t->device) == DFL_BACKEND_VULKAN)
    return NULL;
  return (char *) t->handle + t->offset;
}
