/* gst-dflash — the round's steps one by one (core/round.h): the verify
 * step's verdict on crafted drafts, alone and batched, the route's decision for every policy,
 * the chain's proposal, the drafter's settle and block steps, and the
 * figures accumulator.
 */
#include <glib.h>
#include <math.h>
#include <string.h>

#include "dfl-error.h"
#include "round.h"
#include "spec-fixtures.h"
#include "test-support.h"

#define PROMPT_LEN 6
#define TRUTH_LEN 8

static const int prompt[PROMPT_LEN] = { 11, 230, 57, 902, 14, 230 };
static const DflSampler greedy = { .temperature = 0 };

/* The target's own greedy continuation of the prompt: truth[0] is the
 * prompt pass's token, then one plain step (no drafts) after another. */
static void
plain_truth (const DflTarget *t, int *truth)
{
  g_autoptr (DflTargetSeq) seq = dfl_target_seq_new (t);
  g_autoptr (DflVerifier) v = dfl_verifier_new (t, 0, NULL, 0);
  g_autofree float *tip = g_new (float, dfl_target_config (t)->hidden);
  g_autoptr (GError) error = NULL;
  DflVerdict verdict;

  g_assert_true (dfl_round_prefill (seq, prompt, PROMPT_LEN, &greedy, NULL, tip, &truth[0],
                                    &error));
  for (int i = 1; i < TRUTH_LEN; i++) {
    g_assert_true (dfl_round_verify (v, seq, &greedy, PROMPT_LEN + i - 1, truth[i - 1], NULL, 0,
                                     NULL, &verdict, &error));
    g_assert_no_error (error);
    g_assert_cmpint (verdict.drafted, ==, 0);
    g_assert_cmpint (verdict.accepted, ==, 0);
    truth[i] = verdict.bonus;
  }
}

/* Verify `drafts` after truth[0] on a fresh sequence of the prompt. */
static void
verify_after_prompt (const DflTarget *t, DflTargetSeq *seq, DflVerifier *v, const int *drafts,
                     int m, DflVerdict *verdict)
{
  g_autofree float *tip = g_new (float, dfl_target_config (t)->hidden);
  g_autoptr (GError) error = NULL;
  int first;

  g_assert_true (dfl_round_prefill (seq, prompt, PROMPT_LEN, &greedy, NULL, tip, &first, &error));
  g_assert_true (dfl_round_verify (v, seq, &greedy, PROMPT_LEN, first, drafts, m, NULL, verdict,
                                   &error));
  g_assert_no_error (error);
}

/* Drafts that agree with the target for two tokens and then not: two
 * accepted, the target's own third token the bonus, the cache cut after
 * the accepted rows; all-correct drafts are all kept. */
static void
test_verify_verdict (void)
{
  g_autoptr (DflTarget) t = spec_fixture_target ("bf16-tied");
  const DflQwen3Config *c = dfl_target_config (t);
  int truth[TRUTH_LEN], drafts[4];
  int taps_layers[2] = { 0, c->layers - 1 };
  DflVerdict verdict;

  plain_truth (t, truth);
  {
    g_autoptr (DflTargetSeq) seq = dfl_target_seq_new (t);
    g_autoptr (DflVerifier) v = dfl_verifier_new (t, 4, taps_layers, 2);
    drafts[0] = truth[1];
    drafts[1] = truth[2];
    drafts[2] = (truth[3] + 1) % c->vocab;   /* not the target's */
    drafts[3] = truth[4];
    verify_after_prompt (t, seq, v, drafts, 4, &verdict);
    g_assert_cmpint (verdict.drafted, ==, 4);
    g_assert_cmpint (verdict.accepted, ==, 2);
    g_assert_cmpint (verdict.bonus, ==, truth[3]);
    /* the anchor and the two accepted rows stay in the cache */
    g_assert_cmpint (dfl_target_seq_length (seq), ==, PROMPT_LEN + 3);
    g_assert_nonnull (verdict.taps);
    g_assert_nonnull (verdict.tip);
  }
  {
    g_autoptr (DflTargetSeq) seq = dfl_target_seq_new (t);
    g_autoptr (DflVerifier) v = dfl_verifier_new (t, 4, NULL, 0);
    memcpy (drafts, truth + 1, sizeof drafts);
    verify_after_prompt (t, seq, v, drafts, 4, &verdict);
    g_assert_cmpint (verdict.accepted, ==, 4);
    g_assert_cmpint (verdict.bonus, ==, truth[5]);
    g_assert_cmpint (dfl_target_seq_length (seq), ==, PROMPT_LEN + 5);
    g_assert_null (verdict.taps);
  }
  {
    /* a wrong first draft: nothing kept, the bonus is the plain step's */
    g_autoptr (DflTargetSeq) seq = dfl_target_seq_new (t);
    g_autoptr (DflVerifier) v = dfl_verifier_new (t, 4, NULL, 0);
    drafts[0] = (truth[1] + 7) % c->vocab;
    verify_after_prompt (t, seq, v, drafts, 1, &verdict);
    g_assert_cmpint (verdict.accepted, ==, 0);
    g_assert_cmpint (verdict.bonus, ==, truth[1]);
    g_assert_cmpint (dfl_target_seq_length (seq), ==, PROMPT_LEN + 1);
  }
}

