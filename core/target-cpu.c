/* gst-dflash — the Qwen3 target on the host: the checkpoint mapped in
 * place and described as tensors for the forward written over the ops
 * (target-forward.c), which the CPU's ops run (the host's engine behind
 * target.h). */
#include "target-forward.h"

#include <string.h>

#include "dfl-error.h"
#include "dfl-kernels.h"
#include "qwen3-weights.h"
#include "weight-arena.h"

typedef struct {
  union {
    struct { float *in_norm, *post_norm, *q_norm, *k_norm; };
    float *norms[DFL_QWEN3_N_NORMS];      /* in DflQwen3Norm's order */
  };
  union {
    /* in the target's arenas, or still in the file (weights_of) */
    struct { DflWeights q, k, v, o, gate, up, down; };
    DflWeights matrices[DFL_QWEN3_N_MATRICES];   /* in DflQwen3Matrix's order */
  };
  float *bias[DFL_QWEN3_N_BIASES];   /* q, k, v, o: [out] or NULL (attention_bias) */
} Layer;
G_STATIC_ASSERT (G_STRUCT_OFFSET (Layer, k_norm) == G_STRUCT_OFFSET (Layer, norms[DFL_QWEN3_K_NORM]));
G_STATIC_ASSERT (G_STRUCT_OFFSET (Layer, down) == G_STRUCT_OFFSET (Layer, matrices[DFL_QWEN3_DOWN]));

typedef struct {
  DflSafetensors *st;
  /* the matrices the products read, in huge pages (weight-arena.c):
   * block-quantized ones laid out for the SIMD products where the CPU has
   * them, at load (`packed`); the others as stored, copied from the file
   * when the first forward on the CPU needs them (`stored`, made once
   * under `resident`), so that a target that runs on a card holds no
   * second copy of them in host memory */
  DflWeightArena *packed, *stored;
  gsize resident;
  /* the stored matrices' descriptions and their weights, for that copy */
  GPtrArray *in_file;   /* DflStoredTensor * */
  GPtrArray *in_file_w; /* DflWeights * */
  /* [vocab][hidden], rows converted as they are looked up: the file's
   * tensor, read from the head's copy where that is the same table as
   * stored (tied) */
  DflStoredTensor embed;
  DflWeights head;          /* [vocab][hidden]; the embedding's when tied */
  float *norm;
  Layer *layers;
  int n_layers;
  float *inv_freq;
  /* the same weights as tensors of host memory, run by the CPU's ops */
  DflTargetModel model;
} CpuTarget;

/* The engine of a host target, or NULL (a critical warning) for another. */
static const CpuTarget *
host_of (const DflTarget *t)
{
  g_return_val_if_fail (t->engine == &dfl_target_cpu_engine, NULL);
  return t->impl;
}

/* The SIMD products' layout of a block-quantized matrix (quant-packed.c):
 * its bytes, or 0 where the CPU has no such products for its type. */
static gsize
packed_bytes (const DflStoredTensor *tensor)
{
  if (!dfl_kernels_cpu_has (DFL_KERNELS_AVX2))
    return 0;
  return dfl_quant_packed_bytes (tensor->dtype, (int) tensor->shape[0], (int) tensor->shape[1]);
}

/* Bytes a matrix takes in the arena made at load: its packed layout, or
 * none (it stays in the file until the first forward). */
static gsize
arena_bytes (const DflStoredTensor *tensor)
{
  gsize packed = packed_bytes (tensor);

  return packed ? dfl_weight_arena_piece (packed) : 0;
}

static void
weights_of (const DflStoredTensor *tensor, CpuTarget *ct, DflWeights *w)
{
  gsize packed = packed_bytes (tensor);

  w->type = tensor->dtype;
  w->rows = tensor->shape[0];
  w->cols = tensor->shape[1];
  w->data = tensor->data;
  w->packed = NULL;
  /* Block-quantized: laid out for the SIMD products (AVX2 and AVX-512
   * VNNI), which a decode step reads at about the memory's rate where the
   * file's blocks, read in place, cost 1.2 to 2 times as much
   * (kernels/cpu/quant-packed.c); the products read the copy alone, so
   * the file's pages go back (a tied embedding's rows, looked up a token
   * at a time, fault single pages back in). Q6_K, the float types and a
   * CPU without AVX2: the stored bytes, in the file until the first
   * forward copies them (ensure_resident). */
  if (packed) {
    w->packed = dfl_weight_arena_take (ct->packed, packed);
    dfl_quant_pack_into (w, (gpointer) w->packed);
    dfl_tensor_release_pages (tensor);
  } else {
    g_ptr_array_add (ct->in_file, (gpointer) tensor);
    g_ptr_array_add (ct->in_file_w, w);
  }
}

/* A layer's norms as F32, its matrices where they lie in the mapped file;
 * returns the matrices' bytes. */
