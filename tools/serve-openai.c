/* gst-dflash — `dflash serve`: OpenAI's request and response JSON. */
#include "serve-openai.h"

#include <math.h>
#include <string.h>
#include <cjson/cJSON.h>

#include "dfl-json.h"

#define INVALID "invalid_request_error"
/* the largest integer a JSON number (a double) holds exactly */
#define EXACT_INT 9007199254740992.0

void
serve_error_set (ServeError *e, int status, const char *type, const char *param, const char *code,
                 const char *fmt, ...)
{
  va_list ap;

  serve_error_clear (e);
  e->status = status;
  e->type = type;
  e->param = g_strdup (param);
  e->code = code;
  va_start (ap, fmt);
  e->message = g_strdup_vprintf (fmt, ap);
  va_end (ap);
}

void
serve_error_clear (ServeError *e)
{
  g_clear_pointer (&e->message, g_free);
  g_clear_pointer (&e->param, g_free);
  e->status = 0;
}

char *
serve_error_json (const ServeError *e)
{
  cJSON *root = cJSON_CreateObject ();
  cJSON *o = cJSON_AddObjectToObject (root, "error");
  char *s;

  cJSON_AddStringToObject (o, "message", e->message ? e->message : "");
  cJSON_AddStringToObject (o, "type", e->type ? e->type : INVALID);
  if (e->param)
    cJSON_AddStringToObject (o, "param", e->param);
  else
    cJSON_AddNullToObject (o, "param");
  if (e->code)
    cJSON_AddStringToObject (o, "code", e->code);
  else
    cJSON_AddNullToObject (o, "code");
  s = cJSON_PrintUnformatted (root);
  cJSON_Delete (root);
  return s;
}

void
serve_params_clear (ServeParams *p)
{
  g_clear_pointer (&p->model, g_free);
  g_clear_pointer (&p->prompt, g_free);
  if (p->prompt_ids)
    g_array_unref (p->prompt_ids);
  p->prompt_ids = NULL;
  g_clear_pointer (&p->messages, g_free);
  if (p->strings)
    g_ptr_array_unref (p->strings);
  p->strings = NULL;
  if (p->stop)
    g_ptr_array_unref (p->stop);
  p->stop = NULL;
}

static gboolean
wrong_type (ServeError *err, const char *param, const char *want, const cJSON *item)
{
  serve_error_set (err, 400, INVALID, param, "invalid_type",
                   "'%s' must be %s, not %s", param, want, dfl_json_kind (item));
  return FALSE;
}

static gboolean
get_int (const cJSON *item, const char *param, double lo, double hi, double *out, ServeError *err)
{
  double v;

  if (!cJSON_IsNumber (item))
    return wrong_type (err, param, "an integer", item);
  v = item->valuedouble;
  if (v != floor (v) || fabs (v) > EXACT_INT)
    return wrong_type (err, param, "an integer", item);
  if (v < lo || v > hi) {
    serve_error_set (err, 400, INVALID, param, "invalid_value",
                     "'%s' must be %.0f to %.0f, not %.0f", param, lo, hi, v);
    return FALSE;
  }
  *out = v;
  return TRUE;
}

static gboolean
get_number (const cJSON *item, const char *param, double lo, double hi, gboolean lo_open,
            double *out, ServeError *err)
{
  double v;

  if (!cJSON_IsNumber (item))
    return wrong_type (err, param, "a number", item);
  v = item->valuedouble;
  if (!(lo_open ? v > lo : v >= lo) || !(v <= hi)) {
    serve_error_set (err, 400, INVALID, param, "invalid_value",
                     "'%s' must be %s%g to %g, not %g", param, lo_open ? "above " : "", lo, hi,
                     v);
    return FALSE;
  }
  *out = v;
  return TRUE;
}

/* A field OpenAI knows that this server takes only at its default: a
 * request asking for more is refused rather than silently served less. */
