/* gst-dflash — the elements on the GPU back ends, under gst-check.
 *
 * The `backend` property and the memory caps features: a forced back end
 * either runs or fails when the element starts with an error naming the
 * element, the value and the reason; a CPU-forced element linked to a
 * GPU-forced one fails negotiation naming both; and the loop on a GPU
 * prints exactly the plain decoding's text.
 *
 * Each back end is probed once, by a pipeline that forces it. Where the
 * machine has no such device the probe's error must say that it is
 * unavailable (never a crash, a hang or a generic failure), and the cases
 * that need the device print why they do not run. DFL_EXPECT_CUDA=1 or
 * DFL_EXPECT_VULKAN=1 (a machine known to have one) turns "unavailable"
 * into a failure.
 *
 * The reference text is `dflash generate --no-draft` (path in $DFLASH).
 * Like test-elements.c, this links GStreamer only: the elements come from
 * the plugin through the registry.
 */
#include <gst/check/gstcheck.h>
#include <glib/gstdio.h>
#include <math.h>
#include <string.h>
#include "../common/hold-vulkan-driver.h"
#include "reference-text.h"

static guint watchdog_s = 60;

#define PROMPT "func ContainsRune(s string, r rune) bool {"  /* tapsource's default */
#define MAX_NEW 24

/* ---------------------------------------------------------------- helpers */

typedef struct {
  GstElement *pipeline;
  GMutex lock;
  GString *text;
  gchar *error;              /* the first ERROR: message, then debug */
  gchar *error_from;
  gint device_contexts;      /* HAVE_CONTEXT messages of a dflash device */
} Run;

static void
on_handoff (GstElement *sink, GstBuffer *buf, GstPad *pad, gpointer data)
{
  Run *r = data;
  GstMapInfo map;

  fail_unless (gst_buffer_map (buf, &map, GST_MAP_READ));
  g_mutex_lock (&r->lock);
  g_string_append_len (r->text, (const gchar *) map.data, map.size);
  g_mutex_unlock (&r->lock);
  gst_buffer_unmap (buf, &map);
}

/* Counted in the posting thread: the bin may answer the next NEED_CONTEXT
 * before the message reaches the bus. */
static GstBusSyncReply
count_contexts (GstBus *bus, GstMessage *msg, gpointer data)
{
  Run *r = data;

  if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_HAVE_CONTEXT) {
    GstContext *context = NULL;
    gst_message_parse_have_context (msg, &context);
    if (g_str_has_prefix (gst_context_get_context_type (context), "dflash.")
        && g_str_has_suffix (gst_context_get_context_type (context), ".device"))
      g_atomic_int_inc (&r->device_contexts);
    gst_context_unref (context);
  }
  return GST_BUS_PASS;
}

static Run *
run_new (const gchar *format, ...) G_GNUC_PRINTF (1, 2);

static Run *
run_new (const gchar *format, ...)
{
  Run *r = g_new0 (Run, 1);
  g_autofree gchar *description = NULL;
  GError *error = NULL;
  GstElement *out;
  GstBus *bus;
  va_list args;

  va_start (args, format);
  description = g_strdup_vprintf (format, args);
  va_end (args);
  g_mutex_init (&r->lock);
  r->text = g_string_new (NULL);
  r->pipeline = gst_parse_launch (description, &error);
  fail_unless (r->pipeline != NULL && error == NULL, "'%s': %s", description,
      error ? error->message : "no pipeline");
  if ((out = gst_bin_get_by_name (GST_BIN (r->pipeline), "out"))) {
    g_object_set (out, "signal-handoffs", TRUE, NULL);
    g_signal_connect (out, "handoff", G_CALLBACK (on_handoff), r);
    gst_object_unref (out);
  }
  bus = gst_element_get_bus (r->pipeline);
  gst_bus_set_sync_handler (bus, count_contexts, r, NULL);
  gst_object_unref (bus);
  return r;
}

static void
run_free (Run *r)
{
  fail_unless_equals_int (gst_element_set_state (r->pipeline, GST_STATE_NULL),
      GST_STATE_CHANGE_SUCCESS);
  gst_object_unref (r->pipeline);
  g_string_free (r->text, TRUE);
  g_free (r->error);
  g_free (r->error_from);
  g_mutex_clear (&r->lock);
  g_free (r);
}

