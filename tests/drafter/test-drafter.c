/* gst-dflash — unit tests of the drafter: the geometry checks, a released
 * drafter's config.json, top_k and the selector's tie rule, the trunk hash.
 */
#include "drafter.h"
#include "dfl-error.h"

#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

#define GOOD \
  "\"hidden\": 64, \"intermediate\": 128, \"heads\": 4, \"head_dim\": 16," \
  " \"vocab\": 100, \"mask_token\": 99, \"conv_kernel\": 3," \
  " \"selector_rank\": 8, \"selector_top\": 4, \"target_layers\": 8, \"window\": 0," \
  " \"rope_theta\": 10000.0, \"eps\": 1e-6"

static void
expect_geometry_error (const char *json, const char *what)
{
  DflDrafterGeometry g;
  GError *error = NULL;

  g_assert_false (dfl_drafter_geometry_parse (&g, json, "/x/dflash.safetensors", &error));
  g_assert_nonnull (error);
  if (!strstr (error->message, what) || !strstr (error->message, "/x/dflash.safetensors"))
    g_error ("\"%s\" does not say \"%s\" and name the file", error->message, what);
  g_error_free (error);
}

static void
test_geometry (void)
{
  DflDrafterGeometry g;
  GError *error = NULL;
  const char *ok = "{" GOOD ", \"layers\": 2, \"kv_heads\": 2, \"block\": 8, \"conv_group\": 4,"
                   " \"taps\": [1, 3, 5], \"windows\": [16, 0], \"no_rope\": [1]}";

  g_assert_true (dfl_drafter_geometry_parse (&g, ok, "t", &error));
  g_assert_no_error (error);
  g_assert_cmpint (g.n_taps, ==, 3);
  g_assert_cmpint (g.taps[2], ==, 5);
  g_assert_cmpint (dfl_drafter_geometry_window_of (&g, 0), ==, 16);
  g_assert_cmpint (dfl_drafter_geometry_window_of (&g, 1), ==, 0);
  g_assert_true (dfl_drafter_geometry_rotary (&g, 0));
  g_assert_false (dfl_drafter_geometry_rotary (&g, 1));
  g_assert_cmpint (dfl_drafter_geometry_tap_width (&g), ==, 192);
  dfl_drafter_geometry_clear (&g);

  /* each of the reference's checks, and ours */
#define REC(rest) "{" GOOD ", " rest "}"
  expect_geometry_error (REC ("\"layers\": 0, \"kv_heads\": 2, \"block\": 8, \"conv_group\": 4, \"taps\": [1]"), "layers is 0");
  expect_geometry_error (REC ("\"layers\": 2, \"kv_heads\": 2, \"block\": 1, \"conv_group\": 4, \"taps\": [1]"), "block is 1");
  expect_geometry_error (REC ("\"layers\": 2, \"kv_heads\": 2, \"block\": 8, \"conv_group\": 4, \"taps\": []"), "taps is empty");
  expect_geometry_error (REC ("\"layers\": 2, \"kv_heads\": 0, \"block\": 8, \"conv_group\": 4, \"taps\": [1]"), "kv_heads is 0");
  expect_geometry_error (REC ("\"layers\": 2, \"kv_heads\": 3, \"block\": 8, \"conv_group\": 4, \"taps\": [1]"),
                         "heads 4 is not a multiple of kv_heads 3");
  expect_geometry_error (REC ("\"layers\": 2, \"kv_heads\": 2, \"block\": 8, \"conv_group\": 0, \"taps\": [1]"), "conv_group is 0");
  expect_geometry_error (REC ("\"layers\": 2, \"kv_heads\": 2, \"block\": 8, \"conv_group\": 6, \"taps\": [1]"),
                         "hidden 64 is not a multiple of conv_group 6");
  expect_geometry_error (REC ("\"layers\": 2, \"kv_heads\": 2, \"block\": 8, \"conv_group\": 4, \"taps\": [1], \"windows\": [1, 2, 3]"),
                         "windows has 3 entries for 2 layers");
  expect_geometry_error (REC ("\"layers\": 2, \"kv_heads\": 2, \"block\": 8, \"conv_group\": 4, \"taps\": [1], \"no_rope\": [2]"),
                         "no_rope names layer 2");
  expect_geometry_error (REC ("\"layers\": 2, \"kv_heads\": 2, \"block\": 8, \"conv_group\": 4, \"taps\": [8]"),
                         "taps names layer 8");
  expect_geometry_error (REC ("\"layers\": 2, \"kv_heads\": 2, \"block\": 8, \"conv_group\": 4, \"taps\": [1.5]"),
                         "\"taps\"[0] is 1.5");
  expect_geometry_error (REC ("\"layers\": 2, \"kv_heads\": 2, \"block\": 8, \"conv_group\": 4"), "has no \"taps\"");
  expect_geometry_error ("{\"hidden\": 64}", "has no \"intermediate\"");
  expect_geometry_error ("[1, 2]", "is not a JSON object");
  expect_geometry_error ("{\"hidden\": 65, \"intermediate\": 128, \"heads\": 4, \"head_dim\": 15, \"vocab\": 100,"
                         " \"mask_token\": 9, \"conv_kernel\": 3, \"selector_rank\": 8, \"selector_top\": 4,"
                         " \"target_layers\": 8, \"window\": 0, \"rope_theta\": 1e4, \"eps\": 1e-6, \"layers\": 2,"
                         " \"kv_heads\": 2, \"block\": 8, \"conv_group\": 5, \"taps\": [1]}", "head_dim 15 is odd");
#undef REC
}

