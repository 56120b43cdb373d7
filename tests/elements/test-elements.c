/* gst-dflash — the elements under gst-check.
 *
 * Harnesses per element (what each stage outputs and that a verdict passes
 * it upstream), then real pipelines: negotiation, the verdict loop with and
 * without the router, flushes and state changes, bad input, several
 * sequences in flight, the element messages, and the properties.
 *
 * The test links GStreamer only: the elements come from the plugin through
 * the registry, as an application gets them. It knows the round meta's
 * layout (gstdflashmeta.h) and finds the meta's API type by name.
 *
 * The reference text is `dflash generate --no-draft` (path in $DFLASH) for
 * the same prompt and length. Every wait on a pipeline has a watchdog, so a
 * deadlock fails the test instead of hanging it.
 *
 * A clean run also fails on a GST_WARNING or GST_ERROR log of the elements'
 * own categories (gst-check catches only GLib's warnings).
 *
 * Each tcase runs as its own meson test (CK_RUN_CASE); GST_CHECKS picks
 * single tests; DFL_TEST_WATCHDOG sets the watchdog in seconds.
 *
 * Tests that fail until an element is fixed say so ("Fails until").
 */
#include <gst/check/gstcheck.h>
#include <gst/check/gstharness.h>
#include <glib/gstdio.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "element-logs.h"
#include "gstdflashcaps.h"
#include "gstdflashmeta.h"
#include "reference-text.h"

/* seconds a pipeline may take to finish; a normal run takes well under one
 * (a few under ASan) */
static guint watchdog_s = 30;
/* where a flush may hang: long enough for a slow build, short enough that a
 * hang does not eat the suite's time */
#define FLUSH_WATCHDOG_S 10

#define SPECULATIVE "tapsource name=src max-new-tokens=%d ! ctxsettle ! dflashblock ! selector ! " \
    "verifier name=v ! fakesink name=out"
/* the same with the drafter's stages in their batching mode (a task on
 * each one's src pad takes the rounds their sink queued) */
#define SPECULATIVE_BATCHED "tapsource name=src max-new-tokens=%d ! ctxsettle batch-limit=2 ! " \
    "dflashblock batch-limit=2 ! selector ! verifier name=v ! fakesink name=out"
#define NO_DRAFT "tapsource name=src max-new-tokens=%d ! verifier name=v ! fakesink name=out"
#define ROUTED "tapsource name=src max-new-tokens=%d ! tee name=t ! queue ! ctxsettle ! dflashblock ! " \
    "selector ! router name=r policy=%s ! verifier name=v ! fakesink name=out  " \
    "t. ! queue ! ngramdraft name=ng ! r.chain"
#define DEFAULT_PROMPT "func ContainsRune(s string, r rune) bool {"  /* tapsource's default */

/* ---------------------------------------------------------------- helpers */

/* A run that should be clean logs no warning of the elements. */
static void
assert_no_warnings (void)
{
  g_autofree gchar *last = NULL;
  gint n = dfl_test_element_warnings (&last);

  fail_unless (n == 0, "%d GST_WARNING/GST_ERROR logs of the elements, the last: %s", n, last);
}

static const gchar *
fixture (const gchar *name)
{
  static gchar path[4096];
  const gchar *dir = g_getenv ("DFL_FIXTURES");

  fail_unless (dir != NULL, "DFL_FIXTURES is not set (meson sets it)");
  g_snprintf (path, sizeof (path), "%s/qwen3/%s", dir, name);
  return path;
}

/* The plugin registers the meta's API type the first time it adds one; this
 * test does not link the plugin's code, so it looks the type up by name. */
static const GstDflashRoundMeta *
round_meta (GstBuffer *buf)
{
  GType api = g_type_from_name ("GstDflashRoundMetaAPI");

  fail_if (api == 0, "no GstDflashRoundMetaAPI type: the plugin did not add a round meta");
  return (const GstDflashRoundMeta *) gst_buffer_get_meta (buf, api);
}

/* What the verifier sends upstream, built by hand for the harnesses that
 * stand in for it. */
static GstEvent *
verdict_new (guint sequence, guint round, gint64 anchor_pos, gint accepted, gint bonus,
             gboolean done)
{
  return gst_event_new_custom (GST_EVENT_CUSTOM_UPSTREAM,
      gst_structure_new (GST_DFLASH_VERDICT_EVENT, "sequence", G_TYPE_UINT, sequence,
          "round", G_TYPE_UINT, round, "anchor-position", G_TYPE_INT64, anchor_pos,
          "accepted", G_TYPE_INT, accepted, "bonus", G_TYPE_INT, bonus,
          "done", G_TYPE_BOOLEAN, done, NULL));
}

static gboolean
is_verdict (GstEvent *event)
{
  return GST_EVENT_TYPE (event) == GST_EVENT_CUSTOM_UPSTREAM
      && gst_event_has_name (event, GST_DFLASH_VERDICT_EVENT);
}

static gint
caps_int (GstCaps *caps, const gchar *field)
{
  /* check formats its messages itself: GST_PTR_FORMAT would not expand */
  g_autofree gchar *str = caps ? gst_caps_to_string (caps) : g_strdup ("no caps");
  gint v = -1;

  fail_unless (caps != NULL && gst_caps_is_fixed (caps), "caps not fixed: %s", str);
  fail_unless (gst_structure_get_int (gst_caps_get_structure (caps, 0), field, &v),
      "%s has no int field %s", str, field);
  return v;
}

/* A pipeline run: the text its sink named "out" received, the element
 * messages, and how it ended. */
typedef struct {
  GstElement *pipeline;
  GMutex lock;
  GString *text;
  GPtrArray *messages;       /* GstStructure copies of dflash-* element messages */
  gchar *error;              /* the first ERROR: message, then debug */
  gchar *error_from;
  gboolean eos;
} Run;

typedef enum { RUN_EOS, RUN_ERROR, RUN_TIMEOUT } RunEnd;

static void
on_handoff (GstElement *sink, GstBuffer *buf, GstPad *pad, gpointer data)
{
  Run *r = data;
  GstMapInfo map;

  fail_unless (gst_buffer_map (buf, &map, GST_MAP_READ));
  g_mutex_lock (&r->lock);
  g_string_append_len (r->text, (const gchar *) map.data, map.size);
  g_mutex_unlock (&r->lock);
  gst_buffer_unmap (buf, &map);
}

static Run *
run_new (const gchar *description)
{
  Run *r = g_new0 (Run, 1);
  GError *error = NULL;
  GstElement *out;

  g_mutex_init (&r->lock);
  r->text = g_string_new (NULL);
  r->messages = g_ptr_array_new_with_free_func ((GDestroyNotify) gst_structure_free);
  r->pipeline = gst_parse_launch (description, &error);
  fail_unless (r->pipeline != NULL && error == NULL, "'%s': %s", description,
      error ? error->message : "no pipeline");
  if ((out = gst_bin_get_by_name (GST_BIN (r->pipeline), "out"))) {
    g_object_set (out, "signal-handoffs", TRUE, NULL);
    g_signal_connect (out, "handoff", G_CALLBACK (on_handoff), r);
    gst_object_unref (out);
  }
  return r;
}

static Run *
run_new_printf (const gchar *format, ...) G_GNUC_PRINTF (1, 2);

static Run *
run_new_printf (const gchar *format, ...)
{
  va_list args;
  g_autofree gchar *description = NULL;

  va_start (args, format);
  description = g_strdup_vprintf (format, args);
  va_end (args);
  return run_new (description);
}

static GstElement *
run_get (Run *r, const gchar *name)
{
  GstElement *e = gst_bin_get_by_name (GST_BIN (r->pipeline), name);

  fail_unless (e != NULL, "no element %s", name);
  return e;
}

static gchar *
run_text (Run *r)
{
  gchar *t;

  g_mutex_lock (&r->lock);
  t = g_strdup (r->text->str);
  g_mutex_unlock (&r->lock);
  return t;
}

static void
run_clear (Run *r)
{
  g_mutex_lock (&r->lock);
  g_string_truncate (r->text, 0);
  g_mutex_unlock (&r->lock);
  g_ptr_array_set_size (r->messages, 0);
  g_clear_pointer (&r->error, g_free);
  g_clear_pointer (&r->error_from, g_free);
  r->eos = FALSE;
}

/* Pop messages until EOS, an ERROR or the watchdog. A WARNING fails the
 * test: an element that warns in a run that should be clean is a bug. */
static RunEnd
run_wait (Run *r, guint seconds)
{
  GstBus *bus = gst_element_get_bus (r->pipeline);
  gint64 deadline = g_get_monotonic_time () + (gint64) seconds * G_USEC_PER_SEC;
  RunEnd end = RUN_TIMEOUT;

  for (;;) {
    gint64 left = deadline - g_get_monotonic_time ();
    GstMessage *msg;

    if (left <= 0)
      break;
    msg = gst_bus_timed_pop_filtered (bus, left * GST_USECOND,
        GST_MESSAGE_EOS | GST_MESSAGE_ERROR | GST_MESSAGE_WARNING | GST_MESSAGE_ELEMENT);
    if (!msg)
      break;
    if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ELEMENT) {
      const GstStructure *s = gst_message_get_structure (msg);
      if (s && g_str_has_prefix (gst_structure_get_name (s), "dflash-"))
        g_ptr_array_add (r->messages, gst_structure_copy (s));
    } else if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_WARNING) {
      g_autoptr (GError) w = NULL;
      g_autofree gchar *debug = NULL;
      gst_message_parse_warning (msg, &w, &debug);
      fail ("unexpected WARNING from %s: %s (%s)", GST_MESSAGE_SRC_NAME (msg), w->message, debug);
    } else if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR) {
      g_autoptr (GError) e = NULL;
      g_autofree gchar *debug = NULL;
      gst_message_parse_error (msg, &e, &debug);
      r->error = g_strdup_printf ("%s\n%s", e->message, debug ? debug : "");
      r->error_from = g_strdup (GST_MESSAGE_SRC_NAME (msg));
      end = RUN_ERROR;
    } else {
      r->eos = TRUE;
      end = RUN_EOS;
    }
    gst_message_unref (msg);
    if (end != RUN_TIMEOUT)
      break;
  }
  gst_object_unref (bus);
  return end;
}

static const gchar *
run_end_name (RunEnd end)
{
  return end == RUN_EOS ? "EOS" : end == RUN_ERROR ? "ERROR" : "the watchdog (no EOS, no ERROR)";
}

static void
run_free (Run *r)
{
  fail_unless_equals_int (gst_element_set_state (r->pipeline, GST_STATE_NULL), GST_STATE_CHANGE_SUCCESS);
  gst_object_unref (r->pipeline);
  g_string_free (r->text, TRUE);
  g_ptr_array_unref (r->messages);
  g_free (r->error);
  g_free (r->error_from);
  g_mutex_clear (&r->lock);
  g_free (r);
}

