/* gst-dflash — safetensors: zero-copy reading (one file or an indexed set of
 * shards), validation of everything a header claims, and writing.
 *
 * Layout of a file: an 8-byte little-endian header length N, N bytes of JSON
 * (an object: tensor name → {dtype, shape, data_offsets}, plus an optional
 * "__metadata__" object of strings), then the data area. data_offsets are
 * relative to the start of the data area.
 */
#include "dfl-json.h"
#include "safetensors.h"
#include "dfl-error.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <glib/gstdio.h>

/* The reference implementation refuses headers above 100 MB; so do we, before
 * allocating anything for them. */
#define DFL_ST_MAX_HEADER 100000000u
#define DFL_ST_MAX_TENSORS 1000000u
/* Index files are small JSON; refuse absurd ones before reading them. */
#define DFL_ST_MAX_INDEX DFL_ST_MAX_HEADER
/* Integers in a header travel as JSON numbers, which cJSON holds as doubles:
 * past 2^53 they are no longer exact, so we refuse them. */
#define DFL_ST_MAX_JSON_INT 9007199254740992.0

#define DFL_ST_INDEX_NAME "model.safetensors.index.json"
#define DFL_ST_FILE_NAME "model.safetensors"

/* ---- dtypes ------------------------------------------------------------ */

#define DFL_ACCEPTED_DTYPES "F32, F16, BF16, I32, I64, I8, U8"

/* dtypes the safetensors format defines that we do not load: named apart so
 * the message can say "not supported" rather than "unknown". */
static const char *const dfl_other_dtypes[] = {
  "BOOL", "F64", "I16", "U16", "U32", "U64", "F8_E4M3", "F8_E5M2",
  "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4", "C64", NULL
};

/* ---- byte order ---------------------------------------------------------- */

static guint32
dfl_f32_bits (float v)
{
  guint32 u;

  memcpy (&u, &v, sizeof u);
  return u;
}

#if G_BYTE_ORDER == G_BIG_ENDIAN
static float
dfl_bits_f32 (guint32 u)
{
  float v;

  memcpy (&v, &u, sizeof v);
  return v;
}
#endif

/* ---- tensor access ----------------------------------------------------- */

void
dfl_tensor_release_pages (const DflStoredTensor *t)
{
  guintptr page = (guintptr) sysconf (_SC_PAGESIZE);
  guintptr begin = ((guintptr) t->data + page - 1) & ~(page - 1);
  guintptr end = ((guintptr) t->data + t->n_bytes) & ~(page - 1);

  /* a read-only file mapping: dropped pages are read again from the file,
   * never zeroed (as anonymous memory would be) */
  if (t->in_mapping && end > begin)
    madvise ((void *) begin, end - begin, MADV_DONTNEED);
}

void
dfl_tensor_read_f32 (const DflStoredTensor *t, gint64 offset, gint64 n, float *dst)
{
  const guint8 *src;
  gint64 i;

  g_return_if_fail (t != NULL);
  g_return_if_fail (dfl_dtype_is_float (t->dtype));
  g_return_if_fail (offset >= 0 && n >= 0);
  g_return_if_fail (offset <= t->n_elements && n <= t->n_elements - offset);
  g_return_if_fail (dst != NULL || n == 0);

  if (n == 0)
    return;
  src = t->data + (gsize) offset * dfl_dtype_size (t->dtype);
  switch (t->dtype) {
    case DFL_DTYPE_F32:
      /* the mapping need not be 4-byte aligned, so copy bytes */
      memcpy (dst, src, (gsize) n * 4);
#if G_BYTE_ORDER == G_BIG_ENDIAN
      for (i = 0; i < n; i++)
        dst[i] = dfl_bits_f32 (GUINT32_FROM_LE (dfl_f32_bits (dst[i])));
#endif
      break;
    case DFL_DTYPE_F16:
      for (i = 0; i < n; i++)
        dst[i] = dfl_f16_to_f32 ((guint16) (src[2 * i] | (src[2 * i + 1] << 8)));
      break;
    case DFL_DTYPE_BF16:
      for (i = 0; i < n; i++)
        dst[i] = dfl_bf16_to_f32 ((guint16) (src[2 * i] | (src[2 * i + 1] << 8)));
      break;
    default:
      g_assert_not_reached ();
  }
}

float *
dfl_tensor_dup_f32 (const DflStoredTensor *t)
{
  float *out;

  g_return_val_if_fail (t != NULL, NULL);
  g_return_val_if_fail (dfl_dtype_is_float (t->dtype), NULL);

  /* at least one float, so an empty tensor still gives a non-NULL block */
  out = g_new0 (float, MAX (t->n_elements, 1));
  dfl_tensor_read_f32 (t, 0, t->n_elements, out);
  return out;
}

/* ---- helpers for messages ---------------------------------------------- */

static char *
dfl_format_dims (guint n_dims, const gint64 *shape)
{
  GString *s = g_string_new ("[");
  guint i;

  for (i = 0; i < n_dims; i++)
    g_string_append_printf (s, "%s%" G_GINT64_FORMAT, i ? ", " : "", shape[i]);
  g_string_append_c (s, ']');
  return g_string_free (s, FALSE);
}

typedef enum {
  DFL_UINT_OK,
  DFL_UINT_NOT_NUMBER,
  DFL_UINT_NEGATIVE,
  DFL_UINT_FRACTION,
  DFL_UINT_TOO_BIG,
} DflUintCheck;

static DflUintCheck
dfl_json_uint (const cJSON *item, guint64 *out)
{
  double d;

  if (!cJSON_IsNumber (item))
    return DFL_UINT_NOT_NUMBER;
  d = item->valuedouble;
  if (isnan (d) || d != floor (d))
    return DFL_UINT_FRACTION;
  if (d < 0)
    return DFL_UINT_NEGATIVE;
  if (d > DFL_ST_MAX_JSON_INT)
    return DFL_UINT_TOO_BIG;
  *out = (guint64) d;
  return DFL_UINT_OK;
}

