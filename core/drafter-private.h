/* gst-dflash — the drafter's state, shared by its source files (sidecar.c
 * loads it, drafter-context.c keeps its context, drafter.c runs the block,
 * drafter-select.c picks the tokens). Not installed, not for elements.
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

/* A layer's keys and values per KV head, a row of head_dim per position, in
 * buffers of `cap` rows of which rows start … start+held−1 are live. The
 * layer holds positions first + dropped … first + dropped + held − 1. */
typedef struct {
  float **k, **v;
  gsize cap, start, held;
  gint64 dropped;
} DflLayerContext;

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

struct _DflDrafter {
  char *path;
  DflDrafterGeometry g;
  DflSafetensors *st;   /* kept open: weights may point into its mapping */
  GArray *weights;      /* DflDrafterWeight */
  gboolean v1, conv, selector;

  DflWeights fc;                    /* [hidden][n_taps·hidden] */
  const float *hidden_norm, *norm;
  DflWeights sel;                   /* [selector_rank][hidden] */
  const guint16 *books[2];          /* predecessor, successor: F16 [vocab][rank] */
  DflDrafterLayer *layers;
  float *inv_freq;
  DflRoute *route;
  char binding[17];
  gboolean has_binding;

  /* the context covers positions first … first+len−1, then pending_rows
   * waiting rows (their taps) */
  DflLayerContext *ctx;
  gint64 first, len;
  float *pending;
  gsize pending_rows, pending_cap;

  /* the block's scratch, sized at creation; the scores grow with the context */
  float *s_x, *s_x2, *s_q, *s_k, *s_v, *s_y, *s_o, *s_d, *s_gate, *s_up;
  float *s_qg, *s_kb, *s_og, *s_sc, *s_vt;
  gsize s_sc_cap, s_vt_cap;
};

/* sidecar.c */
DflDrafter *dfl_drafter_alloc (const DflDrafterGeometry *g, const char *path);
/* Allocate the context and the block's scratch once the weights are in. */
void dfl_drafter_init_state (DflDrafter *d);
void dfl_drafter_free_state (DflDrafter *d);

/* drafter-select.c */
DflRoute *dfl_route_parse (const char *json, int hidden, const char *origin, GError **error);
void dfl_route_free (DflRoute *r);

/* drafter-context.c */
void dfl_drafter_settle_rows (DflDrafter *d, gint64 pos, const float *taps, gsize n);

G_END_DECLS
