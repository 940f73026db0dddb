/* rootfs/sandbox_tree.c — the sandbox's mount tree: built by pid 1
 * before pivot_root (rfs_setup_rootfs: the rootfs bind, /proc, a minimal
 * /dev, /sys read-only, runc's masked and read-only paths, the host's
 * /etc files, the added mounts), and, on imgbuild's side before the fork,
 * the added mounts' targets resolved and created in the rootfs, with the
 * record of what was made there so that it is removed after the run.
 */
#include "rootfs/sandbox.h"
#include "common/lazylib.h"
#include "common/util.h"
#include "rootfs/resolve.h"
#include "rootfs/sandbox_int.h"
#include "rootfs/userns.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

/* --- mount tree (in P1) --------------------------------------------------- */

/* A directory, and not a symlink to one: mount targets in the rootfs must
 * not lead elsewhere. */
bool
rfs_is_real_dir (const char *path)
{
  struct stat st;
  return lstat (path, &st) == 0 && S_ISDIR (st.st_mode);
}

static int
do_mount (const char *src, const char *target, const char *fstype, unsigned long flags,
          const char *data, ib_error_t *err)
{
  if (mount (src, target, fstype, flags, data) < 0)
    return ib_error_sys (err, errno, "mount %s on %s%s%s", src ? src : "(none)", target,
                         data ? " with " : "", data ? data : "");
  return 0;
}

/* Mount flags that must be kept on a bind remount in a user namespace:
 * the kernel refuses to clear flags the parent namespace locked. */
static unsigned long
locked_flags_of (const char *path)
{
  struct statvfs sv;
  unsigned long f = 0;
  if (statvfs (path, &sv) < 0)
    return 0;
  if (sv.f_flag & ST_NOSUID)
    f |= MS_NOSUID;
  if (sv.f_flag & ST_NODEV)
    f |= MS_NODEV;
  if (sv.f_flag & ST_NOEXEC)
    f |= MS_NOEXEC;
  if (sv.f_flag & ST_NOATIME)
    f |= MS_NOATIME;
  if (sv.f_flag & ST_NODIRATIME)
    f |= MS_NODIRATIME;
  if (sv.f_flag & ST_RELATIME)
    f |= MS_RELATIME;
  return f;
}

/* Make a bind mount read-only, recursively where the kernel has
 * mount_setattr (5.12), else its top mount only. */
static int
remount_ro (const char *path, bool recursive, ib_error_t *err)
{
#ifdef SYS_mount_setattr
  if (recursive)
    {
      struct
      {
        uint64_t attr_set, attr_clr, propagation, userns_fd;
      } attr = { 0x00000001 /* MOUNT_ATTR_RDONLY */, 0, 0, 0 };
      if (syscall (SYS_mount_setattr, AT_FDCWD, path, 0x8000 /* AT_RECURSIVE */, &attr,
                   sizeof attr)
          == 0)
        return 0;
    }
#else
  (void) recursive;
#endif
  unsigned long flags = MS_BIND | MS_REMOUNT | MS_RDONLY | locked_flags_of (path);
  return do_mount (NULL, path, NULL, flags, NULL, err);
}

/* Bind the host's file `host` onto `target` read-only, nosuid and noexec:
 * the host's own device nodes (/dev/null, the GPUs' nodes) and the
 * /dev/null that masks a /proc file.  In root mode the step's uid 0 is
 * the host's, and through a writable bind its chown, chmod or utimes would
 * change the host's inode (issue 38: `chmod 000 /dev/null` broke every
 * program on the machine).  A read-only mount refuses those with EROFS
 * (mnt_want_write), while reads and writes of a device node still work:
 * the kernel asks a mount's write access only of regular files,
 * directories and symlinks (do_dentry_open, may_open).  Flags the host's
 * mount locked stay (locked_flags_of). */
static int
bind_readonly (const char *host, const char *target, ib_error_t *err)
{
  if (do_mount (host, target, NULL, MS_BIND, NULL, err) < 0)
    return -1;
  unsigned long flags = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC
                        | locked_flags_of (target);
  return do_mount (NULL, target, NULL, flags, NULL, err);
}

/* Create an empty file (a bind mount target) in the /dev tmpfs. */
static int
touch (const char *path, ib_error_t *err)
{
  int fd = open (path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOCTTY, 0666);
  if (fd < 0)
    return ib_error_sys (err, errno, "create %s", path);
  close (fd);
  return 0;
}

