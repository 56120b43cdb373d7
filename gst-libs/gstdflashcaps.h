/* gst-dflash — what travels between the elements, by media type.
 *
 *   application/x-dflash-taps      tapsource → ctxsettle, ngramdraft, verifier
 *       a round request and the target's new context rows (F32,
 *       ctx_rows × tap-width); fields hidden, tap-width, vocab
 *   application/x-dflash-context   ctxsettle → dflashblock
 *       the request once its rows are the drafter's context (no payload on
 *       system memory: the context is the sequence's drafter state);
 *       fields hidden, vocab, block
 *   application/x-dflash-block     dflashblock → selector
 *       the block's rows after the anchor (F32, (block − 1) × hidden) then
 *       their logits ((block − 1) × width); fields hidden, vocab, block, width
 *   application/x-dflash-proposal  selector, ngramdraft → router → verifier
 *       draft tokens (int32, at most block − 1); fields vocab, block
 *   application/x-dflash-tokens    verifier → applications
 *       the tokens a round committed (int32); field vocab
 *   text/x-raw, format=utf8        verifier → any text sink
 *
 * Memory is a caps feature: memory:SystemMemory now; the GPU back ends
 * negotiate memory:CUDAMemory and memory:VulkanBuffer the same way, and an
 * element's `backend` property can force one.
 */
#pragma once

#include <gst/gst.h>

G_BEGIN_DECLS

#define GST_DFLASH_TAPS_CAPS "application/x-dflash-taps"
#define GST_DFLASH_CONTEXT_CAPS "application/x-dflash-context"
#define GST_DFLASH_BLOCK_CAPS "application/x-dflash-block"
#define GST_DFLASH_PROPOSAL_CAPS "application/x-dflash-proposal"
#define GST_DFLASH_TOKENS_CAPS "application/x-dflash-tokens"

typedef enum {
  GST_DFLASH_BACKEND_AUTO,
  GST_DFLASH_BACKEND_CPU,
  GST_DFLASH_BACKEND_CUDA,
  GST_DFLASH_BACKEND_VULKAN,
} GstDflashBackend;

#define GST_TYPE_DFLASH_BACKEND (gst_dflash_backend_get_type ())
GType gst_dflash_backend_get_type (void);

/* Whether `backend` can run in this build on this machine; FALSE with a
 * message naming the element and the value. AUTO and CPU always can. */
gboolean gst_dflash_backend_check (GstElement *element, GstDflashBackend backend, GError **error);

/* Every int field of `want` must be in `have` with the same value; FALSE
 * with a message naming the field and both values. */
gboolean gst_dflash_caps_agree (const GstCaps *have, const GstCaps *want, GString *why);

G_END_DECLS
