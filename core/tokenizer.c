/* gst-dflash — Hugging Face tokenizer.json: byte-level BPE as the Qwen2 and
 * Qwen3 families ship it.
 *
 * What is run, in the order Hugging Face's `tokenizers` runs it:
 *   1. added tokens with normalized=false are cut out of the raw text
 *      (leftmost-longest match, with single_word, lstrip and rstrip);
 *   2. each remaining piece is normalized (nothing, or NFC);
 *   3. added tokens with normalized=true are cut out of the normalized pieces;
 *   4. the pre-tokenizer splits each piece: a Split on the Qwen2 regex and/or
 *      the GPT-2 regex of ByteLevel(use_regex=true), each a hand-written
 *      scanner over code points that takes the same leftmost-first
 *      alternative the regex engine (Oniguruma) takes;
 *   5. each pre-token's bytes become GPT-2 byte-level symbols and BPE merges
 *      them, lowest rank first, leftmost first among equal ranks.
 * Decoding maps each token back to bytes (ByteLevel decoder) and repairs
 * invalid UTF-8 the way Rust's String::from_utf8_lossy does.
 *
 * Everything else a tokenizer.json may ask for (other models, normalizers,
 * pre-tokenizers, decoders, post-processors that add tokens, truncation,
 * padding) is refused with a DFL_ERROR naming the file and the component:
 * a tokenizer that silently differs from the reference is worse than none.
 */
#include "dfl-json.h"
#include "tokenizer.h"
#include "dfl-error.h"

#include <cJSON.h>
#include <math.h>
#include <string.h>

G_DEFINE_AUTOPTR_CLEANUP_FUNC (cJSON, cJSON_Delete)

/* Far above any real vocabulary (Qwen3: 151 669), low enough that the id
 * tables cannot be absurd allocations. */
#define DFL_TOK_MAX_IDS (4 * 1024 * 1024)
/* tokenizer.json files are a few MiB (Qwen3: 11 MiB). */
#define DFL_TOK_MAX_FILE (512u * 1024u * 1024u)
/* Like Hugging Face: only short pre-tokens are cached, and the cache stops
 * growing once full rather than evicting. */
#define DFL_TOK_CACHE_MAX_KEY 256
#define DFL_TOK_CACHE_MAX_ENTRIES 65536

/* The byte-level alphabet maps bytes to code points below U+0144. */
#define DFL_TOK_BYTE_CP_LIMIT 0x144

static const char DFL_TOK_QWEN2_PATTERN[] =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"
  "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char DFL_TOK_GPT2_PATTERN[] =
  "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* A pre-tokenizer step: given a piece and a position inside it (a character
 * boundary before the end), the end of the match that starts there. Both our
 * patterns match at every position, so the pieces tile the input. */
typedef gsize (*DflTokScanner) (const guint8 *s, gsize len, gsize i);

typedef struct {
  char *content;      /* as written in the file */
  char *match;        /* what is searched for: content, NFC-normalized when normalized */
  gsize match_len;
  int id;
  gboolean special;
  gboolean single_word;
  gboolean lstrip;
  gboolean rstrip;
  gboolean normalized;
} DflTokAdded;

/* Added tokens searched for in one pass, bucketed by first byte, longest first
 * in each bucket so that the first hit at a position is the longest. */
typedef struct {
  GPtrArray *by_first[256];
  gboolean empty;
} DflTokAddedSet;

typedef struct {
  guint64 key;        /* left id << 32 | right id; G_MAXUINT64 marks a free slot */
  guint32 rank;
  gint32 id;          /* the merged token */
} DflTokMerge;

typedef struct {
  guint n;
  int ids[];
} DflTokCached;

struct _DflTokenizer {
  char *origin;

  /* ids */
  guint n_ids;                 /* highest id + 1 */
  GHashTable *vocab;           /* model token (owned) → GINT_TO_POINTER (id + 1) */
  GHashTable *added_ids;       /* added token content (borrowed) → GINT_TO_POINTER (id + 1) */
  DflTokAdded *added;
  guint n_added;
  DflTokAddedSet raw_set;      /* added tokens with normalized=false */
  DflTokAddedSet norm_set;     /* added tokens with normalized=true */

  /* decoding: every id's bytes, NUL-terminated, in one pool */
  char *pool;
  guint32 *tok_off;
  gint32 *tok_len;             /* -1: no token has this id */
  guint8 *tok_special;

  /* normalizer and pre-tokenizer */
  gboolean nfc;
  DflTokScanner steps[8];
  guint n_steps;

  /* BPE */
  gint32 byte_id[256];         /* the id of each byte's symbol, -1 if the vocab lacks it */
  char byte_utf8[256][3];      /* each byte's symbol, UTF-8, NUL-terminated */
  guint8 byte_utf8_len[256];
  gint16 cp_byte[DFL_TOK_BYTE_CP_LIMIT]; /* symbol code point → byte, -1 if none */
  DflTokMerge *merges;
  guint64 merges_mask;
  int unk_id;                  /* -1: unknown symbols are dropped, as HF does without unk_token */
  gboolean fuse_unk;
  gboolean ignore_merges;

  /* encode() takes a const tokenizer and may run on several threads: the
   * cache of pre-token → ids has its own lock. */
  GMutex cache_lock;
  GHashTable *cache;
};

/* ------------------------------------------------------------------------ */
/* UTF-8 and Unicode classes                                                */

/* What a lead byte (≥ 0x80) asks for (RFC 3629): the continuation bytes
 * `need` and the range [lo, hi] of the first of them (which rules out
 * overlongs, surrogates and what passes U+10FFFF). FALSE for a byte that
 * cannot start a character. */
static inline gboolean
dfl_tok_utf8_lead (guint8 b, guint *need, guint8 *lo, guint8 *hi)
{
  *lo = 0x80;
  *hi = 0xBF;
  if (b >= 0xC2 && b <= 0xDF)
    *need = 1;
  else if (b == 0xE0)
    *need = 2, *lo = 0xA0;
  else if (b == 0xED)
    *need = 2, *hi = 0x9F;
  else if (b >= 0xE1 && b <= 0xEF)
    *need = 2;
  else if (b == 0xF0)
    *need = 3, *lo = 0x90;
  else if (b >= 0xF1 && b <= 0xF3)
    *need = 3;
  else if (b == 0xF4)
    *need = 3, *hi = 0x8F;
  else
    return FALSE;
  return TRUE;
}

/* Offset of the first byte that is not part of well-formed UTF-8 (RFC 3629:
 * no overlongs, no surrogates, nothing above U+10FFFF), or -1. NUL is
 * accepted: it is a character like any other. */
static gssize
dfl_tok_utf8_check (const guint8 *p, gsize len)
{
  gsize i = 0;

  while (i < len) {
    guint8 b = p[i];
    guint need, k;
    guint8 lo, hi;

    if (b < 0x80) {
      i++;
      continue;
    }
    if (!dfl_tok_utf8_lead (b, &need, &lo, &hi))
      return i;
    for (k = 1; k <= need; k++) {
      guint8 c;

      if (i + k >= len)
        return i;
      c = p[i + k];
      if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF))
        return i;
    }
    i += need + 1;
  }
  return -1;
}

