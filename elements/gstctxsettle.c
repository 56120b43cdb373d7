/* gst-dflash — ctxsettle
 * Copyright (C) 2026 gst-dflash developers
 *
 * This library is free software; you can redistribute it and/or modify it
 * under the terms of the GNU Library General Public License as published by
 * the Free Software Foundation; either version 2 of the License, or (at your
 * option) any later version.
 */
/**
 * SECTION:element-ctxsettle
 * @title: ctxsettle
 *
 * ctxsettle turns the target's context rows (the taps tapsource pushes)
 * into the drafter's context: each row through the drafter's FC and hidden
 * norm, then every drafter layer's keys and values. Rows at positions the
 * context already holds replace them (that is how a rejected round is
 * rewound), rows wait until a block is about to read them and then settle
 * in one batch, and each layer keeps only the window it reads (plus slack
 * for rewinds). A context too short for the block (a rewind past the slack)
 * is an error, never a short draft. On the CPU this is the round's settle
 * step (core/round.h).
 *
 * Under a router that decides each round before the block is drafted (the
 * router's #GstDflashRouter:decide-first, which ctxsettle learns by a
 * query downstream when the first round comes), a round may go to the
 * chain and need no block: ctxsettle then only queues the round's rows,
 * and dflashblock settles whatever waits when it drafts a block. The
 * chain's rounds, which wait for this branch's (empty) proposal at the
 * router, so pay no settling (on the default pair on two CPU cores that
 * was about a third of a millisecond a round, with the target's step
 * about two). Without such a router every round drafts a block, and the
 * rows settle here, before it.
 *
 * With `backend=vulkan` the context lives on the Vulkan device (the taps
 * come in system memory from the CPU target and are uploaded); with
 * `backend=cuda`, or auto and taps in CUDA memory, on the CUDA device, the
 * taps never leaving the card. The context caps then carry that device's
 * memory feature, so the block runs on the same device.
 *
 * ## Example launch line
 * |[
 * gst-launch-1.0 tapsource ! queue ! ctxsettle ! queue ! dflashblock ! selector ! verifier ! fdsink
 * ]|
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstctxsettle.h"

#include "round.h"

#include "dfl-error.h"
#include "gstdflashdevicememory.h"
#include "gstdflashelement.h"

GST_DEBUG_CATEGORY_STATIC (gst_ctx_settle_debug);
#define GST_CAT_DEFAULT gst_ctx_settle_debug

enum {
  PROP_0,
  PROP_QUEUED_ROUNDS,
  /* batch-limit and its figures batches and max-batch, in this order
   * (gst_dflash_filter_class_install_batch_limit) */
  PROP_BATCH_LIMIT,
  PROP_BATCHES,
  PROP_MAX_BATCH,
};

struct _GstCtxSettle {
  GstDflashFilter parent;
  guint64 queued;      /* the queued-rounds figure (object lock) */
  int decide_first;    /* −1: not asked yet */
};

#define _do_init \
    GST_DEBUG_CATEGORY_INIT (gst_ctx_settle_debug, "ctxsettle", 0, "dflash ctxsettle");
#define gst_ctx_settle_parent_class parent_class
G_DEFINE_TYPE_WITH_CODE (GstCtxSettle, gst_ctx_settle, GST_TYPE_DFLASH_FILTER, _do_init);
GST_ELEMENT_REGISTER_DEFINE (ctxsettle, "ctxsettle", GST_RANK_NONE, GST_TYPE_CTX_SETTLE);

static GstCaps *
gst_ctx_settle_src_caps (GstDflashFilter *filter, GstCaps *sink_caps, GString *why)
{
  GstDflashModel *m = gst_dflash_filter_model (filter);
  const DflQwen3Config *c = dfl_target_config (gst_dflash_model_target (m));
  const DflDrafterGeometry *g = gst_dflash_model_geometry (m);
  g_autoptr (GstCaps) want = NULL;

  if (!g) {
    g_string_append_printf (why, "the model %s has no drafter to settle context for",
                            dfl_target_dir (gst_dflash_model_target (m)));
    return NULL;
  }
  want = gst_caps_new_simple (GST_DFLASH_TAPS_CAPS, "hidden", G_TYPE_INT, c->hidden,
      "tap-width", G_TYPE_INT, gst_dflash_model_tap_width (m), "vocab", G_TYPE_INT, c->vocab, NULL);
  if (!gst_dflash_caps_agree (sink_caps, want, why))
    return NULL;
  return gst_caps_new_simple (GST_DFLASH_CONTEXT_CAPS, "hidden", G_TYPE_INT, c->hidden,
      "vocab", G_TYPE_INT, c->vocab, "block", G_TYPE_INT, g->block, NULL);
}

