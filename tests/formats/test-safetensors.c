/* gst-dflash — tests of core/safetensors.c: the writer round trip, shards,
 * float conversions, and every bad header we refuse (each checked for its
 * error code and for a message naming the file and the offending value). */
#include "safetensors.h"
#include "dfl-error.h"
#include "test-support.h"

#include <math.h>
#include <string.h>

#include <glib/gstdio.h>

/* A fresh folder for one test, inside the run's temp folder. */
static char *
make_dir (const char *name)
{
  char *dir = g_build_filename (dfl_test_tmp_dir, name, NULL);

  g_assert_cmpint (g_mkdir_with_parents (dir, 0755), ==, 0);
  return dir;
}

static void
write_file (const char *path, const void *bytes, gsize len)
{
  GError *error = NULL;

  g_file_set_contents (path, bytes, (gssize) len, &error);
  g_assert_no_error (error);
}

/* A safetensors file as the bytes say: the 8-byte length (`header_len`, or
 * the header's own length where it is G_MAXUINT64), the header, then
 * `data_len` bytes of data. */
static char *
write_raw_len (const char *dir, const char *name, guint64 header_len, const char *header,
               gsize data_len)
{
  char *path = g_build_filename (dir, name, NULL);
  gsize hl = strlen (header);
  GByteArray *b = g_byte_array_new ();
  guint64 le;
  gsize i;

  if (header_len == G_MAXUINT64)
    header_len = hl;
  le = GUINT64_TO_LE (header_len);
  g_byte_array_append (b, (const guint8 *) &le, 8);
  g_byte_array_append (b, (const guint8 *) header, (guint) hl);
  for (i = 0; i < data_len; i++) {
    guint8 v = (guint8) (i * 7);

    g_byte_array_append (b, &v, 1);
  }
  write_file (path, b->data, b->len);
  g_byte_array_unref (b);
  return path;
}

static char *
write_raw (const char *dir, const char *name, const char *header, gsize data_len)
{
  return write_raw_len (dir, name, G_MAXUINT64, header, data_len);
}

/* A file of one tensor 'w' of `dtype` whose shape and data_offsets are the
 * JSON text given, and `data_len` bytes of data. */
static char *
write_w (const char *dir, const char *name, const char *dtype, const char *shape,
         const char *offsets, gsize data_len)
{
  g_autofree char *header = g_strdup_printf ("{\"w\":{\"dtype\":\"%s\",\"shape\":%s,"
                                             "\"data_offsets\":%s}}", dtype, shape, offsets);

  return write_raw (dir, name, header, data_len);
}

/* Opening `path` fails with `code` and a message holding the file's name and
 * the given strings. */
#define BAD_OPEN(path, code, ...)                                       \
  G_STMT_START {                                                        \
    GError *err_ = NULL;                                                \
    DflSafetensors *st_ = dfl_safetensors_open ((path), &err_);         \
    g_assert_null (st_);                                                \
    dfl_test_check_error (err_, (code), (path), __VA_ARGS__, NULL);     \
    g_error_free (err_);                                                \
  } G_STMT_END

/* The same, where the message names other files than the one opened. */
#define BAD_OPEN_OTHER(path, code, ...)                                 \
  G_STMT_START {                                                        \
    GError *err_ = NULL;                                                \
    DflSafetensors *st_ = dfl_safetensors_open ((path), &err_);         \
    g_assert_null (st_);                                                \
    dfl_test_check_error (err_, (code), __VA_ARGS__, NULL);             \
    g_error_free (err_);                                                \
  } G_STMT_END

#define F32_4 "\"dtype\":\"F32\",\"shape\":[4]"

/* ---- conversions ------------------------------------------------------- */

static guint32
bits (float f)
{
  guint32 u;

  memcpy (&u, &f, 4);
  return u;
}

static float
from_bits (guint32 u)
{
  float f;

  memcpy (&f, &u, 4);
  return f;
}

static void
test_bf16 (void)
{
  GRand *rand = g_rand_new_with_seed (1234);
  int i;

  g_assert_cmphex (dfl_f32_to_bf16 (1.0f), ==, 0x3f80);
  g_assert_cmphex (dfl_f32_to_bf16 (-2.0f), ==, 0xc000);
  g_assert_cmphex (dfl_f32_to_bf16 (-0.0f), ==, 0x8000);
  /* ties go to even */
  g_assert_cmphex (dfl_f32_to_bf16 (from_bits (0x3f808000)), ==, 0x3f80);
  g_assert_cmphex (dfl_f32_to_bf16 (from_bits (0x3f818000)), ==, 0x3f82);
  g_assert_cmphex (dfl_f32_to_bf16 (from_bits (0x3f808001)), ==, 0x3f81);
  g_assert_cmphex (dfl_f32_to_bf16 (from_bits (0x3f807fff)), ==, 0x3f80);
  /* Inf, overflow into Inf, NaN stays NaN (even a payload that would round
   * into the exponent), subnormals */
  g_assert_cmphex (dfl_f32_to_bf16 (INFINITY), ==, 0x7f80);
  g_assert_cmphex (dfl_f32_to_bf16 (-INFINITY), ==, 0xff80);
  g_assert_cmphex (dfl_f32_to_bf16 (from_bits (0x7f7fffff)), ==, 0x7f80);
  g_assert_cmphex (dfl_f32_to_bf16 (from_bits (0x7f7f7fff)), ==, 0x7f7f);
  g_assert_true (isnan (dfl_bf16_to_f32 (dfl_f32_to_bf16 (NAN))));
  g_assert_true (isnan (dfl_bf16_to_f32 (dfl_f32_to_bf16 (from_bits (0x7fffffff)))));
  g_assert_true (isnan (dfl_bf16_to_f32 (dfl_f32_to_bf16 (from_bits (0x7f800001)))));
  g_assert_cmphex (dfl_f32_to_bf16 (from_bits (0xffc00000)) & 0x8000, ==, 0x8000);
  g_assert_cmphex (dfl_f32_to_bf16 (from_bits (0x00008000)), ==, 0x0000);
  g_assert_cmphex (dfl_f32_to_bf16 (from_bits (0x00018000)), ==, 0x0002);
  g_assert_cmphex (dfl_f32_to_bf16 (from_bits (0x00000001)), ==, 0x0000);
  g_assert_cmpfloat (dfl_bf16_to_f32 (0x0001), ==, from_bits (0x00010000));
  g_assert_cmpfloat (dfl_bf16_to_f32 (0x3f80), ==, 1.0f);
  g_assert_true (isinf (dfl_bf16_to_f32 (0xff80)) && dfl_bf16_to_f32 (0xff80) < 0);

  /* every bf16 survives bf16 → f32 → bf16 */
  for (i = 0; i < 65536; i++) {
    if ((i & 0x7fff) > 0x7f80)
      g_assert_true (isnan (dfl_bf16_to_f32 ((guint16) i)));
    else
      g_assert_cmphex (dfl_f32_to_bf16 (dfl_bf16_to_f32 ((guint16) i)), ==, i);
  }

  /* against a reference that picks the nearer neighbour in double */
  for (i = 0; i < 1000000; i++) {
    guint32 u = g_rand_int (rand), a = u & 0x7fffffffu, lo, hi, want;
    double x, dlo, dhi;

    if (a > 0x7f800000u)
      continue;
    x = fabs ((double) from_bits (u));
    lo = a & 0xffff0000u;
    hi = lo + 0x10000u;
    dlo = x - (double) from_bits (lo);
    dhi = (hi >= 0x7f800000u ? ldexp (1, 128) : (double) from_bits (hi)) - x;
    if (a == 0x7f800000u)
      want = a;
    else if (dlo < dhi || (dlo == dhi && !(lo & 0x10000u)))
      want = lo;
    else
      want = hi;
    g_assert_cmphex (dfl_f32_to_bf16 (from_bits (u)), ==, ((u & 0x80000000u) | want) >> 16);
  }
  g_rand_free (rand);
}

