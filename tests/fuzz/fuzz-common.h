/* gst-dflash — what the fuzz targets share: a private scratch folder for the
 * files a reader must open by name, and cutting an input into parts.
 *
 * Each target is a libFuzzer entry point (LLVMFuzzerTestOneInput); the
 * readers it drives must return (an error or a result) on any input, never
 * crash, leak, or read outside what they were given.
 */
#pragma once

#include <glib.h>
#include <glib/gstdio.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

static char *fuzz_dir;

static inline void
fuzz_remove_dir (void)
{
  GDir *d = g_dir_open (fuzz_dir, 0, NULL);
  const char *name;

  while (d && (name = g_dir_read_name (d))) {
    g_autofree char *p = g_build_filename (fuzz_dir, name, NULL);
    g_unlink (p);
  }
  if (d)
    g_dir_close (d);
  g_rmdir (fuzz_dir);
}

/* The scratch folder, made on first use and removed at exit. */
static inline const char *
fuzz_scratch (void)
{
  if (!fuzz_dir) {
    GError *error = NULL;

    if (!(fuzz_dir = g_dir_make_tmp ("dfl-fuzz-XXXXXX", &error)))
      g_error ("fuzz: no scratch folder: %s", error->message);
    atexit (fuzz_remove_dir);
  }
  return fuzz_dir;
}

/* Write `len` bytes to `name` in the scratch folder; returns its path. */
static inline char *
fuzz_write (const char *name, const void *data, size_t len)
{
  char *path = g_build_filename (fuzz_scratch (), name, NULL);
  FILE *f = fopen (path, "wb");

  if (!f || (len && fwrite (data, 1, len, f) != len) || fclose (f) != 0)
    g_error ("fuzz: cannot write %s", path);
  return path;
}

/* An exact copy of `len` bytes (never NULL, even for none): a read past
 * `len` is then a finding rather than the fuzzer's slack. */
static inline char *
fuzz_copy (const void *data, size_t len)
{
  char *copy = g_malloc (len ? len : 1);

  memcpy (copy, data, len);
  return copy;
}

/* The input cut at NUL bytes into at most `max` parts, each NUL-terminated
 * (g_strfreev it); the last part keeps any further NULs' bytes out. */
static inline char **
fuzz_split (const uint8_t *data, size_t size, int max, gsize *lens)
{
  char **parts = g_new0 (char *, max + 1);
  size_t at = 0;

  for (int i = 0; i < max && at <= size; i++) {
    const uint8_t *nul = i < max - 1 ? memchr (data + at, 0, size - at) : NULL;
    size_t end = nul ? (size_t) (nul - data) : size;

    parts[i] = g_strndup ((const char *) data + at, end - at);
    lens[i] = strlen (parts[i]);
    if (!nul)
      break;
    at = end + 1;
  }
  return parts;
}
