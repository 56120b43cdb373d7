/* gst-dflash — the drafter's block on the device (DESIGN.md, "The math"):
 * the target's embeddings of [anchor, MASK …] through the drafter's layers,
 * each attending to its (windowed) context and to every row of the block,
 * the last norm, and the logits of the rows after the anchor's.
 *
 * The same kernels run directly or as a captured graph. What changes from
 * block to block is read on the device from one parameter buffer (uploaded
 * once a block): the anchor's position (rope), the block's ids (embedding),
 * each row's key range per layer (attention), and the context rows a
 * windowed layer gathers in front of the block's own keys.
 *
 * Where a block's keys go: a layer that sees all its context keeps the
 * block's K/V in the rows right before its first context row, so the range
 * [0, block + context) covers both. A windowed layer's rows move as the
 * context grows and its lower end differs per row, so no fixed place is
 * next to them: its window of rows is gathered (by id, on the device) into
 * a scratch whose last `block` rows take the block's K/V. The gather costs
 * one copy of the window per windowed layer a block; a kernel writing rows
 * at a device-held row index would let the block's K/V go right after the
 * context instead.
 */
#include "cuda-drafter-private.h"
#include "dfl-error.h"

#include <math.h>
#include <string.h>

void
dfl_cuda_draft_ctx_drop_graph (DflCudaDraftCtx *ctx)
{
  g_clear_pointer (&ctx->graph, dfl_cuda_graph_free);
}

/* The block's parameters into the host mirror: where each row's keys are. */
static void
fill_param (DflCudaDraftCtx *ctx, gint64 anchor_pos, guint32 anchor)
{
  const DflDrafterGeometry *g = ctx->cd->g;
  guint8 *p = ctx->h_param;
  int32_t *ids = (int32_t *) (p + ctx->off_ids);
  int b = g->block;

  *(int64_t *) (p + ctx->off_pos) = anchor_pos;
  ids[0] = (int32_t) anchor;
  for (int r = 1; r < b; r++)
    ids[r] = (int32_t) g->mask_token;
  for (int l = 0; l < g->layers; l++) {
    const DflCudaLayerCtx *c = &ctx->layers[l];
    const DflDraftLayerRows *rows = &ctx->base.rows[l];
    int32_t *lo = (int32_t *) (p + ctx->off_lo) + (gsize) l * b;
    int32_t *hi = (int32_t *) (p + ctx->off_hi) + (gsize) l * b;
    int w = dfl_drafter_geometry_window_of (g, l);
    gint64 base, clo, chi;
    dfl_draft_ctx_layer_range (&ctx->base, l, anchor_pos, &base, &clo, &chi);
    if (w == 0) {
      /* [block rows][context rows from base], the context's first at front */
      g_assert (rows->start == 0);
      for (int r = 0; r < b; r++) {
        lo[r] = 0;
        hi[r] = (int32_t) (c->front + (chi - base));
      }
      continue;
    }
    {
      /* slot s of the gathered window holds position chi − w + s; a row
       * sees no further back than anchor + r + 1 − w (the window shrinks
       * row by row, as the CPU masks it) */
      int32_t *gather = (int32_t *) (p + ctx->off_gather[l]);
      for (int s = 0; s < w; s++) {
        gint64 pos = chi - w + s;
        gather[s] = pos >= base ? (int32_t) (rows->start + (gsize) (pos - base)) : 0;
      }
      for (int r = 0; r < b; r++) {
        gint64 from = CLAMP (anchor_pos + r + 1 - w, clo, chi);
        lo[r] = (int32_t) (w - (chi - from));
        hi[r] = w + b;
      }
    }
  }
}

/* x through a convolution's stage 0 (its row kernels into s_d); without a
 * convolution x is used as it is. */
static float *
conv_in (DflCudaDrafter *cd, const DflCudaDrafterLayer *L, int which, float *x, float *tmp)
{
  const DflDrafterGeometry *g = cd->g;
  int hs = g->hidden, kn = g->conv_kernel, groups = hs / g->conv_group, kproj = 2 * kn * groups;

  if (!cd->conv)
    return x;
  dfl_cuda_matmul (cd->dev, &L->conv_proj[which], x, g->block, hs, cd->s_d, kproj, kproj, FALSE,
                   cd->s_round);
  dfl_cuda_row_conv (cd->dev, x, g->block, hs, g->conv_group, kn, L->conv_base[which], cd->s_d,
                     kproj, tmp);
  return tmp;
}

