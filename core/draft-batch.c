/* gst-dflash — the blocks, selections and settles of several sequences in
 * one pass.
 *
 * A block is 16 rows through every matrix of the drafter and the
 * target's head; on a GPU that is a read of all those weights for a few
 * rows, and on the CPU every product pays its hand-out to the threads for
 * a small piece of work. Blocks of n sequences stacked into n · block rows
 * read the weights once and hand out each product once. What belongs to a
 * sequence stays its own: its anchor, positions and key ranges (its params
 * area, filled as for a block alone), its block keys written into its own
 * layer rows (one copy_rows_table a layer for all), its attention over its
 * own context (one attention_table a layer), a windowed layer's gather,
 * and the convolutions, which run down each block's own rows. Settles go
 * the same way (every context's waiting rows stacked through FC and each
 * layer's keys and values, each row into its own context's layer rows);
 * selections are queued for every context before the first ids come back.
 *
 * The ops are the block's own (draft-block.c's pass, layer by layer), so
 * on a back end whose products and attention are row-invariant (the CPU)
 * each sequence's rows and logits are bitwise its block alone; on a GPU
 * within the products' rounding (their kernels are picked by the rows).
 * No graph: a batch's ops are dispatched as they come (its sequences and
 * their buffers change from pass to pass).
 */
#include "draft-forward.h"
#include "dfl-error.h"

#include <math.h>
#include <string.h>

/* Rows a settle of several contexts takes in one pass: more waiting (a
 * prompt's) settle context by context, in passes of their own. */
#define SETTLE_ROWS DFL_DRAFTER_SETTLE_BATCH

struct _DflDraftBatch {
  DflDrafterWeights *w;         /* bound, a reference */
  const DflDraftNet *net;
  const DflDrafterGeometry *g;
  DflDevice *dev;
  int cap;
  /* the blocks' scratch, made at the first batch of blocks */
  gpointer scratch;
  /* placed for `cap` blocks; a call views its first n */
  DflDraftPass pass;
  DflTensor kb, vb;             /* the blocks' keys and values, [cap · block][kv] */
  DflTensor hrows;              /* the rows after each anchor, [cap · (block − 1)][hidden] */
  DflTensor logits;             /* their logits, [cap · (block − 1)][head rows] */
  /* a settle's scratch, made at the first batched settle: the waiting
   * rows stacked, FC's rows, the keys and values [SETTLE_ROWS][…] */
  gpointer settle_mem;
  DflTensor s_taps, s_t, s_k, s_v;
  /* the index tensors: a host mirror, and device memory where the device
   * does not read indices on the host */
  guint8 *host;
  gpointer dev_mem;
  gsize bytes;
  gsize off_ids, off_pos, off_which, off_jrow, off_lo, off_hi, off_hrow0, off_owhich, off_orow;
  gsize off_spos, off_swhich, off_srow, off_srow0;
};

static gsize
carve (gsize *off, gsize bytes)
{
  gsize at = *off;

  *off += dfl_draft_aligned (bytes);
  return at;
}

static DflTensor
param (const DflDraftBatch *batch, gsize off, DflDtype dtype, gint64 n)
{
  if (batch->net->host_indices)
    return dfl_tensor_2d (NULL, batch->host + off, 0, dtype, 1, n);
  return dfl_tensor_2d (batch->dev, batch->dev_mem, off, dtype, 1, n);
}

