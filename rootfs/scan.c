/* rootfs/scan.c — the state of a tree before and after a build step
 * (rootfs/layer.h, ib_fs_scan*): a sorted array of its entries, made by
 * walking the tree, or for a step done in an overlay tree from its upper
 * directory and the lower layers.  rootfs/layer.c diffs two scans into a
 * layer.
 *
 * Reading order: the exclusions (rfs_normalize_excludes, rfs_excluded),
 * one entry (scan_record), the walk (scan_dir, rfs_scan_tree), then the
 * overlay scans (scan_upper, ib_fs_scan_overlay).
 */
#include "rootfs/layer.h"
#include "rootfs/owner.h"
#include "rootfs/rootfs_int.h"
#include "rootfs/userns.h"
#include "common/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

void
ib_fs_scan_free (ib_fs_scan_t *s)
{
  if (s == NULL)
    return;
  for (size_t i = 0; i < s->n; i++)
    {
      free (s->ents[i].path);
      free (s->ents[i].link);
    }
  free (s->ents);
  free (s);
}

void
ib_fs_scan_freep (ib_fs_scan_t **s)
{
  ib_fs_scan_free (*s);
}

/* Exclusions normalized like entry paths ("/proc/" -> "proc"). */
char **
rfs_normalize_excludes (char *const *exclude)
{
  char **v = NULL;
  for (size_t i = 0; exclude && exclude[i]; i++)
    {
      const char *p = exclude[i];
      while (*p == '/' || (p[0] == '.' && p[1] == '/'))
        p += *p == '/' ? 1 : 2;
      size_t len = strlen (p);
      bool contents = len >= 2 && strcmp (p + len - 2, "/*") == 0;
      if (contents)
        len -= 2;
      while (len > 0 && p[len - 1] == '/')
        len--;
      if (len == 0)
        continue;
      /* "DIR/" + "*" is kept as "DIR/", which matches only what is under DIR */
      cleanup_free char *s = contents ? xasprintf ("%.*s/", (int) len, p) : xstrndup (p, len);
      ib_strv_push (&v, s);
    }
  return v;
}

bool
rfs_excluded (char *const *ex, const char *path)
{
  for (size_t i = 0; ex && ex[i]; i++)
    {
      size_t len = strlen (ex[i]);
      if (strncmp (path, ex[i], len) == 0
          && (ex[i][len - 1] == '/' || path[len] == '\0' || path[len] == '/'))
        return true;
    }
  return false;
}

static int
cmp_ent (const void *a, const void *b)
{
  return strcmp (((const struct scan_ent *) a)->path, ((const struct scan_ent *) b)->path);
}

struct scan_ent *
rfs_scan_find (const ib_fs_scan_t *s, const char *path)
{
  struct scan_ent key = { .path = (char *) path };
  return bsearch (&key, s->ents, s->n, sizeof *s->ents, cmp_ent);
}

/* Append entry `name` of directory dfd (relative path *crel, taken) with
 * its stat `st` to s: 1 when recorded (*out, valid until the next append),
 * 0 when skipped (a socket), -1 on error. */
