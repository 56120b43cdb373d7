/* gst-dflash — fitting the router's subspaces. */
#include "route-fit.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "dfl-error.h"
#include "safetensors.h"

/* Orthonormalise the rows of v (rank × dim) in place, modified Gram-Schmidt.
 * A row that vanishes is replaced by a unit vector along a fresh axis. */
static void
orthonormalise (double *v, int rank, int dim)
{
  for (int i = 0; i < rank; i++) {
    double *vi = v + (gsize) i * dim, norm = 0;
    for (int j = 0; j < i; j++) {
      const double *vj = v + (gsize) j * dim;
      double dot = 0;
      for (int k = 0; k < dim; k++)
        dot += vi[k] * vj[k];
      for (int k = 0; k < dim; k++)
        vi[k] -= dot * vj[k];
    }
    for (int k = 0; k < dim; k++)
      norm += vi[k] * vi[k];
    norm = sqrt (norm);
    if (norm < 1e-300) {
      memset (vi, 0, sizeof (double) * dim);
      vi[i % dim] = 1;
      continue;
    }
    for (int k = 0; k < dim; k++)
      vi[k] /= norm;
  }
}

gboolean
dfl_route_fit_subspace (const float *rows, int n, int dim, int rank, float *mean, float *basis,
                        GError **error)
{
  g_autofree double *c = NULL, *m = NULL, *v = NULL, *xv = NULL, *w = NULL;
  g_autoptr (GRand) rng = g_rand_new_with_seed (1);

  if (n < 2 || rank < 1 || rank >= n || rank > dim) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "%d rows cannot fit a subspace of rank %d (rank must be at least 1 and below the rows)",
                 n, rank);
    return FALSE;
  }
  /* unit rows, then centred: the router compares directions, not sizes */
  c = g_new (double, (gsize) n * dim);
  m = g_new0 (double, dim);
  for (int i = 0; i < n; i++) {
    const float *r = rows + (gsize) i * dim;
    double norm = 0;
    for (int k = 0; k < dim; k++)
      norm += (double) r[k] * r[k];
    norm = MAX (sqrt (norm), 1e-12);
    for (int k = 0; k < dim; k++) {
      c[(gsize) i * dim + k] = r[k] / norm;
      m[k] += c[(gsize) i * dim + k] / n;
    }
  }
  for (int i = 0; i < n; i++)
    for (int k = 0; k < dim; k++)
      c[(gsize) i * dim + k] -= m[k];

  /* subspace iteration on C = Xᵀ X without forming it: V ← orth (Xᵀ (X Vᵀ))ᵀ */
  v = g_new (double, (gsize) rank * dim);
  xv = g_new (double, (gsize) n * rank);
  w = g_new (double, (gsize) rank * dim);
  for (gsize i = 0; i < (gsize) rank * dim; i++)
    v[i] = g_rand_double_range (rng, -1, 1);
  orthonormalise (v, rank, dim);
  for (int it = 0; it < 200; it++) {
    double moved = 0;
    for (int i = 0; i < n; i++)
      for (int j = 0; j < rank; j++) {
        double s = 0;
        for (int k = 0; k < dim; k++)
          s += c[(gsize) i * dim + k] * v[(gsize) j * dim + k];
        xv[(gsize) i * rank + j] = s;
      }
    memset (w, 0, sizeof (double) * rank * dim);
    for (int i = 0; i < n; i++)
      for (int j = 0; j < rank; j++) {
        double s = xv[(gsize) i * rank + j];
        for (int k = 0; k < dim; k++)
          w[(gsize) j * dim + k] += s * c[(gsize) i * dim + k];
      }
    orthonormalise (w, rank, dim);
    for (gsize i = 0; i < (gsize) rank * dim; i++)
      moved = MAX (moved, fabs (fabs (w[i]) - fabs (v[i])));
    memcpy (v, w, sizeof (double) * rank * dim);
    if (moved < 1e-10)
      break;
  }
  for (int k = 0; k < dim; k++)
    mean[k] = m[k];
  for (gsize i = 0; i < (gsize) rank * dim; i++)
    basis[i] = v[i];
  return TRUE;
}

static cJSON *
subspace_json (const float *mean, const float *basis, int dim, int rank)
{
  cJSON *o = cJSON_CreateObject ();
  cJSON *m = cJSON_AddArrayToObject (o, "mean"), *b = cJSON_AddArrayToObject (o, "basis");

  for (int k = 0; k < dim; k++)
    cJSON_AddItemToArray (m, cJSON_CreateNumber (mean[k]));
  for (int k = 0; k < rank * dim; k++)
    cJSON_AddItemToArray (b, cJSON_CreateNumber (basis[k]));
  cJSON_AddNumberToObject (o, "rank", rank);
  return o;
}

char *
dfl_route_record (const float *block_mean, const float *block_basis,
                  const float *chain_mean, const float *chain_basis,
                  int dim, int rank, int block_rows, int chain_rows)
{
  cJSON *o = cJSON_CreateObject ();
  char *text, *out;

  cJSON_AddItemToObject (o, "block", subspace_json (block_mean, block_basis, dim, rank));
  cJSON_AddItemToObject (o, "chain", subspace_json (chain_mean, chain_basis, dim, rank));
  cJSON_AddNumberToObject (o, "block_rows", block_rows);
  cJSON_AddNumberToObject (o, "chain_rows", chain_rows);
  text = cJSON_PrintUnformatted (o);
  cJSON_Delete (o);
  out = g_strdup (text);
  cJSON_free (text);
  return out;
}

gboolean
dfl_safetensors_rewrite_metadata (const char *src, const char *dst, const char *key,
                                  const char *value, GError **error)
{
  g_autoptr (DflSafetensors) st = dfl_safetensors_open (src, error);
  g_autoptr (DflSafetensorsWriter) w = NULL;
  g_auto (GStrv) keys = NULL;

  if (!st)
    return FALSE;
  w = dfl_safetensors_writer_new ();
  for (guint i = 0; i < dfl_safetensors_n_tensors (st); i++) {
    const DflStoredTensor *t = dfl_safetensors_nth (st, i);
    if (!dfl_safetensors_writer_add (w, t->name, t->dtype, t->n_dims, t->shape, t->data, error))
      return FALSE;
  }
  /* the metadata as it was, the one key replaced */
  keys = dfl_safetensors_metadata_keys (st);
  for (int i = 0; keys[i]; i++)
    if (strcmp (keys[i], key))
      dfl_safetensors_writer_set_metadata (w, keys[i], dfl_safetensors_metadata (st, keys[i]));
  dfl_safetensors_writer_set_metadata (w, key, value);
  /* the data is copied into the writer, so the source may be replaced */
  return dfl_safetensors_writer_write (w, dst, error);
}
