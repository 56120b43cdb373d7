/* gst-dflash — the model the elements of one loop share. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstdflashmodel.h"

#include "dfl-error.h"
#include "gstdflashdevice.h"
#include "gstdflashseq.h"

#ifdef HAVE_CUDA
#include "cuda-drafter.h"
#endif
#ifdef HAVE_VULKAN
#include "dfl-vk-drafter.h"
#endif

struct _GstDflashModel {
  GstObject parent;
  DflTarget *target;
  DflTokenizer *tokenizer;
  char *drafter_path;
  DflDrafter *drafter;       /* for its geometry, router and selector */
  /* the GPU engines, made on first use under engine_lock (an upload takes
   * a while) */
  GMutex engine_lock;
  GstDflashDevice *target_dev;
  DflTarget *device_target;  /* the target on target_dev */
  DflCudaDrafter *cuda_drafter;
  gboolean target_f32;       /* its matrices (and the CUDA drafter's) widened to F32 */
  GMutex cuda_drafter_lock;  /* its callers, one at a time */
  GstDflashDevice *vk_dev;
  DflVkDrafter *vk_drafter;
};

G_DEFINE_TYPE (GstDflashModel, gst_dflash_model, GST_TYPE_OBJECT);

static void
gst_dflash_model_finalize (GObject *object)
{
  GstDflashModel *m = GST_DFLASH_MODEL (object);

  /* each sequence holds the model: the sequences' GPU state went before
   * the engines it was made from */
#ifdef HAVE_CUDA
  g_clear_pointer (&m->cuda_drafter, dfl_cuda_drafter_free);
#endif
#ifdef HAVE_VULKAN
  g_clear_pointer (&m->vk_drafter, dfl_vk_drafter_free);
#endif
  g_clear_pointer (&m->device_target, dfl_target_free);
  gst_clear_object (&m->target_dev);
  gst_clear_object (&m->vk_dev);
  g_mutex_clear (&m->engine_lock);
  g_mutex_clear (&m->cuda_drafter_lock);
  dfl_drafter_free (m->drafter);
  dfl_tokenizer_free (m->tokenizer);
  dfl_target_free (m->target);
  g_free (m->drafter_path);
  G_OBJECT_CLASS (gst_dflash_model_parent_class)->finalize (object);
}

static void
gst_dflash_model_class_init (GstDflashModelClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = gst_dflash_model_finalize;
}

static void
gst_dflash_model_init (GstDflashModel *m)
{
  g_mutex_init (&m->engine_lock);
  g_mutex_init (&m->cuda_drafter_lock);
}

GstDflashModel *
gst_dflash_model_new (const char *target_dir, const char *drafter, gboolean no_drafter,
                      GError **error)
{
  g_autoptr (GstDflashModel) m = g_object_ref_sink (g_object_new (GST_TYPE_DFLASH_MODEL, NULL));
  g_autofree char *tok_path = g_build_filename (target_dir, "tokenizer.json", NULL);
  g_autofree char *beside = g_build_filename (target_dir, "dflash.safetensors", NULL);
  const DflQwen3Config *c;

  if (!(m->target = dfl_target_load (target_dir, error)))
    return NULL;
  c = dfl_target_config (m->target);
  if (g_file_test (tok_path, G_FILE_TEST_EXISTS) && !(m->tokenizer = dfl_tokenizer_load (tok_path, error)))
    return NULL;
  if (!no_drafter) {
    if (drafter && *drafter)
      m->drafter_path = g_strdup (drafter);
    else if (g_file_test (beside, G_FILE_TEST_EXISTS))
      m->drafter_path = g_strdup (beside);
  }
  if (m->drafter_path) {
    if (!(m->drafter = dfl_drafter_open (m->drafter_path, error))
        || !dfl_drafter_check_target (m->drafter, dfl_target_tensors (m->target),
                                      c->tie_word_embeddings, c->layers, c->hidden, c->vocab, error))
      return NULL;
  }
  return g_steal_pointer (&m);
}

const DflTarget *
gst_dflash_model_target (GstDflashModel *m)
{
  return m->target;
}

const DflTokenizer *
gst_dflash_model_tokenizer (GstDflashModel *m)
{
  return m->tokenizer;
}

const DflDrafterGeometry *
gst_dflash_model_geometry (GstDflashModel *m)
{
  return m->drafter ? dfl_drafter_geometry (m->drafter) : NULL;
}

const char *
gst_dflash_model_drafter_path (GstDflashModel *m)
{
  return m->drafter_path;
}

DflDrafter *
gst_dflash_model_drafter (GstDflashModel *m)
{
  return m->drafter;
}

int
gst_dflash_model_tap_width (GstDflashModel *m)
{
  return m->drafter ? dfl_drafter_geometry_tap_width (dfl_drafter_geometry (m->drafter)) : 0;
}

