/* gst-dflash — CUDA compute kernels and the device they run on.
 *
 * Compute only: no model files, no model logic (core/cuda/ holds that).
 * Every launcher enqueues on the device's one stream and returns at once;
 * nothing here synchronises except dfl_cuda_sync and the copies that say
 * so. Pointers named d_* are device memory. Matrices are row-major; a
 * weight matrix W is [out][in] as checkpoints store it, so a projection of
 * `rows` rows is y = x · Wᵀ, accumulated in F32.
 *
 * Errors: a launcher cannot fail synchronously; a failed launch or a fault
 * shows at the next dfl_cuda_sync / dfl_cuda_check, which turns the CUDA or
 * cuBLAS status into a GError (DFL_ERROR_IO) naming the call.
 */
#pragma once

#include <glib.h>
#include <stddef.h>
#include <stdint.h>

#include "dfl-dtype.h"
#include "dfl-error.h"

G_BEGIN_DECLS

/* --- the device --- */

typedef struct _DflCudaDevice DflCudaDevice;

/* Open device `ordinal` (0 = the first): a CUDA context, one stream, a
 * cuBLAS handle. Where no driver or no device is present, NULL with a
 * DFL_ERROR_UNSUPPORTED error that says so and quotes CUDA's reason
 * ("CUDA is unavailable: no CUDA-capable device is detected"). */
DflCudaDevice *dfl_cuda_device_open (int ordinal, GError **error);
DflCudaDevice *dfl_cuda_device_ref (DflCudaDevice *dev);
void dfl_cuda_device_unref (DflCudaDevice *dev);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (DflCudaDevice, dfl_cuda_device_unref)

/* "NVIDIA H200 (sm_90, 139 GiB)" */
const char *dfl_cuda_device_describe (DflCudaDevice *dev);
int dfl_cuda_device_ordinal (DflCudaDevice *dev);
/* Whether a kernel may start while the kernel before it on the stream
 * finishes (dfl-cuda-overlap.cuh; TRUE when the device opens). Graphs keep
 * what was set when they were captured. The results are the same bits
 * either way: for comparisons of speed and of those bits. Set it while no
 * other thread launches on the device. */
void dfl_cuda_device_set_overlap (DflCudaDevice *dev, gboolean overlap);
/* cudaStream_t and cublasHandle_t, as void * so C callers need no CUDA headers. */
void *dfl_cuda_device_stream (DflCudaDevice *dev);
void *dfl_cuda_device_cublas (DflCudaDevice *dev);

/* Taking turns on the one stream. Threads that share a device (a
 * pipeline's verifier and its dflashblock, two pipelines of one process)
 * enqueue on the same stream, and a stream records whatever any thread
 * enqueues while it is being captured into a graph. So a caller that
 * enqueues a sequence of work and then reads its results or its errors (a
 * forward, a block, a capture from begin to end) holds the device for the
 * whole sequence: another thread's launches cannot land inside its graph
 * nor take its pending error. Recursive; the copies, syncs and captures
 * below take it themselves. */
void dfl_cuda_device_lock (DflCudaDevice *dev);
void dfl_cuda_device_unlock (DflCudaDevice *dev);

/* Device memory. alloc: NULL with a DFL_ERROR_LIMIT error naming the size
 * when the card has no room. Freeing NULL does nothing. */
void *dfl_cuda_alloc (DflCudaDevice *dev, size_t bytes, GError **error);
void dfl_cuda_free (DflCudaDevice *dev, void *d_ptr);
/* Copies on the device's stream. upload/download wait for the copy to end
 * (the host buffer may be reused at once); copy_d2d does not. */
gboolean dfl_cuda_upload (DflCudaDevice *dev, void *d_dst, const void *src, size_t bytes,
                          GError **error);
gboolean dfl_cuda_download (DflCudaDevice *dev, void *dst, const void *d_src, size_t bytes,
                            GError **error);
void dfl_cuda_copy_d2d (DflCudaDevice *dev, void *d_dst, const void *d_src, size_t bytes);
void dfl_cuda_memset (DflCudaDevice *dev, void *d_dst, int value, size_t bytes);
/* `rows` rows of `row_bytes` from d_src (stride src_pitch bytes) to d_dst
 * (stride dst_pitch bytes), device to device, not waiting (a tap into its
 * slot of the joined taps rows, say). */
void dfl_cuda_copy_2d (DflCudaDevice *dev, void *d_dst, size_t dst_pitch, const void *d_src,
                       size_t src_pitch, size_t row_bytes, size_t rows);
/* Wait for the stream; FALSE with the first error any launch made. */
gboolean dfl_cuda_sync (DflCudaDevice *dev, GError **error);
/* The last launch error, without waiting. */
gboolean dfl_cuda_check (DflCudaDevice *dev, const char *what, GError **error);
/* Bytes/s of a device-to-device copy of `bytes`, measured now (benches'
 * floors). */
