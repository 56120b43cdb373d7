/* gst-dflash — router
 * Copyright (C) 2026 gst-dflash developers
 *
 * This library is free software; you can redistribute it and/or modify it
 * under the terms of the GNU Library General Public License as published by
 * the Free Software Foundation; either version 2 of the License, or (at your
 * option) any later version.
 */
/**
 * SECTION:element-router
 * @title: router
 *
 * router takes the block's proposal on its `sink` pad and, on the `chain`
 * request pad, the chain drafter's proposal for the same round, and passes
 * one on to the verifier, as the round's route step (core/round.h) decides
 * under its policy. `policy=auto` follows the sidecar's router (the
 * margin of the target's tip row between the subspaces of rounds the block
 * won and rounds the chain won: above zero, the block); `policy=match`
 * takes the chain where its match is at least `match-min` tokens long, the
 * block otherwise; `policy=cost` takes the chain on such a match too, and
 * below it whichever of the block and the chain's short (or empty)
 * proposal has given more tokens a second so far, measured from each
 * round's decision to its verdict (core/route-cost.h): where a block
 * costs a fraction of a target step (a large target on a GPU), that is the
 * block; where it costs several (a small target, on a few CPU cores or on
 * a GPU alike), mostly a plain step, the block still tried once every
 * #GstDflashRouter:probe-every decisions, then, while its figure trails,
 * at gaps that double up to 256. A near tie does not flip the
 * choice from run to run: an arm's seconds are the median of its last
 * rounds (a slow hand-off does not move it) and the other arm takes over
 * only when ahead by 10% (core/route-cost.h). The figures are the router's
 * own (apart for targets on the CPU and on CUDA), kept from one run to the
 * next of the same element (a stop and a flush keep them: they are the
 * machine's and the pair's, not the run's), and never shared with another
 * router: the model is the same for every pipeline on it, but how fast a
 * block pays is each pipeline's own (an A/B of two pipelines must not
 * have one learn from the other). With #GstDflashRouter:figures-file they
 * outlive the process too: read from the file when the router starts,
 * written back when it stops, so that a new process on the same machine
 * and pair (each `dflash generate`, which keeps one such file a pair)
 * starts from them instead of paying again for the tries of the block that
 * made them. `block` and
 * `chain` always take one. The verdict of the round goes back up the
 * block's branch only, so tapsource hears it once.
 *
 * With #GstDflashRouter:decide-first (the default) a round is routed as
 * soon as the chain's proposal arrives, as the core's own loop
 * (core/speculate.c) routes before it drafts: every policy needs only what
 * the chain's proposal carries (its match, the round's tip row). The route
 * goes upstream on the block's branch as a `dflash-route` event, and
 * dflashblock, which asks when it starts whether a router downstream
 * decides first, waits for it and skips the block on the chain's rounds
 * (its branch then brings an empty proposal, which the router drops). The
 * chain's branch must be able to run while the block's waits: a queue after
 * the tee on the block's branch. With the chain's branch first after the
 * tee and without a queue (as in pipelines/routed.pipeline), prompt lookup
 * runs on the source's thread and the route is there before the block's
 * branch sees the round. Without a chain pad nothing is decided first.
 *
 * The router has no thread of its own: the chosen proposal goes on from
 * the thread that brought it, as a funnel passes buffers on. A round
 * routed to the chain goes on as soon as its proposal arrives, without
 * waiting for the block's branch (whose empty proposal for it is dropped
 * when it comes), and a block's round when the block has been drafted. A
 * round whose proposal comes before the block's branch has brought the
 * stream's caps and segment (the first, or the first after a flush) waits
 * for them and goes on from that branch's thread. With decide-first off
 * the proposal that comes second decides and goes on.
 *
 * ## Example launch line
 * |[
 * gst-launch-1.0 tapsource ! tee name=t ! ngramdraft ! r.chain  t. ! queue ! ctxsettle ! dflashblock ! selector ! router name=r policy=match ! verifier ! fdsink
 * ]|
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstdflashrouter.h"

#include "round.h"

#include "gstdflashcaps.h"
#include "gstdflashmeta.h"
#include "gstdflashmodel.h"
#include "gstdflashelement.h"
#include "gstdflashseq.h"
#include "route-cost.h"

#include <string.h>

GST_DEBUG_CATEGORY_STATIC (gst_dflash_router_debug);
#define GST_CAT_DEFAULT gst_dflash_router_debug

static GstStaticPadTemplate sink_template = GST_STATIC_PAD_TEMPLATE ("sink",
    GST_PAD_SINK, GST_PAD_ALWAYS, GST_STATIC_CAPS (GST_DFLASH_PROPOSAL_CAPS));
static GstStaticPadTemplate chain_template = GST_STATIC_PAD_TEMPLATE ("chain",
    GST_PAD_SINK, GST_PAD_REQUEST, GST_STATIC_CAPS (GST_DFLASH_PROPOSAL_CAPS));
static GstStaticPadTemplate src_template = GST_STATIC_PAD_TEMPLATE ("src",
    GST_PAD_SRC, GST_PAD_ALWAYS, GST_STATIC_CAPS (GST_DFLASH_PROPOSAL_CAPS));

/* The policy is the round's route (core/round.h), every one but none. */
#define GST_TYPE_DFLASH_POLICY (gst_dflash_policy_get_type ())
static GType
gst_dflash_policy_get_type (void)
{
  static GType type = 0;
  static const GEnumValue values[] = {
    { DFL_ROUTE_AUTO, "The sidecar's router (its margin on the tip row)", "auto" },
    { DFL_ROUTE_MATCH, "The chain when its match is at least match-min tokens", "match" },
    { DFL_ROUTE_BLOCK, "Always the block", "block" },
    { DFL_ROUTE_CHAIN, "Always the chain", "chain" },
    { DFL_ROUTE_COST, "The chain on a match of match-min tokens, else the block or the "
      "chain's proposal, whichever has given more tokens a second", "cost" },
    { 0, NULL, NULL },
  };

  return gst_dflash_register_enum (&type, "GstDflashPolicy", values);
}

