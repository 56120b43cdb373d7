/* gst-dflash — sampling, the chain drafter, and the speculative loop's
 * lossless property.
 *
 * The loop's output must be the target's own: for every route and block
 * size, greedy or sampled, a speculative run emits exactly the tokens of a
 * run without drafting. A drafter that is a random DFlash sidecar proposes
 * mostly wrong tokens and the chain drafter on random text few right ones:
 * both exercise rejection and rewinds, which is the point.
 */
#include <glib.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dfl-error.h"
#include "ngram.h"
#include "route-cost.h"
#include "sampler.h"
#include "spec-fixtures.h"
#include "speculate.h"
#include "target.h"

static void
test_uniform (void)
{
  double sum = 0;

  g_assert_cmpfloat (dfl_sampler_uniform (7, 42), ==, dfl_sampler_uniform (7, 42));
  g_assert_cmpfloat (dfl_sampler_uniform (7, 42), !=, dfl_sampler_uniform (8, 42));
  g_assert_cmpfloat (dfl_sampler_uniform (7, 42), !=, dfl_sampler_uniform (7, 43));
  for (int i = 0; i < 100000; i++) {
    double u = dfl_sampler_uniform (1, i);
    g_assert_cmpfloat (u, >=, 0.0);
    g_assert_cmpfloat (u, <, 1.0);
    sum += u;
  }
  g_assert_cmpfloat (fabs (sum / 100000 - 0.5), <, 0.005);
}

/* Frequencies of many draws (one per position) follow softmax(logits / T);
 * top-p never picks outside the nucleus. */
static void
test_sampling_distribution (void)
{
  float logits[5] = { 2.0f, 1.0f, 0.5f, -1.0f, 1.0f };
  DflSampler s = { .temperature = 0.7f, .top_p = 1.0f, .seed = 99 };
  int counts[5] = { 0 }, n = 200000;
  double z = 0, p[5];

  for (int i = 0; i < 5; i++)
    z += (p[i] = exp (logits[i] / 0.7));
  for (int i = 0; i < n; i++)
    counts[dfl_sampler_pick (&s, logits, 5, i)]++;
  for (int i = 0; i < 5; i++)
    g_assert_cmpfloat (fabs ((double) counts[i] / n - p[i] / z), <, 0.005);

  /* the nucleus of 0.7: token 0 (0.62) and then the first of the two tied
   * at 1.0 (token 1, 0.15) reach it; tokens 2, 3 and 4 are never drawn */
  s.top_p = 0.7f;
  memset (counts, 0, sizeof counts);
  for (int i = 0; i < 20000; i++)
    counts[dfl_sampler_pick (&s, logits, 5, i)]++;
  g_assert_cmpint (counts[2] + counts[3] + counts[4], ==, 0);
  g_assert_cmpint (counts[0], >, 0);
  g_assert_cmpint (counts[1], >, 0);

  s.temperature = 0;
  g_assert_cmpint (dfl_sampler_pick (&s, logits, 5, 3), ==, 0);
}

static void
test_ngram (void)
{
  DflNgram g = DFL_NGRAM_DEFAULT;
  int text[] = { 1, 2, 3, 4, 5, 9, 1, 2, 3 }, draft[8], match;
  int run[] = { 7, 7, 7, 7, 7 };

  /* the suffix 1 2 3 occurred at 0: 4 5 9 1 followed it */
  g_assert_cmpint (dfl_ngram_propose (&g, text, 9, 4, draft, &match), ==, 4);
  g_assert_cmpint (match, ==, 3);
  g_assert_cmpmem (draft, 4 * sizeof (int), ((int[]) { 4, 5, 9, 1 }), 4 * sizeof (int));
  /* a run proposes more of itself, from the occurrence that has most after it */
  g_assert_cmpint (dfl_ngram_propose (&g, run, 5, 3, draft, &match), ==, 1);
  g_assert_cmpint (match, ==, 4);
  g.max_n = 2;
  g_assert_cmpint (dfl_ngram_propose (&g, run, 5, 3, draft, &match), ==, 3);
  g_assert_cmpint (match, ==, 2);
  /* nothing matches */
  g_assert_cmpint (dfl_ngram_propose (&g, (int[]) { 1, 2, 3 }, 3, 4, draft, &match), ==, 0);
  g_assert_cmpint (match, ==, 0);
}

