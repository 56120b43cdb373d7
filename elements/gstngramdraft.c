/* gst-dflash — ngramdraft
 * Copyright (C) 2026 gst-dflash developers
 *
 * This library is free software; you can redistribute it and/or modify it
 * under the terms of the GNU Library General Public License as published by
 * the Free Software Foundation; either version 2 of the License, or (at your
 * option) any later version.
 */
/**
 * SECTION:element-ngramdraft
 * @title: ngramdraft
 *
 * ngramdraft is the chain drafter: prompt lookup. It keeps each sequence's
 * text (in the sequence) from the tokens every round request carries, finds an earlier
 * occurrence of the text's last n tokens (n from max-n down to min-n) and
 * proposes what followed it: the round's propose-chain step (core/round.h).
 * It needs no weights, so it runs on any target,
 * alone or beside the DFlash block under a router.
 *
 * How far to trust a match is #GstNgramDraft:draft-per-match: a suffix of
 * n tokens proposes at most n × draft-per-match tokens. A one-token match
 * is often a coincidence and a four-token one rarely is (on the default
 * pair's held-out prompts a proposal after a match of 1 kept 4.1 tokens on
 * average, after a match of 4 13.6), while verifying a drafted row costs
 * the target about a third of a decoding step on two cores whether it is
 * kept or not: short proposals where the match is short.
 *
 * ## Example launch line
 * |[
 * gst-launch-1.0 tapsource no-drafter=true ! ngramdraft ! verifier ! fdsink
 * ]|
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstngramdraft.h"

#include "gstdflashelement.h"
#include "gstdflashseq.h"
#include "ngram.h"
#include "round.h"

GST_DEBUG_CATEGORY_STATIC (gst_ngram_draft_debug);
#define GST_CAT_DEFAULT gst_ngram_draft_debug

enum {
  PROP_0,
  PROP_MIN_N,
  PROP_MAX_N,
  PROP_MAX_DRAFT,
  PROP_DRAFT_PER_MATCH,
};

struct _GstNgramDraft {
  GstDflashFilter parent;
  /* properties (object lock) */
  DflNgram ngram;
  int max_draft;           /* 0 for block − 1 */
  double draft_per_match;  /* 0 for no bound by the match */
  int block;
};

#define _do_init \
    GST_DEBUG_CATEGORY_INIT (gst_ngram_draft_debug, "ngramdraft", 0, "dflash ngramdraft");
#define gst_ngram_draft_parent_class parent_class
G_DEFINE_TYPE_WITH_CODE (GstNgramDraft, gst_ngram_draft, GST_TYPE_DFLASH_FILTER, _do_init);
GST_ELEMENT_REGISTER_DEFINE (ngramdraft, "ngramdraft", GST_RANK_NONE, GST_TYPE_NGRAM_DRAFT);

static GstCaps *
gst_ngram_draft_src_caps (GstDflashFilter *filter, GstCaps *sink_caps, GString *why)
{
  GstNgramDraft *self = GST_NGRAM_DRAFT (filter);
  GstDflashModel *m = gst_dflash_filter_model (filter);
  const DflQwen3Config *c = dfl_target_config (gst_dflash_model_target (m));
  g_autoptr (GstCaps) want = gst_caps_new_simple (GST_DFLASH_TAPS_CAPS, "vocab", G_TYPE_INT, c->vocab, NULL);
  DflNgram ngram;

  if (!gst_dflash_caps_agree (sink_caps, want, why))
    return NULL;
  if (!gst_structure_get_int (gst_caps_get_structure (sink_caps, 0), "block", &self->block))
    self->block = 16;
  GST_OBJECT_LOCK (self);
  ngram = self->ngram;
  GST_OBJECT_UNLOCK (self);
  if (ngram.min_n > ngram.max_n) {
    g_string_append_printf (why, "min-n %d is above max-n %d", ngram.min_n, ngram.max_n);
    return NULL;
  }
  return gst_caps_new_simple (GST_DFLASH_PROPOSAL_CAPS, "vocab", G_TYPE_INT, c->vocab,
      "block", G_TYPE_INT, self->block, NULL);
}

