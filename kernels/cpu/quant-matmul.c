/* gst-dflash — y = x · Wᵀ with W in quantized blocks (quant-layout.h),
 * read in place, batch-invariant, the same bits on every processor.
 *
 * The activations are quantized too, so the products are integer: each row
 * of x, in groups of 32 inputs, becomes int8 values q = round(x · 127 /
 * max|x|) (ties to even, within ±127) with one F32 scale dx = max|x| / 127
 * per group, and the sums of each group's (and each half-group's) q are
 * kept beside them. A group of 32 meets exactly one block of Q8_0 or Q4_0
 * and one sub-block of the K types, so every such block b gives an exact
 * integer sum isum_b = Σ q_w · q_x (Q4_0 and Q6_K subtract their offset 8
 * and 32 through the group sums, as AVX-512 VNNI does the 128 it adds to
 * Q8_0's weights or activations for dpbusd's unsigned operand; Q6_K weighs
 * its two halves by their int8 scales, Q4_K its sub-block by its six-bit
 * scale). The error this adds is
 * that of rounding x to its group's step: |Σ w (x − x̂)| ≤ Σ_groups
 * dx / 2 · Σ |w| over the group, whatever the weight type.
 *
 * Then a block's contribution in F32, always by the same operations:
 *   Q8_0, Q4_0   lane = fma (d_w · dx, isum, lane)
 *   Q4_K         lane = fma (dx, fma (d, sc · isum, −(dmin · (m · Σq_x))), lane)
 *   Q6_K         lane = fma (d · dx, isum, lane)
 * where block b goes to lane b mod 8 (the eight sub-blocks of a K
 * super-block to lanes 0 … 7), each lane adding its blocks in ascending
 * order, and the eight lanes are summed in the fixed tree ((0+4)+(2+6)) +
 * ((1+5)+(3+7)) at the end. The integer sums are exact however they are
 * formed, so the plain-C path, AVX2's (maddubs + madd) and AVX-512 VNNI's
 * (dpbusd) give bitwise the same results, and a row's result depends on
 * nothing but the row: not on the rows with it, nor the thread, nor the
 * processor (batch invariance).
 *
 * Why group the activations by 32 rather than by 256 as llama.cpp does for
 * the K types: the same activations then serve every type, and a group's
 * step follows its own 32 values, which halves the error on rows whose
 * magnitudes vary along the row.
 *
 * Work is shared out between the threads (dfl-parallel.h) by blocks of
 * outputs, each thread first taking a span of consecutive blocks (see
 * QWork); each output's weights are unpacked once per 256 inputs and
 * used, from registers, for up to ROW_TILE rows. From TRANSPOSE_ROWS rows
 * on, the weights and activations are interleaved so that the eight
 * blocks' sums need no reduction per row (25% less time for 16 rows of
 * Q4_K on AVX2; the same sums, so the same bits). AVX-512 VNNI takes
 * those rows two outputs to a 512-bit vector (see its section). Where the
 * weights carry a packed copy (dfl_quant_pack) and the path is AVX2's or
 * VNNI's, that copy is read instead, by quant-packed.c, to the same bits.
 */
#include "dfl-kernels.h"
#include "dfl-parallel.h"
#include "quant-layout.h"
#include "quant-packed.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define DFL_MIN(a, b) ((a) < (b) ? (a) : (b))

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <cpuid.h>
#define DFL_X86 1
#endif

/* Rows whose lanes are held while a block of weights is unpacked. */
#define ROW_TILE 16
/* Outputs a thread claims at once: a group of the packed layout. */
#define OUT_BLOCK 16
_Static_assert (OUT_BLOCK == DFL_QPACK_GROUP, "a claim is one packed group");

/* ---- the activations, quantized once per call -------------------------- */

typedef struct {
  int k;          /* inputs per row (a multiple of 32) */
  int8_t *q;      /* [rows][k] */
  float *d;       /* [rows][k / 32]: each group's step */
  int32_t *s32;   /* [rows][k / 32]: Σ q over each group */
  int16_t *s16;   /* [rows][k / 16]: Σ q over each half group */
  /* [rows][k], or NULL: q with each 256 inputs' eight groups interleaved
   * by fours (inputs 4i … 4i + 3 of groups 0 … 7, then 4(i + 1) …), for
   * the paths that sum eight blocks at once (see TRANSPOSE_ROWS) */
  int8_t *qt;
  /* [rows][k], or NULL: qt + 128 as unsigned bytes (qt ^ 0x80), for
   * AVX-512 VNNI's dpbusd, whose unsigned operand they are where the
   * weights are signed (Q8_0) */
  int8_t *qb;
  void *mem;
} QAct;

/* Rows from which the SIMD paths lay the activations and each 256
 * weights out interleaved: a vector of products then holds four inputs of
 * each of eight blocks, so the eight blocks' sums are vertical additions
 * instead of a reduction per row; laying out the weights costs a
 * transposition per 256 weights, which a row or two would not repay. */
#define TRANSPOSE_ROWS 4

/* A group's step (*d) from its largest magnitude, and the factor that
 * takes its values to int8. */
static inline float
group_step (float amax, int finite, float *d)
{
  float id = amax > 0.0f ? 127.0f / amax : 0.0f;

  *d = amax / 127.0f;
  /* max|x| so small that 127 / max|x| overflows: the group's values are
   * taken as 0, on every path alike (x · ∞ rounds to no integer) */
  if (isinf (id))
    id = 0.0f;
  /* a NaN or an Inf: the group's step is NaN and its values 0, so every
   * output it meets is NaN, as it would be in F32, never a number */
  if (!finite) {
    *d = NAN;
    id = 0.0f;
  }
  return id;
}

static void
quantize_row_act (const float *x, int k, int8_t *q, float *d, int32_t *s32, int16_t *s16)
{
  for (int g = 0; g < k / 32; g++) {
    const float *xg = x + 32 * g;
    float amax = 0.0f, id;
    int sum[2] = { 0, 0 }, finite = 1;

    for (int i = 0; i < 32; i++) {
      finite &= isfinite (xg[i]) != 0;
      amax = fmaxf (amax, fabsf (xg[i]));
    }
    id = group_step (amax, finite, &d[g]);
    for (int i = 0; i < 32; i++) {
      float t = xg[i] * id;
      int v = (int) lrintf (t);
      v = v > 127 ? 127 : v < -127 ? -127 : v;
      q[32 * g + i] = (int8_t) v;
      sum[i / 16] += v;
    }
    s16[2 * g] = (int16_t) sum[0];
    s16[2 * g + 1] = (int16_t) sum[1];
    s32[g] = sum[0] + sum[1];
  }
}

#ifdef DFL_X86
#define AVX2 __attribute__ ((target ("avx2,fma,f16c")))

AVX2 static inline void transpose8_avx2 (const __m256i r[8], __m256i t[8]);

/* quantize_row_act on AVX2, eight values at a time: the same operations
 * (x · id rounded by the conversion in the default rounding mode, as
 * lrintf, then clamped), so the same bytes, steps and sums. */
AVX2 static void
quantize_row_act_avx2 (const float *x, int k, int8_t *q, float *d, int32_t *s32, int16_t *s16)
{
  const __m256 sign = _mm256_set1_ps (-0.0f), inf = _mm256_set1_ps (INFINITY);
  const __m256i lim = _mm256_set1_epi32 (127), nlim = _mm256_set1_epi32 (-127);

  for (int g = 0; g < k / 32; g++) {
    __m256 v[4], m = _mm256_setzero_ps ();
    __m256i iv[4], half, sums;
    __m128 h;
    __m128i s;
    int finite = 1;
    float amax, id;

    _Pragma ("GCC unroll 4")
    for (int i = 0; i < 4; i++) {
      __m256 a;
      v[i] = _mm256_loadu_ps (x + 32 * g + 8 * i);
      a = _mm256_andnot_ps (sign, v[i]);
      finite &= _mm256_movemask_ps (_mm256_cmp_ps (a, inf, _CMP_LT_OQ)) == 0xff;
      m = _mm256_max_ps (m, a);
    }
    h = _mm_max_ps (_mm256_castps256_ps128 (m), _mm256_extractf128_ps (m, 1));
    h = _mm_max_ps (h, _mm_movehl_ps (h, h));
    amax = _mm_cvtss_f32 (_mm_max_ss (h, _mm_movehdup_ps (h)));
    id = group_step (amax, finite, &d[g]);
    if (!finite) {
      memset (q + 32 * g, 0, 32);
      s16[2 * g] = s16[2 * g + 1] = 0;
      s32[g] = 0;
      continue;
    }
    _Pragma ("GCC unroll 4")
    for (int i = 0; i < 4; i++)
      iv[i] = _mm256_min_epi32 (_mm256_max_epi32 (
          _mm256_cvtps_epi32 (_mm256_mul_ps (v[i], _mm256_set1_ps (id))), nlim), lim);
    /* to bytes: the packs interleave the four vectors by fours per 128 bits */
    _mm256_storeu_si256 ((__m256i *) (q + 32 * g), _mm256_permutevar8x32_epi32 (
        _mm256_packs_epi16 (_mm256_packs_epi32 (iv[0], iv[1]), _mm256_packs_epi32 (iv[2], iv[3])),
        _mm256_setr_epi32 (0, 4, 1, 5, 2, 6, 3, 7)));
    /* the halves' sums (inputs 0-15, 16-31) */
    half = _mm256_hadd_epi32 (_mm256_add_epi32 (iv[0], iv[1]), _mm256_add_epi32 (iv[2], iv[3]));
    sums = _mm256_hadd_epi32 (half, half);
    s = _mm_add_epi32 (_mm256_castsi256_si128 (sums), _mm256_extracti128_si256 (sums, 1));
    s16[2 * g] = (int16_t) _mm_cvtsi128_si32 (s);
    s16[2 * g + 1] = (int16_t) _mm_extract_epi32 (s, 1);
    s32[g] = _mm_cvtsi128_si32 (s) + _mm_extract_epi32 (s, 1);
  }
}

