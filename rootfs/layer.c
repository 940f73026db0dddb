/* rootfs/layer.c — what a build step changed, written as a reproducible
 * layer (image-spec layer.md "Representing Changes").
 *
 * A scan is a sorted array of the entries under the rootfs.  The diff scans
 * again, merges the two sorted arrays and writes the changed entries, their
 * parent directories and ".wh." whiteouts, sorted by path, as a PAX tar.
 * The tar bytes go through one callback that hashes them (diff_id) and
 * hands them to the compressor (rootfs/pgzip.h for gzip, libzstd); the
 * compressed bytes are hashed (digest) and written out: a single pass.
 */
#include "rootfs/layer.h"
#include "rootfs/owner.h"
#include "rootfs/pgzip.h"
#include "rootfs/rootfs_int.h"
#include "rootfs/userns.h"
#include "common/util.h"
#include "oci/manifest.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <zstd.h>

#define SINK_BUF_SIZE (256 * 1024)

/* ---------------------------------------------------------------------- */
/* Compression settings.                                                  */

int
ib_compression_parse (const char *s, ib_compression_t *out)
{
  if (strcmp (s, "gzip") == 0)
    *out = IB_COMPRESSION_GZIP;
  else if (strcmp (s, "zstd") == 0)
    *out = IB_COMPRESSION_ZSTD;
  else if (strcmp (s, "none") == 0 || strcmp (s, "uncompressed") == 0)
    *out = IB_COMPRESSION_NONE;
  else
    {
      errno = EINVAL;
      return -1;
    }
  return 0;
}

const char *
ib_compression_media_type (ib_compression_t c)
{
  switch (c)
    {
    case IB_COMPRESSION_ZSTD: return IB_MT_OCI_LAYER_ZSTD;
    case IB_COMPRESSION_NONE: return IB_MT_OCI_LAYER;
    case IB_COMPRESSION_GZIP: break;
    }
  return IB_MT_OCI_LAYER_GZIP;
}

bool
ib_compression_level_ok (ib_compression_t c, int level)
{
  if (level == -1)
    return true;
  switch (c)
    {
    case IB_COMPRESSION_GZIP: return level >= 0 && level <= 9;
    case IB_COMPRESSION_ZSTD: return level >= 1 && level <= 19;
    case IB_COMPRESSION_NONE: break;
    }
  return false;
}

/* ---------------------------------------------------------------------- */
/* Output: tar bytes -> sha256 (diff_id) + compressor -> sha256 (digest) + fd. */

enum engine
{
  ENGINE_NONE,
  ENGINE_GZIP, /* rootfs/pgzip.c */
  ENGINE_ZSTD,
};

struct sink
{
  int fd;
  enum engine engine;
  ib_pgz_t *pgz;
  ZSTD_CCtx *zc;
  ib_sha256_t *tar_hash, *gz_hash;
  uint64_t gz_size;
  unsigned char *out;      /* SINK_BUF_SIZE bytes of compressed output (zstd) */
  size_t out_len;
  int status;
  char *msg;
};

static int
sink_fail (struct sink *s, int status, char *msg)
{
  s->status = status;
  free (s->msg);
  s->msg = msg;
  return -1;
}

/* Hash and write out[0..n). */
static int
sink_emit (struct sink *s, const unsigned char *p, size_t n)
{
  /* uncompressed: the blob is the tar, whose hash the producer computes */
  if (s->engine != ENGINE_NONE)
    ib_sha256_update (s->gz_hash, p, n);
  s->gz_size += n;
  while (n > 0)
    {
      ssize_t w = write (s->fd, p, n);
      if (w < 0 && errno == EINTR)
        continue;
      if (w < 0)
        return sink_fail (s, errno, xstrdup (strerror (errno)));
      p += w;
      n -= (size_t) w;
    }
  return 0;
}

static int
sink_emit_cb (void *ud, const unsigned char *p, size_t n)
{
  return sink_emit (ud, p, n);
}

static int
sink_drain (struct sink *s)
{
  int r = sink_emit (s, s->out, s->out_len);
  s->out_len = 0;
  return r;
}

static int
gzip_step (struct sink *s, const void *data, size_t len, bool finish)
{
  ib_error_t e = NULL;
  int r = len > 0 ? ib_pgz_write (s->pgz, data, len, &e) : 0;
  if (r == 0 && finish)
    r = ib_pgz_finish (s->pgz, &e);
  if (r < 0 && s->status == 0) /* not the output's own failure */
    sink_fail (s, e ? e->status : EIO, xstrdup (e ? e->msg : "gzip failed"));
  ib_error_free (&e);
  return r;
}

