/* gst-dflash — block-quantized matrices laid out again at load for the
 * SIMD paths (AVX2, AVX-512 VNNI), and their products.
 *
 * Why: GGUF stores a matrix row by row, each row's blocks in turn. Read in
 * place, every block gives one output's integer sum spread over the lanes
 * of a vector, which must be reduced before its F32 step; on one row (a
 * decode step) those reductions and the unpacking cost about twice the
 * time it takes to read the weights. Laid out with the blocks of 16
 * outputs side by side, four bytes of each output to a 32-bit lane, one
 * dpbusd (AVX2: maddubs, then madd) multiplies four inputs (broadcast) by
 * four weights of each of 16 (AVX2: 8) outputs: a block's integer sums
 * come out one to a lane, with nothing to reduce, and its F32 step runs
 * once for all those outputs. llama.cpp repacks for the same reason.
 *
 * The numbers are those of quant-matmul.c, bitwise: the same integer sum of
 * each block (exact however it is formed), the same F32 operations on it in
 * the same order (block b into lane b mod 8, lanes summed by the same
 * tree), so a row's result depends on nothing but the row, on every path.
 *
 * The layout, per group of 16 outputs (the last padded with zero scales),
 * the group's blocks in order; a "chunk vector" is 64 bytes, output o's
 * four bytes at 4o:
 *   Q8_0, per block of 32:    F16 d[16]; 8 chunk vectors, chunk c holding
 *                             inputs 4c … 4c + 3 as w + 128 (unsigned)
 *   Q4_0, per block of 32:    F16 d[16]; 4 chunk vectors of nibbles, the
 *                             low nibbles inputs 4c …, the high 16 + 4c …
 *                             (the bytes of the stored block, regrouped)
 *   Q4_K, per super-block:    F16 d[16], F16 dmin[16]; sub-block j's
 *                             six-bit scales u8[16] for j = 0 … 7, then
 *                             its mins; per pair of sub-blocks (2p,
 *                             2p + 1) 8 chunk vectors of nibbles (2p low,
 *                             2p + 1 high), the stored bytes regrouped
 * Q8_0's and Q4_0's packed bytes equal their stored bytes for whole
 * groups; Q4_K's scales widen from 12 bytes a block to 32 (2.8% more).
 *
 * Q6_K is not packed: its six-bit values take two loads and four to five
 * shifts, masks and ors a vector to put back together, and on one row
 * that costs about what the reductions it saves do. Measured (bench-quant,
 * 2 cores, one row): with AVX-512 VNNI 1.7× the read floor packed against
 * 1.2–1.4× for the stored blocks; with AVX2 (nibbles and high bits in
 * chunk vectors, the half-blocks' scales applied by madd) 0.17–0.19 ms
 * against 0.14–0.16 ms stored for 1024 → 3072, both about twice the
 * floor. Its stored blocks are read as before.
 */
#include "quant-packed.h"
#include "dfl-parallel.h"
#include "quant-layout.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define DFL_PACKED_SIMD 1
#endif

#define GROUP DFL_QPACK_GROUP
#define CHUNKS 64        /* bytes of a chunk vector */
/* bytes of a group's block (Q8_0, Q4_0) or super-block (K types) */
#define Q8_0_BYTES (2 * GROUP + 8 * CHUNKS)
#define Q4_0_BYTES (2 * GROUP + 4 * CHUNKS)
#define Q4_K_BYTES (4 * GROUP + 16 * GROUP + 32 * CHUNKS)

/* Bytes of one group's packed blocks along `cols` inputs; 0 where the type
 * is not one of the four or cols is not whole blocks. */
static size_t
group_bytes (DflDtype type, int cols)
{
  if (cols <= 0 || dfl_dtype_row_bytes (type, cols) == 0)
    return 0;
  switch (type) {
    case DFL_DTYPE_Q8_0:
      return (size_t) (cols / 32) * Q8_0_BYTES;
    case DFL_DTYPE_Q4_0:
      return (size_t) (cols / 32) * Q4_0_BYTES;
    case DFL_DTYPE_Q4_K:
      return (size_t) (cols / 256) * Q4_K_BYTES;
    default:
      return 0;
  }
}

size_t
dfl_quant_packed_bytes (DflDtype type, int rows, int cols)
{
  size_t g = group_bytes (type, cols);

  return rows > 0 ? g * (size_t) ((rows + GROUP - 1) / GROUP) : 0;
}