/* A row's q interleaved as QAct.qt describes, 256 inputs at a time. */
AVX2 static void
interleave_row_avx2 (const int8_t *q, int k, int8_t *qt)
{
  for (int c = 0; c + 256 <= k; c += 256) {
    __m256i r[8], t[8];
    _Pragma ("GCC unroll 8")
    for (int j = 0; j < 8; j++)
      r[j] = _mm256_loadu_si256 ((const __m256i *) (q + c + 32 * j));
    transpose8_avx2 (r, t);
    _Pragma ("GCC unroll 8")
    for (int i = 0; i < 8; i++)
      _mm256_storeu_si256 ((__m256i *) (qt + c + 32 * i), t[i]);
  }
}
#endif

/* The activations of `rows` rows; `simd`: by the AVX2 code (the same
 * values), as the SIMD paths do. */
static int
qact_init (QAct *a, const float *x, int rows, int ldx, int k, int transpose, int biased,
           int simd)
{
  size_t nq = (size_t) rows * k, ng = (size_t) rows * (k / 32), nq64 = (nq + 63) & ~(size_t) 63;
  size_t bytes = nq64 * (1 + (transpose != 0) * (1 + (biased != 0))) + ng * (4 + 4 + 4);
  char *p;

  a->k = k;
  a->mem = aligned_alloc (64, (bytes + 63) & ~(size_t) 63);
  if (!a->mem)
    return 0;
  p = a->mem;
  a->q = (int8_t *) p;
  p += nq64;
  a->qt = NULL;
  if (transpose) {
    a->qt = (int8_t *) p;
    p += nq64;
  }
  a->qb = NULL;
  if (transpose && biased) {
    a->qb = (int8_t *) p;
    p += nq64;
  }
  a->d = (float *) p;
  a->s32 = (int32_t *) (a->d + ng);
  a->s16 = (int16_t *) (a->s32 + ng);
  for (int r = 0; r < rows; r++) {
    const float *xr = x + (size_t) r * ldx;
    int8_t *q = a->q + (size_t) r * k;
    float *d = a->d + (size_t) r * (k / 32);
    int32_t *s32 = a->s32 + (size_t) r * (k / 32);
    int16_t *s16 = a->s16 + (size_t) r * (k / 16);
#ifdef DFL_X86
    if (simd) {
      quantize_row_act_avx2 (xr, k, q, d, s32, s16);
      if (transpose)
        interleave_row_avx2 (q, k, a->qt + (size_t) r * k);
      continue;
    }
#endif
    quantize_row_act (xr, k, q, d, s32, s16);
    if (transpose)
      for (int c = 0; c + 256 <= k; c += 256)
        for (int i = 0; i < 8; i++)
          for (int j = 0; j < 8; j++)
            memcpy (a->qt + (size_t) r * k + c + 32 * i + 4 * j, q + c + 32 * j + 4 * i, 4);
  }
  if (a->qb)
    for (size_t i = 0; i < nq; i++)
      a->qb[i] = (int8_t) (a->qt[i] ^ 0x80);
  return 1;
}

/* ---- one block in plain C: the reference every path follows ----------- */

static inline float
lanes_sum (const float l[8])
{
  float a0 = l[0] + l[4], a1 = l[1] + l[5], a2 = l[2] + l[6], a3 = l[3] + l[7];
  return (a0 + a2) + (a1 + a3);
}

static inline float
f16 (const void *p)
{
  return dfl_f16_to_f32 (dfl_q_f16 (p));
}

/* Block b (of 32 inputs) of a row of Q8_0 or Q4_0 weights against the
 * row's activations (q: its first input, d, s32: the row's arrays). */
static inline void
block_q8_0 (const DflBlockQ8_0 *w, const int8_t *q, float d, float lane[8], int b)
{
  int32_t isum = 0;

  for (int i = 0; i < 32; i++)
    isum += w->qs[i] * q[i];
  lane[b & 7] = fmaf (f16 (&w->d) * d, (float) isum, lane[b & 7]);
}

static inline void
block_q4_0 (const DflBlockQ4_0 *w, const int8_t *q, float d, int32_t s32, float lane[8], int b)
{
  int32_t isum = 0;

  for (int i = 0; i < 16; i++)
    isum += (w->qs[i] & 15) * q[i] + (w->qs[i] >> 4) * q[i + 16];
  isum -= 8 * s32;
  lane[b & 7] = fmaf (f16 (&w->d) * d, (float) isum, lane[b & 7]);
}

static void
super_q4_k (const DflBlockQ4_K *w, const int8_t *q, const float *d, const int32_t *s32,
            float lane[8])
{
  float dd = f16 (&w->d), dmin = f16 (&w->dmin);

  for (int j = 0; j < 8; j++) {
    const uint8_t *qs = w->qs + 32 * (j / 2);
    int shift = 4 * (j & 1), sc, m;
    int32_t isum = 0;
    float p;

    dfl_q4k_scale_min (w->scales, j, &sc, &m);
    for (int i = 0; i < 32; i++)
      isum += ((qs[i] >> shift) & 15) * q[32 * j + i];
    p = dmin * (float) (m * s32[j]);
    lane[j] = fmaf (d[j], fmaf (dd, (float) (sc * isum), -p), lane[j]);
  }
}

static void
super_q6_k (const DflBlockQ6_K *w, const int8_t *q, const float *d, const int16_t *s16,
            float lane[8])
{
  float dd = f16 (&w->d);

  for (int j = 0; j < 8; j++) {
    int32_t half[2] = { 0, 0 }, isum;
    for (int i = 0; i < 32; i++) {
      int e = 32 * j + i, h = e / 128, k = (e % 128) / 32, l = e % 32;
      int lo = (w->ql[64 * h + 32 * (k & 1) + l] >> (4 * (k >> 1))) & 15;
      int hi = (w->qh[32 * h + l] >> (2 * k)) & 3;
      half[i / 16] += (lo | (hi << 4)) * q[e];
    }
    isum = w->scales[2 * j] * (half[0] - 32 * s16[2 * j])
        + w->scales[2 * j + 1] * (half[1] - 32 * s16[2 * j + 1]);
    lane[j] = fmaf (dd * d[j], (float) isum, lane[j]);
  }
}

/* Blocks [b0, b1) of one weight row into the lanes, in plain C. */
static void
blocks_generic (DflDtype type, const char *wrow, const QAct *a, int r, int b0, int b1,
                float lane[8])
{
  const int8_t *q = a->q + (size_t) r * a->k;
  const float *d = a->d + (size_t) r * (a->k / 32);
  const int32_t *s32 = a->s32 + (size_t) r * (a->k / 32);
  const int16_t *s16 = a->s16 + (size_t) r * (a->k / 16);

  switch (type) {
    case DFL_DTYPE_Q8_0:
      for (int b = b0; b < b1; b++)
        block_q8_0 ((const DflBlockQ8_0 *) wrow + b, q + 32 * b, d[b], lane, b);
      break;
    case DFL_DTYPE_Q4_0:
      for (int b = b0; b < b1; b++)
        block_q4_0 ((const DflBlockQ4_0 *) wrow + b, q + 32 * b, d[b], s32[b], lane, b);
      break;
    case DFL_DTYPE_Q4_K:
      for (int b = b0; b < b1; b += 8)
        super_q4_k ((const DflBlockQ4_K *) wrow + b / 8, q + 32 * b, d + b, s32 + b, lane);
      break;
    case DFL_DTYPE_Q6_K:
    default:
      for (int b = b0; b < b1; b += 8)
        super_q6_k ((const DflBlockQ6_K *) wrow + b / 8, q + 32 * b, d + b, s16 + 2 * b, lane);
      break;
  }
}

static inline void
store_y (float *y, float v, int accumulate)
{
  *y = accumulate ? *y + v : v;
}

static void
outputs_generic (DflDtype type, const char *w, size_t wrow, const QAct *a, int rows, int o0,
                 int o1, float *y, int ldy, int accumulate)
{
  int nb = a->k / 32;

  for (int o = o0; o < o1; o++)
    for (int r = 0; r < rows; r++) {
      float lane[8] = { 0 };
      blocks_generic (type, w + (size_t) o * wrow, a, r, 0, nb, lane);
      store_y (y + (size_t) r * ldy + o, lanes_sum (lane), accumulate);
    }
}

#ifdef DFL_X86
/* ---- AVX2, and AVX-512 VNNI's dot products in the same code ------------
 *
 * Per output and 256 inputs (eight blocks, or one K super-block) the
 * weights are unpacked once into eight vectors of 32 unsigned bytes (Q8_0:
 * on AVX2 their magnitudes, the signs moved onto the activations; on VNNI
 * w + 128, the row's 128 · Σq subtracted in the step), then for each
 * row of the tile: eight block dot products as vectors of eight int32
 * partial sums, reduced to one vector of the eight blocks' sums, and the
 * F32 step of every lane at once. VNNI is the one instruction dpbusd where
 * AVX2 takes maddubs (pairs into int16, never saturating here: at most
 * 2 · 128 · 127) and madd. */

#define VNNI_avx2 0
#define VNNI_vnni 1
#define VNNI __attribute__ ((target ("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

