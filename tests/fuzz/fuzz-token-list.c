/* Fuzz target: the token-list argument (`--tokens`, tapsource's tokens).
 *
 * The input is the argument's text (up to its first NUL, as argv and a
 * property give it); it is parsed without a vocabulary and against one of
 * 1000 ids, and what parses must hold exactly the ids written.
 */
#include "fuzz-common.h"
#include "dfl-error.h"
#include "token-list.h"

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  g_autofree char *text = g_strndup ((const char *) data, size);
  g_autoptr (GArray) any = g_array_new (FALSE, FALSE, sizeof (int));
  g_autoptr (GArray) in_vocab = g_array_new (FALSE, FALSE, sizeof (int));
  g_autoptr (GError) e1 = NULL, e2 = NULL;
  gboolean ok_any, ok_vocab;

  ok_any = dfl_token_list_parse (text, "--tokens", 0, NULL, any, &e1);
  ok_vocab = dfl_token_list_parse (text, "tapsource: tokens", 1000, "model", in_vocab, &e2);
  g_assert (ok_any == (e1 == NULL) && ok_vocab == (e2 == NULL));
  g_assert (!e1 || (e1->domain == DFL_ERROR && g_str_has_prefix (e1->message, "--tokens: ")));
  g_assert (!e2 || g_str_has_prefix (e2->message, "tapsource: tokens: "));
  /* messages quote user text escaped: always valid UTF-8 */
  g_assert (!e1 || g_utf8_validate (e1->message, -1, NULL));
  g_assert (!e2 || g_utf8_validate (e2->message, -1, NULL));
  if (ok_any) {
    /* the ids written: as many as commas + 1, and the same text back */
    g_autoptr (GString) back = g_string_new (NULL);
    guint commas = 0;

    g_assert (any->len > 0);
    for (const char *p = text; *p; p++)
      commas += *p == ',';
    g_assert (any->len == commas + 1);
    for (guint i = 0; i < any->len; i++)
      g_string_append_printf (back, "%s%d", i ? "," : "", g_array_index (any, int, i));
    {
      g_autoptr (GArray) again = g_array_new (FALSE, FALSE, sizeof (int));

      g_assert (dfl_token_list_parse (back->str, "--tokens", 0, NULL, again, NULL));
      g_assert (again->len == any->len
                && memcmp (again->data, any->data, any->len * sizeof (int)) == 0);
    }
  }
  /* in the vocabulary: parses exactly when every id is in 0 … 999 */
  if (ok_vocab) {
    g_assert (ok_any && in_vocab->len == any->len);
    for (guint i = 0; i < in_vocab->len; i++)
      g_assert (g_array_index (in_vocab, int, i) >= 0 && g_array_index (in_vocab, int, i) < 1000);
  } else if (ok_any) {
    gboolean outside = FALSE;

    for (guint i = 0; i < any->len; i++)
      outside |= g_array_index (any, int, i) < 0 || g_array_index (any, int, i) >= 1000;
    g_assert (outside);
  }
  return 0;
}
