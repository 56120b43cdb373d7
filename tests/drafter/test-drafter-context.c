/* gst-dflash — the drafter's context bookkeeping.
 *
 * A drafter put through random sequences of queue / settle / truncate /
 * reset / gaps / rewinds (within the slack) / window drops must draft every
 * block as a fresh drafter given the same context does; a rewind deeper than
 * the slack must be reported, never drafted short. The test keeps its own
 * model of the context (which tap row each position holds).
 */
#include "arena-cache.h"
#include "drafter.h"
#include "dfl-error.h"

#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

/* The drafter's products are batch-invariant (dfl_matmul_w: a row's
 * numbers do not depend on the batch it comes in), so a context settled in
 * other batches than a fresh drafter's holds the same K/V bit for bit, and
 * its blocks are the fresh drafter's bit for bit. */
#define TOL_KV 0.0
#define TOL 0.0

static int taps_of[] = { 0, 3 };
static int windows_of[] = { 6, 0, 11 };
static int no_rope_of[] = { 2 };

static DflDrafterGeometry
geometry (void)
{
  DflDrafterGeometry g = {
    .hidden = 32, .intermediate = 48, .layers = 3, .heads = 4, .kv_heads = 2, .head_dim = 8,
    .vocab = 50, .block = 5, .mask_token = 49, .conv_group = 4, .conv_kernel = 2,
    .selector_rank = 4, .selector_top = 3, .n_taps = 2, .taps = taps_of, .target_layers = 4,
    .window = 6, .windows = windows_of, .n_no_rope = 1, .no_rope = no_rope_of,
    .rope_theta = 10000.0, .eps = 1e-6,
  };
  return g;
}

static void
fill (const char *name, DflDtype dtype, gsize n, void *data, gboolean writable, gpointer user)
{
  /* user: a salt (0 by default) that makes other weights of the same names */
  GRand *rng = g_rand_new_with_seed (g_str_hash (name) + GPOINTER_TO_UINT (user));
  gboolean is_norm = strstr (name, "norm") != NULL;

  g_assert_true (writable);
  for (gsize i = 0; i < n; i++) {
    float v = (float) g_rand_double_range (rng, -0.3, 0.3);
    if (dtype == DFL_DTYPE_F16)
      ((guint16 *) data)[i] = dfl_f32_to_f16 (v);
    else
      ((float *) data)[i] = is_norm ? 1.0f + v : v;
  }
  g_rand_free (rng);
}

/* The target's embedding and (tied) head: random, made once. */
static float trunk_table[50 * 32];

/* Weights of the test's geometry (made with `salt`) bound on the CPU to a
 * random trunk, the matrices as `as` says (F32: as made), kept in `cache`
 * where it is not NULL. */
static DflDrafterWeights *
bound_new_in (DflDtype as, const char *cache, guint salt)
{
  DflDrafterGeometry g = geometry ();
  GError *error = NULL;
  g_autoptr (DflDrafterWeights) d = dfl_drafter_weights_new_blank (&g, TRUE, TRUE, &error);
  DflDrafterWeights *bound;
  DflDraftTrunk trunk;

  g_assert_no_error (error);
  dfl_drafter_weights_foreach (d, fill, GUINT_TO_POINTER (salt));
  dfl_drafter_weights_set_arena_cache (d, cache);
  if (trunk_table[0] == 0.0f) {
    GRand *rng = g_rand_new_with_seed (5);
    for (guint i = 0; i < G_N_ELEMENTS (trunk_table); i++)
      trunk_table[i] = (float) g_rand_double_range (rng, -1, 1);
    g_rand_free (rng);
  }
  trunk.embed = dfl_tensor_2d (NULL, trunk_table, 0, DFL_DTYPE_F32, g.vocab, g.hidden);
  trunk.head = trunk.embed;
  bound = dfl_drafter_weights_bind (d, NULL, &trunk, as, &error);
  g_assert_no_error (error);
  return bound;
}

static DflDrafterWeights *
bound_new_as (DflDtype as)
{
  return bound_new_in (as, NULL, 0);
}

static DflDrafterWeights *
bound_new (void)
{
  return bound_new_as (DFL_DTYPE_F32);
}

static DflDraftCtx *
drafter_new (void)
{
  g_autoptr (DflDrafterWeights) bound = bound_new ();
  GError *error = NULL;
  DflDraftCtx *ctx = dfl_draft_ctx_new (bound, &error);

  g_assert_no_error (error);
  return ctx;
}

static void
queue (DflDraftCtx *ctx, gint64 pos, const float *taps, gsize n)
{
  GError *error = NULL;

  g_assert_true (dfl_draft_ctx_queue_host (ctx, pos, taps, n, &error));
  g_assert_no_error (error);
}

static void
settle (DflDraftCtx *ctx)
{
  GError *error = NULL;

  g_assert_true (dfl_draft_ctx_settle (ctx, &error));
  g_assert_no_error (error);
}

