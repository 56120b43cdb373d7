/* gst-dflash — GGUF (version 3, little-endian): zero-copy reading.
 *
 * A file is mapped read-only. Its header (magic, version, counts), every
 * metadata key and value (scalars, strings, arrays of them) and every
 * tensor's description (name, dims, type, offset) are checked against the
 * file before anything is sized from them: strings and arrays inside the
 * file, counts bounded by what the file could hold, each tensor's offset a
 * multiple of general.alignment (default 32) inside the data section, its
 * type's bytes × dims exactly what it is given, no two tensors overlapping.
 * Tensors come out as DflStoredTensor pointing into the mapping, their
 * shape outermost dimension first as safetensors writes it (GGUF lists the
 * innermost first): a [rows][cols] matrix whether F32 or Q8_0.
 */
#pragma once

#include <glib.h>

#include "safetensors.h"

G_BEGIN_DECLS

/* Value types, numbered as the file numbers them. */
typedef enum {
  DFL_GGUF_UINT8 = 0,
  DFL_GGUF_INT8 = 1,
  DFL_GGUF_UINT16 = 2,
  DFL_GGUF_INT16 = 3,
  DFL_GGUF_UINT32 = 4,
  DFL_GGUF_INT32 = 5,
  DFL_GGUF_FLOAT32 = 6,
  DFL_GGUF_BOOL = 7,
  DFL_GGUF_STRING = 8,
  DFL_GGUF_ARRAY = 9,
  DFL_GGUF_UINT64 = 10,
  DFL_GGUF_INT64 = 11,
  DFL_GGUF_FLOAT64 = 12,
} DflGgufType;
#define DFL_GGUF_N_TYPES (DFL_GGUF_FLOAT64 + 1)

/* One metadata entry. A scalar's value is in `i` (signed and bool types),
 * `u` (unsigned types) or `f` (float types); a string in `str`; an array
 * has `n` items of `item_type`: numbers packed little-endian at `items`
 * (inside the mapping), strings in `strs`. Strings are NUL-terminated
 * copies (a NUL inside one is refused). */
typedef struct {
  const char *key;
  DflGgufType type;
  DflGgufType item_type;    /* arrays */
  guint64 n;                /* arrays */
  gint64 i;
  guint64 u;
  double f;
  const char *str;
  const guint8 *items;
  const char *const *strs;
} DflGgufValue;

typedef struct _DflGguf DflGguf;

DflGguf *dfl_gguf_open (const char *path, GError **error);
void dfl_gguf_free (DflGguf *g);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (DflGguf, dfl_gguf_free)

/* Whether `path` is a file that begins with GGUF's magic (its name does not
 * matter); FALSE for folders and files that cannot be read. */
gboolean dfl_gguf_is_gguf (const char *path);

const char *dfl_gguf_path (const DflGguf *g);
guint32 dfl_gguf_version (const DflGguf *g);
guint64 dfl_gguf_alignment (const DflGguf *g);
/* Where the data section begins, in bytes from the file's start. */
guint64 dfl_gguf_data_offset (const DflGguf *g);
/* The "UINT32", "STRING", "ARRAY" of a type. */
const char *dfl_gguf_type_name (DflGgufType type);
/* Bytes of a scalar of `type` in the file (0 for STRING and ARRAY). */
gsize dfl_gguf_scalar_size (DflGgufType type);
/* The file's tensor type id of `dtype` (0 for F32, 12 for Q4_K, …):
 * FALSE where GGUF has none we read. */
gboolean dfl_gguf_type_id_of_dtype (DflDtype dtype, guint32 *id);

guint dfl_gguf_n_values (const DflGguf *g);
const DflGgufValue *dfl_gguf_nth_value (const DflGguf *g, guint i);
const DflGgufValue *dfl_gguf_find_value (const DflGguf *g, const char *key);

/* Typed lookups: FALSE with an error naming the file and the key where it
 * is missing (unless `optional`, then TRUE and *out untouched) or of
 * another type. An integer of any integer type that fits; a float of
 * either float type; a string. */
gboolean dfl_gguf_get_int (const DflGguf *g, const char *key, gboolean optional, gint64 *out,
                           GError **error);
gboolean dfl_gguf_get_float (const DflGguf *g, const char *key, gboolean optional, double *out,
                             GError **error);
gboolean dfl_gguf_get_string (const DflGguf *g, const char *key, gboolean optional,
                              const char **out, GError **error);
/* An array of `item_type`: the entry (whose n, items or strs the caller
 * reads), or NULL with an error. */
const DflGgufValue *dfl_gguf_get_array (const DflGguf *g, const char *key, DflGgufType item_type,
                                        GError **error);
/* Item i of an integer array as gint64 (any integer item type). */
gint64 dfl_gguf_array_int (const DflGgufValue *v, guint64 i);

guint dfl_gguf_n_tensors (const DflGguf *g);
const DflStoredTensor *dfl_gguf_nth_tensor (const DflGguf *g, guint i);
const DflStoredTensor *dfl_gguf_find_tensor (const DflGguf *g, const char *name);
/* The file's own type id of a tensor (2 for Q4_0, …). */
guint32 dfl_gguf_tensor_type_id (const DflGguf *g, guint i);

G_END_DECLS
