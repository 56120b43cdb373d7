/* gst-dflash — many sequences in one target pass: aggregate speed.
 *
 *   bench-batch [--model DIR] [--prompts N] [--max-new N] [--in-flight K] [--pairs P]
 *
 * Runs the same N prompts (default 8) through plain decoding
 *   tapsource in-flight=K ! queue ! verifier ! fakesink
 * through the drafted pipeline
 *   tapsource in-flight=K ! queue ! ctxsettle ! queue ! dflashblock ! selector ! queue ! verifier
 * and through the same with dflashblock batch-limit=K (the blocks of the
 * sequences waiting drafted in one pass),
 * once with one sequence in flight and once with K (default N), the two
 * taking turns P times (default 3: a shared machine's speed moves between
 * runs by more than the gain measured), and prints
 * each run's wall time (start to EOS: the prompts' passes included),
 * aggregate tokens/s over it, the verifier's decode tokens/s (its summary:
 * the tokens after each prompt's first over the rounds' wall time), the
 * verifier's target passes and the largest and mean rounds a pass, then the
 * ratios of K in flight to one — each pair's, and their median — measured
 * in this run, on the target tapsource loads (the default pair unless
 * --model). A benchmark: it asserts nothing about time.
 */
#include <gst/gst.h>
#include <stdio.h>
#include <string.h>

#include "bench-common.h"
#include "bench-pipelines.h"

typedef struct {
  double wall, tokens_per_s, decode_per_s;
  gint64 tokens, rounds;
  guint64 batches;
  guint max_batch;
} Run;

/* One run of `stages` with `in_flight` sequences; FALSE on an error (printed). */
static gboolean
run (const char *model, const char *file, int in_flight, int max_new, const char *stages, Run *r)
{
  g_autofree char *desc = g_strdup_printf (
      "tapsource %s%s prompts-file=\"%s\" in-flight=%d max-new-tokens=%d ! %s%sverifier name=v ! "
      "fakesink sync=false", model ? "model=" : "", model ? model : "", file, in_flight, max_new,
      stages, *stages ? " ! " : "");
  GstElement *pipeline, *v;
  GstStructure *summary;

  memset (r, 0, sizeof *r);
  if (!(pipeline = dfl_bench_launch ("bench-batch", desc, &r->wall, &summary)))
    return FALSE;
  if (summary) {
    gst_structure_get_int64 (summary, "new-tokens", &r->tokens);
    gst_structure_get_int64 (summary, "rounds", &r->rounds);
    gst_structure_get_double (summary, "tokens-per-second", &r->decode_per_s);
    gst_structure_free (summary);
  }
  v = gst_bin_get_by_name (GST_BIN (pipeline), "v");
  g_object_get (v, "batches", &r->batches, "max-batch", &r->max_batch, NULL);
  gst_object_unref (v);
  r->tokens_per_s = r->tokens / r->wall;
  dfl_bench_stop (pipeline);
  return TRUE;
}

static void
print_run (const char *what, int in_flight, const Run *r)
{
  printf ("%-8s %9d   %7.2f   %6" G_GINT64_FORMAT "   %8.1f   %13.1f   %7" G_GUINT64_FORMAT
          "   %9u   %10.2f\n", what, in_flight, r->wall, r->tokens, r->tokens_per_s,
          r->decode_per_s, r->batches, r->max_batch,
          r->batches ? (double) r->rounds / r->batches : 0.0);
}

int
main (int argc, char **argv)
{
  g_auto (DflBenchPipelineArgs) args = { 0 };
  int in_flight = 0, pairs = 3;
  const GOptionEntry entries[] = {
    { "in-flight", 0, 0, G_OPTION_ARG_INT, &in_flight, "Sequences in flight against one (default: the prompts)", "K" },
    { "pairs", 0, 0, G_OPTION_ARG_INT, &pairs, "Runs of one and of K in flight, taking turns (default 3)", "P" },
    { NULL }
  };
  g_autofree char *file = NULL;
  g_autofree char *batched = NULL;
  struct { const char *name, *stages; } kinds[] = {
    { "plain", "queue" },
    { "drafted", "queue ! ctxsettle ! queue ! dflashblock ! selector ! queue" },
    { "batched", NULL },
  };

  if (!dfl_bench_pipeline_init ("bench-batch", "- sequences verified in one target pass", entries,
                                &args, &argc, &argv))
    return 2;
  if (in_flight < 0) {
    fprintf (stderr, "bench-batch: --in-flight must be ≥ 0\n");
    return 2;
  }
  if (pairs < 1 || pairs > 64) {
    fprintf (stderr, "bench-batch: --pairs must be 1 to 64, not %d\n", pairs);
    return 2;
  }
  if (!in_flight)
    in_flight = args.n_prompts;
  /* the drafted pipeline with the blocks of the sequences waiting drafted
   * in one pass (dflashblock batch-limit) */
  batched = g_strdup_printf ("queue ! ctxsettle ! queue ! dflashblock batch-limit=%d ! selector ! "
                             "queue", MAX (in_flight, 2));
  kinds[2].stages = batched;
  if (!(file = dfl_bench_prompts_file ("bench-batch", args.n_prompts)))
    return 1;

  printf ("%d prompts, %d new tokens each\n", args.n_prompts, args.max_new);
  printf ("pipeline in-flight    wall s   tokens   tokens/s   decode tok/s    passes   max batch"
          "   mean batch\n");
  for (guint k = 0; k < G_N_ELEMENTS (kinds); k++) {
    g_autofree double *agg = g_new (double, pairs), *dec = g_new (double, pairs);
    double agg_median, dec_median;
    for (int p = 0; p < pairs; p++) {
      Run one, many;
      if (!run (args.model, file, 1, args.max_new, kinds[k].stages, &one)
          || !run (args.model, file, in_flight, args.max_new, kinds[k].stages, &many))
        return 1;
      print_run (kinds[k].name, 1, &one);
      print_run (kinds[k].name, in_flight, &many);
      agg[p] = many.tokens_per_s / one.tokens_per_s;
      dec[p] = many.decode_per_s / one.decode_per_s;
    }
    /* dfl_bench_median sorts: the range is then the ends */
    agg_median = dfl_bench_median (agg, pairs);
    dec_median = dfl_bench_median (dec, pairs);
    printf ("%s: %d in flight × 1: %.2f× the aggregate tokens/s (%.2f× the decode tokens/s), "
            "the median of %d pairs (aggregate %.2f–%.2f×)\n", kinds[k].name, in_flight,
            agg_median, dec_median, pairs, agg[0], agg[pairs - 1]);
  }
  dfl_bench_prompts_file_remove (g_steal_pointer (&file));
  return 0;
}
