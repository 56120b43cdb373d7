/* gst-dflash — a CPU target's trunk (its embedding and LM head) uploaded
 * to a CUDA card, for the drafter's tests and benches: the drafter then
 * reads it on the card, as it reads a CUDA target's own.
 */
#include "cuda-drafter.h"
#include "dfl-error.h"
#include "dfl-kernels.h"

/* Elements converted on the host per upload. */
#define CONVERT_CHUNK (1 << 20)
/* Where the head starts after the embedding (cuBLAS likes 256-byte starts). */
#define TRUNK_ALIGN 256

static gsize
aligned (gsize bytes)
{
  return (bytes + TRUNK_ALIGN - 1) / TRUNK_ALIGN * TRUNK_ALIGN;
}

/* --- the target's trunk from its tensors --- */

static gboolean
put_trunk_tensor (DflCudaDevice *dev, const DflStoredTensor *t, DflDtype as, guint8 *d,
                  GError **error)
{
  gsize n = (gsize) t->n_elements, chunk = MIN (n, (gsize) CONVERT_CHUNK);
  gsize es = dfl_dtype_size (as);
  float *f = g_new (float, chunk);
  guint16 *h = g_new (guint16, chunk);
  gboolean ok = TRUE;

  for (gsize done = 0; done < n && ok; done += chunk) {
    gsize m = MIN (chunk, n - done);
    dfl_tensor_read_f32 (t, (gint64) done, (gint64) m, f);
    if (as == DFL_DTYPE_F32) {
      ok = dfl_cuda_upload (dev, d + done * es, f, m * es, error);
      continue;
    }
    for (gsize i = 0; i < m; i++)
      h[i] = as == DFL_DTYPE_BF16 ? dfl_f32_to_bf16 (f[i]) : dfl_f32_to_f16 (f[i]);
    ok = dfl_cuda_upload (dev, d + done * es, h, m * es, error);
  }
  g_free (f);
  g_free (h);
  return ok;
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
  for (int i = 0; i < n; i++)
    if (!put_trunk_tensor (dev, t[i], as, d + slot * i, error)) {
      dfl_cuda_free (dev, d);
      return FALSE;
    }
  trunk->embed = dfl_tensor_2d (device, d, 0, as, vocab, hidden);
  trunk->head = dfl_tensor_2d (device, d, slot * (n - 1), as, vocab, hidden);
  *d_mem = d;
  return TRUE;
}
