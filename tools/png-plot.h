/* gst-dflash — small pictures for the `dflash` command: an RGB canvas, a
 * built-in 5×7 bitmap font, grouped bar charts, and a PNG writer of its own
 * (stored deflate blocks, CRC-32 and Adler-32 computed here), so that a plot
 * costs the product no image or compression library. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* An 8-bit RGB canvas, rows top to bottom. Colours are 0xRRGGBB. */
typedef struct {
  int width, height;
  guint8 *rgb;
} DflPlot;

DflPlot *dfl_plot_new (int width, int height, guint32 background);
void dfl_plot_free (DflPlot *p);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (DflPlot, dfl_plot_free)

/* A filled rectangle, clipped to the canvas. */
void dfl_plot_fill (DflPlot *p, int x, int y, int w, int h, guint32 rgb);

/* Text in the built-in font with its top left corner at (x, y), each dot
 * scale × scale pixels. The font has digits, capitals (small letters are
 * drawn as capitals), space and . : - _ / ( ) ?; anything else is drawn as
 * '?'. Returns the width drawn. */
int dfl_plot_text (DflPlot *p, int x, int y, int scale, guint32 rgb, const char *text);
int dfl_plot_text_width (const char *text, int scale);
int dfl_plot_text_height (int scale);

/* A grouped bar chart filling the box (x, y, w, h): a title above, a y axis
 * from 0 to y_max with a tick and grid line every y_step (labels with
 * `decimals` decimals), and n_groups groups along x labelled 1 … n_groups
 * (thinned where they would touch), each holding one bar of every series:
 * series s in group g has height values[s * n_groups + g] (NaN: no bar; 0:
 * a stub of 2 pixels). */
void dfl_plot_bars (DflPlot *p, int x, int y, int w, int h, const char *title,
                    const char *x_caption, const double *values, int n_series, int n_groups,
                    const guint32 *colors, double y_max, double y_step, int decimals);

/* A y axis range for values up to `max`: a round y_max ≥ max and a step
 * giving 4 … 10 ticks. */
void dfl_plot_nice_range (double max, double *y_max, double *y_step, int *decimals);

/* The canvas as a PNG file (8-bit RGB, not interlaced). */
gboolean dfl_plot_write_png (const DflPlot *p, const char *path, GError **error);
/* The PNG bytes of an RGB image (width × height × 3 bytes, rows top down). */
GBytes *dfl_png_encode (const guint8 *rgb, int width, int height);

/* The checksums PNG and zlib use, over `len` bytes, continuing from `sum`
 * (start with 0 for CRC-32, 1 for Adler-32). */
guint32 dfl_crc32 (guint32 crc, const guint8 *data, gsize len);
guint32 dfl_adler32 (guint32 sum, const guint8 *data, gsize len);

G_END_DECLS
