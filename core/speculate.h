/* gst-dflash — one sequence's speculative decoding, a round at a time.
 *
 * The loop over the round's steps (round.h): route, let the chosen drafter
 * propose up to block − 1 tokens after the anchor, verify [anchor, drafts]
 * on the target, queue the accepted rows' taps into the drafter's context,
 * and make the bonus the next anchor. With no drafter (DFL_ROUTE_NONE) a
 * round is one plain decoding step: plain and speculative decoding share
 * these steps and the batch-invariant target, so they emit the same tokens.
 */
#pragma once

#include <glib.h>

#include "round.h"

G_BEGIN_DECLS

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

typedef struct _DflSpec DflSpec;

/* `drafter` may be NULL (then only NONE and CHAIN route). The drafter must
 * already have been checked against the target
 * (dfl_drafter_weights_check_target); the loop binds it to the target on
 * the CPU and drafts in a context of its own. */
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
/* The sequence's figures so far. */
const DflRoundStats *dfl_spec_stats (const DflSpec *s);
/* Every token so far: the prompt, then what was emitted. */
const int *dfl_spec_tokens (const DflSpec *s, int *n);

G_END_DECLS
