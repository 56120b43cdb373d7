/* gst-dflash — the CUDA target against the CPU target.
 *
 * On each fixture of tests/fixtures/qwen3 (random Qwen3 checkpoints):
 *   - weights widened to F32 on the card: taps and logits within 1e-3 of the
 *     CPU's (relative to each row's largest magnitude) and the same argmax;
 *   - weights as stored: F16/BF16 matrices multiply on the tensor cores with
 *     x rounded to the weights' type, which the CPU never does (it widens the
 *     weights and keeps x in F32), and the KV cache is BF16 (the CPU's is
 *     F32), so the tolerance is that rounding's:
 *     BF16 keeps 8 bits (2⁻⁹ ≈ 2e-3 a product, a few layers deep → 3e-2),
 *     F16 11 bits (→ 5e-3); and a 32-token greedy generation gives the
 *     CPU's tokens;
 *   - a truncated cache re-forwarded, a chunked prefill, logits kept on the
 *     card: what a fresh single pass gives;
 *   - steps replayed from captured graphs: bitwise the steps launched
 *     directly;
 *   - a batched forward of sequences of different lengths, joining and
 *     leaving, one rewound: each sequence's solo steps within 1e-4 (cuBLAS
 *     is not row-invariant), each argmax exactly its own logits row's;
 *   - a bad id, a pass past max_position_embeddings, a bad tap layer, taps
 *     asked for off the card: an error and the cache as it was.
 * Where no CUDA device is present the whole file is skipped (TAP plan 1..0).
 */
#include <glib.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dfl-cuda.h"
#include "dfl-error.h"
#include "safetensors.h"
#include "target.h"

#ifndef DFL_FIXTURES_SOURCE_DIR
#define DFL_FIXTURES_SOURCE_DIR "tests/fixtures"
#endif

static const char *variants[] = { "f32-untied", "bf16-tied", "gqa-hd32-sharded", "f16-tied" };
static DflDevice *dev;          /* the card, as the target sees it */
static DflCudaDevice *device;   /* the same, for the tests' own copies */

/* DFL_FIXTURES, else the source tree this was built from, else tests/fixtures
 * of the current folder (a copy of the tree run from its root). */
static char *
fixture (const char *variant)
{
  const char *root = g_getenv ("DFL_FIXTURES");

  if (!root)
    root = g_file_test (DFL_FIXTURES_SOURCE_DIR, G_FILE_TEST_IS_DIR) ? DFL_FIXTURES_SOURCE_DIR
        : "tests/fixtures";
  return g_build_filename (root, "qwen3", variant, NULL);
}

/* The largest of each row's |a − b| / max |b| over `rows` rows of `width`;
 * infinite where `a` holds a NaN or an infinity. */
static double
row_rel_error (const float *a, const float *b, int rows, gsize width)
{
  double worst = 0;

  for (int r = 0; r < rows; r++) {
    const float *ar = a + r * width, *br = b + r * width;
    double diff = 0, scale = 0;
    for (gsize i = 0; i < width; i++) {
      if (!isfinite (ar[i]))
        return INFINITY;
      diff = MAX (diff, fabs ((double) ar[i] - br[i]));
      scale = MAX (scale, fabs ((double) br[i]));
    }
    worst = MAX (worst, diff / MAX (scale, 1e-30));
  }
  return worst;
}

static int
argmax_of (const float *row, int n)
{
  int best = 0;

  for (int i = 1; i < n; i++)
    if (row[i] > row[best])
      best = i;
  return best;
}

typedef struct {
  DflTarget *cpu;
  int n;
  int *ids;
  int hidden, vocab, layers;
} Fixture;

static void
fixture_open (Fixture *f, const char *variant)
{
  g_autofree char *dir = fixture (variant);
  g_autofree char *exp = g_build_filename (dir, "expected.safetensors", NULL);
  g_autoptr (DflSafetensors) expected = NULL;
  g_autoptr (GError) error = NULL;
  const DflStoredTensor *ids;
  const DflQwen3Config *c;

  f->cpu = dfl_target_load (dir, &error);
  g_assert_no_error (error);
  expected = dfl_safetensors_open (exp, &error);
  g_assert_no_error (error);
  ids = dfl_safetensors_find (expected, "ids");
  g_assert_nonnull (ids);
  g_assert_cmpint (ids->dtype, ==, DFL_DTYPE_I32);
  f->n = ids->n_elements;
  f->ids = g_new (int, f->n);
  memcpy (f->ids, ids->data, sizeof (int) * f->n);
  c = dfl_target_config (f->cpu);
  f->hidden = c->hidden;
  f->vocab = c->vocab;
  f->layers = c->layers;
}

static void
fixture_close (Fixture *f)
{
  dfl_target_free (f->cpu);
  g_free (f->ids);
}

static DflTarget *
card_target (Fixture *f, DflTargetWeights as)
{
  g_autoptr (GError) error = NULL;
  DflTarget *t = dfl_target_upload (f->cpu, dev, as, &error);

  g_assert_no_error (error);
  g_assert_nonnull (t);
  return t;
}

static float *
download_f32 (const float *d, gsize n)
{
  g_autoptr (GError) error = NULL;
  float *host = g_new (float, n);

  g_assert_true (dfl_cuda_download (device, host, d, n * sizeof (float), &error));
  g_assert_no_error (error);
  return host;
}

/* Everything one forward gives, on the host. */
typedef struct {
  float *taps, *logits, *hidden;
  int32_t *argmax;
} Result;

static void
result_clear (Result *r)
{
  g_free (r->taps);
  g_free (r->logits);
  g_free (r->hidden);
  g_free (r->argmax);
}

/* A fresh sequence of `t` forwarded over ids[0..n) in one call, every layer
 * tapped, logits from row 0. */
