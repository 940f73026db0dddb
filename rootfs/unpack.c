/* rootfs/unpack.c — apply image layers beneath a directory (image-spec
 * layer.md), copy trees, keep unpacked snapshots per chain id.
 *
 * The layer blob is decompressed here (ISA-L igzip / libzstd streaming
 * APIs), in a decoder thread, so that the sha256 of the uncompressed tar
 * stream (the diff_id) is computed in the same single pass that feeds
 * libarchive, which only ever sees a plain tar.
 *
 * Every path of an entry is resolved beneath the target with
 * openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS): symlinks planted by
 * earlier entries or layers are followed as the container would see them,
 * i.e. never out of the target.  Where openat2 is missing the same
 * resolution is done in user space, one component at a time with
 * O_NOFOLLOW.  Entries are then created relative to the O_PATH fd of their
 * parent directory, never by path.
 */
#include "rootfs/unpack.h"
#include "common/util.h"
#include "oci/manifest.h"
#include "oci/registry.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/fs.h>
#include <linux/openat2.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <isa-l/igzip_lib.h>
#include <pthread.h>
#include <zstd.h>

#ifndef FICLONE
#define FICLONE _IOW (0x94, 9, int)
#endif

#define DEFAULT_MAX_LAYER_BYTES (64ULL << 30)
#define SRC_BUF_SIZE (256 * 1024)
#define MAX_SYMLINKS 40

static uint64_t max_bytes_override;
static bool openat2_disabled;      /* by ib_unpack_set_openat2 (false) */
static bool openat2_missing;       /* the kernel said ENOSYS */

void
ib_unpack_set_max_bytes (uint64_t max)
{
  max_bytes_override = max;
}

uint64_t
ib_unpack_max_bytes (void)
{
  if (max_bytes_override)
    return max_bytes_override;
  const char *s = getenv ("IMGBUILD_MAX_LAYER_BYTES");
  if (s && *s)
    {
      char *end = NULL;
      errno = 0;
      unsigned long long v = strtoull (s, &end, 10);
      if (errno == 0 && end && *end == '\0' && v > 0)
        return v;
      ib_warn ("IMGBUILD_MAX_LAYER_BYTES=%s is not a positive number of bytes, ignored", s);
    }
  return DEFAULT_MAX_LAYER_BYTES;
}

void
ib_unpack_set_openat2 (bool use)
{
  openat2_disabled = !use;
}

/* ---------------------------------------------------------------------- */
/* A small string-keyed hash map (open addressing, linear probing).        */

typedef struct
{
  char *key;
  void *val;
} hslot_t;

typedef struct
{
  hslot_t *slots;
  size_t cap, n;
} hmap_t;

static uint64_t
hash_str (const char *s)
{
  uint64_t h = 1469598103934665603ULL;
  for (; *s; s++)
    {
      h ^= (unsigned char) *s;
      h *= 1099511628211ULL;
    }
  return h;
}

static hslot_t *
hmap_find (const hmap_t *m, const char *key)
{
  if (m->cap == 0)
    return NULL;
  size_t i = hash_str (key) & (m->cap - 1);
  while (m->slots[i].key)
    {
      if (strcmp (m->slots[i].key, key) == 0)
        return &m->slots[i];
      i = (i + 1) & (m->cap - 1);
    }
  return NULL;
}

static void
hmap_insert_slot (hslot_t *slots, size_t cap, char *key, void *val)
{
  size_t i = hash_str (key) & (cap - 1);
  while (slots[i].key)
    i = (i + 1) & (cap - 1);
  slots[i].key = key;
  slots[i].val = val;
}

static void
hmap_put (hmap_t *m, const char *key, void *val)
{
  hslot_t *s = hmap_find (m, key);
  if (s)
    {
      s->val = val;
      return;
    }
  if ((m->n + 1) * 2 > m->cap)
    {
      size_t cap = m->cap ? m->cap * 2 : 64;
      hslot_t *slots = xmalloc (cap * sizeof *slots);
      for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i].key)
          hmap_insert_slot (slots, cap, m->slots[i].key, m->slots[i].val);
      free (m->slots);
      m->slots = slots;
      m->cap = cap;
    }
  hmap_insert_slot (m->slots, m->cap, xstrdup (key), val);
  m->n++;
}

static void
hmap_free (hmap_t *m, bool free_vals)
{
  for (size_t i = 0; i < m->cap; i++)
    if (m->slots[i].key)
      {
        free (m->slots[i].key);
        if (free_vals)
          free (m->slots[i].val);
      }
  free (m->slots);
  m->slots = NULL;
  m->cap = m->n = 0;
}

/* "dev:ino" of a stat. */
static char *
ino_key (const struct stat *st)
{
  return xasprintf ("%jx:%jx", (uintmax_t) st->st_dev, (uintmax_t) st->st_ino);
}

/* "dev:ino/name": a name inside the directory `dir`. */
static char *
name_key (const struct stat *dir, const char *name)
{
  return xasprintf ("%jx:%jx/%s", (uintmax_t) dir->st_dev, (uintmax_t) dir->st_ino, name);
}

