/* gst-dflash — verifier
 * Copyright (C) 2026 gst-dflash developers
 *
 * This library is free software; you can redistribute it and/or modify it
 * under the terms of the GNU Library General Public License as published by
 * the Free Software Foundation; either version 2 of the License, or (at your
 * option) any later version.
 */
/**
 * SECTION:element-verifier
 * @title: verifier
 *
 * verifier runs the target over each round's anchor and proposed tokens,
 * accepts the longest prefix of drafts equal to the target's own choices,
 * adds the target's next token, and rewinds the target's cache to what was
 * accepted. The accepted tokens leave as text on the `src` pad
 * (`text/x-raw, format=utf8`, so stock sinks work; with several sequences in
 * flight the text comes out in prompt order) and as token ids on the
 * `tokens` pad. The round's verdict (sequence, accepted count, bonus token)
 * goes upstream as a custom event, where tapsource starts the next round.
 * The ids of a sequence's last tokens carry GST_BUFFER_FLAG_MARKER. The
 * requests of a serving tapsource (tapsource serve=true) are not ordered:
 * their text leaves as it is made, each buffer with the round meta naming
 * its sequence, the last one (empty where nothing was left) marked too.
 *
 * It takes proposals (`application/x-dflash-proposal`) or, for plain
 * decoding, tapsource's rounds directly (`application/x-dflash-taps`).
 *
 * The verification is the round's verify step (core/round.h), on the target
 * where tapsource ran the sequence. The sink pad queues the rounds; a task
 * on the src pad takes every round waiting whenever the target is free
 * (one a sequence) and verifies them in one target pass
 * (dfl_round_verify_batch), each sequence's verdict bitwise its own
 * pass's on the CPU. Every target engine (the CPU's, and the device
 * engine of CUDA and Vulkan) takes such a pass; should one refuse a batch,
 * the rounds are verified one by one from then on, and the log says so.
 * A round of the sequence the last one-round pass verified, arriving with
 * nothing queued and the target idle, is verified in the streaming thread
 * that brought it: one sequence decoding alone pays no hand-off to the
 * task, and a second sequence's round still goes to the task, where rounds
 * batch. The sequences a pass verified come back one by one, as tapsource
 * (and the drafter, where there is one) starts their next rounds; a pass
 * that would start with fewer of them queued waits for the rest up to
 * #GstVerifier:batch-wait of the last pass's time, so that the sequences
 * keep to one pass instead of splitting into two that read the target's
 * weights twice. The `batches` and `max-batch` properties count the
 * passes and their largest.
 *
 * Each round posts an element message `dflash-round` (sequence, round,
 * position, drafted, accepted, source, draft-time, verify-time — the
 * round's share of its pass — and batch, the rounds its pass verified);
 * EOS posts `dflash-summary`, the figures of
 * every round (gstdflashsummary.h: sequences, rounds, new-tokens, tau,
 * accept-rate per block position, decode tokens-per-second, draft-time,
 * verify-time, wall-time and the counts behind them).
 *
 * ## Example launch line
 * |[
 * gst-launch-1.0 -m tapsource ! ctxsettle ! dflashblock ! selector ! verifier ! fdsink
 * ]|
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstverifier.h"

#include <string.h>

#include "dfl-error.h"
#include "gstdflashcaps.h"
#include "gstdflashdevice.h"
#include "gstdflashdevicememory.h"
#include "gstdflashmeta.h"
#include "gstdflashmodel.h"
#include "gstdflashelement.h"
#include "gstdflashseq.h"
#include "gstdflashsummary.h"

GST_DEBUG_CATEGORY_STATIC (gst_verifier_debug);
#define GST_CAT_DEFAULT gst_verifier_debug

/* the share of the last pass's time a pass may wait for its sequences */
#define DEFAULT_BATCH_WAIT 0.25

/* Plain decoding takes tapsource's rounds directly, in the memory the
 * target ran in (their taps are not read): system memory, or CUDA memory
 * where this build has CUDA. */
#define VERIFIER_TAPS_BACKENDS (1u << GST_DFLASH_BACKEND_CPU | 1u << GST_DFLASH_BACKEND_CUDA)
static GstStaticPadTemplate src_template = GST_STATIC_PAD_TEMPLATE ("src",
    GST_PAD_SRC, GST_PAD_ALWAYS, GST_STATIC_CAPS ("text/x-raw, format = (string) utf8"));
static GstStaticPadTemplate tokens_template = GST_STATIC_PAD_TEMPLATE ("tokens",
    GST_PAD_SRC, GST_PAD_ALWAYS,
    GST_STATIC_CAPS (GST_DFLASH_TOKENS_CAPS ", vocab = (int) [ 1, MAX ]"));

enum {
  PROP_0,
  PROP_BACKEND,
  PROP_BUSY_TIME,
  PROP_BATCHES,
  PROP_MAX_BATCH,
  PROP_BATCH_WAIT,
};

struct _GstVerifier {
  GstElement parent;
  GstPad *sinkpad, *srcpad, *tokenspad;
  GstDflashBackend backend;   /* the property (object lock) */

  GstDflashModel *model;
  DflVerifier *verifier;
  int block;
  /* on CUDA: the taps of a verification, reused round after round */
  GstBufferPool *taps_pool;
  /* text in prompt order: the head sequence streams, others wait (a
   * serving tapsource's requests stream at once, unordered) */
  GHashTable *pending;        /* sequence → GString */
  GHashTable *finished;       /* sequences done, not yet flushed */
  guint head;
  /* Rounds (buffers) and serialized events from upstream, in order, for
   * the task on the src pad: each pass it takes every round queued and
   * verifies them in one target forward. Under `lock`; `cond` wakes the
   * task. */
  GMutex lock;
  GCond cond;
  GQueue queue;
  gboolean flushing;
  GstFlowReturn flow;         /* the last pass's flow, for the chain to return */
  /* A pass (or an event the task hands on) is under way, in the task or
   * in the chain: the other waits. */
  gboolean busy;
  /* The sequence of the last round taken alone (has_last), for the chain's
   * shortcut below. */
  guint last_seq;
  gboolean has_last;
  /* the target's engine refused batches: one sequence a forward from then on */
  gboolean one_by_one;
  /* the rounds of the last pass whose sequences go on, and its time: the
   * next pass waits up to batch_wait × that for them (under `lock`) */
  int expected;
  gint64 last_pass_us;
  double batch_wait;          /* the property (object lock) */
  /* figures */
  DflRoundStats stats;
  guint64 batches;            /* target passes (the batches property, object lock) */
  guint max_batch;            /* the most rounds one pass verified (object lock) */
  guint64 busy_ns;            /* the busy-time property (object lock) */
  gint64 first_us;
};

