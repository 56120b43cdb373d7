/* gst-dflash — grouped-query attention over a KV cache (CPU): causal, or
 * over a range of keys per query row.
 *
 * Heads are independent, so they go across the kernels' threads
 * (dfl-parallel.h); within a head the scores of all query rows against the
 * cache are one small product.
 * Each row is computed alone, in an order that depends on nothing but its
 * position, so a row's output is the same whatever rows come with it.
 *
 * Keys and values are F32, or BF16 (a cache in half the bytes, which is
 * what a decode step at long context spends its time reading). A BF16
 * element widens to F32 exactly (its bits are the upper half of F32's), so
 * the arithmetic is the same for both: only the loads differ, and the
 * attention over a BF16 cache is bitwise the attention over its values
 * widened to F32. */
#include "dfl-kernels.h"
#include "dfl-parallel.h"

#ifndef MIN
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#endif

#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The element `index` elements past `base` (keys and values F32 or BF16). */
static inline const void *
kv_at (const void *base, size_t index, bool bf16)
{
  return (const char *) base + index * (bf16 ? sizeof (uint16_t) : sizeof (float));
}

/* Element i of a key or value row, widened to F32 (exact). */
static inline float
kv_get (const void *row, int i, bool bf16)
{
  union { uint32_t u; float f; } x;

  if (!bf16)
    return ((const float *) row)[i];
  x.u = (uint32_t) ((const uint16_t *) row)[i] << 16;
  return x.f;
}

/* q · k over n: 8 lanes over steps of 8, each step one fused multiply-add
 * (fmaf: one rounding, as the vector paths' FMA and matmul.c's), the lanes
 * summed as matmul.c sums them, the tail in order. */
static inline float
dot (const float *a, const void *b, bool bf16, int n)
{
  float l[8] = { 0 }, s;
  int i = 0;

  for (; i + 8 <= n; i += 8)
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
      l[j] = fmaf (a[i + j], kv_get (b, i + j, bf16), l[j]);
  s = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
  for (; i < n; i++)
    s = fmaf (a[i], kv_get (b, i, bf16), s);
  return s;
}

/* o[d] += w · v[d]: each element on its own, one fused multiply-add (the
 * vector paths' numbers), in blocks of 8 written out so the compiler makes
 * each block one vector operation: o and v never overlap, which it could
 * not know. */
static inline void
axpy (float *restrict o, float w, const void *restrict v, bool bf16, int n)
{
  int d = 0;

  for (; d + 8 <= n; d += 8)
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
      o[d + j] = fmaf (w, kv_get (v, d + j, bf16), o[d + j]);
  for (; d < n; d++)
    o[d] = fmaf (w, kv_get (v, d, bf16), o[d]);
}

/* The scores of one query row against keys 0 … seen − 1: dot (q, k) · scale. */
static void
scores_generic (const float *qr, const void *k, size_t kstride, int seen, int head_dim,
                float scale, float *sc, bool bf16)
{
  for (int p = 0; p < seen; p++)
    sc[p] = dot (qr, kv_at (k, p * kstride, bf16), bf16, head_dim) * scale;
}

/* exp (x) for x ≤ 0 as every path computes it, bit for bit (libm's expf
 * is a call per value the vector paths cannot make): n = x·log2 e rounded
 * to nearest even, r = x − n·ln 2 in two fused steps (Cody and Waite),
 * exp (r) by its Taylor polynomial of degree 7 in Horner's fused steps
 * (|r| ≤ ln 2 / 2: under 1e-8 relative), times 2ⁿ by the exponent bits.
 * Below −87.33 (where 2ⁿ would leave the normal floats) it is 0, as it is
 * for −∞; NaN stays NaN. */
#define EXP_LOW -87.33654f
#define EXP_LOG2E 1.44269504088896341f
#define EXP_LN2_HI 0.693359375f
#define EXP_LN2_LO -2.12194440e-4f
#define EXP_C7 1.98412698e-4f        /* 1/5040 */
#define EXP_C6 1.38888889e-3f        /* 1/720 */
#define EXP_C5 8.33333333e-3f        /* 1/120 */
#define EXP_C4 4.16666667e-2f        /* 1/24 */
#define EXP_C3 1.66666667e-1f        /* 1/6 */
#define EXP_C2 0.5f

static inline float
exp_nonpos (float x)
{
  float n, r, y;
  union { float f; uint32_t u; } scale;

  if (!(x >= EXP_LOW))
    return isnan (x) ? x : 0.0f;
  n = rintf (x * EXP_LOG2E);
  r = fmaf (n, -EXP_LN2_HI, x);
  r = fmaf (n, -EXP_LN2_LO, r);
  y = fmaf (EXP_C7, r, EXP_C6);
  y = fmaf (y, r, EXP_C5);
  y = fmaf (y, r, EXP_C4);
  y = fmaf (y, r, EXP_C3);
  y = fmaf (y, r, EXP_C2);
  y = fmaf (y, r, 1.0f);
  y = fmaf (y, r, 1.0f);
  scale.u = (uint32_t) ((int) n + 127) << 23;
  return y * scale.f;
}

