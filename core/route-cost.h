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
 * An arm's figure is its tokens a round over its seconds a round. The
 * tokens are a decayed mean (each round weighs DFL_ROUTE_COST_DECAY of the
 * one after it), so a drafter that finds its stride shows within tens of
 * rounds. The seconds are the MEDIAN of the arm's last
 * DFL_ROUTE_COST_WINDOW rounds: a round's time includes thread hand-offs
 * and waits behind other sequences, whose outliers a mean follows (one
 * slow round in ten moved a decayed mean by tens of percent, and the
 * choice with it) and a median does not.
 * Decisions are made stable against what is left of the noise by
 * hysteresis: the arm favoured stays favoured until the other's figure,
 * made of at least DFL_ROUTE_COST_MIN_ROUNDS rounds (one round is a
 * sample, not a figure), is ahead by DFL_ROUTE_COST_MARGIN. Where the two arms pay within that
 * margin of each other, either is as good, and the run keeps the one it
 * had; two runs on the same prompts thus differ only where the figures
 * themselves differ by more than the margin.
 * The chain goes first (it costs no drafting, and a one-off run of a few
 * dozen rounds should not pay for a block it may not need); the side the
 * figures favour less (at first the block, which has none) is tried once
 * every `probe_every` decisions, so its figure is made and stays current
 * (a machine that gets busier, a drafter that finds its stride).
 * Decisions depend only on what was observed: two estimators fed the same
 * rounds decide alike.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

#define DFL_ROUTE_COST_DECAY 0.9
#define DFL_ROUTE_COST_WINDOW 31
#define DFL_ROUTE_COST_MARGIN 0.10
#define DFL_ROUTE_COST_MIN_ROUNDS 3
#define DFL_ROUTE_COST_PROBE_EVERY 16

typedef enum {
  DFL_ROUTE_ARM_BLOCK,   /* draft the block */
  DFL_ROUTE_ARM_CHAIN,   /* take the chain's (short or empty) proposal */
} DflRouteArm;

typedef struct {
  double tokens[2], rounds[2];                  /* decayed sums, by arm */
  double seconds[2][DFL_ROUTE_COST_WINDOW];     /* the last rounds' seconds, a ring by arm */
  int seen[2];                    /* rounds in the ring, by arm (at most the window) */
  int next[2];                    /* the ring's next slot, by arm */
  DflRouteArm favoured;                         /* the arm decisions go to */
  int probe_every;                /* decisions between tries of the other arm (0: never) */
  int since_other;                /* decisions since the less favoured arm was tried */
} DflRouteCost;

void dfl_route_cost_init (DflRouteCost *rc, int probe_every);
/* The arm for a round without a good chain match. */
DflRouteArm dfl_route_cost_choose (DflRouteCost *rc);
/* What such a round gave: tokens (accepted + 1) in seconds (decision to
 * verdict). Non-positive seconds are ignored. */
void dfl_route_cost_observe (DflRouteCost *rc, DflRouteArm arm, int tokens, double seconds);
/* Tokens a second of an arm so far: its decayed mean tokens a round over
 * the median of its last rounds' seconds (0 before it was observed). */
double dfl_route_cost_rate (const DflRouteCost *rc, DflRouteArm arm);

G_END_DECLS
