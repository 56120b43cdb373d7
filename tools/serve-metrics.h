/* gst-dflash — `dflash serve`: the figures /metrics shows, in Prometheus's
 * text format.
 *
 * Requests by endpoint and status, prompt and completion tokens, and the
 * rounds the verifier posts (its dflash-round messages, counted in the
 * thread that posts them): τ (tokens per target pass), acceptance by
 * draft position, and how many sequences the target pass of each round
 * verified (the verifier's batch).
 * Thread-safe.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

typedef struct _ServeMetrics ServeMetrics;

ServeMetrics *serve_metrics_new (int positions);
void serve_metrics_free (ServeMetrics *m);

void serve_metrics_request (ServeMetrics *m, const char *endpoint, int status);
void serve_metrics_tokens (ServeMetrics *m, int prompt_tokens, int completion_tokens);
/* One verified round: `drafted` proposed, `accepted` of them kept, in a
 * target pass of `batch` sequences' rounds. */
void serve_metrics_round (ServeMetrics *m, int drafted, int accepted, guint batch);

/* The exposition text; `running` and `queued` are the gauges of now. */
char *serve_metrics_text (ServeMetrics *m, guint running, guint queued);

G_END_DECLS
