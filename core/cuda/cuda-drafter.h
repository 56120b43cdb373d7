/* gst-dflash — the DFlash drafter on a CUDA device (the core's: the layers
 * above reach it through drafter.h; benches and tests of the card include
 * this for what only the card has).
 *
 * The math and the bookkeeping are every back end's (drafter.h,
 * draft-context.c, DESIGN.md "The math"). A round keeps everything on the
 * device: the target's taps go in as device rows, the block's rows and
 * logits stay in a device buffer, and only token ids and positions cross
 * the bus.
 *
 * The block is captured once as a CUDA graph and replayed: every value that
 * changes from round to round (the anchor's position and id, the key ranges
 * of each row, the context rows a windowed layer reads) lives in device
 * memory the kernels read. A graph is captured again when a context buffer
 * is reallocated or the width changes; it writes the drafter's own buffer,
 * copied to the caller's after each replay, so any output buffer will do.
 *
 * Threads: the contexts of one drafter share its scratch; the drafter
 * serialises their calls itself (its own lock), and holds the device
 * (dfl_cuda_device_lock) from where it enqueues to where it reads back.
 */
#pragma once

#include <glib.h>
#include "drafter.h"
#include "dfl-cuda.h"

G_BEGIN_DECLS

/* Upload host weights `w` to `device` (a CUDA device), reading `trunk` (the
 * target's embedding and head on that device, borrowed: they must outlive
 * the result). Matrices: with `weights_as` DFL_DTYPE_F32 all as F32 (F32
 * products: parity with the CPU); with F16 or BF16 each F16 or BF16 matrix
 * as stored (multiplied on the tensor cores) and each F32 one converted to
 * `weights_as`. Vectors F32, codebooks F16. drafter-engines.c checked the
 * trunk. */
DflDrafterWeights *dfl_cuda_drafter_bind (DflDrafterWeights *w, DflDevice *device,
                                          const DflDraftTrunk *trunk, DflDtype weights_as,
                                          GError **error);
/* Weights of geometry `g` made on the card (uniform, scaled by
 * 1/sqrt(fan-in); norm weights one; convolution base kernels a sane
 * identity-like start), bound to `trunk` (checked as above), for benches:
 * no file, no host copy. */
DflDrafterWeights *dfl_cuda_drafter_new_random (DflDevice *device, const DflDrafterGeometry *g,
                                                gboolean conv, gboolean selector,
                                                DflDtype weights_as, const DflDraftTrunk *trunk,
                                                guint64 seed, GError **error);
/* Whether blocks of weights bound on CUDA replay a captured graph (default
 * TRUE) or launch their kernels one by one (the same work; tests compare
 * the two). */
void dfl_cuda_drafter_set_use_graph (DflDrafterWeights *bound, gboolean use_graph);

/* Upload a CPU target's embedding and head (F32, or converted to `as` on the
 * card) for tests, benches and CPU-target pipelines: the trunk's tensors
 * point into one allocation returned in `*d_mem` (free with
 * dfl_device_free); a tied head is the embedding. */
gboolean dfl_cuda_upload_target_trunk (DflDevice *device, const DflSafetensors *target,
                                       gboolean tied, int vocab, int hidden, DflDtype as,
                                       DflDraftTrunk *trunk, void **d_mem, GError **error);

G_END_DECLS