static void
put_f16 (uint8_t *dst, int o, uint16_t v)
{
  dst[2 * o] = (uint8_t) v;
  dst[2 * o + 1] = (uint8_t) (v >> 8);
}

/* Output o (of its group) of one block or super-block into `dst`, the
 * group's bytes of that block. */
static void
pack_one (DflDtype type, const char *stored, int o, uint8_t *dst)
{
  switch (type) {
    case DFL_DTYPE_Q8_0: {
      const DflBlockQ8_0 *w = (const DflBlockQ8_0 *) stored;
      put_f16 (dst, o, dfl_q_f16 (&w->d));
      for (int c = 0; c < 8; c++) {
        /* four bytes at once, each + 128 */
        uint32_t v;
        memcpy (&v, w->qs + 4 * c, 4);
        v ^= 0x80808080u;
        memcpy (dst + 2 * GROUP + CHUNKS * c + 4 * o, &v, 4);
      }
      break;
    }
    case DFL_DTYPE_Q4_0: {
      const DflBlockQ4_0 *w = (const DflBlockQ4_0 *) stored;
      put_f16 (dst, o, dfl_q_f16 (&w->d));
      for (int c = 0; c < 4; c++)
        memcpy (dst + 2 * GROUP + CHUNKS * c + 4 * o, w->qs + 4 * c, 4);
      break;
    }
    case DFL_DTYPE_Q4_K: {
      const DflBlockQ4_K *w = (const DflBlockQ4_K *) stored;
      uint8_t *nib = dst + 4 * GROUP + 16 * GROUP;
      put_f16 (dst, o, dfl_q_f16 (&w->d));
      put_f16 (dst + 2 * GROUP, o, dfl_q_f16 (&w->dmin));
      for (int j = 0; j < 8; j++) {
        int sc, m;
        dfl_q4k_scale_min (w->scales, j, &sc, &m);
        dst[4 * GROUP + GROUP * j + o] = (uint8_t) sc;
        dst[4 * GROUP + 8 * GROUP + GROUP * j + o] = (uint8_t) m;
      }
      for (int p = 0; p < 4; p++)
        for (int c = 0; c < 8; c++)
          memcpy (nib + 8 * CHUNKS * p + CHUNKS * c + 4 * o, w->qs + 32 * p + 4 * c, 4);
      break;
    }
    default:
      break;
  }
}

typedef struct {
  const DflWeights *w;
  uint8_t *packed;
  size_t gb, wrow, unit_packed, unit_stored;
  int units, n_groups;
  atomic_int next;
} PackWork;

/* Groups claimed one at a time, each laid out whole by one thread. */
static void
pack_groups (void *data, int slot)
{
  PackWork *p = data;
  int gi;

  (void) slot;
  while ((gi = atomic_fetch_add_explicit (&p->next, 1, memory_order_relaxed)) < p->n_groups) {
    uint8_t *group = p->packed + (size_t) gi * p->gb;
    int r0 = gi * GROUP, n = p->w->rows - r0 < GROUP ? p->w->rows - r0 : GROUP;
    /* every byte of a full group is written below; the last group's
     * padding outputs keep zero scales */
    if (n < GROUP)
      memset (group, 0, p->gb);
    for (int o = 0; o < n; o++) {
      const char *row = (const char *) p->w->data + (size_t) (r0 + o) * p->wrow;
      for (int u = 0; u < p->units; u++)
        pack_one (p->w->type, row + (size_t) u * p->unit_stored, o,
                  group + (size_t) u * p->unit_packed);
    }
  }
}

int
dfl_quant_pack_into (const DflWeights *w, void *dst)
{
  size_t gb = group_bytes (w->type, w->cols);
  int per_unit = w->type == DFL_DTYPE_Q8_0 || w->type == DFL_DTYPE_Q4_0 ? 32 : 256;
  PackWork p;

  if (!dfl_kernels_cpu_has (DFL_KERNELS_AVX2) || gb == 0 || w->rows <= 0)
    return 0;
  p = (PackWork) { .w = w, .packed = dst, .gb = gb,
                   .wrow = dfl_dtype_row_bytes (w->type, w->cols), .units = w->cols / per_unit,
                   .unit_stored = dfl_dtype_block_bytes (w->type),
                   .n_groups = (w->rows + GROUP - 1) / GROUP };
  p.unit_packed = gb / (size_t) p.units;
  atomic_init (&p.next, 0);
  /* at load, on the kernels' threads: about 2.5 GB a second on two cores */
  dfl_parallel_run (p.n_groups > 1 ? dfl_parallel_threads () : 1, pack_groups, &p);
  return 1;
}

