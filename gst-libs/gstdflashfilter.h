/* gst-dflash — the base of the one-in, one-out stages of the loop
 * (ctxsettle, dflashblock, selector, ngramdraft).
 *
 * It owns the pads and what every stage does alike: finding the shared
 * model when the caps arrive, answering context queries, passing upstream
 * events (the verdicts) on, the `backend` property and the memory it
 * negotiates (cpu: system memory; cuda, vulkan: that device's memory; auto:
 * what upstream offers), the device shared through a GstContext, the pool
 * of that device it proposes to a producer through the ALLOCATION query
 * (for tensors whose caps fix their size: a block), the
 * `busy-time` figure, and the time a round spends drafting. A stage says what it
 * outputs (src_caps) and does its work on a round (process), or on the
 * rounds of several sequences that wait together (process_batch, with
 * `batch-limit`).
 */
#pragma once

#include <gst/gst.h>

#include "gstdflashcaps.h"
#include "gstdflashdevice.h"
#include "gstdflashmeta.h"
#include "gstdflashmodel.h"
#include "gstdflashseq.h"

G_BEGIN_DECLS

/* The most rounds a batched pass takes (batch-limit's upper bound): as
 * many sequences as the back ends' table ops take. */
#define GST_DFLASH_FILTER_MAX_BATCH 64

#define GST_TYPE_DFLASH_FILTER (gst_dflash_filter_get_type ())
G_DECLARE_DERIVABLE_TYPE (GstDflashFilter, gst_dflash_filter, GST, DFLASH_FILTER, GstElement)

struct _GstDflashFilterClass {
  GstElementClass parent_class;

  /* The caps the stage outputs, given the model and the input caps; NULL
   * with a message in `why` where the input cannot be taken. */
  GstCaps *(*src_caps) (GstDflashFilter *filter, GstCaps *sink_caps, GString *why);
  /* The round: `in` is the input buffer (with its meta), `*out` the buffer
   * to push (its meta included). */
  GstFlowReturn (*process) (GstDflashFilter *filter, GstBuffer *in, GstDflashRoundMeta *meta,
                            GstBuffer **out);
  /* Rounds of `n` (≥ 2) different sequences at once, where the stage
   * batches (see gst_dflash_filter_class_install_batch_limit): out[i] for
   * in[i], each as process() would make it. On a failure (an error
   * posted, as process() posts it) every out[i] set is unreffed by the
   * base. Optional. */
  GstFlowReturn (*process_batch) (GstDflashFilter *filter, GstBuffer **in,
                                  GstDflashRoundMeta **meta, guint n, GstBuffer **out);
  /* Forget per-stream state (a flush, a stop). */
  void (*reset) (GstDflashFilter *filter);
  /* A flush or a stop is coming: a process() that waits must return
   * (GST_FLOW_FLUSHING) and not wait again until reset. Optional. */
  void (*unlock) (GstDflashFilter *filter);
  /* An event from downstream, before it goes on upstream: TRUE where the
   * stage took it (and its reference). Optional. */
  gboolean (*src_event) (GstDflashFilter *filter, GstEvent *event);

  /* The sink takes any memory, whatever the backend (a stage that reads
   * only the round's meta and the sequence: ngramdraft); it runs on the
   * CPU. */
  gboolean sink_any_memory;
  /* With backend=vulkan the sink takes system memory too, and the stage
   * uploads it (ctxsettle: the target stays on the CPU under Vulkan). */
  gboolean vulkan_takes_system;
};

/* The shared model (NULL before the caps arrive). */
GstDflashModel *gst_dflash_filter_model (GstDflashFilter *filter);
/* Where the stage runs, once the caps are set: CPU, CUDA or VULKAN (the
 * backend property where forced, else the memory upstream offers). */
GstDflashBackend gst_dflash_filter_backend (GstDflashFilter *filter);
/* Its device (NULL on the CPU). */
GstDflashDevice *gst_dflash_filter_device (GstDflashFilter *filter);
/* Its src pad (transfer none). */
GstPad *gst_dflash_filter_src_pad (GstDflashFilter *filter);
/* Add the pad templates of a stage: its sink and src caps strings, without
 * features; the tensor types (taps, context, block) get every memory the
 * build has (gst_dflash_tensor_caps), the others system memory. */
void gst_dflash_filter_class_add_pads (GstDflashFilterClass *klass, const char *sink_caps,
                                       const char *src_caps);

/* A stage with process_batch installs `batch-limit` (property `prop_id` of
 * its class) and the figures `batches` and `max-batch` (prop_id + 1 and
 * + 2; `what` the stage's work in their blurbs, e.g. "drafted the
 * blocks"): at 1, the default, each round is processed in the streaming
 * thread that brought it; above, the sink queues the rounds and a task on
 * the src pad takes every round waiting (up to batch-limit, never waiting
 * for more) into one process_batch, the events in their place between
 * them. Read when the stage starts. */
void gst_dflash_filter_class_install_batch_limit (GstDflashFilterClass *klass, guint prop_id,
                                                  const char *blurb, const char *what);
/* A pass of process_batch took `n` (≥ 2) sequences together: the figures. */
void gst_dflash_filter_count_batch (GstDflashFilter *filter, guint n);

/* For a process_batch of `n` rounds: the drafter's batch (core/drafter.h)
 * for the weights `ctx` drafts with, made at the first call with room for
 * batch-limit sequences (or n), kept until the stage stops; NULL where the
 * device runs none (said once in the log: the stage then goes one
 * sequence at a time). The streaming thread's. */
DflDraftBatch *gst_dflash_filter_draft_batch (GstDflashFilter *filter, DflDraftCtx *ctx, int n);

/* The drafter's geometry where the model has a drafter and `sink_caps`
 * agree with `name` caps of the target's hidden and vocab and the
 * drafter's block; else NULL, with why in `why` (a src_caps's check). */
const DflDrafterGeometry *gst_dflash_filter_drafter_input (GstDflashFilter *filter,
                                                           GstCaps *sink_caps, const char *name,
                                                           GString *why);
/* Post the error of a round the stage could not do (`what`, then the
 * error's message; the sequence and round in the debug part), and return
 * GST_FLOW_ERROR. */
GstFlowReturn gst_dflash_filter_round_failed (GstDflashFilter *filter, const char *what,
                                              const GstDflashRoundMeta *meta,
                                              const GError *error);

G_END_DECLS
