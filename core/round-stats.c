/* gst-dflash — the round's figures: one accumulator for the core's loop,
 * the verifier's messages and the tools that print them. */
#include "round.h"

#include <math.h>
#include <string.h>

void
dfl_round_stats_init (DflRoundStats *st, int positions)
{
  memset (st, 0, sizeof *st);
  st->positions = MAX (positions, 0);
  st->proposed_at = g_new0 (gint64, MAX (st->positions, 1));
  st->accepted_at = g_new0 (gint64, MAX (st->positions, 1));
}

void
dfl_round_stats_clear (DflRoundStats *st)
{
  g_clear_pointer (&st->proposed_at, g_free);
  g_clear_pointer (&st->accepted_at, g_free);
  st->positions = 0;
}

void
dfl_round_stats_reset (DflRoundStats *st)
{
  int positions = st->positions;

  dfl_round_stats_clear (st);
  dfl_round_stats_init (st, positions);
}

/* Count positions up to `positions` from now on. */
static void
grow (DflRoundStats *st, int positions)
{
  if (positions <= st->positions)
    return;
  st->proposed_at = g_renew (gint64, st->proposed_at, positions);
  st->accepted_at = g_renew (gint64, st->accepted_at, positions);
  for (int j = st->positions; j < positions; j++)
    st->proposed_at[j] = st->accepted_at[j] = 0;
  st->positions = positions;
}

void
dfl_round_stats_add_prefill (DflRoundStats *st, int tokens, double seconds)
{
  st->sequences++;
  st->prompt_tokens += tokens;
  st->prefill_s += seconds;
}

void
dfl_round_stats_add_round (DflRoundStats *st, DflRoundSource source, const DflVerdict *v,
                           double draft_s, double verify_s)
{
  grow (st, v->drafted);
  st->rounds++;
  st->round_tokens += v->accepted + 1;
  st->block_rounds += source == DFL_ROUND_BLOCK;
  st->chain_rounds += source == DFL_ROUND_CHAIN;
  /* a round drafting m and keeping k proposed positions 1 … m and had
   * 1 … k accepted */
  for (int j = 0; j < v->drafted; j++) {
    st->proposed_at[j]++;
    if (j < v->accepted)
      st->accepted_at[j]++;
  }
  st->draft_s += draft_s;
  st->verify_s += verify_s;
}

void
dfl_round_stats_merge (DflRoundStats *to, const DflRoundStats *from)
{
  grow (to, from->positions);
  to->sequences += from->sequences;
  to->prompt_tokens += from->prompt_tokens;
  to->new_tokens += from->new_tokens;
  to->rounds += from->rounds;
  to->block_rounds += from->block_rounds;
  to->chain_rounds += from->chain_rounds;
  to->round_tokens += from->round_tokens;
  to->prefill_s += from->prefill_s;
  to->draft_s += from->draft_s;
  to->verify_s += from->verify_s;
  to->wall_s += from->wall_s;
  for (int j = 0; j < from->positions; j++) {
    to->proposed_at[j] += from->proposed_at[j];
    to->accepted_at[j] += from->accepted_at[j];
  }
}

double
dfl_round_stats_tau (const DflRoundStats *st)
{
  return st->rounds ? (double) st->round_tokens / st->rounds : 0.0;
}

double
dfl_round_stats_accept_rate (const DflRoundStats *st, int j)
{
  if (j < 0 || j >= st->positions || st->proposed_at[j] == 0)
    return NAN;
  return (double) st->accepted_at[j] / st->proposed_at[j];
}

double
dfl_round_stats_tokens_per_s (const DflRoundStats *st)
{
  return st->wall_s > 0 ? MAX (st->new_tokens - st->sequences, 0) / st->wall_s : 0.0;
}
