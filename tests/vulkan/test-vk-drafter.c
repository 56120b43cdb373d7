/* gst-dflash — the Vulkan drafter against the CPU drafter, call for call:
 * the same queue / truncate / reset / block sequence goes to a context
 * bound on the CPU and to one bound on the Vulkan device, and every block's rows (after the last norm) and
 * logits, and after it every layer's context keys and values, must agree
 * within 1e-3 (max |vk − cpu| / max |cpu| per block, per layer and head),
 * the chosen and the plain drafts must be identical, and a block the CPU
 * refuses (a context too short after a deep rewind, a gap) must be refused
 * with the same error.
 *
 * Drafters: every geometry the drafter tests use, with random weights made
 * here (F32, F16 and BF16 matrices; windows, no_rope layers, no convolution
 * or selector as released drafters); the random sidecars of the drafter
 * tests (tests/drafter/make_sidecar.py, run on the Python that has numpy,
 * replaying their own scripts); and the default model (models/qwen3-go) on
 * the target's own taps.
 *
 * Environment (meson.build sets it): DFL_VK_MODEL the default model's
 * folder, DFL_VK_PYTHON and DFL_VK_MAKE_SIDECAR the generator, DFL_VK_WORK
 * where it writes.
 */
#include "vk-test.h"
#include "drafter.h"
#include "dfl-json.h"
#include "dfl-kernels.h"
#include "target.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#define TOL 1e-3

typedef struct {
  const char *name;
  DflDrafterWeights *d;
  const DflTarget *target;      /* where the embedding and head are a target's */
  DflDraftTrunk trunk;
  DflDevice *dev;
  DflDrafterWeights *cpu_w, *vk_w;
  DflDraftCtx *cpu, *c;
  DflVkBuffer *out, *out_host;
  const float *taps;
  gsize taps_rows;
  int tw;
  int blocks, refusals;
  double worst_rows, worst_logits, worst_kv;
} Pair;

/* --- random drafters --- */

static void
fill (const char *name, DflDtype dtype, gsize n, void *data, gboolean writable, gpointer user)
{
  GRand *rng = g_rand_new_with_seed (g_str_hash (name) ^ GPOINTER_TO_UINT (user));
  gboolean is_norm = strstr (name, "norm") != NULL, is_base = strstr (name, "base_kernel") != NULL;

  g_assert_true (writable);
  for (gsize i = 0; i < n; i++) {
    float v = (float) g_rand_double_range (rng, -0.3, 0.3);
    if (dtype == DFL_DTYPE_F16)
      ((guint16 *) data)[i] = dfl_f32_to_f16 (strstr (name, "codebook") ? 2 * v : v);
    else if (dtype == DFL_DTYPE_BF16)
      ((guint16 *) data)[i] = dfl_f32_to_bf16 (v);
    else
      ((float *) data)[i] = is_norm ? 1.0f + v : is_base && i % 2 == 0 ? 1.0f + v : v;
  }
  g_rand_free (rng);
}

static void *
random_table (GRand *rng, int rows, int cols, DflDtype type, double scale)
{
  gsize n = (gsize) rows * cols;
  void *t = g_malloc (n * (type == DFL_DTYPE_F32 ? 4 : 2));

  for (gsize i = 0; i < n; i++) {
    float v = (float) g_rand_double_range (rng, -scale, scale);
    if (type == DFL_DTYPE_F32)
      ((float *) t)[i] = v;
    else if (type == DFL_DTYPE_F16)
      ((guint16 *) t)[i] = dfl_f32_to_f16 (v);
    else
      ((guint16 *) t)[i] = dfl_f32_to_bf16 (v);
  }
  return t;
}

/* --- a pair --- */

