/* gst-dflash — CPU compute kernels.
 *
 * Compute only: no model files, no model logic. Matrices are row-major F32;
 * a weight matrix W is [out][in] as checkpoints store it, so a projection of
 * `rows` rows is y = x · Wᵀ. Projections by stored weights go through
 * dfl_matmul_w (batch-invariant); it and the attention share their work out
 * between the kernels' threads (dfl-parallel.h).
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "dfl-dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A weight matrix as a checkpoint stores it: [rows][cols] row-major, F32,
 * F16 or BF16, little-endian, or rows of quantized blocks (Q8_0, Q4_0,
 * Q4_K, Q6_K: quant-layout.h; cols a whole number of blocks); `data` may
 * point into a mapped file, at any alignment. */
typedef struct {
  const void *data;
  DflDtype type;
  int rows;   /* outputs */
  int cols;   /* inputs */
  /* NULL, or the same quantized matrix as dfl_quant_pack lays it out,
   * which dfl_matmul_q reads instead of `data` where it runs AVX-512 VNNI
   * (the same numbers, bitwise) */
  const void *packed;
} DflWeights;

/* y[r][o] (+)= x[r] · W[o] for r < rows, o < n_out (n_out ≤ W's rows: the
 * first rows of W only, e.g. a head's shortlist). Batch-invariant: y[r][o]
 * is bitwise the same whatever `rows` is and whatever else is computed with
 * it (see matmul.c). ldx and ldy are the strides of x's and y's rows.
 * Quantized weights go to dfl_matmul_q, whose conditions the caller
 * (dfl_op_matmul) has checked. */
void dfl_matmul_w (const DflWeights *w, const float *x, int rows, int ldx,
                   float *y, int ldy, int n_out, int accumulate);
/* The most products dfl_matmul_w_group takes. */
#define DFL_MATMUL_GROUP_MAX 4
/* y[i] (+)= x · W[i] for i < n: products of one x (q, k and v), each as
 * dfl_matmul_w computes it, bitwise. Where each product would share its
 * outputs out over the threads by blocks (a few rows of float weights),
 * the blocks of all of them are shared out at once: one wait for the
 * threads instead of one a product. */
void dfl_matmul_w_group (int n, const DflWeights *w, const float *x, int rows, int ldx,
                         float *const *y, const int *ldy, const int *n_out, int accumulate);
size_t dfl_weights_bytes (const DflWeights *w);
/* Use the plain-C paths even where AVX2 is there (tests: both must agree
 * bitwise). */
void dfl_kernels_set_generic (int on);

/* The instruction sets dfl_matmul_w has paths for. Every path gives bitwise
 * the same numbers (see matmul.c); they differ in speed only. */
typedef enum {
  DFL_KERNELS_BEST,      /* the fastest this CPU runs (the default) */
  DFL_KERNELS_GENERIC,   /* plain C */
  DFL_KERNELS_AVX2,      /* AVX2 + FMA + F16C */
  DFL_KERNELS_AVX512,    /* AVX-512 F, BW, VL + the AVX2 set */
} DflKernelsIsa;
/* Use `isa`'s paths from now on, for the whole process (tests and
 * benchmarks compare them). Returns 0, and changes nothing, where this CPU
 * lacks `isa`; 1 otherwise. dfl_kernels_set_generic (on) is
 * dfl_kernels_set_isa (on ? DFL_KERNELS_GENERIC : DFL_KERNELS_BEST).
 * DFL_KERNELS_BEST is the fastest set unless the environment variable
 * DFL_KERNELS_ISA, read once, names another: generic, avx2 or avx512 (to
 * time whole programs on each; one the CPU lacks is reported on stderr and
 * the fastest used). */
int dfl_kernels_set_isa (DflKernelsIsa isa);
/* Whether this CPU (and OS) runs `isa`'s paths (BEST: always). */
int dfl_kernels_cpu_has (DflKernelsIsa isa);
/* The instruction set the paths in use now need (BEST resolved). */
DflKernelsIsa dfl_kernels_isa (void);
const char *dfl_kernels_isa_name (DflKernelsIsa isa);

/* The same for quantized weights (quant-matmul.c): x's rows quantized to
 * int8 by groups of 32 inputs, integer dot products, the same bits on every
 * path (plain C, AVX2, AVX-512 VNNI) and batch-invariant. Returns 0, doing
 * nothing, where W is not a quantized type, its cols not whole blocks,
 * n_out > its rows, or the activations' buffer cannot be had. */
int dfl_matmul_q (const DflWeights *w, const float *x, int rows, int ldx, float *y, int ldy,
                  int n_out, int accumulate);
/* y[i] (+)= x · W[i] for i < n ≤ DFL_MATMUL_GROUP_MAX, quantized matrices
 * of x's width (q, k and v; gate and up): each bitwise dfl_matmul_q's.
 * Where the matrices read x quantized the same way (the same layout), x is
 * quantized once and all their blocks of outputs are shared out over the
 * threads in one call; else a call each. Returns 0 as dfl_matmul_q does,
 * for any of them, before computing anything. */
