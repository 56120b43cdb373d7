/* gst-dflash — `dflash serve`: the figures /metrics shows. */
#include "serve-metrics.h"

/* upper bounds of the batch sizes' histogram's buckets */
static const guint batch_bounds[] = { 1, 2, 4, 8, 16, 32, 64, 128, 256 };
#define N_BOUNDS G_N_ELEMENTS (batch_bounds)

struct _ServeMetrics {
  GMutex lock;
  GHashTable *requests;      /* "endpoint\tstatus" → count */
  guint64 prompt_tokens, completion_tokens;
  guint64 rounds, round_tokens;
  int positions;
  guint64 *proposed, *accepted;   /* by draft position */
  guint64 batch_buckets[N_BOUNDS + 1];
  guint64 batch_sum;
};

ServeMetrics *
serve_metrics_new (int positions)
{
  ServeMetrics *m = g_new0 (ServeMetrics, 1);

  g_mutex_init (&m->lock);
  m->requests = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  m->positions = MAX (positions, 1);
  m->proposed = g_new0 (guint64, m->positions);
  m->accepted = g_new0 (guint64, m->positions);
  return m;
}

void
serve_metrics_free (ServeMetrics *m)
{
  if (!m)
    return;
  g_hash_table_unref (m->requests);
  g_free (m->proposed);
  g_free (m->accepted);
  g_mutex_clear (&m->lock);
  g_free (m);
}

void
serve_metrics_request (ServeMetrics *m, const char *endpoint, int status)
{
  char *key = g_strdup_printf ("%s\t%d", endpoint, status);
  guint64 *n;

  g_mutex_lock (&m->lock);
  if (!(n = g_hash_table_lookup (m->requests, key))) {
    n = g_new0 (guint64, 1);
    g_hash_table_insert (m->requests, key, n);
  } else {
    g_free (key);
  }
  (*n)++;
  g_mutex_unlock (&m->lock);
}

void
serve_metrics_tokens (ServeMetrics *m, int prompt_tokens, int completion_tokens)
{
  g_mutex_lock (&m->lock);
  m->prompt_tokens += prompt_tokens;
  m->completion_tokens += completion_tokens;
  g_mutex_unlock (&m->lock);
}

void
serve_metrics_round (ServeMetrics *m, int drafted, int accepted, guint batch)
{
  guint b = 0;

  g_mutex_lock (&m->lock);
  m->rounds++;
  m->round_tokens += accepted + 1;
  for (int j = 0; j < MIN (drafted, m->positions); j++) {
    m->proposed[j]++;
    if (j < accepted)
      m->accepted[j]++;
  }
  while (b < N_BOUNDS && batch > batch_bounds[b])
    b++;
  m->batch_buckets[b]++;
  m->batch_sum += batch;
  g_mutex_unlock (&m->lock);
}

char *
serve_metrics_text (ServeMetrics *m, guint running, guint queued)
{
  GString *s = g_string_new (NULL);
  GHashTableIter it;
  gpointer k, v;
  guint64 cumulative = 0;

  g_mutex_lock (&m->lock);
  g_string_append (s, "# HELP dflash_requests_total HTTP requests answered, by endpoint and "
                   "status.\n# TYPE dflash_requests_total counter\n");
  g_hash_table_iter_init (&it, m->requests);
  while (g_hash_table_iter_next (&it, &k, &v)) {
    g_auto (GStrv) parts = g_strsplit (k, "\t", 2);
    g_string_append_printf (s, "dflash_requests_total{endpoint=\"%s\",status=\"%s\"} %"
                            G_GUINT64_FORMAT "\n", parts[0], parts[1], *(guint64 *) v);
  }
  g_string_append_printf (s, "# HELP dflash_prompt_tokens_total Prompt tokens of the requests "
                          "served.\n# TYPE dflash_prompt_tokens_total counter\n"
                          "dflash_prompt_tokens_total %" G_GUINT64_FORMAT "\n", m->prompt_tokens);
  g_string_append_printf (s, "# HELP dflash_completion_tokens_total Tokens generated for the "
                          "requests.\n# TYPE dflash_completion_tokens_total counter\n"
                          "dflash_completion_tokens_total %" G_GUINT64_FORMAT "\n",
                          m->completion_tokens);
  g_string_append_printf (s, "# HELP dflash_rounds_total Rounds verified (one a sequence; a target "
                          "pass verifies the rounds of every sequence that was ready)."
                          "\n# TYPE dflash_rounds_total counter\n"
                          "dflash_rounds_total %" G_GUINT64_FORMAT "\n", m->rounds);
  g_string_append_printf (s, "# HELP dflash_tau Tokens per round (a sequence's part of a target "
                          "pass) over every round so far.\n# TYPE dflash_tau gauge\ndflash_tau %.4f\n",
                          m->rounds ? (double) m->round_tokens / m->rounds : 0.0);
  g_string_append (s, "# HELP dflash_draft_proposed_total Drafts proposed at each position of "
                   "a round.\n# TYPE dflash_draft_proposed_total counter\n");
  for (int j = 0; j < m->positions; j++)
    g_string_append_printf (s, "dflash_draft_proposed_total{position=\"%d\"} %" G_GUINT64_FORMAT
                            "\n", j + 1, m->proposed[j]);
  g_string_append (s, "# HELP dflash_draft_accepted_total Drafts the target accepted at each "
                   "position.\n# TYPE dflash_draft_accepted_total counter\n");
  for (int j = 0; j < m->positions; j++)
    g_string_append_printf (s, "dflash_draft_accepted_total{position=\"%d\"} %" G_GUINT64_FORMAT
                            "\n", j + 1, m->accepted[j]);
  g_string_append (s, "# HELP dflash_acceptance_rate Accepted over proposed at each position."
                   "\n# TYPE dflash_acceptance_rate gauge\n");
  for (int j = 0; j < m->positions; j++)
    g_string_append_printf (s, "dflash_acceptance_rate{position=\"%d\"} %.4f\n", j + 1,
                            m->proposed[j] ? (double) m->accepted[j] / m->proposed[j] : 0.0);
  g_string_append (s, "# HELP dflash_round_sequences Sequences verified in the target pass "
                   "of each round (the verifier's batch sizes, one count a round).\n"
                   "# TYPE dflash_round_sequences histogram\n");
  for (guint b = 0; b <= N_BOUNDS; b++) {
    cumulative += m->batch_buckets[b];
    if (b < N_BOUNDS)
      g_string_append_printf (s, "dflash_round_sequences_bucket{le=\"%u\"} %" G_GUINT64_FORMAT
                              "\n", batch_bounds[b], cumulative);
    else
      g_string_append_printf (s, "dflash_round_sequences_bucket{le=\"+Inf\"} %"
                              G_GUINT64_FORMAT "\n", cumulative);
  }
  g_string_append_printf (s, "dflash_round_sequences_sum %" G_GUINT64_FORMAT "\n"
                          "dflash_round_sequences_count %" G_GUINT64_FORMAT "\n",
                          m->batch_sum, m->rounds);
  g_mutex_unlock (&m->lock);
  g_string_append_printf (s, "# HELP dflash_running_sequences Requests running now.\n"
                          "# TYPE dflash_running_sequences gauge\n"
                          "dflash_running_sequences %u\n", running);
  g_string_append_printf (s, "# HELP dflash_queued_requests Requests waiting for a place.\n"
                          "# TYPE dflash_queued_requests gauge\n"
                          "dflash_queued_requests %u\n", queued);
  return g_string_free (s, FALSE);
}
