/* gst-dflash — bench-vk-drafter: the drafter on a Vulkan device next to the
 * CPU drafter, same geometry, same random weights, same context, one run.
 *
 * Geometries: by default a small one that suits a software device on a few
 * cores (hidden 512, 2 layers, 8 heads over 4, head_dim 64, intermediate
 * 1536, three taps, block 16, vocab 8192); with --big the public Qwen3-8B
 * DFlash drafter's (bench-drafter.c: hidden 4096, 5 layers, 32 heads over
 * 8, head_dim 128, intermediate 12288, five taps, block 16, vocab 151936).
 * Both with a convolution (kernel 4, group 8) and a selector (top 8).
 * Matrices BF16 as released drafters store them, the target's embedding and
 * head BF16 too; vectors F32, codebooks F16.
 *
 * Prints, for each path: settle throughput of a 512-row prompt, the block
 * (layers, last norm, and a head of selector_top rows only) and the whole
 * draft (block, head over the full vocabulary, selector; on the device only
 * the ids come back), medians; then the ratios CPU / Vulkan. Both paths
 * are the same calls (drafter.h) on contexts bound to either back end.
 *
 *   bench-vk-drafter [--big] [--blocks N] [--device N]
 */
#include "drafter.h"
#include "dfl-kernels.h"
#include "dfl-vk.h"
#include "bench-common.h"
#include "safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static guint64 rng_state = 0x9e3779b97f4a7c15ull;

static inline float
rnd (void)
{
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return (float) ((rng_state * 0x2545f4914f6cdd1dull) >> 40) / (float) (1 << 24) - 0.5f;
}

static void
fill (const char *name, DflDtype dtype, gsize n, void *data, gboolean writable, gpointer user)
{
  g_assert (writable);
  if (dtype == DFL_DTYPE_F16) {
    for (gsize i = 0; i < n; i++)
      ((guint16 *) data)[i] = dfl_f32_to_f16 (rnd ());
  } else if (dtype == DFL_DTYPE_BF16) {
    for (gsize i = 0; i < n; i++)
      ((guint16 *) data)[i] = dfl_f32_to_bf16 (0.05f * rnd ());
  } else if (strstr (name, "norm")) {
    for (gsize i = 0; i < n; i++)
      ((float *) data)[i] = 1.0f + 0.1f * rnd ();
  } else {
    for (gsize i = 0; i < n; i++)
      ((float *) data)[i] = 0.05f * rnd ();
  }
}

static guint16 *
bf16_table (gsize n, float scale)
{
  guint16 *t = g_new (guint16, n);

  for (gsize i = 0; i < n; i++)
    t[i] = dfl_f32_to_bf16 (scale * rnd ());
  return t;
}

static int
cmp_double (const void *a, const void *b)
{
  double x = *(const double *) a, y = *(const double *) b;
  return (x > y) - (x < y);
}

