/* gst-dflash — the CUDA benchmarks' target: Qwen3-8B's shape (its
 * config.json's numbers), `layers` of them, untied; no weights. */
#pragma once

#include "qwen3-config.h"

static inline DflQwen3Config
dfl_bench_qwen3_8b_config (int layers)
{
  DflQwen3Config c = { 0 };

  c.hidden = 4096;
  c.intermediate = 12288;
  c.layers = layers;
  c.heads = 32;
  c.kv_heads = 8;
  c.head_dim = 128;
  c.vocab = 151936;
  c.max_positions = 40960;
  c.rms_eps = 1e-6;
  c.rope_theta = 1e6;
  c.tie_word_embeddings = FALSE;
  c.bos_id = -1;
  return c;
}
