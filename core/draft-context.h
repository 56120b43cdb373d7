/* gst-dflash — a sequence's drafter context: the bookkeeping every back end
 * shares, and what a back end supplies. Not installed.
 *
 * draft-context.c decides, once for every back end: which positions the
 * context holds, which rows wait, when they settle and in what batches,
 * what each windowed layer lets go of (its window plus
 * DFL_DRAFTER_BLOCK_SLACK, lazily), which context rows a block reads, and
 * whether a block's context is short (with the messages saying so). The
 * compute is the draft-* files' (draft-forward.h), through DflDraftCtxOps:
 * keep waiting rows, settle rows into each layer's keys and values, run a
 * block, select.
 */
#pragma once

#include "drafter-private.h"

G_BEGIN_DECLS

/* A layer's rows: `held` live rows starting at storage row `start` of the
 * back end's buffers (a ring's start grows past its size: the back end
 * reads it modulo), holding positions first + dropped … first + dropped +
 * held − 1. */
typedef struct {
  gsize start, held;
  gint64 dropped;
} DflDraftLayerRows;

typedef struct {
  /* Append the rows of `taps` (ne[1] of them, checked: host memory or
   * the context's device) after the pending_rows already waiting. */
  gboolean (*pend) (DflDraftCtx *ctx, const DflTensor *taps, GError **error);
  /* Forget the first `n` waiting rows (just settled), the rest moving to
   * the front (ctx->pending_rows still counts them all). */
  void (*unpend) (DflDraftCtx *ctx, gsize n);
  /* Settle the first `n` waiting rows, positions from first + len on, into
   * every layer after its held rows, DFL_DRAFTER_SETTLE_BATCH at a time,
   * calling dfl_draft_ctx_settled after each batch. */
  gboolean (*settle) (DflDraftCtx *ctx, gsize n, GError **error);
  /* The block, its arguments checked, its context checked and settled. */
  gboolean (*block) (DflDraftCtx *ctx, gint64 anchor_pos, guint32 anchor, int width,
                     const DflTensor *out, GError **error);
  /* The selection, its arguments checked. */
  gboolean (*select) (DflDraftCtx *ctx, const DflTensor *block, int width, guint32 anchor,
                      guint32 *chosen, guint32 *plain, GError **error);
  /* One KV head of a layer's held rows, to the host (arguments checked). */
  gboolean (*read_kv) (DflDraftCtx *ctx, int layer, int kv_head, float **k, float **v,
                       GError **error);
  /* The back end's state; the module's is freed after. */
  void (*free) (DflDraftCtx *ctx);
} DflDraftCtxOps;

/* The part of a context the module keeps; a back end's context starts
 * with it. */
struct _DflDraftCtx {
  const DflDraftCtxOps *ops;
  DflDrafterWeights *w;         /* bound, a reference */
  const DflDrafterGeometry *g;
  const char *name;             /* the drafter, for messages */
  DflDraftLayerRows *rows;      /* [layers] */
  /* the context covers positions first … first+len−1, then pending_rows
   * waiting rows */
  gint64 first, len;
  gsize pending_rows;
};

/* Allocate a back end's context of `size` bytes (its struct, starting with
 * DflDraftCtx) for bound weights `w`. */
gpointer dfl_draft_ctx_alloc (gsize size, const DflDraftCtxOps *ops, DflDrafterWeights *w);
/* A windowed layer lets go of the rows it reads no more (its window plus
 * the slack a rewind may need), lazily: after a settle. */
void dfl_draft_ctx_drop_windows (DflDraftCtx *ctx);
/* `nb` more rows settled in every layer (a back end's settle, after each
 * batch). */
void dfl_draft_ctx_settled (DflDraftCtx *ctx, gsize nb);
/* Everything a block needs before its compute: its arguments (the anchor
 * in the vocabulary, the width, `out` of the block's size where the
 * context lives), a context that reaches the anchor, the waiting rows
 * settled. */
gboolean dfl_draft_ctx_block_ready (DflDraftCtx *ctx, gint64 anchor_pos, guint32 anchor,
                                    int width, const DflTensor *out, GError **error);
/* A selection's arguments: the anchor in the vocabulary, the width, the
 * block of its size where the context lives. */
gboolean dfl_draft_ctx_select_ready (DflDraftCtx *ctx, const DflTensor *block, int width,
                                     guint32 anchor, GError **error);
/* The position base (the first the layer holds) and the context rows
 * [lo, hi) a block at anchor_pos reads in `layer`. */
void dfl_draft_ctx_layer_range (const DflDraftCtx *ctx, int layer, gint64 anchor_pos,
                                gint64 *base, gint64 *lo, gint64 *hi);
/* The most context rows any layer of a block at anchor_pos reads. */
gsize dfl_draft_ctx_widest_range (const DflDraftCtx *ctx, gint64 anchor_pos);
/* The head's rows (the trunk's), the widest a block may score. */
int dfl_draft_ctx_head_rows (const DflDraftCtx *ctx);

G_END_DECLS
