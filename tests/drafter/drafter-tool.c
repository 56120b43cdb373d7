/* gst-dflash — drafter-tool: drives the drafter for the parity and bad-input
 * tests.
 *
 *   drafter-tool run DRAFTER TARGET_DIR INPUTS OUT
 *       runs INPUTS' script (its "script" metadata: queue / truncate / reset /
 *       settle / block / dump_ctx / margin) over its "taps" and "tip" rows,
 *       the blocks embedded with and read through TARGET_DIR's embedding and
 *       head, and writes every result to OUT (safetensors).
 *   drafter-tool load DRAFTER            load it (exit 1 with the message)
 *   drafter-tool check DRAFTER TARGET_DIR
 *       load it and check it against the target (its config.json's
 *       num_hidden_layers, hidden_size, vocab_size, tie_word_embeddings)
 *   drafter-tool hash TARGET [--tied]    print the trunk hash
 */
#include "drafter.h"
#include "dfl-error.h"
#include "dfl-kernels.h"

#include <cblas.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

typedef struct {
  DflDrafterWeights *d;
  DflDraftCtx *ctx;
  const DflDrafterGeometry *g;
  float *embed, *head;
  int head_rows;
  const float *taps, *tip;
  gint64 n_taps, n_tip;
  DflSafetensorsWriter *w;
} Run;

static int
die (GError *error)
{
  fprintf (stderr, "%s\n", error->message);
  g_error_free (error);
  return 1;
}

static int
json_int (const cJSON *op, const char *key)
{
  const cJSON *v = cJSON_GetObjectItemCaseSensitive (op, key);

  if (!cJSON_IsNumber (v))
    g_error ("script: an op without \"%s\"", key);
  return (int) v->valuedouble;
}

static void
out_f32 (Run *R, const char *name, guint n_dims, const gint64 *shape, const float *data)
{
  GError *error = NULL;

  if (!dfl_safetensors_writer_add (R->w, name, DFL_DTYPE_F32, n_dims, shape, data, &error))
    g_error ("%s", error->message);
}

static void
out_i32 (Run *R, const char *name, gint64 n, const gint32 *data)
{
  GError *error = NULL;

  if (!dfl_safetensors_writer_add (R->w, name, DFL_DTYPE_I32, 1, &n, data, &error))
    g_error ("%s", error->message);
}

static gboolean
op_block (Run *R, const cJSON *op, GError **error)
{
  const DflDrafterGeometry *g = R->g;
  const char *name = cJSON_GetStringValue (cJSON_GetObjectItemCaseSensitive (op, "name"));
  int pos = json_int (op, "pos"), token = json_int (op, "token"), width = json_int (op, "width");
  int rows = g->block, hs = g->hidden, n = rows - 1;
  float *logits = g_new (float, (gsize) n * width);
  float *out = g_malloc (dfl_draft_ctx_block_bytes (R->ctx, width));
  DflTensor t = dfl_tensor_2d (NULL, out, 0, DFL_DTYPE_F32, n, hs + width);
  guint32 *chosen = g_new (guint32, n), *plain = g_new (guint32, n);
  const float *h;
  char key[128];
  gint64 shape[2];

  g_assert (name && width <= R->head_rows && token < g->vocab);
  /* [anchor, MASK × (block − 1)] in the target's embedding, the layers */
  if (!dfl_draft_ctx_block (R->ctx, pos, (guint32) token, width, &t, error))
    return FALSE;
  /* every row of the block, the anchor's too; the logits of the rows after
   * the anchor over the head's first `width` rows through OpenBLAS: a
   * product independent of the drafter's own kernel */
  h = dfl_draft_ctx_block_rows (R->ctx);
  cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasTrans, n, width, hs, 1.0f, h + hs, hs,
               R->head, hs, 0.0f, logits, width);
  dfl_drafter_weights_select (R->d, h + hs, n, logits, width, (guint32) token, chosen, plain);
  shape[0] = rows, shape[1] = hs;
  g_snprintf (key, sizeof key, "%s.rows", name);
  out_f32 (R, key, 2, shape, h);
  shape[0] = n, shape[1] = width;
  g_snprintf (key, sizeof key, "%s.logits", name);
  out_f32 (R, key, 2, shape, logits);
  g_snprintf (key, sizeof key, "%s.chosen", name);
  out_i32 (R, key, n, (gint32 *) chosen);
  g_snprintf (key, sizeof key, "%s.plain", name);
  out_i32 (R, key, n, (gint32 *) plain);
  g_free (out);
  g_free (logits);
  g_free (chosen);
  g_free (plain);
  return TRUE;
}

/* Every layer's held K and V as [rows][kv_heads][head_dim], and the first
 * position they hold. */
