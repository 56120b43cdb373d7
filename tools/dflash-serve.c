/* gst-dflash — `dflash serve`: an OpenAI-compatible HTTP server over the
 * pipeline.
 *
 * One pipeline serves every request: the description `dflash generate`
 * runs, its tapsource serving (serve=true, in-flight = --max-sequences).
 * A request is checked and encoded here (serve-openai.c: the JSON; the
 * target's chat template for /v1/chat/completions), submitted to tapsource
 * (its submit-request signal gives the id its rounds carry), and answered
 * from the verifier's outputs: its text and its token ids come out of the
 * fakesinks `text` and `ids` in the verifier's streaming thread, are kept
 * in the request under a lock, and the main loop (libsoup's, the only
 * thread that touches a message) writes them out — as Server-Sent Events
 * for a streamed request, as one JSON object when the last tokens (marked
 * by the verifier) came. Stop strings are found here, in the text, and end
 * the request there. A client gone (its message finished unanswered)
 * cancels its request, which frees its sequence at its next round.
 * Requests beyond --max-sequences wait in tapsource's queue; beyond
 * --max-queue more they are refused with 429.
 */
#include <gst/gst.h>
#include <libsoup/soup.h>
#include <glib-unix.h>
#include <stdio.h>
#include <string.h>

#include "chat-template.h"
#include "dfl-error.h"
#include "dflash-cli.h"
#include "gstdflashmeta.h"
#include "gstdflashmodel.h"
#include "round.h"
#include "serve-metrics.h"
#include "serve-openai.h"

#define DEFAULT_PORT 8080
#define DEFAULT_MAX_SEQUENCES 4
#define DEFAULT_MAX_QUEUE 64
#define DEFAULT_MAX_TOKENS 128
/* a request's body past this is refused (413) */
#define MAX_BODY (4 << 20)
/* connections waiting to be accepted (the kernel caps it at somaxconn) */
#define LISTEN_BACKLOG 1024

typedef struct _Server Server;

typedef struct {
  gint refcount;
  Server *srv;
  SoupServerMessage *msg;    /* until its "finished": the client's, or NULL */
  const char *path;
  ServeEndpoint endpoint;
  guint id;                  /* tapsource's */
  char *cmpl_id;
  char *model;
  gint64 created;
  gboolean stream, include_usage;
  GPtrArray *stop;           /* stop strings, or NULL */
  gsize max_stop;            /* the longest one's bytes */
  int prompt_tokens;
  /* written by the verifier's thread, under the server's lock */
  GString *text;
  int completion_tokens;
  int last_token;
  gboolean done;             /* the verifier marked its last tokens */
  gboolean scheduled;        /* a flush is on its way to the main loop */
  /* the main loop's */
  gsize sent;                /* bytes of text written (streamed) */
  gboolean first_sent;
  gboolean answered;         /* the answer is complete, or the client gone */
} Request;

struct _Server {
  GMainLoop *loop;
  SoupServer *soup;
  GstElement *pipeline, *src;
  GstDflashModel *model;
  const DflTokenizer *tok;
  const DflQwen3Config *cfg;
  DflChatTemplate *chat;
  GError *chat_error;        /* why the folder's chat template is refused */
  char *model_name;
  int block;
  int max_sequences, max_queue, default_max_tokens;
  ServeMetrics *metrics;
  gint64 started;
  GMutex lock;               /* requests, and the verifier's side of each */
  GHashTable *requests;      /* tapsource id → Request (a reference) */
  guint active;              /* accepted and not answered (main loop) */
  gboolean failed;
  int status;
};

static Request *
request_ref (Request *r)
{
  g_atomic_int_inc (&r->refcount);
  return r;
}

static void
request_unref (Request *r)
{
  if (!g_atomic_int_dec_and_test (&r->refcount))
    return;
  g_free (r->cmpl_id);
  g_free (r->model);
  if (r->stop)
    g_ptr_array_unref (r->stop);
  g_string_free (r->text, TRUE);
  g_free (r);
}

static void
request_closure_notify (gpointer data, GClosure *closure)
{
  request_unref (data);
}

/* ------------------------------------------------------------------ */
/* answers                                                              */

static void
reply_json (Server *srv, SoupServerMessage *msg, const char *path, int status, char *json)
{
  soup_server_message_set_status (msg, status, NULL);
  soup_server_message_set_response (msg, "application/json", SOUP_MEMORY_TAKE, json,
                                    strlen (json));
  serve_metrics_request (srv->metrics, path, status);
}

