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
 * soon as the chain's proposal for it arrives, as the core's own loop
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
 * branch sees the round, a thread hand-off less per round. Without a chain
 * pad nothing is decided first.
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

struct _GstDflashRouter {
  GstAggregator parent;
  GstAggregatorPad *block_pad, *chain_pad;
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
};

#define _do_init \
    GST_DEBUG_CATEGORY_INIT (gst_dflash_router_debug, "router", 0, "dflash router");
#define gst_dflash_router_parent_class parent_class
G_DEFINE_TYPE_WITH_CODE (GstDflashRouter, gst_dflash_router, GST_TYPE_AGGREGATOR, _do_init);
GST_ELEMENT_REGISTER_DEFINE (router, "router", GST_RANK_NONE, GST_TYPE_DFLASH_ROUTER);

static GstPadProbeReturn chain_arrived (GstPad *pad, GstPadProbeInfo *info, gpointer data);

/* The one chain pad, made and named by GstAggregator (a name other than the
 * template's: GstElement refuses a second request for a pad name that
 * exists before asking the element, and the refusal here says why), and
 * added by it to the element. */
static GstAggregatorPad *
gst_dflash_router_create_new_pad (GstAggregator *agg, GstPadTemplate *templ, const gchar *req_name,
                                  const GstCaps *caps)
{
  GstDflashRouter *self = GST_DFLASH_ROUTER (agg);
  GstAggregatorPad *pad;

  GST_OBJECT_LOCK (self);
  if (self->chain_pad)
    goto already_requested;
  GST_OBJECT_UNLOCK (self);
  if (!(pad = GST_AGGREGATOR_CLASS (parent_class)->create_new_pad (agg, templ, req_name, caps)))
    return NULL;
  GST_OBJECT_LOCK (self);
  self->chain_pad = pad;
  GST_OBJECT_UNLOCK (self);
  gst_pad_add_probe (GST_PAD (pad), GST_PAD_PROBE_TYPE_BUFFER, chain_arrived, self, NULL);
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
  if (pad == GST_PAD (self->chain_pad))
    self->chain_pad = NULL;
  GST_OBJECT_UNLOCK (self);
  GST_ELEMENT_CLASS (parent_class)->release_pad (element, pad);
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

/* The chain's proposal has come (its branch's thread, before the
 * aggregator queues it): route the round now, and tell the block's branch. */
static GstPadProbeReturn
chain_arrived (GstPad *pad, GstPadProbeInfo *info, gpointer data)
{
  GstDflashRouter *self = GST_DFLASH_ROUTER (data);
  GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER (info);
  GstDflashRoundMeta *cm = buf ? gst_buffer_get_dflash_round_meta (buf) : NULL;
  gboolean chain, decide_first;

  GST_OBJECT_LOCK (self);
  decide_first = self->decide_first;
  GST_OBJECT_UNLOCK (self);
  if (!cm || !decide_first)
    return GST_PAD_PROBE_OK;
  chain = choose_chain (self, cm, cm);
  GST_LOG_OBJECT (self, "sequence %u round %u: the %s's (decided first)", cm->sequence, cm->round,
                  chain ? "chain" : "block");
  gst_pad_push_event (GST_PAD (self->block_pad),
                      gst_dflash_route_event_new (cm->sequence, cm->round, chain));
  return GST_PAD_PROBE_OK;
}

static GstFlowReturn
gst_dflash_router_aggregate (GstAggregator *agg, gboolean timeout)
{
  GstDflashRouter *self = GST_DFLASH_ROUTER (agg);
  GstBuffer *block = gst_aggregator_pad_pop_buffer (self->block_pad);
  GstBuffer *chain = self->chain_pad ? gst_aggregator_pad_pop_buffer (self->chain_pad) : NULL;
  GstDflashRoundMeta *bm, *cm;
  GstBuffer *out;
  gboolean took_chain;

  if (!block) {
    gst_clear_buffer (&chain);
    if (gst_aggregator_pad_is_eos (self->block_pad))
      return GST_FLOW_EOS;
    return GST_AGGREGATOR_FLOW_NEED_DATA;
  }
  bm = gst_buffer_get_dflash_round_meta (block);
  cm = chain ? gst_buffer_get_dflash_round_meta (chain) : NULL;
  if (chain && (!bm || !cm || bm->sequence != cm->sequence || bm->round != cm->round))
    goto not_same_round;
  /* an empty block proposal of the chain's source: dflashblock skipped a
   * round routed to the chain first */
  took_chain = bm && bm->source == GST_DFLASH_SOURCE_CHAIN ? chain != NULL
               : choose_chain (self, bm, cm);
  if (took_chain) {
    out = chain;
    gst_buffer_unref (block);
  } else {
    out = block;
    gst_clear_buffer (&chain);
  }
  GST_OBJECT_LOCK (self);
  if (took_chain)
    self->chain_rounds++;
  else
    self->block_rounds++;
  GST_OBJECT_UNLOCK (self);
  return gst_aggregator_finish_buffer (agg, out);

  /* ERRORS */
not_same_round:
  {
    GST_ELEMENT_ERROR (self, STREAM, FAILED,
        ("the block's proposal and the chain's are not of the same round"),
        ("block: sequence %u round %u; chain: sequence %u round %u", bm ? bm->sequence : 0,
         bm ? bm->round : 0, cm ? cm->sequence : 0, cm ? cm->round : 0));
    gst_buffer_unref (block);
    gst_buffer_unref (chain);
    return GST_FLOW_ERROR;
  }
}

/* The block's caps: the model, and whether the policy can run on it. */
static gboolean
check_policy (GstDflashRouter *self, GstAggregatorPad *pad)
{
  DflRoute policy;
  gboolean decide_first;
  const char *drafter;

  GST_OBJECT_LOCK (self);
  policy = self->policy;
  decide_first = self->decide_first;
  GST_OBJECT_UNLOCK (self);
  if (!self->model)
    gst_dflash_model_find (GST_ELEMENT (self), GST_PAD (pad), &self->model);
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

static gboolean
gst_dflash_router_sink_event (GstAggregator *agg, GstAggregatorPad *pad, GstEvent *event)
{
  GstDflashRouter *self = GST_DFLASH_ROUTER (agg);

  if (GST_EVENT_TYPE (event) == GST_EVENT_CAPS && pad == self->block_pad
      && !check_policy (self, pad)) {
    gst_event_unref (event);
    return FALSE;
  }
  return GST_AGGREGATOR_CLASS (parent_class)->sink_event (agg, pad, event);
}

static GstFlowReturn
gst_dflash_router_update_src_caps (GstAggregator *agg, GstCaps *downstream, GstCaps **ret)
{
  GstCaps *block = gst_pad_get_current_caps (GST_PAD (GST_DFLASH_ROUTER (agg)->block_pad));

  if (!block)
    return GST_AGGREGATOR_FLOW_NEED_DATA;
  *ret = gst_caps_intersect (block, downstream);
  gst_caps_unref (block);
  return GST_FLOW_OK;
}

/* The verdict goes up the block's branch alone: tapsource must hear it once.
 * So does a seek: tapsource is the loop's one source, and if it takes the
 * seek its flush reaches both branches through the tee, which GstAggregator
 * handles. GstAggregator's own seek flushes downstream and stops its task
 * first, and where nothing upstream seeks (tapsource refuses: a generator)
 * it never starts the task again, so the loop stalled for good. */
static gboolean
gst_dflash_router_src_event (GstAggregator *agg, GstEvent *event)
{
  GstDflashRouter *self = GST_DFLASH_ROUTER (agg);

  if (GST_EVENT_TYPE (event) == GST_EVENT_CUSTOM_UPSTREAM
      && gst_event_has_name (event, GST_DFLASH_VERDICT_EVENT)) {
    cost_observe (self, event);
    return gst_pad_push_event (GST_PAD (self->block_pad), event);
  }
  if (GST_EVENT_TYPE (event) == GST_EVENT_SEEK)
    return gst_pad_push_event (GST_PAD (self->block_pad), event);
  return GST_AGGREGATOR_CLASS (parent_class)->src_event (agg, event);
}

/* dflashblock asks, on the block's branch, whether it should wait for
 * each round's route. */
static gboolean
gst_dflash_router_sink_query (GstAggregator *agg, GstAggregatorPad *pad, GstQuery *query)
{
  GstDflashRouter *self = GST_DFLASH_ROUTER (agg);

  if (gst_dflash_is_route_query (query) && pad == self->block_pad) {
    gboolean first;
    GST_OBJECT_LOCK (self);
    first = self->decide_first && self->chain_pad
        && gst_pad_is_linked (GST_PAD (self->chain_pad));
    GST_OBJECT_UNLOCK (self);
    gst_dflash_route_query_set (query, first);
    return TRUE;
  }
  return GST_AGGREGATOR_CLASS (parent_class)->sink_query (agg, pad, query);
}

static gboolean
gst_dflash_router_src_query (GstAggregator *agg, GstQuery *query)
{
  GstDflashRouter *self = GST_DFLASH_ROUTER (agg);

  if (GST_QUERY_TYPE (query) == GST_QUERY_CONTEXT) {
    if (gst_dflash_model_handle_context_query (GST_ELEMENT (self), query, self->model))
      return TRUE;
    return gst_pad_peer_query (GST_PAD (self->block_pad), query);
  }
  return GST_AGGREGATOR_CLASS (parent_class)->src_query (agg, query);
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

static gboolean
gst_dflash_router_start (GstAggregator *agg)
{
  GstDflashRouter *self = GST_DFLASH_ROUTER (agg);
  g_autofree char *path = NULL;
  g_autoptr (GError) error = NULL;

  /* the cost figures stay: they are the machine's, not this run's */
  GST_OBJECT_LOCK (self);
  self->block_rounds = self->chain_rounds = 0;
  g_hash_table_remove_all (self->pending);
  path = g_strdup (self->figures_file);
  GST_OBJECT_UNLOCK (self);
  /* a file that cannot be used costs this run its head start, no more:
   * said on the bus, the router goes on with the figures it has */
  if (path && *path && !read_figures (self, path, &error))
    GST_ELEMENT_WARNING (self, RESOURCE, READ,
                         ("figures-file %s: %s; going on without its figures", path,
                          error->message), (NULL));
  return TRUE;
}

static gboolean
gst_dflash_router_stop (GstAggregator *agg)
{
  GstDflashRouter *self = GST_DFLASH_ROUTER (agg);
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
  return TRUE;
}

/* A flush drops the rounds in flight: their verdicts will not come. */
static GstFlowReturn
gst_dflash_router_flush (GstAggregator *agg)
{
  GstDflashRouter *self = GST_DFLASH_ROUTER (agg);

  GST_OBJECT_LOCK (self);
  g_hash_table_remove_all (self->pending);
  GST_OBJECT_UNLOCK (self);
  return GST_FLOW_OK;
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
  G_OBJECT_CLASS (parent_class)->finalize (object);
}

static void
gst_dflash_router_class_init (GstDflashRouterClass *klass)
{
  GObjectClass *gobject_class = G_OBJECT_CLASS (klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS (klass);
  GstAggregatorClass *agg_class = GST_AGGREGATOR_CLASS (klass);

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
  gst_element_class_add_static_pad_template_with_gtype (element_class, &sink_template, GST_TYPE_AGGREGATOR_PAD);
  gst_element_class_add_static_pad_template_with_gtype (element_class, &chain_template, GST_TYPE_AGGREGATOR_PAD);
  gst_element_class_add_static_pad_template_with_gtype (element_class, &src_template, GST_TYPE_AGGREGATOR_PAD);
  element_class->release_pad = GST_DEBUG_FUNCPTR (gst_dflash_router_release_pad);
  element_class->set_context = GST_DEBUG_FUNCPTR (gst_dflash_router_set_context);
  agg_class->create_new_pad = GST_DEBUG_FUNCPTR (gst_dflash_router_create_new_pad);
  agg_class->aggregate = GST_DEBUG_FUNCPTR (gst_dflash_router_aggregate);
  agg_class->sink_event = GST_DEBUG_FUNCPTR (gst_dflash_router_sink_event);
  agg_class->src_event = GST_DEBUG_FUNCPTR (gst_dflash_router_src_event);
  agg_class->src_query = GST_DEBUG_FUNCPTR (gst_dflash_router_src_query);
  agg_class->sink_query = GST_DEBUG_FUNCPTR (gst_dflash_router_sink_query);
  agg_class->start = GST_DEBUG_FUNCPTR (gst_dflash_router_start);
  agg_class->stop = GST_DEBUG_FUNCPTR (gst_dflash_router_stop);
  agg_class->flush = GST_DEBUG_FUNCPTR (gst_dflash_router_flush);
  agg_class->update_src_caps = GST_DEBUG_FUNCPTR (gst_dflash_router_update_src_caps);
  gst_type_mark_as_plugin_api (GST_TYPE_DFLASH_POLICY, 0);
}

static void
gst_dflash_router_init (GstDflashRouter *self)
{
  GstPadTemplate *templ = gst_element_class_get_pad_template (GST_ELEMENT_GET_CLASS (self), "sink");

  self->policy = DFL_ROUTE_MATCH;
  self->match_min = DEFAULT_MATCH_MIN;
  self->decide_first = TRUE;
  self->probe_every = DFL_ROUTE_COST_PROBE_EVERY;
  for (guint i = 0; i < G_N_ELEMENTS (self->cost); i++)
    dfl_route_cost_init (&self->cost[i], DFL_ROUTE_COST_PROBE_EVERY);
  self->pending = g_hash_table_new_full (NULL, NULL, NULL, g_free);
  self->block_pad = g_object_new (GST_TYPE_AGGREGATOR_PAD, "name", "sink", "direction",
                                  GST_PAD_SINK, "template", templ, NULL);
  gst_element_add_pad (GST_ELEMENT (self), GST_PAD (self->block_pad));
}
