/* gst-dflash — the model the elements of one loop share.
 *
 * The target (weights, one KV cache per sequence, tokenizer) and the
 * drafter's sidecar are loaded once, by tapsource, and found by the other
 * elements through a GstContext of type "dflash.model", the way GStreamer's
 * CUDA and Vulkan elements share their device: a context query up the
 * pipeline, then NEED_CONTEXT on the bus (an application may answer it with
 * a model it loaded, to share one between pipelines), and tapsource posts
 * HAVE_CONTEXT when it made one.
 *
 * Per-sequence state lives here too: each element reads and writes only its
 * own part of a sequence, and a sequence's round passes the elements in
 * order, so two elements never touch the same part at once; the table of
 * sequences itself is behind the object lock.
 */
#pragma once

#include <gst/gst.h>

#include "drafter.h"
#include "sampler.h"
#include "speculate.h"
#include "target.h"
#include "tokenizer.h"

G_BEGIN_DECLS

#define GST_DFLASH_MODEL_CONTEXT_TYPE "dflash.model"

#define GST_TYPE_DFLASH_MODEL (gst_dflash_model_get_type ())
G_DECLARE_FINAL_TYPE (GstDflashModel, gst_dflash_model, GST, DFLASH_MODEL, GstObject)

/* One sequence of the loop. */
typedef struct {
  guint id;
  int max_new;
  DflSampler sampler;
  /* tapsource and verifier */
  DflTargetSeq *kv;
  GArray *tokens;            /* prompt, then what was emitted */
  int prompt_len;
  int emitted;
  gboolean done;
  /* the last verification, for tapsource's next round */
  float *taps;               /* accepted rows' taps */
  int taps_rows;
  float *tip;
  /* ctxsettle, dflashblock and selector: this sequence's drafter context */
  DflDrafter *drafter;
  /* the verifier's figures */
  int rounds;
  gint64 round_tokens;
  guint64 draft_ns, verify_ns;
} GstDflashSeq;

/* Load the target folder and, unless `no_drafter`, the drafter: `drafter`
 * or dflash.safetensors in the target folder where it exists. */
GstDflashModel *gst_dflash_model_new (const char *target_dir, const char *drafter,
                                      gboolean no_drafter, GError **error);

const DflTarget *gst_dflash_model_target (GstDflashModel *m);
/* NULL where the target folder has no tokenizer.json. */
const DflTokenizer *gst_dflash_model_tokenizer (GstDflashModel *m);
/* NULL where the model has no drafter. */
const DflDrafterGeometry *gst_dflash_model_geometry (GstDflashModel *m);
const char *gst_dflash_model_drafter_path (GstDflashModel *m);
/* The loaded drafter, for its router and selector (never its context). */
DflDrafter *gst_dflash_model_drafter (GstDflashModel *m);
int gst_dflash_model_tap_width (GstDflashModel *m);

/* Sequences. new: fails where the id is in use. */
GstDflashSeq *gst_dflash_model_seq_new (GstDflashModel *m, guint id, GError **error);
GstDflashSeq *gst_dflash_model_seq_get (GstDflashModel *m, guint id);
void gst_dflash_model_seq_remove (GstDflashModel *m, guint id);
/* This sequence's drafter, opened on first use (its weights are the
 * sidecar's mapping, shared; its context is the sequence's own). */
DflDrafter *gst_dflash_model_seq_drafter (GstDflashModel *m, GstDflashSeq *seq, GError **error);
/* Forget every sequence (a flush, a stop). */
void gst_dflash_model_seq_clear (GstDflashModel *m);

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