/* Play until EOS, an ERROR or the watchdog: TRUE at EOS. A WARNING fails. */
static gboolean
run_play (Run *r)
{
  GstBus *bus = gst_element_get_bus (r->pipeline);
  gint64 deadline = g_get_monotonic_time () + (gint64) watchdog_s * G_USEC_PER_SEC;
  gboolean eos = FALSE;

  gst_element_set_state (r->pipeline, GST_STATE_PLAYING);
  for (;;) {
    gint64 left = deadline - g_get_monotonic_time ();
    GstMessage *msg = left > 0 ? gst_bus_timed_pop_filtered (bus, left * GST_USECOND,
        GST_MESSAGE_EOS | GST_MESSAGE_ERROR | GST_MESSAGE_WARNING) : NULL;
    g_autoptr (GError) e = NULL;
    g_autofree gchar *debug = NULL;

    fail_unless (msg != NULL, "no EOS and no ERROR within %u s (the watchdog)", watchdog_s);
    switch (GST_MESSAGE_TYPE (msg)) {
      case GST_MESSAGE_EOS:
        eos = TRUE;
        break;
      case GST_MESSAGE_WARNING:
        gst_message_parse_warning (msg, &e, &debug);
        fail ("unexpected WARNING from %s: %s (%s)", GST_MESSAGE_SRC_NAME (msg), e->message, debug);
        break;
      default:
        gst_message_parse_error (msg, &e, &debug);
        r->error = g_strdup_printf ("%s\n%s", e->message, debug ? debug : "");
        r->error_from = g_strdup (GST_MESSAGE_SRC_NAME (msg));
        break;
    }
    gst_message_unref (msg);
    break;
  }
  gst_object_unref (bus);
  return eos;
}

static gchar *
run_text (Run *r)
{
  gchar *t;

  g_mutex_lock (&r->lock);
  t = g_strdup (r->text->str);
  g_mutex_unlock (&r->lock);
  return t;
}

/* Run to EOS and return the text. */
static gchar *
text_of (const gchar *description)
{
  Run *r = run_new ("%s", description);
  gchar *text;

  fail_unless (run_play (r), "'%s' ended in an ERROR from %s: %s", description, r->error_from,
      r->error);
  text = run_text (r);
  run_free (r);
  return text;
}

/* Run expecting an ERROR holding each of the NULL-terminated needles; a
 * needle "@NAME" is the element the ERROR must come from (its source: the
 * text does not repeat the name). */
static void
expect_error (const gchar *description, ...)
{
  Run *r = run_new ("%s", description);
  const gchar *needle;
  va_list args;

  fail_if (run_play (r), "'%s' ran to EOS; an ERROR was expected", description);
  va_start (args, description);
  while ((needle = va_arg (args, const gchar *)))
    if (needle[0] == '@')
      fail_unless (g_strcmp0 (r->error_from, needle + 1) == 0,
          "'%s': the ERROR comes from %s, not %s: %s", description, r->error_from, needle + 1,
          r->error);
    else
      fail_unless (strstr (r->error, needle) != NULL,
          "'%s': the ERROR (from %s) does not name '%s': %s", description, r->error_from, needle,
          r->error);
  va_end (args);
  run_free (r);
}

static void
assert_text (const gchar *got, const gchar *want, const gchar *what)
{
  gsize i = 0;

  if (g_strcmp0 (got, want) == 0)
    return;
  while (got[i] && got[i] == want[i])
    i++;
  fail ("%s: the text differs from the plain decoding at byte %" G_GSIZE_FORMAT
      " (%" G_GSIZE_FORMAT " bytes, reference %" G_GSIZE_FORMAT ")", what, i, strlen (got),
      strlen (want));
}

/* The caps feature on an element's pad once negotiated. */
static gboolean
pad_has_feature (GstElement *bin, const gchar *element, const gchar *pad, const gchar *feature)
{
  GstElement *e = gst_bin_get_by_name (GST_BIN (bin), element);
  GstPad *p;
  GstCaps *caps;
  gboolean has;

  fail_unless (e != NULL, "no element %s", element);
  p = gst_element_get_static_pad (e, pad);
  caps = gst_pad_get_current_caps (p);
  fail_unless (caps != NULL, "%s.%s has no caps", element, pad);
  has = gst_caps_features_contains (gst_caps_get_features (caps, 0), feature);
  gst_caps_unref (caps);
  gst_object_unref (p);
  gst_object_unref (e);
  return has;
}

