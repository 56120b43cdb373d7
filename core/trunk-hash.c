/* gst-dflash — a sidecar's binding to its target: the trunk hash, and the
 * check that refuses a drafter made for another target.
 *
 * The hash is of the embedding's (and an untied head's) bytes as the
 * checkpoint the drafter was made from stores them. The same model in
 * another file may store them in another type: a GGUF conversion to F32 of
 * a BF16 checkpoint, say. So a target also binds where its values,
 * written as a checkpoint of F32, F16 or BF16 would write them, hash to the
 * binding: every conversion that keeps the values (widening, or the same
 * type) gives the trained-on bytes back. A conversion that rounds them
 * (F32 to BF16, or BF16 to F16 where values fall outside F16's normal
 * range) holds other weights than the drafter was made against, and is
 * refused as another model is.
 *
 * A sidecar may also carry trunk_signs64: FNV-1a over the sign bits of the
 * embedding's (and an untied head's) values, eight to a byte, lowest bit
 * first, of all values where there are at most 2^21, else the first 2^20
 * and the last 2^20. That is the values rounded to the coarsest tolerance
 * that no conversion between F32, F16 and BF16 can cross (rounding keeps
 * the sign, down to a signed zero), so every such conversion of the target
 * binds, F16 of a BF16 model included; another model's embedding differs
 * in about half its signs. Where it is there, either hash binding binds.
 *
 * Neither survives block quantization (Q8_0, Q4_0, Q4_K, Q6_K): the bytes
 * are others and a value near zero may round to zero or across it. So a
 * sidecar may also carry trunk_sample: the values of DFL_TRUNK_SAMPLE
 * elements of the embedding (then as many of an untied head), each as the
 * 8 hex digits of its F32 bits, at positions a fixed mix of the sample's
 * index picks (dfl_trunk_sample_position). A target binds where its value
 * at every sampled position, dequantized, is within that position's
 * tolerance of the sample: the worst-case rounding of the target's type,
 * read from the target's own block (dfl_trunk_value_tolerance). It is
 * checked where the target's embedding or head is quantized (and where the
 * sidecar has no hash at all): F32, F16 and BF16 targets keep the hashes'
 * exact answers. Another model's value lands within a tolerance of the
 * sample with a chance of about a third at the coarsest type (Q4_K's, for
 * Gaussian-like rows), so all 256 do about never; a model that differs
 * from the drafter's only by less than its quantization step binds: the
 * step is the tolerance. The sizes (layers, hidden, vocab) are checked
 * first, and a tokenizer that numbers the tokens otherwise moves the
 * embedding's rows, so the sample tells it apart too.
 */
#include "drafter-private.h"
#include "dfl-error.h"
#include "quant-layout.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FNV_OFFSET G_GUINT64_CONSTANT (0xcbf29ce484222325)
#define FNV_PRIME G_GUINT64_CONSTANT (0x100000001b3)
#define MIB ((gsize) 1 << 20)

static guint64
fnv1a (guint64 h, const guint8 *p, gsize n)
{
  for (gsize i = 0; i < n; i++) {
    h ^= p[i];
    h *= FNV_PRIME;
  }
  return h;
}

/* A tensor's whole bytes when at most 2 MiB, else its first MiB then its
 * last: a multi-gigabyte embedding hashes in microseconds and still tells
 * two checkpoints apart. */
static guint64
hash_tensor (guint64 h, const DflStoredTensor *t)
{
  if (t->n_bytes <= 2 * MIB)
    return fnv1a (h, t->data, t->n_bytes);
  h = fnv1a (h, t->data, MIB);
  return fnv1a (h, t->data + t->n_bytes - MIB, MIB);
}

/* Elements [from, from + n) of a float tensor as `as` would store them,
 * little-endian, hashed. */
