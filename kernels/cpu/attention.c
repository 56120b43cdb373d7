/* gst-dflash — causal grouped-query attention over a KV cache (CPU).
 *
 * Heads are independent, so they go across OpenMP's threads; within a head
 * the scores of all query rows against the cache are one small product.
 * Each row is computed alone, in an order that depends on nothing but its
 * position, so a row's output is the same whatever rows come with it. */
#include "dfl-kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* q · k over n: 8 lanes over steps of 8 (written out so the compiler makes
 * them one vector: one chain of n additions would wait on each one's
 * latency), the lanes summed as matmul.c sums them, the tail in order. */
static inline float
dot (const float *a, const float *b, int n)
{
  float l[8] = { 0 }, s;
  int i = 0;

  for (; i + 8 <= n; i += 8)
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
      l[j] += a[i + j] * b[i + j];
  s = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
  for (; i < n; i++)
    s += a[i] * b[i];
  return s;
}

/* o[d] += w · v[d]: each element on its own (the same numbers as the plain
 * loop), in blocks of 8 written out so the compiler makes each block one
 * vector operation: o and v never overlap, which it could not know. */
static inline void
axpy (float *restrict o, float w, const float *restrict v, int n)
{
  int d = 0;

  for (; d + 8 <= n; d += 8)
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
      o[d + j] += w * v[d + j];
  for (; d < n; d++)
    o[d] += w * v[d];
}

void
dfl_attention_causal (const float *q, int rows, int heads, int kv_heads, int head_dim,
                      const float *k, const float *v, int pos0, float scale, float *out)
{
  int n = pos0 + rows;              /* cache positions the last row sees */
  int rep = heads / kv_heads;
  size_t kstride = (size_t) kv_heads * head_dim;

#pragma omp parallel for schedule(static) if ((size_t) heads * rows * n > 4096)
  for (int h = 0; h < heads; h++) {
    int g = h / rep;
    float *sc = malloc (sizeof (float) * n);
    for (int r = 0; r < rows; r++) {
      const float *qr = q + ((size_t) r * heads + h) * head_dim;
      float *o = out + ((size_t) r * heads + h) * head_dim;
      int seen = pos0 + r + 1;
      float top = -INFINITY, sum = 0.0f;
      for (int p = 0; p < seen; p++) {
        const float *kp = k + p * kstride + (size_t) g * head_dim;
        float s = dot (qr, kp, head_dim) * scale;
        sc[p] = s;
        if (s > top)
          top = s;
      }
      for (int p = 0; p < seen; p++) {
        sc[p] = expf (sc[p] - top);
        sum += sc[p];
      }
      memset (o, 0, sizeof (float) * head_dim);
      for (int p = 0; p < seen; p++) {
        const float *vp = v + p * kstride + (size_t) g * head_dim;
        axpy (o, sc[p] / sum, vp, head_dim);
      }
    }
    free (sc);
  }
}
