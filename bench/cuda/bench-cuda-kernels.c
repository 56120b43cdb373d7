/* gst-dflash — the CUDA kernels' speed on the card, measured in one run.
 *
 * A pure-read pass over 1 GiB gives the rate the card reads memory at (the
 * device-to-device copy rate is printed beside it, labelled); the
 * projections of Qwen3-8B (4096 → 12288, 12288 → 4096, 4096 → 4096, 4096 →
 * 1024, the 4096 → 151936 head) with BF16 weights at 1, 16 and 512 rows
 * are timed with CUDA events (the median of N calls) on every path
 * that takes them, and set against it: a few rows are bound by reading the
 * weights, so their weight bytes per second over the read rate says how
 * close to the memory they run. Attention of 16 rows (a verify step) and
 * of one row (a decode step) over 1024 and 4096 keys, on an F32 and on a
 * BF16 cache, and the choice kernels follow. Weights are random, made on the card.
 */
#include <cuda_runtime.h>
#include <glib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "dfl-cuda.h"

#define CALLS 25

static DflCudaDevice *dev;

static void
check (GError *error)
{
  if (error) {
    fprintf (stderr, "bench-cuda-kernels: %s\n", error->message);
    exit (1);
  }
}

static void *
alloc (size_t bytes)
{
  GError *error = NULL;
  void *d = dfl_cuda_alloc (dev, bytes, &error);
  check (error);
  return d;
}

static int
cmp_float (const void *a, const void *b)
{
  float x = *(const float *) a, y = *(const float *) b;
  return (x > y) - (x < y);
}

typedef void (*Launch) (gpointer data);

/* The median milliseconds of CALLS launches, each between two events, after
 * a few untimed ones. */
static double
time_ms (Launch launch, gpointer data)
{
  GError *error = NULL;
  cudaStream_t stream = dfl_cuda_device_stream (dev);
  cudaEvent_t start[CALLS], stop[CALLS];
  float ms[CALLS];

  for (int i = 0; i < 3; i++)
    launch (data);
  for (int i = 0; i < CALLS; i++) {
    cudaEventCreate (&start[i]);
    cudaEventCreate (&stop[i]);
    cudaEventRecord (start[i], stream);
    launch (data);
    cudaEventRecord (stop[i], stream);
  }
  dfl_cuda_sync (dev, &error);
  check (error);
  for (int i = 0; i < CALLS; i++) {
    cudaEventElapsedTime (&ms[i], start[i], stop[i]);
    cudaEventDestroy (start[i]);
    cudaEventDestroy (stop[i]);
  }
  qsort (ms, CALLS, sizeof (float), cmp_float);
  return ms[CALLS / 2];
}

typedef struct {
  DflCudaWeights w;
  float *d_x, *d_y;
  void *d_scratch;
  int rows;
  DflCudaMatmulPath path;
} Matmul;

static void
matmul_launch (gpointer data)
{
  Matmul *m = data;
  dfl_cuda_matmul_path (dev, m->path, &m->w, m->d_x, m->rows, m->w.cols, m->d_y, m->w.rows,
                        m->w.rows, FALSE, m->d_scratch);
}

/* Products of one x: in one call (dfl_cuda_matmul_group) or a call each. */
typedef struct {
  DflCudaWeights w[3];
  float *d_x, *d_y[3];
  void *d_scratch;
  int n, rows, ldy[3], n_out[3];
  gboolean grouped;
} Group;

static void
group_launch (gpointer data)
{
  Group *g = data;
  if (g->grouped)
    dfl_cuda_matmul_group (dev, g->n, g->w, g->d_x, g->rows, g->w[0].cols, g->d_y, g->ldy,
                           g->n_out, FALSE, g->d_scratch);
  else
    for (int i = 0; i < g->n; i++)
      dfl_cuda_matmul (dev, &g->w[i], g->d_x, g->rows, g->w[i].cols, g->d_y[i], g->ldy[i],
                       g->n_out[i], FALSE, g->d_scratch);
}

typedef struct {
  float *d_q, *d_out;
  void *d_k, *d_v;
  int32_t *d_lo, *d_hi;
  int rows, heads, kv_heads, hd, keys, bf16;
} Attention;

static void
attention_launch (gpointer data)
{
  Attention *a = data;
  dfl_cuda_attention (dev, a->d_q, a->rows, a->heads, a->kv_heads, a->hd, a->d_k, a->d_v,
                      a->bf16, a->kv_heads * a->hd, a->d_lo, a->d_hi, a->keys,
                      1.0f / sqrtf ((float) a->hd), a->d_out);
}

typedef struct {
  float *d_x, *d_vals;
  int32_t *d_idx;
  int rows, n, k;
} TopK;

static void
top_k_launch (gpointer data)
{
  TopK *t = data;
  dfl_cuda_top_k (dev, t->d_x, t->rows, t->n, t->n, t->k, t->d_vals, t->d_idx);
}