static void
v1_config (const char *json, DflDrafterGeometry *g, const char *want_error)
{
  GError *error = NULL;
  gboolean ok = dfl_drafter_geometry_from_v1_config (g, json, strlen (json), "/m/config.json", &error);

  if (!want_error) {
    g_assert_no_error (error);
    g_assert_true (ok);
    return;
  }
  g_assert_false (ok);
  if (!strstr (error->message, want_error) || !strstr (error->message, "/m/config.json"))
    g_error ("\"%s\" does not say \"%s\" and name the file", error->message, want_error);
  g_error_free (error);
}

static void
assert_ints (const int *got, const int *want, int n)
{
  for (int i = 0; i < n; i++)
    g_assert_cmpint (got[i], ==, want[i]);
}

static void
test_v1_config (void)
{
  DflDrafterGeometry g;
  static const int taps36[] = { 1, 9, 17, 25, 33 }, taps14[] = { 1, 4, 6, 8, 11 };
  static const int sliding[] = { 0, 0, 512, 512, 512 }, typed[] = { 2048, 0, 2048, 0, 0 };
#define V1(target, extra) \
  "{\"architectures\": [\"DFlashDraftModel\"], \"hidden_size\": 64, \"intermediate_size\": 96," \
  " \"num_hidden_layers\": 5, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 16," \
  " \"vocab_size\": 300, \"num_target_layers\": " #target ", \"rms_norm_eps\": 1e-6" extra "}"

  /* the public code's default taps; Python's round() halves to even (3.5 → 4, 8.5 → 8) */
  v1_config (V1 (36, ", \"block_size\": 16, \"rope_theta\": 1000000, \"dflash_config\": {\"mask_token_id\": 299}"), &g, NULL);
  g_assert_cmpint (g.block, ==, 16);
  g_assert_cmpint (g.mask_token, ==, 299);
  g_assert_cmpint (g.n_taps, ==, 5);
  assert_ints (g.taps, taps36, 5);
  g_assert_cmpfloat (g.rope_theta, ==, 1e6);
  g_assert_cmpint (g.conv_kernel, ==, 0);
  g_assert_cmpint (g.selector_rank, ==, 0);
  g_assert_cmpint (dfl_drafter_geometry_window_of (&g, 4), ==, 0);
  dfl_drafter_geometry_clear (&g);
  v1_config (V1 (14, ", \"dflash_config\": {\"mask_token_id\": 7, \"block_size\": 8},"
                 " \"rope_parameters\": {\"rope_theta\": 5e5, \"rope_type\": \"default\"}"), &g, NULL);
  g_assert_cmpint (g.block, ==, 8);
  assert_ints (g.taps, taps14, 5);
  g_assert_cmpfloat (g.rope_theta, ==, 5e5);
  dfl_drafter_geometry_clear (&g);
  /* taps given; Qwen3's sliding rule: layers from max_window_layers on */
  v1_config (V1 (36, ", \"block_size\": 16, \"dflash_config\": {\"mask_token_id\": 1, \"target_layer_ids\": [2, 30]},"
                 " \"use_sliding_window\": true, \"sliding_window\": 512, \"max_window_layers\": 2"), &g, NULL);
  g_assert_cmpint (g.n_taps, ==, 2);
  g_assert_cmpint (g.taps[1], ==, 30);
  assert_ints (g.windows, sliding, 5);
  dfl_drafter_geometry_clear (&g);
  /* layer_types rule over use_sliding_window */
  v1_config (V1 (36, ", \"block_size\": 16, \"dflash_config\": {\"mask_token_id\": 1}, \"sliding_window\": 2048,"
                 " \"use_sliding_window\": false, \"layer_types\": [\"sliding_attention\", \"full_attention\","
                 " \"sliding_attention\", \"full_attention\", \"full_attention\"]"), &g, NULL);
  assert_ints (g.windows, typed, 5);
  dfl_drafter_geometry_clear (&g);

  v1_config (V1 (36, ", \"dflash_config\": {\"mask_token_id\": 299}"), &g, "has no \"block_size\"");
  v1_config (V1 (36, ", \"block_size\": 16, \"dflash_config\": {}"), &g, "has no mask_token_id");
  v1_config (V1 (36, ", \"block_size\": 16, \"dflash_config\": {\"mask_token_id\": 300}"), &g,
             "mask_token 300 is outside the vocabulary of 300");
  v1_config (V1 (36, ", \"block_size\": 16, \"dflash_config\": {\"mask_token_id\": 299},"
                 " \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4}"), &g, "rope scaling");
  v1_config (V1 (36, ", \"block_size\": 16, \"dflash_config\": {\"mask_token_id\": 299},"
                 " \"layer_types\": [\"full_attention\"]"), &g, "layer_types is");
  v1_config ("{\"architectures\": [\"Qwen3ForCausalLM\"]}", &g, "DFlashDraftModel");
#undef V1
}

