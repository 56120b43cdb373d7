/* gst-dflash — tapsource serve=true, the server's engine, through its
 * action signals (GTest, TAP).
 *
 * Requests of different prompts, lengths, seeds and stop ids run together
 * (two in flight, the rest queued); each one's tokens, gathered from the
 * verifier's tokens pad by the id submit-request returned, must be the
 * tokens tapsource gives that prompt alone with the same settings, end at
 * the one buffer marked GST_BUFFER_FLAG_MARKER, and stop at a stop id. A
 * cancelled request leaves nothing running; refused requests return 0.
 * The elements are registered in-process, as `dflash` does.
 */
#include <gst/gst.h>
#include <string.h>

#include "gstdflashelements.h"
#include "verifier-ids.h"

static GstElement *
start (const char *source, DflTestIds *g)
{
  g_autofree char *desc = g_strdup_printf ("%s ! ngramdraft ! verifier name=v ! fakesink sync=false async=false "
      "v.tokens ! fakesink name=ids signal-handoffs=true sync=false async=false", source);
  g_autoptr (GError) error = NULL;
  GstElement *p = gst_parse_launch (desc, &error);
  GstElement *ids;

  g_assert_no_error (error);
  dfl_test_ids_init (g);
  ids = gst_bin_get_by_name (GST_BIN (p), "ids");
  dfl_test_ids_connect (g, ids);
  gst_object_unref (ids);
  g_assert_cmpint (gst_element_set_state (p, GST_STATE_PLAYING), !=, GST_STATE_CHANGE_FAILURE);
  g_assert_cmpint (gst_element_get_state (p, NULL, NULL, 60 * GST_SECOND), ==,
                   GST_STATE_CHANGE_SUCCESS);
  return p;
}

static void
stop (GstElement *p, DflTestIds *g)
{
  gst_element_set_state (p, GST_STATE_NULL);
  gst_object_unref (p);
  dfl_test_ids_clear (g);
}

/* The tokens of one prompt run alone to EOS, as a plain tapsource gives them. */
static GArray *
solo (const int *prompt, int n, int max_new, double temperature, guint64 seed)
{
  GString *list = g_string_new (NULL);
  g_autofree char *source = NULL;
  DflTestIds g;
  GstElement *p;
  GstMessage *msg;
  GArray *ids;

  for (int i = 0; i < n; i++)
    g_string_append_printf (list, "%s%d", i ? "," : "", prompt[i]);
  source = g_strdup_printf ("tapsource tokens=\"%s\" max-new-tokens=%d temperature=%g "
                            "top-p=0.9 seed=%" G_GUINT64_FORMAT, list->str, max_new, temperature,
                            seed);
  g_string_free (list, TRUE);
  p = start (source, &g);
  msg = gst_bus_timed_pop_filtered (GST_ELEMENT_BUS (p), 60 * GST_SECOND,
                                    GST_MESSAGE_EOS | GST_MESSAGE_ERROR);
  g_assert_nonnull (msg);
  g_assert_cmpint (GST_MESSAGE_TYPE (msg), ==, GST_MESSAGE_EOS);
  gst_message_unref (msg);
  ids = g_array_ref (g_hash_table_lookup (g.tokens, GUINT_TO_POINTER (0)));
  stop (p, &g);
  return ids;
}

static guint
submit (GstElement *src, const int *prompt, int n, GstStructure *settings)
{
  g_autoptr (GBytes) b = g_bytes_new (prompt, sizeof (int) * n);
  guint id = 0;

  g_signal_emit_by_name (src, "submit-request", b, settings, &id);
  if (settings)
    gst_structure_free (settings);
  return id;
}

static gboolean
all_marked (DflTestIds *g, const guint *ids, int n)
{
  gboolean all = TRUE;

  g_mutex_lock (&g->lock);
  for (int i = 0; i < n; i++)
    all = all && g_hash_table_contains (g->marked, GUINT_TO_POINTER (ids[i]));
  g_mutex_unlock (&g->lock);
  return all;
}