static guint64
hash_elements_as (guint64 h, const DflStoredTensor *t, gint64 from, gint64 n, DflDtype as)
{
  float v[1024];
  guint8 b[4 * G_N_ELEMENTS (v)];

  for (gint64 i = 0; i < n; i += G_N_ELEMENTS (v)) {
    gint64 m = MIN ((gint64) G_N_ELEMENTS (v), n - i);
    gsize size = dfl_dtype_size (as);

    dfl_tensor_read_f32 (t, from + i, m, v);
    for (gint64 j = 0; j < m; j++) {
      guint32 bits;

      if (as == DFL_DTYPE_F32)
        memcpy (&bits, &v[j], 4);
      else
        bits = as == DFL_DTYPE_F16 ? dfl_f32_to_f16 (v[j]) : dfl_f32_to_bf16 (v[j]);
      for (gsize k = 0; k < size; k++)
        b[j * size + k] = (guint8) (bits >> (8 * k));
    }
    h = fnv1a (h, b, (gsize) m * size);
  }
  return h;
}

/* hash_tensor of the tensor a checkpoint storing t's values as `as` would
 * hold: the same bytes where `as` is t's type. */
static guint64
hash_tensor_as (guint64 h, const DflStoredTensor *t, DflDtype as)
{
  gsize size = dfl_dtype_size (as), bytes = (gsize) t->n_elements * size;
  gint64 ends = (gint64) (MIB / size);

  if (as == t->dtype)
    return hash_tensor (h, t);
  if (bytes <= 2 * MIB)
    return hash_elements_as (h, t, 0, t->n_elements, as);
  h = hash_elements_as (h, t, 0, ends, as);
  return hash_elements_as (h, t, t->n_elements - ends, ends, as);
}

static gboolean
trunk_hash_as (const DflSafetensors *target, gboolean tied, int as, char hex[17], GError **error)
{
  const char *names[2] = { "model.embed_tokens.weight", "lm_head.weight" };
  guint64 h = FNV_OFFSET;

  g_return_val_if_fail (target != NULL && hex != NULL, FALSE);
  for (int i = 0; i < (tied ? 1 : 2); i++) {
    const DflStoredTensor *t = dfl_safetensors_find (target, names[i]);
    if (!t) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "%s has no %s%s", dfl_safetensors_path (target),
                   names[i], i ? " (its config says the head is untied)" : "");
      return FALSE;
    }
    if (as >= 0 && !dfl_dtype_is_float (t->dtype)) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                   "%s: %s is %s; a drafter binds to a target whose embedding and head are "
                   "F32, F16 or BF16", dfl_safetensors_path (target), t->name,
                   dfl_dtype_name (t->dtype));
      return FALSE;
    }
    h = as < 0 ? hash_tensor (h, t) : hash_tensor_as (h, t, as);
  }
  g_snprintf (hex, 17, "%016" G_GINT64_MODIFIER "x", h);
  return TRUE;
}

gboolean
dfl_trunk_hash64 (const DflSafetensors *target, gboolean tied, char hex[17], GError **error)
{
  return trunk_hash_as (target, tied, -1, hex, error);
}

/* The trunk hash over the tensors as a checkpoint storing their values as
 * `as` (F32, F16 or BF16) would hold them: the stored bytes where that is
 * their type, else the values converted (round to nearest even). */
static gboolean
trunk_hash64_as (const DflSafetensors *target, gboolean tied, DflDtype as, char hex[17],
                 GError **error)
{
  g_return_val_if_fail (dfl_dtype_is_float (as), FALSE);
  return trunk_hash_as (target, tied, as, hex, error);
}

/* Sign bits of elements [from, from + n), packed eight to a byte, lowest
 * bit first (element `from` in bit 0 of the first byte), hashed. The sign
 * is the top bit of an element's last byte in each float type. */
static guint64
hash_signs (guint64 h, const DflStoredTensor *t, gint64 from, gint64 n)
{
  gsize size = dfl_dtype_size (t->dtype);
  guint8 packed[1024];
  gsize used = 0;

  memset (packed, 0, sizeof packed);
  for (gint64 i = 0; i < n; i++) {
    guint8 sign = t->data[(gsize) (from + i) * size + size - 1] >> 7;

    packed[used / 8] |= (guint8) (sign << (used % 8));
    if (++used == 8 * sizeof packed) {
      h = fnv1a (h, packed, sizeof packed);
      memset (packed, 0, sizeof packed);
      used = 0;
    }
  }
  return fnv1a (h, packed, (used + 7) / 8);
}

