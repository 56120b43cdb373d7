/* gst-dflash — the tensors of a Qwen3 checkpoint: their names and shapes. */
#include "qwen3-weights.h"

#include <string.h>

#include "gguf.h"
#include "qwen3-gguf.h"

static const char *const matrix_names[DFL_QWEN3_N_MATRICES] = {
  [DFL_QWEN3_Q] = "self_attn.q_proj.weight",
  [DFL_QWEN3_K] = "self_attn.k_proj.weight",
  [DFL_QWEN3_V] = "self_attn.v_proj.weight",
  [DFL_QWEN3_O] = "self_attn.o_proj.weight",
  [DFL_QWEN3_GATE] = "mlp.gate_proj.weight",
  [DFL_QWEN3_UP] = "mlp.up_proj.weight",
  [DFL_QWEN3_DOWN] = "mlp.down_proj.weight",
};

static const char *const norm_names[DFL_QWEN3_N_NORMS] = {
  [DFL_QWEN3_IN_NORM] = "input_layernorm.weight",
  [DFL_QWEN3_POST_NORM] = "post_attention_layernorm.weight",
  [DFL_QWEN3_Q_NORM] = "self_attn.q_norm.weight",
  [DFL_QWEN3_K_NORM] = "self_attn.k_norm.weight",
};

static const char *const bias_names[DFL_QWEN3_N_BIASES] = {
  [DFL_QWEN3_Q] = "self_attn.q_proj.bias",
  [DFL_QWEN3_K] = "self_attn.k_proj.bias",
  [DFL_QWEN3_V] = "self_attn.v_proj.bias",
  [DFL_QWEN3_O] = "self_attn.o_proj.bias",
};

const char *
dfl_qwen3_matrix_name (DflQwen3Matrix m)
{
  return matrix_names[m];
}

const char *
dfl_qwen3_norm_name (DflQwen3Norm n)
{
  return norm_names[n];
}

const char *
dfl_qwen3_bias_name (DflQwen3Matrix m)
{
  g_return_val_if_fail (m < DFL_QWEN3_N_BIASES, NULL);
  return bias_names[m];
}

char *
dfl_qwen3_layer_tensor_name (int layer, const char *name)
{
  return g_strdup_printf ("model.layers.%d.%s", layer, name);
}

void
dfl_qwen3_matrix_shape (const DflQwen3Config *c, DflQwen3Matrix m, gint64 *rows, gint64 *cols)
{
  gint64 hs = c->hidden, qd = (gint64) c->heads * c->head_dim;
  gint64 kd = (gint64) c->kv_heads * c->head_dim, ffn = c->intermediate;
  /* [outputs, inputs] of each matrix, in DflQwen3Matrix's order */
  const gint64 shapes[DFL_QWEN3_N_MATRICES][2] = {
    { qd, hs }, { kd, hs }, { kd, hs }, { hs, qd }, { ffn, hs }, { ffn, hs }, { hs, ffn },
  };

  if (rows)
    *rows = shapes[m][0];
  if (cols)
    *cols = shapes[m][1];
}

gint64
dfl_qwen3_norm_size (const DflQwen3Config *c, DflQwen3Norm n)
{
  return n == DFL_QWEN3_Q_NORM || n == DFL_QWEN3_K_NORM ? c->head_dim : c->hidden;
}

gint64
dfl_qwen3_n_params (const DflQwen3Config *c)
{
  gint64 table = (gint64) c->vocab * c->hidden, layer = 0;

  for (int i = 0; i < DFL_QWEN3_N_NORMS; i++)
    layer += dfl_qwen3_norm_size (c, i);
  for (int i = 0; i < DFL_QWEN3_N_MATRICES; i++) {
    gint64 rows, cols;
    dfl_qwen3_matrix_shape (c, i, &rows, &cols);
    layer += rows * cols + (c->attention_bias && i < DFL_QWEN3_N_BIASES ? rows : 0);
  }
  return table * (c->tie_word_embeddings ? 1 : 2) + c->hidden + layer * c->layers;
}

