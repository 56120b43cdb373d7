/* gst-dflash — the base of the one-in, one-out stages of the loop. */
#include "gstdflashfilter.h"

#include "gstdflashelement.h"

GST_DEBUG_CATEGORY_STATIC (gst_dflash_filter_debug);
#define GST_CAT_DEFAULT gst_dflash_filter_debug

enum {
  PROP_0,
  PROP_BACKEND,
  PROP_BUSY_TIME,
};

typedef struct {
  GstPad *sinkpad, *srcpad;
  GstDflashModel *model;
  GstDflashBackend backend;   /* the property (object lock) */
  GstDflashBackend active;    /* where it runs, once the caps are set */
  GstDflashDevice *device;
  guint64 busy_ns;            /* the busy-time property (object lock) */
  int batch_limit;            /* the property (object lock) */
  /* Batching (a stage with process_batch, batch-limit above 1, from
   * the start): the sink queues rounds and serialized events; a task on the
   * src pad takes them. `busy` while the task works on what it took;
   * `flow` the last pass's, handed back to upstream's next push. */
  gboolean batching;
  int batch_max;
  GMutex lock;
  GCond cond;
  GQueue queue;
  gboolean flushing, busy;
  GstFlowReturn flow;
  /* the last pass took one round, of this sequence: its next round, with
   * nothing else waiting, is processed in the streaming thread (one
   * sequence alone pays no hand-off to the task) */
  gboolean has_last;
  guint last_sequence;
  /* the drafter's passes of several sequences (gst_dflash_filter_draft_
   * batch), for the bound weights it was made for; `no_batch` once the
   * device refused one */
  DflDraftBatch *draft_batch;
  DflDrafterWeights *draft_batch_weights;
  gboolean no_batch;
  /* the batches and max-batch figures (object lock) */
  guint64 batches;
  guint max_batch;
} GstDflashFilterPrivate;

G_DEFINE_ABSTRACT_TYPE_WITH_CODE (GstDflashFilter, gst_dflash_filter, GST_TYPE_ELEMENT,
    G_ADD_PRIVATE (GstDflashFilter)
    GST_DEBUG_CATEGORY_INIT (gst_dflash_filter_debug, "dflashfilter", 0, "dflash stage base"));

#define PRIV(f) ((GstDflashFilterPrivate *) gst_dflash_filter_get_instance_private (f))

/* A round's drafting time onto its output. */
static void
account (GstDflashFilter *filter, GstBuffer *out, guint64 spent_ns)
{
  GstDflashRoundMeta *out_meta;

  /* the round's drafting time, for the verifier's figures */
  if (out && (out_meta = gst_buffer_get_dflash_round_meta (out)))
    out_meta->draft_ns += spent_ns;
}

static gboolean
is_round (GstDflashFilter *filter, GstBuffer *in, GstDflashRoundMeta **meta)
{
  *meta = gst_buffer_get_dflash_round_meta (in);
  if (*meta && PRIV (filter)->model)
    return TRUE;
  GST_ELEMENT_ERROR (filter, STREAM, FORMAT,
      ("a buffer without a dflash round: it must come from tapsource"),
      ("%s", *meta ? "no dflash model: no caps came before the buffer"
       : "the buffer carries no GstDflashRoundMeta"));
  return FALSE;
}

/* The rounds in[0 … n) processed (one by process, several by
 * process_batch) and pushed in order; they are unreffed. */
static GstFlowReturn
process_and_push (GstDflashFilter *filter, GstBuffer **in, guint n)
{
  GstDflashFilterPrivate *p = PRIV (filter);
  GstDflashFilterClass *klass = GST_DFLASH_FILTER_GET_CLASS (filter);
  GstDflashRoundMeta *meta[GST_DFLASH_FILTER_MAX_BATCH];
  GstBuffer *out[GST_DFLASH_FILTER_MAX_BATCH] = { NULL };
  gint64 t0 = g_get_monotonic_time ();
  GstFlowReturn ret = GST_FLOW_OK;
  guint64 spent;

  g_assert (n >= 1 && n <= GST_DFLASH_FILTER_MAX_BATCH);
  for (guint i = 0; i < n; i++)
    if (!is_round (filter, in[i], &meta[i]))
      ret = GST_FLOW_ERROR;
  if (ret == GST_FLOW_OK)
    ret = n == 1 ? klass->process (filter, in[0], meta[0], &out[0])
                 : klass->process_batch (filter, in, meta, n, out);
  spent = (g_get_monotonic_time () - t0) * 1000;
  for (guint i = 0; i < n; i++)
    gst_buffer_unref (in[i]);
  if (ret != GST_FLOW_OK) {
    for (guint i = 0; i < n; i++)
      gst_clear_buffer (&out[i]);
    return ret;
  }
  GST_OBJECT_LOCK (filter);
  p->busy_ns += spent;
  GST_OBJECT_UNLOCK (filter);
  /* each round of a batch waited for all of it, but drafted a share */
  for (guint i = 0; i < n; i++)
    account (filter, out[i], spent / n);
  for (guint i = 0; i < n; i++) {
    if (ret == GST_FLOW_OK)
      ret = gst_pad_push (p->srcpad, out[i]);
    else
      gst_buffer_unref (out[i]);
  }
  return ret;
}

