/* gst-dflash — a Qwen3 checkpoint's config.json and generation_config.json.
 *
 * Reads both the transformers 4 layout (rope_theta at the top) and the
 * transformers 5 layout (rope_parameters), checks every value against what
 * the target runs, and refuses what it does not run with a message saying
 * what was found and what is accepted.
 */
#include "dfl-json.h"
#include "qwen3-config.h"
#include "dfl-error.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <string.h>

#include <glib/gstdio.h>

#define DFL_CFG_ARCH "Qwen3ForCausalLM"
/* config files are a few KiB; refuse absurd ones before reading them */
#define DFL_CFG_MAX_FILE (16u * 1024u * 1024u)

/* Upper bounds: far above any Qwen3 checkpoint, low enough that sizes
 * computed from them (hidden × vocab, layers × kv cache) cannot overflow. */
#define DFL_CFG_MAX_HIDDEN 65536
#define DFL_CFG_MAX_INTERMEDIATE 1048576
#define DFL_CFG_MAX_LAYERS 1024
#define DFL_CFG_MAX_HEADS 1024
#define DFL_CFG_MAX_HEAD_DIM 1024
#define DFL_CFG_MAX_VOCAB (4 * 1024 * 1024)
#define DFL_CFG_MAX_POSITIONS (16 * 1024 * 1024)

/* The item, or NULL where the key is absent or null: both mean "use the
 * default" for the optional keys that transformers writes as null. */
static const cJSON *
dfl_cfg_get (const cJSON *obj, const char *key)
{
  const cJSON *item = cJSON_GetObjectItemCaseSensitive (obj, key);

  return cJSON_IsNull (item) ? NULL : item;
}

static gboolean
dfl_cfg_as_int (const cJSON *item, const char *origin, const char *key, int *out, GError **error)
{
  double d;

  if (!cJSON_IsNumber (item)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: key '%s' is %s, expected an integer", origin, key, dfl_json_kind (item));
    return FALSE;
  }
  d = item->valuedouble;
  if (isnan (d) || d != floor (d) || d < G_MININT || d > G_MAXINT) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: key '%s' is %.17g, expected an integer that fits in 32 bits",
                 origin, key, d);
    return FALSE;
  }
  *out = (int) d;
  return TRUE;
}

/* An integer key; `required` keys may not be absent (nor null). */
static gboolean
dfl_cfg_int (const cJSON *root, const char *origin, const char *key, gboolean required,
             int def, int *out, GError **error)
{
  const cJSON *item = cJSON_GetObjectItemCaseSensitive (root, key);

  if (item == NULL || (!required && cJSON_IsNull (item))) {
    if (required) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "%s: missing key '%s'", origin, key);
      return FALSE;
    }
    *out = def;
    return TRUE;
  }
  return dfl_cfg_as_int (item, origin, key, out, error);
}

/* The value of `key` where it is there and of the kind `is` accepts
 * (`*item`; NULL where the key is absent: the caller's default); FALSE with
 * an error naming the file, the key and what was expected otherwise. */
static gboolean
dfl_cfg_typed (const cJSON *obj, const char *origin, const char *key,
               cJSON_bool (*is) (const cJSON *), const char *expected, const cJSON **item,
               GError **error)
{
  *item = dfl_cfg_get (obj, key);
  if (*item == NULL || is (*item))
    return TRUE;
  g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT, "%s: key '%s' is %s, expected %s", origin,
               key, dfl_json_kind (*item), expected);
  return FALSE;
}

static gboolean
dfl_cfg_double (const cJSON *obj, const char *origin, const char *key, double def,
                double *out, GError **error)
{
  const cJSON *item;

  if (!dfl_cfg_typed (obj, origin, key, cJSON_IsNumber, "a number", &item, error))
    return FALSE;
  *out = item ? item->valuedouble : def;
  return TRUE;
}

static gboolean
dfl_cfg_bool (const cJSON *root, const char *origin, const char *key, gboolean def,
              gboolean *out, GError **error)
{
  const cJSON *item;

  if (!dfl_cfg_typed (root, origin, key, cJSON_IsBool, "true or false", &item, error))
    return FALSE;
  *out = item ? cJSON_IsTrue (item) : def;
  return TRUE;
}

/* Below the range is a malformed file; above it, a size we refuse to run. */
static gboolean
dfl_cfg_range (const char *origin, const char *key, int v, int lo, int hi, GError **error)
{
  if (v < lo || v > hi) {
    g_set_error (error, DFL_ERROR, v < lo ? DFL_ERROR_FORMAT : DFL_ERROR_LIMIT,
                 "%s: '%s' is %d; accepted: %d to %d", origin, key, v, lo, hi);
    return FALSE;
  }
  return TRUE;
}