/* Play to EOS; the run must end there, not in an error or the watchdog. */
static void
run_to_eos (Run *r)
{
  RunEnd end;

  dfl_test_reset_element_warnings ();
  fail_if (gst_element_set_state (r->pipeline, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE,
      "the pipeline did not start");
  end = run_wait (r, watchdog_s);
  fail_unless (end == RUN_EOS, "the run ended with %s: %s", run_end_name (end),
      r->error ? r->error : "");
  assert_no_warnings ();
}

/* Play expecting an ERROR whose message (or debug) holds `needle`; returns
 * whether the state change itself failed. */
static gboolean
run_to_error (Run *r, const gchar *needle)
{
  GstStateChangeReturn ret = gst_element_set_state (r->pipeline, GST_STATE_PLAYING);
  RunEnd end = run_wait (r, watchdog_s);

  fail_unless (end == RUN_ERROR, "expected an ERROR naming '%s', the run ended with %s", needle,
      run_end_name (end));
  fail_unless (strstr (r->error, needle) != NULL, "the ERROR (from %s) does not name '%s': %s",
      r->error_from, needle, r->error);
  return ret == GST_STATE_CHANGE_FAILURE;
}

static guint
run_count (Run *r, const gchar *name)
{
  guint n = 0;

  for (guint i = 0; i < r->messages->len; i++)
    n += gst_structure_has_name (g_ptr_array_index (r->messages, i), name);
  return n;
}

static const GstStructure *
run_summary (Run *r)
{
  fail_unless_equals_int (run_count (r, "dflash-summary"), 1);
  for (guint i = 0; i < r->messages->len; i++)
    if (gst_structure_has_name (g_ptr_array_index (r->messages, i), "dflash-summary"))
      return g_ptr_array_index (r->messages, i);
  return NULL;
}

static gint64
summary_int64 (Run *r, const gchar *field)
{
  gint64 v = -1;

  fail_unless (gst_structure_get_int64 (run_summary (r), field, &v), "dflash-summary has no %s", field);
  return v;
}

static void
assert_text (const gchar *got, const gchar *want, const gchar *what)
{
  gsize i = 0;

  if (g_strcmp0 (got, want) == 0)
    return;
  while (got[i] && got[i] == want[i])
    i++;
  fail ("%s: the text differs from the plain decoding at byte %" G_GSIZE_FORMAT
      " (%" G_GSIZE_FORMAT " bytes, reference %" G_GSIZE_FORMAT ")", what, i, strlen (got), strlen (want));
}

/* Counts what passes tapsource's src pad: rounds down, verdicts up. */
typedef struct {
  gint buffers, verdicts;
} Flow;

static GstPadProbeReturn
count_flow (GstPad *pad, GstPadProbeInfo *info, gpointer data)
{
  Flow *f = data;

  if (info->type & GST_PAD_PROBE_TYPE_BUFFER)
    g_atomic_int_inc (&f->buffers);
  else if (is_verdict (GST_PAD_PROBE_INFO_EVENT (info)))
    g_atomic_int_inc (&f->verdicts);
  return GST_PAD_PROBE_OK;
}

static void
watch_flow (Run *r, const gchar *element, Flow *f)
{
  GstElement *e = run_get (r, element);
  GstPad *pad = gst_element_get_static_pad (e, "src");

  gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_BUFFER | GST_PAD_PROBE_TYPE_EVENT_UPSTREAM, count_flow,
      f, NULL);
  gst_object_unref (pad);
  gst_object_unref (e);
}

/* The model a tapsource loads, as the "dflash.model" context it posts: for
 * stages tested without a tapsource upstream. */
static GstContext *
model_context (void)
{
  GstElement *p = gst_parse_launch ("tapsource max-new-tokens=1 ! fakesink", NULL);
  GstContext *context;

  fail_unless (p != NULL);
  /* PAUSED: tapsource loads the model, posts HAVE_CONTEXT, the bin keeps it */
  gst_element_set_state (p, GST_STATE_PAUSED);
  fail_unless_equals_int (gst_element_get_state (p, NULL, NULL, watchdog_s * GST_SECOND),
      GST_STATE_CHANGE_SUCCESS);
  context = gst_element_get_context (p, "dflash.model");
  fail_unless (context != NULL, "tapsource posted no dflash.model context");
  gst_element_set_state (p, GST_STATE_NULL);
  gst_object_unref (p);
  return context;
}

/* ---------------------------------------------------------------- harness */

GST_START_TEST (test_tapsource_rounds)
{
  GstHarness *h = gst_harness_new ("tapsource");
  GstBuffer *buf;
  GstCaps *caps;
  const GstDflashRoundMeta *m;
  gint hidden, tw, vocab, block;
  gsize n_new;
  const gint *new_tokens;

  g_object_set (h->element, "max-new-tokens", 8, NULL);
  gst_harness_play (h);

  /* round 0: the prompt's taps, the prompt and the first token as new tokens */
  buf = gst_harness_pull (h);
  fail_unless (buf != NULL);
  caps = gst_pad_get_current_caps (h->sinkpad);
  fail_unless (gst_structure_has_name (gst_caps_get_structure (caps, 0), GST_DFLASH_TAPS_CAPS));
  hidden = caps_int (caps, "hidden");
  tw = caps_int (caps, "tap-width");
  vocab = caps_int (caps, "vocab");
  block = caps_int (caps, "block");
  /* the fixture: hidden 64, vocab 1024, a sidecar tapping 3 layers, block 8 */
  fail_unless_equals_int (hidden, 64);
  fail_unless_equals_int (tw, 3 * 64);
  fail_unless_equals_int (vocab, 1024);
  fail_unless_equals_int (block, 8);
  gst_caps_unref (caps);

  m = round_meta (buf);
  fail_unless (m != NULL, "a round without its meta");
  fail_unless_equals_int (m->sequence, 0);
  fail_unless_equals_int (m->round, 0);
  fail_unless_equals_int (m->ctx_pos, 0);
  fail_unless (m->ctx_rows > 0);
  /* the anchor is the first generated token, after the prompt's rows */
  fail_unless_equals_int64 (m->anchor_pos, m->ctx_rows);
  fail_unless_equals_int (gst_buffer_get_size (buf), (gsize) m->ctx_rows * tw * sizeof (float));
  fail_unless (m->tip != NULL && g_bytes_get_size (m->tip) == hidden * sizeof (float));
  fail_unless (m->new_tokens != NULL);
  new_tokens = g_bytes_get_data (m->new_tokens, &n_new);
  fail_unless_equals_int (n_new, (m->ctx_rows + 1) * sizeof (gint));
  fail_unless_equals_int (new_tokens[n_new / sizeof (gint) - 1], m->anchor);
  fail_unless (m->anchor >= 0 && m->anchor < vocab);
  gst_buffer_unref (buf);

  /* nothing more comes until the round's verdict; one for a sequence that
   * is not running changes nothing */
  fail_unless (gst_harness_try_pull (h) == NULL);
  dfl_test_reset_element_warnings ();
  fail_unless (gst_harness_push_upstream_event (h, verdict_new (99, 0, 0, 0, 0, FALSE)));
  if (!g_getenv ("GST_DEBUG")) {
    /* tapsource logs the stray verdict (in its streaming thread) */
    gint64 deadline = g_get_monotonic_time () + (gint64) watchdog_s * G_USEC_PER_SEC;
    while (dfl_test_element_warnings (NULL) == 0 && g_get_monotonic_time () < deadline)
      g_usleep (1000);
    fail_unless (dfl_test_element_warnings (NULL) > 0, "the stray verdict went unnoticed");
  }
  fail_unless (gst_harness_try_pull (h) == NULL);

  gst_harness_teardown (h);
}
GST_END_TEST;

GST_START_TEST (test_tapsource_no_drafter)
{
  GstHarness *h = gst_harness_new ("tapsource");
  GstBuffer *buf;
  GstCaps *caps;

  /* without a drafter there is nothing to tap: plain decoding or the chain */
  g_object_set (h->element, "no-drafter", TRUE, "max-new-tokens", 4, NULL);
  gst_harness_play (h);
  buf = gst_harness_pull (h);
  fail_unless (buf != NULL);
  caps = gst_pad_get_current_caps (h->sinkpad);
  fail_unless_equals_int (caps_int (caps, "tap-width"), 0);
  fail_unless_equals_int (gst_buffer_get_size (buf), 0);
  gst_caps_unref (caps);
  gst_buffer_unref (buf);

  /* the verdict starts the sequence's next round: no context rows to carry */
  fail_unless (gst_harness_try_pull (h) == NULL);
  fail_unless (gst_harness_push_upstream_event (h, verdict_new (0, 0, 5, 0, 0, FALSE)));
  buf = gst_harness_pull (h);
  fail_unless (buf != NULL, "the verdict started no next round");
  fail_unless_equals_int (round_meta (buf)->sequence, 0);
  fail_unless_equals_int (round_meta (buf)->ctx_rows, 0);
  gst_buffer_unref (buf);
  gst_harness_teardown (h);
}
GST_END_TEST;

/* tapsource ! verifier in a harness: the verifier answers every round
 * itself, the harness takes the text until EOS. */
GST_START_TEST (test_verifier_text)
{
  GstHarness *h = gst_harness_new_parse ("tapsource max-new-tokens=32 ! verifier name=v  "
      "v.tokens ! fakesink");
  g_autofree gchar *want = dfl_test_reference_text (DEFAULT_PROMPT, 32);
  GString *text = g_string_new (NULL);
  GstBuffer *buf = NULL;
  GstCaps *caps;

  gst_harness_play (h);
  while (gst_harness_pull_until_eos (h, &buf) && buf) {
    GstMapInfo map;
    gst_buffer_map (buf, &map, GST_MAP_READ);
    g_string_append_len (text, (const gchar *) map.data, map.size);
    gst_buffer_unmap (buf, &map);
    gst_clear_buffer (&buf);
  }
  fail_unless (gst_harness_events_received (h) > 0);
  caps = gst_pad_get_current_caps (h->sinkpad);
  fail_unless (gst_structure_has_name (gst_caps_get_structure (caps, 0), "text/x-raw"));
  fail_unless_equals_string (gst_structure_get_string (gst_caps_get_structure (caps, 0), "format"), "utf8");
  gst_caps_unref (caps);
  assert_text (text->str, want, "tapsource ! verifier");
  g_string_free (text, TRUE);
  gst_harness_teardown (h);
}
GST_END_TEST;

/* The tokens pad: every committed token once, as int32 ids. */
GST_START_TEST (test_verifier_tokens)
{
  GstHarness *h = gst_harness_new_parse ("tapsource max-new-tokens=20 ! verifier name=v  "
      "v.src ! fakesink");
  GstBuffer *buf = NULL;
  gsize n = 0;
  GstCaps *caps;

  gst_harness_play (h);
  while (gst_harness_pull_until_eos (h, &buf) && buf) {
    const GstDflashRoundMeta *m = round_meta (buf);
    fail_unless (m != NULL && m->sequence == 0);
    n += gst_buffer_get_size (buf) / sizeof (gint32);
    fail_unless_equals_int (gst_buffer_get_size (buf) % sizeof (gint32), 0);
    gst_clear_buffer (&buf);
  }
  fail_unless_equals_int (n, 20);
  caps = gst_pad_get_current_caps (h->sinkpad);
  fail_unless (gst_structure_has_name (gst_caps_get_structure (caps, 0), GST_DFLASH_TOKENS_CAPS));
  fail_unless_equals_int (caps_int (caps, "vocab"), 1024);
  gst_caps_unref (caps);
  gst_harness_teardown (h);
}
GST_END_TEST;

/* One stage behind tapsource (named "src") in a harness: its first output,
 * and a verdict pushed into its src pad must reach tapsource. The verdict
 * names a sequence that is not running, which tapsource ignores: a real
 * one would start a round from a verification that never happened. */
