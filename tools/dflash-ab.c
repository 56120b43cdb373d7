/* gst-dflash — `dflash ab`: two pipeline descriptions, the same prompts,
 * side by side.
 *
 * A description is a .pipeline file (see pipelines/): a gst-launch line, '#'
 * lines being comments, ending in fdsink. Each runs once per prompt: the
 * prompt is set on its tapsource and every fdsink is swapped for a fakesink
 * whose handoffs keep the text (the verifier's tokens pad, where the
 * description leaves it free, gets one too, for the ids). The model is
 * loaded once per description, as its tapsource asks (gst_dflash_model_key:
 * model, drafter, no-drafter, drafter-weights, gpu-weights, backend), once
 * for both where the two agree on all of them, and handed in as the
 * "dflash.model" context, so a prompt costs no reload and each side runs
 * the model its description asks for. The output says which each side ran and whether
 * the two shared it.
 *
 * The figures are the verifier's: each run's dflash-summary carries the
 * round's accumulator (gstdflashsummary.h), and a side's total is those
 * added up, so per-position acceptance and τ over all prompts are ratios
 * of counts rather than means of per-prompt means. Drafting is lossless, so A and B must
 * produce the same text for every prompt: where they do not, ab names the
 * prompt and exits 1 after printing everything.
 *
 * --plot writes a PNG (dflash-ab-plot.c): decode tokens/s of A and B per
 * prompt and over all prompts, τ per prompt and acceptance by draft
 * position. No picture is written unless it is asked
 * for: a comparison run from a script should not leave files about.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dfl-error.h"
#include "dflash-cli.h"
#include "prompts.h"
#include <gst/gst.h>

#include "gstdflashmodel.h"
#include "gstdflashsummary.h"
#include "dflash-ab-plot.h"

/* One description's run over one prompt. */
typedef struct {
  DflRoundStats stats;       /* the verifier's figures of the run */
  DflCliOutput out;
  gboolean have_ids;
} Run;

typedef struct {
  const char *label;         /* "A" or "B" */
  const char *path;
  char *desc;                /* the description without its comments */
  char *model_dir, *drafter;
  gboolean no_drafter;
  GstDflashDrafterWeights drafter_weights;
  char *model_key;           /* what chooses its model: its tapsource's model-level properties */
  GstDflashModel *model;
  gboolean shared;           /* the model is the other side's */
  Run *runs;                 /* one a prompt */
  DflRoundStats total;
} Side;

/* --- input --------------------------------------------------------------- */


/* The description without its '#' lines. */
static char *
read_description (const char *path, GError **error)
{
  g_autofree char *text = NULL;
  g_auto (GStrv) lines = NULL;
  GString *desc;

  if (!g_file_get_contents (path, &text, NULL, error))
    return NULL;
  desc = g_string_new (NULL);
  lines = g_strsplit (text, "\n", -1);
  for (int i = 0; lines[i]; i++) {
    const char *l = lines[i];
    while (g_ascii_isspace (*l))
      l++;
    if (*l == '#' || !*l)
      continue;
    g_string_append (desc, lines[i]);
    g_string_append_c (desc, '\n');
  }
  if (desc->len == 0) {
    g_string_free (desc, TRUE);
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID, "%s: no pipeline description in it, only comments", path);
    return NULL;
  }
  return g_string_free (desc, FALSE);
}

/* --- the pipeline -------------------------------------------------------- */

/* Every element in the bin, nested bins included, made by `factory`. */
static GList *
find_all (GstElement *pipeline, const char *factory)
{
  GstIterator *it;
  GValue v = G_VALUE_INIT;
  GList *found = NULL;
  gboolean more = TRUE;

  if (!GST_IS_BIN (pipeline)) {
    GstElementFactory *f = gst_element_get_factory (pipeline);
    if (f && !g_strcmp0 (gst_plugin_feature_get_name (f), factory))
      found = g_list_prepend (found, gst_object_ref (pipeline));
    return found;
  }
  it = gst_bin_iterate_recurse (GST_BIN (pipeline));
  while (more) {
    switch (gst_iterator_next (it, &v)) {
      case GST_ITERATOR_OK: {
        GstElement *e = g_value_get_object (&v);
        GstElementFactory *f = gst_element_get_factory (e);
        if (f && !g_strcmp0 (gst_plugin_feature_get_name (f), factory))
          found = g_list_prepend (found, gst_object_ref (e));
        g_value_reset (&v);
        break;
      }
      case GST_ITERATOR_RESYNC:
        g_list_free_full (g_steal_pointer (&found), gst_object_unref);
        gst_iterator_resync (it);
        break;
      default:
        more = FALSE;
        break;
    }
  }
  g_value_unset (&v);
  gst_iterator_free (it);
  return g_list_reverse (found);
}

