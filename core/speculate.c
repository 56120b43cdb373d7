/* gst-dflash — the speculative loop of one sequence. */
#include "speculate.h"

#include <string.h>

#include "dfl-error.h"

struct _DflSpec {
  const DflTarget *target;
  DflDrafterWeights *drafter;   /* bound to the target on the CPU */
  DflDraftCtx *draft;
  DflSpecParams p;
  DflSpecStats stats;
  DflTargetSeq *seq;
  GArray *tokens;        /* prompt + emitted; the last one is the anchor */
  int prompt_len;
  int block;             /* rows of a round's verification at most: 1 + drafts */
  gboolean done;
  DflSpecEnd end;
  DflVerifier *verifier;
  /* a round's buffers */
  int *drafts;
  float *block_out, *logits, *tip;
  DflTensor block_tensor;   /* block_out: the block's rows and logits */
  int vocab, hs, tap_width, head_width;
  DflRouteCost cost;     /* DFL_ROUTE_COST's figures, this sequence's rounds */
};

struct _DflVerifier {
  const DflTarget *target;
  int max_rows, vocab, hs, tap_width;
  int *tap_layers, n_taps;
  int *ids;
  float *logits, *hidden, *taps;
  int accepted;
};

DflVerifier *
dfl_verifier_new (const DflTarget *target, int max_drafts, const int *tap_layers, int n_taps)
{
  const DflQwen3Config *c = dfl_target_config (target);
  DflVerifier *v = g_new0 (DflVerifier, 1);

  v->target = target;
  v->max_rows = max_drafts + 1;
  v->vocab = c->vocab;
  v->hs = c->hidden;
  v->n_taps = n_taps;
  v->tap_layers = g_memdup2 (tap_layers, sizeof (int) * MAX (n_taps, 1));
  v->tap_width = n_taps * c->hidden;
  v->ids = g_new (int, v->max_rows);
  v->logits = g_new (float, (gsize) v->max_rows * v->vocab);
  v->hidden = g_new (float, (gsize) v->max_rows * v->hs);
  v->taps = g_new (float, (gsize) v->max_rows * MAX (v->tap_width, 1));
  return v;
}

void
dfl_verifier_free (DflVerifier *v)
{
  if (!v)
    return;
  g_free (v->tap_layers);
  g_free (v->ids);
  g_free (v->logits);
  g_free (v->hidden);
  g_free (v->taps);
  g_free (v);
}

gboolean
dfl_verifier_run (DflVerifier *v, DflTargetSeq *seq, const DflSampler *sampler, gint64 a,
                  int anchor, const int *drafts, int m, int *accepted, int *bonus, GError **error)
{
  DflForwardOut out = { .logits_from = 0, .logits = v->logits, .hidden = v->hidden,
                        .tap_layers = v->tap_layers, .n_tap_layers = v->n_taps,
                        .taps = v->n_taps ? v->taps : NULL };
  int k;

  g_return_val_if_fail (m >= 0 && m < v->max_rows, FALSE);
  g_return_val_if_fail (dfl_target_seq_length (seq) == a, FALSE);
  v->ids[0] = anchor;
  if (m > 0)
    memcpy (v->ids + 1, drafts, sizeof (int) * m);
  if (!dfl_target_forward (v->target, seq, v->ids, m + 1, &out, error))
    return FALSE;
  /* accept while the draft is what the target itself picks at that position */
  for (k = 0; k <= m; k++) {
    int t = dfl_sampler_pick (sampler, v->logits + (gsize) k * v->vocab, v->vocab, a + k + 1);
    if (k == m || drafts[k] != t) {
      *bonus = t;
      break;
    }
  }
  *accepted = v->accepted = k;
  dfl_target_seq_truncate (seq, a + k + 1);
  return TRUE;
}

const float *
dfl_verifier_taps (const DflVerifier *v)
{
  return v->taps;
}

const float *
dfl_verifier_tip (const DflVerifier *v)
{
  return v->hidden + (gsize) v->accepted * v->hs;
}