double dfl_cuda_copy_bandwidth (DflCudaDevice *dev, size_t bytes, GError **error);
/* Bytes/s the card READS, measured now: a pure-read pass over `bytes`
 * (at least 1 GiB, so no cache holds it). A step streams its weights and
 * writes little, so this, not the copy rate, is its floor's rate. */
double dfl_cuda_read_bandwidth (DflCudaDevice *dev, size_t bytes, GError **error);

/* CUDA graphs of the stream's work (the block, the verify step): capture
 * begins; end returns an executable graph (NULL with an error); launch
 * enqueues it. The calling thread holds the device from a successful
 * begin to its end (dfl_cuda_device_lock). */
typedef struct _DflCudaGraph DflCudaGraph;
gboolean dfl_cuda_capture_begin (DflCudaDevice *dev, GError **error);
DflCudaGraph *dfl_cuda_capture_end (DflCudaDevice *dev, GError **error);
void dfl_cuda_graph_launch (DflCudaDevice *dev, DflCudaGraph *graph);
void dfl_cuda_graph_free (DflCudaGraph *graph);

/* --- element types --- */


/* A weight matrix on the device: [rows][cols] row-major in `type`. */
typedef struct {
  const void *d_data;
  DflDtype type;
  int rows;   /* outputs */
  int cols;   /* inputs */
} DflCudaWeights;

/* --- kernels --- */

/* d_y[r][o] (+)= x[r] · W[o] for r < rows, o < n_out (n_out ≤ W.rows: a
 * head's shortlist is its first rows). ldx, ldy: row strides in floats.
 * F32 weights: F32 products (no TF32). F16/BF16 weights: x is rounded to the
 * weights' type and multiplied with F32 accumulation: 1 to 32 rows by a
 * tensor-core kernel of ours, a row's outputs the same bits whatever rows
 * come with it (inputs a multiple of 32; otherwise one row by a kernel that
 * streams the weights); more rows by cuBLAS, `d_scratch` holding the
 * rounded x there (rows · in elements of 2 bytes; may be NULL for F32). */
void dfl_cuda_matmul (DflCudaDevice *dev, const DflCudaWeights *w, const float *d_x, int rows,
                      int ldx, float *d_y, int ldy, int n_out, gboolean accumulate,
                      void *d_scratch);

/* The most products dfl_cuda_matmul_group takes. */
#define DFL_CUDA_GROUP_MAX 4

/* Products of one x: d_y[i] (+)= x · w[i]ᵀ for i < n, each as
 * dfl_cuda_matmul takes it (n_out[i], ldy[i]). Where the weights share a
 * 16-bit type and their width, 1 to 32 rows over at most 8192 outputs in
 * all (q, k, v) are one launch of dfl_cuda_matmul's tensor-core kernel (a
 * row's outputs the same bits whatever rows come with it, and the same as
 * dfl_cuda_matmul's: each output's sum is split by the input's length
 * alone); otherwise a dfl_cuda_matmul a product (d_scratch as there), or,
 * for one row of inputs that kernel does not take, one launch of the
 * streaming kernel (the same bits as dfl_cuda_matmul's). */
void dfl_cuda_matmul_group (DflCudaDevice *dev, int n, const DflCudaWeights *w,
                            const float *d_x, int rows, int ldx, float *const *d_y,
                            const int *ldy, const int *n_out, gboolean accumulate,
                            void *d_scratch);

/* The kernels a product can take, for the benchmark that sets them side by
 * side; dfl_cuda_matmul takes AUTO. */
typedef enum {
  DFL_CUDA_MATMUL_AUTO,
  DFL_CUDA_MATMUL_ONE_ROW,    /* one row of 16-bit weights */
  DFL_CUDA_MATMUL_FEW_ROWS,   /* 1 to 32 rows of 16-bit weights on the tensor cores */
  DFL_CUDA_MATMUL_CUBLAS,
} DflCudaMatmulPath;

/* The path dfl_cuda_matmul takes for `rows` rows of w. */
DflCudaMatmulPath dfl_cuda_matmul_choice (const DflCudaWeights *w, int rows);

/* dfl_cuda_matmul by `path`; FALSE (nothing launched) where that path does
 * not take these arguments. */
gboolean dfl_cuda_matmul_path (DflCudaDevice *dev, DflCudaMatmulPath path,
                               const DflCudaWeights *w, const float *d_x, int rows, int ldx,
                               float *d_y, int ldy, int n_out, gboolean accumulate,
                               void *d_scratch);

/* Rows of a table (F32/F16/BF16 [n][dim]) gathered by id into F32:
 * d_out[i] = table[d_ids[i]] for i < n. Ids are checked by the caller. */
