/* gst-dflash — Hugging Face tokenizer.json (or a .gguf file's
 * tokenizer.ggml.* metadata, tokenizer-gguf.c): byte-level BPE with the
 * pre-tokenizers Qwen2/Qwen3 use (a Split on the GPT-4-style regex with
 * Unicode classes, then ByteLevel), an optional NFC normalizer, added and
 * special tokens.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

typedef struct _DflTokenizer DflTokenizer;

DflTokenizer *dfl_tokenizer_load (const char *path, GError **error);
DflTokenizer *dfl_tokenizer_parse (const char *json, gsize len, const char *origin, GError **error);
/* The tokenizer a .gguf file carries in its tokenizer.ggml.* metadata
 * (tokenizer-gguf.c: model gpt2, pre qwen2), read as the tokenizer.json it
 * was converted from. */
DflTokenizer *dfl_tokenizer_load_gguf (const char *path, GError **error);
/* The tokenizer of a target checkpoint: tokenizer.json in a folder, the
 * metadata of a .gguf file. *present says whether it has one: where it has
 * none, NULL without an error. */
DflTokenizer *dfl_tokenizer_load_checkpoint (const char *path, gboolean *present,
                                             GError **error);
void dfl_tokenizer_free (DflTokenizer *tok);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (DflTokenizer, dfl_tokenizer_free)

/* Ids 0 … size-1 (added tokens included). */
guint dfl_tokenizer_vocab_size (const DflTokenizer *tok);
/* The id of a token (added tokens included), or -1. */
int dfl_tokenizer_token_id (const DflTokenizer *tok, const char *token);
/* `text` is UTF-8 (`len` -1: NUL-terminated); added tokens are matched as
 * Hugging Face does. Returns the ids (g_array_unref it), or NULL with an
 * error for text that is not UTF-8. */
GArray *dfl_tokenizer_encode (const DflTokenizer *tok, const char *text, gssize len, GError **error);
/* The text of the ids; special tokens are skipped when `skip_special`.
 * Invalid UTF-8 in the bytes (a cut character) comes out as U+FFFD, as
 * Hugging Face's decoder does. */
char *dfl_tokenizer_decode (const DflTokenizer *tok, const int *ids, gsize n, gboolean skip_special);
/* Ids out of range (negative, ≥ vocab size, or holes in the vocab) are
 * skipped by decode and the detokenizer, and dfl_tokenizer_token_bytes()
 * returns NULL for them. The text is NUL-terminated, but it may also hold
 * U+0000 where a token stands for byte 0; the _len variants give the length
 * in bytes (`len` may be NULL) for callers that must keep such text whole. */
char *dfl_tokenizer_decode_len (const DflTokenizer *tok, const int *ids, gsize n,
                                gboolean skip_special, gsize *len);
/* The raw bytes of one token (after byte-level decoding, NUL-terminated);
 * NULL for an id out of range. */
const char *dfl_tokenizer_token_bytes (const DflTokenizer *tok, int id, gsize *len);
gboolean dfl_tokenizer_is_special (const DflTokenizer *tok, int id);
/* For tests and debugging: the pre-tokens BPE would see, in order, as GBytes
 * of normalized UTF-8 (before the byte-level mapping); added tokens are left
 * out. NULL with an error for text that is not UTF-8. */
GPtrArray *dfl_tokenizer_pre_tokenize (const DflTokenizer *tok, const char *text, gssize len,
                                       GError **error);

/* Streaming decode: push ids as they come, take text that never ends inside a
 * UTF-8 character. */
typedef struct _DflDetokenizer DflDetokenizer;

DflDetokenizer *dfl_detokenizer_new (const DflTokenizer *tok, gboolean skip_special);
void dfl_detokenizer_free (DflDetokenizer *d);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (DflDetokenizer, dfl_detokenizer_free)
/* The complete characters now available (possibly ""); g_free() it. */
char *dfl_detokenizer_push (DflDetokenizer *d, int id);
/* What is left at the end (an incomplete character becomes U+FFFD). */
char *dfl_detokenizer_finish (DflDetokenizer *d);
/* The same, with the length in bytes (see dfl_tokenizer_decode_len()). */
char *dfl_detokenizer_push_len (DflDetokenizer *d, int id, gsize *len);
char *dfl_detokenizer_finish_len (DflDetokenizer *d, gsize *len);

G_END_DECLS