/* Whether `backend` has a device here: a pipeline forcing it either runs,
 * or fails saying the back end is unavailable (or not built). Anything
 * else fails the test. */
typedef enum { DEVICE_UNKNOWN, DEVICE_PRESENT, DEVICE_ABSENT } Device;
static Device cuda_device, vulkan_device;
static gchar *cuda_reason, *vulkan_reason;

static Device
probe (const gchar *backend, const gchar *description, const gchar *expect_env, gchar **reason)
{
  Run *r = run_new (description, backend);
  g_autofree gchar *unavailable = g_strdup_printf ("backend=%s: ", backend);
  g_autofree gchar *not_built = g_strdup_printf ("backend=%s is not available in this build",
                                                 backend);
  Device d;

  if (run_play (r)) {
    d = DEVICE_PRESENT;
  } else {
    /* "backend=cuda: CUDA is unavailable: …", from the element forced */
    fail_unless ((strstr (r->error, unavailable) && strstr (r->error, "is unavailable"))
                 || strstr (r->error, not_built),
        "backend=%s failed, but not because the back end is unavailable: %s: %s", backend,
        r->error_from, r->error);
    fail_if (g_strcmp0 (g_getenv (expect_env), "1") == 0,
        "%s=1, but backend=%s is unavailable: %s", expect_env, backend, r->error);
    *reason = g_strdup (r->error);
    d = DEVICE_ABSENT;
  }
  run_free (r);
  return d;
}

static gboolean
have_cuda (void)
{
  if (cuda_device == DEVICE_UNKNOWN)
    cuda_device = probe ("cuda", "tapsource max-new-tokens=2 ! ctxsettle backend=%s ! "
                         "dflashblock ! selector ! verifier ! fakesink", "DFL_EXPECT_CUDA",
                         &cuda_reason);
  if (cuda_device == DEVICE_ABSENT)
    g_print ("# skipped: no CUDA device here: %s\n", cuda_reason);
  return cuda_device == DEVICE_PRESENT;
}

static gboolean
have_vulkan (void)
{
  if (vulkan_device == DEVICE_UNKNOWN)
    vulkan_device = probe ("vulkan", "tapsource max-new-tokens=2 ! ctxsettle backend=%s ! "
                           "dflashblock ! selector ! verifier ! fakesink", "DFL_EXPECT_VULKAN",
                           &vulkan_reason);
  if (vulkan_device == DEVICE_ABSENT)
    g_print ("# skipped: no Vulkan device here: %s\n", vulkan_reason);
  return vulkan_device == DEVICE_PRESENT;
}

/* Three sequences in flight, tapsource given `source_props` and `stages`
 * between its queue and the verifier: the same text as plain decoding of
 * the same prompts on the CPU. */
static void
check_in_flight (const gchar *source_props, const gchar *stages, const gchar *what)
{
  g_autofree gchar *dir = NULL, *path = NULL, *desc = NULL, *cpu_desc = NULL;
  g_autofree gchar *cpu = NULL, *got = NULL;
  const gchar *prompts = "func main() {\npackage main\nimport \"fmt\"\n";
  GError *error = NULL;

  dir = g_dir_make_tmp ("dflash-gpu-XXXXXX", &error);
  fail_unless (dir != NULL, "%s", error ? error->message : "");
  path = g_build_filename (dir, "prompts.txt", NULL);
  fail_unless (g_file_set_contents (path, prompts, -1, NULL));
  desc = g_strdup_printf ("tapsource %sin-flight=3 max-new-tokens=%d prompts-file=\"%s\" ! queue ! "
      "%s ! verifier ! fakesink name=out", source_props, MAX_NEW, path, stages);
  cpu_desc = g_strdup_printf ("tapsource in-flight=3 max-new-tokens=%d prompts-file=\"%s\" ! "
      "verifier ! fakesink name=out", MAX_NEW, path);
  cpu = text_of (cpu_desc);
  got = text_of (desc);
  assert_text (got, cpu, what);
  g_unlink (path);
  g_rmdir (dir);
}

/* ------------------------------------------------------- forced back ends */

/* Whether the build has the back end: its probe ran (as have_cuda and
 * have_vulkan run it) and did not say it is missing from the build. */