/* A layer's rows and the first position it holds. */
static gsize
held_rows (DflDraftCtx *ctx, int layer, gint64 *from)
{
  gsize rows;

  g_assert_true (dfl_draft_ctx_read_kv (ctx, layer, 0, NULL, NULL, &rows, from, NULL));
  return rows;
}

/* The test's model of the context: the tap row of each position from first. */
typedef struct {
  gint64 first;
  GArray *rows;       /* floats, tap_width a position */
  int tw;
} Model;

static gint64
model_end (const Model *m)
{
  return m->first + m->rows->len / m->tw;
}

static void
model_queue (Model *m, gint64 pos, const float *taps, gsize n)
{
  if (pos > model_end (m) || pos < m->first) {
    m->first = pos;
    g_array_set_size (m->rows, 0);
  } else {
    g_array_set_size (m->rows, (pos - m->first) * m->tw);
  }
  g_array_append_vals (m->rows, taps, n * m->tw);
}

static void
model_truncate (Model *m, gint64 pos)
{
  gint64 keep = CLAMP (pos - m->first, 0, (gint64) (m->rows->len / m->tw));

  g_array_set_size (m->rows, keep * m->tw);
}

/* The anchor token of a block at `pos`: another row of the embedding at
 * each position. */
static guint32
anchor_token (gint64 pos)
{
  DflDrafterGeometry g = geometry ();

  return (guint32) (pos * 7 % g.vocab);
}

/* A block's rows and logits over the whole head. */
static DflTensor
block_out (float *buf)
{
  DflDrafterGeometry g = geometry ();

  return dfl_tensor_2d (NULL, buf, 0, DFL_DTYPE_F32, g.block - 1, g.hidden + g.vocab);
}

static double
rel_err (const float *a, const float *b, int n)
{
  double top = 0, diff = 0;

  for (int i = 0; i < n; i++) {
    top = MAX (top, fabs (b[i]));
    diff = MAX (diff, fabs ((double) a[i] - b[i]));
  }
  return top > 0 ? diff / top : diff;
}

static double worst_kv;

/* A's block at its context's end against a fresh drafter given the model's
 * context in one go: the rows and the logits. */
static double
compare_fresh (DflDraftCtx *a, const Model *m, gint64 anchor)
{
  DflDrafterGeometry g = geometry ();
  g_autoptr (DflDraftCtx) b = drafter_new ();
  int n = (g.block - 1) * (g.hidden + g.vocab);
  float *ha = g_new (float, n), *hb = g_new (float, n);
  DflTensor ta = block_out (ha), tb = block_out (hb);
  GError *error = NULL;
  double e;

  queue (b, m->first, (const float *) m->rows->data, m->rows->len / m->tw);
  g_assert_true (dfl_draft_ctx_block (a, anchor, anchor_token (anchor), g.vocab, &ta, &error));
  g_assert_no_error (error);
  g_assert_true (dfl_draft_ctx_block (b, anchor, anchor_token (anchor), g.vocab, &tb, &error));
  g_assert_no_error (error);
  e = rel_err (ha, hb, n);
  /* the rows A holds are the fresh drafter's rows of the same positions */
  for (int l = 0; l < g.layers; l++) {
    for (int kh = 0; kh < g.kv_heads; kh++) {
      g_autofree float *ka = NULL, *kb = NULL, *va = NULL, *vb = NULL;
      gsize ra, rb;
      gint64 fa, fb;
      g_assert_true (dfl_draft_ctx_read_kv (a, l, kh, &ka, &va, &ra, &fa, NULL));
      g_assert_true (dfl_draft_ctx_read_kv (b, l, kh, &kb, &vb, &rb, &fb, NULL));
      g_assert_cmpint (fa + (gint64) ra, ==, anchor);
      g_assert_cmpint (fb + (gint64) rb, ==, anchor);
      if (fa + (gint64) ra > MAX (fa, fb)) {
        /* the positions both hold (either may have dropped more) */
        gint64 from = MAX (fa, fb);
        int len = (int) (anchor - from) * g.head_dim;
        double ek = rel_err (ka + (from - fa) * g.head_dim, kb + (from - fb) * g.head_dim, len);
        double ev = rel_err (va + (from - fa) * g.head_dim, vb + (from - fb) * g.head_dim, len);
        worst_kv = MAX (worst_kv, MAX (ek, ev));
      }
    }
  }
  g_free (ha);
  g_free (hb);
  return e;
}

static float *
random_taps (GRand *rng, gsize n, int tw)
{
  float *t = g_new (float, n * tw);

  for (gsize i = 0; i < n * tw; i++)
    t[i] = (float) g_rand_double_range (rng, -2, 2);
  return t;
}

/* Random bookkeeping, every rewind within the slack of the furthest the
 * context reached since it (re)started: every block is complete and exact. */
