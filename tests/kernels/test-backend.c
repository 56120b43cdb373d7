/* gst-dflash — tests: the back-end interface's operations (dfl-backend.h).
 *
 * For every back end this build has and this machine opens: each op against
 * a float64 reference computed here, over small random shapes and several
 * row counts, and a GPU's against the CPU's; the capability refusals (an
 * op, type or shape a back end does not run gives an error naming it). On
 * the CPU besides: attention over key ranges bitwise dfl_attention_causal,
 * and top-k and the re-scoring bitwise the drafter's own (core).
 */
#include "dfl-backend.h"
#include "dfl-kernels.h"
#include "drafter-private.h"
#include "safetensors.h"
#include "hold-vulkan-driver.h"
#include "op-assert.h"

#include <math.h>
#include <string.h>

/* --- devices and tensors --- */

static DflDevice *cpu;

/* The device a test runs on, or NULL after a skip saying why. */
static DflDevice *
open_device (gconstpointer data)
{
  DflBackendId id = GPOINTER_TO_INT (data);
  g_autoptr (GError) error = NULL;
  DflDevice *dev;

  if (id == DFL_BACKEND_CPU)
    return dfl_device_ref (cpu);
  if (!(dev = dfl_device_open (id, -1, &error))) {
    g_test_skip (error->message);
    return NULL;
  }
  return dev;
}

/* What a test allocated, freed at its end. */
typedef struct {
  DflDevice *dev;
  gpointer handle;
} Held;
static GArray *held;

static void
release (void)
{
  for (guint i = 0; i < held->len; i++) {
    Held *h = &g_array_index (held, Held, i);
    if (h->dev)
      dfl_device_free (h->dev, h->handle);
    else
      g_free (h->handle);
  }
  g_array_set_size (held, 0);
}

static void
set_shape (DflTensor *t, gint64 ne0, gint64 ne1, gint64 ne2)
{
  t->ne[0] = ne0;
  t->ne[1] = ne1;
  t->ne[2] = ne2;
  t->ne[3] = 1;
  t->nb[0] = dfl_dtype_size (t->dtype);
  t->nb[1] = t->nb[0] * ne0;
  t->nb[2] = t->nb[1] * ne1;
  t->nb[3] = t->nb[2] * ne2;
}

/* A packed ne0 × ne1 × ne2 tensor on dev (NULL: host memory), filled from
 * data where given. */
static DflTensor
put (DflDevice *dev, DflDtype dtype, gint64 ne0, gint64 ne1, gint64 ne2, const void *data)
{
  gsize bytes = dfl_dtype_size (dtype) * ne0 * ne1 * ne2;
  g_autoptr (GError) error = NULL;
  Held h = { dev, dev ? dfl_device_alloc (dev, MAX (bytes, 4), &error) : g_malloc0 (MAX (bytes, 4)) };
  DflTensor t = { dev, h.handle, 0, dtype };

  g_assert_no_error (error);
  g_array_append_val (held, h);
  set_shape (&t, ne0, ne1, ne2);
  if (data && bytes) {
    if (dev)
      g_assert_true (dfl_device_upload (dev, h.handle, 0, data, bytes, &error));
    else
      memcpy (h.handle, data, bytes);
  }
  g_assert_no_error (error);
  return t;
}

/* An op's index tensor: on the device, or on the host where the back end
 * reads indices there. */
static DflTensor
put_index (DflDevice *dev, DflOp op, DflDtype dtype, gint64 n, const void *data)
{
  gboolean host = dfl_device_op_caps (dev, op, DFL_DTYPE_F32) & DFL_OP_CAP_HOST_INDICES;

  return put (host ? NULL : dev, dtype, n, 1, 1, data);
}

/* The tensor's elements, after the queue has run. */
static void
get (DflDevice *dev, const DflTensor *t, void *dst)
{
  g_autoptr (GError) error = NULL;

  g_assert_true (dfl_op_sync (dev, &error));
  g_assert_no_error (error);
  if (t->device)
    g_assert_true (dfl_device_download (t->device, t->handle, t->offset, dst,
                                        dfl_tensor_bytes (t), &error));
  else
    memcpy (dst, (char *) t->handle + t->offset, dfl_tensor_bytes (t));
  g_assert_no_error (error);
}

static float *
random_floats (GRand *r, gsize n, float scale)
{
  float *x = g_new (float, n);

  for (gsize i = 0; i < n; i++)
    x[i] = (float) g_rand_double_range (r, -scale, scale);
  return x;
}

static void
assert_close (const char *what, gsize i, double got, double want, double tol)
{
  if (!(fabs (got - want) <= tol))
    g_error ("%s[%" G_GSIZE_FORMAT "]: %.9g, expected %.9g (±%.3g)", what, i, got, want, tol);
}

/* The op was refused with `code`, its message naming each of the strings. */
static void
assert_refused (gboolean ok, GError **error, int code, const char *name1, const char *name2)
{
  g_assert_false (ok);
  g_assert_error (*error, DFL_ERROR, code);
  if (!strstr ((*error)->message, name1) || !strstr ((*error)->message, name2))
    g_error ("\"%s\" does not name %s and %s", (*error)->message, name1, name2);
}

/* --- matmul --- */

/* n values of `dtype` as a checkpoint would store them: the F32 values of
 * f themselves, or their 16-bit roundings in h (f then holds what those
 * are). Returns what to upload. */
static const void *
stored_as (DflDtype dtype, float *f, guint16 *h, gsize n)
{
  if (dtype == DFL_DTYPE_F32)
    return f;
  for (gsize i = 0; i < n; i++)
    h[i] = dtype == DFL_DTYPE_F16 ? dfl_f32_to_f16 (f[i]) : dfl_f32_to_bf16 (f[i]);
  (dtype == DFL_DTYPE_F16 ? dfl_f16_to_f32_n : dfl_bf16_to_f32_n) (h, f, n);
  return h;
}

static void
run_matmul (DflDevice *dev, DflDtype dtype, const void *w, int out, int in, const float *x,
            int rows, int n_out, gboolean accumulate, const float *y0, float *y)
{
  DflTensor tw = put (dev, dtype, in, out, 1, w), tx = put (dev, DFL_DTYPE_F32, in, rows, 1, x);
  DflTensor ty = put (dev, DFL_DTYPE_F32, n_out, rows, 1, y0);

  OK (dfl_op_matmul (dev, &tw, &tx, &ty, accumulate, &op_error));
  get (dev, &ty, y);
}

static void
test_matmul (gconstpointer data)
{
  g_autoptr (DflDevice) dev = open_device (data);
  const DflDtype types[] = { DFL_DTYPE_F32, DFL_DTYPE_F16, DFL_DTYPE_BF16 };
  const int row_counts[] = { 1, 3, 17 };
  const int out = 24, in = 40;

  if (!dev)
    return;
  /* the CPU's matmul is the one the target's lossless verification rests on */
  if (dfl_device_backend (dev) == DFL_BACKEND_CPU)
    g_assert_true (dfl_device_op_caps (dev, DFL_OP_MATMUL, DFL_DTYPE_BF16)
                   & DFL_OP_CAP_ROW_INVARIANT);
  for (guint ti = 0; ti < G_N_ELEMENTS (types); ti++)
    for (guint ri = 0; ri < G_N_ELEMENTS (row_counts); ri++) {
      g_autoptr (GRand) r = g_rand_new_with_seed (ti * 10 + ri);
      int rows = row_counts[ri], n_out = ri == 1 ? 10 : out;
      g_autofree float *wf = random_floats (r, (gsize) out * in, 1.0f);
      g_autofree float *x = random_floats (r, (gsize) rows * in, 1.0f);
      g_autofree float *y0 = random_floats (r, (gsize) rows * n_out, 1.0f);
      g_autofree float *y = g_new (float, (gsize) rows * n_out);
      g_autofree float *alone = g_new (float, n_out);
      g_autofree guint16 *w16 = g_new (guint16, (gsize) out * in);
      gboolean acc = ri == 2;
      /* CUDA rounds x to the weights' type for 16-bit products */
      double eps = types[ti] == DFL_DTYPE_F32 || dfl_device_backend (dev) != DFL_BACKEND_CUDA ? 1e-5
                   : types[ti] == DFL_DTYPE_F16 ? 2e-3 : 1e-2;
      const void *w;

      w = stored_as (types[ti], wf, w16, (gsize) out * in);
      run_matmul (dev, types[ti], w, out, in, x, rows, n_out, acc, y0, y);
      for (int i = 0; i < rows; i++)
        for (int o = 0; o < n_out; o++) {
          double want = acc ? y0[(gsize) i * n_out + o] : 0.0, scale = fabs (want);
          for (int c = 0; c < in; c++) {
            want += (double) x[(gsize) i * in + c] * wf[(gsize) o * in + c];
            scale += fabs ((double) x[(gsize) i * in + c] * wf[(gsize) o * in + c]);
          }
          assert_close ("matmul", (gsize) i * n_out + o, y[(gsize) i * n_out + o], want,
                        eps * scale + 1e-30);
        }
      /* where the back end says it is row-invariant, the last row alone
       * gives its bits */
      if (dfl_device_op_caps (dev, DFL_OP_MATMUL, types[ti]) & DFL_OP_CAP_ROW_INVARIANT) {
        run_matmul (dev, types[ti], w, out, in, x + (gsize) (rows - 1) * in, 1, n_out, acc,
                    y0 + (gsize) (rows - 1) * n_out, alone);
        g_assert_cmpmem (alone, sizeof (float) * n_out, y + (gsize) (rows - 1) * n_out,
                         sizeof (float) * n_out);
      }
      release ();
    }
}

/* Products of one x in one call: each y[i] against float64 as for one
 * product, and bitwise what dfl_op_matmul gives for it alone (CUDA: at
 * one row); mixed weight types; a product that does not fit is refused by
 * its index. */
