/* gst-dflash — the Qwen3 target on a device other than the host: the
 * weights put there (a loaded target's, as the checkpoint stores them or
 * widened to F32 for exact parity tests, a block-quantized matrix the
 * device does not multiply dequantized to F32; or random ones made there
 * by fill_random) and described as a DflTargetModel of device tensors; the
 * sequences, their KV caches and the forward are target-forward.c's, the
 * same as the CPU's. Written over the back-end interface only: a device
 * runs a target where it has the ops the forward needs (checked when the
 * weights go up): CUDA and Vulkan. Where the device records graphs,
 * decode and verify steps replay a captured graph of the pass
 * (target-forward.c); longer inputs go through in passes of chunk_rows
 * rows. */
#include "target-private.h"

#include <math.h>
#include <string.h>

#include "dfl-error.h"
#include "dfl-kernels.h"
#include "matrix-upload.h"
#include "qwen3-weights.h"
#include "safetensors.h"
#include "target-forward.h"

/* The rows one pass takes at most (dfl_target_set_chunk_rows): a long
 * prefill goes through in passes of this many, so its scratch stays a
 * few hundred rows whatever the prompt. */
#define DEFAULT_CHUNK_ROWS 512

typedef struct {
  DflDevice *device;
  GPtrArray *allocations;   /* every weight buffer on the card, freed together */
  DflTargetModel model;     /* the weights as tensors of those buffers */
  guint64 weight_bytes;
} DeviceTarget;

static void device_target_free (DeviceTarget *t);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (DeviceTarget, device_target_free)

static gpointer
device_weights_alloc (DeviceTarget *t, gsize bytes, GError **error)
{
  gpointer d = dfl_device_alloc (t->device, bytes, error);

  if (d)
    g_ptr_array_add (t->allocations, d);
  return d;
}

/* `n` floats on the card as a [1][n] tensor (a norm, a bias, inv_freq). */
static gboolean
upload_vector_f32 (DeviceTarget *t, const float *src, gint64 n, DflTensor *out, GError **error)
{
  gpointer d = device_weights_alloc (t, n * sizeof (float), error);

  if (!d || !dfl_device_upload (t->device, d, 0, src, n * sizeof (float), error))
    return FALSE;
  *out = dfl_tensor_2d (t->device, d, 0, DFL_DTYPE_F32, 1, n);
  return TRUE;
}

/* --- from a loaded CPU target --- */

static gboolean
upload_vector (DeviceTarget *t, const DflStoredTensor *tensor, DflTensor *out, GError **error)
{
  g_autofree float *host = dfl_tensor_dup_f32 (tensor);

  return upload_vector_f32 (t, host, tensor->n_elements, out, error);
}

/* A matrix [rows][cols] on the card: widened to F32 on the host (exactly
 * as the CPU kernels widen each row) or rounded to BF16 where asked, else
 * as stored, which the card must then multiply; a block-quantized one the
 * card does not multiply goes up dequantized to F32, which keeps its
 * values exactly (matrix-upload.c). */
/* The type a stored matrix goes up as. */
static DflDtype
upload_type (DflDevice *device, const DflStoredTensor *tensor, DflTargetWeights as)
{
  return as == DFL_TARGET_F32 ? DFL_DTYPE_F32
         : as == DFL_TARGET_BF16 ? DFL_DTYPE_BF16
         : dfl_matrix_device_type (device, tensor->dtype);
}

static gboolean
upload_matrix (DeviceTarget *t, const DflStoredTensor *tensor, DflTargetWeights as, DflTensor *out,
               GError **error)
{
  gint64 rows = tensor->shape[0], cols = tensor->shape[1];
  DflDtype type = upload_type (t->device, tensor, as);
  g_autofree char *name = NULL;
  gpointer d;

  if (!dfl_device_supports (t->device, DFL_OP_MATMUL, type)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                 "%s: tensor '%s' goes up as %s, a type %s does not multiply: upload it as F32",
                 tensor->file, tensor->name, dfl_dtype_name (type),
                 dfl_device_describe (t->device));
    return FALSE;
  }
  name = g_strdup_printf ("%s: tensor '%s'", tensor->file, tensor->name);
  if (!(d = device_weights_alloc (t, (gsize) rows * dfl_dtype_row_bytes (type, cols), error))
      || !dfl_matrix_upload (t->device, d, 0, tensor->dtype, tensor->data, rows, cols, type,
                             name, error))
    return FALSE;
  *out = dfl_tensor_2d (t->device, d, 0, type, rows, cols);
  t->weight_bytes += dfl_tensor_bytes (out);
  return TRUE;
}

