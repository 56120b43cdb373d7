/* gst-dflash — the Vulkan kernels against float64 references written here
 * (plain loops in double), on shapes that reach their edges: rows past a
 * matmul tile, odd widths across the 16-bit words, a ring that wraps, a
 * window that masks, ties and NaNs in top-k, a tie in the re-scoring.
 */
#include "vk-test.h"

#include <math.h>
#include <string.h>

static DflVkStream *stream;

static guint16
to_f16 (float v)
{
  /* round to nearest even, normal range only (the tests' values are) */
  guint32 b, sign, man;
  int e;

  memcpy (&b, &v, 4);
  sign = (b >> 16) & 0x8000;
  e = (int) ((b >> 23) & 0xff) - 127 + 15;
  man = b & 0x7fffff;
  if (e <= 0)
    return (guint16) sign;
  {
    guint32 h = ((guint32) e << 10) | (man >> 13), rest = man & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
      h++;
    return (guint16) (sign | h);
  }
}

static double
from_f16 (guint16 h)
{
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v = e == 0 ? ldexp (m, -24) : ldexp (1024 + m, e - 25);
  return (h & 0x8000) ? -v : v;
}

static guint16
to_bf16 (float v)
{
  guint32 b;

  memcpy (&b, &v, 4);
  b += 0x7fff + ((b >> 16) & 1);
  return (guint16) (b >> 16);
}

static double
from_bf16 (guint16 h)
{
  guint32 b = (guint32) h << 16;
  float f;

  memcpy (&f, &b, 4);
  return f;
}

static float *
random_floats (GRand *rng, gsize n, double lo, double hi)
{
  float *x = g_new (float, n);

  for (gsize i = 0; i < n; i++)
    x[i] = (float) g_rand_double_range (rng, lo, hi);
  return x;
}

static DflVkBuffer *
upload (const void *data, gsize bytes)
{
  GError *error = NULL;
  DflVkBuffer *b = dfl_vk_buffer_new (vk_test_dev, MAX (bytes, 4), DFL_VK_MEMORY_DEVICE, &error);

  g_assert_no_error (error);
  if (data && bytes)
    g_assert_true (dfl_vk_upload (vk_test_dev, b, 0, data, bytes, &error));
  g_assert_no_error (error);
  return b;
}

static DflVkBuffer *
scratch (gsize bytes)
{
  return upload (NULL, bytes);
}

static void
finish (void)
{
  GError *error = NULL;

  g_assert_true (dfl_vk_stream_finish (stream, &error));
  g_assert_no_error (error);
}

static void *
download (DflVkBuffer *b, gsize bytes)
{
  GError *error = NULL;
  void *host = g_malloc (MAX (bytes, 1));

  g_assert_true (dfl_vk_download (vk_test_dev, host, b, 0, bytes, &error));
  g_assert_no_error (error);
  return host;
}

#define A(b) dfl_vk_buffer_address (b)

/* Wait for the stream, then the `n` floats of `b` against `want`: within
 * 2e-6 of its largest magnitude (vk_test_rel), else fail naming the case. */
static void
assert_result (DflVkBuffer *b, const double *want, gsize n, const char *format, ...)
    G_GNUC_PRINTF (4, 5);

static void
assert_result (DflVkBuffer *b, const double *want, gsize n, const char *format, ...)
{
  g_autofree float *got = NULL;
  double err;

  finish ();
  got = download (b, sizeof (float) * n);
  err = vk_test_rel (got, want, n);
  if (err > 2e-6) {
    g_autofree char *what = NULL;
    va_list args;

    va_start (args, format);
    what = g_strdup_vprintf (format, args);
    va_end (args);
    g_error ("%s: error %g", what, err);
  }
}

/* --- matmul --- */

