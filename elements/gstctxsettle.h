/* gst-dflash — ctxsettle: turns taps into the drafter's context. */
#pragma once

#include "gstdflashfilter.h"

G_BEGIN_DECLS

#define GST_TYPE_CTX_SETTLE (gst_ctx_settle_get_type ())
G_DECLARE_FINAL_TYPE (GstCtxSettle, gst_ctx_settle, GST, CTX_SETTLE, GstDflashFilter)

GST_ELEMENT_REGISTER_DECLARE (ctxsettle);

G_END_DECLS
