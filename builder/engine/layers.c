/* builder/engine/layers.c — steps that change the tree: the change scan
 * around a step, the layer it makes, and the background jobs that compress
 * layers while the next steps run. */
#include "builder/engine/engine.h"
#include "rootfs/overlay.h"

#include <errno.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <sys/statvfs.h>

/* What a layer job's child sends back: one write, less than PIPE_BUF. */
struct job_result
{
  int status;                  /* 0, else the errno of the failure */
  char digest[IB_DIGEST_LEN];
  uint64_t size;
  char msg[1024];
};

/* Layers whose tar is smaller are compressed at once: a process costs more. */
#define JOB_MIN_TAR (4u << 20)
/* The background compressor's nice value: the lowest priority. */
#define COMPRESSOR_NICE 19
/* Room the store's file system must have left besides the tar for a layer
 * to be compressed in the background (its blob may be as large as it). */
#define JOB_SPARE (64u << 20)

double
seconds_since (const struct timespec *t0)
{
  struct timespec t1;
  clock_gettime (CLOCK_MONOTONIC, &t1);
  return (double) (t1.tv_sec - t0->tv_sec) + (double) (t1.tv_nsec - t0->tv_nsec) / 1e9;
}

/* The layer's line, under its step's label ("[build 2/5]"): a layer
 * written in the background may be done after later steps' lines. */
static void
layer_line (const char *label, const char *digest, uint64_t entries, uint64_t size, double secs)
{
  ib_info ("%s layer %.19s  %llu entries, %.1f kB, written in %.2f s", label ? label : "", digest,
           (unsigned long long) entries, (double) size / 1000.0, secs);
}

/* A compressor process started while a layer's tar is being written
 * (ib_layer_opts_t.raw_start): it follows the file as it grows. */
typedef struct raw_start_ctx
{
  build_t *b;
  const char *tar;
  pid_t pid;                 /* -1: none started */
  int res_fd, ctl_fd;        /* its struct job_result; the tar's final length to it */
  char *blob;
} raw_start_ctx_t;

/* Start a process compressing c->tar (followed while written, until its
 * length comes on the control pipe) into a new temp blob. */
static int
spawn_compressor (raw_start_ctx_t *c, ib_error_t *err)
{
  build_t *b = c->b;
  char *blob = NULL;
  int fd = ib_store_tmp_file (b->store, "layer", &blob, err);
  if (fd < 0)
    return -1;
  close (fd);
  int p[2], q[2];
  if (pipe2 (p, O_CLOEXEC) < 0)
    {
      ib_error_sys (err, errno, "compress layer: pipe");
      unlink (blob);
      free (blob);
      return -1;
    }
  if (pipe2 (q, O_CLOEXEC) < 0)
    {
      ib_error_sys (err, errno, "compress layer: pipe");
      close (p[0]);
      close (p[1]);
      unlink (blob);
      free (blob);
      return -1;
    }
  ib_layer_opts_t lo = { .compression = b->opts->compression, .level = b->opts->compression_level,
                         .sde = b->sde };
  pid_t parent = getpid ();
  fflush (NULL);
  /* the display's ticker thread stopped across the fork: the child starts
   * with one thread and no lock held by another */
  pid_t pid = ib_progress_fork (b->prog);
  if (pid == 0)
    {
      close (p[0]);
      close (q[1]);
      prctl (PR_SET_PDEATHSIG, SIGKILL);
      if (getppid () != parent)
        _exit (1);
      /* The build waits for the tar being written and for the next steps,
       * never for this process until the stage's image: it takes only the
       * CPU time they leave (its deflate threads inherit the nice value). */
      setpriority (PRIO_PROCESS, 0, COMPRESSOR_NICE);
      struct job_result r;
      memset (&r, 0, sizeof r);
      ib_error_t e = NULL;
      if (ib_layer_compress_follow (c->tar, q[0], blob, &lo, r.digest, &r.size, &e) < 0)
        {
          r.status = e->status ? e->status : EIO;
          snprintf (r.msg, sizeof r.msg, "%s", e->msg);
        }
      ssize_t w = write (p[1], &r, sizeof r);
      _exit (w == (ssize_t) sizeof r ? 0 : 1);
    }
  int en = errno;
  close (p[1]);
  close (q[0]);
  if (pid < 0)
    {
      close (p[0]);
      close (q[1]);
      unlink (blob);
      free (blob);
      return ib_error_sys (err, en, "compress layer: fork");
    }
  c->pid = pid;
  c->res_fd = p[0];
  c->ctl_fd = q[1];
  c->blob = blob;
  return 0;
}

