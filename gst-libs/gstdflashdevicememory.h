/* gst-dflash — tensors that stay on a GPU between elements.
 *
 * A GstDflashDeviceMemory is one allocation on a CUDA or Vulkan device,
 * made, filled and read back through the back-end interface (a DflDevice,
 * dfl-backend.h). It travels in buffers under a caps feature of our own,
 * memory:DflashCudaMemory or memory:DflashVulkanMemory, so two elements
 * that both run on the device hand each other the allocation and nothing
 * is copied. The elements reach the allocation through
 * gst_dflash_device_memory_handle.
 *
 * The features are our own because the memory is: GStreamer's
 * memory:CUDAMemory promises a GstCudaMemory (video planes on a
 * GstCudaContext) and memory:VulkanBuffer a GstVulkanBufferMemory of the
 * Vulkan plugin's device objects, and an element of those libraries that
 * linked to ours under those names would take our allocation for theirs.
 * Under names of our own, such a link fails at negotiation instead.
 * Mapping a memory for reading downloads it into a host copy (and mapping
 * for writing uploads the host copy at unmap), so a debugging probe or a
 * test can read a tensor; the elements never do that on the hot path.
 */
#pragma once

#include <gst/gst.h>

#include "dfl-backend.h"

G_BEGIN_DECLS

#define GST_DFLASH_CAPS_FEATURE_CUDA "memory:DflashCudaMemory"
#define GST_DFLASH_CAPS_FEATURE_VULKAN "memory:DflashVulkanMemory"

#define GST_TYPE_DFLASH_DEVICE_ALLOCATOR (gst_dflash_device_allocator_get_type ())
G_DECLARE_FINAL_TYPE (GstDflashDeviceAllocator, gst_dflash_device_allocator, GST,
                      DFLASH_DEVICE_ALLOCATOR, GstAllocator)

/* An allocator of `device`'s memory (it keeps a reference to the device);
 * its memories are of `caps_feature` (GST_DFLASH_CAPS_FEATURE_*), their
 * mem_type the feature without "memory:". */
GstAllocator *gst_dflash_device_allocator_new (DflDevice *device, const char *caps_feature);

/* One allocation of `size` bytes; NULL with the back end's error (no room
 * on the card, a lost device). */
GstMemory *gst_dflash_device_allocator_alloc_checked (GstAllocator *allocator, gsize size,
                                                      GError **error);

/* Whether `mem` is device memory (of any back end), and of which feature. */
gboolean gst_is_dflash_device_memory (GstMemory *mem);
const char *gst_dflash_device_memory_feature (GstMemory *mem);
/* The back end's handle of the allocation (dfl-backend.h) and the device
 * it lives on; mem->offset says where this memory's bytes begin in it. */
gpointer gst_dflash_device_memory_handle (GstMemory *mem);
DflDevice *gst_dflash_device_memory_device (GstMemory *mem);

/* The buffer's single memory as device memory of `feature`, or NULL (a
 * buffer of system memory, another back end's, or several memories). */
GstMemory *gst_dflash_buffer_device_memory (GstBuffer *buf, const char *feature);

/* The buffer's bytes as a [rows][cols] tensor of `dtype` for the core:
 * its one allocation of `device`'s memory (a device tensor; NULL device:
 * none), else its system memory mapped with `flags` (a host tensor; `map`
 * then holds the mapping, which the caller unmaps where map->memory is
 * set). FALSE with an error where the buffer is neither, or of another
 * size. */
gboolean gst_dflash_buffer_tensor (GstBuffer *buf, DflDevice *device, GstMapFlags flags,
                                   GstMapInfo *map, DflDtype dtype, gint64 rows, gint64 cols,
                                   DflTensor *out, GError **error);

G_END_DECLS
