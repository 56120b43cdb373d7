/* gst-dflash — the CUDA kernels of dfl-cuda.h and their launchers.
 *
 * Compute only. Products are in dfl-cuda-matmul.cu; these are small
 * kernels whose arithmetic follows the CPU kernels' (kernels/cpu, core/drafter-select.c)
 * closely enough that the GPU path can be tested against them: the same
 * sums in double where the CPU sums in double, the same float operations
 * in the same order where a choice (the selector) depends on them.
 */
#include "dfl-cuda-overlap.cuh"
#include "dfl-cuda-private.h"
#include "dfl-error.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <mma.h>

#define BLOCK 256
/* for one block over a long row, where a few rows are the whole launch */
#define WIDE_BLOCK 1024

static unsigned
grid_for (size_t n, unsigned block)
{
  size_t blocks = (n + block - 1) / block;
  /* grid-stride loops cover the rest */
  return (unsigned) MIN (blocks, (size_t) 65535 * 8);
}

__device__ static inline float
load_elem (const void *p, DflDtype type, size_t i)
{
  switch (type) {
  case DFL_DTYPE_F16:
    return __half2float (__ushort_as_half (((const unsigned short *) p)[i]));
  case DFL_DTYPE_BF16:
    return __bfloat162float (__ushort_as_bfloat16 (((const unsigned short *) p)[i]));
  default:
    return ((const float *) p)[i];
  }
}

__device__ static inline void
store_elem (void *p, DflDtype type, size_t i, float v)
{
  switch (type) {
  case DFL_DTYPE_F16:
    ((unsigned short *) p)[i] = __half_as_ushort (__float2half_rn (v));
    break;
  case DFL_DTYPE_BF16:
    ((unsigned short *) p)[i] = __bfloat16_as_ushort (__float2bfloat16_rn (v));
    break;
  default:
    ((float *) p)[i] = v;
  }
}

/* --- gathers and element-wise work --- */

__global__ static void
embed_kernel (const void *table, DflDtype type, int dim, const int32_t *ids, float *out)
{
  size_t row = (size_t) ids[blockIdx.x] * dim;
  float *o = out + (size_t) blockIdx.x * dim;

  for (int i = threadIdx.x; i < dim; i += blockDim.x)
    o[i] = load_elem (table, type, row + i);
}

extern "C" void
dfl_cuda_embed (DflCudaDevice *dev, const void *d_table, DflDtype type, int dim,
                const int32_t *d_ids, int n, float *d_out)
{
  if (n <= 0 || dim <= 0)
    return;
  embed_kernel<<<n, BLOCK, 0, dev->stream>>> (d_table, type, dim, d_ids, d_out);
  dfl_cuda_launched (dev, "dfl_cuda_embed");
}

/* A row's 1 / sqrt(mean(x²) + eps), every thread of the block told. The
 * sum of squares is in double as on the CPU, so a wide row's norm does not
 * depend on the order of the sum; rmsnorm_kernel and norm_rope_kernel
 * share it, so a head normed by either has the same bits. Every read of
 * the row is done when it returns (the row may be overwritten next). */
__device__ static float
block_rms_scale (const float *x, int dim, float eps)
{
  __shared__ double partial[WIDE_BLOCK / 32];
  __shared__ float scale;
  double ss = 0.0;

  /* unrolled so that a thread's loads are in flight together: a decode
   * step's norms are one row each, so their time is the loads' latency */
#pragma unroll 4
  for (int i = threadIdx.x; i < dim; i += blockDim.x)
    ss += (double) x[i] * x[i];
  for (int off = 16; off > 0; off >>= 1)
    ss += __shfl_down_sync (0xffffffffu, ss, off);
  if ((threadIdx.x & 31) == 0)
    partial[threadIdx.x >> 5] = ss;
  __syncthreads ();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int i = 0; i < (int) blockDim.x / 32; i++)
      total += partial[i];
    scale = 1.0f / sqrtf ((float) (total / dim) + eps);
  }
  __syncthreads ();
  return scale;
}

/* x · scale · w, rounded after each product (never fused into a
 * neighbour's add), the same in every kernel that norms */
__device__ static inline float
normed (float x, float scale, float w)
{
  return __fmul_rn (__fmul_rn (x, scale), w);
}

/* One block per row. */
__global__ static void __launch_bounds__ (WIDE_BLOCK)
rmsnorm_kernel (float *dst, const float *src, int dim, const float *w, float eps)
{
  const float *x = src + (size_t) blockIdx.x * dim;
  float *y = dst + (size_t) blockIdx.x * dim;
  float scale;

  /* the product after a norm takes its x from here */
  overlap_allow_next ();
  scale = block_rms_scale (x, dim, eps);

#pragma unroll 4
  for (int i = threadIdx.x; i < dim; i += blockDim.x)
    y[i] = normed (x[i], scale, w[i]);
}

extern "C" void
dfl_cuda_rmsnorm (DflCudaDevice *dev, float *d_dst, const float *d_src, int rows, int dim,
                  const float *d_w, float eps)
{
  if (rows <= 0 || dim <= 0)
    return;
  /* a hidden row (thousands of values) gets a thread per 4 of them; a
   * head's row (128) the usual block */
  rmsnorm_kernel<<<rows, dim >= 4 * WIDE_BLOCK ? WIDE_BLOCK : BLOCK, 0, dev->stream>>> (
    d_dst, d_src, dim, d_w, eps);
  dfl_cuda_launched (dev, "dfl_cuda_rmsnorm");
}

/* The rotation of one pair (u, v) of a head by the angle a, each product
 * rounded on its own (so rope_kernel and norm_rope_kernel agree bitwise
 * whatever the compiler would fuse). */
__device__ static inline void
rotate_pair (float u, float v, float a, float *lo, float *hi)
{
  float c = cosf (a), s = sinf (a);

  *lo = __fsub_rn (__fmul_rn (u, c), __fmul_rn (v, s));
  *hi = __fadd_rn (__fmul_rn (v, c), __fmul_rn (u, s));
}

/* One block per (row, head); the angle is the float product position ×
 * inv_freq, as on the CPU and in the checkpoints' own code. The position
 * is the start's plus the row, or the row's own (per_row). */
__global__ static void
rope_kernel (float *x, int heads, int head_dim, const float *inv_freq, const int64_t *pos,
             int per_row)
{
  int r = blockIdx.x / heads, half = head_dim / 2;
  float p = (float) (per_row ? pos[r] : *pos + r);
  float *lo = x + (size_t) blockIdx.x * head_dim, *hi = lo + half;

  for (int i = threadIdx.x; i < half; i += blockDim.x)
    rotate_pair (lo[i], hi[i], p * inv_freq[i], &lo[i], &hi[i]);
}

/* One block per (row, head) of BLOCK threads (rmsnorm_kernel's block for a
 * head's row): the head's norm, then its rope, in place, in one launch:
 * the bits of rmsnorm_kernel then rope_kernel. */
__global__ static void __launch_bounds__ (BLOCK)
norm_rope_kernel (float *x, int heads, int head_dim, const float *w, float eps,
                  const float *inv_freq, const int64_t *pos, int per_row)
{
  int r = blockIdx.x / heads, half = head_dim / 2;
  float p = (float) (per_row ? pos[r] : *pos + r);
  float *lo = x + (size_t) blockIdx.x * head_dim, *hi = lo + half;
  float scale = block_rms_scale (lo, head_dim, eps);

  for (int i = threadIdx.x; i < half; i += blockDim.x)
    rotate_pair (normed (lo[i], scale, w[i]), normed (hi[i], scale, w[half + i]),
                 p * inv_freq[i], &lo[i], &hi[i]);
}

static void
rope_launch (DflCudaDevice *dev, const char *what, float *d_x, int rows, int heads, int head_dim,
             const float *d_inv_freq, const int64_t *d_pos, int per_row)
{
  if (rows <= 0 || heads <= 0 || head_dim < 2)
    return;
  if (head_dim % 2) {
    dfl_cuda_note_invalid (dev, what, "head_dim %d is odd", head_dim);
    return;
  }
  rope_kernel<<<rows * heads, MIN (BLOCK, head_dim / 2), 0, dev->stream>>> (
    d_x, heads, head_dim, d_inv_freq, d_pos, per_row);
  dfl_cuda_launched (dev, what);
}

extern "C" void
dfl_cuda_rope (DflCudaDevice *dev, float *d_x, int rows, int heads, int head_dim,
               const float *d_inv_freq, const int64_t *d_pos0)
{
  rope_launch (dev, "dfl_cuda_rope", d_x, rows, heads, head_dim, d_inv_freq, d_pos0, 0);
}

extern "C" void
dfl_cuda_rope_at (DflCudaDevice *dev, float *d_x, int rows, int heads, int head_dim,
                  const float *d_inv_freq, const int64_t *d_pos)
{
  rope_launch (dev, "dfl_cuda_rope_at", d_x, rows, heads, head_dim, d_inv_freq, d_pos, 1);
}

extern "C" void
dfl_cuda_norm_rope (DflCudaDevice *dev, float *d_x, int rows, int heads, int head_dim,
                    const float *d_w, float eps, const float *d_inv_freq, const int64_t *d_pos,
                    int per_row)
{
  if (rows <= 0 || heads <= 0 || head_dim < 2)
    return;
  /* a head is one block's row: rmsnorm_kernel takes rows this wide with
   * WIDE_BLOCK threads, whose sums the norm here would not repeat */
  if (head_dim % 2 || head_dim >= 4 * WIDE_BLOCK) {
    dfl_cuda_note_invalid (dev, "dfl_cuda_norm_rope", "head_dim %d (even, below %d)", head_dim,
                           4 * WIDE_BLOCK);
    return;
  }
  norm_rope_kernel<<<rows * heads, BLOCK, 0, dev->stream>>> (d_x, heads, head_dim, d_w, eps,
                                                             d_inv_freq, d_pos, per_row);
  dfl_cuda_launched (dev, "dfl_cuda_norm_rope");
}

__global__ static void
silu_mul_kernel (float *gate, const float *up, size_t n)
{
  overlap_allow_next ();
  for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n;
       i += (size_t) gridDim.x * blockDim.x) {
    float g = gate[i];
    gate[i] = g / (1.0f + expf (-g)) * up[i];
  }
}

