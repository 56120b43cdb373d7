/* gst-dflash — the Vulkan device: instance (with the validation layer when
 * asked), one compute queue, buffers reached by device address, streams
 * (a command buffer and a fence each), the kernels' pipelines (built on
 * first use) and the host copies through a staging buffer.
 */
#include "vk-private.h"
#include "dfl-error.h"

#include <string.h>

#define STAGING_BYTES ((gsize) 16 << 20)

struct _DflVkDevice {
  gint ref;
  VkInstance instance;
  VkDebugUtilsMessengerEXT messenger;
  VkPhysicalDevice phys;
  VkDevice device;
  VkQueue queue;
  guint32 family;
  VkPhysicalDeviceMemoryProperties mem;
  VkDeviceSize max_alloc;
  char *description;
  gboolean subgroups, validating;
  guint32 subgroup_size;

  GMutex lock;                 /* the queue and the pipelines */
  VkPipelineLayout layout;
  VkPipeline pipelines[DFL_VK_N_KERNELS];

  GMutex val_lock;             /* what the validation layer said */
  guint val_errors;
  char *val_first;

  GMutex xfer_lock;            /* the host copies: their stream and staging */
  DflVkStream *xfer;
  DflVkBuffer *staging;
};

struct _DflVkBuffer {
  DflVkDevice *dev;
  VkBuffer buffer;
  VkDeviceMemory memory;
  gsize size;
  VkDeviceAddress addr;
  DflVkMemory kind;
  void *map;
};

struct _DflVkStream {
  DflVkDevice *dev;
  VkCommandPool pool;
  VkCommandBuffer cmd;
  VkFence fence;
  gboolean recording;
  GError *error;
};

static const char *
result_name (VkResult r)
{
  switch (r) {
  case VK_SUCCESS: return "VK_SUCCESS";
  case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
  case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
  case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
  case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
  case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
  case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
  case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
  case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
  case VK_ERROR_TOO_MANY_OBJECTS: return "VK_ERROR_TOO_MANY_OBJECTS";
  case VK_ERROR_INVALID_SHADER_NV: return "VK_ERROR_INVALID_SHADER_NV";
  case VK_TIMEOUT: return "VK_TIMEOUT";
  default: return "a VkResult error";
  }
}

static void
set_vk_error (GError **error, int code, VkResult r, const char *what)
{
  g_set_error (error, DFL_ERROR, code, "Vulkan: %s failed: %s (%d)", what, result_name (r), r);
}

/* --- validation messages --- */

static VkBool32 VKAPI_PTR
on_message (VkDebugUtilsMessageSeverityFlagBitsEXT severity, VkDebugUtilsMessageTypeFlagsEXT type,
            const VkDebugUtilsMessengerCallbackDataEXT *data, void *user)
{
  DflVkDevice *dev = user;
  const char *text = data && data->pMessage ? data->pMessage : "(no message)";

  const char *who = (type & VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT) ? "validation"
                                                                           : "loader";

  if (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) {
    g_mutex_lock (&dev->val_lock);
    if (dev->val_errors++ == 0)
      dev->val_first = g_strdup (text);
    g_mutex_unlock (&dev->val_lock);
    g_printerr ("Vulkan %s error: %s\n", who, text);
  } else {
    g_printerr ("Vulkan %s warning: %s\n", who, text);
  }
  return VK_FALSE;
}

static gboolean
has_layer (const char *name)
{
  guint32 n = 0;
  VkLayerProperties *props;
  gboolean found = FALSE;

  if (vkEnumerateInstanceLayerProperties (&n, NULL) != VK_SUCCESS || n == 0)
    return FALSE;
  props = g_new0 (VkLayerProperties, n);
  if (vkEnumerateInstanceLayerProperties (&n, props) == VK_SUCCESS)
    for (guint32 i = 0; i < n && !found; i++)
      found = strcmp (props[i].layerName, name) == 0;
  g_free (props);
  return found;
}

/* --- opening --- */

static gboolean
unavailable (GError **error, const char *fmt, ...) G_GNUC_PRINTF (2, 3);

