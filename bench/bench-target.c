/* gst-dflash — the CPU target's speed against its memory-bandwidth floor.
 *
 *   bench-target [--target DIR] [--prompt N] [--decode N] [--verify-rows N]
 *
 * Without --target it writes a random BF16 Qwen3 checkpoint of about 41M
 * parameters (hidden 512, 8 layers, 8 heads over 4, head_dim 64,
 * intermediate 1536, vocab 32000, tied) to a temporary folder and runs that.
 * Prints prefill and decode tokens/s, and decode's floor: the weight bytes one
 * decode step reads (as stored: BF16 here) over the copy bandwidth measured
 * in the same run, with their ratio. Then what a verification costs: a pass
 * of 2 … N rows (default 16) at the decode position, each the median of
 * several, as a multiple of a one-row step measured in the same loop — the
 * figure a speculative round's speed-up is made of. Then a batch: N
 * sequences (default 4) of one row each in one dfl_target_forward_batch
 * against the same rows a sequence at a time, interleaved, as a ratio. A
 * benchmark, not a test: it asserts nothing about time.
 */
#include <cjson/cJSON.h>
#include <glib/gstdio.h>
#include <stdio.h>
#include <string.h>

#include "bench-common.h"
#include "dfl-kernels.h"
#include "qwen3-weights.h"
#include "safetensors.h"
#include "target.h"

typedef struct {
  int hidden, layers, heads, kv_heads, head_dim, intermediate, vocab;
} Shape;

static gboolean
add_random (DflSafetensorsWriter *w, GRand *rng, const char *name, gint64 d0, gint64 d1,
            float scale, float offset, GError **error)
{
  gint64 shape[2] = { d0, d1 };
  gsize n = d0 * (d1 ? d1 : 1);
  g_autofree float *data = g_new (float, n);

  for (gsize i = 0; i < n; i++)
    data[i] = offset + scale * (float) (g_rand_double (rng) * 2 - 1);
  return dfl_safetensors_writer_add_f32 (w, name, DFL_DTYPE_BF16, d1 ? 2 : 1, shape, data, error);
}

static char *
write_random_checkpoint (const Shape *s, GError **error)
{
  g_autofree char *dir = g_dir_make_tmp ("dflash-bench-XXXXXX", error);
  g_autoptr (DflSafetensorsWriter) w = dfl_safetensors_writer_new ();
  g_autoptr (GRand) rng = g_rand_new_with_seed (7);
  g_autofree char *st_path = NULL, *cfg_path = NULL, *json = NULL;
  /* the shapes of a checkpoint of this size (qwen3-weights.h) */
  DflQwen3Config c = { .hidden = s->hidden, .intermediate = s->intermediate,
                       .layers = s->layers, .heads = s->heads, .kv_heads = s->kv_heads,
                       .head_dim = s->head_dim, .vocab = s->vocab };
  float ws = 0.05f;
  cJSON *cfg, *arch;

  if (!dir)
    return NULL;
  if (!add_random (w, rng, "model.embed_tokens.weight", s->vocab, s->hidden, ws, 0, error)
      || !add_random (w, rng, "model.norm.weight", s->hidden, 0, 0.1f, 1, error))
    return NULL;
  for (int i = 0; i < s->layers; i++) {
    /* each layer's matrices, then its norms (near one) */
    for (int m = 0; m < DFL_QWEN3_N_MATRICES; m++) {
      g_autofree char *name = dfl_qwen3_layer_tensor_name (i, dfl_qwen3_matrix_name (m));
      gint64 rows, cols;
      dfl_qwen3_matrix_shape (&c, m, &rows, &cols);
      if (!add_random (w, rng, name, rows, cols, ws, 0, error))
        return NULL;
    }
    for (int n = 0; n < DFL_QWEN3_N_NORMS; n++) {
      g_autofree char *name = dfl_qwen3_layer_tensor_name (i, dfl_qwen3_norm_name (n));
      if (!add_random (w, rng, name, dfl_qwen3_norm_size (&c, n), 0, 0.1f, 1, error))
        return NULL;
    }
  }
  st_path = g_build_filename (dir, "model.safetensors", NULL);
  if (!dfl_safetensors_writer_write (w, st_path, error))
    return NULL;

  cfg = cJSON_CreateObject ();
  arch = cJSON_AddArrayToObject (cfg, "architectures");
  cJSON_AddItemToArray (arch, cJSON_CreateString ("Qwen3ForCausalLM"));
  cJSON_AddStringToObject (cfg, "model_type", "qwen3");
  cJSON_AddNumberToObject (cfg, "hidden_size", s->hidden);
  cJSON_AddNumberToObject (cfg, "intermediate_size", s->intermediate);
  cJSON_AddNumberToObject (cfg, "num_hidden_layers", s->layers);
  cJSON_AddNumberToObject (cfg, "num_attention_heads", s->heads);
  cJSON_AddNumberToObject (cfg, "num_key_value_heads", s->kv_heads);
  cJSON_AddNumberToObject (cfg, "head_dim", s->head_dim);
  cJSON_AddNumberToObject (cfg, "vocab_size", s->vocab);
  cJSON_AddNumberToObject (cfg, "max_position_embeddings", 4096);
  cJSON_AddNumberToObject (cfg, "rms_norm_eps", 1e-6);
  cJSON_AddNumberToObject (cfg, "rope_theta", 1000000);
  cJSON_AddBoolToObject (cfg, "tie_word_embeddings", 1);
  json = cJSON_Print (cfg);
  cJSON_Delete (cfg);
  cfg_path = g_build_filename (dir, "config.json", NULL);
  if (!g_file_set_contents (cfg_path, json, -1, error))
    return NULL;
  return g_steal_pointer (&dir);
}

