/* gst-dflash — the `dflash` command's shared helpers: messages, option
 * parsing, token lists, finding the drafter, the elements in-process and
 * what a run's sinks hand over. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "dfl-error.h"
#include "dfl-kernels.h"
#include "dflash-cli.h"
#include "gstdflashelements.h"
#include "qwen3-weights.h"
#include "token-list.h"

int
dfl_cli_fail (int status, const char *fmt, ...)
{
  va_list ap;
  g_autofree char *msg = NULL;

  va_start (ap, fmt);
  msg = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  fprintf (stderr, "dflash: %s\n", msg);
  return status;
}

int
dfl_cli_fail_error (GError *error)
{
  int status = dfl_cli_fail (DFL_EXIT_ERROR, "%s", error->message);

  g_error_free (error);
  return status;
}

gboolean
dfl_cli_parse (GOptionContext *ctx, int *argc, char ***argv)
{
  g_autoptr (GError) error = NULL;

  if (!g_option_context_parse (ctx, argc, argv, &error)) {
    dfl_cli_fail (DFL_EXIT_USAGE, "%s (see --help)", error->message);
    return FALSE;
  }
  return TRUE;
}

gboolean
dfl_cli_parse_tokens (const char *text, GArray *ids, GError **error)
{
  /* the ids are checked against the vocabulary once the target is loaded */
  return dfl_token_list_parse (text, "--tokens", 0, NULL, ids, error);
}

DflDrafterWeights *
dfl_cli_open_drafter (const char *drafter_path, const DflTarget *target, GError **error)
{
  const DflQwen3Config *c = dfl_target_config (target);
  g_autofree char *beside = dfl_qwen3_checkpoint_sidecar (dfl_target_dir (target));
  g_autoptr (DflDrafterWeights) d = NULL;

  if (!drafter_path) {
    if (!g_file_test (beside, G_FILE_TEST_EXISTS))
      return NULL;
    drafter_path = beside;
  }
  if (!(d = dfl_drafter_weights_open (drafter_path, error)))
    return NULL;
  if (!dfl_drafter_weights_check_target (d, dfl_target_tensors (target), c->tie_word_embeddings,
                                         c->layers, c->hidden, c->vocab, error))
    return NULL;
  return g_steal_pointer (&d);
}

gboolean
dfl_cli_check_tokens (GArray *ids, int vocab, const char *target_dir, GError **error)
{
  for (guint i = 0; i < ids->len; i++) {
    int id = g_array_index (ids, int, i);
    if (id < 0 || id >= vocab) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                   "--tokens: token id %d is not in the vocabulary of %s (0 … %d)",
                   id, target_dir, vocab - 1);
      return FALSE;
    }
  }
  return TRUE;
}

const char *
dfl_cli_default_target (void)
{
  /* DFLASH_MODEL names another default (the tests point it at their tiny
   * checkpoint); else the embedded default pair */
  const char *env = g_getenv ("DFLASH_MODEL");

  return env && *env ? env : DFL_DEFAULT_MODEL;
}

/* A property value for a launch description: quoted, \ and " escaped. */
char *
dfl_cli_quoted (const char *v)
{
  GString *s = g_string_new ("\"");

  for (; *v; v++) {
    if (*v == '"' || *v == '\\')
      g_string_append_c (s, '\\');
    g_string_append_c (s, *v);
  }
  g_string_append_c (s, '"');
  return g_string_free (s, FALSE);
}

char *
dfl_cli_route_figures (const char *option, const char *target, const char *drafter)
{
  g_autofree char *t = NULL, *d = NULL, *key = NULL, *sum = NULL, *name = NULL;

  if (option)
    return strcmp (option, "none") ? g_strdup (option) : NULL;
  t = g_canonicalize_filename (target, NULL);
  d = drafter ? g_canonicalize_filename (drafter, NULL) : g_strdup ("");
  key = g_strdup_printf ("target %s\ndrafter %s\nthreads %d\n", t, d, dfl_kernels_threads ());
  sum = g_compute_checksum_for_string (G_CHECKSUM_SHA256, key, -1);
  name = g_strdup_printf ("%.16s.json", sum);
  return g_build_filename (g_get_user_cache_dir (), "gst-dflash", "route", name, NULL);
}

