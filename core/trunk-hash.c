/* gst-dflash — a sidecar's binding to its target: the trunk hash, and the
 * check that refuses a drafter made for another target.
 */
#include "drafter-private.h"
#include "dfl-error.h"

#define FNV_OFFSET G_GUINT64_CONSTANT (0xcbf29ce484222325)
#define FNV_PRIME G_GUINT64_CONSTANT (0x100000001b3)
#define MIB ((gsize) 1 << 20)

static guint64
fnv1a (guint64 h, const guint8 *p, gsize n)
{
  for (gsize i = 0; i < n; i++) {
    h ^= p[i];
    h *= FNV_PRIME;
  }
  return h;
}

/* A tensor's whole bytes when at most 2 MiB, else its first MiB then its
 * last: a multi-gigabyte embedding hashes in microseconds and still tells
 * two checkpoints apart. */
static guint64
hash_tensor (guint64 h, const DflStoredTensor *t)
{
  if (t->n_bytes <= 2 * MIB)
    return fnv1a (h, t->data, t->n_bytes);
  h = fnv1a (h, t->data, MIB);
  return fnv1a (h, t->data + t->n_bytes - MIB, MIB);
}

gboolean
dfl_trunk_hash64 (const DflSafetensors *target, gboolean tied, char hex[17], GError **error)
{
  const char *names[2] = { "model.embed_tokens.weight", "lm_head.weight" };
  guint64 h = FNV_OFFSET;

  g_return_val_if_fail (target != NULL && hex != NULL, FALSE);
  for (int i = 0; i < (tied ? 1 : 2); i++) {
    const DflStoredTensor *t = dfl_safetensors_find (target, names[i]);
    if (!t) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "%s has no %s%s", dfl_safetensors_path (target),
                   names[i], i ? " (its config says the head is untied)" : "");
      return FALSE;
    }
    h = hash_tensor (h, t);
  }
  g_snprintf (hex, 17, "%016" G_GINT64_MODIFIER "x", h);
  return TRUE;
}

gboolean
dfl_drafter_weights_check_target (const DflDrafterWeights *d, const DflSafetensors *target,
                                  gboolean tied, int target_layers, int hidden, int vocab,
                                  GError **error)
{
  const DflDrafterGeometry *g = &d->g;
  char have[17];

  g_return_val_if_fail (d != NULL && target != NULL, FALSE);
  if (g->target_layers != target_layers || g->hidden != hidden || g->vocab != vocab) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_MISMATCH,
                 "%s drafts for a target of %d layers, hidden %d, vocab %d; %s has %d layers, hidden %d, vocab %d",
                 d->path, g->target_layers, g->hidden, g->vocab, dfl_safetensors_path (target),
                 target_layers, hidden, vocab);
    return FALSE;
  }
  /* a released v1 drafter carries no binding: the sizes are all there is */
  if (d->v1)
    return TRUE;
  if (!d->has_binding) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_MISMATCH,
                 "%s has no base_binding in its __metadata__; it cannot say which target it was made for",
                 d->path);
    return FALSE;
  }
  if (!dfl_trunk_hash64 (target, tied, have, error))
    return FALSE;
  if (g_strcmp0 (have, d->binding) != 0) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_MISMATCH,
                 "%s was made for the target %s, this target (%s) is %s",
                 d->path, d->binding, dfl_safetensors_path (target), have);
    return FALSE;
  }
  return TRUE;
}
