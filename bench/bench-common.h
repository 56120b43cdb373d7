/* gst-dflash — what the benchmarks share: a copy-bandwidth probe (the floor
 * every "within N× of memory bandwidth" figure is measured against) and a
 * clock. */
#pragma once

#include <glib.h>

/* Bytes a large memcpy moves per second on this machine now: the best of a
 * few copies of `mib` MiB (each byte copied counts once). */
double dfl_bench_copy_bandwidth (gsize mib);

/* Bytes per second all threads together read from a `mib` MiB buffer (a
 * streaming sum, the access pattern of a matrix-vector product): the best of
 * a few passes. Copy bandwidth counts each byte once though a copy both reads
 * and writes it, so this is the tighter floor of a read-bound step. */
double dfl_bench_read_bandwidth (gsize mib);

/* The median of v[0 … n−1] (sorts v in place). */
double dfl_bench_median (double *v, int n);

static inline double
dfl_bench_now (void)
{
  return g_get_monotonic_time () / 1e6;
}
