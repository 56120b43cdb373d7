/* gst-dflash — the model the elements of one loop share. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstdflashmodel.h"

#include "dfl-error.h"
#include "gstdflashdevice.h"

#ifdef HAVE_CUDA
#include "cuda-target.h"
#endif

struct _GstDflashModel {
  GstObject parent;
  DflTarget *target;
  DflTokenizer *tokenizer;
  char *drafter_path;
  DflDrafterWeights *drafter;   /* opened once: geometry, router, selector */
  DflDrafterWeights *drafter_cpu;   /* bound to the target on the CPU */
  GHashTable *seqs;          /* key (loop, id) → GstDflashSeq */
  guint loops;               /* loops numbered so far */
  /* the GPU engines, made on first use under engine_lock (an upload takes
   * a while; the object lock guards the table of sequences) */
  GMutex engine_lock;
  GstDflashDevice *cuda_dev;
  DflCudaTarget *cuda_target;
  DflDrafterWeights *cuda_drafter;
  gboolean cuda_f32;         /* the CUDA engines' matrices widened to F32 */
  GstDflashDevice *vk_dev;
  DflDrafterWeights *vk_drafter;
  /* router policy=cost's figures, by where the target runs (CPU, CUDA):
   * a property of the machine and the pair, so every pipeline on this
   * model starts from what the earlier ones measured */
  GMutex route_lock;
  DflRouteCost route_cost[2];
};

G_DEFINE_TYPE (GstDflashModel, gst_dflash_model, GST_TYPE_OBJECT);

static void
seq_free (GstDflashSeq *s)
{
  dfl_target_seq_free (s->kv);
  if (s->tokens)
    g_array_unref (s->tokens);
  g_free (s->taps);
  g_free (s->tip);
  g_clear_pointer (&s->draft, dfl_draft_ctx_free);
  gst_clear_buffer (&s->taps_buf);
#ifdef HAVE_CUDA
  g_clear_pointer (&s->cuda_kv, dfl_cuda_target_seq_free);
#endif
  g_free (s);
}

static void
gst_dflash_model_finalize (GObject *object)
{
  GstDflashModel *m = GST_DFLASH_MODEL (object);

  /* the sequences' GPU state before the engines it was made from */
  g_hash_table_unref (m->seqs);
#ifdef HAVE_CUDA
  g_clear_pointer (&m->cuda_drafter, dfl_drafter_weights_unref);
  g_clear_pointer (&m->cuda_target, dfl_cuda_target_free);
#endif
  g_clear_pointer (&m->vk_drafter, dfl_drafter_weights_unref);
  gst_clear_object (&m->cuda_dev);
  gst_clear_object (&m->vk_dev);
  g_mutex_clear (&m->engine_lock);
  g_mutex_clear (&m->route_lock);
  g_clear_pointer (&m->drafter_cpu, dfl_drafter_weights_unref);
  g_clear_pointer (&m->drafter, dfl_drafter_weights_unref);
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
  /* the keys live in the sequences: freeing one frees its key */
  m->seqs = g_hash_table_new_full (g_int64_hash, g_int64_equal, NULL, (GDestroyNotify) seq_free);
  g_mutex_init (&m->engine_lock);
  g_mutex_init (&m->route_lock);
  for (guint i = 0; i < G_N_ELEMENTS (m->route_cost); i++)
    dfl_route_cost_init (&m->route_cost[i], DFL_ROUTE_COST_PROBE_EVERY);
}

DflRouteCost *
gst_dflash_model_route_cost_lock (GstDflashModel *m, gboolean cuda_target)
{
  g_mutex_lock (&m->route_lock);
  return &m->route_cost[cuda_target ? 1 : 0];
}