/* A pass (the task's, or a round processed in the streaming thread) is
 * over: its flow kept for upstream's next push, the task woken. */
static void
pass_done (GstDflashFilterPrivate *p, GstFlowReturn ret)
{
  g_mutex_lock (&p->lock);
  p->busy = FALSE;
  if (ret != GST_FLOW_OK)
    p->flow = ret;
  g_cond_broadcast (&p->cond);
  g_mutex_unlock (&p->lock);
}

static GstFlowReturn
chain (GstPad *pad, GstObject *parent, GstBuffer *in)
{
  GstDflashFilter *filter = GST_DFLASH_FILTER (parent);
  GstDflashFilterPrivate *p = PRIV (filter);
  GstDflashRoundMeta *meta = gst_buffer_get_dflash_round_meta (in);
  GstFlowReturn ret;
  gboolean inline_pass;

  if (!p->batching)
    return process_and_push (filter, &in, 1);
  /* for the task, unless the sequence runs alone (the last pass was its
   * round alone and nothing waits): then here, without the hand-off; the
   * last pass's flow comes back */
  g_mutex_lock (&p->lock);
  ret = p->flushing ? GST_FLOW_FLUSHING : p->flow;
  inline_pass = ret == GST_FLOW_OK && !p->busy && g_queue_is_empty (&p->queue) && meta
                && p->has_last && p->last_sequence == meta->sequence;
  if (inline_pass) {
    p->busy = TRUE;
  } else if (ret == GST_FLOW_OK) {
    g_queue_push_tail (&p->queue, in);
    in = NULL;
    g_cond_broadcast (&p->cond);
  }
  g_mutex_unlock (&p->lock);
  if (inline_pass) {
    ret = process_and_push (filter, &in, 1);
    pass_done (p, ret);
    return ret;
  }
  gst_clear_buffer (&in);
  return ret;
}

static void
clear_queue (GstDflashFilterPrivate *p)
{
  GstMiniObject *o;

  while ((o = g_queue_pop_head (&p->queue)))
    gst_mini_object_unref (o);
}

/* Whether `buf` is a round of a sequence among rounds[0 … n). */
static gboolean
same_sequence (GstBuffer **rounds, guint n, GstBuffer *buf)
{
  GstDflashRoundMeta *m = gst_buffer_get_dflash_round_meta (buf), *o;

  for (guint i = 0; m && i < n; i++)
    if ((o = gst_buffer_get_dflash_round_meta (rounds[i])) && o->sequence == m->sequence)
      return TRUE;
  return FALSE;
}

/* The task on the src pad: waits for what upstream queued; an event goes
 * on in its place; the rounds queued before it, as many as wait (at most
 * batch-limit; it never waits for more), are processed together. */