static void
matmul_case (DflDtype type, int rows, int cols, int w_rows, int n_out, gboolean accumulate,
             int pad)
{
  GRand *rng = g_rand_new_with_seed (rows * 1000 + cols * 10 + type);
  gsize nw = (gsize) w_rows * cols;
  float *x = random_floats (rng, (gsize) rows * (cols + pad), -1, 1);
  float *y0 = random_floats (rng, (gsize) rows * (n_out + 2), -1, 1);
  float *wf = random_floats (rng, nw, -0.5, 0.5);
  double *wd = g_new (double, nw), *want = g_new (double, (gsize) rows * (n_out + 2));
  void *wraw = g_malloc (nw * 4);
  DflVkBuffer *bw, *bx, *by;
  DflVkWeights w;
  int ldx = cols + pad, ldy = n_out + 2;

  for (gsize i = 0; i < nw; i++) {
    if (type == DFL_DTYPE_F32) {
      ((float *) wraw)[i] = wf[i];
      wd[i] = wf[i];
    } else if (type == DFL_DTYPE_F16) {
      ((guint16 *) wraw)[i] = to_f16 (wf[i]);
      wd[i] = from_f16 (((guint16 *) wraw)[i]);
    } else {
      ((guint16 *) wraw)[i] = to_bf16 (wf[i]);
      wd[i] = from_bf16 (((guint16 *) wraw)[i]);
    }
  }
  for (int r = 0; r < rows; r++) {
    for (int o = 0; o < ldy; o++) {
      double s = accumulate || o >= n_out ? y0[(gsize) r * ldy + o] : 0.0;
      if (o < n_out)
        for (int i = 0; i < cols; i++)
          s += (double) x[(gsize) r * ldx + i] * wd[(gsize) o * cols + i];
      want[(gsize) r * ldy + o] = s;
    }
  }
  bw = upload (wraw, nw * dfl_dtype_size (type));
  bx = upload (x, sizeof (float) * rows * ldx);
  by = upload (y0, sizeof (float) * rows * ldy);
  w = (DflVkWeights) { A (bw), type, w_rows, cols };
  dfl_vk_matmul (stream, &w, A (bx), rows, ldx, A (by), ldy, n_out, accumulate);
  assert_result (by, want, (gsize) rows * ldy, "matmul type %d rows %d cols %d n_out %d", type, rows,
                 cols, n_out);
  dfl_vk_buffer_free (bw);
  dfl_vk_buffer_free (bx);
  dfl_vk_buffer_free (by);
  g_free (x);
  g_free (y0);
  g_free (wf);
  g_free (wd);
  g_free (want);
  g_free (wraw);
  g_rand_free (rng);
}

static void
test_matmul (void)
{
  for (int t = 0; t < 3; t++) {
    /* rows of x padded by 3: two elements a step; unpadded, widths of fours: four */
    for (int pad = 0; pad <= 3; pad += 3) {
      matmul_case (t, 1, 64, 40, 40, FALSE, pad);
      matmul_case (t, 5, 132, 33, 20, FALSE, pad);    /* a shortlist of the rows */
      matmul_case (t, 40, 96, 12, 12, TRUE, pad);     /* past two tiles of rows */
    }
    matmul_case (t, 17, 37, 9, 9, FALSE, 0);          /* odd: elements across words */
    matmul_case (t, 3, 66, 9, 9, FALSE, 0);           /* even, not fours */
  }
  matmul_case (DFL_DTYPE_F32, 3, 700, 70, 70, FALSE, 0);
  vk_test_assert_clean ();
}

/* --- norms, rope, element-wise --- */

