/* gst-dflash — GGUF (version 3, little-endian): zero-copy reading.
 *
 * Layout: "GGUF", version (u32), tensor count (u64), metadata count (u64);
 * the metadata (key string, type u32, value); the tensor infos (name
 * string, dims count u32, dims u64 innermost first, type u32, offset u64
 * from the data section); padding to general.alignment; the data section.
 * A string is a u64 byte length then the bytes (no NUL); an array is an
 * item type u32, a u64 count, the items.
 */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <glib/gstdio.h>

#include "dfl-error.h"

#define DFL_GGUF_MAGIC "GGUF"
#define DFL_GGUF_VERSION 3u
#define DFL_GGUF_DEFAULT_ALIGNMENT 32u
/* ggml's own limit on a tensor's dims */
#define DFL_GGUF_MAX_DIMS 4u
/* Far beyond any model (Qwen3-235B: under 20000 tensors), and bounding what
 * is allocated per entry before the entries are read. */
#define DFL_GGUF_MAX_TENSORS 1000000u
#define DFL_GGUF_MAX_VALUES 1000000u
/* The smallest a metadata entry can be (an empty key, a type, a u8) and a
 * tensor info (an empty name, no dims, a type, an offset). */
#define DFL_GGUF_MIN_VALUE_BYTES (8 + 4 + 1)
#define DFL_GGUF_MIN_TENSOR_BYTES (8 + 4 + 4 + 8)

static const char *const type_names[DFL_GGUF_N_TYPES] = {
  "UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32", "BOOL", "STRING", "ARRAY",
  "UINT64", "INT64", "FLOAT64",
};

static const guint8 type_sizes[DFL_GGUF_N_TYPES] = {
  1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8,
};

/* GGUF tensor type ids, as ggml numbers them: those we read, and names for
 * the others so a refusal can say what the file holds. */
static const struct {
  guint32 id;
  const char *name;
  int dtype;                   /* a DflDtype, or -1: not read */
} tensor_types[] = {
  { 0, "F32", DFL_DTYPE_F32 }, { 1, "F16", DFL_DTYPE_F16 }, { 2, "Q4_0", DFL_DTYPE_Q4_0 },
  { 3, "Q4_1", -1 }, { 6, "Q5_0", -1 }, { 7, "Q5_1", -1 }, { 8, "Q8_0", DFL_DTYPE_Q8_0 },
  { 9, "Q8_1", -1 }, { 10, "Q2_K", -1 }, { 11, "Q3_K", -1 }, { 12, "Q4_K", DFL_DTYPE_Q4_K },
  { 13, "Q5_K", -1 }, { 14, "Q6_K", DFL_DTYPE_Q6_K }, { 15, "Q8_K", -1 }, { 16, "IQ2_XXS", -1 },
  { 17, "IQ2_XS", -1 }, { 18, "IQ3_XXS", -1 }, { 19, "IQ1_S", -1 }, { 20, "IQ4_NL", -1 },
  { 21, "IQ3_S", -1 }, { 22, "IQ2_S", -1 }, { 23, "IQ4_XS", -1 }, { 24, "I8", DFL_DTYPE_I8 },
  { 25, "I16", -1 }, { 26, "I32", DFL_DTYPE_I32 }, { 27, "I64", DFL_DTYPE_I64 },
  { 28, "F64", -1 }, { 29, "IQ1_M", -1 }, { 30, "BF16", DFL_DTYPE_BF16 }, { 34, "TQ1_0", -1 },
  { 35, "TQ2_0", -1 }, { 39, "MXFP4", -1 },
};

#define DFL_GGUF_READ_TYPES "F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, I8, I32, I64"

typedef struct {
  DflStoredTensor t;
  guint32 type_id;
  guint64 offset;              /* from the data section */
} DflGgufTensor;