#define SIGN_ENDS ((gint64) 1 << 20)

static gboolean
trunk_signs (const DflSafetensors *target, gboolean tied, char hex[17], GError **error)
{
  const char *names[2] = { "model.embed_tokens.weight", "lm_head.weight" };
  guint64 h = FNV_OFFSET;

  for (int i = 0; i < (tied ? 1 : 2); i++) {
    const DflStoredTensor *t = dfl_safetensors_find (target, names[i]);

    if (!t || !dfl_dtype_is_float (t->dtype)) {
      g_set_error (error, DFL_ERROR, t ? DFL_ERROR_UNSUPPORTED : DFL_ERROR_FORMAT,
                   "%s: %s %s%s", dfl_safetensors_path (target), names[i],
                   t ? "is " : "is missing", t ? dfl_dtype_name (t->dtype) : "");
      return FALSE;
    }
    if (t->n_elements <= 2 * SIGN_ENDS) {
      h = hash_signs (h, t, 0, t->n_elements);
    } else {
      h = hash_signs (h, t, 0, SIGN_ENDS);
      h = hash_signs (h, t, t->n_elements - SIGN_ENDS, SIGN_ENDS);
    }
  }
  g_snprintf (hex, 17, "%016" G_GINT64_MODIFIER "x", h);
  return TRUE;
}

/* --- the sample of values --- */