/* Sub-blocks 0 … 7's six-bit scales (bytes 0-7) and mins (8-15) of a
 * Q4_K super-block: dfl_q4k_scale_min on all eight at once, in registers
 * (those of sub-blocks 0-3 are the low six bits of bytes 0-3 and 4-7;
 * those of 4-7 a nibble of bytes 8-11 under the top two bits of 0-3 and
 * 4-7). The 16 bytes read end inside the block's qs. */
AVX2 static inline __m128i
q4k_scales_mins (const uint8_t *scales)
{
  __m128i v = _mm_loadu_si128 ((const __m128i *) scales);
  /* int32 lanes: the low bits of 0-3 and of 4-7, then bytes 8-11 and
   * their high nibbles under bits 6-7 of bytes 0-3 and 4-7 */
  __m128i lo = _mm_and_si128 (v, _mm_set1_epi32 (0x3f3f3f3f));
  __m128i c = _mm_srlv_epi32 (_mm_shuffle_epi32 (v, _MM_SHUFFLE (2, 2, 2, 2)),
                              _mm_setr_epi32 (0, 4, 0, 4));
  __m128i top = _mm_and_si128 (_mm_srli_epi32 (v, 6), _mm_set1_epi32 (0x03030303));
  __m128i hi = _mm_or_si128 (_mm_and_si128 (c, _mm_set1_epi32 (0x0f0f0f0f)),
                             _mm_slli_epi32 (top, 4));
  return _mm_unpacklo_epi32 (lo, hi);
}

/* lanes_sum's tree on a vector of the eight lanes (the same additions in
 * the same order: the same bits) */
AVX2 static inline float
lanes_sum_vec (__m256 l)
{
  __m128 a = _mm_add_ps (_mm256_castps256_ps128 (l), _mm256_extractf128_ps (l, 1));
  __m128 b = _mm_add_ps (a, _mm_movehl_ps (a, a));
  return _mm_cvtss_f32 (_mm_add_ss (b, _mm_movehdup_ps (b)));
}


typedef struct {
  __m256i q[8];      /* unsigned weights (Q8_0: magnitudes, on VNNI w + 128) */
  __m256i sign[8];   /* Q8_0 on AVX2: the signed weights, whose signs go onto x */
  __m256 dw;         /* Q8_0, Q4_0: the blocks' scales */
  __m256 d, dmin;    /* K types: the super-block's scales, broadcast */
  __m256 scf, mf;    /* Q4_K: six-bit scales and mins, exact in F32 */
  __m256i scall;     /* Q6_K: the 16 scales as int16 */
  /* Q6_K: the half-block scales as int32 in the order of sum8's second
   * level (see sum8_halves) */
  __m256i hsc[2];
  /* interleaved (TRANSPOSE_ROWS): vector i holds inputs 4i … 4i + 3 of
   * each block j at bytes 4j … 4j + 3 */
  __m256i qt[8], signt[8];
  __m256i sct[2];    /* Q6_K: for the halves, block j's scale twice at int16 2j, 2j + 1 */
} Unpacked;

/* The 8 × 8 matrix of int32 (row j: block j's 32 bytes by fours) transposed
 * (integer moves only: exact). */
#define TRANSPOSE8(N, A)                                                                \
  A static inline void                                                                 \
  transpose8_##N (const __m256i r[8], __m256i t[8])                                    \
  {                                                                                    \
    __m256i u[8], v[8];                                                                \
    for (int i = 0; i < 8; i += 2) {                                                   \
      u[i] = _mm256_unpacklo_epi32 (r[i], r[i + 1]);                                   \
      u[i + 1] = _mm256_unpackhi_epi32 (r[i], r[i + 1]);                               \
    }                                                                                  \
    for (int i = 0; i < 8; i += 4) {                                                   \
      v[i] = _mm256_unpacklo_epi64 (u[i], u[i + 2]);                                   \
      v[i + 1] = _mm256_unpackhi_epi64 (u[i], u[i + 2]);                               \
      v[i + 2] = _mm256_unpacklo_epi64 (u[i + 1], u[i + 3]);                           \
      v[i + 3] = _mm256_unpackhi_epi64 (u[i + 1], u[i + 3]);                           \
    }                                                                                  \
    for (int i = 0; i < 4; i++) {                                                      \
      t[i] = _mm256_permute2x128_si256 (v[i], v[i + 4], 0x20);                         \
      t[i + 4] = _mm256_permute2x128_si256 (v[i], v[i + 4], 0x31);                     \
    }                                                                                  \
  }
TRANSPOSE8 (avx2, AVX2)

/* the eight vectors' sums, vector j's in lane j (integer: exact) */
#define SUM8(N, A)                                                                        \
  A static inline __m256i                                                              \
  sum8_##N (const __m256i p[8])                                                        \
  {                                                                                    \
    __m256i s01 = _mm256_hadd_epi32 (p[0], p[1]), s23 = _mm256_hadd_epi32 (p[2], p[3]); \
    __m256i s45 = _mm256_hadd_epi32 (p[4], p[5]), s67 = _mm256_hadd_epi32 (p[6], p[7]); \
    __m256i a = _mm256_hadd_epi32 (s01, s23), b = _mm256_hadd_epi32 (s45, s67);         \
    return _mm256_add_epi32 (_mm256_permute2x128_si256 (a, b, 0x20),                   \
                             _mm256_permute2x128_si256 (a, b, 0x31));                  \
  }                                                                                    \
  /* the same with each half block weighed by its scale between the second  \
   * level (per 128 bits, vectors 0-3's or 4-7's sums over that half) and   \
   * the third: two multiplications for the eight vectors (integer: exact) */ \
  A static inline __m256i                                                              \
  sum8_halves_##N (const __m256i p[8], const __m256i hsc[2])                           \
  {                                                                                    \
    __m256i s01 = _mm256_hadd_epi32 (p[0], p[1]), s23 = _mm256_hadd_epi32 (p[2], p[3]); \
    __m256i s45 = _mm256_hadd_epi32 (p[4], p[5]), s67 = _mm256_hadd_epi32 (p[6], p[7]); \
    __m256i a = _mm256_mullo_epi32 (_mm256_hadd_epi32 (s01, s23), hsc[0]);             \
    __m256i b = _mm256_mullo_epi32 (_mm256_hadd_epi32 (s45, s67), hsc[1]);             \
    return _mm256_add_epi32 (_mm256_permute2x128_si256 (a, b, 0x20),                   \
                             _mm256_permute2x128_si256 (a, b, 0x31));                  \
  }

/* Unpack 256 inputs of the row from block b (Q8_0, Q4_0: b … b + 7; K
 * types: the super-block b / 8). Plain loads and byte shuffles: the same
 * for both instruction sets. */
