/* gst-dflash — dflashblock
 * Copyright (C) 2026 gst-dflash developers
 *
 * This library is free software; you can redistribute it and/or modify it
 * under the terms of the GNU Library General Public License as published by
 * the Free Software Foundation; either version 2 of the License, or (at your
 * option) any later version.
 */
/**
 * SECTION:element-dflashblock
 * @title: dflashblock
 *
 * dflashblock runs the DFlash 2 block: the rows [anchor, MASK × (block − 1)]
 * embedded with the target's table go through the drafter's layers
 * (dynamic convolution, attention over the windowed context and the whole
 * block, MLP) in one pass, and the rows after the anchor through the
 * target's head: the round's propose-block step (core/round.h), whose choice
 * of tokens is left to a selector. It pushes those rows and their logits.
 *
 * On a GPU (the context's caps in CUDA or Vulkan memory, or `backend`
 * forcing one) the block runs on the device the context lives on and its
 * rows and logits stay there: the output buffer holds device memory from a
 * pool of the device's tensors, the one the element downstream proposes
 * through the ALLOCATION query where it fits (the same device, the block's
 * size), else one of its own.
 *
 * Under a router that decides each round before it is drafted (the
 * router's #GstDflashRouter:decide-first, which dflashblock learns by a
 * query downstream when it starts), dflashblock waits for the round's
 * route, which the router sends upstream as soon as the chain's proposal
 * for that round reaches it; on the chain's rounds it skips the block and
 * pushes the round on without rows (the selector passes it on as an empty
 * proposal, and the router takes the chain's). The block costs about two
 * and a half of the target's decoding steps on two cores, so the chain's
 * rounds are spared it. The wait needs the chain's branch to run while
 * this one waits: a queue after the tee on the block's branch (as in
 * pipelines/routed.pipeline). Where no route comes within
 * #GstDflashBlock:route-timeout the block is drafted anyway, with a
 * warning: the round is never lost, and the router still takes the
 * chain's proposal where it decided so.
 *
 * ## Example launch line
 * |[
 * gst-launch-1.0 tapsource ! ctxsettle ! dflashblock head-width=4096 ! selector ! verifier ! fdsink
 * ]|
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstdflashblock.h"

#include "round.h"

#include <string.h>

#include "dfl-error.h"
#include "gstdflashdevicememory.h"
#include "gstdflashelement.h"

GST_DEBUG_CATEGORY_STATIC (gst_dflash_block_debug);
#define GST_CAT_DEFAULT gst_dflash_block_debug

#define DEFAULT_ROUTE_TIMEOUT_MS 5000

enum {
  PROP_0,
  PROP_HEAD_WIDTH,
  PROP_ROUTE_TIMEOUT,
  PROP_SKIPPED_ROUNDS,
  /* batch-limit and its figures batches and max-batch, in this order
   * (gst_dflash_filter_class_install_batch_limit) */
  PROP_BATCH_LIMIT,
  PROP_BATCHES,
  PROP_MAX_BATCH,
};

struct _GstDflashBlock {
  GstDflashFilter parent;
  /* properties (object lock) */
  int head_width;      /* 0 for the whole head */
  int route_timeout_ms;
  guint64 skipped;     /* the skipped-rounds figure */

  int width;           /* in use */
  /* on a GPU: the block's output tensors, reused round after round */
  GstBufferPool *pool;
  gsize pool_size;
  /* routes decided downstream before the block (see above) */
  GMutex lock;
  GCond cond;
  GHashTable *routes;  /* sequence → its rounds' routes in round order: a GQueue of Routed */
  gboolean flushing;
  int decide_first;    /* −1: not asked yet */
  gboolean warned;
};

/* A route as it waits in the table: the round, and whether the chain's. */
typedef struct {
  guint round;
  gboolean chain;
} Routed;

#define _do_init \
    GST_DEBUG_CATEGORY_INIT (gst_dflash_block_debug, "dflashblock", 0, "dflash block");
#define gst_dflash_block_parent_class parent_class
G_DEFINE_TYPE_WITH_CODE (GstDflashBlock, gst_dflash_block, GST_TYPE_DFLASH_FILTER, _do_init);
GST_ELEMENT_REGISTER_DEFINE (dflashblock, "dflashblock", GST_RANK_NONE, GST_TYPE_DFLASH_BLOCK);

