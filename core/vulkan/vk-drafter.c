/* gst-dflash — the drafter on a Vulkan device: the weights uploaded as held,
 * the block (DESIGN.md, "The math": the same steps as drafter.c, in the same
 * order), the head over the first `width` rows, and the selector (top-k,
 * the projection, the re-scoring chain) with only the ids coming back.
 */
#include "vk-drafter-private.h"
#include "dfl-error.h"

#include <math.h>
#include <string.h>

/* Weights are packed into buffers of about this much (a larger matrix gets
 * its own): few allocations, none near a device's allocation limit. */
#define PACK_BYTES ((gsize) 256 << 20)
#define PACK_ALIGN 256
#define ROUND_UP(n) (((n) + PACK_ALIGN - 1) / PACK_ALIGN * PACK_ALIGN)

typedef struct {
  const void *src;
  gsize bytes;
  VkDeviceAddress *addr;
} Piece;

static DflDtype
vk_type (DflDtype t)
{
  switch (t) {
  case DFL_DTYPE_F16: return DFL_DTYPE_F16;
  case DFL_DTYPE_BF16: return DFL_DTYPE_BF16;
  default: return DFL_DTYPE_F32;
  }
}

static void
add_piece (GArray *pieces, const void *src, gsize bytes, VkDeviceAddress *addr)
{
  Piece p = { src, bytes, addr };

  g_array_append_val (pieces, p);
}

static void
add_matrix (GArray *pieces, const DflWeights *w, DflVkWeights *dst)
{
  dst->type = vk_type (w->type);
  dst->rows = w->rows;
  dst->cols = w->cols;
  add_piece (pieces, w->data, dfl_weights_bytes (w), &dst->addr);
}

static gboolean
upload_pieces (DflVkDrafter *vd, GArray *pieces, GError **error)
{
  const Piece *p = (const Piece *) pieces->data;

  for (guint i = 0; i < pieces->len;) {
    guint j = i;
    gsize size = 0, off = 0;
    DflVkBuffer *buf;
    while (j < pieces->len
           && (j == i || ROUND_UP (size) + p[j].bytes <= PACK_BYTES)) {
      size = ROUND_UP (size) + p[j].bytes;
      j++;
    }
    if (!(buf = dfl_vk_buffer_new (vd->dev, size, DFL_VK_MEMORY_DEVICE, error)))
      return FALSE;
    g_ptr_array_add (vd->buffers, buf);
    vd->bytes += size;
    for (guint k = i; k < j; k++) {
      off = ROUND_UP (off);
      if (!dfl_vk_upload (vd->dev, buf, off, p[k].src, p[k].bytes, error))
        return FALSE;
      *p[k].addr = dfl_vk_buffer_address (buf) + off;
      off += p[k].bytes;
    }
    i = j;
  }
  return TRUE;
}

static void
vk_drafter_free (gpointer native)
{
  DflVkDrafter *vd = native;

  if (!vd)
    return;
  if (vd->buffers)
    g_ptr_array_free (vd->buffers, TRUE);
  g_free (vd->layers);
  dfl_vk_device_unref (vd->dev);
  g_free (vd);
}

static const DflDraftEngine vk_engine = {
  .ctx_new = dfl_vk_draft_ctx_new,
  .free = vk_drafter_free,
};