gboolean
dfl_route_choose (DflRoute route, const DflDrafterWeights *drafter, const float *tip,
                  const DflNgram *ngram, int match_min, const int *tokens, int n,
                  int max_draft, int *chain, int *chain_n, DflRouteCost *cost,
                  gboolean *costed)
{
  int match = 0;

  *chain_n = -1;
  *costed = FALSE;
  switch (route) {
    case DFL_ROUTE_CHAIN:
      return TRUE;
    case DFL_ROUTE_AUTO:
      return dfl_drafter_weights_route_margin (drafter, tip) <= 0.0f;
    case DFL_ROUTE_MATCH:
      *chain_n = dfl_ngram_propose (ngram, tokens, n, max_draft, chain, &match);
      return match >= match_min;
    case DFL_ROUTE_COST:
      /* the match rule, and below it whichever arm has paid better */
      *chain_n = dfl_ngram_propose (ngram, tokens, n, max_draft, chain, &match);
      if (match >= match_min)
        return TRUE;
      *costed = TRUE;
      return dfl_route_cost_choose (cost) == DFL_ROUTE_ARM_CHAIN;
    case DFL_ROUTE_NONE:
    case DFL_ROUTE_BLOCK:
    default:
      return FALSE;
  }
}

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

void
dfl_spec_params_init (DflSpecParams *p)
{
  *p = (DflSpecParams) {
    .sampler = { .temperature = 0.0f, .top_p = 1.0f, .seed = 0 },
    .route = DFL_ROUTE_BLOCK,
    .selector = TRUE,
    .max_new = 64,
    .head_width = 0,
    .chain_max = 15,
    .ngram = DFL_NGRAM_DEFAULT,
    .match_min = 3,
    .probe_every = DFL_ROUTE_COST_PROBE_EVERY,
  };
}

DflSpec *
dfl_spec_new (const DflTarget *target, DflDrafterWeights *drafter, const DflSpecParams *params,
              GError **error)
{
  const DflQwen3Config *c = dfl_target_config (target);
  g_autoptr (DflSpec) s = g_new0 (DflSpec, 1);
  gboolean needs_drafter = params->route == DFL_ROUTE_BLOCK || params->route == DFL_ROUTE_AUTO
      || params->route == DFL_ROUTE_MATCH || params->route == DFL_ROUTE_COST;

  if (needs_drafter && !drafter) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "route '%s' needs a drafter (a DFlash sidecar), and none was given",
                 dfl_route_name (params->route));
    return NULL;
  }
  if (params->route == DFL_ROUTE_AUTO && !dfl_drafter_weights_has_route (drafter)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "route 'auto' needs a fitted router, and %s has no dflash_route "
                 "(write one with 'dflash route-fit', or route block, chain or match)",
                 dfl_drafter_weights_path (drafter));
    return NULL;
  }
  s->target = target;
  s->p = *params;
  dfl_route_cost_init (&s->cost, params->probe_every);
  s->vocab = c->vocab;
  s->hs = c->hidden;
  s->block = drafter ? dfl_drafter_weights_geometry (drafter)->block : params->chain_max + 1;
  if (params->route == DFL_ROUTE_NONE)
    s->block = 1;
  s->head_width = params->head_width > 0 ? MIN (params->head_width, c->vocab) : c->vocab;
  if (drafter && s->head_width < dfl_drafter_weights_geometry (drafter)->selector_top) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "a head shortlist of %d rows is narrower than the selector's %d candidates "
                 "(head width: 0 for the whole head, or %d to %d)",
                 s->head_width, dfl_drafter_weights_geometry (drafter)->selector_top,
                 dfl_drafter_weights_geometry (drafter)->selector_top, c->vocab);
    return NULL;
  }
  s->tap_width = drafter ? dfl_drafter_geometry_tap_width (dfl_drafter_weights_geometry (drafter)) : 0;
  s->seq = dfl_target_seq_new (target);
  s->tokens = g_array_new (FALSE, FALSE, sizeof (int));
  s->drafts = g_new (int, s->block);
  s->logits = g_new (float, s->vocab);
  s->tip = g_new0 (float, s->hs);
  if (drafter) {
    const DflDrafterGeometry *g = dfl_drafter_weights_geometry (drafter);
    DflDraftTrunk trunk;
    if (!dfl_draft_trunk_of_target (&trunk, target, error)
        || !(s->drafter = dfl_drafter_weights_bind (drafter, NULL, &trunk, DFL_DTYPE_F32, error))
        || !(s->draft = dfl_draft_ctx_new (s->drafter, error)))
      return NULL;
    s->verifier = dfl_verifier_new (target, s->block - 1, g->taps, g->n_taps);
    s->block_out = g_malloc (dfl_draft_ctx_block_bytes (s->draft, s->head_width));
    s->block_tensor = dfl_tensor_2d (NULL, s->block_out, 0, DFL_DTYPE_F32, g->block - 1,
                                     s->hs + s->head_width);
  } else {
    s->verifier = dfl_verifier_new (target, s->block - 1, NULL, 0);
  }
  s->stats.positions = MAX (s->block - 1, 0);
  s->stats.proposed_at = g_new0 (gint64, MAX (s->stats.positions, 1));
  s->stats.accepted_at = g_new0 (gint64, MAX (s->stats.positions, 1));
  return g_steal_pointer (&s);
}

