/* rootfs/treecopy.c — copy a directory tree (treecopy.h): cp -a for
 * snapshots and for the private rootfs that stands in for an overlay.
 *
 * File data is reflinked where the filesystem can, else copied with
 * copy_file_range (ib_copy_fd_data), holes of sparse files kept.
 */
#include "rootfs/treecopy.h"
#include "common/util.h"
#include "rootfs/rootfs_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#ifndef FICLONE
#define FICLONE _IOW (0x94, 9, int)
#endif

/* ---------------------------------------------------------------------- */
/* Copying trees.                                                         */

struct copy
{
  int dst_root;
  bool keep_links;       /* hard links kept within the tree (else each name is a file) */
  hmap_t links;          /* rfs_ino_key of a source inode -> its first copy (path under dst) */
};

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
      lk = rfs_ino_key (&st);
      hslot_t *hs = rfs_hmap_find (&c->links, lk);
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
          rfs_ignore_chown_error (shown);
        if (fchmod (d2, st.st_mode & 07777) < 0)
          return ib_error_sys (err, errno, "chmod copy of %s", shown);
        rfs_copy_xattrs (s2, d2, shown);
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
          rfs_ignore_chown_error (shown);
        if (fchmod (out, st.st_mode & 07777) < 0)
          return ib_error_sys (err, errno, "chmod copy of %s", shown);
        rfs_copy_xattrs (in, out, shown);
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
          rfs_ignore_chown_error (shown);
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
          rfs_ignore_chown_error (shown);
        if (fchmodat (dfd, name, st.st_mode & 07777, 0) < 0)
          return ib_error_sys (err, errno, "chmod copy of %s", shown);
        if (utimensat (dfd, name, ts, AT_SYMLINK_NOFOLLOW) < 0)
          return ib_error_sys (err, errno, "set times of copy of %s", shown);
        break;
      }
    }
  if (lk && rfs_hmap_find (&c->links, lk) == NULL)
    rfs_hmap_put (&c->links, lk, xstrdup (rel));
  return 0;
}

static int
copy_dir (struct copy *c, int sfd, int dfd, const char *rel, const char *shown, ib_error_t *err)
{
  int rfd = openat (sfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (rfd < 0)
    return ib_error_sys (err, errno, "open %s", shown);
  DIR *d = rfs_fdopendir (rfd);
  if (d == NULL)
    return ib_error_sys (err, errno, "open %s", shown);
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
        rfs_ignore_chown_error (dst);
      if (fchmod (c.dst_root, st.st_mode & 07777) < 0 || futimens (c.dst_root, ts) < 0)
        ib_error_sys (err, errno, "copy %s: set metadata of %s", src, dst);
      else
        ret = 0;
    }
  if (c.dst_root >= 0)
    close (c.dst_root);
  rfs_hmap_free (&c.links, true);
  if (ret < 0)
    {
      ib_rm_rf (dst, NULL);
      return ib_error_prefix (err, "copy tree %s to %s", src, dst);
    }
  return 0;
}
