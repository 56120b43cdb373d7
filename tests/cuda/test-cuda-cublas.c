/* gst-dflash — cuBLAS opened at run time (kernels/cuda/dfl-cublas.cu):
 * the library this build was made against is found, and every entry point
 * the kernels call resolves. No card needed: opening and resolving touch
 * no device, and neither does the one call made here. */
#include "dfl-cuda-private.h"

static void
test_load (void)
{
  GError *error = NULL;
  const DflCublas *api = dfl_cublas_load (&error), *again;
  const char *status;

  g_assert_no_error (error);
  g_assert_nonnull (api);
  g_assert_nonnull (api->create);
  g_assert_nonnull (api->destroy);
  g_assert_nonnull (api->set_stream);
  g_assert_nonnull (api->set_workspace);
  g_assert_nonnull (api->set_math_mode);
  g_assert_nonnull (api->set_pointer_mode);
  g_assert_nonnull (api->sgemm);
  g_assert_nonnull (api->gemm_ex);
  g_assert_nonnull (api->status_string);
  /* the pointers are the library's: its own words for two statuses */
  status = api->status_string (CUBLAS_STATUS_NOT_INITIALIZED);
  g_assert_nonnull (status);
  g_assert_nonnull (strstr (status, "not initialized"));
  g_assert_cmpstr (api->status_string (CUBLAS_STATUS_SUCCESS), ==, "success");
  again = dfl_cublas_load (&error);
  g_assert_no_error (error);
  g_assert_true (again == api);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/cuda/cublas/load", test_load);
  return g_test_run ();
}