/* Decodes the character at i of validated UTF-8; returns the next offset. */
static inline gsize
dfl_tok_next (const guint8 *s, gsize i, gunichar *cp)
{
  guint8 b = s[i];

  if (b < 0x80) {
    *cp = b;
    return i + 1;
  }
  if (b < 0xE0) {
    *cp = ((gunichar) (b & 0x1F) << 6) | (s[i + 1] & 0x3F);
    return i + 2;
  }
  if (b < 0xF0) {
    *cp = ((gunichar) (b & 0x0F) << 12) | ((gunichar) (s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
    return i + 3;
  }
  *cp = ((gunichar) (b & 0x07) << 18) | ((gunichar) (s[i + 1] & 0x3F) << 12)
      | ((gunichar) (s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
  return i + 4;
}

/* The start of the character that ends at i (i > 0) of validated UTF-8. */
static inline gsize
dfl_tok_prev (const guint8 *s, gsize i)
{
  do
    i--;
  while (i > 0 && (s[i] & 0xC0) == 0x80);
  return i;
}

/* Unicode White_Space, which is what \s means to Oniguruma (and to Rust's
 * regex). Not g_unichar_isspace(): that one leaves out U+0085 and follows
 * the general category rather than the property. */
static inline gboolean
dfl_tok_is_space (gunichar c)
{
  if (c < 0x80)
    return c == ' ' || (c >= 0x09 && c <= 0x0D);
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A)
      || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

enum {
  DFL_TOK_L = 1 << 0,   /* \p{L}: Lu Ll Lt Lm Lo */
  DFL_TOK_N = 1 << 1,   /* \p{N}: Nd Nl No */
  DFL_TOK_S = 1 << 2,   /* \s: White_Space */
};

static inline guint
dfl_tok_class (gunichar c)
{
  if (c < 0x80) {
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')
      return DFL_TOK_L;
    if (c >= '0' && c <= '9')
      return DFL_TOK_N;
    return dfl_tok_is_space (c) ? DFL_TOK_S : 0;
  }
  if (dfl_tok_is_space (c))
    return DFL_TOK_S;
  switch (g_unichar_type (c)) {
    case G_UNICODE_UPPERCASE_LETTER:
    case G_UNICODE_LOWERCASE_LETTER:
    case G_UNICODE_TITLECASE_LETTER:
    case G_UNICODE_MODIFIER_LETTER:
    case G_UNICODE_OTHER_LETTER:
      return DFL_TOK_L;
    case G_UNICODE_DECIMAL_NUMBER:
    case G_UNICODE_LETTER_NUMBER:
    case G_UNICODE_OTHER_NUMBER:
      return DFL_TOK_N;
    default:
      return 0;
  }
}

/* \w as Rust's regex has it (added tokens' single_word): Alphabetic, marks,
 * Nd, Pc, Join_Control. Alphabetic is approximated by the letters, Nl and the
 * marks, plus the circled and squared Latin letters that are Other_Alphabetic
 * symbols; only single_word added tokens look at it. */
static gboolean
dfl_tok_is_word (gunichar c)
{
  if (c == 0x200C || c == 0x200D || (c >= 0x24B6 && c <= 0x24E9)
      || (c >= 0x1F130 && c <= 0x1F149) || (c >= 0x1F150 && c <= 0x1F169)
      || (c >= 0x1F170 && c <= 0x1F189))
    return TRUE;
  switch (g_unichar_type (c)) {
    case G_UNICODE_UPPERCASE_LETTER:
    case G_UNICODE_LOWERCASE_LETTER:
    case G_UNICODE_TITLECASE_LETTER:
    case G_UNICODE_MODIFIER_LETTER:
    case G_UNICODE_OTHER_LETTER:
    case G_UNICODE_LETTER_NUMBER:
    case G_UNICODE_DECIMAL_NUMBER:
    case G_UNICODE_NON_SPACING_MARK:
    case G_UNICODE_SPACING_MARK:
    case G_UNICODE_ENCLOSING_MARK:
    case G_UNICODE_CONNECT_PUNCTUATION:
      return TRUE;
    default:
      return FALSE;
  }
}

/* ------------------------------------------------------------------------ */
/* The pre-tokenizer scanners                                               */

static inline guint
dfl_tok_class_at (const guint8 *s, gsize i, gsize *next)
{
  gunichar c;

  *next = dfl_tok_next (s, i, &c);
  return dfl_tok_class (c);
}

/* The end of the run of characters from i whose class has `want` and lacks
 * `avoid` (both masks; a class of 0 is "other"). */
static gsize
dfl_tok_run (const guint8 *s, gsize len, gsize i, guint want, guint avoid)
{
  while (i < len) {
    gsize n;
    guint cls = dfl_tok_class_at (s, i, &n);

    if (want ? !(cls & want) : (cls & avoid) != 0)
      break;
    i = n;
  }
  return i;
}

#define dfl_tok_letters(s, len, i) dfl_tok_run (s, len, i, DFL_TOK_L, 0)
#define dfl_tok_digits(s, len, i) dfl_tok_run (s, len, i, DFL_TOK_N, 0)
/* [^\s\p{L}\p{N}]+ */
#define dfl_tok_others(s, len, i) dfl_tok_run (s, len, i, 0, DFL_TOK_L | DFL_TOK_N | DFL_TOK_S)

/* The end of the contraction after the apostrophe at i - 1, or 0. The Qwen2
 * pattern has (?i:…), and Oniguruma folds case the Unicode way, so 'S and
 * U+017F LATIN SMALL LETTER LONG S match 's as well. */
static gsize
dfl_tok_contraction (const guint8 *s, gsize len, gsize i, gboolean fold)
{
  gunichar a, b = 0;
  gsize j, k = 0;

  if (i >= len)
    return 0;
  j = dfl_tok_next (s, i, &a);
  if (j < len)
    k = dfl_tok_next (s, j, &b);
  if (fold) {
    if (a == 0x17F)
      a = 's';
    if (a < 0x80)
      a = g_ascii_tolower (a);
    if (b < 0x80)
      b = g_ascii_tolower (b);
  }
  switch (a) {
    case 's': case 't': case 'm': case 'd':
      return j;
    case 'r': case 'v':
      return b == 'e' ? k : 0;
    case 'l':
      return b == 'l' ? k : 0;
    default:
      return 0;
  }
}

/* \s*[\r\n]+ | \s+(?!\S) | \s+ at a whitespace character i. */
static gsize
dfl_tok_spaces (const guint8 *s, gsize len, gsize i, gboolean crlf_alt)
{
  gsize j = i, last = i, after_crlf = 0;

  while (j < len) {
    gunichar c;
    gsize n = dfl_tok_next (s, j, &c);

    if (!dfl_tok_is_space (c))
      break;
    if (c == '\r' || c == '\n')
      after_crlf = n;
    last = j;
    j = n;
  }
  /* \s*[\r\n]+: the greedy \s* gives back characters until one of \r \n
   * follows, so the match ends just after the run's last \r or \n. */
  if (crlf_alt && after_crlf)
    return after_crlf;
  /* \s+(?!\S): at the end of the text the whole run; before a non-space the
   * run less its last character, which then leads the next pre-token. */
  if (j == len)
    return j;
  if (last > i)
    return last;
  /* \s+ */
  return j;
}

/* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}
 * | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static gsize
dfl_tok_scan_qwen2 (const guint8 *s, gsize len, gsize i)
{
  gunichar c;
  gsize j = dfl_tok_next (s, i, &c), k;
  guint cls = dfl_tok_class (c), cls2 = 0;
  gsize j2 = j;

  if (c == '\'' && (k = dfl_tok_contraction (s, len, j, TRUE)) != 0)
    return k;
  if (j < len)
    cls2 = dfl_tok_class_at (s, j, &j2);
  /* [^\r\n\p{L}\p{N}]?\p{L}+ — the optional character is taken when a letter
   * follows it, else the letters must start at i. */
  if (!(cls & (DFL_TOK_L | DFL_TOK_N)) && c != '\r' && c != '\n' && (cls2 & DFL_TOK_L))
    return dfl_tok_letters (s, len, j2);
  if (cls & DFL_TOK_L)
    return dfl_tok_letters (s, len, j);
  if (cls & DFL_TOK_N)
    return j;
  /*  ?[^\s\p{L}\p{N}]+[\r\n]* */
  if (c == ' ' && j < len && cls2 == 0)
    k = dfl_tok_others (s, len, j2);
  else if (cls == 0)
    k = dfl_tok_others (s, len, j);
  else
    k = 0;
  if (k) {
    while (k < len && (s[k] == '\r' || s[k] == '\n'))
      k++;
    return k;
  }
  return dfl_tok_spaces (s, len, i, TRUE);
}

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static gsize
dfl_tok_scan_gpt2 (const guint8 *s, gsize len, gsize i)
{
  gunichar c;
  gsize j = dfl_tok_next (s, i, &c), k;
  guint cls = dfl_tok_class (c), cls2 = 0;
  gsize j2 = j;

  if (c == '\'' && (k = dfl_tok_contraction (s, len, j, FALSE)) != 0)
    return k;
  if (c == ' ' && j < len) {
    cls2 = dfl_tok_class_at (s, j, &j2);
    if (cls2 & DFL_TOK_L)
      return dfl_tok_letters (s, len, j2);
    if (cls2 & DFL_TOK_N)
      return dfl_tok_digits (s, len, j2);
    if (cls2 == 0)
      return dfl_tok_others (s, len, j2);
  }
  if (cls & DFL_TOK_L)
    return dfl_tok_letters (s, len, j);
  if (cls & DFL_TOK_N)
    return dfl_tok_digits (s, len, j);
  if (cls == 0)
    return dfl_tok_others (s, len, j);
  return dfl_tok_spaces (s, len, i, FALSE);
}

/* ------------------------------------------------------------------------ */
/* Merges: an open-addressing table keyed by the pair of ids                */

static inline guint64
dfl_tok_hash64 (guint64 x)
{
  x ^= x >> 33;
  x *= G_GUINT64_CONSTANT (0xff51afd7ed558ccd);
  x ^= x >> 33;
  x *= G_GUINT64_CONSTANT (0xc4ceb9fe1a85ec53);
  x ^= x >> 33;
  return x;
}

static inline const DflTokMerge *
dfl_tok_merge_find (const DflTokenizer *tok, gint32 a, gint32 b)
{
  guint64 key = ((guint64) (guint32) a << 32) | (guint32) b;
  guint64 h;

  if (tok->merges == NULL)
    return NULL;
  for (h = dfl_tok_hash64 (key) & tok->merges_mask;; h = (h + 1) & tok->merges_mask) {
    const DflTokMerge *m = &tok->merges[h];

    if (m->key == key)
      return m;
    if (m->key == G_MAXUINT64)
      return NULL;
  }
}

/* A pair listed twice keeps its later rank: Hugging Face collects the merges
 * into a map, where the later entry wins. */
static void
dfl_tok_merge_insert (DflTokenizer *tok, gint32 a, gint32 b, guint32 rank, gint32 id)
{
  guint64 key = ((guint64) (guint32) a << 32) | (guint32) b;
  guint64 h;

  for (h = dfl_tok_hash64 (key) & tok->merges_mask;; h = (h + 1) & tok->merges_mask) {
    DflTokMerge *m = &tok->merges[h];

    if (m->key == key || m->key == G_MAXUINT64) {
      m->key = key;
      m->rank = rank;
      m->id = id;
      return;
    }
  }
}

/* ------------------------------------------------------------------------ */
/* Loading                                                                  */

/* The item, or NULL where the key is absent or null. */
static const cJSON *
dfl_tok_get (const cJSON *obj, const char *key)
{
  const cJSON *item = cJSON_GetObjectItemCaseSensitive (obj, key);

  return cJSON_IsNull (item) ? NULL : item;
}

static gboolean
dfl_tok_bool (const cJSON *obj, const char *origin, const char *what, const char *key,
              gboolean def, gboolean *out, GError **error)
{
  const cJSON *item = dfl_tok_get (obj, key);

  if (item == NULL) {
    *out = def;
    return TRUE;
  }
  if (!cJSON_IsBool (item)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "%s: %s: '%s' is %s, expected true or false",
                 origin, what, key, dfl_json_kind (item));
    return FALSE;
  }
  *out = cJSON_IsTrue (item);
  return TRUE;
}

static gboolean
dfl_tok_id (const cJSON *item, const char *origin, const char *what, int *out, GError **error)
{
  double d;

  if (!cJSON_IsNumber (item)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "%s: %s: the id is %s, expected an integer",
                 origin, what, dfl_json_kind (item));
    return FALSE;
  }
  d = item->valuedouble;
  if (isnan (d) || d != floor (d) || d < 0) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: %s: id %.17g is not a token id (expected an integer from 0 to %d)",
                 origin, what, d, DFL_TOK_MAX_IDS - 1);
    return FALSE;
  }
  /* ids size the id tables: a huge one is refused before they are made */
  if (d >= DFL_TOK_MAX_IDS) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT,
                 "%s: %s: id %.17g is past the largest vocabulary accepted (ids 0 to %d)",
                 origin, what, d, DFL_TOK_MAX_IDS - 1);
    return FALSE;
  }
  *out = (int) d;
  return TRUE;
}

