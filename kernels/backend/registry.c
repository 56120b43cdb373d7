/* gst-dflash — the back-end registry: which back ends this build has, and
 * how each one's device is opened and its memory handled.
 *
 * The one file of the tree that tests HAVE_CUDA and HAVE_VULKAN: everything
 * above reaches a back end through DflDevice (dfl-backend.h) and asks
 * dfl_backend_built what exists. Each back end's table of operations lives
 * in its own file (ops-*.c), which meson builds where the back end is; this
 * file only points the devices at it.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "backend-private.h"

#include <string.h>

#ifdef HAVE_CUDA
#include "dfl-cuda.h"
#endif
#ifdef HAVE_VULKAN
#include "dfl-vk.h"
#endif

/* --- CPU: host memory --- */

static gboolean
cpu_open (int index, gpointer *native, GError **error)
{
  *native = NULL;
  return TRUE;
}

static gpointer
cpu_ref (gpointer native)
{
  return NULL;
}

static void
cpu_close (gpointer native)
{
}

static char *
cpu_describe (gpointer native)
{
  return g_strdup ("CPU: host memory");
}

static gpointer
cpu_alloc (gpointer native, gsize bytes, GError **error)
{
  gpointer p = g_try_malloc (bytes ? bytes : 1);

  if (!p)
    g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT, "no room for %" G_GSIZE_FORMAT
                 " bytes of host memory", bytes);
  return p;
}

static void
cpu_free (gpointer native, gpointer handle)
{
  g_free (handle);
}

static gboolean
cpu_upload (gpointer native, gpointer handle, gsize offset, const void *src, gsize bytes,
            GError **error)
{
  memcpy ((char *) handle + offset, src, bytes);
  return TRUE;
}

static gboolean
cpu_download (gpointer native, gpointer handle, gsize offset, void *dst, gsize bytes,
              GError **error)
{
  memcpy (dst, (const char *) handle + offset, bytes);
  return TRUE;
}

static const DflBackendDeviceOps cpu_ops = {
  "cpu", TRUE, cpu_open, cpu_ref, cpu_close, cpu_describe, cpu_alloc, cpu_free, cpu_upload,
  cpu_download, &dfl_backend_cpu_ops,
};

/* --- CUDA: device pointers --- */

#ifdef HAVE_CUDA
static gboolean
cuda_open (int index, gpointer *native, GError **error)
{
  return (*native = dfl_cuda_device_open (index < 0 ? 0 : index, error)) != NULL;
}

static gpointer
cuda_ref (gpointer native)
{
  return dfl_cuda_device_ref (native);
}

static void
cuda_close (gpointer native)
{
  dfl_cuda_device_unref (native);
}

static char *
cuda_describe (gpointer native)
{
  return g_strdup_printf ("CUDA: %s", dfl_cuda_device_describe (native));
}

static gpointer
cuda_alloc (gpointer native, gsize bytes, GError **error)
{
  return dfl_cuda_alloc (native, bytes, error);
}

static void
cuda_free (gpointer native, gpointer handle)
{
  dfl_cuda_free (native, handle);
}

static gboolean
cuda_upload (gpointer native, gpointer handle, gsize offset, const void *src, gsize bytes,
             GError **error)
{
  return dfl_cuda_upload (native, (char *) handle + offset, src, bytes, error);
}

static gboolean
cuda_download (gpointer native, gpointer handle, gsize offset, void *dst, gsize bytes,
               GError **error)
{
  return dfl_cuda_download (native, dst, (const char *) handle + offset, bytes, error);
}

static const DflBackendDeviceOps cuda_ops = {
  "cuda", TRUE, cuda_open, cuda_ref, cuda_close, cuda_describe, cuda_alloc, cuda_free,
  cuda_upload, cuda_download, &dfl_backend_cuda_ops,
};
#else
static const DflBackendDeviceOps cuda_ops = { "cuda", FALSE };
#endif

/* --- Vulkan: whole device-local buffers, offsets into them --- */

#ifdef HAVE_VULKAN
static gboolean
vk_open (int index, gpointer *native, GError **error)
{
  return (*native = dfl_vk_device_open (index, DFL_VK_DEVICE_DEFAULT, error)) != NULL;
}

static gpointer
vk_ref (gpointer native)
{
  return dfl_vk_device_ref (native);
}

static void
vk_close (gpointer native)
{
  dfl_vk_device_unref (native);
}

static char *
vk_describe (gpointer native)
{
  return g_strdup_printf ("Vulkan: %s", dfl_vk_device_describe (native));
}

static gpointer
vk_alloc (gpointer native, gsize bytes, GError **error)
{
  return dfl_vk_buffer_new (native, bytes, DFL_VK_MEMORY_DEVICE, error);
}

