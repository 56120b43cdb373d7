/* gst-dflash — the blocks of several sequences in one pass against one
 * at a time, on the CPU.
 *
 *   bench-draft-batch [--target DIR] [--drafter FILE] [--context N] [--reps N]
 *
 * A target and its drafter (the default pair unless named) bound on the
 * CPU; 1, 2, 4, 8 and 16 contexts of --context rows each (default 256;
 * the target's taps of random prompts, so every context differs), each
 * count timed both ways: its blocks one after the other
 * (dfl_draft_ctx_block) and in one dfl_draft_ctx_block_batch, the median
 * of --reps (default 9) alternating rounds. Prints the time a block each
 * way and the ratio, measured in this run. A benchmark: it asserts
 * nothing about time (tests/drafter checks the batch's blocks are the
 * blocks alone, bit for bit).
 */
#include "drafter.h"
#include "target.h"
#include "bench-common.h"

#include <stdio.h>
#include <stdlib.h>

#define MAX_SEQ 16

int
main (int argc, char **argv)
{
  g_autofree char *target_dir = NULL, *drafter_path = NULL;
  int context = 256, reps = 9;
  GOptionEntry entries[] = {
    { "target", 0, 0, G_OPTION_ARG_FILENAME, &target_dir, "Qwen3 checkpoint folder or .gguf (default: the default pair's)", "DIR" },
    { "drafter", 0, 0, G_OPTION_ARG_FILENAME, &drafter_path, "DFlash sidecar (default: the target's)", "FILE" },
    { "context", 0, 0, G_OPTION_ARG_INT, &context, "Context rows of each sequence (default 256)", "N" },
    { "reps", 0, 0, G_OPTION_ARG_INT, &reps, "Alternating rounds a figure is the median of (default 9)", "N" },
    { NULL }
  };
  g_autoptr (GOptionContext) opts = g_option_context_new ("- drafter blocks batched across sequences");
  g_autoptr (GError) error = NULL;
  g_autoptr (DflTarget) target = NULL;
  g_autoptr (DflDrafterWeights) drafter = NULL, bound = NULL;
  g_autoptr (DflDraftBatch) batch = NULL;
  DflDraftCtx *ctx[MAX_SEQ] = { NULL };
  DflTensor out[MAX_SEQ];
  float *buf[MAX_SEQ];
  gint64 pos[MAX_SEQ];
  guint32 anchor[MAX_SEQ];
  const DflQwen3Config *c;
  const DflDrafterGeometry *g;
  DflDraftTrunk trunk;
  int tw, width;
  GRand *rng = g_rand_new_with_seed (3);

  g_option_context_add_main_entries (opts, entries, NULL);
  if (!g_option_context_parse (opts, &argc, &argv, &error) || context < 1 || reps < 1) {
    fprintf (stderr, "bench-draft-batch: %s\n", error ? error->message : "--context and --reps "
             "must be at least 1");
    return 2;
  }
  if (!target_dir)
    target_dir = g_strdup (DFL_DEFAULT_MODEL);
  if (!(target = dfl_target_load (target_dir, &error))
      || !(drafter = dfl_drafter_weights_open (drafter_path ? drafter_path : target_dir, &error))
      || !dfl_draft_trunk_of_target (&trunk, target, &error)
      || !(bound = dfl_drafter_weights_bind (drafter, NULL, &trunk, DFL_DTYPE_F32, &error))
      || !(batch = dfl_draft_batch_new (bound, MAX_SEQ, &error))) {
    fprintf (stderr, "bench-draft-batch: %s\n", error->message);
    return 1;
  }
  c = dfl_target_config (target);
  g = dfl_drafter_weights_geometry (bound);
  tw = dfl_drafter_geometry_tap_width (g);
  width = c->vocab;

  /* each sequence's context: the target's taps of a random prompt */
  for (int s = 0; s < MAX_SEQ; s++) {
    g_autoptr (DflTargetSeq) seq = dfl_target_seq_new (target);
    int *ids = g_new (int, context + 1);
    float *taps = g_new (float, (gsize) (context + 1) * tw);
    DflForwardOut fo = { .tap_layers = g->taps, .n_tap_layers = g->n_taps, .taps = taps,
                         .logits_from = context + 1 };
    for (int i = 0; i <= context; i++)
      ids[i] = g_rand_int_range (rng, 0, c->vocab);
    if (!dfl_target_forward (target, seq, ids, context + 1, &fo, &error)
        || !(ctx[s] = dfl_draft_ctx_new (bound, &error))
        || !dfl_draft_ctx_queue_host (ctx[s], 0, taps, context, &error)
        || !dfl_draft_ctx_settle (ctx[s], &error)) {
      fprintf (stderr, "bench-draft-batch: %s\n", error->message);
      return 1;
    }
    pos[s] = context;
    anchor[s] = (guint32) ids[context];
    buf[s] = g_malloc (dfl_draft_ctx_block_bytes (ctx[s], width));
    out[s] = dfl_tensor_2d (NULL, buf[s], 0, DFL_DTYPE_F32, g->block - 1, g->hidden + width);
    g_free (ids);
    g_free (taps);
  }

  printf ("drafter: %d layers, hidden %d, block %d, head %d rows; %d context rows a sequence, "
          "on the CPU\n", g->layers, g->hidden, g->block, width, context);
  printf ("%9s %16s %16s %10s\n", "sequences", "alone ms/block", "batch ms/block", "alone/batch");
  for (int n = 1; n <= MAX_SEQ; n *= 2) {
    double alone[64], together[64];
    int r_n = MIN (reps, 64);
    for (int r = 0; r <= r_n; r++) {
      double t0 = dfl_bench_now (), t1, t2;
      for (int s = 0; s < n; s++)
        if (!dfl_draft_ctx_block (ctx[s], pos[s], anchor[s], width, &out[s], &error))
          goto fail;
      t1 = dfl_bench_now ();
      if (!dfl_draft_ctx_block_batch (batch, ctx, n, pos, anchor, width, out, &error))
        goto fail;
      t2 = dfl_bench_now ();
      /* round 0 warms both */
      if (r > 0) {
        alone[r - 1] = (t1 - t0) / n;
        together[r - 1] = (t2 - t1) / n;
      }
    }
    {
      double a = dfl_bench_median (alone, r_n), b = dfl_bench_median (together, r_n);
      printf ("%9d %16.3f %16.3f %9.2fx\n", n, a * 1e3, b * 1e3, a / b);
    }
  }
  for (int s = 0; s < MAX_SEQ; s++) {
    dfl_draft_ctx_free (ctx[s]);
    g_free (buf[s]);
  }
  g_rand_free (rng);
  return 0;

fail:
  fprintf (stderr, "bench-draft-batch: %s\n", error->message);
  return 1;
}
