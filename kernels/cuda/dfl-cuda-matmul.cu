/* gst-dflash — y = x · Wᵀ on the card (dfl_cuda_matmul, and products of
 * one x in one launch: dfl_cuda_matmul_group).
 *
 * A decode or verify step multiplies a few rows by every weight matrix
 * once, so its products are bound by reading the weights, not by
 * arithmetic, and a launch's start and tail weigh on the small ones. The
 * paths:
 *   - one row of 16-bit weights: a kernel of ours that only streams the
 *     weights (cuBLAS's kernels for a one-column x split the sum over
 *     blocks and read the weights more slowly), one launch for a group;
 *   - a group of a few rows (2 to 32) of 16-bit weights with few outputs
 *     in all (q, k and v): one launch of a kernel of ours on the tensor
 *     cores, in place of one cuBLAS call a product (whose kernels leave
 *     narrow products short of work);
 *   - everything else (F32 weights, one product of several rows, prefill,
 *     batches): cuBLAS, on the tensor cores for 16-bit weights, after x is
 *     rounded into a scratch.
 * 16-bit paths round x to the weights' type (the CPU's 16-bit kernels keep x in
 * F32; the parity tests' tolerances hold the difference).
 */
#include "dfl-cuda-overlap.cuh"
#include "dfl-cuda-private.h"
#include "dfl-error.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

template <typename W> __device__ static inline float widen (W v);
template <> __device__ inline float widen<__nv_bfloat16> (__nv_bfloat16 v) { return __bfloat162float (v); }
template <> __device__ inline float widen<__half> (__half v) { return __half2float (v); }

template <typename W> __device__ static inline W narrow (float v);
template <> __device__ inline __nv_bfloat16 narrow<__nv_bfloat16> (float v) { return __float2bfloat16_rn (v); }
template <> __device__ inline __half narrow<__half> (float v) { return __float2half_rn (v); }

template <typename W>
__device__ static inline float
round_like (float v)
{
  return widen<W> (narrow<W> (v));
}

/* --- x rounded into a scratch, for cuBLAS --- */

template <typename W>
__global__ static void
round_rows_kernel (const float *x, int rows, int in, int ldx, W *dst)
{
  size_t n = (size_t) rows * in;

  for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n;
       i += (size_t) gridDim.x * blockDim.x)
    dst[i] = narrow<W> (x[(i / in) * ldx + i % in]);
}

/* --- the products of one launch --- */

/* Up to DFL_CUDA_GROUP_MAX products of the same x, each its own weights
 * (one type, one width) and output: output o of the launch is output
 * o - start(i) of product i, where start(i) = end[i - 1]. A block or a
 * lane finds its product by its output alone, so one launch reads every
 * product's weights as one stream. */
typedef struct {
  const void *w[DFL_CUDA_GROUP_MAX];
  float *y[DFL_CUDA_GROUP_MAX];
  int ldy[DFL_CUDA_GROUP_MAX];
  int end[DFL_CUDA_GROUP_MAX];
  int n;
} Group;

/* The product output `o` of the launch belongs to: its weights, output
 * and row stride, and o's index in it. The arrays are read at constant
 * indices only (a kernel parameter indexed by a variable would be copied
 * to local memory first). */
struct GroupPart {
  const void *w;
  float *y;
  int ldy, local;
};

__device__ static inline GroupPart
group_find (const Group &g, int o)
{
  GroupPart p = { g.w[0], g.y[0], g.ldy[0], o };

#pragma unroll
  for (int j = 1; j < DFL_CUDA_GROUP_MAX; j++)
    if (j < g.n && o >= g.end[j - 1])
      p = (GroupPart) { g.w[j], g.y[j], g.ldy[j], o - g.end[j - 1] };
  return p;
}

/* --- one row on the CUDA cores --- */

/* One block per output; each thread sums a fixed set of columns, then the
 * block reduces in a fixed order, so an output's sum is the same bits in
 * a launch of one product or of several. VEC: in % 8 == 0 and W and x
 * 16-byte aligned, so a thread reads 8 weights and 8 inputs per load. */
#define ROW_THREADS 128

