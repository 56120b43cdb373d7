/* gst-dflash — selector
 * Copyright (C) 2026 gst-dflash developers
 *
 * This library is free software; you can redistribute it and/or modify it
 * under the terms of the GNU Library General Public License as published by
 * the Free Software Foundation; either version 2 of the License, or (at your
 * option) any later version.
 */
/**
 * SECTION:element-selector
 * @title: selector
 *
 * selector turns a block's rows and logits into draft tokens. With
 * `mode=rescore` (the default) it walks the rows in order and re-scores each
 * row's top candidates against the token chosen before it with the
 * sidecar's selector (hidden projection and two codebooks); with
 * `mode=plain` it takes each row's argmax. The two modes side by side are
 * the A/B the product exists for.
 *
 * #GstDflashSelector:min-confidence shortens the draft where the drafter is
 * unsure: it ends before the first row at which the product of the chosen
 * tokens' probabilities (each row's softmax over its logits) falls below
 * the threshold. Verifying a row costs the target about a third of a
 * decoding step on two cores whether it is kept or not, and the rows after
 * an unsure one are rarely kept. Lossless like any draft: the verifier
 * keeps only what the target itself would have chosen.
 *
 * A block in CUDA or Vulkan memory is read on its device: the selection
 * runs there and only the token ids come back (the proposal is always
 * system memory).
 *
 * ## Example launch line
 * |[
 * gst-launch-1.0 tapsource ! ctxsettle ! dflashblock ! selector mode=plain ! verifier ! fdsink
 * ]|
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstdflashselector.h"

#include "dfl-error.h"
#include "drafter.h"
#include "gstdflashdevicememory.h"
#include "gstdflashelement.h"

GST_DEBUG_CATEGORY_STATIC (gst_dflash_selector_debug);
#define GST_CAT_DEFAULT gst_dflash_selector_debug

typedef enum {
  GST_DFLASH_SELECT_RESCORE,
  GST_DFLASH_SELECT_PLAIN,
} GstDflashSelectMode;

#define GST_TYPE_DFLASH_SELECT_MODE (gst_dflash_select_mode_get_type ())
static GType
gst_dflash_select_mode_get_type (void)
{
  static GType type = 0;
  static const GEnumValue values[] = {
    { GST_DFLASH_SELECT_RESCORE, "Re-score the top candidates with the selector", "rescore" },
    { GST_DFLASH_SELECT_PLAIN, "Each row's argmax", "plain" },
    { 0, NULL, NULL },
  };

  return gst_dflash_register_enum (&type, "GstDflashSelectMode", values);
}

enum {
  PROP_0,
  PROP_MODE,
  PROP_MIN_CONFIDENCE,
  /* batch-limit and its figures batches and max-batch, in this order
   * (gst_dflash_filter_class_install_batch_limit) */
  PROP_BATCH_LIMIT,
  PROP_BATCHES,
  PROP_MAX_BATCH,
};

struct _GstDflashSelector {
  GstDflashFilter parent;
  /* properties (object lock) */
  GstDflashSelectMode mode;
  double min_confidence;
  int width;
  gboolean warned;
};

#define _do_init \
    GST_DEBUG_CATEGORY_INIT (gst_dflash_selector_debug, "selector", 0, "dflash selector");
#define gst_dflash_selector_parent_class parent_class
G_DEFINE_TYPE_WITH_CODE (GstDflashSelector, gst_dflash_selector, GST_TYPE_DFLASH_FILTER, _do_init);
GST_ELEMENT_REGISTER_DEFINE (selector, "selector", GST_RANK_NONE, GST_TYPE_DFLASH_SELECTOR);

static GstCaps *
gst_dflash_selector_src_caps (GstDflashFilter *filter, GstCaps *sink_caps, GString *why)
{
  GstDflashSelector *self = GST_DFLASH_SELECTOR (filter);
  GstDflashModel *m = gst_dflash_filter_model (filter);
  const DflQwen3Config *c = dfl_target_config (gst_dflash_model_target (m));
  const DflDrafterGeometry *g;
  gboolean rescore;

  if (!(g = gst_dflash_filter_drafter_input (filter, sink_caps, GST_DFLASH_BLOCK_CAPS, why)))
    return NULL;
  gst_structure_get_int (gst_caps_get_structure (sink_caps, 0), "width", &self->width);
  if (self->width < MAX (g->selector_top, 1) || self->width > c->vocab) {
    g_string_append_printf (why, "width %d is outside %d … %d (the selector's candidates … the vocabulary)",
                            self->width, g->selector_top, c->vocab);
    return NULL;
  }
  GST_OBJECT_LOCK (self);
  rescore = self->mode == GST_DFLASH_SELECT_RESCORE;
  GST_OBJECT_UNLOCK (self);
  if (rescore && !dfl_drafter_weights_has_selector (gst_dflash_model_drafter (m)))
    GST_WARNING_OBJECT (self, "%s has no selector: mode=rescore takes each row's argmax",
                        gst_dflash_model_drafter_path (m));
  return gst_caps_new_simple (GST_DFLASH_PROPOSAL_CAPS, "vocab", G_TYPE_INT, c->vocab,
      "block", G_TYPE_INT, g->block, NULL);
}