/* A message fragment for a JSON value that is not a non-negative integer. */
static char *
dfl_describe_bad_uint (const cJSON *item, DflUintCheck why)
{
  switch (why) {
    case DFL_UINT_NOT_NUMBER:
      return g_strdup_printf ("%s, expected a non-negative integer", dfl_json_kind (item));
    case DFL_UINT_NEGATIVE:
      return g_strdup_printf ("%.17g, which is negative", item->valuedouble);
    case DFL_UINT_FRACTION:
      return g_strdup_printf ("%.17g, which is not an integer", item->valuedouble);
    case DFL_UINT_TOO_BIG:
      return g_strdup_printf ("%.17g, above 2^53, the largest integer a header can hold exactly",
                              item->valuedouble);
    case DFL_UINT_OK:
    default:
      return g_strdup ("fine");
  }
}

/* ---- reading ----------------------------------------------------------- */

typedef struct {
  char *path;
  GMappedFile *map;
  GHashTable *metadata;        /* char* → char*; NULL where the file has none */
} DflStFile;

struct _DflSafetensors {
  char *path;                  /* the file or index opened */
  GPtrArray *files;            /* DflStFile*, in the order they were opened */
  GPtrArray *tensors;          /* DflStoredTensor*, in file then header order */
  GHashTable *by_name;         /* name → DflStoredTensor* */
  GStringChunk *names;
  /* a view's: what holds the memory its tensors point into */
  gpointer owner;
  GDestroyNotify owner_free;
};

static void
dfl_st_file_free (DflStFile *f)
{
  if (f == NULL)
    return;
  g_free (f->path);
  if (f->map)
    g_mapped_file_unref (f->map);
  if (f->metadata)
    g_hash_table_unref (f->metadata);
  g_free (f);
}

void
dfl_safetensors_free (DflSafetensors *st)
{
  if (st == NULL)
    return;
  g_hash_table_unref (st->by_name);
  g_ptr_array_unref (st->tensors);
  g_ptr_array_unref (st->files);
  g_string_chunk_free (st->names);
  if (st->owner_free)
    st->owner_free (st->owner);
  g_free (st->path);
  g_free (st);
}

static DflSafetensors *
dfl_safetensors_new (const char *path)
{
  DflSafetensors *st = g_new0 (DflSafetensors, 1);

  st->path = g_strdup (path);
  st->files = g_ptr_array_new_with_free_func ((GDestroyNotify) dfl_st_file_free);
  st->tensors = g_ptr_array_new_with_free_func (g_free);
  st->by_name = g_hash_table_new (g_str_hash, g_str_equal);
  st->names = g_string_chunk_new (4096);
  return st;
}

/* One header entry, checked, before it becomes a DflStoredTensor. */
typedef struct {
  const char *name;            /* inside the cJSON tree */
  DflDtype dtype;
  guint n_dims;
  gint64 shape[DFL_TENSOR_MAX_DIMS];
  gint64 n_elements;
  guint64 begin, end;
} DflStEntry;

static int
dfl_st_entry_cmp (gconstpointer a, gconstpointer b)
{
  const DflStEntry *x = *(const DflStEntry *const *) a;
  const DflStEntry *y = *(const DflStEntry *const *) b;

  if (x->begin != y->begin)
    return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end)
    return x->end < y->end ? -1 : 1;
  return 0;
}

static gboolean
dfl_st_parse_metadata (DflStFile *f, const cJSON *meta, GError **error)
{
  const cJSON *kv;

  if (!cJSON_IsObject (meta)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: __metadata__ is %s, expected an object of strings",
                 f->path, dfl_json_kind (meta));
    return FALSE;
  }
  f->metadata = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  cJSON_ArrayForEach (kv, meta) {
    if (!cJSON_IsString (kv)) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: __metadata__ value of '%s' is %s, expected a string",
                   f->path, kv->string, dfl_json_kind (kv));
      return FALSE;
    }
    if (g_hash_table_contains (f->metadata, kv->string)) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: __metadata__ key '%s' appears twice", f->path, kv->string);
      return FALSE;
    }
    g_hash_table_insert (f->metadata, g_strdup (kv->string), g_strdup (kv->valuestring));
  }
  return TRUE;
}