static void
op_dump_ctx (Run *R, const cJSON *op)
{
  const DflDrafterGeometry *g = R->g;
  const char *name = cJSON_GetStringValue (cJSON_GetObjectItemCaseSensitive (op, "name"));
  int kv = g->kv_heads, hd = g->head_dim;
  GError *error = NULL;

  if (!dfl_draft_ctx_settle (R->ctx, &error))
    g_error ("%s", error->message);
  for (int l = 0; l < g->layers; l++) {
    gsize rows = 0;
    gint64 from = 0, one = 1, shape[3];
    float *k, *v;
    char key[128];
    dfl_draft_ctx_read_kv (R->ctx, l, 0, NULL, NULL, &rows, &from, NULL);
    k = g_new0 (float, MAX (rows, 1) * kv * hd);
    v = g_new0 (float, MAX (rows, 1) * kv * hd);
    for (int h = 0; h < kv; h++) {
      float *kh, *vh;
      if (!dfl_draft_ctx_read_kv (R->ctx, l, h, &kh, &vh, NULL, NULL, &error))
        g_error ("%s", error->message);
      for (gsize r = 0; r < rows; r++) {
        memcpy (k + (r * kv + h) * hd, kh + r * hd, hd * sizeof (float));
        memcpy (v + (r * kv + h) * hd, vh + r * hd, hd * sizeof (float));
      }
      g_free (kh);
      g_free (vh);
    }
    shape[0] = (gint64) rows, shape[1] = kv, shape[2] = hd;
    g_snprintf (key, sizeof key, "%s.l%d.k", name, l);
    out_f32 (R, key, 3, shape, k);
    g_snprintf (key, sizeof key, "%s.l%d.v", name, l);
    out_f32 (R, key, 3, shape, v);
    g_snprintf (key, sizeof key, "%s.l%d.from", name, l);
    if (!dfl_safetensors_writer_add (R->w, key, DFL_DTYPE_I64, 1, &one, &from, &error))
      g_error ("%s", error->message);
    g_free (k);
    g_free (v);
  }
}

static void
op_margin (Run *R, const cJSON *op)
{
  const char *name = cJSON_GetStringValue (cJSON_GetObjectItemCaseSensitive (op, "name"));
  float *m = g_new (float, MAX (R->n_tip, 1));
  gint64 n = R->n_tip;

  g_assert (dfl_drafter_weights_has_route (R->d));
  for (gint64 i = 0; i < R->n_tip; i++)
    m[i] = dfl_drafter_weights_route_margin (R->d, R->tip + i * R->g->hidden);
  out_f32 (R, name, 1, &n, m);
  g_free (m);
}

static float *
target_matrix (const DflSafetensors *st, const char *name, int rows, int cols)
{
  const DflStoredTensor *t = dfl_safetensors_find (st, name);

  if (!t || t->n_dims != 2 || t->shape[0] != rows || t->shape[1] != cols)
    return NULL;
  return dfl_tensor_dup_f32 (t);
}

