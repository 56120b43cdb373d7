/* gst-dflash — tests of the limits: absurd sizes refused before anything is
 * sized by them, the token-list argument, prompt files, and the context
 * (a prompt longer than it is refused naming both numbers; a sequence that
 * reaches it ends there with a message). Each refusal is checked for its
 * code and for a message naming the file or argument, the value, and what
 * is accepted. */
#include <string.h>

#include <glib/gstdio.h>

#include "dfl-error.h"
#include "drafter.h"
#include "prompts.h"
#include "speculate.h"
#include "test-support.h"
#include "token-list.h"
#include "tokenizer.h"

/* --- the token-list argument --- */

static void
bad_list (const char *text, int vocab, int code, ...)
{
  g_autoptr (GArray) ids = g_array_new (FALSE, FALSE, sizeof (int));
  GError *error = NULL;
  const char *needle;
  va_list ap;

  g_assert_false (dfl_token_list_parse (text, "--tokens", vocab, "models/x", ids, &error));
  dfl_test_check_error (error, code, "--tokens: ", NULL);
  va_start (ap, code);
  while ((needle = va_arg (ap, const char *)) != NULL)
    if (strstr (error->message, needle) == NULL)
      g_error ("message '%s' does not hold '%s'", error->message, needle);
  va_end (ap);
  g_error_free (error);
}

