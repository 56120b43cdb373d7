/* gst-dflash — the drafter's grouped causal row convolution (CPU). */
#include "dfl-kernels.h"

#include <string.h>

void
dfl_row_conv (const float *x, int rows, int dim, int group, int kernel, const float *base,
              const float *dyn, int dyn_stride, float *y)
{
  int groups = dim / group;

  memset (y, 0, sizeof (float) * (size_t) rows * dim);
  for (int r = 0; r < rows; r++) {
    float *out = y + (size_t) r * dim;
    const float *d = dyn + (size_t) r * dyn_stride;
    for (int o = 0; o < kernel && o <= r; o++) {
      const float *src = x + (size_t) (r - o) * dim;
      const float *b = base + (size_t) o * dim;
      for (int gi = 0; gi < groups; gi++) {
        float k = d[o * groups + gi];
        for (int i = gi * group; i < (gi + 1) * group; i++)
          out[i] += (b[i] + k) * src[i];
      }
    }
  }
}
