/* gst-dflash — the tokenizer a .gguf file carries (tokenizer.ggml.*), as
 * the tokenizer.json it was made from.
 *
 * llama.cpp's converter writes a Hugging Face byte-level BPE tokenizer as
 * model "gpt2" with a "pre" naming its pre-tokenizer; Qwen2's and Qwen3's is
 * "qwen2": NFC, a Split on Qwen2's regex, ByteLevel. The tokens (each id's
 * byte-level string), their types (NORMAL 1, CONTROL 3: a special added
 * token, USER_DEFINED 4: a plain added token, UNUSED 5: an id the
 * tokenizer never gives) and the merges are what tokenizer.json's model
 * and added_tokens held, so the file's tokenizer is rebuilt as that JSON
 * and read by the one tokenizer.json reader (tokenizer.c).
 */
#include "tokenizer.h"

#include <cJSON.h>
#include <string.h>

#include "dfl-error.h"
#include "gguf.h"

#define TOKEN_NORMAL 1
#define TOKEN_UNKNOWN 2
#define TOKEN_CONTROL 3
#define TOKEN_USER_DEFINED 4
#define TOKEN_UNUSED 5
#define TOKEN_BYTE 6

/* tokenizer.json's pre_tokenizer of Qwen2 and Qwen3 */
#define QWEN2_REGEX \
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*" \
  "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

static cJSON *
qwen2_pre_tokenizer (void)
{
  cJSON *seq = cJSON_CreateObject (), *list, *split, *pattern, *bl;

  cJSON_AddStringToObject (seq, "type", "Sequence");
  list = cJSON_AddArrayToObject (seq, "pretokenizers");
  split = cJSON_CreateObject ();
  cJSON_AddStringToObject (split, "type", "Split");
  pattern = cJSON_AddObjectToObject (split, "pattern");
  cJSON_AddStringToObject (pattern, "Regex", QWEN2_REGEX);
  cJSON_AddStringToObject (split, "behavior", "Isolated");
  cJSON_AddBoolToObject (split, "invert", FALSE);
  cJSON_AddItemToArray (list, split);
  bl = cJSON_CreateObject ();
  cJSON_AddStringToObject (bl, "type", "ByteLevel");
  cJSON_AddBoolToObject (bl, "add_prefix_space", FALSE);
  cJSON_AddBoolToObject (bl, "trim_offsets", TRUE);
  cJSON_AddBoolToObject (bl, "use_regex", FALSE);
  cJSON_AddItemToArray (list, bl);
  return seq;
}