/* The verdict's tip and taps are the rows a plain run computes there
 * (the batch-invariant target), and a round anchored where the cache is
 * not is refused, the cache untouched. */
static void
test_verify_rows (void)
{
  g_autoptr (DflTarget) t = spec_fixture_target ("bf16-tied");
  const DflQwen3Config *c = dfl_target_config (t);
  int truth[TRUTH_LEN], layers[1] = { 1 }, drafts[3];
  g_autoptr (DflTargetSeq) plain = dfl_target_seq_new (t);
  g_autoptr (DflTargetSeq) seq = dfl_target_seq_new (t);
  g_autoptr (DflVerifier) v = dfl_verifier_new (t, 3, layers, 1);
  g_autofree float *want_taps = g_new (float, (gsize) (PROMPT_LEN + 3) * c->hidden);
  g_autofree float *want_hidden = g_new (float, (gsize) (PROMPT_LEN + 3) * c->hidden);
  g_autoptr (GError) error = NULL;
  DflVerdict verdict;
  int ids[PROMPT_LEN + 3];

  plain_truth (t, truth);
  memcpy (ids, prompt, sizeof prompt);
  memcpy (ids + PROMPT_LEN, truth, 3 * sizeof (int));
  {
    DflForwardOut out = { .tap_layers = layers, .n_tap_layers = 1, .taps = want_taps,
                          .logits_from = 0, .hidden = want_hidden };
    g_assert_true (dfl_target_forward (t, plain, ids, PROMPT_LEN + 3, &out, &error));
  }
  drafts[0] = truth[1];
  drafts[1] = truth[2];
  drafts[2] = (truth[3] + 1) % c->vocab;
  verify_after_prompt (t, seq, v, drafts, 3, &verdict);
  g_assert_cmpint (verdict.accepted, ==, 2);
  /* taps of positions a … a + 2, the tip the row at a + 2 */
  g_assert_cmpmem (verdict.taps, sizeof (float) * 3 * c->hidden,
                   want_taps + (gsize) PROMPT_LEN * c->hidden, sizeof (float) * 3 * c->hidden);
  g_assert_cmpmem (verdict.tip, sizeof (float) * c->hidden,
                   want_hidden + (gsize) (PROMPT_LEN + 2) * c->hidden, sizeof (float) * c->hidden);

  g_assert_false (dfl_round_verify (v, seq, &greedy, PROMPT_LEN, truth[0], drafts, 1, NULL,
                                    &verdict, &error));
  g_assert_error (error, DFL_ERROR, DFL_ERROR_MISMATCH);
  g_assert_cmpint (dfl_target_seq_length (seq), ==, PROMPT_LEN + 3);
}

/* The rounds of several sequences verified in one pass: each verdict (kept
 * drafts, bonus, taps, tip) and cache bitwise what the sequence verified
 * alone gives, greedy and sampled, different prompt lengths and draft
 * counts, over two passes where one sequence leaves and the others go on;
 * a round anchored where its cache is not is refused naming it, no cache
 * touched. */