/* The round's block as a tensor where its context lives, mapped (`map`
 * unmapped by block_release); `*ctx` the sequence's context. */
static gboolean
block_tensor (GstDflashSelector *self, GstDflashSeq *s, GstBuffer *in, int rows,
              DflDraftCtx **ctx, GstMapInfo *map, DflTensor *block, GError **error)
{
  GstDflashFilter *filter = GST_DFLASH_FILTER (self);
  GstDflashModel *m = gst_dflash_filter_model (filter);
  int hs = gst_dflash_model_geometry (m)->hidden;

  map->memory = NULL;
  *ctx = gst_dflash_model_seq_draft (m, s, gst_dflash_filter_backend (filter),
                                     gst_dflash_filter_device (filter), error);
  return *ctx && gst_dflash_buffer_tensor (in, dfl_draft_ctx_device (*ctx), GST_MAP_READ, map,
                                           DFL_DTYPE_F32, rows, hs + self->width, block, error);
}

/* `*rows` shortened where min-confidence says so (a block in system
 * memory: on a GPU the logits stay there), then the block unmapped. */
static void
block_release (GstDflashSelector *self, GstBuffer *in, GstMapInfo *map,
               GstDflashRoundMeta *meta, double min_confidence, const guint32 *chosen,
               int *rows)
{
  int hs = gst_dflash_model_geometry (gst_dflash_filter_model (GST_DFLASH_FILTER (self)))->hidden;

  if (min_confidence > 0 && chosen) {
    if (map->memory) {
      int keep = dfl_draft_confident_rows ((const float *) map->data + (gsize) *rows * hs,
                                           *rows, self->width, chosen, min_confidence);
      GST_LOG_OBJECT (self, "sequence %u round %u: %d of %d rows confident enough",
                      meta->sequence, meta->round, keep, *rows);
      *rows = keep;
    } else if (!self->warned) {
      /* the logits stay on the device: nothing to weigh the rows by */
      self->warned = TRUE;
      GST_INFO_OBJECT (self, "min-confidence applies to blocks in system memory only: a block "
                       "on %s is proposed whole", gst_dflash_backend_nick (
                           gst_dflash_filter_backend (GST_DFLASH_FILTER (self))));
    }
  }
  if (map->memory)
    gst_buffer_unmap (in, map);
}

/* The drafts of the round's block, chosen where the block is (on a GPU
 * only the ids come back); `*rows` shortened where min-confidence says so. */
static gboolean
select_block (GstDflashSelector *self, GstDflashSeq *s, GstBuffer *in, GstDflashRoundMeta *meta,
              gboolean rescore, double min_confidence, guint32 *chosen, int *rows, GError **error)
{
  DflDraftCtx *ctx;
  DflTensor block;
  GstMapInfo map;
  gboolean ok;

  if (!block_tensor (self, s, in, *rows, &ctx, &map, &block, error))
    return FALSE;
  ok = dfl_draft_ctx_select (ctx, &block, self->width, (guint32) meta->anchor,
                             rescore ? chosen : NULL, rescore ? NULL : chosen, error);
  block_release (self, in, &map, meta, min_confidence, ok ? chosen : NULL, rows);
  return ok;
}

/* The round without a block (dflashblock skipped it: the router decided
 * for the chain), or NULL. */
static GstBuffer *
skipped_round (GstBuffer *in, GstDflashRoundMeta *meta)
{
  if (meta->source == GST_DFLASH_SOURCE_CHAIN && gst_buffer_get_size (in) == 0)
    return gst_dflash_round_buffer_new (meta, NULL, NULL);
  return NULL;
}