void
dfl_spec_free (DflSpec *s)
{
  if (!s)
    return;
  g_clear_pointer (&s->seq, dfl_target_seq_free);
  if (s->tokens)
    g_array_unref (s->tokens);
  g_clear_pointer (&s->verifier, dfl_verifier_free);
  g_clear_pointer (&s->draft, dfl_draft_ctx_free);
  g_clear_pointer (&s->drafter, dfl_drafter_weights_unref);
  g_free (s->drafts);
  g_free (s->block_out);
  g_free (s->logits);
  g_free (s->tip);
  g_free (s->stats.proposed_at);
  g_free (s->stats.accepted_at);
  g_free (s);
}

const DflSpecStats *
dfl_spec_stats (const DflSpec *s)
{
  return &s->stats;
}

gboolean
dfl_spec_done (const DflSpec *s)
{
  return s->done;
}

DflSpecEnd
dfl_spec_end (const DflSpec *s)
{
  return s->end;
}

char *
dfl_spec_end_message (const DflSpec *s)
{
  if (s->end != DFL_SPEC_END_CONTEXT)
    return NULL;
  return g_strdup_printf ("the sequence reached the context of %s (max_position_embeddings %d) "
                          "after %d new tokens, before max-new %d; a shorter prompt leaves "
                          "room for more", dfl_target_dir (s->target),
                          dfl_target_config (s->target)->max_positions, s->stats.new_tokens,
                          s->p.max_new);
}

const int *
dfl_spec_tokens (const DflSpec *s, int *n)
{
  *n = s->tokens->len;
  return (const int *) s->tokens->data;
}

double
dfl_spec_stats_tau (const DflSpecStats *st)
{
  return st->rounds ? (double) st->round_tokens / st->rounds : 0.0;
}

/* Append a token the user sees; FALSE once the sequence is over. */
static gboolean
emit (DflSpec *s, int token, GArray *emitted)
{
  g_array_append_val (s->tokens, token);
  g_array_append_val (emitted, token);
  s->stats.new_tokens++;
  if (dfl_qwen3_config_is_eos (dfl_target_config (s->target), token))
    s->end = DFL_SPEC_END_EOS;
  else if (s->stats.new_tokens >= s->p.max_new)
    s->end = DFL_SPEC_END_MAX_NEW;
  /* the token just emitted is the next anchor: a round runs it at position
   * len − 1, which must be inside the context */
  else if ((gint64) s->tokens->len - 1 >= dfl_target_config (s->target)->max_positions)
    s->end = DFL_SPEC_END_CONTEXT;
  s->done = s->end != DFL_SPEC_RUNNING;
  return !s->done;
}

gboolean
dfl_spec_prefill (DflSpec *s, const int *ids, int n, GArray *emitted, GError **error)
{
  const DflQwen3Config *c = dfl_target_config (s->target);
  g_autofree float *taps = NULL;
  DflForwardOut out = { .logits_from = n - 1, .logits = s->logits, .hidden = s->tip };
  gint64 t0 = g_get_monotonic_time ();

  if (n < 1) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID, "the prompt is empty");
    return FALSE;
  }
  if (n > c->max_positions) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT,
                 "the prompt has %d tokens, more than the context of %s holds "
                 "(max_position_embeddings %d)", n, dfl_target_dir (s->target), c->max_positions);
    return FALSE;
  }
  if (s->tokens->len > 0) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "the sequence already has its prompt; a DflSpec runs one sequence");
    return FALSE;
  }
  if (s->drafter) {
    const DflDrafterGeometry *g = dfl_drafter_weights_geometry (s->drafter);
    taps = g_new (float, (gsize) n * s->tap_width);
    out.tap_layers = g->taps;
    out.n_tap_layers = g->n_taps;
    out.taps = taps;
  }
  if (!dfl_target_forward (s->target, s->seq, ids, n, &out, error))
    return FALSE;
  g_array_append_vals (s->tokens, ids, n);
  s->prompt_len = n;
  s->stats.prompt_tokens = n;
  if (s->drafter && !dfl_draft_ctx_queue_host (s->draft, 0, taps, n, error))
    return FALSE;
  s->stats.prefill_s = (g_get_monotonic_time () - t0) / 1e6;
  emit (s, dfl_sampler_pick (&s->p.sampler, s->logits, s->vocab, n), emitted);
  return TRUE;
}

