/* gst-dflash — the Qwen3 forward written once over the operations of
 * dfl-backend.h: sequences, their KV caches, one pass over the rows of one
 * or several sequences (target-forward.h).
 *
 * Every buffer is memory of the model's device, allocated through it; the
 * index tensors (token ids, positions, key ranges, start rows) are written
 * on the host and uploaded once a pass, so a GPU reads them on the device
 * and the CPU where they lie. Nothing here knows which back end runs it:
 * where the device records graphs (its capabilities), a decode or verify
 * step of one sequence replays a graph of its pass.
 */
#include "target-forward.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "dfl-error.h"

/* A sequence keeps its most recently used graphs: decode, verify and the
 * outputs asked of them make a few shapes. A graphed pass taps at most
 * this many layers. A pass of several sequences is graphed (by the first,
 * which keeps the graph) up to a table op's sequences and this many rows
 * (the scratch of 512 rows' logits is 300 MB at Qwen3's vocabulary). */
#define GRAPH_SLOTS 8
#define GRAPH_MAX_TAPS 16
#define GRAPH_MAX_JOBS DFL_OP_TABLE_MAX
#define GRAPH_BATCH_ROWS 512

/* The device memory of one pass: the activations (F32) and the index
 * tensors, each at its byte offset in one allocation of each kind. The
 * offsets follow from the sizes it is made for; a pass of fewer rows sees
 * the same buffers through views of its own rows (scratch_view). */
typedef struct {
  DflDevice *dev;
  gpointer act, idx;
  gsize act_bytes, idx_bytes;
  gsize act_room, idx_room;   /* the allocations' sizes (a spare's may be more) */
  /* what it is made for: rows, rows through the head, taps rows of the
   * index, taps rows kept in the scratch (a graphed pass's), logits */
  int rows, head_rows, tap_rows, kept_tap_rows;
  gboolean logits_room;
  gsize h_at, x_at, q_at, k_at, v_at, att_at, gate_at, up_at, normed_at, logits_at, taps_at;
  /* activations [rows][…] */
  DflTensor h, x, q, k, v, att, gate, up;
  /* the final-normed rows and their logits, every sequence's in turn */
  DflTensor normed, logits;
  /* a graphed pass's taps [n·taps][hidden], copied out after the replay */
  DflTensor taps;
  /* index tensors: the host's copy, uploaded once a pass; I64 first. A
   * device that reads its ops' indices on the host (Vulkan) reads them
   * there, from the host's copy (host_indices); the argmax, which its
   * kernel writes, is in device memory on every device. */
  guint8 *host_idx;
  gboolean host_indices;
  gsize zero_at, pos_at, tap_row_at, tap_dst_at, ids_at, which_at, lo_at, hi_at, argmax_at;
} Scratch;

/* One sequence's part of a captured pass. */
typedef struct {
  int rows, head_from;
  gboolean norm, head, argmax;      /* the final norm; the head; its argmax */
  gboolean taps;                    /* it asks for the pass's taps */
  guint64 caches;                   /* its caches (OpsSeq.caches_id) */
} GraphJob;

/* What a captured pass was made for: it is replayed only for the same
 * sequences' caches, rows and outputs asked. */
typedef struct {
  int n_jobs, rows, max_keys;
  int n_taps, taps[GRAPH_MAX_TAPS];
  GraphJob jobs[GRAPH_MAX_JOBS];
  guint64 scratch_generation;
} GraphKey;

typedef struct {
  GraphKey key;
  DflGraph *graph;
  guint64 used;
} OpsGraph;

