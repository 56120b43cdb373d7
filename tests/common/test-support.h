/* gst-dflash — what the GLib test programs share: their cases as a table,
 * a temporary folder around a run, the check of a DflError, and the
 * host-side number formats the kernel tests round their inputs to. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* One GTest case: its path and its function. A table of them ends with
 * { NULL, NULL }. */
typedef struct {
  const char *path;
  GTestFunc func;
} DflTestCase;

/* g_test_add_func for each case of `cases`, in order. */
void dfl_test_add_cases (const DflTestCase *cases);

/* g_test_init, a fresh temporary folder made from `tmp_template` (its name
 * in `*tmp_dir` while the cases run), the cases, then the folder removed
 * with everything the cases wrote in it. Returns g_test_run's status. */
int dfl_test_run_in_tmp_dir (int *argc, char ***argv, const char *tmp_template,
                             const DflTestCase *cases, char **tmp_dir);

/* `error` is in DFL_ERROR with `code` and a message holding each of the
 * strings that follow (a NULL-terminated list). */
void dfl_test_check_error (GError *error, int code, ...) G_GNUC_NULL_TERMINATED;

/* Remove `path`: a file, or a folder and all below it. */
void dfl_test_remove_tree (const char *path);

/* A float uniform in [−1, 1). */
float dfl_test_frand (GRand *r);

/* Round to nearest even into BF16 and F16 (the compiler's _Float16), and
 * back: the stored forms the kernels read. */
guint16 dfl_test_to_bf16 (float f);
float dfl_test_from_bf16 (guint16 u);
guint16 dfl_test_to_f16 (float f);
float dfl_test_from_f16 (guint16 u);

G_END_DECLS
