/* gst-dflash — loading a drafter: a DFlash 2 sidecar, a released v1 drafter
 * folder, or a blank one made in memory. Every tensor is checked (name,
 * dtype, shape) before it is used, and every message names the file.
 */
#include "drafter-private.h"
#include "dfl-error.h"
#include "dfl-json.h"

#include <cjson/cJSON.h>
#include <string.h>

#define SIDECAR_NAME "dflash.safetensors"

/* Finds (or, blank, makes) the weights under their names. */
typedef struct {
  DflDrafterWeights *d;
  const char *prefix;      /* "dflash." for a sidecar, "" for a v1 drafter */
  gboolean blank;
  DflDtype blank_dtype;    /* a blank drafter's matrices */
  GError **error;
} Loader;

static const char *
origin_of (const Loader *L, const DflStoredTensor *t)
{
  if (t && t->file)
    return t->file;
  return L->d->path;
}

static void
add_weight (DflDrafterWeights *d, const char *name, DflDtype dtype, gsize n, void *data, gboolean owned)
{
  DflDrafterWeight w = { g_strdup (name), dtype, n, data, owned };

  g_array_append_val (d->weights, w);
}

static char *
shape_text (const DflStoredTensor *t)
{
  GString *s = g_string_new ("[");

  for (guint i = 0; i < t->n_dims; i++)
    g_string_append_printf (s, "%s%" G_GINT64_FORMAT, i ? ", " : "", t->shape[i]);
  g_string_append_c (s, ']');
  return g_string_free (s, FALSE);
}

static const DflStoredTensor *
find (Loader *L, const char *name)
{
  const DflStoredTensor *t = dfl_safetensors_find (L->d->st, name);

  if (!t)
    g_set_error (L->error, DFL_ERROR, DFL_ERROR_FORMAT, "%s has no tensor %s%s", L->d->path, name,
                 L->prefix[0] ? " (a DFlash 2 sidecar names its tensors dflash.*)" : "");
  return t;
}

static gboolean
float_dtype (Loader *L, const DflStoredTensor *t)
{
  if (t->dtype == DFL_DTYPE_F32 || t->dtype == DFL_DTYPE_F16 || t->dtype == DFL_DTYPE_BF16)
    return TRUE;
  g_set_error (L->error, DFL_ERROR, DFL_ERROR_UNSUPPORTED, "%s: %s is %s; expected F32, F16 or BF16",
               origin_of (L, t), t->name, dfl_dtype_name (t->dtype));
  return FALSE;
}

/* A vector: F32 data aligned in the mapping is used in place; anything else
 * becomes an F32 copy. */
static const float *
as_f32 (Loader *L, const DflStoredTensor *t, const char *name)
{
  float *copy;

  if (t->dtype == DFL_DTYPE_F32 && ((guintptr) t->data % sizeof (float)) == 0) {
    add_weight (L->d, name, DFL_DTYPE_F32, t->n_elements, (void *) t->data, FALSE);
    return (const float *) t->data;
  }
  copy = dfl_tensor_dup_f32 (t);
  add_weight (L->d, name, DFL_DTYPE_F32, t->n_elements, copy, TRUE);
  return copy;
}

static void *
blank_alloc (Loader *L, const char *name, DflDtype dtype, gsize n)
{
  void *w = g_try_malloc0_n (n, dfl_dtype_size (dtype));

  if (!w) {
    g_set_error (L->error, DFL_ERROR, DFL_ERROR_LIMIT,
                 "%s: %s of %" G_GSIZE_FORMAT " %s values does not fit in memory",
                 L->d->path, name, n, dfl_dtype_name (dtype));
    return NULL;
  }
  add_weight (L->d, name, dtype, n, w, TRUE);
  return w;
}

static const float *
blank_f32 (Loader *L, const char *name, gsize n, float fill)
{
  float *w = blank_alloc (L, name, DFL_DTYPE_F32, n);

  if (w && fill != 0.0f)
    for (gsize i = 0; i < n; i++)
      w[i] = fill;
  return w;
}

static DflDtype
weight_type (DflDtype dtype)
{
  return dtype == DFL_DTYPE_BF16 ? DFL_DTYPE_BF16 : dtype == DFL_DTYPE_F16 ? DFL_DTYPE_F16
      : DFL_DTYPE_F32;
}

/* A matrix [rows][cols] in a float dtype, kept as stored: read in place from
 * the mapping (dfl_matmul_w converts as it reads and takes any alignment). */
