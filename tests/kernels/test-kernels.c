/* gst-dflash — the CPU kernels against float64 references.
 *
 * Each kernel is recomputed here in double from the same inputs (weights
 * rounded to their stored dtype first) and must agree within a tolerance an
 * F32 accumulation allows; the matmul must also be batch-invariant (a row's
 * outputs bitwise the same alone or among others), give bitwise the same
 * numbers whatever the number of threads, and its paths (plain C, AVX2,
 * AVX-512: each this CPU runs) must agree bitwise.
 */
#include <glib.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "dfl-kernels.h"
#include "test-support.h"

/* weights of `type` and their exact values as doubles */
static void *
make_weights (GRand *r, DflDtype type, int n, double *exact)
{
  void *w = g_malloc (n * (type == DFL_DTYPE_F32 ? 4 : 2));
  for (int i = 0; i < n; i++) {
    float f = dfl_test_frand (r);
    if (type == DFL_DTYPE_F32) {
      ((float *) w)[i] = f;
      exact[i] = f;
    } else {
      guint16 u = type == DFL_DTYPE_BF16 ? dfl_test_to_bf16 (f) : dfl_test_to_f16 (f);
      float back;
      ((guint16 *) w)[i] = u;
      if (type == DFL_DTYPE_BF16)
        dfl_bf16_to_f32_n (&u, &back, 1);
      else
        dfl_f16_to_f32_n (&u, &back, 1);
      exact[i] = back;
    }
  }
  return w;
}

/* y = x · Wᵀ of `rows` rows (x and y with padded strides, so strides other
 * than the row are exercised) against float64; then batch invariance: the
 * rows again in batches of other sizes (1, 2, 3, … at every offset the
 * split reaches) give bitwise the same; then 1 and 2 threads give bitwise
 * the same as the default number; then every other path this CPU runs
 * (plain C, AVX2, AVX-512) gives bitwise the default path's numbers. */
static void
check_matmul (DflDtype type, int rows, int in, int out, int n_out, int acc)
{
  g_autoptr (GRand) r = g_rand_new_with_seed (rows * 1000 + in * 10 + out + type);
  int ldx = in + 3, ldy = n_out + 5;
  g_autofree double *exact = g_new (double, (gsize) out * in);
  g_autofree void *w = make_weights (r, type, out * in, exact);
  g_autofree float *x = g_new (float, (gsize) rows * ldx);
  g_autofree float *y0 = g_new (float, (gsize) rows * ldy);
  g_autofree float *y = g_new (float, (gsize) rows * ldy);
  g_autofree float *yb = g_new (float, (gsize) rows * ldy);
  DflWeights W = { w, type, out, in };
  double worst = 0;

  for (int i = 0; i < rows * ldx; i++)
    x[i] = dfl_test_frand (r);
  for (int i = 0; i < rows * ldy; i++)
    y0[i] = acc ? dfl_test_frand (r) : 0;
  memcpy (y, y0, sizeof (float) * rows * ldy);
  dfl_matmul_w (&W, x, rows, ldx, y, ldy, n_out, acc);
  for (int i = 0; i < rows; i++) {
    for (int o = 0; o < n_out; o++) {
      double ref = acc ? y0[i * ldy + o] : 0, mag = fabs (ref);
      for (int k = 0; k < in; k++) {
        ref += (double) x[i * ldx + k] * exact[(gsize) o * in + k];
        mag += fabs ((double) x[i * ldx + k] * exact[(gsize) o * in + k]);
      }
      worst = MAX (worst, fabs (y[i * ldy + o] - ref) / (mag + 1e-30));
    }
    /* the padding between rows is never written */
    for (int o = n_out; o < ldy; o++)
      g_assert_cmpfloat (y[i * ldy + o], ==, y0[i * ldy + o]);
  }
  /* an F32 sum of `in` products: errors grow like in · 2^-24 of the magnitudes */
  g_assert_cmpfloat (worst, <=, 4.0 * (in + 1) * 6e-8);

  /* every row bitwise the same in batches of 1, 2, 3, … */
  for (int size = 1; size < rows; size++) {
    memcpy (yb, y0, sizeof (float) * rows * ldy);
    for (int r0 = 0; r0 < rows; r0 += size)
      dfl_matmul_w (&W, x + (gsize) r0 * ldx, MIN (size, rows - r0), ldx, yb + (gsize) r0 * ldy,
                    ldy, n_out, acc);
    for (int i = 0; i < rows; i++)
      g_assert_cmpmem (yb + (gsize) i * ldy, sizeof (float) * n_out, y + (gsize) i * ldy,
                       sizeof (float) * n_out);
    if (size >= 4 && rows > 16)
      size += size / 2;   /* long batches: a few sizes are enough */
  }
  /* the same on 1 thread and on 2 (the default may be either, or more):
   * how the outputs are split must not matter */
  for (int t = 1; t <= 2; t++) {
    int was = omp_get_max_threads ();
    memcpy (yb, y0, sizeof (float) * rows * ldy);
    omp_set_num_threads (t);
    dfl_matmul_w (&W, x, rows, ldx, yb, ldy, n_out, acc);
    omp_set_num_threads (was);
    for (int i = 0; i < rows; i++)
      g_assert_cmpmem (yb + (gsize) i * ldy, sizeof (float) * n_out, y + (gsize) i * ldy,
                       sizeof (float) * n_out);
  }
  /* and every path this CPU runs gives bitwise the default path's numbers */
  for (int isa = DFL_KERNELS_GENERIC; isa <= DFL_KERNELS_AVX512; isa++) {
    if (!dfl_kernels_set_isa (isa)) {
      g_assert_cmpint (isa, !=, DFL_KERNELS_GENERIC);   /* plain C runs anywhere */
      continue;
    }
    memcpy (yb, y0, sizeof (float) * rows * ldy);
    dfl_matmul_w (&W, x, rows, ldx, yb, ldy, n_out, acc);
    dfl_kernels_set_isa (DFL_KERNELS_BEST);
    for (int i = 0; i < rows; i++)
      g_assert_cmpmem (yb + (gsize) i * ldy, sizeof (float) * n_out, y + (gsize) i * ldy,
                       sizeof (float) * n_out);
  }
}

