/* gst-dflash — matrices made at load (quantized, laid out for the CPU's
 * products) kept in a file between runs, under a key of everything they
 * are made of, so that a later process maps them instead of making them
 * again (arena-cache.c says why).
 */
#pragma once

#include <glib.h>

#include "weight-arena.h"

G_BEGIN_DECLS

/* What an arena is made of, hashed as it is given (128 bits, not a
 * cryptographic hash: it tells inputs apart, it does not resist forgery;
 * the cache is the user's own). */
typedef struct _DflArenaKey DflArenaKey;

/* A key for arenas of kind `what` (e.g. "drafter matrices as Q8_0"). */
DflArenaKey *dfl_arena_key_new (const char *what);
void dfl_arena_key_add (DflArenaKey *key, gconstpointer data, gsize n);
/* The file of the code at `fn` (the program, or the shared object that
 * holds it: its device, inode, size and modification time): another build
 * makes other bytes. FALSE where that file cannot be told (a shared
 * object opened by a relative name): then no arena of it can be trusted. */
gboolean dfl_arena_key_add_code (DflArenaKey *key, gconstpointer fn);
/* 32 hex digits; frees the key. */
char *dfl_arena_key_finish (DflArenaKey *key);
void dfl_arena_key_free (DflArenaKey *key);

/* The arena of `key` in `dir`, `bytes` long, mapped read-only; NULL where
 * there is none, or none whole and of that size (a miss, not an error). */
DflWeightArena *dfl_arena_cache_load (const char *dir, const char *key, gsize bytes);
/* How many arenas a folder keeps: saving one removes the oldest past it. */
#define DFL_ARENA_CACHE_KEPT 4

/* `arena`'s bytes into `dir` as `key`'s (the folder made if need be; the
 * file written whole under another name, then renamed: a reader never
 * sees part of one); the oldest arenas past DFL_ARENA_CACHE_KEPT go. */
gboolean dfl_arena_cache_save (const char *dir, const char *key, const DflWeightArena *arena,
                               GError **error);

G_END_DECLS