static gboolean
default_only (const cJSON *item, ServeError *err)
{
  const char *k = item->string;

  if (cJSON_IsNull (item))
    return TRUE;
  if ((!strcmp (k, "n") || !strcmp (k, "best_of")) && cJSON_IsNumber (item)
      && item->valuedouble == 1)
    return TRUE;
  if ((!strcmp (k, "frequency_penalty") || !strcmp (k, "presence_penalty"))
      && cJSON_IsNumber (item) && item->valuedouble == 0)
    return TRUE;
  if ((!strcmp (k, "echo") || !strcmp (k, "logprobs") || !strcmp (k, "parallel_tool_calls"))
      && cJSON_IsFalse (item))
    return TRUE;
  if (!strcmp (k, "user") && cJSON_IsString (item))
    return TRUE;
  if ((!strcmp (k, "tools") || !strcmp (k, "logit_bias")) && (cJSON_IsArray (item)
      || cJSON_IsObject (item)) && cJSON_GetArraySize (item) == 0)
    return TRUE;
  serve_error_set (err, 400, INVALID, k, "unsupported_value",
                   "'%s' is not supported by this server beyond its default "
                   "(n and best_of 1, penalties 0, echo and logprobs false, no tools or "
                   "logit_bias)", k);
  return FALSE;
}

static gboolean
parse_stop (const cJSON *item, ServeParams *p, ServeError *err)
{
  const cJSON *s;

  if (cJSON_IsNull (item))
    return TRUE;
  p->stop = g_ptr_array_new_with_free_func (g_free);
  if (cJSON_IsString (item)) {
    if (*item->valuestring)
      g_ptr_array_add (p->stop, g_strdup (item->valuestring));
    return TRUE;
  }
  if (!cJSON_IsArray (item))
    return wrong_type (err, "stop", "a string or an array of strings", item);
  if (cJSON_GetArraySize (item) > 4) {
    serve_error_set (err, 400, INVALID, "stop", "invalid_value",
                     "'stop' holds at most 4 strings, not %d", cJSON_GetArraySize (item));
    return FALSE;
  }
  cJSON_ArrayForEach (s, item) {
    if (!cJSON_IsString (s))
      return wrong_type (err, "stop", "a string or an array of strings", s);
    if (*s->valuestring)
      g_ptr_array_add (p->stop, g_strdup (s->valuestring));
  }
  return TRUE;
}

static gboolean
parse_prompt (const cJSON *item, ServeParams *p, ServeError *err)
{
  const cJSON *e;

  if (cJSON_IsString (item)) {
    p->prompt = g_strdup (item->valuestring);
    return TRUE;
  }
  if (!cJSON_IsArray (item) || cJSON_GetArraySize (item) == 0)
    return wrong_type (err, "prompt", "a string, an array of one string or an array of token "
                       "ids", item);
  /* one prompt: a batch of several is not served by one request here */
  if (cJSON_IsString (cJSON_GetArrayItem (item, 0))) {
    if (cJSON_GetArraySize (item) != 1) {
      serve_error_set (err, 400, INVALID, "prompt", "unsupported_value",
                       "'prompt' holds %d prompts; this server takes one a request",
                       cJSON_GetArraySize (item));
      return FALSE;
    }
    p->prompt = g_strdup (cJSON_GetArrayItem (item, 0)->valuestring);
    return TRUE;
  }
  p->prompt_ids = g_array_new (FALSE, FALSE, sizeof (int));
  cJSON_ArrayForEach (e, item) {
    double v;
    if (!get_int (e, "prompt", 0, G_MAXINT, &v, err))
      return FALSE;
    g_array_append_val (p->prompt_ids, (int) { (int) v });
  }
  return TRUE;
}

