/* gst-dflash — one block of host memory for a model's matrices, asked of
 * the OS in huge pages.
 *
 * Why: a decode step reads every matrix once, about 100 MB a step for a
 * 150M-parameter Q4_K_M target. In 4 KiB pages that is some 24 000 pages a
 * step, more than the processor's TLB holds, so each costs a page walk
 * beside its reads; in 2 MiB pages the walks all but vanish. Linux gives
 * an anonymous mapping transparent huge pages where it is advised to
 * (MADV_HUGEPAGE; Debian's default setting, "madvise"), in the 2 MiB
 * stretches the mapping covers whole: hence one arena for all of a
 * model's matrices rather than an allocation each (most are under 2 MiB).
 * A file's own mapping cannot be advised so (its pages are the page
 * cache's), which is why the matrices are copied here and the file's
 * pages given back. Measured on two cores (bench-target, 200 decode steps,
 * alternating runs, median and range of 5 or 6 a side), ms a decode step
 * without and with the arena: the 159M-parameter target as Q4_K_M 4.22
 * (4.03–4.41) and 3.87 (3.68–4.03), as Q8_0 6.89 (6.66–7.07) and 6.15
 * (5.17–7.84); the default pair's 17M BF16 target 2.00 (1.75–2.34) and
 * 1.59 (1.49–1.82).
 *
 * Where the OS gives no huge pages (another setting, another kernel) the
 * arena is ordinary memory and the products read it as fast as they read
 * any other.
 */
#include "weight-arena.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "dfl-error.h"

#define HUGE_PAGE ((gsize) 2 << 20)
#define PIECE_ALIGN ((gsize) 64)

struct _DflWeightArena {
  guint8 *map;   /* the mapping as mmap gave it */
  gsize map_bytes;
  guint8 *base;  /* its first huge-page boundary */
  gsize bytes, used;
};

gsize
dfl_weight_arena_piece (gsize bytes)
{
  return (bytes + PIECE_ALIGN - 1) & ~(PIECE_ALIGN - 1);
}

/* The arena over a mapping mmap gave (MAP_FAILED: an error naming what
 * was mapped), starting at its first multiple of `align`. */
static DflWeightArena *
arena_of (void *map, gsize map_bytes, gsize align, gsize bytes, const char *what,
          GError **error)
{
  DflWeightArena *a;

  if (map == MAP_FAILED) {
    int e = errno;
    g_set_error (error, DFL_ERROR, DFL_ERROR_IO, "weights: cannot map %" G_GSIZE_FORMAT
                 " bytes of %s for the matrices: %s", bytes, what, g_strerror (e));
    return NULL;
  }
  a = g_new0 (DflWeightArena, 1);
  a->map = map;
  a->map_bytes = map_bytes;
  a->base = (guint8 *) (((guintptr) map + align - 1) & ~(guintptr) (align - 1));
  a->bytes = bytes;
  return a;
}

DflWeightArena *
dfl_weight_arena_new (gsize bytes, GError **error)
{
  DflWeightArena *a;
  gsize whole = (MAX (bytes, 1) + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);

  /* one huge page more than asked, so that the arena can start on a
   * boundary of one */
  a = arena_of (mmap (NULL, whole + HUGE_PAGE, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0),
                whole + HUGE_PAGE, HUGE_PAGE, bytes, "memory", error);
#ifdef MADV_HUGEPAGE
  /* advice only: an OS that gives no huge pages leaves ordinary ones */
  if (a)
    madvise (a->base, whole, MADV_HUGEPAGE);
#endif
  return a;
}

gpointer
dfl_weight_arena_take (DflWeightArena *arena, gsize bytes)
{
  gsize piece = dfl_weight_arena_piece (bytes);
  gpointer p;

  g_return_val_if_fail (arena != NULL, NULL);
  g_return_val_if_fail (piece <= arena->bytes - arena->used, NULL);
  p = arena->base + arena->used;
  arena->used += piece;
  return p;
}

DflWeightArena *
dfl_weight_arena_map_file (int fd, gsize offset, gsize bytes, GError **error)
{
  /* every page now, from the page cache: the products would fault them
   * in one by one */
  return arena_of (mmap (NULL, MAX (bytes, 1), PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd,
                         (off_t) offset),
                   MAX (bytes, 1), 1, bytes, "a file", error);
}

gconstpointer
dfl_weight_arena_bytes (const DflWeightArena *arena, gsize *bytes)
{
  *bytes = arena->bytes;
  return arena->base;
}

void
dfl_weight_arena_free (DflWeightArena *arena)
{
  if (!arena)
    return;
  munmap (arena->map, arena->map_bytes);
  g_free (arena);
}
