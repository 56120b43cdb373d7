/* gst-dflash — what a back end's target engine provides (target.h's
 * inside): target.c checks every call's arguments and resolves what the
 * caller asked a forward for into memory the engine writes; the engine
 * (target-cpu.c on the host, target-device.c on any other device) puts
 * the weights where its device reads them and runs the forward written
 * over the ops (target-forward.c); target-engines.c hands them out.
 */
#pragma once

#include "target.h"

G_BEGIN_DECLS

/* A forward's outputs as the engine writes them (DflForwardOut resolved):
 * host pointers, and pointers into the target's device memory (d_*;
 * never set for a host target, whose device tensors are host rows). */
typedef struct {
  const int *tap_layers;
  int n_tap_layers;
  float *taps;
  float *d_taps;
  int logits_from;
  float *logits;
  float *d_logits;
  int32_t *argmax;
  float *hidden;
} DflForwardPlan;

/* One sequence's part of a forward: its rows and what it asks back. */
typedef struct {
  gpointer seq;
  const int *ids;
  int n;
  DflForwardPlan plan;
} DflTargetBatchJob;

/* A target's weights as tensors for the forward written over the ops
 * (target-forward.h). */
typedef struct _DflTargetModel DflTargetModel;

typedef struct {
  /* the host's engine: DFL_BACKEND_CPU; the device engine's targets are of
   * their device's back end */
  DflBackendId backend;
  /* whether its forward gives taps in host rows (a device engine keeps
   * them on its device, for a drafter there) */
  gboolean host_taps;
  /* make a target (NULL: this engine makes none that way) */
  DflTarget *(*upload) (const DflTarget *host, DflDevice *device, DflTargetWeights as,
                        GError **error);
  DflTarget *(*new_random) (DflDevice *device, const DflQwen3Config *c, DflDtype type,
                            guint64 seed, GError **error);
  void (*free) (gpointer impl);
  void (*tables) (const DflTarget *t, DflTensor *embedding, DflTensor *head);
  /* device settings (NULL: the engine has no such thing) */
  void (*set_use_graph) (gpointer impl, gboolean use_graph);
  void (*set_chunk_rows) (gpointer impl, int rows);
  /* sequences (each a struct that begins with a DflTargetSeqHead) */
  gpointer (*seq_new) (const DflTarget *t);
  void (*seq_free) (gpointer seq);
  gboolean (*seq_reserve) (gpointer seq, int positions, GError **error);
  /* the rows of one or several sequences at once (`n_jobs` ≥ 1 sequences
   * of n ≥ 1 rows each, their ids, positions and tap layers checked) */
  gboolean (*forward_batch) (const DflTarget *t, DflTargetBatchJob *jobs, int n_jobs,
                             GError **error);
} DflTargetEngine;

struct _DflTarget {
  const DflTargetEngine *engine;
  DflDevice *device;        /* NULL: the host */
  DflQwen3Config cfg;
  char *origin;             /* the checkpoint folder, for messages */
  guint64 weight_bytes;
  gint64 n_params;
  /* the weights as the forward over the ops reads them */
  const DflTargetModel *model;
  gpointer impl;            /* the engine's */
};

/* The first member of every engine's sequence: the positions its cache
 * holds, which target.c reads and rewinds (truncating moves only this). */
typedef struct {
  int len;
} DflTargetSeqHead;

struct _DflTargetSeq {
  const DflTarget *t;
  gpointer impl;
};

/* A target of `engine` around its `impl` (taken; freed by engine->free);
 * `device` is referenced. The engine fills weight_bytes. */
DflTarget *dfl_target_wrap (const DflTargetEngine *engine, DflDevice *device,
                            const DflQwen3Config *c, const char *origin, gpointer impl);

/* The engine of `backend`, or NULL with a DFL_ERROR_UNSUPPORTED error
 * naming the back end where it runs no target (target-engines.c). */
const DflTargetEngine *dfl_target_engine_for (DflBackendId backend, GError **error);

/* The host's engine (target-cpu.c). */
extern const DflTargetEngine dfl_target_cpu_engine;
/* The engine of a target put on another device (target-device.c). */
extern const DflTargetEngine dfl_device_target_engine;

G_END_DECLS