typedef struct {
  int len;             /* first: the DflTargetSeqHead */
  const DflTarget *t;
  DflDevice *device;
  int n_layers;        /* kept so freeing needs nothing of the target */
  int cap;             /* positions the caches have room for */
  gpointer *k, *v;     /* per layer [cap][kv_heads·head_dim] F32, device memory */
  /* the caches as they are now: a number no caches of any sequence had
   * before (a graph of several sequences names theirs by it) */
  guint64 caches_id;
  /* graphed steps: the pass's memory at fixed addresses (NULL until the
   * first), counted as it is made again; the graphs kept */
  Scratch *graph_scratch;
  guint64 scratch_generation;
  OpsGraph graphs[GRAPH_SLOTS];
  guint64 graph_clock;
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

/* --- a pass's memory --- */

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

/* An index tensor the ops read, where the device reads it. */
static DflTensor
idx_tensor (Scratch *sc, gsize at, DflDtype dtype, gint64 n)
{
  if (sc->host_indices)
    return dfl_tensor_2d (NULL, sc->host_idx, at, dtype, 1, n);
  return dfl_tensor_2d (sc->dev, sc->idx, at, dtype, 1, n);
}

/* Index values an op writes: device memory, copied back after the pass. */
static DflTensor
idx_out_tensor (Scratch *sc, gsize at, DflDtype dtype, gint64 n)
{
  return dfl_tensor_2d (sc->dev, sc->idx, at, dtype, 1, n);
}

struct _DflTargetSpare {
  DflDevice *dev;
  GMutex lock;
  gpointer act, idx;      /* NULL where a pass holds it, or none is kept */
  gsize act_room, idx_room;
};

DflTargetSpare *
dfl_target_spare_new (DflDevice *device)
{
  DflTargetSpare *spare = g_new0 (DflTargetSpare, 1);

  spare->dev = dfl_device_ref (device);
  g_mutex_init (&spare->lock);
  return spare;
}

void
dfl_target_spare_free (DflTargetSpare *spare)
{
  if (!spare)
    return;
  dfl_device_free (spare->dev, spare->act);
  dfl_device_free (spare->dev, spare->idx);
  g_mutex_clear (&spare->lock);
  dfl_device_unref (spare->dev);
  g_free (spare);
}

/* The kept allocation `*kept` of `*kept_room` bytes where it holds
 * `bytes`: taken (NULL left behind). */
static gpointer
spare_take (gpointer *kept, gsize *kept_room, gsize bytes, gsize *room)
{
  gpointer mem = NULL;

  if (*kept && *kept_room >= bytes) {
    mem = *kept;
    *room = *kept_room;
    *kept = NULL;
  }
  return mem;
}

/* A pass's allocation given back: kept where it is the larger, else
 * freed. Returns what to free. */
static gpointer
spare_give (gpointer *kept, gsize *kept_room, gpointer mem, gsize room)
{
  gpointer drop = mem;

  if (mem && (!*kept || room > *kept_room)) {
    drop = *kept;
    *kept = mem;
    *kept_room = room;
  }
  return drop;
}

/* The pass's memory freed, or kept in `spare` (NULL: freed) for the next
 * pass; the work that used it has ended. */
static void
scratch_clear (Scratch *sc, DflTargetSpare *spare)
{
  gpointer drop_act = sc->act, drop_idx = sc->idx;

  if (spare) {
    g_mutex_lock (&spare->lock);
    drop_act = spare_give (&spare->act, &spare->act_room, sc->act, sc->act_room);
    drop_idx = spare_give (&spare->idx, &spare->idx_room, sc->idx, sc->idx_room);
    g_mutex_unlock (&spare->lock);
  }
  dfl_device_free (sc->dev, drop_act);
  dfl_device_free (sc->dev, drop_idx);
  g_free (sc->host_idx);
  memset (sc, 0, sizeof *sc);
}

/* The tensors of a pass of `rows` rows, `head_rows` of them through the
 * head, over memory made for at least as many. */
static void
scratch_view (Scratch *sc, const DflQwen3Config *c, int rows, int head_rows)
{
  gint64 qd = (gint64) c->heads * c->head_dim, kd = (gint64) c->kv_heads * c->head_dim;

  sc->h = act_tensor (sc, sc->h_at, rows, c->hidden);
  sc->x = act_tensor (sc, sc->x_at, rows, c->hidden);
  sc->q = act_tensor (sc, sc->q_at, rows, qd);
  sc->k = act_tensor (sc, sc->k_at, rows, kd);
  sc->v = act_tensor (sc, sc->v_at, rows, kd);
  sc->att = act_tensor (sc, sc->att_at, rows, qd);
  sc->gate = act_tensor (sc, sc->gate_at, rows, c->intermediate);
  sc->up = act_tensor (sc, sc->up_at, rows, c->intermediate);
  sc->normed = act_tensor (sc, sc->normed_at, head_rows, c->hidden);
  if (sc->logits_room)
    sc->logits = act_tensor (sc, sc->logits_at, head_rows, c->vocab);
}

/* Memory for a pass of `rows` rows, `head_rows` of them through the head
 * (and its logits where `logits_room`), `tap_rows` taps rows of the index
 * and `kept_tap_rows` rows of taps kept in the scratch. */
static gboolean
scratch_alloc (Scratch *sc, const DflTarget *t, int rows, int head_rows,
               gboolean logits_room, int tap_rows, int kept_tap_rows, DflTargetSpare *spare,
               GError **error)
{
  const DflQwen3Config *c = &t->cfg;
  gint64 hs = c->hidden, qd = (gint64) c->heads * c->head_dim;
  gint64 kd = (gint64) c->kv_heads * c->head_dim, ffn = c->intermediate;
  /* col: the bytes of one F32 column over every row */
  gsize end = 0, col = sizeof (float) * rows;

  memset (sc, 0, sizeof *sc);
  sc->dev = t->model->device;
  sc->rows = rows;
  sc->head_rows = head_rows;
  sc->tap_rows = tap_rows;
  sc->kept_tap_rows = kept_tap_rows;
  sc->logits_room = logits_room;
  sc->h_at = take (&end, col * hs);
  sc->x_at = take (&end, col * hs);
  sc->q_at = take (&end, col * qd);
  sc->k_at = take (&end, col * kd);
  sc->v_at = take (&end, col * kd);
  sc->att_at = take (&end, col * qd);
  sc->gate_at = take (&end, col * ffn);
  sc->up_at = take (&end, col * ffn);
  sc->normed_at = take (&end, sizeof (float) * head_rows * hs);
  if (logits_room)
    sc->logits_at = take (&end, sizeof (float) * head_rows * c->vocab);
  if (kept_tap_rows > 0)
    sc->taps_at = take (&end, sizeof (float) * kept_tap_rows * hs);
  sc->act_bytes = end;

  end = 0;
  sc->zero_at = take (&end, sizeof (gint64));
  sc->pos_at = take (&end, sizeof (gint64) * rows);
  sc->tap_row_at = take (&end, sizeof (gint64) * tap_rows);
  sc->tap_dst_at = take (&end, sizeof (gint64) * tap_rows);
  sc->ids_at = take (&end, sizeof (gint32) * rows);
  sc->which_at = take (&end, sizeof (gint32) * rows);
  sc->lo_at = take (&end, sizeof (gint32) * rows);
  sc->hi_at = take (&end, sizeof (gint32) * rows);
  sc->argmax_at = take (&end, sizeof (gint32) * MAX (head_rows, 1));
  sc->idx_bytes = end;

  if (spare) {
    g_mutex_lock (&spare->lock);
    sc->act = spare_take (&spare->act, &spare->act_room, sc->act_bytes, &sc->act_room);
    sc->idx = spare_take (&spare->idx, &spare->idx_room, sc->idx_bytes, &sc->idx_room);
    g_mutex_unlock (&spare->lock);
  }
  if (!sc->act) {
    sc->act_room = sc->act_bytes;
    if (!(sc->act = dfl_device_alloc (sc->dev, sc->act_bytes, error))) {
      scratch_clear (sc, spare);
      return FALSE;
    }
  }
  if (!sc->idx) {
    sc->idx_room = sc->idx_bytes;
    if (!(sc->idx = dfl_device_alloc (sc->dev, sc->idx_bytes, error))) {
      scratch_clear (sc, spare);
      return FALSE;
    }
  }
  sc->host_idx = g_malloc0 (sc->idx_bytes);
  sc->host_indices = (dfl_device_op_caps (sc->dev, DFL_OP_EMBED, DFL_DTYPE_F32)
                      & DFL_OP_CAP_HOST_INDICES) != 0;
  scratch_view (sc, c, rows, head_rows);
  return TRUE;
}

/* The layers a plan taps where it asks for taps back (a plan may name
 * tap layers and ask for no rows of them). */
static int
taps_of (const DflForwardPlan *p)
{
  return p->taps || p->d_taps ? p->n_tap_layers : 0;
}

static gboolean
wants_taps (const DflForwardPlan *p)
{
  return taps_of (p) > 0;
}

/* Whether every job taps the same layers (a batch of a drafter's steps):
 * then a tapped layer's rows go to every job's taps in one table op. */
static gboolean
same_taps (DflTargetBatchJob *jobs, int n_jobs)
{
  const DflForwardPlan *p0 = &jobs[0].plan;
  int nt = taps_of (p0);

  if (nt == 0)
    return FALSE;
  for (int j = 1; j < n_jobs; j++)
    if (taps_of (&jobs[j].plan) != nt
        || memcmp (jobs[j].plan.tap_layers, p0->tap_layers, sizeof (int) * nt))
      return FALSE;
  return TRUE;
}

/* Write a pass's index tensors (ids, each row's position, which is also
 * its row in its sequence's cache, its sequence's entry in the tables of a
 * layer's caches, its key range, the taps' destination rows) and upload
 * them: the upload waits for the work queued before, so a pass that read
 * them earlier has ended. */
static gboolean
scratch_fill (Scratch *sc, DflTargetBatchJob *jobs, int n_jobs, GError **error)
{
  gint64 *pos = (gint64 *) (sc->host_idx + sc->pos_at);
  gint64 *tap_row = (gint64 *) (sc->host_idx + sc->tap_row_at);
  gint32 *ids = (gint32 *) (sc->host_idx + sc->ids_at);
  gint32 *which = (gint32 *) (sc->host_idx + sc->which_at);
  gint32 *lo = (gint32 *) (sc->host_idx + sc->lo_at);
  gint32 *hi = (gint32 *) (sc->host_idx + sc->hi_at);
  int r0 = 0, t0 = 0;

  memset (sc->host_idx, 0, sc->idx_bytes);
  for (int j = 0; j < n_jobs; j++) {
    const DflTargetBatchJob *job = &jobs[j];
    int len = ((const DflTargetSeqHead *) job->seq)->len, nt = taps_of (&job->plan);
    for (int r = 0; r < job->n; r++) {
      /* causal over the sequence's own cache: its rows so far and this one */
      ids[r0 + r] = job->ids[r];
      pos[r0 + r] = len + r;
      /* the layer's caches go to the table ops DFL_OP_TABLE_MAX at a time */
      which[r0 + r] = j % DFL_OP_TABLE_MAX;
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
  /* the same rows by tap for the table ops where every job taps alike:
   * tap ti of the pass's row r (its job's row i) at [ti][r] */
  if (same_taps (jobs, n_jobs)) {
    gint64 *tap_dst = (gint64 *) (sc->host_idx + sc->tap_dst_at);
    int nt = taps_of (&jobs[0].plan);
    r0 = 0;
    for (int j = 0; j < n_jobs; r0 += jobs[j].n, j++)
      for (int i = 0; i < jobs[j].n; i++)
        for (int ti = 0; ti < nt; ti++)
          tap_dst[(gsize) ti * sc->q.ne[1] + r0 + i] = (gint64) i * nt + ti;
  }
  return dfl_device_upload (sc->dev, sc->idx, 0, sc->host_idx, sc->idx_bytes, error);
}

/* --- sequences --- */

/* A number for caches just made, never given before. */
static guint64
new_caches_id (void)
{
  static atomic_ullong next = 1;

  return atomic_fetch_add (&next, 1);
}

gpointer
dfl_target_ops_seq_new (const DflTarget *t)
{
  OpsSeq *s = g_new0 (OpsSeq, 1);

  s->t = t;
  s->device = dfl_device_ref (t->model->device);
  s->n_layers = t->cfg.layers;
  s->k = g_new0 (gpointer, t->cfg.layers);
  s->v = g_new0 (gpointer, t->cfg.layers);
  s->caches_id = new_caches_id ();
  return s;
}

static void
drop_graphs (OpsSeq *s)
{
  for (int i = 0; i < GRAPH_SLOTS; i++)
    g_clear_pointer (&s->graphs[i].graph, dfl_graph_free);
}

void
dfl_target_ops_seq_free (gpointer seq)
{
  OpsSeq *s = seq;

  /* the graphs first: they record the memory freed after them */
  drop_graphs (s);
  if (s->graph_scratch) {
    scratch_clear (s->graph_scratch, NULL);
    g_free (s->graph_scratch);
  }
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
  DflDtype kv = s->t->model->kv_type;
  gint64 row = (gint64) c->kv_heads * c->head_dim;
  gpointer fresh = dfl_device_alloc (s->device, (gsize) cap * dfl_dtype_row_bytes (kv, row),
                                     error);

  if (fresh && keep > 0) {
    DflTensor src = dfl_tensor_2d (s->device, old, 0, kv, keep, row);
    DflTensor dst = dfl_tensor_2d (s->device, fresh, 0, kv, cap, row);
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
  if (ok) {
    /* the graphs write and read the old caches: never replayed again */
    drop_graphs (s);
    s->caches_id = new_caches_id ();
  }
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

/* --- one pass --- */

/* Rows whose logits a job asks for (after the final norm): from … n − 1. */
static int
head_from (const DflTargetBatchJob *j)
{
  const DflForwardPlan *p = &j->plan;

  if (!(p->logits || p->d_logits || p->argmax || p->hidden) || p->logits_from >= j->n)
    return j->n;
  return MAX (p->logits_from, 0);
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

/* How a pass is enqueued. Direct: attention over each sequence's keys
 * held, taps and (one sequence on the CPU) the head's rows written where
 * the caller asked. For a graph: nothing that changes from step to step
 * is written into an op, so attention covers `max_keys` keys and the taps
 * and the head's outputs stay in the scratch, copied out after. */
typedef struct {
  int max_keys;        /* > 0: a graph's bound on the keys */
  gboolean in_scratch;
  /* several sequences' rope, cache writes and attention each one op over
   * tables of their caches (where the device has the table ops) */
  gboolean tables;
} PassMode;

DflDtype
dfl_target_kv_type_for (DflDevice *device, gboolean coarse_products)
{
  return coarse_products && dfl_device_supports (device, DFL_OP_ATTENTION, DFL_DTYPE_BF16)
         && dfl_device_supports (device, DFL_OP_COPY_ROWS, DFL_DTYPE_BF16)
         ? DFL_DTYPE_BF16 : DFL_DTYPE_F32;
}

/* Whether a pass of `n_jobs` sequences runs the table ops: one sequence
 * keeps the plain ops, whose attention reads a key once for several rows. */
static gboolean
uses_tables (const DflTarget *t, int n_jobs)
{
  const DflTargetModel *m = t->model;

  return n_jobs > 1 && dfl_device_supports (m->device, DFL_OP_COPY_ROWS_TABLE, m->kv_type)
         && dfl_device_supports (m->device, DFL_OP_ATTENTION_TABLE, m->kv_type);
}

/* The keys a job's attention covers: its own so far and its rows, or a
 * graph's bound (never past its cache). */
static int
keys_of (const DflTargetBatchJob *job, const PassMode *mode)
{
  const OpsSeq *s = job->seq;

  return mode->max_keys > 0 ? MIN (mode->max_keys, s->cap) : s->len + job->n;
}

/* A layer's cache of a sequence, [cap][kv_heads·head_dim] of the model's
 * KV type. */
static DflTensor
cache_of (const DflTarget *t, DflDevice *dev, gpointer mem, int cap)
{
  return dfl_tensor_2d (dev, mem, 0, t->model->kv_type, cap,
                        (gint64) t->cfg.kv_heads * t->cfg.head_dim);
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

/* q's and k's norms per head (Qwen3's q_norm / k_norm) with their rope,
 * the cache writes and the attention of a layer sequence by sequence: the
 * positions and the key ranges are index tensors, so a replayed graph
 * reads the ones uploaded for it. */
static gboolean
attend_each (const DflTarget *t, const DflTargetLayer *l, int li, DflTargetBatchJob *jobs,
             int n_jobs, Scratch *sc, const PassMode *mode, GError **error)
{
  const DflQwen3Config *c = &t->cfg;
  DflDevice *dev = sc->dev;
  int hd = c->head_dim, nh = c->heads, kv = c->kv_heads, r0 = 0;
  float scale = 1.0f / sqrtf ((float) hd), eps = (float) c->rms_eps;

  for (int j = 0; j < n_jobs; j++) {
    OpsSeq *s = jobs[j].seq;
    int n = jobs[j].n, keys = keys_of (&jobs[j], mode);
    /* the row's position is the start of its sequence's rows */
    DflTensor pos = idx_tensor (sc, sc->pos_at + sizeof (gint64) * r0, DFL_DTYPE_I64, 1);
    DflTensor lo = idx_tensor (sc, sc->lo_at + sizeof (gint32) * r0, DFL_DTYPE_I32, n);
    DflTensor hi = idx_tensor (sc, sc->hi_at + sizeof (gint32) * r0, DFL_DTYPE_I32, n);
    DflTensor q_rows = rows_of (&sc->q, r0, n), k_rows = rows_of (&sc->k, r0, n);
    DflTensor v_rows = rows_of (&sc->v, r0, n), att_rows = rows_of (&sc->att, r0, n);
    DflTensor q3 = heads_of (&q_rows, nh, hd), k3 = heads_of (&k_rows, kv, hd);
    DflTensor att3 = heads_of (&att_rows, nh, hd);
    DflTensor kc = cache_of (t, dev, s->k[li], s->cap), vc = cache_of (t, dev, s->v[li], s->cap);
    DflTensor kc_seen = rows_of (&kc, 0, keys), vc_seen = rows_of (&vc, 0, keys);
    DflTensor k_keys = heads_of (&kc_seen, kv, hd), v_keys = heads_of (&vc_seen, kv, hd);

    if (!dfl_op_norm_rope (dev, &q3, &l->q_norm, &t->model->inv_freq, &pos, eps, error)
        || !dfl_op_norm_rope (dev, &k3, &l->k_norm, &t->model->inv_freq, &pos, eps, error)
        || !dfl_op_copy_rows (dev, &k_rows, &pos, &kc, error)
        || !dfl_op_copy_rows (dev, &v_rows, &pos, &vc, error)
        || !dfl_op_attention (dev, &q3, &k_keys, &v_keys, &lo, &hi, &att3, scale, error))
      return FALSE;
    r0 += n;
  }
  return TRUE;
}

/* The same for every sequence at once: the norms and rope of all rows at
 * their own positions, then the cache writes and the attention over tables
 * of the sequences' caches, DFL_OP_TABLE_MAX sequences an op (each row's
 * entry and row in its cache are index tensors too). */
static gboolean
attend_tables (const DflTarget *t, const DflTargetLayer *l, int li, DflTargetBatchJob *jobs,
               int n_jobs, Scratch *sc, const PassMode *mode, GError **error)
{
  const DflQwen3Config *c = &t->cfg;
  DflDevice *dev = sc->dev;
  int hd = c->head_dim, nh = c->heads, kv = c->kv_heads, rows = (int) sc->q.ne[1], r0 = 0;
  float scale = 1.0f / sqrtf ((float) hd), eps = (float) c->rms_eps;
  DflTensor pos = idx_tensor (sc, sc->pos_at, DFL_DTYPE_I64, rows);
  DflTensor q3 = heads_of (&sc->q, nh, hd), k3 = heads_of (&sc->k, kv, hd);
  DflTensor caches[2][DFL_OP_TABLE_MAX], seen[2][DFL_OP_TABLE_MAX];

  if (!dfl_op_norm_rope (dev, &q3, &l->q_norm, &t->model->inv_freq, &pos, eps, error)
      || !dfl_op_norm_rope (dev, &k3, &l->k_norm, &t->model->inv_freq, &pos, eps, error))
    return FALSE;
  for (int j0 = 0; j0 < n_jobs; j0 += DFL_OP_TABLE_MAX) {
    int n_tab = MIN (DFL_OP_TABLE_MAX, n_jobs - j0), n = 0;
    DflTensor which, at, lo, hi, k_rows, v_rows, q_rows, att_rows, qg, attg;

    for (int i = 0; i < n_tab; i++) {
      const DflTargetBatchJob *job = &jobs[j0 + i];
      OpsSeq *s = job->seq;
      int keys = keys_of (job, mode);
      for (int kind = 0; kind < 2; kind++) {
        DflTensor rows_seen;
        caches[kind][i] = cache_of (t, dev, (kind ? s->v : s->k)[li], s->cap);
        rows_seen = rows_of (&caches[kind][i], 0, keys);
        seen[kind][i] = heads_of (&rows_seen, kv, hd);
      }
      n += job->n;
    }
    which = idx_tensor (sc, sc->which_at + sizeof (gint32) * r0, DFL_DTYPE_I32, n);
    at = idx_tensor (sc, sc->pos_at + sizeof (gint64) * r0, DFL_DTYPE_I64, n);
    lo = idx_tensor (sc, sc->lo_at + sizeof (gint32) * r0, DFL_DTYPE_I32, n);
    hi = idx_tensor (sc, sc->hi_at + sizeof (gint32) * r0, DFL_DTYPE_I32, n);
    k_rows = rows_of (&sc->k, r0, n);
    v_rows = rows_of (&sc->v, r0, n);
    q_rows = rows_of (&sc->q, r0, n);
    att_rows = rows_of (&sc->att, r0, n);
    qg = heads_of (&q_rows, nh, hd);
    attg = heads_of (&att_rows, nh, hd);
    if (!dfl_op_copy_rows_table (dev, &k_rows, caches[0], n_tab, &which, &at, error)
        || !dfl_op_copy_rows_table (dev, &v_rows, caches[1], n_tab, &which, &at, error)
        || !dfl_op_attention_table (dev, &qg, seen[0], seen[1], n_tab, &which, &lo, &hi, &attg,
                                    scale, error))
      return FALSE;
    r0 += n;
  }
  return TRUE;
}

/* The taps of job j: where its plan asked, or its rows of the scratch's
 * (a graph's; `taps_at` the taps rows of the jobs before it). */
static DflTensor
taps_tensor (const DflTarget *t, const DflTargetBatchJob *job, Scratch *sc,
             const PassMode *mode, int taps_at)
{
  const DflForwardPlan *p = &job->plan;
  gint64 rows = (gint64) job->n * taps_of (p);

  return mode->in_scratch ? rows_of (&sc->taps, taps_at, rows)
         : caller_rows (sc->dev, p->taps, p->d_taps, rows, t->cfg.hidden);
}

/* The residual stream after layer li, where a sequence taps it: row by
 * row into each job's taps. */
static gboolean
tap_rows (const DflTarget *t, int li, DflTargetBatchJob *jobs, int n_jobs, Scratch *sc,
          const PassMode *mode, GError **error)
{
  int r0 = 0;

  for (int j = 0, t0 = 0; j < n_jobs; j++) {
    const DflForwardPlan *p = &jobs[j].plan;
    int n = jobs[j].n, nt = taps_of (p), rows_at = r0, taps_at = t0;
    DflTensor taps;

    r0 += n;
    t0 += n * nt;
    if (!wants_taps (p))
      continue;
    taps = taps_tensor (t, &jobs[j], sc, mode, taps_at);
    for (int ti = 0; ti < nt; ti++) {
      if (p->tap_layers[ti] != li)
        continue;
      for (int r = 0; r < n; r++) {
        DflTensor src = rows_of (&sc->h, rows_at + r, 1);
        DflTensor row0 = idx_tensor (sc, sc->tap_row_at + sizeof (gint64) * (taps_at + ti * n + r),
                                     DFL_DTYPE_I64, 1);
        if (!dfl_op_copy_rows (sc->dev, &src, &row0, &taps, error))
          return FALSE;
      }
    }
  }
  return TRUE;
}

/* The same where every job taps the same layers: each tap of layer li is
 * one table op over every row (DFL_OP_TABLE_MAX jobs an op), each row to
 * its job's taps at the row of the index's [ti][row]. */
static gboolean
tap_tables (const DflTarget *t, int li, DflTargetBatchJob *jobs, int n_jobs, Scratch *sc,
            const PassMode *mode, GError **error)
{
  const DflForwardPlan *p0 = &jobs[0].plan;
  int nt = taps_of (p0), rows = (int) sc->q.ne[1];
  DflTensor dsts[DFL_OP_TABLE_MAX];

  for (int ti = 0; ti < nt; ti++) {
    int r0 = 0, t0 = 0;
    if (p0->tap_layers[ti] != li)
      continue;
    for (int j0 = 0; j0 < n_jobs; j0 += DFL_OP_TABLE_MAX) {
      int n_tab = MIN (DFL_OP_TABLE_MAX, n_jobs - j0), n = 0;
      DflTensor src, which, at;
      for (int i = 0; i < n_tab; i++) {
        dsts[i] = taps_tensor (t, &jobs[j0 + i], sc, mode, t0);
        t0 += jobs[j0 + i].n * nt;
        n += jobs[j0 + i].n;
      }
      src = rows_of (&sc->h, r0, n);
      which = idx_tensor (sc, sc->which_at + sizeof (gint32) * r0, DFL_DTYPE_I32, n);
      at = idx_tensor (sc, sc->tap_dst_at + sizeof (gint64) * ((gsize) ti * rows + r0),
                       DFL_DTYPE_I64, n);
      if (!dfl_op_copy_rows_table (sc->dev, &src, dsts, n_tab, &which, &at, error))
        return FALSE;
      r0 += n;
    }
  }
  return TRUE;
}

/* Whether a tapped layer's rows go to the taps in one table op a tap
 * rather than an op a row (16 rows of 4 taps: 4 launches on a card, not
 * 64): where every job taps alike, the device has the op, and each job's
 * taps are memory of that device (a graph's scratch, the caller's device
 * rows, or any rows on the CPU). */
static gboolean
taps_by_table (DflTargetBatchJob *jobs, int n_jobs, const Scratch *sc, const PassMode *mode)
{
  if (!same_taps (jobs, n_jobs)
      || !dfl_device_supports (sc->dev, DFL_OP_COPY_ROWS_TABLE, DFL_DTYPE_F32))
    return FALSE;
  if (mode->in_scratch || is_cpu (sc->dev))
    return TRUE;
  for (int j = 0; j < n_jobs; j++)
    if (wants_taps (&jobs[j].plan) && !jobs[j].plan.d_taps)
      return FALSE;
  return TRUE;
}

/* One layer over every row: the products over all of them at once, q's
 * and k's norms and rope, the cache and the attention over all sequences
 * (tables) or sequence by sequence. */
static gboolean
layer_forward (const DflTarget *t, const DflTargetLayer *l, int li, DflTargetBatchJob *jobs,
               int n_jobs, Scratch *sc, const PassMode *mode, GError **error)
{
  const DflQwen3Config *c = &t->cfg;
  DflDevice *dev = sc->dev;
  float eps = (float) c->rms_eps;

  if (!dfl_op_rmsnorm (dev, &sc->h, &l->in_norm, &sc->x, eps, error)
      || !dfl_op_matmul_group (dev, 3, (const DflTensor *[]) { &l->q, &l->k, &l->v }, &sc->x,
                               (DflTensor *[]) { &sc->q, &sc->k, &sc->v }, FALSE, error))
    return FALSE;
  if (l->has_bias
      && !(add_bias (dev, &sc->q, &l->q_bias, error) && add_bias (dev, &sc->k, &l->k_bias, error)
           && add_bias (dev, &sc->v, &l->v_bias, error)))
    return FALSE;
  if (!(mode->tables ? attend_tables (t, l, li, jobs, n_jobs, sc, mode, error)
        : attend_each (t, l, li, jobs, n_jobs, sc, mode, error)))
    return FALSE;

  if (!dfl_op_matmul (dev, &l->o, &sc->att, &sc->h, TRUE, error)
      || (l->has_bias && !add_bias (dev, &sc->h, &l->o_bias, error))
      || !dfl_op_rmsnorm (dev, &sc->h, &l->post_norm, &sc->x, eps, error)
      || !dfl_op_matmul_group (dev, 2, (const DflTensor *[]) { &l->gate, &l->up }, &sc->x,
                               (DflTensor *[]) { &sc->gate, &sc->up }, FALSE, error)
      || !dfl_op_silu_mul (dev, &sc->gate, &sc->up, error)
      || !dfl_op_matmul (dev, &l->down, &sc->gate, &sc->h, TRUE, error))
    return FALSE;

  return taps_by_table (jobs, n_jobs, sc, mode)
         ? tap_tables (t, li, jobs, n_jobs, sc, mode, error)
         : tap_rows (t, li, jobs, n_jobs, sc, mode, error);
}

/* Whether the head's norm and logits of a one-sequence pass on the CPU
 * are written straight where the caller asked (the common decode and
 * verify steps copy nothing). */
static gboolean
head_direct (DflTargetBatchJob *jobs, int n_jobs, Scratch *sc, const PassMode *mode)
{
  return n_jobs == 1 && !mode->in_scratch && is_cpu (sc->dev);
}

/* The final norm and the head over the rows each sequence asks for, and
 * each asked argmax into the index area; nothing read back. */
static gboolean
head_forward (const DflTarget *t, DflTargetBatchJob *jobs, int n_jobs, Scratch *sc,
              int head_rows, gboolean want_logits, const PassMode *mode, GError **error)
{
  const DflTargetModel *m = t->model;
  DflDevice *dev = sc->dev;
  float eps = (float) t->cfg.rms_eps;
  DflTensor normed = sc->normed, logits = sc->logits;
  int r0 = 0, h0 = 0;

  if (head_direct (jobs, n_jobs, sc, mode)) {
    DflForwardPlan *p = &jobs[0].plan;
    if (p->hidden)
      normed = dfl_tensor_2d (NULL, p->hidden, 0, DFL_DTYPE_F32, head_rows, t->cfg.hidden);
    if (p->logits)
      logits = dfl_tensor_2d (NULL, p->logits, 0, DFL_DTYPE_F32, head_rows, t->cfg.vocab);
  }
  /* the norm over runs of rows that lie together in the pass (a batch of
   * decode steps is one run): a row's norm is its own */
  for (int j = 0, run_from = 0, run = 0; j <= n_jobs; j++) {
    int from = j < n_jobs ? r0 + head_from (&jobs[j]) : -1;
    int rows = j < n_jobs ? jobs[j].n - head_from (&jobs[j]) : 0;

    if (j == n_jobs || (rows > 0 && run > 0 && from != run_from + run)) {
      DflTensor src = rows_of (&sc->h, run_from, run), dst = rows_of (&normed, h0, run);
      if (run > 0 && !dfl_op_rmsnorm (dev, &src, &m->norm, &dst, eps, error))
        return FALSE;
      h0 += run;
      run = 0;
    }
    if (rows > 0) {
      if (run == 0)
        run_from = from;
      run += rows;
    }
    if (j < n_jobs)
      r0 += jobs[j].n;
  }
  if (want_logits && !dfl_op_matmul (dev, &m->head, &normed, &logits, FALSE, error))
    return FALSE;

  /* the argmax over runs of jobs that ask for it (a row's is its own) */
  h0 = 0;
  for (int j = 0, run_from = 0, run = 0; j <= n_jobs; j++) {
    int rows = j < n_jobs ? jobs[j].n - head_from (&jobs[j]) : 0;
    gboolean asks = j < n_jobs && jobs[j].plan.argmax && rows > 0;

    if (run > 0 && (j == n_jobs || (rows > 0 && !asks))) {
      DflTensor l_rows = rows_of (&logits, run_from, run);
      DflTensor am = idx_out_tensor (sc, sc->argmax_at + sizeof (gint32) * run_from, DFL_DTYPE_I32,
                                 run);
      if (!dfl_op_argmax (dev, &l_rows, &am, error))
        return FALSE;
      run = 0;
    }
    if (asks) {
      if (run == 0)
        run_from = h0;
      run += rows;
    }
    h0 += rows;
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

/* What each sequence asked of the head, out of the scratch: the argmax,
 * and the normed rows and logits unless the pass wrote them in place. */
static gboolean
head_deliver (DflTargetBatchJob *jobs, int n_jobs, Scratch *sc, const PassMode *mode,
              GError **error)
{
  gboolean direct = head_direct (jobs, n_jobs, sc, mode);
  g_autofree gint32 *argmax = NULL;
  int h0 = 0, head_rows = 0;

  /* every argmax in one copy (each copy waits for the queue) */
  for (int j = 0; j < n_jobs; j++)
    head_rows += jobs[j].n - head_from (&jobs[j]);
  if (n_jobs > 1 && head_rows > 0) {
    argmax = g_new (gint32, head_rows);
    if (!dfl_device_download (sc->dev, sc->idx, sc->argmax_at, argmax,
                              sizeof (gint32) * head_rows, error))
      return FALSE;
  }
  for (int j = 0; j < n_jobs; j++) {
    DflForwardPlan *p = &jobs[j].plan;
    int rows = jobs[j].n - head_from (&jobs[j]);
    DflTensor n_rows, l_rows;

    if (rows == 0)
      continue;
    if (p->argmax && argmax)
      memcpy (p->argmax, argmax + h0, sizeof (gint32) * rows);
    else if (p->argmax
             && !dfl_device_download (sc->dev, sc->idx, sc->argmax_at + sizeof (gint32) * h0,
                                      p->argmax, sizeof (gint32) * rows, error))
      return FALSE;
    if (!direct) {
      n_rows = rows_of (&sc->normed, h0, rows);
      if (p->hidden && !deliver (sc, &n_rows, p->hidden, NULL, error))
        return FALSE;
      if (p->logits || p->d_logits) {
        l_rows = rows_of (&sc->logits, h0, rows);
        if (!deliver (sc, &l_rows, p->logits, p->d_logits, error))
          return FALSE;
      }
    }
    h0 += rows;
  }
  return TRUE;
}

/* Every op of a pass, in order: the embedding, the layers, the head. */
static gboolean
enqueue_pass (const DflTarget *t, DflTargetBatchJob *jobs, int n_jobs, Scratch *sc,
              int rows, int head_rows, gboolean want_logits, const PassMode *mode,
              GError **error)
{
  DflTensor ids = idx_tensor (sc, sc->ids_at, DFL_DTYPE_I32, rows);

  if (!dfl_op_embed (sc->dev, &t->model->embed, &ids, &sc->h, error))
    return FALSE;
  for (int li = 0; li < t->cfg.layers; li++)
    if (!layer_forward (t, &t->model->layers[li], li, jobs, n_jobs, sc, mode, error))
      return FALSE;
  return head_rows == 0
         || head_forward (t, jobs, n_jobs, sc, head_rows, want_logits, mode, error);
}

/* The rows through the head over every job, and whether their logits are
 * needed (asked for, or their argmax). */
static int
count_head_rows (DflTargetBatchJob *jobs, int n_jobs, gboolean *want_logits)
{
  int head_rows = 0;

  *want_logits = FALSE;
  for (int j = 0; j < n_jobs; j++) {
    const DflForwardPlan *p = &jobs[j].plan;
    int rows = jobs[j].n - head_from (&jobs[j]);
    head_rows += rows;
    if (rows > 0 && (p->logits || p->d_logits || p->argmax))
      *want_logits = TRUE;
  }
  return head_rows;
}

/* One pass launched op by op, in memory of its own. */
static gboolean
forward_direct (const DflTarget *t, DflTargetBatchJob *jobs, int n_jobs, GError **error)
{
  PassMode mode = { 0 };
  int rows = 0, tap_rows = 0, head_rows;
  gboolean want_logits, ok;
  Scratch sc;

  for (int j = 0; j < n_jobs; j++) {
    rows += jobs[j].n;
    tap_rows += jobs[j].n * taps_of (&jobs[j].plan);
  }
  head_rows = count_head_rows (jobs, n_jobs, &want_logits);
  mode.tables = uses_tables (t, n_jobs);
  if (!scratch_alloc (&sc, t, rows, head_rows, want_logits, tap_rows, 0, t->model->spare,
                      error))
    return FALSE;
  ok = scratch_fill (&sc, jobs, n_jobs, error)
       && enqueue_pass (t, jobs, n_jobs, &sc, rows, head_rows, want_logits, &mode, error)
       && head_deliver (jobs, n_jobs, &sc, &mode, error);
  /* a GPU reports a failure of the queued work here, before the memory
   * goes and the lengths move */
  ok = dfl_op_sync (sc.dev, ok ? error : NULL) && ok;
  scratch_clear (&sc, t->model->spare);
  return ok;
}

/* --- a pass as a graph --- */

/* Whether a pass of these jobs replays a graph: each job a decode or
 * verify step, several of them only over the table ops, and those that
 * tap asking for the same layers. */
static gboolean
graph_fits (const DflTarget *t, DflTargetBatchJob *jobs, int n_jobs)
{
  const DflTargetModel *m = t->model;
  const DflForwardPlan *tapping = NULL;
  int rows = 0;

  if (n_jobs > GRAPH_MAX_JOBS || g_atomic_int_get (&m->no_graphs)
      || !dfl_device_supports (m->device, DFL_OP_CAPTURE_BEGIN, DFL_DTYPE_F32)
      || (n_jobs > 1 && !uses_tables (t, n_jobs)))
    return FALSE;
  for (int j = 0; j < n_jobs; j++) {
    const DflForwardPlan *p = &jobs[j].plan;
    int nt = taps_of (p);
    if (jobs[j].n > DFL_TARGET_GRAPH_ROWS || nt > GRAPH_MAX_TAPS)
      return FALSE;
    if (nt > 0) {
      if (tapping && (nt != taps_of (tapping)
                      || memcmp (p->tap_layers, tapping->tap_layers, sizeof (int) * nt)))
        return FALSE;
      tapping = p;
    }
    rows += jobs[j].n;
  }
  return rows <= GRAPH_BATCH_ROWS;
}

/* The sequence's memory of a graphed pass, made for the most rows a graph
 * of one sequence takes, or `rows`, and `n_taps` taps a row (made again,
 * and its graphs dropped, where more are asked). */
static gboolean
graph_scratch_reserve (OpsSeq *s, int rows, int n_taps, GError **error)
{
  Scratch *sc = s->graph_scratch;
  int room = MAX (DFL_TARGET_GRAPH_ROWS, rows), kept;

  if (sc && sc->rows >= room && sc->kept_tap_rows >= sc->rows * n_taps)
    return TRUE;
  drop_graphs (s);
  if (sc) {
    /* as much as before at least, so two shapes do not take turns */
    n_taps = MAX (n_taps, sc->kept_tap_rows / sc->rows);
    room = MAX (room, sc->rows);
    /* the work queued may still read it */
    if (!dfl_op_sync (s->device, error))
      return FALSE;
    scratch_clear (sc, NULL);
  } else {
    sc = s->graph_scratch = g_new0 (Scratch, 1);
  }
  kept = room * n_taps;
  s->scratch_generation++;
  if (!scratch_alloc (sc, s->t, room, room, TRUE, kept, kept, NULL, error)) {
    g_clear_pointer (&s->graph_scratch, g_free);
    return FALSE;
  }
  if (kept > 0)
    sc->taps = act_tensor (sc, sc->taps_at, kept, s->t->cfg.hidden);
  return TRUE;
}

static gboolean
graph_key_equal (const GraphKey *a, const GraphKey *b)
{
  if (!(a->n_jobs == b->n_jobs && a->rows == b->rows && a->max_keys == b->max_keys
        && a->n_taps == b->n_taps && memcmp (a->taps, b->taps, sizeof (int) * a->n_taps) == 0
        && a->scratch_generation == b->scratch_generation))
    return FALSE;
  for (int j = 0; j < a->n_jobs; j++) {
    const GraphJob *x = &a->jobs[j], *y = &b->jobs[j];
    if (!(x->rows == y->rows && x->head_from == y->head_from && x->norm == y->norm
          && x->head == y->head && x->argmax == y->argmax && x->taps == y->taps
          && x->caches == y->caches))
      return FALSE;
  }
  return TRUE;
}

/* The kept graph of `key`, or NULL; the slot a new one takes. */
static OpsGraph *
graph_find (OpsSeq *s, const GraphKey *key, OpsGraph **free_slot)
{
  OpsGraph *slot = &s->graphs[0];

  for (int i = 0; i < GRAPH_SLOTS; i++) {
    OpsGraph *g = &s->graphs[i];
    if (g->graph && graph_key_equal (&g->key, key))
      return g;
    /* the least recently used, or an empty one */
    if (!g->graph || (slot->graph && g->used < slot->used))
      slot = g;
  }
  *free_slot = slot;
  return NULL;
}

/* The pass run directly (every scratch an op makes is made then, outside
 * a capture), then recorded into `slot`: the direct run gives this step's
 * outputs, the graph the next steps'. */
static gboolean
graph_capture (const DflTarget *t, DflTargetBatchJob *jobs, int n_jobs, Scratch *sc,
               const GraphKey *key, int head_rows, gboolean want_logits, const PassMode *mode,
               OpsGraph *slot, GError **error)
{
  DflDevice *dev = sc->dev;
  gboolean recorded;

  g_clear_pointer (&slot->graph, dfl_graph_free);
  if (!enqueue_pass (t, jobs, n_jobs, sc, key->rows, head_rows, want_logits, mode, error)
      || !dfl_op_capture_begin (dev, error))
    return FALSE;
  recorded = enqueue_pass (t, jobs, n_jobs, sc, key->rows, head_rows, want_logits, mode, error);
  /* the capture ends whatever happened inside it; a graph of a failed
   * recording is not kept */
  slot->graph = dfl_op_capture_end (dev, recorded ? error : NULL);
  if (!recorded) {
    g_clear_pointer (&slot->graph, dfl_graph_free);
    return FALSE;
  }
  if (!slot->graph)
    return FALSE;
  slot->key = *key;
  return TRUE;
}

/* What a graph of these jobs is made for. */
static void
graph_key_of (GraphKey *key, DflTargetBatchJob *jobs, int n_jobs, guint64 scratch_generation)
{
  int most = 0;

  memset (key, 0, sizeof *key);
  key->n_jobs = n_jobs;
  key->scratch_generation = scratch_generation;
  for (int j = 0; j < n_jobs; j++) {
    const DflForwardPlan *p = &jobs[j].plan;
    const OpsSeq *s = jobs[j].seq;
    GraphJob *gj = &key->jobs[j];
    int n = jobs[j].n, nt = taps_of (p);

    gj->rows = n;
    gj->head_from = head_from (&jobs[j]);
    gj->argmax = p->argmax != NULL;
    gj->head = p->argmax || p->logits || p->d_logits;
    gj->norm = gj->head || p->hidden;
    if (gj->head_from == n)
      gj->norm = gj->head = gj->argmax = FALSE;
    gj->taps = nt > 0;
    gj->caches = s->caches_id;
    if (nt > 0) {
      key->n_taps = nt;
      memcpy (key->taps, p->tap_layers, sizeof (int) * nt);
    }
    key->rows += n;
    most = MAX (most, s->len + n);
  }
  /* the keys held after this pass, rounded up (each sequence's attention
   * stops at its caches' room: keys_of; a row sees no key past its own
   * position) */
  key->max_keys = (most + DFL_TARGET_GRAPH_KEY_STEP - 1) / DFL_TARGET_GRAPH_KEY_STEP
                  * DFL_TARGET_GRAPH_KEY_STEP;
}

/* A pass of one sequence of ≤ DFL_TARGET_GRAPH_ROWS rows, or of several
 * such (graph_fits), as a replayed graph (captured where none fits) kept
 * by the first sequence, then what each asked for copied out of the
 * scratch. */
static gboolean
forward_graphed (const DflTarget *t, DflTargetBatchJob *jobs, int n_jobs, GError **error)
{
  OpsSeq *s = jobs[0].seq;
  int rows = 0, n_taps = 0, head_rows, t0 = 0;
  GraphKey key;
  PassMode mode = { 0 };
  OpsGraph *g, *slot = NULL;
  GError *launch_error = NULL;
  gboolean want_logits, ok = TRUE;
  Scratch *sc;

  for (int j = 0; j < n_jobs; j++) {
    rows += jobs[j].n;
    n_taps = MAX (n_taps, taps_of (&jobs[j].plan));
  }
  if (!graph_scratch_reserve (s, rows, n_taps, error))
    return FALSE;
  sc = s->graph_scratch;
  graph_key_of (&key, jobs, n_jobs, s->scratch_generation);
  head_rows = count_head_rows (jobs, n_jobs, &want_logits);
  mode.max_keys = key.max_keys;
  mode.in_scratch = TRUE;
  mode.tables = uses_tables (t, n_jobs);

  scratch_view (sc, &t->cfg, rows, head_rows);
  if (!scratch_fill (sc, jobs, n_jobs, error))
    return FALSE;
  if ((g = graph_find (s, &key, &slot))
      && !dfl_op_graph_launch (sc->dev, g->graph, &launch_error)) {
    if (!g_error_matches (launch_error, DFL_ERROR, DFL_ERROR_MISMATCH)) {
      g_propagate_error (error, launch_error);
      return FALSE;
    }
    /* a scratch of the device moved since the capture: capture again */
    g_clear_error (&launch_error);
    slot = g;
    g = NULL;
  }
  if (!g) {
    if (!graph_capture (t, jobs, n_jobs, sc, &key, head_rows, want_logits, &mode, slot, error))
      return FALSE;
    g = slot;
  }
  g->used = ++s->graph_clock;

  /* what the callers asked for, out of the scratch (each job's taps after
   * the ones before); a failure of the replay shows at the sync, before
   * the lengths move */
  for (int j = 0; ok && j < n_jobs; j++) {
    DflForwardPlan *p = &jobs[j].plan;
    int nt = taps_of (p);
    if (nt > 0) {
      DflTensor taps = rows_of (&sc->taps, t0, (gint64) jobs[j].n * nt);
      ok = deliver (sc, &taps, p->taps, p->d_taps, error);
      t0 += jobs[j].n * nt;
    }
  }
  ok = ok && head_deliver (jobs, n_jobs, sc, &mode, error);
  return dfl_op_sync (sc->dev, ok ? error : NULL) && ok;
}

/* --- the forward --- */

/* Rows [from, from + m) of `job` as a job of their own (one pass of a
 * forward cut in passes): its ids, its taps' rows, and the rows of the
 * head's outputs that fall in it. */
static DflTargetBatchJob
job_piece (const DflTarget *t, const DflTargetBatchJob *job, int from, int m)
{
  const DflForwardPlan *p = &job->plan;
  DflTargetBatchJob piece = *job;
  DflForwardPlan *q = &piece.plan;
  gsize hs = t->cfg.hidden, vocab = t->cfg.vocab, tap_row = (gsize) p->n_tap_layers * hs;
  int first = head_from (job), out_row;

  piece.ids = job->ids + from;
  piece.n = m;
  if (p->taps)
    q->taps = p->taps + (gsize) from * tap_row;
  if (p->d_taps)
    q->d_taps = p->d_taps + (gsize) from * tap_row;
  if (first >= from + m) {
    /* none of its rows goes through the head */
    q->logits_from = m;
    return piece;
  }
  q->logits_from = MAX (first - from, 0);
  /* the head's row of the piece's first such row */
  out_row = MAX (first, from) - first;
  if (p->logits)
    q->logits = p->logits + (gsize) out_row * vocab;
  if (p->d_logits)
    q->d_logits = p->d_logits + (gsize) out_row * vocab;
  if (p->argmax)
    q->argmax = p->argmax + out_row;
  if (p->hidden)
    q->hidden = p->hidden + (gsize) out_row * hs;
  return piece;
}

/* One pass over these jobs, the lengths moved after it. */
static gboolean
forward_pass (const DflTarget *t, DflTargetBatchJob *jobs, int n_jobs, GError **error)
{
  gboolean ok = graph_fits (t, jobs, n_jobs) ? forward_graphed (t, jobs, n_jobs, error)
      : forward_direct (t, jobs, n_jobs, error);

  if (!ok)
    return FALSE;
  for (int j = 0; j < n_jobs; j++)
    ((OpsSeq *) jobs[j].seq)->len += jobs[j].n;
  return TRUE;
}

/* The jobs in passes of at most `chunk` rows, in order: a pass takes the
 * rows left of the jobs in turn, a job's rows cut where a pass is full. */
static gboolean
forward_chunked (const DflTarget *t, DflTargetBatchJob *jobs, int n_jobs, int chunk,
                 GError **error)
{
  g_autofree DflTargetBatchJob *pass = g_new (DflTargetBatchJob, n_jobs);
  int j = 0, done = 0;   /* the job and its rows already run */

  while (j < n_jobs) {
    int room = chunk, n_pass = 0;
    while (j < n_jobs && room > 0) {
      int m = MIN (room, jobs[j].n - done);
      pass[n_pass++] = job_piece (t, &jobs[j], done, m);
      room -= m;
      done += m;
      if (done == jobs[j].n) {
        j++;
        done = 0;
      }
    }
    if (!forward_pass (t, pass, n_pass, error))
      return FALSE;
  }
  return TRUE;
}

gboolean
dfl_target_ops_forward (const DflTarget *t, DflTargetBatchJob *jobs, int n_jobs,
                        GError **error)
{
  g_autofree int *len = g_new (int, MAX (n_jobs, 1));
  int rows = 0, chunk = g_atomic_int_get (&t->model->chunk_rows);
  gboolean ok;

  for (int j = 0; j < n_jobs; j++) {
    OpsSeq *s = jobs[j].seq;
    len[j] = s->len;
    rows += jobs[j].n;
    if (!dfl_target_ops_seq_reserve (s, s->len + jobs[j].n, error))
      return FALSE;
  }
  if (rows == 0)
    return TRUE;
  ok = chunk > 0 && rows > chunk ? forward_chunked (t, jobs, n_jobs, chunk, error)
      : forward_pass (t, jobs, n_jobs, error);
  /* a failed pass leaves every sequence's length as it was before the
   * forward (the passes before it moved them) */
  if (!ok)
    for (int j = 0; j < n_jobs; j++)
      ((OpsSeq *) jobs[j].seq)->len = len[j];
  return ok;
}
