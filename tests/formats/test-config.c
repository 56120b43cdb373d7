/* gst-dflash — tests of core/qwen3-config.c: both transformers layouts, the
 * defaults, generation_config.json, and each refusal (checked for its code
 * and for a message naming the file, the key and the value). */
#include "qwen3-config.h"
#include "dfl-error.h"
#include "test-support.h"

#include <cJSON.h>
#include <string.h>

#include <glib/gstdio.h>

/* Qwen3-0.6B's config.json as transformers 4.51 writes it. */
static const char qwen3_t4[] =
  "{\n"
  "  \"architectures\": [\"Qwen3ForCausalLM\"],\n"
  "  \"attention_bias\": false,\n"
  "  \"attention_dropout\": 0.0,\n"
  "  \"bos_token_id\": 151643,\n"
  "  \"eos_token_id\": 151645,\n"
  "  \"head_dim\": 128,\n"
  "  \"hidden_act\": \"silu\",\n"
  "  \"hidden_size\": 1024,\n"
  "  \"initializer_range\": 0.02,\n"
  "  \"intermediate_size\": 3072,\n"
  "  \"max_position_embeddings\": 40960,\n"
  "  \"max_window_layers\": 28,\n"
  "  \"model_type\": \"qwen3\",\n"
  "  \"num_attention_heads\": 16,\n"
  "  \"num_hidden_layers\": 28,\n"
  "  \"num_key_value_heads\": 8,\n"
  "  \"rms_norm_eps\": 1e-06,\n"
  "  \"rope_scaling\": null,\n"
  "  \"rope_theta\": 1000000,\n"
  "  \"sliding_window\": null,\n"
  "  \"tie_word_embeddings\": true,\n"
  "  \"torch_dtype\": \"bfloat16\",\n"
  "  \"transformers_version\": \"4.51.0\",\n"
  "  \"use_cache\": true,\n"
  "  \"use_sliding_window\": false,\n"
  "  \"vocab_size\": 151936\n"
  "}\n";

/* The same model as transformers 5 writes it: rope_parameters, layer_types,
 * no top-level rope_theta. */
static const char qwen3_t5[] =
  "{\"architectures\":[\"Qwen3ForCausalLM\"],\"attention_bias\":false,"
  "\"bos_token_id\":151643,\"dtype\":\"bfloat16\",\"eos_token_id\":[151645,151643],"
  "\"head_dim\":128,\"hidden_act\":\"silu\",\"hidden_size\":2560,"
  "\"intermediate_size\":9728,\"layer_types\":[\"full_attention\",\"full_attention\","
  "\"full_attention\",\"full_attention\"],\"max_position_embeddings\":32768,"
  "\"max_window_layers\":36,\"model_type\":\"qwen3\",\"num_attention_heads\":32,"
  "\"num_hidden_layers\":4,\"num_key_value_heads\":8,\"rms_norm_eps\":1e-05,"
  "\"rope_parameters\":{\"rope_theta\":5000000.0,\"rope_type\":\"default\"},"
  "\"sliding_window\":4096,\"tie_word_embeddings\":false,\"transformers_version\":\"5.0.0\","
  "\"use_cache\":true,\"use_sliding_window\":false,\"vocab_size\":151936}";

/* The base config with `key` set to the JSON `value` (or removed, where
 * value is NULL). */
static char *
variant (const char *base, const char *key, const char *value)
{
  cJSON *root = cJSON_Parse (base);
  char *out, *copy;

  g_assert_nonnull (root);
  cJSON_DeleteItemFromObjectCaseSensitive (root, key);
  if (value != NULL) {
    cJSON *v = cJSON_Parse (value);

    g_assert_nonnull (v);
    cJSON_AddItemToObject (root, key, v);
  }
  out = cJSON_PrintUnformatted (root);
  cJSON_Delete (root);
  copy = g_strdup (out);
  cJSON_free (out);
  return copy;
}

static gboolean
parse (const char *json, DflQwen3Config *cfg, GError **error)
{
  return dfl_qwen3_config_parse (cfg, json, strlen (json), "tests/x/config.json", error);
}

/* Parsing base with key=value fails with `code` and a message holding the
 * origin and the strings given. */
#define BAD(base, key, value, code, ...)                                \
  G_STMT_START {                                                        \
    g_autofree char *j_ = variant ((base), (key), (value));             \
    DflQwen3Config c_;                                                  \
    GError *e_ = NULL;                                                  \
    g_assert_false (parse (j_, &c_, &e_));                              \
    dfl_test_check_error (e_, (code), "tests/x/config.json: ",          \
                          __VA_ARGS__, NULL);                           \
    g_error_free (e_);                                                  \
  } G_STMT_END