static void
test_matmul (void)
{
  static const int shapes[][4] = {
    /* rows, in, out, n_out */
    { 1, 64, 130, 130 }, { 3, 67, 17, 17 }, { 4, 8, 9, 9 }, { 5, 200, 64, 40 },
    { 16, 96, 129, 129 }, { 9, 1, 3, 3 }, { 33, 130, 70, 70 },
  };
  for (int t = 0; t < 3; t++)
    for (guint s = 0; s < G_N_ELEMENTS (shapes); s++)
      for (int acc = 0; acc < 2; acc++)
        check_matmul (t, shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], acc);
}

/* The edges of the register tiles and blocks: rows 1 … 17 (AVX2: the
 * 4-row tiles and their 1-, 2- and 3-row remainders, the one-row path
 * below 4; AVX-512: one tile of up to 8 rows, two of up to 8 each, a block
 * of 16 rows and one more), outputs that are no multiple of the tiles' 3 or
 * 6 outputs, of 8 (the one-row path) or of 2 (AVX-512 keeps outputs in
 * pairs), inputs that are no multiple of 8 (the tail) or longer than a
 * chunk (AVX2: 512 inputs, AVX-512: 384; lanes kept between chunks, a short
 * last chunk). */
static void
test_matmul_edges (void)
{
  static const int sizes[][2] = {
    /* in, out */
    { 5, 9 }, { 8, 3 }, { 67, 17 }, { 130, 49 }, { 390, 13 }, { 520, 7 }, { 1100, 130 },
  };
  for (int t = 0; t < 3; t++)
    for (int rows = 1; rows <= 17; rows++)
      for (guint s = 0; s < G_N_ELEMENTS (sizes); s++)
        check_matmul (t, rows, sizes[s][0], sizes[s][1], sizes[s][1], rows % 2);
}

/* Several blocks of rows (AVX2: 32 a block, AVX-512: 16), and enough
 * outputs for the threads' blocks of 48 (fewer outputs get smaller
 * blocks). */
static void
test_matmul_blocks (void)
{
  for (int t = 0; t < 3; t++) {
    check_matmul (t, 70, 600, 50, 50, 0);
    check_matmul (t, 37, 40, 101, 100, 1);
    check_matmul (t, 6, 70, 800, 797, 0);
  }
}

/* Products of one x in one call (dfl_matmul_w_group): each output bitwise
 * what dfl_matmul_w gives for its product alone, on every path this CPU
 * runs and on 1 and 2 threads; 1 to 3 rows share their blocks out, more go
 * a product at a time. */