#define DEFAULT_MATCH_MIN 3

enum {
  PROP_0,
  PROP_POLICY,
  PROP_MATCH_MIN,
  PROP_BLOCK_ROUNDS,
  PROP_CHAIN_ROUNDS,
  PROP_DECIDE_FIRST,
  PROP_PROBE_EVERY,
  PROP_FIGURES_FILE,
  PROP_BLOCK_RATE,
  PROP_CHAIN_RATE,
};

/* A round policy=cost decided below match-min, until its verdict. */
typedef struct {
  guint round;
  gint64 decided_us;
  DflRouteArm arm;
  gboolean cuda_target;      /* whose figures it goes into */
} Pending;

/* A round the chain's branch has routed (decide-first) whose block's
 * proposal, empty or drafted, has not come yet; `held`: the chain's
 * proposal, kept until the block's branch has brought the caps and the
 * segment (NULL where it went on, or was dropped for the block). */
typedef struct {
  guint round;
  gboolean chain;
  GstBuffer *held;
} Decided;

/* A sequence's rounds between their two proposals. */
typedef struct {
  GQueue decided;      /* Decided, in round order */
  GstBuffer *block;    /* a block's proposal that came before its chain's */
  GstBuffer *chain;    /* decide-first off: a chain's that waits for the block's */
} SeqRounds;

struct _GstDflashRouter {
  GstElement parent;
  GstPad *block_pad, *chain_pad, *srcpad;
  GstDflashModel *model;
  /* properties and figures (object lock) */
  DflRoute policy;
  int match_min;
  guint64 block_rounds, chain_rounds;
  gboolean decide_first;
  int probe_every;
  char *figures_file;
  /* policy=cost, under the object lock (the chain's branch decides, the
   * verifier's thread brings the verdict): the figures, by where the
   * target runs (CPU, CUDA); by sequence, the round decided on them; where
   * the last one's target ran */
  DflRouteCost cost[DFL_ROUTE_PLACES];
  GHashTable *pending;
  gboolean last_cuda;
  /* the rounds between their two proposals, by sequence (rounds_lock) */
  GMutex rounds_lock;
  GHashTable *rounds;
  gboolean flushing;
  gboolean policy_checked;
};

#define _do_init \
    GST_DEBUG_CATEGORY_INIT (gst_dflash_router_debug, "router", 0, "dflash router");
#define gst_dflash_router_parent_class parent_class
G_DEFINE_TYPE_WITH_CODE (GstDflashRouter, gst_dflash_router, GST_TYPE_ELEMENT, _do_init);
GST_ELEMENT_REGISTER_DEFINE (router, "router", GST_RANK_NONE, GST_TYPE_DFLASH_ROUTER);

static GstFlowReturn gst_dflash_router_chain_chain (GstPad *pad, GstObject *parent,
                                                    GstBuffer *buf);
static gboolean gst_dflash_router_chain_event (GstPad *pad, GstObject *parent, GstEvent *event);
static gboolean gst_dflash_router_chain_query (GstPad *pad, GstObject *parent, GstQuery *query);
static GstIterator *gst_dflash_router_iterate_internal_links (GstPad *pad, GstObject *parent);

/* The one chain pad. It is named chain_0, not as its template: GstElement
 * refuses a second request for a pad name that exists before asking the
 * element, and the refusal here says why. */
static GstPad *
gst_dflash_router_request_new_pad (GstElement *element, GstPadTemplate *templ,
                                   const gchar *req_name, const GstCaps *caps)
{
  GstDflashRouter *self = GST_DFLASH_ROUTER (element);
  GstPad *pad;

  GST_OBJECT_LOCK (self);
  if (self->chain_pad)
    goto already_requested;
  GST_OBJECT_UNLOCK (self);
  pad = gst_pad_new_from_template (templ, "chain_0");
  gst_pad_set_chain_function (pad, GST_DEBUG_FUNCPTR (gst_dflash_router_chain_chain));
  gst_pad_set_event_function (pad, GST_DEBUG_FUNCPTR (gst_dflash_router_chain_event));
  gst_pad_set_query_function (pad, GST_DEBUG_FUNCPTR (gst_dflash_router_chain_query));
  gst_pad_set_iterate_internal_links_function (pad,
      GST_DEBUG_FUNCPTR (gst_dflash_router_iterate_internal_links));
  GST_OBJECT_FLAG_SET (pad, GST_PAD_FLAG_PROXY_CAPS | GST_PAD_FLAG_PROXY_ALLOCATION);
  GST_OBJECT_LOCK (self);
  self->chain_pad = pad;
  GST_OBJECT_UNLOCK (self);
  if (GST_STATE (self) > GST_STATE_READY)
    gst_pad_set_active (pad, TRUE);
  gst_element_add_pad (element, pad);
  return pad;

  /* ERRORS */
already_requested:
  {
    GST_OBJECT_UNLOCK (self);
    GST_ELEMENT_ERROR (self, CORE, PAD, ("the chain pad is already requested"),
        ("a router takes one chain drafter"));
    return NULL;
  }
}

static void
gst_dflash_router_release_pad (GstElement *element, GstPad *pad)
{
  GstDflashRouter *self = GST_DFLASH_ROUTER (element);

  GST_OBJECT_LOCK (self);
  if (pad == self->chain_pad)
    self->chain_pad = NULL;
  GST_OBJECT_UNLOCK (self);
  gst_pad_set_active (pad, FALSE);
  gst_element_remove_pad (element, pad);
}