DflDraftBatch *
dfl_draft_batch_new (DflDrafterWeights *bound, int max_sequences, GError **error)
{
  static const DflOp needs[] = { DFL_OP_COPY_ROWS_TABLE, DFL_OP_ATTENTION_TABLE };
  const DflDraftNet *net;
  const DflDrafterGeometry *g;
  DflDraftBatch *batch;
  gsize rows, off = 0, heads_rows;

  g_return_val_if_fail (bound != NULL, NULL);
  if (bound->engine != &dfl_draft_engine) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "%s: a batch of blocks needs weights bound to a device "
                 "(dfl_drafter_weights_bind)", bound->path);
    return NULL;
  }
  if (max_sequences < 1 || max_sequences > DFL_OP_TABLE_MAX) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "%s: a batch of %d sequences; it takes 1 to %d", bound->path, max_sequences,
                 DFL_OP_TABLE_MAX);
    return NULL;
  }
  net = bound->native;
  for (guint i = 0; i < G_N_ELEMENTS (needs); i++)
    if (!dfl_device_supports (net->dev, needs[i], DFL_DTYPE_F32)) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                   "%s: %s does not run %s, which a batch of blocks needs", bound->path,
                   dfl_device_describe (net->dev), dfl_op_name (needs[i]));
      return NULL;
    }
  g = &bound->g;
  batch = g_new0 (DflDraftBatch, 1);
  batch->w = dfl_drafter_weights_ref (bound);
  batch->net = net;
  batch->g = g;
  batch->dev = dfl_device_ref (net->dev);
  batch->cap = max_sequences;

  rows = (gsize) max_sequences * g->block;
  heads_rows = (gsize) max_sequences * (g->block - 1);
  batch->off_ids = carve (&off, rows * sizeof (gint32));
  batch->off_pos = carve (&off, rows * sizeof (gint64));
  batch->off_which = carve (&off, rows * sizeof (gint32));
  batch->off_jrow = carve (&off, rows * sizeof (gint64));
  batch->off_lo = carve (&off, (gsize) g->layers * rows * sizeof (gint32));
  batch->off_hi = carve (&off, (gsize) g->layers * rows * sizeof (gint32));
  batch->off_hrow0 = carve (&off, (gsize) max_sequences * sizeof (gint64));
  batch->off_owhich = carve (&off, heads_rows * sizeof (gint32));
  batch->off_orow = carve (&off, heads_rows * sizeof (gint64));
  batch->off_spos = carve (&off, SETTLE_ROWS * sizeof (gint64));
  batch->off_swhich = carve (&off, SETTLE_ROWS * sizeof (gint32));
  batch->off_srow = carve (&off, (gsize) g->layers * SETTLE_ROWS * sizeof (gint64));
  batch->off_srow0 = carve (&off, (gsize) max_sequences * sizeof (gint64));
  batch->bytes = off;
  batch->host = g_malloc0 (off);
  if (!net->host_indices && !(batch->dev_mem = dfl_device_alloc (batch->dev, off, error)))
    goto fail;
  return batch;

fail:
  dfl_draft_batch_free (batch);
  return NULL;
}

void
dfl_draft_batch_free (DflDraftBatch *batch)
{
  if (!batch)
    return;
  if (batch->dev) {
    dfl_device_free (batch->dev, batch->scratch);
    dfl_device_free (batch->dev, batch->settle_mem);
    dfl_device_free (batch->dev, batch->dev_mem);
    dfl_device_unref (batch->dev);
  }
  g_free (batch->host);
  dfl_drafter_weights_unref (batch->w);
  g_free (batch);
}

int
dfl_draft_batch_capacity (const DflDraftBatch *batch)
{
  return batch->cap;
}

