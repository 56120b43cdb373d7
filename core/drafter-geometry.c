/* gst-dflash — the drafter's geometry: a sidecar's "dflash" record, a
 * released v1 drafter's config.json, and the checks both must pass.
 */
#include "drafter-private.h"
#include "dfl-error.h"
#include "dfl-json.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

/* Sizes past this are not a drafter (and would overflow products in int). */
#define GEOMETRY_MAX (1 << 24)
/* Sane bounds of each size, refused before anything is sized by them: the
 * target's own bounds (qwen3-config.c) where the drafter shares a meaning,
 * and for the block and the selector far past any published drafter (block
 * 16, rank 64) while keeping a round's buffers (block × vocab logits) a
 * few GiB at most. */
#define GEOMETRY_MAX_HIDDEN 65536
#define GEOMETRY_MAX_INTERMEDIATE 1048576
#define GEOMETRY_MAX_LAYERS 1024
#define GEOMETRY_MAX_HEADS 1024
#define GEOMETRY_MAX_HEAD_DIM 1024
#define GEOMETRY_MAX_VOCAB (4 * 1024 * 1024)
#define GEOMETRY_MAX_BLOCK 256
#define GEOMETRY_MAX_CONV_KERNEL 64
#define GEOMETRY_MAX_SELECTOR_RANK 4096
#define GEOMETRY_MAX_SELECTOR_TOP 65536
#define GEOMETRY_MAX_TAPS 1024

static gboolean
fail (GError **error, int code, const char *origin, const char *fmt, ...) G_GNUC_PRINTF (4, 5);

static gboolean
fail (GError **error, int code, const char *origin, const char *fmt, ...)
{
  va_list ap;
  char *msg;

  va_start (ap, fmt);
  msg = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  g_set_error (error, DFL_ERROR, code, "%s: %s", origin, msg);
  g_free (msg);
  return FALSE;
}

/* A whole number in [0, max]: cJSON keeps numbers as doubles. */
static gboolean
whole (const cJSON *item, double max, gint64 *out)
{
  double v;

  if (!cJSON_IsNumber (item))
    return FALSE;
  v = item->valuedouble;
  if (!isfinite (v) || v < 0 || v > max || v != floor (v))
    return FALSE;
  *out = (gint64) v;
  return TRUE;
}

static char *
json_text (const cJSON *item)
{
  char *s = item ? cJSON_PrintUnformatted (item) : NULL;
  char *r = g_strdup (s ? s : "nothing");

  cJSON_free (s);
  return r;
}

static gboolean
get_size (const cJSON *rec, const char *key, const char *what, double max, int *out,
          const char *origin, GError **error)
{
  const cJSON *item = cJSON_GetObjectItemCaseSensitive (rec, key);
  gint64 v;

  if (!item)
    return fail (error, DFL_ERROR_FORMAT, origin, "%s has no \"%s\"", what, key);
  if (!whole (item, G_MAXINT, &v)) {
    char *t = json_text (item);
    fail (error, DFL_ERROR_FORMAT, origin, "%s: \"%s\" is %s; expected a whole number from 0 to %.0f",
          what, key, t, max);
    g_free (t);
    return FALSE;
  }
  /* a size we will not run is refused here, before anything is sized by it */
  if (v > max)
    return fail (error, DFL_ERROR_LIMIT, origin, "%s: \"%s\" is %" G_GINT64_FORMAT
                 "; accepted: 0 to %.0f", what, key, v, max);
  *out = (int) v;
  return TRUE;
}

static gboolean
get_real (const cJSON *rec, const char *key, const char *what, double *out,
          const char *origin, GError **error)
{
  const cJSON *item = cJSON_GetObjectItemCaseSensitive (rec, key);

  if (!item)
    return fail (error, DFL_ERROR_FORMAT, origin, "%s has no \"%s\"", what, key);
  if (!cJSON_IsNumber (item) || !isfinite (item->valuedouble)) {
    char *t = json_text (item);
    fail (error, DFL_ERROR_FORMAT, origin, "%s: \"%s\" is %s; expected a number", what, key, t);
    g_free (t);
    return FALSE;
  }
  *out = item->valuedouble;
  return TRUE;
}

