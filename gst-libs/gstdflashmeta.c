/* gst-dflash — the round meta, the verdict and route events. */
#include "gstdflashmeta.h"

#include "gstdflashseq.h"

GType
gst_dflash_round_meta_api_get_type (void)
{
  static GType type = 0;
  static const gchar *tags[] = { NULL };

  if (g_once_init_enter (&type)) {
    GType t = gst_meta_api_type_register ("GstDflashRoundMetaAPI", tags);
    g_once_init_leave (&type, t);
  }
  return type;
}

static gboolean
round_meta_init (GstMeta *meta, gpointer params, GstBuffer *buffer)
{
  GstDflashRoundMeta *m = (GstDflashRoundMeta *) meta;

  m->seq = NULL;
  m->sequence = m->round = 0;
  m->anchor = 0;
  m->anchor_pos = m->ctx_pos = 0;
  m->ctx_rows = 0;
  m->source = GST_DFLASH_SOURCE_NONE;
  m->match = 0;
  m->draft_ns = 0;
  m->tip = m->new_tokens = NULL;
  return TRUE;
}

static void
round_meta_free (GstMeta *meta, GstBuffer *buffer)
{
  GstDflashRoundMeta *m = (GstDflashRoundMeta *) meta;

  /* the meta goes with its buffer: nothing to clear. (Clearing wrote to a
   * meta that other threads had read, ordered only by the buffer's
   * reference count, which ThreadSanitizer cannot see in GStreamer.) */
  if (m->seq)
    gst_dflash_seq_unref (m->seq);
  if (m->tip)
    g_bytes_unref (m->tip);
  if (m->new_tokens)
    g_bytes_unref (m->new_tokens);
}

static void
round_meta_copy (GstDflashRoundMeta *dst, const GstDflashRoundMeta *src)
{
  dst->seq = src->seq ? gst_dflash_seq_ref (src->seq) : NULL;
  dst->sequence = src->sequence;
  dst->round = src->round;
  dst->anchor = src->anchor;
  dst->anchor_pos = src->anchor_pos;
  dst->ctx_pos = src->ctx_pos;
  dst->ctx_rows = src->ctx_rows;
  dst->source = src->source;
  dst->match = src->match;
  dst->draft_ns = src->draft_ns;
  dst->tip = src->tip ? g_bytes_ref (src->tip) : NULL;
  dst->new_tokens = src->new_tokens ? g_bytes_ref (src->new_tokens) : NULL;
}

static gboolean
round_meta_transform (GstBuffer *dest, GstMeta *meta, GstBuffer *buffer, GQuark type,
                      gpointer data)
{
  GstDflashRoundMeta *m;

  /* the meta describes the round, not the bytes: it survives any copy */
  if (!(m = gst_buffer_add_dflash_round_meta (dest)))
    return FALSE;
  round_meta_copy (m, (GstDflashRoundMeta *) meta);
  return TRUE;
}

const GstMetaInfo *
gst_dflash_round_meta_get_info (void)
{
  static const GstMetaInfo *info = NULL;

  if (g_once_init_enter ((GstMetaInfo **) &info)) {
    const GstMetaInfo *i = gst_meta_register (GST_DFLASH_ROUND_META_API_TYPE,
        "GstDflashRoundMeta", sizeof (GstDflashRoundMeta), round_meta_init,
        round_meta_free, round_meta_transform);
    g_once_init_leave ((GstMetaInfo **) &info, (GstMetaInfo *) i);
  }
  return info;
}

GstDflashRoundMeta *
gst_buffer_add_dflash_round_meta (GstBuffer *buffer)
{
  return (GstDflashRoundMeta *) gst_buffer_add_meta (buffer, GST_DFLASH_ROUND_META_INFO, NULL);
}

GstBuffer *
gst_dflash_round_buffer_new (const GstDflashRoundMeta *meta, GBytes *payload,
                             GstDflashRoundMeta **new_meta)
{
  GstBuffer *buf = payload ? gst_buffer_new_wrapped_bytes (payload) : gst_buffer_new ();
  GstDflashRoundMeta *m = gst_buffer_add_dflash_round_meta (buf);

  /* the buffer's memory holds a reference of its own: the caller's is ours
   * to drop (every round's payload leaked before) */
  if (payload)
    g_bytes_unref (payload);
  round_meta_copy (m, meta);
  if (new_meta)
    *new_meta = m;
  return buf;
}

