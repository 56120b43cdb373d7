/* gst-dflash — the main of the test programs whose cases write files:
 * their cases (dfl_test_cases) with a fresh temporary folder
 * (dfl_test_tmp_dir), removed after them with all they wrote in it. */
#include "test-support.h"

#include <glib/gstdio.h>

char *dfl_test_tmp_dir;

/* `path`: a file, or a folder and all below it */
static void
remove_tree (const char *path)
{
  if (g_file_test (path, G_FILE_TEST_IS_DIR)) {
    g_autoptr (GDir) d = g_dir_open (path, 0, NULL);
    const char *name;

    while (d && (name = g_dir_read_name (d)) != NULL) {
      g_autofree char *child = g_build_filename (path, name, NULL);

      remove_tree (child);
    }
    g_rmdir (path);
  } else {
    g_unlink (path);
  }
}

int
main (int argc, char **argv)
{
  g_autofree char *name = NULL, *template = NULL;
  GError *error = NULL;
  int ret;

  g_test_init (&argc, &argv, NULL);
  name = g_path_get_basename (argv[0]);
  template = g_strdup_printf ("%s-XXXXXX", name);
  dfl_test_tmp_dir = g_dir_make_tmp (template, &error);
  g_assert_no_error (error);
  dfl_test_add_cases (dfl_test_cases);
  ret = g_test_run ();
  remove_tree (dfl_test_tmp_dir);
  g_clear_pointer (&dfl_test_tmp_dir, g_free);
  return ret;
}
