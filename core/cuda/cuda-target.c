/* gst-dflash — the Qwen3 target on a CUDA device: weights on the card, a KV
 * cache per sequence, the forward pass as launches of kernels/cuda (the
 * engine behind target.h for backend=cuda). */
#include "cuda-target.h"

#include <math.h>
#include <string.h>

#include "dfl-cuda.h"
#include "dfl-error.h"
#include "dfl-kernels.h"
#include "qwen3-weights.h"
#include "safetensors.h"

/* The head runs over at most this many rows at a time, so a prefill that
 * asks for every row's logits needs scratch for only this many rows of the
 * vocabulary. */
#define HEAD_ROWS 64
#define DEFAULT_CHUNK_ROWS 512

/* Forwards of at most GRAPH_MAX_ROWS rows (decode and verify steps) replay
 * a CUDA graph of the pass: a step of a small model costs its hundreds of
 * launches more than its bytes. Such a pass writes its K/V rows to a
 * scratch and copies them into the cache at the position read on the
 * device, and its attention covers keys up to the next multiple of
 * GRAPH_KEY_STEP (attention's output does not depend on that bound), so
 * one graph serves every step of a sequence until the context passes the
 * next multiple, the cache moves, or the rows or outputs asked for change.
 * Each sequence keeps its GRAPH_SLOTS most recently used graphs. */
#define GRAPH_MAX_ROWS 32
#define GRAPH_KEY_STEP 1024
#define GRAPH_SLOTS 8
#define GRAPH_MAX_TAPS 16

typedef struct {
  union {
    struct { float *in_norm, *post_norm, *q_norm, *k_norm; };   /* F32 [hidden] or [head_dim] */
    float *norms[DFL_QWEN3_N_NORMS];                 /* in DflQwen3Norm's order */
  };
  union {
    struct { DflCudaWeights q, k, v, o, gate, up, down; };
    DflCudaWeights matrices[DFL_QWEN3_N_MATRICES];   /* in DflQwen3Matrix's order */
  };
} Layer;
G_STATIC_ASSERT (G_STRUCT_OFFSET (Layer, k_norm) == G_STRUCT_OFFSET (Layer, norms[DFL_QWEN3_K_NORM]));
G_STATIC_ASSERT (G_STRUCT_OFFSET (Layer, down) == G_STRUCT_OFFSET (Layer, matrices[DFL_QWEN3_DOWN]));

/* Work space of a forward pass, sized for `rows` rows of one chunk. */
typedef struct {
  int rows;
  float *h;            /* [rows][hidden]: the residual stream */
  float *x;            /* [rows][hidden]: normed rows */
  float *q;            /* [rows][heads·head_dim] */
  float *att;          /* [rows][heads·head_dim] */
  float *gate, *up;    /* [rows][intermediate] each, so silu_mul is one launch */
  void *rounded;       /* x rounded to 16 bits for the tensor cores */
  float *logits;       /* [MIN (rows, HEAD_ROWS)][vocab] when the caller keeps none */
  int32_t *argmax;     /* [HEAD_ROWS] */
  void *io;            /* what a chunk uploads: Io, then ids, lo, hi [rows] each */
  /* a graphed pass's K and V rows before they go into the cache,
   * [MIN (rows, GRAPH_MAX_ROWS)][kv_heads·head_dim] each */
  float *k_new, *v_new;
  /* a graphed pass's taps, [GRAPH_MAX_ROWS][taps_width] */
  float *taps;
  size_t taps_width;
} Scratch;

/* What a captured pass was made for: replayed only for the same. */
typedef struct {
  int rows, max_keys, logits_from;
  gboolean norm, head, argmax;       /* the final norm; the head; its argmax */
  int n_taps, taps[GRAPH_MAX_TAPS];
  const float *k, *v;                /* the caches it writes, and their room */
  int cap;
  guint64 scratch_generation, attention_generation;
} GraphKey;

typedef struct {
  GraphKey key;
  DflCudaGraph *graph;
  guint64 used;
} TargetGraph;

/* The head of the uploaded block; the position is read by rope on the card. */
typedef struct {
  int64_t pos0;
} Io;

typedef struct _CudaTarget CudaTarget;
typedef struct _CudaTargetSeq CudaTargetSeq;

struct _CudaTarget {
  DflCudaDevice *dev;
  DflQwen3Config cfg;
  char *origin;             /* the checkpoint folder, for messages */
  GPtrArray *allocations;   /* every weight buffer on the card, freed together */
  DflCudaWeights embed;     /* [vocab][hidden] */
  DflCudaWeights head;      /* [vocab][hidden]; the embedding's memory when tied */
  float *norm;
  float *inv_freq;          /* [head_dim / 2] */
  Layer *layers;
  guint64 weight_bytes;

  GMutex lock;              /* one forward at a time: they share the scratch */
  int chunk_rows;
  Scratch scratch;
  guint64 scratch_generation;   /* bumped when the scratch is made again */
  void *host_io;            /* the host side of scratch.io */
  gboolean use_graph;
};

