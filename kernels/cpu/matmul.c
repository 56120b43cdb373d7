/* gst-dflash — y = x · Wᵀ over weights as a checkpoint stores them (F32,
 * F16 or BF16), batch-invariant.
 *
 * Why not SGEMM: a speculative round verifies a block of rows in one pass,
 * plain decoding feeds one row at a time, and the two must pick the same
 * tokens. A BLAS picks a different kernel (and so a different summation
 * order) for 1 row than for 16, so a near-tie could flip. Here every output
 * element is one dot product whose order of operations depends only on the
 * length of the row: 8 lanes accumulate by FMA over the row in steps of 8
 * (lane j adds inputs j, j + 8, j + 16, … in that order), the lanes are
 * summed in a fixed tree, ((0+4)+(2+6)) + ((1+5)+(3+7)), and the tail past
 * the last multiple of 8 is then added in order. How many rows come in, how
 * they are tiled, which thread computes an element, and which instruction
 * set does it (plain C, AVX2, AVX-512: each keeps exactly this order)
 * change nothing.
 *
 * Why the stored dtype: decode is bound by reading the weights, and BF16 is
 * half the bytes of F32. Weights are read straight from the mapped file.
 */
#include "dfl-kernels.h"
#include "dfl-parallel.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DFL_MIN(a, b) ((a) < (b) ? (a) : (b))

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#include <cpuid.h>
#define DFL_X86 1

/* F16C from CPUID itself: clang 14's __builtin_cpu_supports does not know
 * "f16c" (gcc's does). */
static int
has_f16c (void)
{
  unsigned a, b, c, d;

  return __get_cpuid (1, &a, &b, &c, &d) && (c & bit_F16C);
}
#endif

/* ---- the reference order, in plain C (machines without AVX2 + FMA) ---- */

