/* gst-dflash — a Qwen3 checkpoint in one .gguf file, as llama.cpp writes it.
 *
 * general.architecture "qwen3"; the sizes under qwen3.* become the
 * DflQwen3Config a config.json would give; the tensors (token_embd,
 * blk.N.attn_q, …, output_norm, output) are handed on under the names a
 * Hugging Face checkpoint gives them (model.embed_tokens.weight, …), in
 * place in the file's mapping, so everything that reads a target's
 * tensors reads a GGUF target's the same way. No output tensor: the head is
 * tied to the embedding.
 */
#pragma once

#include <glib.h>

#include "gguf.h"
#include "qwen3-config.h"
#include "safetensors.h"

G_BEGIN_DECLS

/* The config of a qwen3 GGUF file's metadata. */
gboolean dfl_qwen3_gguf_config (DflQwen3Config *cfg, const DflGguf *g, GError **error);

/* The checkpoint of the .gguf at `path`: its config, and its tensors under
 * their Hugging Face names (the set keeps the file open). Fails naming the
 * file and the key or tensor: another architecture, a size out of range, a
 * tensor of a name a Qwen3 checkpoint has not. */
DflSafetensors *dfl_qwen3_gguf_open (const char *path, DflQwen3Config *cfg, GError **error);

/* The Hugging Face name of a GGUF tensor name ("blk.3.attn_q.weight" →
 * "model.layers.3.self_attn.q_proj.weight"), or NULL where a Qwen3
 * checkpoint has no such tensor (g_free it). */
char *dfl_qwen3_gguf_hf_name (const char *gguf_name);

G_END_DECLS