/* The exactly one element of `factory` the runner needs, or an error naming
 * the file. */
static GstElement *
find_one (GstElement *pipeline, const char *factory, const char *path, GError **error)
{
  GList *all = find_all (pipeline, factory);
  guint n = g_list_length (all);
  GstElement *e = n == 1 ? gst_object_ref (all->data) : NULL;

  g_list_free_full (all, gst_object_unref);
  if (n == 0)
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID, "%s: the pipeline has no %s", path, factory);
  else if (n > 1)
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "%s: the pipeline has %u %s elements; ab runs pipelines with one", path, n, factory);
  return e;
}

/* The parsed description, with its tapsource and verifier. */
static GstElement *
parse (const Side *side, GstElement **source, GstElement **verifier, GError **error)
{
  g_autoptr (GError) e = NULL;
  g_autoptr (GstElement) pipeline = gst_parse_launch_full (side->desc, NULL, GST_PARSE_FLAG_FATAL_ERRORS, &e);

  if (!pipeline) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID, "%s: not a pipeline description: %s", side->path,
                 e ? e->message : "gst_parse_launch failed");
    return NULL;
  }
  gst_object_ref_sink (pipeline);
  if (!(*source = find_one (pipeline, "tapsource", side->path, error)))
    return NULL;
  if (!(*verifier = find_one (pipeline, "verifier", side->path, error))) {
    gst_clear_object (source);
    return NULL;
  }
  return g_steal_pointer (&pipeline);
}

/* A fakesink into `bin`, its handoffs into the run, linked after `from`. */
static gboolean
add_capture (GstBin *bin, GstPad *from, GCallback handoff, Run *run, GError **error)
{
  GstElement *sink = gst_element_factory_make ("fakesink", NULL);
  g_autoptr (GstPad) pad = NULL;

  if (!sink) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID, "no fakesink element (GStreamer's coreelements plugin)");
    return FALSE;
  }
  /* as fast as the pipeline goes: no clock, no preroll to wait for */
  g_object_set (sink, "signal-handoffs", TRUE, "sync", FALSE, "async", FALSE, NULL);
  g_signal_connect (sink, "handoff", handoff, &run->out);
  gst_bin_add (bin, sink);
  pad = gst_element_get_static_pad (sink, "sink");
  if (from && GST_PAD_LINK_FAILED (gst_pad_link (from, pad))) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID, "could not link a fakesink after %s:%s",
                 GST_DEBUG_PAD_NAME (from));
    return FALSE;
  }
  return TRUE;
}

/* Swap each fdsink for a capturing fakesink in the same place. */
static gboolean
capture (const Side *side, GstElement *pipeline, GstElement *verifier, Run *run, GError **error)
{
  GList *sinks = find_all (pipeline, "fdsink");
  g_autoptr (GstPad) tokens = gst_element_get_static_pad (verifier, "tokens");
  gboolean ok = TRUE;

  for (GList *l = sinks; l && ok; l = l->next) {
    GstElement *fd = l->data;
    g_autoptr (GstPad) pad = gst_element_get_static_pad (fd, "sink");
    g_autoptr (GstPad) peer = pad ? gst_pad_get_peer (pad) : NULL;
    g_autoptr (GstObject) parent = gst_object_get_parent (GST_OBJECT (fd));

    if (peer)
      gst_pad_unlink (peer, pad);
    gst_bin_remove (GST_BIN (parent), fd);
    ok = add_capture (GST_BIN (parent), peer, G_CALLBACK (dfl_cli_output_on_text), run, error);
  }
  if (ok && !sinks) {
    /* no fdsink: the text pad must still be free for us */
    g_autoptr (GstPad) src = gst_element_get_static_pad (verifier, "src");
    if (gst_pad_is_linked (src)) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                   "%s: the pipeline has no fdsink for ab to take the text from", side->path);
      ok = FALSE;
    } else {
      ok = add_capture (GST_BIN (pipeline), src, G_CALLBACK (dfl_cli_output_on_text), run, error);
    }
  }
  g_list_free_full (sinks, gst_object_unref);
  /* ids compare more strictly than text; where the description uses the
   * tokens pad itself, the text alone is compared */
  run->have_ids = ok && tokens && !gst_pad_is_linked (tokens);
  if (run->have_ids)
    ok = add_capture (GST_BIN (pipeline), tokens, G_CALLBACK (dfl_cli_output_on_ids), run, error);
  return ok;
}

