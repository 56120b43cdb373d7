/* gst-dflash — chat templates against transformers' rendering (GTest, TAP).
 *
 * fixtures.json is what make-fixtures.py got from jinja2 rendering the
 * Qwen templates of templates/ the way transformers' apply_chat_template
 * does; each case's template is recognised from that same Jinja text here,
 * so the recognition is tested with the rendering. The bad-input cases
 * build their folders in a temporary directory.
 */
#include "chat-template.h"
#include "dfl-error.h"
#include "dfl-json.h"

#include <string.h>
#include <glib/gstdio.h>

static const char *
chat_dir (void)
{
  return CHAT_TEST_DIR;
}

static char *
read_text (const char *path)
{
  g_autoptr (GError) error = NULL;
  char *text = NULL;

  g_file_get_contents (path, &text, NULL, &error);
  g_assert_no_error (error);
  return text;
}

static DflChatTemplate *
template_of (const char *name)
{
  g_autofree char *file = g_strdup_printf ("%s.jinja", name);
  g_autofree char *path = g_build_filename (chat_dir (), "templates", file, NULL);
  g_autofree char *jinja = read_text (path);
  g_autoptr (GError) error = NULL;
  DflChatTemplate *t = dfl_chat_template_new_from_jinja (jinja, path, &error);

  g_assert_no_error (error);
  g_assert_cmpstr (dfl_chat_template_name (t), ==, name);
  return t;
}

static void
test_fixtures (void)
{
  g_autofree char *path = g_build_filename (chat_dir (), "fixtures.json", NULL);
  g_autofree char *text = read_text (path);
  cJSON *root = dfl_json_parse (text, strlen (text), NULL, FALSE);
  cJSON *cases = cJSON_GetObjectItem (root, "cases"), *c;
  DflChatTemplate *templates[3];
  int checked = 0, thinking_off = 0, multi = 0;

  g_assert_nonnull (cases);
  templates[0] = template_of ("qwen2");
  templates[1] = template_of ("qwen2.5");
  templates[2] = template_of ("qwen3");
  g_assert_cmpint (cJSON_GetObjectItem (root, "conversations")->valueint, >=, 50);
  cJSON_ArrayForEach (c, cases) {
    const char *name = cJSON_GetObjectItem (c, "template")->valuestring;
    cJSON *msgs = cJSON_GetObjectItem (c, "messages"), *m;
    cJSON *et = cJSON_GetObjectItem (c, "enable_thinking");
    int n = cJSON_GetArraySize (msgs), i = 0;
    g_autofree DflChatMessage *list = g_new0 (DflChatMessage, n);
    g_autoptr (GError) error = NULL;
    g_autofree char *got = NULL;
    DflChatTemplate *t = !strcmp (name, "qwen2") ? templates[0]
                         : !strcmp (name, "qwen2.5") ? templates[1] : templates[2];

    cJSON_ArrayForEach (m, msgs) {
      cJSON *r = cJSON_GetObjectItem (m, "reasoning_content");
      list[i].role = cJSON_GetObjectItem (m, "role")->valuestring;
      list[i].content = cJSON_GetObjectItem (m, "content")->valuestring;
      list[i].reasoning_content = cJSON_IsString (r) ? r->valuestring : NULL;
      i++;
    }
    /* enable_thinking left undefined is the template's default: on */
    got = dfl_chat_template_render (t, list, n,
                                    cJSON_IsTrue (cJSON_GetObjectItem (c, "add_generation_prompt")),
                                    !cJSON_IsFalse (et), &error);
    g_assert_no_error (error);
    if (strcmp (got, cJSON_GetObjectItem (c, "text")->valuestring)) {
      g_test_message ("case %d (%s, %d messages): want\n%s\ngot\n%s", checked, name, n,
                      cJSON_GetObjectItem (c, "text")->valuestring, got);
      g_assert_cmpstr (got, ==, cJSON_GetObjectItem (c, "text")->valuestring);
    }
    checked++;
    thinking_off += cJSON_IsFalse (et);
    multi += n > 2;
  }
  g_test_message ("%d renderings (%d with thinking off, %d of 3+ messages)", checked,
                  thinking_off, multi);
  g_assert_cmpint (checked, >=, 150);
  g_assert_cmpint (thinking_off, >=, 50);
  g_assert_cmpint (multi, >=, 50);
  for (int k = 0; k < 3; k++)
    dfl_chat_template_free (templates[k]);
  cJSON_Delete (root);
}

static char *
folder_with (const char *config, const char *tokenizer_config)
{
  g_autoptr (GError) error = NULL;
  char *dir = g_dir_make_tmp ("dfl-chat-XXXXXX", &error);
  g_autofree char *cfg = g_build_filename (dir, "config.json", NULL);
  g_autofree char *tok = g_build_filename (dir, "tokenizer_config.json", NULL);

  g_assert_no_error (error);
  if (config)
    g_assert_true (g_file_set_contents (cfg, config, -1, NULL));
  if (tokenizer_config)
    g_assert_true (g_file_set_contents (tok, tokenizer_config, -1, NULL));
  return dir;
}

