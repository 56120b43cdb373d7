/* gst-dflash — what the soak, fault and concurrency tests share. */
#include "soak-common.h"

#include <glib/gstdio.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- watchdog */

struct _SoakWatchdog {
  GMutex lock;
  GCond cond;
  GThread *thread;
  gint64 deadline;           /* 0: disarmed */
  guint seconds;
  gchar *what;
  gboolean quit;
};

static gpointer
watchdog_thread (gpointer data)
{
  SoakWatchdog *w = data;

  g_mutex_lock (&w->lock);
  while (!w->quit) {
    if (w->deadline == 0) {
      g_cond_wait (&w->cond, &w->lock);
      continue;
    }
    if (g_cond_wait_until (&w->cond, &w->lock, w->deadline) || w->deadline == 0)
      continue;
    if (g_get_monotonic_time () >= w->deadline) {
      /* no g_error: a test's log handler might want the lock a hung
       * thread holds */
      fprintf (stderr, "Bail out! watchdog: %s did not finish within %u s\n", w->what, w->seconds);
      fflush (stderr);
      fprintf (stdout, "Bail out! watchdog: %s did not finish within %u s\n", w->what, w->seconds);
      fflush (stdout);
      abort ();
    }
  }
  g_mutex_unlock (&w->lock);
  return NULL;
}

SoakWatchdog *
soak_watchdog_new (void)
{
  SoakWatchdog *w = g_new0 (SoakWatchdog, 1);

  g_mutex_init (&w->lock);
  g_cond_init (&w->cond);
  w->thread = g_thread_new ("soak-watchdog", watchdog_thread, w);
  return w;
}

void
soak_watchdog_arm (SoakWatchdog *w, guint seconds, const gchar *format, ...)
{
  va_list args;
  gchar *what;

  va_start (args, format);
  what = g_strdup_vprintf (format, args);
  va_end (args);
  g_mutex_lock (&w->lock);
  g_free (w->what);
  w->what = what;
  w->seconds = seconds;
  w->deadline = g_get_monotonic_time () + (gint64) seconds * G_USEC_PER_SEC;
  g_cond_signal (&w->cond);
  g_mutex_unlock (&w->lock);
}

void
soak_watchdog_disarm (SoakWatchdog *w)
{
  g_mutex_lock (&w->lock);
  w->deadline = 0;
  g_cond_signal (&w->cond);
  g_mutex_unlock (&w->lock);
}

void
soak_watchdog_free (SoakWatchdog *w)
{
  g_mutex_lock (&w->lock);
  w->quit = TRUE;
  g_cond_signal (&w->cond);
  g_mutex_unlock (&w->lock);
  g_thread_join (w->thread);
  g_free (w->what);
  g_cond_clear (&w->cond);
  g_mutex_clear (&w->lock);
  g_free (w);
}

/* ---------------------------------------------------------- measurements */

gint64
soak_rss_kib (void)
{
  g_autofree gchar *status = NULL;
  const gchar *line;

  if (!g_file_get_contents ("/proc/self/status", &status, NULL, NULL)
      || !(line = strstr (status, "\nVmRSS:")))
    return -1;
  return g_ascii_strtoll (line + strlen ("\nVmRSS:"), NULL, 10);
}

gboolean
soak_sanitized (void)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return TRUE;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
  return TRUE;
#else
  return FALSE;
#endif
#else
  return FALSE;
#endif
}

/* ------------------------------------------------------------- pipelines */

const GstDflashRoundMeta *
soak_round_meta (GstBuffer *buf)
{
  /* the plugin registers the API type the first time it adds a meta; this
   * test does not link the plugin's code */
  GType api = g_type_from_name ("GstDflashRoundMetaAPI");

  return api ? (const GstDflashRoundMeta *) gst_buffer_get_meta (buf, api) : NULL;
}

SoakOutput *
soak_output_new (void)
{
  SoakOutput *o = g_new0 (SoakOutput, 1);

  g_mutex_init (&o->lock);
  o->text = g_string_new (NULL);
  o->per_seq = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
  return o;
}

void
soak_output_clear (SoakOutput *o)
{
  g_mutex_lock (&o->lock);
  g_string_truncate (o->text, 0);
  g_ptr_array_set_size (o->per_seq, 0);
  o->foreign = FALSE;
  g_mutex_unlock (&o->lock);
}

void
soak_output_free (SoakOutput *o)
{
  g_string_free (o->text, TRUE);
  g_ptr_array_unref (o->per_seq);
  g_mutex_clear (&o->lock);
  g_free (o);
}

static void
on_text (GstElement *sink, GstBuffer *buf, GstPad *pad, gpointer data)
{
  SoakOutput *o = data;
  GstMapInfo map;

  if (!gst_buffer_map (buf, &map, GST_MAP_READ))
    return;
  g_mutex_lock (&o->lock);
  g_string_append_len (o->text, (const gchar *) map.data, map.size);
  g_mutex_unlock (&o->lock);
  gst_buffer_unmap (buf, &map);
}

