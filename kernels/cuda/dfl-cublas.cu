/* gst-dflash — cuBLAS, opened when the first CUDA device opens.
 *
 * The library is not linked: loading it (and cuBLASLt, which it needs)
 * costs tens of milliseconds of relocations, which every start of a program
 * built with CUDA would pay, on machines and runs that never touch a card,
 * and a plugin linked to it could not even load where it is missing. So
 * it is opened here the first time a device needs it, as GStreamer's CUDA
 * library opens the driver, and a machine without it gets an error naming
 * the library instead of a plugin that fails to load.
 *
 * Where to look: the dynamic loader's own search (LD_LIBRARY_PATH, the
 * system's cache), then the toolkit's library folder this build was made
 * against (DFL_CUDA_LIB_DIR), which is where a toolkit installed from
 * NVIDIA's archive keeps it without telling the system.
 */
#include "dfl-cuda-private.h"
#include "dfl-error.h"

#include <dlfcn.h>

#define CUBLAS_SONAME "libcublas.so." G_STRINGIFY (CUBLAS_VER_MAJOR)

static DflCublas api;
static char *load_error;

/* The symbol a cublas_v2.h name stands for ("cublasCreate" is
 * cublasCreate_v2): the name after the header's macros. */
#define SYMBOL_OF(name) G_STRINGIFY (name)

static void *
open_library (GString *tried)
{
  const char *candidates[] = { CUBLAS_SONAME, DFL_CUDA_LIB_DIR "/" CUBLAS_SONAME };

  for (guint i = 0; i < G_N_ELEMENTS (candidates); i++) {
    void *lib = dlopen (candidates[i], RTLD_NOW | RTLD_LOCAL);
    if (lib)
      return lib;
    g_string_append_printf (tried, "%s%s", tried->len ? "; " : "", dlerror ());
  }
  return NULL;
}

static gboolean
resolve (void *lib, void **slot, const char *symbol)
{
  if ((*slot = dlsym (lib, symbol)))
    return TRUE;
  load_error = g_strdup_printf ("%s has no %s", CUBLAS_SONAME, symbol);
  return FALSE;
}

static void
load_once (void)
{
  g_autoptr (GString) tried = g_string_new (NULL);
  void *lib = open_library (tried);

  if (!lib) {
    load_error = g_strdup_printf ("cannot load cuBLAS (%s): %s", CUBLAS_SONAME, tried->str);
    return;
  }
  /* the library stays open for the life of the process, as the handles it
   * gives out may */
  if (resolve (lib, (void **) &api.create, SYMBOL_OF (cublasCreate))
      && resolve (lib, (void **) &api.destroy, SYMBOL_OF (cublasDestroy))
      && resolve (lib, (void **) &api.set_stream, SYMBOL_OF (cublasSetStream))
      && resolve (lib, (void **) &api.set_workspace, SYMBOL_OF (cublasSetWorkspace))
      && resolve (lib, (void **) &api.set_math_mode, SYMBOL_OF (cublasSetMathMode))
      && resolve (lib, (void **) &api.set_pointer_mode, SYMBOL_OF (cublasSetPointerMode))
      && resolve (lib, (void **) &api.sgemm, SYMBOL_OF (cublasSgemm))
      && resolve (lib, (void **) &api.gemm_ex, SYMBOL_OF (cublasGemmEx))
      && resolve (lib, (void **) &api.status_string, SYMBOL_OF (cublasGetStatusString)))
    return;
  memset (&api, 0, sizeof api);
}

const DflCublas *
dfl_cublas_load (GError **error)
{
  static gsize loaded = 0;

  if (g_once_init_enter (&loaded)) {
    load_once ();
    g_once_init_leave (&loaded, 1);
  }
  if (load_error) {
    g_set_error_literal (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED, load_error);
    return NULL;
  }
  return &api;
}
