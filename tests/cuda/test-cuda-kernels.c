/* gst-dflash — the CUDA kernels against float64 references on the host.
 *
 * Every kernel runs on the card over random inputs of fixed seeds, in odd
 * shapes, and is compared with a plain double loop written here (not the
 * CPU kernels): within what an F32 accumulation allows for arithmetic, and
 * exactly for choices (argmax, top-k, the selector) and conversions. A graph
 * captured once and replayed at another position and other key ranges must
 * give what direct launches give. Where no card is present the whole
 * program is one TAP skip.
 */
#include <glib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dfl-cuda.h"
#include "dfl-error.h"
#include "drafter.h"
#include "test-support.h"

static DflCudaDevice *dev;

/* --- on the host: rounding, uploads, comparisons --- */

/* a value as stored in `type` and read back */
static float
round_to (DflDtype type, float f)
{
  return type == DFL_DTYPE_F32 ? f
       : type == DFL_DTYPE_BF16 ? dfl_test_from_bf16 (dfl_test_to_bf16 (f))
       : dfl_test_from_f16 (dfl_test_to_f16 (f));
}

/* host values of `type` from floats */
static void *
pack (DflDtype type, const float *f, size_t n)
{
  void *p = g_malloc (n * dfl_dtype_size (type));
  for (size_t i = 0; i < n; i++) {
    if (type == DFL_DTYPE_F32)
      ((float *) p)[i] = f[i];
    else
      ((guint16 *) p)[i] = type == DFL_DTYPE_BF16 ? dfl_test_to_bf16 (f[i])
                                                  : dfl_test_to_f16 (f[i]);
  }
  return p;
}

static void *
up (const void *src, size_t bytes)
{
  GError *error = NULL;
  void *d = dfl_cuda_alloc (dev, bytes, &error);
  g_assert_no_error (error);
  if (src) {
    dfl_cuda_upload (dev, d, src, bytes, &error);
    g_assert_no_error (error);
  }
  return d;
}

static void
down (void *dst, const void *d_src, size_t bytes)
{
  GError *error = NULL;
  dfl_cuda_download (dev, dst, d_src, bytes, &error);
  g_assert_no_error (error);
}

static void
sync_ok (void)
{
  GError *error = NULL;
  dfl_cuda_sync (dev, &error);
  g_assert_no_error (error);
}

static float *
random_floats (GRand *r, size_t n, float scale)
{
  float *f = g_new (float, n);
  for (size_t i = 0; i < n; i++)
    f[i] = dfl_test_frand (r) * scale;
  return f;
}

/* |got − want| ≤ tol, with the place named when it is not */
static void
assert_close (const char *what, size_t at, double got, double want, double tol)
{
  if (!(fabs (got - want) <= tol))
    g_error ("%s[%zu]: %.9g, expected %.9g (tolerance %.3g)", what, at, got, want, tol);
}

/* --- the device --- */

static void
test_device (void)
{
  GError *error = NULL;
  DflCudaDevice *none = dfl_cuda_device_open (4096, &error);

  g_assert_null (none);
  g_assert_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "4096"));
  g_clear_error (&error);
  g_assert_nonnull (strstr (dfl_cuda_device_describe (dev), "sm_"));
  g_assert_nonnull (dfl_cuda_device_stream (dev));
  g_assert_nonnull (dfl_cuda_device_cublas (dev));
  g_assert_cmpint (dfl_cuda_device_ordinal (dev), ==, 0);
  g_assert_true (dfl_cuda_device_ref (dev) == dev);
  dfl_cuda_device_unref (dev);
  g_assert_cmpuint (dfl_dtype_size (DFL_DTYPE_F32), ==, 4);
  g_assert_cmpuint (dfl_dtype_size (DFL_DTYPE_BF16), ==, 2);
  g_assert_cmpuint (dfl_dtype_size (DFL_DTYPE_F16), ==, 2);
}

/* Bad sizes and bad arguments are errors that name the call, and the device
 * works on after them. */
static void
test_errors (void)
{
  GError *error = NULL;
  void *d = dfl_cuda_alloc (dev, (size_t) 1 << 50, &error);
  float *d_x;
  int32_t *d_i;

  g_assert_null (d);
  g_assert_error (error, DFL_ERROR, DFL_ERROR_LIMIT);
  g_assert_nonnull (strstr (error->message, "1125899906842624"));
  g_clear_error (&error);
  g_assert_true (dfl_cuda_sync (dev, &error));

  d_x = up (NULL, 4096 * sizeof (float));
  d_i = up (NULL, 64 * sizeof (int32_t));
  dfl_cuda_attention (dev, d_x, 1, 2, 2, 512, d_x, d_x, 0, 1024, d_i, d_i, 64, 1.0f, d_x);
  g_assert_false (dfl_cuda_sync (dev, &error));
  g_assert_error (error, DFL_ERROR, DFL_ERROR_INVALID);
  g_assert_nonnull (strstr (error->message, "dfl_cuda_attention"));
  g_assert_nonnull (strstr (error->message, "512"));
  g_clear_error (&error);
  /* K/V rows are read as float4: a stride of 130 floats is refused, named */
  dfl_cuda_attention (dev, d_x, 1, 2, 2, 64, d_x, d_x, 0, 130, d_i, d_i, 16, 1.0f, d_x);
  g_assert_false (dfl_cuda_sync (dev, &error));
  g_assert_error (error, DFL_ERROR, DFL_ERROR_INVALID);
  g_assert_nonnull (strstr (error->message, "stride 130"));
  g_clear_error (&error);
  /* BF16 keys are read eight to 16 bytes: head_dim 68 is refused for them */
  dfl_cuda_attention (dev, d_x, 1, 2, 2, 68, d_x, d_x, 1, 136, d_i, d_i, 16, 1.0f, d_x);
  g_assert_false (dfl_cuda_sync (dev, &error));
  g_assert_error (error, DFL_ERROR, DFL_ERROR_INVALID);
  g_assert_nonnull (strstr (error->message, "BF16"));
  g_assert_nonnull (strstr (error->message, "head_dim 68"));
  g_clear_error (&error);

  dfl_cuda_top_k (dev, d_x, 1, 16, 16, 65, d_x, d_i);
  g_assert_false (dfl_cuda_check (dev, "top-k of 65", &error));
  g_assert_error (error, DFL_ERROR, DFL_ERROR_INVALID);
  g_assert_nonnull (strstr (error->message, "dfl_cuda_top_k"));
  g_clear_error (&error);

  dfl_cuda_memset (dev, d_x, 0, 16);
  g_assert_true (dfl_cuda_sync (dev, &error));
  dfl_cuda_free (dev, d_x);
  dfl_cuda_free (dev, d_i);
  dfl_cuda_free (dev, NULL);
}

/* --- matmul --- */

/* y = x · Wᵀ of `rows` rows with padded strides, against double. 16-bit
 * weights: the kernel's contract is to round x to the weights' type, so the
 * reference multiplies the rounded x by the stored weights (the rounding of
 * x alone, 2⁻⁹ relative for BF16, would hide any error of the sum); what is
 * left is the F32 accumulation, held to 1e-5 of the row's scale Σ|x·w|. */
static void
check_matmul_padded (DflDtype type, int rows, int in, int x_pad, int out, int n_out,
                     gboolean acc)
{
  g_autoptr (GRand) r = g_rand_new_with_seed (rows * 7919 + in * 31 + out + type * 3 + acc);
  int ldx = in + x_pad, ldy = n_out + 5;
  size_t ny = (size_t) rows * ldy;
  g_autofree float *wf = random_floats (r, (size_t) out * in, 1.0f);
  g_autofree void *wh = pack (type, wf, (size_t) out * in);
  g_autofree float *x = random_floats (r, (size_t) rows * ldx, 1.0f);
  g_autofree float *y0 = random_floats (r, ny, 1.0f);
  g_autofree float *y = g_new (float, ny);
  void *d_w = up (wh, (size_t) out * in * dfl_dtype_size (type));
  float *d_x = up (x, sizeof (float) * rows * ldx);
  float *d_y = up (y0, sizeof (float) * ny);
  void *d_scratch = type == DFL_DTYPE_F32 ? NULL : up (NULL, (size_t) rows * in * 2);
  DflCudaWeights w = { d_w, type, out, in };

  dfl_cuda_matmul (dev, &w, d_x, rows, ldx, d_y, ldy, n_out, acc, d_scratch);
  sync_ok ();
  down (y, d_y, sizeof (float) * ny);
  for (int i = 0; i < rows; i++)
    for (int o = 0; o < ldy; o++) {
      size_t at = (size_t) i * ldy + o;
      double want = 0.0, scale = 0.0;
      if (o >= n_out) {
        /* the padding of y is not touched */
        g_assert_true (memcmp (&y[at], &y0[at], sizeof (float)) == 0);
        continue;
      }
      for (int c = 0; c < in; c++) {
        double p = (double) round_to (type, x[(size_t) i * ldx + c])
                   * round_to (type, wf[(size_t) o * in + c]);
        want += p;
        scale += fabs (p);
      }
      if (acc)
        want += y0[at];
      assert_close ("matmul", at, y[at], want, 1e-5 * (scale + (acc ? fabs (y0[at]) : 0.0))
                                                  + 1e-30);
    }
  dfl_cuda_free (dev, d_w);
  dfl_cuda_free (dev, d_x);
  dfl_cuda_free (dev, d_y);
  dfl_cuda_free (dev, d_scratch);
}

static void
check_matmul (DflDtype type, int rows, int in, int out, int n_out, gboolean acc)
{
  check_matmul_padded (type, rows, in, 3, out, n_out, acc);
}