/* policy=cost: the round's route, decided once (when the chain's proposal
 * arrives) on the figures for where the sequence's target runs, and looked
 * up after. */
static gboolean
cost_choose_chain (GstDflashRouter *self, const GstDflashRoundMeta *cm, int match_min)
{
  gboolean cuda, chain;
  Pending *p;

  cuda = cm->seq && cm->seq->kv
         && dfl_target_backend (dfl_target_seq_target (cm->seq->kv)) == DFL_BACKEND_CUDA;

  GST_OBJECT_LOCK (self);
  p = g_hash_table_lookup (self->pending, GUINT_TO_POINTER (cm->sequence));
  if (p && p->round == cm->round) {
    chain = p->arm == DFL_ROUTE_ARM_CHAIN;
  } else {
    gboolean costed;
    self->cost[cuda].probe_every = self->probe_every;
    chain = dfl_round_route (DFL_ROUTE_COST, match_min, NULL, NULL, cm->match, &self->cost[cuda],
                             &costed) == DFL_ROUND_CHAIN;
    /* a round the figures decided: its verdict brings its figures */
    if (costed) {
      p = g_new (Pending, 1);
      p->round = cm->round;
      p->decided_us = g_get_monotonic_time ();
      p->cuda_target = self->last_cuda = cuda;
      p->arm = chain ? DFL_ROUTE_ARM_CHAIN : DFL_ROUTE_ARM_BLOCK;
      g_hash_table_insert (self->pending, GUINT_TO_POINTER (cm->sequence), p);
    }
  }
  GST_OBJECT_UNLOCK (self);
  return chain;
}

/* policy=cost: a verdict brings the figures of the round it ends. */
static void
cost_observe (GstDflashRouter *self, GstEvent *verdict)
{
  guint sequence, round;
  gint accepted, bonus;
  gint64 anchor_pos;
  gboolean done;
  Pending *p;

  if (!gst_dflash_verdict_event_parse (verdict, &sequence, &round, &anchor_pos, &accepted, &bonus,
                                       &done))
    return;
  GST_OBJECT_LOCK (self);
  p = g_hash_table_lookup (self->pending, GUINT_TO_POINTER (sequence));
  if (p && p->round == round) {
    dfl_route_cost_observe (&self->cost[p->cuda_target], p->arm, accepted + 1,
                            (g_get_monotonic_time () - p->decided_us) / 1e6);
    g_hash_table_remove (self->pending, GUINT_TO_POINTER (sequence));
  }
  GST_OBJECT_UNLOCK (self);
}

/* TRUE where the round goes to the chain: the round's route step
 * (core/round.h) under the policy. `round` is the round's meta (either
 * branch's: both carry the round's tip), `cm` the chain's proposal's (NULL:
 * no chain proposal, so the block's). */
static gboolean
choose_chain (GstDflashRouter *self, const GstDflashRoundMeta *round, const GstDflashRoundMeta *cm)
{
  DflDrafterWeights *d;
  DflRoute route;
  int match_min;

  if (!cm)
    return FALSE;
  GST_OBJECT_LOCK (self);
  route = self->policy;
  match_min = self->match_min;
  GST_OBJECT_UNLOCK (self);
  /* policy=cost decides once a round and remembers it for the verdict */
  if (route == DFL_ROUTE_COST)
    return cost_choose_chain (self, cm, match_min);
  d = route == DFL_ROUTE_AUTO && self->model ? gst_dflash_model_drafter (self->model) : NULL;
  return dfl_round_route (route, match_min, d, round && round->tip
                          ? g_bytes_get_data (round->tip, NULL) : NULL, cm->match, NULL, NULL)
         == DFL_ROUND_CHAIN;
}

/* --- the rounds between their two proposals --- */

static void
decided_free (gpointer data)
{
  Decided *d = data;

  gst_clear_buffer (&d->held);
  g_free (d);
}

static void
seq_rounds_free (gpointer data)
{
  SeqRounds *sq = data;

  g_queue_clear_full (&sq->decided, decided_free);
  gst_clear_buffer (&sq->block);
  gst_clear_buffer (&sq->chain);
  g_free (sq);
}

/* The sequence's rounds (rounds_lock held). */
static SeqRounds *
seq_rounds (GstDflashRouter *self, guint sequence)
{
  SeqRounds *sq = g_hash_table_lookup (self->rounds, GUINT_TO_POINTER (sequence));

  if (!sq) {
    sq = g_new0 (SeqRounds, 1);
    g_queue_init (&sq->decided);
    g_hash_table_insert (self->rounds, GUINT_TO_POINTER (sequence), sq);
  }
  return sq;
}

/* rounds_lock taken and the sequence's rounds; NULL while flushing, the
 * proposal `buf` then dropped and the lock not held. */
static SeqRounds *
lock_rounds (GstDflashRouter *self, guint sequence, GstBuffer *buf)
{
  g_mutex_lock (&self->rounds_lock);
  if (self->flushing) {
    g_mutex_unlock (&self->rounds_lock);
    gst_buffer_unref (buf);
    return NULL;
  }
  return seq_rounds (self, sequence);
}

/* rounds_lock released; a sequence with no round left between its
 * proposals leaves the table (a server's sequences come and go). */
static void
unlock_rounds (GstDflashRouter *self, guint sequence, SeqRounds *sq)
{
  if (g_queue_is_empty (&sq->decided) && !sq->block && !sq->chain)
    g_hash_table_remove (self->rounds, GUINT_TO_POINTER (sequence));
  g_mutex_unlock (&self->rounds_lock);
}

