/* gst-dflash — the round's target passes: the prompt's, and verification. */
#include "round.h"

#include <string.h>

#include "dfl-error.h"

/* Rows for `items` rounds at once (grown to the largest batch seen), each
 * round's rows at item × max_rows. */
struct _DflVerifier {
  int max_rows, vocab, hs, tap_width;
  int *tap_layers, n_taps;
  int items;
  int *ids;
  int32_t *picks;        /* the target's choice after each row */
  float *logits;         /* [rows][vocab], made when first needed */
  float *hidden;         /* [rows][hidden]: final-normed rows */
  float *taps;           /* [rows][tap width]: host targets' taps */
  DflForwardOut *outs;
  DflTargetBatchItem *batch;
};

/* The taps a pass is asked for, where `taps` asks for any. */
static void
plan_taps (DflForwardOut *out, const DflRoundTaps *taps)
{
  if (!taps || taps->n_layers == 0)
    return;
  out->tap_layers = taps->layers;
  out->n_tap_layers = taps->n_layers;
  out->taps = taps->host;
  out->device_taps = taps->device;
}

gboolean
dfl_round_prefill (DflTargetSeq *seq, const int *ids, int n, const DflSampler *sampler,
                   const DflRoundTaps *taps, float *tip, int *first, GError **error)
{
  const DflTarget *t = dfl_target_seq_target (seq);
  int vocab = dfl_target_config (t)->vocab;
  g_autofree float *logits = g_new (float, vocab);
  DflForwardOut out = { .logits_from = n - 1, .logits = logits, .hidden = tip };

  g_return_val_if_fail (n >= 1, FALSE);
  g_return_val_if_fail (dfl_target_seq_length (seq) == 0, FALSE);
  plan_taps (&out, taps);
  if (!dfl_target_forward (t, seq, ids, n, &out, error))
    return FALSE;
  *first = dfl_sampler_pick (sampler, logits, vocab, n);
  return TRUE;
}

/* Room for `n` rounds' rows; the logits only where `logits`. */
static void
ensure_rows (DflVerifier *v, int n, gboolean logits)
{
  gsize rows = (gsize) n * v->max_rows;

  if (n > v->items) {
    v->ids = g_renew (int, v->ids, rows);
    v->picks = g_renew (int32_t, v->picks, rows);
    v->hidden = g_renew (float, v->hidden, rows * v->hs);
    v->taps = g_renew (float, v->taps, rows * MAX (v->tap_width, 1));
    v->outs = g_renew (DflForwardOut, v->outs, n);
    v->batch = g_renew (DflTargetBatchItem, v->batch, n);
    /* the logits, the largest rows, are made again at their next use */
    g_clear_pointer (&v->logits, g_free);
    v->items = n;
  }
  if (logits && !v->logits)
    v->logits = g_new (float, (gsize) v->items * v->max_rows * v->vocab);
}

DflVerifier *
dfl_verifier_new (const DflTarget *target, int max_drafts, const int *tap_layers, int n_taps)
{
  const DflQwen3Config *c = dfl_target_config (target);
  DflVerifier *v = g_new0 (DflVerifier, 1);

  v->max_rows = max_drafts + 1;
  v->vocab = c->vocab;
  v->hs = c->hidden;
  v->n_taps = n_taps;
  v->tap_layers = g_memdup2 (tap_layers, sizeof (int) * MAX (n_taps, 1));
  v->tap_width = n_taps * c->hidden;
  ensure_rows (v, 1, FALSE);
  return v;
}

void
dfl_verifier_free (DflVerifier *v)
{
  if (!v)
    return;
  g_free (v->tap_layers);
  g_free (v->ids);
  g_free (v->picks);
  g_free (v->logits);
  g_free (v->hidden);
  g_free (v->taps);
  g_free (v->outs);
  g_free (v->batch);
  g_free (v);
}

gboolean
dfl_round_verify (DflVerifier *v, DflTargetSeq *seq, const DflSampler *sampler, gint64 a,
                  int anchor, const int *drafts, int m, const DflTensor *device_taps,
                  DflVerdict *verdict, GError **error)
{
  DflRoundVerifyItem item = { .seq = seq, .sampler = sampler, .a = a, .anchor = anchor,
                              .drafts = drafts, .m = m, .device_taps = device_taps };

  if (!dfl_round_verify_batch (v, &item, 1, error))
    return FALSE;
  *verdict = item.verdict;
  return TRUE;
}

