/* gst-dflash — the kernels' pool of threads (see dfl-parallel.h).
 *
 * One call at a time holds the pool (`busy`). The caller publishes the
 * call (fn, ctx, threads) and opens it by storing its number in `open`;
 * a worker that sees a number it has not served yet counts itself in
 * (`inside`), checks that the call is still open and takes a slot; the
 * caller, once its own fn returns, closes the call (`open` = 0) and waits
 * until no worker is inside. A worker counts itself in before it looks at
 * `open`, and the caller closes before it looks at `inside` (both
 * sequentially consistent), so either the worker sees the call closed or
 * the caller waits for it: the call's fields are never read after the call
 * returns. A sleeping worker is woken under the mutex after the call is
 * published (the same pairing on `sleepers`), so no wake is lost.
 */
#define _GNU_SOURCE
#include "dfl-parallel.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause ()
#else
#define cpu_relax() ((void) 0)
#endif

typedef struct {
  int workers;
  atomic_int busy;            /* a call holds the pool */
  atomic_uint open;           /* the open call's number, 0 when none */
  atomic_int inside;          /* workers between counting in and out */
  atomic_int next_slot;       /* the slot the next worker to join takes */
  atomic_int sleepers;
  /* the call, written before it opens */
  void (*fn) (void *ctx, int slot);
  void *ctx;
  int threads;
  unsigned number;
  pthread_mutex_t lock;
  pthread_cond_t wake;
} Pool;

static Pool *_Atomic pool;
static atomic_int pool_state;   /* 0: not started, 1: starting, 2: started (or none to start) */

static long long
now_ns (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The number of a call this worker has not served, once there is one. */
static unsigned
wait_for_call (Pool *p, unsigned served)
{
  long long start = now_ns (), t = start;
  unsigned n;

  for (int i = 0;; i++) {
    n = atomic_load_explicit (&p->open, memory_order_acquire);
    if (n && n != served)
      return n;
    if ((i & 63) == 63) {
      t = now_ns ();
      if (t - start >= DFL_PARALLEL_SPIN_US * 1000LL)
        break;
    }
    if (t - start >= DFL_PARALLEL_PAUSE_US * 1000LL)
      sched_yield ();
    else
      cpu_relax ();
  }
  pthread_mutex_lock (&p->lock);
  atomic_fetch_add (&p->sleepers, 1);
  while (!(n = atomic_load (&p->open)) || n == served)
    pthread_cond_wait (&p->wake, &p->lock);
  atomic_fetch_sub (&p->sleepers, 1);
  pthread_mutex_unlock (&p->lock);
  return n;
}

static void *
worker (void *data)
{
  Pool *p = data;
  unsigned served = 0;

  for (;;) {
    unsigned n = wait_for_call (p, served);
    served = n;
    atomic_fetch_add (&p->inside, 1);
    if (atomic_load (&p->open) == n) {
      int slot = atomic_fetch_add (&p->next_slot, 1);
      if (slot < p->threads)
        p->fn (p->ctx, slot);
    }
    atomic_fetch_sub (&p->inside, 1);
  }
  return NULL;
}

/* A child of fork() has none of the workers: it starts a pool of its own
 * (the parent's is left as it was, never touched again). */
static void
after_fork_child (void)
{
  atomic_store (&pool, NULL);
  atomic_store (&pool_state, 0);
}

/* The pool, started by the first call that wants threads; NULL until then,
 * on one CPU, or while another thread is starting it (that call runs on
 * its caller alone). */
static Pool *
pool_get (void)
{
  int cpus, zero = 0;
  Pool *p;

  if (atomic_load (&pool_state) == 2)
    return atomic_load (&pool);
  if (!atomic_compare_exchange_strong (&pool_state, &zero, 1))
    return NULL;
  cpus = omp_get_num_procs ();
  p = cpus >= 2 ? calloc (1, sizeof *p) : NULL;
  if (!p) {
    atomic_store (&pool_state, 2);
    return NULL;
  }
  pthread_mutex_init (&p->lock, NULL);
  pthread_cond_init (&p->wake, NULL);
  for (int i = 0; i < cpus - 1; i++) {
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init (&attr);
    pthread_attr_setdetachstate (&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create (&th, &attr, worker, p) == 0)
      p->workers++;
    pthread_attr_destroy (&attr);
  }
  {
    static atomic_int registered;
    if (!atomic_exchange (&registered, 1))
      pthread_atfork (NULL, NULL, after_fork_child);
  }
  atomic_store (&pool, p);
  atomic_store (&pool_state, 2);
  return p;
}

int
dfl_parallel_threads (void)
{
  int want = omp_get_max_threads (), cpus;
  Pool *p = atomic_load (&pool);

  if (want <= 1)
    return 1;
  if (p)
    return want < p->workers + 1 ? want : p->workers + 1;
  cpus = omp_get_num_procs ();
  return want < cpus ? want : cpus;
}

void
dfl_parallel_run (int threads, void (*fn) (void *ctx, int slot), void *ctx)
{
  Pool *p = threads > 1 ? pool_get () : NULL;
  int idle = 0;

  if (threads <= 1 || !p || p->workers == 0
      || !atomic_compare_exchange_strong (&p->busy, &idle, 1)) {
    fn (ctx, 0);
    return;
  }
  p->fn = fn;
  p->ctx = ctx;
  p->threads = threads < p->workers + 1 ? threads : p->workers + 1;
  if (++p->number == 0)
    p->number = 1;
  atomic_store (&p->next_slot, 1);
  atomic_store (&p->open, p->number);
  if (atomic_load (&p->sleepers) > 0) {
    pthread_mutex_lock (&p->lock);
    pthread_cond_broadcast (&p->wake);
    pthread_mutex_unlock (&p->lock);
  }
  fn (ctx, 0);
  atomic_store (&p->open, 0);
  /* only workers that took a piece keep us here; one another process has
   * taken the core from gets it back sooner if we yield */
  for (int i = 0; atomic_load (&p->inside) > 0; i++)
    if (i < 1000)
      cpu_relax ();
    else
      sched_yield ();
  atomic_store (&p->busy, 0);
}
