/* gst-dflash — tests: each sequence's ids from the verifier's tokens pad.
 *
 * A fakesink with signal-handoffs after the verifier's tokens pad hands
 * over buffers of ids; the round meta says whose they are and the buffer
 * marked GST_BUFFER_FLAG_MARKER is a sequence's last. The tests of the
 * verifier's batches and of tapsource's serving both gather them so. */
#pragma once

#include <gst/gst.h>

G_BEGIN_DECLS

typedef struct {
  GMutex lock;
  GHashTable *tokens;   /* sequence → GArray of its ids */
  GHashTable *marked;   /* sequence → how many of its buffers were marked */
  guint n_ended;        /* sequences whose (first) marked buffer came */
  gint64 first_end_us, last_end_us;  /* when the first and the last of those came */
} DflTestIds;

void dfl_test_ids_init (DflTestIds *g);
void dfl_test_ids_clear (DflTestIds *g);
/* Gather the handoffs of `sink` (a fakesink with signal-handoffs=true) from
 * now on. */
void dfl_test_ids_connect (DflTestIds *g, GstElement *sink);
/* How many buffers of `sequence` came marked (a sequence ends once: 1 after
 * its end). */
guint dfl_test_ids_marked (DflTestIds *g, guint sequence);

G_END_DECLS