static void
reply_error (Server *srv, SoupServerMessage *msg, const char *path, ServeError *e)
{
  g_message ("%s %s: %d %s", soup_server_message_get_method (msg), path, e->status, e->message);
  reply_json (srv, msg, path, e->status, serve_error_json (e));
  serve_error_clear (e);
}

static void
write_event (SoupServerMessage *msg, char *json)
{
  SoupMessageBody *body = soup_server_message_get_response_body (msg);
  char *event = g_strdup_printf ("data: %s\n\n", json);

  soup_message_body_append (body, SOUP_MEMORY_TAKE, event, strlen (event));
  g_free (json);
}

static const char *
finish_reason (Server *srv, Request *r, gboolean stopped)
{
  if (stopped || dfl_qwen3_config_is_eos (srv->cfg, r->last_token))
    return "stop";
  return "length";
}

/* The earliest stop string in text[from, len): its offset, or -1. */
static gssize
find_stop (Request *r, const char *text, gsize len, gsize from)
{
  gssize best = -1;

  for (guint i = 0; r->stop && i < r->stop->len; i++) {
    const char *s = g_ptr_array_index (r->stop, i);
    gsize sl = strlen (s);
    for (gsize p = from; p + sl <= len; p++)
      if (!memcmp (text + p, s, sl)) {
        if (best < 0 || (gssize) p < best)
          best = p;
        break;
      }
  }
  return best;
}

static void
forget (Server *srv, Request *r)
{
  g_mutex_lock (&srv->lock);
  if (g_hash_table_lookup (srv->requests, GUINT_TO_POINTER (r->id)) == r)
    g_hash_table_remove (srv->requests, GUINT_TO_POINTER (r->id));
  g_mutex_unlock (&srv->lock);
}

static void
answered (Server *srv, Request *r, int status)
{
  r->answered = TRUE;
  srv->active--;
  serve_metrics_request (srv->metrics, r->path, status);
  serve_metrics_tokens (srv->metrics, r->prompt_tokens, r->completion_tokens);
}

/* The main loop's side: write what the verifier gave the request since. */
static gboolean
flush_request (gpointer data)
{
  Request *r = data;
  Server *srv = r->srv;
  g_autofree char *text = NULL;
  gsize len, end;
  gboolean done, stopped = FALSE;
  gssize stop_at;

  g_mutex_lock (&srv->lock);
  r->scheduled = FALSE;
  text = g_strndup (r->text->str, r->text->len);
  len = r->text->len;
  done = r->done;
  g_mutex_unlock (&srv->lock);
  if (r->answered || !r->msg)
    return G_SOURCE_REMOVE;

  /* a stop string ends the text where it starts (it is not sent) */
  stop_at = find_stop (r, text, len, r->sent > r->max_stop ? r->sent - r->max_stop : 0);
  if (stop_at >= 0) {
    len = stop_at;
    stopped = TRUE;
  }
  if (!r->stream) {
    if (!done && !stopped)
      return G_SOURCE_REMOVE;
    text[len] = '\0';
    soup_server_message_set_status (r->msg, 200, NULL);
    {
      char *json = serve_response_json (r->endpoint, r->cmpl_id, r->created, r->model, text,
                                        finish_reason (srv, r, stopped), r->prompt_tokens,
                                        r->completion_tokens);
      soup_server_message_set_response (r->msg, "application/json", SOUP_MEMORY_TAKE, json,
                                        strlen (json));
    }
  } else {
    /* while it runs, hold back what may be the start of a stop string,
     * and never split a character */
    end = done || stopped ? len : len - MIN (len, r->max_stop ? r->max_stop - 1 : 0);
    while (end > r->sent && end < len && (text[end] & 0xC0) == 0x80)
      end--;
    if (end > r->sent || !r->first_sent) {
      g_autofree char *delta = g_strndup (text + r->sent, end - MIN (end, r->sent));
      write_event (r->msg, serve_chunk_json (r->endpoint, r->cmpl_id, r->created, r->model,
                                             delta, !r->first_sent, NULL));
      r->first_sent = TRUE;
      r->sent = MAX (end, r->sent);
    }
    if (done || stopped) {
      SoupMessageBody *body = soup_server_message_get_response_body (r->msg);
      write_event (r->msg, serve_chunk_json (r->endpoint, r->cmpl_id, r->created, r->model,
                                             NULL, FALSE, finish_reason (srv, r, stopped)));
      if (r->include_usage)
        write_event (r->msg, serve_usage_chunk_json (r->endpoint, r->cmpl_id, r->created,
                                                     r->model, r->prompt_tokens,
                                                     r->completion_tokens));
      soup_message_body_append (body, SOUP_MEMORY_STATIC, "data: [DONE]\n\n", 14);
      soup_message_body_complete (body);
    }
  }
  soup_server_message_unpause (r->msg);
  if (done || stopped) {
    gboolean cancelled;
    if (!done)
      /* stopped by its text: its sequence goes at its next round */
      g_signal_emit_by_name (srv->src, "cancel-request", r->id, &cancelled);
    forget (srv, r);
    answered (srv, r, 200);
  }
  return G_SOURCE_REMOVE;
}