static void
test_matmul (void)
{
  const DflDtype types[] = { DFL_DTYPE_F32, DFL_DTYPE_BF16, DFL_DTYPE_F16 };
  const int rows[] = { 1, 3, 16, 37 };

  for (guint t = 0; t < G_N_ELEMENTS (types); t++)
    for (guint i = 0; i < G_N_ELEMENTS (rows); i++) {
      check_matmul (types[t], rows[i], 67, 45, 45, FALSE);
      check_matmul (types[t], rows[i], 256, 130, 97, TRUE);   /* a shortlist of the rows */
      check_matmul (types[t], rows[i], 1000, 301, 301, FALSE);
      check_matmul (types[t], rows[i], 1000, 301, 301, TRUE);
      /* rows 16-byte aligned, in a multiple of 8: the one-row kernel's
       * vector loads */
      check_matmul_padded (types[t], rows[i], 1024, 4, 515, 515, FALSE);
      check_matmul_padded (types[t], rows[i], 2048, 0, 300, 257, TRUE);
    }
}

/* A product of 16-bit weights over 1 to 32 rows whose inputs are whole
 * 32-column steps: a row's outputs bitwise the same whatever rows come
 * with it (the token a plain step decodes is the token a verification
 * of a block finds); a shape like the default pair's head, one like an
 * MLP's, and one that ends mid-tile. */
static void
test_matmul_rows_invariant (void)
{
  const DflDtype types[] = { DFL_DTYPE_BF16, DFL_DTYPE_F16 };
  const int shapes[][2] = { { 384, 8192 }, { 1024, 384 }, { 2048, 515 } };
  const int all = 32, counts[] = { 1, 2, 7, 16, 17 };

  for (guint t = 0; t < G_N_ELEMENTS (types); t++)
    for (guint s = 0; s < G_N_ELEMENTS (shapes); s++) {
      int in = shapes[s][0], out = shapes[s][1];
      g_autoptr (GRand) r = g_rand_new_with_seed (in + out + t);
      g_autofree float *wf = random_floats (r, (size_t) out * in, 1.0f);
      g_autofree void *wh = pack (types[t], wf, (size_t) out * in);
      g_autofree float *x = random_floats (r, (size_t) all * in, 1.0f);
      g_autofree float *whole = g_new (float, (size_t) all * out);
      g_autofree float *part = g_new (float, (size_t) all * out);
      void *d_w = up (wh, (size_t) out * in * 2);
      float *d_x = up (x, sizeof (float) * all * in);
      float *d_y = up (NULL, sizeof (float) * all * out);
      DflCudaWeights w = { d_w, types[t], out, in };

      g_assert_cmpint (dfl_cuda_matmul_choice (&w, 1), ==, DFL_CUDA_MATMUL_FEW_ROWS);
      dfl_cuda_matmul (dev, &w, d_x, all, in, d_y, out, out, FALSE, NULL);
      sync_ok ();
      down (whole, d_y, sizeof (float) * all * out);
      for (guint c = 0; c < G_N_ELEMENTS (counts); c++) {
        int n = counts[c], first = (all - n) / 2;
        dfl_cuda_matmul (dev, &w, d_x + (size_t) first * in, n, in, d_y, out, out, FALSE, NULL);
        sync_ok ();
        down (part, d_y, sizeof (float) * n * out);
        g_assert_cmpmem (part, sizeof (float) * n * out, whole + (size_t) first * out,
                         sizeof (float) * n * out);
      }
      dfl_cuda_free (dev, d_w);
      dfl_cuda_free (dev, d_x);
      dfl_cuda_free (dev, d_y);
    }
}

/* Products of one x in one launch (dfl_cuda_matmul_group) over `rows`
 * rows from row `first` of x (and of y's starting values, made for 32
 * rows): against double as check_matmul_padded (three products, the last
 * a shortlist of its weights, x and y with padded strides); and returns
 * the outputs, product after product, in `got`. */
static void
run_matmul_group (DflDtype type, int rows, int first, int in, int x_pad, gboolean acc,
                  const float *x,
                  const float *const *wf, const void *const *wh, const int *outs,
                  const int *n_out, float *got)
{
  int ldx = in + x_pad;
  float *d_x = up (x + (size_t) first * ldx, sizeof (float) * rows * ldx), *d_y[3];
  void *d_w[3], *d_scratch = up (NULL, (size_t) rows * in * 2);
  DflCudaWeights w[3];
  int ldy[3];
  float *y0[3];
  size_t at = 0;

  for (int i = 0; i < 3; i++) {
    g_autoptr (GRand) r = g_rand_new_with_seed (50 + i);
    ldy[i] = n_out[i] + 3;
    y0[i] = random_floats (r, (size_t) 32 * ldy[i], 1.0f);
    memmove (y0[i], y0[i] + (size_t) first * ldy[i], sizeof (float) * rows * ldy[i]);
    d_w[i] = up (wh[i], (size_t) outs[i] * in * 2);
    d_y[i] = up (y0[i], sizeof (float) * rows * ldy[i]);
    w[i] = (DflCudaWeights) { d_w[i], type, outs[i], in };
  }
  g_test_message ("matmul_group: %s, %d rows from %d, in %d, outputs %d %d %d%s",
                  dfl_dtype_name (type), rows, first, in, n_out[0], n_out[1], n_out[2],
                  acc ? ", accumulating" : "");
  dfl_cuda_matmul_group (dev, 3, w, d_x, rows, ldx, d_y, ldy, n_out, acc, d_scratch);
  sync_ok ();
  for (int i = 0; i < 3; i++) {
    g_autofree float *y = g_new (float, (size_t) rows * ldy[i]);
    down (y, d_y[i], sizeof (float) * rows * ldy[i]);
    for (int k = 0; k < rows; k++)
      for (int o = 0; o < ldy[i]; o++) {
        size_t yi = (size_t) k * ldy[i] + o;
        double want = acc ? y0[i][yi] : 0.0, scale = fabs (want);
        if (o >= n_out[i]) {
          g_assert_true (memcmp (&y[yi], &y0[i][yi], sizeof (float)) == 0);
          continue;
        }
        for (int c = 0; c < in; c++) {
          double p = (double) round_to (type, x[(size_t) (first + k) * ldx + c])
                     * round_to (type, wf[i][(size_t) o * in + c]);
          want += p;
          scale += fabs (p);
        }
        assert_close ("matmul_group", yi, y[yi], want, 1e-5 * scale + 1e-30);
        got[at++] = y[yi];
      }
    dfl_cuda_free (dev, d_w[i]);
    dfl_cuda_free (dev, d_y[i]);
    g_free (y0[i]);
  }
  dfl_cuda_free (dev, d_x);
  dfl_cuda_free (dev, d_scratch);
}

/* A group against double for 1 to 32 rows: few outputs in all, inputs in
 * whole 32-column steps, one launch of the tensor-core kernel, whose row's
 * outputs are bitwise the same for any number of rows from 1 to 32;
 * wider groups and ragged inputs a product a call; one row: each output
 * bitwise what dfl_cuda_matmul gives alone, whichever way. */
static void
check_matmul_group (DflDtype type, int in, int x_pad, const int *outs, const int *n_out)
{
  const int all = 32, counts[] = { 1, 2, 3, 16, 17, 31 };
  g_autoptr (GRand) r = g_rand_new_with_seed (in * 7 + outs[0] + type);
  int ldx = in + x_pad;
  size_t per_row = (size_t) n_out[0] + n_out[1] + n_out[2];
  g_autofree float *x = random_floats (r, (size_t) all * ldx, 1.0f);
  g_autofree float *whole = g_new (float, all * per_row);
  g_autofree float *part = g_new (float, all * per_row);
  float *wf[3];
  void *wh[3];

  for (int i = 0; i < 3; i++) {
    wf[i] = random_floats (r, (size_t) outs[i] * in, 1.0f);
    wh[i] = pack (type, wf[i], (size_t) outs[i] * in);
  }
  for (int acc = 0; acc < 2; acc++) {
    run_matmul_group (type, all, 0, in, x_pad, acc, x, (const float *const *) wf,
                      (const void *const *) wh, outs, n_out, whole);
    for (guint c = 0; c < G_N_ELEMENTS (counts); c++) {
      int n = counts[c], first = (all - n) / 2;
      run_matmul_group (type, n, first, in, x_pad, acc, x, (const float *const *) wf,
                        (const void *const *) wh, outs, n_out, part);
      if (in % 32 == 0 && ldx % 4 == 0 && per_row <= 8192) {
        /* the rows from `first` in each product: the same bits as among 32 */
        size_t a = 0, b = 0;
        for (int i = 0; i < 3; i++) {
          g_assert_cmpmem (part + a, sizeof (float) * n * n_out[i],
                           whole + b + (size_t) first * n_out[i], sizeof (float) * n * n_out[i]);
          a += (size_t) n * n_out[i];
          b += (size_t) all * n_out[i];
        }
      }
      if (n == 1) {
        /* one row: each product's outputs those of dfl_cuda_matmul */
        float *d_x = up (x + (size_t) first * ldx, sizeof (float) * in);
        size_t at = 0;
        for (int i = 0; i < 3; i++) {
          g_autoptr (GRand) ry = g_rand_new_with_seed (50 + i);
          g_autofree float *y0 = random_floats (ry, (size_t) 32 * (n_out[i] + 3), 1.0f);
          g_autofree float *alone = g_new (float, n_out[i]);
          void *d_w = up (wh[i], (size_t) outs[i] * in * 2);
          float *d_y = up (y0 + (size_t) first * (n_out[i] + 3), sizeof (float) * n_out[i]);
          DflCudaWeights w = { d_w, type, outs[i], in };
          dfl_cuda_matmul (dev, &w, d_x, 1, ldx, d_y, n_out[i], n_out[i], acc, NULL);
          sync_ok ();
          down (alone, d_y, sizeof (float) * n_out[i]);
          g_assert_cmpmem (part + at, sizeof (float) * n_out[i], alone,
                           sizeof (float) * n_out[i]);
          at += n_out[i];
          dfl_cuda_free (dev, d_w);
          dfl_cuda_free (dev, d_y);
        }
        dfl_cuda_free (dev, d_x);
      }
    }
  }
  for (int i = 0; i < 3; i++) {
    g_free (wf[i]);
    g_free (wh[i]);
  }
}

