/* gst-dflash — the GPU the elements of a loop share. */
#include "gstdflashdevice.h"
#include "gstdflashdevicememory.h"

GST_DEBUG_CATEGORY_STATIC (gst_dflash_device_debug);
#define GST_CAT_DEFAULT gst_dflash_device_debug

struct _GstDflashDevice {
  GstObject parent;
  GstDflashBackend backend;
  DflDevice *device;
  GstAllocator *allocator;
};

G_DEFINE_TYPE (GstDflashDevice, gst_dflash_device, GST_TYPE_OBJECT);

static void
gst_dflash_device_finalize (GObject *object)
{
  GstDflashDevice *dev = GST_DFLASH_DEVICE (object);

  /* the allocator holds its own reference to the device */
  if (dev->allocator)
    gst_object_unref (dev->allocator);
  g_clear_pointer (&dev->device, dfl_device_unref);
  G_OBJECT_CLASS (gst_dflash_device_parent_class)->finalize (object);
}

static void
gst_dflash_device_class_init (GstDflashDeviceClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = gst_dflash_device_finalize;
  GST_DEBUG_CATEGORY_INIT (gst_dflash_device_debug, "dflashdevice", 0, "dflash GPU device");
}

static void
gst_dflash_device_init (GstDflashDevice *dev)
{
}

const char *
gst_dflash_backend_nick (GstDflashBackend backend)
{
  GEnumClass *klass = g_type_class_ref (GST_TYPE_DFLASH_BACKEND);
  GEnumValue *v = g_enum_get_value (klass, backend);
  const char *nick = v ? v->value_nick : "?";

  g_type_class_unref (klass);
  return nick;
}

DflBackendId
gst_dflash_backend_id (GstDflashBackend backend)
{
  switch (backend) {
    case GST_DFLASH_BACKEND_CUDA:
      return DFL_BACKEND_CUDA;
    case GST_DFLASH_BACKEND_VULKAN:
      return DFL_BACKEND_VULKAN;
    default:
      return DFL_BACKEND_CPU;
  }
}

const char *
gst_dflash_backend_context_type (GstDflashBackend backend)
{
  switch (backend) {
    case GST_DFLASH_BACKEND_CUDA:
      return GST_DFLASH_CUDA_CONTEXT_TYPE;
    case GST_DFLASH_BACKEND_VULKAN:
      return GST_DFLASH_VULKAN_CONTEXT_TYPE;
    default:
      return NULL;
  }
}

const char *
gst_dflash_backend_caps_feature (GstDflashBackend backend)
{
  switch (backend) {
    case GST_DFLASH_BACKEND_CUDA:
      return GST_DFLASH_CAPS_FEATURE_CUDA;
    case GST_DFLASH_BACKEND_VULKAN:
      return GST_DFLASH_CAPS_FEATURE_VULKAN;
    default:
      return GST_CAPS_FEATURE_MEMORY_SYSTEM_MEMORY;
  }
}

/* One device object per back end in the process, while anything holds it.
 * A pipeline finds its device through its elements' context queries, so
 * two pipelines of one process (`dflash ab`, an application running
 * several) would each open their own; but a model's GPU engines are made
 * on one device's stream and serve every pipeline the model is in. So a
 * second open hands back the device already open. */
static GMutex opened_lock;
static GWeakRef opened[GST_DFLASH_BACKEND_VULKAN + 1];

static GstDflashDevice *device_open (GstDflashBackend backend, GError **error);

GstDflashDevice *
gst_dflash_device_open (GstDflashBackend backend, GError **error)
{
  GstDflashDevice *dev = NULL;

  g_return_val_if_fail (backend <= GST_DFLASH_BACKEND_VULKAN, NULL);
  g_mutex_lock (&opened_lock);
  if (!(dev = g_weak_ref_get (&opened[backend])) && (dev = device_open (backend, error)))
    g_weak_ref_set (&opened[backend], dev);
  g_mutex_unlock (&opened_lock);
  return dev;
}

