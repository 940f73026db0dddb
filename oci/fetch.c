/* oci/fetch.c — parallel blob downloads (ib_fetch_*, distribution-spec
 * "Pulling blobs"; the contract is in oci/registry.h).
 *
 * A background thread drives libcurl's multi interface: at most
 * FETCH_MAX_ACTIVE transfers, each streamed into a flock'ed partial file in
 * the store's tmp/ and through sha256, resumed with Range after an earlier
 * run or a failed attempt, retried with backoff or after Retry-After, and
 * committed to the store only when its digest and size match.  One
 * progress clock for all the blobs fails them when none moved for
 * $IMGBUILD_PROGRESS_TIMEOUT seconds.  Readers follow a blob as it arrives
 * (ib_fetch_read), so a pull can unpack while it downloads.
 */
#include "oci/registry_int.h"
#include "oci/regconf.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------- parallel blob downloads (curl multi) ---------- */

#define FETCH_MAX_ACTIVE 6      /* transfers at once; also the per-host connection bound */
#define FETCH_ATTEMPTS 6        /* per blob, counting connection errors, 5xx, 429, mismatches */
#define FETCH_BUFFER (512 * 1024)

enum job_state
{
  JOB_WAITING,  /* not started, or waiting for its retry time */
  JOB_ACTIVE,
  JOB_DONE,     /* verified and committed to the store (or there already) */
  JOB_FAILED
};

typedef struct fetch_job
{
  ib_descriptor_t desc;
  struct ib_fetch *f;
  enum job_state state;
  int fd;                 /* the partial file (later: the committed blob) */
  char *path;             /* <store>/tmp/blob-<hex>.partial */
  int attempt;            /* failed attempts so far */
  int redirects;
  bool auth_retried;
  int64_t not_before_ms;  /* monotonic time before which no retry starts */
  char *url;              /* current URL (after redirects) */
  bool own;               /* url is on the registry's origin: send Authorization */
  bool resumed;           /* this download continued what an earlier run left */
  bool oversize;          /* the server sent more bytes than the descriptor's size */
  CURL *easy;
  struct curl_slist *hdrs;
  char errbuf[CURL_ERROR_SIZE];
  xfer_t x;               /* headers, status, and the sink (fd, hash, bytes written) */
  char *last_error;       /* why the last attempt failed, while a retry waits */
  int64_t peer_size;      /* size of the partial file another process holds */
  /* shared with readers, under f->mu */
  uint64_t published;     /* bytes of the partial file readers may read */
  unsigned generation;    /* +1 whenever the file starts over from byte 0 */
  ib_error_t err;
  int item;               /* its progress item */
} fetch_job_t;

struct ib_fetch
{
  ib_registry_t *r;
  ib_store_t *store;
  char *repo, *scope, *shown;
  fetch_job_t *jobs;
  size_t n;
  CURLM *multi;
  pthread_t thread;
  bool thread_live;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool cancel;            /* under mu */
  bool finished;          /* under mu: the loop thread has ended */
  int64_t stall_s;
  int64_t progress_s;     /* IB_NET_PROGRESS */
  int64_t progress_ms;    /* when a blob last received a byte or completed */
  ib_progress_t *progress; /* not owned; may be NULL */
  bool unpacking;         /* a caller unpacks the layers: "Pull complete" is theirs to say */
};

static void
job_wake (struct ib_fetch *f)
{
  pthread_cond_broadcast (&f->cv);
}

/* Start the partial file over from byte 0 (the server ignored Range, the
 * bytes did not match the digest, ...): readers see a new generation. */
static int
job_restart_file (fetch_job_t *j)
{
  pthread_mutex_lock (&j->f->mu);
  j->generation++;
  j->published = 0;
  pthread_mutex_unlock (&j->f->mu);
  ib_sha256_free (j->x.sink_hash);
  j->x.sink_hash = ib_sha256_new ();
  j->x.sink_written = 0;
  j->resumed = false;
  if (ftruncate (j->fd, 0) < 0 || lseek (j->fd, 0, SEEK_SET) < 0)
    return -1;
  return 0;
}