static void
argmax_launch (gpointer data)
{
  TopK *t = data;
  dfl_cuda_argmax (dev, t->d_x, t->rows, t->n, t->n, t->d_idx);
}

int
main (int argc, char **argv)
{
  GError *error = NULL;
  const int shapes[][2] = { { 4096, 12288 }, { 12288, 4096 }, { 4096, 4096 }, { 4096, 1024 },
                            { 4096, 151936 } };
  const int rows[] = { 1, 16, 512 };
  const struct {
    DflCudaMatmulPath path;
    const char *name;
  } paths[] = { { DFL_CUDA_MATMUL_ONE_ROW, "one-row" }, { DFL_CUDA_MATMUL_FEW_ROWS, "few-rows" },
                { DFL_CUDA_MATMUL_CUBLAS, "cuBLAS" } };
  double copy, read;

  dev = dfl_cuda_device_open (0, &error);
  check (error);
  copy = dfl_cuda_copy_bandwidth (dev, (size_t) 512 << 20, &error);
  check (error);
  read = dfl_cuda_read_bandwidth (dev, (size_t) 1 << 30, &error);
  check (error);
  printf ("device: %s\n", dfl_cuda_device_describe (dev));
  printf ("device-to-device copy of 512 MiB: %.0f GB/s (bytes copied; each is read and "
          "written)\n", copy / 1e9);
  printf ("pure read of 1 GiB: %.0f GB/s (the rate a step's weights can stream at)\n\n",
          read / 1e9);

  printf ("BF16 matmul y = x·Wᵀ, median of %d calls, each path that takes the rows "
          "(* what dfl_cuda_matmul picks)\n", CALLS);
  printf ("%6s %7s %5s %10s %10s %12s %10s %10s\n", "in", "out", "rows", "path", "µs/call",
          "weight GB/s", "÷ read", "TFLOP/s");
  for (guint s = 0; s < G_N_ELEMENTS (shapes); s++) {
    int in = shapes[s][0], out = shapes[s][1];
    size_t nw = (size_t) in * out;
    Matmul m = { { alloc (nw * 2), DFL_DTYPE_BF16, out, in } };
    dfl_cuda_fill_random (dev, (void *) m.w.d_data, DFL_DTYPE_BF16, nw, 1, 0.02f);
    for (guint r = 0; r < G_N_ELEMENTS (rows); r++) {
      m.rows = rows[r];
      m.d_x = alloc (sizeof (float) * m.rows * in);
      m.d_y = alloc (sizeof (float) * m.rows * out);
      m.d_scratch = alloc ((size_t) m.rows * in * 2);
      dfl_cuda_fill_random (dev, m.d_x, DFL_DTYPE_F32, (size_t) m.rows * in, 2, 1.0f);
      for (guint p = 0; p < G_N_ELEMENTS (paths); p++) {
        double ms, wbps;
        m.path = paths[p].path;
        if (!dfl_cuda_matmul_path (dev, m.path, &m.w, m.d_x, m.rows, in, m.d_y, out, out,
                                   FALSE, m.d_scratch))
          continue;
        ms = time_ms (matmul_launch, &m);
        wbps = nw * 2 / (ms / 1e3);
        printf ("%6d %7d %5d %9s%s %10.1f %12.0f %10.2f %10.1f\n", in, out, m.rows,
                paths[p].name, dfl_cuda_matmul_choice (&m.w, m.rows) == m.path ? "*" : " ", ms * 1e3, wbps / 1e9,
                wbps / read, 2.0 * m.rows * nw / (ms / 1e3) / 1e12);
      }
      dfl_cuda_free (dev, m.d_x);
      dfl_cuda_free (dev, m.d_y);
      dfl_cuda_free (dev, m.d_scratch);
    }
    dfl_cuda_free (dev, (void *) m.w.d_data);
  }

  printf ("\nproducts of one x (q, k, v: 4096 → 4096, 1024, 1024; gate, up: 4096 → 12288 "
          "twice), BF16: one call of dfl_cuda_matmul_group against a call a product\n");
  printf ("%10s %5s %12s %12s %16s\n", "products", "rows", "grouped µs", "a call µs",
          "grouped ÷ read");
  for (int set = 0; set < 2; set++)
    for (int ri = 0; ri < 2; ri++) {
      const int qkv[] = { 4096, 1024, 1024 }, gu[] = { 12288, 12288 };
      Group g = { .n = set ? 2 : 3, .rows = ri ? 16 : 1 };
      size_t bytes = 0;
      double grouped, each;
      g.d_x = alloc (sizeof (float) * g.rows * 4096);
      g.d_scratch = alloc ((size_t) g.rows * 4096 * 2);
      dfl_cuda_fill_random (dev, g.d_x, DFL_DTYPE_F32, (size_t) g.rows * 4096, 7, 1.0f);
      for (int i = 0; i < g.n; i++) {
        int out = set ? gu[i] : qkv[i];
        g.w[i] = (DflCudaWeights) { alloc ((size_t) out * 4096 * 2), DFL_DTYPE_BF16, out, 4096 };
        dfl_cuda_fill_random (dev, (void *) g.w[i].d_data, DFL_DTYPE_BF16, (size_t) out * 4096,
                              8 + i, 0.02f);
        g.d_y[i] = alloc (sizeof (float) * g.rows * out);
        g.ldy[i] = g.n_out[i] = out;
        bytes += (size_t) out * 4096 * 2;
      }
      g.grouped = TRUE;
      grouped = time_ms (group_launch, &g);
      g.grouped = FALSE;
      each = time_ms (group_launch, &g);
      printf ("%10s %5d %12.1f %12.1f %16.2f\n", set ? "gate, up" : "q, k, v", g.rows,
              grouped * 1e3, each * 1e3, bytes / (grouped / 1e3) / read);
      for (int i = 0; i < g.n; i++) {
        dfl_cuda_free (dev, (void *) g.w[i].d_data);
        dfl_cuda_free (dev, g.d_y[i]);
      }
      dfl_cuda_free (dev, g.d_x);
      dfl_cuda_free (dev, g.d_scratch);
    }

  printf ("\n");
  /* an F32 cache and a BF16 one, each shape in turn */
  for (int at = 0; at < 8; at++) {
    const int keys = at % 4 < 2 ? 1024 : 4096;
    Attention a = { .rows = at % 2 ? 1 : 16, .heads = 32, .kv_heads = 8, .hd = 128,
                    .keys = keys, .bf16 = at >= 4 };
    DflDtype kv = a.bf16 ? DFL_DTYPE_BF16 : DFL_DTYPE_F32;
    size_t nkv = (size_t) keys * a.kv_heads * a.hd, nq = (size_t) a.rows * a.heads * a.hd;
    double kv_bytes = 2.0 * nkv * dfl_dtype_size (kv);
    int32_t lo[16], hi[16];
    double ms;
    for (int r = 0; r < a.rows; r++) {
      lo[r] = 0;
      hi[r] = keys - a.rows + r + 1;   /* causal: the block's rows at the end */
    }
    a.d_q = alloc (sizeof (float) * nq);
    a.d_out = alloc (sizeof (float) * nq);
    a.d_k = alloc (dfl_dtype_size (kv) * nkv);
    a.d_v = alloc (dfl_dtype_size (kv) * nkv);
    a.d_lo = alloc (sizeof lo);
    a.d_hi = alloc (sizeof hi);
    dfl_cuda_fill_random (dev, a.d_q, DFL_DTYPE_F32, nq, 3, 1.0f);
    dfl_cuda_fill_random (dev, a.d_k, kv, nkv, 4, 1.0f);
    dfl_cuda_fill_random (dev, a.d_v, kv, nkv, 5, 1.0f);
    dfl_cuda_upload (dev, a.d_lo, lo, sizeof lo, &error);
    check (error);
    dfl_cuda_upload (dev, a.d_hi, hi, sizeof hi, &error);
    check (error);
    ms = time_ms (attention_launch, &a);
    printf ("attention, %d rows × %d heads (%d kv heads, head_dim %d) over %d keys: "
            "%.1f µs; the %s cache's %.0f MB at %.0f GB/s (÷ read %.2f)\n",
            a.rows, a.heads, a.kv_heads, a.hd, keys, ms * 1e3, dfl_dtype_name (kv),
            kv_bytes / 1e6, kv_bytes / (ms / 1e3) / 1e9, kv_bytes / (ms / 1e3) / read);
    dfl_cuda_free (dev, a.d_q);
    dfl_cuda_free (dev, a.d_out);
    dfl_cuda_free (dev, a.d_k);
    dfl_cuda_free (dev, a.d_v);
    dfl_cuda_free (dev, a.d_lo);
    dfl_cuda_free (dev, a.d_hi);
  }

  {
    TopK t = { .rows = 16, .n = 151936, .k = 8 };
    double ms_top, ms_arg;
    t.d_x = alloc (sizeof (float) * t.rows * t.n);
    t.d_vals = alloc (sizeof (float) * t.rows * 64);
    t.d_idx = alloc (sizeof (int32_t) * t.rows * 64);
    dfl_cuda_fill_random (dev, t.d_x, DFL_DTYPE_F32, (size_t) t.rows * t.n, 6, 8.0f);
    ms_arg = time_ms (argmax_launch, &t);
    ms_top = time_ms (top_k_launch, &t);
    printf ("\n%d rows of %d logits: argmax %.1f µs, top-%d %.1f µs", t.rows, t.n, ms_arg * 1e3,
            t.k, ms_top * 1e3);
    t.k = 64;
    ms_top = time_ms (top_k_launch, &t);
    printf (", top-%d %.1f µs\n", t.k, ms_top * 1e3);
    dfl_cuda_free (dev, t.d_x);
    dfl_cuda_free (dev, t.d_vals);
    dfl_cuda_free (dev, t.d_idx);
  }

  dfl_cuda_sync (dev, &error);
  check (error);
  dfl_cuda_device_unref (dev);
  return 0;
}
