/* gst-dflash — random drafter weights for the drafter's benches (CPU,
 * CUDA): made in host memory, then bound to whichever device a bench
 * drafts on. */
#pragma once

#include "drafter.h"

G_BEGIN_DECLS

/* A uniform value in [−0.5, 0.5) (xorshift64*: fast enough for gigabytes
 * of weights). */
float dfl_bench_rnd (void);

/* Weights of geometry `g` with a convolution and a selector, every one
 * random: matrices of `matrix_dtype` (scaled small), norms near one,
 * codebooks F16. `fc_bytes`, `book_bytes` (either may be NULL): the bytes
 * of FC and of the codebooks, which a block does not stream. */
DflDrafterWeights *dfl_bench_drafter_random (const DflDrafterGeometry *g, DflDtype matrix_dtype,
                                             guint64 *fc_bytes, guint64 *book_bytes,
                                             GError **error);

G_END_DECLS
