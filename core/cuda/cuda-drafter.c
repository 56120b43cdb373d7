/* gst-dflash — a CPU target's trunk (its embedding and LM head) uploaded
 * to a CUDA card, for the drafter's tests and benches: the drafter then
 * reads it on the card, as it reads a CUDA target's own.
 */
#include "cuda-drafter.h"
#include "dfl-error.h"
#include "matrix-upload.h"

/* Where the head starts after the embedding (cuBLAS likes 256-byte starts). */
#define TRUNK_ALIGN 256

static gsize
aligned (gsize bytes)
{
  return (bytes + TRUNK_ALIGN - 1) / TRUNK_ALIGN * TRUNK_ALIGN;
}

gboolean
dfl_cuda_upload_target_trunk (DflDevice *device, const DflSafetensors *target, gboolean tied,
                              int vocab, int hidden, DflDtype as, DflDraftTrunk *trunk,
                              void **d_mem, GError **error)
{
  DflCudaDevice *dev = dfl_device_native (device);
  const char *names[2] = { "model.embed_tokens.weight", "lm_head.weight" };
  const DflStoredTensor *t[2] = { NULL, NULL };
  gsize bytes = (gsize) vocab * hidden * dfl_dtype_size (as);
  gsize slot = aligned (bytes);
  int n = tied ? 1 : 2;
  guint8 *d;

  *d_mem = NULL;
  for (int i = 0; i < n; i++) {
    gint64 shape[2] = { vocab, hidden };
    if (!(t[i] = dfl_safetensors_expect (target, names[i], 2, shape, error)))
      return FALSE;
  }
  if (!(d = dfl_cuda_alloc (dev, slot * n, error)))
    return FALSE;
  /* converted on the host as a target's matrices are (matrix-upload.h) */
  for (int i = 0; i < n; i++)
    if (!dfl_matrix_upload (device, d, slot * i, t[i]->dtype, t[i]->data, vocab, hidden, as,
                            names[i], error)) {
      dfl_cuda_free (dev, d);
      return FALSE;
    }
  trunk->embed = dfl_tensor_2d (device, d, 0, as, vocab, hidden);
  trunk->head = dfl_tensor_2d (device, d, slot * (n - 1), as, vocab, hidden);
  *d_mem = d;
  return TRUE;
}
