/* gst-dflash — the Vulkan drafter's insides, shared by vk-drafter.c (the
 * weights, the block, the selector) and vk-draft-ctx.c (the context's
 * rows). Not installed. */
#pragma once

#include "dfl-vk-drafter.h"
#include "draft-context.h"

G_BEGIN_DECLS

typedef struct {
  VkDeviceAddress base;         /* F32 [2][kernel][hidden] */
  DflVkWeights proj;            /* [2·kernel·groups][hidden] */
} DflVkConv;

typedef struct {
  VkDeviceAddress in_norm, post_norm, q_norm, k_norm;
  DflVkWeights q, k, v, o, gate, up, down;
  DflVkConv attn_conv, mlp_conv;
} DflVkLayer;

/* The weights on the device: bound weights' native state. */
typedef struct {
  DflVkDevice *dev;
  const char *path;
  const DflDrafterGeometry *g;
  gboolean conv, selector;
  const float *inv_freq;        /* the host weights' */
  GPtrArray *buffers;           /* DflVkBuffer: the weights, packed a few to a buffer */
  guint64 bytes;
  DflVkWeights fc, sel, embed, head;
  VkDeviceAddress hidden_norm, norm, books[2];
  DflVkLayer *layers;
} DflVkDrafter;

/* A layer's keys and values: a ring of `cap` rows of kv_heads·head_dim F32;
 * the module's rows say which are live (start modulo cap). */
typedef struct {
  DflVkBuffer *k, *v;
  gsize cap;
} DflVkRing;

typedef struct {
  DflDraftCtx base;
  DflVkDrafter *vd;
  DflVkStream *s;
  DflVkRing *ring;

  /* settling: taps and rope angles staged on the host, then on the device */
  gsize settle_cap;
  DflVkBuffer *taps_h, *taps_d, *cs_h, *cs_d, *t, *k, *v;
  /* the block */
  DflVkBuffer *h, *x, *x2, *q, *kb, *vb, *y, *o, *dyn, *gate, *up, *bcs_h, *bcs_d, *scores;
  gsize scores_cap;
  /* the selector */
  DflVkBuffer *vals, *idx, *hp, *ids_d, *ids_h;
} DflVkDraftCtx;

/* vk-draft-ctx.c: the context's rows */
DflDraftCtx *dfl_vk_draft_ctx_new (DflDrafterWeights *w, GError **error);
gboolean dfl_vk_draft_ctx_settle_rows (DflDraftCtx *ctx, gsize n, GError **error);
gboolean dfl_vk_draft_ctx_read_kv (DflDraftCtx *ctx, int layer, int kv_head, float **k,
                                   float **v, GError **error);
void dfl_vk_draft_ctx_free_rows (DflVkDraftCtx *c);

/* vk-drafter.c: the block and the selection */
gboolean dfl_vk_draft_ctx_block (DflDraftCtx *ctx, gint64 anchor_pos, guint32 anchor, int width,
                                 const DflTensor *out, GError **error);
gboolean dfl_vk_draft_ctx_select (DflDraftCtx *ctx, const DflTensor *block, int width,
                                  guint32 anchor, guint32 *chosen, guint32 *plain,
                                  GError **error);
gboolean dfl_vk_draft_ctx_draft (DflDraftCtx *ctx, gint64 anchor_pos, guint32 anchor, int width,
                                 const DflTensor *out, guint32 *chosen, guint32 *plain,
                                 GError **error);

G_END_DECLS
