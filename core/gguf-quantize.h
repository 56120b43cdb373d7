/* gst-dflash — a GGUF file's matrices quantized into a new GGUF file.
 *
 * The input's metadata is copied entry for entry (general.file_type set to
 * the scheme's, general.quantization_version to 2, as llama.cpp's
 * quantizer writes them), its 1-D tensors (norms) as they are, and each
 * matrix stored as F32, F16 or BF16 is quantized row by row
 * (dfl_quantize_row: Q8_0 and Q4_0 as ggml's reference quantizers do, the
 * K types with a search of each sub-block's scale) to the type the scheme
 * gives it. The kernels' threads share the rows; the bytes do not depend
 * on how many there are.
 */
#pragma once

#include <glib.h>

#include "safetensors.h"

G_BEGIN_DECLS

typedef enum {
  DFL_QUANT_Q8_0,     /* every matrix Q8_0 */
  DFL_QUANT_Q4_0,     /* every matrix Q4_0 */
  DFL_QUANT_Q4_K,     /* every matrix Q4_K, the head (or a tied embedding) Q6_K */
  DFL_QUANT_Q4_K_M,   /* Q4_K, and Q6_K where llama.cpp's Q4_K_M puts it (dfl_quant_scheme_type) */
  DFL_QUANT_Q6_K,     /* every matrix Q6_K */
} DflQuantScheme;

#define DFL_QUANT_SCHEME_NAMES "q8_0, q4_0, q4_k, q4_k_m, q6_k"

/* "q4_k_m" → DFL_QUANT_Q4_K_M (case-insensitive); FALSE with a
 * DFL_ERROR_INVALID error naming the value and the names there are. */
gboolean dfl_quant_scheme_parse (const char *name, DflQuantScheme *scheme, GError **error);
const char *dfl_quant_scheme_name (DflQuantScheme scheme);

/* The type `scheme` stores a matrix in, by its GGUF name (blk.N.attn_v,
 * output, token_embd, …), its row width `cols`, the model's `n_layers`
 * and whether it has an `output` matrix (else the embedding is the head
 * too). Q4_K_M: Q6_K for the head, and for attn_v and ffn_down in the
 * first and last eighth of the layers and every third layer between;
 * Q4_K elsewhere. A row that is not whole blocks of the chosen type takes
 * the nearest type whose blocks fit: Q4_K → Q4_0 and Q6_K → Q8_0 where the
 * width is a multiple of 32 but not of 256; `fallback` (the matrix's
 * stored type) where not even that. */
DflDtype dfl_quant_scheme_type (DflQuantScheme scheme, const char *name, gint64 cols,
                                int n_layers, gboolean has_output, DflDtype fallback);

/* Called before each tensor is written: its place (index of n), the tensor
 * as the input holds it and the type it is written in. */
typedef void (*DflQuantProgress) (guint index, guint n, const DflStoredTensor *t, DflDtype to,
                                  gpointer user_data);

/* `in` (a GGUF file) quantized by `scheme` into `out`, which is replaced
 * only once whole. Errors name the file and the tensor: DFL_ERROR_UNSUPPORTED
 * where a matrix is block-quantized already (quantizing quantized weights
 * would round them twice: give the F32, F16 or BF16 file), DFL_ERROR_INVALID
 * where `out` is `in`, and the reader's and writer's own. */
gboolean dfl_gguf_quantize (const char *in, const char *out, DflQuantScheme scheme,
                            DflQuantProgress progress, gpointer user_data, GError **error);

G_END_DECLS