static size_t
job_on_write (char *data, size_t size, size_t nmemb, void *ud)
{
  fetch_job_t *j = ud;
  xfer_t *x = &j->x;
  size_t n = size * nmemb;
  if (x->sink_fd >= 0 && x->status == 200 && !x->sink_started && x->sink_written > 0)
    {
      /* the server ignored our Range: http_on_write starts the file over */
      pthread_mutex_lock (&j->f->mu);
      j->generation++;
      j->published = 0;
      pthread_mutex_unlock (&j->f->mu);
      j->resumed = false;
    }
  bool body = x->sink_fd >= 0 && (x->status == 200 || x->status == 206);
  uint64_t before = x->status == 200 && !x->sink_started ? 0 : x->sink_written;
  if (body && j->desc.size >= 0 && before + n > (uint64_t) j->desc.size)
    {
      /* more than the descriptor says: stop now, not when the disk is full */
      j->oversize = true;
      return 0;
    }
  size_t r = http_on_write (data, size, nmemb, x);
  if (body)
    {
      j->f->progress_ms = http_now_ms (); /* the loop thread's own: no lock */
      pthread_mutex_lock (&j->f->mu);
      j->published = x->sink_written;
      job_wake (j->f);
      pthread_mutex_unlock (&j->f->mu);
      ib_progress_update (j->f->progress, j->item, (int64_t) x->sink_written);
    }
  return r;
}

static void
job_fail (fetch_job_t *j, ib_error_t *e)
{
  ib_progress_done (j->f->progress, j->item, false, (*e)->msg);
  pthread_mutex_lock (&j->f->mu);
  j->err = *e;
  *e = NULL;
  ib_error_prefix (&j->err, "blob %s", j->desc.digest);
  j->state = JOB_FAILED;
  job_wake (j->f);
  pthread_mutex_unlock (&j->f->mu);
}

static void
job_done (fetch_job_t *j)
{
  j->f->progress_ms = http_now_ms ();
  pthread_mutex_lock (&j->f->mu);
  j->state = JOB_DONE;
  job_wake (j->f);
  pthread_mutex_unlock (&j->f->mu);
}

/* First start of a job: the blob may be in the store already, or partly
 * downloaded by an earlier run (resumed).  Returns 1 when done, 0 to
 * download, 2 when another process holds the partial file (try later). */
