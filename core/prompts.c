/* gst-dflash — a file of prompts, one a line. */
#include "prompts.h"

#include <errno.h>
#include <glib/gstdio.h>

#include "dfl-error.h"

/* Prompt files are a few KiB to a few MiB; past this it is not one (and
 * /dev/zero would never end). */
#define DFL_PROMPTS_MAX_FILE (64u * 1024u * 1024u)

GPtrArray *
dfl_read_prompts (const char *path, GError **error)
{
  g_autofree char *text = NULL;
  g_auto (GStrv) lines = NULL;
  g_autoptr (GPtrArray) prompts = NULL;
  g_autoptr (GError) read_error = NULL;
  GStatBuf sb;

  if (g_stat (path, &sb) != 0) {
    int errsv = errno;

    g_set_error (error, DFL_ERROR, DFL_ERROR_IO, "%s: cannot open: %s", path, g_strerror (errsv));
    return NULL;
  }
  if (!S_ISREG (sb.st_mode)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_IO,
                 "%s: not a regular file (expected a text file of prompts, one a line)", path);
    return NULL;
  }
  if ((guint64) sb.st_size > DFL_PROMPTS_MAX_FILE) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT,
                 "%s: file is %" G_GUINT64_FORMAT " bytes; a prompts file may be at most %u",
                 path, (guint64) sb.st_size, DFL_PROMPTS_MAX_FILE);
    return NULL;
  }
  if (!g_file_get_contents (path, &text, NULL, &read_error)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_IO, "%s: cannot read: %s", path,
                 read_error->message);
    return NULL;
  }
  prompts = g_ptr_array_new_with_free_func (g_free);
  lines = g_strsplit (text, "\n", -1);
  for (int i = 0; lines[i]; i++) {
    GString *p = g_string_new (NULL);
    for (const char *c = lines[i]; *c; c++) {
      if (*c == '\\' && (c[1] == 'n' || c[1] == 't' || c[1] == '\\')) {
        g_string_append_c (p, c[1] == 'n' ? '\n' : c[1] == 't' ? '\t' : '\\');
        c++;
      } else if (*c != '\r') {
        g_string_append_c (p, *c);
      }
    }
    if (p->len)
      g_ptr_array_add (prompts, g_string_free (p, FALSE));
    else
      g_string_free (p, TRUE);
  }
  if (prompts->len == 0) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID, "%s: no prompts: every line is empty (expected one prompt a line)", path);
    return NULL;
  }
  return g_steal_pointer (&prompts);
}