static gboolean
dfl_st_parse_entry (const char *path, const cJSON *item, guint64 data_len,
                    DflStEntry *e, GError **error)
{
  const char *name = item->string;
  const cJSON *dtype, *shape, *offsets, *dim;
  guint64 n_elements = 1, n_bytes, v;
  DflUintCheck why;
  guint i;

  e->name = name;
  if (!cJSON_IsObject (item)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: tensor '%s' is %s, expected an object with dtype, shape and data_offsets",
                 path, name, dfl_json_kind (item));
    return FALSE;
  }

  dtype = cJSON_GetObjectItemCaseSensitive (item, "dtype");
  shape = cJSON_GetObjectItemCaseSensitive (item, "shape");
  offsets = cJSON_GetObjectItemCaseSensitive (item, "data_offsets");
  if (dtype == NULL || shape == NULL || offsets == NULL) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "%s: tensor '%s' has no '%s'",
                 path, name, dtype == NULL ? "dtype" : shape == NULL ? "shape" : "data_offsets");
    return FALSE;
  }

  if (!cJSON_IsString (dtype)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: tensor '%s' dtype is %s, expected a string such as \"F32\"",
                 path, name, dfl_json_kind (dtype));
    return FALSE;
  }
  if (!dfl_dtype_from_name (dtype->valuestring, &e->dtype)) {
    gboolean known = FALSE;

    for (i = 0; dfl_other_dtypes[i]; i++)
      known |= strcmp (dtype->valuestring, dfl_other_dtypes[i]) == 0;
    g_set_error (error, DFL_ERROR, known ? DFL_ERROR_UNSUPPORTED : DFL_ERROR_FORMAT,
                 "%s: tensor '%s' has %s dtype '%s' (accepted: " DFL_ACCEPTED_DTYPES ")",
                 path, name, known ? "unsupported" : "unknown", dtype->valuestring);
    return FALSE;
  }

  if (!cJSON_IsArray (shape)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: tensor '%s' shape is %s, expected an array of integers",
                 path, name, dfl_json_kind (shape));
    return FALSE;
  }
  e->n_dims = 0;
  cJSON_ArrayForEach (dim, shape) {
    if (e->n_dims == DFL_TENSOR_MAX_DIMS) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT,
                   "%s: tensor '%s' has %d dims, more than the %d supported",
                   path, name, cJSON_GetArraySize (shape), DFL_TENSOR_MAX_DIMS);
      return FALSE;
    }
    why = dfl_json_uint (dim, &v);
    if (why != DFL_UINT_OK) {
      g_autofree char *what = dfl_describe_bad_uint (dim, why);

      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: tensor '%s' shape[%u] is %s", path, name, e->n_dims, what);
      return FALSE;
    }
    e->shape[e->n_dims++] = (gint64) v;
    /* checked before anything is sized from it */
    if (!g_uint64_checked_mul (&n_elements, n_elements, v) || n_elements > G_MAXINT64) {
      g_autofree char *dims = NULL;
      gint64 all[DFL_TENSOR_MAX_DIMS];
      guint n = 0;
      const cJSON *d;

      cJSON_ArrayForEach (d, shape) {
        if (n < DFL_TENSOR_MAX_DIMS && dfl_json_uint (d, &v) == DFL_UINT_OK)
          all[n++] = (gint64) v;
      }
      dims = dfl_format_dims (n, all);
      g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT,
                   "%s: tensor '%s' shape %s has more elements than fit in 63 bits",
                   path, name, dims);
      return FALSE;
    }
  }
  e->n_elements = (gint64) n_elements;

  if (!cJSON_IsArray (offsets) || cJSON_GetArraySize (offsets) != 2) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: tensor '%s' data_offsets is %s%s, expected [begin, end]",
                 path, name, dfl_json_kind (offsets),
                 cJSON_IsArray (offsets) ? " of a length other than 2" : "");
    return FALSE;
  }
  for (i = 0; i < 2; i++) {
    const cJSON *o = cJSON_GetArrayItem (offsets, (int) i);

    why = dfl_json_uint (o, i == 0 ? &e->begin : &e->end);
    if (why != DFL_UINT_OK) {
      g_autofree char *what = dfl_describe_bad_uint (o, why);

      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: tensor '%s' data_offsets[%u] is %s", path, name, i, what);
      return FALSE;
    }
  }
  if (e->begin > e->end) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: tensor '%s' data_offsets [%" G_GUINT64_FORMAT ", %" G_GUINT64_FORMAT
                 "] begin after their end", path, name, e->begin, e->end);
    return FALSE;
  }
  if (e->end > data_len) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: tensor '%s' data_offsets [%" G_GUINT64_FORMAT ", %" G_GUINT64_FORMAT
                 "] run past the end of the data area (%" G_GUINT64_FORMAT " bytes)",
                 path, name, e->begin, e->end, data_len);
    return FALSE;
  }

  if (!g_uint64_checked_mul (&n_bytes, n_elements, dfl_dtype_size (e->dtype))) {
    g_autofree char *dims = dfl_format_dims (e->n_dims, e->shape);

    g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT,
                 "%s: tensor '%s' %s %s needs more bytes than fit in 64 bits",
                 path, name, dfl_dtype_name (e->dtype), dims);
    return FALSE;
  }
  if (n_bytes != e->end - e->begin) {
    g_autofree char *dims = dfl_format_dims (e->n_dims, e->shape);

    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: tensor '%s' data_offsets [%" G_GUINT64_FORMAT ", %" G_GUINT64_FORMAT
                 "] hold %" G_GUINT64_FORMAT " bytes but %s %s needs %" G_GUINT64_FORMAT,
                 path, name, e->begin, e->end, e->end - e->begin,
                 dfl_dtype_name (e->dtype), dims, n_bytes);
    return FALSE;
  }
  return TRUE;
}

/* Tensors must tile the data area exactly: sorted by offset, each begins
 * where the one before ends, and the last ends at the end of the file. The
 * official library rejects gaps and trailing bytes too; following it means a
 * file we accept is one every other reader accepts, and no unaccounted bytes
 * can hide in a checkpoint. */
static gboolean
dfl_st_check_tiling (const char *path, GPtrArray *sorted, guint64 data_len, GError **error)
{
  guint64 pos = 0;
  const DflStEntry *prev = NULL;
  guint i;

  g_ptr_array_sort (sorted, dfl_st_entry_cmp);
  for (i = 0; i < sorted->len; i++) {
    const DflStEntry *e = g_ptr_array_index (sorted, i);

    if (e->begin < pos) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: tensor '%s' data_offsets [%" G_GUINT64_FORMAT ", %" G_GUINT64_FORMAT
                   "] overlap tensor '%s' [%" G_GUINT64_FORMAT ", %" G_GUINT64_FORMAT "]",
                   path, e->name, e->begin, e->end, prev->name, prev->begin, prev->end);
      return FALSE;
    }
    if (e->begin > pos) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: data area bytes [%" G_GUINT64_FORMAT ", %" G_GUINT64_FORMAT
                   ") belong to no tensor (tensor '%s' begins at %" G_GUINT64_FORMAT
                   "; gaps are not allowed)", path, pos, e->begin, e->name, e->begin);
      return FALSE;
    }
    pos = e->end;
    prev = e;
  }
  if (pos != data_len) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: data area holds %" G_GUINT64_FORMAT " bytes but the tensors cover only %"
                 G_GUINT64_FORMAT " (%" G_GUINT64_FORMAT " trailing bytes belong to no tensor)",
                 path, data_len, pos, data_len - pos);
    return FALSE;
  }
  return TRUE;
}

/* Maps one .safetensors file, validates its header and appends its tensors
 * to `st`. On failure `st` may hold part of the file; the caller frees it. */