static const char *
dfl_tok_type (const cJSON *obj)
{
  const cJSON *t = cJSON_GetObjectItemCaseSensitive (obj, "type");

  return cJSON_IsString (t) ? t->valuestring : NULL;
}

static gboolean
dfl_tok_parse_normalizer (DflTokenizer *tok, const cJSON *n, GError **error)
{
  const char *type;
  const cJSON *item;

  if (n == NULL || cJSON_IsNull (n))
    return TRUE;
  type = cJSON_IsObject (n) ? dfl_tok_type (n) : NULL;
  if (type == NULL) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: the normalizer is %s without a type", tok->origin, dfl_json_kind (n));
    return FALSE;
  }
  if (strcmp (type, "NFC") == 0) {
    /* NFC twice is NFC once. */
    tok->nfc = TRUE;
    return TRUE;
  }
  if (strcmp (type, "Sequence") == 0) {
    const cJSON *list = cJSON_GetObjectItemCaseSensitive (n, "normalizers");

    if (!cJSON_IsArray (list)) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: normalizer Sequence: 'normalizers' is %s, expected an array",
                   tok->origin, dfl_json_kind (list));
      return FALSE;
    }
    cJSON_ArrayForEach (item, list) {
      if (!dfl_tok_parse_normalizer (tok, item, error))
        return FALSE;
    }
    return TRUE;
  }
  g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
               "%s: normalizer '%s' is not supported (NFC, or a Sequence of NFC, only)",
               tok->origin, type);
  return FALSE;
}

/* Appends the pre-tokenizer's steps; `*byte_level` counts ByteLevel steps,
 * which must come once and last since the scanners read characters, not
 * byte-level symbols. */
static gboolean
dfl_tok_parse_pre_tokenizer (DflTokenizer *tok, const cJSON *p, guint *byte_level, GError **error)
{
  const char *type = cJSON_IsObject (p) ? dfl_tok_type (p) : NULL;
  const cJSON *item;

  if (type == NULL) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: the pre_tokenizer is %s without a type", tok->origin, dfl_json_kind (p));
    return FALSE;
  }
  if (*byte_level) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                 "%s: pre_tokenizer '%s' after ByteLevel is not supported (ByteLevel must come last)",
                 tok->origin, type);
    return FALSE;
  }
  if (strcmp (type, "Sequence") == 0) {
    const cJSON *list = cJSON_GetObjectItemCaseSensitive (p, "pretokenizers");

    if (!cJSON_IsArray (list)) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: pre_tokenizer Sequence: 'pretokenizers' is %s, expected an array",
                   tok->origin, dfl_json_kind (list));
      return FALSE;
    }
    cJSON_ArrayForEach (item, list) {
      if (!dfl_tok_parse_pre_tokenizer (tok, item, byte_level, error))
        return FALSE;
    }
    return TRUE;
  }
  if (strcmp (type, "Split") == 0) {
    const cJSON *pattern = cJSON_GetObjectItemCaseSensitive (p, "pattern");
    const cJSON *regex = cJSON_GetObjectItemCaseSensitive (pattern, "Regex");
    const cJSON *behavior = cJSON_GetObjectItemCaseSensitive (p, "behavior");
    gboolean invert;

    if (!dfl_tok_bool (p, tok->origin, "pre_tokenizer Split", "invert", FALSE, &invert, error))
      return FALSE;
    if (!cJSON_IsString (regex)) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                   "%s: pre_tokenizer Split: only a 'Regex' pattern is supported (the Qwen2 pattern)",
                   tok->origin);
      return FALSE;
    }
    if (!cJSON_IsString (behavior) || strcmp (behavior->valuestring, "Isolated") != 0 || invert) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                   "%s: pre_tokenizer Split: behavior '%s' with invert=%s is not supported "
                   "(Isolated, invert=false only)", tok->origin,
                   cJSON_IsString (behavior) ? behavior->valuestring : "?",
                   invert ? "true" : "false");
      return FALSE;
    }
    if (tok->n_steps == G_N_ELEMENTS (tok->steps)) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                   "%s: pre_tokenizer has more splits than the %u accepted", tok->origin,
                   (guint) G_N_ELEMENTS (tok->steps));
      return FALSE;
    }
    if (strcmp (regex->valuestring, DFL_TOK_QWEN2_PATTERN) == 0)
      tok->steps[tok->n_steps++] = dfl_tok_scan_qwen2;
    else if (strcmp (regex->valuestring, DFL_TOK_GPT2_PATTERN) == 0)
      tok->steps[tok->n_steps++] = dfl_tok_scan_gpt2;
    else {
      g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                   "%s: pre_tokenizer Split: regex pattern '%.200s' is not supported "
                   "(only the Qwen2 and GPT-2 patterns are implemented)",
                   tok->origin, regex->valuestring);
      return FALSE;
    }
    return TRUE;
  }
  if (strcmp (type, "ByteLevel") == 0) {
    gboolean prefix, use_regex;

    if (!dfl_tok_bool (p, tok->origin, "pre_tokenizer ByteLevel", "add_prefix_space", TRUE,
                       &prefix, error)
        || !dfl_tok_bool (p, tok->origin, "pre_tokenizer ByteLevel", "use_regex", TRUE,
                          &use_regex, error))
      return FALSE;
    if (prefix) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                   "%s: pre_tokenizer ByteLevel: add_prefix_space=true is not supported",
                   tok->origin);
      return FALSE;
    }
    if (use_regex) {
      if (tok->n_steps == G_N_ELEMENTS (tok->steps)) {
        g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                     "%s: pre_tokenizer has more splits than the %u accepted", tok->origin,
                     (guint) G_N_ELEMENTS (tok->steps));
        return FALSE;
      }
      tok->steps[tok->n_steps++] = dfl_tok_scan_gpt2;
    }
    (*byte_level)++;
    return TRUE;
  }
  g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
               "%s: pre_tokenizer '%s' is not supported (Split on the Qwen2 regex, ByteLevel)",
               tok->origin, type);
  return FALSE;
}