static gboolean
built (gboolean cuda)
{
  Device *d = cuda ? &cuda_device : &vulkan_device;
  gchar **reason = cuda ? &cuda_reason : &vulkan_reason;

  if (*d == DEVICE_UNKNOWN)
    *d = probe (cuda ? "cuda" : "vulkan", "tapsource max-new-tokens=2 ! ctxsettle backend=%s ! "
                "dflashblock ! selector ! verifier ! fakesink",
                cuda ? "DFL_EXPECT_CUDA" : "DFL_EXPECT_VULKAN", reason);
  return *d == DEVICE_PRESENT || !strstr (*reason, "is not available in this build");
}

/* What a forced back end's refusal says: its reason where the build has
 * it ("backend=cuda: CUDA is unavailable: …"), else that it is not in the
 * build. */
static const gchar *
forced_prefix (gboolean cuda)
{
  return built (cuda) ? (cuda ? "backend=cuda: " : "backend=vulkan: ")
                      : (cuda ? "backend=cuda is not available" : "backend=vulkan is not available");
}

static const gchar *
forced_reason (gboolean cuda, const gchar *built_reason)
{
  return built (cuda) ? built_reason : "in this build";
}

/* Every computing element with backend=cuda: it runs where a CUDA device
 * is, and elsewhere fails when it starts, naming itself, the value and
 * CUDA's reason (or that the build has no CUDA). Never a crash or a hang. */
GST_START_TEST (test_cuda_forced)
{
  const gchar *stages[] = { "ctxsettle", "dflashblock", "selector" };
  const gchar *prefix = forced_prefix (TRUE);
  const gchar *reason = forced_reason (TRUE, "is unavailable");

  /* names given: the probe made elements of the same types before */

  if (have_cuda ())
    return;
  expect_error ("tapsource name=tapsource0 backend=cuda max-new-tokens=2 ! verifier ! fakesink",
                "@tapsource0", prefix, reason, NULL);
  for (guint i = 0; i < G_N_ELEMENTS (stages); i++) {
    g_autofree gchar *d = g_strdup_printf ("tapsource max-new-tokens=2 ! "
        "ctxsettle name=ctxsettle%s ! dflashblock name=dflashblock%s ! selector name=selector%s ! "
        "verifier ! fakesink",
        i == 0 ? "0 backend=cuda" : "0", i == 1 ? "0 backend=cuda" : "0",
        i == 2 ? "0 backend=cuda" : "0");
    g_autofree gchar *source = g_strdup_printf ("@%s0", stages[i]);
    expect_error (d, source, prefix, reason, NULL);
  }
}
GST_END_TEST;

/* The elements put no target on Vulkan, and ngramdraft reads ids only: forcing
 * them says so (where the build has the back end; else that it has not). A
 * verifier forced to cuda refuses sequences of the CPU target. */
GST_START_TEST (test_backend_refusals)
{
  const gchar *vk = forced_prefix (FALSE), *cu = forced_prefix (TRUE);

  expect_error ("tapsource name=tapsource0 backend=vulkan max-new-tokens=2 ! verifier ! fakesink",
                "@tapsource0", vk, forced_reason (FALSE, "the target runs on cpu or cuda"), NULL);
  expect_error ("tapsource max-new-tokens=2 ! verifier name=verifier0 backend=vulkan ! fakesink",
                "@verifier0", vk, forced_reason (FALSE, "the target runs on cpu or cuda"), NULL);
  expect_error ("tapsource max-new-tokens=2 ! ngramdraft name=ngramdraft0 backend=vulkan ! "
                "verifier ! fakesink",
                "@ngramdraft0", vk, forced_reason (FALSE, "this stage runs on the CPU only"), NULL);
  expect_error ("tapsource max-new-tokens=2 ! ngramdraft name=ngramdraft0 backend=cuda ! "
                "verifier ! fakesink",
                "@ngramdraft0", cu, forced_reason (TRUE, "this stage runs on the CPU only"), NULL);
  expect_error ("tapsource backend=cpu max-new-tokens=2 ! verifier name=verifier0 backend=cuda ! "
                "fakesink", "@verifier0", built (TRUE)
                ? "backend=cuda, but tapsource ran sequence 0's target on the cpu"
                : "backend=cuda is not available in this build", NULL);
}
GST_END_TEST;

