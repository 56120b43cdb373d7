/* gst-dflash — y = x · Wᵀ over weights as a checkpoint stores them (F32,
 * F16 or BF16), batch-invariant.
 *
 * Why not SGEMM: a speculative round verifies a block of rows in one pass,
 * plain decoding feeds one row at a time, and the two must pick the same
 * tokens. A BLAS picks a different kernel (and so a different summation
 * order) for 1 row than for 16, so a near-tie could flip. Here every output
 * element is one dot product whose order of operations depends only on the
 * length of the row: 8 lanes accumulate by FMA over the row in steps of 8,
 * the tail is added in order, and the lanes are summed in a fixed tree. How
 * many rows come in, how they are tiled, and which thread computes an
 * element change nothing.
 *
 * Why the stored dtype: decode is bound by reading the weights, and BF16 is
 * half the bytes of F32. Weights are read straight from the mapped file.
 */
#include "dfl-kernels.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define DFL_X86 1
#endif

/* ---- the reference order, in plain C (machines without AVX2 + FMA) ---- */

static inline float
load_scalar (const void *w, DflWeightType type, size_t i)
{
  switch (type) {
    case DFL_WEIGHT_F32:
      return ((const float *) w)[i];
    case DFL_WEIGHT_BF16: {
      uint32_t bits = (uint32_t) ((const uint16_t *) w)[i] << 16;
      float f;
      memcpy (&f, &bits, 4);
      return f;
    }
    case DFL_WEIGHT_F16:
    default: {
      float f;
      dfl_f16_to_f32_n ((const uint16_t *) w + i, &f, 1);
      return f;
    }
  }
}

/* the lanes' fixed summation tree: ((0+4)+(2+6)) + ((1+5)+(3+7)) */
static inline float
lanes_sum (const float l[8])
{
  float a0 = l[0] + l[4], a1 = l[1] + l[5], a2 = l[2] + l[6], a3 = l[3] + l[7];
  return (a0 + a2) + (a1 + a3);
}

static float
dot_scalar (const float *x, const void *w, DflWeightType type, int n)
{
  float lane[8] = { 0 }, s;
  int i = 0;

  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; j++)
      lane[j] = fmaf (x[i + j], load_scalar (w, type, i + j), lane[j]);
  s = lanes_sum (lane);
  for (; i < n; i++)
    s = fmaf (x[i], load_scalar (w, type, i), s);
  return s;
}

static void
tile_scalar (const float *x, int rows, int ldx, const void *w, DflWeightType type,
             size_t wstride, int in, int o0, int o1, float *y, int ldy, int accumulate)
{
  size_t esz = type == DFL_WEIGHT_F32 ? 4 : 2;

  for (int o = o0; o < o1; o++) {
    const void *wo = (const char *) w + (size_t) o * wstride * esz;
    for (int r = 0; r < rows; r++) {
      float v = dot_scalar (x + (size_t) r * ldx, wo, type, in);
      y[(size_t) r * ldy + o] = accumulate ? y[(size_t) r * ldy + o] + v : v;
    }
  }
}

#ifdef DFL_X86
/* ---- AVX2 + FMA: the same order, 8 lanes a register ---- */

#define AVX2 __attribute__ ((target ("avx2,fma,f16c")))

AVX2 static inline __m256
load8 (const void *w, DflWeightType type, size_t i)
{
  if (type == DFL_WEIGHT_F32)
    return _mm256_loadu_ps ((const float *) w + i);
  if (type == DFL_WEIGHT_BF16) {
    __m128i h = _mm_loadu_si128 ((const __m128i *) ((const uint16_t *) w + i));
    return _mm256_castsi256_ps (_mm256_slli_epi32 (_mm256_cvtepu16_epi32 (h), 16));
  }
  return _mm256_cvtph_ps (_mm_loadu_si128 ((const __m128i *) ((const uint16_t *) w + i)));
}

AVX2 static inline float
hsum (__m256 v)
{
  float l[8];
  _mm256_storeu_ps (l, v);
  return lanes_sum (l);
}

AVX2 static inline float
finish (__m256 acc, const float *x, const void *w, DflWeightType type, int i, int n)
{
  float s = hsum (acc);
  for (; i < n; i++)
    s = fmaf (x[i], load_scalar (w, type, i), s);
  return s;
}

/* One row against eight outputs: eight independent FMA chains hide the
 * FMA latency that a single chain would wait on (decode is one row). */
AVX2 static void
row_by_8 (const float *xr, const void *w, DflWeightType type, size_t wrow, int in, float *yr,
          int accumulate)
{
  int in8 = in & ~7;
  __m256 a[8];
  float v;

#pragma GCC unroll 8
  for (int j = 0; j < 8; j++)
    a[j] = _mm256_setzero_ps ();
  for (int i = 0; i < in8; i += 8) {
    __m256 c = _mm256_loadu_ps (xr + i);
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
      a[j] = _mm256_fmadd_ps (c, load8 ((const char *) w + j * wrow, type, i), a[j]);
  }
  for (int j = 0; j < 8; j++) {
    v = finish (a[j], xr, (const char *) w + j * wrow, type, in8, in);
    yr[j] = accumulate ? yr[j] + v : v;
  }
}

AVX2 static void
row_by_1 (const float *xr, const void *w, DflWeightType type, int in, float *yr, int accumulate)
{
  int in8 = in & ~7;
  __m256 a = _mm256_setzero_ps ();
  float v;

  for (int i = 0; i < in8; i += 8)
    a = _mm256_fmadd_ps (_mm256_loadu_ps (xr + i), load8 (w, type, i), a);
  v = finish (a, xr, w, type, in8, in);
  *yr = accumulate ? *yr + v : v;
}