static gboolean
upload_layer (DeviceTarget *t, const DflQwen3LayerTensors *w, const DflQwen3Config *c,
              DflTargetLayer *l, DflTargetWeights as, GError **error)
{
  DflTensor *norms[DFL_QWEN3_N_NORMS] = { NULL };
  DflTensor *matrices[DFL_QWEN3_N_MATRICES] = { NULL };
  DflTensor *biases[DFL_QWEN3_N_BIASES] = { NULL };

  norms[DFL_QWEN3_IN_NORM] = &l->in_norm;
  norms[DFL_QWEN3_POST_NORM] = &l->post_norm;
  norms[DFL_QWEN3_Q_NORM] = &l->q_norm;
  norms[DFL_QWEN3_K_NORM] = &l->k_norm;
  matrices[DFL_QWEN3_Q] = &l->q;
  matrices[DFL_QWEN3_K] = &l->k;
  matrices[DFL_QWEN3_V] = &l->v;
  matrices[DFL_QWEN3_O] = &l->o;
  matrices[DFL_QWEN3_GATE] = &l->gate;
  matrices[DFL_QWEN3_UP] = &l->up;
  matrices[DFL_QWEN3_DOWN] = &l->down;
  biases[DFL_QWEN3_Q] = &l->q_bias;
  biases[DFL_QWEN3_K] = &l->k_bias;
  biases[DFL_QWEN3_V] = &l->v_bias;
  biases[DFL_QWEN3_O] = &l->o_bias;

  for (int i = 0; i < DFL_QWEN3_N_NORMS; i++)
    if (!upload_vector (t, w->norm[i], norms[i], error))
      return FALSE;
  for (int i = 0; i < DFL_QWEN3_N_MATRICES; i++)
    if (!upload_matrix (t, w->matrix[i], as, matrices[i], error))
      return FALSE;
  l->has_bias = c->attention_bias;
  for (int i = 0; l->has_bias && i < DFL_QWEN3_N_BIASES; i++)
    if (!upload_vector (t, w->bias[i], biases[i], error))
      return FALSE;
  return TRUE;
}

static DeviceTarget *
target_alloc (DflDevice *device, const DflQwen3Config *c)
{
  DeviceTarget *t = g_new0 (DeviceTarget, 1);

  t->device = dfl_device_ref (device);
  t->allocations = g_ptr_array_new ();
  t->model.device = dfl_device_ref (device);
  t->model.layers = g_new0 (DflTargetLayer, c->layers);
  t->model.chunk_rows = DEFAULT_CHUNK_ROWS;
  t->model.spare = dfl_target_spare_new (device);
  return t;
}

/* The device has every op of F32 the forward runs, and rope its pairs:
 * said before anything is uploaded (the weights' types are checked as they
 * go up; the other limits of the ops are said by the ops, naming the
 * value). */
static gboolean
check_supported (DflDevice *device, const DflQwen3Config *c, const char *origin, GError **error)
{
  static const DflOp needed[] = { DFL_OP_RMSNORM, DFL_OP_ROPE, DFL_OP_ATTENTION,
                                  DFL_OP_SILU_MUL, DFL_OP_ADD, DFL_OP_ARGMAX, DFL_OP_COPY_ROWS };

  for (guint i = 0; i < G_N_ELEMENTS (needed); i++)
    if (!dfl_device_supports (device, needed[i], DFL_DTYPE_F32)) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                   "backend=%s runs no target: %s has no %s, which the target's forward needs",
                   dfl_backend_name (dfl_device_backend (device)), dfl_device_describe (device),
                   dfl_op_name (needed[i]));
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
upload_inv_freq (DeviceTarget *t, const DflQwen3Config *c, GError **error)
{
  int half = c->head_dim / 2;
  g_autofree float *host = g_new (float, half);

  dfl_rope_inv_freq (host, c->head_dim, c->rope_theta);
  return upload_vector_f32 (t, host, half, &t->model.inv_freq, error);
}