void *
dfl_quant_pack (const DflWeights *w)
{
  size_t bytes = dfl_quant_packed_bytes (w->type, w->rows, w->cols);
  void *packed;

  if (!dfl_kernels_cpu_has (DFL_KERNELS_AVX2) || bytes == 0)
    return NULL;
  if (!(packed = aligned_alloc (64, (bytes + 63) & ~(size_t) 63)))
    return NULL;
  dfl_quant_pack_into (w, packed);
  return packed;
}

#ifdef DFL_PACKED_SIMD
#define VNNI __attribute__ ((target ("avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c")))

/* Rows whose F32 lanes a pass over the group's weights holds (the rows
 * beyond take another pass, reading the group again from the cache). */
#define ROWS 16

/* four int8 broadcast to every lane: one vpbroadcastd from memory (a load,
 * where going through a general register would take a shuffle port) */
typedef int32_t __attribute__ ((may_alias, aligned (1))) unaligned_i32;

VNNI static inline __m512i
bcast4 (const int8_t *q)
{
  return _mm512_set1_epi32 (*(const unaligned_i32 *) q);
}

/* Σ over chunks [c0, c1) of w[c] · q[4c …], with two chains so that each
 * dpbusd need not wait for the one before */
VNNI static inline __m512i
dot_chunks (const __m512i *w, const int8_t *q, int c0, int c1)
{
  __m512i a = _mm512_setzero_si512 (), b = _mm512_setzero_si512 ();
  for (int c = c0; c < c1; c += 2) {
    a = _mm512_dpbusd_epi32 (a, w[c], bcast4 (q + 4 * c));
    b = _mm512_dpbusd_epi32 (b, w[c + 1], bcast4 (q + 4 * c + 4));
  }
  return _mm512_add_epi32 (a, b);
}

/* The integer sums of one block for N rows side by side (row t's inputs at
 * q + t·k, its chain started from acc[t]): each weight vector, once in a
 * register, meets the N rows' broadcasts in turn, and the N chains keep
 * the dot-product units busy where one row's two would wait on each
 * other. (16 rows of 256 outputs × 1024 inputs held in the L2 cache, one
 * core: Q8_0 38.2–38.3 µs row by row, 27.9–30.1 with N = 2; Q4_0 39.1–41.6
 * and 27.3–27.6; Q4_K 40.3–43.7 and 34.4 with N = 4, where N = 2 gave
 * 33.4 and 8 34.2. Weights streamed from memory, two cores, the 16 rows
 * take about as long either way: see bench-quant.) */
VNNI static inline __attribute__ ((always_inline)) void
side_rows_sums (const __m512i w[8], const int8_t *q, size_t k, int N, __m512i acc[])
{
  _Pragma ("GCC unroll 8")
  for (int c = 0; c < 8; c++)
    _Pragma ("GCC unroll 4")
    for (int t = 0; t < N; t++)
      acc[t] = _mm512_dpbusd_epi32 (acc[t], w[c], bcast4 (q + (size_t) t * k + 4 * c));
}

VNNI static inline __m512
load_f16x16 (const uint8_t *p)
{
  return _mm512_cvtph_ps (_mm256_loadu_si256 ((const __m256i *) p));
}

/* lanes_sum's tree (quant-matmul.c) over eight vectors of lanes */
VNNI static inline __m512
lanes_tree (const __m512 l[8])
{
  __m512 a0 = _mm512_add_ps (l[0], l[4]), a1 = _mm512_add_ps (l[1], l[5]);
  __m512 a2 = _mm512_add_ps (l[2], l[6]), a3 = _mm512_add_ps (l[3], l[7]);
  return _mm512_add_ps (_mm512_add_ps (a0, a2), _mm512_add_ps (a1, a3));
}