/* The blocks' scratch, made once. */
static gboolean
block_room (DflDraftBatch *batch, GError **error)
{
  const DflDrafterGeometry *g = batch->g;
  gsize rows = (gsize) batch->cap * g->block, heads_rows = (gsize) batch->cap * (g->block - 1);
  gsize kd = (gsize) g->kv_heads * g->head_dim, head = (gsize) batch->net->head.ne[1], off = 0;
  gsize at_k, at_v, at_h, at_l;

  if (batch->scratch)
    return TRUE;
  carve (&off, dfl_draft_pass_bytes (g, batch->net->conv, batch->cap));
  at_k = carve (&off, rows * kd * sizeof (float));
  at_v = carve (&off, rows * kd * sizeof (float));
  at_h = carve (&off, heads_rows * g->hidden * sizeof (float));
  at_l = carve (&off, heads_rows * head * sizeof (float));
  if (!(batch->scratch = dfl_device_alloc (batch->dev, off, error)))
    return FALSE;
  dfl_draft_pass_place (&batch->pass, batch->dev, batch->net, g, batch->cap, batch->scratch);
  batch->kb = dfl_tensor_2d (batch->dev, batch->scratch, at_k, DFL_DTYPE_F32, rows, kd);
  batch->vb = dfl_tensor_2d (batch->dev, batch->scratch, at_v, DFL_DTYPE_F32, rows, kd);
  batch->hrows = dfl_tensor_2d (batch->dev, batch->scratch, at_h, DFL_DTYPE_F32, heads_rows,
                                g->hidden);
  batch->logits = dfl_tensor_2d (batch->dev, batch->scratch, at_l, DFL_DTYPE_F32, heads_rows,
                                 head);
  return TRUE;
}

/* The sequences as the batch takes them: made from its weights, each
 * once. */
static gboolean
check_contexts (DflDraftBatch *batch, DflDraftCtx *const *ctxs, int n, GError **error)
{
  if (n < 1 || n > batch->cap) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "%s: a batch of %d contexts; this one takes 1 to %d", batch->w->path, n,
                 batch->cap);
    return FALSE;
  }
  for (int s = 0; s < n; s++) {
    if (!ctxs[s] || ctxs[s]->w != batch->w) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                   "%s: sequence %d of the batch is not a context of the batch's bound weights",
                   batch->w->path, s);
      return FALSE;
    }
    for (int t = 0; t < s; t++)
      if (ctxs[t] == ctxs[s]) {
        g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                     "%s: sequences %d and %d of the batch are the same context (a context "
                     "takes one part of a pass)", batch->w->path, t, s);
        return FALSE;
      }
  }
  return TRUE;
}

/* The sequences as the batch takes them, each ready for its block
 * (checked and settled). */
static gboolean
check_sequences (DflDraftBatch *batch, DflDraftCtx *const *ctxs, int n, const gint64 *anchor_pos,
                 const guint32 *anchor, int width, const DflTensor *out, GError **error)
{
  if (!check_contexts (batch, ctxs, n, error))
    return FALSE;
  for (int s = 0; s < n; s++) {
    GError *why = NULL;
    if (!dfl_draft_ctx_block_ready (ctxs[s], anchor_pos[s], anchor[s], width, &out[s], &why)) {
      g_propagate_prefixed_error (error, why, "sequence %d of the batch: ", s);
      return FALSE;
    }
  }
  return TRUE;
}

/* Every sequence's index tensors (its own area, as for its block alone),
 * then the batch's: ids, positions, which sequence and row of its block
 * each row is, the key ranges, where the rows after each anchor go. */