/* The head: the embedding's memory when tied. Per step the head is read
 * whole and one row of the embedding. */
static void
count_tables (DeviceTarget *t, const DflQwen3Config *c)
{
  t->weight_bytes -= dfl_tensor_bytes (&t->model.embed);
  if (c->tie_word_embeddings) {
    t->model.head = t->model.embed;
    t->weight_bytes += dfl_tensor_bytes (&t->model.head);
  }
  t->weight_bytes += (guint64) c->hidden * dfl_dtype_size (t->model.embed.dtype);
}

static DeviceTarget *
device_target_new (DflDevice *device, const DflTarget *cpu, DflTargetWeights as, GError **error)
{
  const DflQwen3Config *c = dfl_target_config (cpu);
  g_autoptr (DeviceTarget) t = NULL;
  DflQwen3Tensors w;
  gboolean ok;

  if (!check_supported (device, c, dfl_target_dir (cpu), error)
      || !dfl_qwen3_tensors_find (&w, dfl_target_tensors (cpu), c, error))
    return NULL;
  t = target_alloc (device, c);
  /* the cache beside the layers' matrices (their first, as all go up alike) */
  t->model.kv_type = dfl_target_kv_type_for (
      device, upload_type (device, w.layers[0].matrix[0], as) == DFL_DTYPE_BF16);

  /* the embedding is gathered, never multiplied, unless it is also the head */
  ok = upload_matrix (t, w.embed, as, &t->model.embed, error)
       && upload_vector (t, w.norm, &t->model.norm, error);
  if (ok)
    count_tables (t, c);
  if (ok && !c->tie_word_embeddings)
    ok = upload_matrix (t, w.head, as, &t->model.head, error);
  for (int i = 0; ok && i < c->layers; i++)
    ok = upload_layer (t, &w.layers[i], c, &t->model.layers[i], as, error);
  dfl_qwen3_tensors_clear (&w);
  /* the copies have ended when the host's memory goes */
  if (!ok || !upload_inv_freq (t, c, error) || !dfl_op_sync (device, error))
    return NULL;
  return g_steal_pointer (&t);
}

/* --- random weights made on the card --- */

static gboolean
random_matrix (DeviceTarget *t, gint64 rows, gint64 cols, DflDtype type, float scale,
               guint64 seed, DflTensor *out, GError **error)
{
  gsize n = (gsize) rows * cols;
  gpointer d = device_weights_alloc (t, n * dfl_dtype_size (type), error);

  if (!d)
    return FALSE;
  /* filled where they lie: a hash of the index, the same for the same
   * seed on every device */
  *out = dfl_tensor_2d (t->device, d, 0, type, rows, cols);
  if (!dfl_op_fill_random (t->device, out, seed, scale, error))
    return FALSE;
  t->weight_bytes += dfl_tensor_bytes (out);
  return TRUE;
}

