/* gst-dflash — the Qwen3 target on the CPU: load, forward, KV cache (the
 * host's engine behind target.h). */
#include "target-private.h"

#include <math.h>
#include <string.h>

#include "dfl-error.h"
#include "dfl-kernels.h"
#include "dfl-parallel.h"
#include "qwen3-weights.h"

#include <stdatomic.h>

typedef struct {
  union {
    struct { float *in_norm, *post_norm, *q_norm, *k_norm; };
    float *norms[DFL_QWEN3_N_NORMS];      /* in DflQwen3Norm's order */
  };
  union {
    /* read in place from the mapped file */
    struct { DflWeights q, k, v, o, gate, up, down; };
    DflWeights matrices[DFL_QWEN3_N_MATRICES];   /* in DflQwen3Matrix's order */
  };
  float *qkv_bias;     /* [q_dim + 2·kv_dim] or NULL */
  float *o_bias;       /* [hidden] or NULL */
} Layer;
G_STATIC_ASSERT (G_STRUCT_OFFSET (Layer, k_norm) == G_STRUCT_OFFSET (Layer, norms[DFL_QWEN3_K_NORM]));
G_STATIC_ASSERT (G_STRUCT_OFFSET (Layer, down) == G_STRUCT_OFFSET (Layer, matrices[DFL_QWEN3_DOWN]));

typedef struct {
  DflSafetensors *st;
  const DflStoredTensor *embed;   /* [vocab][hidden], rows converted as they are looked up */
  DflWeights head;          /* [vocab][hidden]; the embedding's when tied */
  float *norm;
  Layer *layers;
  int n_layers;
  float *inv_freq;
} CpuTarget;

typedef struct {
  int len;             /* first: the DflTargetSeqHead */
  const DflTarget *t;
  int n_layers;        /* kept so freeing needs nothing of the target */
  int cap;             /* positions the caches have room for */
  float **k, **v;      /* per layer [cap][kv_heads·head_dim] */
} CpuSeq;
G_STATIC_ASSERT (G_STRUCT_OFFSET (CpuSeq, len) == G_STRUCT_OFFSET (DflTargetSeqHead, len));

/* The engine of a host target, or NULL (a critical warning) for another. */
static const CpuTarget *
host_of (const DflTarget *t)
{
  g_return_val_if_fail (t->engine == &dfl_target_cpu_engine, NULL);
  return t->impl;
}

static void
weights_of (const DflStoredTensor *tensor, DflWeights *w)
{
  w->data = tensor->data;
  w->type = tensor->dtype == DFL_DTYPE_BF16 ? DFL_DTYPE_BF16
      : tensor->dtype == DFL_DTYPE_F16 ? DFL_DTYPE_F16 : DFL_DTYPE_F32;
  w->rows = tensor->shape[0];
  w->cols = tensor->shape[1];
}

/* A layer's norms as F32, its matrices where they lie in the mapped file;
 * returns the matrices' bytes. */
static guint64
take_layer (Layer *l, const DflQwen3LayerTensors *w, const DflQwen3Config *c)
{
  gint64 qd = (gint64) c->heads * c->head_dim, kd = (gint64) c->kv_heads * c->head_dim;
  guint64 bytes = 0;

  for (int i = 0; i < DFL_QWEN3_N_NORMS; i++)
    l->norms[i] = dfl_tensor_dup_f32 (w->norm[i]);
  for (int i = 0; i < DFL_QWEN3_N_MATRICES; i++) {
    weights_of (w->matrix[i], &l->matrices[i]);
    bytes += dfl_weights_bytes (&l->matrices[i]);
  }
  if (c->attention_bias) {
    g_autofree float *bq = dfl_tensor_dup_f32 (w->bias[DFL_QWEN3_Q]);
    g_autofree float *bk = dfl_tensor_dup_f32 (w->bias[DFL_QWEN3_K]);
    g_autofree float *bv = dfl_tensor_dup_f32 (w->bias[DFL_QWEN3_V]);
    l->o_bias = dfl_tensor_dup_f32 (w->bias[DFL_QWEN3_O]);
    /* one bias row laid out as the projections' joined output row */
    l->qkv_bias = g_new (float, qd + 2 * kd);
    memcpy (l->qkv_bias, bq, sizeof (float) * qd);
    memcpy (l->qkv_bias + qd, bk, sizeof (float) * kd);
    memcpy (l->qkv_bias + qd + kd, bv, sizeof (float) * kd);
  }
  return bytes;
}

/* Block-quantized tensors (a GGUF file's) only where the CPU multiplies
 * their type. */
