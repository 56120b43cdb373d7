/* gst-dflash — the Qwen3 forward written once over the operations of
 * dfl-backend.h: sequences, their KV caches, one pass over the rows of one
 * or several sequences (target-forward.h).
 *
 * Every buffer is memory of the model's device, allocated through it; the
 * index tensors (token ids, positions, key ranges, start rows) are written
 * on the host and uploaded once a forward, so a GPU reads them on the
 * device and the CPU where they lie. Nothing here knows which back end runs
 * it.
 */
#include "target-forward.h"

#include <math.h>
#include <string.h>

#include "dfl-error.h"

typedef struct {
  int len;             /* first: the DflTargetSeqHead */
  const DflTarget *t;
  DflDevice *device;
  int n_layers;        /* kept so freeing needs nothing of the target */
  int cap;             /* positions the caches have room for */
  gpointer *k, *v;     /* per layer [cap][kv_heads·head_dim] F32, device memory */
} OpsSeq;
G_STATIC_ASSERT (G_STRUCT_OFFSET (OpsSeq, len) == G_STRUCT_OFFSET (DflTargetSeqHead, len));

/* --- tensor views --- */

/* Rows `from` … from + rows − 1 of a packed [ ][cols] tensor. */
static DflTensor
rows_of (const DflTensor *t, gint64 from, gint64 rows)
{
  DflTensor v = *t;

  v.offset += (gsize) from * t->nb[1];
  v.ne[1] = rows;
  v.nb[2] = v.nb[3] = v.nb[1] * (gsize) rows;
  return v;
}

/* A packed [rows][heads·head_dim] tensor seen as [rows][heads][head_dim]. */
static DflTensor
heads_of (const DflTensor *t, int heads, int head_dim)
{
  DflTensor v = *t;

  v.ne[0] = head_dim;
  v.ne[1] = heads;
  v.ne[2] = t->ne[1];
  v.ne[3] = 1;
  v.nb[1] = t->nb[0] * (gsize) head_dim;
  v.nb[2] = v.nb[1] * (gsize) heads;
  v.nb[3] = v.nb[2] * (gsize) t->ne[1];
  return v;
}

/* The same rows seen as [rows·groups][cols / groups] (a row per head). */
static DflTensor
split_rows (const DflTensor *t, int groups)
{
  return dfl_tensor_2d (t->device, t->handle, t->offset, t->dtype, t->ne[1] * groups,
                        t->ne[0] / groups);
}

/* --- sequences --- */

gpointer
dfl_target_ops_seq_new (const DflTarget *t)
{
  OpsSeq *s = g_new0 (OpsSeq, 1);

  s->t = t;
  s->device = dfl_device_ref (t->model->device);
  s->n_layers = t->cfg.layers;
  s->k = g_new0 (gpointer, t->cfg.layers);
  s->v = g_new0 (gpointer, t->cfg.layers);
  return s;
}

void
dfl_target_ops_seq_free (gpointer seq)
{
  OpsSeq *s = seq;

  for (int i = 0; i < s->n_layers; i++) {
    dfl_device_free (s->device, s->k[i]);
    dfl_device_free (s->device, s->v[i]);
  }
  g_free (s->k);
  g_free (s->v);
  dfl_device_unref (s->device);
  g_free (s);
}

/* One layer's cache of `cap` positions grown into new memory, its first
 * `keep` rows carried over by the device. */
static gpointer
grow_cache (OpsSeq *s, gpointer old, int keep, int cap, const DflTensor *zero, GError **error)
{
  const DflQwen3Config *c = &s->t->cfg;
  gint64 row = (gint64) c->kv_heads * c->head_dim;
  gpointer fresh = dfl_device_alloc (s->device, (gsize) cap * row * sizeof (float), error);

  if (fresh && keep > 0) {
    DflTensor src = dfl_tensor_2d (s->device, old, 0, DFL_DTYPE_F32, keep, row);
    DflTensor dst = dfl_tensor_2d (s->device, fresh, 0, DFL_DTYPE_F32, cap, row);
    if (!dfl_op_copy_rows (s->device, &src, zero, &dst, error)) {
      dfl_device_free (s->device, fresh);
      return NULL;
    }
  }
  return fresh;
}