static void
test_matmul_group (gconstpointer data)
{
  g_autoptr (DflDevice) dev = open_device (data);
  const DflDtype types[][3] = { { DFL_DTYPE_BF16, DFL_DTYPE_BF16, DFL_DTYPE_BF16 },
                                { DFL_DTYPE_F16, DFL_DTYPE_F16, DFL_DTYPE_F16 },
                                { DFL_DTYPE_F32, DFL_DTYPE_F32, DFL_DTYPE_F32 },
                                { DFL_DTYPE_BF16, DFL_DTYPE_F32, DFL_DTYPE_F16 } };
  /* one row and a few (the CPU shares their blocks out, over its threads
   * from one row on at these sizes), more (a product each) */
  const int row_counts[] = { 1, 3, 17, 32 }, outs[3] = { 400, 72, 136 }, in = 64;
  g_autoptr (GError) refused = NULL;

  if (!dev)
    return;
  for (guint ti = 0; ti < G_N_ELEMENTS (types); ti++)
    for (guint ri = 0; ri < G_N_ELEMENTS (row_counts); ri++) {
      g_autoptr (GRand) r = g_rand_new_with_seed (700 + ti * 10 + ri);
      int rows = row_counts[ri];
      gboolean acc = ri % 2 == 1;
      /* the last product a shortlist of its weights' rows */
      int n_out[3] = { outs[0], outs[1], ri == 2 ? 13 : outs[2] };
      g_autofree float *x = random_floats (r, (gsize) rows * in, 1.0f);
      float *wf[3], *y0[3], *y[3], *alone[3];
      guint16 *w16[3];
      const void *w[3];
      DflTensor tw[3], ty[3], tx = put (dev, DFL_DTYPE_F32, in, rows, 1, x);

      for (int i = 0; i < 3; i++) {
        wf[i] = random_floats (r, (gsize) outs[i] * in, 1.0f);
        y0[i] = random_floats (r, (gsize) rows * n_out[i], 1.0f);
        y[i] = g_new (float, (gsize) rows * n_out[i]);
        alone[i] = g_new (float, (gsize) rows * n_out[i]);
        w16[i] = g_new (guint16, (gsize) outs[i] * in);
        w[i] = stored_as (types[ti][i], wf[i], w16[i], (gsize) outs[i] * in);
        tw[i] = put (dev, types[ti][i], in, outs[i], 1, w[i]);
        ty[i] = put (dev, DFL_DTYPE_F32, n_out[i], rows, 1, y0[i]);
      }
      OK (dfl_op_matmul_group (dev, 3, (const DflTensor *[]) { &tw[0], &tw[1], &tw[2] }, &tx,
                               (DflTensor *[]) { &ty[0], &ty[1], &ty[2] }, acc, &op_error));
      for (int i = 0; i < 3; i++) {
        /* CUDA rounds x to the weights' type for 16-bit products */
        double eps = types[ti][i] == DFL_DTYPE_F32
                     || dfl_device_backend (dev) != DFL_BACKEND_CUDA ? 1e-5
                     : types[ti][i] == DFL_DTYPE_F16 ? 2e-3 : 1e-2;
        get (dev, &ty[i], y[i]);
        run_matmul (dev, types[ti][i], w[i], outs[i], in, x, rows, n_out[i], acc, y0[i],
                    alone[i]);
        for (int k = 0; k < rows; k++)
          for (int o = 0; o < n_out[i]; o++) {
            gsize at = (gsize) k * n_out[i] + o;
            double want = acc ? y0[i][at] : 0.0, scale = fabs (want);
            for (int c = 0; c < in; c++) {
              want += (double) x[(gsize) k * in + c] * wf[i][(gsize) o * in + c];
              scale += fabs ((double) x[(gsize) k * in + c] * wf[i][(gsize) o * in + c]);
            }
            assert_close ("matmul_group", at, y[i][at], want, eps * scale + 1e-30);
          }
        /* CUDA's q, k, v of several rows run on a kernel of their own */
        if (dfl_device_backend (dev) != DFL_BACKEND_CUDA || rows == 1)
          g_assert_cmpmem (y[i], sizeof (float) * rows * n_out[i], alone[i],
                           sizeof (float) * rows * n_out[i]);
        g_free (wf[i]);
        g_free (y0[i]);
        g_free (y[i]);
        g_free (alone[i]);
        g_free (w16[i]);
      }
      release ();
    }

  /* a y with a row count x does not have, named by its index */
  {
    DflTensor a = put (dev, DFL_DTYPE_F32, 8, 4, 1, NULL);
    DflTensor b = put (dev, DFL_DTYPE_F32, 8, 4, 1, NULL);
    DflTensor x = put (dev, DFL_DTYPE_F32, 8, 2, 1, NULL);
    DflTensor ya = put (dev, DFL_DTYPE_F32, 4, 2, 1, NULL);
    DflTensor yb = put (dev, DFL_DTYPE_F32, 4, 3, 1, NULL);
    assert_refused (dfl_op_matmul_group (dev, 2, (const DflTensor *[]) { &a, &b }, &x,
                                         (DflTensor *[]) { &ya, &yb }, FALSE, &refused),
                    &refused, DFL_ERROR_MISMATCH, "x's rows is 2", "y[1]'s is 3");
    release ();
  }
}

/* --- rmsnorm, rope, silu_mul, add --- */

static void
test_rmsnorm (gconstpointer data)
{
  g_autoptr (DflDevice) dev = open_device (data);
  /* 100 rows: the CPU shares them out between its threads in pieces */
  const int row_counts[] = { 1, 4, 9, 100 }, dim = 48;

  if (!dev)
    return;
  for (guint ri = 0; ri < G_N_ELEMENTS (row_counts); ri++) {
    g_autoptr (GRand) r = g_rand_new_with_seed (100 + ri);
    int rows = row_counts[ri];
    g_autofree float *x = random_floats (r, (gsize) rows * dim, 2.0f);
    g_autofree float *w = random_floats (r, dim, 1.0f);
    g_autofree float *y = g_new (float, (gsize) rows * dim);
    DflTensor tx = put (dev, DFL_DTYPE_F32, dim, rows, 1, x);
    DflTensor tw = put (dev, DFL_DTYPE_F32, dim, 1, 1, w);
    DflTensor ty = put (dev, DFL_DTYPE_F32, dim, rows, 1, NULL);

    OK (dfl_op_rmsnorm (dev, &tx, &tw, &ty, 1e-6f, &op_error));
    get (dev, &ty, y);
    for (int i = 0; i < rows; i++) {
      double ss = 0.0;
      for (int c = 0; c < dim; c++)
        ss += (double) x[(gsize) i * dim + c] * x[(gsize) i * dim + c];
      for (int c = 0; c < dim; c++)
        assert_close ("rmsnorm", (gsize) i * dim + c, y[(gsize) i * dim + c],
                      x[(gsize) i * dim + c] / sqrt (ss / dim + 1e-6) * w[c], 1e-5);
    }
    release ();
  }
}

static void
test_rope (gconstpointer data)
{
  g_autoptr (DflDevice) dev = open_device (data);
  /* inv_freq: hd / 2; 300 rows go out in pieces on the CPU */
  const int row_counts[] = { 1, 3, 7, 300 }, heads = 2, hd = 16;
  const gint64 starts[] = { 0, 5, 1000 };

  if (!dev)
    return;
  for (guint ri = 0; ri < G_N_ELEMENTS (row_counts); ri++)
    for (guint si = 0; si < G_N_ELEMENTS (starts); si++) {
      g_autoptr (GRand) r = g_rand_new_with_seed (200 + ri * 3 + si);
      int rows = row_counts[ri];
      gsize n = (gsize) rows * heads * hd;
      g_autofree float *x = random_floats (r, n, 1.0f);
      g_autofree float *y = g_new (float, n);
      float inv_freq[8];
      DflTensor tx = put (dev, DFL_DTYPE_F32, hd, heads, rows, x), tf, tp;

      dfl_rope_inv_freq (inv_freq, hd, 10000.0);
      tf = put (dev, DFL_DTYPE_F32, hd / 2, 1, 1, inv_freq);
      tp = put_index (dev, DFL_OP_ROPE, DFL_DTYPE_I64, 1, &starts[si]);
      OK (dfl_op_rope (dev, &tx, &tf, &tp, &op_error));
      get (dev, &tx, y);
      for (int i = 0; i < rows; i++)
        for (int h = 0; h < heads; h++)
          for (int c = 0; c < hd / 2; c++) {
            gsize at = ((gsize) i * heads + h) * hd + c;
            /* the angle is formed in F32, as the kernels do */
            double a = (float) (starts[si] + i) * inv_freq[c];
            assert_close ("rope", at, y[at], x[at] * cos (a) - x[at + hd / 2] * sin (a), 1e-5);
            assert_close ("rope", at + hd / 2, y[at + hd / 2],
                          x[at + hd / 2] * cos (a) + x[at] * sin (a), 1e-5);
          }
      release ();
    }
}

/* Each head's norm then its rope in one op: against float64, and bitwise
 * rmsnorm over the heads followed by rope on the same device (one start
 * position and one a row; head_dim 16, 64 and 128, a CUDA block's 256
 * threads against 8, 32 and 64 pairs). */