#define UNPACK(N, A)                                                                      \
  A static inline __attribute__ ((always_inline)) void                                 \
  unpack_##N (const DflDtype type, const char *wrow, int b, Unpacked *u)               \
  {                                                                                    \
    const __m256i low4 = _mm256_set1_epi8 (15);                                        \
    if (type == DFL_DTYPE_Q8_0) {                                                      \
      const DflBlockQ8_0 *w = (const DflBlockQ8_0 *) wrow + b;                         \
      uint16_t dh[8];                                                                  \
      _Pragma ("GCC unroll 8")                                                         \
      for (int j = 0; j < 8; j++) {                                                    \
        __m256i v = _mm256_loadu_si256 ((const __m256i *) w[j].qs);                    \
        u->sign[j] = v;                                                                \
        u->q[j] = VNNI_##N ? _mm256_xor_si256 (v, _mm256_set1_epi8 ((char) 0x80))      \
            : _mm256_abs_epi8 (v);                                                     \
        dh[j] = dfl_q_f16 (&w[j].d);                                                   \
      }                                                                                \
      u->dw = _mm256_cvtph_ps (_mm_loadu_si128 ((const __m128i *) dh));                \
    } else if (type == DFL_DTYPE_Q4_0) {                                               \
      const DflBlockQ4_0 *w = (const DflBlockQ4_0 *) wrow + b;                         \
      uint16_t dh[8];                                                                  \
      _Pragma ("GCC unroll 8")                                                         \
      for (int j = 0; j < 8; j++) {                                                    \
        __m128i v = _mm_loadu_si128 ((const __m128i *) w[j].qs);                       \
        __m256i both = _mm256_set_m128i (_mm_srli_epi16 (v, 4), v);                    \
        u->q[j] = _mm256_and_si256 (both, low4);                                       \
        dh[j] = dfl_q_f16 (&w[j].d);                                                   \
      }                                                                                \
      u->dw = _mm256_cvtph_ps (_mm_loadu_si128 ((const __m128i *) dh));                \
    } else if (type == DFL_DTYPE_Q4_K) {                                               \
      const DflBlockQ4_K *w = (const DflBlockQ4_K *) wrow + b / 8;                     \
      _Pragma ("GCC unroll 4")                                                         \
      for (int c = 0; c < 4; c++) {                                                    \
        __m256i v = _mm256_loadu_si256 ((const __m256i *) (w->qs + 32 * c));           \
        u->q[2 * c] = _mm256_and_si256 (v, low4);                                      \
        u->q[2 * c + 1] = _mm256_and_si256 (_mm256_srli_epi16 (v, 4), low4);           \
      }                                                                                \
      {                                                                                \
        __m128i scm = q4k_scales_mins (w->scales);                                     \
        u->scf = _mm256_cvtepi32_ps (_mm256_cvtepu8_epi32 (scm));                      \
        u->mf = _mm256_cvtepi32_ps (_mm256_cvtepu8_epi32 (_mm_srli_si128 (scm, 8)));   \
      }                                                                                \
      {                                                                                \
        /* d and dmin side by side, widened by F16C (exact, as dfl_f16_to_f32) */     \
        uint32_t both;                                                                 \
        __m128 f;                                                                      \
        memcpy (&both, &w->d, 4);                                                      \
        f = _mm_cvtph_ps (_mm_cvtsi32_si128 ((int) both));                             \
        u->d = _mm256_broadcastss_ps (f);                                              \
        u->dmin = _mm256_broadcastss_ps (_mm_movehdup_ps (f));                         \
      }                                                                                \
    } else {                                                                           \
      const DflBlockQ6_K *w = (const DflBlockQ6_K *) wrow + b / 8;                     \
      const __m256i three = _mm256_set1_epi8 (3);                                      \
      _Pragma ("GCC unroll 2")                                                         \
      for (int h = 0; h < 2; h++) {                                                    \
        __m256i l0 = _mm256_loadu_si256 ((const __m256i *) (w->ql + 64 * h));          \
        __m256i l1 = _mm256_loadu_si256 ((const __m256i *) (w->ql + 64 * h + 32));     \
        __m256i hb = _mm256_loadu_si256 ((const __m256i *) (w->qh + 32 * h));          \
        __m256i h0 = _mm256_and_si256 (hb, three);                                     \
        __m256i h1 = _mm256_and_si256 (_mm256_srli_epi16 (hb, 2), three);              \
        __m256i h2 = _mm256_and_si256 (_mm256_srli_epi16 (hb, 4), three);              \
        __m256i h3 = _mm256_and_si256 (_mm256_srli_epi16 (hb, 6), three);              \
        u->q[4 * h] = _mm256_or_si256 (_mm256_and_si256 (l0, low4),                    \
                                       _mm256_slli_epi16 (h0, 4));                     \
        u->q[4 * h + 1] = _mm256_or_si256 (_mm256_and_si256 (l1, low4),                \
                                           _mm256_slli_epi16 (h1, 4));                 \
        u->q[4 * h + 2] = _mm256_or_si256 (_mm256_and_si256 (_mm256_srli_epi16 (l0, 4), low4), \
                                           _mm256_slli_epi16 (h2, 4));                 \
        u->q[4 * h + 3] = _mm256_or_si256 (_mm256_and_si256 (_mm256_srli_epi16 (l1, 4), low4), \
                                           _mm256_slli_epi16 (h3, 4));                 \
      }                                                                                \
      {                                                                                \
        __m128i s8 = _mm_loadu_si128 ((const __m128i *) w->scales);                    \
        /* per 128 bits the four blocks' halves 0, then 1 */                        \
        __m128i e = _mm_shuffle_epi8 (s8, _mm_setr_epi8 (0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, \
                                                         14, 9, 11, 13, 15));           \
        u->scall = _mm256_cvtepi8_epi16 (s8);                                          \
        u->hsc[0] = _mm256_cvtepi8_epi32 (e);                                          \
        u->hsc[1] = _mm256_cvtepi8_epi32 (_mm_srli_si128 (e, 8));                      \
      }                                                                                \
      u->d = _mm256_broadcastss_ps (_mm_cvtph_ps (_mm_cvtsi32_si128 (dfl_q_f16 (&w->d)))); \
    }                                                                                  \
  }

/* 32 unsigned bytes times 32 signed ones, summed by fours into int32:
 * VNNI's dpbusd, or AVX2's maddubs then madd (exact: see above). */
AVX2 static inline __m256i
dot4_avx2 (__m256i u8, __m256i s8)
{
  return _mm256_madd_epi16 (_mm256_maddubs_epi16 (u8, s8), _mm256_set1_epi16 (1));
}

VNNI static inline __m256i
dot4_vnni (__m256i u8, __m256i s8)
{
  return _mm256_dpbusd_epi32 (_mm256_setzero_si256 (), u8, s8);
}

/* One row of the tile against the unpacked 256 inputs: its lanes (F32 ×8)
 * take the eight blocks' contributions from their integer sums (lane j
 * block j's). d, s32, s16: the row's arrays at the first block. */
#define STEP(N, A)                                                                     \
  A static inline __attribute__ ((always_inline)) __m256                               \
  step_##N (const DflDtype type, const Unpacked *u, __m256i isum, const float *d,      \
            const int32_t *s32, const int16_t *s16, __m256 lane)                       \
  {                                                                                    \
    __m256 dx = _mm256_loadu_ps (d);                                                   \
    if (type == DFL_DTYPE_Q8_0) {                                                      \
      if (VNNI_##N) {                                                                  \
        __m256i off = _mm256_slli_epi32 (_mm256_loadu_si256 ((const __m256i *) s32), 7); \
        isum = _mm256_sub_epi32 (isum, off);                                           \
      }                                                                                \
      return _mm256_fmadd_ps (_mm256_mul_ps (u->dw, dx), _mm256_cvtepi32_ps (isum), lane); \
    } else if (type == DFL_DTYPE_Q4_0) {                                               \
      __m256i off = _mm256_slli_epi32 (_mm256_loadu_si256 ((const __m256i *) s32), 3); \
      isum = _mm256_sub_epi32 (isum, off);                                             \
      return _mm256_fmadd_ps (_mm256_mul_ps (u->dw, dx), _mm256_cvtepi32_ps (isum), lane); \
    } else if (type == DFL_DTYPE_Q4_K) {                                               \
      /* sc · isum and m · Σq as exact F32 products (see step_pair) */               \
      __m256 su = _mm256_mul_ps (_mm256_cvtepi32_ps (isum), u->scf);                   \
      __m256 x32 = _mm256_cvtepi32_ps (_mm256_loadu_si256 ((const __m256i *) s32));    \
      __m256 pm = _mm256_mul_ps (u->dmin, _mm256_mul_ps (u->mf, x32));                 \
      return _mm256_fmadd_ps (dx, _mm256_fmsub_ps (u->d, su, pm), lane);               \
    } else {                                                                           \
      /* the offset 32: Σ over each block of (scale of the half · its Σq) */          \
      __m256i corr = _mm256_madd_epi16 (u->scall,                                      \
                                        _mm256_loadu_si256 ((const __m256i *) s16));   \
      isum = _mm256_sub_epi32 (isum, _mm256_slli_epi32 (corr, 5));                     \
      return _mm256_fmadd_ps (_mm256_mul_ps (u->d, dx), _mm256_cvtepi32_ps (isum), lane); \
    }                                                                                  \
  }

/* The eight blocks' integer sums of a row (q: its activations at the
 * first block), block by block: eight dot products, then a reduction. */
#define ISUM(N, A)                                                                     \
  A static inline __attribute__ ((always_inline)) __m256i                              \
  isum_##N (const DflDtype type, const Unpacked *u, const int8_t *q, const int vnni)   \
  {                                                                                    \
    __m256i p[8];                                                                      \
    if (!vnni && (type == DFL_DTYPE_Q4_0 || type == DFL_DTYPE_Q4_K)) {                 \
      /* maddubs' int16 pair sums (at most 2 · 15 · 127) added pairwise    \
       * in int16 up to a half block (16 inputs: at most 30480, no wrap),  \
       * the halves then widened: fewer steps than madd and an int32 tree */ \
      __m256i l[4], m0, m1, n;                                                         \
      _Pragma ("GCC unroll 8")                                                         \
      for (int j = 0; j < 8; j++)                                                      \
        p[j] = _mm256_maddubs_epi16 (u->q[j],                                          \
                                     _mm256_load_si256 ((const __m256i *) (q + 32 * j))); \
      _Pragma ("GCC unroll 4")                                                         \
      for (int j = 0; j < 4; j++)                                                      \
        l[j] = _mm256_hadd_epi16 (p[2 * j], p[2 * j + 1]);                             \
      m0 = _mm256_hadd_epi16 (l[0], l[1]);                                             \
      m1 = _mm256_hadd_epi16 (l[2], l[3]);                                             \
      n = _mm256_hadd_epi16 (m0, m1);                                                  \
      return _mm256_add_epi32 (_mm256_cvtepi16_epi32 (_mm256_castsi256_si128 (n)),     \
                               _mm256_cvtepi16_epi32 (_mm256_extracti128_si256 (n, 1))); \
    }                                                                                  \
    _Pragma ("GCC unroll 8")                                                           \
    for (int j = 0; j < 8; j++) {                                                      \
      __m256i x = _mm256_load_si256 ((const __m256i *) (q + 32 * j));                  \
      if (type == DFL_DTYPE_Q8_0 && !vnni)                                             \
        p[j] = dot4_##N (u->q[j], _mm256_sign_epi8 (x, u->sign[j]));                   \
      else                                                                             \
        p[j] = dot4_##N (u->q[j], x);                                                  \
    }                                                                                  \
    /* Q6_K: each half block weighed by its scale within the reduction */   \
    return type == DFL_DTYPE_Q6_K ? sum8_halves_##N (p, u->hsc) : sum8_##N (p);         \
  }

/* The same from the interleaved layouts (qt: the row's interleaved
 * activations at the first block), on AVX2 (AVX-512 VNNI's are
 * sums_interleaved): vector i's lane j holds four inputs of block j, so the
 * sums are vertical. Where the int16 pair sums of maddubs cannot overflow
 * when added (Q4_0, Q4_K: at most 8 · 3810; Q6_K's by twos: 2 · 16002)
 * they are added before widening. */
