/* gst-dflash — the back-end interface: devices, their memory, tensors.
 *
 * Every back end (CPU, CUDA, Vulkan) is reached the same way: a DflDevice
 * opened through the registry (backend/registry.c, the one file that knows
 * which back ends this build has), memory allocated, filled and read back
 * through it, and tensors that say where their data lives. The layers
 * above never branch on the build: they ask the registry what exists
 * (dfl_backend_built) and the device what it can do.
 *
 * A device's memory handle is what its back end allocates: a host pointer
 * (CPU), a device pointer (CUDA), a DflVkBuffer * (Vulkan); a byte offset
 * travels beside it, so a view into an allocation needs no pointer
 * arithmetic on a handle that is not a pointer.
 */
#pragma once

#include <glib.h>

#include "dfl-dtype.h"
#include "dfl-error.h"

G_BEGIN_DECLS

typedef enum {
  DFL_BACKEND_CPU,
  DFL_BACKEND_CUDA,
  DFL_BACKEND_VULKAN,
} DflBackendId;
#define DFL_N_BACKENDS (DFL_BACKEND_VULKAN + 1)

/* "cpu", "cuda", "vulkan" */
const char *dfl_backend_name (DflBackendId id);
/* Whether this build has the back end (its toolkit was found). */
gboolean dfl_backend_built (DflBackendId id);

typedef struct _DflDevice DflDevice;

/* Open the back end's device `index` (−1: the back end's default: the
 * first CUDA card; the first discrete Vulkan GPU, else the first Vulkan
 * device). Where the build lacks the back end or the machine the device:
 * NULL with a DFL_ERROR_UNSUPPORTED error saying which and why. */
DflDevice *dfl_device_open (DflBackendId id, int index, GError **error);
/* A DflDevice over a back end's device object opened elsewhere
 * (DflCudaDevice *, DflVkDevice *; NULL for the CPU): it takes its own
 * reference to it, so memory and engines of that object and of this device
 * are one device's. */
DflDevice *dfl_device_wrap (DflBackendId id, gpointer native, GError **error);
DflDevice *dfl_device_ref (DflDevice *dev);
void dfl_device_unref (DflDevice *dev);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (DflDevice, dfl_device_unref)

DflBackendId dfl_device_backend (const DflDevice *dev);
/* "CUDA: NVIDIA H200 (sm_90, 139 GiB)" */
const char *dfl_device_describe (const DflDevice *dev);
/* The back end's own device object (DflCudaDevice *, DflVkDevice *; NULL
 * for the CPU), for the engines written for one back end. */
gpointer dfl_device_native (const DflDevice *dev);

/* Memory on the device: a handle (see above); NULL with a DFL_ERROR_LIMIT
 * error naming the size where there is no room. Freeing NULL does
 * nothing. upload and download come after the ops queued before them
 * (whose failure they then report) and wait for the copy to end. */
gpointer dfl_device_alloc (DflDevice *dev, gsize bytes, GError **error);
void dfl_device_free (DflDevice *dev, gpointer handle);
gboolean dfl_device_upload (DflDevice *dev, gpointer handle, gsize offset, const void *src,
                            gsize bytes, GError **error);
gboolean dfl_device_download (DflDevice *dev, gpointer handle, gsize offset, void *dst,
                              gsize bytes, GError **error);

/* --- tensors --- */

#define DFL_TENSOR_DIMS 4

/* A view of memory: which device holds it (NULL: host memory, read and
 * written in place), the handle and byte offset, the element type, the
 * sizes (ne[0] the innermost) and the byte strides of each dimension. */
typedef struct {
  DflDevice *device;
  gpointer handle;
  gsize offset;
  DflDtype dtype;
  gint64 ne[DFL_TENSOR_DIMS];
  gsize nb[DFL_TENSOR_DIMS];
  /* A host matrix of block-quantized weights may carry the same matrix as
   * dfl_quant_pack lays it out (NULL otherwise), which the CPU's products
   * read instead, to the same bits: its owner made it and frees it. */
  const void *packed;
} DflTensor;

