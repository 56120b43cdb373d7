/* gst-dflash — the Vulkan drafter's insides, shared by vk-drafter.c (the
 * weights, the block, the selector) and vk-draft-ctx.c (the context). Not
 * installed. */
#pragma once

#include "dfl-vk-drafter.h"

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

struct _DflVkDrafter {
  DflVkDevice *dev;
  char *path;
  DflDrafterGeometry g;
  gboolean conv, selector;
  float *inv_freq;
  GPtrArray *buffers;           /* DflVkBuffer: the weights, packed a few to a buffer */
  guint64 bytes;
  DflVkWeights fc, sel, embed, head;
  VkDeviceAddress hidden_norm, norm, books[2];
  DflVkLayer *layers;
};

/* A layer's keys and values: a ring of `cap` rows of kv_heads·head_dim F32,
 * live rows start … start+held−1 (mod cap); positions as DflLayerContext. */
typedef struct {
  DflVkBuffer *k, *v;
  gsize cap, start, held;
  gint64 dropped;
} DflVkRing;

struct _DflVkDraftCtx {
  DflVkDrafter *vd;
  DflVkStream *s;
  DflVkRing *ring;
  gint64 first, len;
  float *pending;
  gsize pending_rows, pending_cap;

  /* settling: taps and rope angles staged on the host, then on the device */
  gsize settle_cap;
  DflVkBuffer *taps_h, *taps_d, *cs_h, *cs_d, *t, *k, *v;
  /* the block */
  DflVkBuffer *h, *x, *x2, *q, *kb, *vb, *y, *o, *dyn, *gate, *up, *bcs_h, *bcs_d, *scores;
  gsize scores_cap;
  /* the selector */
  DflVkBuffer *vals, *idx, *hp, *ids_d, *ids_h;
};

/* vk-draft-ctx.c */
gboolean dfl_vk_draft_ctx_settle_rows (DflVkDraftCtx *c, gint64 pos, const float *taps, gsize n,
                                       GError **error);

G_END_DECLS
