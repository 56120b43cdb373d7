/* gst-dflash — Vulkan compute kernels and the device they run on.
 *
 * Compute only: no model files, no model logic (the core's, over dfl-backend.h).
 * Buffers are reached by device address (Vulkan 1.2's buffer device
 * address): a kernel takes VkDeviceAddress values, byte offsets added by the
 * caller, as the CUDA kernels take device pointers; no descriptor sets. A
 * matrix W is [out][in] row-major as checkpoints store it, so a projection
 * of `rows` rows is y = x · Wᵀ, accumulated in F32.
 *
 * Work is recorded on a DflVkStream (a command buffer): launchers record and
 * return at once, each dispatch ordered after the ones before it (a full
 * memory barrier between them); dfl_vk_stream_finish submits what was
 * recorded and waits. A launcher cannot fail synchronously: a failure
 * (a pipeline that would not build) is kept by the stream and reported by
 * the next dfl_vk_stream_finish as a GError (DFL_ERROR_IO naming the call).
 *
 * Weights of 16 bits (F16, BF16) are stored as 16-bit values on every device
 * and read in 32-bit words, widened in the shader exactly; accumulation is
 * F32. Reductions use subgroup operations where the device has subgroup
 * arithmetic in compute shaders, shared memory otherwise.
 */
#pragma once

#include <glib.h>
#include <stddef.h>
#include <stdint.h>

#include "dfl-dtype.h"
#include "dfl-error.h"
#include <vulkan/vulkan.h>

G_BEGIN_DECLS

/* --- the device --- */

typedef struct _DflVkDevice DflVkDevice;

typedef enum {
  DFL_VK_DEVICE_DEFAULT = 0,
  /* Enable VK_LAYER_KHRONOS_validation and a debug messenger that counts
   * its errors (dfl_vk_device_validation_errors), where the layer is
   * installed (dfl_vk_device_validating says whether it is on). */
  DFL_VK_DEVICE_VALIDATE = 1 << 0,
  /* Reduce through shared memory even where subgroups could (tests of the
   * fallback). */
  DFL_VK_DEVICE_NO_SUBGROUP = 1 << 1,
} DflVkDeviceFlags;

/* Open the `index`-th physical device that can run the kernels (Vulkan 1.2,
 * buffer device address, a compute queue), in the loader's order; index −1
 * takes the first discrete GPU if any, else the first. Where there is no
 * loader, no device or none that qualifies: NULL with a
 * DFL_ERROR_UNSUPPORTED error "Vulkan is unavailable: <reason>". */
DflVkDevice *dfl_vk_device_open (int index, DflVkDeviceFlags flags, GError **error);
DflVkDevice *dfl_vk_device_ref (DflVkDevice *dev);
void dfl_vk_device_unref (DflVkDevice *dev);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (DflVkDevice, dfl_vk_device_unref)

/* "llvmpipe (LLVM 15.0.6, 256 bits) (CPU, Vulkan 1.3.230, subgroups of 8)" */
const char *dfl_vk_device_describe (DflVkDevice *dev);
gboolean dfl_vk_device_uses_subgroups (DflVkDevice *dev);
/* Whether the validation layer is on, and how many errors it reported so
 * far (the first one's text in *first when asked; NULL when none). */
gboolean dfl_vk_device_validating (DflVkDevice *dev);
guint dfl_vk_device_validation_errors (DflVkDevice *dev, char **first);
/* The handles, for code that shares the device (GStreamer's Vulkan
 * elements): instance, physical device, device, the queue and its family. */
VkInstance dfl_vk_device_instance (DflVkDevice *dev);
VkPhysicalDevice dfl_vk_device_physical (DflVkDevice *dev);
VkDevice dfl_vk_device_handle (DflVkDevice *dev);
VkQueue dfl_vk_device_queue (DflVkDevice *dev, guint32 *family);

/* --- buffers --- */

typedef enum {
  DFL_VK_MEMORY_DEVICE,   /* device-local: what kernels read and write */
  DFL_VK_MEMORY_HOST,     /* host-visible, coherent, mapped for good: staging, read-back */
} DflVkMemory;

