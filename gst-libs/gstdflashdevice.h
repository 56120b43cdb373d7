/* gst-dflash — the GPU the elements of a loop share.
 *
 * A GstDflashDevice is one opened CUDA or Vulkan device (a DflDevice of the
 * back-end interface, dfl-backend.h) and the allocator of its memory. Elements find it the way they find the model (and the way
 * GStreamer's CUDA and Vulkan elements share theirs): a context query on
 * their pads, then NEED_CONTEXT on the bus; the first element that needs
 * one and finds none opens it and posts HAVE_CONTEXT, so one device (one
 * CUDA context, one stream) serves the whole pipeline, and an application
 * may hand the same device to several pipelines with gst_element_set_context.
 *
 * Context types: "dflash.cuda.device", "dflash.vulkan.device"; the structure
 * holds the device under "device".
 */
#pragma once

#include <gst/gst.h>

#include "dfl-backend.h"
#include "gstdflashcaps.h"

G_BEGIN_DECLS

#define GST_DFLASH_CUDA_CONTEXT_TYPE "dflash.cuda.device"
#define GST_DFLASH_VULKAN_CONTEXT_TYPE "dflash.vulkan.device"

#define GST_TYPE_DFLASH_DEVICE (gst_dflash_device_get_type ())
G_DECLARE_FINAL_TYPE (GstDflashDevice, gst_dflash_device, GST, DFLASH_DEVICE, GstObject)

/* Open the first device of `backend` (CUDA or VULKAN), or a new reference
 * to the one this process already has open (one per back end: a model's
 * GPU engines live on one device, whichever pipeline uses them). Where this
 * build has no such back end, or the machine no such device, NULL with a
 * DFL_ERROR_UNSUPPORTED error saying which and why. */
GstDflashDevice *gst_dflash_device_open (GstDflashBackend backend, GError **error);

GstDflashBackend gst_dflash_device_backend (GstDflashDevice *dev);
/* The device of the back-end interface (transfer none). */
DflDevice *gst_dflash_device_dfl (GstDflashDevice *dev);
/* The allocator of the device's memory (transfer none). */
GstAllocator *gst_dflash_device_allocator (GstDflashDevice *dev);
/* GST_DFLASH_CAPS_FEATURE_* of the back end. */
const char *gst_dflash_device_caps_feature (GstDflashDevice *dev);
/* "CUDA: NVIDIA H200 (sm_90, 139 GiB)" */
const char *gst_dflash_device_describe (GstDflashDevice *dev);

/* The back end of the interface (dfl-backend.h); AUTO is the CPU's. */
DflBackendId gst_dflash_backend_id (GstDflashBackend backend);
/* The context type of a GPU back end (NULL for AUTO and CPU). */
const char *gst_dflash_backend_context_type (GstDflashBackend backend);
const char *gst_dflash_backend_caps_feature (GstDflashBackend backend);
const char *gst_dflash_backend_nick (GstDflashBackend backend);

GstContext *gst_dflash_device_context_new (GstDflashDevice *dev);
/* Answer a context query with `dev` (TRUE where it was ours to answer). */
gboolean gst_dflash_device_handle_context_query (GstElement *element, GstQuery *query,
                                                 GstDflashDevice *dev);
/* Take the device from a context set on the element, where its type is
 * `backend`'s and *slot is empty. */
void gst_dflash_device_handle_set_context (GstElement *element, GstContext *context,
                                           GstDflashBackend backend, GstDflashDevice **slot);
/* Find `backend`'s device if *slot is empty: a context query on `pad`'s
 * peer (then on the peers of the element's other pads), then NEED_CONTEXT
 * on the bus, and where nobody has one, open it and post HAVE_CONTEXT.
 * FALSE where it cannot be opened, the reason prefixed with the backend
 * ("backend=cuda: CUDA is unavailable: …"; the element that posts it is
 * the error's source). */
gboolean gst_dflash_device_ensure (GstElement *element, GstPad *pad, GstDflashBackend backend,
                                   GstDflashDevice **slot, GError **error);

/* A pool of buffers of one `size`-byte allocation each on the device,
 * active; acquire one (NULL with an error naming the device where the
 * card has no room). */
GstBufferPool *gst_dflash_device_pool_new (GstDflashDevice *dev, gsize size, GError **error);
/* The same pool configured but not active: what a consumer offers in its
 * answer to an ALLOCATION query (the producer activates it). */
GstBufferPool *gst_dflash_device_pool_propose (GstDflashDevice *dev, gsize size);
/* Whether `pool` (one downstream proposed) holds `size`-byte tensors of
 * `dev`'s memory, so that a producer on `dev` may fill it. */
gboolean gst_dflash_device_pool_fits (GstBufferPool *pool, GstDflashDevice *dev, gsize size);
GstBuffer *gst_dflash_device_pool_acquire (GstBufferPool *pool, GstDflashDevice *dev,
                                           GError **error);

G_END_DECLS