static void
test_matmul_group (void)
{
  const DflDtype types[] = { DFL_DTYPE_BF16, DFL_DTYPE_F16 };
  /* q, k and v of a small model; the last a shortlist */
  const int qkv[3] = { 512, 128, 128 }, qkv_n[3] = { 512, 128, 100 };
  /* outputs that end mid-tile, an input split unevenly over the warps */
  const int ragged[3] = { 515, 9, 77 };
  /* wider than one launch of the tensor-core kernel takes */
  const int wide[3] = { 4100, 4100, 8 };

  for (guint t = 0; t < G_N_ELEMENTS (types); t++) {
    check_matmul_group (types[t], 1024, 4, qkv, qkv_n);
    check_matmul_group (types[t], 800, 0, ragged, ragged);
    check_matmul_group (types[t], 64, 0, wide, wide);
    /* in not a multiple of 32, x not aligned: a product a call */
    check_matmul_group (types[t], 100, 3, ragged, ragged);
  }
  /* more products than a launch takes: refused, named */
  {
    GError *error = NULL;
    DflCudaWeights w[5] = { { NULL } };
    float *y[5] = { NULL };
    int ld[5] = { 0 }, n[5] = { 0 };
    dfl_cuda_matmul_group (dev, 5, w, NULL, 1, 1, y, ld, n, FALSE, NULL);
    g_assert_false (dfl_cuda_sync (dev, &error));
    g_assert_error (error, DFL_ERROR, DFL_ERROR_INVALID);
    g_assert_nonnull (strstr (error->message, "dfl_cuda_matmul_group"));
    g_clear_error (&error);
  }
}

/* --- gathers and element-wise work --- */

static void
test_embed (void)
{
  const DflDtype types[] = { DFL_DTYPE_F32, DFL_DTYPE_BF16, DFL_DTYPE_F16 };
  g_autoptr (GRand) r = g_rand_new_with_seed (11);
  const int vocab = 301, dim = 77, n = 37;
  g_autofree float *table = random_floats (r, (size_t) vocab * dim, 3.0f);
  int32_t ids[37];
  g_autofree float *outp = g_new (float, (size_t) n * dim);

  for (int i = 0; i < n; i++)
    ids[i] = i == 5 ? ids[2] : g_rand_int_range (r, 0, vocab);   /* a repeated id */
  ids[n - 1] = vocab - 1;
  for (guint t = 0; t < G_N_ELEMENTS (types); t++) {
    g_autofree void *packed = pack (types[t], table, (size_t) vocab * dim);
    void *d_table = up (packed, (size_t) vocab * dim * dfl_dtype_size (types[t]));
    int32_t *d_ids = up (ids, sizeof ids);
    float *d_out = up (NULL, sizeof (float) * n * dim);
    dfl_cuda_embed (dev, d_table, types[t], dim, d_ids, n, d_out);
    sync_ok ();
    down (outp, d_out, sizeof (float) * n * dim);
    for (int i = 0; i < n; i++)
      for (int c = 0; c < dim; c++)
        g_assert_cmpfloat (outp[(size_t) i * dim + c], ==,
                           round_to (types[t], table[(size_t) ids[i] * dim + c]));
    dfl_cuda_free (dev, d_table);
    dfl_cuda_free (dev, d_ids);
    dfl_cuda_free (dev, d_out);
  }
}

static void
check_rmsnorm (int rows, int dim, gboolean in_place)
{
  g_autoptr (GRand) r = g_rand_new_with_seed (rows * 100 + dim + in_place);
  size_t n = (size_t) rows * dim;
  g_autofree float *x = random_floats (r, n, 4.0f);
  g_autofree float *w = random_floats (r, dim, 2.0f);
  g_autofree float *y = g_new (float, n);
  float *d_x = up (x, sizeof (float) * n), *d_w = up (w, sizeof (float) * dim);
  float *d_y = in_place ? d_x : up (NULL, sizeof (float) * n);
  const float eps = 1e-6f;

  x[0] = 0.0f;   /* a zero stays zero */
  dfl_cuda_upload (dev, d_x, x, sizeof (float), NULL);
  dfl_cuda_rmsnorm (dev, d_y, d_x, rows, dim, d_w, eps);
  sync_ok ();
  down (y, d_y, sizeof (float) * n);
  for (int i = 0; i < rows; i++) {
    double ss = 0.0, s;
    for (int c = 0; c < dim; c++)
      ss += (double) x[(size_t) i * dim + c] * x[(size_t) i * dim + c];
    s = 1.0 / sqrt (ss / dim + eps);
    for (int c = 0; c < dim; c++) {
      size_t at = (size_t) i * dim + c;
      double want = x[at] * s * w[c];
      assert_close ("rmsnorm", at, y[at], want, 1e-5 * fabs (want));
    }
  }
  dfl_cuda_free (dev, d_x);
  dfl_cuda_free (dev, d_w);
  if (!in_place)
    dfl_cuda_free (dev, d_y);
}

static void
test_rmsnorm (void)
{
  const int rows[] = { 1, 3, 16, 37 }, dims[] = { 64, 1000, 4096 };

  for (guint i = 0; i < G_N_ELEMENTS (rows); i++)
    for (guint j = 0; j < G_N_ELEMENTS (dims); j++) {
      check_rmsnorm (rows[i], dims[j], FALSE);
      check_rmsnorm (rows[i], dims[j], TRUE);
    }
}

/* rope reference: the angle as the float product position × inv_freq (the
 * contract), its cosine and sine and the rotation in double */
static void
rope_reference (float *x, int rows, int heads, int hd, const float *inv, int64_t pos0)
{
  int half = hd / 2;
  for (int i = 0; i < rows; i++) {
    float p = (float) (pos0 + i);
    for (int h = 0; h < heads; h++) {
      float *lo = x + ((size_t) i * heads + h) * hd, *hi = lo + half;
      for (int c = 0; c < half; c++) {
        float a = p * inv[c];
        double u = lo[c], v = hi[c];
        lo[c] = (float) (u * cos (a) - v * sin (a));
        hi[c] = (float) (v * cos (a) + u * sin (a));
      }
    }
  }
}

static void
inv_freq_of (float *inv, int hd)
{
  for (int c = 0; c < hd / 2; c++)
    inv[c] = (float) pow (1000000.0, -(2.0 * c) / hd);
}

static void
check_rope (int rows, int heads, int hd, int64_t pos0)
{
  g_autoptr (GRand) r = g_rand_new_with_seed (rows * 13 + hd + pos0);
  size_t n = (size_t) rows * heads * hd;
  g_autofree float *x = random_floats (r, n, 2.0f);
  g_autofree float *want = g_memdup2 (x, sizeof (float) * n);
  g_autofree float *got = g_new (float, n);
  g_autofree float *inv = g_new (float, hd / 2);
  float *d_x, *d_inv;
  int64_t *d_pos;

  inv_freq_of (inv, hd);
  d_x = up (x, sizeof (float) * n);
  d_inv = up (inv, sizeof (float) * (hd / 2));
  d_pos = up (&pos0, sizeof pos0);
  dfl_cuda_rope (dev, d_x, rows, heads, hd, d_inv, d_pos);
  sync_ok ();
  down (got, d_x, sizeof (float) * n);
  rope_reference (want, rows, heads, hd, inv, pos0);
  for (size_t i = 0; i < n; i++)
    assert_close ("rope", i, got[i], want[i], 1e-5 * 2.0 * 2.0);
  dfl_cuda_free (dev, d_x);
  dfl_cuda_free (dev, d_inv);
  dfl_cuda_free (dev, d_pos);
}

static void
test_rope (void)
{
  const int rows[] = { 1, 3, 16 };
  const int64_t pos[] = { 0, 7, 3000, 40000 };

  for (guint i = 0; i < G_N_ELEMENTS (rows); i++)
    for (guint p = 0; p < G_N_ELEMENTS (pos); p++) {
      check_rope (rows[i], 3, 64, pos[p]);
      check_rope (rows[i], 8, 128, pos[p]);
    }
}