static gboolean
mat (Loader *L, const char *suffix, gint64 rows, gint64 cols, DflWeights *out)
{
  g_autofree char *name = g_strconcat (L->prefix, suffix, NULL);
  const DflStoredTensor *t;

  out->rows = (int) rows;
  out->cols = (int) cols;
  if (L->blank) {
    out->type = weight_type (L->blank_dtype);
    return (out->data = blank_alloc (L, name, L->blank_dtype, (gsize) (rows * cols))) != NULL;
  }
  if (!(t = find (L, name)) || !float_dtype (L, t))
    return FALSE;
  if (t->n_dims != 2 || t->shape[0] != rows || t->shape[1] != cols) {
    g_autofree char *have = shape_text (t);
    g_set_error (L->error, DFL_ERROR, DFL_ERROR_MISMATCH,
                 "%s: %s is %s; expected [%" G_GINT64_FORMAT ", %" G_GINT64_FORMAT "]",
                 origin_of (L, t), name, have, rows, cols);
    return FALSE;
  }
  add_weight (L->d, name, t->dtype, t->n_elements, (void *) t->data, FALSE);
  out->data = t->data;
  out->type = weight_type (t->dtype);
  return TRUE;
}

/* A vector of `n` values in a float dtype; any shape of n elements (as the
 * reference takes it). Blank: all `fill`. */
static const float *
vec (Loader *L, const char *suffix, gint64 n, float fill)
{
  g_autofree char *name = g_strconcat (L->prefix, suffix, NULL);
  const DflStoredTensor *t;

  if (L->blank)
    return blank_f32 (L, name, (gsize) n, fill);
  if (!(t = find (L, name)) || !float_dtype (L, t))
    return NULL;
  if (t->n_elements != n) {
    g_autofree char *have = shape_text (t);
    g_set_error (L->error, DFL_ERROR, DFL_ERROR_MISMATCH,
                 "%s: %s is %s (%" G_GINT64_FORMAT " values); expected %" G_GINT64_FORMAT " values",
                 origin_of (L, t), name, have, t->n_elements, n);
    return NULL;
  }
  return as_f32 (L, t, name);
}

/* A selector codebook: F16 [vocab][rank], read a row at a time, so it stays
 * F16 in the mapping (2-byte aligned there, or copied). */
static const guint16 *
book (Loader *L, const char *suffix)
{
  g_autofree char *name = g_strconcat (L->prefix, suffix, NULL);
  const DflDrafterGeometry *g = &L->d->g;
  const DflStoredTensor *t;
  guint16 *copy;

  if (L->blank) {
    copy = g_new0 (guint16, (gsize) g->vocab * g->selector_rank);
    add_weight (L->d, name, DFL_DTYPE_F16, (gsize) g->vocab * g->selector_rank, copy, TRUE);
    return copy;
  }
  if (!(t = find (L, name)))
    return NULL;
  if (t->dtype != DFL_DTYPE_F16 || t->n_dims != 2 || t->shape[0] != g->vocab
      || t->shape[1] != g->selector_rank) {
    g_autofree char *have = shape_text (t);
    g_set_error (L->error, DFL_ERROR, t->dtype != DFL_DTYPE_F16 ? DFL_ERROR_UNSUPPORTED : DFL_ERROR_MISMATCH,
                 "%s: %s is %s %s; the codebooks must be F16 [%d, %d] (vocab, selector_rank)",
                 origin_of (L, t), name, dfl_dtype_name (t->dtype), have, g->vocab, g->selector_rank);
    return NULL;
  }
  if (((guintptr) t->data % 2) == 0) {
    add_weight (L->d, name, DFL_DTYPE_F16, t->n_elements, (void *) t->data, FALSE);
    return (const guint16 *) t->data;
  }
  copy = g_memdup2 (t->data, t->n_bytes);
  add_weight (L->d, name, DFL_DTYPE_F16, t->n_elements, copy, TRUE);
  return copy;
}

static gboolean
conv_load (Loader *L, const char *layer, const char *which, DflConv *c)
{
  const DflDrafterGeometry *g = &L->d->g;
  gint64 kn = g->conv_kernel, groups = g->hidden / g->conv_group;
  g_autofree char *base = g_strdup_printf ("%s.%s.base_kernel", layer, which);
  g_autofree char *proj = g_strdup_printf ("%s.%s.kernel_projection.weight", layer, which);

  return (c->base = vec (L, base, 2 * kn * g->hidden, 0.0f))
      && mat (L, proj, 2 * kn * groups, g->hidden, &c->proj);
}