static gboolean
unavailable (GError **error, const char *fmt, ...)
{
  va_list ap;
  char *why;

  va_start (ap, fmt);
  why = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED, "Vulkan is unavailable: %s", why);
  g_free (why);
  return FALSE;
}

static gboolean
create_instance (DflVkDevice *dev, DflVkDeviceFlags flags, GError **error)
{
  const char *layer = "VK_LAYER_KHRONOS_validation";
  const char *ext = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
  VkApplicationInfo app = {
    .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
    .pApplicationName = "gst-dflash",
    .apiVersion = VK_API_VERSION_1_2,
  };
  VkDebugUtilsMessengerCreateInfoEXT msg = {
    .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
    .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT
                       | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
    .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT
                   | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT,
    .pfnUserCallback = on_message,
    .pUserData = dev,
  };
  /* synchronization validation too: the barriers between the kernels and
   * the copies are what keeps them in order */
  VkValidationFeatureEnableEXT enables[] = {
    VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT,
  };
  VkValidationFeaturesEXT features = {
    .sType = VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT,
    .pNext = &msg,
    .enabledValidationFeatureCount = G_N_ELEMENTS (enables),
    .pEnabledValidationFeatures = enables,
  };
  VkInstanceCreateInfo info = {
    .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
    .pApplicationInfo = &app,
  };
  guint32 version = 0;
  VkResult r;

  if (vkEnumerateInstanceVersion (&version) != VK_SUCCESS || version < VK_API_VERSION_1_2)
    return unavailable (error, "the Vulkan loader offers version %u.%u, 1.2 is needed",
                        VK_API_VERSION_MAJOR (version), VK_API_VERSION_MINOR (version));
  dev->validating = (flags & DFL_VK_DEVICE_VALIDATE) && has_layer (layer);
  if (dev->validating) {
    info.enabledLayerCount = 1;
    info.ppEnabledLayerNames = &layer;
    info.enabledExtensionCount = 1;
    info.ppEnabledExtensionNames = &ext;
    /* the messenger also hears instance creation and destruction */
    info.pNext = &features;
  }
  r = vkCreateInstance (&info, NULL, &dev->instance);
  if (r != VK_SUCCESS) {
    dev->instance = VK_NULL_HANDLE;
    if (r == VK_ERROR_INCOMPATIBLE_DRIVER)
      return unavailable (error, "no Vulkan driver is installed, or none offers Vulkan 1.2"
                          " (vkCreateInstance: %s)", result_name (r));
    return unavailable (error, "vkCreateInstance failed: %s (%d)", result_name (r), r);
  }
  if (dev->validating) {
    PFN_vkCreateDebugUtilsMessengerEXT create = (PFN_vkCreateDebugUtilsMessengerEXT)
      vkGetInstanceProcAddr (dev->instance, "vkCreateDebugUtilsMessengerEXT");
    if (!create || create (dev->instance, &msg, NULL, &dev->messenger) != VK_SUCCESS) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_IO,
                   "Vulkan: the validation layer is there but its debug messenger"
                   " could not be made");
      return FALSE;
    }
  }
  return TRUE;
}