static int
job_open (fetch_job_t *j, ib_error_t *err)
{
  struct ib_fetch *f = j->f;
  if (ib_store_has_blob (f->store, j->desc.digest))
    goto in_store;
  if (j->path == NULL)
    j->path = ib_store_partial_path (f->store, j->desc.digest);
  for (;;)
    {
      int fd = open (j->path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
      if (fd < 0)
        return ib_error_sys (err, errno, "open %s", j->path);
      if (flock (fd, LOCK_EX | LOCK_NB) < 0)
        {
          int e = errno;
          close (fd);
          if (e == EWOULDBLOCK || e == EINTR)
            return 2;
          return ib_error_sys (err, e, "lock %s", j->path);
        }
      struct stat a, b;
      bool same = fstat (fd, &a) == 0 && stat (j->path, &b) == 0 && a.st_dev == b.st_dev
                  && a.st_ino == b.st_ino;
      if (ib_store_has_blob (f->store, j->desc.digest))
        {
          if (same)
            unlink (j->path);
          close (fd);
          goto in_store;
        }
      if (!same)
        {
          close (fd); /* renamed or removed under us: again */
          continue;
        }
      pthread_mutex_lock (&f->mu);
      j->fd = fd;
      pthread_mutex_unlock (&f->mu);
      break;
    }
  /* hash what an earlier, interrupted download left */
  j->x.sink_fd = j->fd;
  j->x.sink_hash = ib_sha256_new ();
  char *buf = xmalloc (1 << 16);
  for (;;)
    {
      ssize_t n = read (j->fd, buf, 1 << 16);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        break;
      ib_sha256_update (j->x.sink_hash, buf, (size_t) n);
      j->x.sink_written += (uint64_t) n;
    }
  free (buf);
  if (j->desc.size >= 0 && j->x.sink_written == (uint64_t) j->desc.size)
    {
      /* whole: an earlier run stopped between the last byte and the commit
       * (killed during its fsync); a Range from the end would only get 416 */
      char got[IB_DIGEST_LEN];
      ib_sha256_final (j->x.sink_hash, got); /* (frees it) */
      j->x.sink_hash = NULL;
      if (strcmp (got, j->desc.digest) == 0)
        {
          if (ib_store_commit_blob_hashed (f->store, j->path, j->desc.digest, err) < 0)
            return -1;
          pthread_mutex_lock (&f->mu);
          close (j->fd);
          j->fd = -1;
          pthread_mutex_unlock (&f->mu);
          j->x.sink_fd = -1;
          j->x.sink_written = 0;
          goto in_store;
        }
      ib_warn ("%s: blob %.19s..: the partial download an earlier run left does not match "
               "its digest; downloading it again", f->shown, j->desc.digest);
      if (job_restart_file (j) < 0)
        return ib_error_sys (err, errno, "truncate %s", j->path);
    }
  else if (j->desc.size >= 0 && j->x.sink_written > (uint64_t) j->desc.size)
    {
      if (job_restart_file (j) < 0)
        return ib_error_sys (err, errno, "truncate %s", j->path);
    }
  else if (lseek (j->fd, (off_t) j->x.sink_written, SEEK_SET) < 0)
    return ib_error_sys (err, errno, "seek %s", j->path);
  if (j->x.sink_written > 0)
    {
      j->resumed = true;
      ib_debug ("blob %s: resuming at byte %llu", j->desc.digest,
                (unsigned long long) j->x.sink_written);
    }
  pthread_mutex_lock (&f->mu);
  j->published = j->x.sink_written;
  pthread_mutex_unlock (&f->mu);
  return 0;

in_store:;
  cleanup_free char *p = ib_store_blob_path (f->store, j->desc.digest);
  int fd = open (p, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat (fd, &st) < 0)
    {
      int e = errno;
      if (fd >= 0)
        close (fd);
      return ib_error_sys (err, e, "open %s", p);
    }
  pthread_mutex_lock (&f->mu);
  j->fd = fd;
  j->published = (uint64_t) st.st_size;
  pthread_mutex_unlock (&f->mu);
  return 1;
}

static void
job_release_easy (fetch_job_t *j)
{
  if (j->easy)
    {
      curl_multi_remove_handle (j->f->multi, j->easy);
      curl_easy_cleanup (j->easy);
      j->easy = NULL;
    }
  curl_slist_free_all (j->hdrs);
  j->hdrs = NULL;
}

/* Start (or restart) the transfer of job j on the multi handle. */
static int
job_start (fetch_job_t *j, ib_error_t *err)
{
  struct ib_fetch *f = j->f;
  if (j->fd < 0)
    {
      int r = job_open (j, err);
      if (r < 0)
        return -1;
      if (r == 1)
        {
          ib_progress_done (f->progress, j->item, true, "Already exists");
          job_done (j);
          return 0;
        }
      if (r == 2)
        {
          /* another process downloads it: its progress is ours */
          struct stat st;
          if (stat (j->path, &st) == 0 && st.st_size != j->peer_size)
            {
              j->peer_size = st.st_size;
              f->progress_ms = http_now_ms ();
            }
          j->not_before_ms = http_now_ms () + 200;
          return 0;
        }
    }
  if (j->url == NULL)
    {
      j->url = xasprintf ("%s/v2/%s/blobs/%s", f->r->base, f->repo, j->desc.digest);
      j->own = true;
    }
  cleanup_free char *auth = NULL;
  if (j->own && auth_header (f->r, f->scope, &auth, err) < 0)
    return -1;

  xfer_reset_response (&j->x);
  j->x.sink_started = false;
  j->errbuf[0] = '\0';
  CURL *c = curl_easy_init ();
  if (c == NULL)
    return ib_error_set (err, ENOMEM, "curl_easy_init failed");
  j->easy = c;
  if (j->x.sink_written > 0)
    {
      char range[64];
      snprintf (range, sizeof range, "Range: bytes=%llu-", (unsigned long long) j->x.sink_written);
      j->hdrs = curl_slist_append (j->hdrs, range);
    }
  if (auth)
    j->hdrs = curl_slist_append (j->hdrs, auth);
  http_setup_handle (f->r, c);
  curl_easy_setopt (c, CURLOPT_URL, j->url);
  curl_easy_setopt (c, CURLOPT_HTTPHEADER, j->hdrs);
  curl_easy_setopt (c, CURLOPT_ERRORBUFFER, j->errbuf);
  curl_easy_setopt (c, CURLOPT_LOW_SPEED_TIME, (long) f->stall_s);
  curl_easy_setopt (c, CURLOPT_BUFFERSIZE, (long) FETCH_BUFFER);
  curl_easy_setopt (c, CURLOPT_HEADERFUNCTION, http_on_header);
  curl_easy_setopt (c, CURLOPT_HEADERDATA, &j->x);
  curl_easy_setopt (c, CURLOPT_WRITEFUNCTION, job_on_write);
  curl_easy_setopt (c, CURLOPT_WRITEDATA, j);
  curl_easy_setopt (c, CURLOPT_PRIVATE, j);
  ib_debug ("GET %s%s", j->url, j->x.sink_written ? " (resuming)" : "");
  ib_progress_set_status (f->progress, j->item, NULL);
  ib_progress_update (f->progress, j->item, (int64_t) j->x.sink_written);
  CURLMcode mc = curl_multi_add_handle (f->multi, c);
  if (mc != CURLM_OK)
    return ib_error_set (err, EIO, "curl_multi_add_handle: %s", curl_multi_strerror (mc));
  j->state = JOB_ACTIVE;
  return 0;
}

/* Give up now, or schedule another attempt of a transient failure. */
static void
job_retry_or_fail (fetch_job_t *j, ib_error_t *e, bool transient, long status)
{
  j->attempt++;
  if (!transient || j->attempt >= FETCH_ATTEMPTS)
    {
      if (transient)
        ib_error_prefix (e, "gave up after %d attempts", j->attempt);
      job_fail (j, e);
      return;
    }
  int64_t delay = http_retry_delay_ms (j->attempt, status, j->x.retry_after);
  {
    char st[64];
    if (status)
      snprintf (st, sizeof st, "Retrying in %.1fs (HTTP %ld)", (double) delay / 1000.0, status);
    else
      snprintf (st, sizeof st, "Retrying in %.1fs", (double) delay / 1000.0);
    ib_progress_set_status (j->f->progress, j->item, st);
  }
  ib_warn ("%s: blob %.19s..: %s; retrying in %.1f s (%llu bytes so far)", j->f->shown,
           j->desc.digest, (*e)->msg, (double) delay / 1000.0,
           (unsigned long long) j->x.sink_written);
  free (j->last_error);
  j->last_error = xstrdup ((*e)->msg);
  ib_error_free (e);
  j->not_before_ms = http_now_ms () + delay;
  j->state = JOB_WAITING;
}

/* A transfer of job j ended with `rc`. */
static void
job_finished (fetch_job_t *j, CURLcode rc)
{
  struct ib_fetch *f = j->f;
  ib_error_t e = NULL;
  long st = 0;
  curl_easy_getinfo (j->easy, CURLINFO_RESPONSE_CODE, &st);
  if (rc == CURLE_WRITE_ERROR && j->oversize)
    {
      j->oversize = false;
      job_release_easy (j);
      if (job_restart_file (j) < 0)
        {
          ib_error_sys (&e, errno, "truncate %s", j->path);
          job_fail (j, &e);
          return;
        }
      ib_error_set (&e, EBADMSG, "the registry sent more than the %lld bytes its descriptor gives",
                    (long long) j->desc.size);
      job_retry_or_fail (j, &e, true, 0);
      return;
    }
  if (st == 416 && j->x.sink_written > 0)
    {
      /* nothing past our offset, or a bad partial file: start over.  Before
       * rc: a registry may declare the whole blob's Content-Length on its
       * 416 and close after the short body (curl: CURLE_PARTIAL_FILE) */
      job_release_easy (j);
      j->state = JOB_WAITING;
      j->not_before_ms = 0;
      if (job_restart_file (j) < 0)
        {
          ib_error_sys (&e, errno, "truncate %s", j->path);
          job_fail (j, &e);
        }
      return;
    }
  if (rc != CURLE_OK)
    {
      j->x.transient = false;
      http_curl_failure_on (f->r, j->easy, j->errbuf, &j->x, rc, j->url, &e);
      job_release_easy (j);
      if (j->x.sink_errno)
        {
          job_fail (j, &e);
          return;
        }
      job_retry_or_fail (j, &e, j->x.transient, 0);
      return;
    }
  job_release_easy (j);
  j->x.status = st;
  j->state = JOB_WAITING;
  j->not_before_ms = 0;
  if (st == 401 && j->own && !j->auth_retried)
    {
      j->auth_retried = true;
      j->x.scope = f->scope;
      if (auth_handle_401 (f->r, &j->x, &e) < 0)
        job_fail (j, &e);
      return;
    }
  if (j->x.location && (st == 301 || st == 302 || st == 303 || st == 307 || st == 308))
    {
      if (++j->redirects > MAX_REDIRECTS)
        {
          ib_error_set (&e, ELOOP, "%s: too many redirects", f->r->host);
          job_fail (j, &e);
          return;
        }
      char *next = http_resolve_url (j->url, j->x.location);
      free (j->url);
      j->url = next;
      j->own = http_same_origin (next, f->r->base);
      return;
    }
  if (st == 416 && j->x.sink_written > 0)
    {
      /* nothing past our offset, or a bad partial file: start over */
      if (job_restart_file (j) < 0)
        {
          ib_error_sys (&e, errno, "truncate %s", j->path);
          job_fail (j, &e);
        }
      return;
    }
  if (st != 200 && st != 206)
    {
      j->x.transient = false;
      http_status_error (&j->x, &e);
      if (st == 404)
        ib_error_prefix (&e, "the registry does not have it");
      job_retry_or_fail (j, &e, j->x.transient, st);
      return;
    }
  /* a redirect target may be a fresh URL per request (signed): start at the registry again */
  free (j->url);
  j->url = NULL;
  j->redirects = 0;
  j->auth_retried = false;
  ib_sha256_t *h = j->x.sink_hash;
  j->x.sink_hash = NULL;
  char got[IB_DIGEST_LEN];
  ib_sha256_final (h, got);
  if (strcmp (got, j->desc.digest) != 0
      || (j->desc.size >= 0 && j->x.sink_written != (uint64_t) j->desc.size))
    {
      bool was_resumed = j->resumed;
      uint64_t got_size = j->x.sink_written;
      if (job_restart_file (j) < 0)
        {
          ib_error_sys (&e, errno, "truncate %s", j->path);
          job_fail (j, &e);
          return;
        }
      if (was_resumed)
        {
          ib_warn ("%s: blob %.19s..: the resumed download does not match its digest; "
                   "downloading it again", f->shown, j->desc.digest);
          return;
        }
      ib_error_set (&e, EBADMSG, "digest mismatch: %llu bytes received that hash to %s",
                    (unsigned long long) got_size, got);
      job_retry_or_fail (j, &e, true, 0);
      return;
    }
  if (ib_store_commit_blob_hashed (f->store, j->path, j->desc.digest, &e) < 0)
    {
      job_fail (j, &e);
      return;
    }
  if (f->unpacking)
    ib_progress_set_status (f->progress, j->item, "Download complete");
  else
    ib_progress_done (f->progress, j->item, true, "Download complete");
  job_done (j); /* the fd stays open for readers: the blob file, now committed */
}

/* The pull's blobs received nothing for f->progress_s seconds, retries
 * and their waits included (docs/cli.md "Network deadlines"): every blob
 * still open fails, naming the limit and, when a retry was waiting, why
 * the last attempt failed. */
static void
fetch_no_progress (struct ib_fetch *f)
{
  for (size_t i = 0; i < f->n; i++)
    {
      fetch_job_t *j = &f->jobs[i];
      if (j->state != JOB_WAITING && j->state != JOB_ACTIVE)
        continue;
      job_release_easy (j);
      ib_error_t e = NULL;
      ib_error_set (&e, ETIMEDOUT,
                    "timed out: no progress for %lld s (no blob received a byte from %s; set "
                    "%s=SECONDS to allow more)%s%s",
                    (long long) f->progress_s, f->r->name,
                    ib_regconf_net_limit_var (IB_NET_PROGRESS),
                    j->last_error ? "; the last attempt: " : "",
                    j->last_error ? j->last_error : "");
      job_fail (j, &e);
    }
}

static void *
fetch_loop (void *arg)
{
  struct ib_fetch *f = arg;
  for (;;)
    {
      pthread_mutex_lock (&f->mu);
      bool cancel = f->cancel;
      pthread_mutex_unlock (&f->mu);
      if (cancel)
        break;
      int64_t now = http_now_ms ();
      size_t active = 0, open_jobs = 0;
      int64_t next_wake = -1;
      for (size_t i = 0; i < f->n; i++)
        if (f->jobs[i].state == JOB_ACTIVE)
          active++;
      for (size_t i = 0; i < f->n; i++)
        {
          fetch_job_t *j = &f->jobs[i];
          if (j->state == JOB_WAITING)
            {
              if (j->not_before_ms > now)
                {
                  if (next_wake < 0 || j->not_before_ms < next_wake)
                    next_wake = j->not_before_ms;
                }
              else if (active < FETCH_MAX_ACTIVE)
                {
                  ib_error_t e = NULL;
                  if (job_start (j, &e) < 0)
                    {
                      job_release_easy (j);
                      job_fail (j, &e);
                    }
                  else if (j->state == JOB_ACTIVE)
                    active++;
                  else if (j->state == JOB_WAITING
                           && (next_wake < 0 || j->not_before_ms < next_wake))
                    next_wake = j->not_before_ms;
                }
            }
          if (j->state == JOB_WAITING || j->state == JOB_ACTIVE)
            open_jobs++;
        }
      if (open_jobs == 0)
        break;
      if (now - f->progress_ms >= f->progress_s * 1000)
        {
          fetch_no_progress (f);
          continue;
        }
      int running = 0;
      curl_multi_perform (f->multi, &running);
      CURLMsg *msg;
      int left;
      bool progressed = false;
      while ((msg = curl_multi_info_read (f->multi, &left)))
        if (msg->msg == CURLMSG_DONE)
          {
            fetch_job_t *j = NULL;
            curl_easy_getinfo (msg->easy_handle, CURLINFO_PRIVATE, (char **) &j);
            job_finished (j, msg->data.result);
            progressed = true;
          }
      if (progressed)
        continue;
      int timeout = 200;
      if (next_wake >= 0)
        {
          int64_t d = next_wake - http_now_ms ();
          if (d < timeout)
            timeout = d < 0 ? 0 : (int) d;
        }
      curl_multi_poll (f->multi, NULL, 0, timeout, NULL);
    }
  /* cancelled: stop what runs */
  for (size_t i = 0; i < f->n; i++)
    job_release_easy (&f->jobs[i]);
  pthread_mutex_lock (&f->mu);
  f->finished = true;
  job_wake (f);
  pthread_mutex_unlock (&f->mu);
  return NULL;
}

int
ib_fetch_start (ib_registry_t *r, ib_store_t *store, const char *repo, const char *shown,
                const ib_descriptor_t *blobs, size_t n, ib_progress_t *progress, bool unpacking,
                ib_fetch_t **out, ib_error_t *err)
{
  *out = NULL;
  for (size_t i = 0; i < n; i++)
    if (!ib_digest_valid (blobs[i].digest))
      return ib_error_set (err, EINVAL, "blob \"%s\": not a sha256 digest", blobs[i].digest);
  if (registry_probe_scheme (r, err) < 0 || auth_ping (r, err) < 0)
    return -1;
  struct ib_fetch *f = xmalloc (sizeof *f);
  f->r = r;
  f->store = store;
  f->repo = xstrdup (repo);
  f->scope = registry_pull_scope (repo);
  f->shown = xstrdup (shown ? shown : repo);
  f->n = n;
  f->jobs = xmalloc ((n ? n : 1) * sizeof *f->jobs);
  f->stall_s = ib_regconf_net_limit (IB_NET_STALL);
  f->progress_s = ib_regconf_net_limit (IB_NET_PROGRESS);
  f->progress_ms = http_now_ms ();
  f->progress = progress;
  f->unpacking = unpacking;
  for (size_t i = 0; i < n; i++)
    {
      fetch_job_t *j = &f->jobs[i];
      char id[13];
      ib_progress_short_id (blobs[i].digest, id);
      j->item = ib_progress_add (progress, id, "Downloading", blobs[i].size > 0 ? blobs[i].size : -1);
      j->f = f;
      j->fd = -1;
      memcpy (j->desc.digest, blobs[i].digest, IB_DIGEST_LEN);
      j->desc.size = blobs[i].size > 0 ? blobs[i].size : -1;
      xfer_init (&j->x, "GET");
      j->x.scope = f->scope;
    }
  pthread_mutex_init (&f->mu, NULL);
  pthread_cond_init (&f->cv, NULL);
  f->multi = curl_multi_init ();
  curl_multi_setopt (f->multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long) FETCH_MAX_ACTIVE);
  int rc = pthread_create (&f->thread, NULL, fetch_loop, f);
  if (rc != 0)
    {
      ib_fetch_free (f);
      return ib_error_sys (err, rc, "start the download thread");
    }
  f->thread_live = true;
  *out = f;
  return 0;
}