/* Whether a router downstream decides each round before the block: asked
 * once, by a query, when the first round comes (as dflashblock asks). */
static gboolean
decides_first (GstCtxSettle *self)
{
  if (self->decide_first < 0) {
    self->decide_first =
        gst_dflash_route_decided_first (gst_dflash_filter_src_pad (GST_DFLASH_FILTER (self)));
    GST_INFO_OBJECT (self, "%s", self->decide_first
                     ? "the router downstream decides each round first: rows wait for the block"
                     : "every round drafts a block: rows settle here");
  }
  return self->decide_first;
}

/* The round's rows into the sequence's context: settled, and checked for
 * the block that comes next, or (where a router decides first and the
 * round may need no block, or a batch settles them after) queued. The
 * taps are where the context takes them: on its device (the target ran
 * there), or in system memory. `*ctx`: the sequence's context. */
static gboolean
settle (GstDflashFilter *filter, GstDflashSeq *s, GstBuffer *in, GstDflashRoundMeta *meta,
        gboolean settle_now, DflDraftCtx **ctx, GError **error)
{
  GstDflashModel *m = gst_dflash_filter_model (filter);
  DflTensor taps;
  GstMapInfo map;
  gboolean ok;

  *ctx = gst_dflash_model_seq_draft (m, s, gst_dflash_filter_backend (filter),
                                     gst_dflash_filter_device (filter), error);
  if (!*ctx || !gst_dflash_buffer_tensor (in, dfl_draft_ctx_device (*ctx), GST_MAP_READ, &map,
                                          DFL_DTYPE_F32, meta->ctx_rows,
                                          gst_dflash_model_tap_width (m), &taps, error))
    return FALSE;
  /* the block is next: its rows become context now, in one batch (an
   * anchor of −1 only queues them) */
  ok = dfl_round_settle (*ctx, meta->round == 0, meta->ctx_pos, &taps,
                         settle_now ? meta->anchor_pos : -1, error);
  if (map.memory)
    gst_buffer_unmap (in, &map);
  return ok;
}

/* Whether the round's taps are the size its meta says; else an error. */
static gboolean
check_size (GstDflashFilter *filter, GstBuffer *in, GstDflashRoundMeta *meta)
{
  int tw = gst_dflash_model_tap_width (gst_dflash_filter_model (filter));

  if (gst_buffer_get_size (in) == (gsize) meta->ctx_rows * tw * sizeof (float))
    return TRUE;
  GST_ELEMENT_ERROR (filter, STREAM, FORMAT, ("the taps of a round are not the size they say"),
      ("sequence %u round %u holds %" G_GSIZE_FORMAT " bytes, not %u rows of %d taps",
       meta->sequence, meta->round, gst_buffer_get_size (in), meta->ctx_rows, tw));
  return FALSE;
}

static GstFlowReturn
gst_ctx_settle_process (GstDflashFilter *filter, GstBuffer *in, GstDflashRoundMeta *meta,
                        GstBuffer **out)
{
  GstCtxSettle *self = GST_CTX_SETTLE (filter);
  gboolean queue_only = decides_first (self);
  g_autoptr (GError) error = NULL;
  DflDraftCtx *ctx;

  if (!check_size (filter, in, meta))
    return GST_FLOW_ERROR;
  if (!meta->seq || !settle (filter, meta->seq, in, meta, !queue_only, &ctx, &error))
    goto settle_failed;
  if (queue_only) {
    GST_OBJECT_LOCK (filter);
    self->queued++;
    GST_OBJECT_UNLOCK (filter);
  }
  GST_LOG_OBJECT (filter, "sequence %u: %u rows %s at %" G_GINT64_FORMAT, meta->sequence,
                  meta->ctx_rows, queue_only ? "queued" : "settled", meta->ctx_pos);
  *out = gst_dflash_round_buffer_new (meta, NULL, NULL);
  return GST_FLOW_OK;

  /* ERRORS */
settle_failed:
  return gst_dflash_filter_round_failed (filter, "could not settle the drafter's context",
                                         meta, error);
}

/* Rounds of several sequences: every round's rows queued, then (where
 * each round drafts a block next) all of them settled in one pass. */
