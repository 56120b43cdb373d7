/* gst-dflash — the CUDA drafter's block, settle and select times against
 * the card's bandwidth floor.
 *
 *   bench-cuda-drafter [--context N] [--width N] [--steps N] [--type bf16|f16|f32] [--device N]
 *                      [--small]
 *
 * The public Qwen3-8B DFlash drafter's geometry with this project's
 * convolution and selector (bench/bench-drafter.c's numbers: hidden 4096,
 * 5 layers, 32 heads over 8, head_dim 128, intermediate 12288, block 16,
 * conv_group 8, kernel 4, selector rank 64, top 8, five taps) over a
 * Qwen3-8B-shaped embedding and head (vocab 151936, untied), every weight
 * random and made on the card (no files). A context of --context rows
 * (default 512) is settled, then it times, --steps times each (default 32)
 * after a warm-up, and prints medians:
 *   - a block (graph and direct launches) against its floor: the bytes it
 *     streams (the layers' matrices, the head's first --width rows, default
 *     the whole vocabulary) over the device-to-device copy bandwidth
 *     measured in the same run; the goal is at most 2× the floor;
 *   - settle: rows/s for batches of 16 and 512 rows (device taps);
 *   - select: the selector's projection, top-k and re-scoring, ids back.
 * --small: bench/bench-drafter.c's small geometry (hidden 512, 2 layers,
 * vocab 8192), a quick look. A benchmark, not a test: it asserts nothing
 * about time.
 */
#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench-common.h"
#include "bench-drafter-weights.h"
#include "dfl-cuda.h"

static int
die (GError *error)
{
  fprintf (stderr, "bench-cuda-drafter: %s\n", error->message);
  g_error_free (error);
  return 1;
}

/* Bytes a block streams: each layer's matrices, the head's first `width`
 * rows (the embedding's block rows and the norms are noise). */
static double
block_bytes (const DflDrafterGeometry *g, DflDtype type, int width)
{
  double es = (double) dfl_dtype_size (type), hs = g->hidden;
  double qd = (double) g->heads * g->head_dim, kd = (double) g->kv_heads * g->head_dim;
  double kproj = 2.0 * g->conv_kernel * (g->hidden / g->conv_group);
  double layer = hs * qd * 2 + hs * kd * 2 + 3 * hs * g->intermediate + 2 * kproj * hs;

  return (layer * g->layers + (double) width * hs) * es;
}

