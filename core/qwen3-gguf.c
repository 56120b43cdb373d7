/* gst-dflash — a Qwen3 checkpoint in one .gguf file, as llama.cpp writes it. */
#include "qwen3-gguf.h"

#include <cJSON.h>
#include <string.h>

#include "dfl-error.h"
#include "qwen3-weights.h"

/* GGUF's names of a layer's tensors and the Hugging Face names they stand
 * for (llama.cpp's convert_hf_to_gguf.py maps one onto the other). */
static const struct {
  const char *gguf, *hf;
} layer_names[] = {
  { "attn_norm.weight", "input_layernorm.weight" },
  { "ffn_norm.weight", "post_attention_layernorm.weight" },
  { "attn_q_norm.weight", "self_attn.q_norm.weight" },
  { "attn_k_norm.weight", "self_attn.k_norm.weight" },
  { "attn_q.weight", "self_attn.q_proj.weight" },
  { "attn_k.weight", "self_attn.k_proj.weight" },
  { "attn_v.weight", "self_attn.v_proj.weight" },
  { "attn_output.weight", "self_attn.o_proj.weight" },
  { "ffn_gate.weight", "mlp.gate_proj.weight" },
  { "ffn_up.weight", "mlp.up_proj.weight" },
  { "ffn_down.weight", "mlp.down_proj.weight" },
};

static const struct {
  const char *gguf, *hf;
} model_names[] = {
  { "token_embd.weight", "model.embed_tokens.weight" },
  { "output_norm.weight", "model.norm.weight" },
  { "output.weight", "lm_head.weight" },
};

char *
dfl_qwen3_gguf_hf_name (const char *gguf_name)
{
  const char *rest;
  char *end;
  guint64 layer;

  for (guint i = 0; i < G_N_ELEMENTS (model_names); i++)
    if (strcmp (gguf_name, model_names[i].gguf) == 0)
      return g_strdup (model_names[i].hf);
  if (!g_str_has_prefix (gguf_name, "blk.") || !g_ascii_isdigit (gguf_name[4]))
    return NULL;
  layer = g_ascii_strtoull (gguf_name + 4, &end, 10);
  if (*end != '.' || layer > G_MAXINT || (gguf_name[4] == '0' && end != gguf_name + 5))
    return NULL;
  rest = end + 1;
  for (guint i = 0; i < G_N_ELEMENTS (layer_names); i++)
    if (strcmp (rest, layer_names[i].gguf) == 0)
      return dfl_qwen3_layer_tensor_name ((int) layer, layer_names[i].hf);
  return NULL;
}

/* An integer of the metadata into `json` under a config.json key, checked
 * to be a positive int. */
static gboolean
put_int (cJSON *json, const DflGguf *g, const char *key, const char *hf_key, gboolean optional,
         GError **error)
{
  gint64 v = -1;

  if (!dfl_gguf_get_int (g, key, optional, &v, error))
    return FALSE;
  if (v == -1 && optional)
    return TRUE;
  if (v < 1 || v > G_MAXINT) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "%s: metadata '%s' is %" G_GINT64_FORMAT
                 "; accepted: 1 to %d", dfl_gguf_path (g), key, v, G_MAXINT);
    return FALSE;
  }
  cJSON_AddNumberToObject (json, hf_key, (double) v);
  return TRUE;
}

/* A token id of tokenizer.ggml.*, or -1 where absent. */
static gboolean
token_id (const DflGguf *g, const char *key, gint64 vocab, int *out, GError **error)
{
  gint64 v = -1;

  *out = -1;
  if (!dfl_gguf_get_int (g, key, TRUE, &v, error))
    return FALSE;
  if (dfl_gguf_find_value (g, key) == NULL)
    return TRUE;
  if (v < 0 || v >= vocab) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "%s: metadata '%s' is %" G_GINT64_FORMAT
                 ", not a token id of the vocabulary of %" G_GINT64_FORMAT, dfl_gguf_path (g),
                 key, v, vocab);
    return FALSE;
  }
  *out = (int) v;
  return TRUE;
}

