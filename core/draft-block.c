/* gst-dflash — the drafter's block (DESIGN.md, "The math"): the target's
 * embeddings of [anchor, MASK …] through the drafter's layers, each a
 * Qwen3-shaped layer wrapped in grouped causal convolutions over the
 * block's rows and attending to its (windowed) context and to every row
 * of the block; the last norm; the logits of the rows after the anchor's.
 *
 * Where a block's keys go: attention reads one key tensor with a range per
 * query row, so the block's keys must sit next to the context's. A layer
 * that sees all its context keeps them in the rows in front of its first
 * context row (draft-rows.c), and the range [0, block + context) covers
 * both. A windowed layer's rows move as the context grows and each row's
 * lower end differs, so its window of context rows is gathered (an
 * embedding over the layer's rows as a table) into a scratch whose last
 * `block` rows take the block's keys.
 *
 * Everything that changes from block to block (the anchor's position and
 * id, the key ranges, the gather) is in the context's index tensors, set
 * once before the block's ops.
 */
#include "draft-forward.h"
#include "dfl-error.h"

#include <math.h>

/* The block's index tensors into the params area's host mirror. */
void
dfl_draft_run_fill_params (DflDraftRun *run, gint64 anchor_pos, guint32 anchor)
{
  const DflDrafterGeometry *g = run->base.g;
  guint8 *p = run->params.host;
  gint32 *ids = (gint32 *) (p + run->params.off_ids);
  int b = g->block;

  *(gint64 *) (p + run->params.off_pos) = anchor_pos;
  ids[0] = (gint32) anchor;
  for (int r = 1; r < b; r++)
    ids[r] = (gint32) g->mask_token;
  for (int l = 0; l < g->layers; l++) {
    const DflDraftLayerRows *rows = &run->base.rows[l];
    gint32 *lo = (gint32 *) (p + run->params.off_lo) + (gsize) l * b;
    gint32 *hi = (gint32 *) (p + run->params.off_hi) + (gsize) l * b;
    int w = dfl_drafter_geometry_window_of (g, l);
    gint64 base, clo, chi;
    gint32 *gather;

    dfl_draft_ctx_layer_range (&run->base, l, anchor_pos, &base, &clo, &chi);
    if (w == 0) {
      /* [block rows][context rows from base]: a layer that sees all its
       * context drops none, so its first row is the front's next */
      g_assert (rows->start == 0);
      for (int r = 0; r < b; r++) {
        lo[r] = 0;
        hi[r] = (gint32) (run->kv[l].front + (gsize) (chi - base));
      }
      continue;
    }
    /* slot s of the gathered window holds position chi − w + s; a row sees
     * no further back than anchor + r + 1 − w (the window shrinks row by
     * row); slots before the layer's first row are read by no range */
    gather = (gint32 *) (p + run->params.off_gather[l]);
    for (int s = 0; s < w; s++) {
      gint64 pos = chi - w + s;
      gather[s] = pos >= base ? (gint32) (rows->start + (gsize) (pos - base)) : 0;
    }
    for (int r = 0; r < b; r++) {
      gint64 from = CLAMP (anchor_pos + r + 1 - w, clo, chi);
      lo[r] = (gint32) (w - (chi - from));
      hi[r] = w + b;
    }
  }
}

/* --- a pass: n blocks' rows through the layers --- */

gsize
dfl_draft_pass_bytes (const DflDrafterGeometry *g, gboolean conv, int n)
{
  gsize rows = (gsize) n * g->block, hs = g->hidden, qd = (gsize) g->heads * g->head_dim;
  gsize kproj = conv ? 2 * (gsize) g->conv_kernel * (hs / g->conv_group) : 1;

  return 4 * dfl_draft_aligned (rows * hs * sizeof (float))
         + 2 * dfl_draft_aligned (rows * qd * sizeof (float))
         + dfl_draft_aligned (rows * kproj * sizeof (float))
         + 2 * dfl_draft_aligned (rows * g->intermediate * sizeof (float));
}