ssize_t
ib_fetch_read (ib_fetch_t *f, size_t i, ib_fetch_cursor_t *cur, void *buf, size_t len,
               ib_error_t *err)
{
  fetch_job_t *j = &f->jobs[i];
  pthread_mutex_lock (&f->mu);
  for (;;)
    {
      if (j->state == JOB_FAILED)
        {
          int st = j->err ? j->err->status : EIO;
          ib_error_set (err, st ? st : EIO, "%s", j->err ? j->err->msg : "download failed");
          pthread_mutex_unlock (&f->mu);
          return -1;
        }
      if (cur->started && cur->generation != j->generation)
        {
          pthread_mutex_unlock (&f->mu);
          return ib_error_set (err, ESTALE, "blob %s: the download started over", j->desc.digest);
        }
      if (j->fd >= 0 && cur->pos < j->published)
        break;
      if (j->state == JOB_DONE || (f->finished && j->state != JOB_FAILED))
        {
          pthread_mutex_unlock (&f->mu);
          if (j->state != JOB_DONE)
            return ib_error_set (err, ECANCELED, "blob %s: download cancelled", j->desc.digest);
          return 0;
        }
      pthread_cond_wait (&f->cv, &f->mu);
    }
  if (!cur->started)
    {
      cur->started = true;
      cur->generation = j->generation;
    }
  uint64_t avail = j->published - cur->pos;
  size_t want = len < avail ? len : (size_t) avail;
  int fd = j->fd;
  unsigned gen = j->generation;
  pthread_mutex_unlock (&f->mu);
  ssize_t n;
  do
    n = pread (fd, buf, want, (off_t) cur->pos);
  while (n < 0 && errno == EINTR);
  if (n < 0)
    return ib_error_sys (err, errno, "blob %s: read", j->desc.digest);
  pthread_mutex_lock (&f->mu);
  bool stale = j->generation != gen;
  pthread_mutex_unlock (&f->mu);
  if (stale)
    return ib_error_set (err, ESTALE, "blob %s: the download started over", j->desc.digest);
  cur->pos += (uint64_t) n;
  return n;
}