static void
pair_start (Pair *p)
{
  GError *error = NULL;
  const DflDrafterGeometry *g = dfl_drafter_weights_geometry (p->d);
  gsize bytes;

  p->tw = dfl_drafter_geometry_tap_width (g);
  if (p->target) {
    g_assert_true (dfl_draft_trunk_of_target (&p->trunk, p->target, &error));
    g_assert_no_error (error);
  }
  p->dev = dfl_device_wrap (DFL_BACKEND_VULKAN, vk_test_dev, &error);
  g_assert_no_error (error);
  p->cpu_w = dfl_drafter_weights_bind (p->d, NULL, &p->trunk, DFL_DTYPE_F32, &error);
  g_assert_no_error (error);
  p->vk_w = dfl_drafter_weights_bind (p->d, p->dev, &p->trunk, DFL_DTYPE_F32, &error);
  g_assert_no_error (error);
  p->cpu = dfl_draft_ctx_new (p->cpu_w, &error);
  g_assert_no_error (error);
  p->c = dfl_draft_ctx_new (p->vk_w, &error);
  g_assert_no_error (error);
  bytes = dfl_draft_ctx_block_bytes (p->c, g->vocab);
  p->out = dfl_vk_buffer_new (vk_test_dev, bytes, DFL_VK_MEMORY_DEVICE, &error);
  g_assert_no_error (error);
  p->out_host = dfl_vk_buffer_new (vk_test_dev, bytes, DFL_VK_MEMORY_HOST, &error);
  g_assert_no_error (error);
}

static void
pair_end (Pair *p)
{
  printf ("# %s: %d blocks (worst rows %.2e, logits %.2e, context %.2e), %d refused alike\n",
          p->name, p->blocks, p->worst_rows, p->worst_logits, p->worst_kv, p->refusals);
  g_assert_cmpint (p->blocks, >, 0);
  dfl_vk_buffer_free (p->out);
  dfl_vk_buffer_free (p->out_host);
  dfl_draft_ctx_free (p->c);
  dfl_draft_ctx_free (p->cpu);
  dfl_drafter_weights_unref (p->vk_w);
  dfl_drafter_weights_unref (p->cpu_w);
  dfl_device_unref (p->dev);
  vk_test_assert_clean ();
}

static void
check_span (Pair *p)
{
  gint64 a, b, x, y;

  dfl_draft_ctx_span (p->cpu, &a, &b);
  dfl_draft_ctx_span (p->c, &x, &y);
  g_assert_cmpint (a, ==, x);
  g_assert_cmpint (b, ==, y);
}

/* Every layer's settled keys and values, and the positions they cover. */
static void
check_kv (Pair *p)
{
  const DflDrafterGeometry *g = dfl_drafter_weights_geometry (p->d);
  GError *error = NULL;

  for (int l = 0; l < g->layers; l++) {
    for (int h = 0; h < g->kv_heads; h++) {
      float *ck, *cv, *vk, *vv;
      gsize crows, vrows;
      gint64 cfrom, vfrom;
      double *want;
      g_assert_true (dfl_draft_ctx_read_kv (p->cpu, l, h, &ck, &cv, &crows, &cfrom, &error));
      g_assert_true (dfl_draft_ctx_read_kv (p->c, l, h, &vk, &vv, &vrows, &vfrom, &error));
      g_assert_no_error (error);
      g_assert_cmpuint (crows, ==, vrows);
      g_assert_cmpint (cfrom, ==, vfrom);
      want = g_new (double, MAX (crows, 1) * g->head_dim);
      for (gsize i = 0; i < crows * g->head_dim; i++)
        want[i] = ck[i];
      p->worst_kv = MAX (p->worst_kv, vk_test_rel (vk, want, crows * g->head_dim));
      for (gsize i = 0; i < crows * g->head_dim; i++)
        want[i] = cv[i];
      p->worst_kv = MAX (p->worst_kv, vk_test_rel (vv, want, crows * g->head_dim));
      if (p->worst_kv > TOL)
        g_error ("%s: layer %d head %d: the context's keys or values differ by %g", p->name, l, h,
                 p->worst_kv);
      g_free (want);
      g_free (ck);
      g_free (cv);
      g_free (vk);
      g_free (vv);
    }
  }
}