void
dfl_draft_pass_place (DflDraftPass *p, DflDevice *dev, const DflDraftNet *net,
                      const DflDrafterGeometry *g, int n, gpointer mem)
{
  gsize rows = (gsize) n * g->block, hs = g->hidden, qd = (gsize) g->heads * g->head_dim;
  gsize kproj = net->conv ? 2 * (gsize) g->conv_kernel * (hs / g->conv_group) : 1, off = 0;
  struct { DflTensor *t; gsize cols; } parts[] = {
    { &p->h, hs }, { &p->x, hs }, { &p->x2, hs }, { &p->o, hs }, { &p->q, qd }, { &p->y, qd },
    { &p->d, kproj }, { &p->gate, g->intermediate }, { &p->up, g->intermediate },
  };

  p->dev = dev;
  p->net = net;
  p->g = g;
  p->n = n;
  for (guint i = 0; i < G_N_ELEMENTS (parts); i++) {
    *parts[i].t = dfl_tensor_2d (dev, mem, off, DFL_DTYPE_F32, (gint64) rows,
                                 (gint64) parts[i].cols);
    off += dfl_draft_aligned (rows * parts[i].cols * sizeof (float));
  }
}

/* The convolution runs down a block's rows (row r sees rows r − kernel + 1
 * … r of its own block): each block of the pass on its own. */
static gboolean
row_conv (const DflDraftPass *p, const DflTensor *x, const DflTensor *base, const DflTensor *dyn,
          DflTensor *y, GError **error)
{
  int b = p->g->block;

  for (int i = 0; i < p->n; i++) {
    DflTensor xi = dfl_draft_rows (x, (gint64) i * b, b), di = dfl_draft_rows (dyn, (gint64) i * b, b);
    DflTensor yi = dfl_draft_rows (y, (gint64) i * b, b);
    if (!dfl_op_row_conv (p->dev, &xi, base, &di, &yi, error))
      return FALSE;
  }
  return TRUE;
}

/* x through convolution `which`'s stage 0 (its rows' own kernels into d);
 * without convolutions x as it is. */
static gboolean
conv_in (DflDraftPass *p, const DflDraftLayerNet *L, int which, DflTensor **x, GError **error)
{
  const DflDrafterGeometry *g = p->g;
  gint64 half = (gint64) g->conv_kernel * (g->hidden / g->conv_group);
  DflTensor dyn;

  if (!p->net->conv)
    return TRUE;
  dyn = p->d;
  dyn.ne[0] = half;
  if (!dfl_op_matmul (p->dev, &L->conv_proj[which], *x, &p->d, FALSE, error)
      || !row_conv (p, *x, &L->conv_base[which][0], &dyn, &p->x2, error))
    return FALSE;
  *x = &p->x2;
  return TRUE;
}

/* h += stage 1 of convolution `which` over o (or h += o); x is scratch. */
static gboolean
conv_out_add (DflDraftPass *p, const DflDraftLayerNet *L, int which, GError **error)
{
  const DflDrafterGeometry *g = p->g;
  gint64 half = (gint64) g->conv_kernel * (g->hidden / g->conv_group);
  DflTensor dyn;

  if (!p->net->conv)
    return dfl_op_add (p->dev, &p->h, &p->o, error);
  dyn = p->d;
  dyn.offset += (gsize) half * sizeof (float);
  dyn.ne[0] = half;
  return row_conv (p, &p->o, &L->conv_base[which][1], &dyn, &p->x, error)
         && dfl_op_add (p->dev, &p->h, &p->x, error);
}

