/* gst-dflash — passing over a row's values that cannot change a running
 * best (argmax, top k): eight at a time, the bar read once a stretch.
 * Where the bar only rises, a stretch with no value above it at its start
 * holds none above it later either, so the scalar loop, given only the
 * stretches this leaves, gives the same answer. A NaN is above nothing. */
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>

/* From x[i] on, in stretches of eight: the start of the first one holding
 * a value above `bar`, else the first i past the last whole stretch. */
__attribute__ ((target ("avx2"))) static inline int
dfl_scan_above (const float *x, int i, int n, float bar)
{
  const __m256 b = _mm256_set1_ps (bar);

  for (; i + 8 <= n; i += 8)
    if (_mm256_movemask_ps (_mm256_cmp_ps (_mm256_loadu_ps (x + i), b, _CMP_GT_OQ)))
      break;
  return i;
}
#endif
