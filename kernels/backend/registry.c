/* gst-dflash — the back-end registry: which back ends this build has.
 *
 * The one file of the tree that tests HAVE_CUDA and HAVE_VULKAN: everything
 * above reaches a back end through DflDevice (dfl-backend.h) and asks
 * dfl_backend_built what exists. Each back end — how its devices are
 * opened, how its memory is handled, its table of operations — lives in its
 * own file (ops-*.c), which meson builds where the back end is; this file
 * only lists them.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "backend-private.h"

#ifdef HAVE_CUDA
#define CUDA_BACKEND (&dfl_backend_cuda)
#else
static const DflBackendDeviceOps cuda_not_built = { "cuda", FALSE };
#define CUDA_BACKEND (&cuda_not_built)
#endif
#ifdef HAVE_VULKAN
#define VULKAN_BACKEND (&dfl_backend_vulkan)
#else
static const DflBackendDeviceOps vulkan_not_built = { "vulkan", FALSE };
#define VULKAN_BACKEND (&vulkan_not_built)
#endif

static const DflBackendDeviceOps *const backends[DFL_N_BACKENDS] = {
  [DFL_BACKEND_CPU] = &dfl_backend_cpu,
  [DFL_BACKEND_CUDA] = CUDA_BACKEND,
  [DFL_BACKEND_VULKAN] = VULKAN_BACKEND,
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
