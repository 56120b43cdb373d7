/* gst-dflash — the picture of `dflash ab` (see dflash-ab-plot.h). */
#include <math.h>

#include "dflash-ab-plot.h"

#define HEADER 84
#define GAP 16

static const guint32 side_colors[2] = { DFL_AB_COLOR_A, DFL_AB_COLOR_B };
static const char *const side_labels[2] = { "A", "B" };

/* A number as the picture writes it, with a '.' whatever the locale: the
 * tick labels beside it have one. */
static char *
fixed (double v, int decimals)
{
  char fmt[16], buf[G_ASCII_DTOSTR_BUF_SIZE];

  g_snprintf (fmt, sizeof fmt, "%%.%df", decimals);
  return g_strdup (g_ascii_formatd (buf, sizeof buf, fmt, v));
}

/* A side drafts where some position had a token proposed. */
static gboolean
drafts (const DflAbPlotSide *side)
{
  for (int j = 0; j < side->positions; j++)
    if (!isnan (side->accept_rate[j]))
      return TRUE;
  return FALSE;
}

void
dfl_ab_plot_panel_box (DflAbPanel panel, DflPlotBox *box)
{
  const double w = DFL_AB_PLOT_WIDTH - 2 * GAP, row = (DFL_AB_PLOT_HEIGHT - HEADER - GAP) / 2.0;
  const double speed_w = w * 0.64;

  switch (panel) {
    case DFL_AB_PANEL_SPEED:
      *box = (DflPlotBox) { GAP, HEADER, speed_w, row };
      break;
    case DFL_AB_PANEL_SPEED_TOTAL:
      *box = (DflPlotBox) { GAP + speed_w, HEADER, w - speed_w, row };
      break;
    case DFL_AB_PANEL_TAU:
      *box = (DflPlotBox) { GAP, HEADER + row, w / 2, row };
      break;
    case DFL_AB_PANEL_ACCEPTANCE:
    default:
      *box = (DflPlotBox) { GAP + w / 2, HEADER + row, w / 2, row };
      break;
  }
}

/* What the header says, then a legend naming each side's pipeline. */
static void
draw_header (DflPlot *p, const DflAbPlotSide sides[2], int n_prompts)
{
  g_autofree char *title = g_strdup_printf ("dflash ab: A against B on %d prompt%s", n_prompts,
                                            n_prompts == 1 ? "" : "s");
  g_autofree char *label_a = g_strdup_printf ("A  %s", sides[0].name);
  g_autofree char *label_b = g_strdup_printf ("B  %s", sides[1].name);
  const DflPlotSeries legend[2] = {
    { .label = label_a, .color = DFL_AB_COLOR_A },
    { .label = label_b, .color = DFL_AB_COLOR_B },
  };

  dfl_plot_text (p, GAP + 8, 32, 21, TRUE, 0x222222, title);
  dfl_plot_legend (p, GAP + 8, 48, legend, 2);
}

/* B's speed against A's, as a sentence. */
static char *
speed_ratio (const DflAbPlotSide sides[2])
{
  double r = sides[1].tokens_per_s / sides[0].tokens_per_s;
  g_autofree char *ratio = NULL, *percent = NULL;

  if (!(sides[0].tokens_per_s > 0) || !isfinite (r))
    return g_strdup ("B / A: no figure, A decoded nothing");
  ratio = fixed (r, 2);
  percent = fixed (fabs (r - 1) * 100, 0);
  if (fabs (r - 1) < 0.005)
    return g_strdup_printf ("B / A = %s\u00D7: as fast", ratio);
  return g_strdup_printf ("B / A = %s\u00D7: B is %s%% %s", ratio, percent, r > 1 ? "faster" : "slower");
}

static void
draw_speed (DflPlot *p, const DflAbPlotSide sides[2], int n_prompts)
{
  g_autofree char *ratio = speed_ratio (sides);
  g_autofree char *all = g_strdup_printf ("all %d prompt%s", n_prompts, n_prompts == 1 ? "" : "s");
  const char *all_tick[1] = { all };
  DflPlotSeries per_prompt[2], total[2];
  DflPlotPanel panel = {
    .style = DFL_PLOT_BARS, .title = "Decode speed per prompt",
    .subtitle = "tokens after the first (which prefill gives) over the rounds' wall time",
    .x_label = "prompt", .y_label = "decode tokens/s",
    .n_points = n_prompts, .series = per_prompt, .n_series = 2, .value_decimals = -1,
  };
  DflPlotBox box;

  for (int k = 0; k < 2; k++) {
    per_prompt[k] = (DflPlotSeries) { side_labels[k], side_colors[k], sides[k].prompt_tokens_per_s };
    total[k] = (DflPlotSeries) { side_labels[k], side_colors[k], &sides[k].tokens_per_s };
  }
  dfl_ab_plot_panel_box (DFL_AB_PANEL_SPEED, &box);
  dfl_plot_panel (p, &box, &panel);

  panel.title = "Decode speed, all prompts";
  panel.subtitle = ratio;
  panel.x_label = NULL;
  panel.x_ticks = all_tick;
  panel.n_points = 1;
  panel.series = total;
  panel.value_decimals = 1;
  dfl_ab_plot_panel_box (DFL_AB_PANEL_SPEED_TOTAL, &box);
  dfl_plot_panel (p, &box, &panel);
}

