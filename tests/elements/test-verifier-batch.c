/* gst-dflash — tests: the verifier verifies the rounds of many sequences in
 * one target pass.
 *
 * A serving tapsource keeps 4 or 8 requests in flight, of different prompt
 * lengths and max-tokens, greedy and sampled, plain decoding and the
 * drafter's block; every request's tokens (from the verifier's tokens pad,
 * by its id) must be bitwise what `dflash generate` gives its prompt alone
 * with the same settings. Short requests end while long ones run; all must
 * finish. The verifier's max-batch property must show passes of more than
 * one sequence, so a verifier that silently went back to one sequence a
 * pass fails here; with ctxsettle, dflashblock and selector batch-limit=8,
 * so must theirs (the drafter's settles, blocks and selections of several
 * sequences in one pass).
 */
#include <gst/gst.h>
#include <string.h>

#include "gstdflashelements.h"
#include "verifier-ids.h"

/* `dflash generate`'s tokens for one prompt alone: its --json's new_tokens. */
static GArray *
solo (const int *prompt, int n, int max_new, double temperature, guint64 seed)
{
  GString *list = g_string_new (NULL);
  g_autofree char *n_arg = g_strdup_printf ("%d", max_new);
  g_autofree char *t_arg = g_strdup_printf ("%g", temperature);
  g_autofree char *s_arg = g_strdup_printf ("%" G_GUINT64_FORMAT, seed);
  g_autofree char *out = NULL, *err = NULL;
  g_autoptr (GError) error = NULL;
  GArray *ids = g_array_new (FALSE, FALSE, sizeof (int));
  const char *p;
  int status = 0;

  for (int i = 0; i < n; i++)
    g_string_append_printf (list, "%s%d", i ? "," : "", prompt[i]);
  {
    const char *argv[] = { g_getenv ("DFLASH"), "generate", "--target", g_getenv ("DFLASH_MODEL"),
                           "--no-draft", "--tokens", list->str, "--max-new", n_arg,
                           "--temperature", t_arg, "--top-p", "0.9", "--seed", s_arg, "--json",
                           NULL };
    g_assert_nonnull (argv[0]);
    g_assert_nonnull (argv[3]);
    g_assert_true (g_spawn_sync (NULL, (char **) argv, NULL, G_SPAWN_DEFAULT, NULL, NULL, &out,
                                 &err, &status, &error));
  }
  g_assert_no_error (error);
  if (!g_spawn_check_wait_status (status, NULL))
    g_error ("dflash generate failed: %s", err);
  g_string_free (list, TRUE);
  p = strstr (out, "\"new_tokens\":[");
  g_assert_nonnull (p);
  p += strlen ("\"new_tokens\":[");
  while (*p && *p != ']') {
    char *end;
    int id = (int) strtol (p, &end, 10);
    g_assert_true (end != p);
    g_array_append_val (ids, id);
    p = *end == ',' ? end + 1 : end;
  }
  g_assert_cmpint (ids->len, >, 0);
  return ids;
}

static guint
submit (GstElement *src, const int *prompt, int n, int max_new, double temperature, guint64 seed)
{
  g_autoptr (GBytes) b = g_bytes_new (prompt, sizeof (int) * n);
  GstStructure *settings = gst_structure_new ("r", "max-tokens", G_TYPE_INT, max_new,
                                              "temperature", G_TYPE_DOUBLE, temperature,
                                              "top-p", G_TYPE_DOUBLE, 0.9,
                                              "seed", G_TYPE_UINT64, seed, NULL);
  guint id = 0;

  g_signal_emit_by_name (src, "submit-request", b, settings, &id);
  gst_structure_free (settings);
  g_assert_cmpuint (id, !=, 0);
  return id;
}

/* `n` requests through `stages` and a verifier with `verifier_props`, with
 * `in_flight` of them running at once; where `stages` names a dflashblock
 * "b", a ctxsettle "c" or a selector "s", its passes must have taken
 * several sequences together. */