/* ib_layer_opts_t.raw_start: a large layer is written as its tar, and
 * compressed by a process that starts now, when the store's file system
 * has room for the tar beside the blob (which may be as large). */
static bool
layer_raw_start (void *ud, uint64_t est)
{
  raw_start_ctx_t *c = ud;
  struct statvfs fs;
  if (statvfs (c->tar, &fs) < 0 || (uint64_t) fs.f_bavail * fs.f_frsize < est + JOB_SPARE)
    return false;
  ib_error_t e = NULL;
  if (spawn_compressor (c, &e) < 0)
    {
      ib_debug ("%s: compressing in one pass", e->msg);
      ib_error_free (&e);
      return false;
    }
  return true;
}

/* The tar was not finished: the compressor is stopped, its blob removed. */
static void
abandon_compressor (raw_start_ctx_t *c)
{
  if (c->pid < 0)
    return;
  close (c->ctl_fd); /* without a length: the child gives up */
  close (c->res_fd);
  kill (c->pid, SIGKILL);
  while (waitpid (c->pid, NULL, 0) < 0 && errno == EINTR)
    ;
  unlink (c->blob);
  free (c->blob);
  c->pid = -1;
  c->blob = NULL;
}

/* The tar *tar (taken: the job removes and frees it) of layer
 * st->layers[st->n_layers - 1] is complete at `len` bytes: tell its
 * compressor, and let join_layers take the result. */
static void
add_layer_job (build_t *b, stage_state_t *st, raw_start_ctx_t *c, char **tar, uint64_t len,
               uint64_t entries, const struct timespec *t0)
{
  unsigned char v[8];
  for (int i = 0; i < 8; i++)
    v[i] = (unsigned char) (len >> (8 * i));
  /* a failure: the child died, and join_layers reports it */
  ib_write_pipe (c->ctl_fd, v, sizeof v, "compressor", NULL);
  close (c->ctl_fd);
  b->jobs = xrealloc (b->jobs, (b->n_jobs + 1) * sizeof *b->jobs);
  layer_job_t *j = &b->jobs[b->n_jobs++];
  memset (j, 0, sizeof *j);
  j->st = st;
  j->index = st->n_layers - 1;
  j->pid = c->pid;
  j->fd = c->res_fd;
  j->tar = *tar;
  *tar = NULL;
  j->blob = c->blob;
  j->what = b->cur_in ? xasprintf ("%s:%d: %s", b->recipe->path, b->cur_in->line,
                                   b->cur_in->keyword)
                      : xstrdup (b->recipe->path);
  j->label = b->step_label ? xstrdup (b->step_label) : NULL;
  j->entries = entries;
  j->t0 = *t0;
  st->n_pending++;
  c->pid = -1;
  c->blob = NULL;
}

/* Wait for job j and take its blob into the store; its layer gets its
 * digest and size.  The job's files are removed either way.  Errors name
 * the step. */
static int
finish_layer_job (build_t *b, layer_job_t *j, ib_error_t *err)
{
  struct job_result r;
  memset (&r, 0, sizeof r);
  size_t got = 0;
  while (got < sizeof r)
    {
      ssize_t n = read (j->fd, (char *) &r + got, sizeof r - got);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        break;
      got += (size_t) n;
    }
  close (j->fd);
  int ws = 0;
  while (waitpid (j->pid, &ws, 0) < 0 && errno == EINTR)
    ;
  int ret = 0;
  if (got != sizeof r)
    ret = ib_error_set (err, EIO, "%s: compress layer %s: the process compressing it ended "
                        "without a result%s", j->what, j->tar,
                        WIFSIGNALED (ws) ? " (killed by a signal)" : "");
  else if (r.status != 0)
    ret = ib_error_set (err, r.status, "%s: %s", j->what, r.msg);
  else if (ib_store_commit_blob_hashed (b->store, j->blob, r.digest, err) < 0)
    ret = ib_error_prefix (err, "%s", j->what);
  if (ret < 0)
    unlink (j->blob);
  unlink (j->tar);
  stage_state_t *st = j->st;
  if (ret == 0)
    {
      ib_descriptor_t *d = &st->layers[j->index];
      memcpy (d->digest, r.digest, IB_DIGEST_LEN);
      d->size = (int64_t) r.size;
      layer_line (j->label, r.digest, j->entries, r.size, seconds_since (&j->t0));
    }
  st->n_pending--;
  free (j->tar);
  free (j->blob);
  free (j->what);
  free (j->label);
  return ret;
}

/* Whether every layer the record names has its blob. */
static bool
record_complete (const pending_record_t *r)
{
  for (size_t i = 0; i < r->n_layers; i++)
    if (r->st->layers[i].digest[0] == '\0')
      return false;
  return true;
}

