/* gst-dflash — tapsource
 * Copyright (C) 2026 gst-dflash developers
 *
 * This library is free software; you can redistribute it and/or modify it
 * under the terms of the GNU Library General Public License as published by
 * the Free Software Foundation; either version 2 of the License, or (at your
 * option) any later version.
 */
/**
 * SECTION:element-tapsource
 * @title: tapsource
 *
 * tapsource loads the target model (a Qwen3 checkpoint folder) and the
 * drafter beside it, runs the target over each prompt (the round's prefill
 * step, core/round.h), and then
 * starts every round of the speculative loop: it pushes the target's new
 * context rows (the taps of the drafter's layers) with a round request
 * (sequence, anchor token and position, the target's tip row). The verifier
 * downstream answers each round with an upstream verdict event; tapsource
 * then pushes the next round of that sequence. Up to #GstTapSource:in-flight
 * sequences run at once; each buffer says which it belongs to.
 *
 * The model is shared with the other elements of the loop through a
 * GstContext of type "dflash.model". With #GstTapSource:backend cuda (or
 * auto, where downstream takes only CUDA taps) the target runs on the CUDA
 * device for the whole loop: each sequence's cache is on the card, the
 * taps leave in CUDA memory, and the verifier verifies there too; the
 * device is shared through a "dflash.cuda.device" context. A flush (a flushing seek) drops the
 * rounds in flight and starts over from the first prompt.
 *
 * With #GstTapSource:serve the source is a server's engine: it runs the
 * prompts of `tokens` or `prompts-file` if set (not `prompt`), then waits
 * for requests instead of ending. The action signal `submit-request` queues
 * one (its prompt's token ids and a structure of its settings) and returns
 * its id, which its rounds, its text and its tokens carry as their
 * sequence; `cancel-request` drops one, queued or running (a running one
 * at its next round). Up to #GstTapSource:in-flight requests run at once;
 * #GstTapSource:running and #GstTapSource:queued count them. The verifier
 * marks the last tokens of each (GST_BUFFER_FLAG_MARKER).
 *
 * ## Example launch line
 * |[
 * gst-launch-1.0 tapsource model=models/qwen3-go prompt="func ContainsRune(s string, r rune) bool {" ! ctxsettle ! dflashblock ! selector ! verifier ! fdsink
 * ]|
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gsttapsource.h"

#include "round.h"
#include "gstdflashengines.h"

#include <string.h>

#include "dfl-error.h"
#include "gstdflashcaps.h"
#include "gstdflashdevice.h"
#include "gstdflashdevicememory.h"
#include "gstdflashmeta.h"
#include "gstdflashelement.h"
#include "gstdflashseq.h"
#include "prompts.h"
#include "round.h"

GST_DEBUG_CATEGORY_STATIC (gst_tap_source_debug);
#define GST_CAT_DEFAULT gst_tap_source_debug

#define TAPS_FIELDS ", hidden = (int) [ 1, MAX ], " \
    "tap-width = (int) [ 0, MAX ], vocab = (int) [ 1, MAX ], block = (int) [ 1, MAX ]"
/* system memory from the CPU target; CUDA memory from the target on the
 * card, where this build has CUDA */
#define TAPS_BACKENDS (1u << GST_DFLASH_BACKEND_CPU | 1u << GST_DFLASH_BACKEND_CUDA)

#define DEFAULT_PROMPT "func ContainsRune(s string, r rune) bool {"
#define DEFAULT_MAX_NEW 64
#define DEFAULT_IN_FLIGHT 1

enum {
  PROP_0,
  PROP_MODEL,
  PROP_DRAFTER,
  PROP_NO_DRAFTER,
  PROP_DRAFTER_WEIGHTS,
  PROP_PROMPT,
  PROP_PROMPTS_FILE,
  PROP_TOKENS,
  PROP_MAX_NEW_TOKENS,
  PROP_IN_FLIGHT,
  PROP_TEMPERATURE,
  PROP_TOP_P,
  PROP_SEED,
  PROP_BACKEND,
  PROP_GPU_WEIGHTS,
  PROP_BUSY_TIME,
  PROP_SERVE,
  PROP_RUNNING,
  PROP_QUEUED,
};

enum {
  SIGNAL_SUBMIT_REQUEST,
  SIGNAL_CANCEL_REQUEST,
  LAST_SIGNAL
};

static guint signals[LAST_SIGNAL];

/* How the target's matrices go onto a card. */
typedef enum {
  GST_DFLASH_GPU_WEIGHTS_STORED,
  GST_DFLASH_GPU_WEIGHTS_F32,
  GST_DFLASH_GPU_WEIGHTS_BF16,
} GstDflashGpuWeights;

#define GST_TYPE_DFLASH_GPU_WEIGHTS (gst_dflash_gpu_weights_get_type ())
static GType
gst_dflash_gpu_weights_get_type (void)
{
  static GType type = 0;
  static const GEnumValue values[] = {
    { GST_DFLASH_GPU_WEIGHTS_STORED, "As the checkpoint stores them (16-bit products on the "
      "tensor cores); a block-quantized GGUF file's dequantized to F32, exactly", "stored" },
    { GST_DFLASH_GPU_WEIGHTS_F32, "Widened to F32 (F32 products: the CPU's numbers for a "
      "float checkpoint); a block-quantized file's as with stored", "f32" },
    { GST_DFLASH_GPU_WEIGHTS_BF16, "Rounded to BF16: half F32's memory (a block-quantized "
      "file's values rounded)", "bf16" },
    { 0, NULL, NULL },
  };

  return gst_dflash_register_enum (&type, "GstDflashGpuWeights", values);
}

/* What the properties set. */
typedef struct {
  char *model_dir;
  char *drafter;
  gboolean no_drafter;
  GstDflashDrafterWeights drafter_weights;
  char *prompt;
  char *prompts_file;
  char *tokens;
  int max_new;
  int in_flight;
  double temperature, top_p;
  guint64 seed;
  GstDflashBackend backend;
  GstDflashGpuWeights gpu_weights;
  gboolean serve;
} TapSettings;

/* What a sequence is asked for: a prompt of the list (its settings the
 * properties') or a request (its own). */
typedef struct {
  guint id;
  GArray *ids;               /* the prompt's token ids */
  int max_new;
  DflSampler sampler;
  GArray *stop_ids;          /* NULL: none */
  gboolean serving;
} TapRequest;

static void
tap_request_free (TapRequest *r)
{
  if (r->ids)
    g_array_unref (r->ids);
  if (r->stop_ids)
    g_array_unref (r->stop_ids);
  g_free (r);
}

struct _GstTapSource {
  GstPushSrc parent;

  /* the properties (object lock), and the copy a run reads, taken when it
   * starts (they are mutable in READY only) */
  TapSettings props;
  TapSettings run;