static void
card_forward (DflTarget *t, Fixture *f, const int *ids, int n, Result *r)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (DflTargetSeq) seq = dfl_target_seq_new (t);
  g_autofree int *taps = g_new (int, f->layers);
  gsize n_taps = (gsize) n * f->layers * f->hidden;
  float *d_taps;
  DflTensor taps_tensor;
  DflForwardOut out = { 0 };

  g_assert_no_error (error);
  for (int i = 0; i < f->layers; i++)
    taps[i] = i;
  d_taps = dfl_cuda_alloc (device, n_taps * sizeof (float), &error);
  g_assert_no_error (error);
  r->logits = g_new (float, (gsize) n * f->vocab);
  r->hidden = g_new (float, (gsize) n * f->hidden);
  r->argmax = g_new (int32_t, n);
  out.tap_layers = taps;
  out.n_tap_layers = f->layers;
  taps_tensor = dfl_tensor_2d (dev, d_taps, 0, DFL_DTYPE_F32, n, (gint64) f->layers * f->hidden);
  out.device_taps = &taps_tensor;
  out.logits = r->logits;
  out.hidden = r->hidden;
  out.argmax = r->argmax;
  g_assert_true (dfl_target_forward (t, seq, ids, n, &out, &error));
  g_assert_no_error (error);
  g_assert_cmpint (dfl_target_seq_length (seq), ==, n);
  r->taps = download_f32 (d_taps, n_taps);
  dfl_cuda_free (device, d_taps);
}

static void
cpu_forward (Fixture *f, const int *ids, int n, Result *r)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (DflTargetSeq) seq = dfl_target_seq_new (f->cpu);
  g_autofree int *taps = g_new (int, f->layers);
  DflForwardOut out = { 0 };

  for (int i = 0; i < f->layers; i++)
    taps[i] = i;
  r->taps = g_new (float, (gsize) n * f->layers * f->hidden);
  r->logits = g_new (float, (gsize) n * f->vocab);
  r->hidden = g_new (float, (gsize) n * f->hidden);
  out.tap_layers = taps;
  out.n_tap_layers = f->layers;
  out.taps = r->taps;
  out.logits = r->logits;
  out.hidden = r->hidden;
  g_assert_true (dfl_target_forward (f->cpu, seq, ids, n, &out, &error));
  g_assert_no_error (error);
}

/* The card's result against the CPU's within `tol`, the argmax exactly. */
static void
assert_close (Fixture *f, const Result *card, const Result *cpu, int n, double tol)
{
  double e_taps = row_rel_error (card->taps, cpu->taps, n * f->layers, f->hidden);
  double e_logits = row_rel_error (card->logits, cpu->logits, n, f->vocab);
  double e_hidden = row_rel_error (card->hidden, cpu->hidden, n, f->hidden);

  g_test_message ("relative error: taps %.2e, logits %.2e, final-normed %.2e (bound %.0e)",
                  e_taps, e_logits, e_hidden, tol);
  g_assert_cmpfloat (e_taps, <=, tol);
  g_assert_cmpfloat (e_logits, <=, tol);
  g_assert_cmpfloat (e_hidden, <=, tol);
  for (int r = 0; r < n; r++) {
    /* the card's argmax is of its own logits row … */
    g_assert_cmpint (card->argmax[r], ==, argmax_of (card->logits + (gsize) r * f->vocab,
                                                     f->vocab));
    /* … and picks what the CPU picks */
    g_assert_cmpint (card->argmax[r], ==, argmax_of (cpu->logits + (gsize) r * f->vocab,
                                                     f->vocab));
  }
}

/* Greedy decoding of `steps` tokens after the fixture's prompt, one token a
 * forward, on the card (argmax from the card) and on the CPU. */
static void
greedy_card (DflTarget *t, Fixture *f, int steps, int *tokens)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (DflTargetSeq) seq = dfl_target_seq_new (t);
  DflForwardOut out = { 0 };
  int32_t next;

  out.argmax = &next;
  out.logits_from = f->n - 1;
  g_assert_true (dfl_target_forward (t, seq, f->ids, f->n, &out, &error));
  g_assert_no_error (error);
  out.logits_from = 0;
  for (int i = 0; i < steps; i++) {
    int id = next;
    tokens[i] = id;
    g_assert_true (dfl_target_forward (t, seq, &id, 1, &out, &error));
    g_assert_no_error (error);
  }
}

static void
greedy_cpu (Fixture *f, int steps, int *tokens, float *margins)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (DflTargetSeq) seq = dfl_target_seq_new (f->cpu);
  g_autofree float *logits = g_new (float, f->vocab);
  DflForwardOut out = { 0 };

  out.logits = logits;
  out.logits_from = f->n - 1;
  g_assert_true (dfl_target_forward (f->cpu, seq, f->ids, f->n, &out, &error));
  g_assert_no_error (error);
  out.logits_from = 0;
  for (int i = 0; i < steps; i++) {
    int id = argmax_of (logits, f->vocab);
    float best = logits[id], second = -INFINITY, scale = 0;
    for (int j = 0; j < f->vocab; j++) {
      if (j != id)
        second = MAX (second, logits[j]);
      scale = MAX (scale, fabsf (logits[j]));
    }
    margins[i] = (best - second) / MAX (scale, 1e-30f);
    tokens[i] = id;
    g_assert_true (dfl_target_forward (f->cpu, seq, &id, 1, &out, &error));
    g_assert_no_error (error);
  }
}

static void
assert_same_greedy (DflTarget *t, Fixture *f)
{
  enum { STEPS = 32 };
  int card[STEPS], cpu[STEPS];
  float margins[STEPS];

  greedy_card (t, f, STEPS, card);
  greedy_cpu (f, STEPS, cpu, margins);
  for (int i = 0; i < STEPS; i++)
    if (card[i] != cpu[i]) {
      g_test_message ("greedy step %d: card %d, CPU %d (the CPU's top-2 margin %.2e of the "
                      "row's largest logit)", i, card[i], cpu[i], margins[i]);
      g_assert_cmpint (card[i], ==, cpu[i]);
    }
}