#define GOOD(base, key, value, cfg)                                     \
  G_STMT_START {                                                        \
    g_autofree char *j_ = variant ((base), (key), (value));             \
    GError *e_ = NULL;                                                  \
    g_assert_true (parse (j_, (cfg), &e_));                             \
    g_assert_no_error (e_);                                             \
  } G_STMT_END

/* The fields both transformers layouts are checked for, against `want`. */
static void
assert_config (const DflQwen3Config *c, const DflQwen3Config *want)
{
  g_assert_cmpint (c->hidden, ==, want->hidden);
  g_assert_cmpint (c->layers, ==, want->layers);
  g_assert_cmpint (c->heads, ==, want->heads);
  g_assert_cmpint (c->kv_heads, ==, want->kv_heads);
  g_assert_cmpint (c->head_dim, ==, want->head_dim);
  g_assert_cmpint (c->max_positions, ==, want->max_positions);
  g_assert_cmpfloat (c->rms_eps, ==, want->rms_eps);
  g_assert_cmpfloat (c->rope_theta, ==, want->rope_theta);
  g_assert_cmpint (!c->tie_word_embeddings, ==, !want->tie_word_embeddings);
  g_assert_cmpint (c->n_eos, ==, want->n_eos);
}

static void
test_transformers4 (void)
{
  DflQwen3Config c;
  GError *error = NULL;

  g_assert_true (parse (qwen3_t4, &c, &error));
  g_assert_no_error (error);
  assert_config (&c, &(DflQwen3Config) { .hidden = 1024, .layers = 28, .heads = 16, .kv_heads = 8,
                   .head_dim = 128, .max_positions = 40960, .rms_eps = 1e-6, .rope_theta = 1e6,
                   .tie_word_embeddings = TRUE, .n_eos = 1 });
  g_assert_cmpint (c.intermediate, ==, 3072);
  g_assert_cmpint (c.vocab, ==, 151936);
  g_assert_false (c.attention_bias);
  g_assert_cmpint (c.bos_id, ==, 151643);
  g_assert_cmpint (c.eos_ids[0], ==, 151645);
  g_assert_true (dfl_qwen3_config_is_eos (&c, 151645));
  g_assert_false (dfl_qwen3_config_is_eos (&c, 151643));
}

static void
test_transformers5 (void)
{
  DflQwen3Config c;
  GError *error = NULL;

  g_assert_true (parse (qwen3_t5, &c, &error));
  g_assert_no_error (error);
  assert_config (&c, &(DflQwen3Config) { .hidden = 2560, .layers = 4, .heads = 32, .kv_heads = 8,
                   .head_dim = 128, .max_positions = 32768, .rms_eps = 1e-5, .rope_theta = 5e6,
                   .tie_word_embeddings = FALSE, .n_eos = 2 });
  g_assert_true (dfl_qwen3_config_is_eos (&c, 151645));
  g_assert_true (dfl_qwen3_config_is_eos (&c, 151643));
  g_assert_false (dfl_qwen3_config_is_eos (&c, 0));

  /* rope_parameters wins over a stale top-level rope_theta */
  GOOD (qwen3_t5, "rope_theta", "10000", &c);
  g_assert_cmpfloat (c.rope_theta, ==, 5e6);
  /* rope_parameters without rope_theta: the top level, else the default */
  GOOD (qwen3_t5, "rope_parameters", "{\"rope_type\":\"default\"}", &c);
  g_assert_cmpfloat (c.rope_theta, ==, 10000.0);
  BAD (qwen3_t5, "rope_parameters", "{\"rope_theta\":\"big\"}", DFL_ERROR_FORMAT,
       "'rope_parameters.rope_theta' is a string");
  BAD (qwen3_t5, "rope_parameters", "{\"rope_theta\":-1}", DFL_ERROR_FORMAT, "rope_theta is -1");
  BAD (qwen3_t5, "layer_types", "[\"full_attention\"]", DFL_ERROR_FORMAT,
       "'layer_types' lists 1 layers but 'num_hidden_layers' is 4");
}

