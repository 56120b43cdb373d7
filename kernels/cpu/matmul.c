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
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define DFL_MIN(a, b) ((a) < (b) ? (a) : (b))

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define DFL_X86 1
#endif

/* ---- the reference order, in plain C (machines without AVX2 + FMA) ---- */

static inline float
load_scalar (const void *w, DflWeightType type, size_t i)
{
  switch (type) {
    /* memcpy: a tensor in a mapped file need not be aligned to its element */
    case DFL_WEIGHT_F32: {
      float f;
      memcpy (&f, (const char *) w + 4 * i, 4);
      return f;
    }
    case DFL_WEIGHT_BF16: {
      uint16_t h;
      uint32_t bits;
      float f;
      memcpy (&h, (const char *) w + 2 * i, 2);
      bits = (uint32_t) h << 16;
      memcpy (&f, &bits, 4);
      return f;
    }
    case DFL_WEIGHT_F16:
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
finish (__m256 acc, const float *x, const void *w, DflWeightType type, int i, int n)
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
row_by_8_kernel (const DflWeightType T, const float *xr, const char *w, size_t wrow, int in,
                 float *yr, int accumulate, const char *ahead)
{
  int in8 = in & ~7;
  size_t esz = T == DFL_WEIGHT_F32 ? 4 : 2;
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
row_by_8 (const float *xr, const void *w, DflWeightType type, size_t wrow, int in, float *yr,
          int accumulate, const void *ahead)
{
  switch (type) {
    case DFL_WEIGHT_BF16:
      row_by_8_kernel (DFL_WEIGHT_BF16, xr, w, wrow, in, yr, accumulate, ahead);
      break;
    case DFL_WEIGHT_F16:
      row_by_8_kernel (DFL_WEIGHT_F16, xr, w, wrow, in, yr, accumulate, ahead);
      break;
    case DFL_WEIGHT_F32:
    default:
      row_by_8_kernel (DFL_WEIGHT_F32, xr, w, wrow, in, yr, accumulate, ahead);
      break;
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
tile_kernel (const int R, const int C, const DflWeightType T, const int src, const float *x,
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
TILES (DFL_WEIGHT_F32, FROM_ROWS, f32)
TILES (DFL_WEIGHT_F16, FROM_ROWS_TO_PANEL, f16)
TILES (DFL_WEIGHT_BF16, FROM_ROWS_TO_PANEL, bf16)
TILES (DFL_WEIGHT_F32, FROM_PANEL, panel)
#undef TILES
#undef TILE1

#define TABLE(N) { \
    { tile_##N##_1x1, tile_##N##_1x2, tile_##N##_1x3 }, \
    { tile_##N##_2x1, tile_##N##_2x2, tile_##N##_2x3 }, \
    { tile_##N##_3x1, tile_##N##_3x2, tile_##N##_3x3 }, \
    { tile_##N##_4x1, tile_##N##_4x2, tile_##N##_4x3 } }
/* [dtype][first tile of a group or not][R − 1][C − 1] */
static const TileFunc tiles[3][2][MR][NR] = {
  [DFL_WEIGHT_F32] = { TABLE (f32), TABLE (f32) },
  [DFL_WEIGHT_F16] = { TABLE (f16), TABLE (panel) },
  [DFL_WEIGHT_BF16] = { TABLE (bf16), TABLE (panel) },
};
#undef TABLE

/* One block of outputs [ob, oe) of every row (see above); while its last
 * chunk is computed on, the first chunk of the block [nb0, nb1) (the one
 * this thread does next) is fetched. xp: x's first in8 inputs by chunk
 * ([chunks][rows][KC]); scratch: NR·KC + mb·(oe − ob)·8 floats, 32-byte
 * aligned. */
AVX2 static void
block_avx2 (const float *x, int rows, int ldx, const float *xp, const void *w,
            DflWeightType type, size_t wstride, int in, int ob, int oe, int nb0, int nb1,
            float *y, int ldy, int accumulate, float *scratch, int mb)
{
  size_t esz = type == DFL_WEIGHT_F32 ? 4 : 2, wrow = wstride * esz;
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
rows_avx2 (const float *x, int rows, int ldx, const void *w, DflWeightType type,
           size_t wstride, int in, int o0, int o1, int n_out, float *y, int ldy, int accumulate)
{
  size_t esz = type == DFL_WEIGHT_F32 ? 4 : 2, wrow = wstride * esz;
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

#ifdef DFL_X86
/* The blocked path over every output; 0 (nothing done) where its buffer
 * cannot be had, and the one-row path, which needs none, does the work. */
static int
blocked (const DflWeights *w, const float *x, int rows, int ldx, float *y, int ldy, int n_out,
         int accumulate)
{
  /* x is laid out by chunk once, for all threads. The threads then claim
   * blocks of outputs as they go, each its next block one ahead (so it
   * can fetch that block's weights in time): a thread slowed by anything
   * else on the machine leaves the other one more blocks instead of a
   * wait at the end. Blocks shrink where there would be few of them. */
  int mb = DFL_MIN (rows, MB), nt = omp_get_max_threads (), nb = NB;
  int in8 = w->cols & ~7, chunks = (in8 + KC - 1) / KC, n_blocks, next = 0;
  size_t per;
  float *xp, *scratch;

  while (nb > 4 * NR && n_out < 8 * nt * nb)
    nb /= 2;
  n_blocks = (n_out + nb - 1) / nb;
  if ((size_t) rows * n_out * w->cols <= 32768 || n_blocks < 2)
    nt = 1;
  per = (size_t) NR * KC + (size_t) mb * nb * 8;
  xp = aligned_alloc (32, sizeof (float) * ((size_t) chunks * rows * KC + per * nt));
  if (!xp)
    return 0;
  scratch = xp + (size_t) chunks * rows * KC;
#pragma omp parallel num_threads (nt)
  {
    float *mine = scratch + per * omp_get_thread_num ();
    int cur, after;
#pragma omp for schedule(static)
    for (int r = 0; r < rows; r++)
      for (int ch = 0; ch < chunks; ch++)
        memcpy (xp + ((size_t) ch * rows + r) * KC, x + (size_t) r * ldx + (size_t) ch * KC,
                sizeof (float) * DFL_MIN (KC, in8 - ch * KC));
    for (cur = __atomic_fetch_add (&next, 1, __ATOMIC_RELAXED); cur < n_blocks; cur = after) {
      int ob = cur * nb, oe = DFL_MIN (ob + nb, n_out);
      int nb0 = oe, nb1 = oe;
      after = __atomic_fetch_add (&next, 1, __ATOMIC_RELAXED);
      if (after < n_blocks) {
        nb0 = after * nb;
        nb1 = DFL_MIN (nb0 + nb, n_out);
      }
      block_avx2 (x, rows, ldx, xp, w->data, w->type, w->cols, w->cols, ob, oe, nb0, nb1,
                  y, ldy, accumulate, mine, mb);
    }
  }
  free (xp);
  return 1;
}
#endif

/* Rows from which the blocked path pays: below, the panel is converted for
 * too few rows to save anything, and a row is bound by reading the weights
 * anyway. */
#define BLOCKED_ROWS 4

void
dfl_matmul_w (const DflWeights *w, const float *x, int rows, int ldx,
              float *y, int ldy, int n_out, int accumulate)
{
  int use_avx2 = 0;

#ifdef DFL_X86
  use_avx2 = have_avx2 ();
  if (use_avx2 && rows >= BLOCKED_ROWS && blocked (w, x, rows, ldx, y, ldy, n_out, accumulate))
    return;
#endif
  {
    /* Outputs go across the threads in blocks of 64. */
    int block = 64;
    int n_blocks = (n_out + block - 1) / block;
#pragma omp parallel for schedule(static) \
    if (n_blocks > 1 && (size_t) rows * n_out * w->cols > 32768)
    for (int b = 0; b < n_blocks; b++) {
      int o0 = b * block, o1 = o0 + block < n_out ? o0 + block : n_out;
#ifdef DFL_X86
      if (use_avx2) {
        rows_avx2 (x, rows, ldx, w->data, w->type, w->cols, w->cols, o0, o1, n_out, y, ldy,
                   accumulate);
        continue;
      }
#endif
      tile_scalar (x, rows, ldx, w->data, w->type, w->cols, w->cols, o0, o1, y, ldy, accumulate);
    }
  }
  (void) use_avx2;
}

size_t
dfl_weights_bytes (const DflWeights *w)
{
  return (size_t) w->rows * w->cols * (w->type == DFL_WEIGHT_F32 ? 4 : 2);
}
