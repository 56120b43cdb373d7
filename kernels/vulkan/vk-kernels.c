/* gst-dflash — the Vulkan kernels' launchers: push constants laid out as the
 * shaders declare them (addresses first, 8 bytes each, then 32-bit values)
 * and the workgroup grids. */
#include "vk-private.h"

#include <math.h>

/* workgroup sizes, as the shaders declare them */
#define MATMUL_ROWS 16   /* rows a matmul workgroup makes (MT) */
#define WIDE 256         /* elementwise, row_conv, embed */
#define NARROW 64        /* rope */

static void
dispatch_flat (DflVkStream *s, DflVkKernel k, const void *push, gsize bytes, guint64 groups,
               guint32 gz)
{
  guint32 gx, gy;

  dfl_vk_grid (groups, &gx, &gy);
  dfl_vk_dispatch (s, k, push, bytes, gx, gy, gz);
}

void
dfl_vk_matmul (DflVkStream *s, const DflVkWeights *w, VkDeviceAddress x, int rows, int ldx,
               VkDeviceAddress y, int ldy, int n_out, gboolean accumulate)
{
  guint per_group = dfl_vk_outputs_per_group (dfl_vk_stream_device (s));
  struct {
    guint64 w, x, y;
    guint32 type, cols, rows, ldx, ldy, n_out, accumulate, per_group, quads, pad;
  } p = { w->addr, x, y, w->type, w->cols, rows, ldx, ldy, n_out, accumulate != 0, per_group,
          /* whole 16-byte steps of x and 16- or 8-byte steps of W */
          w->cols % 4 == 0 && ldx % 4 == 0 && x % 16 == 0
          && w->addr % (4 * dfl_dtype_size (w->type)) == 0, 0 };

  g_return_if_fail (n_out <= w->rows && rows >= 0);
  if (rows == 0 || n_out == 0)
    return;
  dispatch_flat (s, DFL_VK_K_MATMUL, &p, sizeof p, ((guint64) n_out + per_group - 1) / per_group,
                 (guint32) ((rows + MATMUL_ROWS - 1) / MATMUL_ROWS));
}

void
dfl_vk_rmsnorm (DflVkStream *s, VkDeviceAddress dst, VkDeviceAddress src, int rows, int dim,
                VkDeviceAddress w, float eps)
{
  struct {
    guint64 dst, src, w;
    guint32 rows, dim;
    float eps, pad;
  } p = { dst, src, w, rows, dim, eps, 0 };

  dispatch_flat (s, DFL_VK_K_RMSNORM, &p, sizeof p, (guint64) rows, 1);
}

void
dfl_vk_rope (DflVkStream *s, VkDeviceAddress x, int rows, int heads, int head_dim,
             VkDeviceAddress cos_sin)
{
  struct {
    guint64 x, cs;
    guint32 rows, heads, half_dim, pad;
  } p = { x, cos_sin, rows, heads, head_dim / 2, 0 };
  guint64 n = (guint64) rows * heads * (head_dim / 2);

  dispatch_flat (s, DFL_VK_K_ROPE, &p, sizeof p, (n + NARROW - 1) / NARROW, 1);
}

void
dfl_vk_rope_table (float *cos_sin, int rows, int head_dim, const float *inv_freq, int64_t pos0)
{
  int half = head_dim / 2;

  for (int r = 0; r < rows; r++) {
    float pos = (float) (pos0 + r);
    for (int i = 0; i < half; i++) {
      float a = pos * inv_freq[i];
      cos_sin[(gsize) r * head_dim + i] = cosf (a);
      cos_sin[(gsize) r * head_dim + half + i] = sinf (a);
    }
  }
}

static void
elementwise (DflVkStream *s, VkDeviceAddress a, VkDeviceAddress b, size_t n, guint32 op)
{
  struct {
    guint64 a, b;
    guint32 n, op;
  } p = { a, b, (guint32) n, op };

  g_return_if_fail (n < G_MAXUINT32);
  dispatch_flat (s, DFL_VK_K_ELEMENTWISE, &p, sizeof p, (n + WIDE - 1) / WIDE, 1);
}

void
dfl_vk_silu_mul (DflVkStream *s, VkDeviceAddress gate, VkDeviceAddress up, size_t n)
{
  elementwise (s, gate, up, n, 0);
}

