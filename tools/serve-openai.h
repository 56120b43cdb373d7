/* gst-dflash — `dflash serve`: OpenAI's request and response JSON.
 *
 * What a POST to /v1/completions or /v1/chat/completions asks for, checked
 * field by field the way OpenAI's API checks it (a field of the wrong type,
 * out of range or unknown is a 400 naming it), and the JSON of the answers:
 * the whole response, the Server-Sent Events' chunks, the error object
 * ({"error": {"message", "type", "param", "code"}}), the model list.
 */
#pragma once

#include <glib.h>

#include "chat-template.h"

G_BEGIN_DECLS

typedef enum {
  SERVE_COMPLETIONS,
  SERVE_CHAT,
} ServeEndpoint;

typedef struct {
  int status;       /* HTTP status: 400, 404, 413, 429, 500, 503 */
  char *message;
  const char *type; /* "invalid_request_error", … */
  char *param;      /* the field, or NULL */
  const char *code; /* OpenAI's code, or NULL */
} ServeError;

typedef struct {
  ServeEndpoint endpoint;
  char *model;
  /* completions: the prompt as text, or as token ids */
  char *prompt;
  GArray *prompt_ids;
  /* chat: the messages (their strings in `strings`) and Qwen3's switch
   * (chat_template_kwargs.enable_thinking, default on) */
  DflChatMessage *messages;
  int n_messages;
  GPtrArray *strings;
  gboolean enable_thinking;
  int max_tokens;            /* 0: not given */
  double temperature, top_p;
  gboolean has_seed;
  guint64 seed;
  GPtrArray *stop;           /* stop strings (at most 4), or NULL */
  gboolean stream, include_usage;
} ServeParams;

/* Parse the body of a request to `endpoint`; FALSE with `err` set (status
 * 400) where it is not what OpenAI's API takes. */
gboolean serve_params_parse (ServeEndpoint endpoint, const char *body, gsize len,
                             ServeParams *p, ServeError *err);
void serve_params_clear (ServeParams *p);

void serve_error_set (ServeError *e, int status, const char *type, const char *param,
                      const char *code, const char *fmt, ...) G_GNUC_PRINTF (6, 7);
void serve_error_clear (ServeError *e);
char *serve_error_json (const ServeError *e);

/* A whole (non-streamed) response. */
char *serve_response_json (ServeEndpoint endpoint, const char *id, gint64 created,
                           const char *model, const char *text, const char *finish_reason,
                           int prompt_tokens, int completion_tokens);
/* One streamed chunk: `delta` text (a chat's first chunk also says the
 * role), or the last with `finish_reason` (delta NULL). */
char *serve_chunk_json (ServeEndpoint endpoint, const char *id, gint64 created, const char *model,
                        const char *delta, gboolean first, const char *finish_reason);
/* The chunk stream_options.include_usage asks for after the last. */
char *serve_usage_chunk_json (ServeEndpoint endpoint, const char *id, gint64 created,
                              const char *model, int prompt_tokens, int completion_tokens);
char *serve_models_json (const char *model, gint64 created);

G_END_DECLS
