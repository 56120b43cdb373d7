/* gst-dflash — the CUDA target's step times against the card's bandwidth floor.
 *
 *   bench-cuda-target [--context N] [--steps N] [--verify N] [--batch N] [--batch-rows R]
 *                     [--layers N]
 *                     [--device N]
 *
 * A Qwen3-8B-shaped target (36 layers, hidden 4096, 32 heads over 8,
 * head_dim 128, intermediate 12288, vocab 151936, untied) with random BF16
 * weights made on the card, no files. It prefills --context tokens (default
 * 1024), then times at that context:
 *   - plain decode: one token a forward, its argmax brought back;
 *   - verify: --verify rows (default 16) a forward, every row's argmax back,
 *     the cache truncated back after each, as a speculative round does;
 * each --steps times (default 32) after a warm-up, and prints the median
 * against the floor: the weight bytes a step reads over the rate at which the
 * card reads memory, measured in the same run by a pure-read pass over 1 GiB
 * (and, apart, with the KV cache the step's attention reads). The floor over
 * the device-to-device copy rate stands beside it, labelled: a copy counts
 * each byte once but moves it twice, so that floor is about twice as far off
 * as a step that only reads. A benchmark, not a test: it asserts nothing
 * about time.
 * The same steps are then timed on a second sequence of the same context
 * with the products' overlapped launches off (dfl_cuda_device_set_overlap;
 * its graphs captured so), and the two set side by side.
 * With --batch N (default 0: none) it then gives N sequences the same
 * context and times a step of all of them, --batch-rows R rows each
 * (default 1: decoding; 16: a verify step of each), in one
 * dfl_target_forward_batch, against one sequence's step of R rows (the
 * decode or verify step above): the aggregate rows/s of N sequences
 * together; the batched step as a replayed graph (where it fits one: up to
 * 64 sequences and 512 rows) and launched op by op, both measured in the
 * same run.
 */
#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench-common.h"
#include "qwen3-8b-shape.h"
#include "dfl-cuda.h"
#include "target.h"

/* Median seconds of `steps` forwards of `rows` tokens at position `at`, the
 * cache truncated back to `at` after each; every row's argmax comes back. */
/* Median seconds of `steps` batched forwards of `rows` rows of each of `n`
 * sequences at position `at`, each cache truncated back after each;
 * every row's argmax comes back. */
static gboolean
time_batch (DflTarget *t, DflTargetSeq **seqs, int n, int rows, int at, int steps, GRand *rng,
            double *seconds, GError **error)
{
  int vocab = dfl_target_config (t)->vocab;
  g_autofree int *ids = g_new (int, (gsize) n * rows);
  g_autofree int32_t *argmax = g_new (int32_t, (gsize) n * rows);
  g_autofree DflForwardOut *outs = g_new0 (DflForwardOut, n);
  g_autofree DflTargetBatchItem *items = g_new (DflTargetBatchItem, n);
  g_autofree double *times = g_new (double, steps);

  for (int b = 0; b < n; b++) {
    outs[b].argmax = &argmax[(gsize) b * rows];
    items[b] = (DflTargetBatchItem) { seqs[b], &ids[(gsize) b * rows], rows, &outs[b] };
  }
  for (int s = -3; s < steps; s++) {   /* three warm-up steps */
    double t0;
    for (int b = 0; b < n * rows; b++)
      ids[b] = g_rand_int_range (rng, 0, vocab);
    t0 = dfl_bench_now ();
    if (!dfl_target_forward_batch (t, items, n, error))
      return FALSE;
    if (s >= 0)
      times[s] = dfl_bench_now () - t0;
    for (int b = 0; b < n; b++)
      dfl_target_seq_truncate (seqs[b], at);
  }
  *seconds = dfl_bench_median (times, steps);
  return TRUE;
}