static void
test_matmul_group (void)
{
  const int in = 200, outs[3] = { 130, 64, 97 }, n_out[3] = { 130, 64, 90 };

  for (int t = 0; t < 3; t++)
    for (int rows = 1; rows <= 5; rows++) {
      g_autoptr (GRand) r = g_rand_new_with_seed (900 + t * 10 + rows);
      int ldx = in + 3, ldy[3];
      g_autofree float *x = g_new (float, (gsize) rows * ldx);
      void *w[3];
      double *exact[3];
      float *alone[3], *y[3];
      DflWeights W[3];

      for (gsize i = 0; i < (gsize) rows * ldx; i++)
        x[i] = dfl_test_frand (r);
      for (int i = 0; i < 3; i++) {
        exact[i] = g_new (double, (gsize) outs[i] * in);
        w[i] = make_weights (r, t, outs[i] * in, exact[i]);
        W[i] = (DflWeights) { w[i], t, outs[i], in };
        ldy[i] = n_out[i] + 2;
        alone[i] = g_new0 (float, (gsize) rows * ldy[i]);
        y[i] = g_new0 (float, (gsize) rows * ldy[i]);
        dfl_matmul_w (&W[i], x, rows, ldx, alone[i], ldy[i], n_out[i], rows % 2);
      }
      for (int isa = DFL_KERNELS_GENERIC; isa <= DFL_KERNELS_AVX512; isa++) {
        if (!dfl_kernels_set_isa (isa))
          continue;
        for (int threads = 1; threads <= 2; threads++) {
          int was = omp_get_max_threads ();
          omp_set_num_threads (threads);
          for (int i = 0; i < 3; i++)
            memset (y[i], 0, sizeof (float) * rows * ldy[i]);
          dfl_matmul_w_group (3, W, x, rows, ldx, y, ldy, n_out, rows % 2);
          omp_set_num_threads (was);
          for (int i = 0; i < 3; i++)
            g_assert_cmpmem (y[i], sizeof (float) * rows * ldy[i], alone[i],
                             sizeof (float) * rows * ldy[i]);
        }
        dfl_kernels_set_isa (DFL_KERNELS_BEST);
      }
      for (int i = 0; i < 3; i++) {
        g_free (exact[i]);
        g_free (w[i]);
        g_free (alone[i]);
        g_free (y[i]);
      }
    }
}

static void
test_rmsnorm (void)
{
  g_autoptr (GRand) r = g_rand_new_with_seed (3);
  int rows = 3, dim = 37;
  float x[3 * 37], w[37], y[3 * 37];

  for (int i = 0; i < rows * dim; i++)
    x[i] = dfl_test_frand (r) * 5;
  for (int i = 0; i < dim; i++)
    w[i] = 1 + dfl_test_frand (r);
  dfl_rmsnorm_to (y, x, rows, dim, w, 1e-6f);
  for (int i = 0; i < rows; i++) {
    double ss = 0;
    for (int k = 0; k < dim; k++)
      ss += (double) x[i * dim + k] * x[i * dim + k];
    for (int k = 0; k < dim; k++) {
      double ref = x[i * dim + k] / sqrt (ss / dim + 1e-6) * w[k];
      g_assert_cmpfloat (fabs (y[i * dim + k] - ref), <=, 1e-5 * (fabs (ref) + 1e-3));
    }
  }
}

static void
test_rope (void)
{
  g_autoptr (GRand) r = g_rand_new_with_seed (4);
  int rows = 3, heads = 2, hd = 8, pos0 = 1000;
  float x[3 * 2 * 8], y[3 * 2 * 8], inv[4];

  for (int i = 0; i < rows * heads * hd; i++)
    x[i] = y[i] = dfl_test_frand (r);
  dfl_rope_inv_freq (inv, hd, 10000.0);
  dfl_rope (y, rows, heads, hd, inv, pos0);
  for (int rr = 0; rr < rows; rr++)
    for (int h = 0; h < heads; h++)
      for (int i = 0; i < hd / 2; i++) {
        const float *v = x + (rr * heads + h) * hd;
        double a = (pos0 + rr) * pow (10000.0, -2.0 * i / hd);
        double lo = v[i] * cos (a) - v[i + hd / 2] * sin (a);
        double hi = v[i + hd / 2] * cos (a) + v[i] * sin (a);
        /* the angle is formed in f32 as the checkpoints' code does: 1e-4
         * covers its rounding at position 1000 */
        g_assert_cmpfloat (fabs (y[(rr * heads + h) * hd + i] - lo), <=, 1e-3);
        g_assert_cmpfloat (fabs (y[(rr * heads + h) * hd + i + hd / 2] - hi), <=, 1e-3);
      }
}

