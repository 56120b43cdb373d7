/* gst-dflash — quantized weights: the blocks against float64 and against
 * the gguf package, the products against float64, their paths and their
 * batch invariance.
 *
 *  - dequantization against a float64 reading of the same bytes written
 *    here from the layouts (quant-layout.h), and bitwise against what the
 *    gguf package (llama.cpp's reader) reads from blocks it made or
 *    random ones (tests/fixtures/quant); our Q8_0 and Q4_0 quantizers
 *    give gguf's bytes;
 *  - quantize → dequantize error: Q8_0 and Q4_0 within their rounding
 *    bounds element by element; every type within a ceiling on the RMS
 *    error relative to the RMS value, on Gaussian rows of varied scale;
 *  - y = x · Wᵀ against float64 on the dequantized weights, within the
 *    bound the activations' quantization allows: for each output,
 *    Σ_groups (max|x| / 127) / 2 · Σ |w| over the group, plus 1e-5 of
 *    Σ |w x| for the F32 steps — the same bound for every type, since the
 *    weights enter exactly;
 *  - the plain-C, AVX2 and AVX-512 VNNI paths bitwise equal (VNNI skipped,
 *    saying so, where the CPU lacks it), with any number of threads; a row
 *    alone bitwise equal to the same row among 16 (and among 5);
 *  - odd shapes (rows not a multiple of 16, outputs not of the thread
 *    blocks, Q8_0 / Q4_0 rows not a multiple of 256) and the errors of
 *    rows that are not whole blocks, through dfl_op_matmul;
 *  - a NaN or an Inf among a row's inputs makes that row's outputs NaN;
 *    a group too small for 127 / its max|x| quantizes to zeros on every
 *    path alike;
 *  - the CPU back end's matmul and embed of the block types, and tensors
 *    of them (strides, bytes, packing).
 */
#include <glib.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "dfl-backend.h"
#include "dfl-kernels.h"
#include "quant-layout.h"
#include "test-support.h"

static const DflDtype qtypes[] = { DFL_DTYPE_Q8_0, DFL_DTYPE_Q4_0, DFL_DTYPE_Q4_K,
                                   DFL_DTYPE_Q6_K };

static double
gauss (GRand *r)
{
  double u = g_rand_double_range (r, 1e-12, 1.0), v = g_rand_double (r);
  return sqrt (-2.0 * log (u)) * cos (2.0 * G_PI * v);
}

/* rows of Gaussian values, each row its own scale (and within a row every
 * 64 values a scale of their own), as a model's weights vary */
static float *
make_values (GRand *r, int rows, int cols)
{
  float *x = g_new (float, (gsize) rows * cols);

  for (int i = 0; i < rows; i++) {
    double row_scale = g_rand_double_range (r, 0.01, 2.0), s = 1.0;
    for (int k = 0; k < cols; k++) {
      if (k % 64 == 0)
        s = row_scale * g_rand_double_range (r, 0.25, 1.0);
      x[(gsize) i * cols + k] = (float) (s * gauss (r));
    }
  }
  return x;
}

/* ---- float64 reading of the blocks, straight from the layout ---------- */

static double
f16d (const guint8 *p)
{
  return (double) dfl_test_from_f16 ((guint16) (p[0] | (p[1] << 8)));
}

/* Element e of block `b` (its bytes) in float64, and the magnitude of
 * the terms it is made of (for the F32 rounding bound). */
static double
ref_element (DflDtype type, const guint8 *b, int e, double *mag)
{
  switch (type) {
    case DFL_DTYPE_Q8_0: {
      double v = f16d (b) * (gint8) b[2 + e];
      *mag = fabs (v);
      return v;
    }
    case DFL_DTYPE_Q4_0: {
      int q = e < 16 ? (b[2 + e] & 15) : (b[2 + e - 16] >> 4);
      double v = f16d (b) * (q - 8);
      *mag = fabs (v);
      return v;
    }
    case DFL_DTYPE_Q4_K: {
      const guint8 *sc = b + 4, *qs = b + 16;
      int j = e / 32, s, m, q;
      if (j < 4) {
        s = sc[j] & 63;
        m = sc[j + 4] & 63;
      } else {
        s = (sc[j + 4] & 15) | ((sc[j - 4] >> 6) << 4);
        m = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
      }
      /* 64 elements per 32 bytes: the first 32 low nibbles, then high */
      q = (qs[32 * (e / 64) + e % 32] >> (e % 64 >= 32 ? 4 : 0)) & 15;
      *mag = fabs (f16d (b) * s * q) + fabs (f16d (b + 2) * m);
      return f16d (b) * s * q - f16d (b + 2) * m;
    }
    case DFL_DTYPE_Q6_K:
    default: {
      const guint8 *ql = b, *qh = b + 128;
      const gint8 *scales = (const gint8 *) (b + 192);
      int h = e / 128, w = e % 128, k = w / 32, l = w % 32;
      int lo = (ql[64 * h + (k % 2) * 32 + l] >> (k >= 2 ? 4 : 0)) & 15;
      int hi = (qh[32 * h + l] >> (2 * k)) & 3;
      double v = f16d (b + 208) * scales[e / 16] * ((lo | hi << 4) - 32);
      *mag = fabs (v);
      return v;
    }
  }
}