gboolean
dfl_draft_pass_qkv (DflDraftPass *p, int l, DflTensor *k, DflTensor *v, const DflTensor *pos,
                    GError **error)
{
  const DflDrafterGeometry *g = p->g;
  const DflDraftLayerNet *L = &p->net->layers[l];
  DflDevice *dev = p->dev;
  gint64 rows = (gint64) p->n * g->block;
  int hd = g->head_dim;
  float eps = (float) g->eps;
  DflTensor q_heads = dfl_draft_heads (&p->q, g->heads), k_heads = dfl_draft_heads (k, g->kv_heads);
  DflTensor q_rows = dfl_tensor_2d (dev, p->q.handle, p->q.offset, DFL_DTYPE_F32,
                                    rows * g->heads, hd);
  DflTensor k_rows = dfl_tensor_2d (dev, k->handle, k->offset, DFL_DTYPE_F32,
                                    rows * g->kv_heads, hd);
  DflTensor *x = &p->x;

  if (!dfl_op_rmsnorm (dev, &p->h, &L->in_norm, &p->x, eps, error)
      || !conv_in (p, L, 0, &x, error)
      || !dfl_op_matmul_group (dev, 3, (const DflTensor *[]) { &L->q, &L->k, &L->v }, x,
                               (DflTensor *[]) { &p->q, k, v }, FALSE, error))
    return FALSE;
  /* q and k normed per head, then roped where the layer is rotary */
  if (!dfl_drafter_geometry_rotary (g, l))
    return dfl_op_rmsnorm (dev, &q_rows, &L->q_norm, &q_rows, eps, error)
           && dfl_op_rmsnorm (dev, &k_rows, &L->k_norm, &k_rows, eps, error);
  return dfl_op_norm_rope (dev, &q_heads, &L->q_norm, &p->net->inv_freq, pos, eps, error)
         && dfl_op_norm_rope (dev, &k_heads, &L->k_norm, &p->net->inv_freq, pos, eps, error);
}

gboolean
dfl_draft_pass_finish_layer (DflDraftPass *p, int l, GError **error)
{
  const DflDraftLayerNet *L = &p->net->layers[l];
  DflDevice *dev = p->dev;
  DflTensor *x = &p->x;

  if (!dfl_op_matmul (dev, &L->o, &p->y, &p->o, FALSE, error) || !conv_out_add (p, L, 0, error))
    return FALSE;
  /* the MLP, wrapped the same way */
  return dfl_op_rmsnorm (dev, &p->h, &L->post_norm, &p->x, (float) p->g->eps, error)
         && conv_in (p, L, 1, &x, error)
         && dfl_op_matmul_group (dev, 2, (const DflTensor *[]) { &L->gate, &L->up }, x,
                                 (DflTensor *[]) { &p->gate, &p->up }, FALSE, error)
         && dfl_op_silu_mul (dev, &p->gate, &p->up, error)
         && dfl_op_matmul (dev, &L->down, &p->gate, &p->o, FALSE, error)
         && conv_out_add (p, L, 1, error);
}

/* --- one sequence's block --- */

void
dfl_draft_run_layer_keys (DflDraftRun *run, int l, DflTensor *keys, DflTensor *values,
                          DflTensor *bk, DflTensor *bv)
{
  const DflDrafterGeometry *g = run->base.g;
  int b = g->block, w = dfl_drafter_geometry_window_of (g, l);

  if (w == 0) {
    *keys = dfl_draft_kv_all (run, l, FALSE);
    *values = dfl_draft_kv_all (run, l, TRUE);
    *bk = dfl_draft_rows (keys, 0, b);
    *bv = dfl_draft_rows (values, 0, b);
  } else {
    *keys = run->win_k[l];
    *values = run->win_v[l];
    *bk = dfl_draft_rows (keys, w, b);
    *bv = dfl_draft_rows (values, w, b);
  }
}