/* Rows beyond one read a group's bytes slower than the processor's
 * prefetchers fetch ahead of: a stream consumed at a few GB/s is not seen
 * as one, and each line arrives when asked for. So the bytes `distance`
 * ahead are asked for as these are used, `bytes` of them at each step (a
 * group's next ones, then the next group's, which follows it; the address
 * is formed as an integer, since past the copy's end it points nowhere).
 * Measured on matrices 1024 → 3072 streamed from memory, two cores, µs a
 * product without and with: Q4_K 16 rows 273–323 and 214–227 (1 to 4
 * super-blocks ahead), 8 rows 146–192 and 118–156; Q8_0 16 rows 318–322 and
 * 187–189, 8 rows 214–269 and 158–162; Q4_0 16 rows 228–232 and 175–187,
 * 8 rows 148–225 and 102–103. One row asks ahead too: on an AMD EPYC
 * (Zen 4, VNNI) whose memory streams at 40–65 GB/s, one row of packed Q4_K
 * 4096 → 4096 took 0.41–0.44 ms without (twice its read floor: the lines
 * arrived as asked for) and 0.18–0.25 with; 1024 → 3072 0.085–0.088 and
 * 0.037–0.040; Q4_0 0.23–0.29 and 0.20–0.25; Q8_0 the same either way
 * (three alternating runs, two threads), and the 159M Q4_K_M file's decode
 * step 5.5–5.9 → 3.6–4.3 ms. */
#define PREFETCH_SUPER_BLOCKS 2
#define PREFETCH_BLOCKS 8

VNNI static inline void
prefetch_ahead (const uint8_t *at, size_t bytes, size_t distance)
{
  for (size_t l = 0; l < bytes; l += 64)
    _mm_prefetch ((const char *) ((uintptr_t) at + distance + l), _MM_HINT_T0);
}

/* A Q4_K sub-block's F32 step for one row: lane + d · (dd · (sc · isum) −
 * dmin · (m · Σq)), the plain-C operations in their order. */
VNNI static inline __m512
q4k_step (__m512 dd, __m512 dmin, __m512i sc, __m512i m, __m512i isum, const DflQuantRows *a,
          size_t at, __m512 lane)
{
  __m512 p = _mm512_mul_ps (dmin, _mm512_cvtepi32_ps (
                                      _mm512_mullo_epi32 (m, _mm512_set1_epi32 (a->s32[at]))));
  __m512 in = _mm512_fmsub_ps (dd, _mm512_cvtepi32_ps (_mm512_mullo_epi32 (sc, isum)), p);
  return _mm512_fmadd_ps (_mm512_set1_ps (a->d[at]), in, lane);
}

/* One group of 16 outputs for rows [r0, r0 + nr), nr ≤ ROWS. Inlined with
 * nr = 1 as a constant so that a decode step keeps its lanes in registers. */