static void
test_norm_rope (gconstpointer data)
{
  g_autoptr (DflDevice) dev = open_device (data);
  const int shapes[][3] = { { 1, 2, 16 }, { 7, 3, 64 }, { 16, 8, 128 }, { 300, 2, 16 } };
  const float eps = 1e-6f;

  if (!dev)
    return;
  for (guint si = 0; si < G_N_ELEMENTS (shapes); si++)
    for (int per_row = 0; per_row < 2; per_row++) {
      g_autoptr (GRand) r = g_rand_new_with_seed (280 + si * 2 + per_row);
      int rows = shapes[si][0], heads = shapes[si][1], hd = shapes[si][2];
      gsize n = (gsize) rows * heads * hd;
      g_autofree float *x = random_floats (r, n, 3.0f);
      g_autofree float *w = random_floats (r, hd, 1.5f);
      g_autofree float *y = g_new (float, n), *two = g_new (float, n);
      g_autofree float *inv_freq = g_new (float, hd / 2);
      g_autofree gint64 *pos = g_new (gint64, rows);
      DflTensor tx = put (dev, DFL_DTYPE_F32, hd, heads, rows, x);
      DflTensor tx2 = put (dev, DFL_DTYPE_F32, hd, heads, rows, x);
      DflTensor rows2 = put (dev, DFL_DTYPE_F32, hd, heads * rows, 1, NULL), tw, tf, tp;

      for (int i = 0; i < rows; i++)
        pos[i] = per_row ? g_rand_int_range (r, 0, 5000) : 17 + i;
      dfl_rope_inv_freq (inv_freq, hd, 1000000.0);
      tw = put (dev, DFL_DTYPE_F32, hd, 1, 1, w);
      tf = put (dev, DFL_DTYPE_F32, hd / 2, 1, 1, inv_freq);
      tp = put_index (dev, DFL_OP_NORM_ROPE, DFL_DTYPE_I64, per_row ? rows : 1, pos);
      OK (dfl_op_norm_rope (dev, &tx, &tw, &tf, &tp, eps, &op_error));
      get (dev, &tx, y);
      /* the two ops, on the same memory seen as rows of head_dim */
      rows2.handle = tx2.handle;
      rows2.offset = tx2.offset;
      OK (dfl_op_rmsnorm (dev, &rows2, &tw, &rows2, eps, &op_error));
      OK (dfl_op_rope (dev, &tx2, &tf, &tp, &op_error));
      get (dev, &tx2, two);
      g_assert_cmpmem (y, sizeof (float) * n, two, sizeof (float) * n);
      for (int i = 0; i < rows; i++)
        for (int h = 0; h < heads; h++) {
          const float *xh = x + ((gsize) i * heads + h) * hd;
          double ss = 0.0, scale;
          for (int c = 0; c < hd; c++)
            ss += (double) xh[c] * xh[c];
          scale = 1.0 / sqrt (ss / hd + eps);
          for (int c = 0; c < hd / 2; c++) {
            gsize at = ((gsize) i * heads + h) * hd + c;
            double a = (float) pos[i] * inv_freq[c];
            double u = xh[c] * scale * w[c], v = xh[c + hd / 2] * scale * w[c + hd / 2];
            assert_close ("norm_rope", at, y[at], u * cos (a) - v * sin (a), 1e-5);
            assert_close ("norm_rope", at + hd / 2, y[at + hd / 2], v * cos (a) + u * sin (a),
                          1e-5);
          }
        }
      /* a w that is not head_dim long is refused by name */
      {
        g_autoptr (GError) error = NULL;
        DflTensor short_w = put (dev, DFL_DTYPE_F32, hd - 1, 1, 1, w);
        assert_refused (dfl_op_norm_rope (dev, &tx, &short_w, &tf, &tp, eps, &error), &error,
                        DFL_ERROR_MISMATCH, "norm_rope", "w's size");
      }
      release ();
    }
}

static void
test_elementwise (gconstpointer data)
{
  g_autoptr (DflDevice) dev = open_device (data);
  /* [rows][cols]: a few rows, and enough that the CPU shares them out in
   * pieces (one piece's end inside a row) */
  const int shapes[][2] = { { 3, 37 }, { 61, 101 } };

  if (!dev)
    return;
  for (guint si = 0; si < G_N_ELEMENTS (shapes); si++) {
    g_autoptr (GRand) r = g_rand_new_with_seed (300 + si);
    int rows = shapes[si][0], cols = shapes[si][1], n = rows * cols;
    g_autofree float *a = random_floats (r, n, 4.0f);
    g_autofree float *b = random_floats (r, n, 4.0f);
    g_autofree float *y = g_new (float, n);
    DflTensor ta, tb;

    ta = put (dev, DFL_DTYPE_F32, cols, rows, 1, a);
    tb = put (dev, DFL_DTYPE_F32, cols, rows, 1, b);
    OK (dfl_op_silu_mul (dev, &ta, &tb, &op_error));
    get (dev, &ta, y);
    for (int i = 0; i < n; i++)
      assert_close ("silu_mul", i, y[i], a[i] / (1.0 + exp (-(double) a[i])) * b[i], 1e-5);
    memcpy (a, y, sizeof (float) * n);
    OK (dfl_op_add (dev, &ta, &tb, &op_error));
    get (dev, &ta, y);
    for (int i = 0; i < n; i++)
      assert_close ("add", i, y[i], (double) a[i] + b[i], 1e-6);
    release ();
  }
}


/* Rope at a position per row (the rows of several sequences): against
 * float64, and each row bitwise the one-start form of that row alone. */
static void
test_rope_rows (gconstpointer data)
{
  g_autoptr (DflDevice) dev = open_device (data);
  const int row_counts[] = { 2, 5, 300 }, heads = 2, hd = 16;

  if (!dev)
    return;
  for (guint ri = 0; ri < G_N_ELEMENTS (row_counts); ri++) {
    g_autoptr (GRand) r = g_rand_new_with_seed (260 + ri);
    int rows = row_counts[ri], row_n = heads * hd;
    gsize n = (gsize) rows * row_n;
    g_autofree float *x = random_floats (r, n, 1.0f);
    g_autofree float *y = g_new (float, n), *alone = g_new (float, row_n);
    g_autofree gint64 *pos = g_new (gint64, rows);
    float inv_freq[8];
    DflTensor tx = put (dev, DFL_DTYPE_F32, hd, heads, rows, x), tf, tp;

    /* positions of sequences of any lengths, in any order, repeated */
    for (int i = 0; i < rows; i++)
      pos[i] = i == 1 ? pos[0] : g_rand_int_range (r, 0, 5000);
    dfl_rope_inv_freq (inv_freq, hd, 10000.0);
    tf = put (dev, DFL_DTYPE_F32, hd / 2, 1, 1, inv_freq);
    tp = put_index (dev, DFL_OP_ROPE, DFL_DTYPE_I64, rows, pos);
    OK (dfl_op_rope (dev, &tx, &tf, &tp, &op_error));
    get (dev, &tx, y);
    for (int i = 0; i < rows; i++) {
      DflTensor t1 = put (dev, DFL_DTYPE_F32, hd, heads, 1, x + (gsize) i * row_n);
      DflTensor t0 = put_index (dev, DFL_OP_ROPE, DFL_DTYPE_I64, 1, &pos[i]);
      OK (dfl_op_rope (dev, &t1, &tf, &t0, &op_error));
      get (dev, &t1, alone);
      g_assert_cmpmem (y + (gsize) i * row_n, sizeof (float) * row_n, alone,
                       sizeof (float) * row_n);
      for (int h = 0; h < heads; h++)
        for (int c = 0; c < hd / 2; c++) {
          gsize at = ((gsize) i * heads + h) * hd + c;
          double a = (float) pos[i] * inv_freq[c];
          assert_close ("rope_rows", at, y[at], x[at] * cos (a) - x[at + hd / 2] * sin (a),
                        1e-5);
          assert_close ("rope_rows", at + hd / 2, y[at + hd / 2],
                        x[at + hd / 2] * cos (a) + x[at] * sin (a), 1e-5);
        }
    }
    /* neither one start nor one a row (two rows less one is one start) */
    if (rows > 2) {
      g_autoptr (GError) error = NULL;
      DflTensor bad = put_index (dev, DFL_OP_ROPE, DFL_DTYPE_I64, rows - 1, pos);
      assert_refused (dfl_op_rope (dev, &tx, &tf, &bad, &error), &error, DFL_ERROR_MISMATCH,
                      "rope", "one a row");
    }
    release ();
  }
}

/* One query head's attention in float64: q · k over keys [lo, hi) of the
 * key/value head g (k, v [keys][kv_heads][hd]), scaled, softmaxed, over v. */
static void
attention_reference (const float *qr, const float *k, const float *v, int kv_heads, int hd, int g,
                     int lo, int hi, double scale, double *want)
{
  double s[hi > 0 ? hi : 1], top = -INFINITY, sum = 0.0;

  for (int j = lo; j < hi; j++) {
    s[j] = 0.0;
    for (int c = 0; c < hd; c++)
      s[j] += (double) qr[c] * k[((gsize) j * kv_heads + g) * hd + c];
    s[j] *= scale;
    top = MAX (top, s[j]);
  }
  for (int j = lo; j < hi; j++)
    sum += s[j] = exp (s[j] - top);
  for (int c = 0; c < hd; c++) {
    want[c] = 0.0;
    for (int j = lo; j < hi; j++)
      want[c] += s[j] / sum * v[((gsize) j * kv_heads + g) * hd + c];
  }
}

/* --- attention --- */

/* out within `tol` of the float64 attention of q over k, v and the
 * ranges. */
static void
assert_attention_within (const float *q, int rows, int heads, int kv_heads, int hd,
                         const float *k, const float *v, const gint32 *lo, const gint32 *hi,
                         float scale, const float *out, double tol)
{
  for (int i = 0; i < rows; i++)
    for (int h = 0; h < heads; h++) {
      double want[hd];
      gsize at = ((gsize) i * heads + h) * hd;

      attention_reference (q + at, k, v, kv_heads, hd, h / (heads / kv_heads), lo[i], hi[i],
                           scale, want);
      for (int c = 0; c < hd; c++)
        assert_close ("attention", at + c, out[at + c], want[c], tol);
    }
}