/* Four rows × two outputs at a time: each weight vector is converted once
 * and serves four rows; eight accumulators stay in registers. Rows left over
 * go one at a time against eight outputs. */
AVX2 static void
tile_avx2 (const float *x, int rows, int ldx, const void *w, DflWeightType type,
           size_t wstride, int in, int o0, int o1, float *y, int ldy, int accumulate)
{
  size_t esz = type == DFL_WEIGHT_F32 ? 4 : 2, wrow = wstride * esz;
  int in8 = in & ~7, rows4 = rows & ~3;

  for (int o = o0; o < o1 && rows4 > 0; o += 2) {
    int two = o + 1 < o1;
    const void *w0 = (const char *) w + (size_t) o * wrow;
    const void *w1 = two ? (const char *) w0 + wrow : w0;
    for (int r = 0; r < rows4; r += 4) {
      const float *x0 = x + (size_t) r * ldx, *x1 = x0 + ldx, *x2 = x1 + ldx, *x3 = x2 + ldx;
      __m256 a00 = _mm256_setzero_ps (), a10 = a00, a20 = a00, a30 = a00;
      __m256 a01 = a00, a11 = a00, a21 = a00, a31 = a00;
      float v[8];
      for (int i = 0; i < in8; i += 8) {
        __m256 b0 = load8 (w0, type, i), b1 = load8 (w1, type, i);
        __m256 c0 = _mm256_loadu_ps (x0 + i), c1 = _mm256_loadu_ps (x1 + i);
        __m256 c2 = _mm256_loadu_ps (x2 + i), c3 = _mm256_loadu_ps (x3 + i);
        a00 = _mm256_fmadd_ps (c0, b0, a00);
        a10 = _mm256_fmadd_ps (c1, b0, a10);
        a20 = _mm256_fmadd_ps (c2, b0, a20);
        a30 = _mm256_fmadd_ps (c3, b0, a30);
        a01 = _mm256_fmadd_ps (c0, b1, a01);
        a11 = _mm256_fmadd_ps (c1, b1, a11);
        a21 = _mm256_fmadd_ps (c2, b1, a21);
        a31 = _mm256_fmadd_ps (c3, b1, a31);
      }
      v[0] = finish (a00, x0, w0, type, in8, in);
      v[1] = finish (a10, x1, w0, type, in8, in);
      v[2] = finish (a20, x2, w0, type, in8, in);
      v[3] = finish (a30, x3, w0, type, in8, in);
      v[4] = finish (a01, x0, w1, type, in8, in);
      v[5] = finish (a11, x1, w1, type, in8, in);
      v[6] = finish (a21, x2, w1, type, in8, in);
      v[7] = finish (a31, x3, w1, type, in8, in);
      for (int k = 0; k < 4; k++) {
        float *yr = y + (size_t) (r + k) * ldy + o;
        yr[0] = accumulate ? yr[0] + v[k] : v[k];
        if (two)
          yr[1] = accumulate ? yr[1] + v[4 + k] : v[4 + k];
      }
    }
  }
  for (int r = rows4; r < rows; r++) {
    const float *xr = x + (size_t) r * ldx;
    float *yr = y + (size_t) r * ldy;
    int o = o0;
    for (; o + 8 <= o1; o += 8)
      row_by_8 (xr, (const char *) w + (size_t) o * wrow, type, wrow, in, yr + o, accumulate);
    for (; o < o1; o++)
      row_by_1 (xr, (const char *) w + (size_t) o * wrow, type, in, yr + o, accumulate);
  }
}

static int generic_only;

void
dfl_kernels_set_generic (int on)
{
  generic_only = on;
}

static int
have_avx2 (void)
{
  static int known = -1;
  if (generic_only)
    return 0;
  if (known < 0) {
    __builtin_cpu_init ();
    known = __builtin_cpu_supports ("avx2") && __builtin_cpu_supports ("fma")
        && __builtin_cpu_supports ("f16c");
  }
  return known;
}
#else
void
dfl_kernels_set_generic (int on)
{
  (void) on;
}
#endif

void
dfl_matmul_w (const DflWeights *w, const float *x, int rows, int ldx,
              float *y, int ldy, int n_out, int accumulate)
{
  /* Outputs go across the threads in blocks; a block is an even number of
   * rows of W so the two-output tiles never straddle threads. */
  int block = 64;
  int n_blocks = (n_out + block - 1) / block;
  int use_avx2 = 0;

#ifdef DFL_X86
  use_avx2 = have_avx2 ();
#endif
#pragma omp parallel for schedule(static) if (n_blocks > 1 && (size_t) rows * n_out * w->cols > 32768)
  for (int b = 0; b < n_blocks; b++) {
    int o0 = b * block, o1 = o0 + block < n_out ? o0 + block : n_out;
#ifdef DFL_X86
    if (use_avx2) {
      tile_avx2 (x, rows, ldx, w->data, w->type, w->cols, w->cols, o0, o1, y, ldy, accumulate);
      continue;
    }
#endif
    tile_scalar (x, rows, ldx, w->data, w->type, w->cols, w->cols, o0, o1, y, ldy, accumulate);
  }
  (void) use_avx2;
}

size_t
dfl_weights_bytes (const DflWeights *w)
{
  return (size_t) w->rows * w->cols * (w->type == DFL_WEIGHT_F32 ? 4 : 2);
}