static gboolean
check_types (const DflSafetensors *st, GError **error)
{
  g_autoptr (DflDevice) cpu = NULL;

  for (guint i = 0; i < dfl_safetensors_n_tensors (st); i++) {
    const DflStoredTensor *x = dfl_safetensors_nth (st, i);

    if (!dfl_dtype_is_quantized (x->dtype))
      continue;
    if (!cpu && !(cpu = dfl_device_open (DFL_BACKEND_CPU, 0, error)))
      return FALSE;
    if (!dfl_device_supports (cpu, DFL_OP_MATMUL, x->dtype)) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                   "%s: tensor '%s' is %s, a type the CPU back end does not multiply",
                   x->file, x->name, dfl_dtype_name (x->dtype));
      return FALSE;
    }
  }
  return TRUE;
}

DflTarget *
dfl_target_load (const char *path, GError **error)
{
  DflQwen3Config cfg;
  g_autoptr (DflTarget) t = NULL;
  g_autoptr (DflSafetensors) st = NULL;
  CpuTarget *ct;
  DflQwen3Tensors w;

  if (!(st = dfl_qwen3_checkpoint_open (path, &cfg, error)) || !check_types (st, error))
    return NULL;
  ct = g_new0 (CpuTarget, 1);
  t = dfl_target_wrap (&dfl_target_cpu_engine, NULL, &cfg, path, ct);
  ct->st = g_steal_pointer (&st);
  if (!dfl_qwen3_tensors_find (&w, ct->st, &cfg, error))
    return NULL;

  ct->embed = w.embed;
  ct->norm = dfl_tensor_dup_f32 (w.norm);
  weights_of (w.head, &ct->head);
  /* read per step: the head whole (tied or not), one embedding row */
  t->weight_bytes = dfl_weights_bytes (&ct->head)
      + (guint64) cfg.hidden * dfl_dtype_size (ct->embed->dtype);
  ct->layers = g_new0 (Layer, cfg.layers);
  ct->n_layers = cfg.layers;
  for (int i = 0; i < cfg.layers; i++)
    t->weight_bytes += take_layer (&ct->layers[i], &w.layers[i], &cfg);
  dfl_qwen3_tensors_clear (&w);

  ct->inv_freq = g_new (float, cfg.head_dim / 2);
  dfl_rope_inv_freq (ct->inv_freq, cfg.head_dim, cfg.rope_theta);
  return g_steal_pointer (&t);
}

static void
cpu_free (gpointer impl)
{
  CpuTarget *ct = impl;

  if (ct->layers) {
    for (int i = 0; i < ct->n_layers; i++) {
      Layer *l = &ct->layers[i];
      for (int j = 0; j < DFL_QWEN3_N_NORMS; j++)
        g_free (l->norms[j]);
      g_free (l->qkv_bias);
      g_free (l->o_bias);
    }
    g_free (ct->layers);
  }
  g_free (ct->norm);
  g_free (ct->inv_freq);
  g_clear_pointer (&ct->st, dfl_safetensors_free);
  g_free (ct);
}

const DflSafetensors *
dfl_target_tensors (const DflTarget *t)
{
  const CpuTarget *ct = host_of (t);

  return ct ? ct->st : NULL;
}

void
dfl_target_embed (const DflTarget *t, const int *ids, int n, float *out)
{
  const CpuTarget *ct = host_of (t);

  for (int i = 0; ct && i < n; i++)
    dfl_tensor_read_f32 (ct->embed, (gint64) ids[i] * t->cfg.hidden, t->cfg.hidden,
                         out + (gsize) i * t->cfg.hidden);
}

void
dfl_target_head (const DflTarget *t, const float *hidden, int rows, int width, float *out)
{
  const CpuTarget *ct = host_of (t);

  if (ct)
    dfl_matmul_w (&ct->head, hidden, rows, t->cfg.hidden, out, width, width, 0);
}

static void
cpu_tables (const DflTarget *t, DflTensor *embedding, DflTensor *head)
{
  const CpuTarget *ct = t->impl;

  *embedding = dfl_tensor_2d (NULL, (gpointer) ct->embed->data, 0, ct->embed->dtype,
                              t->cfg.vocab, t->cfg.hidden);
  *head = dfl_tensor_2d (NULL, (gpointer) ct->head.data, 0, ct->head.type, ct->head.rows,
                         ct->head.cols);
}

static gpointer
cpu_seq_new (const DflTarget *t)
{
  CpuSeq *s = g_new0 (CpuSeq, 1);

  s->t = t;
  s->n_layers = t->cfg.layers;
  s->k = g_new0 (float *, t->cfg.layers);
  s->v = g_new0 (float *, t->cfg.layers);
  return s;
}