static gboolean
parse_messages (const cJSON *item, ServeParams *p, ServeError *err)
{
  const cJSON *m;
  int i = 0;

  if (!cJSON_IsArray (item))
    return wrong_type (err, "messages", "an array of messages", item);
  if (cJSON_GetArraySize (item) == 0) {
    serve_error_set (err, 400, INVALID, "messages", "invalid_value",
                     "'messages' must hold at least one message");
    return FALSE;
  }
  p->n_messages = cJSON_GetArraySize (item);
  p->messages = g_new0 (DflChatMessage, p->n_messages);
  p->strings = g_ptr_array_new_with_free_func (g_free);
  cJSON_ArrayForEach (m, item) {
    g_autofree char *where = g_strdup_printf ("messages[%d]", i);
    const cJSON *role = cJSON_GetObjectItemCaseSensitive (m, "role");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive (m, "content");
    const cJSON *f;
    GString *text;

    if (!cJSON_IsObject (m))
      return wrong_type (err, where, "an object", m);
    cJSON_ArrayForEach (f, m)
      if (strcmp (f->string, "role") && strcmp (f->string, "content")
          && strcmp (f->string, "name") && strcmp (f->string, "reasoning_content")) {
        g_autofree char *param = g_strdup_printf ("%s.%s", where, f->string);
        serve_error_set (err, 400, INVALID, param, "unknown_parameter",
                         "Unrecognized message field: '%s' (this server takes role, content, "
                         "name and reasoning_content)", param);
        return FALSE;
      }
    if (!cJSON_IsString (role)) {
      g_autofree char *param = g_strdup_printf ("%s.role", where);
      return wrong_type (err, param, "a string", role);
    }
    if (strcmp (role->valuestring, "system") && strcmp (role->valuestring, "user")
        && strcmp (role->valuestring, "assistant") && strcmp (role->valuestring, "developer")) {
      g_autofree char *param = g_strdup_printf ("%s.role", where);
      serve_error_set (err, 400, INVALID, param, "invalid_value",
                       "'%s' is '%s'; this server takes system, developer, user and assistant",
                       param, role->valuestring);
      return FALSE;
    }
    /* content: a string, or an array of text parts */
    text = g_string_new (NULL);
    if (cJSON_IsString (content)) {
      g_string_append (text, content->valuestring);
    } else if (cJSON_IsArray (content)) {
      const cJSON *part;
      cJSON_ArrayForEach (part, content) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive (part, "type");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive (part, "text");
        if (!cJSON_IsString (type) || strcmp (type->valuestring, "text") || !cJSON_IsString (t)) {
          g_autofree char *param = g_strdup_printf ("%s.content", where);
          g_string_free (text, TRUE);
          serve_error_set (err, 400, INVALID, param, "invalid_value",
                           "'%s' holds a part that is not {\"type\": \"text\", \"text\": …}; "
                           "this server takes text only", param);
          return FALSE;
        }
        g_string_append (text, t->valuestring);
      }
    } else {
      g_autofree char *param = g_strdup_printf ("%s.content", where);
      g_string_free (text, TRUE);
      return wrong_type (err, param, "a string or an array of text parts", content);
    }
    /* OpenAI's developer role is the system's in the Qwen templates */
    p->messages[i].role = !strcmp (role->valuestring, "developer") ? "system"
        : g_intern_string (role->valuestring);
    p->messages[i].content = g_string_free (text, FALSE);
    g_ptr_array_add (p->strings, (char *) p->messages[i].content);
    f = cJSON_GetObjectItemCaseSensitive (m, "reasoning_content");
    if (cJSON_IsString (f)) {
      p->messages[i].reasoning_content = g_strdup (f->valuestring);
      g_ptr_array_add (p->strings, (char *) p->messages[i].reasoning_content);
    }
    i++;
  }
  return TRUE;
}