/* `out` within 1e-5 of causal attention in float64: row r of q (heads of
 * hd) over the keys and values [0, pos0 + r] (kv heads, packed). */
static void
assert_causal_reference (const float *q, int rows, int heads, int kv, int hd, const float *k,
                         const float *v, int pos0, float scale, const float *out)
{
  g_autofree double *s = g_new (double, pos0 + rows);

  for (int rr = 0; rr < rows; rr++)
    for (int h = 0; h < heads; h++) {
      int g = h / (heads / kv), seen = pos0 + rr + 1;
      double top = -INFINITY, sum = 0;
      for (int p = 0; p < seen; p++) {
        s[p] = 0;
        for (int d = 0; d < hd; d++)
          s[p] += (double) q[((gsize) rr * heads + h) * hd + d] * k[((gsize) p * kv + g) * hd + d];
        s[p] *= scale;
        top = MAX (top, s[p]);
      }
      for (int p = 0; p < seen; p++)
        sum += (s[p] = exp (s[p] - top));
      for (int d = 0; d < hd; d++) {
        double ref = 0;
        for (int p = 0; p < seen; p++)
          ref += s[p] / sum * v[((gsize) p * kv + g) * hd + d];
        g_assert_cmpfloat (fabs (out[((gsize) rr * heads + h) * hd + d] - ref), <=, 1e-5);
      }
    }
}

static void
test_attention (void)
{
  g_autoptr (GRand) r = g_rand_new_with_seed (5);
  int rows = 3, heads = 4, kv = 2, hd = 16, pos0 = 5, n = pos0 + rows;
  g_autofree float *q = g_new (float, rows * heads * hd), *k = g_new (float, n * kv * hd),
      *v = g_new (float, n * kv * hd), *out = g_new (float, rows * heads * hd);
  float scale = 0.25f;

  for (int i = 0; i < rows * heads * hd; i++)
    q[i] = dfl_test_frand (r) * 2;
  for (int i = 0; i < n * kv * hd; i++) {
    k[i] = dfl_test_frand (r) * 2;
    v[i] = dfl_test_frand (r);
  }
  dfl_attention_causal (q, rows, heads, kv, hd, k, v, pos0, scale, out);
  assert_causal_reference (q, rows, heads, kv, hd, k, v, pos0, scale, out);
}

/* One causal call over the cache k, v (F32), or kb, vb (BF16) where given. */
static void
causal (const float *q, int rows, int heads, int kv, int hd, const float *k, const float *v,
        const guint16 *kb, const guint16 *vb, int pos0, float scale, float *out)
{
  if (kb)
    dfl_attention_causal_bf16 (q, rows, heads, kv, hd, kb, vb, pos0, scale, out);
  else
    dfl_attention_causal (q, rows, heads, kv, hd, k, v, pos0, scale, out);
}

/* The attention of a row is bitwise the same whatever rows come with it,
 * on any number of threads and on every path this CPU runs (the vector
 * paths take 8 or 16 keys at once, with tails of fewer): speculative and
 * plain decoding must see the same numbers. Head sizes with and without a
 * whole number of 8s, and of 64s; short and long contexts (a lone row of
 * a long one takes its groups in spans). Over a BF16 cache (data TRUE) every call
 * is also bitwise the plain F32 code over the same values widened: the
 * arithmetic is the same, only the loads differ. */
