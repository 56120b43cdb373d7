/* gst-dflash — safetensors: zero-copy reading (one file or an indexed set of
 * shards) and writing.
 *
 * A file is mapped read-only; a DflStoredTensor points into the mapping, so loading a
 * checkpoint copies nothing until a caller converts a tensor. Everything in a
 * header is checked before it is trusted: the header length against the file
 * size and a sane bound, the JSON, dtype names, offsets inside the data area,
 * no two tensors overlapping, and dtype size × shape = byte count.
 */
#pragma once

#include <glib.h>

#include "dfl-dtype.h"

G_BEGIN_DECLS

#define DFL_TENSOR_MAX_DIMS 8

typedef struct {
  const char *name;
  DflDtype dtype;
  guint n_dims;
  gint64 shape[DFL_TENSOR_MAX_DIMS];
  gint64 n_elements;
  const guint8 *data;          /* inside the file's mapping, little-endian */
  gsize n_bytes;
  const char *file;            /* the file (shard) that holds it */
  gboolean in_mapping;         /* data lies in a read-only mapping of the file (the
                                * readers' tensors; FALSE for memory described by hand) */
} DflStoredTensor;

typedef struct _DflSafetensors DflSafetensors;

/* `path` is a .safetensors file, a model.safetensors.index.json, or a folder
 * holding either model.safetensors or model.safetensors.index.json. */
DflSafetensors *dfl_safetensors_open (const char *path, GError **error);
void dfl_safetensors_free (DflSafetensors *st);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (DflSafetensors, dfl_safetensors_free)

/* A set of tensors read by another format's reader (GGUF) under the names
 * a safetensors checkpoint gives them: they point into memory `owner`
 * holds, which is freed (owner_free) with the set. `path` names the file
 * in messages. view_add copies the description (not the data) under
 * `name`; names must be unique. */
DflSafetensors *dfl_safetensors_new_view (const char *path, gpointer owner,
                                          GDestroyNotify owner_free);
gboolean dfl_safetensors_view_add (DflSafetensors *st, const char *name,
                                   const DflStoredTensor *t, GError **error);

/* The file or index that was opened (for messages). */
const char *dfl_safetensors_path (const DflSafetensors *st);
guint dfl_safetensors_n_tensors (const DflSafetensors *st);
const DflStoredTensor *dfl_safetensors_nth (const DflSafetensors *st, guint i);
/* NULL where there is no such tensor. */
const DflStoredTensor *dfl_safetensors_find (const DflSafetensors *st, const char *name);
/* A tensor of this name and shape, in a float dtype (F32, F16 or BF16); else
 * NULL with an error naming the file, the tensor, and what was expected. */
const DflStoredTensor *dfl_safetensors_expect (const DflSafetensors *st, const char *name,
                                         guint n_dims, const gint64 *shape, GError **error);
/* The same for a matrix [rows][cols] that may also be stored in a
 * block-quantized type (a GGUF file's Q8_0, Q4_0, Q4_K, Q6_K), its rows
 * then whole blocks. */
const DflStoredTensor *dfl_safetensors_expect_matrix (const DflSafetensors *st, const char *name,
                                                gint64 rows, gint64 cols, GError **error);
/* A string of the first file's __metadata__, or NULL. */
const char *dfl_safetensors_metadata (const DflSafetensors *st, const char *key);
/* Every key of the first file's __metadata__, sorted (g_strfreev it). */
GStrv dfl_safetensors_metadata_keys (const DflSafetensors *st);

/* Give back the process's resident pages of a mapped tensor's data (the
 * whole pages inside it), where a copy of it is what is read from now on,
 * so the process holds the weights once. The mapping stays valid: a later
 * read faults the pages back in from the file (from the page cache while
 * the kernel keeps them there). Nothing for a tensor not in a mapping. */
void dfl_tensor_release_pages (const DflStoredTensor *t);

/* Convert a float tensor (F32, F16, BF16) to F32: `n` elements from element
 * `offset` on. */
void dfl_tensor_read_f32 (const DflStoredTensor *t, gint64 offset, gint64 n, float *dst);
float *dfl_tensor_dup_f32 (const DflStoredTensor *t);   /* g_free() it */

/* Writing: add tensors (the data is copied), metadata strings, then write one
 * file. Names must be unique. */
typedef struct _DflSafetensorsWriter DflSafetensorsWriter;

DflSafetensorsWriter *dfl_safetensors_writer_new (void);
void dfl_safetensors_writer_free (DflSafetensorsWriter *w);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (DflSafetensorsWriter, dfl_safetensors_writer_free)
gboolean dfl_safetensors_writer_add (DflSafetensorsWriter *w, const char *name, DflDtype dtype,
                                     guint n_dims, const gint64 *shape, const void *data,
                                     GError **error);
/* An F32 array stored as `dtype` (F32, F16 or BF16). */
gboolean dfl_safetensors_writer_add_f32 (DflSafetensorsWriter *w, const char *name, DflDtype dtype,
                                         guint n_dims, const gint64 *shape, const float *data,
                                         GError **error);
void dfl_safetensors_writer_set_metadata (DflSafetensorsWriter *w, const char *key, const char *value);
gboolean dfl_safetensors_writer_write (DflSafetensorsWriter *w, const char *path, GError **error);

G_END_DECLS