static void
batch_loop (GstDflashFilter *filter)
{
  GstDflashFilterPrivate *p = PRIV (filter);
  GstBuffer *rounds[GST_DFLASH_FILTER_MAX_BATCH];
  GstMiniObject *head;
  GstFlowReturn ret;
  guint n = 0;

  g_mutex_lock (&p->lock);
  while (!p->flushing && (p->busy || g_queue_is_empty (&p->queue)))
    g_cond_wait (&p->cond, &p->lock);
  if (p->flushing)
    goto flushing;
  p->busy = TRUE;
  head = g_queue_pop_head (&p->queue);
  if (GST_IS_EVENT (head)) {
    g_mutex_unlock (&p->lock);
    gst_pad_event_default (p->sinkpad, GST_OBJECT (filter), GST_EVENT (head));
    ret = GST_FLOW_OK;
  } else {
    rounds[n++] = GST_BUFFER (head);
    /* the rounds that follow, up to an event or a second round of a
     * sequence already taken */
    while (n < (guint) p->batch_max && !g_queue_is_empty (&p->queue)
           && GST_IS_BUFFER (g_queue_peek_head (&p->queue))
           && !same_sequence (rounds, n, g_queue_peek_head (&p->queue)))
      rounds[n++] = g_queue_pop_head (&p->queue);
    {
      GstDflashRoundMeta *m = gst_buffer_get_dflash_round_meta (rounds[0]);
      p->has_last = n == 1 && m;
      p->last_sequence = m ? m->sequence : 0;
    }
    g_mutex_unlock (&p->lock);
    GST_LOG_OBJECT (filter, "%u rounds in one pass", n);
    ret = process_and_push (filter, rounds, n);
  }
  pass_done (p, ret);
  if (ret != GST_FLOW_OK)
    goto paused;
  return;

flushing:
  {
    g_mutex_unlock (&p->lock);
    GST_DEBUG_OBJECT (filter, "flushing: the task pauses");
    gst_pad_pause_task (p->srcpad);
    return;
  }
paused:
  {
    GST_DEBUG_OBJECT (filter, "the task pauses: %s", gst_flow_get_name (ret));
    if (ret == GST_FLOW_EOS || ret < GST_FLOW_EOS) {
      /* downstream ended, or the stream failed (an error of ours is
       * posted where it happened; a refused format is ours to post) */
      if (ret == GST_FLOW_NOT_NEGOTIATED)
        GST_ELEMENT_FLOW_ERROR (filter, ret);
      gst_pad_push_event (p->srcpad, gst_event_new_eos ());
    }
    gst_pad_pause_task (p->srcpad);
  }
}

/* Batching is decided when the src pad activates (the stage starts): the
 * task runs while it is active, stopped (woken first) before it goes. */
static gboolean
src_activate_mode (GstPad *pad, GstObject *parent, GstPadMode mode, gboolean active)
{
  GstDflashFilter *filter = GST_DFLASH_FILTER (parent);
  GstDflashFilterPrivate *p = PRIV (filter);

  if (mode != GST_PAD_MODE_PUSH)
    return FALSE;
  if (active) {
    GST_OBJECT_LOCK (filter);
    p->batch_max = MIN (p->batch_limit, GST_DFLASH_FILTER_MAX_BATCH);
    GST_OBJECT_UNLOCK (filter);
    p->batching = GST_DFLASH_FILTER_GET_CLASS (filter)->process_batch && p->batch_max > 1;
  }
  g_mutex_lock (&p->lock);
  p->flushing = !active;
  p->flow = GST_FLOW_OK;
  p->has_last = FALSE;
  if (!active) {
    clear_queue (p);
    g_cond_broadcast (&p->cond);
  }
  g_mutex_unlock (&p->lock);
  if (!p->batching)
    return TRUE;
  if (active) {
    GST_DEBUG_OBJECT (filter, "batching up to %d rounds a pass", p->batch_max);
    return gst_pad_start_task (pad, (GstTaskFunction) batch_loop, filter, NULL);
  }
  return gst_pad_stop_task (pad);
}

/* A serialized event while batching: in order with the rounds (the task
 * hands it on). FALSE while flushing. */
static gboolean
queue_event (GstDflashFilter *filter, GstEvent *event)
{
  GstDflashFilterPrivate *p = PRIV (filter);

  g_mutex_lock (&p->lock);
  if (p->flushing) {
    g_mutex_unlock (&p->lock);
    gst_event_unref (event);
    return FALSE;
  }
  g_queue_push_tail (&p->queue, event);
  g_cond_broadcast (&p->cond);
  g_mutex_unlock (&p->lock);
  return TRUE;
}

/* While batching: until the task has handed on every round queued (new
 * caps apply to the rounds after them). FALSE while flushing. */
static gboolean
drain (GstDflashFilter *filter)
{
  GstDflashFilterPrivate *p = PRIV (filter);
  gboolean ok;

  g_mutex_lock (&p->lock);
  while (!p->flushing && (p->busy || !g_queue_is_empty (&p->queue)))
    g_cond_wait (&p->cond, &p->lock);
  ok = !p->flushing;
  g_mutex_unlock (&p->lock);
  return ok;
}

/* The backend property, read under the object lock. */
static GstDflashBackend
backend_property (GstDflashFilter *filter)
{
  GstDflashBackend b;

  GST_OBJECT_LOCK (filter);
  b = PRIV (filter)->backend;
  GST_OBJECT_UNLOCK (filter);
  return b;
}

static gboolean
is_tensor_caps (const GstCaps *caps)
{
  const GstStructure *st;

  if (!caps || gst_caps_is_empty (caps) || gst_caps_is_any (caps))
    return FALSE;
  st = gst_caps_get_structure (caps, 0);
  return gst_structure_has_name (st, GST_DFLASH_TAPS_CAPS)
         || gst_structure_has_name (st, GST_DFLASH_CONTEXT_CAPS)
         || gst_structure_has_name (st, GST_DFLASH_BLOCK_CAPS);
}

