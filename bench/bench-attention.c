/* gst-dflash — the CPU's attention over a cache of keys and values.
 *
 *   bench-attention [--heads H] [--kv-heads K] [--head-dim D] [--reps N]
 *
 * dfl_attention_causal for 1 row (a decode step) and 16 rows (a verify
 * step) over 256, 512, 1024 and 2048 keys of an F32 cache, and
 * dfl_attention_causal_bf16 over the same values in a BF16 one, the two
 * calls alternating; H query heads (default 16) over K key heads (default
 * 8) of D dimensions (default 64: the 159M random Qwen3 of
 * bench/vs-llama-cpp.sh), on the kernels' threads. Prints the median of
 * --reps calls of each (default 200, after a warm-up), the rate at which
 * the F32 call reads the keys and values it covers, and BF16's time over
 * F32's. The same cache is read by every call, so it is warm in the
 * processor's caches as far as they hold it (a decode step's is not: the
 * weights stream through between layers). A benchmark: it asserts nothing
 * about time (tests/kernels checks the numbers).
 */
#include <glib.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench-common.h"
#include "dfl-kernels.h"

int
main (int argc, char **argv)
{
  int heads = 16, kv_heads = 8, head_dim = 64, reps = 200;
  GOptionEntry entries[] = {
    { "heads", 0, 0, G_OPTION_ARG_INT, &heads, "Query heads (16)", "H" },
    { "kv-heads", 0, 0, G_OPTION_ARG_INT, &kv_heads, "Key and value heads (8)", "K" },
    { "head-dim", 0, 0, G_OPTION_ARG_INT, &head_dim, "Dimensions of a head (64)", "D" },
    { "reps", 0, 0, G_OPTION_ARG_INT, &reps, "Calls timed, their median printed (200)", "N" },
    { NULL }
  };
  static const int keys_of[] = { 256, 512, 1024, 2048 }, rows_of[] = { 1, 16 };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("- the CPU's attention over a cache");
  g_autoptr (GError) error = NULL;
  g_autoptr (GRand) rng = g_rand_new_with_seed (5);

  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!g_option_context_parse (ctx, &argc, &argv, &error) || heads < 1 || kv_heads < 1
      || heads % kv_heads || head_dim < 1 || reps < 1) {
    fprintf (stderr, "bench-attention: %s\n", error ? error->message
             : "--heads must be a multiple of --kv-heads, every count positive");
    return 2;
  }
  printf ("%d heads over %d key heads, head_dim %d, the kernels' threads; median of %d calls\n",
          heads, kv_heads, head_dim, reps);
  printf ("%6s %5s %12s %12s %12s %10s\n", "keys", "rows", "F32 µs", "F32 GB/s", "BF16 µs",
          "BF16/F32");
  for (guint ki = 0; ki < G_N_ELEMENTS (keys_of); ki++)
    for (guint ri = 0; ri < G_N_ELEMENTS (rows_of); ri++) {
      int keys = keys_of[ki], rows = rows_of[ri], pos0 = keys - rows;
      gsize nq = (gsize) rows * heads * head_dim, nkv = (gsize) keys * kv_heads * head_dim;
      g_autofree float *q = g_new (float, nq), *k = g_new (float, nkv);
      g_autofree float *v = g_new (float, nkv), *out = g_new (float, nq);
      g_autofree guint16 *kb = g_new (guint16, nkv), *vb = g_new (guint16, nkv);
      g_autofree double *t = g_new (double, reps), *tb = g_new (double, reps);
      double med, med_b;

      for (gsize i = 0; i < nq; i++)
        q[i] = (float) g_rand_double_range (rng, -1, 1);
      for (gsize i = 0; i < nkv; i++) {
        k[i] = (float) g_rand_double_range (rng, -1, 1);
        v[i] = (float) g_rand_double_range (rng, -1, 1);
      }
      dfl_f32_to_bf16_n (k, kb, nkv);
      dfl_f32_to_bf16_n (v, vb, nkv);
      for (int r = -5; r < reps; r++) {
        double t0 = dfl_bench_now (), t1;
        dfl_attention_causal (q, rows, heads, kv_heads, head_dim, k, v, pos0,
                              1.0f / 8.0f, out);
        t1 = dfl_bench_now ();
        dfl_attention_causal_bf16 (q, rows, heads, kv_heads, head_dim, kb, vb, pos0,
                                   1.0f / 8.0f, out);
        if (r >= 0) {
          t[r] = t1 - t0;
          tb[r] = dfl_bench_now () - t1;
        }
      }
      med = dfl_bench_median (t, reps);
      med_b = dfl_bench_median (tb, reps);
      printf ("%6d %5d %12.1f %12.1f %12.1f %10.2f\n", keys, rows, med * 1e6,
              2.0 * nkv * sizeof (float) / med / 1e9, med_b * 1e6, med_b / med);
    }
  return 0;
}
