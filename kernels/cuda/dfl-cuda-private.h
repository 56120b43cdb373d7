/* gst-dflash — what the CUDA device file and the kernel files share: the
 * device's fields, cuBLAS's entry points and the bookkeeping of launch
 * errors. Compiled by nvcc, and as C by the loader's test. */
#pragma once

#include "dfl-cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

/* cuBLAS's entry points that the kernels call, from the library opened at
 * run time (dfl-cublas.cu). */
typedef struct {
  __typeof__ (cublasCreate) *create;
  __typeof__ (cublasDestroy) *destroy;
  __typeof__ (cublasSetStream) *set_stream;
  __typeof__ (cublasSetWorkspace) *set_workspace;
  __typeof__ (cublasSetMathMode) *set_math_mode;
  __typeof__ (cublasSetPointerMode) *set_pointer_mode;
  __typeof__ (cublasSgemm) *sgemm;
  /* spelt out: C++ sees a second, inline cublasGemmEx beside the library's */
  cublasStatus_t (*gemm_ex) (cublasHandle_t handle, cublasOperation_t transa,
                             cublasOperation_t transb, int m, int n, int k, const void *alpha,
                             const void *a, cudaDataType a_type, int lda, const void *b,
                             cudaDataType b_type, int ldb, const void *beta, void *c,
                             cudaDataType c_type, int ldc, cublasComputeType_t compute,
                             cublasGemmAlgo_t algo);
  __typeof__ (cublasGetStatusString) *status_string;
} DflCublas;

/* cuBLAS, opened on the first call (the later ones return the same table,
 * or the same error: the library is missing or lacks an entry point). C
 * linkage, for its test. */
G_BEGIN_DECLS
const DflCublas *dfl_cublas_load (GError **error);
G_END_DECLS

struct _DflCudaDevice {
  gint ref_count;
  int ordinal;
  char *description;
  cudaStream_t stream;
  /* whose turn it is to enqueue on the stream (dfl_cuda_device_lock) */
  GRecMutex turn;
  const DflCublas *blas;
  cublasHandle_t cublas;
  void *d_cublas_workspace;
  int multiprocessors;
  /* products launched to start while the launch before them finishes
   * (dfl-cuda-overlap.cuh) */
  gboolean overlap;
  /* attention's per-chunk partial results (the launches on the one stream
   * take turns with it, graphs included) */
  float *d_att_partial;
  size_t att_partial_floats;
  guint64 att_partial_generation;
  /* top-k's candidates of long rows (grown outside captures) */
  void *d_topk;
  size_t topk_bytes;
  /* The first failure a launcher met (a launch error, a cuBLAS status, an
   * argument no kernel here takes): launchers cannot return errors, so it
   * waits here for the next dfl_cuda_sync / dfl_cuda_check. */
  GError *pending;
};

/* Record `what` failing with a CUDA status, unless an earlier failure is
 * already waiting. */
void dfl_cuda_note_cuda (DflCudaDevice *dev, const char *what, cudaError_t status);
void dfl_cuda_note_cublas (DflCudaDevice *dev, const char *what, cublasStatus_t status);
/* An argument a launcher cannot run with; the launch is skipped. */
void dfl_cuda_note_invalid (DflCudaDevice *dev, const char *what, const char *format, ...)
  G_GNUC_PRINTF (3, 4);
/* Once, when the device opens: the kernels' launch attributes. */
void dfl_cuda_kernels_setup (DflCudaDevice *dev);

/* After a kernel launch: pick up a launch error without waiting. */
static inline void
dfl_cuda_launched (DflCudaDevice *dev, const char *what)
{
  cudaError_t status = cudaGetLastError ();
  if (status != cudaSuccess)
    dfl_cuda_note_cuda (dev, what, status);
}
