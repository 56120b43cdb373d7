/* gst-dflash — many sequences in one target pass: aggregate speed.
 *
 *   bench-batch [--model DIR] [--prompts N] [--max-new N] [--in-flight K]
 *
 * Runs the same N prompts (default 8) through plain decoding
 *   tapsource in-flight=K ! queue ! verifier ! fakesink
 * and through the drafted pipeline
 *   tapsource in-flight=K ! queue ! ctxsettle ! queue ! dflashblock ! selector ! queue ! verifier
 * once with one sequence in flight and once with K (default N), and prints
 * each run's wall time (start to EOS: the prompts' passes included),
 * aggregate tokens/s over it, the verifier's decode tokens/s (its summary:
 * the tokens after each prompt's first over the rounds' wall time), the
 * verifier's target passes and the largest and mean rounds a pass, then the
 * ratios of K in flight to one — measured in this run, on the target tapsource loads (the default
 * pair unless --model). A benchmark: it asserts nothing about time.
 */
#include <gst/gst.h>
#include <glib/gstdio.h>
#include <stdio.h>
#include <string.h>

#include "bench-common.h"
#include "gstdflashelements.h"

static const char *prompts[] = {
  "func main() {", "package main\\n\\nimport \"fmt\"", "for i := 0; i < n; i++ {",
  "type Reader interface {", "if err != nil {", "// Copy copies from src to dst",
  "return fmt.Errorf(", "switch x := v.(type) {",
};

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
  g_autoptr (GError) error = NULL;
  GstElement *pipeline = gst_parse_launch (desc, &error), *v;
  g_autoptr (GstBus) bus = NULL;
  GstMessage *msg;
  double t0;

  if (!pipeline) {
    fprintf (stderr, "bench-batch: %s\n", error->message);
    return FALSE;
  }
  memset (r, 0, sizeof *r);
  bus = gst_element_get_bus (pipeline);
  t0 = dfl_bench_now ();
  gst_element_set_state (pipeline, GST_STATE_PLAYING);
  for (;;) {
    msg = gst_bus_timed_pop_filtered (bus, GST_CLOCK_TIME_NONE,
        GST_MESSAGE_ERROR | GST_MESSAGE_EOS | GST_MESSAGE_ELEMENT);
    if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ELEMENT) {
      const GstStructure *st = gst_message_get_structure (msg);
      if (gst_message_has_name (msg, "dflash-summary")) {
        gst_structure_get_int64 (st, "new-tokens", &r->tokens);
        gst_structure_get_int64 (st, "rounds", &r->rounds);
        gst_structure_get_double (st, "tokens-per-second", &r->decode_per_s);
      }
      gst_message_unref (msg);
      continue;
    }
    break;
  }
  r->wall = dfl_bench_now () - t0;
  if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR) {
    g_autoptr (GError) e = NULL;
    gst_message_parse_error (msg, &e, NULL);
    fprintf (stderr, "bench-batch: %s\n", e->message);
    gst_message_unref (msg);
    gst_element_set_state (pipeline, GST_STATE_NULL);
    gst_object_unref (pipeline);
    return FALSE;
  }
  gst_message_unref (msg);
  v = gst_bin_get_by_name (GST_BIN (pipeline), "v");
  g_object_get (v, "batches", &r->batches, "max-batch", &r->max_batch, NULL);
  gst_object_unref (v);
  r->tokens_per_s = r->tokens / r->wall;
  gst_element_set_state (pipeline, GST_STATE_NULL);
  gst_object_unref (pipeline);
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
  g_autofree char *model = NULL;
  int n_prompts = 8, max_new = 48, in_flight = 0;
  GOptionEntry entries[] = {
    { "model", 0, 0, G_OPTION_ARG_FILENAME, &model, "Target folder with its dflash.safetensors (default: tapsource's)", "DIR" },
    { "prompts", 0, 0, G_OPTION_ARG_INT, &n_prompts, "Prompts (sequences) to run (default 8)", "N" },
    { "max-new", 0, 0, G_OPTION_ARG_INT, &max_new, "New tokens a prompt (default 48)", "N" },
    { "in-flight", 0, 0, G_OPTION_ARG_INT, &in_flight, "Sequences in flight against one (default: the prompts)", "K" },
    { NULL }
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("- sequences verified in one target pass");
  g_autoptr (GError) error = NULL;
  g_autofree char *dir = NULL, *file = NULL;
  g_autoptr (GString) text = g_string_new (NULL);
  const struct { const char *name, *stages; } kinds[] = {
    { "plain", "queue" },
    { "drafted", "queue ! ctxsettle ! queue ! dflashblock ! selector ! queue" },
  };

  g_option_context_add_main_entries (ctx, entries, NULL);
  g_option_context_add_group (ctx, gst_init_get_option_group ());
  if (!g_option_context_parse (ctx, &argc, &argv, &error) || n_prompts < 1 || max_new < 1
      || in_flight < 0) {
    fprintf (stderr, "bench-batch: %s\n", error ? error->message
             : "--prompts and --max-new must be ≥ 1, --in-flight ≥ 0");
    return 2;
  }
  if (!in_flight)
    in_flight = n_prompts;
  gst_plugin_register_static (GST_VERSION_MAJOR, GST_VERSION_MINOR, "dflash", "DFlash",
      gst_dflash_elements_register, "0", "LGPL", "gst-dflash", "gst-dflash", "https://example.invalid");
  for (int i = 0; i < n_prompts; i++)
    g_string_append_printf (text, "%s\n", prompts[i % G_N_ELEMENTS (prompts)]);
  dir = g_dir_make_tmp ("bench-batch-XXXXXX", NULL);
  file = g_build_filename (dir, "prompts.txt", NULL);
  g_file_set_contents (file, text->str, -1, NULL);

  printf ("%d prompts, %d new tokens each\n", n_prompts, max_new);
  printf ("pipeline in-flight    wall s   tokens   tokens/s   decode tok/s    passes   max batch"
          "   mean batch\n");
  for (guint k = 0; k < G_N_ELEMENTS (kinds); k++) {
    Run one, many;
    if (!run (model, file, 1, max_new, kinds[k].stages, &one)
        || !run (model, file, in_flight, max_new, kinds[k].stages, &many))
      return 1;
    print_run (kinds[k].name, 1, &one);
    print_run (kinds[k].name, in_flight, &many);
    printf ("%s: %d in flight × 1: %.2f× the aggregate tokens/s (%.2f× the decode tokens/s)\n",
            kinds[k].name, in_flight, many.tokens_per_s / one.tokens_per_s,
            many.decode_per_s / one.decode_per_s);
  }
  g_unlink (file);
  g_rmdir (dir);
  return 0;
}