/* The memories the sink takes with the backend property as it is. */
static guint
sink_backends (GstDflashFilter *filter)
{
  GstDflashFilterClass *klass = GST_DFLASH_FILTER_GET_CLASS (filter);
  GstDflashBackend b = backend_property (filter);

  /* a back end this build lacks links as auto would, and is refused by
   * name when the element starts ("backend=cuda is not available in this
   * build"), not by a link that fails without saying why */
  if (klass->sink_any_memory || b == GST_DFLASH_BACKEND_AUTO || !gst_dflash_backend_built (b))
    return GST_DFLASH_BACKENDS_ALL;
  if (b == GST_DFLASH_BACKEND_VULKAN && klass->vulkan_takes_system)
    return 1u << GST_DFLASH_BACKEND_VULKAN | 1u << GST_DFLASH_BACKEND_CPU;
  return 1u << b;
}

static gboolean
takes_backend (guint backends, GstDflashBackend b)
{
  return (backends & (1u << b)) != 0;
}

/* The bytes of an input tensor where its caps fix them: a block's rows
 * and logits. Taps and context rows vary from round to round: 0. */
static gsize
fixed_tensor_bytes (const GstCaps *caps)
{
  const GstStructure *st = gst_caps_get_structure (caps, 0);
  int hidden, block, width;

  if (!gst_structure_has_name (st, GST_DFLASH_BLOCK_CAPS)
      || !gst_structure_get_int (st, "hidden", &hidden)
      || !gst_structure_get_int (st, "block", &block)
      || !gst_structure_get_int (st, "width", &width))
    return 0;
  return (gsize) (block - 1) * (hidden + width) * sizeof (float);
}

/* A producer of device tensors asks where to put them: a pool of the
 * stage's device, of the size the caps fix. Nothing is proposed for other
 * memory, or for tensors whose size varies (the producer then uses its
 * own); the query does not go on downstream, where the caps are others. */
static gboolean
propose_allocation (GstDflashFilter *filter, GstQuery *query)
{
  GstDflashFilterPrivate *p = PRIV (filter);
  GstBufferPool *pool;
  GstCaps *caps;
  gboolean need_pool;
  gsize size;

  gst_query_parse_allocation (query, &caps, &need_pool);
  if (!caps || gst_caps_is_empty (caps) || !p->device
      || gst_dflash_caps_backend (caps) != gst_dflash_device_backend (p->device)
      || !(size = fixed_tensor_bytes (caps)))
    return FALSE;
  if (need_pool) {
    if (!(pool = gst_dflash_device_pool_propose (p->device, size)))
      return FALSE;
    gst_query_add_allocation_pool (query, pool, size, 0, 0);
    gst_object_unref (pool);
  }
  gst_query_add_allocation_param (query, gst_dflash_device_allocator (p->device), NULL);
  GST_DEBUG_OBJECT (filter, "proposed %s tensors of %" G_GSIZE_FORMAT " bytes",
                    gst_dflash_device_describe (p->device), size);
  return TRUE;
}

static gboolean
sink_query (GstPad *pad, GstObject *parent, GstQuery *query)
{
  GstDflashFilter *filter = GST_DFLASH_FILTER (parent);
  GstDflashFilterPrivate *p = PRIV (filter);

  switch (GST_QUERY_TYPE (query)) {
    case GST_QUERY_CAPS: {
      /* the template's caps in the memories the backend takes */
      GstCaps *templ = gst_pad_get_pad_template_caps (pad), *caps = gst_caps_new_empty (), *filt;
      guint backends = sink_backends (filter);
      for (guint i = 0; i < gst_caps_get_size (templ); i++) {
        GstCaps *one = gst_caps_copy_nth (templ, i);
        if (takes_backend (backends, gst_dflash_caps_backend (one)))
          caps = gst_caps_merge (caps, one);
        else
          gst_caps_unref (one);
      }
      gst_caps_unref (templ);
      gst_query_parse_caps (query, &filt);
      if (filt) {
        GstCaps *tmp = gst_caps_intersect_full (filt, caps, GST_CAPS_INTERSECT_FIRST);
        gst_caps_unref (caps);
        caps = tmp;
      }
      gst_query_set_caps_result (query, caps);
      gst_caps_unref (caps);
      return TRUE;
    }
    case GST_QUERY_CONTEXT:
      if (gst_dflash_device_handle_context_query (GST_ELEMENT (filter), query, p->device))
        return TRUE;
      break;
    case GST_QUERY_ALLOCATION:
      return propose_allocation (filter, query);
    default:
      break;
  }
  return gst_pad_query_default (pad, parent, query);
}