static void
test_rmsnorm (void)
{
  g_autoptr (GRand) rng = g_rand_new_with_seed (7);
  int rows = 5, dim = 100;
  g_autofree float *x = random_floats (rng, (gsize) rows * dim, -2, 2);
  g_autofree float *w = random_floats (rng, dim, 0.5, 1.5);
  g_autofree double *want = g_new (double, (gsize) rows * dim);
  g_autofree float *got = NULL, *got2 = NULL;
  DflVkBuffer *bx = upload (x, sizeof (float) * rows * dim), *bw = upload (w, sizeof (float) * dim);
  DflVkBuffer *by = scratch (sizeof (float) * rows * dim);

  for (int r = 0; r < rows; r++) {
    double ss = 0.0;
    for (int i = 0; i < dim; i++)
      ss += (double) x[r * dim + i] * x[r * dim + i];
    for (int i = 0; i < dim; i++)
      want[r * dim + i] = x[r * dim + i] / sqrt (ss / dim + 1e-6) * w[i];
  }
  dfl_vk_rmsnorm (stream, A (by), A (bx), rows, dim, A (bw), 1e-6f);
  dfl_vk_rmsnorm (stream, A (bx), A (bx), rows, dim, A (bw), 1e-6f);   /* in place */
  finish ();
  got = download (by, sizeof (float) * rows * dim);
  got2 = download (bx, sizeof (float) * rows * dim);
  g_assert_cmpfloat (vk_test_rel (got, want, (gsize) rows * dim), <, 1e-6);
  g_assert_cmpfloat (vk_test_rel (got2, want, (gsize) rows * dim), <, 1e-6);
  dfl_vk_buffer_free (bx);
  dfl_vk_buffer_free (bw);
  dfl_vk_buffer_free (by);
  vk_test_assert_clean ();
}

static void
test_rope (void)
{
  GRand *rng = g_rand_new_with_seed (8);
  int rows = 4, heads = 3, hd = 16, half = 8;
  gsize n = (gsize) rows * heads * hd;
  float *x = random_floats (rng, n, -1, 1), inv[8], *table = g_new (float, rows * hd), *got;
  double *want = g_new (double, n);
  DflVkBuffer *bx = upload (x, n * sizeof (float)), *bt;

  for (int i = 0; i < half; i++)
    inv[i] = (float) pow (10000.0, -2.0 * i / hd);
  dfl_vk_rope_table (table, rows, hd, inv, 1000);
  for (int r = 0; r < rows; r++) {
    for (int i = 0; i < half; i++) {
      /* the angle as F32 forms it, then cos and sin in double */
      double a = (float) (1000 + r) * inv[i];
      g_assert_cmpfloat (fabs (table[r * hd + i] - cos (a)), <, 1e-6);
      g_assert_cmpfloat (fabs (table[r * hd + half + i] - sin (a)), <, 1e-6);
      for (int h = 0; h < heads; h++) {
        gsize lo = ((gsize) r * heads + h) * hd + i, hi = lo + half;
        want[lo] = x[lo] * cos (a) - x[hi] * sin (a);
        want[hi] = x[hi] * cos (a) + x[lo] * sin (a);
      }
    }
  }
  bt = upload (table, sizeof (float) * rows * hd);
  dfl_vk_rope (stream, A (bx), rows, heads, hd, A (bt));
  finish ();
  got = download (bx, n * sizeof (float));
  g_assert_cmpfloat (vk_test_rel (got, want, n), <, 2e-6);
  dfl_vk_buffer_free (bx);
  dfl_vk_buffer_free (bt);
  g_free (x);
  g_free (table);
  g_free (want);
  g_free (got);
  g_rand_free (rng);
  vk_test_assert_clean ();
}

static void
test_elementwise (void)
{
  GRand *rng = g_rand_new_with_seed (9);
  gsize n = 1000;
  float *a = random_floats (rng, n, -6, 6), *b = random_floats (rng, n, -2, 2), *got, *got2;
  double *want = g_new (double, n), *want2 = g_new (double, n);
  DflVkBuffer *ba = upload (a, n * 4), *ba2 = upload (a, n * 4), *bb = upload (b, n * 4);

  for (gsize i = 0; i < n; i++) {
    want[i] = a[i] / (1.0 + exp (-(double) a[i])) * b[i];
    want2[i] = (double) a[i] + b[i];
  }
  dfl_vk_silu_mul (stream, A (ba), A (bb), n);
  dfl_vk_add (stream, A (ba2), A (bb), n);
  finish ();
  got = download (ba, n * 4);
  got2 = download (ba2, n * 4);
  g_assert_cmpfloat (vk_test_rel (got, want, n), <, 1e-5);
  g_assert_cmpfloat (vk_test_rel (got2, want2, n), <, 1e-6);
  dfl_vk_buffer_free (ba);
  dfl_vk_buffer_free (ba2);
  dfl_vk_buffer_free (bb);
  g_free (a);
  g_free (b);
  g_free (want);
  g_free (want2);
  g_free (got);
  g_free (got2);
  g_rand_free (rng);
  vk_test_assert_clean ();
}