static int
zstd_step (struct sink *s, const void *data, size_t len, bool finish)
{
  ZSTD_inBuffer in = { data, len, 0 };
  for (;;)
    {
      ZSTD_outBuffer out = { s->out, SINK_BUF_SIZE, s->out_len };
      size_t r = ZSTD_compressStream2 (s->zc, &out, &in, finish ? ZSTD_e_end : ZSTD_e_continue);
      if (ZSTD_isError (r))
        return sink_fail (s, EIO, xasprintf ("zstd: %s", ZSTD_getErrorName (r)));
      s->out_len = out.pos;
      if (s->out_len == SINK_BUF_SIZE && sink_drain (s) < 0)
        return -1;
      if (finish ? r == 0 : in.pos == in.size)
        return 0;
    }
}

/* Feed tar bytes to the compressor; finish: end the stream and flush it. */
static int
sink_push (struct sink *s, const void *data, size_t len, bool finish)
{
  int r = 0;
  switch (s->engine)
    {
    case ENGINE_NONE:
      if (len > 0)
        {
          ib_sha256_update (s->tar_hash, data, len);
          r = sink_emit (s, data, len);
        }
      break;
    case ENGINE_GZIP: r = gzip_step (s, data, len, finish); break;
    case ENGINE_ZSTD: r = zstd_step (s, data, len, finish); break;
    }
  if (r == 0 && finish && s->out_len > 0)
    r = sink_drain (s);
  return r;
}

/* The compressor runs in a thread of its own, fed PIPE_SLOTS buffers of
 * PIPE_CHUNK tar bytes: the tree walk, file reads and the diff_id hash on
 * one core; the blob hash and the writes on another, with deflate on
 * rootfs/pgzip.c's worker threads (zstd: libzstd's) beside them. */
#define PIPE_CHUNK (1 << 20)
#define PIPE_SLOTS 4

struct pipe
{
  struct sink *s;
  pthread_t th;
  bool started;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  unsigned char *buf[PIPE_SLOTS];
  size_t len[PIPE_SLOTS];
  size_t head, count;  /* filled slots, oldest first (consumer's side) */
  size_t tail;         /* slot the producer fills (producer's side) */
  bool closing;        /* producer done: finish the stream after the last slot */
  bool failed;         /* consumer failed: s->status and s->msg say why */
  bool finished;       /* pipe_finish was called */
  bool sink_failed;    /* producer's side: a commit failed, the rest is swallowed */
};

static void *
pipe_main (void *arg)
{
  struct pipe *p = arg;
  pthread_mutex_lock (&p->mu);
  for (;;)
    {
      while (p->count == 0 && !p->closing)
        pthread_cond_wait (&p->cv, &p->mu);
      if (p->count == 0)
        break;
      size_t i = p->head;
      bool failed = p->failed;
      pthread_mutex_unlock (&p->mu);
      bool ok = failed || sink_push (p->s, p->buf[i], p->len[i], false) == 0;
      pthread_mutex_lock (&p->mu);
      p->failed |= !ok;
      p->head = (p->head + 1) % PIPE_SLOTS;
      p->count--;
      pthread_cond_broadcast (&p->cv);
    }
  bool failed = p->failed;
  pthread_mutex_unlock (&p->mu);
  if (!failed && sink_push (p->s, NULL, 0, true) < 0)
    {
      pthread_mutex_lock (&p->mu);
      p->failed = true;
      pthread_mutex_unlock (&p->mu);
    }
  return NULL;
}

/* Hand the filled slot over; wait for a free one.  -1 when the consumer
 * failed. */
static int
pipe_commit (struct pipe *p)
{
  pthread_mutex_lock (&p->mu);
  p->count++;
  p->tail = (p->tail + 1) % PIPE_SLOTS;
  pthread_cond_broadcast (&p->cv);
  while (p->count == PIPE_SLOTS && !p->failed)
    pthread_cond_wait (&p->cv, &p->mu);
  bool failed = p->failed;
  pthread_mutex_unlock (&p->mu);
  p->len[p->tail] = 0;
  return failed ? -1 : 0;
}

static int
pipe_start (struct pipe *p, struct sink *s, ib_error_t *err)
{
  memset (p, 0, sizeof *p);
  p->s = s;
  for (size_t i = 0; i < PIPE_SLOTS; i++)
    p->buf[i] = xmalloc (PIPE_CHUNK);
  pthread_mutex_init (&p->mu, NULL);
  pthread_cond_init (&p->cv, NULL);
  int e = pthread_create (&p->th, NULL, pipe_main, p);
  if (e != 0)
    return ib_error_sys (err, e, "start the compressor thread");
  p->started = true;
  return 0;
}

/* Finish the stream (when the thread runs); -1 when the consumer failed.
 * Later writes into the pipe fail. */
static int
pipe_finish (struct pipe *p)
{
  bool failed = !p->started && p->failed;
  p->finished = true;
  if (p->started)
    {
      pthread_mutex_lock (&p->mu);
      if (p->len[p->tail] > 0)
        {
          p->count++;
          p->tail = (p->tail + 1) % PIPE_SLOTS;
        }
      p->closing = true;
      pthread_cond_broadcast (&p->cv);
      pthread_mutex_unlock (&p->mu);
      pthread_join (p->th, NULL);
      failed = p->failed;
      p->started = false;
      pthread_mutex_destroy (&p->mu);
      pthread_cond_destroy (&p->cv);
    }
  return failed ? -1 : 0;
}

