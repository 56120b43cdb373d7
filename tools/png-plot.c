/* gst-dflash — small pictures for the `dflash` command: canvas, bitmap font,
 * grouped bars, and a PNG writer that needs no zlib (see png-plot.h). */
#include <math.h>
#include <string.h>

#include "png-plot.h"

#define GLYPH_W 5
#define GLYPH_H 7

/* 5×7 glyphs, one byte a row from the top, bit 4 the leftmost dot. Only
 * what axis ticks, titles and legends need. */
static const guint8 font[128][GLYPH_H] = {
  ['0'] = { 0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E },
  ['1'] = { 0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E },
  ['2'] = { 0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F },
  ['3'] = { 0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E },
  ['4'] = { 0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02 },
  ['5'] = { 0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E },
  ['6'] = { 0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E },
  ['7'] = { 0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08 },
  ['8'] = { 0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E },
  ['9'] = { 0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C },
  ['A'] = { 0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11 },
  ['B'] = { 0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E },
  ['C'] = { 0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E },
  ['D'] = { 0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C },
  ['E'] = { 0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F },
  ['F'] = { 0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10 },
  ['G'] = { 0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F },
  ['H'] = { 0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11 },
  ['I'] = { 0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E },
  ['J'] = { 0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C },
  ['K'] = { 0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11 },
  ['L'] = { 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F },
  ['M'] = { 0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11 },
  ['N'] = { 0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11 },
  ['O'] = { 0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E },
  ['P'] = { 0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10 },
  ['Q'] = { 0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D },
  ['R'] = { 0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11 },
  ['S'] = { 0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E },
  ['T'] = { 0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04 },
  ['U'] = { 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E },
  ['V'] = { 0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04 },
  ['W'] = { 0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A },
  ['X'] = { 0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11 },
  ['Y'] = { 0x11, 0x11, 0x11, 0x0A, 0x04, 0x04, 0x04 },
  ['Z'] = { 0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F },
  ['.'] = { 0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C },
  [':'] = { 0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x00 },
  ['-'] = { 0x00, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x00 },
  ['_'] = { 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1F },
  ['/'] = { 0x00, 0x01, 0x02, 0x04, 0x08, 0x10, 0x00 },
  ['('] = { 0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02 },
  [')'] = { 0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08 },
  ['?'] = { 0x0E, 0x11, 0x01, 0x02, 0x04, 0x00, 0x04 },
};

#define INK 0x222222
#define GRID 0xDDDDDD
#define SCALE 2

DflPlot *
dfl_plot_new (int width, int height, guint32 background)
{
  DflPlot *p = g_new0 (DflPlot, 1);

  p->width = width;
  p->height = height;
  p->rgb = g_malloc ((gsize) width * height * 3);
  dfl_plot_fill (p, 0, 0, width, height, background);
  return p;
}

void
dfl_plot_free (DflPlot *p)
{
  if (!p)
    return;
  g_free (p->rgb);
  g_free (p);
}

void
dfl_plot_fill (DflPlot *p, int x, int y, int w, int h, guint32 rgb)
{
  int x0 = MAX (x, 0), y0 = MAX (y, 0);
  int x1 = MIN (x + w, p->width), y1 = MIN (y + h, p->height);

  for (int r = y0; r < y1; r++) {
    guint8 *px = p->rgb + ((gsize) r * p->width + x0) * 3;
    for (int c = x0; c < x1; c++, px += 3) {
      px[0] = rgb >> 16;
      px[1] = rgb >> 8;
      px[2] = rgb;
    }
  }
}

/* The glyph drawn for one character: capitals for small letters, '?' for
 * what the font lacks. */
static const guint8 *
glyph (gunichar ch)
{
  static const guint8 blank[GLYPH_H] = { 0 };

  if (ch == ' ')
    return blank;
  if (ch < 128)
    ch = g_ascii_toupper (ch);
  if (ch >= 128 || !memcmp (font[ch], blank, GLYPH_H))
    ch = '?';
  return font[ch];
}

int
dfl_plot_text_width (const char *text, int scale)
{
  glong n = g_utf8_validate (text, -1, NULL) ? g_utf8_strlen (text, -1) : (glong) strlen (text);

  return n ? (int) n * (GLYPH_W + 1) * scale - scale : 0;
}

int
dfl_plot_text_height (int scale)
{
  return GLYPH_H * scale;
}