static GstHarness *
stage_harness (const gchar *description, GstBuffer **first, GstCaps **caps)
{
  GstHarness *h = gst_harness_new_parse (description);
  GstElement *src = gst_bin_get_by_name (GST_BIN (h->element), "src");
  GstPad *pad = gst_element_get_static_pad (src, "src");
  const GstDflashRoundMeta *m;
  Flow flow = { 0, 0 };
  gulong id;

  gst_harness_play (h);
  *first = gst_harness_pull (h);
  fail_unless (*first != NULL, "%s: no output", description);
  *caps = gst_pad_get_current_caps (h->sinkpad);
  m = round_meta (*first);
  fail_unless (m != NULL, "%s: the round meta was lost", description);
  fail_unless_equals_int (m->sequence, 0);
  fail_unless_equals_int (m->round, 0);
  id = gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_EVENT_UPSTREAM, count_flow, &flow, NULL);
  /* upstream events travel in the pushing thread: it has arrived on return */
  fail_unless (gst_harness_push_upstream_event (h, verdict_new (99, 0, 0, 0, 0, FALSE)),
      "%s: the verdict was not taken upstream", description);
  fail_unless_equals_int (g_atomic_int_get (&flow.verdicts), 1);
  gst_pad_remove_probe (pad, id);
  gst_object_unref (pad);
  gst_object_unref (src);
  return h;
}

GST_START_TEST (test_ctxsettle_harness)
{
  GstBuffer *buf;
  GstCaps *caps;
  GstHarness *h = stage_harness ("tapsource name=src max-new-tokens=8 ! ctxsettle", &buf, &caps);

  /* the context lives in the sequence's drafter: the buffer is the request */
  fail_unless (gst_structure_has_name (gst_caps_get_structure (caps, 0), GST_DFLASH_CONTEXT_CAPS));
  fail_unless_equals_int (caps_int (caps, "hidden"), 64);
  fail_unless_equals_int (caps_int (caps, "vocab"), 1024);
  fail_unless_equals_int (caps_int (caps, "block"), 8);
  fail_unless_equals_int (gst_buffer_get_size (buf), 0);
  gst_buffer_unref (buf);
  gst_caps_unref (caps);
  gst_harness_teardown (h);
}
GST_END_TEST;

GST_START_TEST (test_dflashblock_harness)
{
  GstBuffer *buf;
  GstCaps *caps;
  GstHarness *h = stage_harness ("tapsource name=src max-new-tokens=8 ! ctxsettle ! dflashblock", &buf, &caps);

  fail_unless (gst_structure_has_name (gst_caps_get_structure (caps, 0), GST_DFLASH_BLOCK_CAPS));
  fail_unless_equals_int (caps_int (caps, "block"), 8);
  fail_unless_equals_int (caps_int (caps, "width"), 1024);
  /* the rows after the anchor, then their logits */
  fail_unless_equals_int (gst_buffer_get_size (buf), 7 * (64 + 1024) * sizeof (float));
  gst_buffer_unref (buf);
  gst_caps_unref (caps);
  gst_harness_teardown (h);

  /* head-width narrows the logits and says so in the caps */
  h = stage_harness ("tapsource name=src max-new-tokens=8 ! ctxsettle ! dflashblock head-width=100", &buf, &caps);
  fail_unless_equals_int (caps_int (caps, "width"), 100);
  fail_unless_equals_int (gst_buffer_get_size (buf), 7 * (64 + 100) * sizeof (float));
  gst_buffer_unref (buf);
  gst_caps_unref (caps);
  gst_harness_teardown (h);
}
GST_END_TEST;

static void
check_proposal_caps (GstCaps *caps, gint block)
{
  fail_unless (gst_structure_has_name (gst_caps_get_structure (caps, 0), GST_DFLASH_PROPOSAL_CAPS));
  fail_unless_equals_int (caps_int (caps, "vocab"), 1024);
  fail_unless_equals_int (caps_int (caps, "block"), block);
}

static void
check_proposal (GstBuffer *buf, GstDflashSource source, gsize most)
{
  GstMapInfo map;
  const gint32 *ids;

  fail_unless_equals_int (round_meta (buf)->source, source);
  fail_unless (gst_buffer_map (buf, &map, GST_MAP_READ));
  fail_unless_equals_int (map.size % sizeof (gint32), 0);
  fail_unless (map.size / sizeof (gint32) <= most, "%" G_GSIZE_FORMAT " drafts, at most %" G_GSIZE_FORMAT,
      map.size / sizeof (gint32), most);
  ids = (const gint32 *) map.data;
  for (gsize i = 0; i < map.size / sizeof (gint32); i++)
    fail_unless (ids[i] >= 0 && ids[i] < 1024, "draft %d is outside the vocabulary", ids[i]);
  gst_buffer_unmap (buf, &map);
}

GST_START_TEST (test_selector_harness)
{
  const gchar *modes[] = { "rescore", "plain" };

  for (guint i = 0; i < G_N_ELEMENTS (modes); i++) {
    g_autofree gchar *d = g_strdup_printf ("tapsource name=src max-new-tokens=8 ! ctxsettle ! "
        "dflashblock ! selector mode=%s", modes[i]);
    GstBuffer *buf;
    GstCaps *caps;
    GstHarness *h = stage_harness (d, &buf, &caps);

    /* a block proposes exactly block − 1 tokens */
    check_proposal_caps (caps, 8);
    check_proposal (buf, GST_DFLASH_SOURCE_BLOCK, 7);
    fail_unless_equals_int (gst_buffer_get_size (buf), 7 * sizeof (gint32));
    gst_buffer_unref (buf);
    gst_caps_unref (caps);
    gst_harness_teardown (h);
  }
}
GST_END_TEST;

GST_START_TEST (test_ngramdraft_harness)
{
  GstBuffer *buf;
  GstCaps *caps;
  GstHarness *h = stage_harness ("tapsource name=src max-new-tokens=8 ! ngramdraft", &buf, &caps);

  check_proposal_caps (caps, 8);
  check_proposal (buf, GST_DFLASH_SOURCE_CHAIN, 7);
  gst_buffer_unref (buf);
  gst_caps_unref (caps);
  gst_harness_teardown (h);

  /* the chain works without drafter weights (the block size is then the
   * default, 16), and max-draft bounds it */
  h = stage_harness ("tapsource name=src no-drafter=true max-new-tokens=8 ! ngramdraft max-draft=2", &buf, &caps);
  check_proposal_caps (caps, 16);
  check_proposal (buf, GST_DFLASH_SOURCE_CHAIN, 2);
  gst_buffer_unref (buf);
  gst_caps_unref (caps);
  gst_harness_teardown (h);

  /* draft-per-match bounds a proposal by the match it comes from: with
   * suffixes of at most 2 tokens and one token a matched token, at most 2 */
  h = stage_harness ("tapsource name=src max-new-tokens=8 ! ngramdraft max-n=2 draft-per-match=1",
                     &buf, &caps);
  check_proposal (buf, GST_DFLASH_SOURCE_CHAIN, 2);
  fail_unless (gst_buffer_get_size (buf) / sizeof (gint32) <= round_meta (buf)->match,
      "%" G_GSIZE_FORMAT " drafts after a match of %u", gst_buffer_get_size (buf) / sizeof (gint32),
      round_meta (buf)->match);
  gst_buffer_unref (buf);
  gst_caps_unref (caps);
  gst_harness_teardown (h);
}
GST_END_TEST;

/* The router in a harness: the policy picks the proposal, and a verdict
 * pushed into it reaches tapsource once, through the block's branch (the
 * chain's branch would bring it to tapsource a second time, through the
 * tee). */
GST_START_TEST (test_router_harness)
{
  const gchar *policies[] = { "block", "chain" };
  const GstDflashSource want[] = { GST_DFLASH_SOURCE_BLOCK, GST_DFLASH_SOURCE_CHAIN };

  for (guint i = 0; i < G_N_ELEMENTS (policies); i++) {
    g_autofree gchar *d = g_strdup_printf ("tapsource name=src max-new-tokens=8 ! tee name=t ! "
        "queue ! ctxsettle ! dflashblock ! selector ! router name=r policy=%s  "
        "t. ! queue ! ngramdraft ! r.chain", policies[i]);
    GstBuffer *buf;
    GstCaps *caps;
    GstHarness *h = stage_harness (d, &buf, &caps);

    check_proposal (buf, want[i], 7);
    gst_buffer_unref (buf);
    gst_caps_unref (caps);
    gst_harness_teardown (h);
  }
}
GST_END_TEST;

GST_START_TEST (test_router_one_chain_pad)
{
  GstElement *router = gst_element_factory_make ("router", NULL);
  GstBus *bus = gst_bus_new ();
  GstPad *chain, *again;
  GstMessage *msg;

  gst_element_set_bus (router, bus);
  chain = gst_element_request_pad_simple (router, "chain");
  fail_unless (chain != NULL);
  /* one chain drafter per router: a second request is refused, with a reason */
  again = gst_element_request_pad_simple (router, "chain");
  fail_unless (again == NULL);
  msg = gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR);
  fail_unless (msg != NULL, "the refused request posted no ERROR");
  {
    g_autoptr (GError) e = NULL;
    gst_message_parse_error (msg, &e, NULL);
    fail_unless (GST_MESSAGE_SRC (msg) == GST_OBJECT (router));
    fail_unless (g_error_matches (e, GST_CORE_ERROR, GST_CORE_ERROR_PAD), "%s", e->message);
    fail_unless (strstr (e->message, "already requested") != NULL, "%s", e->message);
  }
  gst_message_unref (msg);
  gst_element_release_request_pad (router, chain);
  gst_object_unref (chain);
  /* released, it can be requested again */
  chain = gst_element_request_pad_simple (router, "chain");
  fail_unless (chain != NULL);
  gst_element_release_request_pad (router, chain);
  gst_object_unref (chain);
  gst_element_set_bus (router, NULL);
  gst_object_unref (bus);
  gst_object_unref (router);
}
GST_END_TEST;

/* ------------------------------------------------------------ negotiation */

/* Every link of the speculative loop carries fixed caps that agree on the
 * model's numbers. */
GST_START_TEST (test_caps_fields)
{
  Run *r = run_new ("tapsource name=src max-new-tokens=4 ! ctxsettle name=cs ! dflashblock name=db ! "
      "selector name=sel ! verifier name=v ! fakesink name=out");
  struct {
    const gchar *element, *pad, *media;
    const gchar *fields[5];
  } links[] = {
    { "src", "src", GST_DFLASH_TAPS_CAPS, { "hidden", "tap-width", "vocab", "block", NULL } },
    { "cs", "src", GST_DFLASH_CONTEXT_CAPS, { "hidden", "vocab", "block", NULL } },
    { "db", "src", GST_DFLASH_BLOCK_CAPS, { "hidden", "vocab", "block", "width", NULL } },
    { "sel", "src", GST_DFLASH_PROPOSAL_CAPS, { "vocab", "block", NULL } },
    { "v", "tokens", GST_DFLASH_TOKENS_CAPS, { "vocab", NULL } },
  };
  const gint expect[] = { 64, 192, 1024, 8, 1024 };   /* hidden, tap-width, vocab, block, width */
  const gchar *names[] = { "hidden", "tap-width", "vocab", "block", "width" };

  run_to_eos (r);
  /* the caps stay on the pads after EOS, until READY */
  for (guint i = 0; i < G_N_ELEMENTS (links); i++) {
    GstElement *e = run_get (r, links[i].element);
    GstPad *pad = gst_element_get_static_pad (e, links[i].pad);
    GstCaps *caps = gst_pad_get_current_caps (pad);

    fail_unless (caps != NULL, "%s.%s has no caps", links[i].element, links[i].pad);
    fail_unless (gst_structure_has_name (gst_caps_get_structure (caps, 0), links[i].media),
        "%s.%s carries %s", links[i].element, links[i].pad,
        gst_structure_get_name (gst_caps_get_structure (caps, 0)));
    for (guint f = 0; links[i].fields[f]; f++)
      for (guint k = 0; k < G_N_ELEMENTS (names); k++)
        if (!strcmp (names[k], links[i].fields[f]))
          fail_unless_equals_int (caps_int (caps, names[k]), expect[k]);
    gst_caps_unref (caps);
    gst_object_unref (pad);
    gst_object_unref (e);
  }
  {
    GstElement *v = run_get (r, "v");
    GstPad *pad = gst_element_get_static_pad (v, "src");
    GstCaps *caps = gst_pad_get_current_caps (pad);
    fail_unless (gst_caps_is_fixed (caps));
    fail_unless_equals_string (gst_structure_get_string (gst_caps_get_structure (caps, 0), "format"), "utf8");
    gst_caps_unref (caps);
    gst_object_unref (pad);
    gst_object_unref (v);
  }
  run_free (r);
}
GST_END_TEST;