/* A list of whole numbers; absent or null is the empty list when `optional`. */
static gboolean
get_list (const cJSON *rec, const char *key, const char *what, gboolean optional, int max_n,
          int **out, int *n_out, const char *origin, GError **error)
{
  const cJSON *item = cJSON_GetObjectItemCaseSensitive (rec, key);
  const cJSON *e;
  int n = 0, i = 0;

  *out = NULL;
  *n_out = 0;
  if (!item || cJSON_IsNull (item)) {
    if (optional)
      return TRUE;
    return fail (error, DFL_ERROR_FORMAT, origin, "%s has no \"%s\"", what, key);
  }
  if (!cJSON_IsArray (item)) {
    char *t = json_text (item);
    fail (error, DFL_ERROR_FORMAT, origin, "%s: \"%s\" is %s; expected a list of whole numbers",
          what, key, t);
    g_free (t);
    return FALSE;
  }
  n = cJSON_GetArraySize (item);
  if (n > max_n)
    return fail (error, DFL_ERROR_LIMIT, origin, "%s: \"%s\" has %d entries; accepted: at most %d",
                 what, key, n, max_n);
  *out = n ? g_new0 (int, n) : NULL;
  cJSON_ArrayForEach (e, item) {
    gint64 v;
    if (!whole (e, GEOMETRY_MAX, &v)) {
      char *t = json_text (e);
      fail (error, DFL_ERROR_FORMAT, origin,
            "%s: \"%s\"[%d] is %s; expected a whole number from 0 to %d", what, key, i, t,
            GEOMETRY_MAX);
      g_free (t);
      g_clear_pointer (out, g_free);
      return FALSE;
    }
    (*out)[i++] = (int) v;
  }
  *n_out = n;
  return TRUE;
}

int
dfl_drafter_geometry_window_of (const DflDrafterGeometry *g, int layer)
{
  return g->windows ? g->windows[layer] : g->window;
}

gboolean
dfl_drafter_geometry_rotary (const DflDrafterGeometry *g, int layer)
{
  for (int i = 0; i < g->n_no_rope; i++)
    if (g->no_rope[i] == layer)
      return FALSE;
  return TRUE;
}

int
dfl_drafter_geometry_tap_width (const DflDrafterGeometry *g)
{
  return g->n_taps * g->hidden;
}

void
dfl_drafter_geometry_clear (DflDrafterGeometry *g)
{
  g_clear_pointer (&g->taps, g_free);
  g_clear_pointer (&g->windows, g_free);
  g_clear_pointer (&g->no_rope, g_free);
  memset (g, 0, sizeof *g);
}

void
dfl_drafter_geometry_copy (DflDrafterGeometry *dst, const DflDrafterGeometry *src)
{
  *dst = *src;
  dst->taps = src->n_taps ? g_memdup2 (src->taps, sizeof (int) * src->n_taps) : NULL;
  dst->windows = src->windows ? g_memdup2 (src->windows, sizeof (int) * src->layers) : NULL;
  dst->no_rope = src->n_no_rope ? g_memdup2 (src->no_rope, sizeof (int) * src->n_no_rope) : NULL;
}

/* `n_windows`: the length of the record's windows list (the struct keeps
 * only lists of one a layer). */
