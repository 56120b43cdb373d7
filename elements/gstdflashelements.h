/* gst-dflash — registering every element of the plugin: the plugin file
 * (plugins/) and programs that link the elements in (the dflash command)
 * call the same function. */
#pragma once

#include <gst/gst.h>

G_BEGIN_DECLS

gboolean gst_dflash_elements_register (GstPlugin *plugin);

G_END_DECLS