static void
check_batched (const char *stages, const char *verifier_props, int in_flight, int n)
{
  g_autofree char *desc = g_strdup_printf ("tapsource name=src serve=true in-flight=%d "
      "max-new-tokens=16 ! %s ! verifier name=v %s ! fakesink sync=false async=false "
      "v.tokens ! fakesink name=ids signal-handoffs=true sync=false async=false", in_flight, stages,
      verifier_props);
  g_autoptr (GError) error = NULL;
  GstElement *p = gst_parse_launch (desc, &error), *src, *v, *sink;
  DflTestIds g;
  g_autofree guint *ids = g_new (guint, n);
  g_autofree int *max_new = g_new (int, n);
  g_autofree int *lens = g_new (int, n);
  g_autofree double *temps = g_new (double, n);
  int prompts[16][8];
  GArray **want = g_new (GArray *, n);
  guint max_batch = 0;
  guint64 batches = 0;
  gint64 deadline;

  g_assert_no_error (error);
  g_assert_cmpint (n, <=, 16);
  for (int i = 0; i < n; i++) {
    /* prompts of 1 to 8 tokens; one request in every four short, so it
     * ends while the others run; every other one sampled */
    lens[i] = 1 + (i * 3) % 8;
    for (int j = 0; j < lens[i]; j++)
      prompts[i][j] = (17 * i + 31 * j + 5) % 1000;
    max_new[i] = i % 4 == 1 ? 3 : 20 + 7 * (i % 5);
    temps[i] = i % 2 ? 0.8 : 0.0;
    want[i] = solo (prompts[i], lens[i], max_new[i], temps[i], 200 + i);
  }
  dfl_test_ids_init (&g);
  src = gst_bin_get_by_name (GST_BIN (p), "src");
  v = gst_bin_get_by_name (GST_BIN (p), "v");
  sink = gst_bin_get_by_name (GST_BIN (p), "ids");
  dfl_test_ids_connect (&g, sink);
  g_assert_cmpint (gst_element_set_state (p, GST_STATE_PAUSED), !=, GST_STATE_CHANGE_FAILURE);
  g_assert_cmpint (gst_element_get_state (p, NULL, NULL, 60 * GST_SECOND), ==,
                   GST_STATE_CHANGE_SUCCESS);
  for (int i = 0; i < n; i++)
    ids[i] = submit (src, prompts[i], lens[i], max_new[i], temps[i], 200 + i);
  g_assert_cmpint (gst_element_set_state (p, GST_STATE_PLAYING), !=, GST_STATE_CHANGE_FAILURE);

  deadline = g_get_monotonic_time () + 120 * G_USEC_PER_SEC;
  for (;;) {
    g_autoptr (GstMessage) msg = gst_bus_timed_pop_filtered (GST_ELEMENT_BUS (p), 10 * GST_MSECOND,
                                                             GST_MESSAGE_ERROR);
    guint ended;
    if (msg) {
      g_autoptr (GError) e = NULL;
      gst_message_parse_error (msg, &e, NULL);
      g_error ("%s: %s", GST_OBJECT_NAME (GST_MESSAGE_SRC (msg)), e->message);
    }
    g_mutex_lock (&g.lock);
    ended = g.n_ended;
    g_mutex_unlock (&g.lock);
    if (ended == (guint) n || g_get_monotonic_time () > deadline)
      break;
  }
  /* every request ended: a short one ending did not stall the rest */
  g_assert_cmpuint (g.n_ended, ==, n);
  g_assert_cmpint (g.first_end_us, <, g.last_end_us);
  for (int i = 0; i < n; i++) {
    GArray *got = g_hash_table_lookup (g.tokens, GUINT_TO_POINTER (ids[i]));
    g_assert_nonnull (got);
    if (got->len != want[i]->len
        || memcmp (got->data, want[i]->data, sizeof (int) * got->len) != 0)
      g_error ("%s, in-flight=%d: request %d (prompt of %d, max-tokens %d, temperature %g) gave "
               "%u tokens unlike its %u alone", stages, in_flight, i, lens[i], max_new[i],
               temps[i], got->len, want[i]->len);
  }
  /* the passes verified several sequences at once */
  g_object_get (v, "max-batch", &max_batch, "batches", &batches, NULL);
  g_test_message ("%s, in-flight=%d: %" G_GUINT64_FORMAT " passes, the largest of %u rounds",
                  stages, in_flight, batches, max_batch);
  g_assert_cmpuint (max_batch, >=, 2);
  g_assert_cmpuint (max_batch, <=, in_flight);
  for (const char *const *name = (const char *const[]) { "b", "c", "s", NULL }; *name; name++) {
    GstElement *b = gst_bin_get_by_name (GST_BIN (p), *name);
    if (b) {
      guint blocks_max = 0;
      guint64 block_batches = 0;
      int limit = 0;
      g_object_get (b, "max-batch", &blocks_max, "batches", &block_batches, "batch-limit", &limit,
                    NULL);
      g_test_message ("%s: %" G_GUINT64_FORMAT " passes of several sequences, the largest "
                      "of %u (batch-limit %d)", GST_OBJECT_NAME (b), block_batches, blocks_max,
                      limit);
      g_assert_cmpuint (blocks_max, >=, 2);
      g_assert_cmpuint (blocks_max, <=, (guint) MIN (limit, in_flight));
      gst_object_unref (b);
    }
  }

  gst_element_set_state (p, GST_STATE_NULL);
  /* each request ended once, to the last buffer the pipeline gave */
  for (int i = 0; i < n; i++)
    g_assert_cmpuint (dfl_test_ids_marked (&g, ids[i]), ==, 1);
  for (int i = 0; i < n; i++)
    g_array_unref (want[i]);
  g_free (want);
  gst_object_unref (sink);
  gst_object_unref (v);
  gst_object_unref (src);
  gst_object_unref (p);
  dfl_test_ids_clear (&g);
}

