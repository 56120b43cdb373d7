/* gst-dflash — routing by measured cost (see route-cost.h). */
#include "route-cost.h"

#include <stdlib.h>
#include <string.h>

void
dfl_route_cost_init (DflRouteCost *rc, int probe_every)
{
  memset (rc, 0, sizeof *rc);
  rc->favoured = DFL_ROUTE_ARM_CHAIN;
  rc->probe_every = MAX (probe_every, 0);
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
  }
  if (rc->probe_every > 0 && ++rc->since_other >= rc->probe_every) {
    rc->since_other = 0;
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
