/* gst-dflash — the `dflash` command: shared bits of its subcommands. */
#pragma once

#include <glib.h>
#include <gst/gst.h>

#include "drafter.h"
#include "gstdflashcaps.h"
#include "gstdflashmodel.h"
#include "round.h"
#include "route-cost.h"
#include "target.h"

G_BEGIN_DECLS

/* Exit statuses: 0 success, 2 a usage error, 1 any other error. */
enum { DFL_EXIT_OK = 0, DFL_EXIT_ERROR = 1, DFL_EXIT_USAGE = 2 };

int dfl_cmd_generate (int argc, char **argv);
int dfl_cmd_inspect (int argc, char **argv);
int dfl_cmd_quantize (int argc, char **argv);
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
 * `head_width`, its stages on `backend`: what `dflash generate` and
 * `dflash serve` run. It ends in the verifier `v`, its text in the fakesink
 * `text` and its ids in the fakesink `ids` (both signalling handoffs). */
char *dfl_cli_describe (DflRoute route, const char *source, const char *select, int head_width,
                        const char *route_figures, GstDflashBackend backend);

/* --backend (NULL: cpu) into `out`: cpu, cuda (the target and the drafter
 * on the card) or vulkan (the drafter on a Vulkan device, the target on
 * the CPU). DFL_EXIT_OK, else the usage error printed as "dflash: cmd: …"
 * and its status. */
int dfl_cli_backend (const char *cmd, const char *name, GstDflashBackend *out);
#define DFL_CLI_BACKEND_HELP \
  "Where the pipeline runs: cpu (the default), cuda (the target and the drafter on the card) " \
  "or vulkan (the drafter on a Vulkan device, the target on the CPU)"
/* The route figures' place of a run on `backend`: a target on the card
 * has figures of its own. */
DflRoutePlace dfl_cli_route_place (GstDflashBackend backend);
/* The cost router's figures file (the router's figures-file) for a pair:
 * `option` where given (--route-figures; "none": NULL, no file), else one
 * file a (target, drafter, kernel threads) under the user's cache folder,
 * gst-dflash/route/, so each run on this machine starts from the last
 * one's figures. */
char *dfl_cli_route_figures (const char *option, const char *target, const char *drafter);

/* The drafting options `dflash generate` and `dflash serve` share, checked:
 * --route (its value into `route`, left as it is where `route_name` is
 * NULL), --select, --head-width and --no-draft against --route. DFL_EXIT_OK,
 * else the usage error printed as "dflash: cmd: …" and its status. */
int dfl_cli_check_draft_options (const char *cmd, const char *route_name, const char *select,
                                 int head_width, gboolean no_draft, DflRoute *route);

/* --drafter-weights (NULL: the default, q8_0) into `out`: DFL_EXIT_OK,
 * else the usage error printed as "dflash: cmd: …" and its status. */
int dfl_cli_drafter_weights (const char *cmd, const char *name, GstDflashDrafterWeights *out);
#define DFL_CLI_DRAFTER_WEIGHTS_HELP \
  "How the drafter holds its matrices on the CPU: q8_0 (the default; quantized when loaded, " \
  "about twice as fast a block, the same output) or stored (the sidecar's: the reference's " \
  "exact drafts)"

/* GStreamer started and the elements registered in this process, as every
 * subcommand that runs a pipeline needs them. */
gboolean dfl_cli_init_elements (GError **error);

/* What the verifier's text and ids hand over in a run (the fakesinks `text`
 * and `ids` of dfl_cli_describe, or any with signal-handoffs=true). */
typedef struct {
  GString *text;
  GArray *ids;
  gboolean echo;    /* the text also to stdout as it comes */
} DflCliOutput;

void dfl_cli_output_init (DflCliOutput *o, gboolean echo);
void dfl_cli_output_clear (DflCliOutput *o);
/* The fakesinks' handoff callbacks, `o` their data. */
void dfl_cli_output_on_text (GstElement *sink, GstBuffer *buf, GstPad *pad, DflCliOutput *o);
void dfl_cli_output_on_ids (GstElement *sink, GstBuffer *buf, GstPad *pad, DflCliOutput *o);

/* The folder of the model `dflash` uses when none is named: $DFLASH_MODEL,
 * else the embedded default pair. */
const char *dfl_cli_default_target (void);

G_END_DECLS
