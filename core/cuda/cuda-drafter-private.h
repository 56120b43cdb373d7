/* gst-dflash — the CUDA drafter's state, shared by its source files
 * (cuda-drafter.c: weights and selection; cuda-drafter-context.c: the
 * context's rows; cuda-drafter-block.c: the block and its graph). Not
 * installed.
 */
#pragma once

#include "cuda-drafter.h"
#include "draft-context.h"

G_BEGIN_DECLS

/* Device allocations are carved at this alignment (cuBLAS and the
 * vectorised kernels like 256-byte starts). */
#define DFL_CUDA_DRAFTER_ALIGN 256

typedef struct {
  const float *in_norm, *post_norm, *q_norm, *k_norm;   /* F32 on the device */
  DflCudaWeights q, k, v, o, gate, up, down;
  const float *conv_base[2];        /* attention, MLP: [2][kernel][hidden] */
  DflCudaWeights conv_proj[2];      /* [2·kernel·groups][hidden] */
} DflCudaDrafterLayer;

/* The weights on the card: bound weights' native state. */
typedef struct {
  DflCudaDevice *dev;
  const DflDrafterGeometry *g;      /* the bound weights' */
  const char *name;                 /* for messages: the drafter's path */
  gboolean conv, selector, use_graph;
  /* its contexts' calls, one at a time: they share the scratch */
  GMutex lock;
  void *d_weights;                  /* every weight, one allocation */
  guint64 weight_bytes;
  DflCudaWeights fc, sel;
  const float *hidden_norm, *norm, *inv_freq;
  const uint16_t *books[2];         /* predecessor, successor: F16 [vocab][rank] */
  DflCudaDrafterLayer *layers;
  DflCudaWeights embed, head;       /* the target's, borrowed */

  /* scratch shared by every context of the drafter (one call at a time),
   * one allocation: the block's rows, the settle's rows, the selection */
  void *d_scratch;
  float *s_h, *s_x, *s_x2, *s_q, *s_y, *s_o, *s_d, *s_gate, *s_up;
  float *s_t;                       /* settle: SETTLE_BATCH × hidden */
  /* a graph's block output at the head's full width, copied to the
   * caller's buffer after each replay: a graph captured into the caller's
   * buffer would be captured again whenever a pool hands out another */
  float *s_block;
  void *s_round;                    /* x rounded for F16/BF16 products */
  float *s_hp, *s_vals;             /* selection */
  int32_t *s_ids;                   /* [block − 1] chosen, then [block − 1][top] candidates */
  /* a windowed layer's window of context rows gathered in front of the
   * block's rows: [window + block][kv_heads·head_dim], K then V; NULL for
   * a layer that sees everything */
  float **s_win_k, **s_win_v;
} DflCudaDrafter;

/* A layer's rows on the card; the module's rows say which are live. */
typedef struct {
  float *d_k, *d_v;                 /* [front + cap][kv_heads·head_dim] */
  gsize cap;
  /* rows in front of the context: a layer that sees all its context keeps
   * the block's K/V there (block rows), right before its first row, so one
   * key range covers both; a windowed layer keeps none */
  gsize front;
} DflCudaLayerCtx;

typedef struct {
  DflDraftCtx base;
  DflCudaDrafter *cd;
  DflCudaLayerCtx *layers;
  /* waiting taps rows, on the device; a second buffer to compact into */
  float *d_pending, *d_pending2;
  gsize pending_cap;
  /* bumped whenever a context buffer moves: a graph made before is stale */
  guint64 generation;

  /* what a block's kernels read on the device, uploaded in one copy: the
   * host mirror and the device copy share the layout */
  void *h_param, *d_param;
  gsize param_bytes;
  gsize off_pos, off_ids, off_lo, off_hi, *off_gather;
  /* positions of a settle's batches */
  int64_t *d_settle_pos;
  gsize settle_pos_cap;

  DflCudaGraph *graph;
  guint64 graph_generation;
  int graph_width;
  guint64 graph_scratch;   /* attention's scratch the graph reads */
} DflCudaDraftCtx;

/* The drafter's turn: its scratch is one context's at a time, and from
 * the first enqueue to the last read the stream is the caller's (no other
 * thread's work lands in a capture, nor takes its error). Every entry of a
 * context that touches the card holds it. */
static inline void
dfl_cuda_drafter_hold (DflCudaDrafter *cd)
{
  g_mutex_lock (&cd->lock);
  dfl_cuda_device_lock (cd->dev);
}

static inline void
dfl_cuda_drafter_release (DflCudaDrafter *cd)
{
  dfl_cuda_device_unlock (cd->dev);
  g_mutex_unlock (&cd->lock);
}

/* cuda-drafter-context.c: the context's rows */
DflDraftCtx *dfl_cuda_draft_ctx_new (DflDrafterWeights *w, GError **error);

/* cuda-drafter-block.c */
gboolean dfl_cuda_draft_ctx_block (DflDraftCtx *ctx, gint64 anchor_pos, guint32 anchor,
                                   int width, const DflTensor *out, GError **error);
void dfl_cuda_draft_ctx_drop_graph (DflCudaDraftCtx *ctx);

/* cuda-drafter.c: the selection */
gboolean dfl_cuda_draft_ctx_select (DflDraftCtx *ctx, const DflTensor *block, int width,
                                    guint32 anchor, guint32 *chosen, guint32 *plain,
                                    GError **error);

G_END_DECLS