#define BATCH 4
static void
test_verify_batch (void)
{
  g_autoptr (DflTarget) t = spec_fixture_target ("bf16-tied");
  const DflQwen3Config *c = dfl_target_config (t);
  const int lens[BATCH] = { 6, 2, 5, 1 }, ms[BATCH] = { 4, 0, 3, 1 };
  const DflSampler samplers[BATCH] = { { .temperature = 0 }, { .temperature = 0.8f, .top_p = 0.9f,
                                         .seed = 7 }, { .temperature = 0 },
                                       { .temperature = 1.0f, .top_p = 1.0f, .seed = 3 } };
  int layers[2] = { 0, 2 }, tw = 2 * c->hidden;
  g_autoptr (DflVerifier) vb = dfl_verifier_new (t, 4, layers, 2);
  g_autoptr (DflVerifier) vs = dfl_verifier_new (t, 4, layers, 2);
  g_autofree float *tip = g_new (float, c->hidden);
  g_autoptr (GError) error = NULL;
  DflTargetSeq *batch[BATCH], *solo[BATCH];
  int anchor[BATCH], drafts[BATCH][4];
  DflRoundVerifyItem items[BATCH];

  for (int i = 0; i < BATCH; i++) {
    int first;
    batch[i] = dfl_target_seq_new (t);
    solo[i] = dfl_target_seq_new (t);
    g_assert_true (dfl_round_prefill (batch[i], prompt, lens[i], &samplers[i], NULL, tip,
                                      &anchor[i], &error));
    g_assert_true (dfl_round_prefill (solo[i], prompt, lens[i], &samplers[i], NULL, tip, &first,
                                      &error));
    g_assert_cmpint (first, ==, anchor[i]);
  }
  for (int pass = 0; pass < 2; pass++) {
    /* the second pass: the first sequence has left */
    int from = pass, n = BATCH - pass;
    for (int i = from; i < BATCH; i++) {
      for (int j = 0; j < 4; j++)
        /* drafts that the greedy target partly agrees with: the plain
         * truth's tokens, one of them off */
        drafts[i][j] = j == 2 ? (anchor[i] + 5) % c->vocab : prompt[(i + j) % PROMPT_LEN];
      items[i - from] = (DflRoundVerifyItem) { .seq = batch[i], .sampler = &samplers[i],
                                               .a = dfl_target_seq_length (batch[i]),
                                               .anchor = anchor[i], .drafts = drafts[i],
                                               .m = ms[i] };
    }
    g_assert_true (dfl_round_verify_batch (vb, items, n, &error));
    g_assert_no_error (error);
    for (int i = from; i < BATCH; i++) {
      const DflVerdict *got = &items[i - from].verdict;
      DflVerdict want;
      g_assert_true (dfl_round_verify (vs, solo[i], &samplers[i], dfl_target_seq_length (solo[i]),
                                       anchor[i], drafts[i], ms[i], NULL, &want, &error));
      g_assert_cmpint (got->drafted, ==, want.drafted);
      g_assert_cmpint (got->accepted, ==, want.accepted);
      g_assert_cmpint (got->bonus, ==, want.bonus);
      g_assert_cmpmem (got->taps, sizeof (float) * (got->accepted + 1) * tw, want.taps,
                       sizeof (float) * (want.accepted + 1) * tw);
      g_assert_cmpmem (got->tip, sizeof (float) * c->hidden, want.tip, sizeof (float) * c->hidden);
      g_assert_cmpint (dfl_target_seq_length (batch[i]), ==, dfl_target_seq_length (solo[i]));
    }
    /* the next pass starts from the bonus (read before the solo run
     * reused its rows) */
    for (int i = from; i < BATCH; i++)
      anchor[i] = items[i - from].verdict.bonus;
  }
  {
    int before[BATCH];
    for (int i = 0; i < BATCH; i++) {
      before[i] = dfl_target_seq_length (batch[i]);
      items[i] = (DflRoundVerifyItem) { .seq = batch[i], .sampler = &samplers[i], .a = before[i],
                                        .anchor = anchor[i], .drafts = drafts[i], .m = 1 };
    }
    items[2].a = before[2] + 1;
    g_assert_false (dfl_round_verify_batch (vb, items, BATCH, &error));
    g_assert_error (error, DFL_ERROR, DFL_ERROR_MISMATCH);
    g_assert_nonnull (strstr (error->message, "round 2 of the batch"));
    for (int i = 0; i < BATCH; i++)
      g_assert_cmpint (dfl_target_seq_length (batch[i]), ==, before[i]);
  }
  for (int i = 0; i < BATCH; i++) {
    dfl_target_seq_free (batch[i]);
    dfl_target_seq_free (solo[i]);
  }
}

/* Every policy's decision: none is plain, block and chain are fixed, match
 * and cost follow the match, cost below match_min its figures (and says
 * so), auto the router's margin on the tip (the block without one). */