/* Room in every layer's cache for `need` positions; grows by doubling so a
 * long generation reallocates a few times, not every step. The rows held
 * (len) move with it; on failure the caches are as they were. */
gboolean
dfl_target_ops_seq_reserve (gpointer seq, int need, GError **error)
{
  OpsSeq *s = seq;
  const DflQwen3Config *c = &s->t->cfg;
  g_autofree gpointer *k = NULL, *v = NULL;
  gpointer zero_mem;
  gint64 zero_at = 0;
  DflTensor zero;
  gboolean ok = TRUE;
  int cap;

  if (need <= s->cap)
    return TRUE;
  cap = MAX (need, MAX (64, s->cap * 2));
  cap = MIN (cap, MAX (need, c->max_positions));

  /* the start row of the copies, an index tensor on the device */
  if (!(zero_mem = dfl_device_alloc (s->device, sizeof zero_at, error)))
    return FALSE;
  zero = dfl_tensor_2d (s->device, zero_mem, 0, DFL_DTYPE_I64, 1, 1);
  k = g_new0 (gpointer, s->n_layers);
  v = g_new0 (gpointer, s->n_layers);
  ok = dfl_device_upload (s->device, zero_mem, 0, &zero_at, sizeof zero_at, error);
  for (int i = 0; ok && i < s->n_layers; i++)
    ok = (k[i] = grow_cache (s, s->k[i], s->len, cap, &zero, error))
         && (v[i] = grow_cache (s, s->v[i], s->len, cap, &zero, error));
  /* the copies must have run before the old memory goes */
  ok = ok && dfl_op_sync (s->device, error);
  dfl_device_free (s->device, zero_mem);
  for (int i = 0; i < s->n_layers; i++) {
    if (ok) {
      /* the new caches take the old ones' place */
      dfl_device_free (s->device, s->k[i]);
      dfl_device_free (s->device, s->v[i]);
      s->k[i] = k[i];
      s->v[i] = v[i];
    } else {
      dfl_device_free (s->device, k[i]);
      dfl_device_free (s->device, v[i]);
    }
  }
  if (ok)
    s->cap = cap;
  return ok;
}

/* --- the forward --- */

/* The device memory of one forward: the activations (F32) and the index
 * tensors, each at its byte offset in one allocation of each kind. */
typedef struct {
  DflDevice *dev;
  gpointer act, idx;
  gsize act_bytes, idx_bytes;
  /* activations [rows][…] */
  DflTensor h, x, q, k, v, att, gate, up;
  /* the final-normed rows and their logits, every sequence's in turn */
  DflTensor normed, logits;
  /* index tensors: the host's copy, uploaded once; I64 first */
  guint8 *host_idx;
  gsize zero_at, pos_at, tap_row_at, ids_at, lo_at, hi_at, argmax_at;
} Scratch;

/* `bytes` more at the end of an allocation, each buffer 64-byte aligned. */
static gsize
take (gsize *end, gsize bytes)
{
  gsize at = *end;

  *end = at + ((bytes + 63) & ~(gsize) 63);
  return at;
}

static DflTensor
act_tensor (Scratch *sc, gsize at, gint64 rows, gint64 cols)
{
  return dfl_tensor_2d (sc->dev, sc->act, at, DFL_DTYPE_F32, rows, cols);
}

static DflTensor
idx_tensor (Scratch *sc, gsize at, DflDtype dtype, gint64 n)
{
  return dfl_tensor_2d (sc->dev, sc->idx, at, dtype, 1, n);
}

static void
scratch_clear (Scratch *sc)
{
  dfl_device_free (sc->dev, sc->act);
  dfl_device_free (sc->dev, sc->idx);
  g_free (sc->host_idx);
}

/* Rows whose logits a job asks for (after the final norm): from … n − 1. */
static int
head_from (const DflTargetBatchJob *j)
{
  const DflForwardPlan *p = &j->plan;

  if (!(p->logits || p->d_logits || p->argmax || p->hidden) || p->logits_from >= j->n)
    return j->n;
  return MAX (p->logits_from, 0);
}

/* Allocate a forward's memory and write its index tensors: ids, the
 * positions, each row's key range, the taps' destination rows. */
