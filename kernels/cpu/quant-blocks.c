/* gst-dflash — rows of quantized blocks to F32 and back (quant-layout.h).
 *
 * Dequantization does each element's float operations in the order ggml
 * does ((d · sc) · q − dmin · m for Q4_K, (d · sc) · q for Q6_K), so a row
 * read here equals, bitwise, the same row read by llama.cpp or the gguf
 * package. Quantization is a reference, round-to-nearest: Q8_0 and Q4_0
 * follow ggml's reference quantizers step for step (so the bytes match
 * theirs); the K types search each sub-block's scale among a few
 * candidates and round the sub-block scales to their six or eight bits
 * before rounding the values with the rounded scales, so the error is that
 * of the stored scales. Weights are quantized once, when a file is
 * written, or (dfl_quantize_rows) when a model is loaded: Q8_0's rounding
 * is written so that the compiler can take it eight values at a time.
 */
#include "dfl-kernels.h"
#include "dfl-parallel.h"
#include "quant-layout.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define DFL_MIN(a, b) ((a) < (b) ? (a) : (b))
#define DFL_MAX(a, b) ((a) > (b) ? (a) : (b))

/* ---- dequantization ---------------------------------------------------- */

static void
dequant_q8_0 (const DflBlockQ8_0 *b, float *y)
{
  float d = dfl_f16_to_f32 (dfl_q_f16 (&b->d));

  for (int i = 0; i < DFL_QK; i++)
    y[i] = (float) b->qs[i] * d;
}

static void
dequant_q4_0 (const DflBlockQ4_0 *b, float *y)
{
  float d = dfl_f16_to_f32 (dfl_q_f16 (&b->d));

  for (int i = 0; i < DFL_QK / 2; i++) {
    y[i] = d * (float) ((b->qs[i] & 15) - 8);
    y[i + DFL_QK / 2] = d * (float) ((b->qs[i] >> 4) - 8);
  }
}

static void
dequant_q4_k (const DflBlockQ4_K *b, float *y)
{
  float d = dfl_f16_to_f32 (dfl_q_f16 (&b->d));
  float dmin = dfl_f16_to_f32 (dfl_q_f16 (&b->dmin));

  for (int c = 0; c < 4; c++) {
    const uint8_t *q = b->qs + 32 * c;
    int sc0, m0, sc1, m1;
    float d0, min0, d1, min1;

    dfl_q4k_scale_min (b->scales, 2 * c, &sc0, &m0);
    dfl_q4k_scale_min (b->scales, 2 * c + 1, &sc1, &m1);
    d0 = d * (float) sc0;
    min0 = dmin * (float) m0;
    d1 = d * (float) sc1;
    min1 = dmin * (float) m1;
    for (int l = 0; l < 32; l++) {
      /* two statements: the product is rounded before the subtraction,
       * as ggml rounds it */
      float a = d0 * (float) (q[l] & 15), b2 = d1 * (float) (q[l] >> 4);
      y[64 * c + l] = a - min0;
      y[64 * c + 32 + l] = b2 - min1;
    }
  }
}

/* the six-bit value of element e (< 256) of a Q6_K block */
static inline int
q6k_value (const DflBlockQ6_K *b, int e)
{
  int h = e / 128, k = (e % 128) / 32, l = e % 32;
  int lo = (b->ql[64 * h + 32 * (k & 1) + l] >> (4 * (k >> 1))) & 15;
  int hi = (b->qh[32 * h + l] >> (2 * k)) & 3;

  return lo | (hi << 4);
}

static void
dequant_q6_k (const DflBlockQ6_K *b, float *y)
{
  float d = dfl_f16_to_f32 (dfl_q_f16 (&b->d));

  for (int g = 0; g < DFL_QK_K / 16; g++) {
    float s = d * (float) b->scales[g];
    for (int i = 0; i < 16; i++)
      y[16 * g + i] = s * (float) (q6k_value (b, 16 * g + i) - 32);
  }
}