static void
test_attention_invariant (gconstpointer data)
{
  static const int dims[] = { 64, 128, 20, 200 };
  gboolean bf16 = GPOINTER_TO_INT (data);
  g_autoptr (GRand) r = g_rand_new_with_seed (bf16 ? 13 : 11);

  /* each dims once at a short context, and at one long enough that a
   * lone row's groups go to the threads in spans */
  for (guint di = 0; di < 2 * G_N_ELEMENTS (dims); di++) {
    int hd = dims[di % G_N_ELEMENTS (dims)], heads = 8, kv = 4, rows = 16;
    int pos0 = di < G_N_ELEMENTS (dims) ? 37 : 613, n = pos0 + rows;
    gsize qn = (gsize) rows * heads * hd, kn = (gsize) n * kv * hd;
    g_autofree float *q = g_new (float, qn), *k = g_new (float, kn), *v = g_new (float, kn),
        *out = g_new (float, qn), *one = g_new (float, qn), *alt = g_new (float, qn);
    g_autofree guint16 *kb = bf16 ? g_new (guint16, kn) : NULL;
    g_autofree guint16 *vb = bf16 ? g_new (guint16, kn) : NULL;
    float scale = 1.0f / sqrtf ((float) hd);

    for (gsize i = 0; i < qn; i++)
      q[i] = dfl_test_frand (r) * 2;
    for (gsize i = 0; i < kn; i++) {
      k[i] = dfl_test_frand (r) * 2;
      v[i] = dfl_test_frand (r);
    }
    if (bf16) {
      dfl_f32_to_bf16_n (k, kb, kn);
      dfl_f32_to_bf16_n (v, vb, kn);
      dfl_bf16_to_f32_n (kb, k, kn);
      dfl_bf16_to_f32_n (vb, v, kn);
    }
    dfl_kernels_set_isa (DFL_KERNELS_GENERIC);
    dfl_attention_causal (q, rows, heads, kv, hd, k, v, pos0, scale, out);
    dfl_kernels_set_isa (DFL_KERNELS_BEST);
    for (int isa = DFL_KERNELS_GENERIC; isa <= DFL_KERNELS_AVX512; isa++) {
      if (!dfl_kernels_set_isa (isa))
        continue;
      for (int t = 1; t <= 2; t++) {
        int was = omp_get_max_threads ();
        omp_set_num_threads (t);
        causal (q, rows, heads, kv, hd, k, v, kb, vb, pos0, scale, alt);
        /* one row at a time, as plain decoding runs them */
        for (int rr = 0; rr < rows; rr++)
          causal (q + (gsize) rr * heads * hd, 1, heads, kv, hd, k, v, kb, vb, pos0 + rr, scale,
                  one + (gsize) rr * heads * hd);
        omp_set_num_threads (was);
        g_assert_cmpmem (alt, sizeof (float) * qn, out, sizeof (float) * qn);
        g_assert_cmpmem (one, sizeof (float) * qn, out, sizeof (float) * qn);
      }
      dfl_kernels_set_isa (DFL_KERNELS_BEST);
    }
    /* and near the float64 attention */
    assert_causal_reference (q, rows, heads, kv, hd, k, v, pos0, scale, out);
  }
}

/* SiLU's own exp (ops.c): within 1e-6 of float64 over the whole range
 * (past the bound where it holds e^x at e^88, within 1e-30 absolute), the
 * same bits on every path, and a tail shorter than a vector the same as
 * the same values inside one. */
static void
test_silu (void)
{
  enum { N = 2003 };
  float *g = g_new (float, N), *u = g_new (float, N), *y0 = g_new (float, N);
  float *y = g_new (float, N);
  const float special[] = { 0.0f, -0.0f, 1e-40f, -1e-40f, 87.0f, -87.0f, 88.0f, -88.0f,
                            88.5f, -88.5f, 89.0f, -89.0f, 100.0f, -100.0f, 1e30f, -1e30f };
  guint32 seed = 7;

  for (int i = 0; i < N; i++) {
    seed = seed * 1664525u + 1013904223u;
    /* −100 … 100, most of them where the activations lie (|g| < 8) */
    g[i] = i % 4 ? (float) ((seed >> 8) / 16777216.0 * 16 - 8)
                 : (float) ((seed >> 8) / 16777216.0 * 200 - 100);
    u[i] = (float) ((i % 7) - 3) + 0.25f;
  }
  memcpy (g + 100, special, sizeof special);
  memcpy (y0, g, sizeof (float) * N);
  dfl_kernels_set_isa (DFL_KERNELS_GENERIC);
  dfl_silu_mul (y0, u, N);
  dfl_kernels_set_isa (DFL_KERNELS_BEST);
  for (int i = 0; i < N; i++) {
    double x = g[i], ref = x / (1.0 + exp (-x)) * u[i];
    if (!(fabs (y0[i] - ref) <= 1e-6 * fabs (ref) + 1e-30))
      g_error ("silu_mul (%.9g) · %g = %.9g, float64 %.9g", g[i], u[i], y0[i], ref);
  }
  for (int isa = DFL_KERNELS_GENERIC; isa <= DFL_KERNELS_AVX512; isa++) {
    if (!dfl_kernels_set_isa (isa))
      continue;
    for (int n0 = 0; n0 < 9; n0++) {   /* every alignment of the vectors' tails */
      memcpy (y, g, sizeof (float) * N);
      dfl_silu_mul (y + n0, u + n0, N - n0);
      g_assert_cmpmem (y + n0, sizeof (float) * (N - n0), y0 + n0, sizeof (float) * (N - n0));
    }
  }
  dfl_kernels_set_isa (DFL_KERNELS_BEST);
  g_free (g);
  g_free (u);
  g_free (y0);
  g_free (y);
}

