/* gst-dflash — the target's one interface over its engines: the checks
 * every back end shares, what a forward is asked for resolved into memory
 * the engine writes. */
#include "target-forward.h"
#include "target-private.h"

#include "dfl-error.h"
#include "qwen3-weights.h"

DflTarget *
dfl_target_wrap (const DflTargetEngine *engine, DflDevice *device, const DflQwen3Config *c,
                 const char *origin, gpointer impl)
{
  DflTarget *t = g_new0 (DflTarget, 1);

  t->engine = engine;
  t->device = device ? dfl_device_ref (device) : NULL;
  t->cfg = *c;
  t->origin = g_strdup (origin);
  t->n_params = dfl_qwen3_n_params (c);
  t->impl = impl;
  return t;
}

DflTarget *
dfl_target_upload (const DflTarget *host, DflDevice *device, DflTargetWeights as,
                   GError **error)
{
  const DflTargetEngine *engine;

  g_return_val_if_fail (host->engine == &dfl_target_cpu_engine && device != NULL, NULL);
  if (!(engine = dfl_target_engine_for (dfl_device_backend (device), error)))
    return NULL;
  if (!engine->upload) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                 "%s is on the host already: the CPU runs the loaded target itself",
                 host->origin);
    return NULL;
  }
  return engine->upload (host, device, as, error);
}

DflTarget *
dfl_target_new_random (DflDevice *device, const DflQwen3Config *c, DflDtype type, guint64 seed,
                       GError **error)
{
  const DflTargetEngine *engine;

  g_return_val_if_fail (device != NULL, NULL);
  if (!(engine = dfl_target_engine_for (dfl_device_backend (device), error)))
    return NULL;
  if (!engine->new_random) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                 "backend=%s makes no random target: it reads a checkpoint (dfl_target_load)",
                 dfl_backend_name (dfl_device_backend (device)));
    return NULL;
  }
  return engine->new_random (device, c, type, seed, error);
}

void
dfl_target_free (DflTarget *t)
{
  if (!t)
    return;
  if (t->impl)
    t->engine->free (t->impl);
  g_clear_pointer (&t->device, dfl_device_unref);
  g_free (t->origin);
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
  return t->origin;
}

DflDevice *
dfl_target_device (const DflTarget *t)
{
  return t->device;
}

DflBackendId
dfl_target_backend (const DflTarget *t)
{
  return t->device ? dfl_device_backend (t->device) : t->engine->backend;
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

DflDtype
dfl_target_kv_type (const DflTarget *t)
{
  return t->model ? t->model->kv_type : DFL_DTYPE_F32;
}

DflTensor
dfl_target_embedding_tensor (const DflTarget *t)
{
  DflTensor embedding, head;

  t->engine->tables (t, &embedding, &head);
  return embedding;
}

DflTensor
dfl_target_head_tensor (const DflTarget *t)
{
  DflTensor embedding, head;

  t->engine->tables (t, &embedding, &head);
  return head;
}

void
dfl_target_set_use_graph (DflTarget *t, gboolean use_graph)
{
  g_return_if_fail (t->engine->set_use_graph != NULL);
  t->engine->set_use_graph (t->impl, use_graph);
}

void
dfl_target_set_chunk_rows (DflTarget *t, int rows)
{
  g_return_if_fail (t->engine->set_chunk_rows != NULL);
  g_return_if_fail (rows > 0);
  t->engine->set_chunk_rows (t->impl, rows);
}

/* --- sequences --- */

DflTargetSeq *
dfl_target_seq_new (const DflTarget *t)
{
  DflTargetSeq *s = g_new0 (DflTargetSeq, 1);

  s->t = t;
  s->impl = t->engine->seq_new (t);
  return s;
}

void
dfl_target_seq_free (DflTargetSeq *s)
{
  if (!s)
    return;
  s->t->engine->seq_free (s->impl);
  g_free (s);
}

const DflTarget *
dfl_target_seq_target (const DflTargetSeq *s)
{
  return s->t;
}

/* Whether `positions` fit the model's context; an error saying so where not. */
static gboolean
check_context (const DflTarget *t, int pos0, int n, GError **error)
{
  const DflQwen3Config *c = &t->cfg;

  if ((gint64) pos0 + n <= c->max_positions)
    return TRUE;
  g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT,
               "%d tokens at position %d pass the context of %s: max_position_embeddings "
               "is %d, so positions 0 … %d", n, pos0, t->origin, c->max_positions,
               c->max_positions - 1);
  return FALSE;
}

gboolean
dfl_target_seq_reserve (DflTargetSeq *s, int positions, GError **error)
{
  return check_context (s->t, 0, positions, error)
         && s->t->engine->seq_reserve (s->impl, positions, error);
}

int
dfl_target_seq_length (const DflTargetSeq *s)
{
  return ((const DflTargetSeqHead *) s->impl)->len;
}

void
dfl_target_seq_truncate (DflTargetSeq *s, int pos)
{
  DflTargetSeqHead *head = s->impl;

  g_return_if_fail (pos >= 0 && pos <= head->len);
  head->len = pos;
}

/* --- the forward --- */

static const char *
where (const DflDevice *device)
{
  return device ? dfl_device_describe (device) : "the host";
}

/* The memory of a tensor the caller gave for `rows` rows of `cols` floats,
 * where the target's forward can write it: the target's device, or the
 * host for a host target. */