static void
test_parity_f32 (gconstpointer data)
{
  Fixture f;
  Result card = { 0 }, cpu = { 0 };
  g_autoptr (DflTarget) t = NULL;

  fixture_open (&f, data);
  t = card_target (&f, DFL_TARGET_F32);
  g_assert_cmpint (dfl_target_head_tensor (t).dtype, ==, DFL_DTYPE_F32);
  /* parity: the CPU's F32 keys and values too */
  g_assert_cmpint (dfl_target_kv_type (t), ==, DFL_DTYPE_F32);
  card_forward (t, &f, f.ids, f.n, &card);
  cpu_forward (&f, f.ids, f.n, &cpu);
  assert_close (&f, &card, &cpu, f.n, 1e-3);
  assert_same_greedy (t, &f);
  result_clear (&card);
  result_clear (&cpu);
  fixture_close (&f);
}

static void
test_parity_stored (gconstpointer data)
{
  Fixture f;
  Result card = { 0 }, cpu = { 0 };
  g_autoptr (DflTarget) t = NULL;
  DflTensor head, embedding;
  double tol;

  fixture_open (&f, data);
  t = card_target (&f, DFL_TARGET_AS_STORED);
  head = dfl_target_head_tensor (t);
  /* the cache in BF16 beside BF16 matrices (within the tolerance of their
   * rounding), F32 beside F32 and F16 ones */
  g_assert_cmpint (dfl_target_kv_type (t), ==,
                   head.dtype == DFL_DTYPE_BF16 ? DFL_DTYPE_BF16 : DFL_DTYPE_F32);
  embedding = dfl_target_embedding_tensor (t);
  g_assert_true (head.device == dev);
  tol = head.dtype == DFL_DTYPE_BF16 ? 3e-2 : head.dtype == DFL_DTYPE_F16 ? 5e-3 : 1e-3;
  /* a tied head is the embedding's memory, not a copy */
  if (dfl_target_config (f.cpu)->tie_word_embeddings)
    g_assert_true (dfl_tensor_data (&head) == dfl_tensor_data (&embedding));
  else
    g_assert_true (dfl_tensor_data (&head) != dfl_tensor_data (&embedding));
  /* the card reads what the CPU reads in a step, in the same types */
  g_assert_cmpuint (dfl_target_weight_bytes (t), ==, dfl_target_weight_bytes (f.cpu));
  card_forward (t, &f, f.ids, f.n, &card);
  cpu_forward (&f, f.ids, f.n, &cpu);
  assert_close (&f, &card, &cpu, f.n, tol);
  assert_same_greedy (t, &f);
  result_clear (&card);
  result_clear (&cpu);
  fixture_close (&f);
}

/* A cache rewound over rows that held other tokens, then re-forwarded,
 * gives what a fresh sequence gives. */
static void
test_truncate (gconstpointer data)
{
  Fixture f;
  g_autoptr (DflTarget) t = NULL;
  g_autoptr (DflTargetSeq) seq = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree int *other = NULL;
  g_autofree float *logits = NULL, *fresh = NULL;
  DflForwardOut out = { 0 };
  int k, rest;

  fixture_open (&f, data);
  t = card_target (&f, DFL_TARGET_F32);
  k = f.n / 2;
  rest = f.n - k;
  other = g_new (int, rest);
  for (int i = 0; i < rest; i++)
    other[i] = (f.ids[k + i] + 17 + i) % f.vocab;
  logits = g_new (float, (gsize) rest * f.vocab);
  fresh = g_new (float, (gsize) rest * f.vocab);
  out.logits = logits;

  /* every call the fresh sequence makes has its shape here too, so the same
   * kernels run over the same rows: only the stale rows past k differ */
  seq = dfl_target_seq_new (t);
  g_assert_true (dfl_target_forward (t, seq, f.ids, k, NULL, &error));
  g_assert_true (dfl_target_forward (t, seq, f.ids + k, rest, NULL, &error));
  dfl_target_seq_truncate (seq, k);
  g_assert_cmpint (dfl_target_seq_length (seq), ==, k);
  g_assert_true (dfl_target_forward (t, seq, other, rest, NULL, &error));
  dfl_target_seq_truncate (seq, k);
  g_assert_true (dfl_target_forward (t, seq, f.ids + k, rest, &out, &error));
  g_assert_no_error (error);
  g_assert_cmpint (dfl_target_seq_length (seq), ==, f.n);
  g_clear_pointer (&seq, dfl_target_seq_free);

  out.logits = fresh;
  seq = dfl_target_seq_new (t);
  g_assert_true (dfl_target_forward (t, seq, f.ids, k, NULL, &error));
  g_assert_true (dfl_target_forward (t, seq, f.ids + k, rest, &out, &error));
  g_assert_no_error (error);
  g_assert_cmpfloat (row_rel_error (logits, fresh, rest, f.vocab), <=, 1e-6);
  fixture_close (&f);
}

/* Every output of a run of decode and verify steps over two sequences taking
 * turns, appended to `all`: a prompt (launched directly), then steps of
 * 1 to 16 rows, each verify step truncated back as a speculative round
 * keeps only part of it, until the context nears the model's positions
 * (the caches grow on the way, so graphs are captured again). */
