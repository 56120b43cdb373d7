/* gst-dflash — the speculative loop on the CUDA back end, end to end, for
 * fixed acceptance patterns, next to plain decoding in the same run.
 *
 *   bench-cuda-loop [--context N] [--rounds N] [--pattern A,B,…] [--sequences N]
 *                   [--device N]
 *
 * A Qwen3-8B-shaped target (36 layers, hidden 4096, 32 heads over 8,
 * head_dim 128, intermediate 12288, vocab 151936, untied) with random BF16
 * weights made on the card, and the public Qwen3-8B DFlash drafter's
 * geometry with this project's convolution and selector (hidden 4096,
 * 5 layers, taps 1, 9, 17, 25, 33, block 16, conv group 8 kernel 4,
 * selector rank 64 top 8) over that target's embedding and head, random
 * BF16 weights on the card too: no files.
 *
 * A round is what the pipeline does per verification: the block and the
 * selection (15 drafted ids back), the target's forward of the anchor and
 * the drafts (taps left on the card, every row's argmax back), then the
 * accepted rows' taps queued into the drafter's context on the device and
 * settled. With random weights the argmax would accept nothing, so the
 * number accepted comes from a fixed pattern instead: --pattern's counts of
 * accepted drafts (0 … 15), cycled round by round; a round emits that many
 * plus the bonus token, so "5,6" is τ 6.5 (τ: tokens emitted per
 * verification). By default a table: τ 1, 3.5, 6.5, 6.5 spread over very
 * unequal rounds, and 16. Every pattern starts from the same prefilled
 * --context (default 1024) and runs --rounds rounds (default 64) after a
 * warm-up; its tokens/s is the tokens emitted over the wall time of those
 * rounds, set against plain decoding's (one token a forward at the same
 * context, its argmax back; the median of --rounds steps).
 *
 * --sequences N (default 1) runs N sequences, each its own prompt, caches
 * and drafter context, through every round together: their N blocks
 * drafted in one pass (dfl_draft_ctx_block_batch; their selections
 * queued together, dfl_draft_ctx_select_batch), verified in one
 * batched forward (dfl_target_forward_batch) and their accepted rows
 * settled in one pass (dfl_draft_ctx_settle_batch); the
 * first sequence's loop alone runs too, each pattern right after the
 * batch's, and the table gives the N sequences' tokens/s against it
 * (× one) as well as against plain decoding.
 *
 * Why: the speculative loop is only worth its drafter where the rounds it
 * saves outweigh the block, the selection and the settle it adds; this says
 * how many times plain decoding the loop gives at each τ on this card, the
 * goal being at least 4× at τ 6.5. A benchmark, not a test: it asserts
 * nothing about time.
 */
#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench-common.h"
#include "qwen3-8b-shape.h"
#include "bench-drafter-weights.h"
#include "dfl-cuda.h"
#include "target.h"

/* Rows of a prefill forward: bounds the taps buffer (a row is n_taps ·
 * hidden floats, 80 KiB here) and matches the drafter's settle batch. */
#define PREFILL_CHUNK 512
/* Untimed rounds of each pattern before its timed ones. */
#define WARMUP_ROUNDS 3

/* The most sequences --sequences takes. */
#define MAX_SEQUENCES 32

/* What every round works on: `n` sequences, each its own target cache,
 * drafter context, taps and block output on the card. */
typedef struct {
  DflTarget *t;
  int n;
  DflTargetSeq *seq[MAX_SEQUENCES];
  DflDraftCtx *ctx[MAX_SEQUENCES];
  DflDraftBatch *batch;   /* n > 1: the blocks drafted in one pass */
  DflDevice *cuda;  /* the card */
  const DflDrafterGeometry *g;
  float *d_taps[MAX_SEQUENCES];   /* a verify pass's taps rows, [block][n_taps·hidden] */
  DflTensor taps[MAX_SEQUENCES];  /* the same as the target's forward writes them */
  float *d_out[MAX_SEQUENCES];    /* a block's rows and logits */
  DflTensor out[MAX_SEQUENCES];
  int vocab;
} Loop;

