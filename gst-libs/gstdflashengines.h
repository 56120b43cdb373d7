/* gst-dflash — a model's engines on a GPU, owned by the device.
 *
 * The model (gstdflashmodel.h) is what was loaded: the target and the
 * drafter's weights in host memory, immutable. What a pipeline runs on a
 * GPU — the target uploaded to the device, the drafter bound to it there —
 * belongs to the device object: made on first use, once per model and
 * device, shared by every sequence and element (and every pipeline of the
 * process) that runs that model there, and freed with the device. The
 * device holds the models whose engines it keeps; a sequence that runs on
 * a device holds that device (gstdflashseq.h), so the engines outlive the
 * sequences' state on them.
 *
 * The engines take their own locks (the CUDA drafter's contexts share its
 * scratch; core/cuda holds the device around what it enqueues and reads):
 * their callers lock nothing.
 */
#pragma once

#include <gst/gst.h>

#include "drafter.h"
#include "gstdflashdevice.h"
#include "gstdflashmodel.h"
#include "target.h"

G_BEGIN_DECLS

/* The model's target on `dev`: its matrices as `weights` says (target.h:
 * as the checkpoint stores them, a quantized file's dequantized to F32;
 * widened to F32, for parity with the CPU; or rounded to BF16); the first
 * call for a model and device decides (tapsource's gpu-weights is part of
 * the model's key, gst_dflash_model_key, so a model is only ever asked one
 * way). NULL with an error naming the model and the device, or where the
 * back end runs no target. */
const DflTarget *gst_dflash_device_target (GstDflashDevice *dev, GstDflashModel *m,
                                           DflTargetWeights weights, GError **error);
/* The model's drafter bound on `dev`: on CUDA to the model's target there
 * (so gst_dflash_device_target must have made it), its matrices as the
 * target's; on Vulkan to the host target's embedding and head, uploaded
 * with it. NULL with an error naming the drafter and the device. */
DflDrafterWeights *gst_dflash_device_drafter (GstDflashDevice *dev, GstDflashModel *m,
                                              GError **error);

G_END_DECLS