static void
cpu_seq_free (gpointer seq)
{
  CpuSeq *s = seq;

  for (int i = 0; i < s->n_layers; i++) {
    g_free (s->k[i]);
    g_free (s->v[i]);
  }
  g_free (s->k);
  g_free (s->v);
  g_free (s);
}

/* Room in every layer's cache for `need` positions; grows by doubling so a
 * long generation reallocates a few times, not every step. */
static void
seq_reserve (CpuSeq *s, int need)
{
  const DflQwen3Config *c = &s->t->cfg;
  gsize row = (gsize) c->kv_heads * c->head_dim;
  int cap;

  if (need <= s->cap)
    return;
  cap = MAX (need, MAX (64, s->cap * 2));
  cap = MIN (cap, MAX (need, c->max_positions));
  for (int i = 0; i < c->layers; i++) {
    s->k[i] = g_renew (float, s->k[i], (gsize) cap * row);
    s->v[i] = g_renew (float, s->v[i], (gsize) cap * row);
  }
  s->cap = cap;
}

static gboolean
cpu_seq_reserve (gpointer seq, int positions, GError **error)
{
  seq_reserve (seq, positions);
  return TRUE;
}

/* The forward's element-wise steps between the products, shared out
 * between the kernels' threads (dfl-parallel.h) a row or a piece of a row
 * at a time: each piece is computed as it would be alone, so the numbers
 * do not depend on how many threads or rows there are. Left on one thread
 * they took about an eighth of a 6-row verification on two cores while
 * the second core waited. */
typedef struct {
  const DflQwen3Config *c;
  const float *inv_freq;
  const Layer *l;
  int step, n, pos0;
  float *h, *x, *qkv, *y, *gu, *kc, *vc;
  atomic_int next;
} RowsJob;

enum { STEP_IN_NORM, STEP_QK, STEP_POST_NORM, STEP_SILU };
#define SILU_PIECE 256

static void
rows_job (void *data, int slot)
{
  RowsJob *j = data;
  const DflQwen3Config *c = j->c;
  int hs = c->hidden, hd = c->head_dim, nh = c->heads, kv = c->kv_heads;
  int qd = nh * hd, kd = kv * hd, qkv_w = qd + 2 * kd, ffn = c->intermediate;
  int pieces = (ffn + SILU_PIECE - 1) / SILU_PIECE;
  int items = j->step == STEP_SILU ? j->n * pieces : j->n, i;

  (void) slot;
  while ((i = atomic_fetch_add_explicit (&j->next, 1, memory_order_relaxed)) < items) {
    switch (j->step) {
      case STEP_IN_NORM:
      case STEP_POST_NORM:
        dfl_rmsnorm_to (j->x + (gsize) i * hs, j->h + (gsize) i * hs, 1, hs,
                        j->step == STEP_IN_NORM ? j->l->in_norm : j->l->post_norm,
                        (float) c->rms_eps);
        break;
      case STEP_QK: {
        float *row = j->qkv + (gsize) i * qkv_w;
        if (j->l->qkv_bias)
          dfl_add (row, j->l->qkv_bias, qkv_w);
        /* q and k are normed per head before rope (Qwen3's q_norm/k_norm) */
        dfl_rmsnorm (row, nh, hd, j->l->q_norm, (float) c->rms_eps);
        dfl_rmsnorm (row + qd, kv, hd, j->l->k_norm, (float) c->rms_eps);
        dfl_rope (row, 1, nh, hd, j->inv_freq, j->pos0 + i);
        dfl_rope (row + qd, 1, kv, hd, j->inv_freq, j->pos0 + i);
        memcpy (j->kc + (gsize) i * kd, row + qd, sizeof (float) * kd);
        memcpy (j->vc + (gsize) i * kd, row + qd + kd, sizeof (float) * kd);
        memcpy (j->y + (gsize) i * qd, row, sizeof (float) * qd);
        break;
      }
      case STEP_SILU: {
        int r = i / pieces, from = (i % pieces) * SILU_PIECE;
        float *g = j->gu + (gsize) r * 2 * ffn;
        dfl_silu_mul (g + from, g + ffn + from, MIN (SILU_PIECE, ffn - from));
        break;
      }
      default:
        break;
    }
  }
}

static void
rows_step (RowsJob *j, int step)
{
  const DflQwen3Config *c = j->c;
  int items = step == STEP_SILU ? j->n * ((c->intermediate + SILU_PIECE - 1) / SILU_PIECE) : j->n;

  j->step = step;
  atomic_store_explicit (&j->next, 0, memory_order_relaxed);
  dfl_parallel_run (items > 1 ? dfl_parallel_threads () : 1, rows_job, j);
}

/* The head's logits of rows already normed: where the caller asked, or
 * (for the argmax alone) a buffer of its own; then each row's argmax. */
