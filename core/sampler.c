/* gst-dflash — greedy and counter-based sampling of a position's token. */
#include "sampler.h"

#include <math.h>
#include <stdlib.h>

#include "dfl-kernels.h"

static inline guint64
splitmix64 (guint64 x)
{
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

double
dfl_sampler_uniform (guint64 seed, gint64 position)
{
  guint64 r = splitmix64 (splitmix64 (seed) ^ (guint64) position);
  /* the top 53 bits: every double in [0, 1) on a 2^-53 grid */
  return (r >> 11) * (1.0 / 9007199254740992.0);
}

typedef struct {
  float p;
  int id;
} Cand;

static int
by_prob_then_id (const void *a, const void *b)
{
  const Cand *x = a, *y = b;

  if (x->p != y->p)
    return x->p > y->p ? -1 : 1;
  return x->id - y->id;
}

int
dfl_sampler_pick (const DflSampler *s, const float *logits, int n, gint64 position)
{
  float top, inv_t;
  double sum = 0, keep = 0, u, acc = 0;
  Cand *c;
  int kept, pick;

  if (s->temperature <= 0.0f)
    return dfl_argmax (logits, n);

  c = g_new (Cand, n);
  top = logits[dfl_argmax (logits, n)];
  inv_t = 1.0f / s->temperature;
  for (int i = 0; i < n; i++) {
    c[i].p = expf ((logits[i] - top) * inv_t);
    c[i].id = i;
    sum += c[i].p;
  }
  /* a fixed order (probability, then id) makes the nucleus and the walk
   * below depend on the logits alone */
  qsort (c, n, sizeof (Cand), by_prob_then_id);
  kept = n;
  if (s->top_p > 0.0f && s->top_p < 1.0f) {
    for (int i = 0; i < n; i++) {
      keep += c[i].p / sum;
      if (keep >= s->top_p) {
        kept = i + 1;
        break;
      }
    }
  }
  keep = 0;
  for (int i = 0; i < kept; i++)
    keep += c[i].p;
  u = dfl_sampler_uniform (s->seed, position) * keep;
  pick = c[kept - 1].id;
  for (int i = 0; i < kept; i++) {
    acc += c[i].p;
    if (u < acc) {
      pick = c[i].id;
      break;
    }
  }
  g_free (c);
  return pick;
}
