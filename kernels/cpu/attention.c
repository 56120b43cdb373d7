/* gst-dflash — causal grouped-query attention over a KV cache (CPU).
 *
 * Heads are independent, so they go across OpenMP's threads; within a head
 * the scores of all query rows against the cache are one small product. */
#include "dfl-kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
        float s = 0.0f;
        for (int d = 0; d < head_dim; d++)
          s += qr[d] * kp[d];
        s *= scale;
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
        float wgt = sc[p] / sum;
        for (int d = 0; d < head_dim; d++)
          o[d] += wgt * vp[d];
      }
    }
    free (sc);
  }
}
