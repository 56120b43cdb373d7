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
 *
 * It takes proposals (`application/x-dflash-proposal`) or, for plain
 * decoding, tapsource's rounds directly (`application/x-dflash-taps`).
 *
 * Each round posts an element message `dflash-round` (sequence, round,
 * position, drafted, accepted, source, draft-time, verify-time); EOS posts
 * `dflash-summary` (sequences, rounds, new-tokens, tau, accept-rate per
 * block position, tokens-per-second, draft-time, verify-time, wall-time).
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
#include "gstdflashseq.h"

GST_DEBUG_CATEGORY_STATIC (gst_verifier_debug);
#define GST_CAT_DEFAULT gst_verifier_debug

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
};

struct _GstVerifier {
  GstElement parent;
  GstPad *sinkpad, *srcpad, *tokenspad;
  GstDflashBackend backend;

  GstDflashModel *model;
  DflVerifier *verifier;
  int block;
  /* on CUDA: the taps of a verification, reused round after round */
  GstBufferPool *taps_pool;
  /* text in prompt order: the head sequence streams, others wait */
  GHashTable *detok;          /* sequence → DflDetokenizer */
  GHashTable *pending;        /* sequence → GString */
  GHashTable *finished;       /* sequences done, not yet flushed */
  guint head;
  /* figures */
  guint sequences;
  gint64 rounds, round_tokens, new_tokens;
  gint64 *proposed_at, *accepted_at;
  guint64 draft_ns, verify_ns, busy_ns;
  gint64 first_us;
};

#define _do_init \
    GST_DEBUG_CATEGORY_INIT (gst_verifier_debug, "verifier", 0, "dflash verifier");
#define gst_verifier_parent_class parent_class
G_DEFINE_TYPE_WITH_CODE (GstVerifier, gst_verifier, GST_TYPE_ELEMENT, _do_init);
GST_ELEMENT_REGISTER_DEFINE (verifier, "verifier", GST_RANK_NONE, GST_TYPE_VERIFIER);

static void gst_verifier_finalize (GObject *object);
static void gst_verifier_set_property (GObject *object, guint prop_id, const GValue *value,
                                       GParamSpec *pspec);
static void gst_verifier_get_property (GObject *object, guint prop_id, GValue *value,
                                       GParamSpec *pspec);
static void gst_verifier_set_context (GstElement *element, GstContext *context);
static GstStateChangeReturn gst_verifier_change_state (GstElement *element,
                                                       GstStateChange transition);
static GstFlowReturn gst_verifier_chain (GstPad *pad, GstObject *parent, GstBuffer *buf);
static gboolean gst_verifier_sink_event (GstPad *pad, GstObject *parent, GstEvent *event);
static gboolean gst_verifier_src_query (GstPad *pad, GstObject *parent, GstQuery *query);