template <typename W, bool VEC>
__global__ static void __launch_bounds__ (ROW_THREADS)
one_row_matmul_kernel (Group g, int in, const float *x, bool accumulate)
{
  GroupPart gp = group_find (g, blockIdx.x);
  const W *row = (const W *) gp.w + (size_t) gp.local * in;
  float *y = gp.y + gp.local;
  float acc = 0.0f;

  overlap_allow_next ();
  overlap_wait_previous ();

  if (VEC) {
    for (int k = threadIdx.x * 8; k < in; k += ROW_THREADS * 8) {
      uint4 packed = __ldg ((const uint4 *) (row + k));
      const W *wv = (const W *) &packed;
      float4 a = __ldg ((const float4 *) (x + k));
      float4 b = __ldg ((const float4 *) (x + k + 4));
      float xs[8] = { a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w };
#pragma unroll
      for (int j = 0; j < 8; j++)
        acc = fmaf (round_like<W> (xs[j]), widen<W> (wv[j]), acc);
    }
  } else {
    for (int k = threadIdx.x; k < in; k += ROW_THREADS)
      acc = fmaf (round_like<W> (x[k]), widen<W> (row[k]), acc);
  }

  __shared__ float part[ROW_THREADS / 32];
  for (int off = 16; off > 0; off /= 2)
    acc += __shfl_xor_sync (0xffffffffu, acc, off);
  if (threadIdx.x % 32 == 0)
    part[threadIdx.x / 32] = acc;
  __syncthreads ();
  if (threadIdx.x == 0) {
    float sum = 0.0f;
    for (int j = 0; j < ROW_THREADS / 32; j++)
      sum += part[j];
    *y = accumulate ? *y + sum : sum;
  }
}

template <typename W>
static void
launch_one_row (DflCudaDevice *dev, const Group &g, int in, const float *d_x, bool accumulate)
{
  bool vec = in % 8 == 0 && ((uintptr_t) d_x) % 16 == 0;

  for (int i = 0; i < g.n; i++)
    vec = vec && ((uintptr_t) g.w[i]) % 16 == 0;
  if (vec)
    dfl_cuda_launch_overlapped (dev, one_row_matmul_kernel<W, true>, g.end[g.n - 1], ROW_THREADS,
                                g, in, d_x, accumulate);
  else
    dfl_cuda_launch_overlapped (dev, one_row_matmul_kernel<W, false>, g.end[g.n - 1],
                                ROW_THREADS, g, in, d_x, accumulate);
}

/* --- a few rows on the tensor cores --- */

/* Two values rounded to W, packed as a fragment's register holds them (the
 * lower column in the low half). */
template <typename W> __device__ static inline uint32_t pack2 (float lo, float hi);
template <> __device__ inline uint32_t
pack2<__nv_bfloat16> (float lo, float hi)
{
  __nv_bfloat162 v = __floats2bfloat162_rn (lo, hi);
  return *(const uint32_t *) &v;
}
template <> __device__ inline uint32_t
pack2<__half> (float lo, float hi)
{
  __half2 v = __floats2half2_rn (lo, hi);
  return *(const uint32_t *) &v;
}

/* One m16n8k16 product with F32 accumulators: c += a · b, a 16 rows × 16
 * of x, b 16 × 8 outputs of W, in the PTX ISA's fragment layout. */
#define MMA_OPERANDS(c, a, b0, b1) \
  : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) \
  : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1)

template <typename W> struct IsHalf { static constexpr bool value = false; };
template <> struct IsHalf<__half> { static constexpr bool value = true; };

template <typename W>
__device__ static inline void
mma (float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
  if (IsHalf<W>::value)
    asm ("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
         "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};" MMA_OPERANDS (c, a, b0, b1));
  else
    asm ("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
         "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};" MMA_OPERANDS (c, a, b0, b1));
}

/* Rows a launch of the few-rows kernel takes: two tiles of 16. */
#define FEW_ROWS_MAX 32

/* A block owns NT·8 outputs; its KS warps split the input into KS ranges
 * of whole 32-column steps and their partial sums meet in shared memory,
 * added in warp order. MT tiles of 16 rows (rows ≤ 16·MT).
 *
 * The sum runs over the columns in a permuted order, the same for x and W:
 * in a step of 32 columns, lane (g = lane / 4, t = lane % 4) loads 8
 * consecutive weights of output g, columns 8t..8t+7, in one 16-byte load,
 * and the step's two k16 products take columns {8t, 8t+1, 8t+2, 8t+3} and
 * {8t+4..8t+7} as their fragment's k = {2t, 2t+1, 2t+8, 2t+9}. x's
 * fragment takes the same columns of rows g and g + 8, rounded as they
 * are read, so every weight is read once, in whole 32-byte sectors, and
 * never leaves registers. Which columns a warp sums and in what order
 * depend on `in` and KS alone, so a row's outputs do not depend on the rows
 * that come with it.
 *
 * A lane has two 16-byte loads of weights in flight at a time (U steps of
 * NT outputs): the kernel then needs 48–88 registers a thread, and the
 * many warps that leave room for on an SM keep memory busier than long
 * runs of loads a warp do. With 16 loads a lane (126–187 registers, a
 * quarter of an SM's warps) the Qwen3-8B shape's decode step took 7.13 ms
 * and a verification of 16 rows 8.69 ms on an H100; with 4 loads 6.71 and
 * 7.35; with 2, 6.70 and 7.30 (bench-cuda-target). The order of the sums
 * is the same whatever U is. The bound's minimum of one block an SM is
 * the build those figures are of: without it ptxas allots 40–72 registers
 * and schedules the loads otherwise (not measured). */
