/* gst-dflash — small helpers for the JSON the core reads through cJSON. */
#pragma once

#include <glib.h>
#include <cjson/cJSON.h>

/* What a JSON item is, for messages: "a string", "a number", "missing", … */
const char *dfl_json_kind (const cJSON *item);

/* cJSON_ParseWithLengthOpts, safe to call from several threads at once.
 * cJSON writes the position of every parse's error into one global (which
 * cJSON_GetErrorPtr reads), so two parses at once race on it: pipelines
 * that open their drafters in their own streaming threads do that. This
 * takes a lock around the parse. `end` (may be NULL) gets where parsing
 * stopped: the end of the value, or where the error is; read it instead of
 * cJSON_GetErrorPtr, which is only right while no other thread parses. */
cJSON *dfl_json_parse (const char *text, gsize len, const char **end, gboolean require_nul);