/* The metadata as the config.json it stands for. */
static gboolean
to_config_json (cJSON *json, const DflGguf *g, GError **error)
{
  const char *path = dfl_gguf_path (g), *arch = NULL, *scaling = NULL;
  const DflStoredTensor *embed = dfl_gguf_find_tensor (g, "token_embd.weight");
  gint64 key_length = -1, value_length = -1, vocab = -1;
  double eps = 1e-6, theta = 10000.0;
  int eos[3], bos;
  cJSON *eos_list;

  if (!dfl_gguf_get_string (g, "general.architecture", FALSE, &arch, error))
    return FALSE;
  if (strcmp (arch, "qwen3") != 0) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                 "%s: general.architecture is '%s'; gst-dflash runs qwen3", path, arch);
    return FALSE;
  }
  if (!dfl_gguf_get_string (g, "qwen3.rope.scaling.type", TRUE, &scaling, error))
    return FALSE;
  if (scaling && strcmp (scaling, "none") != 0) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                 "%s: qwen3.rope.scaling.type is '%s'; only unscaled RoPE is run", path, scaling);
    return FALSE;
  }
  if (embed == NULL || embed->n_dims != 2) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "%s: %s", path,
                 embed ? "tensor 'token_embd.weight' is not a matrix"
                 : "no tensor 'token_embd.weight' (the token embedding)");
    return FALSE;
  }
  /* the embedding's rows are the vocabulary; where the file also says so,
   * the two must agree */
  if (!dfl_gguf_get_int (g, "qwen3.vocab_size", TRUE, &vocab, error))
    return FALSE;
  if (vocab != -1 && vocab != embed->shape[0]) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_MISMATCH, "%s: qwen3.vocab_size is %" G_GINT64_FORMAT
                 " but token_embd.weight has %" G_GINT64_FORMAT " rows", path, vocab,
                 embed->shape[0]);
    return FALSE;
  }
  vocab = embed->shape[0];

  cJSON_AddStringToObject (json, "model_type", "qwen3");
  if (!put_int (json, g, "qwen3.block_count", "num_hidden_layers", FALSE, error)
      || !put_int (json, g, "qwen3.embedding_length", "hidden_size", FALSE, error)
      || !put_int (json, g, "qwen3.feed_forward_length", "intermediate_size", FALSE, error)
      || !put_int (json, g, "qwen3.attention.head_count", "num_attention_heads", FALSE, error)
      || !put_int (json, g, "qwen3.attention.head_count_kv", "num_key_value_heads", TRUE, error)
      || !put_int (json, g, "qwen3.context_length", "max_position_embeddings", FALSE, error)
      || !dfl_gguf_get_int (g, "qwen3.attention.key_length", TRUE, &key_length, error)
      || !dfl_gguf_get_int (g, "qwen3.attention.value_length", TRUE, &value_length, error)
      || !dfl_gguf_get_float (g, "qwen3.attention.layer_norm_rms_epsilon", FALSE, &eps, error)
      || !dfl_gguf_get_float (g, "qwen3.rope.freq_base", TRUE, &theta, error))
    return FALSE;
  if (value_length != -1 && key_length != value_length) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                 "%s: qwen3.attention.key_length %" G_GINT64_FORMAT " and value_length %"
                 G_GINT64_FORMAT " differ; Qwen3 heads have one size", path, key_length,
                 value_length);
    return FALSE;
  }
  if (key_length != -1
      && !put_int (json, g, "qwen3.attention.key_length", "head_dim", FALSE, error))
    return FALSE;
  cJSON_AddNumberToObject (json, "vocab_size", (double) vocab);
  cJSON_AddNumberToObject (json, "rms_norm_eps", eps);
  cJSON_AddNumberToObject (json, "rope_theta", theta);
  cJSON_AddBoolToObject (json, "tie_word_embeddings",
                         dfl_gguf_find_tensor (g, "output.weight") == NULL);

  /* generation stops at the end-of-sequence token and, where the file names
   * them, end-of-turn and end-of-message */
  if (!token_id (g, "tokenizer.ggml.bos_token_id", vocab, &bos, error)
      || !token_id (g, "tokenizer.ggml.eos_token_id", vocab, &eos[0], error)
      || !token_id (g, "tokenizer.ggml.eot_token_id", vocab, &eos[1], error)
      || !token_id (g, "tokenizer.ggml.eom_token_id", vocab, &eos[2], error))
    return FALSE;
  if (bos >= 0)
    cJSON_AddNumberToObject (json, "bos_token_id", bos);
  eos_list = cJSON_AddArrayToObject (json, "eos_token_id");
  for (int i = 0; i < 3; i++) {
    gboolean seen = eos[i] < 0;

    for (int j = 0; j < i && !seen; j++)
      seen = eos[j] == eos[i];
    if (!seen)
      cJSON_AddItemToArray (eos_list, cJSON_CreateNumber (eos[i]));
  }
  return TRUE;
}

gboolean
dfl_qwen3_gguf_config (DflQwen3Config *cfg, const DflGguf *g, GError **error)
{
  cJSON *json = cJSON_CreateObject ();
  g_autofree char *text = NULL, *origin = NULL;
  gboolean ok = to_config_json (json, g, error);

  if (ok) {
    /* one set of checks for a config however it came */
    text = cJSON_PrintUnformatted (json);
    origin = g_strdup_printf ("%s (its qwen3 metadata as config.json)", dfl_gguf_path (g));
    ok = dfl_qwen3_config_parse (cfg, text, strlen (text), origin, error);
  }
  cJSON_Delete (json);
  return ok;
}

DflSafetensors *
dfl_qwen3_gguf_open (const char *path, DflQwen3Config *cfg, GError **error)
{
  g_autoptr (DflGguf) g = NULL;
  g_autoptr (DflSafetensors) st = NULL;
  DflGguf *held;

  if (!(g = dfl_gguf_open (path, error)) || !dfl_qwen3_gguf_config (cfg, g, error))
    return NULL;
  held = g_steal_pointer (&g);
  st = dfl_safetensors_new_view (path, held, (GDestroyNotify) dfl_gguf_free);
  for (guint i = 0; i < dfl_gguf_n_tensors (held); i++) {
    const DflStoredTensor *t = dfl_gguf_nth_tensor (held, i);
    g_autofree char *name = dfl_qwen3_gguf_hf_name (t->name);

    if (name == NULL) {
      /* attention biases, rope factors, another model's tensors: nothing
       * here may be left unread */
      g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                   "%s: tensor '%s' is not one of a Qwen3 checkpoint's (token_embd, "
                   "output_norm, output, blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, "
                   "attn_q_norm, attn_k_norm, ffn_norm, ffn_gate, ffn_up, ffn_down})",
                   path, t->name);
      return NULL;
    }
    /* a layer past block_count would never be read */
    if (g_str_has_prefix (t->name, "blk.")
        && g_ascii_strtoull (t->name + 4, NULL, 10) >= (guint64) cfg->layers) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: tensor '%s' is of a layer past qwen3.block_count (%d)", path, t->name,
                   cfg->layers);
      return NULL;
    }
    if (!dfl_safetensors_view_add (st, name, t, error))
      return NULL;
  }
  return g_steal_pointer (&st);
}