static gboolean
check (const DflDrafterGeometry *g, int n_windows, const char *origin, GError **error)
{
  const int bad = DFL_ERROR_UNSUPPORTED;
  const char *pre = "unsupported DFlash geometry";
  gboolean any_rotary = FALSE;

  /* absurd sizes first: nothing downstream is sized by them */
  {
    const struct { const char *key; int value, max; } bounds[] = {
      { "hidden", g->hidden, GEOMETRY_MAX_HIDDEN },
      { "intermediate", g->intermediate, GEOMETRY_MAX_INTERMEDIATE },
      { "layers", g->layers, GEOMETRY_MAX_LAYERS },
      { "heads", g->heads, GEOMETRY_MAX_HEADS },
      { "kv_heads", g->kv_heads, GEOMETRY_MAX_HEADS },
      { "head_dim", g->head_dim, GEOMETRY_MAX_HEAD_DIM },
      { "vocab", g->vocab, GEOMETRY_MAX_VOCAB },
      { "block", g->block, GEOMETRY_MAX_BLOCK },
      { "conv_kernel", g->conv_kernel, GEOMETRY_MAX_CONV_KERNEL },
      { "selector_rank", g->selector_rank, GEOMETRY_MAX_SELECTOR_RANK },
      { "selector_top", g->selector_top, GEOMETRY_MAX_SELECTOR_TOP },
      { "target_layers", g->target_layers, GEOMETRY_MAX_LAYERS },
      { "the number of taps", g->n_taps, GEOMETRY_MAX_TAPS },
      { "the number of no_rope layers", g->n_no_rope, GEOMETRY_MAX_LAYERS },
    };

    for (guint i = 0; i < G_N_ELEMENTS (bounds); i++)
      if (bounds[i].value < 0 || bounds[i].value > bounds[i].max)
        return fail (error, DFL_ERROR_LIMIT, origin, "%s: %s is %d; accepted: 0 to %d", pre,
                     bounds[i].key, bounds[i].value, bounds[i].max);
  }

  /* the reference's checks (Geometry::of), in its order */
  if (g->layers == 0)
    return fail (error, bad, origin, "%s: layers is 0; a drafter has at least one layer", pre);
  if (g->block < 2)
    return fail (error, bad, origin, "%s: block is %d; a block is the anchor and at least one draft (≥ 2)",
                 pre, g->block);
  if (g->n_taps == 0)
    return fail (error, bad, origin, "%s: taps is empty; a context row joins at least one target layer", pre);
  if (g->kv_heads == 0)
    return fail (error, bad, origin, "%s: kv_heads is 0; expected at least 1", pre);
  if (g->heads % g->kv_heads != 0)
    return fail (error, bad, origin, "%s: heads %d is not a multiple of kv_heads %d", pre,
                 g->heads, g->kv_heads);
  if (g->head_dim % 2 != 0)
    return fail (error, bad, origin, "%s: head_dim %d is odd; rope needs an even head_dim", pre,
                 g->head_dim);
  if (g->conv_group == 0)
    return fail (error, bad, origin, "%s: conv_group is 0; expected at least 1", pre);
  if (g->hidden % g->conv_group != 0)
    return fail (error, bad, origin, "%s: hidden %d is not a multiple of conv_group %d", pre,
                 g->hidden, g->conv_group);
  if (n_windows != 0 && n_windows != g->layers)
    return fail (error, bad, origin, "%s: windows has %d entries for %d layers; expected none or one a layer",
                 pre, n_windows, g->layers);
  for (int i = 0; i < g->n_no_rope; i++)
    if (g->no_rope[i] >= g->layers)
      return fail (error, bad, origin, "%s: no_rope names layer %d; the drafter has %d layers (0 to %d)",
                   pre, g->no_rope[i], g->layers, g->layers - 1);

  /* what C needs besides: sizes that make a model, ids inside their ranges */
  if (g->hidden == 0 || g->intermediate == 0 || g->heads == 0 || g->head_dim == 0 || g->vocab == 0)
    return fail (error, bad, origin,
                 "%s: hidden %d, intermediate %d, heads %d, head_dim %d, vocab %d; each must be at least 1",
                 pre, g->hidden, g->intermediate, g->heads, g->head_dim, g->vocab);
  for (int i = 0; i < g->n_taps; i++)
    if (g->taps[i] >= g->target_layers)
      return fail (error, bad, origin, "%s: taps names layer %d; the target has %d layers (0 to %d)",
                   pre, g->taps[i], g->target_layers, g->target_layers - 1);
  if (g->mask_token >= (guint32) g->vocab)
    return fail (error, bad, origin, "%s: mask_token %u is outside the vocabulary of %d", pre,
                 g->mask_token, g->vocab);
  if (g->selector_rank > 0 && (g->selector_top < 1 || g->selector_top > g->vocab))
    return fail (error, bad, origin, "%s: selector_top %d; expected from 1 to vocab %d", pre,
                 g->selector_top, g->vocab);
  for (int l = 0; l < g->layers; l++)
    any_rotary |= dfl_drafter_geometry_rotary (g, l);
  if (any_rotary && !(g->rope_theta > 1.0 && isfinite (g->rope_theta)))
    return fail (error, bad, origin, "%s: rope_theta %g; expected a number above 1", pre, g->rope_theta);
  if (!(g->eps >= 0 && g->eps < 1))
    return fail (error, bad, origin, "%s: eps %g; expected a number from 0 to 1", pre, g->eps);
  if ((gint64) g->heads * g->head_dim > GEOMETRY_MAX || (gint64) g->n_taps * g->hidden > GEOMETRY_MAX)
    return fail (error, DFL_ERROR_LIMIT, origin, "%s: heads × head_dim %d × %d or taps × hidden %d × %d is past %d",
                 pre, g->heads, g->head_dim, g->n_taps, g->hidden, GEOMETRY_MAX);
  return TRUE;
}

