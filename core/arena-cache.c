/* gst-dflash — matrices made at load kept in a file between runs.
 *
 * Why: the CPU drafter's matrices are quantized to Q8_0 and laid out for
 * the integer products when a sequence first drafts (draft-device.c). The
 * arithmetic is a few milliseconds; the memory is not: fresh pages are
 * zeroed by the kernel as they are first touched, and on a virtual
 * machine whose host supplies its pages on first touch that took most of
 * the binding — 14 to 63 ms of a cold `dflash generate` of about 200 ms
 * (the default pair, two cores), where the rest of the run drafted and
 * verified its 128 tokens. A file's pages in the page cache are filled
 * already: mapping the arena a previous run saved costs a hash of the
 * inputs and the page-table entries.
 *
 * The key is everything the bytes are made of, hashed as given: the
 * source matrices' bytes, types and shapes, and the code (the file it was
 * loaded from, its size and time), so a new build or another model never
 * maps a stale arena. The file: a header of one page (magic, version, the
 * arena's size, the key) and the arena's bytes after it, so the mapping
 * starts on a page and every piece keeps its alignment.
 */
#define _GNU_SOURCE
#include "arena-cache.h"

#include <link.h>
#include <errno.h>
#include <fcntl.h>
#include <glib/gstdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dfl-error.h"

#define HEADER_BYTES 4096
#define MAGIC "DFLARENA"
#define VERSION 1u

/* --- the key: four lanes of multiply-rotate over 32-byte stripes --- */

#define PRIME1 G_GUINT64_CONSTANT (0x9e3779b185ebca87)
#define PRIME2 G_GUINT64_CONSTANT (0xc2b2ae3d27d4eb4f)
#define STRIPE 32

struct _DflArenaKey {
  guint64 lane[4];
  guint8 tail[STRIPE];
  gsize n_tail;
  guint64 total;
};

static inline guint64
rotl (guint64 x, int r)
{
  return (x << r) | (x >> (64 - r));
}

static inline guint64
lane_round (guint64 acc, guint64 word)
{
  return rotl (acc + word * PRIME2, 31) * PRIME1;
}

static void
stripe (DflArenaKey *k, const guint8 *p)
{
  guint64 w[4];

  memcpy (w, p, sizeof w);
  for (int i = 0; i < 4; i++)
    k->lane[i] = lane_round (k->lane[i], GUINT64_FROM_LE (w[i]));
}

static guint64
avalanche (guint64 x)
{
  x ^= x >> 33;
  x *= PRIME2;
  x ^= x >> 29;
  x *= PRIME1;
  return x ^ (x >> 32);
}

DflArenaKey *
dfl_arena_key_new (const char *what)
{
  DflArenaKey *k = g_new0 (DflArenaKey, 1);

  for (int i = 0; i < 4; i++)
    k->lane[i] = PRIME1 * (guint64) (i + 1);
  dfl_arena_key_add (k, what, strlen (what) + 1);
  return k;
}

void
dfl_arena_key_add (DflArenaKey *k, gconstpointer data, gsize n)
{
  const guint8 *p = data;

  k->total += n;
  if (k->n_tail) {
    gsize take = MIN (n, STRIPE - k->n_tail);
    memcpy (k->tail + k->n_tail, p, take);
    k->n_tail += take;
    p += take;
    n -= take;
    if (k->n_tail < STRIPE)
      return;
    stripe (k, k->tail);
    k->n_tail = 0;
  }
  for (; n >= STRIPE; p += STRIPE, n -= STRIPE)
    stripe (k, p);
  memcpy (k->tail, p, n);
  k->n_tail = n;
}

/* Which loaded file holds an address: the program's own (empty name) or a
 * shared object's path as it was opened. */
typedef struct {
  guintptr addr;
  gboolean found;
  char *name;
} Holder;

static int
holds (struct dl_phdr_info *info, size_t size, void *data)
{
  Holder *h = data;

  (void) size;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW (Phdr) *ph = &info->dlpi_phdr[i];
    guintptr from = info->dlpi_addr + ph->p_vaddr;
    if (ph->p_type == PT_LOAD && h->addr >= from && h->addr < from + ph->p_memsz) {
      h->found = TRUE;
      h->name = g_strdup (info->dlpi_name ? info->dlpi_name : "");
      return 1;
    }
  }
  return 0;
}

gboolean
dfl_arena_key_add_code (DflArenaKey *k, gconstpointer fn)
{
  Holder h = { .addr = (guintptr) fn };
  g_autofree char *name = NULL;
  GStatBuf st;

  dl_iterate_phdr (holds, &h);
  name = h.name;
  /* the program itself by the kernel's link to it (its name here is
   * nothing, and argv[0] may be relative); a shared object by the path
   * it was opened with, where that is whole (GStreamer opens plugins so) */
  if (!h.found || (name[0] && name[0] != '/'))
    return FALSE;
  if (g_stat (name[0] ? name : "/proc/self/exe", &st) != 0)
    return FALSE;
  {
    gint64 facts[] = { st.st_dev, st.st_ino, st.st_size, st.st_mtim.tv_sec,
                       st.st_mtim.tv_nsec };
    dfl_arena_key_add (k, facts, sizeof facts);
  }
  return TRUE;
}