DflDrafterWeights *
dfl_vk_drafter_bind (DflDrafterWeights *w, DflDevice *device, const DflDraftTrunk *trunk,
                     GError **error)
{
  const DflDrafterWeights *d = dfl_drafter_weights_base (w);
  const DflDrafterGeometry *g = &d->g;
  DflWeights embedding = dfl_draft_trunk_weights (&trunk->embed);
  DflWeights head = dfl_draft_trunk_weights (&trunk->head);
  DflDrafterWeights *bound = NULL;
  DflVkDrafter *vd;
  GArray *pieces;
  gsize hs = g->hidden, kn = g->conv_kernel;
  gboolean tied = head.data == embedding.data && head.type == embedding.type;

  if (g->head_dim > 256 || (d->selector && g->selector_top > 256)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                 "%s: head_dim %d and selector_top %d; the Vulkan kernels take at most 256 of each",
                 d->path, g->head_dim, d->selector ? g->selector_top : 1);
    return NULL;
  }
  bound = dfl_drafter_weights_new_bound (w, NULL, NULL, &vk_engine, device, trunk);
  bound->native = vd = g_new0 (DflVkDrafter, 1);
  vd->dev = dfl_vk_device_ref (dfl_device_native (device));
  vd->path = bound->path;
  vd->g = &bound->g;
  vd->conv = d->conv;
  vd->selector = d->selector;
  vd->buffers = g_ptr_array_new_with_free_func ((GDestroyNotify) dfl_vk_buffer_free);
  vd->inv_freq = d->inv_freq;
  vd->layers = g_new0 (DflVkLayer, g->layers);

  pieces = g_array_new (FALSE, FALSE, sizeof (Piece));
  add_matrix (pieces, &d->fc, &vd->fc);
  add_piece (pieces, d->hidden_norm, hs * sizeof (float), &vd->hidden_norm);
  add_piece (pieces, d->norm, hs * sizeof (float), &vd->norm);
  for (int l = 0; l < g->layers; l++) {
    const DflDrafterLayer *L = &d->layers[l];
    DflVkLayer *V = &vd->layers[l];
    add_piece (pieces, L->in_norm, hs * sizeof (float), &V->in_norm);
    add_piece (pieces, L->post_norm, hs * sizeof (float), &V->post_norm);
    add_piece (pieces, L->q_norm, g->head_dim * sizeof (float), &V->q_norm);
    add_piece (pieces, L->k_norm, g->head_dim * sizeof (float), &V->k_norm);
    add_matrix (pieces, &L->q, &V->q);
    add_matrix (pieces, &L->k, &V->k);
    add_matrix (pieces, &L->v, &V->v);
    add_matrix (pieces, &L->o, &V->o);
    add_matrix (pieces, &L->gate, &V->gate);
    add_matrix (pieces, &L->up, &V->up);
    add_matrix (pieces, &L->down, &V->down);
    if (d->conv) {
      add_piece (pieces, L->attn_conv.base, 2 * kn * hs * sizeof (float), &V->attn_conv.base);
      add_matrix (pieces, &L->attn_conv.proj, &V->attn_conv.proj);
      add_piece (pieces, L->mlp_conv.base, 2 * kn * hs * sizeof (float), &V->mlp_conv.base);
      add_matrix (pieces, &L->mlp_conv.proj, &V->mlp_conv.proj);
    }
  }
  if (d->selector) {
    gsize book = (gsize) g->vocab * g->selector_rank * sizeof (guint16);
    add_matrix (pieces, &d->sel, &vd->sel);
    add_piece (pieces, d->books[0], book, &vd->books[0]);
    add_piece (pieces, d->books[1], book, &vd->books[1]);
  }
  add_matrix (pieces, &embedding, &vd->embed);
  /* a tied head is the embedding: one copy on the device */
  if (!tied)
    add_matrix (pieces, &head, &vd->head);
  if (!upload_pieces (vd, pieces, error))
    g_clear_pointer (&bound, dfl_drafter_weights_unref);
  else if (tied)
    vd->head = vd->embed;
  if (bound)
    bound->device_bytes = vd->bytes;
  g_array_free (pieces, TRUE);
  return bound;
}

/* --- the block --- */