/* A packed [rows][cols] matrix (cols innermost) of `dtype` at handle +
 * offset on `device` (NULL: host). */
DflTensor dfl_tensor_2d (DflDevice *device, gpointer handle, gsize offset, DflDtype dtype,
                         gint64 rows, gint64 cols);
gint64 dfl_tensor_n_elements (const DflTensor *t);
/* Whether rows are packed: each dimension's stride the one inside it times its size. */
gboolean dfl_tensor_is_contiguous (const DflTensor *t);
gsize dfl_tensor_bytes (const DflTensor *t);
/* The address of element 0 where the memory is host memory or a CUDA
 * device pointer (handle + offset); NULL for a Vulkan buffer. */
gpointer dfl_tensor_data (const DflTensor *t);

/* --- operations ---
 *
 * One signature per operation for every back end, over DflTensor. Rows are
 * dimension 1 (ne[1], stride nb[1]) and a row's elements dimension 0,
 * packed (nb[0] the element's size); a head-split row is dimension 0 the
 * head's elements, 1 the heads, 2 the rows. Every tensor of a call lives on
 * the device that runs it (host memory, device NULL, counts as the CPU's);
 * an op's index tensors (positions, key ranges, ids, start rows) live
 * there too unless the capability says DFL_OP_CAP_HOST_INDICES.
 *
 * Convention: each dfl_op_* checks its arguments and the device's
 * capability first, and returns FALSE with a GError when it refuses: an
 * op, type or shape the back end does not run (DFL_ERROR_UNSUPPORTED,
 * naming the op, the back end and the value), tensors that do not agree
 * (DFL_ERROR_MISMATCH), an index the CPU reads out of range
 * (DFL_ERROR_INVALID). Otherwise it returns TRUE: the CPU has done the
 * work; a GPU back end has queued it in order after the ops before it, and
 * a failure while it runs shows at the next dfl_op_sync (or at any op or
 * host copy that must wait for the queue, which then returns it). Nothing
 * is ever run on another back end behind the caller's back.
 */

typedef enum {
  DFL_OP_MATMUL,          /* dtype: the weights' (F32, F16, BF16; the CPU also
                           * Q8_0, Q4_0, Q4_K, Q6_K) */
  DFL_OP_RMSNORM,         /* F32 */
  DFL_OP_ROPE,            /* F32 */
  DFL_OP_ATTENTION,       /* dtype: the keys' and values' (F32; CUDA also BF16) */
  DFL_OP_ROW_CONV,        /* F32 */
  DFL_OP_SILU_MUL,        /* F32 */
  DFL_OP_ADD,             /* F32 */
  DFL_OP_EMBED,           /* dtype: the table's (F32, F16, BF16; the CPU also
                           * the quantized types) */
  DFL_OP_ARGMAX,          /* F32 */
  DFL_OP_TOP_K,           /* F32 */
  DFL_OP_SELECT_RESCORE,  /* dtype: the codebooks' (F16) */
  DFL_OP_COPY_ROWS,       /* dtype: dst's (F32; CUDA also BF16) */
  DFL_OP_CONVERT,         /* dtype: the 16-bit side (F16, BF16) */
  DFL_OP_SYNC,            /* any dtype */
  DFL_OP_CAPTURE_BEGIN,   /* the graph ops: any dtype */
  DFL_OP_CAPTURE_END,
  DFL_OP_GRAPH_LAUNCH,
  DFL_OP_FILL_RANDOM,     /* dtype: the tensor's (F32, F16, BF16) */
  DFL_OP_COPY_ROWS_TABLE, /* as DFL_OP_COPY_ROWS */
  DFL_OP_ATTENTION_TABLE, /* as DFL_OP_ATTENTION */
  DFL_OP_NORM_ROPE,       /* F32 */
} DflOp;
#define DFL_N_OPS (DFL_OP_NORM_ROPE + 1)

/* The most tensors a table op (copy_rows_table, attention_table) takes in
 * one call: a GPU passes their addresses with the launch. */
#define DFL_OP_TABLE_MAX 64

/* "matmul", "rmsnorm", … */
const char *dfl_op_name (DflOp op);

