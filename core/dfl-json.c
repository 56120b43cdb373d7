/* gst-dflash — small helpers for the JSON the core reads through cJSON. */
#include "dfl-json.h"

#include <stddef.h>

const char *
dfl_json_kind (const cJSON *item)
{
  if (item == NULL)
    return "missing";
  if (cJSON_IsString (item))
    return "a string";
  if (cJSON_IsNumber (item))
    return "a number";
  if (cJSON_IsArray (item))
    return "an array";
  if (cJSON_IsObject (item))
    return "an object";
  if (cJSON_IsBool (item))
    return "a boolean";
  if (cJSON_IsNull (item))
    return "null";
  return "an invalid value";
}

/* cJSON has no parse that leaves its global error alone, and no context to
 * hand one: the lock is the only way to keep two parses apart. Parses are
 * rare (a file's header or config, once per load) and short, so one lock
 * for the process costs nothing that shows. */
static GMutex parse_lock;

cJSON *
dfl_json_parse (const char *text, gsize len, const char **end, gboolean require_nul)
{
  const char *stop = NULL;
  cJSON *root;

  g_mutex_lock (&parse_lock);
  root = cJSON_ParseWithLengthOpts (text, len, &stop, require_nul);
  g_mutex_unlock (&parse_lock);
  if (end)
    *end = stop;
  return root;
}