static void
pipe_free (struct pipe *p)
{
  pipe_finish (p);
  for (size_t i = 0; i < PIPE_SLOTS; i++)
    {
      free (p->buf[i]);
      p->buf[i] = NULL;
    }
}

static la_ssize_t
sink_write_cb (struct archive *a, void *ud, const void *buf, size_t len)
{
  struct pipe *p = ud;
  if (p->finished)
    {
      archive_set_error (a, EIO, "the layer stream is closed");
      return -1;
    }
  /* A failed output is not reported to libarchive (-1 would put the
   * archive in its FATAL state, and libarchive 3.6's archive_write_free
   * then never frees the client buffer: 10 KiB per failed layer, found by
   * LeakSanitizer).  The bytes are swallowed, write_items stops at the next
   * entry (sink_failed), and pipe_finish reports the error. */
  if (p->sink_failed)
    return (la_ssize_t) len;
  /* the diff_id hash: here, beside the compressor's thread; for an
   * uncompressed layer on that thread, which only writes */
  if (p->s->engine != ENGINE_NONE)
    ib_sha256_update (p->s->tar_hash, buf, len);
  const unsigned char *b = buf;
  size_t left = len;
  while (left > 0)
    {
      size_t t = p->tail, n = PIPE_CHUNK - p->len[t];
      if (n > left)
        n = left;
      memcpy (p->buf[t] + p->len[t], b, n);
      p->len[t] += n;
      b += n;
      left -= n;
      if (p->len[t] == PIPE_CHUNK && pipe_commit (p) < 0)
        {
          p->sink_failed = true;
          return (la_ssize_t) len;
        }
    }
  return (la_ssize_t) len;
}

