/* gst-dflash — charts for the `dflash` command, drawn with cairo: a white
 * figure holding panels of grouped bars or lines, each with a title, axes,
 * tick labels and axis captions, a legend, and panels that only say why
 * there is nothing to draw; written out as a PNG. */
#pragma once

#include <cairo.h>
#include <glib.h>

G_BEGIN_DECLS

/* A figure: an RGB image, white where nothing is drawn. Colours are 0xRRGGBB. */
typedef struct _DflPlot DflPlot;

/* A rectangle in pixels, from its top left corner. */
typedef struct {
  double x, y, width, height;
} DflPlotBox;

typedef enum {
  DFL_PLOT_BARS,    /* each point a bar, the series' bars side by side */
  DFL_PLOT_LINES,   /* each series a line through its points, a dot on each */
} DflPlotStyle;

/* One series: n_points values (NaN: no value there), its colour and its
 * name in a legend. */
typedef struct {
  const char *label;
  guint32 color;
  const double *values;
} DflPlotSeries;

/* What a panel shows. The y axis starts at 0. */
typedef struct {
  DflPlotStyle style;
  const char *title;
  const char *subtitle;          /* a line under the title; NULL: none */
  const char *x_label, *y_label; /* the axes' captions, units included */
  const char *const *x_ticks;    /* n_points labels; NULL: 1 … n_points */
  int n_points;
  const DflPlotSeries *series;
  int n_series;
  double y_max;                  /* the top of the y axis; 0: a round number above the values */
  int value_decimals;            /* ≥ 0: each bar's value written over it with so many decimals */
} DflPlotPanel;

DflPlot *dfl_plot_new (int width, int height);
void dfl_plot_free (DflPlot *p);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (DflPlot, dfl_plot_free)

int dfl_plot_width (const DflPlot *p);
int dfl_plot_height (const DflPlot *p);

/* Text with its baseline's left end at (x, y), in a sans-serif font of
 * `size` pixels; returns the width drawn. */
double dfl_plot_text (DflPlot *p, double x, double y, double size, gboolean bold, guint32 color,
                      const char *text);

/* A legend in one row from (x, y), the top left of its first swatch: a
 * square of each series' colour before its label. Returns its width. */
double dfl_plot_legend (DflPlot *p, double x, double y, const DflPlotSeries *series, int n_series);

/* The panel drawn in the box. */
void dfl_plot_panel (DflPlot *p, const DflPlotBox *box, const DflPlotPanel *panel);

/* A panel with nothing to plot: its title, and the message (lines split at
 * '\n') in the middle of a framed area, saying why. */
void dfl_plot_message (DflPlot *p, const DflPlotBox *box, const char *title, const char *message);

/* Where dfl_plot_panel draws the bar of `series` at `point` for the panel in
 * the box; FALSE where it draws none there (not a bar panel, or no value). */
gboolean dfl_plot_bar_box (const DflPlotBox *box, const DflPlotPanel *panel, int series, int point,
                           DflPlotBox *bar);

/* The colour at pixel (x, y), 0xRRGGBB: what a test reads back. */
guint32 dfl_plot_pixel (DflPlot *p, int x, int y);

/* The figure as a PNG file. */
gboolean dfl_plot_write_png (DflPlot *p, const char *path, GError **error);

/* Empty cairo's and fontconfig's caches of fonts, as cairo advises before
 * exit under a memory checker (else their caches read as leaks). Only once
 * every figure is freed and nothing else in the process draws text. */
void dfl_plot_release_fonts (void);

G_END_DECLS
