/* gst-dflash — four pipelines in one process, one model.
 *
 *   test-concurrent [--repeat N] [--max-new N] [--prompts N]
 *
 * An application loads the model once (a tapsource's "dflash.model"
 * context) and sets it on four pipelines of different shapes: sequences in
 * flight with queues, the router with both drafters, the plain selector,
 * the chain drafter alone. Each runs alone first, one after the other; then
 * the four run at once, each in its own thread with its own main loop and
 * bus watch, N times. Their texts and token counts must be the ones they
 * had alone, and no tapsource may load a model of its own (it would post
 * HAVE_CONTEXT). Built with -Db_sanitize=thread this is the
 * ThreadSanitizer test of the elements and the shared model.
 */
#include <glib.h>
#include <gst/gst.h>
#include <string.h>

#include "soak-common.h"

#define N_PIPELINES 4
/* seconds one phase may take; a normal build takes a second or two, a
 * ThreadSanitizer build twenty times that */
#define PHASE_S 300

static gint repeat = 2;
static gint max_new = 40;
static gint n_prompts = 3;

static const gchar *const shapes[N_PIPELINES] = {
  "tapsource name=src in-flight=2 max-new-tokens=%d prompts-file=\"%s\" ! queue ! ctxsettle ! "
  "queue ! dflashblock ! selector ! queue ! verifier name=v ! "
  "fakesink name=out sync=false async=false v.tokens ! fakesink name=ids sync=false async=false",
  "tapsource name=src in-flight=1 max-new-tokens=%d prompts-file=\"%s\" ! tee name=t ! queue ! "
  "ctxsettle ! dflashblock ! selector ! router name=r policy=match ! verifier name=v ! "
  "fakesink name=out sync=false async=false  t. ! queue ! ngramdraft ! r.chain",
  "tapsource name=src in-flight=3 max-new-tokens=%d prompts-file=\"%s\" ! queue ! ctxsettle ! "
  "queue ! dflashblock ! selector mode=plain ! verifier name=v ! "
  "fakesink name=out sync=false async=false",
  "tapsource name=src in-flight=2 max-new-tokens=%d prompts-file=\"%s\" ! ngramdraft ! "
  "verifier name=v ! fakesink name=out sync=false async=false",
};

typedef struct {
  guint index;
  gchar *description;
  GstContext *context;
  /* what the run gave */
  gchar *text;
  gint64 new_tokens;
  gchar *error;
  gint have_context;         /* HAVE_CONTEXT messages: a tapsource loaded a model */
  /* the start line: the threads set PLAYING together */
  GMutex *lock;
  GCond *cond;
  gboolean *go;
  GMainLoop *loop;
} Job;

static gboolean
on_message (GstBus *bus, GstMessage *msg, gpointer data)
{
  Job *job = data;
  const GstStructure *s = gst_message_get_structure (msg);

  switch (GST_MESSAGE_TYPE (msg)) {
    case GST_MESSAGE_ELEMENT:
      if (gst_structure_has_name (s, "dflash-summary"))
        gst_structure_get_int64 (s, "new-tokens", &job->new_tokens);
      break;
    case GST_MESSAGE_HAVE_CONTEXT:
      job->have_context++;
      break;
    case GST_MESSAGE_ERROR:
    case GST_MESSAGE_WARNING: {
      g_autoptr (GError) e = NULL;
      g_autofree gchar *debug = NULL;
      if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR)
        gst_message_parse_error (msg, &e, &debug);
      else
        gst_message_parse_warning (msg, &e, &debug);
      if (!job->error)
        job->error = g_strdup_printf ("%s from %s: %s (%s)", GST_MESSAGE_TYPE_NAME (msg),
                                      GST_MESSAGE_SRC_NAME (msg), e->message, debug ? debug : "");
      g_main_loop_quit (job->loop);
      break;
    }
    case GST_MESSAGE_EOS:
      g_main_loop_quit (job->loop);
      break;
    default:
      break;
  }
  return G_SOURCE_CONTINUE;
}