static GArray *
run (const DflTarget *t, DflDrafterWeights *d, DflRoute route, const DflSampler *smp, int chain_max,
     const int *prompt, int n, int max_new, DflRoundStats *stats_out)
{
  DflSpecParams p;
  g_autoptr (GError) error = NULL;
  g_autoptr (DflSpec) s = NULL;
  GArray *out = g_array_new (FALSE, FALSE, sizeof (int));

  dfl_spec_params_init (&p);
  p.selector = route != DFL_ROUTE_MATCH;   /* the match runs also try plain argmax */
  p.route = route;
  p.sampler = *smp;
  p.max_new = max_new;
  p.chain_max = chain_max;
  s = dfl_spec_new (t, d, &p, &error);
  g_assert_no_error (error);
  g_assert_true (dfl_spec_prefill (s, prompt, n, out, &error));
  while (!dfl_spec_done (s)) {
    g_assert_true (dfl_spec_round (s, out, &error));
    g_assert_no_error (error);
  }
  if (stats_out)
    *stats_out = *dfl_spec_stats (s);
  return out;
}

/* Chain drafting over many prompts, chain sizes, greedy and sampled:
 * exactly the no-draft tokens. The prompts repeat themselves so the chain
 * proposes, and gets some accepted. */
static void
test_lossless_chain (gconstpointer data)
{
  g_autoptr (DflTarget) t = spec_fixture_target (data);
  const DflSampler samplers[] = {
    { .temperature = 0 }, { .temperature = 0.8f, .top_p = 1, .seed = 5 },
    { .temperature = 1.2f, .top_p = 0.9f, .seed = 11 },
  };
  gint64 accepted = 0, rounds = 0;

  for (int pi = 0; pi < 6; pi++) {
    int prompt[24], n = 8 + 2 * pi;
    for (int i = 0; i < n; i++)
      prompt[i] = 4 + (i % (3 + pi)) * 37 % 1000;
    for (guint si = 0; si < G_N_ELEMENTS (samplers); si++) {
      g_autoptr (GArray) plain = run (t, NULL, DFL_ROUTE_NONE, &samplers[si], 15, prompt, n, 40, NULL);
      for (int chain = 1; chain <= 15; chain += 7) {
        DflRoundStats st;
        g_autoptr (GArray) spec = run (t, NULL, DFL_ROUTE_CHAIN, &samplers[si], chain, prompt, n, 40, &st);
        g_assert_cmpuint (spec->len, ==, plain->len);
        g_assert_cmpmem (spec->data, spec->len * sizeof (int), plain->data, plain->len * sizeof (int));
        accepted += st.round_tokens - st.rounds;
        rounds += st.rounds;
      }
    }
  }
  g_test_message ("%s: %" G_GINT64_FORMAT " drafts accepted over %" G_GINT64_FORMAT " rounds",
                  (const char *) data, accepted, rounds);
  /* the test is only worth something if drafts were both kept and thrown away */
  g_assert_cmpint (accepted, >, 0);
}

/* The block, the router and the match rule, greedy and sampled, selector on
 * and off: exactly the no-draft tokens. */