static void
remove_folder (const char *dir)
{
  g_autofree char *cfg = g_build_filename (dir, "config.json", NULL);
  g_autofree char *tok = g_build_filename (dir, "tokenizer_config.json", NULL);

  g_unlink (cfg);
  g_unlink (tok);
  g_rmdir (dir);
}

/* A folder without a chat_template takes its model_type's; the origin says so. */
static void
test_model_type (void)
{
  g_autofree char *dir = folder_with ("{\"model_type\": \"qwen3\"}", "{\"eos_token\": \"x\"}");
  g_autoptr (GError) error = NULL;
  g_autoptr (DflChatTemplate) t = dfl_chat_template_load (dir, &error);

  g_assert_no_error (error);
  g_assert_cmpint (dfl_chat_template_family (t), ==, DFL_CHAT_QWEN3);
  g_assert_nonnull (strstr (dfl_chat_template_origin (t), "model_type qwen3; no chat_template"));
  remove_folder (dir);
}

/* A template of tokenizer_config.json wins over the model_type. */
static void
test_tokenizer_config (void)
{
  g_autofree char *path = g_build_filename (chat_dir (), "templates", "qwen2.5.jinja", NULL);
  g_autofree char *jinja = read_text (path);
  cJSON *o = cJSON_CreateObject ();
  g_autofree char *json = NULL, *dir = NULL;
  g_autoptr (GError) error = NULL;
  g_autoptr (DflChatTemplate) t = NULL;

  cJSON_AddStringToObject (o, "chat_template", jinja);
  json = cJSON_PrintUnformatted (o);
  cJSON_Delete (o);
  dir = folder_with ("{\"model_type\": \"qwen3\"}", json);
  t = dfl_chat_template_load (dir, &error);
  g_assert_no_error (error);
  g_assert_cmpint (dfl_chat_template_family (t), ==, DFL_CHAT_QWEN25);
  g_assert_true (g_str_has_suffix (dfl_chat_template_origin (t), "tokenizer_config.json"));
  remove_folder (dir);
}

static void
expect_refusal (const char *config, const char *tokenizer_config, const char *file,
                const char *words)
{
  g_autofree char *dir = folder_with (config, tokenizer_config);
  g_autoptr (GError) error = NULL;
  DflChatTemplate *t = dfl_chat_template_load (dir, &error);

  g_assert_null (t);
  g_assert_nonnull (error);
  g_test_message ("%s", error->message);
  g_assert_nonnull (strstr (error->message, file));
  g_assert_nonnull (strstr (error->message, words));
  remove_folder (dir);
}

static void
test_refused (void)
{
  /* a Llama-style template */
  expect_refusal ("{\"model_type\": \"qwen3\"}",
                  "{\"chat_template\": \"{% for m in messages %}[INST] {{ m.content }} [/INST]"
                  "{% endfor %}\"}", "tokenizer_config.json", "Qwen2, Qwen2.5 and Qwen3");
  /* Qwen3's thinking-only release opens the think block itself */
  expect_refusal (NULL,
                  "{\"chat_template\": \"<|im_start|><|im_end|>enable_thinking last_query_index "
                  "<think>\\\\n\\\\n</think>\\\\n\\\\n {{- '<|im_start|>assistant\\\\n<think>\\\\n' }}\"}",
                  "tokenizer_config.json", "not one this build renders");
  expect_refusal ("{\"chat_template\": 1}", "{\"chat_template\": [{\"name\": \"default\"}]}",
                  "tokenizer_config.json", "an array");
  expect_refusal ("{\"model_type\": \"llama\"}", NULL, "config.json", "\"llama\", not qwen2 or qwen3");
  expect_refusal ("{\"model_type\": \"qwen3\"}", "not json", "tokenizer_config.json",
                  "not a JSON object");
}

static void
test_bad_messages (void)
{
  g_autoptr (DflChatTemplate) t = dfl_chat_template_new (DFL_CHAT_QWEN3, "test");
  DflChatMessage tool[] = { { "user", "hi", NULL }, { "tool", "42", NULL } };
  DflChatMessage empty[] = { { "user", NULL, NULL } };
  g_autoptr (GError) e1 = NULL, e2 = NULL, e3 = NULL;

  g_assert_null (dfl_chat_template_render (t, tool, 2, TRUE, TRUE, &e1));
  g_assert_nonnull (strstr (e1->message, "message 2: role \"tool\""));
  g_assert_null (dfl_chat_template_render (t, empty, 1, TRUE, TRUE, &e2));
  g_assert_nonnull (strstr (e2->message, "no content"));
  g_assert_null (dfl_chat_template_render (t, empty, 0, TRUE, TRUE, &e3));
  g_assert_error (e3, DFL_ERROR, DFL_ERROR_INVALID);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/chat/fixtures", test_fixtures);
  g_test_add_func ("/chat/model-type", test_model_type);
  g_test_add_func ("/chat/tokenizer-config", test_tokenizer_config);
  g_test_add_func ("/chat/refused", test_refused);
  g_test_add_func ("/chat/bad-messages", test_bad_messages);
  return g_test_run ();
}