struct _DflGguf {
  char *path;
  GMappedFile *map;
  guint32 version;
  guint64 alignment;
  guint64 data_offset;
  GPtrArray *values;           /* DflGgufValue* */
  GHashTable *values_by_key;
  GPtrArray *tensors;          /* DflGgufTensor* */
  GHashTable *tensors_by_name;
  GStringChunk *strings;       /* keys, names, string values */
  GPtrArray *string_arrays;    /* the strs of string arrays (freed with the file) */
};

/* A cursor over the mapped bytes: every read is bounded by the file. */
typedef struct {
  const char *path;
  const guint8 *base;
  guint64 size, pos;
} Cursor;

static gboolean
need (Cursor *c, guint64 n, const char *what, GError **error)
{
  if (n > c->size - c->pos) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: truncated: %s at byte %" G_GUINT64_FORMAT " needs %" G_GUINT64_FORMAT
                 " bytes, the file has %" G_GUINT64_FORMAT " left", c->path, what, c->pos, n,
                 c->size - c->pos);
    return FALSE;
  }
  return TRUE;
}

static guint64
le_bytes (const guint8 *p, guint n)
{
  guint64 v = 0;

  for (guint i = 0; i < n; i++)
    v |= (guint64) p[i] << (8 * i);
  return v;
}

static gboolean
read_u32 (Cursor *c, guint32 *out, const char *what, GError **error)
{
  if (!need (c, 4, what, error))
    return FALSE;
  *out = (guint32) le_bytes (c->base + c->pos, 4);
  c->pos += 4;
  return TRUE;
}

static gboolean
read_u64 (Cursor *c, guint64 *out, const char *what, GError **error)
{
  if (!need (c, 8, what, error))
    return FALSE;
  *out = le_bytes (c->base + c->pos, 8);
  c->pos += 8;
  return TRUE;
}

/* A string, copied NUL-terminated into the chunk; `what` names it in
 * messages. */
static const char *
read_string (DflGguf *g, Cursor *c, const char *what, GError **error)
{
  guint64 len;
  const char *s, *bad = NULL;

  if (!read_u64 (c, &len, what, error))
    return NULL;
  if (len > c->size - c->pos) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: %s at byte %" G_GUINT64_FORMAT " has length %" G_GUINT64_FORMAT
                 ", past the end of the file (%" G_GUINT64_FORMAT " bytes left)",
                 c->path, what, c->pos - 8, len, c->size - c->pos);
    return NULL;
  }
  s = (const char *) c->base + c->pos;
  if (memchr (s, '\0', len) != NULL) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "%s: %s at byte %" G_GUINT64_FORMAT
                 " holds a NUL byte", c->path, what, c->pos);
    return NULL;
  }
  if (!g_utf8_validate_len (s, len, &bad)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "%s: %s at byte %" G_GUINT64_FORMAT
                 " is not valid UTF-8 (at its byte %" G_GSIZE_FORMAT ")", c->path, what, c->pos,
                 (gsize) (bad - s));
    return NULL;
  }
  c->pos += len;
  return g_string_chunk_insert_len (g->strings, s, (gssize) len);
}

const char *
dfl_gguf_type_name (DflGgufType type)
{
  return (guint) type < DFL_GGUF_N_TYPES ? type_names[type] : "invalid";
}

gsize
dfl_gguf_scalar_size (DflGgufType type)
{
  return (guint) type < DFL_GGUF_N_TYPES ? type_sizes[type] : 0;
}

gboolean
dfl_gguf_type_id_of_dtype (DflDtype dtype, guint32 *id)
{
  for (guint i = 0; i < G_N_ELEMENTS (tensor_types); i++)
    if (tensor_types[i].dtype == (int) dtype) {
      *id = tensor_types[i].id;
      return TRUE;
    }
  return FALSE;
}

static gboolean
check_type (Cursor *c, guint32 type, const char *key, const char *what, GError **error)
{
  if (type >= DFL_GGUF_N_TYPES) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: metadata '%s' has %s %u, not a GGUF value type (0 to %d)", c->path, key,
                 what, type, DFL_GGUF_N_TYPES - 1);
    return FALSE;
  }
  return TRUE;
}