static gboolean
ensure_block_scratch (DflVkDraftCtx *c, gsize scores, GError **error)
{
  const DflDrafterGeometry *g = c->vd->g;
  DflVkDevice *dev = c->vd->dev;
  gsize b = g->block, hs = g->hidden, hd = g->head_dim, f = sizeof (float);
  gsize qd = (gsize) g->heads * hd, kd = (gsize) g->kv_heads * hd;
  gsize dyn = b * 2 * MAX (g->conv_kernel, 1) * (hs / g->conv_group);
  gsize top = c->vd->selector ? g->selector_top : 1;
  struct { DflVkBuffer **buf; gsize bytes; DflVkMemory mem; } want[] = {
    { &c->h, b * hs * f, DFL_VK_MEMORY_DEVICE },
    { &c->x, b * hs * f, DFL_VK_MEMORY_DEVICE },
    { &c->x2, b * hs * f, DFL_VK_MEMORY_DEVICE },
    { &c->o, b * hs * f, DFL_VK_MEMORY_DEVICE },
    { &c->q, b * qd * f, DFL_VK_MEMORY_DEVICE },
    { &c->y, b * qd * f, DFL_VK_MEMORY_DEVICE },
    { &c->kb, b * kd * f, DFL_VK_MEMORY_DEVICE },
    { &c->vb, b * kd * f, DFL_VK_MEMORY_DEVICE },
    { &c->dyn, dyn * f, DFL_VK_MEMORY_DEVICE },
    { &c->gate, b * g->intermediate * f, DFL_VK_MEMORY_DEVICE },
    { &c->up, b * g->intermediate * f, DFL_VK_MEMORY_DEVICE },
    { &c->bcs_h, b * hd * f, DFL_VK_MEMORY_HOST },
    { &c->bcs_d, b * hd * f, DFL_VK_MEMORY_DEVICE },
    { &c->vals, b * top * f, DFL_VK_MEMORY_DEVICE },
    { &c->idx, b * top * 4, DFL_VK_MEMORY_DEVICE },
    { &c->hp, b * MAX (g->selector_rank, 1) * f, DFL_VK_MEMORY_DEVICE },
    { &c->ids_d, 2 * b * 4, DFL_VK_MEMORY_DEVICE },
    { &c->ids_h, 2 * b * 4, DFL_VK_MEMORY_HOST },
  };

  for (guint i = 0; i < G_N_ELEMENTS (want); i++)
    if (!*want[i].buf
        && !(*want[i].buf = dfl_vk_buffer_new (dev, want[i].bytes, want[i].mem, error)))
      return FALSE;
  if (scores > c->scores_cap) {
    g_clear_pointer (&c->scores, dfl_vk_buffer_free);
    c->scores_cap = 0;
    if (!(c->scores = dfl_vk_buffer_new (dev, scores * 2 * f, DFL_VK_MEMORY_DEVICE, error)))
      return FALSE;
    c->scores_cap = scores * 2;
  }
  return TRUE;
}

#define ADDR(buf) dfl_vk_buffer_address (buf)
#define F(n) ((VkDeviceAddress) (n) * sizeof (float))

/* x through the convolution's stage 0, its row kernels into dyn; without a
 * convolution x stays as it is. Returns the rows to use. */
static VkDeviceAddress
conv_in (DflVkDraftCtx *c, const DflVkConv *cv, VkDeviceAddress x, VkDeviceAddress tmp)
{
  const DflDrafterGeometry *g = c->vd->g;
  int hs = g->hidden, kn = g->conv_kernel, groups = hs / g->conv_group, kd = 2 * kn * groups;

  if (!c->vd->conv)
    return x;
  dfl_vk_matmul (c->s, &cv->proj, x, g->block, hs, ADDR (c->dyn), kd, kd, FALSE);
  dfl_vk_row_conv (c->s, x, g->block, hs, g->conv_group, kn, cv->base, ADDR (c->dyn), kd, tmp);
  return tmp;
}

/* h += conv_stage1(x) with the row kernels conv_in made (or h += x). */
static void
conv_out_add (DflVkDraftCtx *c, const DflVkConv *cv, VkDeviceAddress h, VkDeviceAddress x,
              VkDeviceAddress tmp)
{
  const DflDrafterGeometry *g = c->vd->g;
  int hs = g->hidden, kn = g->conv_kernel, groups = hs / g->conv_group, kd = 2 * kn * groups;

  if (c->vd->conv) {
    dfl_vk_row_conv (c->s, x, g->block, hs, g->conv_group, kn, cv->base + F ((gsize) kn * hs),
                     ADDR (c->dyn) + F (kn * groups), kd, tmp);
    x = tmp;
  }
  dfl_vk_add (c->s, h, x, (gsize) g->block * hs);
}

