/* gst-dflash — st-dump: the C side of the safetensors interop test.
 *
 *   st-dump read FILE [META_KEY…]   print the metadata asked for, then one
 *                                    line per tensor: name, dtype, shape, values
 *   st-dump write FILE              write a fixed set of tensors of every dtype
 *
 * Lines are tab-separated; floats print with 9 significant digits, which is
 * enough to give back the exact F32 (F16 and BF16 print as their F32 value).
 */
#include "safetensors.h"
#include "dfl-error.h"

#include <stdio.h>
#include <string.h>

static void
print_values (const DflStoredTensor *t)
{
  gint64 i;

  if (t->dtype == DFL_DTYPE_F32 || t->dtype == DFL_DTYPE_F16 || t->dtype == DFL_DTYPE_BF16) {
    g_autofree float *v = dfl_tensor_dup_f32 (t);

    for (i = 0; i < t->n_elements; i++)
      printf ("%s%.9g", i ? " " : "", (double) v[i]);
    return;
  }
  for (i = 0; i < t->n_elements; i++) {
    const guint8 *p = t->data + (gsize) i * dfl_dtype_size (t->dtype);
    gint64 v = 0;

    switch (t->dtype) {
      case DFL_DTYPE_I32: {
        gint32 x;

        memcpy (&x, p, 4);
        v = GINT32_FROM_LE (x);
        break;
      }
      case DFL_DTYPE_I64:
        memcpy (&v, p, 8);
        v = GINT64_FROM_LE (v);
        break;
      case DFL_DTYPE_I8:
        v = (gint8) p[0];
        break;
      case DFL_DTYPE_U8:
        v = p[0];
        break;
      default:
        g_assert_not_reached ();
    }
    printf ("%s%" G_GINT64_FORMAT, i ? " " : "", v);
  }
}

static int
dump (const char *path, int n_keys, char **keys)
{
  g_autoptr (DflSafetensors) st = NULL;
  GError *error = NULL;
  guint i, d;
  int k;

  st = dfl_safetensors_open (path, &error);
  if (st == NULL) {
    fprintf (stderr, "st-dump: %s\n", error->message);
    g_error_free (error);
    return 1;
  }
  for (k = 0; k < n_keys; k++) {
    const char *v = dfl_safetensors_metadata (st, keys[k]);

    printf ("meta\t%s\t%s\n", keys[k], v ? v : "<none>");
  }
  for (i = 0; i < dfl_safetensors_n_tensors (st); i++) {
    const DflStoredTensor *t = dfl_safetensors_nth (st, i);

    printf ("tensor\t%s\t%s\t", t->name, dfl_dtype_name (t->dtype));
    for (d = 0; d < t->n_dims; d++)
      printf ("%s%" G_GINT64_FORMAT, d ? "," : "", t->shape[d]);
    printf ("\t");
    print_values (t);
    printf ("\n");
  }
  return 0;
}

/* Floats chosen to exercise F16/BF16 rounding: ties, the edges of the F16
 * range, subnormals, signed zero. interop.py holds the same list. */
static const float float_cases[] = {
  0.1f, -2.5f, 65504.0f, 65519.0f, 65520.0f, 1e-7f, 3e-8f, 2.98023224e-8f, -0.0f,
  1.00048828125f, 1.00146484375f, 1.00390625f, 1.01171875f, 3.0e38f, -1e-40f, 12345.678f,
};

static int
write_all (const char *path)
{
  g_autoptr (DflSafetensorsWriter) w = dfl_safetensors_writer_new ();
  const gint64 s23[] = { 2, 3 }, s5[] = { 5 }, s22[] = { 2, 2 }, s4[] = { 4 }, s04[] = { 0, 4 };
  const gint64 sc[] = { G_N_ELEMENTS (float_cases) };
  const gint32 i32[5] = { G_MININT32, -1, 0, 1, G_MAXINT32 };
  const gint64 i64[4] = { G_MININT64, (G_GINT64_CONSTANT (1) << 40) + 3, -5, G_MAXINT64 };
  const gint8 i8[4] = { -128, -1, 0, 127 };
  const guint8 u8[4] = { 0, 1, 200, 255 };
  const float scalar = 42.5f;
  float f32[6];
  GError *error = NULL;
  gboolean ok;
  int i;

  for (i = 0; i < 6; i++)
    f32[i] = (float) ((i * 7) % 13 - 6) / 3.0f;

  ok = dfl_safetensors_writer_add_f32 (w, "f32", DFL_DTYPE_F32, 2, s23, f32, &error)
    && dfl_safetensors_writer_add_f32 (w, "f16", DFL_DTYPE_F16, 1, sc, float_cases, &error)
    && dfl_safetensors_writer_add_f32 (w, "bf16", DFL_DTYPE_BF16, 1, sc, float_cases, &error)
    && dfl_safetensors_writer_add (w, "i32", DFL_DTYPE_I32, 1, s5, i32, &error)
    && dfl_safetensors_writer_add (w, "i64", DFL_DTYPE_I64, 2, s22, i64, &error)
    && dfl_safetensors_writer_add (w, "i8", DFL_DTYPE_I8, 1, s4, i8, &error)
    && dfl_safetensors_writer_add (w, "u8", DFL_DTYPE_U8, 2, s22, u8, &error)
    && dfl_safetensors_writer_add_f32 (w, "scalar", DFL_DTYPE_F32, 0, NULL, &scalar, &error)
    && dfl_safetensors_writer_add (w, "empty", DFL_DTYPE_F32, 2, s04, NULL, &error);
  if (ok) {
    dfl_safetensors_writer_set_metadata (w, "format", "np");
    dfl_safetensors_writer_set_metadata (w, "origin", "st-dump \xc3\xbc\"q\"");
    ok = dfl_safetensors_writer_write (w, path, &error);
  }
  if (!ok) {
    fprintf (stderr, "st-dump: %s\n", error->message);
    g_error_free (error);
    return 1;
  }
  return 0;
}

int
main (int argc, char **argv)
{
  if (argc >= 3 && strcmp (argv[1], "read") == 0)
    return dump (argv[2], argc - 3, argv + 3);
  if (argc == 3 && strcmp (argv[1], "write") == 0)
    return write_all (argv[2]);
  fprintf (stderr, "usage: st-dump read FILE [META_KEY...] | st-dump write FILE\n");
  return 2;
}