/* Whether `phys` can run the kernels; if not, why (for the error). */
static gboolean
qualifies (VkPhysicalDevice phys, guint32 *family, char **why)
{
  VkPhysicalDeviceProperties props;
  VkPhysicalDeviceVulkan12Features f12 = {
    .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
  };
  VkPhysicalDeviceFeatures2 f = {
    .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
    .pNext = &f12,
  };
  guint32 n = 0;
  VkQueueFamilyProperties *q;
  gboolean found = FALSE;

  vkGetPhysicalDeviceProperties (phys, &props);
  if (props.apiVersion < VK_API_VERSION_1_2) {
    *why = g_strdup_printf ("%s offers Vulkan %u.%u, 1.2 is needed", props.deviceName,
                            VK_API_VERSION_MAJOR (props.apiVersion),
                            VK_API_VERSION_MINOR (props.apiVersion));
    return FALSE;
  }
  vkGetPhysicalDeviceFeatures2 (phys, &f);
  if (!f12.bufferDeviceAddress) {
    *why = g_strdup_printf ("%s has no buffer device address", props.deviceName);
    return FALSE;
  }
  if (props.limits.maxPushConstantsSize < DFL_VK_PUSH_BYTES
      || props.limits.maxComputeSharedMemorySize < 16384) {
    *why = g_strdup_printf ("%s offers %u bytes of push constants and %u of shared memory",
                            props.deviceName, props.limits.maxPushConstantsSize,
                            props.limits.maxComputeSharedMemorySize);
    return FALSE;
  }
  vkGetPhysicalDeviceQueueFamilyProperties (phys, &n, NULL);
  q = g_new0 (VkQueueFamilyProperties, MAX (n, 1));
  vkGetPhysicalDeviceQueueFamilyProperties (phys, &n, q);
  for (guint32 i = 0; i < n && !found; i++) {
    if (q[i].queueFlags & VK_QUEUE_COMPUTE_BIT) {
      *family = i;
      found = TRUE;
    }
  }
  g_free (q);
  if (!found)
    *why = g_strdup_printf ("%s has no compute queue", props.deviceName);
  return found;
}

static gboolean
pick_device (DflVkDevice *dev, int index, GError **error)
{
  guint32 n = 0;
  VkPhysicalDevice *all;
  char *why = NULL;
  gboolean ok = FALSE;

  if (vkEnumeratePhysicalDevices (dev->instance, &n, NULL) != VK_SUCCESS || n == 0)
    return unavailable (error, "no Vulkan device is present");
  all = g_new0 (VkPhysicalDevice, n);
  vkEnumeratePhysicalDevices (dev->instance, &n, all);
  if (index >= 0) {
    if ((guint32) index >= n)
      unavailable (error, "device %d asked for, %u present", index, n);
    else if (!(ok = qualifies (all[index], &dev->family, &why)))
      unavailable (error, "%s", why);
    else
      dev->phys = all[index];
  } else {
    /* the first discrete GPU that qualifies, else the first that does */
    for (int pass = 0; pass < 2 && !ok; pass++) {
      for (guint32 i = 0; i < n && !ok; i++) {
        VkPhysicalDeviceProperties props;
        char *no = NULL;
        vkGetPhysicalDeviceProperties (all[i], &props);
        if (pass == 0 && props.deviceType != VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU)
          continue;
        if ((ok = qualifies (all[i], &dev->family, &no)))
          dev->phys = all[i];
        else if (!why)
          why = g_steal_pointer (&no);
        g_free (no);
      }
    }
    if (!ok)
      unavailable (error, "%s", why ? why : "no device qualifies");
  }
  g_free (why);
  g_free (all);
  return ok;
}