/* Where a tensor of the context's device starts. */
static VkDeviceAddress
tensor_address (const DflTensor *t)
{
  return dfl_vk_buffer_address (t->handle) + t->offset;
}

/* Record the block into the stream (not submitted); its context checked
 * and settled. */
static gboolean
record_block (DflVkDraftCtx *c, gint64 anchor_pos, guint32 anchor, int width,
              const DflTensor *out, GError **error)
{
  DflVkDrafter *vd = c->vd;
  const DflDrafterGeometry *g = vd->g;
  int rows = g->block, hs = g->hidden, hd = g->head_dim, nh = g->heads, kv = g->kv_heads;
  int qd = nh * hd, kd = kv * hd, ffn = g->intermediate;
  float eps = (float) g->eps, scale = 1.0f / sqrtf ((float) hd);
  VkDeviceAddress h, x, x2, o, y, q, kb, vb, cs, dst = tensor_address (out);
  gsize scores = (gsize) rows * nh * (dfl_draft_ctx_widest_range (&c->base, anchor_pos) + rows);

  if (!ensure_block_scratch (c, scores, error))
    return FALSE;
  h = ADDR (c->h), x = ADDR (c->x), x2 = ADDR (c->x2), o = ADDR (c->o), y = ADDR (c->y);
  q = ADDR (c->q), kb = ADDR (c->kb), vb = ADDR (c->vb), cs = ADDR (c->bcs_d);

  dfl_vk_rope_table (dfl_vk_buffer_map (c->bcs_h), rows, hd, vd->inv_freq, anchor_pos);
  dfl_vk_copy (c->s, c->bcs_d, 0, c->bcs_h, 0, (gsize) rows * hd * sizeof (float));
  dfl_vk_embed_block (c->s, vd->embed.addr, vd->embed.type, hs, rows, anchor, g->mask_token, h);

  for (int l = 0; l < g->layers; l++) {
    const DflVkLayer *L = &vd->layers[l];
    const DflVkRing *r = &c->ring[l];
    int window = dfl_drafter_geometry_window_of (g, l);
    gint64 base, lo, hi;
    int n, ring_off;
    VkDeviceAddress xin;

    dfl_draft_ctx_layer_range (&c->base, l, anchor_pos, &base, &lo, &hi);
    n = (int) (hi - lo);
    ring_off = r->cap ? (int) ((c->base.rows[l].start + (gsize) (lo - base)) % r->cap) : 0;

    /* attention */
    dfl_vk_rmsnorm (c->s, x, h, rows, hs, L->in_norm, eps);
    xin = conv_in (c, &L->attn_conv, x, x2);
    dfl_vk_matmul (c->s, &L->q, xin, rows, hs, q, qd, qd, FALSE);
    dfl_vk_matmul (c->s, &L->k, xin, rows, hs, kb, kd, kd, FALSE);
    dfl_vk_matmul (c->s, &L->v, xin, rows, hs, vb, kd, kd, FALSE);
    dfl_vk_rmsnorm (c->s, q, q, rows * nh, hd, L->q_norm, eps);
    dfl_vk_rmsnorm (c->s, kb, kb, rows * kv, hd, L->k_norm, eps);
    if (dfl_drafter_geometry_rotary (g, l)) {
      dfl_vk_rope (c->s, q, rows, nh, hd, cs);
      dfl_vk_rope (c->s, kb, rows, kv, hd, cs);
    }
    dfl_vk_attention (c->s, q, rows, nh, kv, hd, n > 0 ? ADDR (r->k) : 0, n > 0 ? ADDR (r->v) : 0,
                      n, ring_off, (int) r->cap, kb, vb, (int) (anchor_pos - lo), window, scale,
                      ADDR (c->scores), y);
    dfl_vk_matmul (c->s, &L->o, y, rows, qd, o, hs, hs, FALSE);
    conv_out_add (c, &L->attn_conv, h, o, x);

    /* the MLP, wrapped the same way */
    dfl_vk_rmsnorm (c->s, x, h, rows, hs, L->post_norm, eps);
    xin = conv_in (c, &L->mlp_conv, x, x2);
    dfl_vk_matmul (c->s, &L->gate, xin, rows, hs, ADDR (c->gate), ffn, ffn, FALSE);
    dfl_vk_matmul (c->s, &L->up, xin, rows, hs, ADDR (c->up), ffn, ffn, FALSE);
    dfl_vk_silu_mul (c->s, ADDR (c->gate), ADDR (c->up), (gsize) rows * ffn);
    dfl_vk_matmul (c->s, &L->down, ADDR (c->gate), rows, ffn, o, hs, hs, FALSE);
    conv_out_add (c, &L->mlp_conv, h, o, x);
  }
  /* the drafting rows after the last norm, then their logits */
  dfl_vk_rmsnorm (c->s, dst, h + F (hs), rows - 1, hs, vd->norm, eps);
  dfl_vk_matmul (c->s, &vd->head, dst, rows - 1, hs, dst + F ((gsize) (rows - 1) * hs), width,
                 width, FALSE);
  return TRUE;
}