char *
dfl_arena_key_finish (DflArenaKey *k)
{
  guint64 a, b, t = k->total;

  /* the last part-stripe, padded with zeros (its length is in total) */
  if (k->n_tail) {
    memset (k->tail + k->n_tail, 0, STRIPE - k->n_tail);
    stripe (k, k->tail);
  }
  a = avalanche (k->lane[0] ^ rotl (k->lane[1], 7) ^ rotl (k->lane[2], 12) ^ rotl (k->lane[3], 18)
                 ^ t);
  b = avalanche (lane_round (lane_round (lane_round (k->lane[3] ^ t, k->lane[2]), k->lane[1]),
                             k->lane[0]));
  g_free (k);
  return g_strdup_printf ("%016" G_GINT64_MODIFIER "x%016" G_GINT64_MODIFIER "x", a, b);
}

void
dfl_arena_key_free (DflArenaKey *key)
{
  g_free (key);
}

/* --- the file --- */

typedef struct {
  char magic[8];
  guint32 version, header_bytes;
  guint64 arena_bytes;
  char key[40];
} Header;

static char *
file_of (const char *dir, const char *key)
{
  g_autofree char *name = g_strconcat (key, ".arena", NULL);

  return g_build_filename (dir, name, NULL);
}

DflWeightArena *
dfl_arena_cache_load (const char *dir, const char *key, gsize bytes)
{
  g_autofree char *path = file_of (dir, key);
  DflWeightArena *arena = NULL;
  Header h;
  GStatBuf st;
  int fd = g_open (path, O_RDONLY | O_CLOEXEC, 0);

  if (fd < 0)
    return NULL;
  if (fstat (fd, &st) == 0 && (guint64) st.st_size == HEADER_BYTES + (guint64) bytes
      && read (fd, &h, sizeof h) == (ssize_t) sizeof h && !memcmp (h.magic, MAGIC, 8)
      && h.version == VERSION && h.header_bytes == HEADER_BYTES && h.arena_bytes == bytes
      && !strncmp (h.key, key, sizeof h.key))
    arena = dfl_weight_arena_map_file (fd, HEADER_BYTES, bytes, NULL);
  /* the mapping holds the file */
  close (fd);
  return arena;
}

static gboolean
write_all (int fd, const guint8 *p, gsize n)
{
  while (n > 0) {
    ssize_t w = write (fd, p, MIN (n, (gsize) 1 << 30));
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return FALSE;
    p += w;
    n -= (gsize) w;
  }
  return TRUE;
}

typedef struct {
  char *path;
  gint64 mtime;
} Kept;

static gint
newest_first (gconstpointer a, gconstpointer b)
{
  gint64 ta = ((const Kept *) a)->mtime, tb = ((const Kept *) b)->mtime;

  return ta < tb ? 1 : ta > tb ? -1 : 0;
}

/* The folder keeps the DFL_ARENA_CACHE_KEPT arenas written last, `kept_path`
 * (the one just written) always among them: each build or model makes its
 * own, and nothing else would ever remove them. (Files written within one
 * tick of the clock share a time: the order among them is any.) */
static void
drop_oldest (const char *dir, const char *kept_path)
{
  g_autoptr (GDir) d = g_dir_open (dir, 0, NULL);
  g_autoptr (GArray) others = g_array_new (FALSE, FALSE, sizeof (Kept));
  const char *name;

  if (!d)
    return;
  while ((name = g_dir_read_name (d))) {
    GStatBuf st;
    Kept k;
    if (!g_str_has_suffix (name, ".arena"))
      continue;
    k.path = g_build_filename (dir, name, NULL);
    if (!strcmp (k.path, kept_path)) {
      g_free (k.path);
      continue;
    }
    if (g_stat (k.path, &st) != 0) {
      g_free (k.path);
      continue;
    }
    k.mtime = (gint64) st.st_mtim.tv_sec * G_GINT64_CONSTANT (1000000000) + st.st_mtim.tv_nsec;
    g_array_append_val (others, k);
  }
  g_array_sort (others, newest_first);
  for (guint i = 0; i < others->len; i++) {
    Kept *k = &g_array_index (others, Kept, i);
    if (i + 1 >= DFL_ARENA_CACHE_KEPT)
      g_unlink (k->path);
    g_free (k->path);
  }
}

gboolean
dfl_arena_cache_save (const char *dir, const char *key, const DflWeightArena *arena,
                      GError **error)
{
  g_autofree char *path = file_of (dir, key);
  g_autofree char *tmp = g_strconcat (path, ".XXXXXX", NULL);
  guint8 header[HEADER_BYTES] = { 0 };
  Header h = { .version = VERSION, .header_bytes = HEADER_BYTES };
  gsize bytes;
  gconstpointer data = dfl_weight_arena_bytes (arena, &bytes);
  gboolean ok;
  int fd, e;

  if (g_mkdir_with_parents (dir, 0700) != 0) {
    e = errno;
    g_set_error (error, DFL_ERROR, DFL_ERROR_IO, "%s: cannot make the folder: %s", dir,
                 g_strerror (e));
    return FALSE;
  }
  if ((fd = g_mkstemp (tmp)) < 0) {
    e = errno;
    g_set_error (error, DFL_ERROR, DFL_ERROR_IO, "%s: cannot write a file there: %s", dir,
                 g_strerror (e));
    return FALSE;
  }
  memcpy (h.magic, MAGIC, 8);
  h.arena_bytes = bytes;
  g_strlcpy (h.key, key, sizeof h.key);
  memcpy (header, &h, sizeof h);
  ok = write_all (fd, header, sizeof header) && write_all (fd, data, bytes);
  e = errno;
  ok = close (fd) == 0 && ok;
  if (ok && g_rename (tmp, path) == 0) {
    drop_oldest (dir, path);
    return TRUE;
  }
  e = ok ? errno : e;
  g_unlink (tmp);
  g_set_error (error, DFL_ERROR, DFL_ERROR_IO, "%s: cannot write it: %s", path, g_strerror (e));
  return FALSE;
}
