/* gst-dflash — turning a block's rows into tokens (the selector: top
 * candidates by logit re-scored against the token chosen before), and the
 * router's margin (which drafter a round is for).
 */
#include "drafter-private.h"
#include "dfl-error.h"
#include "dfl-json.h"
#include "dfl-kernels.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

/* Each row's probability in F32 with the kernels' exp (dfl_softmax_at):
 * libm's double exp over a row of 8192 logits took a fifth of a block's
 * time on two cores. */
int
dfl_draft_confident_rows (const float *logits, int rows, int width, const guint32 *chosen,
                          double floor)
{
  double conf = 1.0;

  g_return_val_if_fail (width > 0 || rows == 0, 0);
  for (int r = 0; r < rows; r++) {
    /* a token outside the row: a caller's error, and nothing kept from it on */
    g_return_val_if_fail (chosen[r] < (guint32) width, r);
    conf *= dfl_softmax_at (logits + (gsize) r * width, width, (int) chosen[r]);
    if (conf < floor)
      return r;
  }
  return rows;
}

int
dfl_top_k (const float *x, int n, int k, float *values, guint32 *indices)
{
  g_return_val_if_fail (k >= 1, 0);
  /* the kernel's (kernels/cpu/select.c): the first of equals kept, NaNs
   * skipped; the slots past the values found are padding */
  return dfl_top_k_row (x, n, k, values, (int32_t *) indices);
}

void
dfl_drafter_weights_select_project (const DflDrafterWeights *w, const float *hidden, int n,
                                    float *hp)
{
  const DflDrafterWeights *d = dfl_drafter_weights_base (w);

  g_return_if_fail (d->selector);
  dfl_matmul_w (&d->sel, hidden, n, d->g.hidden, hp, d->g.selector_rank, d->g.selector_rank, 0);
}

static void
book_row (const DflDrafterWeights *d, int which, guint32 token, float *dst)
{
  int rank = d->g.selector_rank;

  dfl_f16_to_f32_n (d->books[which] + (gsize) token * rank, dst, rank);
}

void
dfl_drafter_weights_select_with (const DflDrafterWeights *w, const float *hp, int n,
                                 const float *logits, int width, guint32 anchor, guint32 *chosen,
                                 guint32 *plain)
{
  const DflDrafterWeights *d = dfl_drafter_weights_base (w);
  const DflDrafterGeometry *g = &d->g;
  int top = d->selector ? g->selector_top : 1, rank = g->selector_rank;
  float *vals, *pc = NULL, *sc = NULL;
  guint32 *cand, prev = anchor;

  g_return_if_fail (width >= top && width <= g->vocab);
  g_return_if_fail (anchor < (guint32) g->vocab);
  g_return_if_fail (!d->selector || hp != NULL);
  vals = g_new (float, top);
  cand = g_new (guint32, top);
  if (d->selector) {
    pc = g_new (float, rank);
    sc = g_new (float, rank);
  }
  for (int j = 0; j < n; j++) {
    int got = dfl_top_k (logits + (gsize) j * width, width, top, vals, cand);
    guint32 best_tok = got ? cand[0] : 0;
    if (plain)
      plain[j] = best_tok;
    if (d->selector && got) {
      float best = -INFINITY;
      book_row (d, 0, prev, pc);
      for (int i = 0; i < rank; i++)
        pc[i] *= hp[(gsize) j * rank + i];
      for (int c = 0; c < got; c++) {
        float s = 0.0f;
        book_row (d, 1, cand[c], sc);
        for (int i = 0; i < rank; i++)
          s += pc[i] * sc[i];
        s += vals[c];
        /* strictly above: a tie keeps the earlier (higher-logit) candidate */
        if (s > best) {
          best = s;
          best_tok = cand[c];
        }
      }
    }
    prev = best_tok;
    if (chosen)
      chosen[j] = best_tok;
  }
  g_free (vals);
  g_free (cand);
  g_free (pc);
  g_free (sc);
}

void
dfl_drafter_weights_select (const DflDrafterWeights *w, const float *hidden, int n,
                            const float *logits, int width, guint32 anchor, guint32 *chosen,
                            guint32 *plain)
{
  const DflDrafterWeights *d = dfl_drafter_weights_base (w);
  float *hp = NULL;

  if (d->selector) {
    hp = g_new (float, (gsize) n * d->g.selector_rank);
    dfl_drafter_weights_select_project (d, hidden, n, hp);
  }
  dfl_drafter_weights_select_with (d, hp, n, logits, width, anchor, chosen, plain);
  g_free (hp);
}

/* --- the router --- */

void
dfl_route_free (DflRoute *r)
{
  if (!r)
    return;
  g_free (r->block.mean);
  g_free (r->block.basis);
  g_free (r->chain.mean);
  g_free (r->chain.basis);
  g_free (r);
}

/* Numbers of a list, lists of lists flattened (a basis may be either). */
static gboolean
flatten (const cJSON *item, GArray *out)
{
  const cJSON *e;

  if (cJSON_IsNumber (item)) {
    /* past float's range a value becomes infinite: refused as well */
    float v = (float) item->valuedouble;
    g_array_append_val (out, v);
    return isfinite (v);
  }
  if (!cJSON_IsArray (item))
    return FALSE;
  cJSON_ArrayForEach (e, item)
    if (!flatten (e, out))
      return FALSE;
  return TRUE;
}

