/* gst-dflash — the round's drafting: the drafter's context, the block's
 * proposal and the chain's. Every use of the drafter by the round is here. */
#include "round.h"

gboolean
dfl_round_settle (DflDrafter *drafter, gboolean first, gint64 pos, const float *taps, gsize rows,
                  gint64 anchor_pos, GError **error)
{
  if (first)
    dfl_drafter_reset (drafter);
  dfl_drafter_queue_context (drafter, pos, taps, rows);
  if (anchor_pos < 0)
    return TRUE;
  /* the block is next: the waiting rows become context now, in one batch */
  dfl_drafter_settle (drafter);
  return dfl_drafter_context_check (drafter, anchor_pos, error);
}

int
dfl_round_propose_block (const DflTarget *target, DflDrafter *drafter, gint64 a, int anchor,
                         int width, gboolean rescore, float *h, float *logits, int *drafts,
                         GError **error)
{
  const DflDrafterGeometry *g = dfl_drafter_geometry (drafter);
  int rows = g->block - 1, mask = g->mask_token, hs = dfl_target_config (target)->hidden;
  g_autofree guint32 *chosen = NULL;

  dfl_target_embed (target, &anchor, 1, h);
  for (int r = 1; r < g->block; r++)
    dfl_target_embed (target, &mask, 1, h + (gsize) r * hs);
  if (!dfl_drafter_block (drafter, a, h, error))
    return -1;
  dfl_target_head (target, h + hs, rows, width, logits);
  if (!drafts)
    return rows;
  /* plain argmax is the selector's `plain` output: the A/B against re-scoring */
  chosen = g_new (guint32, rows);
  dfl_drafter_select (drafter, h + hs, rows, logits, width, anchor, rescore ? chosen : NULL,
                      rescore ? NULL : chosen);
  for (int r = 0; r < rows; r++)
    drafts[r] = chosen[r];
  return rows;
}

int
dfl_round_propose_chain (const DflNgram *ngram, const int *tokens, int n, int max_draft,
                         double draft_per_match, int *drafts, int *match)
{
  int found = 0, m = dfl_ngram_propose (ngram, tokens, n, max_draft, drafts, &found);

  if (draft_per_match > 0 && m > (int) (found * draft_per_match))
    m = (int) (found * draft_per_match);
  if (match)
    *match = found;
  return m;
}