extern "C" void
dfl_cuda_silu_mul (DflCudaDevice *dev, float *d_gate, const float *d_up, size_t n)
{
  if (n == 0)
    return;
  silu_mul_kernel<<<grid_for (n, BLOCK), BLOCK, 0, dev->stream>>> (d_gate, d_up, n);
  dfl_cuda_launched (dev, "dfl_cuda_silu_mul");
}

__global__ static void
add_kernel (float *x, const float *y, size_t n)
{
  for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n;
       i += (size_t) gridDim.x * blockDim.x)
    x[i] += y[i];
}

extern "C" void
dfl_cuda_add (DflCudaDevice *dev, float *d_x, const float *d_y, size_t n)
{
  if (n == 0)
    return;
  add_kernel<<<grid_for (n, BLOCK), BLOCK, 0, dev->stream>>> (d_x, d_y, n);
  dfl_cuda_launched (dev, "dfl_cuda_add");
}

/* An element as the cache stores it: F32 as it is, BF16 rounded to
 * nearest even (a BF16 source, copied into a grown cache, as it is). */
__device__ static inline float
to_elem (float x, float *)
{
  return x;
}

__device__ static inline __nv_bfloat16
to_elem (float x, __nv_bfloat16 *)
{
  return __float2bfloat16_rn (x);
}

__device__ static inline __nv_bfloat16
to_elem (__nv_bfloat16 x, __nv_bfloat16 *)
{
  return x;
}

template <typename S, typename D>
__global__ static void
copy_rows_at_kernel (D *dst, int width, const int64_t *row0, const S *src, size_t n)
{
  D *d = dst + *row0 * (int64_t) width;
  for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n;
       i += (size_t) gridDim.x * blockDim.x)
    d[i] = to_elem (src[i], (D *) NULL);
}

extern "C" void
dfl_cuda_copy_rows_at (DflCudaDevice *dev, void *d_dst, int dst_bf16, int width,
                       const int64_t *d_row0, const void *d_src, int src_bf16, int rows)
{
  size_t n = (size_t) rows * width;
  dim3 grid = grid_for (n, BLOCK);

  if (n == 0)
    return;
  if (!dst_bf16 && !src_bf16)
    copy_rows_at_kernel<<<grid, BLOCK, 0, dev->stream>>> ((float *) d_dst, width, d_row0,
                                                          (const float *) d_src, n);
  else if (dst_bf16 && !src_bf16)
    copy_rows_at_kernel<<<grid, BLOCK, 0, dev->stream>>> ((__nv_bfloat16 *) d_dst, width, d_row0,
                                                          (const float *) d_src, n);
  else if (dst_bf16 && src_bf16)
    copy_rows_at_kernel<<<grid, BLOCK, 0, dev->stream>>> ((__nv_bfloat16 *) d_dst, width, d_row0,
                                                          (const __nv_bfloat16 *) d_src, n);
  else {
    dfl_cuda_note_invalid (dev, "dfl_cuda_copy_rows_at", "BF16 rows into an F32 buffer");
    return;
  }
  dfl_cuda_launched (dev, "dfl_cuda_copy_rows_at");
}

/* Element i of the rows: row i / width into its entry's row. */
template <typename D>
__global__ static void
copy_rows_table_kernel (DflCudaTable table, int width, const int32_t *which, const int64_t *row,
                        const float *src, size_t n)
{
  for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n;
       i += (size_t) gridDim.x * blockDim.x) {
    size_t r = i / width, c = i % width;
    ((D *) table.d[which[r]])[row[r] * (int64_t) width + c] = to_elem (src[i], (D *) NULL);
  }
}

extern "C" void
dfl_cuda_copy_rows_table (DflCudaDevice *dev, const DflCudaTable *table, int bf16, int width,
                          const int32_t *d_which, const int64_t *d_row, const float *d_src,
                          int rows)
{
  size_t n = (size_t) rows * width;

  if (n == 0)
    return;
  if (bf16)
    copy_rows_table_kernel<__nv_bfloat16><<<grid_for (n, BLOCK), BLOCK, 0, dev->stream>>> (
      *table, width, d_which, d_row, d_src, n);
  else
    copy_rows_table_kernel<float><<<grid_for (n, BLOCK), BLOCK, 0, dev->stream>>> (
      *table, width, d_which, d_row, d_src, n);
  dfl_cuda_launched (dev, "dfl_cuda_copy_rows_table");
}

/* --- attention --- */

/* Grouped-query attention in two passes.
 *
 * Pass one: a block per (kv head, chunk of keys, group of query vectors).
 * The query vectors of one kv head are every row's heads of that group, so
 * the chunk's keys and values are read from memory once for all of them
 * (a verify step's 16 rows × 4 heads share the reads of two blocks). The
 * whole chunk goes into shared memory at once, its loads all in flight
 * together, so a block waits on memory once; chunks are short (64 keys, 32
 * at head_dim above 128) so that even a decode step at 1024 keys spreads
 * over a card's worth of blocks. The block then works in three steps, each
 * shared out by whole pieces over its threads, so a decode step's four
 * query vectors keep only the threads they need busy and many keep them
 * all:
 *   scores  a piece is 4 query vectors × 4 keys over a quarter of the
 *           head's dimensions (every 16th float4); the quarters are summed
 *           across a quad of lanes;
 *   softmax a warp per query vector: the chunk's maximum m, p = exp(s − m)
 *           and their sum l over the keys the row sees;
 *   values  a piece is 4 query vectors × 4 dimensions, Σ_k p_k · v_k over
 *           the chunk's keys in order.
 * The block leaves (m, l, acc) of each query vector for its chunk in
 * `partial`. Pass two: a block per (row, head) merges the chunks in order,
 * each rescaled to the largest m.
 *
 * Batch-invariant: chunks sit at absolute key positions, and every number
 * a query vector gets is made by the same operations in the same order
 * whichever piece, thread or block computes it and whatever other rows the
 * call has; keys outside a row's range count exactly nothing (p = 0), and a
 * chunk it sees nothing of (l = 0) is skipped in the merge. So a row's
 * output is bitwise the same decoded alone, verified among 16, or launched
 * over a longer key bound: speculative and plain decoding on the card
 * cannot part on a near-tie in attention. */
/* the most query vectors a block takes (its shared memory is set up for
 * them) */
#define ATT_QMAX 64
/* threads of a block of few query vectors, and of many */
#define ATT_THREADS 256
#define ATT_THREADS_MANY 512
/* The key sets of a launch: one, or a table's (a row's entry by `which`);
 * F32, or BF16 (the kernel's BF). */
typedef struct {
  const void *k[DFL_CUDA_TABLE_MAX], *v[DFL_CUDA_TABLE_MAX];
} AttKeys;
#define ATT_MAX_HEAD_DIM 256

/* 16 bytes from global to shared memory without passing through registers
 * (cp.async, sm_80 on); zeros where `valid` is false (nothing is read). */