static void
test_top_k (void)
{
  const float x[] = { 0.5f, 2.0f, -1.0f, 2.0f, 3.5f, 0.0f, NAN, 2.0f };
  float v[4];
  guint32 i[4];

  g_assert_cmpint (dfl_top_k (x, 8, 3, v, i), ==, 3);
  g_assert_cmpuint (i[0], ==, 4);
  g_assert_cmpuint (i[1], ==, 1);
  g_assert_cmpuint (i[2], ==, 3);
  g_assert_cmpint (dfl_top_k (x, 8, 1, v, i), ==, 1);
  g_assert_cmpuint (i[0], ==, 4);
  g_assert_cmpint (dfl_top_k (x, 3, 4, v, i), ==, 3);
  g_assert_cmpuint (i[2], ==, 2);
}

/* The drafts kept by confidence: the product of each row's probability of
 * its chosen token, against float64, cut before the first row where it
 * falls below the floor. */
static void
test_confident_rows (void)
{
  enum { ROWS = 5, WIDTH = 300 };
  g_autoptr (GRand) r = g_rand_new_with_seed (9);
  float logits[ROWS * WIDTH];
  guint32 chosen[ROWS];
  double p[ROWS], conf = 1.0;

  for (int i = 0; i < ROWS * WIDTH; i++)
    logits[i] = (float) g_rand_double_range (r, -4, 4);
  for (int row = 0; row < ROWS; row++) {
    double z = 0, top = -INFINITY;
    chosen[row] = (guint32) (37 * row + 11);
    /* a clear favourite in the first rows, less and less sure after */
    logits[row * WIDTH + chosen[row]] = 14.0f - 3.0f * row;
    for (int i = 0; i < WIDTH; i++)
      top = MAX (top, logits[row * WIDTH + i]);
    for (int i = 0; i < WIDTH; i++)
      z += exp (logits[row * WIDTH + i] - top);
    p[row] = exp (logits[row * WIDTH + chosen[row]] - top) / z;
  }
  for (int row = 0; row < ROWS; row++) {
    /* a floor just above and just below the product through this row */
    conf *= p[row];
    g_assert_cmpint (dfl_draft_confident_rows (logits, ROWS, WIDTH, chosen, conf * 1.001), ==,
                     row);
    g_assert_cmpint (dfl_draft_confident_rows (logits, ROWS, WIDTH, chosen, conf * 0.999), >,
                     row);
  }
  g_assert_cmpint (dfl_draft_confident_rows (logits, ROWS, WIDTH, chosen, 0.0), ==, ROWS);
  /* a chosen token outside the row: a critical, and the drafts kept up to it */
  chosen[2] = WIDTH;
  g_test_expect_message (NULL, G_LOG_LEVEL_CRITICAL, "*chosen*width*");
  g_assert_cmpint (dfl_draft_confident_rows (logits, ROWS, WIDTH, chosen, 0.0), ==, 2);
  g_test_assert_expected_messages ();
}

static DflDrafterGeometry
small_geometry (void)
{
  static int taps[] = { 1 };
  DflDrafterGeometry g = {
    .hidden = 8, .intermediate = 8, .layers = 1, .heads = 2, .kv_heads = 1, .head_dim = 4,
    .vocab = 6, .block = 3, .mask_token = 5, .conv_group = 2, .conv_kernel = 2,
    .selector_rank = 2, .selector_top = 3, .n_taps = 1, .taps = taps, .target_layers = 2,
    .rope_theta = 10000.0, .eps = 1e-6,
  };
  return g;
}

typedef struct { const float (*p)[2], (*c)[2]; } Books;

