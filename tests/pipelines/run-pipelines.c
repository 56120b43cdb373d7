/* gst-dflash — the ready pipelines of pipelines/ must reproduce the plain
 * decoding.
 *
 *   run-pipelines PIPELINES_DIR NAME.pipeline
 *       Runs NAME.pipeline and no-draft.pipeline to EOS and compares their
 *       text: speculation may change how fast the text comes, never what it
 *       is. Each description loses its '#' lines, and its fdsink (exactly
 *       one) becomes a filesink into a temporary file.
 *   run-pipelines PIPELINES_DIR --listed NAME.pipeline...
 *       Fails naming every *.pipeline file of the folder that is not among
 *       the NAMEs: a new pipeline must get its test in meson.build.
 *
 * Speaks TAP. Every run has a watchdog ($DFL_TEST_WATCHDOG seconds, 60 by
 * default); an ERROR or WARNING on the bus fails the run, but for one: a
 * pipeline that forces a GPU back end (backend=cuda, backend=vulkan) on a
 * machine without such a device fails with "<element>: backend=<b>: … is
 * unavailable: …", and is then skipped with that reason, unless
 * $DFL_EXPECT_CUDA or $DFL_EXPECT_VULKAN is 1 (a machine known to have one).
 */
#include <gst/gst.h>
#include <glib/gstdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../common/hold-vulkan-driver.h"

static guint watchdog_s = 60;
static guint n_checks;
static gboolean failed;

static void
check (gboolean ok, const gchar *what, const gchar *detail)
{
  g_print ("%s %u - %s\n", ok ? "ok" : "not ok", ++n_checks, what);
  if (!ok && detail) {
    g_auto (GStrv) lines = g_strsplit (detail, "\n", -1);
    for (guint i = 0; lines[i]; i++)
      g_print ("# %s\n", lines[i]);
  }
  failed |= !ok;
}

/* The launch description of a .pipeline file: its '#' lines dropped, the
 * rest joined; the fdsink replaced by a filesink writing to `out`. NULL,
 * with a reason, where the file cannot be read or has not one fdsink. */
static gchar *
description (const gchar *path, const gchar *out, gchar **why)
{
  g_autofree gchar *text = NULL;
  g_auto (GStrv) lines = NULL;
  g_autoptr (GString) joined = g_string_new (NULL);
  g_autoptr (GRegex) fdsink = NULL;
  g_autoptr (GMatchInfo) match = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree gchar *location = NULL;
  gint start = -1, end = -1, count = 0;

  if (!g_file_get_contents (path, &text, NULL, &error)) {
    *why = g_strdup (error->message);
    return NULL;
  }
  lines = g_strsplit (text, "\n", -1);
  for (guint i = 0; lines[i]; i++) {
    const gchar *l = lines[i];
    while (g_ascii_isspace (*l))
      l++;
    if (*l == '#' || *l == '\0')
      continue;
    g_string_append_printf (joined, "%s%s", joined->len ? " " : "", lines[i]);
  }
  /* the element, with whatever properties it was given */
  fdsink = g_regex_new ("(?<![\\w.-])fdsink(\\s+[\\w-]+=(\"[^\"]*\"|\\S+))*", 0, 0, NULL);
  g_regex_match (fdsink, joined->str, 0, &match);
  while (g_match_info_matches (match)) {
    g_match_info_fetch_pos (match, 0, &start, &end);
    count++;
    g_match_info_next (match, NULL);
  }
  if (count != 1) {
    *why = g_strdup_printf ("%d fdsinks in '%s' (the text goes to exactly one)", count, joined->str);
    return NULL;
  }
  location = g_strescape (out, NULL);
  return g_strdup_printf ("%.*s filesink location=\"%s\" %s", start, joined->str, location,
                          joined->str + end);
}

/* Run `path` to EOS; its text, or NULL with the reason in `why`. */
static gchar *
run (const gchar *path, gchar **why)
{
  g_autofree gchar *out = NULL, *desc = NULL, *text = NULL;
  g_autoptr (GError) error = NULL;
  GstElement *pipeline;
  GstBus *bus;
  gint64 deadline;
  gboolean eos = FALSE;
  gint fd;

  if ((fd = g_file_open_tmp ("dflash-pipeline-XXXXXX.txt", &out, &error)) < 0) {
    *why = g_strdup (error->message);
    return NULL;
  }
  close (fd);
  if (!(desc = description (path, out, why))) {
    g_unlink (out);
    return NULL;
  }
  g_print ("# %s\n", desc);
  pipeline = gst_parse_launch (desc, &error);
  if (!pipeline || error) {
    *why = g_strdup_printf ("gst_parse_launch: %s", error ? error->message : "no pipeline");
    gst_clear_object (&pipeline);
    g_unlink (out);
    return NULL;
  }
  bus = gst_element_get_bus (pipeline);
  if (gst_element_set_state (pipeline, GST_STATE_PLAYING) == GST_STATE_CHANGE_FAILURE) {
    /* the element that failed posted why before the state change returned */
    GstMessage *msg = gst_bus_pop_filtered (bus, GST_MESSAGE_ERROR);
    g_autoptr (GError) e = NULL;
    g_autofree gchar *debug = NULL;
    if (msg)
      gst_message_parse_error (msg, &e, &debug);
    *why = g_strdup_printf ("the pipeline did not start: %s from %s\n%s",
                            e ? e->message : "no ERROR", msg ? GST_MESSAGE_SRC_NAME (msg) : "?",
                            debug ? debug : "");
    gst_clear_message (&msg);
  }
  deadline = g_get_monotonic_time () + (gint64) watchdog_s * G_USEC_PER_SEC;
  while (!*why && !eos) {
    gint64 left = deadline - g_get_monotonic_time ();
    GstMessage *msg = left > 0 ? gst_bus_timed_pop_filtered (bus, left * GST_USECOND,
        GST_MESSAGE_EOS | GST_MESSAGE_ERROR | GST_MESSAGE_WARNING) : NULL;

    if (!msg) {
      *why = g_strdup_printf ("no EOS within %u s (the watchdog)", watchdog_s);
      break;
    }
    if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_EOS) {
      eos = TRUE;
    } else {
      g_autoptr (GError) e = NULL;
      g_autofree gchar *debug = NULL;
      if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR)
        gst_message_parse_error (msg, &e, &debug);
      else
        gst_message_parse_warning (msg, &e, &debug);
      *why = g_strdup_printf ("%s from %s: %s\n%s", GST_MESSAGE_TYPE_NAME (msg),
                              GST_MESSAGE_SRC_NAME (msg), e->message, debug ? debug : "");
    }
    gst_message_unref (msg);
  }
  gst_element_set_state (pipeline, GST_STATE_NULL);
  gst_object_unref (bus);
  gst_object_unref (pipeline);
  if (eos && !g_file_get_contents (out, &text, NULL, &error))
    *why = g_strdup (error->message);
  g_unlink (out);
  return *why ? NULL : g_steal_pointer (&text);
}

