/* gst-dflash — the kernels' threads: one pool for the whole process.
 *
 * Why not OpenMP's teams. libgomp gives every thread that opens a parallel
 * region a team of its own, and once the process holds more team threads
 * than it has CPUs it stops spinning at its barriers (GOMP_SPINCOUNT no
 * longer applies) and sleeps on a futex at every one of them. A GStreamer
 * pipeline runs kernels from several streaming threads (queues, several
 * pipelines, `dflash ab` running one pipeline after another on new
 * threads), so on a machine of few cores a second team is enough to make
 * every kernel call pay futex round trips: the second of two pipelines run
 * one after the other decoded several times slower than the first, and any
 * pipeline with a queue before a computing stage was as slow. And a
 * barrier waits for every thread of the team, so a worker that another
 * process has taken the core from holds up the whole product until it runs
 * again. With this pool both decode at the same speed.
 *
 * So the kernels share out their work here instead. One pool of workers
 * (as many as the CPUs the process may run on, less the caller) serves
 * every thread; a call's caller works on it too, and the work is claimed a
 * piece at a time (the function passed in takes its pieces from an atomic
 * counter), so a worker that is not running when a call starts simply finds
 * nothing left: the caller waits only for pieces a worker has already
 * claimed. A call made while another thread's call holds the pool runs on
 * its caller alone. What a thread computes depends only on the piece, never
 * on which thread or how many, so results are the same with any number of
 * threads (the kernels' batch invariance).
 *
 * Waiting, decided here rather than by OMP_WAIT_POLICY (which only the
 * environment can set, before the program starts): after a call a worker
 * spins for DFL_PARALLEL_SPIN_US (pure spinning for the first
 * DFL_PARALLEL_PAUSE_US, then yielding the core between looks, so another
 * runnable thread of the machine goes first), then sleeps on a condition
 * variable until the next call wakes it. A decoding step makes dozens of
 * calls a few microseconds apart, and a round of the pipeline leaves a
 * short gap between steps: spinning bridges both, where a futex wake would
 * cost more than the gap, and a caller never waits for a sleeping worker.
 *
 * The number of threads a call uses is omp_get_max_threads() of the
 * calling thread (OMP_NUM_THREADS, omp_set_num_threads), at most the pool's
 * size + 1.
 */
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

#define DFL_PARALLEL_PAUSE_US 50
#define DFL_PARALLEL_SPIN_US 2000

/* Threads a call from this thread would use (1: the caller alone). */
int dfl_parallel_threads (void);

/* Run fn (ctx, slot) on the calling thread (slot 0) and on up to
 * threads − 1 workers of the pool (slots 1 … threads − 1, each at most
 * once), as they join; returns once every one of those calls has
 * returned. fn shares the work out itself (each call claims pieces from an
 * atomic counter in ctx until none are left), so it must be correct for any
 * number of slots that come, the caller's alone included. threads ≤ 1, or a
 * pool busy with another thread's call: fn (ctx, 0) on the caller only. */
void dfl_parallel_run (int threads, void (*fn) (void *ctx, int slot), void *ctx);

#ifdef __cplusplus
}
#endif