static gboolean
dfl_st_load_file (DflSafetensors *st, const char *path, GError **error)
{
  DflStFile *f;
  struct stat sb;
  const guint8 *base;
  const char *hdr, *end = NULL;
  guint64 file_size, header_len, data_len;
  cJSON *root;
  const cJSON *item;
  g_autoptr (GHashTable) seen = NULL;
  g_autoptr (GPtrArray) entries = NULL;
  g_autoptr (GPtrArray) sorted = NULL;
  GError *map_error = NULL;
  gboolean ok = FALSE;
  guint n_items = 0, i;
  int fd;

  fd = g_open (path, O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) {
    int errsv = errno;

    g_set_error (error, DFL_ERROR, DFL_ERROR_IO, "%s: cannot open: %s", path, g_strerror (errsv));
    return FALSE;
  }
  if (fstat (fd, &sb) != 0 || !S_ISREG (sb.st_mode)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_IO,
                 "%s: not a regular file (expected a .safetensors file)", path);
    close (fd);
    return FALSE;
  }
  file_size = (guint64) sb.st_size;
  if (file_size < 8) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: file is %" G_GUINT64_FORMAT " bytes, shorter than the 8-byte header length",
                 path, file_size);
    close (fd);
    return FALSE;
  }

  f = g_new0 (DflStFile, 1);
  f->path = g_strdup (path);
  g_ptr_array_add (st->files, f);
  f->map = g_mapped_file_new_from_fd (fd, FALSE, &map_error);
  close (fd);
  if (f->map == NULL) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_IO, "%s: cannot map: %s", path, map_error->message);
    g_error_free (map_error);
    return FALSE;
  }
  /* the file may have changed size between fstat and mmap */
  if (g_mapped_file_get_length (f->map) != file_size) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_IO, "%s: file changed size while being opened", path);
    return FALSE;
  }
  base = (const guint8 *) g_mapped_file_get_contents (f->map);

  header_len = GUINT64_FROM_LE (*(const guint64 *) (gconstpointer) base);
  if (header_len > DFL_ST_MAX_HEADER) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT,
                 "%s: header length %" G_GUINT64_FORMAT " is above the limit of %u bytes",
                 path, header_len, DFL_ST_MAX_HEADER);
    return FALSE;
  }
  if (header_len > file_size - 8) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: header length %" G_GUINT64_FORMAT " runs past the end of the file (%"
                 G_GUINT64_FORMAT " bytes, so at most %" G_GUINT64_FORMAT ")",
                 path, header_len, file_size, file_size - 8);
    return FALSE;
  }
  data_len = file_size - 8 - header_len;
  hdr = (const char *) base + 8;

  /* cJSON stops at a NUL inside a string; a name would silently shorten */
  if (memchr (hdr, '\0', header_len) != NULL) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: header holds a NUL byte at offset %" G_GSIZE_FORMAT,
                 path, (gsize) ((const char *) memchr (hdr, '\0', header_len) - hdr));
    return FALSE;
  }
  if (!g_utf8_validate_len (hdr, header_len, &end)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: header is not valid UTF-8 (at byte %" G_GSIZE_FORMAT ")",
                 path, (gsize) (end - hdr));
    return FALSE;
  }

  end = NULL;
  root = dfl_json_parse (hdr, header_len, &end, FALSE);
  if (root == NULL) {
    gsize at = end ? (gsize) (end - hdr) : 0;

    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: header is not valid JSON (error at byte %" G_GSIZE_FORMAT " of %"
                 G_GUINT64_FORMAT ")", path, at, header_len);
    return FALSE;
  }
  /* the official writer pads the JSON with spaces; anything else after it
   * is not a header we understand */
  for (; end < hdr + header_len; end++) {
    if (*end != ' ' && *end != '\t' && *end != '\n' && *end != '\r') {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: header has trailing bytes after the JSON (at byte %" G_GSIZE_FORMAT ")",
                   path, (gsize) (end - hdr));
      goto out;
    }
  }
  if (!cJSON_IsObject (root)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: header is %s, expected a JSON object", path, dfl_json_kind (root));
    goto out;
  }

  /* counted before anything is allocated per tensor */
  cJSON_ArrayForEach (item, root) {
    if (strcmp (item->string, "__metadata__") != 0 && ++n_items > DFL_ST_MAX_TENSORS) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT,
                   "%s: header lists more than %u tensors, the most accepted",
                   path, DFL_ST_MAX_TENSORS);
      goto out;
    }
  }

  seen = g_hash_table_new (g_str_hash, g_str_equal);
  entries = g_ptr_array_new_full (n_items, g_free);
  cJSON_ArrayForEach (item, root) {
    DflStEntry *e;

    if (g_hash_table_contains (seen, item->string)) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: %s '%s' appears twice in the header", path,
                   strcmp (item->string, "__metadata__") == 0 ? "key" : "tensor name",
                   item->string);
      goto out;
    }
    g_hash_table_add (seen, item->string);
    if (strcmp (item->string, "__metadata__") == 0) {
      if (!dfl_st_parse_metadata (f, item, error))
        goto out;
      continue;
    }
    e = g_new0 (DflStEntry, 1);
    g_ptr_array_add (entries, e);
    if (!dfl_st_parse_entry (path, item, data_len, e, error))
      goto out;
  }
  sorted = g_ptr_array_new_full (entries->len, NULL);
  for (i = 0; i < entries->len; i++)
    g_ptr_array_add (sorted, g_ptr_array_index (entries, i));
  if (!dfl_st_check_tiling (path, sorted, data_len, error))
    goto out;

  /* all checked: publish the tensors */
  for (i = 0; i < entries->len; i++) {
    const DflStEntry *e = g_ptr_array_index (entries, i);
    DflStoredTensor *t;
    const DflStoredTensor *other = g_hash_table_lookup (st->by_name, e->name);

    if (other != NULL) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: tensor '%s' is also in %s; a tensor must be in one shard only",
                   path, e->name, other->file);
      goto out;
    }
    t = g_new0 (DflStoredTensor, 1);
    t->name = g_string_chunk_insert (st->names, e->name);
    t->dtype = e->dtype;
    t->n_dims = e->n_dims;
    memcpy (t->shape, e->shape, sizeof t->shape);
    t->n_elements = e->n_elements;
    t->data = base + 8 + header_len + e->begin;
    t->n_bytes = (gsize) (e->end - e->begin);
    t->file = f->path;
    t->in_mapping = TRUE;
    g_ptr_array_add (st->tensors, t);
    g_hash_table_insert (st->by_name, (gpointer) t->name, t);
  }
  ok = TRUE;

out:
  cJSON_Delete (root);
  return ok;
}