struct _CudaTargetSeq {
  int len;        /* first: the DflTargetSeqHead */
  CudaTarget *t;
  int cap;        /* positions the caches have room for */
  float *k, *v;   /* [layers][cap][kv_heads·head_dim] */
  TargetGraph graphs[GRAPH_SLOTS];
  guint64 graph_clock;
};
G_STATIC_ASSERT (G_STRUCT_OFFSET (CudaTargetSeq, len) == G_STRUCT_OFFSET (DflTargetSeqHead, len));

static void cuda_target_free (CudaTarget *t);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (CudaTarget, cuda_target_free)

static void *
card_alloc (CudaTarget *t, size_t bytes, GError **error)
{
  void *d = dfl_cuda_alloc (t->dev, bytes, error);

  if (d)
    g_ptr_array_add (t->allocations, d);
  return d;
}

static size_t
weights_bytes (const DflCudaWeights *w)
{
  return (size_t) w->rows * w->cols * dfl_dtype_size (w->type);
}

static float *
upload_f32 (CudaTarget *t, const float *src, size_t n, GError **error)
{
  float *d = card_alloc (t, n * sizeof (float), error);

  if (d && !dfl_cuda_upload (t->dev, d, src, n * sizeof (float), error))
    return NULL;
  return d;
}

/* --- from a loaded CPU target --- */

static float *
upload_vector (CudaTarget *t, const DflStoredTensor *tensor, GError **error)
{
  g_autofree float *host = dfl_tensor_dup_f32 (tensor);

  return upload_f32 (t, host, tensor->n_elements, error);
}

static gboolean
upload_matrix (CudaTarget *t, const DflStoredTensor *tensor, DflTargetWeights as,
               DflCudaWeights *w, GError **error)
{
  void *d;

  w->rows = tensor->shape[0];
  w->cols = tensor->shape[1];
  if (as == DFL_TARGET_F32 && tensor->dtype != DFL_DTYPE_F32) {
    /* widened on the host, exactly as the CPU kernels widen each row */
    g_autofree float *host = dfl_tensor_dup_f32 (tensor);
    w->type = DFL_DTYPE_F32;
    if (!(d = upload_f32 (t, host, (size_t) w->rows * w->cols, error)))
      return FALSE;
  } else {
    w->type = tensor->dtype == DFL_DTYPE_BF16 ? DFL_DTYPE_BF16
        : tensor->dtype == DFL_DTYPE_F16 ? DFL_DTYPE_F16 : DFL_DTYPE_F32;
    if (!(d = card_alloc (t, tensor->n_bytes, error))
        || !dfl_cuda_upload (t->dev, d, tensor->data, tensor->n_bytes, error))
      return FALSE;
  }
  w->d_data = d;
  t->weight_bytes += weights_bytes (w);
  return TRUE;
}

static gboolean
upload_layer (CudaTarget *t, const DflQwen3LayerTensors *w, int i, DflTargetWeights as,
              GError **error)
{
  Layer *l = &t->layers[i];

  for (int n = 0; n < DFL_QWEN3_N_NORMS; n++)
    if (!(l->norms[n] = upload_vector (t, w->norm[n], error)))
      return FALSE;
  for (int m = 0; m < DFL_QWEN3_N_MATRICES; m++)
    if (!upload_matrix (t, w->matrix[m], as, &l->matrices[m], error))
      return FALSE;
  return TRUE;
}

static CudaTarget *
target_alloc (DflCudaDevice *dev, const DflQwen3Config *c, const char *origin)
{
  CudaTarget *t = g_new0 (CudaTarget, 1);

  t->dev = dfl_cuda_device_ref (dev);
  t->cfg = *c;
  t->origin = g_strdup (origin);
  t->allocations = g_ptr_array_new ();
  t->layers = g_new0 (Layer, c->layers);
  t->chunk_rows = DEFAULT_CHUNK_ROWS;
  t->use_graph = TRUE;
  g_mutex_init (&t->lock);
  return t;
}

/* What the CUDA path does not run, said before anything is uploaded. */
static gboolean
check_supported (const DflQwen3Config *c, const char *origin, GError **error)
{
  if (c->attention_bias) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                 "%s: attention_bias is true; the CUDA target runs Qwen3 without biases",
                 origin);
    return FALSE;
  }
  if (c->head_dim % 2 != 0) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                 "%s: head_dim %d is odd; rope needs pairs", origin, c->head_dim);
    return FALSE;
  }
  return TRUE;
}

static gboolean
upload_inv_freq (CudaTarget *t, GError **error)
{
  int half = t->cfg.head_dim / 2;
  g_autofree float *host = g_new (float, half);

  dfl_rope_inv_freq (host, t->cfg.head_dim, t->cfg.rope_theta);
  return (t->inv_freq = upload_f32 (t, host, half, error)) != NULL;
}