char *
dfl_cli_describe (DflRoute route, const char *source_props, const char *select, int head_width,
                  const char *route_figures, GstDflashBackend backend)
{
  g_autofree char *figures = NULL;
  /* the drafter's stages on the device; the target's (tapsource, verifier)
   * on it where it is the card (a Vulkan drafter serves a CPU target) */
  const char *drafting = backend == GST_DFLASH_BACKEND_CUDA ? " backend=cuda"
                         : backend == GST_DFLASH_BACKEND_VULKAN ? " backend=vulkan" : "";
  const char *target = backend == GST_DFLASH_BACKEND_CUDA ? " backend=cuda" : "";
  g_autofree char *source = g_strdup_printf ("%s%s", source_props, target);

  /* the settings of pipelines/routed.pipeline, the default run: the
   * selector cuts the block's draft where the drafter is unsure, the
   * chain proposes two tokens per token of the suffix it matched */
  g_autofree char *block = g_strdup_printf ("ctxsettle%s ! dflashblock%s head-width=%d ! selector%s "
                                            "mode=%s min-confidence=0.05", drafting, drafting,
                                            head_width, drafting, select);
  const char *chain = "ngramdraft max-n=8 draft-per-match=2";
  g_autofree char *sinks = g_strdup_printf ("verifier%s name=v ! fakesink name=text "
      "signal-handoffs=true sync=false async=false v.tokens ! fakesink name=ids "
      "signal-handoffs=true sync=false async=false", target);

  switch (route) {
    case DFL_ROUTE_NONE:
      return g_strdup_printf ("%s ! %s", source, sinks);
    case DFL_ROUTE_CHAIN:
      return g_strdup_printf ("%s ! %s ! %s", source, chain, sinks);
    case DFL_ROUTE_BLOCK:
      return g_strdup_printf ("%s ! %s ! %s", source, block, sinks);
    case DFL_ROUTE_AUTO:
    case DFL_ROUTE_MATCH:
    case DFL_ROUTE_COST:
    default:
      /* cost weighs the block against a plain step where prompt lookup
       * found nothing at all; the chain's branch first and without a queue,
       * as in pipelines/routed.pipeline, so its route reaches the block's
       * branch before the round does */
      if (route == DFL_ROUTE_COST && route_figures) {
        g_autofree char *q = dfl_cli_quoted (route_figures);
        figures = g_strdup_printf (" figures-file=%s", q);
      }
      return g_strdup_printf ("%s ! tee name=t ! %s ! r.chain  t. ! queue ! %s ! "
                              "router name=r policy=%s%s%s ! %s", source, chain, block,
                              dfl_route_name (route), route == DFL_ROUTE_COST ? " match-min=1" : "",
                              figures ? figures : "", sinks);
  }
}

int
dfl_cli_check_draft_options (const char *cmd, const char *route_name, const char *select,
                             int head_width, gboolean no_draft, DflRoute *route)
{
  if (head_width < 0)
    return dfl_cli_fail (DFL_EXIT_USAGE, "%s: --head-width must be ≥ 0, not %d", cmd, head_width);
  if (route_name && !dfl_route_from_name (route_name, route))
    return dfl_cli_fail (DFL_EXIT_USAGE, "%s: --route '%s' is not one of cost, block, chain, "
                         "match, auto", cmd, route_name);
  if (select && g_strcmp0 (select, "rescore") && g_strcmp0 (select, "plain"))
    return dfl_cli_fail (DFL_EXIT_USAGE, "%s: --select '%s' is not rescore or plain", cmd, select);
  if (no_draft && route_name && *route != DFL_ROUTE_NONE)
    return dfl_cli_fail (DFL_EXIT_USAGE, "%s: --no-draft and --route %s disagree", cmd,
                         route_name);
  return DFL_EXIT_OK;
}

int
dfl_cli_backend (const char *cmd, const char *name, GstDflashBackend *out)
{
  g_autoptr (GEnumClass) klass = g_type_class_ref (GST_TYPE_DFLASH_BACKEND);
  GEnumValue *v = g_enum_get_value_by_nick (klass, name ? name : "cpu");
  g_autoptr (GError) error = NULL;

  /* auto is the elements' own default (each as its caps negotiate); a
   * command says where it runs */
  if (!v || v->value == GST_DFLASH_BACKEND_AUTO)
    return dfl_cli_fail (DFL_EXIT_USAGE, "%s: --backend '%s' is not cpu, cuda or vulkan", cmd,
                         name);
  /* whether the machine has the device is found when the pipeline starts */
  if (!gst_dflash_backend_check ((GstDflashBackend) v->value, &error))
    return dfl_cli_fail (DFL_EXIT_ERROR, "%s: --backend %s: %s", cmd, name, error->message);
  *out = (GstDflashBackend) v->value;
  return DFL_EXIT_OK;
}

