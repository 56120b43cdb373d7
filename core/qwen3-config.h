/* gst-dflash — a Qwen3 checkpoint's config.json and generation_config.json.
 *
 * Reads what the target needs and refuses, with a message saying so, what we
 * do not run: other architectures, rope scaling, sliding-window layers.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

#define DFL_MAX_EOS_IDS 8

typedef struct {
  int hidden;
  int intermediate;
  int layers;
  int heads;
  int kv_heads;
  int head_dim;              /* explicit, or hidden / heads */
  int vocab;
  int max_positions;         /* max_position_embeddings */
  double rms_eps;
  double rope_theta;         /* rope_theta, or rope_parameters.rope_theta */
  gboolean tie_word_embeddings;
  gboolean attention_bias;
  int bos_id;                /* -1 where absent */
  int n_eos;
  int eos_ids[DFL_MAX_EOS_IDS];  /* generation_config.json where present, else config.json */
} DflQwen3Config;

/* `dir` is the checkpoint folder; config.json is required,
 * generation_config.json is read where present. */
gboolean dfl_qwen3_config_load (DflQwen3Config *cfg, const char *dir, GError **error);
/* Parse from memory; `origin` names the file in messages. */
gboolean dfl_qwen3_config_parse (DflQwen3Config *cfg, const char *json, gsize len,
                                 const char *origin, GError **error);
gboolean dfl_qwen3_config_is_eos (const DflQwen3Config *cfg, int token);

G_END_DECLS