VNNI static inline __attribute__ ((always_inline)) void
group_rows (DflDtype type, const uint8_t *g, const DflQuantRows *a, int r0, int nr,
            __mmask16 keep, float *y, int ldy, int accumulate)
{
  const int k = a->k, nb = k / 32;
  const __m512i low4 = _mm512_set1_epi8 (0x0f);
  __m512 lane[ROWS][8];

  for (int i = 0; i < nr; i++)
    for (int j = 0; j < 8; j++)
      lane[i][j] = _mm512_setzero_ps ();

  if (type == DFL_DTYPE_Q8_0 || type == DFL_DTYPE_Q4_0) {
    const int q8 = type == DFL_DTYPE_Q8_0;
    const int unit = q8 ? Q8_0_BYTES : Q4_0_BYTES;
    /* Q8_0's weights carry +128, Q4_0's nibbles +8: Σq times it comes off */
    const int32_t offset = q8 ? 128 : 8;
    for (int b = 0; b < nb; b++) {
      const uint8_t *blk = g + (size_t) b * unit, *qs = blk + 2 * GROUP;
      __m512 dw = load_f16x16 (blk);
      __m512i w[8];
      int i;
      prefetch_ahead (blk, unit, PREFETCH_BLOCKS * unit);
      if (q8) {
        for (int c = 0; c < 8; c++)
          w[c] = _mm512_loadu_si512 (qs + CHUNKS * c);
      } else {
        for (int c = 0; c < 4; c++) {
          __m512i v = _mm512_loadu_si512 (qs + CHUNKS * c);
          w[c] = _mm512_and_si512 (v, low4);
          w[c + 4] = _mm512_and_si512 (_mm512_srli_epi16 (v, 4), low4);
        }
      }
      /* two rows side by side; each chain starts from −offset · Σq, the
       * same integer as the subtraction after it */
      for (i = 0; i + 2 <= nr; i += 2) {
        size_t at = (size_t) (r0 + i) * nb + b;
        __m512i isum[2] = { _mm512_set1_epi32 (-offset * a->s32[at]),
                            _mm512_set1_epi32 (-offset * a->s32[at + nb]) };
        side_rows_sums (w, a->q + (size_t) (r0 + i) * k + 32 * b, k, 2, isum);
        for (int t = 0; t < 2; t++) {
          __m512 dwx = _mm512_mul_ps (dw, _mm512_set1_ps (a->d[at + (size_t) t * nb]));
          __m512 *l = &lane[i + t][b & 7];
          *l = _mm512_fmadd_ps (dwx, _mm512_cvtepi32_ps (isum[t]), *l);
        }
      }
      for (; i < nr; i++) {
        size_t r = (size_t) (r0 + i), at = r * nb + b;
        __m512i isum = dot_chunks (w, a->q + r * k + 32 * b, 0, 8);
        isum = _mm512_sub_epi32 (isum, _mm512_set1_epi32 (offset * a->s32[at]));
        lane[i][b & 7] = _mm512_fmadd_ps (_mm512_mul_ps (dw, _mm512_set1_ps (a->d[at])),
                                          _mm512_cvtepi32_ps (isum), lane[i][b & 7]);
      }
    }
  } else {
    for (int s = 0; s < nb / 8; s++) {
      const uint8_t *sb = g + (size_t) s * Q4_K_BYTES, *nib = sb + 4 * GROUP + 16 * GROUP;
      __m512 dd = load_f16x16 (sb), dmin = load_f16x16 (sb + 2 * GROUP);
      for (int j = 0; j < 8; j++) {
        const uint8_t *pair = nib + 8 * CHUNKS * (j / 2);
        __m512i sc = _mm512_cvtepu8_epi32 (_mm_loadu_si128 ((const __m128i *) (sb + 4 * GROUP
                                                                                  + GROUP * j)));
        __m512i m = _mm512_cvtepu8_epi32 (_mm_loadu_si128 ((const __m128i *) (sb + 12 * GROUP
                                                                                 + GROUP * j)));
        __m512i w[8];
        int i;
        prefetch_ahead (sb + Q4_K_BYTES / 8 * j, Q4_K_BYTES / 8,
                        PREFETCH_SUPER_BLOCKS * Q4_K_BYTES);
        for (int c = 0; c < 8; c++) {
          __m512i v = _mm512_loadu_si512 (pair + CHUNKS * c);
          w[c] = _mm512_and_si512 (j & 1 ? _mm512_srli_epi16 (v, 4) : v, low4);
        }
        for (i = 0; i + 4 <= nr; i += 4) {
          __m512i isum[4] = { _mm512_setzero_si512 (), _mm512_setzero_si512 (),
                              _mm512_setzero_si512 (), _mm512_setzero_si512 () };
          side_rows_sums (w, a->q + (size_t) (r0 + i) * k + 32 * (8 * s + j), k, 4, isum);
          for (int t = 0; t < 4; t++)
            lane[i + t][j] = q4k_step (dd, dmin, sc, m, isum[t], a,
                                       (size_t) (r0 + i + t) * nb + 8 * s + j, lane[i + t][j]);
        }
        for (; i < nr; i++) {
          size_t at = (size_t) (r0 + i) * nb + 8 * s + j;
          __m512i isum = dot_chunks (w, a->q + (size_t) (r0 + i) * k + 32 * (8 * s + j), 0, 8);
          lane[i][j] = q4k_step (dd, dmin, sc, m, isum, a, at, lane[i][j]);
        }
      }
    }
  }

  for (int i = 0; i < nr; i++) {
    float *yr = y + (size_t) (r0 + i) * ldy;
    __m512 v = lanes_tree (lane[i]);
    if (accumulate)
      v = _mm512_add_ps (_mm512_maskz_loadu_ps (keep, yr), v);
    _mm512_mask_storeu_ps (yr, keep, v);
  }
}

VNNI static inline __attribute__ ((always_inline)) void
group_type (DflDtype type, const uint8_t *g, const DflQuantRows *a, int rows, __mmask16 keep,
            float *y, int ldy, int accumulate)
{
  if (rows == 1) {
    group_rows (type, g, a, 0, 1, keep, y, ldy, accumulate);
    return;
  }
  for (int r0 = 0; r0 < rows; r0 += ROWS)
    group_rows (type, g, a, r0, rows - r0 < ROWS ? rows - r0 : ROWS, keep, y, ldy, accumulate);
}

