/* gst-dflash — charts for the `dflash` command, drawn with cairo (see
 * dflash-plot.h). */
#include <fontconfig/fontconfig.h>
#include <math.h>
#include <string.h>

#include "dfl-error.h"
#include "dflash-plot.h"

#define INK 0x222222
#define MUTED 0x555555
#define AXIS 0x555555
#define GRID 0xE3E3E3
#define FRAME 0xCCCCCC

#define TITLE_SIZE 17
#define LABEL_SIZE 13
#define MAX_BAR 72
#define TICK_SIZE 12

struct _DflPlot {
  cairo_surface_t *surface;
  cairo_t *cr;
};

/* Where a panel draws: its data area and its y axis. */
typedef struct {
  DflPlotBox area;
  double y_max, y_step;
  int decimals;
} Layout;

DflPlot *
dfl_plot_new (int width, int height)
{
  DflPlot *p = g_new0 (DflPlot, 1);

  /* RGB24: an opaque image, written to PNG as 8-bit RGB */
  p->surface = cairo_image_surface_create (CAIRO_FORMAT_RGB24, width, height);
  p->cr = cairo_create (p->surface);
  cairo_set_source_rgb (p->cr, 1, 1, 1);
  cairo_paint (p->cr);
  return p;
}

void
dfl_plot_free (DflPlot *p)
{
  if (!p)
    return;
  cairo_destroy (p->cr);
  cairo_surface_destroy (p->surface);
  g_free (p);
}

int
dfl_plot_width (const DflPlot *p)
{
  return cairo_image_surface_get_width (p->surface);
}

int
dfl_plot_height (const DflPlot *p)
{
  return cairo_image_surface_get_height (p->surface);
}

static void
set_color (cairo_t *cr, guint32 rgb)
{
  cairo_set_source_rgb (cr, ((rgb >> 16) & 0xFF) / 255.0, ((rgb >> 8) & 0xFF) / 255.0, (rgb & 0xFF) / 255.0);
}