/* A string value that may be absent, null or empty and nothing else. */
static gboolean
dfl_tok_unset_string (const cJSON *model, const char *origin, const char *key, GError **error)
{
  const cJSON *item = dfl_tok_get (model, key);

  if (item == NULL || (cJSON_IsString (item) && item->valuestring[0] == '\0'))
    return TRUE;
  g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
               "%s: model: '%s' is set (%s); only null or \"\" is supported", origin, key,
               cJSON_IsString (item) ? item->valuestring : dfl_json_kind (item));
  return FALSE;
}

static gboolean
dfl_tok_parse_vocab (DflTokenizer *tok, const cJSON *vocab, GPtrArray *by_id, GError **error)
{
  const cJSON *item;

  if (!cJSON_IsObject (vocab)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "%s: model: 'vocab' is %s, expected an object",
                 tok->origin, dfl_json_kind (vocab));
    return FALSE;
  }
  cJSON_ArrayForEach (item, vocab) {
    int id;

    if (!dfl_tok_id (item, tok->origin, "model vocab", &id, error))
      return FALSE;
    /* Everything downstream decodes token strings as UTF-8 without checks. */
    if (dfl_tok_utf8_check ((const guint8 *) item->string, strlen (item->string)) >= 0) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: model vocab: the token with id %d is not valid UTF-8", tok->origin, id);
      return FALSE;
    }
    if (g_hash_table_contains (tok->vocab, item->string)) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: model vocab: token '%s' is listed twice", tok->origin, item->string);
      return FALSE;
    }
    if ((guint) id >= by_id->len)
      g_ptr_array_set_size (by_id, id + 1);
    if (g_ptr_array_index (by_id, id) != NULL) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: model vocab: id %d is given to both '%s' and '%s'", tok->origin, id,
                   (const char *) g_ptr_array_index (by_id, id), item->string);
      return FALSE;
    }
    g_ptr_array_index (by_id, id) = g_strdup (item->string);
    /* The hash table owns the key; by_id borrows it. */
    g_hash_table_insert (tok->vocab, g_ptr_array_index (by_id, id), GINT_TO_POINTER (id + 1));
  }
  return TRUE;
}

static int
dfl_tok_vocab_id (const DflTokenizer *tok, const char *token)
{
  return GPOINTER_TO_INT (g_hash_table_lookup (tok->vocab, token)) - 1;
}

static gboolean
dfl_tok_parse_merges (DflTokenizer *tok, const cJSON *merges, GError **error)
{
  const cJSON *item;
  guint n = 0, rank = 0, cap = 16;

  if (!cJSON_IsArray (merges)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "%s: model: 'merges' is %s, expected an array",
                 tok->origin, dfl_json_kind (merges));
    return FALSE;
  }
  n = cJSON_GetArraySize (merges);
  /* each merge makes a vocabulary entry: more merges than ids is no BPE */
  if (n > DFL_TOK_MAX_IDS) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT,
                 "%s: model: 'merges' has %u entries; accepted: at most %d", tok->origin, n,
                 DFL_TOK_MAX_IDS);
    return FALSE;
  }
  while (cap < 2 * (guint64) n + 16)
    cap *= 2;
  tok->merges = g_new (DflTokMerge, cap);
  memset (tok->merges, 0xff, sizeof (DflTokMerge) * cap);
  tok->merges_mask = cap - 1;

  cJSON_ArrayForEach (item, merges) {
    g_autofree char *left = NULL;
    const char *right, *joined;
    g_autofree char *both = NULL;
    int a, b, m;

    /* Two encodings: "a b" (older files; "#version" lines are comments) and
     * ["a", "b"] (newer ones, which allow spaces inside the tokens). */
    if (cJSON_IsString (item)) {
      const char *sp = strchr (item->valuestring, ' ');

      if (g_str_has_prefix (item->valuestring, "#version"))
        continue;
      if (sp == NULL || strchr (sp + 1, ' ') != NULL) {
        g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                     "%s: model merges: entry %u ('%s') is not two tokens separated by one space",
                     tok->origin, rank + 1, item->valuestring);
        return FALSE;
      }
      left = g_strndup (item->valuestring, sp - item->valuestring);
      right = sp + 1;
    } else if (cJSON_IsArray (item) && cJSON_GetArraySize (item) == 2
               && cJSON_IsString (cJSON_GetArrayItem (item, 0))
               && cJSON_IsString (cJSON_GetArrayItem (item, 1))) {
      left = g_strdup (cJSON_GetArrayItem (item, 0)->valuestring);
      right = cJSON_GetArrayItem (item, 1)->valuestring;
    } else {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: model merges: entry %u is %s, expected \"a b\" or [\"a\", \"b\"]",
                   tok->origin, rank + 1, dfl_json_kind (item));
      return FALSE;
    }
    both = g_strconcat (left, right, NULL);
    a = dfl_tok_vocab_id (tok, left);
    b = dfl_tok_vocab_id (tok, right);
    m = dfl_tok_vocab_id (tok, both);
    if (a < 0 || b < 0 || m < 0) {
      joined = a < 0 ? left : b < 0 ? right : both;
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: model merges: entry %u uses '%s', which is not in the vocab",
                   tok->origin, rank + 1, joined);
      return FALSE;
    }
    dfl_tok_merge_insert (tok, a, b, rank, m);
    rank++;
  }
  return TRUE;
}

static gboolean
dfl_tok_parse_model (DflTokenizer *tok, const cJSON *model, GPtrArray *by_id, GError **error)
{
  const char *type;
  const cJSON *item;
  gboolean byte_fallback;

  if (!cJSON_IsObject (model)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "%s: 'model' is %s, expected an object",
                 tok->origin, dfl_json_kind (model));
    return FALSE;
  }
  type = dfl_tok_type (model);
  if (type == NULL) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "%s: the model has no type", tok->origin);
    return FALSE;
  }
  if (strcmp (type, "BPE") != 0) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                 "%s: model type '%s' is not supported (byte-level BPE only)", tok->origin, type);
    return FALSE;
  }
  if (!dfl_tok_bool (model, tok->origin, "model", "byte_fallback", FALSE, &byte_fallback, error)
      || !dfl_tok_bool (model, tok->origin, "model", "fuse_unk", FALSE, &tok->fuse_unk, error)
      || !dfl_tok_bool (model, tok->origin, "model", "ignore_merges", FALSE, &tok->ignore_merges,
                        error))
    return FALSE;
  if (byte_fallback) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                 "%s: model: byte_fallback=true is not supported (byte-level BPE only)", tok->origin);
    return FALSE;
  }
  item = dfl_tok_get (model, "dropout");
  if (item != NULL && !(cJSON_IsNumber (item) && item->valuedouble == 0.0)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                 "%s: model: BPE dropout is not supported (null or 0 only)", tok->origin);
    return FALSE;
  }
  if (!dfl_tok_unset_string (model, tok->origin, "continuing_subword_prefix", error)
      || !dfl_tok_unset_string (model, tok->origin, "end_of_word_suffix", error))
    return FALSE;

  item = cJSON_GetObjectItemCaseSensitive (model, "vocab");
  if (item == NULL) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "%s: model: missing 'vocab'", tok->origin);
    return FALSE;
  }
  if (!dfl_tok_parse_vocab (tok, item, by_id, error))
    return FALSE;
  item = cJSON_GetObjectItemCaseSensitive (model, "merges");
  if (item == NULL) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "%s: model: missing 'merges'", tok->origin);
    return FALSE;
  }
  if (!dfl_tok_parse_merges (tok, item, error))
    return FALSE;

  tok->unk_id = -1;
  item = dfl_tok_get (model, "unk_token");
  if (item != NULL) {
    if (!cJSON_IsString (item)) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: model: 'unk_token' is %s, expected a string or null", tok->origin,
                   dfl_json_kind (item));
      return FALSE;
    }
    tok->unk_id = dfl_tok_vocab_id (tok, item->valuestring);
    if (tok->unk_id < 0) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: model: unk_token '%s' is not in the vocab", tok->origin, item->valuestring);
      return FALSE;
    }
  }
  return TRUE;
}