gboolean
dfl_round_verify_batch (DflVerifier *v, DflRoundVerifyItem *items, int n, GError **error)
{
  const DflTarget *t;
  gboolean need_logits = FALSE;
  int i;

  g_return_val_if_fail (n >= 1, FALSE);
  t = dfl_target_seq_target (items[0].seq);
  for (i = 0; i < n; i++) {
    DflRoundVerifyItem *it = &items[i];
    g_return_val_if_fail (it->m >= 0 && it->m < v->max_rows, FALSE);
    g_return_val_if_fail (dfl_target_seq_target (it->seq) == t, FALSE);
    if (dfl_target_seq_length (it->seq) != it->a) {
      g_autofree char *which = n > 1 ? g_strdup_printf ("round %d of the batch: ", i) : NULL;
      g_set_error (error, DFL_ERROR, DFL_ERROR_MISMATCH, "%sa round anchored at %"
                   G_GINT64_FORMAT " but the target's cache holds %d positions",
                   which ? which : "", it->a, dfl_target_seq_length (it->seq));
      return FALSE;
    }
    /* greedy: the target's argmax (from a device only the ids come back;
     * a host target computes it over the logits rows kept here); sampled:
     * the logits, for the sampler */
    if (it->sampler->temperature > 0.0f || !dfl_target_device (t))
      need_logits = TRUE;
  }
  ensure_rows (v, n, need_logits);
  for (i = 0; i < n; i++) {
    DflRoundVerifyItem *it = &items[i];
    gsize row0 = (gsize) i * v->max_rows;
    gboolean greedy = it->sampler->temperature <= 0.0f;
    DflRoundTaps taps = { .layers = v->tap_layers, .n_layers = v->n_taps,
                          .host = it->device_taps ? NULL : v->taps + row0 * MAX (v->tap_width, 1),
                          .device = it->device_taps };
    DflForwardOut *out = &v->outs[i];

    *out = (DflForwardOut) { .logits_from = 0, .hidden = v->hidden + row0 * v->hs };
    if (greedy)
      out->argmax = v->picks + row0;
    if (!greedy || !dfl_target_device (t))
      out->logits = v->logits + row0 * v->vocab;
    plan_taps (out, &taps);
    v->ids[row0] = it->anchor;
    if (it->m > 0)
      memcpy (v->ids + row0 + 1, it->drafts, sizeof (int) * it->m);
    v->batch[i] = (DflTargetBatchItem) { .seq = it->seq, .ids = v->ids + row0, .n = it->m + 1,
                                         .out = out };
  }
  /* one sequence goes through the plain forward, which every engine runs */
  if (n == 1 ? !dfl_target_forward (t, items[0].seq, v->ids, items[0].m + 1, &v->outs[0], error)
      : !dfl_target_forward_batch (t, v->batch, n, error))
    return FALSE;
  for (i = 0; i < n; i++) {
    DflRoundVerifyItem *it = &items[i];
    gsize row0 = (gsize) i * v->max_rows;
    gboolean greedy = it->sampler->temperature <= 0.0f;
    int k;

    /* accept while the draft is what the target itself picks at that position */
    for (k = 0; k <= it->m; k++) {
      int pick = greedy ? v->picks[row0 + k]
          : dfl_sampler_pick (it->sampler, v->logits + (row0 + k) * v->vocab, v->vocab,
                              it->a + k + 1);
      if (k == it->m || it->drafts[k] != pick) {
        it->verdict.bonus = pick;
        break;
      }
    }
    dfl_target_seq_truncate (it->seq, it->a + k + 1);
    it->verdict.drafted = it->m;
    it->verdict.accepted = k;
    it->verdict.taps = !it->device_taps && v->n_taps ? v->taps + row0 * MAX (v->tap_width, 1)
        : NULL;
    it->verdict.tip = v->hidden + (row0 + k) * v->hs;
  }
  return TRUE;
}