static void
set_font (cairo_t *cr, double size, gboolean bold)
{
  cairo_select_font_face (cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL,
                          bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size (cr, size);
}

static double
text_width (DflPlot *p, double size, gboolean bold, const char *text)
{
  cairo_text_extents_t ext;

  set_font (p->cr, size, bold);
  cairo_text_extents (p->cr, text, &ext);
  return ext.x_advance;
}

double
dfl_plot_text (DflPlot *p, double x, double y, double size, gboolean bold, guint32 color,
               const char *text)
{
  double w = text_width (p, size, bold, text);

  set_color (p->cr, color);
  cairo_move_to (p->cr, x, y);
  cairo_show_text (p->cr, text);
  return w;
}

/* Text whose baseline's middle is at (x, y). */
static void
text_centred (DflPlot *p, double x, double y, double size, gboolean bold, guint32 color, const char *text)
{
  dfl_plot_text (p, x - text_width (p, size, bold, text) / 2, y, size, bold, color, text);
}

/* A filled rectangle on whole pixels, so that its inside is exactly its colour. */
static void
fill_box (DflPlot *p, double x, double y, double w, double h, guint32 color)
{
  double x0 = round (x), y0 = round (y);

  set_color (p->cr, color);
  cairo_rectangle (p->cr, x0, y0, round (x + w) - x0, round (y + h) - y0);
  cairo_fill (p->cr);
}

/* A line one pixel wide from (x0, y0) to (x1, y1), both on whole pixels. */
static void
hairline (DflPlot *p, double x0, double y0, double x1, double y1, guint32 color)
{
  set_color (p->cr, color);
  cairo_set_line_width (p->cr, 1);
  /* a 1-pixel line covers whole pixels when it runs through their middles */
  cairo_move_to (p->cr, round (x0) + 0.5, round (y0) + 0.5);
  cairo_line_to (p->cr, round (x1) + 0.5, round (y1) + 0.5);
  cairo_stroke (p->cr);
}

double
dfl_plot_legend (DflPlot *p, double x, double y, const DflPlotSeries *series, int n_series)
{
  double x0 = x;

  for (int s = 0; s < n_series; s++) {
    fill_box (p, x, y, 14, 14, series[s].color);
    x += 20 + dfl_plot_text (p, x + 20, y + 12, LABEL_SIZE + 1, FALSE, INK, series[s].label) + 28;
  }
  return x - x0 - 28;
}

/* Tick labels with a '.' whatever the locale. */
static void
format_value (char *buf, gsize size, double v, int decimals)
{
  char fmt[16];

  g_snprintf (fmt, sizeof fmt, "%%.%df", CLAMP (decimals, 0, 6));
  g_ascii_formatd (buf, size, fmt, v);
}

/* A round top ≥ max for the y axis and a 1-2-5 step giving at most 8 steps. */
static void
nice_range (double max, double *y_max, double *y_step, int *decimals)
{
  static const double mantissas[] = { 1, 2, 5 };
  double base;

  if (!(max > 0) || !isfinite (max))
    max = 1;
  base = pow (10, floor (log10 (max / 8)));
  for (int i = 0;; i = (i + 1) % 3) {
    double step = mantissas[i] * base;
    if (max / step <= 8 + 1e-9) {
      *y_step = step;
      *y_max = ceil (max / step - 1e-9) * step;
      *decimals = MAX (0, (int) -floor (log10 (step) + 1e-9));
      return;
    }
    if (i == 2)
      base *= 10;
  }
}

/* The y under a panel's title and subtitle, where its drawing may start. */
static double
heading_bottom (const DflPlotBox *box, const char *subtitle)
{
  return box->y + TITLE_SIZE + (subtitle ? 34 : 14);
}

static void
draw_heading (DflPlot *p, const DflPlotBox *box, const char *title, const char *subtitle)
{
  dfl_plot_text (p, box->x + 8, box->y + TITLE_SIZE, TITLE_SIZE, TRUE, INK, title);
  if (subtitle)
    dfl_plot_text (p, box->x + 8, box->y + TITLE_SIZE + 20, LABEL_SIZE, FALSE, MUTED, subtitle);
}

static void
panel_layout (const DflPlotBox *box, const DflPlotPanel *panel, Layout *l)
{
  double top = heading_bottom (box, panel->subtitle) + 10;
  double left = box->x + 76, bottom = box->y + box->height - 48;
  double max = 0;

  l->area = (DflPlotBox) { left, top, MAX (box->x + box->width - 14 - left, 1), MAX (bottom - top, 1) };
  if (panel->y_max > 0) {
    max = panel->y_max;
  } else {
    for (int s = 0; s < panel->n_series; s++)
      for (int i = 0; i < panel->n_points; i++)
        if (isfinite (panel->series[s].values[i]))
          max = MAX (max, panel->series[s].values[i]);
    /* room over the tallest bar for its value */
    if (panel->value_decimals >= 0)
      max *= 1.1;
  }
  nice_range (max, &l->y_max, &l->y_step, &l->decimals);
  if (panel->y_max > 0)
    l->y_max = panel->y_max;
}

static double
value_y (const Layout *l, double v)
{
  return l->area.y + l->area.height - CLAMP (v / l->y_max, 0, 1) * l->area.height;
}

static double
point_x (const Layout *l, int n_points, int i)
{
  return l->area.x + (i + 0.5) * l->area.width / MAX (n_points, 1);
}

static gboolean
layout_bar (const Layout *l, const DflPlotPanel *panel, int s, int i, DflPlotBox *bar)
{
  double gw = l->area.width / MAX (panel->n_points, 1);
  /* bars no wider than MAX_BAR, the group of them centred on its point */
  double bw = MIN (gw * 0.8 / MAX (panel->n_series, 1), MAX_BAR);
  double left = point_x (l, panel->n_points, i) - bw * panel->n_series / 2;
  double v = panel->series[s].values[i], x0, x1, top;

  if (panel->style != DFL_PLOT_BARS || isnan (v))
    return FALSE;
  x0 = round (left + s * bw);
  /* a pixel of white between neighbours where bars are wide enough */
  x1 = MAX (round (left + (s + 1) * bw) - (bw >= 4), x0 + 1);
  top = round (value_y (l, v));
  /* a measured 0 gets a stub, so that it differs from no bar */
  top = MIN (top, round (l->area.y + l->area.height) - 2);
  *bar = (DflPlotBox) { x0, top, x1 - x0, round (l->area.y + l->area.height) - top };
  return TRUE;
}

gboolean
dfl_plot_bar_box (const DflPlotBox *box, const DflPlotPanel *panel, int series, int point,
                  DflPlotBox *bar)
{
  Layout l;

  g_return_val_if_fail (series >= 0 && series < panel->n_series && point >= 0 && point < panel->n_points,
                        FALSE);
  panel_layout (box, panel, &l);
  return layout_bar (&l, panel, series, point, bar);
}

static void
draw_y_axis (DflPlot *p, const DflPlotBox *box, const Layout *l, const char *caption)
{
  const DflPlotBox *a = &l->area;
  char buf[32];

  for (int k = 0; k * l->y_step <= l->y_max * (1 + 1e-9); k++) {
    double t = k * l->y_step, y = round (value_y (l, t));
    hairline (p, a->x, y, a->x + a->width, y, GRID);
    hairline (p, a->x - 5, y, a->x, y, AXIS);
    format_value (buf, sizeof buf, t, l->decimals);
    dfl_plot_text (p, a->x - 8 - text_width (p, TICK_SIZE, FALSE, buf), y + TICK_SIZE / 2.5, TICK_SIZE,
                   FALSE, INK, buf);
  }
  if (caption) {
    /* the caption along the axis, read from the bottom up */
    cairo_save (p->cr);
    cairo_translate (p->cr, box->x + 16, a->y + a->height / 2);
    cairo_rotate (p->cr, -G_PI / 2);
    text_centred (p, 0, 0, LABEL_SIZE, FALSE, INK, caption);
    cairo_restore (p->cr);
  }
}

static void
draw_x_axis (DflPlot *p, const Layout *l, const DflPlotPanel *panel)
{
  const DflPlotBox *a = &l->area;
  double gw = a->width / MAX (panel->n_points, 1), widest = 0;
  double bottom = round (a->y + a->height);
  int stride;
  char buf[32];

  /* every stride-th tick labelled, so that neighbouring labels never touch */
  for (int i = 0; i < panel->n_points; i++) {
    g_snprintf (buf, sizeof buf, "%d", i + 1);
    widest = MAX (widest, text_width (p, TICK_SIZE, FALSE, panel->x_ticks ? panel->x_ticks[i] : buf));
  }
  stride = MAX (1, (int) ceil ((widest + 8) / gw));
  for (int i = 0; i < panel->n_points; i += stride) {
    double x = point_x (l, panel->n_points, i);
    g_snprintf (buf, sizeof buf, "%d", i + 1);
    hairline (p, x, bottom, x, bottom + 4, AXIS);
    text_centred (p, x, bottom + 8 + TICK_SIZE, TICK_SIZE, FALSE, INK, panel->x_ticks ? panel->x_ticks[i] : buf);
  }
  if (panel->x_label)
    text_centred (p, a->x + a->width / 2, bottom + 40, LABEL_SIZE, FALSE, INK, panel->x_label);
}

static void
draw_bars (DflPlot *p, const Layout *l, const DflPlotPanel *panel)
{
  char buf[32];

  for (int s = 0; s < panel->n_series; s++)
    for (int i = 0; i < panel->n_points; i++) {
      DflPlotBox bar;
      if (!layout_bar (l, panel, s, i, &bar))
        continue;
      fill_box (p, bar.x, bar.y, bar.width, bar.height, panel->series[s].color);
      if (panel->value_decimals >= 0) {
        format_value (buf, sizeof buf, panel->series[s].values[i], panel->value_decimals);
        text_centred (p, bar.x + bar.width / 2, bar.y - 6, LABEL_SIZE, TRUE, INK, buf);
      }
    }
}

static void
draw_lines (DflPlot *p, const Layout *l, const DflPlotPanel *panel)
{
  cairo_t *cr = p->cr;

  for (int s = 0; s < panel->n_series; s++) {
    const double *v = panel->series[s].values;
    set_color (cr, panel->series[s].color);
    cairo_set_line_width (cr, 2.5);
    cairo_set_line_join (cr, CAIRO_LINE_JOIN_ROUND);
    /* a gap where a value is missing */
    for (int i = 0; i < panel->n_points; i++) {
      if (isnan (v[i]))
        continue;
      if (i > 0 && !isnan (v[i - 1]))
        cairo_line_to (cr, point_x (l, panel->n_points, i), value_y (l, v[i]));
      else
        cairo_move_to (cr, point_x (l, panel->n_points, i), value_y (l, v[i]));
    }
    cairo_stroke (cr);
    for (int i = 0; i < panel->n_points; i++)
      if (!isnan (v[i])) {
        cairo_arc (cr, point_x (l, panel->n_points, i), value_y (l, v[i]), 4, 0, 2 * G_PI);
        cairo_fill (cr);
      }
  }
}

void
dfl_plot_panel (DflPlot *p, const DflPlotBox *box, const DflPlotPanel *panel)
{
  Layout l;

  panel_layout (box, panel, &l);
  draw_heading (p, box, panel->title, panel->subtitle);
  /* the grid first, so that what is plotted lies over it */
  draw_y_axis (p, box, &l, panel->y_label);
  if (panel->style == DFL_PLOT_BARS)
    draw_bars (p, &l, panel);
  else
    draw_lines (p, &l, panel);
  hairline (p, l.area.x, l.area.y, l.area.x, l.area.y + l.area.height, AXIS);
  hairline (p, l.area.x, l.area.y + l.area.height, l.area.x + l.area.width, l.area.y + l.area.height, AXIS);
  draw_x_axis (p, &l, panel);
}

void
dfl_plot_message (DflPlot *p, const DflPlotBox *box, const char *title, const char *message)
{
  double top = heading_bottom (box, NULL) + 10;
  double x0 = box->x + 8, x1 = box->x + box->width - 14, y1 = box->y + box->height - 14;
  g_auto (GStrv) lines = g_strsplit (message, "\n", -1);
  guint n = g_strv_length (lines);

  draw_heading (p, box, title, NULL);
  hairline (p, x0, top, x1, top, FRAME);
  hairline (p, x1, top, x1, y1, FRAME);
  hairline (p, x1, y1, x0, y1, FRAME);
  hairline (p, x0, y1, x0, top, FRAME);
  for (guint i = 0; i < n; i++)
    text_centred (p, (x0 + x1) / 2, (top + y1) / 2 + (i - (n - 1) / 2.0) * 22 + 5, LABEL_SIZE + 2, FALSE,
                  MUTED, lines[i]);
}

guint32
dfl_plot_pixel (DflPlot *p, int x, int y)
{
  const guint8 *data;

  g_return_val_if_fail (x >= 0 && y >= 0 && x < dfl_plot_width (p) && y < dfl_plot_height (p), 0);
  cairo_surface_flush (p->surface);
  data = cairo_image_surface_get_data (p->surface);
  /* RGB24 keeps a pixel in a native-endian 32-bit word, 0x00RRGGBB */
  return *(const guint32 *) (data + (gsize) y * cairo_image_surface_get_stride (p->surface) + (gsize) x * 4)
         & 0xFFFFFF;
}

static cairo_status_t
append_bytes (void *closure, const unsigned char *data, unsigned int length)
{
  g_byte_array_append (closure, data, length);
  return CAIRO_STATUS_SUCCESS;
}

gboolean
dfl_plot_write_png (DflPlot *p, const char *path, GError **error)
{
  g_autoptr (GByteArray) png = g_byte_array_new ();
  cairo_status_t status = cairo_status (p->cr);

  cairo_surface_flush (p->surface);
  /* encoded in memory, so that a failure to write says why, as GLib tells it */
  if (status == CAIRO_STATUS_SUCCESS)
    status = cairo_surface_write_to_png_stream (p->surface, append_bytes, png);
  if (status != CAIRO_STATUS_SUCCESS) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_IO, "%s: the picture could not be drawn: %s", path,
                 cairo_status_to_string (status));
    return FALSE;
  }
  return g_file_set_contents (path, (const char *) png->data, png->len, error);
}

void
dfl_plot_release_fonts (void)
{
  cairo_debug_reset_static_data ();
  FcFini ();
}