static gboolean
create_device (DflVkDevice *dev, DflVkDeviceFlags flags, GError **error)
{
  float priority = 1.0f;
  VkDeviceQueueCreateInfo queue = {
    .sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
    .queueFamilyIndex = dev->family,
    .queueCount = 1,
    .pQueuePriorities = &priority,
  };
  VkPhysicalDeviceVulkan12Features f12 = {
    .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
    .bufferDeviceAddress = VK_TRUE,
  };
  VkDeviceCreateInfo info = {
    .sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
    .pNext = &f12,
    .queueCreateInfoCount = 1,
    .pQueueCreateInfos = &queue,
  };
  VkPhysicalDeviceSubgroupProperties sg = {
    .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES,
  };
  VkPhysicalDeviceMaintenance3Properties m3 = {
    .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES, .pNext = &sg };
  VkPhysicalDeviceProperties2 props = { .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                        .pNext = &m3 };
  VkPushConstantRange push = { VK_SHADER_STAGE_COMPUTE_BIT, 0, DFL_VK_PUSH_BYTES };
  VkPipelineLayoutCreateInfo layout = {
    .sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
    .pushConstantRangeCount = 1,
    .pPushConstantRanges = &push,
  };
  static const char *types[] = { "other", "integrated GPU", "discrete GPU", "virtual GPU", "CPU" };
  VkResult r;

  vkGetPhysicalDeviceProperties2 (dev->phys, &props);
  vkGetPhysicalDeviceMemoryProperties (dev->phys, &dev->mem);
  dev->max_alloc = m3.maxMemoryAllocationSize ? m3.maxMemoryAllocationSize : G_MAXUINT64;
  /* subgroup reductions need arithmetic in compute shaders, and subgroups
   * that tile the kernels' workgroups of 64 */
  dev->subgroups = !(flags & DFL_VK_DEVICE_NO_SUBGROUP)
                   && (sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT)
                   && (sg.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT)
                   && sg.subgroupSize >= 1 && 64 % MIN (sg.subgroupSize, 64) == 0;
  dev->subgroup_size = MIN (sg.subgroupSize, 64);
  dev->description = g_strdup_printf ("%s (%s, Vulkan %u.%u.%u, %s%s)",
                                      props.properties.deviceName,
                                      types[MIN (props.properties.deviceType, 4)],
                                      VK_API_VERSION_MAJOR (props.properties.apiVersion),
                                      VK_API_VERSION_MINOR (props.properties.apiVersion),
                                      VK_API_VERSION_PATCH (props.properties.apiVersion),
                                      dev->subgroups ? "subgroup reductions"
                                                     : "shared-memory reductions",
                                      dev->validating ? ", validation on" : "");
  r = vkCreateDevice (dev->phys, &info, NULL, &dev->device);
  if (r != VK_SUCCESS) {
    dev->device = VK_NULL_HANDLE;
    return unavailable (error, "vkCreateDevice on %s failed: %s (%d)", props.properties.deviceName,
                        result_name (r), r);
  }
  vkGetDeviceQueue (dev->device, dev->family, 0, &dev->queue);
  r = vkCreatePipelineLayout (dev->device, &layout, NULL, &dev->layout);
  if (r != VK_SUCCESS) {
    set_vk_error (error, DFL_ERROR_IO, r, "vkCreatePipelineLayout");
    return FALSE;
  }
  return TRUE;
}

DflVkDevice *
dfl_vk_device_open (int index, DflVkDeviceFlags flags, GError **error)
{
  DflVkDevice *dev = g_new0 (DflVkDevice, 1);

  dev->ref = 1;
  g_mutex_init (&dev->lock);
  g_mutex_init (&dev->val_lock);
  g_mutex_init (&dev->xfer_lock);
  if (!create_instance (dev, flags, error) || !pick_device (dev, index, error)
      || !create_device (dev, flags, error)
      || !(dev->xfer = dfl_vk_stream_new (dev, error))
      || !(dev->staging = dfl_vk_buffer_new (dev, STAGING_BYTES, DFL_VK_MEMORY_HOST, error))) {
    dfl_vk_device_unref (dev);
    return NULL;
  }
  return dev;
}

DflVkDevice *
dfl_vk_device_ref (DflVkDevice *dev)
{
  g_atomic_int_inc (&dev->ref);
  return dev;
}

void
dfl_vk_device_unref (DflVkDevice *dev)
{
  if (!dev || !g_atomic_int_dec_and_test (&dev->ref))
    return;
  g_clear_pointer (&dev->staging, dfl_vk_buffer_free);
  g_clear_pointer (&dev->xfer, dfl_vk_stream_free);
  if (dev->device) {
    vkDeviceWaitIdle (dev->device);
    for (int k = 0; k < DFL_VK_N_KERNELS; k++)
      if (dev->pipelines[k])
        vkDestroyPipeline (dev->device, dev->pipelines[k], NULL);
    if (dev->layout)
      vkDestroyPipelineLayout (dev->device, dev->layout, NULL);
    vkDestroyDevice (dev->device, NULL);
  }
  if (dev->messenger) {
    PFN_vkDestroyDebugUtilsMessengerEXT destroy = (PFN_vkDestroyDebugUtilsMessengerEXT)
      vkGetInstanceProcAddr (dev->instance, "vkDestroyDebugUtilsMessengerEXT");
    if (destroy)
      destroy (dev->instance, dev->messenger, NULL);
  }
  if (dev->instance)
    vkDestroyInstance (dev->instance, NULL);
  g_mutex_clear (&dev->lock);
  g_mutex_clear (&dev->val_lock);
  g_mutex_clear (&dev->xfer_lock);
  g_free (dev->val_first);
  g_free (dev->description);
  g_free (dev);
}