/* Open (or find) the device of `backend`; FALSE with an element error. */
static gboolean
ensure_device (GstDflashFilter *filter, GstDflashBackend backend)
{
  GstDflashFilterPrivate *p = PRIV (filter);
  g_autoptr (GError) error = NULL;

  if (backend != GST_DFLASH_BACKEND_CUDA && backend != GST_DFLASH_BACKEND_VULKAN)
    return TRUE;
  if (p->device && gst_dflash_device_backend (p->device) != backend)
    gst_clear_object (&p->device);
  if (!gst_dflash_device_ensure (GST_ELEMENT (filter), p->sinkpad, backend, &p->device, &error))
    goto no_device;
  return TRUE;

  /* ERRORS */
no_device:
  {
    GST_ELEMENT_ERROR (filter, RESOURCE, NOT_FOUND, ("%s", error->message),
        ("no %s device for the stage", gst_dflash_backend_nick (backend)));
    return FALSE;
  }
}

/* The input caps: find the model, where the stage runs, and the caps it
 * outputs. */
static gboolean
set_sink_caps (GstDflashFilter *filter, GstCaps *caps)
{
  GstDflashFilterPrivate *p = PRIV (filter);
  GstDflashFilterClass *klass = GST_DFLASH_FILTER_GET_CLASS (filter);
  g_autoptr (GString) why = g_string_new (NULL);
  GstDflashBackend backend = backend_property (filter);
  GstCaps *out;
  gboolean ok;

  if (!gst_dflash_model_find (GST_ELEMENT (filter), p->sinkpad, &p->model))
    goto no_model;
  /* where the stage runs: forced, or the memory upstream offers */
  if (klass->sink_any_memory)
    p->active = GST_DFLASH_BACKEND_CPU;
  else if (backend != GST_DFLASH_BACKEND_AUTO)
    p->active = backend;
  else
    p->active = gst_dflash_caps_backend (caps);
  if (!ensure_device (filter, p->active))
    return FALSE;
  if (!(out = klass->src_caps (filter, caps, why)))
    goto refused;
  /* a tensor leaves in the memory of the device the stage ran on */
  if (is_tensor_caps (out) && p->active != GST_DFLASH_BACKEND_CPU)
    gst_caps_set_features (out, 0,
        gst_caps_features_new (gst_dflash_backend_caps_feature (p->active), NULL));
  if (gst_pad_is_linked (p->srcpad) && !gst_pad_peer_query_accept_caps (p->srcpad, out))
    goto not_accepted;
  ok = gst_pad_set_caps (p->srcpad, out);
  gst_caps_unref (out);
  return ok;

  /* ERRORS */
no_model:
  {
    gst_dflash_element_error_no_model (GST_ELEMENT (filter));
    return FALSE;
  }
refused:
  {
    GST_ELEMENT_ERROR (filter, CORE, NEGOTIATION, ("%s", why->str),
        ("input caps %" GST_PTR_FORMAT, caps));
    return FALSE;
  }
not_accepted:
  {
    gst_dflash_caps_explain_refusal (p->srcpad, out, why);
    GST_ELEMENT_ERROR (filter, CORE, NEGOTIATION, ("%s", why->str),
        ("downstream refused %" GST_PTR_FORMAT, out));
    gst_caps_unref (out);
    return FALSE;
  }
}

static gboolean
sink_event (GstPad *pad, GstObject *parent, GstEvent *event)
{
  GstDflashFilter *filter = GST_DFLASH_FILTER (parent);
  GstDflashFilterPrivate *p = PRIV (filter);
  GstDflashFilterClass *klass = GST_DFLASH_FILTER_GET_CLASS (filter);
  gboolean ret;

  switch (GST_EVENT_TYPE (event)) {
    case GST_EVENT_CAPS: {
      GstCaps *caps;
      gboolean ok;
      if (p->batching && !drain (filter)) {
        gst_event_unref (event);
        return FALSE;
      }
      gst_event_parse_caps (event, &caps);
      ok = set_sink_caps (filter, caps);
      gst_event_unref (event);
      return ok;
    }
    case GST_EVENT_FLUSH_START:
      if (klass->unlock)
        klass->unlock (filter);
      if (!p->batching)
        break;
      /* downstream first, so a push the task waits in returns */
      ret = gst_pad_event_default (pad, parent, event);
      g_mutex_lock (&p->lock);
      p->flushing = TRUE;
      g_cond_broadcast (&p->cond);
      g_mutex_unlock (&p->lock);
      gst_pad_pause_task (p->srcpad);
      return ret;
    case GST_EVENT_FLUSH_STOP:
      if (p->batching) {
        g_mutex_lock (&p->lock);
        clear_queue (p);
        p->flushing = FALSE;
        p->flow = GST_FLOW_OK;
        p->has_last = FALSE;
        g_mutex_unlock (&p->lock);
      }
      if (klass->reset)
        klass->reset (filter);
      ret = gst_pad_event_default (pad, parent, event);
      if (p->batching)
        gst_pad_start_task (p->srcpad, (GstTaskFunction) batch_loop, filter, NULL);
      return ret;
    default:
      break;
  }
  if (p->batching && GST_EVENT_IS_SERIALIZED (event))
    return queue_event (filter, event);
  return gst_pad_event_default (pad, parent, event);
}

