/* gst-dflash — selector: turns a block's logits into draft tokens. */
#pragma once

#include "gstdflashfilter.h"

G_BEGIN_DECLS

#define GST_TYPE_DFLASH_SELECTOR (gst_dflash_selector_get_type ())
G_DECLARE_FINAL_TYPE (GstDflashSelector, gst_dflash_selector, GST, DFLASH_SELECTOR, GstDflashFilter)

GST_ELEMENT_REGISTER_DECLARE (selector);

G_END_DECLS
