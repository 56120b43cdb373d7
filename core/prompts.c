/* gst-dflash — a file of prompts, one a line. */
#include "prompts.h"

#include "dfl-error.h"

GPtrArray *
dfl_read_prompts (const char *path, GError **error)
{
  g_autofree char *text = NULL;
  g_auto (GStrv) lines = NULL;
  g_autoptr (GPtrArray) prompts = NULL;

  if (!g_file_get_contents (path, &text, NULL, error))
    return NULL;
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
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID, "%s: no prompts (one a line)", path);
    return NULL;
  }
  return g_steal_pointer (&prompts);
}
