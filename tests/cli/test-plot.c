/* The `dflash` command's charts (tools/dflash-plot.c) and the picture of
 * `dflash ab` (tools/dflash-ab-plot.c), read back pixel by pixel: bars stand
 * where the layout says and as tall as their values, the speed panels carry
 * both sides, a side that drafts nothing has no bars in the τ and acceptance
 * panels, and the PNG is written, or an error names the path. */
#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

#include "dflash-ab-plot.h"

#define RED 0xC03030
#define GREEN 0x30A040

/* The tallest run of `color` in any column of the box. */
static int
tallest_run (DflPlot *p, const DflPlotBox *box, guint32 color)
{
  int best = 0;

  for (int x = (int) box->x; x < (int) (box->x + box->width); x++) {
    int run = 0;
    for (int y = (int) box->y; y < (int) (box->y + box->height); y++) {
      run = dfl_plot_pixel (p, x, y) == color ? run + 1 : 0;
      best = MAX (best, run);
    }
  }
  return best;
}

/* Pixels in the box neither white nor near it: something drawn there. */
static int
count_ink (DflPlot *p, const DflPlotBox *box)
{
  int n = 0;

  for (int y = (int) box->y; y < (int) (box->y + box->height); y++)
    for (int x = (int) box->x; x < (int) (box->x + box->width); x++)
      n += (dfl_plot_pixel (p, x, y) & 0xFF) < 0x80;
  return n;
}

static void
test_bars (void)
{
  const double red[3] = { 10, 40, NAN }, green[3] = { 20, 0, 30 };
  const DflPlotSeries series[2] = { { "red", RED, red }, { "green", GREEN, green } };
  const DflPlotPanel panel = {
    .style = DFL_PLOT_BARS, .title = "bars", .x_label = "x", .y_label = "y",
    .n_points = 3, .series = series, .n_series = 2, .value_decimals = -1,
  };
  const DflPlotBox box = { 20, 10, 460, 300 };
  g_autoptr (DflPlot) p = dfl_plot_new (500, 320);
  DflPlotBox bar[2][3];

  dfl_plot_panel (p, &box, &panel);
  for (int s = 0; s < 2; s++)
    for (int i = 0; i < 3; i++) {
      gboolean drawn = dfl_plot_bar_box (&box, &panel, s, i, &bar[s][i]);
      g_assert_cmpint (drawn, ==, !isnan (series[s].values[i]));
      if (!drawn)
        continue;
      /* inside the box; its middle and its top row in the series' colour,
       * the row over it not */
      g_assert_cmpfloat (bar[s][i].x, >=, box.x);
      g_assert_cmpfloat (bar[s][i].x + bar[s][i].width, <=, box.x + box.width);
      g_assert_cmphex (dfl_plot_pixel (p, bar[s][i].x + bar[s][i].width / 2, bar[s][i].y + bar[s][i].height / 2),
                       ==, series[s].color);
      g_assert_cmphex (dfl_plot_pixel (p, bar[s][i].x + bar[s][i].width / 2, bar[s][i].y), ==, series[s].color);
      g_assert_cmphex (dfl_plot_pixel (p, bar[s][i].x + bar[s][i].width / 2, bar[s][i].y - 1), !=,
                       series[s].color);
    }
  /* heights in proportion to the values, all from one baseline */
  g_assert_cmpfloat (fabs (bar[0][1].height - 4 * bar[0][0].height), <=, 2);
  g_assert_cmpfloat (fabs (bar[1][2].height - 1.5 * bar[1][0].height), <=, 2);
  g_assert_cmpfloat (bar[0][0].y + bar[0][0].height, ==, bar[1][2].y + bar[1][2].height);
  /* a measured 0 is a stub, taller than nothing */
  g_assert_cmpfloat (bar[1][1].height, >=, 1);
  /* group by group, left to right, the series side by side */
  g_assert_cmpfloat (bar[0][0].x + bar[0][0].width, <=, bar[1][0].x);
  g_assert_cmpfloat (bar[1][0].x + bar[1][0].width, <, bar[0][1].x);
  /* the tallest red in the picture is the bar of 40 */
  g_assert_cmpint (tallest_run (p, &box, RED), ==, (int) bar[0][1].height);
}