static void
test_defaults (void)
{
  const char *minimal = "{\"architectures\":[\"Qwen3ForCausalLM\"],\"hidden_size\":64,"
                        "\"intermediate_size\":128,\"num_hidden_layers\":2,"
                        "\"num_attention_heads\":4,\"vocab_size\":1000}";
  DflQwen3Config c;
  GError *error = NULL;

  memset (&c, 0x55, sizeof c);
  g_assert_true (parse (minimal, &c, &error));
  g_assert_no_error (error);
  g_assert_cmpint (c.kv_heads, ==, 4);
  g_assert_cmpint (c.head_dim, ==, 16);
  g_assert_cmpint (c.max_positions, ==, 40960);
  g_assert_cmpfloat (c.rms_eps, ==, 1e-6);
  g_assert_cmpfloat (c.rope_theta, ==, 10000.0);
  g_assert_false (c.tie_word_embeddings);
  g_assert_false (c.attention_bias);
  g_assert_cmpint (c.bos_id, ==, -1);
  g_assert_cmpint (c.n_eos, ==, 0);
  g_assert_false (dfl_qwen3_config_is_eos (&c, 0));

  /* nulls mean "default" for the optional keys */
  GOOD (minimal, "num_key_value_heads", "null", &c);
  g_assert_cmpint (c.kv_heads, ==, 4);
  GOOD (minimal, "eos_token_id", "null", &c);
  g_assert_cmpint (c.n_eos, ==, 0);
  GOOD (minimal, "attention_bias", "true", &c);
  g_assert_true (c.attention_bias);

  /* no architectures: model_type decides */
  GOOD (qwen3_t4, "architectures", NULL, &c);
  g_assert_cmpint (c.hidden, ==, 1024);
}

static void
test_head_dim (void)
{
  DflQwen3Config c;

  /* explicit and unlike hidden / heads (Qwen3-0.6B: 1024 / 16 = 64, yet 128) */
  GOOD (qwen3_t4, "head_dim", "128", &c);
  g_assert_cmpint (c.head_dim, ==, 128);
  GOOD (qwen3_t4, "head_dim", NULL, &c);
  g_assert_cmpint (c.head_dim, ==, 64);
  GOOD (qwen3_t4, "head_dim", "null", &c);
  g_assert_cmpint (c.head_dim, ==, 64);

  BAD (qwen3_t4, "head_dim", "63", DFL_ERROR_FORMAT, "'head_dim' is 63", "even");
  BAD (qwen3_t4, "head_dim", "0", DFL_ERROR_FORMAT, "'head_dim' is 0", "accepted: 2 to 1024");
  BAD (qwen3_t4, "head_dim", "4096", DFL_ERROR_LIMIT, "'head_dim' is 4096");
  {
    g_autofree char *j = variant (qwen3_t4, "head_dim", NULL);
    g_autofree char *j2 = variant (j, "hidden_size", "1000");
    DflQwen3Config c2;
    GError *error = NULL;

    g_assert_false (parse (j2, &c2, &error));
    dfl_test_check_error (error, DFL_ERROR_FORMAT, "tests/x/config.json: no 'head_dim'", "1000",
                          "16", NULL);
    g_error_free (error);
  }
}

static void
test_eos (void)
{
  DflQwen3Config c;

  GOOD (qwen3_t4, "eos_token_id", "[151645, 151643, 7]", &c);
  g_assert_cmpint (c.n_eos, ==, 3);
  g_assert_true (dfl_qwen3_config_is_eos (&c, 7));
  g_assert_true (dfl_qwen3_config_is_eos (&c, 151643));
  g_assert_false (dfl_qwen3_config_is_eos (&c, 8));
  GOOD (qwen3_t4, "eos_token_id", "[]", &c);
  g_assert_cmpint (c.n_eos, ==, 0);

  BAD (qwen3_t4, "eos_token_id", "[1,2,3,4,5,6,7,8,9]", DFL_ERROR_LIMIT, "lists 9 ids",
       "at most 8");
  BAD (qwen3_t4, "eos_token_id", "[1, \"2\"]", DFL_ERROR_FORMAT,
       "'eos_token_id[1]' is a string");
  BAD (qwen3_t4, "eos_token_id", "\"</s>\"", DFL_ERROR_FORMAT, "'eos_token_id' is a string",
       "list of integers");
  BAD (qwen3_t4, "eos_token_id", "-5", DFL_ERROR_FORMAT, "'eos_token_id' is -5");
  BAD (qwen3_t4, "bos_token_id", "-2", DFL_ERROR_FORMAT, "'bos_token_id' is -2");
}