template <typename W, int MT, int NT, int KS>
__global__ static void __launch_bounds__ (KS * 32, 1)
few_rows_matmul_kernel (Group gr, int n_out, int in, const float *x, int ldx, int rows,
                        bool accumulate)
{
  constexpr int U = 2 / NT;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int out0 = blockIdx.x * NT * 8;
  const int steps = in / 32, per_warp = (steps + KS - 1) / KS;
  const int s0 = min (steps, warp * per_warp), s1 = min (steps, s0 + per_warp);
  const uint4 *wp[NT];
  bool w_ok[NT];
  const float *xp[MT][2];
  bool x_ok[MT][2];
  float acc[MT][NT][4];

#pragma unroll
  for (int n = 0; n < NT; n++) {
    int o = out0 + n * 8 + g;
    GroupPart gp = group_find (gr, o < n_out ? o : 0);
    w_ok[n] = o < n_out;
    wp[n] = (const uint4 *) ((const W *) gp.w + (size_t) gp.local * in + 8 * t);
  }
  /* the weights are the step's constants; x and y may be the launch
   * before's */
  overlap_allow_next ();
  overlap_wait_previous ();
#pragma unroll
  for (int m = 0; m < MT; m++)
#pragma unroll
    for (int h = 0; h < 2; h++) {
      int r = m * 16 + h * 8 + g;
      x_ok[m][h] = r < rows;
      xp[m][h] = x + (size_t) (x_ok[m][h] ? r : 0) * ldx + 8 * t;
    }
#pragma unroll
  for (int m = 0; m < MT; m++)
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
      for (int i = 0; i < 4; i++)
        acc[m][n][i] = 0.0f;

  for (int s = s0; s < s1; s += U) {
    uint4 wv[U][NT];
    const uint4 zero = make_uint4 (0, 0, 0, 0);

#pragma unroll
    for (int u = 0; u < U; u++)
#pragma unroll
      for (int n = 0; n < NT; n++)
        wv[u][n] = w_ok[n] && s + u < s1 ? __ldcs (wp[n] + (size_t) (s + u) * 4) : zero;
#pragma unroll
    for (int u = 0; u < U; u++) {
      if (s + u >= s1)
        break;
#pragma unroll
      for (int m = 0; m < MT; m++) {
        float4 lo[2], hi[2];
        uint32_t a0[4], a1[4];
#pragma unroll
        for (int h = 0; h < 2; h++) {
          const float4 *p = (const float4 *) (xp[m][h] + (size_t) (s + u) * 32);
          lo[h] = x_ok[m][h] ? __ldg (p) : make_float4 (0.0f, 0.0f, 0.0f, 0.0f);
          hi[h] = x_ok[m][h] ? __ldg (p + 1) : make_float4 (0.0f, 0.0f, 0.0f, 0.0f);
        }
        /* fragment a: {row g, k 2t..}, {row g+8, k 2t..}, {row g, k 2t+8..},
         * {row g+8, k 2t+8..} */
        a0[0] = pack2<W> (lo[0].x, lo[0].y);
        a0[1] = pack2<W> (lo[1].x, lo[1].y);
        a0[2] = pack2<W> (lo[0].z, lo[0].w);
        a0[3] = pack2<W> (lo[1].z, lo[1].w);
        a1[0] = pack2<W> (hi[0].x, hi[0].y);
        a1[1] = pack2<W> (hi[1].x, hi[1].y);
        a1[2] = pack2<W> (hi[0].z, hi[0].w);
        a1[3] = pack2<W> (hi[1].z, hi[1].w);
#pragma unroll
        for (int n = 0; n < NT; n++) {
          mma<W> (acc[m][n], a0, wv[u][n].x, wv[u][n].y);
          mma<W> (acc[m][n], a1, wv[u][n].z, wv[u][n].w);
        }
      }
    }
  }

  /* fragment c: {row g, outputs 2t, 2t+1}, {row g+8, the same outputs} */
  __shared__ float part[KS][MT * 16][NT * 8];
#pragma unroll
  for (int m = 0; m < MT; m++)
#pragma unroll
    for (int n = 0; n < NT; n++) {
      part[warp][m * 16 + g][n * 8 + 2 * t] = acc[m][n][0];
      part[warp][m * 16 + g][n * 8 + 2 * t + 1] = acc[m][n][1];
      part[warp][m * 16 + g + 8][n * 8 + 2 * t] = acc[m][n][2];
      part[warp][m * 16 + g + 8][n * 8 + 2 * t + 1] = acc[m][n][3];
    }
  __syncthreads ();
  for (int j = threadIdx.x; j < MT * 16 * NT * 8; j += KS * 32) {
    int r = j / (NT * 8), c = j % (NT * 8), o = out0 + c;
    if (r >= rows || o >= n_out)
      continue;
    GroupPart gp = group_find (gr, o);
    float sum = part[0][r][c];
#pragma unroll
    for (int k = 1; k < KS; k++)
      sum += part[k][r][c];
    float *dst = gp.y + (size_t) r * gp.ldy + gp.local;
    *dst = accumulate ? *dst + sum : sum;
  }
}