static void
test_lines (void)
{
  const double red[4] = { 0.2, 0.8, NAN, 0.5 };
  const DflPlotSeries series[1] = { { "red", RED, red } };
  const DflPlotPanel panel = {
    .style = DFL_PLOT_LINES, .title = "lines", .n_points = 4, .series = series, .n_series = 1,
    .y_max = 1, .value_decimals = -1,
  };
  const DflPlotBox box = { 0, 0, 400, 300 }, right = { 400, 0, 100, 300 };
  g_autoptr (DflPlot) p = dfl_plot_new (500, 300);
  DflPlotBox bar;

  dfl_plot_panel (p, &box, &panel);
  g_assert_false (dfl_plot_bar_box (&box, &panel, 0, 0, &bar));
  g_assert_cmpint (tallest_run (p, &box, RED), >, 0);
  g_assert_cmpint (tallest_run (p, &right, RED), ==, 0);
  g_assert_cmpint (count_ink (p, &right), ==, 0);
}

/* Side figures for the ab picture: A drafting 3 positions, B as `b_drafts` says. */
typedef struct {
  double speed[2][4], tau[2][4], rate[2][3];
  DflAbPlotSide sides[2];
} AbCase;

static void
ab_case (AbCase *c, gboolean a_drafts, gboolean b_drafts)
{
  const double speed[2][4] = { { 200, 150, 180, 170 }, { 110, 130, 120, 125 } };
  const double tau[2][4] = { { 3.5, 2.0, 4.1, 2.9 }, { 2.0, 1.5, 1.8, 1.9 } };
  const double rate[2][3] = { { 0.8, 0.6, 0.4 }, { 0.7, 0.5, 0.3 } };
  const gboolean draft[2] = { a_drafts, b_drafts };

  memcpy (c->speed, speed, sizeof speed);
  for (int k = 0; k < 2; k++) {
    for (int i = 0; i < 4; i++)
      c->tau[k][i] = draft[k] ? tau[k][i] : 1.0;
    for (int j = 0; j < 3; j++)
      c->rate[k][j] = draft[k] ? rate[k][j] : NAN;
    c->sides[k] = (DflAbPlotSide) {
      .name = k ? "b.pipeline" : "a.pipeline",
      .tokens_per_s = k ? 120 : 180,
      .tau = draft[k] ? 3.0 : 1.0,
      .prompt_tokens_per_s = c->speed[k],
      .prompt_tau = c->tau[k],
      .accept_rate = c->rate[k],
      .positions = 3,
    };
  }
}

static DflPlot *
ab_draw (const AbCase *c)
{
  DflPlot *p = dfl_plot_new (DFL_AB_PLOT_WIDTH, DFL_AB_PLOT_HEIGHT);

  dfl_ab_plot_draw (p, c->sides, 4);
  return p;
}

static void
test_ab_speed (void)
{
  AbCase c;
  g_autoptr (DflPlot) p = NULL;
  DflPlotBox box;
  int a, b;

  ab_case (&c, TRUE, TRUE);
  p = ab_draw (&c);
  /* over all prompts: A's bar and B's, as tall as 180 and 120 tokens/s */
  dfl_ab_plot_panel_box (DFL_AB_PANEL_SPEED_TOTAL, &box);
  a = tallest_run (p, &box, DFL_AB_COLOR_A);
  b = tallest_run (p, &box, DFL_AB_COLOR_B);
  g_assert_cmpint (a, >, 50);
  g_assert_cmpfloat (fabs (b - a * 120.0 / 180.0), <=, 2);
  /* per prompt: A's tallest is prompt 1's 200, B's prompt 2's 130 */
  dfl_ab_plot_panel_box (DFL_AB_PANEL_SPEED, &box);
  a = tallest_run (p, &box, DFL_AB_COLOR_A);
  b = tallest_run (p, &box, DFL_AB_COLOR_B);
  g_assert_cmpint (a, >, 50);
  g_assert_cmpfloat (fabs (b - a * 130.0 / 200.0), <=, 2);
  /* both draft: both in the τ and the acceptance panels */
  for (DflAbPanel k = DFL_AB_PANEL_TAU; k <= DFL_AB_PANEL_ACCEPTANCE; k++) {
    dfl_ab_plot_panel_box (k, &box);
    g_assert_cmpint (tallest_run (p, &box, DFL_AB_COLOR_A), >, 0);
    g_assert_cmpint (tallest_run (p, &box, DFL_AB_COLOR_B), >, 0);
  }
}