#define _do_init \
    GST_DEBUG_CATEGORY_INIT (gst_verifier_debug, "verifier", 0, "dflash verifier");
#define gst_verifier_parent_class parent_class
G_DEFINE_TYPE_WITH_CODE (GstVerifier, gst_verifier, GST_TYPE_ELEMENT, _do_init);
GST_ELEMENT_REGISTER_DEFINE (verifier, "verifier", GST_RANK_NONE, GST_TYPE_VERIFIER);

static void gst_verifier_finalize (GObject *object);
static void gst_verifier_set_context (GstElement *element, GstContext *context);
static GstStateChangeReturn gst_verifier_change_state (GstElement *element,
                                                       GstStateChange transition);
static GstFlowReturn gst_verifier_chain (GstPad *pad, GstObject *parent, GstBuffer *buf);
static gboolean gst_verifier_sink_event (GstPad *pad, GstObject *parent, GstEvent *event);
static gboolean gst_verifier_src_query (GstPad *pad, GstObject *parent, GstQuery *query);
static gboolean gst_verifier_src_activate_mode (GstPad *pad, GstObject *parent,
                                                GstPadMode mode, gboolean active);
static void gst_verifier_get_property (GObject *object, guint prop_id, GValue *value,
                                       GParamSpec *pspec);

