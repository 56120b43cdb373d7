/* gst-dflash — quantized weights' products against the streaming-read
 * floor.
 *
 *   bench-quant [--types LIST] [--shapes LIST] [--rounds N] [--set MIB] [--cpu-time]
 *
 * For each shape (inputs→outputs) it times y = x · Wᵀ of 1 row (plain
 * decoding) and of 16 rows (a verification) for each weight type (F32,
 * BF16, Q8_0, Q4_0, Q4_K, Q6_K by default), the types and row counts
 * taking turns within each round so that whatever else the machine does
 * falls on all of them alike. The floor is the time to stream the weights'
 * bytes at the read rate a pure-read loop measures in the same run: a
 * 512 MiB buffer XOR-summed by 32-byte loads (AVX2 where there is
 * AVX2) by the kernels' own threads (dfl-parallel.h,
 * pieces of 1 MiB claimed as the products claim their outputs, so the
 * probe and the products share threads the same way), once per round
 * between the timings, the best pass kept. Printed per type: ms a call (best | median of the
 * rounds), each × the floor, and 16 rows ÷ 1 row. The weights cycle
 * through copies filling --set MiB so a call reads them from memory, not
 * from the cache the previous call left them in. The quantized matrices
 * repeat a quantized block of 256 rows (their speed does not depend on the
 * values). With --cpu-time the products (not the probe) are timed by the
 * process's CPU time: with OMP_NUM_THREADS=1 on a machine shared with
 * other work, what the kernel costs without the waits for a core. A
 * benchmark, not a test: it asserts nothing about time.
 */
#include <glib.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench-common.h"
#include "dfl-kernels.h"
#include "dfl-parallel.h"

#include <stdatomic.h>
#include <time.h>

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

#define MAX_TYPES 12
#define MAX_ROUNDS 100
#define TILE_ROWS 256

static int
cmp_double (const void *a, const void *b)
{
  double x = *(const double *) a, y = *(const double *) b;
  return x < y ? -1 : x > y;
}

typedef struct {
  DflDtype type;
  gboolean packed;   /* products from dfl_quant_pack's layout */
  DflWeights *w;
  int copies;
  guint8 *data;
  size_t bytes;
} Mat;

/* `out` × `in` weights of `type`, copies enough to fill set_mib (and
 * with `packed`, each copy laid out by dfl_quant_pack) */
static void
mat_make (Mat *m, DflDtype type, gboolean packed, int in, int out, size_t set_mib, GRand *rng)
{
  size_t rb = dfl_dtype_is_quantized (type) ? dfl_dtype_row_bytes (type, in)
      : (size_t) in * dfl_dtype_size (type);
  int tile = MIN (out, TILE_ROWS);
  float *v = g_new (float, (size_t) tile * in);
  guint8 *first;

  for (size_t i = 0; i < (size_t) tile * in; i++)
    v[i] = (float) (g_rand_double (rng) * 2 - 1) / 16;
  m->type = type;
  m->bytes = rb * out;
  m->copies = (int) MAX (1, (set_mib << 20) / m->bytes);
  m->data = g_malloc (m->bytes * m->copies);
  first = m->data;
  for (int r = 0; r < tile; r++) {
    const float *vr = v + (size_t) r * in;
    guint8 *dst = first + rb * r;
    if (dfl_dtype_is_quantized (type))
      dfl_quantize_row (type, vr, dst, in);
    else if (type == DFL_DTYPE_BF16)
      dfl_f32_to_bf16_n (vr, (uint16_t *) dst, in);
    else if (type == DFL_DTYPE_F16)
      dfl_f32_to_f16_n (vr, (uint16_t *) dst, in);
    else
      memcpy (dst, vr, sizeof (float) * in);
  }
  for (int r = tile; r < out; r += tile)
    memcpy (first + rb * r, first, rb * MIN (tile, out - r));
  for (int c = 1; c < m->copies; c++)
    memcpy (m->data + m->bytes * c, first, m->bytes);
  m->w = g_new (DflWeights, m->copies);
  for (int c = 0; c < m->copies; c++) {
    m->w[c] = (DflWeights) { m->data + m->bytes * c, type, out, in };
    if (packed && !(m->w[c].packed = dfl_quant_pack (&m->w[c])))
      g_error ("bench-quant: %s: no packed layout on this CPU (it needs AVX2)",
               dfl_dtype_name (type));
  }
  m->packed = packed;
  if (packed)
    m->bytes = dfl_quant_packed_bytes (type, out, in);
  g_free (v);
}

