/* gst-dflash — element types. */
#include "dfl-dtype.h"

#include <string.h>

static const struct {
  const char *name;
  size_t size;
} dfl_dtypes[] = {
  [DFL_DTYPE_F32] = { "F32", 4 },
  [DFL_DTYPE_F16] = { "F16", 2 },
  [DFL_DTYPE_BF16] = { "BF16", 2 },
  [DFL_DTYPE_I32] = { "I32", 4 },
  [DFL_DTYPE_I64] = { "I64", 8 },
  [DFL_DTYPE_I8] = { "I8", 1 },
  [DFL_DTYPE_U8] = { "U8", 1 },
};

#define N_DTYPES (sizeof (dfl_dtypes) / sizeof (dfl_dtypes[0]))

const char *
dfl_dtype_name (DflDtype dtype)
{
  if ((unsigned) dtype >= N_DTYPES)
    return "invalid";
  return dfl_dtypes[dtype].name;
}

size_t
dfl_dtype_size (DflDtype dtype)
{
  if ((unsigned) dtype >= N_DTYPES)
    return 0;
  return dfl_dtypes[dtype].size;
}

int
dfl_dtype_from_name (const char *name, DflDtype *dtype)
{
  unsigned i;

  if (name == NULL)
    return 0;
  for (i = 0; i < N_DTYPES; i++) {
    if (strcmp (name, dfl_dtypes[i].name) == 0) {
      if (dtype)
        *dtype = (DflDtype) i;
      return 1;
    }
  }
  return 0;
}

int
dfl_dtype_is_float (DflDtype dtype)
{
  return dtype == DFL_DTYPE_F32 || dtype == DFL_DTYPE_F16 || dtype == DFL_DTYPE_BF16;
}
