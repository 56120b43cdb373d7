/* gst-dflash — what the benchmarks share: the bandwidth probes, the median. */
#include "bench-common.h"

#include <stdlib.h>
#include <string.h>

static int
cmp_double (const void *a, const void *b)
{
  double x = *(const double *) a, y = *(const double *) b;

  return (x > y) - (x < y);
}

double
dfl_bench_median (double *v, int n)
{
  qsort (v, n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double
dfl_bench_copy_bandwidth (gsize mib)
{
  gsize n = mib << 20;
  guint8 *a = g_malloc (n), *b = g_malloc (n);
  double best = 0;

  /* touch both so page faults stay out of the timing */
  memset (a, 1, n);
  memset (b, 2, n);
  for (int i = 0; i < 5; i++) {
    double t0 = dfl_bench_now (), dt;
    memcpy (b, a, n);
    dt = dfl_bench_now () - t0;
    a[i] = b[n - 1 - i];   /* keep the copies from being elided */
    if (dt > 0 && n / dt > best)
      best = n / dt;
  }
  g_free (a);
  g_free (b);
  return best;
}

double
dfl_bench_read_bandwidth (gsize mib)
{
  gsize n = (mib << 20) / sizeof (guint64);
  guint64 *a = g_malloc (n * sizeof (guint64)), sink = 0;
  double best = 0;

#pragma omp parallel for schedule(static)
  for (gsize i = 0; i < n; i++)
    a[i] = i;
  for (int pass = 0; pass < 5; pass++) {
    double t0 = dfl_bench_now (), dt;
    guint64 x = 0;
    /* an integer XOR has no order to keep, so it vectorises and the loop
     * runs at the speed of the loads */
#pragma omp parallel for schedule(static) reduction(^:x)
    for (gsize i = 0; i < n; i++)
      x ^= a[i];
    dt = dfl_bench_now () - t0;
    sink ^= x;
    if (dt > 0 && n * sizeof (guint64) / dt > best)
      best = n * sizeof (guint64) / dt;
  }
  g_free (a);
  /* the result is used so the passes cannot be optimised away */
  return sink == 1 ? best + 1e-9 : best;
}