static void
ref_dequant (DflDtype type, const void *src, int n, double *out, double *mag)
{
  int be = (int) dfl_dtype_block_elems (type), bb = (int) dfl_dtype_block_bytes (type);

  for (int i = 0; i < n; i++)
    out[i] = ref_element (type, (const guint8 *) src + (i / be) * bb, i % be, &mag[i]);
}

/* ---- blocks ------------------------------------------------------------ */

/* Random bytes as blocks (their scales made finite) read by
 * dfl_dequantize_row and by the float64 reading above agree within the
 * F32 rounding of the few steps the former takes. */
static void
test_dequantize_random (void)
{
  g_autoptr (GRand) r = g_rand_new_with_seed (18);

  for (guint t = 0; t < G_N_ELEMENTS (qtypes); t++) {
    DflDtype type = qtypes[t];
    int n = 1024, bb = (int) dfl_dtype_block_bytes (type), be = (int) dfl_dtype_block_elems (type);
    g_autofree guint8 *b = g_malloc (dfl_dtype_row_bytes (type, n));
    g_autofree float *y = g_new (float, n);
    g_autofree double *ref = g_new (double, n), *mag = g_new (double, n);

    for (gsize i = 0; i < dfl_dtype_row_bytes (type, n); i++)
      b[i] = (guint8) g_rand_int (r);
    for (int k = 0; k < n / be; k++) {
      guint8 *blk = b + (gsize) k * bb;
      guint16 d = dfl_test_to_f16 ((float) g_rand_double_range (r, -0.05, 0.05));
      guint16 dmin = dfl_test_to_f16 ((float) g_rand_double_range (r, 0.0, 0.05));
      guint8 *dp = type == DFL_DTYPE_Q6_K ? blk + 208 : blk;
      dp[0] = d & 0xff;
      dp[1] = d >> 8;
      if (type == DFL_DTYPE_Q4_K) {
        blk[2] = dmin & 0xff;
        blk[3] = dmin >> 8;
      }
    }
    g_assert_true (dfl_dequantize_row (type, b, y, n));
    ref_dequant (type, b, n, ref, mag);
    for (int i = 0; i < n; i++)
      g_assert_cmpfloat (fabs (y[i] - ref[i]), <=, 3 * 0x1p-24 * mag[i]);
  }
}

/* Quantize then dequantize Gaussian rows: Q8_0 within half a step of its
 * F16 scale (plus the scale's own rounding), Q4_0 within a step (its
 * largest value maps to −8 exactly, the other end can clamp at +7), and
 * every type within a ceiling on the RMS error. */
static void
test_roundtrip (void)
{
  /* RMS error / RMS value; measured 0.0053, 0.085, 0.072 and 0.019 (4-bit
   * steps over 32 Gaussian values: about 0.08 of their RMS by themselves) */
  static const double rms_ceiling[] = { 0.007, 0.11, 0.09, 0.03 };
  int rows = 32, cols = 4096;
  g_autoptr (GRand) r = g_rand_new_with_seed (7);
  g_autofree float *x = make_values (r, rows, cols);

  for (guint t = 0; t < G_N_ELEMENTS (qtypes); t++) {
    DflDtype type = qtypes[t];
    gsize rb = dfl_dtype_row_bytes (type, cols);
    int be = (int) dfl_dtype_block_elems (type);
    g_autofree guint8 *q = g_malloc (rb * rows);
    g_autofree float *y = g_new (float, (gsize) rows * cols);
    g_autofree double *ref = g_new (double, cols), *mag = g_new (double, cols);
    double se = 0, sx = 0;

    for (int i = 0; i < rows; i++) {
      const float *xi = x + (gsize) i * cols;
      float *yi = y + (gsize) i * cols;
      g_assert_true (dfl_quantize_row (type, xi, q + rb * i, cols));
      g_assert_true (dfl_dequantize_row (type, q + rb * i, yi, cols));
      /* what was written reads back the same in float64 */
      ref_dequant (type, q + rb * i, cols, ref, mag);
      for (int k = 0; k < cols; k++) {
        g_assert_cmpfloat (fabs (yi[k] - ref[k]), <=, 3 * 0x1p-24 * mag[k]);
        se += (ref[k] - xi[k]) * (ref[k] - xi[k]);
        sx += (double) xi[k] * xi[k];
      }
      for (int b = 0; b < cols / be && be == 32; b++) {
        double amax = 0, bound;
        for (int k = 0; k < 32; k++)
          amax = MAX (amax, fabs (xi[32 * b + k]));
        bound = type == DFL_DTYPE_Q8_0 ? amax * (0.5 / 127 + 0x1p-11) + 1e-30
            : amax / 8 * (1 + 0x1p-8) + 1e-30;
        for (int k = 0; k < 32; k++)
          g_assert_cmpfloat (fabs (ref[32 * b + k] - xi[32 * b + k]), <=, bound);
      }
    }
    g_test_message ("%s: RMS error %.4f of the RMS value (ceiling %.3f)", dfl_dtype_name (type),
                    sqrt (se / sx), rms_ceiling[t]);
    g_assert_cmpfloat (sqrt (se / sx), <=, rms_ceiling[t]);
  }
}

