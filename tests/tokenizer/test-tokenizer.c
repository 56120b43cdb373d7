/* gst-dflash — tokenizer unit and bad-input tests (GTest, TAP).
 *
 * The fixture tokenizer is tests/fixtures/tokenizer/tokenizer.json (found
 * through $DFL_FIXTURES); the bad files are small JSON texts built here.
 * Parity with Hugging Face on real text is parity.py's job.
 */
#include "tokenizer.h"
#include "dfl-error.h"
#include "test-support.h"

#include <string.h>

static DflTokenizer *fixture;

static DflTokenizer *
load_fixture (void)
{
  g_autoptr (GError) error = NULL;
  g_autofree char *path = NULL;
  const char *dir = g_getenv ("DFL_FIXTURES");

  if (dir == NULL)
    dir = DFL_FIXTURES_DIR;
  path = g_build_filename (dir, "tokenizer", "tokenizer.json", NULL);
  fixture = dfl_tokenizer_load (path, &error);
  g_assert_no_error (error);
  g_assert_nonnull (fixture);
  return fixture;
}

/* The id of the byte-level symbol that stands for one byte. */
static int
byte_token (const DflTokenizer *tok, guint8 byte)
{
  int id;

  for (id = 0; id < (int) dfl_tokenizer_vocab_size (tok); id++) {
    gsize len;
    const char *b = dfl_tokenizer_token_bytes (tok, id, &len);

    if (b && len == 1 && (guint8) b[0] == byte && !dfl_tokenizer_is_special (tok, id))
      return id;
  }
  g_assert_not_reached ();
  return -1;
}

static char *
stream (const DflTokenizer *tok, const int *ids, gsize n, gboolean skip)
{
  g_autoptr (DflDetokenizer) d = dfl_detokenizer_new (tok, skip);
  GString *all = g_string_new (NULL);
  char *chunk;
  gsize i;

  for (i = 0; i < n; i++) {
    chunk = dfl_detokenizer_push (d, ids[i]);
    g_assert_true (g_utf8_validate (chunk, -1, NULL));
    g_string_append (all, chunk);
    g_free (chunk);
  }
  chunk = dfl_detokenizer_finish (d);
  g_assert_true (g_utf8_validate (chunk, -1, NULL));
  g_string_append (all, chunk);
  g_free (chunk);
  return g_string_free (all, FALSE);
}

static void
test_special (void)
{
  static const char *const names[] = { "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|mask|>" };
  const DflTokenizer *tok = fixture;
  const char *text = "a<|endoftext|>b <|im_start|>user\nhi<|im_end|><|mask|>";
  g_autoptr (GError) error = NULL;
  g_autoptr (GArray) ids = NULL;
  g_autofree char *all = NULL, *plain = NULL, *streamed = NULL;
  int i, seen = 0;
  gsize len;

  g_assert_cmpuint (dfl_tokenizer_vocab_size (tok), ==, 1024);
  for (i = 0; i < 4; i++) {
    g_assert_cmpint (dfl_tokenizer_token_id (tok, names[i]), ==, i);
    g_assert_true (dfl_tokenizer_is_special (tok, i));
    g_assert_cmpstr (dfl_tokenizer_token_bytes (tok, i, &len), ==, names[i]);
    g_assert_cmpuint (len, ==, strlen (names[i]));
  }
  g_assert_false (dfl_tokenizer_is_special (tok, 4));
  g_assert_false (dfl_tokenizer_is_special (tok, -1));
  g_assert_false (dfl_tokenizer_is_special (tok, 1024));
  g_assert_cmpint (dfl_tokenizer_token_id (tok, "<|nope|>"), ==, -1);

  ids = dfl_tokenizer_encode (tok, text, -1, &error);
  g_assert_no_error (error);
  g_assert_cmpint (g_array_index (ids, int, 1), ==, 0);
  for (i = 0; i < (int) ids->len; i++)
    seen |= g_array_index (ids, int, i) < 4 ? 1 << g_array_index (ids, int, i) : 0;
  g_assert_cmpint (seen, ==, 0xf);
  all = dfl_tokenizer_decode (tok, (int *) ids->data, ids->len, FALSE);
  g_assert_cmpstr (all, ==, text);
  plain = dfl_tokenizer_decode (tok, (int *) ids->data, ids->len, TRUE);
  g_assert_cmpstr (plain, ==, "ab user\nhi");
  streamed = stream (tok, (int *) ids->data, ids->len, TRUE);
  g_assert_cmpstr (streamed, ==, plain);
}