static GstDflashDevice *
device_open (GstDflashBackend backend, GError **error)
{
  g_autoptr (GstDflashDevice) dev = NULL;
  const char *feature = gst_dflash_backend_caps_feature (backend);

  if (backend != GST_DFLASH_BACKEND_CUDA && backend != GST_DFLASH_BACKEND_VULKAN) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                 "backend=%s has no device of its own (its tensors are system memory)",
                 gst_dflash_backend_nick (backend));
    return NULL;
  }
  dev = g_object_ref_sink (g_object_new (GST_TYPE_DFLASH_DEVICE, NULL));
  dev->backend = backend;
  /* the back end's default device: the first CUDA card; the first discrete
   * Vulkan GPU, else the first Vulkan device (lavapipe on a machine without
   * a GPU) */
  if (!(dev->device = dfl_device_open (gst_dflash_backend_id (backend), -1, error)))
    return NULL;
  dev->allocator = gst_dflash_device_allocator_new (dev->device, feature);
  GST_INFO_OBJECT (dev, "opened %s", dfl_device_describe (dev->device));
  return g_steal_pointer (&dev);
}

GstDflashBackend
gst_dflash_device_backend (GstDflashDevice *dev)
{
  return dev->backend;
}

DflDevice *
gst_dflash_device_dfl (GstDflashDevice *dev)
{
  return dev->device;
}

GstAllocator *
gst_dflash_device_allocator (GstDflashDevice *dev)
{
  return dev->allocator;
}

const char *
gst_dflash_device_caps_feature (GstDflashDevice *dev)
{
  return gst_dflash_backend_caps_feature (dev->backend);
}

const char *
gst_dflash_device_describe (GstDflashDevice *dev)
{
  return dfl_device_describe (dev->device);
}

GstContext *
gst_dflash_device_context_new (GstDflashDevice *dev)
{
  GstContext *context = gst_context_new (gst_dflash_backend_context_type (dev->backend), TRUE);

  gst_structure_set (gst_context_writable_structure (context), "device", GST_TYPE_DFLASH_DEVICE,
                     dev, NULL);
  return context;
}

gboolean
gst_dflash_device_handle_context_query (GstElement *element, GstQuery *query,
                                        GstDflashDevice *dev)
{
  const char *type;
  GstContext *context;

  if (!dev || !gst_query_parse_context_type (query, &type)
      || g_strcmp0 (type, gst_dflash_backend_context_type (dev->backend)))
    return FALSE;
  context = gst_dflash_device_context_new (dev);
  gst_query_set_context (query, context);
  gst_context_unref (context);
  return TRUE;
}

void
gst_dflash_device_handle_set_context (GstElement *element, GstContext *context,
                                      GstDflashBackend backend, GstDflashDevice **slot)
{
  const char *type = gst_dflash_backend_context_type (backend);
  GstDflashDevice *dev = NULL;

  if (!context || !type || g_strcmp0 (gst_context_get_context_type (context), type))
    return;
  if (gst_structure_get (gst_context_get_structure (context), "device", GST_TYPE_DFLASH_DEVICE,
                         &dev, NULL) && dev) {
    GST_OBJECT_LOCK (element);
    if (!*slot)
      *slot = g_steal_pointer (&dev);
    GST_OBJECT_UNLOCK (element);
    g_clear_object (&dev);
  }
}

/* A context query on the peers of the element's pads, `first`'s first. */
static void
query_peers (GstElement *element, GstPad *first, const char *type, GstDflashBackend backend,
             GstDflashDevice **slot)
{
  GList *pads;

  if (first) {
    GstQuery *query = gst_query_new_context (type);
    if (gst_pad_peer_query (first, query)) {
      GstContext *context = NULL;
      gst_query_parse_context (query, &context);
      if (context)
        gst_dflash_device_handle_set_context (element, context, backend, slot);
    }
    gst_query_unref (query);
  }
  GST_OBJECT_LOCK (element);
  pads = g_list_copy (element->pads);
  for (GList *l = pads; l; l = l->next)
    gst_object_ref (l->data);
  GST_OBJECT_UNLOCK (element);
  for (GList *l = pads; l && !*slot; l = l->next) {
    GstQuery *query;
    if (l->data == first)
      continue;
    query = gst_query_new_context (type);
    if (gst_pad_peer_query (l->data, query)) {
      GstContext *context = NULL;
      gst_query_parse_context (query, &context);
      if (context)
        gst_dflash_device_handle_set_context (element, context, backend, slot);
    }
    gst_query_unref (query);
  }
  g_list_free_full (pads, gst_object_unref);
}