gint64
dfl_trunk_sample_position (int which, int k, gint64 n)
{
  /* splitmix64's output mix of the sample's number: positions spread over
   * the whole tensor, the same in tools/hf-to-gguf.py */
  guint64 z = (guint64) (which * DFL_TRUNK_SAMPLE + k + 1) * G_GUINT64_CONSTANT (0x9e3779b97f4a7c15);

  z = (z ^ (z >> 30)) * G_GUINT64_CONSTANT (0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * G_GUINT64_CONSTANT (0x94d049bb133111eb);
  z ^= z >> 31;
  return (gint64) (z % (guint64) n);
}

/* An F16 field's rounding: relative 2^-11, or 2^-25 absolute where the
 * value is under F16's normal range. */
static double
f16_err (double v)
{
  return fabs (v) * 0x1p-11 + 0x1p-25;
}

/* The tolerances, for a target made from the drafter's target's values by
 * a quantizer that rounds each value to the nearest step of its block, the
 * block's scales rounded to their fields (F16, six bits, int8), and that
 * may narrow a block's range by about a step (ggml's searches for the K
 * types try steps up to range / 16, ours up to range / 16.5), each term a
 * bound:
 *   Q8_0  d / 2 (rounding) + 127 · err(d) (d's F16 rounding over |q| ≤ 127)
 *   Q4_0  d (the value of the sign opposite the block's largest clamps at
 *         q = 15: one step) + 8 · err(d)
 *   Q4_K  sub-block step s = d · sc, min m = dmin · mn: 2 s (rounding, or a
 *         narrowed range's clamp: 1.5 s) + 15 d (the six-bit scale one
 *         step off, ours picks a neighbour, over q ≤ 15) + dmin (the min
 *         one step off) + the F16 roundings of d and dmin over 15 · 63 and
 *         63 steps
 *   Q6_K  group step s = d · sc: 1.5 s (rounding, or a clamp) + 32 d (the
 *         int8 scale one step off over |q − 32| ≤ 32) + 32 · 127 · err(d)
 * and for every type a BF16 rounding of the drafter's value on the way
 * (|v| · 2^-8: a file quantized from a BF16 copy of an F32 checkpoint),
 * which also covers F32, F16 and BF16 targets (F16 below its normal range:
 * 2^-24). */
double
dfl_trunk_value_tolerance (const DflStoredTensor *t, gint64 e, float want, float *have)
{
  double tol = fabs (want) * 0x1p-8 + 0x1p-24;
  gsize elems, bytes;
  const guint8 *block;
  float values[DFL_QK_K];
  int i;

  if (!dfl_dtype_is_quantized (t->dtype)) {
    dfl_tensor_read_f32 (t, e, 1, have);
    return tol;
  }
  /* a tensor of a quantized type is whole blocks, row after row */
  elems = dfl_dtype_block_elems (t->dtype);
  bytes = dfl_dtype_block_bytes (t->dtype);
  block = t->data + (gsize) (e / (gint64) elems) * bytes;
  i = (int) (e % (gint64) elems);
  dfl_dequantize_row (t->dtype, block, values, (int64_t) elems);
  *have = values[i];
  switch (t->dtype) {
    case DFL_DTYPE_Q8_0: {
      double d = fabs (dfl_f16_to_f32 (dfl_q_f16 (block)));
      return tol + 0.5 * d + 127 * f16_err (d);
    }
    case DFL_DTYPE_Q4_0: {
      double d = fabs (dfl_f16_to_f32 (dfl_q_f16 (block)));
      return tol + d + 8 * f16_err (d);
    }
    case DFL_DTYPE_Q4_K: {
      const DflBlockQ4_K *b = (const DflBlockQ4_K *) block;
      double d = fabs (dfl_f16_to_f32 (dfl_q_f16 (&b->d)));
      double dmin = fabs (dfl_f16_to_f32 (dfl_q_f16 (&b->dmin)));
      int sc, mn;

      dfl_q4k_scale_min (b->scales, i / 32, &sc, &mn);
      return tol + 2 * d * sc + 15 * d + dmin + 15 * 63 * f16_err (d) + 63 * f16_err (dmin);
    }
    case DFL_DTYPE_Q6_K:
    default: {
      const DflBlockQ6_K *b = (const DflBlockQ6_K *) block;
      double d = fabs (dfl_f16_to_f32 (dfl_q_f16 (&b->d)));

      return tol + 1.5 * d * abs (b->scales[i / 16]) + 32 * d + 32 * 127 * f16_err (d);
    }
  }
}

/* Every sampled value of the target within its tolerance of the
 * sidecar's; where one is not, a message naming it. */
static gboolean
sample_matches (const DflDrafterWeights *d, const DflSafetensors *target, gboolean tied,
                GError **error)
{
  const char *names[2] = { "model.embed_tokens.weight", "lm_head.weight" };
  guint want = (tied ? 1 : 2) * DFL_TRUNK_SAMPLE;

  if (d->n_binding_sample != want) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_MISMATCH,
                 "%s: base_binding's trunk_sample holds %u values; a target with %s head "
                 "(%s) takes %u", d->path, d->n_binding_sample, tied ? "a tied" : "an untied",
                 dfl_safetensors_path (target), want);
    return FALSE;
  }
  for (int w = 0; w < (tied ? 1 : 2); w++) {
    const DflStoredTensor *t = dfl_safetensors_find (target, names[w]);

    if (!t) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "%s has no %s",
                   dfl_safetensors_path (target), names[w]);
      return FALSE;
    }
    for (int k = 0; k < DFL_TRUNK_SAMPLE; k++) {
      gint64 e = dfl_trunk_sample_position (w, k, t->n_elements);
      float v = d->binding_sample[w * DFL_TRUNK_SAMPLE + k], have;
      double tol = dfl_trunk_value_tolerance (t, e, v, &have);
      gint64 cols = t->shape[t->n_dims - 1];

      if (!(fabs ((double) have - v) <= tol)) {
        g_set_error (error, DFL_ERROR, DFL_ERROR_MISMATCH,
                     "%s was made for another target than %s: %s [%" G_GINT64_FORMAT ", %"
                     G_GINT64_FORMAT "] is %.6g there, %.6g in the drafter's target, further "
                     "than %s's rounding (%.3g) allows", d->path, dfl_safetensors_path (target),
                     names[w], e / cols, e % cols, have, v, dfl_dtype_name (t->dtype), tol);
        return FALSE;
      }
    }
  }
  return TRUE;
}