/* Run to EOS, keeping the verifier's figures; a bus ERROR becomes ours. */
static gboolean
run_pipeline (GstElement *pipeline, Run *run, GError **error)
{
  g_autoptr (GstBus) bus = gst_element_get_bus (pipeline);
  gboolean done = FALSE, ok = TRUE, summary = FALSE;

  if (gst_element_set_state (pipeline, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE) {
    /* the element that refused says why on the bus, if anywhere */
    GstMessage *msg = gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR);
    if (msg) {
      gst_message_parse_error (msg, error, NULL);
      gst_message_unref (msg);
    } else {
      g_set_error (error, GST_CORE_ERROR, GST_CORE_ERROR_STATE_CHANGE, "the pipeline would not start");
    }
    gst_element_set_state (pipeline, GST_STATE_NULL);
    return FALSE;
  }
  while (!done) {
    GstMessage *msg = gst_bus_timed_pop_filtered (bus, GST_CLOCK_TIME_NONE,
        GST_MESSAGE_ERROR | GST_MESSAGE_EOS | GST_MESSAGE_ELEMENT);
    const GstStructure *s = gst_message_get_structure (msg);

    switch (GST_MESSAGE_TYPE (msg)) {
      case GST_MESSAGE_ERROR:
        gst_message_parse_error (msg, error, NULL);
        ok = FALSE;
        done = TRUE;
        break;
      case GST_MESSAGE_EOS:
        done = TRUE;
        break;
      case GST_MESSAGE_ELEMENT:
        if (gst_structure_has_name (s, GST_DFLASH_SUMMARY_NAME)) {
          dfl_round_stats_clear (&run->stats);
          summary = gst_dflash_summary_parse (s, &run->stats);
        }
        break;
      default:
        break;
    }
    gst_message_unref (msg);
  }
  gst_element_set_state (pipeline, GST_STATE_NULL);
  if (ok && !summary) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "the verifier posted no dflash-summary with the figures");
    ok = FALSE;
  }
  return ok;
}

/* Read the description, parse it once to check it and to learn which model
 * its tapsource loads. */
static gboolean
side_open (Side *side, GError **error)
{
  g_autoptr (GstElement) pipeline = NULL, source = NULL, verifier = NULL;

  if (!(side->desc = read_description (side->path, error)))
    return FALSE;
  if (!(pipeline = parse (side, &source, &verifier, error)))
    return FALSE;
  g_object_get (source, "model", &side->model_dir, "drafter", &side->drafter,
                "no-drafter", &side->no_drafter, "drafter-weights", &side->drafter_weights, NULL);
  if (side->drafter && !*side->drafter)
    g_clear_pointer (&side->drafter, g_free);
  side->model_key = gst_dflash_model_key (source);
  if (!side->model_dir || !*side->model_dir) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID, "%s: its tapsource names no model", side->path);
    return FALSE;
  }
  return TRUE;
}