static gboolean
time_steps (DflTarget *t, DflTargetSeq *seq, int at, int rows, int steps,
            GRand *rng, double *seconds, GError **error)
{
  int vocab = dfl_target_config (t)->vocab;
  g_autofree int *ids = g_new (int, rows);
  g_autofree int32_t *argmax = g_new (int32_t, rows);
  g_autofree double *times = g_new (double, steps);
  DflForwardOut out = { 0 };

  out.argmax = argmax;
  for (int s = -3; s < steps; s++) {   /* three warm-up steps */
    double t0;
    for (int i = 0; i < rows; i++)
      ids[i] = g_rand_int_range (rng, 0, vocab);
    t0 = dfl_bench_now ();
    if (!dfl_target_forward (t, seq, ids, rows, &out, error))
      return FALSE;
    if (s >= 0)
      times[s] = dfl_bench_now () - t0;
    dfl_target_seq_truncate (seq, at);
  }
  *seconds = dfl_bench_median (times, steps);
  return TRUE;
}

int
main (int argc, char **argv)
{
  int context = 1024, steps = 32, verify = 16, layers = 36, ordinal = 0, batch = 0,
      batch_rows = 1;
  GOptionEntry entries[] = {
    { "context", 0, 0, G_OPTION_ARG_INT, &context, "Tokens in the cache when timing (1024)", "N" },
    { "steps", 0, 0, G_OPTION_ARG_INT, &steps, "Timed forwards of each kind (32)", "N" },
    { "verify", 0, 0, G_OPTION_ARG_INT, &verify, "Rows of a verify step (16)", "N" },
    { "batch", 0, 0, G_OPTION_ARG_INT, &batch, "Sequences of a batched decode step (0: none)", "N" },
    { "batch-rows", 0, 0, G_OPTION_ARG_INT, &batch_rows, "Rows of each sequence in the batched step (1: decode; --verify's count: a verify step)", "R" },
    { "layers", 0, 0, G_OPTION_ARG_INT, &layers, "Layers of the model (36)", "N" },
    { "device", 0, 0, G_OPTION_ARG_INT, &ordinal, "CUDA device ordinal (0)", "N" },
    { NULL }
  };
  g_autoptr (GOptionContext) octx = g_option_context_new ("— the CUDA target's step times");
  g_autoptr (GError) error = NULL;
  g_autoptr (DflDevice) device = NULL;
  DflCudaDevice *dev;
  g_autoptr (DflTarget) t = NULL;
  g_autoptr (DflTargetSeq) seq = NULL;
  g_autoptr (GRand) rng = g_rand_new_with_seed (11);
  g_autofree int *prompt = NULL;
  DflQwen3Config c = { 0 };
  double bw, copy_bw, floor_s, kv_floor_s, t_prefill, t_decode, t_verify;
  double t_decode_serial, t_verify_serial;
  guint64 weight_bytes, kv_bytes;

  g_option_context_add_main_entries (octx, entries, NULL);
  if (!g_option_context_parse (octx, &argc, &argv, &error)) {
    fprintf (stderr, "bench-cuda-target: %s\n", error->message);
    return 2;
  }
  if (batch < 0 || batch > 256 || batch_rows < 1 || batch_rows > 64) {
    fprintf (stderr, "bench-cuda-target: --batch %d is not 0 … 256, or --batch-rows %d not "
             "1 … 64\n", batch, batch_rows);
    return 2;
  }
  if (context < 1 || steps < 1 || verify < 1 || layers < 1) {
    fprintf (stderr, "bench-cuda-target: --context, --steps, --verify and --layers must be "
             "positive (got %d, %d, %d, %d)\n", context, steps, verify, layers);
    return 2;
  }

  c = dfl_bench_qwen3_8b_config (layers);
  if (context + verify > c.max_positions) {
    fprintf (stderr, "bench-cuda-target: --context %d and --verify %d pass the model's %d "
             "positions\n", context, verify, c.max_positions);
    return 2;
  }

  if (!(device = dfl_device_open (DFL_BACKEND_CUDA, ordinal, &error))) {
    fprintf (stderr, "bench-cuda-target: %s\n", error->message);
    return 1;
  }
  dev = dfl_device_native (device);
  bw = dfl_cuda_read_bandwidth (dev, (size_t) 1 << 30, &error);
  if (bw <= 0 || error)
    goto fail;
  copy_bw = dfl_cuda_copy_bandwidth (dev, (size_t) 1 << 30, &error);
  if (copy_bw <= 0 || error)
    goto fail;
  if (!(t = dfl_target_new_random (device, &c, DFL_DTYPE_BF16, 1, &error)))
    goto fail;
  if (!(seq = dfl_target_seq_new (t))
      || !dfl_target_seq_reserve (seq, context + verify, &error))
    goto fail;

  prompt = g_new (int, context);
  for (int i = 0; i < context; i++)
    prompt[i] = g_rand_int_range (rng, 0, c.vocab);
  {
    /* the prefill, timed once (chunks of 512 rows) after an untimed one that
     * sizes the scratch and wakes cuBLAS; then the context stays */
    DflForwardOut out = { 0 };
    int32_t last;
    double t0;
    out.logits_from = context - 1;
    out.argmax = &last;
    if (!dfl_target_forward (t, seq, prompt, context, &out, &error))
      goto fail;
    dfl_target_seq_truncate (seq, 0);
    t0 = dfl_bench_now ();
    if (!dfl_target_forward (t, seq, prompt, context, &out, &error))
      goto fail;
    t_prefill = dfl_bench_now () - t0;
  }
  if (!time_steps (t, seq, context, 1, steps, rng, &t_decode, &error)
      || !time_steps (t, seq, context, verify, steps, rng, &t_verify, &error))
    goto fail;
  {
    /* a sequence's graphs are its own: a second one captures its steps
     * with the launches waiting for the one before */
    g_autoptr (DflTargetSeq) serial = dfl_target_seq_new (t);
    DflForwardOut out = { 0 };
    int32_t last;
    gboolean ok;
    out.logits_from = context - 1;
    out.argmax = &last;
    ok = serial && dfl_target_seq_reserve (serial, context + verify, &error)
         && dfl_target_forward (t, serial, prompt, context, &out, &error);
    dfl_cuda_device_set_overlap (dev, FALSE);
    ok = ok && time_steps (t, serial, context, 1, steps, rng, &t_decode_serial, &error)
         && time_steps (t, serial, context, verify, steps, rng, &t_verify_serial, &error);
    dfl_cuda_device_set_overlap (dev, TRUE);
    if (!ok)
      goto fail;
  }

  weight_bytes = dfl_target_weight_bytes (t);
  /* K and V of every layer over the context, in the cache's type */
  kv_bytes = (guint64) 2 * c.layers * context * c.kv_heads * c.head_dim
             * dfl_dtype_size (dfl_target_kv_type (t));
  floor_s = weight_bytes / bw;
  kv_floor_s = (weight_bytes + kv_bytes) / bw;

  printf ("device                     %s\n", dfl_cuda_device_describe (dev));
  printf ("model                      Qwen3-8B shape, %d layers, BF16 random weights\n",
          c.layers);
  printf ("read bandwidth             %.0f GB/s (a pure-read pass over 1 GiB, this run)\n",
          bw / 1e9);
  printf ("copy bandwidth             %.0f GB/s (device to device, bytes copied; each is read\n"
          "                           and written, so it is not a step's floor: shown apart)\n",
          copy_bw / 1e9);
  printf ("weights per step           %.3f GB\n", weight_bytes / 1e9);
  printf ("KV read at context %-6d  %.3f GB (a %s cache)\n", context, kv_bytes / 1e9,
          dfl_dtype_name (dfl_target_kv_type (t)));
  printf ("floor = weights / read bw  %.3f ms (with the KV read: %.3f ms)\n", floor_s * 1e3,
          kv_floor_s * 1e3);
  printf ("(weights / copy bw         %.3f ms, the older and looser floor)\n",
          weight_bytes / copy_bw * 1e3);
  printf ("\n");
  printf ("%-22s %6s %12s %12s %10s %12s\n", "step (median)", "rows", "ms", "rows/s",
          "× floor", "× floor+KV");
  printf ("%-22s %6d %12.3f %12.1f %10.2f %12.2f\n", "decode", 1, t_decode * 1e3, 1 / t_decode,
          t_decode / floor_s, t_decode / kv_floor_s);
  printf ("%-22s %6d %12.3f %12.1f %10.2f %12.2f\n", "verify", verify, t_verify * 1e3,
          verify / t_verify, t_verify / floor_s, t_verify / kv_floor_s);
  printf ("%-22s %6d %12.3f %12.1f %10s %12s\n", "prefill (one run)", context,
          t_prefill * 1e3, context / t_prefill, "-", "-");
  printf ("\nverify step / decode step  %.2f×\n", t_verify / t_decode);
  printf ("products launched to wait for the launch before them (the overlap off): decode "
          "%.3f ms,\n  verify %.3f ms; with it (above) %.3f× and %.3f× as long\n",
          t_decode_serial * 1e3, t_verify_serial * 1e3, t_decode / t_decode_serial,
          t_verify / t_verify_serial);
  printf ("goal: decode ≤ 1.2× read floor; this run %.2f× (%s)\n", t_decode / floor_s,
          t_decode / floor_s <= 1.2 ? "met" : "not met");
  printf ("goal: verify ≤ %.1f× read floor at context %d; this run %.2f× (%s)\n",
          context >= 4096 ? 1.5 : 1.3, context, t_verify / floor_s,
          t_verify / floor_s <= (context >= 4096 ? 1.5 : 1.3) ? "met" : "not met");
  printf ("(decode's rows/s is its tokens/s; a verify step checks its rows, "
          "not all are accepted)\n");
  if (batch > 0) {
    /* every sequence the same context, prefilled in chunks as above */
    g_autofree DflTargetSeq **seqs = g_new0 (DflTargetSeq *, batch);
    double t_batch, t_direct, t_one = 0;
    gboolean ok = TRUE;

    for (int b = 0; ok && b < batch; b++) {
      DflForwardOut out = { 0 };
      int32_t last;
      out.logits_from = context - 1;
      out.argmax = &last;
      ok = (seqs[b] = dfl_target_seq_new (t)) && dfl_target_seq_reserve (seqs[b], context + 1,
                                                                         &error)
           && dfl_target_forward (t, seqs[b], prompt, context, &out, &error);
    }
    ok = ok && time_batch (t, seqs, batch, batch_rows, context, steps, rng, &t_batch, &error);
    /* the same steps launched op by op */
    dfl_target_set_use_graph (t, FALSE);
    ok = ok && time_batch (t, seqs, batch, batch_rows, context, steps, rng, &t_direct, &error);
    dfl_target_set_use_graph (t, TRUE);
    /* one sequence's step of as many rows (decode's and verify's are
     * timed above) */
    if (ok && batch_rows == 1)
      t_one = t_decode;
    else if (ok && batch_rows == verify)
      t_one = t_verify;
    else
      ok = ok && time_steps (t, seqs[0], context, batch_rows, steps, rng, &t_one, &error);
    for (int b = 0; b < batch; b++)
      g_clear_pointer (&seqs[b], dfl_target_seq_free);
    if (!ok)
      goto fail;
    printf ("\nbatched step: %d sequences, %d row%s each, context %d: %.3f ms a step, "
            "%.1f rows/s,\n              %.2f× one sequence's %d-row step (%.3f ms)%s\n",
            batch, batch_rows, batch_rows == 1 ? "" : "s", context, t_batch * 1e3,
            batch * batch_rows / t_batch, batch * t_one / t_batch, batch_rows, t_one * 1e3,
            batch_rows == 1 ? " (goal at 32: ≥ 20×)" : "");
    printf ("              launched op by op (no graph): %.3f ms a step, %.2f× one "
            "sequence's;\n              the graph %.2f× faster than op by op\n",
            t_direct * 1e3, batch * t_one / t_direct, t_direct / t_batch);
  }
  return 0;

fail:
  fprintf (stderr, "bench-cuda-target: %s\n", error ? error->message : "no bandwidth measured");
  return 1;
}