static gboolean
subspace_parse (const cJSON *root, const char *key, int hidden, DflSubspace *s,
                const char *origin, GError **error)
{
  const cJSON *o = cJSON_GetObjectItemCaseSensitive (root, key);
  const cJSON *rank = o ? cJSON_GetObjectItemCaseSensitive (o, "rank") : NULL;
  GArray *mean = g_array_new (FALSE, FALSE, sizeof (float));
  GArray *basis = g_array_new (FALSE, FALSE, sizeof (float));
  gboolean ok = FALSE;

  if (!cJSON_IsObject (o) || !cJSON_IsNumber (rank) || rank->valuedouble < 0
      || rank->valuedouble > hidden || rank->valuedouble != floor (rank->valuedouble)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: dflash_route.%s is not {\"mean\": [...], \"basis\": [...], \"rank\": r} with r from 0 to hidden %d",
                 origin, key, hidden);
    goto out;
  }
  s->rank = (int) rank->valuedouble;
  if (!flatten (cJSON_GetObjectItemCaseSensitive (o, "mean"), mean)
      || !flatten (cJSON_GetObjectItemCaseSensitive (o, "basis"), basis)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: dflash_route.%s: mean and basis must be lists of finite numbers", origin, key);
    goto out;
  }
  if (mean->len != (guint) hidden || basis->len != (guint) (s->rank * hidden)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: dflash_route.%s has a mean of %u and a basis of %u values; expected %d and rank %d × %d",
                 origin, key, mean->len, basis->len, hidden, s->rank, hidden);
    goto out;
  }
  s->mean = (float *) g_array_free (mean, FALSE);
  s->basis = (float *) g_array_free (basis, FALSE);
  mean = basis = NULL;
  ok = TRUE;
out:
  if (mean)
    g_array_free (mean, TRUE);
  if (basis)
    g_array_free (basis, TRUE);
  return ok;
}

/* The count of rows `key` the router was fitted on, where the record has
 * one: a whole number from 0 to 2^53 (what a double holds exactly), else
 * an error naming it and its value. */
static gboolean
row_count (const cJSON *root, const char *key, gint64 *count, const char *origin,
           GError **error)
{
  const cJSON *n = cJSON_GetObjectItemCaseSensitive (root, key);

  if (!n)
    return TRUE;
  if (!cJSON_IsNumber (n)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "%s: dflash_route.%s is %s, not a number",
                 origin, key, dfl_json_kind (n));
    return FALSE;
  }
  if (!(n->valuedouble >= 0.0 && n->valuedouble <= 9007199254740992.0)
      || n->valuedouble != floor (n->valuedouble)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: dflash_route.%s is %g, not a count of rows (a whole number from 0 to "
                 "2^53)", origin, key, n->valuedouble);
    return FALSE;
  }
  *count = (gint64) n->valuedouble;
  return TRUE;
}

DflRoute *
dfl_route_parse (const char *json, int hidden, const char *origin, GError **error)
{
  cJSON *root = dfl_json_parse (json, strlen (json) + 1, NULL, FALSE);
  DflRoute *r = g_new0 (DflRoute, 1);

  if (!cJSON_IsObject (root)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "%s: dflash_route is not a JSON object", origin);
    goto fail;
  }
  if (!subspace_parse (root, "block", hidden, &r->block, origin, error)
      || !subspace_parse (root, "chain", hidden, &r->chain, origin, error))
    goto fail;
  if (!row_count (root, "block_rows", &r->block_rows, origin, error)
      || !row_count (root, "chain_rows", &r->chain_rows, origin, error))
    goto fail;
  cJSON_Delete (root);
  return r;
fail:
  cJSON_Delete (root);
  dfl_route_free (r);
  return NULL;
}

/* Squared residual of u after projecting onto the subspace (mean, basis). */
static double
recon_error (const DflSubspace *s, const double *u, double *c, int hidden)
{
  double err = 0.0;

  for (int i = 0; i < hidden; i++)
    c[i] = u[i] - s->mean[i];
  /* residual: c minus its part along each basis row (orthonormal rows, so
   * the coefficients come from the centred row itself) */
  {
    double *coef = g_new (double, MAX (s->rank, 1));
    for (int k = 0; k < s->rank; k++) {
      const float *b = s->basis + (gsize) k * hidden;
      double dot = 0.0;
      for (int i = 0; i < hidden; i++)
        dot += b[i] * c[i];
      coef[k] = dot;
    }
    for (int k = 0; k < s->rank; k++) {
      const float *b = s->basis + (gsize) k * hidden;
      for (int i = 0; i < hidden; i++)
        c[i] -= coef[k] * b[i];
    }
    g_free (coef);
  }
  for (int i = 0; i < hidden; i++)
    err += c[i] * c[i];
  return err;
}

gboolean
dfl_drafter_weights_has_route (const DflDrafterWeights *w)
{
  return dfl_drafter_weights_base (w)->route != NULL;
}

float
dfl_drafter_weights_route_margin (const DflDrafterWeights *w, const float *row)
{
  const DflDrafterWeights *d = dfl_drafter_weights_base (w);
  int hs = d->g.hidden;
  double norm = 0.0, *u, *c, margin;

  if (!d->route)
    return 0.0f;
  u = g_new (double, hs);
  c = g_new (double, hs);
  for (int i = 0; i < hs; i++)
    norm += (double) row[i] * row[i];
  norm = MAX (sqrt (norm), 1e-12);
  for (int i = 0; i < hs; i++)
    u[i] = row[i] / norm;
  margin = recon_error (&d->route->chain, u, c, hs) - recon_error (&d->route->block, u, c, hs);
  g_free (u);
  g_free (c);
  return (float) margin;
}