/* A panel of what only a side that drafts has (τ, acceptance): the sides
 * that draft are its series of `values` (one array a side); where one does
 * not, the subtitle says so and `without` what follows; where neither does,
 * the panel is the message `neither`. */
static void
draw_drafting_panel (DflPlot *p, DflAbPanel which, DflPlotPanel *panel, const DflAbPlotSide sides[2],
                     const double *const values[2], const char *subtitle, const char *without,
                     const char *neither)
{
  g_autofree char *full = NULL;
  DflPlotSeries series[2];
  const char *none = NULL;
  DflPlotBox box;
  int n = 0;

  for (int k = 0; k < 2; k++) {
    if (drafts (&sides[k]))
      series[n++] = (DflPlotSeries) { side_labels[k], side_colors[k], values[k] };
    else
      none = side_labels[k];
  }
  dfl_ab_plot_panel_box (which, &box);
  if (n == 0) {
    dfl_plot_message (p, &box, panel->title, neither);
    return;
  }
  full = none ? g_strdup_printf ("%s; %s drafts nothing, so %s", subtitle, none, without) : g_strdup (subtitle);
  panel->subtitle = full;
  panel->series = series;
  panel->n_series = n;
  dfl_plot_panel (p, &box, panel);
}

static void
draw_tau (DflPlot *p, const DflAbPlotSide sides[2], int n_prompts)
{
  const double *const values[2] = { sides[0].prompt_tau, sides[1].prompt_tau };
  g_autofree char *tau_a = fixed (sides[0].tau, 2), *tau_b = fixed (sides[1].tau, 2);
  g_autofree char *subtitle = g_strdup_printf ("all prompts: A %s, B %s", tau_a, tau_b);
  DflPlotPanel panel = {
    .style = DFL_PLOT_BARS, .title = "\u03C4 per prompt: tokens per target pass",
    .x_label = "prompt", .y_label = "\u03C4 (tokens per pass)",
    .n_points = n_prompts, .value_decimals = -1,
  };

  draw_drafting_panel (p, DFL_AB_PANEL_TAU, &panel, sides, values, subtitle,
                       "its \u03C4 is 1 and it has no bars",
                       "Neither side drafts: every target pass\ngives one token (\u03C4 = 1 on every prompt).");
}

static void
draw_acceptance (DflPlot *p, const DflAbPlotSide sides[2])
{
  int positions = MAX (sides[0].positions, sides[1].positions);
  g_autofree double *rates = g_new (double, 2 * MAX (positions, 1));
  const double *const values[2] = { rates, rates + positions };
  DflPlotPanel panel = {
    .style = DFL_PLOT_LINES, .title = "Acceptance by draft position",
    .x_label = "position in the drafted block", .y_label = "share of proposals accepted",
    .n_points = positions, .y_max = 1, .value_decimals = -1,
  };

  /* NaN past a side's last position: nothing proposed there */
  for (int k = 0; k < 2; k++)
    for (int j = 0; j < positions; j++)
      rates[k * positions + j] = j < sides[k].positions ? sides[k].accept_rate[j] : NAN;
  draw_drafting_panel (p, DFL_AB_PANEL_ACCEPTANCE, &panel, sides, values, "over all prompts",
                       "it has no positions", "Neither side drafts:\nno draft positions to show.");
}

void
dfl_ab_plot_draw (DflPlot *p, const DflAbPlotSide sides[2], int n_prompts)
{
  draw_header (p, sides, n_prompts);
  draw_speed (p, sides, n_prompts);
  draw_tau (p, sides, n_prompts);
  draw_acceptance (p, sides);
}

gboolean
dfl_ab_plot_write (const char *path, const DflAbPlotSide sides[2], int n_prompts, GError **error)
{
  g_autoptr (DflPlot) p = dfl_plot_new (DFL_AB_PLOT_WIDTH, DFL_AB_PLOT_HEIGHT);

  dfl_ab_plot_draw (p, sides, n_prompts);
  return dfl_plot_write_png (p, path, error);
}