/* A stage forced to the CPU next to one forced to a GPU: the negotiation
 * fails, and the message names both and their backends. */
GST_START_TEST (test_cpu_next_to_gpu)
{
  if (!have_vulkan ())
    return;
  expect_error ("tapsource max-new-tokens=2 ! ctxsettle name=cs backend=vulkan ! "
                "dflashblock name=db backend=cpu ! selector ! verifier ! fakesink",
                "cs (backend=vulkan)",
                "db (backend=cpu)", "memory:DflashVulkanMemory", NULL);
  expect_error ("tapsource max-new-tokens=2 ! ctxsettle name=cs backend=cpu ! dflashblock name=db "
                "backend=vulkan ! selector ! verifier ! fakesink", "cs (backend=cpu)",
                "db (backend=vulkan)", "memory:SystemMemory", NULL);
  expect_error ("tapsource max-new-tokens=2 ! ctxsettle backend=vulkan ! dflashblock name=db ! "
                "selector name=sel backend=cpu ! verifier ! fakesink", "db (backend=auto)",
                "sel (backend=cpu)", NULL);
}
GST_END_TEST;

/* ----------------------------------------------------------------- Vulkan */

#define VK_SPECULATIVE "tapsource max-new-tokens=%d ! queue ! ctxsettle name=cs backend=vulkan ! " \
    "queue ! dflashblock name=db ! selector name=sel ! verifier ! fakesink name=out"

/* The loop with the drafter on Vulkan prints the plain decoding's text, as
 * the same loop on the CPU does; the block stays on the device (its caps
 * say DflashVulkanMemory), the proposal is system memory, and one device serves
 * the three stages. */
GST_START_TEST (test_vulkan_text)
{
  g_autofree gchar *want = NULL, *cpu = NULL, *got = NULL;
  g_autofree gchar *cpu_desc = g_strdup_printf ("tapsource max-new-tokens=%d ! queue ! ctxsettle "
      "backend=cpu ! queue ! dflashblock ! selector ! verifier ! fakesink name=out", MAX_NEW);
  Run *r;

  if (!have_vulkan ())
    return;
  want = dfl_test_reference_text (PROMPT, MAX_NEW);
  cpu = text_of (cpu_desc);
  assert_text (cpu, want, "the loop on the CPU");
  r = run_new (VK_SPECULATIVE, MAX_NEW);
  fail_unless (run_play (r), "the Vulkan loop ended in an ERROR from %s: %s", r->error_from,
      r->error);
  got = run_text (r);
  assert_text (got, want, "the loop with the drafter on Vulkan");
  fail_unless (pad_has_feature (r->pipeline, "cs", "src", "memory:DflashVulkanMemory"));
  fail_unless (pad_has_feature (r->pipeline, "db", "src", "memory:DflashVulkanMemory"));
  fail_unless (pad_has_feature (r->pipeline, "sel", "src", "memory:SystemMemory"));
  fail_unless (pad_has_feature (r->pipeline, "cs", "sink", "memory:SystemMemory"));
  fail_unless_equals_int (g_atomic_int_get (&r->device_contexts), 1);
  run_free (r);
}
GST_END_TEST;

/* The ALLOCATION query dflashblock sends downstream, and the buffers it
 * then pushes: whether they come from the pool the selector proposed. */
typedef struct {
  GMutex lock;
  GstBufferPool *proposed;
  guint blocks, from_proposed;
} PoolWatch;

static GstPadProbeReturn
watch_allocation (GstPad *pad, GstPadProbeInfo *info, gpointer data)
{
  PoolWatch *w = data;
  GstQuery *query = GST_PAD_PROBE_INFO_QUERY (info);
  GstBufferPool *pool = NULL;

  /* answered: the pool downstream proposed */
  if (GST_QUERY_TYPE (query) == GST_QUERY_ALLOCATION && gst_query_get_n_allocation_pools (query)) {
    gst_query_parse_nth_allocation_pool (query, 0, &pool, NULL, NULL, NULL);
    g_mutex_lock (&w->lock);
    gst_object_replace ((GstObject **) &w->proposed, GST_OBJECT (pool));
    g_mutex_unlock (&w->lock);
    gst_clear_object (&pool);
  }
  return GST_PAD_PROBE_OK;
}