/* A number of `type` at the cursor into v's i, u or f. */
static void
take_scalar (DflGgufValue *v, DflGgufType type, const guint8 *p)
{
  guint64 bits = le_bytes (p, type_sizes[type]);

  switch (type) {
    case DFL_GGUF_UINT8: case DFL_GGUF_UINT16: case DFL_GGUF_UINT32: case DFL_GGUF_UINT64:
      v->u = bits;
      v->i = bits <= G_MAXINT64 ? (gint64) bits : -1;
      break;
    case DFL_GGUF_INT8: v->i = (gint8) bits; break;
    case DFL_GGUF_INT16: v->i = (gint16) bits; break;
    case DFL_GGUF_INT32: v->i = (gint32) bits; break;
    case DFL_GGUF_INT64: v->i = (gint64) bits; break;
    case DFL_GGUF_BOOL: v->i = bits != 0; break;
    case DFL_GGUF_FLOAT32: {
      guint32 b32 = (guint32) bits;
      float f;

      memcpy (&f, &b32, 4);
      v->f = f;
      break;
    }
    case DFL_GGUF_FLOAT64:
      memcpy (&v->f, &bits, 8);
      break;
    default:
      g_assert_not_reached ();
  }
}

static gboolean
read_value (DflGguf *g, Cursor *c, DflGgufValue *v, GError **error)
{
  guint32 type;

  if (!read_u32 (c, &type, "a metadata value type", error)
      || !check_type (c, type, v->key, "value type", error))
    return FALSE;
  v->type = type;
  if (type == DFL_GGUF_STRING) {
    g_autofree char *what = g_strdup_printf ("the string of metadata '%s'", v->key);

    return (v->str = read_string (g, c, what, error)) != NULL;
  }
  if (type != DFL_GGUF_ARRAY) {
    g_autofree char *what = g_strdup_printf ("the value of metadata '%s'", v->key);

    if (!need (c, type_sizes[type], what, error))
      return FALSE;
    take_scalar (v, type, c->base + c->pos);
    if (type == DFL_GGUF_BOOL && c->base[c->pos] > 1) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "%s: metadata '%s' is a BOOL of value %u "
                   "(0 or 1 only)", c->path, v->key, c->base[c->pos]);
      return FALSE;
    }
    c->pos += type_sizes[type];
    return TRUE;
  }

  if (!read_u32 (c, &type, "an array's item type", error)
      || !check_type (c, type, v->key, "array item type", error)
      || !read_u64 (c, &v->n, "an array's length", error))
    return FALSE;
  v->item_type = type;
  if (type == DFL_GGUF_ARRAY) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                 "%s: metadata '%s' is an array of arrays, which no model file we read uses",
                 c->path, v->key);
    return FALSE;
  }
  if (type == DFL_GGUF_STRING) {
    const char **strs;

    /* each string takes at least its 8-byte length: bound the count by the
     * file before allocating for it */
    if (v->n > (c->size - c->pos) / 8) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: metadata '%s' claims %" G_GUINT64_FORMAT " strings, more than the %"
                   G_GUINT64_FORMAT " bytes left in the file can hold", c->path, v->key, v->n,
                   c->size - c->pos);
      return FALSE;
    }
    strs = g_new0 (const char *, v->n + 1);
    g_ptr_array_add (g->string_arrays, strs);
    v->strs = strs;
    for (guint64 i = 0; i < v->n; i++) {
      g_autofree char *what = g_strdup_printf ("string %" G_GUINT64_FORMAT " of metadata '%s'",
                                               i, v->key);

      if (!(strs[i] = read_string (g, c, what, error)))
        return FALSE;
    }
    return TRUE;
  }
  if (v->n > (c->size - c->pos) / type_sizes[type]) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: metadata '%s' claims %" G_GUINT64_FORMAT " items of %s, more than the %"
                 G_GUINT64_FORMAT " bytes left in the file hold", c->path, v->key, v->n,
                 type_names[type], c->size - c->pos);
    return FALSE;
  }
  if (type == DFL_GGUF_BOOL) {
    for (guint64 i = 0; i < v->n; i++)
      if (c->base[c->pos + i] > 1) {
        g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "%s: metadata '%s' item %"
                     G_GUINT64_FORMAT " is a BOOL of value %u (0 or 1 only)", c->path, v->key, i,
                     c->base[c->pos + i]);
        return FALSE;
      }
  }
  v->items = c->base + c->pos;
  c->pos += v->n * type_sizes[type];
  return TRUE;
}