static void
test_random_sequences (void)
{
  DflDrafterGeometry g = geometry ();
  int tw = dfl_drafter_geometry_tap_width (&g);
  g_autoptr (DflDraftCtx) a = drafter_new ();
  Model m = { 0, g_array_new (FALSE, FALSE, sizeof (float)), tw };
  GRand *rng = g_rand_new_with_seed (7);
  gint64 high = 0;
  double worst = 0;
  int blocks = 0, drops_seen = 0;

  for (int step = 0; step < 600; step++) {
    int kind = g_rand_int_range (rng, 0, 100);
    gint64 end = model_end (&m), pos;
    gsize n;
    float *t;

    if (kind < 45) {                 /* rows at the end: a round's accepted rows, or a prompt */
      n = g_rand_int_range (rng, 0, 5) == 0 ? g_rand_int_range (rng, 100, 700) : g_rand_int_range (rng, 1, 17);
      pos = end;
    } else if (kind < 65) {          /* a rewind within the slack, then new rows */
      pos = MAX (m.first, MAX (high - DFL_DRAFTER_BLOCK_SLACK, 0) + g_rand_int_range (rng, 0, 50));
      pos = MIN (pos, end);
      n = g_rand_int_range (rng, 1, 20);
    } else if (kind < 75) {          /* a truncate within the slack */
      pos = MAX (m.first, MAX (high - DFL_DRAFTER_BLOCK_SLACK, 0) + g_rand_int_range (rng, 0, 100));
      dfl_draft_ctx_truncate (a, pos);
      model_truncate (&m, pos);
      continue;
    } else if (kind < 80) {
      settle (a);
      continue;
    } else if (kind < 81) {          /* reset */
      dfl_draft_ctx_reset (a);
      m.first = 0;
      g_array_set_size (m.rows, 0);
      high = 0;
      continue;
    } else if (kind < 84) {          /* a gap: the context starts over */
      pos = end + g_rand_int_range (rng, 1, 30);
      n = g_rand_int_range (rng, 1, 40);
      high = pos;
    } else if (kind < 85 && m.first > 0) {   /* a jump back before the context */
      pos = g_rand_int_range (rng, 0, (gint32) m.first);
      n = g_rand_int_range (rng, 1, 40);
      high = pos;
    } else {                         /* a block at the end */
      gint64 first, aend;
      GError *error = NULL;
      dfl_draft_ctx_span (a, &first, &aend);
      g_assert_cmpint (first, ==, m.first);
      g_assert_cmpint (aend, ==, end);
      if (!dfl_draft_ctx_check (a, end, &error))
        g_error ("step %d: a rewind within the slack was reported short: %s", step, error->message);
      worst = MAX (worst, compare_fresh (a, &m, end));
      blocks++;
      for (int l = 0; l < g.layers; l++) {
        gint64 from;
        held_rows (a, l, &from);
        drops_seen += from > m.first;
      }
      continue;
    }
    t = random_taps (rng, n, tw);
    queue (a, pos, t, n);
    model_queue (&m, pos, t, n);
    g_free (t);
    high = MAX (high, model_end (&m));
    g_assert_cmpint (dfl_draft_ctx_next_position (a), ==, model_end (&m));
  }
  g_test_message ("%d blocks compared, worst relative difference: blocks %.2e, K/V %.2e;"
                  " %d layer-blocks after drops", blocks, worst, worst_kv, drops_seen);
  g_assert_cmpint (blocks, >, 30);
  g_assert_cmpint (drops_seen, >, 0);
  g_assert_cmpfloat (worst, <=, TOL);
  g_assert_cmpfloat (worst_kv, <=, TOL_KV);
  g_array_unref (m.rows);
  g_rand_free (rng);
}

/* Past the pending limit the oldest rows settle, a multiple of 64 of them. */
static void
test_pending (void)
{
  DflDrafterGeometry g = geometry ();
  int tw = dfl_drafter_geometry_tap_width (&g);
  g_autoptr (DflDraftCtx) a = drafter_new ();
  GRand *rng = g_rand_new_with_seed (3);
  float *t = random_taps (rng, 600, tw);
  gsize rows;

  queue (a, 0, t, 300);
  rows = held_rows (a, 1, NULL);
  g_assert_cmpuint (rows, ==, 0);
  queue (a, 300, t + 300 * tw, 300);
  /* 600 wait: 88 over the limit, rounded up to 128 */
  rows = held_rows (a, 1, NULL);
  g_assert_cmpuint (rows, ==, 128);
  g_assert_cmpint (dfl_draft_ctx_next_position (a), ==, 600);
  /* a rewind into the waiting rows drops only them */
  dfl_draft_ctx_truncate (a, 500);
  g_assert_cmpint (dfl_draft_ctx_next_position (a), ==, 500);
  settle (a);
  rows = held_rows (a, 1, NULL);
  g_assert_cmpuint (rows, ==, 500);
  g_free (t);
  g_rand_free (rng);
}

static void
expect_short (DflDraftCtx *a, gint64 anchor, const char *what)
{
  DflDrafterGeometry g = geometry ();
  float *h = g_new (float, (g.block - 1) * (g.hidden + g.vocab));
  DflTensor t = block_out (h);
  GError *error = NULL;

  g_assert_false (dfl_draft_ctx_check (a, anchor, &error));
  g_assert_error (error, DFL_ERROR, DFL_ERROR_LIMIT);
  if (!strstr (error->message, what))
    g_error ("\"%s\" does not say \"%s\"", error->message, what);
  g_clear_error (&error);
  g_assert_false (dfl_draft_ctx_block (a, anchor, anchor_token (anchor), g.vocab, &t, &error));
  g_assert_error (error, DFL_ERROR, DFL_ERROR_LIMIT);
  g_clear_error (&error);
  g_free (h);
}

