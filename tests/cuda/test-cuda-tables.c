/* gst-dflash — the table ops on the card against the CPU's (dfl-backend.h):
 * rope at a position per row, copy_rows_table and attention_table, at the
 * Qwen3-8B head shape (32 heads over 8, head_dim 128) over forty sequences'
 * caches of different lengths, decode rows and verify rows together.
 *
 * The card against the CPU within F32 rounding; the card's attention over
 * the table bitwise its attention over each sequence alone (what makes a
 * batched step's rows the same as the sequence's own steps); the three ops
 * captured in a graph and replayed at other positions, entries and ranges
 * bitwise the same ops launched directly. Where no card is present the
 * whole program is one TAP skip.
 */
#include <glib.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dfl-backend.h"
#include "op-assert.h"

enum { SEQS = 40, HEADS = 32, KV_HEADS = 8, HD = 128 };
#define KV_ROW (KV_HEADS * HD)
#define Q_ROW (HEADS * HD)

static DflDevice *card, *cpu;

/* What a test allocated on a device, freed at its end. */
static GPtrArray *held;

typedef struct {
  DflDevice *dev;
  gpointer handle;
} Held;

static void
held_free (gpointer data)
{
  Held *h = data;

  dfl_device_free (h->dev, h->handle);
  g_free (h);
}

/* A packed ne0 × ne1 × ne2 tensor on dev, filled from data where given. */
static DflTensor
put (DflDevice *dev, DflDtype dtype, gint64 ne0, gint64 ne1, gint64 ne2, const void *data)
{
  gsize bytes = dfl_dtype_size (dtype) * ne0 * ne1 * ne2;
  g_autoptr (GError) error = NULL;
  Held *h = g_new (Held, 1);
  DflTensor t = { dev, NULL, 0, dtype };

  h->dev = dev;
  h->handle = dfl_device_alloc (dev, MAX (bytes, 16), &error);
  g_assert_no_error (error);
  g_ptr_array_add (held, h);
  t.handle = h->handle;
  t.ne[0] = ne0;
  t.ne[1] = ne1;
  t.ne[2] = ne2;
  t.ne[3] = 1;
  t.nb[0] = dfl_dtype_size (dtype);
  t.nb[1] = t.nb[0] * ne0;
  t.nb[2] = t.nb[1] * ne1;
  t.nb[3] = t.nb[2] * ne2;
  if (data) {
    g_assert_true (dfl_device_upload (dev, h->handle, 0, data, bytes, &error));
    g_assert_no_error (error);
  }
  return t;
}

/* New values of a tensor's memory (an index tensor between replays). */
static void
refill (const DflTensor *t, const void *data)
{
  g_autoptr (GError) error = NULL;

  g_assert_true (dfl_device_upload (t->device, t->handle, t->offset, data,
                                    dfl_tensor_bytes (t), &error));
  g_assert_no_error (error);
}

static void
get (const DflTensor *t, void *dst)
{
  g_autoptr (GError) error = NULL;

  g_assert_true (dfl_op_sync (t->device, &error));
  g_assert_true (dfl_device_download (t->device, t->handle, t->offset, dst,
                                      dfl_tensor_bytes (t), &error));
  g_assert_no_error (error);
}

static float *
random_floats (GRand *r, gsize n)
{
  float *x = g_new (float, n);

  for (gsize i = 0; i < n; i++)
    x[i] = (float) g_rand_double_range (r, -1.0, 1.0);
  return x;
}

static void
assert_close (const char *what, const float *got, const float *want, gsize n, double tol)
{
  double worst = 0.0;

  for (gsize i = 0; i < n; i++) {
    double d = fabs ((double) got[i] - want[i]);
    if (!(d <= tol))
      g_error ("%s[%" G_GSIZE_FORMAT "]: %.9g on the card, %.9g on the CPU (±%.3g)", what, i,
               got[i], want[i], tol);
    worst = MAX (worst, d);
  }
  g_test_message ("%s: %" G_GSIZE_FORMAT " values, worst difference %.2e", what, n, worst);
}

/* A batched step of SEQS sequences: sequence s has `len[s]` keys in its
 * cache (of `cap[s]` rows) and `n[s]` rows this step, at positions
 * len[s] … len[s] + n[s] − 1; its rows see keys [0, len + r + 1). */
