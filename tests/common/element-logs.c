/* gst-dflash — tests: the elements' own warning logs (element-logs.h). */
#include "element-logs.h"

static const gchar *const dflash_categories[] = { "tapsource", "ctxsettle", "dflashblock",
  "selector", "ngramdraft", "router", "verifier", "dflashfilter", NULL };
static GMutex warning_lock;
static gint warnings;
static gchar last_warning[512];

static void
count_warnings (GstDebugCategory *category, GstDebugLevel level, const gchar *file,
                const gchar *function, gint line, GObject *object, GstDebugMessage *message,
                gpointer data)
{
  if (level == GST_LEVEL_NONE || level > GST_LEVEL_WARNING
      || !g_strv_contains (dflash_categories, gst_debug_category_get_name (category)))
    return;
  g_mutex_lock (&warning_lock);
  g_snprintf (last_warning, sizeof (last_warning), "%s:%d %s", file, line,
              gst_debug_message_get (message));
  warnings++;
  g_mutex_unlock (&warning_lock);
}

void
dfl_test_watch_element_logs (void)
{
  if (!g_getenv ("GST_DEBUG"))
    for (guint i = 0; dflash_categories[i]; i++)
      gst_debug_set_threshold_for_name (dflash_categories[i], GST_LEVEL_WARNING);
  gst_debug_add_log_function (count_warnings, NULL, NULL);
}

gint
dfl_test_element_warnings (gchar **last)
{
  gint n;

  g_mutex_lock (&warning_lock);
  n = warnings;
  if (last)
    *last = g_strdup (last_warning);
  g_mutex_unlock (&warning_lock);
  return n;
}

void
dfl_test_reset_element_warnings (void)
{
  g_mutex_lock (&warning_lock);
  warnings = 0;
  last_warning[0] = '\0';
  g_mutex_unlock (&warning_lock);
}
