/* gst-dflash — the round meta: which sequence and round a buffer belongs to.
 *
 * Every buffer between tapsource and verifier carries one. It holds a
 * reference to the sequence (gstdflashseq.h: where an element finds the
 * sequence's state), names the sequence and the round, the anchor and its position, where the buffer's
 * context rows (if any) begin, and the small things a stage further on
 * needs: the target's tip row (the router reads it) and the tokens committed
 * since the previous round (the chain drafter keeps its text from them).
 */
#pragma once

#include <gst/gst.h>

G_BEGIN_DECLS

typedef enum {
  GST_DFLASH_SOURCE_NONE,    /* no proposal: a plain decoding step */
  GST_DFLASH_SOURCE_BLOCK,   /* the DFlash block */
  GST_DFLASH_SOURCE_CHAIN,   /* the chain (prompt lookup) drafter */
} GstDflashSource;

/* gstdflashseq.h */
typedef struct _GstDflashSeq GstDflashSeq;

typedef struct {
  GstMeta meta;
  GstDflashSeq *seq;         /* a reference; NULL on the tokens that leave the loop */
  guint sequence;            /* its id, as the verdict and route events name it */
  guint round;
  gint anchor;               /* the token the round drafts after */
  gint64 anchor_pos;         /* its position */
  gint64 ctx_pos;            /* position of the buffer's first context row */
  guint ctx_rows;            /* context rows in a taps buffer */
  GstDflashSource source;    /* who made a proposal */
  guint match;               /* a chain proposal: the length of the suffix it matched */
  guint64 draft_ns;          /* time the round has spent drafting so far */
  GBytes *tip;               /* the target's final hidden row before the anchor (floats) */
  GBytes *new_tokens;        /* int32 tokens committed since the previous round */
} GstDflashRoundMeta;

GType gst_dflash_round_meta_api_get_type (void);
const GstMetaInfo *gst_dflash_round_meta_get_info (void);
#define GST_DFLASH_ROUND_META_API_TYPE (gst_dflash_round_meta_api_get_type ())
#define GST_DFLASH_ROUND_META_INFO (gst_dflash_round_meta_get_info ())

GstDflashRoundMeta *gst_buffer_add_dflash_round_meta (GstBuffer *buffer);
#define gst_buffer_get_dflash_round_meta(b) \
  ((GstDflashRoundMeta *) gst_buffer_get_meta ((b), GST_DFLASH_ROUND_META_API_TYPE))
/* A new buffer holding `payload` (may be NULL: no memory; the buffer takes
 * the caller's reference) with a copy of `meta` (its bytes and sequence
 * shared: the copy holds references of its own). */
GstBuffer *gst_dflash_round_buffer_new (const GstDflashRoundMeta *meta, GBytes *payload,
                                        GstDflashRoundMeta **new_meta);

/* The verdict of a round, sent upstream by the verifier. */
#define GST_DFLASH_VERDICT_EVENT "dflash-verdict"

GstEvent *gst_dflash_verdict_event_new (guint sequence, guint round, gint64 anchor_pos,
                                        gint accepted, gint bonus, gboolean done);
gboolean gst_dflash_verdict_event_parse (GstEvent *event, guint *sequence, guint *round,
                                         gint64 *anchor_pos, gint *accepted, gint *bonus,
                                         gboolean *done);

/* The route of a round, decided before its block is drafted: a router
 * that takes the chain's proposal and decides when it arrives (its
 * decide-first) sends this upstream on the block's branch, for every
 * round, and dflashblock skips the block on the chain's rounds. The
 * block's branch asks first, with the query below, whether a router there
 * decides so (only then does dflashblock wait for a decision). */
#define GST_DFLASH_ROUTE_EVENT "dflash-route"
#define GST_DFLASH_ROUTE_QUERY "dflash-route-first"

GstEvent *gst_dflash_route_event_new (guint sequence, guint round, gboolean chain);
gboolean gst_dflash_route_event_parse (GstEvent *event, guint *sequence, guint *round,
                                       gboolean *chain);
/* A query "does a router downstream decide each round first?"; answered
 * with gst_dflash_route_query_set, read with gst_dflash_route_query_get. */
GstQuery *gst_dflash_route_query_new (void);
void gst_dflash_route_query_set (GstQuery *query, gboolean first);
gboolean gst_dflash_route_query_get (GstQuery *query);
gboolean gst_dflash_is_route_query (GstQuery *query);
/* Asked from the block's branch (ctxsettle, dflashblock): whether a router
 * downstream of `srcpad` decides each round first. */
gboolean gst_dflash_route_decided_first (GstPad *srcpad);

G_END_DECLS