static gboolean
scratch_init (Scratch *sc, const DflTarget *t, DflTargetBatchJob *jobs, int n_jobs, int rows,
              int head_rows, gboolean want_logits, GError **error)
{
  const DflQwen3Config *c = &t->cfg;
  gint64 hs = c->hidden, qd = (gint64) c->heads * c->head_dim;
  gint64 kd = (gint64) c->kv_heads * c->head_dim, ffn = c->intermediate;
  /* col: the bytes of one F32 column over every row */
  gsize end = 0, h, x, q, k, v, att, gate, up, normed, logits = 0, col = sizeof (float) * rows;
  int tap_rows = 0;

  memset (sc, 0, sizeof *sc);
  sc->dev = t->model->device;
  h = take (&end, col * hs);
  x = take (&end, col * hs);
  q = take (&end, col * qd);
  k = take (&end, col * kd);
  v = take (&end, col * kd);
  att = take (&end, col * qd);
  gate = take (&end, col * ffn);
  up = take (&end, col * ffn);
  normed = take (&end, sizeof (float) * head_rows * hs);
  if (want_logits)
    logits = take (&end, sizeof (float) * head_rows * c->vocab);
  sc->act_bytes = end;

  for (int j = 0; j < n_jobs; j++)
    tap_rows += jobs[j].n * jobs[j].plan.n_tap_layers;
  end = 0;
  sc->zero_at = take (&end, sizeof (gint64));
  sc->pos_at = take (&end, sizeof (gint64) * n_jobs);
  sc->tap_row_at = take (&end, sizeof (gint64) * tap_rows);
  sc->ids_at = take (&end, sizeof (gint32) * rows);
  sc->lo_at = take (&end, sizeof (gint32) * rows);
  sc->hi_at = take (&end, sizeof (gint32) * rows);
  sc->argmax_at = take (&end, sizeof (gint32) * MAX (head_rows, 1));
  sc->idx_bytes = end;

  if (!(sc->act = dfl_device_alloc (sc->dev, sc->act_bytes, error))
      || !(sc->idx = dfl_device_alloc (sc->dev, sc->idx_bytes, error)))
    return FALSE;
  sc->h = act_tensor (sc, h, rows, hs);
  sc->x = act_tensor (sc, x, rows, hs);
  sc->q = act_tensor (sc, q, rows, qd);
  sc->k = act_tensor (sc, k, rows, kd);
  sc->v = act_tensor (sc, v, rows, kd);
  sc->att = act_tensor (sc, att, rows, qd);
  sc->gate = act_tensor (sc, gate, rows, ffn);
  sc->up = act_tensor (sc, up, rows, ffn);
  sc->normed = act_tensor (sc, normed, head_rows, hs);
  if (want_logits)
    sc->logits = act_tensor (sc, logits, head_rows, c->vocab);

  sc->host_idx = g_malloc0 (sc->idx_bytes);
  {
    gint64 *pos = (gint64 *) (sc->host_idx + sc->pos_at);
    gint64 *tap_row = (gint64 *) (sc->host_idx + sc->tap_row_at);
    gint32 *ids = (gint32 *) (sc->host_idx + sc->ids_at);
    gint32 *lo = (gint32 *) (sc->host_idx + sc->lo_at);
    gint32 *hi = (gint32 *) (sc->host_idx + sc->hi_at);
    int r0 = 0, t0 = 0;

    for (int j = 0; j < n_jobs; j++) {
      const DflTargetBatchJob *job = &jobs[j];
      int len = ((const DflTargetSeqHead *) job->seq)->len, nt = job->plan.n_tap_layers;
      pos[j] = len;
      for (int r = 0; r < job->n; r++) {
        /* causal over the sequence's own cache: its rows so far and this one */
        ids[r0 + r] = job->ids[r];
        lo[r0 + r] = 0;
        hi[r0 + r] = len + r + 1;
      }
      /* the taps join per row in the order asked: row r's tap ti is row
       * r·nt + ti of the taps seen as [n·nt][hidden] */
      for (int r = 0; r < job->n; r++)
        for (int ti = 0; ti < nt; ti++)
          tap_row[t0 + ti * job->n + r] = (gint64) r * nt + ti;
      r0 += job->n;
      t0 += job->n * nt;
    }
  }
  return dfl_device_upload (sc->dev, sc->idx, 0, sc->host_idx, sc->idx_bytes, error);
}