/* The gguf package's blocks (tests/fixtures/quant/make_quant_fixture.py):
 * our reading of them is gguf's, bitwise; where gguf quantized them, our
 * quantizer writes the same bytes. */
static void
test_gguf_fixture (void)
{
  g_autofree char *path = g_build_filename (g_getenv ("DFL_FIXTURES"), "quant", "gguf-blocks.bin",
                                            NULL);
  g_autofree char *data = NULL;
  gsize len, off = 12;
  guint32 n_sections, seen = 0;
  g_autoptr (GError) error = NULL;

  g_assert_true (g_file_get_contents (path, &data, &len, &error));
  g_assert_no_error (error);
  g_assert_cmpmem (data, 4, "DFLQ", 4);
  memcpy (&n_sections, data + 8, 4);
  g_assert_cmpuint (n_sections, ==, 4);
  for (guint32 s = 0; s < n_sections; s++) {
    guint32 head[3];
    DflDtype type;
    int n, be;
    gsize rb;
    g_autofree float *y = NULL;
    const float *src = NULL, *deq;
    const guint8 *blocks;

    g_assert_cmpuint (off + 12, <=, len);
    memcpy (head, data + off, 12);
    off += 12;
    switch (head[0]) {
      case 8: type = DFL_DTYPE_Q8_0; break;
      case 2: type = DFL_DTYPE_Q4_0; break;
      case 12: type = DFL_DTYPE_Q4_K; break;
      case 14: type = DFL_DTYPE_Q6_K; break;
      default: g_assert_not_reached ();
    }
    seen |= 1u << type;
    be = (int) dfl_dtype_block_elems (type);
    n = (int) head[1] * be;
    rb = dfl_dtype_row_bytes (type, n);
    g_assert_cmpuint (off + (head[2] ? 4 * n : 0) + rb + 4 * n, <=, len);
    if (head[2]) {
      src = (const float *) (data + off);
      off += 4 * (gsize) n;
    }
    blocks = (const guint8 *) data + off;
    off += rb;
    deq = (const float *) (data + off);
    off += 4 * (gsize) n;

    y = g_new (float, n);
    g_assert_true (dfl_dequantize_row (type, blocks, y, n));
    for (int i = 0; i < n; i++) {
      guint32 a, b;
      memcpy (&a, y + i, 4);
      memcpy (&b, deq + i, 4);
      if (a != b)
        g_error ("%s element %d: ours %a, gguf's %a", dfl_dtype_name (type), i, y[i], deq[i]);
    }
    if (src) {
      g_autofree guint8 *ours = g_malloc (rb);
      g_autofree float *aligned = g_memdup2 (src, 4 * (gsize) n);
      g_assert_true (dfl_quantize_row (type, aligned, ours, n));
      g_assert_cmpmem (ours, rb, blocks, rb);
    }
    g_test_message ("%s: %d blocks read as gguf reads them%s", dfl_dtype_name (type),
                    (int) head[1], src ? ", quantized to its bytes" : "");
  }
  g_assert_cmpuint (off, ==, len);
  g_assert_cmpuint (seen, ==, (1u << DFL_DTYPE_Q8_0) | (1u << DFL_DTYPE_Q4_0)
                    | (1u << DFL_DTYPE_Q4_K) | (1u << DFL_DTYPE_Q6_K));
}

/* Q8_0 quantization gives the same bytes on every path: random blocks,
 * values that land on halves (rounded away from zero), zeros, signed
 * zeros, subnormals, an infinity and a NaN in a block. */
