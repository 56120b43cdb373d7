/* gst-dflash — the speculative round, step by step.
 *
 * A sequence starts with the prompt's pass (prefill). Then each round:
 *
 *   route          which drafter proposes: the block, the chain, or none
 *   propose_chain  prompt lookup's tokens after the text so far
 *   propose_block  the DFlash block's tokens after the anchor
 *   verify         the target over [anchor, drafts]: the verdict (drafts
 *                  kept, the target's bonus token) and the rows the
 *                  drafter's context takes next
 *   settle         those rows into the drafter's context
 *
 * and one accumulator (DflRoundStats) counts what the rounds gave. The
 * core's loop (speculate.h) calls these steps in order for one sequence;
 * the pipeline's elements each call one of them on the round its buffer
 * carries. Both emit what the target alone would: a draft is kept only
 * where it is the target's own choice.
 *
 * The target may run on the host or on a device (target.h): the steps that
 * run it take taps as host rows or as a device tensor. The drafter here is
 * the host's (drafter.h).
 */
#pragma once

#include <glib.h>

#include "drafter.h"
#include "ngram.h"
#include "route-cost.h"
#include "sampler.h"
#include "target.h"

G_BEGIN_DECLS

/* Who proposed a round's drafts. */
typedef enum {
  DFL_ROUND_PLAIN,   /* nobody: a plain decoding step */
  DFL_ROUND_BLOCK,   /* the DFlash block */
  DFL_ROUND_CHAIN,   /* the chain drafter (prompt lookup) */
} DflRoundSource;

/* --- prefill ------------------------------------------------------------- */

/* Where a target pass's taps go: the residual stream after each of `layers`
 * (the drafter's tap layers), joined per row, as host rows (a host target)
 * or into a tensor on the target's device. n_layers 0: no taps. */
typedef struct {
  const int *layers;
  int n_layers;
  float *host;                /* [rows][n_layers · hidden] */
  const DflTensor *device;
} DflRoundTaps;

/* The prompt's pass: `ids` (n ≥ 1) at positions 0 … n − 1 of the empty
 * sequence `seq`, every row's taps where `taps` says (may be NULL), the last
 * row's final-normed hidden row into `tip` (hidden floats), and the first
 * new token, the first round's anchor, picked by `sampler` from the last
 * row's logits. */
gboolean dfl_round_prefill (DflTargetSeq *seq, const int *ids, int n, const DflSampler *sampler,
                            const DflRoundTaps *taps, float *tip, int *first, GError **error);

/* --- verify -------------------------------------------------------------- */

/* A round's outcome. */
typedef struct {
  int drafted;          /* drafts verified */
  int accepted;         /* the longest prefix of them that the target chose too */
  int bonus;            /* the target's own token after that prefix */
  /* Taps of the rows a … a + accepted, the drafter's next context rows:
   * [accepted + 1][tap width] host rows, or NULL where they went into the
   * caller's device tensor (or no taps were asked for). Valid until the
   * verifier's next run. */
  const float *taps;
  /* The final-normed row that chose the bonus (hidden floats; the router
   * reads it next round). Valid until the verifier's next run. */
  const float *tip;
} DflVerdict;

/* The verify step's rows, reused round after round: for up to `max_drafts`
 * drafts on targets of `target`'s config, taps of the drafter's `tap_layers`
 * (n_taps may be 0). */
typedef struct _DflVerifier DflVerifier;

DflVerifier *dfl_verifier_new (const DflTarget *target, int max_drafts, const int *tap_layers,
                               int n_taps);
void dfl_verifier_free (DflVerifier *v);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (DflVerifier, dfl_verifier_free)

/* Run the target of `seq` over [anchor, drafts] (m drafts, 0 ≤ m ≤
 * max_drafts) at the anchor's position `a`, which must be the sequence's
 * length; keep drafts while each is what `sampler` picks from the target's
 * row before it; take the target's pick after them as the bonus; truncate
 * the cache to a + accepted + 1. On a device target the taps go into
 * `device_taps` (rows for m + 1 at least; NULL: no taps), on a host target
 * into the verifier's rows (device_taps must be NULL). Fails, the cache as
 * it was, where the sequence is not at `a` (DFL_ERROR_MISMATCH) or the
 * target's pass fails. */
