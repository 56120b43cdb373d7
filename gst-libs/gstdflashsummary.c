/* gst-dflash — the dflash-summary message (see gstdflashsummary.h). */
#include "gstdflashsummary.h"

#include <math.h>

/* An array field of `type`, one value a draft position, each from `set`. */
static void
take_array (GstStructure *s, const char *field, GType type, const DflRoundStats *st,
            void (*set) (GValue *v, const DflRoundStats *st, int j))
{
  GValue array = G_VALUE_INIT, v = G_VALUE_INIT;

  g_value_init (&array, GST_TYPE_ARRAY);
  g_value_init (&v, type);
  for (int j = 0; j < st->positions; j++) {
    set (&v, st, j);
    gst_value_array_append_value (&array, &v);
  }
  g_value_unset (&v);
  gst_structure_take_value (s, field, &array);
}

static void
set_rate (GValue *v, const DflRoundStats *st, int j)
{
  double r = dfl_round_stats_accept_rate (st, j);

  g_value_set_double (v, isnan (r) ? 0.0 : r);
}

static void
set_proposed (GValue *v, const DflRoundStats *st, int j)
{
  g_value_set_int64 (v, st->proposed_at[j]);
}

static void
set_accepted (GValue *v, const DflRoundStats *st, int j)
{
  g_value_set_int64 (v, st->accepted_at[j]);
}

GstStructure *
gst_dflash_summary_new (const DflRoundStats *st)
{
  GstStructure *s = gst_structure_new (GST_DFLASH_SUMMARY_NAME,
      "sequences", G_TYPE_UINT, (guint) st->sequences, "rounds", G_TYPE_INT64, st->rounds,
      "new-tokens", G_TYPE_INT64, st->new_tokens, "round-tokens", G_TYPE_INT64, st->round_tokens,
      "block-rounds", G_TYPE_INT64, st->block_rounds,
      "chain-rounds", G_TYPE_INT64, st->chain_rounds,
      "tau", G_TYPE_DOUBLE, dfl_round_stats_tau (st),
      "tokens-per-second", G_TYPE_DOUBLE, dfl_round_stats_tokens_per_s (st),
      "draft-time", G_TYPE_DOUBLE, st->draft_s, "verify-time", G_TYPE_DOUBLE, st->verify_s,
      "wall-time", G_TYPE_DOUBLE, st->wall_s, NULL);

  take_array (s, "accept-rate", G_TYPE_DOUBLE, st, set_rate);
  take_array (s, "proposed-by-position", G_TYPE_INT64, st, set_proposed);
  take_array (s, "accepted-by-position", G_TYPE_INT64, st, set_accepted);
  return s;
}

/* The int64 counts of an array field into `to` (positions long). */
static gboolean
read_counts (const GstStructure *s, const char *field, gint64 *to, int positions)
{
  const GValue *array = gst_structure_get_value (s, field);

  if (!array || !GST_VALUE_HOLDS_ARRAY (array)
      || (int) gst_value_array_get_size (array) != positions)
    return FALSE;
  for (int j = 0; j < positions; j++) {
    const GValue *v = gst_value_array_get_value (array, j);
    if (!G_VALUE_HOLDS_INT64 (v))
      return FALSE;
    to[j] = g_value_get_int64 (v);
  }
  return TRUE;
}

gboolean
gst_dflash_summary_parse (const GstStructure *s, DflRoundStats *st)
{
  const GValue *proposed = gst_structure_get_value (s, "proposed-by-position");
  guint sequences = 0;

  dfl_round_stats_init (st, proposed && GST_VALUE_HOLDS_ARRAY (proposed)
                        ? (int) gst_value_array_get_size (proposed) : 0);
  if (gst_structure_has_name (s, GST_DFLASH_SUMMARY_NAME)
      && gst_structure_get (s, "sequences", G_TYPE_UINT, &sequences,
          "rounds", G_TYPE_INT64, &st->rounds, "new-tokens", G_TYPE_INT64, &st->new_tokens,
          "round-tokens", G_TYPE_INT64, &st->round_tokens,
          "block-rounds", G_TYPE_INT64, &st->block_rounds,
          "chain-rounds", G_TYPE_INT64, &st->chain_rounds,
          "draft-time", G_TYPE_DOUBLE, &st->draft_s, "verify-time", G_TYPE_DOUBLE, &st->verify_s,
          "wall-time", G_TYPE_DOUBLE, &st->wall_s, NULL)
      && read_counts (s, "proposed-by-position", st->proposed_at, st->positions)
      && read_counts (s, "accepted-by-position", st->accepted_at, st->positions)) {
    st->sequences = sequences;
    return TRUE;
  }
  dfl_round_stats_reset (st);
  return FALSE;
}