/* A rewind deeper than the slack is reported, never drafted short; so are a
 * block past the context's end and one before its start. */
static void
test_deep_rewind (void)
{
  DflDrafterGeometry g = geometry ();
  int tw = dfl_drafter_geometry_tap_width (&g);
  g_autoptr (DflDraftCtx) a = drafter_new ();
  GRand *rng = g_rand_new_with_seed (11);
  float *t = random_taps (rng, 1400, tw);
  Model m = { 0, g_array_new (FALSE, FALSE, sizeof (float)), tw };
  gint64 from;

  queue (a, 0, t, 1200);
  settle (a);
  model_queue (&m, 0, t, 1200);
  /* layer 0 (window 6) dropped all but 6 + 256 rows */
  held_rows (a, 0, &from);
  g_assert_cmpint (from, ==, 1200 - 6 - DFL_DRAFTER_BLOCK_SLACK);
  held_rows (a, 1, &from);
  g_assert_cmpint (from, ==, 0);
  /* inside the slack: exact */
  dfl_draft_ctx_truncate (a, 1200 - DFL_DRAFTER_BLOCK_SLACK);
  model_truncate (&m, 1200 - DFL_DRAFTER_BLOCK_SLACK);
  g_assert_cmpfloat (compare_fresh (a, &m, 1200 - DFL_DRAFTER_BLOCK_SLACK), <=, TOL);
  /* deeper: short, whether or not rows follow */
  dfl_draft_ctx_truncate (a, 700);
  expect_short (a, 700, "the context is short: layer 0 (window 6)");
  queue (a, 700, t + 1200 * tw, 3);
  expect_short (a, 703, "reads it from 698");
  /* new rows that fill the windows again make it whole: windowed layers
   * read only their last rows, the full-attention layer kept everything */
  queue (a, 703, t + 1203 * tw, 20);
  model_truncate (&m, 700);
  model_queue (&m, 700, t + 1200 * tw, 23);
  g_assert_cmpfloat (compare_fresh (a, &m, 723), <=, TOL);
  /* restarted from the start, as the message says, it drafts again */
  dfl_draft_ctx_truncate (a, 703);
  model_truncate (&m, 703);
  dfl_draft_ctx_reset (a);
  queue (a, 0, (const float *) m.rows->data, 703);
  g_assert_cmpfloat (compare_fresh (a, &m, 703), <=, TOL);
  /* past the end, before the start */
  expect_short (a, 708, "needs the target's rows of 703 to 707");
  queue (a, 900, t, 10);
  g_assert_cmpint (dfl_draft_ctx_next_position (a), ==, 910);
  expect_short (a, 899, "is before the context, which starts at 900");
  g_array_unref (m.rows);
  g_free (t);
  g_rand_free (rng);
}

/* Blocks of several sequences in one pass (dfl_draft_ctx_block_batch):
 * contexts of different lengths (one past a window's drops, one with rows
 * still waiting) drafted together give each one's block alone, bit for
 * bit, in any order and at any head width; refusals name the sequence and
 * leave the outputs untouched. */