static gboolean
src_event (GstPad *pad, GstObject *parent, GstEvent *event)
{
  GstDflashFilter *filter = GST_DFLASH_FILTER (parent);
  GstDflashFilterClass *klass = GST_DFLASH_FILTER_GET_CLASS (filter);

  if (klass->src_event && klass->src_event (filter, event))
    return TRUE;
  return gst_pad_event_default (pad, parent, event);
}

static gboolean
src_query (GstPad *pad, GstObject *parent, GstQuery *query)
{
  GstDflashFilter *filter = GST_DFLASH_FILTER (parent);

  if (GST_QUERY_TYPE (query) == GST_QUERY_CONTEXT
      && (gst_dflash_model_handle_context_query (GST_ELEMENT (filter), query, PRIV (filter)->model)
          || gst_dflash_device_handle_context_query (GST_ELEMENT (filter), query,
                                                     PRIV (filter)->device)))
    return TRUE;
  return gst_pad_query_default (pad, parent, query);
}

static void
set_context (GstElement *element, GstContext *context)
{
  GstDflashFilterPrivate *p = PRIV (GST_DFLASH_FILTER (element));

  gst_dflash_model_handle_set_context (element, context, &p->model);
  gst_dflash_device_handle_set_context (element, context, GST_DFLASH_BACKEND_CUDA, &p->device);
  gst_dflash_device_handle_set_context (element, context, GST_DFLASH_BACKEND_VULKAN, &p->device);
  GST_ELEMENT_CLASS (gst_dflash_filter_parent_class)->set_context (element, context);
}

static GstStateChangeReturn
change_state (GstElement *element, GstStateChange transition)
{
  GstDflashFilter *filter = GST_DFLASH_FILTER (element);
  GstDflashFilterClass *klass = GST_DFLASH_FILTER_GET_CLASS (filter);
  GstDflashFilterPrivate *p = PRIV (filter);
  GstDflashBackend backend = backend_property (filter);
  GstStateChangeReturn ret;

  if (transition == GST_STATE_CHANGE_NULL_TO_READY) {
    if (!gst_dflash_element_check_backend_built (element, backend))
      return GST_STATE_CHANGE_FAILURE;
    if (klass->sink_any_memory
        && (backend == GST_DFLASH_BACKEND_CUDA || backend == GST_DFLASH_BACKEND_VULKAN))
      goto cpu_only;
  }
  /* a forced GPU finds its device when the stage starts: a machine
   * without one fails here, saying why */
  if (transition == GST_STATE_CHANGE_READY_TO_PAUSED && !klass->sink_any_memory
      && !ensure_device (filter, backend))
    return GST_STATE_CHANGE_FAILURE;
  /* a round waiting in process() must let the streaming thread go */
  if (transition == GST_STATE_CHANGE_PAUSED_TO_READY && klass->unlock)
    klass->unlock (filter);
  ret = GST_ELEMENT_CLASS (gst_dflash_filter_parent_class)->change_state (element, transition);
  if (transition == GST_STATE_CHANGE_PAUSED_TO_READY) {
    if (klass->reset)
      klass->reset (filter);
    /* a new start may have another model */
    g_clear_pointer (&p->draft_batch, dfl_draft_batch_free);
    p->draft_batch_weights = NULL;
    p->no_batch = FALSE;
  }
  if (transition == GST_STATE_CHANGE_READY_TO_NULL)
    gst_clear_object (&p->device);
  return ret;

  /* ERRORS */
cpu_only:
  {
    GST_ELEMENT_ERROR (filter, RESOURCE, SETTINGS,
        ("backend=%s: this stage runs on the CPU only (it reads token ids; it takes rounds in "
         "any memory)", gst_dflash_backend_nick (backend)), (NULL));
    return GST_STATE_CHANGE_FAILURE;
  }
}