static gboolean
side_load (Side *side, Side *other, GError **error)
{
  /* where both tapsources ask for the same model, one copy serves both:
   * a model does not change once loaded (each sequence's state travels
   * with its rounds); where they differ in anything that chooses it
   * (another drafter, other weights on the card, another back end), each
   * side gets its own */
  if (other && other->model && !g_strcmp0 (side->model_key, other->model_key)) {
    side->model = g_object_ref (other->model);
    side->shared = TRUE;
    return TRUE;
  }
  if (!(side->model = gst_dflash_model_new (side->model_dir, side->drafter, side->no_drafter,
                                            side->drafter_weights, error))) {
    g_prefix_error (error, "%s: ", side->path);
    return FALSE;
  }
  return TRUE;
}

static gboolean
run_prompt (Side *side, const char *prompt, int max_new, Run *run, GError **error)
{
  g_autoptr (GstElement) pipeline = NULL, source = NULL, verifier = NULL;
  GstContext *context;

  if (!(pipeline = parse (side, &source, &verifier, error)))
    return FALSE;
  /* this runner's prompt wins over whatever the description says */
  g_object_set (source, "prompt", prompt, "prompts-file", NULL, "tokens", NULL, NULL);
  if (max_new > 0)
    g_object_set (source, "max-new-tokens", max_new, NULL);
  if (!capture (side, pipeline, verifier, run, error))
    return FALSE;
  context = gst_dflash_model_context_new (side->model);
  gst_element_set_context (pipeline, context);
  gst_context_unref (context);
  return run_pipeline (pipeline, run, error);
}

/* --- output -------------------------------------------------------------- */

/* A prompt for a message: quoted, its control characters escaped (UTF-8
 * kept as it is), cut where it is long. */
static char *
prompt_label (const char *prompt)
{
  gboolean cut = g_utf8_validate (prompt, -1, NULL) && g_utf8_strlen (prompt, -1) > 40;
  g_autofree char *head = cut ? g_utf8_substring (prompt, 0, 37) : g_strdup (prompt);
  GString *s = g_string_new ("\"");

  for (const char *c = head; *c; c++) {
    if (*c == '\n')
      g_string_append (s, "\\n");
    else if (*c == '\t')
      g_string_append (s, "\\t");
    else if (*c == '\\' || *c == '"')
      g_string_append_printf (s, "\\%c", *c);
    else if ((guchar) *c < 0x20)
      g_string_append_printf (s, "\\x%02x", (guchar) *c);
    else
      g_string_append_c (s, *c);
  }
  g_string_append (s, cut ? "...\"" : "\"");
  return g_string_free (s, FALSE);
}

/* Where A and B part, as a sentence, or NULL where they agree. */
static char *
difference (const Run *a, const Run *b)
{
  if (a->have_ids && b->have_ids) {
    guint n = MIN (a->out.ids->len, b->out.ids->len), i = 0;
    while (i < n && g_array_index (a->out.ids, int, i) == g_array_index (b->out.ids, int, i))
      i++;
    if (i < n)
      return g_strdup_printf ("token %u is %d in A, %d in B", i + 1, g_array_index (a->out.ids, int, i),
                              g_array_index (b->out.ids, int, i));
    if (a->out.ids->len != b->out.ids->len)
      return g_strdup_printf ("A made %u tokens, B %u", a->out.ids->len, b->out.ids->len);
  }
  if (!g_string_equal (a->out.text, b->out.text))
    return g_strdup_printf ("the texts differ (%" G_GSIZE_FORMAT " and %" G_GSIZE_FORMAT " bytes)",
                            a->out.text->len, b->out.text->len);
  return NULL;
}

static void
print_figures (const char *label, const DflRoundStats *f, int positions)
{
  printf ("  %s  tau %.2f  %" G_GINT64_FORMAT " tokens in %" G_GINT64_FORMAT " rounds  %.1f tokens/s"
          "  accepted by position:", label, dfl_round_stats_tau (f), f->new_tokens, f->rounds,
          dfl_round_stats_tokens_per_s (f));
  for (int j = 0; j < positions; j++) {
    double r = dfl_round_stats_accept_rate (f, j);
    if (isnan (r))
      printf ("    -");
    else
      printf (" %.2f", r);
  }
  printf ("\n");
}