gboolean
serve_params_parse (ServeEndpoint endpoint, const char *body, gsize len, ServeParams *p,
                    ServeError *err)
{
  static const char *defaults[] = { "n", "best_of", "frequency_penalty", "presence_penalty",
                                    "echo", "logprobs", "user", "tools", "logit_bias",
                                    "parallel_tool_calls", NULL };
  const char *end = NULL;
  cJSON *root = dfl_json_parse (body, len, &end, FALSE), *f;
  gboolean ok = FALSE, have_input = FALSE;
  double v;

  memset (p, 0, sizeof *p);
  p->endpoint = endpoint;
  p->temperature = 1.0;   /* OpenAI's defaults */
  p->top_p = 1.0;
  p->enable_thinking = TRUE;
  if (!root) {
    serve_error_set (err, 400, INVALID, NULL, "invalid_json",
                     "the body is not valid JSON (at byte %" G_GSIZE_FORMAT ")",
                     end ? (gsize) (end - body) : 0);
    return FALSE;
  }
  if (!cJSON_IsObject (root)) {
    wrong_type (err, "body", "a JSON object", root);
    goto out;
  }
  cJSON_ArrayForEach (f, root) {
    const char *k = f->string;
    if (!strcmp (k, "model")) {
      if (!cJSON_IsString (f))
        goto wrong_model;
      p->model = g_strdup (f->valuestring);
    } else if (endpoint == SERVE_COMPLETIONS && !strcmp (k, "prompt")) {
      if (!parse_prompt (f, p, err))
        goto out;
      have_input = TRUE;
    } else if (endpoint == SERVE_CHAT && !strcmp (k, "messages")) {
      if (!parse_messages (f, p, err))
        goto out;
      have_input = TRUE;
    } else if (!strcmp (k, "max_tokens")
               || (endpoint == SERVE_CHAT && !strcmp (k, "max_completion_tokens"))) {
      if (cJSON_IsNull (f))
        continue;
      if (!get_int (f, k, 1, G_MAXINT, &v, err))
        goto out;
      p->max_tokens = v;
    } else if (!strcmp (k, "temperature")) {
      if (!cJSON_IsNull (f) && !get_number (f, k, 0, 2, FALSE, &p->temperature, err))
        goto out;
    } else if (!strcmp (k, "top_p")) {
      if (!cJSON_IsNull (f) && !get_number (f, k, 0, 1, TRUE, &p->top_p, err))
        goto out;
    } else if (!strcmp (k, "seed")) {
      if (cJSON_IsNull (f))
        continue;
      if (!get_int (f, k, -EXACT_INT, EXACT_INT, &v, err))
        goto out;
      p->has_seed = TRUE;
      p->seed = (guint64) (gint64) v;
    } else if (!strcmp (k, "stop")) {
      if (!parse_stop (f, p, err))
        goto out;
    } else if (!strcmp (k, "stream")) {
      if (!cJSON_IsBool (f) && !cJSON_IsNull (f)) {
        wrong_type (err, k, "a boolean", f);
        goto out;
      }
      p->stream = cJSON_IsTrue (f);
    } else if (!strcmp (k, "stream_options")) {
      const cJSON *u = cJSON_GetObjectItemCaseSensitive (f, "include_usage");
      if (cJSON_IsNull (f))
        continue;
      if (!cJSON_IsObject (f) || (u && !cJSON_IsBool (u))) {
        wrong_type (err, k, "an object {\"include_usage\": boolean}", f);
        goto out;
      }
      p->include_usage = cJSON_IsTrue (u);
    } else if (endpoint == SERVE_CHAT && !strcmp (k, "chat_template_kwargs")) {
      const cJSON *t = cJSON_GetObjectItemCaseSensitive (f, "enable_thinking");
      if (!cJSON_IsObject (f) || (t && !cJSON_IsBool (t))) {
        wrong_type (err, k, "an object {\"enable_thinking\": boolean}", f);
        goto out;
      }
      if (t)
        p->enable_thinking = cJSON_IsTrue (t);
    } else if (g_strv_contains (defaults, k)) {
      if (!default_only (f, err))
        goto out;
    } else {
      serve_error_set (err, 400, INVALID, k, "unknown_parameter",
                       "Unrecognized request argument supplied: %s", k);
      goto out;
    }
  }
  if (!p->model) {
    serve_error_set (err, 400, INVALID, "model", "missing_required_parameter",
                     "you must provide a model parameter");
    goto out;
  }
  if (!have_input) {
    const char *what = endpoint == SERVE_CHAT ? "messages" : "prompt";
    serve_error_set (err, 400, INVALID, what, "missing_required_parameter",
                     "'%s' is a required property", what);
    goto out;
  }
  if (!p->stream && p->include_usage) {
    serve_error_set (err, 400, INVALID, "stream_options", "invalid_value",
                     "'stream_options' is only allowed when 'stream' is true");
    goto out;
  }
  ok = TRUE;
  goto out;

wrong_model:
  wrong_type (err, "model", "a string", f);
out:
  cJSON_Delete (root);
  /* a refused request keeps nothing of what was read before the fault */
  if (!ok)
    serve_params_clear (p);
  return ok;
}