static void
test_quantize_q8_0_paths (void)
{
  enum { BLOCKS = 12, N = BLOCKS * 32 };
  g_autoptr (GRand) r = g_rand_new_with_seed (23);
  float x[N];
  guint8 want[BLOCKS * 34], got[BLOCKS * 34];

  for (int i = 0; i < N; i++)
    x[i] = (float) g_rand_double_range (r, -3, 3);
  /* block 1: the largest 127, so the step is 1 and halves stay halves */
  x[32] = 127.0f;
  for (int i = 33; i < 64; i++)
    x[i] = (float) ((i % 2 ? 1 : -1) * ((i - 33) + 0.5));
  for (int i = 64; i < 96; i++)     /* block 2: zeros, one negative */
    x[i] = i == 70 ? -0.0f : 0.0f;
  for (int i = 96; i < 128; i++)    /* block 3: subnormals */
    x[i] = ldexpf ((float) (i - 111), -140);
  x[130] = INFINITY;                /* block 4 */
  x[170] = NAN;                     /* block 5 */
  x[200] = -INFINITY;               /* block 6 */
  g_assert_true (dfl_kernels_set_isa (DFL_KERNELS_GENERIC));
  g_assert_true (dfl_quantize_row (DFL_DTYPE_Q8_0, x, want, N));
  for (int isa = DFL_KERNELS_GENERIC; isa <= DFL_KERNELS_AVX512; isa++) {
    if (!dfl_kernels_set_isa (isa))
      continue;
    memset (got, 0x5a, sizeof got);
    g_assert_true (dfl_quantize_row (DFL_DTYPE_Q8_0, x, got, N));
    g_assert_cmpmem (got, sizeof got, want, sizeof want);
  }
  dfl_kernels_set_isa (DFL_KERNELS_BEST);
  /* the halves of block 1 away from zero: 0.5 → 1, −1.5 → −2, … */
  for (int i = 33; i < 64; i++) {
    double h = (i % 2 ? 1 : -1) * ((i - 33) + 0.5);
    g_assert_cmpint (((gint8 *) want)[34 + 2 + i - 32], ==, (int) (h > 0 ? h + 0.5 : h - 0.5));
  }
}

static void
test_bad_lengths (void)
{
  float x[300] = { 0 }, y[300];
  guint8 b[1024];

  /* not whole blocks, or not a block type: nothing done */
  g_assert_false (dfl_quantize_row (DFL_DTYPE_Q4_K, x, b, 288));
  g_assert_false (dfl_dequantize_row (DFL_DTYPE_Q6_K, b, y, 100));
  g_assert_false (dfl_quantize_row (DFL_DTYPE_Q8_0, x, b, 33));
  g_assert_false (dfl_quantize_row (DFL_DTYPE_BF16, x, b, 32));
}

/* ---- products ---------------------------------------------------------- */

typedef struct {
  DflDtype type;
  int out, in;
  guint8 *w;        /* [out] rows of blocks */
  double *wd;       /* the same dequantized, float64 */
  void *packed;     /* NULL, or w laid out by dfl_quant_pack, which matmul passes */
} QMat;

static void
qmat_make (QMat *m, GRand *r, DflDtype type, int out, int in)
{
  g_autofree float *v = make_values (r, out, in);
  gsize rb = dfl_dtype_row_bytes (type, in);
  g_autofree double *mag = g_new (double, in);

  m->type = type;
  m->out = out;
  m->in = in;
  m->packed = NULL;
  m->w = g_malloc (rb * out);
  m->wd = g_new (double, (gsize) out * in);
  for (int o = 0; o < out; o++) {
    g_assert_true (dfl_quantize_row (type, v + (gsize) o * in, m->w + rb * o, in));
    ref_dequant (type, m->w + rb * o, in, m->wd + (gsize) o * in, mag);
  }
}

static void
qmat_clear (QMat *m)
{
  g_free (m->w);
  g_free (m->wd);
  free (m->packed);
}

static void
matmul (const QMat *m, const float *x, int rows, int ldx, float *y, int ldy, int n_out,
        int accumulate)
{
  DflWeights w = { m->w, m->type, m->out, m->in, m->packed };
  g_assert_true (dfl_matmul_q (&w, x, rows, ldx, y, ldy, n_out, accumulate));
}

/* Against float64 on the dequantized weights, within the activations'
 * rounding bound (see the top); returns the worst error / bound. */
static double
check_reference (const QMat *m, const float *x, int rows, int ldx, const float *y0,
                 const float *y, int ldy, int n_out, int accumulate)
{
  double worst = 0;

  for (int r = 0; r < rows; r++)
    for (int o = 0; o < n_out; o++) {
      const float *xr = x + (gsize) r * ldx;
      const double *w = m->wd + (gsize) o * m->in;
      double ref = accumulate ? y0[(gsize) r * ldy + o] : 0, bound = 0, mag = fabs (ref);
      for (int g = 0; g < m->in / 32; g++) {
        double amax = 0, wsum = 0;
        for (int k = 32 * g; k < 32 * g + 32; k++) {
          ref += xr[k] * w[k];
          mag += fabs (xr[k] * w[k]);
          amax = MAX (amax, fabs (xr[k]));
          wsum += fabs (w[k]);
        }
        bound += amax / 127 / 2 * wsum;
      }
      bound = bound * (1 + 1e-6) + 1e-5 * mag + 1e-30;
      worst = MAX (worst, fabs (y[(gsize) r * ldy + o] - ref) / bound);
      if (!(fabs (y[(gsize) r * ldy + o] - ref) <= bound))
        g_error ("%s %d×%d, row %d output %d: %.9g, float64 %.9g, bound %.3g",
                 dfl_dtype_name (m->type), m->out, m->in, r, o, y[(gsize) r * ldy + o], ref,
                 bound);
    }
  return worst;
}

