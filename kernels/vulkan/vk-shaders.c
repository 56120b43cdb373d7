/* gst-dflash — the kernels' SPIR-V, compiled from shaders/ by glslc at build
 * time (meson.build) and embedded here as arrays of words. */
#include "vk-private.h"

static const guint32 matmul[] =
#include "matmul.spv.inc"
;
static const guint32 matmul_sg[] =
#include "matmul-subgroup.spv.inc"
;
static const guint32 rmsnorm[] =
#include "rmsnorm.spv.inc"
;
static const guint32 rmsnorm_sg[] =
#include "rmsnorm-subgroup.spv.inc"
;
static const guint32 rope[] =
#include "rope.spv.inc"
;
static const guint32 elementwise[] =
#include "elementwise.spv.inc"
;
static const guint32 row_conv[] =
#include "row_conv.spv.inc"
;
static const guint32 embed[] =
#include "embed.spv.inc"
;
static const guint32 attention[] =
#include "attention.spv.inc"
;
static const guint32 attention_sg[] =
#include "attention-subgroup.spv.inc"
;
static const guint32 topk[] =
#include "topk.spv.inc"
;
static const guint32 argmax[] =
#include "argmax.spv.inc"
;
static const guint32 rescore[] =
#include "rescore.spv.inc"
;

#define ONE(k, a) [k] = { #a, a, sizeof a, NULL, 0 }
#define TWO(k, a, b) [k] = { #a, a, sizeof a, b, sizeof b }

static const DflVkShader shaders[DFL_VK_N_KERNELS] = {
  TWO (DFL_VK_K_MATMUL, matmul, matmul_sg),
  TWO (DFL_VK_K_RMSNORM, rmsnorm, rmsnorm_sg),
  ONE (DFL_VK_K_ROPE, rope),
  ONE (DFL_VK_K_ELEMENTWISE, elementwise),
  ONE (DFL_VK_K_ROW_CONV, row_conv),
  ONE (DFL_VK_K_EMBED, embed),
  TWO (DFL_VK_K_ATTENTION, attention, attention_sg),
  ONE (DFL_VK_K_TOP_K, topk),
  ONE (DFL_VK_K_ARGMAX, argmax),
  ONE (DFL_VK_K_RESCORE, rescore),
};

const DflVkShader *
dfl_vk_shader (DflVkKernel kernel)
{
  g_return_val_if_fail (kernel < DFL_VK_N_KERNELS, NULL);
  return &shaders[kernel];
}