__device__ static inline void
copy_async16 (void *shared_dst, const void *global_src, bool valid)
{
  unsigned dst = (unsigned) __cvta_generic_to_shared (shared_dst);

  asm volatile ("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                :: "r"(dst), "l"(global_src), "r"(valid ? 16 : 0) : "memory");
}

static int
attention_chunk_keys (int head_dim)
{
  return head_dim <= 128 ? 64 : 32;
}

/* The query vectors a block takes (a multiple of 4): up to ATT_QBLOCK, and
 * no more than the launch has, so a decode step's few query vectors take
 * shared memory for themselves and not for ATT_QMAX, and more blocks fit
 * a multiprocessor. A verify step's query vectors of a kv head go to
 * several blocks, each reading the chunk again (from L2): more blocks with
 * less shared memory each ran faster than one block taking them all.
 * Over a table a group holds at least one row's heads. Which block takes a
 * query vector changes none of its arithmetic. */
#define ATT_QBLOCK 32

static int
round_up4 (int n)
{
  return (n + 3) / 4 * 4;
}

static int
attention_qmax (int rows, int hpg, gboolean table)
{
  return MIN (round_up4 (table ? MAX (ATT_QBLOCK, hpg) : ATT_QBLOCK), round_up4 (rows * hpg));
}

/* Shared memory of a block: Q [qmax][hd + 4], K [CH][hd + 4], V [CH][hd],
 * the scores [qmax][CH + 4], p transposed [CH][qmax + 4], the key ranges. */
static size_t
attention_smem (int head_dim, int ch, int qmax)
{
  size_t ld = (size_t) head_dim + 4;
  return sizeof (float) * (qmax * ld + ch * ld + ch * head_dim + qmax * (ch + 4)
                           + ch * (qmax + 4))
         + sizeof (int) * 2 * qmax;
}

/* Eight BF16 values (16 bytes, the first in the low half of the first
 * word) widened to F32 into shared memory: exact, so every later step
 * computes on the same floats an F32 cache of those values would hold. */
__device__ static inline void
widen8 (float *dst, uint4 w)
{
  *(float4 *) dst = make_float4 (__uint_as_float (w.x << 16), __uint_as_float (w.x & 0xffff0000u),
                                 __uint_as_float (w.y << 16), __uint_as_float (w.y & 0xffff0000u));
  *(float4 *) (dst + 4) = make_float4 (__uint_as_float (w.z << 16),
                                       __uint_as_float (w.z & 0xffff0000u),
                                       __uint_as_float (w.w << 16),
                                       __uint_as_float (w.w & 0xffff0000u));
}

/* The query vectors a block of a chunked attention call takes: qmax of
 * any rows (the blockIdx.z-th run of them); or, over a table (`which`),
 * those of a group of rows of one entry (a block a row: a row leads a
 * group where its entry's rows start or at a multiple of `per`, and the
 * group runs to the next row that leads one; a block whose row leads none
 * takes nothing, FALSE). The same for every thread of the block. */
__device__ static inline bool
att_block_queries (int rows, int hpg, int qmax, const int32_t *which, int *q0, int *nq,
                   int *entry)
{
  *q0 = blockIdx.z * qmax;
  *nq = MIN (qmax, rows * hpg - *q0);
  *entry = 0;
  if (which) {
    const int r = blockIdx.z, per = qmax / hpg;
    int n = 1;
    *entry = which[r];
    if (r % per != 0 && which[r - 1] == *entry)
      return false;
    while (r + n < rows && (r + n) % per != 0 && which[r + n] == *entry)
      n++;
    *q0 = r * hpg;
    *nq = n * hpg;
  }
  return true;
}

/* Each of the block's query vectors' key range into lo_sh / hi_sh (n_sh
 * slots, empty past nq), and in range[0, 1] the keys of chunk [kb0, kb0 +
 * ch) any of them sees. Where none sees any, each vector's partial of the
 * chunk is written empty and FALSE returned. Every thread of the block
 * calls it (it synchronizes them). */
template <int THREADS>
__device__ static inline bool
att_chunk_range (int nq, int n_sh, int q0, int hpg, const int32_t *lo_arr, const int32_t *hi_arr,
                 int *lo_sh, int *hi_sh, int *range, int kb0, int ch, int g, int heads, int hd,
                 float *partial, int chunks)
{
  const int t = threadIdx.x, chunk = blockIdx.y;

  if (t < n_sh) {
    int lo = 0, hi = 0;
    if (t < nq) {
      int r = (q0 + t) / hpg;
      lo = lo_arr[r];
      hi = hi_arr[r];
    }
    lo_sh[t] = lo;
    hi_sh[t] = hi;
  }
  if (t == 0) {
    range[0] = kb0 + ch;
    range[1] = kb0;
  }
  __syncthreads ();
  if (t < nq && lo_sh[t] < hi_sh[t] && lo_sh[t] < kb0 + ch && hi_sh[t] > kb0) {
    atomicMin (&range[0], MAX (lo_sh[t], kb0));
    atomicMax (&range[1], MIN (hi_sh[t], kb0 + ch));
  }
  __syncthreads ();
  if (range[0] < range[1])
    return true;
  for (int qi = t; qi < nq; qi += THREADS) {
    int r = (q0 + qi) / hpg, h = g * hpg + (q0 + qi) % hpg;
    float *p = partial + (((size_t) r * heads + h) * chunks + chunk) * (hd + 2);
    p[0] = -INFINITY;
    p[1] = 0.0f;
  }
  return false;
}

/* A warp's query vector qi of the chunk at kb0: lane j's scores of keys j,
 * j + 32, … scaled (−∞ where the vector does not see the key, or past
 * nq), and their maximum over the warp (a fixed tree of shuffles). */
template <int CH>
__device__ static inline float
att_warp_scores (int qi, int nq, int kb0, int lane, const int *lo_sh, const int *hi_sh,
                 const float *s_sh, float scale, float s[CH / 32])
{
  float mx = -INFINITY;

#pragma unroll
  for (int u = 0; u < CH / 32; u++) {
    int j = lane + 32 * u, key = kb0 + j;
    bool seen = qi < nq && key >= lo_sh[qi] && key < hi_sh[qi];
    s[u] = seen ? s_sh[qi * (CH + 4) + j] * scale : -INFINITY;
    mx = fmaxf (mx, s[u]);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1)
    mx = fmaxf (mx, __shfl_xor_sync (0xffffffffu, mx, off));
  return mx;
}

/* A warp's sum (a fixed tree of shuffles), and, from lane 0 where qi is
 * one of the block's vectors, its partial of the chunk: the maximum and
 * the sum of p. */
__device__ static inline void
att_warp_partial (float mx, float sum, int qi, int nq, int q0, int hpg, int g, int heads, int hd,
                  float *partial, int chunks)
{
#pragma unroll
  for (int off = 16; off > 0; off >>= 1)
    sum += __shfl_xor_sync (0xffffffffu, sum, off);
  if ((threadIdx.x & 31) == 0 && qi < nq) {
    int r = (q0 + qi) / hpg, h = g * hpg + (q0 + qi) % hpg;
    float *p = partial + (((size_t) r * heads + h) * chunks + blockIdx.y) * (hd + 2);
    p[0] = mx;
    p[1] = sum;
  }
}

template <int CH, int THREADS, bool BF>
__global__ static void
__launch_bounds__ (THREADS)
attention_chunk_kernel (const float *q, int rows, int heads, int kv_heads, int head_dim,
                        AttKeys keys, const int32_t *which, int kv_stride,
                        const int32_t *lo_arr, const int32_t *hi_arr, float scale,
                        float *partial, int chunks, int qmax)
{
  extern __shared__ float4 sh4[];
  float *sh = (float *) sh4;
  const int hd = head_dim, ld = hd + 4, hd4 = hd / 4, hpg = heads / kv_heads;
  const int g = blockIdx.x, chunk = blockIdx.y;
  int q0, nq, entry;
  if (!att_block_queries (rows, hpg, qmax, which, &q0, &nq, &entry))
    return;
  const int nqg = (nq + 3) / 4;
  const float *k = (const float *) keys.k[entry], *v = (const float *) keys.v[entry];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int kb0 = chunk * CH;
  float *q_sh = sh, *k_sh = q_sh + qmax * ld, *v_sh = k_sh + CH * ld;
  float *s_sh = v_sh + CH * hd, *p_sh = s_sh + qmax * (CH + 4);
  int *lo_sh = (int *) (p_sh + CH * (qmax + 4)), *hi_sh = lo_sh + qmax;
  __shared__ int range[2];

  /* the keys of this chunk any of the block's rows sees (none: every
   * query vector's share of it is empty) */
  if (!att_chunk_range<THREADS> (nq, qmax, q0, hpg, lo_arr, hi_arr, lo_sh, hi_sh, range, kb0, CH,
                                 g, heads, hd, partial, chunks))
    return;

  /* K and V of the chunk (zeros outside the keys seen) into shared
   * memory as F32. An F32 cache's rows are copied straight there, every
   * copy issued before the query vectors are read: no registers hold them
   * on the way (they would cap the blocks a multiprocessor runs at once).
   * A BF16 cache's (half the bytes to read) pass through registers to be
   * widened: 16 bytes, eight values, a load. */
  {
    const int klo = range[0], khi = range[1];
    if (BF) {
      const int hd8 = hd / 8;
      const __nv_bfloat16 *kb = (const __nv_bfloat16 *) keys.k[entry];
      const __nv_bfloat16 *vb = (const __nv_bfloat16 *) keys.v[entry];
      for (int i = t; i < CH * hd8; i += THREADS) {
        int j = i / hd8, d = (i % hd8) * 8, key = kb0 + j;
        uint4 kw = make_uint4 (0u, 0u, 0u, 0u), vw = kw;
        if (key >= klo && key < khi) {
          size_t o = (size_t) key * kv_stride + (size_t) g * hd + d;
          kw = *(const uint4 *) (kb + o);
          vw = *(const uint4 *) (vb + o);
        }
        widen8 (&k_sh[j * ld + d], kw);
        widen8 (&v_sh[j * hd + d], vw);
      }
    } else {
      for (int i = t; i < CH * hd4; i += THREADS) {
        int j = i / hd4, d = (i % hd4) * 4, key = kb0 + j;
        bool seen = key >= klo && key < khi;
        size_t o = seen ? (size_t) key * kv_stride + (size_t) g * hd + d : 0;
        copy_async16 (&k_sh[j * ld + d], k + o, seen);
        copy_async16 (&v_sh[j * hd + d], v + o, seen);
      }
    }
    asm volatile ("cp.async.commit_group;\n" ::);
    for (int i = t; i < nqg * 4 * hd4; i += THREADS) {
      int qi = i / hd4, d = (i % hd4) * 4;
      float4 x = make_float4 (0.0f, 0.0f, 0.0f, 0.0f);
      if (qi < nq) {
        int r = (q0 + qi) / hpg, h = g * hpg + (q0 + qi) % hpg;
        x = *(const float4 *) (q + ((size_t) r * heads + h) * hd + d);
      }
      *(float4 *) &q_sh[qi * ld + d] = x;
    }
    asm volatile ("cp.async.wait_group 0;\n" ::);
  }
  __syncthreads ();

  /* scores: piece i is quarter (i & 3) of query vectors 4·(i / CH) … + 3
   * against keys 4·((i / 4) % (CH / 4)) … + 3. A quarter is the float4
   * groups 4·quarter, +16, +32, …; the four quarters sit in one quad of
   * lanes (CH is a multiple of 32, so a warp's pieces are all there). */
  for (int i = t; i < nqg * CH; i += THREADS) {
    const int quarter = i & 3, kg = (i >> 2) % (CH / 4), qg = i / CH;
    float a[4][4];
#pragma unroll
    for (int x = 0; x < 4; x++)
#pragma unroll
      for (int c = 0; c < 4; c++)
        a[x][c] = 0.0f;
    for (int d = 4 * quarter; d < hd; d += 16) {
      float4 qv[4], kv[4];
#pragma unroll
      for (int x = 0; x < 4; x++)
        qv[x] = *(const float4 *) &q_sh[(qg * 4 + x) * ld + d];
#pragma unroll
      for (int c = 0; c < 4; c++)
        kv[c] = *(const float4 *) &k_sh[(kg * 4 + c) * ld + d];
#pragma unroll
      for (int x = 0; x < 4; x++)
#pragma unroll
        for (int c = 0; c < 4; c++)
          a[x][c] += qv[x].x * kv[c].x + qv[x].y * kv[c].y + qv[x].z * kv[c].z
                     + qv[x].w * kv[c].w;
    }
    /* the quarters' sums: (q0 + q1) + (q2 + q3), the same bits in every
     * lane of the quad (float addition commutes) */
#pragma unroll
    for (int x = 0; x < 4; x++)
#pragma unroll
      for (int c = 0; c < 4; c++) {
        a[x][c] += __shfl_xor_sync (0xffffffffu, a[x][c], 1);
        a[x][c] += __shfl_xor_sync (0xffffffffu, a[x][c], 2);
      }
    /* lane `quarter` of the quad stores query vector qg·4 + quarter's four */
#pragma unroll
    for (int x = 0; x < 4; x++)
      if (x == quarter)
        *(float4 *) &s_sh[(qg * 4 + x) * (CH + 4) + kg * 4]
          = make_float4 (a[x][0], a[x][1], a[x][2], a[x][3]);
  }
  __syncthreads ();

  /* softmax over the chunk: a warp per query vector, lane j holding keys
   * j, j + 32, …; the sum of p by a fixed tree of shuffles */
  for (int qi = warp; qi < nqg * 4; qi += THREADS / 32) {
    float s[CH / 32], sum = 0.0f;
    float mx = att_warp_scores<CH> (qi, nq, kb0, lane, lo_sh, hi_sh, s_sh, scale, s);
#pragma unroll
    for (int u = 0; u < CH / 32; u++) {
      float p = s[u] == -INFINITY ? 0.0f : expf (s[u] - mx);
      p_sh[(lane + 32 * u) * (qmax + 4) + qi] = p;
      sum += p;
    }
    att_warp_partial (mx, sum, qi, nq, q0, hpg, g, heads, hd, partial, chunks);
  }
  __syncthreads ();

  /* values: piece i is query vectors 4·(i / (hd/4)) … + 3 × dimensions
   * 4·(i % (hd/4)) … + 3, the chunk's keys summed in order */
  for (int i = t; i < nqg * hd4; i += THREADS) {
    const int d = (i % hd4) * 4, qg = i / hd4;
    float4 acc[4];
#pragma unroll
    for (int x = 0; x < 4; x++)
      acc[x] = make_float4 (0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 4
    for (int j = 0; j < CH; j++) {
      float4 p = *(const float4 *) &p_sh[j * (qmax + 4) + qg * 4];
      float4 vv = *(const float4 *) &v_sh[j * hd + d];
      float px[4] = { p.x, p.y, p.z, p.w };
#pragma unroll
      for (int x = 0; x < 4; x++) {
        acc[x].x += px[x] * vv.x;
        acc[x].y += px[x] * vv.y;
        acc[x].z += px[x] * vv.z;
        acc[x].w += px[x] * vv.w;
      }
    }
#pragma unroll
    for (int x = 0; x < 4; x++) {
      int qi = qg * 4 + x;
      if (qi < nq) {
        int r = (q0 + qi) / hpg, h = g * hpg + (q0 + qi) % hpg;
        float *p = partial + (((size_t) r * heads + h) * chunks + chunk) * (hd + 2) + 2 + d;
        p[0] = acc[x].x;
        p[1] = acc[x].y;
        p[2] = acc[x].z;
        p[3] = acc[x].w;
      }
    }
  }
}

/* The first pass over a BF16 cache on the tensor cores: the same blocks,
 * chunks and partials as attention_chunk_kernel, but the scores Q·Kᵀ and
 * the values P·V as 16×16×16 BF16 products with F32 sums (wmma). Q is
 * rounded to BF16 as it is loaded and the chunk's p as it is formed (the
 * sum l is of the rounded p, so the merge still weighs a proper average);
 * K and V go to shared memory as stored. A query vector's scores and
 * values depend only on its own row of the tiles (a tensor-core product
 * sums each output the same way wherever its row sits), so a row's output
 * is bitwise the same alone or among others, as the FMA kernel's is.
 *
 * Shared memory (QM = qmax rounded up to 16, ld16 = hd + 8 BF16, ldo =
 * hd + 4 F32): Q [QM][ld16], K [CH][ld16], V [CH][ld16] (BF16), the
 * scores [QM][CH + 4] (F32), p [QM][CH + 8] (BF16), the values
 * [QM][ldo] (F32), the key ranges. */
static size_t
attention_mma_smem (int head_dim, int ch, int qmax)
{
  size_t qm = (size_t) (qmax + 15) / 16 * 16, ld16 = (size_t) head_dim + 8;
  return sizeof (__nv_bfloat16) * (qm * ld16 + 2 * ch * ld16 + qm * (ch + 8))
         + sizeof (float) * (qm * (ch + 4) + qm * ((size_t) head_dim + 4))
         + sizeof (int) * 2 * qm;
}

template <int CH, int THREADS>
__global__ static void
__launch_bounds__ (THREADS)
attention_chunk_mma_kernel (const float *q, int rows, int heads, int kv_heads, int head_dim,
                            AttKeys keys, const int32_t *which, int kv_stride,
                            const int32_t *lo_arr, const int32_t *hi_arr, float scale,
                            float *partial, int chunks, int qmax)
{
  namespace wm = nvcuda::wmma;
  extern __shared__ float4 sh4[];
  const int hd = head_dim, ld16 = hd + 8, ldo = hd + 4, hpg = heads / kv_heads;
  const int qm = (qmax + 15) / 16 * 16;
  const int g = blockIdx.x, chunk = blockIdx.y;
  int q0, nq, entry;
  if (!att_block_queries (rows, hpg, qmax, which, &q0, &nq, &entry))
    return;
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5, warps = THREADS / 32;
  const int kb0 = chunk * CH;
  __nv_bfloat16 *q_sh = (__nv_bfloat16 *) sh4;
  __nv_bfloat16 *k_sh = q_sh + qm * ld16, *v_sh = k_sh + CH * ld16;
  __nv_bfloat16 *p_sh = v_sh + CH * ld16;
  float *s_sh = (float *) (p_sh + qm * (CH + 8)), *o_sh = s_sh + qm * (CH + 4);
  int *lo_sh = (int *) (o_sh + qm * ldo), *hi_sh = lo_sh + qm;
  __shared__ int range[2];

  if (!att_chunk_range<THREADS> (nq, qm, q0, hpg, lo_arr, hi_arr, lo_sh, hi_sh, range, kb0, CH,
                                 g, heads, hd, partial, chunks))
    return;

  /* K and V of the chunk as stored (zeros outside the keys seen), 16
   * bytes a copy; Q rounded to BF16 (zeros past the block's vectors) */
  {
    const int klo = range[0], khi = range[1], hd8 = hd / 8;
    const __nv_bfloat16 *kg = (const __nv_bfloat16 *) keys.k[entry];
    const __nv_bfloat16 *vg = (const __nv_bfloat16 *) keys.v[entry];
    for (int i = t; i < CH * hd8; i += THREADS) {
      int j = i / hd8, d = (i % hd8) * 8, key = kb0 + j;
      bool seen = key >= klo && key < khi;
      size_t o = seen ? (size_t) key * kv_stride + (size_t) g * hd + d : 0;
      copy_async16 (&k_sh[j * ld16 + d], kg + o, seen);
      copy_async16 (&v_sh[j * ld16 + d], vg + o, seen);
    }
    asm volatile ("cp.async.commit_group;\n" ::);
    for (int i = t; i < qm * (hd / 2); i += THREADS) {
      int qi = i / (hd / 2), d = (i % (hd / 2)) * 2;
      float2 x = make_float2 (0.0f, 0.0f);
      if (qi < nq) {
        int r = (q0 + qi) / hpg, h = g * hpg + (q0 + qi) % hpg;
        x = *(const float2 *) (q + ((size_t) r * heads + h) * hd + d);
      }
      *(__nv_bfloat162 *) &q_sh[qi * ld16 + d] = __floats2bfloat162_rn (x.x, x.y);
    }
    asm volatile ("cp.async.wait_group 0;\n" ::);
  }
  __syncthreads ();

  /* scores: a warp a 16×16 tile of query vectors × keys */
  for (int tile = warp; tile < (qm / 16) * (CH / 16); tile += warps) {
    const int tm = tile / (CH / 16), tn = tile % (CH / 16);
    wm::fragment<wm::accumulator, 16, 16, 16, float> acc;
    wm::fill_fragment (acc, 0.0f);
    for (int kk = 0; kk < hd; kk += 16) {
      wm::fragment<wm::matrix_a, 16, 16, 16, __nv_bfloat16, wm::row_major> a;
      wm::fragment<wm::matrix_b, 16, 16, 16, __nv_bfloat16, wm::col_major> b;
      wm::load_matrix_sync (a, q_sh + tm * 16 * ld16 + kk, ld16);
      wm::load_matrix_sync (b, k_sh + tn * 16 * ld16 + kk, ld16);
      wm::mma_sync (acc, a, b, acc);
    }
    wm::store_matrix_sync (s_sh + tm * 16 * (CH + 4) + tn * 16, acc, CH + 4, wm::mem_row_major);
  }
  __syncthreads ();

  /* softmax over the chunk: a warp per query vector, p rounded to BF16
   * and summed as rounded, by a fixed tree of shuffles */
  for (int qi = warp; qi < qm; qi += warps) {
    float s[CH / 32], sum = 0.0f;
    float mx = att_warp_scores<CH> (qi, nq, kb0, lane, lo_sh, hi_sh, s_sh, scale, s);
#pragma unroll
    for (int u = 0; u < CH / 32; u++) {
      __nv_bfloat16 pb = __float2bfloat16_rn (s[u] == -INFINITY ? 0.0f : expf (s[u] - mx));
      p_sh[qi * (CH + 8) + lane + 32 * u] = pb;
      sum += __bfloat162float (pb);
    }
    att_warp_partial (mx, sum, qi, nq, q0, hpg, g, heads, hd, partial, chunks);
  }
  __syncthreads ();

  /* values: a warp a 16×16 tile of query vectors × dimensions, the
   * chunk's keys 16 at a time in order */
  for (int tile = warp; tile < (qm / 16) * (hd / 16); tile += warps) {
    const int tm = tile / (hd / 16), tn = tile % (hd / 16);
    wm::fragment<wm::accumulator, 16, 16, 16, float> acc;
    wm::fill_fragment (acc, 0.0f);
#pragma unroll
    for (int kk = 0; kk < CH; kk += 16) {
      wm::fragment<wm::matrix_a, 16, 16, 16, __nv_bfloat16, wm::row_major> a;
      wm::fragment<wm::matrix_b, 16, 16, 16, __nv_bfloat16, wm::row_major> b;
      wm::load_matrix_sync (a, p_sh + tm * 16 * (CH + 8) + kk, CH + 8);
      wm::load_matrix_sync (b, v_sh + kk * ld16 + tn * 16, ld16);
      wm::mma_sync (acc, a, b, acc);
    }
    wm::store_matrix_sync (o_sh + tm * 16 * ldo + tn * 16, acc, ldo, wm::mem_row_major);
  }
  __syncthreads ();
  for (int i = t; i < nq * (hd / 4); i += THREADS) {
    int qi = i / (hd / 4), d = (i % (hd / 4)) * 4;
    int r = (q0 + qi) / hpg, h = g * hpg + (q0 + qi) % hpg;
    float *p = partial + (((size_t) r * heads + h) * chunks + chunk) * (hd + 2) + 2 + d;
    float4 x = *(const float4 *) &o_sh[qi * ldo + d];
    p[0] = x.x;
    p[1] = x.y;
    p[2] = x.z;
    p[3] = x.w;
  }
}

/* The chunks of one (row, head) merged in order, each rescaled to the
 * largest m; chunks the row saw nothing of (l = 0) are skipped.
 *
 * A chunk's weight exp(m − top) is formed once, by one thread, into
 * shared memory, a tile of chunks at a time, and the sums then run over
 * the tile in chunk order from there: every thread's loads of the
 * partial sums are independent of each other, so a decode step's 16 to
 * 64 chunks cost a few round trips to memory, not one a chunk. */
#define COMBINE_THREADS 128
#define COMBINE_TILE 256
static_assert (ATT_MAX_HEAD_DIM <= 2 * COMBINE_THREADS, "a combine thread takes two dimensions");

__global__ static void __launch_bounds__ (COMBINE_THREADS)
attention_combine_kernel (const float *partial, int chunks, int head_dim, float *out)
{
  /* a tile's weights, or -1 for a chunk skipped (exp is never negative) */
  __shared__ float weight[COMBINE_TILE], seen_l[COMBINE_TILE];
  __shared__ float warp_top[COMBINE_THREADS / 32];
  const int t = threadIdx.x, stride = head_dim + 2;
  const float *p = partial + (size_t) blockIdx.x * chunks * stride;
  float *o = out + (size_t) blockIdx.x * head_dim;
  float top = -INFINITY, total = 0.0f;
  /* dimensions t and t + COMBINE_THREADS (head_dim ≤ 256) */
  float a[2] = { 0.0f, 0.0f };

  overlap_allow_next ();

  /* the largest m of a seen chunk: max is the same in any order */
  for (int c = t; c < chunks; c += COMBINE_THREADS)
    if (p[(size_t) c * stride + 1] > 0.0f)
      top = fmaxf (top, p[(size_t) c * stride]);
  for (int off = 16; off > 0; off >>= 1)
    top = fmaxf (top, __shfl_xor_sync (0xffffffffu, top, off));
  if (t % 32 == 0)
    warp_top[t / 32] = top;
  __syncthreads ();
  for (int w = 0; w < COMBINE_THREADS / 32; w++)
    top = fmaxf (top, warp_top[w]);

  for (int c0 = 0; c0 < chunks; c0 += COMBINE_TILE) {
    const int n = MIN (COMBINE_TILE, chunks - c0);
    __syncthreads ();
    for (int c = t; c < n; c += COMBINE_THREADS) {
      const float *pc = p + (size_t) (c0 + c) * stride;
      float l = pc[1];
      weight[c] = l > 0.0f ? expf (pc[0] - top) : -1.0f;
      seen_l[c] = l;
    }
    __syncthreads ();
    /* every thread forms the same l, in chunk order */
    for (int c = 0; c < n; c++)
      if (weight[c] >= 0.0f)
        total += seen_l[c] * weight[c];
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int d = t + h * COMBINE_THREADS;
      if (d < head_dim) {
        const float *pd = p + (size_t) c0 * stride + 2 + d;
#pragma unroll 8
        for (int c = 0; c < n; c++)
          if (weight[c] >= 0.0f)
            a[h] += pd[(size_t) c * stride] * weight[c];
      }
    }
  }
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int d = t + h * COMBINE_THREADS;
    if (d < head_dim)
      o[d] = total > 0.0f ? a[h] / total : 0.0f;
  }
}