static void
test_elementwise (void)
{
  g_autoptr (GRand) r = g_rand_new_with_seed (5);
  const size_t n = 100003;
  g_autofree float *g = random_floats (r, n, 12.0f);
  g_autofree float *u = random_floats (r, n, 3.0f);
  g_autofree float *got = g_new (float, n);
  float *d_g = up (g, sizeof (float) * n), *d_u = up (u, sizeof (float) * n);

  dfl_cuda_silu_mul (dev, d_g, d_u, n);
  sync_ok ();
  down (got, d_g, sizeof (float) * n);
  for (size_t i = 0; i < n; i++) {
    double want = g[i] / (1.0 + exp (-(double) g[i])) * u[i];
    assert_close ("silu_mul", i, got[i], want, 1e-5 * fabs (want) + 1e-30);
  }
  dfl_cuda_upload (dev, d_g, g, sizeof (float) * n, NULL);
  dfl_cuda_add (dev, d_g, d_u, n);
  sync_ok ();
  down (got, d_g, sizeof (float) * n);
  for (size_t i = 0; i < n; i++)
    g_assert_cmpfloat (got[i], ==, (float) ((double) g[i] + u[i]));

  /* 7 rows of 1000 from u into g at the row held on the card (37): the
   * rows before and after are left as they were */
  {
    const int64_t row0 = 37;
    int64_t *d_row0 = up (&row0, sizeof row0);
    dfl_cuda_upload (dev, d_g, g, sizeof (float) * n, NULL);
    dfl_cuda_copy_rows_at (dev, d_g, 0, 1000, d_row0, d_u, 0, 7);
    sync_ok ();
    down (got, d_g, sizeof (float) * n);
    for (size_t i = 0; i < n; i++) {
      gboolean moved = i >= 37000 && i < 44000;
      g_assert_cmpfloat (got[i], ==, moved ? u[i - 37000] : g[i]);
    }
    dfl_cuda_free (dev, d_row0);
  }
  dfl_cuda_free (dev, d_g);
  dfl_cuda_free (dev, d_u);
}

/* --- attention --- */

static void
attention_reference (const float *q, int rows, int heads, int kv_heads, int hd, const float *k,
                     const float *v, int kv_stride, const int32_t *lo, const int32_t *hi,
                     float scale, double *out, double *smax)
{
  for (int i = 0; i < rows; i++)
    for (int h = 0; h < heads; h++) {
      int g = h / (heads / kv_heads);
      const float *qr = q + ((size_t) i * heads + h) * hd;
      double *o = out + ((size_t) i * heads + h) * hd;
      double top = -INFINITY, sum = 0.0, big = 0.0;
      int len = MAX (hi[i] - lo[i], 0);
      double *s = g_new (double, MAX (len, 1));
      for (int j = 0; j < len; j++) {
        const float *kj = k + (size_t) (lo[i] + j) * kv_stride + (size_t) g * hd;
        double dot = 0.0;
        for (int c = 0; c < hd; c++)
          dot += (double) qr[c] * kj[c];
        s[j] = dot * scale;
        top = MAX (top, s[j]);
        big = MAX (big, fabs (s[j]));
      }
      smax[(size_t) i * heads + h] = big;
      for (int j = 0; j < len; j++)
        sum += (s[j] = exp (s[j] - top));
      for (int c = 0; c < hd; c++) {
        double a = 0.0;
        for (int j = 0; j < len; j++)
          a += s[j] * v[(size_t) (lo[i] + j) * kv_stride + (size_t) g * hd + c];
        o[c] = len ? a / sum : 0.0;
      }
      g_free (s);
    }
}

/* Ranges of every kind over `keys` keys: empty, one key, the long causal
 * one, a window away from 0, and the tile edges (63, 64, 65 keys). Values
 * are in [−1, 1) and the weights sum to 1, so the output's error is held to
 * 1e-5 absolute, widened by the largest |score| of the head (an F32 score
 * is off by about its own size × 1e-7, and exp turns that into a relative
 * error of the weight); `sharp` scales q so the softmax is peaked, not
 * flat. */
static void
check_attention (int rows, int heads, int kv_heads, int hd, int keys, float sharp)
{
  g_autoptr (GRand) r = g_rand_new_with_seed (rows * 17 + heads * 5 + hd + keys);
  int kv_stride = kv_heads * hd + 4;    /* padded rows exercise the stride */
  size_t nq = (size_t) rows * heads * hd, nkv = (size_t) keys * kv_stride;
  g_autofree float *q = random_floats (r, nq, sharp);
  g_autofree float *k = random_floats (r, nkv, 1.0f);
  g_autofree float *v = random_floats (r, nkv, 1.0f);
  g_autofree float *got = g_new (float, nq);
  g_autofree double *want = g_new (double, nq);
  g_autofree double *smax = g_new (double, (size_t) rows * heads);
  g_autofree int32_t *lo = g_new (int32_t, rows);
  g_autofree int32_t *hi = g_new (int32_t, rows);
  float scale = 1.0f / sqrtf ((float) hd);
  float *d_q, *d_k, *d_v, *d_out;
  int32_t *d_lo, *d_hi;

  for (int i = 0; i < rows; i++) {
    switch (i % 8) {
    case 0: lo[i] = 0; hi[i] = keys - rows + i + 1; break;     /* causal over the past */
    case 1: lo[i] = 5; hi[i] = 5; break;                       /* empty */
    case 2: lo[i] = keys - 1; hi[i] = keys; break;             /* one key */
    case 3: lo[i] = keys / 3; hi[i] = keys; break;             /* a window, lo > 0 */
    case 4: lo[i] = 1; hi[i] = 64; break;                      /* 63 keys */
    case 5: lo[i] = 0; hi[i] = 64; break;                      /* one full tile */
    case 6: lo[i] = 10; hi[i] = 75; break;                     /* 65 keys */
    default: lo[i] = 0; hi[i] = keys; break;                   /* all of them */
    }
  }
  d_q = up (q, sizeof (float) * nq);
  d_k = up (k, sizeof (float) * nkv);
  d_v = up (v, sizeof (float) * nkv);
  d_lo = up (lo, sizeof (int32_t) * rows);
  d_hi = up (hi, sizeof (int32_t) * rows);
  d_out = up (NULL, sizeof (float) * nq);
  dfl_cuda_memset (dev, d_out, 0x7f, sizeof (float) * nq);   /* empty rows must be written */
  dfl_cuda_attention (dev, d_q, rows, heads, kv_heads, hd, d_k, d_v, 0, kv_stride, d_lo, d_hi,
                      keys, scale, d_out);
  sync_ok ();
  down (got, d_out, sizeof (float) * nq);
  attention_reference (q, rows, heads, kv_heads, hd, k, v, kv_stride, lo, hi, scale, want, smax);
  for (size_t i = 0; i < nq; i++)
    assert_close ("attention", i, got[i], want[i], 1e-5 * (1.0 + smax[i / hd]));
  dfl_cuda_free (dev, d_q);
  dfl_cuda_free (dev, d_k);
  dfl_cuda_free (dev, d_v);
  dfl_cuda_free (dev, d_lo);
  dfl_cuda_free (dev, d_hi);
  dfl_cuda_free (dev, d_out);
}

/* Few (row, head) pairs split the keys over several blocks and merge the
 * splits; many pairs (here 512, above twice the multiprocessors of any card
 * this runs on) take one block each: both paths are checked. */
static void
test_attention (void)
{
  check_attention (64, 8, 2, 64, 700, 2.0f);
  check_attention (1, 8, 2, 64, 3000, 1.0f);
  check_attention (16, 8, 2, 64, 3000, 1.0f);
  check_attention (16, 8, 2, 128, 3000, 8.0f);
  check_attention (37, 4, 4, 128, 200, 4.0f);
  check_attention (3, 2, 1, 256, 300, 2.0f);
  check_attention (8, 6, 3, 80, 100, 1.0f);    /* a head_dim that is not a multiple of 32 */
  check_attention (20, 32, 8, 128, 1000, 4.0f); /* 80 query vectors a kv head: two groups */
}

/* Batch invariance: a row's output is bitwise the same computed alone (a
 * decode step) as among 16 causal rows (a verify step), and whatever bound
 * on the keys the launch is given. */
static void
test_attention_invariant (void)
{
  const int rows = 16, heads = 32, kv_heads = 8, hd = 128, past = 1000, cap = 4096;
  const int kv_stride = kv_heads * hd;
  g_autoptr (GRand) r = g_rand_new_with_seed (99);
  size_t nq = (size_t) rows * heads * hd, nkv = (size_t) cap * kv_stride;
  g_autofree float *q = random_floats (r, nq, 4.0f);
  g_autofree float *k = random_floats (r, nkv, 1.0f);
  g_autofree float *v = random_floats (r, nkv, 1.0f);
  g_autofree float *all = g_new (float, nq), *wide = g_new (float, nq), *one = g_new (float, nq);
  int32_t lo[16], hi[16];
  float *d_q, *d_k, *d_v, *d_out;
  int32_t *d_lo, *d_hi;
  float scale = 1.0f / sqrtf ((float) hd);

  for (int i = 0; i < rows; i++) {
    lo[i] = 0;
    hi[i] = past + i + 1;
  }
  d_q = up (q, sizeof (float) * nq);
  d_k = up (k, sizeof (float) * nkv);
  d_v = up (v, sizeof (float) * nkv);
  d_lo = up (lo, sizeof lo);
  d_hi = up (hi, sizeof hi);
  d_out = up (NULL, sizeof (float) * nq);
  dfl_cuda_attention (dev, d_q, rows, heads, kv_heads, hd, d_k, d_v, 0, kv_stride, d_lo, d_hi,
                      past + rows, scale, d_out);
  sync_ok ();
  down (all, d_out, sizeof (float) * nq);
  dfl_cuda_attention (dev, d_q, rows, heads, kv_heads, hd, d_k, d_v, 0, kv_stride, d_lo, d_hi,
                      cap, scale, d_out);
  sync_ok ();
  down (wide, d_out, sizeof (float) * nq);
  g_assert_cmpmem (all, sizeof (float) * nq, wide, sizeof (float) * nq);
  for (int i = 0; i < rows; i++) {
    size_t at = (size_t) i * heads * hd;
    dfl_cuda_attention (dev, d_q + at, 1, heads, kv_heads, hd, d_k, d_v, 0, kv_stride, d_lo + i,
                        d_hi + i, hi[i], scale, d_out + at);
  }
  sync_ok ();
  down (one, d_out, sizeof (float) * nq);
  g_assert_cmpmem (all, sizeof (float) * nq, one, sizeof (float) * nq);
  dfl_cuda_free (dev, d_q);
  dfl_cuda_free (dev, d_k);
  dfl_cuda_free (dev, d_v);
  dfl_cuda_free (dev, d_lo);
  dfl_cuda_free (dev, d_hi);
  dfl_cuda_free (dev, d_out);
}