void
dfl_vk_add (DflVkStream *s, VkDeviceAddress x, VkDeviceAddress y, size_t n)
{
  elementwise (s, x, y, n, 1);
}

void
dfl_vk_row_conv (DflVkStream *s, VkDeviceAddress x, int rows, int dim, int group, int kernel,
                 VkDeviceAddress base, VkDeviceAddress dyn, int dyn_stride, VkDeviceAddress y)
{
  struct {
    guint64 x, base, dyn, y;
    guint32 rows, dim, group, kernel, dyn_stride, pad;
  } p = { x, base, dyn, y, rows, dim, group, kernel, dyn_stride, 0 };
  guint64 n = (guint64) rows * dim;

  dispatch_flat (s, DFL_VK_K_ROW_CONV, &p, sizeof p, (n + WIDE - 1) / WIDE, 1);
}

void
dfl_vk_embed_block (DflVkStream *s, VkDeviceAddress table, DflDtype type, int dim, int rows,
                    uint32_t anchor, uint32_t mask, VkDeviceAddress dst)
{
  struct {
    guint64 table, dst;
    guint32 type, dim, rows, anchor, mask, pad;
  } p = { table, dst, type, dim, rows, anchor, mask, 0 };
  guint64 n = (guint64) rows * dim;

  dispatch_flat (s, DFL_VK_K_EMBED, &p, sizeof p, (n + WIDE - 1) / WIDE, 1);
}

void
dfl_vk_attention (DflVkStream *s, VkDeviceAddress q, int rows, int heads, int kv_heads, int hd,
                  VkDeviceAddress kc, VkDeviceAddress vc, int n, int ring_off, int cap,
                  VkDeviceAddress kb, VkDeviceAddress vb, int anchor_rel, int window, float scale,
                  VkDeviceAddress scores, VkDeviceAddress out)
{
  struct {
    guint64 q, kc, vc, kb, vb, dst, scores;
    guint32 rows, heads, kv_heads, hd, n, ring_off, cap;
    gint32 anchor_rel, window;
    float scale;
  } p = { q, kc, vc, kb, vb, out, scores, rows, heads, kv_heads, hd, n, ring_off, MAX (cap, 1),
          anchor_rel, window, scale };

  g_return_if_fail (hd <= 256 && heads % kv_heads == 0 && n >= 0);
  dfl_vk_dispatch (s, DFL_VK_K_ATTENTION, &p, sizeof p, (guint32) heads, (guint32) rows, 1);
}

void
dfl_vk_top_k (DflVkStream *s, VkDeviceAddress x, int rows, int n, int ld, int k,
              VkDeviceAddress vals, VkDeviceAddress idx)
{
  struct {
    guint64 x, vals, idx;
    guint32 rows, n, ld, k;
  } p = { x, vals, idx, rows, n, ld, k };

  g_return_if_fail (k >= 1 && rows <= 65535);
  dfl_vk_dispatch (s, DFL_VK_K_TOP_K, &p, sizeof p, (guint32) rows, 1, 1);
}

void
dfl_vk_argmax (DflVkStream *s, VkDeviceAddress x, int rows, int n, int ld, VkDeviceAddress idx)
{
  struct {
    guint64 x, idx;
    guint32 rows, n, ld, pad;
  } p = { x, idx, rows, n, ld, 0 };

  if (rows > 0)
    dispatch_flat (s, DFL_VK_K_ARGMAX, &p, sizeof p, (guint64) rows, 1);
}

void
dfl_vk_select_rescore (DflVkStream *s, VkDeviceAddress vals, VkDeviceAddress idx, int rows, int k,
                       VkDeviceAddress hp, int rank, VkDeviceAddress pred, VkDeviceAddress succ,
                       uint32_t anchor, VkDeviceAddress ids)
{
  struct {
    guint64 vals, idx, hp, pred, succ, ids;
    guint32 rows, k, rank, anchor, has_selector, pad;
  } p = { vals, idx, hp, pred, succ, ids, rows, k, rank, anchor, pred != 0, 0 };

  g_return_if_fail (k >= 1 && k <= 256);
  dfl_vk_dispatch (s, DFL_VK_K_RESCORE, &p, sizeof p, 1, 1, 1);
}