/* A push must never return half a character, however the emoji's bytes are
 * spread over tokens. */
static void
test_stream_emoji (void)
{
  const DflTokenizer *tok = fixture;
  const char *text = "👩‍👩‍👧‍👦 waves 👋🏿, then 🫱🏼‍🫲🏿 and 🏴󠁧󠁢󠁳󠁣󠁴󠁿!";
  static const guint8 grin[] = { 0xF0, 0x9F, 0x98, 0x80 };
  g_autoptr (GError) error = NULL;
  g_autoptr (GArray) ids = NULL;
  g_autoptr (DflDetokenizer) d = NULL;
  g_autofree char *whole = NULL, *streamed = NULL, *tail = NULL;
  guint i, partial = 0;

  ids = dfl_tokenizer_encode (tok, text, -1, &error);
  g_assert_no_error (error);
  for (i = 0; i < ids->len; i++) {
    gsize len;
    const char *b = dfl_tokenizer_token_bytes (tok, g_array_index (ids, int, i), &len);

    partial += !g_utf8_validate (b, len, NULL);
  }
  /* the test means something only if some token holds part of a character */
  g_assert_cmpuint (partial, >, 0);
  whole = dfl_tokenizer_decode (tok, (int *) ids->data, ids->len, FALSE);
  g_assert_cmpstr (whole, ==, text);
  streamed = stream (tok, (int *) ids->data, ids->len, FALSE);
  g_assert_cmpstr (streamed, ==, text);

  /* one byte per push: nothing until the fourth */
  d = dfl_detokenizer_new (tok, FALSE);
  for (i = 0; i < 4; i++) {
    g_autofree char *chunk = dfl_detokenizer_push (d, byte_token (tok, grin[i]));

    g_assert_cmpstr (chunk, ==, i < 3 ? "" : "😀");
  }
  tail = dfl_detokenizer_finish (d);
  g_assert_cmpstr (tail, ==, "");
}

/* Invalid UTF-8 becomes U+FFFD per maximal ill-formed subsequence, as Rust's
 * from_utf8_lossy does, in decode() and in the stream alike. */
