/* gst-dflash — what the benchmarks of whole pipelines share
 * (bench-pipelines.h). */
#include "bench-pipelines.h"

#include <glib/gstdio.h>
#include <stdio.h>

#include "bench-common.h"
#include "gstdflashelements.h"
#include "gstdflashsummary.h"

static const char *prompts[] = {
  "func main() {", "package main\\n\\nimport \"fmt\"", "for i := 0; i < n; i++ {",
  "type Reader interface {", "if err != nil {", "// Copy copies from src to dst",
  "return fmt.Errorf(", "switch x := v.(type) {",
};

gboolean
dfl_bench_pipeline_init (const char *prog, const char *summary, const GOptionEntry *extra,
                         DflBenchPipelineArgs *args, int *argc, char ***argv)
{
  GOptionEntry entries[] = {
    { "model", 0, 0, G_OPTION_ARG_FILENAME, &args->model, "Target folder with its dflash.safetensors (default: tapsource's)", "DIR" },
    { "prompts", 0, 0, G_OPTION_ARG_INT, &args->n_prompts, "Prompts (sequences) to run (default 8)", "N" },
    { "max-new", 0, 0, G_OPTION_ARG_INT, &args->max_new, "New tokens a prompt (default 48)", "N" },
    { NULL }
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new (summary);
  g_autoptr (GError) error = NULL;

  *args = (DflBenchPipelineArgs) { .n_prompts = 8, .max_new = 48 };
  g_option_context_add_main_entries (ctx, entries, NULL);
  if (extra)
    g_option_context_add_main_entries (ctx, extra, NULL);
  g_option_context_add_group (ctx, gst_init_get_option_group ());
  if (!g_option_context_parse (ctx, argc, argv, &error)) {
    fprintf (stderr, "%s: %s\n", prog, error->message);
    return FALSE;
  }
  if (args->n_prompts < 1 || args->max_new < 1) {
    fprintf (stderr, "%s: --prompts and --max-new must be ≥ 1\n", prog);
    return FALSE;
  }
  gst_plugin_register_static (GST_VERSION_MAJOR, GST_VERSION_MINOR, "dflash", "DFlash",
      gst_dflash_elements_register, "0", "LGPL", "gst-dflash", "gst-dflash", "https://example.invalid");
  return TRUE;
}

void
dfl_bench_pipeline_args_clear (DflBenchPipelineArgs *args)
{
  g_clear_pointer (&args->model, g_free);
}

char *
dfl_bench_prompts_file (const char *prog, int n)
{
  g_autofree char *template = g_strdup_printf ("%s-XXXXXX", prog);
  g_autoptr (GString) text = g_string_new (NULL);
  g_autoptr (GError) error = NULL;
  g_autofree char *dir = NULL;
  char *file;

  for (int i = 0; i < n; i++)
    g_string_append_printf (text, "%s\n", prompts[i % G_N_ELEMENTS (prompts)]);
  if (!(dir = g_dir_make_tmp (template, &error))) {
    fprintf (stderr, "%s: %s\n", prog, error->message);
    return NULL;
  }
  file = g_build_filename (dir, "prompts.txt", NULL);
  if (!g_file_set_contents (file, text->str, -1, &error)) {
    fprintf (stderr, "%s: %s\n", prog, error->message);
    g_rmdir (dir);
    g_free (file);
    return NULL;
  }
  return file;
}

void
dfl_bench_prompts_file_remove (char *file)
{
  g_autofree char *dir = g_path_get_dirname (file);

  g_unlink (file);
  g_rmdir (dir);
  g_free (file);
}

/* Plays `pipeline` to EOS (dfl_bench_launch's figures); FALSE with the bus
 * error printed. */
static gboolean
play (const char *prog, GstElement *pipeline, double *wall, GstStructure **summary)
{
  g_autoptr (GstBus) bus = gst_element_get_bus (pipeline);
  GstMessage *msg;
  gboolean ok;
  double t0;

  *summary = NULL;
  t0 = dfl_bench_now ();
  gst_element_set_state (pipeline, GST_STATE_PLAYING);
  for (;;) {
    msg = gst_bus_timed_pop_filtered (bus, GST_CLOCK_TIME_NONE,
        GST_MESSAGE_ERROR | GST_MESSAGE_EOS | GST_MESSAGE_ELEMENT);
    if (GST_MESSAGE_TYPE (msg) != GST_MESSAGE_ELEMENT)
      break;
    if (gst_message_has_name (msg, GST_DFLASH_SUMMARY_NAME)) {
      g_clear_pointer (summary, gst_structure_free);
      *summary = gst_structure_copy (gst_message_get_structure (msg));
    }
    gst_message_unref (msg);
  }
  *wall = dfl_bench_now () - t0;
  ok = GST_MESSAGE_TYPE (msg) != GST_MESSAGE_ERROR;
  if (!ok) {
    g_autoptr (GError) e = NULL;

    gst_message_parse_error (msg, &e, NULL);
    fprintf (stderr, "%s: %s\n", prog, e->message);
    g_clear_pointer (summary, gst_structure_free);
  }
  gst_message_unref (msg);
  return ok;
}

GstElement *
dfl_bench_launch (const char *prog, const char *desc, double *wall, GstStructure **summary)
{
  g_autoptr (GError) error = NULL;
  GstElement *pipeline = gst_parse_launch (desc, &error);

  *summary = NULL;
  if (!pipeline) {
    fprintf (stderr, "%s: %s\n", prog, error->message);
    return NULL;
  }
  if (!play (prog, pipeline, wall, summary)) {
    dfl_bench_stop (pipeline);
    return NULL;
  }
  return pipeline;
}

void
dfl_bench_stop (GstElement *pipeline)
{
  gst_element_set_state (pipeline, GST_STATE_NULL);
  gst_object_unref (pipeline);
}