static gboolean
load_weights (Loader *L)
{
  DflDrafterWeights *d = L->d;
  const DflDrafterGeometry *g = &d->g;
  gint64 hs = g->hidden, ffn = g->intermediate;
  gint64 qd = (gint64) g->heads * g->head_dim, kd = (gint64) g->kv_heads * g->head_dim;

  if (!mat (L, "fc.weight", hs, dfl_drafter_geometry_tap_width (g), &d->fc)
      || !(d->hidden_norm = vec (L, "hidden_norm.weight", hs, 1.0f))
      || !(d->norm = vec (L, "norm.weight", hs, 1.0f)))
    return FALSE;
  d->layers = g_new0 (DflDrafterLayer, g->layers);
  for (int i = 0; i < g->layers; i++) {
    DflDrafterLayer *l = &d->layers[i];
    char p[48];
#define LAYER_NAME(s) (g_snprintf (p, sizeof p, "layers.%d." s, i), p)
    if (!(l->in_norm = vec (L, LAYER_NAME ("input_layernorm.weight"), hs, 1.0f))
        || !(l->post_norm = vec (L, LAYER_NAME ("post_attention_layernorm.weight"), hs, 1.0f))
        || !mat (L, LAYER_NAME ("self_attn.q_proj.weight"), qd, hs, &l->q)
        || !mat (L, LAYER_NAME ("self_attn.k_proj.weight"), kd, hs, &l->k)
        || !mat (L, LAYER_NAME ("self_attn.v_proj.weight"), kd, hs, &l->v)
        || !mat (L, LAYER_NAME ("self_attn.o_proj.weight"), hs, qd, &l->o)
        || !(l->q_norm = vec (L, LAYER_NAME ("self_attn.q_norm.weight"), g->head_dim, 1.0f))
        || !(l->k_norm = vec (L, LAYER_NAME ("self_attn.k_norm.weight"), g->head_dim, 1.0f))
        || !mat (L, LAYER_NAME ("mlp.gate_proj.weight"), ffn, hs, &l->gate)
        || !mat (L, LAYER_NAME ("mlp.up_proj.weight"), ffn, hs, &l->up)
        || !mat (L, LAYER_NAME ("mlp.down_proj.weight"), hs, ffn, &l->down))
      return FALSE;
#undef LAYER_NAME
    if (d->conv) {
      g_snprintf (p, sizeof p, "layers.%d", i);
      if (!conv_load (L, p, "attention_conv", &l->attn_conv)
          || !conv_load (L, p, "mlp_conv", &l->mlp_conv))
        return FALSE;
    }
  }
  if (d->selector) {
    if (!mat (L, "candidate_selector.hidden_projection.weight", g->selector_rank, hs, &d->sel)
        || !(d->books[0] = book (L, "candidate_selector.predecessor_codebook"))
        || !(d->books[1] = book (L, "candidate_selector.successor_codebook")))
      return FALSE;
  }
  return TRUE;
}

DflDrafterWeights *
dfl_drafter_weights_alloc (const DflDrafterGeometry *g, const char *path)
{
  DflDrafterWeights *d = g_new0 (DflDrafterWeights, 1);

  d->refcount = 1;
  d->path = g_strdup (path);
  if (g)
    dfl_drafter_geometry_copy (&d->g, g);
  d->weights = g_array_new (FALSE, TRUE, sizeof (DflDrafterWeight));
  return d;
}

DflDrafterWeights *
dfl_drafter_weights_new_bound (DflDrafterWeights *host, const DflDrafterGeometry *g,
                               const char *path, const DflDraftEngine *engine, DflDevice *device,
                               const DflDraftTrunk *trunk)
{
  DflDrafterWeights *w = dfl_drafter_weights_alloc (host ? &host->g : g, host ? host->path : path);

  if (host) {
    w->host = dfl_drafter_weights_ref (host);
    w->v1 = host->v1;
    w->conv = host->conv;
    w->selector = host->selector;
    memcpy (w->binding, host->binding, sizeof w->binding);
    w->has_binding = host->has_binding;
    memcpy (w->binding_signs, host->binding_signs, sizeof w->binding_signs);
    w->has_binding_signs = host->has_binding_signs;
  }
  w->engine = engine;
  w->device = device ? dfl_device_ref (device) : NULL;
  w->trunk = *trunk;
  return w;
}