static float *
out_rows (const DflTarget *t, const DflTensor *tensor, int rows, gint64 cols, const char *what,
          GError **error)
{
  gboolean on_host = !tensor->device || dfl_device_backend (tensor->device) == DFL_BACKEND_CPU;
  gboolean here = t->device ? tensor->device && dfl_device_native (tensor->device)
                                                == dfl_device_native (t->device)
                            : on_host;

  if (!here) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_MISMATCH,
                 "the %s are asked for on %s, but the target %s runs on %s", what,
                 where (tensor->device), t->origin, where (t->device));
    return NULL;
  }
  if (tensor->dtype != DFL_DTYPE_F32 || !dfl_tensor_is_contiguous (tensor)
      || dfl_tensor_n_elements (tensor) < (gint64) rows * cols) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "the %s tensor must be packed F32 with room for %d × %" G_GINT64_FORMAT
                 " values (it is %s, %" G_GINT64_FORMAT " values)", what, rows, cols,
                 dfl_dtype_name (tensor->dtype), dfl_tensor_n_elements (tensor));
    return NULL;
  }
  return dfl_tensor_data (tensor);
}

/* Host rows and device tensors of one output resolved into the plan: on a
 * host target a device tensor is host memory, so it takes the host's place
 * (asking for both there names the same rows twice). */
static gboolean
resolve (const DflTarget *t, float **host, float **device, const DflTensor *tensor, int rows,
         gint64 cols, const char *what, GError **error)
{
  float *p;

  if (!tensor)
    return TRUE;
  if (!(p = out_rows (t, tensor, rows, cols, what, error)))
    return FALSE;
  if (t->device) {
    *device = p;
  } else if (*host) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "the %s are asked for twice on the host (host rows and a host tensor)", what);
    return FALSE;
  } else {
    *host = p;
  }
  return TRUE;
}

/* What `out` asks for as the engine writes it; FALSE where the target
 * cannot give it there. */
static gboolean
plan_forward (const DflTarget *t, int n, const DflForwardOut *out, DflForwardPlan *plan,
              GError **error)
{
  const DflQwen3Config *c = &t->cfg;
  int logit_rows = n - CLAMP (out->logits_from, 0, n);

  *plan = (DflForwardPlan) {
    .tap_layers = out->tap_layers, .n_tap_layers = out->n_tap_layers, .taps = out->taps,
    .logits_from = out->logits_from, .logits = out->logits, .argmax = out->argmax,
    .hidden = out->hidden,
  };
  for (int i = 0; i < out->n_tap_layers; i++)
    if (out->tap_layers[i] < 0 || out->tap_layers[i] >= c->layers) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                   "tap layer %d is outside the %d layers of %s",
                   out->tap_layers[i], c->layers, t->origin);
      return FALSE;
    }
  if (!resolve (t, &plan->taps, &plan->d_taps, out->device_taps, n,
                (gint64) out->n_tap_layers * c->hidden, "taps", error)
      || !resolve (t, &plan->logits, &plan->d_logits, out->device_logits, logit_rows, c->vocab,
                   "logits", error))
    return FALSE;
  if (plan->taps && !t->engine->host_taps) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                 "the target %s on %s hands its taps back on the device (device_taps), "
                 "not in host rows", t->origin, where (t->device));
    return FALSE;
  }
  return TRUE;
}

/* One item's ids, context and outputs checked and resolved into `job`. */
static gboolean
check_item (const DflTarget *t, DflTargetSeq *s, const int *ids, int n, const DflForwardOut *out,
            DflTargetBatchJob *job, GError **error)
{
  const DflQwen3Config *c = &t->cfg;
  DflForwardOut none = { 0 };

  if (!out)
    out = &none;
  for (int i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= c->vocab) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                   "token id %d is outside the vocabulary of %s (0 … %d)",
                   ids[i], t->origin, c->vocab - 1);
      return FALSE;
    }
  *job = (DflTargetBatchJob) { .seq = s->impl, .ids = ids, .n = n };
  return check_context (t, dfl_target_seq_length (s), n, error)
         && plan_forward (t, n, out, &job->plan, error);
}

gboolean
dfl_target_forward (const DflTarget *t, DflTargetSeq *s, const int *ids, int n,
                    DflForwardOut *out, GError **error)
{
  DflTargetBatchJob job;

  g_return_val_if_fail (s->t == t, FALSE);
  if (n <= 0)
    return TRUE;
  return check_item (t, s, ids, n, out, &job, error)
         && t->engine->forward_batch (t, &job, 1, error);
}

gboolean
dfl_target_forward_batch (const DflTarget *t, const DflTargetBatchItem *items, int n_items,
                          GError **error)
{
  g_autofree DflTargetBatchJob *jobs = NULL;
  int n_jobs = 0;

  g_return_val_if_fail (n_items >= 0 && (items || n_items == 0), FALSE);
  jobs = g_new (DflTargetBatchJob, MAX (n_items, 1));
  for (int i = 0; i < n_items; i++) {
    const DflTargetBatchItem *it = &items[i];
    g_autoptr (GError) why = NULL;

    g_return_val_if_fail (it->seq != NULL && it->seq->t == t, FALSE);
    for (int j = 0; j < i; j++)
      if (items[j].seq == it->seq) {
        g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                     "batch item %d runs the sequence of item %d again: a sequence's rows "
                     "go in one item", i, j);
        return FALSE;
      }
    /* a sequence with no rows takes no part (and gets nothing back) */
    if (it->n <= 0)
      continue;
    if (!check_item (t, it->seq, it->ids, it->n, it->out, &jobs[n_jobs], &why)) {
      g_set_error (error, DFL_ERROR, why->code, "batch item %d: %s", i, why->message);
      return FALSE;
    }
    n_jobs++;
  }
  return n_jobs == 0 || t->engine->forward_batch (t, jobs, n_jobs, error);
}
