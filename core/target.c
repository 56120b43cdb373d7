/* gst-dflash — the Qwen3 target on the CPU: load, forward, KV cache. */
#include "target.h"

#include <math.h>
#include <string.h>

#include "dfl-error.h"
#include "dfl-kernels.h"
#include "dfl-parallel.h"

#include <stdatomic.h>

typedef struct {
  float *in_norm, *post_norm, *q_norm, *k_norm;
  DflWeights q, k, v, o, gate, up, down;   /* read in place from the mapped file */
  float *qkv_bias;     /* [q_dim + 2·kv_dim] or NULL */
  float *o_bias;       /* [hidden] or NULL */
} Layer;

struct _DflTarget {
  char *dir;
  DflQwen3Config cfg;
  DflSafetensors *st;
  const DflStoredTensor *embed;   /* [vocab][hidden], rows converted as they are looked up */
  DflWeights head;          /* [vocab][hidden]; the embedding's when tied */
  float *norm;
  Layer *layers;
  float *inv_freq;
  guint64 weight_bytes;
  gint64 n_params;
};

struct _DflTargetSeq {
  const DflTarget *t;
  int n_layers;        /* kept so freeing needs nothing of the target */
  int len;
  int cap;             /* positions the caches have room for */
  float **k, **v;      /* per layer [cap][kv_heads·head_dim] */
};

static const DflStoredTensor *
expect (DflTarget *t, const char *name, guint n_dims, gint64 d0, gint64 d1, GError **error)
{
  gint64 shape[2] = { d0, d1 };
  const DflStoredTensor *tensor = dfl_safetensors_expect (t->st, name, n_dims, shape, error);

  if (tensor)
    t->n_params += tensor->n_elements;
  return tensor;
}