static GstCaps *
gst_dflash_block_src_caps (GstDflashFilter *filter, GstCaps *sink_caps, GString *why)
{
  GstDflashBlock *self = GST_DFLASH_BLOCK (filter);
  GstDflashModel *m = gst_dflash_filter_model (filter);
  const DflQwen3Config *c = dfl_target_config (gst_dflash_model_target (m));
  const DflDrafterGeometry *g;
  int head_width;

  if (!(g = gst_dflash_filter_drafter_input (filter, sink_caps, GST_DFLASH_CONTEXT_CAPS, why)))
    return NULL;
  GST_OBJECT_LOCK (self);
  head_width = self->head_width;
  GST_OBJECT_UNLOCK (self);
  self->width = head_width > 0 ? MIN (head_width, c->vocab) : c->vocab;
  if (self->width < g->selector_top) {
    g_string_append_printf (why, "head-width %d is narrower than the selector's %d candidates",
                            self->width, g->selector_top);
    return NULL;
  }
  return gst_caps_new_simple (GST_DFLASH_BLOCK_CAPS, "hidden", G_TYPE_INT, c->hidden,
      "vocab", G_TYPE_INT, c->vocab, "block", G_TYPE_INT, g->block,
      "width", G_TYPE_INT, self->width, NULL);
}

static void
drop_pool (GstDflashBlock *self)
{
  if (self->pool) {
    gst_buffer_pool_set_active (self->pool, FALSE);
    gst_clear_object (&self->pool);
  }
}

/* The pool downstream proposes for the block (decide_allocation's part):
 * taken where it holds `size`-byte tensors of the stage's device, else
 * NULL. */
static GstBufferPool *
downstream_pool (GstDflashBlock *self, GstDflashDevice *dev, gsize size)
{
  GstPad *srcpad = gst_dflash_filter_src_pad (GST_DFLASH_FILTER (self));
  GstCaps *caps = gst_pad_get_current_caps (srcpad);
  GstBufferPool *pool = NULL;
  GstQuery *query;

  if (!caps)
    return NULL;
  query = gst_query_new_allocation (caps, TRUE);
  gst_caps_unref (caps);
  if (gst_pad_peer_query (srcpad, query) && gst_query_get_n_allocation_pools (query) > 0)
    gst_query_parse_nth_allocation_pool (query, 0, &pool, NULL, NULL, NULL);
  gst_query_unref (query);
  if (pool && (!gst_dflash_device_pool_fits (pool, dev, size)
               || !gst_buffer_pool_set_active (pool, TRUE)))
    gst_clear_object (&pool);
  GST_DEBUG_OBJECT (self, "%s", pool ? "the pool downstream proposed holds the block"
                    : "no pool downstream fits the block: a pool of our own");
  return pool;
}

/* A buffer of `size` bytes on the stage's device, the round's meta on it. */
static GstBuffer *
device_output (GstDflashBlock *self, GstBuffer *in, gsize size, GError **error)
{
  GstDflashDevice *dev = gst_dflash_filter_device (GST_DFLASH_FILTER (self));
  GstBuffer *buf;

  if (self->pool && self->pool_size != size)
    drop_pool (self);
  if (!self->pool) {
    if (!(self->pool = downstream_pool (self, dev, size))
        && !(self->pool = gst_dflash_device_pool_new (dev, size, error)))
      return NULL;
    self->pool_size = size;
  }
  if (!(buf = gst_dflash_device_pool_acquire (self->pool, dev, error)))
    return NULL;
  /* the round's meta travels with the tensor */
  gst_buffer_copy_into (buf, in, GST_BUFFER_COPY_METADATA, 0, -1);
  return buf;
}

/* A buffer for the round's block where the sequence's context lives (on a
 * GPU a tensor of the device's pool; on the CPU system memory, the
 * round's buffer made once it is written: `*payload`), and the tensor
 * over it; `map` stays mapped until done (a GPU's). */
static GstBuffer *
block_output (GstDflashBlock *self, DflDraftCtx *ctx, GstBuffer *in, float **payload,
              GstMapInfo *map, DflTensor *t, GError **error)
{
  const DflDrafterGeometry *g = gst_dflash_model_geometry (gst_dflash_filter_model (
      GST_DFLASH_FILTER (self)));
  gint64 rows = g->block - 1, cols = g->hidden + self->width;
  gsize size = dfl_draft_ctx_block_bytes (ctx, self->width);
  GstBuffer *out;

  *payload = NULL;
  map->memory = NULL;
  if (!dfl_draft_ctx_device (ctx)) {
    *payload = g_malloc (size);
    *t = dfl_tensor_2d (NULL, *payload, 0, DFL_DTYPE_F32, rows, cols);
    return NULL;
  }
  /* on a GPU the block is in the device's order when it returns; the
   * selector's read of the ids waits for it */
  if (!(out = device_output (self, in, size, error)))
    return NULL;
  if (!gst_dflash_buffer_tensor (out, dfl_draft_ctx_device (ctx), GST_MAP_WRITE, map,
                                 DFL_DTYPE_F32, rows, cols, t, error)) {
    if (map->memory)
      gst_buffer_unmap (out, map);
    gst_buffer_unref (out);
    return NULL;
  }
  return out;
}