static void
graph_run (DflTarget *t, Fixture *f, GByteArray *all)
{
  static const int steps[] = { 1, 16, 5, 1, 16, 16, 2, 1, 9, 16, 1, 1, 32, 16, 3 };
  const DflQwen3Config *c = dfl_target_config (t);
  g_autoptr (GError) error = NULL;
  g_autoptr (DflTargetSeq) a = dfl_target_seq_new (t);
  g_autoptr (DflTargetSeq) b = dfl_target_seq_new (t);
  DflTargetSeq *seqs[] = { a, b };
  int taps[] = { 0, f->layers - 1 }, ids[32];
  gsize tap_floats = (gsize) 32 * 2 * f->hidden;
  float *d_taps = dfl_cuda_alloc (device, tap_floats * sizeof (float), &error);
  DflTensor taps_tensor = dfl_tensor_2d (dev, d_taps, 0, DFL_DTYPE_F32, 32, 2 * f->hidden);
  g_autofree float *logits = g_new (float, (gsize) 32 * f->vocab);
  g_autofree float *hidden = g_new (float, (gsize) 32 * f->hidden);
  int32_t argmax[32];

  g_assert_no_error (error);
  for (int q = 0; q < 2; q++)
    g_assert_true (dfl_target_forward (t, seqs[q], f->ids, MIN (f->n, 40), NULL, &error));
  for (int i = 0;; i++) {
    int n = steps[i % G_N_ELEMENTS (steps)];
    for (int q = 0; q < 2; q++) {
      DflTargetSeq *seq = seqs[q];
      int len = dfl_target_seq_length (seq);
      DflForwardOut out = { 0 };
      g_autofree float *tap_rows = NULL;
      if (len + n + 16 > c->max_positions)
        goto out;
      for (int r = 0; r < n; r++)
        ids[r] = (f->ids[(i + r) % f->n] * 13 + i * 7 + r + q) % f->vocab;
      out.tap_layers = taps;
      out.n_tap_layers = 2;
      out.device_taps = &taps_tensor;
      out.logits_from = i % 3 == 2 ? n - 1 : 0;
      out.logits = logits;
      out.argmax = argmax;
      out.hidden = hidden;
      g_assert_true (dfl_target_forward (t, seq, ids, n, &out, &error));
      g_assert_no_error (error);
      tap_rows = download_f32 (d_taps, (gsize) n * 2 * f->hidden);
      g_byte_array_append (all, (guint8 *) tap_rows, n * 2 * f->hidden * sizeof (float));
      {
        gsize given = (gsize) (n - out.logits_from);   /* rows with logits */
        g_byte_array_append (all, (guint8 *) logits, given * f->vocab * sizeof (float));
        g_byte_array_append (all, (guint8 *) hidden, given * f->hidden * sizeof (float));
        g_byte_array_append (all, (guint8 *) argmax, given * sizeof (int32_t));
      }
      /* a verify step keeps the anchor and some drafts */
      if (n == 16)
        dfl_target_seq_truncate (seq, len + 1 + i % 7);
    }
  }
out:
  dfl_cuda_free (device, d_taps);
}

/* The outputs `run` gathers from a target replaying captured graphs are
 * bitwise those of a target launching every op directly. */
static void
assert_graph_is_direct (gconstpointer data, void (*run) (DflTarget *, Fixture *, GByteArray *))
{
  Fixture f;
  g_autoptr (DflTarget) graphed = NULL, direct = NULL;
  g_autoptr (GByteArray) a = g_byte_array_new (), b = g_byte_array_new ();

  fixture_open (&f, data);
  graphed = card_target (&f, DFL_TARGET_AS_STORED);
  direct = card_target (&f, DFL_TARGET_AS_STORED);
  dfl_target_set_use_graph (direct, FALSE);
  run (graphed, &f, a);
  run (direct, &f, b);
  g_test_message ("%u bytes of outputs compared", a->len);
  g_assert_cmpuint (a->len, ==, b->len);
  g_assert_cmpuint (a->len, >, 100000);
  g_assert_true (memcmp (a->data, b->data, a->len) == 0);
  fixture_close (&f);
}

/* Decode and verify steps replayed from captured graphs give the bits of
 * the same steps launched directly. */
static void
test_graph (gconstpointer data)
{
  assert_graph_is_direct (data, graph_run);
}

/* Steps whose launches start while the launch before them finishes (each
 * waits for it before touching what it wrote or reads) give the bits of
 * steps whose launches wait for the one before to end: a launch that read
 * or wrote too early would show as a difference. Graphs and direct
 * launches both. */
static void
test_overlap (gconstpointer data)
{
  Fixture f;

  fixture_open (&f, data);
  for (int graph = 0; graph < 2; graph++) {
    g_autoptr (DflTarget) overlapped = card_target (&f, DFL_TARGET_AS_STORED);
    g_autoptr (DflTarget) serial = card_target (&f, DFL_TARGET_AS_STORED);
    g_autoptr (GByteArray) a = g_byte_array_new (), b = g_byte_array_new ();
    dfl_target_set_use_graph (overlapped, graph);
    dfl_target_set_use_graph (serial, graph);
    dfl_cuda_device_set_overlap (device, FALSE);
    graph_run (serial, &f, b);
    dfl_cuda_device_set_overlap (device, TRUE);
    graph_run (overlapped, &f, a);
    g_test_message ("%s: %u bytes of outputs compared", graph ? "graphs" : "direct", a->len);
    g_assert_cmpuint (a->len, ==, b->len);
    g_assert_cmpuint (a->len, >, 100000);
    g_assert_true (memcmp (a->data, b->data, a->len) == 0);
  }
  fixture_close (&f);
}

/* 150 tokens (more than one head block) in chunks of 7 rows against one
 * pass, and against the CPU; logits kept on the card against the host copy;
 * logits of the last rows only; the tokens over three calls that grow the
 * cache. */
