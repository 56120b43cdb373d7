/* gst-dflash — what the soak, fault and concurrency tests share.
 *
 * The tests link GStreamer and the core's config reader only: the elements
 * come from the plugin through the registry, as an application gets them.
 * They know the round meta's layout (gstdflashmeta.h) and find its API type
 * by name.
 */
#pragma once

#include <gst/gst.h>

#include "element-logs.h"
#include "gstdflashmeta.h"

G_BEGIN_DECLS

/* ------------------------------------------------------------- watchdog */

/* A thread that aborts the process, saying what was going on, when a step
 * runs past its deadline: a hang inside gst_element_set_state blocks the
 * calling thread, so only another thread can end it. */
typedef struct _SoakWatchdog SoakWatchdog;

SoakWatchdog *soak_watchdog_new (void);
/* Arm for `seconds`; `what` says which step (printed on expiry). */
void soak_watchdog_arm (SoakWatchdog *w, guint seconds, const gchar *format, ...)
    G_GNUC_PRINTF (3, 4);
void soak_watchdog_disarm (SoakWatchdog *w);
void soak_watchdog_free (SoakWatchdog *w);

/* ---------------------------------------------------------- measurements */

/* Resident memory of this process in KiB (VmRSS), -1 where unknown. */
gint64 soak_rss_kib (void);
/* TRUE where this binary runs under AddressSanitizer or ThreadSanitizer:
 * their shadow memory and quarantine make RSS say nothing about leaks. */
gboolean soak_sanitized (void);

/* ------------------------------------------------------------- pipelines */

/* The round meta of a buffer, NULL where it has none. */
const GstDflashRoundMeta *soak_round_meta (GstBuffer *buf);

/* What a pipeline produced: the text of its sink named "out", and, where
 * the verifier's tokens pad goes to a sink named "ids", the tokens of each
 * sequence. Filled from the streaming threads. */
typedef struct {
  GMutex lock;
  GString *text;
  GPtrArray *per_seq;        /* per sequence: a GArray of its int tokens, or NULL */
  gboolean foreign;          /* an ids buffer without a round meta */
} SoakOutput;

SoakOutput *soak_output_new (void);
void soak_output_clear (SoakOutput *o);
void soak_output_free (SoakOutput *o);
/* Connect to the sinks "out" and "ids" of `pipeline` (those it has). */
void soak_output_attach (SoakOutput *o, GstElement *pipeline);
gchar *soak_output_text (SoakOutput *o);

/* The "dflash.model" context of a model loaded by a tapsource (from
 * $DFLASH_MODEL): set it on a pipeline before it starts and its elements
 * use that model instead of loading one. */
GstContext *soak_model_context (guint timeout_s);

/* A file of `n` distinct prompts, one a line, in a fresh temporary folder;
 * the caller removes it with soak_remove_file. */
gchar *soak_prompts_file (guint n, guint salt);
void soak_remove_file (const gchar *path);

G_END_DECLS