/* Wait for the layers compressing for stage `only` (NULL: every stage),
 * then write the cache records that waited for them.  The first failure
 * is returned (later ones are warnings); the records of the steps whose
 * layers all made it are written still. */
int
join_layers (build_t *b, stage_state_t *only, ib_error_t *err)
{
  int ret = 0;
  size_t k = 0;
  for (size_t i = 0; i < b->n_jobs; i++)
    {
      layer_job_t *j = &b->jobs[i];
      if (only && j->st != only)
        {
          b->jobs[k++] = *j;
          continue;
        }
      ib_error_t e = NULL;
      if (finish_layer_job (b, j, &e) < 0)
        {
          if (ret == 0)
            {
              *err = e;
              ret = -1;
            }
          else
            {
              ib_warn ("%s", e->msg);
              ib_error_free (&e);
            }
        }
    }
  b->n_jobs = k;
  k = 0;
  for (size_t i = 0; i < b->n_records; i++)
    {
      pending_record_t *r = &b->records[i];
      if (r->st->n_pending > 0)
        {
          b->records[k++] = *r;
          continue;
        }
      ib_error_t e = NULL;
      if (record_complete (r)
          && ib_cache_put (b->store, r->key, r->config, r->st->layers, r->n_layers, &e) < 0)
        {
          ib_warn ("%s", e->msg);
          ib_error_free (&e);
        }
      json_decref (r->config);
    }
  b->n_records = k;
  return ret;
}

/* Stop what still compresses (a build that failed): the children are
 * killed, their files removed, the records that waited dropped. */
void
drop_layer_jobs (build_t *b)
{
  for (size_t i = 0; i < b->n_jobs; i++)
    {
      layer_job_t *j = &b->jobs[i];
      kill (j->pid, SIGKILL);
      while (waitpid (j->pid, NULL, 0) < 0 && errno == EINTR)
        ;
      close (j->fd);
      unlink (j->tar);
      unlink (j->blob);
      free (j->tar);
      free (j->blob);
      free (j->what);
      free (j->label);
      j->st->n_pending--;
    }
  free (b->jobs);
  b->jobs = NULL;
  b->n_jobs = 0;
  for (size_t i = 0; i < b->n_records; i++)
    json_decref (b->records[i].config);
  free (b->records);
  b->records = NULL;
  b->n_records = 0;
}

int
step_scan_begin (stage_state_t *st, step_scan_t *ss, char *const *exclude, ib_error_t *err)
{
  memset (ss, 0, sizeof *ss);
  ss->exclude = exclude;
  if (ib_rootfs_overlay_clean (st->rootfs, &ss->upper, &ss->lowers))
    return 0;
  return ib_fs_scan (st->rootfs, exclude, &ss->full, err);
}

void
step_scan_free (step_scan_t *ss)
{
  ib_fs_scan_free (ss->full);
  free (ss->upper);
  ib_strv_free (ss->lowers);
  memset (ss, 0, sizeof *ss);
}

/* The scans of an overlay step (ib_fs_scan_overlay) against a view of its
 * lower layers; when overlayfs redirected a directory, whole scans of
 * that view and of the tree. */
static int
step_scans (build_t *b, stage_state_t *st, step_scan_t *ss, ib_fs_scan_t **before,
            ib_fs_scan_t **cur, ib_error_t *err)
{
  cleanup_free char *view = NULL;
  int mounted = ib_rootfs_lower_view (b->store, ss->lowers, &view, err);
  if (mounted < 0)
    return -1;
  ib_error_t e = NULL;
  int r = ib_fs_scan_overlay (st->rootfs, ss->upper, view, ss->exclude, before, cur, &e);
  if (r < 0 && e->status == EOPNOTSUPP)
    {
      ib_debug ("%s: %s: scanning the whole tree", st->rootfs, e->msg);
      ib_error_free (&e);
      r = ib_fs_scan_nodev (view, ss->exclude, before, err);
      if (r == 0 && (r = ib_fs_scan_nodev (st->rootfs, ss->exclude, cur, err)) < 0)
        {
          ib_fs_scan_free (*before);
          *before = NULL;
        }
    }
  else if (r < 0)
    *err = e;
  else
    ib_debug ("%s: the step's changes from the upper directory alone", st->rootfs);
  ib_rootfs_lower_view_end (view, mounted);
  return r;
}