gboolean
gst_dflash_device_ensure (GstElement *element, GstPad *pad, GstDflashBackend backend,
                          GstDflashDevice **slot, GError **error)
{
  const char *type = gst_dflash_backend_context_type (backend);
  GstDflashDevice *dev;

  g_return_val_if_fail (type != NULL, FALSE);
  if (*slot)
    return TRUE;
  query_peers (element, pad, type, backend, slot);
  if (*slot)
    return TRUE;
  /* the application, or the bin holding a device another element opened,
   * answers through set_context before this returns */
  gst_element_post_message (element, gst_message_new_need_context (GST_OBJECT (element), type));
  if (*slot)
    return TRUE;
  if (!(dev = gst_dflash_device_open (backend, error))) {
    /* "backend=cuda: CUDA is unavailable: …": the element posting the
     * error is its source, the text need not name it */
    g_prefix_error (error, "backend=%s: ", gst_dflash_backend_nick (backend));
    return FALSE;
  }
  GST_OBJECT_LOCK (element);
  if (!*slot)
    *slot = gst_object_ref (dev);
  GST_OBJECT_UNLOCK (element);
  GST_INFO_OBJECT (element, "opened %s", gst_dflash_device_describe (dev));
  gst_element_post_message (element,
      gst_message_new_have_context (GST_OBJECT (element), gst_dflash_device_context_new (dev)));
  gst_object_unref (dev);
  return TRUE;
}

GstBufferPool *
gst_dflash_device_pool_propose (GstDflashDevice *dev, gsize size)
{
  GstBufferPool *pool = gst_buffer_pool_new ();
  GstStructure *config = gst_buffer_pool_get_config (pool);

  /* the default pool allocates through our allocator; a buffer comes back
   * when its last user lets go, so a round's tensor is reused, not
   * allocated again on the card */
  gst_buffer_pool_config_set_params (config, NULL, size, 0, 0);
  gst_buffer_pool_config_set_allocator (config, dev->allocator, NULL);
  if (!gst_buffer_pool_set_config (pool, config))
    gst_clear_object (&pool);
  return pool;
}

GstBufferPool *
gst_dflash_device_pool_new (GstDflashDevice *dev, gsize size, GError **error)
{
  GstBufferPool *pool = gst_dflash_device_pool_propose (dev, size);

  if (!pool || !gst_buffer_pool_set_active (pool, TRUE)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT,
                 "a pool of %" G_GSIZE_FORMAT "-byte tensors on %s would not start", size,
                 gst_dflash_device_describe (dev));
    gst_clear_object (&pool);
    return NULL;
  }
  return pool;
}

gboolean
gst_dflash_device_pool_fits (GstBufferPool *pool, GstDflashDevice *dev, gsize size)
{
  GstStructure *config = gst_buffer_pool_get_config (pool);
  GstAllocator *allocator = NULL;
  guint pool_size = 0;
  gboolean fits;

  fits = gst_buffer_pool_config_get_params (config, NULL, &pool_size, NULL, NULL)
         && gst_buffer_pool_config_get_allocator (config, &allocator, NULL)
         && allocator == dev->allocator && pool_size == size;
  gst_structure_free (config);
  return fits;
}

GstBuffer *
gst_dflash_device_pool_acquire (GstBufferPool *pool, GstDflashDevice *dev, GError **error)
{
  GstBuffer *buf = NULL;

  if (gst_buffer_pool_acquire_buffer (pool, &buf, NULL) != GST_FLOW_OK || !buf) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT, "no room for a tensor on %s",
                 gst_dflash_device_describe (dev));
    return NULL;
  }
  return buf;
}
