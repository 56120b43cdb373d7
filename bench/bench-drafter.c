/* gst-dflash — bench-drafter: the CPU drafter at the public Qwen3-8B DFlash
 * drafter's geometry (hidden 4096, 5 layers, 32 heads over 8, head_dim 128,
 * intermediate 12288, five taps, block 16) plus a convolution (kernel 4,
 * group 8) and a selector (rank 64, top 8, vocab 151936), random weights
 * made in memory: matrices BF16 as a released drafter stores them (and as
 * the drafter reads them, in place), vectors F32, codebooks F16.
 *
 * Prints the block's latency (median; its head scores only selector_top
 * rows, so the figure is the drafter's, the target's head left out), the
 * settle throughput of a 512-row batch, and the memory-bandwidth floor measured in the same run: the bytes
 * a block streams, as stored (every weight but FC, which only settling
 * reads, and the codebooks, read a row at a time), over the bandwidth of a
 * large memcpy (bench-common's probe; its streaming-read probe gives the
 * tighter floor).
 *
 *   bench-drafter [--small] [--blocks N]
 */
#include "drafter.h"
#include "bench-common.h"
#include "bench-drafter-weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int
main (int argc, char **argv)
{
  static int taps_big[] = { 1, 9, 17, 25, 33 }, taps_small[] = { 1, 3, 5 };
  DflDrafterGeometry g = {
    .hidden = 4096, .intermediate = 12288, .layers = 5, .heads = 32, .kv_heads = 8, .head_dim = 128,
    .vocab = 151936, .block = 16, .mask_token = 151669, .conv_group = 8, .conv_kernel = 4,
    .selector_rank = 64, .selector_top = 8, .n_taps = 5, .taps = taps_big, .target_layers = 36,
    .window = 0, .rope_theta = 1000000.0, .eps = 1e-6,
  };
  gboolean small = FALSE;
  int n_blocks = 7, ctx_rows = 512, tw, rows;
  GError *error = NULL;
  DflDrafterWeights *d, *bound;
  DflDraftCtx *ctx;
  DflDraftTrunk trunk;
  DflTensor out;
  guint64 fc_bytes, book_bytes;
  double t0, bw, rbw, t_fill, settle[3], blocks[64], sel[5];
  guint64 total, streamed;
  float *taps, *block, *logits;
  guint16 *table;
  guint32 *chosen;

  for (int i = 1; i < argc; i++) {
    if (strcmp (argv[i], "--small") == 0) {
      small = TRUE;
    } else if (strcmp (argv[i], "--blocks") == 0 && i + 1 < argc) {
      /* CLAMP evaluates its argument more than once: read it first */
      n_blocks = atoi (argv[++i]);
      n_blocks = CLAMP (n_blocks, 1, 64);
    } else {
      fprintf (stderr, "usage: %s [--small] [--blocks N]\n", argv[0]);
      return 2;
    }
  }
  if (small) {
    g.hidden = 512, g.intermediate = 1536, g.layers = 2, g.heads = 8, g.kv_heads = 4, g.head_dim = 64;
    g.vocab = 8192, g.mask_token = 8191, g.selector_rank = 16, g.n_taps = 3, g.taps = taps_small;
    g.target_layers = 8;
    n_blocks = MAX (n_blocks, 21);
  }
  tw = dfl_drafter_geometry_tap_width (&g);
  rows = g.block;

  t0 = dfl_bench_now ();
  if (!(d = dfl_bench_drafter_random (&g, DFL_DTYPE_BF16, &fc_bytes, &book_bytes, &error))) {
    fprintf (stderr, "%s\n", error->message);
    return 1;
  }
  t_fill = dfl_bench_now () - t0;
  total = dfl_drafter_weights_bytes (d);
  streamed = total - fc_bytes - book_bytes;
  printf ("geometry: %s — hidden %d, %d layers, %d heads over %d, head_dim %d, intermediate %d,"
          " %d taps, block %d, conv kernel %d group %d, selector rank %d top %d, vocab %d\n",
          small ? "small" : "Qwen3-8B DFlash", g.hidden, g.layers, g.heads, g.kv_heads, g.head_dim,
          g.intermediate, g.n_taps, g.block, g.conv_kernel, g.conv_group, g.selector_rank,
          g.selector_top, g.vocab);
  printf ("weights: %.3f GB as stored (matrices BF16, vectors F32, codebooks F16), made in %.1f s;"
          " a block streams %.3f GB (all but FC and the codebooks)\n", total / 1e9, t_fill, streamed / 1e9);

  bw = dfl_bench_copy_bandwidth (small ? 256 : 1024);
  rbw = dfl_bench_read_bandwidth (small ? 256 : 1024);
  printf ("bandwidth: memcpy %.2f GB/s (bytes copied), streaming read %.2f GB/s\n", bw / 1e9, rbw / 1e9);

  /* the target's embedding and (tied) head, BF16: zero pages but for the
   * rows the blocks read (each block's anchor, the mask), random */
  table = g_malloc0 ((gsize) g.vocab * g.hidden * sizeof (guint16));
  for (int r = 0; r <= n_blocks + g.selector_top; r++)
    for (int j = 0; j < g.hidden; j++)
      table[(gsize) (r == n_blocks + g.selector_top ? (int) g.mask_token : r) * g.hidden + j]
          = dfl_f32_to_bf16 (dfl_bench_rnd ());
  trunk.embed = dfl_tensor_2d (NULL, table, 0, DFL_DTYPE_BF16, g.vocab, g.hidden);
  trunk.head = trunk.embed;
  if (!(bound = dfl_drafter_weights_bind (d, NULL, &trunk, DFL_DTYPE_F32, &error))
      || !(ctx = dfl_draft_ctx_new (bound, &error))) {
    fprintf (stderr, "%s\n", error->message);
    return 1;
  }

  /* settle: a 512-row prompt, one batch through each matrix */
  taps = g_new (float, (gsize) ctx_rows * tw);
  for (gsize i = 0; i < (gsize) ctx_rows * tw; i++)
    taps[i] = dfl_bench_rnd ();
  for (int i = 0; i < 3; i++) {
    dfl_draft_ctx_reset (ctx);
    if (!dfl_draft_ctx_queue_host (ctx, 0, taps, ctx_rows, &error)) {
      fprintf (stderr, "%s\n", error->message);
      return 1;
    }
    t0 = dfl_bench_now ();
    if (!dfl_draft_ctx_settle (ctx, &error)) {
      fprintf (stderr, "%s\n", error->message);
      return 1;
    }
    settle[i] = dfl_bench_now () - t0;
  }
  printf ("settle: %d rows in %.3f s (median of 3): %.0f rows/s\n", ctx_rows, dfl_bench_median (settle, 3),
          ctx_rows / dfl_bench_median (settle, 3));

  /* blocks over that context, each from another anchor; the first one
   * warms up */
  block = g_malloc (dfl_draft_ctx_block_bytes (ctx, g.selector_top));
  out = dfl_tensor_2d (NULL, block, 0, DFL_DTYPE_F32, rows - 1, g.hidden + g.selector_top);
  for (int i = 0; i <= n_blocks; i++) {
    t0 = dfl_bench_now ();
    if (!dfl_draft_ctx_block (ctx, ctx_rows, (guint32) i, g.selector_top, &out, &error)) {
      fprintf (stderr, "%s\n", error->message);
      return 1;
    }
    if (i > 0)
      blocks[i - 1] = dfl_bench_now () - t0;
  }
  {
    double med = dfl_bench_median (blocks, n_blocks);
    double floor_streamed = streamed / bw, floor_total = total / bw;
    printf ("block: %.1f ms (median of %d, min %.1f, max %.1f), context %d rows\n", med * 1e3, n_blocks,
            blocks[0] * 1e3, blocks[n_blocks - 1] * 1e3, ctx_rows);
    printf ("floor: %.1f ms (streamed bytes / memcpy rate); block / floor = %.2f\n",
            floor_streamed * 1e3, med / floor_streamed);
    printf ("       %.1f ms (all weight bytes / memcpy rate); %.1f ms (streamed bytes / read rate):"
            " block / read floor = %.2f\n", floor_total * 1e3, streamed / rbw * 1e3, med / (streamed / rbw));
  }

  /* the selector over the full vocabulary (logits made up: the head is the target's) */
  logits = g_new (float, (gsize) (rows - 1) * g.vocab);
  chosen = g_new (guint32, rows - 1);
  for (gsize j = 0; j < (gsize) (rows - 1) * g.vocab; j++)
    logits[j] = dfl_bench_rnd ();
  for (int i = 0; i < 5; i++) {
    t0 = dfl_bench_now ();
    dfl_drafter_weights_select (d, block, rows - 1, logits, g.vocab, 0, chosen, NULL);
    sel[i] = dfl_bench_now () - t0;
  }
  printf ("select: %d rows over %d logits in %.2f ms (median of 5)\n", rows - 1, g.vocab, dfl_bench_median (sel, 5) * 1e3);

  g_free (taps);
  g_free (block);
  g_free (logits);
  g_free (chosen);
  dfl_draft_ctx_free (ctx);
  dfl_drafter_weights_unref (bound);
  dfl_drafter_weights_unref (d);
  g_free (table);
  return 0;
}