/* Whether the stream's caps and segment are on the source pad (the block's
 * branch brings them), so that any thread may push a round after them. */
static gboolean
src_ready (GstDflashRouter *self)
{
  GstEvent *segment;

  if (!gst_pad_has_current_caps (self->srcpad))
    return FALSE;
  segment = gst_pad_get_sticky_event (self->srcpad, GST_EVENT_SEGMENT, 0);
  if (!segment)
    return FALSE;
  gst_event_unref (segment);
  return TRUE;
}

/* Whether rounds are routed when the chain's proposal comes: the property,
 * and a linked chain pad. */
static gboolean
decides_first (GstDflashRouter *self)
{
  gboolean first;

  GST_OBJECT_LOCK (self);
  first = self->decide_first && self->chain_pad && gst_pad_is_linked (self->chain_pad);
  GST_OBJECT_UNLOCK (self);
  return first;
}

/* The round's chosen proposal goes on, on the caller's thread. */
static GstFlowReturn
pass_on (GstDflashRouter *self, GstBuffer *out, gboolean took_chain)
{
  GST_OBJECT_LOCK (self);
  if (took_chain)
    self->chain_rounds++;
  else
    self->block_rounds++;
  GST_OBJECT_UNLOCK (self);
  return gst_pad_push (self->srcpad, out);
}

/* Both proposals of a round are here: the policy picks one, it goes on. */
static GstFlowReturn
pick_and_pass (GstDflashRouter *self, GstBuffer *block, GstBuffer *chain)
{
  GstDflashRoundMeta *bm = gst_buffer_get_dflash_round_meta (block);
  GstDflashRoundMeta *cm = gst_buffer_get_dflash_round_meta (chain);
  /* an empty block proposal of the chain's source: dflashblock skipped a
   * round routed to the chain first */
  gboolean took_chain = bm->source == GST_DFLASH_SOURCE_CHAIN || choose_chain (self, bm, cm);

  if (took_chain) {
    gst_buffer_unref (block);
    return pass_on (self, chain, TRUE);
  }
  gst_buffer_unref (chain);
  return pass_on (self, block, FALSE);
}

static GstFlowReturn
not_same_round (GstDflashRouter *self, const GstDflashRoundMeta *bm, const GstDflashRoundMeta *cm,
                guint block_round, guint chain_round)
{
  GST_ELEMENT_ERROR (self, STREAM, FAILED,
      ("the block's proposal and the chain's are not of the same round"),
      ("block: sequence %u round %u; chain: sequence %u round %u", bm ? bm->sequence : 0,
       block_round, cm ? cm->sequence : 0, chain_round));
  return GST_FLOW_ERROR;
}

static GstFlowReturn
no_round (GstDflashRouter *self, GstBuffer *buf, const char *branch)
{
  gst_buffer_unref (buf);
  GST_ELEMENT_ERROR (self, STREAM, FAILED, ("a proposal without its round"),
      ("the %s's proposal carries no round meta", branch));
  return GST_FLOW_ERROR;
}

/* The chain's proposal (its branch's thread). Decided first: route the
 * round, tell the block's branch, and pass a chain's round on at once. */
static GstFlowReturn
gst_dflash_router_chain_chain (GstPad *pad, GstObject *parent, GstBuffer *buf)
{
  GstDflashRouter *self = GST_DFLASH_ROUTER (parent);
  GstDflashRoundMeta *cm = gst_buffer_get_dflash_round_meta (buf);
  gboolean first = decides_first (self), ready = src_ready (self), chain;
  guint sequence, round;
  GstBuffer *block;
  SeqRounds *sq;
  Decided *d;

  if (!cm)
    return no_round (self, buf, "chain");
  if (!(sq = lock_rounds (self, cm->sequence, buf)))
    return GST_FLOW_FLUSHING;
  /* the block's came first (decide-first off, or drafted without a route) */
  if ((block = sq->block)) {
    GstDflashRoundMeta *bm = gst_buffer_get_dflash_round_meta (block);
    sq->block = NULL;
    unlock_rounds (self, cm->sequence, sq);
    if (bm->round != cm->round) {
      GstFlowReturn ret = not_same_round (self, bm, cm, bm->round, cm->round);
      gst_buffer_unref (block);
      gst_buffer_unref (buf);
      return ret;
    }
    return pick_and_pass (self, block, buf);
  }
  if (!first) {
    gboolean twice = sq->chain != NULL;
    guint waiting = twice ? gst_buffer_get_dflash_round_meta (sq->chain)->round : 0;
    if (!twice)
      sq->chain = buf;
    unlock_rounds (self, cm->sequence, sq);
    if (twice) {
      gst_buffer_unref (buf);
      return not_same_round (self, NULL, cm, waiting, cm->round);
    }
    return GST_FLOW_OK;
  }
  sequence = cm->sequence;
  round = cm->round;
  chain = choose_chain (self, cm, cm);
  d = g_new0 (Decided, 1);
  d->round = round;
  d->chain = chain;
  /* before the caps and segment the block's branch passes it on (and may
   * have done so once the lock is let go: buf and its meta are not read
   * after) */
  if (chain && !ready)
    d->held = buf;
  g_queue_push_tail (&sq->decided, d);
  unlock_rounds (self, sequence, sq);
  GST_LOG_OBJECT (self, "sequence %u round %u: the %s's (decided first)", sequence, round,
                  chain ? "chain" : "block");
  gst_pad_push_event (self->block_pad, gst_dflash_route_event_new (sequence, round, chain));
  if (!chain) {
    gst_buffer_unref (buf);
    return GST_FLOW_OK;
  }
  return ready ? pass_on (self, buf, TRUE) : GST_FLOW_OK;
}