/* The client's message is over: answered, or the client went away. */
static void
on_message_finished (SoupServerMessage *msg, Request *r)
{
  Server *srv = r->srv;
  gboolean cancelled;

  r->msg = NULL;
  if (r->answered)
    return;
  g_signal_emit_by_name (srv->src, "cancel-request", r->id, &cancelled);
  forget (srv, r);
  g_message ("%s: request %u: the client went away (%s)", r->path, r->id,
             cancelled ? "cancelled" : "it had ended");
  answered (srv, r, 499);
}

/* ------------------------------------------------------------------ */
/* the verifier's side (its streaming thread)                           */

static void
schedule (Request *r)
{
  if (r->scheduled)
    return;
  r->scheduled = TRUE;
  g_idle_add_full (G_PRIORITY_DEFAULT, flush_request, request_ref (r),
                   (GDestroyNotify) request_unref);
}

static void
on_text (GstElement *sink, GstBuffer *buf, GstPad *pad, Server *srv)
{
  GstDflashRoundMeta *meta = gst_buffer_get_dflash_round_meta (buf);
  Request *r;
  GstMapInfo map;

  if (!meta || !gst_buffer_map (buf, &map, GST_MAP_READ))
    return;
  g_mutex_lock (&srv->lock);
  if ((r = g_hash_table_lookup (srv->requests, GUINT_TO_POINTER (meta->sequence))))
    g_string_append_len (r->text, (const char *) map.data, map.size);
  g_mutex_unlock (&srv->lock);
  gst_buffer_unmap (buf, &map);
}

/* The ids follow the round's text: the request's round is complete. */
static void
on_ids (GstElement *sink, GstBuffer *buf, GstPad *pad, Server *srv)
{
  GstDflashRoundMeta *meta = gst_buffer_get_dflash_round_meta (buf);
  Request *r;
  GstMapInfo map;

  if (!meta || !gst_buffer_map (buf, &map, GST_MAP_READ))
    return;
  g_mutex_lock (&srv->lock);
  if ((r = g_hash_table_lookup (srv->requests, GUINT_TO_POINTER (meta->sequence)))) {
    int n = map.size / sizeof (int);
    r->completion_tokens += n;
    if (n)
      r->last_token = ((const int *) map.data)[n - 1];
    if (GST_BUFFER_FLAG_IS_SET (buf, GST_BUFFER_FLAG_MARKER))
      r->done = TRUE;
    schedule (r);
  }
  g_mutex_unlock (&srv->lock);
  gst_buffer_unmap (buf, &map);
}

/* The verifier's rounds, counted where they are posted (and dropped: no
 * one else reads them). */
static GstBusSyncReply
bus_sync (GstBus *bus, GstMessage *msg, Server *srv)
{
  const GstStructure *st;
  int drafted, accepted, batch;

  if (GST_MESSAGE_TYPE (msg) != GST_MESSAGE_ELEMENT
      || !(st = gst_message_get_structure (msg)) || !gst_structure_has_name (st, "dflash-round"))
    return GST_BUS_PASS;
  if (gst_structure_get_int (st, "drafted", &drafted)
      && gst_structure_get_int (st, "accepted", &accepted)
      && gst_structure_get_int (st, "batch", &batch))
    serve_metrics_round (srv->metrics, drafted, accepted, batch);
  gst_message_unref (msg);
  return GST_BUS_DROP;
}

static gboolean
bus_watch (GstBus *bus, GstMessage *msg, Server *srv)
{
  if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR) {
    g_autoptr (GError) e = NULL;
    g_autofree char *debug = NULL;
    gst_message_parse_error (msg, &e, &debug);
    fprintf (stderr, "dflash: serve: the pipeline failed: %s: %s\n",
             GST_OBJECT_NAME (GST_MESSAGE_SRC (msg)), e->message);
    srv->failed = TRUE;
    srv->status = DFL_EXIT_ERROR;
    g_main_loop_quit (srv->loop);
  } else if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_EOS) {
    srv->failed = TRUE;
    g_main_loop_quit (srv->loop);
  } else if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_WARNING) {
    /* the pipeline goes on (the router's figures file, say) */
    g_autoptr (GError) w = NULL;
    gst_message_parse_warning (msg, &w, NULL);
    fprintf (stderr, "dflash: serve: warning: %s\n", w->message);
  }
  return G_SOURCE_CONTINUE;
}

