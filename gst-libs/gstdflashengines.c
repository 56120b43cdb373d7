/* gst-dflash — a model's engines on a GPU, owned by the device. */
#include "gstdflashengines.h"

#include "dfl-error.h"

/* One model's engines on one device. */
typedef struct {
  GstDflashModel *model;     /* held: its weights are what the engines were made from */
  DflTarget *target;         /* NULL until asked for */
  DflTargetWeights weights;  /* how its matrices went up */
  DflDrafterWeights *drafter;
} Engines;

/* Engine creation is rare and an upload takes a while: one lock for every
 * device's table is enough. */
static GMutex engines_lock;

static void
engines_free (gpointer data)
{
  Engines *e = data;

  /* the drafter may read the target's tables: it goes first */
  g_clear_pointer (&e->drafter, dfl_drafter_weights_unref);
  g_clear_pointer (&e->target, dfl_target_free);
  gst_object_unref (e->model);
  g_free (e);
}

/* The device's engines of `m`, made empty on first use (engines_lock held). */
static Engines *
engines_of (GstDflashDevice *dev, GstDflashModel *m)
{
  static GQuark quark;
  GHashTable *table;
  Engines *e;

  if (!quark)
    quark = g_quark_from_static_string ("gst-dflash-engines");
  if (!(table = g_object_get_qdata (G_OBJECT (dev), quark))) {
    table = g_hash_table_new_full (NULL, NULL, NULL, engines_free);
    g_object_set_qdata_full (G_OBJECT (dev), quark, table, (GDestroyNotify) g_hash_table_unref);
  }
  if (!(e = g_hash_table_lookup (table, m))) {
    e = g_new0 (Engines, 1);
    e->model = gst_object_ref (m);
    g_hash_table_insert (table, m, e);
  }
  return e;
}

const DflTarget *
gst_dflash_device_target (GstDflashDevice *dev, GstDflashModel *m, DflTargetWeights weights,
                          GError **error)
{
  const DflTarget *host = gst_dflash_model_target (m);
  const DflTarget *t = NULL;
  Engines *e;

  g_mutex_lock (&engines_lock);
  e = engines_of (dev, m);
  if (!e->target) {
    e->target = dfl_target_upload (host, gst_dflash_device_dfl (dev), weights, error);
    e->weights = weights;
    if (!e->target)
      g_prefix_error (error, "%s on %s: ", dfl_target_dir (host), gst_dflash_device_describe (dev));
  }
  t = e->target;
  g_mutex_unlock (&engines_lock);
  return t;
}

/* The drafter's binding on `dev` for engines `e` (engines_lock held). */
static DflDrafterWeights *
bind_drafter (GstDflashDevice *dev, GstDflashModel *m, Engines *e, GError **error)
{
  DflDrafterWeights *w = gst_dflash_model_drafter (m);
  DflDraftTrunk trunk;
  DflDtype as;

  if (gst_dflash_device_backend (dev) == GST_DFLASH_BACKEND_CUDA) {
    /* on CUDA the drafter reads the target's own embedding and head on the card */
    if (!e->target) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                   "the CUDA drafter reads the target's embedding and head on the card, and "
                   "the target is not on the card: run tapsource with backend=cuda");
      return NULL;
    }
    trunk.embed = dfl_target_embedding_tensor (e->target);
    trunk.head = dfl_target_head_tensor (e->target);
  } else if (!dfl_draft_trunk_of_target (&trunk, gst_dflash_model_target (m), error)) {
    return NULL;
  }
  /* matrices as stored on a GPU unless the target's were asked for as F32 */
  as = e->weights == DFL_TARGET_F32 ? DFL_DTYPE_F32 : dfl_drafter_weights_stored_dtype (w);
  return dfl_drafter_weights_bind (w, gst_dflash_device_dfl (dev), &trunk, as, error);
}

DflDrafterWeights *
gst_dflash_device_drafter (GstDflashDevice *dev, GstDflashModel *m, GError **error)
{
  DflDrafterWeights *w;
  Engines *e;

  if (!gst_dflash_model_drafter (m)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "the model %s has no drafter (no dflash.safetensors beside it, and none named)",
                 dfl_target_dir (gst_dflash_model_target (m)));
    return NULL;
  }
  g_mutex_lock (&engines_lock);
  e = engines_of (dev, m);
  if (!e->drafter && !(e->drafter = bind_drafter (dev, m, e, error)))
    g_prefix_error (error, "%s on %s: ", gst_dflash_model_drafter_path (m),
                    gst_dflash_device_describe (dev));
  w = e->drafter;
  g_mutex_unlock (&engines_lock);
  return w;
}