VNNI static void
packed_outputs_vnni (const DflWeights *w, const DflQuantRows *a, int rows, int o0, int o1,
                     float *y, int ldy, int accumulate)
{
  size_t gb = group_bytes (w->type, w->cols);

  for (int o = o0; o < o1; o += GROUP) {
    const uint8_t *g = (const uint8_t *) w->packed + (size_t) (o / GROUP) * gb;
    int n = o1 - o < GROUP ? o1 - o : GROUP;
    __mmask16 keep = (__mmask16) ((1u << n) - 1);
    /* one call per type, so each is compiled with its type constant */
    switch (w->type) {
      case DFL_DTYPE_Q8_0:
        group_type (DFL_DTYPE_Q8_0, g, a, rows, keep, y + o, ldy, accumulate);
        break;
      case DFL_DTYPE_Q4_0:
        group_type (DFL_DTYPE_Q4_0, g, a, rows, keep, y + o, ldy, accumulate);
        break;
      default:
        group_type (DFL_DTYPE_Q4_K, g, a, rows, keep, y + o, ldy, accumulate);
        break;
    }
  }
}

/* ---- AVX2 over the same layout -------------------------------------------
 *
 * A chunk vector's 64 bytes are two of AVX2's vectors, outputs 0-7 and
 * 8-15 of the group ("halves"). maddubs multiplies the unsigned weights
 * by four activations (broadcast) into each output's two int16 pair sums;
 * madd against ones then gives each output's int32. Nibbles (Q4_0, Q4_K)
 * are at most 15, so an int16 lane can add the pair sums of a whole block
 * of 32 inputs (16 products, at most 16 · 15 · 127 = 30480) before one
 * madd: the sums stay exact. Q8_0's weights are signed, and 255 · 127
 * twice would not fit an int16, so as on the stored path their signs go
 * onto the activations (|w| · sign(x, w), at most 2 · 128 · 127 per pair)
 * and each chunk takes its own madd.
 */
#define AVX2 __attribute__ ((target ("avx2,fma,f16c")))

AVX2 static inline __m256i
bcast4_avx2 (const int8_t *q)
{
  return _mm256_set1_epi32 (*(const unaligned_i32 *) q);
}

/* a block's int32 sums of the unsigned nibbles w[0 … 7] (chunk c: inputs
 * 4c … 4c + 3) times q[0 … 31]; two chains of int16 additions */
AVX2 static inline __m256i
dot_nibbles_avx2 (const __m256i w[8], const int8_t *q)
{
  __m256i a = _mm256_maddubs_epi16 (w[0], bcast4_avx2 (q));
  __m256i b = _mm256_maddubs_epi16 (w[1], bcast4_avx2 (q + 4));
  for (int c = 2; c < 8; c += 2) {
    a = _mm256_add_epi16 (a, _mm256_maddubs_epi16 (w[c], bcast4_avx2 (q + 4 * c)));
    b = _mm256_add_epi16 (b, _mm256_maddubs_epi16 (w[c + 1], bcast4_avx2 (q + 4 * c + 4)));
  }
  return _mm256_madd_epi16 (_mm256_add_epi16 (a, b), _mm256_set1_epi16 (1));
}

/* the same for Q8_0: |w| in wabs, the signed weights in wsgn */
AVX2 static inline __m256i
dot_q8_avx2 (const __m256i wabs[8], const __m256i wsgn[8], const int8_t *q)
{
  const __m256i ones = _mm256_set1_epi16 (1);
  __m256i a = _mm256_setzero_si256 (), b = _mm256_setzero_si256 ();
  for (int c = 0; c < 8; c += 2) {
    __m256i x0 = _mm256_sign_epi8 (bcast4_avx2 (q + 4 * c), wsgn[c]);
    __m256i x1 = _mm256_sign_epi8 (bcast4_avx2 (q + 4 * c + 4), wsgn[c + 1]);
    a = _mm256_add_epi32 (a, _mm256_madd_epi16 (_mm256_maddubs_epi16 (wabs[c], x0), ones));
    b = _mm256_add_epi32 (b, _mm256_madd_epi16 (_mm256_maddubs_epi16 (wabs[c + 1], x1), ones));
  }
  return _mm256_add_epi32 (a, b);
}

AVX2 static inline __m256
load_f16x8 (const uint8_t *p)
{
  return _mm256_cvtph_ps (_mm_loadu_si128 ((const __m128i *) p));
}

AVX2 static inline __m256i
load_u8x8 (const uint8_t *p)
{
  return _mm256_cvtepu8_epi32 (_mm_loadl_epi64 ((const __m128i *) p));
}

