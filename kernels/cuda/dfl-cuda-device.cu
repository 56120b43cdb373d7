/* gst-dflash — the CUDA device: context, stream, cuBLAS handle, memory,
 * copies, graphs, and the errors launches leave behind.
 *
 * cuBLAS is opened at run time, with the first device (dfl-cublas.cu).
 *
 * One stream per device: every launch and copy goes on it, so the order of
 * calls is the order of work, and a whole step can be captured as a graph.
 * The calls assume the device's ordinal is the thread's current CUDA device
 * (open makes it so); the pipeline runs one card.
 */
#include "dfl-cuda-private.h"
#include "dfl-error.h"

#include <stdarg.h>

/* cuBLAS takes its workspace from here rather than allocating during a
 * call, which a graph capture could not record; 32 MiB is what cuBLAS
 * documents for Hopper. */
#define CUBLAS_WORKSPACE_BYTES (32u << 20)
/* attention's chunk partials to begin with: 32 chunks of 64 (row, head)
 * pairs of head_dim 256; dfl_cuda_attention_reserve grows it */
#define ATT_PARTIAL_FLOATS ((size_t) 32 * 64 * (256 + 2))

void
dfl_cuda_note_cuda (DflCudaDevice *dev, const char *what, cudaError_t status)
{
  if (dev->pending)
    return;
  g_set_error (&dev->pending, DFL_ERROR, DFL_ERROR_IO, "CUDA device %d: %s failed: %s (%s)",
               dev->ordinal, what, cudaGetErrorString (status), cudaGetErrorName (status));
}

void
dfl_cuda_note_cublas (DflCudaDevice *dev, const char *what, cublasStatus_t status)
{
  if (dev->pending)
    return;
  g_set_error (&dev->pending, DFL_ERROR, DFL_ERROR_IO, "CUDA device %d: %s failed in cuBLAS: %s",
               dev->ordinal, what, dev->blas->status_string (status));
}

void
dfl_cuda_note_invalid (DflCudaDevice *dev, const char *what, const char *format, ...)
{
  va_list args;
  char *msg;

  if (dev->pending)
    return;
  va_start (args, format);
  msg = g_strdup_vprintf (format, args);
  va_end (args);
  g_set_error (&dev->pending, DFL_ERROR, DFL_ERROR_INVALID, "CUDA device %d: %s: %s",
               dev->ordinal, what, msg);
  g_free (msg);
}

/* Hand the waiting failure (if any) to the caller. */
static gboolean
take_pending (DflCudaDevice *dev, GError **error)
{
  if (!dev->pending)
    return TRUE;
  g_propagate_error (error, dev->pending);
  dev->pending = NULL;
  return FALSE;
}

static gboolean
cuda_ok (cudaError_t status, const char *what, int ordinal, GError **error)
{
  if (status == cudaSuccess)
    return TRUE;
  g_set_error (error, DFL_ERROR, DFL_ERROR_IO, "CUDA device %d: %s failed: %s (%s)", ordinal,
               what, cudaGetErrorString (status), cudaGetErrorName (status));
  return FALSE;
}

