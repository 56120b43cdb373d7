/* gst-dflash — router: chooses each round between the block's proposal and
 * the chain drafter's. */
#pragma once

#include <gst/gst.h>

G_BEGIN_DECLS

#define GST_TYPE_DFLASH_ROUTER (gst_dflash_router_get_type ())
G_DECLARE_FINAL_TYPE (GstDflashRouter, gst_dflash_router, GST, DFLASH_ROUTER, GstElement)

GST_ELEMENT_REGISTER_DECLARE (router);

G_END_DECLS
