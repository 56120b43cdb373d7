/* gst-dflash — `dflash generate`: decode from a prompt.
 *
 * The prompt in one pass (prefill), then rounds: speculative where a drafter
 * is there (or a route that needs none), plain decoding otherwise. The text
 * streams to stdout as it is produced; the figures follow on stderr, or as
 * one JSON object on stdout with --json.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dfl-error.h"
#include "dflash-cli.h"
#include "dfl-kernels.h"
#include "speculate.h"
#include "target.h"
#include "tokenizer.h"

#define DEFAULT_PROMPT "func main() {"
#define DEFAULT_MAX_NEW 64

static void
emit (const char *text)
{
  if (*text) {
    fputs (text, stdout);
    fflush (stdout);
  }
}

static void
print_json (const DflSpecStats *st, GArray *generated, const char *text, const char *target_dir,
            DflRoute route, double wall_s)
{
  cJSON *o = cJSON_CreateObject ();
  cJSON *list = cJSON_AddArrayToObject (o, "new_tokens");
  cJSON *rates = NULL;
  double decode_s = st->draft_s + st->verify_s;
  g_autofree char *s = NULL;

  for (guint i = 0; i < generated->len; i++)
    cJSON_AddItemToArray (list, cJSON_CreateNumber (g_array_index (generated, int, i)));
  cJSON_AddStringToObject (o, "text", text);
  cJSON_AddNumberToObject (o, "prompt_tokens", st->prompt_tokens);
  cJSON_AddNumberToObject (o, "rounds", st->rounds);
  cJSON_AddNumberToObject (o, "mean_accepted", dfl_spec_stats_tau (st));
  rates = cJSON_AddArrayToObject (o, "accept_rate_per_position");
  for (int j = 0; j < st->positions && route != DFL_ROUTE_NONE; j++)
    cJSON_AddItemToArray (rates, cJSON_CreateNumber (st->proposed_at[j]
                                                     ? (double) st->accepted_at[j] / st->proposed_at[j] : 0.0));
  cJSON_AddNumberToObject (o, "block_rounds", st->block_rounds);
  cJSON_AddNumberToObject (o, "chain_rounds", st->chain_rounds);
  cJSON_AddNumberToObject (o, "draft_s", st->draft_s);
  cJSON_AddNumberToObject (o, "verify_s", st->verify_s);
  /* tokens after the first (which the prompt's pass gives) over the rounds' time */
  cJSON_AddNumberToObject (o, "decode_tokens_per_s",
                           decode_s > 0 ? (st->new_tokens - 1) / decode_s : 0);
  cJSON_AddNumberToObject (o, "prefill_tokens_per_s",
                           st->prefill_s > 0 ? st->prompt_tokens / st->prefill_s : 0);
  cJSON_AddNumberToObject (o, "wall_s", wall_s);
  cJSON_AddStringToObject (o, "route", dfl_route_name (route));
  cJSON_AddStringToObject (o, "target", target_dir);
  s = cJSON_PrintUnformatted (o);
  printf ("%s\n", s);
  cJSON_Delete (o);
}

static void
print_figures (const DflSpecStats *st, DflRoute route)
{
  double decode_s = st->draft_s + st->verify_s;

  fprintf (stderr, "\n[prompt %d tokens, %d new; prefill %.1f tokens/s, decode %.1f tokens/s; "
           "%d rounds",
           st->prompt_tokens, st->new_tokens,
           st->prefill_s > 0 ? st->prompt_tokens / st->prefill_s : 0.0,
           decode_s > 0 ? (st->new_tokens - 1) / decode_s : 0.0, st->rounds);
  if (route != DFL_ROUTE_NONE) {
    fprintf (stderr, " (%d block, %d chain), tau %.2f; draft %.3f s, verify %.3f s; accepted by position:",
             st->block_rounds, st->chain_rounds, dfl_spec_stats_tau (st), st->draft_s, st->verify_s);
    for (int j = 0; j < st->positions; j++)
      fprintf (stderr, " %.2f", st->proposed_at[j] ? (double) st->accepted_at[j] / st->proposed_at[j] : 0.0);
  }
  fprintf (stderr, "]\n");
}