const char *
dfl_vk_device_describe (DflVkDevice *dev)
{
  return dev->description;
}

gboolean
dfl_vk_device_uses_subgroups (DflVkDevice *dev)
{
  return dev->subgroups;
}

guint
dfl_vk_outputs_per_group (DflVkDevice *dev)
{
  return dev->subgroups ? 64 / dev->subgroup_size : 1;
}

gboolean
dfl_vk_device_validating (DflVkDevice *dev)
{
  return dev->validating;
}

guint
dfl_vk_device_validation_errors (DflVkDevice *dev, char **first)
{
  guint n;

  g_mutex_lock (&dev->val_lock);
  n = dev->val_errors;
  if (first)
    *first = g_strdup (dev->val_first);
  g_mutex_unlock (&dev->val_lock);
  return n;
}

VkInstance
dfl_vk_device_instance (DflVkDevice *dev)
{
  return dev->instance;
}

VkPhysicalDevice
dfl_vk_device_physical (DflVkDevice *dev)
{
  return dev->phys;
}

VkDevice
dfl_vk_device_handle (DflVkDevice *dev)
{
  return dev->device;
}

VkQueue
dfl_vk_device_queue (DflVkDevice *dev, guint32 *family)
{
  if (family)
    *family = dev->family;
  return dev->queue;
}

/* --- buffers --- */

static int
memory_type (DflVkDevice *dev, guint32 allowed, VkMemoryPropertyFlags need,
             VkMemoryPropertyFlags prefer)
{
  int fallback = -1;

  for (guint32 i = 0; i < dev->mem.memoryTypeCount; i++) {
    VkMemoryPropertyFlags f = dev->mem.memoryTypes[i].propertyFlags;
    if (!(allowed & (1u << i)) || (f & need) != need)
      continue;
    if ((f & prefer) == prefer)
      return (int) i;
    if (fallback < 0)
      fallback = (int) i;
  }
  return fallback;
}

DflVkBuffer *
dfl_vk_buffer_new (DflVkDevice *dev, gsize bytes, DflVkMemory kind, GError **error)
{
  DflVkBuffer *buf;
  VkBufferCreateInfo info = {
    .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
    .size = bytes,
    .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT
             | VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT,
    .sharingMode = VK_SHARING_MODE_EXCLUSIVE,
  };
  VkMemoryAllocateFlagsInfo flags = {
    .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO,
    .flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT,
  };
  VkMemoryAllocateInfo alloc = { .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .pNext = &flags };
  VkBufferDeviceAddressInfo addr = { .sType = VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO };
  VkMemoryRequirements req;
  int type;
  VkResult r;

  g_return_val_if_fail (bytes > 0, NULL);
  if (bytes > dev->max_alloc) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT,
                 "Vulkan: a buffer of %" G_GSIZE_FORMAT " bytes is past the largest allocation"
                 " %s allows (%" G_GUINT64_FORMAT " bytes)", bytes, dev->description,
                 (guint64) dev->max_alloc);
    return NULL;
  }
  buf = g_new0 (DflVkBuffer, 1);
  buf->dev = dev;
  buf->size = bytes;
  buf->kind = kind;
  r = vkCreateBuffer (dev->device, &info, NULL, &buf->buffer);
  if (r != VK_SUCCESS) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT,
                 "Vulkan: a buffer of %" G_GSIZE_FORMAT " bytes could not be made on %s: %s",
                 bytes, dev->description, result_name (r));
    g_free (buf);
    return NULL;
  }
  vkGetBufferMemoryRequirements (dev->device, buf->buffer, &req);
  if (kind == DFL_VK_MEMORY_HOST)
    type = memory_type (dev, req.memoryTypeBits,
                        VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
                        VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
  else
    type = memory_type (dev, req.memoryTypeBits, 0, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
  alloc.allocationSize = req.size;
  alloc.memoryTypeIndex = (guint32) MAX (type, 0);
  r = type < 0 ? VK_ERROR_OUT_OF_DEVICE_MEMORY
               : vkAllocateMemory (dev->device, &alloc, NULL, &buf->memory);
  if (r == VK_SUCCESS)
    r = vkBindBufferMemory (dev->device, buf->buffer, buf->memory, 0);
  if (r == VK_SUCCESS && kind == DFL_VK_MEMORY_HOST)
    r = vkMapMemory (dev->device, buf->memory, 0, VK_WHOLE_SIZE, 0, &buf->map);
  if (r != VK_SUCCESS) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT,
                 "Vulkan: no room for a %s buffer of %" G_GSIZE_FORMAT " bytes on %s: %s",
                 kind == DFL_VK_MEMORY_HOST ? "host" : "device", bytes, dev->description,
                 type < 0 ? "no memory type fits" : result_name (r));
    dfl_vk_buffer_free (buf);
    return NULL;
  }
  addr.buffer = buf->buffer;
  buf->addr = vkGetBufferDeviceAddress (dev->device, &addr);
  return buf;
}