static GstPadProbeReturn
watch_block (GstPad *pad, GstPadProbeInfo *info, gpointer data)
{
  PoolWatch *w = data;
  GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER (info);

  if (gst_buffer_get_size (buf) == 0)
    return GST_PAD_PROBE_OK;
  g_mutex_lock (&w->lock);
  w->blocks++;
  if (w->proposed && buf->pool == w->proposed)
    w->from_proposed++;
  g_mutex_unlock (&w->lock);
  return GST_PAD_PROBE_OK;
}

/* The block on a device goes into the pool the selector (on the same
 * device) proposes through the ALLOCATION query, and the text is the
 * plain decoding's. */
static void
check_proposed_pool (const gchar *backend)
{
  g_autofree gchar *want = dfl_test_reference_text (PROMPT, MAX_NEW), *got = NULL;
  Run *r = run_new ("tapsource max-new-tokens=%d ! ctxsettle backend=%s ! dflashblock name=db ! "
                    "selector ! verifier ! fakesink name=out", MAX_NEW, backend);
  GstElement *db = gst_bin_get_by_name (GST_BIN (r->pipeline), "db");
  GstPad *src = gst_element_get_static_pad (db, "src");
  PoolWatch w = { 0 };

  g_mutex_init (&w.lock);
  gst_pad_add_probe (src, GST_PAD_PROBE_TYPE_QUERY_DOWNSTREAM | GST_PAD_PROBE_TYPE_PULL,
                     watch_allocation, &w, NULL);
  gst_pad_add_probe (src, GST_PAD_PROBE_TYPE_BUFFER, watch_block, &w, NULL);
  fail_unless (run_play (r), "backend=%s: an ERROR from %s: %s", backend, r->error_from, r->error);
  got = run_text (r);
  assert_text (got, want, "the block in the pool downstream proposed");
  fail_unless (w.proposed != NULL, "backend=%s: the selector proposed no pool", backend);
  fail_unless (w.blocks > 0, "backend=%s: no block was drafted", backend);
  fail_unless_equals_int (w.from_proposed, w.blocks);
  gst_object_unref (src);
  gst_object_unref (db);
  run_free (r);
  gst_clear_object (&w.proposed);
  g_mutex_clear (&w.lock);
}

/* on each device this machine has */
GST_START_TEST (test_proposed_pool)
{
  if (have_vulkan ())
    check_proposed_pool ("vulkan");
  if (have_cuda ())
    check_proposed_pool ("cuda");
}
GST_END_TEST;

/* Each block's rows and logits as they leave dflashblock (a device buffer
 * is mapped: downloaded), one GArray of floats a round. */
static GstPadProbeReturn
keep_block (GstPad *pad, GstPadProbeInfo *info, gpointer data)
{
  GPtrArray *blocks = data;
  GstBuffer *buf = GST_PAD_PROBE_INFO_BUFFER (info);
  GstMapInfo map;
  GArray *floats;

  fail_unless (gst_buffer_map (buf, &map, GST_MAP_READ), "the block's buffer does not map");
  floats = g_array_sized_new (FALSE, FALSE, sizeof (float), map.size / sizeof (float));
  g_array_append_vals (floats, map.data, map.size / sizeof (float));
  gst_buffer_unmap (buf, &map);
  g_ptr_array_add (blocks, floats);
  return GST_PAD_PROBE_OK;
}

/* `backend`: ctxsettle's; cuda runs the target there too (F32 products);
 * the CPU's drafter keeps the sidecar's matrices (its Q8_0 ones would
 * draft near, not at, F32 rounding of the others) */
static GPtrArray *
blocks_of (const gchar *backend)
{
  GPtrArray *blocks = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
  gboolean cuda = !strcmp (backend, "cuda");
  Run *r = run_new ("tapsource max-new-tokens=%d drafter-weights=stored %s ! ctxsettle backend=%s "
                    "! dflashblock name=db ! selector ! verifier ! fakesink", MAX_NEW,
                    cuda ? "backend=cuda gpu-weights=f32" : "", backend);
  GstElement *db = gst_bin_get_by_name (GST_BIN (r->pipeline), "db");
  GstPad *src = gst_element_get_static_pad (db, "src");

  gst_pad_add_probe (src, GST_PAD_PROBE_TYPE_BUFFER, keep_block, blocks, NULL);
  fail_unless (run_play (r), "backend=%s: an ERROR from %s: %s", backend, r->error_from, r->error);
  gst_object_unref (src);
  gst_object_unref (db);
  run_free (r);
  return blocks;
}