/* The router passes the proposal's caps on whole: the verifier checks the
 * vocabulary and takes the block size from them (the block pad's caps go
 * on as they are, not the bare template's). */
GST_START_TEST (test_caps_fields_routed)
{
  Run *r = run_new_printf (ROUTED, 4, "match");
  GstElement *router = run_get (r, "r");
  GstPad *pad = gst_element_get_static_pad (router, "src");
  GstCaps *caps;

  run_to_eos (r);
  caps = gst_pad_get_current_caps (pad);
  fail_unless (caps != NULL);
  check_proposal_caps (caps, 8);
  gst_caps_unref (caps);
  gst_object_unref (pad);
  gst_object_unref (router);
  run_free (r);
}
GST_END_TEST;

/* A stage fed caps that disagree with the model says which field. The
 * model comes as a context set on the pipeline, as an application would. */
static void
wrong_caps (const gchar *caps, const gchar *stage, const gchar *needle)
{
  GstContext *context = model_context ();
  Run *r = run_new_printf ("fakesrc num-buffers=1 ! capsfilter caps=\"%s\" ! %s ! fakesink", caps, stage);

  gst_element_set_context (r->pipeline, context);
  gst_context_unref (context);
  run_to_error (r, needle);
  run_free (r);
}

GST_START_TEST (test_ctxsettle_wrong_tap_width)
{
  wrong_caps (GST_DFLASH_TAPS_CAPS ", hidden=(int)64, tap-width=(int)7, vocab=(int)1024", "ctxsettle",
      "tap-width");
}
GST_END_TEST;

GST_START_TEST (test_dflashblock_wrong_block)
{
  wrong_caps (GST_DFLASH_CONTEXT_CAPS ", hidden=(int)64, vocab=(int)1024, block=(int)16", "dflashblock",
      "block is 16");
}
GST_END_TEST;

GST_START_TEST (test_selector_wrong_hidden)
{
  wrong_caps (GST_DFLASH_BLOCK_CAPS ", hidden=(int)32, vocab=(int)1024, block=(int)8, width=(int)1024",
      "selector", "hidden is 32");
}
GST_END_TEST;

GST_START_TEST (test_verifier_wrong_vocab)
{
  wrong_caps (GST_DFLASH_PROPOSAL_CAPS ", vocab=(int)7, block=(int)8", "verifier", "vocabulary of 7");
}
GST_END_TEST;

/* A capsfilter forcing another tap-width between tapsource and ctxsettle
 * must fail naming the field, not with a bare not-negotiated. Fails until
 * tapsource says what disagreed when its negotiation fails. */
GST_START_TEST (test_capsfilter_tap_width)
{
  Run *r = run_new ("tapsource ! capsfilter caps=\"" GST_DFLASH_TAPS_CAPS ", tap-width=(int)7\" ! "
      "ctxsettle ! dflashblock ! selector ! verifier ! fakesink");

  run_to_error (r, "tap-width");
  run_free (r);
}
GST_END_TEST;

GST_START_TEST (test_narrow_head_width)
{
  /* the selector re-scores 4 candidates a row: 2 logits cannot hold them */
  Run *r = run_new ("tapsource ! ctxsettle ! dflashblock head-width=2 ! selector ! verifier ! fakesink");

  run_to_error (r, "head-width 2");
  run_free (r);
}
GST_END_TEST;

GST_START_TEST (test_ngram_min_above_max)
{
  Run *r = run_new ("tapsource ! ngramdraft min-n=5 max-n=2 ! verifier ! fakesink");

  run_to_error (r, "min-n 5");
  run_free (r);
}
GST_END_TEST;

GST_START_TEST (test_taps_do_not_link_to_block)
{
  GstElement *src = gst_element_factory_make ("tapsource", NULL);
  GstElement *block = gst_element_factory_make ("dflashblock", NULL);
  GstElement *bin = gst_pipeline_new (NULL);
  GError *error = NULL;
  GstElement *p;

  /* taps are not a drafter context: the templates do not intersect */
  gst_bin_add_many (GST_BIN (bin), src, block, NULL);
  fail_if (gst_element_link (src, block));
  gst_object_unref (bin);

  p = gst_parse_launch ("tapsource ! dflashblock ! selector ! verifier ! fakesink", &error);
  fail_unless (error != NULL);
  fail_unless (g_error_matches (error, GST_PARSE_ERROR, GST_PARSE_ERROR_LINK), "%s", error->message);
  g_clear_error (&error);
  gst_clear_object (&p);

  /* and the verifier takes no drafter context either */
  p = gst_parse_launch ("tapsource ! ctxsettle ! verifier ! fakesink", &error);
  fail_unless (g_error_matches (error, GST_PARSE_ERROR, GST_PARSE_ERROR_LINK));
  g_clear_error (&error);
  gst_clear_object (&p);
}
GST_END_TEST;

/* A stage with no tapsource upstream asks the application for the model
 * (NEED_CONTEXT), then fails naming what it needs. */
GST_START_TEST (test_no_model)
{
  Run *r = run_new ("fakesrc num-buffers=1 ! capsfilter caps=\"" GST_DFLASH_PROPOSAL_CAPS
      ", vocab=(int)1024, block=(int)8\" ! verifier ! fakesink");
  GstBus *bus = gst_element_get_bus (r->pipeline);
  GstMessage *msg;
  const gchar *type = NULL;

  run_to_error (r, "no dflash model found");
  msg = gst_bus_pop_filtered (bus, GST_MESSAGE_NEED_CONTEXT);
  /* the NEED_CONTEXT came before the ERROR; run_wait left it on the bus */
  if (msg) {
    fail_unless (gst_message_parse_context_type (msg, &type));
    fail_unless_equals_string (type, "dflash.model");
    gst_message_unref (msg);
  }
  gst_object_unref (bus);
  run_free (r);
}
GST_END_TEST;

/* An application answers NEED_CONTEXT with a model it loaded: the stage
 * takes it, and then refuses a buffer that is not a dflash round. */
static GstBusSyncReply
answer_need_context (GstBus *bus, GstMessage *msg, gpointer data)
{
  const gchar *type;

  if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_NEED_CONTEXT && gst_message_parse_context_type (msg, &type)
      && !strcmp (type, "dflash.model")) {
    gst_element_set_context (GST_ELEMENT (GST_MESSAGE_SRC (msg)), data);
    g_atomic_int_set ((gint *) g_object_get_data (G_OBJECT (bus), "answered"), 1);
  }
  return GST_BUS_PASS;
}

GST_START_TEST (test_need_context_answered)
{
  GstContext *context = model_context ();
  Run *r = run_new ("fakesrc num-buffers=1 sizetype=fixed sizemax=4 ! capsfilter caps=\"" GST_DFLASH_TAPS_CAPS
      ", hidden=(int)64, tap-width=(int)192, vocab=(int)1024\" ! ctxsettle ! fakesink");
  GstBus *bus = gst_element_get_bus (r->pipeline);
  gint answered = 0;

  g_object_set_data (G_OBJECT (bus), "answered", &answered);
  gst_bus_set_sync_handler (bus, answer_need_context, context, NULL);
  run_to_error (r, "without a dflash round");
  fail_unless_equals_int (g_atomic_int_get (&answered), 1);
  gst_bus_set_sync_handler (bus, NULL, NULL, NULL);
  gst_object_unref (bus);
  run_free (r);
  gst_context_unref (context);
}
GST_END_TEST;

/* ---------------------------------------------------------------- verdict */

/* The verdict loop without the router: tapsource hears each round's
 * verdict once and the run ends at max-new-tokens with the plain text. */
GST_START_TEST (test_verdict_loop)
{
  g_autofree gchar *want = dfl_test_reference_text (DEFAULT_PROMPT, 48);
  Run *r = run_new_printf (SPECULATIVE, 48);
  Flow flow = { 0, 0 };
  g_autofree gchar *text = NULL;

  watch_flow (r, "src", &flow);
  run_to_eos (r);
  text = run_text (r);
  assert_text (text, want, "speculative");
  fail_unless (flow.buffers > 0);
  fail_unless_equals_int (flow.verdicts, flow.buffers);
  fail_unless_equals_int (run_count (r, "dflash-round"), flow.buffers);
  fail_unless_equals_int64 (summary_int64 (r, "new-tokens"), 48);
  run_free (r);
}
GST_END_TEST;

/* An application that wants the ids only: the text pad stays unlinked.
 * Not being linked is no failure of the round (the verifier says so of its
 * tokens pad): every round is verified, every token comes out as an id.
 * Fails (a critical, then a crash) until the verifier ignores NOT_LINKED on
 * its text pad and sends no verdict for a round it did not verify. */
GST_START_TEST (test_tokens_only)
{
  Run *r = run_new ("tapsource max-new-tokens=20 ! ctxsettle ! dflashblock ! selector ! verifier name=v  "
      "v.tokens ! fakesink name=out");

  run_to_eos (r);
  g_mutex_lock (&r->lock);
  fail_unless_equals_int (r->text->len, 20 * sizeof (gint32));
  g_mutex_unlock (&r->lock);
  fail_unless_equals_int64 (summary_int64 (r, "new-tokens"), 20);
  run_free (r);
}
GST_END_TEST;

GST_START_TEST (test_one_token)
{
  g_autofree gchar *want = dfl_test_reference_text (DEFAULT_PROMPT, 1);
  Run *r = run_new_printf (SPECULATIVE, 1);
  g_autofree gchar *text = NULL;

  /* the first token comes from the prompt's pass: no round is verified */
  run_to_eos (r);
  text = run_text (r);
  assert_text (text, want, "max-new-tokens=1");
  fail_unless_equals_int64 (summary_int64 (r, "new-tokens"), 1);
  run_free (r);
}
GST_END_TEST;

/* The router under each policy: the text is the plain decoding's, exactly
 * max-new-tokens long, and tapsource hears one verdict a round although
 * the round went down two branches. */
static void
routed (const gchar *policy, gint max_new, gboolean all_block, gboolean all_chain)
{
  g_autofree gchar *want = dfl_test_reference_text (DEFAULT_PROMPT, max_new);
  Run *r = run_new_printf (ROUTED, max_new, policy);
  Flow flow = { 0, 0 };
  g_autofree gchar *text = NULL;
  GstElement *router;
  guint64 block_rounds = 0, chain_rounds = 0;
  guint rounds;

  watch_flow (r, "src", &flow);
  run_to_eos (r);
  text = run_text (r);
  assert_text (text, want, policy);
  fail_unless_equals_int64 (summary_int64 (r, "new-tokens"), max_new);
  fail_unless_equals_int (flow.verdicts, flow.buffers);
  rounds = run_count (r, "dflash-round");
  fail_unless_equals_int (rounds, flow.buffers);
  router = run_get (r, "r");
  g_object_get (router, "block-rounds", &block_rounds, "chain-rounds", &chain_rounds, NULL);
  gst_object_unref (router);
  fail_unless_equals_int (block_rounds + chain_rounds, rounds);
  if (all_block)
    fail_unless_equals_int (chain_rounds, 0);
  if (all_chain)
    fail_unless_equals_int (block_rounds, 0);
  for (guint i = 0; i < r->messages->len; i++) {
    const GstStructure *s = g_ptr_array_index (r->messages, i);
    if (gst_structure_has_name (s, "dflash-round") && (all_block || all_chain))
      fail_unless_equals_string (gst_structure_get_string (s, "source"), all_block ? "block" : "chain");
  }
  run_free (r);
}

