/* gst-dflash — GGUF (version 3, little-endian): writing a file.
 *
 * The metadata and the tensors' descriptions are given first (their sizes
 * decide where each tensor's data lies), then the data of each tensor in
 * the order they were given, in as many pieces as the caller likes. The
 * file is written under a temporary name beside `path` and renamed to it
 * once whole, so an interrupted write never leaves a truncated model where
 * a loader would find it.
 */
#pragma once

#include <glib.h>

#include "gguf.h"

G_BEGIN_DECLS

typedef struct _DflGgufWriter DflGgufWriter;

/* Tensors' data at multiples of `alignment` (a power of two; GGUF's
 * default is 32, and a file that says otherwise carries general.alignment
 * among its metadata, which the caller adds). */
DflGgufWriter *dfl_gguf_writer_new (guint64 alignment);
/* Frees the writer; an unfinished file's temporary is removed. */
void dfl_gguf_writer_free (DflGgufWriter *w);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (DflGgufWriter, dfl_gguf_writer_free)

/* A metadata entry as the reader gives it (another file's, copied), or a
 * u32 or string made here. Keys must be unique; set_u32 replaces an entry
 * of the same key, keeping its place. */
void dfl_gguf_writer_add_value (DflGgufWriter *w, const DflGgufValue *v);
void dfl_gguf_writer_set_u32 (DflGgufWriter *w, const char *key, guint32 value);

/* A tensor of `dtype` and `shape` (outermost dimension first, as
 * DflStoredTensor gives it; at most 4 dims). FALSE with an error where
 * GGUF has no type for dtype or a row is not whole blocks. */
gboolean dfl_gguf_writer_add_tensor (DflGgufWriter *w, const char *name, DflDtype dtype,
                                     guint n_dims, const gint64 *shape, GError **error);

/* Create the temporary file and write the header, the metadata and the
 * tensors' descriptions. */
gboolean dfl_gguf_writer_begin (DflGgufWriter *w, const char *path, GError **error);
/* The next bytes of the current tensor's data; a tensor is done once its
 * bytes are all written, and the next one begins. */
gboolean dfl_gguf_writer_write (DflGgufWriter *w, const void *data, gsize n, GError **error);
/* Every tensor written: the file is closed and renamed to `path`. */
gboolean dfl_gguf_writer_finish (DflGgufWriter *w, GError **error);

G_END_DECLS