static void
gst_verifier_class_init (GstVerifierClass *klass)
{
  GObjectClass *gobject_class = G_OBJECT_CLASS (klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS (klass);

  gobject_class->finalize = gst_verifier_finalize;
  gobject_class->set_property = gst_dflash_field_set_property;
  gobject_class->get_property = gst_verifier_get_property;

  /**
   * GstVerifier:backend
   *
   * The verifier verifies each sequence where tapsource ran its target (the
   * sequence says which): auto follows it; cpu or cuda insist, and a
   * sequence of the other is an error. tapsource puts no target on Vulkan.
   */
  gst_dflash_install_backend_property (gobject_class, PROP_BACKEND,
      "Where the target's verification runs (auto: where tapsource ran the sequence's target; "
      "cpu and cuda insist)",
      G_STRUCT_OFFSET (GstVerifier, backend));
  gst_dflash_install_busy_time_property (gobject_class, PROP_BUSY_TIME,
      "Nanoseconds spent verifying so far", G_STRUCT_OFFSET (GstVerifier, busy_ns));
  g_object_class_install_property (gobject_class, PROP_BATCHES,
      g_param_spec_uint64 ("batches", "Batches",
          "Target passes that verified rounds so far (each verifies every round that was ready)",
          0, G_MAXUINT64, 0, G_PARAM_READABLE | G_PARAM_STATIC_STRINGS));
  g_object_class_install_property (gobject_class, PROP_MAX_BATCH,
      g_param_spec_uint ("max-batch", "Largest batch",
          "The most rounds (of as many sequences) one target pass has verified so far",
          0, G_MAXUINT, 0, G_PARAM_READABLE | G_PARAM_STATIC_STRINGS));
  /**
   * GstVerifier:batch-wait
   *
   * With several sequences in flight, how long a pass may wait for the
   * rounds of the sequences the last pass verified, as a share of that
   * pass's time: it starts as soon as they are all queued, or when the
   * time is up, with what is there. 0: every pass takes what is queued
   * and never waits. A sequence decoding alone never waits.
   */
  gst_dflash_install_field_property (gobject_class, PROP_BATCH_WAIT,
      g_param_spec_double ("batch-wait", "Batch wait",
          "How long a pass may wait for the last pass's sequences to come back, as a share of "
          "that pass's time (0: never waits)", 0.0, 4.0, DEFAULT_BATCH_WAIT,
          G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_PLAYING),
      G_STRUCT_OFFSET (GstVerifier, batch_wait));

  gst_element_class_set_static_metadata (element_class, "DFlash verifier",
      "Filter/Tensor", "Verifies proposed tokens with the target and emits the accepted text",
      "gst-dflash developers");
  {
    GstCaps *caps = gst_caps_from_string (GST_DFLASH_PROPOSAL_CAPS);
    caps = gst_caps_merge (caps, gst_dflash_tensor_caps (GST_DFLASH_TAPS_CAPS,
                                                         VERIFIER_TAPS_BACKENDS));
    gst_element_class_add_pad_template (element_class,
        gst_pad_template_new ("sink", GST_PAD_SINK, GST_PAD_ALWAYS, caps));
    gst_caps_unref (caps);
  }
  gst_element_class_add_static_pad_template (element_class, &src_template);
  gst_element_class_add_static_pad_template (element_class, &tokens_template);
  element_class->set_context = GST_DEBUG_FUNCPTR (gst_verifier_set_context);
  element_class->change_state = GST_DEBUG_FUNCPTR (gst_verifier_change_state);
}

static void
string_free (gpointer s)
{
  g_string_free (s, TRUE);
}

static void
gst_verifier_init (GstVerifier *self)
{
  self->sinkpad = gst_pad_new_from_template (
      gst_element_class_get_pad_template (GST_ELEMENT_GET_CLASS (self), "sink"), "sink");
  gst_pad_set_chain_function (self->sinkpad, GST_DEBUG_FUNCPTR (gst_verifier_chain));
  gst_pad_set_event_function (self->sinkpad, GST_DEBUG_FUNCPTR (gst_verifier_sink_event));
  gst_element_add_pad (GST_ELEMENT (self), self->sinkpad);
  self->srcpad = gst_pad_new_from_static_template (&src_template, "src");
  gst_pad_set_query_function (self->srcpad, GST_DEBUG_FUNCPTR (gst_verifier_src_query));
  gst_pad_set_activatemode_function (self->srcpad,
      GST_DEBUG_FUNCPTR (gst_verifier_src_activate_mode));
  gst_pad_use_fixed_caps (self->srcpad);
  gst_element_add_pad (GST_ELEMENT (self), self->srcpad);
  self->tokenspad = gst_pad_new_from_static_template (&tokens_template, "tokens");
  gst_pad_set_query_function (self->tokenspad, GST_DEBUG_FUNCPTR (gst_verifier_src_query));
  gst_pad_use_fixed_caps (self->tokenspad);
  gst_element_add_pad (GST_ELEMENT (self), self->tokenspad);
  self->pending = g_hash_table_new_full (NULL, NULL, NULL, string_free);
  self->finished = g_hash_table_new (NULL, NULL);
  g_mutex_init (&self->lock);
  g_cond_init (&self->cond);
  g_queue_init (&self->queue);
  self->flushing = TRUE;
  self->batch_wait = DEFAULT_BATCH_WAIT;
}

static void
gst_verifier_get_property (GObject *object, guint prop_id, GValue *value, GParamSpec *pspec)
{
  GstVerifier *self = GST_VERIFIER (object);

  switch (prop_id) {
    case PROP_BATCHES:
      GST_OBJECT_LOCK (self);
      g_value_set_uint64 (value, self->batches);
      GST_OBJECT_UNLOCK (self);
      break;
    case PROP_MAX_BATCH:
      GST_OBJECT_LOCK (self);
      g_value_set_uint (value, self->max_batch);
      GST_OBJECT_UNLOCK (self);
      break;
    default:
      gst_dflash_field_get_property (object, prop_id, value, pspec);
      break;
  }
}

static void
reset (GstVerifier *self)
{
  g_hash_table_remove_all (self->pending);
  g_hash_table_remove_all (self->finished);
  self->head = 0;
  dfl_round_stats_reset (&self->stats);
  self->first_us = 0;
  GST_OBJECT_LOCK (self);
  self->batches = 0;
  self->max_batch = 0;
  GST_OBJECT_UNLOCK (self);
}

/* What the queue holds: buffers and events, each with its reference. */
static void
clear_queue (GstVerifier *self)
{
  GstMiniObject *o;

  while ((o = g_queue_pop_head (&self->queue)))
    gst_mini_object_unref (o);
}

static void
gst_verifier_finalize (GObject *object)
{
  GstVerifier *self = GST_VERIFIER (object);

  g_hash_table_unref (self->pending);
  g_hash_table_unref (self->finished);
  clear_queue (self);
  g_mutex_clear (&self->lock);
  g_cond_clear (&self->cond);
  g_clear_pointer (&self->verifier, dfl_verifier_free);
  if (self->taps_pool)
    gst_buffer_pool_set_active (self->taps_pool, FALSE);
  gst_clear_object (&self->taps_pool);
  g_clear_object (&self->model);
  dfl_round_stats_clear (&self->stats);
  G_OBJECT_CLASS (parent_class)->finalize (object);
}

/* The backend property, read under the object lock. */
static GstDflashBackend
backend_property (GstVerifier *self)
{
  GstDflashBackend b;

  GST_OBJECT_LOCK (self);
  b = self->backend;
  GST_OBJECT_UNLOCK (self);
  return b;
}

static void
gst_verifier_set_context (GstElement *element, GstContext *context)
{
  gst_dflash_model_handle_set_context (element, context, &GST_VERIFIER (element)->model);
  GST_ELEMENT_CLASS (parent_class)->set_context (element, context);
}

static GstStateChangeReturn
gst_verifier_change_state (GstElement *element, GstStateChange transition)
{
  GstVerifier *self = GST_VERIFIER (element);
  GstStateChangeReturn ret;

  if (transition == GST_STATE_CHANGE_NULL_TO_READY
      && !gst_dflash_element_check_target_backend (element, backend_property (self),
                                                   "under a Vulkan drafter it stays on the CPU"))
    return GST_STATE_CHANGE_FAILURE;
  ret = GST_ELEMENT_CLASS (parent_class)->change_state (element, transition);
  if (transition == GST_STATE_CHANGE_PAUSED_TO_READY)
    reset (self);
  return ret;
}

static gboolean
gst_verifier_src_query (GstPad *pad, GstObject *parent, GstQuery *query)
{
  GstVerifier *self = GST_VERIFIER (parent);

  if (GST_QUERY_TYPE (query) == GST_QUERY_CONTEXT
      && gst_dflash_model_handle_context_query (GST_ELEMENT (self), query, self->model))
    return TRUE;
  return gst_pad_query_default (pad, parent, query);
}

/* Text of `seq` for the text pad: the head sequence's goes out now. */
static GstFlowReturn
push_text (GstVerifier *self, guint seq, const char *text)
{
  GString *wait;
  GstBuffer *buf;

  if (seq != self->head) {
    if (!(wait = g_hash_table_lookup (self->pending, GUINT_TO_POINTER (seq)))) {
      wait = g_string_new (NULL);
      g_hash_table_insert (self->pending, GUINT_TO_POINTER (seq), wait);
    }
    g_string_append (wait, text);
    return GST_FLOW_OK;
  }
  if (!*text)
    return GST_FLOW_OK;
  buf = gst_buffer_new_memdup (text, strlen (text));
  {
    GstFlowReturn r = gst_pad_push (self->srcpad, buf);
    return r == GST_FLOW_NOT_LINKED ? GST_FLOW_OK : r;
  }
}

/* A sequence ended: if it was the head, the next ones' waiting text follows. */
static GstFlowReturn
sequence_done (GstVerifier *self, guint seq)
{
  GstFlowReturn ret = GST_FLOW_OK;

  g_hash_table_add (self->finished, GUINT_TO_POINTER (seq));
  while (g_hash_table_contains (self->finished, GUINT_TO_POINTER (self->head))) {
    GString *wait;
    g_hash_table_remove (self->finished, GUINT_TO_POINTER (self->head));
    self->head++;
    if ((wait = g_hash_table_lookup (self->pending, GUINT_TO_POINTER (self->head)))) {
      if (wait->len)
        ret = gst_pad_push (self->srcpad, gst_buffer_new_memdup (wait->str, wait->len));
      if (ret == GST_FLOW_NOT_LINKED)
        ret = GST_FLOW_OK;
      g_hash_table_remove (self->pending, GUINT_TO_POINTER (self->head));
      if (ret != GST_FLOW_OK)
        break;
    }
  }
  return ret;
}

/* Text of a serving tapsource's request: out at once, with the round
 * meta saying whose it is, the last piece marked (even empty, so the
 * application sees the end). */
static GstFlowReturn
push_request_text (GstVerifier *self, GstDflashSeq *s, const char *text, gboolean done)
{
  GstBuffer *buf;
  GstDflashRoundMeta *m;
  GstFlowReturn r;

  if (!*text && !done)
    return GST_FLOW_OK;
  /* an empty last piece (the EOS token's, say) is a buffer without memory:
   * GStreamer wraps no NULL data, and a zero-byte copy is NULL */
  buf = *text ? gst_buffer_new_memdup (text, strlen (text)) : gst_buffer_new ();
  m = gst_buffer_add_dflash_round_meta (buf);
  m->sequence = s->id;
  m->round = s->rounds;
  if (done)
    GST_BUFFER_FLAG_SET (buf, GST_BUFFER_FLAG_MARKER);
  r = gst_pad_push (self->srcpad, buf);
  return r == GST_FLOW_NOT_LINKED ? GST_FLOW_OK : r;
}

static gboolean
is_stop_id (GstDflashSeq *s, int id)
{
  for (guint i = 0; s->stop_ids && i < s->stop_ids->len; i++)
    if (g_array_index (s->stop_ids, int, i) == id)
      return TRUE;
  return FALSE;
}

/* Hand out the tokens a round committed: text, ids. TRUE once the sequence
 * is over (its max-new tokens, an EOS token or one of its stop ids); the
 * ids of its last tokens carry GST_BUFFER_FLAG_MARKER. */
static gboolean
emit_tokens (GstVerifier *self, GstDflashSeq *s, const int *tokens, int n, GstFlowReturn *ret)
{
  const DflTarget *t = gst_dflash_model_target (self->model);
  const DflTokenizer *tok = gst_dflash_model_tokenizer (self->model);
  g_autoptr (GString) text = g_string_new (NULL);
  int used = 0;
  gboolean done = FALSE;

  /* the detokenizer is the sequence's: concurrent requests never share one */
  if (tok && !s->detok)
    s->detok = dfl_detokenizer_new (tok, TRUE);
  while (used < n && !done) {
    int id = tokens[used++];
    s->emitted++;
    if (s->detok) {
      g_autofree char *piece = dfl_detokenizer_push (s->detok, id);
      g_string_append (text, piece);
    }
    done = s->emitted >= s->max_new || dfl_qwen3_config_is_eos (dfl_target_config (t), id)
        || is_stop_id (s, id);
  }
  if (done && s->detok) {
    g_autofree char *rest = dfl_detokenizer_finish (s->detok);
    g_string_append (text, rest);
  }
  self->stats.new_tokens += used;
  *ret = s->serving ? push_request_text (self, s, text->str, done)
      : push_text (self, s->id, text->str);
  if (*ret == GST_FLOW_OK && used) {
    GstBuffer *ids = gst_buffer_new_memdup (tokens, sizeof (int) * used);
    GstDflashRoundMeta *m = gst_buffer_add_dflash_round_meta (ids);
    GstFlowReturn r;
    m->sequence = s->id;
    m->round = s->rounds;
    if (done)
      GST_BUFFER_FLAG_SET (ids, GST_BUFFER_FLAG_MARKER);
    r = gst_pad_push (self->tokenspad, ids);
    /* the ids are for applications that want them; nobody listening is fine */
    if (r != GST_FLOW_NOT_LINKED)
      *ret = r;
  }
  return done;
}

static void
post_round (GstVerifier *self, const GstDflashRoundMeta *meta, int drafted, int accepted,
            double draft_s, double verify_s, int batch)
{
  static const char *sources[] = { "none", "block", "chain" };

  gst_element_post_message (GST_ELEMENT (self),
      gst_message_new_element (GST_OBJECT (self),
          gst_structure_new ("dflash-round",
              "sequence", G_TYPE_UINT, meta->sequence, "round", G_TYPE_UINT, meta->round,
              "position", G_TYPE_INT64, meta->anchor_pos, "drafted", G_TYPE_INT, drafted,
              "accepted", G_TYPE_INT, accepted, "source", G_TYPE_STRING, sources[meta->source],
              "draft-time", G_TYPE_DOUBLE, draft_s, "verify-time", G_TYPE_DOUBLE, verify_s,
              "batch", G_TYPE_INT, batch, NULL)));
}

static void
post_summary (GstVerifier *self)
{
  self->stats.wall_s = self->first_us ? (g_get_monotonic_time () - self->first_us) / 1e6 : 0;
  gst_element_post_message (GST_ELEMENT (self), gst_message_new_element (GST_OBJECT (self),
          gst_dflash_summary_new (&self->stats)));
}

static gboolean
ensure_model (GstVerifier *self, const GstCaps *caps)
{
  const DflDrafterGeometry *g;
  const GstStructure *st = gst_caps_get_structure (caps, 0);
  int vocab;

  if (!gst_dflash_model_find (GST_ELEMENT (self), self->sinkpad, &self->model))
    goto no_model;
  if (gst_structure_get_int (st, "vocab", &vocab)
      && vocab != dfl_target_config (gst_dflash_model_target (self->model))->vocab)
    goto wrong_vocab;
  g = gst_dflash_model_geometry (self->model);
  if (!gst_structure_get_int (st, "block", &self->block))
    self->block = g ? g->block : 16;
  if (!self->verifier) {
    self->verifier = dfl_verifier_new (gst_dflash_model_target (self->model), self->block - 1,
                                       g ? g->taps : NULL, g ? g->n_taps : 0);
    dfl_round_stats_clear (&self->stats);
    dfl_round_stats_init (&self->stats, self->block - 1);
  }
  return TRUE;

  /* ERRORS */
no_model:
  {
    gst_dflash_element_error_no_model (GST_ELEMENT (self));
    return FALSE;
  }
wrong_vocab:
  {
    GST_ELEMENT_ERROR (self, CORE, NEGOTIATION,
        ("upstream drafts over a vocabulary of %d, the target has %d", vocab,
         dfl_target_config (gst_dflash_model_target (self->model))->vocab),
        ("input caps %" GST_PTR_FORMAT, caps));
    return FALSE;
  }
}

/* Whether tapsource ran the sequence's target on a device. */
static gboolean
seq_on_device (GstDflashSeq *s)
{
  return s->kv && dfl_target_device (dfl_target_seq_target (s->kv)) != NULL;
}

/* A round taken from the queue, on its way through one pass. */
typedef struct {
  GstBuffer *buf;
  GstDflashRoundMeta *meta;
  GstDflashSeq *s;
  int *drafts;                /* room for block − 1 drafts and the bonus */
  int m;
  gboolean done, verified;
  /* on a device: the pooled buffer the pass writes the taps into */
  GstBuffer *taps;
  DflTensor taps_tensor;
  DflVerdict v;
} Round;

static void
round_clear (Round *r)
{
  gst_clear_buffer (&r->taps);
  g_clear_pointer (&r->drafts, g_free);
  gst_clear_buffer (&r->buf);
}

/* Where the pass puts a device sequence's taps: a pooled buffer on its
 * device whose first accepted + 1 rows tapsource's next round reads. */
static gboolean
prepare_taps (GstVerifier *self, Round *r, GError **error)
{
  int tw = gst_dflash_model_tap_width (self->model);
  GstDflashDevice *dev = r->s->device;
  gsize bytes = sizeof (float) * (gsize) self->block * tw;
  GstMemory *mem;

  if (!seq_on_device (r->s) || !tw)
    return TRUE;
  if (!dev) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID, "the sequence's cache is on a device that "
                 "its source did not name");
    return FALSE;
  }
  if (!self->taps_pool && !(self->taps_pool = gst_dflash_device_pool_new (dev, bytes, error)))
    return FALSE;
  if (!(r->taps = gst_dflash_device_pool_acquire (self->taps_pool, dev, error)))
    return FALSE;
  mem = gst_buffer_peek_memory (r->taps, 0);
  r->taps_tensor = dfl_tensor_2d (gst_dflash_device_dfl (dev),
                                  gst_dflash_device_memory_handle (mem), mem->offset,
                                  DFL_DTYPE_F32, self->block, tw);
  return TRUE;
}