static void
test_ab_no_draft (void)
{
  AbCase c;
  g_autoptr (DflPlot) p = NULL;
  DflPlotBox box;

  /* B drafts nothing: only A in the τ and acceptance panels, B still in the speed ones */
  ab_case (&c, TRUE, FALSE);
  p = ab_draw (&c);
  for (DflAbPanel k = DFL_AB_PANEL_SPEED; k < DFL_AB_N_PANELS; k++) {
    dfl_ab_plot_panel_box (k, &box);
    g_assert_cmpint (tallest_run (p, &box, DFL_AB_COLOR_A), >, 0);
    if (k >= DFL_AB_PANEL_TAU)
      g_assert_cmpint (tallest_run (p, &box, DFL_AB_COLOR_B), ==, 0);
    else
      g_assert_cmpint (tallest_run (p, &box, DFL_AB_COLOR_B), >, 0);
  }
}

static void
test_ab_neither_drafts (void)
{
  AbCase c;
  g_autoptr (DflPlot) p = NULL;

  ab_case (&c, FALSE, FALSE);
  p = ab_draw (&c);
  for (DflAbPanel k = DFL_AB_PANEL_TAU; k <= DFL_AB_PANEL_ACCEPTANCE; k++) {
    DflPlotBox box, middle;
    dfl_ab_plot_panel_box (k, &box);
    g_assert_cmpint (tallest_run (p, &box, DFL_AB_COLOR_A), ==, 0);
    g_assert_cmpint (tallest_run (p, &box, DFL_AB_COLOR_B), ==, 0);
    /* the message saying why, in the middle of the panel */
    middle = (DflPlotBox) { box.x + box.width / 4, box.y + box.height / 2 - 30, box.width / 2, 60 };
    g_assert_cmpint (count_ink (p, &middle), >, 50);
  }
}

static void
test_write_png (void)
{
  static const guint8 signature[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n' };
  g_autoptr (GError) error = NULL;
  g_autofree char *dir = g_dir_make_tmp ("dflash-plot-XXXXXX", &error);
  g_autofree char *path = g_build_filename (dir, "ab.png", NULL);
  g_autofree char *missing = g_build_filename (dir, "no-such-folder", "ab.png", NULL);
  g_autofree char *data = NULL;
  gsize len = 0;
  AbCase c;

  g_assert_no_error (error);
  ab_case (&c, TRUE, FALSE);
  g_assert_true (dfl_ab_plot_write (path, c.sides, 4, &error));
  g_assert_no_error (error);
  g_assert_true (g_file_get_contents (path, &data, &len, NULL));
  g_assert_cmpuint (len, >, 1000);
  g_assert_cmpmem (data, 8, signature, 8);
  /* IHDR: the figure's size, 8-bit RGB */
  g_assert_cmpuint (GUINT32_FROM_BE (*(guint32 *) (data + 16)), ==, DFL_AB_PLOT_WIDTH);
  g_assert_cmpuint (GUINT32_FROM_BE (*(guint32 *) (data + 20)), ==, DFL_AB_PLOT_HEIGHT);
  g_assert_cmpint (data[24], ==, 8);
  g_assert_cmpint (data[25], ==, 2);

  g_assert_false (dfl_ab_plot_write (missing, c.sides, 4, &error));
  g_assert_nonnull (error);
  g_assert_nonnull (strstr (error->message, "no-such-folder"));
  g_unlink (path);
  g_rmdir (dir);
}

int
main (int argc, char **argv)
{
  int status;

  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/plot/bars", test_bars);
  g_test_add_func ("/plot/lines", test_lines);
  g_test_add_func ("/plot/ab/speed", test_ab_speed);
  g_test_add_func ("/plot/ab/no-draft", test_ab_no_draft);
  g_test_add_func ("/plot/ab/neither-drafts", test_ab_neither_drafts);
  g_test_add_func ("/plot/write-png", test_write_png);
  status = g_test_run ();
  dfl_plot_release_fonts ();
  return status;
}