/* Per-round medians and the totals of a pattern's timed rounds. */
typedef struct {
  double draft, settle, verify, round;   /* median seconds */
  double wall;                           /* all the rounds, to the last sync */
  int emitted;
} Times;

/* `rounds` rounds from `context` (every cache truncated back to it) with
 * `anchor` the last emitted token of every sequence, each accepting
 * pattern[r % n_pattern] drafts in round r. With several sequences a round
 * drafts all their blocks in one pass and verifies all of them in one
 * batched forward. `times` NULL: untimed (a warm-up). */
static gboolean
run_rounds (Loop *L, int context, guint32 anchor, const int *pattern, int n_pattern, int rounds,
            Times *times, GError **error)
{
  int block = L->g->block, n = L->n;
  g_autofree guint32 *chosen = g_new (guint32, (gsize) n * (block - 1));
  g_autofree int *ids = g_new (int, (gsize) n * block);
  g_autofree int32_t *argmax = g_new (int32_t, (gsize) n * block);
  g_autofree double *t_draft = g_new (double, rounds);
  g_autofree double *t_settle = g_new (double, rounds);
  g_autofree double *t_verify = g_new (double, rounds);
  g_autofree double *t_round = g_new (double, rounds);
  DflForwardOut out[MAX_SEQUENCES];
  DflTargetBatchItem items[MAX_SEQUENCES];
  gint64 pos[MAX_SEQUENCES];
  guint32 anchors[MAX_SEQUENCES];
  int emitted = 0;
  double start;

  for (int s = 0; s < n; s++) {
    out[s] = (DflForwardOut) { .tap_layers = L->g->taps, .n_tap_layers = L->g->n_taps,
                               .device_taps = &L->taps[s], .logits_from = 0,
                               .argmax = argmax + (gsize) s * block };
    items[s] = (DflTargetBatchItem) { .seq = L->seq[s], .ids = ids + (gsize) s * block,
                                      .n = block, .out = &out[s] };
    pos[s] = context;
    anchors[s] = anchor;
    dfl_target_seq_truncate (L->seq[s], context);
    dfl_draft_ctx_truncate (L->ctx[s], context);
  }
  start = dfl_bench_now ();
  for (int r = 0; r < rounds; r++) {
    int a = pattern[r % n_pattern];
    double t0, t1, t2, t3;

    /* draft: the blocks are enqueued, the selections bring the ids back
     * (the first one's wait is the blocks' end) */
    t0 = dfl_bench_now ();
    if (n == 1) {
      if (!dfl_draft_ctx_block (L->ctx[0], pos[0], anchors[0], L->vocab, &L->out[0], error))
        return FALSE;
    } else if (!dfl_draft_ctx_block_batch (L->batch, L->ctx, n, pos, anchors, L->vocab, L->out,
                                           error)) {
      return FALSE;
    }
    if (n == 1 ? !dfl_draft_ctx_select (L->ctx[0], &L->out[0], L->vocab, anchors[0], chosen,
                                        NULL, error)
               : !dfl_draft_ctx_select_batch (L->batch, L->ctx, n, L->out, L->vocab, anchors,
                                              chosen, NULL, error))
      return FALSE;
    t1 = dfl_bench_now ();

    /* verify: each anchor and its drafts at its position, all sequences in
     * one forward; the argmax coming back is the forward's end */
    for (int s = 0; s < n; s++) {
      ids[(gsize) s * block] = (int) anchors[s];
      for (int i = 0; i < block - 1; i++)
        ids[(gsize) s * block + i + 1] = (int) chosen[(gsize) s * (block - 1) + i];
    }
    if (n == 1 ? !dfl_target_forward (L->t, L->seq[0], ids, block, &out[0], error)
               : !dfl_target_forward_batch (L->t, items, n, error))
      return FALSE;
    t2 = dfl_bench_now ();

    /* the verdict, from the pattern: the anchor and `a` drafts stay in the
     * target's cache and become the drafter's context (device to device);
     * row a's argmax is the bonus token, the next anchor. Queue then settle
     * as ctxsettle does; the settle's kernels are enqueued, and the next
     * block's parameter upload waits for them, so their device time shows
     * in the next round's draft */
    for (int s = 0; s < n; s++) {
      DflTensor rows = dfl_tensor_2d (L->cuda, L->d_taps[s], 0, DFL_DTYPE_F32, a + 1,
                                      dfl_drafter_geometry_tap_width (L->g));
      dfl_target_seq_truncate (L->seq[s], (int) pos[s] + a + 1);
      if (!dfl_draft_ctx_queue (L->ctx[s], pos[s], &rows, error)
          || (n == 1 && !dfl_draft_ctx_settle (L->ctx[s], error)))
        return FALSE;
      pos[s] += a + 1;
      anchors[s] = (guint32) argmax[(gsize) s * block + a];
    }
    /* several sequences' rows settle in one pass */
    if (n > 1 && !dfl_draft_ctx_settle_batch (L->batch, L->ctx, n, error))
      return FALSE;
    t3 = dfl_bench_now ();

    emitted += n * (a + 1);
    t_draft[r] = t1 - t0;
    t_verify[r] = t2 - t1;
    t_settle[r] = t3 - t2;
    t_round[r] = t3 - t0;
  }
  /* the last settle's kernels are still in flight */
  if (!dfl_cuda_sync (dfl_device_native (dfl_target_device (L->t)), error))
    return FALSE;
  if (times) {
    times->wall = dfl_bench_now () - start;
    times->emitted = emitted;
    times->draft = dfl_bench_median (t_draft, rounds);
    times->settle = dfl_bench_median (t_settle, rounds);
    times->verify = dfl_bench_median (t_verify, rounds);
    times->round = dfl_bench_median (t_round, rounds);
  }
  return TRUE;
}