/* What tapsource's next round needs kept in the sequence after its
 * verdict: the accepted rows' taps (host rows, or the pooled buffer on the
 * device) and the tip. */
static void
keep_verdict (GstVerifier *self, Round *r)
{
  GstDflashSeq *s = r->s;
  const DflVerdict *v = &r->v;
  int tw = gst_dflash_model_tap_width (self->model);

  if (r->taps) {
    gst_buffer_resize (r->taps, 0, sizeof (float) * (gsize) (v->accepted + 1) * tw);
    gst_buffer_replace (&s->taps_buf, r->taps);
    gst_clear_buffer (&r->taps);
  } else if (!seq_on_device (s)) {
    s->taps = g_renew (float, s->taps, (gsize) (v->accepted + 1) * MAX (tw, 1));
    if (v->taps)
      memcpy (s->taps, v->taps, sizeof (float) * (gsize) (v->accepted + 1) * tw);
  }
  s->taps_rows = v->accepted + 1;
  memcpy (s->tip, v->tip,
          sizeof (float) * dfl_target_config (gst_dflash_model_target (self->model))->hidden);
}

/* The round's verify step for `n` rounds of as many sequences of one
 * target: one pass for all, or, where the target's engine runs one
 * sequence a forward, a pass each. The verdicts go into the rounds. */