static guint
prop (GstElement *src, const char *name)
{
  guint v;

  g_object_get (src, name, &v, NULL);
  return v;
}

static void
test_requests (void)
{
  static const int prompts[4][5] = {
    { 10, 20, 30, 40, 50 }, { 7, 8, 9 }, { 300, 301, 302, 303 }, { 5, 5, 5, 5, 5 },
  };
  static const int lens[4] = { 5, 3, 4, 5 };
  static const int max_new[4] = { 12, 30, 7, 20 };
  static const double temps[4] = { 0.0, 0.8, 0.0, 0.7 };
  DflTestIds g;
  GstElement *p = start ("tapsource name=src serve=true in-flight=2 max-new-tokens=16", &g);
  GstElement *src = gst_bin_get_by_name (GST_BIN (p), "src");
  GArray *want[4];
  guint ids[5];
  int stop_id = -1;
  gint64 deadline;

  for (int i = 0; i < 4; i++)
    want[i] = solo (prompts[i], lens[i], max_new[i], temps[i], 100 + i);
  /* the fifth: the first prompt again, ending at its sixth token's id (or
   * where that id comes first) */
  stop_id = g_array_index (want[0], int, 5);
  for (int i = 0; i < 4; i++)
    ids[i] = submit (src, prompts[i], lens[i],
                     gst_structure_new ("r", "max-tokens", G_TYPE_INT, max_new[i],
                                        "temperature", G_TYPE_DOUBLE, temps[i],
                                        "top-p", G_TYPE_DOUBLE, 0.9,
                                        "seed", G_TYPE_UINT64, (guint64) (100 + i), NULL));
  {
    g_autoptr (GBytes) stops = g_bytes_new (&stop_id, sizeof stop_id);
    ids[4] = submit (src, prompts[0], lens[0],
                     gst_structure_new ("r", "max-tokens", G_TYPE_INT, max_new[0],
                                        "top-p", G_TYPE_DOUBLE, 0.9,
                                        "seed", G_TYPE_UINT64, (guint64) 100,
                                        "stop-ids", G_TYPE_BYTES, stops, NULL));
  }
  for (int i = 0; i < 5; i++) {
    g_assert_cmpuint (ids[i], !=, 0);
    for (int j = 0; j < i; j++)
      g_assert_cmpuint (ids[i], !=, ids[j]);
  }
  deadline = g_get_monotonic_time () + 120 * G_USEC_PER_SEC;
  while (!all_marked (&g, ids, 5) && g_get_monotonic_time () < deadline)
    g_usleep (10000);
  g_assert_true (all_marked (&g, ids, 5));
  for (int i = 0; i < 5; i++) {
    GArray *got = g_hash_table_lookup (g.tokens, GUINT_TO_POINTER (ids[i]));
    GArray *w = want[i < 4 ? i : 0];
    guint n = w->len;
    if (i == 4) {
      /* the stop id ends the fifth where it first comes */
      for (n = 0; g_array_index (w, int, n) != stop_id; n++)
        ;
      n++;
    }
    g_assert_cmpuint (dfl_test_ids_marked (&g, ids[i]), ==, 1);
    g_assert_cmpuint (got->len, ==, n);
    g_assert_cmpmem (got->data, sizeof (int) * n, w->data, sizeof (int) * n);
  }
  deadline = g_get_monotonic_time () + 30 * G_USEC_PER_SEC;
  while (prop (src, "running") && g_get_monotonic_time () < deadline)
    g_usleep (10000);
  g_assert_cmpuint (prop (src, "running"), ==, 0);
  g_assert_cmpuint (prop (src, "queued"), ==, 0);
  for (int i = 0; i < 4; i++)
    g_array_unref (want[i]);
  gst_object_unref (src);
  stop (p, &g);
}

