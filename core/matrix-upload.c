/* gst-dflash — a host weight matrix onto a device in a float type it
 * multiplies (matrix-upload.h).
 *
 * Why F32 loses nothing of a block-quantized matrix: every value is a
 * product of the block's F16 scale (11 significant bits) and small
 * integers, and an integer below 2^k in magnitude has at most k
 * significant bits (a power of two, one): Q8_0 d · q with |q| ≤ 128 (at
 * most 11 + 7 bits), Q4_0 d · (q − 8) with |q − 8| ≤ 8 (11 + 3), Q6_K
 * (d · scale) · (q − 32) with |scale| ≤ 128 and |q − 32| ≤ 32 (11 + 7 + 5)
 * — each product fits F32's 24-bit significand, so each step is exact, and
 * an F16 scale times such integers is far inside F32's exponent range.
 * Q4_K's value (d · sc) · q − dmin · m (sc, m < 64, q < 16) has exact
 * products too (11 + 6 + 4 bits); the subtraction is rounded in F32, and
 * that F32 result is the value the type defines (ggml computes it in F32
 * in this order, as dfl_dequantize_row does), so the F32 row is, bit for
 * bit, the row every reader of the file reads.
 */
#include "matrix-upload.h"

#include <string.h>

#include "dfl-error.h"
#include "dfl-kernels.h"

/* Elements converted on the host per upload (at least one row). */
#define CONVERT_CHUNK (1 << 20)

DflDtype
dfl_matrix_device_type (DflDevice *device, DflDtype stored)
{
  /* a matrix may be the embedding (gathered) and the head (multiplied) at
   * once, as a tied one is */
  if (!dfl_dtype_is_quantized (stored)
      || (dfl_device_supports (device, DFL_OP_MATMUL, stored)
          && dfl_device_supports (device, DFL_OP_EMBED, stored)))
    return stored;
  return DFL_DTYPE_F32;
}

/* `n` rows of `cols` elements of `stored` at `src` as F32 into `dst`. */
static gboolean
rows_to_f32 (DflDtype stored, const guint8 *src, gsize row_bytes, gint64 n, gint64 cols,
             float *dst, guint16 *half, const char *name, GError **error)
{
  gsize count = (gsize) n * cols;

  switch (stored) {
  case DFL_DTYPE_F32:
    memcpy (dst, src, count * sizeof (float));
    return TRUE;
  case DFL_DTYPE_F16:
  case DFL_DTYPE_BF16:
    /* a mapping need not be 2-byte aligned: the bytes first */
    memcpy (half, src, count * 2);
    if (stored == DFL_DTYPE_BF16)
      dfl_bf16_to_f32_n (half, dst, count);
    else
      dfl_f16_to_f32_n (half, dst, count);
    return TRUE;
  default:
    break;
  }
  for (gint64 r = 0; r < n; r++)
    if (!dfl_dequantize_row (stored, src + (gsize) r * row_bytes, dst + (gsize) r * cols,
                             cols)) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                   "%s is %s of %" G_GINT64_FORMAT " columns, which is not dequantized on the "
                   "host (no dequantizer of the type, or rows that are not whole blocks)",
                   name, dfl_dtype_name (stored), cols);
      return FALSE;
    }
  return TRUE;
}

gboolean
dfl_matrix_upload (DflDevice *device, gpointer handle, gsize offset, DflDtype stored,
                   const void *data, gint64 rows, gint64 cols, DflDtype as, const char *name,
                   GError **error)
{
  gsize row_bytes = dfl_dtype_row_bytes (stored, cols), out_size = dfl_dtype_size (as);
  gint64 chunk;
  g_autofree float *f = NULL;
  g_autofree guint16 *half = NULL;

  g_return_val_if_fail (as == stored || dfl_dtype_is_float (as), FALSE);
  if (row_bytes == 0 && rows > 0 && cols > 0) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "%s: a row of %" G_GINT64_FORMAT " %s values is not a whole number of blocks",
                 name, cols, dfl_dtype_name (stored));
    return FALSE;
  }
  if (as == stored)
    return dfl_device_upload (device, handle, offset, data, (gsize) rows * row_bytes, error);
  chunk = CLAMP (CONVERT_CHUNK / MAX (cols, 1), 1, MAX (rows, 1));
  f = g_new (float, (gsize) chunk * cols);
  half = g_new (guint16, (gsize) chunk * cols);
  for (gint64 r0 = 0; r0 < rows; r0 += chunk) {
    gint64 n = MIN (chunk, rows - r0);
    gsize count = (gsize) n * cols;
    const void *out = f;

    if (!rows_to_f32 (stored, (const guint8 *) data + (gsize) r0 * row_bytes, row_bytes, n,
                      cols, f, half, name, error))
      return FALSE;
    if (as != DFL_DTYPE_F32) {
      for (gsize i = 0; i < count; i++)
        half[i] = as == DFL_DTYPE_BF16 ? dfl_f32_to_bf16 (f[i]) : dfl_f32_to_f16 (f[i]);
      out = half;
    }
    if (!dfl_device_upload (device, handle, offset + (gsize) r0 * cols * out_size, out,
                            count * out_size, error))
      return FALSE;
  }
  return TRUE;
}