/* The block's proposal (its branch's thread), empty where the round went
 * to the chain. */
static GstFlowReturn
gst_dflash_router_block_chain (GstPad *pad, GstObject *parent, GstBuffer *buf)
{
  GstDflashRouter *self = GST_DFLASH_ROUTER (parent);
  GstDflashRoundMeta *bm = gst_buffer_get_dflash_round_meta (buf);
  GstBuffer *chain = NULL, *held = NULL;
  gboolean linked, took_chain = FALSE;
  SeqRounds *sq;
  Decided *d;

  if (!bm)
    return no_round (self, buf, "block");
  GST_OBJECT_LOCK (self);
  linked = self->chain_pad && gst_pad_is_linked (self->chain_pad);
  GST_OBJECT_UNLOCK (self);
  if (!linked)
    return pass_on (self, buf, FALSE);
  if (!(sq = lock_rounds (self, bm->sequence, buf)))
    return GST_FLOW_FLUSHING;
  if ((d = g_queue_peek_head (&sq->decided))) {
    guint round = d->round;
    if (round == bm->round) {
      g_queue_pop_head (&sq->decided);
      took_chain = d->chain;
      held = g_steal_pointer (&d->held);
      g_free (d);
    }
    unlock_rounds (self, bm->sequence, sq);
    if (round != bm->round) {
      gst_buffer_unref (buf);
      return not_same_round (self, bm, bm, bm->round, round);
    }
    if (!took_chain)
      return pass_on (self, buf, FALSE);
    gst_buffer_unref (buf);
    return held ? pass_on (self, held, TRUE) : GST_FLOW_OK;
  }
  if ((chain = sq->chain)) {
    sq->chain = NULL;
    unlock_rounds (self, bm->sequence, sq);
    if (gst_buffer_get_dflash_round_meta (chain)->round != bm->round) {
      GstDflashRoundMeta *cm = gst_buffer_get_dflash_round_meta (chain);
      GstFlowReturn ret = not_same_round (self, bm, cm, bm->round, cm->round);
      gst_buffer_unref (chain);
      gst_buffer_unref (buf);
      return ret;
    }
    return pick_and_pass (self, buf, chain);
  }
  /* the chain's proposal for this round has not come: it picks */
  if (sq->block) {
    guint waiting = gst_buffer_get_dflash_round_meta (sq->block)->round;
    unlock_rounds (self, bm->sequence, sq);
    gst_buffer_unref (buf);
    return not_same_round (self, bm, NULL, waiting, bm->round);
  }
  sq->block = buf;
  unlock_rounds (self, bm->sequence, sq);
  return GST_FLOW_OK;
}

/* Every round between its proposals dropped: a flush's, or a stop's. */
static void
drop_rounds (GstDflashRouter *self, gboolean flushing)
{
  g_mutex_lock (&self->rounds_lock);
  self->flushing = flushing;
  g_hash_table_remove_all (self->rounds);
  g_mutex_unlock (&self->rounds_lock);
  /* their verdicts will not come */
  GST_OBJECT_LOCK (self);
  g_hash_table_remove_all (self->pending);
  GST_OBJECT_UNLOCK (self);
}

/* The block's caps: the model, and whether the policy can run on it. */
static gboolean
check_policy (GstDflashRouter *self, GstPad *pad)
{
  DflRoute policy;
  gboolean decide_first;
  const char *drafter;

  GST_OBJECT_LOCK (self);
  policy = self->policy;
  decide_first = self->decide_first;
  GST_OBJECT_UNLOCK (self);
  if (!self->model)
    gst_dflash_model_find (GST_ELEMENT (self), pad, &self->model);
  if (policy == DFL_ROUTE_AUTO
      && !(self->model && gst_dflash_model_drafter (self->model)
           && dfl_drafter_weights_has_route (gst_dflash_model_drafter (self->model))))
    goto no_fitted_router;
  /* deciding after both have drafted, the block's drafting is paid every
   * round and never seen in its figure */
  if (policy == DFL_ROUTE_COST && !decide_first)
    goto cost_needs_decide_first;
  return TRUE;

  /* ERRORS */
no_fitted_router:
  {
    drafter = self->model ? gst_dflash_model_drafter_path (self->model) : NULL;
    GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS,
        ("policy=auto needs the sidecar's fitted router, and %s has none (fit one with 'dflash "
         "route-fit', or use policy=match, block or chain)", drafter ? drafter : "the model"),
        ("%s", self->model ? "the drafter has no router tensors" : "no dflash model found"));
    return FALSE;
  }
cost_needs_decide_first:
  {
    GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS,
        ("policy=cost needs decide-first=true"),
        ("it weighs the block's drafting time, which it only sees when the block drafts the "
         "rounds routed to it alone"));
    return FALSE;
  }
}

/* The block's branch brings the stream: its caps (the model's, checked
 * against the policy once) and every other event go on. A flush drops the
 * rounds in flight. */
static gboolean
gst_dflash_router_block_event (GstPad *pad, GstObject *parent, GstEvent *event)
{
  GstDflashRouter *self = GST_DFLASH_ROUTER (parent);

  switch (GST_EVENT_TYPE (event)) {
    case GST_EVENT_CAPS:
      if (!self->policy_checked) {
        if (!check_policy (self, pad)) {
          gst_event_unref (event);
          return FALSE;
        }
        self->policy_checked = TRUE;
      }
      break;
    case GST_EVENT_FLUSH_START:
      drop_rounds (self, TRUE);
      break;
    case GST_EVENT_FLUSH_STOP:
      drop_rounds (self, FALSE);
      break;
    default:
      break;
  }
  return gst_pad_event_default (pad, parent, event);
}