/* ------------------------------------------------------------------ */
/* requests                                                             */

/* The prompt's ids of a checked request; FALSE with `err` set. */
static GArray *
prompt_ids (Server *srv, ServeParams *p, ServeError *err)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *rendered = NULL;
  const char *text = p->prompt;
  GArray *ids;

  if (p->prompt_ids) {
    for (guint i = 0; i < p->prompt_ids->len; i++)
      if (g_array_index (p->prompt_ids, int, i) >= srv->cfg->vocab) {
        serve_error_set (err, 400, "invalid_request_error", "prompt", "invalid_value",
                         "'prompt' holds token %d, outside the vocabulary of %d tokens",
                         g_array_index (p->prompt_ids, int, i), srv->cfg->vocab);
        return NULL;
      }
    return g_array_ref (p->prompt_ids);
  }
  if (p->endpoint == SERVE_CHAT) {
    if (!srv->chat) {
      serve_error_set (err, 400, "invalid_request_error", "messages", "unsupported_template",
                       "%s", srv->chat_error->message);
      return NULL;
    }
    if (!(rendered = dfl_chat_template_render (srv->chat, p->messages, p->n_messages, TRUE,
                                               p->enable_thinking, &error))) {
      serve_error_set (err, 400, "invalid_request_error", "messages", "invalid_value", "%s",
                       error->message);
      return NULL;
    }
    text = rendered;
  }
  if (!srv->tok) {
    serve_error_set (err, 400, "invalid_request_error", "prompt", "invalid_value",
                     "the model has no tokenizer.json: give the prompt as token ids");
    return NULL;
  }
  if (!(ids = dfl_tokenizer_encode (srv->tok, text, -1, &error))) {
    serve_error_set (err, 400, "invalid_request_error", "prompt", "invalid_value", "%s",
                     error->message);
    return NULL;
  }
  if (ids->len == 0) {
    g_array_unref (ids);
    serve_error_set (err, 400, "invalid_request_error",
                     p->endpoint == SERVE_CHAT ? "messages" : "prompt", "invalid_value",
                     "the prompt is empty");
    return NULL;
  }
  return ids;
}