/* An independent f16 decoder: sign × 2^e × 1.m, straight from the spec. */
static double
ref_f16 (guint16 h)
{
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v;

  if (e == 0x1f)
    v = m ? NAN : INFINITY;
  else if (e == 0)
    v = ldexp (m, -24);
  else
    v = ldexp (1024 + m, e - 25);
  return (h & 0x8000) ? -v : v;
}

static void
test_f16 (void)
{
  GRand *rand = g_rand_new_with_seed (99);
  int i;

  g_assert_cmphex (dfl_f32_to_f16 (1.0f), ==, 0x3c00);
  g_assert_cmphex (dfl_f32_to_f16 (-2.0f), ==, 0xc000);
  g_assert_cmphex (dfl_f32_to_f16 (65504.0f), ==, 0x7bff);
  g_assert_cmphex (dfl_f32_to_f16 (65519.99f), ==, 0x7bff);
  g_assert_cmphex (dfl_f32_to_f16 (65520.0f), ==, 0x7c00);
  g_assert_cmphex (dfl_f32_to_f16 (1e10f), ==, 0x7c00);
  g_assert_cmphex (dfl_f32_to_f16 (-INFINITY), ==, 0xfc00);
  g_assert_cmphex (dfl_f32_to_f16 (ldexpf (1, -24)), ==, 0x0001);
  g_assert_cmphex (dfl_f32_to_f16 (ldexpf (1, -25)), ==, 0x0000);      /* tie → even */
  g_assert_cmphex (dfl_f32_to_f16 (ldexpf (3, -25)), ==, 0x0002);      /* tie → even */
  g_assert_cmphex (dfl_f32_to_f16 (ldexpf (1.0001f, -25)), ==, 0x0001);
  g_assert_cmphex (dfl_f32_to_f16 (ldexpf (1023.5f, -24)), ==, 0x0400); /* into normal */
  g_assert_cmphex (dfl_f32_to_f16 (from_bits (0x3f801000)), ==, 0x3c00); /* tie → even */
  g_assert_cmphex (dfl_f32_to_f16 (from_bits (0x3f803000)), ==, 0x3c02); /* tie → even */
  g_assert_cmphex (dfl_f32_to_f16 (-0.0f), ==, 0x8000);
  g_assert_true ((dfl_f32_to_f16 (NAN) & 0x7fff) > 0x7c00);
  g_assert_true ((dfl_f32_to_f16 (from_bits (0x7f800001)) & 0x7fff) > 0x7c00);

  /* every f16 decodes as the spec says, and encodes back to itself */
  for (i = 0; i < 65536; i++) {
    double want = ref_f16 ((guint16) i);
    float got = dfl_f16_to_f32 ((guint16) i);

    if (isnan (want)) {
      g_assert_true (isnan (got));
      g_assert_true ((dfl_f32_to_f16 (got) & 0x7fff) > 0x7c00);
      continue;
    }
    g_assert_cmpfloat ((double) got, ==, want);
    g_assert_cmphex (dfl_f32_to_f16 (got), ==, i);
  }

  /* random f32 against nearest-even picked by search over f16 values */
  for (i = 0; i < 300000; i++) {
    guint32 u = g_rand_int (rand);
    float x = from_bits (u);
    double ax = fabs ((double) x), dlo, dhi;
    guint16 lo = 0, hi = 0x7c00, want;

    if (isnan (x))
      continue;
    /* only the f16 range is interesting; spread exponents over it */
    if (g_rand_boolean (rand) && isfinite (x) && x != 0) {
      x = ldexpf (x, -ilogbf (x) + g_rand_int_range (rand, -27, 17));
      ax = fabs ((double) x);
    }
    if (ax >= 65520.0) {
      want = 0x7c00;
    } else {
      while (hi - lo > 1) {     /* largest lo with value ≤ ax */
        guint16 mid = (guint16) ((lo + hi) / 2);

        if (ref_f16 (mid) <= ax)
          lo = mid;
        else
          hi = mid;
      }
      hi = (guint16) (lo + 1);
      dlo = ax - ref_f16 (lo);
      dhi = (hi == 0x7c00 ? 65536.0 : ref_f16 (hi)) - ax;
      want = (dlo < dhi || (dlo == dhi && !(lo & 1))) ? lo : hi;
    }
    if (signbit (x))
      want |= 0x8000;
    g_assert_cmphex (dfl_f32_to_f16 (x), ==, want);
#ifdef __FLT16_MAX__
    {
      _Float16 h = (_Float16) x;
      guint16 hb;

      memcpy (&hb, &h, 2);
      g_assert_cmphex (dfl_f32_to_f16 (x), ==, hb);
    }
#endif
  }
  g_rand_free (rand);
}

static void
test_dtype_names (void)
{
  DflDtype d;

  g_assert_true (dfl_dtype_from_name ("BF16", &d) && d == DFL_DTYPE_BF16);
  g_assert_true (dfl_dtype_from_name ("U8", &d) && d == DFL_DTYPE_U8);
  g_assert_false (dfl_dtype_from_name ("bf16", &d));
  g_assert_false (dfl_dtype_from_name ("F64", &d));
  g_assert_cmpstr (dfl_dtype_name (DFL_DTYPE_I64), ==, "I64");
  g_assert_cmpuint (dfl_dtype_size (DFL_DTYPE_I64), ==, 8);
  g_assert_cmpuint (dfl_dtype_size (DFL_DTYPE_F16), ==, 2);
  g_assert_cmpuint (dfl_dtype_size (DFL_DTYPE_I8), ==, 1);
}