/* The chain's branch comes from the same tee: its stream events are the
 * block's, which go on from there; a flush drops the rounds here too. */
static gboolean
gst_dflash_router_chain_event (GstPad *pad, GstObject *parent, GstEvent *event)
{
  GstDflashRouter *self = GST_DFLASH_ROUTER (parent);

  if (GST_EVENT_TYPE (event) == GST_EVENT_FLUSH_START)
    drop_rounds (self, TRUE);
  else if (GST_EVENT_TYPE (event) == GST_EVENT_FLUSH_STOP)
    drop_rounds (self, FALSE);
  gst_event_unref (event);
  return TRUE;
}

/* The chain's proposals go out as the block's do: its caps and allocation
 * are asked downstream. */
static gboolean
gst_dflash_router_chain_query (GstPad *pad, GstObject *parent, GstQuery *query)
{
  GstDflashRouter *self = GST_DFLASH_ROUTER (parent);

  if (GST_QUERY_IS_SERIALIZED (query) && GST_QUERY_TYPE (query) != GST_QUERY_ALLOCATION)
    return FALSE;
  return gst_pad_peer_query (self->srcpad, query);
}

/* Each sink pad leads to the source pad; the source pad to the block's
 * branch only (upstream events and queries must reach tapsource once). */
static GstIterator *
gst_dflash_router_iterate_internal_links (GstPad *pad, GstObject *parent)
{
  GstDflashRouter *self = GST_DFLASH_ROUTER (parent);
  GValue v = G_VALUE_INIT;
  GstIterator *it;

  g_value_init (&v, GST_TYPE_PAD);
  g_value_set_object (&v, pad == self->srcpad ? self->block_pad : self->srcpad);
  it = gst_iterator_new_single (GST_TYPE_PAD, &v);
  g_value_unset (&v);
  return it;
}

/* The verdict goes up the block's branch alone: tapsource must hear it once.
 * So does every other upstream event (a seek among them): tapsource is the
 * loop's one source, and if it takes the seek its flush reaches both
 * branches through the tee. */
static gboolean
gst_dflash_router_src_event (GstPad *pad, GstObject *parent, GstEvent *event)
{
  GstDflashRouter *self = GST_DFLASH_ROUTER (parent);

  if (GST_EVENT_TYPE (event) == GST_EVENT_CUSTOM_UPSTREAM
      && gst_event_has_name (event, GST_DFLASH_VERDICT_EVENT))
    cost_observe (self, event);
  return gst_pad_push_event (self->block_pad, event);
}

/* dflashblock asks, on the block's branch, whether it should wait for
 * each round's route. */
static gboolean
gst_dflash_router_block_query (GstPad *pad, GstObject *parent, GstQuery *query)
{
  GstDflashRouter *self = GST_DFLASH_ROUTER (parent);

  if (gst_dflash_is_route_query (query)) {
    gst_dflash_route_query_set (query, decides_first (self));
    return TRUE;
  }
  return gst_pad_query_default (pad, parent, query);
}

static gboolean
gst_dflash_router_src_query (GstPad *pad, GstObject *parent, GstQuery *query)
{
  GstDflashRouter *self = GST_DFLASH_ROUTER (parent);

  if (GST_QUERY_TYPE (query) == GST_QUERY_CONTEXT
      && gst_dflash_model_handle_context_query (GST_ELEMENT (self), query, self->model))
    return TRUE;
  return gst_pad_query_default (pad, parent, query);
}

static void
gst_dflash_router_set_context (GstElement *element, GstContext *context)
{
  gst_dflash_model_handle_set_context (element, context, &GST_DFLASH_ROUTER (element)->model);
  GST_ELEMENT_CLASS (parent_class)->set_context (element, context);
}

/* The figures in `path` (dfl_route_figures_read) into self->cost, each
 * with the router's probe-every; FALSE with the reason. */
static gboolean
read_figures (GstDflashRouter *self, const char *path, GError **error)
{
  DflRouteCost cost[DFL_ROUTE_PLACES];

  GST_OBJECT_LOCK (self);
  memcpy (cost, self->cost, sizeof cost);
  for (int i = 0; i < DFL_ROUTE_PLACES; i++)
    cost[i].probe_every = self->probe_every;
  GST_OBJECT_UNLOCK (self);
  if (!dfl_route_figures_read (path, cost, error))
    return FALSE;
  GST_OBJECT_LOCK (self);
  memcpy (self->cost, cost, sizeof cost);
  GST_OBJECT_UNLOCK (self);
  return TRUE;
}

/* READY → PAUSED: the counts start again (the cost figures stay: they are
 * the machine's, not this run's), read from figures-file where set. */
static void
router_start (GstDflashRouter *self)
{
  g_autofree char *path = NULL;
  g_autoptr (GError) error = NULL;

  GST_OBJECT_LOCK (self);
  self->block_rounds = self->chain_rounds = 0;
  path = g_strdup (self->figures_file);
  GST_OBJECT_UNLOCK (self);
  drop_rounds (self, FALSE);
  self->policy_checked = FALSE;
  /* a file that cannot be used costs this run its head start, no more:
   * said on the bus, the router goes on with the figures it has */
  if (path && *path && !read_figures (self, path, &error))
    GST_ELEMENT_WARNING (self, RESOURCE, READ,
                         ("figures-file %s: %s; going on without its figures", path,
                          error->message), (NULL));
}

/* PAUSED → READY, the rounds dropped: the figures into figures-file where
 * set. */