static void
handle_generation (Server *srv, SoupServerMessage *msg, const char *path, ServeEndpoint endpoint)
{
  SoupMessageBody *body = soup_server_message_get_request_body (msg);
  g_autoptr (GBytes) bytes = NULL;
  ServeParams p;
  ServeError err = { 0 };
  g_autoptr (GArray) ids = NULL;
  GstStructure *settings;
  Request *r;
  gint64 room;
  guint id = 0;

  if (strcmp (soup_server_message_get_method (msg), "POST")) {
    serve_error_set (&err, 405, "invalid_request_error", NULL, "method_not_allowed",
                     "%s takes POST, not %s", path, soup_server_message_get_method (msg));
    soup_message_headers_replace (soup_server_message_get_response_headers (msg), "Allow",
                                  "POST");
    reply_error (srv, msg, path, &err);
    return;
  }
  if (body->length > MAX_BODY) {
    serve_error_set (&err, 413, "invalid_request_error", NULL, "request_too_large",
                     "the request body has %" G_GINT64_FORMAT " bytes, more than the %d this "
                     "server takes", body->length, MAX_BODY);
    reply_error (srv, msg, path, &err);
    return;
  }
  bytes = soup_message_body_flatten (body);
  if (!serve_params_parse (endpoint, g_bytes_get_data (bytes, NULL), g_bytes_get_size (bytes),
                           &p, &err)) {
    reply_error (srv, msg, path, &err);
    return;
  }
  if (strcmp (p.model, srv->model_name)) {
    serve_error_set (&err, 404, "invalid_request_error", "model", "model_not_found",
                     "The model '%s' does not exist (this server serves '%s')", p.model,
                     srv->model_name);
    goto refuse;
  }
  if (!(ids = prompt_ids (srv, &p, &err)))
    goto refuse;
  /* room for the prompt, the new tokens and one block */
  room = (gint64) srv->cfg->max_positions - srv->block - ids->len;
  if (room < 1) {
    serve_error_set (&err, 400, "invalid_request_error",
                     endpoint == SERVE_CHAT ? "messages" : "prompt", "context_length_exceeded",
                     "the prompt has %u tokens; this model's context holds %d (less a block of "
                     "%d and one new token: at most %" G_GINT64_FORMAT " prompt tokens)",
                     ids->len, srv->cfg->max_positions, srv->block,
                     (gint64) srv->cfg->max_positions - srv->block - 1);
    goto refuse;
  }
  if (p.max_tokens > room) {
    serve_error_set (&err, 400, "invalid_request_error", "max_tokens", "context_length_exceeded",
                     "max_tokens %d and the prompt's %u tokens pass this model's context of %d "
                     "(with this prompt max_tokens may be at most %" G_GINT64_FORMAT ")",
                     p.max_tokens, ids->len, srv->cfg->max_positions, room);
    goto refuse;
  }
  if (srv->active >= (guint) (srv->max_sequences + srv->max_queue)) {
    serve_error_set (&err, 429, "requests", NULL, "rate_limit_exceeded",
                     "%u requests are running or queued, the most this server takes "
                     "(--max-sequences %d, --max-queue %d); try again later", srv->active,
                     srv->max_sequences, srv->max_queue);
    goto refuse;
  }

  r = g_new0 (Request, 1);
  r->refcount = 1;
  r->srv = srv;
  r->msg = msg;
  r->path = g_intern_string (path);
  r->endpoint = endpoint;
  r->cmpl_id = g_strdup_printf ("%s-%08x%08x", endpoint == SERVE_CHAT ? "chatcmpl" : "cmpl",
                                g_random_int (), g_random_int ());
  r->model = g_strdup (srv->model_name);
  r->created = g_get_real_time () / G_USEC_PER_SEC;
  r->stream = p.stream;
  r->include_usage = p.include_usage;
  r->prompt_tokens = ids->len;
  r->text = g_string_new (NULL);
  if (p.stop && p.stop->len) {
    r->stop = g_ptr_array_ref (p.stop);
    for (guint i = 0; i < p.stop->len; i++)
      r->max_stop = MAX (r->max_stop, strlen (g_ptr_array_index (p.stop, i)));
  }
  settings = gst_structure_new ("request",
      "max-tokens", G_TYPE_INT, p.max_tokens ? p.max_tokens : (int) MIN (room,
                                                                           srv->default_max_tokens),
      "temperature", G_TYPE_DOUBLE, p.temperature, "top-p", G_TYPE_DOUBLE, p.top_p,
      /* no seed: a stream of its own, as OpenAI's answers differ */
      "seed", G_TYPE_UINT64, p.has_seed ? p.seed
                                        : ((guint64) g_random_int () << 32 | g_random_int ()),
      NULL);
  /* the table is locked from the submission on: the verifier's first
   * tokens find the request */
  g_mutex_lock (&srv->lock);
  {
    g_autoptr (GBytes) tokens = g_bytes_new (ids->data, sizeof (int) * ids->len);
    g_signal_emit_by_name (srv->src, "submit-request", tokens, settings, &id);
  }
  if (id)
    g_hash_table_insert (srv->requests, GUINT_TO_POINTER (id), request_ref (r));
  g_mutex_unlock (&srv->lock);
  gst_structure_free (settings);
  serve_params_clear (&p);
  if (!id) {
    request_unref (r);
    serve_error_set (&err, 500, "server_error", NULL, NULL,
                     "the pipeline refused the request (see the server's log)");
    reply_error (srv, msg, path, &err);
    return;
  }
  r->id = id;
  srv->active++;
  g_signal_connect_data (msg, "finished", G_CALLBACK (on_message_finished), r,
                         request_closure_notify, 0);
  if (r->stream) {
    SoupMessageHeaders *h = soup_server_message_get_response_headers (msg);
    soup_message_headers_set_encoding (h, SOUP_ENCODING_CHUNKED);
    soup_message_headers_set_content_type (h, "text/event-stream", NULL);
    soup_message_headers_replace (h, "Cache-Control", "no-cache");
    soup_server_message_set_status (msg, 200, NULL);
  }
  soup_server_message_pause (msg);
  return;

refuse:
  serve_params_clear (&p);
  reply_error (srv, msg, path, &err);
}

