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
 * Memory is a caps feature. The tensor types (taps, context, block) come
 * in memory:SystemMemory and, where the back end is built, in
 * memory:DflashCudaMemory and memory:DflashVulkanMemory (our own
 * GstDflashDeviceMemory, gstdflashdevicememory.h: the tensor stays on the
 * card between elements); proposals, tokens and text
 * are always system memory. An element's `backend` property narrows what
 * its pads take to one feature; auto follows what upstream offers.
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

/* Whether this build has `backend` (whether the machine has its device is
 * found when the element starts); FALSE with a message naming the value.
 * AUTO and CPU always pass. */
gboolean gst_dflash_backend_check (GstDflashBackend backend, GError **error);

/* Whether the back end was built (AUTO and CPU always are). */
gboolean gst_dflash_backend_built (GstDflashBackend backend);

/* The caps of `structure` (a caps string without features) in the memory of
 * each back end in `backends` (bits 1 << GST_DFLASH_BACKEND_*) that was
 * built, system memory first. */
GstCaps *gst_dflash_tensor_caps (const char *structure, guint backends);
#define GST_DFLASH_BACKENDS_ALL \
  (1u << GST_DFLASH_BACKEND_CPU | 1u << GST_DFLASH_BACKEND_CUDA | 1u << GST_DFLASH_BACKEND_VULKAN)

/* The back end whose memory the first structure of `caps` is in (CPU for
 * system memory; AUTO for empty or ANY caps). */
GstDflashBackend gst_dflash_caps_backend (const GstCaps *caps);

/* Why the peer of `srcpad` refuses `caps`: both elements named with their
 * backend, the memory offered and the memories the peer takes. */
void gst_dflash_caps_explain_refusal (GstPad *srcpad, const GstCaps *caps, GString *why);

/* Every int field of `want` must be in `have` with the same value; FALSE
 * with a message naming the field and both values. */
gboolean gst_dflash_caps_agree (const GstCaps *have, const GstCaps *want, GString *why);

G_END_DECLS
