/* gst-dflash — grouped-query attention over a KV cache (CPU): causal, or
 * over a range of keys per query row.
 *
 * Heads are independent, so they go across the kernels' threads
 * (dfl-parallel.h); within a head the scores of all query rows against the
 * cache are one small product.
 * Each row is computed alone, in an order that depends on nothing but its
 * position, so a row's output is the same whatever rows come with it. */
#include "dfl-kernels.h"
#include "dfl-parallel.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* q · k over n: 8 lanes over steps of 8 (written out so the compiler makes
 * them one vector: one chain of n additions would wait on each one's
 * latency), the lanes summed as matmul.c sums them, the tail in order. */
static inline float
dot (const float *a, const float *b, int n)
{
  float l[8] = { 0 }, s;
  int i = 0;

  for (; i + 8 <= n; i += 8)
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
      l[j] += a[i + j] * b[i + j];
  s = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
  for (; i < n; i++)
    s += a[i] * b[i];
  return s;
}

/* o[d] += w · v[d]: each element on its own (the same numbers as the plain
 * loop), in blocks of 8 written out so the compiler makes each block one
 * vector operation: o and v never overlap, which it could not know. */
static inline void
axpy (float *restrict o, float w, const float *restrict v, int n)
{
  int d = 0;

  for (; d + 8 <= n; d += 8)
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
      o[d + j] += w * v[d + j];
  for (; d < n; d++)
    o[d] += w * v[d];
}

/* The scores of one query row against keys 0 … seen − 1: dot (q, k) · scale. */
static void
scores_generic (const float *qr, const float *k, size_t kstride, int seen, int head_dim,
                float scale, float *sc)
{
  for (int p = 0; p < seen; p++)
    sc[p] = dot (qr, k + p * kstride, head_dim) * scale;
}

/* The scores into softmax weights, in place: e = exp (s − max), summed in
 * order, each divided by the sum. */
static void
weights_generic (float *sc, int seen)
{
  float top = -INFINITY, sum = 0.0f;

  for (int p = 0; p < seen; p++)
    if (sc[p] > top)
      top = sc[p];
  for (int p = 0; p < seen; p++) {
    sc[p] = expf (sc[p] - top);
    sum += sc[p];
  }
  for (int p = 0; p < seen; p++)
    sc[p] = sc[p] / sum;
}

/* out[0 … head_dim) = Σ_p w[p] · v_p, p in order, each element on its own. */
static void
weigh_generic (float *o, const float *w, const float *v, size_t kstride, int seen, int head_dim)
{
  memset (o, 0, sizeof (float) * head_dim);
  for (int p = 0; p < seen; p++)
    axpy (o, w[p], v + p * kstride, head_dim);
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define DFL_X86 1
/* The vector paths do, element for element, what the plain code above does
 * as the compiler makes it for the baseline x86-64 (SSE, no FMA): each
 * product rounded, then added. The empty asm keeps the compiler from
 * fusing a product and its sum into one FMA (one rounding), which it may
 * do where the target has FMA; so every path gives bitwise the same
 * scores and outputs, and the attention of a row stays the same whichever
 * path and whatever rows come with it. They differ in how many keys they
 * take at once: the plain dot sums each key's 8 lanes on its own, the AVX2
 * path 8 keys' lanes at a time in registers (the same tree for each). The
 * AVX2 path serves AVX-512 machines too: an AVX-512 form with two keys a
 * register (as matmul.c's tiles hold two outputs) was slower (each key
 * pair costs a shuffle); what is left of the time is mostly expf, kept as
 * libm computes it. (A build for
 * a CPU with FMA, -march=native, lets the compiler fuse the plain code:
 * then the paths part, which tests/kernels checks.) */

/* The plain code for the vector paths' tails, kept out of them: inlined
 * into a function compiled for AVX2 or AVX-512 the compiler would fuse its
 * products and sums. */
static __attribute__ ((noinline)) float
dot_plain (const float *a, const float *b, int n)
{
  return dot (a, b, n);
}

static __attribute__ ((noinline)) void
axpy_plain (float *restrict o, float w, const float *restrict v, int n)
{
  axpy (o, w, v, n);
}

#define AVX2_ATT __attribute__ ((target ("avx2")))
#define KEEP(x) __asm__ ("" : "+x" (x))

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

AVX2_ATT static void
scores_avx2 (const float *qr, const float *k, size_t kstride, int seen, int head_dim,
             float scale, float *sc)
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
        for (int j = 0; j < 8; j++) {
          __m256 m = _mm256_mul_ps (qv, _mm256_loadu_ps (k + (size_t) (p + j) * kstride + i));
          KEEP (m);
          a[j] = _mm256_add_ps (a[j], m);
        }
      }
      _mm256_storeu_ps (sc + p, _mm256_mul_ps (sums8 (a), sv));
    }
  }
  /* clean upper halves for the plain code that runs next (expf, the
   * scalar loops): SSE code after dirty ones pays a penalty on each
   * instruction; the compiler leaves this out of target() functions */
  _mm256_zeroupper ();
  for (; p < seen; p++)
    sc[p] = dot_plain (qr, k + p * kstride, head_dim) * scale;
}

/* weights_generic with the maximum and the division 8 at a time (both
 * exact: the same numbers; a zero's sign in the maximum may differ, and
 * exp (x − 0) is exp (x − −0)); exp and the sum stay in order. */
