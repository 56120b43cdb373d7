/* gst-dflash — a command line front end to the tokenizer, for the parity
 * test (parity.py) and for looking at what a tokenizer.json does.
 *
 *   tok-tool encode TOKENIZER.json FILE [--whole] [--hex]
 *     Encodes each line of FILE (split on \n only, so \r and the other
 *     separators stay inside lines; a final empty line is not a line), or
 *     the whole file as one text with --whole; with --hex each line holds
 *     the text as hex of its bytes (so texts can hold \n). Prints one record
 *     per text:
 *       ids <TAB> decode <TAB> decode(skip_special) <TAB> stream <TAB> stream(skip_special)
 *     ids space-separated, texts as lowercase hex of their UTF-8 so that any
 *     character survives the trip. A text the tokenizer refuses gives
 *       ERROR <TAB> message
 *   tok-tool decode TOKENIZER.json FILE
 *     Each line of FILE holds space-separated ids; prints
 *       decode <TAB> decode(skip_special) <TAB> stream <TAB> stream(skip_special)
 *   tok-tool pretok TOKENIZER.json FILE [--whole] [--hex]
 *     Prints each text's pre-tokens, hex, space-separated.
 *
 * "stream" is the concatenation of DflDetokenizer's pushes and finish; the
 * tool exits with status 3 if a push ever returns text that is not whole
 * UTF-8 characters. Timings go to stderr.
 */
#include "tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static gboolean bad_chunk = FALSE;

static void
put_hex (GString *out, const char *s, gsize len)
{
  static const char digits[] = "0123456789abcdef";
  gsize i;

  for (i = 0; i < len; i++) {
    g_string_append_c (out, digits[(guint8) s[i] >> 4]);
    g_string_append_c (out, digits[(guint8) s[i] & 15]);
  }
}

static gboolean
valid_utf8 (const char *s, gsize len)
{
  const char *end = s + len;

  while (s < end) {
    const char *nul = memchr (s, '\0', end - s);
    gsize n = nul ? (gsize) (nul - s) : (gsize) (end - s);

    if (!g_utf8_validate_len (s, n, NULL))
      return FALSE;
    s += n + (nul != NULL);
  }
  return TRUE;
}

static char *
stream_decode (const DflTokenizer *tok, const int *ids, gsize n, gboolean skip, gsize *all_len)
{
  g_autoptr (DflDetokenizer) d = dfl_detokenizer_new (tok, skip);
  GString *all = g_string_new (NULL);
  char *chunk;
  gsize i, len;

  for (i = 0; i < n; i++) {
    chunk = dfl_detokenizer_push_len (d, ids[i], &len);
    /* g_utf8_validate_len() would refuse a NUL: whole characters are what
     * matters here, so check the pieces between NULs. */
    if (!valid_utf8 (chunk, len)) {
      g_printerr ("tok-tool: push of id %d returned invalid UTF-8\n", ids[i]);
      bad_chunk = TRUE;
    }
    g_string_append_len (all, chunk, len);
    g_free (chunk);
  }
  chunk = dfl_detokenizer_finish_len (d, &len);
  g_string_append_len (all, chunk, len);
  g_free (chunk);
  *all_len = all->len;
  return g_string_free (all, FALSE);
}

static void
put_texts (GString *out, const DflTokenizer *tok, const int *ids, gsize n)
{
  gboolean skip;

  gsize len;

  for (skip = FALSE; skip <= TRUE; skip++) {
    g_autofree char *text = dfl_tokenizer_decode_len (tok, ids, n, skip, &len);

    if (skip)
      g_string_append_c (out, '\t');
    put_hex (out, text, len);
  }
  for (skip = FALSE; skip <= TRUE; skip++) {
    g_autofree char *text = stream_decode (tok, ids, n, skip, &len);

    g_string_append_c (out, '\t');
    put_hex (out, text, len);
  }
  g_string_append_c (out, '\n');
}

static void
encode_one (GString *out, const DflTokenizer *tok, const char *text, gsize len)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (GArray) ids = dfl_tokenizer_encode (tok, text, len, &error);
  guint i;

  if (ids == NULL) {
    g_string_append_printf (out, "ERROR\t%s\n", error->message);
    return;
  }
  for (i = 0; i < ids->len; i++)
    g_string_append_printf (out, i ? " %d" : "%d", g_array_index (ids, int, i));
  g_string_append_c (out, '\t');
  put_texts (out, tok, (const int *) ids->data, ids->len);
}