/* A vector (a norm, a bias) as F32. */
static float *
take_vector (DflTarget *t, const char *name, gint64 n, GError **error)
{
  const DflStoredTensor *tensor = expect (t, name, 1, n, 0, error);

  return tensor ? dfl_tensor_dup_f32 (tensor) : NULL;
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

/* A matrix, used where it lies in the mapped file. */
static gboolean
take_matrix (DflTarget *t, const char *name, gint64 rows, gint64 cols, DflWeights *w, GError **error)
{
  const DflStoredTensor *tensor = expect (t, name, 2, rows, cols, error);

  if (!tensor)
    return FALSE;
  weights_of (tensor, w);
  t->weight_bytes += dfl_weights_bytes (w);
  return TRUE;
}

static gboolean
load_layer (DflTarget *t, int i, Layer *l, GError **error)
{
  const DflQwen3Config *c = &t->cfg;
  gint64 hs = c->hidden, qd = (gint64) c->heads * c->head_dim, kd = (gint64) c->kv_heads * c->head_dim;
  g_autofree char *p = g_strdup_printf ("model.layers.%d.", i);

  g_autofree char *q = g_strconcat (p, "self_attn.q_proj.weight", NULL);
  g_autofree char *k = g_strconcat (p, "self_attn.k_proj.weight", NULL);
  g_autofree char *v = g_strconcat (p, "self_attn.v_proj.weight", NULL);
  g_autofree char *o = g_strconcat (p, "self_attn.o_proj.weight", NULL);
  g_autofree char *gate = g_strconcat (p, "mlp.gate_proj.weight", NULL);
  g_autofree char *up = g_strconcat (p, "mlp.up_proj.weight", NULL);
  g_autofree char *down = g_strconcat (p, "mlp.down_proj.weight", NULL);
  g_autofree char *in_norm = g_strconcat (p, "input_layernorm.weight", NULL);
  g_autofree char *post_norm = g_strconcat (p, "post_attention_layernorm.weight", NULL);
  g_autofree char *q_norm = g_strconcat (p, "self_attn.q_norm.weight", NULL);
  g_autofree char *k_norm = g_strconcat (p, "self_attn.k_norm.weight", NULL);


  if (!(l->in_norm = take_vector (t, in_norm, hs, error))
      || !(l->post_norm = take_vector (t, post_norm, hs, error))
      || !(l->q_norm = take_vector (t, q_norm, c->head_dim, error))
      || !(l->k_norm = take_vector (t, k_norm, c->head_dim, error))
      || !take_matrix (t, q, qd, hs, &l->q, error)
      || !take_matrix (t, k, kd, hs, &l->k, error)
      || !take_matrix (t, v, kd, hs, &l->v, error)
      || !take_matrix (t, o, hs, qd, &l->o, error)
      || !take_matrix (t, gate, c->intermediate, hs, &l->gate, error)
      || !take_matrix (t, up, c->intermediate, hs, &l->up, error)
      || !take_matrix (t, down, hs, c->intermediate, &l->down, error))
    return FALSE;

  if (c->attention_bias) {
    g_autofree char *qb = g_strconcat (p, "self_attn.q_proj.bias", NULL);
    g_autofree char *kb = g_strconcat (p, "self_attn.k_proj.bias", NULL);
    g_autofree char *vb = g_strconcat (p, "self_attn.v_proj.bias", NULL);
    g_autofree char *ob = g_strconcat (p, "self_attn.o_proj.bias", NULL);
    g_autofree float *bq = NULL, *bk = NULL, *bv = NULL;
    if (!(bq = take_vector (t, qb, qd, error)) || !(bk = take_vector (t, kb, kd, error))
        || !(bv = take_vector (t, vb, kd, error)) || !(l->o_bias = take_vector (t, ob, hs, error)))
      return FALSE;
    /* one bias row laid out as the projections' joined output row */
    l->qkv_bias = g_new (float, qd + 2 * kd);
    memcpy (l->qkv_bias, bq, sizeof (float) * qd);
    memcpy (l->qkv_bias + qd, bk, sizeof (float) * kd);
    memcpy (l->qkv_bias + qd + kd, bv, sizeof (float) * kd);
  }
  return TRUE;
}

DflTarget *
dfl_target_load (const char *dir, GError **error)
{
  g_autoptr (DflTarget) t = g_new0 (DflTarget, 1);
  const DflQwen3Config *c = &t->cfg;

  t->dir = g_strdup (dir);
  if (!dfl_qwen3_config_load (&t->cfg, dir, error))
    return NULL;
  if (!(t->st = dfl_safetensors_open (dir, error)))
    return NULL;

  if (!(t->embed = expect (t, "model.embed_tokens.weight", 2, c->vocab, c->hidden, error))
      || !(t->norm = take_vector (t, "model.norm.weight", c->hidden, error)))
    return NULL;
  if (c->tie_word_embeddings)
    weights_of (t->embed, &t->head);
  else if (!take_matrix (t, "lm_head.weight", c->vocab, c->hidden, &t->head, error))
    return NULL;
  /* the head is read whole every step, tied or not; one embedding row too */
  if (c->tie_word_embeddings)
    t->weight_bytes += dfl_weights_bytes (&t->head);
  t->weight_bytes += (guint64) c->hidden * dfl_dtype_size (t->embed->dtype);

  t->layers = g_new0 (Layer, c->layers);
  for (int i = 0; i < c->layers; i++)
    if (!load_layer (t, i, &t->layers[i], error))
      return NULL;

  t->inv_freq = g_new (float, c->head_dim / 2);
  dfl_rope_inv_freq (t->inv_freq, c->head_dim, c->rope_theta);
  return g_steal_pointer (&t);
}

void
dfl_target_free (DflTarget *t)
{
  if (!t)
    return;
  if (t->layers) {
    for (int i = 0; i < t->cfg.layers; i++) {
      Layer *l = &t->layers[i];
      g_free (l->in_norm);
      g_free (l->post_norm);
      g_free (l->q_norm);
      g_free (l->k_norm);
      g_free (l->qkv_bias);
      g_free (l->o_bias);
    }
    g_free (t->layers);
  }
  g_free (t->norm);
  g_free (t->inv_freq);
  g_clear_pointer (&t->st, dfl_safetensors_free);
  g_free (t->dir);
  g_free (t);
}

const DflQwen3Config *
dfl_target_config (const DflTarget *t)
{
  return &t->cfg;
}

const char *
dfl_target_dir (const DflTarget *t)
{
  return t->dir;
}

const DflSafetensors *
dfl_target_tensors (const DflTarget *t)
{
  return t->st;
}

guint64
dfl_target_weight_bytes (const DflTarget *t)
{
  return t->weight_bytes;
}

gint64
dfl_target_n_params (const DflTarget *t)
{
  return t->n_params;
}

void
dfl_target_embed (const DflTarget *t, const int *ids, int n, float *out)
{
  for (int i = 0; i < n; i++)
    dfl_tensor_read_f32 (t->embed, (gint64) ids[i] * t->cfg.hidden, t->cfg.hidden,
                         out + (gsize) i * t->cfg.hidden);
}

void
dfl_target_head (const DflTarget *t, const float *hidden, int rows, int width, float *out)
{
  dfl_matmul_w (&t->head, hidden, rows, t->cfg.hidden, out, width, width, 0);
}

DflTargetSeq *
dfl_target_seq_new (const DflTarget *t)
{
  DflTargetSeq *s = g_new0 (DflTargetSeq, 1);

  s->t = t;
  s->n_layers = t->cfg.layers;
  s->k = g_new0 (float *, t->cfg.layers);
  s->v = g_new0 (float *, t->cfg.layers);
  return s;
}

void
dfl_target_seq_free (DflTargetSeq *s)
{
  if (!s)
    return;
  for (int i = 0; i < s->n_layers; i++) {
    g_free (s->k[i]);
    g_free (s->v[i]);
  }
  g_free (s->k);
  g_free (s->v);
  g_free (s);
}

int
dfl_target_seq_length (const DflTargetSeq *s)
{
  return s->len;
}

void
dfl_target_seq_truncate (DflTargetSeq *s, int pos)
{
  g_return_if_fail (pos >= 0 && pos <= s->len);
  s->len = pos;
}

/* Room in every layer's cache for `need` positions; grows by doubling so a
 * long generation reallocates a few times, not every step. */
static void
seq_reserve (DflTargetSeq *s, int need)
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

/* The forward's element-wise steps between the products, shared out
 * between the kernels' threads (dfl-parallel.h) a row or a piece of a row
 * at a time: each piece is computed as it would be alone, so the numbers
 * do not depend on how many threads or rows there are. Left on one thread
 * they took about an eighth of a 6-row verification on two cores while
 * the second core waited. */
typedef struct {
  const DflTarget *t;
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
  const DflQwen3Config *c = &j->t->cfg;
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
        dfl_rope (row, 1, nh, hd, j->t->inv_freq, j->pos0 + i);
        dfl_rope (row + qd, 1, kv, hd, j->t->inv_freq, j->pos0 + i);
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
  const DflQwen3Config *c = &j->t->cfg;
  int items = step == STEP_SILU ? j->n * ((c->intermediate + SILU_PIECE - 1) / SILU_PIECE) : j->n;

  j->step = step;
  atomic_store_explicit (&j->next, 0, memory_order_relaxed);
  dfl_parallel_run (items > 1 ? dfl_parallel_threads () : 1, rows_job, j);
}

gboolean
dfl_target_forward (const DflTarget *t, DflTargetSeq *s, const int *ids, int n,
                    DflForwardOut *out, GError **error)
{
  const DflQwen3Config *c = &t->cfg;
  int hs = c->hidden, hd = c->head_dim, nh = c->heads, kv = c->kv_heads;
  int qd = nh * hd, kd = kv * hd, qkv_w = qd + 2 * kd, ffn = c->intermediate;
  int pos0 = s->len;
  DflForwardOut none = { 0 };
  g_autofree float *h = NULL, *x = NULL, *qkv = NULL, *y = NULL, *gu = NULL;

  if (!out)
    out = &none;
  if (n <= 0)
    return TRUE;
  for (int i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= c->vocab) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                   "token id %d is outside the vocabulary of %s (0 … %d)",
                   ids[i], t->dir, c->vocab - 1);
      return FALSE;
    }
  if ((gint64) pos0 + n > c->max_positions) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT,
                 "%d tokens at position %d pass the context of %s: max_position_embeddings "
                 "is %d, so positions 0 … %d", n, pos0, t->dir, c->max_positions,
                 c->max_positions - 1);
    return FALSE;
  }
  for (int i = 0; i < out->n_tap_layers; i++)
    if (out->tap_layers[i] < 0 || out->tap_layers[i] >= c->layers) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                   "tap layer %d is outside the %d layers of %s",
                   out->tap_layers[i], c->layers, t->dir);
      return FALSE;
    }

  seq_reserve (s, pos0 + n);
  h = g_new (float, (gsize) n * hs);
  x = g_new (float, (gsize) n * hs);
  qkv = g_new (float, (gsize) n * qkv_w);
  y = g_new (float, (gsize) n * qd);
  gu = g_new (float, (gsize) n * 2 * ffn);
  dfl_target_embed (t, ids, n, h);

  for (int li = 0; li < c->layers; li++) {
    const Layer *l = &t->layers[li];
    float *kc = s->k[li] + (gsize) pos0 * kd, *vc = s->v[li] + (gsize) pos0 * kd;

    RowsJob job = { .t = t, .l = l, .n = n, .pos0 = pos0, .h = h, .x = x, .qkv = qkv, .y = y,
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

  if ((out->logits || out->hidden) && out->logits_from < n) {
    int from = MAX (out->logits_from, 0), rows = n - from;
    float *normed = out->hidden ? out->hidden : x;
    dfl_rmsnorm_to (normed, h + (gsize) from * hs, rows, hs, t->norm, (float) c->rms_eps);
    if (out->logits)
      dfl_target_head (t, normed, rows, c->vocab, out->logits);
  }
  return TRUE;
}