static void
test_batch (void)
{
  DflDrafterGeometry g = geometry ();
  g_autoptr (DflDrafterWeights) bound = bound_new ();
  g_autoptr (DflDrafterWeights) other = bound_new ();
  g_autoptr (DflDraftBatch) batch = NULL;
  g_autoptr (DflDraftCtx) stranger = NULL;
  enum { N = 5 };
  static const gsize lengths[N] = { 1, 40, 300, 9, 17 };
  DflDraftCtx *ctx[N];
  int tw = dfl_drafter_geometry_tap_width (&g), per = (g.block - 1) * (g.hidden + g.vocab);
  float *out = g_new0 (float, (gsize) N * per), *alone = g_new (float, per);
  /* each context reads its rows from 7 · s on: room for the longest */
  float *taps = g_new (float, (300 + 7 * N) * (gsize) tw);
  DflTensor outs[N], one = block_out (alone);
  gint64 pos[N];
  guint32 tok[N];
  GRand *rng = g_rand_new_with_seed (17);
  GError *error = NULL;

  for (gsize i = 0; i < (300 + 7 * N) * (gsize) tw; i++)
    taps[i] = (float) g_rand_double_range (rng, -1, 1);
  batch = dfl_draft_batch_new (bound, 4, &error);
  g_assert_no_error (error);
  g_assert_cmpint (dfl_draft_batch_capacity (batch), ==, 4);
  g_clear_pointer (&batch, dfl_draft_batch_free);
  batch = dfl_draft_batch_new (bound, N, &error);
  g_assert_no_error (error);
  for (int s = 0; s < N; s++) {
    gsize head;
    ctx[s] = dfl_draft_ctx_new (bound, &error);
    g_assert_no_error (error);
    /* each its own rows (an offset into the random taps), the last few
     * of two of them left waiting */
    head = lengths[s] > 3 ? lengths[s] - 3 : lengths[s];
    queue (ctx[s], 0, taps + (gsize) s * 7 * tw, head);
    if (s % 2 == 0)
      settle (ctx[s]);
    if (head < lengths[s])
      queue (ctx[s], (gint64) head, taps + ((gsize) s * 7 + head) * tw, lengths[s] - head);
    pos[s] = (gint64) lengths[s];
    tok[s] = anchor_token (pos[s] + s);
    outs[s] = dfl_tensor_2d (NULL, out + (gsize) s * per, 0, DFL_DTYPE_F32, g.block - 1,
                             g.hidden + g.vocab);
  }

  for (int pass = 0; pass < 3; pass++) {
    /* all five; then three in another order; then two at the narrowest width */
    int order[3][N] = { { 0, 1, 2, 3, 4 }, { 4, 2, 0 }, { 3, 1 } }, n = pass == 0 ? N : 3 - pass + 1;
    int width = pass == 2 ? g.selector_top : g.vocab;
    DflDraftCtx *cs[N];
    gint64 ps[N];
    guint32 ts[N];
    DflTensor os[N];
    for (int i = 0; i < n; i++) {
      int s = order[pass][i];
      cs[i] = ctx[s];
      ps[i] = pos[s];
      ts[i] = tok[s];
      os[i] = dfl_tensor_2d (NULL, out + (gsize) i * per, 0, DFL_DTYPE_F32, 1,
                             (gint64) (g.block - 1) * (g.hidden + width));
    }
    dfl_draft_ctx_block_batch (batch, cs, n, ps, ts, width, os, &error);
    g_assert_no_error (error);
    /* the selections of all the blocks at once, against each alone */
    {
      guint32 chosen[N * 16], plain[N * 16], c1[16], p1[16];
      g_assert_cmpint (g.block - 1, <=, 16);
      g_assert_true (dfl_draft_ctx_select_batch (batch, cs, n, os, width, ts, chosen, plain,
                                                 &error));
      g_assert_no_error (error);
      for (int i = 0; i < n; i++) {
        g_assert_true (dfl_draft_ctx_select (cs[i], &os[i], width, ts[i], c1, p1, &error));
        g_assert_no_error (error);
        g_assert_cmpmem (chosen + i * (g.block - 1), (g.block - 1) * 4, c1, (g.block - 1) * 4);
        g_assert_cmpmem (plain + i * (g.block - 1), (g.block - 1) * 4, p1, (g.block - 1) * 4);
      }
    }
    for (int i = 0; i < n; i++) {
      DflTensor o1 = dfl_tensor_2d (NULL, alone, 0, DFL_DTYPE_F32, 1,
                                    (gint64) (g.block - 1) * (g.hidden + width));
      g_assert_true (dfl_draft_ctx_block (cs[i], ps[i], ts[i], width, &o1, &error));
      g_assert_no_error (error);
      g_assert_cmpmem (out + (gsize) i * per,
                       (gsize) (g.block - 1) * (g.hidden + width) * sizeof (float), alone,
                       (gsize) (g.block - 1) * (g.hidden + width) * sizeof (float));
    }
  }

  /* refusals: the outputs stay as they were */
  memset (out, 0x5a, (gsize) N * per * sizeof (float));
  {
    DflDraftCtx *twice[2] = { ctx[0], ctx[0] };
    gint64 ps[2] = { pos[0], pos[0] };
    guint32 ts[2] = { tok[0], tok[0] };
    g_assert_false (dfl_draft_ctx_block_batch (batch, twice, 2, ps, ts, g.vocab, outs, &error));
    g_assert_error (error, DFL_ERROR, DFL_ERROR_INVALID);
    g_assert_nonnull (strstr (error->message, "sequences 0 and 1 of the batch are the same"));
    g_clear_error (&error);
  }
  stranger = dfl_draft_ctx_new (other, &error);
  g_assert_no_error (error);
  {
    DflDraftCtx *mixed[2] = { ctx[1], stranger };
    g_assert_false (dfl_draft_ctx_block_batch (batch, mixed, 2, pos, tok, g.vocab, outs, &error));
    g_assert_error (error, DFL_ERROR, DFL_ERROR_INVALID);
    g_assert_nonnull (strstr (error->message, "sequence 1 of the batch is not a context"));
    g_clear_error (&error);
  }
  {
    gint64 ps[N] = { pos[0], pos[1] + 4, pos[2], pos[3], pos[4] };
    g_assert_false (dfl_draft_ctx_block_batch (batch, ctx, N, ps, tok, g.vocab, outs, &error));
    g_assert_error (error, DFL_ERROR, DFL_ERROR_LIMIT);
    g_assert_nonnull (strstr (error->message, "sequence 1 of the batch: "));
    g_clear_error (&error);
  }
  g_assert_false (dfl_draft_ctx_block_batch (batch, ctx, 0, pos, tok, g.vocab, outs, &error));
  g_assert_error (error, DFL_ERROR, DFL_ERROR_INVALID);
  g_clear_error (&error);
  for (gsize i = 0; i < (gsize) N * per * sizeof (float); i++)
    g_assert_cmpint (((guint8 *) out)[i], ==, 0x5a);
  g_assert_null (dfl_draft_batch_new (bound, DFL_OP_TABLE_MAX + 1, &error));
  g_assert_error (error, DFL_ERROR, DFL_ERROR_INVALID);
  g_clear_error (&error);

  (void) one;
  for (int s = 0; s < N; s++)
    dfl_draft_ctx_free (ctx[s]);
  g_free (out);
  g_free (alone);
  g_free (taps);
  g_rand_free (rng);
}