/* What a device does with an op of a type: */
typedef enum {
  DFL_OP_CAP_NONE = 0,
  /* it runs it, on itself */
  DFL_OP_CAP_RUNS = 1 << 0,
  /* its index tensors are read on the host when the op is dispatched, so
   * they must be host memory (and a queue cannot replay the op at other
   * indices) */
  DFL_OP_CAP_HOST_INDICES = 1 << 1,
  /* a row's result is bitwise the same whatever rows come with it in one
   * call (what makes a verified row equal the same row decoded alone);
   * said of matmul and attention */
  DFL_OP_CAP_ROW_INVARIANT = 1 << 2,
} DflOpCaps;

DflOpCaps dfl_device_op_caps (DflDevice *dev, DflOp op, DflDtype dtype);
/* Whether the device runs `op` of `dtype` at all (some shapes may still be
 * refused, with an error naming the value). */
gboolean dfl_device_supports (DflDevice *dev, DflOp op, DflDtype dtype);

/* y[r][o] (+)= x[r] · w[o] for o < y's columns (≤ w's rows: the first rows
 * of w only, e.g. a head's shortlist). w [out][in] F32/F16/BF16, packed
 * rows, or (where the capability says so) rows of quantized blocks, `in`
 * a whole number of blocks (nb[0] a block's bytes: dfl_tensor_2d); x
 * [rows][in] F32, y [rows][n_out] F32, any row strides. The CPU quantizes
 * x by groups of 32 to int8 for quantized weights (quant-matmul.c).
 * Batch-invariant where the device's caps say DFL_OP_CAP_ROW_INVARIANT: a
 * row's result does not depend on the other rows of the call. */
gboolean dfl_op_matmul (DflDevice *dev, const DflTensor *w, const DflTensor *x, DflTensor *y,
                        gboolean accumulate, GError **error);
/* The most products dfl_op_matmul_group takes. */
#define DFL_OP_GROUP_MAX 4
/* y[i] (+)= x · w[i]ᵀ for i < n (1 ≤ n ≤ DFL_OP_GROUP_MAX): products of
 * one x (q, k and v; gate and up), each as dfl_op_matmul takes it. A back
 * end may run them as one piece of work: the CPU shares the outputs of
 * all of them out over its threads at once (one wait instead of one a
 * product); CUDA reads them in one launch (one row; 2 to 32 rows of q, k
 * and v on the tensor cores); Vulkan runs a dfl_op_matmul a product. Each
 * y[i] is bitwise what dfl_op_matmul gives for it, except CUDA's 2 to 32
 * rows, which equal it within the rounding of the sum (its dfl_op_matmul
 * is cuBLAS's there, whose kernels depend on the shape). */
gboolean dfl_op_matmul_group (DflDevice *dev, int n, const DflTensor *const *w,
                              const DflTensor *x, DflTensor *const *y, gboolean accumulate,
                              GError **error);
/* Each row: x / sqrt(mean(x²) + eps) ⊙ w; x, y [rows][dim] packed (y may
 * be x), w [dim]. */
gboolean dfl_op_rmsnorm (DflDevice *dev, const DflTensor *x, const DflTensor *w, DflTensor *y,
                         float eps, GError **error);
/* Half-split (NeoX / Qwen) rope in place: x [rows][heads][head_dim]
 * packed; inv_freq [head_dim / 2] F32; pos I64, an index tensor (on a GPU
 * it is read when the queue runs, so a captured graph replays at the
 * positions held then), either one start position (row r at pos[0] + r)
 * or `rows` positions, one a row (the rows of several sequences in one
 * call); with one row both forms are the same. */
gboolean dfl_op_rope (DflDevice *dev, DflTensor *x, const DflTensor *inv_freq,
                      const DflTensor *pos, GError **error);
/* Each head's RMS norm, then rope, in place: x, inv_freq and pos as
 * dfl_op_rope's, w [head_dim] F32. Bitwise dfl_op_rmsnorm over x's heads
 * as rows (y = x) followed by dfl_op_rope, on every device: one launch
 * where the back end has it (CUDA), those two ops where not. */