/* A BF16 cache: its rows written from F32 (rounded to nearest even, the
 * host's dfl_f32_to_bf16), grown by a BF16 copy, and attention over it
 * (on the tensor cores) within BF16's rounding of the attention over an
 * F32 cache of the same values, each row alone bitwise the same row among
 * 16, at both chunk lengths (head_dim 128 and 256). */
static void
check_attention_bf16 (int hd)
{
  const int rows = 16, heads = 8, kv_heads = 2, keys = 700;
  const int kv_stride = kv_heads * hd;
  g_autoptr (GRand) r = g_rand_new_with_seed (7 + hd);
  size_t nq = (size_t) rows * heads * hd, nkv = (size_t) keys * kv_stride;
  g_autofree float *q = random_floats (r, nq, 4.0f);
  g_autofree float *k = random_floats (r, nkv, 1.0f);
  g_autofree float *v = random_floats (r, nkv, 1.0f);
  g_autofree uint16_t *kb = g_new (uint16_t, nkv), *got_bits = g_new (uint16_t, nkv);
  g_autofree float *f32 = g_new (float, nq), *b16 = g_new (float, nq), *one = g_new (float, nq);
  int32_t lo[16], hi[16];
  const int64_t zero = 0;
  float scale = 1.0f / sqrtf ((float) hd);
  float *d_q, *d_k, *d_v, *d_out, *d_kf;
  void *d_kb, *d_vb, *d_grown;
  int64_t *d_zero;
  int32_t *d_lo, *d_hi;

  for (int i = 0; i < rows; i++) {
    lo[i] = i % 3 == 1 ? 100 : 0;
    hi[i] = keys - rows + i + 1;
  }
  /* the F32 cache holds the values the BF16 one does */
  for (size_t i = 0; i < nkv; i++) {
    kb[i] = dfl_f32_to_bf16 (k[i]);
    k[i] = dfl_bf16_to_f32 (kb[i]);
    v[i] = dfl_bf16_to_f32 (dfl_f32_to_bf16 (v[i]));
  }
  d_q = up (q, sizeof (float) * nq);
  d_k = up (k, sizeof (float) * nkv);
  d_v = up (v, sizeof (float) * nkv);
  d_lo = up (lo, sizeof lo);
  d_hi = up (hi, sizeof hi);
  d_zero = up (&zero, sizeof zero);
  d_out = up (NULL, sizeof (float) * nq);
  d_kb = up (NULL, 2 * nkv);
  d_vb = up (NULL, 2 * nkv);
  d_grown = up (NULL, 2 * nkv);
  /* the BF16 cache written as the target writes one, from F32 rows (the
   * rounded ones round to themselves; the raw ones are checked below) */
  d_kf = up (NULL, sizeof (float) * nkv);
  {
    g_autofree float *raw = random_floats (r, nkv, 1.0f);
    dfl_cuda_upload (dev, d_kf, raw, sizeof (float) * nkv, NULL);
    dfl_cuda_copy_rows_at (dev, d_kb, 1, kv_stride, d_zero, d_kf, 0, keys);
    sync_ok ();
    down (got_bits, d_kb, 2 * nkv);
    for (size_t i = 0; i < nkv; i++)
      if (got_bits[i] != dfl_f32_to_bf16 (raw[i]))
        g_error ("F32 → BF16 row element %zu: %04x, want %04x (of %a)", i, got_bits[i],
                 dfl_f32_to_bf16 (raw[i]), raw[i]);
  }
  dfl_cuda_copy_rows_at (dev, d_kb, 1, kv_stride, d_zero, d_k, 0, keys);
  dfl_cuda_copy_rows_at (dev, d_vb, 1, kv_stride, d_zero, d_v, 0, keys);
  /* a grown cache: BF16 rows copied as they are */
  dfl_cuda_copy_rows_at (dev, d_grown, 1, kv_stride, d_zero, d_kb, 1, keys);
  sync_ok ();
  down (got_bits, d_grown, 2 * nkv);
  g_assert_cmpmem (got_bits, 2 * nkv, kb, 2 * nkv);

  dfl_cuda_attention (dev, d_q, rows, heads, kv_heads, hd, d_k, d_v, 0, kv_stride, d_lo, d_hi,
                      keys, scale, d_out);
  sync_ok ();
  down (f32, d_out, sizeof (float) * nq);
  dfl_cuda_attention (dev, d_q, rows, heads, kv_heads, hd, d_kb, d_vb, 1, kv_stride, d_lo, d_hi,
                      keys, scale, d_out);
  sync_ok ();
  down (b16, d_out, sizeof (float) * nq);
  /* on the tensor cores q and p are rounded to BF16 too: within their
   * rounding of the F32 attention over the same keys and values, each
   * head's output against its largest value */
  for (size_t o = 0; o < nq; o += hd) {
    double top = 0, diff = 0;
    for (int d = 0; d < hd; d++) {
      top = MAX (top, fabs (f32[o + d]));
      diff = MAX (diff, fabs ((double) b16[o + d] - f32[o + d]));
    }
    if (diff > 2e-2 * top + 1e-6)
      g_error ("BF16 attention, head_dim %d, output %zu: %.3g off the F32 attention's (largest "
               "%.3g)", hd, o / hd, diff, top);
  }
  for (int i = 0; i < rows; i++) {
    size_t at = (size_t) i * heads * hd;
    dfl_cuda_attention (dev, d_q + at, 1, heads, kv_heads, hd, d_kb, d_vb, 1, kv_stride,
                        d_lo + i, d_hi + i, hi[i], scale, d_out + at);
  }
  sync_ok ();
  down (one, d_out, sizeof (float) * nq);
  /* each row alone bitwise the same row among 16 */
  g_assert_cmpmem (one, sizeof (float) * nq, b16, sizeof (float) * nq);
  dfl_cuda_free (dev, d_q);
  dfl_cuda_free (dev, d_k);
  dfl_cuda_free (dev, d_v);
  dfl_cuda_free (dev, d_kf);
  dfl_cuda_free (dev, d_kb);
  dfl_cuda_free (dev, d_vb);
  dfl_cuda_free (dev, d_grown);
  dfl_cuda_free (dev, d_zero);
  dfl_cuda_free (dev, d_lo);
  dfl_cuda_free (dev, d_hi);
  dfl_cuda_free (dev, d_out);
}

static void
test_attention_bf16 (void)
{
  check_attention_bf16 (128);
  check_attention_bf16 (256);
}

/* --- row convolution --- */

static void
check_row_conv (int rows, int dim, int group, int kernel)
{
  g_autoptr (GRand) r = g_rand_new_with_seed (rows * 3 + dim + group + kernel);
  int groups = dim / group, dyn_stride = kernel * groups + 3;
  g_autofree float *x = random_floats (r, (size_t) rows * dim, 1.0f);
  g_autofree float *base = random_floats (r, (size_t) kernel * dim, 1.0f);
  g_autofree float *dyn = random_floats (r, (size_t) rows * dyn_stride, 1.0f);
  g_autofree float *y = g_new (float, (size_t) rows * dim);
  float *d_x = up (x, sizeof (float) * rows * dim);
  float *d_base = up (base, sizeof (float) * kernel * dim);
  float *d_dyn = up (dyn, sizeof (float) * rows * dyn_stride);
  float *d_y = up (NULL, sizeof (float) * rows * dim);

  dfl_cuda_row_conv (dev, d_x, rows, dim, group, kernel, d_base, d_dyn, dyn_stride, d_y);
  sync_ok ();
  down (y, d_y, sizeof (float) * rows * dim);
  for (int i = 0; i < rows; i++)
    for (int c = 0; c < dim; c++) {
      double want = 0.0, scale = 0.0;
      for (int o = 0; o < MIN (kernel, i + 1); o++) {
        double t = ((double) base[(size_t) o * dim + c]
                    + dyn[(size_t) i * dyn_stride + o * groups + c / group])
                   * x[(size_t) (i - o) * dim + c];
        want += t;
        scale += fabs (t);
      }
      assert_close ("row_conv", (size_t) i * dim + c, y[(size_t) i * dim + c], want,
                    1e-5 * scale + 1e-30);
    }
  dfl_cuda_free (dev, d_x);
  dfl_cuda_free (dev, d_base);
  dfl_cuda_free (dev, d_dyn);
  dfl_cuda_free (dev, d_y);
}

static void
test_row_conv (void)
{
  const int rows[] = { 1, 3, 16, 37 };

  for (guint i = 0; i < G_N_ELEMENTS (rows); i++) {
    check_row_conv (rows[i], 120, 8, 4);
    check_row_conv (rows[i], 300, 1, 3);
    check_row_conv (rows[i], 64, 64, 1);
  }
}

/* --- choices --- */

/* Rows full of equal values: values on a grid of eighths, so ties are
 * everywhere; NaNs, −inf, +0 and −0 sprinkled in. */
static void
tie_row (GRand *r, float *x, int n, int nan_every)
{
  for (int i = 0; i < n; i++) {
    x[i] = roundf (dfl_test_frand (r) * 40.0f) / 8.0f;
    if (nan_every && g_rand_int_range (r, 0, nan_every) == 0)
      x[i] = NAN;
    else if (g_rand_int_range (r, 0, 97) == 0)
      x[i] = -INFINITY;
    else if (g_rand_int_range (r, 0, 89) == 0)
      x[i] = g_rand_boolean (r) ? 0.0f : -0.0f;
  }
}