static cJSON *
figures_json (const DflRoundStats *f, int positions)
{
  cJSON *o = cJSON_CreateObject ();
  cJSON *rates = cJSON_AddArrayToObject (o, "accept_rate_per_position");
  cJSON *proposed = cJSON_AddArrayToObject (o, "proposed_per_position");

  cJSON_AddNumberToObject (o, "tau", dfl_round_stats_tau (f));
  cJSON_AddNumberToObject (o, "rounds", f->rounds);
  cJSON_AddNumberToObject (o, "new_tokens", f->new_tokens);
  cJSON_AddNumberToObject (o, "decode_tokens_per_s", dfl_round_stats_tokens_per_s (f));
  cJSON_AddNumberToObject (o, "wall_s", f->wall_s);
  /* 0 where nothing was proposed, as the verifier's own summary has it;
   * proposed_per_position tells the two zeros apart */
  for (int j = 0; j < positions; j++) {
    double r = dfl_round_stats_accept_rate (f, j);
    cJSON_AddItemToArray (rates, cJSON_CreateNumber (isnan (r) ? 0.0 : r));
    cJSON_AddItemToArray (proposed, cJSON_CreateNumber (j < f->positions ? f->proposed_at[j] : 0));
  }
  return o;
}

/* Which model a side ran: what its tapsource asked for, the drafter the
 * model loaded, whether it was the other side's. */
static void
print_side (const Side *side, const Side *other)
{
  const char *drafter = gst_dflash_model_drafter_path (side->model);

  printf ("%s: %s\n  %s\n  drafter: %s\n", side->label, side->path, side->model_key,
          drafter ? drafter : "none");
  if (other)
    printf ("  %s\n", side->shared ? "model: A's (both tapsources ask for the same one)"
            : "model: its own (the tapsources ask for different ones)");
}

static cJSON *
model_json (const Side *side)
{
  cJSON *o = cJSON_CreateObject ();
  const char *drafter = gst_dflash_model_drafter_path (side->model);

  cJSON_AddStringToObject (o, "key", side->model_key);
  if (drafter)
    cJSON_AddStringToObject (o, "drafter", drafter);
  else
    cJSON_AddNullToObject (o, "drafter");
  cJSON_AddBoolToObject (o, "shared", side->shared);
  return o;
}

static void
print_json (Side *sides, GPtrArray *prompts, const gboolean *same, gboolean all_same, int positions)
{
  cJSON *obj = cJSON_CreateObject ();
  cJSON *list;
  g_autofree char *s = NULL;

  for (int k = 0; k < 2; k++) {
    cJSON *o = figures_json (&sides[k].total, positions);
    cJSON_AddStringToObject (o, "pipeline", sides[k].path);
    cJSON_AddItemToObject (o, "model", model_json (&sides[k]));
    cJSON_AddItemToObject (obj, k ? "b" : "a", o);
  }
  list = cJSON_AddArrayToObject (obj, "prompts");
  for (guint i = 0; i < prompts->len; i++) {
    cJSON *p = cJSON_CreateObject ();
    cJSON_AddStringToObject (p, "prompt", g_ptr_array_index (prompts, i));
    for (int k = 0; k < 2; k++) {
      cJSON *o = figures_json (&sides[k].runs[i].stats, positions);
      cJSON_AddStringToObject (o, "text", sides[k].runs[i].out.text->str);
      cJSON_AddItemToObject (p, k ? "b" : "a", o);
    }
    cJSON_AddBoolToObject (p, "identical", same[i]);
    cJSON_AddItemToArray (list, p);
  }
  cJSON_AddBoolToObject (obj, "identical", all_same);
  s = cJSON_PrintUnformatted (obj);
  printf ("%s\n", s);
  cJSON_Delete (obj);
}

