/* gst-dflash — one block of host memory for a model's matrices as the
 * CPU's products read them, asked of the OS in huge pages (weight-arena.c
 * says why).
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

typedef struct _DflWeightArena DflWeightArena;

/* Bytes a piece of `bytes` takes in an arena (its start kept on a 64-byte
 * boundary): what a caller sums to size one. */
gsize dfl_weight_arena_piece (gsize bytes);

/* An arena of `bytes` (a sum of dfl_weight_arena_piece ()), or NULL and
 * an error naming the size where the memory cannot be had. */
DflWeightArena *dfl_weight_arena_new (gsize bytes, GError **error);

/* The next `bytes` of the arena, 64-byte aligned; NULL (a critical
 * warning) past its end. */
gpointer dfl_weight_arena_take (DflWeightArena *arena, gsize bytes);

/* An arena over `bytes` of the file `fd` from `offset` (a multiple of the
 * page size), mapped read-only: pieces taken from it are read, never
 * written (arena-cache.c). NULL and an error where it cannot be mapped. */
DflWeightArena *dfl_weight_arena_map_file (int fd, gsize offset, gsize bytes, GError **error);
/* The arena's bytes (its size as asked), to save them. */
gconstpointer dfl_weight_arena_bytes (const DflWeightArena *arena, gsize *bytes);

void dfl_weight_arena_free (DflWeightArena *arena);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (DflWeightArena, dfl_weight_arena_free)

G_END_DECLS