GST_START_TEST (test_routed_match)
{
  routed ("match", 64, FALSE, FALSE);
}
GST_END_TEST;

GST_START_TEST (test_routed_auto)
{
  /* the fixture's sidecar has a fitted router */
  routed ("auto", 48, FALSE, FALSE);
}
GST_END_TEST;

GST_START_TEST (test_routed_block)
{
  routed ("block", 32, TRUE, FALSE);
}
GST_END_TEST;

GST_START_TEST (test_routed_chain)
{
  routed ("chain", 32, FALSE, TRUE);
}
GST_END_TEST;

/* policy=cost: lossless like the others; with probe-every=4 the fourth
 * round below match-min goes to the block (the chain goes first, the block
 * has no figure yet), and after the run both figures are real rates. */
GST_START_TEST (test_routed_cost)
{
  const gint max_new = 64;
  g_autofree gchar *want = dfl_test_reference_text (DEFAULT_PROMPT, max_new);
  Run *r = run_new_printf (ROUTED, max_new, "cost probe-every=4");
  g_autofree gchar *text = NULL;
  GstElement *router;
  guint64 block_rounds = 0, chain_rounds = 0;
  gdouble block_rate = 0, chain_rate = 0;

  routed ("cost", 48, FALSE, FALSE);
  run_to_eos (r);
  text = run_text (r);
  assert_text (text, want, "policy=cost probe-every=4");
  router = run_get (r, "r");
  g_object_get (router, "block-rounds", &block_rounds, "chain-rounds", &chain_rounds,
                "block-tokens-per-second", &block_rate, "chain-tokens-per-second", &chain_rate, NULL);
  gst_object_unref (router);
  fail_unless_equals_int (block_rounds + chain_rounds, run_count (r, "dflash-round"));
  fail_unless (block_rounds > 0, "no block round: probe-every=4 tries it at the fourth decision");
  fail_unless (block_rate > 0 && block_rate < 1e7, "block-tokens-per-second %g", block_rate);
  fail_unless (chain_rate >= 0 && chain_rate < 1e7, "chain-tokens-per-second %g", chain_rate);
  run_free (r);
}
GST_END_TEST;

/* The block arm's seconds in a figures file (its "cpu" member). */
static GArray *
figures_block_seconds (const gchar *path)
{
  g_autofree gchar *text = NULL;
  g_autoptr (GError) error = NULL;
  GArray *secs = g_array_new (FALSE, FALSE, sizeof (gdouble));
  const cJSON *format, *a, *v;
  cJSON *root;

  fail_unless (g_file_get_contents (path, &text, NULL, &error), "%s: %s", path,
      error ? error->message : "");
  root = cJSON_Parse (text);
  fail_unless (root != NULL, "%s is not JSON: %s", path, text);
  format = cJSON_GetObjectItemCaseSensitive (root, "format");
  fail_unless (cJSON_IsString (format), "%s has no format", path);
  fail_unless_equals_string (format->valuestring, "gst-dflash route figures");
  a = cJSON_GetObjectItemCaseSensitive (cJSON_GetObjectItemCaseSensitive (
          cJSON_GetObjectItemCaseSensitive (root, "cpu"), "block"), "seconds");
  fail_unless (cJSON_IsArray (a), "%s has no cpu.block.seconds: %s", path, text);
  cJSON_ArrayForEach (v, a) {
    gdouble d = v->valuedouble;
    g_array_append_val (secs, d);
  }
  cJSON_Delete (root);
  return secs;
}

/* Run to EOS, taking the WARNINGs it posts (their messages and debug). */
static gchar *
run_to_eos_warned (Run *r)
{
  GstBus *bus = gst_element_get_bus (r->pipeline);
  GString *warnings = g_string_new (NULL);

  fail_unless_equals_int (gst_element_set_state (r->pipeline, GST_STATE_PLAYING),
      GST_STATE_CHANGE_ASYNC);
  for (;;) {
    GstMessage *msg = gst_bus_timed_pop_filtered (bus, 120 * GST_SECOND,
        GST_MESSAGE_EOS | GST_MESSAGE_ERROR | GST_MESSAGE_WARNING);
    fail_unless (msg != NULL, "no EOS in 120 s");
    if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_WARNING) {
      g_autoptr (GError) w = NULL;
      g_autofree gchar *debug = NULL;
      gst_message_parse_warning (msg, &w, &debug);
      g_string_append_printf (warnings, "%s: %s (%s)\n", GST_MESSAGE_SRC_NAME (msg), w->message,
          debug ? debug : "");
    } else if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR) {
      g_autoptr (GError) e = NULL;
      gst_message_parse_error (msg, &e, NULL);
      fail ("ERROR from %s: %s", GST_MESSAGE_SRC_NAME (msg), e->message);
    } else {
      gst_message_unref (msg);
      break;
    }
    gst_message_unref (msg);
  }
  gst_object_unref (bus);
  return g_string_free (warnings, FALSE);
}

/* figures-file: the figures are written when the router stops (its folder
 * made), read back when the next one starts on the same file (the next
 * run's block rounds come after the first's), and a file that is not
 * figures is said in a WARNING that names it, the run lossless all the
 * same and the file written anew at its end. */
GST_START_TEST (test_router_figures_file)
{
  const gint max_new = 64;
  g_autofree gchar *want = dfl_test_reference_text (DEFAULT_PROMPT, max_new);
  g_autofree gchar *dir = g_dir_make_tmp ("dflash-figures-XXXXXX", NULL);
  g_autofree gchar *path = g_build_filename (dir, "route", "pair.json", NULL);
  g_autofree gchar *policy = g_strdup_printf ("cost probe-every=4 figures-file=\"%s\"", path);
  g_autoptr (GArray) first = NULL, second = NULL, fresh = NULL;
  g_autofree gchar *warnings = NULL, *text = NULL;
  Run *r;

  for (gint run = 0; run < 2; run++) {
    r = run_new_printf (ROUTED, max_new, policy);
    run_to_eos (r);
    text = run_text (r);
    assert_text (text, want, "figures-file");
    g_clear_pointer (&text, g_free);
    run_free (r);
    if (run == 0)
      first = figures_block_seconds (path);
    else
      second = figures_block_seconds (path);
  }
  fail_unless (first->len > 0, "the first run wrote no block round");
  fail_unless (second->len >= first->len, "the second run's figures lost the first's");
  for (guint i = 0; i < first->len && second->len < 31; i++)
    fail_unless (g_array_index (second, gdouble, i) == g_array_index (first, gdouble, i),
        "block seconds %u: %g read back as %g", i, g_array_index (first, gdouble, i),
        g_array_index (second, gdouble, i));

  fail_unless (g_file_set_contents (path, "{\"format\": \"gst-dflash route figures\", "
          "\"version\": 1, \"cpu\": {\"favoured\": \"sometimes\"}}", -1, NULL));
  r = run_new_printf (ROUTED, max_new, policy);
  warnings = run_to_eos_warned (r);
  text = run_text (r);
  assert_text (text, want, "figures-file, a bad file");
  run_free (r);
  fail_unless (strstr (warnings, path) && strstr (warnings, "\"favoured\" is \"sometimes\""),
      "the warning does not name the file and the member: %s", warnings);
  fresh = figures_block_seconds (path);
  fail_unless (fresh->len > 0, "the bad file was not written afresh");
  g_unlink (path);
  g_clear_pointer (&text, g_free);
  text = g_path_get_dirname (path);
  g_rmdir (text);
  g_rmdir (dir);
}
GST_END_TEST;

/* policy=cost weighs the block's drafting, which only decide-first lets
 * it see: without it the router refuses, naming the property. */
GST_START_TEST (test_router_cost_needs_decide_first)
{
  Run *r = run_new_printf (ROUTED, 16, "cost decide-first=false");

  run_to_error (r, "decide-first=true");
  run_free (r);
}
GST_END_TEST;

/* The chain's proposal for another round than the block's is an error the
 * router names; a probe shifts the chain branch's round number. */
static GstPadProbeReturn
shift_round (GstPad *pad, GstPadProbeInfo *info, gpointer data)
{
  GstBuffer *buf = gst_buffer_make_writable (GST_PAD_PROBE_INFO_BUFFER (info));
  GstDflashRoundMeta *m = (GstDflashRoundMeta *) round_meta (buf);

  m->round += 1;
  GST_PAD_PROBE_INFO_DATA (info) = buf;
  return GST_PAD_PROBE_OK;
}

GST_START_TEST (test_router_round_mismatch)
{
  Run *r = run_new_printf (ROUTED, 16, "match");
  GstElement *ng = run_get (r, "ng");
  GstPad *pad = gst_element_get_static_pad (ng, "src");

  gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_BUFFER, shift_round, NULL, NULL);
  run_to_error (r, "not of the same round");
  gst_object_unref (pad);
  gst_object_unref (ng);
  run_free (r);
}
GST_END_TEST;


/* The router decides each round when the chain's proposal arrives and
 * tells dflashblock, which drafts only the block's rounds: the block is
 * skipped on exactly the rounds the chain got, the text is still the plain
 * decoding's, and with decide-first off every round is drafted. Under
 * decide-first ctxsettle only queues every round's rows (the block settles
 * them), and settles them itself otherwise. */
#define ROUTED_FIRST "tapsource name=src max-new-tokens=%d ! tee name=t ! queue ! ctxsettle name=ctx ! " \
    "dflashblock name=blk ! selector ! router name=r policy=%s decide-first=%s ! verifier name=v ! " \
    "fakesink name=out  t. ! queue ! ngramdraft name=ng ! r.chain"
/* pipelines/routed.pipeline's shape: the chain's branch first, unqueued, so
 * the route is there before the block's branch sees the round */
#define ROUTED_CHAIN_FIRST "tapsource name=src max-new-tokens=%d ! tee name=t ! ngramdraft name=ng ! " \
    "r.chain  t. ! queue ! ctxsettle name=ctx ! dflashblock name=blk ! selector ! " \
    "router name=r policy=%s decide-first=%s ! verifier name=v ! fakesink name=out"

static void
routed_first_in (const gchar *shape, const gchar *policy, gboolean first)
{
  const gint max_new = 40;
  g_autofree gchar *want = dfl_test_reference_text (DEFAULT_PROMPT, max_new);
  Run *r = run_new_printf (shape, max_new, policy, first ? "true" : "false");
  g_autofree gchar *text = NULL;
  GstElement *router, *blk, *ctx;
  guint64 block_rounds = 0, chain_rounds = 0, skipped = 0, queued = 0;
  guint rounds;

  run_to_eos (r);
  text = run_text (r);
  assert_text (text, want, policy);
  rounds = run_count (r, "dflash-round");
  router = run_get (r, "r");
  blk = run_get (r, "blk");
  g_object_get (router, "block-rounds", &block_rounds, "chain-rounds", &chain_rounds, NULL);
  g_object_get (blk, "skipped-rounds", &skipped, NULL);
  ctx = run_get (r, "ctx");
  g_object_get (ctx, "queued-rounds", &queued, NULL);
  gst_object_unref (router);
  gst_object_unref (blk);
  gst_object_unref (ctx);
  fail_unless_equals_int (block_rounds + chain_rounds, rounds);
  fail_unless_equals_int (queued, first ? rounds : 0);
  if (first) {
    fail_unless_equals_int (skipped, chain_rounds);
    if (!g_strcmp0 (policy, "chain"))
      fail_unless_equals_int (skipped, rounds);
    if (!g_strcmp0 (policy, "block"))
      fail_unless_equals_int (skipped, 0);
  } else {
    fail_unless_equals_int (skipped, 0);
  }
  run_free (r);
}