static CudaTarget *
cuda_target_new (DflCudaDevice *dev, const DflTarget *cpu, DflTargetWeights as,
                 GError **error)
{
  const DflQwen3Config *c = dfl_target_config (cpu);
  g_autoptr (CudaTarget) t = NULL;
  DflQwen3Tensors w;
  gboolean ok;

  if (!check_supported (c, dfl_target_dir (cpu), error)
      || !dfl_qwen3_tensors_find (&w, dfl_target_tensors (cpu), c, error))
    return NULL;
  t = target_alloc (dev, c, dfl_target_dir (cpu));

  /* the embedding is gathered, never multiplied, unless it is also the head */
  ok = upload_matrix (t, w.embed, as, &t->embed, error)
       && (t->norm = upload_vector (t, w.norm, error));
  /* read per step: the head whole (tied or not), one embedding row */
  t->weight_bytes -= weights_bytes (&t->embed);
  if (c->tie_word_embeddings) {
    t->head = t->embed;
    t->weight_bytes += weights_bytes (&t->head);
  } else {
    ok = ok && upload_matrix (t, w.head, as, &t->head, error);
  }
  t->weight_bytes += (guint64) c->hidden * dfl_dtype_size (t->embed.type);

  for (int i = 0; ok && i < c->layers; i++)
    ok = upload_layer (t, &w.layers[i], i, as, error);
  dfl_qwen3_tensors_clear (&w);
  if (!ok || !upload_inv_freq (t, error))
    return NULL;
  return g_steal_pointer (&t);
}

/* --- random weights made on the card --- */

static gboolean
random_matrix (CudaTarget *t, int rows, int cols, DflDtype type, float scale,
               guint64 seed, DflCudaWeights *w, GError **error)
{
  size_t n = (size_t) rows * cols;
  void *d = card_alloc (t, n * dfl_dtype_size (type), error);

  if (!d)
    return FALSE;
  dfl_cuda_fill_random (t->dev, d, type, n, seed, scale);
  w->d_data = d;
  w->type = type;
  w->rows = rows;
  w->cols = cols;
  t->weight_bytes += weights_bytes (w);
  return TRUE;
}

static CudaTarget *
cuda_target_new_random (DflCudaDevice *dev, const DflQwen3Config *c, DflDtype type,
                        guint64 seed, GError **error)
{
  g_autoptr (CudaTarget) t = NULL;
  int hs = c->hidden;
  int width = MAX (hs, c->head_dim);
  g_autofree float *ones = g_new (float, width);
  float *d_ones;
  guint64 stream = seed * 1000003u;   /* each matrix its own stream of the hash */

  if (!check_supported (c, "random target", error))
    return NULL;
  t = target_alloc (dev, c, "random target");
  for (int i = 0; i < width; i++)
    ones[i] = 1.0f;
  /* every norm is one: they share one vector */
  if (!(d_ones = upload_f32 (t, ones, width, error)))
    return NULL;
  t->norm = d_ones;

  if (!random_matrix (t, c->vocab, hs, type, 1.0f, stream++, &t->embed, error))
    return NULL;
  t->weight_bytes -= weights_bytes (&t->embed);
  if (c->tie_word_embeddings) {
    t->head = t->embed;
    t->weight_bytes += weights_bytes (&t->head);
  } else if (!random_matrix (t, c->vocab, hs, type, 1.0f / sqrtf (hs), stream++, &t->head,
                             error)) {
    return NULL;
  }
  t->weight_bytes += (guint64) hs * dfl_dtype_size (type);

  for (int i = 0; i < c->layers; i++) {
    Layer *l = &t->layers[i];
    for (int n = 0; n < DFL_QWEN3_N_NORMS; n++)
      l->norms[n] = d_ones;
    for (int m = 0; m < DFL_QWEN3_N_MATRICES; m++) {
      gint64 rows, cols;
      dfl_qwen3_matrix_shape (c, m, &rows, &cols);
      /* uniform in ±1/sqrt(fan_in) */
      if (!random_matrix (t, rows, cols, type, 1.0f / sqrtf (cols), stream++,
                          &l->matrices[m], error))
        return NULL;
    }
  }
  if (!upload_inv_freq (t, error) || !dfl_cuda_sync (t->dev, error))
    return NULL;
  return g_steal_pointer (&t);
}

static void
scratch_release (CudaTarget *t)
{
  Scratch *s = &t->scratch;
  void *bufs[] = { s->h, s->x, s->q, s->att, s->gate, s->up, s->rounded, s->logits,
                   s->argmax, s->io, s->k_new, s->v_new, s->taps };

  for (guint i = 0; i < G_N_ELEMENTS (bufs); i++)
    dfl_cuda_free (t->dev, bufs[i]);
  memset (s, 0, sizeof *s);
  g_clear_pointer (&t->host_io, g_free);
  t->scratch_generation++;
}

