/* gst-dflash — the drafter's weights, shared by its source files (sidecar.c
 * loads them, drafter-select.c picks tokens on the host, drafter-engines.c
 * binds them to a device, draft-device.c puts them there and the draft-*
 * files draft with them). Not installed, not for elements.
 */
#pragma once

#include "drafter.h"
#include "dfl-kernels.h"

G_BEGIN_DECLS

/* A row convolution (DESIGN.md): y[r] = Σ_o (base[s][o] + d[r][s][o][group]) ⊙ x[r − o]. */
typedef struct {
  const float *base;    /* [2][kernel][hidden]: stage 0 before the sub-layer, 1 after */
  DflWeights proj;      /* [2·kernel·groups][hidden], groups = hidden / conv_group */
} DflConv;

/* Matrices are DflWeights in their stored dtype (products: dfl_matmul_w);
 * vectors are F32. */
typedef struct {
  const float *in_norm, *post_norm, *q_norm, *k_norm;
  DflWeights q, k, v, o;             /* [out][in] */
  DflWeights gate, up, down;
  DflConv attn_conv, mlp_conv;
} DflDrafterLayer;

typedef struct {
  float *mean;          /* [hidden] */
  float *basis;         /* [rank][hidden], orthonormal rows */
  int rank;
} DflSubspace;

typedef struct {
  DflSubspace block, chain;
  gint64 block_rows, chain_rows;
} DflRoute;

typedef struct {
  char *name;
  DflDtype dtype;       /* as held: matrices as stored, vectors F32, codebooks F16 */
  gsize n;
  void *data;
  gboolean owned;       /* allocated here (writable), else inside the mapping */
} DflDrafterWeight;

/* What a back end does with bound weights: make a context, free its
 * state (`native`: its weights on the device). */
typedef struct {
  DflDraftCtx *(*ctx_new) (DflDrafterWeights *bound, GError **error);
  void (*free) (gpointer native);
} DflDraftEngine;

struct _DflDrafterWeights {
  gint refcount;
  char *path;
  DflDrafterGeometry g;
  gboolean v1, conv, selector;
  DflRoute *route;
  char binding[17];
  gboolean has_binding;
  char binding_signs[17];   /* base_binding.trunk_signs64 (trunk-hash.c) */
  gboolean has_binding_signs;
  float *binding_sample;    /* base_binding.trunk_sample: the values (trunk-hash.c) */
  guint n_binding_sample;
  char *arena_cache;        /* where a CPU binding keeps its Q8_0 matrices, or NULL */

  /* the weights in host memory (none for weights made on a device) */
  DflSafetensors *st;   /* kept open: weights may point into its mapping */
  GArray *weights;      /* DflDrafterWeight */
  DflWeights fc;                    /* [hidden][n_taps·hidden] */
  const float *hidden_norm, *norm;
  DflWeights sel;                   /* [selector_rank][hidden] */
  const guint16 *books[2];          /* predecessor, successor: F16 [vocab][rank] */
  DflDrafterLayer *layers;
  float *inv_freq;

  /* bound weights (dfl_drafter_weights_bind): the host weights they were
   * made from (a reference; NULL for weights made on the device), the
   * back end, its device (NULL: the CPU), the target's trunk, the back
   * end's state */
  DflDrafterWeights *host;
  const DflDraftEngine *engine;
  DflDevice *device;
  DflDraftTrunk trunk;
  gpointer native;
  guint64 device_bytes;
};

/* Where the host-side facts of bound weights are (the router, the
 * matrices as loaded): the weights they were made from. */
static inline const DflDrafterWeights *
dfl_drafter_weights_base (const DflDrafterWeights *w)
{
  return w->host ? w->host : w;
}

/* sidecar.c */
DflDrafterWeights *dfl_drafter_weights_alloc (const DflDrafterGeometry *g, const char *path);
/* Bound weights of `engine` for `host` (a reference taken; NULL: weights
 * made on the device, of geometry `g` and name `path`). */
DflDrafterWeights *dfl_drafter_weights_new_bound (DflDrafterWeights *host,
                                                  const DflDrafterGeometry *g, const char *path,
                                                  const DflDraftEngine *engine, DflDevice *device,
                                                  const DflDraftTrunk *trunk);

/* drafter-select.c */
DflRoute *dfl_route_parse (const char *json, int hidden, const char *origin, GError **error);
void dfl_route_free (DflRoute *r);

/* trunk-hash.c */
/* Values of the embedding (and of an untied head) a sidecar's trunk_sample
 * holds: DFL_TRUNK_SAMPLE of each tensor. */
#define DFL_TRUNK_SAMPLE 256
/* The k-th sampled element (k < DFL_TRUNK_SAMPLE) of tensor `which` (0 the
 * embedding, 1 an untied head) of n elements. */
gint64 dfl_trunk_sample_position (int which, int k, gint64 n);
/* Target tensor t's value at element e dequantized into `have`, and how
 * far it may be from the value `want` the drafter's target held there and
 * still be that value stored in t's type (its worst-case rounding). */
double dfl_trunk_value_tolerance (const DflStoredTensor *t, gint64 e, float want, float *have);

/* draft-trunk.c */
/* Refuse a trunk the drafter cannot read: matrices of its hidden width,
 * the embedding at least vocab rows and the head at least selector_top,
 * packed, F32, F16, BF16 or block-quantized (blocks in a GPU's memory only
 * of a type it runs: host blocks are dequantized as they go up), in host
 * memory or on `device` (a GPU; NULL or the CPU: host memory only).
 * Messages name `name`. */
gboolean dfl_draft_trunk_check (const DflDraftTrunk *trunk, DflDevice *device, const char *name,
                                const DflDrafterGeometry *g, gboolean selector, GError **error);

/* draft-device.c */
/* `w` (host weights) ready to draft on `device` (NULL: the CPU) reading
 * `trunk` (checked by the caller): its tensors borrowed from host memory
 * on the CPU, uploaded elsewhere (matrices as dfl_drafter_weights_bind
 * says), the device's capabilities checked for every op a block needs. */
DflDrafterWeights *dfl_drafter_weights_bind_net (DflDrafterWeights *w, DflDevice *device,
                                                 const DflDraftTrunk *trunk,
                                                 DflDtype matrix_dtype, GError **error);

G_END_DECLS