static void
routed_first (const gchar *policy, gboolean first)
{
  routed_first_in (ROUTED_FIRST, policy, first);
}

GST_START_TEST (test_routed_decide_first)
{
  routed_first ("chain", TRUE);
  routed_first ("match", TRUE);
  routed_first ("block", TRUE);
  routed_first ("cost", TRUE);
  routed_first ("chain", FALSE);
  routed_first_in (ROUTED_CHAIN_FIRST, "cost", TRUE);
  routed_first_in (ROUTED_CHAIN_FIRST, "match", TRUE);
  routed_first_in (ROUTED_CHAIN_FIRST, "block", TRUE);
}
GST_END_TEST;

/* Without a queue on the block's branch the tee cannot give the chain its
 * round while dflashblock waits for the route: after route-timeout it
 * drafts anyway, warns once naming the property, and the run ends with the
 * plain decoding's text (never a hang, never a lost round). */
GST_START_TEST (test_decide_first_without_queue)
{
  const gint max_new = 12;
  g_autofree gchar *want = dfl_test_reference_text (DEFAULT_PROMPT, max_new);
  Run *r = run_new_printf ("tapsource name=src max-new-tokens=%d ! tee name=t ! ctxsettle ! "
      "dflashblock route-timeout=50 ! selector ! router name=r policy=chain ! verifier name=v ! "
      "fakesink name=out  t. ! queue ! ngramdraft ! r.chain", max_new);
  GstBus *bus = gst_element_get_bus (r->pipeline);
  gint64 deadline = g_get_monotonic_time () + (gint64) watchdog_s * G_USEC_PER_SEC;
  guint warnings = 0;
  gboolean eos = FALSE;
  g_autofree gchar *text = NULL;

  fail_unless (gst_element_set_state (r->pipeline, GST_STATE_PLAYING) != GST_STATE_CHANGE_FAILURE);
  while (!eos && g_get_monotonic_time () < deadline) {
    GstMessage *msg = gst_bus_timed_pop_filtered (bus, 100 * GST_MSECOND,
        GST_MESSAGE_EOS | GST_MESSAGE_ERROR | GST_MESSAGE_WARNING);
    if (!msg)
      continue;
    if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_WARNING) {
      g_autoptr (GError) w = NULL;
      gst_message_parse_warning (msg, &w, NULL);
      fail_unless (strstr (w->message, "route-timeout=50") != NULL, "warning: %s", w->message);
      warnings++;
    } else if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR) {
      g_autoptr (GError) e = NULL;
      gst_message_parse_error (msg, &e, NULL);
      fail ("error from %s: %s", GST_MESSAGE_SRC_NAME (msg), e->message);
    } else {
      eos = TRUE;
    }
    gst_message_unref (msg);
  }
  gst_object_unref (bus);
  fail_unless (eos, "no EOS within %u s", watchdog_s);
  fail_unless_equals_int (warnings, 1);
  text = run_text (r);
  assert_text (text, want, "decide-first without a queue");
  run_free (r);
  /* the warning was expected: the next test starts clean */
  dfl_test_reset_element_warnings ();
}
GST_END_TEST;

/* min-confidence cuts the block's drafts and changes nothing in the text:
 * at 1 no draft survives (every probability is below 1), so each round is
 * a plain decoding step; lower, the drafts are at most block − 1 long. */
GST_START_TEST (test_selector_min_confidence)
{
  const gint max_new = 24;
  const gchar *floors[] = { "1.0", "0.3" };
  g_autofree gchar *want = dfl_test_reference_text (DEFAULT_PROMPT, max_new);

  for (guint i = 0; i < G_N_ELEMENTS (floors); i++) {
    Run *r = run_new_printf ("tapsource name=src max-new-tokens=%d ! ctxsettle ! dflashblock ! "
        "selector min-confidence=%s ! verifier name=v ! fakesink name=out", max_new, floors[i]);
    g_autofree gchar *text = NULL;
    guint drafted = 0;

    run_to_eos (r);
    text = run_text (r);
    assert_text (text, want, floors[i]);
    for (guint m = 0; m < r->messages->len; m++) {
      const GstStructure *st = g_ptr_array_index (r->messages, m);
      gint d = -1;
      if (!gst_structure_has_name (st, "dflash-round"))
        continue;
      fail_unless (gst_structure_get_int (st, "drafted", &d));
      fail_unless (d >= 0 && d <= 7, "a round drafted %d", d);
      drafted += d;
    }
    if (i == 0)
      fail_unless_equals_int (drafted, 0);
    run_free (r);
  }
}
GST_END_TEST;

/* ------------------------------------------------------- flush and state */

/* Holds the `at`-th text buffer on the verifier's src pad: the pipeline
 * stops mid-round, before the verifier sends that round's verdict. The
 * first text is round 0's first token, pushed before round 0 is verified. */
typedef struct {
  GMutex lock;
  GCond cond;
  gboolean blocked;
  gulong id;
  GstPad *pad;
  guint at, seen;
} Hold;

static GstPadProbeReturn
hold_probe (GstPad *pad, GstPadProbeInfo *info, gpointer data)
{
  Hold *h = data;

  /* PASS lets this buffer through and blocks on the next one */
  if (++h->seen < h->at)
    return GST_PAD_PROBE_PASS;
  g_mutex_lock (&h->lock);
  h->blocked = TRUE;
  g_cond_signal (&h->cond);
  g_mutex_unlock (&h->lock);
  return GST_PAD_PROBE_OK;
}

static void
hold_start (Hold *h, Run *r, guint at)
{
  GstElement *v = run_get (r, "v");

  g_mutex_init (&h->lock);
  g_cond_init (&h->cond);
  h->blocked = FALSE;
  h->at = at;
  h->seen = 0;
  h->pad = gst_element_get_static_pad (v, "src");
  h->id = gst_pad_add_probe (h->pad, GST_PAD_PROBE_TYPE_BLOCK | GST_PAD_PROBE_TYPE_BUFFER, hold_probe, h,
      NULL);
  gst_object_unref (v);
}

static void
hold_wait (Hold *h)
{
  gint64 deadline = g_get_monotonic_time () + (gint64) watchdog_s * G_USEC_PER_SEC;

  g_mutex_lock (&h->lock);
  while (!h->blocked)
    if (!g_cond_wait_until (&h->cond, &h->lock, deadline))
      break;
  g_mutex_unlock (&h->lock);
  fail_unless (h->blocked, "the pipeline never got to its first text");
}

static void
hold_release (Hold *h)
{
  if (h->id)
    gst_pad_remove_probe (h->pad, h->id);
  h->id = 0;
  gst_clear_object (&h->pad);
  g_cond_clear (&h->cond);
  g_mutex_clear (&h->lock);
}

/* After an interruption the pipeline must be usable again: from NULL it
 * plays to EOS with the plain decoding's text. */
static void
restart_from_null (Run *r, const gchar *want)
{
  g_autofree gchar *text = NULL;

  fail_unless_equals_int (gst_element_set_state (r->pipeline, GST_STATE_NULL), GST_STATE_CHANGE_SUCCESS);
  run_clear (r);
  run_to_eos (r);
  text = run_text (r);
  assert_text (text, want, "the run after a restart from NULL");
}

