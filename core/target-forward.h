/* gst-dflash — the Qwen3 forward written once, over the operations of
 * dfl-backend.h (target.h's inside).
 *
 * An engine that runs its target through it describes the weights as
 * tensors on the device that runs the ops (DflTargetModel) and takes its
 * sequences, their caches and its forward from here: the model's math is
 * then the same calls on every back end, and what differs between back ends
 * stays behind the interface (the kernels, where memory lives, graphs).
 */
#pragma once

#include "target-private.h"

G_BEGIN_DECLS

typedef struct _DflTargetSpare DflTargetSpare;

/* One layer's weights. Norms F32 [dim]; matrices [out][in] (F32, F16,
 * BF16), packed; the biases F32 [1][dim], there only where has_bias. */
typedef struct {
  DflTensor in_norm, post_norm, q_norm, k_norm;
  DflTensor q, k, v, o, gate, up, down;
  gboolean has_bias;
  DflTensor q_bias, k_bias, v_bias, o_bias;
} DflTargetLayer;

/* A target's weights where the ops read them. Host memory (tensor device
 * NULL) is read in place by the CPU's ops. */
struct _DflTargetModel {
  /* the device the ops run on (for a host target, the CPU's) */
  DflDevice *device;
  DflTensor embed;      /* [vocab][hidden] */
  DflTensor head;       /* [vocab][hidden]; the embedding's memory when tied */
  DflTensor norm;       /* F32 [hidden] */
  DflTensor inv_freq;   /* F32 [head_dim / 2] */
  DflTargetLayer *layers;
  /* the KV cache's elements: F32 or BF16 (dfl_target_kv_type_for) */
  DflDtype kv_type;
  /* the engine's settings, read atomically at each forward (zero: the
   * defaults): the rows one pass takes at most, a longer forward going
   * through in passes of that many (0: every row in one pass); whether to
   * launch every op directly even where the device records graphs
   * (dfl_target_set_chunk_rows, dfl_target_set_use_graph) */
  gint chunk_rows;
  gint no_graphs;
  /* the memory of the last direct pass, kept for the next (NULL: each pass
   * allocates its own, as the host's malloc is cheap; a GPU's is not) */
  DflTargetSpare *spare;
};

/* The KV cache's type: BF16 (half the bytes a step reads over the
 * context, the values rounded as they are written) where the products
 * already round their inputs at least as coarsely (`coarse_products`: a
 * card's BF16 products, which take BF16 inputs; the CPU's quantized ones,
 * which take int8) and the device writes and attends over BF16 rows; F32
 * elsewhere — the CPU's F32, F16 and BF16 products take F32 inputs, whose
 * parity with the float64 references (1e-4) a BF16 cache would lose (2.4e-3
 * measured), and F16 on a card rounds finer than BF16 would (5.6e-3 against
 * F16's 5e-3). */
DflDtype dfl_target_kv_type_for (DflDevice *device, gboolean coarse_products);

/* A pass's memory kept between passes, for a model whose forwards may run
 * on several threads at once (each takes it or makes its own). Freed with
 * its memory once no pass runs. */
DflTargetSpare *dfl_target_spare_new (DflDevice *device);
void dfl_target_spare_free (DflTargetSpare *spare);

/* The engine's sequence calls for a target whose DflTarget.model is set:
 * the KV cache of every layer in memory of the model's device. */
gpointer dfl_target_ops_seq_new (const DflTarget *t);
void dfl_target_ops_seq_free (gpointer seq);
gboolean dfl_target_ops_seq_reserve (gpointer seq, int positions, GError **error);

/* Decode and verify steps on a device that records graphs
 * (DFL_OP_CAPTURE_BEGIN in its capabilities): a forward of one sequence of
 * at most DFL_TARGET_GRAPH_ROWS rows replays a graph of its whole pass,
 * captured per sequence. The pass's memory is the sequence's own, at fixed
 * addresses; its index tensors (ids, position, key ranges) are uploaded
 * before each replay; attention covers the keys up to the next multiple of
 * DFL_TARGET_GRAPH_KEY_STEP (its output does not depend on that bound, the
 * key ranges do the rest), so one graph serves every step until the
 * context passes that multiple, the caches move or what is asked back
 * changes. */
#define DFL_TARGET_GRAPH_ROWS 32
#define DFL_TARGET_GRAPH_KEY_STEP 1024

/* The forward of `n_jobs` sequences' rows at once (the sequences all
 * different; ids, positions, tap layers checked by target.c): one pass of
 * the products over every row; the rope, the cache writes and the
 * attention one op each over all the sequences where the device has the
 * table ops (copy_rows_table, attention_table), else sequence by
 * sequence; each sequence's outputs split back to its plan. Where the
 * device's matmul and attention are DFL_OP_CAP_ROW_INVARIANT, each
 * sequence's outputs are bitwise what its forward alone gives. A failure
 * leaves every sequence's length as it was. */
gboolean dfl_target_ops_forward (const DflTarget *t, DflTargetBatchJob *jobs, int n_jobs,
                                 GError **error);

G_END_DECLS
