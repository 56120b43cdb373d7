/* gst-dflash — the fault loop: state changes, flushes and EOS mid-round.
 *
 *   test-faults SHAPE [--iterations N] [--fault-seed S]
 *
 * SHAPE is "in-flight" (four sequences, queues between the stages) or
 * "routed" (tee, both drafters, the router passing rounds on from both branches' threads). Each iteration
 * lets the loop run a random number of rounds and a random part of one
 * more, then does one of: to NULL and back to PLAYING, to READY and back,
 * to PAUSED (waiting for the preroll) and back, a flushing seek,
 * flush-start/flush-stop sent to tapsource, EOS sent to the pipeline. After
 * it the loop must make progress again (a round, or EOS) with no ERROR and
 * no WARNING on the bus. Every 25 iterations, and at the end, a clean run
 * from NULL must give the text of the first clean run. The seed is printed
 * (--fault-seed or DFL_FAULT_SEED repeats a run). A watchdog thread fails the
 * test when a state change or a wait for progress takes more than
 * STEP_S seconds: a hang, not a slow machine.
 */
#include <glib.h>
#include <gst/gst.h>
#include <stdlib.h>
#include <string.h>

#include "soak-common.h"

/* a step takes milliseconds; a sanitizer build ten times that */
#define STEP_S 30
#define CHECK_EVERY 25

static gint iterations = 200;
static gchar *seed_arg;

static const gchar *const in_flight_shape =
    "tapsource name=src in-flight=4 max-new-tokens=24 prompts-file=\"%s\" ! queue ! ctxsettle ! "
    "queue ! dflashblock ! selector ! queue ! verifier name=v ! fakesink name=out sync=false";
static const gchar *const routed_shape =
    "tapsource name=src in-flight=2 max-new-tokens=24 prompts-file=\"%s\" ! tee name=t ! queue ! "
    "ctxsettle ! dflashblock ! selector ! router name=r policy=match ! verifier name=v ! "
    "fakesink name=out sync=false  t. ! queue ! ngramdraft ! r.chain";

typedef enum {
  FAULT_NULL,
  FAULT_READY,
  FAULT_PAUSED,
  FAULT_FLUSH_SEEK,
  FAULT_FLUSH_EVENTS,
  FAULT_EOS,
  N_FAULTS
} Fault;

static const gchar *const fault_names[] = { "NULL and back", "READY and back", "PAUSED and back",
  "a flushing seek", "flush-start/flush-stop on tapsource", "EOS" };

typedef struct {
  GstElement *pipeline;
  GstElement *src;
  GstBus *bus;
  SoakOutput *out;
  SoakWatchdog *dog;
  gint64 rounds;             /* dflash-round messages seen */
  gboolean eos;              /* EOS seen since the last start */
  gboolean running;          /* started since the last NULL */
  gint iteration;
  guint32 seed;
} Loop;

/* Handle what is on the bus, waiting at most `timeout_us` for the first
 * message; ERROR and WARNING fail the test. */
static void
drain (Loop *l, gint64 timeout_us)
{
  GstMessage *msg;
  GstClockTime wait = timeout_us * GST_USECOND;

  while ((msg = gst_bus_timed_pop_filtered (l->bus, wait,
              GST_MESSAGE_EOS | GST_MESSAGE_ERROR | GST_MESSAGE_WARNING | GST_MESSAGE_ELEMENT))) {
    const GstStructure *s = gst_message_get_structure (msg);
    wait = 0;
    switch (GST_MESSAGE_TYPE (msg)) {
      case GST_MESSAGE_ELEMENT:
        if (gst_structure_has_name (s, "dflash-round"))
          l->rounds++;
        break;
      case GST_MESSAGE_EOS:
        l->eos = TRUE;
        break;
      default: {
        g_autoptr (GError) e = NULL;
        g_autofree gchar *debug = NULL;
        if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR)
          gst_message_parse_error (msg, &e, &debug);
        else
          gst_message_parse_warning (msg, &e, &debug);
        g_error ("iteration %d (seed %u): %s from %s: %s (%s)", l->iteration, l->seed,
                 GST_MESSAGE_TYPE_NAME (msg), GST_MESSAGE_SRC_NAME (msg), e->message,
                 debug ? debug : "");
      }
    }
    gst_message_unref (msg);
  }
}