static void
write_text (const char *dir, const char *name, const char *text)
{
  g_autofree char *path = g_build_filename (dir, name, NULL);
  GError *error = NULL;

  g_file_set_contents (path, text, -1, &error);
  g_assert_no_error (error);
}

static void
test_generation_config (void)
{
  g_autofree char *dir = g_build_filename (dfl_test_tmp_dir, "gen", NULL);
  g_autofree char *config_path = g_build_filename (dir, "config.json", NULL);
  g_autofree char *gen_path = g_build_filename (dir, "generation_config.json", NULL);
  DflQwen3Config c;
  GError *error = NULL;

  g_assert_cmpint (g_mkdir_with_parents (dir, 0755), ==, 0);
  write_text (dir, "config.json", qwen3_t4);

  /* no generation_config.json: config.json's eos */
  g_assert_true (dfl_qwen3_config_load (&c, dir, &error));
  g_assert_no_error (error);
  g_assert_cmpint (c.n_eos, ==, 1);
  g_assert_cmpint (c.eos_ids[0], ==, 151645);

  /* a list there replaces it */
  write_text (dir, "generation_config.json",
              "{\"bos_token_id\":151643,\"do_sample\":true,"
              "\"eos_token_id\":[151645,151643],\"temperature\":0.6,\"top_k\":20}");
  g_assert_true (dfl_qwen3_config_load (&c, dir, &error));
  g_assert_no_error (error);
  g_assert_cmpint (c.n_eos, ==, 2);
  g_assert_true (dfl_qwen3_config_is_eos (&c, 151643));
  g_assert_cmpint (c.hidden, ==, 1024);

  /* so does a single id; a path to config.json itself works too */
  write_text (dir, "generation_config.json", "{\"eos_token_id\": 42}");
  g_assert_true (dfl_qwen3_config_load (&c, config_path, &error));
  g_assert_no_error (error);
  g_assert_cmpint (c.n_eos, ==, 1);
  g_assert_cmpint (c.eos_ids[0], ==, 42);

  /* none there: config.json's stays */
  write_text (dir, "generation_config.json", "{\"temperature\": 0.7}");
  g_assert_true (dfl_qwen3_config_load (&c, dir, &error));
  g_assert_cmpint (c.eos_ids[0], ==, 151645);

  /* bad JSON there names that file; the caller's struct is untouched */
  write_text (dir, "generation_config.json", "{\"eos_token_id\": [1,\n 2,, 3]}");
  memset (&c, 0x55, sizeof c);
  g_assert_false (dfl_qwen3_config_load (&c, dir, &error));
  dfl_test_check_error (error, DFL_ERROR_FORMAT, gen_path, "not valid JSON", "line 2", NULL);
  g_clear_error (&error);
  g_assert_cmpint (c.hidden, ==, 0x55555555);

  write_text (dir, "generation_config.json", "{\"eos_token_id\": \"x\"}");
  g_assert_false (dfl_qwen3_config_load (&c, dir, &error));
  dfl_test_check_error (error, DFL_ERROR_FORMAT, gen_path, "'eos_token_id' is a string", NULL);
  g_clear_error (&error);

  /* a bad config.json names itself by the path as given */
  write_text (dir, "config.json", "{\"architectures\": [\"Qwen3ForCausalLM\"]}");
  g_assert_false (dfl_qwen3_config_load (&c, dir, &error));
  dfl_test_check_error (error, DFL_ERROR_FORMAT, config_path, "missing key 'hidden_size'", NULL);
  g_clear_error (&error);
}

static void
test_missing_file (void)
{
  g_autofree char *dir = g_build_filename (dfl_test_tmp_dir, "no-config", NULL);
  g_autofree char *path = g_build_filename (dir, "config.json", NULL);
  DflQwen3Config c;
  GError *error = NULL;

  g_assert_cmpint (g_mkdir_with_parents (dir, 0755), ==, 0);
  g_assert_false (dfl_qwen3_config_load (&c, dir, &error));
  dfl_test_check_error (error, DFL_ERROR_IO, path, "No such file", NULL);
  g_clear_error (&error);
}

static void
test_missing_key (void)
{
  const char *keys[] = { "hidden_size", "intermediate_size", "num_hidden_layers",
                         "num_attention_heads", "vocab_size" };
  guint i;

  for (i = 0; i < G_N_ELEMENTS (keys); i++) {
    g_autofree char *msg = g_strdup_printf ("tests/x/config.json: missing key '%s'", keys[i]);

    BAD (qwen3_t4, keys[i], NULL, DFL_ERROR_FORMAT, msg);
  }
  {
    g_autofree char *j = variant (qwen3_t4, "architectures", NULL);

    BAD (j, "model_type", NULL, DFL_ERROR_FORMAT, "missing key 'architectures'");
  }
}