/* The round's output once its block is written (ok) or dropped. */
static GstBuffer *
block_done (GstDflashBlock *self, DflDraftCtx *ctx, GstDflashRoundMeta *meta, GstBuffer *out,
            float *payload, GstMapInfo *map, gboolean ok)
{
  if (payload) {
    if (!ok) {
      g_free (payload);
      return NULL;
    }
    return gst_dflash_round_buffer_new (meta, g_bytes_new_take (payload,
        dfl_draft_ctx_block_bytes (ctx, self->width)), NULL);
  }
  if (map->memory)
    gst_buffer_unmap (out, map);
  if (!ok)
    gst_clear_buffer (&out);
  return out;
}

/* The block of the round into a buffer where the sequence's context lives:
 * the rows after the anchor, then their logits over the head's first rows
 * (on a GPU a tensor of the device's pool; on the CPU system memory). */
static GstBuffer *
draft_block (GstDflashBlock *self, GstDflashSeq *s, GstBuffer *in, GstDflashRoundMeta *meta,
             GError **error)
{
  GstDflashFilter *filter = GST_DFLASH_FILTER (self);
  GstDflashModel *m = gst_dflash_filter_model (filter);
  DflDraftCtx *ctx = gst_dflash_model_seq_draft (m, s, gst_dflash_filter_backend (filter),
                                                 gst_dflash_filter_device (filter), error);
  float *payload;
  GstMapInfo map;
  GstBuffer *out;
  DflTensor t;
  gboolean ok;

  if (!ctx)
    return NULL;
  out = block_output (self, ctx, in, &payload, &map, &t, error);
  if (!out && !payload)
    return NULL;
  ok = dfl_round_propose_block (ctx, meta->anchor_pos, meta->anchor, self->width, FALSE, &t,
                                NULL, error) >= 0;
  return block_done (self, ctx, meta, out, payload, &map, ok);
}

/* The blocks of rounds i[0 … k) of `in` (different sequences) in one
 * pass into out[i[j]]; FALSE with the error (every output dropped). */
static gboolean
draft_blocks (GstDflashBlock *self, GstBuffer **in, GstDflashRoundMeta **meta, const guint *idx,
              guint k, GstBuffer **out, GError **error)
{
  GstDflashFilter *filter = GST_DFLASH_FILTER (self);
  GstDflashModel *m = gst_dflash_filter_model (filter);
  DflDraftCtx *ctx[GST_DFLASH_FILTER_MAX_BATCH];
  float *payload[GST_DFLASH_FILTER_MAX_BATCH] = { NULL };
  GstMapInfo map[GST_DFLASH_FILTER_MAX_BATCH];
  DflTensor t[GST_DFLASH_FILTER_MAX_BATCH];
  gint64 pos[GST_DFLASH_FILTER_MAX_BATCH];
  guint32 anchor[GST_DFLASH_FILTER_MAX_BATCH];
  DflDraftBatch *batch;
  gboolean ok = TRUE;
  guint made = 0;

  for (guint j = 0; j < k; j++) {
    GstDflashRoundMeta *mj = meta[idx[j]];
    if (!mj->seq
        || !(ctx[j] = gst_dflash_model_seq_draft (m, mj->seq, gst_dflash_filter_backend (filter),
                                                  gst_dflash_filter_device (filter), error)))
      return FALSE;
    pos[j] = mj->anchor_pos;
    anchor[j] = (guint32) mj->anchor;
  }
  if (!(batch = gst_dflash_filter_draft_batch (filter, ctx[0], (int) k))) {
    for (guint j = 0; j < k; j++)
      if (!(out[idx[j]] = draft_block (self, meta[idx[j]]->seq, in[idx[j]], meta[idx[j]], error)))
        return FALSE;
    return TRUE;
  }
  for (; made < k; made++) {
    out[idx[made]] = block_output (self, ctx[made], in[idx[made]], &payload[made], &map[made],
                                   &t[made], error);
    if (!out[idx[made]] && !payload[made]) {
      ok = FALSE;
      break;
    }
  }
  if (ok)
    ok = dfl_round_propose_blocks (batch, ctx, (int) k, pos, anchor, self->width, t, error);
  if (ok)
    gst_dflash_filter_count_batch (filter, k);
  for (guint j = 0; j < made; j++)
    out[idx[j]] = block_done (self, ctx[j], meta[idx[j]], out[idx[j]], payload[j], &map[j], ok);
  return ok;
}

