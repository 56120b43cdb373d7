/* gst-dflash — the picture of `dflash ab`: what an A/B is run for, decode
 * speed of both sides per prompt and over all prompts (with B/A written on
 * it), beside τ per prompt and acceptance by draft position. A side that
 * drafts nothing gets no bars there, and the panel says so. */
#pragma once

#include "dflash-plot.h"

G_BEGIN_DECLS

#define DFL_AB_PLOT_WIDTH 1400
#define DFL_AB_PLOT_HEIGHT 900
#define DFL_AB_COLOR_A 0x3B6FB6
#define DFL_AB_COLOR_B 0xE08A2E

/* One side's figures, as ab measured them. */
typedef struct {
  const char *name;                  /* the pipeline file, as the legend shows it */
  double tokens_per_s, tau;          /* over all prompts */
  const double *prompt_tokens_per_s; /* one a prompt */
  const double *prompt_tau;          /* one a prompt */
  const double *accept_rate;         /* one a draft position; NaN where nothing was proposed */
  int positions;
} DflAbPlotSide;

typedef enum {
  DFL_AB_PANEL_SPEED,        /* decode tokens/s per prompt */
  DFL_AB_PANEL_SPEED_TOTAL,  /* decode tokens/s over all prompts, and B/A */
  DFL_AB_PANEL_TAU,          /* τ per prompt */
  DFL_AB_PANEL_ACCEPTANCE,   /* acceptance by draft position */
  DFL_AB_N_PANELS
} DflAbPanel;

/* Where the panel lies in the picture. */
void dfl_ab_plot_panel_box (DflAbPanel panel, DflPlotBox *box);

/* The picture of sides A and B (sides[0], sides[1]) over n_prompts prompts,
 * on a figure DFL_AB_PLOT_WIDTH × DFL_AB_PLOT_HEIGHT. */
void dfl_ab_plot_draw (DflPlot *p, const DflAbPlotSide sides[2], int n_prompts);

/* The picture as a PNG file. */
gboolean dfl_ab_plot_write (const char *path, const DflAbPlotSide sides[2], int n_prompts, GError **error);

G_END_DECLS