/* A caller's rows as a tensor the ops write: host rows where the device
 * is the CPU, a device pointer otherwise (the back ends whose handles are
 * pointers). */
static DflTensor
caller_rows (DflDevice *dev, float *host, float *device, gint64 rows, gint64 cols)
{
  if (device)
    return dfl_tensor_2d (dev, device, 0, DFL_DTYPE_F32, rows, cols);
  return dfl_tensor_2d (NULL, host, 0, DFL_DTYPE_F32, rows, cols);
}

static gboolean
is_cpu (DflDevice *dev)
{
  return dfl_device_backend (dev) == DFL_BACKEND_CPU;
}

/* A bias row added to each of `x`'s rows. */
static gboolean
add_bias (DflDevice *dev, const DflTensor *x, const DflTensor *bias, GError **error)
{
  for (gint64 r = 0; r < x->ne[1]; r++) {
    DflTensor row = rows_of (x, r, 1);
    if (!dfl_op_add (dev, &row, bias, error))
      return FALSE;
  }
  return TRUE;
}

/* One layer over every row: the products over all of them at once, the
 * rope, the cache and the attention sequence by sequence. */
static gboolean
layer_forward (const DflTarget *t, const DflTargetLayer *l, int li, DflTargetBatchJob *jobs,
               int n_jobs, Scratch *sc, GError **error)
{
  const DflQwen3Config *c = &t->cfg;
  DflDevice *dev = sc->dev;
  int hd = c->head_dim, nh = c->heads, kv = c->kv_heads, r0 = 0;
  float eps = (float) c->rms_eps, scale = 1.0f / sqrtf ((float) hd);
  DflTensor qh = split_rows (&sc->q, nh), kh = split_rows (&sc->k, kv);

  if (!dfl_op_rmsnorm (dev, &sc->h, &l->in_norm, &sc->x, eps, error)
      || !dfl_op_matmul (dev, &l->q, &sc->x, &sc->q, FALSE, error)
      || !dfl_op_matmul (dev, &l->k, &sc->x, &sc->k, FALSE, error)
      || !dfl_op_matmul (dev, &l->v, &sc->x, &sc->v, FALSE, error))
    return FALSE;
  if (l->has_bias
      && !(add_bias (dev, &sc->q, &l->q_bias, error) && add_bias (dev, &sc->k, &l->k_bias, error)
           && add_bias (dev, &sc->v, &l->v_bias, error)))
    return FALSE;
  /* q and k are normed per head before rope (Qwen3's q_norm / k_norm) */
  if (!dfl_op_rmsnorm (dev, &qh, &l->q_norm, &qh, eps, error)
      || !dfl_op_rmsnorm (dev, &kh, &l->k_norm, &kh, eps, error))
    return FALSE;

  for (int j = 0; j < n_jobs; j++) {
    OpsSeq *s = jobs[j].seq;
    int n = jobs[j].n, keys = s->len + n;
    DflTensor pos = idx_tensor (sc, sc->pos_at + sizeof (gint64) * j, DFL_DTYPE_I64, 1);
    DflTensor lo = idx_tensor (sc, sc->lo_at + sizeof (gint32) * r0, DFL_DTYPE_I32, n);
    DflTensor hi = idx_tensor (sc, sc->hi_at + sizeof (gint32) * r0, DFL_DTYPE_I32, n);
    DflTensor q_rows = rows_of (&sc->q, r0, n), k_rows = rows_of (&sc->k, r0, n);
    DflTensor v_rows = rows_of (&sc->v, r0, n), att_rows = rows_of (&sc->att, r0, n);
    DflTensor q3 = heads_of (&q_rows, nh, hd), k3 = heads_of (&k_rows, kv, hd);
    DflTensor att3 = heads_of (&att_rows, nh, hd);
    DflTensor kc = dfl_tensor_2d (dev, s->k[li], 0, DFL_DTYPE_F32, s->cap, (gint64) kv * hd);
    DflTensor vc = dfl_tensor_2d (dev, s->v[li], 0, DFL_DTYPE_F32, s->cap, (gint64) kv * hd);
    DflTensor kc_seen = rows_of (&kc, 0, keys), vc_seen = rows_of (&vc, 0, keys);
    DflTensor k_keys = heads_of (&kc_seen, kv, hd), v_keys = heads_of (&vc_seen, kv, hd);

    if (!dfl_op_rope (dev, &q3, &t->model->inv_freq, &pos, error)
        || !dfl_op_rope (dev, &k3, &t->model->inv_freq, &pos, error)
        || !dfl_op_copy_rows (dev, &k_rows, &pos, &kc, error)
        || !dfl_op_copy_rows (dev, &v_rows, &pos, &vc, error)
        || !dfl_op_attention (dev, &q3, &k_keys, &v_keys, &lo, &hi, &att3, scale, error))
      return FALSE;
    r0 += n;
  }

  if (!dfl_op_matmul (dev, &l->o, &sc->att, &sc->h, TRUE, error)
      || (l->has_bias && !add_bias (dev, &sc->h, &l->o_bias, error))
      || !dfl_op_rmsnorm (dev, &sc->h, &l->post_norm, &sc->x, eps, error)
      || !dfl_op_matmul (dev, &l->gate, &sc->x, &sc->gate, FALSE, error)
      || !dfl_op_matmul (dev, &l->up, &sc->x, &sc->up, FALSE, error)
      || !dfl_op_silu_mul (dev, &sc->gate, &sc->up, error)
      || !dfl_op_matmul (dev, &l->down, &sc->gate, &sc->h, TRUE, error))
    return FALSE;

  /* the residual stream after this layer, where a sequence taps it */
  r0 = 0;
  for (int j = 0, t0 = 0; j < n_jobs; j++) {
    const DflForwardPlan *p = &jobs[j].plan;
    int n = jobs[j].n, nt = p->n_tap_layers, rows_at = r0, taps_at = t0;
    DflTensor taps;

    r0 += n;
    t0 += n * nt;
    if (!p->taps && !p->d_taps)
      continue;
    taps = caller_rows (dev, p->taps, p->d_taps, (gint64) n * nt, c->hidden);
    for (int ti = 0; ti < nt; ti++) {
      if (p->tap_layers[ti] != li)
        continue;
      for (int r = 0; r < n; r++) {
        DflTensor src = rows_of (&sc->h, rows_at + r, 1);
        DflTensor row0 = idx_tensor (sc, sc->tap_row_at + sizeof (gint64) * (taps_at + ti * n + r),
                                     DFL_DTYPE_I64, 1);
        if (!dfl_op_copy_rows (dev, &src, &row0, &taps, error))
          return FALSE;
      }
    }
  }
  return TRUE;
}

