/* gst-dflash — which back ends run the target: the one file of the core
 * that knows what this build has (the registry of kernels/backend says
 * which back ends exist; this says which of them have a target engine). */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "target-private.h"

#include "dfl-error.h"

#ifdef HAVE_CUDA
#include "cuda/cuda-target.h"
#endif

const DflTargetEngine *
dfl_target_engine_for (DflBackendId backend, GError **error)
{
  switch (backend) {
    case DFL_BACKEND_CPU:
      return &dfl_target_cpu_engine;
#ifdef HAVE_CUDA
    case DFL_BACKEND_CUDA:
      return &dfl_cuda_target_engine;
#endif
    default:
      break;
  }
  if (!dfl_backend_built (backend))
    g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                 "backend=%s is not available in this build", dfl_backend_name (backend));
  else
    g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                 "backend=%s runs no target: its kernels run the drafter only",
                 dfl_backend_name (backend));
  return NULL;
}