static void
head_rows (const DflTarget *t, const float *normed, int rows, DflForwardPlan *out)
{
  int vocab = t->cfg.vocab;
  g_autofree float *own = NULL;
  float *logits = out->logits;

  if (!logits && out->argmax)
    logits = own = g_new (float, (gsize) rows * vocab);
  if (logits)
    dfl_target_head (t, normed, rows, vocab, logits);
  for (int r = 0; out->argmax && r < rows; r++)
    out->argmax[r] = dfl_argmax (logits + (gsize) r * vocab, vocab);
}

static gboolean
cpu_forward (const DflTarget *t, gpointer seq, const int *ids, int n, DflForwardPlan *out,
             GError **error)
{
  const CpuTarget *ct = t->impl;
  const DflQwen3Config *c = &t->cfg;
  int hs = c->hidden, hd = c->head_dim, nh = c->heads, kv = c->kv_heads;
  int qd = nh * hd, kd = kv * hd, qkv_w = qd + 2 * kd, ffn = c->intermediate;
  CpuSeq *s = seq;
  int pos0 = s->len;
  g_autofree float *h = NULL, *x = NULL, *qkv = NULL, *y = NULL, *gu = NULL;

  seq_reserve (s, pos0 + n);
  h = g_new (float, (gsize) n * hs);
  x = g_new (float, (gsize) n * hs);
  qkv = g_new (float, (gsize) n * qkv_w);
  y = g_new (float, (gsize) n * qd);
  gu = g_new (float, (gsize) n * 2 * ffn);
  dfl_target_embed (t, ids, n, h);

  for (int li = 0; li < c->layers; li++) {
    const Layer *l = &ct->layers[li];
    float *kc = s->k[li] + (gsize) pos0 * kd, *vc = s->v[li] + (gsize) pos0 * kd;

    RowsJob job = { .c = c, .inv_freq = ct->inv_freq, .l = l, .n = n, .pos0 = pos0, .h = h, .x = x, .qkv = qkv, .y = y,
                    .gu = gu, .kc = kc, .vc = vc };

    rows_step (&job, STEP_IN_NORM);
    dfl_matmul_w (&l->q, x, n, hs, qkv, qkv_w, qd, 0);
    dfl_matmul_w (&l->k, x, n, hs, qkv + qd, qkv_w, kd, 0);
    dfl_matmul_w (&l->v, x, n, hs, qkv + qd + kd, qkv_w, kd, 0);
    rows_step (&job, STEP_QK);
    /* y holds the queries; attention writes its output over x's room */
    {
      g_autofree float *att = g_new (float, (gsize) n * qd);
      dfl_attention_causal (y, n, nh, kv, hd, s->k[li], s->v[li], pos0,
                            1.0f / sqrtf ((float) hd), att);
      dfl_matmul_w (&l->o, att, n, qd, h, hs, hs, 1);
    }
    if (l->o_bias)
      for (int r = 0; r < n; r++)
        dfl_add (h + (gsize) r * hs, l->o_bias, hs);

    rows_step (&job, STEP_POST_NORM);
    dfl_matmul_w (&l->gate, x, n, hs, gu, 2 * ffn, ffn, 0);
    dfl_matmul_w (&l->up, x, n, hs, gu + ffn, 2 * ffn, ffn, 0);
    rows_step (&job, STEP_SILU);
    /* down over the gate half of each row: the activations sit at stride 2·ffn */
    dfl_matmul_w (&l->down, gu, n, 2 * ffn, h, hs, hs, 1);

    for (int ti = 0; ti < out->n_tap_layers; ti++) {
      if (out->tap_layers[ti] != li || !out->taps)
        continue;
      for (int r = 0; r < n; r++)
        memcpy (out->taps + ((gsize) r * out->n_tap_layers + ti) * hs, h + (gsize) r * hs,
                sizeof (float) * hs);
    }
  }
  s->len = pos0 + n;

  if ((out->logits || out->argmax || out->hidden) && out->logits_from < n) {
    int from = MAX (out->logits_from, 0), rows = n - from;
    float *normed = out->hidden ? out->hidden : x;
    dfl_rmsnorm_to (normed, h + (gsize) from * hs, rows, hs, ct->norm, (float) c->rms_eps);
    head_rows (t, normed, rows, out);
  }
  return TRUE;
}

const DflTargetEngine dfl_target_cpu_engine = {
  .backend = DFL_BACKEND_CPU,
  .host_taps = TRUE,
  .free = cpu_free,
  .tables = cpu_tables,
  .seq_new = cpu_seq_new,
  .seq_free = cpu_seq_free,
  .seq_reserve = cpu_seq_reserve,
  .forward = cpu_forward,
};