static const DflKernelsIsa paths[] = { DFL_KERNELS_GENERIC, DFL_KERNELS_AVX2,
                                       DFL_KERNELS_AVX512 };

/* Values at the edges, on every path, all rows at once (the SIMD paths'
 * interleaved layouts) and each row alone: a NaN or an Inf in a row makes
 * that row's outputs NaN (never a number made of the other values) and
 * leaves the other rows as they were; a group whose largest magnitude is
 * so small that 127 / it overflows quantizes to zeros, bitwise the plain-C
 * path's (a row of nothing else gives zeros). */
static void
test_matmul_edge_values (void)
{
  g_autoptr (GRand) r = g_rand_new_with_seed (5);
  int in = 512, out = 20, rows = 5;

  for (guint t = 0; t < G_N_ELEMENTS (qtypes); t++) {
    QMat m;
    g_autofree float *x = make_values (r, rows, in);
    g_autofree float *y = g_new (float, rows * out), *ref = g_new (float, rows * out);
    g_autofree float *clean = g_new (float, rows * out);

    qmat_make (&m, r, qtypes[t], out, in);
    g_assert_true (dfl_kernels_set_isa (DFL_KERNELS_GENERIC));
    matmul (&m, x, rows, in, clean, out, out, FALSE);
    x[0 * in + 300] = NAN;
    x[2 * in + 7] = INFINITY;
    for (int i = 0; i < 32; i++)
      x[1 * in + 64 + i] *= 1e-38f;
    for (int i = 0; i < in; i++)
      x[3 * in + i] = i % 3 ? 1e-40f : -3e-45f;
    matmul (&m, x, rows, in, ref, out, out, FALSE);
    for (int o = 0; o < out; o++) {
      g_assert_true (isfinite (ref[out + o]));
      g_assert_cmpfloat (ref[3 * out + o], ==, 0.0f);
    }
    /* the second time with the packed copy, which the SIMD paths read */
    for (int pk = 0; pk < 2; pk++) {
      if (pk && !(m.packed = dfl_quant_pack (&(DflWeights) { m.w, m.type, out, in })))
        break;
      for (guint p = 0; p < G_N_ELEMENTS (paths); p++) {
        if (!dfl_kernels_set_isa (paths[p]))
          continue;
        for (int alone = 0; alone < 2; alone++) {
          if (alone)
            for (int i = 0; i < rows; i++)
              matmul (&m, x + (gsize) i * in, 1, in, y + (gsize) i * out, out, out, FALSE);
          else
            matmul (&m, x, rows, in, y, out, out, FALSE);
          for (int o = 0; o < out; o++) {
            g_assert_true (isnan (y[o]));
            g_assert_true (isnan (y[2 * out + o]));
          }
          g_assert_cmpmem (y + out, sizeof (float) * out, ref + out, sizeof (float) * out);
          g_assert_cmpmem (y + 3 * out, sizeof (float) * 2 * out, ref + 3 * out,
                           sizeof (float) * 2 * out);
          g_assert_cmpmem (y + 4 * out, sizeof (float) * out, clean + 4 * out,
                           sizeof (float) * out);
        }
      }
    }
    dfl_kernels_set_isa (DFL_KERNELS_BEST);
    qmat_clear (&m);
  }
}

/* The path set now bitwise `ref` (the plain-C path's), with 1 thread and
 * the default, and each row alone or among 5 bitwise as among all. */
static void
check_path (const QMat *m, const float *x, int rows, int ldx, const float *y0, const float *ref,
            float *y, int ldy, int n_out, int accumulate)
{
  int threads = omp_get_max_threads ();

  for (int nt = 1; nt <= 2; nt++) {
    omp_set_num_threads (nt == 1 ? 1 : threads);
    memcpy (y, y0, sizeof (float) * rows * ldy);
    matmul (m, x, rows, ldx, y, ldy, n_out, accumulate);
    g_assert_cmpmem (y, sizeof (float) * rows * ldy, ref, sizeof (float) * rows * ldy);
  }
  /* batch invariance: each row alone, and the rows by fives */
  memcpy (y, y0, sizeof (float) * rows * ldy);
  for (int i = 0; i < rows; i++)
    matmul (m, x + (gsize) i * ldx, 1, ldx, y + (gsize) i * ldy, ldy, n_out, accumulate);
  g_assert_cmpmem (y, sizeof (float) * rows * ldy, ref, sizeof (float) * rows * ldy);
  memcpy (y, y0, sizeof (float) * rows * ldy);
  for (int i = 0; i < rows; i += 5)
    matmul (m, x + (gsize) i * ldx, MIN (5, rows - i), ldx, y + (gsize) i * ldy, ldy, n_out,
            accumulate);
  g_assert_cmpmem (y, sizeof (float) * rows * ldy, ref, sizeof (float) * rows * ldy);
}