/* Reads a whole small file, refusing one above `limit` before reading. */
static char *
dfl_st_read_small (const char *path, gsize limit, gsize *len, GError **error)
{
  GStatBuf sb;
  GError *read_error = NULL;
  char *text = NULL;

  if (g_stat (path, &sb) != 0) {
    int errsv = errno;

    g_set_error (error, DFL_ERROR, DFL_ERROR_IO, "%s: cannot open: %s", path, g_strerror (errsv));
    return NULL;
  }
  if ((guint64) sb.st_size > limit) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT,
                 "%s: file is %" G_GUINT64_FORMAT " bytes, above the limit of %" G_GSIZE_FORMAT,
                 path, (guint64) sb.st_size, limit);
    return NULL;
  }
  if (!g_file_get_contents (path, &text, len, &read_error)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_IO, "%s: cannot read: %s", path, read_error->message);
    g_error_free (read_error);
    return NULL;
  }
  return text;
}

/* A shard named in an index must sit next to it: no folders, no way out. */
static gboolean
dfl_st_shard_name_ok (const char *name)
{
  return name[0] != '\0' && strchr (name, '/') == NULL && strchr (name, '\\') == NULL
      && strcmp (name, ".") != 0 && strcmp (name, "..") != 0;
}

static gboolean
dfl_st_load_index (DflSafetensors *st, const char *index_path, GError **error)
{
  g_autofree char *text = NULL;
  g_autofree char *dir = NULL;
  g_autoptr (GHashTable) shards = NULL;    /* shard name → full path */
  g_autoptr (GPtrArray) order = NULL;
  const cJSON *map, *kv;
  cJSON *root = NULL;
  gboolean ok = FALSE;
  gsize len = 0;
  guint i;

  text = dfl_st_read_small (index_path, DFL_ST_MAX_INDEX, &len, error);
  if (text == NULL)
    return FALSE;
  root = dfl_json_parse (text, len, NULL, FALSE);
  if (root == NULL || !cJSON_IsObject (root)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "%s: %s", index_path,
                 root == NULL ? "not valid JSON" : "not a JSON object");
    goto out;
  }
  map = cJSON_GetObjectItemCaseSensitive (root, "weight_map");
  if (!cJSON_IsObject (map)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: 'weight_map' is %s, expected an object mapping tensor names to shard files",
                 index_path, dfl_json_kind (map));
    goto out;
  }
  if (map->child == NULL) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "%s: 'weight_map' names no tensors",
                 index_path);
    goto out;
  }

  dir = g_path_get_dirname (index_path);
  shards = g_hash_table_new_full (g_str_hash, g_str_equal, NULL, g_free);
  order = g_ptr_array_new ();
  cJSON_ArrayForEach (kv, map) {
    if (!cJSON_IsString (kv)) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: weight_map entry '%s' is %s, expected a shard file name",
                   index_path, kv->string, dfl_json_kind (kv));
      goto out;
    }
    if (!dfl_st_shard_name_ok (kv->valuestring)) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: weight_map puts '%s' in '%s'; shards must be plain file names "
                   "next to the index", index_path, kv->string, kv->valuestring);
      goto out;
    }
    if (!g_hash_table_contains (shards, kv->valuestring)) {
      g_hash_table_insert (shards, kv->valuestring,
                           g_build_filename (dir, kv->valuestring, NULL));
      g_ptr_array_add (order, kv->valuestring);
    }
  }

  /* each shard once, in the order the index first names it */
  for (i = 0; i < order->len; i++) {
    GError *shard_error = NULL;

    if (!dfl_st_load_file (st, g_hash_table_lookup (shards, order->pdata[i]), &shard_error)) {
      /* a shard that cannot be read at all: say which index wanted it */
      if (g_error_matches (shard_error, DFL_ERROR, DFL_ERROR_IO))
        g_prefix_error (&shard_error, "%s: ", index_path);
      g_propagate_error (error, shard_error);
      goto out;
    }
  }

  cJSON_ArrayForEach (kv, map) {
    const char *want = g_hash_table_lookup (shards, kv->valuestring);
    const DflStoredTensor *t = g_hash_table_lookup (st->by_name, kv->string);

    if (t == NULL) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: weight_map puts tensor '%s' in %s, which has no such tensor",
                   index_path, kv->string, want);
      goto out;
    }
    if (strcmp (t->file, want) != 0) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: weight_map puts tensor '%s' in %s, but it is in %s",
                   index_path, kv->string, want, t->file);
      goto out;
    }
  }
  /* Tensors a shard holds beyond the weight_map are kept: they are valid
   * data, and a lookup for one still names the shard it came from. */
  ok = TRUE;

out:
  cJSON_Delete (root);
  return ok;
}

DflSafetensors *
dfl_safetensors_open (const char *path, GError **error)
{
  g_autoptr (DflSafetensors) st = NULL;
  g_autofree char *resolved = NULL;
  gboolean is_index;
  gboolean ok;

  g_return_val_if_fail (path != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (g_file_test (path, G_FILE_TEST_IS_DIR)) {
    g_autofree char *single = g_build_filename (path, DFL_ST_FILE_NAME, NULL);
    g_autofree char *index = g_build_filename (path, DFL_ST_INDEX_NAME, NULL);

    /* as transformers does: one file first, then an index */
    if (g_file_test (single, G_FILE_TEST_EXISTS)) {
      resolved = g_steal_pointer (&single);
      is_index = FALSE;
    } else if (g_file_test (index, G_FILE_TEST_EXISTS)) {
      resolved = g_steal_pointer (&index);
      is_index = TRUE;
    } else {
      g_set_error (error, DFL_ERROR, DFL_ERROR_IO,
                   "%s: folder holds neither " DFL_ST_FILE_NAME " nor " DFL_ST_INDEX_NAME, path);
      return NULL;
    }
  } else {
    resolved = g_strdup (path);
    is_index = g_str_has_suffix (path, ".json");
  }

  st = dfl_safetensors_new (resolved);
  ok = is_index ? dfl_st_load_index (st, resolved, error) : dfl_st_load_file (st, resolved, error);
  if (!ok)
    return NULL;
  return g_steal_pointer (&st);
}

DflSafetensors *
dfl_safetensors_new_view (const char *path, gpointer owner, GDestroyNotify owner_free)
{
  DflSafetensors *st = dfl_safetensors_new (path);

  st->owner = owner;
  st->owner_free = owner_free;
  return st;
}

gboolean
dfl_safetensors_view_add (DflSafetensors *st, const char *name, const DflStoredTensor *t,
                          GError **error)
{
  DflStoredTensor *copy;

  g_return_val_if_fail (st != NULL && name != NULL && t != NULL, FALSE);
  if (g_hash_table_contains (st->by_name, name)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "%s: tensor '%s' (from '%s') given twice",
                 st->path, name, t->name);
    return FALSE;
  }
  copy = g_memdup2 (t, sizeof *t);
  copy->name = g_string_chunk_insert (st->names, name);
  g_ptr_array_add (st->tensors, copy);
  g_hash_table_insert (st->by_name, (gpointer) copy->name, copy);
  return TRUE;
}