static gboolean
trunk_quantized (const DflSafetensors *target, gboolean tied)
{
  const char *names[2] = { "model.embed_tokens.weight", "lm_head.weight" };

  for (int i = 0; i < (tied ? 1 : 2); i++) {
    const DflStoredTensor *t = dfl_safetensors_find (target, names[i]);
    if (t && dfl_dtype_is_quantized (t->dtype))
      return TRUE;
  }
  return FALSE;
}

/* Whether the target's trunk hash, as stored or as a checkpoint of the
 * same values in another float type would store them, is `want`. */
static gboolean
binding_matches (const DflSafetensors *target, gboolean tied, const char *want,
                 char have[17], GError **error)
{
  const DflDtype types[3] = { DFL_DTYPE_BF16, DFL_DTYPE_F16, DFL_DTYPE_F32 };
  char other[17];

  if (!dfl_trunk_hash64 (target, tied, have, error))
    return FALSE;
  if (g_strcmp0 (have, want) == 0)
    return TRUE;
  for (int i = 0; i < 3; i++) {
    if (!trunk_hash64_as (target, tied, types[i], other, error))
      return FALSE;
    if (g_strcmp0 (other, want) == 0) {
      memcpy (have, other, 17);
      return TRUE;
    }
  }
  return FALSE;
}

gboolean
dfl_drafter_weights_check_target (const DflDrafterWeights *d, const DflSafetensors *target,
                                  gboolean tied, int target_layers, int hidden, int vocab,
                                  GError **error)
{
  const DflDrafterGeometry *g = &d->g;
  char have[17];

  g_return_val_if_fail (d != NULL && target != NULL, FALSE);
  if (g->target_layers != target_layers || g->hidden != hidden || g->vocab != vocab) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_MISMATCH,
                 "%s drafts for a target of %d layers, hidden %d, vocab %d; %s has %d layers, hidden %d, vocab %d",
                 d->path, g->target_layers, g->hidden, g->vocab, dfl_safetensors_path (target),
                 target_layers, hidden, vocab);
    return FALSE;
  }
  /* a released v1 drafter carries no binding: the sizes are all there is */
  if (d->v1)
    return TRUE;
  if (!d->has_binding && !d->has_binding_signs && !d->binding_sample) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_MISMATCH,
                 "%s has no base_binding in its __metadata__; it cannot say which target it was made for",
                 d->path);
    return FALSE;
  }
  /* a quantized trunk has other bytes and signs: the sample decides */
  if (trunk_quantized (target, tied) || (!d->has_binding && !d->has_binding_signs)) {
    if (d->binding_sample)
      return sample_matches (d, target, tied, error);
    g_set_error (error, DFL_ERROR, DFL_ERROR_MISMATCH,
                 "%s: %s's embedding or head is block-quantized and the sidecar's base_binding "
                 "has no trunk_sample to bind to it by (tools/hf-to-gguf.py --sidecar adds one)",
                 d->path, dfl_safetensors_path (target));
    return FALSE;
  }
  if (d->has_binding_signs) {
    char signs[17];

    if (!trunk_signs (target, tied, signs, error))
      return FALSE;
    if (g_strcmp0 (signs, d->binding_signs) == 0)
      return TRUE;
    if (!d->has_binding) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_MISMATCH,
                   "%s was made for the target of trunk signs %s, this target (%s) has %s",
                   d->path, d->binding_signs, dfl_safetensors_path (target), signs);
      return FALSE;
    }
  }
  if (!binding_matches (target, tied, d->binding, have, error)) {
    if (error && *error)
      return FALSE;
    g_set_error (error, DFL_ERROR, DFL_ERROR_MISMATCH,
                 "%s was made for the target %s, this target (%s) is %s",
                 d->path, d->binding, dfl_safetensors_path (target), have);
    return FALSE;
  }
  return TRUE;
}