DflCudaDevice *
dfl_cuda_device_open (int ordinal, GError **error)
{
  DflCudaDevice *dev;
  cudaDeviceProp prop;
  cudaError_t status;
  cublasStatus_t bstatus;
  int count = 0;

  if (ordinal < 0) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_INVALID, "CUDA device ordinal %d is negative",
                 ordinal);
    return NULL;
  }
  status = cudaGetDeviceCount (&count);
  if (status != cudaSuccess || count == 0) {
    /* no driver, a driver older than the runtime, or no card: CUDA says which */
    if (status == cudaSuccess)
      status = cudaErrorNoDevice;
    cudaGetLastError ();
    g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED, "CUDA is unavailable: %s",
                 cudaGetErrorString (status));
    return NULL;
  }
  if (ordinal >= count) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_UNSUPPORTED,
                 "CUDA device %d is not present (this machine has %d)", ordinal, count);
    return NULL;
  }
  if (!cuda_ok (cudaSetDevice (ordinal), "cudaSetDevice", ordinal, error)
      || !cuda_ok (cudaGetDeviceProperties (&prop, ordinal), "cudaGetDeviceProperties", ordinal,
                   error))
    return NULL;

  dev = g_new0 (DflCudaDevice, 1);
  dev->ref_count = 1;
  g_rec_mutex_init (&dev->turn);
  dev->ordinal = ordinal;
  dev->multiprocessors = prop.multiProcessorCount;
  dev->overlap = TRUE;
  dev->description = g_strdup_printf ("%s (sm_%d%d, %.0f GiB)", prop.name, prop.major, prop.minor,
                                      prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
  if (!cuda_ok (cudaStreamCreateWithFlags (&dev->stream, cudaStreamNonBlocking),
                "cudaStreamCreate", ordinal, error))
    goto fail;
  if (!(dev->blas = dfl_cublas_load (error))) {
    g_prefix_error (error, "CUDA device %d: ", ordinal);
    goto fail;
  }
  bstatus = dev->blas->create (&dev->cublas);
  if (bstatus != CUBLAS_STATUS_SUCCESS) {
    dev->cublas = NULL;
    g_set_error (error, DFL_ERROR, DFL_ERROR_IO, "CUDA device %d: cublasCreate failed: %s",
                 ordinal, dev->blas->status_string (bstatus));
    goto fail;
  }
  if (!cuda_ok (cudaMalloc (&dev->d_cublas_workspace, CUBLAS_WORKSPACE_BYTES),
                "cudaMalloc of cuBLAS's workspace", ordinal, error))
    goto fail;
  if (!cuda_ok (cudaMalloc ((void **) &dev->d_att_partial, sizeof (float) * ATT_PARTIAL_FLOATS),
                "cudaMalloc of attention's scratch", ordinal, error))
    goto fail;
  dev->att_partial_floats = ATT_PARTIAL_FLOATS;
  dfl_cuda_kernels_setup (dev);
  /* F32 products stay F32 (no TF32); every cuBLAS call on the one stream */
  if ((bstatus = dev->blas->set_math_mode (dev->cublas, CUBLAS_DEFAULT_MATH))
        != CUBLAS_STATUS_SUCCESS
      || (bstatus = dev->blas->set_stream (dev->cublas, dev->stream)) != CUBLAS_STATUS_SUCCESS
      || (bstatus = dev->blas->set_workspace (dev->cublas, dev->d_cublas_workspace,
                                              CUBLAS_WORKSPACE_BYTES)) != CUBLAS_STATUS_SUCCESS
      || (bstatus = dev->blas->set_pointer_mode (dev->cublas, CUBLAS_POINTER_MODE_HOST))
           != CUBLAS_STATUS_SUCCESS) {
    g_set_error (error, DFL_ERROR, DFL_ERROR_IO, "CUDA device %d: setting up cuBLAS failed: %s",
                 ordinal, dev->blas->status_string (bstatus));
    goto fail;
  }
  return dev;

fail:
  dfl_cuda_device_unref (dev);
  return NULL;
}

DflCudaDevice *
dfl_cuda_device_ref (DflCudaDevice *dev)
{
  g_return_val_if_fail (dev != NULL, NULL);
  g_atomic_int_inc (&dev->ref_count);
  return dev;
}

void
dfl_cuda_device_unref (DflCudaDevice *dev)
{
  if (!dev || !g_atomic_int_dec_and_test (&dev->ref_count))
    return;
  if (dev->stream)
    cudaStreamSynchronize (dev->stream);
  if (dev->cublas)
    dev->blas->destroy (dev->cublas);
  cudaFree (dev->d_cublas_workspace);
  cudaFree (dev->d_att_partial);
  cudaFree (dev->d_topk);
  if (dev->stream)
    cudaStreamDestroy (dev->stream);
  if (dev->pending)
    g_error_free (dev->pending);
  g_free (dev->description);
  g_rec_mutex_clear (&dev->turn);
  g_free (dev);
}

void
dfl_cuda_device_lock (DflCudaDevice *dev)
{
  g_rec_mutex_lock (&dev->turn);
}

void
dfl_cuda_device_unlock (DflCudaDevice *dev)
{
  g_rec_mutex_unlock (&dev->turn);
}

const char *
dfl_cuda_device_describe (DflCudaDevice *dev)
{
  return dev->description;
}

int
dfl_cuda_device_ordinal (DflCudaDevice *dev)
{
  return dev->ordinal;
}

void
dfl_cuda_device_set_overlap (DflCudaDevice *dev, gboolean overlap)
{
  dev->overlap = overlap;
}

void *
dfl_cuda_device_stream (DflCudaDevice *dev)
{
  return (void *) dev->stream;
}

