/* gst-dflash — what the drafter's tests and benches on a CUDA card need
 * beyond drafter.h: a CPU target's trunk on the card. The drafter is the
 * same on every device (drafter.h); it binds to a CUDA device through
 * dfl_drafter_weights_bind.
 */
#pragma once

#include <glib.h>
#include "drafter.h"
#include "dfl-cuda.h"

G_BEGIN_DECLS

/* Upload a CPU target's embedding and head (F32, or converted to `as` on the
 * card) for tests, benches and CPU-target pipelines: the trunk's tensors
 * point into one allocation returned in `*d_mem` (free with
 * dfl_device_free); a tied head is the embedding. */
gboolean dfl_cuda_upload_target_trunk (DflDevice *device, const DflSafetensors *target,
                                       gboolean tied, int vocab, int hidden, DflDtype as,
                                       DflDraftTrunk *trunk, void **d_mem, GError **error);

G_END_DECLS
