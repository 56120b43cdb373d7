/* gst-dflash — tests: the text the elements' loops must print. */
#pragma once

#include <gst/gst.h>

G_BEGIN_DECLS

/* Plain decoding of `prompt` for `max_new` tokens by the dflash command
 * ($DFLASH): `dflash generate --no-draft`. It runs its own pipeline with
 * the elements registered statically, so it gets a registry of its own
 * (beside $GST_REGISTRY_1_0) and no plugin path: it must not find this
 * build's plugin too. Fails the gst-check test where the command does not
 * run, fails or prints nothing. */
gchar *dfl_test_reference_text (const gchar *prompt, gint max_new);

G_END_DECLS
