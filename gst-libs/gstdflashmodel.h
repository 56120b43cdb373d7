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
 * sequences itself is behind the object lock. A sequence is named by its
 * loop (the tapsource that runs it) and its number in that loop, so the
 * pipelines that share a model never see one another's sequences.
 */
#pragma once

#include <gst/gst.h>

#include "drafter.h"
#include "gstdflashcaps.h"
#include "route-cost.h"
#include "sampler.h"
#include "speculate.h"
#include "target.h"
#include "tokenizer.h"

G_BEGIN_DECLS

#define GST_DFLASH_MODEL_CONTEXT_TYPE "dflash.model"

/* The target's engine on a CUDA device (cuda-target.h), named here so a
 * build without it still compiles. */
typedef struct _DflCudaTarget DflCudaTarget;
typedef struct _DflCudaTargetSeq DflCudaTargetSeq;
typedef struct _GstDflashDevice GstDflashDevice;

#define GST_TYPE_DFLASH_MODEL (gst_dflash_model_get_type ())
G_DECLARE_FINAL_TYPE (GstDflashModel, gst_dflash_model, GST, DFLASH_MODEL, GstObject)

/* One sequence of the loop. */
typedef struct {
  guint64 key;               /* loop and id: the table's key */
  guint loop;
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
  DflDraftCtx *draft;
  /* The GPU back ends' state of the sequence, made on first use, freed
   * with it. cuda_kv: the target's cache on the card: tapsource made the
   * sequence on the CUDA target and the verifier verifies it there (kv is
   * then unused); taps_buf then holds the accepted rows' taps on the card
   * instead of taps. */
  DflCudaTargetSeq *cuda_kv;
  GstBuffer *taps_buf;
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
/* The loaded drafter (its weights, opened once), for its router and
 * selector. */
DflDrafterWeights *gst_dflash_model_drafter (GstDflashModel *m);
int gst_dflash_model_tap_width (GstDflashModel *m);

/* router policy=cost's figures (route-cost.h) for rounds whose target runs
 * on the CPU or on a CUDA card, shared by every pipeline on the model, held
 * until the unlock. */
DflRouteCost *gst_dflash_model_route_cost_lock (GstDflashModel *m, gboolean cuda_target);
void gst_dflash_model_route_cost_unlock (GstDflashModel *m);

/* A number for a new loop (a tapsource): its sequences are apart from
 * those of every other loop on the model. */
guint gst_dflash_model_loop_new (GstDflashModel *m);
/* Sequences of a loop. new: fails where the id is in use in that loop. */
GstDflashSeq *gst_dflash_model_seq_new (GstDflashModel *m, guint loop, guint id, GError **error);
GstDflashSeq *gst_dflash_model_seq_get (GstDflashModel *m, guint loop, guint id);
void gst_dflash_model_seq_remove (GstDflashModel *m, guint loop, guint id);
/* The drafter bound to the target for `backend` (CPU, CUDA or VULKAN; a
 * GPU's on `dev`), made once per model and back end (on first use, the
 * weights uploaded then) and shared by every sequence and element. On
 * Vulkan it reads the CPU target's embedding and head (uploaded with it);
 * on CUDA the CUDA target's (so that must exist), its matrices as the
 * target's (F32, or as stored). One device per back end and model: asking
 * with another fails. NULL with an error naming the model and the device. */
DflDrafterWeights *gst_dflash_model_drafter_on (GstDflashModel *m, GstDflashBackend backend,
                                                GstDflashDevice *dev, GError **error);
/* This sequence's drafter context for `backend`, made on first use from
 * gst_dflash_model_drafter_on's weights; a sequence drafts on one back
 * end (asking for another fails). */
DflDraftCtx *gst_dflash_model_seq_draft (GstDflashModel *m, GstDflashSeq *seq,
                                         GstDflashBackend backend, GstDflashDevice *dev,
                                         GError **error);
/* The target on a CUDA card, made once per model (on first use, the
 * weights uploaded then) and shared by every sequence and element; it
 * keeps `dev`. One device per back end and model: asking with another
 * fails. `f32`: its matrices widened to F32, for parity with the CPU;
 * else as the checkpoint stores them; the first call decides. NULL with
 * an error naming the model and the device. */
DflCudaTarget *gst_dflash_model_cuda_target (GstDflashModel *m, GstDflashDevice *dev,
                                             gboolean f32, GError **error);
/* The device of the CUDA engines (NULL before the CUDA target exists). */
GstDflashDevice *gst_dflash_model_cuda_device (GstDflashModel *m);
/* Forget every sequence of a loop (its flush, its stop). */
void gst_dflash_model_seq_clear (GstDflashModel *m, guint loop);

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
