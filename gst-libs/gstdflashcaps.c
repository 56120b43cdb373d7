/* gst-dflash — caps helpers and the backend choice. */
#include "gstdflashcaps.h"

#include "dfl-error.h"

GType
gst_dflash_backend_get_type (void)
{
  static GType type = 0;
  static const GEnumValue values[] = {
    { GST_DFLASH_BACKEND_AUTO, "The best available (the caps negotiation decides)", "auto" },
    { GST_DFLASH_BACKEND_CPU, "CPU (system memory)", "cpu" },
    { GST_DFLASH_BACKEND_CUDA, "CUDA (memory:CUDAMemory)", "cuda" },
    { GST_DFLASH_BACKEND_VULKAN, "Vulkan (memory:VulkanBuffer)", "vulkan" },
    { 0, NULL, NULL },
  };

  if (g_once_init_enter (&type)) {
    GType t = g_enum_register_static ("GstDflashBackend", values);
    g_once_init_leave (&type, t);
  }
  return type;
}

gboolean
gst_dflash_backend_check (GstElement *element, GstDflashBackend backend, GError **error)
{
  switch (backend) {
    case GST_DFLASH_BACKEND_AUTO:
    case GST_DFLASH_BACKEND_CPU:
      return TRUE;
    case GST_DFLASH_BACKEND_CUDA:
    case GST_DFLASH_BACKEND_VULKAN:
    default:
      /* the GPU back ends are not built yet: say so rather than run the CPU */
      g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                   "%s: backend=%s is not available in this build (only cpu is)",
                   GST_ELEMENT_NAME (element), backend == GST_DFLASH_BACKEND_CUDA ? "cuda" : "vulkan");
      return FALSE;
  }
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