int
dfl_dequantize_row (DflDtype type, const void *src, float *dst, int64_t n)
{
  size_t block = dfl_dtype_block_elems (type), bytes = dfl_dtype_block_bytes (type);
  const char *s = src;

  if (!dfl_dtype_is_quantized (type) || n < 0 || n % (int64_t) block)
    return 0;
  for (int64_t i = 0; i < n / (int64_t) block; i++, s += bytes, dst += block) {
    switch (type) {
      case DFL_DTYPE_Q8_0:
        dequant_q8_0 ((const DflBlockQ8_0 *) s, dst);
        break;
      case DFL_DTYPE_Q4_0:
        dequant_q4_0 ((const DflBlockQ4_0 *) s, dst);
        break;
      case DFL_DTYPE_Q4_K:
        dequant_q4_k ((const DflBlockQ4_K *) s, dst);
        break;
      case DFL_DTYPE_Q6_K:
      default:
        dequant_q6_k ((const DflBlockQ6_K *) s, dst);
        break;
    }
  }
  return 1;
}

/* ---- quantization ------------------------------------------------------ */

/* (a field of a packed block: any address) */
static void
put_f16 (void *field, float v)
{
  uint16_t h = dfl_f32_to_f16 (v);
  memcpy (field, &h, 2);
}

/* ggml's reference: d = max|x| / 127, q = round-half-away(x / d). */
static void
quant_q8_0 (const float *x, DflBlockQ8_0 *b)
{
  float amax = 0.0f, m[8] = { 0 }, d, id;

  /* the largest magnitude, in eight lanes (a maximum is the same in any
   * order) */
  for (int i = 0; i < DFL_QK; i += 8)
    for (int j = 0; j < 8; j++)
      m[j] = DFL_MAX (m[j], fabsf (x[i + j]));
  for (int j = 0; j < 8; j++)
    amax = DFL_MAX (amax, m[j]);
  d = amax / 127.0f;
  id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16 (&b->d, d);
  for (int i = 0; i < DFL_QK; i++) {
    /* roundf, half away from zero, as the conversion's truncation and the
     * exact remainder (both exact within ±127): vectorizable. A finite
     * block's values are within ±127 already (±127 and a rounding);
     * only a block whose step is subnormal (1 / d infinite) or holds an
     * infinity or a NaN gives more, and its d is no number an F16 holds:
     * held to ±127 (a NaN to −127, as the maximum's operands order it)
     * so that the conversion is defined and every path agrees. */
    float v = DFL_MIN (DFL_MAX (x[i] * id, -127.0f), 127.0f);
    int t = (int) v;
    float r = v - (float) t;
    b->qs[i] = (int8_t) (t + (r >= 0.5f) - (r <= -0.5f));
  }
}

#if defined(__x86_64__)
#include <immintrin.h>

/* quant_q8_0 on eight lanes: the same maximum (lane j over elements j,
 * j + 8, …, the lanes then in order, NaN kept as DFL_MAX keeps it), the
 * same product, bounds (max then min, operands in DFL_MAX's and DFL_MIN's
 * order) and rounding, and each value's low byte as the cast keeps it. A drafter's matrices are quantized so at its first block: done an
 * element at a time, that was most of a cold run's binding. */
