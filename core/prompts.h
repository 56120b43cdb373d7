/* gst-dflash — a file of prompts, one a line.
 *
 * "\n", "\t" and "\\" stand for themselves so a line can hold a multi-line
 * prompt (code, say); empty lines are skipped. tapsource's prompts-file,
 * `dflash route-fit` and `dflash ab` all read prompts this way.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* The prompts (g_ptr_array_unref it), or NULL with an error naming the file
 * where it cannot be read or holds none. */
GPtrArray *dfl_read_prompts (const char *path, GError **error);

G_END_DECLS
