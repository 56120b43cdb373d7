/* gst-dflash — GGUF (version 3, little-endian): writing a file
 * (gguf-write.h; the layout is gguf.c's). */
#include "gguf-write.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <glib/gstdio.h>

#include "dfl-error.h"

#define GGUF_MAX_DIMS 4u

typedef struct {
  char *key;
  GByteArray *bytes;           /* type (u32) and value, as the file holds them */
} Entry;

typedef struct {
  char *name;
  guint n_dims;
  guint64 ne[GGUF_MAX_DIMS];   /* innermost first, as the file lists them */
  guint32 type_id;
  guint64 n_bytes;
  guint64 offset;              /* from the data section */
} Tensor;

struct _DflGgufWriter {
  guint64 alignment;
  GPtrArray *entries;          /* Entry */
  GHashTable *entry_by_key;
  GPtrArray *tensors;          /* Tensor */
  char *path, *tmp_path;
  FILE *f;
  guint current;               /* the tensor whose data comes next */
  guint64 written;             /* of its bytes */
};

static void
entry_free (gpointer p)
{
  Entry *e = p;

  g_free (e->key);
  g_byte_array_unref (e->bytes);
  g_free (e);
}

static void
tensor_free (gpointer p)
{
  Tensor *t = p;

  g_free (t->name);
  g_free (t);
}

DflGgufWriter *
dfl_gguf_writer_new (guint64 alignment)
{
  DflGgufWriter *w = g_new0 (DflGgufWriter, 1);

  g_return_val_if_fail (alignment > 0 && (alignment & (alignment - 1)) == 0, NULL);
  w->alignment = alignment;
  w->entries = g_ptr_array_new_with_free_func (entry_free);
  w->entry_by_key = g_hash_table_new (g_str_hash, g_str_equal);
  w->tensors = g_ptr_array_new_with_free_func (tensor_free);
  return w;
}

void
dfl_gguf_writer_free (DflGgufWriter *w)
{
  if (!w)
    return;
  if (w->f) {
    fclose (w->f);
    g_unlink (w->tmp_path);
  }
  g_hash_table_unref (w->entry_by_key);
  g_ptr_array_unref (w->entries);
  g_ptr_array_unref (w->tensors);
  g_free (w->path);
  g_free (w->tmp_path);
  g_free (w);
}

static void
put_le (GByteArray *b, guint64 v, guint n)
{
  guint8 bytes[8];

  for (guint i = 0; i < n; i++)
    bytes[i] = (guint8) (v >> (8 * i));
  g_byte_array_append (b, bytes, n);
}

static void
put_string (GByteArray *b, const char *s)
{
  gsize n = strlen (s);

  put_le (b, n, 8);
  g_byte_array_append (b, (const guint8 *) s, (guint) n);
}

/* A scalar's bits as the file stores them. */
static guint64
scalar_bits (const DflGgufValue *v)
{
  switch (v->type) {
    case DFL_GGUF_UINT8: case DFL_GGUF_UINT16: case DFL_GGUF_UINT32: case DFL_GGUF_UINT64:
      return v->u;
    case DFL_GGUF_FLOAT32: {
      float f = (float) v->f;   /* read from an F32: exact */
      guint32 b;

      memcpy (&b, &f, 4);
      return b;
    }
    case DFL_GGUF_FLOAT64: {
      guint64 b;

      memcpy (&b, &v->f, 8);
      return b;
    }
    default:                    /* signed types and BOOL */
      return (guint64) v->i;
  }
}

static Entry *
entry_for (DflGgufWriter *w, const char *key)
{
  Entry *e = g_hash_table_lookup (w->entry_by_key, key);

  if (e) {
    g_byte_array_set_size (e->bytes, 0);
    return e;
  }
  e = g_new0 (Entry, 1);
  e->key = g_strdup (key);
  e->bytes = g_byte_array_new ();
  g_ptr_array_add (w->entries, e);
  g_hash_table_insert (w->entry_by_key, e->key, e);
  return e;
}

