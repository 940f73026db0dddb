/* rootfs/unpack_jobs.c — an image's layers onto one directory, several at
 * once (rootfs_int.h: rfs_unpack_layers).
 *
 * The first layer is unpacked onto the target by the calling thread while
 * worker threads unpack the next ones, each into a directory of its own on
 * the side (ib_unpack_layer_side); the calling thread then merges them in
 * order (ib_unpack_side_merge).  A layer whose result depends on the layers
 * below it (unpack.h says when) is read again and applied in order.  The
 * tree is the one the layers give one by one, whatever the timing.
 */
#include "common/util.h"
#include "rootfs/rootfs_int.h"
#include "rootfs/unpack.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum job_state
{
  JOB_WAITING,
  JOB_RUNNING,
  JOB_DONE
};

struct job
{
  enum job_state state;
  char *dir;                   /* the side directory */
  int r;                       /* ib_unpack_layer_side's result */
  ib_unpack_side_t *side;
  char got[IB_DIGEST_LEN];
  ib_error_t err;
};

struct pool
{
  const char *dest;
  const rfs_layer_src_t *src;
  size_t first, n;
  struct job *jobs;            /* [first + 1, n) */
  size_t next;                 /* the next job a worker takes */
  bool stop;                   /* the caller gave up: take no more */
  pthread_mutex_t mu;
  pthread_cond_t cv;
};

/* A reader that gives up once the pool stops (a worker in the middle of a
 * download would otherwise hold the caller until it ends). */
struct stoppable
{
  struct pool *p;
  ib_layer_read_fn fn;
  void *ud;
};

static ssize_t
stoppable_read (void *ud, void *buf, size_t len, ib_error_t *err)
{
  struct stoppable *s = ud;
  pthread_mutex_lock (&s->p->mu);
  bool stop = s->p->stop;
  pthread_mutex_unlock (&s->p->mu);
  if (stop)
    return ib_error_set (err, ECANCELED, "stopped");
  return s->fn (s->ud, buf, len, err);
}

static void
run_job (struct pool *p, size_t i)
{
  struct job *j = &p->jobs[i];
  ib_layer_read_fn fn;
  void *ud;
  j->dir = xasprintf ("%s.layer%zu-XXXXXX", p->dest, i);
  if (mkdtemp (j->dir) == NULL)
    {
      j->r = ib_error_sys (&j->err, errno, "unpack layer %s: create %s", p->src->names[i], j->dir);
      free (j->dir);
      j->dir = NULL;
      return;
    }
  if (p->src->open (p->src->ctx, i, &fn, &ud, &j->err) < 0)
    {
      j->r = -1;
      return;
    }
  struct stoppable s = { .p = p, .fn = fn, .ud = ud };
  j->r = ib_unpack_layer_side (p->src->names[i], stoppable_read, &s, j->dir, j->got, NULL,
                               &j->side, &j->err);
  p->src->close (p->src->ctx, i, ud);
}

static void *
worker (void *arg)
{
  struct pool *p = arg;
  pthread_mutex_lock (&p->mu);
  while (!p->stop && p->next < p->n)
    {
      size_t i = p->next++;
      p->jobs[i].state = JOB_RUNNING;
      pthread_mutex_unlock (&p->mu);
      run_job (p, i);
      pthread_mutex_lock (&p->mu);
      p->jobs[i].state = JOB_DONE;
      pthread_cond_broadcast (&p->cv);
    }
  pthread_mutex_unlock (&p->mu);
  return NULL;
}

/* Layer i is on dest with diff_id got: checked, then told. */
static int
applied (const rfs_layer_src_t *src, size_t i, const char *got, ib_error_t *err)
{
  if (strcmp (got, src->diff_ids[i]) != 0)
    return ib_error_set (err, EINVAL,
                         "layer %zu (%s): diff_id mismatch: the image config says %s, the "
                         "layer's content is %s",
                         i, src->digests[i], src->diff_ids[i], got);
  if (src->applied)
    src->applied (src->ctx, i);
  return 0;
}

/* Layer i read once more and applied onto dest in order. */
static int
in_order (const rfs_layer_src_t *src, const char *dest, size_t i, char got[IB_DIGEST_LEN],
          ib_error_t *err)
{
  ib_layer_read_fn fn;
  void *ud;
  if (src->open (src->ctx, i, &fn, &ud, err) < 0)
    return -1;
  int r = ib_unpack_layer_stream (src->names[i], fn, ud, dest, got, NULL, err);
  src->close (src->ctx, i, ud);
  return r;
}