typedef enum {
  ROUTE_BLOCK,
  ROUTE_CHAIN,
  ROUTE_FLUSHING,
} Route;

/* Whether a router downstream decides each round before the block: asked
 * once, by a query, when the first round comes. */
static gboolean
decides_first (GstDflashBlock *self)
{
  if (self->decide_first < 0) {
    self->decide_first =
        gst_dflash_route_decided_first (gst_dflash_filter_src_pad (GST_DFLASH_FILTER (self)));
    GST_INFO_OBJECT (self, "%s", self->decide_first
                     ? "the router downstream decides each round first: waiting for its routes"
                     : "no router downstream decides first: every round is drafted");
  }
  return self->decide_first;
}

static void
free_routes (gpointer queue)
{
  g_queue_free_full (queue, g_free);
}

/* The round's route: where the router decides first, wait for it. The
 * router sends a sequence's routes in round order, and may send the next
 * round's before this branch has taken this one's (it passes a chain's
 * round on at once, and the verdict brings the next round), so they queue.
 * A route for a later round alone means the branches disagree on the
 * round (the router reports it once both proposals reach it): the block
 * is drafted. */
static Route
wait_route (GstDflashBlock *self, const GstDflashRoundMeta *meta)
{
  gpointer key = GUINT_TO_POINTER (meta->sequence);
  gint64 deadline;
  Routed *r = NULL;
  Route route = ROUTE_BLOCK;
  gboolean late = FALSE;
  int timeout_ms;

  if (!decides_first (self))
    return ROUTE_BLOCK;
  GST_OBJECT_LOCK (self);
  timeout_ms = self->route_timeout_ms;
  GST_OBJECT_UNLOCK (self);
  g_mutex_lock (&self->lock);
  deadline = g_get_monotonic_time () + (gint64) timeout_ms * 1000;
  for (;;) {
    GQueue *q = g_hash_table_lookup (self->routes, key);
    /* routes of rounds before this one are of rounds gone by */
    while (q && !g_queue_is_empty (q) && ((Routed *) g_queue_peek_head (q))->round < meta->round)
      g_free (g_queue_pop_head (q));
    if (self->flushing || (q && (r = g_queue_peek_head (q))))
      break;
    if (!g_cond_wait_until (&self->cond, &self->lock, deadline)) {
      late = TRUE;
      break;
    }
  }
  if (self->flushing)
    route = ROUTE_FLUSHING;
  else if (r && r->round == meta->round && r->chain)
    route = ROUTE_CHAIN;
  else if (r && r->round != meta->round)
    GST_DEBUG_OBJECT (self, "sequence %u: a route for round %u while round %u is here",
                      meta->sequence, r->round, meta->round);
  if (r && r->round == meta->round) {
    GQueue *q = g_hash_table_lookup (self->routes, key);
    g_free (g_queue_pop_head (q));
    /* a sequence with no route waiting leaves the table */
    if (g_queue_is_empty (q))
      g_hash_table_remove (self->routes, key);
  }
  g_mutex_unlock (&self->lock);
  if (late && !self->warned) {
    self->warned = TRUE;
    GST_ELEMENT_WARNING (self, STREAM, FAILED,
        ("no route from the router within route-timeout=%d ms: drafting the block anyway (is "
         "there a queue after the tee on the block's branch?)", timeout_ms),
        ("sequence %u round %u", meta->sequence, meta->round));
  }
  return route;
}

static gboolean
gst_dflash_block_src_event (GstDflashFilter *filter, GstEvent *event)
{
  GstDflashBlock *self = GST_DFLASH_BLOCK (filter);
  guint seq, round;
  gboolean chain;

  if (!gst_dflash_route_event_parse (event, &seq, &round, &chain))
    return FALSE;
  g_mutex_lock (&self->lock);
  {
    Routed *r = g_new (Routed, 1);
    GQueue *q = g_hash_table_lookup (self->routes, GUINT_TO_POINTER (seq));
    r->round = round;
    r->chain = chain;
    if (!q)
      g_hash_table_insert (self->routes, GUINT_TO_POINTER (seq), q = g_queue_new ());
    g_queue_push_tail (q, r);
  }
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
  gst_event_unref (event);
  return TRUE;
}