static void
remove_checkpoint (const char *dir)
{
  const char *files[] = { "model.safetensors", "config.json" };

  for (guint i = 0; i < G_N_ELEMENTS (files); i++) {
    g_autofree char *p = g_build_filename (dir, files[i], NULL);
    g_unlink (p);
  }
  g_rmdir (dir);
}

int
main (int argc, char **argv)
{
  g_autofree char *target_dir = NULL, *made = NULL;
  int prompt = 128, decode = 64, verify_rows = 16, batch = 4;
  GOptionEntry entries[] = {
    { "target", 0, 0, G_OPTION_ARG_FILENAME, &target_dir, "Qwen3 checkpoint folder (default: a random 41M one)", "DIR" },
    { "prompt", 0, 0, G_OPTION_ARG_INT, &prompt, "Prompt tokens for prefill (default 128)", "N" },
    { "decode", 0, 0, G_OPTION_ARG_INT, &decode, "Decode steps (default 64)", "N" },
    { "verify-rows", 0, 0, G_OPTION_ARG_INT, &verify_rows, "Largest verification pass timed (default 16; 1 skips them)", "N" },
    { "batch", 0, 0, G_OPTION_ARG_INT, &batch, "Sequences of the batched step timed (default 4; 1 skips it)", "N" },
    { NULL }
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("- the CPU target's speed");
  g_autoptr (GError) error = NULL;
  g_autoptr (DflTarget) t = NULL;
  g_autoptr (DflTargetSeq) seq = NULL;
  g_autofree int *ids = NULL;
  g_autofree float *logits = NULL;
  const DflQwen3Config *c;
  double bw, rbw, t0, prefill_s, decode_s, floor_s, step_s;
  int tok;

  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!g_option_context_parse (ctx, &argc, &argv, &error) || prompt < 1 || decode < 1
      || verify_rows < 1 || verify_rows > 64 || batch < 1 || batch > 64) {
    fprintf (stderr, "bench-target: %s\n", error ? error->message
             : "--prompt and --decode must be ≥ 1, --verify-rows and --batch 1 … 64");
    return 2;
  }
  if (!target_dir) {
    Shape s = { 512, 8, 8, 4, 64, 1536, 32000 };
    fprintf (stderr, "writing a random BF16 checkpoint …\n");
    if (!(made = write_random_checkpoint (&s, &error))) {
      fprintf (stderr, "bench-target: %s\n", error->message);
      return 1;
    }
    target_dir = g_strdup (made);
  }
  if (!(t = dfl_target_load (target_dir, &error))) {
    fprintf (stderr, "bench-target: %s\n", error->message);
    return 1;
  }
  c = dfl_target_config (t);
  if (prompt + decode + verify_rows > c->max_positions) {
    fprintf (stderr, "bench-target: --prompt + --decode pass max_position_embeddings %d\n", c->max_positions);
    return 2;
  }

  bw = dfl_bench_copy_bandwidth (512);
  rbw = dfl_bench_read_bandwidth (512);
  ids = g_new (int, prompt);
  for (int i = 0; i < prompt; i++)
    ids[i] = (i * 7919 + 13) % c->vocab;
  logits = g_new (float, (gsize) c->vocab * verify_rows);
  seq = dfl_target_seq_new (t);

  /* one warm-up pass so first-touch page faults of the weights stay out */
  {
    DflForwardOut out = { .logits_from = prompt - 1, .logits = logits };
    dfl_target_forward (t, seq, ids, prompt, &out, NULL);
    dfl_target_seq_truncate (seq, 0);
  }
  t0 = dfl_bench_now ();
  {
    DflForwardOut out = { .logits_from = prompt - 1, .logits = logits };
    dfl_target_forward (t, seq, ids, prompt, &out, NULL);
  }
  prefill_s = dfl_bench_now () - t0;
  t0 = dfl_bench_now ();
  for (int i = 0; i < decode; i++) {
    DflForwardOut out = { .logits_from = 0, .logits = logits };
    tok = dfl_argmax (logits, c->vocab);
    dfl_target_forward (t, seq, &tok, 1, &out, NULL);
  }
  decode_s = dfl_bench_now () - t0;

  step_s = decode_s / decode;
  floor_s = dfl_target_weight_bytes (t) / bw;
  printf ("target:         %s (%" G_GINT64_FORMAT " parameters, hidden %d, %d layers)\n",
          made ? "random BF16 checkpoint" : target_dir, dfl_target_n_params (t), c->hidden, c->layers);
  printf ("threads:        %d\n", dfl_kernels_threads ());
  printf ("copy bandwidth: %.2f GB/s (memcpy)\n", bw / 1e9);
  printf ("read bandwidth: %.2f GB/s (streaming sum, all threads)\n", rbw / 1e9);
  printf ("prefill:        %.1f tokens/s (%d tokens)\n", prompt / prefill_s, prompt);
  printf ("decode:         %.1f tokens/s (%d steps, %.2f ms a step)\n", decode / decode_s, decode, step_s * 1e3);
  printf ("decode floor:   %.2f ms a step (%.1f MB of weights as stored a step / copy bandwidth)\n",
          floor_s * 1e3, dfl_target_weight_bytes (t) / 1e6);
  printf ("decode / floor: %.2fx\n", step_s / floor_s);
  printf ("read floor:     %.2f ms a step (the same bytes / read bandwidth); decode / read floor: %.2fx\n",
          dfl_target_weight_bytes (t) / rbw * 1e3, step_s / (dfl_target_weight_bytes (t) / rbw));
  if (verify_rows > 1) {
    /* one-row steps and n-row passes interleaved at the same position, so
     * both see the same machine; each figure a median */
    enum { REPS = 15 };
    int at = dfl_target_seq_length (seq);
    int vids[64];
    for (int i = 0; i < verify_rows; i++)
      vids[i] = (i * 31 + 5) % c->vocab;
    printf ("verify pass:    rows  ms      x one-row step\n");
    for (int n = 2; n <= verify_rows; n++) {
      double one[REPS], many[REPS], m1, mn;
      for (int r = 0; r < REPS; r++) {
        DflForwardOut out = { .logits_from = 0, .logits = logits };
        t0 = dfl_bench_now ();
        dfl_target_forward (t, seq, vids, 1, &out, NULL);
        one[r] = dfl_bench_now () - t0;
        dfl_target_seq_truncate (seq, at);
        t0 = dfl_bench_now ();
        dfl_target_forward (t, seq, vids, n, &out, NULL);
        many[r] = dfl_bench_now () - t0;
        dfl_target_seq_truncate (seq, at);
      }
      m1 = dfl_bench_median (one, REPS);
      mn = dfl_bench_median (many, REPS);
      printf ("                %4d  %6.2f  %.2fx\n", n, mn * 1e3, mn / m1);
    }
  }
  if (batch > 1) {
    /* every sequence holds the prompt; each step is one row per sequence,
     * batched or one sequence a forward, interleaved; the rows are then
     * rewound so every step runs at the same positions */
    enum { REPS = 15 };
    g_autofree DflTargetSeq **seqs = g_new0 (DflTargetSeq *, batch);
    g_autofree DflTargetBatchItem *items = g_new (DflTargetBatchItem, batch);
    g_autofree DflForwardOut *outs = g_new0 (DflForwardOut, batch);
    g_autofree float *batch_logits = g_new (float, (gsize) batch * c->vocab);
    g_autofree int *step_ids = g_new (int, batch);
    double together[REPS], apart[REPS], mt, ma;

    for (int b = 0; b < batch; b++) {
      DflForwardOut out = { .logits_from = prompt - 1, .logits = logits };
      seqs[b] = dfl_target_seq_new (t);
      dfl_target_forward (t, seqs[b], ids, prompt, &out, NULL);
      step_ids[b] = (b * 101 + 7) % c->vocab;
      outs[b] = (DflForwardOut) { .logits_from = 0, .logits = batch_logits + (gsize) b * c->vocab };
      items[b] = (DflTargetBatchItem) { seqs[b], &step_ids[b], 1, &outs[b] };
    }
    for (int r = 0; r < REPS; r++) {
      t0 = dfl_bench_now ();
      dfl_target_forward_batch (t, items, batch, NULL);
      together[r] = dfl_bench_now () - t0;
      for (int b = 0; b < batch; b++)
        dfl_target_seq_truncate (seqs[b], prompt);
      t0 = dfl_bench_now ();
      for (int b = 0; b < batch; b++)
        dfl_target_forward (t, seqs[b], &step_ids[b], 1, &outs[b], NULL);
      apart[r] = dfl_bench_now () - t0;
      for (int b = 0; b < batch; b++)
        dfl_target_seq_truncate (seqs[b], prompt);
    }
    mt = dfl_bench_median (together, REPS);
    ma = dfl_bench_median (apart, REPS);
    printf ("batch:          %d sequences of one row: %.2f ms batched, %.2f ms one by one: "
            "%.2fx\n", batch, mt * 1e3, ma * 1e3, ma / mt);
    for (int b = 0; b < batch; b++)
      dfl_target_seq_free (seqs[b]);
  }
  if (made)
    remove_checkpoint (made);
  return 0;
}