/* The same within 2e-5: attention's arithmetic in F32. */
static void
assert_attention (const float *q, int rows, int heads, int kv_heads, int hd, const float *k,
                  const float *v, const gint32 *lo, const gint32 *hi, float scale,
                  const float *out)
{
  assert_attention_within (q, rows, heads, kv_heads, hd, k, v, lo, hi, scale, out, 2e-5);
}

static void
run_attention (DflDevice *dev, const float *q, int rows, int heads, int kv_heads, int hd,
               const float *k, const float *v, int keys, const gint32 *lo, const gint32 *hi,
               float scale, float *out)
{
  DflTensor tq = put (dev, DFL_DTYPE_F32, hd, heads, rows, q);
  DflTensor tk = put (dev, DFL_DTYPE_F32, hd, kv_heads, keys, k);
  DflTensor tv = put (dev, DFL_DTYPE_F32, hd, kv_heads, keys, v);
  DflTensor tlo = put_index (dev, DFL_OP_ATTENTION, DFL_DTYPE_I32, rows, lo);
  DflTensor thi = put_index (dev, DFL_OP_ATTENTION, DFL_DTYPE_I32, rows, hi);
  DflTensor to = put (dev, DFL_DTYPE_F32, hd, heads, rows, NULL);

  OK (dfl_op_attention (dev, &tq, &tk, &tv, &tlo, &thi, &to, scale, &op_error));
  get (dev, &to, out);
}

static void
test_attention (gconstpointer data)
{
  g_autoptr (DflDevice) dev = open_device (data);
  const int row_counts[] = { 1, 3, 8 }, heads = 4, kv_heads = 2, hd = 16, keys = 20;

  if (!dev)
    return;
  for (guint ri = 0; ri < G_N_ELEMENTS (row_counts); ri++) {
    g_autoptr (GRand) r = g_rand_new_with_seed (400 + ri);
    int rows = row_counts[ri];
    gsize qn = (gsize) rows * heads * hd, kn = (gsize) keys * kv_heads * hd;
    g_autofree float *q = random_floats (r, qn, 1.0f);
    g_autofree float *k = random_floats (r, kn, 1.0f);
    g_autofree float *v = random_floats (r, kn, 1.0f);
    g_autofree float *out = g_new (float, qn);
    g_autofree gint32 *lo = g_new (gint32, rows), *hi = g_new (gint32, rows);
    float scale = 1.0f / sqrtf (hd);

    for (int i = 0; i < rows; i++) {
      lo[i] = g_rand_int_range (r, 0, keys);
      hi[i] = g_rand_int_range (r, lo[i], keys + 1);
    }
    /* an empty range gives zeros */
    hi[0] = lo[0];
    run_attention (dev, q, rows, heads, kv_heads, hd, k, v, keys, lo, hi, scale, out);
    assert_attention (q, rows, heads, kv_heads, hd, k, v, lo, hi, scale, out);

    /* over a BF16 cache (the values rounded, widened as they are read)
     * where the device keeps one, refused by name elsewhere */
    {
      g_autofree guint16 *kb = g_new (guint16, kn), *vb = g_new (guint16, kn);
      DflTensor tq = put (dev, DFL_DTYPE_F32, hd, heads, rows, q), tk, tv, tlo, thi, to;

      dfl_f32_to_bf16_n (k, kb, kn);
      dfl_f32_to_bf16_n (v, vb, kn);
      tk = put (dev, DFL_DTYPE_BF16, hd, kv_heads, keys, kb);
      tv = put (dev, DFL_DTYPE_BF16, hd, kv_heads, keys, vb);
      tlo = put_index (dev, DFL_OP_ATTENTION, DFL_DTYPE_I32, rows, lo);
      thi = put_index (dev, DFL_OP_ATTENTION, DFL_DTYPE_I32, rows, hi);
      to = put (dev, DFL_DTYPE_F32, hd, heads, rows, NULL);
      if (dfl_device_supports (dev, DFL_OP_ATTENTION, DFL_DTYPE_BF16)) {
        OK (dfl_op_attention (dev, &tq, &tk, &tv, &tlo, &thi, &to, scale, &op_error));
        get (dev, &to, out);
        dfl_bf16_to_f32_n (kb, k, kn);
        dfl_bf16_to_f32_n (vb, v, kn);
        /* the CPU's arithmetic is F32 over the widened values; a card's
         * runs on its tensor cores, q and the softmax's weights rounded to
         * BF16 too (2^-8 each) */
        assert_attention_within (q, rows, heads, kv_heads, hd, k, v, lo, hi, scale, out,
                                 dfl_device_backend (dev) == DFL_BACKEND_CPU ? 2e-5 : 2e-2);
      } else {
        g_autoptr (GError) error = NULL;
        assert_refused (dfl_op_attention (dev, &tq, &tk, &tv, &tlo, &thi, &to, scale, &error),
                        &error, DFL_ERROR_UNSUPPORTED, "BF16", "attention");
      }
    }
    release ();
  }
}

/* Whether the device runs a table op; where it does not, that it refuses
 * it naming the op (a Vulkan device, whose buffers have no one table of
 * addresses). */
static gboolean
runs_table_op (DflDevice *dev, DflOp op)
{
  if (dfl_device_supports (dev, op, DFL_DTYPE_F32))
    return TRUE;
  {
    g_autoptr (GError) error = NULL;
    DflTensor src = put (dev, DFL_DTYPE_F32, 4, 1, 1, NULL), dst = put (dev, DFL_DTYPE_F32, 4, 2, 1, NULL);
    gint32 zero = 0;
    gint64 zero64 = 0;
    DflTensor which = put (dev, DFL_DTYPE_I32, 1, 1, 1, &zero);
    DflTensor row = put (dev, DFL_DTYPE_I64, 1, 1, 1, &zero64);
    gboolean ok = op == DFL_OP_COPY_ROWS_TABLE
        ? dfl_op_copy_rows_table (dev, &src, &dst, 1, &which, &row, &error)
        : dfl_op_attention_table (dev, &src, &dst, &dst, 1, &which, &which, &which, &src, 1.0f,
                                  &error);
    assert_refused (ok, &error, DFL_ERROR_UNSUPPORTED, dfl_op_name (op),
                    dfl_backend_name (dfl_device_backend (dev)));
  }
  release ();
  return FALSE;
}

/* The rows of an attention_table call (`out`): each within 2e-5 of the
 * float64 attention over its entry's keys (k, v; tk, tv on the device),
 * and where the device's attention is row-invariant bitwise its entry's
 * dfl_op_attention alone. */
static void
assert_table_rows (DflDevice *dev, gboolean invariant, const float *q, int rows, int heads,
                   int kv_heads, int hd, float *const *k, float *const *v, const DflTensor *tk,
                   const DflTensor *tv, const gint32 *which, const gint32 *lo, const gint32 *hi,
                   float scale, const float *out)
{
  gsize row_n = (gsize) heads * hd;
  g_autofree float *alone = g_new (float, row_n);

  for (int i = 0; i < rows; i++) {
    assert_attention (q + i * row_n, 1, heads, kv_heads, hd, k[which[i]], v[which[i]], &lo[i],
                      &hi[i], scale, out + i * row_n);
    if (invariant) {
      DflTensor q1 = put (dev, DFL_DTYPE_F32, hd, heads, 1, q + i * row_n);
      DflTensor o1 = put (dev, DFL_DTYPE_F32, hd, heads, 1, NULL);
      DflTensor l1 = put_index (dev, DFL_OP_ATTENTION, DFL_DTYPE_I32, 1, &lo[i]);
      DflTensor h1 = put_index (dev, DFL_OP_ATTENTION, DFL_DTYPE_I32, 1, &hi[i]);
      OK (dfl_op_attention (dev, &q1, &tk[which[i]], &tv[which[i]], &l1, &h1, &o1, scale,
                            &op_error));
      get (dev, &o1, alone);
      g_assert_cmpmem (out + i * row_n, sizeof (float) * row_n, alone, sizeof (float) * row_n);
    }
  }
}

/* Attention over a table of key sets (several sequences' caches): against
 * float64, and where attention is row-invariant each row bitwise
 * dfl_op_attention's over its entry alone. */
