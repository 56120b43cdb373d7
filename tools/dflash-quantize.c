/* gst-dflash — `dflash quantize IN.gguf OUT.gguf --type TYPE`: a GGUF
 * file's matrices quantized into a new GGUF file (core/gguf-quantize.h),
 * its drafter sidecar copied beside it where the copy can bind. */
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <glib/gstdio.h>

#include "dfl-parallel.h"
#include "dflash-cli.h"
#include "gguf-quantize.h"
#include "gguf.h"
#include "qwen3-weights.h"
#include "safetensors.h"

typedef struct {
  guint counts[DFL_N_DTYPES];
  gboolean quiet;
} Progress;

static void
on_tensor (guint index, guint n, const DflStoredTensor *t, DflDtype to, gpointer user_data)
{
  Progress *p = user_data;

  p->counts[to]++;
  if (p->quiet)
    return;
  fprintf (stderr, "[%*u/%u] %-36s %-4s -> %-4s [", n >= 100 ? 3 : 2, index + 1, n, t->name,
           dfl_dtype_name (t->dtype), dfl_dtype_name (to));
  for (guint d = 0; d < t->n_dims; d++)
    fprintf (stderr, "%s%" G_GINT64_FORMAT, d ? ", " : "", t->shape[d]);
  fprintf (stderr, "]\n");
}

/* Whether the sidecar at `path` binds by a sample of values (trunk_sample),
 * the one binding that survives block quantization (core/trunk-hash.c). */
static gboolean
binds_by_sample (const char *path, GError **error)
{
  g_autoptr (DflSafetensors) st = dfl_safetensors_open (path, error);
  const char *binding;
  cJSON *json;
  gboolean has;

  if (!st)
    return FALSE;
  binding = dfl_safetensors_metadata (st, "base_binding");
  json = binding ? cJSON_Parse (binding) : NULL;
  has = cJSON_IsObject (json) && cJSON_GetObjectItemCaseSensitive (json, "trunk_sample");
  cJSON_Delete (json);
  return has;
}

/* IN's sidecar copied to OUT's where it binds by sample; a line saying
 * what was done either way. */
static gboolean
copy_sidecar (const char *in, const char *out, GError **error)
{
  g_autofree char *from = dfl_qwen3_checkpoint_sidecar (in);
  g_autofree char *to = dfl_qwen3_checkpoint_sidecar (out);
  g_autoptr (GError) why = NULL;
  g_autofree char *bytes = NULL;
  gsize n;

  if (!g_file_test (from, G_FILE_TEST_EXISTS))
    return TRUE;
  if (!binds_by_sample (from, &why)) {
    fprintf (stderr, "dflash: quantize: %s not copied: %s\n", from,
             why ? why->message
                 : "its base_binding has no trunk_sample, so it cannot bind to quantized "
                   "weights (tools/hf-to-gguf.py --sidecar adds one)");
    return TRUE;
  }
  /* (a sidecar is a few MB: read whole, written atomically) */
  if (!g_file_get_contents (from, &bytes, &n, error) || !g_file_set_contents (to, bytes, n, error))
    return FALSE;
  fprintf (stderr, "dflash: quantize: drafter sidecar %s copied to %s\n", from, to);
  return TRUE;
}

int
dfl_cmd_quantize (int argc, char **argv)
{
  g_autofree char *type_name = NULL;
  gboolean quiet = FALSE;
  GOptionEntry entries[] = {
    { "type", 't', 0, G_OPTION_ARG_STRING, &type_name,
      "What the matrices become: " DFL_QUANT_SCHEME_NAMES " (q4_k_m: Q4_K, and Q6_K for the head "
      "and for attn_v and ffn_down of some layers, as llama.cpp's Q4_K_M)", "TYPE" },
    { "quiet", 'q', 0, G_OPTION_ARG_NONE, &quiet, "No line per tensor", NULL },
    { NULL }
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new (
      "IN.gguf OUT.gguf - quantize a GGUF file's F32, F16 or BF16 matrices into a new GGUF file");
  g_autoptr (GError) error = NULL;
  g_autoptr (GTimer) timer = g_timer_new ();
  Progress progress = { .quiet = FALSE };
  DflQuantScheme scheme;
  GStatBuf st;

  g_option_context_set_description (ctx,
      "Norms stay as they are; a matrix whose rows are not whole blocks of its type takes the\n"
      "nearest type whose blocks fit (Q4_K -> Q4_0, Q6_K -> Q8_0). A Hugging Face folder is\n"
      "converted first: tools/hf-to-gguf.py DIR IN.gguf --outtype f32 --sidecar DIR/dflash.safetensors\n"
      "(the sidecar copy binds to quantized conversions and is copied beside OUT.gguf).");
  g_option_context_add_main_entries (ctx, entries, NULL);
  if (!dfl_cli_parse (ctx, &argc, &argv))
    return DFL_EXIT_USAGE;
  if (argc != 3)
    return dfl_cli_fail (DFL_EXIT_USAGE, "quantize: give IN.gguf and OUT.gguf (see --help)");
  if (!type_name)
    return dfl_cli_fail (DFL_EXIT_USAGE, "quantize: --type is required (%s)",
                         DFL_QUANT_SCHEME_NAMES);
  if (!dfl_quant_scheme_parse (type_name, &scheme, &error)) {
    g_prefix_error (&error, "quantize: --type: ");
    dfl_cli_fail_error (g_steal_pointer (&error));
    return DFL_EXIT_USAGE;
  }
  if (g_file_test (argv[1], G_FILE_TEST_IS_DIR))
    return dfl_cli_fail (DFL_EXIT_ERROR,
                         "quantize: %s is a folder; convert it to GGUF first "
                         "(tools/hf-to-gguf.py %s IN.gguf --outtype f32)", argv[1], argv[1]);
  if (!dfl_gguf_is_gguf (argv[1]))
    return dfl_cli_fail (DFL_EXIT_ERROR, "quantize: %s: %s", argv[1],
                         g_file_test (argv[1], G_FILE_TEST_EXISTS) ? "not a GGUF file"
                                                                  : "no such file");
  progress.quiet = quiet;
  if (!dfl_gguf_quantize (argv[1], argv[2], scheme, on_tensor, &progress, &error)
      || !copy_sidecar (argv[1], argv[2], &error))
    return dfl_cli_fail_error (g_steal_pointer (&error));
  if (g_stat (argv[2], &st) == 0) {
    g_autofree char *size = g_format_size_full ((guint64) st.st_size, G_FORMAT_SIZE_IEC_UNITS);

    printf ("%s: %s,", argv[2], size);
    for (int d = 0; d < DFL_N_DTYPES; d++)
      if (progress.counts[d])
        printf (" %u %s", progress.counts[d], dfl_dtype_name (d));
    printf (" (%s from %s in %.2f s, %d threads)\n", dfl_quant_scheme_name (scheme), argv[1],
            g_timer_elapsed (timer, NULL), MAX (1, dfl_parallel_threads ()));
  }
  return DFL_EXIT_OK;
}
