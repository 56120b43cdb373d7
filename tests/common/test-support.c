/* gst-dflash — what the GLib test programs share (test-support.h). */
#include "test-support.h"

#include <string.h>

#include "dfl-error.h"

void
dfl_test_add_cases (const DflTestCase *cases)
{
  for (const DflTestCase *c = cases; c->path; c++)
    g_test_add_func (c->path, c->func);
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