static gboolean
fill_params (DflDraftBatch *batch, DflDraftCtx *const *ctxs, int n, const gint64 *anchor_pos,
             const guint32 *anchor, GError **error)
{
  const DflDrafterGeometry *g = batch->g;
  guint8 *p = batch->host;
  int b = g->block, rows = n * b;

  for (int s = 0; s < n; s++) {
    DflDraftRun *run = (DflDraftRun *) ctxs[s];
    const guint8 *rp = run->params.host;
    dfl_draft_run_fill_params (run, anchor_pos[s], anchor[s]);
    /* after the last block's ops have read the area (an upload waits for them) */
    if (!dfl_draft_params_upload (run, 0, run->params.bytes, error))
      return FALSE;
    for (int j = 0; j < b; j++) {
      int r = s * b + j;
      ((gint32 *) (p + batch->off_ids))[r] = ((const gint32 *) (rp + run->params.off_ids))[j];
      ((gint64 *) (p + batch->off_pos))[r] = anchor_pos[s] + j;
      ((gint32 *) (p + batch->off_which))[r] = s;
      ((gint64 *) (p + batch->off_jrow))[r] = j;
    }
    for (int l = 0; l < g->layers; l++) {
      memcpy (p + batch->off_lo + ((gsize) l * rows + (gsize) s * b) * sizeof (gint32),
              rp + run->params.off_lo + (gsize) l * b * sizeof (gint32), b * sizeof (gint32));
      memcpy (p + batch->off_hi + ((gsize) l * rows + (gsize) s * b) * sizeof (gint32),
              rp + run->params.off_hi + (gsize) l * b * sizeof (gint32), b * sizeof (gint32));
    }
    ((gint64 *) (p + batch->off_hrow0))[s] = (gint64) s * (b - 1);
    for (int j = 0; j < b - 1; j++) {
      ((gint32 *) (p + batch->off_owhich))[s * (b - 1) + j] = s;
      ((gint64 *) (p + batch->off_orow))[s * (b - 1) + j] = j;
    }
  }
  if (batch->net->host_indices)
    return TRUE;
  return dfl_device_upload (batch->dev, batch->dev_mem, 0, batch->host, batch->bytes, error);
}

/* The pass's tensors for its first n blocks. */
static DflDraftPass
pass_of (const DflDraftBatch *batch, int n)
{
  DflDraftPass p = batch->pass;
  gint64 rows = (gint64) n * batch->g->block;
  DflTensor *t[] = { &p.h, &p.x, &p.x2, &p.q, &p.y, &p.o, &p.d, &p.gate, &p.up };

  p.n = n;
  for (guint i = 0; i < G_N_ELEMENTS (t); i++)
    *t[i] = dfl_draft_rows (t[i], 0, rows);
  return p;
}

/* Layer l for every sequence: the windows gathered, q, k and v of all
 * rows, each block's keys and values into its own rows, attention over
 * each sequence's keys, the rest of the layer. */
static gboolean
layer (DflDraftBatch *batch, DflDraftPass *p, DflDraftCtx *const *ctxs, int n, int l,
       GError **error)
{
  const DflDrafterGeometry *g = batch->g;
  gint64 rows = (gint64) n * g->block;
  float scale = 1.0f / sqrtf ((float) g->head_dim);
  DflTensor kb = dfl_draft_rows (&batch->kb, 0, rows), vb = dfl_draft_rows (&batch->vb, 0, rows);
  DflTensor pos = param (batch, batch->off_pos, DFL_DTYPE_I64, rows);
  DflTensor which = param (batch, batch->off_which, DFL_DTYPE_I32, rows);
  DflTensor jrow = param (batch, batch->off_jrow, DFL_DTYPE_I64, rows);
  DflTensor lo = param (batch, batch->off_lo + (gsize) l * rows * sizeof (gint32), DFL_DTYPE_I32,
                        rows);
  DflTensor hi = param (batch, batch->off_hi + (gsize) l * rows * sizeof (gint32), DFL_DTYPE_I32,
                        rows);
  DflTensor q_heads = dfl_draft_heads (&p->q, g->heads), y_heads = dfl_draft_heads (&p->y, g->heads);
  DflTensor keys[DFL_OP_TABLE_MAX], values[DFL_OP_TABLE_MAX];
  DflTensor bk[DFL_OP_TABLE_MAX], bv[DFL_OP_TABLE_MAX];

  for (int s = 0; s < n; s++) {
    DflDraftRun *run = (DflDraftRun *) ctxs[s];
    dfl_draft_run_layer_keys (run, l, &keys[s], &values[s], &bk[s], &bv[s]);
    keys[s] = dfl_draft_heads (&keys[s], g->kv_heads);
    values[s] = dfl_draft_heads (&values[s], g->kv_heads);
    if (!dfl_draft_run_gather_window (run, l, error))
      return FALSE;
  }
  return dfl_draft_pass_qkv (p, l, &kb, &vb, &pos, error)
         && dfl_op_copy_rows_table (batch->dev, &kb, bk, n, &which, &jrow, error)
         && dfl_op_copy_rows_table (batch->dev, &vb, bv, n, &which, &jrow, error)
         && dfl_op_attention_table (batch->dev, &q_heads, keys, values, n, &which, &lo, &hi,
                                    &y_heads, scale, error)
         && dfl_draft_pass_finish_layer (p, l, error);
}