/* Eight lanes summed by dot's tree. */
static inline float
lanes_sum (const float *l)
{
  return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

/* The scores into softmax weights, in place: e = exp (s − max); their sum
 * over 8 lanes (e[p] into lane p mod 8, in order, for the whole eights),
 * the lanes by dot's tree, then the rest in order; each e divided by the
 * sum. */
static void
weights_generic (float *sc, int seen)
{
  float top = -INFINITY, sum, l[8] = { 0 };
  int p, whole = seen / 8 * 8;

  for (p = 0; p < seen; p++)
    if (sc[p] > top)
      top = sc[p];
  for (p = 0; p < seen; p++)
    sc[p] = exp_nonpos (sc[p] - top);
  for (p = 0; p < whole; p++)
    l[p % 8] += sc[p];
  sum = lanes_sum (l);
  for (; p < seen; p++)
    sum += sc[p];
  for (p = 0; p < seen; p++)
    sc[p] = sc[p] / sum;
}

/* out[0 … head_dim) = Σ_p w[p] · v_p, p in order, each element on its own;
 * with `carry`, the sums go on from out's values (a range of keys taken in
 * blocks gives the bits of one call over it). */
static void
weigh_generic (float *o, const float *w, const void *v, size_t kstride, int seen, int head_dim,
               bool bf16, bool carry)
{
  if (!carry)
    memset (o, 0, sizeof (float) * head_dim);
  for (int p = 0; p < seen; p++)
    axpy (o, w[p], kv_at (v, p * kstride, bf16), bf16, head_dim);
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define DFL_X86 1
/* The vector paths do, element for element, what the plain code above
 * does: each product and its sum one fused multiply-add (fmaf there), so
 * every path gives bitwise the same scores and outputs, and the attention
 * of a row stays the same whichever path and whatever rows come with it.
 * They differ in how many keys they take at once: the plain dot sums each
 * key's 8 lanes on its own, the AVX2 path 8 keys' lanes at a time in
 * registers (the same tree for each). The AVX2 path serves AVX-512
 * machines too: an AVX-512 form with two keys a register (as matmul.c's
 * tiles hold two outputs) was slower (each key pair costs a shuffle); what
 * is left of the time is the softmax's exp, computed by every path the
 * same way (exp_nonpos). */

#define AVX2_ATT __attribute__ ((target ("avx2,fma")))

/* The plain code for the vector paths' tails, kept out of them (the
 * vector functions' own code stays vector), compiled where FMA exists so
 * that fmaf is one instruction (the same bits as libm's call). */
AVX2_ATT static __attribute__ ((noinline)) float
dot_plain (const float *a, const void *b, bool bf16, int n)
{
  return dot (a, b, bf16, n);
}

AVX2_ATT static __attribute__ ((noinline)) void
axpy_plain (float *restrict o, float w, const void *restrict v, bool bf16, int n)
{
  axpy (o, w, v, bf16, n);
}

/* 8 elements of a key or value row from element i, widened to F32. */
AVX2_ATT static inline __attribute__ ((always_inline)) __m256
load8 (const void *row, size_t i, bool bf16)
{
  if (bf16)
    return _mm256_castsi256_ps (_mm256_slli_epi32 (
        _mm256_cvtepu16_epi32 (_mm_loadu_si128 ((const __m128i *) ((const uint16_t *) row + i))),
        16));
  return _mm256_loadu_ps ((const float *) row + i);
}

/* 8 keys' lanes a0 … a7 (a register each) summed by dot's tree: the keys'
 * scores, in order. */
AVX2_ATT static inline __attribute__ ((always_inline)) __m256
sums8 (const __m256 *a)
{
  __m256 b[4], c[2], d;

#pragma GCC unroll 4
  for (int k = 0; k < 4; k++)
    /* (lanes 0–3 of keys 2k, 2k + 1) + (their lanes 4–7): l[j] + l[j + 4] */
    b[k] = _mm256_add_ps (_mm256_permute2f128_ps (a[2 * k], a[2 * k + 1], 0x20),
                          _mm256_permute2f128_ps (a[2 * k], a[2 * k + 1], 0x31));
#pragma GCC unroll 2
  for (int k = 0; k < 2; k++)
    /* (b0, b1) + (b2, b3) of keys 4k, 4k + 2 (low half), 4k + 1, 4k + 3 */
    c[k] = _mm256_add_ps (_mm256_shuffle_ps (b[2 * k], b[2 * k + 1], _MM_SHUFFLE (1, 0, 1, 0)),
                          _mm256_shuffle_ps (b[2 * k], b[2 * k + 1], _MM_SHUFFLE (3, 2, 3, 2)));
  /* c0 + c1: keys 0, 2, 4, 6 in the low half, 1, 3, 5, 7 in the high */
  d = _mm256_add_ps (_mm256_shuffle_ps (c[0], c[1], _MM_SHUFFLE (2, 0, 2, 0)),
                     _mm256_shuffle_ps (c[0], c[1], _MM_SHUFFLE (3, 1, 3, 1)));
  return _mm256_permutevar8x32_ps (d, _mm256_setr_epi32 (0, 4, 1, 5, 2, 6, 3, 7));
}

AVX2_ATT static inline __attribute__ ((always_inline)) void
scores_avx2_kv (const float *qr, const void *k, size_t kstride, int seen, int head_dim,
                float scale, float *sc, bool bf16)
{
  int p = 0;

  if (head_dim % 8 == 0) {
    const __m256 sv = _mm256_set1_ps (scale);
    for (; p + 8 <= seen; p += 8) {
      __m256 a[8];
#pragma GCC unroll 8
      for (int j = 0; j < 8; j++)
        a[j] = _mm256_setzero_ps ();
      for (int i = 0; i < head_dim; i += 8) {
        __m256 qv = _mm256_loadu_ps (qr + i);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
          a[j] = _mm256_fmadd_ps (qv, load8 (k, (size_t) (p + j) * kstride + i, bf16), a[j]);
      }
      _mm256_storeu_ps (sc + p, _mm256_mul_ps (sums8 (a), sv));
    }
  }
  /* clean upper halves for the plain code that runs next (expf, the
   * scalar loops): SSE code after dirty ones pays a penalty on each
   * instruction; the compiler leaves this out of target() functions */
  _mm256_zeroupper ();
  for (; p < seen; p++)
    sc[p] = dot_plain (qr, kv_at (k, p * kstride, bf16), bf16, head_dim) * scale;
}

/* Each key type's loop compiled on its own (bf16 a constant there). */
AVX2_ATT static void
scores_avx2 (const float *qr, const void *k, size_t kstride, int seen, int head_dim,
             float scale, float *sc, bool bf16)
{
  if (bf16)
    scores_avx2_kv (qr, k, kstride, seen, head_dim, scale, sc, true);
  else
    scores_avx2_kv (qr, k, kstride, seen, head_dim, scale, sc, false);
}

/* weights_generic with the maximum and the division 8 at a time (both
 * exact: the same numbers; a zero's sign in the maximum may differ, and
 * exp (x − 0) is exp (x − −0)); exp and the sum stay in order. */
/* exp_nonpos of 8 values, bit for bit its steps. */
AVX2_ATT static inline __attribute__ ((always_inline)) __m256
exp_nonpos8 (__m256 x)
{
  __m256 n = _mm256_round_ps (_mm256_mul_ps (x, _mm256_set1_ps (EXP_LOG2E)),
                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fmadd_ps (n, _mm256_set1_ps (-EXP_LN2_HI), x);
  __m256 y = _mm256_set1_ps (EXP_C7);
  __m256i e;
  __m256 low;

  r = _mm256_fmadd_ps (n, _mm256_set1_ps (-EXP_LN2_LO), r);
  y = _mm256_fmadd_ps (y, r, _mm256_set1_ps (EXP_C6));
  y = _mm256_fmadd_ps (y, r, _mm256_set1_ps (EXP_C5));
  y = _mm256_fmadd_ps (y, r, _mm256_set1_ps (EXP_C4));
  y = _mm256_fmadd_ps (y, r, _mm256_set1_ps (EXP_C3));
  y = _mm256_fmadd_ps (y, r, _mm256_set1_ps (EXP_C2));
  y = _mm256_fmadd_ps (y, r, _mm256_set1_ps (1.0f));
  y = _mm256_fmadd_ps (y, r, _mm256_set1_ps (1.0f));
  /* below the low bound (−∞ too) 0; n of a NaN lane is garbage, y NaN */
  low = _mm256_cmp_ps (x, _mm256_set1_ps (EXP_LOW), _CMP_LT_OQ);
  n = _mm256_blendv_ps (n, _mm256_setzero_ps (), low);
  e = _mm256_slli_epi32 (_mm256_add_epi32 (_mm256_cvtps_epi32 (n), _mm256_set1_epi32 (127)), 23);
  y = _mm256_mul_ps (y, _mm256_castsi256_ps (e));
  return _mm256_blendv_ps (y, _mm256_setzero_ps (), low);
}

/* The plain exp of the vector path's tail (fmaf one instruction). */
AVX2_ATT static __attribute__ ((noinline)) float
exp_nonpos_plain (float x)
{
  return exp_nonpos (x);
}

/* weights_generic with the maximum, the exp, the lane sums and the
 * division 8 at a time (all exact or the same steps: the same numbers; a
 * zero's sign in the maximum may differ, and exp (x − 0) is exp (x − −0)). */
AVX2_ATT static void
weights_avx2 (float *sc, int seen)
{
  float top = -INFINITY, sum, lanes[8];
  int p = 0, whole = seen / 8 * 8;

  if (seen >= 8) {
    __m256 m = _mm256_loadu_ps (sc);
    for (p = 8; p + 8 <= seen; p += 8)
      m = _mm256_max_ps (m, _mm256_loadu_ps (sc + p));
    _mm256_storeu_ps (lanes, m);
    for (int j = 0; j < 8; j++)
      if (lanes[j] > top)
        top = lanes[j];
  }
  for (; p < seen; p++)
    if (sc[p] > top)
      top = sc[p];
  {
    __m256 tv = _mm256_set1_ps (top), acc = _mm256_setzero_ps ();
    for (p = 0; p < whole; p += 8) {
      __m256 e = exp_nonpos8 (_mm256_sub_ps (_mm256_loadu_ps (sc + p), tv));
      _mm256_storeu_ps (sc + p, e);
      acc = _mm256_add_ps (acc, e);
    }
    _mm256_storeu_ps (lanes, acc);
  }
  _mm256_zeroupper ();
  sum = lanes_sum (lanes);
  for (p = whole; p < seen; p++) {
    sc[p] = exp_nonpos_plain (sc[p] - top);
    sum += sc[p];
  }
  {
    __m256 sv = _mm256_set1_ps (sum);
    for (p = 0; p + 8 <= seen; p += 8)
      _mm256_storeu_ps (sc + p, _mm256_div_ps (_mm256_loadu_ps (sc + p), sv));
  }
  _mm256_zeroupper ();
  for (; p < seen; p++)
    sc[p] = sc[p] / sum;
}

AVX2_ATT static inline __attribute__ ((always_inline)) void
weigh_avx2_kv (float *o, const float *w, const void *v, size_t kstride, int seen, int head_dim,
               bool bf16, bool carry)
{
  int d = 0;

  for (; d + 64 <= head_dim; d += 64) {
    __m256 acc[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
      acc[j] = carry ? _mm256_loadu_ps (o + d + 8 * j) : _mm256_setzero_ps ();
    for (int p = 0; p < seen; p++) {
      __m256 wv = _mm256_broadcast_ss (w + p);
      const void *vp = kv_at (v, p * kstride + d, bf16);
#pragma GCC unroll 8
      for (int j = 0; j < 8; j++)
        acc[j] = _mm256_fmadd_ps (wv, load8 (vp, 8 * j, bf16), acc[j]);
    }
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
      _mm256_storeu_ps (o + d + 8 * j, acc[j]);
  }
  _mm256_zeroupper ();
  if (d < head_dim) {
    if (!carry)
      memset (o + d, 0, sizeof (float) * (head_dim - d));
    for (int p = 0; p < seen; p++)
      axpy_plain (o + d, w[p], kv_at (v, p * kstride + d, bf16), bf16, head_dim - d);
  }
}

AVX2_ATT static void
weigh_avx2 (float *o, const float *w, const void *v, size_t kstride, int seen, int head_dim,
            bool bf16, bool carry)
{
  if (bf16)
    weigh_avx2_kv (o, w, v, kstride, seen, head_dim, true, carry);
  else
    weigh_avx2_kv (o, w, v, kstride, seen, head_dim, false, carry);
}

/* 4 keys' lanes a0 … a3 summed by dot's tree (as sums8 sums 8): their
 * scores, in order, in 128 bits. */
AVX2_ATT static inline __attribute__ ((always_inline)) __m128
sums4 (const __m256 *a)
{
  /* keys 0, 1 and keys 2, 3: l[j] + l[j + 4] */
  __m256 b0 = _mm256_add_ps (_mm256_permute2f128_ps (a[0], a[1], 0x20),
                             _mm256_permute2f128_ps (a[0], a[1], 0x31));
  __m256 b1 = _mm256_add_ps (_mm256_permute2f128_ps (a[2], a[3], 0x20),
                             _mm256_permute2f128_ps (a[2], a[3], 0x31));
  /* (b0, b1) + (b2, b3) of keys 0, 2 (low half) and 1, 3 (high) */
  __m256 c = _mm256_add_ps (_mm256_shuffle_ps (b0, b1, _MM_SHUFFLE (1, 0, 1, 0)),
                            _mm256_shuffle_ps (b0, b1, _MM_SHUFFLE (3, 2, 3, 2)));
  /* c0 + c1: keys 0, 2 in the low half, 1, 3 in the high */
  __m256 d = _mm256_add_ps (_mm256_shuffle_ps (c, c, _MM_SHUFFLE (2, 0, 2, 0)),
                            _mm256_shuffle_ps (c, c, _MM_SHUFFLE (3, 1, 3, 1)));

  return _mm256_castps256_ps128 (
      _mm256_permutevar8x32_ps (d, _mm256_setr_epi32 (0, 4, 1, 5, 2, 6, 3, 7)));
}

/* scores_avx2 for two heads of one group at once: each key's row is read
 * once for both (the loads, not the products, bound a lone head); 4 keys
 * at a time to keep both heads' sums in registers. Each score is the same
 * bits as scores_avx2's. */
AVX2_ATT static inline __attribute__ ((always_inline)) void
scores_pair_avx2_kv (const float *q0, const float *q1, const void *k, size_t kstride, int seen,
                     int head_dim, float scale, float *sc0, float *sc1, bool bf16)
{
  int p = 0;

  if (head_dim % 8 == 0) {
    const __m128 sv = _mm_set1_ps (scale);
    for (; p + 4 <= seen; p += 4) {
      __m256 a0[4], a1[4];
#pragma GCC unroll 4
      for (int j = 0; j < 4; j++)
        a0[j] = a1[j] = _mm256_setzero_ps ();
      for (int i = 0; i < head_dim; i += 8) {
        __m256 x0 = _mm256_loadu_ps (q0 + i), x1 = _mm256_loadu_ps (q1 + i);
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
          __m256 kv = load8 (k, (size_t) (p + j) * kstride + i, bf16);
          a0[j] = _mm256_fmadd_ps (x0, kv, a0[j]);
          a1[j] = _mm256_fmadd_ps (x1, kv, a1[j]);
        }
      }
      _mm_storeu_ps (sc0 + p, _mm_mul_ps (sums4 (a0), sv));
      _mm_storeu_ps (sc1 + p, _mm_mul_ps (sums4 (a1), sv));
    }
  }
  _mm256_zeroupper ();
  for (; p < seen; p++) {
    sc0[p] = dot_plain (q0, kv_at (k, p * kstride, bf16), bf16, head_dim) * scale;
    sc1[p] = dot_plain (q1, kv_at (k, p * kstride, bf16), bf16, head_dim) * scale;
  }
}

AVX2_ATT static void
scores_pair_avx2 (const float *q0, const float *q1, const void *k, size_t kstride, int seen,
                  int head_dim, float scale, float *sc0, float *sc1, bool bf16)
{
  if (bf16)
    scores_pair_avx2_kv (q0, q1, k, kstride, seen, head_dim, scale, sc0, sc1, true);
  else
    scores_pair_avx2_kv (q0, q1, k, kstride, seen, head_dim, scale, sc0, sc1, false);
}

/* weigh_avx2 for two heads at once: each value row read once for both, 32
 * dimensions at a time (each element's sum over the keys in order, as
 * weigh_avx2's). */
AVX2_ATT static inline __attribute__ ((always_inline)) void
weigh_pair_avx2_kv (float *o0, float *o1, const float *w0, const float *w1, const void *v,
                    size_t kstride, int seen, int head_dim, bool bf16, bool carry)
{
  int d = 0;

  for (; d + 32 <= head_dim; d += 32) {
    __m256 a0[4], a1[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++)
      if (carry) {
        a0[j] = _mm256_loadu_ps (o0 + d + 8 * j);
        a1[j] = _mm256_loadu_ps (o1 + d + 8 * j);
      } else {
        a0[j] = a1[j] = _mm256_setzero_ps ();
      }
    for (int p = 0; p < seen; p++) {
      __m256 x0 = _mm256_broadcast_ss (w0 + p), x1 = _mm256_broadcast_ss (w1 + p);
      const void *vp = kv_at (v, p * kstride + d, bf16);
#pragma GCC unroll 4
      for (int j = 0; j < 4; j++) {
        __m256 vv = load8 (vp, 8 * j, bf16);
        a0[j] = _mm256_fmadd_ps (x0, vv, a0[j]);
        a1[j] = _mm256_fmadd_ps (x1, vv, a1[j]);
      }
    }
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
      _mm256_storeu_ps (o0 + d + 8 * j, a0[j]);
      _mm256_storeu_ps (o1 + d + 8 * j, a1[j]);
    }
  }
  _mm256_zeroupper ();
  if (d < head_dim) {
    if (!carry) {
      memset (o0 + d, 0, sizeof (float) * (head_dim - d));
      memset (o1 + d, 0, sizeof (float) * (head_dim - d));
    }
    for (int p = 0; p < seen; p++) {
      const void *vp = kv_at (v, p * kstride + d, bf16);
      axpy_plain (o0 + d, w0[p], vp, bf16, head_dim - d);
      axpy_plain (o1 + d, w1[p], vp, bf16, head_dim - d);
    }
  }
}

AVX2_ATT static void
weigh_pair_avx2 (float *o0, float *o1, const float *w0, const float *w1, const void *v,
                 size_t kstride, int seen, int head_dim, bool bf16, bool carry)
{
  if (bf16)
    weigh_pair_avx2_kv (o0, o1, w0, w1, v, kstride, seen, head_dim, true, carry);
  else
    weigh_pair_avx2_kv (o0, o1, w0, w1, v, kstride, seen, head_dim, false, carry);
}

#endif

typedef void (*ScoresFunc) (const float *qr, const void *k, size_t kstride, int seen,
                            int head_dim, float scale, float *sc, bool bf16);
typedef void (*WeighFunc) (float *o, const float *w, const void *v, size_t kstride, int seen,
                           int head_dim, bool bf16, bool carry);
typedef void (*WeightsFunc) (float *sc, int seen);
/* two heads of a group at once (NULL: a head at a time) */
typedef void (*ScoresPairFunc) (const float *q0, const float *q1, const void *k, size_t kstride,
                                int seen, int head_dim, float scale, float *sc0, float *sc1,
                                bool bf16);
typedef void (*WeighPairFunc) (float *o0, float *o1, const float *w0, const float *w1,
                               const void *v, size_t kstride, int seen, int head_dim, bool bf16,
                               bool carry);

typedef struct {
  const float *q;
  const void *k, *v;
  float *out;
  int rows, heads, kv_heads, head_dim, pos0;
  /* key ranges per row (NULL: causal from pos0), the longest, key stride */
  const int32_t *lo, *hi;
  /* each row's own keys (NULL: k and v for every row) */
  const void *const *row_k, *const *row_v;
  int most_seen;
  size_t kstride;
  /* keys and values are BF16 (else F32) */
  bool bf16;
  /* each row's groups of heads in this many spans, a piece each, where
   * the rows read their keys alone (0: a piece a row of a group) */
  int spans;
  float scale;
  ScoresFunc scores;
  WeightsFunc weights;
  WeighFunc weigh;
  ScoresPairFunc scores_pair;
  WeighPairFunc weigh_pair;
  atomic_int next;
} Attention;

/* Keys a block of a span's pass: each block's rows are read for all the
 * span's groups while they are in cache. */
#define SPAN_KEYS 64

/* A row that reads its keys alone (a decode step's) over groups g0 …
 * g1 − 1 of heads: the keys in blocks of SPAN_KEYS, each block's scores
 * for every head of the span, then each head's softmax, then the values in
 * the same blocks. A key's
 * row holds every group's key side by side, so a block reads the span's
 * part of each row at once (one group at a time reads a few cache lines
 * at the stride of all the groups, which ran the memory at a fifth of its
 * rate). Each score is a key's own dot and each output element's sum
 * goes on in key order from block to block, so the numbers are bitwise a
 * head at a time over all the keys. `sc` holds the span's heads' scores,
 * a row of `most` each. */
static void
attention_span (Attention *a, int r, int g0, int g1, float *sc, size_t most)
{
  int rep = a->heads / a->kv_heads, head_dim = a->head_dim;
  int from = a->lo ? a->lo[r] : 0, seen = a->lo ? a->hi[r] - from : a->pos0 + r + 1;
  size_t kstride = a->kstride;
  const void *k = kv_at (a->row_k ? a->row_k[r] : a->k, (size_t) from * kstride, a->bf16);
  const void *v = kv_at (a->row_v ? a->row_v[r] : a->v, (size_t) from * kstride, a->bf16);
  const float *q = a->q + (size_t) r * a->heads * head_dim;
  float *out = a->out + (size_t) r * a->heads * head_dim;
  /* two heads of a group at once where the path has it (each key and
   * value element read once for both; a block's values, read twice in
   * 32-wide halves, are in the nearest cache the second time) */
  bool pair = a->scores_pair && rep % 2 == 0;

  if (seen <= 0) {
    memset (out + (size_t) g0 * rep * head_dim, 0, sizeof (float) * (g1 - g0) * rep * head_dim);
    return;
  }
  for (int b = 0; b < seen; b += SPAN_KEYS) {
    int n = MIN (SPAN_KEYS, seen - b);
    for (int h = g0 * rep; h < g1 * rep; h += pair ? 2 : 1) {
      const void *kb = kv_at (k, (size_t) b * kstride + (size_t) (h / rep) * head_dim, a->bf16);
      float *s0 = sc + (h - g0 * rep) * most + b;
      if (pair)
        a->scores_pair (q + (size_t) h * head_dim, q + (size_t) (h + 1) * head_dim, kb, kstride,
                        n, head_dim, a->scale, s0, s0 + most, a->bf16);
      else
        a->scores (q + (size_t) h * head_dim, kb, kstride, n, head_dim, a->scale, s0, a->bf16);
    }
  }
  for (int h = g0 * rep; h < g1 * rep; h++)
    a->weights (sc + (h - g0 * rep) * most, seen);
  for (int b = 0; b < seen; b += SPAN_KEYS) {
    int n = MIN (SPAN_KEYS, seen - b);
    for (int h = g0 * rep; h < g1 * rep; h += pair ? 2 : 1) {
      const void *vb = kv_at (v, (size_t) b * kstride + (size_t) (h / rep) * head_dim, a->bf16);
      float *o = out + (size_t) h * head_dim, *w0 = sc + (h - g0 * rep) * most + b;
      if (pair)
        a->weigh_pair (o, o + head_dim, w0, w0 + most, vb, kstride, n, head_dim, a->bf16, b > 0);
      else
        a->weigh (o, w0, vb, kstride, n, head_dim, a->bf16, b > 0);
    }
  }
}

static void
attention_work (void *data, int slot)
{
  Attention *a = data;
  int rep = a->heads / a->kv_heads, head_dim = a->head_dim, i;
  size_t kstride = a->kstride;
  size_t most = a->most_seen > 0 ? (size_t) a->most_seen : 1;
  float *sc, *sc1;

  (void) slot;
  if (a->spans > 0) {
    int per = (a->kv_heads + a->spans - 1) / a->spans;
    float *span_sc = malloc (sizeof (float) * per * rep * most);
    while ((i = atomic_fetch_add_explicit (&a->next, 1, memory_order_relaxed))
           < a->spans * a->rows) {
      int s = i % a->spans;
      attention_span (a, i / a->spans, s * a->kv_heads / a->spans,
                      (s + 1) * a->kv_heads / a->spans, span_sc, most);
    }
    free (span_sc);
    return;
  }
  sc = malloc (sizeof (float) * 2 * most);
  sc1 = sc + most;
  /* a piece is one row of one group of heads that share their keys (the
   * rows of a group one after another, so its keys stay in cache): the
   * group's heads read the keys and values once from memory, the second
   * head on from the cache (one row over 380 keys, 16 heads in 8 groups,
   * two AVX2 threads: 124-156 µs a call against 158-194 with a piece a
   * head; about even at 1500 keys, which the cache no longer holds); many
   * small pieces keep the threads even */
  while ((i = atomic_fetch_add_explicit (&a->next, 1, memory_order_relaxed))
         < a->kv_heads * a->rows) {
    int g = i / a->rows, r = i % a->rows;
    int from = a->lo ? a->lo[r] : 0, seen = a->lo ? a->hi[r] - from : a->pos0 + r + 1;
    size_t first = (size_t) from * kstride + (size_t) g * head_dim;
    const void *k = kv_at (a->row_k ? a->row_k[r] : a->k, first, a->bf16);
    const void *v = kv_at (a->row_v ? a->row_v[r] : a->v, first, a->bf16);
    for (int h = g * rep; h < (g + 1) * rep; h++) {
      const float *qr = a->q + ((size_t) r * a->heads + h) * head_dim;
      float *o = a->out + ((size_t) r * a->heads + h) * head_dim;
      if (seen <= 0) {
        memset (o, 0, sizeof (float) * head_dim);
        continue;
      }
      /* two heads of the group together where the path has it and the
       * call has several rows (a verify step's: a decode step's lone row
       * ran slower so, its values streamed twice in 32-wide halves): the
       * same numbers either way, each key row read once for both */
      if (a->scores_pair && a->rows > 1 && h + 1 < (g + 1) * rep) {
        a->scores_pair (qr, qr + head_dim, k, kstride, seen, head_dim, a->scale, sc, sc1,
                        a->bf16);
        a->weights (sc, seen);
        a->weights (sc1, seen);
        a->weigh_pair (o, o + head_dim, sc, sc1, v, kstride, seen, head_dim, a->bf16, false);
        h++;
        continue;
      }
      a->scores (qr, k, kstride, seen, head_dim, a->scale, sc, a->bf16);
      a->weights (sc, seen);
      a->weigh (o, sc, v, kstride, seen, head_dim, a->bf16, false);
    }
  }
  free (sc);
}

/* Whether no two rows read the same keys (a lone row; a batch of decode
 * steps, each of its own sequence): each row then goes through its keys
 * once, in spans of groups, as it reads them fastest; rows that share keys
 * (a verify step's) take a group at a time, one row after another, so the
 * group's keys stay in cache between them. */
static bool
rows_alone (const Attention *a)
{
  if (a->rows == 1)
    return true;
  if (!a->row_k)
    return false;
  for (int r = 1; r < a->rows; r++)
    for (int e = 0; e < r; e++)
      if (a->row_k[e] == a->row_k[r])
        return false;
  return true;
}

/* The paths for this CPU, then the rows across the threads. */
static void
attention_run (Attention *a, size_t work)
{
  a->scores = scores_generic;
  a->weights = weights_generic;
  a->weigh = weigh_generic;
  a->scores_pair = NULL;
  a->weigh_pair = NULL;
#ifdef DFL_X86
  {
    DflKernelsIsa isa = dfl_kernels_isa ();

    if (isa == DFL_KERNELS_AVX512 || isa == DFL_KERNELS_AVX2) {
      a->scores = scores_avx2;
      a->weights = weights_avx2;
      a->weigh = weigh_avx2;
      a->scores_pair = scores_pair_avx2;
      a->weigh_pair = weigh_pair_avx2;
    }
  }
#endif

  /* heads and rows are independent: the threads take them a row of a
   * group of heads at a time; rows that read their keys alone, their
   * groups in a span a thread */
  {
    int threads = work > 4096 ? dfl_parallel_threads () : 1;

    a->spans = rows_alone (a) ? MIN (threads, a->kv_heads) : 0;
    atomic_init (&a->next, 0);
    dfl_parallel_run (threads, attention_work, a);
  }
}

/* The causal call over F32 or BF16 keys and values. */
static void
attention_causal (const float *q, int rows, int heads, int kv_heads, int head_dim, const void *k,
                  const void *v, bool bf16, int pos0, float scale, float *out)
{
  Attention a = { .q = q, .k = k, .v = v, .out = out, .rows = rows, .heads = heads,
                  .kv_heads = kv_heads, .head_dim = head_dim, .pos0 = pos0,
                  .most_seen = pos0 + rows, .kstride = (size_t) kv_heads * head_dim,
                  .bf16 = bf16, .scale = scale };

  attention_run (&a, (size_t) heads * rows * (pos0 + rows));
}

void
dfl_attention_causal (const float *q, int rows, int heads, int kv_heads, int head_dim,
                      const float *k, const float *v, int pos0, float scale, float *out)
{
  attention_causal (q, rows, heads, kv_heads, head_dim, k, v, false, pos0, scale, out);
}

void
dfl_attention_causal_bf16 (const float *q, int rows, int heads, int kv_heads, int head_dim,
                           const uint16_t *k, const uint16_t *v, int pos0, float scale,
                           float *out)
{
  attention_causal (q, rows, heads, kv_heads, head_dim, k, v, true, pos0, scale, out);
}

/* The longest range and the work of a call over ranges. */
static size_t
ranges_work (Attention *a)
{
  size_t work = 0;

  for (int r = 0; r < a->rows; r++)
    if (a->hi[r] > a->lo[r]) {
      if (a->hi[r] - a->lo[r] > a->most_seen)
        a->most_seen = a->hi[r] - a->lo[r];
      work += (size_t) a->heads * (a->hi[r] - a->lo[r]);
    }
  return work;
}

/* A call over ranges: one key set (k, v) or each row's own (row_k, row_v). */
static void
attention_ranges (const float *q, int rows, int heads, int kv_heads, int head_dim, const void *k,
                  const void *v, const void *const *row_k, const void *const *row_v, bool bf16,
                  int kv_stride, const int32_t *lo, const int32_t *hi, float scale, float *out)
{
  Attention a = { .q = q, .k = k, .v = v, .out = out, .rows = rows, .heads = heads,
                  .kv_heads = kv_heads, .head_dim = head_dim, .lo = lo, .hi = hi,
                  .row_k = row_k, .row_v = row_v, .kstride = (size_t) kv_stride,
                  .bf16 = bf16, .scale = scale };

  attention_run (&a, ranges_work (&a));
}

void
dfl_attention_ranges (const float *q, int rows, int heads, int kv_heads, int head_dim,
                      const float *k, const float *v, int kv_stride, const int32_t *lo,
                      const int32_t *hi, float scale, float *out)
{
  attention_ranges (q, rows, heads, kv_heads, head_dim, k, v, NULL, NULL, false, kv_stride, lo,
                    hi, scale, out);
}

void
dfl_attention_ranges_bf16 (const float *q, int rows, int heads, int kv_heads, int head_dim,
                           const uint16_t *k, const uint16_t *v, int kv_stride,
                           const int32_t *lo, const int32_t *hi, float scale, float *out)
{
  attention_ranges (q, rows, heads, kv_heads, head_dim, k, v, NULL, NULL, true, kv_stride, lo,
                    hi, scale, out);
}

void
dfl_attention_rows (const float *q, int rows, int heads, int kv_heads, int head_dim,
                    const float *const *k, const float *const *v, int kv_stride,
                    const int32_t *lo, const int32_t *hi, float scale, float *out)
{
  attention_ranges (q, rows, heads, kv_heads, head_dim, NULL, NULL, (const void *const *) k,
                    (const void *const *) v, false, kv_stride, lo, hi, scale, out);
}

void
dfl_attention_rows_bf16 (const float *q, int rows, int heads, int kv_heads, int head_dim,
                         const uint16_t *const *k, const uint16_t *const *v, int kv_stride,
                         const int32_t *lo, const int32_t *hi, float scale, float *out)
{
  attention_ranges (q, rows, heads, kv_heads, head_dim, NULL, NULL, (const void *const *) k,
                    (const void *const *) v, true, kv_stride, lo, hi, scale, out);
}