static char *
format_ne (guint n_dims, const guint64 *ne)
{
  GString *s = g_string_new ("[");

  for (guint i = 0; i < n_dims; i++)
    g_string_append_printf (s, "%s%" G_GUINT64_FORMAT, i ? ", " : "", ne[i]);
  g_string_append_c (s, ']');
  return g_string_free (s, FALSE);
}

static gboolean
read_tensor_info (DflGguf *g, Cursor *c, guint index, DflGgufTensor *gt, GError **error)
{
  DflStoredTensor *t = &gt->t;
  guint64 ne[DFL_GGUF_MAX_DIMS], rows = 1, row_bytes, n_bytes, n_elements = 1, block;
  g_autofree char *what = g_strdup_printf ("the name of tensor %u", index);
  g_autofree char *dims = NULL;
  guint32 n_dims;
  int dtype = -1;
  const char *type_name = NULL;

  if (!(t->name = read_string (g, c, what, error))
      || !read_u32 (c, &n_dims, "a tensor's dims count", error))
    return FALSE;
  if (n_dims == 0 || n_dims > DFL_GGUF_MAX_DIMS) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "%s: tensor '%s' has %u dims (1 to %u)",
                 c->path, t->name, n_dims, DFL_GGUF_MAX_DIMS);
    return FALSE;
  }
  for (guint i = 0; i < n_dims; i++) {
    if (!read_u64 (c, &ne[i], "a tensor's dim", error))
      return FALSE;
  }
  dims = format_ne (n_dims, ne);
  for (guint i = 0; i < n_dims; i++) {
    if (ne[i] == 0 || !g_uint64_checked_mul (&n_elements, n_elements, ne[i])
        || n_elements > G_MAXINT64) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: tensor '%s' dims %s: %s", c->path, t->name, dims,
                   ne[i] == 0 ? "a dim of 0" : "more elements than fit in 63 bits");
      return FALSE;
    }
  }
  if (!read_u32 (c, &gt->type_id, "a tensor's type", error)
      || !read_u64 (c, &gt->offset, "a tensor's offset", error))
    return FALSE;
  for (guint i = 0; i < G_N_ELEMENTS (tensor_types); i++)
    if (tensor_types[i].id == gt->type_id) {
      dtype = tensor_types[i].dtype;
      type_name = tensor_types[i].name;
    }
  if (dtype < 0) {
    g_set_error (error, DFL_ERROR, type_name ? DFL_ERROR_UNSUPPORTED : DFL_ERROR_FORMAT,
                 "%s: tensor '%s' has %s type %u%s%s%s (read: " DFL_GGUF_READ_TYPES ")",
                 c->path, t->name, type_name ? "unsupported" : "unknown", gt->type_id,
                 type_name ? " (" : "", type_name ? type_name : "", type_name ? ")" : "");
    return FALSE;
  }
  t->dtype = dtype;
  /* a row is the innermost dim: a whole number of blocks; its bytes and the
   * tensor's are counted with overflow checks (an F32 row of 2^62 elements
   * would wrap) */
  block = dfl_dtype_block_elems (t->dtype);
  if (ne[0] % block != 0) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: tensor '%s' of type %s has rows of %" G_GUINT64_FORMAT
                 " elements, not a whole number of its %" G_GUINT64_FORMAT "-element blocks",
                 c->path, t->name, dfl_dtype_name (t->dtype), ne[0], block);
    return FALSE;
  }
  for (guint i = 1; i < n_dims; i++)
    rows *= ne[i];
  if (!g_uint64_checked_mul (&row_bytes, ne[0] / block, dfl_dtype_block_bytes (t->dtype))
      || !g_uint64_checked_mul (&n_bytes, rows, row_bytes) || n_bytes > G_MAXSIZE) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT, "%s: tensor '%s' %s %s needs more bytes "
                 "than fit in memory", c->path, t->name, dfl_dtype_name (t->dtype), dims);
    return FALSE;
  }
  if (gt->offset % g->alignment != 0) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: tensor '%s' offset %" G_GUINT64_FORMAT " is not a multiple of the "
                 "alignment %" G_GUINT64_FORMAT, c->path, t->name, gt->offset, g->alignment);
    return FALSE;
  }
  t->n_dims = n_dims;
  for (guint i = 0; i < n_dims; i++)
    t->shape[i] = (gint64) ne[n_dims - 1 - i];
  t->n_elements = (gint64) n_elements;
  t->n_bytes = (gsize) n_bytes;
  t->file = g->path;
  t->in_mapping = TRUE;
  return TRUE;
}

