/* gst-dflash — the soak: the in-flight pipeline for thousands of rounds.
 *
 *   test-soak [--min-rounds N] [--max-new N] [--stall-seconds S]
 *
 * Four sequences in flight (tapsource in-flight=4) over enough prompts that
 * the verifier runs at least --min-rounds rounds (10000 unless told). It
 * checks:
 *   - resident memory is flat after the warm-up (the first fifth of the
 *     rounds): sampled every 500 rounds and at EOS, it may swing by
 *     PEAK_BOUND_KIB with the sequences in flight and must be back within
 *     END_BOUND_KIB at EOS; the figures are printed either way. Under a
 *     sanitizer they are printed only: its quarantine and shadow memory
 *     grow by design, and its leak checker is the test there.
 *   - every sequence is accounted for: each prompt's tokens arrive on the
 *     verifier's tokens pad and end at max-new-tokens or at an EOS token,
 *     its dflash-round messages are numbered 0, 1, … with none missing, and
 *     the dflash-summary agrees with those counts. A sequence that failed
 *     would have ended the run with an ERROR naming it; there must be none.
 *   - no WARNING or ERROR, on the bus or in the elements' logs.
 * A watchdog fails the run when no round arrives for a minute
 * (--stall-seconds, or DFL_SOAK_STALL_S: under valgrind, where loading the
 * model and the first round take minutes, the 'valgrind' test setup gives
 * it 1800).
 */
#include <glib.h>
#include <gst/gst.h>
#include <stdlib.h>
#include <string.h>

#include "qwen3-config.h"
#include "soak-common.h"

/* What resident memory may grow by after the warm-up. Once every sequence
 * is done (the last sample, at EOS) it must be back within END_BOUND_KIB of
 * what it was after the warm-up: whatever leaks per round or per sequence
 * stays there (500 bytes a round over the 8000 rounds after the warm-up
 * pass it; a leaked round payload, 30 KiB on the test model, within 150
 * rounds). On the way it may swing by PEAK_BOUND_KIB: the four sequences
 * in flight hold KV caches and drafter contexts that grow with their
 * positions, and malloc keeps arenas per streaming thread (about 6 MiB of
 * swing is usual). Smaller leaks are the leak checker's: soak-short in a
 * -Db_sanitize=address build, or valgrind. */
#define END_BOUND_KIB 4096
#define PEAK_BOUND_KIB 16384
#define RSS_EVERY 500

static gint min_rounds = 10000;
static gint max_new = 120;
static gint stall_s = 60;

static const gchar *const pipeline_format =
    "tapsource name=src in-flight=4 max-new-tokens=%d prompts-file=\"%s\" ! queue ! ctxsettle ! "
    "queue ! dflashblock ! selector ! queue ! verifier name=v ! "
    "fakesink name=out sync=false async=false v.tokens ! fakesink name=ids sync=false async=false";

typedef struct {
  GArray *rounds;            /* per sequence: dflash-round messages seen */
  gint64 total_rounds;
  GArray *rss;               /* (round, KiB) pairs */
  GstStructure *summary;
} Tally;

static void
tally_round (Tally *t, const GstStructure *s)
{
  guint seq = 0, round = 0;
  guint *seen;

  g_assert_true (gst_structure_get (s, "sequence", G_TYPE_UINT, &seq, "round", G_TYPE_UINT, &round,
      NULL));
  if (seq >= t->rounds->len)
    g_array_set_size (t->rounds, seq + 1);
  seen = &g_array_index (t->rounds, guint, seq);
  if (round != *seen)
    g_error ("sequence %u: dflash-round %u arrived after %u rounds (a round was lost or repeated)",
             seq, round, *seen);
  (*seen)++;
  t->total_rounds++;
}

static void
sample_rss (Tally *t)
{
  gint64 pair[2] = { t->total_rounds, soak_rss_kib () };

  g_array_append_vals (t->rss, pair, 2);
  g_test_message ("round %" G_GINT64_FORMAT ": VmRSS %" G_GINT64_FORMAT " KiB", pair[0], pair[1]);
}