/* eos_token_id: one id or a list of them. */
static gboolean
dfl_cfg_eos (const cJSON *item, const char *origin, int *ids, int *n, GError **error)
{
  const cJSON *e;
  int count = 0;

  if (cJSON_IsNumber (item)) {
    if (!dfl_cfg_as_int (item, origin, "eos_token_id", &ids[0], error))
      return FALSE;
    if (ids[0] < 0) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: 'eos_token_id' is %d; token ids are not negative", origin, ids[0]);
      return FALSE;
    }
    *n = 1;
    return TRUE;
  }
  if (!cJSON_IsArray (item)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: key 'eos_token_id' is %s, expected an integer or a list of integers",
                 origin, dfl_json_kind (item));
    return FALSE;
  }
  if (cJSON_GetArraySize (item) > DFL_MAX_EOS_IDS) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT,
                 "%s: 'eos_token_id' lists %d ids; at most %d are accepted",
                 origin, cJSON_GetArraySize (item), DFL_MAX_EOS_IDS);
    return FALSE;
  }
  cJSON_ArrayForEach (e, item) {
    char key[32];

    g_snprintf (key, sizeof key, "eos_token_id[%d]", count);
    if (!dfl_cfg_as_int (e, origin, key, &ids[count], error))
      return FALSE;
    if (ids[count] < 0) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: '%s' is %d; token ids are not negative", origin, key, ids[count]);
      return FALSE;
    }
    count++;
  }
  *n = count;
  return TRUE;
}

/* Parses `len` bytes of JSON that must be one object, with only whitespace
 * after it. */
static cJSON *
dfl_cfg_parse_object (const char *json, gsize len, const char *origin, GError **error)
{
  const char *end = NULL;
  gboolean trailing = FALSE;
  cJSON *root;

  root = dfl_json_parse (json, len, &end, FALSE);
  if (root != NULL) {
    for (; end < json + len; end++) {
      if (*end != ' ' && *end != '\t' && *end != '\n' && *end != '\r')
        break;
    }
    if (end < json + len) {
      cJSON_Delete (root);
      root = NULL;
      trailing = TRUE;
    }
  }
  if (root == NULL) {
    int line = 1, col = 1;
    const char *p;

    for (p = json; end != NULL && p < end && p < json + len; p++) {
      if (*p == '\n') {
        line++;
        col = 1;
      } else {
        col++;
      }
    }
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: not valid JSON (%s at line %d, column %d)", origin,
                 trailing ? "content after the end of the object" : "error", line, col);
    return NULL;
  }
  if (!cJSON_IsObject (root)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: holds %s, expected a JSON object", origin, dfl_json_kind (root));
    cJSON_Delete (root);
    return NULL;
  }
  return root;
}

static gboolean
dfl_cfg_check_arch (const cJSON *root, const char *origin, GError **error)
{
  const cJSON *archs = dfl_cfg_get (root, "architectures");
  const cJSON *mt = dfl_cfg_get (root, "model_type");
  const cJSON *a;

  if (archs == NULL) {
    if (mt == NULL) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: missing key 'architectures' (nor is there a 'model_type')", origin);
      return FALSE;
    }
    if (!cJSON_IsString (mt)) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: key 'model_type' is %s, expected a string", origin, dfl_json_kind (mt));
      return FALSE;
    }
    if (strcmp (mt->valuestring, "qwen3") != 0) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                   "%s: model_type '%s' is not supported (gst-dflash runs qwen3)",
                   origin, mt->valuestring);
      return FALSE;
    }
    return TRUE;
  }

  if (!cJSON_IsArray (archs)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: key 'architectures' is %s, expected a list of strings",
                 origin, dfl_json_kind (archs));
    return FALSE;
  }
  cJSON_ArrayForEach (a, archs) {
    if (!cJSON_IsString (a)) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: an entry of 'architectures' is %s, expected a string",
                   origin, dfl_json_kind (a));
      return FALSE;
    }
    if (strcmp (a->valuestring, DFL_CFG_ARCH) == 0)
      return TRUE;
  }
  if (archs->child == NULL) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                 "%s: 'architectures' is empty (gst-dflash runs " DFL_CFG_ARCH ")", origin);
  } else {
    GString *names = g_string_new (NULL);

    cJSON_ArrayForEach (a, archs)
      g_string_append_printf (names, "%s'%s'", names->len ? ", " : "", a->valuestring);
    g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                 "%s: architecture%s %s %s not supported (gst-dflash runs " DFL_CFG_ARCH ")",
                 origin, archs->child->next ? "s" : "", names->str,
                 archs->child->next ? "are" : "is");
    g_string_free (names, TRUE);
  }
  return FALSE;
}