void
dfl_vk_buffer_free (DflVkBuffer *buf)
{
  if (!buf)
    return;
  if (buf->map)
    vkUnmapMemory (buf->dev->device, buf->memory);
  if (buf->buffer)
    vkDestroyBuffer (buf->dev->device, buf->buffer, NULL);
  if (buf->memory)
    vkFreeMemory (buf->dev->device, buf->memory, NULL);
  g_free (buf);
}

gsize
dfl_vk_buffer_size (const DflVkBuffer *buf)
{
  return buf->size;
}

VkBuffer
dfl_vk_buffer_handle (const DflVkBuffer *buf)
{
  return buf->buffer;
}

VkDeviceAddress
dfl_vk_buffer_address (const DflVkBuffer *buf)
{
  return buf->addr;
}

DflVkMemory
dfl_vk_buffer_memory (const DflVkBuffer *buf)
{
  return buf->kind;
}

void *
dfl_vk_buffer_map (const DflVkBuffer *buf)
{
  return buf->map;
}

/* --- streams --- */

DflVkStream *
dfl_vk_stream_new (DflVkDevice *dev, GError **error)
{
  DflVkStream *s = g_new0 (DflVkStream, 1);
  VkCommandPoolCreateInfo pool = {
    .sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
    .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
    .queueFamilyIndex = dev->family,
  };
  VkCommandBufferAllocateInfo cmd = {
    .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
    .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
    .commandBufferCount = 1,
  };
  VkFenceCreateInfo fence = { .sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO };
  VkResult r;

  s->dev = dev;
  r = vkCreateCommandPool (dev->device, &pool, NULL, &s->pool);
  if (r == VK_SUCCESS) {
    cmd.commandPool = s->pool;
    r = vkAllocateCommandBuffers (dev->device, &cmd, &s->cmd);
  }
  if (r == VK_SUCCESS)
    r = vkCreateFence (dev->device, &fence, NULL, &s->fence);
  if (r != VK_SUCCESS) {
    set_vk_error (error, DFL_ERROR_IO, r, "making a command buffer");
    dfl_vk_stream_free (s);
    return NULL;
  }
  return s;
}

void
dfl_vk_stream_free (DflVkStream *s)
{
  if (!s)
    return;
  if (s->recording)
    vkEndCommandBuffer (s->cmd);
  if (s->fence)
    vkDestroyFence (s->dev->device, s->fence, NULL);
  if (s->pool)
    vkDestroyCommandPool (s->dev->device, s->pool, NULL);
  g_clear_error (&s->error);
  g_free (s);
}

