/* gst-dflash — overlap of drafting and verification with sequences in flight,
 * and a round's cost in plain steps.
 *
 *   bench-pipeline [--model DIR] [--prompts N] [--max-new N] [--backend cpu|cuda|vulkan]
 *                  [--gpu-weights stored|f32|bf16]
 *
 * Runs the same prompts through
 *   tapsource in-flight=K ! queue ! ctxsettle ! queue ! dflashblock ! selector ! queue ! verifier ! fakesink
 * (the selector cutting the draft where the drafter is unsure,
 * min-confidence=0.05, as pipelines/speculative.pipeline has it) for K = 1,
 * 2 and 4, and prints the wall time, the busy time of the drafting elements
 * (ctxsettle, dflashblock, selector) and of the verifier, their sum, and
 * tokens/s; then each drafting element's busy time alone. With one sequence
 * the stages take turns, so the wall time is about the sum; with several,
 * drafting one sequence while the target verifies another makes the wall
 * time shorter than the sum.
 *
 * Then a round against a plain step: one sequence drafted and the same
 * prompts without a drafter (the verifier's busy time a step), alternating
 * three times, each pair's ratios printed and their median: the block with
 * its selection (dflashblock and selector), all of a round's drafting
 * (ctxsettle too) and its verification, in steps.
 *
 * --backend sets every element's `backend` (cuda: the target's weights as
 * --gpu-weights says, as stored by default as
 * pipelines/speculative-cuda.pipeline has them; vulkan: the drafting
 * elements only, the target stays on the CPU).
 * A benchmark: it asserts nothing about time.
 */
#include <gst/gst.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench-pipelines.h"

#define PAIRS 3

/* An element's busy seconds; 0 where the pipeline has no element of that
 * name. */
static double
busy_s (GstElement *pipeline, const char *name)
{
  GstElement *e = gst_bin_get_by_name (GST_BIN (pipeline), name);
  guint64 ns = 0;

  if (!e)
    return 0.0;
  g_object_get (e, "busy-time", &ns, NULL);
  gst_object_unref (e);
  return ns / 1e9;
}

/* What a run gave: its wall time, the verifier's figures, and the busy
 * seconds of the elements named settle, block, select and verify (0 where
 * the pipeline has none). */
typedef struct {
  double wall, tau, settle, block, select, verify;
  gint64 rounds, tokens;
} Run;

static gboolean
run_pipeline (const char *desc, Run *run)
{
  GstElement *pipeline;
  GstStructure *summary;

  memset (run, 0, sizeof *run);
  if (!(pipeline = dfl_bench_launch ("bench-pipeline", desc, &run->wall, &summary)))
    return FALSE;
  if (summary) {
    gst_structure_get_int64 (summary, "new-tokens", &run->tokens);
    gst_structure_get_int64 (summary, "rounds", &run->rounds);
    gst_structure_get_double (summary, "tau", &run->tau);
    gst_structure_free (summary);
  }
  run->settle = busy_s (pipeline, "settle");
  run->block = busy_s (pipeline, "block");
  run->select = busy_s (pipeline, "select");
  run->verify = busy_s (pipeline, "verify");
  dfl_bench_stop (pipeline);
  return TRUE;
}

static int
cmp_double (const void *a, const void *b)
{
  double x = *(const double *) a, y = *(const double *) b;

  return (x > y) - (x < y);
}

static double
median_of_pairs (const double *v)
{
  double s[PAIRS];

  memcpy (s, v, sizeof s);
  qsort (s, PAIRS, sizeof *s, cmp_double);
  return s[PAIRS / 2];
}

