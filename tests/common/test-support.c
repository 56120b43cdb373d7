/* gst-dflash — what the GLib test programs share (test-support.h). */
#include "test-support.h"

#include <glib/gstdio.h>
#include <string.h>

#include "dfl-error.h"

void
dfl_test_add_cases (const DflTestCase *cases)
{
  for (const DflTestCase *c = cases; c->path; c++)
    g_test_add_func (c->path, c->func);
}

int
dfl_test_run_in_tmp_dir (int *argc, char ***argv, const char *tmp_template,
                         const DflTestCase *cases, char **tmp_dir)
{
  GError *error = NULL;
  int ret;

  g_test_init (argc, argv, NULL);
  *tmp_dir = g_dir_make_tmp (tmp_template, &error);
  g_assert_no_error (error);
  dfl_test_add_cases (cases);
  ret = g_test_run ();
  dfl_test_remove_tree (*tmp_dir);
  g_clear_pointer (tmp_dir, g_free);
  return ret;
}

void
dfl_test_check_error (GError *error, int code, ...)
{
  const char *needle;
  va_list ap;

  g_assert_nonnull (error);
  g_test_message ("error: %s", error->message);
  g_assert_true (error->domain == DFL_ERROR);
  g_assert_cmpint (error->code, ==, code);
  va_start (ap, code);
  while ((needle = va_arg (ap, const char *)) != NULL) {
    if (strstr (error->message, needle) == NULL)
      g_error ("message '%s' does not hold '%s'", error->message, needle);
  }
  va_end (ap);
}

void
dfl_test_remove_tree (const char *path)
{
  if (g_file_test (path, G_FILE_TEST_IS_DIR)) {
    g_autoptr (GDir) d = g_dir_open (path, 0, NULL);
    const char *name;

    while (d && (name = g_dir_read_name (d)) != NULL) {
      g_autofree char *child = g_build_filename (path, name, NULL);

      dfl_test_remove_tree (child);
    }
    g_rmdir (path);
  } else {
    g_unlink (path);
  }
}

float
dfl_test_frand (GRand *r)
{
  return (float) g_rand_double_range (r, -1.0, 1.0);
}

guint16
dfl_test_to_bf16 (float f)
{
  guint32 b;

  memcpy (&b, &f, 4);
  b += 0x7fff + ((b >> 16) & 1);
  return b >> 16;
}

float
dfl_test_from_bf16 (guint16 u)
{
  guint32 b = (guint32) u << 16;
  float f;

  memcpy (&f, &b, 4);
  return f;
}

guint16
dfl_test_to_f16 (float f)
{
  _Float16 h = (_Float16) f;
  guint16 u;

  memcpy (&u, &h, 2);
  return u;
}

float
dfl_test_from_f16 (guint16 u)
{
  _Float16 h;

  memcpy (&h, &u, 2);
  return (float) h;
}
