/* gst-dflash — CPU kernels: norms, rope, activations, element conversions.
 *
 * Products are in matmul.c; the element-wise loops here are cheap next to
 * them and stay simple.
 */
#include "dfl-kernels.h"

#include <math.h>
#include <string.h>
#include <omp.h>

void
dfl_rmsnorm_to (float *dst, const float *src, int rows, int dim, const float *w, float eps)
{
  for (int r = 0; r < rows; r++) {
    const float *x = src + (size_t) r * dim;
    float *y = dst + (size_t) r * dim;
    double ss = 0.0;
    float s;
    for (int i = 0; i < dim; i++)
      ss += (double) x[i] * x[i];
    s = 1.0f / sqrtf ((float) (ss / dim) + eps);
    for (int i = 0; i < dim; i++)
      y[i] = x[i] * s * w[i];
  }
}

void
dfl_rmsnorm (float *x, int rows, int dim, const float *w, float eps)
{
  dfl_rmsnorm_to (x, x, rows, dim, w, eps);
}

void
dfl_rope_inv_freq (float *inv_freq, int head_dim, double theta)
{
  for (int i = 0; i < head_dim / 2; i++)
    inv_freq[i] = (float) pow (theta, -(2.0 * i) / head_dim);
}

/* One row of `heads` heads rotated to position p. */
static void
rope_row (float *x, int heads, int head_dim, const float *inv_freq, float p)
{
  int half = head_dim / 2;
  float cs[half], sn[half];

  /* The angle is formed in float as the checkpoints' own code does (the
   * product position × inv_freq in f32), so positions far out agree. */
  for (int i = 0; i < half; i++) {
    float a = p * inv_freq[i];
    cs[i] = cosf (a);
    sn[i] = sinf (a);
  }
  for (int h = 0; h < heads; h++) {
    float *lo = x + (size_t) h * head_dim;
    float *hi = lo + half;
    for (int i = 0; i < half; i++) {
      float a = lo[i], b = hi[i];
      lo[i] = a * cs[i] - b * sn[i];
      hi[i] = b * cs[i] + a * sn[i];
    }
  }
}

void
dfl_rope (float *x, int rows, int heads, int head_dim, const float *inv_freq, int pos0)
{
  for (int r = 0; r < rows; r++)
    rope_row (x + (size_t) r * heads * head_dim, heads, head_dim, inv_freq,
              (float) (pos0 + r));
}

void
dfl_rope_at (float *x, int rows, int heads, int head_dim, const float *inv_freq,
             const int64_t *pos)
{
  /* the int position dfl_rope would have rounded to float */
  for (int r = 0; r < rows; r++)
    rope_row (x + (size_t) r * heads * head_dim, heads, head_dim, inv_freq,
              (float) (int) pos[r]);
}

void
dfl_silu_mul (float *gate, const float *up, size_t n)
{
  for (size_t i = 0; i < n; i++) {
    float g = gate[i];
    gate[i] = g / (1.0f + expf (-g)) * up[i];
  }
}

void
dfl_add (float *x, const float *y, size_t n)
{
  for (size_t i = 0; i < n; i++)
    x[i] += y[i];
}

void
dfl_softmax (float *x, int n)
{
  float top = -INFINITY, sum = 0.0f;

  for (int i = 0; i < n; i++)
    if (x[i] > top)
      top = x[i];
  if (top == -INFINITY) {
    memset (x, 0, sizeof (float) * n);
    return;
  }
  for (int i = 0; i < n; i++) {
    x[i] = expf (x[i] - top);
    sum += x[i];
  }
  for (int i = 0; i < n; i++)
    x[i] /= sum;
}

int
dfl_argmax (const float *x, int n)
{
  int best = 0;

  for (int i = 1; i < n; i++)
    if (x[i] > x[best])
      best = i;
  return best;
}

void
dfl_bf16_to_f32_n (const uint16_t *src, float *dst, size_t n)
{
  for (size_t i = 0; i < n; i++) {
    uint32_t bits = (uint32_t) src[i] << 16;
    memcpy (dst + i, &bits, 4);
  }
}

void
dfl_f16_to_f32_n (const uint16_t *src, float *dst, size_t n)
{
  for (size_t i = 0; i < n; i++) {
    uint32_t h = src[i];
    uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    uint32_t bits;
    if (exp == 0) {
      if (man == 0) {
        bits = sign;
      } else {
        /* subnormal: normalise the mantissa */
        int e = -1;
        do {
          man <<= 1;
          e++;
        } while (!(man & 0x400));
        bits = sign | ((uint32_t) (127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
      }
    } else if (exp == 0x1f) {
      bits = sign | 0x7f800000u | (man << 13);
    } else {
      bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    memcpy (dst + i, &bits, 4);
  }
}

int
dfl_kernels_threads (void)
{
  return omp_get_max_threads ();
}

void
dfl_f32_to_bf16_n (const float *src, uint16_t *dst, size_t n)
{
  for (size_t i = 0; i < n; i++) {
    uint32_t bits;
    memcpy (&bits, src + i, 4);
    if ((bits & 0x7fffffffu) > 0x7f800000u)
      /* NaN: quiet, its top payload bits kept */
      dst[i] = (uint16_t) ((bits >> 16) | 0x40u);
    else
      /* half an ulp, and the last kept bit for the tie: a carry into the
       * exponent (even to infinity) is right */
      dst[i] = (uint16_t) ((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
  }
}

void
dfl_f32_to_f16_n (const float *src, uint16_t *dst, size_t n)
{
  /* IEEE round to nearest even, subnormals and NaNs included (dfl-dtype.c:
   * _Float16 is not there on every compiler for x86) */
  for (size_t i = 0; i < n; i++)
    dst[i] = dfl_f32_to_f16 (src[i]);
}

void
dfl_embed_rows (const void *table, DflDtype type, int dim, const int32_t *ids, int n, float *out)
{
  size_t qrow = dfl_dtype_row_bytes (type, dim);

  for (int i = 0; i < n; i++) {
    size_t row = (size_t) ids[i] * dim;
    float *o = out + (size_t) i * dim;
    if (dfl_dtype_is_quantized (type))
      dfl_dequantize_row (type, (const char *) table + (size_t) ids[i] * qrow, o, dim);
    else if (type == DFL_DTYPE_F16)
      dfl_f16_to_f32_n ((const uint16_t *) table + row, o, dim);
    else if (type == DFL_DTYPE_BF16)
      dfl_bf16_to_f32_n ((const uint16_t *) table + row, o, dim);
    else
      memcpy (o, (const float *) table + row, sizeof (float) * dim);
  }
}