gboolean
dfl_draft_ctx_block_batch (DflDraftBatch *batch, DflDraftCtx *const *ctxs, int n,
                           const gint64 *anchor_pos, const guint32 *anchor, int width,
                           const DflTensor *out, GError **error)
{
  const DflDrafterGeometry *g;
  DflDevice *dev;
  DflDraftPass p;
  int b, hs;
  gint64 after;
  DflTensor ids, hrows, logits, owhich, orow, out_rows[DFL_OP_TABLE_MAX],
      out_logits[DFL_OP_TABLE_MAX];

  g_return_val_if_fail (batch != NULL && ctxs != NULL && anchor_pos != NULL && anchor != NULL
                        && out != NULL, FALSE);
  if (!check_sequences (batch, ctxs, n, anchor_pos, anchor, width, out, error)
      || !block_room (batch, error) || !fill_params (batch, ctxs, n, anchor_pos, anchor, error))
    return FALSE;
  g = batch->g;
  dev = batch->dev;
  b = g->block;
  hs = g->hidden;
  after = (gint64) n * (b - 1);
  p = pass_of (batch, n);
  ids = param (batch, batch->off_ids, DFL_DTYPE_I32, (gint64) n * b);
  if (!dfl_op_embed (dev, &batch->net->embed, &ids, &p.h, error))
    return FALSE;
  for (int l = 0; l < g->layers; l++)
    if (!layer (batch, &p, ctxs, n, l, error))
      return FALSE;
  if (!dfl_op_rmsnorm (dev, &p.h, &batch->net->norm, &p.h, (float) g->eps, error))
    return FALSE;

  /* the rows after each anchor together, the head over them once, then
   * each sequence's rows and logits into its output */
  hrows = dfl_draft_rows (&batch->hrows, 0, after);
  logits = dfl_tensor_2d (dev, batch->logits.handle, batch->logits.offset, DFL_DTYPE_F32, after,
                          width);
  owhich = param (batch, batch->off_owhich, DFL_DTYPE_I32, after);
  orow = param (batch, batch->off_orow, DFL_DTYPE_I64, after);
  for (int s = 0; s < n; s++) {
    DflTensor rows_s = dfl_draft_rows (&p.h, (gint64) s * b + 1, b - 1);
    DflTensor row0 = param (batch, batch->off_hrow0 + (gsize) s * sizeof (gint64), DFL_DTYPE_I64,
                            1);
    if (!dfl_op_copy_rows (dev, &rows_s, &row0, &hrows, error))
      return FALSE;
    out_rows[s] = dfl_tensor_2d (out[s].device, out[s].handle, out[s].offset, DFL_DTYPE_F32,
                                 b - 1, hs);
    out_logits[s] = dfl_tensor_2d (out[s].device, out[s].handle,
                                   out[s].offset + (gsize) (b - 1) * hs * sizeof (float),
                                   DFL_DTYPE_F32, b - 1, width);
  }
  return dfl_op_matmul (dev, &batch->net->head, &hrows, &logits, FALSE, error)
         && dfl_op_copy_rows_table (dev, &hrows, out_rows, n, &owhich, &orow, error)
         && dfl_op_copy_rows_table (dev, &logits, out_logits, n, &owhich, &orow, error);
}