void
dfl_gguf_writer_add_value (DflGgufWriter *w, const DflGgufValue *v)
{
  GByteArray *b = entry_for (w, v->key)->bytes;

  put_le (b, v->type, 4);
  if (v->type == DFL_GGUF_STRING) {
    put_string (b, v->str);
  }
  else if (v->type == DFL_GGUF_ARRAY) {
    put_le (b, v->item_type, 4);
    put_le (b, v->n, 8);
    if (v->item_type == DFL_GGUF_STRING)
      for (guint64 i = 0; i < v->n; i++)
        put_string (b, v->strs[i]);
    else
      g_byte_array_append (b, v->items, (guint) (v->n * dfl_gguf_scalar_size (v->item_type)));
  }
  else {
    put_le (b, scalar_bits (v), (guint) dfl_gguf_scalar_size (v->type));
  }
}

void
dfl_gguf_writer_set_u32 (DflGgufWriter *w, const char *key, guint32 value)
{
  GByteArray *b = entry_for (w, key)->bytes;

  put_le (b, DFL_GGUF_UINT32, 4);
  put_le (b, value, 4);
}

gboolean
dfl_gguf_writer_add_tensor (DflGgufWriter *w, const char *name, DflDtype dtype, guint n_dims,
                            const gint64 *shape, GError **error)
{
  Tensor *t;
  guint32 id;
  guint64 rows = 1, end = 0;

  g_return_val_if_fail (w->f == NULL, FALSE);
  if (!dfl_gguf_type_id_of_dtype (dtype, &id)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                 "tensor '%s': GGUF has no type for %s", name, dfl_dtype_name (dtype));
    return FALSE;
  }
  if (n_dims < 1 || n_dims > GGUF_MAX_DIMS
      || shape[n_dims - 1] % (gint64) dfl_dtype_block_elems (dtype) != 0) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "tensor '%s': %u dims with rows of %" G_GINT64_FORMAT " elements cannot be %s "
                 "in GGUF (1 to 4 dims, rows of whole %zu-element blocks)", name, n_dims,
                 n_dims ? shape[n_dims - 1] : 0, dfl_dtype_name (dtype),
                 dfl_dtype_block_elems (dtype));
    return FALSE;
  }
  t = g_new0 (Tensor, 1);
  t->name = g_strdup (name);
  t->n_dims = n_dims;
  t->type_id = id;
  for (guint d = 0; d < n_dims; d++) {
    t->ne[d] = (guint64) shape[n_dims - 1 - d];
    if (d > 0)
      rows *= t->ne[d];
  }
  t->n_bytes = rows * dfl_dtype_row_bytes (dtype, shape[n_dims - 1]);
  if (w->tensors->len) {
    const Tensor *last = g_ptr_array_index (w->tensors, w->tensors->len - 1);
    end = last->offset + last->n_bytes;
  }
  t->offset = (end + w->alignment - 1) & ~(w->alignment - 1);
  g_ptr_array_add (w->tensors, t);
  return TRUE;
}

static gboolean
write_bytes (DflGgufWriter *w, const void *data, gsize n, GError **error)
{
  if (n && fwrite (data, 1, n, w->f) != n) {
    int err = errno;
    g_set_error (error, DFL_ERROR, DFL_ERROR_IO, "%s: cannot write: %s", w->tmp_path,
                 g_strerror (err));
    return FALSE;
  }
  return TRUE;
}

static gboolean
pad_to_alignment (DflGgufWriter *w, guint64 pos, GError **error)
{
  static const guint8 zeros[64] = { 0 };
  guint64 pad = (w->alignment - pos % w->alignment) % w->alignment;

  while (pad) {
    guint64 n = MIN (pad, sizeof zeros);
    if (!write_bytes (w, zeros, n, error))
      return FALSE;
    pad -= n;
  }
  return TRUE;
}