DflVkDevice *
dfl_vk_stream_device (DflVkStream *s)
{
  return s->dev;
}

static gboolean
begin (DflVkStream *s)
{
  VkCommandBufferBeginInfo info = {
    .sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
    .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT,
  };
  VkResult r;

  if (s->recording)
    return TRUE;
  if (s->error)
    return FALSE;
  r = vkBeginCommandBuffer (s->cmd, &info);
  if (r != VK_SUCCESS) {
    set_vk_error (&s->error, DFL_ERROR_IO, r, "vkBeginCommandBuffer");
    return FALSE;
  }
  s->recording = TRUE;
  return TRUE;
}

/* Everything recorded so far happens before what comes next: kernels and
 * copies read what the ones before them wrote. */
static void
barrier (DflVkStream *s)
{
  VkMemoryBarrier b = {
    .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
    .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
    .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT
                     | VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
  };
  VkPipelineStageFlags stages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT
                                | VK_PIPELINE_STAGE_TRANSFER_BIT;

  vkCmdPipelineBarrier (s->cmd, stages, stages, 0, 1, &b, 0, NULL, 0, NULL);
}

gboolean
dfl_vk_stream_finish (DflVkStream *s, GError **error)
{
  DflVkDevice *dev = s->dev;
  VkSubmitInfo submit = { .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1,
                          .pCommandBuffers = &s->cmd };
  VkResult r;

  if (s->recording) {
    /* what the host reads or writes next sees the kernels' writes */
    VkMemoryBarrier b = {
      .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
      .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
      .dstAccessMask = VK_ACCESS_HOST_READ_BIT | VK_ACCESS_HOST_WRITE_BIT,
    };
    vkCmdPipelineBarrier (s->cmd,
                          VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                          VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &b, 0, NULL, 0, NULL);
    s->recording = FALSE;
    r = vkEndCommandBuffer (s->cmd);
    if (r != VK_SUCCESS && !s->error)
      set_vk_error (&s->error, DFL_ERROR_IO, r, "vkEndCommandBuffer");
    if (!s->error) {
      g_mutex_lock (&dev->lock);
      r = vkQueueSubmit (dev->queue, 1, &submit, s->fence);
      g_mutex_unlock (&dev->lock);
      if (r != VK_SUCCESS)
        set_vk_error (&s->error, DFL_ERROR_IO, r, "vkQueueSubmit");
      else {
        r = vkWaitForFences (dev->device, 1, &s->fence, VK_TRUE, UINT64_MAX);
        if (r != VK_SUCCESS)
          set_vk_error (&s->error, DFL_ERROR_IO, r, "vkWaitForFences");
        vkResetFences (dev->device, 1, &s->fence);
      }
    }
    vkResetCommandBuffer (s->cmd, 0);
  }
  if (s->error) {
    g_propagate_error (error, s->error);
    s->error = NULL;
    return FALSE;
  }
  return TRUE;
}

void
dfl_vk_copy (DflVkStream *s, DflVkBuffer *dst, gsize dst_offset, DflVkBuffer *src,
             gsize src_offset, gsize bytes)
{
  VkBufferCopy region = { src_offset, dst_offset, bytes };

  g_return_if_fail (dst_offset + bytes <= dst->size && src_offset + bytes <= src->size);
  if (bytes == 0 || !begin (s))
    return;
  vkCmdCopyBuffer (s->cmd, src->buffer, dst->buffer, 1, &region);
  barrier (s);
}

/* --- pipelines and dispatches --- */