#define ISUMT(N, A)                                                                    \
  A static inline __attribute__ ((always_inline)) __m256i                              \
  isumt_##N (const DflDtype type, const Unpacked *u, const int8_t *qt)                 \
  {                                                                                    \
    __m256i x[8];                                                                      \
    _Pragma ("GCC unroll 8")                                                           \
    for (int i = 0; i < 8; i++)                                                        \
      x[i] = _mm256_load_si256 ((const __m256i *) (qt + 32 * i));                      \
    if (type == DFL_DTYPE_Q8_0) {                                                      \
      __m256i acc = dot4_##N (u->qt[0], _mm256_sign_epi8 (x[0], u->signt[0]));         \
      _Pragma ("GCC unroll 7")                                                         \
      for (int i = 1; i < 8; i++)                                                      \
        acc = _mm256_add_epi32 (acc, dot4_##N (u->qt[i], _mm256_sign_epi8 (x[i], u->signt[i]))); \
      return acc;                                                                      \
    }                                                                                  \
    if (type == DFL_DTYPE_Q6_K) {                                                      \
      __m256i acc = _mm256_setzero_si256 ();                                           \
      _Pragma ("GCC unroll 4")                                                         \
      for (int i = 0; i < 8; i += 2) {                                                 \
        __m256i s = _mm256_add_epi16 (_mm256_maddubs_epi16 (u->qt[i], x[i]),           \
                                      _mm256_maddubs_epi16 (u->qt[i + 1], x[i + 1]));  \
        acc = _mm256_add_epi32 (acc, _mm256_madd_epi16 (s, u->sct[i / 4]));            \
      }                                                                                \
      return acc;                                                                      \
    }                                                                                  \
    {                                                                                  \
      __m256i s = _mm256_maddubs_epi16 (u->qt[0], x[0]);                               \
      _Pragma ("GCC unroll 7")                                                         \
      for (int i = 1; i < 8; i++)                                                      \
        s = _mm256_add_epi16 (s, _mm256_maddubs_epi16 (u->qt[i], x[i]));               \
      return _mm256_madd_epi16 (s, _mm256_set1_epi16 (1));                             \
    }                                                                                  \
  }

/* The rows of a tile from the interleaved layouts (where the path has them,
 * T = 1, and the call laid them out), else (T = 0, or too few rows) from
 * the layouts as stored. */
#define ROWS_INTERLEAVED_1(N)                                                          \
  if (a->qt) {                                                                         \
    interleave_##N (type, &u);                                                         \
    for (int i = 0; i < nr; i++) {                                                     \
      size_t r = (size_t) (r0 + i);                                                    \
      __m256i isum = isumt_##N (type, &u, a->qt + r * a->k + 32 * b);                  \
      lanes[i] = step_##N (type, &u, isum, a->d + r * g + b, a->s32 + r * g + b,       \
                           a->s16 + r * 2 * g + 2 * b, lanes[i]);                      \
    }                                                                                  \
  } else
#define ROWS_INTERLEAVED_0(N)

/* Outputs [o0, o1) of every row, a tile of up to ROW_TILE rows at a time:
 * per output the lanes of the tile's rows, the weights unpacked once per
 * 256 inputs; the blocks past the last whole 256 (Q8_0 and Q4_0 rows of
 * other lengths) in plain C into the same lanes. */
#define OUTPUTS(N, A, T)                                                                   \
  A static inline __attribute__ ((always_inline)) void                                 \
  outputs_kernel_##N (const DflDtype type, const char *w, size_t wrow, const QAct *a,  \
                      int rows, int o0, int o1, float *y, int ldy, int accumulate)     \
  {                                                                                    \
    int nb = a->k / 32, nb8 = nb & ~7, g = a->k / 32;                                  \
    /* bytes of 256 weights */                                                        \
    size_t chunk = dfl_dtype_block_bytes (type) * (256 / dfl_dtype_block_elems (type)); \
    for (int o = o0; o < o1; o++) {                                                    \
      const char *wo = w + (size_t) o * wrow;                                          \
      for (int r0 = 0; r0 < rows; r0 += ROW_TILE) {                                    \
        int nr = DFL_MIN (ROW_TILE, rows - r0);                                        \
        __m256 lanes[ROW_TILE];                                                        \
        for (int i = 0; i < nr; i++)                                                   \
          lanes[i] = _mm256_setzero_ps ();                                             \
        for (int b = 0; b < nb8; b += 8) {                                             \
          Unpacked u;                                                                  \
          /* the same bytes two outputs on, asked of the memory ahead: the    \
           * rows of outputs follow one another (a thread's span runs on past \
           * o1; past the matrix a prefetch fetches nothing), and a row alone \
           * is bound by reading them. One output on, and not past o1, one    \
           * row of Q6_K 1024 → 3072 took 0.110–0.117 ms on two AVX2 cores;   \
           * two on, 0.093–0.099. The address is formed as an integer: it   \
           * may lie past the matrix. */                                      \
          for (size_t l = 0; l < chunk; l += 64)                                       \
            _mm_prefetch ((const char *) ((uintptr_t) wo + 2 * wrow                    \
                                          + chunk * (size_t) (b / 8) + l), _MM_HINT_T0); \
          unpack_##N (type, wo, b, &u);                                                \
          ROWS_INTERLEAVED_##T (N)                                                     \
          {                                                                            \
            for (int i = 0; i < nr; i++) {                                             \
              size_t r = (size_t) (r0 + i);                                            \
              __m256i isum = isum_##N (type, &u, a->q + r * a->k + 32 * b, VNNI_##N);  \
              lanes[i] = step_##N (type, &u, isum, a->d + r * g + b, a->s32 + r * g + b, \
                                   a->s16 + r * 2 * g + 2 * b, lanes[i]);              \
            }                                                                          \
          }                                                                            \
        }                                                                              \
        for (int i = 0; i < nr; i++) {                                                 \
          float l[8], sum;                                                             \
          if (nb8 < nb) {                                                              \
            _mm256_storeu_ps (l, lanes[i]);                                            \
            blocks_generic (type, wo, a, r0 + i, nb8, nb, l);                          \
            sum = lanes_sum (l);                                                       \
          } else {                                                                     \
            sum = lanes_sum_vec (lanes[i]);                                            \
          }                                                                            \
          store_y (y + (size_t) (r0 + i) * ldy + o, sum, accumulate);                  \
        }                                                                              \
      }                                                                                \
    }                                                                                  \
  }                                                                                    \
  A static void                                                                        \
  outputs_##N (DflDtype type, const char *w, size_t wrow, const QAct *a, int rows, int o0, \
               int o1, float *y, int ldy, int accumulate)                              \
  {                                                                                    \
    /* a decode step's one row, compiled as such: its lanes stay in a        \
     * register (Q6_K, which is not packed, 0.12 against 0.16 ms for        \
     * 1024 → 3072 on two AVX2 cores, with the scales' change above) */      \
    if (rows == 1 && type == DFL_DTYPE_Q6_K) {                                         \
      outputs_kernel_##N (DFL_DTYPE_Q6_K, w, wrow, a, 1, o0, o1, y, ldy, accumulate);  \
      return;                                                                          \
    }                                                                                  \
    switch (type) {                                                                    \
      case DFL_DTYPE_Q8_0:                                                             \
        outputs_kernel_##N (DFL_DTYPE_Q8_0, w, wrow, a, rows, o0, o1, y, ldy, accumulate); \
        break;                                                                         \
      case DFL_DTYPE_Q4_0:                                                             \
        outputs_kernel_##N (DFL_DTYPE_Q4_0, w, wrow, a, rows, o0, o1, y, ldy, accumulate); \
        break;                                                                         \
      case DFL_DTYPE_Q4_K:                                                             \
        outputs_kernel_##N (DFL_DTYPE_Q4_K, w, wrow, a, rows, o0, o1, y, ldy, accumulate); \
        break;                                                                         \
      case DFL_DTYPE_Q6_K:                                                             \
      default:                                                                         \
        outputs_kernel_##N (DFL_DTYPE_Q6_K, w, wrow, a, rows, o0, o1, y, ldy, accumulate); \
        break;                                                                         \
    }                                                                                  \
  }

/* The weights of an unpacked 256 interleaved as the activations are
 * (TRANSPOSE_ROWS), and Q6_K's scales set out for that layout. */
#define INTERLEAVE(N, A)                                                               \
  A static inline __attribute__ ((always_inline)) void                                 \
  interleave_##N (const DflDtype type, Unpacked *u)                                    \
  {                                                                                    \
    transpose8_##N (u->q, u->qt);                                                      \
    if (type == DFL_DTYPE_Q8_0)                                                        \
      transpose8_##N (u->sign, u->signt);                                              \
    if (type == DFL_DTYPE_Q6_K) {                                                      \
      int16_t sc[2][16];                                                               \
      _mm256_storeu_si256 ((__m256i *) sc[0], u->scall);                               \
      for (int h = 0; h < 2; h++) {                                                    \
        int16_t t[16];                                                                 \
        for (int j = 0; j < 8; j++)                                                    \
          t[2 * j] = t[2 * j + 1] = sc[0][2 * j + h];                                  \
        u->sct[h] = _mm256_loadu_si256 ((const __m256i *) t);                          \
      }                                                                                \
    }                                                                                  \
  }

/* AVX-512 VNNI's 256-bit code serves only the rows too few to interleave
 * (its interleaved rows are two outputs at a time, below) */
SUM8 (avx2, AVX2) UNPACK (avx2, AVX2) STEP (avx2, AVX2) ISUM (avx2, AVX2) ISUMT (avx2, AVX2)
INTERLEAVE (avx2, AVX2) OUTPUTS (avx2, AVX2, 1)
SUM8 (vnni, VNNI) UNPACK (vnni, VNNI) STEP (vnni, VNNI) ISUM (vnni, VNNI) OUTPUTS (vnni, VNNI, 0)

