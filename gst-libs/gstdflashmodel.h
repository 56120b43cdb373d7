/* gst-dflash — the model the elements of one loop share.
 *
 * The target (its weights and tokenizer) and the drafter's sidecar are
 * loaded once, by tapsource, and found by the other elements through a
 * GstContext of type "dflash.model", the way GStreamer's CUDA and Vulkan
 * elements share their device: a context query up the
 * pipeline, then NEED_CONTEXT on the bus (an application may answer it with
 * a model it loaded, to share one between pipelines), and tapsource posts
 * HAVE_CONTEXT when it made one.
 *
 * What is loaded does not change after: the target's weights, the
 * tokenizer, the drafter's sidecar (its path, geometry and router). So one
 * model serves any number of pipelines at once. What one run changes lives
 * elsewhere: a sequence's state in its GstDflashSeq (gstdflashseq.h), which
 * the round meta carries; the router's figures in the router; the engines
 * made from its weights on a GPU in the device object (gstdflashengines.h).
 *
 * Pipelines may share a model where their tapsources agree on every
 * property that chooses it (gst_dflash_model_key): an application that
 * hands one model to several pipelines hands it only to those.
 */
#pragma once

#include <gst/gst.h>

#include "drafter.h"
#include "gstdflashcaps.h"
#include "sampler.h"
#include "speculate.h"
#include "target.h"
#include "tokenizer.h"

G_BEGIN_DECLS

#define GST_DFLASH_MODEL_CONTEXT_TYPE "dflash.model"

typedef struct _GstDflashDevice GstDflashDevice;
/* gstdflashseq.h */
typedef struct _GstDflashSeq GstDflashSeq;

#define GST_TYPE_DFLASH_MODEL (gst_dflash_model_get_type ())
G_DECLARE_FINAL_TYPE (GstDflashModel, gst_dflash_model, GST, DFLASH_MODEL, GstObject)

/* How the drafter holds its matrices on the CPU (tapsource's
 * drafter-weights): Q8_0 (each float matrix, and a float target's head,
 * quantized once when it is bound: integer products, about twice as fast
 * a block; drafts may differ in a rare token, never the output, which the
 * target verifies), or as the sidecar stores them (the exact drafts of
 * the reference). A drafter on a GPU takes its matrices as gpu-weights
 * says. */
typedef enum {
  GST_DFLASH_DRAFTER_WEIGHTS_Q8_0,
  GST_DFLASH_DRAFTER_WEIGHTS_STORED,
} GstDflashDrafterWeights;

#define GST_TYPE_DFLASH_DRAFTER_WEIGHTS (gst_dflash_drafter_weights_get_type ())
GType gst_dflash_drafter_weights_get_type (void);

/* Load the target folder and, unless `no_drafter`, the drafter: `drafter`
 * or dflash.safetensors in the target folder where it exists, bound on
 * the CPU with its matrices as `drafter_weights` says. */
GstDflashModel *gst_dflash_model_new (const char *target_dir, const char *drafter,
                                      gboolean no_drafter, GstDflashDrafterWeights drafter_weights,
                                      GError **error);

const DflTarget *gst_dflash_model_target (GstDflashModel *m);
/* NULL where the target folder has no tokenizer.json. */
const DflTokenizer *gst_dflash_model_tokenizer (GstDflashModel *m);
/* NULL where the model has no drafter. */
const DflDrafterGeometry *gst_dflash_model_geometry (GstDflashModel *m);
const char *gst_dflash_model_drafter_path (GstDflashModel *m);
/* The loaded drafter (its weights, opened once), for its router and
 * selector. */
DflDrafterWeights *gst_dflash_model_drafter (GstDflashModel *m);
int gst_dflash_model_tap_width (GstDflashModel *m);

/* "model=… drafter=… no-drafter=… drafter-weights=… gpu-weights=…
 * backend=…": the
 * properties of a tapsource (GST_DFLASH_MODEL_PROPERTIES) that choose the
 * model it runs, as its element would serialize them. Two tapsources with
 * the same key can run on one model; with different keys they must not
 * (another drafter, other weights on the card, another back end). */
#define GST_DFLASH_MODEL_PROPERTIES \
  "model", "drafter", "no-drafter", "drafter-weights", "gpu-weights", "backend"
char *gst_dflash_model_key (GstElement *tapsource);

/* The drafter bound to the target for `backend`: on the CPU the model's
 * own (bound at load), on a GPU the device's engine for this model
 * (gst_dflash_device_drafter, gstdflashengines.h). NULL with an error
 * naming the model and the device. */
DflDrafterWeights *gst_dflash_model_drafter_on (GstDflashModel *m, GstDflashBackend backend,
                                                GstDflashDevice *dev, GError **error);
/* This sequence's drafter context for `backend`, made on first use from
 * gst_dflash_model_drafter_on's weights; a sequence drafts on one back
 * end (asking for another fails). */
DflDraftCtx *gst_dflash_model_seq_draft (GstDflashModel *m, GstDflashSeq *seq,
                                         GstDflashBackend backend, GstDflashDevice *dev,
                                         GError **error);

/* GstContext plumbing. */
GstContext *gst_dflash_model_context_new (GstDflashModel *m);
/* Answer a context query with `m` (TRUE where it was ours to answer). */
gboolean gst_dflash_model_handle_context_query (GstElement *element, GstQuery *query,
                                                GstDflashModel *m);
/* Take the model from a context set on the element. */
void gst_dflash_model_handle_set_context (GstElement *element, GstContext *context,
                                          GstDflashModel **slot);
/* Find the model if *slot is empty: a context query upstream from `pad`,
 * then NEED_CONTEXT on the bus. FALSE if none was found. */
gboolean gst_dflash_model_find (GstElement *element, GstPad *pad, GstDflashModel **slot);

G_END_DECLS