static void
test_chunks (gconstpointer data)
{
  enum { N = 150 };
  Fixture f;
  g_autoptr (DflTarget) t = NULL;
  g_autoptr (GError) error = NULL;
  int ids[N];
  Result one = { 0 }, chunked = { 0 }, cpu = { 0 };

  fixture_open (&f, data);
  for (int i = 0; i < N; i++)
    ids[i] = (f.ids[i % f.n] * 7 + i * 31) % f.vocab;
  t = card_target (&f, DFL_TARGET_F32);
  card_forward (t, &f, ids, N, &one);
  dfl_target_set_chunk_rows (t, 7);
  card_forward (t, &f, ids, N, &chunked);
  cpu_forward (&f, ids, N, &cpu);
  /* other row counts may take other matmul algorithms: equal up to rounding */
  assert_close (&f, &chunked, &one, N, 1e-4);
  assert_close (&f, &one, &cpu, N, 1e-3);

  /* the last 20 rows' logits on the card, their argmax on the host,
   * with chunks of 7 that split them */
  {
    enum { TAIL = 20 };
    g_autoptr (DflTargetSeq) seq = dfl_target_seq_new (t);
    float *d_logits = dfl_cuda_alloc (device, (gsize) TAIL * f.vocab * sizeof (float), &error);
    DflTensor logits_tensor = dfl_tensor_2d (dev, d_logits, 0, DFL_DTYPE_F32, TAIL, f.vocab);
    g_autofree float *logits = NULL;
    int32_t argmax[TAIL];
    DflForwardOut out = { 0 };

    g_assert_no_error (error);
    out.logits_from = N - TAIL;
    out.device_logits = &logits_tensor;
    out.argmax = argmax;
    g_assert_true (dfl_target_forward (t, seq, ids, N, &out, &error));
    g_assert_no_error (error);
    logits = download_f32 (d_logits, (gsize) TAIL * f.vocab);
    g_assert_cmpfloat (row_rel_error (logits, chunked.logits + (gsize) (N - TAIL) * f.vocab,
                                      TAIL, f.vocab), <=, 1e-5);
    for (int r = 0; r < TAIL; r++)
      g_assert_cmpint (argmax[r], ==, chunked.argmax[N - TAIL + r]);
    dfl_cuda_free (device, d_logits);
  }

  /* the same tokens in three calls whose lengths make the cache grow twice
   * with rows in it (64 → 128 → 256 positions): the held rows move along */
  {
    const int pieces[] = { 50, 30, N - 80 };
    g_autoptr (DflTargetSeq) seq = dfl_target_seq_new (t);
    g_autofree float *logits = g_new (float, (gsize) N * f.vocab);
    DflForwardOut out = { 0 };
    int at = 0;

    for (guint i = 0; i < G_N_ELEMENTS (pieces); i++) {
      out.logits = logits + (gsize) at * f.vocab;
      g_assert_true (dfl_target_forward (t, seq, ids + at, pieces[i], &out, &error));
      g_assert_no_error (error);
      at += pieces[i];
    }
    g_assert_cmpint (dfl_target_seq_length (seq), ==, N);
    g_assert_cmpfloat (row_rel_error (logits, one.logits, N, f.vocab), <=, 1e-4);
  }
  result_clear (&one);
  result_clear (&chunked);
  result_clear (&cpu);
  fixture_close (&f);
}

/* One sequence's outputs of a step of `n` rows, on the host: taps of two
 * layers, the logits, final-normed rows and argmax of the rows from
 * `logits_from`. */
typedef struct {
  int n, logits_from;
  Result host;
} StepOut;

/* Room for a step of `n` rows; `out` asks for all of it, the taps into
 * `d_taps` on the card. */
static void
step_out_init (StepOut *o, Fixture *f, int n, int logits_from, const int *taps,
               float *d_taps, DflTensor *taps_tensor, DflForwardOut *out)
{
  int rows = n - logits_from;

  o->n = n;
  o->logits_from = logits_from;
  o->host.logits = g_new (float, (gsize) rows * f->vocab);
  o->host.hidden = g_new (float, (gsize) rows * f->hidden);
  o->host.argmax = g_new (int32_t, rows);
  *taps_tensor = dfl_tensor_2d (dev, d_taps, 0, DFL_DTYPE_F32, n, 2 * f->hidden);
  memset (out, 0, sizeof *out);
  out->tap_layers = taps;
  out->n_tap_layers = 2;
  out->device_taps = taps_tensor;
  out->logits_from = logits_from;
  out->logits = o->host.logits;
  out->hidden = o->host.hidden;
  out->argmax = o->host.argmax;
}

/* A batched step's outputs against the same sequence's solo step: within
 * `tol` (cuBLAS's products take other algorithms for other row counts, so
 * the rows of a batch are not bitwise a solo step's); each argmax exactly
 * its own logits row's (the argmax is row-invariant), and the solo
 * argmax wherever the solo top-2 margin is clear of the tolerance. */
static void
assert_step_close (Fixture *f, const StepOut *batch, const StepOut *solo, double tol,
                   double *worst)
{
  int rows = batch->n - batch->logits_from;
  double e_taps = row_rel_error (batch->host.taps, solo->host.taps, batch->n * 2, f->hidden);
  double e_logits = row_rel_error (batch->host.logits, solo->host.logits, rows, f->vocab);
  double e_hidden = row_rel_error (batch->host.hidden, solo->host.hidden, rows, f->hidden);

  g_assert_cmpfloat (e_taps, <=, tol);
  g_assert_cmpfloat (e_logits, <=, tol);
  g_assert_cmpfloat (e_hidden, <=, tol);
  *worst = MAX (*worst, MAX (e_taps, MAX (e_logits, e_hidden)));
  for (int r = 0; r < rows; r++) {
    const float *row = solo->host.logits + (gsize) r * f->vocab;
    int best = argmax_of (row, f->vocab);
    float second = -INFINITY, scale = 0;

    g_assert_cmpint (batch->host.argmax[r], ==,
                     argmax_of (batch->host.logits + (gsize) r * f->vocab, f->vocab));
    g_assert_cmpint (solo->host.argmax[r], ==, best);
    for (int j = 0; j < f->vocab; j++) {
      if (j != best)
        second = MAX (second, row[j]);
      scale = MAX (scale, fabsf (row[j]));
    }
    if ((row[best] - second) / MAX (scale, 1e-30f) > 10 * tol)
      g_assert_cmpint (batch->host.argmax[r], ==, best);
  }
}