static void
test_lossless_block (void)
{
  g_autoptr (DflTarget) t = spec_fixture_target ("bf16-tied");
  g_autoptr (DflDrafterWeights) d = spec_fixture_drafter (t);
  const DflSampler samplers[] = {
    { .temperature = 0 }, { .temperature = 0.9f, .top_p = 0.95f, .seed = 3 },
  };
  const DflRoute routes[] = { DFL_ROUTE_BLOCK, DFL_ROUTE_AUTO, DFL_ROUTE_MATCH, DFL_ROUTE_COST };
  gint64 block_rounds = 0, chain_rounds = 0, accepted = 0;

  for (int pi = 0; pi < 5; pi++) {
    int prompt[16], n = 6 + 2 * pi;
    for (int i = 0; i < n; i++)
      prompt[i] = 4 + (i * 131 + pi * 17) % (2 + 3 * pi) * 41 % 1000;
    for (guint si = 0; si < G_N_ELEMENTS (samplers); si++) {
      g_autoptr (GArray) plain = run (t, NULL, DFL_ROUTE_NONE, &samplers[si], 7, prompt, n, 48, NULL);
      for (guint ri = 0; ri < G_N_ELEMENTS (routes); ri++) {
        DflRoundStats st;
        g_autoptr (GArray) spec = run (t, d, routes[ri], &samplers[si], 7, prompt, n, 48, &st);
        g_assert_cmpuint (spec->len, ==, plain->len);
        g_assert_cmpmem (spec->data, spec->len * sizeof (int), plain->data, plain->len * sizeof (int));
        block_rounds += st.block_rounds;
        chain_rounds += st.chain_rounds;
        accepted += st.round_tokens - st.rounds;
      }
    }
  }
  g_test_message ("%" G_GINT64_FORMAT " block and %" G_GINT64_FORMAT " chain rounds, %"
                  G_GINT64_FORMAT " drafts accepted", block_rounds, chain_rounds, accepted);
  g_assert_cmpint (block_rounds, >, 0);
  g_assert_cmpint (chain_rounds, >, 0);
  g_assert_cmpint (accepted, >, 0);
}

/* Feed `rounds` rounds of fixed figures, tokens and seconds by arm, and
 * count the decisions that went to the block. */
static int
cost_blocks (DflRouteCost *rc, int rounds, int block_tokens, double block_s, int chain_tokens,
             double chain_s)
{
  int blocks = 0;

  for (int i = 0; i < rounds; i++) {
    DflRouteArm arm = dfl_route_cost_choose (rc);
    blocks += arm == DFL_ROUTE_ARM_BLOCK;
    if (arm == DFL_ROUTE_ARM_BLOCK)
      dfl_route_cost_observe (rc, arm, block_tokens, block_s);
    else
      dfl_route_cost_observe (rc, arm, chain_tokens, chain_s);
  }
  return blocks;
}

/* The cost rule: the chain first, the block tried at the probe_every-th
 * decision, then the one with more tokens a second, the other tried every
 * probe_every decisions until its figure is made (3 rounds), then at gaps
 * that double while it trails (up to 256); a change of figures turns it
 * within a few tries, and the swap sets the gap back. */
