/* gst-dflash — ngramdraft: the prompt-lookup chain drafter. */
#pragma once

#include "gstdflashfilter.h"

G_BEGIN_DECLS

#define GST_TYPE_NGRAM_DRAFT (gst_ngram_draft_get_type ())
G_DECLARE_FINAL_TYPE (GstNgramDraft, gst_ngram_draft, GST, NGRAM_DRAFT, GstDflashFilter)

GST_ELEMENT_REGISTER_DECLARE (ngramdraft);

G_END_DECLS