/* One shape of one type: float64, then every path this CPU has (and the
 * VNNI one only with `vnni`) bitwise the plain-C one, each with 1 thread
 * and the default, and each row alone or among 5 bitwise as among all. */
static void
check_shape (DflDtype type, int rows, int out, int in, int n_out, int accumulate, gboolean vnni)
{
  g_autoptr (GRand) r = g_rand_new_with_seed (rows * 7919 + out * 31 + in + type);
  int ldx = in + 32, ldy = n_out + 3, threads = omp_get_max_threads ();
  QMat m;
  g_autofree float *x = make_values (r, rows, ldx);
  g_autofree float *y0 = g_new (float, (gsize) rows * ldy);
  g_autofree float *ref = g_new (float, (gsize) rows * ldy);
  g_autofree float *y = g_new (float, (gsize) rows * ldy);
  double worst;

  qmat_make (&m, r, type, out, in);
  for (int i = 0; i < rows * ldy; i++)
    y0[i] = accumulate ? (float) gauss (r) : -1.0f;
  g_assert_true (dfl_kernels_set_isa (DFL_KERNELS_GENERIC));
  memcpy (ref, y0, sizeof (float) * rows * ldy);
  matmul (&m, x, rows, ldx, ref, ldy, n_out, accumulate);
  worst = check_reference (&m, x, rows, ldx, y0, ref, ldy, n_out, accumulate);
  /* what lies past n_out in each row is not written */
  for (int i = 0; i < rows; i++)
    for (int o = n_out; o < ldy; o++)
      g_assert_cmpfloat (ref[(gsize) i * ldy + o], ==, y0[(gsize) i * ldy + o]);

  for (guint p = 0; p < G_N_ELEMENTS (paths); p++) {
    if ((paths[p] == DFL_KERNELS_AVX512) != vnni || !dfl_kernels_set_isa (paths[p]))
      continue;
    if (paths[p] == DFL_KERNELS_AVX512 && !dfl_quant_has_vnni ())
      continue;
    /* from the stored blocks; on the SIMD paths then from the packed copy
     * too (the same bits) */
    g_clear_pointer (&m.packed, free);
    check_path (&m, x, rows, ldx, y0, ref, y, ldy, n_out, accumulate);
    if (paths[p] == DFL_KERNELS_GENERIC)
      continue;
    m.packed = dfl_quant_pack (&(DflWeights) { m.w, type, out, in });
    /* every type but Q6_K is packed */
    g_assert_true ((m.packed != NULL) == (type != DFL_DTYPE_Q6_K));
    if (m.packed)
      check_path (&m, x, rows, ldx, y0, ref, y, ldy, n_out, accumulate);
  }
  omp_set_num_threads (threads);
  dfl_kernels_set_isa (DFL_KERNELS_BEST);
  g_test_message ("%s %d rows x %dx%d -> %d%s: worst error %.3f of the bound",
                  dfl_dtype_name (type), rows, out, in, n_out, accumulate ? " (+=)" : "", worst);
  qmat_clear (&m);
}

static void
check_all_shapes (gboolean vnni)
{
  for (guint t = 0; t < G_N_ELEMENTS (qtypes); t++) {
    DflDtype type = qtypes[t];
    gboolean k = dfl_dtype_block_elems (type) == 256;

    check_shape (type, 16, 64, 1024, 64, FALSE, vnni);
    check_shape (type, 1, 37, 512, 37, FALSE, vnni);
    check_shape (type, 17, 50, k ? 768 : 288, 41, TRUE, vnni);
    check_shape (type, 3, 7, k ? 256 : 96, 7, FALSE, vnni);
    check_shape (type, 33, 20, k ? 256 : 32, 20, TRUE, vnni);
  }
}

static void
test_matmul_paths (void)
{
  g_test_message ("paths: plain C%s", dfl_kernels_set_isa (DFL_KERNELS_AVX2) ? ", AVX2" : "");
  dfl_kernels_set_isa (DFL_KERNELS_BEST);
  check_all_shapes (FALSE);
}

static void
test_matmul_vnni (void)
{
  if (!dfl_quant_has_vnni ()) {
    g_test_skip ("this CPU lacks AVX-512 VNNI: its path is not run here");
    return;
  }
  g_assert_true (dfl_kernels_set_isa (DFL_KERNELS_AVX512));
  g_assert_cmpstr (dfl_quant_path_name (), ==, "AVX-512 VNNI");
  dfl_kernels_set_isa (DFL_KERNELS_BEST);
  check_all_shapes (TRUE);
}