static int
by_offset (gconstpointer a, gconstpointer b)
{
  const DflGgufTensor *x = *(const DflGgufTensor *const *) a;
  const DflGgufTensor *y = *(const DflGgufTensor *const *) b;

  return x->offset < y->offset ? -1 : x->offset > y->offset ? 1 : 0;
}

/* Each tensor inside the data section, none over another (the padding
 * between them is free). */
static gboolean
place_tensors (DflGguf *g, guint64 file_size, GError **error)
{
  guint64 data_len = file_size - g->data_offset;
  const guint8 *data = (const guint8 *) g_mapped_file_get_contents (g->map) + g->data_offset;
  g_autoptr (GPtrArray) sorted = g_ptr_array_new ();

  for (guint i = 0; i < g->tensors->len; i++) {
    DflGgufTensor *gt = g_ptr_array_index (g->tensors, i);

    if (gt->offset > data_len || gt->t.n_bytes > data_len - gt->offset) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: tensor '%s' at offset %" G_GUINT64_FORMAT " of %" G_GSIZE_FORMAT
                   " bytes runs past the end of the data section (%" G_GUINT64_FORMAT " bytes)",
                   g->path, gt->t.name, gt->offset, gt->t.n_bytes, data_len);
      return FALSE;
    }
    gt->t.data = data + gt->offset;
    g_ptr_array_add (sorted, gt);
  }
  g_ptr_array_sort (sorted, by_offset);
  for (guint i = 1; i < sorted->len; i++) {
    const DflGgufTensor *prev = sorted->pdata[i - 1], *gt = sorted->pdata[i];

    if (gt->offset < prev->offset + prev->t.n_bytes) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: tensor '%s' [%" G_GUINT64_FORMAT ", %" G_GUINT64_FORMAT
                   ") overlaps tensor '%s' [%" G_GUINT64_FORMAT ", %" G_GUINT64_FORMAT ")",
                   g->path, gt->t.name, gt->offset, gt->offset + gt->t.n_bytes, prev->t.name,
                   prev->offset, prev->offset + prev->t.n_bytes);
      return FALSE;
    }
  }
  return TRUE;
}

static gboolean
read_alignment (DflGguf *g, GError **error)
{
  const DflGgufValue *v = g_hash_table_lookup (g->values_by_key, "general.alignment");

  g->alignment = DFL_GGUF_DEFAULT_ALIGNMENT;
  if (v == NULL)
    return TRUE;
  if (v->type != DFL_GGUF_UINT32) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: general.alignment is %s, expected UINT32", g->path,
                 dfl_gguf_type_name (v->type));
    return FALSE;
  }
  if (v->u == 0 || (v->u & (v->u - 1)) != 0) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: general.alignment is %" G_GUINT64_FORMAT ", not a power of two",
                 g->path, v->u);
    return FALSE;
  }
  g->alignment = v->u;
  return TRUE;
}

