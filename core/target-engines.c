/* gst-dflash — which engine runs the target on a back end: the host's
 * (target-cpu.c: the checkpoint used in place) on the CPU, the device
 * engine (target-device.c: the weights put on the device, the same
 * forward) on any other back end this build has; whether that device runs
 * a target is its capabilities' to say (the upload checks). */
#include "target-private.h"

#include "dfl-error.h"

const DflTargetEngine *
dfl_target_engine_for (DflBackendId backend, GError **error)
{
  if (backend == DFL_BACKEND_CPU)
    return &dfl_target_cpu_engine;
  if (dfl_backend_built (backend))
    return &dfl_device_target_engine;
  g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
               "backend=%s is not available in this build", dfl_backend_name (backend));
  return NULL;
}