void
gst_dflash_model_route_cost_unlock (GstDflashModel *m)
{
  g_mutex_unlock (&m->route_lock);
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
    DflDraftTrunk trunk;
    if (!(m->drafter = dfl_drafter_weights_open (m->drafter_path, error))
        || !dfl_drafter_weights_check_target (m->drafter, dfl_target_tensors (m->target),
                                              c->tie_word_embeddings, c->layers, c->hidden,
                                              c->vocab, error)
        || !dfl_draft_trunk_of_target (&trunk, m->target, error)
        || !(m->drafter_cpu = dfl_drafter_weights_bind (m->drafter, NULL, &trunk, DFL_DTYPE_F32,
                                                        error)))
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

static guint64
seq_key (guint loop, guint id)
{
  return (guint64) loop << 32 | id;
}

guint
gst_dflash_model_loop_new (GstDflashModel *m)
{
  guint loop;

  GST_OBJECT_LOCK (m);
  loop = m->loops++;
  GST_OBJECT_UNLOCK (m);
  return loop;
}

GstDflashSeq *
gst_dflash_model_seq_new (GstDflashModel *m, guint loop, guint id, GError **error)
{
  guint64 key = seq_key (loop, id);
  GstDflashSeq *s;

  GST_OBJECT_LOCK (m);
  if (g_hash_table_contains (m->seqs, &key)) {
    GST_OBJECT_UNLOCK (m);
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID, "sequence %u is already running", id);
    return NULL;
  }
  s = g_new0 (GstDflashSeq, 1);
  s->key = key;
  s->loop = loop;
  s->id = id;
  s->kv = dfl_target_seq_new (m->target);
  s->tokens = g_array_new (FALSE, FALSE, sizeof (int));
  s->tip = g_new0 (float, dfl_target_config (m->target)->hidden);
  g_hash_table_insert (m->seqs, &s->key, s);
  GST_OBJECT_UNLOCK (m);
  return s;
}

GstDflashSeq *
gst_dflash_model_seq_get (GstDflashModel *m, guint loop, guint id)
{
  guint64 key = seq_key (loop, id);
  GstDflashSeq *s;

  GST_OBJECT_LOCK (m);
  s = g_hash_table_lookup (m->seqs, &key);
  GST_OBJECT_UNLOCK (m);
  return s;
}

void
gst_dflash_model_seq_remove (GstDflashModel *m, guint loop, guint id)
{
  guint64 key = seq_key (loop, id);

  GST_OBJECT_LOCK (m);
  g_hash_table_remove (m->seqs, &key);
  GST_OBJECT_UNLOCK (m);
}

static gboolean
seq_in_loop (gpointer key, gpointer value, gpointer loop)
{
  return ((GstDflashSeq *) value)->loop == GPOINTER_TO_UINT (loop);
}

void
gst_dflash_model_seq_clear (GstDflashModel *m, guint loop)
{
  GST_OBJECT_LOCK (m);
  g_hash_table_foreach_remove (m->seqs, seq_in_loop, GUINT_TO_POINTER (loop));
  GST_OBJECT_UNLOCK (m);
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


DflCudaTarget *
gst_dflash_model_cuda_target (GstDflashModel *m, GstDflashDevice *dev, gboolean f32,
                              GError **error)
{
#ifdef HAVE_CUDA
  DflCudaTarget *t = NULL;

  g_return_val_if_fail (gst_dflash_device_backend (dev) == GST_DFLASH_BACKEND_CUDA, NULL);
  g_mutex_lock (&m->engine_lock);
  if (same_device (m, m->cuda_dev, dev, error)) {
    if (!m->cuda_target) {
      m->cuda_target = dfl_cuda_target_new (gst_dflash_device_handle (dev), m->target,
          f32 ? DFL_CUDA_TARGET_F32 : DFL_CUDA_TARGET_AS_STORED, error);
      if (m->cuda_target) {
        m->cuda_dev = gst_object_ref (dev);
        m->cuda_f32 = f32;
      }
      else
        g_prefix_error (error, "%s on %s: ", dfl_target_dir (m->target),
                        gst_dflash_device_describe (dev));
    }
    t = m->cuda_target;
  }
  g_mutex_unlock (&m->engine_lock);
  return t;
#else
  g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED, "this build has no CUDA back end");
  return NULL;
#endif
}

GstDflashDevice *
gst_dflash_model_cuda_device (GstDflashModel *m)
{
  GstDflashDevice *dev;

  g_mutex_lock (&m->engine_lock);
  dev = m->cuda_target ? m->cuda_dev : NULL;
  g_mutex_unlock (&m->engine_lock);
  return dev;
}

/* The core's back end a GstDflashBackend names (AUTO is resolved by the
 * elements before they draft). */