/* --- the row convolution --- */

static void
test_row_conv (void)
{
  GRand *rng = g_rand_new_with_seed (10);
  int rows = 7, dim = 24, group = 4, kernel = 3, groups = dim / group, stride = 2 * kernel * groups;
  float *x = random_floats (rng, (gsize) rows * dim, -1, 1);
  float *base = random_floats (rng, (gsize) 2 * kernel * dim, -1, 1);
  float *dyn = random_floats (rng, (gsize) rows * stride, -1, 1), *got;
  double *want = g_new (double, (gsize) rows * dim);
  DflVkBuffer *bx = upload (x, sizeof (float) * rows * dim);
  DflVkBuffer *bb = upload (base, sizeof (float) * 2 * kernel * dim);
  DflVkBuffer *bd = upload (dyn, sizeof (float) * rows * stride);
  DflVkBuffer *by = scratch (sizeof (float) * rows * dim);

  /* stage 1: the second half of base and of each row's kernels */
  for (int r = 0; r < rows; r++) {
    for (int i = 0; i < dim; i++) {
      double s = 0.0;
      for (int o = 0; o < MIN (kernel, r + 1); o++)
        s += ((double) base[(kernel + o) * dim + i]
              + dyn[r * stride + kernel * groups + o * groups + i / group]) * x[(r - o) * dim + i];
      want[r * dim + i] = s;
    }
  }
  dfl_vk_row_conv (stream, A (bx), rows, dim, group, kernel, A (bb) + sizeof (float) * kernel * dim,
                   A (bd) + sizeof (float) * kernel * groups, stride, A (by));
  finish ();
  got = download (by, sizeof (float) * rows * dim);
  g_assert_cmpfloat (vk_test_rel (got, want, (gsize) rows * dim), <, 1e-6);
  dfl_vk_buffer_free (bx);
  dfl_vk_buffer_free (bb);
  dfl_vk_buffer_free (bd);
  dfl_vk_buffer_free (by);
  g_free (x);
  g_free (base);
  g_free (dyn);
  g_free (want);
  g_free (got);
  g_rand_free (rng);
  vk_test_assert_clean ();
}

/* --- the block's embedding --- */

static void
test_embed (void)
{
  GRand *rng = g_rand_new_with_seed (11);
  int vocab = 50, dim = 22, rows = 5;
  float *tf = random_floats (rng, (gsize) vocab * dim, -1, 1);

  for (int t = 0; t < 3; t++) {
    guint16 *t16 = g_new (guint16, (gsize) vocab * dim);
    double *want = g_new (double, (gsize) rows * dim);
    DflVkBuffer *bt, *out = scratch (sizeof (float) * rows * dim);
    float *got;
    for (int i = 0; i < vocab * dim; i++)
      t16[i] = t == DFL_DTYPE_F16 ? to_f16 (tf[i]) : to_bf16 (tf[i]);
    for (int r = 0; r < rows; r++)
      for (int i = 0; i < dim; i++) {
        int e = (r == 0 ? 17 : 49) * dim + i;
        want[r * dim + i] = t == DFL_DTYPE_F32 ? tf[e]
                            : t == DFL_DTYPE_F16 ? from_f16 (t16[e]) : from_bf16 (t16[e]);
      }
    bt = t == DFL_DTYPE_F32 ? upload (tf, sizeof (float) * vocab * dim)
                         : upload (t16, 2 * vocab * dim);
    dfl_vk_embed_block (stream, A (bt), t, dim, rows, 17, 49, A (out));
    finish ();
    got = download (out, sizeof (float) * rows * dim);
    g_assert_cmpfloat (vk_test_rel (got, want, (gsize) rows * dim), ==, 0.0);
    dfl_vk_buffer_free (bt);
    dfl_vk_buffer_free (out);
    g_free (t16);
    g_free (want);
    g_free (got);
  }
  g_free (tf);
  g_rand_free (rng);
  vk_test_assert_clean ();
}