static VkPipeline
pipeline (DflVkStream *s, DflVkKernel kernel)
{
  DflVkDevice *dev = s->dev;
  const DflVkShader *sh = dfl_vk_shader (kernel);
  VkPipeline p;

  g_mutex_lock (&dev->lock);
  if (!(p = dev->pipelines[kernel])) {
    gboolean sg = dev->subgroups && sh->code_subgroup;
    VkShaderModuleCreateInfo mod = {
      .sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
      .codeSize = sg ? sh->size_subgroup : sh->size,
      .pCode = sg ? sh->code_subgroup : sh->code,
    };
    VkComputePipelineCreateInfo info = {
      .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
      .stage = {
        .sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
        .stage = VK_SHADER_STAGE_COMPUTE_BIT,
        .pName = "main",
      },
      .layout = dev->layout,
    };
    VkResult r = vkCreateShaderModule (dev->device, &mod, NULL, &info.stage.module);
    if (r == VK_SUCCESS) {
      r = vkCreateComputePipelines (dev->device, VK_NULL_HANDLE, 1, &info, NULL, &p);
      vkDestroyShaderModule (dev->device, info.stage.module, NULL);
    }
    if (r == VK_SUCCESS) {
      dev->pipelines[kernel] = p;
    } else {
      p = VK_NULL_HANDLE;
      if (!s->error)
        g_set_error (&s->error, DFL_ERROR, DFL_ERROR_IO,
                     "Vulkan: the %s kernel could not be built on %s: %s (%d)", sh->name,
                     dev->description, result_name (r), r);
    }
  }
  g_mutex_unlock (&dev->lock);
  return p;
}

void
dfl_vk_dispatch (DflVkStream *s, DflVkKernel kernel, const void *push, gsize push_bytes,
                 guint32 gx, guint32 gy, guint32 gz)
{
  VkPipeline p;

  g_return_if_fail (push_bytes <= DFL_VK_PUSH_BYTES && push_bytes % 4 == 0);
  if (gx == 0 || gy == 0 || gz == 0)
    return;
  if (!(p = pipeline (s, kernel)) || !begin (s))
    return;
  vkCmdBindPipeline (s->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, p);
  vkCmdPushConstants (s->cmd, s->dev->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, (guint32) push_bytes,
                      push);
  vkCmdDispatch (s->cmd, gx, gy, gz);
  barrier (s);
}

void
dfl_vk_grid (guint64 groups, guint32 *gx, guint32 *gy)
{
  guint64 x = MIN (groups, 65535);

  *gx = (guint32) x;
  *gy = x ? (guint32) ((groups + x - 1) / x) : 0;
}

/* --- host copies --- */

static gboolean
host_copy (DflVkDevice *dev, DflVkBuffer *buf, gsize offset, void *host, gsize bytes,
           gboolean up, GError **error)
{
  gboolean ok = TRUE;

  if (offset + bytes > buf->size || offset + bytes < offset) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "Vulkan: a copy of %" G_GSIZE_FORMAT " bytes at %" G_GSIZE_FORMAT
                 " passes the end of a buffer of %" G_GSIZE_FORMAT, bytes, offset, buf->size);
    return FALSE;
  }
  if (buf->map) {
    if (up)
      memcpy ((char *) buf->map + offset, host, bytes);
    else
      memcpy (host, (char *) buf->map + offset, bytes);
    return TRUE;
  }
  g_mutex_lock (&dev->xfer_lock);
  for (gsize done = 0; done < bytes && ok; done += STAGING_BYTES) {
    gsize n = MIN (STAGING_BYTES, bytes - done);
    if (up) {
      memcpy (dev->staging->map, (char *) host + done, n);
      dfl_vk_copy (dev->xfer, buf, offset + done, dev->staging, 0, n);
    } else {
      dfl_vk_copy (dev->xfer, dev->staging, 0, buf, offset + done, n);
    }
    ok = dfl_vk_stream_finish (dev->xfer, error);
    if (ok && !up)
      memcpy ((char *) host + done, dev->staging->map, n);
  }
  g_mutex_unlock (&dev->xfer_lock);
  return ok;
}

gboolean
dfl_vk_upload (DflVkDevice *dev, DflVkBuffer *dst, gsize offset, const void *src, gsize bytes,
               GError **error)
{
  return host_copy (dev, dst, offset, (void *) src, bytes, TRUE, error);
}

gboolean
dfl_vk_download (DflVkDevice *dev, void *dst, DflVkBuffer *src, gsize offset, gsize bytes,
                 GError **error)
{
  return host_copy (dev, src, offset, dst, bytes, FALSE, error);
}
