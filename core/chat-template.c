/* gst-dflash — chat templates of the Qwen families, rendered without Jinja. */
#include "chat-template.h"

#include <string.h>
#include <cjson/cJSON.h>

#include "dfl-error.h"
#include "dfl-json.h"

#define QWEN2_SYSTEM "You are a helpful assistant."
#define QWEN25_SYSTEM "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
#define SUPPORTED "the Qwen2, Qwen2.5 and Qwen3 ChatML templates (without tools)"

struct _DflChatTemplate {
  DflChatFamily family;
  char *origin;
};

DflChatTemplate *
dfl_chat_template_new (DflChatFamily family, const char *origin)
{
  DflChatTemplate *t = g_new0 (DflChatTemplate, 1);

  t->family = family;
  t->origin = g_strdup (origin);
  return t;
}

void
dfl_chat_template_free (DflChatTemplate *t)
{
  if (!t)
    return;
  g_free (t->origin);
  g_free (t);
}

DflChatFamily
dfl_chat_template_family (const DflChatTemplate *t)
{
  return t->family;
}

const char *
dfl_chat_template_name (const DflChatTemplate *t)
{
  static const char *names[] = { "qwen2", "qwen2.5", "qwen3" };
  return names[t->family];
}

const char *
dfl_chat_template_origin (const DflChatTemplate *t)
{
  return t->origin;
}

/* The Jinja text is recognised by what each family's template must say: the
 * ChatML markers, and what sets the family apart (Qwen3's switch and its
 * empty think block; the default system prompts of Qwen2.5 and Qwen2). A
 * Qwen3 variant that opens the think block itself at the generation prompt
 * (the thinking-only releases) renders differently and is refused. */
DflChatTemplate *
dfl_chat_template_new_from_jinja (const char *jinja, const char *origin, GError **error)
{
  gboolean chatml = strstr (jinja, "<|im_start|>") && strstr (jinja, "<|im_end|>");

  if (chatml && strstr (jinja, "enable_thinking") && strstr (jinja, "last_query_index")
      && strstr (jinja, "<think>\\n\\n</think>\\n\\n")
      && !strstr (jinja, "'<|im_start|>assistant\\n<think>\\n'"))
    return dfl_chat_template_new (DFL_CHAT_QWEN3, origin);
  if (chatml && !strstr (jinja, "<think>") && strstr (jinja, QWEN25_SYSTEM))
    return dfl_chat_template_new (DFL_CHAT_QWEN25, origin);
  if (chatml && !strstr (jinja, "<think>") && !strstr (jinja, "Qwen")
      && strstr (jinja, QWEN2_SYSTEM))
    return dfl_chat_template_new (DFL_CHAT_QWEN2, origin);
  g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
               "%s: the chat_template is not one this build renders (it renders %s; "
               "the template starts \"%.60s\")", origin, SUPPORTED, jinja);
  return NULL;
}

static cJSON *
read_json (const char *path, GError **error)
{
  g_autofree char *text = NULL;
  gsize len;
  cJSON *root;

  if (!g_file_get_contents (path, &text, &len, NULL)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_IO, "%s: cannot be read", path);
    return NULL;
  }
  if (!(root = dfl_json_parse (text, len, NULL, FALSE)) || !cJSON_IsObject (root)) {
    cJSON_Delete (root);
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "%s: not a JSON object", path);
    return NULL;
  }
  return root;
}

DflChatTemplate *
dfl_chat_template_load (const char *dir, GError **error)
{
  g_autofree char *tok_path = g_build_filename (dir, "tokenizer_config.json", NULL);
  g_autofree char *cfg_path = g_build_filename (dir, "config.json", NULL);
  DflChatTemplate *t = NULL;
  cJSON *root, *item;

  if (g_file_test (tok_path, G_FILE_TEST_EXISTS)) {
    if (!(root = read_json (tok_path, error)))
      return NULL;
    item = cJSON_GetObjectItemCaseSensitive (root, "chat_template");
    if (cJSON_IsString (item)) {
      t = dfl_chat_template_new_from_jinja (item->valuestring, tok_path, error);
      cJSON_Delete (root);
      return t;
    }
    if (item && !cJSON_IsNull (item)) {
      /* a list of named templates: the project renders one text */
      g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                   "%s: chat_template is %s, not one template text (this build renders %s)",
                   tok_path, dfl_json_kind (item), SUPPORTED);
      cJSON_Delete (root);
      return NULL;
    }
    cJSON_Delete (root);
  }
  /* no template in the folder: the family of the model's config */
  if (!(root = read_json (cfg_path, error)))
    return NULL;
  item = cJSON_GetObjectItemCaseSensitive (root, "model_type");
  if (cJSON_IsString (item)
      && (!strcmp (item->valuestring, "qwen3") || !strcmp (item->valuestring, "qwen2"))) {
    g_autofree char *origin = g_strdup_printf ("%s (model_type %s; no chat_template)", cfg_path,
                                               item->valuestring);
    t = dfl_chat_template_new (!strcmp (item->valuestring, "qwen3") ? DFL_CHAT_QWEN3
                               : DFL_CHAT_QWEN25, origin);
  } else {
    g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                 "%s has no chat_template and %s's model_type is %s%s%s, not qwen2 or qwen3 "
                 "(this build renders %s)", dir, cfg_path,
                 cJSON_IsString (item) ? "\"" : "",
                 cJSON_IsString (item) ? item->valuestring : dfl_json_kind (item),
                 cJSON_IsString (item) ? "\"" : "", SUPPORTED);
  }
  cJSON_Delete (root);
  return t;
}

