/* GGUF writing: a file made by the writer read back by the reader (every
 * value type, tensors at aligned offsets, an unfinished file never in
 * place), and `dflash quantize`'s core: each matrix's type by the scheme,
 * its bytes those of the row quantizer, the metadata copied, bad input
 * refused naming the file and the tensor.
 */
#include <glib.h>
#include <glib/gstdio.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "dfl-error.h"
#include "dfl-kernels.h"
#include "gguf-quantize.h"
#include "gguf-write.h"
#include "gguf.h"

/* A file name of this process's own in the temporary folder. */
static char *
scratch_path (const char *name)
{
  g_autofree char *base = g_strdup_printf ("dfl-%d-%s", (int) getpid (), name);

  return g_build_filename (g_get_tmp_dir (), base, NULL);
}

/* Deterministic values in about ±1, a few larger. */
static void
fill (float *x, gsize n, guint32 seed)
{
  for (gsize i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    x[i] = ((float) (seed >> 8) / (float) (1u << 24) - 0.5f) * ((i % 97) == 0 ? 8.0f : 2.0f);
  }
}

static void
test_round_trip (void)
{
  g_autofree char *path = scratch_path ("dfl-gguf-write.gguf");
  g_autoptr (DflGgufWriter) w = dfl_gguf_writer_new (64);
  g_autoptr (GError) error = NULL;
  g_autoptr (DflGguf) g = NULL;
  const char *strs[] = { "a", "", "ünïcode" };
  const gint16 shorts[] = { -3, 7, 32000 };
  DflGgufValue values[] = {
    { .key = "k.u8", .type = DFL_GGUF_UINT8, .u = 200 },
    { .key = "k.i8", .type = DFL_GGUF_INT8, .i = -100 },
    { .key = "k.u16", .type = DFL_GGUF_UINT16, .u = 60000 },
    { .key = "k.i32", .type = DFL_GGUF_INT32, .i = -2000000000 },
    { .key = "k.u64", .type = DFL_GGUF_UINT64, .u = G_GUINT64_CONSTANT (1) << 40 },
    { .key = "k.i64", .type = DFL_GGUF_INT64, .i = -(G_GINT64_CONSTANT (1) << 40) },
    { .key = "k.f32", .type = DFL_GGUF_FLOAT32, .f = 0.1f },
    { .key = "k.f64", .type = DFL_GGUF_FLOAT64, .f = 0.1 },
    { .key = "k.bool", .type = DFL_GGUF_BOOL, .i = 1 },
    { .key = "k.str", .type = DFL_GGUF_STRING, .str = "qwen3" },
    { .key = "k.strs", .type = DFL_GGUF_ARRAY, .item_type = DFL_GGUF_STRING, .n = 3,
      .strs = strs },
    { .key = "k.shorts", .type = DFL_GGUF_ARRAY, .item_type = DFL_GGUF_INT16, .n = 3,
      .items = (const guint8 *) shorts },
  };
  const gint64 shape_a[] = { 3, 40 }, shape_b[] = { 2, 64 }, shape_c[] = { 5 };
  float a[120], c[5], rows_b[128];
  guint8 b[2 * 2 * 34];
  const DflGgufValue *v;
  const DflStoredTensor *t;

  fill (a, 120, 1);
  fill (c, 5, 2);
  fill (rows_b, 128, 3);
  g_assert_true (dfl_quantize_row (DFL_DTYPE_Q8_0, rows_b, b, 128));
  for (guint i = 0; i < G_N_ELEMENTS (values); i++)
    dfl_gguf_writer_add_value (w, &values[i]);
  dfl_gguf_writer_set_u32 (w, "k.u32", 7);
  dfl_gguf_writer_set_u32 (w, "k.u32", 8);   /* replaced, in place */
  g_assert_true (dfl_gguf_writer_add_tensor (w, "a", DFL_DTYPE_F32, 2, shape_a, &error));
  g_assert_true (dfl_gguf_writer_add_tensor (w, "b", DFL_DTYPE_Q8_0, 2, shape_b, &error));
  g_assert_true (dfl_gguf_writer_add_tensor (w, "c", DFL_DTYPE_F32, 1, shape_c, &error));
  g_assert_no_error (error);
  g_assert_true (dfl_gguf_writer_begin (w, path, &error));
  /* in pieces that cross tensors */
  g_assert_true (dfl_gguf_writer_write (w, a, 100 * sizeof (float), &error));
  g_assert_true (dfl_gguf_writer_write (w, a + 100, 20 * sizeof (float), &error));
  g_assert_true (dfl_gguf_writer_write (w, b, sizeof b, &error));
  g_assert_true (dfl_gguf_writer_write (w, c, sizeof c, &error));
  g_assert_true (dfl_gguf_writer_finish (w, &error));
  g_assert_no_error (error);

  g = dfl_gguf_open (path, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (dfl_gguf_version (g), ==, 3);
  g_assert_cmpuint (dfl_gguf_n_values (g), ==, G_N_ELEMENTS (values) + 1);
  g_assert_cmpuint (dfl_gguf_data_offset (g) % 64, ==, 0);
  for (guint i = 0; i < G_N_ELEMENTS (values); i++) {
    v = dfl_gguf_nth_value (g, i);
    g_assert_cmpstr (v->key, ==, values[i].key);
    g_assert_cmpint (v->type, ==, values[i].type);
    switch (values[i].type) {
      case DFL_GGUF_UINT8: case DFL_GGUF_UINT16: case DFL_GGUF_UINT64:
        g_assert_cmpuint (v->u, ==, values[i].u);
        break;
      case DFL_GGUF_FLOAT32: case DFL_GGUF_FLOAT64:
        g_assert_cmpfloat (v->f, ==, values[i].f);
        break;
      case DFL_GGUF_STRING: case DFL_GGUF_ARRAY:
        break;                  /* below */
      default:
        g_assert_cmpint (v->i, ==, values[i].i);
    }
  }
  g_assert_cmpstr (dfl_gguf_find_value (g, "k.str")->str, ==, "qwen3");
  v = dfl_gguf_find_value (g, "k.strs");
  g_assert_cmpuint (v->n, ==, 3);
  for (guint i = 0; i < 3; i++)
    g_assert_cmpstr (v->strs[i], ==, strs[i]);
  v = dfl_gguf_find_value (g, "k.shorts");
  for (guint i = 0; i < 3; i++)
    g_assert_cmpint (dfl_gguf_array_int (v, i), ==, shorts[i]);
  g_assert_cmpuint (dfl_gguf_find_value (g, "k.u32")->u, ==, 8);
  g_assert_cmpuint (dfl_gguf_n_tensors (g), ==, 3);
  t = dfl_gguf_find_tensor (g, "a");
  g_assert_cmpint (t->shape[0], ==, 3);
  g_assert_cmpint (t->shape[1], ==, 40);
  g_assert_cmpmem (t->data, t->n_bytes, a, sizeof a);
  t = dfl_gguf_find_tensor (g, "b");
  g_assert_cmpint (t->dtype, ==, DFL_DTYPE_Q8_0);
  g_assert_cmpuint ((guintptr) (t->data - (const guint8 *) dfl_gguf_find_tensor (g, "a")->data)
                    % 64, ==, 0);
  g_assert_cmpmem (t->data, t->n_bytes, b, sizeof b);
  t = dfl_gguf_find_tensor (g, "c");
  g_assert_cmpmem (t->data, t->n_bytes, c, sizeof c);
  g_clear_pointer (&g, dfl_gguf_free);
  g_unlink (path);
}

/* A file whose data falls short, or runs over, is refused and never put
 * in place; a shape GGUF cannot hold is refused when added. */
static void
test_writer_refuses (void)
{
  g_autofree char *path = scratch_path ("dfl-gguf-short.gguf");
  const gint64 shape[] = { 2, 64 }, odd[] = { 2, 48 };
  float x[128] = { 0 };
  g_autoptr (GError) error = NULL;

  g_unlink (path);
  {
    g_autoptr (DflGgufWriter) w = dfl_gguf_writer_new (32);

    g_assert_true (dfl_gguf_writer_add_tensor (w, "x", DFL_DTYPE_F32, 2, shape, &error));
    g_assert_false (dfl_gguf_writer_add_tensor (w, "q", DFL_DTYPE_Q4_K, 2, shape, &error));
    g_assert_error (error, DFL_ERROR, DFL_ERROR_INVALID);
    g_assert_nonnull (strstr (error->message, "'q'"));
    g_clear_error (&error);
    g_assert_false (dfl_gguf_writer_add_tensor (w, "o", DFL_DTYPE_Q8_0, 2, odd, &error));
    g_assert_nonnull (strstr (error->message, "48"));
    g_clear_error (&error);
    g_assert_true (dfl_gguf_writer_begin (w, path, &error));
    g_assert_true (dfl_gguf_writer_write (w, x, 100 * sizeof (float), &error));
    g_assert_false (dfl_gguf_writer_finish (w, &error));
    g_assert_error (error, DFL_ERROR, DFL_ERROR_INVALID);
    g_assert_nonnull (strstr (error->message, "'x' has 400 of its 512 bytes"));
    g_clear_error (&error);
  }
  g_assert_false (g_file_test (path, G_FILE_TEST_EXISTS));
  {
    g_autoptr (DflGgufWriter) w = dfl_gguf_writer_new (32);

    g_assert_true (dfl_gguf_writer_add_tensor (w, "x", DFL_DTYPE_F32, 1, shape + 1, &error));
    g_assert_true (dfl_gguf_writer_begin (w, path, &error));
    g_assert_false (dfl_gguf_writer_write (w, x, sizeof x, &error));
    g_assert_error (error, DFL_ERROR, DFL_ERROR_INVALID);
    g_clear_error (&error);
  }
  /* the temporary is gone too: nothing of the name is left in the folder */
  g_assert_false (g_file_test (path, G_FILE_TEST_EXISTS));
}

/* A small model's F32 file: 8 layers of attn_v [4][256] and attn_q
 * [4][96], a [4][48] matrix no block fits, a norm, a tied embedding
 * [6][256]. */
static const struct {
  const char *name;
  gint64 rows, cols;
} model_tensors[] = {
  { "token_embd.weight", 6, 256 }, { "output_norm.weight", 1, 256 }, { "odd.weight", 4, 48 },
};

static char *
write_model (void)
{
  char *path = scratch_path ("dfl-gguf-model-f32.gguf");
  g_autoptr (DflGgufWriter) w = dfl_gguf_writer_new (32);
  g_autoptr (GError) error = NULL;
  DflGgufValue arch = { .key = "general.architecture", .type = DFL_GGUF_STRING, .str = "qwen3" };
  guint32 seed = 10;

  dfl_gguf_writer_add_value (w, &arch);
  dfl_gguf_writer_set_u32 (w, "general.file_type", 0);
  for (guint i = 0; i < G_N_ELEMENTS (model_tensors); i++) {
    gint64 shape[] = { model_tensors[i].rows, model_tensors[i].cols };
    gboolean norm = g_str_has_suffix (model_tensors[i].name, "norm.weight");

    g_assert_true (dfl_gguf_writer_add_tensor (w, model_tensors[i].name, DFL_DTYPE_F32,
                                               norm ? 1 : 2, norm ? shape + 1 : shape, &error));
  }
  for (int layer = 0; layer < 8; layer++) {
    const gint64 v[] = { 4, 256 }, q[] = { 4, 96 };
    g_autofree char *vn = g_strdup_printf ("blk.%d.attn_v.weight", layer);
    g_autofree char *qn = g_strdup_printf ("blk.%d.attn_q.weight", layer);

    g_assert_true (dfl_gguf_writer_add_tensor (w, vn, DFL_DTYPE_F32, 2, v, &error));
    g_assert_true (dfl_gguf_writer_add_tensor (w, qn, DFL_DTYPE_F32, 2, q, &error));
  }
  g_assert_no_error (error);
  g_assert_true (dfl_gguf_writer_begin (w, path, &error));
  for (guint i = 0; i < G_N_ELEMENTS (model_tensors); i++) {
    gboolean norm = g_str_has_suffix (model_tensors[i].name, "norm.weight");
    gsize n = (gsize) (norm ? 1 : model_tensors[i].rows) * model_tensors[i].cols;
    g_autofree float *x = g_new (float, n);

    fill (x, n, seed++);
    g_assert_true (dfl_gguf_writer_write (w, x, n * sizeof (float), &error));
  }
  for (int layer = 0; layer < 8; layer++) {
    float v[4 * 256], q[4 * 96];

    fill (v, G_N_ELEMENTS (v), seed++);
    fill (q, G_N_ELEMENTS (q), seed++);
    g_assert_true (dfl_gguf_writer_write (w, v, sizeof v, &error));
    g_assert_true (dfl_gguf_writer_write (w, q, sizeof q, &error));
  }
  g_assert_true (dfl_gguf_writer_finish (w, &error));
  g_assert_no_error (error);
  return path;
}

static void
test_quantize (void)
{
  g_autofree char *in = write_model ();
  g_autofree char *out = scratch_path ("dfl-gguf-model-q4_k_m.gguf");
  g_autofree char *again = scratch_path ("dfl-gguf-model-again.gguf");
  g_autoptr (GError) error = NULL;
  g_autoptr (DflGguf) src = NULL, q = NULL;

  g_assert_true (dfl_gguf_quantize (in, out, DFL_QUANT_Q4_K_M, NULL, NULL, &error));
  g_assert_no_error (error);
  src = dfl_gguf_open (in, &error);
  q = dfl_gguf_open (out, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (dfl_gguf_find_value (q, "general.architecture")->str, ==, "qwen3");
  g_assert_cmpuint (dfl_gguf_find_value (q, "general.file_type")->u, ==, 15);
  g_assert_cmpuint (dfl_gguf_find_value (q, "general.quantization_version")->u, ==, 2);
  g_assert_cmpuint (dfl_gguf_n_tensors (q), ==, dfl_gguf_n_tensors (src));
  for (guint i = 0; i < dfl_gguf_n_tensors (src); i++) {
    const DflStoredTensor *a = dfl_gguf_nth_tensor (src, i), *b = dfl_gguf_nth_tensor (q, i);
    int layer = -1;
    DflDtype want;

    g_assert_cmpstr (a->name, ==, b->name);
    sscanf (a->name, "blk.%d.", &layer);
    if (a->n_dims == 1 || strcmp (a->name, "odd.weight") == 0)
      want = DFL_DTYPE_F32;                       /* a norm; 48: no block fits */
    else if (strcmp (a->name, "token_embd.weight") == 0)
      want = DFL_DTYPE_Q6_K;                      /* tied: the head */
    else if (strstr (a->name, "attn_q"))
      want = DFL_DTYPE_Q4_0;                      /* 96: Q4_K's nearest */
    else
      want = layer == 0 || layer == 3 || layer == 6 || layer == 7 ? DFL_DTYPE_Q6_K
                                                                 : DFL_DTYPE_Q4_K;
    g_assert_cmpint (b->dtype, ==, want);
    g_assert_cmpint (b->shape[0], ==, a->shape[0]);
    if (want == DFL_DTYPE_F32) {
      g_assert_cmpmem (b->data, b->n_bytes, a->data, a->n_bytes);
    }
    else {
      g_autofree guint8 *blocks = g_malloc (b->n_bytes);
      gsize row = dfl_dtype_row_bytes (want, a->shape[1]);

      for (gint64 r = 0; r < a->shape[0]; r++)
        g_assert_true (dfl_quantize_row (want, (const float *) a->data + r * a->shape[1],
                                         blocks + r * row, a->shape[1]));
      g_assert_cmpmem (b->data, b->n_bytes, blocks, b->n_bytes);
    }
  }

  /* the quantized file is refused as input, naming it and the tensor */
  g_assert_false (dfl_gguf_quantize (out, again, DFL_QUANT_Q8_0, NULL, NULL, &error));
  g_assert_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, out));
  g_assert_nonnull (strstr (error->message, "'token_embd.weight' is Q6_K already"));
  g_clear_error (&error);
  g_assert_false (g_file_test (again, G_FILE_TEST_EXISTS));
  g_assert_false (dfl_gguf_quantize (in, in, DFL_QUANT_Q8_0, NULL, NULL, &error));
  g_assert_error (error, DFL_ERROR, DFL_ERROR_INVALID);
  g_clear_error (&error);
  g_clear_pointer (&src, dfl_gguf_free);
  g_clear_pointer (&q, dfl_gguf_free);
  g_unlink (in);
  g_unlink (out);
}