static void
handle (SoupServer *soup, SoupServerMessage *msg, const char *path, GHashTable *query,
        gpointer data)
{
  Server *srv = data;
  ServeError err = { 0 };
  gboolean get = !strcmp (soup_server_message_get_method (msg), "GET");

  if (!strcmp (path, "/v1/completions")) {
    handle_generation (srv, msg, path, SERVE_COMPLETIONS);
  } else if (!strcmp (path, "/v1/chat/completions")) {
    handle_generation (srv, msg, path, SERVE_CHAT);
  } else if (get && !strcmp (path, "/v1/models")) {
    reply_json (srv, msg, path, 200, serve_models_json (srv->model_name,
                                                        srv->started / G_USEC_PER_SEC));
  } else if (get && !strcmp (path, "/health")) {
    reply_json (srv, msg, path, srv->failed ? 503 : 200,
                g_strdup (srv->failed ? "{\"status\":\"failed\"}" : "{\"status\":\"ok\"}"));
  } else if (get && !strcmp (path, "/metrics")) {
    guint running = 0, queued = 0;
    char *text;
    g_object_get (srv->src, "running", &running, "queued", &queued, NULL);
    text = serve_metrics_text (srv->metrics, running, queued);
    soup_server_message_set_status (msg, 200, NULL);
    soup_server_message_set_response (msg, "text/plain; version=0.0.4", SOUP_MEMORY_TAKE, text,
                                      strlen (text));
    serve_metrics_request (srv->metrics, path, 200);
  } else {
    serve_error_set (&err, 404, "invalid_request_error", NULL, "unknown_url",
                     "Unknown request URL: %s %s", soup_server_message_get_method (msg), path);
    reply_error (srv, msg, "other", &err);
  }
}

static gboolean
on_signal (gpointer data)
{
  Server *srv = data;

  g_main_loop_quit (srv->loop);
  return G_SOURCE_CONTINUE;
}

/* ------------------------------------------------------------------ */