/* Through the back-end interface on the CPU: the capabilities, a product
 * and an embedding of quantized tensors, and the errors of rows that are
 * not whole blocks. */
static void
test_backend (void)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (DflDevice) cpu = dfl_device_open (DFL_BACKEND_CPU, -1, &error);
  g_autoptr (GRand) r = g_rand_new_with_seed (3);

  g_assert_no_error (error);
  for (guint t = 0; t < G_N_ELEMENTS (qtypes); t++) {
    DflDtype type = qtypes[t];
    int in = 512, out = 24, rows = 3;
    QMat m;
    g_autofree float *x = make_values (r, rows, in);
    g_autofree float *y = g_new0 (float, rows * out), *yk = g_new0 (float, rows * out);
    g_autofree float *e = g_new (float, 2 * in), *ek = g_new (float, 2 * in);
    gint32 ids[2] = { 5, 23 };
    DflTensor w, xt, yt, it, et;

    g_assert_true (dfl_device_op_caps (cpu, DFL_OP_MATMUL, type) & DFL_OP_CAP_ROW_INVARIANT);
    g_assert_true (dfl_device_supports (cpu, DFL_OP_EMBED, type));
    g_assert_false (dfl_device_supports (cpu, DFL_OP_RMSNORM, type));
    qmat_make (&m, r, type, out, in);
    w = dfl_tensor_2d (NULL, m.w, 0, type, out, in);
    g_assert_cmpuint (w.nb[0], ==, dfl_dtype_block_bytes (type));
    g_assert_cmpuint (dfl_tensor_bytes (&w), ==, dfl_dtype_row_bytes (type, in) * out);
    g_assert_true (dfl_tensor_is_contiguous (&w));
    xt = dfl_tensor_2d (NULL, x, 0, DFL_DTYPE_F32, rows, in);
    yt = dfl_tensor_2d (NULL, y, 0, DFL_DTYPE_F32, rows, out);
    g_assert_true (dfl_op_matmul (cpu, &w, &xt, &yt, FALSE, &error));
    g_assert_no_error (error);
    matmul (&m, x, rows, in, yk, out, out, FALSE);
    g_assert_cmpmem (y, sizeof (float) * rows * out, yk, sizeof (float) * rows * out);

    it = dfl_tensor_2d (NULL, ids, 0, DFL_DTYPE_I32, 1, 2);
    et = dfl_tensor_2d (NULL, e, 0, DFL_DTYPE_F32, 2, in);
    g_assert_true (dfl_op_embed (cpu, &w, &it, &et, &error));
    g_assert_no_error (error);
    for (int i = 0; i < 2; i++)
      g_assert_true (dfl_dequantize_row (type, m.w + dfl_dtype_row_bytes (type, in) * ids[i],
                                         ek + (gsize) i * in, in));
    g_assert_cmpmem (e, sizeof (float) * 2 * in, ek, sizeof (float) * 2 * in);
    /* an id past the table is refused, not read */
    ids[1] = out;
    g_assert_false (dfl_op_embed (cpu, &w, &it, &et, &error));
    dfl_test_check_error (error, DFL_ERROR_INVALID, "embed", NULL);
    g_clear_error (&error);

    /* rows that are not whole blocks */
    {
      int bad = dfl_dtype_block_elems (type) == 256 ? 320 : 48;
      g_autofree char *cols = g_strdup_printf ("%d elements", bad);
      DflTensor wb = w, xb = dfl_tensor_2d (NULL, x, 0, DFL_DTYPE_F32, 1, bad);
      DflTensor yb = dfl_tensor_2d (NULL, y, 0, DFL_DTYPE_F32, 1, 4);
      wb.ne[0] = bad;
      wb.ne[1] = 4;
      g_assert_false (dfl_op_matmul (cpu, &wb, &xb, &yb, FALSE, &error));
      dfl_test_check_error (error, DFL_ERROR_UNSUPPORTED, "matmul", "w's rows", cols,
                            dfl_dtype_name (type), NULL);
      g_clear_error (&error);
    }
    qmat_clear (&m);
  }
}

/* Products of one x with several matrices (q, k, v; gate, up) in one call:
 * each matrix's outputs bitwise its own dfl_matmul_q's, on every path, from
 * the stored blocks and the packed copy, whether x is quantized once for
 * all (matrices that read it alike) or a call each (a Q6_K matrix beside
 * Q4_K ones); a group of different widths refused, nothing written. And
 * through the CPU device's matmul_group. */