void *
dfl_cuda_device_cublas (DflCudaDevice *dev)
{
  return (void *) dev->cublas;
}

/* --- memory and copies --- */

void *
dfl_cuda_alloc (DflCudaDevice *dev, size_t bytes, GError **error)
{
  void *d_ptr = NULL;
  cudaError_t status = cudaMalloc (&d_ptr, MAX (bytes, (size_t) 1));

  if (status == cudaSuccess)
    return d_ptr;
  cudaGetLastError ();  /* an allocation failure must not read as a later launch's */
  if (status == cudaErrorMemoryAllocation) {
    size_t free_bytes = 0, total = 0;
    cudaMemGetInfo (&free_bytes, &total);
    g_set_error (error, DFL_ERROR, DFL_ERROR_LIMIT,
                 "CUDA device %d: no room for %" G_GSIZE_FORMAT " bytes (%.1f MiB; %.1f MiB free)",
                 dev->ordinal, (gsize) bytes, bytes / 1048576.0, free_bytes / 1048576.0);
  } else {
    cuda_ok (status, "cudaMalloc", dev->ordinal, error);
  }
  return NULL;
}

void
dfl_cuda_free (DflCudaDevice *dev, void *d_ptr)
{
  if (d_ptr)
    cudaFree (d_ptr);
}

/* A copy between the host and the card on the device's stream, waited for
 * (the host buffer may be reused as soon as it returns). */
static gboolean
host_copy (DflCudaDevice *dev, void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
           const char *what, GError **error)
{
  gboolean ok;

  if (bytes == 0)
    return TRUE;
  g_rec_mutex_lock (&dev->turn);
  ok = cuda_ok (cudaMemcpyAsync (dst, src, bytes, kind, dev->stream), what, dev->ordinal, error)
       && dfl_cuda_sync (dev, error);
  g_rec_mutex_unlock (&dev->turn);
  return ok;
}

gboolean
dfl_cuda_upload (DflCudaDevice *dev, void *d_dst, const void *src, size_t bytes, GError **error)
{
  return host_copy (dev, d_dst, src, bytes, cudaMemcpyHostToDevice, "upload (cudaMemcpyAsync)",
                    error);
}

gboolean
dfl_cuda_download (DflCudaDevice *dev, void *dst, const void *d_src, size_t bytes,
                   GError **error)
{
  return host_copy (dev, dst, d_src, bytes, cudaMemcpyDeviceToHost,
                    "download (cudaMemcpyAsync)", error);
}

void
dfl_cuda_copy_d2d (DflCudaDevice *dev, void *d_dst, const void *d_src, size_t bytes)
{
  cudaError_t status;

  if (bytes == 0)
    return;
  g_rec_mutex_lock (&dev->turn);
  status = cudaMemcpyAsync (d_dst, d_src, bytes, cudaMemcpyDeviceToDevice, dev->stream);
  if (status != cudaSuccess)
    dfl_cuda_note_cuda (dev, "dfl_cuda_copy_d2d", status);
  g_rec_mutex_unlock (&dev->turn);
}

void
dfl_cuda_memset (DflCudaDevice *dev, void *d_dst, int value, size_t bytes)
{
  cudaError_t status;

  if (bytes == 0)
    return;
  g_rec_mutex_lock (&dev->turn);
  status = cudaMemsetAsync (d_dst, value, bytes, dev->stream);
  if (status != cudaSuccess)
    dfl_cuda_note_cuda (dev, "dfl_cuda_memset", status);
  g_rec_mutex_unlock (&dev->turn);
}

void
dfl_cuda_copy_2d (DflCudaDevice *dev, void *d_dst, size_t dst_pitch, const void *d_src,
                  size_t src_pitch, size_t row_bytes, size_t rows)
{
  cudaError_t status;

  if (row_bytes == 0 || rows == 0)
    return;
  g_rec_mutex_lock (&dev->turn);
  status = cudaMemcpy2DAsync (d_dst, dst_pitch, d_src, src_pitch, row_bytes, rows,
                              cudaMemcpyDeviceToDevice, dev->stream);
  if (status != cudaSuccess)
    dfl_cuda_note_cuda (dev, "dfl_cuda_copy_2d", status);
  g_rec_mutex_unlock (&dev->turn);
}

