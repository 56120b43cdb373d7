/* gst-dflash — the model the elements of one loop share. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstdflashmodel.h"

#include "gstdflashelement.h"

#include "dfl-error.h"
#include "gstdflashdevice.h"
#include "gstdflashengines.h"
#include "gstdflashseq.h"
#include "qwen3-weights.h"


struct _GstDflashModel {
  GstObject parent;
  DflTarget *target;
  DflTokenizer *tokenizer;
  char *drafter_path;
  DflDrafterWeights *drafter;   /* opened once: geometry, router, selector */
  /* bound to the target on the CPU: at load as stored (a view of the
   * sidecar, checked); where drafter-weights is q8_0, replaced by a Q8_0
   * binding when the first sequence drafts (`bind_q8_0` until then; the
   * quantization costs a load a few tens of milliseconds that a run that
   * never drafts need not pay), under `bind_lock` */
  gboolean bind_q8_0;
  GMutex bind_lock;
  DflDrafterWeights *drafter_cpu;
};

G_DEFINE_TYPE (GstDflashModel, gst_dflash_model, GST_TYPE_OBJECT);

static void
gst_dflash_model_finalize (GObject *object)
{
  GstDflashModel *m = GST_DFLASH_MODEL (object);

  g_clear_pointer (&m->drafter_cpu, dfl_drafter_weights_unref);
  g_clear_pointer (&m->drafter, dfl_drafter_weights_unref);
  g_mutex_clear (&m->bind_lock);
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
  g_mutex_init (&m->bind_lock);
}

GType
gst_dflash_drafter_weights_get_type (void)
{
  static GType type = 0;
  static const GEnumValue values[] = {
    { GST_DFLASH_DRAFTER_WEIGHTS_Q8_0, "Quantized to Q8_0 when bound (integer products; a "
      "float target's head too, for the drafter alone)", "q8_0" },
    { GST_DFLASH_DRAFTER_WEIGHTS_STORED, "As the sidecar stores them (the reference's exact "
      "drafts)", "stored" },
    { 0, NULL, NULL },
  };

  return gst_dflash_register_enum (&type, "GstDflashDrafterWeights", values);
}

GstDflashModel *
gst_dflash_model_new (const char *target_dir, const char *drafter, gboolean no_drafter,
                      GstDflashDrafterWeights drafter_weights, GError **error)
{
  g_autoptr (GstDflashModel) m = g_object_ref_sink (g_object_new (GST_TYPE_DFLASH_MODEL, NULL));
  g_autofree char *beside = dfl_qwen3_checkpoint_sidecar (target_dir);
  const DflQwen3Config *c;
  gboolean has_tokenizer;

  if (!(m->target = dfl_target_load (target_dir, error)))
    return NULL;
  c = dfl_target_config (m->target);
  /* tokenizer.json in a folder, tokenizer.ggml.* in a .gguf file */
  m->tokenizer = dfl_tokenizer_load_checkpoint (target_dir, &has_tokenizer, error);
  if (has_tokenizer && !m->tokenizer)
    return NULL;
  if (!no_drafter) {
    if (drafter && *drafter)
      m->drafter_path = g_strdup (drafter);
    else if (g_file_test (beside, G_FILE_TEST_EXISTS))
      m->drafter_path = g_strdup (beside);
  }
  if (m->drafter_path) {
    DflDraftTrunk trunk;
    if (!(m->drafter = dfl_drafter_weights_open (m->drafter_path, error))
        || !dfl_drafter_weights_check_target (m->drafter, dfl_target_tensors (m->target),
                                              c->tie_word_embeddings, c->layers, c->hidden,
                                              c->vocab, error)
        || !dfl_draft_trunk_of_target (&trunk, m->target, error)
        || !(m->drafter_cpu = dfl_drafter_weights_bind (m->drafter, NULL, &trunk, DFL_DTYPE_F32,
                                                        error)))
      return NULL;
    /* the binding as stored checks the drafter against the target now;
     * a Q8_0 one replaces it when a sequence first drafts, its matrices
     * kept in the user's cache for the next process (arena-cache.c) */
    m->bind_q8_0 = drafter_weights == GST_DFLASH_DRAFTER_WEIGHTS_Q8_0;
    if (m->bind_q8_0) {
      g_autofree char *cache = g_build_filename (g_get_user_cache_dir (), "gst-dflash",
                                                 "drafter", NULL);
      dfl_drafter_weights_set_arena_cache (m->drafter, cache);
    }
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
  return m->drafter ? dfl_drafter_weights_geometry (m->drafter) : NULL;
}

const char *
gst_dflash_model_drafter_path (GstDflashModel *m)
{
  return m->drafter_path;
}

DflDrafterWeights *
gst_dflash_model_drafter (GstDflashModel *m)
{
  return m->drafter;
}

int
gst_dflash_model_tap_width (GstDflashModel *m)
{
  return m->drafter ? dfl_drafter_geometry_tap_width (dfl_drafter_weights_geometry (m->drafter))
      : 0;
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

DflDrafterWeights *
gst_dflash_model_drafter_on (GstDflashModel *m, GstDflashBackend backend, GstDflashDevice *dev,
                             GError **error)
{
  DflDrafterWeights *w;

  if (gst_dflash_backend_id (backend) != DFL_BACKEND_CPU)
    return gst_dflash_device_drafter (dev, m, error);
  g_mutex_lock (&m->bind_lock);
  if (m->drafter_cpu && m->bind_q8_0) {
    DflDraftTrunk trunk;
    DflDrafterWeights *q8 = NULL;
    if (dfl_draft_trunk_of_target (&trunk, m->target, error)
        && (q8 = dfl_drafter_weights_bind (m->drafter, NULL, &trunk, DFL_DTYPE_Q8_0, error))) {
      /* contexts made before hold their own reference to the other */
      dfl_drafter_weights_unref (m->drafter_cpu);
      m->drafter_cpu = q8;
      m->bind_q8_0 = FALSE;
    }
    if (!q8) {
      g_mutex_unlock (&m->bind_lock);
      return NULL;
    }
  }
  w = m->drafter_cpu;
  g_mutex_unlock (&m->bind_lock);
  if (!w)
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "the model %s has no drafter (no dflash.safetensors in it or X.dflash.safetensors beside X.gguf, and none named)",
                 dfl_target_dir (m->target));
  return w;
}

DflDraftCtx *
gst_dflash_model_seq_draft (GstDflashModel *m, GstDflashSeq *seq, GstDflashBackend backend,
                            GstDflashDevice *dev, GError **error)
{
  DflDrafterWeights *w;

  if (seq->draft) {
    DflDevice *have = dfl_draft_ctx_device (seq->draft);
    DflBackendId id = have ? dfl_device_backend (have) : DFL_BACKEND_CPU;
    if (id == gst_dflash_backend_id (backend))
      return seq->draft;
    g_set_error (error, DFL_ERROR, DFL_ERROR_MISMATCH,
                 "sequence %u drafts on backend=%s already; it cannot also draft on backend=%s",
                 seq->id, dfl_backend_name (id), dfl_backend_name (gst_dflash_backend_id (backend)));
    return NULL;
  }
  if ((w = gst_dflash_model_drafter_on (m, backend, dev, error)))
    seq->draft = dfl_draft_ctx_new (w, error);
  return seq->draft;
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
