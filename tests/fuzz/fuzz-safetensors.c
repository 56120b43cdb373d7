/* Fuzz target: the safetensors reader.
 *
 * An input is a .safetensors file, or, where it starts with '{', a
 * model.safetensors.index.json next to two small valid shards (a.safetensors
 * with "x", b.safetensors with "y"). Whatever opens is then read through:
 * every float tensor converted, the metadata listed, a lookup by shape.
 */
#include "fuzz-common.h"
#include "dfl-error.h"
#include "safetensors.h"

static void
write_shards (void)
{
  static gboolean done;
  const float x[6] = { 1, 2, 3, 4, 5, 6 };
  const guint16 y[2] = { 0x3c00, 0xc000 };
  const gint64 sx[2] = { 2, 3 }, sy[1] = { 2 };
  g_autoptr (DflSafetensorsWriter) a = NULL, b = NULL;
  g_autofree char *pa = NULL, *pb = NULL;

  if (done)
    return;
  done = TRUE;
  pa = g_build_filename (fuzz_scratch (), "a.safetensors", NULL);
  pb = g_build_filename (fuzz_scratch (), "b.safetensors", NULL);
  a = dfl_safetensors_writer_new ();
  b = dfl_safetensors_writer_new ();
  if (!dfl_safetensors_writer_add (a, "x", DFL_DTYPE_F32, 2, sx, x, NULL)
      || !dfl_safetensors_writer_add (b, "y", DFL_DTYPE_F16, 1, sy, y, NULL)
      || !dfl_safetensors_writer_write (a, pa, NULL)
      || !dfl_safetensors_writer_write (b, pb, NULL))
    g_error ("fuzz: cannot write the shards");
}

static void
read_through (const DflSafetensors *st)
{
  g_auto (GStrv) keys = dfl_safetensors_metadata_keys (st);
  guint n = dfl_safetensors_n_tensors (st);
  volatile float sink = 0;

  for (int i = 0; keys && keys[i]; i++)
    sink += strlen (dfl_safetensors_metadata (st, keys[i]));
  for (guint i = 0; i < n; i++) {
    const DflStoredTensor *t = dfl_safetensors_nth (st, i);
    g_autoptr (GError) error = NULL;
    const DflStoredTensor *same;

    g_assert (dfl_safetensors_find (st, t->name) == t);
    g_assert (t->n_bytes == (gsize) t->n_elements * dfl_dtype_size (t->dtype));
    same = dfl_safetensors_expect (st, t->name, t->n_dims, t->shape, &error);
    if (t->dtype == DFL_DTYPE_F32 || t->dtype == DFL_DTYPE_F16 || t->dtype == DFL_DTYPE_BF16) {
      g_autofree float *v = NULL;

      g_assert (same == t);
      /* a big tensor of a small file is impossible; keep each input quick */
      if (t->n_elements <= (1 << 20)) {
        v = dfl_tensor_dup_f32 (t);
        for (gint64 j = 0; j < t->n_elements; j++)
          sink += v[j];
      }
    } else {
      g_assert (same == NULL && error != NULL);
      /* integer data is read as it is, byte by byte */
      for (gsize j = 0; j < t->n_bytes; j++)
        sink += t->data[j];
    }
  }
  (void) sink;
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  g_autofree char *path = NULL;
  g_autoptr (DflSafetensors) st = NULL;
  g_autoptr (GError) error = NULL;

  if (size > 0 && data[0] == '{') {
    write_shards ();
    path = fuzz_write ("model.safetensors.index.json", data, size);
  } else {
    path = fuzz_write ("input.safetensors", data, size);
  }
  st = dfl_safetensors_open (path, &error);
  g_assert ((st == NULL) == (error != NULL));
  if (st)
    read_through (st);
  else
    g_assert (error->domain == DFL_ERROR && error->message && *error->message);
  return 0;
}