/* Whether the block is the size the caps say; else an error. */
static gboolean
check_size (GstDflashSelector *self, GstBuffer *in)
{
  const DflDrafterGeometry *g = gst_dflash_model_geometry (
      gst_dflash_filter_model (GST_DFLASH_FILTER (self)));
  int hs = g->hidden, rows = g->block - 1;

  if (gst_buffer_get_size (in) == sizeof (float) * (gsize) rows * (hs + self->width))
    return TRUE;
  GST_ELEMENT_ERROR (self, STREAM, FORMAT, ("a block is not the size its caps say"),
      ("a block of %" G_GSIZE_FORMAT " bytes, not %d rows of %d hidden and %d logits",
       gst_buffer_get_size (in), rows, hs, self->width));
  return FALSE;
}

/* The proposal of `rows` drafts (none where min-confidence cut them all). */
static GstBuffer *
proposal (GstDflashRoundMeta *meta, guint32 *chosen, int rows)
{
  GstDflashRoundMeta *om;
  GstBuffer *out = gst_dflash_round_buffer_new (meta, rows > 0
      ? g_bytes_new (chosen, sizeof (guint32) * rows) : NULL, &om);

  om->source = GST_DFLASH_SOURCE_BLOCK;
  return out;
}

static GstFlowReturn
gst_dflash_selector_process (GstDflashFilter *filter, GstBuffer *in, GstDflashRoundMeta *meta,
                             GstBuffer **out)
{
  GstDflashSelector *self = GST_DFLASH_SELECTOR (filter);
  GstDflashModel *m = gst_dflash_filter_model (filter);
  int rows = gst_dflash_model_geometry (m)->block - 1;
  g_autoptr (GError) error = NULL;
  g_autofree guint32 *chosen = NULL;
  gboolean rescore;
  double min_confidence;

  if ((*out = skipped_round (in, meta)))
    return GST_FLOW_OK;
  if (!check_size (self, in))
    return GST_FLOW_ERROR;
  GST_OBJECT_LOCK (self);
  rescore = self->mode == GST_DFLASH_SELECT_RESCORE;
  min_confidence = self->min_confidence;
  GST_OBJECT_UNLOCK (self);
  chosen = g_new (guint32, rows);
  if (!meta->seq || !select_block (self, meta->seq, in, meta, rescore, min_confidence, chosen,
                                   &rows, &error))
    return gst_dflash_filter_round_failed (filter, "could not choose the drafts of a block",
                                           meta, error);
  *out = proposal (meta, chosen, rows);
  return GST_FLOW_OK;
}

/* Rounds of several sequences: the skipped ones pass on, the blocks of the
 * rest are all chosen before their ids come back (a GPU waits once). */
static GstFlowReturn
gst_dflash_selector_process_batch (GstDflashFilter *filter, GstBuffer **in,
                                   GstDflashRoundMeta **meta, guint n, GstBuffer **out)
{
  GstDflashSelector *self = GST_DFLASH_SELECTOR (filter);
  int block_rows = gst_dflash_model_geometry (gst_dflash_filter_model (filter))->block - 1;
  DflDraftCtx *ctx[GST_DFLASH_FILTER_MAX_BATCH];
  DflTensor blocks[GST_DFLASH_FILTER_MAX_BATCH];
  GstMapInfo map[GST_DFLASH_FILTER_MAX_BATCH];
  guint32 anchor[GST_DFLASH_FILTER_MAX_BATCH];
  guint idx[GST_DFLASH_FILTER_MAX_BATCH], k = 0, mapped = 0;
  g_autofree guint32 *chosen = g_new (guint32, (gsize) n * block_rows);
  g_autoptr (GError) error = NULL;
  DflDraftBatch *batch;
  gboolean rescore, ok = TRUE;
  double min_confidence;

  g_assert (n <= GST_DFLASH_FILTER_MAX_BATCH);
  GST_OBJECT_LOCK (self);
  rescore = self->mode == GST_DFLASH_SELECT_RESCORE;
  min_confidence = self->min_confidence;
  GST_OBJECT_UNLOCK (self);
  for (guint i = 0; i < n; i++) {
    if ((out[i] = skipped_round (in[i], meta[i])))
      continue;
    if (!check_size (self, in[i]))
      return GST_FLOW_ERROR;
    idx[k++] = i;
  }
  for (; ok && mapped < k; mapped++) {
    guint i = idx[mapped];
    anchor[mapped] = (guint32) meta[i]->anchor;
    map[mapped].memory = NULL;
    ok = meta[i]->seq && block_tensor (self, meta[i]->seq, in[i], block_rows, &ctx[mapped],
                                       &map[mapped], &blocks[mapped], &error);
  }
  if (ok && k > 0) {
    batch = k > 1 ? gst_dflash_filter_draft_batch (filter, ctx[0], (int) k) : NULL;
    if (batch)
      ok = dfl_draft_ctx_select_batch (batch, ctx, (int) k, blocks, self->width, anchor,
                                       rescore ? chosen : NULL, rescore ? NULL : chosen, &error);
    for (guint j = 0; !batch && ok && j < k; j++)
      ok = dfl_draft_ctx_select (ctx[j], &blocks[j], self->width, anchor[j],
                                 rescore ? chosen + (gsize) j * block_rows : NULL,
                                 rescore ? NULL : chosen + (gsize) j * block_rows, &error);
    if (ok && batch)
      gst_dflash_filter_count_batch (filter, k);
  }
  for (guint j = 0; j < mapped; j++) {
    int rows = block_rows;
    guint32 *c = chosen + (gsize) j * block_rows;
    block_release (self, in[idx[j]], &map[j], meta[idx[j]], min_confidence, ok ? c : NULL,
                   &rows);
    if (ok)
      out[idx[j]] = proposal (meta[idx[j]], c, rows);
  }
  if (!ok)
    return gst_dflash_filter_round_failed (filter, "could not choose the drafts of a batch",
                                           meta[k ? idx[0] : 0], error);
  return GST_FLOW_OK;
}

