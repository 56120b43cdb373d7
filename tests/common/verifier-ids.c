/* gst-dflash — tests: each sequence's ids from the verifier's tokens pad
 * (verifier-ids.h). */
#include "verifier-ids.h"

#include <string.h>

#include "gstdflashmeta.h"

void
dfl_test_ids_init (DflTestIds *g)
{
  memset (g, 0, sizeof *g);
  g_mutex_init (&g->lock);
  g->tokens = g_hash_table_new_full (NULL, NULL, NULL, (GDestroyNotify) g_array_unref);
  g->marked = g_hash_table_new (NULL, NULL);
}

void
dfl_test_ids_clear (DflTestIds *g)
{
  g_clear_pointer (&g->tokens, g_hash_table_unref);
  g_clear_pointer (&g->marked, g_hash_table_unref);
  g_mutex_clear (&g->lock);
}

/* the sink's streaming thread: the ids appended to their sequence's */
static void
on_ids (GstElement *sink, GstBuffer *buf, GstPad *pad, DflTestIds *g)
{
  GstDflashRoundMeta *meta = gst_buffer_get_dflash_round_meta (buf);
  gpointer key;
  GstMapInfo map;
  GArray *ids;

  g_assert_nonnull (meta);
  key = GUINT_TO_POINTER (meta->sequence);
  g_assert_true (gst_buffer_map (buf, &map, GST_MAP_READ));
  g_mutex_lock (&g->lock);
  if (!(ids = g_hash_table_lookup (g->tokens, key))) {
    ids = g_array_new (FALSE, FALSE, sizeof (int));
    g_hash_table_insert (g->tokens, key, ids);
  }
  g_array_append_vals (ids, map.data, map.size / sizeof (int));
  if (GST_BUFFER_FLAG_IS_SET (buf, GST_BUFFER_FLAG_MARKER)) {
    guint marked = GPOINTER_TO_UINT (g_hash_table_lookup (g->marked, key)) + 1;

    g_hash_table_insert (g->marked, key, GUINT_TO_POINTER (marked));
    if (marked == 1) {
      g->n_ended++;
      g->last_end_us = g_get_monotonic_time ();
      if (!g->first_end_us)
        g->first_end_us = g->last_end_us;
    }
  }
  g_mutex_unlock (&g->lock);
  gst_buffer_unmap (buf, &map);
}

void
dfl_test_ids_connect (DflTestIds *g, GstElement *sink)
{
  g_signal_connect (sink, "handoff", G_CALLBACK (on_ids), g);
}

guint
dfl_test_ids_marked (DflTestIds *g, guint sequence)
{
  guint marked;

  g_mutex_lock (&g->lock);
  marked = GPOINTER_TO_UINT (g_hash_table_lookup (g->marked, GUINT_TO_POINTER (sequence)));
  g_mutex_unlock (&g->lock);
  return marked;
}
