/* gst-dflash — what the Vulkan tests share: the device (the validation layer
 * on where it is installed; DFL_VK_DEVICE picks another device, DFL_VK_NO_SUBGROUP=1
 * the shared-memory reductions), the TAP skip where there is none, and the
 * check that the layer said nothing. */
#pragma once

#include "dfl-vk.h"
#include "dfl-error.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static DflVkDevice *vk_test_dev;

/* Keep the driver and the validation layer loaded past vkDestroyInstance:
 * the loader unloads them there, and a sanitizer build's leak checker then
 * cannot name the library of what they kept (lsan.supp names Mesa's and the
 * layer's libraries). Only libraries already loaded are held. */
static inline void
vk_test_hold_libraries (void)
{
  static const char *names[] = { "libvulkan_lvp.so", "libVkLayer_khronos_validation.so",
                                 "libLLVM-15.so.1" };

  for (guint i = 0; i < G_N_ELEMENTS (names); i++)
    dlopen (names[i], RTLD_NOW | RTLD_NOLOAD);
}

/* Open the device, or print a TAP plan that skips everything (with the
 * reason) and return FALSE. */
static inline gboolean
vk_test_open (void)
{
  GError *error = NULL;
  const char *index = g_getenv ("DFL_VK_DEVICE");
  DflVkDeviceFlags flags = DFL_VK_DEVICE_VALIDATE;

  if (g_strcmp0 (g_getenv ("DFL_VK_NO_SUBGROUP"), "1") == 0)
    flags |= DFL_VK_DEVICE_NO_SUBGROUP;
  vk_test_dev = dfl_vk_device_open (index ? atoi (index) : -1, flags, &error);
  if (!vk_test_dev) {
    g_assert_true (g_error_matches (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED));
    printf ("1..0 # SKIP %s\n", error->message);
    g_error_free (error);
    return FALSE;
  }
  vk_test_hold_libraries ();
  printf ("# device: %s\n", dfl_vk_device_describe (vk_test_dev));
  if (!dfl_vk_device_validating (vk_test_dev))
    printf ("# the Khronos validation layer is not installed: running without it\n");
  return TRUE;
}

/* No validation error so far. */
static inline void
vk_test_assert_clean (void)
{
  char *first = NULL;
  guint n = dfl_vk_device_validation_errors (vk_test_dev, &first);

  if (n)
    g_error ("the validation layer reported %u errors; the first: %s", n, first);
  g_free (first);
}

/* max |a − b| / max |b| over n values (0 when b is all zeros and a = b) */
static inline double
vk_test_rel (const float *a, const double *b, gsize n)
{
  double top = 0.0, err = 0.0;

  for (gsize i = 0; i < n; i++) {
    top = MAX (top, fabs (b[i]));
    err = MAX (err, fabs ((double) a[i] - b[i]));
  }
  return top > 0.0 ? err / top : err;
}