static void
gst_dflash_block_unlock (GstDflashFilter *filter)
{
  GstDflashBlock *self = GST_DFLASH_BLOCK (filter);

  g_mutex_lock (&self->lock);
  self->flushing = TRUE;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
}

static void
gst_dflash_block_reset (GstDflashFilter *filter)
{
  GstDflashBlock *self = GST_DFLASH_BLOCK (filter);

  drop_pool (self);
  g_mutex_lock (&self->lock);
  self->flushing = FALSE;
  g_hash_table_remove_all (self->routes);
  g_mutex_unlock (&self->lock);
  /* a new start may have another pipeline downstream */
  self->decide_first = -1;
  self->warned = FALSE;
}

/* The chain's round: no rows, the selector passes it on. */
static GstBuffer *
chain_round (GstDflashBlock *self, GstDflashRoundMeta *meta)
{
  GstDflashRoundMeta *om;
  GstBuffer *out = gst_dflash_round_buffer_new (meta, NULL, &om);

  om->source = GST_DFLASH_SOURCE_CHAIN;
  GST_OBJECT_LOCK (self);
  self->skipped++;
  GST_OBJECT_UNLOCK (self);
  GST_LOG_OBJECT (self, "sequence %u round %u is the chain's: no block", meta->sequence,
                  meta->round);
  return out;
}

static GstFlowReturn
gst_dflash_block_process (GstDflashFilter *filter, GstBuffer *in, GstDflashRoundMeta *meta,
                          GstBuffer **out)
{
  GstDflashBlock *self = GST_DFLASH_BLOCK (filter);
  GstDflashSeq *s = meta->seq;
  g_autoptr (GError) error = NULL;

  switch (wait_route (self, meta)) {
    case ROUTE_FLUSHING:
      return GST_FLOW_FLUSHING;
    case ROUTE_CHAIN:
      *out = chain_round (self, meta);
      return GST_FLOW_OK;
    case ROUTE_BLOCK:
    default:
      break;
  }
  if (!s || !(*out = draft_block (self, s, in, meta, &error)))
    goto draft_failed;
  return GST_FLOW_OK;

  /* ERRORS */
draft_failed:
  return gst_dflash_filter_round_failed (filter, "could not draft the block",
                                         meta, error);
}

/* Rounds of several sequences: each one's route first (the chain's pass
 * on without rows), then the blocks of the rest in one pass. */
static GstFlowReturn
gst_dflash_block_process_batch (GstDflashFilter *filter, GstBuffer **in,
                                GstDflashRoundMeta **meta, guint n, GstBuffer **out)
{
  GstDflashBlock *self = GST_DFLASH_BLOCK (filter);
  g_autoptr (GError) error = NULL;
  guint idx[GST_DFLASH_FILTER_MAX_BATCH], k = 0;

  g_assert (n <= GST_DFLASH_FILTER_MAX_BATCH);
  for (guint i = 0; i < n; i++)
    switch (wait_route (self, meta[i])) {
      case ROUTE_FLUSHING:
        return GST_FLOW_FLUSHING;
      case ROUTE_CHAIN:
        out[i] = chain_round (self, meta[i]);
        break;
      case ROUTE_BLOCK:
      default:
        idx[k++] = i;
        break;
    }
  if (k == 1 && !(out[idx[0]] = draft_block (self, meta[idx[0]]->seq, in[idx[0]], meta[idx[0]],
                                             &error)))
    return gst_dflash_filter_round_failed (filter, "could not draft the block", meta[idx[0]],
                                           error);
  if (k > 1 && !draft_blocks (self, in, meta, idx, k, out, &error))
    return gst_dflash_filter_round_failed (filter, "could not draft the blocks of a batch",
                                           meta[idx[0]], error);
  GST_LOG_OBJECT (self, "%u rounds: %u blocks in one pass", n, k);
  return GST_FLOW_OK;
}

static void
gst_dflash_block_finalize (GObject *object)
{
  GstDflashBlock *self = GST_DFLASH_BLOCK (object);

  drop_pool (self);
  g_hash_table_unref (self->routes);
  g_mutex_clear (&self->lock);
  g_cond_clear (&self->cond);
  G_OBJECT_CLASS (parent_class)->finalize (object);
}