  GstDflashModel *model;
  /* the target on CUDA, where the caps negotiated CUDA memory */
  gboolean cuda;
  GstDflashDevice *device;
  GPtrArray *prompts;        /* GArray of int ids, one a sequence */
  /* the rounds waiting to start, filled by verdicts (another thread) */
  GMutex lock;
  GHashTable *seqs;          /* the running sequences by id, a reference each */
  GCond cond;
  GQueue ready;              /* sequence ids */
  guint next_prompt, running;
  GQueue requests;           /* TapRequest, waiting for a place in flight */
  guint next_request;        /* the next request's id (never 0) */
  /* a request taken off the queue whose sequence is not in `seqs` yet
   * (start_sequence runs unlocked): a cancel in between marks it here */
  TapRequest *starting;
  gboolean starting_cancelled;
  gboolean flushing;
  gboolean restart;          /* a flush went downstream: start over from the first prompt */
  guint64 busy_ns;           /* the busy-time property (object lock) */
};

#define _do_init \
    GST_DEBUG_CATEGORY_INIT (gst_tap_source_debug, "tapsource", 0, "dflash tapsource");
#define gst_tap_source_parent_class parent_class
G_DEFINE_TYPE_WITH_CODE (GstTapSource, gst_tap_source, GST_TYPE_PUSH_SRC, _do_init);
GST_ELEMENT_REGISTER_DEFINE (tapsource, "tapsource", GST_RANK_NONE, GST_TYPE_TAP_SOURCE);

static void gst_tap_source_finalize (GObject *object);
static void gst_tap_source_set_context (GstElement *element, GstContext *context);
static gboolean gst_tap_source_start (GstBaseSrc *src);
static gboolean gst_tap_source_stop (GstBaseSrc *src);
static GstCaps *gst_tap_source_get_caps (GstBaseSrc *src, GstCaps *filter);
static gboolean gst_tap_source_query (GstBaseSrc *src, GstQuery *query);
static gboolean gst_tap_source_event (GstBaseSrc *src, GstEvent *event);
static gboolean gst_tap_source_unlock (GstBaseSrc *src);
static gboolean gst_tap_source_unlock_stop (GstBaseSrc *src);
static GstFlowReturn gst_tap_source_create (GstPushSrc *src, GstBuffer **buf);
static gboolean gst_tap_source_set_caps (GstBaseSrc *src, GstCaps *caps);
static guint gst_tap_source_submit_request (GstTapSource *self, GBytes *tokens,
                                            const GstStructure *settings);
static gboolean gst_tap_source_cancel_request (GstTapSource *self, guint id);

static void
gst_tap_source_get_property (GObject *object, guint prop_id, GValue *value, GParamSpec *pspec)
{
  GstTapSource *self = GST_TAP_SOURCE (object);

  switch (prop_id) {
    case PROP_RUNNING:
      g_mutex_lock (&self->lock);
      g_value_set_uint (value, self->running);
      g_mutex_unlock (&self->lock);
      break;
    case PROP_QUEUED:
      g_mutex_lock (&self->lock);
      g_value_set_uint (value, self->requests.length);
      g_mutex_unlock (&self->lock);
      break;
    default:
      gst_dflash_field_get_property (object, prop_id, value, pspec);
      break;
  }
}

static void
settings_clear (TapSettings *t)
{
  g_clear_pointer (&t->model_dir, g_free);
  g_clear_pointer (&t->drafter, g_free);
  g_clear_pointer (&t->prompt, g_free);
  g_clear_pointer (&t->prompts_file, g_free);
  g_clear_pointer (&t->tokens, g_free);
}

/* The properties for a run, copied under the object lock. */
static void
settings_take (GstTapSource *self)
{
  settings_clear (&self->run);
  GST_OBJECT_LOCK (self);
  self->run = self->props;
  self->run.model_dir = g_strdup (self->props.model_dir);
  self->run.drafter = g_strdup (self->props.drafter);
  self->run.prompt = g_strdup (self->props.prompt);
  self->run.prompts_file = g_strdup (self->props.prompts_file);
  self->run.tokens = g_strdup (self->props.tokens);
  GST_OBJECT_UNLOCK (self);
}

static gboolean
gst_tap_source_negotiate (GstBaseSrc *src)
{
  GstCaps *mine = gst_tap_source_get_caps (src, NULL);
  GstCaps *peer = gst_pad_peer_query_caps (GST_BASE_SRC_PAD (src), NULL);
  gboolean ok = TRUE;

  if (peer && !gst_caps_is_any (peer) && !gst_caps_can_intersect (mine, peer)) {
    GString *why = g_string_new (NULL);
    GstCaps *first = gst_caps_copy_nth (peer, 0);
    if (gst_dflash_caps_agree (mine, first, why)) {
      /* the fields agree: the memory does not */
      GstCaps *offer = gst_caps_copy_nth (mine, 0);
      gst_dflash_caps_explain_refusal (GST_BASE_SRC_PAD (src), offer, why);
      gst_caps_unref (offer);
    }
    GST_ELEMENT_ERROR (src, CORE, NEGOTIATION, ("downstream does not take the model's taps: %s",
        why->str), ("offered %" GST_PTR_FORMAT ", downstream takes %" GST_PTR_FORMAT, mine, peer));
    g_string_free (why, TRUE);
    gst_caps_unref (first);
    ok = FALSE;
  }
  gst_caps_unref (mine);
  gst_clear_caps (&peer);
  return ok && GST_BASE_SRC_CLASS (parent_class)->negotiate (src);
}