/* A row's softmax at one index (the selector's confidence): within 2e-5
 * of float64 on rows of 1 to 8195 logits, the same bits on every path; a
 * NaN in the row gives NaN. */
static void
test_softmax_at (void)
{
  static const int lengths[] = { 1, 7, 8, 9, 100, 8192, 8195 };
  g_autoptr (GRand) r = g_rand_new_with_seed (5);

  for (guint li = 0; li < G_N_ELEMENTS (lengths); li++) {
    int n = lengths[li];
    g_autofree float *x = g_new (float, n);
    for (int i = 0; i < n; i++)
      x[i] = (float) g_rand_double_range (r, -12, 12) + (i % 97 == 3 ? 20.0f : 0.0f);
    for (int k = 0; k < 5; k++) {
      int at = (int) ((gint64) n * k / 5);
      double top = x[0], z = 0;
      float p0;
      for (int i = 1; i < n; i++)
        top = MAX (top, x[i]);
      for (int i = 0; i < n; i++)
        z += exp (x[i] - top);
      dfl_kernels_set_isa (DFL_KERNELS_GENERIC);
      p0 = dfl_softmax_at (x, n, at);
      dfl_kernels_set_isa (DFL_KERNELS_BEST);
      if (!(fabs (p0 - exp (x[at] - top) / z) <= 2e-5 * exp (x[at] - top) / z))
        g_error ("softmax_at (%d of %d) = %.9g, float64 %.9g", at, n, p0, exp (x[at] - top) / z);
      for (int isa = DFL_KERNELS_GENERIC; isa <= DFL_KERNELS_AVX512; isa++) {
        float p;
        if (!dfl_kernels_set_isa (isa))
          continue;
        p = dfl_softmax_at (x, n, at);
        g_assert_cmpmem (&p, sizeof p, &p0, sizeof p0);
      }
      dfl_kernels_set_isa (DFL_KERNELS_BEST);
    }
    if (n > 1) {
      x[n / 2] = NAN;
      g_assert_true (isnan (dfl_softmax_at (x, n, 0)));
    }
  }
}

/* The top k of a row (the selector's candidates) against a stable sort:
 * values from the largest, equals in the order they come, NaNs left out,
 * the slots past what the row holds NaN and −1; rows with ties, NaNs,
 * infinities, rising (every value displaces one) and flat; every path. */
typedef struct {
  float v;
  int i;
} Ranked;

static int
ranked_cmp (const void *a, const void *b)
{
  const Ranked *x = a, *y = b;

  if (x->v != y->v)
    return x->v > y->v ? -1 : 1;
  return x->i - y->i;
}