static void
set_state (Loop *l, GstState state, const gchar *why)
{
  GstStateChangeReturn ret;

  soak_watchdog_arm (l->dog, STEP_S, "iteration %d (seed %u): %s: to %s", l->iteration, l->seed,
                     why, gst_element_state_get_name (state));
  ret = gst_element_set_state (l->pipeline, state);
  if (ret == GST_STATE_CHANGE_FAILURE) {
    drain (l, 0);
    g_error ("iteration %d (seed %u): %s: the change to %s failed", l->iteration, l->seed, why,
             gst_element_state_get_name (state));
  }
  if (ret == GST_STATE_CHANGE_ASYNC) {
    /* a sink prerolls on the first text; the watchdog ends a wait that never does */
    ret = gst_element_get_state (l->pipeline, NULL, NULL, GST_CLOCK_TIME_NONE);
    if (ret == GST_STATE_CHANGE_FAILURE) {
      drain (l, 0);
      g_error ("iteration %d (seed %u): %s: the change to %s failed on the way", l->iteration,
               l->seed, why, gst_element_state_get_name (state));
    }
  }
  soak_watchdog_disarm (l->dog);
  if (state == GST_STATE_NULL) {
    l->running = FALSE;
    l->eos = FALSE;
  } else if (state == GST_STATE_READY) {
    l->eos = FALSE;
  } else {
    l->running = TRUE;
  }
}

/* Until `more` rounds went by or EOS. */
static void
wait_rounds (Loop *l, gint64 more, const gchar *why)
{
  gint64 until = l->rounds + more;

  soak_watchdog_arm (l->dog, STEP_S, "iteration %d (seed %u): %s: no round and no EOS",
                     l->iteration, l->seed, why);
  while (l->rounds < until && !l->eos)
    drain (l, 100 * 1000);
  soak_watchdog_disarm (l->dog);
}

static void
do_fault (Loop *l, Fault f, GRand *rand)
{
  const gchar *name = fault_names[f];

  switch (f) {
    case FAULT_NULL:
      set_state (l, GST_STATE_NULL, name);
      set_state (l, GST_STATE_PLAYING, name);
      break;
    case FAULT_READY:
      set_state (l, GST_STATE_READY, name);
      set_state (l, GST_STATE_PLAYING, name);
      break;
    case FAULT_PAUSED:
      set_state (l, GST_STATE_PAUSED, name);
      g_usleep (g_rand_int_range (rand, 0, 5000));
      set_state (l, GST_STATE_PLAYING, name);
      break;
    case FAULT_FLUSH_SEEK:
      soak_watchdog_arm (l->dog, STEP_S, "iteration %d (seed %u): %s", l->iteration, l->seed, name);
      /* a generator need not seek; asked to, it must not wedge the loop */
      gst_element_seek_simple (l->pipeline, GST_FORMAT_TIME, GST_SEEK_FLAG_FLUSH, 0);
      soak_watchdog_disarm (l->dog);
      break;
    case FAULT_FLUSH_EVENTS:
      soak_watchdog_arm (l->dog, STEP_S, "iteration %d (seed %u): %s", l->iteration, l->seed, name);
      gst_element_send_event (l->src, gst_event_new_flush_start ());
      g_usleep (g_rand_int_range (rand, 0, 2000));
      gst_element_send_event (l->src, gst_event_new_flush_stop (TRUE));
      soak_watchdog_disarm (l->dog);
      break;
    case FAULT_EOS:
      soak_watchdog_arm (l->dog, STEP_S, "iteration %d (seed %u): %s", l->iteration, l->seed, name);
      gst_element_send_event (l->pipeline, gst_event_new_eos ());
      soak_watchdog_disarm (l->dog);
      /* the EOS must come out of the sink */
      wait_rounds (l, G_MAXINT64 / 2, "after EOS was sent");
      break;
    default:
      g_assert_not_reached ();
  }
}

/* From NULL to EOS with nothing in the way: the text of a clean run. */
static gchar *
clean_run (Loop *l)
{
  set_state (l, GST_STATE_NULL, "the clean run");
  soak_output_clear (l->out);
  set_state (l, GST_STATE_PLAYING, "the clean run");
  wait_rounds (l, G_MAXINT64 / 2, "the clean run");
  set_state (l, GST_STATE_NULL, "the clean run");
  return soak_output_text (l->out);
}

