/* Fuzz target: the GGUF reader, and what reads a qwen3 file's metadata.
 *
 * An input is a .gguf file. Whatever opens is read through: every
 * metadata value (arrays item by item), every float tensor converted; then
 * the same file as a Qwen3 checkpoint (config, tensors under their Hugging
 * Face names) and as a tokenizer, each of which must open or fail with an
 * error, never crash.
 */
#include "fuzz-common.h"
#include "dfl-error.h"
#include "gguf.h"
#include "qwen3-gguf.h"
#include "tokenizer.h"

static void
read_through (const DflGguf *g)
{
  volatile double sink = 0;

  for (guint i = 0; i < dfl_gguf_n_values (g); i++) {
    const DflGgufValue *v = dfl_gguf_nth_value (g, i);

    g_assert (dfl_gguf_find_value (g, v->key) == v);
    if (v->type == DFL_GGUF_STRING)
      sink += strlen (v->str);
    else if (v->type == DFL_GGUF_ARRAY && v->item_type == DFL_GGUF_STRING)
      for (guint64 j = 0; j < v->n; j++)
        sink += strlen (v->strs[j]);
    else if (v->type == DFL_GGUF_ARRAY && v->item_type != DFL_GGUF_FLOAT32
             && v->item_type != DFL_GGUF_FLOAT64 && v->item_type != DFL_GGUF_BOOL)
      for (guint64 j = 0; j < v->n; j++)
        sink += dfl_gguf_array_int (v, j);
    else
      sink += v->f + v->i;
  }
  for (guint i = 0; i < dfl_gguf_n_tensors (g); i++) {
    const DflStoredTensor *t = dfl_gguf_nth_tensor (g, i);

    gint64 row = t->shape[t->n_dims - 1];

    g_assert (dfl_gguf_find_tensor (g, t->name) == t);
    /* the bytes are what the type and shape need, exactly */
    g_assert ((guint64) t->n_bytes / dfl_dtype_row_bytes (t->dtype, row)
              == (guint64) (t->n_elements / row));
    g_assert (t->n_bytes % dfl_dtype_row_bytes (t->dtype, row) == 0);
    if (dfl_dtype_is_float (t->dtype) && t->n_elements <= (1 << 20)) {
      g_autofree float *v = dfl_tensor_dup_f32 (t);

      for (gint64 j = 0; j < t->n_elements; j++)
        sink += v[j];
    } else {
      for (gsize j = 0; j < MIN (t->n_bytes, (gsize) 1 << 20); j++)
        sink += t->data[j];
    }
  }
  (void) sink;
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  g_autofree char *path = fuzz_write ("input.gguf", data, size);
  g_autoptr (DflGguf) g = NULL;
  g_autoptr (DflSafetensors) st = NULL;
  g_autoptr (DflTokenizer) tok = NULL;
  g_autoptr (GError) error = NULL;
  DflQwen3Config cfg;

  g = dfl_gguf_open (path, &error);
  g_assert ((g == NULL) == (error != NULL));
  if (!g) {
    g_assert (error->domain == DFL_ERROR && error->message && *error->message);
    return 0;
  }
  read_through (g);
  st = dfl_qwen3_gguf_open (path, &cfg, &error);
  g_assert ((st == NULL) == (error != NULL));
  g_clear_error (&error);
  tok = dfl_tokenizer_load_gguf (path, &error);
  g_assert ((tok == NULL) == (error != NULL));
  if (tok) {
    g_autoptr (GArray) ids = dfl_tokenizer_encode (tok, "Hello world 123", -1, NULL);
    g_autofree char *text = ids ? dfl_tokenizer_decode (tok, (const int *) ids->data, ids->len,
                                                        FALSE) : NULL;
  }
  return 0;
}
