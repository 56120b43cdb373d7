/* gst-dflash — the Qwen3 target on a CUDA device: the engine behind
 * target.h for backend=cuda (target-engines.c hands it out).
 *
 * The same model as the CPU's, run by the kernels of kernels/cuda: the
 * weights live on the card (as the checkpoint stores them, or widened to
 * F32 for exact parity tests), each sequence's KV cache too. A forward pass
 * uploads only its token ids (with the positions the kernels read on the
 * device) and brings back only what the caller asks for on the host: each
 * logits row's argmax (the greedy verifier's only traffic), the logits, the
 * final-normed rows. Taps stay on the card (device_taps), logits may too,
 * for a drafter on the same device.
 *
 * Decode and verify steps replay a captured CUDA graph of the pass; longer
 * inputs go through in chunks. Everything runs on the device's one stream;
 * a target may serve several sequences, one forward at a time (forwards are
 * serialised by the target).
 */
#pragma once

#include "target-private.h"

G_BEGIN_DECLS

extern const DflTargetEngine dfl_cuda_target_engine;

G_END_DECLS