static gboolean
verify_rounds (GstVerifier *self, Round **rounds, int n, int *per_pass, GError **error)
{
  g_autofree DflRoundVerifyItem *items = g_new0 (DflRoundVerifyItem, n);
  int i;

  for (i = 0; i < n; i++) {
    Round *r = rounds[i];
    if (!prepare_taps (self, r, error))
      return FALSE;
    items[i] = (DflRoundVerifyItem) { .seq = r->s->kv, .sampler = &r->s->sampler,
                                      .a = r->meta->anchor_pos, .anchor = r->meta->anchor,
                                      .drafts = r->drafts, .m = r->m,
                                      .device_taps = r->taps ? &r->taps_tensor : NULL };
  }
  if (n > 1 && !self->one_by_one) {
    g_autoptr (GError) batch_error = NULL;
    *per_pass = n;
    if (dfl_round_verify_batch (self->verifier, items, n, &batch_error))
      goto verified;
    if (!g_error_matches (batch_error, DFL_ERROR, DFL_ERROR_UNSUPPORTED)) {
      g_propagate_error (error, g_steal_pointer (&batch_error));
      return FALSE;
    }
    GST_INFO_OBJECT (self, "the target verifies one sequence a forward (%s): the %d rounds ready, "
                     "and every batch from now on, go one by one", batch_error->message, n);
    self->one_by_one = TRUE;
  }
  if (n > 1)
    GST_DEBUG_OBJECT (self, "verifying %d rounds one sequence a forward", n);
  *per_pass = 1;
  for (i = 0; i < n; i++) {
    /* each verdict's rows are the verifier's until its next run: kept now */
    if (!dfl_round_verify_batch (self->verifier, &items[i], 1, error))
      return FALSE;
    rounds[i]->v = items[i].verdict;
    keep_verdict (self, rounds[i]);
  }
  return TRUE;

verified:
  for (i = 0; i < n; i++) {
    rounds[i]->v = items[i].verdict;
    keep_verdict (self, rounds[i]);
  }
  return TRUE;
}

/* Who proposed a round, as the round's figures count it. */
static DflRoundSource
round_source (GstDflashSource source)
{
  switch (source) {
    case GST_DFLASH_SOURCE_BLOCK:
      return DFL_ROUND_BLOCK;
    case GST_DFLASH_SOURCE_CHAIN:
      return DFL_ROUND_CHAIN;
    case GST_DFLASH_SOURCE_NONE:
    default:
      return DFL_ROUND_PLAIN;
  }
}