static void
gst_tap_source_class_init (GstTapSourceClass *klass)
{
  GObjectClass *gobject_class = G_OBJECT_CLASS (klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS (klass);
  GstBaseSrcClass *basesrc_class = GST_BASE_SRC_CLASS (klass);
  GstPushSrcClass *pushsrc_class = GST_PUSH_SRC_CLASS (klass);

  gobject_class->finalize = gst_tap_source_finalize;
  gobject_class->set_property = gst_dflash_field_set_property;
  gobject_class->get_property = gst_tap_source_get_property;

  /**
   * GstTapSource:model
   *
   * The target: a Qwen3 checkpoint folder (config.json, model.safetensors or
   * shards, tokenizer.json), or a .gguf file as llama.cpp writes a Qwen3
   * model (its tokenizer in its tokenizer.ggml metadata; its drafter, where
   * the drafter property names none, X.dflash.safetensors beside X.gguf).
   */
  gst_dflash_install_field_property (gobject_class, PROP_MODEL,
      g_param_spec_string ("model", "Model",
          "Qwen3 checkpoint folder or .gguf file of the target (default: $DFLASH_MODEL, else the embedded default)",
          DFL_DEFAULT_MODEL, G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY),
      G_STRUCT_OFFSET (GstTapSource, props.model_dir));
  /**
   * GstTapSource:drafter
   *
   * The drafter: a DFlash 2 sidecar or a released DFlash folder; empty for
   * dflash.safetensors in the model folder (X.dflash.safetensors beside a
   * model X.gguf).
   */
  gst_dflash_install_field_property (gobject_class, PROP_DRAFTER,
      g_param_spec_string ("drafter", "Drafter",
          "DFlash sidecar file or released DFlash folder (empty: dflash.safetensors in the model folder, X.dflash.safetensors beside a model X.gguf)",
          NULL, G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY),
      G_STRUCT_OFFSET (GstTapSource, props.drafter));
  gst_dflash_install_field_property (gobject_class, PROP_NO_DRAFTER,
      g_param_spec_boolean ("no-drafter", "No drafter",
          "Load no drafter: plain decoding or the chain drafter alone",
          FALSE, G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY),
      G_STRUCT_OFFSET (GstTapSource, props.no_drafter));
  gst_dflash_install_field_property (gobject_class, PROP_DRAFTER_WEIGHTS,
      g_param_spec_enum ("drafter-weights", "Drafter weights",
          "How the drafter holds its matrices on the CPU (q8_0: quantized when bound, about "
          "twice as fast a block, the output the same, kept in the user's cache folder, "
          "gst-dflash/drafter, for the next process to map; stored: the sidecar's, the "
          "reference's exact drafts). On a GPU gpu-weights says",
          GST_TYPE_DFLASH_DRAFTER_WEIGHTS, GST_DFLASH_DRAFTER_WEIGHTS_Q8_0,
          G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY),
      G_STRUCT_OFFSET (GstTapSource, props.drafter_weights));
  gst_dflash_install_field_property (gobject_class, PROP_PROMPT,
      g_param_spec_string ("prompt", "Prompt",
          "The prompt text (used when prompts-file is not set)",
          DEFAULT_PROMPT, G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY),
      G_STRUCT_OFFSET (GstTapSource, props.prompt));
  gst_dflash_install_field_property (gobject_class, PROP_PROMPTS_FILE,
      g_param_spec_string ("prompts-file", "Prompts file",
          "A file of prompts, one a line (\\n and \\t escapes); each is a sequence",
          NULL, G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY),
      G_STRUCT_OFFSET (GstTapSource, props.prompts_file));
  gst_dflash_install_field_property (gobject_class, PROP_TOKENS,
      g_param_spec_string ("tokens", "Tokens",
          "The prompt as token ids, comma-separated (instead of prompt and prompts-file)",
          NULL, G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY),
      G_STRUCT_OFFSET (GstTapSource, props.tokens));
  gst_dflash_install_field_property (gobject_class, PROP_MAX_NEW_TOKENS,
      g_param_spec_int ("max-new-tokens", "Max new tokens",
          "Tokens to generate at most for each prompt", 1, G_MAXINT / 2, DEFAULT_MAX_NEW,
          G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY),
      G_STRUCT_OFFSET (GstTapSource, props.max_new));
  gst_dflash_install_field_property (gobject_class, PROP_IN_FLIGHT,
      g_param_spec_int ("in-flight", "In flight",
          "Sequences running at once", 1, 1024, DEFAULT_IN_FLIGHT,
          G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY),
      G_STRUCT_OFFSET (GstTapSource, props.in_flight));
  gst_dflash_install_field_property (gobject_class, PROP_TEMPERATURE,
      g_param_spec_double ("temperature", "Temperature",
          "Sampling temperature of the target (0: greedy)", 0.0, DFL_SAMPLER_MAX_TEMPERATURE, 0.0,
          G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY),
      G_STRUCT_OFFSET (GstTapSource, props.temperature));
  gst_dflash_install_field_property (gobject_class, PROP_TOP_P,
      g_param_spec_double ("top-p", "Top p",
          "Sample from the smallest set of tokens holding this much probability",
          DFL_SAMPLER_MIN_TOP_P, 1.0, 1.0,
          G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY),
      G_STRUCT_OFFSET (GstTapSource, props.top_p));
  gst_dflash_install_field_property (gobject_class, PROP_SEED,
      g_param_spec_uint64 ("seed", "Seed",
          "Seed of the sampling stream (a sequence's stream is keyed by seed + its index)",
          0, G_MAXUINT64, 0,
          G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY),
      G_STRUCT_OFFSET (GstTapSource, props.seed));
  /**
   * GstTapSource:backend
   *
   * Where the target runs for the whole loop: cpu (taps in system memory),
   * cuda (the target and each sequence's cache on the card, taps in CUDA
   * memory, the verifier verifying there too), or auto: CUDA only where
   * downstream takes nothing but CUDA taps (a ctxsettle with backend=cuda),
   * else the CPU, so auto never needs a GPU. The elements put no target on
   * Vulkan (under a Vulkan drafter it stays on the CPU; the core runs one
   * there, but no pipeline here hands its taps on as Vulkan memory):
   * vulkan is refused.
   */
  gst_dflash_install_backend_property (gobject_class, PROP_BACKEND,
      "Where the target runs (auto: CUDA only where downstream takes only CUDA memory, else "
      "the CPU; cpu; cuda); the verifier verifies where the target ran",
      G_STRUCT_OFFSET (GstTapSource, props.backend));
  gst_dflash_install_field_property (gobject_class, PROP_GPU_WEIGHTS,
      g_param_spec_enum ("gpu-weights", "GPU weights",
          "How the target's and drafter's matrices go onto a CUDA card (stored; f32: the CPU's "
          "numbers; bf16: half F32's memory, rounded). A block-quantized GGUF file's go on "
          "dequantized to F32, exact, with stored or f32",
          GST_TYPE_DFLASH_GPU_WEIGHTS, GST_DFLASH_GPU_WEIGHTS_STORED,
          G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY),
      G_STRUCT_OFFSET (GstTapSource, props.gpu_weights));
  gst_dflash_install_busy_time_property (gobject_class, PROP_BUSY_TIME,
      "Nanoseconds spent running the target over prompts so far",
      G_STRUCT_OFFSET (GstTapSource, busy_ns));
  /**
   * GstTapSource:serve
   *
   * Serve requests: after the prompts of `tokens` or `prompts-file` (the
   * `prompt` property is not run), wait for requests (`submit-request`)
   * instead of ending.
   */
  gst_dflash_install_field_property (gobject_class, PROP_SERVE,
      g_param_spec_boolean ("serve", "Serve",
          "Wait for requests (the submit-request signal) instead of ending after the prompts of "
          "tokens or prompts-file (prompt is not run)",
          FALSE, G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_READY),
      G_STRUCT_OFFSET (GstTapSource, props.serve));
  g_object_class_install_property (gobject_class, PROP_RUNNING,
      g_param_spec_uint ("running", "Running", "Sequences running now (prompts and requests)",
          0, G_MAXUINT, 0, G_PARAM_READABLE | G_PARAM_STATIC_STRINGS));
  g_object_class_install_property (gobject_class, PROP_QUEUED,
      g_param_spec_uint ("queued", "Queued",
          "Requests waiting for a place among the in-flight sequences",
          0, G_MAXUINT, 0, G_PARAM_READABLE | G_PARAM_STATIC_STRINGS));

  /**
   * GstTapSource::submit-request:
   * @tapsource: the element
   * @tokens: the prompt, token ids as native-endian 32-bit integers
   * @settings: (nullable): a structure of the request's settings:
   *   `max-tokens` (int, default max-new-tokens), `temperature` (double),
   *   `top-p` (double), `seed` (guint64; the request's sampling stream, as
   *   `dflash generate --seed` keys its one prompt), `stop-ids` (GBytes of
   *   32-bit ids that end it besides the target's EOS)
   *
   * Queues a request of a serving tapsource (in PAUSED or PLAYING).
   * Returns: its id, which its rounds, text and tokens carry as their
   * sequence; 0 where it is refused (not serving, no tokens, an id outside
   * the vocabulary, a setting out of range, no room in the context), which
   * a warning in the log explains.
   */
  signals[SIGNAL_SUBMIT_REQUEST] = g_signal_new_class_handler ("submit-request",
      G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST | G_SIGNAL_ACTION,
      G_CALLBACK (gst_tap_source_submit_request), NULL, NULL, NULL,
      G_TYPE_UINT, 2, G_TYPE_BYTES, GST_TYPE_STRUCTURE);
  /**
   * GstTapSource::cancel-request:
   * @tapsource: the element
   * @id: a request's id
   *
   * Drops a request: a queued one at once, a running one at its next
   * round (its state goes with it).
   * Returns: whether the request was queued or running.
   */
  signals[SIGNAL_CANCEL_REQUEST] = g_signal_new_class_handler ("cancel-request",
      G_TYPE_FROM_CLASS (klass), G_SIGNAL_RUN_LAST | G_SIGNAL_ACTION,
      G_CALLBACK (gst_tap_source_cancel_request), NULL, NULL, NULL,
      G_TYPE_BOOLEAN, 1, G_TYPE_UINT);

  gst_element_class_set_static_metadata (element_class, "DFlash tap source",
      "Source/Tensor", "Runs the target over prompts and starts each speculative round",
      "gst-dflash developers");
  {
    GstCaps *caps = gst_dflash_tensor_caps (GST_DFLASH_TAPS_CAPS TAPS_FIELDS, TAPS_BACKENDS);
    gst_element_class_add_pad_template (element_class,
        gst_pad_template_new ("src", GST_PAD_SRC, GST_PAD_ALWAYS, caps));
    gst_caps_unref (caps);
  }
  element_class->set_context = GST_DEBUG_FUNCPTR (gst_tap_source_set_context);

  basesrc_class->start = GST_DEBUG_FUNCPTR (gst_tap_source_start);
  basesrc_class->stop = GST_DEBUG_FUNCPTR (gst_tap_source_stop);
  basesrc_class->get_caps = GST_DEBUG_FUNCPTR (gst_tap_source_get_caps);
  basesrc_class->query = GST_DEBUG_FUNCPTR (gst_tap_source_query);
  basesrc_class->event = GST_DEBUG_FUNCPTR (gst_tap_source_event);
  basesrc_class->unlock = GST_DEBUG_FUNCPTR (gst_tap_source_unlock);
  basesrc_class->unlock_stop = GST_DEBUG_FUNCPTR (gst_tap_source_unlock_stop);
  basesrc_class->negotiate = GST_DEBUG_FUNCPTR (gst_tap_source_negotiate);
  pushsrc_class->create = GST_DEBUG_FUNCPTR (gst_tap_source_create);
  basesrc_class->set_caps = GST_DEBUG_FUNCPTR (gst_tap_source_set_caps);
  gst_type_mark_as_plugin_api (GST_TYPE_DFLASH_BACKEND, 0);
  gst_type_mark_as_plugin_api (GST_TYPE_DFLASH_GPU_WEIGHTS, 0);
  gst_type_mark_as_plugin_api (GST_TYPE_DFLASH_DRAFTER_WEIGHTS, 0);
}

static void
gst_tap_source_init (GstTapSource *self)
{
  /* DFLASH_MODEL names another default (tests point it at their tiny
   * checkpoint) */
  self->props.model_dir = g_strdup (g_getenv ("DFLASH_MODEL") && *g_getenv ("DFLASH_MODEL")
                                    ? g_getenv ("DFLASH_MODEL") : DFL_DEFAULT_MODEL);
  self->props.prompt = g_strdup (DEFAULT_PROMPT);
  self->props.max_new = DEFAULT_MAX_NEW;
  self->props.in_flight = DEFAULT_IN_FLIGHT;
  self->props.top_p = 1.0;
  g_mutex_init (&self->lock);
  g_cond_init (&self->cond);
  g_queue_init (&self->ready);
  g_queue_init (&self->requests);
  self->next_request = 1;
  self->seqs = g_hash_table_new_full (NULL, NULL, NULL, (GDestroyNotify) gst_dflash_seq_unref);
  gst_base_src_set_format (GST_BASE_SRC (self), GST_FORMAT_TIME);
  gst_base_src_set_live (GST_BASE_SRC (self), FALSE);
}

static void
gst_tap_source_finalize (GObject *object)
{
  GstTapSource *self = GST_TAP_SOURCE (object);

  settings_clear (&self->props);
  settings_clear (&self->run);
  g_clear_object (&self->model);
  gst_clear_object (&self->device);
  g_clear_pointer (&self->prompts, g_ptr_array_unref);
  g_queue_clear (&self->ready);
  g_queue_clear_full (&self->requests, (GDestroyNotify) tap_request_free);
  g_hash_table_unref (self->seqs);
  g_mutex_clear (&self->lock);
  g_cond_clear (&self->cond);
  G_OBJECT_CLASS (parent_class)->finalize (object);
}

static void
gst_tap_source_set_context (GstElement *element, GstContext *context)
{
  GstTapSource *self = GST_TAP_SOURCE (element);

  /* an application may hand in a model it loaded (several pipelines, one model) */
  gst_dflash_model_handle_set_context (element, context, &self->model);
  gst_dflash_device_handle_set_context (element, context, GST_DFLASH_BACKEND_CUDA, &self->device);
  GST_ELEMENT_CLASS (parent_class)->set_context (element, context);
}


/* The model the properties name, unless an application handed one in;
 * the elements downstream and the bin learn of it. */
static gboolean
load_model (GstTapSource *self)
{
  const TapSettings *run = &self->run;
  g_autoptr (GError) error = NULL;

  if (self->model)
    return TRUE;
  if (!run->model_dir || !*run->model_dir)
    goto no_folder;
  if (!(self->model = gst_dflash_model_new (run->model_dir, run->drafter, run->no_drafter,
                                            run->drafter_weights, &error)))
    goto open_failed;
  gst_element_post_message (GST_ELEMENT (self), gst_message_new_have_context (GST_OBJECT (self),
          gst_dflash_model_context_new (self->model)));
  return TRUE;

  /* ERRORS */
no_folder:
  {
    GST_ELEMENT_ERROR (self, RESOURCE, NOT_FOUND, ("no model folder set (property 'model')"),
        (NULL));
    return FALSE;
  }
open_failed:
  {
    GST_ELEMENT_ERROR (self, RESOURCE, OPEN_READ, ("%s", error->message),
        ("model %s, drafter %s", run->model_dir, run->no_drafter ? "none"
         : run->drafter ? run->drafter : "beside the model"));
    return FALSE;
  }
}

/* The tokens property: one prompt of ids. */
static gboolean
parse_tokens (GstTapSource *self)
{
  GArray *ids = g_array_new (FALSE, FALSE, sizeof (int));
  int vocab = dfl_target_config (gst_dflash_model_target (self->model))->vocab;
  g_auto (GStrv) parts = g_strsplit (self->run.tokens, ",", -1);
  const char *t = NULL;

  g_ptr_array_add (self->prompts, ids);
  for (int i = 0; parts[i]; i++) {
    char *end = NULL;
    gint64 v;
    t = g_strstrip (parts[i]);
    v = g_ascii_strtoll (t, &end, 10);
    if (!*t || *end || v < 0 || v >= vocab)
      goto not_a_token;
    g_array_append_val (ids, (int) { (int) v });
  }
  if (ids->len == 0)
    goto empty;
  return TRUE;

  /* ERRORS */
not_a_token:
  {
    GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS,
        ("tokens: '%s' is not a token id of %s (0 … %d)", t, self->run.model_dir, vocab - 1),
        (NULL));
    return FALSE;
  }
empty:
  {
    GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS, ("tokens: the list is empty"), (NULL));
    return FALSE;
  }
}

