/* rootfs/overlay.c — copy-free trees (overlay.h): a private rootfs as an
 * overlayfs mount on snapshots, frozen steps as layered snapshots
 * (<store>/snapshots/<chainid>.ovl), read-only views of lower layers, and
 * the removal of any tree made here.
 *
 * Each tree DEST has its directory DEST.ovl/ beside it: upper/, work/ and
 * `lowers` (the lower layers, top first, one a line).  docs/design.md
 * ("Copy-free trees") says why and how.
 */
#include "rootfs/overlay.h"
#include "common/util.h"
#include "rootfs/rootfs_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

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

bool
rfs_overlay_usable (void)
{
  return overlay_allowed && overlay_state >= 0;
}

char *
rfs_ovl_dir (const char *dest)
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
  if (ib_read_file (lfile, &ltext, NULL, NULL) < 0)
    {
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
  cleanup_free char *sovl = rfs_ovl_dir (src);
  cleanup_strv char **below = NULL;
  if (!ovl_read_lowers (sovl, &below))
    {
      ib_strv_push (out, src);
      return;
    }
  cleanup_free char *up = ib_path_join (sovl, "upper");
  if (!dir_is_empty (up) || !rfs_is_dir (src))
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
  cleanup_free char *ovl = rfs_ovl_dir (dest);
  return ovl_mount_flags (dest, lowers, ovl, 0);
}

int
ib_rootfs_overlay_from (const char *src, const char *dest, ib_error_t *err)
{
  if (!overlay_allowed || overlay_state < 0)
    return 0;
  cleanup_strv char **lowers = NULL;
  ovl_lowers (src, &lowers);
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
  cleanup_free char *ovl = rfs_ovl_dir (dest);
  cleanup_free char *upper = ib_path_join (ovl, "upper");
  cleanup_free char *work = ib_path_join (ovl, "work");
  if (mkdir (ovl, 0700) < 0 || mkdir (upper, 0755) < 0 || mkdir (work, 0700) < 0
      || (mkdir (dest, 0755) < 0 && errno != EEXIST))
    {
      int en = errno;
      ib_rm_rf (ovl, NULL);
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
      ib_rm_rf (ovl, NULL);
      rmdir (dest);
      return 0;
    }
  removexattr (upper, "user.imgbuild.probe");
  if (ovl_mount (dest, lowers) < 0)
    {
      ib_debug ("overlayfs is not usable here (%s): rootfs trees are copied", strerror (errno));
      overlay_state = -1;
      ib_rm_rf (ovl, NULL);
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
      ib_rootfs_remove (dest, NULL);
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
  cleanup_free char *ovl = rfs_ovl_dir (dest);
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
bool
rfs_layered_snapshot_ok (const char *snap)
{
  if (!overlay_allowed || overlay_state < 0)
    return false;
  cleanup_free char *ovl = rfs_ovl_dir (snap);
  cleanup_free char *up = ib_path_join (ovl, "upper");
  cleanup_free char *lfile = ib_path_join (ovl, "lowers");
  cleanup_free char *ltext = NULL;
  if (!rfs_is_dir (up) || ib_read_file (lfile, &ltext, NULL, NULL) < 0)
    {
      return false;
    }
  char *save = NULL;
  for (char *l = strtok_r (ltext, "\n", &save); l; l = strtok_r (NULL, "\n", &save))
    if (!rfs_is_dir (l))
      return false;
  return true;
}

int
ib_rootfs_freeze (ib_store_t *store, const char *dest, const char *chain_hex, ib_error_t *err)
{
  if (!ib_rootfs_is_overlay (dest))
    return 0;
  cleanup_free char *snaps = ib_store_path (store, IB_STORE_SNAPSHOTS, NULL);
  cleanup_free char *snap = ib_path_join (snaps, chain_hex);
  cleanup_free char *snap_ovl = rfs_ovl_dir (snap);
  if (rfs_is_dir (snap) || rfs_is_dir (snap_ovl))
    return 0;
  cleanup_free char *ovl = rfs_ovl_dir (dest);
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

  cleanup_free char *tmproot = ib_store_path (store, IB_STORE_TMP, NULL);
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
      ib_rm_rf (tmpl, NULL);
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
      ib_rm_rf (tmpl, NULL);
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
  cleanup_free char *ovl = rfs_ovl_dir (dest);
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
  cleanup_free char *ovl = rfs_ovl_dir (dest);
  struct stat st;
  return lstat (ovl, &st) == 0;
}