static void
test_matmul_group (void)
{
  static const DflDtype groups[][3] = {
    { DFL_DTYPE_Q4_0, DFL_DTYPE_Q4_0, DFL_DTYPE_Q4_0 },
    { DFL_DTYPE_Q8_0, DFL_DTYPE_Q8_0, DFL_DTYPE_Q8_0 },
    { DFL_DTYPE_Q4_K, DFL_DTYPE_Q4_K, DFL_DTYPE_Q6_K },
    { DFL_DTYPE_Q4_0, DFL_DTYPE_Q8_0, DFL_DTYPE_Q4_K },
  };
  static const int outs[3] = { 64, 40, 33 }, row_counts[] = { 1, 3, 9, 16 };
  g_autoptr (GRand) r = g_rand_new_with_seed (11);
  const int in = 512, ldx = in + 32;
  int checked = 0;

  for (guint gi = 0; gi < G_N_ELEMENTS (groups); gi++) {
    QMat m[3];
    g_autofree float *x = make_values (r, 16, ldx);

    for (int i = 0; i < 3; i++)
      qmat_make (&m[i], r, groups[gi][i], outs[i], in);
    for (guint p = 0; p < G_N_ELEMENTS (paths); p++) {
      if (!dfl_kernels_set_isa (paths[p]))
        continue;
      for (int packed = 0; packed <= (paths[p] != DFL_KERNELS_GENERIC); packed++) {
        DflWeights w[3];
        for (int i = 0; i < 3; i++) {
          g_clear_pointer (&m[i].packed, free);
          if (packed)
            m[i].packed = dfl_quant_pack (&(DflWeights) { m[i].w, m[i].type, m[i].out, in });
          w[i] = (DflWeights) { m[i].w, m[i].type, m[i].out, in, m[i].packed };
        }
        for (guint rc = 0; rc < G_N_ELEMENTS (row_counts); rc++)
          for (int acc = 0; acc <= 1; acc++) {
            int rows = row_counts[rc], ldy[3], n_out[3];
            float *y[3], *ref[3];
            for (int i = 0; i < 3; i++) {
              ldy[i] = outs[i] + 5;
              n_out[i] = outs[i] - i;   /* the last outputs of a matrix left out */
              y[i] = g_new (float, (gsize) rows * ldy[i]);
              ref[i] = g_new (float, (gsize) rows * ldy[i]);
              for (int j = 0; j < rows * ldy[i]; j++)
                y[i][j] = ref[i][j] = (float) (j % 13) - 6;
              matmul (&m[i], x, rows, ldx, ref[i], ldy[i], n_out[i], acc);
            }
            g_assert_true (dfl_matmul_q_group (3, w, x, rows, ldx, y, ldy, n_out, acc));
            for (int i = 0; i < 3; i++) {
              g_assert_cmpmem (y[i], sizeof (float) * rows * ldy[i], ref[i],
                               sizeof (float) * rows * ldy[i]);
              g_free (y[i]);
              g_free (ref[i]);
            }
            checked++;
          }
      }
    }
    dfl_kernels_set_isa (DFL_KERNELS_BEST);
    for (int i = 0; i < 3; i++)
      qmat_clear (&m[i]);
  }
  g_test_message ("%d groups checked", checked);

  /* matrices of different widths: refused before anything is written */
  {
    QMat a, b;
    g_autofree float *x = make_values (r, 2, 512);
    float ya[2 * 16], yb[2 * 16], untouched[2 * 16];
    float *y[2] = { ya, yb };
    int ldy[2] = { 16, 16 }, n_out[2] = { 16, 16 };
    DflWeights w[2];

    qmat_make (&a, r, DFL_DTYPE_Q4_0, 16, 512);
    qmat_make (&b, r, DFL_DTYPE_Q4_0, 16, 256);
    w[0] = (DflWeights) { a.w, a.type, 16, 512, NULL };
    w[1] = (DflWeights) { b.w, b.type, 16, 256, NULL };
    memset (untouched, 0x7f, sizeof untouched);
    memcpy (ya, untouched, sizeof ya);
    memcpy (yb, untouched, sizeof yb);
    g_assert_false (dfl_matmul_q_group (2, w, x, 2, 512, y, ldy, n_out, FALSE));
    g_assert_cmpmem (ya, sizeof ya, untouched, sizeof untouched);
    g_assert_cmpmem (yb, sizeof yb, untouched, sizeof untouched);
    qmat_clear (&a);
    qmat_clear (&b);
  }
}

const DflTestCase dfl_test_cases[] = {
  { "/quant/dequantize-random", test_dequantize_random },
  { "/quant/roundtrip", test_roundtrip },
  { "/quant/gguf-fixture", test_gguf_fixture },
  { "/quant/bad-lengths", test_bad_lengths },
  { "/quant/quantize-q8_0-paths", test_quantize_q8_0_paths },
  { "/quant/matmul-paths", test_matmul_paths },
  { "/quant/matmul-vnni", test_matmul_vnni },
  { "/quant/matmul-edge-values", test_matmul_edge_values },
  { "/quant/matmul-group", test_matmul_group },
  { "/quant/backend", test_backend },
  { NULL, NULL }
};
