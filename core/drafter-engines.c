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

#ifdef HAVE_CUDA
#include "cuda-drafter.h"
#endif
#ifdef HAVE_VULKAN
#include "dfl-vk-drafter.h"
#endif

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
  switch (backend) {
    case DFL_BACKEND_CPU:
      if (!dfl_draft_trunk_check (trunk, NULL, FALSE, w->path, &w->g, w->selector, error))
        return NULL;
      return dfl_drafter_weights_new_bound (w, NULL, NULL, &dfl_draft_engine_cpu, NULL, trunk);
    case DFL_BACKEND_CUDA:
#ifdef HAVE_CUDA
      if (!dfl_draft_trunk_check (trunk, device, TRUE, w->path, &w->g, w->selector, error))
        return NULL;
      return dfl_cuda_drafter_bind (w, device, trunk, matrix_dtype, error);
#else
      break;
#endif
    case DFL_BACKEND_VULKAN:
#ifdef HAVE_VULKAN
      /* the target stays on the CPU: its trunk goes up with the weights */
      if (!dfl_draft_trunk_check (trunk, device, FALSE, w->path, &w->g, w->selector, error))
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