AVX2_ATT static void
weights_avx2 (float *sc, int seen)
{
  float top = -INFINITY, sum = 0.0f, lanes[8];
  int p = 0;

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
  for (p = 0; p < seen; p++) {
    sc[p] = expf (sc[p] - top);
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

AVX2_ATT static void
weigh_avx2 (float *o, const float *w, const float *v, size_t kstride, int seen, int head_dim)
{
  int d = 0;

  for (; d + 64 <= head_dim; d += 64) {
    __m256 acc[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
      acc[j] = _mm256_setzero_ps ();
    for (int p = 0; p < seen; p++) {
      __m256 wv = _mm256_broadcast_ss (w + p);
      const float *vp = v + p * kstride + d;
#pragma GCC unroll 8
      for (int j = 0; j < 8; j++) {
        __m256 m = _mm256_mul_ps (wv, _mm256_loadu_ps (vp + 8 * j));
        KEEP (m);
        acc[j] = _mm256_add_ps (acc[j], m);
      }
    }
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
      _mm256_storeu_ps (o + d + 8 * j, acc[j]);
  }
  _mm256_zeroupper ();
  if (d < head_dim) {
    memset (o + d, 0, sizeof (float) * (head_dim - d));
    for (int p = 0; p < seen; p++)
      axpy_plain (o + d, w[p], v + p * kstride + d, head_dim - d);
  }
}

#endif

typedef void (*ScoresFunc) (const float *qr, const float *k, size_t kstride, int seen,
                            int head_dim, float scale, float *sc);
typedef void (*WeighFunc) (float *o, const float *w, const float *v, size_t kstride, int seen,
                           int head_dim);
typedef void (*WeightsFunc) (float *sc, int seen);

typedef struct {
  const float *q, *k, *v;
  float *out;
  int rows, heads, kv_heads, head_dim, pos0;
  /* key ranges per row (NULL: causal from pos0), the longest, key stride */
  const int32_t *lo, *hi;
  /* each row's own keys (NULL: k and v for every row) */
  const float *const *row_k, *const *row_v;
  int most_seen;
  size_t kstride;
  float scale;
  ScoresFunc scores;
  WeightsFunc weights;
  WeighFunc weigh;
  atomic_int next;
} Attention;

static void
attention_work (void *data, int slot)
{
  Attention *a = data;
  int rep = a->heads / a->kv_heads, head_dim = a->head_dim, i;
  size_t kstride = a->kstride;
  float *sc = malloc (sizeof (float) * (a->most_seen > 0 ? a->most_seen : 1));

  (void) slot;
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
    const float *k = a->row_k ? a->row_k[r] : a->k, *v = a->row_v ? a->row_v[r] : a->v;
    for (int h = g * rep; h < (g + 1) * rep; h++) {
      const float *qr = a->q + ((size_t) r * a->heads + h) * head_dim;
      float *o = a->out + ((size_t) r * a->heads + h) * head_dim;
      if (seen <= 0) {
        memset (o, 0, sizeof (float) * head_dim);
        continue;
      }
      a->scores (qr, k + first, kstride, seen, head_dim, a->scale, sc);
      a->weights (sc, seen);
      a->weigh (o, sc, v + first, kstride, seen, head_dim);
    }
  }
  free (sc);
}

/* The paths for this CPU, then the rows across the threads. */
static void
attention_run (Attention *a, size_t work)
{
  a->scores = scores_generic;
  a->weights = weights_generic;
  a->weigh = weigh_generic;
#ifdef DFL_X86
  {
    DflKernelsIsa isa = dfl_kernels_isa ();

    if (isa == DFL_KERNELS_AVX512 || isa == DFL_KERNELS_AVX2) {
      a->scores = scores_avx2;
      a->weights = weights_avx2;
      a->weigh = weigh_avx2;
    }
  }
#endif

  /* heads and rows are independent: the threads take them a row of a
   * group of heads at a time */
  atomic_init (&a->next, 0);
  dfl_parallel_run (work > 4096 ? dfl_parallel_threads () : 1, attention_work, a);
}

void
dfl_attention_causal (const float *q, int rows, int heads, int kv_heads, int head_dim,
                      const float *k, const float *v, int pos0, float scale, float *out)
{
  Attention a = { .q = q, .k = k, .v = v, .out = out, .rows = rows, .heads = heads,
                  .kv_heads = kv_heads, .head_dim = head_dim, .pos0 = pos0,
                  .most_seen = pos0 + rows, .kstride = (size_t) kv_heads * head_dim,
                  .scale = scale };

  attention_run (&a, (size_t) heads * rows * (pos0 + rows));
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

void
dfl_attention_ranges (const float *q, int rows, int heads, int kv_heads, int head_dim,
                      const float *k, const float *v, int kv_stride, const int32_t *lo,
                      const int32_t *hi, float scale, float *out)
{
  Attention a = { .q = q, .k = k, .v = v, .out = out, .rows = rows, .heads = heads,
                  .kv_heads = kv_heads, .head_dim = head_dim, .lo = lo, .hi = hi,
                  .kstride = (size_t) kv_stride, .scale = scale };

  attention_run (&a, ranges_work (&a));
}

void
dfl_attention_rows (const float *q, int rows, int heads, int kv_heads, int head_dim,
                    const float *const *k, const float *const *v, int kv_stride,
                    const int32_t *lo, const int32_t *hi, float scale, float *out)
{
  Attention a = { .q = q, .out = out, .rows = rows, .heads = heads, .kv_heads = kv_heads,
                  .head_dim = head_dim, .lo = lo, .hi = hi, .row_k = k, .row_v = v,
                  .kstride = (size_t) kv_stride, .scale = scale };

  attention_run (&a, ranges_work (&a));
}