char *
gst_dflash_model_key (GstElement *tapsource)
{
  static const char *const names[] = { GST_DFLASH_MODEL_PROPERTIES };
  GString *key = g_string_new (NULL);

  for (guint i = 0; i < G_N_ELEMENTS (names); i++) {
    GParamSpec *spec = g_object_class_find_property (G_OBJECT_GET_CLASS (tapsource), names[i]);
    GValue v = G_VALUE_INIT;
    g_autofree char *text = NULL;

    g_return_val_if_fail (spec != NULL, g_string_free (key, TRUE));
    g_value_init (&v, spec->value_type);
    g_object_get_property (G_OBJECT (tapsource), names[i], &v);
    /* an unset string and an empty one choose the same */
    text = G_VALUE_HOLDS_STRING (&v) ? g_strdup (g_value_get_string (&v) ? g_value_get_string (&v) : "")
                                     : gst_value_serialize (&v);
    g_string_append_printf (key, "%s%s=%s", i ? " " : "", names[i], text ? text : "");
    g_value_unset (&v);
  }
  return g_string_free (key, FALSE);
}

DflDrafter *
gst_dflash_model_seq_drafter (GstDflashModel *m, GstDflashSeq *seq, GError **error)
{
  if (!seq->drafter) {
    if (!m->drafter_path) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                   "the model %s has no drafter (no dflash.safetensors beside it, and none named)",
                   dfl_target_dir (m->target));
      return NULL;
    }
    seq->drafter = dfl_drafter_open (m->drafter_path, error);
  }
  return seq->drafter;
}

/* The engines of a back end live on one device: FALSE where `dev` is not
 * the one they were made on. */
static gboolean
same_device (GstDflashModel *m, GstDflashDevice *have, GstDflashDevice *dev, GError **error)
{
  if (!have || have == dev)
    return TRUE;
  g_set_error (error, DFL_ERROR, DFL_ERROR_MISMATCH,
               "the model %s already runs on %s; it cannot also run on %s "
               "(one device per back end)",
               dfl_target_dir (m->target), gst_dflash_device_describe (have),
               gst_dflash_device_describe (dev));
  return FALSE;
}

#if defined (HAVE_CUDA) || defined (HAVE_VULKAN)
static gboolean
need_drafter (GstDflashModel *m, GError **error)
{
  if (m->drafter)
    return TRUE;
  g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
               "the model %s has no drafter (no dflash.safetensors beside it, and none named)",
               dfl_target_dir (m->target));
  return FALSE;
}
#endif

const DflTarget *
gst_dflash_model_device_target (GstDflashModel *m, GstDflashDevice *dev, gboolean f32,
                                GError **error)
{
  const DflTarget *t = NULL;

  g_mutex_lock (&m->engine_lock);
  if (same_device (m, m->target_dev, dev, error)) {
    if (!m->device_target) {
      m->device_target = dfl_target_upload (m->target, gst_dflash_device_dfl (dev),
                                            f32 ? DFL_TARGET_F32 : DFL_TARGET_AS_STORED, error);
      if (m->device_target) {
        m->target_dev = gst_object_ref (dev);
        m->target_f32 = f32;
      }
      else
        g_prefix_error (error, "%s on %s: ", dfl_target_dir (m->target),
                        gst_dflash_device_describe (dev));
    }
    t = m->device_target;
  }
  g_mutex_unlock (&m->engine_lock);
  return t;
}

void
gst_dflash_model_cuda_drafter_lock (GstDflashModel *m)
{
  g_mutex_lock (&m->cuda_drafter_lock);
}

void
gst_dflash_model_cuda_drafter_unlock (GstDflashModel *m)
{
  g_mutex_unlock (&m->cuda_drafter_lock);
}

GstDflashDevice *
gst_dflash_model_target_device (GstDflashModel *m)
{
  GstDflashDevice *dev;

  g_mutex_lock (&m->engine_lock);
  dev = m->device_target ? m->target_dev : NULL;
  g_mutex_unlock (&m->engine_lock);
  return dev;
}

DflCudaDrafter *
gst_dflash_model_cuda_drafter (GstDflashModel *m, GstDflashDevice *dev, GError **error)
{
#ifdef HAVE_CUDA
  DflCudaDrafter *d = NULL;

  if (!need_drafter (m, error))
    return NULL;
  g_mutex_lock (&m->engine_lock);
  if (!m->device_target || dfl_target_backend (m->device_target) != DFL_BACKEND_CUDA) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "the CUDA drafter reads the target's embedding and head on the card, and the "
                 "target of %s is not on the card: run tapsource with backend=cuda",
                 dfl_target_dir (m->target));
  } else if (same_device (m, m->target_dev, dev, error)) {
    if (!m->cuda_drafter) {
      const DflDrafter *dd = m->drafter;
      DflTensor e = dfl_target_embedding_tensor (m->device_target);
      DflTensor h = dfl_target_head_tensor (m->device_target);
      DflCudaWeights embedding = { dfl_tensor_data (&e), e.dtype, e.ne[1], e.ne[0] };
      DflCudaWeights head = { dfl_tensor_data (&h), h.dtype, h.ne[1], h.ne[0] };
      m->cuda_drafter = dfl_cuda_drafter_new (gst_dflash_device_handle (dev), dd, &embedding,
          &head, m->target_f32 ? DFL_DTYPE_F32 : dfl_cuda_drafter_stored_type (dd), error);
      if (!m->cuda_drafter)
        g_prefix_error (error, "%s on %s: ", m->drafter_path, gst_dflash_device_describe (dev));
    }
    d = m->cuda_drafter;
  }
  g_mutex_unlock (&m->engine_lock);
  return d;