/* Python's str.lstrip / rstrip / strip of one character. */
static const char *
skip_lead (const char *s, char c)
{
  while (*s == c)
    s++;
  return s;
}

static gsize
trail_len (const char *s, gsize len, char c)
{
  while (len && s[len - 1] == c)
    len--;
  return len;
}

static void
turn (GString *out, const char *role, const char *content)
{
  g_string_append_printf (out, "<|im_start|>%s\n%s<|im_end|>\n", role, content);
}

static gboolean
is_tool_response (const char *s)
{
  return g_str_has_prefix (s, "<tool_response>") && g_str_has_suffix (s, "</tool_response>");
}

/* A Qwen3 assistant turn. Its reasoning is reasoning_content, else what an
 * earlier answer kept between <think> and </think>; the template shows it
 * only after the last user query, and empties it for turns without any. */
static void
qwen3_assistant (GString *out, const DflChatMessage *m, gboolean after_query, gboolean last)
{
  const char *content = m->content;
  g_autofree char *reasoning = g_strdup (m->reasoning_content ? m->reasoning_content : "");
  const char *close;

  if (!m->reasoning_content && (close = strstr (content, "</think>"))) {
    /* content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') */
    gsize before = trail_len (content, close - content, '\n');
    g_autofree char *head = g_strndup (content, before);
    const char *open = head, *p;
    while ((p = strstr (open, "<think>")))
      open = p + strlen ("<think>");
    g_free (reasoning);
    reasoning = g_strdup (skip_lead (open, '\n'));
    /* content.split('</think>')[-1].lstrip('\n') */
    while ((p = strstr (close + strlen ("</think>"), "</think>")))
      close = p;
    content = skip_lead (close + strlen ("</think>"), '\n');
  }
  g_string_append (out, "<|im_start|>assistant\n");
  if (after_query && (last || *reasoning)) {
    const char *r = skip_lead (reasoning, '\n');
    g_string_append (out, "<think>\n");
    g_string_append_len (out, r, trail_len (r, strlen (r), '\n'));
    g_string_append (out, "\n</think>\n\n");
    g_string_append (out, skip_lead (content, '\n'));
  } else {
    g_string_append (out, content);
  }
  g_string_append (out, "<|im_end|>\n");
}

char *
dfl_chat_template_render (const DflChatTemplate *t, const DflChatMessage *msgs, int n,
                          gboolean add_generation_prompt, gboolean enable_thinking,
                          GError **error)
{
  GString *out;
  int last_query = n - 1, bad = 0;

  if (n < 1)
    goto no_messages;
  for (bad = 0; bad < n; bad++) {
    if (!msgs[bad].role || (strcmp (msgs[bad].role, "system") && strcmp (msgs[bad].role, "user")
                            && strcmp (msgs[bad].role, "assistant")))
      goto bad_role;
    if (!msgs[bad].content)
      goto no_content;
  }
  out = g_string_new (NULL);
  if (t->family != DFL_CHAT_QWEN3 && strcmp (msgs[0].role, "system"))
    turn (out, "system", t->family == DFL_CHAT_QWEN2 ? QWEN2_SYSTEM : QWEN25_SYSTEM);
  if (t->family == DFL_CHAT_QWEN3) {
    /* the last user message that is not a tool's answer */
    for (int i = n - 1; i >= 0; i--)
      if (!strcmp (msgs[i].role, "user") && !is_tool_response (msgs[i].content)) {
        last_query = i;
        break;
      }
  }
  for (int i = 0; i < n; i++) {
    if (t->family == DFL_CHAT_QWEN3 && !strcmp (msgs[i].role, "assistant"))
      qwen3_assistant (out, &msgs[i], i > last_query, i == n - 1);
    else
      /* a first system message is the template's header, the same turn */
      turn (out, msgs[i].role, msgs[i].content);
  }
  if (add_generation_prompt) {
    g_string_append (out, "<|im_start|>assistant\n");
    if (t->family == DFL_CHAT_QWEN3 && !enable_thinking)
      g_string_append (out, "<think>\n\n</think>\n\n");
  }
  return g_string_free (out, FALSE);

  /* ERRORS */
no_messages:
  {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID, "a chat needs at least one message");
    return NULL;
  }
bad_role:
  {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "message %d: role \"%s\" is not system, user or assistant (the %s template "
                 "renders no tools)", bad + 1, msgs[bad].role ? msgs[bad].role : "(none)",
                 dfl_chat_template_name (t));
    return NULL;
  }
no_content:
  {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID, "message %d (%s) has no content", bad + 1,
                 msgs[bad].role);
    return NULL;
  }
}