gboolean
dfl_draft_ctx_select_batch (DflDraftBatch *batch, DflDraftCtx *const *ctxs, int n,
                            const DflTensor *blocks, int width, const guint32 *anchor,
                            guint32 *chosen, guint32 *plain, GError **error)
{
  int rows;

  g_return_val_if_fail (batch != NULL && ctxs != NULL && blocks != NULL && anchor != NULL, FALSE);
  if (!check_contexts (batch, ctxs, n, error))
    return FALSE;
  rows = batch->g->block - 1;
  for (int s = 0; s < n; s++) {
    GError *why = NULL;
    if (!dfl_draft_ctx_select_ready (ctxs[s], &blocks[s], width, anchor[s], &why)) {
      g_propagate_prefixed_error (error, why, "sequence %d of the batch: ", s);
      return FALSE;
    }
  }
  /* every pick queued, then the ids fetched: the first fetch waits for all */
  for (int s = 0; s < n; s++)
    if (!dfl_draft_run_pick (ctxs[s], &blocks[s], width, anchor[s], error))
      return FALSE;
  for (int s = 0; s < n; s++)
    if (!dfl_draft_run_picked (ctxs[s], chosen ? chosen + (gsize) s * rows : NULL,
                               plain ? plain + (gsize) s * rows : NULL, error))
      return FALSE;
  return TRUE;
}

/* --- the waiting rows of several contexts settled in one pass --- */

/* A settle's scratch, made once. */
static gboolean
settle_room (DflDraftBatch *batch, GError **error)
{
  const DflDrafterGeometry *g = batch->g;
  gsize tw = (gsize) dfl_drafter_geometry_tap_width (g), kd = (gsize) g->kv_heads * g->head_dim;
  gsize off = 0, at_taps, at_t, at_k, at_v;

  if (batch->settle_mem)
    return TRUE;
  at_taps = carve (&off, SETTLE_ROWS * tw * sizeof (float));
  at_t = carve (&off, SETTLE_ROWS * (gsize) g->hidden * sizeof (float));
  at_k = carve (&off, SETTLE_ROWS * kd * sizeof (float));
  at_v = carve (&off, SETTLE_ROWS * kd * sizeof (float));
  if (!(batch->settle_mem = dfl_device_alloc (batch->dev, off, error)))
    return FALSE;
  batch->s_taps = dfl_tensor_2d (batch->dev, batch->settle_mem, at_taps, DFL_DTYPE_F32,
                                 SETTLE_ROWS, tw);
  batch->s_t = dfl_tensor_2d (batch->dev, batch->settle_mem, at_t, DFL_DTYPE_F32, SETTLE_ROWS,
                              g->hidden);
  batch->s_k = dfl_tensor_2d (batch->dev, batch->settle_mem, at_k, DFL_DTYPE_F32, SETTLE_ROWS,
                              kd);
  batch->s_v = dfl_tensor_2d (batch->dev, batch->settle_mem, at_v, DFL_DTYPE_F32, SETTLE_ROWS,
                              kd);
  return TRUE;
}