const char *
dfl_safetensors_path (const DflSafetensors *st)
{
  g_return_val_if_fail (st != NULL, NULL);
  return st->path;
}

guint
dfl_safetensors_n_tensors (const DflSafetensors *st)
{
  g_return_val_if_fail (st != NULL, 0);
  return st->tensors->len;
}

const DflStoredTensor *
dfl_safetensors_nth (const DflSafetensors *st, guint i)
{
  g_return_val_if_fail (st != NULL, NULL);
  g_return_val_if_fail (i < st->tensors->len, NULL);
  return g_ptr_array_index (st->tensors, i);
}

const DflStoredTensor *
dfl_safetensors_find (const DflSafetensors *st, const char *name)
{
  g_return_val_if_fail (st != NULL, NULL);
  g_return_val_if_fail (name != NULL, NULL);
  return g_hash_table_lookup (st->by_name, name);
}

static const DflStoredTensor *
expect (const DflSafetensors *st, const char *name, guint n_dims, const gint64 *shape,
        gboolean blocks_ok, GError **error)
{
  const DflStoredTensor *t;
  gboolean same;
  guint i;

  g_return_val_if_fail (st != NULL, NULL);
  g_return_val_if_fail (name != NULL, NULL);
  g_return_val_if_fail (n_dims <= DFL_TENSOR_MAX_DIMS, NULL);
  g_return_val_if_fail (shape != NULL || n_dims == 0, NULL);

  t = g_hash_table_lookup (st->by_name, name);
  if (t == NULL) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "%s: no tensor '%s'", st->path, name);
    return NULL;
  }
  if (!dfl_dtype_is_float (t->dtype) && !(blocks_ok && dfl_dtype_is_quantized (t->dtype))) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_MISMATCH,
                 "%s: tensor '%s' has dtype %s, expected F32, F16 or BF16%s",
                 t->file, name, dfl_dtype_name (t->dtype),
                 blocks_ok ? " or a block-quantized type (Q8_0, Q4_0, Q4_K, Q6_K)" : "");
    return NULL;
  }
  if (dfl_dtype_is_quantized (t->dtype) && n_dims == 2
      && shape[1] % dfl_dtype_block_elems (t->dtype) != 0) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_MISMATCH,
                 "%s: tensor '%s' is %s, whose blocks of %d do not divide its rows of %"
                 G_GINT64_FORMAT, t->file, name, dfl_dtype_name (t->dtype),
                 (int) dfl_dtype_block_elems (t->dtype), shape[1]);
    return NULL;
  }
  same = t->n_dims == n_dims;
  for (i = 0; same && i < n_dims; i++)
    same = t->shape[i] == shape[i];
  if (!same) {
    g_autofree char *have = dfl_format_dims (t->n_dims, t->shape);
    g_autofree char *want = dfl_format_dims (n_dims, shape);

    g_set_error (error, DFL_ERROR, DFL_ERROR_MISMATCH,
                 "%s: tensor '%s' has shape %s, expected %s", t->file, name, have, want);
    return NULL;
  }
  return t;
}

const DflStoredTensor *
dfl_safetensors_expect (const DflSafetensors *st, const char *name,
                        guint n_dims, const gint64 *shape, GError **error)
{
  return expect (st, name, n_dims, shape, FALSE, error);
}

const DflStoredTensor *
dfl_safetensors_expect_matrix (const DflSafetensors *st, const char *name, gint64 rows,
                               gint64 cols, GError **error)
{
  gint64 shape[2] = { rows, cols };

  return expect (st, name, 2, shape, TRUE, error);
}

const char *
dfl_safetensors_metadata (const DflSafetensors *st, const char *key)
{
  const DflStFile *f;

  g_return_val_if_fail (st != NULL, NULL);
  g_return_val_if_fail (key != NULL, NULL);
  if (st->files->len == 0)
    return NULL;
  f = g_ptr_array_index (st->files, 0);
  return f->metadata ? g_hash_table_lookup (f->metadata, key) : NULL;
}

GStrv
dfl_safetensors_metadata_keys (const DflSafetensors *st)
{
  const DflStFile *f;
  g_autoptr (GPtrArray) keys = g_ptr_array_new_with_free_func (g_free);
  GHashTableIter it;
  gpointer key;

  g_return_val_if_fail (st != NULL, NULL);
  if (st->files->len > 0 && (f = g_ptr_array_index (st->files, 0))->metadata) {
    g_hash_table_iter_init (&it, f->metadata);
    while (g_hash_table_iter_next (&it, &key, NULL))
      g_ptr_array_add (keys, g_strdup (key));
  }
  /* sorted, so what is built from them does not depend on hashing */
  g_ptr_array_sort (keys, (GCompareFunc) g_strcmp0);
  g_ptr_array_add (keys, NULL);
  return (GStrv) g_ptr_array_free (g_steal_pointer (&keys), FALSE);
}

/* ---- writing ----------------------------------------------------------- */

typedef struct {
  char *name;
  DflDtype dtype;
  guint n_dims;
  gint64 shape[DFL_TENSOR_MAX_DIMS];
  guint8 *data;
  gsize n_bytes;
} DflStWriterEntry;