gboolean dfl_round_verify (DflVerifier *v, DflTargetSeq *seq, const DflSampler *sampler,
                           gint64 a, int anchor, const int *drafts, int m,
                           const DflTensor *device_taps, DflVerdict *verdict, GError **error);

/* One sequence's round in a batched verification: the arguments of
 * dfl_round_verify, and its verdict once run. */
typedef struct {
  DflTargetSeq *seq;
  const DflSampler *sampler;
  gint64 a;
  int anchor;
  const int *drafts;
  int m;
  const DflTensor *device_taps;
  DflVerdict verdict;
} DflRoundVerifyItem;

/* dfl_round_verify for the rounds of `n` distinct sequences of one target
 * in one target pass (dfl_target_forward_batch): each item's verdict, cache
 * and taps are what dfl_round_verify alone would give it (bitwise on the
 * CPU). The verdicts' rows stay valid until the verifier's next run. Fails,
 * every cache as it was, where an item is not at its `a` (naming the item)
 * or the pass fails; DFL_ERROR_UNSUPPORTED (nothing run) where the target's
 * engine runs one sequence a forward, so the caller verifies them one by
 * one. n = 1 is dfl_round_verify. */
gboolean dfl_round_verify_batch (DflVerifier *v, DflRoundVerifyItem *items, int n,
                                 GError **error);

/* --- settle -------------------------------------------------------------- */

/* The target's rows of positions pos … pos + n − 1 (`taps`: n rows of the
 * tap width, the taps joined as the geometry says, in host memory or on
 * the context's device) into the drafter's context `draft`, replacing what
 * it held from `pos` on (a rewind). `first`: the sequence's first rows (its
 * prompt's): the context starts over. With anchor_pos ≥ 0 every waiting row
 * settles now and the context must reach a block anchored there
 * (DFL_ERROR_LIMIT where a rewind went past what it holds); with −1 the rows
 * wait for the next block, which settles them first, so rounds the chain
 * drafts cost the drafter nothing. */
gboolean dfl_round_settle (DflDraftCtx *draft, gboolean first, gint64 pos, const DflTensor *taps,
                           gint64 anchor_pos, GError **error);

/* --- propose ------------------------------------------------------------- */

/* The block's proposal after `anchor` at position `a`: [anchor, MASK ×
 * (block − 1)] embedded with the target's table, run through the drafter's
 * block (its context must reach a) and the target's head over the first
 * `width` vocabulary rows, into `out` on the context's back end (the block
 * − 1 drafted rows, then their logits: dfl_draft_ctx_block_bytes). Where
 * `drafts` is given, the drafts are then chosen from them: the selector's
 * re-scoring where `rescore`, else each row's argmax (a pipeline's selector
 * element chooses instead). Returns block − 1, or −1 with an error where
 * the drafter's context is short. */
int dfl_round_propose_block (DflDraftCtx *draft, gint64 a, int anchor, int width,
                             gboolean rescore, const DflTensor *out, int *drafts, GError **error);

/* The blocks of several sequences' rounds in one pass (each as
 * dfl_round_propose_block proposes it without drafts: its rows and logits
 * into out[i]): dfl_draft_ctx_block_batch. */
gboolean dfl_round_propose_blocks (DflDraftBatch *batch, DflDraftCtx *const *drafts, int n,
                                   const gint64 *a, const guint32 *anchor, int width,
                                   const DflTensor *out, GError **error);

/* The rows queued into `n` sequences' contexts settled in one pass
 * (dfl_draft_ctx_settle_batch; each context alone where `batch` is NULL),
 * then each checked for its block at anchor_pos[i]. */
gboolean dfl_round_settle_batch (DflDraftBatch *batch, DflDraftCtx *const *drafts, int n,
                                 const gint64 *anchor_pos, GError **error);

/* Prompt lookup's proposal to follow tokens[0 … n − 1]: at most
 * `max_draft` tokens and, where draft_per_match > 0, at most the matched
 * suffix's length × draft_per_match (rounded down). Returns how many were
 * written to `drafts`; `*match` (may be NULL): the suffix matched (0: none). */