gboolean
dfl_draft_ctx_settle_batch (DflDraftBatch *batch, DflDraftCtx *const *ctxs, int n,
                            GError **error)
{
  const DflDrafterGeometry *g;
  DflDevice *dev;
  guint8 *p;
  gsize total = 0, r0[DFL_OP_TABLE_MAX], m[DFL_OP_TABLE_MAX];
  DflTensor t, taps, pos, which;

  g_return_val_if_fail (batch != NULL && ctxs != NULL, FALSE);
  if (!check_contexts (batch, ctxs, n, error))
    return FALSE;
  for (int s = 0; s < n; s++) {
    m[s] = ctxs[s]->pending_rows;
    r0[s] = total;
    total += m[s];
  }
  if (total == 0)
    return TRUE;
  /* one context, or more rows than a pass takes (a prompt): each alone */
  if (n == 1 || total > SETTLE_ROWS) {
    for (int s = 0; s < n; s++)
      if (!dfl_draft_ctx_settle (ctxs[s], error))
        return FALSE;
    return TRUE;
  }
  if (!settle_room (batch, error))
    return FALSE;
  g = batch->g;
  dev = batch->dev;
  p = batch->host;

  /* room in every layer first (a layer's rows may move), then where each
   * row goes: its position, its context, its storage row in each layer */
  for (int s = 0; s < n; s++)
    for (int l = 0; l < g->layers; l++)
      if (m[s] && !dfl_draft_kv_reserve ((DflDraftRun *) ctxs[s], l, m[s], error))
        return FALSE;
  for (int s = 0; s < n; s++) {
    DflDraftRun *run = (DflDraftRun *) ctxs[s];
    ((gint64 *) (p + batch->off_srow0))[s] = (gint64) r0[s];
    for (gsize i = 0; i < m[s]; i++) {
      gsize r = r0[s] + i;
      ((gint64 *) (p + batch->off_spos))[r] = ctxs[s]->first + ctxs[s]->len + (gint64) i;
      ((gint32 *) (p + batch->off_swhich))[r] = s;
      for (int l = 0; l < g->layers; l++)
        ((gint64 *) (p + batch->off_srow))[(gsize) l * SETTLE_ROWS + r] =
            (gint64) (run->kv[l].front + ctxs[s]->rows[l].start + ctxs[s]->rows[l].held + i);
    }
  }
  if (!batch->net->host_indices
      && !dfl_device_upload (dev, batch->dev_mem, 0, batch->host, batch->bytes, error))
    return FALSE;

  /* every context's waiting rows together, through FC and the hidden norm */
  taps = dfl_draft_rows (&batch->s_taps, 0, (gint64) total);
  t = dfl_draft_rows (&batch->s_t, 0, (gint64) total);
  for (int s = 0; s < n; s++) {
    DflTensor rows, row0;
    if (!m[s])
      continue;
    rows = dfl_draft_pending_rows ((DflDraftRun *) ctxs[s], 0, m[s]);
    row0 = param (batch, batch->off_srow0 + (gsize) s * sizeof (gint64), DFL_DTYPE_I64, 1);
    if (!dfl_op_copy_rows (dev, &rows, &row0, &taps, error))
      return FALSE;
  }
  if (!dfl_draft_settle_in (batch->net, g, dev, &taps, &t, error))
    return FALSE;

  /* each layer's keys and values of all the rows, then each row into its
   * context's layer rows */
  pos = param (batch, batch->off_spos, DFL_DTYPE_I64, (gint64) total);
  which = param (batch, batch->off_swhich, DFL_DTYPE_I32, (gint64) total);
  for (int l = 0; l < g->layers; l++) {
    DflTensor k = dfl_draft_rows (&batch->s_k, 0, (gint64) total);
    DflTensor v = dfl_draft_rows (&batch->s_v, 0, (gint64) total);
    DflTensor row = param (batch, batch->off_srow + (gsize) l * SETTLE_ROWS * sizeof (gint64),
                           DFL_DTYPE_I64, (gint64) total);
    DflTensor ks[DFL_OP_TABLE_MAX], vs[DFL_OP_TABLE_MAX];
    for (int s = 0; s < n; s++) {
      ks[s] = dfl_draft_kv_all ((DflDraftRun *) ctxs[s], l, FALSE);
      vs[s] = dfl_draft_kv_all ((DflDraftRun *) ctxs[s], l, TRUE);
    }
    if (!dfl_draft_settle_layer (batch->net, g, dev, l, &t, &k, &v, &pos, error)
        || !dfl_op_copy_rows_table (dev, &k, ks, n, &which, &row, error)
        || !dfl_op_copy_rows_table (dev, &v, vs, n, &which, &row, error))
      return FALSE;
  }
  for (int s = 0; s < n; s++) {
    if (!m[s])
      continue;
    ctxs[s]->pending_rows = 0;
    dfl_draft_ctx_settled (ctxs[s], m[s]);
    dfl_draft_ctx_drop_windows (ctxs[s]);
  }
  return TRUE;
}