/* The rotation's frequencies, once the geometry is in. */
static void
init_inv_freq (DflDrafterWeights *d)
{
  d->inv_freq = g_new0 (float, d->g.head_dim / 2);
  dfl_rope_inv_freq (d->inv_freq, d->g.head_dim, d->g.rope_theta);
}

DflDrafterWeights *
dfl_drafter_weights_ref (DflDrafterWeights *w)
{
  g_atomic_int_inc (&w->refcount);
  return w;
}

void
dfl_drafter_weights_unref (DflDrafterWeights *d)
{
  if (!d || !g_atomic_int_dec_and_test (&d->refcount))
    return;
  if (d->engine && d->engine->free)
    d->engine->free (d->native);
  g_clear_pointer (&d->device, dfl_device_unref);
  g_clear_pointer (&d->host, dfl_drafter_weights_unref);
  for (guint i = 0; i < d->weights->len; i++) {
    DflDrafterWeight *w = &g_array_index (d->weights, DflDrafterWeight, i);
    g_free (w->name);
    if (w->owned)
      g_free (w->data);
  }
  g_array_unref (d->weights);
  g_free (d->layers);
  g_free (d->inv_freq);
  g_free (d->binding_sample);
  g_free (d->arena_cache);
  g_clear_pointer (&d->route, dfl_route_free);
  g_clear_pointer (&d->st, dfl_safetensors_free);
  dfl_drafter_geometry_clear (&d->g);
  g_free (d->path);
  g_free (d);
}

/* A 16-hex-digit member of base_binding into `hex`, lowercase; FALSE where
 * it is there but not 16 hex digits. */
static gboolean
binding_hex (const cJSON *b, const char *key, char hex[17], gboolean *present)
{
  const cJSON *h = cJSON_GetObjectItemCaseSensitive (b, key);
  gboolean ok = cJSON_IsString (h) && strlen (h->valuestring) == 16;

  *present = h != NULL;
  for (int i = 0; ok && i < 16; i++)
    ok = g_ascii_isxdigit (h->valuestring[i]);
  for (int i = 0; ok && i < 16; i++)
    hex[i] = g_ascii_tolower (h->valuestring[i]);
  if (ok)
    hex[16] = 0;
  return ok || !*present;
}

/* base_binding's trunk_sample into d: DFL_TRUNK_SAMPLE values of the
 * embedding, then as many of an untied head, each the 8 hex digits of its
 * F32 bits; FALSE where it is there but not that. */
static gboolean
binding_sample (DflDrafterWeights *d, const cJSON *b)
{
  const cJSON *h = cJSON_GetObjectItemCaseSensitive (b, "trunk_sample");
  gsize len;
  guint n;

  if (!h)
    return TRUE;
  if (!cJSON_IsString (h))
    return FALSE;
  len = strlen (h->valuestring);
  n = (guint) (len / 8);
  if (len % 8 || (n != DFL_TRUNK_SAMPLE && n != 2 * DFL_TRUNK_SAMPLE))
    return FALSE;
  for (gsize i = 0; i < len; i++)
    if (!g_ascii_isxdigit (h->valuestring[i]))
      return FALSE;
  d->binding_sample = g_new (float, n);
  d->n_binding_sample = n;
  for (guint k = 0; k < n; k++) {
    guint32 bits = 0;
    for (int i = 0; i < 8; i++)
      bits = bits << 4 | (guint32) g_ascii_xdigit_value (h->valuestring[8 * k + i]);
    memcpy (&d->binding_sample[k], &bits, 4);
  }
  return TRUE;
}

/* base_binding = {"trunk_hash64": "<16 hex>"}, and, where the drafter binds
 * to conversions of its target too, "trunk_signs64" and "trunk_sample"
 * (trunk-hash.c); any of them; the hashes kept lowercase. */