static void
test_wrong_type (void)
{
  BAD (qwen3_t4, "hidden_size", "\"1024\"", DFL_ERROR_FORMAT,
       "key 'hidden_size' is a string, expected an integer");
  BAD (qwen3_t4, "hidden_size", "null", DFL_ERROR_FORMAT, "key 'hidden_size' is null");
  BAD (qwen3_t4, "vocab_size", "1.5", DFL_ERROR_FORMAT, "key 'vocab_size' is 1.5");
  BAD (qwen3_t4, "num_hidden_layers", "1e12", DFL_ERROR_FORMAT,
       "key 'num_hidden_layers' is 1000000000000", "32 bits");
  BAD (qwen3_t4, "tie_word_embeddings", "\"yes\"", DFL_ERROR_FORMAT,
       "key 'tie_word_embeddings' is a string, expected true or false");
  BAD (qwen3_t4, "rms_norm_eps", "[1e-6]", DFL_ERROR_FORMAT,
       "key 'rms_norm_eps' is an array, expected a number");
  BAD (qwen3_t4, "architectures", "\"Qwen3ForCausalLM\"", DFL_ERROR_FORMAT,
       "key 'architectures' is a string, expected a list");
  BAD (qwen3_t4, "use_sliding_window", "0", DFL_ERROR_FORMAT,
       "key 'use_sliding_window' is a number");
  BAD (qwen3_t4, "rope_scaling", "\"yarn\"", DFL_ERROR_FORMAT,
       "key 'rope_scaling' is a string, expected an object");

  /* not JSON, or not an object */
  {
    DflQwen3Config c;
    GError *error = NULL;

    g_assert_false (parse ("{\"hidden_size\": 1024,\n\n  oops}", &c, &error));
    dfl_test_check_error (error, DFL_ERROR_FORMAT, "tests/x/config.json: not valid JSON", "line 3",
                          NULL);
    g_clear_error (&error);
    g_assert_false (parse ("[1, 2]", &c, &error));
    dfl_test_check_error (error, DFL_ERROR_FORMAT, "tests/x/config.json: holds an array", NULL);
    g_clear_error (&error);
    g_assert_false (parse ("{} {}", &c, &error));
    dfl_test_check_error (error, DFL_ERROR_FORMAT, "tests/x/config.json: not valid JSON", NULL);
    g_clear_error (&error);
    g_assert_false (dfl_qwen3_config_parse (&c, "", 0, "empty.json", &error));
    dfl_test_check_error (error, DFL_ERROR_FORMAT, "empty.json: not valid JSON", NULL);
    g_clear_error (&error);
  }
}

static void
test_architecture (void)
{
  DflQwen3Config c;
  g_autofree char *no_arch = variant (qwen3_t4, "architectures", NULL);

  BAD (qwen3_t4, "architectures", "[\"LlamaForCausalLM\"]", DFL_ERROR_UNSUPPORTED,
       "tests/x/config.json: architecture 'LlamaForCausalLM' is not supported "
       "(gst-dflash runs Qwen3ForCausalLM)");
  BAD (qwen3_t4, "architectures", "[\"Qwen3MoeForCausalLM\", \"Qwen2ForCausalLM\"]",
       DFL_ERROR_UNSUPPORTED, "'Qwen3MoeForCausalLM', 'Qwen2ForCausalLM'");
  BAD (qwen3_t4, "architectures", "[]", DFL_ERROR_UNSUPPORTED, "'architectures' is empty");
  BAD (no_arch, "model_type", "\"llama\"", DFL_ERROR_UNSUPPORTED,
       "model_type 'llama' is not supported");
  /* architectures decides over model_type */
  GOOD (qwen3_t4, "model_type", "\"something\"", &c);
  BAD (qwen3_t4, "hidden_act", "\"gelu\"", DFL_ERROR_UNSUPPORTED, "hidden_act 'gelu'", "silu");
}