/* --- attention --- */

static void
attention_case (int n, int cap, int ring_off, int window, int anchor_rel)
{
  GRand *rng = g_rand_new_with_seed (12 + n + window);
  int rows = 5, heads = 4, kv = 2, hd = 16, rep = heads / kv, kvd = kv * hd;
  float scale = 0.25f;
  float *q = random_floats (rng, (gsize) rows * heads * hd, -1, 1);
  float *kc = random_floats (rng, (gsize) MAX (cap, 1) * kvd, -1, 1);
  float *vc = random_floats (rng, (gsize) MAX (cap, 1) * kvd, -1, 1);
  float *kb = random_floats (rng, (gsize) rows * kvd, -1, 1);
  float *vb = random_floats (rng, (gsize) rows * kvd, -1, 1);
  double *want = g_new0 (double, (gsize) rows * heads * hd);
  double *sc = g_new (double, n + rows);
  DflVkBuffer *bq = upload (q, sizeof (float) * rows * heads * hd);
  DflVkBuffer *bkc = upload (kc, sizeof (float) * MAX (cap, 1) * kvd);
  DflVkBuffer *bvc = upload (vc, sizeof (float) * MAX (cap, 1) * kvd);
  DflVkBuffer *bkb = upload (kb, sizeof (float) * rows * kvd);
  DflVkBuffer *bvb = upload (vb, sizeof (float) * rows * kvd);
  DflVkBuffer *bs = scratch (sizeof (float) * rows * heads * (n + rows));
  DflVkBuffer *bo = scratch (sizeof (float) * rows * heads * hd);

  for (int r = 0; r < rows; r++) {
    int masked = window > 0 ? CLAMP (anchor_rel + r + 1 - window, 0, n) : 0;
    for (int h = 0; h < heads; h++) {
      int g = h / rep;
      const float *qr = q + ((gsize) r * heads + h) * hd;
      double top = -INFINITY, sum = 0.0;
      for (int j = masked; j < n + rows; j++) {
        const float *k = j < n ? kc + (gsize) ((ring_off + j) % cap) * kvd + g * hd
                               : kb + (gsize) (j - n) * kvd + g * hd;
        double s = 0.0;
        for (int i = 0; i < hd; i++)
          s += (double) qr[i] * k[i];
        sc[j] = s * scale;
        top = MAX (top, sc[j]);
      }
      for (int j = masked; j < n + rows; j++)
        sum += (sc[j] = exp (sc[j] - top));
      for (int j = masked; j < n + rows; j++) {
        const float *v = j < n ? vc + (gsize) ((ring_off + j) % cap) * kvd + g * hd
                               : vb + (gsize) (j - n) * kvd + g * hd;
        for (int i = 0; i < hd; i++)
          want[((gsize) r * heads + h) * hd + i] += sc[j] / sum * v[i];
      }
    }
  }
  dfl_vk_attention (stream, A (bq), rows, heads, kv, hd, A (bkc), A (bvc), n, ring_off, cap,
                    A (bkb), A (bvb), anchor_rel, window, scale, A (bs), A (bo));
  assert_result (bo, want, (gsize) rows * heads * hd, "attention n %d cap %d off %d window %d", n,
                 cap, ring_off, window);
  dfl_vk_buffer_free (bq);
  dfl_vk_buffer_free (bkc);
  dfl_vk_buffer_free (bvc);
  dfl_vk_buffer_free (bkb);
  dfl_vk_buffer_free (bvb);
  dfl_vk_buffer_free (bs);
  dfl_vk_buffer_free (bo);
  g_free (q);
  g_free (kc);
  g_free (vc);
  g_free (kb);
  g_free (vb);
  g_free (want);
  g_free (sc);
  g_rand_free (rng);
}