/* Whether a run failed only because a GPU back end it forces has no
 * device here (and the machine is not known to have one). */
static gboolean
unavailable_device (const gchar *why)
{
  static const gchar *const backends[][2] = {
    { "cuda", "DFL_EXPECT_CUDA" },
    { "vulkan", "DFL_EXPECT_VULKAN" },
  };

  for (guint i = 0; i < G_N_ELEMENTS (backends); i++) {
    g_autofree gchar *forced = g_strdup_printf (": backend=%s: ", backends[i][0]);
    if (strstr (why, forced) && strstr (why, "is unavailable: ")
        && g_strcmp0 (g_getenv (backends[i][1]), "1") != 0)
      return TRUE;
  }
  return FALSE;
}

static int
check_listed (const gchar *dir, gchar **names)
{
  g_autoptr (GDir) d = NULL;
  g_autoptr (GError) error = NULL;
  const gchar *f;
  guint n = 0;

  if (!(d = g_dir_open (dir, 0, &error))) {
    check (FALSE, "the pipelines folder opens", error->message);
    g_print ("1..%u\n", n_checks);
    return 1;
  }
  while ((f = g_dir_read_name (d))) {
    g_autofree gchar *what = NULL;
    if (!g_str_has_suffix (f, ".pipeline"))
      continue;
    what = g_strdup_printf ("%s has its test in tests/pipelines/meson.build", f);
    check (g_strv_contains ((const gchar *const *) names, f), what,
           "add it to the list of pipelines there");
    n++;
  }
  check (n > 0, "the folder holds pipelines", dir);
  g_print ("1..%u\n", n_checks);
  return failed;
}

int
main (int argc, char **argv)
{
  g_autofree gchar *path = NULL, *reference = NULL, *text = NULL, *ref_text = NULL;
  gchar *why = NULL, *ref_why = NULL;
  const gchar *w = g_getenv ("DFL_TEST_WATCHDOG");

  gst_init (&argc, &argv);
  /* a GLib warning or critical from any element fails the run, as in gst-check */
  g_log_set_always_fatal (G_LOG_LEVEL_CRITICAL | G_LOG_LEVEL_WARNING);
  if (w && atoi (w) > 0)
    watchdog_s = atoi (w);
  if (argc >= 3 && !strcmp (argv[2], "--listed"))
    return check_listed (argv[1], argv + 3);
  if (argc != 3) {
    g_printerr ("usage: %s PIPELINES_DIR NAME.pipeline | PIPELINES_DIR --listed NAME...\n", argv[0]);
    return 2;
  }
  path = g_build_filename (argv[1], argv[2], NULL);
  reference = g_build_filename (argv[1], "no-draft.pipeline", NULL);

  text = run (path, &why);
  if (!text && why && unavailable_device (why)) {
    g_auto (GStrv) lines = g_strsplit (why, "\n", 2);
    g_print ("1..0 # SKIP %s\n", lines[0]);
    g_free (why);
    gst_deinit ();
    return 0;
  }
  check (text != NULL, "the pipeline runs to EOS", why);
  check (text && *text, "it writes text", NULL);
  if (text) {
    ref_text = run (reference, &ref_why);
    check (ref_text != NULL, "no-draft.pipeline runs to EOS", ref_why);
  }
  if (text && ref_text) {
    g_autofree gchar *detail = NULL;
    gsize i = 0;
    while (text[i] && text[i] == ref_text[i])
      i++;
    if (strcmp (text, ref_text))
      detail = g_strdup_printf ("they differ at byte %" G_GSIZE_FORMAT " (%" G_GSIZE_FORMAT " bytes, "
                                "no-draft %" G_GSIZE_FORMAT ")", i, strlen (text), strlen (ref_text));
    check (!strcmp (text, ref_text), "its text is no-draft.pipeline's", detail);
  }
  g_free (why);
  g_free (ref_why);
  g_print ("1..%u\n", n_checks);
  gst_deinit ();
  return failed;
}