static void
op_queue (Pair *p, gint64 pos, gsize src, gsize n)
{
  GError *error = NULL;

  g_assert_cmpuint (src + n, <=, p->taps_rows);
  g_assert_true (dfl_draft_ctx_queue_host (p->cpu, pos, p->taps + src * p->tw, n, &error));
  g_assert_true (dfl_draft_ctx_queue_host (p->c, pos, p->taps + src * p->tw, n, &error));
  g_assert_no_error (error);
  check_span (p);
}

static void
op_truncate (Pair *p, gint64 pos)
{
  dfl_draft_ctx_truncate (p->cpu, pos);
  dfl_draft_ctx_truncate (p->c, pos);
  check_span (p);
}

/* One block both ways. `how` varies the Vulkan calls: 0 draft into device
 * memory, 1 block then select, 2 draft into host memory. */
static void
op_block (Pair *p, gint64 pos, guint32 token, int width, int how)
{
  const DflDrafterGeometry *g = dfl_drafter_weights_geometry (p->d);
  int hs = g->hidden, n = g->block - 1;
  float *cpu_out = g_new (float, (gsize) n * (hs + width));
  float *got = g_new (float, (gsize) n * (hs + width));
  guint32 *chosen = g_new (guint32, n), *plain = g_new (guint32, n);
  guint32 *vchosen = g_new (guint32, n), *vplain = g_new (guint32, n);
  double *want = g_new (double, (gsize) n * MAX (hs, width));
  DflTensor ct = dfl_tensor_2d (NULL, cpu_out, 0, DFL_DTYPE_F32, n, hs + width);
  DflTensor out = dfl_tensor_2d (p->dev, how == 2 ? p->out_host : p->out, 0, DFL_DTYPE_F32, n,
                                 hs + width);
  GError *cpu_error = NULL, *vk_error = NULL;
  gboolean cpu_ok, vk_ok;

  cpu_ok = dfl_draft_ctx_draft (p->cpu, pos, token, width, &ct, chosen, plain, &cpu_error);
  if (how == 1)
    vk_ok = dfl_draft_ctx_block (p->c, pos, token, width, &out, &vk_error)
            && dfl_draft_ctx_select (p->c, &out, width, token, vchosen, vplain, &vk_error);
  else
    vk_ok = dfl_draft_ctx_draft (p->c, pos, token, width, &out, vchosen, vplain, &vk_error);
  check_span (p);
  if (!cpu_ok) {
    /* refused alike, with the same words */
    if (vk_ok)
      g_error ("%s: the CPU refused a block at %" G_GINT64_FORMAT " (%s), Vulkan drafted it",
               p->name, pos, cpu_error->message);
    g_assert_error (vk_error, DFL_ERROR, cpu_error->code);
    g_assert_cmpstr (vk_error->message, ==, cpu_error->message);
    p->refusals++;
    goto out;
  }
  if (!vk_ok)
    g_error ("%s: a block at %" G_GINT64_FORMAT ": %s", p->name, pos, vk_error->message);
  check_kv (p);
  g_assert_true (dfl_vk_download (vk_test_dev, got, out.handle, 0,
                                  sizeof (float) * n * (hs + width), &vk_error));
  g_assert_no_error (vk_error);
  {
    double e_rows, e_logits;
    for (gsize i = 0; i < (gsize) n * hs; i++)
      want[i] = cpu_out[i];
    e_rows = vk_test_rel (got, want, (gsize) n * hs);
    for (gsize i = 0; i < (gsize) n * width; i++)
      want[i] = cpu_out[(gsize) n * hs + i];
    e_logits = vk_test_rel (got + (gsize) n * hs, want, (gsize) n * width);
    p->worst_rows = MAX (p->worst_rows, e_rows);
    p->worst_logits = MAX (p->worst_logits, e_logits);
    if (e_rows > TOL || e_logits > TOL)
      g_error ("%s: block at %" G_GINT64_FORMAT ": rows differ by %g, logits by %g (tolerance %g)",
               p->name, pos, e_rows, e_logits, TOL);
  }
  for (int j = 0; j < n; j++) {
    if (chosen[j] != vchosen[j] || plain[j] != vplain[j])
      g_error ("%s: block at %" G_GINT64_FORMAT " row %d: CPU drafts %u (plain %u),"
               " Vulkan %u (plain %u)",
               p->name, pos, j + 1, chosen[j], plain[j], vchosen[j], vplain[j]);
  }
  p->blocks++;
out:
  g_clear_error (&cpu_error);
  g_clear_error (&vk_error);
  g_free (cpu_out);
  g_free (got);
  g_free (chosen);
  g_free (plain);
  g_free (vchosen);
  g_free (vplain);
  g_free (want);
}

