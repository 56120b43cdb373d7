/* gst-dflash — `dflash inspect PATH`: what a checkpoint folder, a .gguf
 * file or a safetensors file holds. */
#include <stdio.h>
#include <string.h>

#include "dflash-cli.h"
#include "gguf.h"
#include "qwen3-config.h"
#include "qwen3-weights.h"
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
  guint count[DFL_N_DTYPES] = { 0 };
  guint64 bytes[DFL_N_DTYPES] = { 0 }, params = 0, total = 0;
  guint n = dfl_safetensors_n_tensors (st);

  for (guint i = 0; i < n; i++) {
    const DflStoredTensor *t = dfl_safetensors_nth (st, i);
    count[t->dtype]++;
    bytes[t->dtype] += t->n_bytes;
    params += t->n_elements;
    total += t->n_bytes;
  }
  printf ("  tensors:    %u (", n);
  for (int d = 0, first = 1; d < DFL_N_DTYPES; d++) {
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
print_tensor (const DflStoredTensor *t)
{
  printf ("    %-56s %-4s [", t->name, dfl_dtype_name (t->dtype));
  for (guint d = 0; d < t->n_dims; d++)
    printf ("%s%" G_GINT64_FORMAT, d ? ", " : "", t->shape[d]);
  printf ("]\n");
}

static void
print_tensors (const DflSafetensors *st)
{
  for (guint i = 0; i < dfl_safetensors_n_tensors (st); i++)
    print_tensor (dfl_safetensors_nth (st, i));
}

/* A string as printed: quotes, backslashes and control characters (a
 * token may be any of them) escaped, UTF-8 kept, at most `max` bytes of it. */
static char *
quote (const char *s, gsize max)
{
  GString *out = g_string_new (NULL);
  gsize n = strlen (s), cut = MIN (n, max);

  /* cut between characters */
  while (cut > 0 && cut < n && ((guchar) s[cut] & 0xc0) == 0x80)
    cut--;
  for (gsize i = 0; i < cut; i++) {
    guchar c = (guchar) s[i];

    if (c == '"' || c == '\\')
      g_string_append_printf (out, "\\%c", c);
    else if (c < 0x20 || c == 0x7f)
      g_string_append_printf (out, "\\x%02x", c);
    else
      g_string_append_c (out, (char) c);
  }
  if (cut < n)
    g_string_append (out, "…");
  return g_string_free (out, FALSE);
}

/* One metadata value; arrays by their first few items. */
static void
print_value (const DflGgufValue *v)
{
  const guint64 shown = 6;

  switch (v->type) {
    case DFL_GGUF_STRING: {
      g_autofree char *quoted = quote (v->str, 200);

      printf ("%s", quoted);
      break;
    }
    case DFL_GGUF_FLOAT32: case DFL_GGUF_FLOAT64:
      printf ("%g", v->f);
      break;
    case DFL_GGUF_UINT8: case DFL_GGUF_UINT16: case DFL_GGUF_UINT32: case DFL_GGUF_UINT64:
      printf ("%" G_GUINT64_FORMAT, v->u);
      break;
    case DFL_GGUF_BOOL:
      printf ("%s", v->i ? "true" : "false");
      break;
    case DFL_GGUF_ARRAY:
      printf ("%" G_GUINT64_FORMAT " × %s [", v->n, dfl_gguf_type_name (v->item_type));
      for (guint64 i = 0; i < MIN (v->n, shown); i++) {
        if (v->item_type == DFL_GGUF_STRING) {
          g_autofree char *quoted = quote (v->strs[i], 40);

          printf ("%s\"%s\"", i ? ", " : "", quoted);
        }
        else if (v->item_type != DFL_GGUF_FLOAT32 && v->item_type != DFL_GGUF_FLOAT64)
          printf ("%s%" G_GINT64_FORMAT, i ? ", " : "", dfl_gguf_array_int (v, i));
        else
          printf ("%s…", i ? ", " : "");
      }
      printf ("%s]", v->n > shown ? ", …" : "");
      break;
    default:
      printf ("%" G_GINT64_FORMAT, v->i);
  }
}

/* A .gguf file: its header, metadata and tensors (GGUF's names); a qwen3
 * file then as the checkpoint it is. */
static int
inspect_gguf (const char *path, gboolean *is_qwen3)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (DflGguf) g = dfl_gguf_open (path, &error);
  const char *arch = NULL;

  if (!g)
    return dfl_cli_fail_error (g_steal_pointer (&error));
  printf ("%s: GGUF version %u, alignment %" G_GUINT64_FORMAT ", %u metadata entries, %u tensors\n",
          path, dfl_gguf_version (g), dfl_gguf_alignment (g), dfl_gguf_n_values (g),
          dfl_gguf_n_tensors (g));
  printf ("  metadata:\n");
  for (guint i = 0; i < dfl_gguf_n_values (g); i++) {
    const DflGgufValue *v = dfl_gguf_nth_value (g, i);

    printf ("    %-44s %-7s ", v->key, dfl_gguf_type_name (v->type));
    print_value (v);
    printf ("\n");
  }
  printf ("  tensors (outermost dim first):\n");
  for (guint i = 0; i < dfl_gguf_n_tensors (g); i++)
    print_tensor (dfl_gguf_nth_tensor (g, i));
  *is_qwen3 = dfl_gguf_get_string (g, "general.architecture", TRUE, &arch, NULL) && arch
      && strcmp (arch, "qwen3") == 0;
  return DFL_EXIT_OK;
}

static int
inspect_checkpoint (const char *dir, gboolean list)
{
  DflQwen3Config c;
  g_autoptr (GError) error = NULL;
  g_autoptr (DflSafetensors) st = NULL;
  g_autoptr (DflTokenizer) tok = NULL;
  gboolean has_tokenizer;

  if (!(st = dfl_qwen3_checkpoint_open (dir, &c, &error)))
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
  tok = dfl_tokenizer_load_checkpoint (dir, &has_tokenizer, &error);
  if (has_tokenizer && !tok)
    return dfl_cli_fail_error (g_steal_pointer (&error));
  if (tok)
    printf ("  tokenizer:  %u tokens\n", dfl_tokenizer_vocab_size (tok));
  else
    printf ("  tokenizer:  none (no tokenizer.json, no tokenizer.ggml metadata)\n");
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
    { "tensors", 0, 0, G_OPTION_ARG_NONE, &list, "List every tensor of a checkpoint folder or .gguf file (as the target names them)", NULL },
    { NULL }
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("PATH - what a checkpoint folder, .gguf file or safetensors file holds");

  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!dfl_cli_parse (ctx, &argc, &argv))
    return DFL_EXIT_USAGE;
  if (argc != 2)
    return dfl_cli_fail (DFL_EXIT_USAGE, "inspect: give one PATH (see --help)");
  if (!g_file_test (argv[1], G_FILE_TEST_EXISTS))
    return dfl_cli_fail (DFL_EXIT_ERROR, "%s: no such file or folder", argv[1]);
  if (g_file_test (argv[1], G_FILE_TEST_IS_DIR))
    return inspect_checkpoint (argv[1], list);
  if (dfl_gguf_is_gguf (argv[1])) {
    gboolean is_qwen3 = FALSE;
    int rc = inspect_gguf (argv[1], &is_qwen3);

    /* the checkpoint under the names the target gives its tensors */
    return rc != DFL_EXIT_OK || !is_qwen3 ? rc : inspect_checkpoint (argv[1], list);
  }
  return inspect_file (argv[1]);
}