static int
scan_record (ib_fs_scan_t *s, int dfd, const char *name, char **crel, const struct stat *st,
             struct scan_ent **out, ib_error_t *err)
{
  if (S_ISSOCK (st->st_mode))
    return 0; /* tar cannot carry sockets */
  if (s->n == s->cap)
    {
      s->cap = s->cap ? s->cap * 2 : 1024;
      s->ents = xrealloc (s->ents, s->cap * sizeof *s->ents);
    }
  struct scan_ent *e = &s->ents[s->n++];
  memset (e, 0, sizeof *e);
  e->path = steal_pointer (crel);
  e->mode = st->st_mode;
  e->uid = st->st_uid;
  e->gid = st->st_gid;
  if (s->owners && (S_ISREG (st->st_mode) || S_ISDIR (st->st_mode)))
    {
      char path[PATH_MAX];
      int n = s->root ? snprintf (path, sizeof path, "%s/%s", s->root, e->path) : -1;
      int r = n > 0 && (size_t) n < sizeof path ? ib_owner_get_at (AT_FDCWD, path, &e->uid, &e->gid)
                                                : ib_owner_get_at (dfd, name, &e->uid, &e->gid);
      if (r < 0)
        return ib_error_sys (err, errno, "scan /%s: read its recorded owner", e->path);
    }
  e->size = S_ISREG (st->st_mode) ? (uint64_t) st->st_size : 0;
  e->mtime_ns = (int64_t) st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
  e->ctime_ns = (int64_t) st->st_ctim.tv_sec * 1000000000 + st->st_ctim.tv_nsec;
  e->dev = s->no_dev ? 0 : st->st_dev;
  e->rdev = st->st_rdev;
  e->ino = st->st_ino;
  e->nlink = st->st_nlink;
  if (S_ISLNK (st->st_mode))
    {
      size_t sz = (size_t) st->st_size + 2;
      e->link = xmalloc (sz);
      ssize_t n = readlinkat (dfd, name, e->link, sz);
      if (n < 0 || (size_t) n >= sz)
        return ib_error_sys (err, n < 0 ? errno : ENAMETOOLONG, "scan /%s: readlink", e->path);
      e->link[n] = '\0';
    }
  *out = e;
  return 1;
}

/* Open subdirectory `name` of dfd for reading; one we own but may not
 * read (rootless, mode 0000) is granted u+rx meanwhile (*restore). */