/* The drafter tests' script (make_sidecar.py's main_script), at a prompt of
 * `n0` rows: blocks, a shortlist, a rewind with rows replaced; then where
 * `full`, a queue past PENDING_ROWS, window drops, a rewind inside the
 * slack, a block before the end, a rewind deeper than the slack (refused
 * where a window lost the rows), a reset, and a gap; else a block before the
 * end. Needs n0 + 1110 rows of taps (n0 + 20 without `full`). */
static void
run_script (Pair *p, gint64 n0, gboolean full)
{
  const DflDrafterGeometry *g = dfl_drafter_weights_geometry (p->d);
  GRand *rng = g_rand_new_with_seed ((guint32) n0 + g->hidden);
  int v = g->vocab, top = dfl_drafter_weights_has_selector (p->d) ? g->selector_top : 1;
  int how = 0;
#define TOK() ((guint32) g_rand_int_range (rng, 0, v))
#define BLOCK(pos, width) op_block (p, (pos), TOK (), (width), how++ % 3)

  op_queue (p, 0, 0, n0);
  BLOCK (n0, v);
  op_queue (p, n0, n0, 4);
  BLOCK (n0 + 4, MAX (top, v - 17));        /* a shortlist */
  op_truncate (p, n0 + 2);
  op_queue (p, n0 + 2, n0 + 10, 3);         /* rows replaced */
  BLOCK (n0 + 5, v);
  if (!full) {
    BLOCK (n0 - 40, v);                     /* before the end */
    g_rand_free (rng);
    return;
  }
  op_queue (p, n0 + 5, n0 + 20, 700);       /* past PENDING_ROWS */
  BLOCK (n0 + 705, v);                      /* drops windows */
  op_truncate (p, n0 + 605);                /* inside the slack */
  op_queue (p, n0 + 605, n0 + 800, 5);
  BLOCK (n0 + 610, v);
  BLOCK (n0 + 600, v);                      /* before the end */
  op_truncate (p, n0 + 50);                 /* deeper than the slack */
  BLOCK (n0 + 50, v);
  dfl_draft_ctx_reset (p->cpu);
  dfl_draft_ctx_reset (p->c);
  check_span (p);
  op_queue (p, 0, 30, n0);
  BLOCK (n0, v);
  op_queue (p, 2000, 0, 50);                /* a gap: the context starts over */
  BLOCK (2050, v);
  BLOCK (1990, v);                          /* before the context: refused */
  BLOCK (2060, v);                          /* past its end: refused */
  g_rand_free (rng);
#undef BLOCK
#undef TOK
}

typedef struct {
  const char *name;
  DflDrafterGeometry g;
  gboolean conv, selector;
  DflDtype matrices;
  DflDtype table;
  gboolean tied;
} Made;

static void
test_made (gconstpointer data)
{
  const Made *m = data;
  GError *error = NULL;
  GRand *rng = g_rand_new_with_seed (g_str_hash (m->name));
  Pair p = { .name = m->name };
  gsize rows = 1300;
  float *taps;
  void *embed, *head;

  p.d = dfl_drafter_weights_new_blank_as (&m->g, m->conv, m->selector, m->matrices, &error);
  g_assert_no_error (error);
  dfl_drafter_weights_foreach (p.d, fill, GUINT_TO_POINTER (g_str_hash (m->name)));
  embed = random_table (rng, m->g.vocab, m->g.hidden, m->table, 1.0);
  head = m->tied ? embed
                 : random_table (rng, m->g.vocab, m->g.hidden, m->table, 3.0 / sqrt (m->g.hidden));
  p.trunk.embed = dfl_tensor_2d (NULL, embed, 0, m->table, m->g.vocab, m->g.hidden);
  p.trunk.head = dfl_tensor_2d (NULL, head, 0, m->table, m->g.vocab, m->g.hidden);
  taps = g_new (float, rows * dfl_drafter_geometry_tap_width (&m->g));
  for (gsize i = 0; i < rows * dfl_drafter_geometry_tap_width (&m->g); i++)
    taps[i] = (float) g_rand_double_range (rng, -2, 2);
  p.taps = taps;
  p.taps_rows = rows;
  pair_start (&p);
  run_script (&p, 120, TRUE);
  pair_end (&p);
  if (!m->tied)
    g_free (head);
  g_free (embed);
  g_free (taps);
  dfl_drafter_weights_unref (p.d);
  g_rand_free (rng);
}