/* Device rows into the caller's: host rows downloaded (the CPU's "download"
 * a copy), device rows copied by the device. */
static gboolean
deliver (Scratch *sc, const DflTensor *src, float *host, float *device, GError **error)
{
  if (host && !dfl_device_download (sc->dev, src->handle, src->offset, host,
                                    dfl_tensor_bytes (src), error))
    return FALSE;
  if (device) {
    DflTensor dst = caller_rows (sc->dev, NULL, device, src->ne[1], src->ne[0]);
    DflTensor row0 = idx_tensor (sc, sc->zero_at, DFL_DTYPE_I64, 1);
    return dfl_op_copy_rows (sc->dev, src, &row0, &dst, error);
  }
  return TRUE;
}

/* The final norm and the head over the rows each sequence asks for, and
 * what it asks of them split back to it. */
static gboolean
head_forward (const DflTarget *t, DflTargetBatchJob *jobs, int n_jobs, Scratch *sc,
              int head_rows, gboolean want_logits, GError **error)
{
  const DflTargetModel *m = t->model;
  DflDevice *dev = sc->dev;
  float eps = (float) t->cfg.rms_eps;
  gint64 vocab = t->cfg.vocab;
  DflTensor normed = sc->normed, logits = sc->logits;
  gboolean direct = FALSE;
  int r0 = 0, h0 = 0;

  /* one sequence on the CPU: its norm and logits written where it asked
   * (the common decode and verify steps copy nothing) */
  if (n_jobs == 1 && is_cpu (dev)) {
    DflForwardPlan *p = &jobs[0].plan;
    if (p->hidden)
      normed = dfl_tensor_2d (NULL, p->hidden, 0, DFL_DTYPE_F32, head_rows, t->cfg.hidden);
    if (p->logits)
      logits = dfl_tensor_2d (NULL, p->logits, 0, DFL_DTYPE_F32, head_rows, vocab);
    direct = TRUE;
  }
  for (int j = 0; j < n_jobs; r0 += jobs[j].n, j++) {
    int from = head_from (&jobs[j]), rows = jobs[j].n - from;
    DflTensor src, dst;

    if (rows == 0)
      continue;
    src = rows_of (&sc->h, r0 + from, rows);
    dst = rows_of (&normed, h0, rows);
    if (!dfl_op_rmsnorm (dev, &src, &m->norm, &dst, eps, error))
      return FALSE;
    h0 += rows;
  }
  if (want_logits && !dfl_op_matmul (dev, &m->head, &normed, &logits, FALSE, error))
    return FALSE;

  h0 = 0;
  for (int j = 0; j < n_jobs; j++) {
    DflForwardPlan *p = &jobs[j].plan;
    int rows = jobs[j].n - head_from (&jobs[j]);
    DflTensor n_rows, l_rows, am;

    if (rows == 0)
      continue;
    n_rows = rows_of (&normed, h0, rows);
    if (want_logits)
      l_rows = rows_of (&logits, h0, rows);
    if (p->argmax) {
      am = idx_tensor (sc, sc->argmax_at + sizeof (gint32) * h0, DFL_DTYPE_I32, rows);
      if (!dfl_op_argmax (dev, &l_rows, &am, error)
          || !dfl_device_download (dev, sc->idx, am.offset, p->argmax, sizeof (gint32) * rows,
                                   error))
        return FALSE;
    }
    if (!direct
        && ((p->hidden && !deliver (sc, &n_rows, p->hidden, NULL, error))
            || ((p->logits || p->d_logits)
                && !deliver (sc, &l_rows, p->logits, p->d_logits, error))))
      return FALSE;
    h0 += rows;
  }
  return TRUE;
}