/* Record the selector over a block in `block` (not submitted). */
static gboolean
record_select (DflVkDraftCtx *c, const DflTensor *block, int width, guint32 anchor,
               GError **error)
{
  DflVkDrafter *vd = c->vd;
  const DflDrafterGeometry *g = vd->g;
  int n = g->block - 1, top = vd->selector ? g->selector_top : 1, rank = g->selector_rank;
  VkDeviceAddress hidden = tensor_address (block), logits = hidden + F ((gsize) n * g->hidden);

  if (!ensure_block_scratch (c, 0, error))
    return FALSE;
  dfl_vk_top_k (c->s, logits, n, width, width, top, ADDR (c->vals), ADDR (c->idx));
  if (vd->selector)
    dfl_vk_matmul (c->s, &vd->sel, hidden, n, g->hidden, ADDR (c->hp), rank, rank, FALSE);
  dfl_vk_select_rescore (c->s, ADDR (c->vals), ADDR (c->idx), n, top, ADDR (c->hp),
                         vd->selector ? rank : 0, vd->selector ? vd->books[0] : 0,
                         vd->selector ? vd->books[1] : 0, anchor, ADDR (c->ids_d));
  dfl_vk_copy (c->s, c->ids_h, 0, c->ids_d, 0, 2 * (gsize) n * sizeof (gint32));
  return TRUE;
}

static void
read_ids (DflVkDraftCtx *c, guint32 *chosen, guint32 *plain)
{
  int n = c->vd->g->block - 1;
  const gint32 *ids = dfl_vk_buffer_map (c->ids_h);

  for (int j = 0; j < n; j++) {
    if (chosen)
      chosen[j] = (guint32) ids[j];
    if (plain)
      plain[j] = (guint32) ids[n + j];
  }
}

gboolean
dfl_vk_draft_ctx_block (DflDraftCtx *ctx, gint64 anchor_pos, guint32 anchor, int width,
                        const DflTensor *out, GError **error)
{
  DflVkDraftCtx *c = (DflVkDraftCtx *) ctx;

  return record_block (c, anchor_pos, anchor, width, out, error)
         && dfl_vk_stream_finish (c->s, error);
}

gboolean
dfl_vk_draft_ctx_select (DflDraftCtx *ctx, const DflTensor *block, int width, guint32 anchor,
                         guint32 *chosen, guint32 *plain, GError **error)
{
  DflVkDraftCtx *c = (DflVkDraftCtx *) ctx;

  if (!record_select (c, block, width, anchor, error) || !dfl_vk_stream_finish (c->s, error))
    return FALSE;
  read_ids (c, chosen, plain);
  return TRUE;
}

gboolean
dfl_vk_draft_ctx_draft (DflDraftCtx *ctx, gint64 anchor_pos, guint32 anchor, int width,
                        const DflTensor *out, guint32 *chosen, guint32 *plain, GError **error)
{
  DflVkDraftCtx *c = (DflVkDraftCtx *) ctx;

  if (!record_block (c, anchor_pos, anchor, width, out, error)
      || !record_select (c, out, width, anchor, error) || !dfl_vk_stream_finish (c->s, error))
    return FALSE;
  read_ids (c, chosen, plain);
  return TRUE;
}