gboolean dfl_op_norm_rope (DflDevice *dev, DflTensor *x, const DflTensor *w,
                           const DflTensor *inv_freq, const DflTensor *pos, float eps,
                           GError **error);
/* Grouped-query attention: q, out [rows][heads][head_dim] packed (F32); k,
 * v [keys][kv_heads][head_dim] (heads packed, any key stride, the same for
 * both), F32, or BF16 where the device runs attention of BF16 (CUDA: the
 * values widened exactly, so the output is that of F32 keys and values of
 * the same values); query row r sees keys [lo[r], hi[r]) (lo, hi: I32
 * [rows], index tensors; an empty range gives zeros). Softmax in F32 with
 * the maximum subtracted. Causal decoding over a cache is lo = 0, hi =
 * past + r + 1. */
gboolean dfl_op_attention (DflDevice *dev, const DflTensor *q, const DflTensor *k,
                           const DflTensor *v, const DflTensor *lo, const DflTensor *hi,
                           DflTensor *out, float scale, GError **error);
/* The drafter's grouped causal row convolution:
 *   y[r][i] = Σ_{o < min(kernel, r+1)} (base[o][i] + dyn[r][o][i / group]) · x[r−o][i]
 * x, y [rows][dim] packed (y not x); base [kernel][dim] packed; dyn
 * [rows][kernel · dim / group] (any row stride); kernel and group follow
 * from the shapes. */
gboolean dfl_op_row_conv (DflDevice *dev, const DflTensor *x, const DflTensor *base,
                          const DflTensor *dyn, DflTensor *y, GError **error);
/* gate = silu(gate) · up; x += y (same shapes, packed). */
gboolean dfl_op_silu_mul (DflDevice *dev, DflTensor *gate, const DflTensor *up, GError **error);
gboolean dfl_op_add (DflDevice *dev, DflTensor *x, const DflTensor *y, GError **error);
/* out[i] = table[ids[i]] widened to F32: table [vocab][dim] (F32, F16,
 * BF16, packed), ids I32 [n] (an index tensor), out [n][dim] F32. An id
 * outside the table: the CPU refuses it (DFL_ERROR_INVALID); a GPU cannot
 * see it, so the caller keeps ids in range. */
gboolean dfl_op_embed (DflDevice *dev, const DflTensor *table, const DflTensor *ids,
                       DflTensor *out, GError **error);
/* out[r] (I32 [rows]) = the index of row r's largest value (x [rows][n]
 * F32, any row stride): the first of equals; NaNs never win, and a row
 * whose first value is NaN gives 0 (the CPU's dfl_argmax). */
gboolean dfl_op_argmax (DflDevice *dev, const DflTensor *x, DflTensor *out, GError **error);
/* Each row's k largest values (k the columns of values and indices, both
 * [rows][k] packed; x [rows][n], any row stride), largest first, the first
 * of equals kept, NaNs skipped, −0 equal to +0; where a row has fewer than
 * k other values the slots past them hold index −1 (and a value no one
 * should read). */
gboolean dfl_op_top_k (DflDevice *dev, const DflTensor *x, DflTensor *values,
                       DflTensor *indices, GError **error);
/* The selector's re-scoring, a chain over rows: row r's candidates (cand
 * I32 [rows][k], −1 ends a row's list as top_k pads it; their logits
 * cand_logit F32 [rows][k]) are scored logit + Σ_j (pred[prev][j] ·
 * hp[r][j]) · succ[c][j], in that order of float operations (hp F32
 * [rows][rank]; pred, succ F16 [vocab][rank]); prev is `anchor`, then each
 * row's choice; the first of equal scores wins; a row with no candidate
 * chooses token 0. chosen: I32 [rows]. */
gboolean dfl_op_select_rescore (DflDevice *dev, const DflTensor *cand, const DflTensor *cand_logit,
                                const DflTensor *hp, const DflTensor *pred_book,
                                const DflTensor *succ_book, DflTensor *chosen, gint32 anchor,
                                GError **error);
