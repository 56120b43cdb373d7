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
} DflDtype;

/* The name safetensors uses: "F32", "BF16", …; "invalid" out of range. */
const char *dfl_dtype_name (DflDtype dtype);
/* Bytes of one element; 0 out of range. */
size_t dfl_dtype_size (DflDtype dtype);
/* The type of a safetensors name; 0 (and *dtype untouched) where none is. */
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
