/* gst-dflash — a list of token ids as a user writes it. */
#include <errno.h>
#include <string.h>

#include "dfl-error.h"
#include "token-list.h"

#define DFL_TOKEN_LIST_QUOTE 40

/* An entry as a message quotes it: cut to a line's worth, and bytes that are
 * not printable ASCII escaped (argv need not be UTF-8). */
static char *
quote_entry (const char *s, gsize len)
{
  g_autofree char *cut = g_strndup (s, MIN (len, DFL_TOKEN_LIST_QUOTE));
  g_autofree char *esc = g_strescape (cut, NULL);

  return len > DFL_TOKEN_LIST_QUOTE ? g_strconcat (esc, "...", NULL) : g_steal_pointer (&esc);
}

gboolean
dfl_token_list_parse (const char *text, const char *what, int vocab,
                      const char *vocab_origin, GArray *ids, GError **error)
{
  const char *p = text;
  guint n = 0;

  g_return_val_if_fail (text != NULL && what != NULL && ids != NULL, FALSE);

  for (;;) {
    const char *comma = strchr (p, ',');
    const char *stop = comma ? comma : p + strlen (p);
    const char *s = p, *e = stop;
    char buf[32];
    char *end = NULL;
    gint64 v;

    /* one entry at a time, in place: a list of millions is not split into
     * millions of strings first */
    while (s < e && g_ascii_isspace (*s))
      s++;
    while (e > s && g_ascii_isspace (e[-1]))
      e--;
    if (s == e) {
      if (!comma && n == 0)
        g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                     "%s: the list is empty (expected token ids separated by commas, "
                     "such as '151644,872,198')", what);
      else
        g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                     "%s: entry %u is empty (expected token ids separated by commas, "
                     "such as '151644,872,198')", what, n + 1);
      return FALSE;
    }
    if (n >= DFL_TOKEN_LIST_MAX) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                   "%s: the list has more than %d ids, the most accepted", what,
                   DFL_TOKEN_LIST_MAX);
      return FALSE;
    }
    v = -1;
    if ((gsize) (e - s) < sizeof buf) {
      memcpy (buf, s, e - s);
      buf[e - s] = '\0';
      errno = 0;
      v = g_ascii_strtoll (buf, &end, 10);
      if (*end || errno || v < G_MININT || v > G_MAXINT)
        end = NULL;
    }
    if (!end) {
      g_autofree char *q = quote_entry (s, e - s);
      g_autofree char *accepted = vocab > 0
          ? g_strdup_printf ("a token id from 0 to %d", vocab - 1)
          : g_strdup ("a decimal integer");

      g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                   "%s: entry %u, '%s', is not a token id (expected %s)", what, n + 1, q,
                   accepted);
      return FALSE;
    }
    if (vocab > 0 && (v < 0 || v >= vocab)) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                   "%s: token id %" G_GINT64_FORMAT " (entry %u) is not in the vocabulary of %s "
                   "(0 … %d)", what, v, n + 1, vocab_origin ? vocab_origin : "the model",
                   vocab - 1);
      return FALSE;
    }
    g_array_append_val (ids, (int) { (int) v });
    n++;
    if (!comma)
      return TRUE;
    p = comma + 1;
  }
}