/* h += stage 1 of the convolution over x (or h += x). */
static void
conv_out_add (DflCudaDrafter *cd, const DflCudaDrafterLayer *L, int which, float *h,
              const float *x, float *tmp)
{
  const DflDrafterGeometry *g = cd->g;
  int hs = g->hidden, kn = g->conv_kernel, groups = hs / g->conv_group, kproj = 2 * kn * groups;

  if (cd->conv) {
    dfl_cuda_row_conv (cd->dev, x, g->block, hs, g->conv_group, kn,
                       L->conv_base[which] + (gsize) kn * hs, cd->s_d + (gsize) kn * groups,
                       kproj, tmp);
    x = tmp;
  }
  dfl_cuda_add (cd->dev, h, x, (gsize) g->block * hs);
}

/* The most keys layer l's attention can see: its buffer of front and
 * context rows, or its gathered window and the block's rows. */
static int
block_keys (const DflCudaDraftCtx *ctx, int l)
{
  const DflDrafterGeometry *g = ctx->cd->g;
  int w = dfl_drafter_geometry_window_of (g, l);

  return w == 0 ? (int) (ctx->layers[l].front + ctx->layers[l].cap) : w + g->block;
}

/* Every kernel of a block, enqueued (or captured). */
static void
enqueue_block (DflCudaDraftCtx *ctx, int width, float *d_out)
{
  DflCudaDrafter *cd = ctx->cd;
  DflCudaDevice *dev = cd->dev;
  const DflDrafterGeometry *g = cd->g;
  int b = g->block, hs = g->hidden, hd = g->head_dim, ffn = g->intermediate;
  int qd = g->heads * hd, kd = g->kv_heads * hd;
  float eps = (float) g->eps, scale = 1.0f / sqrtf ((float) hd);
  guint8 *P = ctx->d_param;
  const int64_t *d_pos = (const int64_t *) (P + ctx->off_pos);
  float *h = cd->s_h;

  dfl_cuda_embed (dev, cd->embed.d_data, cd->embed.type, hs, (const int32_t *) (P + ctx->off_ids),
                  b, h);
  for (int l = 0; l < g->layers; l++) {
    const DflCudaDrafterLayer *L = &cd->layers[l];
    const DflCudaLayerCtx *c = &ctx->layers[l];
    int w = dfl_drafter_geometry_window_of (g, l);
    float *keys, *values, *bk, *bv, *x;

    if (w == 0) {
      keys = c->d_k;
      values = c->d_v;
      bk = c->d_k;
      bv = c->d_v;
    } else {
      const int32_t *gather = (const int32_t *) (P + ctx->off_gather[l]);
      keys = cd->s_win_k[l];
      values = cd->s_win_v[l];
      dfl_cuda_embed (dev, c->d_k, DFL_DTYPE_F32, kd, gather, w, keys);
      dfl_cuda_embed (dev, c->d_v, DFL_DTYPE_F32, kd, gather, w, values);
      bk = keys + (gsize) w * kd;
      bv = values + (gsize) w * kd;
    }

    /* attention */
    dfl_cuda_rmsnorm (dev, cd->s_x, h, b, hs, L->in_norm, eps);
    x = conv_in (cd, L, 0, cd->s_x, cd->s_x2);
    dfl_cuda_matmul (dev, &L->q, x, b, hs, cd->s_q, qd, qd, FALSE, cd->s_round);
    dfl_cuda_matmul (dev, &L->k, x, b, hs, bk, kd, kd, FALSE, cd->s_round);
    dfl_cuda_matmul (dev, &L->v, x, b, hs, bv, kd, kd, FALSE, cd->s_round);
    dfl_cuda_rmsnorm (dev, cd->s_q, cd->s_q, b * g->heads, hd, L->q_norm, eps);
    dfl_cuda_rmsnorm (dev, bk, bk, b * g->kv_heads, hd, L->k_norm, eps);
    if (dfl_drafter_geometry_rotary (g, l)) {
      dfl_cuda_rope (dev, cd->s_q, b, g->heads, hd, cd->inv_freq, d_pos);
      dfl_cuda_rope (dev, bk, b, g->kv_heads, hd, cd->inv_freq, d_pos);
    }
    dfl_cuda_attention (dev, cd->s_q, b, g->heads, g->kv_heads, hd, keys, values, kd,
                        (const int32_t *) (P + ctx->off_lo) + (gsize) l * b,
                        (const int32_t *) (P + ctx->off_hi) + (gsize) l * b,
                        block_keys (ctx, l), scale, cd->s_y);
    dfl_cuda_matmul (dev, &L->o, cd->s_y, b, qd, cd->s_o, hs, hs, FALSE, cd->s_round);
    conv_out_add (cd, L, 0, h, cd->s_o, cd->s_x);

    /* the MLP, wrapped the same way */
    dfl_cuda_rmsnorm (dev, cd->s_x, h, b, hs, L->post_norm, eps);
    x = conv_in (cd, L, 1, cd->s_x, cd->s_x2);
    dfl_cuda_matmul (dev, &L->gate, x, b, hs, cd->s_gate, ffn, ffn, FALSE, cd->s_round);
    dfl_cuda_matmul (dev, &L->up, x, b, hs, cd->s_up, ffn, ffn, FALSE, cd->s_round);
    dfl_cuda_silu_mul (dev, cd->s_gate, cd->s_up, (gsize) b * ffn);
    dfl_cuda_matmul (dev, &L->down, cd->s_gate, b, ffn, cd->s_o, hs, hs, FALSE, cd->s_round);
    conv_out_add (cd, L, 1, h, cd->s_o, cd->s_x);
  }
  /* the rows after the anchor's, normed straight into the output, then
   * their logits after them */
  dfl_cuda_rmsnorm (dev, d_out, h + hs, b - 1, hs, cd->norm, eps);
  dfl_cuda_matmul (dev, &cd->head, d_out, b - 1, hs, d_out + (gsize) (b - 1) * hs, width, width,
                   FALSE, cd->s_round);
}

