/* gst-dflash — `dflash route-fit`: fit the sidecar's router on prompts.
 *
 * For each prompt the target's own continuation is decoded first (the
 * truth); then, round by round along it, both drafters propose after the
 * same anchor and the one whose proposal the truth keeps longer wins the
 * round. The target's tip row (its final hidden row before the anchor) is
 * recorded with the winner; ties teach nothing and are left out. Each
 * side's rows fit a subspace (route-fit.c) and the pair goes into the
 * sidecar's dflash_route. Then every route is run for real on the same
 * prompts and their τ printed side by side.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "dfl-error.h"
#include "dflash-cli.h"
#include "ngram.h"
#include "prompts.h"
#include "route-fit.h"
#include "speculate.h"
#include "tokenizer.h"

#define DEFAULT_MAX_NEW 128
#define DEFAULT_RANK 4


static int
prefix_kept (const int *draft, int m, const int *truth, int left)
{
  int k = 0;

  while (k < m && k < left && draft[k] == truth[k])
    k++;
  return k;
}

/* The rounds of one prompt along its truth: tip rows into block_rows or
 * chain_rows by who would have kept more. */
static gboolean
record_prompt (const DflTarget *target, DflDraftCtx *draft, const DflNgram *ngram,
               const int *prompt, int n_prompt, int max_new, GArray *block_rows,
               GArray *chain_rows, int *ties, GError **error)
{
  const DflQwen3Config *c = dfl_target_config (target);
  const DflDrafterGeometry *g = dfl_drafter_weights_geometry (dfl_draft_ctx_weights (draft));
  int hs = c->hidden, tw = dfl_drafter_geometry_tap_width (g), rows = g->block - 1;
  DflSpecParams p;
  g_autoptr (DflSpec) plain = NULL;
  g_autoptr (GArray) out = g_array_new (FALSE, FALSE, sizeof (int));
  g_autoptr (DflTargetSeq) seq = dfl_target_seq_new (target);
  g_autofree float *taps = NULL, *hidden = NULL, *block = NULL;
  DflTensor out_block;
  g_autofree int *drafts = g_new (int, rows), *chain = g_new (int, rows);
  const int *truth;
  int n;

  dfl_spec_params_init (&p);
  p.route = DFL_ROUTE_NONE;
  p.max_new = max_new;
  if (!(plain = dfl_spec_new (target, NULL, &p, error))
      || !dfl_spec_prefill (plain, prompt, n_prompt, out, error))
    return FALSE;
  while (!dfl_spec_done (plain))
    if (!dfl_spec_round (plain, out, error))
      return FALSE;
  truth = dfl_spec_tokens (plain, &n);
  /* a sequence that ran to the context's end has one token past it (chosen
   * at the last position); the pass below runs every token it keeps */
  n = MIN (n, c->max_positions);

  /* every row's taps and final hidden row in one pass: the batch-invariant
   * target gives what the rounds would have seen */
  taps = g_new (float, (gsize) n * tw);
  hidden = g_new (float, (gsize) n * hs);
  {
    DflForwardOut fo = { .tap_layers = g->taps, .n_tap_layers = g->n_taps, .taps = taps,
                         .logits_from = 0, .hidden = hidden };
    if (!dfl_target_forward (target, seq, truth, n, &fo, error))
      return FALSE;
  }
  block = g_malloc (dfl_draft_ctx_block_bytes (draft, c->vocab));
  out_block = dfl_tensor_2d (NULL, block, 0, DFL_DTYPE_F32, rows, hs + c->vocab);
  {
    DflTensor prompt_rows = dfl_tensor_2d (NULL, taps, 0, DFL_DTYPE_F32, n_prompt, tw);
    if (!dfl_round_settle (draft, TRUE, 0, &prompt_rows, -1, error))
      return FALSE;
  }
  for (int a = n_prompt; a < n - 1;) {
    int kb, kc, mc, step;
    DflTensor step_rows;
    if (dfl_round_propose_block (draft, a, truth[a], c->vocab, TRUE, &out_block, drafts,
                                 error) < 0)
      return FALSE;
    kb = prefix_kept (drafts, rows, truth + a + 1, n - a - 1);
    mc = dfl_round_propose_chain (ngram, truth, a + 1, rows, 0, chain, NULL);
    kc = prefix_kept (chain, mc, truth + a + 1, n - a - 1);
    if (kb > kc)
      g_array_append_vals (block_rows, hidden + (gsize) (a - 1) * hs, hs);
    else if (kc > kb)
      g_array_append_vals (chain_rows, hidden + (gsize) (a - 1) * hs, hs);
    else
      (*ties)++;
    /* along the better of the two, as a router that chose well would go */
    step = MAX (kb, kc) + 1;
    step = MIN (step, n - a);
    step_rows = dfl_tensor_2d (NULL, taps + (gsize) a * tw, 0, DFL_DTYPE_F32, step, tw);
    if (!dfl_round_settle (draft, FALSE, a, &step_rows, -1, error))
      return FALSE;
    a += step;
  }
  return TRUE;
}