/* dfl_target_forward_batch on the card: three sequences of different
 * lengths, joining and leaving the batch, one rewound, against twins run
 * one sequence a forward (which replay graphs where the steps are small)
 * over the same rows. Weights as F32 so the tolerance is the products'
 * summation order only. */
static void
test_batch (gconstpointer data)
{
  enum { SEQS = 3, MAX_ROWS = 40 };
  /* rows of each sequence per step (0: not in that step's batch) */
  static const int plan[][SEQS] = {
    { 20, 9, 0 }, { 1, 5, 13 }, { 0, 1, 3 }, { 16, 0, 1 }, { 1, 16, 16 }, { 3, 1, 0 },
  };
  Fixture f;
  g_autoptr (DflTarget) t = NULL;
  g_autoptr (GError) error = NULL;
  DflTargetSeq *batched[SEQS], *solo[SEQS];
  int taps[2], ids[SEQS][MAX_ROWS];
  float *d_taps[SEQS], *d_solo_taps;
  double worst = 0;
  int compared = 0;

  fixture_open (&f, data);
  taps[0] = 0;
  taps[1] = f.layers - 1;
  t = card_target (&f, DFL_TARGET_F32);
  for (int q = 0; q < SEQS; q++) {
    batched[q] = dfl_target_seq_new (t);
    solo[q] = dfl_target_seq_new (t);
    d_taps[q] = dfl_cuda_alloc (device, (gsize) MAX_ROWS * 2 * f.hidden * sizeof (float),
                                &error);
    g_assert_no_error (error);
  }
  d_solo_taps = dfl_cuda_alloc (device, (gsize) MAX_ROWS * 2 * f.hidden * sizeof (float),
                                &error);
  g_assert_no_error (error);

  for (guint step = 0; step < G_N_ELEMENTS (plan); step++) {
    DflTargetBatchItem items[SEQS];
    DflForwardOut outs[SEQS], solo_out;
    DflTensor taps_tensors[SEQS], solo_taps_tensor;
    StepOut got[SEQS] = { 0 };
    int n_items = 0;

    /* a verify step that kept only part of its rows: the second
     * sequence rewinds before the fifth step, both copies alike */
    if (step == 4) {
      int len = dfl_target_seq_length (batched[1]) - 3;
      dfl_target_seq_truncate (batched[1], len);
      dfl_target_seq_truncate (solo[1], len);
    }
    for (int q = 0; q < SEQS; q++) {
      int n = plan[step][q];
      if (n == 0)
        continue;
      for (int r = 0; r < n; r++)
        ids[q][r] = (f.ids[(step * 5 + r) % f.n] * 11 + step * 3 + r * 7 + q) % f.vocab;
      step_out_init (&got[q], &f, n, step % 2 ? n - 1 : 0, taps, d_taps[q], &taps_tensors[q],
                     &outs[q]);
      items[n_items++] = (DflTargetBatchItem) { batched[q], ids[q], n, &outs[q] };
    }
    g_assert_true (dfl_target_forward_batch (t, items, n_items, &error));
    g_assert_no_error (error);

    for (int q = 0; q < SEQS; q++) {
      StepOut want = { 0 };
      int n = plan[step][q];
      if (n == 0)
        continue;
      got[q].host.taps = download_f32 (d_taps[q], (gsize) n * 2 * f.hidden);
      step_out_init (&want, &f, n, got[q].logits_from, taps, d_solo_taps, &solo_taps_tensor,
                     &solo_out);
      g_assert_true (dfl_target_forward (t, solo[q], ids[q], n, &solo_out, &error));
      g_assert_no_error (error);
      want.host.taps = download_f32 (d_solo_taps, (gsize) n * 2 * f.hidden);
      g_assert_cmpint (dfl_target_seq_length (batched[q]), ==,
                       dfl_target_seq_length (solo[q]));
      assert_step_close (&f, &got[q], &want, 1e-4, &worst);
      compared++;
      result_clear (&want.host);
      result_clear (&got[q].host);
    }
  }
  g_test_message ("%d sequence steps compared, worst relative error %.2e (bound 1e-4)",
                  compared, worst);
  for (int q = 0; q < SEQS; q++) {
    dfl_target_seq_free (batched[q]);
    dfl_target_seq_free (solo[q]);
    dfl_cuda_free (device, d_taps[q]);
  }
  dfl_cuda_free (device, d_solo_taps);
  fixture_close (&f);
}

/* Batched steps of four sequences, appended to `all`: a prompt each, then
 * steps of all four at once (decode steps of one row each, verify steps
 * of several, one sequence now and then asking no taps or only its last
 * row's logits), each verify step truncated back, until the contexts near
 * the model's positions (the caches grow on the way). */