static int
online_cpus (void)
{
  long n = sysconf (_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > 64 ? 64 : (int) n;
}

static int
sink_open (struct sink *s, const char *path, const ib_layer_opts_t *o, ib_error_t *err)
{
  memset (s, 0, sizeof *s);
  s->fd = open (path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (s->fd < 0)
    return ib_error_sys (err, errno, "create %s", path);
  s->out = xmalloc (SINK_BUF_SIZE);
  s->tar_hash = ib_sha256_new ();
  s->gz_hash = ib_sha256_new ();
  int level = o->level;
  switch (o->compression)
    {
    case IB_COMPRESSION_NONE:
      s->engine = ENGINE_NONE;
      break;
    case IB_COMPRESSION_GZIP:
      s->engine = ENGINE_GZIP;
      s->pgz = ib_pgz_new (level, o->threads, sink_emit_cb, s);
      break;
    case IB_COMPRESSION_ZSTD:
      s->engine = ENGINE_ZSTD;
      s->zc = ZSTD_createCCtx ();
      if (s->zc == NULL)
        return ib_error_set (err, ENOMEM, "ZSTD_createCCtx failed");
      ZSTD_CCtx_setParameter (s->zc, ZSTD_c_compressionLevel, level < 0 ? 3 : level);
      ZSTD_CCtx_setParameter (s->zc, ZSTD_c_checksumFlag, 1);
      /* a libzstd built without threads refuses nbWorkers: single-threaded
       * then, which gives other bytes; say so */
      if (ZSTD_isError (ZSTD_CCtx_setParameter (s->zc, ZSTD_c_nbWorkers,
                                                o->threads > 0 ? o->threads : online_cpus ())))
        ib_warn ("libzstd has no multithreading: zstd layers are compressed on one thread "
                 "and their bytes differ from multithreaded builds");
      break;
    }
  return 0;
}

static void
sink_close (struct sink *s)
{
  if (s->fd >= 0)
    close (s->fd);
  s->fd = -1;
  ib_pgz_free (s->pgz);
  s->pgz = NULL;
  ZSTD_freeCCtx (s->zc);
  s->zc = NULL;
  ib_sha256_free (s->tar_hash);
  ib_sha256_free (s->gz_hash);
  s->tar_hash = s->gz_hash = NULL;
  free (s->out);
  s->out = NULL;
  free (s->msg);
  s->msg = NULL;
}

/* ---------------------------------------------------------------------- */
/* The diff.                                                              */

struct item
{
  const char *path;          /* sort key */
  const struct scan_ent *e;  /* NULL for a whiteout */
  const char *link_to;       /* hardlink entry to this path */
  char *own;                 /* whiteout path, owned */
};

static int
cmp_item (const void *a, const void *b)
{
  return strcmp (((const struct item *) a)->path, ((const struct item *) b)->path);
}

static bool
changed (const struct scan_ent *b, const struct scan_ent *c)
{
  if ((b->mode & S_IFMT) != (c->mode & S_IFMT))
    return true;
  if (b->mode != c->mode || b->uid != c->uid || b->gid != c->gid || b->mtime_ns != c->mtime_ns)
    return true;
  if (S_ISDIR (c->mode))
    return false;
  if (b->size != c->size || b->ctime_ns != c->ctime_ns || b->ino != c->ino || b->dev != c->dev
      || b->rdev != c->rdev)
    return true;
  if (S_ISLNK (c->mode) && strcmp (b->link ? b->link : "", c->link ? c->link : "") != 0)
    return true;
  return false;
}

/* Parent of `path` ("" at the top); caller frees. */
static char *
parent_of (const char *path)
{
  const char *slash = strrchr (path, '/');
  return slash ? xstrndup (path, (size_t) (slash - path)) : xstrdup ("");
}

/* Mark the ancestors of `path` in `cur` for emission. */
static void
mark_parents (const ib_fs_scan_t *cur, bool *emit, const char *path)
{
  cleanup_free char *p = parent_of (path);
  while (*p)
    {
      struct scan_ent *k = rfs_scan_find (cur, p);
      if (k == NULL)
        break;
      size_t idx = (size_t) (k - cur->ents);
      if (emit[idx])
        break; /* its ancestors were marked when it was */
      emit[idx] = true;
      char *slash = strrchr (p, '/');
      if (slash)
        *slash = '\0';
      else
        *p = '\0';
    }
}

static int
cmp_inode (const void *a, const void *b)
{
  const struct scan_ent *x = *(const struct scan_ent *const *) a;
  const struct scan_ent *y = *(const struct scan_ent *const *) b;
  if (x->dev != y->dev)
    return x->dev < y->dev ? -1 : 1;
  if (x->ino != y->ino)
    return x->ino < y->ino ? -1 : 1;
  return strcmp (x->path, y->path);
}

/* Open `path` beneath rootfd, refusing symlinks on the way (the scan saw
 * real directories there). */
static int
open_beneath (int rootfd, const char *path)
{
  struct open_how how = { 0 };
  how.flags = O_RDONLY | O_NOFOLLOW | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  long fd;
  do
    fd = syscall (SYS_openat2, rootfd, path, &how, sizeof how);
  while (fd < 0 && (errno == EAGAIN || errno == EINTR));
  if (fd >= 0 || errno != ENOSYS)
    return (int) fd;
  /* No openat2: component by component, O_NOFOLLOW. */
  int cur = dup (rootfd);
  const char *p = path;
  while (cur >= 0)
    {
      const char *slash = strchr (p, '/');
      if (slash == NULL)
        {
          int r = openat (cur, p, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
          int e = errno;
          close (cur);
          errno = e;
          return r;
        }
      cleanup_free char *comp = xstrndup (p, (size_t) (slash - p));
      int next = openat (cur, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      int e = errno;
      close (cur);
      errno = e;
      cur = next;
      p = slash + 1;
    }
  return -1;
}

static int
write_file_data (struct archive *a, int rootfd, const struct scan_ent *e, ib_error_t *err)
{
  cleanup_close int fd = open_beneath (rootfd, e->path);
  if (fd < 0 && errno == EACCES)
    {
      /* rootless: a mode 0000 file of ours (e.g. /etc/shadow) */
      cleanup_free char *dir = parent_of (e->path);
      const char *base = strrchr (e->path, '/') ? strrchr (e->path, '/') + 1 : e->path;
      cleanup_close int dfd = *dir ? open_beneath (rootfd, dir) : dup (rootfd);
      struct stat st;
      if (dfd >= 0 && fstatat (dfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG (st.st_mode)
          && st.st_uid == geteuid () && fchmodat (dfd, base, (st.st_mode & 07777) | 0400, 0) == 0)
        {
          fd = openat (dfd, base, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
          int saved = errno;
          fchmodat (dfd, base, st.st_mode & 07777, 0);
          errno = saved;
        }
    }
  if (fd < 0)
    return ib_error_sys (err, errno, "open /%s", e->path);
  cleanup_free char *buf = xmalloc (1 << 17);
  uint64_t done = 0;
  while (done < e->size)
    {
      size_t want = e->size - done < (1 << 17) ? (size_t) (e->size - done) : (1 << 17);
      ssize_t n = read (fd, buf, want);
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        return ib_error_sys (err, errno, "read /%s", e->path);
      if (n == 0)
        return ib_error_set (err, EIO, "/%s shrank while the layer was written", e->path);
      if (archive_write_data (a, buf, (size_t) n) != n)
        return ib_error_set (err, archive_errno (a) > 0 ? archive_errno (a) : EIO,
                             "write /%s: %s", e->path, archive_error_string (a));
      done += (uint64_t) n;
    }
  return 0;
}

static int
cmp_cstr (const void *a, const void *b)
{
  return strcmp (*(const char *const *) a, *(const char *const *) b);
}

/* The xattrs of `e` a layer carries (user.*, security.capability), sorted
 * by name.  Read by path: nothing runs in the rootfs while a layer is
 * written, and the scan saw real directories on the way. */
static int
add_xattrs (struct archive_entry *ae, const char *rootfs, const struct scan_ent *e,
            ib_error_t *err)
{
  cleanup_free char *path = xasprintf ("%s/%s", rootfs, e->path);
  char list[4096];
  ssize_t n = llistxattr (path, list, sizeof list);
  if (n < 0 && (errno == ENOTSUP || errno == ENODATA))
    return 0;
  if (n < 0 && errno == ERANGE)
    return ib_error_set (err, E2BIG, "/%s: more xattr names than a layer entry takes", e->path);
  if (n < 0)
    return ib_error_sys (err, errno, "/%s: list xattrs", e->path);
  const char *names[256];
  size_t k = 0;
  for (const char *p = list; p < list + n && k < 256; p += strlen (p) + 1)
    if ((ib_str_has_prefix (p, "user.") && !ib_owner_is_xattr (p))
        || strcmp (p, "security.capability") == 0)
      names[k++] = p; /* (the owner record is the header's uid/gid) */
  if (k > 1)
    qsort (names, k, sizeof *names, cmp_cstr);
  /* libarchive writes an entry's xattrs in the reverse order of adding */
  for (size_t i = k; i-- > 0;)
    {
      char val[65536];
      ssize_t vn = lgetxattr (path, names[i], val, sizeof val);
      if (vn < 0 && errno == ENODATA)
        continue;
      if (vn < 0)
        return ib_error_sys (err, errno, "/%s: read xattr %s", e->path, names[i]);
      archive_entry_xattr_add_entry (ae, names[i], val, (size_t) vn);
    }
  return 0;
}

static int
write_items (struct archive *a, const char *rootfs, int rootfd, struct item *items, size_t n,
             int64_t sde, const bool *stop, ib_error_t *err)
{
  for (size_t i = 0; i < n; i++)
    {
      if (*stop)
        return ib_error_set (err, EIO, "the layer's output failed");
      struct item *it = &items[i];
      struct archive_entry *ae = archive_entry_new ();
      if (ae == NULL)
        abort ();
      const struct scan_ent *e = it->e;
      if (e == NULL)
        {
          archive_entry_set_pathname (ae, it->path);
          archive_entry_set_filetype (ae, AE_IFREG);
          archive_entry_set_perm (ae, 0);
          archive_entry_set_size (ae, 0);
          archive_entry_set_mtime (ae, sde >= 0 ? sde : 0, 0);
        }
      else
        {
          int64_t mtime = e->mtime_ns / 1000000000;
          if (e->mtime_ns < 0 && e->mtime_ns % 1000000000)
            mtime--;
          if (sde >= 0 && mtime > sde)
            mtime = sde;
          if (S_ISDIR (e->mode))
            {
              cleanup_free char *p = xasprintf ("%s/", e->path);
              archive_entry_set_pathname (ae, p);
            }
          else
            archive_entry_set_pathname (ae, e->path);
          archive_entry_set_filetype (ae, e->mode & S_IFMT);
          archive_entry_set_perm (ae, e->mode & 07777);
          archive_entry_set_uid (ae, e->uid);
          archive_entry_set_gid (ae, e->gid);
          archive_entry_set_mtime (ae, mtime, 0);
          archive_entry_set_size (ae, 0);
          if (it->link_to)
            archive_entry_set_hardlink (ae, it->link_to);
          else if (S_ISREG (e->mode))
            archive_entry_set_size (ae, (la_int64_t) e->size);
          else if (S_ISLNK (e->mode))
            archive_entry_set_symlink (ae, e->link);
          else if (S_ISCHR (e->mode) || S_ISBLK (e->mode))
            {
              archive_entry_set_rdevmajor (ae, major (e->rdev));
              archive_entry_set_rdevminor (ae, minor (e->rdev));
            }
          if (it->link_to == NULL && !S_ISLNK (e->mode) && add_xattrs (ae, rootfs, e, err) < 0)
            {
              archive_entry_free (ae);
              return -1;
            }
        }
      int r = archive_write_header (a, ae);
      archive_entry_free (ae);
      if (r == ARCHIVE_WARN)
        ib_debug ("entry %s: %s", it->path, archive_error_string (a));
      else if (r < ARCHIVE_OK)
        return ib_error_set (err, archive_errno (a) > 0 ? archive_errno (a) : EIO, "entry %s: %s",
                             it->path, archive_error_string (a));
      if (e && S_ISREG (e->mode) && it->link_to == NULL && e->size > 0
          && write_file_data (a, rootfd, e, err) < 0)
        return -1;
    }
  return 0;
}

/* ib_layer_opts_t.match_tree: give every entry written the mtime its tar
 * header got (whole seconds, clamped to `sde`), so that the tree the next
 * step sees is the one an unpack of the layer gives (a tool that compares
 * mtimes, Python's .pyc check, make, then decides alike on every node).
 * Best effort: a file that cannot be touched keeps its time. */
static void
match_tree_times (int rootfd, const struct item *items, size_t n, int64_t sde)
{
  for (size_t i = 0; i < n; i++)
    {
      const struct scan_ent *e = items[i].e;
      if (e == NULL || items[i].link_to)
        continue;
      int64_t mtime = e->mtime_ns / 1000000000;
      if (e->mtime_ns < 0 && e->mtime_ns % 1000000000)
        mtime--;
      if (mtime > sde)
        mtime = sde;
      if (mtime * 1000000000 == e->mtime_ns)
        continue;
      struct timespec t[2] = { { .tv_nsec = UTIME_OMIT }, { .tv_sec = (time_t) mtime } };
      if (utimensat (rootfd, e->path, t, AT_SYMLINK_NOFOLLOW) < 0)
        ib_debug ("%s: mtime not matched to the layer: %s", e->path, strerror (errno));
    }
}

static int
write_diff (const char *rootfs, const ib_fs_scan_t *before, const ib_fs_scan_t *cur,
            char *const *ex, const char *out_path, const ib_layer_opts_t *o, ib_layer_result_t *res,
            ib_error_t *err)
{
  cleanup_free bool *emit = xmalloc ((cur->n + 1) * sizeof *emit);
  size_t n_items = 0, cap_items = 64;
  struct item *items = xmalloc (cap_items * sizeof *items);
  int ret = -1;
  struct archive *a = NULL;
  struct sink s = { .fd = -1 };
  struct pipe pp = { 0 };

  /* 1. changed and added entries; whiteouts for the topmost deleted paths */
  size_t i = 0, j = 0;
  while (i < before->n || j < cur->n)
    {
      const struct scan_ent *b = i < before->n ? &before->ents[i] : NULL;
      const struct scan_ent *c = j < cur->n ? &cur->ents[j] : NULL;
      if (b && rfs_excluded (ex, b->path))
        {
          i++;
          continue;
        }
      int cmp = b == NULL ? 1 : c == NULL ? -1 : strcmp (b->path, c->path);
      if (cmp == 0)
        {
          emit[j] = changed (b, c);
          i++, j++;
        }
      else if (cmp > 0)
        emit[j++] = true;
      else
        {
          i++;
          cleanup_free char *parent = parent_of (b->path);
          const struct scan_ent *p = *parent ? rfs_scan_find (cur, parent) : NULL;
          if (*parent && (p == NULL || !S_ISDIR (p->mode)))
            continue; /* the parent went away or was replaced: covered there */
          const char *base = *parent ? b->path + strlen (parent) + 1 : b->path;
          if (n_items == cap_items)
            items = xrealloc (items, (cap_items *= 2) * sizeof *items);
          struct item *it = &items[n_items++];
          memset (it, 0, sizeof *it);
          it->own = *parent ? xasprintf ("%s/.wh.%s", parent, base) : xasprintf (".wh.%s", base);
          it->path = it->own;
        }
    }

  /* 2. parents of everything emitted (sorted order: parents come first) */
  for (size_t k = 0; k < cur->n; k++)
    if (emit[k])
      mark_parents (cur, emit, cur->ents[k].path);
  for (size_t k = 0; k < n_items; k++)
    mark_parents (cur, emit, items[k].path);

  /* 3. hardlinks among emitted entries: the first path in sorted order
   * carries the data, the others link to it */
  size_t n_multi = 0;
  cleanup_free const struct scan_ent **multi = xmalloc ((cur->n + 1) * sizeof *multi);
  for (size_t k = 0; k < cur->n; k++)
    if (emit[k] && !S_ISDIR (cur->ents[k].mode) && cur->ents[k].nlink > 1)
      multi[n_multi++] = &cur->ents[k];
  if (n_multi > 1)
    qsort (multi, n_multi, sizeof *multi, cmp_inode);
  cleanup_free const char **link_to = xmalloc ((cur->n + 1) * sizeof *link_to);
  for (size_t k = 1; k < n_multi; k++)
    {
      size_t first = k - 1;
      while (k < n_multi && multi[k]->dev == multi[first]->dev && multi[k]->ino == multi[first]->ino)
        {
          link_to[multi[k] - cur->ents] = multi[first]->path;
          k++;
        }
    }

  for (size_t k = 0; k < cur->n; k++)
    if (emit[k])
      {
        if (n_items == cap_items)
          items = xrealloc (items, (cap_items *= 2) * sizeof *items);
        struct item *it = &items[n_items++];
        memset (it, 0, sizeof *it);
        it->path = cur->ents[k].path;
        it->e = &cur->ents[k];
        it->link_to = link_to[k];
      }
  if (n_items > 1)
    qsort (items, n_items, sizeof *items, cmp_item);

  /* a large layer as its uncompressed tar, when the caller compresses later */
  ib_layer_opts_t raw_opts;
  if (o->raw_above > 0 && o->compression != IB_COMPRESSION_NONE)
    {
      uint64_t est = 1024; /* the end-of-archive blocks */
      for (size_t k = 0; k < n_items; k++)
        {
          est += 512;
          if (items[k].e && S_ISREG (items[k].e->mode) && items[k].link_to == NULL)
            est += (items[k].e->size + 511) / 512 * 512;
        }
      if (est >= o->raw_above && (o->raw_start == NULL || o->raw_start (o->raw_ud, est)))
        {
          raw_opts = *o;
          raw_opts.compression = IB_COMPRESSION_NONE;
          raw_opts.level = -1;
          o = &raw_opts;
          res->raw = true;
        }
    }

  /* 4. write */
  cleanup_close int rootfd = open (rootfs, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (rootfd < 0)
    {
      ib_error_sys (err, errno, "open %s", rootfs);
      goto out;
    }
  if (sink_open (&s, out_path, o, err) < 0 || pipe_start (&pp, &s, err) < 0)
    goto out;
  a = archive_write_new ();
  if (a == NULL)
    abort ();
  /* Names are written as the bytes on disk: imgbuild never calls
   * setlocale, so libarchive converts from the "C" locale, which fails for
   * any byte >= 0x80, and it then writes that entry's path (or link
   * target) as a pax record with hdrcharset=BINARY.  Plain ASCII entries
   * get plain ustar headers.  (The "hdrcharset=BINARY" format option would
   * put a pax header on every entry.) */
  if (archive_write_set_format_pax_restricted (a) != ARCHIVE_OK
      /* xattrs as SCHILY.xattr records only, as Go's archive/tar (containerd,
       * umoci, buildah) writes and reads them */
      || archive_write_set_format_option (a, "pax", "xattrheader", "SCHILY") != ARCHIVE_OK
      || archive_write_add_filter_none (a) != ARCHIVE_OK
      || archive_write_set_bytes_per_block (a, 10240) != ARCHIVE_OK
      || archive_write_open2 (a, &pp, NULL, sink_write_cb, NULL, NULL) != ARCHIVE_OK)
    {
      ib_error_set (err, EIO, "write %s: %s", out_path, archive_error_string (a));
      goto out;
    }
  if (write_items (a, rootfs, rootfd, items, n_items, o->sde, &pp.sink_failed, err) < 0)
    {
      /* the output's failure (a full disk) is the one to report, not the
       * entry that was being written when it surfaced */
      if (pipe_finish (&pp) < 0 && s.msg)
        {
          ib_error_free (err);
          ib_error_set (err, s.status, "write %s: %s", out_path, s.msg);
        }
      goto out;
    }
  if (archive_write_close (a) != ARCHIVE_OK)
    {
      pipe_finish (&pp);
      ib_error_set (err, s.status ? s.status : EIO, "write %s: %s", out_path,
                    s.msg ? s.msg : archive_error_string (a));
      goto out;
    }
  if (pipe_finish (&pp) < 0)
    {
      ib_error_set (err, s.status, "write %s: %s", out_path, s.msg);
      goto out;
    }
  if (o->sde >= 0 && o->match_tree)
    match_tree_times (rootfd, items, n_items, o->sde);
  ib_sha256_final (s.tar_hash, res->diff_id);
  ib_sha256_final (s.gz_hash, res->digest);
  if (s.engine == ENGINE_NONE)
    memcpy (res->digest, res->diff_id, IB_DIGEST_LEN);
  s.tar_hash = s.gz_hash = NULL;
  res->size = s.gz_size;
  res->entries = n_items;
  ret = 0;
out:
  if (a)
    archive_write_free (a);
  pipe_free (&pp); /* after an error: stop the thread before the sink goes */
  sink_close (&s);
  for (size_t k = 0; k < n_items; k++)
    free (items[k].own);
  free (items);
  return ret;
}

int
ib_layer_write_diff_scans (const char *rootfs, const ib_fs_scan_t *before,
                           const ib_fs_scan_t *cur, char *const *exclude, const char *out_path,
                           const ib_layer_opts_t *opts, ib_layer_result_t *res, ib_error_t *err)
{
  static const ib_layer_opts_t defaults = { .compression = IB_COMPRESSION_GZIP, .level = -1,
                                            .sde = -1 };
  cleanup_strv char **ex = rfs_normalize_excludes (exclude);
  cleanup_scan ib_fs_scan_t *own = NULL;
  ib_fs_scan_t empty = { 0 };
  memset (res, 0, sizeof *res);
  if (cur == NULL)
    {
      if (rfs_scan_tree (rootfs, ex, before && before->no_dev, &own, err) < 0)
        return ib_error_prefix (err, "write layer %s", out_path);
      cur = own;
    }
  if (write_diff (rootfs, before ? before : &empty, cur, ex, out_path, opts ? opts : &defaults,
                  res, err) < 0)
    return ib_error_prefix (err, "write layer %s of %s", out_path, rootfs);
  return 0;
}

int
ib_layer_write_diff (const char *rootfs, const ib_fs_scan_t *before, char *const *exclude,
                     const char *out_path, const ib_layer_opts_t *opts, ib_layer_result_t *res,
                     ib_error_t *err)
{
  return ib_layer_write_diff_scans (rootfs, before, NULL, exclude, out_path, opts, res, err);
}

/* The tar's final length from the writer (ib_layer_compress_follow):
 * waits up to `ms` for it; 1 when known (*final), 0 not yet, -1 when the
 * writer gave up (the pipe closed without it). */
static int
follow_final (int ctl, int ms, uint64_t *final)
{
  struct pollfd pfd = { .fd = ctl, .events = POLLIN };
  int r = poll (&pfd, 1, ms);
  if (r <= 0)
    return 0;
  unsigned char b[8];
  size_t got = 0;
  while (got < sizeof b)
    {
      ssize_t n = read (ctl, b + got, sizeof b - got);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return -1;
      got += (size_t) n;
    }
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = (v << 8) | b[i];
  *final = v;
  return 1;
}

int
ib_layer_compress_follow (const char *tar_path, int ctl_fd, const char *out_path,
                          const ib_layer_opts_t *opts, char digest[IB_DIGEST_LEN],
                          uint64_t *size, ib_error_t *err)
{
  if (opts->compression == IB_COMPRESSION_NONE)
    return ib_error_set (err, EINVAL, "compress layer %s: no compression asked", tar_path);
  cleanup_close int in = open (tar_path, O_RDONLY | O_CLOEXEC);
  if (in < 0)
    return ib_error_sys (err, errno, "compress layer: open %s", tar_path);
  bool known = ctl_fd < 0;
  uint64_t final = 0;
  if (known)
    {
      struct stat st;
      if (fstat (in, &st) < 0)
        return ib_error_sys (err, errno, "compress layer: stat %s", tar_path);
      final = (uint64_t) st.st_size;
    }
  struct sink s = { .fd = -1 };
  if (sink_open (&s, out_path, opts, err) < 0)
    {
      sink_close (&s);
      return ib_error_prefix (err, "compress layer %s", tar_path);
    }
  /* PIPE_CHUNK pieces, as ib_layer_write_diff's compressor thread gets
   * them (gzip's bytes do not depend on the pieces; libzstd's are kept
   * alike too): the same tar gives the same bytes on either path */
  unsigned char *buf = xmalloc (PIPE_CHUNK);
  int ret = -1;
  uint64_t off = 0;
  size_t len = 0;
  for (;;)
    {
      if (known && off == final)
        break;
      size_t want = PIPE_CHUNK - len;
      if (known && final - off < want)
        want = (size_t) (final - off);
      ssize_t r = pread (in, buf + len, want, (off_t) off);
      if (r < 0 && errno == EINTR)
        continue;
      if (r < 0)
        {
          ib_error_sys (err, errno, "compress layer: read %s", tar_path);
          goto out;
        }
      if (r > 0)
        {
          len += (size_t) r;
          off += (uint64_t) r;
          if (len == PIPE_CHUNK)
            {
              if (sink_push (&s, buf, len, false) < 0)
                goto failed;
              len = 0;
            }
          continue;
        }
      if (known)
        {
          ib_error_set (err, EIO, "compress layer: %s ends at %llu bytes, not %llu", tar_path,
                        (unsigned long long) off, (unsigned long long) final);
          goto out;
        }
      /* at the end of what is written so far: wait for more, or its end */
      int f = follow_final (ctl_fd, 5, &final);
      if (f < 0)
        {
          ib_error_set (err, ECANCELED, "compress layer %s: its writer gave up", tar_path);
          goto out;
        }
      known = f > 0;
    }
  if (len > 0 && sink_push (&s, buf, len, false) < 0)
    goto failed;
  if (sink_push (&s, NULL, 0, true) < 0)
    goto failed;
  ib_sha256_final (s.gz_hash, digest);
  s.gz_hash = NULL;
  *size = s.gz_size;
  ret = 0;
  goto out;
failed:
  ib_error_set (err, s.status ? s.status : EIO, "write %s: %s", out_path,
                s.msg ? s.msg : "failed");
out:
  free (buf);
  sink_close (&s);
  return ret;
}

int
ib_layer_compress (const char *tar_path, const char *out_path, const ib_layer_opts_t *opts,
                   char digest[IB_DIGEST_LEN], uint64_t *size, ib_error_t *err)
{
  return ib_layer_compress_follow (tar_path, -1, out_path, opts, digest, size, err);
}