static void
test_token_list (void)
{
  g_autoptr (GArray) ids = g_array_new (FALSE, FALSE, sizeof (int));
  g_autoptr (GError) error = NULL;
  g_autofree char *long_entry = g_strnfill (100, '7');

  g_assert_true (dfl_token_list_parse (" 151644 , 872,198\t", "--tokens", 0, NULL, ids, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (ids->len, ==, 3);
  g_assert_cmpint (g_array_index (ids, int, 0), ==, 151644);
  g_assert_cmpint (g_array_index (ids, int, 2), ==, 198);
  /* negative ids parse where no vocabulary is given: the caller checks them */
  g_array_set_size (ids, 0);
  g_assert_true (dfl_token_list_parse ("-3", "--tokens", 0, NULL, ids, NULL));
  g_assert_cmpint (g_array_index (ids, int, 0), ==, -3);

  bad_list ("", 0, DFL_ERROR_INVALID, "the list is empty", "such as '151644,872,198'", NULL);
  bad_list ("   ", 0, DFL_ERROR_INVALID, "the list is empty", NULL);
  bad_list ("1,,2", 0, DFL_ERROR_INVALID, "entry 2 is empty", NULL);
  bad_list ("1,2,", 0, DFL_ERROR_INVALID, "entry 3 is empty", NULL);
  bad_list ("1,two", 0, DFL_ERROR_INVALID, "entry 2, 'two', is not a token id",
            "expected a decimal integer", NULL);
  bad_list ("1 2", 0, DFL_ERROR_INVALID, "entry 1, '1 2'", NULL);
  bad_list ("0x10", 0, DFL_ERROR_INVALID, "'0x10'", NULL);
  bad_list ("2147483648", 0, DFL_ERROR_INVALID, "'2147483648', is not a token id", NULL);
  bad_list ("99999999999999999999", 0, DFL_ERROR_INVALID, "'99999999999999999999'", NULL);
  /* a long entry is quoted cut, bytes that are not ASCII escaped */
  bad_list (long_entry, 0, DFL_ERROR_INVALID, "7777...", NULL);
  bad_list ("1,\xff\xfe", 0, DFL_ERROR_INVALID, "'\\377\\376'", NULL);
  /* against a vocabulary: the id, the model and the range */
  bad_list ("1,1000", 1000, DFL_ERROR_INVALID,
            "token id 1000 (entry 2) is not in the vocabulary of models/x (0 … 999)", NULL);
  bad_list ("-1", 1000, DFL_ERROR_INVALID, "token id -1", "(0 … 999)", NULL);
  bad_list ("x", 1000, DFL_ERROR_INVALID, "expected a token id from 0 to 999", NULL);
}

/* --- drafter geometry --- */

static const char geometry[] =
  "{\"hidden\": 64, \"intermediate\": 128, \"layers\": 2, \"heads\": 4, \"kv_heads\": 2, "
  "\"head_dim\": 16, \"vocab\": 1024, \"block\": 8, \"mask_token\": 3, \"conv_group\": 4, "
  "\"conv_kernel\": 3, \"selector_rank\": 8, \"selector_top\": 4, \"taps\": [0, 1, 2], "
  "\"target_layers\": 3, \"window\": 0, \"rope_theta\": 10000.0, \"eps\": 1e-06}";

/* The geometry with `key` replaced by the JSON `value`. */
static char *
geometry_with (const char *key, const char *value)
{
  g_autofree char *pattern = g_strdup_printf ("\"%s\": ", key);
  const char *at = strstr (geometry, pattern);
  const char *end;

  g_assert_nonnull (at);
  at += strlen (pattern);
  end = at;
  if (*end == '[')
    end = strchr (end, ']') + 1;
  else
    end += strcspn (end, ",}");
  return g_strdup_printf ("%.*s%s%s", (int) (at - geometry), geometry, value, end);
}

static void
bad_geometry (const char *key, const char *value, int code, const char *needle)
{
  g_autofree char *json = geometry_with (key, value);
  DflDrafterGeometry g;
  GError *error = NULL;

  g_assert_false (dfl_drafter_geometry_parse (&g, json, "x/dflash.safetensors", &error));
  dfl_test_check_error (error, code, "x/dflash.safetensors: ", needle, NULL);
  g_error_free (error);
}

static void
test_geometry (void)
{
  g_autoptr (GString) taps = g_string_new ("[0");
  DflDrafterGeometry g;
  GError *error = NULL;

  g_assert_true (dfl_drafter_geometry_parse (&g, geometry, "x", &error));
  g_assert_no_error (error);
  dfl_drafter_geometry_clear (&g);

  bad_geometry ("hidden", "100000", DFL_ERROR_LIMIT, "\"hidden\" is 100000; accepted: 0 to 65536");
  bad_geometry ("layers", "5000", DFL_ERROR_LIMIT, "\"layers\" is 5000; accepted: 0 to 1024");
  bad_geometry ("vocab", "5000000", DFL_ERROR_LIMIT, "\"vocab\" is 5000000; accepted: 0 to 4194304");
  bad_geometry ("block", "300", DFL_ERROR_LIMIT, "\"block\" is 300; accepted: 0 to 256");
  bad_geometry ("head_dim", "2048", DFL_ERROR_LIMIT, "\"head_dim\" is 2048; accepted: 0 to 1024");
  bad_geometry ("selector_rank", "100000", DFL_ERROR_LIMIT, "accepted: 0 to 4096");
  bad_geometry ("hidden", "1e300", DFL_ERROR_FORMAT, "\"hidden\" is 1e+300");
  bad_geometry ("hidden", "-1", DFL_ERROR_FORMAT, "expected a whole number from 0 to 65536");
  for (int i = 1; i < 2000; i++)
    g_string_append (taps, ",0");
  g_string_append_c (taps, ']');
  bad_geometry ("taps", taps->str, DFL_ERROR_LIMIT, "\"taps\" has 2000 entries; accepted: at most 1024");
  bad_geometry ("block", "1", DFL_ERROR_UNSUPPORTED, "block is 1");
}

/* A released drafter's config.json naming 16 million layers is refused
 * before its per-layer tables are made. */
static void
test_v1_geometry (void)
{
  static const char v1[] =
    "{\"architectures\": [\"DFlashDraftModel\"], \"hidden_size\": 64, "
    "\"intermediate_size\": 128, \"num_hidden_layers\": 16000000, \"num_attention_heads\": 4, "
    "\"vocab_size\": 1024, \"num_target_layers\": 3, \"block_size\": 8, "
    "\"dflash_config\": {\"mask_token_id\": 3}}";
  DflDrafterGeometry g;
  GError *error = NULL;

  g_assert_false (dfl_drafter_geometry_from_v1_config (&g, v1, strlen (v1), "d/config.json",
                                                       &error));
  dfl_test_check_error (error, DFL_ERROR_LIMIT, "d/config.json: ",
                        "\"num_hidden_layers\" is 16000000; accepted: 0 to 1024", NULL);
  g_error_free (error);
}

/* --- tokenizer.json --- */

static void
test_tokenizer (void)
{
  static const char huge_id[] =
    "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 5000000}, \"merges\": []}}";
  static const char bad_id[] =
    "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1.5}, \"merges\": []}}";
  GError *error = NULL;

  g_assert_null (dfl_tokenizer_parse (huge_id, strlen (huge_id), "t/tokenizer.json", &error));
  dfl_test_check_error (error, DFL_ERROR_LIMIT, "t/tokenizer.json: ", "id 5000000",
                        "ids 0 to 4194303", NULL);
  g_clear_error (&error);
  g_assert_null (dfl_tokenizer_parse (bad_id, strlen (bad_id), "t/tokenizer.json", &error));
  dfl_test_check_error (error, DFL_ERROR_FORMAT, "t/tokenizer.json: ", "id 1.5",
                        "expected an integer from 0 to 4194303", NULL);
  g_clear_error (&error);
}

/* --- prompt files --- */

static void
test_prompts (void)
{
  g_autofree char *empty = g_build_filename (dfl_test_tmp_dir, "empty.txt", NULL);
  g_autofree char *missing = g_build_filename (dfl_test_tmp_dir, "missing.txt", NULL);
  GError *error = NULL;

  g_assert_true (g_file_set_contents (empty, "\n\r\n\n", -1, NULL));
  g_assert_null (dfl_read_prompts (empty, &error));
  dfl_test_check_error (error, DFL_ERROR_INVALID, empty, "no prompts", "one prompt a line", NULL);
  g_clear_error (&error);
  g_assert_null (dfl_read_prompts (missing, &error));
  dfl_test_check_error (error, DFL_ERROR_IO, missing, "cannot open", NULL);
  g_clear_error (&error);
  /* a device that never ends, and a folder */
  g_assert_null (dfl_read_prompts ("/dev/zero", &error));
  dfl_test_check_error (error, DFL_ERROR_IO, "/dev/zero: not a regular file", "prompts, one a line",
                        NULL);
  g_clear_error (&error);
  g_assert_null (dfl_read_prompts (dfl_test_tmp_dir, &error));
  dfl_test_check_error (error, DFL_ERROR_IO, "not a regular file", NULL);
  g_clear_error (&error);
}

/* --- the context --- */

static DflTarget *
load_target (void)
{
  g_autofree char *dir = g_build_filename (g_getenv ("DFL_FIXTURES"), "qwen3", "bf16-tied", NULL);
  g_autoptr (GError) error = NULL;
  DflTarget *t = dfl_target_load (dir, &error);

  g_assert_no_error (error);
  return t;
}

static int *
prompt_of (int n)
{
  int *ids = g_new (int, n);

  /* a prompt that repeats itself, so the chain and the block propose */
  for (int i = 0; i < n; i++)
    ids[i] = 10 + (i * 7) % 23;
  return ids;
}

static void
test_prompt_past_context (void)
{
  g_autoptr (DflTarget) t = load_target ();
  int ctx = dfl_target_config (t)->max_positions;
  g_autofree int *ids = prompt_of (ctx + 1);
  g_autoptr (GArray) out = g_array_new (FALSE, FALSE, sizeof (int));
  g_autofree char *n_text = g_strdup_printf ("the prompt has %d tokens", ctx + 1);
  g_autofree char *ctx_text = g_strdup_printf ("(max_position_embeddings %d)", ctx);
  g_autoptr (DflSpec) s = NULL;
  DflSpecParams p;
  GError *error = NULL;

  dfl_spec_params_init (&p);
  p.route = DFL_ROUTE_NONE;
  p.max_new = 4;
  s = dfl_spec_new (t, NULL, &p, &error);
  g_assert_no_error (error);
  g_assert_false (dfl_spec_prefill (s, ids, ctx + 1, out, &error));
  dfl_test_check_error (error, DFL_ERROR_LIMIT, n_text, dfl_target_dir (t), ctx_text, NULL);
  g_error_free (error);
}

/* Run to the end; the tokens emitted. */
static GArray *
run_to_end (const DflTarget *t, DflDrafterWeights *d, DflRoute route, const int *ids, int n, int max_new,
            DflSpecEnd *end, char **message)
{
  GArray *out = g_array_new (FALSE, FALSE, sizeof (int));
  g_autoptr (GError) error = NULL;
  g_autoptr (DflSpec) s = NULL;
  DflSpecParams p;

  dfl_spec_params_init (&p);
  p.route = route;
  p.max_new = max_new;
  p.chain_max = 7;
  s = dfl_spec_new (t, d, &p, &error);
  g_assert_no_error (error);
  g_assert_true (dfl_spec_prefill (s, ids, n, out, &error));
  while (!dfl_spec_done (s)) {
    g_assert_true (dfl_spec_round (s, out, &error));
    g_assert_no_error (error);
  }
  *end = dfl_spec_end (s);
  *message = dfl_spec_end_message (s);
  return out;
}

/* A sequence that reaches max_position_embeddings ends there: every route
 * emits the same tokens, up to the one chosen at the last position, and
 * says why it stopped. Where max_new comes first, no message. */
static void
test_sequence_reaches_context (void)
{
  g_autoptr (DflTarget) t = load_target ();
  g_autofree char *dir = g_build_filename (g_getenv ("DFL_FIXTURES"), "qwen3", "bf16-tied", NULL);
  g_autoptr (GError) error = NULL;
  g_autoptr (DflDrafterWeights) d = dfl_drafter_weights_open (dir, &error);
  const DflQwen3Config *c = dfl_target_config (t);
  int ctx = c->max_positions, n = ctx - 20;
  g_autofree int *ids = prompt_of (n);
  g_autofree char *ctx_text = g_strdup_printf ("max_position_embeddings %d", ctx);
  const DflRoute routes[] = { DFL_ROUTE_NONE, DFL_ROUTE_CHAIN, DFL_ROUTE_BLOCK };
  g_autoptr (GArray) plain = NULL;

  g_assert_no_error (error);
  g_assert_true (dfl_drafter_weights_check_target (d, dfl_target_tensors (t), c->tie_word_embeddings,
                                           c->layers, c->hidden, c->vocab, &error));
  for (guint r = 0; r < G_N_ELEMENTS (routes); r++) {
    g_autofree char *message = NULL;
    DflSpecEnd end;
    g_autoptr (GArray) out = run_to_end (t, routes[r] == DFL_ROUTE_BLOCK ? d : NULL, routes[r],
                                         ids, n, 100, &end, &message);

    g_test_message ("route %s: %u tokens, %s", dfl_route_name (routes[r]), out->len,
                    message ? message : "no message");
    /* an EOS may come first; the fixture's greedy text has none here */
    g_assert_cmpint (end, ==, DFL_SPEC_END_CONTEXT);
    /* the last token sits at position ctx: chosen, never run */
    g_assert_cmpint (n + (int) out->len, ==, ctx + 1);
    g_assert_nonnull (message);
    g_assert_nonnull (strstr (message, ctx_text));
    g_assert_nonnull (strstr (message, dfl_target_dir (t)));
    g_assert_nonnull (strstr (message, "after 21 new tokens, before max-new 100"));
    if (!plain)
      plain = g_array_ref (out);
    else
      g_assert_cmpmem (out->data, out->len * sizeof (int), plain->data, plain->len * sizeof (int));
  }
  {
    g_autofree char *message = NULL;
    DflSpecEnd end;
    g_autoptr (GArray) out = run_to_end (t, NULL, DFL_ROUTE_NONE, ids, n, 5, &end, &message);

    g_assert_cmpint (end, ==, DFL_SPEC_END_MAX_NEW);
    g_assert_cmpuint (out->len, ==, 5);
    g_assert_null (message);
  }
  {
    /* a prompt that fills the context exactly: its one new token, then the end */
    g_autofree int *full = prompt_of (ctx);
    g_autofree char *message = NULL;
    DflSpecEnd end;
    g_autoptr (GArray) out = run_to_end (t, NULL, DFL_ROUTE_NONE, full, ctx, 10, &end, &message);

    g_assert_cmpint (end, ==, DFL_SPEC_END_CONTEXT);
    g_assert_cmpuint (out->len, ==, 1);
    g_assert_nonnull (message);
  }
}

/* The cases, run by tmp-dir-main.c in a temporary folder. */
const DflTestCase dfl_test_cases[] = {
  { "/limits/token-list", test_token_list },
  { "/limits/geometry", test_geometry },
  { "/limits/geometry-v1", test_v1_geometry },
  { "/limits/tokenizer", test_tokenizer },
  { "/limits/prompts", test_prompts },
  { "/limits/prompt-past-context", test_prompt_past_context },
  { "/limits/sequence-reaches-context", test_sequence_reaches_context },
  { NULL, NULL }
};
