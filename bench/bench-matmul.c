/* gst-dflash — dfl_matmul_w's speed at the shapes of a speculative round.
 *
 *   bench-matmul [--type bf16|f16|f32] [--rows LIST] [--shapes LIST] [--set MIB]
 *                [--rounds N] [--generic] [--cpu-time] [--group IN:OUT,OUT…]
 *
 * For each shape (inputs→outputs) and row count it times y = x · Wᵀ with
 * every instruction set this CPU has a path for (dfl_kernels_set_isa), the
 * sets taking turns within each round so that whatever else the machine is
 * doing falls on all of them alike. Each round times a batch of calls of
 * about 40 ms; the figures are the best and the median round, as ms a call
 * and GFLOP/s (2 · rows · inputs · outputs a call), and the ratio of each set
 * to the first one timed. The weights cycle through enough copies of the
 * matrix to fill --set MiB, so a call reads them from where a model's weights
 * would be (a whole model does not stay in a core's caches) rather than from
 * the cache the previous call left them in. Every set's outputs are
 * compared bitwise with the first one's before any timing. With --cpu-time
 * the clock is the process's CPU time instead of the wall's: on a machine
 * shared with other work it leaves out the time this process waited for a
 * core, which makes single-thread figures (OMP_NUM_THREADS=1) steadier; with
 * more threads it also counts the time a thread spins waiting for the
 * others. With --group (q, k and v: e.g. 384:384,192,192) it times instead
 * the products of one x in one call (dfl_matmul_w_group) against a call a
 * product, the two taking turns within each round, for each --rows. A
 * benchmark, not a test: it asserts nothing about time.
 */
#include <glib.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench-common.h"
#include "dfl-kernels.h"

#define MAX_ISAS 4

static gboolean cpu_time;