typedef struct {
  int len[SEQS], cap[SEQS], n[SEQS], rows;
  gint64 *pos;
  gint32 *which, *lo, *hi;
  float *q, *k_new, *caches_k[SEQS], *caches_v[SEQS];
} Step;

static void
step_make (Step *st, GRand *r, int shift)
{
  st->rows = 0;
  for (int s = 0; s < SEQS; s++) {
    /* decode rows mostly; every seventh sequence verifies 16 rows */
    st->n[s] = s % 7 == 3 ? 16 : 1;
    st->cap[s] = 64 * (2 + s % 23);
    st->len[s] = (s * 37 + shift) % (st->cap[s] - 16);
    st->rows += st->n[s];
  }
  st->pos = g_new (gint64, st->rows);
  st->which = g_new (gint32, st->rows);
  st->lo = g_new (gint32, st->rows);
  st->hi = g_new (gint32, st->rows);
  for (int s = 0, at = 0; s < SEQS; s++)
    for (int i = 0; i < st->n[s]; i++, at++) {
      st->pos[at] = st->len[s] + i;
      st->which[at] = s;
      st->lo[at] = 0;
      st->hi[at] = st->len[s] + i + 1;
    }
  st->q = random_floats (r, (gsize) st->rows * Q_ROW);
  st->k_new = random_floats (r, (gsize) st->rows * KV_ROW);
  for (int s = 0; s < SEQS; s++) {
    st->caches_k[s] = random_floats (r, (gsize) st->cap[s] * KV_ROW);
    st->caches_v[s] = random_floats (r, (gsize) st->cap[s] * KV_ROW);
  }
}

static void
step_clear (Step *st)
{
  g_free (st->pos);
  g_free (st->which);
  g_free (st->lo);
  g_free (st->hi);
  g_free (st->q);
  g_free (st->k_new);
  for (int s = 0; s < SEQS; s++) {
    g_free (st->caches_k[s]);
    g_free (st->caches_v[s]);
  }
}

/* The step's tensors on one device. */
typedef struct {
  DflTensor q, k_new, out, pos, which, lo, hi, inv_freq;
  DflTensor ck[SEQS], cv[SEQS];
} OnDevice;

static void
on_device (OnDevice *d, DflDevice *dev, const Step *st, const float *inv_freq)
{
  d->q = put (dev, DFL_DTYPE_F32, HD, HEADS, st->rows, st->q);
  d->k_new = put (dev, DFL_DTYPE_F32, KV_ROW, st->rows, 1, st->k_new);
  d->out = put (dev, DFL_DTYPE_F32, HD, HEADS, st->rows, NULL);
  d->pos = put (dev, DFL_DTYPE_I64, st->rows, 1, 1, st->pos);
  d->which = put (dev, DFL_DTYPE_I32, st->rows, 1, 1, st->which);
  d->lo = put (dev, DFL_DTYPE_I32, st->rows, 1, 1, st->lo);
  d->hi = put (dev, DFL_DTYPE_I32, st->rows, 1, 1, st->hi);
  d->inv_freq = put (dev, DFL_DTYPE_F32, HD / 2, 1, 1, inv_freq);
  for (int s = 0; s < SEQS; s++) {
    d->ck[s] = put (dev, DFL_DTYPE_F32, KV_ROW, st->cap[s], 1, st->caches_k[s]);
    d->cv[s] = put (dev, DFL_DTYPE_F32, KV_ROW, st->cap[s], 1, st->caches_v[s]);
  }
}

/* The caches as attention reads them: [cap][kv_heads][head_dim]. */
static DflTensor
keys_view (const DflTensor *cache)
{
  DflTensor t = *cache;

  t.ne[0] = HD;
  t.ne[1] = KV_HEADS;
  t.ne[2] = cache->ne[1];
  t.nb[1] = sizeof (float) * HD;
  t.nb[2] = t.nb[1] * KV_HEADS;
  t.nb[3] = t.nb[2] * t.ne[2];
  return t;
}

/* The step's ops as a batched layer runs them: the new keys roped and
 * written to every cache, the queries roped, attention over the table. */