/* One pipeline from start to EOS in this thread's own main context. */
static gpointer
run_job (gpointer data)
{
  Job *job = data;
  GMainContext *ctx = g_main_context_new ();
  g_autoptr (GError) error = NULL;
  GstElement *pipeline;
  SoakOutput *out = soak_output_new ();
  GstBus *bus;

  g_main_context_push_thread_default (ctx);
  job->loop = g_main_loop_new (ctx, FALSE);
  pipeline = gst_parse_launch (job->description, &error);
  g_assert_no_error (error);
  gst_element_set_context (pipeline, job->context);
  soak_output_attach (out, pipeline);
  bus = gst_element_get_bus (pipeline);
  gst_bus_add_watch (bus, on_message, job);

  if (job->lock) {
    g_mutex_lock (job->lock);
    while (!*job->go)
      g_cond_wait (job->cond, job->lock);
    g_mutex_unlock (job->lock);
  }
  if (gst_element_set_state (pipeline, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE)
    job->error = g_strdup ("the pipeline did not start");
  else
    g_main_loop_run (job->loop);
  g_assert_cmpint (gst_element_set_state (pipeline, GST_STATE_NULL), ==, GST_STATE_CHANGE_SUCCESS);
  job->text = soak_output_text (out);

  gst_bus_remove_watch (bus);
  gst_object_unref (bus);
  gst_object_unref (pipeline);
  soak_output_free (out);
  g_main_loop_unref (job->loop);
  job->loop = NULL;
  g_main_context_pop_thread_default (ctx);
  g_main_context_unref (ctx);
  return NULL;
}

static void
job_clear (Job *job)
{
  g_clear_pointer (&job->text, g_free);
  g_clear_pointer (&job->error, g_free);
  job->new_tokens = -1;
  job->have_context = 0;
}

static void
check_job (Job *job, const gchar *when)
{
  if (job->error)
    g_error ("pipeline %u (%s): %s", job->index, when, job->error);
  if (job->have_context)
    g_error ("pipeline %u (%s): a tapsource loaded a model of its own instead of the shared one",
             job->index, when);
  g_assert_cmpint (job->new_tokens, >, 0);
  g_assert_cmpuint (strlen (job->text), >, 0);
}

static void
test_concurrent (void)
{
  SoakWatchdog *dog = soak_watchdog_new ();
  GstContext *context;
  gchar *prompts[N_PIPELINES];
  Job jobs[N_PIPELINES] = { { 0 } };
  gchar *alone[N_PIPELINES];
  gint64 alone_tokens[N_PIPELINES];
  GMutex lock;
  GCond cond;
  gboolean go;

  g_mutex_init (&lock);
  g_cond_init (&cond);
  soak_watchdog_arm (dog, PHASE_S, "loading the shared model");
  context = soak_model_context (PHASE_S);
  g_assert_nonnull (context);

  for (guint i = 0; i < N_PIPELINES; i++) {
    prompts[i] = soak_prompts_file (n_prompts, i * 11);
    jobs[i].index = i;
    jobs[i].description = g_strdup_printf (shapes[i], max_new, prompts[i]);
    jobs[i].context = context;
  }

  /* alone, one after the other */
  for (guint i = 0; i < N_PIPELINES; i++) {
    job_clear (&jobs[i]);
    soak_watchdog_arm (dog, PHASE_S, "pipeline %u alone", i);
    run_job (&jobs[i]);
    check_job (&jobs[i], "alone");
    alone[i] = g_steal_pointer (&jobs[i].text);
    alone_tokens[i] = jobs[i].new_tokens;
    g_test_message ("pipeline %u alone: %" G_GINT64_FORMAT " tokens", i, alone_tokens[i]);
  }

  /* all four at once */
  for (gint r = 0; r < repeat; r++) {
    GThread *threads[N_PIPELINES];

    go = FALSE;
    soak_watchdog_arm (dog, PHASE_S, "the four pipelines at once (pass %d)", r + 1);
    for (guint i = 0; i < N_PIPELINES; i++) {
      job_clear (&jobs[i]);
      jobs[i].lock = &lock;
      jobs[i].cond = &cond;
      jobs[i].go = &go;
      threads[i] = g_thread_new ("pipeline", run_job, &jobs[i]);
    }
    g_mutex_lock (&lock);
    go = TRUE;
    g_cond_broadcast (&cond);
    g_mutex_unlock (&lock);
    for (guint i = 0; i < N_PIPELINES; i++)
      g_thread_join (threads[i]);
    for (guint i = 0; i < N_PIPELINES; i++) {
      check_job (&jobs[i], "concurrent");
      if (g_strcmp0 (jobs[i].text, alone[i]) != 0)
        g_error ("pipeline %u: its text run beside three others differs from its text alone "
                 "(%" G_GSIZE_FORMAT " bytes against %" G_GSIZE_FORMAT ")", i,
                 strlen (jobs[i].text), strlen (alone[i]));
      g_assert_cmpint (jobs[i].new_tokens, ==, alone_tokens[i]);
    }
    g_test_message ("pass %d: the four texts are the ones of the runs alone", r + 1);
  }
  soak_watchdog_disarm (dog);

  for (guint i = 0; i < N_PIPELINES; i++) {
    job_clear (&jobs[i]);
    g_free (jobs[i].description);
    g_free (alone[i]);
    soak_remove_file (prompts[i]);
    g_free (prompts[i]);
  }
  gst_context_unref (context);
  soak_watchdog_free (dog);
  g_cond_clear (&cond);
  g_mutex_clear (&lock);
}

int
main (int argc, char **argv)
{
  int ret;
  GOptionEntry entries[] = {
    { "repeat", 0, 0, G_OPTION_ARG_INT, &repeat, "Times the four run at once", "N" },
    { "max-new", 0, 0, G_OPTION_ARG_INT, &max_new, "max-new-tokens of each prompt", "N" },
    { "prompts", 0, 0, G_OPTION_ARG_INT, &n_prompts, "Prompts of each pipeline", "N" },
    { NULL }
  };
  g_autoptr (GOptionContext) options = g_option_context_new (NULL);
  g_autoptr (GError) error = NULL;

  gst_init (&argc, &argv);
  g_test_init (&argc, &argv, NULL);
  g_option_context_add_main_entries (options, entries, NULL);
  if (!g_option_context_parse (options, &argc, &argv, &error) || repeat < 1 || max_new < 1
      || n_prompts < 1) {
    g_printerr ("test-concurrent: %s\n",
                error ? error->message : "--repeat, --max-new and --prompts must be at least 1");
    return 2;
  }
  g_test_add_func ("/concurrent/shared-model", test_concurrent);
  ret = g_test_run ();
  gst_deinit ();
  return ret;
}