static void
test_route_cost (void)
{
  DflRouteCost rc;

  /* the chain until the first probe, which goes to the block */
  dfl_route_cost_init (&rc, 16);
  for (int i = 0; i < 16; i++) {
    DflRouteArm arm = dfl_route_cost_choose (&rc);
    g_assert_cmpint (arm, ==, i == 15 ? DFL_ROUTE_ARM_BLOCK : DFL_ROUTE_ARM_CHAIN);
    dfl_route_cost_observe (&rc, arm, arm == DFL_ROUTE_ARM_BLOCK ? 2 : 1,
                            arm == DFL_ROUTE_ARM_BLOCK ? 0.008 : 0.002);
  }
  /* a CPU's figures: the block 2 tokens in 8 ms, a plain step 1 in 2 ms;
   * only the tries go to the block: at 16 and 32 decisions on (its figure
   * is then made of 3 rounds), then at gaps of 16, 32 and 64 (decisions
   * 48, 80, 144), the gap doubling at each */
  g_assert_cmpfloat_with_epsilon (dfl_route_cost_rate (&rc, DFL_ROUTE_ARM_BLOCK), 250.0, 1e-6);
  g_assert_cmpfloat_with_epsilon (dfl_route_cost_rate (&rc, DFL_ROUTE_ARM_CHAIN), 500.0, 1e-6);
  g_assert_cmpint (cost_blocks (&rc, 160, 2, 0.008, 1, 0.002), ==, 5);
  g_assert_cmpint (dfl_route_cost_probe_gap (&rc), ==, 128);
  /* a large target on a GPU: the block 6 tokens in 10 ms against a
   * step's 1 in 7 ms. Once the step's new seconds are the median of its
   * window (16 decisions) the block's figure is ahead and takes over, the
   * gap back at 16; the chain, its figure made, is then tried after 16,
   * 32 and 64 decisions, and once in the next 160 */
  g_assert_cmpint (cost_blocks (&rc, 160, 6, 0.010, 1, 0.007), ==, 141);
  g_assert_cmpint (rc.favoured, ==, DFL_ROUTE_ARM_BLOCK);
  g_assert_cmpint (cost_blocks (&rc, 160, 6, 0.010, 1, 0.007), ==, 159);
  g_assert_cmpint (dfl_route_cost_probe_gap (&rc), ==, DFL_ROUTE_COST_PROBE_MAX);
  /* no probes: the favoured arm only, the chain where nothing is known */
  dfl_route_cost_init (&rc, 0);
  g_assert_cmpint (cost_blocks (&rc, 100, 1, 0.01, 1, 0.001), ==, 0);
  dfl_route_cost_observe (&rc, DFL_ROUTE_ARM_BLOCK, 1, 0.01);
  /* what cannot be a round's figure changes nothing */
  dfl_route_cost_observe (&rc, DFL_ROUTE_ARM_BLOCK, 5, 0.0);
  dfl_route_cost_observe (&rc, DFL_ROUTE_ARM_BLOCK, -1, 0.1);
  g_assert_cmpfloat_with_epsilon (dfl_route_cost_rate (&rc, DFL_ROUTE_ARM_BLOCK), 100.0, 1e-6);
}

/* The figures kept between runs: written and read back, an estimator
 * decides as the one it was read from, on the same rounds; what is not such
 * figures is refused by member and value, and leaves the estimator as it
 * was. */