static void
gst_dflash_block_class_init (GstDflashBlockClass *klass)
{
  GObjectClass *gobject_class = G_OBJECT_CLASS (klass);
  GstDflashFilterClass *filter_class = GST_DFLASH_FILTER_CLASS (klass);

  gobject_class->set_property = gst_dflash_field_set_property;
  gobject_class->get_property = gst_dflash_field_get_property;
  /**
   * GstDflashBlock:head-width
   *
   * Score the block's rows over the head's first N rows only (a shortlist
   * of the vocabulary); 0 for the whole head.
   */
  gst_dflash_install_field_property (gobject_class, PROP_HEAD_WIDTH,
      g_param_spec_int ("head-width", "Head width",
          "Score the block over the head's first N rows only (0: the whole head)",
          0, G_MAXINT, 0, G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY),
      G_STRUCT_OFFSET (GstDflashBlock, head_width));
  /**
   * GstDflashBlock:route-timeout
   *
   * Under a router that decides first: how long a round waits for its
   * route before the block is drafted anyway (with a warning).
   */
  gst_dflash_install_field_property (gobject_class, PROP_ROUTE_TIMEOUT,
      g_param_spec_int ("route-timeout", "Route timeout",
          "Milliseconds a round waits for the route from a router that decides first, before "
          "the block is drafted anyway", 1, 600000, DEFAULT_ROUTE_TIMEOUT_MS,
          G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_PLAYING),
      G_STRUCT_OFFSET (GstDflashBlock, route_timeout_ms));
  /**
   * GstDflashBlock:skipped-rounds
   *
   * Rounds a router that decides first gave the chain, on which the block
   * was not drafted.
   */
  gst_dflash_install_field_property (gobject_class, PROP_SKIPPED_ROUNDS,
      g_param_spec_uint64 ("skipped-rounds", "Skipped rounds",
          "Rounds the router gave the chain before they were drafted, so no block was run",
          0, G_MAXUINT64, 0, G_PARAM_READABLE | G_PARAM_STATIC_STRINGS),
      G_STRUCT_OFFSET (GstDflashBlock, skipped));
  /**
   * GstDflashBlock:batch-limit
   *
   * With several sequences in flight (tapsource in-flight=N): the most
   * rounds of different sequences whose blocks are drafted in one pass of
   * the drafter. At 1, the default, each round is drafted in the
   * streaming thread that brings it; above, rounds are queued and a task
   * on the src pad drafts every round waiting (up to max-batch; it never
   * waits for more) together: the drafter's matrices and the head are
   * read once for all of them. On a GPU that reading is most of a block;
   * on two CPU cores the products are compute-bound and a batch gains
   * little (the queue's hand-off can cost more). A device without the
   * table ops (Vulkan) drafts them one at a time, said once in the log.
   * The figures `batches` and `max-batch` count the passes of several
   * blocks and the most one took.
   */
  gst_dflash_filter_class_install_batch_limit (filter_class, PROP_BATCH_LIMIT,
      "Most rounds of different sequences drafted in one pass (1: each round in the streaming "
      "thread that brings it)", "drafted the blocks");
  gst_element_class_set_static_metadata (GST_ELEMENT_CLASS (klass), "DFlash block",
      "Filter/Tensor", "Drafts a block of tokens in one pass of the DFlash 2 drafter",
      "gst-dflash developers");
  gst_dflash_filter_class_add_pads (filter_class,
      GST_DFLASH_CONTEXT_CAPS ", hidden = (int) [ 1, MAX ], vocab = (int) [ 1, MAX ], block = (int) [ 2, MAX ]",
      GST_DFLASH_BLOCK_CAPS ", hidden = (int) [ 1, MAX ], vocab = (int) [ 1, MAX ], block = (int) [ 2, MAX ], width = (int) [ 1, MAX ]");
  filter_class->src_caps = gst_dflash_block_src_caps;
  filter_class->process = gst_dflash_block_process;
  filter_class->process_batch = gst_dflash_block_process_batch;
  filter_class->reset = gst_dflash_block_reset;
  filter_class->unlock = gst_dflash_block_unlock;
  filter_class->src_event = gst_dflash_block_src_event;
  gobject_class->finalize = gst_dflash_block_finalize;
}

static void
gst_dflash_block_init (GstDflashBlock *self)
{
  g_mutex_init (&self->lock);
  g_cond_init (&self->cond);
  self->routes = g_hash_table_new_full (NULL, NULL, NULL, free_routes);
  self->decide_first = -1;
  self->route_timeout_ms = DEFAULT_ROUTE_TIMEOUT_MS;
}
