/* gst-dflash — what the registry, the dispatch and each back end's table of
 * operations share: the device object and the table's entries.
 *
 * A back end fills one DflBackendOps (ops-cpu.c, ops-cuda.c, ops-vulkan.c);
 * meson builds the files of the back ends this build has and the registry
 * points each device at its table. The dispatch (ops.c) has checked every
 * tensor's device, type and shape before an entry is called, and the
 * capability: an entry checks only its own back end's limits.
 */
#pragma once

#include "dfl-backend.h"

G_BEGIN_DECLS

typedef struct _DflBackendOps DflBackendOps;

/* What a back end does for its devices (ops-*.c; listed by registry.c). */
typedef struct {
  const char *name;
  gboolean built;
  /* the back end's device object (NULL for the CPU, which needs none) */
  gboolean (*open) (int index, gpointer *native, GError **error);
  /* another reference to a device object opened elsewhere */
  gpointer (*ref) (gpointer native);
  void (*close) (gpointer native);
  /* "CUDA: NVIDIA H200 (sm_90, 139 GiB)" (newly allocated) */
  char *(*describe) (gpointer native);
  gpointer (*alloc) (gpointer native, gsize bytes, GError **error);
  void (*free) (gpointer native, gpointer handle);
  gboolean (*upload) (gpointer native, gpointer handle, gsize offset, const void *src,
                      gsize bytes, GError **error);
  gboolean (*download) (gpointer native, gpointer handle, gsize offset, void *dst, gsize bytes,
                        GError **error);
  const DflBackendOps *ops;
} DflBackendDeviceOps;

struct _DflDevice {
  gint refcount;
  DflBackendId id;
  const DflBackendDeviceOps *backend;
  gpointer native;
  char *description;
  /* the table's own state for this device (streams, scratch), from its init */
  gpointer state;
};

struct _DflGraph {
  DflDevice *device;
  gpointer native;
};

struct _DflBackendOps {
  DflOpCaps (*caps) (DflDevice *dev, DflOp op, DflDtype dtype);
  /* the device's state: made when it opens, freed when it closes */
  gpointer (*init) (DflDevice *dev, GError **error);
  void (*fini) (DflDevice *dev, gpointer state);
  /* Before a host copy: the queued ops done (NULL: the copies are queued
   * behind them already). */
  gboolean (*flush) (DflDevice *dev, GError **error);

