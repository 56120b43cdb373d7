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
  g_autofree char *model = NULL;
  g_autofree char *backend = NULL;
  int n_prompts = 8, max_new = 48;
  GOptionEntry entries[] = {
    { "model", 0, 0, G_OPTION_ARG_FILENAME, &model, "Target folder with its dflash.safetensors (default: tapsource's)", "DIR" },
    { "prompts", 0, 0, G_OPTION_ARG_INT, &n_prompts, "Prompts (sequences) to run (default 8)", "N" },
    { "max-new", 0, 0, G_OPTION_ARG_INT, &max_new, "New tokens a prompt (default 48)", "N" },
    { "backend", 0, 0, G_OPTION_ARG_STRING, &backend, "cpu (default), cuda or vulkan", "B" },
    { NULL }
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("- drafting and verification overlap");
  g_autoptr (GError) error = NULL;
  g_autofree char *dir = NULL, *file = NULL;
  g_autoptr (GString) text = g_string_new (NULL);
  const int in_flight[] = { 1, 2, 4 };

  g_option_context_add_main_entries (ctx, entries, NULL);
  g_option_context_add_group (ctx, gst_init_get_option_group ());
  if (!g_option_context_parse (ctx, &argc, &argv, &error) || n_prompts < 1 || max_new < 1) {
    fprintf (stderr, "bench-pipeline: %s\n", error ? error->message : "--prompts and --max-new must be ≥ 1");
    return 2;
  }
  if (!backend)
    backend = g_strdup ("cpu");
  if (strcmp (backend, "cpu") && strcmp (backend, "cuda") && strcmp (backend, "vulkan")) {
    fprintf (stderr, "bench-pipeline: --backend must be cpu, cuda or vulkan, not %s\n", backend);
    return 2;
  }
  gst_plugin_register_static (GST_VERSION_MAJOR, GST_VERSION_MINOR, "dflash", "DFlash",
      gst_dflash_elements_register, "0", "LGPL", "gst-dflash", "gst-dflash", "https://example.invalid");
  for (int i = 0; i < n_prompts; i++)
    g_string_append_printf (text, "%s\n", prompts[i % G_N_ELEMENTS (prompts)]);
  dir = g_dir_make_tmp ("bench-pipeline-XXXXXX", NULL);
  file = g_build_filename (dir, "prompts.txt", NULL);
  g_file_set_contents (file, text->str, -1, NULL);

  printf ("%d prompts, %d new tokens each, backend %s\n", n_prompts, max_new, backend);
  printf ("in-flight   wall s   drafting busy s   verifier busy s   sum s   sum/wall   tokens/s"
          "   (settle, block, select busy s)\n");
  for (guint k = 0; k < G_N_ELEMENTS (in_flight); k++) {
    g_autofree char *desc = g_strdup_printf (
        "tapsource name=src %s%s prompts-file=\"%s\" in-flight=%d max-new-tokens=%d %s ! queue ! "
        "ctxsettle name=settle backend=%s ! queue ! dflashblock name=block backend=%s ! "
        "selector name=select backend=%s ! queue ! verifier name=verify %s ! fakesink sync=false",
        model ? "model=" : "", model ? model : "", file, in_flight[k], max_new,
        strcmp (backend, "cuda") == 0 ? "backend=cuda gpu-weights=f32" : "", backend, backend,
        backend, strcmp (backend, "cuda") == 0 ? "backend=cuda" : "");
    GstElement *pipeline = gst_parse_launch (desc, &error);
    g_autoptr (GstBus) bus = NULL;
    GstMessage *msg;
    double t0, wall, draft, verify;
    gint64 tokens = 0;

    if (!pipeline) {
      fprintf (stderr, "bench-pipeline: %s\n", error->message);
      return 1;
    }
    bus = gst_element_get_bus (pipeline);
    t0 = dfl_bench_now ();
    gst_element_set_state (pipeline, GST_STATE_PLAYING);
    for (;;) {
      msg = gst_bus_timed_pop_filtered (bus, GST_CLOCK_TIME_NONE,
          GST_MESSAGE_ERROR | GST_MESSAGE_EOS | GST_MESSAGE_ELEMENT);
      if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ELEMENT) {
        if (gst_message_has_name (msg, "dflash-summary"))
          gst_structure_get_int64 (gst_message_get_structure (msg), "new-tokens", &tokens);
        gst_message_unref (msg);
        continue;
      }
      break;
    }
    wall = dfl_bench_now () - t0;
    if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR) {
      g_autoptr (GError) e = NULL;
      gst_message_parse_error (msg, &e, NULL);
      fprintf (stderr, "bench-pipeline: %s\n", e->message);
      return 1;
    }
    gst_message_unref (msg);
    draft = (busy (pipeline, "settle") + busy (pipeline, "block") + busy (pipeline, "select")) / 1e9;
    verify = busy (pipeline, "verify") / 1e9;
    printf ("%9d   %6.2f   %15.2f   %15.2f   %5.2f   %8.2f   %8.1f   (%.2f, %.2f, %.2f)\n",
            in_flight[k], wall, draft, verify, draft + verify, (draft + verify) / wall,
            tokens / wall, busy (pipeline, "settle") / 1e9, busy (pipeline, "block") / 1e9,
            busy (pipeline, "select") / 1e9);
    gst_element_set_state (pipeline, GST_STATE_NULL);
    gst_object_unref (pipeline);
  }
  g_unlink (file);
  g_rmdir (dir);
  return 0;
}
