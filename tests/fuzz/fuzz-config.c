/* Fuzz target: JSON configs read through cJSON.
 *
 * The input is parsed three ways: as a Qwen3 config.json from memory
 * (dfl_qwen3_config_parse), as a released DFlash drafter's config.json
 * (dfl_drafter_geometry_from_v1_config), and, cut at its first NUL into
 * config.json and generation_config.json, as a checkpoint folder on disk
 * (dfl_qwen3_config_load).
 */
#include "fuzz-common.h"
#include "dfl-error.h"
#include "drafter.h"
#include "qwen3-config.h"

static void
check_error (gboolean ok, GError *error)
{
  g_assert (ok == (error == NULL));
  if (error)
    g_assert (error->domain == DFL_ERROR && error->message && *error->message);
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  g_autofree char *json = fuzz_copy (data, size);
  g_autoptr (GError) e1 = NULL, e2 = NULL, e3 = NULL;
  DflQwen3Config cfg;
  DflDrafterGeometry g;
  gboolean ok;

  ok = dfl_qwen3_config_parse (&cfg, json, size, "config.json", &e1);
  check_error (ok, e1);
  if (ok) {
    g_assert (cfg.hidden > 0 && cfg.layers > 0 && cfg.heads > 0 && cfg.vocab > 0);
    g_assert (cfg.n_eos >= 0 && cfg.n_eos <= DFL_MAX_EOS_IDS);
  }

  ok = dfl_drafter_geometry_from_v1_config (&g, json, size, "drafter/config.json", &e2);
  check_error (ok, e2);
  if (ok) {
    for (int l = 0; l < g.layers; l++)
      (void) dfl_drafter_geometry_window_of (&g, l);
    g_assert (dfl_drafter_geometry_tap_width (&g) > 0);
    dfl_drafter_geometry_clear (&g);
  }

  {
    gsize lens[2] = { 0 };
    g_auto (GStrv) parts = fuzz_split (data, size, 2, lens);
    g_autofree char *gen_path = g_build_filename (fuzz_scratch (), "generation_config.json",
                                                  NULL);

    g_free (fuzz_write ("config.json", parts[0], lens[0]));
    if (parts[1])
      g_free (fuzz_write ("generation_config.json", parts[1], lens[1]));
    else
      g_unlink (gen_path);
    ok = dfl_qwen3_config_load (&cfg, fuzz_scratch (), &e3);
    check_error (ok, e3);
  }
  return 0;
}
