/* rootfs/unpack.c — apply one image layer beneath a directory (image-spec
 * layer.md: changesets, whiteouts, opaque whiteouts), with libarchive.
 *
 * The layer's bytes are decompressed and hashed by the decoder
 * (rootfs/decode.c) in a thread of its own; libarchive only ever sees the
 * plain tar stream it hands over.
 *
 * Every path of an entry is resolved beneath the target with
 * ib_open_dir_in_root (rootfs/resolve.c: openat2(RESOLVE_IN_ROOT |
 * RESOLVE_NO_MAGICLINKS), or the same walk in user space): symlinks
 * planted by earlier entries or layers are followed as the container would
 * see them, i.e. never out of the target.  Entries are then created
 * relative to the O_PATH fd of their parent directory, never by path.
 */
#include "rootfs/unpack.h"
#include "common/util.h"
#include "rootfs/owner.h"
#include "rootfs/resolve.h"
#include "rootfs/rootfs_int.h"
#include "rootfs/unpack_int.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#define DEFAULT_MAX_LAYER_BYTES (64ULL << 30)
static uint64_t max_bytes_override;

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

/* libarchive's read callback over the decoder's ring (rootfs/decode.c). */
static la_ssize_t
src_read_cb (struct archive *a, void *ud, const void **buf)
{
  struct src *s = ud;
  ssize_t n = rfs_src_next (s, buf);
  if (n < 0)
    {
      archive_set_error (a, s->status ? s->status : EIO, "%s", s->msg);
      return -1;
    }
  return n;
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

/* "dev:ino/name": a name inside the directory `dir`. */
char *
unp_name_key (const struct stat *dir, const char *name)
{
  return xasprintf ("%jx:%jx/%s", (uintmax_t) dir->st_dev, (uintmax_t) dir->st_ino, name);
}

static bool
same_inode (const struct stat *a, const struct stat *b)
{
  return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* ---------------------------------------------------------------------- */
/* Removal beneath a directory fd, never following symlinks.              */

int
unp_remove_at (int pfd, const char *name, const char *shown, ib_error_t *err)
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
  DIR *d = rfs_fdopendir (fd);
  if (d == NULL)
    return ib_error_sys (err, errno, "remove %s", shown);
  cleanup_strv char **names = rfs_dir_names (d);
  int ret = 0;
  for (size_t i = 0; names && names[i] && ret == 0; i++)
    {
      cleanup_free char *sub = xasprintf ("%s/%s", shown, names[i]);
      ret = unp_remove_at (dirfd (d), names[i], sub, err);
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

void
unp_free (struct unpack *u)
{
  rfs_hmap_free (&u->names, false);
  rfs_hmap_free (&u->holders, false);
  rfs_hmap_free (&u->dir_idx, false);
  rfs_hmap_free (&u->links, false);
  rfs_hmap_free (&u->nondirs, false);
  for (size_t i = 0; i < u->n_whs; i++)
    {
      free (u->whs[i].path);
      rfs_hmap_free (&u->whs[i].spared, false);
    }
  free (u->whs);
  rfs_hmap_free (&u->wh_idx, false);
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
  cleanup_free char *k = rfs_ino_key (st);
  hslot_t *s = rfs_hmap_find (&u->dir_idx, k);
  if (s && s->val)
    {
      u->dirs[(uintptr_t) s->val - 1].dead = true;
      s->val = NULL;
    }
}

struct dirmeta *
unp_dirmeta_get (struct unpack *u, const char *path, const struct stat *st, bool *fresh)
{
  cleanup_free char *k = rfs_ino_key (st);
  hslot_t *s = rfs_hmap_find (&u->dir_idx, k);
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
  rfs_hmap_put (&u->dir_idx, k, (void *) (uintptr_t) u->n_dirs);
  *fresh = true;
  return d;
}

/* Directory `path` (stat st) is about to change: an entry of this layer is
 * created in it or a whiteout removes one.  Unless the layer has an entry for
 * the directory itself (which then sets its metadata), it keeps the mtime it
 * had (unp_apply_dirmeta puts it back): the tree depends on the layers, not on
 * the time of the unpack (umoci does the same). */
void
unp_keep_times (struct unpack *u, const char *path, const struct stat *st)
{
  bool fresh;
  struct dirmeta *d = unp_dirmeta_get (u, path, st, &fresh);
  if (!fresh)
    return;
  d->set_times = true;
  d->ts[0] = st->st_atim;
  d->ts[1] = st->st_mtim;
}

/* Directory `path` (O_PATH fd dfd, stat st) lacks owner write/search
 * permission: grant it for the rest of the unpack and restore the mode at the
 * end (rootless: CAP_DAC_OVERRIDE does not help with our own files). */
int
unp_make_writable (struct unpack *u, const char *path, int dfd, const struct stat *st, ib_error_t *err)
{
  if ((st->st_mode & 0700) == 0700)
    return 0;
  if (faccessat (dfd, ".", W_OK | X_OK, AT_EACCESS) == 0)
    return 0;
  bool fresh;
  unp_dirmeta_get (u, path, st, &fresh); /* remembers the original mode if new */
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
  int fd = ib_open_dir_in_root (u->rootfd, path);
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
      int next = ib_open_dir_in_root (u->rootfd, prefix);
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
          unp_keep_times (u, parent, &pst);
          if (unp_make_writable (u, parent, cur, &pst, err) < 0)
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
          cleanup_free char *k = unp_name_key (&pst, comp);
          rfs_hmap_put (&u->names, k, NULL);
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
      cleanup_free char *k = rfs_ino_key (&st);
      if (rfs_hmap_find (&u->holders, k))
        break;
      rfs_hmap_put (&u->holders, k, NULL);
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
  cleanup_free char *nk = unp_name_key (dst, name);
  bool mine = rfs_hmap_find (&u->names, nk) != NULL;
  bool holds = false;
  if (S_ISDIR (st.st_mode))
    {
      cleanup_free char *ik = rfs_ino_key (&st);
      holds = rfs_hmap_find (&u->holders, ik) != NULL;
    }
  if (!mine && !holds)
    {
      unp_keep_times (u, dpath, dst);
      if (unp_make_writable (u, dpath, dfd, dst, err) < 0)
        return -1;
      return unp_remove_at (dfd, name, shown, err);
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
      if (unp_make_writable (u, path, dfd, dst, err) < 0)
        return -1;
      rfd = openat (dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    }
  if (rfd < 0)
    return ib_error_sys (err, errno, "open /%s", path);
  DIR *d = rfs_fdopendir (rfd);
  if (d == NULL)
    return ib_error_sys (err, errno, "open /%s", path);
  cleanup_strv char **names = rfs_dir_names (d);
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
      if (ib_owner_is_xattr (xn))
        {
          /* the tar header says who owns the file; a record the layer
           * carries is refused (rootfs/owner.h) */
          ib_debug ("/%s: xattr %s skipped", name, xn);
          continue;
        }
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
void
unp_clear_xattrs (int fd, const char *name)
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

/* (side mode) Whether directory path `dir`, or one above it, is a symlink
 * this layer made: beneath the target it would resolve through whatever
 * the lower layers have at the symlink's target. */
static bool
through_own_link (struct unpack *u, const char *dir)
{
  if (u->links.n == 0 || *dir == '\0')
    return false;
  cleanup_free char *p = xstrdup (dir);
  for (char *c = p + strlen (p);; c--)
    {
      if (*c == '/' || *c == '\0')
        {
          char keep = *c;
          *c = '\0';
          bool hit = rfs_hmap_find (&u->links, p) != NULL;
          *c = keep;
          if (hit)
            return true;
        }
      if (c == p)
        return false;
    }
}

/* (side mode) An entry is about to replace pfd/base.  When that is a
 * directory the layer made as a parent (or whose entry came after its
 * children), the entries below it went, in order, wherever the lower
 * layers' tree led that path (a symlink there): they are not in the side
 * directory as they would be in the target. */
static int
side_replaces_parent (struct unpack *u, int pfd, const char *base, const char *name,
                      ib_error_t *err)
{
  struct stat st;
  if (!u->side || fstatat (pfd, base, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR (st.st_mode))
    return 0;
  cleanup_free char *k = rfs_ino_key (&st);
  hslot_t *slot = rfs_hmap_find (&u->dir_idx, k);
  const struct dirmeta *d = slot && slot->val ? &u->dirs[(uintptr_t) slot->val - 1] : NULL;
  if (d && d->set_owner && !d->late && !d->dead)
    return 0;
  u->dependent = "an entry in place of a directory made as a parent";
  return ib_error_set (err, EXDEV, "entry %s: %s", name, u->dependent);
}

/* What whiteout entry `base` (".wh." + victim) is: 1 plain (*victim set),
 * 2 opaque, 0 whiteout metadata (".wh..wh.*": ignored, a debug message
 * naming `name`), -1 an invalid name (*err set). */
static int
whiteout_kind (const char *name, const char *base, const char **victim, ib_error_t *err)
{
  *victim = base + 4;
  if (strcmp (base, ".wh..wh..opq") == 0)
    return 2;
  if (ib_str_has_prefix (*victim, ".wh."))
    {
      ib_debug ("entry %s: whiteout metadata ignored", name);
      return 0;
    }
  if (**victim == '\0' || strcmp (*victim, ".") == 0 || strcmp (*victim, "..") == 0)
    return ib_error_set (err, EINVAL, "entry %s: invalid whiteout name", name);
  return 1;
}

static int
apply_whiteout (struct unpack *u, const char *name, const char *dir, const char *base,
                ib_error_t *err)
{
  const char *victim;
  int kind = whiteout_kind (name, base, &victim, err);
  if (kind <= 0)
    return kind;
  bool opaque = kind == 2;

  ib_error_t re = NULL;
  cleanup_close int dfd = resolve_dir (u, dir, opaque, &re);
  if (dfd < 0)
    {
      if (!opaque && (re->status == ENOENT || re->status == ENOTDIR))
        {
          ib_error_free (&re); /* nothing there to delete */
          return 0;
        }
      ib_error_propagate (err, &re);
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

/* (side mode) Everything beneath side directory dfd (path rel) into
 * `spared`; false when some of it cannot be read. */
static bool
side_snapshot (int dfd, const char *rel, hmap_t *spared)
{
  int rfd = openat (dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *d = rfd >= 0 ? rfs_fdopendir (rfd) : NULL;
  if (d == NULL)
    return false;
  errno = 0;
  cleanup_strv char **names = rfs_dir_names (d);
  bool ok = names != NULL || errno == 0;
  closedir (d);
  for (size_t i = 0; ok && names && names[i]; i++)
    {
      cleanup_free char *sub = *rel ? xasprintf ("%s/%s", rel, names[i]) : xstrdup (names[i]);
      struct stat st;
      if (fstatat (dfd, names[i], &st, AT_SYMLINK_NOFOLLOW) < 0)
        return false;
      rfs_hmap_put (spared, sub, (void *) (uintptr_t) (S_ISDIR (st.st_mode) ? WH_DIR : WH_NONDIR));
      if (S_ISDIR (st.st_mode))
        {
          cleanup_close int sfd = openat (dfd, names[i], O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
          ok = sfd >= 0 && side_snapshot (sfd, sub, spared);
        }
    }
  return ok;
}

/* (side mode) A whiteout: recorded, with what this layer had put beneath
 * its path so far, for the merge to apply to the target (unpack_side.c).
 * An opaque whiteout makes its directory, as in order. */
static int
side_record_whiteout (struct unpack *u, const char *name, const char *dir, const char *base,
                      ib_error_t *err)
{
  const char *victim;
  ib_error_t invalid = NULL;
  int kind = whiteout_kind (name, base, &victim, &invalid);
  if (kind == 0)
    return 0;
  ib_error_free (&invalid); /* the in-order unpack says so */
  bool opaque = kind == 2;
  const char *why = NULL;
  hmap_t spared = { 0 };
  cleanup_free char *path = opaque ? xstrdup (dir)
                                   : (*dir ? xasprintf ("%s/%s", dir, victim) : xstrdup (victim));
  if (kind < 0)
    why = "an invalid whiteout";
  else if (opaque)
    {
      ib_error_t re = NULL;
      cleanup_close int dfd = resolve_dir (u, dir, true, &re);
      ib_error_free (&re);
      if (dfd < 0)
        why = "an opaque whiteout where the layer has a non-directory";
      else if (!side_snapshot (dfd, path, &spared))
        why = "a side directory that cannot be read";
    }
  else
    {
      struct stat st;
      cleanup_close int dfd = ib_open_dir_in_root (u->rootfd, dir);
      if (dfd >= 0 && fstatat (dfd, victim, &st, AT_SYMLINK_NOFOLLOW) == 0)
        {
          if (!S_ISDIR (st.st_mode))
            return 0; /* the layer's own: spared, nothing to do */
          rfs_hmap_put (&spared, path, (void *) (uintptr_t) WH_DIR);
          cleanup_close int sfd = openat (dfd, victim, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
          if (sfd < 0 || !side_snapshot (sfd, path, &spared))
            why = "a side directory that cannot be read";
        }
    }
  if (why)
    {
      rfs_hmap_free (&spared, false);
      u->dependent = why;
      return ib_error_set (err, EXDEV, "entry %s: %s", name, why);
    }
  if (u->n_whs == u->cap_whs)
    {
      u->cap_whs = u->cap_whs ? u->cap_whs * 2 : 16;
      u->whs = xrealloc (u->whs, u->cap_whs * sizeof *u->whs);
    }
  struct side_whiteout *w = &u->whs[u->n_whs++];
  hslot_t *last = rfs_hmap_find (&u->wh_idx, path);
  *w = (struct side_whiteout) { .path = steal_pointer (&path), .opaque = opaque, .spared = spared,
                                .next = last ? (size_t) (uintptr_t) last->val : 0 };
  rfs_hmap_put (&u->wh_idx, w->path, (void *) (uintptr_t) u->n_whs);
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
  struct stat tst, est;
  if (u->side)
    {
      /* the target must be this layer's own file, reached without a symlink */
      cleanup_close int sfd = through_own_link (u, tdir) ? -1 : ib_open_dir_in_root (u->rootfd, tdir);
      if (sfd < 0 || fstatat (sfd, tbase, &tst, AT_SYMLINK_NOFOLLOW) < 0)
        {
          u->dependent = "a hard link to a file of a lower layer";
          return ib_error_set (err, EXDEV, "entry %s: %s", name, u->dependent);
        }
    }
  cleanup_close int tfd = resolve_dir (u, tdir, false, err);
  if (tfd < 0)
    return ib_error_prefix (err, "entry %s: hardlink target %s", name, tname);
  if (fstatat (tfd, tbase, &tst, AT_SYMLINK_NOFOLLOW) < 0)
    return ib_error_sys (err, errno, "entry %s: hardlink target %s", name, tname);
  if (S_ISDIR (tst.st_mode))
    return ib_error_set (err, EPERM, "entry %s: hardlink target %s is a directory", name, tname);
  if (fstatat (pfd, base, &est, AT_SYMLINK_NOFOLLOW) == 0)
    {
      if (same_inode (&est, &tst))
        return 0;
      if (side_replaces_parent (u, pfd, base, name, err) < 0
          || unp_remove_at (pfd, base, name, err) < 0)
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
  if (u->side)
    {
      if (through_own_link (u, dir))
        {
          u->dependent = "a path through a symlink of its own";
          return ib_error_set (err, EXDEV, "entry %s: %s", name, u->dependent);
        }
      if (ib_str_has_prefix (base, ".wh."))
        return side_record_whiteout (u, name, dir, base, err);
    }
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
      unp_keep_times (u, dir, &pst);
      if (unp_make_writable (u, dir, own_pfd, &pst, err) < 0)
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
  if (!u->side) /* (the names whiteouts spare: a side layer has none) */
    {
      cleanup_free char *nk = unp_name_key (&pst, base);
      rfs_hmap_put (&u->names, nk, NULL);
    }

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
          if (u->side)
            rfs_hmap_put (&u->nondirs, name, NULL);
          if (unp_remove_at (pfd, base, name, err) < 0)
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
          /* (an existing directory may lack owner write permission, which
           * user.* xattrs need without CAP_FOWNER) */
          cleanup_close int pathfd
              = exists ? openat (pfd, base, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
          if (pathfd >= 0 && unp_make_writable (u, name, pathfd, &est, err) < 0)
            return ib_error_prefix (err, "entry %s", name);
          cleanup_close int fd = openat (pfd, base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
          if (fd >= 0 && exists)
            unp_clear_xattrs (fd, name);
          if (fd >= 0)
            apply_xattrs (u, e, fd, name);
        }
      bool fresh;
      struct dirmeta *d = unp_dirmeta_get (u, name, &est, &fresh);
      d->late |= u->side && exists;
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

  if (exists
      && (side_replaces_parent (u, pfd, base, name, err) < 0
          || unp_remove_at (pfd, base, name, err) < 0))
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
            if (side_replaces_parent (u, pfd, base, name, err) < 0
                || unp_remove_at (pfd, base, name, err) < 0)
              return ib_error_prefix (err, "entry %s", name);
            fd = openat (pfd, base, flags, create_mode);
          }
        if (fd < 0)
          return ib_error_sys (err, errno, "entry %s: create", name);
        if (write_file_data (u, a, fd, name, archive_entry_size (e), err) < 0)
          return -1;
        if (chown_needed && ib_owner_chown_fd (fd, uid, gid) < 0)
          rfs_ignore_chown_error (name);
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
        if (u->side)
          rfs_hmap_put (&u->links, name, NULL);
        if (fchownat (pfd, base, uid, gid, AT_SYMLINK_NOFOLLOW) < 0)
          rfs_ignore_chown_error (name);
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
          rfs_ignore_chown_error (name);
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
  cleanup_close int fd = ib_open_dir_in_root (u->rootfd, d->path);
  struct stat st;
  if (fd < 0 || fstat (fd, &st) < 0 || st.st_dev != d->dev || st.st_ino != d->ino)
    return 0; /* replaced by a later entry */
  char proc[64];
  snprintf (proc, sizeof proc, "/proc/self/fd/%d", fd);
  if (d->set_owner && ib_owner_chown_at (fd, "", d->uid, d->gid) < 0)
    rfs_ignore_chown_error (d->path);
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
int
unp_apply_dirmeta (struct unpack *u, ib_error_t *err)
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
          pfd = ib_open_dir_in_root (u->rootfd, parent);
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
      if (d->set_owner && ib_owner_chown_at (fd, nm, d->uid, d->gid) < 0)
        rfs_ignore_chown_error (d->path);
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
  unp_clear_xattrs (u->rootfd, ".");
  apply_xattrs (u, e, u->rootfd, ".");
  bool fresh;
  struct dirmeta *d = unp_dirmeta_get (u, "", &u->root_st, &fresh);
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
      ssize_t n = rfs_src_next (u->src, &buf);
      if (n < 0)
        return ib_error_set (err, u->src->status, "%s", u->src->msg);
      if (n == 0)
        break;
    }
  /* a layer on the side: its directories' metadata go on with the merge */
  return u->side ? 0 : unp_apply_dirmeta (u, err);
}

int
ib_unpack_layer (const char *layer_path, const char *target, char diff_id[IB_DIGEST_LEN],
                 ib_unpack_stats_t *stats, ib_error_t *err)
{
  cleanup_close int fd = open (layer_path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return ib_error_sys (err, errno, "unpack layer %s: open", layer_path);
  posix_fadvise (fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  return ib_unpack_layer_stream (layer_path, rfs_fd_read, &fd, target, diff_id, stats, err);
}

/* The process umask (shared by all threads) is 0 while any unpack runs:
 * files are created with their final modes.  Counted, for layers unpacked
 * at once (ib_unpack_layer_side). */
static pthread_mutex_t umask_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned umask_holders;
static mode_t umask_saved;

static void
umask_hold (void)
{
  pthread_mutex_lock (&umask_mu);
  if (umask_holders++ == 0)
    umask_saved = umask (0);
  pthread_mutex_unlock (&umask_mu);
}

static void
umask_release (void)
{
  pthread_mutex_lock (&umask_mu);
  if (--umask_holders == 0)
    umask (umask_saved);
  pthread_mutex_unlock (&umask_mu);
}

/* One layer's stream through u (set up by the caller: side or not) onto
 * `target`.  u is left for the caller to free. */
static int
unpack_run (struct unpack *u, const char *name, ib_layer_read_fn read_fn, void *ud,
            const char *target, char diff_id[IB_DIGEST_LEN], ib_unpack_stats_t *stats,
            ib_error_t *err)
{
  ib_unpack_stats_t local;
  if (stats == NULL)
    stats = &local;
  memset (stats, 0, sizeof *stats);

  struct src s;
  u->rootfd = -1;
  u->src = &s;
  u->stats = stats;
  u->pc_fd = -1;
  u->euid = geteuid ();
  u->egid = getegid ();
  int ret = -1;
  struct archive *a = NULL;

  u->rootfd = open (target, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (u->rootfd < 0 || fstat (u->rootfd, &u->root_st) < 0)
    {
      ib_error_sys (err, errno, "open target %s", target);
      return ib_error_prefix (err, "unpack layer %s", name);
    }
  umask_hold ();
  if (rfs_src_open (&s, read_fn, ud, err) < 0)
    goto out;
  a = archive_read_new ();
  if (a == NULL)
    abort ();
  archive_read_support_format_tar (a);
  archive_read_support_format_empty (a);
  if (archive_read_open (a, &s, NULL, src_read_cb, NULL) != ARCHIVE_OK)
    {
      arch_error (u, a, NULL, err);
      goto out;
    }
  ret = unpack_stream (u, a, err);
  if (ret == 0 && stats->skipped)
    ib_warn ("unpack layer %s: %llu device node%s or special file%s skipped (%s%s)", name,
             (unsigned long long) stats->skipped, stats->skipped > 1 ? "s" : "",
             stats->skipped > 1 ? "s" : "", u->skipped_names.data,
             stats->skipped > 4 ? ", ..." : "");
  if (ret == 0 && u->caps_failed)
    ib_warn ("unpack layer %s: file capabilities (security.capability) not set on %llu file%s "
             "(%s%s): %s",
             name, (unsigned long long) u->caps_failed, u->caps_failed > 1 ? "s" : "",
             u->caps_names.data, u->caps_failed > 4 ? ", ..." : "", strerror (u->caps_errno));
out:
  if (a)
    archive_read_free (a);
  parent_cache_drop (u);
  rfs_src_close (&s); /* joins the decoder: s.total and s.hash are final */
  u->src = NULL;
  umask_release ();
  stats->bytes = s.total;
  stats->decoder_hashed = s.decoder_hashed;
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

int
ib_unpack_layer_stream (const char *name, ib_layer_read_fn read_fn, void *ud, const char *target,
                        char diff_id[IB_DIGEST_LEN], ib_unpack_stats_t *stats, ib_error_t *err)
{
  struct unpack u = { 0 };
  int r = unpack_run (&u, name, read_fn, ud, target, diff_id, stats, err);
  unp_free (&u);
  return r;
}

int
unp_side_run (struct unpack *u, const char *name, ib_layer_read_fn read_fn, void *ud,
              const char *side_dir, char diff_id[IB_DIGEST_LEN], ib_unpack_stats_t *stats,
              ib_error_t *err)
{
  u->side = true;
  return unpack_run (u, name, read_fn, ud, side_dir, diff_id, stats, err);
}