static void
flushing_seek_mid_run (const char *desc)
{
  g_autofree gchar *want = dfl_test_reference_text (DEFAULT_PROMPT, 48);
  Run *r = run_new_printf (desc, 48);
  Hold hold;
  gboolean seeked;
  RunEnd end;

  hold_start (&hold, r, 1);
  fail_if (gst_element_set_state (r->pipeline, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE);
  hold_wait (&hold);
  /* a generator need not seek; but asked to, it must not wedge the loop */
  seeked = gst_element_seek_simple (r->pipeline, GST_FORMAT_TIME, GST_SEEK_FLAG_FLUSH, 0);
  hold_release (&hold);
  end = run_wait (r, FLUSH_WATCHDOG_S);
  fail_unless (end == RUN_EOS, "after a flushing seek (%s) the run ended with %s: %s",
      seeked ? "accepted" : "refused", run_end_name (end), r->error ? r->error : "");
  if (!seeked) {
    /* a refused seek changes nothing: the whole text arrives */
    g_autofree gchar *text = run_text (r);
    assert_text (text, want, "after a refused seek");
  }
  restart_from_null (r, want);
  run_free (r);
}

GST_START_TEST (test_flushing_seek_mid_run)
{
  flushing_seek_mid_run (SPECULATIVE);
}
GST_END_TEST;

GST_START_TEST (test_flushing_seek_mid_run_batched)
{
  flushing_seek_mid_run (SPECULATIVE_BATCHED);
}
GST_END_TEST;

/* flush-start and flush-stop sent to tapsource while a round is in the
 * loop: the round's verdict is lost in the flush, and the loop must still
 * come to EOS (restarting or resuming its sequences). Fails (the watchdog)
 * until tapsource forgets or restarts its running sequences on a flush. */
static void
flush_events_mid_run (const char *desc)
{
  g_autofree gchar *want = dfl_test_reference_text (DEFAULT_PROMPT, 48);
  Run *r = run_new_printf (desc, 48);
  GstElement *src = run_get (r, "src");
  Hold hold;
  RunEnd end;

  hold_start (&hold, r, 1);
  fail_if (gst_element_set_state (r->pipeline, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE);
  hold_wait (&hold);
  fail_unless (gst_element_send_event (src, gst_event_new_flush_start ()));
  hold_release (&hold);
  fail_unless (gst_element_send_event (src, gst_event_new_flush_stop (TRUE)));
  end = run_wait (r, FLUSH_WATCHDOG_S);
  fail_unless (end == RUN_EOS, "after flush-start/flush-stop the run ended with %s: %s",
      run_end_name (end), r->error ? r->error : "");
  gst_object_unref (src);
  restart_from_null (r, want);
  run_free (r);
}

GST_START_TEST (test_flush_events_mid_run)
{
  flush_events_mid_run (SPECULATIVE);
}
GST_END_TEST;

GST_START_TEST (test_flush_events_mid_run_batched)
{
  flush_events_mid_run (SPECULATIVE_BATCHED);
}
GST_END_TEST;

/* To NULL while a round is held in the verifier, then PLAYING again. */
static void
null_mid_round (guint at)
{
  g_autofree gchar *want = dfl_test_reference_text (DEFAULT_PROMPT, 48);
  Run *r = run_new ("tapsource name=src max-new-tokens=48 ! queue ! ctxsettle ! queue ! dflashblock ! "
      "selector ! queue ! verifier name=v ! fakesink name=out");
  Hold hold;

  hold_start (&hold, r, at);
  fail_if (gst_element_set_state (r->pipeline, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE);
  hold_wait (&hold);
  fail_unless_equals_int (gst_element_set_state (r->pipeline, GST_STATE_NULL), GST_STATE_CHANGE_SUCCESS);
  hold_release (&hold);
  restart_from_null (r, want);
  fail_unless_equals_int64 (summary_int64 (r, "new-tokens"), 48);
  run_free (r);
}

GST_START_TEST (test_null_mid_round)
{
  null_mid_round (3);
}
GST_END_TEST;

/* Held on round 0's first token: the round is not verified yet when the
 * state change makes the push fail. Fails (often, not always: it races
 * the verifier's sink pad deactivation) until the verifier sends no verdict
 * for a round it did not verify, like test_tokens_only. */
GST_START_TEST (test_null_in_first_round)
{
  null_mid_round (1);
}
GST_END_TEST;

/* After EOS, from NULL and from READY: the same text, the same figures. */
GST_START_TEST (test_restart_after_eos)
{
  g_autofree gchar *want = dfl_test_reference_text (DEFAULT_PROMPT, 40);
  Run *r = run_new_printf (SPECULATIVE, 40);
  g_autofree gchar *text = NULL;
  gint64 rounds;

  run_to_eos (r);
  text = run_text (r);
  assert_text (text, want, "the first run");
  rounds = summary_int64 (r, "rounds");
  restart_from_null (r, want);
  fail_unless_equals_int64 (summary_int64 (r, "rounds"), rounds);

  fail_unless_equals_int (gst_element_set_state (r->pipeline, GST_STATE_READY), GST_STATE_CHANGE_SUCCESS);
  run_clear (r);
  run_to_eos (r);
  g_free (text);
  text = run_text (r);
  assert_text (text, want, "the run after a restart from READY");
  fail_unless_equals_int64 (summary_int64 (r, "rounds"), rounds);
  run_free (r);
}
GST_END_TEST;

/* ----------------------------------------------------------------- errors */

GST_START_TEST (test_model_missing)
{
  Run *r = run_new ("tapsource model=/nonexistent/qwen3 ! verifier ! fakesink");

  fail_unless (run_to_error (r, "/nonexistent/qwen3"), "the state change did not fail");
  run_free (r);
}
GST_END_TEST;

GST_START_TEST (test_sidecar_for_another_target)
{
  g_autofree gchar *model = g_strdup (fixture ("f32-untied"));
  g_autofree gchar *sidecar = g_strdup_printf ("%s/dflash.safetensors", fixture ("bf16-tied"));
  Run *r = run_new_printf ("tapsource model=\"%s\" drafter=\"%s\" ! ctxsettle ! dflashblock ! selector ! "
      "verifier ! fakesink", model, sidecar);

  fail_unless (run_to_error (r, "dflash.safetensors"), "the state change did not fail");
  run_free (r);
}
GST_END_TEST;

GST_START_TEST (test_prompts_file_missing)
{
  Run *r = run_new ("tapsource prompts-file=/nonexistent/prompts.txt ! verifier ! fakesink");

  fail_unless (run_to_error (r, "/nonexistent/prompts.txt"));
  run_free (r);
}
GST_END_TEST;

GST_START_TEST (test_prompts_file_empty)
{
  g_autofree gchar *path = NULL;
  gint fd = g_file_open_tmp ("dflash-prompts-XXXXXX.txt", &path, NULL);
  Run *r;

  fail_unless (fd >= 0);
  fail_unless (write (fd, "\n\n", 2) == 2);
  close (fd);
  r = run_new_printf ("tapsource prompts-file=\"%s\" ! verifier ! fakesink", path);
  fail_unless (run_to_error (r, "no prompts"));
  run_free (r);
  g_unlink (path);
}
GST_END_TEST;

GST_START_TEST (test_tokens_bad)
{
  Run *r = run_new ("tapsource tokens=\"1,x,3\" ! verifier ! fakesink");

  fail_unless (run_to_error (r, "'x'"));
  run_free (r);
  r = run_new ("tapsource tokens=\"5,1024\" ! verifier ! fakesink");
  fail_unless (run_to_error (r, "'1024'"));
  run_free (r);
}
GST_END_TEST;

/* An application that fixes a property after a failed start and plays
 * again gets the run it asked for (and, under LSan, leaks nothing of the
 * failed start). */
GST_START_TEST (test_restart_after_error)
{
  g_autofree gchar *want = dfl_test_reference_text (DEFAULT_PROMPT, 16);
  Run *r = run_new ("tapsource name=src max-new-tokens=16 tokens=\"1,x\" ! verifier ! fakesink name=out");
  GstElement *src = run_get (r, "src");
  g_autofree gchar *text = NULL;

  run_to_error (r, "'x'");
  fail_unless_equals_int (gst_element_set_state (r->pipeline, GST_STATE_NULL), GST_STATE_CHANGE_SUCCESS);
  g_object_set (src, "tokens", NULL, NULL);
  run_clear (r);
  run_to_eos (r);
  text = run_text (r);
  assert_text (text, want, "the run after a failed start");
  gst_object_unref (src);
  run_free (r);
}
GST_END_TEST;

GST_START_TEST (test_too_long)
{
  /* prompt plus max-new-tokens past the target's positions: an error before
   * any round, not a run that fails half way */
  Run *r = run_new ("tapsource max-new-tokens=1000000 ! verifier ! fakesink");
  GString *tokens = g_string_new ("1");

  /* the error comes from the element and names both numbers and what
   * would fit */
  run_to_error (r, "max_position_embeddings 512");
  fail_unless_equals_string (r->error_from, "tapsource0");
  fail_unless (strstr (r->error, "prompt 1 has ") != NULL, "%s", r->error);
  fail_unless (strstr (r->error, "max-new-tokens 1000000") != NULL, "%s", r->error);
  fail_unless (strstr (r->error, "max-new-tokens may be at most ") != NULL, "%s", r->error);
  run_free (r);
  /* a prompt that alone fills the context names its length and the most
   * accepted */
  for (gint i = 1; i < 600; i++)
    g_string_append (tokens, ",1");
  r = run_new_printf ("tapsource max-new-tokens=1 tokens=\"%s\" ! verifier ! fakesink", tokens->str);
  run_to_error (r, "prompt 1 has 600 tokens, more than the context");
  fail_unless (strstr (r->error, "at most ") != NULL, "%s", r->error);
  run_free (r);
  g_string_free (tokens, TRUE);
}
GST_END_TEST;

/* A draft outside the vocabulary reaching the verifier (a broken drafter
 * upstream) ends the run with an error naming the token and the range; a
 * probe writes one into the selector's proposals. */
static GstPadProbeReturn
bad_draft (GstPad *pad, GstPadProbeInfo *info, gpointer data)
{
  GstBuffer *buf = gst_buffer_make_writable (GST_PAD_PROBE_INFO_BUFFER (info));
  GstMapInfo map;

  if (gst_buffer_get_size (buf) >= sizeof (int) && gst_buffer_map (buf, &map, GST_MAP_WRITE)) {
    ((int *) map.data)[0] = 5000;
    gst_buffer_unmap (buf, &map);
  }
  GST_PAD_PROBE_INFO_DATA (info) = buf;
  return GST_PAD_PROBE_OK;
}

GST_START_TEST (test_verifier_bad_draft)
{
  Run *r = run_new ("tapsource max-new-tokens=16 ! ctxsettle ! dflashblock ! selector name=sel ! "
                    "verifier name=v ! fakesink");
  GstElement *sel = run_get (r, "sel");
  GstPad *pad = gst_element_get_static_pad (sel, "src");

  gst_pad_add_probe (pad, GST_PAD_PROBE_TYPE_BUFFER, bad_draft, NULL, NULL);
  run_to_error (r, "is token 5000, outside the vocabulary of ");
  fail_unless_equals_string (r->error_from, "v");
  fail_unless (strstr (r->error, "draft 0 of sequence 0 round ") != NULL, "%s", r->error);
  fail_unless (strstr (r->error, "(0 … 1023)") != NULL, "%s", r->error);
  gst_object_unref (pad);
  gst_object_unref (sel);
  run_free (r);
}
GST_END_TEST;

/* -------------------------------------------------------------- in flight */

static gchar *
prompts_file (const gchar *const *prompts)
{
  GString *s = g_string_new (NULL);
  gchar *path = NULL;
  gint fd = g_file_open_tmp ("dflash-prompts-XXXXXX.txt", &path, NULL);

  fail_unless (fd >= 0);
  close (fd);
  for (guint i = 0; prompts[i]; i++)
    g_string_append_printf (s, "%s\n", prompts[i]);
  fail_unless (g_file_set_contents (path, s->str, s->len, NULL));
  g_string_free (s, TRUE);
  return path;
}

static void
in_flight (const gchar *stages, gint in_flight, gint max_new)
{
  const gchar *prompts[] = { "func main() {", "hello world", "package main", NULL };
  g_autofree gchar *path = prompts_file (prompts);
  GString *want = g_string_new (NULL);
  g_autofree gchar *text = NULL;
  guint seen[3] = { 0, 0, 0 };
  Run *r;

  for (guint i = 0; prompts[i]; i++) {
    g_autofree gchar *t = dfl_test_reference_text (prompts[i], max_new);
    g_string_append (want, t);
  }
  r = run_new_printf ("tapsource name=src in-flight=%d max-new-tokens=%d prompts-file=\"%s\" ! %s ! "
      "verifier name=v ! fakesink name=out", in_flight, max_new, path, stages);
  run_to_eos (r);
  text = run_text (r);
  /* the text comes out in prompt order, each prompt's whole */
  assert_text (text, want->str, stages);
  fail_unless_equals_int64 (summary_int64 (r, "new-tokens"), 3 * max_new);
  {
    guint sequences = 0;
    fail_unless (gst_structure_get_uint (run_summary (r), "sequences", &sequences));
    fail_unless_equals_int (sequences, 3);
  }
  for (guint i = 0; i < r->messages->len; i++) {
    const GstStructure *s = g_ptr_array_index (r->messages, i);
    guint seq;
    if (gst_structure_has_name (s, "dflash-round") && gst_structure_get_uint (s, "sequence", &seq)) {
      fail_unless (seq < 3);
      seen[seq]++;
    }
  }
  fail_unless (seen[0] && seen[1] && seen[2], "a sequence ran no round");
  run_free (r);
  g_string_free (want, TRUE);
  g_unlink (path);
}

GST_START_TEST (test_in_flight_queued)
{
  /* pipelines/in-flight.pipeline's layout: queues let stages overlap */
  in_flight ("queue ! ctxsettle ! queue ! dflashblock ! selector ! queue", 2, 24);
}
GST_END_TEST;

GST_START_TEST (test_in_flight_plain)
{
  in_flight ("queue", 2, 24);
}
GST_END_TEST;

GST_START_TEST (test_in_flight_all_at_once)
{
  /* more slots than prompts */
  in_flight ("queue ! ctxsettle ! queue ! dflashblock ! selector", 8, 16);
}
GST_END_TEST;

/* --------------------------------------------------------------- messages */

static void
check_fields (const GstStructure *s, const gchar *const *fields, const GType *types)
{
  for (guint i = 0; fields[i]; i++) {
    const GValue *v = gst_structure_get_value (s, fields[i]);
    fail_unless (v != NULL, "%s has no %s", gst_structure_get_name (s), fields[i]);
    fail_unless (G_VALUE_TYPE (v) == types[i], "%s: %s is a %s, not a %s", gst_structure_get_name (s),
        fields[i], G_VALUE_TYPE_NAME (v), g_type_name (types[i]));
  }
}

/* The sum of an int64 array field of the summary. */
static gint64
summary_array_sum (const GstStructure *sum, const gchar *field)
{
  const GValue *array = gst_structure_get_value (sum, field);
  gint64 total = 0;

  fail_unless (array && GST_VALUE_HOLDS_ARRAY (array), "dflash-summary has no %s", field);
  for (guint j = 0; j < gst_value_array_get_size (array); j++)
    total += g_value_get_int64 (gst_value_array_get_value (array, j));
  return total;
}

static void
check_messages (Run *r, gint max_new, gboolean drafts)
{
  const gchar *round_fields[] = { "sequence", "round", "position", "drafted", "accepted", "source",
    "draft-time", "verify-time", "batch", NULL };
  const GType round_types[] = { G_TYPE_UINT, G_TYPE_UINT, G_TYPE_INT64, G_TYPE_INT, G_TYPE_INT,
    G_TYPE_STRING, G_TYPE_DOUBLE, G_TYPE_DOUBLE, G_TYPE_INT };
  const gchar *summary_fields[] = { "sequences", "rounds", "new-tokens", "tau", "accept-rate",
    "tokens-per-second", "draft-time", "verify-time", "wall-time", NULL };
  GType summary_types[] = { G_TYPE_UINT, G_TYPE_INT64, G_TYPE_INT64, G_TYPE_DOUBLE, GST_TYPE_ARRAY,
    G_TYPE_DOUBLE, G_TYPE_DOUBLE, G_TYPE_DOUBLE, G_TYPE_DOUBLE };
  const GstStructure *sum = run_summary (r);
  gint64 position = -1, committed = 1;   /* the prompt's pass commits the first token */
  gint64 drafted_sum = 0, accepted_sum = 0;
  guint expect_round = 0, n = 0;
  gdouble tau;
  const GValue *rates;

  for (guint i = 0; i < r->messages->len; i++) {
    const GstStructure *s = g_ptr_array_index (r->messages, i);
    guint round;
    gint drafted, accepted, batch = 0;
    gint64 pos;

    if (!gst_structure_has_name (s, "dflash-round")) {
      /* the summary is the last message, at EOS */
      fail_unless (i == r->messages->len - 1, "dflash-summary before a round");
      continue;
    }
    check_fields (s, round_fields, round_types);
    gst_structure_get (s, "round", G_TYPE_UINT, &round, "drafted", G_TYPE_INT, &drafted, "accepted",
        G_TYPE_INT, &accepted, "position", G_TYPE_INT64, &pos, "batch", G_TYPE_INT, &batch, NULL);
    /* one sequence: every pass verifies its round alone */
    fail_unless_equals_int (batch, 1);
    /* rounds in order, each starting where the last one's tokens ended */
    fail_unless_equals_int (round, expect_round);
    if (position >= 0)
      fail_unless_equals_int64 (pos, position);
    fail_unless (accepted >= 0 && accepted <= drafted && drafted <= 7);
    if (!drafts) {
      fail_unless_equals_int (drafted, 0);
      fail_unless_equals_string (gst_structure_get_string (s, "source"), "none");
    } else {
      fail_unless_equals_string (gst_structure_get_string (s, "source"), "block");
    }
    position = pos + accepted + 1;
    committed += accepted + 1;
    drafted_sum += drafted;
    accepted_sum += accepted;
    expect_round++;
    n++;
  }
  check_fields (sum, summary_fields, summary_types);
  fail_unless_equals_int64 (summary_int64 (r, "rounds"), n);
  /* the summary's counts are those of the rounds it sums */
  fail_unless_equals_int64 (summary_int64 (r, "round-tokens"), committed - 1);
  fail_unless_equals_int64 (summary_int64 (r, "block-rounds"), drafts ? n : 0);
  fail_unless_equals_int64 (summary_int64 (r, "chain-rounds"), 0);
  fail_unless_equals_int64 (summary_array_sum (sum, "proposed-by-position"), drafted_sum);
  fail_unless_equals_int64 (summary_array_sum (sum, "accepted-by-position"), accepted_sum);
  fail_unless_equals_int64 (summary_int64 (r, "new-tokens"), max_new);
  /* the last round may commit past max-new-tokens; the text stops there */
  fail_unless (committed >= max_new);
  fail_unless (gst_structure_get_double (sum, "tau", &tau));
  fail_unless (tau >= 1.0 && tau <= 8.0, "tau %f", tau);
  if (!drafts)
    fail_unless (tau == 1.0, "tau %f without drafts", tau);
  rates = gst_structure_get_value (sum, "accept-rate");
  /* one rate per draft position of the block */
  fail_unless_equals_int (gst_value_array_get_size (rates), 7);
  for (guint j = 0; j < gst_value_array_get_size (rates); j++) {
    gdouble v = g_value_get_double (gst_value_array_get_value (rates, j));
    fail_unless (v >= 0.0 && v <= 1.0, "accept-rate[%u] = %f", j, v);
  }
}

GST_START_TEST (test_round_messages)
{
  Run *r = run_new_printf (SPECULATIVE, 32);

  run_to_eos (r);
  check_messages (r, 32, TRUE);
  run_free (r);
}
GST_END_TEST;

GST_START_TEST (test_round_messages_no_draft)
{
  Run *r = run_new_printf (NO_DRAFT, 24);

  run_to_eos (r);
  check_messages (r, 24, FALSE);
  run_free (r);
}
GST_END_TEST;

/* ------------------------------------------------------------- properties */

static GList *
dflash_factories (void)
{
  GList *features = gst_registry_get_feature_list_by_plugin (gst_registry_get (), "dflash");

  fail_unless_equals_int (g_list_length (features), 7);
  return features;
}

/* Every property says what it does (its blurb is more than its nick), and
 * every enum value has a nick and a description. */
GST_START_TEST (test_property_blurbs)
{
  GList *features = dflash_factories ();

  for (GList *l = features; l; l = l->next) {
    GstElement *e = gst_element_factory_create (GST_ELEMENT_FACTORY (l->data), NULL);
    guint n;
    GParamSpec **specs;

    fail_unless (e != NULL, "cannot create %s", GST_OBJECT_NAME (l->data));
    specs = g_object_class_list_properties (G_OBJECT_GET_CLASS (e), &n);
    for (guint i = 0; i < n; i++) {
      const gchar *nick = g_param_spec_get_nick (specs[i]), *blurb = g_param_spec_get_blurb (specs[i]);
      fail_unless (blurb && *blurb && g_strcmp0 (blurb, nick) && g_strcmp0 (blurb, specs[i]->name),
          "%s:%s has no description", GST_OBJECT_NAME (l->data), specs[i]->name);
      if (G_IS_PARAM_SPEC_ENUM (specs[i])) {
        GEnumClass *ec = G_PARAM_SPEC_ENUM (specs[i])->enum_class;
        for (guint k = 0; k < ec->n_values; k++)
          fail_unless (ec->values[k].value_nick && *ec->values[k].value_name,
              "%s:%s value %d undocumented", GST_OBJECT_NAME (l->data), specs[i]->name, ec->values[k].value);
      }
      /* a readable property reads back without complaint */
      if (specs[i]->flags & G_PARAM_READABLE) {
        GValue v = G_VALUE_INIT;
        g_value_init (&v, specs[i]->value_type);
        g_object_get_property (G_OBJECT (e), specs[i]->name, &v);
        g_value_unset (&v);
      }
    }
    g_free (specs);
    gst_object_unref (e);
  }
  gst_plugin_feature_list_free (features);
}
GST_END_TEST;

GST_START_TEST (test_element_metadata)
{
  GList *features = dflash_factories ();
  const gchar *keys[] = { GST_ELEMENT_METADATA_LONGNAME, GST_ELEMENT_METADATA_KLASS,
    GST_ELEMENT_METADATA_DESCRIPTION, GST_ELEMENT_METADATA_AUTHOR };

  for (GList *l = features; l; l = l->next) {
    GstElementFactory *f = l->data;
    for (guint k = 0; k < G_N_ELEMENTS (keys); k++) {
      const gchar *v = gst_element_factory_get_metadata (f, keys[k]);
      fail_unless (v && *v, "%s has no %s", GST_OBJECT_NAME (f), keys[k]);
    }
    fail_unless (gst_element_factory_get_num_pad_templates (f) >= 1);
  }
  gst_plugin_feature_list_free (features);
}
GST_END_TEST;

/* ------------------------------------------------------------------ suite */

static Suite *
dflash_elements_suite (void)
{
  Suite *s = suite_create ("dflash-elements");
  TCase *tc;
  const gchar *w = g_getenv ("DFL_TEST_WATCHDOG");

  if (w && atoi (w) > 0)
    watchdog_s = atoi (w);
  dfl_test_watch_element_logs ();

#define TCASE(name) \
  tc = tcase_create (name); \
  tcase_set_timeout (tc, 4 * watchdog_s); \
  suite_add_tcase (s, tc)

  TCASE ("harness");
  tcase_add_test (tc, test_tapsource_rounds);
  tcase_add_test (tc, test_tapsource_no_drafter);
  tcase_add_test (tc, test_verifier_text);
  tcase_add_test (tc, test_verifier_tokens);
  tcase_add_test (tc, test_ctxsettle_harness);
  tcase_add_test (tc, test_dflashblock_harness);
  tcase_add_test (tc, test_selector_harness);
  tcase_add_test (tc, test_ngramdraft_harness);
  tcase_add_test (tc, test_router_harness);
  tcase_add_test (tc, test_router_one_chain_pad);

  TCASE ("negotiation");
  tcase_add_test (tc, test_caps_fields);
  tcase_add_test (tc, test_caps_fields_routed);
  tcase_add_test (tc, test_ctxsettle_wrong_tap_width);
  tcase_add_test (tc, test_dflashblock_wrong_block);
  tcase_add_test (tc, test_selector_wrong_hidden);
  tcase_add_test (tc, test_verifier_wrong_vocab);
  tcase_add_test (tc, test_capsfilter_tap_width);
  tcase_add_test (tc, test_narrow_head_width);
  tcase_add_test (tc, test_ngram_min_above_max);
  tcase_add_test (tc, test_taps_do_not_link_to_block);
  tcase_add_test (tc, test_no_model);
  tcase_add_test (tc, test_need_context_answered);

  TCASE ("verdict");
  tcase_add_test (tc, test_verdict_loop);
  tcase_add_test (tc, test_one_token);
  tcase_add_test (tc, test_tokens_only);
  tcase_add_test (tc, test_routed_match);
  tcase_add_test (tc, test_routed_auto);
  tcase_add_test (tc, test_routed_block);
  tcase_add_test (tc, test_routed_chain);
  tcase_add_test (tc, test_routed_cost);
  tcase_add_test (tc, test_router_figures_file);
  tcase_add_test (tc, test_router_cost_needs_decide_first);
  tcase_add_test (tc, test_router_round_mismatch);
  tcase_add_test (tc, test_routed_decide_first);
  tcase_add_test (tc, test_decide_first_without_queue);
  tcase_add_test (tc, test_selector_min_confidence);

  TCASE ("flush");
  tcase_add_test (tc, test_flushing_seek_mid_run);
  tcase_add_test (tc, test_flushing_seek_mid_run_batched);
  tcase_add_test (tc, test_flush_events_mid_run);
  tcase_add_test (tc, test_flush_events_mid_run_batched);
  tcase_add_test (tc, test_null_mid_round);
  tcase_add_test (tc, test_null_in_first_round);
  tcase_add_test (tc, test_restart_after_eos);

  TCASE ("errors");
  tcase_add_test (tc, test_model_missing);
  tcase_add_test (tc, test_sidecar_for_another_target);
  tcase_add_test (tc, test_prompts_file_missing);
  tcase_add_test (tc, test_prompts_file_empty);
  tcase_add_test (tc, test_tokens_bad);
  tcase_add_test (tc, test_too_long);
  tcase_add_test (tc, test_verifier_bad_draft);
  tcase_add_test (tc, test_restart_after_error);

  TCASE ("in-flight");
  tcase_add_test (tc, test_in_flight_queued);
  tcase_add_test (tc, test_in_flight_plain);
  tcase_add_test (tc, test_in_flight_all_at_once);

  TCASE ("messages");
  tcase_add_test (tc, test_round_messages);
  tcase_add_test (tc, test_round_messages_no_draft);

  TCASE ("properties");
  tcase_add_test (tc, test_property_blurbs);
  tcase_add_test (tc, test_element_metadata);
#undef TCASE

  return s;
}

GST_CHECK_MAIN (dflash_elements);
