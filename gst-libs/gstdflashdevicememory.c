/* gst-dflash — tensors that stay on a GPU between elements. */
#include "gstdflashdevicememory.h"

#include <string.h>

#include "dfl-error.h"

GST_DEBUG_CATEGORY_STATIC (gst_dflash_device_memory_debug);
#define GST_CAT_DEFAULT gst_dflash_device_memory_debug

typedef struct {
  GstMemory mem;
  gpointer handle;      /* shared with the memories shared from this one */
  gpointer staging;     /* the host copy while mapped */
  GstMapFlags map_flags;
} GstDflashDeviceMemory;

struct _GstDflashDeviceAllocator {
  GstAllocator parent;
  DflDevice *device;
  const char *caps_feature;  /* GST_DFLASH_CAPS_FEATURE_* */
};

G_DEFINE_TYPE (GstDflashDeviceAllocator, gst_dflash_device_allocator, GST_TYPE_ALLOCATOR);

static GstDflashDeviceMemory *
wrap (GstDflashDeviceAllocator *self, GstMemory *parent, gpointer handle, gsize maxsize,
      gsize offset, gsize size)
{
  GstDflashDeviceMemory *m = g_new0 (GstDflashDeviceMemory, 1);

  gst_memory_init (GST_MEMORY_CAST (m), 0, GST_ALLOCATOR_CAST (self), parent, maxsize, 0,
                   offset, size);
  m->handle = handle;
  return m;
}

static GstMemory *
device_alloc (GstAllocator *allocator, gsize size, GstAllocationParams *params)
{
  g_autoptr (GError) error = NULL;
  GstMemory *mem = gst_dflash_device_allocator_alloc_checked (allocator, size, &error);

  if (!mem)
    GST_ERROR_OBJECT (allocator, "%s", error->message);
  return mem;
}

static void
device_free (GstAllocator *allocator, GstMemory *mem)
{
  GstDflashDeviceAllocator *self = GST_DFLASH_DEVICE_ALLOCATOR (allocator);
  GstDflashDeviceMemory *m = (GstDflashDeviceMemory *) mem;

  /* a shared memory does not own the allocation: its parent does */
  if (!mem->parent)
    dfl_device_free (self->device, m->handle);
  g_free (m->staging);
  g_free (m);
}

static gpointer
device_map (GstMemory *mem, gsize maxsize, GstMapFlags flags)
{
  GstDflashDeviceAllocator *self = GST_DFLASH_DEVICE_ALLOCATOR (mem->allocator);
  GstDflashDeviceMemory *m = (GstDflashDeviceMemory *) mem;
  g_autoptr (GError) error = NULL;

  /* GstMemory allows one kind of map at a time (its lock), so one staging
   * copy serves; readers may map at once, so the first to come makes it */
  if (!g_atomic_pointer_get (&m->staging)) {
    gpointer staging = g_malloc (MAX (maxsize, 1));
    if (!g_atomic_pointer_compare_and_exchange (&m->staging, NULL, staging))
      g_free (staging);
  }
  if ((flags & GST_MAP_READ)
      && !dfl_device_download (self->device, m->handle, 0, m->staging, maxsize, &error)) {
    GST_ERROR_OBJECT (self, "mapping %s memory for reading: %s", mem->allocator->mem_type,
                      error->message);
    return NULL;
  }
  m->map_flags = flags;
  return m->staging;
}

static void
device_unmap (GstMemory *mem)
{
  GstDflashDeviceAllocator *self = GST_DFLASH_DEVICE_ALLOCATOR (mem->allocator);
  GstDflashDeviceMemory *m = (GstDflashDeviceMemory *) mem;
  g_autoptr (GError) error = NULL;

  if ((m->map_flags & GST_MAP_WRITE)
      && !dfl_device_upload (self->device, m->handle, 0, m->staging, mem->maxsize, &error))
    GST_ERROR_OBJECT (self, "writing back mapped %s memory: %s", mem->allocator->mem_type,
                      error->message);
}

static GstMemory *
device_share (GstMemory *mem, gssize offset, gssize size)
{
  GstDflashDeviceAllocator *self = GST_DFLASH_DEVICE_ALLOCATOR (mem->allocator);
  GstDflashDeviceMemory *m = (GstDflashDeviceMemory *) mem;
  GstMemory *parent = mem->parent ? mem->parent : mem;

  if (size == -1)
    size = mem->size - offset;
  return GST_MEMORY_CAST (wrap (self, parent, m->handle, mem->maxsize, mem->offset + offset,
                                size));
}

static void
gst_dflash_device_allocator_finalize (GObject *object)
{
  GstDflashDeviceAllocator *self = GST_DFLASH_DEVICE_ALLOCATOR (object);

  g_clear_pointer (&self->device, dfl_device_unref);
  G_OBJECT_CLASS (gst_dflash_device_allocator_parent_class)->finalize (object);
}

static void
gst_dflash_device_allocator_class_init (GstDflashDeviceAllocatorClass *klass)
{
  GST_ALLOCATOR_CLASS (klass)->alloc = device_alloc;
  GST_ALLOCATOR_CLASS (klass)->free = device_free;
  G_OBJECT_CLASS (klass)->finalize = gst_dflash_device_allocator_finalize;
  GST_DEBUG_CATEGORY_INIT (gst_dflash_device_memory_debug, "dflashdevicememory", 0,
                           "dflash device memory");
}