/* A RoPE block (rope_scaling, or transformers 5's rope_parameters) is fine
 * where it asks for plain RoPE: no type, or "default". */
static gboolean
dfl_cfg_check_rope_type (const cJSON *block, const char *origin, const char *key,
                         gboolean type_required, GError **error)
{
  const cJSON *type;
  const char *field = "rope_type";

  if (!cJSON_IsObject (block)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: key '%s' is %s, expected an object", origin, key, dfl_json_kind (block));
    return FALSE;
  }
  type = dfl_cfg_get (block, "rope_type");
  if (type == NULL) {
    field = "type";            /* the older spelling */
    type = dfl_cfg_get (block, "type");
  }
  if (type == NULL) {
    if (type_required) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                   "%s: '%s' is set without a rope_type; RoPE scaling is not supported "
                   "(gst-dflash runs plain RoPE)", origin, key);
      return FALSE;
    }
    return TRUE;
  }
  if (!cJSON_IsString (type)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: key '%s.%s' is %s, expected a string", origin, key, field,
                 dfl_json_kind (type));
    return FALSE;
  }
  if (strcmp (type->valuestring, "default") != 0) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                 "%s: %s.%s '%s' is not supported (gst-dflash runs plain RoPE, "
                 "rope_type 'default')", origin, key, field, type->valuestring);
    return FALSE;
  }
  return TRUE;
}

static gboolean
dfl_cfg_check_sliding (const cJSON *root, const char *origin, GError **error)
{
  gboolean sliding = FALSE;
  const cJSON *types, *t;
  int i = 0;

  if (!dfl_cfg_bool (root, origin, "use_sliding_window", FALSE, &sliding, error))
    return FALSE;
  if (sliding) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                 "%s: 'use_sliding_window' is true; sliding-window attention is not supported "
                 "(gst-dflash runs full attention in every layer)", origin);
    return FALSE;
  }
  types = dfl_cfg_get (root, "layer_types");
  if (types == NULL)
    return TRUE;
  if (!cJSON_IsArray (types)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: key 'layer_types' is %s, expected a list of strings",
                 origin, dfl_json_kind (types));
    return FALSE;
  }
  cJSON_ArrayForEach (t, types) {
    if (!cJSON_IsString (t)) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: 'layer_types[%d]' is %s, expected a string", origin, i, dfl_json_kind (t));
      return FALSE;
    }
    if (strcmp (t->valuestring, "full_attention") != 0) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                   "%s: 'layer_types[%d]' is '%s'; only 'full_attention' layers are supported "
                   "(no sliding-window attention)", origin, i, t->valuestring);
      return FALSE;
    }
    i++;
  }
  return TRUE;
}