static void
batch_graph_run (DflTarget *t, Fixture *f, GByteArray *all)
{
  enum { SEQS = 4, MAX_ROWS = 16 };
  static const int steps[] = { 1, 1, 16, 1, 5, 1, 16, 1, 1, 3 };
  const DflQwen3Config *c = dfl_target_config (t);
  g_autoptr (GError) error = NULL;
  DflTargetSeq *seqs[SEQS];
  int taps[] = { 0, f->layers - 1 }, ids[SEQS][MAX_ROWS];
  float *d_taps[SEQS];
  DflTensor taps_tensor[SEQS];

  for (int q = 0; q < SEQS; q++) {
    seqs[q] = dfl_target_seq_new (t);
    /* prompts of different lengths */
    g_assert_true (dfl_target_forward (t, seqs[q], f->ids, MIN (f->n, 10 + 7 * q), NULL,
                                       &error));
    g_assert_no_error (error);
    d_taps[q] = dfl_cuda_alloc (device, (gsize) MAX_ROWS * 2 * f->hidden * sizeof (float),
                                &error);
    g_assert_no_error (error);
  }
  for (int i = 0;; i++) {
    int n = steps[i % G_N_ELEMENTS (steps)], len[SEQS];
    DflTargetBatchItem items[SEQS];
    DflForwardOut outs[SEQS];
    StepOut got[SEQS] = { 0 };

    for (int q = 0; q < SEQS; q++) {
      len[q] = dfl_target_seq_length (seqs[q]);
      if (len[q] + n + 16 > c->max_positions)
        goto out;
    }
    for (int q = 0; q < SEQS; q++) {
      for (int r = 0; r < n; r++)
        ids[q][r] = (f->ids[(i + r + q) % f->n] * 13 + i * 7 + r + q) % f->vocab;
      step_out_init (&got[q], f, n, (i + q) % 3 == 2 ? n - 1 : 0, taps, d_taps[q],
                     &taps_tensor[q], &outs[q]);
      if ((i + q) % 5 == 4) {
        outs[q].device_taps = NULL;
        outs[q].n_tap_layers = 0;
      }
      items[q] = (DflTargetBatchItem) { seqs[q], ids[q], n, &outs[q] };
    }
    g_assert_true (dfl_target_forward_batch (t, items, SEQS, &error));
    g_assert_no_error (error);
    for (int q = 0; q < SEQS; q++) {
      gsize given = (gsize) (n - got[q].logits_from);
      if (outs[q].device_taps) {
        g_autofree float *tap_rows = download_f32 (d_taps[q], (gsize) n * 2 * f->hidden);
        g_byte_array_append (all, (guint8 *) tap_rows, n * 2 * f->hidden * sizeof (float));
      }
      g_byte_array_append (all, (guint8 *) got[q].host.logits, given * f->vocab * sizeof (float));
      g_byte_array_append (all, (guint8 *) got[q].host.hidden, given * f->hidden * sizeof (float));
      g_byte_array_append (all, (guint8 *) got[q].host.argmax, given * sizeof (int32_t));
      result_clear (&got[q].host);
      /* a verify step keeps the anchor and some drafts */
      if (n > 1)
        dfl_target_seq_truncate (seqs[q], len[q] + 1 + (i + q) % n);
    }
  }
out:
  for (int q = 0; q < SEQS; q++) {
    dfl_target_seq_free (seqs[q]);
    dfl_cuda_free (device, d_taps[q]);
  }
}

/* Batched steps of several sequences replayed from captured graphs give
 * the bits of the same steps launched directly. */
static void
test_batch_graph (gconstpointer data)
{
  assert_graph_is_direct (data, batch_graph_run);
}

/* Bad input: an error naming the value, the cache as it was (the next
 * forward gives what it gives on a sequence that never saw the bad call). */
static void
test_bad_input (void)
{
  Fixture f;
  g_autoptr (DflTarget) t = NULL;
  g_autoptr (DflTargetSeq) seq = NULL, clean = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree int *many = NULL;
  g_autofree float *logits = NULL, *want = NULL;
  DflForwardOut out = { 0 };
  int bad_ids[3], max_pos, tap = 99;

  fixture_open (&f, "bf16-tied");
  t = card_target (&f, DFL_TARGET_AS_STORED);
  max_pos = dfl_target_config (t)->max_positions;
  seq = dfl_target_seq_new (t);
  clean = dfl_target_seq_new (t);
  g_assert_true (dfl_target_forward (t, seq, f.ids, f.n, NULL, &error));
  g_assert_true (dfl_target_forward (t, clean, f.ids, f.n, NULL, &error));
  g_assert_no_error (error);

  bad_ids[0] = f.ids[0];
  bad_ids[1] = f.vocab;
  bad_ids[2] = f.ids[1];
  g_assert_false (dfl_target_forward (t, seq, bad_ids, 3, NULL, &error));
  g_assert_error (error, DFL_ERROR, DFL_ERROR_INVALID);
  g_assert_nonnull (strstr (error->message, "1024"));
  g_clear_error (&error);
  bad_ids[1] = -1;
  g_assert_false (dfl_target_forward (t, seq, bad_ids, 3, NULL, &error));
  g_assert_error (error, DFL_ERROR, DFL_ERROR_INVALID);
  g_clear_error (&error);
  g_assert_cmpint (dfl_target_seq_length (seq), ==, f.n);

  many = g_new (int, max_pos);
  for (int i = 0; i < max_pos; i++)
    many[i] = f.ids[i % f.n];
  g_assert_false (dfl_target_forward (t, seq, many, max_pos - f.n + 1, NULL, &error));
  g_assert_error (error, DFL_ERROR, DFL_ERROR_LIMIT);
  g_assert_nonnull (strstr (error->message, "max_position_embeddings"));
  g_clear_error (&error);
  g_assert_cmpint (dfl_target_seq_length (seq), ==, f.n);

  out.tap_layers = &tap;
  out.n_tap_layers = 1;
  g_assert_false (dfl_target_forward (t, seq, f.ids, 2, &out, &error));
  g_assert_error (error, DFL_ERROR, DFL_ERROR_INVALID);
  g_clear_error (&error);
  g_assert_cmpint (dfl_target_seq_length (seq), ==, f.n);

  /* taps stay on the card: host rows are refused, and so is a host tensor */
  {
    g_autofree float *host = g_new (float, (gsize) 2 * f.hidden);
    DflTensor on_host = dfl_tensor_2d (NULL, host, 0, DFL_DTYPE_F32, 2, f.hidden);
    tap = 0;
    out.taps = host;
    g_assert_false (dfl_target_forward (t, seq, f.ids, 2, &out, &error));
    g_assert_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED);
    g_clear_error (&error);
    out.taps = NULL;
    out.device_taps = &on_host;
    g_assert_false (dfl_target_forward (t, seq, f.ids, 2, &out, &error));
    g_assert_error (error, DFL_ERROR, DFL_ERROR_MISMATCH);
    g_clear_error (&error);
    g_assert_cmpint (dfl_target_seq_length (seq), ==, f.n);
  }

  /* exactly up to the context still runs */
  {
    g_autoptr (DflTargetSeq) full = dfl_target_seq_new (t);
    g_assert_true (dfl_target_forward (t, full, many, max_pos, NULL, &error));
    g_assert_no_error (error);
    g_assert_cmpint (dfl_target_seq_length (full), ==, max_pos);
  }

  memset (&out, 0, sizeof out);
  logits = g_new (float, (gsize) 3 * f.vocab);
  want = g_new (float, (gsize) 3 * f.vocab);
  out.logits = logits;
  g_assert_true (dfl_target_forward (t, seq, f.ids, 3, &out, &error));
  out.logits = want;
  g_assert_true (dfl_target_forward (t, clean, f.ids, 3, &out, &error));
  g_assert_no_error (error);
  g_assert_cmpfloat (row_rel_error (logits, want, 3, f.vocab), <=, 1e-6);
  fixture_close (&f);
}