/* ---- writer round trip ------------------------------------------------- */

static void
test_roundtrip (void)
{
  g_autofree char *dir = make_dir ("roundtrip");
  g_autofree char *path = g_build_filename (dir, "model.safetensors", NULL);
  g_autoptr (DflSafetensorsWriter) w = dfl_safetensors_writer_new ();
  g_autoptr (DflSafetensors) st = NULL;
  g_autofree char *bytes = NULL;
  g_autofree float *dup = NULL;
  const gint8 i8[3] = { -128, 0, 127 };
  const float f32[6] = { 1.5f, -2.25f, 0.0f, 1e-30f, 3.0e38f, -0.0f };
  const guint16 f16[4] = { 0x3c00, 0xc000, 0x0001, 0x7c00 };
  const float for_bf16[5] = { 1.0f, from_bits (0x3f808000), from_bits (0x3f818000), -3.5f, 1e-40f };
  const gint32 i32[2] = { G_MININT32, G_MAXINT32 };
  const gint64 i64[2] = { G_MININT64, G_GINT64_CONSTANT (1) << 50 };
  const guint8 u8[4] = { 0, 1, 200, 255 };
  const float scalar = 42.0f;
  const gint64 s3[] = { 3 }, s23[] = { 2, 3 }, s4[] = { 4 }, s5[] = { 5 }, s2[] = { 2 };
  const gint64 s0[] = { 0, 3 }, s22[] = { 2, 2 };
  const float f16_src[4] = { 1.0f, -2.0f, 1e-7f, 70000.0f };
  const char *order[] = { "i8", "f32", "f16", "bf16", "i32", "i64", "u8", "scalar", "empty",
                          "f16_from_f32" };
  const DflStoredTensor *t;
  GError *error = NULL;
  float out[6];
  gsize len = 0;
  guint64 hl;
  guint i;

  /* an odd-sized I8 first puts the F32 after it at an unaligned offset */
  g_assert_true (dfl_safetensors_writer_add (w, "i8", DFL_DTYPE_I8, 1, s3, i8, &error));
  g_assert_true (dfl_safetensors_writer_add_f32 (w, "f32", DFL_DTYPE_F32, 2, s23, f32, &error));
  g_assert_true (dfl_safetensors_writer_add (w, "f16", DFL_DTYPE_F16, 1, s4, f16, &error));
  g_assert_true (dfl_safetensors_writer_add_f32 (w, "bf16", DFL_DTYPE_BF16, 1, s5, for_bf16,
                                                 &error));
  g_assert_true (dfl_safetensors_writer_add (w, "i32", DFL_DTYPE_I32, 1, s2, i32, &error));
  g_assert_true (dfl_safetensors_writer_add (w, "i64", DFL_DTYPE_I64, 1, s2, i64, &error));
  g_assert_true (dfl_safetensors_writer_add (w, "u8", DFL_DTYPE_U8, 2, s22, u8, &error));
  g_assert_true (dfl_safetensors_writer_add_f32 (w, "scalar", DFL_DTYPE_F32, 0, NULL, &scalar,
                                                 &error));
  g_assert_true (dfl_safetensors_writer_add (w, "empty", DFL_DTYPE_F32, 2, s0, NULL, &error));
  g_assert_true (dfl_safetensors_writer_add_f32 (w, "f16_from_f32", DFL_DTYPE_F16, 1, s4,
                                                 f16_src, &error));
  g_assert_no_error (error);
  dfl_safetensors_writer_set_metadata (w, "format", "pt");
  dfl_safetensors_writer_set_metadata (w, "note", "h\xc3\xa9llo \"quoted\"");
  dfl_safetensors_writer_set_metadata (w, "format", "np");   /* replaces */

  /* written twice: the second replaces the first in place */
  g_assert_true (dfl_safetensors_writer_write (w, path, &error));
  g_assert_true (dfl_safetensors_writer_write (w, path, &error));
  g_assert_no_error (error);

  /* the header is padded with spaces to a multiple of 8; nothing else is
   * left in the folder */
  g_assert_true (g_file_get_contents (path, &bytes, &len, NULL));
  memcpy (&hl, bytes, 8);
  hl = GUINT64_FROM_LE (hl);
  g_assert_cmpuint (hl % 8, ==, 0);
  g_assert_cmpuint (hl + 8 + 3 + 24 + 8 + 10 + 8 + 16 + 4 + 4 + 0 + 8, ==, len);
  g_assert_cmpint (bytes[8], ==, '{');
  {
    g_autoptr (GDir) d = g_dir_open (dir, 0, NULL);
    guint n = 0;

    while (g_dir_read_name (d))
      n++;
    g_assert_cmpuint (n, ==, 1);
  }

  st = dfl_safetensors_open (path, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (dfl_safetensors_path (st), ==, path);
  g_assert_cmpuint (dfl_safetensors_n_tensors (st), ==, G_N_ELEMENTS (order));
  for (i = 0; i < G_N_ELEMENTS (order); i++) {
    t = dfl_safetensors_nth (st, i);
    g_assert_cmpstr (t->name, ==, order[i]);
    g_assert_cmpstr (t->file, ==, path);
    g_assert_true (dfl_safetensors_find (st, order[i]) == t);
  }
  g_assert_null (dfl_safetensors_find (st, "nope"));
  g_assert_cmpstr (dfl_safetensors_metadata (st, "format"), ==, "np");
  g_assert_cmpstr (dfl_safetensors_metadata (st, "note"), ==, "h\xc3\xa9llo \"quoted\"");
  g_assert_null (dfl_safetensors_metadata (st, "other"));

#define CHECK_RAW(name_, dtype_, nd_, src_)                                  \
  t = dfl_safetensors_find (st, name_);                                      \
  g_assert_cmpint (t->dtype, ==, dtype_);                                    \
  g_assert_cmpuint (t->n_dims, ==, nd_);                                     \
  g_assert_cmpuint (t->n_bytes, ==, sizeof (src_));                          \
  g_assert_cmpmem (t->data, t->n_bytes, src_, sizeof (src_));

  CHECK_RAW ("i8", DFL_DTYPE_I8, 1, i8);
  CHECK_RAW ("f32", DFL_DTYPE_F32, 2, f32);
  g_assert_cmpint (t->shape[0], ==, 2);
  g_assert_cmpint (t->shape[1], ==, 3);
  g_assert_cmpint (t->n_elements, ==, 6);
  CHECK_RAW ("f16", DFL_DTYPE_F16, 1, f16);
  CHECK_RAW ("i32", DFL_DTYPE_I32, 1, i32);
  CHECK_RAW ("i64", DFL_DTYPE_I64, 1, i64);
  CHECK_RAW ("u8", DFL_DTYPE_U8, 2, u8);
#undef CHECK_RAW

  /* F32 at an unaligned offset reads back exactly */
  t = dfl_safetensors_find (st, "f32");
  g_assert_cmpuint ((guintptr) t->data % 4, !=, 0);
  dup = dfl_tensor_dup_f32 (t);
  g_assert_cmpmem (dup, sizeof f32, f32, sizeof f32);
  g_clear_pointer (&dup, g_free);
  dfl_tensor_read_f32 (t, 2, 3, out);
  g_assert_cmpmem (out, 3 * sizeof (float), f32 + 2, 3 * sizeof (float));

  t = dfl_safetensors_find (st, "f16");
  dfl_tensor_read_f32 (t, 0, 4, out);
  g_assert_cmpfloat (out[0], ==, 1.0f);
  g_assert_cmpfloat (out[1], ==, -2.0f);
  g_assert_cmpfloat (out[2], ==, ldexpf (1, -24));
  g_assert_true (isinf (out[3]));

  t = dfl_safetensors_find (st, "f16_from_f32");
  dfl_tensor_read_f32 (t, 0, 4, out);
  g_assert_cmpfloat (out[0], ==, 1.0f);
  g_assert_cmpfloat (out[1], ==, -2.0f);
  g_assert_cmpfloat (out[2], ==, dfl_f16_to_f32 (dfl_f32_to_f16 (1e-7f)));
  g_assert_true (isinf (out[3]));

  t = dfl_safetensors_find (st, "bf16");
  g_assert_cmpint (t->dtype, ==, DFL_DTYPE_BF16);
  dup = dfl_tensor_dup_f32 (t);
  g_assert_cmpfloat (dup[0], ==, 1.0f);
  g_assert_cmpfloat (dup[1], ==, 1.0f);                       /* tie → even */
  g_assert_cmphex (bits (dup[2]), ==, 0x3f820000);           /* tie → even */
  g_assert_cmpfloat (dup[3], ==, -3.5f);
  g_assert_cmpfloat (dup[4], ==, dfl_bf16_to_f32 (dfl_f32_to_bf16 (1e-40f)));
  g_clear_pointer (&dup, g_free);
  dfl_tensor_read_f32 (t, 3, 2, out);
  g_assert_cmpfloat (out[0], ==, -3.5f);

  t = dfl_safetensors_find (st, "scalar");
  g_assert_cmpuint (t->n_dims, ==, 0);
  g_assert_cmpint (t->n_elements, ==, 1);
  dfl_tensor_read_f32 (t, 0, 1, out);
  g_assert_cmpfloat (out[0], ==, 42.0f);

  t = dfl_safetensors_find (st, "empty");
  g_assert_cmpint (t->n_elements, ==, 0);
  g_assert_cmpuint (t->n_bytes, ==, 0);
  dup = dfl_tensor_dup_f32 (t);
  g_assert_nonnull (dup);

  /* expect() accepts the right name, float dtype and shape */
  g_assert_nonnull (dfl_safetensors_expect (st, "f32", 2, s23, &error));
  g_assert_no_error (error);
  g_assert_nonnull (dfl_safetensors_expect (st, "scalar", 0, NULL, &error));
  g_assert_no_error (error);

  /* opening the folder finds model.safetensors */
  {
    g_autoptr (DflSafetensors) st2 = dfl_safetensors_open (dir, &error);

    g_assert_no_error (error);
    g_assert_cmpstr (dfl_safetensors_path (st2), ==, path);
    g_assert_cmpuint (dfl_safetensors_n_tensors (st2), ==, G_N_ELEMENTS (order));
  }
}

static void
test_empty_file (void)
{
  g_autofree char *dir = make_dir ("empty");
  g_autofree char *path = g_build_filename (dir, "none.safetensors", NULL);
  g_autoptr (DflSafetensorsWriter) w = dfl_safetensors_writer_new ();
  g_autoptr (DflSafetensors) st = NULL;
  GError *error = NULL;

  g_assert_true (dfl_safetensors_writer_write (w, path, &error));
  st = dfl_safetensors_open (path, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (dfl_safetensors_n_tensors (st), ==, 0);
  g_assert_null (dfl_safetensors_metadata (st, "format"));
}

static void
test_writer_errors (void)
{
  g_autofree char *dir = make_dir ("writer-errors");
  g_autofree char *path = g_build_filename (dir, "no-such-folder", "x.safetensors", NULL);
  g_autoptr (DflSafetensorsWriter) w = dfl_safetensors_writer_new ();
  const gint64 s2[] = { 2 }, neg[] = { 2, -1 }, nine[9] = { 1, 1, 1, 1, 1, 1, 1, 1, 1 };
  const gint64 huge[] = { G_GINT64_CONSTANT (1) << 40, G_GINT64_CONSTANT (1) << 40 };
  const float v[2] = { 1, 2 };
  GError *error = NULL;

  g_assert_true (dfl_safetensors_writer_add_f32 (w, "a", DFL_DTYPE_F32, 1, s2, v, &error));
  g_assert_false (dfl_safetensors_writer_add_f32 (w, "a", DFL_DTYPE_F16, 1, s2, v, &error));
  dfl_test_check_error (error, DFL_ERROR_INVALID, "'a'", "unique", NULL);
  g_clear_error (&error);
  g_assert_false (dfl_safetensors_writer_add (w, "__metadata__", DFL_DTYPE_U8, 1, s2, v, &error));
  dfl_test_check_error (error, DFL_ERROR_INVALID, "__metadata__", NULL);
  g_clear_error (&error);
  g_assert_false (dfl_safetensors_writer_add (w, "b", DFL_DTYPE_U8, 2, neg, v, &error));
  dfl_test_check_error (error, DFL_ERROR_INVALID, "'b'", "shape[1] is -1", NULL);
  g_clear_error (&error);
  g_assert_false (dfl_safetensors_writer_add (w, "c", DFL_DTYPE_U8, 9, nine, v, &error));
  dfl_test_check_error (error, DFL_ERROR_INVALID, "'c'", "9 dims", NULL);
  g_clear_error (&error);
  g_assert_false (dfl_safetensors_writer_add (w, "d", DFL_DTYPE_I64, 2, huge, v, &error));
  dfl_test_check_error (error, DFL_ERROR_LIMIT, "'d'", "[1099511627776, 1099511627776]", NULL);
  g_clear_error (&error);
  g_assert_false (dfl_safetensors_writer_add_f32 (w, "e", DFL_DTYPE_I32, 1, s2, v, &error));
  dfl_test_check_error (error, DFL_ERROR_INVALID, "'e'", "I32", NULL);
  g_clear_error (&error);

  g_assert_false (dfl_safetensors_writer_write (w, path, &error));
  dfl_test_check_error (error, DFL_ERROR_IO, path, NULL);
  g_clear_error (&error);
}

/* ---- expect ------------------------------------------------------------ */

static void
test_expect (void)
{
  g_autofree char *dir = make_dir ("expect");
  g_autofree char *path = g_build_filename (dir, "model.safetensors", NULL);
  g_autoptr (DflSafetensorsWriter) w = dfl_safetensors_writer_new ();
  g_autoptr (DflSafetensors) st = NULL;
  const gint64 s[] = { 64, 32 }, want[] = { 128, 32 }, s1[] = { 4 };
  g_autofree float *zeros = g_new0 (float, 64 * 32);
  const gint32 ids[4] = { 0 };
  GError *error = NULL;

  g_assert_true (dfl_safetensors_writer_add_f32 (w, "model.layers.0.mlp.up_proj.weight",
                                                 DFL_DTYPE_BF16, 2, s, zeros, &error));
  g_assert_true (dfl_safetensors_writer_add (w, "ids", DFL_DTYPE_I32, 1, s1, ids, &error));
  g_assert_true (dfl_safetensors_writer_write (w, path, &error));
  st = dfl_safetensors_open (path, &error);
  g_assert_no_error (error);

  g_assert_null (dfl_safetensors_expect (st, "model.norm.weight", 1, s1, &error));
  dfl_test_check_error (error, DFL_ERROR_FORMAT, "model.safetensors: no tensor 'model.norm.weight'",
                        path, NULL);
  g_clear_error (&error);

  g_assert_null (dfl_safetensors_expect (st, "model.layers.0.mlp.up_proj.weight", 2, want,
                                         &error));
  dfl_test_check_error (error, DFL_ERROR_MISMATCH,
                        "model.safetensors: tensor 'model.layers.0.mlp.up_proj.weight' has shape "
                        "[64, 32], expected [128, 32]", NULL);
  g_clear_error (&error);

  g_assert_null (dfl_safetensors_expect (st, "model.layers.0.mlp.up_proj.weight", 1, s, &error));
  dfl_test_check_error (error, DFL_ERROR_MISMATCH, "[64, 32], expected [64]", NULL);
  g_clear_error (&error);

  g_assert_null (dfl_safetensors_expect (st, "ids", 1, s1, &error));
  dfl_test_check_error (error, DFL_ERROR_MISMATCH, path, "'ids'", "I32", NULL);
  g_clear_error (&error);

  g_assert_nonnull (dfl_safetensors_expect (st, "model.layers.0.mlp.up_proj.weight", 2, s,
                                            &error));
  g_assert_no_error (error);
}

/* ---- bad files --------------------------------------------------------- */

static void
test_bad_truncated (void)
{
  g_autofree char *dir = make_dir ("truncated");
  g_autofree char *p0 = g_build_filename (dir, "zero.safetensors", NULL);
  g_autofree char *p5 = g_build_filename (dir, "five.safetensors", NULL);
  g_autofree char *missing = g_build_filename (dir, "missing.safetensors", NULL);
  g_autofree char *empty_dir = make_dir ("truncated/nothing-here");

  write_file (p0, "", 0);
  write_file (p5, "\x10\0\0\0\0", 5);
  BAD_OPEN (p0, DFL_ERROR_FORMAT, "is 0 bytes", "8-byte");
  BAD_OPEN (p5, DFL_ERROR_FORMAT, "is 5 bytes", "8-byte");
  BAD_OPEN (missing, DFL_ERROR_IO, "No such file");
  BAD_OPEN (empty_dir, DFL_ERROR_IO, "model.safetensors");
}

static void
test_bad_header_length (void)
{
  g_autofree char *dir = make_dir ("header-length");
  g_autofree char *past = write_raw_len (dir, "past.safetensors", 1000, "{}", 40);
  g_autofree char *absurd = write_raw_len (dir, "absurd.safetensors",
                                           G_GUINT64_CONSTANT (1) << 40, "{}", 0);
  g_autofree char *max = write_raw_len (dir, "max.safetensors", G_MAXUINT64 - 1, "{}", 0);
  g_autofree char *bound = write_raw_len (dir, "bound.safetensors", 100000001, "{}", 0);

  /* 8 + 2 + 40 = 50 bytes, so at most 42 */
  BAD_OPEN (past, DFL_ERROR_FORMAT, "header length 1000", "50 bytes", "at most 42");
  BAD_OPEN (absurd, DFL_ERROR_LIMIT, "header length 1099511627776", "100000000");
  BAD_OPEN (max, DFL_ERROR_LIMIT, "header length 18446744073709551614");
  BAD_OPEN (bound, DFL_ERROR_LIMIT, "header length 100000001");
}

static void
test_bad_json (void)
{
  g_autofree char *dir = make_dir ("bad-json");
  g_autofree char *cut = write_raw (dir, "cut.safetensors", "{\"a\": {\"dtype\":", 0);
  g_autofree char *arr = write_raw (dir, "array.safetensors", "[1, 2]", 0);
  g_autofree char *trail = write_raw (dir, "trail.safetensors", "{} x", 0);
  g_autofree char *nul = NULL;
  g_autofree char *utf = write_raw (dir, "utf8.safetensors", "{\"\xff\":1}", 0);
  g_autofree char *padded = write_raw (dir, "padded.safetensors", "{}      ", 0);
  g_autoptr (DflSafetensors) st = NULL;
  GError *error = NULL;

  nul = g_build_filename (dir, "nul.safetensors", NULL);
  write_file (nul, "\x04\0\0\0\0\0\0\0{\0}  ", 12);

  BAD_OPEN (cut, DFL_ERROR_FORMAT, "not valid JSON");
  BAD_OPEN (arr, DFL_ERROR_FORMAT, "an array", "expected a JSON object");
  BAD_OPEN (trail, DFL_ERROR_FORMAT, "trailing bytes", "byte 3");
  BAD_OPEN (nul, DFL_ERROR_FORMAT, "NUL byte at offset 1");
  BAD_OPEN (utf, DFL_ERROR_FORMAT, "UTF-8");
  /* padding with spaces, as the official writer does, is fine */
  st = dfl_safetensors_open (padded, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (dfl_safetensors_n_tensors (st), ==, 0);
}

static void
test_bad_entry (void)
{
  g_autofree char *dir = make_dir ("bad-entry");
  g_autofree char *no_dtype = write_raw (dir, "no-dtype.safetensors",
                                         "{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
  g_autofree char *no_offsets = write_raw (dir, "no-offsets.safetensors",
                                           "{\"w\":{" F32_4 "}}", 16);
  g_autofree char *not_obj = write_raw (dir, "not-obj.safetensors", "{\"w\":[1]}", 0);
  g_autofree char *dtype_num = write_raw (dir, "dtype-num.safetensors",
                                          "{\"w\":{\"dtype\":3,\"shape\":[1],"
                                          "\"data_offsets\":[0,4]}}", 4);
  g_autofree char *shape_str = write_raw (dir, "shape-str.safetensors",
                                          "{\"w\":{\"dtype\":\"F32\",\"shape\":\"4\","
                                          "\"data_offsets\":[0,16]}}", 16);
  g_autofree char *offs3 = write_w (dir, "offsets3.safetensors", "F32", "[4]", "[0,16,16]", 16);
  g_autofree char *offs_str = write_w (dir, "offsets-str.safetensors",
                                       "F32", "[4]", "[0,\"16\"]", 16);
  g_autofree char *meta_num = write_raw (dir, "meta-num.safetensors",
                                         "{\"__metadata__\":{\"format\":\"pt\",\"step\":7}}", 0);
  g_autofree char *meta_arr = write_raw (dir, "meta-arr.safetensors",
                                         "{\"__metadata__\":[\"pt\"]}", 0);

  BAD_OPEN (no_dtype, DFL_ERROR_FORMAT, "tensor 'w' has no 'dtype'");
  BAD_OPEN (no_offsets, DFL_ERROR_FORMAT, "tensor 'w' has no 'data_offsets'");
  BAD_OPEN (not_obj, DFL_ERROR_FORMAT, "tensor 'w' is an array");
  BAD_OPEN (dtype_num, DFL_ERROR_FORMAT, "tensor 'w' dtype is a number");
  BAD_OPEN (shape_str, DFL_ERROR_FORMAT, "tensor 'w' shape is a string");
  BAD_OPEN (offs3, DFL_ERROR_FORMAT, "tensor 'w' data_offsets is an array of a length other "
            "than 2");
  BAD_OPEN (offs_str, DFL_ERROR_FORMAT, "tensor 'w' data_offsets[1] is a string");
  BAD_OPEN (meta_num, DFL_ERROR_FORMAT, "__metadata__ value of 'step' is a number");
  BAD_OPEN (meta_arr, DFL_ERROR_FORMAT, "__metadata__ is an array");
}

static void
test_bad_dtype (void)
{
  g_autofree char *dir = make_dir ("bad-dtype");
  g_autofree char *unknown = write_w (dir, "unknown.safetensors", "F33", "[1]", "[0,4]", 4);
  g_autofree char *f64 = write_w (dir, "f64.safetensors", "F64", "[1]", "[0,8]", 8);

  BAD_OPEN (unknown, DFL_ERROR_FORMAT, "tensor 'w'", "unknown dtype 'F33'",
            "accepted: F32, F16, BF16, I32, I64, I8, U8");
  BAD_OPEN (f64, DFL_ERROR_UNSUPPORTED, "tensor 'w'", "unsupported dtype 'F64'", "accepted:");
}

static void
test_bad_dims (void)
{
  g_autofree char *dir = make_dir ("bad-dims");
  g_autofree char *neg = write_w (dir, "neg.safetensors", "F32", "[4,-3]", "[0,0]", 0);
  g_autofree char *frac = write_w (dir, "frac.safetensors", "F32", "[2.5]", "[0,0]", 0);
  g_autofree char *big = write_w (dir, "big.safetensors", "F32", "[1e300]", "[0,0]", 0);
  g_autofree char *many = write_w (dir, "many.safetensors",
                                   "U8", "[1,1,1,1,1,1,1,1,1]", "[0,1]", 1);
  g_autofree char *neg_off = write_w (dir, "neg-offset.safetensors", "F32", "[4]", "[-16,0]", 16);

  BAD_OPEN (neg, DFL_ERROR_FORMAT, "tensor 'w' shape[1] is -3", "negative");
  BAD_OPEN (frac, DFL_ERROR_FORMAT, "tensor 'w' shape[0] is 2.5", "not an integer");
  BAD_OPEN (big, DFL_ERROR_FORMAT, "tensor 'w' shape[0] is 1", "e+300", "above 2^53");
  BAD_OPEN (many, DFL_ERROR_LIMIT, "tensor 'w' has 9 dims", "8");
  BAD_OPEN (neg_off, DFL_ERROR_FORMAT, "tensor 'w' data_offsets[0] is -16");
}

static void
test_bad_overflow (void)
{
  g_autofree char *dir = make_dir ("overflow");
  /* 2^32 × 2^32 elements: past 64 bits before the dtype size enters */
  g_autofree char *elems = write_w (dir, "elements.safetensors",
                                    "U8", "[4294967296,4294967296]", "[0,16]", 16);
  /* 2^31 × 2^31 = 2^62 elements fit; × 4 bytes does not */
  g_autofree char *bytes = write_w (dir, "bytes.safetensors",
                                    "F32", "[2147483648,2147483648]", "[0,16]", 16);
  /* fits in 64 bits, but not in the data area */
  g_autofree char *area = write_w (dir, "area.safetensors", "F32", "[65536,65536]", "[0,16]", 16);

  BAD_OPEN (elems, DFL_ERROR_LIMIT, "tensor 'w' shape [4294967296, 4294967296]");
  BAD_OPEN (bytes, DFL_ERROR_LIMIT, "tensor 'w' F32 [2147483648, 2147483648]");
  BAD_OPEN (area, DFL_ERROR_FORMAT, "hold 16 bytes but F32 [65536, 65536] needs 17179869184");
}

static void
test_bad_offsets (void)
{
  g_autofree char *dir = make_dir ("bad-offsets");
  g_autofree char *past = write_w (dir, "past.safetensors", "F32", "[4]", "[16,32]", 24);
  g_autofree char *back = write_w (dir, "backwards.safetensors", "F32", "[4]", "[16,0]", 16);

  BAD_OPEN (past, DFL_ERROR_FORMAT, "tensor 'w' data_offsets [16, 32]",
            "past the end of the data area (24 bytes)");
  BAD_OPEN (back, DFL_ERROR_FORMAT, "tensor 'w' data_offsets [16, 0]", "begin after their end");
}

static void
test_bad_overlap (void)
{
  g_autofree char *dir = make_dir ("overlap");
  g_autofree char *overlap = write_raw (dir, "overlap.safetensors",
                                        "{\"a\":{" F32_4 ",\"data_offsets\":[0,16]},"
                                        "\"b\":{" F32_4 ",\"data_offsets\":[8,24]}}", 24);
  g_autofree char *same = write_raw (dir, "same.safetensors",
                                     "{\"a\":{" F32_4 ",\"data_offsets\":[0,16]},"
                                     "\"b\":{" F32_4 ",\"data_offsets\":[0,16]}}", 16);
  g_autofree char *gap = write_raw (dir, "gap.safetensors",
                                    "{\"a\":{" F32_4 ",\"data_offsets\":[0,16]},"
                                    "\"b\":{" F32_4 ",\"data_offsets\":[20,36]}}", 36);
  g_autofree char *tail = write_raw (dir, "tail.safetensors",
                                     "{\"a\":{" F32_4 ",\"data_offsets\":[0,16]}}", 20);
  g_autofree char *lead = write_raw (dir, "lead.safetensors",
                                     "{\"a\":{" F32_4 ",\"data_offsets\":[4,20]}}", 20);
  /* listed out of order in the header: fine, offsets decide */
  g_autofree char *shuffled = write_raw (dir, "shuffled.safetensors",
                                         "{\"b\":{" F32_4 ",\"data_offsets\":[16,32]},"
                                         "\"z\":{\"dtype\":\"F32\",\"shape\":[0],"
                                         "\"data_offsets\":[32,32]},"
                                         "\"a\":{" F32_4 ",\"data_offsets\":[0,16]}}", 32);
  g_autoptr (DflSafetensors) st = NULL;
  GError *error = NULL;

  BAD_OPEN (overlap, DFL_ERROR_FORMAT, "tensor 'b' data_offsets [8, 24] overlap tensor 'a' "
            "[0, 16]");
  BAD_OPEN (same, DFL_ERROR_FORMAT, "overlap tensor", "[0, 16]");
  BAD_OPEN (gap, DFL_ERROR_FORMAT, "bytes [16, 20) belong to no tensor", "'b'");
  BAD_OPEN (tail, DFL_ERROR_FORMAT, "holds 20 bytes but the tensors cover only 16");
  BAD_OPEN (lead, DFL_ERROR_FORMAT, "bytes [0, 4) belong to no tensor", "'a'");

  st = dfl_safetensors_open (shuffled, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (dfl_safetensors_nth (st, 0)->name, ==, "b");
  g_assert_true (dfl_safetensors_find (st, "a")->data + 16 == dfl_safetensors_find (st, "b")->data);
}

static void
test_bad_size_mismatch (void)
{
  g_autofree char *dir = make_dir ("size");
  g_autofree char *path = write_raw (dir, "model.safetensors",
                                     "{\"x\":{\"dtype\":\"F32\",\"shape\":[4,8],"
                                     "\"data_offsets\":[0,96]}}", 96);

  BAD_OPEN (path, DFL_ERROR_FORMAT,
            "model.safetensors: tensor 'x' data_offsets [0, 96] hold 96 bytes but F32 [4, 8] "
            "needs 128");
}

static void
test_bad_duplicate (void)
{
  g_autofree char *dir = make_dir ("duplicate");
  g_autofree char *dup = write_raw (dir, "dup.safetensors",
                                    "{\"a\":{" F32_4 ",\"data_offsets\":[0,16]},"
                                    "\"a\":{" F32_4 ",\"data_offsets\":[16,32]}}", 32);
  g_autofree char *meta = write_raw (dir, "dup-meta.safetensors",
                                     "{\"__metadata__\":{},\"__metadata__\":{}}", 0);
  g_autofree char *meta_key = write_raw (dir, "dup-meta-key.safetensors",
                                         "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0);

  BAD_OPEN (dup, DFL_ERROR_FORMAT, "tensor name 'a' appears twice");
  BAD_OPEN (meta, DFL_ERROR_FORMAT, "'__metadata__' appears twice");
  BAD_OPEN (meta_key, DFL_ERROR_FORMAT, "__metadata__ key 'k' appears twice");
}

static void
test_bad_too_many (void)
{
  g_autofree char *dir = make_dir ("too-many");
  g_autofree char *path = NULL;
  GString *h = g_string_new ("{");
  guint i;

  /* refused by count, before any entry is looked at */
  for (i = 0; i < 1000001; i++)
    g_string_append (h, i ? ",\"\":0" : "\"\":0");
  g_string_append_c (h, '}');
  path = write_raw (dir, "many.safetensors", h->str, 0);
  g_string_free (h, TRUE);
  BAD_OPEN (path, DFL_ERROR_LIMIT, "more than 1000000 tensors");
}

/* ---- shards ------------------------------------------------------------ */

#define SHARD1 "model-00001-of-00002.safetensors"
#define SHARD2 "model-00002-of-00002.safetensors"

static void
write_shard (const char *dir, const char *name, const char *const *tensors, const char *meta)
{
  g_autoptr (DflSafetensorsWriter) w = dfl_safetensors_writer_new ();
  g_autofree char *path = g_build_filename (dir, name, NULL);
  const gint64 shape[] = { 2, 2 };
  GError *error = NULL;
  guint i;

  for (i = 0; tensors[i]; i++) {
    const float v[4] = { (float) i, 1, 2, 3 };

    g_assert_true (dfl_safetensors_writer_add_f32 (w, tensors[i], DFL_DTYPE_BF16, 2, shape, v,
                                                   &error));
  }
  if (meta)
    dfl_safetensors_writer_set_metadata (w, "format", meta);
  g_assert_true (dfl_safetensors_writer_write (w, path, &error));
  g_assert_no_error (error);
}

static char *
write_index (const char *dir, const char *name, const char *weight_map)
{
  char *path = g_build_filename (dir, name, NULL);
  g_autofree char *json = g_strdup_printf ("{\"metadata\":{\"total_size\":48},"
                                           "\"weight_map\":%s}", weight_map);

  write_file (path, json, strlen (json));
  return path;
}

static void
test_shards (void)
{
  g_autofree char *dir = make_dir ("shards");
  const char *const s1[] = { "embed", "layer.0", NULL };
  const char *const s2[] = { "layer.1", "extra", NULL };
  g_autofree char *index = NULL;
  g_autofree char *p1 = g_build_filename (dir, SHARD1, NULL);
  g_autofree char *p2 = g_build_filename (dir, SHARD2, NULL);
  const gint64 good[] = { 2, 2 }, bad[] = { 3, 2 };
  GError *error = NULL;
  const DflStoredTensor *t;
  float v[4];

  write_shard (dir, SHARD1, s1, "pt");
  write_shard (dir, SHARD2, s2, "other");
  index = write_index (dir, "model.safetensors.index.json",
                       "{\"embed\":\"" SHARD1 "\",\"layer.1\":\"" SHARD2 "\","
                       "\"layer.0\":\"" SHARD1 "\"}");

  for (guint round = 0; round < 2; round++) {
    g_autoptr (DflSafetensors) st = dfl_safetensors_open (round ? dir : index, &error);

    g_assert_no_error (error);
    g_assert_cmpstr (dfl_safetensors_path (st), ==, index);
    /* all tensors of both shards, "extra" too (it is not in the map) */
    g_assert_cmpuint (dfl_safetensors_n_tensors (st), ==, 4);
    g_assert_cmpstr (dfl_safetensors_nth (st, 0)->name, ==, "embed");
    g_assert_cmpstr (dfl_safetensors_nth (st, 2)->name, ==, "layer.1");
    g_assert_cmpstr (dfl_safetensors_find (st, "layer.0")->file, ==, p1);
    g_assert_cmpstr (dfl_safetensors_find (st, "layer.1")->file, ==, p2);
    g_assert_nonnull (dfl_safetensors_find (st, "extra"));
    g_assert_cmpstr (dfl_safetensors_metadata (st, "format"), ==, "pt");

    t = dfl_safetensors_expect (st, "layer.1", 2, good, &error);
    g_assert_no_error (error);
    dfl_tensor_read_f32 (t, 0, 4, v);
    g_assert_cmpfloat (v[0], ==, 0.0f);
    g_assert_cmpfloat (v[3], ==, 3.0f);

    /* a wrong shape names the shard; a missing tensor names the index */
    g_assert_null (dfl_safetensors_expect (st, "layer.1", 2, bad, &error));
    dfl_test_check_error (error, DFL_ERROR_MISMATCH, p2,
                          "'layer.1' has shape [2, 2], expected [3, 2]", NULL);
    g_clear_error (&error);
    g_assert_null (dfl_safetensors_expect (st, "layer.2", 2, good, &error));
    dfl_test_check_error (error, DFL_ERROR_FORMAT,
                          "model.safetensors.index.json: no tensor 'layer.2'", NULL);
    g_clear_error (&error);
  }
}

static void
test_bad_shards (void)
{
  g_autofree char *dir = make_dir ("bad-shards");
  const char *const s1[] = { "a", "b", NULL };
  const char *const s2[] = { "c", "b", NULL };
  g_autofree char *missing_shard = NULL, *not_in_shard = NULL, *in_two = NULL, *wrong = NULL;
  g_autofree char *bad_json = NULL, *no_map = NULL, *escape = NULL, *empty = NULL;
  g_autofree char *map_num = NULL;

  write_shard (dir, SHARD1, s1, NULL);
  write_shard (dir, SHARD2, s2, NULL);
  missing_shard = write_index (dir, "missing.index.json",
                               "{\"a\":\"" SHARD1 "\",\"z\":\"model-00003-of-00003.safetensors\"}");
  not_in_shard = write_index (dir, "not-in-shard.index.json",
                              "{\"a\":\"" SHARD1 "\",\"ghost\":\"" SHARD1 "\"}");
  in_two = write_index (dir, "in-two.index.json",
                        "{\"a\":\"" SHARD1 "\",\"c\":\"" SHARD2 "\"}");
  bad_json = write_index (dir, "bad.index.json", "{\"a\":");
  no_map = write_index (dir, "no-map.index.json", "[]");
  map_num = write_index (dir, "map-num.index.json", "{\"a\":1}");
  escape = write_index (dir, "escape.index.json", "{\"a\":\"../" SHARD1 "\"}");
  empty = write_index (dir, "empty.index.json", "{}");

  BAD_OPEN (missing_shard, DFL_ERROR_IO, "model-00003-of-00003.safetensors", "No such file");
  BAD_OPEN (not_in_shard, DFL_ERROR_FORMAT, "tensor 'ghost'", SHARD1, "no such tensor");
  BAD_OPEN_OTHER (in_two, DFL_ERROR_FORMAT, "tensor 'b' is also in", SHARD1, SHARD2);
  BAD_OPEN (bad_json, DFL_ERROR_FORMAT, "not valid JSON");
  BAD_OPEN (no_map, DFL_ERROR_FORMAT, "'weight_map' is an array");
  BAD_OPEN (map_num, DFL_ERROR_FORMAT, "entry 'a' is a number");
  BAD_OPEN (escape, DFL_ERROR_FORMAT, "'../" SHARD1 "'", "plain file names");
  BAD_OPEN (empty, DFL_ERROR_FORMAT, "names no tensors");

  /* listed under one shard, held by another */
  {
    g_autofree char *d2 = make_dir ("bad-shards/wrong");
    const char *const only_a[] = { "a", NULL };
    const char *const c_d[] = { "c", "d", NULL };

    write_shard (d2, SHARD1, only_a, NULL);
    write_shard (d2, SHARD2, c_d, NULL);
    wrong = write_index (d2, "model.safetensors.index.json",
                         "{\"a\":\"" SHARD1 "\",\"c\":\"" SHARD1 "\",\"d\":\"" SHARD2 "\"}");
    BAD_OPEN (wrong, DFL_ERROR_FORMAT, "tensor 'c' in", SHARD1, "but it is in", SHARD2);
  }
  /* a bad header in a shard names the shard */
  {
    g_autofree char *d3 = make_dir ("bad-shards/bad-header");
    g_autofree char *shard = write_raw (d3, SHARD1, "{\"a\":{" F32_4 ",\"data_offsets\":[0,8]}}",
                                        8);
    g_autofree char *idx = write_index (d3, "model.safetensors.index.json",
                                        "{\"a\":\"" SHARD1 "\"}");
    GError *error = NULL;

    g_assert_null (dfl_safetensors_open (idx, &error));
    dfl_test_check_error (error, DFL_ERROR_FORMAT, shard, "hold 8 bytes but F32 [4] needs 16",
                          NULL);
    g_error_free (error);
  }
}

/* The cases, run by tmp-dir-main.c in a temporary folder. */
const DflTestCase dfl_test_cases[] = {
  { "/safetensors/dtype-names", test_dtype_names },
  { "/safetensors/convert/bf16", test_bf16 },
  { "/safetensors/convert/f16", test_f16 },
  { "/safetensors/roundtrip", test_roundtrip },
  { "/safetensors/roundtrip/empty", test_empty_file },
  { "/safetensors/roundtrip/shards", test_shards },
  { "/safetensors/writer-errors", test_writer_errors },
  { "/safetensors/expect", test_expect },
  { "/safetensors/bad/truncated", test_bad_truncated },
  { "/safetensors/bad/header-length", test_bad_header_length },
  { "/safetensors/bad/json", test_bad_json },
  { "/safetensors/bad/entry", test_bad_entry },
  { "/safetensors/bad/dtype", test_bad_dtype },
  { "/safetensors/bad/dims", test_bad_dims },
  { "/safetensors/bad/overflow", test_bad_overflow },
  { "/safetensors/bad/offsets", test_bad_offsets },
  { "/safetensors/bad/overlap-and-gaps", test_bad_overlap },
  { "/safetensors/bad/size-mismatch", test_bad_size_mismatch },
  { "/safetensors/bad/duplicate", test_bad_duplicate },
  { "/safetensors/bad/too-many-tensors", test_bad_too_many },
  { "/safetensors/bad/shards", test_bad_shards },
  { NULL, NULL }
};