int dfl_matmul_q_group (int n, const DflWeights *w, const float *x, int rows, int ldx,
                        float *const *y, const int *ldy, const int *n_out, int accumulate);
/* A copy of quantized weights laid out for the SIMD paths' products
 * (quant-packed.c: the blocks of 16 outputs side by side, so that a decode
 * step reads them at about the memory's rate), for w->packed; free() it.
 * About the stored bytes (Q4_K's 2.8% more). NULL where this CPU lacks
 * AVX2, W is not Q8_0, Q4_0 or Q4_K with whole blocks (Q6_K's stored
 * blocks decode faster: quant-packed.c), or memory fails: dfl_matmul_q
 * then reads the stored blocks, to the same bits; so it does on the
 * plain-C path. */
void *dfl_quant_pack (const DflWeights *w);
/* The same layout written into dst, dfl_quant_packed_bytes () bytes at a
 * 64-byte boundary of the caller's memory: 1, or 0 (nothing written)
 * where dfl_quant_pack would give NULL but for memory. */
int dfl_quant_pack_into (const DflWeights *w, void *dst);
size_t dfl_quant_packed_bytes (DflDtype type, int rows, int cols);
/* Whether this CPU (and OS) runs AVX-512 VNNI: the path DFL_KERNELS_AVX512
 * takes for quantized weights (without it, AVX2's). */
int dfl_quant_has_vnni (void);
/* The path dfl_matmul_q takes now: "generic", "AVX2" or "AVX-512 VNNI". */
const char *dfl_quant_path_name (void);

/* A row of n elements of a quantized type (quant-layout.h) to F32 and
 * back: the same values as ggml's dequantization, bitwise; quantization
 * rounds to nearest (Q8_0 and Q4_0 as ggml's reference quantizers do, the
 * K types with a search of each sub-block's scale: quant-blocks.c).
 * Return 0, doing nothing, where the type is not quantized or n is not a
 * whole number of blocks. */
int dfl_dequantize_row (DflDtype type, const void *src, float *dst, int64_t n);
int dfl_quantize_row (DflDtype type, const float *src, void *dst, int64_t n);
/* A matrix [rows][cols] of a float type (F32, F16, BF16) quantized row by
 * row (each row as dfl_quantize_row quantizes it, widened to F32 first) on
 * the kernels' threads: 1, or 0 (nothing written) where a type or the
 * shape does not fit, or a thread's row buffer could not be had. */
int dfl_quantize_rows (DflDtype type, DflDtype src_type, const void *src, void *dst,
                       int64_t rows, int64_t cols);

/* Each row of `dim`: x / sqrt(mean(x²) + eps) ⊙ w, in place. The mean of
 * squares is summed in double so long rows lose nothing. */
void dfl_rmsnorm (float *x, int rows, int dim, const float *w, float eps);
/* The same from `src` into `dst` (which may be `src`). */
void dfl_rmsnorm_to (float *dst, const float *src, int rows, int dim, const float *w, float eps);

/* inv_freq[i] = theta^(−2i/head_dim), i < head_dim/2. */
void dfl_rope_inv_freq (float *inv_freq, int head_dim, double theta);
/* Rotate, in place, `rows` rows of `heads` heads of `head_dim` by the
 * half-split (NeoX / Qwen) rope, row r at position `pos0 + r`. */
void dfl_rope (float *x, int rows, int heads, int head_dim, const float *inv_freq, int pos0);
/* The same, row r at position pos[r] (the rows of several sequences): a
 * row's bits are dfl_rope's at that position. */
void dfl_rope_at (float *x, int rows, int heads, int head_dim, const float *inv_freq,
                  const int64_t *pos);

/* gate[i] = silu(gate[i]) · up[i]. */
void dfl_silu_mul (float *gate, const float *up, size_t n);
/* softmax(x)[i] over x[0 … n), n ≥ 1, in F32: e^(x[i] − max) over the sum
 * of e^(x[j] − max), the same bits on every path (within 1e-5 of float64
 * for rows of a vocabulary's logits). NaN where x holds one. */
float dfl_softmax_at (const float *x, int n, int i);

/* x[i] += y[i]. */
void dfl_add (float *x, const float *y, size_t n);

/* Softmax of one row, in place; returns nothing, -inf entries become 0. */
void dfl_softmax (float *x, int n);

/* Causal grouped-query attention of `rows` query rows at positions
 * pos0 … pos0+rows−1 over a cache holding positions 0 … pos0+rows−1:
 *   q    [rows][heads][head_dim]
 *   k, v [positions][kv_heads][head_dim] (the cache, rows already written)
 *   out  [rows][heads][head_dim]
 * scale is usually 1/sqrt(head_dim). */