static gboolean
parse (DflGguf *g, GError **error)
{
  Cursor c = { g->path, (const guint8 *) g_mapped_file_get_contents (g->map),
    g_mapped_file_get_length (g->map), 0 };
  guint64 n_tensors, n_values;

  if (c.size < 4 || memcmp (c.base, DFL_GGUF_MAGIC, 4) != 0) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: not a GGUF file (it begins with %s, not \"GGUF\")", g->path,
                 c.size >= 4 ? "other bytes" : "fewer than 4 bytes");
    return FALSE;
  }
  c.pos = 4;
  if (!read_u32 (&c, &g->version, "the version", error))
    return FALSE;
  if (g->version != DFL_GGUF_VERSION) {
    /* a big-endian file's 3 reads as 0x03000000 */
    g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                 "%s: GGUF version %u%s; only version 3, little-endian, is read", g->path,
                 g->version, g->version == 0x03000000u ? " (a big-endian file)" : "");
    return FALSE;
  }
  if (!read_u64 (&c, &n_tensors, "the tensor count", error)
      || !read_u64 (&c, &n_values, "the metadata count", error))
    return FALSE;
  if (n_tensors > DFL_GGUF_MAX_TENSORS || n_values > DFL_GGUF_MAX_VALUES) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT,
                 "%s: %s count %" G_GUINT64_FORMAT " is above the limit of %u", g->path,
                 n_tensors > DFL_GGUF_MAX_TENSORS ? "tensor" : "metadata",
                 n_tensors > DFL_GGUF_MAX_TENSORS ? n_tensors : n_values,
                 n_tensors > DFL_GGUF_MAX_TENSORS ? DFL_GGUF_MAX_TENSORS : DFL_GGUF_MAX_VALUES);
    return FALSE;
  }
  if (n_values * DFL_GGUF_MIN_VALUE_BYTES + n_tensors * DFL_GGUF_MIN_TENSOR_BYTES
      > c.size - c.pos) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: %" G_GUINT64_FORMAT " tensors and %" G_GUINT64_FORMAT
                 " metadata entries cannot fit in the %" G_GUINT64_FORMAT " bytes after the header",
                 g->path, n_tensors, n_values, c.size - c.pos);
    return FALSE;
  }

  for (guint64 i = 0; i < n_values; i++) {
    DflGgufValue *v = g_new0 (DflGgufValue, 1);
    g_autofree char *what = g_strdup_printf ("the key of metadata entry %" G_GUINT64_FORMAT, i);

    g_ptr_array_add (g->values, v);
    if (!(v->key = read_string (g, &c, what, error)) || !read_value (g, &c, v, error))
      return FALSE;
    if (g_hash_table_contains (g->values_by_key, v->key)) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "%s: metadata key '%s' appears twice",
                   g->path, v->key);
      return FALSE;
    }
    g_hash_table_insert (g->values_by_key, (gpointer) v->key, v);
  }
  if (!read_alignment (g, error))
    return FALSE;

  for (guint64 i = 0; i < n_tensors; i++) {
    DflGgufTensor *gt = g_new0 (DflGgufTensor, 1);

    g_ptr_array_add (g->tensors, gt);
    if (!read_tensor_info (g, &c, (guint) i, gt, error))
      return FALSE;
    if (g_hash_table_contains (g->tensors_by_name, gt->t.name)) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "%s: tensor name '%s' appears twice",
                   g->path, gt->t.name);
      return FALSE;
    }
    g_hash_table_insert (g->tensors_by_name, (gpointer) gt->t.name, gt);
  }

  /* the data section begins at the next multiple of the alignment; a file
   * with no tensors may end before it */
  g->data_offset = c.pos + (g->alignment - c.pos % g->alignment) % g->alignment;
  if (g->data_offset > c.size) {
    if (n_tensors == 0) {
      g->data_offset = c.size;
      return TRUE;
    }
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: truncated: the data section would begin at byte %" G_GUINT64_FORMAT
                 ", past the end of the file (%" G_GUINT64_FORMAT " bytes)", g->path,
                 g->data_offset, c.size);
    return FALSE;
  }
  return place_tensors (g, c.size, error);
}