#else
  g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED, "this build has no CUDA back end");
  return NULL;
#endif
}

DflVkDrafter *
gst_dflash_model_vk_drafter (GstDflashModel *m, GstDflashDevice *dev, GError **error)
{
#ifdef HAVE_VULKAN
  DflVkDrafter *d = NULL;

  g_return_val_if_fail (gst_dflash_device_backend (dev) == GST_DFLASH_BACKEND_VULKAN, NULL);
  if (!need_drafter (m, error))
    return NULL;
  g_mutex_lock (&m->engine_lock);
  if (same_device (m, m->vk_dev, dev, error)) {
    if (!m->vk_drafter) {
      m->vk_drafter = dfl_vk_drafter_new_for_target (gst_dflash_device_handle (dev), m->drafter,
                                                     m->target, error);
      if (m->vk_drafter)
        m->vk_dev = gst_object_ref (dev);
      else
        g_prefix_error (error, "%s on %s: ", m->drafter_path, gst_dflash_device_describe (dev));
    }
    d = m->vk_drafter;
  }
  g_mutex_unlock (&m->engine_lock);
  return d;
#else
  g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED, "this build has no Vulkan back end");
  return NULL;
#endif
}

DflCudaDraftCtx *
gst_dflash_model_seq_cuda_draft (GstDflashModel *m, GstDflashSeq *seq, GstDflashDevice *dev,
                                 GError **error)
{
#ifdef HAVE_CUDA
  DflCudaDrafter *d;

  if (!seq->cuda_draft && (d = gst_dflash_model_cuda_drafter (m, dev, error)))
    seq->cuda_draft = dfl_cuda_draft_ctx_new (d, error);
  return seq->cuda_draft;
#else
  g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED, "this build has no CUDA back end");
  return NULL;
#endif
}

DflVkDraftCtx *
gst_dflash_model_seq_vk_draft (GstDflashModel *m, GstDflashSeq *seq, GstDflashDevice *dev,
                               GError **error)
{
#ifdef HAVE_VULKAN
  DflVkDrafter *d;

  if (!seq->vk_draft && (d = gst_dflash_model_vk_drafter (m, dev, error)))
    seq->vk_draft = dfl_vk_draft_ctx_new (d, error);
  return seq->vk_draft;
#else
  g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED, "this build has no Vulkan back end");
  return NULL;
#endif
}

GstContext *
gst_dflash_model_context_new (GstDflashModel *m)
{
  GstContext *context = gst_context_new (GST_DFLASH_MODEL_CONTEXT_TYPE, TRUE);
  GstStructure *s = gst_context_writable_structure (context);

  gst_structure_set (s, "model", GST_TYPE_DFLASH_MODEL, m, NULL);
  return context;
}

gboolean
gst_dflash_model_handle_context_query (GstElement *element, GstQuery *query, GstDflashModel *m)
{
  const char *type;
  GstContext *context;

  if (!m || !gst_query_parse_context_type (query, &type)
      || g_strcmp0 (type, GST_DFLASH_MODEL_CONTEXT_TYPE))
    return FALSE;
  context = gst_dflash_model_context_new (m);
  gst_query_set_context (query, context);
  gst_context_unref (context);
  GST_DEBUG_OBJECT (element, "answered a dflash.model context query");
  return TRUE;
}

void
gst_dflash_model_handle_set_context (GstElement *element, GstContext *context,
                                     GstDflashModel **slot)
{
  const GstStructure *s;
  GstDflashModel *m = NULL;

  if (!context || g_strcmp0 (gst_context_get_context_type (context), GST_DFLASH_MODEL_CONTEXT_TYPE))
    return;
  s = gst_context_get_structure (context);
  if (gst_structure_get (s, "model", GST_TYPE_DFLASH_MODEL, &m, NULL) && m) {
    GST_OBJECT_LOCK (element);
    if (!*slot)
      *slot = g_steal_pointer (&m);
    GST_OBJECT_UNLOCK (element);
    g_clear_object (&m);
  }
}

gboolean
gst_dflash_model_find (GstElement *element, GstPad *pad, GstDflashModel **slot)
{
  GstQuery *query;

  if (*slot)
    return TRUE;
  query = gst_query_new_context (GST_DFLASH_MODEL_CONTEXT_TYPE);
  if (gst_pad_peer_query (pad, query)) {
    GstContext *context = NULL;
    gst_query_parse_context (query, &context);
    if (context)
      gst_dflash_model_handle_set_context (element, context, slot);
  }
  gst_query_unref (query);
  if (!*slot) {
    /* the application (or a bin that has one) may answer through set_context */
    gst_element_post_message (element,
        gst_message_new_need_context (GST_OBJECT (element), GST_DFLASH_MODEL_CONTEXT_TYPE));
  }
  return *slot != NULL;
}