static void
test_cancel_and_refusals (void)
{
  static const int prompt[] = { 1, 2, 3 }, outside[] = { 1, 999999 };
  DflTestIds g;
  GstElement *p = start ("tapsource name=src serve=true in-flight=1 max-new-tokens=400", &g);
  GstElement *src = gst_bin_get_by_name (GST_BIN (p), "src");
  gboolean found = FALSE;
  guint a, b;
  gint64 deadline;

  /* refused: no tokens, a token outside the vocabulary, settings of the
   * wrong type or range, no room in the context, an unknown setting */
  g_assert_cmpuint (submit (src, prompt, 0, NULL), ==, 0);
  g_assert_cmpuint (submit (src, outside, 2, NULL), ==, 0);
  g_assert_cmpuint (submit (src, prompt, 3, gst_structure_new ("r", "max-tokens", G_TYPE_STRING,
                                                               "5", NULL)), ==, 0);
  g_assert_cmpuint (submit (src, prompt, 3, gst_structure_new ("r", "temperature", G_TYPE_DOUBLE,
                                                               -1.0, NULL)), ==, 0);
  g_assert_cmpuint (submit (src, prompt, 3, gst_structure_new ("r", "max-tokens", G_TYPE_INT,
                                                               100000, NULL)), ==, 0);
  g_assert_cmpuint (submit (src, prompt, 3, gst_structure_new ("r", "max-token", G_TYPE_INT,
                                                               5, NULL)), ==, 0);
  /* one runs, one waits; both cancelled */
  a = submit (src, prompt, 3, NULL);
  b = submit (src, prompt, 3, NULL);
  g_assert_cmpuint (a, !=, 0);
  g_assert_cmpuint (b, !=, 0);
  deadline = g_get_monotonic_time () + 30 * G_USEC_PER_SEC;
  while (prop (src, "running") == 0 && g_get_monotonic_time () < deadline)
    g_usleep (1000);
  g_assert_cmpuint (prop (src, "queued"), <=, 1);
  g_signal_emit_by_name (src, "cancel-request", b, &found);
  g_assert_true (found);
  g_assert_cmpuint (prop (src, "queued"), ==, 0);
  g_signal_emit_by_name (src, "cancel-request", a, &found);
  g_assert_true (found);
  g_signal_emit_by_name (src, "cancel-request", 12345u, &found);
  g_assert_false (found);
  deadline = g_get_monotonic_time () + 30 * G_USEC_PER_SEC;
  while (prop (src, "running") && g_get_monotonic_time () < deadline)
    g_usleep (1000);
  g_assert_cmpuint (prop (src, "running"), ==, 0);
  /* the cancelled request never reached its 400 tokens */
  g_mutex_lock (&g.lock);
  {
    GArray *got = g_hash_table_lookup (g.tokens, GUINT_TO_POINTER (a));
    g_assert_true (!got || got->len < 400);
  }
  g_mutex_unlock (&g.lock);
  gst_object_unref (src);
  stop (p, &g);

  /* a tapsource that does not serve refuses requests */
  {
    DflTestIds h;
    GstElement *q = start ("tapsource name=src max-new-tokens=2", &h);
    GstElement *s = gst_bin_get_by_name (GST_BIN (q), "src");
    g_assert_cmpuint (submit (s, prompt, 3, NULL), ==, 0);
    gst_object_unref (s);
    stop (q, &h);
  }
}

int
main (int argc, char **argv)
{
  gst_init (&argc, &argv);
  gst_plugin_register_static (GST_VERSION_MAJOR, GST_VERSION_MINOR, "dflash", "test",
                              gst_dflash_elements_register, "0", "LGPL", "gst-dflash",
                              "gst-dflash", "https://example.invalid/gst-dflash");
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/serve-source/requests", test_requests);
  g_test_add_func ("/serve-source/cancel-and-refusals", test_cancel_and_refusals);
  return g_test_run ();
}
