/* GGUF: the reader's checks of a file (each bad file refused with its
 * message), the Qwen3 target and tokenizer of a .gguf against the same
 * model's safetensors folder, and the drafter's binding to either.
 *
 * The model tests read DFL_GGUF_DIR, where run-gguf-tests.py has put
 * models/qwen3-go converted by tools/hf-to-gguf.py (go-f32.gguf,
 * go-bf16.gguf, go-f16.gguf with go-f16.dflash.safetensors, the sidecar
 * bound by signs too, go-q8_0.gguf and go-q4_0.gguf with their sidecar
 * copies, bound by a sample of values too, go-other.gguf: go-f32.gguf with
 * one embedding value's sign flipped, and other-rand, other-perm and
 * other-cut, models the drafter was not made for, as F32 folders and Q8_0
 * files; go-q4_k_m.gguf, `dflash quantize`'s Q4_K_M of go-f16.gguf, and
 * go-TYPE-deq, each quantized file's weights dequantized as an F32 folder),
 * and DFL_GGUF_MODEL, the folder.
 */
#include <glib.h>
#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

#include "dfl-backend.h"
#include "dfl-error.h"
#include "dfl-kernels.h"
#include "drafter-private.h"
#include "gguf.h"
#include "hold-vulkan-driver.h"
#include "matrix-upload.h"
#include "qwen3-gguf.h"
#include "qwen3-weights.h"
#include "target.h"
#include "tokenizer.h"

/* ---- a GGUF file written byte by byte ---------------------------------- */

typedef struct {
  GByteArray *b;
} Builder;

static void
put (Builder *w, guint64 v, guint n)
{
  for (guint i = 0; i < n; i++) {
    /* past 8 bytes, zeros (a shift by 64 or more is undefined) */
    guint8 c = i < 8 ? (guint8) (v >> (8 * i)) : 0;
    g_byte_array_append (w->b, &c, 1);
  }
}

static void
put_str (Builder *w, const char *s)
{
  put (w, strlen (s), 8);
  g_byte_array_append (w->b, (const guint8 *) s, strlen (s));
}

static void
kv_u32 (Builder *w, const char *key, guint32 v)
{
  put_str (w, key);
  put (w, DFL_GGUF_UINT32, 4);
  put (w, v, 4);
}

static void
kv_f32 (Builder *w, const char *key, float f)
{
  guint32 bits;

  memcpy (&bits, &f, 4);
  put_str (w, key);
  put (w, DFL_GGUF_FLOAT32, 4);
  put (w, bits, 4);
}

static void
kv_str (Builder *w, const char *key, const char *v)
{
  put_str (w, key);
  put (w, DFL_GGUF_STRING, 4);
  put_str (w, v);
}

/* A tensor info: dims innermost first, as the file lists them. */
static void
tensor_info (Builder *w, const char *name, guint n_dims, const guint64 *ne, guint32 type,
             guint64 offset)
{
  put_str (w, name);
  put (w, n_dims, 4);
  for (guint i = 0; i < n_dims; i++)
    put (w, ne[i], 8);
  put (w, type, 4);
  put (w, offset, 8);
}

static void
header (Builder *w, guint32 version, guint64 n_tensors, guint64 n_kv)
{
  g_byte_array_append (w->b, (const guint8 *) "GGUF", 4);
  put (w, version, 4);
  put (w, n_tensors, 8);
  put (w, n_kv, 8);
}

static void
pad_zeros (Builder *w, guint64 align)
{
  while (w->b->len % align)
    put (w, 0, 1);
}

static char *
write_file (Builder *w, const char *name)
{
  g_autoptr (GError) error = NULL;
  char *dir = g_dir_make_tmp ("dfl-gguf-XXXXXX", &error);
  char *path;

  g_assert_no_error (error);
  path = g_build_filename (dir, name, NULL);
  g_file_set_contents (path, (const char *) w->b->data, w->b->len, &error);
  g_assert_no_error (error);
  g_free (dir);
  return path;
}

static void
remove_file (const char *path)
{
  g_autofree char *dir = g_path_get_dirname (path);

  g_unlink (path);
  g_rmdir (dir);
}

/* A valid file: metadata of every value type, two tensors (a [2][32] F32
 * matrix, a [64] Q8_0 row). */
static Builder
valid_file (void)
{
  Builder w = { g_byte_array_new () };
  const guint64 m[2] = { 32, 2 }, q[1] = { 64 };
  guint32 f;

  header (&w, 3, 2, 9);
  kv_str (&w, "general.architecture", "test");
  kv_u32 (&w, "general.alignment", 64);
  kv_f32 (&w, "a.float", 0.5f);
  put_str (&w, "a.int8"); put (&w, DFL_GGUF_INT8, 4); put (&w, 0xfe, 1);
  put_str (&w, "a.bool"); put (&w, DFL_GGUF_BOOL, 4); put (&w, 1, 1);
  put_str (&w, "a.i64"); put (&w, DFL_GGUF_INT64, 4); put (&w, (guint64) -5, 8);
  put_str (&w, "a.f64"); put (&w, DFL_GGUF_FLOAT64, 4); put (&w, 0x4000000000000000ull, 8);
  put_str (&w, "a.strings"); put (&w, DFL_GGUF_ARRAY, 4); put (&w, DFL_GGUF_STRING, 4);
  put (&w, 2, 8); put_str (&w, "x y"); put_str (&w, "é");
  put_str (&w, "a.ints"); put (&w, DFL_GGUF_ARRAY, 4); put (&w, DFL_GGUF_INT16, 4);
  put (&w, 3, 8); put (&w, 1, 2); put (&w, (guint16) -2, 2); put (&w, 300, 2);
  tensor_info (&w, "m", 2, m, 0, 0);
  tensor_info (&w, "q", 1, q, 8, 256);
  pad_zeros (&w, 64);
  for (int i = 0; i < 64; i++) {
    float v = (float) i;

    memcpy (&f, &v, 4);
    put (&w, f, 4);
  }
  for (int i = 0; i < 2 * 34; i++)
    put (&w, i, 1);
  return w;
}