static void
test_attention_table (gconstpointer data)
{
  g_autoptr (DflDevice) dev = open_device (data);
  enum { N_KV = 3, ROWS = 7 };
  const int heads = 4, kv_heads = 2, hd = 16, keys[N_KV] = { 20, 7, 70 };
  const gint32 which[ROWS] = { 2, 0, 1, 2, 0, 2, 1 };
  g_autoptr (GRand) r = g_rand_new_with_seed (470);
  gsize qn = (gsize) ROWS * heads * hd;
  g_autofree float *q = random_floats (r, qn, 1.0f);
  g_autofree float *out = g_new (float, qn);
  float *k[N_KV], *v[N_KV];
  DflTensor tk[N_KV], tv[N_KV], tq, to, tw, tlo, thi;
  gint32 lo[ROWS], hi[ROWS];
  float scale = 1.0f / sqrtf (hd);
  gboolean invariant;

  if (!dev || !runs_table_op (dev, DFL_OP_ATTENTION_TABLE))
    return;
  invariant = (dfl_device_op_caps (dev, DFL_OP_ATTENTION, DFL_DTYPE_F32)
               & dfl_device_op_caps (dev, DFL_OP_ATTENTION_TABLE, DFL_DTYPE_F32)
               & DFL_OP_CAP_ROW_INVARIANT) != 0;
  for (int e = 0; e < N_KV; e++) {
    k[e] = random_floats (r, (gsize) keys[e] * kv_heads * hd, 1.0f);
    v[e] = random_floats (r, (gsize) keys[e] * kv_heads * hd, 1.0f);
    tk[e] = put (dev, DFL_DTYPE_F32, hd, kv_heads, keys[e], k[e]);
    tv[e] = put (dev, DFL_DTYPE_F32, hd, kv_heads, keys[e], v[e]);
  }
  for (int i = 0; i < ROWS; i++) {
    lo[i] = g_rand_int_range (r, 0, keys[which[i]]);
    hi[i] = g_rand_int_range (r, lo[i] + 1, keys[which[i]] + 1);
  }
  /* causal over a whole cache, and an empty range (zeros) */
  lo[0] = 0;
  hi[0] = keys[which[0]];
  hi[4] = lo[4];
  tq = put (dev, DFL_DTYPE_F32, hd, heads, ROWS, q);
  to = put (dev, DFL_DTYPE_F32, hd, heads, ROWS, NULL);
  tw = put_index (dev, DFL_OP_ATTENTION_TABLE, DFL_DTYPE_I32, ROWS, which);
  tlo = put_index (dev, DFL_OP_ATTENTION_TABLE, DFL_DTYPE_I32, ROWS, lo);
  thi = put_index (dev, DFL_OP_ATTENTION_TABLE, DFL_DTYPE_I32, ROWS, hi);
  OK (dfl_op_attention_table (dev, &tq, tk, tv, N_KV, &tw, &tlo, &thi, &to, scale, &op_error));
  get (dev, &to, out);

  assert_table_rows (dev, invariant, q, ROWS, heads, kv_heads, hd, k, v, tk, tv, which, lo, hi,
                     scale, out);

  /* a row an entry (a batch of decode steps, each of its own sequence,
   * which the CPU takes a span of groups at a time): each row the float64
   * attention and, where row-invariant, bitwise its entry's call alone */
  {
    const gint32 own[N_KV] = { 1, 2, 0 };
    gint32 own_lo[N_KV], own_hi[N_KV];
    DflTensor ow, ol, oh, oq = put (dev, DFL_DTYPE_F32, hd, heads, N_KV, q);
    DflTensor oo = put (dev, DFL_DTYPE_F32, hd, heads, N_KV, NULL);

    for (int i = 0; i < N_KV; i++) {
      own_lo[i] = 0;
      own_hi[i] = keys[own[i]];
    }
    ow = put_index (dev, DFL_OP_ATTENTION_TABLE, DFL_DTYPE_I32, N_KV, own);
    ol = put_index (dev, DFL_OP_ATTENTION_TABLE, DFL_DTYPE_I32, N_KV, own_lo);
    oh = put_index (dev, DFL_OP_ATTENTION_TABLE, DFL_DTYPE_I32, N_KV, own_hi);
    OK (dfl_op_attention_table (dev, &oq, tk, tv, N_KV, &ow, &ol, &oh, &oo, scale, &op_error));
    get (dev, &oo, out);
    assert_table_rows (dev, invariant, q, N_KV, heads, kv_heads, hd, k, v, tk, tv, own, own_lo,
                       own_hi, scale, out);
  }

  /* a table of none, or of more than the limit; entries of other heads */
  {
    g_autoptr (GError) e1 = NULL, e2 = NULL, e3 = NULL;
    DflTensor one_head = put (dev, DFL_DTYPE_F32, hd, 1, 4, NULL);
    DflTensor odd_k[2] = { tk[0], one_head }, odd_v[2] = { tv[0], one_head };
    DflTensor many[DFL_OP_TABLE_MAX + 1];
    for (int e = 0; e <= DFL_OP_TABLE_MAX; e++)
      many[e] = tk[0];
    assert_refused (dfl_op_attention_table (dev, &tq, tk, tv, 0, &tw, &tlo, &thi, &to, scale,
                                            &e1), &e1, DFL_ERROR_INVALID, "attention_table",
                    "holds 0 tensors");
    assert_refused (dfl_op_attention_table (dev, &tq, many, many, DFL_OP_TABLE_MAX + 1, &tw, &tlo,
                                            &thi, &to, scale, &e2), &e2, DFL_ERROR_INVALID,
                    "attention_table", "holds 65 tensors");
    assert_refused (dfl_op_attention_table (dev, &tq, odd_k, odd_v, 2, &tw, &tlo, &thi, &to,
                                            scale, &e3), &e3, DFL_ERROR_MISMATCH,
                    "ks[1]'s kv heads is 1", "ks[0]'s is 2");
  }
  /* on the CPU, an entry or a range outside its entry's keys */
  if (dfl_device_op_caps (dev, DFL_OP_ATTENTION_TABLE, DFL_DTYPE_F32) & DFL_OP_CAP_HOST_INDICES) {
    g_autoptr (GError) e1 = NULL, e2 = NULL;
    gint32 bad_which[ROWS], bad_hi[ROWS];
    DflTensor tbw, tbh;
    memcpy (bad_which, which, sizeof which);
    memcpy (bad_hi, hi, sizeof hi);
    bad_which[3] = N_KV;
    /* row 2 reads entry 1, of 7 keys */
    bad_hi[2] = 8;
    tbw = put_index (dev, DFL_OP_ATTENTION_TABLE, DFL_DTYPE_I32, ROWS, bad_which);
    tbh = put_index (dev, DFL_OP_ATTENTION_TABLE, DFL_DTYPE_I32, ROWS, bad_hi);
    assert_refused (dfl_op_attention_table (dev, &tq, tk, tv, N_KV, &tbw, &tlo, &thi, &to, scale,
                                            &e1), &e1, DFL_ERROR_INVALID, "which[3] = 3",
                    "attention_table");
    assert_refused (dfl_op_attention_table (dev, &tq, tk, tv, N_KV, &tw, &tlo, &tbh, &to, scale,
                                            &e2), &e2, DFL_ERROR_INVALID, "row 2's keys [",
                    "outside the 7 of its entry 1");
  }
  for (int e = 0; e < N_KV; e++) {
    g_free (k[e]);
    g_free (v[e]);
  }
  release ();
}

/* On the CPU, the ranges lo = 0, hi = pos0 + r + 1 are dfl_attention_causal,
 * bit for bit, on whatever paths this CPU has. */
static void
test_attention_causal_bits (void)
{
  const int rows = 5, heads = 8, kv_heads = 2, hd = 64, pos0 = 100, keys = pos0 + rows;
  g_autoptr (GRand) r = g_rand_new_with_seed (450);
  gsize qn = (gsize) rows * heads * hd, kn = (gsize) keys * kv_heads * hd;
  g_autofree float *q = random_floats (r, qn, 1.0f);
  g_autofree float *k = random_floats (r, kn, 1.0f);
  g_autofree float *v = random_floats (r, kn, 1.0f);
  g_autofree float *want = g_new (float, qn), *got = g_new (float, qn);
  gint32 lo[rows], hi[rows];
  float scale = 1.0f / sqrtf (hd);

  for (int i = 0; i < rows; i++) {
    lo[i] = 0;
    hi[i] = pos0 + i + 1;
  }
  dfl_attention_causal (q, rows, heads, kv_heads, hd, k, v, pos0, scale, want);
  run_attention (cpu, q, rows, heads, kv_heads, hd, k, v, keys, lo, hi, scale, got);
  g_assert_cmpmem (got, sizeof (float) * qn, want, sizeof (float) * qn);
  release ();
}

/* --- row convolution --- */

static void
test_row_conv (gconstpointer data)
{
  g_autoptr (DflDevice) dev = open_device (data);
  const int row_counts[] = { 1, 3, 16 }, dim = 24, group = 4, kernel = 3;
  const int groups = dim / group, stride = kernel * groups + 5;

  if (!dev)
    return;
  for (guint ri = 0; ri < G_N_ELEMENTS (row_counts); ri++) {
    g_autoptr (GRand) r = g_rand_new_with_seed (500 + ri);
    int rows = row_counts[ri];
    g_autofree float *x = random_floats (r, (gsize) rows * dim, 1.0f);
    g_autofree float *base = random_floats (r, (gsize) kernel * dim, 1.0f);
    g_autofree float *dyn = random_floats (r, (gsize) rows * stride, 1.0f);
    g_autofree float *y = g_new (float, (gsize) rows * dim);
    g_autofree double *want = g_new0 (double, (gsize) rows * dim);
    g_autofree double *size = g_new0 (double, (gsize) rows * dim);
    DflTensor tx = put (dev, DFL_DTYPE_F32, dim, rows, 1, x);
    DflTensor tb = put (dev, DFL_DTYPE_F32, dim, kernel, 1, base);
    DflTensor td = put (dev, DFL_DTYPE_F32, stride, rows, 1, dyn);
    DflTensor ty = put (dev, DFL_DTYPE_F32, dim, rows, 1, NULL);

    /* dyn's rows hold kernel × groups values, then padding */
    td.ne[0] = kernel * groups;
    OK (dfl_op_row_conv (dev, &tx, &tb, &td, &ty, &op_error));
    get (dev, &ty, y);
    /* each offset's term over the rows it reaches, then the sums */
    for (int o = 0; o < kernel; o++)
      for (gsize at = (gsize) o * dim; at < (gsize) rows * dim; at++) {
        gsize i = at / dim, c = at % dim;
        double t = ((double) base[o * dim + c] + dyn[i * stride + o * groups + c / group])
                   * x[at - (gsize) o * dim];
        want[at] += t;
        size[at] += fabs (t);
      }
    for (gsize at = 0; at < (gsize) rows * dim; at++)
      assert_close ("row_conv", at, y[at], want[at], 1e-6 * size[at] + 1e-30);
    release ();
  }
}

/* --- embed, copy_rows, convert --- */