static double
median (double *v, int n)
{
  qsort (v, n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void
die (GError *error)
{
  fprintf (stderr, "bench-vk-drafter: %s\n", error->message);
  exit (1);
}

int
main (int argc, char **argv)
{
  static int taps_big[] = { 1, 9, 17, 25, 33 }, taps_small[] = { 1, 3, 5 };
  DflDrafterGeometry g = {
    .hidden = 512, .intermediate = 1536, .layers = 2, .heads = 8, .kv_heads = 4, .head_dim = 64,
    .vocab = 8192, .block = 16, .mask_token = 8191, .conv_group = 8, .conv_kernel = 4,
    .selector_rank = 16, .selector_top = 8, .n_taps = 3, .taps = taps_small, .target_layers = 8,
    .window = 0, .rope_theta = 1000000.0, .eps = 1e-6,
  };
  gboolean big = FALSE;
  int n_blocks = 9, device = -1, ctx_rows = 512, tw, rows, hs;
  GError *error = NULL;
  DflDrafterWeights *d, *cpu_w, *vk_w;
  DflDevice *dev;
  DflDraftCtx *cpu, *vk;
  DflDraftTrunk trunk;
  DflTensor cpu_out, vk_out;
  gpointer vk_mem;
  guint16 *embed, *head;
  float *taps, *block;
  guint32 *chosen, *vchosen;
  double t0, t_fill, cpu_settle[3], vk_settle[3], cpu_block[64], cpu_draft[64], vk_block[64],
         vk_draft[64];
  int same = 0;

  for (int i = 1; i < argc; i++) {
    if (strcmp (argv[i], "--big") == 0) {
      big = TRUE;
    } else if (strcmp (argv[i], "--blocks") == 0 && i + 1 < argc) {
      n_blocks = atoi (argv[++i]);
      n_blocks = CLAMP (n_blocks, 1, 64);
    } else if (strcmp (argv[i], "--device") == 0 && i + 1 < argc) {
      device = atoi (argv[++i]);
    } else {
      fprintf (stderr, "usage: %s [--big] [--blocks N] [--device N]\n", argv[0]);
      return 2;
    }
  }
  if (big) {
    g.hidden = 4096, g.intermediate = 12288, g.layers = 5, g.heads = 32, g.kv_heads = 8;
    g.head_dim = 128, g.vocab = 151936, g.mask_token = 151669, g.selector_rank = 64;
    g.n_taps = 5, g.taps = taps_big, g.target_layers = 36;
  }
  tw = dfl_drafter_geometry_tap_width (&g);
  rows = g.block;
  hs = g.hidden;

  if (!(dev = dfl_device_open (DFL_BACKEND_VULKAN, device, &error)))
    die (error);
  t0 = dfl_bench_now ();
  if (!(d = dfl_drafter_weights_new_blank_as (&g, TRUE, TRUE, DFL_DTYPE_BF16, &error)))
    die (error);
  dfl_drafter_weights_foreach (d, fill, NULL);
  embed = bf16_table ((gsize) g.vocab * hs, 1.0f);
  head = bf16_table ((gsize) g.vocab * hs, 0.05f);
  trunk.embed = dfl_tensor_2d (NULL, embed, 0, DFL_DTYPE_BF16, g.vocab, hs);
  trunk.head = dfl_tensor_2d (NULL, head, 0, DFL_DTYPE_BF16, g.vocab, hs);
  t_fill = dfl_bench_now () - t0;
  printf ("geometry: %s — hidden %d, %d layers, %d heads over %d, head_dim %d, intermediate %d,"
          " %d taps, block %d, conv kernel %d group %d, selector rank %d top %d, vocab %d\n",
          big ? "Qwen3-8B DFlash" : "small", g.hidden, g.layers, g.heads, g.kv_heads, g.head_dim,
          g.intermediate, g.n_taps, g.block, g.conv_kernel, g.conv_group, g.selector_rank,
          g.selector_top, g.vocab);
  printf ("weights: drafter %.3f GB, embedding and head %.3f GB (BF16), made in %.1f s\n",
          dfl_drafter_weights_bytes (d) / 1e9, 2.0 * g.vocab * hs * 2 / 1e9, t_fill);
  printf ("device: %s\n", dfl_device_describe (dev));
  if (!(cpu_w = dfl_drafter_weights_bind (d, NULL, &trunk, DFL_DTYPE_F32, &error))
      || !(cpu = dfl_draft_ctx_new (cpu_w, &error)))
    die (error);
  t0 = dfl_bench_now ();
  /* the matrices go up as stored (BF16) */
  if (!(vk_w = dfl_drafter_weights_bind (d, dev, &trunk, dfl_drafter_weights_stored_dtype (d),
                                         &error))
      || !(vk = dfl_draft_ctx_new (vk_w, &error)))
    die (error);
  printf ("upload: %.3f GB in %.2f s\n", dfl_drafter_weights_bytes (vk_w) / 1e9,
          dfl_bench_now () - t0);
  block = g_malloc (dfl_draft_ctx_block_bytes (cpu, g.vocab));
  cpu_out = dfl_tensor_2d (NULL, block, 0, DFL_DTYPE_F32, rows - 1, hs + g.vocab);
  if (!(vk_mem = dfl_device_alloc (dev, dfl_draft_ctx_block_bytes (vk, g.vocab), &error)))
    die (error);
  vk_out = dfl_tensor_2d (dev, vk_mem, 0, DFL_DTYPE_F32, rows - 1, hs + g.vocab);

  /* settle: a 512-row prompt, both paths */
  taps = g_new (float, (gsize) ctx_rows * tw);
  for (gsize i = 0; i < (gsize) ctx_rows * tw; i++)
    taps[i] = rnd ();
  for (int i = 0; i < 3; i++) {
    DflDraftCtx *c[2] = { cpu, vk };
    double *t[2] = { cpu_settle, vk_settle };
    for (int k = 0; k < 2; k++) {
      dfl_draft_ctx_reset (c[k]);
      if (!dfl_draft_ctx_queue_host (c[k], 0, taps, ctx_rows, &error))
        die (error);
      t0 = dfl_bench_now ();
      if (!dfl_draft_ctx_settle (c[k], &error))
        die (error);
      t[k][i] = dfl_bench_now () - t0;
    }
  }

  /* blocks over that context, anchors at its end; the first of each warms
   * up. The block's head scores selector_top rows (the block's own cost);
   * the draft's the whole vocabulary, then the selector */
  chosen = g_new (guint32, rows - 1);
  vchosen = g_new (guint32, rows - 1);
  for (int i = 0; i <= n_blocks; i++) {
    guint32 anchor = (guint32) (i * 7919) % (guint32) g.vocab;
    DflDraftCtx *c[2] = { cpu, vk };
    const DflTensor *out[2] = { &cpu_out, &vk_out };
    guint32 *ids[2] = { chosen, vchosen };
    double *tb[2] = { cpu_block, vk_block }, *td[2] = { cpu_draft, vk_draft };
    for (int k = 0; k < 2; k++) {
      double t1;
      t0 = dfl_bench_now ();
      if (!dfl_draft_ctx_block (c[k], ctx_rows, anchor, g.selector_top, out[k], &error))
        die (error);
      t1 = dfl_bench_now ();
      if (!dfl_draft_ctx_draft (c[k], ctx_rows, anchor, g.vocab, out[k], ids[k], NULL, &error))
        die (error);
      if (i > 0) {
        tb[k][i - 1] = t1 - t0;
        td[k][i - 1] = dfl_bench_now () - t1;
      }
    }
    same += memcmp (chosen, vchosen, sizeof (guint32) * (rows - 1)) == 0;
  }
  {
    double cs = median (cpu_settle, 3), vs = median (vk_settle, 3);
    double cb = median (cpu_block, n_blocks), vb = median (vk_block, n_blocks);
    double cd = median (cpu_draft, n_blocks), vdr = median (vk_draft, n_blocks);
    printf ("\n%-44s %14s %14s %10s\n", "", "CPU", "Vulkan", "CPU/Vulkan");
    printf ("%-44s %14.0f %14.0f %10.2f\n", "settle, 512-row prompt (rows/s, median of 3)",
            ctx_rows / cs, ctx_rows / vs, vs > 0 ? cs / vs : 0.0);
    printf ("%-44s %14.2f %14.2f %10.2f\n", "block: layers + last norm (ms, median)", cb * 1e3,
            vb * 1e3, cb / vb);
    printf ("%-44s %14.2f %14.2f %10.2f\n", "draft: block + full head + selector (ms)", cd * 1e3,
            vdr * 1e3, cd / vdr);
    printf ("(medians of %d blocks after one to warm up; context %d rows; the Vulkan draft"
            " includes the ids' read-back; identical drafts in %d of %d blocks)\n",
            n_blocks, ctx_rows, same, n_blocks + 1);
  }

  g_free (taps);
  g_free (block);
  g_free (chosen);
  g_free (vchosen);
  dfl_device_free (dev, vk_mem);
  dfl_draft_ctx_free (cpu);
  dfl_draft_ctx_free (vk);
  dfl_drafter_weights_unref (cpu_w);
  dfl_drafter_weights_unref (vk_w);
  dfl_drafter_weights_unref (d);
  g_free (embed);
  g_free (head);
  dfl_device_unref (dev);
  return 0;
}