static gboolean
dfl_cfg_fill (DflQwen3Config *c, const cJSON *root, const char *origin, GError **error)
{
  const cJSON *rope_params, *rope_scaling, *act, *item, *types;

  if (!dfl_cfg_check_arch (root, origin, error))
    return FALSE;

  /* what we refuse to run, before what we could not parse */
  act = dfl_cfg_get (root, "hidden_act");
  if (act != NULL && (!cJSON_IsString (act) || strcmp (act->valuestring, "silu") != 0)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                 "%s: hidden_act %s%s%s is not supported (gst-dflash runs 'silu')", origin,
                 cJSON_IsString (act) ? "'" : "",
                 cJSON_IsString (act) ? act->valuestring : dfl_json_kind (act),
                 cJSON_IsString (act) ? "'" : "");
    return FALSE;
  }
  rope_scaling = dfl_cfg_get (root, "rope_scaling");
  if (rope_scaling != NULL
      && !dfl_cfg_check_rope_type (rope_scaling, origin, "rope_scaling", TRUE, error))
    return FALSE;
  rope_params = dfl_cfg_get (root, "rope_parameters");
  if (rope_params != NULL
      && !dfl_cfg_check_rope_type (rope_params, origin, "rope_parameters", FALSE, error))
    return FALSE;
  if (!dfl_cfg_check_sliding (root, origin, error))
    return FALSE;

  if (!dfl_cfg_int (root, origin, "hidden_size", TRUE, 0, &c->hidden, error)
      || !dfl_cfg_int (root, origin, "intermediate_size", TRUE, 0, &c->intermediate, error)
      || !dfl_cfg_int (root, origin, "num_hidden_layers", TRUE, 0, &c->layers, error)
      || !dfl_cfg_int (root, origin, "num_attention_heads", TRUE, 0, &c->heads, error)
      || !dfl_cfg_int (root, origin, "vocab_size", TRUE, 0, &c->vocab, error)
      || !dfl_cfg_int (root, origin, "num_key_value_heads", FALSE, c->heads, &c->kv_heads, error)
      || !dfl_cfg_int (root, origin, "head_dim", FALSE, 0, &c->head_dim, error)
      || !dfl_cfg_int (root, origin, "max_position_embeddings", FALSE, 40960,
                       &c->max_positions, error)
      || !dfl_cfg_int (root, origin, "bos_token_id", FALSE, -1, &c->bos_id, error)
      || !dfl_cfg_double (root, origin, "rms_norm_eps", 1e-6, &c->rms_eps, error)
      || !dfl_cfg_bool (root, origin, "tie_word_embeddings", FALSE, &c->tie_word_embeddings, error)
      || !dfl_cfg_bool (root, origin, "attention_bias", FALSE, &c->attention_bias, error))
    return FALSE;

  /* transformers 5 moved rope_theta into rope_parameters; where both are
   * present the newer place wins */
  if (!dfl_cfg_double (root, origin, "rope_theta", 10000.0, &c->rope_theta, error))
    return FALSE;
  item = rope_params != NULL ? dfl_cfg_get (rope_params, "rope_theta") : NULL;
  if (item != NULL) {
    if (!cJSON_IsNumber (item)) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: key 'rope_parameters.rope_theta' is %s, expected a number",
                   origin, dfl_json_kind (item));
      return FALSE;
    }
    c->rope_theta = item->valuedouble;
  }

  c->n_eos = 0;
  item = dfl_cfg_get (root, "eos_token_id");
  if (item != NULL && !dfl_cfg_eos (item, origin, c->eos_ids, &c->n_eos, error))
    return FALSE;

  if (!dfl_cfg_range (origin, "hidden_size", c->hidden, 1, DFL_CFG_MAX_HIDDEN, error)
      || !dfl_cfg_range (origin, "intermediate_size", c->intermediate, 1,
                         DFL_CFG_MAX_INTERMEDIATE, error)
      || !dfl_cfg_range (origin, "num_hidden_layers", c->layers, 1, DFL_CFG_MAX_LAYERS, error)
      || !dfl_cfg_range (origin, "num_attention_heads", c->heads, 1, DFL_CFG_MAX_HEADS, error)
      || !dfl_cfg_range (origin, "num_key_value_heads", c->kv_heads, 1, c->heads, error)
      || !dfl_cfg_range (origin, "vocab_size", c->vocab, 1, DFL_CFG_MAX_VOCAB, error)
      || !dfl_cfg_range (origin, "max_position_embeddings", c->max_positions, 1,
                         DFL_CFG_MAX_POSITIONS, error))
    return FALSE;
  if (c->heads % c->kv_heads != 0) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: 'num_attention_heads' %d is not a multiple of 'num_key_value_heads' %d",
                 origin, c->heads, c->kv_heads);
    return FALSE;
  }
  if (c->head_dim == 0 && dfl_cfg_get (root, "head_dim") == NULL) {
    if (c->hidden % c->heads != 0) {
      g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                   "%s: no 'head_dim', and 'hidden_size' %d is not a multiple of "
                   "'num_attention_heads' %d", origin, c->hidden, c->heads);
      return FALSE;
    }
    c->head_dim = c->hidden / c->heads;
  }
  if (!dfl_cfg_range (origin, "head_dim", c->head_dim, 2, DFL_CFG_MAX_HEAD_DIM, error))
    return FALSE;
  if (c->head_dim % 2 != 0) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: 'head_dim' is %d; it must be even (RoPE rotates pairs)", origin, c->head_dim);
    return FALSE;
  }
  if (!(c->rms_eps > 0 && c->rms_eps < 1)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: 'rms_norm_eps' is %g; accepted: above 0 and below 1", origin, c->rms_eps);
    return FALSE;
  }
  if (!(c->rope_theta > 0 && isfinite (c->rope_theta))) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: rope_theta is %g; accepted: a finite number above 0", origin, c->rope_theta);
    return FALSE;
  }
  if (c->bos_id < 0 && dfl_cfg_get (root, "bos_token_id") != NULL) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: 'bos_token_id' is %d; token ids are not negative", origin, c->bos_id);
    return FALSE;
  }
  types = dfl_cfg_get (root, "layer_types");
  if (types != NULL && cJSON_GetArraySize (types) != c->layers) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_FORMAT,
                 "%s: 'layer_types' lists %d layers but 'num_hidden_layers' is %d",
                 origin, cJSON_GetArraySize (types), c->layers);
    return FALSE;
  }
  return TRUE;
}