static void
test_embed (gconstpointer data)
{
  g_autoptr (DflDevice) dev = open_device (data);
  const DflDtype types[] = { DFL_DTYPE_F32, DFL_DTYPE_F16, DFL_DTYPE_BF16 };
  const int vocab = 11, dim = 12;
  const gint32 ids[] = { 3, 0, 10, 3 }, bad[] = { 2, 11 };

  if (!dev)
    return;
  for (guint ti = 0; ti < G_N_ELEMENTS (types); ti++) {
    g_autoptr (GRand) r = g_rand_new_with_seed (600 + ti);
    g_autofree float *tf = random_floats (r, (gsize) vocab * dim, 1.0f);
    g_autofree guint16 *t16 = g_new (guint16, (gsize) vocab * dim);
    float out[G_N_ELEMENTS (ids) * 12];
    DflTensor tt, ti_, to;

    tt = put (dev, types[ti], dim, vocab, 1, stored_as (types[ti], tf, t16, (gsize) vocab * dim));
    ti_ = put_index (dev, DFL_OP_EMBED, DFL_DTYPE_I32, G_N_ELEMENTS (ids), ids);
    to = put (dev, DFL_DTYPE_F32, dim, G_N_ELEMENTS (ids), 1, NULL);
    OK (dfl_op_embed (dev, &tt, &ti_, &to, &op_error));
    get (dev, &to, out);
    for (guint i = 0; i < G_N_ELEMENTS (ids); i++)
      g_assert_cmpmem (out + i * dim, sizeof (float) * dim, tf + (gsize) ids[i] * dim,
                       sizeof (float) * dim);
    /* where the ids are read on the host, one outside the table is refused */
    if (dfl_device_op_caps (dev, DFL_OP_EMBED, types[ti]) & DFL_OP_CAP_HOST_INDICES) {
      g_autoptr (GError) error = NULL;
      DflTensor tb = put_index (dev, DFL_OP_EMBED, DFL_DTYPE_I32, 2, bad);
      to.ne[1] = 2;
      assert_refused (dfl_op_embed (dev, &tt, &tb, &to, &error), &error, DFL_ERROR_INVALID,
                      "ids[1] = 11", "embed");
    }
    release ();
  }
}

static void
test_copy_rows (gconstpointer data)
{
  g_autoptr (DflDevice) dev = open_device (data);
  g_autoptr (GRand) r = g_rand_new_with_seed (700);
  const int width = 6, n = 10, rows = 3;
  const gint64 start = 4, late = 8;
  g_autofree float *dst = random_floats (r, (gsize) n * width, 1.0f);
  g_autofree float *src = random_floats (r, (gsize) rows * width, 1.0f);
  g_autofree float *got = g_new (float, (gsize) n * width);
  DflTensor ts, td, t0;

  if (!dev)
    return;
  ts = put (dev, DFL_DTYPE_F32, width, rows, 1, src);
  td = put (dev, DFL_DTYPE_F32, width, n, 1, dst);
  t0 = put_index (dev, DFL_OP_COPY_ROWS, DFL_DTYPE_I64, 1, &start);
  OK (dfl_op_copy_rows (dev, &ts, &t0, &td, &op_error));
  get (dev, &td, got);
  memcpy (dst + start * width, src, sizeof (float) * rows * width);
  g_assert_cmpmem (got, sizeof (float) * n * width, dst, sizeof (float) * n * width);
  if (dfl_device_op_caps (dev, DFL_OP_COPY_ROWS, DFL_DTYPE_F32) & DFL_OP_CAP_HOST_INDICES) {
    g_autoptr (GError) error = NULL;
    DflTensor tl = put_index (dev, DFL_OP_COPY_ROWS, DFL_DTYPE_I64, 1, &late);
    assert_refused (dfl_op_copy_rows (dev, &ts, &tl, &td, &error), &error, DFL_ERROR_INVALID,
                    "start row 8", "copy_rows");
  }
  /* a BF16 cache: F32 rows rounded to nearest even where the device keeps
   * one (CUDA), refused by name elsewhere */
  {
    g_autofree guint16 *bits = g_new0 (guint16, (gsize) n * width);
    g_autofree guint16 *want = g_new0 (guint16, (gsize) n * width);
    DflTensor tb = put (dev, DFL_DTYPE_BF16, width, n, 1, bits);

    if (dfl_device_supports (dev, DFL_OP_COPY_ROWS, DFL_DTYPE_BF16)) {
      OK (dfl_op_copy_rows (dev, &ts, &t0, &tb, &op_error));
      get (dev, &tb, bits);
      for (int i = 0; i < rows * width; i++)
        want[start * width + i] = dfl_f32_to_bf16 (src[i]);
      g_assert_cmpmem (bits, sizeof (guint16) * n * width, want, sizeof (guint16) * n * width);
    } else {
      g_autoptr (GError) error = NULL;
      assert_refused (dfl_op_copy_rows (dev, &ts, &t0, &tb, &error), &error,
                      DFL_ERROR_UNSUPPORTED, "BF16", "copy_rows");
    }
  }
  release ();
}

/* Rows into a table of tensors (several sequences' caches), each to its
 * entry and row. */
static void
test_copy_rows_table (gconstpointer data)
{
  g_autoptr (DflDevice) dev = open_device (data);
  enum { N_DST = 3, ROWS = 5 };
  g_autoptr (GRand) r = g_rand_new_with_seed (710);
  const int width = 6, n[N_DST] = { 10, 4, 7 };
  const gint32 which[ROWS] = { 1, 0, 2, 0, 1 };
  const gint64 row[ROWS] = { 3, 9, 0, 2, 0 };
  g_autofree float *src = random_floats (r, (gsize) ROWS * width, 1.0f);
  float *dst[N_DST], got[10 * 6];
  DflTensor td[N_DST], ts, tw, tr;

  if (!dev || !runs_table_op (dev, DFL_OP_COPY_ROWS_TABLE))
    return;
  for (int e = 0; e < N_DST; e++) {
    dst[e] = random_floats (r, (gsize) n[e] * width, 1.0f);
    td[e] = put (dev, DFL_DTYPE_F32, width, n[e], 1, dst[e]);
  }
  ts = put (dev, DFL_DTYPE_F32, width, ROWS, 1, src);
  tw = put_index (dev, DFL_OP_COPY_ROWS_TABLE, DFL_DTYPE_I32, ROWS, which);
  tr = put_index (dev, DFL_OP_COPY_ROWS_TABLE, DFL_DTYPE_I64, ROWS, row);
  OK (dfl_op_copy_rows_table (dev, &ts, td, N_DST, &tw, &tr, &op_error));
  for (int i = 0; i < ROWS; i++)
    memcpy (dst[which[i]] + row[i] * width, src + i * width, sizeof (float) * width);
  for (int e = 0; e < N_DST; e++) {
    get (dev, &td[e], got);
    g_assert_cmpmem (got, sizeof (float) * n[e] * width, dst[e], sizeof (float) * n[e] * width);
  }
  if (dfl_device_op_caps (dev, DFL_OP_COPY_ROWS_TABLE, DFL_DTYPE_F32) & DFL_OP_CAP_HOST_INDICES) {
    g_autoptr (GError) e1 = NULL, e2 = NULL;
    /* entry 1 has 4 rows; entry 3 is none */
    const gint64 late[ROWS] = { 4, 0, 0, 0, 0 };
    const gint32 none[ROWS] = { 0, 0, 0, 3, 0 };
    DflTensor tl = put_index (dev, DFL_OP_COPY_ROWS_TABLE, DFL_DTYPE_I64, ROWS, late);
    DflTensor tn = put_index (dev, DFL_OP_COPY_ROWS_TABLE, DFL_DTYPE_I32, ROWS, none);
    assert_refused (dfl_op_copy_rows_table (dev, &ts, td, N_DST, &tw, &tl, &e1), &e1,
                    DFL_ERROR_INVALID, "row 4 is outside the 4 rows", "entry 1");
    assert_refused (dfl_op_copy_rows_table (dev, &ts, td, N_DST, &tn, &tr, &e2), &e2,
                    DFL_ERROR_INVALID, "which[3] = 3", "copy_rows_table");
    /* nothing was written by the refused calls */
    for (int e = 0; e < N_DST; e++) {
      get (dev, &td[e], got);
      g_assert_cmpmem (got, sizeof (float) * n[e] * width, dst[e], sizeof (float) * n[e] * width);
    }
  }
  {
    g_autoptr (GError) error = NULL;
    DflTensor wide = put (dev, DFL_DTYPE_F32, width + 1, 4, 1, NULL), mixed[2] = { td[0], wide };
    assert_refused (dfl_op_copy_rows_table (dev, &ts, mixed, 2, &tw, &tr, &error), &error,
                    DFL_ERROR_MISMATCH, "dsts[1]", "columns");
  }
  for (int e = 0; e < N_DST; e++)
    g_free (dst[e]);
  release ();
}