static void
test_attention (void)
{
  attention_case (30, 40, 25, 0, 30);     /* the ring wraps */
  attention_case (30, 40, 25, 12, 30);    /* a window masks the older rows, less for later rows */
  attention_case (30, 30, 0, 40, 30);     /* a window wider than the context */
  attention_case (0, 1, 0, 0, 0);         /* no context: the block rows alone */
  attention_case (150, 200, 120, 0, 150); /* longer than a workgroup's stride */
  vk_test_assert_clean ();
}

/* --- top-k and the re-scoring --- */

static void
test_top_k (void)
{
  g_autoptr (GRand) rng = g_rand_new_with_seed (13);
  int rows = 4, n = 1000, k = 6, ld = 1003;
  g_autofree float *x = g_new (float, (gsize) rows * ld), *vals = NULL;
  g_autofree gint32 *idx = NULL;
  DflVkBuffer *bx, *bv = scratch (sizeof (float) * rows * k), *bi = scratch (4 * rows * k);

  for (int i = 0; i < rows * ld; i++)
    x[i] = (float) g_rand_int_range (rng, -50, 50);    /* many equal values */
  for (int i = 0; i < n; i += 7)
    x[i] = NAN;                                        /* row 0 and others: NaNs skipped */
  x[ld + 500] = INFINITY;
  for (int i = 0; i < n; i++)                          /* row 2: all −inf but two */
    x[2 * ld + i] = -INFINITY;
  x[2 * ld + 10] = 1.0f;
  x[2 * ld + 900] = 1.0f;
  for (int i = 0; i < n; i++)                          /* row 3: all NaN but three */
    x[3 * ld + i] = NAN;
  x[3 * ld + 4] = 2.0f;
  x[3 * ld + 3] = 2.0f;
  x[3 * ld + 999] = 5.0f;
  bx = upload (x, sizeof (float) * rows * ld);
  dfl_vk_top_k (stream, A (bx), rows, n, ld, k, A (bv), A (bi));
  finish ();
  vals = download (bv, sizeof (float) * rows * k);
  idx = download (bi, 4 * rows * k);
  for (int r = 0; r < rows; r++) {
    /* reference: a stable selection by value, largest first, NaNs out */
    gboolean *taken = g_new0 (gboolean, n);
    for (int s = 0; s < k; s++) {
      int best = -1;
      for (int i = 0; i < n; i++) {
        float v = x[r * ld + i];
        if (taken[i] || isnan (v))
          continue;
        if (best < 0 || v > x[r * ld + best])
          best = i;
      }
      g_assert_cmpint (idx[r * k + s], ==, best);
      if (best >= 0) {
        taken[best] = TRUE;
        g_assert_cmpfloat (vals[r * k + s], ==, x[r * ld + best]);
      }
    }
    g_free (taken);
  }
  /* the slots past what row 3 has are empty */
  g_assert_cmpint (idx[3 * k + 3], ==, -1);
  g_assert_cmpint (idx[3 * k + 0], ==, 999);
  g_assert_cmpint (idx[3 * k + 1], ==, 3);
  dfl_vk_buffer_free (bx);
  dfl_vk_buffer_free (bv);
  dfl_vk_buffer_free (bi);
  vk_test_assert_clean ();
}

/* Each row's argmax against a sequential scan (the first of equals, NaNs
 * never winning, 0 where the row starts with NaN): rows of many equal
 * values, NaNs, infinities and zeros of both signs, a row stride past the
 * row, rows longer than a workgroup's stride, and more rows than one
 * dimension of the grid holds. */
