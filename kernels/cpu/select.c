/* gst-dflash — choosing tokens from a block's rows (CPU): the top
 * candidates of a row and the selector's re-scoring of them. */
#include "dfl-kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "scan-above.h"

/* x[from, to) offered in order to the `*have` best kept so far. */
static void
top_k_offer (const float *x, int from, int to, int k, float *values, int32_t *indices, int *have)
{
  for (int i = from; i < to; i++) {
    float v = x[i];
    int at;
    if (isnan (v))
      continue;
    /* not above the last kept: the first of equals stays */
    if (*have == k && v <= values[k - 1])
      continue;
    /* after every kept value ≥ v: equals keep their order */
    for (at = *have; at > 0 && values[at - 1] < v; at--)
      ;
    if (*have < k)
      (*have)++;
    memmove (values + at + 1, values + at, sizeof (float) * (*have - 1 - at));
    memmove (indices + at + 1, indices + at, sizeof (int32_t) * (*have - 1 - at));
    values[at] = v;
    indices[at] = i;
  }
}

#if defined(__x86_64__)
/* Once k are kept, only the stretches of eight that hold a value above the
 * last kept are offered (scan-above.h). Most of a row of logits falls
 * below its top eight at once: this was a tenth of a block's drafting on
 * two cores (8192 logits a row, one element at a time). */
__attribute__ ((target ("avx2"))) static int
top_k_avx2 (const float *x, int n, int k, float *values, int32_t *indices)
{
  int have = 0, i = 0;

  for (; i < n && have < k; i++)
    top_k_offer (x, i, i + 1, k, values, indices, &have);
  while (have == k && (i = dfl_scan_above (x, i, n, values[k - 1])) + 8 <= n) {
    top_k_offer (x, i, i + 8, k, values, indices, &have);
    i += 8;
  }
  top_k_offer (x, i, n, k, values, indices, &have);
  return have;
}
#endif

int
dfl_top_k_row (const float *x, int n, int k, float *values, int32_t *indices)
{
  int have = 0;

#if defined(__x86_64__)
  if (dfl_kernels_isa () != DFL_KERNELS_GENERIC)
    have = top_k_avx2 (x, n, k, values, indices);
  else
#endif
    top_k_offer (x, 0, n, k, values, indices, &have);
  for (int i = have; i < k; i++) {
    values[i] = NAN;
    indices[i] = -1;
  }
  return have;
}

void
dfl_select_rescore (const int32_t *cand, const float *cand_logit, int rows, int k,
                    const float *hp, int rank, const uint16_t *pred_book,
                    const uint16_t *succ_book, int32_t anchor, int32_t *chosen)
{
  float *pc = malloc (sizeof (float) * rank), *sc = malloc (sizeof (float) * rank);
  int32_t prev = anchor;

  for (int r = 0; r < rows; r++) {
    const int32_t *cr = cand + (size_t) r * k;
    int32_t best_tok = cr[0] >= 0 ? cr[0] : 0;
    float best = -INFINITY;

    dfl_f16_to_f32_n (pred_book + (size_t) prev * rank, pc, rank);
    for (int i = 0; i < rank; i++)
      pc[i] *= hp[(size_t) r * rank + i];
    for (int c = 0; c < k && cr[c] >= 0; c++) {
      float s = 0.0f;
      dfl_f16_to_f32_n (succ_book + (size_t) cr[c] * rank, sc, rank);
      for (int i = 0; i < rank; i++)
        s += pc[i] * sc[i];
      s += cand_logit[(size_t) r * k + c];
      /* strictly above: a tie keeps the earlier (higher-logit) candidate */
      if (s > best) {
        best = s;
        best_tok = cr[c];
      }
    }
    chosen[r] = prev = best_tok;
  }
  free (pc);
  free (sc);
}