static int
cmd_run (const char *drafter, const char *target_dir, const char *inputs, const char *out)
{
  GError *error = NULL;
  g_autoptr (DflDrafterWeights) d = NULL, bound = NULL;
  g_autoptr (DflDraftCtx) ctx = NULL;
  g_autoptr (DflSafetensors) target = NULL, in = NULL;
  const DflStoredTensor *taps, *tip;
  DflDraftTrunk trunk;
  const char *script_json;
  cJSON *script, *op;
  Run R = { 0 };
  int rc = 0;

  if (!(d = dfl_drafter_weights_open (drafter, &error)) || !(target = dfl_safetensors_open (target_dir, &error))
      || !(in = dfl_safetensors_open (inputs, &error)))
    return die (error);
  R.d = d;
  R.g = dfl_drafter_weights_geometry (d);
  R.head_rows = R.g->vocab;
  R.embed = target_matrix (target, "model.embed_tokens.weight", R.g->vocab, R.g->hidden);
  R.head = target_matrix (target, "lm_head.weight", R.g->vocab, R.g->hidden);
  if (!R.head && R.embed)
    R.head = g_memdup2 (R.embed, sizeof (float) * R.g->vocab * R.g->hidden);
  taps = dfl_safetensors_find (in, "taps");
  tip = dfl_safetensors_find (in, "tip");
  script_json = dfl_safetensors_metadata (in, "script");
  if (!R.embed || !taps || taps->dtype != DFL_DTYPE_F32 || !tip || !script_json
      || taps->shape[1] != dfl_drafter_geometry_tap_width (R.g)) {
    fprintf (stderr, "%s or %s is not what the tests make\n", target_dir, inputs);
    return 1;
  }
  trunk.embed = dfl_tensor_2d (NULL, R.embed, 0, DFL_DTYPE_F32, R.g->vocab, R.g->hidden);
  trunk.head = dfl_tensor_2d (NULL, R.head, 0, DFL_DTYPE_F32, R.head_rows, R.g->hidden);
  if (!(bound = dfl_drafter_weights_bind (d, NULL, &trunk, DFL_DTYPE_F32, &error))
      || !(ctx = dfl_draft_ctx_new (bound, &error)))
    return die (error);
  R.ctx = ctx;
  /* the inputs may sit unaligned in the mapping: copies */
  R.taps = dfl_tensor_dup_f32 (taps);
  R.n_taps = taps->shape[0];
  R.tip = dfl_tensor_dup_f32 (tip);
  R.n_tip = tip->shape[0];
  R.w = dfl_safetensors_writer_new ();
  script = cJSON_Parse (script_json);
  cJSON_ArrayForEach (op, script) {
    const char *kind = cJSON_GetStringValue (cJSON_GetObjectItemCaseSensitive (op, "op"));
    if (g_strcmp0 (kind, "queue") == 0) {
      int src = json_int (op, "src"), n = json_int (op, "n");
      g_assert (src + n <= R.n_taps);
      if (!dfl_draft_ctx_queue_host (ctx, json_int (op, "pos"),
                                     R.taps + (gsize) src * dfl_drafter_geometry_tap_width (R.g),
                                     n, &error)) {
        rc = die (error);
        break;
      }
    } else if (g_strcmp0 (kind, "truncate") == 0) {
      dfl_draft_ctx_truncate (ctx, json_int (op, "pos"));
    } else if (g_strcmp0 (kind, "reset") == 0) {
      dfl_draft_ctx_reset (ctx);
    } else if (g_strcmp0 (kind, "settle") == 0) {
      if (!dfl_draft_ctx_settle (ctx, &error)) {
        rc = die (error);
        break;
      }
    } else if (g_strcmp0 (kind, "block") == 0) {
      if (!op_block (&R, op, &error)) {
        rc = die (error);
        break;
      }
    } else if (g_strcmp0 (kind, "dump_ctx") == 0) {
      op_dump_ctx (&R, op);
    } else if (g_strcmp0 (kind, "margin") == 0) {
      op_margin (&R, op);
    } else {
      fprintf (stderr, "%s: unknown op %s\n", inputs, kind ? kind : "(none)");
      rc = 1;
      break;
    }
  }
  cJSON_Delete (script);
  if (rc == 0 && !dfl_safetensors_writer_write (R.w, out, &error))
    rc = die (error);
  dfl_safetensors_writer_free (R.w);
  g_free ((float *) R.taps);
  g_free ((float *) R.tip);
  g_clear_pointer (&ctx, dfl_draft_ctx_free);
  g_clear_pointer (&bound, dfl_drafter_weights_unref);
  g_free (R.embed);
  g_free (R.head);
  return rc;
}

static int
cmd_check (const char *drafter, const char *target_dir)
{
  GError *error = NULL;
  g_autoptr (DflDrafterWeights) d = NULL;
  g_autoptr (DflSafetensors) target = NULL;
  g_autofree char *cfg_path = g_build_filename (target_dir, "config.json", NULL);
  g_autofree char *json = NULL;
  cJSON *cfg;
  int layers, hidden, vocab;
  gboolean tied, ok;

  if (!(d = dfl_drafter_weights_open (drafter, &error)) || !(target = dfl_safetensors_open (target_dir, &error))
      || !g_file_get_contents (cfg_path, &json, NULL, &error))
    return die (error);
  cfg = cJSON_Parse (json);
  layers = cJSON_GetObjectItem (cfg, "num_hidden_layers")->valueint;
  hidden = cJSON_GetObjectItem (cfg, "hidden_size")->valueint;
  vocab = cJSON_GetObjectItem (cfg, "vocab_size")->valueint;
  tied = cJSON_IsTrue (cJSON_GetObjectItem (cfg, "tie_word_embeddings"));
  cJSON_Delete (cfg);
  ok = dfl_drafter_weights_check_target (d, target, tied, layers, hidden, vocab, &error);
  return ok ? 0 : die (error);
}

int
main (int argc, char **argv)
{
  GError *error = NULL;

  if (argc == 6 && strcmp (argv[1], "run") == 0)
    return cmd_run (argv[2], argv[3], argv[4], argv[5]);
  if (argc == 3 && strcmp (argv[1], "load") == 0) {
    g_autoptr (DflDrafterWeights) d = dfl_drafter_weights_open (argv[2], &error);
    return d ? 0 : die (error);
  }
  if (argc == 4 && strcmp (argv[1], "check") == 0)
    return cmd_check (argv[2], argv[3]);
  if ((argc == 3 || argc == 4) && strcmp (argv[1], "hash") == 0) {
    g_autoptr (DflSafetensors) st = dfl_safetensors_open (argv[2], &error);
    char hex[17];
    if (!st || !dfl_trunk_hash64 (st, argc == 4 && strcmp (argv[3], "--tied") == 0, hex, &error))
      return die (error);
    printf ("%s\n", hex);
    return 0;
  }
  fprintf (stderr, "usage: drafter-tool run DRAFTER TARGET_DIR INPUTS OUT | load DRAFTER |"
           " check DRAFTER TARGET_DIR | hash TARGET [--tied]\n");
  return 2;
}