  gboolean (*matmul) (DflDevice *dev, const DflTensor *w, const DflTensor *x, DflTensor *y,
                      gboolean accumulate, GError **error);
  /* may be NULL: the dispatch runs one matmul a product */
  gboolean (*matmul_group) (DflDevice *dev, int n, const DflTensor *const *w, const DflTensor *x,
                            DflTensor *const *y, gboolean accumulate, GError **error);
  gboolean (*rmsnorm) (DflDevice *dev, const DflTensor *x, const DflTensor *w, DflTensor *y,
                       float eps, GError **error);
  gboolean (*rope) (DflDevice *dev, DflTensor *x, const DflTensor *inv_freq,
                    const DflTensor *pos, GError **error);
  /* may be NULL: the dispatch runs rmsnorm over the heads, then rope */
  gboolean (*norm_rope) (DflDevice *dev, DflTensor *x, const DflTensor *w,
                         const DflTensor *inv_freq, const DflTensor *pos, float eps,
                         GError **error);
  gboolean (*attention) (DflDevice *dev, const DflTensor *q, const DflTensor *k,
                         const DflTensor *v, const DflTensor *lo, const DflTensor *hi,
                         DflTensor *out, float scale, GError **error);
  gboolean (*row_conv) (DflDevice *dev, const DflTensor *x, const DflTensor *base,
                        const DflTensor *dyn, DflTensor *y, GError **error);
  gboolean (*silu_mul) (DflDevice *dev, DflTensor *gate, const DflTensor *up, GError **error);
  gboolean (*add) (DflDevice *dev, DflTensor *x, const DflTensor *y, GError **error);
  gboolean (*embed) (DflDevice *dev, const DflTensor *table, const DflTensor *ids,
                     DflTensor *out, GError **error);
  gboolean (*argmax) (DflDevice *dev, const DflTensor *x, DflTensor *out, GError **error);
  gboolean (*top_k) (DflDevice *dev, const DflTensor *x, DflTensor *values, DflTensor *indices,
                     GError **error);
  gboolean (*select_rescore) (DflDevice *dev, const DflTensor *cand,
                              const DflTensor *cand_logit, const DflTensor *hp,
                              const DflTensor *pred_book, const DflTensor *succ_book,
                              DflTensor *chosen, gint32 anchor, GError **error);
  gboolean (*copy_rows) (DflDevice *dev, const DflTensor *src, const DflTensor *row0,
                         DflTensor *dst, GError **error);
  gboolean (*convert) (DflDevice *dev, const DflTensor *src, DflTensor *dst, GError **error);
  gboolean (*sync) (DflDevice *dev, GError **error);
  gboolean (*capture_begin) (DflDevice *dev, GError **error);
  gpointer (*capture_end) (DflDevice *dev, GError **error);
  gboolean (*graph_launch) (DflDevice *dev, gpointer graph, GError **error);
  void (*graph_free) (DflDevice *dev, gpointer graph);
  gboolean (*fill_random) (DflDevice *dev, DflTensor *t, guint64 seed, float scale,
                           GError **error);
  gboolean (*copy_rows_table) (DflDevice *dev, const DflTensor *src, const DflTensor *dsts,
                               int n_dst, const DflTensor *which, const DflTensor *row,
                               GError **error);
  gboolean (*attention_table) (DflDevice *dev, const DflTensor *q, const DflTensor *ks,
                               const DflTensor *vs, int n_kv, const DflTensor *which,
                               const DflTensor *lo, const DflTensor *hi, DflTensor *out,
                               float scale, GError **error);
};

/* The tables (ops-cpu.c always; ops-cuda.c and ops-vulkan.c where built). */
extern const DflBackendDeviceOps dfl_backend_cpu;
extern const DflBackendDeviceOps dfl_backend_cuda;
extern const DflBackendDeviceOps dfl_backend_vulkan;

/* Whether `dtype` is one an op of its kind takes at all (dfl-backend.h's
 * list: the weights' float types for matmul, …): the back ends' caps start
 * from it. */
gboolean dfl_op_takes_dtype (DflOp op, DflDtype dtype);
/* Whether an op has index tensors (positions, key ranges, ids, start rows). */
gboolean dfl_op_has_indices (DflOp op);

/* For the entries' own refusals: "<op> on <backend>: <why>" in
 * DFL_ERROR_UNSUPPORTED. */
void dfl_op_refuse (GError **error, DflDevice *dev, DflOp op, const char *format, ...)
  G_GNUC_PRINTF (4, 5);
/* For the back ends that read indices on the host: each of ids[0 … n) in
 * [0, limit), or a DFL_ERROR_INVALID error naming `what` and the value;
 * the key ranges of attention likewise (0 ≤ lo, hi ≤ keys); a start row
 * or position `start` with `count` rows after it within [0, limit). */
gboolean dfl_op_ids_within (DflDevice *dev, DflOp op, const char *what, const int32_t *ids,
                            gint64 n, gint64 limit, GError **error);
gboolean dfl_op_ranges_within (DflDevice *dev, const int32_t *lo, const int32_t *hi, int rows,
                               gint64 keys, GError **error);
gboolean dfl_op_start_within (DflDevice *dev, DflOp op, const char *what, gint64 start,
                              gint64 count, gint64 limit, GError **error);

/* Element counts of the shapes the dispatch has checked. */
#define DFL_ROWS(t) ((int) (t)->ne[1])
#define DFL_COLS(t) ((int) (t)->ne[0])
/* A row stride in elements. */
#define DFL_LD(t) ((int) ((t)->nb[1] / (t)->nb[0]))

G_END_DECLS
