/* gst-dflash — a list of token ids as a user writes it: "151644, 872, 198".
 *
 * `dflash generate --tokens`, `dflash draft --tokens` and tapsource's tokens
 * property read prompts given as ids this way.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* The most ids one list may hold: far past any context we run, and small
 * enough that a list is never an absurd allocation. */
#define DFL_TOKEN_LIST_MAX 16777216

/* Append the ids of `text` (decimal integers separated by commas, blanks
 * around them allowed) to `ids` (an array of int). `what` names the argument
 * or property in messages ("--tokens", "tapsource: tokens"). Where `vocab` is
 * above 0 every id must be in 0 … vocab − 1, and `vocab_origin` (the model's
 * folder) is named when one is not. FALSE with a DFL_ERROR_INVALID error
 * naming the offending entry and what is accepted; `ids` may then hold part
 * of the list. */
gboolean dfl_token_list_parse (const char *text, const char *what, int vocab,
                               const char *vocab_origin, GArray *ids, GError **error);

G_END_DECLS
