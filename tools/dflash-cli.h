/* gst-dflash — the `dflash` command: shared bits of its subcommands. */
#pragma once

#include <glib.h>

#include "drafter.h"
#include "round.h"
#include "target.h"

G_BEGIN_DECLS

/* Exit statuses: 0 success, 2 a usage error, 1 any other error. */
enum { DFL_EXIT_OK = 0, DFL_EXIT_ERROR = 1, DFL_EXIT_USAGE = 2 };

int dfl_cmd_generate (int argc, char **argv);
int dfl_cmd_inspect (int argc, char **argv);
int dfl_cmd_draft (int argc, char **argv);
int dfl_cmd_route_fit (int argc, char **argv);
int dfl_cmd_ab (int argc, char **argv);
int dfl_cmd_serve (int argc, char **argv);

/* One line on stderr, "dflash: <message>", and the status to exit with. */
int dfl_cli_fail (int status, const char *fmt, ...) G_GNUC_PRINTF (2, 3);
/* The same for a GError (consumed). */
int dfl_cli_fail_error (GError *error);
/* Parse a subcommand's options; prints the usage error itself. */
gboolean dfl_cli_parse (GOptionContext *ctx, int *argc, char ***argv);

/* "1,2,3" → ids (appended); an error for text that is not a list of
 * integers. */
gboolean dfl_cli_parse_tokens (const char *text, GArray *ids, GError **error);
/* Every id inside the vocabulary of `vocab` tokens, else an error naming the
 * id and the target. */
gboolean dfl_cli_check_tokens (GArray *ids, int vocab, const char *target_dir, GError **error);
/* The drafter to use: `path` (--drafter), else dflash.safetensors in the
 * target's folder; checked against the target. NULL without an error where
 * there is none. */
DflDrafterWeights *dfl_cli_open_drafter (const char *path, const DflTarget *target, GError **error);

/* A property value for a launch description: quoted, \ and " escaped. */
char *dfl_cli_quoted (const char *v);
/* The launch description of the loop `route` asks for after `source` (a
 * tapsource's description), with the selector's `select` mode and
 * `head_width`: what `dflash generate` and `dflash serve` run. It ends in
 * the verifier `v`, its text in the fakesink `text` and its ids in the
 * fakesink `ids` (both signalling handoffs). */
char *dfl_cli_describe (DflRoute route, const char *source, const char *select, int head_width);

/* The folder of the model `dflash` uses when none is named: $DFLASH_MODEL,
 * else the embedded default pair. */
const char *dfl_cli_default_target (void);

G_END_DECLS