static void
finalize (GObject *object)
{
  GstDflashFilterPrivate *p = PRIV (GST_DFLASH_FILTER (object));

  clear_queue (p);
  g_clear_pointer (&p->draft_batch, dfl_draft_batch_free);
  g_mutex_clear (&p->lock);
  g_cond_clear (&p->cond);
  g_clear_object (&PRIV (GST_DFLASH_FILTER (object))->model);
  gst_clear_object (&PRIV (GST_DFLASH_FILTER (object))->device);
  G_OBJECT_CLASS (gst_dflash_filter_parent_class)->finalize (object);
}

static void
gst_dflash_filter_init (GstDflashFilter *filter)
{
  GstDflashFilterPrivate *p = PRIV (filter);

  p->batch_limit = 1;
  g_mutex_init (&p->lock);
  g_cond_init (&p->cond);
  g_queue_init (&p->queue);
}

/* The pads come from the stage's own templates, which its class only holds
 * once the instance is of the final type: hence constructed, not init. */
static void
constructed (GObject *object)
{
  GstDflashFilter *filter = GST_DFLASH_FILTER (object);
  GstDflashFilterPrivate *p = PRIV (filter);
  GstElementClass *klass = GST_ELEMENT_GET_CLASS (filter);

  G_OBJECT_CLASS (gst_dflash_filter_parent_class)->constructed (object);

  p->sinkpad = gst_pad_new_from_template (gst_element_class_get_pad_template (klass, "sink"), "sink");
  gst_pad_set_chain_function (p->sinkpad, GST_DEBUG_FUNCPTR (chain));
  gst_pad_set_event_function (p->sinkpad, GST_DEBUG_FUNCPTR (sink_event));
  gst_pad_set_query_function (p->sinkpad, GST_DEBUG_FUNCPTR (sink_query));
  gst_element_add_pad (GST_ELEMENT (filter), p->sinkpad);
  p->srcpad = gst_pad_new_from_template (gst_element_class_get_pad_template (klass, "src"), "src");
  gst_pad_set_query_function (p->srcpad, GST_DEBUG_FUNCPTR (src_query));
  gst_pad_set_event_function (p->srcpad, GST_DEBUG_FUNCPTR (src_event));
  gst_pad_set_activatemode_function (p->srcpad, GST_DEBUG_FUNCPTR (src_activate_mode));
  gst_pad_use_fixed_caps (p->srcpad);
  gst_element_add_pad (GST_ELEMENT (filter), p->srcpad);
}

