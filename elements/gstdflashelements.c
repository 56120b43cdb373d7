/* gst-dflash — registering every element of the plugin. */
#include "gstdflashelements.h"

#include "gstctxsettle.h"
#include "gstdflashblock.h"
#include "gstdflashrouter.h"
#include "gstdflashselector.h"
#include "gstngramdraft.h"
#include "gsttapsource.h"
#include "gstverifier.h"

gboolean
gst_dflash_elements_register (GstPlugin *plugin)
{
  gboolean ret = FALSE;

  ret |= GST_ELEMENT_REGISTER (tapsource, plugin);
  ret |= GST_ELEMENT_REGISTER (ctxsettle, plugin);
  ret |= GST_ELEMENT_REGISTER (dflashblock, plugin);
  ret |= GST_ELEMENT_REGISTER (selector, plugin);
  ret |= GST_ELEMENT_REGISTER (ngramdraft, plugin);
  ret |= GST_ELEMENT_REGISTER (router, plugin);
  ret |= GST_ELEMENT_REGISTER (verifier, plugin);
  return ret;
}