static void
pretok_one (GString *out, const DflTokenizer *tok, const char *text, gsize len)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (GPtrArray) pieces = dfl_tokenizer_pre_tokenize (tok, text, len, &error);
  guint i;

  if (pieces == NULL) {
    g_string_append_printf (out, "ERROR\t%s\n", error->message);
    return;
  }
  for (i = 0; i < pieces->len; i++) {
    gsize n;
    const char *p = g_bytes_get_data (g_ptr_array_index (pieces, i), &n);

    if (i)
      g_string_append_c (out, ' ');
    put_hex (out, p, n);
  }
  g_string_append_c (out, '\n');
}

static void
decode_one (GString *out, const DflTokenizer *tok, const char *text, gsize len)
{
  g_autofree char *line = g_strndup (text, len);
  g_auto (GStrv) fields = g_strsplit_set (line, " \t", -1);
  g_autoptr (GArray) ids = g_array_new (FALSE, FALSE, sizeof (int));
  guint i;

  for (i = 0; fields[i]; i++) {
    int id;

    if (fields[i][0] == '\0')
      continue;
    id = atoi (fields[i]);
    g_array_append_val (ids, id);
  }
  put_texts (out, tok, (const int *) ids->data, ids->len);
}

/* Hex back to bytes; NULL for a line that is not hex. */
static GBytes *
unhex (const char *s, gsize len)
{
  GByteArray *b;
  gsize i;

  if (len % 2)
    return NULL;
  b = g_byte_array_sized_new (len / 2);
  for (i = 0; i < len; i += 2) {
    int hi = g_ascii_xdigit_value (s[i]), lo = g_ascii_xdigit_value (s[i + 1]);
    guint8 v = (guint8) (hi * 16 + lo);

    if (hi < 0 || lo < 0) {
      g_byte_array_unref (b);
      return NULL;
    }
    g_byte_array_append (b, &v, 1);
  }
  return g_byte_array_free_to_bytes (b);
}

typedef void (*TextFunc) (GString *out, const DflTokenizer *tok, const char *text, gsize len);

int
main (int argc, char **argv)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (DflTokenizer) tok = NULL;
  g_autofree char *data = NULL;
  GString *out;
  gsize len, start = 0, texts = 0, bytes = 0;
  gboolean whole = FALSE, hex = FALSE;
  TextFunc func;
  gint64 t0, t1;
  int i;

  if (argc < 4)
    goto usage;
  if (strcmp (argv[1], "encode") == 0)
    func = encode_one;
  else if (strcmp (argv[1], "decode") == 0)
    func = decode_one;
  else if (strcmp (argv[1], "pretok") == 0)
    func = pretok_one;
  else
    goto usage;
  for (i = 4; i < argc; i++) {
    if (strcmp (argv[i], "--whole") == 0)
      whole = TRUE;
    else if (strcmp (argv[i], "--hex") == 0)
      hex = TRUE;
    else
      goto usage;
  }

  t0 = g_get_monotonic_time ();
  tok = dfl_tokenizer_load (argv[2], &error);
  if (tok == NULL) {
    g_printerr ("tok-tool: %s\n", error->message);
    return 1;
  }
  t1 = g_get_monotonic_time ();
  g_printerr ("tok-tool: loaded %s (%u ids) in %.1f ms\n", argv[2],
              dfl_tokenizer_vocab_size (tok), (t1 - t0) / 1000.0);
  if (!g_file_get_contents (argv[3], &data, &len, &error)) {
    g_printerr ("tok-tool: %s\n", error->message);
    return 1;
  }

  out = g_string_new (NULL);
  t0 = g_get_monotonic_time ();
  while (start < len || (whole && texts == 0)) {
    const char *nl = whole ? NULL : memchr (data + start, '\n', len - start);
    gsize end = nl ? (gsize) (nl - data) : len;

    if (hex) {
      g_autoptr (GBytes) b = unhex (data + start, end - start);
      gsize n;
      const char *p;

      if (b == NULL) {
        g_printerr ("tok-tool: %s: text %zu is not hex\n", argv[3], texts + 1);
        return 2;
      }
      p = g_bytes_get_data (b, &n);
      func (out, tok, p ? p : "", n);
      bytes += n;
    } else {
      func (out, tok, data + start, end - start);
      bytes += end - start;
    }
    texts++;
    start = end + 1;
  }
  t1 = g_get_monotonic_time ();
  g_printerr ("tok-tool: %s: %zu texts (%zu bytes) in %.1f ms\n", argv[1], texts, bytes,
              (t1 - t0) / 1000.0);
  fwrite (out->str, 1, out->len, stdout);
  g_string_free (out, TRUE);
  return bad_chunk ? 3 : 0;

usage:
  g_printerr ("usage: %s encode TOKENIZER.json FILE [--whole] [--hex]\n"
              "       %s decode TOKENIZER.json IDS-FILE\n"
              "       %s pretok TOKENIZER.json FILE [--whole] [--hex]\n",
              argv[0], argv[0], argv[0]);
  return 2;
}