static void
test_convert (gconstpointer data)
{
  g_autoptr (DflDevice) dev = open_device (data);
  const DflDtype types[] = { DFL_DTYPE_F16, DFL_DTYPE_BF16 };
  /* ties of both types, subnormals, overflow, infinities, NaNs, zeros */
  const guint32 special[] = { 0x3f801000, 0x3f803000, 0x3f808000, 0x3f818000, 0x33000000,
                              0x33000001, 0x387fc000, 0x477ff000, 0x477fefff, 0x7f7fffff,
                              0x7f800000, 0xff800000, 0x7fc00001, 0xffa00000, 0x80000000, 0 };
  const int n = 4096;

  if (!dev)
    return;
  if (!dfl_device_supports (dev, DFL_OP_CONVERT, DFL_DTYPE_F16)) {
    g_autoptr (GError) error = NULL;
    DflTensor a = put (dev, DFL_DTYPE_F32, 4, 1, 1, NULL), b = put (dev, DFL_DTYPE_F16, 4, 1, 1, NULL);
    assert_refused (dfl_op_convert (dev, &a, &b, &error), &error, DFL_ERROR_UNSUPPORTED, "convert",
                    dfl_backend_name (dfl_device_backend (dev)));
    release ();
    return;
  }
  for (guint ti = 0; ti < G_N_ELEMENTS (types); ti++) {
    g_autoptr (GRand) r = g_rand_new_with_seed (800 + ti);
    g_autofree float *x = random_floats (r, n, 3.0f);
    g_autofree guint16 *h = g_new (guint16, n), *all = g_new (guint16, 65536);
    g_autofree float *wide = g_new (float, 65536);
    g_autofree guint16 *again = g_new (guint16, 65536);
    gboolean f16 = types[ti] == DFL_DTYPE_F16;
    DflTensor tx, th, tw, ta;

    for (guint i = 0; i < G_N_ELEMENTS (special); i++) {
      union { guint32 u; float f; } v = { special[i] };
      x[i] = v.f;
    }
    for (int i = G_N_ELEMENTS (special); i < n; i += 7)
      x[i] *= 1e-6f;
    tx = put (dev, DFL_DTYPE_F32, n, 1, 1, x);
    th = put (dev, types[ti], n, 1, 1, NULL);
    OK (dfl_op_convert (dev, &tx, &th, &op_error));
    get (dev, &th, h);
    for (int i = 0; i < n; i++) {
      guint16 want = f16 ? dfl_f32_to_f16 (x[i]) : dfl_f32_to_bf16 (x[i]);
      /* a NaN's bits are the back end's own (CUDA's conversion gives its
       * canonical NaN, sign and all): it stays a NaN */
      if (isnan (x[i]))
        g_assert_true ((h[i] & 0x7fff) > (f16 ? 0x7c00 : 0x7f80));
      else if (h[i] != want)
        g_error ("convert to %s of %a: 0x%04x, expected 0x%04x", dfl_dtype_name (types[ti]),
                 x[i], h[i], want);
    }
    /* widening is exact: every value of the type narrows back to itself */
    for (int i = 0; i < 65536; i++)
      all[i] = (guint16) i;
    ta = put (dev, types[ti], 65536, 1, 1, all);
    tw = put (dev, DFL_DTYPE_F32, 65536, 1, 1, NULL);
    OK (dfl_op_convert (dev, &ta, &tw, &op_error));
    get (dev, &tw, wide);
    OK (dfl_op_convert (dev, &tw, &ta, &op_error));
    get (dev, &ta, again);
    for (int i = 0; i < 65536; i++)
      if (!isnan (wide[i]))
        g_assert_cmpuint (again[i], ==, i);
    release ();
  }
}

/* --- choices: argmax, top_k, re-scoring --- */

/* Rows full of equal values (eighths), NaNs (a row's first one too), −inf,
 * +0 and −0. */
static float *
tie_rows (GRand *r, int rows, int n)
{
  float *x = g_new (float, (gsize) rows * n);

  for (gsize i = 0; i < (gsize) rows * n; i++) {
    x[i] = roundf ((float) g_rand_double_range (r, -5, 5) * 8.0f) / 8.0f;
    if (g_rand_int_range (r, 0, 7) == 0)
      x[i] = NAN;
    else if (g_rand_int_range (r, 0, 53) == 0)
      x[i] = -INFINITY;
    else if (g_rand_int_range (r, 0, 31) == 0)
      x[i] = g_rand_boolean (r) ? 0.0f : -0.0f;
  }
  x[0] = NAN;
  /* a row of NaNs but one, and one of NaNs only */
  if (rows > 2) {
    for (int i = 0; i < n; i++)
      x[(gsize) n + i] = x[2 * (gsize) n + i] = NAN;
    x[(gsize) n + n / 2] = 1.0f;
  }
  return x;
}

static void
test_argmax (gconstpointer data)
{
  g_autoptr (DflDevice) dev = open_device (data);
  g_autoptr (GRand) r = g_rand_new_with_seed (900);
  const int rows = 6, n = 300;
  g_autofree float *x = tie_rows (r, rows, n);
  gint32 got[6];
  DflTensor tx, to;

  if (!dev)
    return;
  tx = put (dev, DFL_DTYPE_F32, n, rows, 1, x);
  to = put (dev, DFL_DTYPE_I32, rows, 1, 1, NULL);
  if (!dfl_device_supports (dev, DFL_OP_ARGMAX, DFL_DTYPE_F32)) {
    g_autoptr (GError) error = NULL;
    assert_refused (dfl_op_argmax (dev, &tx, &to, &error), &error, DFL_ERROR_UNSUPPORTED,
                    "argmax on", dfl_backend_name (dfl_device_backend (dev)));
    release ();
    return;
  }
  OK (dfl_op_argmax (dev, &tx, &to, &op_error));
  get (dev, &to, got);
  for (int i = 0; i < rows; i++) {
    const float *row = x + (gsize) i * n;
    int want = 0;
    /* the first of the largest non-NaN values, 0 where the first is NaN */
    if (!isnan (row[0]))
      for (int c = 1; c < n; c++)
        if (row[c] > row[want])
          want = c;
    g_assert_cmpint (got[i], ==, want);
  }
  release ();
}

static void
run_top_k (DflDevice *dev, const float *x, int rows, int n, int k, float *values, gint32 *idx)
{
  DflTensor tx = put (dev, DFL_DTYPE_F32, n, rows, 1, x);
  DflTensor tv = put (dev, DFL_DTYPE_F32, k, rows, 1, NULL);
  DflTensor ti = put (dev, DFL_DTYPE_I32, k, rows, 1, NULL);

  OK (dfl_op_top_k (dev, &tx, &tv, &ti, &op_error));
  get (dev, &tv, values);
  get (dev, &ti, idx);
}

static void
test_top_k (gconstpointer data)
{
  g_autoptr (DflDevice) dev = open_device (data);
  const int ks[] = { 1, 5, 20 }, rows = 6, n = 300;

  if (!dev)
    return;
  for (guint ki = 0; ki < G_N_ELEMENTS (ks); ki++) {
    g_autoptr (GRand) r = g_rand_new_with_seed (1000 + ki);
    int k = ks[ki];
    g_autofree float *x = tie_rows (r, rows, n);
    g_autofree float *vals = g_new (float, (gsize) rows * k), *want_v = g_new (float, k);
    g_autofree gint32 *idx = g_new (gint32, (gsize) rows * k);
    g_autofree guint32 *want_i = g_new (guint32, k);

    run_top_k (dev, x, rows, n, k, vals, idx);
    for (int i = 0; i < rows; i++) {
      /* the drafter's own top-k */
      int have = dfl_top_k (x + (gsize) i * n, n, k, want_v, want_i);
      for (int c = 0; c < k; c++) {
        gsize at = (gsize) i * k + c;
        if (c >= have) {
          g_assert_cmpint (idx[at], ==, -1);
          continue;
        }
        g_assert_cmpint (idx[at], ==, (gint32) want_i[c]);
        g_assert_true (vals[at] == want_v[c]);
      }
    }
    release ();
  }
}

/* top_k then select_rescore: the drafter's dfl_drafter_weights_select_with. */
static void
test_select_rescore (gconstpointer data)
{
  g_autoptr (DflDevice) dev = open_device (data);
  const int vocab = 97, rank = 12, k = 6, row_counts[] = { 1, 4, 9, 16 };

  if (!dev)
    return;
  for (guint ri = 0; ri < G_N_ELEMENTS (row_counts); ri++) {
    g_autoptr (GRand) r = g_rand_new_with_seed (1100 + ri);
    int rows = row_counts[ri];
    g_autofree float *logits = tie_rows (r, rows, vocab);
    g_autofree float *hp = random_floats (r, (gsize) rows * rank, 1.0f);
    g_autofree float *books_f = random_floats (r, (gsize) 2 * vocab * rank, 1.0f);
    g_autofree guint16 *books = g_new (guint16, (gsize) 2 * vocab * rank);
    g_autofree float *vals = g_new (float, (gsize) rows * k);
    g_autofree gint32 *cand = g_new (gint32, (gsize) rows * k), *got = g_new (gint32, rows);
    g_autofree guint32 *want = g_new (guint32, rows);
    guint32 anchor = 41;
    DflDrafterWeights d = { 0 };
    DflTensor tc, tl, th, tp, ts, to;

    for (gsize i = 0; i < (gsize) 2 * vocab * rank; i++)
      books[i] = dfl_f32_to_f16 (books_f[i]);
    /* every other row without the selector's term: its score is the
     * logit, and equal logits tie (the first must win) */
    for (int i = 0; i < rows; i += 2)
      memset (hp + (gsize) i * rank, 0, sizeof (float) * rank);
    d.selector = TRUE;
    d.g.vocab = vocab;
    d.g.selector_rank = rank;
    d.g.selector_top = k;
    d.books[0] = books;
    d.books[1] = books + (gsize) vocab * rank;
    dfl_drafter_weights_select_with (&d, hp, rows, logits, vocab, anchor, want, NULL);

    run_top_k (dev, logits, rows, vocab, k, vals, cand);
    tc = put (dev, DFL_DTYPE_I32, k, rows, 1, cand);
    tl = put (dev, DFL_DTYPE_F32, k, rows, 1, vals);
    th = put (dev, DFL_DTYPE_F32, rank, rows, 1, hp);
    tp = put (dev, DFL_DTYPE_F16, rank, vocab, 1, d.books[0]);
    ts = put (dev, DFL_DTYPE_F16, rank, vocab, 1, d.books[1]);
    to = put (dev, DFL_DTYPE_I32, rows, 1, 1, NULL);
    OK (dfl_op_select_rescore (dev, &tc, &tl, &th, &tp, &ts, &to, anchor, &op_error));
    get (dev, &to, got);
    for (int i = 0; i < rows; i++)
      g_assert_cmpint (got[i], ==, (gint32) want[i]);
    release ();
  }
}

/* --- refusals and graphs --- */