static void
vk_free (gpointer native, gpointer handle)
{
  dfl_vk_buffer_free (handle);
}

static gboolean
vk_upload (gpointer native, gpointer handle, gsize offset, const void *src, gsize bytes,
           GError **error)
{
  return dfl_vk_upload (native, handle, offset, src, bytes, error);
}

static gboolean
vk_download (gpointer native, gpointer handle, gsize offset, void *dst, gsize bytes,
             GError **error)
{
  return dfl_vk_download (native, dst, handle, offset, bytes, error);
}

static const DflBackendDeviceOps vulkan_ops = {
  "vulkan", TRUE, vk_open, vk_ref, vk_close, vk_describe, vk_alloc, vk_free, vk_upload,
  vk_download, &dfl_backend_vulkan_ops,
};
#else
static const DflBackendDeviceOps vulkan_ops = { "vulkan", FALSE };
#endif

static const DflBackendDeviceOps *const backends[DFL_N_BACKENDS] = {
  [DFL_BACKEND_CPU] = &cpu_ops,
  [DFL_BACKEND_CUDA] = &cuda_ops,
  [DFL_BACKEND_VULKAN] = &vulkan_ops,
};

const char *
dfl_backend_name (DflBackendId id)
{
  return (guint) id < DFL_N_BACKENDS ? backends[id]->name : "invalid";
}

gboolean
dfl_backend_built (DflBackendId id)
{
  return (guint) id < DFL_N_BACKENDS && backends[id]->built;
}

/* A device object around `native` (the back end's own; the reference the
 * caller's open or ref took passes to it), described, with the
 * operations' state made for it. */
static DflDevice *
device_new (DflBackendId id, gpointer native, GError **error)
{
  DflDevice *dev = g_new0 (DflDevice, 1);

  dev->refcount = 1;
  dev->id = id;
  dev->backend = backends[id];
  dev->native = native;
  dev->description = dev->backend->describe (native);
  if (dev->backend->ops->init && !(dev->state = dev->backend->ops->init (dev, error))) {
    dev->backend->close (native);
    g_free (dev->description);
    g_free (dev);
    return NULL;
  }
  return dev;
}

static gboolean
check_built (DflBackendId id, GError **error)
{
  if (dfl_backend_built (id))
    return TRUE;
  g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
               "backend=%s is not available in this build", dfl_backend_name (id));
  return FALSE;
}

DflDevice *
dfl_device_open (DflBackendId id, int index, GError **error)
{
  gpointer native;

  if (!check_built (id, error) || !backends[id]->open (index, &native, error))
    return NULL;
  return device_new (id, native, error);
}

DflDevice *
dfl_device_wrap (DflBackendId id, gpointer native, GError **error)
{
  if (!check_built (id, error))
    return NULL;
  return device_new (id, backends[id]->ref (native), error);
}

DflDevice *
dfl_device_ref (DflDevice *dev)
{
  g_atomic_int_inc (&dev->refcount);
  return dev;
}

void
dfl_device_unref (DflDevice *dev)
{
  if (!dev || !g_atomic_int_dec_and_test (&dev->refcount))
    return;
  if (dev->backend->ops->fini)
    dev->backend->ops->fini (dev, dev->state);
  dev->backend->close (dev->native);
  g_free (dev->description);
  g_free (dev);
}

DflBackendId
dfl_device_backend (const DflDevice *dev)
{
  return dev->id;
}

const char *
dfl_device_describe (const DflDevice *dev)
{
  return dev->description;
}

gpointer
dfl_device_native (const DflDevice *dev)
{
  return dev->native;
}

gpointer
dfl_device_alloc (DflDevice *dev, gsize bytes, GError **error)
{
  return dev->backend->alloc (dev->native, bytes, error);
}

void
dfl_device_free (DflDevice *dev, gpointer handle)
{
  if (handle)
    dev->backend->free (dev->native, handle);
}

gboolean
dfl_device_upload (DflDevice *dev, gpointer handle, gsize offset, const void *src, gsize bytes,
                   GError **error)
{
  if (dev->backend->ops->flush && !dev->backend->ops->flush (dev, error))
    return FALSE;
  return dev->backend->upload (dev->native, handle, offset, src, bytes, error);
}

gboolean
dfl_device_download (DflDevice *dev, gpointer handle, gsize offset, void *dst, gsize bytes,
                     GError **error)
{
  if (dev->backend->ops->flush && !dev->backend->ops->flush (dev, error))
    return FALSE;
  return dev->backend->download (dev->native, handle, offset, dst, bytes, error);
}