/* The text prompts (prompts-file, else prompt), encoded. */
static gboolean
encode_prompts (GstTapSource *self)
{
  const TapSettings *run = &self->run;
  g_autoptr (GError) error = NULL;
  g_autoptr (GPtrArray) texts = NULL;
  const DflTokenizer *tok;
  GArray *ids = NULL;
  guint i;

  if (run->prompts_file && *run->prompts_file) {
    if (!(texts = dfl_read_prompts (run->prompts_file, &error)))
      goto no_prompts;
  } else {
    texts = g_ptr_array_new_with_free_func (g_free);
    g_ptr_array_add (texts, g_strdup (run->prompt ? run->prompt : ""));
  }
  if (!(tok = gst_dflash_model_tokenizer (self->model)))
    goto no_tokenizer;
  for (i = 0; i < texts->len; i++) {
    if (!(ids = dfl_tokenizer_encode (tok, g_ptr_array_index (texts, i), -1, &error))
        || ids->len == 0)
      goto bad_prompt;
    g_ptr_array_add (self->prompts, ids);
  }
  return TRUE;

  /* ERRORS */
no_prompts:
  {
    GST_ELEMENT_ERROR (self, RESOURCE, OPEN_READ, ("%s", error->message),
        ("prompts-file %s", run->prompts_file));
    return FALSE;
  }
no_tokenizer:
  {
    GST_ELEMENT_ERROR (self, RESOURCE, NOT_FOUND,
        ("%s has no tokenizer (tokenizer.json, or a .gguf file's tokenizer.ggml metadata): it is needed for text prompts", run->model_dir),
        ("use the tokens property for a prompt of ids"));
    return FALSE;
  }
bad_prompt:
  {
    GST_ELEMENT_ERROR (self, RESOURCE, READ, ("prompt %u: %s", i + 1,
            ids ? "the prompt is empty" : error->message), (NULL));
    if (ids)
      g_array_unref (ids);
    return FALSE;
  }
}

