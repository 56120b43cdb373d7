/* gst-dflash — the tensors of a Qwen3 checkpoint: their names and shapes.
 *
 * One list for everything that reads or makes a target's weights: the CPU
 * target maps them, a device target uploads them (or makes random ones of
 * the same shapes), the benches write random checkpoints of them. A layer's
 * tensors are `model.layers.N.` and the name below.
 */
#pragma once

#include <glib.h>

#include "qwen3-config.h"
#include "safetensors.h"

G_BEGIN_DECLS

/* A layer's matrices, in the order the forward uses them. */
typedef enum {
  DFL_QWEN3_Q,
  DFL_QWEN3_K,
  DFL_QWEN3_V,
  DFL_QWEN3_O,
  DFL_QWEN3_GATE,
  DFL_QWEN3_UP,
  DFL_QWEN3_DOWN,
} DflQwen3Matrix;
#define DFL_QWEN3_N_MATRICES (DFL_QWEN3_DOWN + 1)

/* A layer's norm weights. */
typedef enum {
  DFL_QWEN3_IN_NORM,
  DFL_QWEN3_POST_NORM,
  DFL_QWEN3_Q_NORM,
  DFL_QWEN3_K_NORM,
} DflQwen3Norm;
#define DFL_QWEN3_N_NORMS (DFL_QWEN3_K_NORM + 1)

/* With attention_bias, the q, k, v and o projections' biases: bias i has
 * matrix i's rows. */
#define DFL_QWEN3_N_BIASES (DFL_QWEN3_O + 1)

/* Names within a layer: "self_attn.q_proj.weight", "input_layernorm.weight",
 * "self_attn.q_proj.bias". */
const char *dfl_qwen3_matrix_name (DflQwen3Matrix m);
const char *dfl_qwen3_norm_name (DflQwen3Norm n);
const char *dfl_qwen3_bias_name (DflQwen3Matrix m);
/* "model.layers.3.self_attn.q_proj.weight" (g_free it). */
char *dfl_qwen3_layer_tensor_name (int layer, const char *name);

/* Matrix m of a layer is [rows][cols]: rows outputs, cols inputs. */
void dfl_qwen3_matrix_shape (const DflQwen3Config *c, DflQwen3Matrix m, gint64 *rows,
                             gint64 *cols);
gint64 dfl_qwen3_norm_size (const DflQwen3Config *c, DflQwen3Norm n);
/* Parameters of a checkpoint of this config: every tensor above, the
 * embedding, the final norm, the head where it is not tied. */
gint64 dfl_qwen3_n_params (const DflQwen3Config *c);

typedef struct {
  const DflStoredTensor *norm[DFL_QWEN3_N_NORMS];
  const DflStoredTensor *matrix[DFL_QWEN3_N_MATRICES];
  const DflStoredTensor *bias[DFL_QWEN3_N_BIASES];   /* NULL without attention_bias */
} DflQwen3LayerTensors;

/* A checkpoint's tensors, where they lie in the open file. */
typedef struct {
  const DflStoredTensor *embed;   /* [vocab][hidden] */
  const DflStoredTensor *norm;    /* [hidden] */
  const DflStoredTensor *head;    /* [vocab][hidden]; the embedding when tied */
  DflQwen3LayerTensors *layers;   /* [layers] */
} DflQwen3Tensors;

/* A checkpoint to run as a target: `path` is a Hugging Face folder
 * (config.json, generation_config.json where present, model.safetensors or
 * its shards) or a .gguf file (qwen3-gguf.h). Its config and its tensors
 * under the Hugging Face names, in place in the mapped files. */
DflSafetensors *dfl_qwen3_checkpoint_open (const char *path, DflQwen3Config *cfg,
                                           GError **error);
/* Where a checkpoint's own drafter sidecar lies: dflash.safetensors in a
 * folder, X.dflash.safetensors beside X.gguf (as tools/hf-to-gguf.py
 * --sidecar writes it). g_free it; whether it exists is the caller's to
 * check. */
char *dfl_qwen3_checkpoint_sidecar (const char *path);

/* Find every tensor of a checkpoint of config `c` in `st`, each checked
 * against its shape: the embedding, the final norm, the head, then each
 * layer's norms, matrices and biases. Fails naming the first one missing or
 * of another shape. Valid while `st` is open; clear frees only the list. */
gboolean dfl_qwen3_tensors_find (DflQwen3Tensors *w, const DflSafetensors *st,
                                 const DflQwen3Config *c, GError **error);
void dfl_qwen3_tensors_clear (DflQwen3Tensors *w);

G_END_DECLS