static void
test_route_table (void)
{
  g_autoptr (DflTarget) t = spec_fixture_target ("bf16-tied");
  g_autoptr (DflDrafterWeights) d = spec_fixture_drafter (t);
  int hs = dfl_target_config (t)->hidden;
  g_autofree float *tip = g_new (float, hs);
  DflRouteCost cost;
  gboolean costed = TRUE, seen[2] = { FALSE, FALSE };

  dfl_route_cost_init (&cost, 0);
  g_assert_cmpint (dfl_round_route (DFL_ROUTE_NONE, 3, d, NULL, 9, &cost, &costed), ==,
                   DFL_ROUND_PLAIN);
  g_assert_false (costed);
  g_assert_cmpint (dfl_round_route (DFL_ROUTE_BLOCK, 3, d, NULL, 9, NULL, NULL), ==,
                   DFL_ROUND_BLOCK);
  g_assert_cmpint (dfl_round_route (DFL_ROUTE_CHAIN, 3, d, NULL, 0, NULL, NULL), ==,
                   DFL_ROUND_CHAIN);
  g_assert_cmpint (dfl_round_route (DFL_ROUTE_MATCH, 3, d, NULL, 3, NULL, NULL), ==,
                   DFL_ROUND_CHAIN);
  g_assert_cmpint (dfl_round_route (DFL_ROUTE_MATCH, 3, d, NULL, 2, NULL, NULL), ==,
                   DFL_ROUND_BLOCK);
  /* cost: on a match the chain, not decided on the figures */
  g_assert_cmpint (dfl_round_route (DFL_ROUTE_COST, 3, d, NULL, 4, &cost, &costed), ==,
                   DFL_ROUND_CHAIN);
  g_assert_false (costed);
  /* below it the figures decide: the block where it has paid more over
   * enough rounds to be a figure */
  for (int i = 0; i < DFL_ROUTE_COST_MIN_ROUNDS; i++) {
    g_assert_cmpint (dfl_round_route (DFL_ROUTE_COST, 3, d, NULL, 1, &cost, &costed), ==,
                     DFL_ROUND_CHAIN);
    dfl_route_cost_observe (&cost, DFL_ROUTE_ARM_BLOCK, 6, 0.01);
    dfl_route_cost_observe (&cost, DFL_ROUTE_ARM_CHAIN, 1, 0.01);
  }
  g_assert_cmpint (dfl_round_route (DFL_ROUTE_COST, 3, d, NULL, 1, &cost, &costed), ==,
                   DFL_ROUND_BLOCK);
  g_assert_true (costed);
  dfl_route_cost_init (&cost, 0);
  dfl_route_cost_observe (&cost, DFL_ROUTE_ARM_BLOCK, 1, 0.01);
  dfl_route_cost_observe (&cost, DFL_ROUTE_ARM_CHAIN, 6, 0.01);
  g_assert_cmpint (dfl_round_route (DFL_ROUTE_COST, 3, d, NULL, 0, &cost, &costed), ==,
                   DFL_ROUND_CHAIN);
  g_assert_true (costed);
  /* auto: no tip or no drafter, the block; else the margin's sign */
  g_assert_true (dfl_drafter_weights_has_route (d));
  g_assert_cmpint (dfl_round_route (DFL_ROUTE_AUTO, 3, d, NULL, 9, NULL, NULL), ==,
                   DFL_ROUND_BLOCK);
  g_assert_cmpint (dfl_round_route (DFL_ROUTE_AUTO, 3, NULL, tip, 9, NULL, NULL), ==,
                   DFL_ROUND_BLOCK);
  for (int i = 0; i < 200; i++) {
    DflRoundSource want;
    for (int j = 0; j < hs; j++)
      tip[j] = (float) (dfl_sampler_uniform (i, j) - 0.5);
    want = dfl_drafter_weights_route_margin (d, tip) > 0 ? DFL_ROUND_BLOCK : DFL_ROUND_CHAIN;
    g_assert_cmpint (dfl_round_route (DFL_ROUTE_AUTO, 3, d, tip, 9, NULL, NULL), ==, want);
    seen[want == DFL_ROUND_CHAIN] = TRUE;
  }
  /* the router has both answers on these rows, or the loop proved little */
  g_assert_true (seen[0] && seen[1]);
  g_assert_true (dfl_route_needs_drafter (DFL_ROUTE_COST));
  g_assert_false (dfl_route_needs_drafter (DFL_ROUTE_CHAIN));
  g_assert_true (dfl_route_reads_match (DFL_ROUTE_MATCH));
  g_assert_false (dfl_route_reads_match (DFL_ROUTE_AUTO));
}

/* The chain's proposal: what followed the suffix's earlier occurrence, cut
 * to max_draft and to the match × draft_per_match. */