GstEvent *
gst_dflash_verdict_event_new (guint sequence, guint round, gint64 anchor_pos, gint accepted,
                              gint bonus, gboolean done)
{
  return gst_event_new_custom (GST_EVENT_CUSTOM_UPSTREAM,
      gst_structure_new (GST_DFLASH_VERDICT_EVENT,
          "sequence", G_TYPE_UINT, sequence, "round", G_TYPE_UINT, round,
          "anchor-position", G_TYPE_INT64, anchor_pos, "accepted", G_TYPE_INT, accepted,
          "bonus", G_TYPE_INT, bonus, "done", G_TYPE_BOOLEAN, done, NULL));
}

gboolean
gst_dflash_verdict_event_parse (GstEvent *event, guint *sequence, guint *round,
                                gint64 *anchor_pos, gint *accepted, gint *bonus, gboolean *done)
{
  const GstStructure *s;

  if (GST_EVENT_TYPE (event) != GST_EVENT_CUSTOM_UPSTREAM
      || !(s = gst_event_get_structure (event))
      || !gst_structure_has_name (s, GST_DFLASH_VERDICT_EVENT))
    return FALSE;
  return gst_structure_get (s, "sequence", G_TYPE_UINT, sequence, "round", G_TYPE_UINT, round,
      "anchor-position", G_TYPE_INT64, anchor_pos, "accepted", G_TYPE_INT, accepted,
      "bonus", G_TYPE_INT, bonus, "done", G_TYPE_BOOLEAN, done, NULL);
}

GstEvent *
gst_dflash_route_event_new (guint sequence, guint round, gboolean chain)
{
  return gst_event_new_custom (GST_EVENT_CUSTOM_UPSTREAM,
      gst_structure_new (GST_DFLASH_ROUTE_EVENT, "sequence", G_TYPE_UINT, sequence,
          "round", G_TYPE_UINT, round, "chain", G_TYPE_BOOLEAN, chain, NULL));
}

gboolean
gst_dflash_route_event_parse (GstEvent *event, guint *sequence, guint *round, gboolean *chain)
{
  const GstStructure *s;

  if (GST_EVENT_TYPE (event) != GST_EVENT_CUSTOM_UPSTREAM
      || !(s = gst_event_get_structure (event))
      || !gst_structure_has_name (s, GST_DFLASH_ROUTE_EVENT))
    return FALSE;
  return gst_structure_get (s, "sequence", G_TYPE_UINT, sequence, "round", G_TYPE_UINT, round,
      "chain", G_TYPE_BOOLEAN, chain, NULL);
}

GstQuery *
gst_dflash_route_query_new (void)
{
  return gst_query_new_custom (GST_QUERY_CUSTOM,
      gst_structure_new (GST_DFLASH_ROUTE_QUERY, "first", G_TYPE_BOOLEAN, FALSE, NULL));
}

gboolean
gst_dflash_is_route_query (GstQuery *query)
{
  const GstStructure *s = gst_query_get_structure (query);

  return GST_QUERY_TYPE (query) == GST_QUERY_CUSTOM && s
      && gst_structure_has_name (s, GST_DFLASH_ROUTE_QUERY);
}

void
gst_dflash_route_query_set (GstQuery *query, gboolean first)
{
  gst_structure_set (gst_query_writable_structure (query), "first", G_TYPE_BOOLEAN, first, NULL);
}

gboolean
gst_dflash_route_query_get (GstQuery *query)
{
  gboolean first = FALSE;

  gst_structure_get_boolean (gst_query_get_structure (query), "first", &first);
  return first;
}

gboolean
gst_dflash_route_decided_first (GstPad *srcpad)
{
  GstQuery *q = gst_dflash_route_query_new ();
  gboolean first = gst_pad_peer_query (srcpad, q) && gst_dflash_route_query_get (q);

  gst_query_unref (q);
  return first;
}