static int
write_small_file (const char *path, const char *data, mode_t mode, ib_error_t *err)
{
  int fd = open (path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
  if (fd < 0)
    return ib_error_sys (err, errno, "create %s", path);
  size_t len = strlen (data);
  ssize_t n = write (fd, data, len);
  int e = errno;
  close (fd);
  if (n < 0 || (size_t) n != len)
    return ib_error_sys (err, n < 0 ? e : EIO, "write %s", path);
  return 0;
}

/* /dev: a tmpfs with the harmless host devices bind-mounted in, the usual
 * symlinks, a private devpts instance and /dev/shm. */
static int
setup_dev (const char *dev, uint64_t shm_size, ib_error_t *err)
{
  if (do_mount ("tmpfs", dev, "tmpfs", MS_NOSUID | MS_STRICTATIME, "mode=0755", err) < 0)
    return -1;

  static const char *const devices[] = { "null", "zero", "full", "random", "urandom", "tty" };
  for (size_t i = 0; i < sizeof devices / sizeof devices[0]; i++)
    {
      cleanup_free char *host = ib_path_join ("/dev", devices[i]);
      cleanup_free char *target = ib_path_join (dev, devices[i]);
      struct stat st;
      if (stat (host, &st) < 0)
        {
          ib_debug ("sandbox: host has no %s, skipped", host);
          continue;
        }
      if (touch (target, err) < 0 || bind_readonly (host, target, err) < 0)
        return -1;
    }

  static const char *const links[][2] = {
    { "fd", "/proc/self/fd" },        { "stdin", "/proc/self/fd/0" },
    { "stdout", "/proc/self/fd/1" },  { "stderr", "/proc/self/fd/2" },
    { "ptmx", "pts/ptmx" },
  };
  for (size_t i = 0; i < sizeof links / sizeof links[0]; i++)
    {
      cleanup_free char *target = ib_path_join (dev, links[i][0]);
      if (symlink (links[i][1], target) < 0)
        return ib_error_sys (err, errno, "symlink %s", target);
    }

  /* devpts: a new instance so that ptys of the step are its own.  No gid=5
   * option: group 5 (tty) may not be mapped in the user namespace.  Old
   * kernels without these options answer EINVAL. */
  cleanup_free char *pts = ib_path_join (dev, "pts");
  if (mkdir (pts, 0755) < 0)
    return ib_error_sys (err, errno, "create %s", pts);
  if (mount ("devpts", pts, "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620")
          < 0
      && (errno != EINVAL
          || mount ("devpts", pts, "devpts", MS_NOSUID | MS_NOEXEC, "newinstance") < 0))
    ib_debug ("sandbox: mount devpts on %s: %s (no ptys in the sandbox)", pts, strerror (errno));

  cleanup_free char *shm = ib_path_join (dev, "shm");
  if (mkdir (shm, 01777) < 0)
    return ib_error_sys (err, errno, "create %s", shm);
  char shm_opts[64] = "mode=1777";
  if (shm_size)
    snprintf (shm_opts, sizeof shm_opts, "mode=1777,size=%llu", (unsigned long long) shm_size);
  if (do_mount ("tmpfs", shm, "tmpfs", MS_NOSUID | MS_NODEV, shm_opts, err) < 0)
    return -1;

  cleanup_free char *priv = ib_path_join (dev, &PRIVATE_DIR[sizeof "/dev/" - 1]);
  if (mkdir (priv, 0755) < 0)
    return ib_error_sys (err, errno, "create %s", priv);
  return 0;
}

/* Parts of /proc and /sys that reach the host's kernel, as Docker and
 * runc hide them (moby oci/defaults.go DefaultLinuxSpec: MaskedPaths and
 * ReadonlyPaths; the same lists in runc's and podman's defaults).  In root
 * mode the namespace's uid 0 is the host's: a writable /proc/sys would let
 * a step set kernel.core_pattern to a program the kernel then runs as host
 * root.  Paths are relative to the rootfs; those the kernel lacks are
 * skipped. */
static const char *const masked_paths[] = {
  "proc/asound",     "proc/acpi",       "proc/kcore",       "proc/keys",
  "proc/latency_stats", "proc/timer_list", "proc/timer_stats", "proc/sched_debug",
  "proc/scsi",       "sys/firmware",    "sys/devices/virtual/powercap",
};
static const char *const readonly_paths[] = {
  "proc/bus", "proc/fs", "proc/irq", "proc/sys", "proc/sysrq-trigger",
};

/* Hide rootfs/rel: a directory under an empty read-only tmpfs, a file under
 * the host's /dev/null (reads give nothing, writes go nowhere). */
static int
mask_path (const char *rootfs, const char *rel, ib_error_t *err)
{
  cleanup_free char *path = ib_path_join (rootfs, rel);
  struct stat st;
  if (lstat (path, &st) < 0)
    {
      if (errno == ENOENT || errno == ENOTDIR)
        return 0;
      return ib_error_sys (err, errno, "sandbox: mask /%s", rel);
    }
  if (S_ISDIR (st.st_mode))
    {
      if (mount ("tmpfs", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                 "size=0,mode=0555")
          < 0)
        return ib_error_sys (err, errno, "sandbox: mask /%s", rel);
      return 0;
    }
  if (bind_readonly ("/dev/null", path, err) < 0)
    return ib_error_prefix (err, "sandbox: mask /%s", rel);
  return 0;
}

/* Make rootfs/rel read-only: bound onto itself, then remounted. */
static int
readonly_path (const char *rootfs, const char *rel, ib_error_t *err)
{
  cleanup_free char *path = ib_path_join (rootfs, rel);
  struct stat st;
  if (lstat (path, &st) < 0)
    {
      if (errno == ENOENT || errno == ENOTDIR)
        return 0;
      return ib_error_sys (err, errno, "sandbox: read-only /%s", rel);
    }
  if (mount (path, path, NULL, MS_BIND | MS_REC, NULL) < 0 || remount_ro (path, true, err) < 0)
    return ib_error_sys (err, errno, "sandbox: read-only /%s", rel); /* keeps remount_ro's */
  return 0;
}

/* Apply the lists above to the paths under `top` ("proc/" or "sys/"). */
static int
protect_kernel_paths (const char *rootfs, const char *top, ib_error_t *err)
{
  size_t n = strlen (top);
  for (size_t i = 0; i < sizeof readonly_paths / sizeof *readonly_paths; i++)
    if (strncmp (readonly_paths[i], top, n) == 0
        && readonly_path (rootfs, readonly_paths[i], err) < 0)
      return -1;
  for (size_t i = 0; i < sizeof masked_paths / sizeof *masked_paths; i++)
    if (strncmp (masked_paths[i], top, n) == 0 && mask_path (rootfs, masked_paths[i], err) < 0)
      return -1;
  return 0;
}

/* /etc/resolv.conf and /etc/hosts from the host.  Only onto regular files
 * of the rootfs: creating them would leave new files in the step's layer,
 * and a symlink would lead the mount outside the rootfs.  When /dev is ours
 * the host file is copied into the /dev tmpfs first and the copy is bound:
 * a step that writes to /etc/hosts changes its copy, never the host's file
 * (otherwise the bind is made read-only). */
static int
setup_etc_file (const char *rootfs, const char *name, bool have_dev, char *const *add_hosts,
                ib_error_t *err)
{
  cleanup_free char *host = ib_path_join ("/etc", name);
  cleanup_free char *rel = ib_path_join ("etc", name);
  cleanup_free char *target = ib_path_join (rootfs, rel);
  cleanup_free char *etc = ib_path_join (rootfs, "etc");
  struct stat st;
  if (!rfs_is_real_dir (etc) || lstat (target, &st) < 0 || !S_ISREG (st.st_mode))
    {
      ib_debug ("sandbox: /%s is absent or not a regular file in the rootfs: not providing the "
                "host's",
                rel);
      return 0;
    }
  if (stat (host, &st) < 0)
    {
      ib_debug ("sandbox: host has no %s", host);
      return 0;
    }
  if (!have_dev)
    {
      if (do_mount (host, target, NULL, MS_BIND, NULL, err) < 0)
        return -1;
      return remount_ro (target, false, err);
    }

  cleanup_free char *data = NULL;
  if (ib_read_file (host, &data, NULL, err) < 0)
    return -1;
  if (strcmp (name, "hosts") == 0)
    {
      /* The sandbox's hostname resolves, as in Docker. */
      char *with = xasprintf ("%s%s127.0.0.1\t%s\n", data,
                              *data && data[strlen (data) - 1] != '\n' ? "\n" : "", HOSTNAME);
      free (data);
      data = with;
      for (char *const *h = add_hosts; h && *h; h++) /* --add-host */
        {
          with = xasprintf ("%s%s\n", data, *h);
          free (data);
          data = with;
        }
    }
  cleanup_free char *dev_rel = ib_path_join (PRIVATE_DIR, name);
  cleanup_free char *copy = ib_path_join (rootfs, dev_rel);
  if (write_small_file (copy, data, 0644, err) < 0)
    return -1;
  return do_mount (copy, target, NULL, MS_BIND, NULL, err);
}

/* --- mounts (RUN --mount, run -v, CDI) ------------------------------------ */

#ifndef MOUNT_ATTR_RDONLY
#define MOUNT_ATTR_RDONLY 0x00000001
#endif
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif
struct ib_mount_attr
{
  uint64_t attr_set, attr_clr, propagation, userns_fd;
};

static const char *
mount_source_name (const ib_mount_t *m)
{
  return m->type == IB_MOUNT_TMPFS ? "tmpfs" : m->source;
}

/* In the child, before pivot_root: mount on the prepared real path. */
static int
apply_mount (const struct prepared_mount *pm, ib_error_t *err)
{
  const ib_mount_t *m = pm->m;
  if (pm->in_dev)
    {
      /* our tmpfs: no symlink of the image can be in the way */
      cleanup_free char *parent = xstrdup (pm->real);
      *strrchr (parent, '/') = '\0';
      if (ib_mkdir_p (parent, 0755, err) < 0)
        return ib_error_prefix (err, "mount %s on %s", mount_source_name (m), m->target);
      struct stat st;
      if (lstat (pm->real, &st) < 0)
        {
          int fd = -1;
          if (pm->want_dir ? mkdir (pm->real, 0755) < 0
                           : (fd = open (pm->real, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)) < 0)
            return ib_error_sys (err, errno, "mount %s on %s: create the mount point",
                                 mount_source_name (m), m->target);
          if (fd >= 0)
            close (fd);
        }
    }
  if (m->type == IB_MOUNT_TMPFS)
    {
      unsigned long fl = MS_NOSUID | MS_NODEV | (m->readonly ? MS_RDONLY : 0);
      if (mount ("tmpfs", pm->real, "tmpfs", fl, m->data ? m->data : "mode=1777") < 0)
        return ib_error_sys (err, errno, "mount tmpfs on %s", m->target);
      return 0;
    }
  /* A device node (CDI's deviceNodes, the NVIDIA discovery's nodes) is
   * the host's inode: read-only whatever the mount asks (bind_readonly). */
  struct stat sst;
  if (stat (m->source, &sst) == 0 && (S_ISCHR (sst.st_mode) || S_ISBLK (sst.st_mode)))
    return bind_readonly (m->source, pm->real, err) < 0
               ? ib_error_prefix (err, "mount %s on %s", m->source, m->target)
               : 0;
  if (mount (m->source, pm->real, NULL, MS_BIND | MS_REC, NULL) < 0)
    return ib_error_sys (err, errno, "mount %s on %s", m->source, m->target);
  if (!m->readonly)
    return 0;
  /* Read-only all the way down where the kernel can (Linux 5.12); else the
   * top mount only. */
  struct ib_mount_attr attr = { .attr_set = MOUNT_ATTR_RDONLY };
  if (syscall (SYS_mount_setattr, AT_FDCWD, pm->real, AT_RECURSIVE, &attr, sizeof attr) == 0)
    return 0;
  if (remount_ro (pm->real, false, err) < 0)
    return ib_error_prefix (err, "mount %s on %s read-only", m->source, m->target);
  return 0;
}

/* Call before making something in directory fd `dfd`. */
void
rfs_made_note_dir (struct made_list *l, int dfd, bool always)
{
  struct stat st;
  cleanup_free char *p = rfs_fd_path (dfd);
  if (p == NULL || stat (p, &st) < 0)
    return;
  for (size_t i = 0; i < l->n_dirs; i++)
    if (strcmp (l->dirs[i].path, p) == 0)
      {
        l->dirs[i].always |= always;
        return;
      }
  l->dirs = xrealloc (l->dirs, sizeof *l->dirs * (l->n_dirs + 1));
  l->dirs[l->n_dirs++]
      = (struct dirtime){ .path = steal_pointer (&p), .times = { st.st_atim, st.st_mtim },
                          .always = always };
}

void
rfs_made_note_parent (struct made_list *l, int dfd)
{
  rfs_made_note_dir (l, dfd, false);
}

/* Just before the run: the directories' times as we leave them. */
void
rfs_made_snapshot (struct made_list *l)
{
  struct stat st;
  for (size_t i = 0; i < l->n_dirs; i++)
    if (stat (l->dirs[i].path, &st) == 0)
      l->dirs[i].ready = st.st_mtim;
}

/* Just after the run: a directory the command changed keeps its new time
 * (the step's change belongs in the layer). */
void
rfs_made_check (struct made_list *l)
{
  struct stat st;
  for (size_t i = 0; i < l->n_dirs; i++)
    l->dirs[i].restore
        = l->dirs[i].always
          || (stat (l->dirs[i].path, &st) == 0 && st.st_mtim.tv_sec == l->dirs[i].ready.tv_sec
              && st.st_mtim.tv_nsec == l->dirs[i].ready.tv_nsec);
}

void
rfs_made_add (struct made_list *l, const char *path)
{
  struct stat st;
  if (lstat (path, &st) < 0)
    return;
  l->v = xrealloc (l->v, sizeof *l->v * (l->n + 1));
  l->v[l->n++] = (struct made){ xstrdup (path), st.st_dev, st.st_ino, st.st_mode & S_IFMT };
}

void
rfs_made_remove_all (struct made_list *l)
{
  for (size_t i = l->n; i-- > 0;)
    {
      struct made *x = &l->v[i];
      struct stat st;
      if (lstat (x->path, &st) == 0 && st.st_dev == x->dev && st.st_ino == x->ino
          && (st.st_mode & S_IFMT) == x->type)
        {
          int r = 0;
          if (S_ISDIR (st.st_mode))
            r = rmdir (x->path);
          else if (!S_ISREG (st.st_mode) || st.st_size == 0)
            r = unlink (x->path);
          if (r < 0 && errno != ENOTEMPTY && errno != EEXIST)
            ib_warn ("sandbox: remove %s: %s", x->path, strerror (errno));
        }
      free (x->path);
    }
  free (l->v);
  l->v = NULL;
  l->n = 0;
  for (size_t i = l->n_dirs; i-- > 0;)
    {
      if (l->dirs[i].restore
          && utimensat (AT_FDCWD, l->dirs[i].path, l->dirs[i].times, AT_SYMLINK_NOFOLLOW) < 0
          && errno != ENOENT)
        ib_debug ("sandbox: times of %s: %s", l->dirs[i].path, strerror (errno));
      free (l->dirs[i].path);
    }
  free (l->dirs);
  l->dirs = NULL;
  l->n_dirs = 0;
}

/* Host path of an O_PATH fd (it lies inside the rootfs). */
char *
rfs_fd_path (int fd)
{
  char proc[64], buf[PATH_MAX];
  snprintf (proc, sizeof proc, "/proc/self/fd/%d", fd);
  ssize_t n = readlink (proc, buf, sizeof buf - 1);
  if (n < 0)
    return NULL;
  buf[n] = '\0';
  return xstrdup (buf);
}

static size_t
path_depth (const char *p)
{
  size_t d = 0;
  for (; *p; p++)
    if (*p == '/' && p[1] && p[1] != '/')
      d++;
  return d;
}

int
rfs_mount_cmp_depth (const void *a, const void *b)
{
  const struct prepared_mount *x = a, *y = b;
  size_t dx = path_depth (x->m->target), dy = path_depth (y->m->target);
  return dx < dy ? -1 : dx > dy;
}

/* Resolve (creating what is missing) the directory `dir` (absolute, inside
 * the rootfs); O_PATH fd or -1 with *err.  A dangling symlink on the way is
 * followed inside the rootfs and what it names is created, as runc's
 * MkdirAll in root does. */
static int
dir_in_root (int rootfd, const char *rootfs, const char *dir, struct made_list *made,
             const char *what, ib_error_t *err)
{
  cleanup_free char *path = xstrdup (dir);
  int links = 0;
restart:;
  cleanup_free char *prefix = xstrdup ("");
  const char *s = path;
  int fd = ib_open_dir_in_root (rootfd, "");
  while (fd >= 0)
    {
      while (*s == '/')
        s++;
      if (*s == '\0')
        return fd;
      const char *e = strchrnul (s, '/');
      cleanup_free char *comp = xstrndup (s, (size_t) (e - s));
      char *np = xasprintf ("%s/%s", prefix, comp);
      int next = ib_open_dir_in_root (rootfd, np);
      if (next < 0 && errno == ENOENT)
        {
          char target[PATH_MAX];
          ssize_t tl = readlinkat (fd, comp, target, sizeof target - 1);
          if (tl > 0)
            {
              /* dangling symlink: go on from where it points */
              close (fd);
              if (++links > 40)
                {
                  free (np);
                  return ib_error_set (err, ELOOP, "%s: too many symlinks in the rootfs", what);
                }
              target[tl] = '\0';
              char *rest = target[0] == '/' ? xasprintf ("%s/%s", target, e)
                                            : xasprintf ("%s/%s/%s", prefix, target, e);
              free (np);
              free (path);
              path = rest;
              goto restart;
            }
          rfs_made_note_parent (made, fd);
          if (mkdirat (fd, comp, 0755) < 0 && errno != EEXIST)
            {
              int er = errno;
              close (fd);
              ib_error_sys (err, er, "%s: create %s in the rootfs", what, np);
              free (np);
              return -1;
            }
          cleanup_free char *parent = rfs_fd_path (fd);
          cleanup_free char *created = parent ? ib_path_join (parent, comp) : NULL;
          if (created)
            rfs_made_add (made, created);
          next = ib_open_dir_in_root (rootfd, np);
        }
      int er = errno;
      free (prefix);
      prefix = np;
      close (fd);
      fd = next;
      if (fd < 0)
        return ib_error_sys (err, er, "%s: %s in the rootfs %s", what, prefix, rootfs);
      s = e;
    }
  return ib_error_sys (err, errno, "%s: open the rootfs %s", what, rootfs);
}

/* Split an absolute in-rootfs path into its directory and last name;
 * NULL when the path has no last name ("/", "/.."). */
static char *
split_last (const char *path, const char **base)
{
  size_t n = strlen (path);
  while (n > 1 && path[n - 1] == '/')
    n--;
  const char *end = path + n;
  const char *slash = end;
  while (slash > path && slash[-1] != '/')
    slash--;
  if (slash == end || (end - slash == 2 && slash[0] == '.' && slash[1] == '.')
      || (end - slash == 1 && slash[0] == '.'))
    return NULL;
  *base = slash;
  return xstrndup (path, (size_t) (slash - path));
}

int
rfs_prepare_mount (int rootfd, const char *rootfs, const ib_mount_t *m,
                   struct prepared_mount *pm, struct made_list *made, ib_error_t *err)
{
  cleanup_free char *what = xasprintf ("mount %s on %s", mount_source_name (m),
                                       m->target ? m->target : "(none)");
  if (m->target == NULL || m->target[0] != '/')
    return ib_error_set (err, EINVAL, "%s: the target must be an absolute path", what);
  bool want_dir = true;
  if (m->type == IB_MOUNT_BIND)
    {
      struct stat st;
      if (m->source == NULL || stat (m->source, &st) < 0)
        return ib_error_sys (err, m->source ? errno : EINVAL, "%s: source %s", what,
                             m->source ? m->source : "(none)");
      want_dir = S_ISDIR (st.st_mode);
    }
  /* Under /dev: the sandbox mounts its own tmpfs there (where the rootfs
   * has a /dev directory); the child makes the mount point in it. */
  const char *t = m->target;
  while (t[0] == '/' && t[1] == '/')
    t++;
  cleanup_free char *devdir = ib_path_join (rootfs, "dev");
  if (ib_str_has_prefix (t, "/dev/") && t[5] && !strstr (t, "/..") && rfs_is_real_dir (devdir))
    {
      pm->m = m;
      pm->real = ib_path_join (rootfs, t + 1);
      pm->in_dev = true;
      pm->want_dir = want_dir;
      return 0;
    }
  const char *base = NULL;
  cleanup_free char *dir = split_last (m->target, &base);
  cleanup_free char *name = NULL;
  if (dir == NULL)
    return ib_error_set (err, EINVAL, "%s: cannot mount over the root", what);
  name = xstrdup (base);
  char *slash = strchr (name, '/');
  if (slash)
    *slash = '\0';
  cleanup_close int dfd = dir_in_root (rootfd, rootfs, dir, made, what, err);
  if (dfd < 0)
    return -1;
  cleanup_free char *dpath = rfs_fd_path (dfd);
  if (dpath == NULL)
    return ib_error_sys (err, errno, "%s: where is %s", what, dir);
  cleanup_free char *real = ib_path_join (dpath, name);
  struct stat st;
  if (fstatat (dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
    {
      if (errno != ENOENT)
        return ib_error_sys (err, errno, "%s: %s", what, m->target);
      rfs_made_note_parent (made, dfd);
      if (want_dir)
        {
          if (mkdirat (dfd, name, 0755) < 0)
            return ib_error_sys (err, errno, "%s: create %s", what, m->target);
        }
      else
        {
          int fd = openat (dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
          if (fd < 0)
            return ib_error_sys (err, errno, "%s: create %s", what, m->target);
          close (fd);
        }
      rfs_made_add (made, real);
    }
  else if (S_ISLNK (st.st_mode))
    {
      /* A symlink in the image: follow it, inside the rootfs. */
      if (!want_dir)
        return ib_error_set (err, ELOOP, "%s: %s is a symlink in the rootfs", what, m->target);
      cleanup_close int t = ib_open_dir_in_root (rootfd, m->target);
      if (t < 0)
        return ib_error_sys (err, errno, "%s: %s", what, m->target);
      free (real);
      real = rfs_fd_path (t);
      if (real == NULL)
        return ib_error_sys (err, errno, "%s: where is %s", what, m->target);
    }
  else if (want_dir && !S_ISDIR (st.st_mode))
    return ib_error_set (err, ENOTDIR, "%s: %s is not a directory in the rootfs", what, m->target);
  else if (!want_dir && S_ISDIR (st.st_mode))
    return ib_error_set (err, EISDIR, "%s: %s is a directory in the rootfs, the source is not",
                         what, m->target);
  size_t rl = strlen (rootfs);
  if (strncmp (real, rootfs, rl) != 0 || (real[rl] != '/' && real[rl] != '\0'))
    return ib_error_set (err, EXDEV, "%s: %s resolves outside the rootfs", what, m->target);
  pm->m = m;
  pm->real = steal_pointer (&real);
  return 0;
}

int
rfs_make_symlink (int rootfd, const char *rootfs, const ib_sandbox_symlink_t *l,
                  struct made_list *made, ib_error_t *err)
{
  cleanup_free char *what = xasprintf ("symlink %s -> %s", l->path ? l->path : "(none)",
                                       l->target ? l->target : "(none)");
  if (l->path == NULL || l->path[0] != '/' || l->target == NULL || l->target[0] == '\0')
    return ib_error_set (err, EINVAL, "%s: needs an absolute path and a target", what);
  const char *base = NULL;
  cleanup_free char *dir = split_last (l->path, &base);
  if (dir == NULL || strchr (base, '/'))
    return ib_error_set (err, EINVAL, "%s: bad path", what);
  cleanup_close int dfd = dir_in_root (rootfd, rootfs, dir, made, what, err);
  if (dfd < 0)
    return -1;
  struct stat st;
  if (fstatat (dfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0)
    return 0; /* the image has something there: keep it */
  rfs_made_note_parent (made, dfd);
  if (symlinkat (l->target, dfd, base) < 0)
    return ib_error_sys (err, errno, "%s", what);
  cleanup_free char *dpath = rfs_fd_path (dfd);
  cleanup_free char *real = dpath ? ib_path_join (dpath, base) : NULL;
  if (real)
    rfs_made_add (made, real);
  return 0;
}

/* Build the mount tree and pivot_root into it.  Order as bubblewrap's:
 * private propagation, the rootfs bind, then the API filesystems, the
 * host files, our private files, pivot. */
int
rfs_setup_rootfs (const struct run_ctx *ctx, ib_error_t *err)
{
  const char *rootfs = ctx->rootfs;

  /* Nothing we mount may propagate back to the host's mount namespace. */
  if (do_mount (NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL, err) < 0)
    return -1;
  /* pivot_root needs the new root to be a mount point. */
  if (do_mount (rootfs, rootfs, NULL, MS_BIND | MS_REC, NULL, err) < 0)
    return -1;

  /* /proc, /dev and /sys are mounted only where the rootfs has the
   * directory (every image has them; a symlink does not count): creating
   * them would add them to the step's layer. */
  cleanup_free char *proc = ib_path_join (rootfs, "proc");
  if (rfs_is_real_dir (proc))
    {
      if (do_mount ("proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL, err) < 0
          || protect_kernel_paths (rootfs, "proc/", err) < 0)
        return -1;
    }
  else
    ib_debug ("sandbox: rootfs has no /proc directory, not mounting proc");

  cleanup_free char *dev = ib_path_join (rootfs, "dev");
  bool have_dev = rfs_is_real_dir (dev);
  if (have_dev)
    {
      if (setup_dev (dev, ctx->opts->shm_size, err) < 0)
        return -1;
    }
  else
    ib_debug ("sandbox: rootfs has no /dev directory, not mounting /dev");

  cleanup_free char *sys = ib_path_join (rootfs, "sys");
  if (rfs_is_real_dir (sys))
    {
      /* Read-only all the way down (mount_setattr, Linux 5.12): in root
       * mode sysfs, cgroupfs and tracefs files are the host root's.  Where
       * the kernel cannot, only the top mount is bound, without the
       * mounts under it. */
      struct ib_mount_attr attr = { .attr_set = MOUNT_ATTR_RDONLY };
      if (do_mount ("/sys", sys, NULL, MS_BIND | MS_REC, NULL, err) < 0)
        return -1;
      if (syscall (SYS_mount_setattr, AT_FDCWD, sys, AT_RECURSIVE, &attr, sizeof attr) < 0)
        {
          ib_debug ("sandbox: mount_setattr /sys: %s: binding /sys without its submounts",
                    strerror (errno));
          if (umount2 (sys, MNT_DETACH) < 0)
            return ib_error_sys (err, errno, "sandbox: unmount %s", sys);
          if (do_mount ("/sys", sys, NULL, MS_BIND, NULL, err) < 0
              || remount_ro (sys, false, err) < 0)
            return -1;
        }
      if (protect_kernel_paths (rootfs, "sys/", err) < 0)
        return -1;
    }
  else
    ib_debug ("sandbox: rootfs has no /sys directory, not mounting sysfs");

  if (setup_etc_file (rootfs, "resolv.conf", have_dev, NULL, err) < 0
      || setup_etc_file (rootfs, "hosts", have_dev, ctx->opts->add_hosts, err) < 0)
    return -1;

  for (size_t i = 0; i < ctx->n_mounts; i++)
    if (apply_mount (&ctx->mounts[i], err) < 0)
      return -1;

  /* SINGLE mode: setuid() is only emulated by seccomp (it returns 0 and
   * changes nothing), so apt's privilege drop to the _apt user "succeeds"
   * and apt then finds it still runs as root and aborts.  Telling apt not to
   * sandbox its methods avoids the drop (charliecloud does the same).  The
   * file lives in the /dev tmpfs so that nothing is added to the rootfs;
   * the command's environment points APT_CONFIG at it. */
  if (ctx->mode == IB_USERNS_SINGLE && have_dev)
    {
      cleanup_free char *conf = ib_path_join (rootfs, APT_CONF);
      if (write_small_file (conf, "APT::Sandbox::User \"root\";\n", 0644, err) < 0)
        return -1;
    }

  /* no shared library is loaded from here on: it would be the rootfs's */
  ib_lazylib_seal ();
  if (chdir (rootfs) < 0)
    return ib_error_sys (err, errno, "chdir %s", rootfs);
  /* pivot_root(".", "."): the old root ends up stacked on the new one and
   * is detached right away, leaving no path to the host's tree. */
  if (syscall (SYS_pivot_root, ".", ".") < 0)
    return ib_error_sys (err, errno, "pivot_root %s", rootfs);
  if (umount2 (".", MNT_DETACH) < 0)
    return ib_error_sys (err, errno, "detach the old root");
  if (chdir ("/") < 0)
    return ib_error_sys (err, errno, "chdir /");
  return 0;
}