static void
run_step (DflDevice *dev, OnDevice *d)
{
  DflTensor k3 = d->k_new, ks[SEQS], vs[SEQS];
  float scale = 1.0f / sqrtf (HD);

  k3.ne[0] = HD;
  k3.ne[1] = KV_HEADS;
  k3.ne[2] = d->k_new.ne[1];
  k3.nb[1] = sizeof (float) * HD;
  k3.nb[2] = k3.nb[1] * KV_HEADS;
  k3.nb[3] = k3.nb[2] * k3.ne[2];
  for (int s = 0; s < SEQS; s++) {
    ks[s] = keys_view (&d->ck[s]);
    vs[s] = keys_view (&d->cv[s]);
  }
  OK (dfl_op_rope (dev, &k3, &d->inv_freq, &d->pos, &op_error));
  OK (dfl_op_rope (dev, &d->q, &d->inv_freq, &d->pos, &op_error));
  /* K's new rows to both caches (V's cache gets the same rows) */
  OK (dfl_op_copy_rows_table (dev, &d->k_new, d->ck, SEQS, &d->which, &d->pos, &op_error));
  OK (dfl_op_copy_rows_table (dev, &d->k_new, d->cv, SEQS, &d->which, &d->pos, &op_error));
  OK (dfl_op_attention_table (dev, &d->q, ks, vs, SEQS, &d->which, &d->lo, &d->hi, &d->out,
                              scale, &op_error));
}

static void
inv_freq_of (float *inv_freq)
{
  for (int i = 0; i < HD / 2; i++)
    inv_freq[i] = (float) pow (1000000.0, -(2.0 * i) / HD);
}

/* The card's table ops against the CPU's; its table attention against its
 * attention of each sequence alone. */
static void
test_against_cpu (void)
{
  g_autoptr (GRand) r = g_rand_new_with_seed (17);
  Step st;
  OnDevice on_card, on_cpu;
  float inv_freq[HD / 2];
  g_autofree float *got = NULL, *want = NULL, *alone = NULL;
  gsize qn;

  inv_freq_of (inv_freq);
  step_make (&st, r, 0);
  qn = (gsize) st.rows * Q_ROW;
  on_device (&on_card, card, &st, inv_freq);
  on_device (&on_cpu, cpu, &st, inv_freq);
  run_step (card, &on_card);
  run_step (cpu, &on_cpu);

  got = g_new (float, MAX (qn, (gsize) 64 * 24 * KV_ROW));
  want = g_new (float, MAX (qn, (gsize) 64 * 24 * KV_ROW));
  /* the roped queries went into attention; the caches hold the roped keys */
  for (int s = 0; s < SEQS; s++) {
    gsize n = (gsize) st.cap[s] * KV_ROW;
    get (&on_card.ck[s], got);
    get (&on_cpu.ck[s], want);
    assert_close ("k cache (rope, copy_rows_table)", got, want, n, 1e-5);
    get (&on_card.cv[s], got);
    get (&on_cpu.cv[s], want);
    assert_close ("v cache (rope, copy_rows_table)", got, want, n, 1e-5);
  }
  get (&on_card.q, got);
  get (&on_cpu.q, want);
  assert_close ("q (rope at a position per row)", got, want, qn, 1e-5);
  get (&on_card.out, got);
  get (&on_cpu.out, want);
  assert_close ("attention_table", got, want, qn, 1e-5);

  /* each sequence's rows alone through the card's plain attention, over
   * the caches the table ops wrote: bitwise */
  alone = g_new (float, (gsize) 16 * Q_ROW);
  for (int s = 0, at = 0; s < SEQS; at += st.n[s], s++) {
    DflTensor q = on_card.q, out = put (card, DFL_DTYPE_F32, HD, HEADS, st.n[s], NULL);
    DflTensor lo = put (card, DFL_DTYPE_I32, st.n[s], 1, 1, st.lo + at);
    DflTensor hi = put (card, DFL_DTYPE_I32, st.n[s], 1, 1, st.hi + at);
    DflTensor k = keys_view (&on_card.ck[s]), v = keys_view (&on_card.cv[s]);
    q.offset += (gsize) at * Q_ROW * sizeof (float);
    q.ne[2] = st.n[s];
    q.nb[3] = q.nb[2] * st.n[s];
    OK (dfl_op_attention (card, &q, &k, &v, &lo, &hi, &out, 1.0f / sqrtf (HD), &op_error));
    get (&out, alone);
    get (&on_card.out, got);
    g_assert_cmpmem (got + (gsize) at * Q_ROW, sizeof (float) * st.n[s] * Q_ROW, alone,
                     sizeof (float) * st.n[s] * Q_ROW);
  }
  step_clear (&st);
  g_ptr_array_set_size (held, 0);
}