/* A launch keeps about a thousand warps reading: wide launches give each
 * warp 16 outputs and split the input eight ways, narrow ones give it 8. */
template <typename W, int MT>
static void
launch_few_rows_mt (DflCudaDevice *dev, const Group &g, int in, const float *d_x, int ldx,
                    int rows, bool accumulate)
{
  int n_out = g.end[g.n - 1];

  if (n_out >= 2048)
    dfl_cuda_launch_overlapped (dev, few_rows_matmul_kernel<W, MT, 2, 8>, (n_out + 15) / 16, 256,
                                g, n_out, in, d_x, ldx, rows, accumulate);
  else
    dfl_cuda_launch_overlapped (dev, few_rows_matmul_kernel<W, MT, 1, 8>, (n_out + 7) / 8, 256,
                                g, n_out, in, d_x, ldx, rows, accumulate);
}

template <typename W>
static void
launch_few_rows (DflCudaDevice *dev, const Group &g, int in, const float *d_x, int ldx,
                 int rows, bool accumulate)
{
  if (rows <= 16)
    launch_few_rows_mt<W, 1> (dev, g, in, d_x, ldx, rows, accumulate);
  else
    launch_few_rows_mt<W, 2> (dev, g, in, d_x, ldx, rows, accumulate);
}

/* --- the dispatch --- */

static bool
sixteen_bit (DflDtype type)
{
  return type == DFL_DTYPE_BF16 || type == DFL_DTYPE_F16;
}

/* 16-bit weights and 1 to 32 rows go to the few-rows kernel whatever the
 * count: which columns each warp sums, and in what order, depend on the
 * product's shape alone (few_rows_matmul_kernel), so a row multiplied
 * alone is bitwise the row multiplied among others — a token decoded
 * alone is the token verified among a block's, which speculative decoding
 * giving plain decoding's output rests on. (cuBLAS beside the one-row
 * kernel was faster at the 8B shape's wide products — gate, up, the head —
 * and gave other bits at 1 row than at 2 to 32, so a drafted run's text
 * could part from plain decoding's on a near tie.) The one-row kernel
 * stays for inputs that are not whole 32-column steps, cuBLAS for more
 * rows and F32 weights. */
extern "C" DflCudaMatmulPath
dfl_cuda_matmul_choice (const DflCudaWeights *w, int rows)
{
  if (sixteen_bit (w->type) && rows >= 1 && rows <= FEW_ROWS_MAX && w->cols % 32 == 0)
    return DFL_CUDA_MATMUL_FEW_ROWS;
  if (sixteen_bit (w->type) && rows == 1)
    return DFL_CUDA_MATMUL_ONE_ROW;
  return DFL_CUDA_MATMUL_CUBLAS;
}

/* The few-rows kernel reads x and W in 16-byte loads, 32 columns a step. */
static bool
few_rows_take (const DflCudaWeights *w, const float *d_x, int rows, int ldx)
{
  return sixteen_bit (w->type) && rows >= 1 && rows <= FEW_ROWS_MAX && w->cols % 32 == 0
         && ldx % 4 == 0 && (uintptr_t) d_x % 16 == 0 && (uintptr_t) w->d_data % 16 == 0;
}

