/* gst-dflash — CPU kernels: norms, rope, activations, element conversions.
 *
 * Products are in matmul.c; the element-wise loops here are cheap next to
 * them and stay simple.
 */
#include "dfl-kernels.h"
#include "scan-above.h"

#include <math.h>
#include <stdint.h>
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

/* e^x for SiLU and for a row's softmax, the same operations on every path
 * so that each gives the same bits. Why not libm's expf: a call an
 * element, on one lane, was 13% of a quantized target's verification pass
 * (SiLU over 9 rows × 2048 × 18 layers); eight lanes at once take a few
 * cycles an element.
 *
 * x = n·ln2 + r with n = round(x·log2 e) and r in [−ln2/2, ln2/2] (ln2 in
 * two parts so that r is exact); e^r = 1 + r + r²·p(r), p of degree 5
 * (the classic minimax coefficients for this interval: within 2 ulp of
 * e^r); then ·2^n, built in the exponent's bits. Below x = −87, x is
 * taken as −87 (1 + e^x is 1 in float either way); above 88, e^x is +inf
 * (SiLU's g / (1 + e^−g) then −0, within 6e−37 of its value). */
#define EXP_LO (-87.0f)
#define EXP_HI 88.0f
#define LOG2E 1.44269504088896341f
#define LN2_HI 0.693359375f
#define LN2_LO (-2.12194440e-4f)
static const float exp_poly[6] = {
  1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
  4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f,
};

static inline float
exp_one (float x)
{
  float n, r, z, p, y;
  uint32_t bits;

  /* a NaN stays NaN (and never reaches the integer conversion below) */
  if (isnan (x))
    return x;
  if (x > EXP_HI)
    return INFINITY;
  x = x < EXP_LO ? EXP_LO : x;
  n = nearbyintf (x * LOG2E);
  r = fmaf (n, -LN2_HI, x);
  r = fmaf (n, -LN2_LO, r);
  z = r * r;
  p = exp_poly[0];
  for (int i = 1; i < 6; i++)
    p = fmaf (p, r, exp_poly[i]);
  y = fmaf (p, z, r) + 1.0f;
  /* n is an integer in [−126, 127]: 2^n a normal float */
  bits = (uint32_t) ((int32_t) n + 127) << 23;
  memcpy (&z, &bits, sizeof z);
  return y * z;
}

static void
silu_mul_plain (float *gate, const float *up, size_t n)
{
  for (size_t i = 0; i < n; i++) {
    float g = gate[i];
    gate[i] = g / (1.0f + exp_one (-g)) * up[i];
  }
}

#if defined(__x86_64__)
#include <immintrin.h>
#define AVX2 __attribute__ ((target ("avx2,fma")))