/* ---- the read floor: a pure read by the kernels' threads ---- */

#define PROBE_PIECE (1 << 20)

typedef struct {
  const guint64 *a;
  size_t n_pieces;
  atomic_size_t next;
  atomic_ullong sink;
} Probe;

#if defined(__x86_64__)
#include <immintrin.h>
/* A piece XOR-summed by 32-byte loads into four independent registers:
 * the compiler leaves a scalar XOR loop scalar at -O2, which reads at a
 * fraction of what the kernels' vector loads do (on this project's 2-core
 * machine, a third), and the floor would flatter every kernel. */
__attribute__ ((target ("avx2"))) static guint64
xor_piece_avx2 (const guint64 *a, size_t n)
{
  __m256i x0 = _mm256_setzero_si256 (), x1 = x0, x2 = x0, x3 = x0;

  for (size_t k = 0; k < n; k += 16) {
    x0 = _mm256_xor_si256 (x0, _mm256_load_si256 ((const __m256i *) (a + k)));
    x1 = _mm256_xor_si256 (x1, _mm256_load_si256 ((const __m256i *) (a + k + 4)));
    x2 = _mm256_xor_si256 (x2, _mm256_load_si256 ((const __m256i *) (a + k + 8)));
    x3 = _mm256_xor_si256 (x3, _mm256_load_si256 ((const __m256i *) (a + k + 12)));
  }
  x0 = _mm256_xor_si256 (_mm256_xor_si256 (x0, x1), _mm256_xor_si256 (x2, x3));
  return (guint64) _mm256_extract_epi64 (x0, 0) ^ (guint64) _mm256_extract_epi64 (x0, 3);
}
#endif

static guint64
xor_piece (const guint64 *a, size_t n)
{
  guint64 x = 0;

#if defined(__x86_64__)
  if (__builtin_cpu_supports ("avx2"))
    return xor_piece_avx2 (a, n);
#endif
  for (size_t k = 0; k < n; k++)
    x ^= a[k];
  return x;
}

static void
probe_work (void *data, int slot)
{
  Probe *p = data;
  size_t per = PROBE_PIECE / sizeof (guint64), i;
  guint64 x = 0;

  (void) slot;
  while ((i = atomic_fetch_add_explicit (&p->next, 1, memory_order_relaxed)) < p->n_pieces)
    x ^= xor_piece (p->a + i * per, per);
  atomic_fetch_xor_explicit (&p->sink, x, memory_order_relaxed);
}

/* Bytes a second the kernels' threads read from `buf` (`bytes`, a whole
 * number of pieces): one pass. */
static double
read_rate (const guint64 *buf, size_t bytes)
{
  Probe p = { .a = buf, .n_pieces = bytes / PROBE_PIECE };
  double t0;

  atomic_init (&p.next, 0);
  atomic_init (&p.sink, 0);
  t0 = dfl_bench_now ();
  dfl_parallel_run (dfl_parallel_threads (), probe_work, &p);
  t0 = dfl_bench_now () - t0;
  /* the sum is used, so the pass cannot be left out */
  return atomic_load (&p.sink) == 1 ? bytes / t0 + 1e-9 : bytes / t0;
}

static double
time_batch (const Mat *m, const float *x, int rows, float *y, int calls)
{
  double t0 = now ();

  for (int i = 0; i < calls; i++)
    dfl_matmul_w (&m->w[i % m->copies], x, rows, m->w->cols, y, m->w->rows, m->w->rows, 0);
  return (now () - t0) / calls;
}