void dfl_cuda_embed (DflCudaDevice *dev, const void *d_table, DflDtype type, int dim,
                     const int32_t *d_ids, int n, float *d_out);

/* Each row of `dim`: x / sqrt(mean(x²) + eps) ⊙ w (w: F32 [dim]), from
 * d_src into d_dst (may be the same). */
void dfl_cuda_rmsnorm (DflCudaDevice *dev, float *d_dst, const float *d_src, int rows, int dim,
                       const float *d_w, float eps);

/* Half-split (NeoX / Qwen) rope, in place: `rows` rows of `heads` heads of
 * head_dim, row r at position *d_pos0 + r; d_inv_freq [head_dim/2]. The
 * position is read on the device so a captured graph can be replayed at
 * another position. */
void dfl_cuda_rope (DflCudaDevice *dev, float *d_x, int rows, int heads, int head_dim,
                    const float *d_inv_freq, const int64_t *d_pos0);

/* The same with a position per row: row r at d_pos[r] (the rows of several
 * sequences); a row's bits are dfl_cuda_rope's at that position. */
void dfl_cuda_rope_at (DflCudaDevice *dev, float *d_x, int rows, int heads, int head_dim,
                       const float *d_inv_freq, const int64_t *d_pos);

/* Each head's norm (dfl_cuda_rmsnorm's, w [head_dim]) then its rope
 * (dfl_cuda_rope's, or dfl_cuda_rope_at's with per_row), in place, in one
 * launch: the bits of those two. head_dim even and below 1024. */
void dfl_cuda_norm_rope (DflCudaDevice *dev, float *d_x, int rows, int heads, int head_dim,
                         const float *d_w, float eps, const float *d_inv_freq,
                         const int64_t *d_pos, int per_row);

/* A table of device pointers passed with a launch (by value, so a captured
 * graph holds them): the per-sequence buffers of one layer, say. */
#define DFL_CUDA_TABLE_MAX 64
typedef struct {
  void *d[DFL_CUDA_TABLE_MAX];
} DflCudaTable;

/* gate[i] = silu(gate[i]) · up[i]. */
void dfl_cuda_silu_mul (DflCudaDevice *dev, float *d_gate, const float *d_up, size_t n);
/* x[i] += y[i]. */
void dfl_cuda_add (DflCudaDevice *dev, float *d_x, const float *d_y, size_t n);

/* `rows` packed rows of `width` elements from d_src into d_dst's rows
 * *d_row0 … *d_row0 + rows − 1 (the first row is read on the device, so a
 * captured graph can write a KV cache at the position of each replay).
 * Each side F32 or BF16 (its *_bf16 flag): F32 into BF16 rounds to
 * nearest even; BF16 into F32 is refused (noted as invalid). */
void dfl_cuda_copy_rows_at (DflCudaDevice *dev, void *d_dst, int dst_bf16, int width,
                            const int64_t *d_row0, const void *d_src, int src_bf16, int rows);

/* `rows` packed rows of `width` floats from d_src, row r into row
 * d_row[r] of table->d[d_which[r]] (packed rows of `width`, F32, or BF16
 * where `bf16`: rounded to nearest even); the indices are read on the
 * device (checked by the caller). */
void dfl_cuda_copy_rows_table (DflCudaDevice *dev, const DflCudaTable *table, int bf16,
                               int width, const int32_t *d_which, const int64_t *d_row,
                               const float *d_src, int rows);

/* Grouped-query attention of `rows` query rows over the keys of a cache or a scratch:
 *   q   [rows][heads][head_dim]
 *   k,v key rows of stride `kv_stride` elements, F32 or (kv_bf16) BF16;
 *       head g of key j at k + j·kv_stride + g·head_dim (a cache
 *       [pos][kv_heads][hd] has kv_stride = kv_heads·hd). BF16 keys and
 *       values are widened to F32 exactly as they are read: the output is
 *       bitwise that of an F32 cache holding the same values.
 *   out [rows][heads][head_dim]
 * Query row r sees keys [d_lo[r], d_hi[r]) (device int32 arrays, one pair
 * per row, read on the device so a captured graph can be replayed over
 * other ranges; an empty range gives zeros); `max_keys` bounds every d_hi
 * (the launch covers keys [0, max_keys)). Softmax in F32 with the maximum
 * subtracted, scale usually 1/sqrt(head_dim). head_dim and kv_stride
 * multiples of 4 (of 8 for BF16), head_dim at most 256, q, k and v
 * 16-byte aligned (rows are read 16 bytes at a time). Causal decoding over a cache is lo = 0, hi = past + r + 1; the
 * drafter's block is its window of the context then every block row.
 *
 * Batch-invariant: the keys are split into chunks and tiles at fixed
 * positions, so a row's output does not depend on the other rows of the
 * call nor on max_keys (decoding a row alone and verifying it among 16
 * give the same bits).
 *
 * The per-chunk partials live in a device scratch that grows as needed,
 * except inside a graph capture: there the launch fails (at the next
 * dfl_cuda_sync) unless dfl_cuda_attention_reserve made room beforehand. */