int
dfl_cmd_serve (int argc, char **argv)
{
  g_autofree char *target_dir = NULL, *drafter_path = NULL, *route_name = NULL,
      *route_figures = NULL, *select = NULL,
      *host = NULL, *model_name = NULL, *drafter_weights_name = NULL, *backend_name = NULL;
  GstDflashDrafterWeights drafter_weights;
  GstDflashBackend backend;
  int port = DEFAULT_PORT, max_sequences = DEFAULT_MAX_SEQUENCES, max_queue = DEFAULT_MAX_QUEUE,
      max_tokens = DEFAULT_MAX_TOKENS, head_width = 0;
  gboolean no_draft = FALSE;
  GOptionEntry entries[] = {
    { "target", 0, 0, G_OPTION_ARG_FILENAME, &target_dir, "Qwen3 checkpoint folder (default: the embedded default model)", "DIR" },
    { "drafter", 0, 0, G_OPTION_ARG_FILENAME, &drafter_path, "DFlash sidecar file or released DFlash folder (default: dflash.safetensors in the target folder)", "FILE|DIR" },
    { "drafter-weights", 0, 0, G_OPTION_ARG_STRING, &drafter_weights_name, DFL_CLI_DRAFTER_WEIGHTS_HELP, "q8_0|stored" },
    { "backend", 0, 0, G_OPTION_ARG_STRING, &backend_name, DFL_CLI_BACKEND_HELP, "cpu|cuda|vulkan" },
    { "host", 0, 0, G_OPTION_ARG_STRING, &host, "Address to listen on (default 127.0.0.1)", "ADDR" },
    { "port", 0, 0, G_OPTION_ARG_INT, &port, "Port to listen on (default " G_STRINGIFY (DEFAULT_PORT) "; 0: a free one, printed)", "N" },
    { "max-sequences", 0, 0, G_OPTION_ARG_INT, &max_sequences, "Requests running at once (tapsource's in-flight; default " G_STRINGIFY (DEFAULT_MAX_SEQUENCES) ")", "N" },
    { "max-queue", 0, 0, G_OPTION_ARG_INT, &max_queue, "Requests waiting beyond those; more are refused with 429 (default " G_STRINGIFY (DEFAULT_MAX_QUEUE) ")", "N" },
    { "max-tokens", 0, 0, G_OPTION_ARG_INT, &max_tokens, "New tokens of a request that names no max_tokens (default " G_STRINGIFY (DEFAULT_MAX_TOKENS) ", less where the context ends first)", "N" },
    { "model-name", 0, 0, G_OPTION_ARG_STRING, &model_name, "The model's id in the API (default: the target folder's name)", "NAME" },
    { "no-draft", 0, 0, G_OPTION_ARG_NONE, &no_draft, "Plain decoding with the target alone", NULL },
    { "route", 0, 0, G_OPTION_ARG_STRING, &route_name, "cost (default with a drafter), block, chain, match or auto, as dflash generate takes", "ROUTE" },
    { "route-figures", 0, 0, G_OPTION_ARG_FILENAME, &route_figures, "Where route cost keeps its figures between runs (default: a file a model pair under the user cache folder, gst-dflash/route/; none: start afresh)", "FILE|none" },
    { "select", 0, 0, G_OPTION_ARG_STRING, &select, "rescore (default) or plain", "HOW" },
    { "head-width", 0, 0, G_OPTION_ARG_INT, &head_width, "Score drafts over the head's first N rows only (default: all)", "N" },
    { NULL }
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("- serve the OpenAI API over the pipeline");
  g_autoptr (GError) error = NULL;
  g_autofree char *source = NULL, *desc = NULL, *figures = NULL, *q_model = NULL;
  DflRoute route = DFL_ROUTE_BLOCK;
  DflDrafterWeights *drafter;
  Server srv = { 0 };
  GSocketAddress *addr;
  GSocket *listener;
  GstContext *context;
  GstElement *e;
  GstBus *bus;
  GSList *uris;
  int status;

  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!dfl_cli_parse (ctx, &argc, &argv))
    return DFL_EXIT_USAGE;
  if (argc > 1)
    return dfl_cli_fail (DFL_EXIT_USAGE, "serve: unexpected argument '%s'", argv[1]);
  if (port < 0 || port > 65535)
    return dfl_cli_fail (DFL_EXIT_USAGE, "serve: --port must be 0 to 65535, not %d", port);
  if (max_sequences < 1 || max_sequences > 1024)
    return dfl_cli_fail (DFL_EXIT_USAGE, "serve: --max-sequences must be 1 to 1024, not %d",
                         max_sequences);
  if (max_queue < 0)
    return dfl_cli_fail (DFL_EXIT_USAGE, "serve: --max-queue must be ≥ 0, not %d", max_queue);
  if (max_tokens < 1)
    return dfl_cli_fail (DFL_EXIT_USAGE, "serve: --max-tokens must be at least 1, not %d",
                         max_tokens);
  if ((status = dfl_cli_check_draft_options ("serve", route_name, select, head_width, no_draft,
                                             &route)) != DFL_EXIT_OK)
    return status;
  if ((status = dfl_cli_drafter_weights ("serve", drafter_weights_name, &drafter_weights))
      != DFL_EXIT_OK)
    return status;
  if ((status = dfl_cli_backend ("serve", backend_name, &backend)) != DFL_EXIT_OK)
    return status;
  if (!dfl_cli_init_elements (&error))
    return dfl_cli_fail_error (g_steal_pointer (&error));

  if (!target_dir)
    target_dir = g_strdup (dfl_cli_default_target ());
  if (!(srv.model = gst_dflash_model_new (target_dir, drafter_path,
                                          no_draft || (route_name && route == DFL_ROUTE_NONE),
                                          drafter_weights, &error)))
    return dfl_cli_fail_error (g_steal_pointer (&error));
  srv.cfg = dfl_target_config (gst_dflash_model_target (srv.model));
  srv.tok = gst_dflash_model_tokenizer (srv.model);
  drafter = gst_dflash_model_drafter (srv.model);
  srv.block = drafter ? dfl_drafter_weights_geometry (drafter)->block : 1;
  if (no_draft)
    route = DFL_ROUTE_NONE;
  else if (!route_name)
    route = drafter ? DFL_ROUTE_COST : DFL_ROUTE_NONE;
  if (dfl_route_needs_drafter (route) && !drafter) {
    g_object_unref (srv.model);
    return dfl_cli_fail (DFL_EXIT_ERROR, "route '%s' needs a drafter, and %s has no "
                         "dflash.safetensors (name one with --drafter)", dfl_route_name (route),
                         target_dir);
  }
  /* a folder whose template is refused still serves /v1/completions; the
   * chat endpoint answers with why */
  if (!(srv.chat = dfl_chat_template_load (target_dir, &srv.chat_error)))
    fprintf (stderr, "dflash: serve: /v1/chat/completions is off: %s\n", srv.chat_error->message);
  srv.model_name = model_name ? g_strdup (model_name) : g_path_get_basename (target_dir);
  srv.max_sequences = max_sequences;
  srv.max_queue = max_queue;
  srv.default_max_tokens = max_tokens;
  srv.metrics = serve_metrics_new (srv.block - 1);
  srv.started = g_get_real_time ();
  srv.requests = g_hash_table_new_full (NULL, NULL, NULL, (GDestroyNotify) request_unref);
  g_mutex_init (&srv.lock);

  q_model = dfl_cli_quoted (target_dir);
  source = g_strdup_printf ("tapsource name=src model=%s serve=true in-flight=%d "
                            "max-new-tokens=%d drafter-weights=%s", q_model, max_sequences,
                            max_tokens,
                            drafter_weights == GST_DFLASH_DRAFTER_WEIGHTS_Q8_0 ? "q8_0" : "stored");
  figures = dfl_cli_route_figures (route_figures, target_dir,
                                  gst_dflash_model_drafter_path (srv.model));
  desc = dfl_cli_describe (route, source, select ? select : "rescore", head_width, figures,
                           backend);
  if (!(srv.pipeline = gst_parse_launch (desc, &error))) {
    fprintf (stderr, "dflash: the pipeline '%s': %s\n", desc, error->message);
    srv.status = DFL_EXIT_ERROR;
    goto out;
  }
  context = gst_dflash_model_context_new (srv.model);
  gst_element_set_context (srv.pipeline, context);
  gst_context_unref (context);
  srv.src = gst_bin_get_by_name (GST_BIN (srv.pipeline), "src");
  e = gst_bin_get_by_name (GST_BIN (srv.pipeline), "text");
  g_signal_connect (e, "handoff", G_CALLBACK (on_text), &srv);
  gst_object_unref (e);
  e = gst_bin_get_by_name (GST_BIN (srv.pipeline), "ids");
  g_signal_connect (e, "handoff", G_CALLBACK (on_ids), &srv);
  gst_object_unref (e);
  srv.loop = g_main_loop_new (NULL, FALSE);
  bus = gst_element_get_bus (srv.pipeline);
  gst_bus_set_sync_handler (bus, (GstBusSyncHandler) bus_sync, &srv, NULL);
  gst_bus_add_watch (bus, (GstBusFunc) bus_watch, &srv);
  gst_object_unref (bus);
  if (gst_element_set_state (srv.pipeline, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE
      || gst_element_get_state (srv.pipeline, NULL, NULL, 60 * GST_SECOND)
         == GST_STATE_CHANGE_FAILURE) {
    /* the bus says why */
    g_main_context_iteration (NULL, FALSE);
    fprintf (stderr, "dflash: serve: the pipeline would not start\n");
    srv.status = DFL_EXIT_ERROR;
    goto out;
  }

  srv.soup = soup_server_new ("server-header", "dflash-serve", NULL);
  soup_server_add_handler (srv.soup, NULL, handle, &srv, NULL);
  addr = g_inet_socket_address_new_from_string (host ? host : "127.0.0.1", port);
  if (!addr) {
    fprintf (stderr, "dflash: serve: --host '%s' is not an IP address\n", host);
    srv.status = DFL_EXIT_USAGE;
    goto out;
  }
  /* the socket is made here for its backlog: GLib's default of 10 drops
   * connections when many clients arrive at once while the main loop is
   * busy (the kernel then resets them) */
  listener = g_socket_new (g_socket_address_get_family (addr), G_SOCKET_TYPE_STREAM,
                           G_SOCKET_PROTOCOL_TCP, &error);
  if (listener) {
    g_socket_set_listen_backlog (listener, LISTEN_BACKLOG);
    if (!g_socket_bind (listener, addr, TRUE, &error) || !g_socket_listen (listener, &error)
        || !soup_server_listen_socket (srv.soup, listener, 0, &error))
      g_clear_object (&listener);
  }
  g_object_unref (addr);
  if (!listener) {
    fprintf (stderr, "dflash: serve: cannot listen on %s:%d: %s\n", host ? host : "127.0.0.1",
             port, error->message);
    srv.status = DFL_EXIT_ERROR;
    goto out;
  }
  g_object_unref (listener);
  uris = soup_server_get_uris (srv.soup);
  if (uris) {
    g_autofree char *uri = g_uri_to_string (uris->data);
    printf ("dflash serve: %s at %s (model '%s', %d sequences at once, %d queued at most)\n",
            target_dir, uri, srv.model_name, max_sequences, max_queue);
    fflush (stdout);
  }
  g_slist_free_full (uris, (GDestroyNotify) g_uri_unref);
  g_unix_signal_add (SIGINT, on_signal, &srv);
  g_unix_signal_add (SIGTERM, on_signal, &srv);
  g_main_loop_run (srv.loop);

out:
  if (srv.soup) {
    soup_server_disconnect (srv.soup);
    g_object_unref (srv.soup);
  }
  if (srv.pipeline) {
    gst_element_set_state (srv.pipeline, GST_STATE_NULL);
    gst_object_unref (srv.pipeline);
  }
  gst_clear_object (&srv.src);
  /* requests whose answers were under way */
  while (g_main_context_iteration (NULL, FALSE))
    ;
  g_hash_table_unref (srv.requests);
  g_mutex_clear (&srv.lock);
  if (srv.loop)
    g_main_loop_unref (srv.loop);
  serve_metrics_free (srv.metrics);
  dfl_chat_template_free (srv.chat);
  g_clear_error (&srv.chat_error);
  g_free (srv.model_name);
  g_object_unref (srv.model);
  return srv.status;
}
