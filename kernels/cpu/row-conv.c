/* gst-dflash — the drafter's grouped causal row convolution (CPU).
 *
 * Row r of y is the sum over taps o = 0 … kernel − 1 (o ≤ r) of
 * (base[o] + dyn[r][o][group of i]) · x[r − o], element by element: each
 * element's product and sum in that order on every path, so the paths
 * give the same bits. The taps' weights are laid out along the row first
 * (one per element), so that the products run over whole rows of eight:
 * a group of channels need not be a multiple of the vector's width.
 */
#include "dfl-kernels.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* The tap's weight of each element: base[i] + the row's kernel value of
 * i's group. */
static void
tap_weights (const float *b, const float *d, int dim, int group, float *w)
{
  for (int gi = 0, groups = dim / group; gi < groups; gi++) {
    float k = d[gi];
    for (int i = gi * group; i < (gi + 1) * group; i++)
      w[i] = b[i] + k;
  }
}

static void
accumulate_plain (float *out, const float *w, const float *src, int dim)
{
  for (int i = 0; i < dim; i++)
    out[i] += w[i] * src[i];
}

#if defined(__x86_64__)
/* the plain loop's multiply, then add (no fused multiply-add) */
__attribute__ ((target ("avx2"))) static void
accumulate_avx2 (float *out, const float *w, const float *src, int dim)
{
  int i = 0;

  for (; i + 8 <= dim; i += 8)
    _mm256_storeu_ps (out + i, _mm256_add_ps (_mm256_loadu_ps (out + i),
                                              _mm256_mul_ps (_mm256_loadu_ps (w + i),
                                                             _mm256_loadu_ps (src + i))));
  accumulate_plain (out + i, w + i, src + i, dim - i);
}
#endif

void
dfl_row_conv (const float *x, int rows, int dim, int group, int kernel, const float *base,
              const float *dyn, int dyn_stride, float *y)
{
  int groups = dim / group;
  float *w = malloc (sizeof (float) * (size_t) dim);
  void (*accumulate) (float *, const float *, const float *, int) = accumulate_plain;

  if (!w)
    abort ();
#if defined(__x86_64__)
  if (dfl_kernels_isa () != DFL_KERNELS_GENERIC)
    accumulate = accumulate_avx2;
#endif
  memset (y, 0, sizeof (float) * (size_t) rows * dim);
  for (int r = 0; r < rows; r++) {
    float *out = y + (size_t) r * dim;
    const float *d = dyn + (size_t) r * dyn_stride;
    for (int o = 0; o < kernel && o <= r; o++) {
      tap_weights (base + (size_t) o * dim, d + o * groups, dim, group, w);
      accumulate (out, w, x + (size_t) (r - o) * dim, dim);
    }
  }
  free (w);
}
