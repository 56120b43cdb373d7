/* gst-dflash — the error domain of every layer.
 *
 * Every failure the kernels and the core report is a GError in DFL_ERROR whose message names
 * the file (or argument) and says what is wrong with it, so a command line
 * tool or an element can pass it on to the user as it is.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

#define DFL_ERROR (dfl_error_quark ())
GQuark dfl_error_quark (void);

typedef enum {
  DFL_ERROR_IO,           /* a file could not be opened, read, mapped or written */
  DFL_ERROR_FORMAT,       /* a file is not what it claims to be (bad header, bad JSON, bad offsets) */
  DFL_ERROR_UNSUPPORTED,  /* a valid file that asks for something we do not run */
  DFL_ERROR_MISMATCH,     /* two things that must agree do not (shapes, geometry, binding) */
  DFL_ERROR_INVALID,      /* a bad argument: a token id, a property value, a size */
  DFL_ERROR_LIMIT,        /* past a limit: context length, absurd sizes */
} DflError;

G_END_DECLS
