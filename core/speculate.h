/* gst-dflash — one sequence's speculative decoding, a round at a time.
 *
 * A round: choose a drafter (the route), let it propose up to block − 1
 * tokens after the anchor, run the target over [anchor, drafts], accept the
 * longest prefix equal to the target's own choices plus the target's next
 * token (the bonus), rewind the target's cache and the drafter's context to
 * what was accepted, queue the accepted rows' taps, and make the bonus the
 * next anchor. With no drafter (DFL_ROUTE_NONE) a round is one plain
 * decoding step: plain and speculative decoding share this code and the
 * batch-invariant target, so they emit the same tokens.
 */
#pragma once

#include <glib.h>

#include "drafter.h"
#include "ngram.h"
#include "route-cost.h"
#include "sampler.h"
#include "target.h"

G_BEGIN_DECLS

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

typedef struct {
  DflSampler sampler;
  DflRoute route;
  gboolean selector;    /* re-score with the selector; FALSE: each row's argmax */
  int max_new;          /* new tokens at most */
  int head_width;       /* the head's first rows the block's logits cover; 0: all */
  int chain_max;        /* tokens a chain proposal may hold when there is no drafter (block − 1 otherwise) */
  DflNgram ngram;
  int match_min;        /* DFL_ROUTE_MATCH's and DFL_ROUTE_COST's threshold */
  int probe_every;      /* DFL_ROUTE_COST: decisions between tries of the arm it favours less */
} DflSpecParams;

void dfl_spec_params_init (DflSpecParams *p);

typedef struct {
  int prompt_tokens;
  int new_tokens;
  int rounds;           /* target passes after the prompt's */
  int block_rounds;
  int chain_rounds;
  gint64 round_tokens;  /* tokens the rounds gave (accepted + bonus), before any cut at the end */
  double prefill_s;
  double draft_s;
  double verify_s;
  int positions;        /* draft positions tracked: block − 1 */
  gint64 *proposed_at;  /* [positions]: rounds that proposed a token at position j + 1 */
  gint64 *accepted_at;  /* [positions]: rounds that had it accepted */
} DflSpecStats;

/* The verification step, shared by the loop below and the pipeline's
 * verifier element: run the target over [anchor, drafts] at the anchor's
 * position, accept while each draft is the target's own choice there, take
 * the target's next token as the bonus, and rewind the target's cache to
 * the accepted rows. It keeps the accepted rows' taps (for the drafter's
 * context) and the tip row (for the router). */
typedef struct _DflVerifier DflVerifier;

/* `max_drafts`: the most drafts a run may verify; the taps are those of the
 * drafter (n_taps may be 0). */
DflVerifier *dfl_verifier_new (const DflTarget *target, int max_drafts, const int *tap_layers,
                               int n_taps);
void dfl_verifier_free (DflVerifier *v);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (DflVerifier, dfl_verifier_free)
/* Verify `m` drafts after `anchor` at position `a` (seq's length must be a).
 * `*accepted`: drafts kept; `*bonus`: the target's token after them. Each
 * pass of j over 0 … m marks proposed and accepted positions in the
 * optional counters (block − 1 long). */
gboolean dfl_verifier_run (DflVerifier *v, DflTargetSeq *seq, const DflSampler *sampler,
                           gint64 a, int anchor, const int *drafts, int m,
                           int *accepted, int *bonus, GError **error);
/* Taps of the last run's accepted rows (positions a … a + accepted), and
 * the tip row (the final hidden row that chose the bonus). */
const float *dfl_verifier_taps (const DflVerifier *v);
const float *dfl_verifier_tip (const DflVerifier *v);

/* Which drafter a round goes to: TRUE for the chain. `tokens` (n) is the
 * text so far including the anchor; `chain`, `chain_n`: the chain's
 * proposal when the rule had to compute it (else *chain_n = −1). `cost`:
 * DFL_ROUTE_COST's figures, which decide the rounds below match_min; such
 * a round sets *costed, and its outcome goes to dfl_route_cost_observe. */
gboolean dfl_route_choose (DflRoute route, const DflDrafterWeights *drafter, const float *tip,
                           const DflNgram *ngram, int match_min, const int *tokens, int n,
                           int max_draft, int *chain, int *chain_n, DflRouteCost *cost,
                           gboolean *costed);

typedef struct _DflSpec DflSpec;

/* `drafter` may be NULL (then only NONE and CHAIN route). The drafter must
 * already have been checked against the target
 * (dfl_drafter_weights_check_target); the session binds it to the target
 * on the CPU and drafts in a context of its own. */
DflSpec *dfl_spec_new (const DflTarget *target, DflDrafterWeights *drafter,
                       const DflSpecParams *params, GError **error);
void dfl_spec_free (DflSpec *s);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (DflSpec, dfl_spec_free)

/* Run the prompt; the first new token (the first anchor) is appended to
 * `emitted`. */
gboolean dfl_spec_prefill (DflSpec *s, const int *ids, int n, GArray *emitted, GError **error);
/* One round; the tokens it emits are appended to `emitted`. */
gboolean dfl_spec_round (DflSpec *s, GArray *emitted, GError **error);
/* Why a sequence is over (DFL_SPEC_RUNNING while it is not). */
typedef enum {
  DFL_SPEC_RUNNING,
  DFL_SPEC_END_MAX_NEW,   /* max_new tokens emitted */
  DFL_SPEC_END_EOS,       /* an EOS emitted */
  DFL_SPEC_END_CONTEXT,   /* the next anchor would sit at max_position_embeddings */
} DflSpecEnd;

/* max_new reached, an EOS emitted, or the context full. A prompt longer
 * than the context is refused by dfl_spec_prefill (DFL_ERROR_LIMIT, naming
 * both numbers); one that fits runs until the context is full, and rounds
 * near the end verify only the drafts that still fit. */
gboolean dfl_spec_done (const DflSpec *s);
DflSpecEnd dfl_spec_end (const DflSpec *s);
/* Where the sequence ended at the context: a sentence saying so (naming the
 * target, max_position_embeddings and the tokens emitted) for the user;
 * else NULL. g_free() it. */
char *dfl_spec_end_message (const DflSpec *s);
const DflSpecStats *dfl_spec_stats (const DflSpec *s);
/* Every token so far: the prompt, then what was emitted. */
const int *dfl_spec_tokens (const DflSpec *s, int *n);
/* The block's proposal for the anchor `anchor` at position `a`: the
 * drafter's block (its context must reach a; dfl_draft_ctx_block) into
 * `out` at `head_width`, then the selector (`selector`) or each row's
 * argmax. Returns block − 1 drafts, or −1 with an error where the
 * drafter's context is short. */
int dfl_block_propose (DflDraftCtx *draft, gint64 a, int anchor, gboolean selector,
                       int head_width, const DflTensor *out, int *drafts, GError **error);
/* τ: tokens per target pass after the prompt's, bonus included. */
double dfl_spec_stats_tau (const DflSpecStats *st);

G_END_DECLS