gboolean
dfl_draft_run_gather_window (DflDraftRun *run, int l, GError **error)
{
  const DflDrafterGeometry *g = run->base.g;
  int w = dfl_drafter_geometry_window_of (g, l), from = 0;
  DflTensor table_k, table_v, gather, win_k, win_v;

  if (w == 0)
    return TRUE;
  table_k = dfl_draft_kv_all (run, l, FALSE);
  table_v = dfl_draft_kv_all (run, l, TRUE);
  if (run->net->host_indices && !run->net->can_capture) {
    /* ops dispatched one by one, reading the indices on the host: only the
     * slots some row reads (from row 0's lower end on; a short context
     * fills a few of the window's slots) */
    from = ((const gint32 *) (run->params.host + run->params.off_lo))[(gsize) l * g->block];
    from = CLAMP (from, 0, w);
    if (from == w)
      return TRUE;
  }
  gather = dfl_draft_param (run, run->params.off_gather[l] + (gsize) from * sizeof (gint32),
                            DFL_DTYPE_I32, w - from);
  win_k = dfl_draft_rows (&run->win_k[l], from, w - from);
  win_v = dfl_draft_rows (&run->win_v[l], from, w - from);
  return dfl_op_embed (run->dev, &table_k, &gather, &win_k, error)
         && dfl_op_embed (run->dev, &table_v, &gather, &win_v, error);
}

/* One layer: attention over the context and the block, then the MLP, each
 * wrapped in its convolution and added to h. The block's keys and values
 * go straight where attention reads them. */
static gboolean
layer (DflDraftRun *run, int l, const DflTensor *pos, GError **error)
{
  const DflDrafterGeometry *g = run->base.g;
  DflDraftPass *p = &run->pass;
  int b = g->block;
  float scale = 1.0f / sqrtf ((float) g->head_dim);
  DflTensor keys, values, bk, bv, q_heads, y_heads, lo, hi;

  lo = dfl_draft_param (run, run->params.off_lo + (gsize) l * b * sizeof (gint32),
                        DFL_DTYPE_I32, b);
  hi = dfl_draft_param (run, run->params.off_hi + (gsize) l * b * sizeof (gint32),
                        DFL_DTYPE_I32, b);
  dfl_draft_run_layer_keys (run, l, &keys, &values, &bk, &bv);
  q_heads = dfl_draft_heads (&p->q, g->heads);
  y_heads = dfl_draft_heads (&p->y, g->heads);
  keys = dfl_draft_heads (&keys, g->kv_heads);
  values = dfl_draft_heads (&values, g->kv_heads);
  return dfl_draft_run_gather_window (run, l, error)
         && dfl_draft_pass_qkv (p, l, &bk, &bv, pos, error)
         && dfl_op_attention (run->dev, &q_heads, &keys, &values, &lo, &hi, &y_heads, scale,
                              error)
         && dfl_draft_pass_finish_layer (p, l, error);
}

/* Every op of a block, from the embedding to the logits, into `out`
 * (dispatched, or recorded in a capture). */
static gboolean
enqueue_block (DflDraftRun *run, int width, DflDevice *out_dev, gpointer out_mem, gsize out_off,
               GError **error)
{
  const DflDrafterGeometry *g = run->base.g;
  DflDevice *dev = run->dev;
  int b = g->block, hs = g->hidden;
  DflTensor ids = dfl_draft_param (run, run->params.off_ids, DFL_DTYPE_I32, b);
  DflTensor pos = dfl_draft_param (run, run->params.off_pos, DFL_DTYPE_I64, 1);
  DflTensor zero = dfl_draft_param (run, run->params.off_zero, DFL_DTYPE_I64, 1);
  DflTensor rows = dfl_tensor_2d (out_dev, out_mem, out_off, DFL_DTYPE_F32, b - 1, hs);
  DflTensor logits = dfl_tensor_2d (out_dev, out_mem,
                                    out_off + (gsize) (b - 1) * hs * sizeof (float),
                                    DFL_DTYPE_F32, b - 1, width);
  DflTensor after_anchor = dfl_draft_rows (&run->pass.h, 1, b - 1);

  if (!dfl_op_embed (dev, &run->net->embed, &ids, &run->pass.h, error))
    return FALSE;
  for (int l = 0; l < g->layers; l++)
    if (!layer (run, l, &pos, error))
      return FALSE;
  /* every row normed (the CPU's parity tests read them all), the rows
   * after the anchor's into the output, their logits over the head's first
   * `width` rows after them */
  return dfl_op_rmsnorm (dev, &run->pass.h, &run->net->norm, &run->pass.h, (float) g->eps, error)
         && dfl_op_copy_rows (dev, &after_anchor, &zero, &rows, error)
         && dfl_op_matmul (dev, &run->net->head, &rows, &logits, FALSE, error);
}