static void
cuda_target_free (CudaTarget *t)
{
  if (!t)
    return;
  scratch_release (t);
  for (guint i = 0; i < t->allocations->len; i++)
    dfl_cuda_free (t->dev, t->allocations->pdata[i]);
  g_ptr_array_unref (t->allocations);
  g_free (t->layers);
  g_free (t->origin);
  g_mutex_clear (&t->lock);
  dfl_cuda_device_unref (t->dev);
  g_free (t);
}

/* A weight matrix on the card as a tensor of the target's device. */
static DflTensor
weights_tensor (DflDevice *device, const DflCudaWeights *w)
{
  return dfl_tensor_2d (device, (gpointer) w->d_data, 0, w->type, w->rows, w->cols);
}

static void
cuda_target_tables (const DflTarget *target, DflTensor *embedding, DflTensor *head)
{
  const CudaTarget *t = target->impl;

  *embedding = weights_tensor (target->device, &t->embed);
  *head = weights_tensor (target->device, &t->head);
}

static void
cuda_target_set_use_graph (gpointer impl, gboolean use_graph)
{
  CudaTarget *t = impl;

  g_mutex_lock (&t->lock);
  t->use_graph = use_graph;
  g_mutex_unlock (&t->lock);
}

static void
cuda_target_set_chunk_rows (gpointer impl, int rows)
{
  CudaTarget *t = impl;

  g_mutex_lock (&t->lock);
  t->chunk_rows = rows;
  g_mutex_unlock (&t->lock);
}

/* --- scratch --- */

static size_t
io_bytes (int rows)
{
  return sizeof (Io) + 3 * sizeof (int32_t) * rows;
}

static int32_t *
io_ids (void *io)
{
  return (int32_t *) ((char *) io + sizeof (Io));
}

static gboolean
scratch_reserve (CudaTarget *t, int rows, GError **error)
{
  const DflQwen3Config *c = &t->cfg;
  Scratch *s = &t->scratch;
  size_t hs = c->hidden, qd = (size_t) c->heads * c->head_dim, ffn = c->intermediate;
  size_t widest = MAX (hs, MAX (qd, ffn));
  int head_rows;

  if (rows <= s->rows)
    return TRUE;
  /* grow in powers of two up to the chunk, so decode → verify → prefill
   * reallocate a few times, not every step */
  rows = MIN (MAX (rows, (int) MIN (2 * (gint64) s->rows, t->chunk_rows)), t->chunk_rows);
  head_rows = MIN (rows, HEAD_ROWS);
  scratch_release (t);
  if (!(s->h = dfl_cuda_alloc (t->dev, rows * hs * sizeof (float), error))
      || !(s->x = dfl_cuda_alloc (t->dev, rows * hs * sizeof (float), error))
      || !(s->q = dfl_cuda_alloc (t->dev, rows * qd * sizeof (float), error))
      || !(s->att = dfl_cuda_alloc (t->dev, rows * qd * sizeof (float), error))
      || !(s->gate = dfl_cuda_alloc (t->dev, rows * ffn * sizeof (float), error))
      || !(s->up = dfl_cuda_alloc (t->dev, rows * ffn * sizeof (float), error))
      || !(s->rounded = dfl_cuda_alloc (t->dev, rows * widest * 2, error))
      || !(s->logits = dfl_cuda_alloc (t->dev, (size_t) head_rows * c->vocab * sizeof (float),
                                       error))
      || !(s->argmax = dfl_cuda_alloc (t->dev, HEAD_ROWS * sizeof (int32_t), error))
      || !(s->io = dfl_cuda_alloc (t->dev, io_bytes (rows), error))
      || !(s->k_new = dfl_cuda_alloc (t->dev, (size_t) MIN (rows, GRAPH_MAX_ROWS) * c->kv_heads
                                      * c->head_dim * sizeof (float), error))
      || !(s->v_new = dfl_cuda_alloc (t->dev, (size_t) MIN (rows, GRAPH_MAX_ROWS) * c->kv_heads
                                      * c->head_dim * sizeof (float), error))) {
    scratch_release (t);
    return FALSE;
  }
  t->host_io = g_malloc (io_bytes (rows));
  s->rows = rows;
  return TRUE;
}

/* --- sequences --- */

static gpointer
cuda_target_seq_new (const DflTarget *target)
{
  CudaTargetSeq *s = g_new0 (CudaTargetSeq, 1);

  s->t = target->impl;
  return s;
}

static void
cuda_target_seq_free (gpointer seq)
{
  CudaTargetSeq *s = seq;

  for (int i = 0; i < GRAPH_SLOTS; i++)
    dfl_cuda_graph_free (s->graphs[i].graph);
  dfl_cuda_free (s->t->dev, s->k);
  dfl_cuda_free (s->t->dev, s->v);
  g_free (s);
}

/* One of K or V moved into a cache of `cap` positions, each layer's held
 * rows to the start of its new room. */