/* Above the default 48 KiB of shared memory a launch must opt in: the
 * first pass's kernels of THREADS a block, at both chunk lengths. */
template <int THREADS, bool BF>
static void
chunks_allow_smem (void)
{
  cudaFuncSetAttribute (attention_chunk_kernel<64, THREADS, BF>,
                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                        (int) attention_smem (128, 64, ATT_QMAX));
  cudaFuncSetAttribute (attention_chunk_kernel<32, THREADS, BF>,
                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                        (int) attention_smem (ATT_MAX_HEAD_DIM, 32, ATT_QMAX));
}

/* The same for the tensor-core first pass over a BF16 cache. */
template <int THREADS>
static void
mma_chunks_allow_smem (void)
{
  cudaFuncSetAttribute (attention_chunk_mma_kernel<64, THREADS>,
                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                        (int) attention_mma_smem (128, 64, ATT_QMAX));
  cudaFuncSetAttribute (attention_chunk_mma_kernel<32, THREADS>,
                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                        (int) attention_mma_smem (ATT_MAX_HEAD_DIM, 32, ATT_QMAX));
}

void
dfl_cuda_kernels_setup (DflCudaDevice *dev)
{
  mma_chunks_allow_smem<ATT_THREADS> ();
  mma_chunks_allow_smem<ATT_THREADS_MANY> ();
  chunks_allow_smem<ATT_THREADS, false> ();
  chunks_allow_smem<ATT_THREADS_MANY, false> ();
  chunks_allow_smem<ATT_THREADS, true> ();
  chunks_allow_smem<ATT_THREADS_MANY, true> ();
  (void) dev;
}

