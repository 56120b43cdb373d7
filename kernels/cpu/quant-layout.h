/* gst-dflash — the block layouts of quantized weights, byte for byte as
 * GGUF files store them (ggml's block_q8_0, block_q4_0, block_q4_K and
 * block_q6_K), so a tensor of a llama.cpp file is used in place and a file
 * we write loads there.
 *
 * A row of n elements is n / block-elements blocks, one after the other;
 * every multi-byte field is little-endian and a block has no padding (the
 * structs are packed: a block of a mapped file may sit at any address, so
 * the kernels read fields through these structs or memcpy, never through a
 * wider aligned load). The F16 fields are IEEE half floats (dfl_f16_to_f32).
 *
 * Values, element i of a block:
 *   Q8_0  d · qs[i]                                   (32 elements)
 *   Q4_0  d · (q − 8), q the nibble: element i < 16 the low nibble of
 *         qs[i], element 16 + i its high nibble         (32 elements)
 *   Q4_K  d · sc[j] · q − dmin · m[j] over 8 sub-blocks j of 32 elements,
 *         sc and m 6-bit (see dfl_q4k_scale_min); q a nibble: the 64
 *         elements 64c … 64c + 63 are the low nibbles (first 32) then the
 *         high nibbles (next 32) of qs[32c … 32c + 31] (256 elements)
 *   Q6_K  d · scales[i / 16] · (q − 32), q six bits: in each half h of 128
 *         elements, element 32k + l (k < 4, l < 32) has its low four bits in
 *         ql[64h + 32(k & 1) + l] (low nibble for k < 2, high for k ≥ 2) and
 *         its high two bits at bit 2k of qh[32h + l]          (256 elements)
 */
#pragma once

#include <stdint.h>

#include "dfl-dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DFL_QK 32        /* elements of a Q8_0 / Q4_0 block */
#define DFL_QK_K 256     /* elements of a K super-block */

typedef struct __attribute__ ((packed)) {
  uint16_t d;            /* F16 scale */
  int8_t qs[DFL_QK];
} DflBlockQ8_0;

typedef struct __attribute__ ((packed)) {
  uint16_t d;            /* F16 scale */
  uint8_t qs[DFL_QK / 2];
} DflBlockQ4_0;

typedef struct __attribute__ ((packed)) {
  uint16_t d;            /* F16 scale of the sub-block scales */
  uint16_t dmin;         /* F16 scale of the sub-block mins */
  /* 8 six-bit scales and 8 six-bit mins: bytes 0-3 hold scales 0-3 (low 6
   * bits) and the top 2 bits of scales 4-7; bytes 4-7 the same for the
   * mins; bytes 8-11 the low 4 bits of scale 4 + j (low nibble) and of min
   * 4 + j (high nibble) */
  uint8_t scales[12];
  uint8_t qs[DFL_QK_K / 2];
} DflBlockQ4_K;

typedef struct __attribute__ ((packed)) {
  uint8_t ql[DFL_QK_K / 2];  /* low four bits */
  uint8_t qh[DFL_QK_K / 4];  /* high two bits */
  int8_t scales[DFL_QK_K / 16];
  uint16_t d;                /* F16 super-block scale */
} DflBlockQ6_K;

_Static_assert (sizeof (DflBlockQ8_0) == 34, "ggml's block_q8_0");
_Static_assert (sizeof (DflBlockQ4_0) == 18, "ggml's block_q4_0");
_Static_assert (sizeof (DflBlockQ4_K) == 144, "ggml's block_q4_K");
_Static_assert (sizeof (DflBlockQ6_K) == 210, "ggml's block_q6_K");

/* Sub-block j's (j < 8) six-bit scale and min of a Q4_K block. */
static inline void
dfl_q4k_scale_min (const uint8_t scales[12], int j, int *sc, int *m)
{
  if (j < 4) {
    *sc = scales[j] & 63;
    *m = scales[j + 4] & 63;
  } else {
    *sc = (scales[j + 4] & 0x0f) | ((scales[j - 4] >> 6) << 4);
    *m = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}

/* The F16 field of a block (which may sit at any address). */
static inline uint16_t
dfl_q_f16 (const void *p)
{
  const uint8_t *b = (const uint8_t *) p;
  return (uint16_t) (b[0] | (b[1] << 8));
}

#ifdef __cplusplus
}
#endif
