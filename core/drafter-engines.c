/* gst-dflash — binding the drafter to a target on a back end: the CPU, or
 * the weights uploaded to a CUDA or Vulkan device.
 *
 * The one file of the core that knows which back ends this build has:
 * everything else makes a context from bound weights and drafts through
 * the same calls (drafter.h), whichever back end they run on.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "drafter-private.h"
#include "dfl-error.h"

#ifdef HAVE_VULKAN
#include "dfl-vk-drafter.h"
#endif

/* A trunk matrix of the drafter's hidden width, at least `min_rows` rows,
 * packed, in a float type. */
static gboolean
check_table (const DflDrafterWeights *w, const DflTensor *t, const char *what, int min_rows,
             GError **error)
{
  const DflDrafterGeometry *g = dfl_drafter_weights_geometry (w);

  if (t->ne[0] != g->hidden || t->ne[1] < min_rows || t->ne[2] * t->ne[3] != 1) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_MISMATCH,
                 "%s: the target's %s is [%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT "]; the drafter"
                 " needs [≥ %d, %d]", w->path, what, t->ne[1], t->ne[0], min_rows, g->hidden);
    return FALSE;
  }
  if ((t->dtype != DFL_DTYPE_F32 && t->dtype != DFL_DTYPE_F16 && t->dtype != DFL_DTYPE_BF16)
      || !dfl_tensor_is_contiguous (t) || (!t->handle && !(t->device
          && dfl_device_backend (t->device) == DFL_BACKEND_VULKAN))) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "%s: the target's %s is %s%s; the drafter reads a packed F32, F16 or BF16 matrix",
                 w->path, what, dfl_dtype_name (t->dtype),
                 dfl_tensor_is_contiguous (t) ? "" : " with gaps between its rows");
    return FALSE;
  }
  return TRUE;
}

/* The trunk in the memory the back end reads it from. */
static gboolean
check_place (const DflDrafterWeights *w, const DflDraftTrunk *trunk, DflDevice *device,
             gboolean on_device, GError **error)
{
  const DflTensor *t[2] = { &trunk->embed, &trunk->head };

  for (int i = 0; i < 2; i++) {
    DflDevice *d = t[i]->device;
    gboolean host = !d || dfl_device_backend (d) == DFL_BACKEND_CPU;
    gboolean ok = on_device ? !host && dfl_device_native (d) == dfl_device_native (device) : host;
    if (!ok) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                   "%s: the target's %s is in %s; the drafter on %s reads it from %s", w->path,
                   i ? "LM head" : "embedding", host ? "host memory" : dfl_device_describe (d),
                   device ? dfl_device_describe (device) : "the CPU",
                   on_device ? "the same device" : "host memory");
      return FALSE;
    }
  }
  return TRUE;
}

DflDrafterWeights *
dfl_drafter_weights_bind (DflDrafterWeights *w, DflDevice *device, const DflDraftTrunk *trunk,
                          DflDtype matrix_dtype, GError **error)
{
  DflBackendId backend = device ? dfl_device_backend (device) : DFL_BACKEND_CPU;

  g_return_val_if_fail (w != NULL && trunk != NULL, NULL);
  if (w->engine) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "%s: the drafter is bound already; bind the weights it was loaded as", w->path);
    return NULL;
  }
  if (!check_table (w, &trunk->embed, "embedding", w->g.vocab, error)
      || !check_table (w, &trunk->head, "LM head", w->selector ? w->g.selector_top : 1, error))
    return NULL;
  switch (backend) {
    case DFL_BACKEND_CPU:
      if (!check_place (w, trunk, NULL, FALSE, error))
        return NULL;
      return dfl_drafter_weights_new_bound (w, NULL, NULL, &dfl_draft_engine_cpu, NULL, trunk);
    case DFL_BACKEND_CUDA:
      /* interim: the CUDA drafter is still reached through cuda-drafter.h */
      break;
    case DFL_BACKEND_VULKAN:
#ifdef HAVE_VULKAN
      if (!check_place (w, trunk, NULL, FALSE, error))
        return NULL;
      return dfl_vk_drafter_bind (w, device, trunk, error);
#else
      break;
#endif
  }
  g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
               "%s: backend=%s is not available in this build", w->path,
               dfl_backend_name (backend));
  return NULL;
}

/* A matrix of the target as stored in its mapping, as a host tensor. */
static gboolean
target_matrix (const DflTarget *t, const char *name, DflTensor *out, GError **error)
{
  const DflStoredTensor *x = dfl_safetensors_find (dfl_target_tensors (t), name);

  if (!x || x->n_dims != 2
      || (x->dtype != DFL_DTYPE_F32 && x->dtype != DFL_DTYPE_F16 && x->dtype != DFL_DTYPE_BF16)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: %s is missing or not a 2-D F32, F16 or BF16 matrix", dfl_target_dir (t),
                 name);
    return FALSE;
  }
  *out = dfl_tensor_2d (NULL, (gpointer) x->data, 0, x->dtype, x->shape[0], x->shape[1]);
  return TRUE;
}

gboolean
dfl_draft_trunk_of_target (DflDraftTrunk *trunk, const DflTarget *target, GError **error)
{
  if (!target_matrix (target, "model.embed_tokens.weight", &trunk->embed, error))
    return FALSE;
  if (dfl_target_config (target)->tie_word_embeddings)
    trunk->head = trunk->embed;
  else if (!target_matrix (target, "lm_head.weight", &trunk->head, error))
    return FALSE;
  return TRUE;
}