void dfl_cuda_attention (DflCudaDevice *dev, const float *d_q, int rows, int heads, int kv_heads,
                         int head_dim, const void *d_k, const void *d_v, int kv_bf16,
                         int kv_stride, const int32_t *d_lo, const int32_t *d_hi, int max_keys,
                         float scale, float *d_out);
/* dfl_cuda_attention with each row's own key set: row r reads
 * k->d[d_which[r]] and v->d[d_which[r]] (every entry of stride kv_stride
 * and 16-byte aligned; `max_keys` bounds every d_hi). A block holds rows
 * of one entry that lie together (a verify step's rows share its reads of
 * the keys as in dfl_cuda_attention; heads / kv_heads ≤ 64), and a row's
 * output is bitwise dfl_cuda_attention's over its entry alone. */
void dfl_cuda_attention_table (DflCudaDevice *dev, const float *d_q, int rows, int heads,
                               int kv_heads, int head_dim, const DflCudaTable *k,
                               const DflCudaTable *v, int kv_bf16, int kv_stride,
                               const int32_t *d_which, const int32_t *d_lo, const int32_t *d_hi,
                               int max_keys, float scale, float *d_out);
/* Room for attention of `rows` rows × `heads` heads over `max_keys` keys
 * (waits for the stream when it must grow); FALSE with a DFL_ERROR_LIMIT
 * error naming the size where the card has no room. */
gboolean dfl_cuda_attention_reserve (DflCudaDevice *dev, int rows, int heads, int head_dim,
                                     int max_keys, GError **error);
/* Counts the scratch's moves: a graph captured at another count reads
 * freed memory and must be captured again. */
guint64 dfl_cuda_attention_scratch_generation (DflCudaDevice *dev);

/* The drafter's grouped causal row convolution (DESIGN.md):
 *   y[r][i] = Σ_{o < min(kernel, r+1)} (base[o][i] + dyn[r][o][i / group]) · x[r−o][i]
 * x, y [rows][dim] (y must not be x); base [kernel][dim]; dyn rows of
 * stride `dyn_stride` floats holding [kernel][dim / group]. */
void dfl_cuda_row_conv (DflCudaDevice *dev, const float *d_x, int rows, int dim, int group,
                        int kernel, const float *d_base, const float *d_dyn, int dyn_stride,
                        float *d_y);

/* Index of each row's largest value (the first of equals): d_out[r]. */
void dfl_cuda_argmax (DflCudaDevice *dev, const float *d_x, int rows, int n, int ld,
                      int32_t *d_out);

/* Each row's `k` largest values, largest first, the first of equals kept
 * (k ≤ 64): d_values[r][k], d_indices[r][k]. NaNs are skipped and −0 equals
 * +0, as in the CPU's dfl_top_k; where a row has fewer than k other values,
 * the slots past them hold value NaN and index −1. */
void dfl_cuda_top_k (DflCudaDevice *dev, const float *d_x, int rows, int n, int ld, int k,
                     float *d_values, int32_t *d_indices);

/* The selector's re-scoring (DESIGN.md), a chain over `rows` rows run by one
 * block of threads: row r's candidates (d_cand [rows][k], their logits
 * d_cand_logit [rows][k]) are scored logit + Σ_j pred[prev][j] · hp[r][j] ·
 * succ[cand][j] (codebooks F16 [vocab][rank], hp [rows][rank] F32), prev
 * starting at `anchor` and then each row's choice; the first of equals wins.
 * d_chosen [rows]. A candidate −1 ends its row's list (top_k's padding); a
 * row with none chooses token 0, as the CPU does. k ≤ 64, rank ≤ 8192. */
void dfl_cuda_select_rescore (DflCudaDevice *dev, const int32_t *d_cand,
                              const float *d_cand_logit, int rows, int k, const float *d_hp,
                              int rank, const uint16_t *d_pred_book,
                              const uint16_t *d_succ_book, int32_t anchor, int32_t *d_chosen);

/* F32 ↔ F16/BF16 on the device (round to nearest even). */
void dfl_cuda_convert (DflCudaDevice *dev, const void *d_src, DflDtype src_type,
                       void *d_dst, DflDtype dst_type, size_t n);
/* Fill with uniform values in [−scale, scale) from a counter-based hash of
 * (seed, index): benches make random weights on the card, no files. */
void dfl_cuda_fill_random (DflCudaDevice *dev, void *d_dst, DflDtype type, size_t n,
                           uint64_t seed, float scale);

G_END_DECLS