/* --- the drafter tests' sidecars --- */

static char *sidecar_dir;
static char *sidecar_failure;

static void
make_sidecars (void)
{
  const char *py = g_getenv ("DFL_VK_PYTHON"), *script = g_getenv ("DFL_VK_MAKE_SIDECAR");
  const char *work = g_getenv ("DFL_VK_WORK");
  char *out = NULL, *err = NULL;
  int status = 0;
  GError *error = NULL;

  if (!py || !script || !work) {
    sidecar_failure = g_strdup ("DFL_VK_PYTHON, DFL_VK_MAKE_SIDECAR and DFL_VK_WORK are not set");
    return;
  }
  {
    char *dir = g_build_filename (work, "sidecars", NULL);
    const char *argv[] = { py, script, dir, NULL };
    if (!g_spawn_sync (NULL, (char **) argv, NULL, G_SPAWN_DEFAULT, NULL, NULL, &out, &err, &status,
                       &error)
        || !g_spawn_check_wait_status (status, NULL)) {
      sidecar_failure = g_strdup_printf ("%s %s failed: %s", py, script,
                                         error ? error->message : g_strstrip (err));
      g_free (dir);
    } else {
      sidecar_dir = dir;
    }
  }
  g_clear_error (&error);
  g_free (out);
  g_free (err);
}

static DflTensor
table_of (const DflStoredTensor *t)
{
  g_assert_true (t->dtype == DFL_DTYPE_F32 && t->n_dims == 2);
  return dfl_tensor_2d (NULL, (gpointer) t->data, 0, DFL_DTYPE_F32, t->shape[0], t->shape[1]);
}

static void
test_sidecar (gconstpointer data)
{
  const char *variant = data;
  GError *error = NULL;
  char *drafter, *target, *inputs;
  DflSafetensors *tst, *ist;
  const DflStoredTensor *e, *hd, *taps;
  cJSON *script, *op;
  Pair p = { .name = variant };
  float *rows;

  if (!sidecar_dir) {
    g_test_skip (sidecar_failure);
    return;
  }
  if (g_strcmp0 (variant, "v1") == 0)
    drafter = g_build_filename (sidecar_dir, variant, "drafter", NULL);
  else
    drafter = g_build_filename (sidecar_dir, variant, "dflash.safetensors", NULL);
  target = g_build_filename (sidecar_dir, variant, "target", "model.safetensors", NULL);
  inputs = g_build_filename (sidecar_dir, variant, "inputs.safetensors", NULL);
  p.d = dfl_drafter_weights_open (drafter, &error);
  g_assert_no_error (error);
  tst = dfl_safetensors_open (target, &error);
  g_assert_no_error (error);
  ist = dfl_safetensors_open (inputs, &error);
  g_assert_no_error (error);
  e = dfl_safetensors_find (tst, "model.embed_tokens.weight");
  hd = dfl_safetensors_find (tst, "lm_head.weight");
  p.trunk.embed = table_of (e);
  p.trunk.head = table_of (hd ? hd : e);
  taps = dfl_safetensors_find (ist, "taps");
  rows = dfl_tensor_dup_f32 (taps);
  p.taps = rows;
  p.taps_rows = (gsize) taps->shape[0];
  pair_start (&p);
  script = cJSON_Parse (dfl_safetensors_metadata (ist, "script"));
  g_assert_nonnull (script);
  cJSON_ArrayForEach (op, script) {
    const char *kind = cJSON_GetObjectItem (op, "op")->valuestring;
    const cJSON *at = cJSON_GetObjectItem (op, "pos");
    gint64 pos = at ? (gint64) at->valuedouble : 0;
    if (strcmp (kind, "queue") == 0)
      op_queue (&p, pos, (gsize) cJSON_GetObjectItem (op, "src")->valuedouble,
                (gsize) cJSON_GetObjectItem (op, "n")->valuedouble);
    else if (strcmp (kind, "truncate") == 0)
      op_truncate (&p, pos);
    else if (strcmp (kind, "block") == 0)
      op_block (&p, pos, (guint32) cJSON_GetObjectItem (op, "token")->valuedouble,
                (int) cJSON_GetObjectItem (op, "width")->valuedouble, p.blocks % 3);
  }
  cJSON_Delete (script);
  pair_end (&p);
  g_free (rows);
  dfl_safetensors_free (tst);
  dfl_safetensors_free (ist);
  dfl_drafter_weights_unref (p.d);
  g_free (drafter);
  g_free (target);
  g_free (inputs);
}

