/* gst-dflash — what every element shares: field properties, common errors. */
#include "gstdflashelement.h"

/* The field's offset, plus one (0: not a field property), on the pspec. */
static GQuark
offset_quark (void)
{
  static GQuark q;

  if (!q)
    q = g_quark_from_static_string ("gst-dflash-field-offset");
  return q;
}

void
gst_dflash_install_field_property (GObjectClass *klass, guint prop_id, GParamSpec *pspec,
                                   gssize offset)
{
  g_param_spec_set_qdata (pspec, offset_quark (), GSIZE_TO_POINTER ((gsize) offset + 1));
  g_object_class_install_property (klass, prop_id, pspec);
}

/* The field of `pspec` in `object`, NULL where it is no field property. */
static gpointer
field_of (GObject *object, GParamSpec *pspec)
{
  gsize stored = GPOINTER_TO_SIZE (g_param_spec_get_qdata (pspec, offset_quark ()));

  if (!stored)
    return NULL;
  return G_STRUCT_MEMBER_P (object, (gssize) (stored - 1));
}

gboolean
gst_dflash_field_property_set (GObject *object, const GValue *value, GParamSpec *pspec)
{
  gpointer field = field_of (object, pspec);
  GType type = G_PARAM_SPEC_VALUE_TYPE (pspec);
  char *old = NULL;

  if (!field)
    return FALSE;
  GST_OBJECT_LOCK (object);
  if (type == G_TYPE_INT)
    *(gint *) field = g_value_get_int (value);
  else if (G_TYPE_IS_ENUM (type))
    *(gint *) field = g_value_get_enum (value);
  else if (type == G_TYPE_BOOLEAN)
    *(gboolean *) field = g_value_get_boolean (value);
  else if (type == G_TYPE_DOUBLE)
    *(gdouble *) field = g_value_get_double (value);
  else if (type == G_TYPE_UINT)
    *(guint *) field = g_value_get_uint (value);
  else if (type == G_TYPE_UINT64)
    *(guint64 *) field = g_value_get_uint64 (value);
  else if (type == G_TYPE_STRING) {
    old = *(char **) field;
    *(char **) field = g_value_dup_string (value);
  } else
    g_critical ("%s: property %s of type %s cannot be a field", G_OBJECT_TYPE_NAME (object),
                pspec->name, g_type_name (type));
  GST_OBJECT_UNLOCK (object);
  g_free (old);
  return TRUE;
}

gboolean
gst_dflash_field_property_get (GObject *object, GValue *value, GParamSpec *pspec)
{
  gpointer field = field_of (object, pspec);
  GType type = G_PARAM_SPEC_VALUE_TYPE (pspec);

  if (!field)
    return FALSE;
  GST_OBJECT_LOCK (object);
  if (type == G_TYPE_INT)
    g_value_set_int (value, *(gint *) field);
  else if (G_TYPE_IS_ENUM (type))
    g_value_set_enum (value, *(gint *) field);
  else if (type == G_TYPE_BOOLEAN)
    g_value_set_boolean (value, *(gboolean *) field);
  else if (type == G_TYPE_DOUBLE)
    g_value_set_double (value, *(gdouble *) field);
  else if (type == G_TYPE_UINT)
    g_value_set_uint (value, *(guint *) field);
  else if (type == G_TYPE_UINT64)
    g_value_set_uint64 (value, *(guint64 *) field);
  else if (type == G_TYPE_STRING)
    g_value_set_string (value, *(char **) field);
  GST_OBJECT_UNLOCK (object);
  return TRUE;
}

void
gst_dflash_field_set_property (GObject *object, guint prop_id, const GValue *value,
                               GParamSpec *pspec)
{
  if (!gst_dflash_field_property_set (object, value, pspec))
    G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
}

void
gst_dflash_field_get_property (GObject *object, guint prop_id, GValue *value, GParamSpec *pspec)
{
  if (!gst_dflash_field_property_get (object, value, pspec))
    G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
}

gboolean
gst_dflash_element_check_backend_built (GstElement *element, GstDflashBackend backend)
{
  g_autoptr (GError) error = NULL;

  if (gst_dflash_backend_check (backend, &error))
    return TRUE;
  GST_ELEMENT_ERROR (element, RESOURCE, SETTINGS, ("%s", error->message), (NULL));
  return FALSE;
}

gboolean
gst_dflash_element_check_target_backend (GstElement *element, GstDflashBackend backend,
                                         const char *advice)
{
  if (!gst_dflash_element_check_backend_built (element, backend))
    return FALSE;
  if (backend == GST_DFLASH_BACKEND_VULKAN)
    goto no_vulkan;
  return TRUE;

  /* ERRORS */
no_vulkan:
  {
    GST_ELEMENT_ERROR (element, RESOURCE, SETTINGS,
        ("backend=vulkan: the target runs on cpu or cuda (%s)", advice), (NULL));
    return FALSE;
  }
}

void
gst_dflash_element_error_no_model (GstElement *element)
{
  GST_ELEMENT_ERROR (element, CORE, MISSING_PLUGIN,
      ("no dflash model found: it needs a tapsource upstream (or a dflash.model context)"),
      ("no element answered the dflash.model context query"));
}

void
gst_dflash_install_backend_property (GObjectClass *klass, guint prop_id, const char *blurb,
                                     gssize offset)
{
  /* the blurb is the element's static string */
  gst_dflash_install_field_property (klass, prop_id,
      g_param_spec_enum ("backend", "Backend", blurb, GST_TYPE_DFLASH_BACKEND,
          GST_DFLASH_BACKEND_AUTO,
          G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY),
      offset);
}

void
gst_dflash_install_busy_time_property (GObjectClass *klass, guint prop_id, const char *blurb,
                                       gssize offset)
{
  gst_dflash_install_field_property (klass, prop_id,
      g_param_spec_uint64 ("busy-time", "Busy time", blurb, 0, G_MAXUINT64, 0,
          G_PARAM_READABLE | G_PARAM_STATIC_STRINGS),
      offset);
}

GType
gst_dflash_register_enum (GType *type, const char *name, const GEnumValue *values)
{
  if (g_once_init_enter (type)) {
    GType t = g_enum_register_static (name, values);
    g_once_init_leave (type, t);
  }
  return *type;
}