/* the CPU's argmax, restated: index 0 unless a later value is strictly above */
static int
argmax_reference (const float *x, int n)
{
  int best = 0;
  for (int i = 1; i < n; i++)
    if (x[i] > x[best])
      best = i;
  return best;
}

static void
check_argmax (int rows, int n)
{
  g_autoptr (GRand) r = g_rand_new_with_seed (rows + n);
  int ld = n + 9;
  g_autofree float *x = g_new (float, (size_t) rows * ld);
  g_autofree int32_t *got = g_new (int32_t, rows);
  float *d_x;
  int32_t *d_out;

  for (int i = 0; i < rows; i++) {
    float *row = x + (size_t) i * ld;
    tie_row (r, row, n, i % 3 ? 50 : 0);
    if (i % 5 == 1)
      row[0] = NAN;                      /* a NaN first: 0 */
    if (i % 5 == 2)
      for (int c = 0; c < n; c++)
        row[c] = -INFINITY;              /* nothing above −inf: 0 */
    if (i % 5 == 3 && n > 2)
      row[n - 1] = row[n / 2] = 1e30f;   /* the first of two maxima */
  }
  d_x = up (x, sizeof (float) * rows * ld);
  d_out = up (NULL, sizeof (int32_t) * rows);
  dfl_cuda_argmax (dev, d_x, rows, n, ld, d_out);
  sync_ok ();
  down (got, d_out, sizeof (int32_t) * rows);
  for (int i = 0; i < rows; i++)
    g_assert_cmpint (got[i], ==, argmax_reference (x + (size_t) i * ld, n));
  dfl_cuda_free (dev, d_x);
  dfl_cuda_free (dev, d_out);
}

static void
test_argmax (void)
{
  check_argmax (1, 1);
  check_argmax (3, 7);
  check_argmax (37, 1000);
  check_argmax (16, 151936);
}

typedef struct {
  float v;
  int i;
} Entry;

/* larger value first, then smaller index (−0 and +0 compare equal) */
static int
entry_order (const void *a, const void *b)
{
  const Entry *x = a, *y = b;
  if (x->v != y->v)
    return x->v > y->v ? -1 : 1;
  return x->i - y->i;
}

static void
check_top_k (int rows, int n, int k, int nan_every)
{
  g_autoptr (GRand) r = g_rand_new_with_seed (rows * 3 + n + k * 7 + nan_every);
  int ld = n + 5;
  g_autofree float *x = g_new (float, (size_t) rows * ld);
  g_autofree float *vals = g_new (float, (size_t) rows * k);
  g_autofree int32_t *idx = g_new (int32_t, (size_t) rows * k);
  g_autofree Entry *e = g_new (Entry, MAX (n, 1));
  g_autofree float *cpu_vals = g_new (float, k);
  g_autofree guint32 *cpu_idx = g_new (guint32, k);
  float *d_x, *d_vals;
  int32_t *d_idx;

  for (int i = 0; i < rows; i++) {
    float *row = x + (size_t) i * ld;
    tie_row (r, row, n, nan_every);
    if (i % 4 == 1)
      for (int c = 0; c < n; c++)
        row[c] = dfl_test_frand (r);               /* distinct values */
    if (i % 4 == 2)
      for (int c = 0; c < n; c++)
        row[c] = c % 3 ? NAN : row[c];             /* mostly NaN: maybe fewer than k */
  }
  d_x = up (x, sizeof (float) * rows * ld);
  d_vals = up (NULL, sizeof (float) * rows * k);
  d_idx = up (NULL, sizeof (int32_t) * rows * k);
  dfl_cuda_top_k (dev, d_x, rows, n, ld, k, d_vals, d_idx);
  sync_ok ();
  down (vals, d_vals, sizeof (float) * rows * k);
  down (idx, d_idx, sizeof (int32_t) * rows * k);
  for (int i = 0; i < rows; i++) {
    const float *row = x + (size_t) i * ld;
    int have = 0, cpu_have;
    for (int c = 0; c < n; c++)
      if (!isnan (row[c]))
        e[have++] = (Entry) { row[c], c };
    qsort (e, have, sizeof (Entry), entry_order);
    cpu_have = dfl_top_k (row, n, k, cpu_vals, cpu_idx);
    g_assert_cmpint (cpu_have, ==, MIN (have, k));
    for (int j = 0; j < k; j++) {
      size_t at = (size_t) i * k + j;
      if (j < have) {
        g_assert_cmpint (idx[at], ==, e[j].i);
        g_assert_true (memcmp (&vals[at], &row[e[j].i], 4) == 0);   /* −0 stays −0 */
        g_assert_cmpint (idx[at], ==, (int) cpu_idx[j]);
      } else {
        g_assert_cmpint (idx[at], ==, -1);
        g_assert_true (isnan (vals[at]));
      }
    }
  }
  dfl_cuda_free (dev, d_x);
  dfl_cuda_free (dev, d_vals);
  dfl_cuda_free (dev, d_idx);
}

static void
test_top_k (void)
{
  const int ks[] = { 1, 2, 5, 8, 9, 64 };   /* 8 and 9: either side of the small kernel */

  for (guint j = 0; j < G_N_ELEMENTS (ks); j++) {
    check_top_k (3, 0, ks[j], 0);
    check_top_k (3, 10, ks[j], 3);
    check_top_k (16, 1000, ks[j], 0);
    check_top_k (37, 1000, ks[j], 20);
    check_top_k (4, 151936, ks[j], 1000);
    /* long rows go by slices of 2048: three, the last of one value */
    check_top_k (5, 4097, ks[j], 7);
    check_top_k (37, 6000, ks[j], 0);
  }
}

/* The selector's chain. Reference one: the CPU's float operations in its
 * order (dfl_drafter_weights_select_with), which the kernel must equal bit for bit,
 * choices and ties. Reference two, independent: along the kernel's chain,
 * each choice's double score is the double maximum up to F32 rounding. */
static void
check_select (int rows, int k, int rank, int vocab, gboolean short_rows)
{
  g_autoptr (GRand) r = g_rand_new_with_seed (rows * 11 + k + rank + vocab + short_rows);
  size_t nbook = (size_t) vocab * rank;
  g_autofree guint16 *pred = g_new (guint16, nbook);
  g_autofree guint16 *succ = g_new (guint16, nbook);
  g_autofree float *hp = random_floats (r, (size_t) rows * rank, 2.0f);
  g_autofree int32_t *cand = g_new (int32_t, (size_t) rows * k);
  g_autofree float *logit = g_new (float, (size_t) rows * k);
  g_autofree int32_t *got = g_new (int32_t, rows);
  g_autofree float *pc = g_new (float, rank);
  int32_t anchor = vocab - 2, prev;
  void *d_pred, *d_succ;
  float *d_hp, *d_logit;
  int32_t *d_cand, *d_chosen;

  for (size_t i = 0; i < nbook; i++) {
    pred[i] = dfl_test_to_f16 (dfl_test_frand (r));
    succ[i] = dfl_test_to_f16 (dfl_test_frand (r));
  }
  /* tokens 0 and 1 score alike in any arithmetic: the same successor rows */
  memcpy (succ + rank, succ, sizeof (guint16) * rank);
  for (int i = 0; i < rows; i++) {
    float top = 10.0f;
    for (int c = 0; c < k; c++) {
      size_t at = (size_t) i * k + c;
      top -= (float) g_rand_double_range (r, 0.0, 0.5);
      logit[at] = top;
      cand[at] = g_rand_int_range (r, 2, vocab);
    }
    if (i % 3 == 0 && k >= 2) {
      /* a tie: tokens 0 and 1 with equal logits; the earlier must win */
      size_t at = (size_t) i * k;
      cand[at] = i % 2;
      cand[at + 1] = 1 - i % 2;
      logit[at + 1] = logit[at];
      for (int c = 0; c < k; c++)
        logit[at + c] = logit[at] - (c > 1) * 0.01f * c;
    }
    if (short_rows && i % 4 == 3)
      for (int c = k / 2; c < k; c++)
        cand[(size_t) i * k + c] = -1;     /* fewer valid candidates than k */
    if (short_rows && i % 4 == 2)
      for (int c = 0; c < k; c++)
        cand[(size_t) i * k + c] = -1;     /* none: token 0 */
  }
  d_pred = up (pred, sizeof (guint16) * nbook);
  d_succ = up (succ, sizeof (guint16) * nbook);
  d_hp = up (hp, sizeof (float) * rows * rank);
  d_cand = up (cand, sizeof (int32_t) * rows * k);
  d_logit = up (logit, sizeof (float) * rows * k);
  d_chosen = up (NULL, sizeof (int32_t) * rows);
  dfl_cuda_select_rescore (dev, d_cand, d_logit, rows, k, d_hp, rank, d_pred, d_succ, anchor,
                           d_chosen);
  sync_ok ();
  down (got, d_chosen, sizeof (int32_t) * rows);

  prev = anchor;
  for (int i = 0; i < rows; i++) {
    const int32_t *cr = cand + (size_t) i * k;
    int32_t best_tok = cr[0] >= 0 ? cr[0] : 0;
    float best = -INFINITY;
    double dbest = -INFINITY, dgot = NAN, scale = 0.0;
    for (int j = 0; j < rank; j++)
      pc[j] = dfl_test_from_f16 (pred[(size_t) prev * rank + j]) * hp[(size_t) i * rank + j];
    for (int c = 0; c < k && cr[c] >= 0; c++) {
      volatile float s = 0.0f;   /* one rounding per operation, as on the CPU */
      double ds = logit[(size_t) i * k + c];
      for (int j = 0; j < rank; j++) {
        volatile float p = pc[j] * dfl_test_from_f16 (succ[(size_t) cr[c] * rank + j]);
        s = s + p;
        ds += (double) dfl_test_from_f16 (pred[(size_t) prev * rank + j])
              * hp[(size_t) i * rank + j] * dfl_test_from_f16 (succ[(size_t) cr[c] * rank + j]);
        scale += fabs (p);
      }
      s = s + logit[(size_t) i * k + c];
      if (s > best) {
        best = s;
        best_tok = cr[c];
      }
      dbest = MAX (dbest, ds);
      if (cr[c] == got[i])
        dgot = ds;
    }
    g_assert_cmpint (got[i], ==, best_tok);
    if (cr[0] >= 0) {
      g_assert_false (isnan (dgot));
      g_assert_cmpfloat (dgot, >=, dbest - 1e-5 * (scale + 10.0));
    } else {
      g_assert_cmpint (got[i], ==, 0);
    }
    if (i % 3 == 0 && k >= 2 && cr[0] >= 0 && (got[i] == 0 || got[i] == 1))
      g_assert_cmpint (got[i], ==, cr[0]);   /* the tie went to the earlier candidate */
    prev = got[i];
  }
  dfl_cuda_free (dev, d_pred);
  dfl_cuda_free (dev, d_succ);
  dfl_cuda_free (dev, d_hp);
  dfl_cuda_free (dev, d_cand);
  dfl_cuda_free (dev, d_logit);
  dfl_cuda_free (dev, d_chosen);
}