static gboolean
gst_tap_source_start (GstBaseSrc *src)
{
  GstTapSource *self = GST_TAP_SOURCE (src);
  g_autoptr (GError) error = NULL;
  GstDflashBackend backend;

  settings_take (self);
  backend = self->run.backend;
  if (!gst_dflash_element_check_target_backend (GST_ELEMENT (self), backend,
          "under a Vulkan drafter it stays on the CPU: set backend=vulkan on ctxsettle"))
    return FALSE;
  /* a forced CUDA finds its device when the element starts: a machine
   * without one fails here, saying why */
  if (backend == GST_DFLASH_BACKEND_CUDA
      && !gst_dflash_device_ensure (GST_ELEMENT (self), GST_BASE_SRC_PAD (self),
                                    GST_DFLASH_BACKEND_CUDA, &self->device, &error))
    goto no_device;
  if (!load_model (self))
    return FALSE;
  self->prompts = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
  if (self->run.tokens && *self->run.tokens ? !parse_tokens (self)
      : (!self->run.serve || (self->run.prompts_file && *self->run.prompts_file))
      && !encode_prompts (self))
    return FALSE;
  g_mutex_lock (&self->lock);
  /* requests' ids follow the prompts' (their indices), never 0 */
  self->next_request = MAX (self->next_request, MAX (self->prompts->len, 1));
  self->next_prompt = 0;
  self->running = 0;
  self->flushing = FALSE;
  self->restart = FALSE;
  g_queue_clear (&self->ready);
  g_mutex_unlock (&self->lock);
  GST_INFO_OBJECT (self, "%u prompts, %d in flight, drafter %s", self->prompts->len,
                   self->run.in_flight, gst_dflash_model_drafter_path (self->model));
  return TRUE;

  /* ERRORS */
no_device:
  {
    GST_ELEMENT_ERROR (self, RESOURCE, NOT_FOUND, ("%s", error->message), (NULL));
    return FALSE;
  }
}

static gboolean
gst_tap_source_stop (GstBaseSrc *src)
{
  GstTapSource *self = GST_TAP_SOURCE (src);

  g_clear_pointer (&self->prompts, g_ptr_array_unref);
  g_mutex_lock (&self->lock);
  /* a round still in a buffer somewhere keeps its sequence until it goes */
  g_hash_table_remove_all (self->seqs);
  g_queue_clear (&self->ready);
  g_queue_clear_full (&self->requests, (GDestroyNotify) tap_request_free);
  self->running = 0;
  g_mutex_unlock (&self->lock);
  return TRUE;
}

static GstCaps *
gst_tap_source_get_caps (GstBaseSrc *src, GstCaps *filter)
{
  GstTapSource *self = GST_TAP_SOURCE (src);
  GstCaps *caps;

  if (self->model) {
    const DflQwen3Config *c = dfl_target_config (gst_dflash_model_target (self->model));
    const DflDrafterGeometry *g = gst_dflash_model_geometry (self->model);
    GstCaps *plain = gst_caps_new_simple (GST_DFLASH_TAPS_CAPS,
        "hidden", G_TYPE_INT, c->hidden,
        "tap-width", G_TYPE_INT, gst_dflash_model_tap_width (self->model),
        "vocab", G_TYPE_INT, c->vocab,
        "block", G_TYPE_INT, g ? g->block : 16, NULL);
    g_autofree char *structure = gst_caps_to_string (plain);
    GstDflashBackend backend;
    guint backends;
    GST_OBJECT_LOCK (self);
    backend = self->props.backend;
    GST_OBJECT_UNLOCK (self);
    backends = backend == GST_DFLASH_BACKEND_CPU ? 1u << GST_DFLASH_BACKEND_CPU
               : backend == GST_DFLASH_BACKEND_CUDA ? 1u << GST_DFLASH_BACKEND_CUDA
               : TAPS_BACKENDS;
    /* system memory first: auto takes the CPU wherever downstream does */
    caps = gst_dflash_tensor_caps (structure, backends);
    gst_caps_unref (plain);
  } else {
    caps = gst_pad_get_pad_template_caps (GST_BASE_SRC_PAD (src));
  }
  if (filter) {
    GstCaps *tmp = gst_caps_intersect_full (filter, caps, GST_CAPS_INTERSECT_FIRST);
    gst_caps_unref (caps);
    caps = tmp;
  }
  return caps;
}

static gboolean
gst_tap_source_query (GstBaseSrc *src, GstQuery *query)
{
  GstTapSource *self = GST_TAP_SOURCE (src);

  if (GST_QUERY_TYPE (query) == GST_QUERY_CONTEXT
      && (gst_dflash_model_handle_context_query (GST_ELEMENT (self), query, self->model)
          || gst_dflash_device_handle_context_query (GST_ELEMENT (self), query, self->device)))
    return TRUE;
  return GST_BASE_SRC_CLASS (parent_class)->query (src, query);
}