static void
test_reader_valid (void)
{
  Builder w = valid_file ();
  g_autofree char *path = write_file (&w, "valid.gguf");
  g_autoptr (GError) error = NULL;
  g_autoptr (DflGguf) g = dfl_gguf_open (path, &error);
  const DflStoredTensor *m, *q;
  const DflGgufValue *v;
  const char *s;
  gint64 i;
  double d;
  float x[4];

  g_assert_no_error (error);
  g_assert_true (dfl_gguf_is_gguf (path));
  g_assert_cmpuint (dfl_gguf_version (g), ==, 3);
  g_assert_cmpuint (dfl_gguf_alignment (g), ==, 64);
  g_assert_cmpuint (dfl_gguf_n_values (g), ==, 9);
  g_assert_true (dfl_gguf_get_string (g, "general.architecture", FALSE, &s, &error));
  g_assert_cmpstr (s, ==, "test");
  g_assert_true (dfl_gguf_get_float (g, "a.float", FALSE, &d, &error));
  g_assert_cmpfloat (d, ==, 0.5);
  g_assert_true (dfl_gguf_get_float (g, "a.f64", FALSE, &d, &error));
  g_assert_cmpfloat (d, ==, 2.0);
  g_assert_true (dfl_gguf_get_int (g, "a.int8", FALSE, &i, &error));
  g_assert_cmpint (i, ==, -2);
  g_assert_true (dfl_gguf_get_int (g, "a.i64", FALSE, &i, &error));
  g_assert_cmpint (i, ==, -5);
  g_assert_cmpint (dfl_gguf_find_value (g, "a.bool")->type, ==, DFL_GGUF_BOOL);
  g_assert_cmpint (dfl_gguf_find_value (g, "a.bool")->i, ==, 1);
  v = dfl_gguf_get_array (g, "a.strings", DFL_GGUF_STRING, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (v->n, ==, 2);
  g_assert_cmpstr (v->strs[0], ==, "x y");
  g_assert_cmpstr (v->strs[1], ==, "é");
  v = dfl_gguf_get_array (g, "a.ints", DFL_GGUF_INT32, &error);
  g_assert_no_error (error);
  g_assert_cmpint (dfl_gguf_array_int (v, 1), ==, -2);
  g_assert_cmpint (dfl_gguf_array_int (v, 2), ==, 300);
  /* a missing key, optional and not; a key of another type */
  i = 7;
  g_assert_true (dfl_gguf_get_int (g, "no.such", TRUE, &i, &error));
  g_assert_cmpint (i, ==, 7);
  g_assert_false (dfl_gguf_get_int (g, "no.such", FALSE, &i, &error));
  g_assert_error (error, DFL_ERROR, DFL_ERROR_FORMAT);
  g_assert_nonnull (strstr (error->message, "no metadata 'no.such'"));
  g_clear_error (&error);
  g_assert_false (dfl_gguf_get_int (g, "a.float", FALSE, &i, &error));
  g_assert_nonnull (strstr (error->message, "'a.float' is FLOAT32, expected an integer"));
  g_clear_error (&error);

  m = dfl_gguf_find_tensor (g, "m");
  q = dfl_gguf_find_tensor (g, "q");
  g_assert_nonnull (m);
  g_assert_nonnull (q);
  /* outermost first: [rows][cols] */
  g_assert_cmpuint (m->n_dims, ==, 2);
  g_assert_cmpint (m->shape[0], ==, 2);
  g_assert_cmpint (m->shape[1], ==, 32);
  g_assert_cmpint (m->dtype, ==, DFL_DTYPE_F32);
  dfl_tensor_read_f32 (m, 30, 4, x);
  g_assert_cmpfloat (x[0], ==, 30.0f);
  g_assert_cmpfloat (x[3], ==, 33.0f);
  g_assert_cmpint (q->dtype, ==, DFL_DTYPE_Q8_0);
  g_assert_cmpuint (q->n_bytes, ==, 68);
  g_assert_true (q->data == m->data + 256);
  g_assert_cmpuint (dfl_gguf_tensor_type_id (g, 1), ==, 8);
  g_byte_array_unref (w.b);
  g_clear_pointer (&g, dfl_gguf_free);
  remove_file (path);
}

/* Each bad file: its bytes, and what the message must say. */
typedef struct {
  const char *name;
  void (*make) (Builder *w);
  int code;
  const char *message;
} BadCase;

static void
bad_truncated (Builder *w)
{
  Builder v = valid_file ();

  /* cut inside the tensor infos */
  g_byte_array_append (w->b, v.b->data, 200);
  g_byte_array_unref (v.b);
}

static void
bad_magic (Builder *w)
{
  g_byte_array_append (w->b, (const guint8 *) "GGML", 4);
  put (w, 3, 4);
  put (w, 0, 16);
}

static void
bad_version (Builder *w)
{
  header (w, 2, 0, 0);
}

static void
bad_big_endian (Builder *w)
{
  header (w, 0x03000000u, 0, 0);
}

static void
bad_count_limit (Builder *w)
{
  header (w, 3, 2000000, 0);
}

static void
bad_count_file (Builder *w)
{
  header (w, 3, 1000, 10);
}

static void
bad_string_length (Builder *w)
{
  header (w, 3, 0, 1);
  put (w, 1000000, 8);
  g_byte_array_append (w->b, (const guint8 *) "key", 3);
  put (w, 0, 8);
}

static void
bad_value_type (Builder *w)
{
  header (w, 3, 0, 1);
  put_str (w, "k");
  put (w, 13, 4);
  put (w, 0, 8);
}

static void
bad_array_length (Builder *w)
{
  header (w, 3, 0, 1);
  put_str (w, "big");
  put (w, DFL_GGUF_ARRAY, 4);
  put (w, DFL_GGUF_UINT32, 4);
  put (w, G_GUINT64_CONSTANT (1) << 40, 8);
  put (w, 0, 8);
}

/* A file of one tensor, "t": `n_dims` sizes `ne` (innermost first), GGUF
 * type `type` (0 F32) at data offset `offset`, then `data_bytes` zero bytes
 * of data. */
static void
one_tensor_file (Builder *w, guint n_dims, const guint64 *ne, guint32 type, guint64 offset,
                 guint data_bytes)
{
  header (w, 3, 1, 0);
  tensor_info (w, "t", n_dims, ne, type, offset);
  pad_zeros (w, 32);
  put (w, 0, data_bytes);
}

static void
bad_misaligned (Builder *w)
{
  const guint64 ne[1] = { 4 };

  one_tensor_file (w, 1, ne, 0, 8, 32);
}

static void
bad_overlap (Builder *w)
{
  const guint64 a[1] = { 16 }, b[1] = { 8 };

  header (w, 3, 2, 0);
  tensor_info (w, "a", 1, a, 0, 0);
  tensor_info (w, "b", 1, b, 0, 32);
  pad_zeros (w, 32);
  put (w, 0, 64);
  put (w, 0, 32);
}

static void
bad_type_size (Builder *w)
{
  const guint64 ne[2] = { 8, 4 };

  /* [4][8] F32 needs 128 bytes; the data section has 64 */
  one_tensor_file (w, 2, ne, 0, 0, 64);
}

static void
bad_block_row (Builder *w)
{
  const guint64 ne[2] = { 48, 2 };

  header (w, 3, 1, 0);
  tensor_info (w, "q", 2, ne, 8, 0);
  pad_zeros (w, 32);
  put (w, 0, 128);
}

static void
bad_bytes_overflow (Builder *w)
{
  const guint64 ne[1] = { (G_GUINT64_CONSTANT (1) << 62) + 8 };

  /* 2^62 + 8 F32 elements: 2^64 + 32 bytes, which wrap to the 32 the data
   * section holds */
  one_tensor_file (w, 1, ne, 0, 0, 32);
}

static void
bad_unknown_type (Builder *w)
{
  const guint64 ne[1] = { 4 };

  one_tensor_file (w, 1, ne, 99, 0, 32);
}

static void
bad_unread_type (Builder *w)
{
  const guint64 ne[1] = { 256 };

  one_tensor_file (w, 1, ne, 13, 0, 256);
}

static void
bad_alignment (Builder *w)
{
  header (w, 3, 0, 1);
  kv_u32 (w, "general.alignment", 24);
}

static void
bad_duplicate_key (Builder *w)
{
  header (w, 3, 0, 2);
  kv_u32 (w, "k", 1);
  kv_u32 (w, "k", 2);
}

static const BadCase bad_cases[] = {
  { "truncated", bad_truncated, DFL_ERROR_FORMAT, "truncated: " },
  { "magic", bad_magic, DFL_ERROR_FORMAT, "not a GGUF file" },
  { "version", bad_version, DFL_ERROR_UNSUPPORTED, "GGUF version 2; only version 3" },
  { "big-endian", bad_big_endian, DFL_ERROR_UNSUPPORTED, "(a big-endian file)" },
  { "count-limit", bad_count_limit, DFL_ERROR_LIMIT, "tensor count 2000000 is above the limit" },
  { "count-file", bad_count_file, DFL_ERROR_FORMAT,
    "1000 tensors and 10 metadata entries cannot fit" },
  { "string-length", bad_string_length, DFL_ERROR_FORMAT,
    "has length 1000000, past the end of the file" },
  { "value-type", bad_value_type, DFL_ERROR_FORMAT, "value type 13, not a GGUF value type" },
  { "array-length", bad_array_length, DFL_ERROR_FORMAT,
    "metadata 'big' claims 1099511627776 items of UINT32" },
  { "misaligned", bad_misaligned, DFL_ERROR_FORMAT,
    "tensor 't' offset 8 is not a multiple of the alignment 32" },
  { "overlap", bad_overlap, DFL_ERROR_FORMAT, "tensor 'b' [32, 64) overlaps tensor 'a' [0, 64)" },
  { "type-size", bad_type_size, DFL_ERROR_FORMAT,
    "tensor 't' at offset 0 of 128 bytes runs past the end of the data section (64 bytes)" },
  { "block-row", bad_block_row, DFL_ERROR_FORMAT,
    "rows of 48 elements, not a whole number of its 32-element blocks" },
  { "bytes-overflow", bad_bytes_overflow, DFL_ERROR_LIMIT,
    "tensor 't' F32 [4611686018427387912] needs more bytes than fit in memory" },
  { "unknown-type", bad_unknown_type, DFL_ERROR_FORMAT, "tensor 't' has unknown type 99" },
  { "unread-type", bad_unread_type, DFL_ERROR_UNSUPPORTED,
    "tensor 't' has unsupported type 13 (Q5_K)" },
  { "alignment", bad_alignment, DFL_ERROR_FORMAT, "general.alignment is 24, not a power of two" },
  { "duplicate-key", bad_duplicate_key, DFL_ERROR_FORMAT, "metadata key 'k' appears twice" },
};

static void
test_reader_bad (gconstpointer data)
{
  const BadCase *c = data;
  Builder w = { g_byte_array_new () };
  g_autofree char *path = NULL;
  g_autoptr (GError) error = NULL;
  DflGguf *g;

  c->make (&w);
  path = write_file (&w, "bad.gguf");
  g = dfl_gguf_open (path, &error);
  g_assert_null (g);
  g_assert_error (error, DFL_ERROR, c->code);
  if (!strstr (error->message, c->message) || !strstr (error->message, path))
    g_error ("%s: message '%s' does not name the file and say '%s'", c->name, error->message,
             c->message);
  g_byte_array_unref (w.b);
  remove_file (path);
}

/* ---- the default model, converted ---------------------------------------- */

static const char *
gguf_dir (void)
{
  const char *dir = g_getenv ("DFL_GGUF_DIR");

  if (!dir)
    g_test_skip ("DFL_GGUF_DIR is not set (run through run-gguf-tests.py)");
  return dir;
}

static char *
converted (const char *type)
{
  return g_strdup_printf ("%s/go-%s.gguf", g_getenv ("DFL_GGUF_DIR"), type);
}

static void
test_config (void)
{
  g_autofree char *path = NULL;
  g_autoptr (GError) error = NULL;
  g_autoptr (DflSafetensors) st = NULL, ref = NULL;
  DflQwen3Config a, b;

  if (!gguf_dir ())
    return;
  path = converted ("bf16");
  st = dfl_qwen3_checkpoint_open (path, &a, &error);
  g_assert_no_error (error);
  ref = dfl_qwen3_checkpoint_open (g_getenv ("DFL_GGUF_MODEL"), &b, &error);
  g_assert_no_error (error);
  g_assert_cmpint (a.hidden, ==, b.hidden);
  g_assert_cmpint (a.intermediate, ==, b.intermediate);
  g_assert_cmpint (a.layers, ==, b.layers);
  g_assert_cmpint (a.heads, ==, b.heads);
  g_assert_cmpint (a.kv_heads, ==, b.kv_heads);
  g_assert_cmpint (a.head_dim, ==, b.head_dim);
  g_assert_cmpint (a.vocab, ==, b.vocab);
  g_assert_cmpint (a.max_positions, ==, b.max_positions);
  g_assert_cmpfloat ((float) a.rms_eps, ==, (float) b.rms_eps);
  g_assert_cmpfloat (a.rope_theta, ==, b.rope_theta);
  g_assert_cmpint (a.tie_word_embeddings, ==, b.tie_word_embeddings);
  g_assert_cmpint (a.bos_id, ==, b.bos_id);
  g_assert_cmpint (a.n_eos, ==, b.n_eos);
  g_assert_cmpint (a.eos_ids[0], ==, b.eos_ids[0]);
  /* every tensor of the folder, under its name, with its shape; BF16 as it
   * was: the same bytes */
  for (guint i = 0; i < dfl_safetensors_n_tensors (ref); i++) {
    const DflStoredTensor *r = dfl_safetensors_nth (ref, i);
    const DflStoredTensor *t = dfl_safetensors_find (st, r->name);

    g_assert_nonnull (t);
    g_assert_cmpuint (t->n_dims, ==, r->n_dims);
    for (guint d = 0; d < r->n_dims; d++)
      g_assert_cmpint (t->shape[d], ==, r->shape[d]);
    if (r->n_dims == 2) {
      g_assert_cmpint (t->dtype, ==, DFL_DTYPE_BF16);
      g_assert_cmpmem (t->data, t->n_bytes, r->data, r->n_bytes);
    }
  }
}

/* Greedy decoding from a prompt, the logits of every step kept. */
static void
greedy (const DflTarget *t, const int *prompt, int n_prompt, int steps, GArray *tokens,
        GArray *logits)
{
  g_autoptr (DflTargetSeq) s = dfl_target_seq_new (t);
  g_autoptr (GError) error = NULL;
  int vocab = dfl_target_config (t)->vocab;
  g_autofree float *row = g_new (float, (gsize) vocab * n_prompt);
  int32_t next[64];
  DflForwardOut out = { 0 };

  out.logits_from = n_prompt - 1;
  out.logits = row;
  out.argmax = next;
  g_assert_true (dfl_target_forward (t, s, prompt, n_prompt, &out, &error));
  g_assert_no_error (error);
  for (int i = 0; i < steps; i++) {
    int id = next[0];

    g_array_append_vals (logits, row, vocab);
    g_array_append_val (tokens, id);
    out.logits_from = 0;
    g_assert_true (dfl_target_forward (t, s, &id, 1, &out, &error));
    g_assert_no_error (error);
  }
}

/* Greedy decoding of the test's prompt by `t` and by `ref`: the same
 * tokens and logits, bit for bit. */
static void
assert_same_greedy (const DflTarget *t, const DflTarget *ref)
{
  const int prompt[] = { 17, 300, 4011, 29, 811, 5, 92, 2048 };
  g_autoptr (GArray) ref_tokens = g_array_new (FALSE, FALSE, sizeof (int));
  g_autoptr (GArray) tokens = g_array_new (FALSE, FALSE, sizeof (int));
  g_autoptr (GArray) ref_logits = g_array_new (FALSE, FALSE, sizeof (float));
  g_autoptr (GArray) logits = g_array_new (FALSE, FALSE, sizeof (float));

  greedy (ref, prompt, G_N_ELEMENTS (prompt), 24, ref_tokens, ref_logits);
  greedy (t, prompt, G_N_ELEMENTS (prompt), 24, tokens, logits);
  g_assert_cmpmem (tokens->data, tokens->len * sizeof (int), ref_tokens->data,
                   ref_tokens->len * sizeof (int));
  g_assert_cmpmem (logits->data, logits->len * sizeof (float), ref_logits->data,
                   ref_logits->len * sizeof (float));
}

static void
check_target (const char *type)
{
  g_autofree char *path = NULL;
  g_autoptr (GError) error = NULL;
  g_autoptr (DflTarget) ref = NULL, t = NULL;

  if (!gguf_dir ())
    return;
  path = converted (type);
  ref = dfl_target_load (g_getenv ("DFL_GGUF_MODEL"), &error);
  g_assert_no_error (error);
  t = dfl_target_load (path, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (dfl_target_dir (t), ==, path);
  /* an F32 cache beside matrices whose products take F32 inputs */
  g_assert_cmpint (dfl_target_kv_type (t), ==, DFL_DTYPE_F32);
  /* the same weights (BF16 as stored, F32 widened exactly): the same
   * products, bit for bit */
  assert_same_greedy (t, ref);
}

/* A GGUF target put on a CUDA device (where there is one) against the same
 * folder's put there: the same tensors uploaded, so the same tokens and
 * logits, bit for bit, as stored and widened to F32. */
static void
test_cuda_upload (void)
{
  const DflTargetWeights as[2] = { DFL_TARGET_AS_STORED, DFL_TARGET_F32 };
  g_autofree char *path = NULL;
  g_autoptr (GError) error = NULL;
  g_autoptr (DflDevice) dev = NULL;
  g_autoptr (DflTarget) ref = NULL, t = NULL;

  if (!gguf_dir ())
    return;
  if (!(dev = dfl_device_open (DFL_BACKEND_CUDA, 0, &error))) {
    g_test_skip (error->message);
    return;
  }
  path = converted ("bf16");
  ref = dfl_target_load (g_getenv ("DFL_GGUF_MODEL"), &error);
  g_assert_no_error (error);
  t = dfl_target_load (path, &error);
  g_assert_no_error (error);
  for (int i = 0; i < 2; i++) {
    g_autoptr (DflTarget) dref = dfl_target_upload (ref, dev, as[i], &error);
    g_autoptr (DflTarget) dt = NULL;

    g_assert_no_error (error);
    dt = dfl_target_upload (t, dev, as[i], &error);
    g_assert_no_error (error);
    assert_same_greedy (dt, dref);
  }
}

static void
test_target_f32 (void)
{
  check_target ("f32");
}

static void
test_target_bf16 (void)
{
  check_target ("bf16");
}

/* Logits of `n` tokens at every row: one forward of them all (`whole`),
 * or one token a forward (a decode step each). */
static float *
logits_of (const DflTarget *t, const int *ids, int n, gboolean whole)
{
  g_autoptr (DflTargetSeq) s = dfl_target_seq_new (t);
  g_autoptr (GError) error = NULL;
  int vocab = dfl_target_config (t)->vocab;
  float *logits = g_new (float, (gsize) vocab * n);

  for (int at = 0; at < n; at += whole ? n : 1) {
    DflForwardOut out = { .logits_from = 0, .logits = logits + (gsize) at * vocab };
    g_assert_true (dfl_target_forward (t, s, ids + at, whole ? n : 1, &out, &error));
    g_assert_no_error (error);
  }
  return logits;
}

/* The converted file of `type` and the same weights dequantized by the
 * gguf package as an F32 folder (go-TYPE-deq). */
static void
load_quantized_pair (const char *type, DflTarget **quantized, DflTarget **dequantized)
{
  g_autofree char *path = converted (type);
  g_autofree char *deq = g_strdup_printf ("%s/go-%s-deq", g_getenv ("DFL_GGUF_DIR"), type);
  g_autoptr (GError) error = NULL;

  *quantized = dfl_target_load (path, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (dfl_target_dir (*quantized), ==, path);
  *dequantized = dfl_target_load (deq, &error);
  g_assert_no_error (error);
}

/* The largest difference of `n` rows of `vocab` logits from `want`'s, each
 * row's relative to its largest |want|; `agree` (may be NULL) counts the
 * rows of the same argmax. */
static double
worst_row_error (const float *got, const float *want, int n, int vocab, int *agree)
{
  double worst = 0.0;

  for (int r = 0; r < n; r++) {
    const float *a = got + (gsize) r * vocab, *b = want + (gsize) r * vocab;
    double scale = 0.0, diff = 0.0;
    int am = 0, bm = 0;
    for (int v = 0; v < vocab; v++) {
      scale = MAX (scale, fabs (b[v]));
      diff = MAX (diff, fabs ((double) a[v] - b[v]));
      am = a[v] > a[am] ? v : am;
      bm = b[v] > b[bm] ? v : bm;
    }
    worst = MAX (worst, diff / scale);
    if (agree)
      *agree += am == bm;
  }
  return worst;
}

/* A quantized file (every matrix Q8_0 or Q4_0, as the gguf package
 * quantizes; or dflash quantize's Q4_K_M) against the same weights
 * dequantized to F32 (go-TYPE-deq):
 * what is left is the products' own rounding, the activations quantized to
 * int8 in groups of 32, and the KV cache's BF16 (F32 beside the F32
 * reference's matrices), held to `tol` of the row's largest logit. And the
 * quantized products are batch-invariant: a row verified among the others
 * is the same bits as decoded alone. */
static void
check_quantized (const char *type, double tol)
{
  const int prompt[] = { 17, 300, 4011, 29, 811, 5, 92, 2048 };
  g_autoptr (DflTarget) ref = NULL, t = NULL;
  g_autoptr (GArray) ids = g_array_new (FALSE, FALSE, sizeof (int));
  g_autoptr (GArray) ref_logits = g_array_new (FALSE, FALSE, sizeof (float));
  g_autofree float *whole = NULL, *steps = NULL, *want = NULL;
  double worst;
  int vocab, n, agree = 0;

  if (!gguf_dir ())
    return;
  load_quantized_pair (type, &t, &ref);
  g_assert_cmpint (dfl_target_kv_type (t), ==, DFL_DTYPE_BF16);
  g_assert_cmpint (dfl_target_kv_type (ref), ==, DFL_DTYPE_F32);
  vocab = dfl_target_config (t)->vocab;
  /* the reference's greedy text, then both read it whole */
  g_array_append_vals (ids, prompt, G_N_ELEMENTS (prompt));
  greedy (ref, prompt, G_N_ELEMENTS (prompt), 24, ids, ref_logits);
  n = ids->len;
  want = logits_of (ref, (const int *) ids->data, n, TRUE);
  whole = logits_of (t, (const int *) ids->data, n, TRUE);
  steps = logits_of (t, (const int *) ids->data, n, FALSE);
  g_assert_cmpmem (whole, (gsize) n * vocab * sizeof (float), steps,
                   (gsize) n * vocab * sizeof (float));
  worst = worst_row_error (whole, want, n, vocab, &agree);
  g_test_message ("%s: logits within %.2e of the row's largest against the dequantized weights "
                  "(bound %.0e); the same argmax at %d of %d rows", type, worst, tol, agree, n);
  g_assert_cmpfloat (worst, <=, tol);
}

static void
test_target_q8_0 (void)
{
  check_quantized ("q8_0", 2e-2);
}

static void
test_target_q4_0 (void)
{
  check_quantized ("q4_0", 2e-2);
}

/* `dflash quantize --type q4_k_m` of the F16 file: Q4_K, Q6_K, Q4_0 and
 * Q8_0 matrices in one model */
static void
test_target_q4_k_m (void)
{
  check_quantized ("q4_k_m", 2e-2);
}

/* A [rows][cols] F32 matrix of device memory `handle` (at `offset`) back
 * on the host. */
static float *
download_f32 (DflDevice *dev, gpointer handle, gsize offset, gint64 rows, gint64 cols)
{
  g_autoptr (GError) error = NULL;
  float *host = g_new (float, (gsize) rows * cols);

  g_assert_true (dfl_device_download (dev, handle, offset, host,
                                      (gsize) rows * cols * sizeof (float), &error));
  g_assert_no_error (error);
  return host;
}

/* Speculative decoding's verification on `t`, its drafts right: after the
 * prompt, the plain greedy continuation (a forward a token) goes through
 * again in forwards of `block` rows, as a verifier checks a block of
 * drafts, and every row's argmax must be the plain decoding's next token
 * (each draft accepted, the bonus the plain one): what makes greedy
 * speculative decoding give the tokens of plain decoding. */
static void
assert_verifies_greedy (const DflTarget *t, int block)
{
  const int prompt[] = { 17, 300, 4011, 29, 811, 5, 92, 2048 };
  const int n_prompt = G_N_ELEMENTS (prompt);
  g_autoptr (DflTargetSeq) s = dfl_target_seq_new (t);
  g_autoptr (GError) error = NULL;
  g_autoptr (GArray) plain = g_array_new (FALSE, FALSE, sizeof (int));
  g_autoptr (GArray) logits = g_array_new (FALSE, FALSE, sizeof (float));
  const int *tokens;
  int32_t next[16];
  DflForwardOut out = { .logits_from = n_prompt - 1, .argmax = next };
  int n = 33;

  g_assert_cmpint (block, <=, (int) G_N_ELEMENTS (next));
  greedy (t, prompt, n_prompt, n, plain, logits);
  tokens = (const int *) plain->data;
  g_assert_true (dfl_target_forward (t, s, prompt, n_prompt, &out, &error));
  g_assert_no_error (error);
  g_assert_cmpint (next[0], ==, tokens[0]);
  for (int at = 0; at + block < n; at += block) {
    out.logits_from = 0;
    g_assert_true (dfl_target_forward (t, s, tokens + at, block, &out, &error));
    g_assert_no_error (error);
    for (int r = 0; r < block; r++)
      g_assert_cmpint (next[r], ==, tokens[at + r + 1]);
  }
}

/* A quantized file's target put on each GPU this build opens here, as
 * stored (and as F32: the same weights): its matrices go up dequantized to
 * F32 (the embedding bit for bit the gguf package's dequantization,
 * go-TYPE-deq), so its greedy tokens and logits are bitwise those of
 * go-TYPE-deq put there, and its logits along the CPU's greedy text of
 * go-TYPE-deq within 1e-3 of the row's largest of the CPU's (F32 products
 * on both); as BF16, the same values rounded in half the bytes, within
 * the 3e-2 of BF16 weights (test-cuda-target's bound). Where the device's products are batch-invariant (Vulkan's;
 * not cuBLAS's) those logits read in one forward are bitwise those of a
 * forward a row; on every device, blocks of the greedy text verified in
 * one forward each accept every token (assert_verifies_greedy). */
static void
check_gpu_target (const char *type)
{
  const DflBackendId gpus[] = { DFL_BACKEND_CUDA, DFL_BACKEND_VULKAN };
  const int prompt[] = { 17, 300, 4011, 29, 811, 5, 92, 2048 };
  g_autoptr (GError) error = NULL;
  g_autoptr (DflTarget) tq = NULL, td = NULL;
  g_autoptr (GArray) ids = g_array_new (FALSE, FALSE, sizeof (int));
  g_autoptr (GArray) cpu_logits = g_array_new (FALSE, FALSE, sizeof (float));
  g_autofree float *want = NULL;
  gboolean ran = FALSE;
  int vocab, hidden, n;

  if (!gguf_dir ())
    return;
  load_quantized_pair (type, &tq, &td);
  vocab = dfl_target_config (tq)->vocab;
  hidden = dfl_target_config (tq)->hidden;
  g_array_append_vals (ids, prompt, G_N_ELEMENTS (prompt));
  greedy (td, prompt, G_N_ELEMENTS (prompt), 24, ids, cpu_logits);
  n = ids->len;
  want = logits_of (td, (const int *) ids->data, n, TRUE);

  for (guint i = 0; i < G_N_ELEMENTS (gpus); i++) {
    g_autoptr (DflDevice) dev = dfl_device_open (gpus[i], 0, NULL);
    g_autoptr (DflTarget) dq = NULL, dd = NULL, df = NULL, db = NULL;
    g_autofree float *embed = NULL, *embed_f32 = NULL, *along = NULL, *rounded = NULL;
    g_autofree guint16 *embed_bf16 = NULL;
    gsize table = (gsize) vocab * hidden;
    DflTensor e, ref;
    double worst;

    if (!dev)
      continue;
    ran = TRUE;
    dq = dfl_target_upload (tq, dev, DFL_TARGET_AS_STORED, &error);
    g_assert_no_error (error);
    e = dfl_target_embedding_tensor (dq);
    g_assert_cmpint (e.dtype, ==, DFL_DTYPE_F32);
    g_assert_cmpint (dfl_target_head_tensor (dq).dtype, ==, DFL_DTYPE_F32);
    ref = dfl_target_embedding_tensor (td);
    embed = download_f32 (dev, e.handle, e.offset, vocab, hidden);
    g_assert_cmpmem (embed, (gsize) vocab * hidden * sizeof (float), dfl_tensor_data (&ref),
                     (gsize) vocab * hidden * sizeof (float));
    /* as F32: the same upload */
    df = dfl_target_upload (tq, dev, DFL_TARGET_F32, &error);
    g_assert_no_error (error);
    g_assert_cmpuint (dfl_target_weight_bytes (df), ==, dfl_target_weight_bytes (dq));
    e = dfl_target_embedding_tensor (df);
    embed_f32 = download_f32 (dev, e.handle, e.offset, vocab, hidden);
    g_assert_cmpmem (embed_f32, (gsize) vocab * hidden * sizeof (float), embed,
                     (gsize) vocab * hidden * sizeof (float));

    dd = dfl_target_upload (td, dev, DFL_TARGET_AS_STORED, &error);
    g_assert_no_error (error);
    assert_same_greedy (dq, dd);
    along = logits_of (dq, (const int *) ids->data, n, TRUE);
    worst = worst_row_error (along, want, n, vocab, NULL);
    g_test_message ("%s on %s: logits within %.2e of the CPU's on the dequantized weights", type,
                    dfl_device_describe (dev), worst);
    g_assert_cmpfloat (worst, <=, 1e-3);
    if (dfl_device_op_caps (dev, DFL_OP_MATMUL, DFL_DTYPE_F32) & DFL_OP_CAP_ROW_INVARIANT) {
      g_autofree float *steps = logits_of (dq, (const int *) ids->data, n, FALSE);
      g_assert_cmpmem (along, (gsize) n * vocab * sizeof (float), steps,
                       (gsize) n * vocab * sizeof (float));
    }
    assert_verifies_greedy (dq, 8);

    /* as BF16: the dequantized values rounded, in half the bytes */
    db = dfl_target_upload (tq, dev, DFL_TARGET_BF16, &error);
    g_assert_no_error (error);
    g_assert_cmpuint (2 * dfl_target_weight_bytes (db), ==, dfl_target_weight_bytes (dq));
    e = dfl_target_embedding_tensor (db);
    g_assert_cmpint (e.dtype, ==, DFL_DTYPE_BF16);
    embed_bf16 = g_new (guint16, table);
    g_assert_true (dfl_device_download (dev, e.handle, e.offset, embed_bf16, table * 2, &error));
    g_assert_no_error (error);
    for (gsize v = 0; v < table; v++)
      g_assert_cmpuint (embed_bf16[v], ==, dfl_f32_to_bf16 (embed[v]));
    rounded = logits_of (db, (const int *) ids->data, n, TRUE);
    worst = worst_row_error (rounded, want, n, vocab, NULL);
    g_test_message ("%s on %s as BF16: logits within %.2e of the CPU's on the dequantized "
                    "weights", type, dfl_device_describe (dev), worst);
    g_assert_cmpfloat (worst, <=, 3e-2);
  }
  if (!ran)
    g_test_skip ("no GPU device");
}

static void
test_gpu_target_q8_0 (void)
{
  check_gpu_target ("q8_0");
}

static void
test_gpu_target_q4_0 (void)
{
  check_gpu_target ("q4_0");
}

static void
test_tokenizer (void)
{
  const char *texts[] = {
    "Hello, world! This is a test of the tokenizer.",
    "func main() {\n\tfmt.Println(\"héllo, 世界\")\n}\n",
    "  leading spaces, trailing  \n\n\r\n numbers 12345 and 3.14159",
    "<|endoftext|>special in the middle<|endoftext|> done",
    "Ünïcödé NFC: e\xcc\x81 vs \xc3\xa9; emoji \xf0\x9f\x98\x80; tabs\t\tand 'quotes' it's",
  };
  g_autofree char *path = NULL, *json = NULL;
  g_autoptr (GError) error = NULL;
  g_autoptr (DflTokenizer) ref = NULL, tok = NULL;
  gboolean present = FALSE;

  if (!gguf_dir ())
    return;
  path = converted ("bf16");
  json = g_build_filename (g_getenv ("DFL_GGUF_MODEL"), "tokenizer.json", NULL);
  ref = dfl_tokenizer_load (json, &error);
  g_assert_no_error (error);
  tok = dfl_tokenizer_load_checkpoint (path, &present, &error);
  g_assert_no_error (error);
  g_assert_true (present);
  g_assert_cmpuint (dfl_tokenizer_vocab_size (tok), ==, dfl_tokenizer_vocab_size (ref));
  for (guint i = 0; i < G_N_ELEMENTS (texts); i++) {
    g_autoptr (GArray) a = dfl_tokenizer_encode (ref, texts[i], -1, &error);
    g_autoptr (GArray) b = dfl_tokenizer_encode (tok, texts[i], -1, &error);
    g_autofree char *da = NULL, *db = NULL;

    g_assert_no_error (error);
    g_assert_cmpmem (b->data, b->len * sizeof (int), a->data, a->len * sizeof (int));
    for (int s = 0; s < 2; s++) {
      g_free (da);
      g_free (db);
      da = dfl_tokenizer_decode (ref, (const int *) a->data, a->len, s);
      db = dfl_tokenizer_decode (tok, (const int *) b->data, b->len, s);
      g_assert_cmpstr (db, ==, da);
    }
  }
  for (int id = 0; id < (int) dfl_tokenizer_vocab_size (ref); id++)
    g_assert_cmpint (dfl_tokenizer_is_special (tok, id), ==, dfl_tokenizer_is_special (ref, id));
}

static gboolean
binds_sidecar (const char *sidecar, const char *target_path, GError **error)
{
  g_autoptr (DflTarget) t = dfl_target_load (target_path, error);
  g_autoptr (DflDrafterWeights) d = NULL;
  const DflQwen3Config *c;

  g_assert_nonnull (t);
  c = dfl_target_config (t);
  d = dfl_drafter_weights_open (sidecar, error);
  g_assert_nonnull (d);
  return dfl_drafter_weights_check_target (d, dfl_target_tensors (t), c->tie_word_embeddings,
                                           c->layers, c->hidden, c->vocab, error);
}

/* With the model's own sidecar (bound by the trunk hash alone). */
static gboolean
binds (const char *target_path, GError **error)
{
  g_autofree char *sidecar = g_build_filename (g_getenv ("DFL_GGUF_MODEL"), "dflash.safetensors",
                                               NULL);

  return binds_sidecar (sidecar, target_path, error);
}

static void
test_binding (void)
{
  g_autofree char *f32 = NULL, *bf16 = NULL, *f16 = NULL, *other = NULL;
  g_autoptr (GError) error = NULL;

  if (!gguf_dir ())
    return;
  f16 = converted ("f16");
  f32 = converted ("f32");
  bf16 = converted ("bf16");
  other = converted ("other");
  /* the sidecar's own target, and its lossless conversions */
  g_assert_true (binds (g_getenv ("DFL_GGUF_MODEL"), &error));
  g_assert_no_error (error);
  g_assert_true (binds (f32, &error));
  g_assert_no_error (error);
  g_assert_true (binds (bf16, &error));
  g_assert_no_error (error);
  /* one embedding value's sign flipped: another model */
  g_assert_false (binds (other, &error));
  g_assert_error (error, DFL_ERROR, DFL_ERROR_MISMATCH);
  g_assert_nonnull (strstr (error->message, "was made for the target"));
  g_assert_nonnull (strstr (error->message, other));
  g_clear_error (&error);
  /* F16 rounds the BF16 values under F16's normal range (2822 of the
   * embedding's): other bytes, which the trunk hash alone refuses */
  g_assert_false (binds (f16, &error));
  g_assert_error (error, DFL_ERROR, DFL_ERROR_MISMATCH);
  g_clear_error (&error);
}

/* The sidecar copy that carries trunk_signs64 too (hf-to-gguf.py
 * --sidecar): every conversion binds, the folder too, the other model not. */
static void
test_binding_signs (void)
{
  const char *types[] = { "f32", "bf16", "f16" };
  g_autofree char *signed_sidecar = NULL, *other = NULL;
  g_autoptr (GError) error = NULL;

  if (!gguf_dir ())
    return;
  signed_sidecar = g_strdup_printf ("%s/go-f16.dflash.safetensors", g_getenv ("DFL_GGUF_DIR"));
  other = converted ("other");
  g_assert_true (binds_sidecar (signed_sidecar, g_getenv ("DFL_GGUF_MODEL"), &error));
  g_assert_no_error (error);
  for (guint i = 0; i < G_N_ELEMENTS (types); i++) {
    g_autofree char *path = converted (types[i]);

    g_assert_true (binds_sidecar (signed_sidecar, path, &error));
    g_assert_no_error (error);
  }
  g_assert_false (binds_sidecar (signed_sidecar, other, &error));
  g_assert_error (error, DFL_ERROR, DFL_ERROR_MISMATCH);
  g_assert_nonnull (strstr (error->message, other));
}

/* The sidecar binds the model's folder and each of its conversions to
 * `types` (converted ()). */
static void
assert_binds_model (const char *sidecar, const char *const *types, guint n)
{
  g_autoptr (GError) error = NULL;

  g_assert_true (binds_sidecar (sidecar, g_getenv ("DFL_GGUF_MODEL"), &error));
  g_assert_no_error (error);
  for (guint i = 0; i < n; i++) {
    g_autofree char *path = converted (types[i]);

    g_assert_true (binds_sidecar (sidecar, path, &error));
    g_assert_no_error (error);
  }
}

/* The sidecar copy that carries a sample of values (hf-to-gguf.py --sidecar
 * with a quantized --outtype) binds to the Q8_0 and Q4_0 conversions, to
 * the folder and to its float conversions; it refuses a random model of the
 * same shapes, the same weights with the tokenizer numbering the tokens
 * otherwise, and the same model cut to fewer layers, naming what differs.
 * The model's own sidecar (hashes only) refuses a quantized file, saying
 * what it lacks. */
static void
test_binding_quantized (void)
{
  const char *bind[] = { "q8_0", "q4_0", "f32", "bf16", "f16" };
  const struct { const char *name, *message; } refuse[] = {
    { "rand", "was made for another target than" },
    { "perm", "was made for another target than" },
    { "cut", "drafts for a target of 8 layers, hidden 384, vocab 8192" },
  };
  g_autofree char *sidecar = NULL, *q8 = NULL;
  g_autoptr (GError) error = NULL;

  if (!gguf_dir ())
    return;
  sidecar = g_strdup_printf ("%s/go-q8_0.dflash.safetensors", g_getenv ("DFL_GGUF_DIR"));
  assert_binds_model (sidecar, bind, G_N_ELEMENTS (bind));
  for (guint i = 0; i < G_N_ELEMENTS (refuse); i++) {
    g_autofree char *path = g_strdup_printf ("%s/other-%s-q8_0.gguf", g_getenv ("DFL_GGUF_DIR"),
                                             refuse[i].name);

    g_assert_false (binds_sidecar (sidecar, path, &error));
    g_assert_error (error, DFL_ERROR, DFL_ERROR_MISMATCH);
    g_test_message ("other-%s: %s", refuse[i].name, error->message);
    if (!strstr (error->message, refuse[i].message) || !strstr (error->message, path)
        || !strstr (error->message, sidecar))
      g_error ("message '%s' does not name the files and say '%s'", error->message,
               refuse[i].message);
    g_clear_error (&error);
  }
  q8 = converted ("q8_0");
  g_assert_false (binds (q8, &error));
  g_assert_error (error, DFL_ERROR, DFL_ERROR_MISMATCH);
  g_assert_nonnull (strstr (error->message, "has no trunk_sample"));
  g_assert_nonnull (strstr (error->message, q8));
}

/* A sidecar bound by the sample alone binds to float targets too, within
 * their rounding (the folder, its F16 and F32 conversions, and the Q8_0
 * file), and refuses the random model's F32 folder. */
static void
test_binding_sample_only (void)
{
  const char *bind[] = { "q8_0", "f16", "f32" };
  g_autofree char *sidecar = NULL, *rand_dir = NULL;
  g_autoptr (GError) error = NULL;

  if (!gguf_dir ())
    return;
  sidecar = g_strdup_printf ("%s/sample-only.dflash.safetensors", g_getenv ("DFL_GGUF_DIR"));
  assert_binds_model (sidecar, bind, G_N_ELEMENTS (bind));
  rand_dir = g_strdup_printf ("%s/other-rand", g_getenv ("DFL_GGUF_DIR"));
  g_assert_false (binds_sidecar (sidecar, rand_dir, &error));
  g_assert_error (error, DFL_ERROR, DFL_ERROR_MISMATCH);
  g_assert_nonnull (strstr (error->message, "was made for another target than"));
  g_assert_nonnull (strstr (error->message, "further than F32's rounding"));
}

/* A sidecar whose trunk_sample is not 256 values of 8 hex digits is
 * refused when opened, naming the file and the field. */
static void
test_binding_bad_sample (void)
{
  const char *names[] = { "short", "hex" };

  if (!gguf_dir ())
    return;
  for (guint i = 0; i < G_N_ELEMENTS (names); i++) {
    g_autofree char *path = g_strdup_printf ("%s/bad-sample-%s.dflash.safetensors",
                                             g_getenv ("DFL_GGUF_DIR"), names[i]);
    g_autoptr (GError) error = NULL;
    g_autoptr (DflDrafterWeights) d = dfl_drafter_weights_open (path, &error);

    g_assert_null (d);
    g_assert_error (error, DFL_ERROR, DFL_ERROR_FORMAT);
    g_assert_nonnull (strstr (error->message, path));
    g_assert_nonnull (strstr (error->message, "\"trunk_sample\" (256 or 512 values, 8 hex digits"));
  }
}

/* `values` (n, a whole number of rows of 256) quantized to `type` by our
 * quantizer, as a stored tensor of those rows (its blocks g_free()d with
 * `*blocks`). */
static DflStoredTensor
quantized_tensor (const float *values, gint64 n, DflDtype type, guint8 **blocks)
{
  DflStoredTensor t = { "model.embed_tokens.weight", type, 2, { n / 256, 256 }, n };

  t.n_bytes = (gsize) (n / (gint64) dfl_dtype_block_elems (type)) * dfl_dtype_block_bytes (type);
  *blocks = g_malloc (t.n_bytes);
  g_assert_true (dfl_quantize_row (type, values, *blocks, n));
  t.data = *blocks;
  return t;
}

/* Of every element of `t`, the largest |value − want| over its tolerance;
 * and the share of elements within it. */
static double
worst_ratio (const DflStoredTensor *t, const float *want, double *within)
{
  double worst = 0.0;
  gint64 in = 0;

  for (gint64 e = 0; e < t->n_elements; e++) {
    float have;
    double tol = dfl_trunk_value_tolerance (t, e, want[e], &have);
    double r = fabs ((double) have - want[e]) / tol;

    worst = MAX (worst, r);
    in += r <= 1.0;
  }
  *within = (double) in / (double) t->n_elements;
  return worst;
}

/* The tolerances hold for every element of the model's embedding, not only
 * the sampled ones: quantized by the gguf package (the Q8_0 and Q4_0
 * files) and by our quantizers (Q8_0, Q4_0, Q4_K, Q6_K; the K types over
 * rows of 256, which the embedding's 384 columns are not, so no file of
 * this model holds them). Another model's value falls within them by
 * chance at a rate that all 256 samples together do about never. A
 * target whose embedding is Q4_K or Q6_K binds by the sample, a random one
 * of the same shapes does not. */
static void
test_binding_tolerance (void)
{
  const DflDtype types[] = { DFL_DTYPE_Q8_0, DFL_DTYPE_Q4_0, DFL_DTYPE_Q4_K, DFL_DTYPE_Q6_K };
  const char *files[] = { "q8_0", "q4_0" };
  g_autofree char *sidecar = NULL, *rand_path = NULL;
  g_autofree float *want = NULL, *other = NULL;
  g_autoptr (GError) error = NULL;
  g_autoptr (DflTarget) ref = NULL;
  g_autoptr (DflSafetensors) rand_st = NULL;
  g_autoptr (DflDrafterWeights) d = NULL;
  const DflStoredTensor *embed;
  gint64 n;

  if (!gguf_dir ())
    return;
  ref = dfl_target_load (g_getenv ("DFL_GGUF_MODEL"), &error);
  g_assert_no_error (error);
  embed = dfl_safetensors_find (dfl_target_tensors (ref), "model.embed_tokens.weight");
  want = dfl_tensor_dup_f32 (embed);
  n = embed->n_elements;
  rand_path = g_strdup_printf ("%s/other-rand/model.safetensors", g_getenv ("DFL_GGUF_DIR"));
  rand_st = dfl_safetensors_open (rand_path, &error);
  g_assert_no_error (error);
  other = dfl_tensor_dup_f32 (dfl_safetensors_find (rand_st, "model.embed_tokens.weight"));
  sidecar = g_strdup_printf ("%s/go-q8_0.dflash.safetensors", g_getenv ("DFL_GGUF_DIR"));
  d = dfl_drafter_weights_open (sidecar, &error);
  g_assert_no_error (error);

  for (guint i = 0; i < G_N_ELEMENTS (files); i++) {
    g_autofree char *path = converted (files[i]);
    g_autoptr (DflTarget) t = dfl_target_load (path, &error);
    const DflStoredTensor *q;
    double within, worst;

    g_assert_no_error (error);
    q = dfl_safetensors_find (dfl_target_tensors (t), "model.embed_tokens.weight");
    g_assert_true (dfl_dtype_is_quantized (q->dtype));
    worst = worst_ratio (q, want, &within);
    g_test_message ("%s (the gguf package's): every error within %.2f of its tolerance", files[i],
                    worst);
    g_assert_cmpfloat (worst, <=, 1.0);
  }
  for (guint i = 0; i < G_N_ELEMENTS (types); i++) {
    g_autofree guint8 *mine = NULL, *theirs = NULL;
    DflStoredTensor q = quantized_tensor (want, n, types[i], &mine);
    DflStoredTensor r = quantized_tensor (other, n, types[i], &theirs);
    double within, chance, worst = worst_ratio (&q, want, &within);

    worst_ratio (&r, want, &chance);
    g_test_message ("%s (ours): every error within %.2f of its tolerance; another model's value "
                    "within it at a rate of %.3f, all %d samples at 10^%.0f", dfl_dtype_name (types[i]),
                    worst, chance, DFL_TRUNK_SAMPLE, DFL_TRUNK_SAMPLE * log10 (chance));
    g_assert_cmpfloat (worst, <=, 1.0);
    g_assert_cmpfloat (within, ==, 1.0);
    g_assert_cmpfloat (chance, <, 0.5);
    if (types[i] == DFL_DTYPE_Q4_K || types[i] == DFL_DTYPE_Q6_K) {
      /* a trunk of these blocks, bound through the sample: the positions
       * are the elements' order, whatever the rows */
      for (int which = 0; which < 2; which++) {
        g_autoptr (DflSafetensors) view = dfl_safetensors_new_view ("k-quant.gguf", NULL, NULL);
        gboolean ok;

        g_assert_true (dfl_safetensors_view_add (view, "model.embed_tokens.weight",
                                                 which ? &r : &q, &error));
        ok = dfl_drafter_weights_check_target (d, view, TRUE, 8, 384, 8192, &error);
        if (which == 0) {
          g_assert_no_error (error);
          g_assert_true (ok);
        } else {
          g_assert_false (ok);
          g_assert_error (error, DFL_ERROR, DFL_ERROR_MISMATCH);
          g_assert_nonnull (strstr (error->message, dfl_dtype_name (types[i])));
          g_assert_nonnull (strstr (error->message, "k-quant.gguf"));
          g_clear_error (&error);
        }
      }
    }
  }
}

/* One block of `g`'s drafter anchored after `n` rows of `taps` (the
 * target's taps of a prompt) by bound weights `w`: the block's rows and
 * logits over the whole head, back on the host, and its drafts. */
static float *
draft_block (DflDrafterWeights *w, const DflDrafterGeometry *g, const float *taps, int n,
             guint32 anchor, guint32 *chosen)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (DflDraftCtx) ctx = dfl_draft_ctx_new (w, &error);
  DflDevice *dev = dfl_drafter_weights_device (w);
  int rows = g->block - 1;
  gsize bytes;
  gpointer mem;
  DflTensor out;
  float *host;

  g_assert_no_error (error);
  bytes = dfl_draft_ctx_block_bytes (ctx, g->vocab);
  g_assert_true (dfl_draft_ctx_queue_host (ctx, 0, taps, n, &error));
  g_assert_no_error (error);
  if (!dev) {
    host = g_malloc (bytes);
    out = dfl_tensor_2d (NULL, host, 0, DFL_DTYPE_F32, rows, g->hidden + g->vocab);
    g_assert_true (dfl_draft_ctx_draft (ctx, n, anchor, g->vocab, &out, chosen, NULL, &error));
    g_assert_no_error (error);
    return host;
  }
  mem = dfl_device_alloc (dev, bytes, &error);
  g_assert_no_error (error);
  out = dfl_tensor_2d (dev, mem, 0, DFL_DTYPE_F32, rows, g->hidden + g->vocab);
  g_assert_true (dfl_draft_ctx_draft (ctx, n, anchor, g->vocab, &out, chosen, NULL, &error));
  g_assert_no_error (error);
  host = download_f32 (dev, mem, 0, rows, g->hidden + g->vocab);
  dfl_device_free (dev, mem);
  return host;
}

/* A drafter on a GPU (each this build opens here) bound to a quantized
 * target's trunk: its embedding and head go up dequantized to F32, so a
 * block over them is, bit for bit, the block over the F32 folder of the
 * values the gguf package dequantizes (go-TYPE-deq) on the same device, and
 * within the parity tests' 1e-3 of the CPU drafter's over that folder,
 * with the same drafts. */
static void
check_drafter_gpu_quantized (const char *type, DflDtype dtype)
{
  const DflBackendId gpus[] = { DFL_BACKEND_CUDA, DFL_BACKEND_VULKAN };
  const int prompt[] = { 17, 300, 4011, 29, 811, 5, 92, 2048, 61, 7, 1500, 33 };
  const int n = G_N_ELEMENTS (prompt);
  g_autofree char *sidecar = NULL;
  g_autoptr (GError) error = NULL;
  g_autoptr (DflTarget) tq = NULL, td = NULL;
  g_autoptr (DflDrafterWeights) d = NULL, on_cpu = NULL;
  g_autoptr (DflTargetSeq) seq = NULL;
  g_autofree float *taps = NULL, *want = NULL;
  const DflDrafterGeometry *g;
  DflDraftTrunk quantized, dequantized;
  DflForwardOut fo;
  guint32 want_drafts[64];
  gboolean ran = FALSE;

  if (!gguf_dir ())
    return;
  load_quantized_pair (type, &tq, &td);
  sidecar = g_strdup_printf ("%s/go-%s.dflash.safetensors", g_getenv ("DFL_GGUF_DIR"), type);
  d = dfl_drafter_weights_open (sidecar, &error);
  g_assert_no_error (error);
  g = dfl_drafter_weights_geometry (d);
  g_assert_cmpint (g->block - 1, <=, (int) G_N_ELEMENTS (want_drafts));
  g_assert_true (dfl_draft_trunk_of_target (&quantized, tq, &error)
                 && dfl_draft_trunk_of_target (&dequantized, td, &error));
  g_assert_no_error (error);
  g_assert_cmpint (quantized.embed.dtype, ==, dtype);
  g_assert_cmpint (dequantized.embed.dtype, ==, DFL_DTYPE_F32);

  /* the quantized target's taps of the prompt: the context of every block */
  taps = g_new (float, (gsize) n * dfl_drafter_geometry_tap_width (g));
  fo = (DflForwardOut) { .tap_layers = g->taps, .n_tap_layers = g->n_taps, .taps = taps,
                         .logits_from = n };
  seq = dfl_target_seq_new (tq);
  g_assert_true (dfl_target_forward (tq, seq, prompt, n, &fo, &error));
  g_assert_no_error (error);
  on_cpu = dfl_drafter_weights_bind (d, NULL, &dequantized, DFL_DTYPE_F32, &error);
  g_assert_no_error (error);
  want = draft_block (on_cpu, g, taps, n, prompt[n - 1], want_drafts);

  for (guint i = 0; i < G_N_ELEMENTS (gpus); i++) {
    g_autoptr (DflDevice) dev = dfl_device_open (gpus[i], 0, NULL);
    g_autoptr (DflDrafterWeights) bq = NULL, bd = NULL;
    g_autofree float *got = NULL, *same = NULL;
    guint32 drafts[64], same_drafts[64];
    gsize values = (gsize) (g->block - 1) * (g->hidden + g->vocab);
    double scale = 0.0, diff = 0.0;

    if (!dev)
      continue;
    ran = TRUE;
    bq = dfl_drafter_weights_bind (d, dev, &quantized, DFL_DTYPE_F32, &error);
    g_assert_no_error (error);
    bd = dfl_drafter_weights_bind (d, dev, &dequantized, DFL_DTYPE_F32, &error);
    g_assert_no_error (error);
    got = draft_block (bq, g, taps, n, prompt[n - 1], drafts);
    same = draft_block (bd, g, taps, n, prompt[n - 1], same_drafts);
    g_assert_cmpmem (got, values * sizeof (float), same, values * sizeof (float));
    g_assert_cmpmem (drafts, (g->block - 1) * sizeof (guint32), same_drafts,
                     (g->block - 1) * sizeof (guint32));
    for (gsize v = 0; v < values; v++) {
      scale = MAX (scale, fabs (want[v]));
      diff = MAX (diff, fabs ((double) got[v] - want[v]));
    }
    g_test_message ("%s on %s: the block over the dequantized trunk within %.2e of the CPU's "
                    "over the F32 folder's", type, dfl_device_describe (dev), diff / scale);
    g_assert_cmpfloat (diff / scale, <=, 1e-3);
    g_assert_cmpmem (drafts, (g->block - 1) * sizeof (guint32), want_drafts,
                     (g->block - 1) * sizeof (guint32));
  }
  if (!ran)
    g_test_skip ("no GPU device");
}

static void
test_drafter_gpu_q8_0 (void)
{
  check_drafter_gpu_quantized ("q8_0", DFL_DTYPE_Q8_0);
}

static void
test_drafter_gpu_q4_0 (void)
{
  check_drafter_gpu_quantized ("q4_0", DFL_DTYPE_Q4_0);
}

/* Matrices of every block type put on each device this build opens here
 * (the CPU's too): dequantized to F32 the values dfl_dequantize_row reads
 * (bitwise gguf's: tests/kernels/test-quant.c), narrowed to BF16 and F16
 * by round to nearest even, or copied as stored; over more rows than one
 * conversion takes at once, at an offset. Rows that are not whole blocks
 * are refused, naming the matrix. */
static void
test_upload_blocks (void)
{
  const DflBackendId backends[] = { DFL_BACKEND_CPU, DFL_BACKEND_CUDA, DFL_BACKEND_VULKAN };
  const DflDtype types[] = { DFL_DTYPE_Q8_0, DFL_DTYPE_Q4_0, DFL_DTYPE_Q4_K, DFL_DTYPE_Q6_K };
  const DflDtype as[] = { DFL_DTYPE_F32, DFL_DTYPE_BF16, DFL_DTYPE_F16 };
  const gint64 rows = 2100, cols = 512;
  const gsize at = 256, n = (gsize) rows * cols;
  g_autoptr (GRand) rng = g_rand_new_with_seed (19);
  g_autofree float *x = g_new (float, n), *y = g_new (float, n);

  for (gsize i = 0; i < n; i++)
    x[i] = (float) g_rand_double_range (rng, -1.0, 1.0) * (float) (1 + i / cols % 7);
  for (guint b = 0; b < G_N_ELEMENTS (backends); b++) {
    g_autoptr (GError) error = NULL;
    g_autoptr (DflDevice) dev = dfl_device_open (backends[b], backends[b] == DFL_BACKEND_CPU
                                                 ? -1 : 0, NULL);

    if (!dev)
      continue;
    for (guint t = 0; t < G_N_ELEMENTS (types); t++) {
      DflDtype type = types[t];
      gsize rb = dfl_dtype_row_bytes (type, cols);
      g_autofree guint8 *blocks = g_malloc (rb * rows), *back = g_malloc (rb * rows);
      gpointer mem = dfl_device_alloc (dev, at + n * sizeof (float), &error);

      g_assert_no_error (error);
      /* the CPU multiplies the blocks; the GPUs get F32 */
      g_assert_cmpint (dfl_matrix_device_type (dev, type), ==,
                       backends[b] == DFL_BACKEND_CPU ? type : DFL_DTYPE_F32);
      for (gint64 r = 0; r < rows; r++) {
        g_assert_true (dfl_quantize_row (type, x + r * cols, blocks + r * rb, cols));
        g_assert_true (dfl_dequantize_row (type, blocks + r * rb, y + r * cols, cols));
      }
      for (guint k = 0; k < G_N_ELEMENTS (as); k++) {
        gsize size = dfl_dtype_size (as[k]);
        g_autofree guint8 *got = g_malloc (n * size), *want = g_malloc (n * size);

        for (gsize i = 0; i < n; i++) {
          guint16 h = as[k] == DFL_DTYPE_BF16 ? dfl_f32_to_bf16 (y[i]) : dfl_f32_to_f16 (y[i]);
          memcpy (want + i * size, as[k] == DFL_DTYPE_F32 ? (const void *) &y[i]
                                                          : (const void *) &h, size);
        }
        g_assert_true (dfl_matrix_upload (dev, mem, at, type, blocks, rows, cols, as[k],
                                          "the test's matrix", &error));
        g_assert_no_error (error);
        g_assert_true (dfl_device_download (dev, mem, at, got, n * size, &error));
        g_assert_no_error (error);
        if (memcmp (got, want, n * size) != 0)
          g_error ("%s as %s on %s: not the dequantized values", dfl_dtype_name (type),
                   dfl_dtype_name (as[k]), dfl_device_describe (dev));
      }
      g_assert_true (dfl_matrix_upload (dev, mem, at, type, blocks, rows, cols, type,
                                        "the test's matrix", &error));
      g_assert_true (dfl_device_download (dev, mem, at, back, rb * rows, &error));
      g_assert_no_error (error);
      g_assert_cmpmem (back, rb * rows, blocks, rb * rows);
      /* a row of 100 is not whole blocks of any of them */
      g_assert_false (dfl_matrix_upload (dev, mem, at, type, blocks, 4, 100, DFL_DTYPE_F32,
                                         "the test's matrix", &error));
      g_assert_error (error, DFL_ERROR, DFL_ERROR_INVALID);
      g_assert_nonnull (strstr (error->message, "the test's matrix: a row of 100"));
      g_clear_error (&error);
      dfl_device_free (dev, mem);
    }
    g_test_message ("Q8_0, Q4_0, Q4_K and Q6_K onto %s", dfl_device_describe (dev));
  }
}

/* A one-layer qwen3 file of hidden 64: its matrices of GGUF type
 * `matrix_type` (0 F32, 8 Q8_0), `arch` its architecture, `skip_key` a
 * sizes key left out, `extra` a tensor beyond a Qwen3 checkpoint's (NULL:
 * none). */
static char *
qwen3_file (const char *arch, guint32 matrix_type, const char *skip_key, const char *extra)
{
  const int hidden = 64, ffn = 64, heads = 2, head_dim = 32, vocab = 32;
  const char *norms[] = { "attn_norm", "ffn_norm", "attn_q_norm", "attn_k_norm" };
  const char *mats[] = { "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up",
    "ffn_down" };
  const struct { const char *key; guint32 v; } sizes[] = {
    { "qwen3.block_count", 1 }, { "qwen3.embedding_length", hidden },
    { "qwen3.feed_forward_length", ffn }, { "qwen3.attention.head_count", heads },
    { "qwen3.attention.head_count_kv", heads }, { "qwen3.context_length", 128 },
    { "qwen3.attention.key_length", head_dim },
  };
  /* a row of 64: 256 bytes in F32, two 34-byte blocks in Q8_0 */
  guint64 row_bytes = matrix_type == 8 ? 68 : 256, offset = 0, ne[2];
  Builder w = { g_byte_array_new () };
  int n_tensors = 2 + G_N_ELEMENTS (norms) + G_N_ELEMENTS (mats) + (extra != NULL);
  int n_kv = 2 + G_N_ELEMENTS (sizes) - (skip_key != NULL);
  char *path;

  header (&w, 3, n_tensors, n_kv);
  kv_str (&w, "general.architecture", arch);
  for (guint i = 0; i < G_N_ELEMENTS (sizes); i++)
    if (!skip_key || strcmp (skip_key, sizes[i].key) != 0)
      kv_u32 (&w, sizes[i].key, sizes[i].v);
  kv_f32 (&w, "qwen3.attention.layer_norm_rms_epsilon", 1e-6f);
  ne[0] = hidden; ne[1] = vocab;
  tensor_info (&w, "token_embd.weight", 2, ne, 0, offset);
  offset += (guint64) hidden * vocab * 4;
  tensor_info (&w, "output_norm.weight", 1, ne, 0, offset);
  offset += (guint64) hidden * 4;
  for (guint i = 0; i < G_N_ELEMENTS (norms); i++) {
    g_autofree char *name = g_strdup_printf ("blk.0.%s.weight", norms[i]);

    ne[0] = i >= 2 ? head_dim : hidden;
    tensor_info (&w, name, 1, ne, 0, offset);
    offset += ne[0] * 4;
  }
  for (guint i = 0; i < G_N_ELEMENTS (mats); i++) {
    g_autofree char *name = g_strdup_printf ("blk.0.%s.weight", mats[i]);

    /* every matrix here is 64 × 64 */
    ne[0] = 64; ne[1] = 64;
    tensor_info (&w, name, 2, ne, matrix_type, offset);
    offset += 64 * row_bytes;
    offset += (32 - offset % 32) % 32;
  }
  if (extra) {
    ne[0] = hidden;
    tensor_info (&w, extra, 1, ne, 0, offset);
    offset += hidden * 4;
  }
  pad_zeros (&w, 32);
  g_byte_array_set_size (w.b, w.b->len + offset);
  memset (w.b->data + w.b->len - offset, 0, offset);
  path = write_file (&w, "qwen3.gguf");
  g_byte_array_unref (w.b);
  return path;
}

/* A qwen3 file whose matrices are Q8_0: loaded where the CPU multiplies
 * Q8_0, else refused naming the first such tensor and the type. */
static void
test_quantized (void)
{
  g_autofree char *path = qwen3_file ("qwen3", 8, NULL, NULL);
  g_autoptr (GError) error = NULL;
  g_autoptr (DflDevice) cpu = dfl_device_open (DFL_BACKEND_CPU, 0, &error);
  g_autoptr (DflTarget) t = NULL;

  g_assert_no_error (error);
  t = dfl_target_load (path, &error);
  if (dfl_device_supports (cpu, DFL_OP_MATMUL, DFL_DTYPE_Q8_0)) {
    /* the CPU multiplies Q8_0: the file loads */
    g_assert_no_error (error);
    g_assert_nonnull (t);
  } else {
    g_assert_null (t);
    if (error)
      g_test_message ("%s", error->message);
    g_assert_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED);
    g_assert_nonnull (strstr (error->message, "tensor 'model.layers.0.self_attn.q_proj.weight' "
                                              "is Q8_0, a type the CPU back end does not multiply"));
  }
  remove_file (path);
}

/* The same file in F32 loads and runs; each fault of the metadata or the
 * tensor names is refused with its message. */
static void
test_qwen3_file (void)
{
  const struct {
    const char *arch, *skip_key, *extra;
    int code;
    const char *message;
  } cases[] = {
    { "qwen3", NULL, NULL, -1, NULL },
    { "llama", NULL, NULL, DFL_ERROR_UNSUPPORTED,
      "general.architecture is 'llama'; gst-dflash runs qwen3" },
    { "qwen3", "qwen3.block_count", NULL, DFL_ERROR_FORMAT, "no metadata 'qwen3.block_count'" },
    { "qwen3", NULL, "blk.0.attn_q.bias", DFL_ERROR_UNSUPPORTED,
      "tensor 'blk.0.attn_q.bias' is not one of a Qwen3 checkpoint's" },
    { "qwen3", NULL, "blk.1.attn_norm.weight", DFL_ERROR_FORMAT,
      "tensor 'blk.1.attn_norm.weight' is of a layer past qwen3.block_count (1)" },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++) {
    g_autofree char *path = qwen3_file (cases[i].arch, 0, cases[i].skip_key, cases[i].extra);
    g_autoptr (GError) error = NULL;
    g_autoptr (DflTarget) t = dfl_target_load (path, &error);

    if (cases[i].code < 0) {
      g_autoptr (DflTargetSeq) s = NULL;
      const int ids[2] = { 1, 2 };
      int32_t next[1];
      DflForwardOut out = { .logits_from = 1, .argmax = next };

      g_assert_no_error (error);
      g_assert_cmpint (dfl_target_config (t)->vocab, ==, 32);
      g_assert_true (dfl_target_config (t)->tie_word_embeddings);
      s = dfl_target_seq_new (t);
      g_assert_true (dfl_target_forward (t, s, ids, 2, &out, &error));
      g_assert_no_error (error);
    } else {
      g_assert_null (t);
      g_assert_error (error, DFL_ERROR, cases[i].code);
      if (!strstr (error->message, cases[i].message) || !strstr (error->message, path))
        g_error ("message '%s' does not name the file and say '%s'", error->message,
                 cases[i].message);
    }
    remove_file (path);
  }
}

/* A file's tokenizer of another model or pre-tokenizer is refused. */
static void
test_tokenizer_refused (void)
{
  const struct { const char *model, *pre, *message; } cases[] = {
    { "llama", "qwen2", "tokenizer.ggml.model is 'llama'" },
    { "gpt2", "llama3", "tokenizer.ggml.pre is 'llama3'" },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++) {
    Builder w = { g_byte_array_new () };
    g_autofree char *path = NULL;
    g_autoptr (GError) error = NULL;
    g_autoptr (DflTokenizer) tok = NULL;

    header (&w, 3, 0, 2);
    kv_str (&w, "tokenizer.ggml.model", cases[i].model);
    kv_str (&w, "tokenizer.ggml.pre", cases[i].pre);
    path = write_file (&w, "tok.gguf");
    tok = dfl_tokenizer_load_gguf (path, &error);
    g_assert_null (tok);
    g_assert_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED);
    g_assert_nonnull (strstr (error->message, cases[i].message));
    g_byte_array_unref (w.b);
    remove_file (path);
  }
}

