/* gst-dflash — what the GLib test programs share: their cases as a table,
 * a main for the ones that are their cases alone (test-main.c) and one for
 * the ones whose cases write files (tmp-dir-main.c), the check of a
 * DflError, and the host-side number formats the kernel tests round their
 * inputs to. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* One GTest case: its path and its function. A table of them ends with
 * { NULL, NULL }. */
typedef struct {
  const char *path;
  GTestFunc func;
} DflTestCase;

/* Registers each case of `cases` (ending with { NULL, NULL }) with GTest. */
void dfl_test_add_cases (const DflTestCase *cases);

/* The programs built with test-main.c or tmp-dir-main.c (their main) define
 * their cases here; with tmp-dir-main.c, while the cases run,
 * `dfl_test_tmp_dir` names a fresh temporary folder, removed after them with
 * everything they wrote in it. */
extern const DflTestCase dfl_test_cases[];
extern char *dfl_test_tmp_dir;

/* `error` is in DFL_ERROR with `code` and a message holding each of the
 * strings that follow (a NULL-terminated list). */
void dfl_test_check_error (GError *error, int code, ...) G_GNUC_NULL_TERMINATED;

/* A float uniform in [−1, 1). */
float dfl_test_frand (GRand *r);

/* Round to nearest even into BF16 and F16 (the compiler's _Float16), and
 * back: the stored forms the kernels read. */
guint16 dfl_test_to_bf16 (float f);
float dfl_test_from_bf16 (guint16 u);
guint16 dfl_test_to_f16 (float f);
float dfl_test_from_f16 (guint16 u);

G_END_DECLS
