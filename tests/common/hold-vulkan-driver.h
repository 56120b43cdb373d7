/* gst-dflash — tests: keep Mesa's Vulkan driver loaded until the process ends.
 *
 * lavapipe keeps a few allocations that only its own globals point to
 * (Debian 12's Mesa 22.3.6-1+deb12u2: 128 bytes for each device made). The
 * Vulkan loader unloads the driver at vkDestroyInstance, and a sanitizer
 * build's leak checker then finds those allocations unreachable, in a module
 * it can no longer name, and fails the test. Loading the driver once more
 * here keeps it mapped (the loader's dlclose only drops its own reference),
 * so they stay reachable as they are. Nothing of ours is hidden: a leak of
 * our own still shows, and where Mesa is not installed this does nothing.
 * Included by the test programs that open a Vulkan device (through the
 * plugin or the back-end interface; tests/vulkan/vk-test.h holds it its own
 * way). */
#pragma once

#include <dlfcn.h>

__attribute__ ((constructor)) static void
hold_vulkan_driver (void)
{
  dlopen ("libvulkan_lvp.so", RTLD_NOW | RTLD_LOCAL);
}