static gboolean
parse_type (const char *s, DflDtype *t, gboolean *packed)
{
  static const struct { const char *name; DflDtype type; } names[] = {
    { "f32", DFL_DTYPE_F32 }, { "f16", DFL_DTYPE_F16 }, { "bf16", DFL_DTYPE_BF16 },
    { "q8_0", DFL_DTYPE_Q8_0 }, { "q4_0", DFL_DTYPE_Q4_0 }, { "q4_k", DFL_DTYPE_Q4_K },
    { "q6_k", DFL_DTYPE_Q6_K },
  };
  g_autofree char *base = g_strdup (s);
  char *slash = strchr (base, '/');

  /* TYPE/packed: dfl_quant_pack's layout of a type it packs */
  *packed = slash != NULL;
  if (slash) {
    if (strcmp (slash, "/packed"))
      return FALSE;
    *slash = 0;
  }
  for (guint i = 0; i < G_N_ELEMENTS (names); i++)
    if (!g_ascii_strcasecmp (base, names[i].name)) {
      *t = names[i].type;
      return !*packed || dfl_quant_packed_bytes (*t, 1, 256) > 0;
    }
  return FALSE;
}

int
main (int argc, char **argv)
{
  g_autofree char *types_s = NULL, *shapes_s = NULL;
  int rounds = 5, set_mib = 256;
  GOptionEntry entries[] = {
    { "types", 0, 0, G_OPTION_ARG_STRING, &types_s,
      "Weight types, a quantized one as TYPE/packed for dfl_quant_pack's layout (default "
      "f32,bf16,q8_0,q4_0,q4_k,q6_k and q8_0, q4_0, q4_k /packed where the CPU has AVX2)",
      "LIST" },
    { "shapes", 0, 0, G_OPTION_ARG_STRING, &shapes_s,
      "INxOUT shapes (default 4096x4096,1024x151936)", "LIST" },
    { "rounds", 0, 0, G_OPTION_ARG_INT, &rounds, "Timed rounds (default 5)", "N" },
    { "set", 0, 0, G_OPTION_ARG_INT, &set_mib, "MiB of weight copies to cycle through "
      "(default 256)", "MIB" },
    { "cpu-time", 0, 0, G_OPTION_ARG_NONE, &cpu_time, "Time the products by the process's CPU "
      "time", NULL },
    { NULL }
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("- quantized products against the "
                                                         "read floor");
  g_autoptr (GError) error = NULL;
  DflDtype types[MAX_TYPES] = { DFL_DTYPE_F32, DFL_DTYPE_BF16, DFL_DTYPE_Q8_0, DFL_DTYPE_Q8_0,
                                DFL_DTYPE_Q4_0, DFL_DTYPE_Q4_0, DFL_DTYPE_Q4_K, DFL_DTYPE_Q4_K,
                                DFL_DTYPE_Q6_K };
  gboolean packed[MAX_TYPES] = { FALSE, FALSE, FALSE, TRUE, FALSE, TRUE, FALSE, TRUE, FALSE };
  int n_types = 9, shapes[16] = { 4096, 4096, 1024, 151936 }, n_shapes = 4;
  static const int row_counts[2] = { 1, 16 };
  GRand *rng = g_rand_new_with_seed (18);
  double read_bw;
  guint64 *probe;
  size_t probe_bytes;

  /* without AVX2 the default is the stored types alone */
  if (!dfl_kernels_cpu_has (DFL_KERNELS_AVX2)) {
    int n = 0;
    for (int t = 0; t < n_types; t++)
      if (!packed[t])
        types[n++] = types[t];
    memset (packed, 0, sizeof packed);
    n_types = n;
  }
  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!g_option_context_parse (ctx, &argc, &argv, &error)) {
    fprintf (stderr, "bench-quant: %s\n", error->message);
    return 2;
  }
  if (types_s) {
    g_auto (GStrv) parts = g_strsplit (types_s, ",", -1);
    n_types = 0;
    for (int i = 0; parts[i]; i++)
      if (n_types == MAX_TYPES || !parse_type (parts[i], &types[n_types], &packed[n_types])
          || (packed[n_types++] && !dfl_kernels_cpu_has (DFL_KERNELS_AVX2))) {
        fprintf (stderr, "bench-quant: --types \"%s\": not a list of f32, f16, bf16, q8_0, "
                 "q4_0, q4_k, q6_k (q8_0, q4_0, q4_k also /packed where the CPU has AVX2)\n",
                 types_s);
        return 2;
      }
  }
  if (shapes_s) {
    g_auto (GStrv) parts = g_strsplit (shapes_s, ",", -1);
    n_shapes = 0;
    for (int i = 0; parts[i]; i++) {
      int a, b;
      if (n_shapes + 2 > (int) G_N_ELEMENTS (shapes) || sscanf (parts[i], "%dx%d", &a, &b) != 2
          || a < 256 || a % 256 || b < 1 || b > 1 << 20) {
        fprintf (stderr, "bench-quant: --shapes \"%s\": not a list of INxOUT, IN a multiple of "
                 "256\n", shapes_s);
        return 2;
      }
      shapes[n_shapes++] = a;
      shapes[n_shapes++] = b;
    }
  }
  if (rounds < 1 || rounds > MAX_ROUNDS || set_mib < 0 || set_mib > 8192) {
    fprintf (stderr, "bench-quant: --rounds must be 1 … %d and --set 0 … 8192\n", MAX_ROUNDS);
    return 2;
  }

  probe_bytes = (size_t) 512 << 20;
  probe = aligned_alloc (64, probe_bytes);
  for (size_t i = 0; i < probe_bytes / sizeof (guint64); i++)
    probe[i] = i;
  read_bw = read_rate (probe, probe_bytes);
  printf ("threads %d, kernels %s (quantized: %s), %s time, best | median of %d rounds\n",
          omp_get_max_threads (), dfl_kernels_isa_name (dfl_kernels_isa ()),
          dfl_quant_path_name (), cpu_time ? "CPU" : "wall", rounds);
  for (int s = 0; s < n_shapes; s += 2) {
    int in = shapes[s], out = shapes[s + 1];
    Mat mats[MAX_TYPES];
    double times[MAX_TYPES][2][MAX_ROUNDS];
    int calls[MAX_TYPES][2];
    float *x = g_new (float, (size_t) 16 * in), *y = g_new (float, (size_t) 16 * out);

    for (size_t i = 0; i < (size_t) 16 * in; i++)
      x[i] = (float) (g_rand_double (rng) * 2 - 1);
    for (int t = 0; t < n_types; t++) {
      mat_make (&mats[t], types[t], packed[t], in, out, set_mib, rng);
      /* a batch of about 30 ms, warmed up */
      for (int k = 0; k < 2; k++) {
        calls[t][k] = 1;
        while (calls[t][k] < (1 << 16)
               && time_batch (&mats[t], x, row_counts[k], y, calls[t][k]) * calls[t][k] < 0.03)
          calls[t][k] *= 2;
      }
    }
    read_bw = 0;
    for (int rd = 0; rd < rounds; rd++) {
      read_bw = MAX (read_bw, read_rate (probe, probe_bytes));
      for (int t = 0; t < n_types; t++)
        for (int k = 0; k < 2; k++)
          times[t][k][rd] = time_batch (&mats[t], x, row_counts[k], y, calls[t][k]);
    }
    printf ("\n%d→%d (read floor at %.2f GB/s)\n", in, out, read_bw / 1e9);
    printf ("%-11s %9s %9s   %-22s %-13s   %-22s %-13s   %s\n", "type", "MB", "floor ms",
            "1 row ms best | med", "× floor", "16 rows ms best | med", "× floor",
            "16 rows ÷ 1 row");
    for (int t = 0; t < n_types; t++) {
      double floor = mats[t].bytes / read_bw, best[2], med[2];
      g_autofree char *name = g_strdup_printf ("%s%s", dfl_dtype_name (types[t]),
                                               packed[t] ? "/packed" : "");
      for (int k = 0; k < 2; k++) {
        qsort (times[t][k], rounds, sizeof (double), cmp_double);
        best[k] = times[t][k][0];
        med[k] = times[t][k][rounds / 2];
      }
      printf ("%-11s %9.1f %9.3f   %8.3f | %8.3f   %5.2f | %5.2f   %8.3f | %8.3f   %5.2f | %5.2f"
              "   %5.2f | %5.2f\n", name, mats[t].bytes / 1e6, floor * 1e3,
              best[0] * 1e3, med[0] * 1e3, best[0] / floor, med[0] / floor, best[1] * 1e3,
              med[1] * 1e3, best[1] / floor, med[1] / floor, best[1] / best[0], med[1] / med[0]);
      fflush (stdout);
    }
    for (int t = 0; t < n_types; t++) {
      for (int c = 0; c < mats[t].copies; c++)
        free ((void *) mats[t].w[c].packed);
      g_free (mats[t].w);
      g_free (mats[t].data);
    }
    g_free (x);
    g_free (y);
  }
  free (probe);
  g_rand_free (rng);
  return 0;
}