gboolean
dfl_cuda_sync (DflCudaDevice *dev, GError **error)
{
  cudaError_t status;
  gboolean ok;

  g_rec_mutex_lock (&dev->turn);
  status = cudaStreamSynchronize (dev->stream);
  if (status == cudaSuccess)
    status = cudaGetLastError ();
  else
    cudaGetLastError ();
  /* the earlier failure first: a fault usually follows from it */
  ok = take_pending (dev, error) && cuda_ok (status, "a launch on the stream", dev->ordinal, error);
  g_rec_mutex_unlock (&dev->turn);
  return ok;
}

gboolean
dfl_cuda_check (DflCudaDevice *dev, const char *what, GError **error)
{
  cudaError_t status = cudaGetLastError ();

  if (!take_pending (dev, error)) {
    g_prefix_error (error, "%s: ", what);
    return FALSE;
  }
  if (status == cudaSuccess)
    return TRUE;
  g_set_error (error, DFL_ERROR, DFL_ERROR_IO, "CUDA device %d: %s: %s (%s)", dev->ordinal, what,
               cudaGetErrorString (status), cudaGetErrorName (status));
  return FALSE;
}

double
dfl_cuda_copy_bandwidth (DflCudaDevice *dev, size_t bytes, GError **error)
{
  const int reps = 10;
  void *d_a, *d_b = NULL;
  cudaEvent_t start = NULL, stop = NULL;
  float ms = 0.0f, best = G_MAXFLOAT;
  double result = 0.0;

  if (!(d_a = dfl_cuda_alloc (dev, bytes, error)) || !(d_b = dfl_cuda_alloc (dev, bytes, error)))
    goto out;
  if (!cuda_ok (cudaEventCreate (&start), "cudaEventCreate", dev->ordinal, error)
      || !cuda_ok (cudaEventCreate (&stop), "cudaEventCreate", dev->ordinal, error))
    goto out;
  dfl_cuda_memset (dev, d_a, 1, bytes);
  dfl_cuda_copy_d2d (dev, d_b, d_a, bytes);  /* first touch out of the timing */
  /* the best of a few single copies: the floor a step could reach */
  for (int i = 0; i < reps; i++) {
    cudaEventRecord (start, dev->stream);
    dfl_cuda_copy_d2d (dev, d_b, d_a, bytes);
    cudaEventRecord (stop, dev->stream);
    if (!dfl_cuda_sync (dev, error)
        || !cuda_ok (cudaEventElapsedTime (&ms, start, stop), "cudaEventElapsedTime",
                     dev->ordinal, error))
      goto out;
    best = MIN (best, ms);
  }
  result = bytes / (best / 1e3);
out:
  if (start)
    cudaEventDestroy (start);
  if (stop)
    cudaEventDestroy (stop);
  dfl_cuda_free (dev, d_a);
  dfl_cuda_free (dev, d_b);
  return result;
}

/* Every word of `words` is read once (16-byte loads, a grid-stride loop
 * over as many blocks as keep the card busy); each block XORs what it read
 * and writes one word, so the bytes written are nothing beside those read
 * and the loads cannot be elided. */
