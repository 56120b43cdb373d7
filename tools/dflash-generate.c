/* gst-dflash — `dflash generate`: decode from a prompt.
 *
 * It runs the dflash pipeline: the loop lives in the elements, and this
 * command only builds the launch description its options ask for, hands the
 * pipeline the model it loaded (a "dflash.model" context), streams the
 * verifier's text to stdout and reads the figures off the bus (the
 * verifier's dflash-summary, the round's accumulator: gstdflashsummary.h):
 * one line on stderr at the end, or one JSON object on stdout with --json.
 */
#include <cjson/cJSON.h>
#include <gst/gst.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat-template.h"
#include "dfl-error.h"
#include "dflash-cli.h"
#include "gstdflashmodel.h"
#include "gstdflashsummary.h"
#include "round.h"
#include "route-cost.h"

#define DEFAULT_PROMPT "func ContainsRune(s string, r rune) bool {"
#define DEFAULT_MAX_NEW 128

static void
print_json (const DflRoundStats *st, const DflCliOutput *o, const char *target_dir, DflRoute route,
            gboolean chain_alone, const char *backend)
{
  cJSON *obj = cJSON_CreateObject ();
  cJSON *list = cJSON_AddArrayToObject (obj, "new_tokens");
  cJSON *rates = cJSON_AddArrayToObject (obj, "accept_rate_per_position");
  g_autofree char *s = NULL;

  for (guint i = 0; i < o->ids->len; i++)
    cJSON_AddItemToArray (list, cJSON_CreateNumber (g_array_index (o->ids, int, i)));
  /* 0 where nothing was proposed, as the verifier's summary has it */
  for (int j = 0; route != DFL_ROUTE_NONE && j < st->positions; j++) {
    double r = dfl_round_stats_accept_rate (st, j);
    cJSON_AddItemToArray (rates, cJSON_CreateNumber (isnan (r) ? 0.0 : r));
  }
  cJSON_AddStringToObject (obj, "text", o->text->str);
  cJSON_AddNumberToObject (obj, "prompt_tokens", st->prompt_tokens);
  cJSON_AddNumberToObject (obj, "rounds", st->rounds);
  cJSON_AddNumberToObject (obj, "mean_accepted", dfl_round_stats_tau (st));
  cJSON_AddNumberToObject (obj, "block_rounds", st->block_rounds);
  cJSON_AddNumberToObject (obj, "chain_rounds", st->chain_rounds);
  cJSON_AddNumberToObject (obj, "draft_s", st->draft_s);
  cJSON_AddNumberToObject (obj, "verify_s", st->verify_s);
  /* tokens after the first (which the prompt's pass gives) over the rounds' wall time */
  cJSON_AddNumberToObject (obj, "decode_tokens_per_s", dfl_round_stats_tokens_per_s (st));
  cJSON_AddNumberToObject (obj, "prefill_tokens_per_s",
                           st->prefill_s > 0 ? st->prompt_tokens / st->prefill_s : 0);
  cJSON_AddNumberToObject (obj, "wall_s", st->wall_s + st->prefill_s);
  cJSON_AddStringToObject (obj, "route", dfl_route_name (route));
  if (route == DFL_ROUTE_COST)
    cJSON_AddStringToObject (obj, "route_pipeline", chain_alone ? "chain" : "routed");
  cJSON_AddStringToObject (obj, "target", target_dir);
  cJSON_AddStringToObject (obj, "backend", backend);
  s = cJSON_PrintUnformatted (obj);
  printf ("%s\n", s);
  cJSON_Delete (obj);
}

static void
print_figures (const DflRoundStats *st, const DflCliOutput *o, DflRoute route, gboolean chain_alone)
{
  fprintf (stderr, "\n[prompt %" G_GINT64_FORMAT " tokens, %u new; prefill %.1f tokens/s, "
           "decode %.1f tokens/s; %" G_GINT64_FORMAT " rounds", st->prompt_tokens, o->ids->len,
           st->prefill_s > 0 ? st->prompt_tokens / st->prefill_s : 0.0,
           dfl_round_stats_tokens_per_s (st), st->rounds);
  if (route != DFL_ROUTE_NONE) {
    fprintf (stderr, " (%" G_GINT64_FORMAT " block, %" G_GINT64_FORMAT " chain), tau %.2f; "
             "draft %.3f s, verify %.3f s; accepted by position:",
             st->block_rounds, st->chain_rounds, dfl_round_stats_tau (st), st->draft_s,
             st->verify_s);
    for (int j = 0; j < st->positions; j++) {
      double r = dfl_round_stats_accept_rate (st, j);
      fprintf (stderr, " %.2f", isnan (r) ? 0.0 : r);
    }
    if (chain_alone)
      fprintf (stderr, "; prompt lookup alone: the block trails here");
  }
  fprintf (stderr, "]\n");
}

