/* gst-dflash — GMutex and GCond on pthreads, for ThreadSanitizer builds.
 *
 * GLib on Linux builds GMutex and GCond on raw futexes, which
 * ThreadSanitizer cannot see: every buffer that crosses a GstQueue (a GMutex
 * and a GCond) would look like a race between the thread that wrote it and
 * the thread that reads it. Linked into the test executable of a
 * -Db_sanitize=thread build, these definitions take the place of GLib's for
 * every call made through the dynamic linker: GStreamer's, GObject's, the
 * plugin's and the test's own. Each GMutex and GCond holds a pthread object
 * made on first use, which ThreadSanitizer intercepts.
 *
 * GLib's calls inside itself bind to its own definitions, on mutexes of its
 * own (the thread pool's, the main context's); no mutex is locked by both
 * kinds, so each keeps one implementation. Nothing here is built or linked
 * outside a ThreadSanitizer build.
 */
#include <glib.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

/* ------------------------------------------------------- pthread objects */

/* The pthread object a GMutex or GCond holds in `slot`, made by `init` on
 * first use: of two threads that race to make it, one's is kept and the
 * other's destroyed. */
static void *
object_get (gpointer *slot, gsize size, void (*init) (void *), void (*destroy) (void *))
{
  void *o = g_atomic_pointer_get (slot), *fresh;

  if (G_LIKELY (o))
    return o;
  fresh = malloc (size);
  if (!fresh)
    abort ();
  init (fresh);
  if (!g_atomic_pointer_compare_and_exchange (slot, NULL, fresh)) {
    destroy (fresh);
    free (fresh);
  }
  return g_atomic_pointer_get (slot);
}

static void
object_clear (gpointer *slot, void (*destroy) (void *))
{
  void *o = *slot;

  if (o) {
    destroy (o);
    free (o);
  }
  *slot = NULL;
}

static void
mutex_init (void *m)
{
  pthread_mutex_init (m, NULL);
}

static void
mutex_destroy (void *m)
{
  pthread_mutex_destroy (m);
}

static pthread_mutex_t *
mutex_get (GMutex *mutex)
{
  return object_get (&mutex->p, sizeof (pthread_mutex_t), mutex_init, mutex_destroy);
}

static void
cond_init (void *c)
{
  pthread_condattr_t attr;

  /* g_cond_wait_until takes g_get_monotonic_time () deadlines */
  pthread_condattr_init (&attr);
  pthread_condattr_setclock (&attr, CLOCK_MONOTONIC);
  pthread_cond_init (c, &attr);
  pthread_condattr_destroy (&attr);
}

static void
cond_destroy (void *c)
{
  pthread_cond_destroy (c);
}

static pthread_cond_t *
cond_get (GCond *cond)
{
  return object_get (&cond->p, sizeof (pthread_cond_t), cond_init, cond_destroy);
}

/* ---------------------------------------------------------------- GMutex */

void
g_mutex_init (GMutex *mutex)
{
  mutex->p = NULL;
  mutex_get (mutex);
}

void
g_mutex_clear (GMutex *mutex)
{
  object_clear (&mutex->p, mutex_destroy);
}

void
g_mutex_lock (GMutex *mutex)
{
  if (pthread_mutex_lock (mutex_get (mutex)) != 0)
    abort ();
}

void
g_mutex_unlock (GMutex *mutex)
{
  if (pthread_mutex_unlock (mutex_get (mutex)) != 0)
    abort ();
}

gboolean
g_mutex_trylock (GMutex *mutex)
{
  return pthread_mutex_trylock (mutex_get (mutex)) == 0;
}

/* ----------------------------------------------------------------- GCond */

void
g_cond_init (GCond *cond)
{
  cond->p = NULL;
  cond_get (cond);
}

void
g_cond_clear (GCond *cond)
{
  object_clear (&cond->p, cond_destroy);
}

void
g_cond_wait (GCond *cond, GMutex *mutex)
{
  if (pthread_cond_wait (cond_get (cond), mutex_get (mutex)) != 0)
    abort ();
}

gboolean
g_cond_wait_until (GCond *cond, GMutex *mutex, gint64 end_time)
{
  struct timespec ts = { .tv_sec = end_time / G_USEC_PER_SEC,
                         .tv_nsec = (end_time % G_USEC_PER_SEC) * 1000 };

  return pthread_cond_timedwait (cond_get (cond), mutex_get (mutex), &ts) == 0;
}

void
g_cond_signal (GCond *cond)
{
  pthread_cond_signal (cond_get (cond));
}

void
g_cond_broadcast (GCond *cond)
{
  pthread_cond_broadcast (cond_get (cond));
}