static void
gst_dflash_selector_class_init (GstDflashSelectorClass *klass)
{
  GObjectClass *gobject_class = G_OBJECT_CLASS (klass);
  GstDflashFilterClass *filter_class = GST_DFLASH_FILTER_CLASS (klass);

  gobject_class->set_property = gst_dflash_field_set_property;
  gobject_class->get_property = gst_dflash_field_get_property;
  /**
   * GstDflashSelector:mode
   *
   * rescore: the selector's re-scoring of each row's top candidates; plain:
   * each row's argmax.
   */
  gst_dflash_install_field_property (gobject_class, PROP_MODE,
      g_param_spec_enum ("mode", "Mode", "How drafts are chosen from the block's logits",
          GST_TYPE_DFLASH_SELECT_MODE, GST_DFLASH_SELECT_RESCORE,
          G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_PLAYING),
      G_STRUCT_OFFSET (GstDflashSelector, mode));
  /**
   * GstDflashSelector:min-confidence
   *
   * End the draft before the first row at which the product of the chosen
   * tokens' probabilities falls below this; 0 proposes every row. Blocks in
   * system memory only (on a GPU the logits stay there).
   */
  gst_dflash_install_field_property (gobject_class, PROP_MIN_CONFIDENCE,
      g_param_spec_double ("min-confidence", "Min confidence",
          "End the draft before the first row where the product of the chosen tokens' "
          "probabilities falls below this (0: propose every row)", 0.0, 1.0, 0.0,
          G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_PLAYING),
      G_STRUCT_OFFSET (GstDflashSelector, min_confidence));
  /**
   * GstDflashSelector:batch-limit
   *
   * With several sequences in flight: the most rounds of different
   * sequences whose drafts are chosen together. At 1, the default, each
   * round in the streaming thread that brings it; above, a task on the src
   * pad takes every round waiting (up to batch-limit) and queues all their
   * selections before the ids come back, so a GPU waits once for them (as
   * #GstDflashBlock:batch-limit drafts their blocks in one pass). The
   * figures `batches` and `max-batch` count the passes of several blocks
   * and the most one took.
   */
  gst_dflash_filter_class_install_batch_limit (filter_class, PROP_BATCH_LIMIT,
      "Most rounds of different sequences whose drafts are chosen together (1: each round in "
      "the streaming thread that brings it)", "chose the drafts");
  gst_element_class_set_static_metadata (GST_ELEMENT_CLASS (klass), "DFlash selector",
      "Filter/Tensor", "Chooses draft tokens from a block's logits (re-scored or argmax)",
      "gst-dflash developers");
  gst_dflash_filter_class_add_pads (filter_class,
      GST_DFLASH_BLOCK_CAPS ", hidden = (int) [ 1, MAX ], vocab = (int) [ 1, MAX ], block = (int) [ 2, MAX ], width = (int) [ 1, MAX ]",
      GST_DFLASH_PROPOSAL_CAPS ", vocab = (int) [ 1, MAX ], block = (int) [ 2, MAX ]");
  filter_class->src_caps = gst_dflash_selector_src_caps;
  filter_class->process = gst_dflash_selector_process;
  filter_class->process_batch = gst_dflash_selector_process_batch;
  gst_type_mark_as_plugin_api (GST_TYPE_DFLASH_SELECT_MODE, 0);
}

static void
gst_dflash_selector_init (GstDflashSelector *self)
{
}