/* Run the pipeline to its end; its bus's ERROR becomes ours. */
/* An element's WARNING, on stderr: the run goes on. */
static void
print_warning (GstMessage *msg)
{
  g_autoptr (GError) w = NULL;

  gst_message_parse_warning (msg, &w, NULL);
  fprintf (stderr, "dflash: warning: %s\n", w->message);
}

static gboolean
run_pipeline (GstElement *pipeline, GstStructure **summary, GError **error)
{
  g_autoptr (GstBus) bus = gst_element_get_bus (pipeline);
  gboolean ok = TRUE;

  if (gst_element_set_state (pipeline, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE)
    ok = FALSE;
  for (;;) {
    GstMessage *msg = gst_bus_timed_pop_filtered (bus, GST_CLOCK_TIME_NONE,
        GST_MESSAGE_ERROR | GST_MESSAGE_EOS | GST_MESSAGE_ELEMENT | GST_MESSAGE_WARNING);
    gboolean end = FALSE;
    switch (GST_MESSAGE_TYPE (msg)) {
      case GST_MESSAGE_WARNING:
        print_warning (msg);
        break;
      case GST_MESSAGE_ERROR: {
        g_autoptr (GError) e = NULL;
        gst_message_parse_error (msg, &e, NULL);
        g_propagate_error (error, g_steal_pointer (&e));
        ok = FALSE;
        end = TRUE;
        break;
      }
      case GST_MESSAGE_EOS:
        end = TRUE;
        break;
      case GST_MESSAGE_ELEMENT:
        if (gst_message_has_name (msg, GST_DFLASH_SUMMARY_NAME)) {
          g_clear_pointer (summary, gst_structure_free);
          *summary = gst_structure_copy (gst_message_get_structure (msg));
        }
        break;
      default:
        break;
    }
    gst_message_unref (msg);
    if (end || (!ok && error && *error))
      break;
  }
  gst_element_set_state (pipeline, GST_STATE_NULL);
  /* what the elements said as they stopped (the router's figures file) */
  for (GstMessage *msg; (msg = gst_bus_pop_filtered (bus, GST_MESSAGE_WARNING));) {
    print_warning (msg);
    gst_message_unref (msg);
  }
  if (!ok && error && !*error)
    g_set_error (error, GST_CORE_ERROR, GST_CORE_ERROR_STATE_CHANGE, "the pipeline would not start");
  return ok;
}

int
dfl_cmd_generate (int argc, char **argv)
{
  g_autofree char *target_dir = NULL, *prompt = NULL, *tokens = NULL, *drafter_path = NULL,
      *route_name = NULL, *route_figures = NULL, *select = NULL, *system = NULL,
      *drafter_weights_name = NULL, *backend_name = NULL;
  GstDflashDrafterWeights drafter_weights;
  GstDflashBackend backend;
  DflRoutePlace place;
  int max_new = DEFAULT_MAX_NEW, head_width = 0;
  double temperature = 0.0, top_p = 1.0;
  gint64 seed = 0;
  gboolean no_draft = FALSE, json = FALSE, chat = FALSE, no_thinking = FALSE;
  GOptionEntry entries[] = {
    { "target", 0, 0, G_OPTION_ARG_FILENAME, &target_dir, "Qwen3 checkpoint folder or .gguf file (default: the embedded default model)", "DIR|FILE" },
    { "drafter", 0, 0, G_OPTION_ARG_FILENAME, &drafter_path, "DFlash sidecar file or released DFlash folder (default: dflash.safetensors in the target folder, X.dflash.safetensors beside X.gguf)", "FILE|DIR" },
    { "drafter-weights", 0, 0, G_OPTION_ARG_STRING, &drafter_weights_name, DFL_CLI_DRAFTER_WEIGHTS_HELP, "q8_0|stored" },
    { "backend", 0, 0, G_OPTION_ARG_STRING, &backend_name, DFL_CLI_BACKEND_HELP, "cpu|cuda|vulkan" },
    { "prompt", 0, 0, G_OPTION_ARG_STRING, &prompt, "Prompt text (default: \"" DEFAULT_PROMPT "\")", "TEXT" },
    { "tokens", 0, 0, G_OPTION_ARG_STRING, &tokens, "Prompt as token ids instead of text", "1,2,3" },
    { "max-new", 0, 0, G_OPTION_ARG_INT, &max_new, "Tokens to generate at most (default " G_STRINGIFY (DEFAULT_MAX_NEW) ")", "N" },
    { "no-draft", 0, 0, G_OPTION_ARG_NONE, &no_draft, "Plain decoding with the target alone", NULL },
    { "route", 0, 0, G_OPTION_ARG_STRING, &route_name, "cost (chain wherever prompt lookup matched, else whichever of the block and a plain step has given more tokens a second; the default with a drafter), block, chain (prompt lookup), match (chain on a 3-token match, else block) or auto (the sidecar's router)", "ROUTE" },
    { "route-figures", 0, 0, G_OPTION_ARG_FILENAME, &route_figures, "Where route cost keeps its figures between runs (default: a file a model pair under the user cache folder, gst-dflash/route/; none: start afresh)", "FILE|none" },
    { "select", 0, 0, G_OPTION_ARG_STRING, &select, "rescore (the selector, default) or plain (each row's argmax)", "HOW" },
    { "head-width", 0, 0, G_OPTION_ARG_INT, &head_width, "Score drafts over the head's first N rows only (default: all)", "N" },
    { "temperature", 0, 0, G_OPTION_ARG_DOUBLE, &temperature, "Sample at this temperature (default 0: greedy)", "T" },
    { "top-p", 0, 0, G_OPTION_ARG_DOUBLE, &top_p, "Sample from the top-p nucleus (default 1)", "P" },
    { "seed", 0, 0, G_OPTION_ARG_INT64, &seed, "Seed of the sampling stream (default 0)", "S" },
    { "chat", 0, 0, G_OPTION_ARG_NONE, &chat, "The prompt is a user's message: render it with the target's chat template (tokenizer_config.json's, else its model_type's)", NULL },
    { "system", 0, 0, G_OPTION_ARG_STRING, &system, "With --chat: a system message before the user's", "TEXT" },
    { "no-thinking", 0, 0, G_OPTION_ARG_NONE, &no_thinking, "With --chat: Qwen3's enable_thinking=false (the answer starts after an empty think block)", NULL },
    { "json", 0, 0, G_OPTION_ARG_NONE, &json, "Print one JSON object with the tokens, text and figures", NULL },
    { NULL }
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("- decode from a prompt");
  g_autoptr (GError) error = NULL;
  g_autoptr (GstDflashModel) model = NULL;
  g_autoptr (GArray) ids = NULL;
  g_autoptr (GstElement) pipeline = NULL;
  g_autofree char *source = NULL, *desc = NULL, *figures = NULL, *q_model = NULL, *q_prompt = NULL;
  GstStructure *summary = NULL;
  GstContext *context;
  const DflQwen3Config *c;
  const DflTokenizer *tok;
  DflDrafterWeights *drafter;
  DflRoute route = DFL_ROUTE_BLOCK;
  DflCliOutput out = { 0 };
  DflRoundStats stats;
  guint64 prefill_ns = 0;
  DflRouteCost kept[DFL_ROUTE_PLACES];
  gboolean chain_alone;
  GstElement *e;
  gboolean ok;
  int status;

  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!dfl_cli_parse (ctx, &argc, &argv))
    return DFL_EXIT_USAGE;
  if (argc > 1)
    return dfl_cli_fail (DFL_EXIT_USAGE, "generate: unexpected argument '%s'", argv[1]);
  if (prompt && tokens)
    return dfl_cli_fail (DFL_EXIT_USAGE, "generate: give --prompt or --tokens, not both");
  if (chat && tokens)
    return dfl_cli_fail (DFL_EXIT_USAGE, "generate: --chat renders a text prompt; give --prompt, "
                         "not --tokens");
  if (!chat && (system || no_thinking))
    return dfl_cli_fail (DFL_EXIT_USAGE, "generate: --%s needs --chat",
                         system ? "system" : "no-thinking");
  if (max_new < 1)
    return dfl_cli_fail (DFL_EXIT_USAGE, "generate: --max-new must be at least 1, not %d", max_new);
  /* the negated tests refuse NaN too */
  if (!(temperature >= 0 && temperature <= DFL_SAMPLER_MAX_TEMPERATURE))
    return dfl_cli_fail (DFL_EXIT_USAGE, "generate: --temperature must be 0 (greedy) to %g, not %g",
                         DFL_SAMPLER_MAX_TEMPERATURE, temperature);
  if (!(top_p >= DFL_SAMPLER_MIN_TOP_P && top_p <= 1))
    return dfl_cli_fail (DFL_EXIT_USAGE, "generate: --top-p must be %g to 1, not %g",
                         DFL_SAMPLER_MIN_TOP_P, top_p);
  if ((status = dfl_cli_check_draft_options ("generate", route_name, select, head_width, no_draft,
                                             &route)) != DFL_EXIT_OK)
    return status;
  if ((status = dfl_cli_drafter_weights ("generate", drafter_weights_name, &drafter_weights))
      != DFL_EXIT_OK)
    return status;
  if ((status = dfl_cli_backend ("generate", backend_name, &backend)) != DFL_EXIT_OK)
    return status;
  place = dfl_cli_route_place (backend);
  if (!dfl_cli_init_elements (&error))
    return dfl_cli_fail_error (g_steal_pointer (&error));

  if (!target_dir)
    target_dir = g_strdup (dfl_cli_default_target ());
  /* the model is loaded here once and handed to the pipeline */
  if (!(model = gst_dflash_model_new (target_dir, drafter_path,
                                      no_draft || (route_name && route == DFL_ROUTE_NONE),
                                      drafter_weights, &error)))
    return dfl_cli_fail_error (g_steal_pointer (&error));
  c = dfl_target_config (gst_dflash_model_target (model));
  tok = gst_dflash_model_tokenizer (model);
  drafter = gst_dflash_model_drafter (model);
  if (!tok && !tokens)
    return dfl_cli_fail (DFL_EXIT_ERROR, "%s: no tokenizer (tokenizer.json, or tokenizer.ggml metadata); give the prompt as --tokens", target_dir);
  if (tokens) {
    ids = g_array_new (FALSE, FALSE, sizeof (int));
    if (!dfl_cli_parse_tokens (tokens, ids, &error))
      return dfl_cli_fail (DFL_EXIT_USAGE, "%s", error->message);
    if (!dfl_cli_check_tokens (ids, c->vocab, target_dir, &error))
      return dfl_cli_fail_error (g_steal_pointer (&error));
  } else if (chat) {
    /* the rendered conversation goes to tapsource as its token ids */
    g_autoptr (DflChatTemplate) tmpl = dfl_chat_template_load (target_dir, &error);
    DflChatMessage msgs[2];
    g_autofree char *text = NULL;
    GString *list;
    int n = 0;

    if (!tmpl)
      return dfl_cli_fail_error (g_steal_pointer (&error));
    if (system)
      msgs[n++] = (DflChatMessage) { "system", system, NULL };
    msgs[n++] = (DflChatMessage) { "user", prompt ? prompt : DEFAULT_PROMPT, NULL };
    if (!(text = dfl_chat_template_render (tmpl, msgs, n, TRUE, !no_thinking, &error))
        || !(ids = dfl_tokenizer_encode (tok, text, -1, &error)))
      return dfl_cli_fail_error (g_steal_pointer (&error));
    list = g_string_new (NULL);
    for (guint i = 0; i < ids->len; i++)
      g_string_append_printf (list, "%s%d", i ? "," : "", g_array_index (ids, int, i));
    tokens = g_string_free (list, FALSE);
  } else if (!(ids = dfl_tokenizer_encode (tok, prompt ? prompt : DEFAULT_PROMPT, -1, &error))) {
    return dfl_cli_fail_error (g_steal_pointer (&error));
  }
  if (ids->len == 0)
    return dfl_cli_fail (DFL_EXIT_USAGE, "generate: the prompt is empty (give --prompt some text, "
                         "or --tokens)");
  {
    /* tapsource wants room for the prompt, every new token and one block */
    int block = drafter ? dfl_drafter_weights_geometry (drafter)->block : 1;
    gint64 room = (gint64) c->max_positions - block - ids->len;

    if (room < 1)
      return dfl_cli_fail (DFL_EXIT_ERROR,
                           "the prompt has %u tokens, more than the context of %s holds "
                           "(max_position_embeddings %d, less a block of %d: at most %d prompt "
                           "tokens)", ids->len, target_dir, c->max_positions, block,
                           MAX (c->max_positions - block - 1, 0));
    if (max_new > room)
      return dfl_cli_fail (DFL_EXIT_ERROR,
                           "the prompt's %u tokens and --max-new %d pass the context of %s "
                           "(max_position_embeddings %d); with this prompt --max-new may be at "
                           "most %" G_GINT64_FORMAT, ids->len, max_new, target_dir,
                           c->max_positions, room);
  }

  /* drafting happens whenever a drafter is there, unless --no-draft; the
   * chain needs none */
  if (no_draft)
    route = DFL_ROUTE_NONE;
  else if (!route_name)
    route = drafter ? DFL_ROUTE_COST : DFL_ROUTE_NONE;
  if (dfl_route_needs_drafter (route) && !drafter)
    return dfl_cli_fail (DFL_EXIT_ERROR, "route '%s' needs a drafter, and %s has no dflash.safetensors "
                         "(name one with --drafter)", dfl_route_name (route), target_dir);
  if (route == DFL_ROUTE_AUTO && !dfl_drafter_weights_has_route (drafter))
    return dfl_cli_fail (DFL_EXIT_ERROR, "route 'auto' needs a fitted router, and %s has no dflash_route "
                         "(write one with 'dflash route-fit', or route block, chain or match)",
                         gst_dflash_model_drafter_path (model));

  q_model = dfl_cli_quoted (target_dir);
  if (tokens) {
    g_autofree char *q = dfl_cli_quoted (tokens);
    q_prompt = g_strdup_printf ("tokens=%s", q);
  } else {
    g_autofree char *q = dfl_cli_quoted (prompt ? prompt : DEFAULT_PROMPT);
    q_prompt = g_strdup_printf ("prompt=%s", q);
  }
  source = g_strdup_printf ("tapsource name=src model=%s %s max-new-tokens=%d temperature=%g "
                            "top-p=%g seed=%" G_GINT64_FORMAT " drafter-weights=%s", q_model,
                            q_prompt, max_new, temperature, top_p, seed,
                            drafter_weights == GST_DFLASH_DRAFTER_WEIGHTS_Q8_0 ? "q8_0" : "stored");
  figures = dfl_cli_route_figures (route_figures, target_dir,
                                  gst_dflash_model_drafter_path (model));
  /* route cost where this machine's figures for the pair say the block
   * trails a plain step (and its next try is not due): prompt lookup's
   * pipeline alone, the same tokens without the block's branch and its
   * threads; the decisions count towards the block's next try */
  for (int i = 0; i < DFL_ROUTE_PLACES; i++)
    dfl_route_cost_init (&kept[i], DFL_ROUTE_COST_PROBE_EVERY);
  chain_alone = route == DFL_ROUTE_COST && figures && dfl_route_figures_read (figures, kept, NULL)
                && dfl_route_cost_block_trails (&kept[place]);
  desc = dfl_cli_describe (chain_alone ? DFL_ROUTE_CHAIN : route, source,
                           select ? select : "rescore", head_width, figures, backend);
  if (!(pipeline = gst_parse_launch (desc, &error)))
    return dfl_cli_fail (DFL_EXIT_ERROR, "the pipeline '%s': %s", desc, error->message);
  context = gst_dflash_model_context_new (model);
  gst_element_set_context (pipeline, context);
  gst_context_unref (context);

  /* the text streams to stdout unless it goes into the JSON */
  dfl_cli_output_init (&out, !json);
  e = gst_bin_get_by_name (GST_BIN (pipeline), "text");
  g_signal_connect (e, "handoff", G_CALLBACK (dfl_cli_output_on_text), &out);
  gst_object_unref (e);
  e = gst_bin_get_by_name (GST_BIN (pipeline), "ids");
  g_signal_connect (e, "handoff", G_CALLBACK (dfl_cli_output_on_ids), &out);
  gst_object_unref (e);

  ok = run_pipeline (pipeline, &summary, &error);
  if (ok && !(summary && gst_dflash_summary_parse (summary, &stats))) {
    g_set_error (&error, DFL_ERROR, DFL_ERROR_INVALID,
                 "the verifier posted no dflash-summary with the figures");
    ok = FALSE;
  }
  if (ok) {
    /* the prompt's pass is tapsource's */
    e = gst_bin_get_by_name (GST_BIN (pipeline), "src");
    g_object_get (e, "busy-time", &prefill_ns, NULL);
    gst_object_unref (e);
    stats.prompt_tokens = ids->len;
    stats.prefill_s = prefill_ns / 1e9;
    if (json)
      print_json (&stats, &out, target_dir, route, chain_alone, backend_name ? backend_name : "cpu");
    else
      print_figures (&stats, &out, route, chain_alone);
    if (chain_alone) {
      /* every round of the run was one the block was not tried on */
      g_autoptr (GError) e2 = NULL;
      kept[place].since_other =
          (int) MIN ((gint64) kept[place].since_other + stats.rounds, G_MAXINT / 2);
      if (!dfl_route_figures_write (figures, kept, &e2))
        fprintf (stderr, "dflash: warning: --route-figures %s: %s\n", figures, e2->message);
    }
    dfl_round_stats_clear (&stats);
  }
  dfl_cli_output_clear (&out);
  g_clear_pointer (&summary, gst_structure_free);
  return ok ? DFL_EXIT_OK : dfl_cli_fail_error (g_steal_pointer (&error));
}
