/* gst-dflash — the DFlash drafter on a Vulkan device (the core's, not for
 * elements: they reach it through drafter.h).
 *
 * The same drafter as on the CPU, its weights uploaded once, its context
 * (per-layer keys and values) kept on the device, and its block, head and
 * selector run as Vulkan compute (kernels/vulkan). The target stays on
 * the CPU: it hands context rows (taps) in host memory, and the block's
 * rows are embedded with the target's table and scored with its head, both
 * uploaded as the checkpoint stores them (F32, F16 or BF16).
 *
 * Weights: matrices as stored (16-bit ones stay 16-bit on the device),
 * vectors F32, codebooks F16; products accumulate in F32. The bookkeeping
 * of a context is draft-context.c's, as every back end's, so a context fed
 * the same calls holds the same positions and refuses the same blocks.
 *
 * Threads: the bound weights are read-only once made and may serve several
 * contexts; each context (one sequence) is used by one thread at a time.
 * Every call that runs on the device waits for it before returning.
 */
#pragma once

#include <glib.h>

#include "dfl-vk.h"
#include "drafter.h"

G_BEGIN_DECLS

/* Upload `w`'s weights (host weights) and the trunk (host memory: the
 * embedding table and the LM head, uploaded once where tied) to
 * `device`'s Vulkan device (drafter-engines.c checked the trunk's shape).
 * Errors: DFL_ERROR_UNSUPPORTED where the geometry is past what the
 * kernels take (head_dim > 256, selector_top > 256), and the device's
 * errors (no room). */
DflDrafterWeights *dfl_vk_drafter_bind (DflDrafterWeights *w, DflDevice *device,
                                        const DflDraftTrunk *trunk, GError **error);

G_END_DECLS
