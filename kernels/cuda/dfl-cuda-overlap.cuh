/* gst-dflash — a product of weights that starts while the kernel before it
 * on the stream finishes (Hopper's programmatic dependent launch).
 *
 * A decode step is a chain of launches: between two kernels the card
 * would otherwise sit through the end of one (its last blocks, then the
 * grid's retirement) and the start of the next. The products (the
 * few-rows and one-row kernels) are launched with the attribute: their
 * blocks are scheduled as soon as every block of the kernel before has
 * called overlap_allow_next (or ended), find their weights, and wait
 * (overlap_wait_previous) before reading x or y, which that kernel may
 * have written. The kernels a step runs right before a product (norms,
 * attention's merge, SiLU, the products themselves) call
 * overlap_allow_next first thing. A launch without the attribute waits for
 * the kernel before it as always, and in it overlap_wait_previous returns
 * at once; in a captured graph the attribute becomes a programmatic edge,
 * with the same meaning.
 *
 * Measured on an H100 (bench-cuda-target, which times both in one run;
 * Qwen3-8B shape, context 1024, two runs): decode 6.686 / 6.727 → 6.622 /
 * 6.659 ms, verify of 16 rows 7.269 / 7.287 → 7.237 / 7.263 ms: about 1%
 * and 0.4%. Every kernel of the step launched so ran slower (decode 7.9,
 * verify 12.6 against 7.2 and 8.0 ms in that visit: kernels whose blocks
 * all start at once let the next one start too, and the waiting blocks of
 * the whole chain crowd out the ones that run), and so did asking L2 for
 * the first 4 to 32 steps of each warp's weights before waiting (decode
 * 6.77 to 7.78 ms against 6.75).
 *
 * The build targets sm_90 and newer (meson.build), which all have these
 * instructions. */
#pragma once

#include "dfl-cuda-private.h"

/* Let the kernel launched after this one (with the attribute) start its
 * blocks; it still waits for this one's end before using its results. */
__device__ static inline void
overlap_allow_next (void)
{
  asm volatile ("griddepcontrol.launch_dependents;" ::: "memory");
}

/* Wait until the kernel before this one has ended and its writes are
 * visible. */
__device__ static inline void
overlap_wait_previous (void)
{
  asm volatile ("griddepcontrol.wait;" ::: "memory");
}

/* kernel<<<grid, block, 0, dev->stream>>> (args…), allowed to start while
 * the launch before it finishes where the device overlaps launches (the
 * kernel calls overlap_wait_previous before touching what that launch may
 * use). A failed launch waits for the next check, as a launch error does. */
template <typename... Params, typename... Args>
static void
dfl_cuda_launch_overlapped (DflCudaDevice *dev, void (*kernel) (Params...), dim3 grid,
                            dim3 block, Args... args)
{
  cudaLaunchConfig_t config = {};
  cudaLaunchAttribute attr[1];
  cudaError_t status;

  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  config.gridDim = grid;
  config.blockDim = block;
  config.stream = dev->stream;
  config.attrs = attr;
  config.numAttrs = dev->overlap ? 1 : 0;
  status = cudaLaunchKernelEx (&config, kernel, ((Params) args)...);
  if (status != cudaSuccess) {
    cudaGetLastError ();
    dfl_cuda_note_cuda (dev, "a kernel launch", status);
  }
}
