/* gst-dflash — prompt lookup drafting. */
#include "ngram.h"

#include <string.h>

int
dfl_ngram_propose (const DflNgram *g, const int *tokens, int n, int max_draft,
                   int *draft, int *match)
{
  if (match)
    *match = 0;
  if (max_draft <= 0)
    return 0;
  for (int len = MIN (g->max_n, n - 1); len >= MAX (g->min_n, 1); len--) {
    const int *suffix = tokens + n - len;
    int best_at = -1, best_follow = 0;
    /* The latest earlier occurrence predicts best, but one so recent that
     * little follows it (a run of one token) proposes little: take the latest
     * with a whole proposal after it, else the one with the most. */
    for (int at = n - len - 1; at >= 0; at--) {
      int follow;
      if (memcmp (tokens + at, suffix, sizeof (int) * len) != 0)
        continue;
      follow = MIN (max_draft, n - (at + len));
      if (follow > best_follow) {
        best_follow = follow;
        best_at = at;
        if (follow == max_draft)
          break;
      }
    }
    if (best_at >= 0) {
      memcpy (draft, tokens + best_at + len, sizeof (int) * best_follow);
      if (match)
        *match = len;
      return best_follow;
    }
  }
  return 0;
}