gboolean
dfl_drafter_geometry_check (const DflDrafterGeometry *g, const char *origin, GError **error)
{
  return check (g, g->windows ? g->layers : 0, origin, error);
}

gboolean
dfl_drafter_geometry_parse (DflDrafterGeometry *g, const char *json, const char *origin,
                            GError **error)
{
  const char *what = "the dflash record";
  cJSON *rec;
  gboolean ok = FALSE;
  int n_windows = 0;
  static const struct { const char *key; gsize offset; double max; } sizes[] = {
    { "hidden", G_STRUCT_OFFSET (DflDrafterGeometry, hidden), GEOMETRY_MAX_HIDDEN },
    { "intermediate", G_STRUCT_OFFSET (DflDrafterGeometry, intermediate),
      GEOMETRY_MAX_INTERMEDIATE },
    { "layers", G_STRUCT_OFFSET (DflDrafterGeometry, layers), GEOMETRY_MAX_LAYERS },
    { "heads", G_STRUCT_OFFSET (DflDrafterGeometry, heads), GEOMETRY_MAX_HEADS },
    { "kv_heads", G_STRUCT_OFFSET (DflDrafterGeometry, kv_heads), GEOMETRY_MAX_HEADS },
    { "head_dim", G_STRUCT_OFFSET (DflDrafterGeometry, head_dim), GEOMETRY_MAX_HEAD_DIM },
    { "vocab", G_STRUCT_OFFSET (DflDrafterGeometry, vocab), GEOMETRY_MAX_VOCAB },
    { "block", G_STRUCT_OFFSET (DflDrafterGeometry, block), GEOMETRY_MAX_BLOCK },
    { "conv_group", G_STRUCT_OFFSET (DflDrafterGeometry, conv_group), GEOMETRY_MAX_HIDDEN },
    { "conv_kernel", G_STRUCT_OFFSET (DflDrafterGeometry, conv_kernel),
      GEOMETRY_MAX_CONV_KERNEL },
    { "selector_rank", G_STRUCT_OFFSET (DflDrafterGeometry, selector_rank),
      GEOMETRY_MAX_SELECTOR_RANK },
    { "selector_top", G_STRUCT_OFFSET (DflDrafterGeometry, selector_top),
      GEOMETRY_MAX_SELECTOR_TOP },
    { "target_layers", G_STRUCT_OFFSET (DflDrafterGeometry, target_layers), GEOMETRY_MAX_LAYERS },
    { "window", G_STRUCT_OFFSET (DflDrafterGeometry, window), GEOMETRY_MAX },
  };

  memset (g, 0, sizeof *g);
  rec = dfl_json_parse (json, strlen (json) + 1, NULL, FALSE);
  if (!rec || !cJSON_IsObject (rec)) {
    fail (error, DFL_ERROR_FORMAT, origin, "%s is not a JSON object", what);
    goto out;
  }
  for (guint i = 0; i < G_N_ELEMENTS (sizes); i++)
    if (!get_size (rec, sizes[i].key, what, sizes[i].max,
                   G_STRUCT_MEMBER_P (g, sizes[i].offset), origin, error))
      goto out;
  if (!cJSON_GetObjectItemCaseSensitive (rec, "mask_token")) {
    fail (error, DFL_ERROR_FORMAT, origin, "%s has no \"mask_token\"", what);
    goto out;
  }
  {
    gint64 v;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive (rec, "mask_token");
    if (!whole (m, G_MAXUINT32, &v)) {
      char *t = json_text (m);
      fail (error, DFL_ERROR_FORMAT, origin, "%s: \"mask_token\" is %s; expected a token id", what, t);
      g_free (t);
      goto out;
    }
    g->mask_token = (guint32) v;
  }
  if (!get_list (rec, "taps", what, FALSE, GEOMETRY_MAX_TAPS, &g->taps, &g->n_taps, origin,
                 error)
      || !get_list (rec, "windows", what, TRUE, GEOMETRY_MAX_LAYERS, &g->windows, &n_windows,
                    origin, error)
      || !get_list (rec, "no_rope", what, TRUE, GEOMETRY_MAX_LAYERS, &g->no_rope, &g->n_no_rope,
                    origin, error)
      || !get_real (rec, "rope_theta", what, &g->rope_theta, origin, error)
      || !get_real (rec, "eps", what, &g->eps, origin, error))
    goto out;
  ok = check (g, n_windows, origin, error);
  if (ok && n_windows == 0)
    g_clear_pointer (&g->windows, g_free);
out:
  cJSON_Delete (rec);
  if (!ok)
    dfl_drafter_geometry_clear (g);
  return ok;
}