typedef struct {
  gint64 rounds, tokens;
} Tau;

static gboolean
run_route (const DflTarget *target, DflDrafterWeights *drafter, DflRoute route, GPtrArray *prompt_ids,
           int max_new, Tau *tau, GError **error)
{
  DflSpecParams p;

  dfl_spec_params_init (&p);
  p.route = route;
  p.max_new = max_new;
  *tau = (Tau) { 0 };
  for (guint i = 0; i < prompt_ids->len; i++) {
    GArray *ids = g_ptr_array_index (prompt_ids, i);
    g_autoptr (DflSpec) s = dfl_spec_new (target, drafter, &p, error);
    g_autoptr (GArray) out = g_array_new (FALSE, FALSE, sizeof (int));
    if (!s || !dfl_spec_prefill (s, (int *) ids->data, ids->len, out, error))
      return FALSE;
    while (!dfl_spec_done (s))
      if (!dfl_spec_round (s, out, error))
        return FALSE;
    tau->rounds += dfl_spec_stats (s)->rounds;
    tau->tokens += dfl_spec_stats (s)->round_tokens;
  }
  return TRUE;
}

int
dfl_cmd_route_fit (int argc, char **argv)
{
  g_autofree char *target_dir = NULL, *drafter_path = NULL, *prompts_path = NULL, *out_path = NULL;
  int max_new = DEFAULT_MAX_NEW, rank = DEFAULT_RANK, ties = 0;
  GOptionEntry entries[] = {
    { "target", 0, 0, G_OPTION_ARG_FILENAME, &target_dir, "Qwen3 checkpoint folder or .gguf file (default: the embedded default model)", "DIR|FILE" },
    { "drafter", 0, 0, G_OPTION_ARG_FILENAME, &drafter_path, "DFlash 2 sidecar (default: dflash.safetensors in the target folder, X.dflash.safetensors beside X.gguf)", "FILE" },
    { "prompts", 0, 0, G_OPTION_ARG_FILENAME, &prompts_path, "Prompts, one a line (\\n and \\t escapes)", "FILE" },
    { "max-new", 0, 0, G_OPTION_ARG_INT, &max_new, "Tokens decoded after each prompt (default 128)", "N" },
    { "rank", 0, 0, G_OPTION_ARG_INT, &rank, "Rank of each subspace (default 4)", "R" },
    { "out", 0, 0, G_OPTION_ARG_FILENAME, &out_path, "Write the sidecar with its router here (default: in place)", "FILE" },
    { NULL }
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("- fit the sidecar's router on prompts");
  g_autoptr (GError) error = NULL;
  g_autoptr (DflTarget) target = NULL;
  g_autoptr (DflDrafterWeights) drafter = NULL, fitted = NULL, bound = NULL;
  g_autoptr (DflDraftCtx) draft = NULL;
  DflDraftTrunk trunk;
  g_autoptr (DflTokenizer) tok = NULL;
  g_autoptr (GPtrArray) prompts = NULL;
  g_autoptr (GPtrArray) prompt_ids = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
  g_autoptr (GArray) block_rows = g_array_new (FALSE, FALSE, sizeof (float));
  g_autoptr (GArray) chain_rows = g_array_new (FALSE, FALSE, sizeof (float));
  g_autofree char *record = NULL;
  gboolean has_tokenizer;
  g_autofree float *bm = NULL, *bb = NULL, *cm = NULL, *cb = NULL;
  DflNgram ngram = DFL_NGRAM_DEFAULT;
  const DflQwen3Config *c;
  int nb, nc, r;
  const DflRoute shown[] = { DFL_ROUTE_BLOCK, DFL_ROUTE_CHAIN, DFL_ROUTE_MATCH, DFL_ROUTE_AUTO };
  Tau tau[G_N_ELEMENTS (shown)];

  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!dfl_cli_parse (ctx, &argc, &argv))
    return DFL_EXIT_USAGE;
  if (argc > 1)
    return dfl_cli_fail (DFL_EXIT_USAGE, "route-fit: unexpected argument '%s'", argv[1]);
  if (!prompts_path)
    return dfl_cli_fail (DFL_EXIT_USAGE, "route-fit: --prompts is required (see --help)");
  if (max_new < 2 || rank < 1)
    return dfl_cli_fail (DFL_EXIT_USAGE, "route-fit: --max-new must be ≥ 2 and --rank ≥ 1, not %d and %d",
                         max_new, rank);
  if (!target_dir)
    target_dir = g_strdup (dfl_cli_default_target ());

  if (!(target = dfl_target_load (target_dir, &error)))
    return dfl_cli_fail_error (g_steal_pointer (&error));
  c = dfl_target_config (target);
  if (!(drafter = dfl_cli_open_drafter (drafter_path, target, &error))) {
    if (error)
      return dfl_cli_fail_error (g_steal_pointer (&error));
    return dfl_cli_fail (DFL_EXIT_ERROR, "%s: no dflash.safetensors; name the sidecar with --drafter", target_dir);
  }
  if (dfl_drafter_weights_is_v1 (drafter))
    return dfl_cli_fail (DFL_EXIT_ERROR, "%s: a released DFlash folder has no sidecar to hold a router",
                         dfl_drafter_weights_path (drafter));
  if (!dfl_draft_trunk_of_target (&trunk, target, &error)
      || !(bound = dfl_drafter_weights_bind (drafter, NULL, &trunk, DFL_DTYPE_F32, &error))
      || !(draft = dfl_draft_ctx_new (bound, &error)))
    return dfl_cli_fail_error (g_steal_pointer (&error));
  if (!(tok = dfl_tokenizer_load_checkpoint (target_dir, &has_tokenizer, &error)) && !has_tokenizer)
    return dfl_cli_fail (DFL_EXIT_ERROR, "%s: no tokenizer (tokenizer.json, or a .gguf file's "
                         "tokenizer.ggml metadata)", target_dir);
  if (!tok)
    return dfl_cli_fail_error (g_steal_pointer (&error));
  if (!(prompts = dfl_read_prompts (prompts_path, &error)))
    return dfl_cli_fail_error (g_steal_pointer (&error));
  for (guint i = 0; i < prompts->len; i++) {
    GArray *ids = dfl_tokenizer_encode (tok, g_ptr_array_index (prompts, i), -1, &error);
    if (!ids)
      return dfl_cli_fail (DFL_EXIT_ERROR, "%s: prompt %u: %s", prompts_path, i + 1, error->message);
    if (ids->len == 0) {
      g_array_unref (ids);
      continue;
    }
    g_ptr_array_add (prompt_ids, ids);
  }

  for (guint i = 0; i < prompt_ids->len; i++) {
    GArray *ids = g_ptr_array_index (prompt_ids, i);
    if (!record_prompt (target, draft, &ngram, (int *) ids->data, ids->len, max_new,
                        block_rows, chain_rows, &ties, &error))
      return dfl_cli_fail (DFL_EXIT_ERROR, "%s: prompt %u: %s", prompts_path, i + 1, error->message);
    /* progress for a person watching; logs get only the result */
    if (isatty (fileno (stderr)))
      fprintf (stderr, "\rrecording rounds: prompt %u of %u%s", i + 1, prompt_ids->len,
               i + 1 == prompt_ids->len ? "\n" : "");
  }
  nb = block_rows->len / c->hidden;
  nc = chain_rows->len / c->hidden;
  r = MIN (rank, MIN (nb, nc) - 1);
  if (r < 1)
    return dfl_cli_fail (DFL_EXIT_ERROR,
                         "%s: the block won %d rounds and the chain %d (%d ties): each must win at least 2 "
                         "to fit a router; give more or longer prompts", prompts_path, nb, nc, ties);
  bm = g_new (float, c->hidden);
  cm = g_new (float, c->hidden);
  bb = g_new (float, (gsize) r * c->hidden);
  cb = g_new (float, (gsize) r * c->hidden);
  if (!dfl_route_fit_subspace ((float *) block_rows->data, nb, c->hidden, r, bm, bb, &error)
      || !dfl_route_fit_subspace ((float *) chain_rows->data, nc, c->hidden, r, cm, cb, &error))
    return dfl_cli_fail_error (g_steal_pointer (&error));
  record = dfl_route_record (bm, bb, cm, cb, c->hidden, r, nb, nc);
  if (!out_path)
    out_path = g_strdup (dfl_drafter_weights_path (drafter));
  if (!dfl_safetensors_rewrite_metadata (dfl_drafter_weights_path (drafter), out_path, "dflash_route", record, &error))
    return dfl_cli_fail_error (g_steal_pointer (&error));
  g_clear_pointer (&draft, dfl_draft_ctx_free);
  g_clear_pointer (&bound, dfl_drafter_weights_unref);
  g_clear_pointer (&drafter, dfl_drafter_weights_unref);
  if (!(fitted = dfl_cli_open_drafter (out_path, target, &error)))
    return dfl_cli_fail_error (g_steal_pointer (&error));
  printf ("%s: router of rank %d fitted on %d block and %d chain rounds (%d ties left out)\n",
          out_path, r, nb, nc, ties);

  for (guint i = 0; i < G_N_ELEMENTS (shown); i++)
    if (!run_route (target, fitted, shown[i], prompt_ids, max_new, &tau[i], &error))
      return dfl_cli_fail_error (g_steal_pointer (&error));
  printf ("tau over %u prompts, %d new tokens each (tokens per target pass, bonus included):\n",
          prompt_ids->len, max_new);
  for (guint i = 0; i < G_N_ELEMENTS (shown); i++)
    printf ("  %-6s %.2f  (%" G_GINT64_FORMAT " rounds)\n", dfl_route_name (shown[i]),
            tau[i].rounds ? (double) tau[i].tokens / tau[i].rounds : 0.0, tau[i].rounds);
  return DFL_EXIT_OK;
}
