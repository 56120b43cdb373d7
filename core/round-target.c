/* gst-dflash — the round's target passes: the prompt's, and verification. */
#include "round.h"

#include <string.h>

#include "dfl-error.h"

struct _DflVerifier {
  int max_rows, vocab, hs, tap_width;
  int *tap_layers, n_taps;
  int *ids;
  int32_t *picks;        /* [max_rows]: the target's choice after each row */
  float *logits;         /* [max_rows][vocab], made when first needed */
  float *hidden;         /* [max_rows][hidden]: final-normed rows */
  float *taps;           /* [max_rows][tap width]: host targets' taps */
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
  v->ids = g_new (int, v->max_rows);
  v->picks = g_new (int32_t, v->max_rows);
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
  g_free (v->picks);
  g_free (v->logits);
  g_free (v->hidden);
  g_free (v->taps);
  g_free (v);
}

gboolean
dfl_round_verify (DflVerifier *v, DflTargetSeq *seq, const DflSampler *sampler, gint64 a,
                  int anchor, const int *drafts, int m, const DflTensor *device_taps,
                  DflVerdict *verdict, GError **error)
{
  const DflTarget *t = dfl_target_seq_target (seq);
  gboolean greedy = sampler->temperature <= 0.0f;
  DflRoundTaps taps = { .layers = v->tap_layers, .n_layers = v->n_taps,
                        .host = device_taps ? NULL : v->taps, .device = device_taps };
  DflForwardOut out = { .logits_from = 0, .hidden = v->hidden };
  int k;

  g_return_val_if_fail (m >= 0 && m < v->max_rows, FALSE);
  if (dfl_target_seq_length (seq) != a) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_MISMATCH, "a round anchored at %" G_GINT64_FORMAT
                 " but the target's cache holds %d positions", a, dfl_target_seq_length (seq));
    return FALSE;
  }
  /* greedy: the target's argmax (from a device only the ids come back;
   * a host target computes it over the logits rows kept here); sampled:
   * the logits, for the sampler */
  if (greedy)
    out.argmax = v->picks;
  if (!greedy || !dfl_target_device (t)) {
    if (!v->logits)
      v->logits = g_new (float, (gsize) v->max_rows * v->vocab);
    out.logits = v->logits;
  }
  plan_taps (&out, &taps);
  v->ids[0] = anchor;
  if (m > 0)
    memcpy (v->ids + 1, drafts, sizeof (int) * m);
  if (!dfl_target_forward (t, seq, v->ids, m + 1, &out, error))
    return FALSE;
  /* accept while the draft is what the target itself picks at that position */
  for (k = 0; k <= m; k++) {
    int pick = greedy ? v->picks[k]
        : dfl_sampler_pick (sampler, v->logits + (gsize) k * v->vocab, v->vocab, a + k + 1);
    if (k == m || drafts[k] != pick) {
      verdict->bonus = pick;
      break;
    }
  }
  dfl_target_seq_truncate (seq, a + k + 1);
  verdict->drafted = m;
  verdict->accepted = k;
  verdict->taps = taps.host && v->n_taps ? v->taps : NULL;
  verdict->tip = v->hidden + (gsize) k * v->hs;
  return TRUE;
}