static void
test_propose_chain (void)
{
  DflNgram g = DFL_NGRAM_DEFAULT;
  int text[] = { 1, 2, 3, 4, 5, 9, 8, 7, 1, 2 }, drafts[8], match;

  g_assert_cmpint (dfl_round_propose_chain (&g, text, 10, 8, 0, drafts, &match), ==, 8);
  g_assert_cmpint (match, ==, 2);
  g_assert_cmpmem (drafts, 3 * sizeof (int), ((int[]) { 3, 4, 5 }), 3 * sizeof (int));
  g_assert_cmpint (dfl_round_propose_chain (&g, text, 10, 2, 0, drafts, NULL), ==, 2);
  g_assert_cmpint (dfl_round_propose_chain (&g, text, 10, 8, 1.5, drafts, &match), ==, 3);
  g_assert_cmpint (dfl_round_propose_chain (&g, (int[]) { 1, 2, 3 }, 3, 8, 2, drafts, &match),
                   ==, 0);
  g_assert_cmpint (match, ==, 0);
}

/* settle: rows queued and, for a block anchored next, settled and checked;
 * an anchor past the context is refused. propose_block: the same rows and
 * logits with or without choosing, and plain choice is each row's argmax. */
static void
test_settle_and_block (void)
{
  g_autoptr (DflTarget) t = spec_fixture_target ("bf16-tied");
  g_autoptr (DflDrafterWeights) d = spec_fixture_drafter (t);
  g_autoptr (DflDrafterWeights) bound = NULL;
  g_autoptr (DflDraftCtx) ctx = NULL;
  const DflQwen3Config *c = dfl_target_config (t);
  const DflDrafterGeometry *g = dfl_drafter_weights_geometry (d);
  int tw = dfl_drafter_geometry_tap_width (g), rows = g->block - 1, first;
  g_autoptr (DflTargetSeq) seq = dfl_target_seq_new (t);
  g_autofree float *taps = g_new (float, (gsize) PROMPT_LEN * tw);
  g_autofree float *tip = g_new (float, c->hidden);
  g_autofree int *drafts = g_new (int, rows);
  g_autoptr (GError) error = NULL;
  DflRoundTaps want = { .layers = g->taps, .n_layers = g->n_taps, .host = taps };
  DflTensor prompt_rows = dfl_tensor_2d (NULL, taps, 0, DFL_DTYPE_F32, PROMPT_LEN, tw);
  DflDraftTrunk trunk;
  gsize bytes;
  g_autofree float *out = NULL, *out2 = NULL;
  DflTensor o, o2;

  g_assert_true (dfl_draft_trunk_of_target (&trunk, t, &error));
  bound = dfl_drafter_weights_bind (d, NULL, &trunk, DFL_DTYPE_F32, &error);
  g_assert_no_error (error);
  ctx = dfl_draft_ctx_new (bound, &error);
  g_assert_no_error (error);
  bytes = dfl_draft_ctx_block_bytes (ctx, c->vocab);
  out = g_malloc (bytes);
  out2 = g_malloc (bytes);
  o = dfl_tensor_2d (NULL, out, 0, DFL_DTYPE_F32, rows, c->hidden + c->vocab);
  o2 = dfl_tensor_2d (NULL, out2, 0, DFL_DTYPE_F32, rows, c->hidden + c->vocab);

  g_assert_true (dfl_round_prefill (seq, prompt, PROMPT_LEN, &greedy, &want, tip, &first, &error));
  g_assert_false (dfl_round_settle (ctx, TRUE, 0, &prompt_rows, PROMPT_LEN + 4, &error));
  g_assert_error (error, DFL_ERROR, DFL_ERROR_LIMIT);
  g_clear_error (&error);
  g_assert_true (dfl_round_settle (ctx, TRUE, 0, &prompt_rows, PROMPT_LEN, &error));
  g_assert_no_error (error);

  g_assert_cmpint (dfl_round_propose_block (ctx, PROMPT_LEN, first, c->vocab, FALSE, &o, NULL,
                                            &error), ==, rows);
  g_assert_cmpint (dfl_round_propose_block (ctx, PROMPT_LEN, first, c->vocab, FALSE, &o2, drafts,
                                            &error), ==, rows);
  g_assert_no_error (error);
  /* the rows and their logits, with or without choosing */
  g_assert_cmpmem (out, bytes, out2, bytes);
  for (int r = 0; r < rows; r++) {
    const float *x = out + (gsize) rows * c->hidden + (gsize) r * c->vocab;
    int best = 0;
    for (int i = 1; i < c->vocab; i++)
      if (x[i] > x[best])
        best = i;
    g_assert_cmpint (drafts[r], ==, best);
  }
  /* a block anchored past the context is refused, not drafted short */
  g_assert_cmpint (dfl_round_propose_block (ctx, PROMPT_LEN + 3, first, c->vocab, FALSE, &o,
                                            drafts, &error), ==, -1);
  g_assert_error (error, DFL_ERROR, DFL_ERROR_LIMIT);
}