static void
dfl_tok_set_add (DflTokAddedSet *set, DflTokAdded *a)
{
  guint8 first = (guint8) a->match[0];

  if (set->by_first[first] == NULL)
    set->by_first[first] = g_ptr_array_new ();
  g_ptr_array_add (set->by_first[first], a);
  set->empty = FALSE;
}

static gint
dfl_tok_longer_first (gconstpointer pa, gconstpointer pb)
{
  const DflTokAdded *a = *(DflTokAdded * const *) pa, *b = *(DflTokAdded * const *) pb;

  return a->match_len < b->match_len ? 1 : a->match_len > b->match_len ? -1 : 0;
}

static char *
dfl_tok_nfc (const char *s, gsize len, gsize *out_len)
{
  GString *out = g_string_sized_new (len + 8);
  gsize i = 0;

  /* g_utf8_normalize() stops at a NUL, and NUL neither composes nor
   * decomposes, so normalize between the NULs. */
  while (i <= len) {
    const char *nul = memchr (s + i, '\0', len - i);
    gsize end = nul ? (gsize) (nul - s) : len;

    if (end > i) {
      g_autofree char *n = g_utf8_normalize (s + i, end - i, G_NORMALIZE_NFC);

      g_string_append (out, n);
    }
    if (nul == NULL)
      break;
    g_string_append_c (out, '\0');
    i = end + 1;
  }
  *out_len = out->len;
  return g_string_free (out, FALSE);
}

/* Added tokens. Hugging Face ignores the ids written in the file and gives
 * each token, in file order, its vocab id when its content is a vocab token
 * and the next id after the vocab otherwise (it only warns when that differs
 * from the file). A model whose embeddings follow the file would then be fed
 * other ids than intended, so a disagreement is refused here. */
static gboolean
dfl_tok_parse_added (DflTokenizer *tok, const cJSON *list, GPtrArray *by_id, GError **error)
{
  const cJSON *item;
  guint n, i = 0, entry = 0;
  int next_id = g_hash_table_size (tok->vocab);

  if (list == NULL || cJSON_IsNull (list))
    return TRUE;
  if (!cJSON_IsArray (list)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "%s: 'added_tokens' is %s, expected an array",
                 tok->origin, dfl_json_kind (list));
    return FALSE;
  }
  n = cJSON_GetArraySize (list);
  tok->added = g_new0 (DflTokAdded, n);
  cJSON_ArrayForEach (item, list) {
    DflTokAdded *a = &tok->added[i];
    const cJSON *content = cJSON_GetObjectItemCaseSensitive (item, "content");
    int file_id, want_id;

    entry++;
    if (!cJSON_IsObject (item) || !cJSON_IsString (content)) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: added_tokens: entry %u has no 'content' string", tok->origin, entry);
      return FALSE;
    }
    /* Hugging Face skips empty added tokens. */
    if (content->valuestring[0] == '\0')
      continue;
    if (!dfl_tok_id (cJSON_GetObjectItemCaseSensitive (item, "id"), tok->origin, "added_tokens",
                     &file_id, error)
        || !dfl_tok_bool (item, tok->origin, "added_tokens", "special", FALSE, &a->special, error)
        || !dfl_tok_bool (item, tok->origin, "added_tokens", "single_word", FALSE,
                          &a->single_word, error)
        || !dfl_tok_bool (item, tok->origin, "added_tokens", "lstrip", FALSE, &a->lstrip, error)
        || !dfl_tok_bool (item, tok->origin, "added_tokens", "rstrip", FALSE, &a->rstrip, error)
        || !dfl_tok_bool (item, tok->origin, "added_tokens", "normalized", !a->special,
                          &a->normalized, error))
      return FALSE;
    if (g_hash_table_contains (tok->added_ids, content->valuestring)) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: added_tokens: '%s' is listed twice", tok->origin, content->valuestring);
      return FALSE;
    }
    want_id = dfl_tok_vocab_id (tok, content->valuestring);
    if (want_id < 0)
      want_id = next_id++;
    if (file_id != want_id) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: added_tokens: '%s' has id %d, but Hugging Face would give it id %d",
                   tok->origin, content->valuestring, file_id, want_id);
      return FALSE;
    }
    if (g_utf8_validate (content->valuestring, -1, NULL) == FALSE) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: added_tokens: entry %u is not valid UTF-8", tok->origin, entry);
      return FALSE;
    }
    a->id = file_id;
    a->content = g_strdup (content->valuestring);
    if (a->normalized && tok->nfc) {
      a->match = dfl_tok_nfc (a->content, strlen (a->content), &a->match_len);
    } else {
      a->match = g_strdup (a->content);
      a->match_len = strlen (a->match);
    }
    /* counted from here on, so that dfl_tokenizer_free() frees its strings */
    tok->n_added = ++i;
    if (a->match_len == 0) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: added_tokens: '%s' normalizes to nothing", tok->origin, a->content);
      return FALSE;
    }
    if ((guint) a->id >= by_id->len)
      g_ptr_array_set_size (by_id, a->id + 1);
    g_hash_table_insert (tok->added_ids, a->content, GINT_TO_POINTER (a->id + 1));
    dfl_tok_set_add (a->normalized ? &tok->norm_set : &tok->raw_set, a);
  }
  for (i = 0; i < 256; i++) {
    if (tok->raw_set.by_first[i])
      g_ptr_array_sort (tok->raw_set.by_first[i], dfl_tok_longer_first);
    if (tok->norm_set.by_first[i])
      g_ptr_array_sort (tok->norm_set.by_first[i], dfl_tok_longer_first);
  }
  return TRUE;
}

/* The GPT-2 table: printable Latin-1 bytes stand for themselves, the 68
 * others for U+0100 onwards in byte order, so every byte is a visible
 * character in the vocab. */
static void
dfl_tok_init_bytes (DflTokenizer *tok)
{
  guint b, n = 0;

  for (b = 0; b < DFL_TOK_BYTE_CP_LIMIT; b++)
    tok->cp_byte[b] = -1;
  for (b = 0; b < 256; b++) {
    gunichar cp;

    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))
      cp = b;
    else
      cp = 256 + n++;
    tok->cp_byte[cp] = b;
    tok->byte_utf8_len[b] = g_unichar_to_utf8 (cp, tok->byte_utf8[b]);
    tok->byte_utf8[b][tok->byte_utf8_len[b]] = '\0';
    tok->byte_id[b] = dfl_tok_vocab_id (tok, tok->byte_utf8[b]);
  }
}

/* What the ByteLevel decoder makes of a token: the bytes its characters
 * stand for, or, when one character is outside the table (an added token
 * like "<think>\n"), the token's own UTF-8 unchanged. */
static void
dfl_tok_token_bytes (const DflTokenizer *tok, const char *token, GString *out)
{
  gsize start = out->len;
  const guint8 *s = (const guint8 *) token;
  gsize i = 0, len = strlen (token);

  while (i < len) {
    gunichar c;

    i = dfl_tok_next (s, i, &c);
    if (c >= DFL_TOK_BYTE_CP_LIMIT || tok->cp_byte[c] < 0) {
      g_string_truncate (out, start);
      g_string_append_len (out, token, len);
      return;
    }
    g_string_append_c (out, (char) tok->cp_byte[c]);
  }
}

static gboolean
dfl_tok_check_decoder (DflTokenizer *tok, const cJSON *root, GError **error)
{
  const cJSON *d = cJSON_GetObjectItemCaseSensitive (root, "decoder");
  const cJSON *pp = dfl_tok_get (root, "post_processor");
  const char *type;

  type = cJSON_IsObject (d) ? dfl_tok_type (d) : NULL;
  if (type == NULL || strcmp (type, "ByteLevel") != 0) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                 "%s: decoder '%s' is not supported (ByteLevel only)", tok->origin,
                 type ? type : dfl_json_kind (d));
    return FALSE;
  }
  /* A post-processor that adds tokens (TemplateProcessing's BOS, say) would
   * make encode() disagree with what callers expect from a raw prompt; Qwen
   * ships null or a ByteLevel one, which only moves offsets. Refused rather
   * than implemented. */
  if (pp != NULL) {
    type = cJSON_IsObject (pp) ? dfl_tok_type (pp) : NULL;
    if (type == NULL || strcmp (type, "ByteLevel") != 0) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                   "%s: post_processor '%s' is not supported (null or ByteLevel only)",
                   tok->origin, type ? type : dfl_json_kind (pp));
      return FALSE;
    }
  }
  if (dfl_tok_get (root, "truncation") != NULL || dfl_tok_get (root, "padding") != NULL) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                 "%s: truncation and padding are not supported (they must be null)", tok->origin);
    return FALSE;
  }
  return TRUE;
}