typedef struct _DflVkBuffer DflVkBuffer;

/* A buffer of `bytes` (> 0), usable by kernels (device address), as a copy
 * source and destination. NULL with a DFL_ERROR_LIMIT error naming the size
 * when the device has no room. */
DflVkBuffer *dfl_vk_buffer_new (DflVkDevice *dev, gsize bytes, DflVkMemory memory, GError **error);
void dfl_vk_buffer_free (DflVkBuffer *buf);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (DflVkBuffer, dfl_vk_buffer_free)
gsize dfl_vk_buffer_size (const DflVkBuffer *buf);
VkBuffer dfl_vk_buffer_handle (const DflVkBuffer *buf);
VkDeviceAddress dfl_vk_buffer_address (const DflVkBuffer *buf);
DflVkMemory dfl_vk_buffer_memory (const DflVkBuffer *buf);
/* The mapping of a host buffer (NULL for device memory). */
void *dfl_vk_buffer_map (const DflVkBuffer *buf);

/* Copies between the host and a buffer, waiting for the copy to end. Device
 * memory goes through the device's staging buffer; host memory is copied in
 * place. The caller orders them with any stream that uses the buffer (the
 * stream's work must be finished). */
gboolean dfl_vk_upload (DflVkDevice *dev, DflVkBuffer *dst, gsize offset, const void *src,
                        gsize bytes, GError **error);
gboolean dfl_vk_download (DflVkDevice *dev, void *dst, DflVkBuffer *src, gsize offset,
                          gsize bytes, GError **error);

/* --- streams --- */

typedef struct _DflVkStream DflVkStream;

/* A command buffer of its own (and a fence): streams of one device may be
 * used from different threads, each stream by one thread at a time. */
DflVkStream *dfl_vk_stream_new (DflVkDevice *dev, GError **error);
void dfl_vk_stream_free (DflVkStream *s);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (DflVkStream, dfl_vk_stream_free)
DflVkDevice *dfl_vk_stream_device (DflVkStream *s);
/* Submit what was recorded and wait for it. FALSE with the first error the
 * recording met, or the submission's. Nothing recorded: TRUE at once. */
gboolean dfl_vk_stream_finish (DflVkStream *s, GError **error);
/* Buffer to buffer copy, ordered with the kernels around it. */
void dfl_vk_copy (DflVkStream *s, DflVkBuffer *dst, gsize dst_offset, DflVkBuffer *src,
                  gsize src_offset, gsize bytes);

/* --- element types --- */


/* A weight matrix on the device: [rows][cols] row-major in `type`, at a
 * 4-byte aligned address. */
typedef struct {
  VkDeviceAddress addr;
  DflDtype type;
  int rows;   /* outputs */
  int cols;   /* inputs */
} DflVkWeights;

/* --- kernels --- */

/* y[r][o] (+)= x[r] · W[o] for r < rows, o < n_out (n_out ≤ W.rows: a head's
 * shortlist is its first rows). ldx, ldy: row strides in floats. */
void dfl_vk_matmul (DflVkStream *s, const DflVkWeights *w, VkDeviceAddress x, int rows, int ldx,
                    VkDeviceAddress y, int ldy, int n_out, gboolean accumulate);

/* Each row of `dim`: x / sqrt(mean(x²) + eps) ⊙ w (w: F32 [dim]), from src
 * into dst (may be the same). */
void dfl_vk_rmsnorm (DflVkStream *s, VkDeviceAddress dst, VkDeviceAddress src, int rows, int dim,
                     VkDeviceAddress w, float eps);

/* Half-split (NeoX / Qwen) rope in place: `rows` rows of `heads` heads of
 * head_dim. cos_sin: [rows][head_dim] F32, row r's cosines of its head_dim/2
 * angles then their sines (dfl_vk_rope_table makes it on the host). */
void dfl_vk_rope (DflVkStream *s, VkDeviceAddress x, int rows, int heads, int head_dim,
                  VkDeviceAddress cos_sin);
