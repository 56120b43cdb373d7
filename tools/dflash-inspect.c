/* gst-dflash — `dflash inspect PATH`: what a checkpoint folder or a
 * safetensors file holds. */
#include <stdio.h>
#include <string.h>

#include "dflash-cli.h"
#include "qwen3-config.h"
#include "safetensors.h"
#include "tokenizer.h"

static void
print_bytes (guint64 bytes)
{
  g_autofree char *s = g_format_size_full (bytes, G_FORMAT_SIZE_IEC_UNITS);
  printf ("%s", s);
}

/* Tensors per dtype, their bytes and parameters. */
static void
print_tensor_summary (const DflSafetensors *st)
{
  guint count[DFL_DTYPE_U8 + 1] = { 0 };
  guint64 bytes[DFL_DTYPE_U8 + 1] = { 0 }, params = 0, total = 0;
  guint n = dfl_safetensors_n_tensors (st);

  for (guint i = 0; i < n; i++) {
    const DflStoredTensor *t = dfl_safetensors_nth (st, i);
    count[t->dtype]++;
    bytes[t->dtype] += t->n_bytes;
    params += t->n_elements;
    total += t->n_bytes;
  }
  printf ("  tensors:    %u (", n);
  for (int d = 0, first = 1; d <= DFL_DTYPE_U8; d++) {
    if (!count[d])
      continue;
    printf ("%s%u %s", first ? "" : ", ", count[d], dfl_dtype_name (d));
    first = 0;
  }
  printf ("), %" G_GUINT64_FORMAT " parameters, ", params);
  print_bytes (total);
  printf ("\n");
}

static void
print_tensors (const DflSafetensors *st)
{
  for (guint i = 0; i < dfl_safetensors_n_tensors (st); i++) {
    const DflStoredTensor *t = dfl_safetensors_nth (st, i);
    printf ("    %-56s %-4s [", t->name, dfl_dtype_name (t->dtype));
    for (guint d = 0; d < t->n_dims; d++)
      printf ("%s%" G_GINT64_FORMAT, d ? ", " : "", t->shape[d]);
    printf ("]\n");
  }
}

static int
inspect_checkpoint (const char *dir, gboolean list)
{
  DflQwen3Config c;
  g_autoptr (GError) error = NULL;
  g_autoptr (DflSafetensors) st = NULL;
  g_autoptr (DflTokenizer) tok = NULL;
  g_autofree char *tok_path = g_build_filename (dir, "tokenizer.json", NULL);

  if (!dfl_qwen3_config_load (&c, dir, &error))
    return dfl_cli_fail_error (g_steal_pointer (&error));
  if (!(st = dfl_safetensors_open (dir, &error)))
    return dfl_cli_fail_error (g_steal_pointer (&error));
  printf ("%s: Qwen3 checkpoint\n", dir);
  printf ("  geometry:   hidden %d, %d layers, %d heads over %d KV heads, head_dim %d, "
          "intermediate %d, vocab %d\n",
          c.hidden, c.layers, c.heads, c.kv_heads, c.head_dim, c.intermediate, c.vocab);
  printf ("  context:    %d positions, rope theta %g, rms eps %g, %s head\n",
          c.max_positions, c.rope_theta, c.rms_eps, c.tie_word_embeddings ? "tied" : "untied");
  printf ("  eos ids:   ");
  for (int i = 0; i < c.n_eos; i++)
    printf (" %d", c.eos_ids[i]);
  printf ("%s\n", c.n_eos ? "" : " none");
  print_tensor_summary (st);
  if (g_file_test (tok_path, G_FILE_TEST_EXISTS)) {
    if (!(tok = dfl_tokenizer_load (tok_path, &error)))
      return dfl_cli_fail_error (g_steal_pointer (&error));
    printf ("  tokenizer:  %u tokens\n", dfl_tokenizer_vocab_size (tok));
  } else {
    printf ("  tokenizer:  none (tokenizer.json missing)\n");
  }
  if (list)
    print_tensors (st);
  return DFL_EXIT_OK;
}

static int
inspect_file (const char *path)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (DflSafetensors) st = dfl_safetensors_open (path, &error);
  static const char *keys[] = { "format", "dflash", "base_binding", "dflash_route" };

  if (!st)
    return dfl_cli_fail_error (g_steal_pointer (&error));
  printf ("%s: safetensors\n", path);
  print_tensor_summary (st);
  for (guint i = 0; i < G_N_ELEMENTS (keys); i++) {
    const char *v = dfl_safetensors_metadata (st, keys[i]);
    if (v)
      printf ("  %-11s %.*s%s\n", keys[i], 200, v, strlen (v) > 200 ? " …" : "");
  }
  print_tensors (st);
  return DFL_EXIT_OK;
}

int
dfl_cmd_inspect (int argc, char **argv)
{
  gboolean list = FALSE;
  GOptionEntry entries[] = {
    { "tensors", 0, 0, G_OPTION_ARG_NONE, &list, "List every tensor of a checkpoint folder", NULL },
    { NULL }
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("PATH - what a checkpoint folder or safetensors file holds");

  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!dfl_cli_parse (ctx, &argc, &argv))
    return DFL_EXIT_USAGE;
  if (argc != 2)
    return dfl_cli_fail (DFL_EXIT_USAGE, "inspect: give one PATH (see --help)");
  if (!g_file_test (argv[1], G_FILE_TEST_EXISTS))
    return dfl_cli_fail (DFL_EXIT_ERROR, "%s: no such file or folder", argv[1]);
  if (g_file_test (argv[1], G_FILE_TEST_IS_DIR))
    return inspect_checkpoint (argv[1], list);
  return inspect_file (argv[1]);
}