struct _DflSafetensorsWriter {
  GPtrArray *entries;          /* DflStWriterEntry*, insertion order */
  GHashTable *names;           /* the entries' names */
  GPtrArray *meta_keys;        /* insertion order of metadata keys */
  GHashTable *meta;            /* key → value */
};

static void
dfl_st_writer_entry_free (DflStWriterEntry *e)
{
  g_free (e->name);
  g_free (e->data);
  g_free (e);
}

DflSafetensorsWriter *
dfl_safetensors_writer_new (void)
{
  DflSafetensorsWriter *w = g_new0 (DflSafetensorsWriter, 1);

  w->entries = g_ptr_array_new_with_free_func ((GDestroyNotify) dfl_st_writer_entry_free);
  w->names = g_hash_table_new (g_str_hash, g_str_equal);
  w->meta_keys = g_ptr_array_new ();
  w->meta = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  return w;
}

void
dfl_safetensors_writer_free (DflSafetensorsWriter *w)
{
  if (w == NULL)
    return;
  g_hash_table_unref (w->names);
  g_ptr_array_unref (w->entries);
  g_ptr_array_unref (w->meta_keys);
  g_hash_table_unref (w->meta);
  g_free (w);
}

/* Checks a tensor to be added and returns its byte count through n_bytes. */
static gboolean
dfl_st_writer_check (DflSafetensorsWriter *w, const char *name, DflDtype dtype,
                     guint n_dims, const gint64 *shape, gsize *n_bytes, GError **error)
{
  guint64 n = 1;
  guint i;

  if (strcmp (name, "__metadata__") == 0) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "tensor name '__metadata__' is reserved for the header's metadata");
    return FALSE;
  }
  if (g_hash_table_contains (w->names, name)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "tensor name '%s' was already added; names must be unique", name);
    return FALSE;
  }
  if (dfl_dtype_size (dtype) == 0) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "tensor '%s': dtype %d is not a DflDtype", name, (int) dtype);
    return FALSE;
  }
  if (n_dims > DFL_TENSOR_MAX_DIMS) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "tensor '%s' has %u dims, more than the %d supported",
                 name, n_dims, DFL_TENSOR_MAX_DIMS);
    return FALSE;
  }
  for (i = 0; i < n_dims; i++) {
    if (shape[i] < 0) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                   "tensor '%s' shape[%u] is %" G_GINT64_FORMAT ", which is negative",
                   name, i, shape[i]);
      return FALSE;
    }
    if (!g_uint64_checked_mul (&n, n, (guint64) shape[i]) || n > G_MAXINT64) {
      g_autofree char *dims = dfl_format_dims (n_dims, shape);

      g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT,
                   "tensor '%s' shape %s has more elements than fit in 63 bits", name, dims);
      return FALSE;
    }
  }
  /* readers hold offsets as doubles at worst: keep them exact */
  if (!g_uint64_checked_mul (&n, n, dfl_dtype_size (dtype)) || n > (guint64) DFL_ST_MAX_JSON_INT
      || n > G_MAXSIZE) {
    g_autofree char *dims = dfl_format_dims (n_dims, shape);

    g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT,
                 "tensor '%s' %s %s is too large to write", name, dfl_dtype_name (dtype), dims);
    return FALSE;
  }
  *n_bytes = (gsize) n;
  return TRUE;
}

static void
dfl_st_writer_take (DflSafetensorsWriter *w, const char *name, DflDtype dtype,
                    guint n_dims, const gint64 *shape, guint8 *data, gsize n_bytes)
{
  DflStWriterEntry *e = g_new0 (DflStWriterEntry, 1);

  e->name = g_strdup (name);
  e->dtype = dtype;
  e->n_dims = n_dims;
  if (n_dims)
    memcpy (e->shape, shape, n_dims * sizeof (gint64));
  e->data = data;
  e->n_bytes = n_bytes;
  g_ptr_array_add (w->entries, e);
  g_hash_table_add (w->names, e->name);
}

gboolean
dfl_safetensors_writer_add (DflSafetensorsWriter *w, const char *name, DflDtype dtype,
                            guint n_dims, const gint64 *shape, const void *data,
                            GError **error)
{
  gsize n_bytes = 0;

  g_return_val_if_fail (w != NULL, FALSE);
  g_return_val_if_fail (name != NULL, FALSE);
  g_return_val_if_fail (shape != NULL || n_dims == 0, FALSE);

  if (!dfl_st_writer_check (w, name, dtype, n_dims, shape, &n_bytes, error))
    return FALSE;
  g_return_val_if_fail (data != NULL || n_bytes == 0, FALSE);
  dfl_st_writer_take (w, name, dtype, n_dims, shape,
                      n_bytes ? g_memdup2 (data, n_bytes) : NULL, n_bytes);
  return TRUE;
}

gboolean
dfl_safetensors_writer_add_f32 (DflSafetensorsWriter *w, const char *name, DflDtype dtype,
                                guint n_dims, const gint64 *shape, const float *data,
                                GError **error)
{
  gsize n_bytes = 0, n, i;
  guint8 *buf;

  g_return_val_if_fail (w != NULL, FALSE);
  g_return_val_if_fail (name != NULL, FALSE);
  g_return_val_if_fail (shape != NULL || n_dims == 0, FALSE);

  if (!dfl_dtype_is_float (dtype)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "tensor '%s': cannot store F32 data as %s (accepted: F32, F16, BF16)",
                 name, dfl_dtype_name (dtype));
    return FALSE;
  }
  if (!dfl_st_writer_check (w, name, dtype, n_dims, shape, &n_bytes, error))
    return FALSE;
  g_return_val_if_fail (data != NULL || n_bytes == 0, FALSE);

  n = n_bytes / dfl_dtype_size (dtype);
  buf = n_bytes ? g_malloc (n_bytes) : NULL;
  for (i = 0; i < n; i++) {
    guint32 u;

    switch (dtype) {
      case DFL_DTYPE_F32:
        u = GUINT32_TO_LE (dfl_f32_bits (data[i]));
        memcpy (buf + 4 * i, &u, 4);
        break;
      case DFL_DTYPE_F16:
      case DFL_DTYPE_BF16:
        u = dtype == DFL_DTYPE_F16 ? dfl_f32_to_f16 (data[i]) : dfl_f32_to_bf16 (data[i]);
        buf[2 * i] = (guint8) (u & 0xff);
        buf[2 * i + 1] = (guint8) (u >> 8);
        break;
      default:
        g_assert_not_reached ();
    }
  }
  dfl_st_writer_take (w, name, dtype, n_dims, shape, buf, n_bytes);
  return TRUE;
}