AVX2 static inline __m256
lanes_tree_avx2 (const __m256 l[8])
{
  __m256 a0 = _mm256_add_ps (l[0], l[4]), a1 = _mm256_add_ps (l[1], l[5]);
  __m256 a2 = _mm256_add_ps (l[2], l[6]), a3 = _mm256_add_ps (l[3], l[7]);
  return _mm256_add_ps (_mm256_add_ps (a0, a2), _mm256_add_ps (a1, a3));
}

/* One group of 16 outputs, n of them kept, for rows [r0, r0 + nr), nr ≤
 * ROWS: both halves in the same pass over the group's bytes, so that a
 * decode step reads each cache line once. */
AVX2 static inline __attribute__ ((always_inline)) void
group_rows_avx2 (DflDtype type, const uint8_t *g, const DflQuantRows *a, int r0, int nr, int n,
                 float *y, int ldy, int accumulate)
{
  const int k = a->k, nb = k / 32;
  const __m256i low4 = _mm256_set1_epi8 (0x0f);
  __m256 lane[ROWS][2][8];

  for (int i = 0; i < nr; i++)
    for (int h = 0; h < 2; h++)
      for (int j = 0; j < 8; j++)
        lane[i][h][j] = _mm256_setzero_ps ();

  if (type == DFL_DTYPE_Q8_0 || type == DFL_DTYPE_Q4_0) {
    const int q8 = type == DFL_DTYPE_Q8_0;
    const int unit = q8 ? Q8_0_BYTES : Q4_0_BYTES;
    for (int b = 0; b < nb; b++) {
      const uint8_t *blk = g + (size_t) b * unit, *qs = blk + 2 * GROUP;
      for (int h = 0; h < 2; h++) {
        __m256 dw = load_f16x8 (blk + 16 * h);
        __m256i w[8], ws[8];
        if (q8) {
          /* the packed bytes are w + 128: back to signed, then |w| */
          for (int c = 0; c < 8; c++) {
            ws[c] = _mm256_xor_si256 (_mm256_loadu_si256 ((const __m256i *) (qs + CHUNKS * c
                                                                               + 32 * h)),
                                      _mm256_set1_epi8 ((char) 0x80));
            w[c] = _mm256_abs_epi8 (ws[c]);
          }
        } else {
          for (int c = 0; c < 4; c++) {
            __m256i v = _mm256_loadu_si256 ((const __m256i *) (qs + CHUNKS * c + 32 * h));
            w[c] = _mm256_and_si256 (v, low4);
            w[c + 4] = _mm256_and_si256 (_mm256_srli_epi16 (v, 4), low4);
          }
        }
        for (int i = 0; i < nr; i++) {
          size_t r = (size_t) (r0 + i), at = r * nb + b;
          const int8_t *q = a->q + r * k + 32 * b;
          /* Q4_0's nibbles carry +8: 8 · Σq comes off */
          __m256i isum = q8 ? dot_q8_avx2 (w, ws, q)
                            : _mm256_sub_epi32 (dot_nibbles_avx2 (w, q),
                                                _mm256_set1_epi32 (8 * a->s32[at]));
          lane[i][h][b & 7] = _mm256_fmadd_ps (_mm256_mul_ps (dw, _mm256_set1_ps (a->d[at])),
                                               _mm256_cvtepi32_ps (isum), lane[i][h][b & 7]);
        }
      }
    }
  } else {
    for (int s = 0; s < nb / 8; s++) {
      const uint8_t *sb = g + (size_t) s * Q4_K_BYTES, *nib = sb + 4 * GROUP + 16 * GROUP;
      for (int j = 0; j < 8; j++) {
        const uint8_t *pair = nib + 8 * CHUNKS * (j / 2);
        for (int h = 0; h < 2; h++) {
          __m256 dd = load_f16x8 (sb + 16 * h), dmin = load_f16x8 (sb + 2 * GROUP + 16 * h);
          __m256i sc = load_u8x8 (sb + 4 * GROUP + GROUP * j + 8 * h);
          __m256i m = load_u8x8 (sb + 12 * GROUP + GROUP * j + 8 * h);
          __m256i w[8];
          /* the next super-block asked of the memory, a 16th at each of
           * this one's 16 steps: a super-block is read out of order (its
           * scales, then each pair of nibble blocks twice), and the
           * hardware fetched too little ahead (one row of 1024 → 3072 or
           * 3072 → 1024: 0.062-0.087 ms without, 0.055-0.067 with, in 9 of
           * 10 alternating runs faster; Q4_0 and Q8_0, read in order,
           * gained nothing). The address is formed as an integer: the last
           * super-block's lies past the copy. */
          for (int l = 0; l < Q4_K_BYTES / 16; l += 64)
            _mm_prefetch ((const char *) ((uintptr_t) sb + Q4_K_BYTES
                                          + Q4_K_BYTES / 16 * (2 * j + h) + l), _MM_HINT_T0);
          for (int c = 0; c < 8; c++) {
            __m256i v = _mm256_loadu_si256 ((const __m256i *) (pair + CHUNKS * c + 32 * h));
            w[c] = _mm256_and_si256 (j & 1 ? _mm256_srli_epi16 (v, 4) : v, low4);
          }
          for (int i = 0; i < nr; i++) {
            size_t r = (size_t) (r0 + i), at = r * nb + 8 * s + j;
            __m256i isum = dot_nibbles_avx2 (w, a->q + r * k + 32 * (8 * s + j));
            __m256 p = _mm256_mul_ps (dmin, _mm256_cvtepi32_ps (
                                                _mm256_mullo_epi32 (m, _mm256_set1_epi32 (a->s32[at]))));
            __m256 in = _mm256_fmsub_ps (dd, _mm256_cvtepi32_ps (_mm256_mullo_epi32 (sc, isum)), p);
            lane[i][h][j] = _mm256_fmadd_ps (_mm256_set1_ps (a->d[at]), in, lane[i][h][j]);
          }
        }
      }
    }
  }

  for (int i = 0; i < nr; i++) {
    float *yr = y + (size_t) (r0 + i) * ldy;
    for (int h = 0; h < 2 && 8 * h < n; h++) {
      /* outputs 8h + t, t < n − 8h, are written */
      __m256i keep = _mm256_cmpgt_epi32 (_mm256_set1_epi32 (n - 8 * h),
                                         _mm256_setr_epi32 (0, 1, 2, 3, 4, 5, 6, 7));
      __m256 v = lanes_tree_avx2 (lane[i][h]);
      if (accumulate)
        v = _mm256_add_ps (_mm256_maskload_ps (yr + 8 * h, keep), v);
      _mm256_maskstore_ps (yr + 8 * h, keep, v);
    }
  }
}

