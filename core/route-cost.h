/* gst-dflash — routing by measured cost: the block where it pays.
 *
 * A round whose prompt lookup found a good match goes to the chain: its
 * drafts cost nothing to make and are mostly kept. For the other rounds
 * the choice is between drafting a block (its cost: the drafter's pass,
 * then verifying more rows) and taking the chain's short or empty proposal
 * (little more than a plain decoding step). Which pays depends on the
 * machine and the pair as much as on the drafter: with a large target on
 * a GPU a block costs a fraction of a target step; with a small one, on
 * two CPU cores or on a GPU alike, it costs several. So neither is fixed:
 * both are measured as the loop runs, as tokens a round (accepted + 1) over
 * the round's seconds from the decision to the verdict, and each round
 * goes to the one with more tokens a second.
 *
 * The figures are ratios of decayed sums (each observation weighs
 * DFL_ROUTE_COST_DECAY of the one before), so they follow a change of
 * load within tens of rounds, and a slow round weighs by its time rather
 * than counting as one more mean. The chain goes first (it costs no
 * drafting, and a one-off run of a few dozen rounds should not pay for a
 * block it may not need); the side the figures favour less (at first the
 * block, which has none) is tried once every `probe_every` decisions, so
 * its figure is made and stays current (a machine that gets busier, a
 * drafter that finds its stride).
 * Decisions depend only on what was observed: two estimators fed the same
 * rounds decide alike.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

#define DFL_ROUTE_COST_DECAY 0.9
#define DFL_ROUTE_COST_PROBE_EVERY 16

typedef enum {
  DFL_ROUTE_ARM_BLOCK,   /* draft the block */
  DFL_ROUTE_ARM_CHAIN,   /* take the chain's (short or empty) proposal */
} DflRouteArm;

typedef struct {
  double tokens[2], seconds[2];   /* decayed sums, by arm */
  int probe_every;                /* decisions between tries of the other arm (0: never) */
  int since_other;                /* decisions since the less favoured arm was tried */
} DflRouteCost;

void dfl_route_cost_init (DflRouteCost *rc, int probe_every);
/* The arm for a round without a good chain match. */
DflRouteArm dfl_route_cost_choose (DflRouteCost *rc);
/* What such a round gave: tokens (accepted + 1) in seconds (decision to
 * verdict). Non-positive seconds are ignored. */
void dfl_route_cost_observe (DflRouteCost *rc, DflRouteArm arm, int tokens, double seconds);
/* Tokens a second of an arm so far (0 before it was observed). */
double dfl_route_cost_rate (const DflRouteCost *rc, DflRouteArm arm);

G_END_DECLS