/* --- the default model --- */

static void
test_default_model (void)
{
  const char *dir = g_getenv ("DFL_VK_MODEL");
  GError *error = NULL;
  DflTarget *t;
  DflTargetSeq *seq;
  const DflDrafterGeometry *g;
  Pair p = { .name = "qwen3-go" };
  GRand *rng = g_rand_new_with_seed (42);
  int n = 220, tw, *ids;
  float *taps;
  DflForwardOut fo = { 0 };

  if (!dir) {
    g_test_skip ("DFL_VK_MODEL is not set");
    return;
  }
  t = dfl_target_load (dir, &error);
  g_assert_no_error (error);
  p.d = dfl_drafter_weights_open (dir, &error);
  g_assert_no_error (error);
  p.target = t;
  g = dfl_drafter_weights_geometry (p.d);
  tw = dfl_drafter_geometry_tap_width (g);
  ids = g_new (int, n);
  for (int i = 0; i < n; i++)
    ids[i] = g_rand_int_range (rng, 2, g->vocab);
  taps = g_new (float, (gsize) n * tw);
  fo.tap_layers = g->taps;
  fo.n_tap_layers = g->n_taps;
  fo.taps = taps;
  fo.logits_from = n;
  seq = dfl_target_seq_new (t);
  g_assert_true (dfl_target_forward (t, seq, ids, n, &fo, &error));
  g_assert_no_error (error);
  p.taps = taps;
  p.taps_rows = n;
  pair_start (&p);
  /* the short script: the model's blocks are costly on a software device */
  run_script (&p, 200, FALSE);
  pair_end (&p);
  dfl_target_seq_free (seq);
  g_free (ids);
  g_free (taps);
  dfl_drafter_weights_unref (p.d);
  dfl_target_free (t);
  g_rand_free (rng);
}

/* --- bad input --- */