int
dfl_cmd_generate (int argc, char **argv)
{
  g_autofree char *target_dir = NULL, *prompt = NULL, *tokens = NULL, *drafter_path = NULL,
      *route_name = NULL, *select = NULL;
  int max_new = DEFAULT_MAX_NEW, head_width = 0;
  double temperature = 0.0, top_p = 1.0;
  gint64 seed = 0;
  gboolean no_draft = FALSE, json = FALSE, is_test = FALSE;
  GOptionEntry entries[] = {
    { "target", 0, 0, G_OPTION_ARG_FILENAME, &target_dir, "Qwen3 checkpoint folder (default: the embedded default model)", "DIR" },
    { "drafter", 0, 0, G_OPTION_ARG_FILENAME, &drafter_path, "DFlash sidecar file or released DFlash folder (default: dflash.safetensors in the target folder)", "FILE|DIR" },
    { "prompt", 0, 0, G_OPTION_ARG_STRING, &prompt, "Prompt text (default: \"" DEFAULT_PROMPT "\")", "TEXT" },
    { "tokens", 0, 0, G_OPTION_ARG_STRING, &tokens, "Prompt as token ids instead of text", "1,2,3" },
    { "max-new", 0, 0, G_OPTION_ARG_INT, &max_new, "Tokens to generate at most (default 64)", "N" },
    { "no-draft", 0, 0, G_OPTION_ARG_NONE, &no_draft, "Plain decoding with the target alone", NULL },
    { "route", 0, 0, G_OPTION_ARG_STRING, &route_name, "block, chain (prompt lookup), match (chain on a 3-token match, else block) or auto (the sidecar's router); default: auto where the sidecar has a router, else block", "ROUTE" },
    { "select", 0, 0, G_OPTION_ARG_STRING, &select, "rescore (the selector, default) or plain (each row's argmax)", "HOW" },
    { "head-width", 0, 0, G_OPTION_ARG_INT, &head_width, "Score drafts over the head's first N rows only (default: all)", "N" },
    { "temperature", 0, 0, G_OPTION_ARG_DOUBLE, &temperature, "Sample at this temperature (default 0: greedy)", "T" },
    { "top-p", 0, 0, G_OPTION_ARG_DOUBLE, &top_p, "Sample from the top-p nucleus (default 1)", "P" },
    { "seed", 0, 0, G_OPTION_ARG_INT64, &seed, "Seed of the sampling stream (default 0)", "S" },
    { "json", 0, 0, G_OPTION_ARG_NONE, &json, "Print one JSON object with the tokens, text and figures", NULL },
    { NULL }
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("- decode from a prompt");
  g_autoptr (GError) error = NULL;
  g_autoptr (DflTarget) target = NULL;
  g_autoptr (DflDrafter) drafter = NULL;
  g_autoptr (DflTokenizer) tok = NULL;
  g_autoptr (DflDetokenizer) detok = NULL;
  g_autoptr (DflSpec) spec = NULL;
  g_autoptr (GArray) ids = NULL;
  g_autoptr (GArray) generated = g_array_new (FALSE, FALSE, sizeof (int));
  g_autoptr (GString) text = g_string_new (NULL);
  g_autofree char *tok_path = NULL;
  const DflQwen3Config *c;
  DflSpecParams params;
  gint64 t_start;
  guint shown = 0;

  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!dfl_cli_parse (ctx, &argc, &argv))
    return DFL_EXIT_USAGE;
  if (argc > 1)
    return dfl_cli_fail (DFL_EXIT_USAGE, "generate: unexpected argument '%s'", argv[1]);
  if (prompt && tokens)
    return dfl_cli_fail (DFL_EXIT_USAGE, "generate: give --prompt or --tokens, not both");
  if (max_new < 1)
    return dfl_cli_fail (DFL_EXIT_USAGE, "generate: --max-new must be at least 1, not %d", max_new);
  if (temperature < 0 || !(top_p > 0 && top_p <= 1))
    return dfl_cli_fail (DFL_EXIT_USAGE, "generate: --temperature must be ≥ 0 and --top-p in (0, 1], not %g and %g",
                         temperature, top_p);
  if (head_width < 0)
    return dfl_cli_fail (DFL_EXIT_USAGE, "generate: --head-width must be ≥ 0, not %d", head_width);
  dfl_spec_params_init (&params);
  if (route_name && !dfl_route_from_name (route_name, &params.route))
    return dfl_cli_fail (DFL_EXIT_USAGE, "generate: --route '%s' is not one of block, chain, match, auto", route_name);
  if (route_name && params.route == DFL_ROUTE_NONE)
    no_draft = TRUE;
  if (select && g_strcmp0 (select, "rescore") && g_strcmp0 (select, "plain"))
    return dfl_cli_fail (DFL_EXIT_USAGE, "generate: --select '%s' is not rescore or plain", select);
  if (no_draft && (route_name && params.route != DFL_ROUTE_NONE))
    return dfl_cli_fail (DFL_EXIT_USAGE, "generate: --no-draft and --route %s disagree", route_name);

  if (!target_dir) {
    target_dir = g_strdup (dfl_cli_default_target (&is_test));
    if (is_test)
      fprintf (stderr, "dflash: no default model is embedded yet; running on the test checkpoint %s "
               "(random weights: the text is noise)\n", target_dir);
  }

  if (!(target = dfl_target_load (target_dir, &error)))
    return dfl_cli_fail_error (g_steal_pointer (&error));
  c = dfl_target_config (target);
  if (!no_draft && !(drafter = dfl_cli_open_drafter (drafter_path, target, &error)) && error)
    return dfl_cli_fail_error (g_steal_pointer (&error));

  tok_path = g_build_filename (target_dir, "tokenizer.json", NULL);
  if (g_file_test (tok_path, G_FILE_TEST_EXISTS) && !(tok = dfl_tokenizer_load (tok_path, &error)))
    return dfl_cli_fail_error (g_steal_pointer (&error));
  if (!tok && !tokens)
    return dfl_cli_fail (DFL_EXIT_ERROR, "%s: no tokenizer.json; give the prompt as --tokens", target_dir);
  if (tok && dfl_tokenizer_vocab_size (tok) > (guint) c->vocab)
    return dfl_cli_fail (DFL_EXIT_ERROR, "%s: the tokenizer has %u tokens but the model's vocab_size is %d",
                         tok_path, dfl_tokenizer_vocab_size (tok), c->vocab);

  if (tokens) {
    ids = g_array_new (FALSE, FALSE, sizeof (int));
    if (!dfl_cli_parse_tokens (tokens, ids, &error))
      return dfl_cli_fail (DFL_EXIT_USAGE, "%s", error->message);
    if (!dfl_cli_check_tokens (ids, c->vocab, target_dir, &error))
      return dfl_cli_fail_error (g_steal_pointer (&error));
  } else if (!(ids = dfl_tokenizer_encode (tok, prompt ? prompt : DEFAULT_PROMPT, -1, &error))) {
    return dfl_cli_fail_error (g_steal_pointer (&error));
  }
  if (ids->len == 0)
    return dfl_cli_fail (DFL_EXIT_USAGE, "generate: the prompt is empty");

  /* drafting happens whenever a drafter is there, unless --no-draft; a route
   * that needs none (chain) works without one */
  if (no_draft)
    params.route = DFL_ROUTE_NONE;
  else if (!route_name)
    params.route = !drafter ? DFL_ROUTE_NONE
        : dfl_drafter_has_route (drafter) ? DFL_ROUTE_AUTO : DFL_ROUTE_BLOCK;
  params.max_new = max_new;
  params.selector = g_strcmp0 (select, "plain") != 0;
  params.head_width = head_width;
  params.sampler = (DflSampler) { .temperature = temperature, .top_p = top_p, .seed = seed };
  if (!(spec = dfl_spec_new (target, params.route == DFL_ROUTE_NONE ? NULL : drafter, &params, &error)))
    return dfl_cli_fail_error (g_steal_pointer (&error));

  if (tok)
    detok = dfl_detokenizer_new (tok, TRUE);
  t_start = g_get_monotonic_time ();
  if (!dfl_spec_prefill (spec, (int *) ids->data, ids->len, generated, &error))
    return dfl_cli_fail_error (g_steal_pointer (&error));
  for (;;) {
    for (; shown < generated->len && detok; shown++) {
      g_autofree char *piece = dfl_detokenizer_push (detok, g_array_index (generated, int, shown));
      g_string_append (text, piece);
      if (!json)
        emit (piece);
    }
    if (dfl_spec_done (spec))
      break;
    if (!dfl_spec_round (spec, generated, &error))
      return dfl_cli_fail_error (g_steal_pointer (&error));
  }
  if (detok) {
    g_autofree char *rest = dfl_detokenizer_finish (detok);
    g_string_append (text, rest);
    if (!json)
      emit (rest);
  }
  if (json)
    print_json (dfl_spec_stats (spec), generated, text->str, target_dir, params.route,
                (g_get_monotonic_time () - t_start) / 1e6);
  else
    print_figures (dfl_spec_stats (spec), params.route);
  return DFL_EXIT_OK;
}