/* The waiting rows of several contexts settled in one pass
 * (dfl_draft_ctx_settle_batch) against each settled alone: twenty rounds of
 * a few rows each (some contexts with none waiting, one past a window's
 * drops, rewinds within the slack), every layer's keys and values and a
 * block bitwise the same; past a pass's rows (a prompt) each settles
 * alone, the same again. */
static void
test_settle_batch (void)
{
  DflDrafterGeometry g = geometry ();
  g_autoptr (DflDrafterWeights) bound = bound_new ();
  g_autoptr (DflDraftBatch) batch = NULL;
  enum { N = 4 };
  DflDraftCtx *a[N], *b[N];
  int tw = dfl_drafter_geometry_tap_width (&g), per = (g.block - 1) * (g.hidden + g.vocab);
  float *taps = g_new (float, 2000 * (gsize) tw), *oa = g_new (float, per), *ob = g_new (float, per);
  DflTensor ta = block_out (oa), tb = block_out (ob);
  GRand *rng = g_rand_new_with_seed (23);
  GError *error = NULL;

  for (gsize i = 0; i < 2000 * (gsize) tw; i++)
    taps[i] = (float) g_rand_double_range (rng, -1, 1);
  batch = dfl_draft_batch_new (bound, N, &error);
  g_assert_no_error (error);
  for (int s = 0; s < N; s++) {
    a[s] = dfl_draft_ctx_new (bound, &error);
    b[s] = dfl_draft_ctx_new (bound, &error);
    g_assert_no_error (error);
    /* a prompt each (context 3's long enough that layer 0 drops rows),
     * settled in the batch call: more than a pass takes, so alone */
    queue (a[s], 0, taps + (gsize) s * tw, s == 3 ? 600 : 5 + 3 * (gsize) s);
    queue (b[s], 0, taps + (gsize) s * tw, s == 3 ? 600 : 5 + 3 * (gsize) s);
  }
  g_assert_true (dfl_draft_ctx_settle_batch (batch, a, N, &error));
  g_assert_no_error (error);
  for (int s = 0; s < N; s++)
    settle (b[s]);
  for (int round = 0; round < 20; round++) {
    for (int s = 0; s < N; s++) {
      gint64 end = dfl_draft_ctx_next_position (a[s]);
      int k = g_rand_int_range (rng, 0, 7);
      /* now and then a rewind of two (a rejected draft), now and then
       * nothing waiting */
      if (round % 5 == 4 && s != 1)
        end -= 2;
      if (k == 0 && s != 2)
        continue;
      k = MAX (k, 1);
      queue (a[s], end, taps + (gsize) (end + 7 * s) * tw, k);
      queue (b[s], end, taps + (gsize) (end + 7 * s) * tw, k);
    }
    g_assert_true (dfl_draft_ctx_settle_batch (batch, a, N, &error));
    g_assert_no_error (error);
    for (int s = 0; s < N; s++) {
      gint64 pos = dfl_draft_ctx_next_position (a[s]);
      settle (b[s]);
      g_assert_cmpint (pos, ==, dfl_draft_ctx_next_position (b[s]));
      for (int l = 0; l < g.layers; l++)
        for (int h = 0; h < g.kv_heads; h++) {
          float *ka, *va, *kb, *vb;
          gsize ra, rb;
          gint64 fa, fb;
          g_assert_true (dfl_draft_ctx_read_kv (a[s], l, h, &ka, &va, &ra, &fa, &error));
          g_assert_true (dfl_draft_ctx_read_kv (b[s], l, h, &kb, &vb, &rb, &fb, &error));
          g_assert_no_error (error);
          g_assert_cmpuint (ra, ==, rb);
          g_assert_cmpint (fa, ==, fb);
          g_assert_cmpmem (ka, ra * g.head_dim * sizeof (float), kb, rb * g.head_dim * sizeof (float));
          g_assert_cmpmem (va, ra * g.head_dim * sizeof (float), vb, rb * g.head_dim * sizeof (float));
          g_free (ka);
          g_free (va);
          g_free (kb);
          g_free (vb);
        }
      g_assert_true (dfl_draft_ctx_block (a[s], pos, anchor_token (pos), g.vocab, &ta, &error));
      g_assert_true (dfl_draft_ctx_block (b[s], pos, anchor_token (pos), g.vocab, &tb, &error));
      g_assert_no_error (error);
      g_assert_cmpmem (oa, per * sizeof (float), ob, per * sizeof (float));
    }
  }
  for (int s = 0; s < N; s++) {
    dfl_draft_ctx_free (a[s]);
    dfl_draft_ctx_free (b[s]);
  }
  g_free (taps);
  g_free (oa);
  g_free (ob);
  g_rand_free (rng);
}