void
dfl_safetensors_writer_set_metadata (DflSafetensorsWriter *w, const char *key, const char *value)
{
  g_return_if_fail (w != NULL);
  g_return_if_fail (key != NULL && value != NULL);

  if (!g_hash_table_contains (w->meta, key)) {
    char *k = g_strdup (key);

    g_hash_table_insert (w->meta, k, g_strdup (value));
    g_ptr_array_add (w->meta_keys, k);
  } else {
    g_hash_table_insert (w->meta, g_strdup (key), g_strdup (value));
    /* the table kept its old key, which meta_keys points at */
  }
}

static cJSON *
dfl_json_raw_u64 (guint64 v)
{
  char buf[32];

  /* cJSON prints large doubles in exponent form, which integer readers
   * (the Rust reference among them) refuse: write the digits ourselves */
  g_snprintf (buf, sizeof buf, "%" G_GUINT64_FORMAT, v);
  return cJSON_CreateRaw (buf);
}

static char *
dfl_st_writer_header (DflSafetensorsWriter *w, gsize *len)
{
  cJSON *root = cJSON_CreateObject ();
  char *json, *padded;
  guint64 offset = 0;
  gsize n, total;
  guint i, d;

  if (w->meta_keys->len > 0) {
    cJSON *meta = cJSON_AddObjectToObject (root, "__metadata__");

    for (i = 0; i < w->meta_keys->len; i++) {
      const char *k = g_ptr_array_index (w->meta_keys, i);

      cJSON_AddStringToObject (meta, k, g_hash_table_lookup (w->meta, k));
    }
  }
  for (i = 0; i < w->entries->len; i++) {
    const DflStWriterEntry *e = g_ptr_array_index (w->entries, i);
    cJSON *t = cJSON_AddObjectToObject (root, e->name);
    cJSON *shape, *offs;

    cJSON_AddStringToObject (t, "dtype", dfl_dtype_name (e->dtype));
    shape = cJSON_AddArrayToObject (t, "shape");
    for (d = 0; d < e->n_dims; d++)
      cJSON_AddItemToArray (shape, dfl_json_raw_u64 ((guint64) e->shape[d]));
    offs = cJSON_AddArrayToObject (t, "data_offsets");
    cJSON_AddItemToArray (offs, dfl_json_raw_u64 (offset));
    offset += e->n_bytes;
    cJSON_AddItemToArray (offs, dfl_json_raw_u64 (offset));
  }

  json = cJSON_PrintUnformatted (root);
  cJSON_Delete (root);
  if (json == NULL)
    return NULL;
  /* pad with spaces to a multiple of 8, as the official writer does, so the
   * data area starts 8-aligned in the file */
  n = strlen (json);
  total = (n + 7) & ~(gsize) 7;
  padded = g_malloc (total + 1);
  memcpy (padded, json, n);
  memset (padded + n, ' ', total - n);
  padded[total] = '\0';
  cJSON_free (json);
  *len = total;
  return padded;
}

static gboolean
dfl_write_all (int fd, const void *buf, gsize len)
{
  const guint8 *p = buf;

  while (len > 0) {
    gssize r = write (fd, p, MIN (len, (gsize) 1 << 30));

    if (r < 0) {
      if (errno == EINTR)
        continue;
      return FALSE;
    }
    p += r;
    len -= (gsize) r;
  }
  return TRUE;
}

gboolean
dfl_safetensors_writer_write (DflSafetensorsWriter *w, const char *path, GError **error)
{
  g_autofree char *header = NULL;
  g_autofree char *tmp = NULL;
  gsize header_len = 0;
  guint8 len_bytes[8];
  guint64 hl;
  gboolean ok;
  guint i;
  int fd, errsv = 0;

  g_return_val_if_fail (w != NULL, FALSE);
  g_return_val_if_fail (path != NULL, FALSE);

  header = dfl_st_writer_header (w, &header_len);
  if (header == NULL) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT, "%s: cannot build the header JSON", path);
    return FALSE;
  }
  if (header_len > DFL_ST_MAX_HEADER) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT,
                 "%s: header of %" G_GSIZE_FORMAT " bytes is above the limit of %u readers accept",
                 path, header_len, DFL_ST_MAX_HEADER);
    return FALSE;
  }
  hl = header_len;
  for (i = 0; i < 8; i++)
    len_bytes[i] = (guint8) (hl >> (8 * i));

  /* write next to the target and rename over it, so a reader never sees a
   * half-written checkpoint */
  tmp = g_strdup_printf ("%s.XXXXXX", path);
  fd = g_mkstemp_full (tmp, O_WRONLY | O_CLOEXEC, 0666);
  if (fd < 0) {
    errsv = errno;
    g_set_error (error, DFL_ERROR, DFL_ERROR_IO, "%s: cannot create a temporary file: %s",
                 path, g_strerror (errsv));
    return FALSE;
  }
  ok = dfl_write_all (fd, len_bytes, 8) && dfl_write_all (fd, header, header_len);
  for (i = 0; ok && i < w->entries->len; i++) {
    const DflStWriterEntry *e = g_ptr_array_index (w->entries, i);

    ok = dfl_write_all (fd, e->data, e->n_bytes);
  }
  if (ok)
    ok = fsync (fd) == 0;
  if (!ok)
    errsv = errno;
  if (close (fd) != 0 && ok) {
    errsv = errno;
    ok = FALSE;
  }
  if (ok && g_rename (tmp, path) != 0) {
    errsv = errno;
    ok = FALSE;
  }
  if (!ok) {
    g_unlink (tmp);
    g_set_error (error, DFL_ERROR, DFL_ERROR_IO, "%s: cannot write: %s", path, g_strerror (errsv));
  }
  return ok;
}