/* The picture: each side's figures handed to dflash-ab-plot.c as numbers. */
static gboolean
write_plot (const char *path, Side *sides, guint n_prompts, int positions, GError **error)
{
  /* per side: tokens/s and τ of each prompt, then acceptance by position */
  gsize stride = 2 * (gsize) n_prompts + MAX (positions, 1);
  g_autofree double *values = g_new (double, 2 * stride);
  char *names[2];
  DflAbPlotSide plot[2];
  gboolean ok;

  for (int k = 0; k < 2; k++) {
    double *speed = values + k * stride, *tau = speed + n_prompts, *rate = tau + n_prompts;
    for (guint i = 0; i < n_prompts; i++) {
      speed[i] = dfl_round_stats_tokens_per_s (&sides[k].runs[i].stats);
      tau[i] = dfl_round_stats_tau (&sides[k].runs[i].stats);
    }
    for (int j = 0; j < positions; j++)
      rate[j] = dfl_round_stats_accept_rate (&sides[k].total, j);
    names[k] = g_path_get_basename (sides[k].path);
    plot[k] = (DflAbPlotSide) {
      .name = names[k],
      .tokens_per_s = dfl_round_stats_tokens_per_s (&sides[k].total),
      .tau = dfl_round_stats_tau (&sides[k].total),
      .prompt_tokens_per_s = speed,
      .prompt_tau = tau,
      .accept_rate = rate,
      .positions = positions,
    };
  }
  ok = dfl_ab_plot_write (path, plot, (int) n_prompts, error);
  /* the one picture ab draws: its fonts are not needed again */
  dfl_plot_release_fonts ();
  for (int k = 0; k < 2; k++)
    g_free (names[k]);
  if (!ok)
    g_prefix_error (error, "--plot %s: ", path);
  return ok;
}

/* --- the command --------------------------------------------------------- */

static void
side_clear (Side *side, guint n_prompts)
{
  for (guint i = 0; side->runs && i < n_prompts; i++) {
    dfl_round_stats_clear (&side->runs[i].stats);
    dfl_cli_output_clear (&side->runs[i].out);
  }
  g_free (side->runs);
  dfl_round_stats_clear (&side->total);
  g_free (side->desc);
  g_free (side->model_dir);
  g_free (side->drafter);
  g_free (side->model_key);
  g_clear_object (&side->model);
}

static int
ab (Side *sides, GPtrArray *prompts, int max_new, const char *plot_path, gboolean json)
{
  g_autoptr (GError) error = NULL;
  g_autofree gboolean *same = g_new0 (gboolean, prompts->len);
  g_autofree char *first_diff = NULL;
  gboolean all_same = TRUE;
  guint n_diff = 0;
  int positions = 0;

  for (int k = 0; k < 2; k++)
    if (!side_open (&sides[k], &error))
      return dfl_cli_fail_error (g_steal_pointer (&error));
  for (int k = 0; k < 2; k++)
    if (!side_load (&sides[k], k ? &sides[0] : NULL, &error))
      return dfl_cli_fail_error (g_steal_pointer (&error));

  for (int k = 0; k < 2; k++) {
    sides[k].runs = g_new0 (Run, prompts->len);
    dfl_round_stats_init (&sides[k].total, 0);
    for (guint i = 0; i < prompts->len; i++) {
      Run *run = &sides[k].runs[i];
      dfl_cli_output_init (&run->out, FALSE);
    }
  }
  /* A then B on each prompt, so that a slow machine's drift hits both */
  for (guint i = 0; i < prompts->len; i++)
    for (int k = 0; k < 2; k++) {
      Run *run = &sides[k].runs[i];
      if (!run_prompt (&sides[k], g_ptr_array_index (prompts, i), max_new, run, &error)) {
        g_autofree char *label = prompt_label (g_ptr_array_index (prompts, i));
        return dfl_cli_fail (DFL_EXIT_ERROR, "%s: prompt %u %s: %s", sides[k].path, i + 1, label,
                             error->message);
      }
      dfl_round_stats_merge (&sides[k].total, &run->stats);
    }

  for (int k = 0; k < 2; k++)
    positions = MAX (positions, sides[k].total.positions);
  for (guint i = 0; i < prompts->len; i++) {
    g_autofree char *diff = difference (&sides[0].runs[i], &sides[1].runs[i]);
    same[i] = !diff;
    if (diff) {
      all_same = FALSE;
      if (!n_diff++) {
        g_autofree char *label = prompt_label (g_ptr_array_index (prompts, i));
        first_diff = g_strdup_printf ("prompt %u %s: %s", i + 1, label, diff);
      }
    }
  }

  if (json) {
    print_json (sides, prompts, same, all_same, positions);
  } else {
    for (int k = 0; k < 2; k++)
      print_side (&sides[k], k ? &sides[0] : NULL);
    for (guint i = 0; i < prompts->len; i++) {
      g_autofree char *label = prompt_label (g_ptr_array_index (prompts, i));
      printf ("\nprompt %u %s\n", i + 1, label);
      print_figures ("A", &sides[0].runs[i].stats, positions);
      print_figures ("B", &sides[1].runs[i].stats, positions);
      printf ("  identical: %s\n", same[i] ? "yes" : "no");
    }
    printf ("\ntotal, %u prompt%s\n", prompts->len, prompts->len == 1 ? "" : "s");
    print_figures ("A", &sides[0].total, positions);
    print_figures ("B", &sides[1].total, positions);
    printf ("  identical: %s\n", all_same ? "yes" : "no");
  }
  if (plot_path) {
    if (!write_plot (plot_path, sides, prompts->len, positions, &error))
      return dfl_cli_fail_error (g_steal_pointer (&error));
    if (!json)
      printf ("plot: %s\n", plot_path);
  }
  fflush (stdout);
  if (!all_same)
    return dfl_cli_fail (DFL_EXIT_ERROR, "A and B differ on %u of %u prompts, drafting is not lossless: "
                         "first %s", n_diff, prompts->len, first_diff);
  return DFL_EXIT_OK;
}