/* Median seconds of `steps` plain decode steps at position `at`: one token
 * a forward, its argmax back, the cache truncated back after each (as
 * bench-cuda-target's decode). */
static gboolean
time_decode (DflTarget *t, DflTargetSeq *seq, int at, int steps, GRand *rng,
             double *seconds, GError **error)
{
  int vocab = dfl_target_config (t)->vocab;
  g_autofree double *times = g_new (double, steps);
  DflForwardOut out = { 0 };
  int32_t argmax;

  out.argmax = &argmax;
  dfl_target_seq_truncate (seq, at);
  for (int s = -3; s < steps; s++) {   /* three warm-up steps */
    int id = g_rand_int_range (rng, 0, vocab);
    double t0 = dfl_bench_now ();
    if (!dfl_target_forward (t, seq, &id, 1, &out, error))
      return FALSE;
    if (s >= 0)
      times[s] = dfl_bench_now () - t0;
    dfl_target_seq_truncate (seq, at);
  }
  *seconds = dfl_bench_median (times, steps);
  return TRUE;
}

/* "5,6" into counts of accepted drafts, each 0 … max; NULL on a bad list. */
static int *
parse_pattern (const char *s, int max, int *n)
{
  g_auto (GStrv) parts = g_strsplit (s, ",", -1);
  int len = (int) g_strv_length (parts);
  g_autofree int *v = NULL;

  if (len == 0)
    return NULL;
  v = g_new (int, len);
  for (int i = 0; i < len; i++) {
    gint64 x;
    if (!g_ascii_string_to_signed (g_strstrip (parts[i]), 10, 0, max, &x, NULL))
      return NULL;
    v[i] = (int) x;
  }
  *n = len;
  return g_steal_pointer (&v);
}

/* Tokens one cycle of the pattern emits: accepted drafts plus the bonuses
 * (an integer, so that τ 6.5 can be recognised exactly). */
static int
pattern_emitted (const int *p, int n)
{
  int sum = 0;

  for (int i = 0; i < n; i++)
    sum += p[i] + 1;
  return sum;
}

static char *
pattern_string (const int *p, int n)
{
  GString *s = g_string_new (NULL);

  for (int i = 0; i < n; i++)
    g_string_append_printf (s, "%s%d", i ? "," : "", p[i]);
  return g_string_free (s, FALSE);
}