static void
test_errors (void)
{
  static int taps[] = { 0 };
  DflDrafterGeometry g = {
    .hidden = 16, .intermediate = 16, .layers = 1, .heads = 2, .kv_heads = 1, .head_dim = 8,
    .vocab = 20, .block = 4, .mask_token = 19, .conv_group = 4, .conv_kernel = 2,
    .selector_rank = 2, .selector_top = 3, .n_taps = 1, .taps = taps, .target_layers = 2,
    .rope_theta = 10000.0, .eps = 1e-6,
  };
  GError *error = NULL;
  DflDrafterWeights *d = dfl_drafter_weights_new_blank (&g, TRUE, TRUE, &error), *vw;
  DflDevice *dev = dfl_device_wrap (DFL_BACKEND_VULKAN, vk_test_dev, NULL);
  float *table = g_new0 (float, 20 * 16), row[16] = { 0 };
  DflDraftTrunk trunk = { dfl_tensor_2d (NULL, table, 0, DFL_DTYPE_F32, 20, 16),
                          dfl_tensor_2d (NULL, table, 0, DFL_DTYPE_F32, 20, 16) };
  DflDraftTrunk narrow = { dfl_tensor_2d (NULL, table, 0, DFL_DTYPE_F32, 20, 15), trunk.embed };
  DflDraftCtx *c;
  DflVkBuffer *small;
  DflTensor out;

  g_assert_no_error (error);
  g_assert_null (dfl_drafter_weights_bind (d, dev, &narrow, DFL_DTYPE_F32, &error));
  g_assert_error (error, DFL_ERROR, DFL_ERROR_MISMATCH);
  g_assert_nonnull (strstr (error->message,
                            "the target's embedding is [20, 15]; the drafter needs [≥ 20, 16]"));
  g_clear_error (&error);
  /* Q8_0 matrices are the CPU's */
  g_assert_null (dfl_drafter_weights_bind (d, dev, &trunk, DFL_DTYPE_Q8_0, &error));
  g_assert_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "the drafter's matrices as Q8_0 are the CPU's"));
  g_clear_error (&error);
  vw = dfl_drafter_weights_bind (d, dev, &trunk, DFL_DTYPE_F32, &error);
  g_assert_no_error (error);
  c = dfl_draft_ctx_new (vw, &error);
  g_assert_no_error (error);
  small = dfl_vk_buffer_new (vk_test_dev, 64, DFL_VK_MEMORY_DEVICE, &error);
  g_assert_no_error (error);
  out = dfl_tensor_2d (dev, small, 0, DFL_DTYPE_F32, 1, 16);
  g_assert_true (dfl_draft_ctx_queue_host (c, 0, row, 1, &error));
  g_assert_false (dfl_draft_ctx_block (c, 1, 20, 20, &out, &error));
  g_assert_error (error, DFL_ERROR, DFL_ERROR_INVALID);
  g_assert_nonnull (strstr (error->message, "the anchor token 20 is outside the vocabulary of 20"));
  g_clear_error (&error);
  g_assert_false (dfl_draft_ctx_block (c, 1, 3, 2, &out, &error));
  g_assert_error (error, DFL_ERROR, DFL_ERROR_INVALID);
  g_assert_nonnull (strstr (error->message,
                            "a head width of 2; it must be from selector_top 3 to vocab 20"));
  g_clear_error (&error);
  g_assert_false (dfl_draft_ctx_block (c, 1, 3, 20, &out, &error));
  g_assert_error (error, DFL_ERROR, DFL_ERROR_INVALID);
  g_assert_nonnull (strstr (error->message,
                            "a block's output at width 20 takes 432 bytes; the buffer has 64"));
  g_clear_error (&error);
  g_assert_false (dfl_draft_ctx_queue_host (c, -1, row, 1, &error));
  g_assert_error (error, DFL_ERROR, DFL_ERROR_INVALID);
  g_clear_error (&error);
  /* blocks of several sequences in one pass need the table ops, which
   * this back end lacks: refused by name */
  g_assert_null (dfl_draft_batch_new (vw, 4, &error));
  g_assert_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "copy_rows_table, which a batch of blocks needs"));
  g_clear_error (&error);
  dfl_vk_buffer_free (small);
  dfl_draft_ctx_free (c);
  dfl_drafter_weights_unref (vw);
  dfl_drafter_weights_unref (d);
  dfl_device_unref (dev);
  g_free (table);
  vk_test_assert_clean ();
}

