/* gst-dflash — verifier: the target's check of each round's proposal. */
#pragma once

#include <gst/gst.h>

G_BEGIN_DECLS

#define GST_TYPE_VERIFIER (gst_verifier_get_type ())
G_DECLARE_FINAL_TYPE (GstVerifier, gst_verifier, GST, VERIFIER, GstElement)

GST_ELEMENT_REGISTER_DECLARE (verifier);

G_END_DECLS