gboolean
dfl_qwen3_config_parse (DflQwen3Config *cfg, const char *json, gsize len,
                        const char *origin, GError **error)
{
  DflQwen3Config c = { 0 };
  cJSON *root;
  gboolean ok;

  g_return_val_if_fail (cfg != NULL, FALSE);
  g_return_val_if_fail (json != NULL || len == 0, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);
  if (origin == NULL)
    origin = "config.json";

  root = dfl_cfg_parse_object (json, len, origin, error);
  if (root == NULL)
    return FALSE;
  ok = dfl_cfg_fill (&c, root, origin, error);
  cJSON_Delete (root);
  if (ok)
    *cfg = c;                  /* the caller's struct is untouched on failure */
  return ok;
}

static char *
dfl_cfg_read (const char *path, gsize *len, GError **error)
{
  GStatBuf sb;
  GError *read_error = NULL;
  char *text = NULL;

  if (g_stat (path, &sb) != 0) {
    int errsv = errno;

    g_set_error (error, DFL_ERROR, DFL_ERROR_IO, "%s: cannot open: %s", path, g_strerror (errsv));
    return NULL;
  }
  if ((guint64) sb.st_size > DFL_CFG_MAX_FILE) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT,
                 "%s: file is %" G_GUINT64_FORMAT " bytes, above the limit of %u",
                 path, (guint64) sb.st_size, DFL_CFG_MAX_FILE);
    return NULL;
  }
  if (!g_file_get_contents (path, &text, len, &read_error)) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_IO, "%s: cannot read: %s", path, read_error->message);
    g_error_free (read_error);
    return NULL;
  }
  return text;
}

/* generation_config.json's eos_token_id, where it has one, is what
 * generation stops on; the rest of that file is not ours to check. */
static gboolean
dfl_cfg_apply_generation (DflQwen3Config *c, const char *path, GError **error)
{
  g_autofree char *text = NULL;
  const cJSON *eos;
  cJSON *root;
  gsize len = 0;
  gboolean ok = TRUE;

  text = dfl_cfg_read (path, &len, error);
  if (text == NULL)
    return FALSE;
  root = dfl_cfg_parse_object (text, len, path, error);
  if (root == NULL)
    return FALSE;
  eos = dfl_cfg_get (root, "eos_token_id");
  if (eos != NULL)
    ok = dfl_cfg_eos (eos, path, c->eos_ids, &c->n_eos, error);
  cJSON_Delete (root);
  return ok;
}

gboolean
dfl_qwen3_config_load (DflQwen3Config *cfg, const char *dir, GError **error)
{
  DflQwen3Config c = { 0 };
  g_autofree char *config_path = NULL;
  g_autofree char *gen_path = NULL;
  g_autofree char *text = NULL;
  gsize len = 0;

  g_return_val_if_fail (cfg != NULL, FALSE);
  g_return_val_if_fail (dir != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  /* a path to config.json itself is taken as its folder's */
  if (g_file_test (dir, G_FILE_TEST_IS_REGULAR)) {
    g_autofree char *parent = g_path_get_dirname (dir);

    config_path = g_strdup (dir);
    gen_path = g_build_filename (parent, "generation_config.json", NULL);
  } else {
    config_path = g_build_filename (dir, "config.json", NULL);
    gen_path = g_build_filename (dir, "generation_config.json", NULL);
  }

  text = dfl_cfg_read (config_path, &len, error);
  if (text == NULL)
    return FALSE;
  if (!dfl_qwen3_config_parse (&c, text, len, config_path, error))
    return FALSE;
  if (g_file_test (gen_path, G_FILE_TEST_EXISTS)
      && !dfl_cfg_apply_generation (&c, gen_path, error))
    return FALSE;
  *cfg = c;
  return TRUE;
}

gboolean
dfl_qwen3_config_is_eos (const DflQwen3Config *cfg, int token)
{
  int i;

  g_return_val_if_fail (cfg != NULL, FALSE);
  for (i = 0; i < cfg->n_eos && i < DFL_MAX_EOS_IDS; i++) {
    if (cfg->eos_ids[i] == token)
      return TRUE;
  }
  return FALSE;
}