static void
test_faults (gconstpointer data)
{
  const gchar *shape = data;
  g_autofree gchar *prompts = soak_prompts_file (6, 3);
  g_autofree gchar *description = g_strdup_printf (shape, prompts);
  g_autoptr (GError) error = NULL;
  g_autofree gchar *want = NULL;
  GRand *rand;
  guint counts[N_FAULTS] = { 0 };
  gchar *last = NULL;
  gint n_warnings;
  Loop l = { 0 };
  gint64 t0 = g_get_monotonic_time ();

  if (!seed_arg && g_getenv ("DFL_FAULT_SEED"))
    seed_arg = g_strdup (g_getenv ("DFL_FAULT_SEED"));
  l.seed = seed_arg ? (guint32) g_ascii_strtoull (seed_arg, NULL, 10) : g_random_int ();
  g_test_message ("seed %u (--fault-seed %u repeats this run)", l.seed, l.seed);
  rand = g_rand_new_with_seed (l.seed);
  l.pipeline = gst_parse_launch (description, &error);
  g_assert_no_error (error);
  l.src = gst_bin_get_by_name (GST_BIN (l.pipeline), "src");
  l.bus = gst_element_get_bus (l.pipeline);
  l.out = soak_output_new ();
  l.dog = soak_watchdog_new ();
  soak_output_attach (l.out, l.pipeline);

  l.iteration = -1;
  want = clean_run (&l);
  g_assert_cmpuint (strlen (want), >, 0);
  g_test_message ("a clean run: %" G_GINT64_FORMAT " rounds, %" G_GSIZE_FORMAT " bytes of text",
                  l.rounds, strlen (want));

  for (l.iteration = 0; l.iteration < iterations; l.iteration++) {
    Fault f = g_rand_int_range (rand, 0, N_FAULTS);

    if (!l.running || l.eos) {
      if (l.running)
        set_state (&l, GST_STATE_NULL, "a restart after EOS");
      set_state (&l, GST_STATE_PLAYING, "a restart");
    }
    /* somewhere in a round: a few whole rounds, then part of one (a round
     * takes a few milliseconds on the test model) */
    wait_rounds (&l, g_rand_int_range (rand, 0, 30), "before the fault");
    g_usleep (g_rand_int_range (rand, 0, 4000));
    drain (&l, 0);
    do_fault (&l, f, rand);
    counts[f]++;
    /* and the loop goes on: a round, or EOS */
    if (l.running)
      wait_rounds (&l, 1, fault_names[f]);
    if ((l.iteration + 1) % CHECK_EVERY == 0 || l.iteration + 1 == iterations) {
      g_autofree gchar *text = clean_run (&l);
      if (g_strcmp0 (text, want) != 0)
        g_error ("iteration %d (seed %u): a clean run after the faults gives another text "
                 "(%" G_GSIZE_FORMAT " bytes, the first clean run %" G_GSIZE_FORMAT ")",
                 l.iteration, l.seed, strlen (text), strlen (want));
    }
  }
  set_state (&l, GST_STATE_NULL, "the end");
  for (guint i = 0; i < N_FAULTS; i++)
    g_test_message ("%-36s %u", fault_names[i], counts[i]);
  n_warnings = dfl_test_element_warnings (&last);
  g_test_message ("%d iterations, %" G_GINT64_FORMAT " rounds, %.1f s; %d GST_WARNING logs of the "
                  "elements%s%s", iterations, l.rounds, (g_get_monotonic_time () - t0) / 1e6,
                  n_warnings, *last ? ", the last: " : "", last);
  g_free (last);

  gst_object_unref (l.src);
  gst_object_unref (l.bus);
  gst_object_unref (l.pipeline);
  soak_output_free (l.out);
  soak_watchdog_free (l.dog);
  g_rand_free (rand);
  soak_remove_file (prompts);
}

int
main (int argc, char **argv)
{
  int ret;
  GOptionEntry entries[] = {
    { "iterations", 0, 0, G_OPTION_ARG_INT, &iterations, "Faults to inject", "N" },
    { "fault-seed", 0, 0, G_OPTION_ARG_STRING, &seed_arg, "Seed of the faults (default: random)",
      "S" },
    { NULL }
  };
  g_autoptr (GOptionContext) options = g_option_context_new ("SHAPE");
  g_autoptr (GError) error = NULL;
  const gchar *shape;

  gst_init (&argc, &argv);
  g_test_init (&argc, &argv, NULL);
  g_option_context_add_main_entries (options, entries, NULL);
  if (!g_option_context_parse (options, &argc, &argv, &error) || argc != 2 || iterations < 1) {
    g_printerr ("test-faults: %s\n"
                "usage: test-faults in-flight|routed [--iterations N] [--fault-seed S]\n",
                error ? error->message : "one shape, and --iterations at least 1");
    return 2;
  }
  if (!strcmp (argv[1], "in-flight"))
    shape = in_flight_shape;
  else if (!strcmp (argv[1], "routed"))
    shape = routed_shape;
  else {
    g_printerr ("test-faults: no shape '%s' (in-flight or routed)\n", argv[1]);
    return 2;
  }
  dfl_test_watch_element_logs ();
  g_test_add_data_func ("/faults/loop", shape, test_faults);
  ret = g_test_run ();
  gst_deinit ();
  g_free (seed_arg);
  return ret;
}