static size_t
attention_partial_floats (int rows, int heads, int head_dim, int max_keys)
{
  size_t ch = (size_t) attention_chunk_keys (head_dim);
  size_t chunks = ((size_t) MAX (max_keys, 1) + ch - 1) / ch;
  return (size_t) rows * heads * chunks * (head_dim + 2);
}

extern "C" gboolean
dfl_cuda_attention_reserve (DflCudaDevice *dev, int rows, int heads, int head_dim,
                            int max_keys, GError **error)
{
  size_t need = attention_partial_floats (rows, heads, head_dim, max_keys);
  float *d = NULL;

  if (need <= dev->att_partial_floats)
    return TRUE;
  need = MAX (need, dev->att_partial_floats * 2);
  /* the launches already queued may still read the old scratch */
  if (!dfl_cuda_sync (dev, error))
    return FALSE;
  if (cudaMalloc ((void **) &d, need * sizeof (float)) != cudaSuccess) {
    cudaGetLastError ();
    g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT,
                 "CUDA device %d: no room for attention's scratch of %zu bytes (%d rows × %d "
                 "heads over %d keys)", dev->ordinal, need * sizeof (float), rows, heads,
                 max_keys);
    return FALSE;
  }
  cudaFree (dev->d_att_partial);
  dev->d_att_partial = d;
  dev->att_partial_floats = need;
  dev->att_partial_generation++;
  return TRUE;
}

extern "C" guint64
dfl_cuda_attention_scratch_generation (DflCudaDevice *dev)
{
  return dev->att_partial_generation;
}

/* The first pass at chunks of `ch` keys, THREADS a block, K/V F32 or BF16. */
template <int THREADS, bool BF>
static void
launch_chunks (DflCudaDevice *dev, dim3 grid, size_t smem, int ch, const float *d_q, int rows,
               int heads, int kv_heads, int head_dim, const AttKeys *keys, const int32_t *d_which,
               int kv_stride, const int32_t *d_lo, const int32_t *d_hi, float scale, int chunks,
               int qmax)
{
  if (ch == 64)
    attention_chunk_kernel<64, THREADS, BF><<<grid, THREADS, smem, dev->stream>>> (
      d_q, rows, heads, kv_heads, head_dim, *keys, d_which, kv_stride, d_lo, d_hi, scale,
      dev->d_att_partial, chunks, qmax);
  else
    attention_chunk_kernel<32, THREADS, BF><<<grid, THREADS, smem, dev->stream>>> (
      d_q, rows, heads, kv_heads, head_dim, *keys, d_which, kv_stride, d_lo, d_hi, scale,
      dev->d_att_partial, chunks, qmax);
}

template <int THREADS>
static void
launch_chunks_kv (DflCudaDevice *dev, bool bf16, dim3 grid, size_t smem, int ch,
                  const float *d_q, int rows, int heads, int kv_heads, int head_dim,
                  const AttKeys *keys, const int32_t *d_which, int kv_stride,
                  const int32_t *d_lo, const int32_t *d_hi, float scale, int chunks, int qmax)
{
  /* a BF16 cache of head dims in 16s: on the tensor cores */
  if (bf16 && head_dim % 16 == 0) {
    size_t mma_smem = attention_mma_smem (head_dim, ch, qmax);
    if (ch == 64)
      attention_chunk_mma_kernel<64, THREADS><<<grid, THREADS, mma_smem, dev->stream>>> (
        d_q, rows, heads, kv_heads, head_dim, *keys, d_which, kv_stride, d_lo, d_hi, scale,
        dev->d_att_partial, chunks, qmax);
    else
      attention_chunk_mma_kernel<32, THREADS><<<grid, THREADS, mma_smem, dev->stream>>> (
        d_q, rows, heads, kv_heads, head_dim, *keys, d_which, kv_stride, d_lo, d_hi, scale,
        dev->d_att_partial, chunks, qmax);
    return;
  }
  if (bf16)
    launch_chunks<THREADS, true> (dev, grid, smem, ch, d_q, rows, heads, kv_heads, head_dim,
                                  keys, d_which, kv_stride, d_lo, d_hi, scale, chunks, qmax);
  else
    launch_chunks<THREADS, false> (dev, grid, smem, ch, d_q, rows, heads, kv_heads, head_dim,
                                   keys, d_which, kv_stride, d_lo, d_hi, scale, chunks, qmax);
}