/* The block on a GPU against the block on the CPU, round by round: the
 * rows and logits agree to F32 rounding (the sums run in another order;
 * on CUDA the target's taps come from the card, in F32 too). */
static void
check_block_parity (const gchar *backend)
{
  g_autoptr (GPtrArray) cpu = NULL, vk = NULL;
  double worst = 0;

  cpu = blocks_of ("cpu");
  vk = blocks_of (backend);
  fail_unless (cpu->len > 0, "no block left dflashblock");
  fail_unless_equals_int (vk->len, cpu->len);
  for (guint i = 0; i < cpu->len; i++) {
    GArray *a = g_ptr_array_index (cpu, i), *b = g_ptr_array_index (vk, i);
    fail_unless_equals_int (b->len, a->len);
    for (guint j = 0; j < a->len; j++) {
      float x = g_array_index (a, float, j), y = g_array_index (b, float, j);
      double err = fabs ((double) x - y) / (1.0 + fabs ((double) x));
      fail_unless (err <= 1e-3, "round %u, value %u: cpu %g, %s %g", i, j, x, backend, y);
      worst = MAX (worst, err);
    }
  }
  g_print ("# %s: %u blocks, worst relative difference %.3g\n", backend, cpu->len, worst);
}

GST_START_TEST (test_vulkan_block_parity)
{
  if (have_vulkan ())
    check_block_parity ("vulkan");
}
GST_END_TEST;

GST_START_TEST (test_cuda_block_parity)
{
  if (have_cuda ())
    check_block_parity ("cuda");
}
GST_END_TEST;

/* Every stage forced to Vulkan, plain selection, several sequences in
 * flight (each its own context on the device): the same text as the CPU. */
GST_START_TEST (test_vulkan_forced_in_flight)
{
  if (have_vulkan ())
    check_in_flight ("", "ctxsettle backend=vulkan ! queue ! dflashblock backend=vulkan ! "
        "selector backend=vulkan mode=plain", "three sequences with every stage on Vulkan");
}
GST_END_TEST;

/* The same with the drafter's stages asked to batch: Vulkan has no table
 * ops, so each stage takes one sequence at a time (said once in its log),
 * and the text is the same. */
GST_START_TEST (test_vulkan_in_flight_batched)
{
  if (have_vulkan ())
    check_in_flight ("", "ctxsettle backend=vulkan batch-limit=3 ! queue ! dflashblock "
        "backend=vulkan batch-limit=3 ! queue ! selector backend=vulkan mode=plain "
        "batch-limit=3", "three sequences on Vulkan, the stages asked to batch");
}
GST_END_TEST;

/* The router beside a Vulkan block: the chain drafter takes the same
 * rounds (it reads ids, never the taps). */
GST_START_TEST (test_vulkan_routed)
{
  g_autofree gchar *want = NULL, *got = NULL, *desc = NULL;

  if (!have_vulkan ())
    return;
  want = dfl_test_reference_text (PROMPT, MAX_NEW);
  desc = g_strdup_printf ("tapsource max-new-tokens=%d ! tee name=t ! queue ! ctxsettle "
      "backend=vulkan ! dflashblock ! selector ! router name=r policy=match ! verifier ! "
      "fakesink name=out  t. ! queue ! ngramdraft ! r.chain", MAX_NEW);
  got = text_of (desc);
  assert_text (got, want, "the routed loop with the block on Vulkan");
}
GST_END_TEST;

/* ------------------------------------------------------------------- CUDA */

/* The target and drafter on CUDA, F32 products (the CPU's numbers): the
 * plain decoding's text, speculative, plain, routed, and with several
 * sequences in flight; the taps and the block stay on the card. */