/* A block on a device that records graphs: run once directly (every
 * scratch an op makes is made outside the capture) and captured, where the
 * graph is missing or stale; else the graph replayed. Into the run's own
 * output, which the caller copies out. */
static gboolean
graph_block (DflDraftRun *run, int width, GError **error)
{
  DflDevice *dev = run->dev;
  GError *launch_error = NULL;
  gboolean recorded;

  if (run->graph && run->graph_generation == run->generation && run->graph_width == width) {
    if (dfl_op_graph_launch (dev, run->graph, &launch_error))
      return TRUE;
    /* a scratch of the device moved since the capture: capture again */
    if (!g_error_matches (launch_error, DFL_ERROR, DFL_ERROR_MISMATCH)) {
      g_propagate_error (error, launch_error);
      return FALSE;
    }
    g_clear_error (&launch_error);
  }
  g_clear_pointer (&run->graph, dfl_graph_free);
  if (!run->graph_out) {
    const DflDrafterGeometry *g = run->base.g;
    gsize bytes = (gsize) (g->block - 1) * (g->hidden + dfl_draft_ctx_head_rows (&run->base))
                  * sizeof (float);
    if (!(run->graph_out = dfl_device_alloc (dev, bytes, error)))
      return FALSE;
  }
  if (!enqueue_block (run, width, dev, run->graph_out, 0, error)
      || !dfl_op_capture_begin (dev, error))
    return FALSE;
  recorded = enqueue_block (run, width, dev, run->graph_out, 0, error);
  /* the capture ends whatever happened inside it; a graph of a failed
   * recording is not kept */
  run->graph = dfl_op_capture_end (dev, recorded ? error : NULL);
  if (!recorded) {
    g_clear_pointer (&run->graph, dfl_graph_free);
    return FALSE;
  }
  if (!run->graph)
    return FALSE;
  run->graph_generation = run->generation;
  run->graph_width = width;
  return TRUE;
}

gboolean
dfl_draft_run_block (DflDraftCtx *ctx, gint64 anchor_pos, guint32 anchor, int width,
                     const DflTensor *out, GError **error)
{
  DflDraftRun *run = (DflDraftRun *) ctx;
  DflDevice *dev = run->dev;
  gint64 n = (gint64) (dfl_draft_ctx_block_bytes (ctx, width) / sizeof (float));
  DflTensor zero, from, to;

  dfl_draft_run_fill_params (run, anchor_pos, anchor);
  /* after the last block's ops have read the area (an upload waits for them) */
  if (!dfl_draft_params_upload (run, 0, run->params.bytes, error))
    return FALSE;
  if (!run->net->can_capture || !run->net->graphs)
    return enqueue_block (run, width, out->device, out->handle, out->offset, error);
  if (!graph_block (run, width, error))
    return FALSE;
  /* the graph's output (one row of every value) into the caller's */
  zero = dfl_draft_param (run, run->params.off_zero, DFL_DTYPE_I64, 1);
  from = dfl_tensor_2d (dev, run->graph_out, 0, DFL_DTYPE_F32, 1, n);
  to = dfl_tensor_2d (out->device, out->handle, out->offset, DFL_DTYPE_F32, 1, n);
  return dfl_op_copy_rows (dev, &from, &zero, &to, error);
}

const float *
dfl_draft_ctx_block_rows (const DflDraftCtx *ctx)
{
  const DflDraftRun *run = (const DflDraftRun *) ctx;

  if (ctx->w->engine != &dfl_draft_engine
      || dfl_device_backend (run->dev) != DFL_BACKEND_CPU)
    return NULL;
  return dfl_tensor_data (&run->pass.h);
}