static gboolean block_locked (DflCudaDraftCtx *ctx, gint64 anchor_pos, guint32 anchor, int width,
                              float *d_out, GError **error);

gboolean
dfl_cuda_draft_ctx_block (DflDraftCtx *base, gint64 anchor_pos, guint32 anchor, int width,
                          const DflTensor *out, GError **error)
{
  DflCudaDraftCtx *ctx = (DflCudaDraftCtx *) base;
  DflCudaDrafter *cd = ctx->cd;
  gboolean ok;

  /* the drafter's scratch is its contexts' in turn; from the parameters'
   * upload to the block's launch the stream is this block's: a capture
   * must record nothing of another thread's */
  dfl_cuda_drafter_hold (cd);
  ok = block_locked (ctx, anchor_pos, anchor, width, dfl_tensor_data (out), error);
  dfl_cuda_drafter_release (cd);
  return ok;
}

/* The block once its arguments are checked and its context settled, the
 * drafter and the device held. */
static gboolean
block_locked (DflCudaDraftCtx *ctx, gint64 anchor_pos, guint32 anchor, int width, float *d_out,
              GError **error)
{
  DflCudaDrafter *cd = ctx->cd;
  const DflDrafterGeometry *g = cd->g;

  fill_param (ctx, anchor_pos, anchor);
  /* stream-ordered: the previous block has read its parameters by now */
  if (!dfl_cuda_upload (cd->dev, ctx->d_param, ctx->h_param, ctx->param_bytes, error))
    return FALSE;
  if (!cd->use_graph) {
    enqueue_block (ctx, width, d_out);
    return dfl_cuda_check (cd->dev, "the drafter's block", error);
  }
  /* attention's scratch cannot grow inside a capture: room first, and a
   * graph that read an earlier scratch is captured again */
  for (int l = 0; l < g->layers; l++)
    if (!dfl_cuda_attention_reserve (cd->dev, g->block, g->heads, g->head_dim,
                                     block_keys (ctx, l), error))
      return FALSE;
  if (!ctx->graph || ctx->graph_generation != ctx->generation || ctx->graph_width != width
      || ctx->graph_scratch != dfl_cuda_attention_scratch_generation (cd->dev)) {
    dfl_cuda_draft_ctx_drop_graph (ctx);
    if (!dfl_cuda_capture_begin (cd->dev, error))
      return FALSE;
    enqueue_block (ctx, width, cd->s_block);
    if (!(ctx->graph = dfl_cuda_capture_end (cd->dev, error)))
      return FALSE;
    ctx->graph_generation = ctx->generation;
    ctx->graph_width = width;
    ctx->graph_scratch = dfl_cuda_attention_scratch_generation (cd->dev);
  }
  dfl_cuda_graph_launch (cd->dev, ctx->graph);
  dfl_cuda_copy_d2d (cd->dev, d_out, cd->s_block, dfl_draft_ctx_block_bytes (&ctx->base, width));
  return dfl_cuda_check (cd->dev, "the drafter's block graph", error);
}