static void
gst_verifier_class_init (GstVerifierClass *klass)
{
  GObjectClass *gobject_class = G_OBJECT_CLASS (klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS (klass);

  gobject_class->finalize = gst_verifier_finalize;
  gobject_class->set_property = gst_verifier_set_property;
  gobject_class->get_property = gst_verifier_get_property;

  /**
   * GstVerifier:backend
   *
   * The verifier verifies each sequence where tapsource ran its target (the
   * sequence says which): auto follows it; cpu or cuda insist, and a
   * sequence of the other is an error. The target has no Vulkan path.
   */
  g_object_class_install_property (gobject_class, PROP_BACKEND,
      g_param_spec_enum ("backend", "Backend",
          "Where the target's verification runs (auto: where tapsource ran the sequence's target; "
          "cpu and cuda insist)",
          GST_TYPE_DFLASH_BACKEND, GST_DFLASH_BACKEND_AUTO,
          G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY));
  g_object_class_install_property (gobject_class, PROP_BUSY_TIME,
      g_param_spec_uint64 ("busy-time", "Busy time",
          "Nanoseconds spent verifying so far", 0, G_MAXUINT64, 0,
          G_PARAM_READABLE | G_PARAM_STATIC_STRINGS));

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
  gst_pad_use_fixed_caps (self->srcpad);
  gst_element_add_pad (GST_ELEMENT (self), self->srcpad);
  self->tokenspad = gst_pad_new_from_static_template (&tokens_template, "tokens");
  gst_pad_set_query_function (self->tokenspad, GST_DEBUG_FUNCPTR (gst_verifier_src_query));
  gst_pad_use_fixed_caps (self->tokenspad);
  gst_element_add_pad (GST_ELEMENT (self), self->tokenspad);
  self->detok = g_hash_table_new_full (NULL, NULL, NULL, (GDestroyNotify) dfl_detokenizer_free);
  self->pending = g_hash_table_new_full (NULL, NULL, NULL, string_free);
  self->finished = g_hash_table_new (NULL, NULL);
}

static void
reset (GstVerifier *self)
{
  g_hash_table_remove_all (self->detok);
  g_hash_table_remove_all (self->pending);
  g_hash_table_remove_all (self->finished);
  self->head = 0;
  self->sequences = 0;
  self->rounds = self->round_tokens = self->new_tokens = 0;
  self->draft_ns = self->verify_ns = 0;
  self->first_us = 0;
  if (self->proposed_at)
    memset (self->proposed_at, 0, sizeof (gint64) * MAX (self->block - 1, 1));
  if (self->accepted_at)
    memset (self->accepted_at, 0, sizeof (gint64) * MAX (self->block - 1, 1));
}

static void
gst_verifier_finalize (GObject *object)
{
  GstVerifier *self = GST_VERIFIER (object);

  g_hash_table_unref (self->detok);
  g_hash_table_unref (self->pending);
  g_hash_table_unref (self->finished);
  g_clear_pointer (&self->verifier, dfl_verifier_free);
  if (self->taps_pool)
    gst_buffer_pool_set_active (self->taps_pool, FALSE);
  gst_clear_object (&self->taps_pool);
  g_clear_object (&self->model);
  g_free (self->proposed_at);
  g_free (self->accepted_at);
  G_OBJECT_CLASS (parent_class)->finalize (object);
}

static void
gst_verifier_set_property (GObject *object, guint prop_id, const GValue *value, GParamSpec *pspec)
{
  GstVerifier *self = GST_VERIFIER (object);

  switch (prop_id) {
    case PROP_BACKEND:
      self->backend = g_value_get_enum (value);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
      break;
  }
}

static void
gst_verifier_get_property (GObject *object, guint prop_id, GValue *value, GParamSpec *pspec)
{
  GstVerifier *self = GST_VERIFIER (object);

  switch (prop_id) {
    case PROP_BACKEND:
      g_value_set_enum (value, self->backend);
      break;
    case PROP_BUSY_TIME:
      GST_OBJECT_LOCK (self);
      g_value_set_uint64 (value, self->busy_ns);
      GST_OBJECT_UNLOCK (self);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
      break;
  }
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
  g_autoptr (GError) error = NULL;
  GstStateChangeReturn ret;

  if (transition == GST_STATE_CHANGE_NULL_TO_READY
      && !gst_dflash_backend_check (element, self->backend, &error)) {
    GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS, ("%s", error->message), (NULL));
    return GST_STATE_CHANGE_FAILURE;
  }
  if (transition == GST_STATE_CHANGE_NULL_TO_READY && self->backend == GST_DFLASH_BACKEND_VULKAN) {
    GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS,
        ("%s: backend=vulkan: the target runs on cpu or cuda (under a Vulkan drafter it stays on "
         "the CPU)", GST_ELEMENT_NAME (self)), (NULL));
    return GST_STATE_CHANGE_FAILURE;
  }
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

/* Hand out the tokens a round committed: text, ids. TRUE once the sequence
 * is over (max-new-tokens or an EOS token). */
