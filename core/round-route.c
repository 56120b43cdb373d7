/* gst-dflash — the round's route: who drafts it. One decision for the
 * core's loop and the pipeline's router. */
#include "round.h"

static const char *route_names[] = { "none", "block", "chain", "auto", "match", "cost" };

const char *
dfl_route_name (DflRoute route)
{
  return route_names[route];
}

gboolean
dfl_route_from_name (const char *name, DflRoute *route)
{
  for (guint i = 0; i < G_N_ELEMENTS (route_names); i++)
    if (!g_strcmp0 (name, route_names[i])) {
      *route = i;
      return TRUE;
    }
  return FALSE;
}

gboolean
dfl_route_needs_drafter (DflRoute route)
{
  return route == DFL_ROUTE_BLOCK || route == DFL_ROUTE_AUTO || route == DFL_ROUTE_MATCH
      || route == DFL_ROUTE_COST;
}

gboolean
dfl_route_reads_match (DflRoute route)
{
  return route == DFL_ROUTE_MATCH || route == DFL_ROUTE_COST;
}

DflRoundSource
dfl_round_route (DflRoute route, int match_min, const DflDrafterWeights *drafter, const float *tip,
                 int match, DflRouteCost *cost, gboolean *costed)
{
  if (costed)
    *costed = FALSE;
  switch (route) {
    case DFL_ROUTE_NONE:
      return DFL_ROUND_PLAIN;
    case DFL_ROUTE_CHAIN:
      return DFL_ROUND_CHAIN;
    case DFL_ROUTE_AUTO:
      return drafter && tip && dfl_drafter_weights_route_margin (drafter, tip) <= 0.0f
          ? DFL_ROUND_CHAIN : DFL_ROUND_BLOCK;
    case DFL_ROUTE_MATCH:
      return match >= match_min ? DFL_ROUND_CHAIN : DFL_ROUND_BLOCK;
    case DFL_ROUTE_COST:
      /* the match rule, and below it whichever arm has paid better */
      if (match >= match_min)
        return DFL_ROUND_CHAIN;
      g_return_val_if_fail (cost != NULL && costed != NULL, DFL_ROUND_BLOCK);
      *costed = TRUE;
      return dfl_route_cost_choose (cost) == DFL_ROUTE_ARM_CHAIN ? DFL_ROUND_CHAIN
          : DFL_ROUND_BLOCK;
    case DFL_ROUTE_BLOCK:
    default:
      return DFL_ROUND_BLOCK;
  }
}