/* RMS of a − b over RMS of b. */
static double
rms_rel_err (const float *a, const float *b, int n)
{
  double d2 = 0, b2 = 0;

  for (int i = 0; i < n; i++) {
    d2 += ((double) a[i] - b[i]) * ((double) a[i] - b[i]);
    b2 += (double) b[i] * b[i];
  }
  return b2 > 0 ? sqrt (d2 / b2) : sqrt (d2);
}

/* The matrices (and the trunk's head) quantized to Q8_0 when bound on the
 * CPU: a block near the float one's, and a context that settled in other
 * batches drafting the same bits (the quantized products are
 * batch-invariant as the float ones are). How near: this small random
 * drafter amplifies rounding (uniform weights, no training to condition
 * it): its matrices' weights rounded to Q8_0 alone, the products still in
 * F32, move the block by 3.1e-2 RMS; the Q8_0 products (int8 inputs too)
 * by 5.4e-2, where the head alone moves it by 7.5e-3. */
static void
test_q8_0 (void)
{
  DflDrafterGeometry g = geometry ();
  g_autoptr (DflDrafterWeights) exact = bound_new_as (DFL_DTYPE_F32);
  g_autoptr (DflDrafterWeights) q8 = bound_new_as (DFL_DTYPE_Q8_0);
  g_autoptr (DflDraftCtx) a = NULL, b = NULL, c = NULL;
  int tw = g.n_taps * g.hidden, n = (g.block - 1) * (g.hidden + g.vocab);
  GRand *rng = g_rand_new_with_seed (11);
  g_autofree float *taps = random_taps (rng, 24, tw);
  g_autofree float *ha = g_new (float, n), *hb = g_new (float, n), *hc = g_new (float, n);
  DflTensor ta = block_out (ha), tb = block_out (hb), tc = block_out (hc);
  GError *error = NULL;
  double e;

  g_rand_free (rng);
  a = dfl_draft_ctx_new (exact, &error);
  g_assert_no_error (error);
  b = dfl_draft_ctx_new (q8, &error);
  g_assert_no_error (error);
  c = dfl_draft_ctx_new (q8, &error);
  g_assert_no_error (error);
  queue (a, 0, taps, 24);
  queue (b, 0, taps, 24);
  /* c settles the same rows in three batches */
  queue (c, 0, taps, 5);
  settle (c);
  queue (c, 5, taps + 5 * tw, 12);
  settle (c);
  queue (c, 17, taps + 17 * tw, 7);
  g_assert_true (dfl_draft_ctx_block (a, 24, anchor_token (24), g.vocab, &ta, &error));
  g_assert_no_error (error);
  g_assert_true (dfl_draft_ctx_block (b, 24, anchor_token (24), g.vocab, &tb, &error));
  g_assert_no_error (error);
  g_assert_true (dfl_draft_ctx_block (c, 24, anchor_token (24), g.vocab, &tc, &error));
  g_assert_no_error (error);
  e = rms_rel_err (hb, ha, n);
  g_test_message ("Q8_0 matrices: the block's rows and logits %.2e (RMS) from the F32 ones", e);
  g_assert_cmpfloat (e, >, 0.0);
  g_assert_cmpfloat (e, <, 8e-2);
  g_assert_cmpmem (hb, n * sizeof (float), hc, n * sizeof (float));
}

/* A block of `w` over the same 24 random context rows each time, its rows
 * and logits into `out`. */
static void
block_of (DflDrafterWeights *w, float *out)
{
  DflDrafterGeometry g = geometry ();
  GError *error = NULL;
  g_autoptr (DflDraftCtx) ctx = dfl_draft_ctx_new (w, &error);
  int tw = g.n_taps * g.hidden;
  GRand *rng = g_rand_new_with_seed (12);
  g_autofree float *taps = random_taps (rng, 24, tw);
  DflTensor t = block_out (out);

  g_rand_free (rng);
  g_assert_no_error (error);
  queue (ctx, 0, taps, 24);
  g_assert_true (dfl_draft_ctx_block (ctx, 24, anchor_token (24), g.vocab, &t, &error));
  g_assert_no_error (error);
}

/* The cache's files: how many, and the one path where there is one. */
static guint
arenas_in (const char *dir, char **one)
{
  g_autoptr (GDir) d = g_dir_open (dir, 0, NULL);
  const char *name;
  guint n = 0;

  if (one)
    g_clear_pointer (one, g_free);
  while (d && (name = g_dir_read_name (d))) {
    g_assert_true (g_str_has_suffix (name, ".arena"));
    if (one && !*one)
      *one = g_build_filename (dir, name, NULL);
    n++;
  }
  return n;
}