static gboolean
emit_tokens (GstVerifier *self, GstDflashSeq *s, const int *tokens, int n, GstFlowReturn *ret)
{
  const DflTarget *t = gst_dflash_model_target (self->model);
  const DflTokenizer *tok = gst_dflash_model_tokenizer (self->model);
  DflDetokenizer *d = g_hash_table_lookup (self->detok, GUINT_TO_POINTER (s->id));
  g_autoptr (GString) text = g_string_new (NULL);
  int used = 0;
  gboolean done = FALSE;

  if (tok && !d) {
    d = dfl_detokenizer_new (tok, TRUE);
    g_hash_table_insert (self->detok, GUINT_TO_POINTER (s->id), d);
  }
  while (used < n && !done) {
    int id = tokens[used++];
    s->emitted++;
    if (d) {
      g_autofree char *piece = dfl_detokenizer_push (d, id);
      g_string_append (text, piece);
    }
    done = s->emitted >= s->max_new || dfl_qwen3_config_is_eos (dfl_target_config (t), id);
  }
  if (done && d) {
    g_autofree char *rest = dfl_detokenizer_finish (d);
    g_string_append (text, rest);
  }
  self->new_tokens += used;
  *ret = push_text (self, s->id, text->str);
  if (*ret == GST_FLOW_OK && used) {
    GstBuffer *ids = gst_buffer_new_memdup (tokens, sizeof (int) * used);
    GstDflashRoundMeta *m = gst_buffer_add_dflash_round_meta (ids);
    GstFlowReturn r;
    m->sequence = s->id;
    m->round = s->rounds;
    r = gst_pad_push (self->tokenspad, ids);
    /* the ids are for applications that want them; nobody listening is fine */
    if (r != GST_FLOW_NOT_LINKED)
      *ret = r;
  }
  return done;
}

static void
post_round (GstVerifier *self, const GstDflashRoundMeta *meta, int drafted, int accepted,
            double draft_s, double verify_s)
{
  static const char *sources[] = { "none", "block", "chain" };

  gst_element_post_message (GST_ELEMENT (self),
      gst_message_new_element (GST_OBJECT (self),
          gst_structure_new ("dflash-round",
              "sequence", G_TYPE_UINT, meta->sequence, "round", G_TYPE_UINT, meta->round,
              "position", G_TYPE_INT64, meta->anchor_pos, "drafted", G_TYPE_INT, drafted,
              "accepted", G_TYPE_INT, accepted, "source", G_TYPE_STRING, sources[meta->source],
              "draft-time", G_TYPE_DOUBLE, draft_s, "verify-time", G_TYPE_DOUBLE, verify_s, NULL)));
}

static void
post_summary (GstVerifier *self)
{
  GValue rates = G_VALUE_INIT, v = G_VALUE_INIT;
  double wall = self->first_us ? (g_get_monotonic_time () - self->first_us) / 1e6 : 0;

  g_value_init (&rates, GST_TYPE_ARRAY);
  g_value_init (&v, G_TYPE_DOUBLE);
  for (int j = 0; j < self->block - 1; j++) {
    g_value_set_double (&v, self->proposed_at[j] ? (double) self->accepted_at[j] / self->proposed_at[j] : 0.0);
    gst_value_array_append_value (&rates, &v);
  }
  {
    GstStructure *s = gst_structure_new ("dflash-summary",
        "sequences", G_TYPE_UINT, self->sequences, "rounds", G_TYPE_INT64, self->rounds,
        "new-tokens", G_TYPE_INT64, self->new_tokens,
        "tau", G_TYPE_DOUBLE, self->rounds ? (double) self->round_tokens / self->rounds : 0.0,
        "tokens-per-second", G_TYPE_DOUBLE, wall > 0 ? self->new_tokens / wall : 0.0,
        "draft-time", G_TYPE_DOUBLE, self->draft_ns / 1e9,
        "verify-time", G_TYPE_DOUBLE, self->verify_ns / 1e9,
        "wall-time", G_TYPE_DOUBLE, wall, NULL);
    gst_structure_take_value (s, "accept-rate", &rates);
    gst_element_post_message (GST_ELEMENT (self), gst_message_new_element (GST_OBJECT (self), s));
  }
  g_value_unset (&v);
}