int
main (int argc, char **argv)
{
  /* the geometries of tests/drafter: make_sidecar.py's MAIN and MIXED and
   * its v1 layout, test-drafter-context.c's, test-drafter.c's small one */
  static int main_taps[] = { 1, 4, 6 }, main_windows[] = { 24, 0, 40 }, main_no_rope[] = { 1 };
  static int mixed_taps[] = { 0, 2, 3 }, v1_taps[] = { 1, 9 }, v1_windows[] = { 20, 0 };
  static int ctx_taps[] = { 0, 3 }, ctx_windows[] = { 6, 0, 11 }, ctx_no_rope[] = { 2 };
  static int small_taps[] = { 1 };
  static Made made[] = {
    { "main", { .hidden = 64, .intermediate = 160, .layers = 3, .heads = 4, .kv_heads = 2,
                .head_dim = 16, .vocab = 320, .block = 7, .mask_token = 319, .conv_group = 4,
                .conv_kernel = 3, .selector_rank = 16, .selector_top = 6, .n_taps = 3,
                .taps = main_taps, .target_layers = 8, .window = 24, .windows = main_windows,
                .n_no_rope = 1, .no_rope = main_no_rope, .rope_theta = 10000.0, .eps = 1e-6 },
      TRUE, TRUE, DFL_DTYPE_F32, DFL_DTYPE_F32, FALSE },
    { "mixed-f16", { .hidden = 96, .intermediate = 192, .layers = 2, .heads = 6, .kv_heads = 3,
                     .head_dim = 16, .vocab = 400, .block = 6, .mask_token = 7, .conv_group = 8,
                     .conv_kernel = 4, .selector_rank = 8, .selector_top = 5, .n_taps = 3,
                     .taps = mixed_taps, .target_layers = 4, .rope_theta = 1000000.0, .eps = 1e-5 },
      TRUE, TRUE, DFL_DTYPE_F16, DFL_DTYPE_F16, TRUE },
    { "v1-bf16", { .hidden = 64, .intermediate = 128, .layers = 2, .heads = 4, .kv_heads = 2,
                   .head_dim = 16, .vocab = 300, .block = 6, .mask_token = 299, .conv_group = 1,
                   .n_taps = 2, .taps = v1_taps, .target_layers = 12, .window = 20,
                   .windows = v1_windows, .rope_theta = 1000000.0, .eps = 1e-6 },
      FALSE, FALSE, DFL_DTYPE_BF16, DFL_DTYPE_BF16, FALSE },
    { "context", { .hidden = 32, .intermediate = 48, .layers = 3, .heads = 4, .kv_heads = 2,
                   .head_dim = 8, .vocab = 50, .block = 5, .mask_token = 49, .conv_group = 4,
                   .conv_kernel = 2, .selector_rank = 4, .selector_top = 3, .n_taps = 2,
                   .taps = ctx_taps, .target_layers = 4, .window = 6, .windows = ctx_windows,
                   .n_no_rope = 1, .no_rope = ctx_no_rope, .rope_theta = 10000.0, .eps = 1e-6 },
      TRUE, TRUE, DFL_DTYPE_F32, DFL_DTYPE_F32, FALSE },
    { "small", { .hidden = 8, .intermediate = 8, .layers = 1, .heads = 2, .kv_heads = 1,
                 .head_dim = 4, .vocab = 6, .block = 3, .mask_token = 5, .conv_group = 2,
                 .conv_kernel = 2, .selector_rank = 2, .selector_top = 3, .n_taps = 1,
                 .taps = small_taps, .target_layers = 2, .rope_theta = 10000.0, .eps = 1e-6 },
      TRUE, TRUE, DFL_DTYPE_F32, DFL_DTYPE_F32, TRUE },
  };
  int rc;

  g_test_init (&argc, &argv, NULL);
  if (!vk_test_open ())
    return 0;
  make_sidecars ();
  for (guint i = 0; i < G_N_ELEMENTS (made); i++) {
    char *path = g_strdup_printf ("/vulkan/drafter/random/%s", made[i].name);
    g_test_add_data_func (path, &made[i], test_made);
    g_free (path);
  }
  g_test_add_data_func ("/vulkan/drafter/sidecar/main", "main", test_sidecar);
  g_test_add_data_func ("/vulkan/drafter/sidecar/mixed", "mixed", test_sidecar);
  g_test_add_data_func ("/vulkan/drafter/sidecar/v1", "v1", test_sidecar);
  g_test_add_func ("/vulkan/drafter/default-model", test_default_model);
  g_test_add_func ("/vulkan/drafter/errors", test_errors);
  rc = g_test_run ();
  g_free (sidecar_dir);
  g_free (sidecar_failure);
  dfl_vk_device_unref (vk_test_dev);
  return rc;
}