/* A table of the patterns' figures; with `one`, each pattern's tokens/s
 * against the one-sequence loop's too. `goal_x`: the ratio of the first
 * pattern of τ 6.5 (× plain alone, × one with `one`). */
static void
print_table (const char *title, GPtrArray *patterns, GArray *lengths, const Times *times, int n_seq,
             int rounds, double plain_tps, const Times *one, double *goal_x)
{
  if (title)
    printf ("%s:\n", title);
  /* τ and × are two bytes each: their headers' widths are one more */
  printf ("%-12s %7s %10s %10s %10s %10s %11s %10s%s\n", "pattern", "τ", "round ms", "draft ms",
          "verify ms", "settle ms", "tokens/s", "× plain", one ? "    × one" : "");
  for (guint i = 0; i < patterns->len; i++) {
    const int *p = g_ptr_array_index (patterns, i);
    int n = g_array_index (lengths, int, i);
    g_autofree char *name = pattern_string (p, n);
    const Times *m = &times[i];
    double tau = (double) m->emitted / rounds / n_seq, tps = m->emitted / m->wall;
    double x = tps / plain_tps, x_one = one ? tps / (one[i].emitted / one[i].wall) : 0;
    printf ("%-12s %6.2f %10.3f %10.3f %10.3f %10.3f %11.1f %8.2f×", name, tau, m->round * 1e3,
            m->draft * 1e3, m->verify * 1e3, m->settle * 1e3, tps, x);
    if (one)
      printf (" %8.2f×", x_one);
    printf ("\n");
    /* the goal's pattern: the first whose cycle has τ 6.5 exactly */
    if (goal_x && *goal_x < 0 && 2 * pattern_emitted (p, n) == 13 * n)
      *goal_x = one ? x_one : x;
  }
}

