/* gst-dflash — the base of the one-in, one-out stages of the loop. */
#include "gstdflashfilter.h"

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
  GstDflashBackend backend;
  guint64 busy_ns;
} GstDflashFilterPrivate;

G_DEFINE_ABSTRACT_TYPE_WITH_CODE (GstDflashFilter, gst_dflash_filter, GST_TYPE_ELEMENT,
    G_ADD_PRIVATE (GstDflashFilter)
    GST_DEBUG_CATEGORY_INIT (gst_dflash_filter_debug, "dflashfilter", 0, "dflash stage base"));

#define PRIV(f) ((GstDflashFilterPrivate *) gst_dflash_filter_get_instance_private (f))

static GstFlowReturn
chain (GstPad *pad, GstObject *parent, GstBuffer *in)
{
  GstDflashFilter *filter = GST_DFLASH_FILTER (parent);
  GstDflashFilterPrivate *p = PRIV (filter);
  GstDflashRoundMeta *meta = gst_buffer_get_dflash_round_meta (in);
  GstBuffer *out = NULL;
  GstFlowReturn ret;
  gint64 t0 = g_get_monotonic_time ();
  guint64 spent;
  GstDflashRoundMeta *out_meta;

  if (!meta || !p->model) {
    GST_ELEMENT_ERROR (filter, STREAM, FORMAT,
        ("%s: a buffer without a dflash round (it must come from tapsource)",
         GST_ELEMENT_NAME (filter)), (NULL));
    gst_buffer_unref (in);
    return GST_FLOW_ERROR;
  }
  ret = GST_DFLASH_FILTER_GET_CLASS (filter)->process (filter, in, meta, &out);
  spent = (g_get_monotonic_time () - t0) * 1000;
  gst_buffer_unref (in);
  if (ret != GST_FLOW_OK)
    return ret;
  /* the round's drafting time, for the verifier's figures */
  if ((out_meta = gst_buffer_get_dflash_round_meta (out)))
    out_meta->draft_ns += spent;
  GST_OBJECT_LOCK (filter);
  p->busy_ns += spent;
  GST_OBJECT_UNLOCK (filter);
  return gst_pad_push (p->srcpad, out);
}

static gboolean
sink_event (GstPad *pad, GstObject *parent, GstEvent *event)
{
  GstDflashFilter *filter = GST_DFLASH_FILTER (parent);
  GstDflashFilterPrivate *p = PRIV (filter);

  switch (GST_EVENT_TYPE (event)) {
    case GST_EVENT_CAPS: {
      GstCaps *caps, *out;
      g_autoptr (GString) why = g_string_new (NULL);
      gboolean ok;
      gst_event_parse_caps (event, &caps);
      if (!gst_dflash_model_find (GST_ELEMENT (filter), p->sinkpad, &p->model)) {
        GST_ELEMENT_ERROR (filter, CORE, MISSING_PLUGIN,
            ("%s: no dflash model found: it needs a tapsource upstream (or a dflash.model context)",
             GST_ELEMENT_NAME (filter)), (NULL));
        gst_event_unref (event);
        return FALSE;
      }
      out = GST_DFLASH_FILTER_GET_CLASS (filter)->src_caps (filter, caps, why);
      gst_event_unref (event);
      if (!out) {
        GST_ELEMENT_ERROR (filter, CORE, NEGOTIATION,
            ("%s: %s", GST_ELEMENT_NAME (filter), why->str), (NULL));
        return FALSE;
      }
      ok = gst_pad_set_caps (p->srcpad, out);
      gst_caps_unref (out);
      return ok;
    }
    case GST_EVENT_FLUSH_STOP:
      if (GST_DFLASH_FILTER_GET_CLASS (filter)->reset)
        GST_DFLASH_FILTER_GET_CLASS (filter)->reset (filter);
      break;
    default:
      break;
  }
  return gst_pad_event_default (pad, parent, event);
}

static gboolean
src_query (GstPad *pad, GstObject *parent, GstQuery *query)
{
  GstDflashFilter *filter = GST_DFLASH_FILTER (parent);

  if (GST_QUERY_TYPE (query) == GST_QUERY_CONTEXT
      && gst_dflash_model_handle_context_query (GST_ELEMENT (filter), query, PRIV (filter)->model))
    return TRUE;
  return gst_pad_query_default (pad, parent, query);
}

static void
set_context (GstElement *element, GstContext *context)
{
  gst_dflash_model_handle_set_context (element, context, &PRIV (GST_DFLASH_FILTER (element))->model);
  GST_ELEMENT_CLASS (gst_dflash_filter_parent_class)->set_context (element, context);
}

