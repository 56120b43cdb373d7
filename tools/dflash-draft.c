/* gst-dflash — `dflash draft`: one block, dumped for checking against other
 * implementations.
 *
 * The context is every token but the last (positions 0 … n−2); the anchor is
 * the last token, at position n−1. The dump holds the target's logits over
 * all n tokens, the context rows' taps, the block's rows after the final
 * norm, their logits under the whole head, and the drafts with and without
 * the selector.
 */
#include <stdio.h>

#include "dfl-kernels.h"
#include "dflash-cli.h"
#include "drafter.h"
#include "safetensors.h"
#include "target.h"

int
dfl_cmd_draft (int argc, char **argv)
{
  g_autofree char *target_dir = NULL, *drafter_path = NULL, *tokens = NULL, *dump = NULL;
  GOptionEntry entries[] = {
    { "target", 0, 0, G_OPTION_ARG_FILENAME, &target_dir, "Qwen3 checkpoint folder or .gguf file", "DIR|FILE" },
    { "drafter", 0, 0, G_OPTION_ARG_FILENAME, &drafter_path, "DFlash sidecar or released DFlash folder (default: dflash.safetensors in the target folder, X.dflash.safetensors beside X.gguf)", "FILE|DIR" },
    { "tokens", 0, 0, G_OPTION_ARG_STRING, &tokens, "The context then the anchor, as token ids (at least 2)", "1,2,3" },
    { "dump", 0, 0, G_OPTION_ARG_FILENAME, &dump, "safetensors file to write", "OUT" },
    { NULL }
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("- one block, dumped");
  g_autoptr (GError) error = NULL;
  g_autoptr (DflTarget) target = NULL;
  g_autoptr (DflDrafterWeights) drafter = NULL, bound = NULL;
  g_autoptr (DflDraftCtx) draft = NULL;
  g_autoptr (DflTargetSeq) seq = NULL;
  g_autoptr (GArray) ids = NULL;
  g_autoptr (DflSafetensorsWriter) w = NULL;
  g_autofree float *target_logits = NULL, *taps = NULL, *block = NULL;
  const float *h, *logits;
  DflDraftTrunk trunk;
  DflTensor out;
  g_autofree guint32 *chosen = NULL, *plain = NULL;
  const DflQwen3Config *c;
  const DflDrafterGeometry *g;
  int n, tw, rows;

  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!dfl_cli_parse (ctx, &argc, &argv))
    return DFL_EXIT_USAGE;
  if (argc > 1)
    return dfl_cli_fail (DFL_EXIT_USAGE, "draft: unexpected argument '%s'", argv[1]);
  if (!target_dir || !tokens || !dump)
    return dfl_cli_fail (DFL_EXIT_USAGE, "draft: --target, --tokens and --dump are required (see --help)");
  ids = g_array_new (FALSE, FALSE, sizeof (int));
  if (!dfl_cli_parse_tokens (tokens, ids, &error))
    return dfl_cli_fail (DFL_EXIT_USAGE, "%s", error->message);
  if (ids->len < 2)
    return dfl_cli_fail (DFL_EXIT_USAGE, "draft: --tokens has %u id; it needs the context and the "
                         "anchor: 2 ids at least", ids->len);

  if (!(target = dfl_target_load (target_dir, &error)))
    return dfl_cli_fail_error (g_steal_pointer (&error));
  c = dfl_target_config (target);
  if (!dfl_cli_check_tokens (ids, c->vocab, target_dir, &error))
    return dfl_cli_fail_error (g_steal_pointer (&error));
  if (!(drafter = dfl_cli_open_drafter (drafter_path, target, &error))) {
    if (error)
      return dfl_cli_fail_error (g_steal_pointer (&error));
    return dfl_cli_fail (DFL_EXIT_ERROR, "%s: no dflash.safetensors; name the drafter with --drafter", target_dir);
  }
  g = dfl_drafter_weights_geometry (drafter);
  n = ids->len;
  tw = dfl_drafter_geometry_tap_width (g);
  rows = g->block - 1;

  target_logits = g_new (float, (gsize) n * c->vocab);
  taps = g_new (float, (gsize) n * tw);
  seq = dfl_target_seq_new (target);
  {
    DflForwardOut out = { .tap_layers = g->taps, .n_tap_layers = g->n_taps, .taps = taps,
                          .logits_from = 0, .logits = target_logits };
    if (!dfl_target_forward (target, seq, (int *) ids->data, n, &out, &error))
      return dfl_cli_fail_error (g_steal_pointer (&error));
  }
  if (!dfl_draft_trunk_of_target (&trunk, target, &error)
      || !(bound = dfl_drafter_weights_bind (drafter, NULL, &trunk, DFL_DTYPE_F32, &error))
      || !(draft = dfl_draft_ctx_new (bound, &error))
      || !dfl_draft_ctx_queue_host (draft, 0, taps, n - 1, &error))
    return dfl_cli_fail_error (g_steal_pointer (&error));

  block = g_malloc (dfl_draft_ctx_block_bytes (draft, c->vocab));
  out = dfl_tensor_2d (NULL, block, 0, DFL_DTYPE_F32, rows, c->hidden + c->vocab);
  chosen = g_new (guint32, rows);
  plain = g_new (guint32, rows);
  if (!dfl_draft_ctx_block (draft, n - 1, g_array_index (ids, int, n - 1), c->vocab, &out, &error)
      || !dfl_draft_ctx_select (draft, &out, c->vocab, g_array_index (ids, int, n - 1), chosen,
                                plain, &error))
    return dfl_cli_fail_error (g_steal_pointer (&error));
  /* every row of the block, the anchor's too, then the drafting rows' logits */
  h = dfl_draft_ctx_block_rows (draft);
  logits = block + (gsize) rows * c->hidden;

  w = dfl_safetensors_writer_new ();
  {
    gint64 s_tl[2] = { n, c->vocab }, s_taps[2] = { n - 1, tw }, s_h[2] = { g->block, c->hidden },
        s_l[2] = { rows, c->vocab }, s_d[1] = { rows };
    if (!dfl_safetensors_writer_add (w, "target_logits", DFL_DTYPE_F32, 2, s_tl, target_logits, &error)
        || !dfl_safetensors_writer_add (w, "taps", DFL_DTYPE_F32, 2, s_taps, taps, &error)
        || !dfl_safetensors_writer_add (w, "block_hidden", DFL_DTYPE_F32, 2, s_h, h, &error)
        || !dfl_safetensors_writer_add (w, "logits", DFL_DTYPE_F32, 2, s_l, logits, &error)
        || !dfl_safetensors_writer_add (w, "drafts", DFL_DTYPE_I32, 1, s_d, chosen, &error)
        || !dfl_safetensors_writer_add (w, "plain", DFL_DTYPE_I32, 1, s_d, plain, &error)
        || !dfl_safetensors_writer_write (w, dump, &error))
      return dfl_cli_fail_error (g_steal_pointer (&error));
  }
  printf ("%s: %d context rows, anchor %d at position %d; drafts", dump, n - 1,
          g_array_index (ids, int, n - 1), n - 1);
  for (int r = 0; r < rows; r++)
    printf (" %u", chosen[r]);
  printf ("\n");
  return DFL_EXIT_OK;
}