void dfl_attention_causal (const float *q, int rows, int heads, int kv_heads, int head_dim,
                           const float *k, const float *v, int pos0, float scale, float *out);

/* The same over any key range per query row: row r sees keys
 * lo[r] … hi[r] − 1 (none where hi[r] ≤ lo[r]: zeros), key j of kv head g
 * at k + j·kv_stride + g·head_dim. The arithmetic of each row is
 * dfl_attention_causal's, so lo = 0, hi = pos0 + r + 1 (kv_stride
 * kv_heads·head_dim) gives its bits. */
void dfl_attention_ranges (const float *q, int rows, int heads, int kv_heads, int head_dim,
                           const float *k, const float *v, int kv_stride, const int32_t *lo,
                           const int32_t *hi, float scale, float *out);

/* dfl_attention_ranges with each row's own keys: row r reads k[r], v[r]
 * (the key sets of several sequences, each of stride kv_stride); each
 * row's bits are dfl_attention_ranges' over its keys. */
void dfl_attention_rows (const float *q, int rows, int heads, int kv_heads, int head_dim,
                         const float *const *k, const float *const *v, int kv_stride,
                         const int32_t *lo, const int32_t *hi, float scale, float *out);

/* The three over BF16 keys and values (a cache in half the bytes): each
 * bitwise the F32 call over the same values widened to F32. */
void dfl_attention_causal_bf16 (const float *q, int rows, int heads, int kv_heads, int head_dim,
                                const uint16_t *k, const uint16_t *v, int pos0, float scale,
                                float *out);
void dfl_attention_ranges_bf16 (const float *q, int rows, int heads, int kv_heads, int head_dim,
                                const uint16_t *k, const uint16_t *v, int kv_stride,
                                const int32_t *lo, const int32_t *hi, float scale, float *out);
void dfl_attention_rows_bf16 (const float *q, int rows, int heads, int kv_heads, int head_dim,
                              const uint16_t *const *k, const uint16_t *const *v,
                              int kv_stride, const int32_t *lo, const int32_t *hi, float scale,
                              float *out);

/* The drafter's grouped causal row convolution:
 *   y[r][i] = Σ_{o < min(kernel, r+1)} (base[o][i] + dyn[r][o][i / group]) · x[r−o][i]
 * summed in F32 from 0 in the order of o. x, y [rows][dim] (y must not be
 * x); base [kernel][dim]; dyn rows of stride `dyn_stride` floats holding
 * [kernel][dim / group]. */
void dfl_row_conv (const float *x, int rows, int dim, int group, int kernel, const float *base,
                   const float *dyn, int dyn_stride, float *y);

/* Index of the largest value; the first of equals. */
int dfl_argmax (const float *x, int n);

/* The k largest of n values, largest first: values[k], indices[k]. The
 * first of equals is kept (−0 equals +0), NaNs are skipped. Returns how many
 * there were (< k where fewer than k values are not NaN; the slots past
 * them get value NaN and index −1). */
int dfl_top_k_row (const float *x, int n, int k, float *values, int32_t *indices);

/* The selector's re-scoring chain over `rows` rows: row r's candidates
 * cand[r][0 … k) (−1 ends the list) with their logits are scored
 *   s = Σ_j pc[j] · succ[c][j] (from 0, in order) + logit,
 *   pc[j] = pred[prev][j] · hp[r][j]
 * in F32 (codebooks F16 [vocab][rank], hp [rows][rank]); prev is `anchor`,
 * then each row's choice; strictly above wins, so the first of equals (and
 * the first candidate where every score is NaN) is kept; a row without a
 * candidate chooses 0. */
void dfl_select_rescore (const int32_t *cand, const float *cand_logit, int rows, int k,
                         const float *hp, int rank, const uint16_t *pred_book,
                         const uint16_t *succ_book, int32_t anchor, int32_t *chosen);

/* Element conversions. F32 to F16 and BF16 round to nearest even; a NaN
 * stays a NaN (quiet, its sign and top payload bits kept). */
void dfl_bf16_to_f32_n (const uint16_t *src, float *dst, size_t n);
void dfl_f16_to_f32_n (const uint16_t *src, float *dst, size_t n);
void dfl_f32_to_bf16_n (const float *src, uint16_t *dst, size_t n);
void dfl_f32_to_f16_n (const float *src, uint16_t *dst, size_t n);
/* out[i] = table[ids[i]] widened to F32, for a table (F32, F16, BF16, or
 * a quantized type, its rows dequantized) [ ][dim]; the ids are the
 * caller's to check. */
void dfl_embed_rows (const void *table, DflDtype type, int dim, const int32_t *ids, int n,
                     float *out);

/* Threads the kernels may use: omp_get_max_threads (), which the pool of
 * dfl-parallel.h follows (at most the CPUs there are). */
int dfl_kernels_threads (void);

#ifdef __cplusplus
}
#endif