void
dfl_gguf_free (DflGguf *g)
{
  if (g == NULL)
    return;
  g_ptr_array_unref (g->values);
  g_hash_table_unref (g->values_by_key);
  g_ptr_array_unref (g->tensors);
  g_hash_table_unref (g->tensors_by_name);
  g_ptr_array_unref (g->string_arrays);
  g_string_chunk_free (g->strings);
  if (g->map)
    g_mapped_file_unref (g->map);
  g_free (g->path);
  g_free (g);
}

DflGguf *
dfl_gguf_open (const char *path, GError **error)
{
  g_autoptr (DflGguf) g = NULL;
  GError *map_error = NULL;
  struct stat sb;
  int fd;

  g_return_val_if_fail (path != NULL, NULL);
  fd = g_open (path, O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) {
    int errsv = errno;

    g_set_error (error, DFL_ERROR, DFL_ERROR_IO, "%s: cannot open: %s", path, g_strerror (errsv));
    return NULL;
  }
  if (fstat (fd, &sb) != 0 || !S_ISREG (sb.st_mode)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_IO, "%s: not a regular file (expected a .gguf file)",
                 path);
    close (fd);
    return NULL;
  }
  g = g_new0 (DflGguf, 1);
  g->path = g_strdup (path);
  g->values = g_ptr_array_new_with_free_func (g_free);
  g->values_by_key = g_hash_table_new (g_str_hash, g_str_equal);
  g->tensors = g_ptr_array_new_with_free_func (g_free);
  g->tensors_by_name = g_hash_table_new (g_str_hash, g_str_equal);
  g->strings = g_string_chunk_new (4096);
  g->string_arrays = g_ptr_array_new_with_free_func (g_free);
  if (sb.st_size == 0) {
    close (fd);
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: not a GGUF file (it is empty, not \"GGUF\")", path);
    return NULL;
  }
  g->map = g_mapped_file_new_from_fd (fd, FALSE, &map_error);
  close (fd);
  if (g->map == NULL) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_IO, "%s: cannot map: %s", path, map_error->message);
    g_error_free (map_error);
    return NULL;
  }
  if (g_mapped_file_get_length (g->map) != (gsize) sb.st_size) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_IO, "%s: file changed size while being opened", path);
    return NULL;
  }
  if (!parse (g, error))
    return NULL;
  return g_steal_pointer (&g);
}

gboolean
dfl_gguf_is_gguf (const char *path)
{
  char magic[4];
  FILE *f;
  gboolean yes;

  if (!g_file_test (path, G_FILE_TEST_IS_REGULAR) || !(f = g_fopen (path, "rb")))
    return FALSE;
  yes = fread (magic, 1, 4, f) == 4 && memcmp (magic, DFL_GGUF_MAGIC, 4) == 0;
  fclose (f);
  return yes;
}

const char *
dfl_gguf_path (const DflGguf *g)
{
  return g->path;
}

guint32
dfl_gguf_version (const DflGguf *g)
{
  return g->version;
}

guint64
dfl_gguf_alignment (const DflGguf *g)
{
  return g->alignment;
}

guint64
dfl_gguf_data_offset (const DflGguf *g)
{
  return g->data_offset;
}

guint
dfl_gguf_n_values (const DflGguf *g)
{
  return g->values->len;
}

const DflGgufValue *
dfl_gguf_nth_value (const DflGguf *g, guint i)
{
  g_return_val_if_fail (i < g->values->len, NULL);
  return g_ptr_array_index (g->values, i);
}

const DflGgufValue *
dfl_gguf_find_value (const DflGguf *g, const char *key)
{
  return g_hash_table_lookup (g->values_by_key, key);
}

static gboolean
is_int_type (DflGgufType t)
{
  return t <= DFL_GGUF_INT32 || t == DFL_GGUF_UINT64 || t == DFL_GGUF_INT64;
}

static const DflGgufValue *
lookup (const DflGguf *g, const char *key, gboolean optional, gboolean *found, GError **error)
{
  const DflGgufValue *v = dfl_gguf_find_value (g, key);

  *found = v != NULL;
  if (v == NULL && !optional)
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "%s: no metadata '%s'", g->path, key);
  return v;
}

