/* gst-dflash — the core library's error domain. */
#include "dfl-error.h"

G_DEFINE_QUARK (dfl-error-quark, dfl_error)