static void
gst_dflash_filter_class_init (GstDflashFilterClass *klass)
{
  GObjectClass *gobject_class = G_OBJECT_CLASS (klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS (klass);

  gobject_class->set_property = gst_dflash_field_set_property;
  gobject_class->get_property = gst_dflash_field_get_property;
  gobject_class->finalize = finalize;
  gobject_class->constructed = constructed;
  element_class->set_context = GST_DEBUG_FUNCPTR (set_context);
  element_class->change_state = GST_DEBUG_FUNCPTR (change_state);

  gst_dflash_install_backend_property (gobject_class, PROP_BACKEND,
      "Where the stage runs (auto: in the memory upstream offers; cpu, cuda, vulkan force one "
      "and take only its memory)",
      G_PRIVATE_OFFSET (GstDflashFilter, backend));
  gst_dflash_install_busy_time_property (gobject_class, PROP_BUSY_TIME,
      "Nanoseconds spent working on rounds so far",
      G_PRIVATE_OFFSET (GstDflashFilter, busy_ns));
}

void
gst_dflash_filter_class_install_batch_limit (GstDflashFilterClass *klass, guint prop_id,
                                             const char *blurb, const char *what)
{
  g_autofree char *batches = g_strdup_printf ("Passes that %s of several sequences together "
                                              "so far", what);

  /* the blurb is the stage's static string */
  gst_dflash_install_field_property (G_OBJECT_CLASS (klass), prop_id,
      g_param_spec_int ("batch-limit", "Batch limit", blurb, 1, GST_DFLASH_FILTER_MAX_BATCH, 1,
          G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY),
      G_PRIVATE_OFFSET (GstDflashFilter, batch_limit));
  gst_dflash_install_field_property (G_OBJECT_CLASS (klass), prop_id + 1,
      g_param_spec_uint64 ("batches", "Batches", batches, 0, G_MAXUINT64, 0,
          G_PARAM_READABLE | G_PARAM_STATIC_NAME | G_PARAM_STATIC_NICK),
      G_PRIVATE_OFFSET (GstDflashFilter, batches));
  gst_dflash_install_field_property (G_OBJECT_CLASS (klass), prop_id + 2,
      g_param_spec_uint ("max-batch", "Largest batch",
          "The most sequences of one such pass so far (0 before the first)", 0, G_MAXUINT, 0,
          G_PARAM_READABLE | G_PARAM_STATIC_STRINGS),
      G_PRIVATE_OFFSET (GstDflashFilter, max_batch));
}

void
gst_dflash_filter_count_batch (GstDflashFilter *filter, guint n)
{
  GstDflashFilterPrivate *p = PRIV (filter);

  GST_OBJECT_LOCK (filter);
  p->batches++;
  p->max_batch = MAX (p->max_batch, n);
  GST_OBJECT_UNLOCK (filter);
}

DflDraftBatch *
gst_dflash_filter_draft_batch (GstDflashFilter *filter, DflDraftCtx *ctx, int n)
{
  GstDflashFilterPrivate *p = PRIV (filter);
  DflDrafterWeights *w = dfl_draft_ctx_weights (ctx);
  g_autoptr (GError) error = NULL;

  if (p->no_batch)
    return NULL;
  if (p->draft_batch && p->draft_batch_weights == w
      && dfl_draft_batch_capacity (p->draft_batch) >= n)
    return p->draft_batch;
  g_clear_pointer (&p->draft_batch, dfl_draft_batch_free);
  p->draft_batch_weights = NULL;
  /* room for every pass of this run: the limit read when it started */
  if (!(p->draft_batch = dfl_draft_batch_new (w, MAX (n, p->batch_max), &error))) {
    p->no_batch = TRUE;
    GST_WARNING_OBJECT (filter, "the drafter cannot take several sequences in one pass here "
                        "(%s): one at a time from now on", error->message);
    return NULL;
  }
  p->draft_batch_weights = w;
  return p->draft_batch;
}

GstDflashModel *
gst_dflash_filter_model (GstDflashFilter *filter)
{
  return PRIV (filter)->model;
}

GstDflashBackend
gst_dflash_filter_backend (GstDflashFilter *filter)
{
  return PRIV (filter)->active;
}

GstDflashDevice *
gst_dflash_filter_device (GstDflashFilter *filter)
{
  return PRIV (filter)->device;
}

GstPad *
gst_dflash_filter_src_pad (GstDflashFilter *filter)
{
  return PRIV (filter)->srcpad;
}

static GstCaps *
template_caps (const char *structure)
{
  GstCaps *plain = gst_caps_from_string (structure);
  gboolean tensor = is_tensor_caps (plain);

  if (!tensor)
    return plain;
  gst_caps_unref (plain);
  return gst_dflash_tensor_caps (structure, GST_DFLASH_BACKENDS_ALL);
}

void
gst_dflash_filter_class_add_pads (GstDflashFilterClass *klass, const char *sink_caps,
                                  const char *src_caps)
{
  GstElementClass *element_class = GST_ELEMENT_CLASS (klass);
  GstCaps *sink = template_caps (sink_caps), *src = template_caps (src_caps);

  gst_element_class_add_pad_template (element_class,
      gst_pad_template_new ("sink", GST_PAD_SINK, GST_PAD_ALWAYS, sink));
  gst_element_class_add_pad_template (element_class,
      gst_pad_template_new ("src", GST_PAD_SRC, GST_PAD_ALWAYS, src));
  gst_caps_unref (sink);
  gst_caps_unref (src);
}

GstFlowReturn
gst_dflash_filter_round_failed (GstDflashFilter *filter, const char *what,
                                const GstDflashRoundMeta *meta, const GError *error)
{
  GST_ELEMENT_ERROR (filter, STREAM, FAILED, ("%s: %s", what,
          error ? error->message : "the sequence is not running"),
      ("sequence %u round %u", meta->sequence, meta->round));
  return GST_FLOW_ERROR;
}

const DflDrafterGeometry *
gst_dflash_filter_drafter_input (GstDflashFilter *filter, GstCaps *sink_caps, const char *name,
                                 GString *why)
{
  GstDflashModel *m = PRIV (filter)->model;
  const DflQwen3Config *c = dfl_target_config (gst_dflash_model_target (m));
  const DflDrafterGeometry *g = gst_dflash_model_geometry (m);
  g_autoptr (GstCaps) want = NULL;

  if (!g) {
    g_string_append (why, "the model has no drafter");
    return NULL;
  }
  want = gst_caps_new_simple (name, "hidden", G_TYPE_INT, c->hidden, "vocab", G_TYPE_INT,
                              c->vocab, "block", G_TYPE_INT, g->block, NULL);
  return gst_dflash_caps_agree (sink_caps, want, why) ? g : NULL;
}