/* The table for positions pos0 … pos0+rows−1: angle pos · inv_freq[i]
 * formed in F32, cosf and sinf (the CPU rope's arithmetic). */
void dfl_vk_rope_table (float *cos_sin, int rows, int head_dim, const float *inv_freq,
                        int64_t pos0);

/* gate[i] = silu(gate[i]) · up[i]; x[i] += y[i]. */
void dfl_vk_silu_mul (DflVkStream *s, VkDeviceAddress gate, VkDeviceAddress up, size_t n);
void dfl_vk_add (DflVkStream *s, VkDeviceAddress x, VkDeviceAddress y, size_t n);

/* The drafter's grouped causal row convolution:
 *   y[r][i] = Σ_{o < min(kernel, r+1)} (base[o][i] + dyn[r][o][i / group]) · x[r−o][i]
 * x, y [rows][dim] (y must not be x); base [kernel][dim]; dyn rows of stride
 * `dyn_stride` floats holding [kernel][dim / group]. */
void dfl_vk_row_conv (DflVkStream *s, VkDeviceAddress x, int rows, int dim, int group, int kernel,
                      VkDeviceAddress base, VkDeviceAddress dyn, int dyn_stride,
                      VkDeviceAddress y);

/* dst[0] = table[anchor], dst[r] = table[mask] for 1 ≤ r < rows: a block's
 * rows from an embedding table [vocab][dim] (ids checked by the caller). */
void dfl_vk_embed_block (DflVkStream *s, VkDeviceAddress table, DflDtype type, int dim,
                         int rows, uint32_t anchor, uint32_t mask, VkDeviceAddress dst);

/* Block attention, grouped-query, of `rows` query rows (q [rows][heads][hd])
 * over `n` context rows of a ring of `cap` rows ([cap][kv_heads][hd]; context
 * row j is ring row (ring_off + j) % cap) and over every block row (kb, vb
 * [rows][kv_heads][hd]), not causal. Row r skips the first
 * clamp(anchor_rel + r + 1 − window, 0, n) context rows where window > 0.
 * scores: scratch of rows·heads·(n + rows) floats. hd ≤ 256. */
void dfl_vk_attention (DflVkStream *s, VkDeviceAddress q, int rows, int heads, int kv_heads,
                       int hd, VkDeviceAddress kc, VkDeviceAddress vc, int n, int ring_off,
                       int cap, VkDeviceAddress kb, VkDeviceAddress vb, int anchor_rel,
                       int window, float scale, VkDeviceAddress scores, VkDeviceAddress out);

/* Each row's k largest of n values (row stride ld), largest first, the
 * first of equals kept, NaNs skipped: vals [rows][k] F32, idx [rows][k]
 * int32 (−1 where fewer than k values). */
void dfl_vk_top_k (DflVkStream *s, VkDeviceAddress x, int rows, int n, int ld, int k,
                   VkDeviceAddress vals, VkDeviceAddress idx);

/* Each row's index of its largest of n values (row stride ld), the first
 * of equals, NaNs never winning, 0 for a row whose first value is NaN (the
 * CPU's dfl_argmax): idx [rows] int32. */
void dfl_vk_argmax (DflVkStream *s, VkDeviceAddress x, int rows, int n, int ld,
                    VkDeviceAddress idx);

/* The selector's re-scoring chain over `rows` rows (candidates from
 * dfl_vk_top_k): each candidate scored logit + Σ_i (pred[prev][i] · hp[r][i])
 * · succ[cand][i] (codebooks F16 [vocab][rank] at 4-byte aligned addresses,
 * hp [rows][rank]), prev the anchor then each row's choice, the first of
 * equals kept. Without a selector (pred = 0) each row's first candidate.
 * ids: int32 chosen [rows] then plain (first candidates) [rows]. k ≤ 256. */
void dfl_vk_select_rescore (DflVkStream *s, VkDeviceAddress vals, VkDeviceAddress idx, int rows,
                            int k, VkDeviceAddress hp, int rank, VkDeviceAddress pred,
                            VkDeviceAddress succ, uint32_t anchor, VkDeviceAddress ids);

G_END_DECLS