/* Where the sequence's target runs must be where the backend property
 * says, if it says. */
static gboolean
check_backend (GstVerifier *self, GstDflashSeq *s, GError **error)
{
  gboolean on_cuda = seq_on_device (s);
  GstDflashBackend backend = backend_property (self);

  if ((backend == GST_DFLASH_BACKEND_CPU && on_cuda)
      || (backend == GST_DFLASH_BACKEND_CUDA && !on_cuda)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_MISMATCH,
                 "backend=%s, but tapsource ran sequence %u's target on %s",
                 gst_dflash_backend_nick (backend), s->id, on_cuda ? "cuda" : "the cpu");
    return FALSE;
  }
  return TRUE;
}

/* The text and ids pads' caps, once upstream's came (in stream order:
 * the task sets them). */
static gboolean
set_src_caps (GstVerifier *self)
{
  GstCaps *text = gst_caps_new_simple ("text/x-raw", "format", G_TYPE_STRING, "utf8", NULL);
  GstCaps *ids = gst_caps_new_simple (GST_DFLASH_TOKENS_CAPS, "vocab", G_TYPE_INT,
      dfl_target_config (gst_dflash_model_target (self->model))->vocab, NULL);
  gboolean ok = gst_pad_set_caps (self->srcpad, text);

  gst_pad_set_caps (self->tokenspad, ids);
  gst_caps_unref (text);
  gst_caps_unref (ids);
  return ok;
}

/* A serialized event from upstream, in its place among the rounds. */
static void
handle_event (GstVerifier *self, GstEvent *event)
{
  switch (GST_EVENT_TYPE (event)) {
    case GST_EVENT_CAPS:
      gst_event_unref (event);
      if (!set_src_caps (self))
        GST_DEBUG_OBJECT (self, "downstream refused the text caps");
      return;
    case GST_EVENT_EOS:
      post_summary (self);
      break;
    default:
      break;
  }
  gst_pad_event_default (self->sinkpad, GST_OBJECT (self), event);
}

/* A round's drafts (none for plain decoding), read off its buffer, with
 * room for the bonus after them. */
static void
read_drafts (GstVerifier *self, Round *r)
{
  GstCaps *caps = gst_pad_get_current_caps (self->sinkpad);
  gboolean is_proposal = caps && gst_structure_has_name (gst_caps_get_structure (caps, 0),
                                                         GST_DFLASH_PROPOSAL_CAPS);
  GstMapInfo map;

  gst_clear_caps (&caps);
  r->drafts = g_new (int, self->block);
  r->m = 0;
  if (is_proposal && gst_buffer_map (r->buf, &map, GST_MAP_READ)) {
    r->m = MIN ((int) (map.size / sizeof (int)), self->block - 1);
    /* an empty proposal may map no memory at all */
    if (r->m > 0)
      memcpy (r->drafts, map.data, sizeof (int) * r->m);
    gst_buffer_unmap (r->buf, &map);
  }
}

/* Before the pass: the first token of a round 0 (tapsource's pass over
 * the prompt chose it), and the drafts' and the target's checks. FALSE on
 * an error (posted). */
static gboolean
before_pass (GstVerifier *self, Round *r, GstFlowReturn *ret)
{
  int vocab = dfl_target_config (gst_dflash_model_target (self->model))->vocab;
  g_autoptr (GError) error = NULL;
  int j;

  read_drafts (self, r);
  if (r->meta->round == 0) {
    /* the round's new tokens: the prompt and that token */
    dfl_round_stats_add_prefill (&self->stats, r->meta->new_tokens
                                 ? (int) (g_bytes_get_size (r->meta->new_tokens) / sizeof (int)) - 1
                                 : 0, 0.0);
    r->done = emit_tokens (self, r->s, &r->meta->anchor, 1, ret);
  }
  for (j = 0; j < r->m; j++)
    if (r->drafts[j] < 0 || r->drafts[j] >= vocab)
      goto bad_draft;
  if (!check_backend (self, r->s, &error))
    goto wrong_backend;
  return TRUE;

  /* ERRORS */
bad_draft:
  {
    GST_ELEMENT_ERROR (self, STREAM, DECODE,
        ("a draft is token %d, outside the vocabulary of %s (0 … %d): the drafter upstream sent "
         "it", r->drafts[j], dfl_target_dir (gst_dflash_model_target (self->model)), vocab - 1),
        ("draft %d of sequence %u round %u", j, r->s->id, r->meta->round));
    return FALSE;
  }
wrong_backend:
  {
    GST_ELEMENT_ERROR (self, STREAM, FAILED, ("could not verify a round: %s", error->message),
        ("sequence %u round %u", r->s->id, r->meta->round));
    return FALSE;
  }
}

/* After the pass: the round's tokens out, its figures, and the verdict
 * upstream, where tapsource starts the sequence's next round or ends it. */
static GstFlowReturn
after_pass (GstVerifier *self, Round *r, int batch, double verify_s, GstFlowReturn ret)
{
  GstDflashSeq *s = r->s;
  const GstDflashRoundMeta *meta = r->meta;

  if (r->verified) {
    r->drafts[r->v.accepted] = r->v.bonus;
    g_array_append_vals (s->tokens, r->drafts, r->v.accepted + 1);
    s->rounds++;
    dfl_round_stats_add_round (&self->stats, round_source (meta->source), &r->v,
                               meta->draft_ns / 1e9, verify_s);
    post_round (self, meta, r->m, r->v.accepted, meta->draft_ns / 1e9, verify_s, batch);
    if (ret == GST_FLOW_OK)
      r->done = emit_tokens (self, s, r->drafts, r->v.accepted + 1, &ret);
  }
  if (r->done) {
    s->done = TRUE;
    if (ret == GST_FLOW_OK && !s->serving)
      ret = sequence_done (self, s->id);
  }
  if (r->done || r->verified)
    gst_pad_push_event (self->sinkpad,
        gst_dflash_verdict_event_new (s->id, meta->round, meta->anchor_pos, r->v.accepted,
                                      r->v.bonus, r->done));
  return ret == GST_FLOW_NOT_LINKED ? GST_FLOW_OK : ret;
}

