/* gst-dflash — routing by measured cost (see route-cost.h). */
#include "route-cost.h"
#include "dfl-json.h"
#include "dfl-error.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void
dfl_route_cost_init (DflRouteCost *rc, int probe_every)
{
  memset (rc, 0, sizeof *rc);
  rc->favoured = DFL_ROUTE_ARM_CHAIN;
  rc->probe_every = MAX (probe_every, 0);
}

/* The longest gap between tries: DFL_ROUTE_COST_PROBE_MAX, or probe_every
 * where that is longer. */
static int
probe_top (const DflRouteCost *rc)
{
  return MAX (DFL_ROUTE_COST_PROBE_MAX, rc->probe_every);
}

int
dfl_route_cost_probe_gap (const DflRouteCost *rc)
{
  int top = probe_top (rc), gap = rc->probe_every;

  for (int i = 0; i < rc->probe_doublings && gap < top; i++)
    gap *= 2;
  return MIN (gap, top);
}

static int
cmp_double (const void *a, const void *b)
{
  double x = *(const double *) a, y = *(const double *) b;
  return (x > y) - (x < y);
}

static double
median_seconds (const DflRouteCost *rc, DflRouteArm arm)
{
  int n = rc->seen[arm];
  double v[DFL_ROUTE_COST_WINDOW];

  memcpy (v, rc->seconds[arm], n * sizeof *v);
  qsort (v, n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double
dfl_route_cost_rate (const DflRouteCost *rc, DflRouteArm arm)
{
  if (rc->seen[arm] == 0 || !(rc->rounds[arm] > 0))
    return 0.0;
  return rc->tokens[arm] / rc->rounds[arm] / median_seconds (rc, arm);
}

DflRouteArm
dfl_route_cost_choose (DflRouteCost *rc)
{
  DflRouteArm other = rc->favoured == DFL_ROUTE_ARM_BLOCK ? DFL_ROUTE_ARM_CHAIN
      : DFL_ROUTE_ARM_BLOCK;

  /* the other arm takes over only when clearly ahead: a near tie keeps the
   * arm the run has, so noise does not decide */
  if (rc->seen[other] >= DFL_ROUTE_COST_MIN_ROUNDS
      && dfl_route_cost_rate (rc, other)
         > (1.0 + DFL_ROUTE_COST_MARGIN) * dfl_route_cost_rate (rc, rc->favoured)) {
    rc->favoured = other;
    other = other == DFL_ROUTE_ARM_BLOCK ? DFL_ROUTE_ARM_CHAIN : DFL_ROUTE_ARM_BLOCK;
    rc->probe_doublings = 0;
  }
  if (rc->probe_every > 0 && ++rc->since_other >= dfl_route_cost_probe_gap (rc)) {
    rc->since_other = 0;
    /* a made figure that still trails: the next try waits twice as long */
    if (rc->seen[other] >= DFL_ROUTE_COST_MIN_ROUNDS
        && dfl_route_cost_probe_gap (rc) < probe_top (rc))
      rc->probe_doublings++;
    return other;
  }
  return rc->favoured;
}

void
dfl_route_cost_observe (DflRouteCost *rc, DflRouteArm arm, int tokens, double seconds)
{
  if (!(seconds > 0) || tokens < 0)
    return;
  rc->tokens[arm] = DFL_ROUTE_COST_DECAY * rc->tokens[arm] + tokens;
  rc->rounds[arm] = DFL_ROUTE_COST_DECAY * rc->rounds[arm] + 1;
  rc->seconds[arm][rc->next[arm]] = seconds;
  rc->next[arm] = (rc->next[arm] + 1) % DFL_ROUTE_COST_WINDOW;
  rc->seen[arm] = MIN (rc->seen[arm] + 1, DFL_ROUTE_COST_WINDOW);
}

static const char *const arm_names[] = { "block", "chain" };

cJSON *
dfl_route_cost_to_json (const DflRouteCost *rc)
{
  cJSON *obj = cJSON_CreateObject ();

  cJSON_AddStringToObject (obj, "favoured", arm_names[rc->favoured]);
  cJSON_AddNumberToObject (obj, "probe_doublings", rc->probe_doublings);
  cJSON_AddNumberToObject (obj, "since_try", rc->since_other);
  for (int arm = 0; arm < 2; arm++) {
    cJSON *a = cJSON_AddObjectToObject (obj, arm_names[arm]);
    cJSON *secs = cJSON_AddArrayToObject (a, "seconds");
    int n = rc->seen[arm], oldest = rc->next[arm] - n + DFL_ROUTE_COST_WINDOW;

    cJSON_AddNumberToObject (a, "tokens", rc->tokens[arm]);
    cJSON_AddNumberToObject (a, "rounds", rc->rounds[arm]);
    /* oldest first: the ring from its next slot on */
    for (int i = 0; i < n; i++)
      cJSON_AddItemToArray (secs, cJSON_CreateNumber (
          rc->seconds[arm][(oldest + i) % DFL_ROUTE_COST_WINDOW]));
  }
  return obj;
}

/* A finite number ≥ 0 (> 0 where `positive`) named `what`, or an error. */
static gboolean
number_of (const cJSON *item, const char *what, gboolean positive, double *out, GError **error)
{
  if (!cJSON_IsNumber (item) || !isfinite (item->valuedouble) || item->valuedouble < 0
      || (positive && item->valuedouble == 0)) {
    if (cJSON_IsNumber (item))
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "%s is %g, not a finite number %s 0",
                   what, item->valuedouble, positive ? ">" : "≥");
    else
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "%s is %s, not a number", what,
                   dfl_json_kind (item));
    return FALSE;
  }
  *out = item->valuedouble;
  return TRUE;
}