static DeviceTarget *
device_target_new_random (DflDevice *device, const DflQwen3Config *c, DflDtype type,
                        guint64 seed, GError **error)
{
  g_autoptr (DeviceTarget) t = NULL;
  int hs = c->hidden, width = MAX (hs, c->head_dim);
  g_autofree float *ones = g_new (float, width);
  DflTensor d_ones;
  guint64 stream = seed * 1000003u;   /* each matrix its own stream of the hash */

  if (!check_supported (device, c, "random target", error))
    return NULL;
  t = target_alloc (device, c);
  t->model.kv_type = dfl_target_kv_type_for (device, type == DFL_DTYPE_BF16);
  for (int i = 0; i < width; i++)
    ones[i] = 1.0f;
  /* every norm is one: they share one vector, seen at each one's size */
  if (!upload_vector_f32 (t, ones, width, &d_ones, error))
    return NULL;
  t->model.norm = dfl_tensor_2d (device, d_ones.handle, 0, DFL_DTYPE_F32, 1, hs);

  if (!random_matrix (t, c->vocab, hs, type, 1.0f, stream++, &t->model.embed, error))
    return NULL;
  count_tables (t, c);
  if (!c->tie_word_embeddings
      && !random_matrix (t, c->vocab, hs, type, 1.0f / sqrtf (hs), stream++, &t->model.head,
                         error))
    return NULL;

  for (int i = 0; i < c->layers; i++) {
    DflTargetLayer *l = &t->model.layers[i];
    DflTensor *matrices[DFL_QWEN3_N_MATRICES] = { NULL };

    matrices[DFL_QWEN3_Q] = &l->q;
    matrices[DFL_QWEN3_K] = &l->k;
    matrices[DFL_QWEN3_V] = &l->v;
    matrices[DFL_QWEN3_O] = &l->o;
    matrices[DFL_QWEN3_GATE] = &l->gate;
    matrices[DFL_QWEN3_UP] = &l->up;
    matrices[DFL_QWEN3_DOWN] = &l->down;
    l->in_norm = l->post_norm = t->model.norm;
    l->q_norm = l->k_norm = dfl_tensor_2d (device, d_ones.handle, 0, DFL_DTYPE_F32, 1,
                                           c->head_dim);
    for (int m = 0; m < DFL_QWEN3_N_MATRICES; m++) {
      gint64 rows, cols;
      dfl_qwen3_matrix_shape (c, m, &rows, &cols);
      /* uniform in ±1/sqrt(fan_in) */
      if (!random_matrix (t, rows, cols, type, 1.0f / sqrtf (cols), stream++, matrices[m],
                          error))
        return NULL;
    }
  }
  /* a random target has no biases: they would all be zero */
  if (!upload_inv_freq (t, c, error) || !dfl_op_sync (device, error))
    return NULL;
  return g_steal_pointer (&t);
}

static void
device_target_free (DeviceTarget *t)
{
  if (!t)
    return;
  for (guint i = 0; i < t->allocations->len; i++)
    dfl_device_free (t->device, t->allocations->pdata[i]);
  g_ptr_array_unref (t->allocations);
  dfl_target_spare_free (t->model.spare);
  g_free (t->model.layers);
  dfl_device_unref (t->model.device);
  dfl_device_unref (t->device);
  g_free (t);
}

static void
device_target_tables (const DflTarget *target, DflTensor *embedding, DflTensor *head)
{
  *embedding = target->model->embed;
  *head = target->model->head;
}

static void
device_target_set_use_graph (gpointer impl, gboolean use_graph)
{
  DeviceTarget *t = impl;

  g_atomic_int_set (&t->model.no_graphs, !use_graph);
}

static void
device_target_set_chunk_rows (gpointer impl, int rows)
{
  DeviceTarget *t = impl;

  g_atomic_int_set (&t->model.chunk_rows, rows);
}

/* --- the engine --- */

static DflTarget *
target_wrap (DflDevice *device, const DflQwen3Config *c, const char *origin, DeviceTarget *t)
{
  DflTarget *target;

  if (!t)
    return NULL;
  target = dfl_target_wrap (&dfl_device_target_engine, device, c, origin, t);
  target->weight_bytes = t->weight_bytes;
  target->model = &t->model;
  return target;
}

static DflTarget *
device_target_upload (const DflTarget *host, DflDevice *device, DflTargetWeights as,
                    GError **error)
{
  return target_wrap (device, dfl_target_config (host), dfl_target_dir (host),
                      device_target_new (device, host, as, error));
}

static DflTarget *
device_target_random (DflDevice *device, const DflQwen3Config *c, DflDtype type, guint64 seed,
                    GError **error)
{
  return target_wrap (device, c, "random target",
                      device_target_new_random (device, c, type, seed, error));
}

static void
device_target_release (gpointer impl)
{
  device_target_free (impl);
}

const DflTargetEngine dfl_device_target_engine = {
  .host_taps = FALSE,
  .upload = device_target_upload,
  .new_random = device_target_random,
  .free = device_target_release,
  .tables = device_target_tables,
  .set_use_graph = device_target_set_use_graph,
  .set_chunk_rows = device_target_set_chunk_rows,
  .seq_new = dfl_target_ops_seq_new,
  .seq_free = dfl_target_ops_seq_free,
  .seq_reserve = dfl_target_ops_seq_reserve,
  .forward_batch = dfl_target_ops_forward,
};