static inline float
load_scalar (const void *w, DflDtype type, size_t i)
{
  switch (type) {
    /* memcpy: a tensor in a mapped file need not be aligned to its element */
    case DFL_DTYPE_F32: {
      float f;
      memcpy (&f, (const char *) w + 4 * i, 4);
      return f;
    }
    case DFL_DTYPE_BF16: {
      uint16_t h;
      uint32_t bits;
      float f;
      memcpy (&h, (const char *) w + 2 * i, 2);
      bits = (uint32_t) h << 16;
      memcpy (&f, &bits, 4);
      return f;
    }
    case DFL_DTYPE_F16:
    default: {
      uint16_t h;
      float f;
      memcpy (&h, (const char *) w + 2 * i, 2);
      dfl_f16_to_f32_n (&h, &f, 1);
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
dot_scalar (const float *x, const void *w, DflDtype type, int n)
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
tile_scalar (const float *x, int rows, int ldx, const void *w, DflDtype type,
             size_t wstride, int in, int o0, int o1, float *y, int ldy, int accumulate)
{
  size_t esz = type == DFL_DTYPE_F32 ? 4 : 2;

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
load8 (const void *w, DflDtype type, size_t i)
{
  if (type == DFL_DTYPE_F32)
    return _mm256_loadu_ps ((const float *) w + i);
  if (type == DFL_DTYPE_BF16) {
    __m128i h = _mm_loadu_si128 ((const __m128i *) ((const uint16_t *) w + i));
    return _mm256_castsi256_ps (_mm256_slli_epi32 (_mm256_cvtepu16_epi32 (h), 16));
  }
  return _mm256_cvtph_ps (_mm_loadu_si128 ((const __m128i *) ((const uint16_t *) w + i)));
}

/* lanes_sum's tree in registers: (l0+l4 … l3+l7), then (a0+a2, a1+a3),
 * then their sum; additions commute bitwise, so this is lanes_sum exactly. */
AVX2 static inline float
hsum (__m256 v)
{
  __m128 a = _mm_add_ps (_mm256_castps256_ps128 (v), _mm256_extractf128_ps (v, 1));
  __m128 b = _mm_add_ps (a, _mm_movehl_ps (a, a));
  return _mm_cvtss_f32 (_mm_add_ss (b, _mm_movehdup_ps (b)));
}

AVX2 static inline float
finish (__m256 acc, const float *x, const void *w, DflDtype type, int i, int n)
{
  float s = hsum (acc);
  for (; i < n; i++)
    s = fmaf (x[i], load_scalar (w, type, i), s);
  return s;
}

/* One row against eight outputs: eight independent FMA chains hide the
 * FMA latency that a single chain would wait on (decode is one row).
 * `ahead` (or NULL): the next eight rows, asked for at the pace these are
 * read (see AHEAD_ROWS_BYTES). */
AVX2 static inline __attribute__ ((always_inline)) void
row_by_8_kernel (const DflDtype T, const float *xr, const char *w, size_t wrow, int in,
                 float *yr, int accumulate, const char *ahead)
{
  int in8 = in & ~7;
  size_t esz = T == DFL_DTYPE_F32 ? 4 : 2;
  __m256 a[8];
  float v;

#pragma GCC unroll 8
  for (int j = 0; j < 8; j++)
    a[j] = _mm256_setzero_ps ();
  for (int i = 0; i < in8; i += 8) {
    __m256 c = _mm256_loadu_ps (xr + i);
    if (ahead) {
      /* the next rows' bytes at the rate these are read: 8·8 elements a step */
#pragma GCC unroll 4
      for (size_t l = 0; l < esz; l++)
        _mm_prefetch (ahead + (size_t) i * 8 * esz + l * 64, _MM_HINT_T0);
    }
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
      a[j] = _mm256_fmadd_ps (c, load8 (w + j * wrow, T, i), a[j]);
  }
  for (int j = 0; j < 8; j++) {
    v = finish (a[j], xr, w + j * wrow, T, in8, in);
    yr[j] = accumulate ? yr[j] + v : v;
  }
}

AVX2 static void
row_by_8 (const float *xr, const void *w, DflDtype type, size_t wrow, int in, float *yr,
          int accumulate, const void *ahead)
{
  switch (type) {
    case DFL_DTYPE_BF16:
      row_by_8_kernel (DFL_DTYPE_BF16, xr, w, wrow, in, yr, accumulate, ahead);
      break;
    case DFL_DTYPE_F16:
      row_by_8_kernel (DFL_DTYPE_F16, xr, w, wrow, in, yr, accumulate, ahead);
      break;
    case DFL_DTYPE_F32:
    default:
      row_by_8_kernel (DFL_DTYPE_F32, xr, w, wrow, in, yr, accumulate, ahead);
      break;
  }
}

AVX2 static void
row_by_1 (const float *xr, const void *w, DflDtype type, int in, float *yr, int accumulate)
{
  int in8 = in & ~7;
  __m256 a = _mm256_setzero_ps ();
  float v;

  for (int i = 0; i < in8; i += 8)
    a = _mm256_fmadd_ps (_mm256_loadu_ps (xr + i), load8 (w, type, i), a);
  v = finish (a, xr, w, type, in8, in);
  *yr = accumulate ? *yr + v : v;
}

/* ---- many rows: the weights converted once per panel ----
 *
 * Past a few rows the product is bound by arithmetic (16 rows already do
 * 16 FMAs a weight), so the work is blocked as a GEMM is:
 *  - x is laid out once by chunk of KC inputs, [chunk][row][KC]: rows of x
 *    lie a power of two apart and would fight over the same L1 sets, and a
 *    block of rows' chunk stays in cache (16 rows: in L1) while the outputs
 *    go past it;
 *  - a register tile is MR rows × NR outputs, twelve vectors of lanes held
 *    over a chunk: per step of 8 inputs, NR weight vectors and MR row
 *    vectors feed twelve FMAs;
 *  - the threads claim blocks of NB outputs (see blocked ());
 *  - the first tile of a group of NR outputs converts their weights as it
 *    reads them and keeps them, as F32, in a panel the group's other row
 *    tiles read back: each weight is converted once per block of rows;
 *  - the lanes of each output are stored between chunks as they are (a
 *    store and a load round nothing) and summed by hsum at the end, so
 *    every lane still adds its inputs in ascending order: the result is
 *    bitwise the one-row path's, whatever the tiling or the thread.
 */
#define MR 4      /* rows of a register tile */
#define NR 3      /* outputs of a register tile: 12 accumulators, 3 weights, 1 row */
#define KC 512    /* inputs of a chunk: 16 rows of it fill L1 */
#define NB 48     /* outputs a thread claims at once, their lanes kept (a multiple of 4·NR) */
#define MB 32     /* rows of a block: each weight is converted once for them */

/* The weights of the next chunk (the same inputs of the next rows block,
 * or the next inputs), fetched a few lines before each tile while this
 * chunk is computed on: the blocked loop reads a row KC inputs at a time
 * with the other rows of the block in between, a pattern the hardware's
 * stream prefetch does not follow, and the first tile of a group would
 * otherwise wait on memory with the multipliers idle. One chunk ahead keeps
 * what is fetched small (NB rows × KC inputs) whatever the row length. */
typedef struct {
  const char *w;
  size_t wrow, from, to, off;
  int row, end;
} Ahead;

static inline void
ahead_set (Ahead *a, int row, int end, size_t from, size_t to)
{
  a->row = row;
  a->end = end;
  a->from = from;
  a->to = to;
  a->off = from;
}

AVX2 static inline void
ahead_step (Ahead *a, int lines)
{
  for (; lines > 0 && a->row < a->end; lines--) {
    _mm_prefetch (a->w + (size_t) a->row * a->wrow + a->off, _MM_HINT_T1);
    a->off += 64;
    if (a->off >= a->to) {
      a->off = a->from;
      a->row++;
    }
  }
}

/* Where a tile's weights come from: converted from the rows as stored (and,
 * for the first tile of a group, kept in the panel for the others), or
 * read back from the panel. F32 rows are read as stored by every tile. */
enum { FROM_ROWS, FROM_ROWS_TO_PANEL, FROM_PANEL };

/* The lanes of an R × C tile over `steps` steps of 8 inputs from k0: x rows
 * KC apart; weights C rows wrow bytes apart, or the panel ([step][C][8]);
 * lanes at acc[r·ld + c]. */
AVX2 static inline __attribute__ ((always_inline)) void
tile_kernel (const int R, const int C, const DflDtype T, const int src, const float *x,
             const char *w, size_t wrow, size_t k0, float *panel, int steps, __m256 *acc,
             size_t ld, int first)
{
  __m256 a[MR][NR];

#pragma GCC unroll 4
  for (int r = 0; r < R; r++)
#pragma GCC unroll 3
    for (int c = 0; c < C; c++)
      a[r][c] = first ? _mm256_setzero_ps () : acc[r * ld + c];
  for (int s = 0; s < steps; s++) {
    __m256 b[NR];
#pragma GCC unroll 3
    for (int c = 0; c < C; c++) {
      if (src == FROM_PANEL) {
        b[c] = _mm256_load_ps (panel + ((size_t) s * C + c) * 8);
      } else {
        b[c] = load8 (w + c * wrow, T, k0 + 8 * s);
        if (src == FROM_ROWS_TO_PANEL)
          _mm256_store_ps (panel + ((size_t) s * C + c) * 8, b[c]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
      __m256 xr = _mm256_load_ps (x + (size_t) r * KC + 8 * s);
#pragma GCC unroll 3
      for (int c = 0; c < C; c++)
        a[r][c] = _mm256_fmadd_ps (xr, b[c], a[r][c]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; r++)
#pragma GCC unroll 3
    for (int c = 0; c < C; c++)
      acc[r * ld + c] = a[r][c];
}

typedef void (*TileFunc) (const float *x, const char *w, size_t wrow, size_t k0, float *panel,
                          int steps, __m256 *acc, size_t ld, int first);

#define TILE1(R, C, T, S, N) \
  AVX2 static void \
  tile_##N##_##R##x##C (const float *x, const char *w, size_t wrow, size_t k0, float *panel, \
                        int steps, __m256 *acc, size_t ld, int first) \
  { \
    tile_kernel (R, C, T, S, x, w, wrow, k0, panel, steps, acc, ld, first); \
  }
#define TILES(T, S, N) \
  TILE1 (1, 1, T, S, N) TILE1 (1, 2, T, S, N) TILE1 (1, 3, T, S, N) \
  TILE1 (2, 1, T, S, N) TILE1 (2, 2, T, S, N) TILE1 (2, 3, T, S, N) \
  TILE1 (3, 1, T, S, N) TILE1 (3, 2, T, S, N) TILE1 (3, 3, T, S, N) \
  TILE1 (4, 1, T, S, N) TILE1 (4, 2, T, S, N) TILE1 (4, 3, T, S, N)
TILES (DFL_DTYPE_F32, FROM_ROWS, f32)
TILES (DFL_DTYPE_F16, FROM_ROWS_TO_PANEL, f16)
TILES (DFL_DTYPE_BF16, FROM_ROWS_TO_PANEL, bf16)
TILES (DFL_DTYPE_F32, FROM_PANEL, panel)
#undef TILES
#undef TILE1

#define TABLE(N) { \
    { tile_##N##_1x1, tile_##N##_1x2, tile_##N##_1x3 }, \
    { tile_##N##_2x1, tile_##N##_2x2, tile_##N##_2x3 }, \
    { tile_##N##_3x1, tile_##N##_3x2, tile_##N##_3x3 }, \
    { tile_##N##_4x1, tile_##N##_4x2, tile_##N##_4x3 } }
/* [dtype][first tile of a group or not][R − 1][C − 1] */
static const TileFunc tiles[3][2][MR][NR] = {
  [DFL_DTYPE_F32] = { TABLE (f32), TABLE (f32) },
  [DFL_DTYPE_F16] = { TABLE (f16), TABLE (panel) },
  [DFL_DTYPE_BF16] = { TABLE (bf16), TABLE (panel) },
};
#undef TABLE

/* One block of outputs [ob, oe) of every row (see above); while its last
 * chunk is computed on, the first chunk of the block [nb0, nb1) (the one
 * this thread does next) is fetched. xp: x's first in8 inputs by chunk
 * ([chunks][rows][KC]); scratch: NR·KC + mb·(oe − ob)·8 floats, 32-byte
 * aligned. */
AVX2 static void
block_avx2 (const float *x, int rows, int ldx, const float *xp, const void *w,
            DflDtype type, size_t wstride, int in, int ob, int oe, int nb0, int nb1,
            float *y, int ldy, int accumulate, float *scratch, int mb)
{
  size_t esz = type == DFL_DTYPE_F32 ? 4 : 2, wrow = wstride * esz;
  int in8 = in & ~7, nb = oe - ob;
  float *panel = scratch;
  __m256 *lanes = (__m256 *) (panel + (size_t) NR * KC);
  Ahead ahead = { (const char *) w, wrow, 0, 0, 0, 0, 0 };

  for (int rb = 0; rb < rows; rb += mb) {
    int re = DFL_MIN (rb + mb, rows);
    if (in8 == 0)
      memset (lanes, 0, sizeof (__m256) * (size_t) (re - rb) * nb);
    for (int k0 = 0, ch = 0; k0 < in8; k0 += KC, ch++) {
      int steps = DFL_MIN (KC, in8 - k0) / 8, lines;
      const float *xc = xp + ((size_t) ch * rows + rb) * KC;
      /* the next chunk: further along these rows, else the start of the
       * rows read next (these again for the next rows) */
      if (k0 + KC < in8)
        ahead_set (&ahead, ob, oe, (size_t) (k0 + KC) * esz,
                   (size_t) DFL_MIN (k0 + 2 * KC, in8) * esz);
      else if (rb + mb < rows)
        ahead_set (&ahead, ob, oe, 0, (size_t) DFL_MIN (KC, in8) * esz);
      else
        ahead_set (&ahead, nb0, nb1, 0, (size_t) DFL_MIN (KC, in8) * esz);
      lines = (int) ((size_t) (ahead.end - ahead.row) * ((ahead.to - ahead.from + 63) / 64)
                     / ((size_t) (nb + NR - 1) / NR * ((re - rb + MR - 1) / MR))) + 1;
      for (int og = ob; og < oe; og += NR) {
        int c = DFL_MIN (NR, oe - og);
        for (int r0 = rb; r0 < re; r0 += MR) {
          int r = DFL_MIN (MR, re - r0);
          ahead_step (&ahead, lines);
          tiles[type][r0 > rb][r - 1][c - 1] (xc + (size_t) (r0 - rb) * KC,
                                              (const char *) w + (size_t) og * wrow, wrow, k0,
                                              panel, steps,
                                              lanes + (size_t) (r0 - rb) * nb + (og - ob), nb,
                                              k0 == 0);
        }
      }
    }
    for (int r = rb; r < re; r++) {
      const float *xr = x + (size_t) r * ldx;
      float *yr = y + (size_t) r * ldy;
      for (int o = ob; o < oe; o++) {
        float v = finish (lanes[(size_t) (r - rb) * nb + (o - ob)], xr,
                          (const char *) w + (size_t) o * wrow, type, in8, in);
        yr[o] = accumulate ? yr[o] + v : v;
      }
    }
  }
}

/* Fetching the next eight rows pays where they are short (a row of a few
 * hundred inputs ends before the hardware's prefetch has found it); past
 * this many bytes they would not stay in L1 until read, and the hardware
 * follows long rows by itself. */
#define AHEAD_ROWS_BYTES 16384
/* Few rows (decode): eight outputs at a time against each row, the next
 * eight fetched meanwhile where W's rows are contiguous (they are read
 * once, in order, by this thread: its next block follows). */
AVX2 static void
rows_avx2 (const float *x, int rows, int ldx, const void *w, DflDtype type,
           size_t wstride, int in, int o0, int o1, int n_out, float *y, int ldy, int accumulate)
{
  size_t esz = type == DFL_DTYPE_F32 ? 4 : 2, wrow = wstride * esz;
  int o = o0;

  for (; o + 8 <= o1; o += 8) {
    const char *wo = (const char *) w + (size_t) o * wrow;
    for (int r = 0; r < rows; r++) {
      const char *ahead = r == 0 && wstride == (size_t) in && 8 * wrow <= AHEAD_ROWS_BYTES
          && o + 16 <= n_out ? wo + 8 * wrow : NULL;
      row_by_8 (x + (size_t) r * ldx, wo, type, wrow, in, y + (size_t) r * ldy + o, accumulate,
                ahead);
    }
  }
  for (; o < o1; o++)
    for (int r = 0; r < rows; r++)
      row_by_1 (x + (size_t) r * ldx, (const char *) w + (size_t) o * wrow, type, in,
                y + (size_t) r * ldy + o, accumulate);
}

#endif

#ifdef DFL_X86
/* ---- AVX-512: the same order, two outputs a register ----
 *
 * A 16-lane register holds the 8 lanes of two outputs side by side (output
 * o in the low half, o + 1 in the high half): the weights of both, 8 inputs
 * each, fill one register, and the row's 8 inputs go into both halves
 * (a broadcast), so one FMA advances both outputs' 8 lanes by one step,
 * each lane still adding its inputs in ascending order. Twice the work of
 * an AVX2 FMA, the order unchanged: the results are bitwise the others'.
 *
 * The work is blocked as the AVX2 path's (x laid out by chunk of KC5
 * inputs, the threads claiming blocks of outputs, lanes kept between
 * chunks) with a larger register tile: up to R5 rows × C5 registers (2·C5
 * outputs), R5·C5 accumulators out of 32 registers. Converting two rows' 8
 * BF16 weights into a register is one permutation (vpermt2w, zero-masked
 * into the high half of each lane); the first row tile of a group keeps
 * them in the panel for the group's other row tiles, so each weight is
 * converted once per block of MB5 rows. A group of outputs goes through
 * all its chunks before the next group starts, so its weight rows are read
 * as streams, each fetched a fixed distance ahead by the tile reading it.
 * The lanes of a tile are summed in registers at the end of its last
 * chunk (sums16), many outputs at a time.
 */
#define R5 8      /* rows of a register tile */
#define C5 3      /* registers (output pairs) of a tile: 24 accumulators */
#define KC5 384   /* inputs of a chunk: 16 rows of x (24 KiB) and the panel stay in L1 */
#define MB5 16    /* rows of a block: each weight is converted once for them */
#define NB5 48    /* outputs a thread claims at once (a multiple of 2·C5) */

#define AVX512 __attribute__ ((target ("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

/* The weights of outputs at `lo` and `hi`, 8 inputs from element i, as F32
 * in one register (lo's in the low half). */
AVX512 static inline __attribute__ ((always_inline)) __m512
load_pair (const DflDtype T, const char *lo, const char *hi, size_t i)
{
  if (T == DFL_DTYPE_F32)
    /* insertf64x4 / broadcast_f64x4 move 8 floats as 4 doubles: AVX-512 F
     * has them, the f32x8 forms need DQ */
    return _mm512_castpd_ps (_mm512_insertf64x4 (
        _mm512_castpd256_pd512 (_mm256_castps_pd (_mm256_loadu_ps ((const float *) lo + i))),
        _mm256_castps_pd (_mm256_loadu_ps ((const float *) hi + i)), 1));
  {
    __m128i a = _mm_loadu_si128 ((const __m128i *) ((const uint16_t *) lo + i));
    __m128i b = _mm_loadu_si128 ((const __m128i *) ((const uint16_t *) hi + i));
    if (T == DFL_DTYPE_BF16) {
      /* word 2j + 1 of the result (the high half of F32 lane j) is a's word
       * j for j < 8, b's word j − 8 after (index 32 + …: the second table);
       * the even words are zero */
      const __m512i idx = _mm512_set_epi16 (39, 0, 38, 0, 37, 0, 36, 0, 35, 0, 34, 0, 33, 0, 32, 0,
                                            7, 0, 6, 0, 5, 0, 4, 0, 3, 0, 2, 0, 1, 0, 0, 0);
      return _mm512_castsi512_ps (_mm512_maskz_permutex2var_epi16 (0xaaaaaaaau,
                                                                   _mm512_castsi128_si512 (a), idx,
                                                                   _mm512_castsi128_si512 (b)));
    }
    return _mm512_cvtph_ps (_mm256_inserti128_si256 (_mm256_castsi128_si256 (a), b, 1));
  }
}

/* The sums of the lanes of 8 pair registers (16 outputs: g[k]'s low half
 * is output 2k, its high half 2k + 1), lanes_sum's tree for each: l[j] +
 * l[j+4] (j < 4), then (a0 + a2, a1 + a3), then their sum, done for many
 * outputs a register at a time (additions commute bitwise, so each
 * output's tree is exact). */
AVX512 static inline __attribute__ ((always_inline)) void
sums16 (const __m512 *g, float *out)
{
  __m512 s1[4], s2[2], s3;

#pragma GCC unroll 4
  for (int k = 0; k < 4; k++)
    /* 128-bit blocks (v0, v2, w0, w2) + (v1, v3, w1, w3): 4 outputs' a0 … a3 */
    s1[k] = _mm512_add_ps (_mm512_shuffle_f32x4 (g[2 * k], g[2 * k + 1], _MM_SHUFFLE (2, 0, 2, 0)),
                           _mm512_shuffle_f32x4 (g[2 * k], g[2 * k + 1], _MM_SHUFFLE (3, 1, 3, 1)));
#pragma GCC unroll 2
  for (int k = 0; k < 2; k++)
    /* in each block: (a0, a1) of two outputs + their (a2, a3) */
    s2[k] = _mm512_add_ps (_mm512_shuffle_ps (s1[k], s1[k + 2], _MM_SHUFFLE (1, 0, 1, 0)),
                           _mm512_shuffle_ps (s1[k], s1[k + 2], _MM_SHUFFLE (3, 2, 3, 2)));
  /* in each block: b0 of four outputs + their b1 */
  s3 = _mm512_add_ps (_mm512_shuffle_ps (s2[0], s2[1], _MM_SHUFFLE (2, 0, 2, 0)),
                      _mm512_shuffle_ps (s2[0], s2[1], _MM_SHUFFLE (3, 1, 3, 1)));
  /* block q holds outputs q, q + 8, q + 4, q + 12: put them in order */
  _mm512_storeu_ps (out, _mm512_permutexvar_ps (_mm512_set_epi32 (15, 11, 7, 3, 13, 9, 5, 1,
                                                                  14, 10, 6, 2, 12, 8, 4, 0),
                                                s3));
}

/* How far ahead of the weights it reads a tile asks for them, in steps
 * of 8 inputs: a few hundred cycles, about the time a line takes to come
 * from memory. The rows of a group are read from end to end before the
 * next group's, so each is a stream the fetches run ahead of; the first
 * lines of the next group's rows (AHEAD5_LINES a row, as far as the
 * distance reaches) are asked for one a step during this group's first
 * steps: all at once they would fill the core's line buffers and stall it. */
#define AHEAD5_STEPS 24
#define AHEAD5_LINES 6
typedef struct {
  const char *next;                      /* the next group's first row, or NULL */
  size_t off[2 * C5 * AHEAD5_LINES];     /* its lines, from `next` */
  int n;                                 /* how many */
} Ahead5;

/* The lanes of an R-row × C-pair tile over `steps` steps of 8 inputs from
 * k0: x rows KC5 apart (a chunk of the laid-out x); weights from the rows
 * wr[0 … 2C) (converted, and kept in the panel [step][C][16] when
 * src == FROM_ROWS_TO_PANEL) or from the panel; lanes kept at
 * acc + (r·ld + c)·16 floats between chunks. After the last chunk the lanes
 * are summed instead, into sums[(r·C + c)·2 + half]. */
AVX512 static inline __attribute__ ((always_inline)) void
tile5_kernel (const int R, const int C, const DflDtype T, const int src, const float *x,
              const char *const *wr, size_t k0, float *panel, int steps, float *acc, size_t ld,
              int first, int last, float *sums, const Ahead5 *ahead)
{
  __m512 a[R5][C5];
  /* local copies: the panel's stores could alias what the pointers point
   * to, and would make the compiler read them again every step */
  const char *p[2 * C5];

#pragma GCC unroll 6
  for (int j = 0; j < 2 * C; j++)
    p[j] = wr[j];
#pragma GCC unroll 8
  for (int r = 0; r < R; r++)
#pragma GCC unroll 3
    for (int c = 0; c < C; c++)
      a[r][c] = first ? _mm512_setzero_ps () : _mm512_load_ps (acc + (r * ld + c) * 16);
  for (int s = 0; s < steps; s++) {
    __m512 b[C5];
    if (src != FROM_PANEL) {
      /* every row every step: the same line 4 (F32: 2) steps running, but
       * a fetch costs a load slot only, and no arithmetic */
      size_t at = (k0 + 8 * ((size_t) s + AHEAD5_STEPS)) * (T == DFL_DTYPE_F32 ? 4 : 2);
#pragma GCC unroll 6
      for (int j = 0; j < 2 * C; j++)
        _mm_prefetch (p[j] + at, _MM_HINT_T0);
      if (s < ahead->n)
        _mm_prefetch (ahead->next + ahead->off[s], _MM_HINT_T0);
    }
#pragma GCC unroll 3
    for (int c = 0; c < C; c++) {
      if (src == FROM_PANEL) {
        b[c] = _mm512_load_ps (panel + ((size_t) s * C + c) * 16);
      } else {
        b[c] = load_pair (T, p[2 * c], p[2 * c + 1], k0 + 8 * (size_t) s);
        if (src == FROM_ROWS_TO_PANEL)
          _mm512_store_ps (panel + ((size_t) s * C + c) * 16, b[c]);
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
      __m512 xr = _mm512_castpd_ps (_mm512_broadcast_f64x4 (
          _mm256_castps_pd (_mm256_load_ps (x + (size_t) r * KC5 + 8 * s))));
#pragma GCC unroll 3
      for (int c = 0; c < C; c++)
        a[r][c] = _mm512_fmadd_ps (xr, b[c], a[r][c]);
    }
  }
  if (last) {
    /* by eights, the last eight padded with zeros */
    __m512 g[R5 * C5 + 7];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 3
      for (int c = 0; c < C; c++)
        g[r * C + c] = a[r][c];
#pragma GCC unroll 7
    for (int k = R * C; k < (R * C + 7) / 8 * 8; k++)
      g[k] = _mm512_setzero_ps ();
#pragma GCC unroll 3
    for (int k = 0; k < R * C; k += 8)
      sums16 (g + k, sums + 2 * k);
    return;
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; r++)
#pragma GCC unroll 3
    for (int c = 0; c < C; c++)
      _mm512_store_ps (acc + (r * ld + c) * 16, a[r][c]);
}

typedef void (*Tile5Func) (const float *x, const char *const *wr, size_t k0, float *panel,
                           int steps, float *acc, size_t ld, int first, int last, float *sums,
                           const Ahead5 *ahead);

#define TILE5(R, C, T, S, N) \
  AVX512 static void \
  tile5_##N##_##R##x##C (const float *x, const char *const *wr, size_t k0, float *panel, \
                         int steps, float *acc, size_t ld, int first, int last, float *sums, \
                         const Ahead5 *ahead) \
  { \
    tile5_kernel (R, C, T, S, x, wr, k0, panel, steps, acc, ld, first, last, sums, ahead); \
  }
#define TILES5_C(R, T, S, N) TILE5 (R, 1, T, S, N) TILE5 (R, 2, T, S, N) TILE5 (R, 3, T, S, N)
#define TILES5(T, S, N) \
  TILES5_C (1, T, S, N) TILES5_C (2, T, S, N) TILES5_C (3, T, S, N) TILES5_C (4, T, S, N) \
  TILES5_C (5, T, S, N) TILES5_C (6, T, S, N) TILES5_C (7, T, S, N) TILES5_C (8, T, S, N)
TILES5 (DFL_DTYPE_F32, FROM_ROWS, f32)
TILES5 (DFL_DTYPE_F16, FROM_ROWS, f16)
TILES5 (DFL_DTYPE_BF16, FROM_ROWS, bf16)
TILES5 (DFL_DTYPE_F32, FROM_ROWS_TO_PANEL, f32p)
TILES5 (DFL_DTYPE_F16, FROM_ROWS_TO_PANEL, f16p)
TILES5 (DFL_DTYPE_BF16, FROM_ROWS_TO_PANEL, bf16p)
TILES5 (DFL_DTYPE_F32, FROM_PANEL, panel)
#undef TILES5
#undef TILES5_C
#undef TILE5

#define ROW5(N, R) { tile5_##N##_##R##x1, tile5_##N##_##R##x2, tile5_##N##_##R##x3 }
#define TABLE5(N) { ROW5 (N, 1), ROW5 (N, 2), ROW5 (N, 3), ROW5 (N, 4), \
                    ROW5 (N, 5), ROW5 (N, 6), ROW5 (N, 7), ROW5 (N, 8) }
/* [dtype][FROM_ROWS, FROM_ROWS_TO_PANEL or FROM_PANEL][R − 1][C − 1] */
static const Tile5Func tiles5[3][3][R5][C5] = {
  [DFL_DTYPE_F32] = { TABLE5 (f32), TABLE5 (f32p), TABLE5 (panel) },
  [DFL_DTYPE_F16] = { TABLE5 (f16), TABLE5 (f16p), TABLE5 (panel) },
  [DFL_DTYPE_BF16] = { TABLE5 (bf16), TABLE5 (bf16p), TABLE5 (panel) },
};
#undef TABLE5
#undef ROW5

/* y[r][o] (+)= the sum, with the inputs past the last 8 added in order. */
static inline __attribute__ ((always_inline)) void
finish_row (float *yr, const float *xr, const float *sum, int n, const char *w, size_t wrow,
            DflDtype type, int in8, int in, int accumulate)
{
  if (in8 == in) {
    /* the common case, in a form the compiler makes a few vector moves */
    if (accumulate)
      for (int j = 0; j < n; j++)
        yr[j] += sum[j];
    else
      for (int j = 0; j < n; j++)
        yr[j] = sum[j];
    return;
  }
  for (int j = 0; j < n; j++) {
    float v = sum[j];
    for (int i = in8; i < in; i++)
      v = fmaf (xr[i], load_scalar (w + (size_t) j * wrow, type, i), v);
    yr[j] = accumulate ? yr[j] + v : v;
  }
}

/* One block of outputs [ob, oe) of every row: by groups of 2·C5 outputs,
 * each over all its chunks before the next (so its rows are read as
 * streams), each chunk by tiles of up to R5 rows. Each group starts by
 * asking for the first lines of the next one: the next outputs, else the
 * first of the next rows' pass, else those of the block [nb0, nb1) this
 * thread does next.
 * scratch: the panel (KC5/8 · C5 · 16 floats) and the lanes (R5 rows ×
 * C5 pairs × 16 floats a tile, MB5/R5 tiles), 64-byte aligned. */
AVX512 static void
block_avx512 (const float *x, int rows, int ldx, const float *xp, const DflWeights *w, int ob,
              int oe, int nb0, int nb1, float *y, int ldy, int accumulate, float *scratch, int mb)
{
  DflDtype type = w->type;
  size_t esz = type == DFL_DTYPE_F32 ? 4 : 2, wrow = (size_t) w->cols * esz;
  int in = w->cols, in8 = in & ~7;
  float *panel = scratch, *lanes = panel + (size_t) KC5 / 8 * C5 * 16;
  float sums[(R5 * C5 + 7) / 8 * 16];
  Ahead5 ahead;
  int lines = (int) DFL_MIN ((size_t) AHEAD5_LINES,
                             (DFL_MIN ((size_t) AHEAD5_STEPS * 8, (size_t) in8) * esz + 63) / 64);

  /* row by row, a line of each in turn: the lines every group asks for */
  for (int l = 0, i = 0; l < lines; l++)
    for (int j = 0; j < 2 * C5; j++)
      ahead.off[i++] = (size_t) j * wrow + 64 * (size_t) l;
  for (int rb = 0; rb < rows; rb += mb) {
    int re = DFL_MIN (rb + mb, rows), n = re - rb, n_tiles = (n + R5 - 1) / R5;
    for (int og = ob; og < oe; og += 2 * C5) {
      int c = DFL_MIN (C5, (oe - og + 1) / 2), n_o = DFL_MIN (2 * c, oe - og);
      int after = og + 2 * C5 < oe ? og + 2 * C5 : re < rows ? ob : nb0;
      int after_end = og + 2 * C5 < oe || re < rows ? oe : nb1;
      const char *wr[2 * C5];
      /* an odd last output reads its own row twice, the high half unused */
      for (int j = 0; j < 2 * c; j++)
        wr[j] = (const char *) w->data + (size_t) DFL_MIN (og + j, oe - 1) * wrow;
      /* the next group's first lines, which the tiles' fetches do not reach
       * (none for a short last group: the table's rows would pass it) */
      ahead.next = (const char *) w->data + (size_t) after * wrow;
      ahead.n = after_end - after >= 2 * C5 ? 2 * C5 * lines : 0;
      if (in8 == 0) {
        /* no whole step of 8: only the inputs added in order */
        memset (sums, 0, sizeof sums);
        for (int r = rb; r < re; r++)
          finish_row (y + (size_t) r * ldy + og, x + (size_t) r * ldx, sums, n_o, wr[0], wrow,
                      type, in8, in, accumulate);
        continue;
      }
      for (int k0 = 0, ch = 0; k0 < in8; k0 += KC5, ch++) {
        int steps = DFL_MIN (KC5, in8 - k0) / 8, last = k0 + KC5 >= in8;
        const float *xc = xp + ((size_t) ch * rows + rb) * KC5;
        /* the rows split evenly into tiles: 16 as 8 + 8, 12 as 6 + 6 */
        for (int t = 0, r0 = rb; t < n_tiles; t++) {
          int r = (n - (r0 - rb) + (n_tiles - t) - 1) / (n_tiles - t);
          int src = t > 0 ? FROM_PANEL : n_tiles > 1 ? FROM_ROWS_TO_PANEL : FROM_ROWS;
          tiles5[type][src][r - 1][c - 1] (xc + (size_t) (r0 - rb) * KC5, wr, k0, panel, steps,
                                           lanes + (size_t) t * R5 * C5 * 16, C5, k0 == 0, last,
                                           sums, &ahead);
          if (last)
            for (int i = 0; i < r; i++)
              finish_row (y + (size_t) (r0 + i) * ldy + og, x + (size_t) (r0 + i) * ldx,
                          sums + 2 * c * i, n_o, wr[0], wrow, type, in8, in, accumulate);
          r0 += r;
        }
      }
    }
  }
}
#endif

#ifdef DFL_X86
/* ---- AVX-512 registers, two or three rows ----
 *
 * A verification of one or two drafts is two or three rows: bound by
 * reading the weights, too few rows for the panel of the blocked path to
 * pay, and the one-row path would read and convert each block of weights
 * once per row, the later rows' passes waiting on memory with nothing
 * fetched ahead (two rows took twice one row's time). Here each weight
 * vector is converted once and feeds every row, eight outputs at a time,
 * the next eight outputs' weights fetched meanwhile as the one-row path
 * does. AVX2's instructions in AVX-512's 32 registers (24 accumulators for
 * three rows); each output keeps the lane order, so the results are
 * bitwise the other paths'. (Four outputs at a time for four to six rows
 * measured slower than the blocked path, so those stay there.) */
#define FEW_ROWS_MAX 3
AVX512 static inline __attribute__ ((always_inline)) void
rows_by_8_kernel (const int R, const DflDtype T, const float *x, int ldx, const char *w,
                  size_t wrow, int in, float *y, int ldy, int accumulate, const char *ahead)
{
  int in8 = in & ~7;
  size_t esz = T == DFL_DTYPE_F32 ? 4 : 2;
  __m256 a[FEW_ROWS_MAX][8];

#pragma GCC unroll 3
  for (int r = 0; r < R; r++)
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
      a[r][j] = _mm256_setzero_ps ();
  for (int i = 0; i < in8; i += 8) {
    __m256 c[FEW_ROWS_MAX];
#pragma GCC unroll 3
    for (int r = 0; r < R; r++)
      c[r] = _mm256_loadu_ps (x + (size_t) r * ldx + i);
    if (ahead) {
      /* the next rows' bytes at the rate these are read: 8·8 elements a step */
#pragma GCC unroll 4
      for (size_t l = 0; l < esz; l++)
        _mm_prefetch (ahead + (size_t) i * 8 * esz + l * 64, _MM_HINT_T0);
    }
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
      __m256 b = load8 (w + j * wrow, T, i);
#pragma GCC unroll 3
      for (int r = 0; r < R; r++)
        a[r][j] = _mm256_fmadd_ps (c[r], b, a[r][j]);
    }
  }
#pragma GCC unroll 3
  for (int r = 0; r < R; r++)
    for (int j = 0; j < 8; j++) {
      float v = finish (a[r][j], x + (size_t) r * ldx, w + j * wrow, T, in8, in);
      float *yo = y + (size_t) r * ldy + j;
      *yo = accumulate ? *yo + v : v;
    }
}


#define FEW_ROWS(R, T, N) \
  AVX512 static void \
  few_##N##_##R (const float *x, int ldx, const char *w, size_t wrow, int in, float *y, int ldy, \
                 int accumulate, const char *ahead) \
  { \
    rows_by_8_kernel (R, T, x, ldx, w, wrow, in, y, ldy, accumulate, ahead); \
  }
#define FEW_ROWS_ALL(T, N) FEW_ROWS (2, T, N) FEW_ROWS (3, T, N)
FEW_ROWS_ALL (DFL_DTYPE_F32, f32)
FEW_ROWS_ALL (DFL_DTYPE_F16, f16)
FEW_ROWS_ALL (DFL_DTYPE_BF16, bf16)
#undef FEW_ROWS_ALL
#undef FEW_ROWS

typedef void (*FewRowsFunc) (const float *x, int ldx, const char *w, size_t wrow, int in,
                             float *y, int ldy, int accumulate, const char *ahead);
#define FEW_TABLE(N) { few_##N##_2, few_##N##_3 }
/* [dtype][rows − 2] */
static const FewRowsFunc few_rows[3][FEW_ROWS_MAX - 1] = {
  [DFL_DTYPE_F32] = FEW_TABLE (f32),
  [DFL_DTYPE_F16] = FEW_TABLE (f16),
  [DFL_DTYPE_BF16] = FEW_TABLE (bf16),
};
#undef FEW_TABLE

/* Outputs [o0, o1) of 2 … FEW_ROWS_MAX rows, eight at a time, the rest
 * one by one. */
AVX512 static void
rows_few_avx512 (const float *x, int rows, int ldx, const DflWeights *w, int o0, int o1,
                 int n_out, float *y, int ldy, int accumulate)
{
  size_t esz = w->type == DFL_DTYPE_F32 ? 4 : 2, wrow = (size_t) w->cols * esz;
  int o = o0;

  for (; o + 8 <= o1; o += 8) {
    const char *wo = (const char *) w->data + (size_t) o * wrow;
    const char *ahead = 8 * wrow <= AHEAD_ROWS_BYTES && o + 16 <= n_out ? wo + 8 * wrow : NULL;
    few_rows[w->type][rows - 2] (x, ldx, wo, wrow, w->cols, y + o, ldy, accumulate, ahead);
  }
  for (; o < o1; o++)
    for (int r = 0; r < rows; r++)
      row_by_1 (x + (size_t) r * ldx, (const char *) w->data + (size_t) o * wrow, w->type,
                w->cols, y + (size_t) r * ldy + o, accumulate);
}
#endif

/* The set in use: BEST until the first call resolves it, or as chosen. */
static int isa_chosen = DFL_KERNELS_BEST;

static int
cpu_has (DflKernelsIsa isa)
{
#ifdef DFL_X86
  static int avx2 = -1, avx512 = -1;
  if (avx2 < 0) {
    __builtin_cpu_init ();
    avx2 = __builtin_cpu_supports ("avx2") && __builtin_cpu_supports ("fma") && has_f16c ();
    avx512 = avx2 && __builtin_cpu_supports ("avx512f") && __builtin_cpu_supports ("avx512bw")
        && __builtin_cpu_supports ("avx512vl");
  }
  if (isa == DFL_KERNELS_AVX2)
    return avx2;
  if (isa == DFL_KERNELS_AVX512)
    return avx512;
#endif
  return isa == DFL_KERNELS_GENERIC;
}

/* The fastest set this CPU runs, or the one DFL_KERNELS_ISA names (to
 * compare whole programs on the paths; see dfl-kernels.h). */
static DflKernelsIsa
best_isa (void)
{
  static int best = -1;
  int isa = __atomic_load_n (&best, __ATOMIC_RELAXED);

  if (isa < 0) {
    const char *env = getenv ("DFL_KERNELS_ISA");
    isa = cpu_has (DFL_KERNELS_AVX512) ? DFL_KERNELS_AVX512
        : cpu_has (DFL_KERNELS_AVX2) ? DFL_KERNELS_AVX2 : DFL_KERNELS_GENERIC;
    if (env && *env) {
      int want = !strcmp (env, "generic") ? DFL_KERNELS_GENERIC
          : !strcmp (env, "avx2") ? DFL_KERNELS_AVX2
          : !strcmp (env, "avx512") ? DFL_KERNELS_AVX512 : -1;
      if (want >= 0 && cpu_has (want))
        isa = want;
      else
        fprintf (stderr, "DFL_KERNELS_ISA=%s: %s; using %s\n", env,
                 want < 0 ? "not generic, avx2 or avx512" : "this CPU lacks it",
                 dfl_kernels_isa_name (isa));
    }
    __atomic_store_n (&best, isa, __ATOMIC_RELAXED);
  }
  return isa;
}

int
dfl_kernels_cpu_has (DflKernelsIsa isa)
{
  return isa == DFL_KERNELS_BEST || cpu_has (isa);
}

DflKernelsIsa
dfl_kernels_isa (void)
{
  int isa = __atomic_load_n (&isa_chosen, __ATOMIC_RELAXED);
  return isa == DFL_KERNELS_BEST ? best_isa () : (DflKernelsIsa) isa;
}

int
dfl_kernels_set_isa (DflKernelsIsa isa)
{
  if (isa != DFL_KERNELS_BEST && !cpu_has (isa))
    return 0;
  __atomic_store_n (&isa_chosen, isa, __ATOMIC_RELAXED);
  return 1;
}

void
dfl_kernels_set_generic (int on)
{
  dfl_kernels_set_isa (on ? DFL_KERNELS_GENERIC : DFL_KERNELS_BEST);
}

const char *
dfl_kernels_isa_name (DflKernelsIsa isa)
{
  switch (isa) {
    case DFL_KERNELS_GENERIC:
      return "generic";
    case DFL_KERNELS_AVX2:
      return "AVX2";
    case DFL_KERNELS_AVX512:
      return "AVX-512";
    case DFL_KERNELS_BEST:
    default:
      return "best";
  }
}

#ifdef DFL_X86
/* A blocked call shared out between the threads (dfl-parallel.h): the
 * blocks of outputs go by `next`, each thread its next block one ahead
 * (so it can fetch that block's weights in time). */
typedef struct {
  const DflWeights *w;
  const float *x, *xp;
  int rows, ldx, ldy, n_out, nb, n_blocks, accumulate, avx512, mb;
  float *y, *scratch;
  size_t per;
  atomic_int next;
} Blocked;

static void
blocked_work (void *data, int slot)
{
  Blocked *b = data;
  float *mine = b->scratch + b->per * slot;
  int cur, after;

  for (cur = atomic_fetch_add_explicit (&b->next, 1, memory_order_relaxed); cur < b->n_blocks;
       cur = after) {
    int ob = cur * b->nb, oe = DFL_MIN (ob + b->nb, b->n_out);
    int nb0 = oe, nb1 = oe;
    after = atomic_fetch_add_explicit (&b->next, 1, memory_order_relaxed);
    if (after < b->n_blocks) {
      nb0 = after * b->nb;
      nb1 = DFL_MIN (nb0 + b->nb, b->n_out);
    }
    if (b->avx512)
      block_avx512 (b->x, b->rows, b->ldx, b->xp, b->w, ob, oe, nb0, nb1, b->y, b->ldy,
                    b->accumulate, mine, b->mb);
    else
      block_avx2 (b->x, b->rows, b->ldx, b->xp, b->w->data, b->w->type, b->w->cols, b->w->cols,
                  ob, oe, nb0, nb1, b->y, b->ldy, b->accumulate, mine, b->mb);
  }
}

/* The blocked path over every output, by AVX2 or AVX-512 tiles; 0 (nothing
 * done) where its buffer cannot be had, and the one-row path, which needs
 * none, does the work. */
static int
blocked (const DflWeights *w, const float *x, int rows, int ldx, float *y, int ldy, int n_out,
         int accumulate, int avx512)
{
  /* x is laid out by chunk once, by the caller, for all threads (a copy
   * of a few KiB: shared out, every thread would wait for the rows the
   * others took, and a thread another process has taken the core from
   * would hold them all up). The threads then claim blocks of outputs as
   * they go: a thread slowed by anything else on the machine leaves the
   * others more blocks instead of a wait at the end. Blocks shrink where
   * there would be few of them. */
  int kc = avx512 ? KC5 : KC, mb = DFL_MIN (rows, avx512 ? MB5 : MB);
  int nb = avx512 ? NB5 : NB, nb_min = avx512 ? 4 * C5 : 4 * NR, nt = dfl_parallel_threads ();
  int in8 = w->cols & ~7, chunks = (in8 + kc - 1) / kc, n_blocks;
  size_t per;
  float *xp;
  Blocked b;

  while (nb > nb_min && n_out < 8 * nt * nb)
    nb /= 2;
  n_blocks = (n_out + nb - 1) / nb;
  if ((size_t) rows * n_out * w->cols <= 32768 || n_blocks < 2)
    nt = 1;
  /* each thread's panel and lanes, whole 64-byte lines */
  per = avx512 ? (size_t) KC5 / 8 * C5 * 16 + (size_t) (MB5 + R5 - 1) / R5 * R5 * C5 * 16
      : (size_t) NR * KC + (size_t) mb * nb * 8;
  per = (per + 15) & ~(size_t) 15;
  xp = aligned_alloc (64, sizeof (float) * ((size_t) chunks * rows * kc + per * nt));
  if (!xp)
    return 0;
  for (int r = 0; r < rows; r++)
    for (int ch = 0; ch < chunks; ch++)
      memcpy (xp + ((size_t) ch * rows + r) * kc, x + (size_t) r * ldx + (size_t) ch * kc,
              sizeof (float) * DFL_MIN (kc, in8 - ch * kc));
  b = (Blocked) { .w = w, .x = x, .xp = xp, .rows = rows, .ldx = ldx, .ldy = ldy,
                  .n_out = n_out, .nb = nb, .n_blocks = n_blocks, .accumulate = accumulate,
                  .avx512 = avx512, .mb = mb, .y = y, .scratch = xp + (size_t) chunks * rows * kc,
                  .per = per };
  atomic_init (&b.next, 0);
  dfl_parallel_run (nt, blocked_work, &b);
  free (xp);
  return 1;
}
#endif

/* Rows from which the blocked path pays: below, the panel is converted for
 * too few rows to save anything, and a row is bound by reading the weights
 * anyway. */
#define BLOCKED_ROWS 4
/* The same for the AVX-512 tiles: one row reads its weights as fast
 * through the AVX2 path, with less to do around each step, and two or
 * three through rows_few_avx512. */
#define BLOCKED5_ROWS (FEW_ROWS_MAX + 1)

/* The one-row path's blocks of 64 outputs, claimed by the threads. */
typedef struct {
  const DflWeights *w;
  const float *x;
  int rows, ldx, ldy, n_out, accumulate, use_avx2, use_few, block, n_blocks;
  float *y;
  atomic_int next;
} Rows;

/* Block b of outputs: the same whichever thread takes it. */
static void
rows_block (const Rows *r, int b)
{
  int o0 = b * r->block, o1 = o0 + r->block < r->n_out ? o0 + r->block : r->n_out;

#ifdef DFL_X86
  if (r->use_few) {
    rows_few_avx512 (r->x, r->rows, r->ldx, r->w, o0, o1, r->n_out, r->y, r->ldy, r->accumulate);
    return;
  }
  if (r->use_avx2) {
    rows_avx2 (r->x, r->rows, r->ldx, r->w->data, r->w->type, r->w->cols, r->w->cols, o0, o1,
               r->n_out, r->y, r->ldy, r->accumulate);
    return;
  }
#endif
  tile_scalar (r->x, r->rows, r->ldx, r->w->data, r->w->type, r->w->cols, r->w->cols, o0, o1,
               r->y, r->ldy, r->accumulate);
}

static void
rows_work (void *data, int slot)
{
  Rows *r = data;
  int b;

  (void) slot;
  while ((b = atomic_fetch_add_explicit (&r->next, 1, memory_order_relaxed)) < r->n_blocks)
    rows_block (r, b);
}

/* The blocks of several products under one counter: block b is block
 * b − start(i) of product i. */
typedef struct {
  Rows part[DFL_MATMUL_GROUP_MAX];
  int end[DFL_MATMUL_GROUP_MAX];
  int n;
  atomic_int next;
} RowsGroup;

static void
rows_group_work (void *data, int slot)
{
  RowsGroup *g = data;
  int b;

  (void) slot;
  while ((b = atomic_fetch_add_explicit (&g->next, 1, memory_order_relaxed)) < g->end[g->n - 1]) {
    int i = 0;
    while (b >= g->end[i])
      i++;
    rows_block (&g->part[i], b - (i ? g->end[i - 1] : 0));
  }
}

/* The job of the path by blocks of outputs (one row and its neighbours),
 * which every thread count computes the same way. With `or_blocked`, 0
 * where the rows are many enough for the blocked paths instead. */
static int
rows_path (const DflWeights *w, const float *x, int rows, int ldx, float *y, int ldy, int n_out,
           int accumulate, int or_blocked, Rows *r)
{
  int use_avx2 = 0, use_few = 0;

#ifdef DFL_X86
  {
    DflKernelsIsa isa = dfl_kernels_isa ();
    use_avx2 = isa != DFL_KERNELS_GENERIC;
    use_few = isa == DFL_KERNELS_AVX512 && rows >= 2 && rows <= FEW_ROWS_MAX;
    if (or_blocked && ((isa == DFL_KERNELS_AVX512 && rows >= BLOCKED5_ROWS)
                       || (use_avx2 && rows >= BLOCKED_ROWS)))
      return 0;
  }
#endif
  (void) or_blocked;
  *r = (Rows) { .w = w, .x = x, .rows = rows, .ldx = ldx, .y = y, .ldy = ldy, .n_out = n_out,
                .accumulate = accumulate, .use_avx2 = use_avx2, .use_few = use_few,
                .block = 64, .n_blocks = (n_out + 63) / 64 };
  atomic_init (&r->next, 0);
  return 1;
}

static void
run_rows (Rows *r)
{
  dfl_parallel_run (r->n_blocks > 1 && (size_t) r->rows * r->n_out * r->w->cols > 32768
                    ? dfl_parallel_threads () : 1, rows_work, r);
}

void
dfl_matmul_w (const DflWeights *w, const float *x, int rows, int ldx,
              float *y, int ldy, int n_out, int accumulate)
{
  Rows r;

  /* blocks of quantized weights: integer products (quant-matmul.c) */
  if (dfl_dtype_is_quantized (w->type)) {
    dfl_matmul_q (w, x, rows, ldx, y, ldy, n_out, accumulate);
    return;
  }
  if (!rows_path (w, x, rows, ldx, y, ldy, n_out, accumulate, 1, &r)) {
#ifdef DFL_X86
    DflKernelsIsa isa = dfl_kernels_isa ();
    if (isa == DFL_KERNELS_AVX512 && rows >= BLOCKED5_ROWS
        && blocked (w, x, rows, ldx, y, ldy, n_out, accumulate, 1))
      return;
    if (isa != DFL_KERNELS_GENERIC && rows >= BLOCKED_ROWS
        && blocked (w, x, rows, ldx, y, ldy, n_out, accumulate, 0))
      return;
#endif
    /* no memory for the blocked paths' panels: by blocks of outputs */
    rows_path (w, x, rows, ldx, y, ldy, n_out, accumulate, 0, &r);
  }
  run_rows (&r);
}

void
dfl_matmul_w_group (int n, const DflWeights *w, const float *x, int rows, int ldx,
                    float *const *y, const int *ldy, const int *n_out, int accumulate)
{
  RowsGroup g;
  size_t work = 0;

  g.n = n;
  for (int i = 0; i < n; i++) {
    if (n > DFL_MATMUL_GROUP_MAX || dfl_dtype_is_quantized (w[i].type)
        || !rows_path (&w[i], x, rows, ldx, y[i], ldy[i], n_out[i], accumulate, 1,
                       &g.part[i])) {
      /* a product that goes another way: each on its own */
      for (int j = 0; j < n; j++)
        dfl_matmul_w (&w[j], x, rows, ldx, y[j], ldy[j], n_out[j], accumulate);
      return;
    }
    g.end[i] = (i ? g.end[i - 1] : 0) + g.part[i].n_blocks;
    work += (size_t) rows * n_out[i] * w[i].cols;
  }
  atomic_init (&g.next, 0);
  dfl_parallel_run (g.end[n - 1] > 1 && work > 32768 ? dfl_parallel_threads () : 1,
                    rows_group_work, &g);
}

size_t
dfl_weights_bytes (const DflWeights *w)
{
  return (size_t) w->rows * dfl_dtype_row_bytes (w->type, w->cols);
}
