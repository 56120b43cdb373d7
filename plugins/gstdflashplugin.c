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

#include <gst/gst.h>

#include "gstctxsettle.h"
#include "gstdflashblock.h"
#include "gstdflashrouter.h"
#include "gstdflashselector.h"
#include "gstngramdraft.h"
#include "gsttapsource.h"
#include "gstverifier.h"

static gboolean
plugin_init (GstPlugin *plugin)
{
  gboolean ret = FALSE;

  ret |= GST_ELEMENT_REGISTER (tapsource, plugin);
  ret |= GST_ELEMENT_REGISTER (ctxsettle, plugin);
  ret |= GST_ELEMENT_REGISTER (dflashblock, plugin);
  ret |= GST_ELEMENT_REGISTER (selector, plugin);
  ret |= GST_ELEMENT_REGISTER (ngramdraft, plugin);
  ret |= GST_ELEMENT_REGISTER (router, plugin);
  ret |= GST_ELEMENT_REGISTER (verifier, plugin);
  return ret;
}

GST_PLUGIN_DEFINE (GST_VERSION_MAJOR, GST_VERSION_MINOR, dflash,
    "Block speculative decoding (DFlash 2): drafter, router and verifier elements",
    plugin_init, VERSION, "LGPL", PACKAGE, "https://example.invalid/gst-dflash")
