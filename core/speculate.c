/* gst-dflash — the speculative loop of one sequence. */
#include "speculate.h"

#include <string.h>

#include "dfl-error.h"

struct _DflSpec {
  const DflTarget *target;
  DflDrafterWeights *drafter;   /* bound to the target on the CPU */
  DflDraftCtx *draft;
  DflSpecParams p;
  DflRoundStats stats;
  DflTargetSeq *seq;
  GArray *tokens;        /* prompt + emitted; the last one is the anchor */
  int prompt_len;
  int block;             /* rows of a round's verification at most: 1 + drafts */
  gboolean done;
  DflSpecEnd end;
  DflVerifier *verifier;
  /* a round's buffers */
  int *drafts;
  float *block_out, *tip;
  DflTensor block_tensor;   /* block_out: the block's rows and logits */
  int hs, tap_width, head_width;
  DflRouteCost cost;     /* DFL_ROUTE_COST's figures, this sequence's rounds */
};

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

  if (dfl_route_needs_drafter (params->route) && !drafter) {
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
  dfl_round_stats_init (&s->stats, s->block - 1);
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
  g_free (s->tip);
  dfl_round_stats_clear (&s->stats);
  g_free (s);
}

const DflRoundStats *
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
                          "after %" G_GINT64_FORMAT " new tokens, before max-new %d; a shorter prompt leaves "
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
  DflRoundTaps want = { 0 };
  gint64 t0 = g_get_monotonic_time ();
  int first;

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
    want = (DflRoundTaps) { .layers = g->taps, .n_layers = g->n_taps,
                            .host = taps = g_new (float, (gsize) n * s->tap_width) };
  }
  if (!dfl_round_prefill (s->seq, ids, n, &s->p.sampler, &want, s->tip, &first, error))
    return FALSE;
  g_array_append_vals (s->tokens, ids, n);
  s->prompt_len = n;
  if (s->drafter) {
    DflTensor rows = dfl_tensor_2d (NULL, taps, 0, DFL_DTYPE_F32, n, s->tap_width);
    if (!dfl_round_settle (s->draft, TRUE, 0, &rows, -1, error))
      return FALSE;
  }
  dfl_round_stats_add_prefill (&s->stats, n, (g_get_monotonic_time () - t0) / 1e6);
  emit (s, first, emitted);
  return TRUE;
}

/* The round's drafts into s->drafts: the route's choice of drafter, and
 * its proposal. Returns how many, or −1 with an error. */
static int
propose (DflSpec *s, gint64 a, int anchor, DflRoundSource *source, gboolean *costed,
         GError **error)
{
  const int *tokens = (const int *) s->tokens->data;
  int n_tok = s->tokens->len, match = 0, chain_m = -1;

  /* the match rules decide on the chain's proposal: it comes first */
  if (dfl_route_reads_match (s->p.route))
    chain_m = dfl_round_propose_chain (&s->p.ngram, tokens, n_tok, s->block - 1, 0, s->drafts,
                                       &match);
  *source = dfl_round_route (s->p.route, s->p.match_min, s->drafter, s->tip, match, &s->cost,
                             costed);
  switch (*source) {
    case DFL_ROUND_CHAIN:
      return chain_m >= 0 ? chain_m
          : dfl_round_propose_chain (&s->p.ngram, tokens, n_tok, s->block - 1, 0, s->drafts,
                                     NULL);
    case DFL_ROUND_BLOCK:
      return dfl_round_propose_block (s->draft, a, anchor, s->head_width, s->p.selector,
                                      &s->block_tensor, s->drafts, error);
    case DFL_ROUND_PLAIN:
    default:
      return 0;
  }
}

gboolean
dfl_spec_round (DflSpec *s, GArray *emitted, GError **error)
{
  int anchor = g_array_index (s->tokens, int, s->tokens->len - 1);
  gint64 a = s->tokens->len - 1;       /* the anchor's position */
  gint64 t0 = g_get_monotonic_time (), t1;
  gboolean costed = FALSE;
  DflRoundSource source;
  DflVerdict v;
  int m;

  g_return_val_if_fail (!s->done, FALSE);
  g_return_val_if_fail (dfl_target_seq_length (s->seq) == a, FALSE);

  if ((m = propose (s, a, anchor, &source, &costed, error)) < 0)
    return FALSE;
  /* near the end of the context only the drafts that fit are verified: the
   * anchor and m drafts take positions a … a + m */
  m = (int) MIN ((gint64) m, dfl_target_config (s->target)->max_positions - a - 1);
  t1 = g_get_monotonic_time ();

  if (!dfl_round_verify (s->verifier, s->seq, &s->p.sampler, a, anchor, s->drafts, m, NULL, &v,
                         error))
    return FALSE;
  if (s->drafter) {
    DflTensor rows = dfl_tensor_2d (NULL, (gpointer) v.taps, 0, DFL_DTYPE_F32, v.accepted + 1,
                                    s->tap_width);
    if (!dfl_round_settle (s->draft, FALSE, a, &rows, -1, error))
      return FALSE;
  }
  memcpy (s->tip, v.tip, sizeof (float) * s->hs);
  dfl_round_stats_add_round (&s->stats, source, &v, (t1 - t0) / 1e6,
                             (g_get_monotonic_time () - t1) / 1e6);
  if (costed)
    dfl_route_cost_observe (&s->cost, source == DFL_ROUND_CHAIN ? DFL_ROUTE_ARM_CHAIN
                            : DFL_ROUTE_ARM_BLOCK, v.accepted + 1,
                            (g_get_monotonic_time () - t0) / 1e6);

  s->drafts[v.accepted] = v.bonus;
  for (int j = 0; j <= v.accepted; j++)
    if (!emit (s, s->drafts[j], emitted))
      break;
  return TRUE;
}