static void
router_stop (GstDflashRouter *self)
{
  DflRouteCost cost[DFL_ROUTE_PLACES];
  g_autofree char *path = NULL;
  g_autoptr (GError) error = NULL;

  GST_OBJECT_LOCK (self);
  path = g_strdup (self->figures_file);
  memcpy (cost, self->cost, sizeof cost);
  GST_OBJECT_UNLOCK (self);
  if (path && *path && !dfl_route_figures_write (path, cost, &error))
    GST_ELEMENT_WARNING (self, RESOURCE, WRITE,
                         ("figures-file %s: %s; the next run starts afresh", path, error->message),
                         (NULL));
}

static GstStateChangeReturn
gst_dflash_router_change_state (GstElement *element, GstStateChange transition)
{
  GstDflashRouter *self = GST_DFLASH_ROUTER (element);
  GstStateChangeReturn ret;

  if (transition == GST_STATE_CHANGE_READY_TO_PAUSED)
    router_start (self);
  else if (transition == GST_STATE_CHANGE_PAUSED_TO_READY)
    drop_rounds (self, TRUE);
  ret = GST_ELEMENT_CLASS (parent_class)->change_state (element, transition);
  if (transition == GST_STATE_CHANGE_PAUSED_TO_READY)
    router_stop (self);
  return ret;
}

static void
gst_dflash_router_get_property (GObject *object, guint prop_id, GValue *value, GParamSpec *pspec)
{
  GstDflashRouter *self = GST_DFLASH_ROUTER (object);

  if (gst_dflash_field_property_get (object, value, pspec))
    return;
  switch (prop_id) {
    case PROP_BLOCK_RATE:
    case PROP_CHAIN_RATE:
      GST_OBJECT_LOCK (self);
      g_value_set_double (value, dfl_route_cost_rate (&self->cost[self->last_cuda],
          prop_id == PROP_BLOCK_RATE ? DFL_ROUTE_ARM_BLOCK : DFL_ROUTE_ARM_CHAIN));
      GST_OBJECT_UNLOCK (self);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
      break;
  }
}

static void
gst_dflash_router_finalize (GObject *object)
{
  g_free (GST_DFLASH_ROUTER (object)->figures_file);
  g_clear_object (&GST_DFLASH_ROUTER (object)->model);
  g_hash_table_unref (GST_DFLASH_ROUTER (object)->pending);
  g_hash_table_unref (GST_DFLASH_ROUTER (object)->rounds);
  g_mutex_clear (&GST_DFLASH_ROUTER (object)->rounds_lock);
  G_OBJECT_CLASS (parent_class)->finalize (object);
}