static void
test_route_cost_json (void)
{
  static const struct {
    const char *json, *names;
  } bad[] = {
    { "[]", "not an object" },
    { "{\"favoured\": \"both\"}", "\"favoured\" is \"both\"" },
    { "{\"favoured\": 1}", "\"favoured\" is a number" },
    { "{\"favoured\": \"block\", \"probe_doublings\": -3}", "\"probe_doublings\" is -3" },
    { "{\"favoured\": \"block\", \"probe_doublings\": 0}", "\"since_try\" is missing" },
    { "{\"favoured\": \"chain\", \"probe_doublings\": 0, \"since_try\": 0}", "\"block\" is missing" },
    { "{\"favoured\": \"chain\", \"probe_doublings\": 0, \"since_try\": 3, \"block\": {\"tokens\": \"9\"}}",
      "\"block\".tokens is a string" },
    { "{\"favoured\": \"chain\", \"probe_doublings\": 0, \"since_try\": 3, \"block\": {\"tokens\": 2, \"rounds\": 1, "
      "\"seconds\": [0.008, 0]}}", "\"block\".seconds[1] is 0" },
    { "{\"favoured\": \"chain\", \"probe_doublings\": 0, \"since_try\": 3, \"block\": {\"tokens\": 2, \"rounds\": 1, "
      "\"seconds\": []}}", "\"block\" has 0 seconds over 1 rounds" },
    { "{\"favoured\": \"chain\", \"probe_doublings\": 0, \"since_try\": 3, \"block\": {\"tokens\": 0, \"rounds\": 0, "
      "\"seconds\": []}, \"chain\": {\"tokens\": 1, \"rounds\": 1, \"seconds\": [1e400]}}",
      "\"chain\".seconds[0] is inf" },
  };
  DflRouteCost rc, back;
  cJSON *json;
  char *text;

  /* a CPU's figures, some tries made: the block's figure trails */
  dfl_route_cost_init (&rc, 16);
  cost_blocks (&rc, 200, 2, 0.008, 1, 0.002);
  /* the block's figure made and trailing, its next try 128 decisions away:
   * a run may go without it; not once the try is due */
  g_assert_true (dfl_route_cost_block_trails (&rc));
  back = rc;
  back.since_other = dfl_route_cost_probe_gap (&back) - 1;
  g_assert_false (dfl_route_cost_block_trails (&back));
  json = dfl_route_cost_to_json (&rc);
  text = cJSON_PrintUnformatted (json);
  cJSON_Delete (json);
  g_test_message ("%s", text);
  json = cJSON_Parse (text);
  dfl_route_cost_init (&back, 16);
  g_assert_true (dfl_route_cost_from_json (&back, json, NULL));
  cJSON_Delete (json);
  free (text);
  g_assert_cmpint (back.favoured, ==, rc.favoured);
  g_assert_cmpint (back.probe_doublings, ==, rc.probe_doublings);
  for (int arm = 0; arm < 2; arm++)
    g_assert_cmpfloat (dfl_route_cost_rate (&back, arm), ==, dfl_route_cost_rate (&rc, arm));
  /* a run that starts from them decides as the one they came from (the
   * count since the last try goes on; the seconds' rings are in the same
   * order, so a new round replaces the same oldest one) */
  g_assert_cmpint (back.since_other, ==, rc.since_other);
  for (int i = 0; i < 300; i++) {
    DflRouteArm a = dfl_route_cost_choose (&rc), b = dfl_route_cost_choose (&back);
    g_assert_cmpint (a, ==, b);
    dfl_route_cost_observe (&rc, a, a == DFL_ROUTE_ARM_BLOCK ? 3 : 1, 0.002 + 0.0001 * (i % 7));
    dfl_route_cost_observe (&back, b, b == DFL_ROUTE_ARM_BLOCK ? 3 : 1, 0.002 + 0.0001 * (i % 7));
    g_assert_cmpfloat (dfl_route_cost_rate (&back, a), ==, dfl_route_cost_rate (&rc, a));
  }
  /* nothing known: no reason to leave the block out */
  dfl_route_cost_init (&back, 16);
  g_assert_false (dfl_route_cost_block_trails (&back));
  g_assert_cmpint (dfl_route_cost_choose (&back), ==, DFL_ROUTE_ARM_CHAIN);
  for (guint i = 0; i < G_N_ELEMENTS (bad); i++) {
    g_autoptr (GError) error = NULL;
    DflRouteCost before = back;
    json = cJSON_Parse (bad[i].json);
    g_assert_nonnull (json);
    g_assert_false (dfl_route_cost_from_json (&back, json, &error));
    cJSON_Delete (json);
    g_assert_error (error, DFL_ERROR, DFL_ERROR_FORMAT);
    if (!strstr (error->message, bad[i].names))
      g_error ("%s: \"%s\" does not name \"%s\"", bad[i].json, error->message, bad[i].names);
    g_assert_cmpmem (&back, sizeof back, &before, sizeof before);
  }
}

/* Round figures as a machine gives them: `tokens` a round, `seconds` with
 * ±5% jitter and one round in ten 8× slow (a hand-off that waited). */
static int
noisy_blocks (DflRouteCost *rc, GRand *rng, int rounds, int block_tokens, double block_s,
              int chain_tokens, double chain_s, int *switches)
{
  int blocks = 0;

  for (int i = 0; i < rounds; i++) {
    DflRouteArm before = rc->favoured, arm = dfl_route_cost_choose (rc);
    double s = arm == DFL_ROUTE_ARM_BLOCK ? block_s : chain_s;
    s *= g_rand_double_range (rng, 0.95, 1.05) * (g_rand_int_range (rng, 0, 10) == 0 ? 8 : 1);
    *switches += rc->favoured != before;
    blocks += arm == DFL_ROUTE_ARM_BLOCK;
    dfl_route_cost_observe (rc, arm, arm == DFL_ROUTE_ARM_BLOCK ? block_tokens : chain_tokens, s);
  }
  return blocks;
}