/* src's rows (F32 [rows][width] packed) into dst's rows row0[0] …
 * row0[0] + rows − 1 (dst [n][width] packed; row0 one I64, an index
 * tensor: on a GPU read when the queue runs). dst F32, or BF16 where the
 * device runs copy_rows of BF16 (a KV cache: F32 rows rounded to nearest
 * even, BF16 rows copied as they are). The CPU refuses a start row that
 * does not fit (DFL_ERROR_INVALID). */
gboolean dfl_op_copy_rows (DflDevice *dev, const DflTensor *src, const DflTensor *row0,
                           DflTensor *dst, GError **error);
/* src's rows (F32 [rows][width] packed) each into a row of one of `n_dst`
 * tensors (≤ DFL_OP_TABLE_MAX; each [n_i][width] packed, all F32 or all
 * BF16 as dfl_op_copy_rows takes them, e.g. every sequence's KV cache of a
 * layer): row r into dsts[which[r]]'s row
 * row[r] (which I32 [rows], row I64 [rows]: index tensors, read on a GPU
 * when the queue runs). The tensors' addresses are part of the call (a
 * captured graph writes the same tensors). The CPU refuses an entry or a
 * row out of range (DFL_ERROR_INVALID). Rows must not land on one
 * another. */
gboolean dfl_op_copy_rows_table (DflDevice *dev, const DflTensor *src, const DflTensor *dsts,
                                 int n_dst, const DflTensor *which, const DflTensor *row,
                                 GError **error);
/* dfl_op_attention over a table of key sets (e.g. every sequence's KV cache
 * of a layer): query row r sees keys [lo[r], hi[r]) of ks[which[r]] and
 * vs[which[r]] (which, lo, hi I32 [rows], index tensors; ks, vs `n_kv`
 * ≤ DFL_OP_TABLE_MAX tensors each [keys_i][kv_heads][head_dim], the same
 * heads and key stride for all, k and v of one entry the same shape). A
 * row's output is bitwise what dfl_op_attention gives it over its entry
 * alone, on the back ends where attention is DFL_OP_CAP_ROW_INVARIANT. */
gboolean dfl_op_attention_table (DflDevice *dev, const DflTensor *q, const DflTensor *ks,
                                 const DflTensor *vs, int n_kv, const DflTensor *which,
                                 const DflTensor *lo, const DflTensor *hi, DflTensor *out,
                                 float scale, GError **error);
/* dst = src converted element by element, F32 → F16/BF16 (round to
 * nearest even) or F16/BF16 → F32 (exact); both packed, the same count. */
gboolean dfl_op_convert (DflDevice *dev, const DflTensor *src, DflTensor *dst, GError **error);
/* Wait for the device's queue: FALSE with the first failure of the work
 * queued since the last sync. */
/* t (F32, F16 or BF16, packed) filled with values uniform in [-scale,
 * scale): element i is a hash of (seed, i) (splitmix64's finaliser, 24
 * bits), rounded to the type to nearest even, so every back end that runs
 * it writes the same bits. For weights of benchmarks and tests made where
 * they are used (16 GB of a Qwen3-8B shape need not cross the bus). */
gboolean dfl_op_fill_random (DflDevice *dev, DflTensor *t, guint64 seed, float scale,
                             GError **error);
gboolean dfl_op_sync (DflDevice *dev, GError **error);

/* Graphs (CUDA): the ops a thread dispatches between capture_begin and
 * capture_end are recorded, not run, and the device is held by that
 * thread until capture_end; graph_launch queues the whole recording again.
 * Index tensors are read when the graph runs, so a graph replays at the
 * positions and ranges they hold then. Back ends without graphs refuse
 * (DFL_OP_CAPTURE_BEGIN is not in their capabilities). */
typedef struct _DflGraph DflGraph;
gboolean dfl_op_capture_begin (DflDevice *dev, GError **error);
DflGraph *dfl_op_capture_end (DflDevice *dev, GError **error);
gboolean dfl_op_graph_launch (DflDevice *dev, DflGraph *graph, GError **error);
void dfl_graph_free (DflGraph *graph);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (DflGraph, dfl_graph_free)

G_END_DECLS