/* The property's choice as the core names it. */
static DflTargetWeights
target_weights (GstTapSource *self)
{
  switch (self->run.gpu_weights) {
  case GST_DFLASH_GPU_WEIGHTS_F32:
    return DFL_TARGET_F32;
  case GST_DFLASH_GPU_WEIGHTS_BF16:
    return DFL_TARGET_BF16;
  case GST_DFLASH_GPU_WEIGHTS_STORED:
  default:
    return DFL_TARGET_AS_STORED;
  }
}

/* The negotiated memory says where the target runs: on CUDA, the device
 * and the target's weights on it are made now, before the first prompt. */
static gboolean
gst_tap_source_set_caps (GstBaseSrc *src, GstCaps *caps)
{
  GstTapSource *self = GST_TAP_SOURCE (src);
  g_autoptr (GError) error = NULL;

  self->cuda = gst_dflash_caps_backend (caps) == GST_DFLASH_BACKEND_CUDA;
  if (!self->cuda)
    return TRUE;
  if (!gst_dflash_device_ensure (GST_ELEMENT (self), GST_BASE_SRC_PAD (self),
                                 GST_DFLASH_BACKEND_CUDA, &self->device, &error)
      || !gst_dflash_device_target (self->device, self->model, target_weights (self), &error))
    goto no_device_target;
  GST_INFO_OBJECT (self, "the target runs on %s", gst_dflash_device_describe (self->device));
  return TRUE;

  /* ERRORS */
no_device_target:
  {
    GST_ELEMENT_ERROR (self, RESOURCE, NOT_FOUND, ("%s", error->message),
        ("the caps negotiated CUDA memory: %" GST_PTR_FORMAT, caps));
    return FALSE;
  }
}

/* The verdict of a round: its sequence may start its next round. Called in
 * the verifier's streaming thread; only queues the work. */
static gboolean
gst_tap_source_event (GstBaseSrc *src, GstEvent *event)
{
  GstTapSource *self = GST_TAP_SOURCE (src);
  guint seq, round;
  gint64 pos;
  gint accepted, bonus;
  gboolean done;

  if (gst_dflash_verdict_event_parse (event, &seq, &round, &pos, &accepted, &bonus, &done)) {
    GST_LOG_OBJECT (self, "verdict: sequence %u round %u accepted %d%s", seq, round, accepted,
                    done ? " (done)" : "");
    g_mutex_lock (&self->lock);
    g_queue_push_tail (&self->ready, GUINT_TO_POINTER (seq));
    g_cond_signal (&self->cond);
    g_mutex_unlock (&self->lock);
    return TRUE;
  }
  return GST_BASE_SRC_CLASS (parent_class)->event (src, event);
}

static gboolean
gst_tap_source_unlock (GstBaseSrc *src)
{
  GstTapSource *self = GST_TAP_SOURCE (src);

  g_mutex_lock (&self->lock);
  self->flushing = TRUE;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
  return TRUE;
}

/* GstBaseSrc unlocks create() for a flush, but also for an EOS sent to the
 * element and for a seek without a flush: only a flush (our pad is
 * flushing, the flush-start went downstream) drops the rounds in flight, so
 * only then do the sequences start over. The sequences are forgotten in
 * create(), in the streaming thread: here another thread may still be
 * pushing a round through the elements after this one (no queue between),
 * and they read the sequence the round belongs to. */
static gboolean
gst_tap_source_unlock_stop (GstBaseSrc *src)
{
  GstTapSource *self = GST_TAP_SOURCE (src);
  gboolean flush = GST_PAD_IS_FLUSHING (GST_BASE_SRC_PAD (src));

  g_mutex_lock (&self->lock);
  self->flushing = FALSE;
  if (flush)
    self->restart = TRUE;
  g_mutex_unlock (&self->lock);
  return TRUE;
}

/* The buffer of a round: the meta, and the context rows as payload (host
 * rows `taps`, or `device_taps`, a buffer of them on the card, taken). */
static GstBuffer *
round_buffer (GstTapSource *self, GstDflashSeq *s, gint64 ctx_pos, const float *taps,
              GstBuffer *device_taps, int rows, int new_from)
{
  const DflQwen3Config *c = dfl_target_config (gst_dflash_model_target (self->model));
  int tw = gst_dflash_model_tap_width (self->model);
  GstDflashRoundMeta proto = { 0 };
  GstBuffer *buf;

  proto.seq = s;
  proto.sequence = s->id;
  proto.round = s->rounds;
  proto.anchor = g_array_index (s->tokens, int, s->tokens->len - 1);
  proto.anchor_pos = s->tokens->len - 1;
  proto.ctx_pos = ctx_pos;
  proto.ctx_rows = rows;
  proto.tip = g_bytes_new (s->tip, sizeof (float) * c->hidden);
  proto.new_tokens = g_bytes_new (&g_array_index (s->tokens, int, new_from),
                                  sizeof (int) * (s->tokens->len - new_from));
  if (device_taps) {
    /* the taps stay on the card: the buffer is theirs, the meta added */
    GstBuffer *meta_only = gst_dflash_round_buffer_new (&proto, NULL, NULL);
    buf = device_taps;
    gst_buffer_copy_into (buf, meta_only, GST_BUFFER_COPY_METADATA, 0, -1);
    gst_buffer_unref (meta_only);
  } else {
    buf = gst_dflash_round_buffer_new (&proto,
        tw && rows && taps ? g_bytes_new (taps, sizeof (float) * (gsize) rows * tw) : NULL, NULL);
  }
  g_bytes_unref (proto.tip);
  g_bytes_unref (proto.new_tokens);
  return buf;
}

/* The prompt's pass on the target where it runs (the model's, or the
 * model's on the card where the caps negotiated CUDA memory): the
 * sequence's cache made there with room for the whole generation. On the
 * card the taps go into a buffer of its memory (they stay there for
 * ctxsettle); on the host into `host_taps`. The round's prefill step
 * (round.h) picks the first token and keeps the last row's final-normed
 * row as the sequence's tip. */
static gboolean
prefill (GstTapSource *self, GstDflashSeq *s, GArray *ids, float *host_taps, int *first,
         GstBuffer **device_taps, GError **error)
{
  const DflDrafterGeometry *g = gst_dflash_model_geometry (self->model);
  const DflTarget *t = self->cuda
      ? gst_dflash_device_target (self->device, self->model, target_weights (self), error)
      : gst_dflash_model_target (self->model);
  int n = ids->len, tw = gst_dflash_model_tap_width (self->model);
  DflRoundTaps want = { 0 };
  GstMemory *mem = NULL;
  DflTensor tensor;

  if (!t)
    return FALSE;
  if (self->cuda)
    s->device = gst_object_ref (self->device);
  s->kv = dfl_target_seq_new (t);
  if (!dfl_target_seq_reserve (s->kv, MIN (dfl_target_config (t)->max_positions,
                                           n + s->max_new + (g ? g->block : 1)), error))
    return FALSE;
  if (g && tw) {
    want.layers = g->taps;
    want.n_layers = g->n_taps;
    want.host = host_taps;
  }
  if (g && tw && dfl_target_device (t)) {
    if (!(mem = gst_dflash_device_allocator_alloc_checked (
              gst_dflash_device_allocator (self->device), sizeof (float) * (gsize) n * tw, error)))
      return FALSE;
    tensor = dfl_tensor_2d (gst_dflash_device_dfl (self->device),
                            gst_dflash_device_memory_handle (mem), mem->offset, DFL_DTYPE_F32, n,
                            tw);
    want.host = NULL;
    want.device = &tensor;
  }
  if (!dfl_round_prefill (s->kv, (const int *) ids->data, n, &s->sampler, &want, s->tip, first,
                          error)) {
    if (mem)
      gst_memory_unref (mem);
    return FALSE;
  }
  if (mem) {
    *device_taps = gst_buffer_new ();
    gst_buffer_append_memory (*device_taps, mem);
  }
  return TRUE;
}