static GstStateChangeReturn
change_state (GstElement *element, GstStateChange transition)
{
  GstDflashFilter *filter = GST_DFLASH_FILTER (element);
  g_autoptr (GError) error = NULL;
  GstStateChangeReturn ret;

  if (transition == GST_STATE_CHANGE_NULL_TO_READY
      && !gst_dflash_backend_check (element, PRIV (filter)->backend, &error)) {
    GST_ELEMENT_ERROR (filter, RESOURCE, SETTINGS, ("%s", error->message), (NULL));
    return GST_STATE_CHANGE_FAILURE;
  }
  ret = GST_ELEMENT_CLASS (gst_dflash_filter_parent_class)->change_state (element, transition);
  if (transition == GST_STATE_CHANGE_PAUSED_TO_READY && GST_DFLASH_FILTER_GET_CLASS (filter)->reset)
    GST_DFLASH_FILTER_GET_CLASS (filter)->reset (filter);
  return ret;
}

static void
set_property (GObject *object, guint prop_id, const GValue *value, GParamSpec *pspec)
{
  switch (prop_id) {
    case PROP_BACKEND:
      PRIV (GST_DFLASH_FILTER (object))->backend = g_value_get_enum (value);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
      break;
  }
}

static void
get_property (GObject *object, guint prop_id, GValue *value, GParamSpec *pspec)
{
  GstDflashFilterPrivate *p = PRIV (GST_DFLASH_FILTER (object));

  switch (prop_id) {
    case PROP_BACKEND:
      g_value_set_enum (value, p->backend);
      break;
    case PROP_BUSY_TIME:
      GST_OBJECT_LOCK (object);
      g_value_set_uint64 (value, p->busy_ns);
      GST_OBJECT_UNLOCK (object);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
      break;
  }
}

static void
finalize (GObject *object)
{
  g_clear_object (&PRIV (GST_DFLASH_FILTER (object))->model);
  G_OBJECT_CLASS (gst_dflash_filter_parent_class)->finalize (object);
}

static void
gst_dflash_filter_init (GstDflashFilter *filter)
{
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
  gst_element_add_pad (GST_ELEMENT (filter), p->sinkpad);
  p->srcpad = gst_pad_new_from_template (gst_element_class_get_pad_template (klass, "src"), "src");
  gst_pad_set_query_function (p->srcpad, GST_DEBUG_FUNCPTR (src_query));
  gst_pad_use_fixed_caps (p->srcpad);
  gst_element_add_pad (GST_ELEMENT (filter), p->srcpad);
}

static void
gst_dflash_filter_class_init (GstDflashFilterClass *klass)
{
  GObjectClass *gobject_class = G_OBJECT_CLASS (klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS (klass);

  gobject_class->set_property = set_property;
  gobject_class->get_property = get_property;
  gobject_class->finalize = finalize;
  gobject_class->constructed = constructed;
  element_class->set_context = GST_DEBUG_FUNCPTR (set_context);
  element_class->change_state = GST_DEBUG_FUNCPTR (change_state);

  g_object_class_install_property (gobject_class, PROP_BACKEND,
      g_param_spec_enum ("backend", "Backend",
          "Where the stage runs (auto: as the caps negotiate; cpu, cuda, vulkan force one)",
          GST_TYPE_DFLASH_BACKEND, GST_DFLASH_BACKEND_AUTO,
          G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY));
  g_object_class_install_property (gobject_class, PROP_BUSY_TIME,
      g_param_spec_uint64 ("busy-time", "Busy time",
          "Nanoseconds spent working on rounds so far", 0, G_MAXUINT64, 0,
          G_PARAM_READABLE | G_PARAM_STATIC_STRINGS));
}

GstDflashModel *
gst_dflash_filter_model (GstDflashFilter *filter)
{
  return PRIV (filter)->model;
}

void
gst_dflash_filter_class_add_pads (GstDflashFilterClass *klass, const char *sink_caps,
                                  const char *src_caps)
{
  GstElementClass *element_class = GST_ELEMENT_CLASS (klass);
  GstCaps *sink = gst_caps_from_string (sink_caps), *src = gst_caps_from_string (src_caps);

  gst_element_class_add_pad_template (element_class,
      gst_pad_template_new ("sink", GST_PAD_SINK, GST_PAD_ALWAYS, sink));
  gst_element_class_add_pad_template (element_class,
      gst_pad_template_new ("src", GST_PAD_SRC, GST_PAD_ALWAYS, src));
  gst_caps_unref (sink);
  gst_caps_unref (src);
}