/* A Q8_0 binding kept in a cache folder: the next binding of the same
 * weights maps the file (a file changed under it changes its blocks:
 * proof that it was read, not remade), drafts the bits of a binding made
 * afresh, and a file of the wrong size is made again; other weights get a
 * file of their own, the folder keeps the last DFL_ARENA_CACHE_KEPT; a
 * folder that cannot be made leaves the binding as it is without one. */
static void
test_q8_0_cache (void)
{
  DflDrafterGeometry g = geometry ();
  int n = (g.block - 1) * (g.hidden + g.vocab);
  g_autofree float *fresh = g_new (float, n), *got = g_new (float, n);
  g_autofree char *dir = g_dir_make_tmp ("dfl-arena-XXXXXX", NULL);
  g_autofree char *cache = g_build_filename (dir, "drafter", NULL);
  g_autofree char *not_a_folder = g_build_filename (dir, "file", NULL);
  g_autofree char *file = NULL, *bytes = NULL;
  gsize len;
  DflDrafterWeights *w;

  g_assert_nonnull (dir);
  w = bound_new_as (DFL_DTYPE_Q8_0);
  block_of (w, fresh);
  dfl_drafter_weights_unref (w);

  /* made, then kept */
  w = bound_new_in (DFL_DTYPE_Q8_0, cache, 0);
  block_of (w, got);
  dfl_drafter_weights_unref (w);
  g_assert_cmpmem (got, n * sizeof (float), fresh, n * sizeof (float));
  g_assert_cmpuint (arenas_in (cache, &file), ==, 1);
  /* mapped: the same bits */
  w = bound_new_in (DFL_DTYPE_Q8_0, cache, 0);
  block_of (w, got);
  dfl_drafter_weights_unref (w);
  g_assert_cmpmem (got, n * sizeof (float), fresh, n * sizeof (float));
  g_assert_cmpuint (arenas_in (cache, NULL), ==, 1);

  /* the file is what the binding reads: its quantized values zeroed
   * (after the page of its header), another block */
  g_assert_true (g_file_get_contents (file, &bytes, &len, NULL));
  memset (bytes + 4096, 0, len - 4096);
  g_assert_true (g_file_set_contents (file, bytes, len, NULL));
  w = bound_new_in (DFL_DTYPE_Q8_0, cache, 0);
  block_of (w, got);
  dfl_drafter_weights_unref (w);
  g_assert_true (memcmp (got, fresh, n * sizeof (float)) != 0);
  /* a file cut short is no arena: made again */
  g_assert_true (g_file_set_contents (file, bytes, len - 64, NULL));
  w = bound_new_in (DFL_DTYPE_Q8_0, cache, 0);
  block_of (w, got);
  dfl_drafter_weights_unref (w);
  g_assert_cmpmem (got, n * sizeof (float), fresh, n * sizeof (float));
  g_clear_pointer (&bytes, g_free);
  g_assert_true (g_file_get_contents (file, &bytes, &len, NULL));
  g_assert_cmpuint (len, >, 4096);

  /* other weights, their own file; the folder keeps the last few */
  for (guint salt = 1; salt <= DFL_ARENA_CACHE_KEPT + 1; salt++) {
    g_autofree float *own = g_new (float, n);
    w = bound_new_in (DFL_DTYPE_Q8_0, NULL, salt);
    block_of (w, own);
    dfl_drafter_weights_unref (w);
    w = bound_new_in (DFL_DTYPE_Q8_0, cache, salt);
    block_of (w, got);
    dfl_drafter_weights_unref (w);
    g_assert_cmpmem (got, n * sizeof (float), own, n * sizeof (float));
    g_assert_cmpuint (arenas_in (cache, NULL), ==, MIN (salt + 1, DFL_ARENA_CACHE_KEPT));
  }

  /* nowhere to keep it: bound as without a cache */
  g_assert_true (g_file_set_contents (not_a_folder, "", 0, NULL));
  w = bound_new_in (DFL_DTYPE_Q8_0, not_a_folder, 0);
  block_of (w, got);
  dfl_drafter_weights_unref (w);
  g_assert_cmpmem (got, n * sizeof (float), fresh, n * sizeof (float));

  /* the folders and all in them */
  while (arenas_in (cache, &file) > 0)
    g_assert_cmpint (g_unlink (file), ==, 0);
  g_assert_cmpint (g_rmdir (cache), ==, 0);
  g_assert_cmpint (g_unlink (not_a_folder), ==, 0);
  g_assert_cmpint (g_rmdir (dir), ==, 0);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/drafter/context/random-sequences", test_random_sequences);
  g_test_add_func ("/drafter/context/pending", test_pending);
  g_test_add_func ("/drafter/context/deep-rewind", test_deep_rewind);
  g_test_add_func ("/drafter/context/batch", test_batch);
  g_test_add_func ("/drafter/context/settle-batch", test_settle_batch);
  g_test_add_func ("/drafter/context/q8_0", test_q8_0);
  g_test_add_func ("/drafter/context/q8_0-cache", test_q8_0_cache);
  return g_test_run ();
}