static DflVerdict
verdict (int drafted, int accepted)
{
  return (DflVerdict) { .drafted = drafted, .accepted = accepted };
}

/* τ is tokens over rounds; acceptance by position counts the rounds that
 * proposed there; positions grow with the drafts; merging adds. */
static void
test_stats (void)
{
  DflRoundStats a, b;
  DflVerdict v;

  dfl_round_stats_init (&a, 3);
  dfl_round_stats_add_prefill (&a, 10, 0.5);
  v = verdict (3, 2);
  dfl_round_stats_add_round (&a, DFL_ROUND_BLOCK, &v, 0.1, 0.2);
  v = verdict (1, 0);
  dfl_round_stats_add_round (&a, DFL_ROUND_CHAIN, &v, 0.0, 0.1);
  v = verdict (0, 0);
  dfl_round_stats_add_round (&a, DFL_ROUND_PLAIN, &v, 0.0, 0.1);
  a.new_tokens = 6;
  a.wall_s = 2.5;
  g_assert_cmpint (a.rounds, ==, 3);
  g_assert_cmpint (a.round_tokens, ==, 5);
  g_assert_cmpfloat_with_epsilon (dfl_round_stats_tau (&a), 5.0 / 3, 1e-12);
  g_assert_cmpint (a.block_rounds, ==, 1);
  g_assert_cmpint (a.chain_rounds, ==, 1);
  g_assert_cmpfloat_with_epsilon (dfl_round_stats_accept_rate (&a, 0), 0.5, 1e-12);
  g_assert_cmpfloat_with_epsilon (dfl_round_stats_accept_rate (&a, 1), 1.0, 1e-12);
  g_assert_cmpfloat_with_epsilon (dfl_round_stats_accept_rate (&a, 2), 0.0, 1e-12);
  g_assert_true (isnan (dfl_round_stats_accept_rate (&a, 3)));
  g_assert_cmpfloat_with_epsilon (a.draft_s, 0.1, 1e-12);
  g_assert_cmpfloat_with_epsilon (a.verify_s, 0.4, 1e-12);
  /* the sequence's first token is the prompt pass's: five decoded */
  g_assert_cmpfloat_with_epsilon (dfl_round_stats_tokens_per_s (&a), 2.0, 1e-12);

  dfl_round_stats_init (&b, 0);
  g_assert_true (isnan (dfl_round_stats_accept_rate (&b, 0)));
  g_assert_cmpfloat (dfl_round_stats_tau (&b), ==, 0.0);
  v = verdict (5, 5);
  dfl_round_stats_add_round (&b, DFL_ROUND_BLOCK, &v, 0.0, 0.0);
  g_assert_cmpint (b.positions, ==, 5);
  dfl_round_stats_merge (&a, &b);
  g_assert_cmpint (a.positions, ==, 5);
  g_assert_cmpint (a.rounds, ==, 4);
  g_assert_cmpint (a.round_tokens, ==, 11);
  g_assert_cmpint (a.block_rounds, ==, 2);
  g_assert_cmpint (a.proposed_at[0], ==, 3);
  g_assert_cmpint (a.accepted_at[0], ==, 2);
  g_assert_cmpfloat_with_epsilon (dfl_round_stats_accept_rate (&a, 4), 1.0, 1e-12);
  dfl_round_stats_reset (&a);
  g_assert_cmpint (a.positions, ==, 5);
  g_assert_cmpint (a.rounds, ==, 0);
  g_assert_cmpint (a.proposed_at[0], ==, 0);
  dfl_round_stats_clear (&a);
  dfl_round_stats_clear (&b);
}

const DflTestCase dfl_test_cases[] = {
  { "/round/verify-verdict", test_verify_verdict },
  { "/round/verify-rows", test_verify_rows },
  { "/round/verify-batch", test_verify_batch },
  { "/round/route-table", test_route_table },
  { "/round/propose-chain", test_propose_chain },
  { "/round/settle-and-block", test_settle_and_block },
  { "/round/stats", test_stats },
  { NULL, NULL }
};