/* ---- AVX-512 VNNI on 512 bits: the interleaved rows, two outputs at once
 *
 * From TRANSPOSE_ROWS rows on, a 512-bit vector holds the interleaved
 * 256 inputs of two outputs (the first output's eight blocks in the low
 * half), each row's interleaved activations broadcast to both halves: one
 * dpbusd takes four inputs of 16 blocks, and the F32 steps of both
 * outputs' eight blocks are one. Q8_0 meets dpbusd's unsigned operand by
 * the activations q + 128 (QAct.qb), the extra 128 · Σ w of each block
 * subtracted as an integer; Q6_K's halves by dpbusd, then weighed by their
 * scales. The sums stay exact and the steps are the plain-C ones, so the
 * bits are every path's. */

#define ZJOIN_PS(lo, hi)                                                                \
  _mm512_castpd_ps (_mm512_insertf64x4 (_mm512_castpd256_pd512 (_mm256_castps_pd (lo)), \
                                        _mm256_castps_pd (hi), 1))

typedef struct {
  /* vector i: inputs 4i … 4i + 3 of each block (Q8_0 signed), the first
   * output's blocks in int32 0 … 7, the second's in 8 … 15 */
  __m512i t[8];
  __m512i qbias;      /* Q8_0: −128 · Σ w of each block */
  __m512 dw;          /* Q8_0, Q4_0: the blocks' scales */
  __m512 d, dmin;     /* K types: each output's super-block scales */
  __m512 scf, mf;     /* Q4_K: six-bit scales and mins, exact in F32 */
  __m512i sc16;       /* Q6_K: each output's 16 scales as int16, for the offset */
  __m512i hsc[2];     /* Q6_K: each block's half h scale as int32 */
} Pair;

