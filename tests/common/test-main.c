/* gst-dflash — the main of the test programs that are their cases alone
 * (dfl_test_cases), with nothing to set up around them. */
#include "test-support.h"

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  dfl_test_add_cases (dfl_test_cases);
  return g_test_run ();
}