gboolean
dfl_gguf_writer_begin (DflGgufWriter *w, const char *path, GError **error)
{
  g_autoptr (GByteArray) head = g_byte_array_new ();
  g_autofree char *dir = g_path_get_dirname (path), *base = g_path_get_basename (path);
  g_autofree char *tmpl = g_strdup_printf (".%s.XXXXXX", base);
  g_autofree char *tmp = g_build_filename (dir, tmpl, NULL);
  int fd;

  g_return_val_if_fail (w->f == NULL, FALSE);
  if ((fd = g_mkstemp (tmp)) < 0 || !(w->f = fdopen (fd, "wb"))) {
    int err = errno;
    if (fd >= 0) {
      close (fd);
      g_unlink (tmp);
    }
    g_set_error (error, DFL_ERROR, DFL_ERROR_IO, "%s: cannot create a file in %s: %s", path, dir,
                 g_strerror (err));
    return FALSE;
  }
  /* a model file anyone may read, as the files beside it (mkstemp makes
   * it the owner's alone) */
  fchmod (fd, 0644);
  w->path = g_strdup (path);
  w->tmp_path = g_steal_pointer (&tmp);
  g_byte_array_append (head, (const guint8 *) "GGUF", 4);
  put_le (head, 3, 4);
  put_le (head, w->tensors->len, 8);
  put_le (head, w->entries->len, 8);
  for (guint i = 0; i < w->entries->len; i++) {
    const Entry *e = g_ptr_array_index (w->entries, i);
    put_string (head, e->key);
    g_byte_array_append (head, e->bytes->data, e->bytes->len);
  }
  for (guint i = 0; i < w->tensors->len; i++) {
    const Tensor *t = g_ptr_array_index (w->tensors, i);
    put_string (head, t->name);
    put_le (head, t->n_dims, 4);
    for (guint d = 0; d < t->n_dims; d++)
      put_le (head, t->ne[d], 8);
    put_le (head, t->type_id, 4);
    put_le (head, t->offset, 8);
  }
  w->current = 0;
  w->written = 0;
  return write_bytes (w, head->data, head->len, error)
      && pad_to_alignment (w, head->len, error);
}

gboolean
dfl_gguf_writer_write (DflGgufWriter *w, const void *data, gsize n, GError **error)
{
  const guint8 *p = data;

  g_return_val_if_fail (w->f != NULL, FALSE);
  while (n) {
    const Tensor *t;
    guint64 take;

    if (w->current >= w->tensors->len) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                   "%s: %zu bytes more than the tensors hold", w->path, n);
      return FALSE;
    }
    t = g_ptr_array_index (w->tensors, w->current);
    take = MIN (n, t->n_bytes - w->written);
    if (!write_bytes (w, p, take, error))
      return FALSE;
    p += take;
    n -= take;
    w->written += take;
    if (w->written == t->n_bytes) {
      /* the next tensor begins at its aligned offset */
      if (!pad_to_alignment (w, t->offset + t->n_bytes, error))
        return FALSE;
      w->current++;
      w->written = 0;
    }
  }
  return TRUE;
}

gboolean
dfl_gguf_writer_finish (DflGgufWriter *w, GError **error)
{
  FILE *f = w->f;

  g_return_val_if_fail (f != NULL, FALSE);
  if (w->current != w->tensors->len) {
    const Tensor *t = g_ptr_array_index (w->tensors, w->current);
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "%s: tensor '%s' has %" G_GUINT64_FORMAT " of its %" G_GUINT64_FORMAT
                 " bytes written", w->path, t->name, w->written, t->n_bytes);
    return FALSE;
  }
  w->f = NULL;
  if (fflush (f) != 0 || fsync (fileno (f)) != 0) {
    int err = errno;
    fclose (f);
    g_unlink (w->tmp_path);
    g_set_error (error, DFL_ERROR, DFL_ERROR_IO, "%s: cannot write: %s", w->tmp_path,
                 g_strerror (err));
    return FALSE;
  }
  fclose (f);
  if (g_rename (w->tmp_path, w->path) != 0) {
    int err = errno;
    g_unlink (w->tmp_path);
    g_set_error (error, DFL_ERROR, DFL_ERROR_IO, "%s: cannot rename %s to it: %s", w->path,
                 w->tmp_path, g_strerror (err));
    return FALSE;
  }
  return TRUE;
}
