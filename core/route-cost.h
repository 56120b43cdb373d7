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
 * (a machine that gets busier, a drafter that finds its stride). A try
 * made when that side's figure (of at least DFL_ROUTE_COST_MIN_ROUNDS
 * rounds) still trails doubles the gap to the next, up to
 * DFL_ROUTE_COST_PROBE_MAX decisions, and the arms' swapping sets it back:
 * a side that keeps losing is tried less and less (on two CPU cores a
 * try of the block costs several plain steps), one that gains is seen
 * within a few tries.
 * Decisions depend only on what was observed: two estimators fed the same
 * rounds decide alike.
 *
 * The figures can be kept between runs (dfl_route_cost_to_json, _from_json:
 * the router's figures-file): a run that starts from the last run's
 * figures on the same machine and pair neither re-learns them nor pays
 * again for the tries that made them.
 */
#pragma once

#include <glib.h>
#include <cjson/cJSON.h>

G_BEGIN_DECLS

#define DFL_ROUTE_COST_DECAY 0.9
#define DFL_ROUTE_COST_WINDOW 31
#define DFL_ROUTE_COST_MARGIN 0.10
#define DFL_ROUTE_COST_MIN_ROUNDS 3
#define DFL_ROUTE_COST_PROBE_EVERY 16
#define DFL_ROUTE_COST_PROBE_MAX 256

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
  int probe_doublings;            /* the gap now: probe_every doubled this many times */
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
/* Decisions between two tries of the less favoured arm now. */
int dfl_route_cost_probe_gap (const DflRouteCost *rc);

/* The figures (each arm's decayed sums and last rounds' seconds, the arm
 * favoured, the doublings of the gap between tries, the decisions since
 * the last) as a JSON object, and back: FALSE with a DFL_ERROR_FORMAT
 * error naming the member and its value where `json` is not such an
 * object (rc is then left as it was). The probe_every of `rc` stays its
 * own. */
cJSON *dfl_route_cost_to_json (const DflRouteCost *rc);
gboolean dfl_route_cost_from_json (DflRouteCost *rc, const cJSON *json, GError **error);

/* Whether the figures say the block trails a plain step clearly: its
 * figure made (DFL_ROUTE_COST_MIN_ROUNDS rounds), the chain favoured and
 * ahead by the margin, and the next try of the block not yet due. A run
 * can then go without the block at all (dflash generate builds the
 * chain's pipeline alone) and count its decisions towards that try. */
gboolean dfl_route_cost_block_trails (const DflRouteCost *rc);

/* Where a target runs, for the figures: its own for each. */
typedef enum {
  DFL_ROUTE_PLACE_CPU,
  DFL_ROUTE_PLACE_CUDA,
  DFL_ROUTE_PLACES
} DflRoutePlace;

/* A figures file: {"format": "gst-dflash route figures", "version": 1,
 * "cpu": figures, "cuda": figures}, each place's member where it has any.
 * Read: the places the file has replace those of `cost` (their
 * probe_every kept); a file that is not there is no error (a pair's first
 * run has none); FALSE with a DFL_ERROR_IO or DFL_ERROR_FORMAT error
 * naming what is wrong, `cost` then as it was. Write: the folder made where
 * missing, the file replaced at once (written beside it, renamed over it). */
gboolean dfl_route_figures_read (const char *path, DflRouteCost cost[DFL_ROUTE_PLACES],
                                 GError **error);
gboolean dfl_route_figures_write (const char *path, const DflRouteCost cost[DFL_ROUTE_PLACES],
                                  GError **error);

G_END_DECLS