/* tokenizer.ggml.* as tokenizer.json; FALSE with an error naming the key. */
static gboolean
to_tokenizer_json (cJSON *root, const DflGguf *g, GError **error)
{
  const char *path = dfl_gguf_path (g), *model = NULL, *pre = NULL;
  const DflGgufValue *tokens, *types, *merges;
  cJSON *m, *vocab, *list, *added, *decoder;
  /* the tokens seen, for the duplicate check: a cJSON object's lookup walks
   * its members, which over a vocabulary of 151,936 (Qwen3's) would be
   * 10^10 string comparisons */
  g_autoptr (GHashTable) seen = g_hash_table_new (g_str_hash, g_str_equal);

  if (!dfl_gguf_get_string (g, "tokenizer.ggml.model", FALSE, &model, error)
      || !dfl_gguf_get_string (g, "tokenizer.ggml.pre", FALSE, &pre, error))
    return FALSE;
  if (strcmp (model, "gpt2") != 0) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                 "%s: tokenizer.ggml.model is '%s'; the tokenizer read is byte-level BPE "
                 "('gpt2')", path, model);
    return FALSE;
  }
  if (strcmp (pre, "qwen2") != 0) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                 "%s: tokenizer.ggml.pre is '%s'; the pre-tokenizer run is Qwen2's ('qwen2')",
                 path, pre);
    return FALSE;
  }
  if (!(tokens = dfl_gguf_get_array (g, "tokenizer.ggml.tokens", DFL_GGUF_STRING, error))
      || !(types = dfl_gguf_get_array (g, "tokenizer.ggml.token_type", DFL_GGUF_INT32, error))
      || !(merges = dfl_gguf_get_array (g, "tokenizer.ggml.merges", DFL_GGUF_STRING, error)))
    return FALSE;
  if (types->n != tokens->n) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: tokenizer.ggml.token_type has %" G_GUINT64_FORMAT " entries for %"
                 G_GUINT64_FORMAT " tokens", path, types->n, tokens->n);
    return FALSE;
  }
  if (tokens->n > G_MAXINT) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT, "%s: tokenizer.ggml.tokens has %"
                 G_GUINT64_FORMAT " tokens", path, tokens->n);
    return FALSE;
  }

  cJSON_AddStringToObject (root, "version", "1.0");
  added = cJSON_AddArrayToObject (root, "added_tokens");
  m = cJSON_AddObjectToObject (root, "model");
  cJSON_AddStringToObject (m, "type", "BPE");
  vocab = cJSON_AddObjectToObject (m, "vocab");
  for (guint64 i = 0; i < tokens->n; i++) {
    gint64 type = dfl_gguf_array_int (types, i);

    switch (type) {
      case TOKEN_UNUSED:
        continue;
      case TOKEN_NORMAL:
        break;
      case TOKEN_CONTROL:
      case TOKEN_USER_DEFINED: {
        cJSON *a = cJSON_CreateObject ();

        cJSON_AddNumberToObject (a, "id", (double) i);
        cJSON_AddStringToObject (a, "content", tokens->strs[i]);
        cJSON_AddBoolToObject (a, "special", type == TOKEN_CONTROL);
        cJSON_AddBoolToObject (a, "normalized", type != TOKEN_CONTROL);
        cJSON_AddItemToArray (added, a);
        break;
      }
      default:
        g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                     "%s: tokenizer.ggml.token_type of token %" G_GUINT64_FORMAT " ('%s') is %"
                     G_GINT64_FORMAT "%s; a byte-level BPE has NORMAL (1), CONTROL (3), "
                     "USER_DEFINED (4) and UNUSED (5) tokens", path, i, tokens->strs[i], type,
                     type == TOKEN_UNKNOWN ? " (UNKNOWN)" : type == TOKEN_BYTE ? " (BYTE)" : "");
        return FALSE;
    }
    if (!g_hash_table_add (seen, (gpointer) tokens->strs[i])) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: tokenizer.ggml.tokens holds '%s' twice (token %" G_GUINT64_FORMAT ")",
                   path, tokens->strs[i], i);
      return FALSE;
    }
    cJSON_AddNumberToObject (vocab, tokens->strs[i], (double) i);
  }
  list = cJSON_AddArrayToObject (m, "merges");
  for (guint64 i = 0; i < merges->n; i++)
    cJSON_AddItemToArray (list, cJSON_CreateString (merges->strs[i]));
  cJSON_AddItemToObject (root, "pre_tokenizer", qwen2_pre_tokenizer ());
  cJSON_AddItemToObject (cJSON_AddObjectToObject (root, "normalizer"), "type",
                         cJSON_CreateString ("NFC"));
  decoder = cJSON_AddObjectToObject (root, "decoder");
  cJSON_AddStringToObject (decoder, "type", "ByteLevel");
  return TRUE;
}

static DflTokenizer *
dfl_tokenizer_from_gguf (const DflGguf *g, GError **error)
{
  cJSON *root = cJSON_CreateObject ();
  g_autofree char *text = NULL, *origin = NULL;
  DflTokenizer *tok = NULL;

  g_return_val_if_fail (g != NULL, NULL);
  if (to_tokenizer_json (root, g, error)) {
    text = cJSON_PrintUnformatted (root);
    origin = g_strdup_printf ("%s (its tokenizer.ggml metadata)", dfl_gguf_path (g));
    tok = dfl_tokenizer_parse (text, strlen (text), origin, error);
  }
  cJSON_Delete (root);
  return tok;
}

DflTokenizer *
dfl_tokenizer_load_gguf (const char *path, GError **error)
{
  g_autoptr (DflGguf) g = dfl_gguf_open (path, error);

  return g ? dfl_tokenizer_from_gguf (g, error) : NULL;
}

DflTokenizer *
dfl_tokenizer_load_checkpoint (const char *path, gboolean *present, GError **error)
{
  g_autofree char *json = NULL;

  g_return_val_if_fail (path != NULL && present != NULL, NULL);
  if (dfl_gguf_is_gguf (path)) {
    g_autoptr (DflGguf) g = dfl_gguf_open (path, error);

    if (!g)
      return NULL;
    *present = dfl_gguf_find_value (g, "tokenizer.ggml.model") != NULL;
    return *present ? dfl_tokenizer_from_gguf (g, error) : NULL;
  }
  json = g_build_filename (path, "tokenizer.json", NULL);
  *present = g_file_test (json, G_FILE_TEST_EXISTS);
  return *present ? dfl_tokenizer_load (json, error) : NULL;
}