/* Random weights made on the card: finite, the same for the same seed,
 * others for another seed. */
static void
test_random (void)
{
  Fixture f;
  g_autoptr (GError) error = NULL;
  g_autoptr (DflTarget) a = NULL, b = NULL, c = NULL;
  DflTarget *all[3];
  float *logits[3];
  int n = 8;

  fixture_open (&f, "gqa-hd32-sharded");
  all[0] = a = dfl_target_new_random (dev, dfl_target_config (f.cpu), DFL_DTYPE_BF16, 5,
                                       &error);
  g_assert_no_error (error);
  all[1] = b = dfl_target_new_random (dev, dfl_target_config (f.cpu), DFL_DTYPE_BF16, 5,
                                       &error);
  g_assert_no_error (error);
  all[2] = c = dfl_target_new_random (dev, dfl_target_config (f.cpu), DFL_DTYPE_BF16, 6,
                                       &error);
  g_assert_no_error (error);
  {
    /* every matrix once, the head, one embedding row: two bytes each */
    const DflQwen3Config *cfg = dfl_target_config (f.cpu);
    guint64 hs = cfg->hidden, qd = (guint64) cfg->heads * cfg->head_dim;
    guint64 kd = (guint64) cfg->kv_heads * cfg->head_dim, ffn = cfg->intermediate;
    guint64 per_layer = 2 * qd * hs + 2 * kd * hs + 3 * ffn * hs;
    g_assert_cmpuint (dfl_target_weight_bytes (a), ==,
                      2 * (cfg->layers * per_layer + (guint64) cfg->vocab * hs + hs));
  }
  for (int i = 0; i < 3; i++) {
    g_autoptr (DflTargetSeq) seq = dfl_target_seq_new (all[i]);
    DflForwardOut out = { 0 };
    logits[i] = g_new (float, (gsize) n * f.vocab);
    out.logits = logits[i];
    g_assert_true (dfl_target_forward (all[i], seq, f.ids, n, &out, &error));
    g_assert_no_error (error);
  }
  for (gsize i = 0; i < (gsize) n * f.vocab; i++)
    g_assert_true (isfinite (logits[0][i]));
  g_assert_true (memcmp (logits[0], logits[1], sizeof (float) * n * f.vocab) == 0);
  g_assert_cmpfloat (row_rel_error (logits[2], logits[0], n, f.vocab), >, 1e-2);
  for (int i = 0; i < 3; i++)
    g_free (logits[i]);
  fixture_close (&f);
}

int
main (int argc, char **argv)
{
  g_autoptr (GError) error = NULL;
  int status;

  g_test_init (&argc, &argv, NULL);
  dev = dfl_device_open (DFL_BACKEND_CUDA, 0, &error);
  if (!dev) {
    /* the device's message already says "CUDA is unavailable: …" */
    printf ("1..0 # SKIP %s%s\n",
            g_str_has_prefix (error->message, "CUDA is unavailable") ? ""
            : "CUDA is unavailable: ", error->message);
    return 0;
  }
  device = dfl_device_native (dev);
  g_test_message ("device: %s", dfl_device_describe (dev));
  for (guint i = 0; i < G_N_ELEMENTS (variants); i++) {
    g_autofree char *p1 = g_strdup_printf ("/cuda-target/parity-f32/%s", variants[i]);
    g_autofree char *p2 = g_strdup_printf ("/cuda-target/parity-stored/%s", variants[i]);
    g_autofree char *p3 = g_strdup_printf ("/cuda-target/truncate/%s", variants[i]);
    g_autofree char *p4 = g_strdup_printf ("/cuda-target/chunks/%s", variants[i]);
    g_autofree char *p5 = g_strdup_printf ("/cuda-target/graph/%s", variants[i]);
    g_autofree char *p6 = g_strdup_printf ("/cuda-target/batch/%s", variants[i]);
    g_autofree char *p7 = g_strdup_printf ("/cuda-target/batch-graph/%s", variants[i]);
    g_autofree char *p8 = g_strdup_printf ("/cuda-target/overlap/%s", variants[i]);
    g_test_add_data_func (p1, variants[i], test_parity_f32);
    g_test_add_data_func (p2, variants[i], test_parity_stored);
    g_test_add_data_func (p3, variants[i], test_truncate);
    g_test_add_data_func (p4, variants[i], test_chunks);
    g_test_add_data_func (p5, variants[i], test_graph);
    g_test_add_data_func (p6, variants[i], test_batch);
    g_test_add_data_func (p7, variants[i], test_batch_graph);
    g_test_add_data_func (p8, variants[i], test_overlap);
  }
  g_test_add_func ("/cuda-target/bad-input", test_bad_input);
  g_test_add_func ("/cuda-target/random", test_random);
  status = g_test_run ();
  dfl_device_unref (dev);
  return status;
}
