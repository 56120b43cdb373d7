/* gst-dflash — element types. */
#include "dfl-dtype.h"

#include <math.h>
#include <string.h>

/* size: bytes per block; block: elements per block (1: an element type) */
static const struct {
  const char *name;
  size_t size;
  size_t block;
} dfl_dtypes[] = {
  [DFL_DTYPE_F32] = { "F32", 4, 1 },
  [DFL_DTYPE_F16] = { "F16", 2, 1 },
  [DFL_DTYPE_BF16] = { "BF16", 2, 1 },
  [DFL_DTYPE_I32] = { "I32", 4, 1 },
  [DFL_DTYPE_I64] = { "I64", 8, 1 },
  [DFL_DTYPE_I8] = { "I8", 1, 1 },
  [DFL_DTYPE_U8] = { "U8", 1, 1 },
  /* an F16 scale and 32 int8 */
  [DFL_DTYPE_Q8_0] = { "Q8_0", 34, 32 },
  /* an F16 scale and 32 nibbles */
  [DFL_DTYPE_Q4_0] = { "Q4_0", 18, 32 },
  /* F16 d and dmin, 12 bytes of 6-bit sub-block scales and mins, 128 bytes of nibbles */
  [DFL_DTYPE_Q4_K] = { "Q4_K", 144, 256 },
  /* 128 bytes of low nibbles, 64 of high 2 bits, 16 int8 scales, an F16 d */
  [DFL_DTYPE_Q6_K] = { "Q6_K", 210, 256 },
};
_Static_assert (sizeof (dfl_dtypes) / sizeof (dfl_dtypes[0]) == DFL_N_DTYPES, "one row per DflDtype");

#define N_DTYPES (sizeof (dfl_dtypes) / sizeof (dfl_dtypes[0]))

const char *
dfl_dtype_name (DflDtype dtype)
{
  if ((unsigned) dtype >= N_DTYPES)
    return "invalid";
  return dfl_dtypes[dtype].name;
}

size_t
dfl_dtype_size (DflDtype dtype)
{
  if ((unsigned) dtype >= N_DTYPES || dfl_dtypes[dtype].block != 1)
    return 0;
  return dfl_dtypes[dtype].size;
}

size_t
dfl_dtype_block_elems (DflDtype dtype)
{
  return (unsigned) dtype < N_DTYPES ? dfl_dtypes[dtype].block : 0;
}

size_t
dfl_dtype_block_bytes (DflDtype dtype)
{
  return (unsigned) dtype < N_DTYPES ? dfl_dtypes[dtype].size : 0;
}

int
dfl_dtype_is_quantized (DflDtype dtype)
{
  return dfl_dtype_block_elems (dtype) > 1;
}

size_t
dfl_dtype_row_bytes (DflDtype dtype, int64_t n)
{
  size_t block = dfl_dtype_block_elems (dtype);

  if (block == 0 || n < 0 || n % (int64_t) block != 0)
    return 0;
  return (size_t) (n / (int64_t) block) * dfl_dtypes[dtype].size;
}

int
dfl_dtype_from_name (const char *name, DflDtype *dtype)
{
  unsigned i;

  if (name == NULL)
    return 0;
  for (i = 0; i < N_DTYPES; i++) {
    if (dfl_dtypes[i].block == 1 && strcmp (name, dfl_dtypes[i].name) == 0) {
      if (dtype)
        *dtype = (DflDtype) i;
      return 1;
    }
  }
  return 0;
}

int
dfl_dtype_is_float (DflDtype dtype)
{
  return dtype == DFL_DTYPE_F32 || dtype == DFL_DTYPE_F16 || dtype == DFL_DTYPE_BF16;
}

/* ---- element conversions ----------------------------------------------- */

static uint32_t
f32_bits (float v)
{
  uint32_t u;

  memcpy (&u, &v, sizeof u);
  return u;
}

static float
bits_f32 (uint32_t u)
{
  float v;

  memcpy (&v, &u, sizeof v);
  return v;
}

float
dfl_bf16_to_f32 (uint16_t v)
{
  return bits_f32 ((uint32_t) v << 16);
}

uint16_t
dfl_f32_to_bf16 (float v)
{
  uint32_t u = f32_bits (v);

  /* Rounding a NaN could carry its payload into the exponent and make an
   * Inf; keep it a quiet NaN of the same sign instead. */
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return (uint16_t) ((u >> 16) | 0x0040u);
  /* Round to nearest, ties to even: add just under half an ulp, plus one
   * when the kept part is odd. Overflow rounds into Inf, as it should. */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t) (u >> 16);
}

float
dfl_f16_to_f32 (uint16_t v)
{
  uint32_t sign = (uint32_t) (v & 0x8000u) << 16;
  uint32_t exp = (v >> 10) & 0x1fu;
  uint32_t mant = v & 0x3ffu;

  if (exp == 0x1f)               /* Inf or NaN, payload kept */
    return bits_f32 (sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    float m;

    if (mant == 0)
      return bits_f32 (sign);
    /* subnormal: mant × 2^-24, exact in f32 */
    m = ldexpf ((float) mant, -24);
    return sign ? -m : m;
  }
  return bits_f32 (sign | ((exp + 112u) << 23) | (mant << 13));
}

uint16_t
dfl_f32_to_f16 (float v)
{
  uint32_t u = f32_bits (v);
  uint16_t sign = (uint16_t) ((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;

  if (a > 0x7f800000u)           /* NaN: quiet, top payload bits kept */
    return sign | 0x7e00u | (uint16_t) ((a >> 13) & 0x3ffu);
  if (a >= 0x477ff000u)          /* ≥ 65520 rounds to Inf (65504 is odd) */
    return sign | 0x7c00u;
  if (a >= 0x38800000u) {        /* normal in f16: ≥ 2^-14 */
    uint32_t h = ((((a >> 23) - 112u) << 10) | ((a >> 13) & 0x3ffu));
    uint32_t rem = a & 0x1fffu;

    /* a carry out of the mantissa bumps the exponent, which is right */
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
      h++;
    return sign | (uint16_t) h;
  }
  if (a <= 0x33000000u)          /* ≤ 2^-25: the tie with 2^-24 goes to 0 */
    return sign;
  {
    /* subnormal in f16: value = m × 2^(e-150); in units of 2^-24 that is
     * m >> (126 - e), 14 ≤ shift ≤ 24 here. */
    uint32_t e = a >> 23;
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e;
    uint32_t h = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);

    if (rem > half || (rem == half && (h & 1u)))
      h++;                       /* may reach 0x400, the smallest normal */
    return sign | (uint16_t) h;
  }
}