static void
test_top_k (void)
{
  static const int lengths[] = { 1, 5, 8, 9, 17, 100, 8192, 8195 }, ks[] = { 1, 2, 8, 16 };
  g_autoptr (GRand) r = g_rand_new_with_seed (11);

  for (guint li = 0; li < G_N_ELEMENTS (lengths); li++)
    for (int kind = 0; kind < 4; kind++) {
      int n = lengths[li];
      g_autofree float *x = g_new (float, n);
      g_autofree Ranked *ref = g_new (Ranked, n);
      for (int i = 0; i < n; i++) {
        switch (kind) {
          case 0:   /* few levels: many ties */
            x[i] = (float) g_rand_int_range (r, -4, 5);
            break;
          case 1:   /* NaNs, infinities and signed zeros among values */
            x[i] = i % 11 == 4 ? NAN : i % 37 == 5 ? INFINITY : i % 41 == 6 ? -INFINITY
                : i % 13 == 7 ? -0.0f : (float) g_rand_double_range (r, -10, 10);
            break;
          case 2:   /* rising */
            x[i] = (float) i * 0.25f;
            break;
          default:  /* flat */
            x[i] = 1.5f;
        }
      }
      for (guint ki = 0; ki < G_N_ELEMENTS (ks); ki++) {
        int k = ks[ki], m = 0;
        g_autofree float *vals = g_new (float, k);
        g_autofree gint32 *idx = g_new (gint32, k);
        for (int i = 0; i < n; i++)
          if (!isnan (x[i]))
            ref[m++] = (Ranked) { x[i], i };
        qsort (ref, m, sizeof *ref, ranked_cmp);
        for (int isa = DFL_KERNELS_GENERIC; isa <= DFL_KERNELS_AVX512; isa++) {
          int have;
          if (!dfl_kernels_set_isa (isa))
            continue;
          have = dfl_top_k_row (x, n, k, vals, idx);
          g_assert_cmpint (have, ==, MIN (k, m));
          for (int j = 0; j < k; j++) {
            if (j < have) {
              g_assert_cmpint (idx[j], ==, ref[j].i);
              g_assert_cmpmem (&vals[j], sizeof (float), &x[ref[j].i], sizeof (float));
            } else {
              g_assert_cmpint (idx[j], ==, -1);
              g_assert_true (isnan (vals[j]));
            }
          }
        }
        dfl_kernels_set_isa (DFL_KERNELS_BEST);
      }
    }
}

/* The grouped causal row convolution: within 1e-6 of float64 and the
 * same bits on every path, with groups that are no multiple of eight and
 * rows that are not a multiple of eight long, fewer rows than taps too. */
static void
test_row_conv (void)
{
  static const int shapes[][4] = {   /* rows, dim, group, kernel */
    { 16, 384, 24, 4 }, { 3, 40, 5, 4 }, { 7, 13, 13, 2 }, { 1, 64, 8, 3 },
  };
  g_autoptr (GRand) r = g_rand_new_with_seed (17);

  for (guint si = 0; si < G_N_ELEMENTS (shapes); si++) {
    int rows = shapes[si][0], dim = shapes[si][1], group = shapes[si][2];
    int kernel = shapes[si][3], groups = dim / group, stride = kernel * groups + 3;
    g_autofree float *x = g_new (float, rows * dim), *base = g_new (float, kernel * dim);
    g_autofree float *dyn = g_new (float, rows * stride), *y0 = g_new (float, rows * dim);
    g_autofree float *y = g_new (float, rows * dim);
    for (int i = 0; i < rows * dim; i++)
      x[i] = (float) g_rand_double_range (r, -2, 2);
    for (int i = 0; i < kernel * dim; i++)
      base[i] = (float) g_rand_double_range (r, -1, 1);
    for (int i = 0; i < rows * stride; i++)
      dyn[i] = (float) g_rand_double_range (r, -1, 1);
    dfl_kernels_set_isa (DFL_KERNELS_GENERIC);
    dfl_row_conv (x, rows, dim, group, kernel, base, dyn, stride, y0);
    dfl_kernels_set_isa (DFL_KERNELS_BEST);
    for (int row = 0; row < rows; row++)
      for (int i = 0; i < dim; i++) {
        double want = 0, size = 0;
        for (int o = 0; o < kernel && o <= row; o++) {
          double t = ((double) base[o * dim + i] + dyn[row * stride + o * groups + i / group])
              * x[(row - o) * dim + i];
          want += t;
          size += fabs (t);
        }
        if (!(fabs (y0[row * dim + i] - want) <= 1e-6 * size + 1e-30))
          g_error ("row_conv %d×%d group %d: [%d][%d] = %.9g, float64 %.9g", rows, dim, group,
                   row, i, y0[row * dim + i], want);
      }
    for (int isa = DFL_KERNELS_GENERIC; isa <= DFL_KERNELS_AVX512; isa++) {
      if (!dfl_kernels_set_isa (isa))
        continue;
      dfl_row_conv (x, rows, dim, group, kernel, base, dyn, stride, y);
      g_assert_cmpmem (y, sizeof (float) * rows * dim, y0, sizeof (float) * rows * dim);
    }
    dfl_kernels_set_isa (DFL_KERNELS_BEST);
  }
}

