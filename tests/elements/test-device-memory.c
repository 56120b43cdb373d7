/* gst-dflash — GstDflashDevice and its memory, under gst-check.
 *
 * On each GPU back end with a device here (Vulkan runs on Mesa's lavapipe
 * where there is no GPU): bytes written through a map reach the device and
 * come back through another map, a shared sub-memory maps at its offset, a
 * pool hands the same allocation back once it is released, and the device
 * travels through a GstContext. Without a device the open must fail saying
 * the back end is unavailable, and the case says why it does not run.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <gst/check/gstcheck.h>
#include <string.h>

#include "gstdflashdevice.h"
#include "gstdflashdevicememory.h"
#include "../common/hold-vulkan-driver.h"

/* The device of `backend`, or NULL (printing why) where there is none. */
static GstDflashDevice *
open_or_skip (GstDflashBackend backend)
{
  g_autoptr (GError) error = NULL;
  GstDflashDevice *dev = gst_dflash_device_open (backend, &error);

  if (!dev) {
    fail_unless (error != NULL && (strstr (error->message, "is unavailable")
                                   || strstr (error->message, "not available in this build")),
        "opening %s failed, but not because it is unavailable: %s",
        gst_dflash_backend_nick (backend), error ? error->message : "no error");
    g_print ("# skipped %s: %s\n", gst_dflash_backend_nick (backend), error->message);
  }
  return dev;
}

static void
check_round_trip (GstDflashBackend backend)
{
  g_autoptr (GstDflashDevice) dev = open_or_skip (backend);
  g_autoptr (GError) error = NULL;
  GstMemory *mem, *part;
  GstMapInfo map;
  const gsize n = 1000;

  if (!dev)
    return;
  fail_unless_equals_string (gst_dflash_device_caps_feature (dev),
                             gst_dflash_backend_caps_feature (backend));
  mem = gst_dflash_device_allocator_alloc_checked (gst_dflash_device_allocator (dev),
                                                   n * sizeof (float), &error);
  fail_unless (mem != NULL, "%s", error ? error->message : "");
  fail_unless (gst_is_dflash_device_memory (mem));
  fail_unless_equals_string (gst_dflash_device_memory_feature (mem),
                             gst_dflash_backend_caps_feature (backend));
  fail_unless (gst_dflash_device_memory_device (mem) == gst_dflash_device_dfl (dev));

  /* written through a map: uploaded at unmap */
  fail_unless (gst_memory_map (mem, &map, GST_MAP_WRITE));
  for (gsize i = 0; i < n; i++)
    ((float *) map.data)[i] = (float) i * 0.5f;
  gst_memory_unmap (mem, &map);
  /* read through a fresh share (its own host copy): downloaded */
  part = gst_memory_share (mem, 100 * sizeof (float), 10 * sizeof (float));
  fail_unless (gst_is_dflash_device_memory (part));
  fail_unless (gst_dflash_device_memory_handle (part) == gst_dflash_device_memory_handle (mem));
  fail_unless_equals_int (part->offset, 100 * sizeof (float));
  fail_unless (gst_memory_map (part, &map, GST_MAP_READ));
  fail_unless_equals_int (map.size, 10 * sizeof (float));
  for (gsize i = 0; i < 10; i++)
    fail_unless (((float *) map.data)[i] == (float) (100 + i) * 0.5f, "value %zu: %g", i,
                 ((float *) map.data)[i]);
  gst_memory_unmap (part, &map);
  gst_memory_unref (part);
  gst_memory_unref (mem);
}

/* Opening a back end twice in one process gives the same device (a
 * model's GPU engines live on one device, whichever pipeline finds it);
 * once nothing holds it, the next open makes a new one, which works. */
static void
check_shared (GstDflashBackend backend)
{
  GstDflashDevice *first = open_or_skip (backend), *second;

  if (!first)
    return;
  second = gst_dflash_device_open (backend, NULL);
  fail_unless (second == first, "a second open of %s made another device",
               gst_dflash_backend_nick (backend));
  gst_object_unref (second);
  gst_object_unref (first);
  check_round_trip (backend);
}

GST_START_TEST (test_vulkan_shared)
{
  check_shared (GST_DFLASH_BACKEND_VULKAN);
}
GST_END_TEST;

GST_START_TEST (test_cuda_shared)
{
  check_shared (GST_DFLASH_BACKEND_CUDA);
}
GST_END_TEST;