static float *
cache_move (CudaTargetSeq *s, float *old, int cap, GError **error)
{
  const DflQwen3Config *c = &s->t->cfg;
  size_t row = (size_t) c->kv_heads * c->head_dim * sizeof (float);
  char *d = dfl_cuda_alloc (s->t->dev, (size_t) c->layers * cap * row, error);

  for (int li = 0; d && old && li < c->layers; li++)
    dfl_cuda_copy_d2d (s->t->dev, d + (size_t) li * cap * row,
                       (char *) old + (size_t) li * s->cap * row, s->len * row);
  return (float *) d;
}

static gboolean
cuda_target_seq_reserve (gpointer seq, int positions, GError **error)
{
  CudaTargetSeq *s = seq;
  const DflQwen3Config *c = &s->t->cfg;
  float *k, *v;
  int cap;

  if (positions <= s->cap)
    return TRUE;
  if (positions > c->max_positions) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT,
                 "a cache of %d positions passes the context of %s "
                 "(max_position_embeddings %d)", positions, s->t->origin, c->max_positions);
    return FALSE;
  }
  cap = MIN (MAX (positions, MAX (64, 2 * s->cap)), c->max_positions);
  if (!(k = cache_move (s, s->k, cap, error)))
    return FALSE;
  if (!(v = cache_move (s, s->v, cap, error))) {
    dfl_cuda_free (s->t->dev, k);
    return FALSE;
  }
  /* the copies out of the old caches end before those are freed */
  if (s->len > 0 && !dfl_cuda_sync (s->t->dev, error)) {
    dfl_cuda_free (s->t->dev, k);
    dfl_cuda_free (s->t->dev, v);
    return FALSE;
  }
  dfl_cuda_free (s->t->dev, s->k);
  dfl_cuda_free (s->t->dev, s->v);
  s->k = k;
  s->v = v;
  s->cap = cap;
  return TRUE;
}

/* --- the forward pass --- */

/* The logits rows of one chunk, [from, from + rows) of the forward, normed
 * in scratch.x: the head in blocks of HEAD_ROWS, each block's argmax and
 * requested host copies brought back at once. */
static gboolean
head_rows (CudaTarget *t, DflForwardPlan *out, int first, int rows, GError **error)
{
  const DflQwen3Config *c = &t->cfg;
  Scratch *s = &t->scratch;
  int block = MIN (HEAD_ROWS, s->rows);

  for (int b = 0; b < rows; b += block) {
    int m = MIN (block, rows - b);
    size_t row0 = (size_t) first + b;   /* row of the caller's arrays */
    float *dst = out->d_logits ? out->d_logits + row0 * c->vocab : s->logits;

    dfl_cuda_matmul (t->dev, &t->head, s->x + (size_t) b * c->hidden, m, c->hidden, dst,
                     c->vocab, c->vocab, FALSE, s->rounded);
    if (out->argmax) {
      dfl_cuda_argmax (t->dev, dst, m, c->vocab, c->vocab, s->argmax);
      if (!dfl_cuda_download (t->dev, out->argmax + row0, s->argmax, m * sizeof (int32_t),
                              error))
        return FALSE;
    }
    if (out->logits
        && !dfl_cuda_download (t->dev, out->logits + row0 * c->vocab, dst,
                               (size_t) m * c->vocab * sizeof (float), error))
      return FALSE;
  }
  return TRUE;
}

/* The launches of one chunk: `m` rows of the forward starting at row `r0`,
 * at cache position `pos`, its ids and key ranges already uploaded. Direct
 * (`graph` NULL): K and V go straight into their cache rows, attention
 * covers the keys held, taps and logits go where `out` says. For a graph
 * (`graph` the key it is captured for): nothing that changes from step to
 * step is written into a launch: K and V go through the scratch into the
 * cache at the position read on the device, attention covers
 * graph->max_keys, taps and logits stay in the scratch (copied out after
 * the replay, in forward_graphed). */