/* Pop the bus until EOS; fail on ERROR, WARNING or a stall. */
static void
run (GstElement *pipeline, Tally *t, SoakWatchdog *dog)
{
  GstBus *bus = gst_element_get_bus (pipeline);
  gboolean eos = FALSE;

  soak_watchdog_arm (dog, stall_s, "the soak's first round");
  g_assert_cmpint (gst_element_set_state (pipeline, GST_STATE_PLAYING), !=,
                   GST_STATE_CHANGE_FAILURE);
  while (!eos) {
    GstMessage *msg = gst_bus_timed_pop_filtered (bus, GST_CLOCK_TIME_NONE,
        GST_MESSAGE_EOS | GST_MESSAGE_ERROR | GST_MESSAGE_WARNING | GST_MESSAGE_ELEMENT);
    const GstStructure *s = gst_message_get_structure (msg);

    switch (GST_MESSAGE_TYPE (msg)) {
      case GST_MESSAGE_ELEMENT:
        if (gst_structure_has_name (s, "dflash-round")) {
          tally_round (t, s);
          if (t->total_rounds % RSS_EVERY == 0) {
            sample_rss (t);
            soak_watchdog_arm (dog, stall_s, "the soak after round %" G_GINT64_FORMAT,
                               t->total_rounds);
          }
        } else if (gst_structure_has_name (s, "dflash-summary")) {
          g_assert_null (t->summary);
          t->summary = gst_structure_copy (s);
        }
        break;
      case GST_MESSAGE_ERROR:
      case GST_MESSAGE_WARNING: {
        g_autoptr (GError) e = NULL;
        g_autofree gchar *debug = NULL;
        if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR)
          gst_message_parse_error (msg, &e, &debug);
        else
          gst_message_parse_warning (msg, &e, &debug);
        g_error ("%s from %s after %" G_GINT64_FORMAT " rounds: %s (%s)",
                 GST_MESSAGE_TYPE_NAME (msg), GST_MESSAGE_SRC_NAME (msg), t->total_rounds,
                 e->message, debug ? debug : "");
        break;
      }
      default:
        eos = TRUE;
        break;
    }
    gst_message_unref (msg);
  }
  soak_watchdog_disarm (dog);
  sample_rss (t);
  gst_object_unref (bus);
}

static void
check_memory (Tally *t)
{
  gint64 warm_round = min_rounds / 5, base = -1, peak = -1, peak_round = 0, end;

  g_assert_cmpuint (t->rss->len, >=, 2);
  for (guint i = 0; i + 1 < t->rss->len; i += 2) {
    gint64 round = g_array_index (t->rss, gint64, i), kib = g_array_index (t->rss, gint64, i + 1);
    if (round < warm_round)
      continue;
    if (base < 0) {
      base = peak = kib;
      peak_round = round;
    } else if (kib > peak) {
      peak = kib;
      peak_round = round;
    }
  }
  end = g_array_index (t->rss, gint64, t->rss->len - 1);
  g_assert_cmpint (base, >, 0);
  g_test_message ("VmRSS after the warm-up (round %" G_GINT64_FORMAT "): %" G_GINT64_FORMAT
                  " KiB; highest later: %" G_GINT64_FORMAT " KiB at round %" G_GINT64_FORMAT
                  " (%+" G_GINT64_FORMAT " KiB, bound %+d); at EOS: %" G_GINT64_FORMAT
                  " KiB (%+" G_GINT64_FORMAT " KiB, bound %+d)", warm_round, base, peak, peak_round,
                  peak - base, PEAK_BOUND_KIB, end, end - base, END_BOUND_KIB);
  if (soak_sanitized ()) {
    g_test_message ("a sanitizer build: the RSS bounds are not applied (its leak checker is)");
    return;
  }
  if (end - base > END_BOUND_KIB)
    g_error ("resident memory at EOS is %" G_GINT64_FORMAT " KiB above the figure after the "
             "warm-up (bound %d KiB): something leaks per round or per sequence", end - base,
             END_BOUND_KIB);
  if (peak - base > PEAK_BOUND_KIB)
    g_error ("resident memory grew by %" G_GINT64_FORMAT " KiB after the warm-up (bound %d KiB)",
             peak - base, PEAK_BOUND_KIB);
}

static void
check_sequences (Tally *t, SoakOutput *out, guint n_prompts)
{
  DflQwen3Config cfg;
  g_autoptr (GError) error = NULL;
  gint64 tokens = 0, summary_rounds = -1, summary_tokens = -1;
  guint summary_seqs = 0;

  g_assert_true (dfl_qwen3_config_load (&cfg, g_getenv ("DFLASH_MODEL"), &error));
  g_assert_false (out->foreign);
  g_assert_cmpuint (out->per_seq->len, ==, n_prompts);
  for (guint i = 0; i < n_prompts; i++) {
    GArray *ids = g_ptr_array_index (out->per_seq, i);
    gint last;
    if (!ids || ids->len == 0)
      g_error ("sequence %u (prompt %u) was dropped: no tokens reached the tokens pad", i, i + 1);
    last = g_array_index (ids, gint, ids->len - 1);
    for (guint j = 0; j + 1 < ids->len; j++)
      if (dfl_qwen3_config_is_eos (&cfg, g_array_index (ids, gint, j)))
        g_error ("sequence %u went on after an EOS token at %u", i, j);
    if ((gint) ids->len > max_new)
      g_error ("sequence %u emitted %u tokens, max-new-tokens is %d", i, ids->len, max_new);
    if ((gint) ids->len < max_new && !dfl_qwen3_config_is_eos (&cfg, last))
      g_error ("sequence %u stopped after %u tokens (max-new-tokens %d) without an EOS token: "
               "it was cut short", i, ids->len, max_new);
    tokens += ids->len;
  }
  g_assert_nonnull (t->summary);
  g_assert_true (gst_structure_get (t->summary, "sequences", G_TYPE_UINT, &summary_seqs,
      "rounds", G_TYPE_INT64, &summary_rounds, "new-tokens", G_TYPE_INT64, &summary_tokens, NULL));
  g_test_message ("%u sequences, %" G_GINT64_FORMAT " rounds, %" G_GINT64_FORMAT " tokens",
                  n_prompts, t->total_rounds, tokens);
  g_assert_cmpuint (summary_seqs, ==, n_prompts);
  g_assert_cmpint (summary_rounds, ==, t->total_rounds);
  g_assert_cmpint (summary_tokens, ==, tokens);
  if (t->total_rounds < min_rounds)
    g_error ("the soak ran %" G_GINT64_FORMAT " rounds, fewer than the %d it is for: "
             "give it more prompts", t->total_rounds, min_rounds);
}