static int
open_subdir (int dfd, const char *name, const struct stat *st, bool *restore)
{
  *restore = false;
  int sub = openat (dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (sub < 0 && errno == EACCES && st->st_uid == geteuid ()
      && fchmodat (dfd, name, (st->st_mode & 07777) | 0500, 0) == 0)
    {
      *restore = true;
      sub = openat (dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
  return sub;
}

/* A DIR stream of directory dfd itself (its own descriptor, so the
 * caller's dfd stays open); errors say "scan WHAT/REL". */
static DIR *
open_dir_stream (int dfd, const char *what, const char *rel, ib_error_t *err)
{
  int rfd = openat (dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (rfd < 0)
    {
      ib_error_sys (err, errno, "scan %s/%s", what, rel);
      return NULL;
    }
  DIR *d = rfs_fdopendir (rfd);
  if (d == NULL)
    ib_error_sys (err, errno, "scan %s/%s", what, rel);
  return d;
}

/* The next entry of `d` other than "." and "..", whose path under the
 * scanned root (rel/NAME, or NAME at the top) `ex` does not exclude;
 * *crel gets that path (caller frees).  NULL at the end of `d`. */
static struct dirent *
next_entry (DIR *d, const char *rel, char *const *ex, char **crel)
{
  struct dirent *de;
  while ((de = readdir (d)) != NULL)
    {
      if (strcmp (de->d_name, ".") == 0 || strcmp (de->d_name, "..") == 0)
        continue;
      char *c = *rel ? xasprintf ("%s/%s", rel, de->d_name) : xstrdup (de->d_name);
      if (!rfs_excluded (ex, c))
        {
          *crel = c;
          return de;
        }
      free (c);
    }
  return NULL;
}

static int
scan_dir (ib_fs_scan_t *s, int dfd, const char *rel, char *const *ex, ib_error_t *err)
{
  DIR *d = open_dir_stream (dfd, "", rel, err);
  if (d == NULL)
    return -1;
  int ret = 0;
  struct dirent *de;
  char *next_rel = NULL;
  while (ret == 0 && (de = next_entry (d, rel, ex, &next_rel)) != NULL)
    {
      cleanup_free char *crel = next_rel;
      const char *name = de->d_name;
      struct stat st;
      if (fstatat (dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        {
          if (errno == ENOENT)
            continue;
          ret = ib_error_sys (err, errno, "scan /%s", crel);
          break;
        }
      struct scan_ent *e = NULL;
      int r = scan_record (s, dfd, name, &crel, &st, &e, err);
      if (r < 0)
        ret = -1;
      if (r <= 0 || !S_ISDIR (st.st_mode))
        continue;
      const char *path = e->path; /* s->ents may move while recursing */
      bool restore;
      int sub = open_subdir (dfd, name, &st, &restore);
      if (sub < 0)
        ret = ib_error_sys (err, errno, "scan /%s", path);
      else
        {
          ret = scan_dir (s, sub, path, ex, err);
          close (sub);
        }
      if (restore)
        fchmodat (dfd, name, st.st_mode & 07777, 0);
    }
  closedir (d);
  return ret;
}

int
rfs_scan_tree (const char *rootfs, char *const *ex, bool no_dev, ib_fs_scan_t **out, ib_error_t *err)
{
  cleanup_close int fd = open (rootfs, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return ib_error_sys (err, errno, "scan %s", rootfs);
  cleanup_scan ib_fs_scan_t *s = xmalloc (sizeof *s);
  s->no_dev = no_dev;
  s->owners = ib_userns_mode () != IB_USERNS_ROOT;
  s->root = rootfs;
  int r = scan_dir (s, fd, "", ex, err);
  s->root = NULL;
  if (r < 0)
    return ib_error_prefix (err, "scan %s", rootfs);
  if (s->n > 1)
    qsort (s->ents, s->n, sizeof *s->ents, cmp_ent);
  *out = steal_pointer (&s);
  return 0;
}

int
ib_fs_scan (const char *rootfs, char *const *exclude, ib_fs_scan_t **out, ib_error_t *err)
{
  cleanup_strv char **ex = rfs_normalize_excludes (exclude);
  return rfs_scan_tree (rootfs, ex, false, out, err);
}

int
ib_fs_scan_nodev (const char *rootfs, char *const *exclude, ib_fs_scan_t **out, ib_error_t *err)
{
  cleanup_strv char **ex = rfs_normalize_excludes (exclude);
  return rfs_scan_tree (rootfs, ex, true, out, err);
}

/* ---------------------------------------------------------------------- */
/* The scans of a step done in an overlay tree.                            */

/* overlayfs' marks on upper directories, under either xattr namespace
 * (userxattr mounts use user.overlay.*). */
static bool
ovl_mark (int fd, const char *what, char *val, size_t len)
{
  char name[64];
  for (int i = 0; i < 2; i++)
    {
      snprintf (name, sizeof name, "%s.overlay.%s", i == 0 ? "user" : "trusted", what);
      ssize_t n = fgetxattr (fd, name, val, len);
      if (n >= 0)
        {
          val[n < (ssize_t) len ? n : (ssize_t) len - 1] = '\0';
          return true;
        }
    }
  return false;
}

/* Walk upper directory ufd (path rel): every entry of it into cur as the
 * merged tree mfd shows it, and its state before the step, from lower
 * view lfd (-1: nothing below), into before; whiteouts only into before;
 * an opaque directory's whole lower subtree into before. */
static int
scan_upper (ib_fs_scan_t *before, ib_fs_scan_t *cur, int ufd, int mfd, int lfd, const char *rel,
            char *const *ex, ib_error_t *err)
{
  DIR *d = open_dir_stream (ufd, "upper ", rel, err);
  if (d == NULL)
    return -1;
  int ret = 0;
  struct dirent *de;
  char *next_rel = NULL;
  while (ret == 0 && (de = next_entry (d, rel, ex, &next_rel)) != NULL)
    {
      cleanup_free char *crel = next_rel;
      const char *name = de->d_name;
      struct stat ust, mst, lst;
      if (fstatat (ufd, name, &ust, AT_SYMLINK_NOFOLLOW) < 0)
        {
          ret = ib_error_sys (err, errno, "scan upper /%s", crel);
          break;
        }
      bool in_lower = lfd >= 0 && fstatat (lfd, name, &lst, AT_SYMLINK_NOFOLLOW) == 0;
      struct scan_ent *e = NULL;
      if (S_ISCHR (ust.st_mode) && ust.st_rdev == makedev (0, 0))
        {
          /* a whiteout: deleted by the step */
          if (in_lower)
            {
              cleanup_free char *brel = xstrdup (crel);
              ret = scan_record (before, lfd, name, &brel, &lst, &e, err) < 0 ? -1 : 0;
            }
          continue;
        }
      if (fstatat (mfd, name, &mst, AT_SYMLINK_NOFOLLOW) < 0)
        {
          ret = ib_error_sys (err, errno, "scan /%s", crel);
          break;
        }
      if (in_lower)
        {
          cleanup_free char *brel = xstrdup (crel);
          if (scan_record (before, lfd, name, &brel, &lst, &e, err) < 0)
            {
              ret = -1;
              break;
            }
        }
      int r = scan_record (cur, mfd, name, &crel, &mst, &e, err);
      if (r < 0)
        ret = -1;
      if (r <= 0 || !S_ISDIR (mst.st_mode) || !S_ISDIR (ust.st_mode))
        continue;
      const char *path = e->path; /* cur->ents may move while recursing */
      bool restore_u = false, restore_m = false;
      int usub = open_subdir (ufd, name, &ust, &restore_u);
      int msub = usub < 0 ? -1 : open_subdir (mfd, name, &mst, &restore_m);
      int lsub = -1;
      char mark[8];
      if (usub < 0 || msub < 0)
        ret = ib_error_sys (err, errno, "scan /%s", path);
      else if (ovl_mark (usub, "redirect", mark, sizeof mark))
        ret = ib_error_set (err, EOPNOTSUPP, "scan /%s: a redirected directory", path);
      else if (in_lower && S_ISDIR (lst.st_mode))
        {
          bool restore_l = false;
          lsub = open_subdir (lfd, name, &lst, &restore_l);
          if (lsub < 0)
            ret = ib_error_sys (err, errno, "scan lower /%s", path);
          else if (ovl_mark (usub, "opaque", mark, sizeof mark) && mark[0] == 'y')
            {
              /* recreated: everything below it before is gone */
              ret = scan_dir (before, lsub, path, ex, err);
              close (lsub);
              lsub = -1;
            }
          if (restore_l)
            fchmodat (lfd, name, lst.st_mode & 07777, 0);
        }
      if (ret == 0)
        ret = scan_upper (before, cur, usub, msub, lsub, path, ex, err);
      if (usub >= 0)
        close (usub);
      if (msub >= 0)
        close (msub);
      if (lsub >= 0)
        close (lsub);
      if (restore_u)
        fchmodat (ufd, name, ust.st_mode & 07777, 0);
      if (restore_m)
        fchmodat (mfd, name, mst.st_mode & 07777, 0);
    }
  closedir (d);
  return ret;
}

int
ib_fs_scan_overlay (const char *rootfs, const char *upper, const char *lower,
                    char *const *exclude, ib_fs_scan_t **before, ib_fs_scan_t **cur,
                    ib_error_t *err)
{
  cleanup_strv char **ex = rfs_normalize_excludes (exclude);
  cleanup_close int mfd = open (rootfs, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  cleanup_close int ufd = open (upper, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  cleanup_close int lfd = open (lower, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (mfd < 0 || ufd < 0 || lfd < 0)
    return ib_error_sys (err, errno, "scan %s: open %s", rootfs,
                         mfd < 0 ? rootfs : ufd < 0 ? upper : lower);
  cleanup_scan ib_fs_scan_t *b = xmalloc (sizeof *b);
  cleanup_scan ib_fs_scan_t *c = xmalloc (sizeof *c);
  b->no_dev = c->no_dev = true;
  b->owners = c->owners = ib_userns_mode () != IB_USERNS_ROOT;
  b->root = lower;
  c->root = rootfs;
  int r = scan_upper (b, c, ufd, mfd, lfd, "", ex, err);
  b->root = c->root = NULL;
  if (r < 0)
    return ib_error_prefix (err, "scan %s", rootfs);
  if (b->n > 1)
    qsort (b->ents, b->n, sizeof *b->ents, cmp_ent);
  if (c->n > 1)
    qsort (c->ents, c->n, sizeof *c->ents, cmp_ent);
  *before = steal_pointer (&b);
  *cur = steal_pointer (&c);
  return 0;
}