static void
test_refusals (gconstpointer data)
{
  g_autoptr (DflDevice) dev = open_device (data);
  const char *backend;
  g_autoptr (GError) e1 = NULL;
  g_autoptr (GError) e2 = NULL;
  g_autoptr (GError) e3 = NULL;
  g_autoptr (GError) e4 = NULL;
  DflTensor w, x, y;

  if (!dev)
    return;
  backend = dfl_backend_name (dfl_device_backend (dev));
  /* a type no back end multiplies by */
  g_assert_false (dfl_device_supports (dev, DFL_OP_MATMUL, DFL_DTYPE_I8));
  w = put (dev, DFL_DTYPE_I8, 8, 4, 1, NULL);
  x = put (dev, DFL_DTYPE_F32, 8, 2, 1, NULL);
  y = put (dev, DFL_DTYPE_F32, 4, 2, 1, NULL);
  assert_refused (dfl_op_matmul (dev, &w, &x, &y, FALSE, &e1), &e1, DFL_ERROR_UNSUPPORTED, "I8",
                  backend);
  g_assert_nonnull (strstr (e1->message, "matmul"));
  /* shapes that do not agree */
  w.dtype = DFL_DTYPE_F32;
  set_shape (&w, 8, 4, 1);
  x.ne[0] = 7;
  assert_refused (dfl_op_matmul (dev, &w, &x, &y, FALSE, &e2), &e2, DFL_ERROR_MISMATCH,
                  "x's columns is 7", "w's is 8");
  /* graphs are CUDA's alone */
  if (dfl_device_backend (dev) != DFL_BACKEND_CUDA) {
    g_assert_false (dfl_device_supports (dev, DFL_OP_CAPTURE_BEGIN, DFL_DTYPE_F32));
    assert_refused (dfl_op_capture_begin (dev, &e3), &e3, DFL_ERROR_UNSUPPORTED,
                    "capture_begin on", backend);
  }
  /* a head_dim the GPU kernels do not take */
  if (dfl_device_backend (dev) != DFL_BACKEND_CPU) {
    const int hd = 260;
    gint32 lo = 0, hi = 1;
    DflTensor q = put (dev, DFL_DTYPE_F32, hd, 1, 1, NULL);
    DflTensor k = put (dev, DFL_DTYPE_F32, hd, 1, 1, NULL);
    DflTensor tl = put_index (dev, DFL_OP_ATTENTION, DFL_DTYPE_I32, 1, &lo);
    DflTensor th = put_index (dev, DFL_OP_ATTENTION, DFL_DTYPE_I32, 1, &hi);
    assert_refused (dfl_op_attention (dev, &q, &k, &k, &tl, &th, &q, 1.0f, &e4), &e4,
                    DFL_ERROR_UNSUPPORTED, "head_dim 260", backend);
  }
  release ();
}

/* A graph replays at the position its index tensor holds then. */
static void
test_graph (gconstpointer data)
{
  g_autoptr (DflDevice) dev = open_device (data);
  const int rows = 2, heads = 2, hd = 8;
  g_autoptr (GRand) r = g_rand_new_with_seed (1200);
  g_autofree float *x = random_floats (r, rows * heads * hd, 1.0f);
  float inv_freq[4], direct[32], replayed[32];
  gint64 p0 = 3, p1 = 50;
  g_autoptr (DflGraph) graph = NULL;
  DflTensor tx, tf, tp;

  if (!dev)
    return;
  if (!dfl_device_supports (dev, DFL_OP_CAPTURE_BEGIN, DFL_DTYPE_F32)) {
    g_test_skip ("this back end has no graphs (test_refusals checks the refusal)");
    return;
  }
  dfl_rope_inv_freq (inv_freq, hd, 10000.0);
  tf = put (dev, DFL_DTYPE_F32, hd / 2, 1, 1, inv_freq);
  tp = put_index (dev, DFL_OP_ROPE, DFL_DTYPE_I64, 1, &p1);
  tx = put (dev, DFL_DTYPE_F32, hd, heads, rows, x);
  OK (dfl_op_rope (dev, &tx, &tf, &tp, &op_error));
  get (dev, &tx, direct);
  OK (dfl_device_upload (dev, tp.handle, 0, &p0, sizeof p0, &op_error));
  OK (dfl_device_upload (dev, tx.handle, 0, x, sizeof (float) * rows * heads * hd, &op_error));
  OK (dfl_op_capture_begin (dev, &op_error));
  OK (dfl_op_rope (dev, &tx, &tf, &tp, &op_error));
  {
    g_autoptr (GError) error = NULL;
    graph = dfl_op_capture_end (dev, &error);
    g_assert_no_error (error);
  }
  OK (dfl_device_upload (dev, tp.handle, 0, &p1, sizeof p1, &op_error));
  OK (dfl_op_graph_launch (dev, graph, &op_error));
  get (dev, &tx, replayed);
  g_assert_cmpmem (replayed, sizeof direct, direct, sizeof direct);
  release ();
}

/* fill_random: element i from the hash of (seed, i) written out here
 * again, as every back end must give it (F32, and rounded to F16 and BF16
 * to nearest even); uniform in [-scale, scale) (its mean near 0); another
 * seed, other values. A back end without it refuses, naming the op. */
static void
test_fill_random (gconstpointer data)
{
  g_autoptr (DflDevice) dev = open_device (data);
  const DflDtype types[] = { DFL_DTYPE_F32, DFL_DTYPE_F16, DFL_DTYPE_BF16 };
  const int n = 3001;
  const float scale = 0.25f;

  if (!dev)
    return;
  if (!dfl_device_supports (dev, DFL_OP_FILL_RANDOM, DFL_DTYPE_F32)) {
    g_autoptr (GError) error = NULL;
    DflTensor a = put (dev, DFL_DTYPE_F32, 4, 1, 1, NULL);
    assert_refused (dfl_op_fill_random (dev, &a, 1, 1.0f, &error), &error, DFL_ERROR_UNSUPPORTED,
                    "fill_random", dfl_backend_name (dfl_device_backend (dev)));
    release ();
    return;
  }
  for (guint ti = 0; ti < G_N_ELEMENTS (types); ti++) {
    DflTensor t = put (dev, types[ti], n, 1, 1, NULL), u = put (dev, types[ti], n, 1, 1, NULL);
    gsize size = dfl_dtype_size (types[ti]);
    g_autofree guint8 *got = g_malloc (n * size), *other = g_malloc (n * size);
    double sum = 0.0;
    int differ = 0;

    OK (dfl_op_fill_random (dev, &t, 7, scale, &op_error));
    OK (dfl_op_fill_random (dev, &u, 8, scale, &op_error));
    get (dev, &t, got);
    get (dev, &u, other);
    for (int i = 0; i < n; i++) {
      guint64 z = 7 * G_GUINT64_CONSTANT (0x9e3779b97f4a7c15) + (guint64) i + 1;
      float v, w;
      guint16 h;

      z = (z ^ (z >> 30)) * G_GUINT64_CONSTANT (0xbf58476d1ce4e5b9);
      z = (z ^ (z >> 27)) * G_GUINT64_CONSTANT (0x94d049bb133111eb);
      z ^= z >> 31;
      v = (float) ((double) (z >> 40) / 16777216.0 * 2.0 - 1.0) * scale;
      switch (types[ti]) {
        case DFL_DTYPE_F32:
          g_assert_cmpmem (got + i * size, size, &v, size);
          w = v;
          break;
        default:
          h = types[ti] == DFL_DTYPE_F16 ? dfl_f32_to_f16 (v) : dfl_f32_to_bf16 (v);
          g_assert_cmpmem (got + i * size, size, &h, size);
          w = types[ti] == DFL_DTYPE_F16 ? dfl_f16_to_f32 (h) : dfl_bf16_to_f32 (h);
          break;
      }
      g_assert_cmpfloat (fabsf (w), <=, scale);
      sum += w;
      differ += memcmp (got + i * size, other + i * size, size) != 0;
    }
    g_assert_cmpfloat (fabs (sum / n), <, 0.02);
    g_assert_cmpint (differ, >, n * 9 / 10);
  }
  {
    g_autoptr (GError) error = NULL;
    DflTensor a = put (dev, DFL_DTYPE_F32, 4, 1, 1, NULL);
    assert_refused (dfl_op_fill_random (dev, &a, 1, -1.0f, &error), &error, DFL_ERROR_INVALID,
                    "fill_random", "scale -1");
  }
  release ();
}

int
main (int argc, char **argv)
{
  static const struct {
    const char *name;
    GTestDataFunc func;
  } tests[] = {
    { "matmul", test_matmul }, { "matmul_group", test_matmul_group },
    { "rmsnorm", test_rmsnorm }, { "rope", test_rope },
    { "elementwise", test_elementwise }, { "attention", test_attention },
    { "row_conv", test_row_conv }, { "embed", test_embed }, { "copy_rows", test_copy_rows },
    { "convert", test_convert }, { "argmax", test_argmax }, { "top_k", test_top_k },
    { "select_rescore", test_select_rescore }, { "refusals", test_refusals },
    { "graph", test_graph }, { "fill_random", test_fill_random },
    { "rope_rows", test_rope_rows }, { "copy_rows_table", test_copy_rows_table },
    { "attention_table", test_attention_table }, { "norm_rope", test_norm_rope },
  };
  g_autoptr (GError) error = NULL;
  int status;

  g_test_init (&argc, &argv, NULL);
  held = g_array_new (FALSE, FALSE, sizeof (Held));
  cpu = dfl_device_open (DFL_BACKEND_CPU, -1, &error);
  g_assert_no_error (error);
  for (int b = 0; b < DFL_N_BACKENDS; b++) {
    if (!dfl_backend_built (b))
      continue;
    for (guint i = 0; i < G_N_ELEMENTS (tests); i++) {
      g_autofree char *path = g_strdup_printf ("/backend/%s/%s", dfl_backend_name (b),
                                               tests[i].name);
      g_test_add_data_func (path, GINT_TO_POINTER (b), tests[i].func);
    }
  }
  g_test_add_func ("/backend/cpu/attention-causal-bits", test_attention_causal_bits);
  status = g_test_run ();
  dfl_device_unref (cpu);
  g_array_free (held, TRUE);
  return status;
}
