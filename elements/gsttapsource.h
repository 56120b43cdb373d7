/* gst-dflash — tapsource: runs the target over the prompts and starts each
 * round of the speculative loop. */
#pragma once

#include <gst/base/gstpushsrc.h>

#include "gstdflashmodel.h"

G_BEGIN_DECLS

#define GST_TYPE_TAP_SOURCE (gst_tap_source_get_type ())
G_DECLARE_FINAL_TYPE (GstTapSource, gst_tap_source, GST, TAP_SOURCE, GstPushSrc)

GST_ELEMENT_REGISTER_DECLARE (tapsource);

G_END_DECLS
