/* gst-dflash — element types, one enum for every layer.
 *
 * The types a checkpoint stores and the back ends compute with: the kernels
 * of every back end (CPU, CUDA, Vulkan), the back-end tensors and the file
 * readers all name a type with DflDtype. Plain C (no GLib), so the CPU
 * kernels and the CUDA sources can include it as they are.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  DFL_DTYPE_F32,
  DFL_DTYPE_F16,
  DFL_DTYPE_BF16,
  DFL_DTYPE_I32,
  DFL_DTYPE_I64,
  DFL_DTYPE_I8,
  DFL_DTYPE_U8,
  /* Block-quantized weights, laid out as GGUF files store them (ggml's
   * block_q8_0, block_q4_0, block_q4_K, block_q6_K): a row of n elements
   * is n / block elements' worth of blocks of block_bytes each. */
  DFL_DTYPE_Q8_0,
  DFL_DTYPE_Q4_0,
  DFL_DTYPE_Q4_K,
  DFL_DTYPE_Q6_K,
} DflDtype;
#define DFL_N_DTYPES (DFL_DTYPE_Q6_K + 1)

/* The name safetensors uses: "F32", "BF16", …; "invalid" out of range. */
const char *dfl_dtype_name (DflDtype dtype);
/* Bytes of one element; 0 out of range and for the block types (whose
 * elements share bytes: see dfl_dtype_row_bytes). */
size_t dfl_dtype_size (DflDtype dtype);
/* Elements per block (1 for the element types; 32 for Q8_0 and Q4_0, 256
 * for the K types) and bytes per block; 0 out of range. */
size_t dfl_dtype_block_elems (DflDtype dtype);
size_t dfl_dtype_block_bytes (DflDtype dtype);
int dfl_dtype_is_quantized (DflDtype dtype);
/* Bytes of a row of n elements; 0 where n is not a whole number of blocks
 * (or the type is out of range). */
size_t dfl_dtype_row_bytes (DflDtype dtype, int64_t n);
/* The type of a safetensors name (an element type: safetensors stores no
 * blocks); 0 (and *dtype untouched) where none is. */
int dfl_dtype_from_name (const char *name, DflDtype *dtype);
/* F32, F16 or BF16: what weight matrices may be stored as. */
int dfl_dtype_is_float (DflDtype dtype);

/* One element between F32 and the 16-bit types: widening is exact; F32 to
 * F16 or BF16 rounds to nearest even (overflow to Inf, subnormals kept,
 * NaNs stay quiet NaNs of their sign). Written out in integers, so every
 * compiler and processor gives the same bits. */
float dfl_bf16_to_f32 (uint16_t v);
uint16_t dfl_f32_to_bf16 (float v);
float dfl_f16_to_f32 (uint16_t v);
uint16_t dfl_f32_to_f16 (float v);

#ifdef __cplusplus
}
#endif
