/* Fuzz target: a DFlash 2 sidecar's __metadata__ records.
 *
 * The input, cut at NULs, is the "dflash" geometry record, the
 * "base_binding" record and the "dflash_route" record (a part left out is a
 * record left out). The records are parsed as they are, then written into a
 * sidecar file that dfl_drafter_weights_open reads (it holds no weights, so it is
 * refused at the first one once the records have been read).
 */
#include "fuzz-common.h"
#include "dfl-error.h"
#include "drafter-private.h"

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
  static const char *const keys[3] = { "dflash", "base_binding", "dflash_route" };
  gsize lens[3] = { 0 };
  g_auto (GStrv) parts = fuzz_split (data, size, 3, lens);
  g_autoptr (GError) e1 = NULL, e2 = NULL, e3 = NULL;
  g_autoptr (DflSafetensorsWriter) w = dfl_safetensors_writer_new ();
  g_autofree char *path = g_build_filename (fuzz_scratch (), "dflash.safetensors", NULL);
  DflDrafterGeometry g;
  DflDrafterWeights *d;
  gboolean ok;

  ok = dfl_drafter_geometry_parse (&g, parts[0], "dflash.safetensors", &e1);
  check_error (ok, e1);
  if (ok) {
    g_assert (dfl_drafter_geometry_tap_width (&g) > 0);
    for (int l = 0; l < g.layers; l++) {
      (void) dfl_drafter_geometry_window_of (&g, l);
      (void) dfl_drafter_geometry_rotary (&g, l);
    }
    if (parts[1] && parts[2]) {
      DflRoute *r = dfl_route_parse (parts[2], g.hidden, "dflash.safetensors", &e2);

      check_error (r != NULL, e2);
      if (r)
        dfl_route_free (r);
    }
    dfl_drafter_geometry_clear (&g);
  }

  for (int i = 0; i < 3 && parts[i]; i++)
    dfl_safetensors_writer_set_metadata (w, keys[i], parts[i]);
  if (!dfl_safetensors_writer_write (w, path, NULL))
    g_error ("fuzz: cannot write %s", path);
  d = dfl_drafter_weights_open (path, &e3);
  check_error (d != NULL, e3);
  g_assert (d == NULL);   /* no weights: never a drafter */
  return 0;
}
