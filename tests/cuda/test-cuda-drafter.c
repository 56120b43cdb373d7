/* gst-dflash — the CUDA drafter against the CPU drafter: two contexts of
 * the same weights, one bound on the CPU, one on the card, the same calls.
 *
 *   test-cuda-drafter [--tap] [MODEL_DIR]
 *
 * Random drafters made here (no files): three taps, per-layer windows with
 * one layer that sees everything, a layer without rope, conv_group > 1,
 * blocks of 7 and 6, a selector; F32 matrices, and F16/BF16 ones; and one
 * without convolution and selector (a released drafter's make). Each runs
 * the same script on both sides: a prompt queued in pieces (host rows and
 * device rows), blocks at several anchors with rewinds (truncate) between,
 * a long stretch that makes the windowed layers drop rows, a gap that
 * starts the context over, a reset. Then MODEL_DIR (default the source
 * tree's models/qwen3-go: its target and dflash.safetensors), its context
 * rows from the CPU target's taps; skipped when the folder is missing.
 *
 *   - weights as F32 on the card: context K/V, block rows and logits within
 *     1e-3 of the CPU's (relative to each row's largest magnitude), the same
 *     chosen and plain drafts;
 *   - weights as stored (F16/BF16 matrices on the tensor cores): the card
 *     rounds x to the weights' type before each product, the CPU keeps x in
 *     F32 and widens the weights, so each product differs by x's rounding
 *     (BF16: 2⁻⁹ relative, F16: 2⁻¹²), a dozen products deep: within 5e-2
 *     (BF16) or 1e-2 (F16); drafts then mostly agree — the count is printed,
 *     and at least half must;
 *   - the captured graph gives bitwise what the direct launches give;
 *   - a short context is refused with the CPU's message.
 * Where no CUDA device is present the whole file is skipped (TAP plan 1..0).
 */
#include <glib.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cuda-drafter.h"
#include "dfl-error.h"
#include "dfl-kernels.h"
#include "drafter.h"
#include "target.h"

#ifndef DFL_MODEL_SOURCE_DIR
#define DFL_MODEL_SOURCE_DIR "models/qwen3-go"
#endif

static DflCudaDevice *device;
static DflDevice *cuda;          /* the same device, as the back-end interface sees it */
static const char *model_dir = DFL_MODEL_SOURCE_DIR;

/* --- numbers --- */