gboolean
dfl_target_ops_forward (const DflTarget *t, DflTargetBatchJob *jobs, int n_jobs,
                        GError **error)
{
  const DflTargetModel *m = t->model;
  DflDevice *dev = m->device;
  int rows = 0, head_rows = 0;
  gboolean want_logits = FALSE, ok;
  Scratch sc;

  for (int j = 0; j < n_jobs; j++) {
    OpsSeq *s = jobs[j].seq;
    const DflForwardPlan *p = &jobs[j].plan;
    rows += jobs[j].n;
    head_rows += jobs[j].n - head_from (&jobs[j]);
    if (jobs[j].n - head_from (&jobs[j]) > 0 && (p->logits || p->d_logits || p->argmax))
      want_logits = TRUE;
    if (!dfl_target_ops_seq_reserve (s, s->len + jobs[j].n, error))
      return FALSE;
  }
  if (rows == 0)
    return TRUE;

  ok = scratch_init (&sc, t, jobs, n_jobs, rows, head_rows, want_logits, error);
  if (ok) {
    DflTensor ids = idx_tensor (&sc, sc.ids_at, DFL_DTYPE_I32, rows);
    ok = dfl_op_embed (dev, &m->embed, &ids, &sc.h, error);
  }
  for (int li = 0; ok && li < t->cfg.layers; li++)
    ok = layer_forward (t, &m->layers[li], li, jobs, n_jobs, &sc, error);
  if (ok && head_rows > 0)
    ok = head_forward (t, jobs, n_jobs, &sc, head_rows, want_logits, error);
  /* a GPU reports a failure of the queued work here, before the lengths move */
  ok = ok && dfl_op_sync (dev, error);
  scratch_clear (&sc);
  if (!ok)
    return FALSE;
  for (int j = 0; j < n_jobs; j++)
    ((OpsSeq *) jobs[j].seq)->len += jobs[j].n;
  return TRUE;
}