/* Both forms: `keys` one key set (which NULL) or a table's. */
static void
attention_launch (DflCudaDevice *dev, const char *what, const float *d_q, int rows, int heads,
                  int kv_heads, int head_dim, const AttKeys *keys, int n_keys, bool bf16,
                  const int32_t *d_which, int kv_stride, const int32_t *d_lo,
                  const int32_t *d_hi, int max_keys, float scale, float *d_out)
{
  /* K and V are read 16 bytes at a time: 4 floats, or 8 BF16 values */
  const int per16 = bf16 ? 8 : 4;
  int ch, chunks, groups, qmax;
  uintptr_t aligned = (uintptr_t) d_q;
  size_t smem;
  dim3 grid;

  if (rows <= 0 || heads <= 0)
    return;
  if (head_dim <= 0 || head_dim > ATT_MAX_HEAD_DIM || head_dim % 4 || kv_heads <= 0
      || heads % kv_heads || max_keys < 0 || (d_which && heads / kv_heads > ATT_QMAX)) {
    dfl_cuda_note_invalid (dev, what,
                           "head_dim %d (a multiple of 4, at most %d), %d heads over %d kv heads "
                           "(a table: at most %d a kv head), %d keys", head_dim,
                           ATT_MAX_HEAD_DIM, heads, kv_heads, ATT_QMAX, max_keys);
    return;
  }
  /* q, K and V are read 16 bytes at a time */
  for (int i = 0; i < n_keys; i++)
    aligned |= (uintptr_t) keys->k[i] | (uintptr_t) keys->v[i];
  if (kv_stride % per16 || head_dim % per16 || aligned % 16) {
    dfl_cuda_note_invalid (dev, what,
                           "K/V of %s rows of stride %d and head_dim %d (multiples of %d are "
                           "needed) or q, k, v not 16-byte aligned", bf16 ? "BF16" : "F32",
                           kv_stride, head_dim, per16);
    return;
  }
  if (attention_partial_floats (rows, heads, head_dim, max_keys) > dev->att_partial_floats) {
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    GError *error = NULL;
    cudaStreamIsCapturing (dev->stream, &capturing);
    if (capturing != cudaStreamCaptureStatusNone) {
      dfl_cuda_note_invalid (dev, what,
                             "%d rows × %d heads over %d keys outgrow the scratch in a captured "
                             "graph: dfl_cuda_attention_reserve before the capture", rows, heads,
                             max_keys);
      return;
    }
    if (!dfl_cuda_attention_reserve (dev, rows, heads, head_dim, max_keys, &error)) {
      dfl_cuda_note_invalid (dev, what, "%s", error->message);
      g_error_free (error);
      return;
    }
  }
  ch = attention_chunk_keys (head_dim);
  chunks = MAX ((max_keys + ch - 1) / ch, 1);
  /* over a table, a block a row: those that lead a group of rows of one
   * entry take the group, the others leave */
  qmax = attention_qmax (rows, heads / kv_heads, d_which != NULL);
  groups = d_which ? rows : (rows * (heads / kv_heads) + qmax - 1) / qmax;
  grid = dim3 (kv_heads, chunks, groups);
  smem = attention_smem (head_dim, ch, qmax);
  /* a verify step's blocks (16 query vectors or more) have the work for
   * 16 warps; a decode step's 4 keep 8 busy, and more blocks of them fit
   * a multiprocessor. The threads a block has change none of its
   * arithmetic. */
  if (qmax >= 16)
    launch_chunks_kv<ATT_THREADS_MANY> (dev, bf16, grid, smem, ch, d_q, rows, heads, kv_heads,
                                        head_dim, keys, d_which, kv_stride, d_lo, d_hi, scale,
                                        chunks, qmax);
  else
    launch_chunks_kv<ATT_THREADS> (dev, bf16, grid, smem, ch, d_q, rows, heads, kv_heads,
                                   head_dim, keys, d_which, kv_stride, d_lo, d_hi, scale, chunks,
                                   qmax);
  dfl_cuda_launched (dev, what);
  attention_combine_kernel<<<rows * heads, COMBINE_THREADS, 0, dev->stream>>> (
    dev->d_att_partial, chunks, head_dim, d_out);
  dfl_cuda_launched (dev, what);
}

extern "C" void
dfl_cuda_attention (DflCudaDevice *dev, const float *d_q, int rows, int heads, int kv_heads,
                    int head_dim, const void *d_k, const void *d_v, int kv_bf16, int kv_stride,
                    const int32_t *d_lo, const int32_t *d_hi, int max_keys, float scale,
                    float *d_out)
{
  AttKeys keys = { { d_k }, { d_v } };

  attention_launch (dev, "dfl_cuda_attention", d_q, rows, heads, kv_heads, head_dim, &keys, 1,
                    kv_bf16 != 0, NULL, kv_stride, d_lo, d_hi, max_keys, scale, d_out);
}

extern "C" void
dfl_cuda_attention_table (DflCudaDevice *dev, const float *d_q, int rows, int heads,
                          int kv_heads, int head_dim, const DflCudaTable *k,
                          const DflCudaTable *v, int kv_bf16, int kv_stride,
                          const int32_t *d_which, const int32_t *d_lo, const int32_t *d_hi,
                          int max_keys, float scale, float *d_out)
{
  AttKeys keys;
  int n = 0;

  /* the table's used entries are the leading non-NULL ones */
  for (int i = 0; i < DFL_CUDA_TABLE_MAX; i++) {
    keys.k[i] = k->d[i];
    keys.v[i] = v->d[i];
    if (k->d[i])
      n = i + 1;
  }
  attention_launch (dev, "dfl_cuda_attention_table", d_q, rows, heads, kv_heads, head_dim, &keys,
                    n, kv_bf16 != 0, d_which, kv_stride, d_lo, d_hi, max_keys, scale, d_out);
}

/* --- the drafter's row convolution --- */

__global__ static void
row_conv_kernel (const float *x, int dim, int group, int kernel, const float *base,
                 const float *dyn, int dyn_stride, float *y)
{
  int r = blockIdx.y, taps = MIN (kernel, r + 1), groups = dim / group;
  const float *dr = dyn + (size_t) r * dyn_stride;

  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < dim; i += gridDim.x * blockDim.x) {
    float s = 0.0f;
    for (int o = 0; o < taps; o++)
      s += (base[(size_t) o * dim + i] + dr[o * groups + i / group])
           * x[(size_t) (r - o) * dim + i];
    y[(size_t) r * dim + i] = s;
  }
}

extern "C" void
dfl_cuda_row_conv (DflCudaDevice *dev, const float *d_x, int rows, int dim, int group,
                   int kernel, const float *d_base, const float *d_dyn, int dyn_stride,
                   float *d_y)
{
  dim3 grid;

  if (rows <= 0 || dim <= 0 || kernel <= 0)
    return;
  if (group <= 0 || dim % group || rows > 65535) {
    dfl_cuda_note_invalid (dev, "dfl_cuda_row_conv", "dim %d in groups of %d, %d rows", dim,
                           group, rows);
    return;
  }
  grid = dim3 ((dim + BLOCK - 1) / BLOCK, rows);
  row_conv_kernel<<<grid, BLOCK, 0, dev->stream>>> (d_x, dim, group, kernel, d_base, d_dyn,
                                                    dyn_stride, d_y);
  dfl_cuda_launched (dev, "dfl_cuda_row_conv");
}

/* --- choices: argmax, top-k, the selector --- */

/* (value, index) pairs: the larger value wins, then the smaller index;
 * index −1 is no value at all */
__device__ static inline void
better_of (float &v, int &i, float v2, int i2)
{
  if (i2 < 0)
    return;
  if (i < 0 || v2 > v || (v2 == v && i2 < i)) {
    v = v2;
    i = i2;
  }
}

/* The CPU's argmax keeps index 0 unless a later value is strictly above the
 * best so far, so NaNs never win and a NaN first gives 0: the same as the
 * first index of the largest non-NaN value, unless x[0] is NaN. */
__global__ static void __launch_bounds__ (WIDE_BLOCK)
argmax_kernel (const float *x, int n, int ld, int32_t *out)
{
  __shared__ float v_sh[WIDE_BLOCK / 32];
  __shared__ int i_sh[WIDE_BLOCK / 32];
  const float *row = x + (size_t) blockIdx.x * ld;
  const int step = blockDim.x, per_pass = 8;
  float best = -INFINITY;
  int at = -1;

  /* a thread loads 8 values before comparing any, so a row of a large
   * vocabulary costs a few load latencies, not one per value; it still
   * meets its indices in increasing order, so the first of equal values
   * wins */
  for (int base = threadIdx.x; base < n; base += step * per_pass) {
    float v[per_pass];
#pragma unroll
    for (int j = 0; j < per_pass; j++) {
      int i = base + j * step;
      v[j] = i < n ? row[i] : NAN;
    }
#pragma unroll
    for (int j = 0; j < per_pass; j++)
      if (!isnan (v[j]) && (at < 0 || v[j] > best)) {
        best = v[j];
        at = base + j * step;
      }
  }
  for (int off = 16; off > 0; off >>= 1) {
    float v2 = __shfl_down_sync (0xffffffffu, best, off);
    int i2 = __shfl_down_sync (0xffffffffu, at, off);
    better_of (best, at, v2, i2);
  }
  if ((threadIdx.x & 31) == 0) {
    v_sh[threadIdx.x >> 5] = best;
    i_sh[threadIdx.x >> 5] = at;
  }
  __syncthreads ();
  if (threadIdx.x == 0) {
    for (int w = 1; w < (int) blockDim.x / 32; w++)
      better_of (best, at, v_sh[w], i_sh[w]);
    out[blockIdx.x] = (at < 0 || isnan (row[0])) ? 0 : at;
  }
}

extern "C" void
dfl_cuda_argmax (DflCudaDevice *dev, const float *d_x, int rows, int n, int ld, int32_t *d_out)
{
  if (rows <= 0)
    return;
  if (n <= 0) {
    dfl_cuda_note_invalid (dev, "dfl_cuda_argmax", "rows of %d values", n);
    return;
  }
  argmax_kernel<<<rows, WIDE_BLOCK, 0, dev->stream>>> (d_x, n, ld, d_out);
  dfl_cuda_launched (dev, "dfl_cuda_argmax");
}

#define TOPK_MAX 64

/* A float's bits as an unsigned key in the float order, −0 and +0 one key
 * (the CPU compares them equal, so their indices order them). */