static void
gst_dflash_device_allocator_init (GstDflashDeviceAllocator *self)
{
  GstAllocator *alloc = GST_ALLOCATOR_CAST (self);

  alloc->mem_map = device_map;
  alloc->mem_unmap = device_unmap;
  alloc->mem_share = device_share;
  /* device memory cannot be copied or spanned by the default helpers */
  GST_OBJECT_FLAG_SET (self, GST_ALLOCATOR_FLAG_CUSTOM_ALLOC);
}

GstAllocator *
gst_dflash_device_allocator_new (DflDevice *device, const char *caps_feature)
{
  GstDflashDeviceAllocator *self;

  g_return_val_if_fail (device != NULL && g_str_has_prefix (caps_feature, "memory:"), NULL);
  self = g_object_new (GST_TYPE_DFLASH_DEVICE_ALLOCATOR, NULL);
  gst_object_ref_sink (self);
  self->device = dfl_device_ref (device);
  self->caps_feature = caps_feature;
  GST_ALLOCATOR_CAST (self)->mem_type = caps_feature + strlen ("memory:");
  return GST_ALLOCATOR_CAST (self);
}

GstMemory *
gst_dflash_device_allocator_alloc_checked (GstAllocator *allocator, gsize size, GError **error)
{
  GstDflashDeviceAllocator *self = GST_DFLASH_DEVICE_ALLOCATOR (allocator);
  gpointer handle = dfl_device_alloc (self->device, MAX (size, 1), error);

  if (!handle)
    return NULL;
  return GST_MEMORY_CAST (wrap (self, NULL, handle, size, 0, size));
}

gboolean
gst_is_dflash_device_memory (GstMemory *mem)
{
  return mem && mem->allocator && GST_IS_DFLASH_DEVICE_ALLOCATOR (mem->allocator);
}

const char *
gst_dflash_device_memory_feature (GstMemory *mem)
{
  g_return_val_if_fail (gst_is_dflash_device_memory (mem), NULL);
  return GST_DFLASH_DEVICE_ALLOCATOR (mem->allocator)->caps_feature;
}

gpointer
gst_dflash_device_memory_handle (GstMemory *mem)
{
  g_return_val_if_fail (gst_is_dflash_device_memory (mem), NULL);
  return ((GstDflashDeviceMemory *) mem)->handle;
}

DflDevice *
gst_dflash_device_memory_device (GstMemory *mem)
{
  g_return_val_if_fail (gst_is_dflash_device_memory (mem), NULL);
  return GST_DFLASH_DEVICE_ALLOCATOR (mem->allocator)->device;
}

GstMemory *
gst_dflash_buffer_device_memory (GstBuffer *buf, const char *feature)
{
  GstMemory *mem;

  if (gst_buffer_n_memory (buf) != 1)
    return NULL;
  mem = gst_buffer_peek_memory (buf, 0);
  if (!gst_is_dflash_device_memory (mem)
      || g_strcmp0 (gst_dflash_device_memory_feature (mem), feature) != 0)
    return NULL;
  return mem;
}

gboolean
gst_dflash_buffer_tensor (GstBuffer *buf, DflDevice *device, GstMapFlags flags, GstMapInfo *map,
                          DflDtype dtype, gint64 rows, gint64 cols, DflTensor *out,
                          GError **error)
{
  DflBackendId id = device ? dfl_device_backend (device) : DFL_BACKEND_CPU;
  gsize bytes = (gsize) (rows * cols) * dfl_dtype_size (dtype);
  GstMemory *mem = NULL;

  memset (map, 0, sizeof *map);
  if (id != DFL_BACKEND_CPU)
    mem = gst_dflash_buffer_device_memory (buf, id == DFL_BACKEND_CUDA
                                           ? GST_DFLASH_CAPS_FEATURE_CUDA
                                           : GST_DFLASH_CAPS_FEATURE_VULKAN);
  if (mem && gst_dflash_device_memory_device (mem) == device
      && gst_memory_get_sizes (mem, NULL, NULL) == bytes) {
    *out = dfl_tensor_2d (device, gst_dflash_device_memory_handle (mem), mem->offset, dtype,
                          rows, cols);
    return TRUE;
  }
  if (gst_buffer_get_size (buf) != bytes || gst_is_dflash_device_memory (
          gst_buffer_peek_memory (buf, 0))) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "a buffer of %" G_GSIZE_FORMAT " bytes%s is not %" G_GINT64_FORMAT " rows of %"
                 G_GINT64_FORMAT " %s values in system memory%s%s", gst_buffer_get_size (buf),
                 mem ? " of another device" : "", rows, cols, dfl_dtype_name (dtype),
                 device ? " or on " : "", device ? dfl_device_describe (device) : "");
    return FALSE;
  }
  if (!gst_buffer_map (buf, map, flags)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_IO, "a buffer of %" G_GSIZE_FORMAT
                 " bytes cannot be mapped", bytes);
    return FALSE;
  }
  *out = dfl_tensor_2d (NULL, map->data, 0, dtype, rows, cols);
  return TRUE;
}