static GstFlowReturn
gst_ngram_draft_process (GstDflashFilter *filter, GstBuffer *in, GstDflashRoundMeta *meta,
                         GstBuffer **out)
{
  GstNgramDraft *self = GST_NGRAM_DRAFT (filter);
  GstDflashSeq *s = meta->seq;
  DflNgram ngram;
  int max_draft, most, *draft, n, match;
  double draft_per_match;
  GstDflashRoundMeta *om;

  GST_OBJECT_LOCK (self);
  ngram = self->ngram;
  max_draft = self->max_draft;
  draft_per_match = self->draft_per_match;
  GST_OBJECT_UNLOCK (self);
  if (!s)
    goto no_sequence;
  most = max_draft > 0 ? MIN (max_draft, self->block - 1) : self->block - 1;
  draft = g_new (int, MAX (most, 1));

  /* the text searched is the sequence's own, so sequences of concurrent
   * requests never mix and it goes with the sequence */
  if (meta->round == 0 || !s->chain_text) {
    if (s->chain_text)
      g_array_unref (s->chain_text);
    s->chain_text = g_array_new (FALSE, FALSE, sizeof (int));
  }
  if (meta->new_tokens)
    g_array_append_vals (s->chain_text, g_bytes_get_data (meta->new_tokens, NULL),
                         g_bytes_get_size (meta->new_tokens) / sizeof (int));
  n = dfl_round_propose_chain (&ngram, (const int *) s->chain_text->data, s->chain_text->len, most,
                               draft_per_match, draft, &match);
  GST_LOG_OBJECT (self, "sequence %u round %u: match %d, %d proposed", meta->sequence, meta->round,
                  match, n);
  *out = gst_dflash_round_buffer_new (meta, g_bytes_new_take (draft, sizeof (int) * n), &om);
  om->source = GST_DFLASH_SOURCE_CHAIN;
  om->match = match;
  return GST_FLOW_OK;

  /* ERRORS */
no_sequence:
  {
    GST_ELEMENT_ERROR (self, STREAM, FORMAT, ("a round without its sequence"),
        ("sequence %u round %u: the round meta carries no sequence", meta->sequence, meta->round));
    return GST_FLOW_ERROR;
  }
}

static void
gst_ngram_draft_class_init (GstNgramDraftClass *klass)
{
  GObjectClass *gobject_class = G_OBJECT_CLASS (klass);
  GstDflashFilterClass *filter_class = GST_DFLASH_FILTER_CLASS (klass);
  DflNgram defaults = DFL_NGRAM_DEFAULT;

  gobject_class->set_property = gst_dflash_field_set_property;
  gobject_class->get_property = gst_dflash_field_get_property;
  gst_dflash_install_field_property (gobject_class, PROP_MIN_N,
      g_param_spec_int ("min-n", "Min n", "Shortest suffix that counts as a match",
          1, 64, defaults.min_n, G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY),
      G_STRUCT_OFFSET (GstNgramDraft, ngram.min_n));
  gst_dflash_install_field_property (gobject_class, PROP_MAX_N,
      g_param_spec_int ("max-n", "Max n", "Longest suffix, tried first", 1, 64, defaults.max_n,
          G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY),
      G_STRUCT_OFFSET (GstNgramDraft, ngram.max_n));
  gst_dflash_install_field_property (gobject_class, PROP_MAX_DRAFT,
      g_param_spec_int ("max-draft", "Max draft",
          "Tokens a proposal holds at most (0: the block size − 1)", 0, 1024, 0,
          G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY),
      G_STRUCT_OFFSET (GstNgramDraft, max_draft));
  /**
   * GstNgramDraft:draft-per-match
   *
   * Tokens proposed per token of the matched suffix: a match of n tokens
   * proposes at most n × this many, rounded down (and never more than
   * max-draft). 0 bounds a proposal by max-draft only.
   */
  gst_dflash_install_field_property (gobject_class, PROP_DRAFT_PER_MATCH,
      g_param_spec_double ("draft-per-match", "Draft per match",
          "Tokens a proposal may hold per token of the suffix it matched, rounded down (0: no "
          "bound but max-draft)", 0.0, 1024.0, 0.0,
          G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_PLAYING),
      G_STRUCT_OFFSET (GstNgramDraft, draft_per_match));
  gst_element_class_set_static_metadata (GST_ELEMENT_CLASS (klass), "DFlash n-gram drafter",
      "Filter/Tensor", "Proposes tokens by prompt lookup (the chain drafter)",
      "gst-dflash developers");
  gst_dflash_filter_class_add_pads (filter_class,
      GST_DFLASH_TAPS_CAPS ", vocab = (int) [ 1, MAX ]",
      GST_DFLASH_PROPOSAL_CAPS ", vocab = (int) [ 1, MAX ], block = (int) [ 2, MAX ]");
  filter_class->src_caps = gst_ngram_draft_src_caps;
  filter_class->process = gst_ngram_draft_process;
  /* it reads the tokens the round carries, never the taps: any memory */
  filter_class->sink_any_memory = TRUE;
}

static void
gst_ngram_draft_init (GstNgramDraft *self)
{
  DflNgram defaults = DFL_NGRAM_DEFAULT;

  self->ngram = defaults;
}