__device__ static inline unsigned
order_key (float v)
{
  unsigned u = __float_as_uint (v == 0.0f ? 0.0f : v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* One block per row, or per slice of a row. The k-th largest key is found a byte at a time (a
 * radix select: four passes, each a histogram of the next byte among the
 * keys that share the bytes found so far); then every key above it is
 * taken, and of the keys equal to it the first ones by index, as many as
 * are missing; the ≤ k taken are ranked by (value down, index up). That is
 * the CPU's dfl_top_k: the k largest, equals in index order, NaN skipped.
 * Slots past the row's non-NaN values get value NaN and index −1.
 *
 * Block b takes slice b % slices of row b / slices: `slice_len` values from
 * (b % slices) · slice_len on (the last slice what is left), its indices
 * counted from the row's start; its k go to values/indices + b·k. With
 * `map`, the row is a list of candidates (another call's slices, one after
 * the other) and map[row·ld + i] is candidate i's index in the original
 * row: candidates lie slice by slice in index order and each slice's in
 * (value down, index up), so among equal values the candidate order is the
 * index order and the ranking holds. */
__global__ static void
top_k_kernel (const float *x, int n, int ld, int k, int slices, int slice_len,
              const int32_t *map, float *values, int32_t *indices)
{
  __shared__ unsigned hist[256];
  __shared__ unsigned prefix_sh, need_sh, valid_sh, taken_sh, eq_seen_sh;
  __shared__ unsigned warp_eq[BLOCK / 32];
  __shared__ unsigned key_sh[TOPK_MAX];
  __shared__ float val_sh[TOPK_MAX];
  __shared__ int idx_sh[TOPK_MAX];
  const int r = blockIdx.x / slices, first = (blockIdx.x % slices) * slice_len;
  const float *row = x + (size_t) r * ld + first;
  const int32_t *row_map = map ? map + (size_t) r * ld : NULL;
  unsigned prefix = 0, mask = 0, threshold, need, gt_count;
  int take_all, count;

  n = MAX (MIN (n - first, slice_len), 0);

  if (threadIdx.x == 0) {
    prefix_sh = 0;
    need_sh = k;
    taken_sh = 0;
    eq_seen_sh = 0;
  }
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x)
      hist[i] = 0;
    __syncthreads ();
    /* Logits crowd into a few bins (their top bytes are alike), so the
     * lanes of a warp that share a bin add once for all of them; the
     * whole warp takes every step (sentinel bin 256 for no value). */
    for (int base = 0; base < n; base += blockDim.x) {
      int i = base + threadIdx.x;
      float v = i < n ? row[i] : NAN;
      unsigned key = order_key (v);
      unsigned bin = !isnan (v) && (key & mask) == prefix ? (key >> shift) & 0xff : 256;
      unsigned peers = __match_any_sync (0xffffffffu, bin);
      if (bin < 256 && (int) (threadIdx.x & 31) == __ffs (peers) - 1)
        atomicAdd (&hist[bin], (unsigned) __popc (peers));
    }
    __syncthreads ();
    if (threadIdx.x == 0) {
      unsigned cum = 0, want = need_sh;
      if (shift == 24) {
        unsigned total = 0;
        for (int d = 0; d < 256; d++)
          total += hist[d];
        valid_sh = total;
      }
      if (valid_sh > (unsigned) k) {
        int d = 255;
        for (; d > 0 && cum + hist[d] < want; d--)
          cum += hist[d];
        need_sh = want - cum;
        prefix_sh |= (unsigned) d << shift;
      }
    }
    __syncthreads ();
    take_all = valid_sh <= (unsigned) k;
    if (take_all)
      break;
    prefix = prefix_sh;
    mask |= 0xffu << shift;
  }

  threshold = prefix_sh;
  need = need_sh;
  gt_count = take_all ? 0 : k - need;
  /* keys above the threshold (or every non-NaN value when there are no
   * more than k): order does not matter, the ranking below sorts them */
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    float v = row[i];
    unsigned key = order_key (v);
    if (!isnan (v) && (take_all || key > threshold)) {
      unsigned slot = atomicAdd (&taken_sh, 1u);
      key_sh[slot] = key;
      val_sh[slot] = v;
      idx_sh[slot] = i;
    }
  }
  /* keys equal to the threshold: the first `need` by index, a block-wide
   * tile of indices at a time, each ranked by a ballot */
  if (!take_all) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int base = 0; base < n; base += blockDim.x) {
      int i = base + threadIdx.x;
      float v = i < n ? row[i] : 0.0f;
      int eq = i < n && !isnan (v) && order_key (v) == threshold;
      unsigned ballot = __ballot_sync (0xffffffffu, eq);
      unsigned before = eq_seen_sh, rank;
      if (lane == 0)
        warp_eq[warp] = __popc (ballot);
      __syncthreads ();
      rank = before + __popc (ballot & ((1u << lane) - 1));
      for (int w = 0; w < warp; w++)
        rank += warp_eq[w];
      if (eq && rank < need) {
        key_sh[gt_count + rank] = threshold;
        val_sh[gt_count + rank] = v;
        idx_sh[gt_count + rank] = i;
      }
      __syncthreads ();
      if (threadIdx.x == 0)
        for (int w = 0; w < BLOCK / 32; w++)
          eq_seen_sh += warp_eq[w];
      __syncthreads ();
      if (eq_seen_sh >= need)
        break;
    }
  }
  __syncthreads ();

  count = take_all ? (int) taken_sh : k;
  if (threadIdx.x < (unsigned) k) {
    float *vo = values + (size_t) blockIdx.x * k;
    int32_t *io = indices + (size_t) blockIdx.x * k;
    int t = threadIdx.x;
    if (t < count) {
      int rank = 0;
      for (int j = 0; j < count; j++)
        rank += key_sh[j] > key_sh[t] || (key_sh[j] == key_sh[t] && idx_sh[j] < idx_sh[t]);
      vo[rank] = val_sh[t];
      io[rank] = row_map ? row_map[idx_sh[t]] : first + idx_sh[t];
    } else {
      vo[t] = NAN;
      io[t] = -1;
    }
  }
}

/* For k up to TOPK_SMALL, no radix passes: each thread keeps the best
 * TOPK_SMALL of the values it reads (in registers, sorted by key down,
 * index up; a thread reads its values in index order, so an equal key
 * never displaces an earlier one), and the block then takes the best of
 * the threads' heads k times. The k largest of the slice are among the
 * threads' kept ones, so the result is top_k_kernel's, without its four
 * serial scans of a 256-bin histogram (some 30 µs a launch at any n).
 * Key 0 is no float's (order_key of −inf is 0x007fffff), so it marks an
 * empty slot; the arguments are top_k_kernel's. */
#define TOPK_SMALL 8

__device__ static inline int
key_before (unsigned ka, int ia, unsigned kb, int ib)
{
  return ka > kb || (ka == kb && ia < ib);
}

__global__ static void
top_k_small_kernel (const float *x, int n, int ld, int k, int slices, int slice_len,
                    const int32_t *map, float *values, int32_t *indices)
{
  __shared__ unsigned warp_key[BLOCK / 32];
  __shared__ int warp_idx[BLOCK / 32];
  __shared__ int win_idx;
  const int r = blockIdx.x / slices, first = (blockIdx.x % slices) * slice_len;
  const float *row = x + (size_t) r * ld + first;
  const int32_t *row_map = map ? map + (size_t) r * ld : NULL;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  unsigned key[TOPK_SMALL];
  int idx[TOPK_SMALL];

  n = MAX (MIN (n - first, slice_len), 0);
#pragma unroll
  for (int s = 0; s < TOPK_SMALL; s++) {
    key[s] = 0;
    idx[s] = INT_MAX;
  }
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    float v = row[i];
    unsigned kv = order_key (v);
    int iv = i;
    if (isnan (v) || kv <= key[TOPK_SMALL - 1])
      continue;
    /* one pass of compare-and-swap down the list keeps it in registers */
#pragma unroll
    for (int s = 0; s < TOPK_SMALL; s++) {
      if (key_before (kv, iv, key[s], idx[s])) {
        unsigned tk = key[s];
        int ti = idx[s];
        key[s] = kv;
        idx[s] = iv;
        kv = tk;
        iv = ti;
      }
    }
  }

  for (int round = 0; round < k; round++) {
    unsigned bk = key[0];
    int bi = idx[0];
    for (int off = 16; off > 0; off >>= 1) {
      unsigned ok = __shfl_xor_sync (0xffffffffu, bk, off);
      int oi = __shfl_xor_sync (0xffffffffu, bi, off);
      if (key_before (ok, oi, bk, bi)) {
        bk = ok;
        bi = oi;
      }
    }
    if (lane == 0) {
      warp_key[warp] = bk;
      warp_idx[warp] = bi;
    }
    __syncthreads ();
    if (threadIdx.x == 0) {
      unsigned wk = warp_key[0];
      int wi = warp_idx[0];
      for (int w = 1; w < BLOCK / 32; w++)
        if (key_before (warp_key[w], warp_idx[w], wk, wi)) {
          wk = warp_key[w];
          wi = warp_idx[w];
        }
      win_idx = wk ? wi : -1;
      values[(size_t) blockIdx.x * k + round] = wk ? row[wi] : NAN;
      indices[(size_t) blockIdx.x * k + round] = wk ? (row_map ? row_map[wi] : first + wi) : -1;
    }
    __syncthreads ();
    /* the winner's index is its thread's alone: that thread moves up */
    if (win_idx >= 0 && idx[0] == win_idx && key[0] != 0) {
#pragma unroll
      for (int s = 0; s < TOPK_SMALL - 1; s++) {
        key[s] = key[s + 1];
        idx[s] = idx[s + 1];
      }
      key[TOPK_SMALL - 1] = 0;
      idx[TOPK_SMALL - 1] = INT_MAX;
    }
    __syncthreads ();
  }
}

/* Either kernel for one pass: the small one where k allows. */
static void
top_k_launch (DflCudaDevice *dev, int blocks, const float *x, int n, int ld, int k, int slices,
              int slice_len, const int32_t *map, float *values, int32_t *indices)
{
  if (k <= TOPK_SMALL)
    top_k_small_kernel<<<blocks, BLOCK, 0, dev->stream>>> (x, n, ld, k, slices, slice_len, map,
                                                           values, indices);
  else
    top_k_kernel<<<blocks, BLOCK, 0, dev->stream>>> (x, n, ld, k, slices, slice_len, map,
                                                     values, indices);
}

/* Rows longer than two slices of TOPK_SLICE values go through two passes:
 * a block per slice finds the slice's k, then a block per row the k of
 * those (a row of 151936 logits is 75 slices: 1200 blocks for a block's 16
 * rows instead of 16 walking 600 KB each, four passes apiece). */
#define TOPK_SLICE 2048