static void
cublas_matmul (DflCudaDevice *dev, const DflCudaWeights *w, const float *d_x, int rows, int ldx,
               float *d_y, int ldy, int n_out, gboolean accumulate, void *d_scratch)
{
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  cublasStatus_t status;

  /* Row-major y = x · Wᵀ is, read column-major, yᵀ [n_out × rows] =
   * W' [n_out × in] · xᵀ [in × rows], where W' is the column-major [in ×
   * rows_w] view of W transposed (op T, lda = in) and xᵀ is x's column-major
   * view (op N, ldb = ldx). */
  if (w->type == DFL_DTYPE_F32) {
    status = dev->blas->sgemm (dev->cublas, CUBLAS_OP_T, CUBLAS_OP_N, n_out, rows, w->cols,
                               &alpha, (const float *) w->d_data, w->cols, d_x, ldx, &beta, d_y,
                               ldy);
  } else {
    cudaDataType dt = w->type == DFL_DTYPE_F16 ? CUDA_R_16F : CUDA_R_16BF;
    size_t n = (size_t) rows * w->cols;
    unsigned blocks = (unsigned) MIN ((n + 255) / 256, (size_t) 65535 * 8);
    if (w->type == DFL_DTYPE_F16)
      round_rows_kernel<__half><<<blocks, 256, 0, dev->stream>>> (d_x, rows, w->cols, ldx,
                                                                  (__half *) d_scratch);
    else
      round_rows_kernel<__nv_bfloat16><<<blocks, 256, 0, dev->stream>>> (
        d_x, rows, w->cols, ldx, (__nv_bfloat16 *) d_scratch);
    dfl_cuda_launched (dev, "dfl_cuda_matmul (rounding x)");
    status = dev->blas->gemm_ex (dev->cublas, CUBLAS_OP_T, CUBLAS_OP_N, n_out, rows, w->cols,
                                 &alpha, w->d_data, dt, w->cols, d_scratch, dt, w->cols, &beta,
                                 d_y, CUDA_R_32F, ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  }
  if (status != CUBLAS_STATUS_SUCCESS)
    dfl_cuda_note_cublas (dev, "dfl_cuda_matmul", status);
}

extern "C" gboolean
dfl_cuda_matmul_path (DflCudaDevice *dev, DflCudaMatmulPath path, const DflCudaWeights *w,
                      const float *d_x, int rows, int ldx, float *d_y, int ldy, int n_out,
                      gboolean accumulate, void *d_scratch)
{
  bool sixteen = sixteen_bit (w->type);
  bool bf16 = w->type == DFL_DTYPE_BF16;

  if (rows <= 0 || n_out <= 0)
    return TRUE;
  if (n_out > w->rows || ldx < w->cols || ldy < n_out) {
    dfl_cuda_note_invalid (dev, "dfl_cuda_matmul",
                           "n_out %d of a %d×%d matrix with ldx %d, ldy %d", n_out, w->rows,
                           w->cols, ldx, ldy);
    return TRUE;
  }
  if (path == DFL_CUDA_MATMUL_AUTO) {
    path = dfl_cuda_matmul_choice (w, rows);
    /* a shape the few-rows kernel takes, in memory it cannot read in
     * 16-byte loads */
    if (path == DFL_CUDA_MATMUL_FEW_ROWS && !few_rows_take (w, d_x, rows, ldx))
      path = sixteen && rows == 1 ? DFL_CUDA_MATMUL_ONE_ROW : DFL_CUDA_MATMUL_CUBLAS;
  }

  switch (path) {
  case DFL_CUDA_MATMUL_ONE_ROW:
    if (!sixteen || rows != 1)
      return FALSE;
    {
      Group g = { { w->d_data }, { d_y }, { ldy }, { n_out }, 1 };
      if (bf16)
        launch_one_row<__nv_bfloat16> (dev, g, w->cols, d_x, accumulate);
      else
        launch_one_row<__half> (dev, g, w->cols, d_x, accumulate);
    }
    dfl_cuda_launched (dev, "dfl_cuda_matmul (one row)");
    return TRUE;
  case DFL_CUDA_MATMUL_FEW_ROWS:
    if (!few_rows_take (w, d_x, rows, ldx))
      return FALSE;
    {
      Group g = { { w->d_data }, { d_y }, { ldy }, { n_out }, 1 };
      if (bf16)
        launch_few_rows<__nv_bfloat16> (dev, g, w->cols, d_x, ldx, rows, accumulate);
      else
        launch_few_rows<__half> (dev, g, w->cols, d_x, ldx, rows, accumulate);
    }
    dfl_cuda_launched (dev, "dfl_cuda_matmul (few rows)");
    return TRUE;
  default:
    if (sixteen && !d_scratch) {
      dfl_cuda_note_invalid (dev, "dfl_cuda_matmul",
                             "16-bit weights need a scratch of rows × in 16-bit values");
      return TRUE;
    }
    cublas_matmul (dev, w, d_x, rows, ldx, d_y, ldy, n_out, accumulate, d_scratch);
    return TRUE;
  }
}

extern "C" void
dfl_cuda_matmul (DflCudaDevice *dev, const DflCudaWeights *w, const float *d_x, int rows,
                 int ldx, float *d_y, int ldy, int n_out, gboolean accumulate, void *d_scratch)
{
  dfl_cuda_matmul_path (dev, DFL_CUDA_MATMUL_AUTO, w, d_x, rows, ldx, d_y, ldy, n_out,
                        accumulate, d_scratch);
}

/* Outputs up to which a group is one launch of the tensor-core kernel
 * rather than a launch a product: q, k and v of an 8B model (6144) are;
 * gate and up (24576), each wide enough to keep the reads in flight
 * alone, are not. */
#define FEW_ROWS_GROUP_OUTPUTS 8192

extern "C" void
dfl_cuda_matmul_group (DflCudaDevice *dev, int n, const DflCudaWeights *w, const float *d_x,
                       int rows, int ldx, float *const *d_y, const int *ldy, const int *n_out,
                       gboolean accumulate, void *d_scratch)
{
  /* one launch where the products share a 16-bit type and their width */
  bool joint = n > 1 && sixteen_bit (w[0].type), few = true;
  Group g = { { NULL }, { NULL }, { 0 }, { 0 }, n };
  int total = 0;

  if (n <= 0 || n > DFL_CUDA_GROUP_MAX) {
    dfl_cuda_note_invalid (dev, "dfl_cuda_matmul_group", "%d products (1 to %d)", n,
                           DFL_CUDA_GROUP_MAX);
    return;
  }
  for (int i = 0; i < n; i++) {
    if (n_out[i] <= 0 || n_out[i] > w[i].rows || ldx < w[i].cols || ldy[i] < n_out[i]) {
      dfl_cuda_note_invalid (dev, "dfl_cuda_matmul_group",
                             "product %d: n_out %d of a %d×%d matrix with ldx %d, ldy %d", i,
                             n_out[i], w[i].rows, w[i].cols, ldx, ldy[i]);
      return;
    }
    joint = joint && w[i].type == w[0].type && w[i].cols == w[0].cols;
    few = few && few_rows_take (&w[i], d_x, rows, ldx);
    total += n_out[i];
    g.w[i] = w[i].d_data;
    g.y[i] = d_y[i];
    g.ldy[i] = ldy[i];
    g.end[i] = total;
  }
  if (rows <= 0)
    return;
  /* the same launches for every count of rows (a row's bits do not depend
   * on the rows with it: dfl_cuda_matmul_choice): one over all the
   * products where they are few enough outputs, else one a product */
  if (joint && few && total <= FEW_ROWS_GROUP_OUTPUTS) {
    if (w[0].type == DFL_DTYPE_BF16)
      launch_few_rows<__nv_bfloat16> (dev, g, w[0].cols, d_x, ldx, rows, accumulate);
    else
      launch_few_rows<__half> (dev, g, w[0].cols, d_x, ldx, rows, accumulate);
    dfl_cuda_launched (dev, "dfl_cuda_matmul_group (few rows)");
    return;
  }
  if (joint && !few && rows == 1) {
    if (w[0].type == DFL_DTYPE_BF16)
      launch_one_row<__nv_bfloat16> (dev, g, w[0].cols, d_x, accumulate);
    else
      launch_one_row<__half> (dev, g, w[0].cols, d_x, accumulate);
    dfl_cuda_launched (dev, "dfl_cuda_matmul_group (one row)");
    return;
  }
  for (int i = 0; i < n; i++)
    dfl_cuda_matmul (dev, &w[i], d_x, rows, ldx, d_y[i], ldy[i], n_out[i], accumulate,
                     d_scratch);
}
