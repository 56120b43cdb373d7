/* gst-dflash — small helpers for the JSON the core reads through cJSON. */
#pragma once

#include <cjson/cJSON.h>

/* What a JSON item is, for messages: "a string", "a number", "missing", … */
const char *dfl_json_kind (const cJSON *item);