static gboolean
parse_binding (DflDrafterWeights *d, const char *json, GError **error)
{
  cJSON *b = dfl_json_parse (json, strlen (json) + 1, NULL, FALSE);
  gboolean ok = cJSON_IsObject (b)
      && binding_hex (b, "trunk_hash64", d->binding, &d->has_binding)
      && binding_hex (b, "trunk_signs64", d->binding_signs, &d->has_binding_signs)
      && binding_sample (d, b)
      && (d->has_binding || d->has_binding_signs || d->binding_sample);

  if (!ok) {
    d->has_binding = d->has_binding_signs = FALSE;
    g_clear_pointer (&d->binding_sample, g_free);
    d->n_binding_sample = 0;
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: base_binding is %.200s%s; expected {\"trunk_hash64\": \"<16 hex digits>\"}"
                 ", \"trunk_signs64\" and/or \"trunk_sample\" (%d or %d values, 8 hex digits "
                 "each)", d->path, json, strlen (json) > 200 ? "…" : "", DFL_TRUNK_SAMPLE,
                 2 * DFL_TRUNK_SAMPLE);
  }
  cJSON_Delete (b);
  return ok;
}

static DflDrafterWeights *
open_sidecar (const char *path, GError **error)
{
  g_autoptr (DflSafetensors) st = dfl_safetensors_open (path, error);
  DflDrafterGeometry g;
  const char *rec, *binding, *route;
  DflDrafterWeights *d;
  Loader L;

  if (!st)
    return NULL;
  if (!(rec = dfl_safetensors_metadata (st, "dflash"))) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s is not a DFlash sidecar: its __metadata__ has no \"dflash\" record", path);
    return NULL;
  }
  if (!dfl_drafter_geometry_parse (&g, rec, path, error))
    return NULL;
  d = dfl_drafter_weights_alloc (&g, path);
  dfl_drafter_geometry_clear (&g);
  d->st = g_steal_pointer (&st);
  d->conv = d->selector = TRUE;
  /* a sidecar has both; a zero kernel or rank would be empty tensors */
  if (d->g.conv_kernel < 1 || d->g.selector_rank < 1) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                 "%s: unsupported DFlash geometry: conv_kernel %d, selector_rank %d; a DFlash 2 sidecar has both (at least 1)",
                 path, d->g.conv_kernel, d->g.selector_rank);
    goto fail;
  }
  if ((binding = dfl_safetensors_metadata (d->st, "base_binding"))
      && !parse_binding (d, binding, error))
    goto fail;
  L = (Loader) { d, "dflash.", FALSE, DFL_DTYPE_F32, error };
  if (!load_weights (&L))
    goto fail;
  if ((route = dfl_safetensors_metadata (d->st, "dflash_route"))) {
    GError *rerr = NULL;
    /* as the reference: a router that does not read is a sidecar without one */
    if (!(d->route = dfl_route_parse (route, d->g.hidden, path, &rerr))) {
      g_warning ("%s", rerr->message);
      g_error_free (rerr);
    }
  }
  init_inv_freq (d);
  return d;
fail:
  dfl_drafter_weights_unref (d);
  return NULL;
}

static DflDrafterWeights *
open_v1 (const char *dir, GError **error)
{
  g_autofree char *cfg_path = g_build_filename (dir, "config.json", NULL);
  g_autofree char *json = NULL;
  DflDrafterGeometry g;
  DflDrafterWeights *d;
  GError *err = NULL;
  gsize len;
  Loader L;

  if (!g_file_get_contents (cfg_path, &json, &len, &err)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_IO, "%s: %s", cfg_path, err->message);
    g_error_free (err);
    return NULL;
  }
  if (!dfl_drafter_geometry_from_v1_config (&g, json, len, cfg_path, error))
    return NULL;
  d = dfl_drafter_weights_alloc (&g, dir);
  dfl_drafter_geometry_clear (&g);
  d->v1 = TRUE;
  if (!(d->st = dfl_safetensors_open (dir, error)))
    goto fail;
  g_free (d->path);
  d->path = g_strdup (dfl_safetensors_path (d->st));
  L = (Loader) { d, "", FALSE, DFL_DTYPE_F32, error };
  if (!load_weights (&L))
    goto fail;
  init_inv_freq (d);
  return d;
fail:
  dfl_drafter_weights_unref (d);
  return NULL;
}

DflDrafterWeights *
dfl_drafter_weights_open (const char *path, GError **error)
{
  g_return_val_if_fail (path != NULL, NULL);

  if (g_file_test (path, G_FILE_TEST_IS_DIR)) {
    g_autofree char *side = g_build_filename (path, SIDECAR_NAME, NULL);
    g_autofree char *cfg = g_build_filename (path, "config.json", NULL);
    if (g_file_test (side, G_FILE_TEST_EXISTS))
      return open_sidecar (side, error);
    if (g_file_test (cfg, G_FILE_TEST_EXISTS))
      return open_v1 (path, error);
    g_set_error (error, DFL_ERROR, DFL_ERROR_IO,
                 "%s holds neither %s (a DFlash 2 sidecar) nor config.json (a released DFlash drafter)",
                 path, SIDECAR_NAME);
    return NULL;
  }
  return open_sidecar (path, error);
}

