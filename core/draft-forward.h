/* gst-dflash — the drafter written once over the back-end interface
 * (dfl-backend.h): what its files share. Not installed.
 *
 *   draft-device.c  the weights as tensors on a DflDevice (borrowed from
 *                   host memory on the CPU, uploaded elsewhere), checked
 *                   against the device's capabilities when bound
 *   draft-rows.c    a context's tensors: each layer's keys and values,
 *                   the scratch of a block and of a settle, the index
 *                   tensors (positions, ids, key ranges)
 *   draft-settle.c  context rows into every layer's keys and values
 *   draft-block.c   the block: [anchor, MASK …] through the layers and
 *                   the target's head
 *   draft-batch.c   the blocks of several sequences in one pass
 *   draft-pick.c    the block's tokens: top-k, the selector's re-scoring
 *
 * The bookkeeping (which positions are held, what waits, what a block
 * reads) is draft-context.c's; these files compute what it decides.
 */
#pragma once

#include "draft-context.h"

G_BEGIN_DECLS

/* Device allocations are carved at this alignment (GPU products and
 * vectorised kernels like aligned starts). */
#define DFL_DRAFT_ALIGN 256

static inline gsize
dfl_draft_aligned (gsize bytes)
{
  return (bytes + DFL_DRAFT_ALIGN - 1) / DFL_DRAFT_ALIGN * DFL_DRAFT_ALIGN;
}

/* A layer's weights as tensors on the drafter's device. */
typedef struct {
  DflTensor in_norm, post_norm, q_norm, k_norm;   /* F32 vectors */
  DflTensor q, k, v, o, gate, up, down;           /* [out][in] matrices */
  /* the two convolutions (0: around attention, 1: around the MLP): each
   * stage's base kernels [kernel][hidden] (stage 0 before the sub-layer, 1
   * after) and the projection making the rows' own kernels */
  DflTensor conv_base[2][2];
  DflTensor conv_proj[2];                         /* [2·kernel·groups][hidden] */
} DflDraftLayerNet;

/* Bound weights' native state: every tensor a block or a settle reads. */
typedef struct {
  DflDevice *dev;               /* runs the ops: the CPU's own device for host weights */
  gboolean host_indices;        /* index tensors in host memory (the device reads them so) */
  gboolean conv, selector;
  /* the device records graphs (DFL_OP_CAPTURE_BEGIN): a block is captured
   * once and replayed; `graphs` off runs its ops one by one (tests) */
  gboolean can_capture, graphs;
  DflTensor fc;                 /* [hidden][n_taps·hidden] */
  DflTensor hidden_norm, norm, inv_freq;
  DflTensor sel;                /* [selector_rank][hidden] */
  DflTensor books[2];           /* predecessor, successor: F16 [vocab][rank] */
  DflDraftLayerNet *layers;
  DflTensor embed, head;        /* the target's */
  gpointer mem;                 /* the uploaded weights, one allocation (NULL on the CPU) */
  /* the CPU's matrices where bound as Q8_0 (weight-arena.h), else NULL */
  struct _DflWeightArena *arena;
} DflDraftNet;

/* A layer's keys and values: rows of kv_heads·head_dim, `front` rows
 * before the context's first (a layer that sees all its context keeps the
 * block's own keys there, so one key range covers the block and the
 * context), then the context's rows (the module's DflDraftLayerRows say
 * which are live). */
typedef struct {
  gpointer k_mem, v_mem;
  gsize cap, front;
} DflDraftKv;

/* The index tensors of a context, at fixed offsets of one area: host
 * memory where the device reads indices on the host, else device memory
 * filled from the host mirror (dfl_draft_params_upload). */
typedef struct {
  guint8 *host;
  gpointer dev_mem;
  gsize bytes;
  gsize off_pos, off_settle_pos, off_zero, off_ids, off_lo, off_hi;
  gsize *off_gather;            /* [layers]: a windowed layer's window slots */
} DflDraftParams;

/* The rows of a block pass: `n` blocks of `block` rows one after another
 * (one sequence's block, or the blocks of a batch of sequences), each
 * [n · block][cols] on the drafter's device: the rows h, then x, x2, o
 * (hidden), q, y (heads · head_dim), the convolution's row kernels d,
 * gate, up (intermediate). */
typedef struct {
  DflDevice *dev;
  const DflDraftNet *net;
  const DflDrafterGeometry *g;
  int n;
  DflTensor h, x, x2, q, y, o, d, gate, up;
} DflDraftPass;

typedef struct {
  DflDraftCtx base;
  DflDraftNet *net;
  DflDevice *dev;
  DflDraftKv *kv;               /* [layers] */
  DflDraftParams params;
  /* the block's scratch (one allocation): its pass's rows, then a
   * windowed layer's gathered window and the block's keys after it (keys,
   * then values) */
  gpointer scratch;
  DflDraftPass pass;
  DflTensor *win_k, *win_v;     /* [layers]; unused for a layer that sees all */
  /* the waiting context rows (taps), on the device; a second buffer to
   * move the rows that stay into when the first ones settle */
  gpointer pend_mem[2];
  gsize pend_cap;
  /* the settle's scratch: rows of hidden, grown to a batch */
  gpointer settle_mem;
  gsize settle_cap;
  /* the selection's scratch: hp, top values, top ids, chosen */
  gpointer pick_mem;
  /* a captured block: it writes its own output buffer (at the head's full
   * width), copied to the caller's after each replay, so any output
   * buffer will do; captured again when a buffer it reads moves
   * (`generation` counts the moves) or the width changes */
  DflGraph *graph;
  gpointer graph_out;
  guint64 generation, graph_generation;
  int graph_width;
} DflDraftRun;