static void
dfl_tok_set_clear (DflTokAddedSet *set)
{
  guint i;

  for (i = 0; i < 256; i++)
    g_clear_pointer (&set->by_first[i], g_ptr_array_unref);
}

void
dfl_tokenizer_free (DflTokenizer *tok)
{
  guint i;

  if (tok == NULL)
    return;
  g_free (tok->origin);
  g_clear_pointer (&tok->vocab, g_hash_table_unref);
  g_clear_pointer (&tok->added_ids, g_hash_table_unref);
  for (i = 0; i < tok->n_added; i++) {
    g_free (tok->added[i].content);
    g_free (tok->added[i].match);
  }
  g_free (tok->added);
  dfl_tok_set_clear (&tok->raw_set);
  dfl_tok_set_clear (&tok->norm_set);
  g_free (tok->pool);
  g_free (tok->tok_off);
  g_free (tok->tok_len);
  g_free (tok->tok_special);
  g_free (tok->merges);
  g_clear_pointer (&tok->cache, g_hash_table_unref);
  g_mutex_clear (&tok->cache_lock);
  g_free (tok);
}

DflTokenizer *
dfl_tokenizer_parse (const char *json, gsize len, const char *origin, GError **error)
{
  g_autoptr (DflTokenizer) tok = NULL;
  g_autoptr (cJSON) root = NULL;
  g_autoptr (GPtrArray) by_id = NULL;
  g_autoptr (GHashTable) specials = NULL;
  GString *pool;
  const char *end = NULL;
  const cJSON *item;
  guint byte_level = 0, i;

  g_return_val_if_fail (json != NULL, NULL);
  tok = g_new0 (DflTokenizer, 1);
  g_mutex_init (&tok->cache_lock);
  tok->origin = g_strdup (origin ? origin : "tokenizer.json");
  tok->vocab = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  tok->added_ids = g_hash_table_new (g_str_hash, g_str_equal);
  tok->cache = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  tok->raw_set.empty = tok->norm_set.empty = TRUE;
  tok->unk_id = -1;
  by_id = g_ptr_array_new ();

  root = dfl_json_parse (json, len, &end, FALSE);
  if (root == NULL || !cJSON_IsObject (root)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 root ? "%s: not a JSON object" : "%s: not valid JSON (error near byte %zu)",
                 tok->origin, end ? (gsize) (end - json) : (gsize) 0);
    return NULL;
  }
  item = dfl_tok_get (root, "version");
  if (item != NULL && !(cJSON_IsString (item) && strcmp (item->valuestring, "1.0") == 0)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                 "%s: tokenizer.json version '%s' is not supported (1.0 only)", tok->origin,
                 cJSON_IsString (item) ? item->valuestring : dfl_json_kind (item));
    return NULL;
  }
  item = cJSON_GetObjectItemCaseSensitive (root, "model");
  if (item == NULL) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "%s: missing 'model'", tok->origin);
    return NULL;
  }
  if (!dfl_tok_parse_model (tok, item, by_id, error)
      || !dfl_tok_parse_normalizer (tok, cJSON_GetObjectItemCaseSensitive (root, "normalizer"),
                                    error))
    return NULL;
  item = dfl_tok_get (root, "pre_tokenizer");
  if (item == NULL) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                 "%s: a null pre_tokenizer is not supported (byte-level BPE needs ByteLevel)",
                 tok->origin);
    return NULL;
  }
  if (!dfl_tok_parse_pre_tokenizer (tok, item, &byte_level, error))
    return NULL;
  if (byte_level != 1) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                 "%s: pre_tokenizer has %u ByteLevel steps, byte-level BPE needs exactly one",
                 tok->origin, byte_level);
    return NULL;
  }
  if (!dfl_tok_check_decoder (tok, root, error)
      || !dfl_tok_parse_added (tok, cJSON_GetObjectItemCaseSensitive (root, "added_tokens"),
                               by_id, error))
    return NULL;
  dfl_tok_init_bytes (tok);

  /* Every id's decoded bytes; an added token's string takes precedence over
   * the vocab's, as in Hugging Face's decode(). */
  tok->n_ids = by_id->len;
  tok->tok_off = g_new0 (guint32, tok->n_ids);
  tok->tok_len = g_new (gint32, tok->n_ids);
  tok->tok_special = g_new0 (guint8, tok->n_ids);
  specials = g_hash_table_new (g_str_hash, g_str_equal);
  for (i = 0; i < tok->n_added; i++) {
    DflTokAdded *a = &tok->added[i];

    g_ptr_array_index (by_id, a->id) = a->normalized && tok->nfc ? a->match : a->content;
    if (a->special)
      g_hash_table_add (specials, a->content);
  }
  pool = g_string_new (NULL);
  for (i = 0; i < tok->n_ids; i++) {
    const char *s = g_ptr_array_index (by_id, i);

    if (s == NULL) {
      tok->tok_len[i] = -1;
      continue;
    }
    if (pool->len > G_MAXINT32) {
      g_string_free (pool, TRUE);
      g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT,
                   "%s: the tokens' bytes pass 2 GiB together, the most accepted", tok->origin);
      return NULL;
    }
    tok->tok_off[i] = pool->len;
    dfl_tok_token_bytes (tok, s, pool);
    tok->tok_len[i] = pool->len - tok->tok_off[i];
    g_string_append_c (pool, '\0');
    /* skip_special drops an id whose string is a special token's content. */
    tok->tok_special[i] = g_hash_table_contains (specials, s);
  }
  tok->pool = g_string_free (pool, FALSE);
  return g_steal_pointer (&tok);
}

DflTokenizer *
dfl_tokenizer_load (const char *path, GError **error)
{
  g_autoptr (GMappedFile) file = NULL;
  g_autoptr (GError) local = NULL;

  g_return_val_if_fail (path != NULL, NULL);
  file = g_mapped_file_new (path, FALSE, &local);
  if (file == NULL) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_IO, "%s: %s", path, local->message);
    return NULL;
  }
  if (g_mapped_file_get_length (file) > DFL_TOK_MAX_FILE) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT, "%s: %zu bytes, more than a tokenizer.json "
                 "can sensibly be (accepted: at most %u)", path, g_mapped_file_get_length (file),
                 DFL_TOK_MAX_FILE);
    return NULL;
  }
  return dfl_tokenizer_parse (g_mapped_file_get_contents (file) ? g_mapped_file_get_contents (file) : "",
                              g_mapped_file_get_length (file), path, error);
}

guint
dfl_tokenizer_vocab_size (const DflTokenizer *tok)
{
  return tok->n_ids;
}

int
dfl_tokenizer_token_id (const DflTokenizer *tok, const char *token)
{
  gpointer v;

  if (g_hash_table_lookup_extended (tok->added_ids, token, NULL, &v))
    return GPOINTER_TO_INT (v) - 1;
  return dfl_tok_vocab_id (tok, token);
}

const char *
dfl_tokenizer_token_bytes (const DflTokenizer *tok, int id, gsize *len)
{
  if (id < 0 || (guint) id >= tok->n_ids || tok->tok_len[id] < 0) {
    if (len)
      *len = 0;
    return NULL;
  }
  if (len)
    *len = tok->tok_len[id];
  return tok->pool + tok->tok_off[id];
}

gboolean
dfl_tokenizer_is_special (const DflTokenizer *tok, int id)
{
  return id >= 0 && (guint) id < tok->n_ids && tok->tok_special[id];
}

/* ------------------------------------------------------------------------ */
/* Encoding                                                                 */

typedef struct {
  gint32 id;          /* -1: merged into its left neighbour */
  gint32 prev, next;
} DflTokSym;

typedef struct {
  guint32 rank;
  guint32 pos;
  gint32 id;
} DflTokCand;

typedef struct {
  const DflTokenizer *tok;
  GArray *ids;
  GArray *syms;
  GArray *heap;
  GString *scratch;
  GPtrArray *pieces;  /* pre_tokenize(): collects the pre-tokens instead of running BPE */
} DflTokEncoder;