int dfl_round_propose_chain (const DflNgram *ngram, const int *tokens, int n, int max_draft,
                             double draft_per_match, int *drafts, int *match);

/* --- route --------------------------------------------------------------- */

typedef enum {
  DFL_ROUTE_NONE,    /* no drafting: plain decoding */
  DFL_ROUTE_BLOCK,   /* the drafter's block every round */
  DFL_ROUTE_CHAIN,   /* prompt lookup every round */
  DFL_ROUTE_AUTO,    /* the sidecar's router (dflash_route): margin > 0 is the block's */
  DFL_ROUTE_MATCH,   /* prompt lookup where its suffix match is ≥ match_min tokens, else the block */
  DFL_ROUTE_COST,    /* as MATCH, but below match_min the block only where it has given more
                      * tokens a second (route-cost.h) */
} DflRoute;

const char *dfl_route_name (DflRoute route);
gboolean dfl_route_from_name (const char *name, DflRoute *route);
/* Whether the route may send a round to the block (so needs a drafter). */
gboolean dfl_route_needs_drafter (DflRoute route);
/* Whether the route decides on the chain's match, so the chain proposes
 * before the decision. */
gboolean dfl_route_reads_match (DflRoute route);

/* Who drafts the round: PLAIN for DFL_ROUTE_NONE, else the block or the
 * chain. What the decision reads: AUTO the tip row (the target's
 * final-normed row that chose the anchor) and the drafter's router (no tip
 * or no drafter: the block); MATCH and COST the chain proposal's `match`;
 * COST below match_min the figures in `cost`, and such a round sets
 * *costed (may be NULL otherwise): its outcome goes to
 * dfl_route_cost_observe. */
DflRoundSource dfl_round_route (DflRoute route, int match_min, const DflDrafterWeights *drafter,
                                const float *tip, int match, DflRouteCost *cost,
                                gboolean *costed);

/* --- statistics ---------------------------------------------------------- */

/* What rounds gave, over one sequence or many. */
typedef struct {
  gint64 sequences;       /* prompts' passes */
  gint64 prompt_tokens;
  gint64 new_tokens;      /* tokens emitted, each sequence's first (its prompt pass's) included */
  gint64 rounds;          /* target passes after the prompts' */
  gint64 block_rounds;
  gint64 chain_rounds;
  gint64 round_tokens;    /* tokens the rounds gave (accepted + bonus), before any cut at the end */
  double prefill_s;
  double draft_s;
  double verify_s;
  double wall_s;          /* the rounds' wall time, where whoever runs them measures it */
  int positions;          /* draft positions counted (grows with the drafts) */
  gint64 *proposed_at;    /* [positions]: rounds that proposed a token at position j + 1 */
  gint64 *accepted_at;    /* [positions]: rounds that had it accepted */
} DflRoundStats;

/* Zero figures counting `positions` draft positions from the start. */
void dfl_round_stats_init (DflRoundStats *st, int positions);
void dfl_round_stats_clear (DflRoundStats *st);
/* Every figure back to zero; the positions stay. */
void dfl_round_stats_reset (DflRoundStats *st);
/* A prompt's pass of `tokens` tokens in `seconds`. */
void dfl_round_stats_add_prefill (DflRoundStats *st, int tokens, double seconds);
/* A round: its source, its verdict, the seconds its drafting and its
 * verification took. */
void dfl_round_stats_add_round (DflRoundStats *st, DflRoundSource source, const DflVerdict *v,
                                double draft_s, double verify_s);
/* Add another accumulator's figures (sums; positions grow to cover both). */
void dfl_round_stats_merge (DflRoundStats *to, const DflRoundStats *from);

/* τ: tokens per target pass after the prompts', bonus included. */
double dfl_round_stats_tau (const DflRoundStats *st);
/* Of the rounds that proposed a token at position j + 1, the share that
 * had it accepted; NaN where none proposed one. */
double dfl_round_stats_accept_rate (const DflRoundStats *st, int j);
/* Decode speed: the tokens after each sequence's first over wall_s (0
 * where no wall time was measured). */
double dfl_round_stats_tokens_per_s (const DflRoundStats *st);

G_END_DECLS