static void
enqueue_chunk (CudaTarget *t, CudaTargetSeq *seq, int r0, int m, int pos,
               DflForwardPlan *out, const GraphKey *graph)
{
  const DflQwen3Config *c = &t->cfg;
  Scratch *s = &t->scratch;
  DflCudaDevice *dev = t->dev;
  int hs = c->hidden, hd = c->head_dim, nh = c->heads, kv = c->kv_heads;
  int qd = nh * hd, kd = kv * hd, ffn = c->intermediate;
  float eps = (float) c->rms_eps, scale = 1.0f / sqrtf ((float) hd);
  const int64_t *d_pos = s->io;
  const int32_t *d_ids = io_ids (s->io), *d_lo = d_ids + m, *d_hi = d_lo + m;
  int max_keys = graph ? graph->max_keys : pos + m;
  const int *tap_layers = graph ? graph->taps : out->tap_layers;
  int n_taps = graph ? graph->n_taps : (out->d_taps ? out->n_tap_layers : 0);
  float *taps = graph ? s->taps : out->d_taps + (size_t) r0 * n_taps * hs;

  dfl_cuda_embed (dev, t->embed.d_data, t->embed.type, hs, d_ids, m, s->h);
  for (int li = 0; li < c->layers; li++) {
    const Layer *l = &t->layers[li];
    float *k_layer = seq->k + (size_t) li * seq->cap * kd;
    float *v_layer = seq->v + (size_t) li * seq->cap * kd;
    float *kc = graph ? s->k_new : k_layer + (size_t) pos * kd;
    float *vc = graph ? s->v_new : v_layer + (size_t) pos * kd;

    dfl_cuda_rmsnorm (dev, s->x, s->h, m, hs, l->in_norm, eps);
    dfl_cuda_matmul (dev, &l->q, s->x, m, hs, s->q, qd, qd, FALSE, s->rounded);
    dfl_cuda_matmul (dev, &l->k, s->x, m, hs, kc, kd, kd, FALSE, s->rounded);
    dfl_cuda_matmul (dev, &l->v, s->x, m, hs, vc, kd, kd, FALSE, s->rounded);
    /* q and k are normed per head before rope (Qwen3's q_norm/k_norm) */
    dfl_cuda_rmsnorm (dev, s->q, s->q, m * nh, hd, l->q_norm, eps);
    dfl_cuda_rmsnorm (dev, kc, kc, m * kv, hd, l->k_norm, eps);
    dfl_cuda_rope (dev, s->q, m, nh, hd, t->inv_freq, d_pos);
    dfl_cuda_rope (dev, kc, m, kv, hd, t->inv_freq, d_pos);
    if (graph) {
      dfl_cuda_copy_rows_at (dev, k_layer, kd, d_pos, kc, m);
      dfl_cuda_copy_rows_at (dev, v_layer, kd, d_pos, vc, m);
    }
    dfl_cuda_attention (dev, s->q, m, nh, kv, hd, k_layer, v_layer, kd, d_lo, d_hi, max_keys,
                        scale, s->att);
    dfl_cuda_matmul (dev, &l->o, s->att, m, qd, s->h, hs, hs, TRUE, s->rounded);

    dfl_cuda_rmsnorm (dev, s->x, s->h, m, hs, l->post_norm, eps);
    dfl_cuda_matmul (dev, &l->gate, s->x, m, hs, s->gate, ffn, ffn, FALSE, s->rounded);
    dfl_cuda_matmul (dev, &l->up, s->x, m, hs, s->up, ffn, ffn, FALSE, s->rounded);
    dfl_cuda_silu_mul (dev, s->gate, s->up, (size_t) m * ffn);
    dfl_cuda_matmul (dev, &l->down, s->gate, m, ffn, s->h, hs, hs, TRUE, s->rounded);

    for (int ti = 0; ti < n_taps; ti++)
      if (tap_layers[ti] == li) {
        size_t pitch = (size_t) n_taps * hs * sizeof (float);
        dfl_cuda_copy_2d (dev, taps + (size_t) ti * hs, pitch, s->h, hs * sizeof (float),
                          hs * sizeof (float), m);
      }
  }
  /* a graph's rows that give logits, normed and through the head into the
   * scratch (a direct pass does this in head_rows, as the caller asks) */
  if (graph && graph->norm && graph->logits_from < m) {
    int first = graph->logits_from, rows = m - first;
    dfl_cuda_rmsnorm (dev, s->x, s->h + (size_t) first * hs, rows, hs, t->norm, eps);
    if (graph->head)
      dfl_cuda_matmul (dev, &t->head, s->x, rows, hs, s->logits, c->vocab, c->vocab, FALSE,
                       s->rounded);
    if (graph->argmax)
      dfl_cuda_argmax (dev, s->logits, rows, c->vocab, c->vocab, s->argmax);
  }
}

/* The ids, the position and each row's causal key range of a chunk: the
 * pass's only upload. */
static gboolean
upload_io (CudaTarget *t, const int *ids, int r0, int m, int pos, GError **error)
{
  Io *io = t->host_io;
  int32_t *h_ids = io_ids (t->host_io), *h_lo = h_ids + m, *h_hi = h_lo + m;

  io->pos0 = pos;
  for (int i = 0; i < m; i++) {
    h_ids[i] = ids[r0 + i];
    h_lo[i] = 0;
    h_hi[i] = pos + i + 1;
  }
  return dfl_cuda_upload (t->dev, t->scratch.io, t->host_io, io_bytes (m), error);
}

/* One chunk, launched directly: `m` rows of the forward starting at row
 * `r0`, at cache position `pos` (= the forward's first position + r0). */