/* The ops captured once, then replayed over other positions, entries and
 * ranges: bitwise what launching them directly gives. */
static void
test_graph (void)
{
  g_autoptr (GRand) r = g_rand_new_with_seed (23);
  g_autoptr (GError) error = NULL;
  g_autoptr (DflGraph) graph = NULL;
  Step st;
  OnDevice replayed, direct;
  float inv_freq[HD / 2];
  g_autofree float *a = NULL, *b = NULL;
  gsize qn;

  if (!dfl_device_supports (card, DFL_OP_CAPTURE_BEGIN, DFL_DTYPE_F32)) {
    g_test_skip ("the card's back end records no graphs");
    return;
  }
  inv_freq_of (inv_freq);
  step_make (&st, r, 0);
  qn = (gsize) st.rows * Q_ROW;
  on_device (&replayed, card, &st, inv_freq);
  on_device (&direct, card, &st, inv_freq);
  /* once directly (the scratch attention needs is made outside the
   * capture), then recorded (a capture runs nothing); the direct copy
   * runs the same first step */
  run_step (card, &replayed);
  g_assert_true (dfl_op_capture_begin (card, &error));
  g_assert_no_error (error);
  run_step (card, &replayed);
  graph = dfl_op_capture_end (card, &error);
  g_assert_no_error (error);
  g_assert_nonnull (graph);
  run_step (card, &direct);

  /* the next step: each sequence's rows to another entry of the table
   * (7 and SEQS share no factor: one sequence an entry), at other
   * positions and ranges */
  for (int s = 0, at = 0; s < SEQS; s++) {
    int e = (s * 7 + 3) % SEQS, from = (st.cap[e] - 16) / 2 + s % 5;
    for (int i = 0; i < st.n[s]; i++, at++) {
      st.which[at] = e;
      st.pos[at] = from + i;
      st.lo[at] = s % 3 ? from / 3 : 0;
      st.hi[at] = from + i + 1;
    }
  }
  refill (&replayed.pos, st.pos);
  refill (&replayed.which, st.which);
  refill (&replayed.lo, st.lo);
  refill (&replayed.hi, st.hi);
  refill (&direct.pos, st.pos);
  refill (&direct.which, st.which);
  refill (&direct.lo, st.lo);
  refill (&direct.hi, st.hi);
  g_assert_true (dfl_op_graph_launch (card, graph, &error));
  g_assert_no_error (error);
  run_step (card, &direct);

  a = g_new (float, MAX (qn, (gsize) 64 * 24 * KV_ROW));
  b = g_new (float, MAX (qn, (gsize) 64 * 24 * KV_ROW));
  get (&replayed.out, a);
  get (&direct.out, b);
  g_assert_cmpmem (a, sizeof (float) * qn, b, sizeof (float) * qn);
  get (&replayed.q, a);
  get (&direct.q, b);
  g_assert_cmpmem (a, sizeof (float) * qn, b, sizeof (float) * qn);
  for (int s = 0; s < SEQS; s++) {
    gsize n = (gsize) st.cap[s] * KV_ROW * sizeof (float);
    get (&replayed.ck[s], a);
    get (&direct.ck[s], b);
    g_assert_cmpmem (a, n, b, n);
    get (&replayed.cv[s], a);
    get (&direct.cv[s], b);
    g_assert_cmpmem (a, n, b, n);
  }
  step_clear (&st);
  g_ptr_array_set_size (held, 0);
}

int
main (int argc, char **argv)
{
  g_autoptr (GError) error = NULL;
  int status;

  g_test_init (&argc, &argv, NULL);
  card = dfl_device_open (DFL_BACKEND_CUDA, -1, &error);
  if (!card) {
    printf ("1..0 # SKIP %s\n", error->message);
    return 0;
  }
  cpu = dfl_device_open (DFL_BACKEND_CPU, -1, &error);
  g_assert_no_error (error);
  held = g_ptr_array_new_with_free_func (held_free);
  g_test_message ("device: %s", dfl_device_describe (card));
  g_test_add_func ("/cuda-tables/against-cpu", test_against_cpu);
  g_test_add_func ("/cuda-tables/graph", test_graph);
  status = g_test_run ();
  g_ptr_array_unref (held);
  dfl_device_unref (cpu);
  dfl_device_unref (card);
  return status;
}
