/* gst-dflash — binding the drafter to a target on a device: the CPU, or
 * any device of the back-end interface that runs the block's ops. The
 * drafter is one (the draft-* files, over dfl-backend.h's ops); what a
 * device lacks is refused here, by name.
 */
#include "drafter-private.h"
#include "dfl-error.h"

DflDrafterWeights *
dfl_drafter_weights_bind (DflDrafterWeights *w, DflDevice *device, const DflDraftTrunk *trunk,
                          DflDtype matrix_dtype, GError **error)
{
  g_return_val_if_fail (w != NULL && trunk != NULL, NULL);
  if (w->engine) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "%s: the drafter is bound already; bind the weights it was loaded as", w->path);
    return NULL;
  }
  if (!dfl_draft_trunk_check (trunk, device, w->path, &w->g, w->selector, error))
    return NULL;
  return dfl_drafter_weights_bind_net (w, device, trunk, matrix_dtype, error);
}
