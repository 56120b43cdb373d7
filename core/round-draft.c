/* gst-dflash — the round's drafting: the drafter's context, the block's
 * proposal and the chain's. Every use of the drafter by the round is here. */
#include "round.h"

gboolean
dfl_round_settle (DflDraftCtx *draft, gboolean first, gint64 pos, const DflTensor *taps,
                  gint64 anchor_pos, GError **error)
{
  if (first)
    dfl_draft_ctx_reset (draft);
  if (!dfl_draft_ctx_queue (draft, pos, taps, error))
    return FALSE;
  if (anchor_pos < 0)
    return TRUE;
  /* the block is next: the waiting rows become context now, in one batch */
  return dfl_draft_ctx_settle (draft, error) && dfl_draft_ctx_check (draft, anchor_pos, error);
}

int
dfl_round_propose_block (DflDraftCtx *draft, gint64 a, int anchor, int width, gboolean rescore,
                         const DflTensor *out, int *drafts, GError **error)
{
  int rows = dfl_drafter_weights_geometry (dfl_draft_ctx_weights (draft))->block - 1;
  g_autofree guint32 *chosen = NULL;

  if (!drafts)
    return dfl_draft_ctx_block (draft, a, (guint32) anchor, width, out, error) ? rows : -1;
  /* plain argmax is the selector's `plain` output: the A/B against re-scoring */
  chosen = g_new (guint32, rows);
  if (!dfl_draft_ctx_draft (draft, a, (guint32) anchor, width, out, rescore ? chosen : NULL,
                            rescore ? NULL : chosen, error))
    return -1;
  for (int r = 0; r < rows; r++)
    drafts[r] = chosen[r];
  return rows;
}

gboolean
dfl_round_settle_batch (DflDraftBatch *batch, DflDraftCtx *const *drafts, int n,
                        const gint64 *anchor_pos, GError **error)
{
  if (batch && !dfl_draft_ctx_settle_batch (batch, drafts, n, error))
    return FALSE;
  for (int i = 0; i < n; i++)
    if ((!batch && !dfl_draft_ctx_settle (drafts[i], error))
        || !dfl_draft_ctx_check (drafts[i], anchor_pos[i], error))
      return FALSE;
  return TRUE;
}

gboolean
dfl_round_propose_blocks (DflDraftBatch *batch, DflDraftCtx *const *drafts, int n,
                          const gint64 *a, const guint32 *anchor, int width, const DflTensor *out,
                          GError **error)
{
  return dfl_draft_ctx_block_batch (batch, drafts, n, a, anchor, width, out, error);
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
