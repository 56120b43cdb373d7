/* gst-dflash — random drafter weights for the benches. */
#include "bench-drafter-weights.h"
#include "dfl-kernels.h"

#include <string.h>

static guint64 rng_state = 0x9e3779b97f4a7c15ull;

float
dfl_bench_rnd (void)
{
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return (float) ((rng_state * 0x2545f4914f6cdd1dull) >> 40) / (float) (1 << 24) - 0.5f;
}

typedef struct {
  guint64 fc_bytes, book_bytes;
} Fill;

static void
fill (const char *name, DflDtype dtype, gsize n, void *data, gboolean writable, gpointer user)
{
  Fill *f = user;

  g_assert (writable);
  if (strstr (name, "codebook")) {
    g_assert (dtype == DFL_DTYPE_F16);
    for (gsize i = 0; i < n; i++)
      ((guint16 *) data)[i] = dfl_f32_to_f16 (dfl_bench_rnd ());
    f->book_bytes += n * 2;
    return;
  }
  if (dtype == DFL_DTYPE_BF16) {
    for (gsize i = 0; i < n; i++)
      ((guint16 *) data)[i] = dfl_f32_to_bf16 (0.05f * dfl_bench_rnd ());
  } else if (dtype == DFL_DTYPE_F16) {
    for (gsize i = 0; i < n; i++)
      ((guint16 *) data)[i] = dfl_f32_to_f16 (0.05f * dfl_bench_rnd ());
  } else if (strstr (name, "norm")) {
    for (gsize i = 0; i < n; i++)
      ((float *) data)[i] = 1.0f + 0.1f * dfl_bench_rnd ();
  } else {
    for (gsize i = 0; i < n; i++)
      ((float *) data)[i] = 0.05f * dfl_bench_rnd ();
  }
  if (strcmp (name, "fc.weight") == 0)
    f->fc_bytes = n * dfl_dtype_size (dtype);
}

DflDrafterWeights *
dfl_bench_drafter_random (const DflDrafterGeometry *g, DflDtype matrix_dtype, guint64 *fc_bytes,
                          guint64 *book_bytes, GError **error)
{
  DflDrafterWeights *d = dfl_drafter_weights_new_blank_as (g, TRUE, TRUE, matrix_dtype, error);
  Fill f = { 0 };

  if (!d)
    return NULL;
  dfl_drafter_weights_foreach (d, fill, &f);
  if (fc_bytes)
    *fc_bytes = f.fc_bytes;
  if (book_bytes)
    *book_bytes = f.book_bytes;
  return d;
}
