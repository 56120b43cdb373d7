/* gst-dflash — tests: the assertion that a back-end op ran.
 *
 * OK (call) runs a dfl_op_* call whose last argument is `&op_error` and
 * fails the test, printing the error, where it returned FALSE or set one.
 */
#ifndef DFL_TESTS_OP_ASSERT_H
#define DFL_TESTS_OP_ASSERT_H

#include <glib.h>

#define OK(call) \
  G_STMT_START { \
    g_autoptr (GError) op_error = NULL; \
    gboolean op_ok = call; \
    g_assert_no_error (op_error); \
    g_assert_true (op_ok); \
  } G_STMT_END

#endif