/* Layers unpacked at once: one per online CPU (each unpack has a decoder
 * thread too), at most 8 (each holds about 5 MiB of stream buffers: the
 * peak RSS stays under 64 MiB), or $IMGBUILD_UNPACK_JOBS (1: one by one;
 * at most 16); the calling thread takes part, so workers for the rest. */
static int
workers_wanted (size_t layers)
{
  const char *e = getenv ("IMGBUILD_UNPACK_JOBS");
  long n = sysconf (_SC_NPROCESSORS_ONLN);
  if (n > 8)
    n = 8;
  if (e && *e)
    n = strtol (e, NULL, 10);
  if (n < 1)
    n = 1;
  if (n > 16)
    n = 16;
  if ((size_t) n > layers)
    n = (long) layers;
  return (int) n - 1;
}

static void
remove_side_dir (struct job *j)
{
  if (j->dir == NULL)
    return;
  ib_error_t e = NULL;
  if (ib_rm_rf (j->dir, &e) < 0)
    {
      ib_warn ("unpack: %s", e->msg);
      ib_error_free (&e);
    }
  free (j->dir);
  j->dir = NULL;
}

int
rfs_unpack_layers (const char *dest, size_t first, size_t n, bool at_once,
                   const rfs_layer_src_t *src, ib_error_t *err)
{
  char got[IB_DIGEST_LEN];
  int nw = at_once && n > first + 1 ? workers_wanted (n - first) : 0;
  if (nw < 1)
    {
      for (size_t i = first; i < n; i++)
        if (in_order (src, dest, i, got, err) < 0 || applied (src, i, got, err) < 0)
          return -1;
      return 0;
    }

  struct pool p = { .dest = dest, .src = src, .first = first, .n = n, .next = first + 1 };
  p.jobs = xmalloc (n * sizeof *p.jobs);
  memset (p.jobs, 0, n * sizeof *p.jobs);
  pthread_mutex_init (&p.mu, NULL);
  pthread_cond_init (&p.cv, NULL);
  pthread_t th[16];
  int started = 0;
  for (; started < nw; started++)
    if (pthread_create (&th[started], NULL, worker, &p) != 0)
      break; /* fewer workers; the calling thread does what is left */

  int ret = 0;
  if (in_order (src, dest, first, got, err) < 0 || applied (src, first, got, err) < 0)
    ret = -1;
  for (size_t i = first + 1; ret == 0 && i < n; i++)
    {
      struct job *j = &p.jobs[i];
      pthread_mutex_lock (&p.mu);
      bool mine = false;
      while (j->state != JOB_DONE)
        {
          if (j->state == JOB_WAITING && p.next == i)
            {
              /* no worker took it yet (or none started): apply it in order */
              p.next++;
              j->state = JOB_DONE;
              mine = true;
            }
          else if (p.next < p.n)
            {
              /* while layer i is on its way, a later one on the side */
              size_t k = p.next++;
              p.jobs[k].state = JOB_RUNNING;
              pthread_mutex_unlock (&p.mu);
              run_job (&p, k);
              pthread_mutex_lock (&p.mu);
              p.jobs[k].state = JOB_DONE;
              pthread_cond_broadcast (&p.cv);
            }
          else
            pthread_cond_wait (&p.cv, &p.mu);
        }
      pthread_mutex_unlock (&p.mu);
      int r = mine ? 1 : j->r;
      if (r == 0)
        {
          r = ib_unpack_side_merge (j->side, dest, err);
          if (r == 0)
            memcpy (got, j->got, IB_DIGEST_LEN);
        }
      else if (r < 0)
        {
          *err = j->err;
          j->err = NULL;
        }
      ib_unpack_side_free (j->side);
      j->side = NULL;
      remove_side_dir (j);
      if (r == 1)
        r = in_order (src, dest, i, got, err);
      if (r == 0)
        r = applied (src, i, got, err);
      if (r < 0)
        ret = -1;
    }

  pthread_mutex_lock (&p.mu);
  p.stop = true;
  pthread_mutex_unlock (&p.mu);
  for (int k = 0; k < started; k++)
    pthread_join (th[k], NULL);
  for (size_t i = first + 1; i < n; i++)
    {
      struct job *j = &p.jobs[i];
      ib_unpack_side_free (j->side);
      ib_error_free (&j->err);
      remove_side_dir (j);
    }
  free (p.jobs);
  pthread_mutex_destroy (&p.mu);
  pthread_cond_destroy (&p.cv);
  return ret;
}