/* The pair's scales for the 256 inputs from block b. */
VNNI static inline __attribute__ ((always_inline)) void
pair_scales (const DflDtype type, const char *const wo[2], int b, Pair *p)
{
  if (type == DFL_DTYPE_Q8_0 || type == DFL_DTYPE_Q4_0) {
    uint16_t dh[16];
    _Pragma ("GCC unroll 2")
    for (int o = 0; o < 2; o++)
      _Pragma ("GCC unroll 8")
      for (int j = 0; j < 8; j++)
        dh[8 * o + j] = type == DFL_DTYPE_Q8_0
            ? dfl_q_f16 (&((const DflBlockQ8_0 *) wo[o] + b + j)->d)
            : dfl_q_f16 (&((const DflBlockQ4_0 *) wo[o] + b + j)->d);
    p->dw = _mm512_cvtph_ps (_mm256_loadu_si256 ((const __m256i *) dh));
  } else if (type == DFL_DTYPE_Q4_K) {
    const DflBlockQ4_K *w0 = (const DflBlockQ4_K *) wo[0] + b / 8;
    const DflBlockQ4_K *w1 = (const DflBlockQ4_K *) wo[1] + b / 8;
    __m128i scm0 = q4k_scales_mins (w0->scales), scm1 = q4k_scales_mins (w1->scales);
    p->scf = _mm512_cvtepi32_ps (_mm512_cvtepu8_epi32 (_mm_unpacklo_epi64 (scm0, scm1)));
    p->mf = _mm512_cvtepi32_ps (_mm512_cvtepu8_epi32 (_mm_unpackhi_epi64 (scm0, scm1)));
    p->d = ZJOIN_PS (_mm256_set1_ps (f16 (&w0->d)), _mm256_set1_ps (f16 (&w1->d)));
    p->dmin = ZJOIN_PS (_mm256_set1_ps (f16 (&w0->dmin)), _mm256_set1_ps (f16 (&w1->dmin)));
  } else {
    const DflBlockQ6_K *w0 = (const DflBlockQ6_K *) wo[0] + b / 8;
    const DflBlockQ6_K *w1 = (const DflBlockQ6_K *) wo[1] + b / 8;
    /* the even scales (the blocks' first halves), then the odd ones */
    const __m128i eo = _mm_setr_epi8 (0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    __m128i s0 = _mm_loadu_si128 ((const __m128i *) w0->scales);
    __m128i s1 = _mm_loadu_si128 ((const __m128i *) w1->scales);
    __m128i e0 = _mm_shuffle_epi8 (s0, eo), e1 = _mm_shuffle_epi8 (s1, eo);
    p->sc16 = _mm512_cvtepi8_epi16 (_mm256_set_m128i (s1, s0));
    p->hsc[0] = _mm512_cvtepi8_epi32 (_mm_unpacklo_epi64 (e0, e1));
    p->hsc[1] = _mm512_cvtepi8_epi32 (_mm_unpackhi_epi64 (e0, e1));
    p->d = ZJOIN_PS (_mm256_set1_ps (f16 (&w0->d)), _mm256_set1_ps (f16 (&w1->d)));
  }
}

/* An output's 256 weights from block b as stored: vector k holds its
 * blocks 2k and 2k + 1 (unsigned; Q8_0's signed). */
VNNI static inline __attribute__ ((always_inline)) void
unpack_stored (const DflDtype type, const char *wrow, int b, __m512i v[4])
{
  const __m512i low4 = _mm512_set1_epi8 (15);

  if (type == DFL_DTYPE_Q8_0) {
    const DflBlockQ8_0 *w = (const DflBlockQ8_0 *) wrow + b;
    _Pragma ("GCC unroll 4")
    for (int k = 0; k < 4; k++)
      v[k] = _mm512_inserti64x4 (
          _mm512_castsi256_si512 (_mm256_loadu_si256 ((const __m256i *) w[2 * k].qs)),
          _mm256_loadu_si256 ((const __m256i *) w[2 * k + 1].qs), 1);
  } else if (type == DFL_DTYPE_Q4_0) {
    const DflBlockQ4_0 *w = (const DflBlockQ4_0 *) wrow + b;
    _Pragma ("GCC unroll 4")
    for (int k = 0; k < 4; k++) {
      __m128i a = _mm_loadu_si128 ((const __m128i *) w[2 * k].qs);
      __m128i c = _mm_loadu_si128 ((const __m128i *) w[2 * k + 1].qs);
      __m512i both = _mm512_inserti64x4 (
          _mm512_castsi256_si512 (_mm256_set_m128i (_mm_srli_epi16 (a, 4), a)),
          _mm256_set_m128i (_mm_srli_epi16 (c, 4), c), 1);
      v[k] = _mm512_and_si512 (both, low4);
    }
  } else if (type == DFL_DTYPE_Q4_K) {
    const DflBlockQ4_K *w = (const DflBlockQ4_K *) wrow + b / 8;
    _Pragma ("GCC unroll 4")
    for (int c = 0; c < 4; c++) {
      __m256i a = _mm256_loadu_si256 ((const __m256i *) (w->qs + 32 * c));
      v[c] = _mm512_and_si512 (
          _mm512_inserti64x4 (_mm512_castsi256_si512 (a), _mm256_srli_epi16 (a, 4), 1), low4);
    }
  } else {
    const DflBlockQ6_K *w = (const DflBlockQ6_K *) wrow + b / 8;
    const __m512i three = _mm512_set1_epi8 (3);
    _Pragma ("GCC unroll 2")
    for (int h = 0; h < 2; h++) {
      /* sub-blocks 4h, 4h + 1: the low nibbles of ql[64h …], with bits 0
       * and 2 of qh[32h …]; 4h + 2, 4h + 3: the high nibbles, bits 4, 6 */
      __m512i l = _mm512_loadu_si512 ((const void *) (w->ql + 64 * h));
      __m512i hb = _mm512_broadcast_i64x4 (_mm256_loadu_si256 ((const __m256i *) (w->qh + 32 * h)));
      __m512i h01 = _mm512_srlv_epi64 (hb, _mm512_setr_epi64 (0, 0, 0, 0, 2, 2, 2, 2));
      __m512i h23 = _mm512_srlv_epi64 (hb, _mm512_setr_epi64 (4, 4, 4, 4, 6, 6, 6, 6));
      v[2 * h] = _mm512_or_si512 (_mm512_and_si512 (l, low4),
                                  _mm512_slli_epi16 (_mm512_and_si512 (h01, three), 4));
      v[2 * h + 1] = _mm512_or_si512 (_mm512_and_si512 (_mm512_srli_epi16 (l, 4), low4),
                                      _mm512_slli_epi16 (_mm512_and_si512 (h23, three), 4));
    }
  }
}

/* The pair's weights interleaved (Pair.t) from the two outputs' stored
 * vectors: in each half an 8 × 8 transposition of int32, as
 * transpose8_avx2's (integer moves only: exact); Q8_0's bias from them. */
VNNI static inline __attribute__ ((always_inline)) void
interleave_pair (const DflDtype type, const __m512i v[2][4], Pair *p)
{
  const __m512i lo = _mm512_setr_epi64 (0, 1, 8, 9, 4, 5, 12, 13);
  const __m512i hi = _mm512_setr_epi64 (2, 3, 10, 11, 6, 7, 14, 15);
  __m512i r[8], u[8], s[8];

  /* r[j]: block j of the first output, then of the second */
  _Pragma ("GCC unroll 4")
  for (int k = 0; k < 4; k++) {
    r[2 * k] = _mm512_shuffle_i64x2 (v[0][k], v[1][k], _MM_SHUFFLE (1, 0, 1, 0));
    r[2 * k + 1] = _mm512_shuffle_i64x2 (v[0][k], v[1][k], _MM_SHUFFLE (3, 2, 3, 2));
  }
  _Pragma ("GCC unroll 4")
  for (int i = 0; i < 8; i += 2) {
    u[i] = _mm512_unpacklo_epi32 (r[i], r[i + 1]);
    u[i + 1] = _mm512_unpackhi_epi32 (r[i], r[i + 1]);
  }
  _Pragma ("GCC unroll 2")
  for (int i = 0; i < 8; i += 4) {
    s[i] = _mm512_unpacklo_epi64 (u[i], u[i + 2]);
    s[i + 1] = _mm512_unpackhi_epi64 (u[i], u[i + 2]);
    s[i + 2] = _mm512_unpacklo_epi64 (u[i + 1], u[i + 3]);
    s[i + 3] = _mm512_unpackhi_epi64 (u[i + 1], u[i + 3]);
  }
  _Pragma ("GCC unroll 4")
  for (int i = 0; i < 4; i++) {
    p->t[i] = _mm512_permutex2var_epi64 (s[i], lo, s[i + 4]);
    p->t[i + 4] = _mm512_permutex2var_epi64 (s[i], hi, s[i + 4]);
  }
  if (type == DFL_DTYPE_Q8_0) {
    __m512i sum = _mm512_setzero_si512 ();
    _Pragma ("GCC unroll 8")
    for (int i = 0; i < 8; i++)
      sum = _mm512_dpbusd_epi32 (sum, _mm512_set1_epi8 ((char) 0x80), p->t[i]);
    p->qbias = _mm512_sub_epi32 (_mm512_setzero_si512 (), sum);
  }
}

/* One row's integer sums of the pair's 16 blocks (xt: the row's
 * interleaved activations at the first block, Q8_0's biased), output o's
 * block j in int32 8o + j. */
VNNI static inline __attribute__ ((always_inline)) __m512i
sums_interleaved (const DflDtype type, const Pair *p, const int8_t *xt)
{
  __m512i x[8], acc[2] = { _mm512_setzero_si512 (), _mm512_setzero_si512 () };

  _Pragma ("GCC unroll 8")
  for (int i = 0; i < 8; i++)
    x[i] = _mm512_broadcast_i64x4 (_mm256_load_si256 ((const __m256i *) (xt + 32 * i)));
  if (type == DFL_DTYPE_Q8_0) {
    acc[0] = p->qbias;
    _Pragma ("GCC unroll 8")
    for (int i = 0; i < 8; i++)
      acc[i & 1] = _mm512_dpbusd_epi32 (acc[i & 1], x[i], p->t[i]);
    return _mm512_add_epi32 (acc[0], acc[1]);
  }
  if (type == DFL_DTYPE_Q6_K) {
    /* vectors 0-3 hold the blocks' first halves, 4-7 their second (each
     * half's sum times its int8 scale stays far inside int32) */
    _Pragma ("GCC unroll 8")
    for (int i = 0; i < 8; i++)
      acc[i / 4] = _mm512_dpbusd_epi32 (acc[i / 4], p->t[i], x[i]);
    return _mm512_add_epi32 (_mm512_mullo_epi32 (acc[0], p->hsc[0]),
                             _mm512_mullo_epi32 (acc[1], p->hsc[1]));
  }
  _Pragma ("GCC unroll 8")
  for (int i = 0; i < 8; i++)
    acc[i & 1] = _mm512_dpbusd_epi32 (acc[i & 1], p->t[i], x[i]);
  return _mm512_add_epi32 (acc[0], acc[1]);
}

/* A row's 16 lanes (two outputs' eight) take the blocks' contributions
 * from their integer sums, all at once by the plain-C operations. d, s32,
 * s16: the row's arrays at the first block. Q4_K's sc · isum and m · Σq are
 * integers below 2^24 (at most 63 · 32 · 15 · 127), so F32 products of
 * their exact F32 factors are exact: the integer products' values. */
VNNI static inline __attribute__ ((always_inline)) __m512
step_pair (const DflDtype type, const Pair *p, __m512i isum, const float *d, const int32_t *s32,
           const int16_t *s16, __m512 lane)
{
  __m512 dx = _mm512_castsi512_ps (_mm512_broadcast_i64x4 (_mm256_loadu_si256 ((const __m256i *) d)));

  if (type == DFL_DTYPE_Q8_0)
    return _mm512_fmadd_ps (_mm512_mul_ps (p->dw, dx), _mm512_cvtepi32_ps (isum), lane);
  if (type == DFL_DTYPE_Q4_0) {
    __m512i x32 = _mm512_broadcast_i64x4 (_mm256_loadu_si256 ((const __m256i *) s32));
    isum = _mm512_sub_epi32 (isum, _mm512_slli_epi32 (x32, 3));
    return _mm512_fmadd_ps (_mm512_mul_ps (p->dw, dx), _mm512_cvtepi32_ps (isum), lane);
  }
  if (type == DFL_DTYPE_Q4_K) {
    __m512i x32 = _mm512_broadcast_i64x4 (_mm256_loadu_si256 ((const __m256i *) s32));
    __m512 su = _mm512_mul_ps (_mm512_cvtepi32_ps (isum), p->scf);
    __m512 pm = _mm512_mul_ps (p->dmin, _mm512_mul_ps (p->mf, _mm512_cvtepi32_ps (x32)));
    return _mm512_fmadd_ps (dx, _mm512_fmsub_ps (p->d, su, pm), lane);
  }
  {
    /* the offset 32: Σ over each block of (scale of the half · its Σq) */
    __m512i x16 = _mm512_broadcast_i64x4 (_mm256_loadu_si256 ((const __m256i *) s16));
    __m512i corr = _mm512_madd_epi16 (p->sc16, x16);
    isum = _mm512_sub_epi32 (isum, _mm512_slli_epi32 (corr, 5));
    return _mm512_fmadd_ps (_mm512_mul_ps (p->d, dx), _mm512_cvtepi32_ps (isum), lane);
  }
}

/* Outputs [o0, o1) of every row from the interleaved layouts, two at a
 * time (an odd last one beside itself, the copy not stored), a tile of up
 * to ROW_TILE rows at a time. */
VNNI static inline __attribute__ ((always_inline)) void
outputs_kernel_pairs (const DflDtype type, const char *w, size_t wrow, const QAct *a, int rows,
                      int o0, int o1, float *y, int ldy, int accumulate)
{
  int nb = a->k / 32, nb8 = nb & ~7, g = a->k / 32;
  size_t chunk = dfl_dtype_block_bytes (type) * (256 / dfl_dtype_block_elems (type));
  const int8_t *xt = type == DFL_DTYPE_Q8_0 ? a->qb : a->qt;

  for (int o = o0; o < o1; o += 2) {
    int two = o + 1 < o1;
    const char *wo[2] = { w + (size_t) o * wrow, w + (size_t) (o + two) * wrow };
    for (int r0 = 0; r0 < rows; r0 += ROW_TILE) {
      int nr = DFL_MIN (ROW_TILE, rows - r0);
      __m512 lanes[ROW_TILE];
      for (int i = 0; i < nr; i++)
        lanes[i] = _mm512_setzero_ps ();
      for (int b = 0; b < nb8; b += 8) {
        Pair p;
        __m512i v[2][4];
        /* the next pair's same bytes, two rows ahead (see outputs_kernel) */
        for (int n = 2; n < 4 && o + n < o1; n++)
          for (size_t l = 0; l < chunk; l += 64)
            _mm_prefetch (wo[0] + n * wrow + chunk * (size_t) (b / 8) + l, _MM_HINT_T0);
        unpack_stored (type, wo[0], b, v[0]);
        unpack_stored (type, wo[1], b, v[1]);
        pair_scales (type, wo, b, &p);
        interleave_pair (type, v, &p);
        for (int i = 0; i < nr; i++) {
          size_t r = (size_t) (r0 + i);
          __m512i isum = sums_interleaved (type, &p, xt + r * a->k + 32 * b);
          lanes[i] = step_pair (type, &p, isum, a->d + r * g + b, a->s32 + r * g + b,
                                a->s16 + r * 2 * g + 2 * b, lanes[i]);
        }
      }
      for (int i = 0; i < nr; i++) {
        float l[16];
        if (nb8 < nb)
          _mm512_storeu_ps (l, lanes[i]);
        for (int n = 0; n <= two; n++) {
          float sum;
          if (nb8 < nb) {
            blocks_generic (type, wo[n], a, r0 + i, nb8, nb, l + 8 * n);
            sum = lanes_sum (l + 8 * n);
          } else {
            __m512d both = _mm512_castps_pd (lanes[i]);
            sum = lanes_sum_vec (_mm256_castpd_ps (n ? _mm512_extractf64x4_pd (both, 1)
                                                     : _mm512_castpd512_pd256 (both)));
          }
          store_y (y + (size_t) (r0 + i) * ldy + o + n, sum, accumulate);
        }
      }
    }
  }
}

VNNI static void
outputs_pairs (DflDtype type, const char *w, size_t wrow, const QAct *a, int rows, int o0, int o1,
               float *y, int ldy, int accumulate)
{
  switch (type) {
    case DFL_DTYPE_Q8_0:
      outputs_kernel_pairs (DFL_DTYPE_Q8_0, w, wrow, a, rows, o0, o1, y, ldy, accumulate);
      break;
    case DFL_DTYPE_Q4_0:
      outputs_kernel_pairs (DFL_DTYPE_Q4_0, w, wrow, a, rows, o0, o1, y, ldy, accumulate);
      break;
    case DFL_DTYPE_Q4_K:
      outputs_kernel_pairs (DFL_DTYPE_Q4_K, w, wrow, a, rows, o0, o1, y, ldy, accumulate);
      break;
    case DFL_DTYPE_Q6_K:
    default:
      outputs_kernel_pairs (DFL_DTYPE_Q6_K, w, wrow, a, rows, o0, o1, y, ldy, accumulate);
      break;
  }
}

#endif

/* ---- which path -------------------------------------------------------- */

typedef enum { QPATH_GENERIC, QPATH_AVX2, QPATH_VNNI } QPath;

int
dfl_quant_has_vnni (void)
{
#ifdef DFL_X86
  static int vnni = -1;
  if (vnni < 0) {
    unsigned a, b, c, d;
    __builtin_cpu_init ();
    /* the builtin checks that the OS saves the AVX-512 state; CPUID leaf
     * 7's ECX bit 11 is AVX512_VNNI */
    vnni = __builtin_cpu_supports ("avx512f") && __builtin_cpu_supports ("avx512bw")
        && __builtin_cpu_supports ("avx512vl") && __get_cpuid_count (7, 0, &a, &b, &c, &d)
        && (c & (1u << 11));
  }
  return vnni;
#else
  return 0;
#endif
}

/* The kernels' instruction set (dfl_kernels_isa) decides: AVX-512 takes
 * the VNNI path where the CPU has VNNI, else AVX2's. */
static QPath
quant_path (void)
{
  switch (dfl_kernels_isa ()) {
    case DFL_KERNELS_AVX512:
      return dfl_quant_has_vnni () ? QPATH_VNNI : QPATH_AVX2;
    case DFL_KERNELS_AVX2:
      return QPATH_AVX2;
    default:
      return QPATH_GENERIC;
  }
}

const char *
dfl_quant_path_name (void)
{
  switch (quant_path ()) {
    case QPATH_VNNI:
      return "AVX-512 VNNI";
    case QPATH_AVX2:
      return "AVX2";
    case QPATH_GENERIC:
    default:
      return "generic";
  }
}

/* Most threads whose spans a call keeps apart. */
#define MAX_SPANS 64

/* The blocks of outputs [next, end) a thread takes first, in order; a
 * cache line each, so that one thread's claims do not take the line from
 * under the other's (side by side, one row of Q4_0 1024 → 1024 took
 * 0.014–0.016 ms on two AVX2 cores; a line each, 0.0125–0.0127). */
typedef struct {
  _Alignas (64) atomic_int next;
  int end;
} Span;

/* One matrix of a call: its weights and outputs, and its first block of
 * outputs among the call's. */
typedef struct {
  DflDtype type;
  const char *w;
  size_t wrow;
  /* the weights laid out by dfl_quant_pack, read instead of w, or NULL */
  const DflWeights *packed;
  float *y;
  int n_out, ldy, first_block;
} QMatrix;

typedef struct {
  const QAct *a;
  int rows, accumulate;
  QPath path;
  DflQuantRows packed_rows;
  int n_matrices;
  QMatrix m[DFL_MATMUL_GROUP_MAX];
  /* Each thread walks a span of consecutive blocks of outputs, then helps
   * with the others'. Why not one counter for all: the threads would take
   * every other block, and a thread's reads would jump a block at every
   * step; the processor's prefetchers follow a stream within its 4 KiB
   * pages only, so a decode step's products read at 0.6 of the memory's
   * rate (Q4_0 packed, 2 threads), and at 0.95 in spans. The blocks of a
   * call's matrices follow one another, so a span may cross into the next
   * matrix. */
  int n_spans;
  Span spans[MAX_SPANS];
} QWork;

static void
quant_blocks (QWork *q, int b)
{
  const QMatrix *m = &q->m[0];
  int o0, o1;

  for (int i = 1; i < q->n_matrices && b >= q->m[i].first_block; i++)
    m = &q->m[i];
  o0 = (b - m->first_block) * OUT_BLOCK;
  o1 = DFL_MIN (o0 + OUT_BLOCK, m->n_out);
  if (m->packed) {
    dfl_quant_packed_outputs (m->packed, &q->packed_rows, q->rows, o0, o1, m->y, m->ldy,
                              q->accumulate, q->path == QPATH_VNNI);
    return;
  }
  switch (q->path) {
#ifdef DFL_X86
    case QPATH_VNNI:
      if (q->a->qt)
        outputs_pairs (m->type, m->w, m->wrow, q->a, q->rows, o0, o1, m->y, m->ldy,
                       q->accumulate);
      else
        outputs_vnni (m->type, m->w, m->wrow, q->a, q->rows, o0, o1, m->y, m->ldy,
                      q->accumulate);
      break;
    case QPATH_AVX2:
      outputs_avx2 (m->type, m->w, m->wrow, q->a, q->rows, o0, o1, m->y, m->ldy,
                    q->accumulate);
      break;
#endif
    default:
      outputs_generic (m->type, m->w, m->wrow, q->a, q->rows, o0, o1, m->y, m->ldy,
                       q->accumulate);
      break;
  }
}

static void
quant_work (void *data, int slot)
{
  QWork *q = data;

  for (int i = 0; i < q->n_spans; i++) {
    Span *sp = &q->spans[(slot + i) % q->n_spans];
    int b;
    while ((b = atomic_fetch_add_explicit (&sp->next, 1, memory_order_relaxed)) < sp->end)
      quant_blocks (q, b);
  }
}

/* How a matrix wants x quantized: whether its product reads the weights
 * laid out by dfl_quant_pack, and the activations' layouts it reads. */
typedef struct {
  int packed, transpose, biased, simd;
} QNeeds;

static int
quant_needs (const DflWeights *w, int rows, QNeeds *n)
{
  QPath path = quant_path ();

  if (!dfl_dtype_is_quantized (w->type) || dfl_dtype_row_bytes (w->type, w->cols) == 0)
    return 0;
  /* the packed layout's products are the SIMD paths' */
  n->packed = w->packed && path != QPATH_GENERIC;
  n->transpose = !n->packed && rows >= TRANSPOSE_ROWS && path != QPATH_GENERIC;
  n->biased = path == QPATH_VNNI && w->type == DFL_DTYPE_Q8_0;
  n->simd = path != QPATH_GENERIC;
  return 1;
}

/* The products of x with n matrices whose quantization of x is the same,
 * x quantized once and every matrix's blocks shared out in one call of
 * the threads. */
static int
matmul_q_shared (int n, const DflWeights *w, const QNeeds *needs, const float *x, int rows,
                 int ldx, float *const *y, const int *ldy, const int *n_out, int accumulate)
{
  int n_blocks = 0, threads;
  size_t work = 0;
  QAct a;
  QWork q;

  if (!qact_init (&a, x, rows, ldx, w[0].cols, needs->transpose, needs->biased, needs->simd))
    return 0;
  q = (QWork) { .a = &a, .rows = rows, .accumulate = accumulate, .path = quant_path (),
                .packed_rows = { .k = w[0].cols, .q = a.q, .d = a.d, .s32 = a.s32,
                                 .s16 = a.s16 },
                .n_matrices = n };
  for (int i = 0; i < n; i++) {
    q.m[i] = (QMatrix) { .type = w[i].type, .w = w[i].data,
                         .wrow = dfl_dtype_row_bytes (w[i].type, w[i].cols),
                         .packed = needs->packed ? &w[i] : NULL, .y = y[i], .n_out = n_out[i],
                         .ldy = ldy[i], .first_block = n_blocks };
    n_blocks += (n_out[i] + OUT_BLOCK - 1) / OUT_BLOCK;
    work += (size_t) rows * n_out[i] * w[i].cols;
  }
  threads = n_blocks > 1 && work > 32768 ? dfl_parallel_threads () : 1;
  q.n_spans = DFL_MIN (DFL_MIN (threads, n_blocks), MAX_SPANS);
  for (int i = 0; i < q.n_spans; i++) {
    atomic_init (&q.spans[i].next, (int) ((int64_t) n_blocks * i / q.n_spans));
    q.spans[i].end = (int) ((int64_t) n_blocks * (i + 1) / q.n_spans);
  }
  dfl_parallel_run (threads, quant_work, &q);
  free (a.mem);
  return 1;
}

int
dfl_matmul_q (const DflWeights *w, const float *x, int rows, int ldx, float *y, int ldy,
              int n_out, int accumulate)
{
  QNeeds needs;

  if (!quant_needs (w, rows, &needs) || n_out > w->rows)
    return 0;
  if (rows <= 0 || n_out <= 0)
    return 1;
  return matmul_q_shared (1, w, &needs, x, rows, ldx, &y, &ldy, &n_out, accumulate);
}

int
dfl_matmul_q_group (int n, const DflWeights *w, const float *x, int rows, int ldx,
                    float *const *y, const int *ldy, const int *n_out, int accumulate)
{
  QNeeds needs[DFL_MATMUL_GROUP_MAX];
  int same = 1;

  if (n < 1 || n > DFL_MATMUL_GROUP_MAX)
    return 0;
  for (int i = 0; i < n; i++) {
    if (!quant_needs (&w[i], rows, &needs[i]) || n_out[i] > w[i].rows || w[i].cols != w[0].cols)
      return 0;
    same = same && !memcmp (&needs[i], &needs[0], sizeof needs[0]);
  }
  if (rows <= 0)
    return 1;
  if (same)
    return matmul_q_shared (n, w, needs, x, rows, ldx, y, ldy, n_out, accumulate);
  /* matrices that read x in different layouts (a Q6_K one beside packed
   * Q4_K ones in a Q4_K_M file): a call each */
  for (int i = 0; i < n; i++)
    if (!dfl_matmul_q (&w[i], x, rows, ldx, y[i], ldy[i], n_out[i], accumulate))
      return 0;
  return 1;
}