static gboolean
forward_chunk (CudaTarget *t, CudaTargetSeq *seq, const int *ids, int r0, int m, int pos,
               DflForwardPlan *out, GError **error)
{
  const DflQwen3Config *c = &t->cfg;
  Scratch *s = &t->scratch;
  int hs = c->hidden, from = MAX (out->logits_from, 0);

  if (!upload_io (t, ids, r0, m, pos, error))
    return FALSE;
  enqueue_chunk (t, seq, r0, m, pos, out, NULL);

  /* this chunk's rows that give logits: [first, r0 + m) of the forward */
  if (out->d_logits || out->logits || out->argmax || out->hidden) {
    int first = MAX (from, r0), rows = r0 + m - first;
    if (rows > 0) {
      dfl_cuda_rmsnorm (t->dev, s->x, s->h + (size_t) (first - r0) * hs, rows, hs, t->norm,
                        (float) c->rms_eps);
      if (out->hidden
          && !dfl_cuda_download (t->dev, out->hidden + (size_t) (first - from) * hs, s->x,
                                 (size_t) rows * hs * sizeof (float), error))
        return FALSE;
      if ((out->d_logits || out->logits || out->argmax)
          && !head_rows (t, out, first - from, rows, error))
        return FALSE;
    }
  }
  return TRUE;
}

/* --- the forward as a graph --- */

static gboolean
graph_key_equal (const GraphKey *a, const GraphKey *b)
{
  return a->rows == b->rows && a->max_keys == b->max_keys && a->logits_from == b->logits_from
         && a->norm == b->norm && a->head == b->head && a->argmax == b->argmax
         && a->n_taps == b->n_taps
         && memcmp (a->taps, b->taps, sizeof (int) * a->n_taps) == 0 && a->k == b->k
         && a->v == b->v && a->cap == b->cap && a->scratch_generation == b->scratch_generation
         && a->attention_generation == b->attention_generation;
}

/* Whether `n` rows with `out` can go as one graphed pass. */
static gboolean
graph_fits (CudaTarget *t, int n, const DflForwardPlan *out)
{
  return t->use_graph && n <= GRAPH_MAX_ROWS && n <= t->chunk_rows
         && (!out->d_taps || out->n_tap_layers <= GRAPH_MAX_TAPS);
}

/* The graph of `key` for this sequence: one kept, or captured now into the
 * least recently used slot. */
static DflCudaGraph *
graph_for (CudaTarget *t, CudaTargetSeq *seq, const GraphKey *key, int pos,
           DflForwardPlan *out, GError **error)
{
  TargetGraph *slot = &seq->graphs[0];

  for (int i = 0; i < GRAPH_SLOTS; i++) {
    TargetGraph *g = &seq->graphs[i];
    if (g->graph && graph_key_equal (&g->key, key)) {
      g->used = ++seq->graph_clock;
      return g->graph;
    }
    if (!g->graph || g->used < slot->used)
      slot = g;
  }
  g_clear_pointer (&slot->graph, dfl_cuda_graph_free);
  if (!dfl_cuda_capture_begin (t->dev, error))
    return NULL;
  enqueue_chunk (t, seq, 0, key->rows, pos, out, key);
  if (!(slot->graph = dfl_cuda_capture_end (t->dev, error)))
    return NULL;
  slot->key = *key;
  slot->used = ++seq->graph_clock;
  return slot->graph;
}

/* The whole forward of `n` ≤ GRAPH_MAX_ROWS rows as one replayed graph,
 * then what `out` asks for copied out of the scratch. */
static gboolean
forward_graphed (CudaTarget *t, CudaTargetSeq *seq, const int *ids, int n,
                 DflForwardPlan *out, GError **error)
{
  const DflQwen3Config *c = &t->cfg;
  Scratch *s = &t->scratch;
  DflCudaDevice *dev = t->dev;
  int pos = seq->len, hs = c->hidden, from = MAX (out->logits_from, 0);
  int rows = n - from;
  GraphKey key = { 0 };
  DflCudaGraph *graph;

  key.rows = n;
  key.logits_from = MIN (from, n);
  key.argmax = out->argmax != NULL;
  key.head = out->argmax || out->logits || out->d_logits;
  key.norm = key.head || out->hidden;
  key.n_taps = out->d_taps ? out->n_tap_layers : 0;
  memcpy (key.taps, out->tap_layers, sizeof (int) * key.n_taps);
  /* the keys held after this pass, rounded up; never past the cache's room
   * (a row sees no key past its own position) */
  key.max_keys = MIN ((pos + n + GRAPH_KEY_STEP - 1) / GRAPH_KEY_STEP * GRAPH_KEY_STEP,
                      seq->cap);
  key.k = seq->k;
  key.v = seq->v;
  key.cap = seq->cap;

  /* room first: nothing may grow inside a capture */
  if (key.n_taps && s->taps_width < (size_t) key.n_taps * hs) {
    dfl_cuda_free (dev, s->taps);
    s->taps_width = 0;
    if (!(s->taps = dfl_cuda_alloc (dev, (size_t) GRAPH_MAX_ROWS * key.n_taps * hs
                                    * sizeof (float), error)))
      return FALSE;
    s->taps_width = (size_t) key.n_taps * hs;
    t->scratch_generation++;
  }
  if (!dfl_cuda_attention_reserve (dev, n, c->heads, c->head_dim, key.max_keys, error))
    return FALSE;
  key.scratch_generation = t->scratch_generation;
  key.attention_generation = dfl_cuda_attention_scratch_generation (dev);

  if (!upload_io (t, ids, 0, n, pos, error)
      || !(graph = graph_for (t, seq, &key, pos, out, error)))
    return FALSE;
  dfl_cuda_graph_launch (dev, graph);

  /* what the caller asked for, out of the scratch */
  if (key.n_taps)
    dfl_cuda_copy_2d (dev, out->d_taps, (size_t) key.n_taps * hs * sizeof (float), s->taps,
                      s->taps_width * sizeof (float), (size_t) key.n_taps * hs * sizeof (float),
                      n);
  if (rows > 0) {
    if (out->d_logits)
      dfl_cuda_copy_d2d (dev, out->d_logits, s->logits, (size_t) rows * c->vocab * sizeof (float));
    if ((out->argmax
         && !dfl_cuda_download (dev, out->argmax, s->argmax, rows * sizeof (int32_t), error))
        || (out->logits
            && !dfl_cuda_download (dev, out->logits, s->logits,
                                   (size_t) rows * c->vocab * sizeof (float), error))
        || (out->hidden
            && !dfl_cuda_download (dev, out->hidden, s->x, (size_t) rows * hs * sizeof (float),
                                   error)))
      return FALSE;
  }
  return dfl_cuda_check (dev, "the target's graphed forward", error);
}