static void
test_select (void)
{
  /* rows · k · k scores at most RESCORE_ALL_MAX: formed at once (the
   * default pair's block: 15 rows of 8), else the serial walk */
  check_select (16, 8, 24, 500, FALSE);
  check_select (15, 8, 32, 8192, TRUE);
  check_select (16, 64, 40, 500, TRUE);
  check_select (37, 5, 256, 3000, TRUE);
  check_select (1, 1, 7, 50, FALSE);
}

/* --- conversions, fills, copies --- */

static void
test_convert (void)
{
  g_autoptr (GRand) r = g_rand_new_with_seed (23);
  const size_t n = 4099;
  g_autofree float *f = random_floats (r, n, 100.0f);
  g_autofree guint16 *h = g_new (guint16, n);
  g_autofree float *back = g_new (float, n);
  float *d_f;
  guint16 *d_h;
  float *d_back;

  /* halfway cases of both formats, tiny, huge and infinite values */
  f[0] = 1.0f + 1.0f / 256.0f;          /* BF16: halfway, to even (down) */
  f[1] = 1.0f + 3.0f / 256.0f;          /* BF16: halfway, to even (up) */
  f[2] = 1.0f + 1.0f / 2048.0f;         /* F16: halfway, to even (down) */
  f[3] = 1.0f + 3.0f / 2048.0f;         /* F16: halfway, to even (up) */
  f[4] = 70000.0f;                      /* past F16's range: inf */
  f[5] = 3e-6f;                         /* an F16 subnormal */
  f[6] = -INFINITY;
  f[7] = -0.0f;
  f[8] = 1e-40f;                        /* an F32 subnormal */
  d_f = up (f, sizeof (float) * n);
  d_h = up (NULL, sizeof (guint16) * n);
  d_back = up (NULL, sizeof (float) * n);
  for (int t = 0; t < 2; t++) {
    DflDtype type = t ? DFL_DTYPE_F16 : DFL_DTYPE_BF16;
    dfl_cuda_convert (dev, d_f, DFL_DTYPE_F32, d_h, type, n);
    dfl_cuda_convert (dev, d_h, type, d_back, DFL_DTYPE_F32, n);
    sync_ok ();
    down (h, d_h, sizeof (guint16) * n);
    down (back, d_back, sizeof (float) * n);
    for (size_t i = 0; i < n; i++) {
      guint16 want = type == DFL_DTYPE_BF16 ? dfl_test_to_bf16 (f[i]) : dfl_test_to_f16 (f[i]);
      float want_back = type == DFL_DTYPE_BF16 ? dfl_test_from_bf16 (want)
                                               : dfl_test_from_f16 (want);
      if (h[i] != want)
        g_error ("convert to %s [%zu] of %.9g: 0x%04x, expected 0x%04x",
                 t ? "F16" : "BF16", i, f[i], h[i], want);
      g_assert_true (memcmp (&back[i], &want_back, 4) == 0);
    }
  }
  /* F16 → BF16 goes through F32 (exact), so one rounding */
  dfl_cuda_convert (dev, d_f, DFL_DTYPE_F32, d_h, DFL_DTYPE_F16, n);
  dfl_cuda_convert (dev, d_h, DFL_DTYPE_F16, d_back, DFL_DTYPE_BF16, n);
  sync_ok ();
  down (h, d_back, sizeof (guint16) * n);
  for (size_t i = 0; i < n; i++)
    g_assert_cmpuint (h[i], ==, dfl_test_to_bf16 (dfl_test_from_f16 (dfl_test_to_f16 (f[i]))));
  dfl_cuda_free (dev, d_f);
  dfl_cuda_free (dev, d_h);
  dfl_cuda_free (dev, d_back);
}

static void
test_fill_random (void)
{
  const size_t n = 1 << 20;
  g_autofree float *a = g_new (float, n);
  g_autofree float *b = g_new (float, n);
  g_autofree guint16 *h = g_new (guint16, n);
  float *d_a = up (NULL, sizeof (float) * n);
  guint16 *d_h = up (NULL, sizeof (guint16) * n);
  double mean = 0.0, sq = 0.0;
  size_t same = 0;

  dfl_cuda_fill_random (dev, d_a, DFL_DTYPE_F32, n, 42, 0.5f);
  sync_ok ();
  down (a, d_a, sizeof (float) * n);
  for (size_t i = 0; i < n; i++) {
    g_assert_cmpfloat (a[i], >=, -0.5f);
    g_assert_cmpfloat (a[i], <, 0.5f);
    mean += a[i];
    sq += (double) a[i] * a[i];
  }
  mean /= n;
  sq /= n;
  /* uniform on [−s, s): mean 0 (σ of the mean 0.29/1024), mean square s²/3 */
  g_assert_cmpfloat (fabs (mean), <, 0.005);
  g_assert_cmpfloat (fabs (sq - 0.25 / 3.0), <, 0.002);
  /* the same seed again: the same values; another seed: other values */
  dfl_cuda_fill_random (dev, d_a, DFL_DTYPE_F32, n, 42, 0.5f);
  sync_ok ();
  down (b, d_a, sizeof (float) * n);
  g_assert_true (memcmp (a, b, sizeof (float) * n) == 0);
  dfl_cuda_fill_random (dev, d_a, DFL_DTYPE_F32, n, 43, 0.5f);
  sync_ok ();
  down (b, d_a, sizeof (float) * n);
  for (size_t i = 0; i < n; i++)
    same += a[i] == b[i];
  g_assert_cmpuint (same, <, n / 1000);
  /* 16-bit: the F32 values rounded */
  dfl_cuda_fill_random (dev, d_h, DFL_DTYPE_BF16, n, 42, 0.5f);
  sync_ok ();
  down (h, d_h, sizeof (guint16) * n);
  for (size_t i = 0; i < n; i++)
    g_assert_cmpuint (h[i], ==, dfl_test_to_bf16 (a[i]));
  dfl_cuda_free (dev, d_a);
  dfl_cuda_free (dev, d_h);
}

static void
test_copies (void)
{
  GError *error = NULL;
  const int rows = 37, src_pitch = 1003, dst_pitch = 517, row_bytes = 301;
  g_autofree guint8 *src = g_new (guint8, (size_t) rows * src_pitch);
  g_autofree guint8 *dst = g_new (guint8, (size_t) rows * dst_pitch);
  guint8 *d_src, *d_dst, *d_copy;
  double bw;

  for (int i = 0; i < rows * src_pitch; i++)
    src[i] = (guint8) (i * 7 + 3);
  d_src = up (src, (size_t) rows * src_pitch);
  d_dst = up (NULL, (size_t) rows * dst_pitch);
  d_copy = up (NULL, (size_t) rows * src_pitch);
  dfl_cuda_memset (dev, d_dst, 0xab, (size_t) rows * dst_pitch);
  dfl_cuda_copy_2d (dev, d_dst, dst_pitch, d_src, src_pitch, row_bytes, rows);
  dfl_cuda_copy_d2d (dev, d_copy, d_src, (size_t) rows * src_pitch);
  sync_ok ();
  down (dst, d_dst, (size_t) rows * dst_pitch);
  for (int i = 0; i < rows; i++)
    for (int c = 0; c < dst_pitch; c++)
      g_assert_cmpuint (dst[(size_t) i * dst_pitch + c], ==,
                        c < row_bytes ? src[(size_t) i * src_pitch + c] : 0xab);
  memset (dst, 0, (size_t) rows * dst_pitch);
  {
    g_autofree guint8 *copy = g_new (guint8, (size_t) rows * src_pitch);
    down (copy, d_copy, (size_t) rows * src_pitch);
    g_assert_true (memcmp (copy, src, (size_t) rows * src_pitch) == 0);
  }
  bw = dfl_cuda_copy_bandwidth (dev, 64 << 20, &error);
  g_assert_no_error (error);
  g_assert_cmpfloat (bw, >, 0.0);
  g_test_message ("device-to-device copy: %.0f GB/s on %s", bw / 1e9,
                  dfl_cuda_device_describe (dev));
  bw = dfl_cuda_read_bandwidth (dev, 64 << 20, &error);
  g_assert_no_error (error);
  g_assert_cmpfloat (bw, >, 0.0);
  g_test_message ("pure read: %.0f GB/s", bw / 1e9);
  dfl_cuda_free (dev, d_src);
  dfl_cuda_free (dev, d_dst);
  dfl_cuda_free (dev, d_copy);
}

