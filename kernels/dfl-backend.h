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
 * nothing. upload and download wait for the copy to end. */
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

G_END_DECLS