static void
test_argmax (void)
{
  g_autoptr (GRand) rng = g_rand_new_with_seed (15);
  const int shapes[][3] = { { 7, 1000, 1003 }, { 70000, 3, 3 } };

  for (guint sh = 0; sh < G_N_ELEMENTS (shapes); sh++) {
    int rows = shapes[sh][0], n = shapes[sh][1], ld = shapes[sh][2];
    g_autofree float *x = g_new (float, (gsize) rows * ld);
    g_autofree gint32 *idx = NULL;
    DflVkBuffer *bx, *bi = scratch (4 * (gsize) rows);

    for (gsize i = 0; i < (gsize) rows * ld; i++) {
      int pick = g_rand_int_range (rng, 0, 16);
      x[i] = pick == 0 ? NAN : pick == 1 ? -INFINITY : pick == 2 ? 0.0f : pick == 3 ? -0.0f
             : (float) g_rand_int_range (rng, -20, 20);
    }
    x[0] = NAN;                                   /* row 0 starts with NaN: 0 */
    for (int i = 0; i < n; i++)                   /* row 1: NaNs and one 1 */
      x[ld + i] = NAN;
    x[ld + n - 1] = 1.0f;
    for (int i = 0; i < n; i++)                   /* row 2: equal values */
      x[2 * ld + i] = 3.0f;
    x[3 * ld + n / 2] = INFINITY;
    bx = upload (x, sizeof (float) * (gsize) rows * ld);
    dfl_vk_argmax (stream, A (bx), rows, n, ld, A (bi));
    finish ();
    idx = download (bi, 4 * (gsize) rows);
    for (int r = 0; r < rows; r++) {
      const float *row = x + (gsize) r * ld;
      int want = 0;
      for (int c = 1; c < n; c++)
        if (row[c] > row[want])
          want = c;
      if (idx[r] != want)
        g_error ("%d × %d, row %d: argmax %d, the scan %d", rows, n, r, idx[r], want);
    }
    g_assert_cmpint (idx[0], ==, 0);
    g_assert_cmpint (idx[2], ==, 0);
    dfl_vk_buffer_free (bx);
    dfl_vk_buffer_free (bi);
  }
  vk_test_assert_clean ();
}

static void
test_rescore (void)
{
  GRand *rng = g_rand_new_with_seed (14);
  int rows = 6, k = 5, rank = 10, vocab = 40;
  float *vals = g_new (float, rows * k), *hp = random_floats (rng, rows * rank, -1, 1);
  gint32 *cand = g_new (gint32, rows * k), *ids;
  guint16 *pred = g_new (guint16, vocab * rank), *succ = g_new (guint16, vocab * rank);
  guint32 prev = 7;
  DflVkBuffer *bv, *bc, *bh, *bp, *bs, *out = scratch (4 * 2 * rows);

  for (int i = 0; i < vocab * rank; i++) {
    pred[i] = to_f16 ((float) g_rand_double_range (rng, -1, 1));
    succ[i] = to_f16 ((float) g_rand_double_range (rng, -1, 1));
  }
  for (int j = 0; j < rows; j++)
    for (int c = 0; c < k; c++) {
      cand[j * k + c] = g_rand_int_range (rng, 0, vocab);
      vals[j * k + c] = 3.0f - c * 0.1f;
    }
  /* row 2: two candidates score the same (same codebook row, same logit):
   * the earlier stays */
  cand[2 * k + 1] = 30;
  cand[2 * k + 2] = 31;
  vals[2 * k + 1] = vals[2 * k + 2] = 100.0f;
  memcpy (succ + 31 * rank, succ + 30 * rank, rank * sizeof (guint16));
  /* row 4 has only two candidates */
  cand[4 * k + 2] = cand[4 * k + 3] = cand[4 * k + 4] = -1;
  bv = upload (vals, 4 * rows * k);
  bc = upload (cand, 4 * rows * k);
  bh = upload (hp, 4 * rows * rank);
  bp = upload (pred, 2 * vocab * rank);
  bs = upload (succ, 2 * vocab * rank);
  dfl_vk_select_rescore (stream, A (bv), A (bc), rows, k, A (bh), rank, A (bp), A (bs), prev,
                         A (out));
  finish ();
  ids = download (out, 4 * 2 * rows);
  for (int j = 0; j < rows; j++) {
    double best = -INFINITY;
    int tok = cand[j * k];
    for (int c = 0; c < k && cand[j * k + c] >= 0; c++) {
      double s = vals[j * k + c];
      for (int i = 0; i < rank; i++)
        s += from_f16 (pred[prev * rank + i]) * hp[j * rank + i]
             * from_f16 (succ[cand[j * k + c] * rank + i]);
      if (s > best) {
        best = s;
        tok = cand[j * k + c];
      }
    }
    g_assert_cmpint (ids[j], ==, tok);
    g_assert_cmpint (ids[rows + j], ==, cand[j * k]);
    prev = (guint32) tok;
  }
  g_assert_cmpint (ids[2], ==, 30);
  /* without a selector: the first candidates */
  dfl_vk_select_rescore (stream, A (bv), A (bc), rows, k, 0, 0, 0, 0, 7, A (out));
  finish ();
  g_free (ids);
  ids = download (out, 4 * 2 * rows);
  for (int j = 0; j < rows; j++)
    g_assert_cmpint (ids[j], ==, cand[j * k]);
  dfl_vk_buffer_free (bv);
  dfl_vk_buffer_free (bc);
  dfl_vk_buffer_free (bh);
  dfl_vk_buffer_free (bp);
  dfl_vk_buffer_free (bs);
  dfl_vk_buffer_free (out);
  g_free (vals);
  g_free (hp);
  g_free (cand);
  g_free (ids);
  g_free (pred);
  g_free (succ);
  g_rand_free (rng);
  vk_test_assert_clean ();
}