static void
test_soak (void)
{
  /* rounds per sequence are about its tokens where the drafter is rarely
   * right (the test model's random sidecar); a fifth more prompts covers
   * the sequences an EOS ends early */
  guint n_prompts = (guint) ((min_rounds * 6 / 5 + max_new - 1) / max_new);
  g_autofree gchar *prompts = soak_prompts_file (n_prompts, 0);
  g_autofree gchar *description = g_strdup_printf (pipeline_format, max_new, prompts);
  g_autoptr (GError) error = NULL;
  GstElement *pipeline = gst_parse_launch (description, &error);
  SoakOutput *out = soak_output_new ();
  SoakWatchdog *dog = soak_watchdog_new ();
  Tally t = { 0 };
  g_autofree gchar *text = NULL, *last = NULL;
  gint64 t0 = g_get_monotonic_time ();

  g_assert_no_error (error);
  t.rounds = g_array_new (FALSE, TRUE, sizeof (guint));
  t.rss = g_array_new (FALSE, FALSE, sizeof (gint64));
  soak_output_attach (out, pipeline);
  g_test_message ("%u prompts, max-new-tokens %d, 4 in flight, at least %d rounds", n_prompts,
                  max_new, min_rounds);
  run (pipeline, &t, dog);
  g_test_message ("%.1f s", (g_get_monotonic_time () - t0) / 1e6);
  g_assert_cmpint (gst_element_set_state (pipeline, GST_STATE_NULL), ==, GST_STATE_CHANGE_SUCCESS);

  text = soak_output_text (out);
  g_assert_cmpuint (strlen (text), >, 0);
  check_sequences (&t, out, n_prompts);
  check_memory (&t);
  if (dfl_test_element_warnings (&last))
    g_error ("%d GST_WARNING/GST_ERROR logs of the elements, the last: %s",
             dfl_test_element_warnings (NULL), last);

  gst_object_unref (pipeline);
  soak_output_free (out);
  soak_watchdog_free (dog);
  g_array_unref (t.rounds);
  g_array_unref (t.rss);
  gst_structure_free (t.summary);
  soak_remove_file (prompts);
}

int
main (int argc, char **argv)
{
  int ret;
  GOptionEntry entries[] = {
    { "min-rounds", 0, 0, G_OPTION_ARG_INT, &min_rounds, "Rounds the soak runs at least", "N" },
    { "max-new", 0, 0, G_OPTION_ARG_INT, &max_new, "max-new-tokens of each prompt", "N" },
    { "stall-seconds", 0, 0, G_OPTION_ARG_INT, &stall_s,
      "Fail when no round arrives for this long (default 60)", "S" },
    { NULL }
  };
  g_autoptr (GOptionContext) options = g_option_context_new (NULL);
  g_autoptr (GError) error = NULL;

  gst_init (&argc, &argv);
  g_test_init (&argc, &argv, NULL);
  if (g_getenv ("DFL_SOAK_STALL_S"))
    stall_s = atoi (g_getenv ("DFL_SOAK_STALL_S"));
  g_option_context_add_main_entries (options, entries, NULL);
  if (!g_option_context_parse (options, &argc, &argv, &error)) {
    g_printerr ("test-soak: %s\n", error->message);
    return 2;
  }
  if (min_rounds < 10 || max_new < 1 || max_new > 400 || stall_s < 1) {
    g_printerr ("test-soak: --min-rounds must be at least 10, --max-new 1 … 400 and "
                "--stall-seconds at least 1, not %d, %d and %d\n", min_rounds, max_new, stall_s);
    return 2;
  }
  dfl_test_watch_element_logs ();
  g_test_add_func ("/soak/in-flight", test_soak);
  ret = g_test_run ();
  gst_deinit ();
  return ret;
}