static bool
same_inode (const struct stat *a, const struct stat *b)
{
  return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* ---------------------------------------------------------------------- */
/* Decompressing source: the layer file -> uncompressed tar, hashed.        */

enum src_kind
{
  SRC_TAR,
  SRC_GZIP,
  SRC_ZSTD
};

/* The decoding half of the unpack pipeline.  A worker thread reads the
 * layer's bytes through `read`, decompresses them (gzip with ISA-L's
 * igzip, several times faster than zlib's inflate; zstd with libzstd)
 * and hands the tar stream over in PIPE_BUF_SIZE buffers through a ring of
 * PIPE_NBUF; in the calling thread each buffer is hashed (the diff_id) as
 * it is taken, libarchive parses the tar and the files are written.  Decoding and writing
 * thus run on two cores, and memory stays bounded (PIPE_NBUF MiB). */
#define PIPE_BUF_SIZE (1 << 20)
#define PIPE_NBUF 4

struct src
{
  ib_layer_read_fn read;
  void *ud;
  enum src_kind kind;
  bool kind_known;
  struct inflate_state *gz;
  bool gz_between;       /* a gzip member ended; another may follow */
  ZSTD_DStream *zs;
  size_t zret;           /* last ZSTD_decompressStream result: 0 = frame complete */
  unsigned char *in;
  size_t in_len, in_pos;
  bool in_eof;
  bool end;              /* uncompressed stream finished */
  ib_sha256_t *hash;
  uint64_t total, limit;
  int status;            /* pipeline error: reported in preference to libarchive's */
  char *msg;

  /* The ring between the decoder thread and the tar reader. */
  pthread_t thread;
  bool thread_live;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  unsigned char *buf[PIPE_NBUF];
  size_t len[PIPE_NBUF];
  unsigned head, count;  /* buf[head] is the next (or current) buffer to read */
  bool holding;          /* the reader holds buf[head] */
  bool done;             /* the decoder stopped: end of stream or s->msg */
  bool cancel;           /* the reader gave up: stop decoding */
};

static ssize_t
src_fail (struct src *s, int status, const char *msg)
{
  if (s->msg == NULL)
    {
      s->status = status;
      s->msg = xstrdup (msg);
    }
  return -1;
}

/* Read more input into s->in after what is there (compacting first). */
static int
src_read_more (struct src *s)
{
  if (s->in_pos > 0)
    {
      memmove (s->in, s->in + s->in_pos, s->in_len - s->in_pos);
      s->in_len -= s->in_pos;
      s->in_pos = 0;
    }
  if (s->in_len == SRC_BUF_SIZE)
    return 0;
  ib_error_t e = NULL;
  ssize_t n = s->read (s->ud, s->in + s->in_len, SRC_BUF_SIZE - s->in_len, &e);
  if (n < 0)
    {
      src_fail (s, e && e->status ? e->status : EIO, e ? e->msg : "read failed");
      ib_error_free (&e);
      return -1;
    }
  if (n == 0)
    s->in_eof = true;
  s->in_len += (size_t) n;
  return 0;
}

static int
src_fill (struct src *s)
{
  if (s->in_pos < s->in_len || s->in_eof)
    return 0;
  return src_read_more (s);
}

static int
src_detect (struct src *s)
{
  while (s->in_len < 4 && !s->in_eof)
    if (src_read_more (s) < 0)
      return -1;
  const unsigned char *m = s->in;
  if (s->in_len >= 2 && m[0] == 0x1f && m[1] == 0x8b)
    {
      s->kind = SRC_GZIP;
      s->gz = xmalloc (sizeof *s->gz);
      isal_inflate_init (s->gz);
      s->gz->crc_flag = ISAL_GZIP;
    }
  else if (s->in_len >= 4 && m[0] == 0x28 && m[1] == 0xb5 && m[2] == 0x2f && m[3] == 0xfd)
    {
      s->kind = SRC_ZSTD;
      s->zs = ZSTD_createDStream ();
      if (s->zs == NULL)
        return (int) src_fail (s, ENOMEM, "ZSTD_createDStream failed");
      ZSTD_initDStream (s->zs);
      s->zret = 1;
    }
  else
    s->kind = SRC_TAR;
  s->kind_known = true;
  return 0;
}

/* Decode up to `cap` bytes of the tar stream into `out`: the count, 0 at
 * the end, -1 on error (s->msg set).  Counts and limits s->total. */
static ssize_t
src_produce (struct src *s, unsigned char *out, size_t cap)
{
  if (s->msg)
    return -1;
  if (!s->kind_known && src_detect (s) < 0)
    return -1;
  while (!s->end)
    {
      size_t produced = 0;
      if (src_fill (s) < 0)
        return -1;
      bool no_input = s->in_pos == s->in_len && s->in_eof;
      if (s->kind == SRC_TAR)
        {
          if (no_input)
            {
              s->end = true;
              break;
            }
          produced = s->in_len - s->in_pos < cap ? s->in_len - s->in_pos : cap;
          memcpy (out, s->in + s->in_pos, produced);
          s->in_pos += produced;
        }
      else if (s->kind == SRC_GZIP)
        {
          if (s->gz_between)
            {
              if (no_input)
                {
                  s->end = true;
                  break;
                }
              if (s->in[s->in_pos] != 0x1f)
                {
                  ib_debug ("trailing bytes after the gzip stream ignored");
                  s->end = true;
                  break;
                }
              isal_inflate_reset (s->gz);
              s->gz->crc_flag = ISAL_GZIP;
              s->gz_between = false;
            }
          s->gz->next_in = s->in + s->in_pos;
          s->gz->avail_in = (uint32_t) (s->in_len - s->in_pos);
          s->gz->next_out = out;
          s->gz->avail_out = (uint32_t) cap;
          int r = isal_inflate (s->gz);
          s->in_pos = s->in_len - s->gz->avail_in;
          produced = cap - s->gz->avail_out;
          if (r < 0)
            {
              cleanup_free char *m = xasprintf (
                  "gzip stream is corrupt: %s",
                  r == ISAL_INCORRECT_CHECKSUM ? "checksum mismatch"
                  : r == ISAL_INVALID_WRAPPER  ? "bad gzip header"
                                               : "invalid deflate data");
              return src_fail (s, EIO, m);
            }
          if (s->gz->block_state == ISAL_BLOCK_FINISH)
            s->gz_between = true;
          else if (produced == 0 && no_input)
            return src_fail (s, EIO, "gzip stream is truncated");
        }
      else
        {
          if (no_input)
            {
              if (s->zret != 0)
                return src_fail (s, EIO, "zstd stream is truncated");
              s->end = true;
              break;
            }
          ZSTD_inBuffer ib = { s->in, s->in_len, s->in_pos };
          ZSTD_outBuffer ob = { out, cap, 0 };
          size_t r = ZSTD_decompressStream (s->zs, &ob, &ib);
          if (ZSTD_isError (r))
            {
              cleanup_free char *m
                  = xasprintf ("zstd stream is corrupt: %s", ZSTD_getErrorName (r));
              return src_fail (s, EIO, m);
            }
          s->zret = r;
          s->in_pos = ib.pos;
          produced = ob.pos;
        }
      if (produced > 0)
        {
          s->total += produced;
          if (s->total > s->limit)
            {
              cleanup_free char *m = xasprintf (
                  "uncompressed size exceeds the limit of %" PRIu64
                  " bytes (decompression bomb?); set IMGBUILD_MAX_LAYER_BYTES to allow more",
                  s->limit);
              return src_fail (s, EFBIG, m);
            }
          return (ssize_t) produced;
        }
    }
  return 0;
}

static void *
src_decoder (void *arg)
{
  struct src *s = arg;
  for (;;)
    {
      pthread_mutex_lock (&s->mu);
      while (s->count == PIPE_NBUF && !s->cancel)
        pthread_cond_wait (&s->cv, &s->mu);
      bool cancel = s->cancel;
      unsigned slot = (s->head + s->count) % PIPE_NBUF;
      pthread_mutex_unlock (&s->mu);
      if (cancel)
        break;

      size_t n = 0;
      ssize_t r = 1;
      while (n < PIPE_BUF_SIZE && (r = src_produce (s, s->buf[slot] + n, PIPE_BUF_SIZE - n)) > 0)
        n += (size_t) r;

      pthread_mutex_lock (&s->mu);
      if (n > 0)
        {
          s->len[slot] = n;
          s->count++;
        }
      if (r <= 0)
        s->done = true;
      pthread_cond_broadcast (&s->cv);
      pthread_mutex_unlock (&s->mu);
      if (r <= 0)
        break;
    }
  return NULL;
}

/* The next buffer of the tar stream: its length, 0 at the end, -1 on error
 * (s->msg set).  Releases the buffer returned before. */
static ssize_t
src_next (struct src *s, const void **out)
{
  pthread_mutex_lock (&s->mu);
  if (s->holding)
    {
      s->head = (s->head + 1) % PIPE_NBUF;
      s->count--;
      s->holding = false;
      pthread_cond_broadcast (&s->cv);
    }
  while (s->count == 0 && !s->done)
    pthread_cond_wait (&s->cv, &s->mu);
  ssize_t n;
  if (s->count > 0)
    {
      s->holding = true;
      *out = s->buf[s->head];
      n = (ssize_t) s->len[s->head];
    }
  else
    n = s->msg ? -1 : 0;
  pthread_mutex_unlock (&s->mu);
  /* The diff_id: hashed here, on the reader's side of the ring, where the
   * bytes are about to be read anyway; inflate alone keeps the decoder
   * thread busy (on 2 cores the two sides are then about even). */
  if (n > 0)
    ib_sha256_update (s->hash, *out, (size_t) n);
  return n;
}

static la_ssize_t
src_read_cb (struct archive *a, void *ud, const void **buf)
{
  struct src *s = ud;
  ssize_t n = src_next (s, buf);
  if (n < 0)
    {
      archive_set_error (a, s->status ? s->status : EIO, "%s", s->msg);
      return -1;
    }
  return n;
}

static int
src_open (struct src *s, ib_layer_read_fn read_fn, void *ud, ib_error_t *err)
{
  memset (s, 0, sizeof *s);
  s->read = read_fn;
  s->ud = ud;
  s->in = xmalloc (SRC_BUF_SIZE);
  for (int i = 0; i < PIPE_NBUF; i++)
    s->buf[i] = xmalloc (PIPE_BUF_SIZE);
  s->hash = ib_sha256_new ();
  s->limit = ib_unpack_max_bytes ();
  pthread_mutex_init (&s->mu, NULL);
  pthread_cond_init (&s->cv, NULL);
  int r = pthread_create (&s->thread, NULL, src_decoder, s);
  if (r != 0)
    return ib_error_sys (err, r, "start the decoder thread");
  s->thread_live = true;
  return 0;
}

static void
src_close (struct src *s)
{
  if (s->thread_live)
    {
      pthread_mutex_lock (&s->mu);
      s->cancel = true;
      pthread_cond_broadcast (&s->cv);
      pthread_mutex_unlock (&s->mu);
      pthread_join (s->thread, NULL);
      s->thread_live = false;
    }
  pthread_mutex_destroy (&s->mu);
  pthread_cond_destroy (&s->cv);
  free (s->gz);
  s->gz = NULL;
  ZSTD_freeDStream (s->zs);
  s->zs = NULL;
  free (s->in);
  s->in = NULL;
  for (int i = 0; i < PIPE_NBUF; i++)
    {
      free (s->buf[i]);
      s->buf[i] = NULL;
    }
  free (s->msg);
  s->msg = NULL;
  /* s->hash stays: the caller reads the diff_id from it, then frees it. */
}

/* ---------------------------------------------------------------------- */
/* Paths.                                                                 */

/* Normalize an entry name: strip "./" and "/" runs, refuse absolute names and
 * ".." components.  "" means the top directory itself. */
static int
normalize_name (const char *in, char **out, ib_error_t *err)
{
  if (in == NULL || *in == '\0')
    return ib_error_set (err, EINVAL, "entry with an empty name");
  if (in[0] == '/')
    return ib_error_set (err, EINVAL, "entry %s: absolute name refused", in);
  ib_buf_t b = { 0 };
  const char *p = in;
  while (*p)
    {
      while (*p == '/')
        p++;
      const char *c = p;
      while (*p && *p != '/')
        p++;
      size_t len = (size_t) (p - c);
      if (len == 0 || (len == 1 && c[0] == '.'))
        continue;
      if (len == 2 && c[0] == '.' && c[1] == '.')
        {
          ib_buf_free (&b);
          return ib_error_set (err, EINVAL, "entry %s: \"..\" component refused", in);
        }
      if (b.len)
        ib_buf_append (&b, "/", 1);
      ib_buf_append (&b, c, len);
    }
  *out = ib_buf_steal (&b);
  return 0;
}

/* Split "a/b/c" into dir "a/b" (allocated) and base "c" (points into path). */
static char *
split_path (const char *path, const char **base)
{
  const char *slash = strrchr (path, '/');
  if (slash == NULL)
    {
      *base = path;
      return xstrdup ("");
    }
  *base = slash + 1;
  return xstrndup (path, (size_t) (slash - path));
}

static long
sys_openat2 (int dirfd, const char *path, struct open_how *how)
{
  return syscall (SYS_openat2, dirfd, path, how, sizeof *how);
}

/* User-space RESOLVE_IN_ROOT: walk `path` from rootfd with O_NOFOLLOW,
 * expanding symlinks ourselves (absolute ones and ".." clamped at the root).
 * Returns an O_PATH fd of the directory, -1 with errno on failure. */
static int
resolve_fallback (int rootfd, const char *path)
{
  int stack_cap = 16, depth = 0, links = 0, ret = -1, saved = 0;
  int *stack = xmalloc (sizeof (int) * (size_t) stack_cap);
  ib_buf_t rest = { 0 };
  ib_buf_puts (&rest, path);
  stack[depth++] = openat (rootfd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (stack[0] < 0)
    {
      saved = errno;
      goto out;
    }
  size_t pos = 0;
  for (;;)
    {
      while (pos < rest.len && rest.data[pos] == '/')
        pos++;
      if (pos >= rest.len)
        break;
      size_t start = pos;
      while (pos < rest.len && rest.data[pos] != '/')
        pos++;
      cleanup_free char *comp = xstrndup (rest.data + start, pos - start);
      if (strcmp (comp, ".") == 0)
        continue;
      if (strcmp (comp, "..") == 0)
        {
          if (depth > 1)
            close (stack[--depth]);
          continue;
        }
      int top = stack[depth - 1];
      struct stat st;
      if (fstatat (top, comp, &st, AT_SYMLINK_NOFOLLOW) < 0)
        {
          saved = errno;
          goto out;
        }
      if (S_ISLNK (st.st_mode))
        {
          if (++links > MAX_SYMLINKS)
            {
              saved = ELOOP;
              goto out;
            }
          size_t sz = (size_t) st.st_size + 1;
          if (sz < 256)
            sz = 256;
          cleanup_free char *target = xmalloc (sz + 1);
          ssize_t n = readlinkat (top, comp, target, sz);
          if (n < 0)
            {
              saved = errno;
              goto out;
            }
          if ((size_t) n >= sz)
            {
              saved = ENAMETOOLONG;
              goto out;
            }
          target[n] = '\0';
          /* new rest = target + "/" + what was left after this component */
          ib_buf_t nr = { 0 };
          ib_buf_puts (&nr, target);
          ib_buf_append (&nr, "/", 1);
          ib_buf_append (&nr, rest.data + pos, rest.len - pos);
          ib_buf_free (&rest);
          rest = nr;
          pos = 0;
          if (target[0] == '/')
            while (depth > 1)
              close (stack[--depth]);
          continue;
        }
      if (!S_ISDIR (st.st_mode))
        {
          saved = ENOTDIR;
          goto out;
        }
      int fd = openat (top, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0)
        {
          saved = errno;
          goto out;
        }
      if (depth == stack_cap)
        {
          stack_cap *= 2;
          stack = xrealloc (stack, sizeof (int) * (size_t) stack_cap);
        }
      stack[depth++] = fd;
    }
  ret = stack[--depth];
out:
  while (depth > 0)
    {
      depth--;
      if (stack[depth] >= 0)
        close (stack[depth]);
    }
  free (stack);
  ib_buf_free (&rest);
  if (ret < 0)
    errno = saved ? saved : EIO;
  return ret;
}

/* O_PATH fd of directory `path` resolved beneath rootfd as if rootfd were
 * "/"; -1 with errno on failure. */
static int
open_dir_in_root (int rootfd, const char *path)
{
  if (*path == '\0')
    return openat (rootfd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (!openat2_disabled && !openat2_missing)
    {
      struct open_how how = { 0 };
      how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
      how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
      for (int i = 0; i < 32; i++)
        {
          long fd = sys_openat2 (rootfd, path, &how);
          if (fd >= 0)
            return (int) fd;
          if (errno == EAGAIN || errno == EINTR)
            continue;
          if (errno != ENOSYS)
            return -1;
          openat2_missing = true;
          break;
        }
      if (!openat2_missing)
        return -1;
    }
  return resolve_fallback (rootfd, path);
}

int
ib_open_dir_in_root (int rootfd, const char *path)
{
  while (*path == '/')
    path++;
  return open_dir_in_root (rootfd, path);
}

/* ---------------------------------------------------------------------- */
/* Removal beneath a directory fd, never following symlinks.              */

static int
remove_at (int pfd, const char *name, const char *shown, ib_error_t *err)
{
  struct stat st;
  if (fstatat (pfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
    return errno == ENOENT ? 0 : ib_error_sys (err, errno, "remove %s", shown);
  if (!S_ISDIR (st.st_mode))
    {
      if (unlinkat (pfd, name, 0) < 0 && errno != ENOENT)
        return ib_error_sys (err, errno, "remove %s", shown);
      return 0;
    }
  int fd = openat (pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == EACCES)
    {
      fchmodat (pfd, name, 0700, 0); /* a directory (checked above), not a link */
      fd = openat (pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
  if (fd < 0)
    return ib_error_sys (err, errno, "remove %s", shown);
  if ((st.st_mode & 0700) != 0700)
    fchmod (fd, 0700);
  DIR *d = fdopendir (fd);
  if (d == NULL)
    {
      int e = errno;
      close (fd);
      return ib_error_sys (err, e, "remove %s", shown);
    }
  cleanup_strv char **names = NULL;
  struct dirent *de;
  while ((de = readdir (d)) != NULL)
    if (strcmp (de->d_name, ".") != 0 && strcmp (de->d_name, "..") != 0)
      ib_strv_push (&names, de->d_name);
  int ret = 0;
  for (size_t i = 0; names && names[i] && ret == 0; i++)
    {
      cleanup_free char *sub = xasprintf ("%s/%s", shown, names[i]);
      ret = remove_at (dirfd (d), names[i], sub, err);
    }
  closedir (d);
  if (ret < 0)
    return ret;
  if (unlinkat (pfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
    return ib_error_sys (err, errno, "remove %s", shown);
  return 0;
}

/* ---------------------------------------------------------------------- */
/* Unpacking.                                                             */

struct dirmeta
{
  char *path;            /* lexical path under the target ("" = the target) */
  dev_t dev;
  ino_t ino;
  mode_t mode;
  bool set_owner;
  uid_t uid;
  gid_t gid;
  bool set_times;
  struct timespec ts[2];
  bool dead;             /* the directory went and its inode was reused: ignored */
};

struct unpack
{
  int rootfd;
  struct stat root_st;
  hmap_t names;          /* name_key of every name this layer created or applied */
  hmap_t holders;        /* ino_key of directories that hold entries of this layer */
  hmap_t dir_idx;        /* ino_key -> index + 1 into dirs */
  struct dirmeta *dirs;
  size_t n_dirs, cap_dirs;
  struct src *src;
  ib_unpack_stats_t *stats;
  bool can_chown_warned;
  ib_buf_t skipped_names;  /* first few skipped entries, for one warning per layer */
  uint64_t caps_failed;    /* security.capability the kernel refused */
  int caps_errno;          /* why, the first time */
  ib_buf_t caps_names;     /* the first few of those files */
  /* The parent directory of the last regular file, reused while regular
   * files follow in the same directory (tars list files directory by
   * directory): saves resolving it again.  Dropped by any other entry,
   * since only those can change the directory structure. */
  char *pc_dir;
  int pc_fd;
  struct stat pc_st;
  uid_t euid;
  gid_t egid;
};

static void
parent_cache_drop (struct unpack *u)
{
  if (u->pc_fd >= 0)
    close (u->pc_fd);
  u->pc_fd = -1;
  free (u->pc_dir);
  u->pc_dir = NULL;
}

/* Count a skipped entry; the names of the first few go into the one warning
 * ib_unpack_layer prints (images carry /dev nodes that no rootless unpack can
 * create, and the sandbox provides its own /dev). */
static void
note_skipped (struct unpack *u, const char *name)
{
  if (u->stats->skipped++ < 4)
    ib_buf_printf (&u->skipped_names, "%s/%s", u->skipped_names.len ? ", " : "", name);
}

static void
unpack_free (struct unpack *u)
{
  hmap_free (&u->names, false);
  hmap_free (&u->holders, false);
  hmap_free (&u->dir_idx, false);
  for (size_t i = 0; i < u->n_dirs; i++)
    free (u->dirs[i].path);
  free (u->dirs);
  ib_buf_free (&u->skipped_names);
  ib_buf_free (&u->caps_names);
  parent_cache_drop (u);
  if (u->rootfd >= 0)
    close (u->rootfd);
}

/* A directory was just made at inode st: a record for that inode is of a
 * directory this layer removed (the inode reused), never of this one. */
static void
dirmeta_forget (struct unpack *u, const struct stat *st)
{
  cleanup_free char *k = ino_key (st);
  hslot_t *s = hmap_find (&u->dir_idx, k);
  if (s && s->val)
    {
      u->dirs[(uintptr_t) s->val - 1].dead = true;
      s->val = NULL;
    }
}

static struct dirmeta *
dirmeta_get (struct unpack *u, const char *path, const struct stat *st, bool *fresh)
{
  cleanup_free char *k = ino_key (st);
  hslot_t *s = hmap_find (&u->dir_idx, k);
  if (s && s->val)
    {
      struct dirmeta *d = &u->dirs[(uintptr_t) s->val - 1];
      *fresh = false;
      return d;
    }
  if (u->n_dirs == u->cap_dirs)
    {
      u->cap_dirs = u->cap_dirs ? u->cap_dirs * 2 : 64;
      u->dirs = xrealloc (u->dirs, u->cap_dirs * sizeof *u->dirs);
    }
  struct dirmeta *d = &u->dirs[u->n_dirs++];
  memset (d, 0, sizeof *d);
  d->path = xstrdup (path);
  d->dev = st->st_dev;
  d->ino = st->st_ino;
  d->mode = st->st_mode & 07777;
  hmap_put (&u->dir_idx, k, (void *) (uintptr_t) u->n_dirs);
  *fresh = true;
  return d;
}

/* Directory `path` (stat st) is about to change: an entry of this layer is
 * created in it or a whiteout removes one.  Unless the layer has an entry for
 * the directory itself (which then sets its metadata), it keeps the mtime it
 * had (apply_dirmeta puts it back): the tree depends on the layers, not on
 * the time of the unpack (umoci does the same). */
static void
keep_times (struct unpack *u, const char *path, const struct stat *st)
{
  bool fresh;
  struct dirmeta *d = dirmeta_get (u, path, st, &fresh);
  if (!fresh)
    return;
  d->set_times = true;
  d->ts[0] = st->st_atim;
  d->ts[1] = st->st_mtim;
}

static void
ignore_chown_error (const char *name)
{
  if (errno == EPERM || errno == EINVAL)
    ib_debug ("%s: ownership kept as the caller's: %s", name, strerror (errno));
  else
    ib_warn ("%s: cannot set ownership: %s", name, strerror (errno));
}

/* Directory `path` (O_PATH fd dfd, stat st) lacks owner write/search
 * permission: grant it for the rest of the unpack and restore the mode at the
 * end (rootless: CAP_DAC_OVERRIDE does not help with our own files). */
static int
make_writable (struct unpack *u, const char *path, int dfd, const struct stat *st, ib_error_t *err)
{
  if ((st->st_mode & 0700) == 0700)
    return 0;
  if (faccessat (dfd, ".", W_OK | X_OK, AT_EACCESS) == 0)
    return 0;
  bool fresh;
  dirmeta_get (u, path, st, &fresh); /* remembers the original mode if new */
  int r;
  int rfd = openat (dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (rfd >= 0)
    {
      r = fchmod (rfd, (st->st_mode & 07777) | 0700);
      close (rfd);
    }
  else
    {
      char proc[64];
      snprintf (proc, sizeof proc, "/proc/self/fd/%d", dfd);
      r = chmod (proc, (st->st_mode & 07777) | 0700);
    }
  if (r < 0)
    return ib_error_sys (err, errno, "make directory /%s writable", path);
  return 0;
}

/* Resolve directory `path` beneath the target; with `create`, missing
 * components are created (mode 0755) as directories of this layer.  Returns
 * an O_PATH fd, or -1 with *err set (errno ENOENT when missing). */
static int
resolve_dir (struct unpack *u, const char *path, bool create, ib_error_t *err)
{
  int fd = open_dir_in_root (u->rootfd, path);
  if (fd >= 0)
    return fd;
  if (errno != ENOENT || !create)
    return ib_error_sys (err, errno, "resolve directory /%s", path);

  int cur = openat (u->rootfd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (cur < 0)
    return ib_error_sys (err, errno, "open target");
  const char *p = path;
  while (*p)
    {
      const char *c = p;
      while (*p && *p != '/')
        p++;
      cleanup_free char *prefix = xstrndup (path, (size_t) (p - path));
      cleanup_free char *comp = xstrndup (c, (size_t) (p - c));
      while (*p == '/')
        p++;
      int next = open_dir_in_root (u->rootfd, prefix);
      if (next < 0 && errno == ENOENT)
        {
          struct stat pst;
          const char *parent_end = c > path ? c - 1 : path;
          cleanup_free char *parent = xstrndup (path, (size_t) (parent_end - path));
          if (fstat (cur, &pst) < 0)
            {
              int e = errno;
              close (cur);
              return ib_error_sys (err, e, "create directory /%s", prefix);
            }
          keep_times (u, parent, &pst);
          if (make_writable (u, parent, cur, &pst, err) < 0)
            {
              close (cur);
              return ib_error_prefix (err, "create directory /%s", prefix);
            }
          if (mkdirat (cur, comp, 0755) < 0)
            {
              int e = errno;
              close (cur);
              if (e == EEXIST)
                return ib_error_set (err, ENOTDIR,
                                     "create directory /%s: a dangling symlink or a "
                                     "non-directory is in the way",
                                     prefix);
              return ib_error_sys (err, e, "create directory /%s", prefix);
            }
          cleanup_free char *k = name_key (&pst, comp);
          hmap_put (&u->names, k, NULL);
          next = openat (cur, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
          struct stat nst;
          if (next >= 0 && fstat (next, &nst) == 0)
            dirmeta_forget (u, &nst);
        }
      if (next < 0)
        {
          int e = errno;
          close (cur);
          return ib_error_sys (err, e, "resolve directory /%s", prefix);
        }
      close (cur);
      cur = next;
    }
  return cur;
}

/* Mark dfd and every directory above it up to the target as holding entries
 * of this layer (opaque whiteouts keep them). */
static void
mark_holders (struct unpack *u, int dfd, const struct stat *dst)
{
  struct stat st = *dst;
  int fd = -1;
  for (int guard = 0; guard < 4096; guard++)
    {
      cleanup_free char *k = ino_key (&st);
      if (hmap_find (&u->holders, k))
        break;
      hmap_put (&u->holders, k, NULL);
      if (same_inode (&st, &u->root_st))
        break;
      int up = openat (fd >= 0 ? fd : dfd, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
      if (fd >= 0)
        close (fd);
      fd = up;
      if (fd < 0 || fstat (fd, &st) < 0)
        break;
    }
  if (fd >= 0)
    close (fd);
}

static int purge_dir (struct unpack *u, int dfd, const struct stat *dst, const char *path,
                      ib_error_t *err);

/* Remove what lower layers put at dfd/name, keep what this layer put there. */
static int
remove_lower (struct unpack *u, int dfd, const struct stat *dst, const char *dpath,
              const char *name, ib_error_t *err)
{
  cleanup_free char *shown = *dpath ? xasprintf ("%s/%s", dpath, name) : xstrdup (name);
  struct stat st;
  if (fstatat (dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
    return errno == ENOENT ? 0 : ib_error_sys (err, errno, "whiteout /%s", shown);
  cleanup_free char *nk = name_key (dst, name);
  bool mine = hmap_find (&u->names, nk) != NULL;
  bool holds = false;
  if (S_ISDIR (st.st_mode))
    {
      cleanup_free char *ik = ino_key (&st);
      holds = hmap_find (&u->holders, ik) != NULL;
    }
  if (!mine && !holds)
    {
      keep_times (u, dpath, dst);
      if (make_writable (u, dpath, dfd, dst, err) < 0)
        return -1;
      return remove_at (dfd, name, shown, err);
    }
  if (!S_ISDIR (st.st_mode))
    return 0;
  cleanup_close int sub = openat (dfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (sub < 0)
    return ib_error_sys (err, errno, "open /%s", shown);
  return purge_dir (u, sub, &st, shown, err);
}

/* Opaque whiteout: empty directory dfd of what lower layers put there. */
static int
purge_dir (struct unpack *u, int dfd, const struct stat *dst, const char *path, ib_error_t *err)
{
  int rfd = openat (dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (rfd < 0 && errno == EACCES)
    {
      if (make_writable (u, path, dfd, dst, err) < 0)
        return -1;
      rfd = openat (dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    }
  if (rfd < 0)
    return ib_error_sys (err, errno, "open /%s", path);
  DIR *d = fdopendir (rfd);
  if (d == NULL)
    {
      int e = errno;
      close (rfd);
      return ib_error_sys (err, e, "open /%s", path);
    }
  cleanup_strv char **names = NULL;
  struct dirent *de;
  while ((de = readdir (d)) != NULL)
    if (strcmp (de->d_name, ".") != 0 && strcmp (de->d_name, "..") != 0)
      ib_strv_push (&names, de->d_name);
  closedir (d);
  for (size_t i = 0; names && names[i]; i++)
    if (remove_lower (u, dfd, dst, path, names[i], err) < 0)
      return -1;
  return 0;
}

static void
entry_times (struct archive_entry *e, struct timespec ts[2])
{
  ts[1].tv_sec = archive_entry_mtime (e);
  ts[1].tv_nsec = archive_entry_mtime_nsec (e);
  if (archive_entry_atime_is_set (e))
    {
      ts[0].tv_sec = archive_entry_atime (e);
      ts[0].tv_nsec = archive_entry_atime_nsec (e);
    }
  else
    ts[0] = ts[1];
}

/* The entry's xattrs on fd (after chown and chmod: chown clears
 * security.capability).  user.* are set; security.capability (file
 * capabilities) too where the kernel allows it (in a user namespace it
 * stores them as a v3 capability of the namespace's root); where it refuses
 * (unprivileged without a namespace, a filesystem without xattrs) the file
 * is counted for the one warning per layer.  Other names (trusted.*,
 * security.selinux, system.*) are host-specific: skipped with a debug
 * message. */
static void
apply_xattrs (struct unpack *u, struct archive_entry *e, int fd, const char *name)
{
  const char *xn;
  const void *xv;
  size_t xs;
  bool cap_failed = false; /* (a tar may carry it twice: SCHILY. and LIBARCHIVE.xattr) */
  archive_entry_xattr_reset (e);
  while (archive_entry_xattr_next (e, &xn, &xv, &xs) == ARCHIVE_OK)
    {
      bool cap = strcmp (xn, "security.capability") == 0;
      if (!cap && !ib_str_has_prefix (xn, "user."))
        {
          ib_debug ("/%s: xattr %s skipped", name, xn);
          continue;
        }
      if (fsetxattr (fd, xn, xv, xs, 0) == 0)
        continue;
      if (!cap)
        {
          ib_debug ("/%s: xattr %s not set: %s", name, xn, strerror (errno));
          continue;
        }
      ib_debug ("/%s: file capability not set: %s", name, strerror (errno));
      if (cap_failed)
        continue;
      cap_failed = true;
      if (u->caps_failed++ == 0)
        u->caps_errno = errno;
      if (u->caps_failed <= 4)
        ib_buf_printf (&u->caps_names, "%s/%s", u->caps_names.len ? ", " : "", name);
    }
}

/* An entry for an existing directory gives it its whole metadata: the
 * xattrs a lower layer set (of the kinds apply_xattrs sets) go first. */
static void
clear_xattrs (int fd, const char *name)
{
  char list[65536];
  ssize_t n = flistxattr (fd, list, sizeof list);
  for (char *k = list; n > 0 && k < list + n; k += strlen (k) + 1)
    if ((ib_str_has_prefix (k, "user.") || strcmp (k, "security.capability") == 0)
        && fremovexattr (fd, k) < 0)
      ib_debug ("/%s: xattr %s not removed: %s", name, k, strerror (errno));
}

static int
arch_error (struct unpack *u, struct archive *a, const char *name, ib_error_t *err)
{
  if (u->src->msg)
    return ib_error_set (err, u->src->status, "%s", u->src->msg);
  int e = archive_errno (a);
  const char *m = archive_error_string (a);
  if (name)
    return ib_error_set (err, e > 0 ? e : EIO, "entry %s: %s", name, m ? m : "archive error");
  return ib_error_set (err, e > 0 ? e : EIO, "%s", m ? m : "archive error");
}

static int
write_file_data (struct unpack *u, struct archive *a, int fd, const char *name, int64_t size,
                 ib_error_t *err)
{
  const void *buf;
  size_t len;
  la_int64_t off;
  int64_t end = 0;
  for (;;)
    {
      int r = archive_read_data_block (a, &buf, &len, &off);
      if (r == ARCHIVE_EOF)
        break;
      if (r < ARCHIVE_WARN)
        return arch_error (u, a, name, err);
      const char *p = buf;
      size_t left = len;
      while (left > 0)
        {
          ssize_t n = pwrite (fd, p, left, off);
          if (n < 0 && errno == EINTR)
            continue;
          if (n < 0)
            return ib_error_sys (err, errno, "entry %s: write", name);
          p += n;
          left -= (size_t) n;
          off += n;
        }
      if (off > end)
        end = off;
    }
  if (size > end && ftruncate (fd, size) < 0) /* trailing hole of a sparse file */
    return ib_error_sys (err, errno, "entry %s: truncate", name);
  return 0;
}

static int
apply_whiteout (struct unpack *u, const char *name, const char *dir, const char *base,
                ib_error_t *err)
{
  const char *victim = base + 4;
  bool opaque = strcmp (base, ".wh..wh..opq") == 0;
  if (!opaque && ib_str_has_prefix (victim, ".wh."))
    {
      ib_debug ("entry %s: whiteout metadata ignored", name);
      return 0;
    }
  if (!opaque && (*victim == '\0' || strcmp (victim, ".") == 0 || strcmp (victim, "..") == 0))
    return ib_error_set (err, EINVAL, "entry %s: invalid whiteout name", name);

  cleanup_close int dfd = resolve_dir (u, dir, opaque, err);
  if (dfd < 0)
    {
      if (!opaque && ((*err)->status == ENOENT || (*err)->status == ENOTDIR))
        {
          ib_error_free (err); /* nothing there to delete */
          return 0;
        }
      return ib_error_prefix (err, "entry %s", name);
    }
  struct stat dst;
  if (fstat (dfd, &dst) < 0)
    return ib_error_sys (err, errno, "entry %s", name);
  int r = opaque ? purge_dir (u, dfd, &dst, dir, err)
                 : remove_lower (u, dfd, &dst, dir, victim, err);
  if (r < 0)
    return ib_error_prefix (err, "entry %s", name);
  if (opaque)
    mark_holders (u, dfd, &dst);
  return 0;
}

static int
apply_hardlink (struct unpack *u, struct archive_entry *e, const char *name, int pfd,
                const char *base, ib_error_t *err)
{
  cleanup_free char *tname = NULL;
  if (normalize_name (archive_entry_hardlink (e), &tname, err) < 0)
    return ib_error_prefix (err, "entry %s: hardlink target", name);
  if (*tname == '\0')
    return ib_error_set (err, EINVAL, "entry %s: hardlink to the top directory", name);
  const char *tbase;
  cleanup_free char *tdir = split_path (tname, &tbase);
  cleanup_close int tfd = resolve_dir (u, tdir, false, err);
  if (tfd < 0)
    return ib_error_prefix (err, "entry %s: hardlink target %s", name, tname);
  struct stat tst, est;
  if (fstatat (tfd, tbase, &tst, AT_SYMLINK_NOFOLLOW) < 0)
    return ib_error_sys (err, errno, "entry %s: hardlink target %s", name, tname);
  if (S_ISDIR (tst.st_mode))
    return ib_error_set (err, EPERM, "entry %s: hardlink target %s is a directory", name, tname);
  if (fstatat (pfd, base, &est, AT_SYMLINK_NOFOLLOW) == 0)
    {
      if (same_inode (&est, &tst))
        return 0;
      if (remove_at (pfd, base, name, err) < 0)
        return ib_error_prefix (err, "entry %s", name);
    }
  if (linkat (tfd, tbase, pfd, base, 0) < 0)
    return ib_error_sys (err, errno, "entry %s: link to %s", name, tname);
  return 0;
}

static int
apply_entry (struct unpack *u, struct archive *a, struct archive_entry *e, const char *name,
             ib_error_t *err)
{
  const char *base;
  cleanup_free char *dir = split_path (name, &base);
  bool plain_file = archive_entry_filetype (e) == AE_IFREG && !archive_entry_hardlink (e);
  if (!plain_file)
    parent_cache_drop (u);
  if (ib_str_has_prefix (base, ".wh."))
    return apply_whiteout (u, name, dir, base, err);

  int pfd;
  struct stat pst;
  cleanup_close int own_pfd = -1;
  if (plain_file && u->pc_fd >= 0 && strcmp (u->pc_dir, dir) == 0)
    {
      pfd = u->pc_fd;
      pst = u->pc_st;
    }
  else
    {
      parent_cache_drop (u);
      own_pfd = resolve_dir (u, dir, true, err);
      if (own_pfd < 0)
        return ib_error_prefix (err, "entry %s", name);
      if (fstat (own_pfd, &pst) < 0)
        return ib_error_sys (err, errno, "entry %s", name);
      keep_times (u, dir, &pst);
      if (make_writable (u, dir, own_pfd, &pst, err) < 0)
        return ib_error_prefix (err, "entry %s", name);
      mark_holders (u, own_pfd, &pst);
      pfd = own_pfd;
      if (plain_file)
        {
          u->pc_fd = steal_fd (&own_pfd);
          u->pc_dir = xstrdup (dir);
          u->pc_st = pst;
          pfd = u->pc_fd;
        }
    }
  cleanup_free char *nk = name_key (&pst, base);
  hmap_put (&u->names, nk, NULL);

  if (archive_entry_hardlink (e))
    return apply_hardlink (u, e, name, pfd, base, err);

  mode_t type = archive_entry_filetype (e);
  mode_t perm = archive_entry_perm (e) & 07777;
  uid_t uid = (uid_t) archive_entry_uid (e);
  gid_t gid = (gid_t) archive_entry_gid (e);
  struct timespec ts[2];
  entry_times (e, ts);
  bool has_mtime = archive_entry_mtime_is_set (e);
  struct stat est;
  /* a regular file is created first and only looked at when something is in its way */
  bool exists = !plain_file && fstatat (pfd, base, &est, AT_SYMLINK_NOFOLLOW) == 0;

  if (type == AE_IFDIR)
    {
      if (exists && !S_ISDIR (est.st_mode))
        {
          if (remove_at (pfd, base, name, err) < 0)
            return ib_error_prefix (err, "entry %s", name);
          exists = false;
        }
      if (!exists && mkdirat (pfd, base, 0700) < 0)
        return ib_error_sys (err, errno, "entry %s: mkdir", name);
      if (fstatat (pfd, base, &est, AT_SYMLINK_NOFOLLOW) < 0)
        return ib_error_sys (err, errno, "entry %s", name);
      if (!exists)
        dirmeta_forget (u, &est);
      if (archive_entry_xattr_count (e) > 0 || exists)
        {
          cleanup_close int fd = openat (pfd, base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
          if (fd >= 0 && exists)
            clear_xattrs (fd, name);
          if (fd >= 0)
            apply_xattrs (u, e, fd, name);
        }
      bool fresh;
      struct dirmeta *d = dirmeta_get (u, name, &est, &fresh);
      d->mode = perm;
      d->set_owner = true;
      d->uid = uid;
      d->gid = gid;
      if (has_mtime)
        {
          d->set_times = true;
          d->ts[0] = ts[0];
          d->ts[1] = ts[1];
        }
      return 0;
    }

  if (exists && remove_at (pfd, base, name, err) < 0)
    return ib_error_prefix (err, "entry %s", name);

  switch (type)
    {
    case AE_IFREG:
      {
        /* The file is born with its mode (the unpack runs with umask 0)
         * and its owner when that is us; otherwise chown, then chmod
         * (chown clears setuid/setgid). */
        bool chown_needed = uid != u->euid || gid != u->egid || (pst.st_mode & S_ISGID);
        bool chmod_needed = chown_needed || (perm & 07000);
        mode_t create_mode = chmod_needed ? 0600 : perm;
        int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
        cleanup_close int fd = openat (pfd, base, flags, create_mode);
        if (fd < 0 && errno == EEXIST)
          {
            if (remove_at (pfd, base, name, err) < 0)
              return ib_error_prefix (err, "entry %s", name);
            fd = openat (pfd, base, flags, create_mode);
          }
        if (fd < 0)
          return ib_error_sys (err, errno, "entry %s: create", name);
        if (write_file_data (u, a, fd, name, archive_entry_size (e), err) < 0)
          return -1;
        if (chown_needed && fchown (fd, uid, gid) < 0)
          ignore_chown_error (name);
        if (chmod_needed && fchmod (fd, perm) < 0)
          return ib_error_sys (err, errno, "entry %s: chmod", name);
        apply_xattrs (u, e, fd, name);
        if (has_mtime && futimens (fd, ts) < 0)
          return ib_error_sys (err, errno, "entry %s: set times", name);
        return 0;
      }
    case AE_IFLNK:
      {
        const char *target = archive_entry_symlink (e);
        if (target == NULL)
          return ib_error_set (err, EINVAL, "entry %s: symlink without a target", name);
        if (symlinkat (target, pfd, base) < 0)
          return ib_error_sys (err, errno, "entry %s: symlink", name);
        if (fchownat (pfd, base, uid, gid, AT_SYMLINK_NOFOLLOW) < 0)
          ignore_chown_error (name);
        if (has_mtime && utimensat (pfd, base, ts, AT_SYMLINK_NOFOLLOW) < 0)
          ib_debug ("/%s: symlink times not set: %s", name, strerror (errno));
        return 0;
      }
    case AE_IFCHR:
    case AE_IFBLK:
    case AE_IFIFO:
      {
        dev_t dev = makedev (archive_entry_rdevmajor (e), archive_entry_rdevminor (e));
        if (mknodat (pfd, base, type | 0600, type == AE_IFIFO ? 0 : dev) < 0)
          {
            if (errno == EPERM || errno == EACCES)
              {
                ib_debug ("/%s: device node skipped: %s", name, strerror (errno));
                note_skipped (u, name);
                return 0;
              }
            return ib_error_sys (err, errno, "entry %s: mknod", name);
          }
        if (fchownat (pfd, base, uid, gid, AT_SYMLINK_NOFOLLOW) < 0)
          ignore_chown_error (name);
        if (fchmodat (pfd, base, perm, 0) < 0)
          return ib_error_sys (err, errno, "entry %s: chmod", name);
        if (has_mtime && utimensat (pfd, base, ts, AT_SYMLINK_NOFOLLOW) < 0)
          return ib_error_sys (err, errno, "entry %s: set times", name);
        return 0;
      }
    default:
      ib_debug ("/%s: entry of type 0%o skipped", name, (unsigned) type);
      note_skipped (u, name);
      return 0;
    }
}

static size_t
path_depth (const char *p)
{
  size_t n = *p ? 1 : 0;
  for (; *p; p++)
    n += *p == '/';
  return n;
}

static int
dirmeta_order (const void *a, const void *b)
{
  const struct dirmeta *x = *(struct dirmeta *const *) a, *y = *(struct dirmeta *const *) b;
  size_t dx = path_depth (x->path), dy = path_depth (y->path);
  if (dx != dy)
    return dx > dy ? -1 : 1;
  return x > y ? -1 : x < y; /* later first */
}

/* Metadata of directory d whose path ends in a symlink to it (an entry
 * "lib/x" with "lib" -> "usr/lib"): the whole path resolved beneath the
 * target, the metadata set through /proc/self/fd (an O_PATH fd takes no
 * chmod). */
static int
apply_dirmeta_resolved (struct unpack *u, const struct dirmeta *d, ib_error_t *err)
{
  cleanup_close int fd = open_dir_in_root (u->rootfd, d->path);
  struct stat st;
  if (fd < 0 || fstat (fd, &st) < 0 || st.st_dev != d->dev || st.st_ino != d->ino)
    return 0; /* replaced by a later entry */
  char proc[64];
  snprintf (proc, sizeof proc, "/proc/self/fd/%d", fd);
  if (d->set_owner && chown (proc, d->uid, d->gid) < 0)
    ignore_chown_error (d->path);
  if (chmod (proc, d->mode) < 0 || (d->set_times && utimensat (AT_FDCWD, proc, d->ts, 0) < 0))
    {
      if (errno != ENOENT)
        return ib_error_sys (err, errno, "entry %s: set metadata", d->path);
      ib_debug ("/%s: metadata not set: no /proc", d->path);
    }
  return 0;
}

/* Directory metadata last, deepest first (then in reverse order of
 * appearance), so that restrictive modes and mtimes are not disturbed by
 * later entries, and a parent's mode never blocks the way to a child. */
static int
apply_dirmeta (struct unpack *u, ib_error_t *err)
{
  cleanup_free struct dirmeta **order = xmalloc ((u->n_dirs + 1) * sizeof *order);
  for (size_t i = 0; i < u->n_dirs; i++)
    order[i] = &u->dirs[i];
  qsort (order, u->n_dirs, sizeof *order, dirmeta_order);
  for (size_t i = 0; i < u->n_dirs; i++)
    {
      struct dirmeta *d = order[i];
      if (d->dead)
        continue;
      const char *base;
      cleanup_free char *parent = split_path (d->path, &base);
      cleanup_close int pfd = -1;
      int fd;
      const char *nm;
      int flags;
      struct stat st;
      if (*d->path == '\0')
        {
          fd = u->rootfd;
          nm = "";
          flags = AT_EMPTY_PATH;
        }
      else
        {
          pfd = open_dir_in_root (u->rootfd, parent);
          if (pfd < 0)
            continue; /* replaced by a later entry */
          fd = pfd;
          nm = base;
          flags = 0;
        }
      if (fstatat (fd, nm, &st, flags | AT_SYMLINK_NOFOLLOW) < 0)
        continue;
      if (S_ISLNK (st.st_mode))
        {
          if (apply_dirmeta_resolved (u, d, err) < 0)
            return -1;
          continue;
        }
      if (!S_ISDIR (st.st_mode) || st.st_dev != d->dev || st.st_ino != d->ino)
        continue;
      if (d->set_owner && fchownat (fd, nm, d->uid, d->gid, flags | AT_SYMLINK_NOFOLLOW) < 0)
        ignore_chown_error (d->path);
      int r = *nm ? fchmodat (fd, nm, d->mode, 0) : fchmod (fd, d->mode);
      if (r < 0)
        return ib_error_sys (err, errno, "entry %s: chmod", d->path);
      if (d->set_times)
        {
          r = *nm ? utimensat (fd, nm, d->ts, AT_SYMLINK_NOFOLLOW) : futimens (fd, d->ts);
          if (r < 0)
            return ib_error_sys (err, errno, "entry %s: set times", d->path);
        }
    }
  return 0;
}

/* The "./" entry: the top directory's metadata (mode, owner, mtime, xattrs),
 * as for any directory entry; another type there is ignored. */
static void
apply_root_entry (struct unpack *u, struct archive_entry *e)
{
  if (archive_entry_filetype (e) != AE_IFDIR)
    {
      ib_debug ("entry %s: not a directory, ignored", archive_entry_pathname (e));
      return;
    }
  parent_cache_drop (u);
  clear_xattrs (u->rootfd, ".");
  apply_xattrs (u, e, u->rootfd, ".");
  bool fresh;
  struct dirmeta *d = dirmeta_get (u, "", &u->root_st, &fresh);
  d->mode = archive_entry_perm (e) & 07777;
  d->set_owner = true;
  d->uid = (uid_t) archive_entry_uid (e);
  d->gid = (gid_t) archive_entry_gid (e);
  if (archive_entry_mtime_is_set (e))
    {
      d->set_times = true;
      entry_times (e, d->ts);
    }
}

static int
unpack_stream (struct unpack *u, struct archive *a, ib_error_t *err)
{
  cleanup_free char *prev = NULL; /* the last entry applied, for errors between entries */
  for (;;)
    {
      struct archive_entry *e;
      int r = archive_read_next_header (a, &e);
      if (r == ARCHIVE_EOF)
        break;
      if (r == ARCHIVE_RETRY || r < ARCHIVE_WARN)
        {
          /* RETRY: a damaged header (bad checksum); libarchive would skip
           * ahead to the next plausible one, we refuse the layer */
          arch_error (u, a, NULL, err);
          if (prev)
            return ib_error_prefix (err, "the tar header after entry %s", prev);
          return ib_error_prefix (err, "the first tar header");
        }
      if (r == ARCHIVE_WARN)
        ib_debug ("%s", archive_error_string (a));
      u->stats->entries++;
      cleanup_free char *name = NULL;
      if (normalize_name (archive_entry_pathname (e), &name, err) < 0)
        return -1;
      if (*name == '\0')
        apply_root_entry (u, e); /* "./": the target itself */
      else if (apply_entry (u, a, e, name, err) < 0)
        return -1;
      free (prev);
      prev = steal_pointer (&name);
    }
  /* Hash what follows the end-of-archive blocks too: diff_id covers it all. */
  for (;;)
    {
      const void *buf;
      ssize_t n = src_next (u->src, &buf);
      if (n < 0)
        return ib_error_set (err, u->src->status, "%s", u->src->msg);
      if (n == 0)
        break;
    }
  return apply_dirmeta (u, err);
}

static ssize_t
fd_read (void *ud, void *buf, size_t len, ib_error_t *err)
{
  int fd = *(int *) ud;
  for (;;)
    {
      ssize_t n = read (fd, buf, len);
      if (n >= 0)
        return n;
      if (errno != EINTR)
        return ib_error_sys (err, errno, "read");
    }
}

int
ib_unpack_layer (const char *layer_path, const char *target, char diff_id[IB_DIGEST_LEN],
                 ib_unpack_stats_t *stats, ib_error_t *err)
{
  cleanup_close int fd = open (layer_path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return ib_error_sys (err, errno, "unpack layer %s: open", layer_path);
  posix_fadvise (fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  return ib_unpack_layer_stream (layer_path, fd_read, &fd, target, diff_id, stats, err);
}

int
ib_unpack_layer_stream (const char *name, ib_layer_read_fn read_fn, void *ud, const char *target,
                        char diff_id[IB_DIGEST_LEN], ib_unpack_stats_t *stats, ib_error_t *err)
{
  ib_unpack_stats_t local;
  if (stats == NULL)
    stats = &local;
  memset (stats, 0, sizeof *stats);

  struct src s;
  struct unpack u = { .rootfd = -1, .src = &s, .stats = stats, .pc_fd = -1,
                      .euid = geteuid (), .egid = getegid () };
  int ret = -1;
  struct archive *a = NULL;

  u.rootfd = open (target, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (u.rootfd < 0 || fstat (u.rootfd, &u.root_st) < 0)
    {
      ib_error_sys (err, errno, "open target %s", target);
      unpack_free (&u);
      return ib_error_prefix (err, "unpack layer %s", name);
    }
  /* Files are created with their final modes; the process umask (shared
   * by all threads) is 0 for the time of the unpack. */
  mode_t old_umask = umask (0);
  if (src_open (&s, read_fn, ud, err) < 0)
    goto out;
  a = archive_read_new ();
  if (a == NULL)
    abort ();
  archive_read_support_format_tar (a);
  archive_read_support_format_empty (a);
  if (archive_read_open (a, &s, NULL, src_read_cb, NULL) != ARCHIVE_OK)
    {
      arch_error (&u, a, NULL, err);
      goto out;
    }
  ret = unpack_stream (&u, a, err);
  if (ret == 0 && stats->skipped)
    ib_warn ("unpack layer %s: %llu device node%s or special file%s skipped (%s%s)", name,
             (unsigned long long) stats->skipped, stats->skipped > 1 ? "s" : "",
             stats->skipped > 1 ? "s" : "", u.skipped_names.data,
             stats->skipped > 4 ? ", ..." : "");
  if (ret == 0 && u.caps_failed)
    ib_warn ("unpack layer %s: file capabilities (security.capability) not set on %llu file%s "
             "(%s%s): %s",
             name, (unsigned long long) u.caps_failed, u.caps_failed > 1 ? "s" : "",
             u.caps_names.data, u.caps_failed > 4 ? ", ..." : "", strerror (u.caps_errno));
out:
  if (a)
    archive_read_free (a);
  unpack_free (&u);
  src_close (&s); /* joins the decoder: s.total and s.hash are final */
  umask (old_umask);
  stats->bytes = s.total;
  if (ret == 0 && diff_id)
    {
      ib_sha256_final (s.hash, diff_id);
      s.hash = NULL;
    }
  ib_sha256_free (s.hash);
  s.hash = NULL;
  if (ret < 0)
    return ib_error_prefix (err, "unpack layer %s", name);
  return 0;
}

/* ---------------------------------------------------------------------- */
/* Copying trees.                                                         */

struct copy
{
  int dst_root;
  bool keep_links;       /* hard links kept within the tree (else each name is a file) */
  hmap_t links;          /* ino_key of a source inode -> its first copy (path under dst) */
};

static void
copy_xattrs (int sfd, int dfd, const char *shown)
{
  char list[65536];
  ssize_t n = flistxattr (sfd, list, sizeof list);
  if (n <= 0)
    return;
  for (char *k = list; k < list + n; k += strlen (k) + 1)
    {
      if (!ib_str_has_prefix (k, "user.") && strcmp (k, "security.capability") != 0)
        continue;
      char val[65536];
      ssize_t vn = fgetxattr (sfd, k, val, sizeof val);
      if (vn < 0 || fsetxattr (dfd, k, val, (size_t) vn, 0) < 0)
        ib_debug ("%s: xattr %s not copied: %s", shown, k, strerror (errno));
    }
}

/* The data of a regular file (`st` its stat) from in to out.  A file with
 * holes (a sparse file: lastlog, a disk image) keeps them: a reflink where
 * the filesystem can, else its data segments (SEEK_DATA / SEEK_HOLE) are
 * copied and the size set; other files go through ib_copy_fd_data. */
static int
copy_file_data (int in, int out, const struct stat *st, const char *shown, ib_error_t *err)
{
  if ((uint64_t) st->st_blocks * 512 >= (uint64_t) st->st_size)
    return ib_copy_fd_data (in, out, shown, err);
  if (ioctl (out, FICLONE, in) == 0)
    return 0;
  cleanup_free char *buf = NULL;
  off_t pos = 0;
  for (;;)
    {
      off_t data = lseek (in, pos, SEEK_DATA);
      if (data < 0 && errno == ENXIO)
        break; /* only a hole after pos */
      if (data < 0 && pos == 0 && (errno == EINVAL || errno == EOPNOTSUPP))
        return ib_copy_fd_data (in, out, shown, err); /* no SEEK_DATA here */
      if (data < 0)
        return ib_error_sys (err, errno, "seek %s", shown);
      off_t hole = lseek (in, data, SEEK_HOLE);
      if (hole < 0)
        return ib_error_sys (err, errno, "seek %s", shown);
      if (buf == NULL)
        buf = xmalloc (1 << 17);
      for (off_t off = data; off < hole;)
        {
          size_t want = hole - off < (1 << 17) ? (size_t) (hole - off) : (1 << 17);
          ssize_t n = pread (in, buf, want, off);
          if (n < 0 && errno == EINTR)
            continue;
          if (n < 0)
            return ib_error_sys (err, errno, "read %s", shown);
          if (n == 0)
            break; /* the file shrank under us */
          for (ssize_t done = 0; done < n;)
            {
              ssize_t w = pwrite (out, buf + done, (size_t) (n - done), off + done);
              if (w < 0 && errno == EINTR)
                continue;
              if (w < 0)
                return ib_error_sys (err, errno, "write copy of %s", shown);
              done += w;
            }
          off += n;
        }
      pos = hole;
    }
  if (ftruncate (out, st->st_size) < 0)
    return ib_error_sys (err, errno, "truncate copy of %s", shown);
  return 0;
}

static int copy_dir (struct copy *c, int sfd, int dfd, const char *rel, const char *shown,
                     ib_error_t *err);

static int
copy_entry (struct copy *c, int sfd, int dfd, const char *name, const char *rel,
            const char *shown, ib_error_t *err)
{
  struct stat st;
  if (fstatat (sfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
    return ib_error_sys (err, errno, "stat %s", shown);
  struct timespec ts[2] = { st.st_atim, st.st_mtim };
  cleanup_free char *lk = NULL;
  if (c->keep_links && !S_ISDIR (st.st_mode) && st.st_nlink > 1)
    {
      lk = ino_key (&st);
      hslot_t *hs = hmap_find (&c->links, lk);
      if (hs && linkat (c->dst_root, hs->val, dfd, name, 0) == 0)
        return 0;
    }
  switch (st.st_mode & S_IFMT)
    {
    case S_IFDIR:
      {
        if (mkdirat (dfd, name, 0700) < 0)
          return ib_error_sys (err, errno, "create %s", shown);
        cleanup_close int s2 = openat (sfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        bool restore = false;
        if (s2 < 0 && errno == EACCES && st.st_uid == geteuid ()
            && fchmodat (sfd, name, (st.st_mode & 07777) | 0500, 0) == 0)
          {
            restore = true;
            s2 = openat (sfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
          }
        if (s2 < 0)
          return ib_error_sys (err, errno, "open %s", shown);
        cleanup_close int d2 = openat (dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (d2 < 0)
          return ib_error_sys (err, errno, "open copy of %s", shown);
        int r = copy_dir (c, s2, d2, rel, shown, err);
        if (restore)
          fchmod (s2, st.st_mode & 07777);
        if (r < 0)
          return r;
        if (fchown (d2, st.st_uid, st.st_gid) < 0)
          ignore_chown_error (shown);
        if (fchmod (d2, st.st_mode & 07777) < 0)
          return ib_error_sys (err, errno, "chmod copy of %s", shown);
        copy_xattrs (s2, d2, shown);
        if (futimens (d2, ts) < 0)
          return ib_error_sys (err, errno, "set times of copy of %s", shown);
        return 0;
      }
    case S_IFREG:
      {
        cleanup_close int in = openat (sfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (in < 0 && errno == EACCES && st.st_uid == geteuid ()
            && fchmodat (sfd, name, (st.st_mode & 07777) | 0400, 0) == 0)
          {
            in = openat (sfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
            fchmodat (sfd, name, st.st_mode & 07777, 0);
          }
        if (in < 0)
          return ib_error_sys (err, errno, "open %s", shown);
        cleanup_close int out
            = openat (dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (out < 0)
          return ib_error_sys (err, errno, "create copy of %s", shown);
        if (copy_file_data (in, out, &st, shown, err) < 0)
          return -1;
        if (fchown (out, st.st_uid, st.st_gid) < 0)
          ignore_chown_error (shown);
        if (fchmod (out, st.st_mode & 07777) < 0)
          return ib_error_sys (err, errno, "chmod copy of %s", shown);
        copy_xattrs (in, out, shown);
        if (futimens (out, ts) < 0)
          return ib_error_sys (err, errno, "set times of copy of %s", shown);
        break;
      }
    case S_IFLNK:
      {
        size_t sz = (size_t) st.st_size + 2;
        cleanup_free char *target = xmalloc (sz);
        ssize_t n = readlinkat (sfd, name, target, sz);
        if (n < 0 || (size_t) n >= sz)
          return ib_error_sys (err, n < 0 ? errno : ENAMETOOLONG, "readlink %s", shown);
        target[n] = '\0';
        if (symlinkat (target, dfd, name) < 0)
          return ib_error_sys (err, errno, "create copy of %s", shown);
        if (fchownat (dfd, name, st.st_uid, st.st_gid, AT_SYMLINK_NOFOLLOW) < 0)
          ignore_chown_error (shown);
        if (utimensat (dfd, name, ts, AT_SYMLINK_NOFOLLOW) < 0)
          ib_debug ("%s: symlink times not copied: %s", shown, strerror (errno));
        break;
      }
    default:
      {
        if (mknodat (dfd, name, (st.st_mode & S_IFMT) | 0600, st.st_rdev) < 0)
          {
            if (errno == EPERM || errno == EACCES)
              {
                ib_warn ("%s: device node not copied: %s", shown, strerror (errno));
                return 0;
              }
            return ib_error_sys (err, errno, "create copy of %s", shown);
          }
        if (fchownat (dfd, name, st.st_uid, st.st_gid, AT_SYMLINK_NOFOLLOW) < 0)
          ignore_chown_error (shown);
        if (fchmodat (dfd, name, st.st_mode & 07777, 0) < 0)
          return ib_error_sys (err, errno, "chmod copy of %s", shown);
        if (utimensat (dfd, name, ts, AT_SYMLINK_NOFOLLOW) < 0)
          return ib_error_sys (err, errno, "set times of copy of %s", shown);
        break;
      }
    }
  if (lk && hmap_find (&c->links, lk) == NULL)
    hmap_put (&c->links, lk, xstrdup (rel));
  return 0;
}

static int
copy_dir (struct copy *c, int sfd, int dfd, const char *rel, const char *shown, ib_error_t *err)
{
  int rfd = openat (sfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (rfd < 0)
    return ib_error_sys (err, errno, "open %s", shown);
  DIR *d = fdopendir (rfd);
  if (d == NULL)
    {
      int e = errno;
      close (rfd);
      return ib_error_sys (err, e, "open %s", shown);
    }
  int ret = 0;
  struct dirent *de;
  errno = 0;
  while (ret == 0 && (de = readdir (d)) != NULL)
    {
      if (strcmp (de->d_name, ".") == 0 || strcmp (de->d_name, "..") == 0)
        continue;
      cleanup_free char *crel = *rel ? xasprintf ("%s/%s", rel, de->d_name) : xstrdup (de->d_name);
      cleanup_free char *cshown = xasprintf ("%s/%s", shown, de->d_name);
      ret = copy_entry (c, sfd, dfd, de->d_name, crel, cshown, err);
    }
  closedir (d);
  return ret;
}

static int copy_tree (const char *src, const char *dst, bool keep_links, ib_error_t *err);

int
ib_copy_tree (const char *src, const char *dst, ib_error_t *err)
{
  return copy_tree (src, dst, true, err);
}

int
ib_copy_rootfs (const char *src, const char *dst, ib_error_t *err)
{
  return copy_tree (src, dst, false, err);
}

static int
copy_tree (const char *src, const char *dst, bool keep_links, ib_error_t *err)
{
  cleanup_close int sfd = open (src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (sfd < 0)
    return ib_error_sys (err, errno, "copy %s: open", src);
  struct stat st;
  if (fstat (sfd, &st) < 0)
    return ib_error_sys (err, errno, "copy %s: stat", src);
  if (mkdir (dst, 0700) < 0)
    return ib_error_sys (err, errno, "copy %s: create %s", src, dst);
  struct copy c = { .dst_root = open (dst, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC),
                    .keep_links = keep_links };
  int ret = -1;
  if (c.dst_root < 0)
    ib_error_sys (err, errno, "copy %s: open %s", src, dst);
  else if (copy_dir (&c, sfd, c.dst_root, "", src, err) == 0)
    {
      struct timespec ts[2] = { st.st_atim, st.st_mtim };
      if (fchown (c.dst_root, st.st_uid, st.st_gid) < 0)
        ignore_chown_error (dst);
      if (fchmod (c.dst_root, st.st_mode & 07777) < 0 || futimens (c.dst_root, ts) < 0)
        ib_error_sys (err, errno, "copy %s: set metadata of %s", src, dst);
      else
        ret = 0;
    }
  if (c.dst_root >= 0)
    close (c.dst_root);
  hmap_free (&c.links, true);
  if (ret < 0)
    {
      ib_error_t e2 = NULL;
      if (ib_rm_rf (dst, &e2) < 0)
        ib_error_free (&e2);
      return ib_error_prefix (err, "copy tree %s to %s", src, dst);
    }
  return 0;
}

/* ---------------------------------------------------------------------- */
/* Snapshots.                                                             */

static bool
is_dir (const char *path)
{
  struct stat st;
  return stat (path, &st) == 0 && S_ISDIR (st.st_mode);
}

static void
record_snapshot (ib_store_t *store, const char *dest, const char *snap)
{
  ib_error_t err = NULL;
  cleanup_free char *tmproot = ib_path_join (store->root, "tmp");
  cleanup_free char *snaps = ib_path_join (store->root, "snapshots");
  /* declared before the first goto: cleanup would free them uninitialised */
  cleanup_free char *tmpl = NULL;
  cleanup_free char *copy = NULL;
  if (ib_mkdir_p (tmproot, 0700, &err) < 0 || ib_mkdir_p (snaps, 0700, &err) < 0)
    goto fail;
  tmpl = ib_path_join (tmproot, "snap-XXXXXX");
  if (mkdtemp (tmpl) == NULL)
    {
      ib_error_sys (&err, errno, "create %s", tmpl);
      goto fail;
    }
  copy = ib_path_join (tmpl, "rootfs");
  if (ib_copy_tree (dest, copy, &err) < 0)
    goto fail_rm;
  if (rename (copy, snap) < 0)
    {
      if (errno != EEXIST && errno != ENOTEMPTY)
        {
          ib_error_sys (&err, errno, "rename %s to %s", copy, snap);
          goto fail_rm;
        }
      ib_debug ("snapshot %s was recorded by another process", snap);
    }
  if (ib_rm_rf (tmpl, &err) < 0)
    goto fail;
  return;
fail_rm:
  {
    ib_error_t e2 = NULL;
    if (ib_rm_rf (tmpl, &e2) < 0)
      ib_error_free (&e2);
  }
fail:
  ib_warn ("snapshot not recorded: %s", err ? err->msg : "unknown error");
  ib_error_free (&err);
}

/* ---------------------------------------------------------------------- */
/* Copy-free trees: overlayfs.                                            */

static bool overlay_allowed;
static int overlay_state; /* 0: not tried yet, 1: works, -1: unavailable here */

void
ib_rootfs_allow_overlay (bool on)
{
  const char *e = getenv ("IMGBUILD_OVERLAY");
  overlay_allowed = on && !(e && strcmp (e, "0") == 0);
}

static char *
ovl_dir (const char *dest)
{
  return xasprintf ("%s.ovl", dest);
}

static bool
ovl_path_ok (const char *p)
{
  /* overlayfs' option syntax: ',' ':' '\\' and '=' would need escaping */
  return p[0] == '/' && strpbrk (p, ",:\\=") == NULL;
}

/* The lower layers named by the `lowers` file of overlay directory `ovl`
 * (DEST.ovl), top first, into *out; false (nothing added) when it has none. */
static bool
ovl_read_lowers (const char *ovl, char ***out)
{
  cleanup_free char *lfile = ib_path_join (ovl, "lowers");
  cleanup_free char *ltext = NULL;
  ib_error_t e = NULL;
  if (ib_read_file (lfile, &ltext, NULL, &e) < 0)
    {
      ib_error_free (&e);
      return false;
    }
  char *save = NULL;
  for (char *l = strtok_r (ltext, "\n", &save); l; l = strtok_r (NULL, "\n", &save))
    ib_strv_push (out, l);
  return true;
}

/* Whether directory `path` exists and holds nothing. */
static bool
dir_is_empty (const char *path)
{
  DIR *d = opendir (path);
  if (d == NULL)
    return false;
  bool empty = true;
  struct dirent *de;
  while (empty && (de = readdir (d)) != NULL)
    empty = strcmp (de->d_name, ".") == 0 || strcmp (de->d_name, "..") == 0;
  closedir (d);
  return empty;
}

/* The lower layers an overlay on `src` stacks, top first, into *out:
 * src's own upper directory and lower layers when src is an overlay made
 * here (or a layered snapshot, which has only src.ovl/), else src itself.
 * An upper directory holding nothing but its root (a tree just frozen,
 * ib_rootfs_freeze) is left out: the new upper gives the root. */
static void
ovl_lowers (const char *src, char ***out)
{
  cleanup_free char *sovl = ovl_dir (src);
  cleanup_strv char **below = NULL;
  if (!ovl_read_lowers (sovl, &below))
    {
      ib_strv_push (out, src);
      return;
    }
  cleanup_free char *up = ib_path_join (sovl, "upper");
  if (!dir_is_empty (up) || !is_dir (src))
    ib_strv_push (out, up);
  for (char **l = below; l && *l; l++)
    ib_strv_push (out, *l);
}

/* At most this many lower layers in one overlay (the kernel allows 500;
 * a deeper stack is copied). */
#define OVL_MAX_LOWERS 128

/* Whether dest can be an overlay over `lowers`.  The layers are named to
 * the kernel through descriptors (ovl_mount), so no path needs escaping
 * and the options fit in a page; where /proc is missing they are named by
 * path, which must not need escaping, within a page. */
static bool
ovl_fits (const char *dest, char *const *lowers)
{
  size_t n = ib_strv_len ((char **) lowers);
  if (n == 0 || n > OVL_MAX_LOWERS)
    return false;
  if (access ("/proc/self/fd", X_OK) == 0)
    return true;
  size_t len = 2 * strlen (dest) + 64;
  bool ok = ovl_path_ok (dest);
  for (char *const *l = lowers; *l; l++)
    {
      ok = ok && ovl_path_ok (*l);
      len += strlen (*l) + 1;
    }
  return ok && len < 4000;
}

/* The name of `path` in mount options: /proc/self/fd/N for a descriptor
 * opened on it (added to *fds; the caller closes them after the mount),
 * else the path itself.  Through descriptors the store's host paths never
 * appear in /proc/self/mountinfo, which a step can read (issue 19). */
static void
ovl_name (ib_buf_t *o, const char *path, int *fds, size_t *n_fds)
{
  int fd = open (path, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    {
      ib_buf_puts (o, path); /* the mount names the failure */
      return;
    }
  fds[(*n_fds)++] = fd;
  char name[40];
  snprintf (name, sizeof name, "/proc/self/fd/%d", fd);
  if (access (name, F_OK) == 0)
    ib_buf_puts (o, name);
  else
    ib_buf_puts (o, path);
}

/* Mount an overlay on target (an existing directory): lower layers
 * `lowers` (top first); with `ovl` (DEST.ovl) its upper and work
 * directories, else read-only without them.  userxattr first (an
 * unprivileged mount needs it, Linux 5.11+), then without.  Returns
 * mount(2)'s answer, errno set. */
static int
ovl_mount_flags (const char *target, char *const *lowers, const char *ovl, unsigned long flags)
{
  int fds[OVL_MAX_LOWERS + 2];
  size_t n_fds = 0;
  ib_buf_t o = { 0 };
  ib_buf_puts (&o, "lowerdir=");
  size_t n = 0;
  for (char *const *l = lowers; *l && n < OVL_MAX_LOWERS; l++, n++)
    {
      if (l != lowers)
        ib_buf_puts (&o, ":");
      ovl_name (&o, *l, fds, &n_fds);
    }
  if (ovl)
    {
      cleanup_free char *upper = ib_path_join (ovl, "upper");
      cleanup_free char *work = ib_path_join (ovl, "work");
      ib_buf_puts (&o, ",upperdir=");
      ovl_name (&o, upper, fds, &n_fds);
      ib_buf_puts (&o, ",workdir=");
      ovl_name (&o, work, fds, &n_fds);
    }
  cleanup_free char *opts = ib_buf_steal (&o);
  cleanup_free char *ux = xasprintf ("%s,userxattr", opts);
  int r = mount ("overlay", target, "overlay", flags, ux);
  if (r < 0)
    r = mount ("overlay", target, "overlay", flags, opts);
  int e = errno;
  for (size_t i = 0; i < n_fds; i++)
    close (fds[i]);
  errno = e;
  return r;
}

/* dest as the read-write overlay of DEST.ovl over `lowers`. */
static int
ovl_mount (const char *dest, char *const *lowers)
{
  cleanup_free char *ovl = ovl_dir (dest);
  return ovl_mount_flags (dest, lowers, ovl, 0);
}

int
ib_rootfs_overlay_from (const char *src, const char *dest, ib_error_t *err)
{
  if (!overlay_allowed || overlay_state < 0)
    return 0;
  cleanup_strv char **lowers = NULL;
  ovl_lowers (src, &lowers);
  ib_error_t e = NULL;
  if (!ovl_fits (dest, lowers))
    {
      ib_debug ("%s: not stacked on %s (paths or depth): copying", dest, src);
      return 0;
    }
  /* The merged root's owner, mode and times: src's (the top lower's root
   * for a layered snapshot, which has no directory of its own). */
  struct stat sst;
  if (stat (src, &sst) < 0 && stat (lowers[0], &sst) < 0)
    return ib_error_sys (err, errno, "overlay %s: stat %s", dest, src);
  cleanup_free char *ovl = ovl_dir (dest);
  cleanup_free char *upper = ib_path_join (ovl, "upper");
  cleanup_free char *work = ib_path_join (ovl, "work");
  if (mkdir (ovl, 0700) < 0 || mkdir (upper, 0755) < 0 || mkdir (work, 0700) < 0
      || (mkdir (dest, 0755) < 0 && errno != EEXIST))
    {
      int en = errno;
      if (ib_rm_rf (ovl, &e) < 0)
        ib_error_free (&e);
      return ib_error_sys (err, en, "overlay %s: create %s", dest, ovl);
    }
  /* The merged root takes the upper directory's owner, mode and times:
   * give it src's, so "/" looks unchanged to the layer diff. */
  struct timespec ts[2] = { sst.st_atim, sst.st_mtim };
  if (chown (upper, sst.st_uid, sst.st_gid) < 0 && errno != EINVAL)
    ib_debug ("overlay %s: chown upper: %s", dest, strerror (errno));
  chmod (upper, sst.st_mode & 07777);
  /* Opaque directories need user.* xattrs on the upper directory's file
   * system (tmpfs has them only since Linux 6.6); without them overlayfs
   * would fail rmdir-then-mkdir with EIO, so copy instead. */
  if (setxattr (upper, "user.imgbuild.probe", "1", 1, 0) < 0)
    {
      ib_debug ("overlayfs not used: %s lacks user xattrs (%s): rootfs trees are copied", upper,
                strerror (errno));
      overlay_state = -1;
      if (ib_rm_rf (ovl, &e) < 0)
        ib_error_free (&e);
      rmdir (dest);
      return 0;
    }
  removexattr (upper, "user.imgbuild.probe");
  if (ovl_mount (dest, lowers) < 0)
    {
      ib_debug ("overlayfs is not usable here (%s): rootfs trees are copied", strerror (errno));
      overlay_state = -1;
      if (ib_rm_rf (ovl, &e) < 0)
        ib_error_free (&e);
      rmdir (dest); /* the caller copies into it: it must not exist */
      return 0;
    }
  utimensat (AT_FDCWD, dest, ts, 0); /* the root's times, through the mount */
  overlay_state = 1;
  ib_buf_t lb = { 0 };
  for (char **l = lowers; *l; l++)
    ib_buf_printf (&lb, "%s\n", *l);
  cleanup_free char *dlowers = ib_path_join (ovl, "lowers");
  int r = ib_write_file_atomic (dlowers, lb.data, lb.len, 0600, err);
  ib_buf_free (&lb);
  if (r < 0)
    {
      ib_error_t e2 = NULL;
      if (ib_rootfs_remove (dest, &e2) < 0)
        ib_error_free (&e2);
      return ib_error_prefix (err, "overlay %s", dest);
    }
  ib_debug ("%s: overlay on %zu lower layer(s), top %s", dest, ib_strv_len (lowers), lowers[0]);
  return 1;
}

bool
ib_rootfs_overlay_clean (const char *dest, char **upper, char ***lowers)
{
  *upper = NULL;
  *lowers = NULL;
  cleanup_free char *ovl = ovl_dir (dest);
  cleanup_free char *up = ib_path_join (ovl, "upper");
  cleanup_strv char **below = NULL;
  if (!dir_is_empty (up) || !ovl_read_lowers (ovl, &below) || below == NULL)
    return false;
  *lowers = steal_pointer (&below);
  *upper = steal_pointer (&up);
  return true;
}

int
ib_rootfs_lower_view (ib_store_t *store, char *const *lowers, char **view, ib_error_t *err)
{
  *view = NULL;
  if (lowers[0] && !lowers[1])
    {
      *view = xstrdup (lowers[0]);
      return 0;
    }
  if (!ovl_fits (lowers[0], lowers))
    return ib_error_set (err, EINVAL, "lower view: %zu layers cannot be named in mount options",
                         ib_strv_len ((char **) lowers));
  cleanup_free char *dir = NULL;
  if (ib_store_tmp_dir (store, "lower", &dir, err) < 0)
    return -1;
  if (ovl_mount_flags (dir, lowers, NULL, MS_RDONLY) < 0)
    {
      int en = errno;
      rmdir (dir);
      return ib_error_sys (err, en, "lower view: mount an overlay of %zu layers",
                           ib_strv_len ((char **) lowers));
    }
  *view = steal_pointer (&dir);
  return 1;
}

void
ib_rootfs_lower_view_end (const char *view, int mounted)
{
  if (view && mounted > 0)
    {
      if (umount2 (view, MNT_DETACH) < 0)
        ib_debug ("lower view %s: unmount: %s", view, strerror (errno));
      rmdir (view);
    }
}

/* A layered snapshot: snapshots/<chain>.ovl/{upper,lowers}, an overlay
 * upper directory over the snapshots its lowers file names.  Usable when
 * overlays are, and every lower is there. */
static bool
layered_snapshot_ok (const char *snap)
{
  if (!overlay_allowed || overlay_state < 0)
    return false;
  cleanup_free char *ovl = ovl_dir (snap);
  cleanup_free char *up = ib_path_join (ovl, "upper");
  cleanup_free char *lfile = ib_path_join (ovl, "lowers");
  cleanup_free char *ltext = NULL;
  ib_error_t e = NULL;
  if (!is_dir (up) || ib_read_file (lfile, &ltext, NULL, &e) < 0)
    {
      ib_error_free (&e);
      return false;
    }
  char *save = NULL;
  for (char *l = strtok_r (ltext, "\n", &save); l; l = strtok_r (NULL, "\n", &save))
    if (!is_dir (l))
      return false;
  return true;
}

int
ib_rootfs_freeze (ib_store_t *store, const char *dest, const char *chain_hex, ib_error_t *err)
{
  if (!ib_rootfs_is_overlay (dest))
    return 0;
  cleanup_free char *snaps = ib_path_join (store->root, "snapshots");
  cleanup_free char *snap = ib_path_join (snaps, chain_hex);
  cleanup_free char *snap_ovl = ovl_dir (snap);
  if (is_dir (snap) || is_dir (snap_ovl))
    return 0;
  cleanup_free char *ovl = ovl_dir (dest);
  cleanup_free char *upper = ib_path_join (ovl, "upper");
  cleanup_free char *lfile = ib_path_join (ovl, "lowers");
  cleanup_free char *ltext = NULL;
  ib_error_t e = NULL;
  if (ib_read_file (lfile, &ltext, NULL, &e) < 0)
    {
      ib_error_free (&e);
      return 0;
    }
  /* Only trees whose lowers are all snapshots: a stage stacked on another
   * stage's tree (in tmp/, gone after the build) is not frozen. */
  cleanup_strv char **lowers = NULL;
  ib_strv_push (&lowers, snap_ovl); /* placeholder for the new top */
  char *save = NULL;
  size_t slen = strlen (snaps);
  for (char *l = strtok_r (ltext, "\n", &save); l; l = strtok_r (NULL, "\n", &save))
    {
      if (strncmp (l, snaps, slen) != 0 || l[slen] != '/')
        return 0;
      ib_strv_push (&lowers, l);
    }
  free (lowers[0]);
  lowers[0] = ib_path_join (snap_ovl, "upper");
  if (!ovl_fits (dest, lowers))
    return 0; /* too deep to stack once more: the tree stays as it is */
  if (!ovl_fits (dest, lowers + 1))
    return 0;
  struct stat rst;
  if (stat (dest, &rst) < 0)
    return ib_error_sys (err, errno, "freeze %s: stat", dest);

  cleanup_free char *tmproot = ib_path_join (store->root, "tmp");
  cleanup_free char *tmpl = ib_path_join (tmproot, "snap-XXXXXX");
  if (ib_mkdir_p (snaps, 0700, err) < 0)
    return -1;
  if (mkdtemp (tmpl) == NULL)
    return ib_error_sys (err, errno, "freeze %s: create %s", dest, tmpl);
  cleanup_free char *tup = ib_path_join (tmpl, "upper");
  cleanup_free char *tlow = ib_path_join (tmpl, "lowers");
  ib_buf_t lb = { 0 };
  for (char **l = lowers + 1; *l; l++)
    ib_buf_printf (&lb, "%s\n", *l);
  int r = ib_write_file_atomic (tlow, lb.data, lb.len, 0600, err);
  ib_buf_free (&lb);
  int um = r == 0 ? umount2 (dest, 0) : -1;
  int um_errno = errno;
  if (r < 0 || um < 0)
    {
      if (ib_rm_rf (tmpl, &e) < 0)
        ib_error_free (&e);
      if (r < 0)
        return -1;
      /* still in use (EBUSY): the tree stays mounted as it is, unfrozen */
      ib_debug ("%s: not frozen: unmount: %s", dest, strerror (um_errno));
      return 0;
    }
  /* From here the tree is unmounted: it must be mounted again, on the new
   * snapshot, or as it was when the snapshot could not be kept. */
  bool kept = rename (upper, tup) == 0 && rename (tmpl, snap_ovl) == 0;
  if (!kept)
    {
      int en = errno;
      if (access (tup, F_OK) == 0 && rename (tup, upper) < 0)
        return ib_error_sys (err, errno, "freeze %s: put back %s", dest, upper);
      if (ib_rm_rf (tmpl, &e) < 0)
        ib_error_free (&e);
      cleanup_free char *work = ib_path_join (ovl, "work");
      if (ib_rm_rf (work, err) < 0 || mkdir (work, 0700) < 0 || ovl_mount (dest, lowers + 1) < 0)
        return ib_error_sys (err, errno, "freeze %s: mount again", dest);
      ib_debug ("%s: snapshot %s not kept (%s)", dest, chain_hex, strerror (en));
      return 0;
    }
  if (ib_rm_rf (ovl, err) < 0 || rmdir (dest) < 0)
    return ib_error_prefix (err, "freeze %s", dest);
  int o = ib_rootfs_overlay_from (snap, dest, err);
  if (o <= 0)
    return o < 0 ? -1 : ib_error_set (err, EIO, "freeze %s: overlay on %s failed", dest, snap);
  struct timespec ts[2] = { rst.st_atim, rst.st_mtim };
  utimensat (AT_FDCWD, dest, ts, 0);
  ib_debug ("%s: frozen as snapshot %s (%zu lower layers)", dest, snap_ovl, ib_strv_len (lowers));
  return 1;
}

int
ib_rootfs_remove (const char *dest, ib_error_t *err)
{
  cleanup_free char *ovl = ovl_dir (dest);
  struct stat st;
  if (lstat (ovl, &st) == 0)
    {
      if (umount2 (dest, MNT_DETACH) < 0 && errno != EINVAL && errno != ENOENT)
        return ib_error_sys (err, errno, "unmount %s", dest);
      if (ib_rm_rf (ovl, err) < 0)
        return -1;
    }
  return ib_rm_rf (dest, err);
}

bool
ib_rootfs_is_overlay (const char *dest)
{
  cleanup_free char *ovl = ovl_dir (dest);
  struct stat st;
  return lstat (ovl, &st) == 0;
}

/* `dest`, a tree just unpacked from nothing for snapshot `snap`: with
 * overlays, it becomes the snapshot itself (a rename, no copy) and dest an
 * overlay on it; else (or when dest is an overlay already) the snapshot is
 * recorded as a copy.  Only a failure that leaves dest missing is an
 * error. */
static int
keep_snapshot (ib_store_t *store, const char *dest, const char *snap, ib_error_t *err)
{
  if (is_dir (snap))
    return 0;
  cleanup_free char *snaps = ib_path_join (store->root, "snapshots");
  ib_error_t e = NULL;
  if (!overlay_allowed || overlay_state < 0 || ib_rootfs_is_overlay (dest)
      || ib_mkdir_p (snaps, 0700, &e) < 0 || rename (dest, snap) < 0)
    {
      ib_error_free (&e);
      record_snapshot (store, dest, snap);
      return 0;
    }
  int o = ib_rootfs_overlay_from (snap, dest, err);
  if (o == 0 && ib_copy_rootfs (snap, dest, err) < 0)
    o = -1;
  return o < 0 ? ib_error_prefix (err, "prepare %s from snapshot %s", dest, snap) : 0;
}

int
ib_rootfs_prepare (ib_store_t *store, char *const *layer_digests, char *const *diff_ids,
                   const char *dest, bool snapshot, ib_error_t *err)
{
  size_t n = ib_strv_len (layer_digests);
  if (ib_strv_len (diff_ids) != n)
    return ib_error_set (err, EINVAL, "prepare %s: %zu layers but %zu diff_ids", dest, n,
                         ib_strv_len (diff_ids));
  for (size_t i = 0; i < n; i++)
    if (!ib_digest_valid (layer_digests[i]) || !ib_digest_valid (diff_ids[i]))
      return ib_error_set (err, EINVAL, "prepare %s: layer %zu: invalid digest %s / %s", dest, i,
                           layer_digests[i], diff_ids[i]);

  cleanup_free char *snaps = ib_path_join (store->root, "snapshots");
  size_t have = 0;
  cleanup_free char *base_snap = NULL;
  /* The longest stored prefix: a snapshot directory, or a layered one
   * (ib_rootfs_freeze) while overlays can be made. */
again:
  for (size_t k = n; k > 0; k--)
    {
      char chain[IB_DIGEST_LEN];
      ib_chain_id (diff_ids, k - 1, chain);
      cleanup_free char *p = ib_path_join (snaps, ib_digest_hex (chain));
      if (is_dir (p) || layered_snapshot_ok (p))
        {
          have = k;
          base_snap = steal_pointer (&p);
          break;
        }
    }

  if (base_snap)
    {
      ib_debug ("rootfs %s: from snapshot %s (%zu of %zu layers)", dest, base_snap, have, n);
      int o = ib_rootfs_overlay_from (base_snap, dest, err);
      if (o == 0 && !is_dir (base_snap))
        {
          /* overlays turned out unusable: a layered snapshot cannot be copied */
          free (steal_pointer (&base_snap));
          have = 0;
          goto again;
        }
      if (o < 0 || (o == 0 && ib_copy_rootfs (base_snap, dest, err) < 0))
        return ib_error_prefix (err, "prepare %s", dest);
    }
  else if (mkdir (dest, 0755) < 0)
    return ib_error_sys (err, errno, "prepare %s: create", dest);

  for (size_t i = have; i < n; i++)
    {
      cleanup_free char *blob = ib_store_blob_path (store, layer_digests[i]);
      char got[IB_DIGEST_LEN];
      int r;
      if (blob == NULL || access (blob, R_OK) < 0)
        r = ib_error_set (err, ENOENT, "layer %zu (%s) is not in the store", i, layer_digests[i]);
      else if ((r = ib_unpack_layer (blob, dest, got, NULL, err)) == 0
               && strcmp (got, diff_ids[i]) != 0)
        r = ib_error_set (err, EINVAL,
                          "layer %zu (%s): diff_id mismatch: the image config says %s, the "
                          "layer's content is %s",
                          i, layer_digests[i], diff_ids[i], got);
      if (r < 0)
        {
          ib_error_t e2 = NULL;
          if (ib_rootfs_remove (dest, &e2) < 0)
            ib_error_free (&e2);
          return ib_error_prefix (err, "prepare %s", dest);
        }
    }

  if (snapshot && have < n)
    {
      char chain[IB_DIGEST_LEN];
      ib_chain_id (diff_ids, n - 1, chain);
      cleanup_free char *snap = ib_path_join (snaps, ib_digest_hex (chain));
      if (have == 0)
        return keep_snapshot (store, dest, snap, err);
      /* an overlay on a snapshot: its upper directory becomes a layered
       * snapshot, no copy; else the tree is copied */
      int f = ib_rootfs_freeze (store, dest, ib_digest_hex (chain), err);
      if (f < 0)
        return ib_error_prefix (err, "prepare %s", dest);
      cleanup_free char *snap_ovl = ovl_dir (snap);
      if (f == 0 && !is_dir (snap) && !is_dir (snap_ovl))
        record_snapshot (store, dest, snap);
    }
  return 0;
}

/* ---------------------------------------------------------------------- */
/* Pull and unpack in one pass.                                           */

struct pull_reader
{
  ib_pull_session_t *s;
  size_t layer;
  ib_fetch_cursor_t cur;
};

static ssize_t
pull_read (void *ud, void *buf, size_t len, ib_error_t *err)
{
  struct pull_reader *pr = ud;
  return ib_pull_session_read (pr->s, pr->layer, &pr->cur, buf, len, err);
}

static void
remove_quietly (const char *path)
{
  ib_error_t e = NULL;
  if (ib_rm_rf (path, &e) < 0)
    ib_error_free (&e);
}

int
ib_rootfs_pull (ib_store_t *store, const char *ref, const char *os, const char *arch,
                const char *variant, const char *dest, bool snapshot, ib_error_t *err)
{
  ib_pull_session_t *s = NULL;
  if (ib_pull_begin (store, ref, os, arch, variant, true, &s, err) < 0)
    return -1;
  const ib_manifest_t *m = ib_pull_session_manifest (s);
  cleanup_strv char **diff_ids = NULL;
  cleanup_strv char **digests = NULL;
  size_t n = m->n_layers;
  if (ib_config_diff_ids (ib_pull_session_config (s), &diff_ids, err) < 0)
    {
      ib_pull_abort (s);
      return ib_error_prefix (err, "pull %s", ref);
    }
  if (ib_strv_len (diff_ids) != n)
    {
      ib_pull_abort (s);
      return ib_error_set (err, EINVAL,
                           "pull %s: the config lists %zu diff_ids but the manifest %zu layers",
                           ref, ib_strv_len (diff_ids), n);
    }
  for (size_t i = 0; i < n; i++)
    ib_strv_push (&digests, m->layers[i].digest);
  if (mkdir (dest, 0755) < 0)
    {
      int e = errno;
      ib_pull_abort (s);
      return ib_error_sys (err, e, "unpack %s into %s", ref, dest);
    }

  /* Layers unpack in order, each while it (and the ones after it) download. */
  bool start_over = false;
  for (size_t i = 0; i < n; i++)
    {
      struct pull_reader pr = { .s = s, .layer = i };
      char got[IB_DIGEST_LEN];
      char name[64];
      snprintf (name, sizeof name, "%zu (%.19s..)", i, digests[i]);
      ib_error_t e = NULL;
      int r = ib_unpack_layer_stream (name, pull_read, &pr, dest, got, NULL, &e);
      if (r < 0 && e->status == ESTALE)
        {
          /* the download of this layer started over: unpack from the store once it is there */
          ib_debug ("%s", e->msg);
          ib_error_free (&e);
          start_over = true;
          break;
        }
      if (r == 0 && strcmp (got, diff_ids[i]) != 0)
        r = ib_error_set (&e, EINVAL,
                          "layer %zu (%s): diff_id mismatch: the image config says %s, the "
                          "layer's content is %s",
                          i, digests[i], diff_ids[i], got);
      if (r < 0)
        {
          ib_pull_session_layer_done (s, i, false, e->msg);
          ib_pull_abort (s);
          remove_quietly (dest);
          *err = e;
          return ib_error_prefix (err, "pull %s", ref);
        }
      ib_pull_session_layer_done (s, i, true, NULL);
    }
  if (ib_pull_end (s, NULL, err) < 0)
    {
      remove_quietly (dest);
      return -1;
    }
  if (start_over)
    {
      remove_quietly (dest);
      return ib_rootfs_prepare (store, digests, diff_ids, dest, snapshot, err);
    }
  if (snapshot && n > 0)
    {
      char chain[IB_DIGEST_LEN];
      ib_chain_id (diff_ids, n - 1, chain);
      cleanup_free char *snaps = ib_path_join (store->root, "snapshots");
      cleanup_free char *snap = ib_path_join (snaps, ib_digest_hex (chain));
      if (keep_snapshot (store, dest, snap, err) < 0)
        return ib_error_prefix (err, "pull %s", ref);
    }
  return 0;
}