static gboolean
ensure_model (GstVerifier *self, const GstCaps *caps)
{
  const DflDrafterGeometry *g;
  const GstStructure *st = gst_caps_get_structure (caps, 0);
  int vocab;

  if (!gst_dflash_model_find (GST_ELEMENT (self), self->sinkpad, &self->model)) {
    GST_ELEMENT_ERROR (self, CORE, MISSING_PLUGIN,
        ("verifier: no dflash model found: it needs a tapsource upstream (or a dflash.model context)"),
        (NULL));
    return FALSE;
  }
  if (gst_structure_get_int (st, "vocab", &vocab)
      && vocab != dfl_target_config (gst_dflash_model_target (self->model))->vocab) {
    GST_ELEMENT_ERROR (self, CORE, NEGOTIATION,
        ("verifier: upstream drafts over a vocabulary of %d, the target has %d", vocab,
         dfl_target_config (gst_dflash_model_target (self->model))->vocab), (NULL));
    return FALSE;
  }
  g = gst_dflash_model_geometry (self->model);
  if (!gst_structure_get_int (st, "block", &self->block))
    self->block = g ? g->block : 16;
  if (!self->verifier) {
    self->verifier = dfl_verifier_new (gst_dflash_model_target (self->model), self->block - 1,
                                       g ? g->taps : NULL, g ? g->n_taps : 0);
    self->proposed_at = g_new0 (gint64, MAX (self->block - 1, 1));
    self->accepted_at = g_new0 (gint64, MAX (self->block - 1, 1));
  }
  return TRUE;
}

/* Whether tapsource ran the sequence's target on a device. */
static gboolean
seq_on_device (GstDflashSeq *s)
{
  return s->kv && dfl_target_device (dfl_target_seq_target (s->kv)) != NULL;
}

/* The verification on the target's device (tapsource ran the sequence
 * there): as dfl_verifier_run, the ids up and, for greedy decoding, each
 * row's argmax back; the taps of the rows stay on the device in a pooled
 * buffer whose first accepted + 1 rows are the next round's context. With
 * sampling the logits come back for the sampler. The final-normed rows come
 * back for the tip (the router reads it). */
static gboolean
verify_on_device (GstVerifier *self, GstDflashSeq *s, const GstDflashRoundMeta *meta,
                  const int *drafts, int m, int *accepted, int *bonus, GError **error)
{
  const DflDrafterGeometry *g = gst_dflash_model_geometry (self->model);
  const DflTarget *t = dfl_target_seq_target (s->kv);
  const DflQwen3Config *c = dfl_target_config (t);
  GstDflashDevice *dev = gst_dflash_model_target_device (self->model);
  int tw = gst_dflash_model_tap_width (self->model), n = m + 1, k;
  g_autofree int *ids = g_new (int, n);
  g_autofree int32_t *argmax = g_new (int32_t, n);
  g_autofree float *hidden = g_new (float, (gsize) n * c->hidden), *logits = NULL;
  DflForwardOut out = { .logits_from = 0, .argmax = argmax, .hidden = hidden };
  gint64 a = meta->anchor_pos;
  GstBuffer *taps = NULL;
  DflTensor taps_tensor;

  if (!dev) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID, "the sequence runs on a device but the "
                 "model has no target on one");
    return FALSE;
  }
  if (dfl_target_seq_length (s->kv) != a) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_MISMATCH, "round %u anchors at %" G_GINT64_FORMAT
                 " but the target's cache holds %d positions", meta->round, a,
                 dfl_target_seq_length (s->kv));
    return FALSE;
  }
  if (g && tw) {
    gsize bytes = sizeof (float) * (gsize) self->block * tw;
    GstMemory *mem;
    if (!self->taps_pool && !(self->taps_pool = gst_dflash_device_pool_new (dev, bytes, error)))
      return FALSE;
    if (!(taps = gst_dflash_device_pool_acquire (self->taps_pool, dev, error)))
      return FALSE;
    mem = gst_buffer_peek_memory (taps, 0);
    taps_tensor = dfl_tensor_2d (gst_dflash_device_dfl (dev),
                                 gst_dflash_device_memory_handle (mem), mem->offset,
                                 DFL_DTYPE_F32, self->block, tw);
    out.tap_layers = g->taps;
    out.n_tap_layers = g->n_taps;
    out.device_taps = &taps_tensor;
  }
  if (s->sampler.temperature > 0.0f)
    out.logits = logits = g_new (float, (gsize) n * c->vocab);
  ids[0] = meta->anchor;
  if (m > 0)
    memcpy (ids + 1, drafts, sizeof (int) * m);
  if (!dfl_target_forward (t, s->kv, ids, n, &out, error)) {
    gst_clear_buffer (&taps);
    return FALSE;
  }
  /* accept while the draft is what the target itself picks there */
  for (k = 0; k <= m; k++) {
    int pick = logits ? dfl_sampler_pick (&s->sampler, logits + (gsize) k * c->vocab, c->vocab,
                                          a + k + 1)
                      : argmax[k];
    if (k == m || drafts[k] != pick) {
      *bonus = pick;
      break;
    }
  }
  *accepted = k;
  dfl_target_seq_truncate (s->kv, a + k + 1);
  if (taps) {
    gst_buffer_resize (taps, 0, sizeof (float) * (gsize) (k + 1) * tw);
    gst_buffer_replace (&s->taps_buf, taps);
    gst_buffer_unref (taps);
  }
  s->taps_rows = k + 1;
  memcpy (s->tip, hidden + (gsize) k * c->hidden, sizeof (float) * c->hidden);
  return TRUE;
}