/* One pass over the rounds that were ready: those whose sequence is not
 * over yet verified together. */
static GstFlowReturn
run_pass (GstVerifier *self, Round *rounds, int n)
{
  g_autofree Round **verify = g_new (Round *, n);
  g_autoptr (GError) error = NULL;
  GstFlowReturn ret = GST_FLOW_OK;
  gint64 t0 = g_get_monotonic_time ();
  int i, n_verify = 0, per_pass = 0, expected = 0;
  double verify_s = 0.0;

  if (!self->first_us)
    self->first_us = t0;
  for (i = 0; i < n; i++) {
    if (!before_pass (self, &rounds[i], &ret))
      return GST_FLOW_ERROR;
    if (!rounds[i].done && ret == GST_FLOW_OK)
      verify[n_verify++] = &rounds[i];
  }
  if (n_verify) {
    if (!verify_rounds (self, verify, n_verify, &per_pass, &error))
      goto verify_failed;
    for (i = 0; i < n_verify; i++)
      verify[i]->verified = TRUE;
    /* each round's share of the pass, so the rounds' times sum to it */
    verify_s = (g_get_monotonic_time () - t0) / 1e6 / n_verify;
    GST_LOG_OBJECT (self, "verified %d rounds, %d a pass", n_verify, per_pass);
  }
  for (i = 0; i < n; i++) {
    GstFlowReturn r = after_pass (self, &rounds[i], per_pass, verify_s, ret);
    if (ret == GST_FLOW_OK)
      ret = r;
  }
  for (i = 0; i < n; i++)
    expected += rounds[i].verified && !rounds[i].done;
  g_mutex_lock (&self->lock);
  self->expected = expected;
  self->last_pass_us = g_get_monotonic_time () - t0;
  g_mutex_unlock (&self->lock);
  GST_OBJECT_LOCK (self);
  self->busy_ns += (g_get_monotonic_time () - t0) * 1000;
  if (n_verify) {
    self->batches += n_verify / per_pass;
    self->max_batch = MAX (self->max_batch, (guint) per_pass);
  }
  GST_OBJECT_UNLOCK (self);
  return ret;

  /* ERRORS */
verify_failed:
  {
    GST_ELEMENT_ERROR (self, STREAM, FAILED, ("could not verify a round: %s", error->message),
        ("%d rounds in one pass, the first sequence %u round %u", n_verify, verify[0]->s->id,
         verify[0]->meta->round));
    return GST_FLOW_ERROR;
  }
}

/* Whether a queued round can join the pass: a sequence once a pass, every
 * sequence of one target. */
static gboolean
joins_pass (Round *rounds, int n, GstDflashSeq *s)
{
  for (int i = 0; i < n; i++)
    if (rounds[i].s == s || dfl_target_seq_target (rounds[i].s->kv) != dfl_target_seq_target (s->kv))
      return FALSE;
  return TRUE;
}

/* A pass (or an event) is over: the other thread may go on; a flow
 * other than OK stays for the chain to return. */
static void
pass_done (GstVerifier *self, GstFlowReturn ret)
{
  g_mutex_lock (&self->lock);
  self->busy = FALSE;
  if (ret != GST_FLOW_OK)
    self->flow = ret;
  /* the task waits for a round or event while none is busy: wake it only
   * for one (waking it after every pass of a sequence decoding alone would
   * cost the hand-off the shortcut saves) */
  if (!g_queue_is_empty (&self->queue))
    g_cond_signal (&self->cond);
  g_mutex_unlock (&self->lock);
}

/* Rounds queued ahead of the first event (under `lock`). */
static int
rounds_queued (GstVerifier *self)
{
  int n = 0;

  for (GList *l = self->queue.head; l && GST_IS_BUFFER (l->data); l = l->next)
    n++;
  return n;
}

/* With rounds queued, the pass about to start waits (under `lock`) for the
 * rest of the last pass's sequences, up to `share` of that pass's time:
 * their next rounds come back one by one as tapsource and the drafter start
 * them, and a pass that took only the first would leave the others to a
 * second pass over the same weights. */
static void
gather_rounds (GstVerifier *self, double share)
{
  gint64 deadline;

  if (share <= 0.0 || self->expected < 2 || rounds_queued (self) == 0)
    return;
  deadline = g_get_monotonic_time () + (gint64) (share * self->last_pass_us);
  while (!self->flushing && rounds_queued (self) < self->expected
         && g_queue_get_length (&self->queue) == (guint) rounds_queued (self)
         && g_cond_wait_until (&self->cond, &self->lock, deadline))
    ;
}

/* The task on the src pad: waits for what upstream queued; an event goes
 * on in its place; the rounds queued before it (with the wait of
 * gather_rounds) are verified in one pass. */