extern "C" void
dfl_cuda_top_k (DflCudaDevice *dev, const float *d_x, int rows, int n, int ld, int k,
                float *d_values, int32_t *d_indices)
{
  int slices;
  size_t need;

  if (rows <= 0)
    return;
  if (k < 1 || k > TOPK_MAX || n < 0) {
    dfl_cuda_note_invalid (dev, "dfl_cuda_top_k", "k %d (from 1 to %d) of rows of %d values", k,
                           TOPK_MAX, n);
    return;
  }
  slices = (n + TOPK_SLICE - 1) / TOPK_SLICE;
  if (slices <= 2) {
    top_k_launch (dev, rows, d_x, n, ld, k, 1, MAX (n, 1), NULL, d_values, d_indices);
    dfl_cuda_launched (dev, "dfl_cuda_top_k");
    return;
  }
  /* the candidates: values then indices, [rows][slices·k] each */
  need = (size_t) rows * slices * k * (sizeof (float) + sizeof (int32_t));
  if (need > dev->topk_bytes) {
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    void *d = NULL;
    cudaStreamIsCapturing (dev->stream, &capturing);
    /* the launches already queued may still read the old candidates */
    if (capturing != cudaStreamCaptureStatusNone || cudaStreamSynchronize (dev->stream)
        || cudaMalloc (&d, need) != cudaSuccess) {
      cudaGetLastError ();
      dfl_cuda_note_invalid (dev, "dfl_cuda_top_k", "no room for the candidates of %d rows of "
                             "%d values (%zu bytes)%s", rows, n, need,
                             capturing != cudaStreamCaptureStatusNone ? " inside a graph capture"
                             : "");
      return;
    }
    cudaFree (dev->d_topk);
    dev->d_topk = d;
    dev->topk_bytes = need;
  }
  {
    float *cand = (float *) dev->d_topk;
    int32_t *cand_idx = (int32_t *) (cand + (size_t) rows * slices * k);
    top_k_launch (dev, rows * slices, d_x, n, ld, k, slices, TOPK_SLICE, NULL, cand, cand_idx);
    dfl_cuda_launched (dev, "dfl_cuda_top_k (the slices)");
    top_k_launch (dev, rows, cand, slices * k, slices * k, k, 1, slices * k, cand_idx, d_values,
                  d_indices);
    dfl_cuda_launched (dev, "dfl_cuda_top_k (their candidates)");
  }
}

__device__ static inline float
f16_at (const uint16_t *book, size_t i)
{
  return __half2float (__ushort_as_half (book[i]));
}

/* One block walks the chain. The score is formed with the CPU's float
 * operations in the CPU's order (pc = pred ⊙ hp; s = Σ pc·succ from 0;
 * s += logit), each rounded on its own (no fused multiply-add), so the
 * choice is the CPU's bit for bit, ties included. */
__global__ static void
select_rescore_kernel (const int32_t *cand, const float *cand_logit, int rows, int k,
                       const float *hp, int rank, const uint16_t *pred_book,
                       const uint16_t *succ_book, int32_t anchor, int32_t *chosen)
{
  extern __shared__ float pc_sh[];   /* [rank] */
  __shared__ float score_sh[TOPK_MAX];
  __shared__ int32_t prev_sh;

  if (threadIdx.x == 0)
    prev_sh = anchor;
  __syncthreads ();
  for (int r = 0; r < rows; r++) {
    const int32_t *cr = cand + (size_t) r * k;
    size_t prev_row = (size_t) prev_sh * rank;

    for (int i = threadIdx.x; i < rank; i += blockDim.x)
      pc_sh[i] = __fmul_rn (f16_at (pred_book, prev_row + i), hp[(size_t) r * rank + i]);
    __syncthreads ();
    for (int c = threadIdx.x; c < k; c += blockDim.x) {
      int32_t tok = cr[c];
      if (tok >= 0) {
        size_t row = (size_t) tok * rank;
        float s = 0.0f;
        for (int i = 0; i < rank; i++)
          s = __fadd_rn (s, __fmul_rn (pc_sh[i], f16_at (succ_book, row + i)));
        score_sh[c] = __fadd_rn (s, cand_logit[(size_t) r * k + c]);
      }
    }
    __syncthreads ();
    if (threadIdx.x == 0) {
      /* the candidates are top_k's: the valid ones first; none gives 0 */
      int32_t best_tok = cr[0] >= 0 ? cr[0] : 0;
      float best = -INFINITY;
      for (int c = 0; c < k && cr[c] >= 0; c++)
        if (score_sh[c] > best) {
          best = score_sh[c];
          best_tok = cr[c];
        }
      chosen[r] = best_tok;
      prev_sh = best_tok;
    }
    /* prev_sh is written before the next row reads it, and pc_sh and
     * score_sh are read before they are rewritten */
    __syncthreads ();
  }
}

/* The same choice with the rows' scores formed at once: row r's previous
 * token is the anchor (r = 0) or one of row r − 1's k candidates (token 0
 * where that row has none), so every score the walk could ask for —
 * rows · k · k of them, each with the serial kernel's operations in its
 * order — is formed in parallel into shared memory, and one thread then
 * walks the rows, picking as the serial kernel picks. The serial kernel
 * waited on the codebooks' loads row after row (about 3 µs a row on an
 * H200: 48 µs for a block of 16). */
__global__ static void
select_rescore_all_kernel (const int32_t *cand, const float *cand_logit, int rows, int k,
                           const float *hp, int rank, const uint16_t *pred_book,
                           const uint16_t *succ_book, int32_t anchor, int32_t *chosen)
{
  extern __shared__ float score_sh[];   /* [rows][k (previous)][k (candidate)] */

  for (int j = threadIdx.x; j < rows * k * k; j += blockDim.x) {
    int r = j / (k * k), p = j / k % k, c = j % k;
    const int32_t *prev_cand = cand + (size_t) (r - 1) * k;
    int32_t tok = cand[(size_t) r * k + c];
    int32_t prev = r == 0 ? anchor : prev_cand[0] < 0 ? 0 : prev_cand[p];
    float s = 0.0f;

    /* p past row r − 1's valid candidates (or past 0 for the anchor) is
     * never asked for */
    if (tok < 0 || prev < 0 || (r == 0 && p > 0))
      continue;
    for (int i = 0; i < rank; i++) {
      float pc = __fmul_rn (f16_at (pred_book, (size_t) prev * rank + i), hp[(size_t) r * rank + i]);
      s = __fadd_rn (s, __fmul_rn (pc, f16_at (succ_book, (size_t) tok * rank + i)));
    }
    score_sh[j] = __fadd_rn (s, cand_logit[(size_t) r * k + c]);
  }
  __syncthreads ();
  if (threadIdx.x == 0) {
    int p = 0;   /* which of the previous row's candidates was chosen */
    for (int r = 0; r < rows; r++) {
      const int32_t *cr = cand + (size_t) r * k;
      const float *sc = score_sh + ((size_t) r * k + p) * k;
      int32_t best_tok = cr[0] >= 0 ? cr[0] : 0;
      float best = -INFINITY;
      int best_c = 0;
      for (int c = 0; c < k && cr[c] >= 0; c++)
        if (sc[c] > best) {
          best = sc[c];
          best_tok = cr[c];
          best_c = c;
        }
      chosen[r] = best_tok;
      p = best_c;
    }
  }
}

/* Scores the parallel kernel holds in shared memory at most. */
#define RESCORE_ALL_MAX 8192

extern "C" void
dfl_cuda_select_rescore (DflCudaDevice *dev, const int32_t *d_cand, const float *d_cand_logit,
                         int rows, int k, const float *d_hp, int rank,
                         const uint16_t *d_pred_book, const uint16_t *d_succ_book,
                         int32_t anchor, int32_t *d_chosen)
{
  if (rows <= 0)
    return;
  if (k < 1 || k > TOPK_MAX || rank < 1 || rank > 8192) {
    dfl_cuda_note_invalid (dev, "dfl_cuda_select_rescore",
                           "k %d (from 1 to %d), rank %d (from 1 to 8192)", k, TOPK_MAX, rank);
    return;
  }
  if ((size_t) rows * k * k <= RESCORE_ALL_MAX) {
    select_rescore_all_kernel<<<1, 256, sizeof (float) * rows * k * k, dev->stream>>> (
      d_cand, d_cand_logit, rows, k, d_hp, rank, d_pred_book, d_succ_book, anchor, d_chosen);
    dfl_cuda_launched (dev, "dfl_cuda_select_rescore (all scores at once)");
    return;
  }
  select_rescore_kernel<<<1, 128, sizeof (float) * rank, dev->stream>>> (
    d_cand, d_cand_logit, rows, k, d_hp, rank, d_pred_book, d_succ_book, anchor, d_chosen);
  dfl_cuda_launched (dev, "dfl_cuda_select_rescore");
}

/* --- conversions and random fills --- */

__global__ static void
convert_kernel (const void *src, DflDtype src_type, void *dst, DflDtype dst_type, size_t n)
{
  for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n;
       i += (size_t) gridDim.x * blockDim.x)
    store_elem (dst, dst_type, i, load_elem (src, src_type, i));
}

extern "C" void
dfl_cuda_convert (DflCudaDevice *dev, const void *d_src, DflDtype src_type, void *d_dst,
                  DflDtype dst_type, size_t n)
{
  if (n == 0)
    return;
  convert_kernel<<<grid_for (n, BLOCK), BLOCK, 0, dev->stream>>> (d_src, src_type, d_dst,
                                                                  dst_type, n);
  dfl_cuda_launched (dev, "dfl_cuda_convert");
}

/* splitmix64's finaliser: a good 64-bit mix of (seed, index) */
__device__ static inline uint64_t
mix64 (uint64_t z)
{
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__global__ static void
fill_random_kernel (void *dst, DflDtype type, size_t n, uint64_t seed, float scale)
{
  for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n;
       i += (size_t) gridDim.x * blockDim.x) {
    uint64_t h = mix64 (seed * 0x9e3779b97f4a7c15ull + i + 1);
    float u = (float) (h >> 40) * (1.0f / 16777216.0f);   /* [0, 1) in 24 bits */
    store_elem (dst, type, i, (2.0f * u - 1.0f) * scale);
  }
}

extern "C" void
dfl_cuda_fill_random (DflCudaDevice *dev, void *d_dst, DflDtype type, size_t n,
                      uint64_t seed, float scale)
{
  if (n == 0)
    return;
  fill_random_kernel<<<grid_for (n, BLOCK), BLOCK, 0, dev->stream>>> (d_dst, type, n, seed,
                                                                      scale);
  dfl_cuda_launched (dev, "dfl_cuda_fill_random");
}
