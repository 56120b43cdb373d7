/* gst-dflash — the CPU kernels' own layout of a block-quantized matrix
 * (quant-packed.c), as quant-matmul.c calls it. Internal to kernels/cpu.
 */
#pragma once

#include <stdint.h>

#include "dfl-kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Outputs whose blocks lie side by side in the packed layout. */
#define DFL_QPACK_GROUP 16

/* Rows of activations as dfl_matmul_q quantizes them: k inputs a row, q
 * int8 [rows][k], d and s32 per group of 32 [rows][k / 32], s16 per half
 * group [rows][k / 16]. */
typedef struct {
  int k;
  const int8_t *q;
  const float *d;
  const int32_t *s32;
  const int16_t *s16;
} DflQuantRows;

/* y[r][o] (+)= for r < rows and o0 ≤ o < o1 (o0 a multiple of
 * DFL_QPACK_GROUP) from w's packed copy, by AVX-512 VNNI where `vnni`
 * (only where dfl_quant_has_vnni ()), else by AVX2: bitwise what the other
 * paths give. */
void dfl_quant_packed_outputs (const DflWeights *w, const DflQuantRows *a, int rows, int o0,
                               int o1, float *y, int ldy, int accumulate, int vnni);

#ifdef __cplusplus
}
#endif