/* --- the device's errors --- */

static void
test_errors (void)
{
  GError *error = NULL;
  DflVkBuffer *b = dfl_vk_buffer_new (vk_test_dev, 64, DFL_VK_MEMORY_HOST, &error);
  DflVkBuffer *huge;
  char buf[128];

  g_assert_no_error (error);
  g_assert_nonnull (dfl_vk_buffer_map (b));
  g_assert_false (dfl_vk_upload (vk_test_dev, b, 32, buf, 64, &error));
  g_assert_error (error, DFL_ERROR, DFL_ERROR_INVALID);
  g_assert_nonnull (strstr (error->message, "passes the end of a buffer of 64"));
  g_clear_error (&error);
  huge = dfl_vk_buffer_new (vk_test_dev, (gsize) 1 << 50, DFL_VK_MEMORY_DEVICE, &error);
  g_assert_null (huge);
  g_assert_error (error, DFL_ERROR, DFL_ERROR_LIMIT);
  g_assert_nonnull (strstr (error->message, "1125899906842624 bytes"));
  g_clear_error (&error);
  /* a device that is not there */
  g_assert_null (dfl_vk_device_open (1000, DFL_VK_DEVICE_DEFAULT, &error));
  g_assert_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED);
  g_assert_true (g_str_has_prefix (error->message, "Vulkan is unavailable: device 1000 asked for"));
  g_clear_error (&error);
  dfl_vk_buffer_free (b);
  vk_test_assert_clean ();
}

int
main (int argc, char **argv)
{
  GError *error = NULL;
  int rc;

  g_test_init (&argc, &argv, NULL);
  if (!vk_test_open ())
    return 0;
  stream = dfl_vk_stream_new (vk_test_dev, &error);
  g_assert_no_error (error);
  g_test_add_func ("/vulkan/kernels/matmul", test_matmul);
  g_test_add_func ("/vulkan/kernels/rmsnorm", test_rmsnorm);
  g_test_add_func ("/vulkan/kernels/rope", test_rope);
  g_test_add_func ("/vulkan/kernels/elementwise", test_elementwise);
  g_test_add_func ("/vulkan/kernels/row-conv", test_row_conv);
  g_test_add_func ("/vulkan/kernels/embed", test_embed);
  g_test_add_func ("/vulkan/kernels/attention", test_attention);
  g_test_add_func ("/vulkan/kernels/top-k", test_top_k);
  g_test_add_func ("/vulkan/kernels/argmax", test_argmax);
  g_test_add_func ("/vulkan/kernels/rescore", test_rescore);
  g_test_add_func ("/vulkan/kernels/errors", test_errors);
  rc = g_test_run ();
  dfl_vk_stream_free (stream);
  dfl_vk_device_unref (vk_test_dev);
  return rc;
}