/* The layer of a step.  A large one (JOB_MIN_TAR) is written as its
 * uncompressed tar first, so its diff_id (which the keys of the following
 * steps need) is known at once, and compressed in a child process while
 * the next steps run (join_layers waits for it where its blob is needed:
 * the stage's image, a stage built FROM this one, the end of the build).
 * Small layers, and any layer when the store's file system cannot hold
 * the tar beside the blob, take one pass (tar, hash and compression). */
int
commit_layer (build_t *b, stage_state_t *st, step_scan_t *ss, const char *created_by,
              ib_error_t *err)
{
  /* what the step changed: an overlay tree's upper directory (the scans
   * of only what it holds), else the whole tree against the scan before */
  cleanup_scan ib_fs_scan_t *pbefore = NULL, *pcur = NULL;
  const ib_fs_scan_t *before = ss->full, *cur = NULL;
  if (ss->upper && step_scans (b, st, ss, &pbefore, &pcur, err) < 0)
    return -1;
  if (ss->upper)
    {
      before = pbefore;
      cur = pcur;
    }
  struct timespec t0;
  clock_gettime (CLOCK_MONOTONIC, &t0);
  char *tmp = NULL;
  int fd = ib_store_tmp_file (b->store, "layer", &tmp, err);
  if (fd < 0)
    return -1;
  close (fd);
  ib_layer_result_t res;
  ib_layer_opts_t lo = { .compression = b->opts->compression, .level = b->opts->compression_level,
                         .sde = b->sde, .match_tree = true };
  raw_start_ctx_t rc = { .b = b, .tar = tmp, .pid = -1, .res_fd = -1, .ctl_fd = -1 };
  if (lo.compression != IB_COMPRESSION_NONE)
    {
      lo.raw_above = JOB_MIN_TAR;
      lo.raw_start = layer_raw_start;
      lo.raw_ud = &rc;
    }
  bool background = false;
  int ret = -1;
  ib_error_t e = NULL;
  if (ib_layer_write_diff_scans (st->rootfs, before, cur, ss->exclude, tmp, &lo, &res, &e) < 0)
    {
      abandon_compressor (&rc);
      /* the tar may not fit where the compressed blob does */
      if (lo.raw_above == 0 || (e->status != ENOSPC && e->status != EDQUOT))
        {
          *err = e;
          goto out;
        }
      ib_error_free (&e);
      lo.raw_above = 0;
      lo.raw_start = NULL;
      if (ib_layer_write_diff_scans (st->rootfs, before, cur, ss->exclude, tmp, &lo, &res, err) < 0)
        goto out;
    }
  background = res.raw;
  if (res.entries == 0)
    {
      add_history (b, st, created_by, true);
      ret = 0;
      goto out;
    }
  if (!background && ib_store_commit_blob_hashed (b->store, tmp, res.digest, err) < 0)
    goto out;
  st->layers = xrealloc (st->layers, (st->n_layers + 1) * sizeof (ib_descriptor_t));
  ib_descriptor_t *d = &st->layers[st->n_layers++];
  memset (d, 0, sizeof *d);
  d->media_type = xstrdup (ib_compression_media_type (b->opts->compression));
  if (!background)
    {
      memcpy (d->digest, res.digest, IB_DIGEST_LEN);
      d->size = (int64_t) res.size;
    }
  json_t *rootfs = json_object_get (st->config, "rootfs");
  if (!json_is_object (rootfs))
    {
      rootfs = json_pack ("{s:s, s:[]}", "type", "layers", "diff_ids");
      json_object_set_new (st->config, "rootfs", rootfs);
    }
  json_array_append_new (json_object_get (rootfs, "diff_ids"), json_string (res.diff_id));
  add_history (b, st, created_by, false);
  if (background)
    add_layer_job (b, st, &rc, &tmp, res.size, res.entries, &t0);
  /* An overlay tree keeps this step's changes as a layered snapshot (its
   * upper directory, moved, not copied): a later build that misses after
   * this step (the edit loop) mounts it instead of unpacking the layers. */
  {
    cleanup_strv char **diff_ids = NULL;
    if (ib_config_diff_ids (st->config, &diff_ids, NULL) == 0)
      {
        char chain[IB_DIGEST_LEN];
        ib_chain_id (diff_ids, ib_strv_len (diff_ids) - 1, chain);
        if (ib_rootfs_freeze (b->store, st->rootfs, ib_digest_hex (chain), err) < 0)
          goto out;
      }
  }
  if (!background)
    layer_line (b->step_label, res.digest, res.entries, res.size, seconds_since (&t0));
  ret = 0;
out:
  abandon_compressor (&rc); /* none left once the job is added */
  if (tmp)
    {
      if (ret < 0 || !background)
        unlink (tmp);
      free (tmp);
    }
  return ret;
}