/* Stable decisions: slow outliers do not move an arm's figure (the median
 * of its seconds), and arms that pay within the margin of each other keep
 * the run's choice, so runs with different noise on the same figures route
 * alike; a clear difference still turns the choice. */
static void
test_route_cost_stable (void)
{
  DflRouteCost rc;

  /* one slow round in ten leaves the figure where the others put it */
  dfl_route_cost_init (&rc, 0);
  for (int i = 0; i < 30; i++)
    dfl_route_cost_observe (&rc, DFL_ROUTE_ARM_BLOCK, 6, i % 10 == 9 ? 0.080 : 0.010);
  g_assert_cmpfloat_with_epsilon (dfl_route_cost_rate (&rc, DFL_ROUTE_ARM_BLOCK), 600.0, 1e-6);

  /* the block ahead by 3% (6 tokens in 10 ms against 4 in 6.86 ms): within
   * the margin, so every run, whatever its noise, stays on the chain it
   * began with, and only the tries go to the block: decisions 16, 32, 48,
   * 64, then 96, 160 and 288 as the gap doubles */
  for (guint32 seed = 1; seed <= 8; seed++) {
    g_autoptr (GRand) rng = g_rand_new_with_seed (seed);
    int switches = 0;
    dfl_route_cost_init (&rc, 16);
    g_assert_cmpint (noisy_blocks (&rc, rng, 400, 6, 0.010, 4, 0.00686, &switches), ==, 7);
    g_assert_cmpint (switches, ==, 0);
  }
  /* ahead by 40% (6 in 10 ms against 3 in 7 ms): every run turns to the
   * block once its figure is made of enough rounds, and stays */
  for (guint32 seed = 1; seed <= 8; seed++) {
    g_autoptr (GRand) rng = g_rand_new_with_seed (seed);
    int switches = 0, blocks;
    dfl_route_cost_init (&rc, 16);
    blocks = noisy_blocks (&rc, rng, 400, 6, 0.010, 3, 0.007, &switches);
    g_assert_cmpint (switches, ==, 1);
    g_assert_cmpint (rc.favoured, ==, DFL_ROUTE_ARM_BLOCK);
    g_assert_cmpint (blocks, >, 300);
  }
}

static void
test_route_needs_drafter (void)
{
  g_autoptr (DflTarget) t = spec_fixture_target ("bf16-tied");
  g_autoptr (GError) error = NULL;
  DflSpecParams p;

  dfl_spec_params_init (&p);
  p.route = DFL_ROUTE_BLOCK;
  g_assert_null (dfl_spec_new (t, NULL, &p, &error));
  g_assert_error (error, DFL_ERROR, DFL_ERROR_INVALID);
  g_assert_nonnull (strstr (error->message, "block"));
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/spec/uniform", test_uniform);
  g_test_add_func ("/spec/sampling-distribution", test_sampling_distribution);
  g_test_add_func ("/spec/ngram", test_ngram);
  g_test_add_data_func ("/spec/lossless-chain/bf16-tied", "bf16-tied", test_lossless_chain);
  g_test_add_data_func ("/spec/lossless-chain/gqa-hd32-sharded", "gqa-hd32-sharded", test_lossless_chain);
  g_test_add_func ("/spec/route-needs-drafter", test_route_needs_drafter);
  g_test_add_func ("/spec/route-cost", test_route_cost);
  g_test_add_func ("/spec/route-cost-stable", test_route_cost_stable);
  g_test_add_func ("/spec/route-cost-json", test_route_cost_json);
  g_test_add_func ("/spec/lossless-block-auto-match-cost", test_lossless_block);
  return g_test_run ();
}