int
dfl_plot_text (DflPlot *p, int x, int y, int scale, guint32 rgb, const char *text)
{
  gboolean utf8 = g_utf8_validate (text, -1, NULL);
  int x0 = x;

  for (const char *c = text; *c; c = utf8 ? g_utf8_next_char (c) : c + 1) {
    const guint8 *g = glyph (utf8 ? g_utf8_get_char (c) : (guchar) *c);
    for (int r = 0; r < GLYPH_H; r++)
      for (int col = 0; col < GLYPH_W; col++)
        if (g[r] & (0x10 >> col))
          dfl_plot_fill (p, x + col * scale, y + r * scale, scale, scale, rgb);
    x += (GLYPH_W + 1) * scale;
  }
  return x > x0 ? x - x0 - scale : 0;
}

/* A tick label: always a '.', whatever the locale, as the font has no ','. */
static void
format_tick (char *buf, gsize size, double v, int decimals)
{
  char fmt[16];

  g_snprintf (fmt, sizeof fmt, "%%.%df", CLAMP (decimals, 0, 6));
  g_ascii_formatd (buf, size, fmt, v);
}

void
dfl_plot_nice_range (double max, double *y_max, double *y_step, int *decimals)
{
  static const double mantissas[] = { 1, 2, 5 };
  double base;

  if (!(max > 0) || !isfinite (max))
    max = 1;
  /* the smallest 1-2-5 step giving at most 8 steps up to max */
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

void
dfl_plot_bars (DflPlot *p, int x, int y, int w, int h, const char *title,
               const char *x_caption, const double *values, int n_series, int n_groups,
               const guint32 *colors, double y_max, double y_step, int decimals)
{
  int th = dfl_plot_text_height (SCALE);
  int left = 6 * (GLYPH_W + 1) * SCALE;  /* room for "100.00" */
  int px = x + left, py = y + th + 14;
  int pw = w - left - 10, ph = h - (py - y) - 2 * th - 22;
  double gw = n_groups > 0 ? (double) pw / n_groups : pw;
  int bw = MAX (1, (int) (gw * 0.8 / MAX (n_series, 1)));
  int label_w, stride;
  char buf[32];

  if (pw < 20 || ph < 20 || !(y_max > 0))
    return;
  dfl_plot_text (p, px, y, SCALE, INK, title);

  /* grid and ticks first, so the bars lie over the grid */
  for (int i = 0; i * y_step <= y_max * (1 + 1e-9); i++) {
    double t = i * y_step;
    int yy = py + ph - (int) lround (t / y_max * ph);
    dfl_plot_fill (p, px, yy, pw, 1, GRID);
    dfl_plot_fill (p, px - 5, yy, 5, 1, INK);
    format_tick (buf, sizeof buf, t, decimals);
    dfl_plot_text (p, px - 8 - dfl_plot_text_width (buf, SCALE), yy - th / 2, SCALE, INK, buf);
  }

  for (int g = 0; g < n_groups; g++)
    for (int s = 0; s < n_series; s++) {
      double v = values[s * n_groups + g];
      int bh, bx;
      if (isnan (v))
        continue;
      /* a 0 that was measured gets a stub, so that it differs from no bar */
      bh = MAX ((int) lround (CLAMP (v / y_max, 0, 1) * ph), 2);
      bx = px + (int) (g * gw + gw * 0.1) + s * bw;
      dfl_plot_fill (p, bx, py + ph - bh, MAX (bw - (bw > 3), 1), bh, colors[s]);
    }

  dfl_plot_fill (p, px, py, 1, ph + 1, INK);
  dfl_plot_fill (p, px, py + ph, pw, 1, INK);

  /* group labels: every stride-th, so that neighbours never touch */
  g_snprintf (buf, sizeof buf, "%d", n_groups);
  label_w = dfl_plot_text_width (buf, SCALE) + 3 * SCALE;
  stride = MAX (1, (int) ceil (label_w / gw));
  for (int g = 0; g < n_groups; g += stride) {
    int cx = px + (int) (g * gw + gw / 2);
    g_snprintf (buf, sizeof buf, "%d", g + 1);
    dfl_plot_fill (p, cx, py + ph, 1, 5, INK);
    dfl_plot_text (p, cx - dfl_plot_text_width (buf, SCALE) / 2, py + ph + 8, SCALE, INK, buf);
  }
  if (x_caption)
    dfl_plot_text (p, px + (pw - dfl_plot_text_width (x_caption, SCALE)) / 2,
                   py + ph + 8 + th + 8, SCALE, INK, x_caption);
}

/* --- PNG ------------------------------------------------------------------ */

guint32
dfl_crc32 (guint32 crc, const guint8 *data, gsize len)
{
  static guint32 table[256];
  static gsize ready = 0;

  /* the reflected CRC-32 of PNG (ISO 3309, polynomial 0xEDB88320), a byte at a time */
  if (g_once_init_enter (&ready)) {
    for (guint32 n = 0; n < 256; n++) {
      guint32 c = n;
      for (int k = 0; k < 8; k++)
        c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      table[n] = c;
    }
    g_once_init_leave (&ready, 1);
  }
  crc ^= 0xFFFFFFFFu;
  for (gsize i = 0; i < len; i++)
    crc = table[(crc ^ data[i]) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

guint32
dfl_adler32 (guint32 sum, const guint8 *data, gsize len)
{
  guint32 a = sum & 0xFFFF, b = sum >> 16;

  /* 5552 bytes is the most that cannot overflow 32 bits before the modulo */
  while (len > 0) {
    gsize n = MIN (len, 5552);
    len -= n;
    while (n--) {
      a += *data++;
      b += a;
    }
    a %= 65521;
    b %= 65521;
  }
  return (b << 16) | a;
}

static void
put_be32 (GByteArray *out, guint32 v)
{
  guint8 b[4] = { v >> 24, v >> 16, v >> 8, v };

  g_byte_array_append (out, b, 4);
}

static void
put_chunk (GByteArray *out, const char type[4], const guint8 *data, gsize len)
{
  guint start;

  put_be32 (out, (guint32) len);
  start = out->len;
  g_byte_array_append (out, (const guint8 *) type, 4);
  if (len)
    g_byte_array_append (out, data, (guint) len);
  /* the CRC covers the type and the data, not the length */
  put_be32 (out, dfl_crc32 (0, out->data + start, out->len - start));
}

GBytes *
dfl_png_encode (const guint8 *rgb, int width, int height)
{
  static const guint8 signature[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n' };
  gsize stride = (gsize) width * 3, raw_len = (gsize) height * (stride + 1);
  g_autofree guint8 *raw = g_malloc (MAX (raw_len, 1));
  g_autoptr (GByteArray) z = g_byte_array_sized_new (raw_len + raw_len / 65535 * 5 + 16);
  GByteArray *out = g_byte_array_new ();
  guint8 ihdr[13];

  g_return_val_if_fail (width > 0 && height > 0, NULL);
  /* scanlines, each after filter byte 0 (None): compression is not the point */
  for (int r = 0; r < height; r++) {
    raw[r * (stride + 1)] = 0;
    memcpy (raw + r * (stride + 1) + 1, rgb + r * stride, stride);
  }

  /* zlib: CMF 0x78 (deflate, 32 KiB window), FLG 0x01 (fastest; 0x7801 is a
   * multiple of 31), then stored blocks of at most 65535 bytes, then the
   * Adler-32 of the raw data, big-endian */
  g_byte_array_append (z, (const guint8[]) { 0x78, 0x01 }, 2);
  for (gsize off = 0; off < raw_len;) {
    gsize n = MIN (raw_len - off, 65535);
    gboolean last = off + n == raw_len;
    guint8 hdr[5] = { last ? 1 : 0, n & 0xFF, n >> 8, ~n & 0xFF, (~n >> 8) & 0xFF };
    g_byte_array_append (z, hdr, 5);
    g_byte_array_append (z, raw + off, (guint) n);
    off += n;
  }
  put_be32 (z, dfl_adler32 (1, raw, raw_len));

  g_byte_array_append (out, signature, 8);
  ihdr[0] = width >> 24, ihdr[1] = width >> 16, ihdr[2] = width >> 8, ihdr[3] = width;
  ihdr[4] = height >> 24, ihdr[5] = height >> 16, ihdr[6] = height >> 8, ihdr[7] = height;
  ihdr[8] = 8;     /* bits per sample */
  ihdr[9] = 2;     /* colour type: RGB */
  ihdr[10] = 0;    /* compression: deflate */
  ihdr[11] = 0;    /* filter method 0 */
  ihdr[12] = 0;    /* not interlaced */
  put_chunk (out, "IHDR", ihdr, sizeof ihdr);
  put_chunk (out, "IDAT", z->data, z->len);
  put_chunk (out, "IEND", NULL, 0);
  return g_byte_array_free_to_bytes (out);
}

gboolean
dfl_plot_write_png (const DflPlot *p, const char *path, GError **error)
{
  g_autoptr (GBytes) png = dfl_png_encode (p->rgb, p->width, p->height);
  gsize len;
  const char *data = g_bytes_get_data (png, &len);

  return g_file_set_contents (path, data, (gssize) len, error);
}