/* Where the sequence's target runs must be where the backend property
 * says, if it says. */
static gboolean
check_backend (GstVerifier *self, GstDflashSeq *s, GError **error)
{
  gboolean on_cuda = seq_on_device (s);

  if ((self->backend == GST_DFLASH_BACKEND_CPU && on_cuda)
      || (self->backend == GST_DFLASH_BACKEND_CUDA && !on_cuda)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_MISMATCH,
                 "backend=%s, but tapsource ran sequence %u's target on %s",
                 gst_dflash_backend_nick (self->backend), s->id, on_cuda ? "cuda" : "the cpu");
    return FALSE;
  }
  return TRUE;
}

static gboolean
gst_verifier_sink_event (GstPad *pad, GstObject *parent, GstEvent *event)
{
  GstVerifier *self = GST_VERIFIER (parent);

  switch (GST_EVENT_TYPE (event)) {
    case GST_EVENT_CAPS: {
      GstCaps *caps;
      gst_event_parse_caps (event, &caps);
      if (!ensure_model (self, caps)) {
        gst_event_unref (event);
        return FALSE;
      }
      gst_event_unref (event);
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
    }
    case GST_EVENT_EOS:
      post_summary (self);
      break;
    case GST_EVENT_FLUSH_STOP:
      reset (self);
      break;
    default:
      break;
  }
  return gst_pad_event_default (pad, parent, event);
}