int
dfl_block_propose (DflDraftCtx *draft, gint64 a, int anchor, gboolean selector, int head_width,
                   const DflTensor *out, int *drafts, GError **error)
{
  int rows = dfl_drafter_weights_geometry (dfl_draft_ctx_weights (draft))->block - 1;
  g_autofree guint32 *chosen = g_new (guint32, rows);

  /* plain argmax is the selector's `plain` output: the A/B against re-scoring */
  if (!dfl_draft_ctx_draft (draft, a, (guint32) anchor, head_width, out,
                            selector ? chosen : NULL, selector ? NULL : chosen, error))
    return -1;
  for (int r = 0; r < rows; r++)
    drafts[r] = chosen[r];
  return rows;
}

gboolean
dfl_spec_round (DflSpec *s, GArray *emitted, GError **error)
{
  int n_tok = s->tokens->len, anchor = g_array_index (s->tokens, int, n_tok - 1);
  const int *tokens = (const int *) s->tokens->data;
  gint64 a = n_tok - 1;                /* the anchor's position */
  int m = 0, k, bonus, chain_m;
  gint64 t0 = g_get_monotonic_time (), t1;
  gboolean costed = FALSE, chain = FALSE;

  g_return_val_if_fail (!s->done, FALSE);
  g_return_val_if_fail (dfl_target_seq_length (s->seq) == a, FALSE);

  if (s->p.route != DFL_ROUTE_NONE) {
    if ((chain = dfl_route_choose (s->p.route, s->drafter, s->tip, &s->p.ngram, s->p.match_min,
                                   tokens, n_tok, s->block - 1, s->drafts, &chain_m, &s->cost,
                                   &costed))) {
      m = chain_m >= 0 ? chain_m
          : dfl_ngram_propose (&s->p.ngram, tokens, n_tok, s->block - 1, s->drafts, NULL);
      s->stats.chain_rounds++;
    } else {
      if ((m = dfl_block_propose (s->draft, a, anchor, s->p.selector, s->head_width, &s->block_tensor,
                                  s->drafts, error)) < 0)
        return FALSE;
      s->stats.block_rounds++;
    }
  }
  /* near the end of the context only the drafts that fit are verified: the
   * anchor and m drafts take positions a … a + m */
  m = (int) MIN ((gint64) m, dfl_target_config (s->target)->max_positions - a - 1);
  t1 = g_get_monotonic_time ();
  s->stats.draft_s += (t1 - t0) / 1e6;

  if (!dfl_verifier_run (s->verifier, s->seq, &s->p.sampler, a, anchor, s->drafts, m, &k, &bonus,
                         error))
    return FALSE;
  for (int j = 0; j < m; j++) {
    s->stats.proposed_at[j]++;
    if (j < k)
      s->stats.accepted_at[j]++;
  }
  if (s->drafter
      && !dfl_draft_ctx_queue_host (s->draft, a, dfl_verifier_taps (s->verifier), k + 1, error))
    return FALSE;
  memcpy (s->tip, dfl_verifier_tip (s->verifier), sizeof (float) * s->hs);
  s->stats.verify_s += (g_get_monotonic_time () - t1) / 1e6;
  if (costed)
    dfl_route_cost_observe (&s->cost, chain ? DFL_ROUTE_ARM_CHAIN : DFL_ROUTE_ARM_BLOCK, k + 1,
                            (g_get_monotonic_time () - t0) / 1e6);
  s->stats.rounds++;
  s->stats.round_tokens += k + 1;

  s->drafts[k] = bonus;
  for (int j = 0; j <= k; j++)
    if (!emit (s, s->drafts[j], emitted))
      break;
  return TRUE;
}