static guint64
mix (guint64 x)
{
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

/* uniform in [−1, 1) from (seed, i) */
static float
uniform (guint64 seed, guint64 i)
{
  guint64 bits = mix (seed * 0x9e3779b97f4a7c15ULL + i) >> 11;

  return (float) (bits * (2.0 / 9007199254740992.0) - 1.0);
}

static double
row_rel_error (const float *a, const float *b, int rows, gsize width)
{
  double worst = 0;

  for (int r = 0; r < rows; r++) {
    const float *ar = a + r * width, *br = b + r * width;
    double diff = 0, scale = 0;
    for (gsize i = 0; i < width; i++) {
      diff = MAX (diff, fabs ((double) ar[i] - br[i]));
      scale = MAX (scale, fabs ((double) br[i]));
    }
    worst = MAX (worst, diff / MAX (scale, 1e-30));
  }
  return worst;
}

/* --- random drafters --- */

typedef struct {
  const char *name;
  int hidden, intermediate, layers, heads, kv_heads, head_dim, vocab, block, mask;
  int conv_group, conv_kernel, rank, top;
  int taps[3];
  int target_layers;
  int windows[4];
  int no_rope;          /* −1: none */
  double theta;
  DflDtype dtype;
} Shape;

static const Shape shapes[] = {
  /* the drafter tests' main geometry: windows 24 / all / 40, layer 1 unroped */
  { "main", 64, 160, 3, 4, 2, 16, 320, 7, 319, 4, 3, 16, 6, { 1, 4, 6 }, 8, { 24, 0, 40 }, 1,
    10000.0, DFL_DTYPE_F32 },
  /* half matrices, conv_group 8, a longer kernel, one window for all but one */
  { "mixed", 96, 192, 2, 6, 3, 16, 400, 6, 7, 8, 4, 8, 5, { 0, 2, 3 }, 4, { 0, 32 }, -1,
    1000000.0, DFL_DTYPE_BF16 },
  { "f16", 64, 128, 2, 4, 2, 16, 300, 6, 299, 4, 3, 8, 4, { 1, 2, 3 }, 4, { 20, 0 }, 0,
    10000.0, DFL_DTYPE_F16 },
  /* a released (v1) drafter's make: no convolution, no selector (the argmax) */
  { "plain", 64, 128, 2, 4, 2, 16, 300, 6, 299, 1, 0, 0, 1, { 1, 5, 9 }, 12, { 20, 0 }, -1,
    1000000.0, DFL_DTYPE_BF16 },
};

static void
shape_geometry (const Shape *s, DflDrafterGeometry *g)
{
  memset (g, 0, sizeof *g);
  *g = (DflDrafterGeometry) {
    .hidden = s->hidden, .intermediate = s->intermediate, .layers = s->layers,
    .heads = s->heads, .kv_heads = s->kv_heads, .head_dim = s->head_dim, .vocab = s->vocab,
    .block = s->block, .mask_token = (guint32) s->mask, .conv_group = s->conv_group,
    .conv_kernel = s->conv_kernel, .selector_rank = s->rank, .selector_top = s->top,
    .n_taps = 3, .taps = g_memdup2 (s->taps, sizeof s->taps), .target_layers = s->target_layers,
    .window = 0, .windows = g_memdup2 (s->windows, sizeof (int) * s->layers),
    .n_no_rope = s->no_rope >= 0 ? 1 : 0,
    .no_rope = s->no_rope >= 0 ? g_memdup2 (&s->no_rope, sizeof (int)) : NULL,
    .rope_theta = s->theta, .eps = 1e-6,
  };
}

typedef struct {
  const DflDrafterGeometry *g;
  guint64 seed;
} Filler;

/* Every weight random: norms near one, matrices ±sqrt(3 / fan-in), base
 * kernels small, codebooks ±0.6. */
static void
fill_weight (const char *name, DflDtype dtype, gsize n, void *data, gboolean writable,
             gpointer user_data)
{
  Filler *F = user_data;
  const DflDrafterGeometry *g = F->g;
  guint64 seed = F->seed++;
  float scale;
  int fan_in = g->hidden;

  g_assert (writable);
  if (g_str_has_suffix (name, "norm.weight")) {
    for (gsize i = 0; i < n; i++)
      ((float *) data)[i] = 1.0f + 0.1f * uniform (seed, i);
    return;
  }
  if (g_str_has_suffix (name, "base_kernel")) {
    for (gsize i = 0; i < n; i++)
      ((float *) data)[i] = 0.4f * uniform (seed, i);
    return;
  }
  if (strstr (name, "codebook")) {
    for (gsize i = 0; i < n; i++)
      ((guint16 *) data)[i] = dfl_f32_to_f16 (0.6f * uniform (seed, i));
    return;
  }
  if (strstr (name, "fc.weight"))
    fan_in = dfl_drafter_geometry_tap_width (g);
  else if (strstr (name, "down_proj"))
    fan_in = g->intermediate;
  else if (strstr (name, "o_proj"))
    fan_in = g->heads * g->head_dim;
  scale = sqrtf (3.0f / fan_in);
  for (gsize i = 0; i < n; i++) {
    float v = scale * uniform (seed, i);
    if (dtype == DFL_DTYPE_F32)
      ((float *) data)[i] = v;
    else if (dtype == DFL_DTYPE_BF16)
      ((guint16 *) data)[i] = dfl_f32_to_bf16 (v);
    else
      ((guint16 *) data)[i] = dfl_f32_to_f16 (v);
  }
}

/* --- one drafter on both sides --- */

typedef struct {
  DflDrafterWeights *cpu;       /* the host weights */
  DflDrafterWeights *cpu_w, *gpu_w;
  DflDraftCtx *cpu_ctx, *ctx;
  DflTarget *target;            /* the model's, else NULL: E and H below */
  const DflDrafterGeometry *g;
  float *embed, *head;          /* host F32 [vocab][hidden] (random drafters) */
  DflDraftTrunk trunk, d_trunk_t;   /* the host trunk, the card's */
  void *d_trunk;
  float *d_out, *d_out2, *d_taps;   /* d_out2: a replay's other destination */
  int width;
  double tol, worst_rows, worst_logits;
  int blocks, drafts, agree_chosen, agree_plain;
  const char *label;
} Pair;

static DflTensor
out_tensor (const Pair *p, float *d_out)
{
  return dfl_tensor_2d (cuda, d_out, 0, DFL_DTYPE_F32, p->g->block - 1, p->g->hidden + p->width);
}

static void
pair_open_gpu (Pair *p, DflDtype as)
{
  g_autoptr (GError) error = NULL;
  gsize bytes;

  p->cpu_w = dfl_drafter_weights_bind (p->cpu, NULL, &p->trunk, DFL_DTYPE_F32, &error);
  g_assert_no_error (error);
  p->cpu_ctx = dfl_draft_ctx_new (p->cpu_w, &error);
  g_assert_no_error (error);
  p->gpu_w = dfl_drafter_weights_bind (p->cpu, cuda, &p->d_trunk_t, as, &error);
  g_assert_no_error (error);
  p->ctx = dfl_draft_ctx_new (p->gpu_w, &error);
  g_assert_no_error (error);
  bytes = dfl_draft_ctx_block_bytes (p->ctx, p->g->vocab);
  p->d_out = dfl_cuda_alloc (device, bytes, &error);
  g_assert_no_error (error);
  p->d_out2 = dfl_cuda_alloc (device, bytes, &error);
  g_assert_no_error (error);
}

static void
pair_close (Pair *p)
{
  g_test_message ("%s: %d blocks, largest error: rows %.2g, logits %.2g (tolerance %.0e);"
                  " of %d drafts, %d chosen and %d plain agree", p->label, p->blocks,
                  p->worst_rows, p->worst_logits, p->tol, p->drafts, p->agree_chosen,
                  p->agree_plain);
  dfl_cuda_free (device, p->d_out);
  dfl_cuda_free (device, p->d_out2);
  dfl_cuda_free (device, p->d_taps);
  dfl_draft_ctx_free (p->ctx);
  dfl_draft_ctx_free (p->cpu_ctx);
  dfl_drafter_weights_unref (p->gpu_w);
  dfl_drafter_weights_unref (p->cpu_w);
  dfl_cuda_free (device, p->d_trunk);
  dfl_drafter_weights_unref (p->cpu);
  if (p->target)
    dfl_target_free (p->target);
  g_free (p->embed);
  g_free (p->head);
}

static void
pair_random (Pair *p, const Shape *s, gboolean stored)
{
  g_autoptr (GError) error = NULL;
  DflDrafterGeometry g;
  Filler F = { NULL, 1234 };
  gsize n;

  memset (p, 0, sizeof *p);
  shape_geometry (s, &g);
  p->cpu = dfl_drafter_weights_new_blank_as (&g, s->conv_kernel > 0, s->rank > 0, s->dtype,
                                             &error);
  g_assert_no_error (error);
  dfl_drafter_geometry_clear (&g);
  p->g = dfl_drafter_weights_geometry (p->cpu);
  F.g = p->g;
  dfl_drafter_weights_foreach (p->cpu, fill_weight, &F);
  n = (gsize) p->g->vocab * p->g->hidden;
  p->embed = g_new (float, n);
  p->head = g_new (float, n);
  for (gsize i = 0; i < n; i++) {
    p->embed[i] = uniform (77, i);
    p->head[i] = 3.0f * sqrtf (3.0f / p->g->hidden) * uniform (78, i);
  }
  p->trunk.embed = dfl_tensor_2d (NULL, p->embed, 0, DFL_DTYPE_F32, p->g->vocab, p->g->hidden);
  p->trunk.head = dfl_tensor_2d (NULL, p->head, 0, DFL_DTYPE_F32, p->g->vocab, p->g->hidden);
  p->d_trunk = dfl_cuda_alloc (device, 2 * n * sizeof (float), &error);
  g_assert_no_error (error);
  g_assert_true (dfl_cuda_upload (device, p->d_trunk, p->embed, n * 4, &error));
  g_assert_true (dfl_cuda_upload (device, (float *) p->d_trunk + n, p->head, n * 4, &error));
  p->d_trunk_t.embed = dfl_tensor_2d (cuda, p->d_trunk, 0, DFL_DTYPE_F32, p->g->vocab,
                                      p->g->hidden);
  p->d_trunk_t.head = dfl_tensor_2d (cuda, p->d_trunk, n * sizeof (float), DFL_DTYPE_F32,
                                     p->g->vocab, p->g->hidden);
  p->width = p->g->vocab;
  p->label = s->name;
  p->tol = !stored || s->dtype == DFL_DTYPE_F32 ? 1e-3 : s->dtype == DFL_DTYPE_F16 ? 1e-2 : 5e-2;
  pair_open_gpu (p, stored ? dfl_drafter_weights_stored_dtype (p->cpu) : DFL_DTYPE_F32);
}

/* The CPU's block rows and logits, and its drafts. */
static gboolean
cpu_block (Pair *p, gint64 pos, guint32 anchor, float *rows, float *logits, guint32 *chosen,
           guint32 *plain, GError **error)
{
  const DflDrafterGeometry *g = p->g;
  int n = g->block - 1, hs = g->hidden;
  float *out = g_new (float, (gsize) n * (hs + p->width));
  DflTensor t = dfl_tensor_2d (NULL, out, 0, DFL_DTYPE_F32, n, hs + p->width);
  gboolean ok = dfl_draft_ctx_draft (p->cpu_ctx, pos, anchor, p->width, &t, chosen, plain, error);

  if (ok) {
    memcpy (rows, out, (gsize) n * hs * sizeof (float));
    memcpy (logits, out + (gsize) n * hs, (gsize) n * p->width * sizeof (float));
  }
  g_free (out);
  return ok;
}

/* A block at `pos` on both sides: rows, logits and drafts compared; the
 * graph's output compared bitwise with the direct launches'. */
static void
both_block (Pair *p, gint64 pos, guint32 anchor)
{
  g_autoptr (GError) error = NULL;
  const DflDrafterGeometry *g = p->g;
  int n = g->block - 1, hs = g->hidden;
  gsize nf = dfl_draft_ctx_block_bytes (p->ctx, p->width) / sizeof (float);
  float *rows = g_new (float, (gsize) n * hs), *logits = g_new (float, (gsize) n * p->width);
  float *out = g_new (float, nf), *direct = g_new (float, nf);
  guint32 *cc = g_new (guint32, n), *cp = g_new (guint32, n);
  guint32 *gc = g_new (guint32, n), *gp = g_new (guint32, n);
  DflTensor t_out = out_tensor (p, p->d_out), t_out2 = out_tensor (p, p->d_out2);
  double e_rows, e_logits;

  g_assert_true (cpu_block (p, pos, anchor, rows, logits, cc, cp, &error));
  g_assert_no_error (error);

  dfl_drafter_weights_set_graphs (p->gpu_w, FALSE);
  g_assert_true (dfl_draft_ctx_block (p->ctx, pos, anchor, p->width, &t_out, &error));
  g_assert_no_error (error);
  g_assert_true (dfl_cuda_download (device, direct, p->d_out, nf * sizeof (float), &error));
  dfl_drafter_weights_set_graphs (p->gpu_w, TRUE);
  /* twice: the first captures, the second replays into another buffer
   * (a pipeline's pool hands out whichever tensor came back) */
  for (int i = 0; i < 2; i++) {
    g_assert_true (dfl_draft_ctx_block (p->ctx, pos, anchor, p->width, i ? &t_out2 : &t_out,
                                        &error));
    g_assert_no_error (error);
  }
  g_assert_true (dfl_cuda_download (device, out, p->d_out2, nf * sizeof (float), &error));
  g_assert_cmpmem (out, nf * sizeof (float), direct, nf * sizeof (float));
  g_assert_true (dfl_cuda_download (device, out, p->d_out, nf * sizeof (float), &error));
  g_assert_true (dfl_cuda_sync (device, &error));
  g_assert_cmpmem (out, nf * sizeof (float), direct, nf * sizeof (float));

  e_rows = row_rel_error (out, rows, n, hs);
  e_logits = row_rel_error (out + (gsize) n * hs, logits, n, p->width);
  if (e_rows > p->tol || e_logits > p->tol)
    g_test_message ("block at %" G_GINT64_FORMAT ": rows %.3g, logits %.3g (tolerance %.0e)",
                    pos, e_rows, e_logits, p->tol);
  p->worst_rows = MAX (p->worst_rows, e_rows);
  p->worst_logits = MAX (p->worst_logits, e_logits);
  g_assert_cmpfloat (e_rows, <=, p->tol);
  g_assert_cmpfloat (e_logits, <=, p->tol);

  g_assert_true (dfl_draft_ctx_select (p->ctx, &t_out, p->width, anchor, gc, gp, &error));
  g_assert_no_error (error);
  p->blocks++;
  for (int r = 0; r < n; r++) {
    p->drafts++;
    p->agree_chosen += gc[r] == cc[r];
    p->agree_plain += gp[r] == cp[r];
  }
  if (p->tol <= 1e-3) {
    g_assert_cmpmem (gc, n * 4, cc, n * 4);
    g_assert_cmpmem (gp, n * 4, cp, n * 4);
  }
  g_free (rows);
  g_free (logits);
  g_free (out);
  g_free (direct);
  g_free (cc);
  g_free (cp);
  g_free (gc);
  g_free (gp);
}

/* Rows of taps at positions pos … on both sides; through the device
 * variant every other time (a strided copy of the rows). */
static void
both_queue (Pair *p, gint64 pos, const float *taps, gsize n, gboolean on_device)
{
  g_autoptr (GError) error = NULL;
  gsize tw = (gsize) dfl_drafter_geometry_tap_width (p->g), ld = tw + 8;

  g_assert_true (dfl_draft_ctx_queue_host (p->cpu_ctx, pos, taps, n, &error));
  if (!on_device) {
    g_assert_true (dfl_draft_ctx_queue_host (p->ctx, pos, taps, n, &error));
    g_assert_no_error (error);
  } else {
    DflTensor t = dfl_tensor_2d (cuda, NULL, 0, DFL_DTYPE_F32, n, tw);
    float *padded = g_new0 (float, n * ld);
    for (gsize r = 0; r < n; r++)
      memcpy (padded + r * ld, taps + r * tw, tw * sizeof (float));
    dfl_cuda_free (device, p->d_taps);
    p->d_taps = dfl_cuda_alloc (device, MAX (n, 1) * ld * sizeof (float), &error);
    g_assert_no_error (error);
    g_assert_true (dfl_cuda_upload (device, p->d_taps, padded, n * ld * sizeof (float), &error));
    /* rows of `ld` floats: a strided copy */
    t.handle = p->d_taps;
    t.nb[1] = ld * sizeof (float);
    t.nb[2] = t.nb[3] = n * ld * sizeof (float);
    g_assert_true (dfl_draft_ctx_queue (p->ctx, pos, &t, &error));
    g_assert_no_error (error);
    g_free (padded);
  }
  {
    gint64 a, b, c, d;
    dfl_draft_ctx_span (p->cpu_ctx, &a, &b);
    dfl_draft_ctx_span (p->ctx, &c, &d);
    g_assert_cmpint (a, ==, c);
    g_assert_cmpint (b, ==, d);
  }
}

/* Every layer's settled keys and values against the CPU's, each KV head's
 * rows of every layer. */
static void
both_context (Pair *p)
{
  g_autoptr (GError) error = NULL;
  const DflDrafterGeometry *g = p->g;
  int hd = g->head_dim, kv = g->kv_heads;

  g_assert_true (dfl_draft_ctx_settle (p->cpu_ctx, &error));
  g_assert_true (dfl_draft_ctx_settle (p->ctx, &error));
  for (int l = 0; l < g->layers; l++)
    for (int h = 0; h < kv; h++) {
      float *k, *v, *ck, *cv;
      gsize rows, crows;
      gint64 from, cfrom;
      g_assert_true (dfl_draft_ctx_read_kv (p->ctx, l, h, &k, &v, &rows, &from, &error));
      g_assert_no_error (error);
      g_assert_true (dfl_draft_ctx_read_kv (p->cpu_ctx, l, h, &ck, &cv, &crows, &cfrom, &error));
      g_assert_cmpuint (crows, ==, rows);
      g_assert_cmpint (cfrom, ==, from);
      if (rows) {
        g_assert_cmpfloat (row_rel_error (k, ck, (int) rows, hd), <=, p->tol);
        g_assert_cmpfloat (row_rel_error (v, cv, (int) rows, hd), <=, p->tol);
      }
      g_free (k);
      g_free (v);
      g_free (ck);
      g_free (cv);
    }
}

static float *
random_taps (const DflDrafterGeometry *g, gsize n, guint64 seed)
{
  gsize tw = (gsize) dfl_drafter_geometry_tap_width (g);
  float *t = g_new (float, n * tw);

  for (gsize i = 0; i < n * tw; i++)
    t[i] = uniform (seed, i);
  return t;
}

static guint32
token (const Pair *p, int i)
{
  return (guint32) (mix ((guint64) i + 99) % (guint64) p->g->vocab);
}

/* The script: pieces, blocks, rewinds, drops, a gap, a reset. */
static void
run_script (Pair *p)
{
  g_autoptr (GError) error = NULL;
  const DflDrafterGeometry *g = p->g;
  gsize tw = (gsize) dfl_drafter_geometry_tap_width (g);
  float *taps = random_taps (g, 1400, 5);

  both_queue (p, 0, taps, 40, FALSE);
  both_queue (p, 40, taps + 40 * tw, 30, TRUE);
  both_context (p);
  both_block (p, 70, token (p, 0));
  /* a rewind, then the rows again (the same ones: an accepted draft) */
  dfl_draft_ctx_truncate (p->cpu_ctx, 66);
  dfl_draft_ctx_truncate (p->ctx, 66);
  both_block (p, 66, token (p, 1));
  both_queue (p, 66, taps + 66 * tw, 9, TRUE);
  both_block (p, 75, token (p, 2));
  /* a block before the context's end (the anchor inside the held rows) */
  both_block (p, 72, token (p, 3));
  /* a long stretch: more than the pending limit at once, windows dropping */
  both_queue (p, 75, taps + 75 * tw, 700, FALSE);
  both_context (p);
  both_block (p, 775, token (p, 4));
  for (int i = 0; i < 6; i++) {
    gint64 end = 775 + 40 * i;
    both_queue (p, end, taps + end * tw, 40, i % 2);
    both_block (p, end + 40, token (p, 5 + i));
    /* reject a few: rewind into the rows just queued */
    dfl_draft_ctx_truncate (p->cpu_ctx, end + 40 - 3);
    dfl_draft_ctx_truncate (p->ctx, end + 40 - 3);
    both_block (p, end + 37, token (p, 20 + i));
    both_queue (p, end + 37, taps + (end + 37) * tw, 3, FALSE);
  }
  both_context (p);
  /* a deep rewind: past the slack of a windowed layer, refused alike */
  {
    g_autoptr (GError) cpu_err = NULL;
    gint64 deep = 200;
    gboolean windowed = FALSE;
    for (int l = 0; l < g->layers; l++)
      windowed |= dfl_drafter_geometry_window_of (g, l) > 0;
    dfl_draft_ctx_truncate (p->cpu_ctx, deep);
    dfl_draft_ctx_truncate (p->ctx, deep);
    g_assert_cmpint (dfl_draft_ctx_check (p->cpu_ctx, deep, &cpu_err), ==,
                     dfl_draft_ctx_check (p->ctx, deep, &error));
    if (windowed) {
      g_assert_nonnull (cpu_err);
      g_assert_nonnull (error);
      /* the same text, the drafter's name aside */
      g_assert_cmpstr (strchr (cpu_err->message, ':'), ==, strchr (error->message, ':'));
      g_clear_error (&error);
      {
        DflTensor t = out_tensor (p, p->d_out);
        g_assert_false (dfl_draft_ctx_block (p->ctx, deep, token (p, 30), p->width, &t, &error));
      }
      g_assert_error (error, DFL_ERROR, DFL_ERROR_LIMIT);
      g_clear_error (&error);
    } else {
      both_block (p, deep, token (p, 30));
    }
  }
  /* a gap: the context starts over */
  both_queue (p, 1300, taps + 1300 * tw, 60, TRUE);
  both_block (p, 1360, token (p, 31));
  /* a reset, and a short prompt from 0 */
  dfl_draft_ctx_reset (p->cpu_ctx);
  dfl_draft_ctx_reset (p->ctx);
  both_queue (p, 0, taps, 5, FALSE);
  both_block (p, 5, token (p, 32));
  both_block (p, 3, token (p, 33));
  g_free (taps);
}

static void
test_random (gconstpointer data)
{
  const char *what = data;
  gboolean stored = g_str_has_prefix (what, "stored/");
  const char *name = strchr (what, '/') + 1;
  Pair p;

  for (guint i = 0; i < G_N_ELEMENTS (shapes); i++) {
    if (strcmp (shapes[i].name, name) != 0)
      continue;
    pair_random (&p, &shapes[i], stored);
    run_script (&p);
    if (p.tol > 1e-3)
      g_assert_cmpint (2 * p.agree_chosen, >=, p.drafts);
    pair_close (&p);
    return;
  }
  g_assert_not_reached ();
}

/* --- the model's pair --- */

static void
test_model (gconstpointer data)
{
  gboolean stored = GPOINTER_TO_INT (data);
  g_autoptr (GError) error = NULL;
  g_autofree char *sidecar = g_build_filename (model_dir, "dflash.safetensors", NULL);
  const DflQwen3Config *c;
  DflForwardOut fo = { 0 };
  DflTargetSeq *seq;
  float *taps;
  int n = 96, *ids;
  gsize tw;
  Pair p;

  if (!g_file_test (sidecar, G_FILE_TEST_EXISTS)) {
    g_test_skip ("no dflash.safetensors in the model folder");
    return;
  }
  memset (&p, 0, sizeof p);
  p.target = dfl_target_load (model_dir, &error);
  g_assert_no_error (error);
  p.cpu = dfl_drafter_weights_open (model_dir, &error);
  g_assert_no_error (error);
  p.g = dfl_drafter_weights_geometry (p.cpu);
  g_assert_true (dfl_draft_trunk_of_target (&p.trunk, p.target, &error));
  p.label = model_dir;
  c = dfl_target_config (p.target);
  p.width = c->vocab;
  /* as stored: BF16 matrices, x rounded to BF16 (see the top) */
  p.tol = stored ? 5e-2 : 1e-3;
  g_assert_true (dfl_cuda_upload_target_trunk (cuda, dfl_target_tensors (p.target),
                                               c->tie_word_embeddings, c->vocab, c->hidden,
                                               stored ? dfl_drafter_weights_stored_dtype (p.cpu)
                                               : DFL_DTYPE_F32,
                                               &p.d_trunk_t, &p.d_trunk, &error));
  g_assert_no_error (error);
  pair_open_gpu (&p, stored ? dfl_drafter_weights_stored_dtype (p.cpu) : DFL_DTYPE_F32);

  /* the prompt's taps from the CPU target */
  tw = (gsize) dfl_drafter_geometry_tap_width (p.g);
  ids = g_new (int, n);
  for (int i = 0; i < n; i++)
    ids[i] = (int) (mix ((guint64) i) % (guint64) c->vocab);
  taps = g_new (float, (gsize) n * tw);
  fo.tap_layers = p.g->taps;
  fo.n_tap_layers = p.g->n_taps;
  fo.taps = taps;
  fo.logits_from = n;
  seq = dfl_target_seq_new (p.target);
  g_assert_true (dfl_target_forward (p.target, seq, ids, n, &fo, &error));
  g_assert_no_error (error);
  dfl_target_seq_free (seq);

  both_queue (&p, 0, taps, 64, FALSE);
  both_context (&p);
  both_block (&p, 64, (guint32) ids[64]);
  dfl_draft_ctx_truncate (p.cpu_ctx, 60);
  dfl_draft_ctx_truncate (p.ctx, 60);
  both_block (&p, 60, (guint32) ids[60]);
  both_queue (&p, 60, taps + 60 * tw, 30, TRUE);
  both_block (&p, 90, (guint32) ids[90]);
  dfl_draft_ctx_truncate (p.cpu_ctx, 80);
  dfl_draft_ctx_truncate (p.ctx, 80);
  both_queue (&p, 80, taps + 80 * tw, 16, FALSE);
  both_context (&p);
  both_block (&p, 96, (guint32) ids[95]);
  if (p.tol > 1e-3)
    g_assert_cmpint (2 * p.agree_chosen, >=, p.drafts);
  g_free (ids);
  g_free (taps);
  pair_close (&p);
}

/* --- bad input --- */

static void
test_bad_input (void)
{
  g_autoptr (GError) error = NULL;
  DflTensor out, narrow;
  Pair p;

  pair_random (&p, &shapes[0], FALSE);
  out = out_tensor (&p, p.d_out);
  /* a block with no context before it */
  g_assert_false (dfl_draft_ctx_block (p.ctx, 10, 1, p.width, &out, &error));
  g_assert_error (error, DFL_ERROR, DFL_ERROR_LIMIT);
  g_assert_nonnull (strstr (error->message, "the context ends before position 0"));
  g_clear_error (&error);
  /* an anchor outside the vocabulary, a width past the head */
  g_assert_false (dfl_draft_ctx_block (p.ctx, 0, (guint32) p.g->vocab, p.width, &out, &error));
  g_assert_error (error, DFL_ERROR, DFL_ERROR_INVALID);
  g_assert_nonnull (strstr (error->message, "anchor token 320"));
  g_clear_error (&error);
  g_assert_false (dfl_draft_ctx_block (p.ctx, 0, 1, p.g->vocab + 1, &out, &error));
  g_assert_error (error, DFL_ERROR, DFL_ERROR_INVALID);
  g_assert_nonnull (strstr (error->message, "width of 321"));
  g_clear_error (&error);
  g_assert_false (dfl_draft_ctx_select (p.ctx, &out, 2, 1, NULL, NULL, &error));
  g_assert_error (error, DFL_ERROR, DFL_ERROR_INVALID);
  g_clear_error (&error);
  /* rows of a stride narrower than a row */
  narrow = dfl_tensor_2d (cuda, p.d_out, 0, DFL_DTYPE_F32, 1,
                          dfl_drafter_geometry_tap_width (p.g));
  narrow.nb[1] = 5 * sizeof (float);
  g_assert_false (dfl_draft_ctx_queue (p.ctx, 0, &narrow, &error));
  g_assert_error (error, DFL_ERROR, DFL_ERROR_INVALID);
  g_clear_error (&error);
  /* a head of the wrong width */
  {
    DflDraftTrunk bad = p.d_trunk_t;
    bad.head.ne[0] = p.g->hidden + 1;
    g_assert_null (dfl_drafter_weights_bind (p.cpu, cuda, &bad, DFL_DTYPE_F32, &error));
    g_assert_error (error, DFL_ERROR, DFL_ERROR_MISMATCH);
    g_clear_error (&error);
  }
  pair_close (&p);
}

/* Blocks of several sequences in one pass on the card
 * (dfl_draft_ctx_block_batch): four contexts of different lengths (one
 * past a window), each sequence's rows and logits against the CPU's block
 * alone within the tolerance, its drafts identical at F32; then the same
 * batch at another order, whose outputs are bitwise the first's (the same
 * rows in one pass give the same products); then their next rows settled
 * in one pass (dfl_draft_ctx_settle_batch) against the CPU's settles. */
static void
test_batch (gconstpointer data)
{
  const Shape *s = &shapes[GPOINTER_TO_INT (data)];
  g_autoptr (GError) error = NULL;
  g_autoptr (DflDraftBatch) batch = NULL;
  enum { N = 4 };
  static const gsize lengths[N] = { 3, 90, 17, 41 };
  DflDraftCtx *gpu[N], *cpu[N], *order[N];
  DflTensor outs[N], outs2[N];
  float *d_out[N], *d_out2[N];
  gint64 pos[N], pos2[N];
  guint32 anchor[N], anchor2[N];
  Pair p;
  int n, hs;
  gsize nf;

  pair_random (&p, &shapes[GPOINTER_TO_INT (data)], FALSE);
  n = p.g->block - 1;
  hs = p.g->hidden;
  nf = dfl_draft_ctx_block_bytes (p.ctx, p.width) / sizeof (float);
  batch = dfl_draft_batch_new (p.gpu_w, N, &error);
  g_assert_no_error (error);
  for (int i = 0; i < N; i++) {
    float *taps = random_taps (p.g, lengths[i], 500 + i);
    gpu[i] = dfl_draft_ctx_new (p.gpu_w, &error);
    g_assert_no_error (error);
    cpu[i] = dfl_draft_ctx_new (p.cpu_w, &error);
    g_assert_no_error (error);
    g_assert_true (dfl_draft_ctx_queue_host (gpu[i], 0, taps, lengths[i], &error));
    g_assert_true (dfl_draft_ctx_queue_host (cpu[i], 0, taps, lengths[i], &error));
    g_assert_no_error (error);
    g_free (taps);
    pos[i] = (gint64) lengths[i];
    anchor[i] = token (&p, i);
    d_out[i] = dfl_cuda_alloc (device, nf * sizeof (float), &error);
    d_out2[i] = dfl_cuda_alloc (device, nf * sizeof (float), &error);
    g_assert_no_error (error);
    outs[i] = out_tensor (&p, d_out[i]);
  }
  g_assert_true (dfl_draft_ctx_block_batch (batch, gpu, N, pos, anchor, p.width, outs, &error));
  g_assert_no_error (error);
  /* the reverse order, into other buffers */
  for (int i = 0; i < N; i++) {
    order[i] = gpu[N - 1 - i];
    pos2[i] = pos[N - 1 - i];
    anchor2[i] = anchor[N - 1 - i];
    outs2[i] = out_tensor (&p, d_out2[N - 1 - i]);
  }
  g_assert_true (dfl_draft_ctx_block_batch (batch, order, N, pos2, anchor2, p.width, outs2,
                                            &error));
  g_assert_no_error (error);
  for (int i = 0; i < N; i++) {
    float *got = g_new (float, nf), *again = g_new (float, nf), *want = g_new (float, nf);
    DflTensor t = dfl_tensor_2d (NULL, want, 0, DFL_DTYPE_F32, n, hs + p.width);
    guint32 *gc = g_new (guint32, n), *cc = g_new (guint32, n);
    double e_rows, e_logits;
    g_assert_true (dfl_cuda_download (device, got, d_out[i], nf * sizeof (float), &error));
    g_assert_true (dfl_cuda_download (device, again, d_out2[i], nf * sizeof (float), &error));
    g_assert_true (dfl_draft_ctx_draft (cpu[i], pos[i], anchor[i], p.width, &t, cc, NULL,
                                        &error));
    g_assert_no_error (error);
    g_assert_cmpmem (again, nf * sizeof (float), got, nf * sizeof (float));
    e_rows = row_rel_error (got, want, n, hs);
    e_logits = row_rel_error (got + (gsize) n * hs, want + (gsize) n * hs, n, p.width);
    g_test_message ("%s, sequence %d (%" G_GSIZE_FORMAT " context rows): rows %.2g, logits "
                    "%.2g (tolerance %.0e)", s->name, i, lengths[i], e_rows, e_logits, p.tol);
    g_assert_cmpfloat (e_rows, <=, p.tol);
    g_assert_cmpfloat (e_logits, <=, p.tol);
    g_assert_true (dfl_draft_ctx_select (gpu[i], &outs[i], p.width, anchor[i], gc, NULL,
                                         &error));
    g_assert_no_error (error);
    g_assert_cmpmem (gc, n * 4, cc, n * 4);
    g_free (got);
    g_free (again);
    g_free (want);
    g_free (gc);
    g_free (cc);
  }
  /* a few more rows each (none for one), settled in one pass on the card
   * and one by one on the CPU: every layer's keys and values alike */
  for (int i = 0; i < N; i++) {
    gsize more = i == 2 ? 0 : 2 + (gsize) i;
    float *taps = random_taps (p.g, MAX (more, 1), 900 + i);
    if (more) {
      g_assert_true (dfl_draft_ctx_queue_host (gpu[i], pos[i], taps, more, &error));
      g_assert_true (dfl_draft_ctx_queue_host (cpu[i], pos[i], taps, more, &error));
      g_assert_no_error (error);
    }
    g_free (taps);
  }
  g_assert_true (dfl_draft_ctx_settle_batch (batch, gpu, N, &error));
  g_assert_no_error (error);
  for (int i = 0; i < N; i++) {
    g_assert_true (dfl_draft_ctx_settle (cpu[i], &error));
    for (int l = 0; l < p.g->layers; l++)
      for (int h = 0; h < p.g->kv_heads; h++) {
        float *k, *v, *ck, *cv;
        gsize rows, crows;
        gint64 from, cfrom;
        g_assert_true (dfl_draft_ctx_read_kv (gpu[i], l, h, &k, &v, &rows, &from, &error));
        g_assert_true (dfl_draft_ctx_read_kv (cpu[i], l, h, &ck, &cv, &crows, &cfrom, &error));
        g_assert_no_error (error);
        g_assert_cmpuint (rows, ==, crows);
        g_assert_cmpint (from, ==, cfrom);
        g_assert_cmpfloat (row_rel_error (k, ck, (int) rows, p.g->head_dim), <=, p.tol);
        g_assert_cmpfloat (row_rel_error (v, cv, (int) rows, p.g->head_dim), <=, p.tol);
        g_free (k);
        g_free (v);
        g_free (ck);
        g_free (cv);
      }
  }
  for (int i = 0; i < N; i++) {
    dfl_cuda_free (device, d_out[i]);
    dfl_cuda_free (device, d_out2[i]);
    dfl_draft_ctx_free (gpu[i]);
    dfl_draft_ctx_free (cpu[i]);
  }
  g_clear_pointer (&batch, dfl_draft_batch_free);
  pair_close (&p);
}

int
main (int argc, char **argv)
{
  g_autoptr (GError) error = NULL;
  int status;

  g_test_init (&argc, &argv, NULL);
  if (argc > 1)
    model_dir = argv[1];
  device = dfl_cuda_device_open (0, &error);
  if (!device) {
    printf ("1..0 # SKIP %s%s\n",
            g_str_has_prefix (error->message, "CUDA is unavailable") ? ""
            : "CUDA is unavailable: ", error->message);
    return 0;
  }
  g_test_message ("device: %s", dfl_cuda_device_describe (device));
  cuda = dfl_device_wrap (DFL_BACKEND_CUDA, device, &error);
  g_assert_no_error (error);
  for (guint i = 0; i < G_N_ELEMENTS (shapes); i++) {
    char *f32 = g_strdup_printf ("f32/%s", shapes[i].name);
    char *stored = g_strdup_printf ("stored/%s", shapes[i].name);
    g_autofree char *p1 = g_strdup_printf ("/cuda-drafter/%s", f32);
    g_autofree char *p2 = g_strdup_printf ("/cuda-drafter/%s", stored);
    g_test_add_data_func_full (p1, f32, test_random, g_free);
    g_test_add_data_func_full (p2, stored, test_random, g_free);
  }
  g_test_add_data_func ("/cuda-drafter/model/f32", GINT_TO_POINTER (FALSE), test_model);
  g_test_add_data_func ("/cuda-drafter/model/stored", GINT_TO_POINTER (TRUE), test_model);
  g_test_add_func ("/cuda-drafter/bad-input", test_bad_input);
  g_test_add_data_func ("/cuda-drafter/batch/main", GINT_TO_POINTER (0), test_batch);
  g_test_add_data_func ("/cuda-drafter/batch/mixed", GINT_TO_POINTER (1), test_batch);
  status = g_test_run ();
  dfl_device_unref (cuda);
  dfl_cuda_device_unref (device);
  return status;
}
