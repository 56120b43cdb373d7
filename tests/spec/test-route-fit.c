/* gst-dflash — fitting the router: subspaces recovered from rows drawn
 * around known ones, the record written into a sidecar and read back, and
 * the margin telling the two kinds of rows apart. */
#include <glib.h>
#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

#include "dfl-error.h"
#include "drafter.h"
#include "route-fit.h"

#define DIM 64
#define RANK 3

/* rows: unit-ish mean direction plus signal in `rank` known orthonormal
 * directions plus small noise */
static void
draw_rows (GRand *r, const float *mean, const float *dirs, int n, float *rows)
{
  for (int i = 0; i < n; i++)
    for (int k = 0; k < DIM; k++) {
      rows[(gsize) i * DIM + k] = mean[k] + 0.002 * g_rand_double_range (r, -1, 1);
    }
  for (int i = 0; i < n; i++)
    for (int j = 0; j < RANK; j++) {
      double c = (0.3 / (j + 1)) * g_rand_double_range (r, -1, 1);
      for (int k = 0; k < DIM; k++)
        rows[(gsize) i * DIM + k] += c * dirs[j * DIM + k];
    }
}

static void
random_orthonormal (GRand *r, float *v, int rank)
{
  for (int i = 0; i < rank; i++) {
    double norm = 0;
    for (int k = 0; k < DIM; k++)
      v[i * DIM + k] = g_rand_double_range (r, -1, 1);
    for (int j = 0; j < i; j++) {
      double dot = 0;
      for (int k = 0; k < DIM; k++)
        dot += v[i * DIM + k] * v[j * DIM + k];
      for (int k = 0; k < DIM; k++)
        v[i * DIM + k] -= dot * v[j * DIM + k];
    }
    for (int k = 0; k < DIM; k++)
      norm += v[i * DIM + k] * v[i * DIM + k];
    for (int k = 0; k < DIM; k++)
      v[i * DIM + k] /= sqrt (norm);
  }
}

static void
test_subspace (void)
{
  g_autoptr (GRand) r = g_rand_new_with_seed (9);
  float mean[DIM], dirs[RANK * DIM], fm[DIM], fb[RANK * DIM];
  g_autofree float *rows = g_new (float, 200 * DIM);
  g_autoptr (GError) error = NULL;

  for (int k = 0; k < DIM; k++)
    mean[k] = k == 5 ? 1.0f : 0.0f;
  random_orthonormal (r, dirs, RANK);
  draw_rows (r, mean, dirs, 200, rows);
  g_assert_true (dfl_route_fit_subspace (rows, 200, DIM, RANK, fm, fb, &error));
  /* orthonormal, and each true direction (made unit-row-ish by the scaling
   * of rows to unit length) lies in the fitted span */
  for (int i = 0; i < RANK; i++)
    for (int j = 0; j < RANK; j++) {
      double dot = 0;
      for (int k = 0; k < DIM; k++)
        dot += fb[i * DIM + k] * fb[j * DIM + k];
      g_assert_cmpfloat (fabs (dot - (i == j)), <, 1e-5);
    }
  for (int j = 0; j < RANK; j++) {
    double in_span = 0, norm = 0;
    for (int i = 0; i < RANK; i++) {
      double dot = 0;
      for (int k = 0; k < DIM; k++)
        dot += fb[i * DIM + k] * dirs[j * DIM + k];
      in_span += dot * dot;
    }
    for (int k = 0; k < DIM; k++)
      norm += dirs[j * DIM + k] * dirs[j * DIM + k];
    g_assert_cmpfloat (in_span / norm, >, 0.95);
  }
  g_assert_cmpfloat (fabs (fm[5] - 0.95), <, 0.1);

  g_assert_false (dfl_route_fit_subspace (rows, 3, DIM, 3, fm, fb, &error));
  g_assert_error (error, DFL_ERROR, DFL_ERROR_INVALID);
}

/* The record in a real sidecar: written, loaded, and its margin sorts rows
 * drawn around each subspace to its side. */
static void
test_record_and_margin (void)
{
  g_autoptr (GRand) r = g_rand_new_with_seed (10);
  g_autofree char *src = g_build_filename (g_getenv ("DFL_FIXTURES"), "qwen3", "bf16-tied",
                                           "dflash.safetensors", NULL);
  g_autofree char *dir = g_dir_make_tmp ("route-fit-XXXXXX", NULL);
  g_autofree char *dst = g_build_filename (dir, "dflash.safetensors", NULL);
  g_autofree float *brows = g_new (float, 100 * DIM), *crows = g_new (float, 100 * DIM);
  float bmean[DIM] = { 0 }, cmean[DIM] = { 0 }, bd[RANK * DIM], cd[RANK * DIM];
  float bm[DIM], bb[RANK * DIM], cm[DIM], cb[RANK * DIM];
  g_autoptr (GError) error = NULL;
  g_autoptr (DflDrafterWeights) d = NULL;
  g_autofree char *record = NULL;
  int right = 0;

  bmean[1] = 1;
  cmean[2] = 1;
  random_orthonormal (r, bd, RANK);
  random_orthonormal (r, cd, RANK);
  draw_rows (r, bmean, bd, 100, brows);
  draw_rows (r, cmean, cd, 100, crows);
  g_assert_true (dfl_route_fit_subspace (brows, 100, DIM, RANK, bm, bb, &error));
  g_assert_true (dfl_route_fit_subspace (crows, 100, DIM, RANK, cm, cb, &error));
  record = dfl_route_record (bm, bb, cm, cb, DIM, RANK, 100, 100);
  g_assert_true (dfl_safetensors_rewrite_metadata (src, dst, "dflash_route", record, &error));
  g_assert_no_error (error);
  d = dfl_drafter_weights_open (dst, &error);
  g_assert_no_error (error);
  g_assert_true (dfl_drafter_weights_has_route (d));
  g_assert_nonnull (dfl_drafter_weights_binding (d));
  for (int i = 0; i < 100; i++) {
    right += dfl_drafter_weights_route_margin (d, brows + (gsize) i * DIM) > 0;
    right += dfl_drafter_weights_route_margin (d, crows + (gsize) i * DIM) < 0;
  }
  g_assert_cmpint (right, >=, 195);
  g_unlink (dst);
  g_rmdir (dir);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/route-fit/subspace", test_subspace);
  g_test_add_func ("/route-fit/record-and-margin", test_record_and_margin);
  return g_test_run ();
}
