/* Fuzz target: tokenizer.json, and text through the tokenizer it makes.
 *
 * The input, cut at its first NUL, is a tokenizer.json and a text (a fixed
 * mixed-script text where there is none). A tokenizer that loads encodes the
 * text, decodes the ids back (whole and streamed, ids out of range too) and
 * gives every token's bytes.
 */
#include "fuzz-common.h"
#include "dfl-error.h"
#include "tokenizer.h"

static const char default_text[] =
  "Hello, world! It's 2024 — naïve café 東京 😀\n\tcode: x += 1;  <|im_end|>";

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  gsize lens[2] = { 0 };
  g_auto (GStrv) parts = fuzz_split (data, size, 2, lens);
  g_autofree char *json = fuzz_copy (parts[0], lens[0]);
  const char *text = parts[1] ? parts[1] : default_text;
  g_autoptr (DflTokenizer) tok = NULL;
  g_autoptr (GError) error = NULL;
  g_autoptr (GArray) ids = NULL;
  guint vocab;

  tok = dfl_tokenizer_parse (json, lens[0], "tokenizer.json", &error);
  g_assert ((tok == NULL) == (error != NULL));
  if (!tok) {
    g_assert (error->domain == DFL_ERROR && error->message && *error->message);
    return 0;
  }
  vocab = dfl_tokenizer_vocab_size (tok);
  for (guint id = 0; id < vocab && id < 4096; id++) {
    gsize len = 0;
    const char *b = dfl_tokenizer_token_bytes (tok, id, &len);

    g_assert (!b || b[len] == '\0');
  }
  ids = dfl_tokenizer_encode (tok, text, -1, &error);
  g_assert ((ids == NULL) == (error != NULL));
  if (ids) {
    g_autoptr (DflDetokenizer) d = dfl_detokenizer_new (tok, FALSE);
    g_autoptr (GString) streamed = g_string_new (NULL);
    g_autofree char *whole = NULL, *rest = NULL;
    gsize whole_len = 0, len = 0;

    for (guint i = 0; i < ids->len; i++) {
      int id = g_array_index (ids, int, i);

      g_assert (id >= 0 && (guint) id < vocab);
    }
    /* ids the tokenizer does not have are skipped, not read */
    g_array_append_vals (ids, (int[]) { -1, (int) vocab, G_MAXINT }, 3);
    whole = dfl_tokenizer_decode_len (tok, (const int *) ids->data, ids->len, FALSE, &whole_len);
    for (guint i = 0; i < ids->len; i++) {
      g_autofree char *piece = dfl_detokenizer_push_len (d, g_array_index (ids, int, i), &len);

      g_string_append_len (streamed, piece, len);
    }
    rest = dfl_detokenizer_finish_len (d, &len);
    g_string_append_len (streamed, rest, len);
    g_assert (g_utf8_validate_len (whole, whole_len, NULL));
    /* streaming gives the same text as decoding at once */
    g_assert (streamed->len == whole_len && memcmp (streamed->str, whole, whole_len) == 0);
    g_free (dfl_tokenizer_decode (tok, (const int *) ids->data, ids->len, TRUE));
  } else {
    g_assert (!g_utf8_validate (text, -1, NULL));
  }
  return 0;
}