/* --- released v1 drafters (config.json) --- */

/* The public DFlash code's default taps: n layers spread over 1 … L−3,
 * rounded as Python's round() does (half to even: nearbyint). */
static void
default_taps (int target_layers, int n, int *taps)
{
  if (n == 1) {
    taps[0] = target_layers / 2;
    return;
  }
  for (int i = 0; i < n; i++)
    taps[i] = (int) nearbyint (1.0 + (double) i * (target_layers - 4) / (n - 1));
}

static const cJSON *
child (const cJSON *o, const char *key)
{
  const cJSON *c = o ? cJSON_GetObjectItemCaseSensitive (o, key) : NULL;
  return cJSON_IsNull (c) ? NULL : c;
}

static gboolean
rope_default (const cJSON *o)
{
  const cJSON *t = child (o, "rope_type");

  if (!t)
    t = child (o, "type");
  return cJSON_IsString (t) && strcmp (t->valuestring, "default") == 0;
}

gboolean
dfl_drafter_geometry_from_v1_config (DflDrafterGeometry *g, const char *json, gsize len,
                                     const char *origin, GError **error)
{
  const char *what = "config.json";
  cJSON *cfg;
  const cJSON *arch, *dc, *item, *types;
  gboolean ok = FALSE, is_dflash = FALSE;
  gint64 v;

  memset (g, 0, sizeof *g);
  cfg = dfl_json_parse (json, len, NULL, FALSE);
  if (!cfg || !cJSON_IsObject (cfg)) {
    fail (error, DFL_ERROR_FORMAT, origin, "not a JSON object");
    goto out;
  }
  arch = child (cfg, "architectures");
  if (cJSON_IsArray (arch)) {
    cJSON_ArrayForEach (item, arch)
      if (cJSON_IsString (item) && strcmp (item->valuestring, "DFlashDraftModel") == 0)
        is_dflash = TRUE;
  }
  if (!is_dflash) {
    char *t = json_text (arch);
    fail (error, DFL_ERROR_UNSUPPORTED, origin,
          "architectures is %s; a released DFlash drafter is DFlashDraftModel", t);
    g_free (t);
    goto out;
  }
  dc = child (cfg, "dflash_config");
  if (!get_size (cfg, "hidden_size", what, GEOMETRY_MAX_HIDDEN, &g->hidden, origin, error)
      || !get_size (cfg, "intermediate_size", what, GEOMETRY_MAX_INTERMEDIATE, &g->intermediate, origin, error)
      || !get_size (cfg, "num_hidden_layers", what, GEOMETRY_MAX_LAYERS, &g->layers, origin, error)
      || !get_size (cfg, "num_attention_heads", what, GEOMETRY_MAX_HEADS, &g->heads, origin, error)
      || !get_size (cfg, "vocab_size", what, GEOMETRY_MAX_VOCAB, &g->vocab, origin, error)
      || !get_size (cfg, "num_target_layers", what, GEOMETRY_MAX_LAYERS, &g->target_layers, origin, error))
    goto out;
  /* Hugging Face's defaults where a key is absent */
  g->kv_heads = g->heads;
  if (child (cfg, "num_key_value_heads")
      && !get_size (cfg, "num_key_value_heads", what, GEOMETRY_MAX_HEADS, &g->kv_heads, origin, error))
    goto out;
  g->head_dim = g->heads ? g->hidden / g->heads : 0;
  if (child (cfg, "head_dim")
      && !get_size (cfg, "head_dim", what, GEOMETRY_MAX_HEAD_DIM, &g->head_dim, origin, error))
    goto out;
  g->eps = 1e-6;
  if (child (cfg, "rms_norm_eps") && !get_real (cfg, "rms_norm_eps", what, &g->eps, origin, error))
    goto out;
  g->rope_theta = 10000.0;
  if (child (cfg, "rope_theta")) {
    if (!get_real (cfg, "rope_theta", what, &g->rope_theta, origin, error))
      goto out;
  } else if (child (child (cfg, "rope_parameters"), "rope_theta")) {
    if (!get_real (child (cfg, "rope_parameters"), "rope_theta", "config.json's rope_parameters",
                   &g->rope_theta, origin, error))
      goto out;
  }
  {
    /* rope scaling would change every position's rotation: not run */
    const cJSON *rs = child (cfg, "rope_scaling");
    const cJSON *rp = child (cfg, "rope_parameters");
    const cJSON *odd = NULL;
    if (rs && !rope_default (rs))
      odd = rs;
    else if (rp && child (rp, "rope_type") && !rope_default (rp))
      odd = rp;
    if (odd) {
      char *t = json_text (odd);
      fail (error, DFL_ERROR_UNSUPPORTED, origin, "rope scaling %s is not supported; expected none", t);
      g_free (t);
      goto out;
    }
  }
  /* block_size: top level in v1, in dflash_config in later drafters */
  if (child (cfg, "block_size")) {
    if (!get_size (cfg, "block_size", what, GEOMETRY_MAX_BLOCK, &g->block, origin, error))
      goto out;
  } else if (!get_size (dc, "block_size", "config.json's dflash_config (and its top level)",
                        GEOMETRY_MAX_BLOCK, &g->block, origin, error)) {
    goto out;
  }
  item = child (dc, "mask_token_id");
  if (!item) {
    fail (error, DFL_ERROR_FORMAT, origin, "dflash_config has no mask_token_id; a drafter needs its mask token");
    goto out;
  }
  if (!whole (item, G_MAXUINT32, &v)) {
    char *t = json_text (item);
    fail (error, DFL_ERROR_FORMAT, origin, "dflash_config.mask_token_id is %s; expected a token id", t);
    g_free (t);
    goto out;
  }
  g->mask_token = (guint32) v;
  if (child (dc, "target_layer_ids")) {
    if (!get_list (dc, "target_layer_ids", "config.json's dflash_config", FALSE,
                   GEOMETRY_MAX_TAPS, &g->taps, &g->n_taps, origin, error))
      goto out;
  } else if (g->layers > 0) {
    g->n_taps = g->layers;
    g->taps = g_new0 (int, g->n_taps);
    default_taps (g->target_layers, g->n_taps, g->taps);
  }
  /* per-layer windows: layer_types where given, else Qwen3's rule
   * (use_sliding_window and sliding_window, layers from max_window_layers on) */
  types = child (cfg, "layer_types");
  {
    int sliding = 0, max_window_layers = 28;
    gboolean use = FALSE;
    item = child (cfg, "sliding_window");
    if (item && !get_size (cfg, "sliding_window", what, GEOMETRY_MAX, &sliding, origin, error))
      goto out;
    use = cJSON_IsTrue (child (cfg, "use_sliding_window"));
    if (child (cfg, "max_window_layers")
        && !get_size (cfg, "max_window_layers", what, GEOMETRY_MAX, &max_window_layers, origin, error))
      goto out;
    g->windows = g_new0 (int, MAX (g->layers, 1));
    if (types) {
      int i = 0;
      if (!cJSON_IsArray (types) || cJSON_GetArraySize (types) != g->layers) {
        char *t = json_text (types);
        fail (error, DFL_ERROR_FORMAT, origin, "layer_types is %s; expected %d of \"full_attention\" or \"sliding_attention\"",
              t, g->layers);
        g_free (t);
        goto out;
      }
      cJSON_ArrayForEach (item, types) {
        if (cJSON_IsString (item) && strcmp (item->valuestring, "full_attention") == 0) {
          g->windows[i] = 0;
        } else if (cJSON_IsString (item) && strcmp (item->valuestring, "sliding_attention") == 0) {
          if (sliding <= 0) {
            fail (error, DFL_ERROR_FORMAT, origin,
                  "layer_types[%d] is sliding_attention but sliding_window is %d; expected a window of at least 1",
                  i, sliding);
            goto out;
          }
          g->windows[i] = sliding;
        } else {
          char *t = json_text (item);
          fail (error, DFL_ERROR_UNSUPPORTED, origin,
                "layer_types[%d] is %s; expected \"full_attention\" or \"sliding_attention\"", i, t);
          g_free (t);
          goto out;
        }
        i++;
      }
    } else {
      for (int i = 0; i < g->layers; i++)
        g->windows[i] = (use && sliding > 0 && i >= max_window_layers) ? sliding : 0;
    }
  }
  /* no convolution, no selector */
  g->conv_group = 1;
  g->conv_kernel = 0;
  g->selector_rank = 0;
  g->selector_top = 1;
  g->window = 0;
  ok = dfl_drafter_geometry_check (g, origin, error);
out:
  cJSON_Delete (cfg);
  if (!ok)
    dfl_drafter_geometry_clear (g);
  return ok;
}
