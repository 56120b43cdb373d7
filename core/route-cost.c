/* gst-dflash — routing by measured cost (see route-cost.h). */
#include "route-cost.h"

void
dfl_route_cost_init (DflRouteCost *rc, int probe_every)
{
  *rc = (DflRouteCost) { .probe_every = MAX (probe_every, 0) };
}

double
dfl_route_cost_rate (const DflRouteCost *rc, DflRouteArm arm)
{
  return rc->seconds[arm] > 0 ? rc->tokens[arm] / rc->seconds[arm] : 0.0;
}

DflRouteArm
dfl_route_cost_choose (DflRouteCost *rc)
{
  DflRouteArm best, other;

  /* a tie (nothing seen yet, say) goes to the chain: it costs no drafting */
  best = dfl_route_cost_rate (rc, DFL_ROUTE_ARM_BLOCK) > dfl_route_cost_rate (rc, DFL_ROUTE_ARM_CHAIN)
      ? DFL_ROUTE_ARM_BLOCK : DFL_ROUTE_ARM_CHAIN;
  other = best == DFL_ROUTE_ARM_BLOCK ? DFL_ROUTE_ARM_CHAIN : DFL_ROUTE_ARM_BLOCK;
  if (rc->probe_every > 0 && ++rc->since_other >= rc->probe_every) {
    rc->since_other = 0;
    return other;
  }
  return best;
}

void
dfl_route_cost_observe (DflRouteCost *rc, DflRouteArm arm, int tokens, double seconds)
{
  if (!(seconds > 0) || tokens < 0)
    return;
  rc->tokens[arm] = DFL_ROUTE_COST_DECAY * rc->tokens[arm] + tokens;
  rc->seconds[arm] = DFL_ROUTE_COST_DECAY * rc->seconds[arm] + seconds;
}