/* The CPU drafter's head on a quantized target is the target's own head,
 * with the copy laid out for the SIMD products where the target has one
 * (x86 with AVX2): a block's logits read it at the memory's rate. */
static void
test_drafter_packed_head (void)
{
  g_autofree char *path = NULL;
  g_autoptr (GError) error = NULL;
  g_autoptr (DflTarget) t = NULL;
  DflDraftTrunk trunk;
  DflTensor head;

  if (!gguf_dir ())
    return;
  path = converted ("q8_0");
  t = dfl_target_load (path, &error);
  g_assert_no_error (error);
  head = dfl_target_head_tensor (t);
  g_assert_true (dfl_draft_trunk_of_target (&trunk, t, &error));
  g_assert_cmpint (trunk.head.dtype, ==, DFL_DTYPE_Q8_0);
  g_assert_true (trunk.head.handle == head.handle);
  g_assert_true (trunk.head.packed == head.packed);
  if (dfl_kernels_cpu_has (DFL_KERNELS_AVX2))
    g_assert_nonnull (trunk.head.packed);
  else
    g_test_message ("no AVX2: the target keeps no packed copy");
}

/* A token twice in tokenizer.ggml.tokens is refused, naming it and where
 * it comes again (the check is a hash set: a vocabulary of Qwen3's 151,936
 * tokens loads in a fraction of a second). */