static void
on_ids (GstElement *sink, GstBuffer *buf, GstPad *pad, gpointer data)
{
  SoakOutput *o = data;
  const GstDflashRoundMeta *m = soak_round_meta (buf);
  GstMapInfo map;
  GArray *ids;

  if (!gst_buffer_map (buf, &map, GST_MAP_READ))
    return;
  g_mutex_lock (&o->lock);
  if (!m) {
    o->foreign = TRUE;
  } else {
    if (m->sequence >= o->per_seq->len)
      g_ptr_array_set_size (o->per_seq, m->sequence + 1);
    if (!(ids = g_ptr_array_index (o->per_seq, m->sequence)))
      ids = g_ptr_array_index (o->per_seq, m->sequence) = g_array_new (FALSE, FALSE, sizeof (gint));
    g_array_append_vals (ids, map.data, map.size / sizeof (gint));
  }
  g_mutex_unlock (&o->lock);
  gst_buffer_unmap (buf, &map);
}

void
soak_output_attach (SoakOutput *o, GstElement *pipeline)
{
  GstElement *sink;

  if ((sink = gst_bin_get_by_name (GST_BIN (pipeline), "out"))) {
    g_object_set (sink, "signal-handoffs", TRUE, NULL);
    g_signal_connect (sink, "handoff", G_CALLBACK (on_text), o);
    gst_object_unref (sink);
  }
  if ((sink = gst_bin_get_by_name (GST_BIN (pipeline), "ids"))) {
    g_object_set (sink, "signal-handoffs", TRUE, NULL);
    g_signal_connect (sink, "handoff", G_CALLBACK (on_ids), o);
    gst_object_unref (sink);
  }
}

gchar *
soak_output_text (SoakOutput *o)
{
  gchar *t;

  g_mutex_lock (&o->lock);
  t = g_strdup (o->text->str);
  g_mutex_unlock (&o->lock);
  return t;
}

GstContext *
soak_model_context (guint timeout_s)
{
  GstElement *p = gst_parse_launch ("tapsource max-new-tokens=1 ! fakesink", NULL);
  GstContext *context = NULL;

  g_assert_nonnull (p);
  /* PAUSED: tapsource loads the model, posts HAVE_CONTEXT, the bin keeps it */
  gst_element_set_state (p, GST_STATE_PAUSED);
  if (gst_element_get_state (p, NULL, NULL, timeout_s * GST_SECOND) == GST_STATE_CHANGE_SUCCESS)
    context = gst_element_get_context (p, "dflash.model");
  gst_element_set_state (p, GST_STATE_NULL);
  gst_object_unref (p);
  return context;
}

gchar *
soak_prompts_file (guint n, guint salt)
{
  static const gchar *const heads[] = {
    "func %s(a, b int) int {\\n\\treturn a + b*%u",
    "// %s returns the %u-th value\\nfunc %s() {",
    "package main\\n\\nimport \"fmt\"\\n\\nfunc main() {\\n\\tfmt.Println(\"%s\", %u)",
    "for i := 0; i < %u; i++ {\\n\\t%s(i)",
    "type %s struct {\\n\\tn int // %u",
  };
  static const gchar *const names[] = { "sum", "walk", "parse", "emit", "merge", "scan", "fold",
    "split" };
  g_autoptr (GError) error = NULL;
  g_autofree gchar *dir = g_dir_make_tmp ("dflash-soak-XXXXXX", &error);
  g_autoptr (GString) text = g_string_new (NULL);
  gchar *path;

  g_assert_no_error (error);
  for (guint i = 0; i < n; i++) {
    guint k = (i + salt) % G_N_ELEMENTS (heads);
    const gchar *name = names[(i * 3 + salt) % G_N_ELEMENTS (names)];
    guint num = i * 7 + salt;
    switch (k) {
      case 0: g_string_append_printf (text, heads[k], name, num); break;
      case 1: g_string_append_printf (text, heads[k], name, num, name); break;
      case 2: g_string_append_printf (text, heads[k], name, num); break;
      case 3: g_string_append_printf (text, heads[k], num, name); break;
      default: g_string_append_printf (text, heads[k], name, num); break;
    }
    g_string_append_c (text, '\n');
  }
  path = g_build_filename (dir, "prompts.txt", NULL);
  g_assert_true (g_file_set_contents (path, text->str, text->len, &error));
  g_assert_no_error (error);
  return path;
}

void
soak_remove_file (const gchar *path)
{
  g_autofree gchar *dir = g_path_get_dirname (path);

  g_unlink (path);
  g_rmdir (dir);
}
