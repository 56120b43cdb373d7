/* gst-dflash — the Qwen3 target on a CUDA device: the engine behind
 * target.h for backend=cuda (target-engines.c hands it out).
 *
 * The same model as the CPU's, through the same forward (target-forward.c):
 * the weights live on the card (as the checkpoint stores them, or widened
 * to F32 for exact parity tests), each sequence's KV cache too. A forward
 * uploads only its index tensors (ids, positions, key ranges) and brings
 * back only what the caller asks for on the host: each logits row's argmax
 * (the greedy verifier's only traffic), the logits, the final-normed rows.
 * Taps stay on the card (device_taps), logits may too, for a drafter on the
 * same device.
 *
 * Decode and verify steps replay a captured CUDA graph of the pass; longer
 * inputs go through in passes of chunk_rows rows; several sequences' rows
 * go in one pass (dfl_target_forward_batch). Everything runs on the
 * device's one stream.
 */
#pragma once

#include "target-private.h"

G_BEGIN_DECLS

extern const DflTargetEngine dfl_cuda_target_engine;

G_END_DECLS