static void
test_tokenizer_duplicate (void)
{
  const char *tokens[] = { "a", "b", "c", "b" };
  Builder w = { g_byte_array_new () };
  g_autofree char *path = NULL;
  g_autoptr (GError) error = NULL;
  g_autoptr (DflTokenizer) tok = NULL;

  header (&w, 3, 0, 5);
  kv_str (&w, "tokenizer.ggml.model", "gpt2");
  kv_str (&w, "tokenizer.ggml.pre", "qwen2");
  put_str (&w, "tokenizer.ggml.tokens");
  put (&w, DFL_GGUF_ARRAY, 4);
  put (&w, DFL_GGUF_STRING, 4);
  put (&w, G_N_ELEMENTS (tokens), 8);
  for (guint i = 0; i < G_N_ELEMENTS (tokens); i++)
    put_str (&w, tokens[i]);
  put_str (&w, "tokenizer.ggml.token_type");
  put (&w, DFL_GGUF_ARRAY, 4);
  put (&w, DFL_GGUF_INT32, 4);
  put (&w, G_N_ELEMENTS (tokens), 8);
  for (guint i = 0; i < G_N_ELEMENTS (tokens); i++)
    put (&w, 1, 4);
  put_str (&w, "tokenizer.ggml.merges");
  put (&w, DFL_GGUF_ARRAY, 4);
  put (&w, DFL_GGUF_STRING, 4);
  put (&w, 0, 8);
  path = write_file (&w, "tok-twice.gguf");
  tok = dfl_tokenizer_load_gguf (path, &error);
  g_assert_null (tok);
  g_assert_error (error, DFL_ERROR, DFL_ERROR_FORMAT);
  g_assert_nonnull (strstr (error->message, path));
  g_assert_nonnull (strstr (error->message, "holds 'b' twice (token 3)"));
  g_byte_array_unref (w.b);
  remove_file (path);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/gguf/reader/valid", test_reader_valid);
  for (guint i = 0; i < G_N_ELEMENTS (bad_cases); i++) {
    g_autofree char *name = g_strdup_printf ("/gguf/reader/bad/%s", bad_cases[i].name);

    g_test_add_data_func (name, &bad_cases[i], test_reader_bad);
  }
  g_test_add_func ("/gguf/qwen3/quantized", test_quantized);
  g_test_add_func ("/gguf/qwen3/file-checks", test_qwen3_file);
  g_test_add_func ("/gguf/tokenizer-refused", test_tokenizer_refused);
  g_test_add_func ("/gguf/tokenizer-duplicate", test_tokenizer_duplicate);
  g_test_add_func ("/gguf/qwen3/config", test_config);
  g_test_add_func ("/gguf/qwen3/target-f32", test_target_f32);
  g_test_add_func ("/gguf/qwen3/target-bf16", test_target_bf16);
  g_test_add_func ("/gguf/qwen3/target-q8_0", test_target_q8_0);
  g_test_add_func ("/gguf/qwen3/target-q4_0", test_target_q4_0);
  g_test_add_func ("/gguf/qwen3/target-q4_k_m", test_target_q4_k_m);
  g_test_add_func ("/gguf/qwen3/cuda-upload", test_cuda_upload);
  g_test_add_func ("/gguf/qwen3/gpu-q8_0", test_gpu_target_q8_0);
  g_test_add_func ("/gguf/qwen3/gpu-q4_0", test_gpu_target_q4_0);
  g_test_add_func ("/gguf/tokenizer", test_tokenizer);
  g_test_add_func ("/gguf/binding/trunk-hash", test_binding);
  g_test_add_func ("/gguf/binding/signs", test_binding_signs);
  g_test_add_func ("/gguf/binding/quantized", test_binding_quantized);
  g_test_add_func ("/gguf/binding/tolerance", test_binding_tolerance);
  g_test_add_func ("/gguf/binding/sample-only", test_binding_sample_only);
  g_test_add_func ("/gguf/binding/bad-sample", test_binding_bad_sample);
  g_test_add_func ("/gguf/drafter/packed-head", test_drafter_packed_head);
  g_test_add_func ("/gguf/drafter/gpu-q8_0", test_drafter_gpu_q8_0);
  g_test_add_func ("/gguf/drafter/gpu-q4_0", test_drafter_gpu_q4_0);
  g_test_add_func ("/gguf/upload/blocks", test_upload_blocks);
  return g_test_run ();
}