static void
set_books (const char *name, DflDtype dtype, gsize n, void *data, gboolean writable, gpointer user)
{
  Books *b = user;
  const float (*src)[2] = strstr (name, "predecessor") ? b->p : strstr (name, "successor") ? b->c : NULL;

  if (!src)
    return;
  g_assert_true (writable && dtype == DFL_DTYPE_F16 && n == 12);
  for (gsize i = 0; i < n; i++)
    ((guint16 *) data)[i] = dfl_f32_to_f16 (src[i / 2][i % 2]);
}

static void
test_select (void)
{
  DflDrafterGeometry g = small_geometry ();
  GError *error = NULL;
  g_autoptr (DflDrafterWeights) d = dfl_drafter_weights_new_blank (&g, TRUE, TRUE, &error);
  /* P[prev] = (1, 1) for every prev; hp = (1, 0): the bonus of a candidate is C[cand][0] */
  static const float P[6][2] = { { 1, 1 }, { 1, 1 }, { 1, 1 }, { 1, 1 }, { 1, 1 }, { 1, 1 } };
  static const float C[6][2] = { { 0, 0 }, { 0, 0 }, { 1, 0 }, { 0, 0 }, { 3, 0 }, { 0, 0 } };
  Books b = { P, C };
  const float hp[] = { 1, 0, 1, 0, 1, 0 };
  /* row 0: candidates 1 (3.0), 2 (2.0), 0 (1.0): 2 scores 2 + 1 = 3, a tie: 1 stays.
   * row 1: candidates 3 (5.0), 4 (2.5), 1 (2.0): 4 scores 5.5 and overturns 3.
   * row 2: all equal: plain is the first of equals (0), 2 has the bonus */
  const float logits[] = { 1.0f, 3.0f, 2.0f, 0.5f, -1.0f, 0.0f,
                           0.0f, 2.0f, 1.0f, 5.0f, 2.5f, -3.0f,
                           1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f };
  guint32 chosen[3], plain[3];

  g_assert_no_error (error);
  dfl_drafter_weights_foreach (d, set_books, &b);
  dfl_drafter_weights_select_with (d, hp, 3, logits, 6, 0, chosen, plain);
  g_assert_cmpuint (plain[0], ==, 1);
  g_assert_cmpuint (chosen[0], ==, 1);
  g_assert_cmpuint (plain[1], ==, 3);
  g_assert_cmpuint (chosen[1], ==, 4);
  g_assert_cmpuint (plain[2], ==, 0);
  g_assert_cmpuint (chosen[2], ==, 2);
  /* a shortlist: the head's first 4 rows only */
  {
    const float short_logits[] = { 1.0f, 3.0f, 2.0f, 0.5f };
    dfl_drafter_weights_select_with (d, hp, 1, short_logits, 4, 0, chosen, plain);
    g_assert_cmpuint (chosen[0], ==, 1);
  }
}

/* FNV-1a 64 of "a" is af63dc4c8601ec8c, of "" the offset basis (the
 * published test vectors): a one-byte embedding and an empty head. */
static void
test_trunk_hash (void)
{
  g_autoptr (DflSafetensorsWriter) w = dfl_safetensors_writer_new ();
  g_autofree char *dir = g_dir_make_tmp ("dfl-hash-XXXXXX", NULL);
  g_autofree char *path = g_build_filename (dir, "model.safetensors", NULL);
  g_autoptr (DflSafetensors) st = NULL;
  GError *error = NULL;
  const guint8 a = 'a', b[2] = { 'a', 'b' };
  gint64 one = 1, two = 2;
  char hex[17];

  g_assert_true (dfl_safetensors_writer_add (w, "model.embed_tokens.weight", DFL_DTYPE_U8, 1, &one, &a, &error));
  g_assert_true (dfl_safetensors_writer_add (w, "lm_head.weight", DFL_DTYPE_U8, 1, &two, b, &error));
  g_assert_true (dfl_safetensors_writer_write (w, path, &error));
  g_assert_no_error (error);
  st = dfl_safetensors_open (path, &error);
  g_assert_no_error (error);
  g_assert_true (dfl_trunk_hash64 (st, TRUE, hex, &error));
  g_assert_cmpstr (hex, ==, "af63dc4c8601ec8c");
  /* untied: "a" then "ab" is FNV-1a of "aab" */
  g_assert_true (dfl_trunk_hash64 (st, FALSE, hex, &error));
  g_assert_cmpstr (hex, ==, "e71cbb19053f4bef" );
  g_clear_pointer (&st, dfl_safetensors_free);
  g_remove (path);
  g_rmdir (dir);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/drafter/geometry", test_geometry);
  g_test_add_func ("/drafter/v1-config", test_v1_config);
  g_test_add_func ("/drafter/top-k", test_top_k);
  g_test_add_func ("/drafter/confident-rows", test_confident_rows);
  g_test_add_func ("/drafter/select", test_select);
  g_test_add_func ("/drafter/trunk-hash", test_trunk_hash);
  return g_test_run ();
}