DflRoutePlace
dfl_cli_route_place (GstDflashBackend backend)
{
  return backend == GST_DFLASH_BACKEND_CUDA ? DFL_ROUTE_PLACE_CUDA : DFL_ROUTE_PLACE_CPU;
}

int
dfl_cli_drafter_weights (const char *cmd, const char *name, GstDflashDrafterWeights *out)
{
  g_autoptr (GEnumClass) klass = g_type_class_ref (GST_TYPE_DFLASH_DRAFTER_WEIGHTS);
  GEnumValue *v = g_enum_get_value_by_nick (klass, name ? name : "q8_0");

  if (!v)
    return dfl_cli_fail (DFL_EXIT_USAGE, "%s: --drafter-weights '%s' is not q8_0 or stored", cmd,
                         name);
  *out = (GstDflashDrafterWeights) v->value;
  return DFL_EXIT_OK;
}

/* The elements are registered below from this program's own copy of
 * them. Where the registry does not fork to scan (GST_REGISTRY_FORK=no),
 * a plugin path holding the plugin's library too has that library loaded
 * into this process by the scan: a second copy, whose types clash with
 * this one's (GLib refuses their second registration, and the program
 * waited on the first forever). So such directories leave this process's
 * plugin path; with a forking scan the library stays in the child. */
static void
drop_own_plugin_dirs (const char *var)
{
  const char *value = g_getenv (var);
  g_auto (GStrv) dirs = NULL;
  g_autoptr (GPtrArray) keep = NULL;
  g_autofree char *joined = NULL;

  if (!value || !*value)
    return;
  dirs = g_strsplit (value, G_SEARCHPATH_SEPARATOR_S, -1);
  keep = g_ptr_array_new ();
  for (int i = 0; dirs[i]; i++) {
    g_autofree char *lib = g_build_filename (dirs[i], "libgstdflash.so", NULL);
    if (!g_file_test (lib, G_FILE_TEST_EXISTS))
      g_ptr_array_add (keep, dirs[i]);
  }
  if (keep->len == g_strv_length (dirs))
    return;
  g_ptr_array_add (keep, NULL);
  joined = g_strjoinv (G_SEARCHPATH_SEPARATOR_S, (char **) keep->pdata);
  g_setenv (var, joined, TRUE);
}

gboolean
dfl_cli_init_elements (GError **error)
{
  if (!g_strcmp0 (g_getenv ("GST_REGISTRY_FORK"), "no")) {
    drop_own_plugin_dirs ("GST_PLUGIN_PATH_1_0");
    drop_own_plugin_dirs ("GST_PLUGIN_PATH");
  }
  if (!gst_init_check (NULL, NULL, error))
    return FALSE;
  gst_plugin_register_static (GST_VERSION_MAJOR, GST_VERSION_MINOR, "dflash",
      "Block speculative decoding (DFlash 2)", gst_dflash_elements_register, PACKAGE_VERSION,
      "LGPL", "gst-dflash", "gst-dflash", "https://example.invalid/gst-dflash");
  return TRUE;
}

void
dfl_cli_output_init (DflCliOutput *o, gboolean echo)
{
  o->text = g_string_new (NULL);
  o->ids = g_array_new (FALSE, FALSE, sizeof (int));
  o->echo = echo;
}

void
dfl_cli_output_clear (DflCliOutput *o)
{
  if (o->text)
    g_string_free (g_steal_pointer (&o->text), TRUE);
  g_clear_pointer (&o->ids, g_array_unref);
}

void
dfl_cli_output_on_text (GstElement *sink, GstBuffer *buf, GstPad *pad, DflCliOutput *o)
{
  GstMapInfo map;

  if (!gst_buffer_map (buf, &map, GST_MAP_READ))
    return;
  g_string_append_len (o->text, (const char *) map.data, map.size);
  if (o->echo) {
    fwrite (map.data, 1, map.size, stdout);
    fflush (stdout);
  }
  gst_buffer_unmap (buf, &map);
}

void
dfl_cli_output_on_ids (GstElement *sink, GstBuffer *buf, GstPad *pad, DflCliOutput *o)
{
  GstMapInfo map;

  if (!gst_buffer_map (buf, &map, GST_MAP_READ))
    return;
  g_array_append_vals (o->ids, map.data, map.size / sizeof (int));
  gst_buffer_unmap (buf, &map);
}