static inline gboolean
dfl_tok_cand_less (const DflTokCand *a, const DflTokCand *b)
{
  return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void
dfl_tok_heap_push (GArray *heap, guint32 rank, guint32 pos, gint32 id)
{
  DflTokCand c = { rank, pos, id }, *h;
  guint i;

  g_array_append_val (heap, c);
  h = (DflTokCand *) heap->data;
  for (i = heap->len - 1; i > 0;) {
    guint parent = (i - 1) / 2;
    DflTokCand t;

    if (!dfl_tok_cand_less (&h[i], &h[parent]))
      break;
    t = h[i], h[i] = h[parent], h[parent] = t;
    i = parent;
  }
}

static DflTokCand
dfl_tok_heap_pop (GArray *heap)
{
  DflTokCand *h = (DflTokCand *) heap->data, top = h[0];
  guint i = 0, n = heap->len - 1;

  h[0] = h[n];
  g_array_set_size (heap, n);
  for (;;) {
    guint l = 2 * i + 1, r = l + 1, m = i;
    DflTokCand t;

    if (l < n && dfl_tok_cand_less (&h[l], &h[m]))
      m = l;
    if (r < n && dfl_tok_cand_less (&h[r], &h[m]))
      m = r;
    if (m == i)
      break;
    t = h[i], h[i] = h[m], h[m] = t;
    i = m;
  }
  return top;
}

static void
dfl_tok_push_pair (DflTokEncoder *enc, gint32 left)
{
  DflTokSym *sym = (DflTokSym *) enc->syms->data;
  gint32 right = sym[left].next;
  const DflTokMerge *m;

  if (right < 0)
    return;
  m = dfl_tok_merge_find (enc->tok, sym[left].id, sym[right].id);
  if (m)
    dfl_tok_heap_push (enc->heap, m->rank, left, m->id);
}

static void
dfl_tok_add_sym (DflTokEncoder *enc, gint32 id)
{
  DflTokSym s = { id, (gint32) enc->syms->len - 1, -1 };

  if (enc->syms->len)
    g_array_index (enc->syms, DflTokSym, enc->syms->len - 1).next = enc->syms->len;
  g_array_append_val (enc->syms, s);
}

/* One pre-token (raw bytes, before the byte-level mapping) → ids. */
static void
dfl_tok_bpe (DflTokEncoder *enc, const guint8 *s, gsize len)
{
  const DflTokenizer *tok = enc->tok;
  DflTokenizer *mtok = (DflTokenizer *) tok;
  gboolean cacheable = len < DFL_TOK_CACHE_MAX_KEY && memchr (s, '\0', len) == NULL;
  char key[DFL_TOK_CACHE_MAX_KEY];
  DflTokSym *sym;
  gint32 unk = -1, at;
  guint first = enc->ids->len, i;
  gsize b;

  if (len == 0)
    return;
  if (enc->pieces) {
    g_ptr_array_add (enc->pieces, g_bytes_new (s, len));
    return;
  }
  if (tok->ignore_merges) {
    int id;

    g_string_truncate (enc->scratch, 0);
    for (b = 0; b < len; b++)
      g_string_append_len (enc->scratch, tok->byte_utf8[s[b]], tok->byte_utf8_len[s[b]]);
    id = dfl_tok_vocab_id (tok, enc->scratch->str);
    if (id >= 0) {
      g_array_append_val (enc->ids, id);
      return;
    }
  }
  if (cacheable) {
    const DflTokCached *hit;

    memcpy (key, s, len);
    key[len] = '\0';
    g_mutex_lock (&mtok->cache_lock);
    hit = g_hash_table_lookup (tok->cache, key);
    if (hit)
      g_array_append_vals (enc->ids, hit->ids, hit->n);
    g_mutex_unlock (&mtok->cache_lock);
    if (hit)
      return;
  }

  /* Symbols: one per byte, with Hugging Face's handling of symbols missing
   * from the vocab (dropped without unk_token; with it, one unk each, or one
   * for a run when fuse_unk). */
  g_array_set_size (enc->syms, 0);
  g_array_set_size (enc->heap, 0);
  for (b = 0; b < len; b++) {
    gint32 id = tok->byte_id[s[b]];

    if (id >= 0) {
      if (unk >= 0)
        dfl_tok_add_sym (enc, unk);
      unk = -1;
      dfl_tok_add_sym (enc, id);
    } else if (tok->unk_id >= 0) {
      if (unk >= 0 && !tok->fuse_unk)
        dfl_tok_add_sym (enc, unk);
      unk = tok->unk_id;
    }
  }
  if (unk >= 0)
    dfl_tok_add_sym (enc, unk);

  /* Lowest rank first, leftmost first among equals; candidates that went
   * stale when a neighbour merged are dropped when they surface. */
  for (i = 0; i + 1 < enc->syms->len; i++)
    dfl_tok_push_pair (enc, i);
  while (enc->heap->len) {
    DflTokCand c = dfl_tok_heap_pop (enc->heap);
    const DflTokMerge *m;
    gint32 right, after;

    sym = (DflTokSym *) enc->syms->data;
    if (sym[c.pos].id < 0 || (right = sym[c.pos].next) < 0)
      continue;
    m = dfl_tok_merge_find (tok, sym[c.pos].id, sym[right].id);
    if (m == NULL || m->id != c.id)
      continue;
    sym[c.pos].id = c.id;
    after = sym[right].next;
    sym[c.pos].next = after;
    if (after >= 0)
      sym[after].prev = c.pos;
    sym[right].id = -1;
    if (sym[c.pos].prev >= 0)
      dfl_tok_push_pair (enc, sym[c.pos].prev);
    dfl_tok_push_pair (enc, c.pos);
  }

  /* Merges fold the right symbol into the left one, so the first symbol
   * always heads the list. */
  sym = (DflTokSym *) enc->syms->data;
  for (at = enc->syms->len ? 0 : -1; at >= 0; at = sym[at].next) {
    int id = sym[at].id;

    g_array_append_val (enc->ids, id);
  }

  if (cacheable) {
    guint n = enc->ids->len - first;
    DflTokCached *val = g_malloc (sizeof (DflTokCached) + n * sizeof (int));

    val->n = n;
    /* A piece can encode to nothing (every byte missing from the vocab and
     * no unk_token), and an empty GArray's data may be NULL. */
    if (n > 0)
      memcpy (val->ids, &g_array_index (enc->ids, int, first),
          n * sizeof (int));
    g_mutex_lock (&mtok->cache_lock);
    if (g_hash_table_size (tok->cache) < DFL_TOK_CACHE_MAX_ENTRIES
        && !g_hash_table_contains (tok->cache, key)) {
      g_hash_table_insert (tok->cache, g_strdup (key), val);
      val = NULL;
    }
    g_mutex_unlock (&mtok->cache_lock);
    g_free (val);
  }
}

/* Runs pre-tokenizer step `step` over a piece, then BPE on what comes out. */
static void
dfl_tok_pretokenize (DflTokEncoder *enc, guint step, const guint8 *s, gsize len)
{
  gsize i = 0;

  if (step == enc->tok->n_steps) {
    dfl_tok_bpe (enc, s, len);
    return;
  }
  while (i < len) {
    gsize end = enc->tok->steps[step] (s, len, i);

    g_assert (end > i && end <= len);
    dfl_tok_pretokenize (enc, step + 1, s + i, end - i);
    i = end;
  }
}

typedef void (*DflTokPieceFunc) (DflTokEncoder *enc, const char *s, gsize len);

static gboolean
dfl_tok_word_before (const guint8 *s, gsize i)
{
  gunichar c;

  if (i == 0)
    return FALSE;
  dfl_tok_next (s, dfl_tok_prev (s, i), &c);
  return dfl_tok_is_word (c);
}

/* Splits `s` on the added tokens of `set` as Hugging Face's AddedVocabulary
 * does: leftmost-longest matches that do not overlap; a single_word token
 * that touches a word character is passed over (and the search goes on after
 * it); lstrip and rstrip swallow the white space beside the token. Pieces
 * between tokens go to `piece`. */
static void
dfl_tok_split_added (DflTokEncoder *enc, const DflTokAddedSet *set, const char *str, gsize len,
                     DflTokPieceFunc piece)
{
  const guint8 *s = (const guint8 *) str;
  gsize pos = 0, start_offset = 0;

  if (set->empty) {
    piece (enc, str, len);
    return;
  }
  while (pos < len) {
    GPtrArray *bucket = set->by_first[s[pos]];
    const DflTokAdded *hit = NULL;
    gsize start, stop;
    guint k;

    for (k = 0; bucket && k < bucket->len; k++) {
      const DflTokAdded *a = g_ptr_array_index (bucket, k);

      if (a->match_len <= len - pos && memcmp (s + pos, a->match, a->match_len) == 0) {
        hit = a;
        break;
      }
    }
    if (hit == NULL) {
      pos++;
      continue;
    }
    start = pos;
    stop = pos + hit->match_len;
    pos = stop;
    if (hit->single_word) {
      gunichar c = 0;

      if (stop < len)
        dfl_tok_next (s, stop, &c);
      if (dfl_tok_word_before (s, start) || (stop < len && dfl_tok_is_word (c)))
        continue;
    }
    if (hit->lstrip) {
      gsize ws = start;

      while (ws > 0) {
        gsize p = dfl_tok_prev (s, ws);
        gunichar c;

        dfl_tok_next (s, p, &c);
        if (!dfl_tok_is_space (c))
          break;
        ws = p;
      }
      start = MAX (ws, start_offset);
    }
    if (hit->rstrip) {
      while (stop < len) {
        gunichar c;
        gsize n = dfl_tok_next (s, stop, &c);

        if (!dfl_tok_is_space (c))
          break;
        stop = n;
      }
    }
    if (start_offset < start)
      piece (enc, str + start_offset, start - start_offset);
    g_array_append_val (enc->ids, hit->id);
    start_offset = stop;
  }
  if (start_offset < len)
    piece (enc, str + start_offset, len - start_offset);
}

static void
dfl_tok_normalized_piece (DflTokEncoder *enc, const char *s, gsize len)
{
  dfl_tok_pretokenize (enc, 0, (const guint8 *) s, len);
}

/* Code points below U+0300 are all NFC_Quick_Check=Yes with combining class
 * 0, and nothing below U+0300 composes with them, so such text is already
 * NFC and g_utf8_normalize() can be skipped. */
static gboolean
dfl_tok_nfc_trivial (const guint8 *s, gsize len)
{
  gsize i;

  for (i = 0; i < len; i++)
    if (s[i] >= 0xCC)
      return FALSE;
  return TRUE;
}

static void
dfl_tok_raw_piece (DflTokEncoder *enc, const char *s, gsize len)
{
  const DflTokenizer *tok = enc->tok;

  if (tok->nfc && !dfl_tok_nfc_trivial ((const guint8 *) s, len)) {
    gsize n_len;
    g_autofree char *n = dfl_tok_nfc (s, len, &n_len);

    dfl_tok_split_added (enc, &tok->norm_set, n, n_len, dfl_tok_normalized_piece);
    return;
  }
  dfl_tok_split_added (enc, &tok->norm_set, s, len, dfl_tok_normalized_piece);
}

static gboolean
dfl_tok_encode (const DflTokenizer *tok, const char *text, gssize len, GPtrArray *pieces,
                GArray **ids, GError **error)
{
  DflTokEncoder enc = { tok, NULL, NULL, NULL, NULL, pieces };
  gssize bad;

  if (len < 0)
    len = strlen (text);
  bad = dfl_tok_utf8_check ((const guint8 *) text, len);
  if (bad >= 0) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "text to encode is not valid UTF-8 (bad byte 0x%02x at offset %zd)",
                 (guint8) text[bad], bad);
    return FALSE;
  }
  enc.ids = g_array_new (FALSE, FALSE, sizeof (int));
  enc.syms = g_array_new (FALSE, FALSE, sizeof (DflTokSym));
  enc.heap = g_array_new (FALSE, FALSE, sizeof (DflTokCand));
  enc.scratch = g_string_new (NULL);
  dfl_tok_split_added (&enc, &tok->raw_set, text, len, dfl_tok_raw_piece);
  g_array_unref (enc.syms);
  g_array_unref (enc.heap);
  g_string_free (enc.scratch, TRUE);
  if (ids)
    *ids = enc.ids;
  else
    g_array_unref (enc.ids);
  return TRUE;
}