/* The argmax of a row (greedy tokens): the first of the largest, on
 * rows with ties, a late maximum, infinities; a NaN first is the answer
 * and a NaN elsewhere is passed over, as the plain loop has it; every
 * path the same. */
static void
test_argmax (void)
{
  static const int lengths[] = { 1, 2, 8, 9, 16, 17, 100, 8192, 8195 };
  g_autoptr (GRand) r = g_rand_new_with_seed (29);

  for (guint li = 0; li < G_N_ELEMENTS (lengths); li++)
    for (int kind = 0; kind < 5; kind++) {
      int n = lengths[li], want = 0;
      g_autofree float *x = g_new (float, n);
      for (int i = 0; i < n; i++)
        x[i] = kind == 0 ? (float) g_rand_int_range (r, -3, 4)          /* ties */
             : kind == 1 ? (float) i * 0.5f                              /* rising */
             : kind == 2 ? (i == n / 2 ? INFINITY : -INFINITY)
             : (float) g_rand_double_range (r, -5, 5);
      if (kind == 3)
        x[n / 3] = NAN;      /* passed over */
      if (kind == 4)
        x[0] = NAN;          /* the answer */
      if (!isnan (x[0]))
        for (int i = 1; i < n; i++)
          if (!isnan (x[i]) && x[i] > x[want])
            want = i;
      for (int isa = DFL_KERNELS_GENERIC; isa <= DFL_KERNELS_AVX512; isa++) {
        if (!dfl_kernels_set_isa (isa))
          continue;
        g_assert_cmpint (dfl_argmax (x, n), ==, want);
      }
      dfl_kernels_set_isa (DFL_KERNELS_BEST);
    }
}

static void
test_small_ops (void)
{
  float g[5] = { -3, -0.5f, 0, 0.5f, 3 }, u[5] = { 1, 2, 3, 4, 5 };
  float s[4] = { 1, -INFINITY, 3, 2 };
  guint16 h[3] = { 0x3c00, 0x0001, 0xfc00 };   /* 1, the smallest subnormal, −inf */
  float f[3];

  dfl_silu_mul (g, u, 5);
  for (int i = 0; i < 5; i++) {
    double x = (double[]) { -3, -0.5, 0, 0.5, 3 }[i];
    g_assert_cmpfloat (fabs (g[i] - x / (1 + exp (-x)) * u[i]), <=, 1e-6 * u[i]);
  }
  dfl_softmax (s, 4);
  g_assert_cmpfloat (s[1], ==, 0.0f);
  g_assert_cmpfloat (fabs (s[0] + s[2] + s[3] - 1), <=, 1e-6);
  g_assert_cmpfloat (fabs (s[2] - exp (1.0) / (exp (-1.0) + 1 + exp (1.0))), <=, 1e-6);
  g_assert_cmpint (dfl_argmax ((float[]) { 1, 5, 5, 2 }, 4), ==, 1);
  dfl_f16_to_f32_n (h, f, 3);
  g_assert_cmpfloat (f[0], ==, 1.0f);
  g_assert_cmpfloat (f[1], ==, ldexpf (1.0f, -24));
  g_assert_true (isinf (f[2]) && f[2] < 0);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/kernels/matmul", test_matmul);
  g_test_add_func ("/kernels/matmul-edges", test_matmul_edges);
  g_test_add_func ("/kernels/matmul-blocks", test_matmul_blocks);
  g_test_add_func ("/kernels/matmul-group", test_matmul_group);
  g_test_add_func ("/kernels/rmsnorm", test_rmsnorm);
  g_test_add_func ("/kernels/rope", test_rope);
  g_test_add_func ("/kernels/attention", test_attention);
  g_test_add_data_func ("/kernels/attention-invariant", GINT_TO_POINTER (FALSE),
                        test_attention_invariant);
  g_test_add_data_func ("/kernels/attention-bf16", GINT_TO_POINTER (TRUE),
                        test_attention_invariant);
  g_test_add_func ("/kernels/small-ops", test_small_ops);
  g_test_add_func ("/kernels/silu", test_silu);
  g_test_add_func ("/kernels/softmax-at", test_softmax_at);
  g_test_add_func ("/kernels/top-k", test_top_k);
  g_test_add_func ("/kernels/row-conv", test_row_conv);
  g_test_add_func ("/kernels/argmax", test_argmax);
  return g_test_run ();
}