/* --- graphs --- */

/* The work of a step, launched on the stream: a projection, rope at the
 * device's position, attention over the device's ranges, a norm, top-k. */
typedef struct {
  int rows, heads, kv_heads, hd, keys, in, k;
  DflCudaWeights w;
  float *d_x, *d_q, *d_k, *d_v, *d_inv, *d_out, *d_norm_w, *d_vals;
  int64_t *d_pos;
  int32_t *d_lo, *d_hi, *d_idx;
  void *d_scratch;
} Step;

static void
step_launch (Step *s)
{
  int width = s->heads * s->hd;
  dfl_cuda_matmul (dev, &s->w, s->d_x, s->rows, s->in, s->d_q, width, width, FALSE,
                   s->d_scratch);
  dfl_cuda_rope (dev, s->d_q, s->rows, s->heads, s->hd, s->d_inv, s->d_pos);
  dfl_cuda_attention (dev, s->d_q, s->rows, s->heads, s->kv_heads, s->hd, s->d_k, s->d_v, 0,
                      s->kv_heads * s->hd, s->d_lo, s->d_hi, s->keys,
                      1.0f / sqrtf ((float) s->hd), s->d_out);
  dfl_cuda_rmsnorm (dev, s->d_out, s->d_out, s->rows, width, s->d_norm_w, 1e-6f);
  dfl_cuda_top_k (dev, s->d_out, s->rows, width, width, s->k, s->d_vals, s->d_idx);
}

static void
step_set (Step *s, int64_t pos, int shift)
{
  g_autofree int32_t *lo = g_new (int32_t, s->rows);
  g_autofree int32_t *hi = g_new (int32_t, s->rows);

  for (int i = 0; i < s->rows; i++) {
    lo[i] = i % 2 ? shift : 0;
    hi[i] = MIN ((int) pos + i + 1, s->keys);
  }
  dfl_cuda_upload (dev, s->d_pos, &pos, sizeof pos, NULL);
  dfl_cuda_upload (dev, s->d_lo, lo, sizeof (int32_t) * s->rows, NULL);
  dfl_cuda_upload (dev, s->d_hi, hi, sizeof (int32_t) * s->rows, NULL);
}

static void
step_results (Step *s, float *out, int32_t *idx)
{
  sync_ok ();
  down (out, s->d_out, sizeof (float) * s->rows * s->heads * s->hd);
  down (idx, s->d_idx, sizeof (int32_t) * s->rows * s->k);
}

static void
test_graph (void)
{
  GError *error = NULL;
  Step s = { .rows = 16, .heads = 8, .kv_heads = 2, .hd = 64, .keys = 700, .in = 300, .k = 8 };
  int width = s.heads * s.hd;
  size_t nout = (size_t) s.rows * width, nkv = (size_t) s.keys * s.kv_heads * s.hd;
  g_autofree float *direct = g_new (float, nout);
  g_autofree float *replay = g_new (float, nout);
  g_autofree float *first = g_new (float, nout);
  g_autofree int32_t *direct_idx = g_new (int32_t, (size_t) s.rows * s.k);
  g_autofree int32_t *replay_idx = g_new (int32_t, (size_t) s.rows * s.k);
  float inv[32];
  DflCudaGraph *graph;

  inv_freq_of (inv, s.hd);
  s.w = (DflCudaWeights) { up (NULL, (size_t) width * s.in * 2), DFL_DTYPE_BF16, width, s.in };
  dfl_cuda_fill_random (dev, (void *) s.w.d_data, DFL_DTYPE_BF16, (size_t) width * s.in, 1, 0.1f);
  s.d_x = up (NULL, sizeof (float) * s.rows * s.in);
  dfl_cuda_fill_random (dev, s.d_x, DFL_DTYPE_F32, (size_t) s.rows * s.in, 2, 1.0f);
  s.d_k = up (NULL, sizeof (float) * nkv);
  dfl_cuda_fill_random (dev, s.d_k, DFL_DTYPE_F32, nkv, 3, 1.0f);
  s.d_v = up (NULL, sizeof (float) * nkv);
  dfl_cuda_fill_random (dev, s.d_v, DFL_DTYPE_F32, nkv, 4, 1.0f);
  s.d_norm_w = up (NULL, sizeof (float) * width);
  dfl_cuda_fill_random (dev, s.d_norm_w, DFL_DTYPE_F32, width, 5, 1.0f);
  s.d_inv = up (inv, sizeof (float) * (s.hd / 2));
  s.d_q = up (NULL, sizeof (float) * nout);
  s.d_out = up (NULL, sizeof (float) * nout);
  s.d_vals = up (NULL, sizeof (float) * s.rows * s.k);
  s.d_idx = up (NULL, sizeof (int32_t) * s.rows * s.k);
  s.d_pos = up (NULL, sizeof (int64_t));
  s.d_lo = up (NULL, sizeof (int32_t) * s.rows);
  s.d_hi = up (NULL, sizeof (int32_t) * s.rows);
  s.d_scratch = up (NULL, (size_t) s.rows * s.in * 2);

  /* direct at position 100 first: every kernel (cuBLAS's too) is loaded
   * before the capture, which lazy module loading could otherwise disturb */
  step_set (&s, 100, 3);
  step_launch (&s);
  step_results (&s, direct, direct_idx);
  /* captured at position 100 … */
  dfl_cuda_memset (dev, s.d_out, 0, sizeof (float) * nout);
  g_assert_true (dfl_cuda_capture_begin (dev, &error));
  step_launch (&s);
  graph = dfl_cuda_capture_end (dev, &error);
  g_assert_no_error (error);
  g_assert_nonnull (graph);
  dfl_cuda_graph_launch (dev, graph);
  step_results (&s, first, replay_idx);
  for (size_t i = 0; i < nout; i++)
    assert_close ("graph at the captured position", i, first[i], direct[i],
                  1e-6 * fabs (direct[i]));
  g_assert_true (memcmp (replay_idx, direct_idx, sizeof (int32_t) * s.rows * s.k) == 0);
  /* … replayed at position 500 with other ranges, against direct launches there */
  step_set (&s, 500, 40);
  step_launch (&s);
  step_results (&s, direct, direct_idx);
  dfl_cuda_memset (dev, s.d_out, 0, sizeof (float) * nout);
  dfl_cuda_graph_launch (dev, graph);
  step_results (&s, replay, replay_idx);
  for (size_t i = 0; i < nout; i++)
    assert_close ("graph replay", i, replay[i], direct[i], 1e-6 * fabs (direct[i]));
  g_assert_true (memcmp (replay_idx, direct_idx, sizeof (int32_t) * s.rows * s.k) == 0);
  /* and the position did move the result */
  g_assert_false (memcmp (first, replay, sizeof (float) * nout) == 0);
  dfl_cuda_graph_free (graph);

  dfl_cuda_free (dev, (void *) s.w.d_data);
  dfl_cuda_free (dev, s.d_x);
  dfl_cuda_free (dev, s.d_k);
  dfl_cuda_free (dev, s.d_v);
  dfl_cuda_free (dev, s.d_norm_w);
  dfl_cuda_free (dev, s.d_inv);
  dfl_cuda_free (dev, s.d_q);
  dfl_cuda_free (dev, s.d_out);
  dfl_cuda_free (dev, s.d_vals);
  dfl_cuda_free (dev, s.d_idx);
  dfl_cuda_free (dev, s.d_pos);
  dfl_cuda_free (dev, s.d_lo);
  dfl_cuda_free (dev, s.d_hi);
  dfl_cuda_free (dev, s.d_scratch);
}

int
main (int argc, char **argv)
{
  GError *error = NULL;
  int status;

  dev = dfl_cuda_device_open (0, &error);
  if (!dev) {
    /* no card (or no driver) here: the whole program is one TAP skip */
    printf ("1..0 # SKIP %s\n", error->message);
    g_error_free (error);
    return 0;
  }
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/cuda/device", test_device);
  g_test_add_func ("/cuda/errors", test_errors);
  g_test_add_func ("/cuda/matmul", test_matmul);
  g_test_add_func ("/cuda/matmul-group", test_matmul_group);
  g_test_add_func ("/cuda/matmul-rows-invariant", test_matmul_rows_invariant);
  g_test_add_func ("/cuda/embed", test_embed);
  g_test_add_func ("/cuda/rmsnorm", test_rmsnorm);
  g_test_add_func ("/cuda/rope", test_rope);
  g_test_add_func ("/cuda/elementwise", test_elementwise);
  g_test_add_func ("/cuda/attention", test_attention);
  g_test_add_func ("/cuda/attention-invariant", test_attention_invariant);
  g_test_add_func ("/cuda/attention-bf16", test_attention_bf16);
  g_test_add_func ("/cuda/row-conv", test_row_conv);
  g_test_add_func ("/cuda/argmax", test_argmax);
  g_test_add_func ("/cuda/top-k", test_top_k);
  g_test_add_func ("/cuda/select", test_select);
  g_test_add_func ("/cuda/convert", test_convert);
  g_test_add_func ("/cuda/fill-random", test_fill_random);
  g_test_add_func ("/cuda/copies", test_copies);
  g_test_add_func ("/cuda/graph", test_graph);
  status = g_test_run ();
  dfl_cuda_device_unref (dev);
  return status;
}