GArray *
dfl_tokenizer_encode (const DflTokenizer *tok, const char *text, gssize len, GError **error)
{
  GArray *ids = NULL;

  g_return_val_if_fail (tok != NULL && text != NULL, NULL);
  dfl_tok_encode (tok, text, len, NULL, &ids, error);
  return ids;
}

GPtrArray *
dfl_tokenizer_pre_tokenize (const DflTokenizer *tok, const char *text, gssize len, GError **error)
{
  g_autoptr (GPtrArray) pieces = NULL;

  g_return_val_if_fail (tok != NULL && text != NULL, NULL);
  pieces = g_ptr_array_new_with_free_func ((GDestroyNotify) g_bytes_unref);
  if (!dfl_tok_encode (tok, text, len, pieces, NULL, error))
    return NULL;
  return g_steal_pointer (&pieces);
}

/* ------------------------------------------------------------------------ */
/* Decoding                                                                 */

/* Appends p[0..len) to out with each maximal ill-formed subsequence replaced
 * by one U+FFFD, exactly as Rust's String::from_utf8_lossy (which Hugging
 * Face's ByteLevel decoder uses) does. Unless `final`, stops before an
 * incomplete character at the end and returns how many bytes it used. */
static gsize
dfl_tok_lossy (const guint8 *p, gsize len, gboolean final, GString *out)
{
  static const char fffd[] = "\xEF\xBF\xBD";
  gsize i = 0;

  while (i < len) {
    guint8 b = p[i];
    guint need, k;
    guint8 lo, hi;

    if (b < 0x80) {
      g_string_append_c (out, (char) b);
      i++;
      continue;
    }
    if (!dfl_tok_utf8_lead (b, &need, &lo, &hi)) {
      g_string_append_len (out, fffd, 3);
      i++;
      continue;
    }
    for (k = 1; k <= need; k++) {
      guint8 c;

      if (i + k >= len) {
        if (!final)
          return i;
        g_string_append_len (out, fffd, 3);
        return len;
      }
      c = p[i + k];
      if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF))
        break;
    }
    if (k > need)
      g_string_append_len (out, (const char *) p + i, need + 1);
    else
      g_string_append_len (out, fffd, 3);
    i += k > need ? need + 1 : k;
  }
  return len;
}

static void
dfl_tok_append_id (const DflTokenizer *tok, GByteArray *bytes, int id, gboolean skip_special)
{
  if (id < 0 || (guint) id >= tok->n_ids || tok->tok_len[id] < 0)
    return;
  if (skip_special && tok->tok_special[id])
    return;
  g_byte_array_append (bytes, (const guint8 *) tok->pool + tok->tok_off[id], tok->tok_len[id]);
}

static char *
dfl_tok_steal (GString *out, gsize *len)
{
  if (len)
    *len = out->len;
  return g_string_free (out, FALSE);
}

char *
dfl_tokenizer_decode_len (const DflTokenizer *tok, const int *ids, gsize n, gboolean skip_special,
                          gsize *len)
{
  g_autoptr (GByteArray) bytes = g_byte_array_new ();
  GString *out;
  gsize i;

  g_return_val_if_fail (tok != NULL && (ids != NULL || n == 0), NULL);
  for (i = 0; i < n; i++)
    dfl_tok_append_id (tok, bytes, ids[i], skip_special);
  out = g_string_sized_new (bytes->len + 1);
  dfl_tok_lossy (bytes->data, bytes->len, TRUE, out);
  return dfl_tok_steal (out, len);
}

char *
dfl_tokenizer_decode (const DflTokenizer *tok, const int *ids, gsize n, gboolean skip_special)
{
  return dfl_tokenizer_decode_len (tok, ids, n, skip_special, NULL);
}

struct _DflDetokenizer {
  const DflTokenizer *tok;
  gboolean skip_special;
  GByteArray *pending;     /* the start of a character still incomplete */
};

DflDetokenizer *
dfl_detokenizer_new (const DflTokenizer *tok, gboolean skip_special)
{
  DflDetokenizer *d = g_new0 (DflDetokenizer, 1);

  d->tok = tok;
  d->skip_special = skip_special;
  d->pending = g_byte_array_new ();
  return d;
}

void
dfl_detokenizer_free (DflDetokenizer *d)
{
  if (d == NULL)
    return;
  g_byte_array_unref (d->pending);
  g_free (d);
}

/* from_utf8_lossy decides each replacement from at most the next four bytes
 * and only stops short at the end of its input, so running it over the bytes
 * as they come, holding back an incomplete tail, gives the same text as one
 * decode() of all the ids. */
char *
dfl_detokenizer_push_len (DflDetokenizer *d, int id, gsize *len)
{
  GString *out = g_string_new (NULL);
  gsize used;

  dfl_tok_append_id (d->tok, d->pending, id, d->skip_special);
  used = dfl_tok_lossy (d->pending->data, d->pending->len, FALSE, out);
  g_byte_array_remove_range (d->pending, 0, used);
  return dfl_tok_steal (out, len);
}

char *
dfl_detokenizer_push (DflDetokenizer *d, int id)
{
  return dfl_detokenizer_push_len (d, id, NULL);
}

char *
dfl_detokenizer_finish_len (DflDetokenizer *d, gsize *len)
{
  GString *out = g_string_new (NULL);

  dfl_tok_lossy (d->pending->data, d->pending->len, TRUE, out);
  g_byte_array_set_size (d->pending, 0);
  return dfl_tok_steal (out, len);
}

char *
dfl_detokenizer_finish (DflDetokenizer *d)
{
  return dfl_detokenizer_finish_len (d, NULL);
}