/* The forward once its arguments are checked, the target and the device held. */
static gboolean
forward_locked (CudaTarget *t, CudaTargetSeq *s, const int *ids, int n,
                DflForwardPlan *out, GError **error)
{
  int pos0 = s->len, chunk;

  if (!cuda_target_seq_reserve (s, pos0 + n, error)
      || !scratch_reserve (t, MIN (n, t->chunk_rows), error))
    return FALSE;
  if (graph_fits (t, n, out)) {
    if (!forward_graphed (t, s, ids, n, out, error))
      return FALSE;
    goto done;
  }
  chunk = MIN (t->scratch.rows, t->chunk_rows);
  for (int r0 = 0; r0 < n; r0 += chunk) {
    int m = MIN (chunk, n - r0);
    if (!forward_chunk (t, s, ids, r0, m, pos0 + r0, out, error))
      return FALSE;
  }
done:
  /* a fault anywhere in the pass shows here; only then does the cache grow */
  if (!dfl_cuda_sync (t->dev, error))
    return FALSE;
  s->len = pos0 + n;
  return TRUE;
}

/* The forward, its arguments checked by target.c. */
static gboolean
cuda_target_forward (const DflTarget *target, gpointer seq, const int *ids, int n,
                     DflForwardPlan *out, GError **error)
{
  /* the scratch the forwards share is behind the target's lock */
  CudaTarget *t = target->impl;
  CudaTargetSeq *s = seq;
  g_autoptr (GMutexLocker) locker = NULL;
  gboolean ok;

  locker = g_mutex_locker_new (&t->lock);
  /* the pass is the stream's from its first launch to the argmax back */
  dfl_cuda_device_lock (t->dev);
  ok = forward_locked (t, s, ids, n, out, error);
  dfl_cuda_device_unlock (t->dev);
  return ok;
}

/* --- the engine --- */

static DflTarget *
target_wrap (DflDevice *device, CudaTarget *t)
{
  DflTarget *target;

  if (!t)
    return NULL;
  target = dfl_target_wrap (&dfl_cuda_target_engine, device, &t->cfg, t->origin, t);
  target->weight_bytes = t->weight_bytes;
  return target;
}

static DflTarget *
cuda_target_upload (const DflTarget *host, DflDevice *device, DflTargetWeights as,
                    GError **error)
{
  return target_wrap (device, cuda_target_new (dfl_device_native (device), host, as, error));
}

static DflTarget *
cuda_target_random (DflDevice *device, const DflQwen3Config *c, DflDtype type, guint64 seed,
                    GError **error)
{
  return target_wrap (device, cuda_target_new_random (dfl_device_native (device), c, type, seed,
                                                      error));
}

static void
cuda_target_release (gpointer impl)
{
  cuda_target_free (impl);
}

const DflTargetEngine dfl_cuda_target_engine = {
  .backend = DFL_BACKEND_CUDA,
  .host_taps = FALSE,
  .upload = cuda_target_upload,
  .new_random = cuda_target_random,
  .free = cuda_target_release,
  .tables = cuda_target_tables,
  .set_use_graph = cuda_target_set_use_graph,
  .set_chunk_rows = cuda_target_set_chunk_rows,
  .seq_new = cuda_target_seq_new,
  .seq_free = cuda_target_seq_free,
  .seq_reserve = cuda_target_seq_reserve,
  .forward = cuda_target_forward,
};
