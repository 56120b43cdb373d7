/* gst-dflash — the target's choice of a token at a position.
 *
 * Greedy (temperature 0) is the argmax. Sampling draws from the softmax of
 * logits / temperature, cut to the top-p nucleus, with a uniform number that
 * depends only on (seed, position): a counter-based generator has no state
 * to advance, so a speculative run that verifies a position twice, or a
 * plain run that reaches it once, draws the same number there. With the
 * batch-invariant target the logits at a position are bitwise the same in
 * both, so the sampled text is the same too.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* The settings accepted from a user (tapsource's properties, `dflash
 * generate`): temperature 0 (greedy) to DFL_SAMPLER_MAX_TEMPERATURE, top-p
 * DFL_SAMPLER_MIN_TOP_P to 1. */
#define DFL_SAMPLER_MAX_TEMPERATURE 100.0
#define DFL_SAMPLER_MIN_TOP_P 1e-6

typedef struct {
  float temperature;   /* 0: greedy */
  float top_p;         /* (0, 1]; 1: the whole distribution */
  guint64 seed;
} DflSampler;

/* Uniform in [0, 1) from (seed, position): splitmix64 over both. */
double dfl_sampler_uniform (guint64 seed, gint64 position);
/* The token at `position` from its `n` logits. */
int dfl_sampler_pick (const DflSampler *s, const float *logits, int n, gint64 position);

G_END_DECLS