static cJSON *
response_head (ServeEndpoint endpoint, const char *id, gint64 created, const char *model,
               gboolean chunk)
{
  cJSON *o = cJSON_CreateObject ();

  cJSON_AddStringToObject (o, "id", id);
  cJSON_AddStringToObject (o, "object", endpoint == SERVE_CHAT
                           ? (chunk ? "chat.completion.chunk" : "chat.completion")
                           : "text_completion");
  cJSON_AddNumberToObject (o, "created", created);
  cJSON_AddStringToObject (o, "model", model);
  return o;
}

static void
add_usage (cJSON *o, int prompt_tokens, int completion_tokens)
{
  cJSON *u = cJSON_AddObjectToObject (o, "usage");

  cJSON_AddNumberToObject (u, "prompt_tokens", prompt_tokens);
  cJSON_AddNumberToObject (u, "completion_tokens", completion_tokens);
  cJSON_AddNumberToObject (u, "total_tokens", prompt_tokens + completion_tokens);
}

static char *
print_free (cJSON *o)
{
  char *s = cJSON_PrintUnformatted (o);

  cJSON_Delete (o);
  return s;
}

char *
serve_response_json (ServeEndpoint endpoint, const char *id, gint64 created, const char *model,
                     const char *text, const char *finish_reason, int prompt_tokens,
                     int completion_tokens)
{
  cJSON *o = response_head (endpoint, id, created, model, FALSE);
  cJSON *choice = cJSON_CreateObject ();

  cJSON_AddNumberToObject (choice, "index", 0);
  if (endpoint == SERVE_CHAT) {
    cJSON *m = cJSON_AddObjectToObject (choice, "message");
    cJSON_AddStringToObject (m, "role", "assistant");
    cJSON_AddStringToObject (m, "content", text);
  } else {
    cJSON_AddStringToObject (choice, "text", text);
  }
  cJSON_AddNullToObject (choice, "logprobs");
  cJSON_AddStringToObject (choice, "finish_reason", finish_reason);
  cJSON_AddItemToArray (cJSON_AddArrayToObject (o, "choices"), choice);
  add_usage (o, prompt_tokens, completion_tokens);
  return print_free (o);
}

char *
serve_chunk_json (ServeEndpoint endpoint, const char *id, gint64 created, const char *model,
                  const char *delta, gboolean first, const char *finish_reason)
{
  cJSON *o = response_head (endpoint, id, created, model, TRUE);
  cJSON *choice = cJSON_CreateObject ();

  cJSON_AddNumberToObject (choice, "index", 0);
  if (endpoint == SERVE_CHAT) {
    cJSON *d = cJSON_AddObjectToObject (choice, "delta");
    if (first)
      cJSON_AddStringToObject (d, "role", "assistant");
    if (delta)
      cJSON_AddStringToObject (d, "content", delta);
  } else {
    cJSON_AddStringToObject (choice, "text", delta ? delta : "");
  }
  cJSON_AddNullToObject (choice, "logprobs");
  if (finish_reason)
    cJSON_AddStringToObject (choice, "finish_reason", finish_reason);
  else
    cJSON_AddNullToObject (choice, "finish_reason");
  cJSON_AddItemToArray (cJSON_AddArrayToObject (o, "choices"), choice);
  return print_free (o);
}

char *
serve_usage_chunk_json (ServeEndpoint endpoint, const char *id, gint64 created, const char *model,
                        int prompt_tokens, int completion_tokens)
{
  cJSON *o = response_head (endpoint, id, created, model, TRUE);

  cJSON_AddArrayToObject (o, "choices");
  add_usage (o, prompt_tokens, completion_tokens);
  return print_free (o);
}

char *
serve_models_json (const char *model, gint64 created)
{
  cJSON *o = cJSON_CreateObject ();
  cJSON *m = cJSON_CreateObject ();

  cJSON_AddStringToObject (o, "object", "list");
  cJSON_AddStringToObject (m, "id", model);
  cJSON_AddStringToObject (m, "object", "model");
  cJSON_AddNumberToObject (m, "created", created);
  cJSON_AddStringToObject (m, "owned_by", "gst-dflash");
  cJSON_AddItemToArray (cJSON_AddArrayToObject (o, "data"), m);
  return print_free (o);
}