/* Room in the context for `n` prompt tokens, `max_new` new ones and one
 * block (the verifier's last round may reach that far). */
static gboolean
fits_context (GstTapSource *self, int n, int max_new)
{
  const DflDrafterGeometry *g = gst_dflash_model_geometry (self->model);
  const DflQwen3Config *c = dfl_target_config (gst_dflash_model_target (self->model));

  return (gint64) n + max_new + (g ? g->block : 1) <= c->max_positions;
}

/* Prefill a prompt or a request (`index`: its sequence id): its first token
 * is the first anchor. */
static GstFlowReturn
start_sequence (GstTapSource *self, guint index, const TapRequest *req, GstBuffer **buf)
{
  const DflTarget *t = gst_dflash_model_target (self->model);
  const DflQwen3Config *c = dfl_target_config (t);
  const DflDrafterGeometry *g = gst_dflash_model_geometry (self->model);
  GArray *ids = req->ids;
  int n = ids->len, tw = gst_dflash_model_tap_width (self->model), first;
  g_autoptr (GError) error = NULL;
  g_autofree float *taps = NULL;
  GstDflashSeq *s;
  GstBuffer *device_taps = NULL;
  gint64 t0 = g_get_monotonic_time ();

  if (!fits_context (self, n, req->max_new))
    goto too_long;
  s = gst_dflash_seq_new (self->model, index);
  s->max_new = req->max_new;
  s->sampler = req->sampler;
  s->stop_ids = req->stop_ids ? g_array_ref (req->stop_ids) : NULL;
  s->serving = req->serving;
  g_mutex_lock (&self->lock);
  g_hash_table_replace (self->seqs, GUINT_TO_POINTER (index), s);
  if (self->starting == req) {
    /* cancelled on its way here: it goes at its first verdict */
    if (self->starting_cancelled)
      g_atomic_int_set (&s->cancelled, 1);
    self->starting = NULL;
  }
  g_mutex_unlock (&self->lock);
  if (g && !self->cuda)
    taps = g_new (float, (gsize) n * tw);
  if (!prefill (self, s, ids, taps, &first, &device_taps, &error))
    goto prefill_failed;
  g_array_append_vals (s->tokens, ids->data, n);
  g_array_append_val (s->tokens, first);
  s->prompt_len = n;
  /* the prompt and the first token are the round's new tokens */
  *buf = round_buffer (self, s, 0, taps, g_steal_pointer (&device_taps), n, 0);
  GST_OBJECT_LOCK (self);
  self->busy_ns += (g_get_monotonic_time () - t0) * 1000;
  GST_OBJECT_UNLOCK (self);
  GST_DEBUG_OBJECT (self, "sequence %u: %d prompt tokens, first token %d", index, n, first);
  return GST_FLOW_OK;

  /* ERRORS */
too_long:
  {
    /* room for the prompt, every new token and one block */
    int block = g ? g->block : 1;
    gint64 room = (gint64) c->max_positions - block - n;
    if (room < 1)
      GST_ELEMENT_ERROR (self, STREAM, FAILED,
          ("prompt %u has %d tokens, more than the context of %s holds (max_position_embeddings "
           "%d, less a block of %d: at most %d prompt tokens)", index + 1, n, dfl_target_dir (t),
           c->max_positions, block, MAX (c->max_positions - block - 1, 0)), (NULL));
    else
      GST_ELEMENT_ERROR (self, STREAM, FAILED,
          ("prompt %u has %d tokens: with max-new-tokens %d it passes the context of %s "
           "(max_position_embeddings %d); with this prompt max-new-tokens may be at most %"
           G_GINT64_FORMAT, index + 1, n, req->max_new, dfl_target_dir (t), c->max_positions,
           room), (NULL));
    return GST_FLOW_ERROR;
  }
prefill_failed:
  {
    GST_ELEMENT_ERROR (self, STREAM, FAILED, ("could not run the target over prompt %u: %s",
            index + 1, error->message), ("sequence %u", index));
    return GST_FLOW_ERROR;
  }
}

static GstFlowReturn
gst_tap_source_create (GstPushSrc *src, GstBuffer **buf)
{
  GstTapSource *self = GST_TAP_SOURCE (src);

  g_mutex_lock (&self->lock);
  if (self->restart) {
    /* after a flush no round of ours is anywhere downstream: the
     * sequences can go */
    self->restart = FALSE;
    g_queue_clear (&self->ready);
    self->next_prompt = 0;
    self->running = 0;
    g_hash_table_remove_all (self->seqs);
  }
  for (;;) {
    if (self->flushing) {
      g_mutex_unlock (&self->lock);
      return GST_FLOW_FLUSHING;
    }
    if (!g_queue_is_empty (&self->ready)) {
      guint id = GPOINTER_TO_UINT (g_queue_pop_head (&self->ready));
      GstDflashSeq *s = g_hash_table_lookup (self->seqs, GUINT_TO_POINTER (id));
      if (s && (s->done || g_atomic_int_get (&s->cancelled))) {
        g_hash_table_remove (self->seqs, GUINT_TO_POINTER (id));
        self->running--;
        continue;
      }
      g_mutex_unlock (&self->lock);
      if (!s) {
        GST_WARNING_OBJECT (self, "a verdict for sequence %u, which is not running", id);
      } else {
        /* the rows the verifier kept are the new context; the round
         * continues from the bonus token */
        gint64 ctx_pos = s->tokens->len - 1 - s->taps_rows;
        if (dfl_target_device (dfl_target_seq_target (s->kv)) && !s->taps_buf
            && gst_dflash_model_tap_width (self->model)) {
          GST_ELEMENT_ERROR (self, STREAM, FAILED, ("the verifier left no taps on the card for "
                  "a sequence's next round"), ("sequence %u", id));
          return GST_FLOW_ERROR;
        }
        *buf = round_buffer (self, s, ctx_pos, s->taps, g_steal_pointer (&s->taps_buf),
                             s->taps_rows, s->tokens->len - s->taps_rows);
        return GST_FLOW_OK;
      }
      g_mutex_lock (&self->lock);
      continue;
    }
    if (self->running < (guint) self->run.in_flight && self->next_prompt < self->prompts->len) {
      guint index = self->next_prompt++;
      TapRequest prompt = {
        .ids = g_ptr_array_index (self->prompts, index), .max_new = self->run.max_new,
        .sampler = { .temperature = self->run.temperature, .top_p = self->run.top_p,
                     .seed = self->run.seed + index } };
      self->running++;
      g_mutex_unlock (&self->lock);
      return start_sequence (self, index, &prompt, buf);
    }
    if (self->running < (guint) self->run.in_flight && !g_queue_is_empty (&self->requests)) {
      TapRequest *req = g_queue_pop_head (&self->requests);
      GstFlowReturn ret;
      self->running++;
      self->starting = req;
      self->starting_cancelled = FALSE;
      g_mutex_unlock (&self->lock);
      ret = start_sequence (self, req->id, req, buf);
      g_mutex_lock (&self->lock);
      if (self->starting == req)
        /* refused before its sequence was made */
        self->starting = NULL;
      g_mutex_unlock (&self->lock);
      tap_request_free (req);
      return ret;
    }
    if (self->running == 0 && self->next_prompt >= self->prompts->len && !self->run.serve) {
      g_mutex_unlock (&self->lock);
      GST_INFO_OBJECT (self, "every prompt is done");
      return GST_FLOW_EOS;
    }
    g_cond_wait (&self->cond, &self->lock);
  }
}