/* exp_one on eight lanes: the same operations in the same order */
AVX2 static inline __m256
exp8 (__m256 x)
{
  __m256 n, r, z, p, y;
  __m256 over = _mm256_cmp_ps (x, _mm256_set1_ps (EXP_HI), _CMP_GT_OQ);

  /* the bounds' operands ordered so that a NaN stays NaN, as in the
   * comparisons above */
  x = _mm256_min_ps (_mm256_set1_ps (EXP_HI),
                     _mm256_max_ps (_mm256_set1_ps (EXP_LO), x));
  n = _mm256_round_ps (_mm256_mul_ps (x, _mm256_set1_ps (LOG2E)),
                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  r = _mm256_fmadd_ps (n, _mm256_set1_ps (-LN2_HI), x);
  r = _mm256_fmadd_ps (n, _mm256_set1_ps (-LN2_LO), r);
  z = _mm256_mul_ps (r, r);
  p = _mm256_set1_ps (exp_poly[0]);
  for (int i = 1; i < 6; i++)
    p = _mm256_fmadd_ps (p, r, _mm256_set1_ps (exp_poly[i]));
  y = _mm256_add_ps (_mm256_fmadd_ps (p, z, r), _mm256_set1_ps (1.0f));
  z = _mm256_castsi256_ps (_mm256_slli_epi32 (
      _mm256_add_epi32 (_mm256_cvtps_epi32 (n), _mm256_set1_epi32 (127)), 23));
  return _mm256_blendv_ps (_mm256_mul_ps (y, z), _mm256_set1_ps (INFINITY), over);
}

AVX2 static void
silu_mul_avx2 (float *gate, const float *up, size_t n)
{
  size_t i = 0;

  for (; i + 8 <= n; i += 8) {
    __m256 g = _mm256_loadu_ps (gate + i);
    __m256 e = exp8 (_mm256_xor_ps (g, _mm256_set1_ps (-0.0f)));
    __m256 s = _mm256_div_ps (g, _mm256_add_ps (_mm256_set1_ps (1.0f), e));
    _mm256_storeu_ps (gate + i, _mm256_mul_ps (s, _mm256_loadu_ps (up + i)));
  }
  silu_mul_plain (gate + i, up + i, n - i);
}
#endif

/* A row's softmax: its largest value, then the sum of e^(x − it) in eight
 * lanes, lane j mod 8 taking x[j] in order, the lanes summed by this tree
 * (quant-matmul.c's), on every path. */
static inline float
lanes_tree8 (const float l[8])
{
  float a0 = l[0] + l[4], a1 = l[1] + l[5], a2 = l[2] + l[6], a3 = l[3] + l[7];
  return (a0 + a2) + (a1 + a3);
}

static float
row_max (const float *x, int n)
{
  float top = x[0];

  for (int i = 1; i < n; i++)
    top = x[i] > top ? x[i] : top;
  return top;
}

static void
exp_sums_plain (const float *x, int i0, int n, float top, float lane[8])
{
  for (int i = i0; i < n; i++)
    lane[i & 7] += exp_one (x[i] - top);
}

#if defined(__x86_64__)
AVX2 static float
softmax_at_avx2 (const float *x, int n, int i)
{
  int n8 = n & ~7;
  __m256 m = _mm256_set1_ps (x[0]), acc = _mm256_setzero_ps (), t;
  float lane[8], top;

  for (int j = 0; j < n8; j += 8)
    m = _mm256_max_ps (m, _mm256_loadu_ps (x + j));
  t = _mm256_max_ps (m, _mm256_permute2f128_ps (m, m, 1));
  t = _mm256_max_ps (t, _mm256_shuffle_ps (t, t, 0x4e));
  t = _mm256_max_ps (t, _mm256_shuffle_ps (t, t, 0xb1));
  top = _mm256_cvtss_f32 (t);
  for (int j = n8; j < n; j++)
    top = x[j] > top ? x[j] : top;
  for (int j = 0; j < n8; j += 8)
    acc = _mm256_add_ps (acc, exp8 (_mm256_sub_ps (_mm256_loadu_ps (x + j),
                                                   _mm256_set1_ps (top))));
  _mm256_storeu_ps (lane, acc);
  exp_sums_plain (x, n8, n, top, lane);
  return exp_one (x[i] - top) / lanes_tree8 (lane);
}
#endif

float
dfl_softmax_at (const float *x, int n, int i)
{
  float lane[8] = { 0 }, top;

#if defined(__x86_64__)
  if (dfl_kernels_isa () != DFL_KERNELS_GENERIC)
    return softmax_at_avx2 (x, n, i);
#endif
  top = row_max (x, n);
  exp_sums_plain (x, 0, n, top, lane);
  return exp_one (x[i] - top) / lanes_tree8 (lane);
}

void
dfl_silu_mul (float *gate, const float *up, size_t n)
{
#if defined(__x86_64__)
  if (dfl_kernels_isa () != DFL_KERNELS_GENERIC) {
    silu_mul_avx2 (gate, up, n);
    return;
  }
#endif
  silu_mul_plain (gate, up, n);
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

/* The first of the largest in x[from, to), from `best` on. */
static int
argmax_from (const float *x, int from, int to, int best)
{
  for (int i = from; i < to; i++)
    if (x[i] > x[best])
      best = i;
  return best;
}

#if defined(__x86_64__)
/* Only the stretches of eight that hold a value above the best so far
 * (scan-above.h; a NaN first stays the answer, as in the loop). */
AVX2 static int
argmax_avx2 (const float *x, int n)
{
  int best = 0, i = 1;

  while ((i = dfl_scan_above (x, i, n, x[best])) + 8 <= n) {
    best = argmax_from (x, i, i + 8, best);
    i += 8;
  }
  return argmax_from (x, i, n, best);
}
#endif

int
dfl_argmax (const float *x, int n)
{
#if defined(__x86_64__)
  if (dfl_kernels_isa () != DFL_KERNELS_GENERIC)
    return argmax_avx2 (x, n);
#endif
  return argmax_from (x, 1, n, 0);
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