static void
test_rope_scaling (void)
{
  DflQwen3Config c;

  BAD (qwen3_t4, "rope_scaling", "{\"rope_type\":\"yarn\",\"factor\":4.0,"
       "\"original_max_position_embeddings\":32768}", DFL_ERROR_UNSUPPORTED,
       "rope_scaling.rope_type 'yarn' is not supported");
  BAD (qwen3_t4, "rope_scaling", "{\"type\":\"linear\",\"factor\":2.0}", DFL_ERROR_UNSUPPORTED,
       "rope_scaling.type 'linear' is not supported");
  BAD (qwen3_t4, "rope_scaling", "{\"factor\":2.0}", DFL_ERROR_UNSUPPORTED,
       "'rope_scaling' is set without a rope_type");
  BAD (qwen3_t5, "rope_parameters", "{\"rope_type\":\"llama3\",\"rope_theta\":500000}",
       DFL_ERROR_UNSUPPORTED, "rope_parameters.rope_type 'llama3' is not supported");
  GOOD (qwen3_t4, "rope_scaling", "{\"rope_type\":\"default\"}", &c);
  g_assert_cmpfloat (c.rope_theta, ==, 1e6);
}

static void
test_sliding_window (void)
{
  DflQwen3Config c;

  BAD (qwen3_t4, "use_sliding_window", "true", DFL_ERROR_UNSUPPORTED,
       "'use_sliding_window' is true", "sliding-window attention is not supported");
  BAD (qwen3_t5, "layer_types", "[\"full_attention\",\"sliding_attention\","
       "\"full_attention\",\"full_attention\"]", DFL_ERROR_UNSUPPORTED,
       "'layer_types[1]' is 'sliding_attention'", "only 'full_attention'");
  BAD (qwen3_t5, "layer_types", "[\"full_attention\", 3]", DFL_ERROR_FORMAT,
       "'layer_types[1]' is a number");
  /* sliding_window alongside use_sliding_window false is what Qwen3 ships */
  GOOD (qwen3_t4, "sliding_window", "32768", &c);
  GOOD (qwen3_t5, "sliding_window", "4096", &c);
}

static void
test_bounds (void)
{
  BAD (qwen3_t4, "num_key_value_heads", "3", DFL_ERROR_FORMAT,
       "'num_attention_heads' 16 is not a multiple of 'num_key_value_heads' 3");
  BAD (qwen3_t4, "num_key_value_heads", "32", DFL_ERROR_LIMIT,
       "'num_key_value_heads' is 32; accepted: 1 to 16");
  BAD (qwen3_t4, "hidden_size", "100000", DFL_ERROR_LIMIT,
       "'hidden_size' is 100000; accepted: 1 to 65536");
  BAD (qwen3_t4, "hidden_size", "0", DFL_ERROR_FORMAT, "'hidden_size' is 0; accepted: 1 to");
  BAD (qwen3_t4, "num_hidden_layers", "2000", DFL_ERROR_LIMIT,
       "'num_hidden_layers' is 2000; accepted: 1 to 1024");
  BAD (qwen3_t4, "num_attention_heads", "-4", DFL_ERROR_FORMAT, "'num_attention_heads' is -4");
  BAD (qwen3_t4, "vocab_size", "5000000", DFL_ERROR_LIMIT,
       "'vocab_size' is 5000000; accepted: 1 to 4194304");
  BAD (qwen3_t4, "intermediate_size", "0", DFL_ERROR_FORMAT, "'intermediate_size' is 0");
  BAD (qwen3_t4, "max_position_embeddings", "0", DFL_ERROR_FORMAT,
       "'max_position_embeddings' is 0");
  BAD (qwen3_t4, "rms_norm_eps", "0", DFL_ERROR_FORMAT, "'rms_norm_eps' is 0");
  BAD (qwen3_t4, "rope_theta", "0", DFL_ERROR_FORMAT, "rope_theta is 0");
}

/* The cases, run by tmp-dir-main.c in a temporary folder. */
const DflTestCase dfl_test_cases[] = {
  { "/config/transformers4", test_transformers4 },
  { "/config/transformers5", test_transformers5 },
  { "/config/defaults", test_defaults },
  { "/config/head-dim", test_head_dim },
  { "/config/eos", test_eos },
  { "/config/generation-config", test_generation_config },
  { "/config/missing-file", test_missing_file },
  { "/config/missing-key", test_missing_key },
  { "/config/wrong-type", test_wrong_type },
  { "/config/architecture", test_architecture },
  { "/config/rope-scaling", test_rope_scaling },
  { "/config/sliding-window", test_sliding_window },
  { "/config/bounds", test_bounds },
  { NULL, NULL }
};