DflDrafterWeights *
dfl_drafter_weights_new_blank (const DflDrafterGeometry *g, gboolean conv, gboolean selector, GError **error)
{
  return dfl_drafter_weights_new_blank_as (g, conv, selector, DFL_DTYPE_F32, error);
}

DflDrafterWeights *
dfl_drafter_weights_new_blank_as (const DflDrafterGeometry *g, gboolean conv, gboolean selector,
                          DflDtype matrix_dtype, GError **error)
{
  DflDrafterWeights *d;
  Loader L;

  g_return_val_if_fail (g != NULL, NULL);
  if (matrix_dtype != DFL_DTYPE_F32 && matrix_dtype != DFL_DTYPE_F16
      && matrix_dtype != DFL_DTYPE_BF16) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID, "a blank drafter: matrices of %s; expected F32, F16 or BF16",
                 dfl_dtype_name (matrix_dtype));
    return NULL;
  }
  if (!dfl_drafter_geometry_check (g, "a blank drafter", error))
    return NULL;
  if ((conv && g->conv_kernel < 1) || (selector && g->selector_rank < 1)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID,
                 "a blank drafter: conv_kernel %d, selector_rank %d; a convolution and a selector need at least 1",
                 g->conv_kernel, g->selector_rank);
    return NULL;
  }
  d = dfl_drafter_weights_alloc (g, "(blank drafter)");
  d->conv = conv;
  d->selector = selector;
  d->v1 = !conv && !selector;
  L = (Loader) { d, "", TRUE, matrix_dtype, error };
  if (!load_weights (&L)) {
    dfl_drafter_weights_unref (d);
    return NULL;
  }
  init_inv_freq (d);
  return d;
}

const DflDrafterGeometry *
dfl_drafter_weights_geometry (const DflDrafterWeights *w)
{
  return &w->g;
}

const char *
dfl_drafter_weights_path (const DflDrafterWeights *w)
{
  return w->path;
}

void
dfl_drafter_weights_set_arena_cache (DflDrafterWeights *w, const char *dir)
{
  g_return_if_fail (w != NULL && !w->engine);
  g_free (w->arena_cache);
  w->arena_cache = g_strdup (dir);
}

gboolean
dfl_drafter_weights_is_v1 (const DflDrafterWeights *w)
{
  return w->v1;
}

gboolean
dfl_drafter_weights_has_conv (const DflDrafterWeights *w)
{
  return w->conv;
}

gboolean
dfl_drafter_weights_has_selector (const DflDrafterWeights *w)
{
  return w->selector;
}

const char *
dfl_drafter_weights_binding (const DflDrafterWeights *w)
{
  return w->has_binding ? w->binding : NULL;
}

DflDevice *
dfl_drafter_weights_device (const DflDrafterWeights *w)
{
  return w->device;
}

DflDtype
dfl_drafter_weights_stored_dtype (const DflDrafterWeights *w)
{
  DflDtype t = dfl_drafter_weights_base (w)->fc.type;

  return t == DFL_DTYPE_BF16 || t == DFL_DTYPE_F16 ? t : DFL_DTYPE_F32;
}

void
dfl_drafter_weights_foreach (DflDrafterWeights *w, DflDrafterWeightFunc func, gpointer user_data)
{
  for (guint i = 0; i < w->weights->len; i++) {
    DflDrafterWeight *x = &g_array_index (w->weights, DflDrafterWeight, i);
    func (x->name, x->dtype, x->n, x->data, x->owned, user_data);
  }
}

guint64
dfl_drafter_weights_bytes (const DflDrafterWeights *w)
{
  guint64 bytes = 0;

  if (w->engine && w->device)
    return w->device_bytes;
  w = dfl_drafter_weights_base (w);
  for (guint i = 0; i < w->weights->len; i++) {
    const DflDrafterWeight *x = &g_array_index (w->weights, DflDrafterWeight, i);
    bytes += (guint64) x->n * dfl_dtype_size (x->dtype);
  }
  return bytes;
}