__attribute__ ((target ("avx2"))) static void
quant_q8_0_avx2 (const float *x, DflBlockQ8_0 *b)
{
  const __m256 sign = _mm256_set1_ps (-0.0f);
  __m256 v[4], m = _mm256_setzero_ps (), vid;
  __m256i q[4], lo = _mm256_set1_epi32 (0xff), packed;
  float lane[8], amax = 0.0f, d, id;

  for (int c = 0; c < 4; c++) {
    v[c] = _mm256_loadu_ps (x + 8 * c);
    m = _mm256_max_ps (m, _mm256_andnot_ps (sign, v[c]));
  }
  _mm256_storeu_ps (lane, m);
  for (int j = 0; j < 8; j++)
    amax = DFL_MAX (amax, lane[j]);
  d = amax / 127.0f;
  id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16 (&b->d, d);
  vid = _mm256_set1_ps (id);
  for (int c = 0; c < 4; c++) {
    __m256 t = _mm256_min_ps (_mm256_max_ps (_mm256_mul_ps (v[c], vid),
                                             _mm256_set1_ps (-127.0f)),
                              _mm256_set1_ps (127.0f));
    __m256i ti = _mm256_cvttps_epi32 (t);
    __m256 r = _mm256_sub_ps (t, _mm256_cvtepi32_ps (ti));
    /* the masks are −1 where true */
    __m256i up = _mm256_castps_si256 (_mm256_cmp_ps (r, _mm256_set1_ps (0.5f), _CMP_GE_OQ));
    __m256i down = _mm256_castps_si256 (_mm256_cmp_ps (r, _mm256_set1_ps (-0.5f), _CMP_LE_OQ));
    q[c] = _mm256_and_si256 (_mm256_add_epi32 (_mm256_sub_epi32 (ti, up), down), lo);
  }
  /* the low bytes, in order: the packs work within 128-bit halves */
  packed = _mm256_packus_epi16 (_mm256_packus_epi32 (q[0], q[1]), _mm256_packus_epi32 (q[2], q[3]));
  packed = _mm256_permutevar8x32_epi32 (packed, _mm256_setr_epi32 (0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256 ((__m256i *) b->qs, packed);
}
#endif

/* ggml's reference: the value of largest magnitude (the first of equals)
 * maps to −8, d = it / −8, q = trunc(x / d + 8.5) ≤ 15. */
static void
quant_q4_0 (const float *x, DflBlockQ4_0 *b)
{
  float amax = 0.0f, max = 0.0f, d, id;
  uint8_t q[DFL_QK];

  for (int i = 0; i < DFL_QK; i++)
    if (fabsf (x[i]) > amax) {
      amax = fabsf (x[i]);
      max = x[i];
    }
  d = max / -8.0f;
  id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16 (&b->d, d);
  for (int i = 0; i < DFL_QK; i++) {
    /* a product then a sum, each rounded (no fused multiply-add), as ggml */
    float t = x[i] * id;
    t = t + 8.5f;
    q[i] = (uint8_t) DFL_MIN (15, (int8_t) t);
  }
  for (int i = 0; i < DFL_QK / 2; i++)
    b->qs[i] = (uint8_t) (q[i] | (q[i + DFL_QK / 2] << 4));
}

static inline int
clampi (int v, int lo, int hi)
{
  return v < lo ? lo : v > hi ? hi : v;
}

/* Squared error of x ≈ s · q − m, q = round((x + m) / s) within [0, 15]. */
static double
q4_sse (const float *x, int n, float s, float m)
{
  double e = 0;

  for (int i = 0; i < n; i++) {
    int q = s > 0 ? clampi ((int) lrintf ((x[i] + m) / s), 0, 15) : 0;
    double r = (double) s * q - m - x[i];
    e += r * r;
  }
  return e;
}

/* Q4_K: each sub-block of 32 as s · q − m (m ≥ 0 covers the negative part,
 * as the type wants: mins are unsigned); the step s is the range over 15
 * widened or narrowed a little, whichever fits best. */
static void
quant_q4_k (const float *x, DflBlockQ4_K *b)
{
  float scale[8], min[8], smax = 0, mmax = 0, d, dmin;
  int sc[8], m[8];

  for (int j = 0; j < 8; j++) {
    const float *xs = x + 32 * j;
    float lo = 0.0f, hi = 0.0f, best_s;
    double best = INFINITY;

    for (int i = 0; i < 32; i++) {
      lo = DFL_MIN (lo, xs[i]);
      hi = DFL_MAX (hi, xs[i]);
    }
    best_s = (hi - lo) / 15.0f;
    for (int c = -2; c <= 6 && hi > lo; c++) {
      float s = (hi - lo) / (15.0f + 0.25f * (float) c);
      double e = q4_sse (xs, 32, s, -lo);
      if (e < best) {
        best = e;
        best_s = s;
      }
    }
    scale[j] = best_s;
    min[j] = -lo;
    smax = DFL_MAX (smax, scale[j]);
    mmax = DFL_MAX (mmax, min[j]);
  }
  put_f16 (&b->d, smax / 63.0f);
  put_f16 (&b->dmin, mmax / 63.0f);
  /* from here on the scales as stored */
  d = dfl_f16_to_f32 (dfl_q_f16 (&b->d));
  dmin = dfl_f16_to_f32 (dfl_q_f16 (&b->dmin));
  for (int j = 0; j < 8; j++) {
    int sc0 = d > 0 ? clampi ((int) lrintf (scale[j] / d), 0, 63) : 0;
    int m0 = dmin > 0 ? clampi ((int) lrintf (min[j] / dmin), 0, 63) : 0;
    double best = INFINITY;
    /* the six-bit steps next to the rounded ones may fit the sub-block
     * better once its values are rounded too: keep the best of the nine */
    for (int a = DFL_MAX (sc0 - 1, 0); a <= DFL_MIN (sc0 + 1, 63); a++)
      for (int c = DFL_MAX (m0 - 1, 0); c <= DFL_MIN (m0 + 1, 63); c++) {
        double e = q4_sse (x + 32 * j, 32, d * (float) a, dmin * (float) c);
        if (e < best) {
          best = e;
          sc[j] = a;
          m[j] = c;
        }
      }
  }
  memset (b->scales, 0, sizeof b->scales);
  for (int j = 0; j < 4; j++) {
    b->scales[j] = (uint8_t) (sc[j] | ((sc[j + 4] >> 4) << 6));
    b->scales[j + 4] = (uint8_t) (m[j] | ((m[j + 4] >> 4) << 6));
    b->scales[j + 8] = (uint8_t) ((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
  }
  for (int j = 0; j < 8; j++) {
    float s = d * (float) sc[j], mm = dmin * (float) m[j];
    uint8_t q[32];
    for (int i = 0; i < 32; i++)
      q[i] = s > 0 ? (uint8_t) clampi ((int) lrintf ((x[32 * j + i] + mm) / s), 0, 15) : 0;
    /* sub-block 2c: low nibbles of qs[32c …]; 2c + 1: their high nibbles */
    for (int i = 0; i < 32; i++) {
      uint8_t *p = &b->qs[32 * (j / 2) + i];
      *p = (uint8_t) ((j & 1) ? ((*p & 15) | (q[i] << 4)) : ((*p & 0xf0) | q[i]));
    }
  }
}

/* Squared error of x ≈ s · q, q = round(x / s) within [−32, 31]. */
static double
q6_sse (const float *x, int n, float s)
{
  double e = 0;

  for (int i = 0; i < n; i++) {
    int q = s != 0 ? clampi ((int) lrintf (x[i] / s), -32, 31) : 0;
    double r = (double) s * q - x[i];
    e += r * r;
  }
  return e;
}

/* Q6_K: each group of 16 scaled so its value of largest magnitude maps to
 * about −32 (the one end of [−32, 31] that can hold it), the step widened
 * or narrowed a little, whichever fits the group best; the 16 group scales
 * then rounded to int8 steps of d = max |scale| / 127, and each group's
 * int8 scale and its two neighbours tried once the values are rounded with
 * it, the best kept. */
static void
quant_q6_k (const float *x, DflBlockQ6_K *b)
{
  float gs[16], amax_s = 0, d;

  for (int g = 0; g < 16; g++) {
    const float *xg = x + 16 * g;
    float amax = 0, max = 0;
    double best = INFINITY;

    for (int i = 0; i < 16; i++)
      if (fabsf (xg[i]) > amax) {
        amax = fabsf (xg[i]);
        max = xg[i];
      }
    gs[g] = max / -32.0f;
    for (int c = -4; c <= 8 && amax > 0; c++) {
      float s = max / (-32.0f + 0.25f * (float) c);
      double e = q6_sse (xg, 16, s);
      if (e < best) {
        best = e;
        gs[g] = s;
      }
    }
    amax_s = DFL_MAX (amax_s, fabsf (gs[g]));
  }
  put_f16 (&b->d, amax_s / 127.0f);
  d = dfl_f16_to_f32 (dfl_q_f16 (&b->d));
  memset (b->ql, 0, sizeof b->ql);
  memset (b->qh, 0, sizeof b->qh);
  for (int g = 0; g < 16; g++) {
    int sc0 = d > 0 ? clampi ((int) lrintf (gs[g] / d), -128, 127) : 0, sc = sc0;
    double best = INFINITY;
    float s;

    for (int a = DFL_MAX (sc0 - 1, -128); a <= DFL_MIN (sc0 + 1, 127) && d > 0; a++) {
      double e = q6_sse (x + 16 * g, 16, d * (float) a);
      if (e < best) {
        best = e;
        sc = a;
      }
    }
    s = d * (float) sc;
    b->scales[g] = (int8_t) sc;
    for (int i = 0; i < 16; i++) {
      int e = 16 * g + i, h = e / 128, k = (e % 128) / 32, l = e % 32;
      int q = (s != 0 ? clampi ((int) lrintf (x[e] / s), -32, 31) : 0) + 32;
      b->ql[64 * h + 32 * (k & 1) + l] |= (uint8_t) ((q & 15) << (4 * (k >> 1)));
      b->qh[32 * h + l] |= (uint8_t) ((q >> 4) << (2 * k));
    }
  }
}

int
dfl_quantize_row (DflDtype type, const float *src, void *dst, int64_t n)
{
  size_t block = dfl_dtype_block_elems (type), bytes = dfl_dtype_block_bytes (type);
  char *d = dst;

  if (!dfl_dtype_is_quantized (type) || n < 0 || n % (int64_t) block)
    return 0;
#if defined(__x86_64__)
  if (type == DFL_DTYPE_Q8_0 && dfl_kernels_isa () != DFL_KERNELS_GENERIC) {
    for (int64_t i = 0; i < n / (int64_t) block; i++, d += bytes, src += block)
      quant_q8_0_avx2 (src, (DflBlockQ8_0 *) d);
    return 1;
  }
#endif
  for (int64_t i = 0; i < n / (int64_t) block; i++, d += bytes, src += block) {
    switch (type) {
      case DFL_DTYPE_Q8_0:
        quant_q8_0 (src, (DflBlockQ8_0 *) d);
        break;
      case DFL_DTYPE_Q4_0:
        quant_q4_0 (src, (DflBlockQ4_0 *) d);
        break;
      case DFL_DTYPE_Q4_K:
        quant_q4_k (src, (DflBlockQ4_K *) d);
        break;
      case DFL_DTYPE_Q6_K:
      default:
        quant_q6_k (src, (DflBlockQ6_K *) d);
        break;
    }
  }
  return 1;
}

typedef struct {
  DflDtype type, src_type;
  const char *src;
  char *dst;
  size_t src_row, dst_row;
  int64_t rows, cols;
  atomic_llong next;
} QuantRows;

/* Chunks of rows claimed in turn, each row widened to F32 and quantized. */
static void
quantize_rows_work (void *data, int slot)
{
  QuantRows *q = data;
  float *row = malloc ((size_t) q->cols * sizeof (float));
  long long r0;

  (void) slot;
  if (!row)
    return;
  while ((r0 = atomic_fetch_add_explicit (&q->next, 64, memory_order_relaxed)) < q->rows) {
    for (int64_t r = r0; r < q->rows && r < r0 + 64; r++) {
      const char *in = q->src + (size_t) r * q->src_row;
      if (q->src_type == DFL_DTYPE_BF16)
        dfl_bf16_to_f32_n ((const uint16_t *) in, row, (size_t) q->cols);
      else if (q->src_type == DFL_DTYPE_F16)
        dfl_f16_to_f32_n ((const uint16_t *) in, row, (size_t) q->cols);
      else
        memcpy (row, in, (size_t) q->cols * sizeof (float));
      dfl_quantize_row (q->type, row, q->dst + (size_t) r * q->dst_row, q->cols);
    }
  }
  free (row);
}

int
dfl_quantize_rows (DflDtype type, DflDtype src_type, const void *src, void *dst, int64_t rows,
                   int64_t cols)
{
  QuantRows q = { .type = type, .src_type = src_type, .src = src, .dst = dst, .rows = rows,
                  .cols = cols };

  if (!dfl_dtype_is_quantized (type) || !dfl_dtype_is_float (src_type) || rows < 0
      || cols <= 0 || cols % (int64_t) dfl_dtype_block_elems (type))
    return 0;
  q.src_row = dfl_dtype_row_bytes (src_type, cols);
  q.dst_row = dfl_dtype_row_bytes (type, cols);
  atomic_init (&q.next, 0);
  dfl_parallel_run (rows > 64 ? dfl_parallel_threads () : 1, quantize_rows_work, &q);
  return atomic_load (&q.next) >= rows;
}