static void
test_plain_4 (void)
{
  check_batched ("queue", "", 4, 6);
}

static void
test_plain_8 (void)
{
  check_batched ("queue", "", 8, 12);
}

static void
test_block_4 (void)
{
  check_batched ("queue ! ctxsettle ! queue ! dflashblock ! selector ! queue", "", 4, 6);
}

static void
test_block_8 (void)
{
  check_batched ("queue ! ctxsettle ! queue ! dflashblock ! selector ! queue", "", 8, 12);
}

/* the drafter's settles and blocks of several sequences in one pass too */
static void
test_blocks_batched_8 (void)
{
  check_batched ("queue ! ctxsettle name=c batch-limit=8 ! queue ! dflashblock name=b "
                 "batch-limit=8 ! queue ! selector name=s batch-limit=8 ! queue", "", 8, 12);
}

/* a pass that never waits for the last pass's sequences, and one that
 * waits up to four passes' time for them: the same tokens */
static void
test_plain_8_no_wait (void)
{
  check_batched ("queue", "batch-wait=0", 8, 12);
}

static void
test_block_8_long_wait (void)
{
  check_batched ("queue ! ctxsettle ! queue ! dflashblock ! selector ! queue", "batch-wait=4", 8,
                 12);
}

int
main (int argc, char **argv)
{
  gst_init (&argc, &argv);
  gst_plugin_register_static (GST_VERSION_MAJOR, GST_VERSION_MINOR, "dflash", "test",
                              gst_dflash_elements_register, "0", "LGPL", "gst-dflash",
                              "gst-dflash", "https://example.invalid/gst-dflash");
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/verifier-batch/plain-4", test_plain_4);
  g_test_add_func ("/verifier-batch/plain-8", test_plain_8);
  g_test_add_func ("/verifier-batch/block-4", test_block_4);
  g_test_add_func ("/verifier-batch/block-8", test_block_8);
  g_test_add_func ("/verifier-batch/blocks-batched-8", test_blocks_batched_8);
  g_test_add_func ("/verifier-batch/plain-8-no-wait", test_plain_8_no_wait);
  g_test_add_func ("/verifier-batch/block-8-long-wait", test_block_8_long_wait);
  return g_test_run ();
}
