/* gst-dflash — the target's trunk a drafter's block reads (its token
 * embedding and LM head): taken from a CPU target, checked against the
 * drafter.
 */
#include "drafter-private.h"
#include "dfl-error.h"
#include "matrix-upload.h"

/* A trunk matrix of the drafter's hidden width, at least `min_rows` rows,
 * packed, in a float or a block-quantized type. The CPU reads the blocks
 * in place; another device gets them dequantized as they go up from host
 * memory (draft-device.c), so blocks already in a device's memory must be
 * of a type that device runs. */
static gboolean
check_table (const DflTensor *t, const char *name, const DflDrafterGeometry *g, const char *what,
             int min_rows, DflDevice *device, GError **error)
{
  gboolean quantized = dfl_dtype_is_quantized (t->dtype);
  gboolean on_host = !t->device || dfl_device_backend (t->device) == DFL_BACKEND_CPU;

  if (t->ne[0] != g->hidden || t->ne[1] < min_rows || t->ne[2] * t->ne[3] != 1) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_MISMATCH,
                 "%s: the target's %s is [%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT "]; the drafter"
                 " needs [≥ %d, %d]", name, what, t->ne[1], t->ne[0], min_rows, g->hidden);
    return FALSE;
  }
  if (quantized && !on_host && device
      && dfl_matrix_device_type (device, t->dtype) != t->dtype) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                 "%s: the target's %s is %s in %s's memory, a type %s does not run; the drafter "
                 "dequantizes blocks only as it uploads them from host memory", name, what,
                 dfl_dtype_name (t->dtype), dfl_device_describe (t->device),
                 dfl_device_describe (device));
    return FALSE;
  }
  if ((t->dtype != DFL_DTYPE_F32 && t->dtype != DFL_DTYPE_F16 && t->dtype != DFL_DTYPE_BF16
       && !quantized)
      || !dfl_tensor_is_contiguous (t) || (!t->handle && !(t->device
          && dfl_device_backend (t->device) == DFL_BACKEND_VULKAN))) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "%s: the target's %s is %s%s; the drafter reads a packed F32, F16, BF16 or "
                 "block-quantized matrix", name, what, dfl_dtype_name (t->dtype),
                 dfl_tensor_is_contiguous (t) ? "" : " with gaps between its rows");
    return FALSE;
  }
  return TRUE;
}

/* The trunk in memory the drafter's device reads it from: host memory
 * (borrowed on the CPU, uploaded with the weights on another device), or
 * that device's own memory (borrowed). */
static gboolean
check_place (const DflDraftTrunk *trunk, const char *name, DflDevice *device, GError **error)
{
  const DflTensor *t[2] = { &trunk->embed, &trunk->head };
  gboolean gpu = device && dfl_device_backend (device) != DFL_BACKEND_CPU;

  for (int i = 0; i < 2; i++) {
    DflDevice *d = t[i]->device;
    gboolean host = !d || dfl_device_backend (d) == DFL_BACKEND_CPU;
    gboolean ok = host || (gpu && dfl_device_backend (d) == dfl_device_backend (device)
                           && dfl_device_native (d) == dfl_device_native (device));
    if (!ok) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                   "%s: the target's %s is in %s; the drafter on %s reads it from host memory%s",
                   name, i ? "LM head" : "embedding", dfl_device_describe (d),
                   gpu ? dfl_device_describe (device) : "the CPU",
                   gpu ? " or from the same device" : "");
      return FALSE;
    }
  }
  return TRUE;
}

gboolean
dfl_draft_trunk_check (const DflDraftTrunk *trunk, DflDevice *device, const char *name,
                       const DflDrafterGeometry *g, gboolean selector, GError **error)
{
  return check_table (&trunk->embed, name, g, "embedding", g->vocab, device, error)
         && check_table (&trunk->head, name, g, "LM head", selector ? g->selector_top : 1, device,
                         error)
         && check_place (trunk, name, device, error);
}

/* A matrix of the target as stored in its mapping (a quantized one as its
 * blocks, row after row), as a host tensor. */
static gboolean
target_matrix (const DflTarget *t, const char *name, DflTensor *out, GError **error)
{
  const DflStoredTensor *x = dfl_safetensors_find (dfl_target_tensors (t), name);

  if (!x || x->n_dims != 2
      || (x->dtype != DFL_DTYPE_F32 && x->dtype != DFL_DTYPE_F16 && x->dtype != DFL_DTYPE_BF16
          && !dfl_dtype_is_quantized (x->dtype))) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: %s is missing or not a 2-D F32, F16, BF16 or block-quantized matrix",
                 dfl_target_dir (t), name);
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
  /* the head's products read the copy the target laid out for the SIMD
   * paths, where it has one (a block-quantized head on x86: the same bits,
   * at the memory's rate); the blocks stay where lookups of the embedding
   * read them */
  {
    DflTensor own = dfl_target_head_tensor (target);

    if (own.packed && own.handle == trunk->head.handle && own.dtype == trunk->head.dtype)
      trunk->head.packed = own.packed;
  }
  return TRUE;
}
