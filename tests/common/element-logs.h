/* gst-dflash — tests: the elements' own GST_WARNING and GST_ERROR logs.
 *
 * GStreamer turns neither into a bus message and gst-check catches only
 * GLib's warnings, so a run that should be clean counts them here. */
#pragma once

#include <gst/gst.h>

G_BEGIN_DECLS

/* Start counting the logs of the elements' categories, at WARNING where
 * GST_DEBUG is not set (set, someone reads the log: its levels stay). The
 * log function stays to the end: GStreamer leaks its list of log functions
 * when one is removed. */
void dfl_test_watch_element_logs (void);
/* How many were logged since the start or the last reset; `last` (may be
 * NULL) gets a copy of the last one's place and text. */
gint dfl_test_element_warnings (gchar **last);
void dfl_test_reset_element_warnings (void);

G_END_DECLS