gboolean
dfl_route_cost_from_json (DflRouteCost *rc, const cJSON *json, GError **error)
{
  DflRouteCost got;
  const cJSON *fav = cJSON_GetObjectItemCaseSensitive (json, "favoured");
  double doublings, since;

  dfl_route_cost_init (&got, rc->probe_every);
  if (!cJSON_IsObject (json)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "the figures are %s, not an object",
                 dfl_json_kind (json));
    return FALSE;
  }
  if (!cJSON_IsString (fav)
      || (strcmp (fav->valuestring, "block") && strcmp (fav->valuestring, "chain"))) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "\"favoured\" is %s%s%s, not \"block\" or \"chain\"",
                 cJSON_IsString (fav) ? "\"" : dfl_json_kind (fav),
                 cJSON_IsString (fav) ? fav->valuestring : "", cJSON_IsString (fav) ? "\"" : "");
    return FALSE;
  }
  got.favoured = strcmp (fav->valuestring, "block") ? DFL_ROUTE_ARM_CHAIN : DFL_ROUTE_ARM_BLOCK;
  if (!number_of (cJSON_GetObjectItemCaseSensitive (json, "probe_doublings"),
                  "\"probe_doublings\"", FALSE, &doublings, error))
    return FALSE;
  /* past the cap a doubling changes nothing: 30 keep the int in range */
  got.probe_doublings = (int) MIN (doublings, 30.0);
  if (!number_of (cJSON_GetObjectItemCaseSensitive (json, "since_try"), "\"since_try\"", FALSE,
                  &since, error))
    return FALSE;
  /* decisions since the last try: the count goes on across runs, so the
   * tries keep their pace however short each run is */
  got.since_other = (int) MIN (since, (double) dfl_route_cost_probe_gap (&got));
  for (int arm = 0; arm < 2; arm++) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive (json, arm_names[arm]), *secs, *s;
    g_autofree char *t = g_strdup_printf ("\"%s\".tokens", arm_names[arm]);
    g_autofree char *r = g_strdup_printf ("\"%s\".rounds", arm_names[arm]);
    int n = 0;

    if (!cJSON_IsObject (a)) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "\"%s\" is %s, not an object",
                   arm_names[arm], dfl_json_kind (a));
      return FALSE;
    }
    if (!number_of (cJSON_GetObjectItemCaseSensitive (a, "tokens"), t, FALSE, &got.tokens[arm],
                    error)
        || !number_of (cJSON_GetObjectItemCaseSensitive (a, "rounds"), r, FALSE, &got.rounds[arm],
                       error))
      return FALSE;
    secs = cJSON_GetObjectItemCaseSensitive (a, "seconds");
    if (!cJSON_IsArray (secs) || cJSON_GetArraySize (secs) > DFL_ROUTE_COST_WINDOW) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "\"%s\".seconds is %s of %d, not an array of at most %d", arm_names[arm],
                   dfl_json_kind (secs), cJSON_IsArray (secs) ? cJSON_GetArraySize (secs) : 0,
                   DFL_ROUTE_COST_WINDOW);
      return FALSE;
    }
    cJSON_ArrayForEach (s, secs) {
      g_autofree char *what = g_strdup_printf ("\"%s\".seconds[%d]", arm_names[arm], n);
      if (!number_of (s, what, TRUE, &got.seconds[arm][n], error))
        return FALSE;
      n++;
    }
    if ((n > 0) != (got.rounds[arm] > 0)) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "\"%s\" has %d seconds over %g rounds",
                   arm_names[arm], n, got.rounds[arm]);
      return FALSE;
    }
    got.seen[arm] = n;
    got.next[arm] = n % DFL_ROUTE_COST_WINDOW;
  }
  *rc = got;
  return TRUE;
}