int
main (int argc, char **argv)
{
  g_auto (DflBenchPipelineArgs) args = { 0 };
  g_autofree char *backend = NULL, *gpu_weights = NULL;
  const GOptionEntry entries[] = {
    { "backend", 0, 0, G_OPTION_ARG_STRING, &backend, "cpu (default), cuda or vulkan", "B" },
    { "gpu-weights", 0, 0, G_OPTION_ARG_STRING, &gpu_weights,
      "With --backend cuda: tapsource's gpu-weights (stored, the default; f32; bf16)", "W" },
    { NULL }
  };
  g_autofree char *file = NULL, *plain = NULL, *source_cuda = NULL;
  const int in_flight[] = { 1, 2, 4 };
  double block[PAIRS], drafting[PAIRS], verification[PAIRS];
  const char *source_backend, *target_backend;

  if (!dfl_bench_pipeline_init ("bench-pipeline", "- drafting and verification overlap", entries,
                                &args, &argc, &argv))
    return 2;
  if (!backend)
    backend = g_strdup ("cpu");
  if (strcmp (backend, "cpu") && strcmp (backend, "cuda") && strcmp (backend, "vulkan")) {
    fprintf (stderr, "bench-pipeline: --backend must be cpu, cuda or vulkan, not %s\n", backend);
    return 2;
  }
  if (!(file = dfl_bench_prompts_file ("bench-pipeline", args.n_prompts)))
    return 1;
  if (gpu_weights && strcmp (backend, "cuda")) {
    fprintf (stderr, "bench-pipeline: --gpu-weights is for --backend cuda, not %s\n", backend);
    return 2;
  }
  /* cuda: the target on the card (its weights as asked; tapsource refuses
   * a value it does not know, by name), the verifier there too */
  source_cuda = g_strdup_printf ("backend=cuda gpu-weights=%s",
                                 gpu_weights ? gpu_weights : "stored");
  source_backend = strcmp (backend, "cuda") == 0 ? source_cuda : "";
  target_backend = strcmp (backend, "cuda") == 0 ? "backend=cuda" : "";

  printf ("%d prompts, %d new tokens each, backend %s%s%s\n", args.n_prompts, args.max_new,
          backend, strcmp (backend, "cuda") ? "" : ", gpu-weights=",
          strcmp (backend, "cuda") ? "" : (gpu_weights ? gpu_weights : "stored"));
  printf ("in-flight   wall s   drafting busy s   verifier busy s   sum s   sum/wall   tokens/s"
          "   (settle, block, select busy s)\n");
  for (guint k = 0; k < G_N_ELEMENTS (in_flight); k++) {
    g_autofree char *desc = g_strdup_printf (
        "tapsource name=src %s%s prompts-file=\"%s\" in-flight=%d max-new-tokens=%d %s ! queue ! "
        "ctxsettle name=settle backend=%s ! queue ! dflashblock name=block backend=%s ! "
        "selector name=select backend=%s min-confidence=0.05 ! queue ! verifier name=verify %s ! "
        "fakesink sync=false", args.model ? "model=" : "", args.model ? args.model : "", file,
        in_flight[k], args.max_new,
        source_backend, backend, backend,
        backend, target_backend);
    Run run;
    double draft;

    if (!run_pipeline (desc, &run))
      return 1;
    draft = run.settle + run.block + run.select;
    printf ("%9d   %6.2f   %15.2f   %15.2f   %5.2f   %8.2f   %8.1f   (%.2f, %.2f, %.2f)\n",
            in_flight[k], run.wall, draft, run.verify, draft + run.verify,
            (draft + run.verify) / run.wall, run.tokens / run.wall, run.settle, run.block,
            run.select);
    if (k == 0) {
      /* the drafted half of the pairs below: this pipeline with one sequence */
      g_free (plain);
      plain = g_strdup (desc);
    }
  }

  printf ("\na round against a plain step (one sequence; drafted, then the same prompts with "
          "no drafter, %d times):\n", PAIRS);
  printf ("pair   tau    step ms   block+select ms  steps   all drafting ms  steps   "
          "verification ms  steps\n");
  for (int i = 0; i < PAIRS; i++) {
    g_autofree char *bare = g_strdup_printf (
        "tapsource %s%s prompts-file=\"%s\" no-drafter=true max-new-tokens=%d %s ! "
        "verifier name=verify %s ! fakesink sync=false", args.model ? "model=" : "",
        args.model ? args.model : "", file, args.max_new,
        source_backend, target_backend);
    Run drafted, steps;
    double r, step;

    if (!run_pipeline (plain, &drafted) || !run_pipeline (bare, &steps))
      return 1;
    if (drafted.rounds <= 0 || steps.rounds <= 0) {
      fprintf (stderr, "bench-pipeline: a run counted no rounds\n");
      return 1;
    }
    r = (double) drafted.rounds;
    step = steps.verify / steps.rounds;
    block[i] = (drafted.block + drafted.select) / r / step;
    drafting[i] = (drafted.settle + drafted.block + drafted.select) / r / step;
    verification[i] = drafted.verify / r / step;
    printf ("%4d   %4.2f   %7.3f   %15.3f  %5.2f   %15.3f  %5.2f   %15.3f  %5.2f\n", i + 1,
            drafted.tau, 1e3 * step, 1e3 * (drafted.block + drafted.select) / r, block[i],
            1e3 * (drafted.settle + drafted.block + drafted.select) / r, drafting[i],
            1e3 * drafted.verify / r, verification[i]);
  }
  printf ("median, in steps: block + selection %.2f, all drafting %.2f, verification %.2f\n",
          median_of_pairs (block), median_of_pairs (drafting), median_of_pairs (verification));
  dfl_bench_prompts_file_remove (g_steal_pointer (&file));
  return 0;
}
