/* gst-dflash — the Vulkan kernels' shared insides (vk-device.c keeps the
 * device, buffers, streams and pipelines; vk-kernels.c records dispatches;
 * vk-shaders.c holds the SPIR-V). Not installed. */
#pragma once

#include "dfl-vk.h"

G_BEGIN_DECLS

typedef enum {
  DFL_VK_K_MATMUL,
  DFL_VK_K_RMSNORM,
  DFL_VK_K_ROPE,
  DFL_VK_K_ELEMENTWISE,
  DFL_VK_K_ROW_CONV,
  DFL_VK_K_EMBED,
  DFL_VK_K_ATTENTION,
  DFL_VK_K_TOP_K,
  DFL_VK_K_ARGMAX,
  DFL_VK_K_RESCORE,
  DFL_VK_N_KERNELS
} DflVkKernel;

/* Push constants of every kernel fit in this (the least a device offers). */
#define DFL_VK_PUSH_BYTES 128

typedef struct {
  const char *name;
  const guint32 *code;           /* shared-memory reductions (or no reductions) */
  gsize size;                    /* bytes */
  const guint32 *code_subgroup;  /* subgroup reductions; NULL where the kernel has none */
  gsize size_subgroup;
} DflVkShader;

/* vk-shaders.c */
const DflVkShader *dfl_vk_shader (DflVkKernel kernel);

/* vk-device.c: record one dispatch of `kernel` with its push constants;
 * a pipeline that fails to build is kept as the stream's error and nothing
 * is recorded. */
void dfl_vk_dispatch (DflVkStream *s, DflVkKernel kernel, const void *push, gsize push_bytes,
                      guint32 gx, guint32 gy, guint32 gz);
/* Outputs a matmul workgroup makes: one a subgroup with subgroup
 * reductions (64 / the subgroup size), else one. */
guint dfl_vk_outputs_per_group (DflVkDevice *dev);
/* A 2-D grid of `groups` workgroups (a dimension holds at most 65535; the
 * kernels flatten it back and skip the groups past the end). */
void dfl_vk_grid (guint64 groups, guint32 *gx, guint32 *gy);

G_END_DECLS