int
main (int argc, char **argv)
{
  /* the table: τ 1, 3.5, 6.5, 6.5 spread ((2 + 13 + 3 + 8) / 4), 16 */
  static const char *default_patterns[] = { "0", "2,3", "5,6", "1,12,2,7", "15" };
  static int taps[] = { 1, 9, 17, 25, 33 };
  DflDrafterGeometry g = {
    .hidden = 4096, .intermediate = 12288, .layers = 5, .heads = 32, .kv_heads = 8, .head_dim = 128,
    .vocab = 151936, .block = 16, .mask_token = 151669, .conv_group = 8, .conv_kernel = 4,
    .selector_rank = 64, .selector_top = 8, .n_taps = 5, .taps = taps, .target_layers = 36,
    .window = 0, .rope_theta = 1000000.0, .eps = 1e-6,
  };
  int context = 1024, rounds = 64, ordinal = 0, sequences = 1;
  g_autofree char *pattern_arg = NULL;
  GOptionEntry entries[] = {
    { "context", 0, 0, G_OPTION_ARG_INT, &context,
      "Tokens in the cache when each pattern starts (1024)", "N" },
    { "rounds", 0, 0, G_OPTION_ARG_INT, &rounds,
      "Timed rounds per pattern, and plain decode steps (64)", "N" },
    { "pattern", 0, 0, G_OPTION_ARG_STRING, &pattern_arg,
      "Accepted drafts per round, cycled (0 … 15, comma separated; default a table of five)",
      "A,B,…" },
    { "device", 0, 0, G_OPTION_ARG_INT, &ordinal, "CUDA device ordinal (0)", "N" },
    { "sequences", 0, 0, G_OPTION_ARG_INT, &sequences,
      "Sequences in every round (1): their blocks drafted in one pass, verified in one forward; "
      "above 1 the loop of one sequence runs too, for the ratio", "N" },
    { NULL }
  };
  g_autoptr (GOptionContext) octx =
      g_option_context_new ("— the CUDA speculative loop's tokens/s for fixed acceptance");
  g_autoptr (GError) error = NULL;
  g_autoptr (GRand) rng = g_rand_new_with_seed (11);
  g_autoptr (DflDevice) device = NULL;
  DflCudaDevice *dev = NULL;
  g_autoptr (DflTarget) t = NULL;
  g_autoptr (DflDrafterWeights) cd = NULL;
  g_autoptr (DflDrafterWeights) host_w = NULL;
  DflDraftTrunk trunk;
  g_autoptr (GPtrArray) patterns = g_ptr_array_new_with_free_func (g_free);
  g_autoptr (GArray) lengths = g_array_new (FALSE, FALSE, sizeof (int));
  g_autofree int *prompt = NULL;
  g_autofree Times *times = NULL, *times_one = NULL;
  DflQwen3Config c = { 0 };
  Loop L = { 0 }, one;
  guint32 first_anchor = 0;
  double bw, t_decode, plain_tps, goal_x = -1;
  guint64 target_bytes, drafter_bytes, head_bytes;
  gsize tw;
  int ret = 1;

  g_option_context_add_main_entries (octx, entries, NULL);
  if (!g_option_context_parse (octx, &argc, &argv, &error)) {
    fprintf (stderr, "bench-cuda-loop: %s\n", error->message);
    return 2;
  }
  if (argc > 1) {
    fprintf (stderr, "bench-cuda-loop: unexpected argument '%s'\n", argv[1]);
    return 2;
  }
  if (context < 1 || rounds < 1 || ordinal < 0 || sequences < 1 || sequences > MAX_SEQUENCES) {
    fprintf (stderr, "bench-cuda-loop: --context and --rounds must be positive, --device not "
             "negative, --sequences 1 … %d (got %d, %d, %d, %d)\n", MAX_SEQUENCES, context,
             rounds, ordinal, sequences);
    return 2;
  }
  for (guint i = 0; i < (pattern_arg ? 1 : G_N_ELEMENTS (default_patterns)); i++) {
    const char *s = pattern_arg ? pattern_arg : default_patterns[i];
    int n = 0, *p = parse_pattern (s, g.block - 1, &n);
    if (!p) {
      fprintf (stderr, "bench-cuda-loop: --pattern '%s': expected comma-separated counts of "
               "accepted drafts, each 0 … %d\n", s, g.block - 1);
      return 2;
    }
    g_ptr_array_add (patterns, p);
    g_array_append_val (lengths, n);
  }

  c = dfl_bench_qwen3_8b_config (36);
  /* a pattern grows the context by at most a block a round; the last
   * verify runs a block past that */
  if ((gint64) context + (gint64) g.block * rounds + g.block > c.max_positions) {
    fprintf (stderr, "bench-cuda-loop: --context %d and --rounds %d (up to %d tokens a round, "
             "plus a verify) pass the model's %d positions\n", context, rounds, g.block,
             c.max_positions);
    return 2;
  }

  if (!(device = dfl_device_open (DFL_BACKEND_CUDA, ordinal, &error)))
    goto out;
  dev = dfl_device_native (device);
  bw = dfl_cuda_read_bandwidth (dev, (size_t) 1 << 30, &error);
  if (bw <= 0 || error)
    goto out;
  if (!(t = dfl_target_new_random (device, &c, DFL_DTYPE_BF16, 1, &error)))
    goto out;
  /* the drafter reads the target's own embedding and head on the card */
  trunk.embed = dfl_target_embedding_tensor (t);
  trunk.head = dfl_target_head_tensor (t);
  /* random weights made on the host, uploaded as BF16 */
  if (!(host_w = dfl_bench_drafter_random (&g, DFL_DTYPE_BF16, NULL, NULL, &error))
      || !(cd = dfl_drafter_weights_bind (host_w, device, &trunk, DFL_DTYPE_BF16, &error)))
    goto out;
  tw = (gsize) dfl_drafter_geometry_tap_width (&g);
  L.t = t;
  L.n = sequences;
  L.cuda = device;
  L.g = dfl_drafter_weights_geometry (cd);
  L.vocab = c.vocab;
  if (sequences > 1 && !(L.batch = dfl_draft_batch_new (cd, sequences, &error)))
    goto out;

  /* every sequence: its caches, then its prompt's prefill in chunks, each
   * chunk's taps queued into its drafter's context from the card; the
   * last row's argmax is the first anchor (the prompts differ, the
   * anchor is the first sequence's for all: the drafts come from the
   * pattern anyway) */
  prompt = g_new (int, context);
  for (int s = 0; s < sequences; s++) {
    if (!(L.seq[s] = dfl_target_seq_new (t))
        || !dfl_target_seq_reserve (L.seq[s], context + g.block * rounds + g.block, &error)
        || !(L.ctx[s] = dfl_draft_ctx_new (cd, &error))
        || !(L.d_taps[s] = dfl_cuda_alloc (dev, (gsize) MAX (PREFILL_CHUNK, g.block) * tw
                                           * sizeof (float), &error))
        || !(L.d_out[s] = dfl_cuda_alloc (dev, dfl_draft_ctx_block_bytes (L.ctx[s], c.vocab),
                                          &error)))
      goto out;
    L.taps[s] = dfl_tensor_2d (device, L.d_taps[s], 0, DFL_DTYPE_F32,
                               MAX (PREFILL_CHUNK, g.block), tw);
    L.out[s] = dfl_tensor_2d (device, L.d_out[s], 0, DFL_DTYPE_F32, g.block - 1,
                              g.hidden + c.vocab);
    for (int i = 0; i < context; i++)
      prompt[i] = g_rand_int_range (rng, 0, c.vocab);
    for (int done = 0; done < context; done += PREFILL_CHUNK) {
      int n = MIN (PREFILL_CHUNK, context - done);
      gboolean last = done + n == context;
      DflForwardOut fo = { 0 };
      DflTensor rows;
      int32_t argmax = 0;
      fo.tap_layers = g.taps;
      fo.n_tap_layers = g.n_taps;
      fo.device_taps = &L.taps[s];
      fo.logits_from = n - 1;
      fo.argmax = last ? &argmax : NULL;
      rows = dfl_tensor_2d (device, L.d_taps[s], 0, DFL_DTYPE_F32, n, (gint64) tw);
      if (!dfl_target_forward (t, L.seq[s], prompt + done, n, &fo, &error)
          || !dfl_draft_ctx_queue (L.ctx[s], done, &rows, &error)
          || !dfl_draft_ctx_settle (L.ctx[s], &error))
        goto out;
      if (last && s == 0)
        first_anchor = (guint32) argmax;
    }
  }
  if (!dfl_cuda_sync (dev, &error))
    goto out;
  /* the first sequence alone, for the ratio of many to one */
  one = L;
  one.n = 1;

  if (!time_decode (t, L.seq[0], context, rounds, rng, &t_decode, &error))
    goto out;
  plain_tps = 1 / t_decode;

  /* one untimed pass of the longest growth (every draft accepted): every
   * cache, scratch and attention buffer reaches the size the timed rounds
   * need, so none grows in them, nor is the block's graph captured again */
  {
    int all = g.block - 1;
    if (!run_rounds (&L, context, first_anchor, &all, 1, rounds, NULL, &error)
        || (sequences > 1
            && !run_rounds (&one, context, first_anchor, &all, 1, rounds, NULL, &error)))
      goto out;
  }

  /* each pattern: the sequences together, then (above one) the first
   * alone, one after the other */
  times = g_new0 (Times, patterns->len);
  times_one = g_new0 (Times, patterns->len);
  for (guint i = 0; i < patterns->len; i++) {
    const int *p = g_ptr_array_index (patterns, i);
    int n = g_array_index (lengths, int, i);
    if (!run_rounds (&L, context, first_anchor, p, n, WARMUP_ROUNDS, NULL, &error)
        || !run_rounds (&L, context, first_anchor, p, n, rounds, &times[i], &error))
      goto out;
    if (sequences > 1
        && (!run_rounds (&one, context, first_anchor, p, n, WARMUP_ROUNDS, NULL, &error)
            || !run_rounds (&one, context, first_anchor, p, n, rounds, &times_one[i], &error)))
      goto out;
  }

  target_bytes = dfl_target_weight_bytes (t);
  drafter_bytes = dfl_drafter_weights_bytes (cd);
  head_bytes = (guint64) c.vocab * c.hidden * dfl_dtype_size (DFL_DTYPE_BF16);

  printf ("device                     %s\n", dfl_cuda_device_describe (dev));
  printf ("target                     Qwen3-8B shape: %d layers, hidden %d, %d heads over %d, "
          "head_dim %d,\n"
          "                           intermediate %d, vocab %d, untied; BF16 random weights, "
          "%.3f GB a step\n", c.layers, c.hidden, c.heads, c.kv_heads, c.head_dim,
          c.intermediate, c.vocab, target_bytes / 1e9);
  printf ("drafter                    Qwen3-8B DFlash geometry: hidden %d, %d layers, %d heads "
          "over %d,\n"
          "                           head_dim %d, intermediate %d, block %d, conv group %d "
          "kernel %d,\n"
          "                           selector rank %d top %d, taps %d,%d,%d,%d,%d of %d; BF16 "
          "random,\n"
          "                           the target's embedding and head; %.3f GB (+ head %.3f GB) "
          "a block\n", g.hidden, g.layers, g.heads, g.kv_heads, g.head_dim, g.intermediate,
          g.block, g.conv_group, g.conv_kernel, g.selector_rank, g.selector_top, taps[0],
          taps[1], taps[2], taps[3], taps[4], g.target_layers, drafter_bytes / 1e9,
          head_bytes / 1e9);
  printf ("read bandwidth             %.0f GB/s (a pure-read pass over 1 GiB, this run)\n",
          bw / 1e9);
  printf ("context                    %d tokens at the start of each pattern; %d rounds each "
          "after %d warm-up\n", context, rounds, WARMUP_ROUNDS);
  printf ("plain decode               %.3f ms/token, %.1f tokens/s (median of %d steps at "
          "context %d),\n"
          "                           %.2f× the read floor of its weights\n", t_decode * 1e3,
          plain_tps, rounds, context, t_decode / (target_bytes / bw));
  printf ("\n");
  if (sequences > 1)
    print_table ("one sequence", patterns, lengths, times_one, 1, rounds, plain_tps, NULL, NULL);
  print_table (sequences > 1 ? "all sequences" : NULL, patterns, lengths, times, sequences, rounds,
               plain_tps, sequences > 1 ? times_one : NULL, &goal_x);
  printf ("(τ: tokens emitted per verification, bonus included; round, draft (block + "
          "select),\n"
          " verify (forward, argmax back) and settle (queue + settle; its kernels finish in the\n"
          " next draft): medians; tokens/s: emitted over the wall time of the rounds%s)\n",
          sequences > 1 ? ", all\n sequences together; × one: against the first sequence's "
          "loop alone, this run" : "");
  if (sequences > 1 && goal_x >= 0)
    printf ("goal: %d sequences at τ 6.5 ≥ 8× one sequence's loop (for 16); this run %.2f×\n",
            sequences, goal_x);
  else if (goal_x >= 0)
    printf ("goal: τ 6.5 ≥ 5.5× plain decoding; this run %.2f× (%s)\n", goal_x,
            goal_x >= 5.5 ? "met" : "not met");
  else
    printf ("goal: not measured (no pattern of τ 6.5)\n");
  ret = 0;

out:
  if (ret)
    fprintf (stderr, "bench-cuda-loop: %s\n", error ? error->message : "no bandwidth measured");
  for (int s = 0; s < MAX_SEQUENCES; s++) {
    if (dev) {
      dfl_cuda_free (dev, L.d_taps[s]);
      dfl_cuda_free (dev, L.d_out[s]);
    }
    g_clear_pointer (&L.ctx[s], dfl_draft_ctx_free);
    g_clear_pointer (&L.seq[s], dfl_target_seq_free);
  }
  g_clear_pointer (&L.batch, dfl_draft_batch_free);
  return ret;
}