AVX2 static inline __attribute__ ((always_inline)) void
group_type_avx2 (DflDtype type, const uint8_t *g, const DflQuantRows *a, int rows, int n,
                 float *y, int ldy, int accumulate)
{
  if (rows == 1) {
    group_rows_avx2 (type, g, a, 0, 1, n, y, ldy, accumulate);
    return;
  }
  for (int r0 = 0; r0 < rows; r0 += ROWS)
    group_rows_avx2 (type, g, a, r0, rows - r0 < ROWS ? rows - r0 : ROWS, n, y, ldy, accumulate);
}

AVX2 static void
packed_outputs_avx2 (const DflWeights *w, const DflQuantRows *a, int rows, int o0, int o1,
                     float *y, int ldy, int accumulate)
{
  size_t gb = group_bytes (w->type, w->cols);

  for (int o = o0; o < o1; o += GROUP) {
    const uint8_t *g = (const uint8_t *) w->packed + (size_t) (o / GROUP) * gb;
    int n = o1 - o < GROUP ? o1 - o : GROUP;
    switch (w->type) {
      case DFL_DTYPE_Q8_0:
        group_type_avx2 (DFL_DTYPE_Q8_0, g, a, rows, n, y + o, ldy, accumulate);
        break;
      case DFL_DTYPE_Q4_0:
        group_type_avx2 (DFL_DTYPE_Q4_0, g, a, rows, n, y + o, ldy, accumulate);
        break;
      default:
        group_type_avx2 (DFL_DTYPE_Q4_K, g, a, rows, n, y + o, ldy, accumulate);
        break;
    }
  }
}

void
dfl_quant_packed_outputs (const DflWeights *w, const DflQuantRows *a, int rows, int o0, int o1,
                          float *y, int ldy, int accumulate, int vnni)
{
  if (vnni)
    packed_outputs_vnni (w, a, rows, o0, o1, y, ldy, accumulate);
  else
    packed_outputs_avx2 (w, a, rows, o0, o1, y, ldy, accumulate);
}

#else

void
dfl_quant_packed_outputs (const DflWeights *w, const DflQuantRows *a, int rows, int o0, int o1,
                          float *y, int ldy, int accumulate, int vnni)
{
  /* dfl_quant_pack makes no packed copy off x86 */
  (void) w, (void) a, (void) rows, (void) o0, (void) o1, (void) y, (void) ldy, (void) accumulate;
  (void) vnni;
}

#endif