/* draft-device.c */
extern const DflDraftEngine dfl_draft_engine;
/* Rows [r0, r0 + n) of a packed 2-D tensor. */
DflTensor dfl_draft_rows (const DflTensor *t, gint64 r0, gint64 n);
/* A packed [rows][heads][head_dim] view of a packed 2-D tensor. */
DflTensor dfl_draft_heads (const DflTensor *t, gint64 heads);

/* draft-rows.c */
DflDraftCtx *dfl_draft_run_new (DflDrafterWeights *bound, GError **error);
/* An index tensor of the params area: I32 or I64 [n] at `off`. */
DflTensor dfl_draft_param (DflDraftRun *run, gsize off, DflDtype dtype, gint64 n);
/* The params area's host mirror to the device (nothing on host indices). */
gboolean dfl_draft_params_upload (DflDraftRun *run, gsize off, gsize bytes, GError **error);
/* Room for `n` more rows after a layer's held ones (context row `i` of the
 * layer is storage row front + start + i). */
gboolean dfl_draft_kv_reserve (DflDraftRun *run, int layer, gsize n, GError **error);
/* A layer's keys or values: storage rows [row, row + n). */
DflTensor dfl_draft_kv_rows (DflDraftRun *run, int layer, gboolean values, gsize row, gsize n);
/* All of a layer's storage rows of keys or values (front and capacity). */
DflTensor dfl_draft_kv_all (DflDraftRun *run, int layer, gboolean values);
/* Waiting rows [row, row + n) (row 0: the first waiting). */
DflTensor dfl_draft_pending_rows (DflDraftRun *run, gsize row, gsize n);

/* draft-settle.c */
gboolean dfl_draft_run_settle (DflDraftCtx *ctx, gsize n, GError **error);
/* The settle's math, for one context's rows or several contexts' stacked:
 * taps through FC and the hidden norm into t; then layer l's keys and
 * values of t into k and v ([rows][kv_heads · head_dim], wherever the
 * caller wants them), the keys normed by head and rotated to `pos` (one
 * start position, or one a row). */
gboolean dfl_draft_settle_in (const DflDraftNet *net, const DflDrafterGeometry *g, DflDevice *dev,
                              const DflTensor *taps, DflTensor *t, GError **error);
gboolean dfl_draft_settle_layer (const DflDraftNet *net, const DflDrafterGeometry *g,
                                 DflDevice *dev, int l, const DflTensor *t, DflTensor *k,
                                 DflTensor *v, const DflTensor *pos, GError **error);

/* draft-block.c */
/* Bytes of a pass of `n` blocks (one allocation), and its tensors carved
 * from `mem` (at offset 0) on `dev`. */
gsize dfl_draft_pass_bytes (const DflDrafterGeometry *g, gboolean conv, int n);
void dfl_draft_pass_place (DflDraftPass *p, DflDevice *dev, const DflDraftNet *net,
                           const DflDrafterGeometry *g, int n, gpointer mem);
/* Layer l's first half up to attention: h normed, through the attention
 * convolution's stage 0, into q, k and v ([n · block][kv_heads · head_dim]
 * each, wherever the caller wants the keys and values), q and k normed by
 * head and rotated to `pos` (one start position, or one a row). */
gboolean dfl_draft_pass_qkv (DflDraftPass *p, int l, DflTensor *k, DflTensor *v,
                             const DflTensor *pos, GError **error);
/* The rest of layer l once attention has written y: the output
 * projection and its convolution added to h, then the MLP the same way. */
gboolean dfl_draft_pass_finish_layer (DflDraftPass *p, int l, GError **error);
/* A sequence's block index tensors (ids, position, key ranges, windows'
 * gathers) into its params area's host mirror (uploaded by the caller). */
void dfl_draft_run_fill_params (DflDraftRun *run, gint64 anchor_pos, guint32 anchor);
/* Layer l's keys and values as attention reads them (the layer's rows, or
 * a windowed layer's gathered window) and, inside them, the block's rows. */
void dfl_draft_run_layer_keys (DflDraftRun *run, int l, DflTensor *keys, DflTensor *values,
                               DflTensor *bk, DflTensor *bv);
/* A windowed layer's window of context rows gathered in front of the
 * block's keys (nothing for a layer that sees all its context). */
gboolean dfl_draft_run_gather_window (DflDraftRun *run, int l, GError **error);
gboolean dfl_draft_run_block (DflDraftCtx *ctx, gint64 anchor_pos, guint32 anchor, int width,
                              const DflTensor *out, GError **error);

/* draft-pick.c: the pick queued, the picked ids fetched (several
 * sequences' picks are all queued before the first fetch waits) */
gboolean dfl_draft_run_pick (DflDraftCtx *ctx, const DflTensor *block, int width,
                             guint32 anchor, GError **error);
gboolean dfl_draft_run_picked (DflDraftCtx *ctx, guint32 *chosen, guint32 *plain,
                               GError **error);
gboolean dfl_draft_run_select (DflDraftCtx *ctx, const DflTensor *block, int width,
                               guint32 anchor, guint32 *chosen, guint32 *plain, GError **error);

G_END_DECLS
