/* gst-dflash — overlap of drafting and verification with sequences in flight.
 *
 *   bench-pipeline [--model DIR] [--prompts N] [--max-new N] [--backend cpu|cuda|vulkan]
 *
 * Runs the same prompts through
 *   tapsource in-flight=K ! queue ! ctxsettle ! queue ! dflashblock ! selector ! queue ! verifier ! fakesink
 * for K = 1, 2 and 4, and prints the wall time, the busy time of the
 * drafting elements (ctxsettle, dflashblock, selector) and of the verifier,
 * their sum, and tokens/s; then each drafting element's busy time alone.
 * --backend sets every element's `backend` (cuda: the target's weights
 * widened to F32, as pipelines/speculative-cuda.pipeline has them; vulkan:
 * the drafting elements only, the target stays on the CPU). With one sequence the stages take turns, so the
 * wall time is about the sum; with several, drafting one sequence while
 * the target verifies another makes the wall time shorter than the sum.
 * A benchmark: it asserts nothing about time.
 */
#include <gst/gst.h>
#include <stdio.h>
#include <string.h>

#include "bench-pipelines.h"

static guint64
busy (GstElement *pipeline, const char *name)
{
  GstElement *e = gst_bin_get_by_name (GST_BIN (pipeline), name);
  guint64 ns = 0;

  g_object_get (e, "busy-time", &ns, NULL);
  gst_object_unref (e);
  return ns;
}

int
main (int argc, char **argv)
{
  g_auto (DflBenchPipelineArgs) args = { 0 };
  g_autofree char *backend = NULL;
  const GOptionEntry entries[] = {
    { "backend", 0, 0, G_OPTION_ARG_STRING, &backend, "cpu (default), cuda or vulkan", "B" },
    { NULL }
  };
  g_autoptr (GError) error = NULL;
  g_autofree char *file = NULL;
  const int in_flight[] = { 1, 2, 4 };

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

  printf ("%d prompts, %d new tokens each, backend %s\n", args.n_prompts, args.max_new, backend);
  printf ("in-flight   wall s   drafting busy s   verifier busy s   sum s   sum/wall   tokens/s"
          "   (settle, block, select busy s)\n");
  for (guint k = 0; k < G_N_ELEMENTS (in_flight); k++) {
    g_autofree char *desc = g_strdup_printf (
        "tapsource name=src %s%s prompts-file=\"%s\" in-flight=%d max-new-tokens=%d %s ! queue ! "
        "ctxsettle name=settle backend=%s ! queue ! dflashblock name=block backend=%s ! "
        "selector name=select backend=%s ! queue ! verifier name=verify %s ! fakesink sync=false",
        args.model ? "model=" : "", args.model ? args.model : "", file, in_flight[k], args.max_new,
        strcmp (backend, "cuda") == 0 ? "backend=cuda gpu-weights=f32" : "", backend, backend,
        backend, strcmp (backend, "cuda") == 0 ? "backend=cuda" : "");
    GstElement *pipeline = gst_parse_launch (desc, &error);
    GstStructure *summary;
    double wall, draft, verify;
    gint64 tokens = 0;

    if (!pipeline) {
      fprintf (stderr, "bench-pipeline: %s\n", error->message);
      return 1;
    }
    if (!dfl_bench_play ("bench-pipeline", pipeline, &wall, &summary))
      return 1;
    if (summary) {
      gst_structure_get_int64 (summary, "new-tokens", &tokens);
      gst_structure_free (summary);
    }
    draft = (busy (pipeline, "settle") + busy (pipeline, "block") + busy (pipeline, "select")) / 1e9;
    verify = busy (pipeline, "verify") / 1e9;
    printf ("%9d   %6.2f   %15.2f   %15.2f   %5.2f   %8.2f   %8.1f   (%.2f, %.2f, %.2f)\n",
            in_flight[k], wall, draft, verify, draft + verify, (draft + verify) / wall,
            tokens / wall, busy (pipeline, "settle") / 1e9, busy (pipeline, "block") / 1e9,
            busy (pipeline, "select") / 1e9);
    gst_element_set_state (pipeline, GST_STATE_NULL);
    gst_object_unref (pipeline);
  }
  dfl_bench_prompts_file_remove (g_steal_pointer (&file));
  return 0;
}