static void
gst_verifier_loop (GstVerifier *self)
{
  g_autofree Round *rounds = NULL;
  GstMiniObject *head;
  GstFlowReturn ret;
  double share;
  int n = 0;

  GST_OBJECT_LOCK (self);
  share = self->batch_wait;
  GST_OBJECT_UNLOCK (self);
  g_mutex_lock (&self->lock);
  while (!self->flushing && (self->busy || g_queue_is_empty (&self->queue)))
    g_cond_wait (&self->cond, &self->lock);
  gather_rounds (self, share);
  if (self->flushing)
    goto flushing;
  self->busy = TRUE;
  head = g_queue_peek_head (&self->queue);
  if (GST_IS_EVENT (head)) {
    g_queue_pop_head (&self->queue);
    g_mutex_unlock (&self->lock);
    handle_event (self, GST_EVENT (head));
    pass_done (self, GST_FLOW_OK);
    return;
  }
  rounds = g_new0 (Round, g_queue_get_length (&self->queue));
  for (GList *l = self->queue.head, *next; l && GST_IS_BUFFER (l->data); l = next) {
    GstBuffer *buf = l->data;
    GstDflashRoundMeta *meta = gst_buffer_get_dflash_round_meta (buf);
    next = l->next;
    if (!joins_pass (rounds, n, meta->seq))
      continue;
    g_queue_delete_link (&self->queue, l);
    rounds[n++] = (Round) { .buf = buf, .meta = meta, .s = meta->seq };
  }
  self->has_last = n == 1;
  self->last_seq = rounds[0].s->id;
  g_mutex_unlock (&self->lock);

  ret = run_pass (self, rounds, n);
  for (int i = 0; i < n; i++)
    round_clear (&rounds[i]);
  pass_done (self, GST_FLOW_OK);
  if (ret != GST_FLOW_OK)
    goto paused;
  return;

flushing:
  {
    g_mutex_unlock (&self->lock);
    GST_DEBUG_OBJECT (self, "flushing: the task pauses");
    gst_pad_pause_task (self->srcpad);
    return;
  }
paused:
  {
    GST_DEBUG_OBJECT (self, "the task pauses: %s", gst_flow_get_name (ret));
    g_mutex_lock (&self->lock);
    self->flow = ret;
    g_mutex_unlock (&self->lock);
    if (ret == GST_FLOW_EOS || ret < GST_FLOW_EOS) {
      /* downstream ended, or the stream failed (an error of ours or
       * downstream's is posted where it happened; a refused format is
       * nobody's but ours to post) */
      if (ret == GST_FLOW_NOT_NEGOTIATED)
        GST_ELEMENT_FLOW_ERROR (self, ret);
      gst_pad_push_event (self->srcpad, gst_event_new_eos ());
      gst_pad_push_event (self->tokenspad, gst_event_new_eos ());
    }
    gst_pad_pause_task (self->srcpad);
  }
}

/* The task runs while the src pad is active: started with it, stopped
 * (woken first) before it goes. */
static gboolean
gst_verifier_src_activate_mode (GstPad *pad, GstObject *parent, GstPadMode mode, gboolean active)
{
  GstVerifier *self = GST_VERIFIER (parent);

  if (mode != GST_PAD_MODE_PUSH)
    return FALSE;
  g_mutex_lock (&self->lock);
  self->flushing = !active;
  self->flow = GST_FLOW_OK;
  self->has_last = FALSE;
  self->expected = 0;
  if (!active) {
    clear_queue (self);
    g_cond_signal (&self->cond);
  }
  g_mutex_unlock (&self->lock);
  if (active)
    return gst_pad_start_task (pad, (GstTaskFunction) gst_verifier_loop, self, NULL);
  return gst_pad_stop_task (pad);
}

static gboolean
gst_verifier_sink_event (GstPad *pad, GstObject *parent, GstEvent *event)
{
  GstVerifier *self = GST_VERIFIER (parent);
  gboolean ret;

  switch (GST_EVENT_TYPE (event)) {
    case GST_EVENT_CAPS: {
      GstCaps *caps;
      gst_event_parse_caps (event, &caps);
      if (!ensure_model (self, caps)) {
        gst_event_unref (event);
        return FALSE;
      }
      break;
    }
    case GST_EVENT_FLUSH_START:
      /* downstream first, so a push the task waits in returns */
      ret = gst_pad_event_default (pad, parent, event);
      g_mutex_lock (&self->lock);
      self->flushing = TRUE;
      g_cond_signal (&self->cond);
      g_mutex_unlock (&self->lock);
      gst_pad_pause_task (self->srcpad);
      return ret;
    case GST_EVENT_FLUSH_STOP:
      g_mutex_lock (&self->lock);
      clear_queue (self);
      self->flushing = FALSE;
      self->flow = GST_FLOW_OK;
      self->has_last = FALSE;
      self->expected = 0;
      g_mutex_unlock (&self->lock);
      reset (self);
      ret = gst_pad_event_default (pad, parent, event);
      gst_pad_start_task (self->srcpad, (GstTaskFunction) gst_verifier_loop, self, NULL);
      return ret;
    default:
      break;
  }
  if (!GST_EVENT_IS_SERIALIZED (event))
    return gst_pad_event_default (pad, parent, event);
  /* in order with the rounds: the task hands it on */
  g_mutex_lock (&self->lock);
  if (self->flushing) {
    g_mutex_unlock (&self->lock);
    gst_event_unref (event);
    return FALSE;
  }
  g_queue_push_tail (&self->queue, event);
  g_cond_signal (&self->cond);
  g_mutex_unlock (&self->lock);
  return TRUE;
}

/* Verify the round here where the sequence decodes alone, else queue it
 * for the task; the last pass's flow comes back. */
static GstFlowReturn
gst_verifier_chain (GstPad *pad, GstObject *parent, GstBuffer *buf)
{
  GstVerifier *self = GST_VERIFIER (parent);
  GstDflashRoundMeta *meta = gst_buffer_get_dflash_round_meta (buf);
  GstFlowReturn ret;
  gboolean inline_pass;

  if (!meta || !self->model || !meta->seq || !meta->seq->kv)
    goto no_round;
  g_mutex_lock (&self->lock);
  ret = self->flushing ? GST_FLOW_FLUSHING : self->flow;
  inline_pass = ret == GST_FLOW_OK && !self->busy && g_queue_is_empty (&self->queue)
      && self->has_last && self->last_seq == meta->seq->id;
  if (inline_pass) {
    self->busy = TRUE;
  } else if (ret == GST_FLOW_OK) {
    g_queue_push_tail (&self->queue, buf);
    buf = NULL;
    g_cond_signal (&self->cond);
  }
  g_mutex_unlock (&self->lock);
  if (inline_pass) {
    /* the sequence decodes alone: verify here, without the hand-off */
    Round round = { .buf = buf, .meta = meta, .s = meta->seq };

    ret = run_pass (self, &round, 1);
    round_clear (&round);
    pass_done (self, ret);
    return ret;
  }
  gst_clear_buffer (&buf);
  return ret;

  /* ERRORS */
no_round:
  {
    GST_ELEMENT_ERROR (self, STREAM, FORMAT, ("a buffer without a round of a running sequence"),
        ("%s", !meta ? "the buffer carries no GstDflashRoundMeta"
         : !self->model ? "no dflash model: no caps came before the buffer"
         : !meta->seq ? "the round has no sequence" : "the round's sequence has no target cache"));
    gst_buffer_unref (buf);
    return GST_FLOW_ERROR;
  }
}