static void
test_scheme_names (void)
{
  g_autoptr (GError) error = NULL;
  DflQuantScheme s;

  g_assert_true (dfl_quant_scheme_parse ("Q4_K_M", &s, &error));
  g_assert_cmpint (s, ==, DFL_QUANT_Q4_K_M);
  g_assert_cmpstr (dfl_quant_scheme_name (s), ==, "q4_k_m");
  g_assert_false (dfl_quant_scheme_parse ("q5_k", &s, &error));
  g_assert_error (error, DFL_ERROR, DFL_ERROR_INVALID);
  g_assert_nonnull (strstr (error->message, "'q5_k'"));
  /* Q6_K's nearest where 256 does not divide the width, the stored type
   * where 32 does not either */
  g_assert_cmpint (dfl_quant_scheme_type (DFL_QUANT_Q6_K, "blk.0.ffn_up.weight", 384, 8, TRUE,
                                          DFL_DTYPE_BF16), ==, DFL_DTYPE_Q8_0);
  g_assert_cmpint (dfl_quant_scheme_type (DFL_QUANT_Q4_0, "blk.0.ffn_up.weight", 40, 8, TRUE,
                                          DFL_DTYPE_BF16), ==, DFL_DTYPE_BF16);
  /* an untied model's head is output, not the embedding */
  g_assert_cmpint (dfl_quant_scheme_type (DFL_QUANT_Q4_K, "output.weight", 512, 8, TRUE,
                                          DFL_DTYPE_F32), ==, DFL_DTYPE_Q6_K);
  g_assert_cmpint (dfl_quant_scheme_type (DFL_QUANT_Q4_K, "token_embd.weight", 512, 8, TRUE,
                                          DFL_DTYPE_F32), ==, DFL_DTYPE_Q4_K);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/gguf/write/round-trip", test_round_trip);
  g_test_add_func ("/gguf/write/refuses", test_writer_refuses);
  g_test_add_func ("/gguf/quantize/schemes", test_scheme_names);
  g_test_add_func ("/gguf/quantize/file", test_quantize);
  return g_test_run ();
}