static GstFlowReturn
gst_verifier_chain (GstPad *pad, GstObject *parent, GstBuffer *buf)
{
  GstVerifier *self = GST_VERIFIER (parent);
  GstDflashRoundMeta *meta = gst_buffer_get_dflash_round_meta (buf);
  g_autoptr (GError) error = NULL;
  GstDflashSeq *s;
  GstFlowReturn ret = GST_FLOW_OK;
  gboolean done = FALSE, is_proposal, verified = FALSE;
  int m = 0, k = 0, bonus = 0;
  g_autofree int *drafts = NULL;
  gint64 t0 = g_get_monotonic_time (), t1;
  GstMapInfo map;

  if (!meta || !self->model || !(s = meta->seq)) {
    GST_ELEMENT_ERROR (self, STREAM, FORMAT,
        ("verifier: a buffer without a round of a running sequence"), (NULL));
    gst_buffer_unref (buf);
    return GST_FLOW_ERROR;
  }
  if (!self->first_us)
    self->first_us = t0;
  {
    GstCaps *caps = gst_pad_get_current_caps (pad);
    is_proposal = caps && gst_structure_has_name (gst_caps_get_structure (caps, 0), GST_DFLASH_PROPOSAL_CAPS);
    gst_clear_caps (&caps);
  }
  if (is_proposal && gst_buffer_map (buf, &map, GST_MAP_READ)) {
    m = MIN ((int) (map.size / sizeof (int)), self->block - 1);
    drafts = g_memdup2 (map.data, sizeof (int) * MAX (m, 1));
    gst_buffer_unmap (buf, &map);
  }

  if (meta->round == 0) {
    /* the first token came from tapsource's pass over the prompt */
    self->sequences++;
    done = emit_tokens (self, s, &meta->anchor, 1, &ret);
  }
  if (!done && ret == GST_FLOW_OK) {
    for (int j = 0; j < m; j++)
      if (drafts[j] < 0 || drafts[j] >= dfl_target_config (gst_dflash_model_target (self->model))->vocab) {
        GST_ELEMENT_ERROR (self, STREAM, DECODE,
            ("%s: draft %d of sequence %u round %u is token %d, outside the vocabulary of %s "
             "(0 … %d): the drafter upstream sent it", GST_ELEMENT_NAME (self), j, s->id,
             meta->round, drafts[j], dfl_target_dir (gst_dflash_model_target (self->model)),
             dfl_target_config (gst_dflash_model_target (self->model))->vocab - 1), (NULL));
        gst_buffer_unref (buf);
        return GST_FLOW_ERROR;
      }
    if (!check_backend (self, s, &error)
        || (seq_on_device (s)
            ? !verify_on_device (self, s, meta, drafts, m, &k, &bonus, &error)
            : !dfl_verifier_run (self->verifier, s->kv, &s->sampler, meta->anchor_pos,
                                 meta->anchor, drafts, m, &k, &bonus, &error))) {
      GST_ELEMENT_ERROR (self, STREAM, FAILED, ("%s: sequence %u: %s", GST_ELEMENT_NAME (self),
              s->id, error->message), (NULL));
      gst_buffer_unref (buf);
      return GST_FLOW_ERROR;
    }
    verified = TRUE;
    t1 = g_get_monotonic_time ();
    /* what tapsource's next round needs: the accepted rows' taps, the tip
     * (on a device the verification left them in the sequence) */
    if (!seq_on_device (s)) {
      int tw = gst_dflash_model_tap_width (self->model);
      s->taps = g_renew (float, s->taps, (gsize) (k + 1) * MAX (tw, 1));
      if (tw)
        memcpy (s->taps, dfl_verifier_taps (self->verifier), sizeof (float) * (gsize) (k + 1) * tw);
      s->taps_rows = k + 1;
      memcpy (s->tip, dfl_verifier_tip (self->verifier),
              sizeof (float) * dfl_target_config (gst_dflash_model_target (self->model))->hidden);
    }
    drafts = g_renew (int, drafts, k + 1);
    drafts[k] = bonus;
    g_array_append_vals (s->tokens, drafts, k + 1);
    s->rounds++;
    self->rounds++;
    self->round_tokens += k + 1;
    for (int j = 0; j < m; j++) {
      self->proposed_at[j]++;
      if (j < k)
        self->accepted_at[j]++;
    }
    self->draft_ns += meta->draft_ns;
    self->verify_ns += (t1 - t0) * 1000;
    post_round (self, meta, m, k, meta->draft_ns / 1e9, (t1 - t0) / 1e6);
    done = emit_tokens (self, s, drafts, k + 1, &ret);
  }
  if (done) {
    s->done = TRUE;
    if (ret == GST_FLOW_OK)
      ret = sequence_done (self, s->id);
  }
  GST_OBJECT_LOCK (self);
  self->busy_ns += (g_get_monotonic_time () - t0) * 1000;
  GST_OBJECT_UNLOCK (self);
  /* tapsource starts the sequence's next round, or ends it */
  if (!done && !verified) {
    gst_buffer_unref (buf);
    return ret;
  }
  gst_pad_push_event (self->sinkpad,
      gst_dflash_verdict_event_new (s->id, meta->round, meta->anchor_pos, k, bonus, done));
  gst_buffer_unref (buf);
  if (ret == GST_FLOW_NOT_LINKED)
    ret = GST_FLOW_OK;
  return ret;
}