static DflBackendId
backend_id (GstDflashBackend backend)
{
  switch (backend) {
    case GST_DFLASH_BACKEND_CUDA:
      return DFL_BACKEND_CUDA;
    case GST_DFLASH_BACKEND_VULKAN:
      return DFL_BACKEND_VULKAN;
    default:
      return DFL_BACKEND_CPU;
  }
}

/* The CUDA target's embedding and head on the card, for the drafter there,
 * and the matrices' type: the target's (F32, or as stored). */
static gboolean
cuda_trunk (GstDflashModel *m, DflDevice *device, DflDraftTrunk *trunk, DflDtype *as,
            GError **error)
{
#ifdef HAVE_CUDA
  const DflCudaWeights *w[2];

  if (!m->cuda_target) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "the CUDA drafter reads the target's embedding and head on the card, and the "
                 "target of %s is not on the card: run tapsource with backend=cuda",
                 dfl_target_dir (m->target));
    return FALSE;
  }
  w[0] = dfl_cuda_target_embedding (m->cuda_target);
  w[1] = dfl_cuda_target_head (m->cuda_target);
  trunk->embed = dfl_tensor_2d (device, (gpointer) w[0]->d_data, 0, w[0]->type, w[0]->rows,
                                w[0]->cols);
  trunk->head = dfl_tensor_2d (device, (gpointer) w[1]->d_data, 0, w[1]->type, w[1]->rows,
                               w[1]->cols);
  *as = m->cuda_f32 ? DFL_DTYPE_F32 : dfl_drafter_weights_stored_dtype (m->drafter);
  return TRUE;
#else
  g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED, "this build has no CUDA back end");
  return FALSE;
#endif
}

/* The drafter bound on a GPU: on CUDA it reads the CUDA target's
 * embedding and head; on Vulkan the CPU target's, uploaded with it. */
static DflDrafterWeights *
bind_on_device (GstDflashModel *m, GstDflashBackend backend, GstDflashDevice *dev,
                GError **error)
{
  g_autoptr (DflDevice) device = dfl_device_wrap (backend_id (backend),
                                                  gst_dflash_device_handle (dev), error);
  DflDraftTrunk trunk;
  DflDtype as = DFL_DTYPE_F32;

  if (!device)
    return NULL;
  if (backend == GST_DFLASH_BACKEND_CUDA ? !cuda_trunk (m, device, &trunk, &as, error)
      : !dfl_draft_trunk_of_target (&trunk, m->target, error))
    return NULL;
  return dfl_drafter_weights_bind (m->drafter, device, &trunk, as, error);
}

DflDrafterWeights *
gst_dflash_model_drafter_on (GstDflashModel *m, GstDflashBackend backend, GstDflashDevice *dev,
                             GError **error)
{
  gboolean cuda = backend == GST_DFLASH_BACKEND_CUDA;
  DflDrafterWeights *w = NULL, **slot = cuda ? &m->cuda_drafter : &m->vk_drafter;
  /* the CUDA engines' device is the CUDA target's */
  GstDflashDevice **dev_slot = cuda ? &m->cuda_dev : &m->vk_dev;

  if (!m->drafter) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "the model %s has no drafter (no dflash.safetensors beside it, and none named)",
                 dfl_target_dir (m->target));
    return NULL;
  }
  if (backend_id (backend) == DFL_BACKEND_CPU)
    return m->drafter_cpu;
  g_mutex_lock (&m->engine_lock);
  if (same_device (m, *dev_slot, dev, error)) {
    if (!*slot) {
      if ((*slot = bind_on_device (m, backend, dev, error)) && !*dev_slot)
        *dev_slot = gst_object_ref (dev);
      else if (!*slot)
        g_prefix_error (error, "%s on %s: ", m->drafter_path, gst_dflash_device_describe (dev));
    }
    w = *slot;
  }
  g_mutex_unlock (&m->engine_lock);
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
    if (id == backend_id (backend))
      return seq->draft;
    g_set_error (error, DFL_ERROR, DFL_ERROR_MISMATCH,
                 "sequence %u drafts on backend=%s already; it cannot also draft on backend=%s",
                 seq->id, dfl_backend_name (id), dfl_backend_name (backend_id (backend)));
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