int
dfl_cmd_ab (int argc, char **argv)
{
  g_autofree char *prompts_path = NULL, *plot_path = NULL;
  int max_new = G_MININT;
  gboolean json = FALSE;
  GOptionEntry entries[] = {
    { "prompts", 0, 0, G_OPTION_ARG_FILENAME, &prompts_path, "Prompts, one a line (\\n, \\t and \\\\ escapes); required", "FILE" },
    { "max-new", 0, 0, G_OPTION_ARG_INT, &max_new, "Tokens to generate at most for each prompt (default: what each description's tapsource says)", "N" },
    { "plot", 0, 0, G_OPTION_ARG_FILENAME, &plot_path, "Write a PNG of decode tokens/s, tau and acceptance by position, A beside B (default: no picture)", "OUT.png" },
    { "json", 0, 0, G_OPTION_ARG_NONE, &json, "Print one JSON object with the per-prompt and total figures", NULL },
    { NULL }
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("A.pipeline B.pipeline - compare two pipelines on the same prompts");
  g_autoptr (GError) error = NULL;
  g_autoptr (GPtrArray) prompts = NULL;
  Side sides[2] = { { .label = "A" }, { .label = "B" } };
  int status;

  g_option_context_add_main_entries (ctx, entries, NULL);
  g_option_context_set_description (ctx,
      "Each file is a gst-launch description ('#' lines are comments) with a tapsource, a\n"
      "verifier and an fdsink, as in pipelines/. Both run on every prompt; ab prints tau\n"
      "(tokens per target pass), acceptance by block position and decode tokens/s for each,\n"
      "and whether their outputs are identical, as lossless drafting requires: where they\n"
      "are not, it exits 1.");
  if (!dfl_cli_parse (ctx, &argc, &argv))
    return DFL_EXIT_USAGE;
  if (argc != 3)
    return dfl_cli_fail (DFL_EXIT_USAGE, "ab: give two pipeline files, A and B (see --help)");
  if (!prompts_path)
    return dfl_cli_fail (DFL_EXIT_USAGE, "ab: --prompts FILE is required (see --help)");
  if (max_new != G_MININT && (max_new < 1 || max_new > G_MAXINT / 2))
    return dfl_cli_fail (DFL_EXIT_USAGE, "ab: --max-new must be 1 to %d, not %d", G_MAXINT / 2,
                         max_new);
  if (!(prompts = dfl_read_prompts (prompts_path, &error)))
    return dfl_cli_fail_error (g_steal_pointer (&error));
  if (!dfl_cli_init_elements (&error))
    return dfl_cli_fail_error (g_steal_pointer (&error));

  sides[0].path = argv[1];
  sides[1].path = argv[2];
  status = ab (sides, prompts, max_new == G_MININT ? 0 : max_new, plot_path, json);
  for (int k = 0; k < 2; k++)
    side_clear (&sides[k], prompts->len);
  return status;
}