static GstFlowReturn
gst_ctx_settle_process_batch (GstDflashFilter *filter, GstBuffer **in,
                              GstDflashRoundMeta **meta, guint n, GstBuffer **out)
{
  GstCtxSettle *self = GST_CTX_SETTLE (filter);
  DflDraftCtx *ctx[GST_DFLASH_FILTER_MAX_BATCH];
  gint64 anchor[GST_DFLASH_FILTER_MAX_BATCH];
  g_autoptr (GError) error = NULL;
  DflDraftBatch *batch;
  GstFlowReturn ret;

  g_assert (n <= GST_DFLASH_FILTER_MAX_BATCH);
  /* under a router that decides first each round only queues its rows */
  if (decides_first (self)) {
    for (guint i = 0; i < n; i++)
      if ((ret = gst_ctx_settle_process (filter, in[i], meta[i], &out[i])) != GST_FLOW_OK)
        return ret;
    return GST_FLOW_OK;
  }
  for (guint i = 0; i < n; i++) {
    if (!check_size (filter, in[i], meta[i]))
      return GST_FLOW_ERROR;
    if (!meta[i]->seq || !settle (filter, meta[i]->seq, in[i], meta[i], FALSE, &ctx[i], &error))
      return gst_dflash_filter_round_failed (filter, "could not settle the drafter's context",
                                             meta[i], error);
    anchor[i] = meta[i]->anchor_pos;
  }
  batch = gst_dflash_filter_draft_batch (filter, ctx[0], (int) n);
  if (!dfl_round_settle_batch (batch, ctx, (int) n, anchor, &error))
    return gst_dflash_filter_round_failed (filter, "could not settle the drafter's contexts of a "
                                           "batch", meta[0], error);
  if (batch)
    gst_dflash_filter_count_batch (filter, n);
  for (guint i = 0; i < n; i++)
    out[i] = gst_dflash_round_buffer_new (meta[i], NULL, NULL);
  GST_LOG_OBJECT (filter, "%u rounds settled in one pass", n);
  return GST_FLOW_OK;
}

static void
gst_ctx_settle_reset (GstDflashFilter *filter)
{
  /* a new start may have another pipeline downstream */
  GST_CTX_SETTLE (filter)->decide_first = -1;
}

static void
gst_ctx_settle_class_init (GstCtxSettleClass *klass)
{
  GObjectClass *gobject_class = G_OBJECT_CLASS (klass);
  GstDflashFilterClass *filter_class = GST_DFLASH_FILTER_CLASS (klass);

  gobject_class->set_property = gst_dflash_field_set_property;
  gobject_class->get_property = gst_dflash_field_get_property;
  /**
   * GstCtxSettle:queued-rounds
   *
   * Rounds whose rows were only queued, under a router that decides each
   * round first, for the block to settle if one is drafted.
   */
  gst_dflash_install_field_property (gobject_class, PROP_QUEUED_ROUNDS,
      g_param_spec_uint64 ("queued-rounds", "Queued rounds",
          "Rounds whose rows were queued for the block to settle, not settled here (under a "
          "router that decides each round first)", 0, G_MAXUINT64, 0,
          G_PARAM_READABLE | G_PARAM_STATIC_STRINGS),
      G_STRUCT_OFFSET (GstCtxSettle, queued));
  /**
   * GstCtxSettle:batch-limit
   *
   * With several sequences in flight: the most rounds of different
   * sequences whose rows settle in one pass (every sequence's rows through
   * the drafter's FC and each layer's keys and values together). At 1, the
   * default, each round settles in the streaming thread that brings it;
   * above, rounds are queued and a task on the src pad settles every round
   * waiting (up to batch-limit, never waiting for more) together, as
   * #GstDflashBlock:batch-limit drafts their blocks. The figures `batches`
   * and `max-batch` count the passes of several sequences and the most one
   * took.
   */
  gst_dflash_filter_class_install_batch_limit (filter_class, PROP_BATCH_LIMIT,
      "Most rounds of different sequences settled in one pass (1: each round in the streaming "
      "thread that brings it)", "settled the rows");
  gst_element_class_set_static_metadata (GST_ELEMENT_CLASS (klass), "DFlash context settle",
      "Filter/Tensor", "Turns the target's tapped rows into the drafter's keys and values",
      "gst-dflash developers");
  gst_dflash_filter_class_add_pads (filter_class,
      GST_DFLASH_TAPS_CAPS ", hidden = (int) [ 1, MAX ], tap-width = (int) [ 1, MAX ], vocab = (int) [ 1, MAX ]",
      GST_DFLASH_CONTEXT_CAPS ", hidden = (int) [ 1, MAX ], vocab = (int) [ 1, MAX ], block = (int) [ 2, MAX ]");
  filter_class->src_caps = gst_ctx_settle_src_caps;
  filter_class->process = gst_ctx_settle_process;
  filter_class->process_batch = gst_ctx_settle_process_batch;
  filter_class->reset = gst_ctx_settle_reset;
  /* under Vulkan the target stays on the CPU: its taps come in system memory */
  filter_class->vulkan_takes_system = TRUE;
}

static void
gst_ctx_settle_init (GstCtxSettle *self)
{
  self->decide_first = -1;
}