gboolean
dfl_gguf_get_int (const DflGguf *g, const char *key, gboolean optional, gint64 *out,
                  GError **error)
{
  gboolean found;
  const DflGgufValue *v = lookup (g, key, optional, &found, error);

  if (!found)
    return optional;
  if (!is_int_type (v->type) || (v->type == DFL_GGUF_UINT64 && v->u > G_MAXINT64)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "%s: metadata '%s' is %s%s, expected an "
                 "integer", g->path, key, dfl_gguf_type_name (v->type),
                 is_int_type (v->type) ? " above 2^63" : "");
    return FALSE;
  }
  *out = v->i;
  return TRUE;
}

gboolean
dfl_gguf_get_float (const DflGguf *g, const char *key, gboolean optional, double *out,
                    GError **error)
{
  gboolean found;
  const DflGgufValue *v = lookup (g, key, optional, &found, error);

  if (!found)
    return optional;
  if (v->type != DFL_GGUF_FLOAT32 && v->type != DFL_GGUF_FLOAT64) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "%s: metadata '%s' is %s, expected FLOAT32 "
                 "or FLOAT64", g->path, key, dfl_gguf_type_name (v->type));
    return FALSE;
  }
  *out = v->f;
  return TRUE;
}

gboolean
dfl_gguf_get_string (const DflGguf *g, const char *key, gboolean optional, const char **out,
                     GError **error)
{
  gboolean found;
  const DflGgufValue *v = lookup (g, key, optional, &found, error);

  if (!found)
    return optional;
  if (v->type != DFL_GGUF_STRING) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "%s: metadata '%s' is %s, expected STRING",
                 g->path, key, dfl_gguf_type_name (v->type));
    return FALSE;
  }
  *out = v->str;
  return TRUE;
}

const DflGgufValue *
dfl_gguf_get_array (const DflGguf *g, const char *key, DflGgufType item_type, GError **error)
{
  gboolean found;
  const DflGgufValue *v = lookup (g, key, FALSE, &found, error);

  if (!found)
    return NULL;
  if (v->type != DFL_GGUF_ARRAY
      || (v->item_type != item_type && !(is_int_type (item_type) && is_int_type (v->item_type)))) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "%s: metadata '%s' is %s%s%s, expected an "
                 "ARRAY of %s", g->path, key, dfl_gguf_type_name (v->type),
                 v->type == DFL_GGUF_ARRAY ? " of " : "",
                 v->type == DFL_GGUF_ARRAY ? dfl_gguf_type_name (v->item_type) : "",
                 is_int_type (item_type) ? "integers" : dfl_gguf_type_name (item_type));
    return NULL;
  }
  return v;
}

gint64
dfl_gguf_array_int (const DflGgufValue *v, guint64 i)
{
  DflGgufValue one = { 0 };

  g_return_val_if_fail (v->type == DFL_GGUF_ARRAY && is_int_type (v->item_type) && i < v->n, 0);
  take_scalar (&one, v->item_type, v->items + i * type_sizes[v->item_type]);
  return one.i;
}

guint
dfl_gguf_n_tensors (const DflGguf *g)
{
  return g->tensors->len;
}

const DflStoredTensor *
dfl_gguf_nth_tensor (const DflGguf *g, guint i)
{
  g_return_val_if_fail (i < g->tensors->len, NULL);
  return &((const DflGgufTensor *) g_ptr_array_index (g->tensors, i))->t;
}

const DflStoredTensor *
dfl_gguf_find_tensor (const DflGguf *g, const char *name)
{
  const DflGgufTensor *gt = g_hash_table_lookup (g->tensors_by_name, name);

  return gt ? &gt->t : NULL;
}

guint32
dfl_gguf_tensor_type_id (const DflGguf *g, guint i)
{
  g_return_val_if_fail (i < g->tensors->len, 0);
  return ((const DflGgufTensor *) g_ptr_array_index (g->tensors, i))->type_id;
}
