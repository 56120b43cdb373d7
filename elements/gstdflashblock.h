/* gst-dflash — dflashblock: the DFlash block forward. */
#pragma once

#include "gstdflashfilter.h"

G_BEGIN_DECLS

#define GST_TYPE_DFLASH_BLOCK (gst_dflash_block_get_type ())
G_DECLARE_FINAL_TYPE (GstDflashBlock, gst_dflash_block, GST, DFLASH_BLOCK, GstDflashFilter)

GST_ELEMENT_REGISTER_DECLARE (dflashblock);

G_END_DECLS