__global__ void
read_only_kernel (const uint4 *__restrict__ src, size_t n, unsigned *__restrict__ sink)
{
  __shared__ unsigned partial[32];
  unsigned x = 0;

  for (size_t i = blockIdx.x * (size_t) blockDim.x + threadIdx.x; i < n;
       i += (size_t) gridDim.x * blockDim.x) {
    uint4 v = __ldg (src + i);
    x ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  for (int off = 16; off > 0; off >>= 1)
    x ^= __shfl_xor_sync (0xffffffffu, x, off);
  if ((threadIdx.x & 31) == 0)
    partial[threadIdx.x >> 5] = x;
  __syncthreads ();
  if (threadIdx.x == 0) {
    for (int w = 1; w < (int) (blockDim.x >> 5); w++)
      x ^= partial[w];
    sink[blockIdx.x] = x;
  }
}

double
dfl_cuda_read_bandwidth (DflCudaDevice *dev, size_t bytes, GError **error)
{
  const int reps = 10, threads = 512;
  size_t n = bytes / sizeof (uint4);
  /* a few resident blocks per multiprocessor: enough loads in flight to
   * cover the memory's latency */
  const int blocks = dev->multiprocessors * 4;
  void *d_src = NULL;
  unsigned *d_sink = NULL;
  cudaEvent_t start = NULL, stop = NULL;
  float ms = 0.0f, best = G_MAXFLOAT;
  double result = 0.0;

  if (!(d_src = dfl_cuda_alloc (dev, n * sizeof (uint4), error))
      || !(d_sink = (unsigned *) dfl_cuda_alloc (dev, blocks * sizeof (unsigned), error)))
    goto out;
  if (!cuda_ok (cudaEventCreate (&start), "cudaEventCreate", dev->ordinal, error)
      || !cuda_ok (cudaEventCreate (&stop), "cudaEventCreate", dev->ordinal, error))
    goto out;
  dfl_cuda_memset (dev, d_src, 1, n * sizeof (uint4));
  /* first pass out of the timing; then the best of single passes, as the
   * copy rate above */
  read_only_kernel<<<blocks, threads, 0, dev->stream>>> ((const uint4 *) d_src, n, d_sink);
  for (int i = 0; i < reps; i++) {
    cudaEventRecord (start, dev->stream);
    read_only_kernel<<<blocks, threads, 0, dev->stream>>> ((const uint4 *) d_src, n, d_sink);
    cudaEventRecord (stop, dev->stream);
    if (!dfl_cuda_sync (dev, error)
        || !cuda_ok (cudaEventElapsedTime (&ms, start, stop), "cudaEventElapsedTime",
                     dev->ordinal, error))
      goto out;
    best = MIN (best, ms);
  }
  result = n * sizeof (uint4) / (best / 1e3);
out:
  if (start)
    cudaEventDestroy (start);
  if (stop)
    cudaEventDestroy (stop);
  dfl_cuda_free (dev, d_src);
  dfl_cuda_free (dev, d_sink);
  return result;
}

/* --- graphs --- */

struct _DflCudaGraph {
  cudaGraphExec_t exec;
};

gboolean
dfl_cuda_capture_begin (DflCudaDevice *dev, GError **error)
{
  /* held until dfl_cuda_capture_end: nothing of another thread's is recorded */
  g_rec_mutex_lock (&dev->turn);
  /* launches before the capture must not have failed unseen */
  if (dfl_cuda_check (dev, "before a graph capture", error)
      && cuda_ok (cudaStreamBeginCapture (dev->stream, cudaStreamCaptureModeThreadLocal),
                  "cudaStreamBeginCapture", dev->ordinal, error))
    return TRUE;
  g_rec_mutex_unlock (&dev->turn);
  return FALSE;
}

static DflCudaGraph *
capture_end (DflCudaDevice *dev, GError **error)
{
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  cudaError_t status = cudaStreamEndCapture (dev->stream, &graph);
  DflCudaGraph *g;

  if (status != cudaSuccess) {
    cudaGetLastError ();
    /* a launch that failed inside the capture says more than the capture's status */
    if (!take_pending (dev, error)) {
      g_prefix_error (error, "graph capture: ");
      if (graph)
        cudaGraphDestroy (graph);
      return NULL;
    }
    cuda_ok (status, "cudaStreamEndCapture", dev->ordinal, error);
    return NULL;
  }
  if (!take_pending (dev, error)) {
    g_prefix_error (error, "graph capture: ");
    cudaGraphDestroy (graph);
    return NULL;
  }
  status = cudaGraphInstantiate (&exec, graph, 0);
  cudaGraphDestroy (graph);
  if (!cuda_ok (status, "cudaGraphInstantiate", dev->ordinal, error))
    return NULL;
  g = g_new0 (DflCudaGraph, 1);
  g->exec = exec;
  return g;
}

DflCudaGraph *
dfl_cuda_capture_end (DflCudaDevice *dev, GError **error)
{
  DflCudaGraph *g = capture_end (dev, error);

  g_rec_mutex_unlock (&dev->turn);
  return g;
}

void
dfl_cuda_graph_launch (DflCudaDevice *dev, DflCudaGraph *graph)
{
  cudaError_t status;

  g_rec_mutex_lock (&dev->turn);
  status = cudaGraphLaunch (graph->exec, dev->stream);
  if (status != cudaSuccess)
    dfl_cuda_note_cuda (dev, "cudaGraphLaunch", status);
  g_rec_mutex_unlock (&dev->turn);
}

void
dfl_cuda_graph_free (DflCudaGraph *graph)
{
  if (!graph)
    return;
  cudaGraphExecDestroy (graph->exec);
  g_free (graph);
}