static void
gst_dflash_router_class_init (GstDflashRouterClass *klass)
{
  GObjectClass *gobject_class = G_OBJECT_CLASS (klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS (klass);

  gobject_class->set_property = gst_dflash_field_set_property;
  gobject_class->get_property = gst_dflash_router_get_property;
  gobject_class->finalize = gst_dflash_router_finalize;
  /**
   * GstDflashRouter:policy
   *
   * How a round is routed: the sidecar's router (auto), the match rule,
   * the match rule with the rest by measured tokens a second (cost), or
   * always one drafter.
   */
  gst_dflash_install_field_property (gobject_class, PROP_POLICY,
      g_param_spec_enum ("policy", "Policy", "How each round chooses between block and chain",
          GST_TYPE_DFLASH_POLICY, DFL_ROUTE_MATCH,
          G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_PLAYING),
      G_STRUCT_OFFSET (GstDflashRouter, policy));
  gst_dflash_install_field_property (gobject_class, PROP_MATCH_MIN,
      g_param_spec_int ("match-min", "Match min",
          "policy=match: the chain's suffix match that makes the round the chain's",
          1, 64, DEFAULT_MATCH_MIN, G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_PLAYING),
      G_STRUCT_OFFSET (GstDflashRouter, match_min));
  gst_dflash_install_field_property (gobject_class, PROP_BLOCK_ROUNDS,
      g_param_spec_uint64 ("block-rounds", "Block rounds", "Rounds routed to the block so far",
          0, G_MAXUINT64, 0, G_PARAM_READABLE | G_PARAM_STATIC_STRINGS),
      G_STRUCT_OFFSET (GstDflashRouter, block_rounds));
  gst_dflash_install_field_property (gobject_class, PROP_CHAIN_ROUNDS,
      g_param_spec_uint64 ("chain-rounds", "Chain rounds", "Rounds routed to the chain so far",
          0, G_MAXUINT64, 0, G_PARAM_READABLE | G_PARAM_STATIC_STRINGS),
      G_STRUCT_OFFSET (GstDflashRouter, chain_rounds));

  /**
   * GstDflashRouter:decide-first
   *
   * Route each round when the chain's proposal arrives and tell the
   * block's branch, so that dflashblock drafts only the block's rounds; off,
   * both branches draft every round and the router picks afterwards.
   */
  gst_dflash_install_field_property (gobject_class, PROP_DECIDE_FIRST,
      g_param_spec_boolean ("decide-first", "Decide first",
          "Route each round as soon as the chain's proposal arrives, and tell the block's branch "
          "so it drafts only the block's rounds (needs a queue after the tee on that branch)",
          TRUE, G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY),
      G_STRUCT_OFFSET (GstDflashRouter, decide_first));
  /**
   * GstDflashRouter:probe-every
   *
   * policy=cost: the side its figures favour less (at first the block,
   * which has none: the chain goes first) is tried once every this many
   * decisions, so that its figure is made and follows the machine and the
   * text; once the figure is made, each try that finds it still trailing
   * doubles the gap to the next, up to 256 decisions (or this, if more),
   * and the two sides' swapping sets it back.
   */
  gst_dflash_install_field_property (gobject_class, PROP_PROBE_EVERY,
      g_param_spec_int ("probe-every", "Probe every",
          "policy=cost: decisions between two tries of the side it favours less, doubled while it trails (0: never)",
          0, 1000000, DFL_ROUTE_COST_PROBE_EVERY,
          G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_PLAYING),
      G_STRUCT_OFFSET (GstDflashRouter, probe_every));
  /**
   * GstDflashRouter:figures-file
   *
   * policy=cost: a JSON file the figures are read from when the router
   * starts and written to when it stops (its folder made where missing),
   * so that the next process on this machine and model pair starts from
   * them. A file that is missing is the first run's; one that cannot be
   * read or is not such figures is said in a warning on the bus, and the
   * router goes on with the figures it has (none in a new element).
   */
  gst_dflash_install_field_property (gobject_class, PROP_FIGURES_FILE,
      g_param_spec_string ("figures-file", "Figures file",
          "policy=cost: JSON file the figures are read from at start and written to at stop "
          "(unset: kept in this element only)",
          NULL, G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY),
      G_STRUCT_OFFSET (GstDflashRouter, figures_file));
  /**
   * GstDflashRouter:block-tokens-per-second
   *
   * policy=cost: what the block's rounds below match-min have given, in
   * tokens (accepted + 1) a second of drafting and verifying: this
   * router's figures for where the target of the last round decided ran.
   */
  g_object_class_install_property (gobject_class, PROP_BLOCK_RATE,
      g_param_spec_double ("block-tokens-per-second", "Block tokens per second",
          "policy=cost: tokens a second the block's rounds have given (mean tokens a round over the median round's seconds)",
          0, G_MAXDOUBLE, 0, G_PARAM_READABLE | G_PARAM_STATIC_STRINGS));
  /**
   * GstDflashRouter:chain-tokens-per-second
   *
   * policy=cost: the same for the chain's rounds below match-min (its short
   * or empty proposals: mostly plain decoding steps).
   */
  g_object_class_install_property (gobject_class, PROP_CHAIN_RATE,
      g_param_spec_double ("chain-tokens-per-second", "Chain tokens per second",
          "policy=cost: tokens a second the chain's rounds below match-min have given (mean tokens a round over the median round's seconds)",
          0, G_MAXDOUBLE, 0, G_PARAM_READABLE | G_PARAM_STATIC_STRINGS));
  gst_element_class_set_static_metadata (element_class, "DFlash router",
      "Filter/Tensor", "Chooses between the block's and the chain drafter's proposals",
      "gst-dflash developers");
  gst_element_class_add_static_pad_template (element_class, &sink_template);
  gst_element_class_add_static_pad_template (element_class, &chain_template);
  gst_element_class_add_static_pad_template (element_class, &src_template);
  element_class->request_new_pad = GST_DEBUG_FUNCPTR (gst_dflash_router_request_new_pad);
  element_class->release_pad = GST_DEBUG_FUNCPTR (gst_dflash_router_release_pad);
  element_class->set_context = GST_DEBUG_FUNCPTR (gst_dflash_router_set_context);
  element_class->change_state = GST_DEBUG_FUNCPTR (gst_dflash_router_change_state);
  gst_type_mark_as_plugin_api (GST_TYPE_DFLASH_POLICY, 0);
}

static void
gst_dflash_router_init (GstDflashRouter *self)
{
  self->policy = DFL_ROUTE_MATCH;
  self->match_min = DEFAULT_MATCH_MIN;
  self->decide_first = TRUE;
  self->probe_every = DFL_ROUTE_COST_PROBE_EVERY;
  for (guint i = 0; i < G_N_ELEMENTS (self->cost); i++)
    dfl_route_cost_init (&self->cost[i], DFL_ROUTE_COST_PROBE_EVERY);
  self->pending = g_hash_table_new_full (NULL, NULL, NULL, g_free);
  g_mutex_init (&self->rounds_lock);
  self->rounds = g_hash_table_new_full (NULL, NULL, NULL, seq_rounds_free);

  self->block_pad = gst_pad_new_from_static_template (&sink_template, "sink");
  gst_pad_set_chain_function (self->block_pad, GST_DEBUG_FUNCPTR (gst_dflash_router_block_chain));
  gst_pad_set_event_function (self->block_pad, GST_DEBUG_FUNCPTR (gst_dflash_router_block_event));
  gst_pad_set_query_function (self->block_pad, GST_DEBUG_FUNCPTR (gst_dflash_router_block_query));
  gst_pad_set_iterate_internal_links_function (self->block_pad,
      GST_DEBUG_FUNCPTR (gst_dflash_router_iterate_internal_links));
  /* the proposal's caps pass on whole, and the verifier's pools serve the
   * block's branch */
  GST_OBJECT_FLAG_SET (self->block_pad, GST_PAD_FLAG_PROXY_CAPS | GST_PAD_FLAG_PROXY_ALLOCATION);
  gst_element_add_pad (GST_ELEMENT (self), self->block_pad);

  self->srcpad = gst_pad_new_from_static_template (&src_template, "src");
  gst_pad_set_event_function (self->srcpad, GST_DEBUG_FUNCPTR (gst_dflash_router_src_event));
  gst_pad_set_query_function (self->srcpad, GST_DEBUG_FUNCPTR (gst_dflash_router_src_query));
  gst_pad_set_iterate_internal_links_function (self->srcpad,
      GST_DEBUG_FUNCPTR (gst_dflash_router_iterate_internal_links));
  GST_OBJECT_FLAG_SET (self->srcpad, GST_PAD_FLAG_PROXY_CAPS);
  gst_element_add_pad (GST_ELEMENT (self), self->srcpad);
}