int
main (int argc, char **argv)
{
  static int taps[] = { 1, 9, 17, 25, 33 }, taps_small[] = { 1, 3, 5 };
  DflDrafterGeometry g = {
    .hidden = 4096, .intermediate = 12288, .layers = 5, .heads = 32, .kv_heads = 8, .head_dim = 128,
    .vocab = 151936, .block = 16, .mask_token = 151669, .conv_group = 8, .conv_kernel = 4,
    .selector_rank = 64, .selector_top = 8, .n_taps = 5, .taps = taps, .target_layers = 36,
    .window = 0, .rope_theta = 1000000.0, .eps = 1e-6,
  };
  int context = 512, width = 0, steps = 32, ordinal = 0;
  gboolean small = FALSE;
  DflDtype type = DFL_DTYPE_BF16;
  GError *error = NULL;
  DflCudaDevice *dev;
  DflDevice *cuda;
  DflDrafterWeights *cd, *host_w;
  DflDraftCtx *ctx;
  DflDraftTrunk trunk;
  DflTensor taps_16, taps_512, out;
  void *d_trunk;
  float *d_taps, *d_out;
  gsize trunk_bytes, tw;
  double bw, floor_s, kv_bytes, *t, graph_s = 0, direct_s = 0, settle16 = 0, settle512 = 0;
  double select_s;
  guint32 *chosen;

  for (int i = 1; i < argc; i++) {
    if (strcmp (argv[i], "--context") == 0 && i + 1 < argc) {
      context = atoi (argv[++i]);
    } else if (strcmp (argv[i], "--width") == 0 && i + 1 < argc) {
      width = atoi (argv[++i]);
    } else if (strcmp (argv[i], "--steps") == 0 && i + 1 < argc) {
      steps = atoi (argv[++i]);
    } else if (strcmp (argv[i], "--device") == 0 && i + 1 < argc) {
      ordinal = atoi (argv[++i]);
    } else if (strcmp (argv[i], "--small") == 0) {
      small = TRUE;
    } else if (strcmp (argv[i], "--type") == 0 && i + 1 < argc) {
      const char *s = argv[++i];
      if (strcmp (s, "bf16") == 0)
        type = DFL_DTYPE_BF16;
      else if (strcmp (s, "f16") == 0)
        type = DFL_DTYPE_F16;
      else if (strcmp (s, "f32") == 0)
        type = DFL_DTYPE_F32;
      else
        goto usage;
    } else {
      goto usage;
    }
  }
  if (small) {
    g.hidden = 512, g.intermediate = 1536, g.layers = 2, g.heads = 8, g.kv_heads = 4;
    g.head_dim = 64;
    g.vocab = 8192, g.mask_token = 8191, g.selector_rank = 16, g.n_taps = 3, g.taps = taps_small;
    g.target_layers = 8;
  }
  if (width == 0)
    width = g.vocab;
  if (context < 1 || context > 1 << 20 || width < g.selector_top || width > g.vocab || steps < 1
      || steps > 10000)
    goto usage;

  if (!(dev = dfl_cuda_device_open (ordinal, &error))
      || !(cuda = dfl_device_wrap (DFL_BACKEND_CUDA, dev, &error)))
    return die (error);
  printf ("device: %s\n", dfl_cuda_device_describe (dev));
  printf ("geometry: %s — hidden %d, %d layers, %d heads over %d, head_dim %d,"
          " intermediate %d, block %d, conv %d×%d, selector %d top %d, vocab %d; %s weights\n",
          small ? "small" : "Qwen3-8B DFlash", g.hidden, g.layers, g.heads, g.kv_heads,
          g.head_dim, g.intermediate, g.block, g.conv_kernel, g.conv_group, g.selector_rank,
          g.selector_top, g.vocab,
          type == DFL_DTYPE_BF16 ? "BF16" : type == DFL_DTYPE_F16 ? "F16" : "F32");

  /* the target's embedding and head, untied, in the weights' type */
  trunk_bytes = (gsize) g.vocab * g.hidden * dfl_dtype_size (type);
  if (!(d_trunk = dfl_cuda_alloc (dev, 2 * trunk_bytes, &error)))
    return die (error);
  dfl_cuda_fill_random (dev, d_trunk, type, (gsize) g.vocab * g.hidden, 1, 1.0f);
  dfl_cuda_fill_random (dev, (guint8 *) d_trunk + trunk_bytes, type, (gsize) g.vocab * g.hidden,
                        2, 0.03f);
  trunk.embed = dfl_tensor_2d (cuda, d_trunk, 0, type, g.vocab, g.hidden);
  trunk.head = dfl_tensor_2d (cuda, d_trunk, trunk_bytes, type, g.vocab, g.hidden);
  /* random weights made on the host, uploaded as `type` */
  if (!(host_w = dfl_bench_drafter_random (&g, type, NULL, NULL, &error))
      || !(cd = dfl_drafter_weights_bind (host_w, cuda, &trunk, type, &error))
      || !(ctx = dfl_draft_ctx_new (cd, &error)))
    return die (error);
  dfl_drafter_weights_unref (host_w);

  /* the context's rows: random taps made on the card */
  tw = (gsize) dfl_drafter_geometry_tap_width (&g);
  if (!(d_taps = dfl_cuda_alloc (dev, (gsize) MAX (context, 512) * tw * sizeof (float), &error))
      || !(d_out = dfl_cuda_alloc (dev, dfl_draft_ctx_block_bytes (ctx, width), &error)))
    return die (error);
  out = dfl_tensor_2d (cuda, d_out, 0, DFL_DTYPE_F32, g.block - 1, g.hidden + width);
  taps_16 = dfl_tensor_2d (cuda, d_taps, 0, DFL_DTYPE_F32, 16, tw);
  taps_512 = dfl_tensor_2d (cuda, d_taps, 0, DFL_DTYPE_F32, 512, tw);
  dfl_cuda_fill_random (dev, d_taps, DFL_DTYPE_F32, (gsize) MAX (context, 512) * tw, 3, 1.0f);
  for (int done = 0; done < context; done += 512) {
    DflTensor rows = dfl_tensor_2d (cuda, d_taps, 0, DFL_DTYPE_F32, MIN (512, context - done), tw);
    if (!dfl_draft_ctx_queue (ctx, done, &rows, &error) || !dfl_draft_ctx_settle (ctx, &error))
      return die (error);
  }
  if (!dfl_cuda_sync (dev, &error))
    return die (error);

  bw = dfl_cuda_read_bandwidth (dev, (gsize) 1 << 30, &error);
  if (bw <= 0)
    return die (error);
  floor_s = block_bytes (&g, type, width) / bw;
  kv_bytes = (double) g.layers * context * g.kv_heads * g.head_dim * 4 * 2;

  t = g_new (double, steps);
  chosen = g_new (guint32, g.block - 1);
  /* a block: graph, then direct launches; a warm-up each (the graph's
   * capture is in its warm-up) */
  for (int mode = 0; mode < 2; mode++) {
    dfl_drafter_weights_set_graphs (cd, mode == 0);
    for (int i = -2; i < steps; i++) {
      double t0 = dfl_bench_now ();
      guint32 anchor = (guint32) (1000 + (i + 2) % 1000);
      if (!dfl_draft_ctx_block (ctx, context, anchor, width, &out, &error)
          || !dfl_cuda_sync (dev, &error))
        return die (error);
      if (i >= 0)
        t[i] = dfl_bench_now () - t0;
    }
    if (mode == 0)
      graph_s = dfl_bench_median (t, steps);
    else
      direct_s = dfl_bench_median (t, steps);
  }
  dfl_drafter_weights_set_graphs (cd, TRUE);

  /* select: the ids back on the host */
  for (int i = -2; i < steps; i++) {
    double t0 = dfl_bench_now ();
    if (!dfl_draft_ctx_select (ctx, &out, width, 1, chosen, NULL, &error))
      return die (error);
    if (i >= 0)
      t[i] = dfl_bench_now () - t0;
  }
  select_s = dfl_bench_median (t, steps);

  /* settle: rows at the context's end, rewound after each */
  for (int which = 0; which < 2; which++) {
    int n = which == 0 ? 16 : 512;
    for (int i = -2; i < steps; i++) {
      double t0 = dfl_bench_now ();
      if (!dfl_draft_ctx_queue (ctx, context, n == 16 ? &taps_16 : &taps_512, &error)
          || !dfl_draft_ctx_settle (ctx, &error) || !dfl_cuda_sync (dev, &error))
        return die (error);
      if (i >= 0)
        t[i] = dfl_bench_now () - t0;
      dfl_draft_ctx_truncate (ctx, context);
    }
    if (which == 0)
      settle16 = 16 / dfl_bench_median (t, steps);
    else
      settle512 = 512 / dfl_bench_median (t, steps);
  }

  printf ("read bandwidth: %.1f GB/s (a pure-read pass over 1 GiB)\n", bw / 1e9);
  printf ("block floor: %.1f MB (layers %.1f MB + head %d rows %.1f MB) / bandwidth = %.1f µs;"
          " the context's K/V (%d rows) adds %.1f MB\n",
          block_bytes (&g, type, width) / 1e6, block_bytes (&g, type, 0) / 1e6, width,
          (block_bytes (&g, type, width) - block_bytes (&g, type, 0)) / 1e6, floor_s * 1e6,
          context, kv_bytes / 1e6);
  printf ("\n%-28s %12s %12s\n", "", "median", "× floor");
  printf ("%-28s %10.1f µs %12.2f\n", "block (graph)", graph_s * 1e6, graph_s / floor_s);
  printf ("%-28s %10.1f µs %12.2f\n", "block (direct launches)", direct_s * 1e6,
          direct_s / floor_s);
  printf ("%-28s %10.1f µs %12s\n", "select (ids back)", select_s * 1e6, "");
  printf ("%-28s %10.0f rows/s\n", "settle, 16-row batches", settle16);
  printf ("%-28s %10.0f rows/s\n", "settle, 512-row batches", settle512);
  printf ("graph / direct: %.2f; goal: block ≤ 2× floor\n", graph_s / direct_s);

  g_free (t);
  g_free (chosen);
  dfl_cuda_free (dev, d_taps);
  dfl_cuda_free (dev, d_out);
  dfl_draft_ctx_free (ctx);
  dfl_drafter_weights_unref (cd);
  dfl_cuda_free (dev, d_trunk);
  dfl_device_unref (cuda);
  dfl_cuda_device_unref (dev);
  return 0;

usage:
  fprintf (stderr, "usage: %s [--context N] [--width N] [--steps N] [--type bf16|f16|f32]"
           " [--device N] [--small]\n", argv[0]);
  return 2;
}