static double
now (void)
{
  struct timespec ts;

  if (!cpu_time)
    return dfl_bench_now ();
  clock_gettime (CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int
cmp_double (const void *a, const void *b)
{
  double x = *(const double *) a, y = *(const double *) b;
  return x < y ? -1 : x > y;
}

static gboolean
parse_list (const char *s, int *out, int max, int *n, gboolean pairs)
{
  g_auto (GStrv) parts = g_strsplit (s, ",", -1);

  *n = 0;
  for (int i = 0; parts[i]; i++) {
    char *end;
    long a = strtol (parts[i], &end, 10), b = 0;
    if (pairs) {
      if (*end != 'x' && *end != ':')
        return FALSE;
      b = strtol (end + 1, &end, 10);
    }
    if (*end || a < 1 || a > 65536 || (pairs && (b < 1 || b > 262144)) || *n + 1 + pairs > max)
      return FALSE;
    out[(*n)++] = (int) a;
    if (pairs)
      out[(*n)++] = (int) b;
  }
  return *n > 0;
}

/* Seconds a call for `isa`: a batch of `calls` calls cycling through the
 * copies of W. */
static double
time_batch (DflKernelsIsa isa, DflWeights *w, int copies, const float *x, int rows, float *y,
            int calls)
{
  double t0;

  dfl_kernels_set_isa (isa);
  t0 = now ();
  for (int i = 0; i < calls; i++)
    dfl_matmul_w (&w[i % copies], x, rows, w->cols, y, w->rows, w->rows, 0);
  return (now () - t0) / calls;
}

/* --group: seconds a call of the group, or of its products one by one. */
static double
time_group (gboolean grouped, int n, const DflWeights *w, const float *x, int rows, float **y,
            const int *ld, int calls)
{
  double t0 = now ();

  for (int c = 0; c < calls; c++) {
    if (grouped)
      dfl_matmul_w_group (n, w, x, rows, w[0].cols, y, ld, ld, 0);
    else
      for (int i = 0; i < n; i++)
        dfl_matmul_w (&w[i], x, rows, w[i].cols, y[i], ld[i], ld[i], 0);
  }
  return (now () - t0) / calls;
}

static int
bench_group (const char *spec, DflDtype type, const int *rows_list, int n_rows, int rounds)
{
  g_auto (GStrv) halves = g_strsplit (spec, ":", 2);
  int list[DFL_MATMUL_GROUP_MAX + 1], n = 0, in;
  DflWeights w[DFL_MATMUL_GROUP_MAX];
  float *y[DFL_MATMUL_GROUP_MAX];
  GRand *rng = g_rand_new_with_seed (12);
  size_t esz = type == DFL_DTYPE_F32 ? 4 : 2;

  if (!halves[0] || !halves[1] || !parse_list (halves[0], list, 1, &n, FALSE)
      || !parse_list (halves[1], list + 1, DFL_MATMUL_GROUP_MAX, &n, FALSE)) {
    fprintf (stderr, "bench-matmul: --group \"%s\" is no IN:OUT,OUT… of at most %d products\n",
             spec, DFL_MATMUL_GROUP_MAX);
    return 2;
  }
  in = list[0];
  printf ("threads %d, products of one x (%s): one dfl_matmul_w_group call against a "
          "dfl_matmul_w a product, median of %d rounds\n", omp_get_max_threads (), spec, rounds);
  printf ("%5s %12s %12s %8s\n", "rows", "grouped ms", "a call ms", "ratio");
  for (int i = 0; i < n; i++) {
    guint16 *d = g_malloc ((size_t) in * list[1 + i] * esz);
    for (size_t j = 0; j < (size_t) in * list[1 + i] * esz / 2; j++)
      d[j] = (guint16) (0x3c00 + g_rand_int_range (rng, 0, 256));   /* small, finite */
    w[i] = (DflWeights) { d, type, list[1 + i], in };
  }
  for (int ri = 0; ri < n_rows; ri++) {
    int rows = rows_list[ri], ld[DFL_MATMUL_GROUP_MAX], calls = 1;
    float *x = g_new (float, (size_t) rows * in);
    double tg[1000], ts[1000];

    for (size_t i = 0; i < (size_t) rows * in; i++)
      x[i] = (float) (g_rand_double (rng) * 2 - 1);
    for (int i = 0; i < n; i++) {
      ld[i] = w[i].rows;
      y[i] = g_new (float, (size_t) rows * ld[i]);
    }
    while (calls < (1 << 20) && time_group (FALSE, n, w, x, rows, y, ld, calls) * calls < 0.04)
      calls *= 2;
    for (int rd = 0; rd < rounds; rd++) {
      tg[rd] = time_group (TRUE, n, w, x, rows, y, ld, calls);
      ts[rd] = time_group (FALSE, n, w, x, rows, y, ld, calls);
    }
    qsort (tg, rounds, sizeof (double), cmp_double);
    qsort (ts, rounds, sizeof (double), cmp_double);
    printf ("%5d %12.4f %12.4f %8.3f\n", rows, tg[rounds / 2] * 1e3, ts[rounds / 2] * 1e3,
            tg[rounds / 2] / ts[rounds / 2]);
    for (int i = 0; i < n; i++)
      g_free (y[i]);
    g_free (x);
  }
  for (int i = 0; i < n; i++)
    g_free ((void *) w[i].data);
  g_rand_free (rng);
  return 0;
}

int
main (int argc, char **argv)
{
  g_autofree char *type_s = NULL, *rows_s = NULL, *shapes_s = NULL, *group_s = NULL;
  int set_mib = 64, rounds = 7;
  gboolean generic = FALSE;
  GOptionEntry entries[] = {
    { "type", 0, 0, G_OPTION_ARG_STRING, &type_s, "Weight dtype: bf16 (default), f16 or f32",
      "T" },
    { "rows", 0, 0, G_OPTION_ARG_STRING, &rows_s, "Row counts (default 1,4,8,16)", "LIST" },
    { "shapes", 0, 0, G_OPTION_ARG_STRING, &shapes_s,
      "INxOUT shapes (default 384x1024,1024x384,384x384,384x8192,4096x4096)", "LIST" },
    { "set", 0, 0, G_OPTION_ARG_INT, &set_mib, "MiB of weight copies to cycle through (default 64)",
      "MIB" },
    { "rounds", 0, 0, G_OPTION_ARG_INT, &rounds, "Timed rounds per set (default 7)", "N" },
    { "generic", 0, 0, G_OPTION_ARG_NONE, &generic, "Time the plain-C path too (slow)", NULL },
    { "cpu-time", 0, 0, G_OPTION_ARG_NONE, &cpu_time, "Time by the process's CPU time", NULL },
    { "group", 0, 0, G_OPTION_ARG_STRING, &group_s,
      "Products of one x, IN:OUT,OUT… (e.g. 384:384,192,192): one call against a call each",
      "SPEC" },
    { NULL }
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("- dfl_matmul_w's speed");
  g_autoptr (GError) error = NULL;
  int rows_list[16], n_rows = 4, shapes[32], n_shapes = 10, n_isas = 0;
  DflKernelsIsa isas[MAX_ISAS];
  DflKernelsIsa all[] = { DFL_KERNELS_GENERIC, DFL_KERNELS_AVX2, DFL_KERNELS_AVX512 };
  DflDtype type = DFL_DTYPE_BF16;
  GRand *rng = g_rand_new_with_seed (11);

  memcpy (rows_list, (int[]) { 1, 4, 8, 16 }, sizeof (int) * 4);
  memcpy (shapes, (int[]) { 384, 1024, 1024, 384, 384, 384, 384, 8192, 4096, 4096 },
          sizeof (int) * 10);
  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!g_option_context_parse (ctx, &argc, &argv, &error)) {
    fprintf (stderr, "bench-matmul: %s\n", error->message);
    return 2;
  }
  if (type_s && !strcmp (type_s, "f32"))
    type = DFL_DTYPE_F32;
  else if (type_s && !strcmp (type_s, "f16"))
    type = DFL_DTYPE_F16;
  else if (type_s && strcmp (type_s, "bf16")) {
    fprintf (stderr, "bench-matmul: --type must be bf16, f16 or f32, not \"%s\"\n", type_s);
    return 2;
  }
  if (rows_s && !parse_list (rows_s, rows_list, G_N_ELEMENTS (rows_list), &n_rows, FALSE)) {
    fprintf (stderr, "bench-matmul: --rows \"%s\" is no list of counts 1 … 65536\n", rows_s);
    return 2;
  }
  if (shapes_s && !parse_list (shapes_s, shapes, G_N_ELEMENTS (shapes), &n_shapes, TRUE)) {
    fprintf (stderr, "bench-matmul: --shapes \"%s\" is no list of INxOUT\n", shapes_s);
    return 2;
  }
  if (set_mib < 0 || set_mib > 4096 || rounds < 1 || rounds > 1000) {
    fprintf (stderr, "bench-matmul: --set must be 0 … 4096 and --rounds 1 … 1000\n");
    return 2;
  }
  if (group_s) {
    g_rand_free (rng);
    return bench_group (group_s, type, rows_list, n_rows, rounds);
  }
  for (guint i = generic ? 0 : 1; i < G_N_ELEMENTS (all); i++)
    if (dfl_kernels_set_isa (all[i]))
      isas[n_isas++] = all[i];
  dfl_kernels_set_isa (DFL_KERNELS_BEST);
  printf ("threads %d, weights %s, %d MiB of weight copies, %s time, best | median of %d rounds\n",
          omp_get_max_threads (),
          type == DFL_DTYPE_BF16 ? "BF16" : type == DFL_DTYPE_F16 ? "F16" : "F32", set_mib,
          cpu_time ? "CPU" : "wall", rounds);
  printf ("%-11s %4s", "shape", "rows");
  for (int k = 0; k < n_isas; k++)
    printf ("   %-8s ms a call   GFLOP/s  ", dfl_kernels_isa_name (isas[k]));
  printf ("\n");

  for (int s = 0; s < n_shapes; s += 2) {
    int in = shapes[s], out = shapes[s + 1], copies;
    size_t esz = type == DFL_DTYPE_F32 ? 4 : 2, bytes = (size_t) in * out * esz;
    DflWeights *w;
    guint8 *data;

    copies = (int) MAX (1, ((size_t) set_mib << 20) / bytes);
    data = g_malloc (bytes * copies);
    w = g_new (DflWeights, copies);
    /* small values of the dtype: an exponent near 1/16, random mantissa and sign */
    for (size_t i = 0; i < (size_t) in * out; i++) {
      float f = (float) (g_rand_double (rng) * 2 - 1) / 16;
      if (type == DFL_DTYPE_F32) {
        memcpy (data + 4 * i, &f, 4);
      } else {
        guint32 b;
        guint16 h;
        memcpy (&b, &f, 4);
        if (type == DFL_DTYPE_BF16)
          h = b >> 16;
        else   /* |f| < 1/16: an F16 of the same sign and mantissa's top bits */
          h = (guint16) (((b >> 16) & 0x8000) | ((((b >> 23) & 0xff) - 127 + 15) << 10)
                         | ((b >> 13) & 0x3ff));
        if (type == DFL_DTYPE_F16 && ((b >> 23) & 0xff) < 127 - 14)
          h &= 0x8000;   /* below F16's normals: zero */
        memcpy (data + 2 * i, &h, 2);
      }
    }
    for (int c = 0; c < copies; c++) {
      if (c > 0)
        memcpy (data + bytes * c, data, bytes);
      w[c] = (DflWeights) { data + bytes * c, type, out, in };
    }

    for (int ri = 0; ri < n_rows; ri++) {
      int rows = rows_list[ri], calls;
      double flop = 2.0 * rows * in * out, times[MAX_ISAS][1000], best[MAX_ISAS], med[MAX_ISAS];
      float *x = g_new (float, (size_t) rows * in), *y = g_new (float, (size_t) rows * out),
          *y0 = g_new (float, (size_t) rows * out);
      char label[32];

      for (size_t i = 0; i < (size_t) rows * in; i++)
        x[i] = (float) (g_rand_double (rng) * 2 - 1);
      /* the sets agree bitwise before their speed means anything */
      for (int k = 0; k < n_isas; k++) {
        dfl_kernels_set_isa (isas[k]);
        dfl_matmul_w (w, x, rows, in, k ? y : y0, out, out, 0);
        if (k && memcmp (y, y0, sizeof (float) * rows * out)) {
          fprintf (stderr, "bench-matmul: %s and %s differ at %dx%d, %d rows\n",
                   dfl_kernels_isa_name (isas[0]), dfl_kernels_isa_name (isas[k]), in, out, rows);
          return 1;
        }
      }
      /* a batch of about 40 ms at the last (the fastest) set's speed, warmed up */
      calls = 1;
      while (calls < (1 << 20)
             && time_batch (isas[n_isas - 1], w, copies, x, rows, y, calls) * calls < 0.04)
        calls *= 2;
      for (int rd = 0; rd < rounds; rd++)
        for (int k = 0; k < n_isas; k++)
          times[k][rd] = time_batch (isas[k], w, copies, x, rows, y,
                                     isas[k] == DFL_KERNELS_GENERIC ? MAX (1, calls / 16) : calls);
      g_snprintf (label, sizeof label, "%d→%d", in, out);
      printf ("%-13s %4d", label, rows);
      for (int k = 0; k < n_isas; k++) {
        qsort (times[k], rounds, sizeof (double), cmp_double);
        best[k] = times[k][0];
        med[k] = times[k][rounds / 2];
        printf ("   %7.4f | %7.4f  %6.1f | %6.1f", best[k] * 1e3, med[k] * 1e3,
                flop / best[k] / 1e9, flop / med[k] / 1e9);
      }
      for (int k = 1; k < n_isas; k++)
        printf ("   %s/%s %.2fx | %.2fx", dfl_kernels_isa_name (isas[k]),
                dfl_kernels_isa_name (isas[0]), best[0] / best[k], med[0] / med[k]);
      printf ("\n");
      fflush (stdout);
      g_free (x);
      g_free (y);
      g_free (y0);
    }
    g_free (w);
    g_free (data);
  }
  dfl_kernels_set_isa (DFL_KERNELS_BEST);
  g_rand_free (rng);
  return 0;
}