static guint64
take_layer (Layer *l, const DflQwen3LayerTensors *w, const DflQwen3Config *c, CpuTarget *ct)
{
  guint64 bytes = 0;

  for (int i = 0; i < DFL_QWEN3_N_NORMS; i++)
    l->norms[i] = dfl_tensor_dup_f32 (w->norm[i]);
  for (int i = 0; i < DFL_QWEN3_N_MATRICES; i++) {
    weights_of (w->matrix[i], ct, &l->matrices[i]);
    bytes += dfl_weights_bytes (&l->matrices[i]);
  }
  if (c->attention_bias)
    for (int i = 0; i < DFL_QWEN3_N_BIASES; i++)
      l->bias[i] = dfl_tensor_dup_f32 (w->bias[i]);
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

static DflTensor
host_vector (const float *data, gint64 n)
{
  return dfl_tensor_2d (NULL, (gpointer) data, 0, DFL_DTYPE_F32, 1, n);
}

static DflTensor
host_matrix (const DflWeights *w)
{
  DflTensor t = dfl_tensor_2d (NULL, (gpointer) w->data, 0, w->type, w->rows, w->cols);

  t.packed = w->packed;
  return t;
}

/* The model's tensors of the embedding and the matrices, where they lie
 * now. */
static void
point_matrices (CpuTarget *ct)
{
  DflTargetModel *m = &ct->model;

  m->embed.handle = (gpointer) ct->embed.data;
  m->head = host_matrix (&ct->head);
  for (int i = 0; i < ct->n_layers; i++) {
    const Layer *l = &ct->layers[i];
    DflTargetLayer *ml = &m->layers[i];
    ml->q = host_matrix (&l->q);
    ml->k = host_matrix (&l->k);
    ml->v = host_matrix (&l->v);
    ml->o = host_matrix (&l->o);
    ml->gate = host_matrix (&l->gate);
    ml->up = host_matrix (&l->up);
    ml->down = host_matrix (&l->down);
  }
}

/* The weights as the forward over the ops reads them: tensors of the host
 * memory they lie in, run by the CPU's device. */
static gboolean
describe_model (CpuTarget *ct, const DflQwen3Config *c, GError **error)
{
  DflTargetModel *m = &ct->model;

  if (!(m->device = dfl_device_open (DFL_BACKEND_CPU, -1, error)))
    return FALSE;
  m->embed = dfl_tensor_2d (NULL, (gpointer) ct->embed.data, 0, ct->embed.dtype, c->vocab,
                            c->hidden);
  m->head = host_matrix (&ct->head);
  m->norm = host_vector (ct->norm, c->hidden);
  m->inv_freq = host_vector (ct->inv_freq, c->head_dim / 2);
  m->layers = g_new0 (DflTargetLayer, ct->n_layers);
  /* BF16 beside quantized matrices, whose products take int8 inputs
   * (their first: a file's layers are quantized alike) */
  m->kv_type = dfl_target_kv_type_for (
      m->device, ct->n_layers > 0 && dfl_dtype_is_quantized (ct->layers[0].q.type));
  for (int i = 0; i < ct->n_layers; i++) {
    const Layer *l = &ct->layers[i];
    DflTargetLayer *ml = &m->layers[i];
    gint64 qd = (gint64) c->heads * c->head_dim, kd = (gint64) c->kv_heads * c->head_dim;

    ml->in_norm = host_vector (l->in_norm, c->hidden);
    ml->post_norm = host_vector (l->post_norm, c->hidden);
    ml->q_norm = host_vector (l->q_norm, c->head_dim);
    ml->k_norm = host_vector (l->k_norm, c->head_dim);
    ml->has_bias = l->bias[DFL_QWEN3_Q] != NULL;
    if (ml->has_bias) {
      ml->q_bias = host_vector (l->bias[DFL_QWEN3_Q], qd);
      ml->k_bias = host_vector (l->bias[DFL_QWEN3_K], kd);
      ml->v_bias = host_vector (l->bias[DFL_QWEN3_V], kd);
      ml->o_bias = host_vector (l->bias[DFL_QWEN3_O], c->hidden);
    }
  }
  point_matrices (ct);
  return TRUE;
}

/* The stored matrices copied from the file into the second arena, once,
 * before the first forward on the CPU reads them (every reader of the
 * weights calls this first: g_once orders the copy before them all). A
 * copy that cannot be had leaves them in the file, read there as before,
 * with a warning. */
static void
ensure_resident (const CpuTarget *cct)
{
  CpuTarget *ct = (CpuTarget *) cct;
  gsize bytes = 0;
  GError *error = NULL;

  if (!g_once_init_enter (&ct->resident))
    return;
  for (guint i = 0; i < ct->in_file->len; i++) {
    const DflStoredTensor *t = g_ptr_array_index (ct->in_file, i);
    bytes += dfl_weight_arena_piece (t->n_bytes);
  }
  if (bytes > 0 && !(ct->stored = dfl_weight_arena_new (bytes, &error))) {
    g_warning ("the target's matrices stay in their file: %s", error->message);
    g_clear_error (&error);
  } else if (bytes > 0) {
    for (guint i = 0; i < ct->in_file->len; i++) {
      const DflStoredTensor *t = g_ptr_array_index (ct->in_file, i);
      DflWeights *w = g_ptr_array_index (ct->in_file_w, i);
      gpointer dst = dfl_weight_arena_take (ct->stored, t->n_bytes);
      memcpy (dst, t->data, t->n_bytes);
      if (ct->embed.data == w->data) {
        /* a tied embedding stored as the head is: read from its copy */
        ct->embed.data = dst;
        ct->embed.in_mapping = FALSE;
      }
      w->data = dst;
      dfl_tensor_release_pages (t);
    }
    point_matrices (ct);
  }
  g_once_init_leave (&ct->resident, 1);
}

static gboolean
cpu_forward_batch (const DflTarget *t, DflTargetBatchJob *jobs, int n_jobs, GError **error)
{
  ensure_resident (host_of (t));
  return dfl_target_ops_forward (t, jobs, n_jobs, error);
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

  ct->embed = *w.embed;
  ct->norm = dfl_tensor_dup_f32 (w.norm);
  ct->in_file = g_ptr_array_new ();
  ct->in_file_w = g_ptr_array_new ();
  {
    gsize bytes = arena_bytes (w.head);
    for (int i = 0; i < cfg.layers; i++)
      for (int j = 0; j < DFL_QWEN3_N_MATRICES; j++)
        bytes += arena_bytes (w.layers[i].matrix[j]);
    if (bytes > 0 && !(ct->packed = dfl_weight_arena_new (bytes, error))) {
      g_prefix_error (error, "%s: ", path);
      dfl_qwen3_tensors_clear (&w);
      return NULL;
    }
  }
  weights_of (w.head, ct, &ct->head);
  /* read per step: the head whole (tied or not), one embedding row */
  t->weight_bytes = dfl_weights_bytes (&ct->head)
      + dfl_dtype_row_bytes (ct->embed.dtype, cfg.hidden);
  ct->layers = g_new0 (Layer, cfg.layers);
  ct->n_layers = cfg.layers;
  for (int i = 0; i < cfg.layers; i++)
    t->weight_bytes += take_layer (&ct->layers[i], &w.layers[i], &cfg, ct);
  dfl_qwen3_tensors_clear (&w);

  ct->inv_freq = g_new (float, cfg.head_dim / 2);
  dfl_rope_inv_freq (ct->inv_freq, cfg.head_dim, cfg.rope_theta);
  if (!describe_model (ct, &cfg, error))
    return NULL;
  t->model = &ct->model;
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
      for (int j = 0; j < DFL_QWEN3_N_BIASES; j++)
        g_free (l->bias[j]);
    }
    g_free (ct->layers);
  }
  g_clear_pointer (&ct->packed, dfl_weight_arena_free);
  g_clear_pointer (&ct->stored, dfl_weight_arena_free);
  g_clear_pointer (&ct->in_file, g_ptr_array_unref);
  g_clear_pointer (&ct->in_file_w, g_ptr_array_unref);
  g_free (ct->model.layers);
  g_clear_pointer (&ct->model.device, dfl_device_unref);
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

  if (!ct)
    return;
  ensure_resident (ct);
  if (dfl_dtype_is_quantized (ct->embed.dtype)) {
    /* a quantized table's rows are whole blocks (checked at load) */
    for (int i = 0; i < n; i++)
      dfl_embed_rows (ct->embed.data, ct->embed.dtype, t->cfg.hidden, (const int32_t *) &ids[i],
                      1, out + (gsize) i * t->cfg.hidden);
    return;
  }
  for (int i = 0; i < n; i++)
    dfl_tensor_read_f32 (&ct->embed, (gint64) ids[i] * t->cfg.hidden, t->cfg.hidden,
                         out + (gsize) i * t->cfg.hidden);
}

void
dfl_target_head (const DflTarget *t, const float *hidden, int rows, int width, float *out)
{
  const CpuTarget *ct = host_of (t);

  if (!ct)
    return;
  ensure_resident (ct);
  dfl_matmul_w (&ct->head, hidden, rows, t->cfg.hidden, out, width, width, 0);
}

static void
cpu_tables (const DflTarget *t, DflTensor *embedding, DflTensor *head)
{
  *embedding = t->model->embed;
  *head = t->model->head;
}

const DflTargetEngine dfl_target_cpu_engine = {
  .backend = DFL_BACKEND_CPU,
  .host_taps = TRUE,
  .free = cpu_free,
  .tables = cpu_tables,
  .seq_new = dfl_target_ops_seq_new,
  .seq_free = dfl_target_ops_seq_free,
  .seq_reserve = dfl_target_ops_seq_reserve,
  .forward_batch = cpu_forward_batch,
};