int
ib_fetch_wait (ib_fetch_t *f, ib_error_t *err)
{
  pthread_mutex_lock (&f->mu);
  while (!f->finished)
    pthread_cond_wait (&f->cv, &f->mu);
  pthread_mutex_unlock (&f->mu);
  for (size_t i = 0; i < f->n; i++)
    if (f->jobs[i].state == JOB_FAILED)
      {
        *err = f->jobs[i].err;
        f->jobs[i].err = NULL;
        return -1;
      }
    else if (f->jobs[i].state != JOB_DONE)
      return ib_error_set (err, ECANCELED, "blob %s: download cancelled", f->jobs[i].desc.digest);
  return 0;
}

void
ib_fetch_free (ib_fetch_t *f)
{
  if (f == NULL)
    return;
  if (f->thread_live)
    {
      pthread_mutex_lock (&f->mu);
      f->cancel = true;
      pthread_mutex_unlock (&f->mu);
      curl_multi_wakeup (f->multi);
      pthread_join (f->thread, NULL);
    }
  for (size_t i = 0; i < f->n; i++)
    {
      fetch_job_t *j = &f->jobs[i];
      job_release_easy (j);
      if (j->fd >= 0)
        close (j->fd); /* releases the partial file's lock */
      free (j->path);
      free (j->url);
      free (j->last_error);
      ib_sha256_free (j->x.sink_hash);
      xfer_free (&j->x);
      ib_error_free (&j->err);
    }
  if (f->multi)
    curl_multi_cleanup (f->multi);
  pthread_mutex_destroy (&f->mu);
  pthread_cond_destroy (&f->cv);
  free (f->jobs);
  free (f->repo);
  free (f->scope);
  free (f->shown);
  free (f);
}
