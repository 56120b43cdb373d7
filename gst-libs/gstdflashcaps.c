/* gst-dflash — caps helpers and the backend choice. */
#include "gstdflashcaps.h"

#include "dfl-error.h"
#include "gstdflashdevice.h"
#include "gstdflashdevicememory.h"

#include <string.h>

GType
gst_dflash_backend_get_type (void)
{
  static GType type = 0;
  static const GEnumValue values[] = {
    { GST_DFLASH_BACKEND_AUTO, "As the caps negotiate (each element says how)", "auto" },
    { GST_DFLASH_BACKEND_CPU, "CPU (system memory)", "cpu" },
    { GST_DFLASH_BACKEND_CUDA, "CUDA (" GST_DFLASH_CAPS_FEATURE_CUDA ")", "cuda" },
    { GST_DFLASH_BACKEND_VULKAN, "Vulkan (" GST_DFLASH_CAPS_FEATURE_VULKAN ")", "vulkan" },
    { 0, NULL, NULL },
  };

  if (g_once_init_enter (&type)) {
    GType t = g_enum_register_static ("GstDflashBackend", values);
    g_once_init_leave (&type, t);
  }
  return type;
}

gboolean
gst_dflash_backend_built (GstDflashBackend backend)
{
  return backend == GST_DFLASH_BACKEND_AUTO || dfl_backend_built (gst_dflash_backend_id (backend));
}

gboolean
gst_dflash_backend_check (GstDflashBackend backend, GError **error)
{
  /* whether a device exists is found when the element starts; this is
   * about the build */
  if (gst_dflash_backend_built (backend))
    return TRUE;
  g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
               "backend=%s is not available in this build (it was built without %s)",
               dfl_backend_name (gst_dflash_backend_id (backend)),
               backend == GST_DFLASH_BACKEND_CUDA ? "the CUDA toolkit" : "Vulkan and glslc");
  return FALSE;
}

static const char *
feature_of (GstDflashBackend backend)
{
  switch (backend) {
    case GST_DFLASH_BACKEND_CUDA:
      return GST_DFLASH_CAPS_FEATURE_CUDA;
    case GST_DFLASH_BACKEND_VULKAN:
      return GST_DFLASH_CAPS_FEATURE_VULKAN;
    default:
      return GST_CAPS_FEATURE_MEMORY_SYSTEM_MEMORY;
  }
}

GstCaps *
gst_dflash_tensor_caps (const char *structure, guint backends)
{
  GstCaps *plain = gst_caps_from_string (structure), *caps = gst_caps_new_empty ();

  g_return_val_if_fail (plain != NULL, caps);
  for (GstDflashBackend b = GST_DFLASH_BACKEND_CPU; b <= GST_DFLASH_BACKEND_VULKAN; b++) {
    GstCaps *one;
    if (!(backends & (1u << b)) || !gst_dflash_backend_built (b))
      continue;
    one = gst_caps_copy (plain);
    for (guint i = 0; i < gst_caps_get_size (one); i++)
      gst_caps_set_features (one, i, gst_caps_features_new (feature_of (b), NULL));
    caps = gst_caps_merge (caps, one);
  }
  gst_caps_unref (plain);
  return caps;
}

GstDflashBackend
gst_dflash_caps_backend (const GstCaps *caps)
{
  GstCapsFeatures *f;

  if (!caps || gst_caps_is_empty (caps) || gst_caps_is_any (caps))
    return GST_DFLASH_BACKEND_AUTO;
  f = gst_caps_get_features (caps, 0);
  if (f && gst_caps_features_contains (f, GST_DFLASH_CAPS_FEATURE_CUDA))
    return GST_DFLASH_BACKEND_CUDA;
  if (f && gst_caps_features_contains (f, GST_DFLASH_CAPS_FEATURE_VULKAN))
    return GST_DFLASH_BACKEND_VULKAN;
  return GST_DFLASH_BACKEND_CPU;
}

/* "ctxsettle0 (backend=cpu)", or the name alone for an element without the
 * property */
static char *
describe_element (GstElement *e)
{
  GParamSpec *spec = e ? g_object_class_find_property (G_OBJECT_GET_CLASS (e), "backend") : NULL;
  GstDflashBackend b;
  GEnumClass *klass;

  if (!e)
    return g_strdup ("nothing (the pad is not linked)");
  if (!spec || G_PARAM_SPEC_VALUE_TYPE (spec) != GST_TYPE_DFLASH_BACKEND)
    return g_strdup (GST_ELEMENT_NAME (e));
  g_object_get (e, "backend", &b, NULL);
  klass = g_type_class_peek (GST_TYPE_DFLASH_BACKEND);
  return g_strdup_printf ("%s (backend=%s)", GST_ELEMENT_NAME (e),
                          g_enum_get_value (klass, b)->value_nick);
}

void
gst_dflash_caps_explain_refusal (GstPad *srcpad, const GstCaps *caps, GString *why)
{
  GstPad *peer = gst_pad_get_peer (srcpad);
  GstElement *self = gst_pad_get_parent_element (srcpad);
  GstElement *other = peer ? gst_pad_get_parent_element (peer) : NULL;
  GstCaps *takes = peer ? gst_pad_query_caps (peer, NULL) : NULL;
  g_autofree char *me = describe_element (self), *them = describe_element (other);
  const GstCapsFeatures *f = gst_caps_get_features (caps, 0);
  g_autofree char *mine = f ? gst_caps_features_to_string (f) : g_strdup ("memory:SystemMemory");
  GString *theirs = g_string_new (NULL);

  for (guint i = 0; takes && i < gst_caps_get_size (takes); i++) {
    g_autofree char *one = gst_caps_features_to_string (gst_caps_get_features (takes, i));
    if (!strstr (theirs->str, one))
      g_string_append_printf (theirs, "%s%s", theirs->len ? ", " : "", one);
  }
  g_string_append_printf (why, "%s outputs %s in %s, which %s does not take (it takes %s)",
                          me, gst_structure_get_name (gst_caps_get_structure (caps, 0)), mine,
                          them, theirs->len ? theirs->str : "nothing of the kind");
  g_string_free (theirs, TRUE);
  gst_clear_caps (&takes);
  gst_clear_object (&other);
  gst_clear_object (&self);
  gst_clear_object (&peer);
}

gboolean
gst_dflash_caps_agree (const GstCaps *have, const GstCaps *want, GString *why)
{
  const GstStructure *h, *w;

  if (gst_caps_is_empty (have) || gst_caps_is_empty (want))
    return FALSE;
  h = gst_caps_get_structure (have, 0);
  w = gst_caps_get_structure (want, 0);
  if (!gst_structure_has_name (h, gst_structure_get_name (w))) {
    g_string_append_printf (why, "%s where %s was expected", gst_structure_get_name (h),
                            gst_structure_get_name (w));
    return FALSE;
  }
  for (int i = 0; i < gst_structure_n_fields (w); i++) {
    const char *f = gst_structure_nth_field_name (w, i);
    int hv, wv;
    if (!gst_structure_get_int (w, f, &wv))
      continue;
    if (!gst_structure_get_int (h, f, &hv)) {
      g_string_append_printf (why, "%s has no %s (expected %d)", gst_structure_get_name (h), f, wv);
      return FALSE;
    }
    if (hv != wv) {
      g_string_append_printf (why, "%s is %d upstream but %d here", f, hv, wv);
      return FALSE;
    }
  }
  return TRUE;
}