GST_START_TEST (test_cuda_text)
{
  g_autofree gchar *want = NULL, *got = NULL, *desc = NULL;
  Run *r;

  if (!have_cuda ())
    return;
  want = dfl_test_reference_text (PROMPT, MAX_NEW);
  r = run_new ("tapsource backend=cuda gpu-weights=f32 max-new-tokens=%d ! queue ! ctxsettle "
      "name=cs ! queue ! dflashblock name=db ! selector name=sel ! verifier ! fakesink name=out",
      MAX_NEW);
  fail_unless (run_play (r), "the CUDA loop ended in an ERROR from %s: %s", r->error_from,
      r->error);
  got = run_text (r);
  assert_text (got, want, "the loop on CUDA");
  fail_unless (pad_has_feature (r->pipeline, "cs", "sink", "memory:DflashCudaMemory"));
  fail_unless (pad_has_feature (r->pipeline, "db", "src", "memory:DflashCudaMemory"));
  fail_unless (pad_has_feature (r->pipeline, "sel", "src", "memory:SystemMemory"));
  fail_unless_equals_int (g_atomic_int_get (&r->device_contexts), 1);
  run_free (r);
  g_clear_pointer (&got, g_free);

  /* auto everywhere but ctxsettle: tapsource follows a CUDA-only downstream */
  desc = g_strdup_printf ("tapsource gpu-weights=f32 max-new-tokens=%d ! ctxsettle backend=cuda ! "
      "dflashblock ! selector ! verifier ! fakesink name=out", MAX_NEW);
  got = text_of (desc);
  assert_text (got, want, "tapsource auto beside ctxsettle backend=cuda");
  g_clear_pointer (&got, g_free);
  g_clear_pointer (&desc, g_free);

  desc = g_strdup_printf ("tapsource backend=cuda gpu-weights=f32 max-new-tokens=%d ! verifier ! "
      "fakesink name=out", MAX_NEW);
  got = text_of (desc);
  assert_text (got, want, "plain decoding on CUDA");
  g_clear_pointer (&got, g_free);
  g_clear_pointer (&desc, g_free);

  desc = g_strdup_printf ("tapsource backend=cuda gpu-weights=f32 max-new-tokens=%d ! tee name=t ! "
      "queue ! ctxsettle ! dflashblock ! selector ! router name=r policy=match ! verifier ! "
      "fakesink name=out  t. ! queue ! ngramdraft ! r.chain", MAX_NEW);
  got = text_of (desc);
  assert_text (got, want, "the routed loop on CUDA (ngramdraft on CUDA taps)");
}
GST_END_TEST;

GST_START_TEST (test_cuda_in_flight)
{
  if (have_cuda ())
    check_in_flight ("backend=cuda gpu-weights=f32 ", "ctxsettle ! queue ! dflashblock ! "
        "selector mode=plain", "three sequences on CUDA");
}
GST_END_TEST;

/* The drafter's stages on CUDA taking the sequences waiting together
 * (ctxsettle, dflashblock and selector batch-limit): the same text. */
GST_START_TEST (test_cuda_in_flight_batched)
{
  if (have_cuda ())
    check_in_flight ("backend=cuda gpu-weights=f32 ", "ctxsettle batch-limit=3 ! queue ! "
        "dflashblock batch-limit=3 ! queue ! selector mode=plain batch-limit=3",
        "three sequences on CUDA, the drafter's stages batched");
}
GST_END_TEST;

static Suite *
dflash_gpu_suite (void)
{
  Suite *s = suite_create ("dflash-elements-gpu");
  TCase *tc = tcase_create ("gpu");
  const gchar *w = g_getenv ("DFL_TEST_WATCHDOG");

  if (w && atoi (w) > 0)
    watchdog_s = atoi (w);
  tcase_set_timeout (tc, 8 * watchdog_s);
  suite_add_tcase (s, tc);
  tcase_add_test (tc, test_cuda_forced);
  tcase_add_test (tc, test_backend_refusals);
  tcase_add_test (tc, test_cpu_next_to_gpu);
  tcase_add_test (tc, test_vulkan_text);
  tcase_add_test (tc, test_vulkan_block_parity);
  tcase_add_test (tc, test_proposed_pool);
  tcase_add_test (tc, test_vulkan_forced_in_flight);
  tcase_add_test (tc, test_vulkan_in_flight_batched);
  tcase_add_test (tc, test_vulkan_routed);
  tcase_add_test (tc, test_cuda_text);
  tcase_add_test (tc, test_cuda_block_parity);
  tcase_add_test (tc, test_cuda_in_flight);
  tcase_add_test (tc, test_cuda_in_flight_batched);
  return s;
}

GST_CHECK_MAIN (dflash_gpu);