gboolean
dfl_route_cost_block_trails (const DflRouteCost *rc)
{
  return rc->favoured == DFL_ROUTE_ARM_CHAIN
         && rc->seen[DFL_ROUTE_ARM_BLOCK] >= DFL_ROUTE_COST_MIN_ROUNDS
         && rc->seen[DFL_ROUTE_ARM_CHAIN] >= DFL_ROUTE_COST_MIN_ROUNDS
         && dfl_route_cost_rate (rc, DFL_ROUTE_ARM_CHAIN)
            > (1.0 + DFL_ROUTE_COST_MARGIN) * dfl_route_cost_rate (rc, DFL_ROUTE_ARM_BLOCK)
         && (rc->probe_every == 0 || rc->since_other + 1 < dfl_route_cost_probe_gap (rc));
}

#define FIGURES_FORMAT "gst-dflash route figures"
static const char *const places[DFL_ROUTE_PLACES] = { "cpu", "cuda" };

gboolean
dfl_route_figures_read (const char *path, DflRouteCost cost[DFL_ROUTE_PLACES], GError **error)
{
  g_autofree char *text = NULL;
  g_autoptr (GError) read_error = NULL;
  DflRouteCost got[DFL_ROUTE_PLACES];
  const cJSON *format, *version;
  cJSON *root;
  gsize len;
  gboolean ok = TRUE;

  if (!g_file_get_contents (path, &text, &len, &read_error)) {
    if (g_error_matches (read_error, G_FILE_ERROR, G_FILE_ERROR_NOENT))
      return TRUE;
    g_set_error (error, DFL_ERROR, DFL_ERROR_IO, "%s", read_error->message);
    return FALSE;
  }
  if (!(root = dfl_json_parse (text, len, NULL, FALSE))) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "not JSON");
    return FALSE;
  }
  format = cJSON_GetObjectItemCaseSensitive (root, "format");
  version = cJSON_GetObjectItemCaseSensitive (root, "version");
  if (!cJSON_IsString (format) || strcmp (format->valuestring, FIGURES_FORMAT)
      || !cJSON_IsNumber (version) || version->valuedouble != 1) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "not a version 1 \"" FIGURES_FORMAT "\" file (format %s, version %s)",
                 dfl_json_kind (format), dfl_json_kind (version));
    cJSON_Delete (root);
    return FALSE;
  }
  memcpy (got, cost, sizeof got);
  for (int i = 0; ok && i < DFL_ROUTE_PLACES; i++) {
    const cJSON *place = cJSON_GetObjectItemCaseSensitive (root, places[i]);
    g_autoptr (GError) e = NULL;
    if (place && !dfl_route_cost_from_json (&got[i], place, &e)) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "\"%s\": %s", places[i], e->message);
      ok = FALSE;
    }
  }
  cJSON_Delete (root);
  if (ok)
    memcpy (cost, got, sizeof got);
  return ok;
}

gboolean
dfl_route_figures_write (const char *path, const DflRouteCost cost[DFL_ROUTE_PLACES],
                         GError **error)
{
  g_autofree char *dir = g_path_get_dirname (path);
  cJSON *root = cJSON_CreateObject ();
  char *text;
  gboolean ok;

  cJSON_AddStringToObject (root, "format", FIGURES_FORMAT);
  cJSON_AddNumberToObject (root, "version", 1);
  for (int i = 0; i < DFL_ROUTE_PLACES; i++)
    if (cost[i].seen[DFL_ROUTE_ARM_BLOCK] || cost[i].seen[DFL_ROUTE_ARM_CHAIN])
      cJSON_AddItemToObject (root, places[i], dfl_route_cost_to_json (&cost[i]));
  text = cJSON_Print (root);
  cJSON_Delete (root);
  if (g_mkdir_with_parents (dir, 0755) != 0) {
    int e = errno;
    g_set_error (error, DFL_ERROR, DFL_ERROR_IO, "cannot make the folder %s: %s", dir,
                 g_strerror (e));
    free (text);
    return FALSE;
  }
  ok = g_file_set_contents (path, text, -1, error);
  free (text);
  return ok;
}
