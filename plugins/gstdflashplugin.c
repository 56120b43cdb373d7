/* gst-dflash — the dflash plugin: the elements of block speculative decoding.
 * Copyright (C) 2026 gst-dflash developers
 *
 * This library is free software; you can redistribute it and/or modify it
 * under the terms of the GNU Library General Public License as published by
 * the Free Software Foundation; either version 2 of the License, or (at your
 * option) any later version.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstdflashelements.h"

static gboolean
plugin_init (GstPlugin *plugin)
{
  return gst_dflash_elements_register (plugin);
}

GST_PLUGIN_DEFINE (GST_VERSION_MAJOR, GST_VERSION_MINOR, dflash,
    "Block speculative decoding (DFlash 2): drafter, router and verifier elements",
    plugin_init, VERSION, "LGPL", PACKAGE, "https://example.invalid/gst-dflash")