GST_START_TEST (test_vulkan_round_trip)
{
  check_round_trip (GST_DFLASH_BACKEND_VULKAN);
}
GST_END_TEST;

GST_START_TEST (test_cuda_round_trip)
{
  check_round_trip (GST_DFLASH_BACKEND_CUDA);
}
GST_END_TEST;

/* A released buffer comes back from the pool with the same allocation: a
 * round's tensor is not allocated on the card again. */
static void
check_pool (GstDflashBackend backend)
{
  g_autoptr (GstDflashDevice) dev = open_or_skip (backend);
  g_autoptr (GError) error = NULL;
  GstBufferPool *pool;
  GstBuffer *a, *b;
  gpointer handle;

  if (!dev)
    return;
  pool = gst_dflash_device_pool_new (dev, 4096, &error);
  fail_unless (pool != NULL, "%s", error ? error->message : "");
  a = gst_dflash_device_pool_acquire (pool, dev, &error);
  fail_unless (a != NULL, "%s", error ? error->message : "");
  fail_unless_equals_int (gst_buffer_get_size (a), 4096);
  fail_unless (gst_dflash_buffer_device_memory (a, gst_dflash_backend_caps_feature (backend)));
  fail_if (gst_dflash_buffer_device_memory (a, GST_CAPS_FEATURE_MEMORY_SYSTEM_MEMORY));
  handle = gst_dflash_device_memory_handle (gst_buffer_peek_memory (a, 0));
  /* a shorter tensor in it (the accepted rows' taps), then back */
  gst_buffer_resize (a, 0, 1024);
  gst_buffer_unref (a);
  b = gst_dflash_device_pool_acquire (pool, dev, &error);
  fail_unless (b != NULL, "%s", error ? error->message : "");
  fail_unless (gst_dflash_device_memory_handle (gst_buffer_peek_memory (b, 0)) == handle,
               "the pool allocated again instead of reusing its buffer");
  fail_unless_equals_int (gst_buffer_get_size (b), 4096);
  gst_buffer_unref (b);
  gst_buffer_pool_set_active (pool, FALSE);
  gst_object_unref (pool);
}

GST_START_TEST (test_vulkan_pool)
{
  check_pool (GST_DFLASH_BACKEND_VULKAN);
}
GST_END_TEST;

GST_START_TEST (test_cuda_pool)
{
  check_pool (GST_DFLASH_BACKEND_CUDA);
}
GST_END_TEST;

/* The device through a context: an element given it keeps it; a context
 * of the other back end is not taken. */
GST_START_TEST (test_context)
{
  g_autoptr (GstDflashDevice) dev = open_or_skip (GST_DFLASH_BACKEND_VULKAN);
  GstDflashDevice *slot = NULL;
  GstElement *e;
  GstContext *context;
  GstQuery *query;

  if (!dev)
    return;
  e = gst_element_factory_make ("fakesink", NULL);
  context = gst_dflash_device_context_new (dev);
  fail_unless_equals_string (gst_context_get_context_type (context), "dflash.vulkan.device");
  gst_dflash_device_handle_set_context (e, context, GST_DFLASH_BACKEND_CUDA, &slot);
  fail_unless (slot == NULL, "a Vulkan context was taken for CUDA");
  gst_dflash_device_handle_set_context (e, context, GST_DFLASH_BACKEND_VULKAN, &slot);
  fail_unless (slot == dev);
  gst_context_unref (context);

  query = gst_query_new_context ("dflash.cuda.device");
  fail_if (gst_dflash_device_handle_context_query (e, query, slot));
  gst_query_unref (query);
  query = gst_query_new_context ("dflash.vulkan.device");
  fail_unless (gst_dflash_device_handle_context_query (e, query, slot));
  gst_query_unref (query);
  gst_object_unref (slot);
  gst_object_unref (e);
}
GST_END_TEST;

static Suite *
device_memory_suite (void)
{
  Suite *s = suite_create ("dflash-device-memory");
  TCase *tc = tcase_create ("device-memory");

  tcase_set_timeout (tc, 120);
  suite_add_tcase (s, tc);
  tcase_add_test (tc, test_vulkan_round_trip);
  tcase_add_test (tc, test_cuda_round_trip);
  tcase_add_test (tc, test_vulkan_pool);
  tcase_add_test (tc, test_cuda_pool);
  tcase_add_test (tc, test_context);
  tcase_add_test (tc, test_vulkan_shared);
  tcase_add_test (tc, test_cuda_shared);
  return s;
}

GST_CHECK_MAIN (device_memory);