static const DflStoredTensor *
expect (const DflSafetensors *st, int layer, const char *name, gint64 d0, gint64 d1,
        GError **error)
{
  g_autofree char *full = layer >= 0 ? dfl_qwen3_layer_tensor_name (layer, name) : NULL;
  gint64 shape[2] = { d0, d1 };

  return dfl_safetensors_expect (st, full ? full : name, d1 ? 2 : 1, shape, error);
}

/* A matrix: float, or block-quantized where the file stores it so */
static const DflStoredTensor *
expect_matrix (const DflSafetensors *st, int layer, const char *name, gint64 rows, gint64 cols,
               GError **error)
{
  g_autofree char *full = layer >= 0 ? dfl_qwen3_layer_tensor_name (layer, name) : NULL;

  return dfl_safetensors_expect_matrix (st, full ? full : name, rows, cols, error);
}

static gboolean
find_layer (DflQwen3LayerTensors *l, const DflSafetensors *st, const DflQwen3Config *c, int i,
            GError **error)
{
  for (int n = 0; n < DFL_QWEN3_N_NORMS; n++)
    if (!(l->norm[n] = expect (st, i, norm_names[n], dfl_qwen3_norm_size (c, n), 0, error)))
      return FALSE;
  for (int m = 0; m < DFL_QWEN3_N_MATRICES; m++) {
    gint64 rows, cols;
    dfl_qwen3_matrix_shape (c, m, &rows, &cols);
    if (!(l->matrix[m] = expect_matrix (st, i, matrix_names[m], rows, cols, error)))
      return FALSE;
  }
  for (int m = 0; c->attention_bias && m < DFL_QWEN3_N_BIASES; m++) {
    gint64 rows;
    dfl_qwen3_matrix_shape (c, m, &rows, NULL);
    if (!(l->bias[m] = expect (st, i, bias_names[m], rows, 0, error)))
      return FALSE;
  }
  return TRUE;
}

gboolean
dfl_qwen3_tensors_find (DflQwen3Tensors *w, const DflSafetensors *st, const DflQwen3Config *c,
                        GError **error)
{
  *w = (DflQwen3Tensors) { 0 };
  if (!(w->embed = expect_matrix (st, -1, "model.embed_tokens.weight", c->vocab, c->hidden,
                                  error))
      || !(w->norm = expect (st, -1, "model.norm.weight", c->hidden, 0, error)))
    return FALSE;
  w->head = c->tie_word_embeddings ? w->embed
      : expect_matrix (st, -1, "lm_head.weight", c->vocab, c->hidden, error);
  if (!w->head)
    return FALSE;
  w->layers = g_new0 (DflQwen3LayerTensors, c->layers);
  for (int i = 0; i < c->layers; i++)
    if (!find_layer (&w->layers[i], st, c, i, error)) {
      dfl_qwen3_tensors_clear (w);
      return FALSE;
    }
  return TRUE;
}

void
dfl_qwen3_tensors_clear (DflQwen3Tensors *w)
{
  g_clear_pointer (&w->layers, g_free);
}

char *
dfl_qwen3_checkpoint_sidecar (const char *path)
{
  g_autofree char *stem = NULL;

  if (!dfl_gguf_is_gguf (path))
    return g_build_filename (path, "dflash.safetensors", NULL);
  stem = g_str_has_suffix (path, ".gguf") ? g_strndup (path, strlen (path) - 5) : g_strdup (path);
  return g_strconcat (stem, ".dflash.safetensors", NULL);
}

DflSafetensors *
dfl_qwen3_checkpoint_open (const char *path, DflQwen3Config *cfg, GError **error)
{
  g_return_val_if_fail (path != NULL && cfg != NULL, NULL);
  if (dfl_gguf_is_gguf (path))
    return dfl_qwen3_gguf_open (path, cfg, error);
  if (!dfl_qwen3_config_load (cfg, path, error))
    return NULL;
  return dfl_safetensors_open (path, error);
}