static void
test_lossy (void)
{
  static const struct {
    guint8 bytes[6];
    guint n;
    const char *want;
  } cases[] = {
    { { 0xE2, 0x82, 'A' }, 3, "\xEF\xBF\xBD" "A" },               /* cut 3-byte char */
    { { 0xF0, 0x80, 0x80 }, 3, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD" }, /* F0 needs 90..BF */
    { { 0xE2, 0x82 }, 2, "\xEF\xBF\xBD" },                        /* cut at the end */
    { { 0xFF, 'x', 0xC3 }, 3, "\xEF\xBF\xBD" "x\xEF\xBF\xBD" },
    { { 0xED, 0xA0, 0x80 }, 3, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD" }, /* surrogate */
    { { 0xC3, 0xA9, 0xE2, 0x82, 0xAC }, 5, "é€" },
  };
  const DflTokenizer *tok = fixture;
  guint c, i;

  for (c = 0; c < G_N_ELEMENTS (cases); c++) {
    int ids[6];
    g_autofree char *text = NULL, *streamed = NULL;

    for (i = 0; i < cases[c].n; i++)
      ids[i] = byte_token (tok, cases[c].bytes[i]);
    text = dfl_tokenizer_decode (tok, ids, cases[c].n, FALSE);
    g_assert_cmpstr (text, ==, cases[c].want);
    streamed = stream (tok, ids, cases[c].n, FALSE);
    g_assert_cmpstr (streamed, ==, cases[c].want);
  }
}

static void
test_out_of_range (void)
{
  const DflTokenizer *tok = fixture;
  int ids[] = { -5, 1024, 99999, byte_token (tok, 'o'), byte_token (tok, 'k') };
  g_autofree char *text = NULL, *streamed = NULL;
  gsize len = 7;

  g_assert_null (dfl_tokenizer_token_bytes (tok, -1, &len));
  g_assert_cmpuint (len, ==, 0);
  g_assert_null (dfl_tokenizer_token_bytes (tok, 1024, NULL));
  text = dfl_tokenizer_decode (tok, ids, G_N_ELEMENTS (ids), FALSE);
  g_assert_cmpstr (text, ==, "ok");
  streamed = stream (tok, ids, G_N_ELEMENTS (ids), FALSE);
  g_assert_cmpstr (streamed, ==, "ok");
}

/* The Qwen2 regex's corner cases: the optional non-letter before letters,
 * single digits, \s+(?!\S) leaving the last space to the next word, a
 * punctuation run taking the newlines after it, NBSP and NEL as white space. */
static void
test_pre_tokenize (void)
{
  static const char *const want[] = {
    "Hello", " ", " world", "'S", " ", "1", "2", "\t", "!!\r\n\n", " ", " x", "\xc2\xa0",
    "\xc2\x85y", "  ",
  };
  g_autoptr (GError) error = NULL;
  g_autoptr (GPtrArray) pieces = NULL;
  guint i;

  pieces = dfl_tokenizer_pre_tokenize (fixture, "Hello  world'S 12\t!!\r\n\n  x\xc2\xa0\xc2\x85y  ",
                                       -1, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (pieces->len, ==, G_N_ELEMENTS (want));
  for (i = 0; i < pieces->len; i++) {
    gsize len;
    const char *p = g_bytes_get_data (g_ptr_array_index (pieces, i), &len);

    g_assert_cmpmem (p, len, want[i], strlen (want[i]));
  }
}

static void
test_not_utf8 (void)
{
  static const char *const bad[] = {
    "\xFF", "abc\xC3", "\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "ok \x80 no",
  };
  const DflTokenizer *tok = fixture;
  g_autoptr (GArray) empty = NULL, with_nul = NULL;
  g_autofree char *back = NULL;
  guint i;

  for (i = 0; i < G_N_ELEMENTS (bad); i++) {
    g_autoptr (GError) error = NULL;
    g_autoptr (GArray) ids = dfl_tokenizer_encode (tok, bad[i], -1, &error);

    g_assert_null (ids);
    g_assert_error (error, DFL_ERROR, DFL_ERROR_INVALID);
    g_assert_nonnull (strstr (error->message, "not valid UTF-8"));
  }
  empty = dfl_tokenizer_encode (tok, "", -1, NULL);
  g_assert_cmpuint (empty->len, ==, 0);
  back = dfl_tokenizer_decode (tok, NULL, 0, TRUE);
  g_assert_cmpstr (back, ==, "");
  /* NUL is a character when the length is given */
  with_nul = dfl_tokenizer_encode (tok, "a\0b", 3, NULL);
  g_assert_nonnull (with_nul);
  g_assert_cmpuint (with_nul->len, >=, 2);
  {
    gsize len;
    g_autofree char *text = dfl_tokenizer_decode_len (tok, (int *) with_nul->data, with_nul->len,
                                                      FALSE, &len);

    g_assert_cmpmem (text, len, "a\0b", 3);
  }
}

#define MINIMAL_MODEL \
  "{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2,\"Ġ\":3},\"merges\":[\"a b\"]}"
#define MINIMAL_PRE "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}"
#define MINIMAL_DEC "{\"type\":\"ByteLevel\"}"

static char *
tokenizer_json (const char *model, const char *normalizer, const char *pre, const char *decoder,
                const char *post, const char *added)
{
  return g_strdup_printf ("{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,"
                          "\"added_tokens\":%s,\"normalizer\":%s,\"pre_tokenizer\":%s,"
                          "\"post_processor\":%s,\"decoder\":%s,\"model\":%s}",
                          added, normalizer, pre, post, decoder, model);
}

static void
test_minimal (void)
{
  g_autofree char *json = tokenizer_json (MINIMAL_MODEL, "null", MINIMAL_PRE, MINIMAL_DEC, "null",
                                          "[{\"id\":4,\"content\":\"<x>\",\"special\":true}]");
  g_autoptr (GError) error = NULL;
  g_autoptr (DflTokenizer) tok = dfl_tokenizer_parse (json, strlen (json), "mini.json", &error);
  g_autoptr (GArray) ids = NULL;
  g_autofree char *text = NULL;
  static const int want[] = { 2, 2, 4, 3, 2, 0 };

  g_assert_no_error (error);
  g_assert_cmpuint (dfl_tokenizer_vocab_size (tok), ==, 5);
  /* bytes outside the vocab are dropped, as Hugging Face does without unk */
  ids = dfl_tokenizer_encode (tok, "abab<x> abaxyz", -1, &error);
  g_assert_no_error (error);
  g_assert_cmpmem (ids->data, ids->len * sizeof (int), want, sizeof (want));
  text = dfl_tokenizer_decode (tok, (int *) ids->data, ids->len, TRUE);
  g_assert_cmpstr (text, ==, "abab aba");
  /* a text of nothing but such bytes encodes to no ids, twice (the second
   * time from the piece cache) */
  for (int round = 0; round < 2; round++) {
    g_autoptr (GArray) none = dfl_tokenizer_encode (tok, "xyz", -1, &error);

    g_assert_no_error (error);
    g_assert_cmpuint (none->len, ==, 0);
  }
}

static void
test_bad_files (void)
{
  static const struct {
    const char *model, *normalizer, *pre, *decoder, *post, *added;
    DflError code;
    const char *message;
  } cases[] = {
    { "{\"type\":\"Unigram\",\"vocab\":[]}", "null", MINIMAL_PRE, MINIMAL_DEC, "null", "[]",
      DFL_ERROR_UNSUPPORTED, "model type 'Unigram' is not supported (byte-level BPE only)" },
    { "{\"type\":\"BPE\",\"merges\":[]}", "null", MINIMAL_PRE, MINIMAL_DEC, "null", "[]",
      DFL_ERROR_FORMAT, "model: missing 'vocab'" },
    { "{\"type\":\"BPE\",\"vocab\":{\"a\":0}}", "null", MINIMAL_PRE, MINIMAL_DEC, "null", "[]",
      DFL_ERROR_FORMAT, "model: missing 'merges'" },
    { "{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[\"a b\"]}", "null", MINIMAL_PRE,
      MINIMAL_DEC, "null", "[]", DFL_ERROR_FORMAT, "uses 'ab', which is not in the vocab" },
    { "{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":0},\"merges\":[]}", "null", MINIMAL_PRE,
      MINIMAL_DEC, "null", "[]", DFL_ERROR_FORMAT, "id 0 is given to both 'a' and 'b'" },
    { "{\"type\":\"BPE\",\"vocab\":{\"a\xff\":0},\"merges\":[]}", "null", MINIMAL_PRE,
      MINIMAL_DEC, "null", "[]", DFL_ERROR_FORMAT, "id 0 is not valid UTF-8" },
    { "{\"type\":\"BPE\",\"vocab\":{\"a\":-1},\"merges\":[]}", "null", MINIMAL_PRE,
      MINIMAL_DEC, "null", "[]", DFL_ERROR_FORMAT, "id -1 is not a token id (expected an integer from 0 to 4194303)" },
    { "{\"type\":\"BPE\",\"byte_fallback\":true,\"vocab\":{},\"merges\":[]}", "null", MINIMAL_PRE,
      MINIMAL_DEC, "null", "[]", DFL_ERROR_UNSUPPORTED, "byte_fallback=true is not supported" },
    { "{\"type\":\"BPE\",\"dropout\":0.1,\"vocab\":{},\"merges\":[]}", "null", MINIMAL_PRE,
      MINIMAL_DEC, "null", "[]", DFL_ERROR_UNSUPPORTED, "dropout is not supported" },
    { "{\"type\":\"BPE\",\"continuing_subword_prefix\":\"##\",\"vocab\":{},\"merges\":[]}", "null",
      MINIMAL_PRE, MINIMAL_DEC, "null", "[]", DFL_ERROR_UNSUPPORTED, "'continuing_subword_prefix' is set" },
    { MINIMAL_MODEL, "{\"type\":\"NFKC\"}", MINIMAL_PRE, MINIMAL_DEC, "null", "[]",
      DFL_ERROR_UNSUPPORTED, "normalizer 'NFKC' is not supported" },
    { MINIMAL_MODEL, "null",
      "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\s+\"},"
      "\"behavior\":\"Isolated\",\"invert\":false}," MINIMAL_PRE "]}", MINIMAL_DEC, "null", "[]",
      DFL_ERROR_UNSUPPORTED, "regex pattern '\\s+' is not supported" },
    { MINIMAL_MODEL, "null",
      "{\"type\":\"Split\",\"pattern\":{\"String\":\" \"},\"behavior\":\"Isolated\",\"invert\":false}",
      MINIMAL_DEC, "null", "[]", DFL_ERROR_UNSUPPORTED, "only a 'Regex' pattern is supported" },
    { MINIMAL_MODEL, "null", "{\"type\":\"Metaspace\"}", MINIMAL_DEC, "null", "[]",
      DFL_ERROR_UNSUPPORTED, "pre_tokenizer 'Metaspace' is not supported" },
    { MINIMAL_MODEL, "null", "null", MINIMAL_DEC, "null", "[]",
      DFL_ERROR_UNSUPPORTED, "a null pre_tokenizer is not supported" },
    { MINIMAL_MODEL, "null", "{\"type\":\"ByteLevel\",\"add_prefix_space\":true}", MINIMAL_DEC,
      "null", "[]", DFL_ERROR_UNSUPPORTED, "add_prefix_space=true is not supported" },
    { MINIMAL_MODEL, "null", MINIMAL_PRE, "{\"type\":\"WordPiece\"}", "null", "[]",
      DFL_ERROR_UNSUPPORTED, "decoder 'WordPiece' is not supported (ByteLevel only)" },
    { MINIMAL_MODEL, "null", MINIMAL_PRE, MINIMAL_DEC, "{\"type\":\"TemplateProcessing\"}", "[]",
      DFL_ERROR_UNSUPPORTED, "post_processor 'TemplateProcessing' is not supported" },
    { MINIMAL_MODEL, "null", MINIMAL_PRE, MINIMAL_DEC, "null",
      "[{\"id\":9,\"content\":\"<x>\",\"special\":true}]",
      DFL_ERROR_FORMAT, "'<x>' has id 9, but Hugging Face would give it id 4" },
  };
  static const struct {
    const char *json;
    DflError code;
    const char *message;
  } raw[] = {
    { "this is not JSON {", DFL_ERROR_FORMAT, "bad.json: not valid JSON" },
    { "", DFL_ERROR_FORMAT, "bad.json: not valid JSON" },
    { "[1, 2, 3]", DFL_ERROR_FORMAT, "bad.json: not a JSON object" },
    { "{\"version\":\"1.0\"}", DFL_ERROR_FORMAT, "bad.json: missing 'model'" },
    { "{\"version\":\"2.0\",\"model\":{}}", DFL_ERROR_UNSUPPORTED, "version '2.0' is not supported" },
  };
  guint i;

  for (i = 0; i < G_N_ELEMENTS (cases); i++) {
    g_autoptr (GError) error = NULL;
    g_autofree char *json = tokenizer_json (cases[i].model, cases[i].normalizer, cases[i].pre,
                                            cases[i].decoder, cases[i].post, cases[i].added);
    g_autoptr (DflTokenizer) tok = dfl_tokenizer_parse (json, strlen (json), "bad.json", &error);

    g_test_message ("case %u: %s", i, error ? error->message : "(no error)");
    g_assert_null (tok);
    g_assert_error (error, DFL_ERROR, (gint) cases[i].code);
    g_assert_true (g_str_has_prefix (error->message, "bad.json: "));
    g_assert_nonnull (strstr (error->message, cases[i].message));
  }
  for (i = 0; i < G_N_ELEMENTS (raw); i++) {
    g_autoptr (GError) error = NULL;
    g_autoptr (DflTokenizer) tok = dfl_tokenizer_parse (raw[i].json, strlen (raw[i].json),
                                                        "bad.json", &error);

    g_test_message ("raw case %u: %s", i, error ? error->message : "(no error)");
    g_assert_null (tok);
    g_assert_error (error, DFL_ERROR, (gint) raw[i].code);
    g_assert_nonnull (strstr (error->message, raw[i].message));
  }
}

static void
test_missing_file (void)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (DflTokenizer) tok = dfl_tokenizer_load ("/nonexistent/tokenizer.json", &error);

  g_assert_null (tok);
  g_assert_error (error, DFL_ERROR, DFL_ERROR_IO);
  g_assert_true (g_str_has_prefix (error->message, "/nonexistent/tokenizer.json: "));
}

static const DflTestCase cases[] = {
  { "/tokenizer/special-tokens", test_special },
  { "/tokenizer/stream-emoji", test_stream_emoji },
  { "/tokenizer/lossy-utf8", test_lossy },
  { "/tokenizer/out-of-range", test_out_of_range },
  { "/tokenizer/pre-tokenize", test_pre_tokenize },
  { "/tokenizer/not-utf8", test_not_utf8 },
  { "/tokenizer/minimal", test_minimal },
  { "/tokenizer/bad-files", test_bad_files },
  { "/tokenizer/missing-file", test_missing_file },
  { NULL, NULL }
};

int
main (int argc, char **argv)
{
  int ret;

  g_test_init (&argc, &argv, NULL);
  load_fixture ();
  dfl_test_add_cases (cases);
  ret = g_test_run ();
  dfl_tokenizer_free (fixture);
  return ret;
}
