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