static gboolean
known_setting (GQuark field, const GValue *value, gpointer why)
{
  static const char *known[] = { "max-tokens", "temperature", "top-p", "seed", "stop-ids", NULL };

  if (!g_strv_contains (known, g_quark_to_string (field)))
    g_string_append_printf (why, "%sunknown setting '%s' (known: max-tokens, temperature, "
                            "top-p, seed, stop-ids)", ((GString *) why)->len ? "; " : "",
                            g_quark_to_string (field));
  return TRUE;
}

/* A request's settings from the structure submit-request takes; FALSE with
 * `why` set for an unknown field, or one of the wrong type or out of range. */
static gboolean
request_settings (GstTapSource *self, const GstStructure *st, TapRequest *req, GString *why)
{
  double temperature = self->run.temperature, top_p = self->run.top_p;
  guint64 seed = self->run.seed;
  int max_new = self->run.max_new;
  const GValue *v;

  if (st) {
    gst_structure_foreach (st, known_setting, why);
    if (gst_structure_has_field (st, "max-tokens")
        && !gst_structure_get_int (st, "max-tokens", &max_new))
      g_string_append_printf (why, "%smax-tokens is not an int", why->len ? "; " : "");
    if (gst_structure_has_field (st, "temperature")
        && !gst_structure_get_double (st, "temperature", &temperature))
      g_string_append_printf (why, "%stemperature is not a double", why->len ? "; " : "");
    if (gst_structure_has_field (st, "top-p") && !gst_structure_get_double (st, "top-p", &top_p))
      g_string_append_printf (why, "%stop-p is not a double", why->len ? "; " : "");
    if (gst_structure_has_field (st, "seed") && !gst_structure_get_uint64 (st, "seed", &seed))
      g_string_append_printf (why, "%sseed is not a guint64", why->len ? "; " : "");
    if ((v = gst_structure_get_value (st, "stop-ids"))) {
      if (!G_VALUE_HOLDS (v, G_TYPE_BYTES)) {
        g_string_append_printf (why, "%sstop-ids is not a GBytes of 32-bit ids", why->len ? "; " : "");
      } else {
        gsize size;
        const int *ids = g_bytes_get_data (g_value_get_boxed (v), &size);
        req->stop_ids = g_array_new (FALSE, FALSE, sizeof (int));
        g_array_append_vals (req->stop_ids, ids, size / sizeof (int));
      }
    }
    if (why->len)
      return FALSE;
  }
  if (max_new < 1)
    g_string_append_printf (why, "max-tokens %d is below 1", max_new);
  else if (!(temperature >= 0 && temperature <= DFL_SAMPLER_MAX_TEMPERATURE))
    g_string_append_printf (why, "temperature %g is not 0 to %g", temperature,
                            DFL_SAMPLER_MAX_TEMPERATURE);
  else if (!(top_p >= DFL_SAMPLER_MIN_TOP_P && top_p <= 1))
    g_string_append_printf (why, "top-p %g is not %g to 1", top_p, DFL_SAMPLER_MIN_TOP_P);
  req->max_new = max_new;
  req->sampler = (DflSampler) { .temperature = temperature, .top_p = top_p, .seed = seed };
  return why->len == 0;
}

static guint
gst_tap_source_submit_request (GstTapSource *self, GBytes *tokens, const GstStructure *settings)
{
  g_autoptr (GString) why = g_string_new (NULL);
  TapRequest *req = g_new0 (TapRequest, 1);
  gsize size = 0;
  const int *ids = tokens ? g_bytes_get_data (tokens, &size) : NULL;
  int n = size / sizeof (int), vocab;
  guint id;

  /* the model and the run's settings are there from start to stop */
  if (!self->model || !self->prompts || !self->run.serve) {
    g_string_append (why, self->run.serve || !self->prompts ? "the element has not started"
                     : "the serve property is off");
    goto refused;
  }
  vocab = dfl_target_config (gst_dflash_model_target (self->model))->vocab;
  if (n < 1) {
    g_string_append (why, "the prompt has no tokens");
    goto refused;
  }
  for (int i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= vocab) {
      g_string_append_printf (why, "token %d is outside the vocabulary (0 … %d)", ids[i],
                              vocab - 1);
      goto refused;
    }
  if (!request_settings (self, settings, req, why))
    goto refused;
  if (!fits_context (self, n, req->max_new)) {
    g_string_append_printf (why, "%d prompt tokens and max-tokens %d pass the context of %d "
                            "positions", n, req->max_new,
                            dfl_target_config (gst_dflash_model_target (self->model))->max_positions);
    goto refused;
  }
  req->ids = g_array_new (FALSE, FALSE, sizeof (int));
  g_array_append_vals (req->ids, ids, n);
  req->serving = TRUE;
  g_mutex_lock (&self->lock);
  id = req->id = self->next_request++;
  if (self->next_request == 0)
    self->next_request = MAX (self->prompts->len, 1);
  g_queue_push_tail (&self->requests, req);
  g_cond_signal (&self->cond);
  g_mutex_unlock (&self->lock);
  GST_DEBUG_OBJECT (self, "request %u: %d prompt tokens, at most %d new", id, n, req->max_new);
  return id;

  /* ERRORS */
refused:
  {
    GST_WARNING_OBJECT (self, "submit-request refused: %s", why->str);
    tap_request_free (req);
    return 0;
  }
}

static gboolean
gst_tap_source_cancel_request (GstTapSource *self, guint id)
{
  GstDflashSeq *s;
  gboolean found = FALSE;

  g_mutex_lock (&self->lock);
  for (GList *l = self->requests.head; l; l = l->next) {
    TapRequest *req = l->data;
    if (req->id == id) {
      g_queue_delete_link (&self->requests, l);
      tap_request_free (req);
      found = TRUE;
      break;
    }
  }
  /* a running one goes at its next verdict: its round may be anywhere
   * downstream now */
  if (!found && (s = g_hash_table_lookup (self->seqs, GUINT_TO_POINTER (id))) && s->serving) {
    g_atomic_int_set (&s->cancelled, 1);
    found = TRUE;
  }
  if (!found && self->starting && self->starting->id == id) {
    self->starting_cancelled = TRUE;
    found = TRUE;
  }
  g_mutex_unlock (&self->lock);
  GST_DEBUG_OBJECT (self, "cancel request %u: %s", id, found ? "dropped" : "not there");
  return found;
}
