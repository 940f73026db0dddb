/* rootfs/sandbox.c — run one build step in mount + pid (+ net) namespaces.
 *
 * Processes (the user namespace was entered before, see userns.c):
 *
 *   imgbuild ── S (setup parent) ── P1 (pid 1 of the new pid namespace)
 *                                     └── C (the command)
 *
 * S unshares the namespaces and forks P1, which is then pid 1: P1 builds the
 * mount tree (in the order below), pivot_root()s into the rootfs and forks C.
 * C sets its ids, installs seccomp and execs the command.  P1 reaps every
 * orphan of the namespace and exits with C's status as soon as C exits; the
 * kernel then kills whatever is left in the namespace.  S waits for P1 and
 * passes its status on.  Every child has PR_SET_PDEATHSIG(SIGKILL), so
 * nothing survives a killed imgbuild.
 *
 * Failures of the setup and of exec are written, as "ERRNO:message", to a
 * close-on-exec pipe that imgbuild reads until EOF: the pipe closes without
 * a message when the command has been exec'd.
 */
#include "rootfs/sandbox.h"
#include "common/util.h"
#include "rootfs/console.h"
#include "rootfs/resolve.h"
#include "rootfs/seccomp.h"
#include "rootfs/userns.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <net/if.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define HOSTNAME "imgbuild"
/* Our files inside the /dev tmpfs: never part of the rootfs, gone with the
 * mount namespace. */
#define PRIVATE_DIR "/dev/.imgbuild"
#define APT_CONF PRIVATE_DIR "/apt.conf"
/* The tail keeps at most this many bytes, whatever the line count. */
#define TAIL_MAX_BYTES (256 * 1024)

static const int forwarded_signals[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT };
#define N_FORWARDED (sizeof forwarded_signals / sizeof forwarded_signals[0])

/* Everything the children need, computed before the first fork so that the
 * children allocate as little as possible. */
/* A mount of opts->mounts with its target resolved (and created) in the
 * rootfs before the fork: `real` is the host path of the target, inside the
 * rootfs, without symlinks, so the child mounts on exactly what was
 * checked. */
struct prepared_mount
{
  const ib_mount_t *m;
  char *real;
  /* under /dev, which is the sandbox's own tmpfs: the child makes the
   * mount point there (want_dir says which kind), the rootfs gets nothing */
  bool in_dev;
  bool want_dir;
};

struct run_ctx
{
  const ib_sandbox_opts_t *opts;
  struct prepared_mount *mounts; /* sorted by depth of target */
  size_t n_mounts;
  const char *ldconfig;  /* path of ldconfig inside the rootfs, or NULL */
  int ldcache_fd;        /* memfd that gets ldconfig's /etc/ld.so.cache, or -1 */
  ib_userns_mode_t mode;
  char *rootfs;       /* realpath of opts->rootfs */
  char **envp;        /* opts->env, plus APT_CONFIG in SINGLE mode */
  char **candidates;  /* paths to try for argv[0], inside the rootfs */
  const char *cwd;
  int err_w;          /* close-on-exec pipe for setup / exec failures */
  int tail_w;         /* -1, or stdout+stderr of the command */
  int console_w;      /* opts->tty: socket that gets the pty's master, else -1 */
  struct winsize ws;  /* opts->tty: our terminal's size (0x0: unknown) */
};

static void write_all (int fd, const char *p, size_t n);

/* --- failure reporting from the children -------------------------------- */

/* Write "ERRNO:message[: strerror]" to the error pipe and _exit. */
static void __attribute__ ((noreturn, format (printf, 4, 5)))
child_fail (int fd, int code, int errnum, const char *fmt, ...)
{
  char msg[2048];
  va_list ap;
  va_start (ap, fmt);
  vsnprintf (msg, sizeof msg, fmt, ap);
  va_end (ap);
  char out[2300];
  int n = snprintf (out, sizeof out, "%d:%s%s%s", errnum, msg, errnum ? ": " : "",
                    errnum ? strerror (errnum) : "");
  if (n > 0)
    {
      size_t len = (size_t) n < sizeof out ? (size_t) n : sizeof out - 1;
      if (write (fd, out, len) < 0)
        _exit (code);
    }
  _exit (code);
}

static void __attribute__ ((noreturn))
child_fail_err (int fd, int code, ib_error_t *err)
{
  child_fail (fd, code, 0, "%s", (*err)->msg);
}

/* --- signals ------------------------------------------------------------- */

/* Children: one forwarding target (S forwards to P1, P1 to C's process
 * group: C leads its own session, and a terminal's ^C would have reached
 * the whole foreground group). */
static volatile pid_t child_forward_to;

static void
child_forward_handler (int sig)
{
  int saved = errno;
  pid_t p = child_forward_to;
  if (p != 0)
    kill (p, sig);
  errno = saved;
}

static void
child_install_forwarding (pid_t target)
{
  child_forward_to = target;
  struct sigaction sa = { 0 };
  sa.sa_handler = child_forward_handler;
  sigemptyset (&sa.sa_mask);
  sa.sa_flags = 0; /* no SA_RESTART: waitpid returns EINTR, we loop */
  for (size_t i = 0; i < N_FORWARDED; i++)
    sigaction (forwarded_signals[i], &sa, NULL);
}

/* Default dispositions for every signal (caught ones would be reset by
 * exec anyway, but ignored ones, e.g. SIGPIPE, would be inherited). */
static void
reset_signals (void)
{
  struct sigaction sa = { 0 };
  sa.sa_handler = SIG_DFL;
  sigemptyset (&sa.sa_mask);
  for (int s = 1; s < NSIG; s++)
    if (s != SIGKILL && s != SIGSTOP)
      sigaction (s, &sa, NULL);
}

static void
unblock_all_signals (void)
{
  sigset_t none;
  sigemptyset (&none);
  sigprocmask (SIG_SETMASK, &none, NULL);
}

/* imgbuild itself: while sandboxes run, SIGINT/SIGTERM/SIGHUP/SIGQUIT are
 * forwarded to each of them instead of killing imgbuild before it reaped
 * them.  Several threads may run sandboxes at once: the handler is installed
 * by the first and restored by the last, and each registers its S in a slot. */
#define FORWARD_SLOTS 64
static volatile pid_t forward_slots[FORWARD_SLOTS];
static pthread_mutex_t forward_lock = PTHREAD_MUTEX_INITIALIZER;
static int forward_users;
static struct sigaction forward_saved[N_FORWARDED];

static void
parent_forward_handler (int sig)
{
  int saved = errno;
  for (int i = 0; i < FORWARD_SLOTS; i++)
    {
      pid_t p = forward_slots[i];
      if (p > 0)
        kill (p, sig);
    }
  errno = saved;
}

static void
parent_forwarding_begin (void)
{
  pthread_mutex_lock (&forward_lock);
  if (forward_users++ == 0)
    {
      struct sigaction sa = { 0 };
      sa.sa_handler = parent_forward_handler;
      sigemptyset (&sa.sa_mask);
      sa.sa_flags = 0;
      for (size_t i = 0; i < N_FORWARDED; i++)
        sigaction (forwarded_signals[i], &sa, &forward_saved[i]);
    }
  pthread_mutex_unlock (&forward_lock);
}

static void
parent_forwarding_end (void)
{
  pthread_mutex_lock (&forward_lock);
  if (--forward_users == 0)
    for (size_t i = 0; i < N_FORWARDED; i++)
      sigaction (forwarded_signals[i], &forward_saved[i], NULL);
  pthread_mutex_unlock (&forward_lock);
}

static int
forward_slot_add (pid_t pid)
{
  for (int i = 0; i < FORWARD_SLOTS; i++)
    {
      pid_t expected = 0;
      if (__atomic_compare_exchange_n (&forward_slots[i], &expected, pid, false, __ATOMIC_SEQ_CST,
                                       __ATOMIC_SEQ_CST))
        return i;
    }
  return -1; /* more than FORWARD_SLOTS at once: that one is not forwarded to */
}

static void
forward_slot_remove (int slot)
{
  if (slot >= 0)
    __atomic_store_n (&forward_slots[slot], 0, __ATOMIC_SEQ_CST);
}

/* --- mount tree (in P1) --------------------------------------------------- */

static bool
is_dir (const char *path)
{
  struct stat st;
  return stat (path, &st) == 0 && S_ISDIR (st.st_mode);
}

/* A directory, and not a symlink to one: mount targets in the rootfs must
 * not lead elsewhere. */
static bool
is_real_dir (const char *path)
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
setup_dev (const char *dev, ib_error_t *err)
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
      if (touch (target, err) < 0)
        return -1;
      if (do_mount (host, target, NULL, MS_BIND, NULL, err) < 0)
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
  if (do_mount ("tmpfs", shm, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777", err) < 0)
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
  if (mount ("/dev/null", path, NULL, MS_BIND, NULL) < 0)
    return ib_error_sys (err, errno, "sandbox: mask /%s", rel);
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
    {
      if (*err == NULL)
        ib_error_sys (err, errno, "sandbox: read-only /%s", rel);
      return -1;
    }
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
setup_etc_file (const char *rootfs, const char *name, bool have_dev, ib_error_t *err)
{
  cleanup_free char *host = ib_path_join ("/etc", name);
  cleanup_free char *rel = ib_path_join ("etc", name);
  cleanup_free char *target = ib_path_join (rootfs, rel);
  cleanup_free char *etc = ib_path_join (rootfs, "etc");
  struct stat st;
  if (!is_real_dir (etc) || lstat (target, &st) < 0 || !S_ISREG (st.st_mode))
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

/* What ib_sandbox_run made in the rootfs for the run, removed afterwards
 * (deepest first) where it is still what was made: an empty directory, an
 * empty file or the symlink, same inode. */
struct made
{
  char *path;
  dev_t dev;
  ino_t ino;
  mode_t type;
};

struct dirtime
{
  char *path;
  struct timespec times[2]; /* atime, mtime before anything was made */
  struct timespec ready;    /* mtime once everything was made, before the run */
  bool always;              /* put back even if the command changed the
                               directory (ldconfig's, which runs in it) */
  bool restore;
};

struct made_list
{
  struct made *v;
  size_t n;
  /* directories of the rootfs something was made in: their times are put
   * back after the removals, so the layer does not list them as changed */
  struct dirtime *dirs;
  size_t n_dirs;
};

/* Call before making something in directory fd `dfd`. */
static char *fd_path (int fd);
static void
made_note_dir (struct made_list *l, int dfd, bool always)
{
  struct stat st;
  cleanup_free char *p = fd_path (dfd);
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

static void
made_note_parent (struct made_list *l, int dfd)
{
  made_note_dir (l, dfd, false);
}

/* Just before the run: the directories' times as we leave them. */
static void
made_snapshot (struct made_list *l)
{
  struct stat st;
  for (size_t i = 0; i < l->n_dirs; i++)
    if (stat (l->dirs[i].path, &st) == 0)
      l->dirs[i].ready = st.st_mtim;
}

/* Just after the run: a directory the command changed keeps its new time
 * (the step's change belongs in the layer). */
static void
made_check (struct made_list *l)
{
  struct stat st;
  for (size_t i = 0; i < l->n_dirs; i++)
    l->dirs[i].restore
        = l->dirs[i].always
          || (stat (l->dirs[i].path, &st) == 0 && st.st_mtim.tv_sec == l->dirs[i].ready.tv_sec
              && st.st_mtim.tv_nsec == l->dirs[i].ready.tv_nsec);
}

static void
made_add (struct made_list *l, const char *path)
{
  struct stat st;
  if (lstat (path, &st) < 0)
    return;
  l->v = xrealloc (l->v, sizeof *l->v * (l->n + 1));
  l->v[l->n++] = (struct made){ xstrdup (path), st.st_dev, st.st_ino, st.st_mode & S_IFMT };
}

static void
made_remove_all (struct made_list *l)
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
static char *
fd_path (int fd)
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

static int
cmp_depth (const void *a, const void *b)
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
          made_note_parent (made, fd);
          if (mkdirat (fd, comp, 0755) < 0 && errno != EEXIST)
            {
              int er = errno;
              close (fd);
              ib_error_sys (err, er, "%s: create %s in the rootfs", what, np);
              free (np);
              return -1;
            }
          cleanup_free char *parent = fd_path (fd);
          cleanup_free char *created = parent ? ib_path_join (parent, comp) : NULL;
          if (created)
            made_add (made, created);
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

static int
prepare_mount (int rootfd, const char *rootfs, const ib_mount_t *m, struct prepared_mount *pm,
               struct made_list *made, ib_error_t *err)
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
  if (ib_str_has_prefix (t, "/dev/") && t[5] && !strstr (t, "/..") && is_real_dir (devdir))
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
  cleanup_free char *dpath = fd_path (dfd);
  if (dpath == NULL)
    return ib_error_sys (err, errno, "%s: where is %s", what, dir);
  cleanup_free char *real = ib_path_join (dpath, name);
  struct stat st;
  if (fstatat (dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
    {
      if (errno != ENOENT)
        return ib_error_sys (err, errno, "%s: %s", what, m->target);
      made_note_parent (made, dfd);
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
      made_add (made, real);
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
      real = fd_path (t);
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

static int
make_symlink (int rootfd, const char *rootfs, const ib_sandbox_symlink_t *l,
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
  made_note_parent (made, dfd);
  if (symlinkat (l->target, dfd, base) < 0)
    return ib_error_sys (err, errno, "%s", what);
  cleanup_free char *dpath = fd_path (dfd);
  cleanup_free char *real = dpath ? ib_path_join (dpath, base) : NULL;
  if (real)
    made_add (made, real);
  return 0;
}

/* Bring up lo in a fresh network namespace, as Docker's --network=none. */
static void
loopback_up (void)
{
  int s = socket (AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0)
    {
      ib_debug ("sandbox: socket: %s (lo stays down)", strerror (errno));
      return;
    }
  struct ifreq ifr = { 0 };
  strncpy (ifr.ifr_name, "lo", sizeof ifr.ifr_name - 1);
  if (ioctl (s, SIOCGIFFLAGS, &ifr) == 0)
    {
      ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
      if (ioctl (s, SIOCSIFFLAGS, &ifr) < 0)
        ib_debug ("sandbox: bring up lo: %s", strerror (errno));
    }
  close (s);
}

/* Build the mount tree and pivot_root into it.  Order as bubblewrap's:
 * private propagation, the rootfs bind, then the API filesystems, the
 * host files, our private files, pivot. */
static int
setup_rootfs (const struct run_ctx *ctx, ib_error_t *err)
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
  if (is_real_dir (proc))
    {
      if (do_mount ("proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL, err) < 0
          || protect_kernel_paths (rootfs, "proc/", err) < 0)
        return -1;
    }
  else
    ib_debug ("sandbox: rootfs has no /proc directory, not mounting proc");

  cleanup_free char *dev = ib_path_join (rootfs, "dev");
  bool have_dev = is_real_dir (dev);
  if (have_dev)
    {
      if (setup_dev (dev, err) < 0)
        return -1;
    }
  else
    ib_debug ("sandbox: rootfs has no /dev directory, not mounting /dev");

  cleanup_free char *sys = ib_path_join (rootfs, "sys");
  if (is_real_dir (sys))
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

  if (setup_etc_file (rootfs, "resolv.conf", have_dev, err) < 0
      || setup_etc_file (rootfs, "hosts", have_dev, err) < 0)
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

/* --- what the sandbox's own processes hold -------------------------------- */

/* Close every descriptor except 0-2 and those in keep (-1 entries
 * ignored): imgbuild's store lock, its pipes to other stages and the
 * progress display must not reach the sandbox. */
static void
close_fds_except (const int *keep, size_t n_keep)
{
  int lo = 3;
  for (;;)
    {
      int next = INT_MAX; /* the smallest kept fd >= lo */
      for (size_t i = 0; i < n_keep; i++)
        if (keep[i] >= lo && keep[i] < next)
          next = keep[i];
      unsigned int hi = next == INT_MAX ? ~0U : (unsigned int) next - 1;
      if (next > lo)
        {
#ifdef SYS_close_range
          if (syscall (SYS_close_range, (unsigned int) lo, hi, 0) < 0)
#endif
            {
              long max = sysconf (_SC_OPEN_MAX);
              if (max < 0 || max > 1 << 20)
                max = 1 << 20;
              for (long fd = lo; fd < max && (unsigned long) fd <= hi; fd++)
                close ((int) fd);
            }
        }
      if (next == INT_MAX)
        return;
      lo = next + 1;
    }
}

#ifndef _LINUX_CAPABILITY_VERSION_3
#define _LINUX_CAPABILITY_VERSION_3 0x20080522
#endif
/* P1 once the command is forked: nothing left that a step could use.  It
 * keeps CAP_KILL only (forwarding a signal to a step running as another
 * uid), is under the same seccomp filter as the step, with NO_NEW_PRIVS;
 * it was made non-dumpable when it started (pid1_main). */
static int
pid1_harden (ib_error_t *err)
{
  if (prctl (PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
    return ib_error_sys (err, errno, "sandbox: pid 1: no_new_privs");
  prctl (PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  for (int cap = 0; cap <= 63; cap++)
    if (cap != 5 /* CAP_KILL */ && prctl (PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
      return ib_error_sys (err, errno, "sandbox: pid 1: drop capability %d", cap);
  struct
  {
    uint32_t version;
    int pid;
  } hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
  struct
  {
    uint32_t effective, permitted, inheritable;
  } data[2] = { { 1u << 5, 1u << 5, 0 }, { 0, 0, 0 } };
  if (syscall (SYS_capset, &hdr, data) < 0)
    return ib_error_sys (err, errno, "sandbox: pid 1: drop capabilities");
  return ib_seccomp_install (false, err);
}

/* --- the command (C) ------------------------------------------------------ */

/* Mark every descriptor above stderr close-on-exec (the error pipe must
 * stay open until exec succeeds). */
static void
cloexec_from (int lowest)
{
#ifdef SYS_close_range
  if (syscall (SYS_close_range, (unsigned int) lowest, ~0U, 4 /* CLOSE_RANGE_CLOEXEC */) == 0)
    return;
#endif
  long max = sysconf (_SC_OPEN_MAX);
  if (max < 0 || max > 1 << 20)
    max = 1 << 20;
  for (int fd = lowest; fd < max; fd++)
    {
      int fl = fcntl (fd, F_GETFD);
      if (fl >= 0 && !(fl & FD_CLOEXEC))
        fcntl (fd, F_SETFD, fl | FD_CLOEXEC);
    }
}

static void __attribute__ ((noreturn))
command_main (const struct run_ctx *ctx, int pty)
{
  const ib_sandbox_opts_t *o = ctx->opts;
  int efd = ctx->err_w;
  ib_error_t err = NULL;

  prctl (PR_SET_PDEATHSIG, SIGKILL);
  if (getppid () != 1)
    _exit (125);
  reset_signals ();
  unblock_all_signals ();
  umask (022);
  /* A session of its own, without a controlling terminal: /dev/tty is
   * nobody's, and TIOCSTI on a terminal the caller passed as stdio is
   * refused by the kernel (bubblewrap's CVE-2017-5226), besides the
   * seccomp filter. */
  if (setsid () < 0)
    child_fail (efd, 125, errno, "sandbox: setsid");
  if (pty >= 0)
    {
      if (ioctl (pty, TIOCSCTTY, 0) < 0)
        child_fail (efd, 125, errno, "sandbox: make the pty the controlling terminal");
      if (dup2 (pty, 0) < 0 || dup2 (pty, 1) < 0 || dup2 (pty, 2) < 0)
        child_fail (efd, 125, errno, "dup2");
      if (pty > 2)
        close (pty);
    }

  /* stdio: no stdin unless asked (a build step is not interactive: apt and
   * debconf must not wait for answers); stdout+stderr into the tail pipe
   * when asked. */
  if (!o->keep_stdin && pty < 0)
    {
      int devnull = open ("/dev/null", O_RDONLY | O_CLOEXEC);
      if (devnull >= 0)
        {
          if (devnull != 0)
            {
              dup2 (devnull, 0);
              close (devnull);
            }
        }
      else
        close (0);
    }
  if (ctx->tail_w >= 0)
    {
      if (dup2 (ctx->tail_w, 1) < 0 || dup2 (ctx->tail_w, 2) < 0)
        child_fail (efd, 125, errno, "dup2");
      if (ctx->tail_w > 2)
        close (ctx->tail_w);
    }
  cloexec_from (3);

  /* The working directory is created as root, like WORKDIR in Docker. */
  if (ib_mkdir_p (ctx->cwd, 0755, &err) < 0)
    child_fail_err (efd, 125, &err);

  if (ctx->mode != IB_USERNS_SINGLE)
    {
      if (setgroups (0, NULL) < 0)
        child_fail (efd, 125, errno, "setgroups");
      if (setresgid (o->gid, o->gid, o->gid) < 0)
        child_fail (efd, 125, errno, "set gid %lu (is it mapped in the user namespace?)",
                    (unsigned long) o->gid);
      if (setresuid (o->uid, o->uid, o->uid) < 0)
        child_fail (efd, 125, errno, "set uid %lu (is it mapped in the user namespace?)",
                    (unsigned long) o->uid);
    }
  if (chdir (ctx->cwd) < 0)
    child_fail (efd, 125, errno, "chdir %s", ctx->cwd);

  if (ib_seccomp_install (ctx->mode == IB_USERNS_SINGLE, &err) < 0)
    child_fail_err (efd, 125, &err);

  /* PATH lookup by hand: execvpe searches the PATH of our own environment,
   * not the step's.  The candidates were computed from the step's PATH
   * before the fork and are resolved here, inside the rootfs. */
  int first_err = ENOENT;
  for (char **c = ctx->candidates; *c; c++)
    {
      execve (*c, o->argv, ctx->envp);
      int e = errno;
      if (e == ENOENT || e == ENOTDIR)
        continue;
      if (e == EACCES)
        {
          first_err = EACCES;
          continue;
        }
      child_fail (efd, 127, e, "exec %s", *c);
    }
  if (first_err == ENOENT)
    child_fail (efd, 127, 0, "command not found: %s", o->argv[0]);
  child_fail (efd, 126, first_err, "exec %s", o->argv[0]);
}

/* --- pid 1 (P1) and the setup parent (S) ---------------------------------- */

static int
status_to_code (int status)
{
  if (WIFEXITED (status))
    return WEXITSTATUS (status);
  if (WIFSIGNALED (status))
    return 128 + WTERMSIG (status);
  return 125;
}

/* CDI's update-ldcache: the image's own ldconfig, confined like the
 * command (its ids are root's, seccomp on), with -X so that it makes no
 * soname links, over ld.so.conf plus ldconfig_dirs.  Its cache is copied to
 * ctx->ldcache_fd for ib_sandbox_run to compare afterwards.  A failing
 * ldconfig is reported and the run goes on (the libraries may still be
 * found through LD_LIBRARY_PATH). */
static void
run_ldconfig (const struct run_ctx *ctx)
{
  pid_t p = fork ();
  if (p < 0)
    return;
  if (p == 0)
    {
      ib_error_t err = NULL;
      setsid (); /* the image's binary: no terminal of the caller's */
      int devnull = open ("/dev/null", O_RDONLY);
      if (devnull >= 0)
        dup2 (devnull, 0);
      if (ctx->tail_w >= 0)
        {
          dup2 (ctx->tail_w, 1);
          dup2 (ctx->tail_w, 2);
        }
      cloexec_from (3);
      if (ib_seccomp_install (ctx->mode == IB_USERNS_SINGLE, &err) < 0)
        _exit (125);
      char **argv = NULL;
      ib_strv_push (&argv, ctx->ldconfig);
      ib_strv_push (&argv, "-X");
      for (char *const *d = ctx->opts->ldconfig_dirs; d && *d; d++)
        ib_strv_push (&argv, *d);
      char *const envp[] = { (char *) "PATH=" DEFAULT_PATH, NULL };
      execve (ctx->ldconfig, argv, envp);
      _exit (127);
    }
  int status;
  while (waitpid (p, &status, 0) < 0)
    if (errno != EINTR)
      return;
  if (status != 0)
    {
      char msg[256];
      int n = snprintf (msg, sizeof msg,
                        "imgbuild: warning: %s in the rootfs failed (%s %d): the driver "
                        "libraries may not be found\n",
                        ctx->ldconfig, WIFEXITED (status) ? "exit status" : "signal",
                        WIFEXITED (status) ? WEXITSTATUS (status) : WTERMSIG (status));
      write_all (ctx->tail_w >= 0 ? ctx->tail_w : 2, msg, (size_t) n);
    }
  if (ctx->ldcache_fd >= 0)
    {
      int in = open ("/etc/ld.so.cache", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
      if (in >= 0)
        {
          char buf[65536];
          ssize_t k;
          while ((k = read (in, buf, sizeof buf)) > 0)
            write_all (ctx->ldcache_fd, buf, (size_t) k);
          close (in);
        }
    }
}

static void __attribute__ ((noreturn))
pid1_main (const struct run_ctx *ctx)
{
  ib_error_t err = NULL;
  int efd = ctx->err_w;

  prctl (PR_SET_PDEATHSIG, SIGKILL);
  /* Non-dumpable from the start: the kernel then asks for CAP_SYS_PTRACE
   * in the user namespace our memory was made in (the host's: imgbuild
   * was exec'd there) before it lets anyone ptrace us or open
   * /proc/1/{exe,fd,mem,environ,root}.  A step never has that: pid 1
   * cannot be traced into, and /proc/1/exe does not lead to the host's
   * imgbuild binary (runc's CVE-2019-5736).  Children of ours are
   * dumpable again once they exec. */
  if (prctl (PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
    child_fail (efd, 125, errno, "sandbox: pid 1: set non-dumpable");
  reset_signals (); /* signals stay blocked until the handlers are in */

  if (ctx->opts->network_none)
    loopback_up ();
  if (sethostname (HOSTNAME, strlen (HOSTNAME)) < 0)
    ib_debug ("sandbox: sethostname: %s", strerror (errno));
  if (setup_rootfs (ctx, &err) < 0)
    child_fail (efd, 125, 0, "sandbox: %s", err->msg);
  if (ctx->ldconfig)
    run_ldconfig (ctx);

  /* opts->tty: a pty of the sandbox's devpts (mounted above, reached
   * after pivot_root), its master passed to imgbuild to relay */
  int pty = -1;
  if (ctx->console_w >= 0)
    {
      int master;
      if (ib_console_open (&master, &pty, &ctx->ws, &err) < 0
          || ib_console_send (ctx->console_w, master, &err) < 0)
        child_fail (efd, 125, 0, "sandbox: %s", err->msg);
      close (master);
      close (ctx->console_w);
    }

  pid_t cmd = fork ();
  if (cmd < 0)
    child_fail (efd, 125, errno, "sandbox: fork");
  if (cmd == 0)
    command_main (ctx, pty);

  if (pid1_harden (&err) < 0)
    {
      kill (cmd, SIGKILL);
      child_fail (efd, 125, 0, "%s", err->msg);
    }
  /* Nothing of the host's stays with us, not even the caller's terminal:
   * from here on we only reap and forward signals. */
  close_fds_except (NULL, 0);
  close (0);
  close (1);
  close (2);
  /* pid 1 of a namespace ignores every signal it has no handler for: catch
   * the usual termination signals and pass them on to the command. */
  child_install_forwarding (-cmd);
  unblock_all_signals ();

  for (;;)
    {
      int status;
      pid_t p = waitpid (-1, &status, 0);
      if (p < 0)
        {
          if (errno == EINTR)
            continue;
          _exit (125); /* ECHILD: cannot happen before cmd was reaped */
        }
      if (p == cmd)
        _exit (status_to_code (status)); /* the kernel kills the rest */
    }
}

static void __attribute__ ((noreturn))
setup_parent_main (const struct run_ctx *ctx, pid_t imgbuild_pid)
{
  int efd = ctx->err_w;

  prctl (PR_SET_PDEATHSIG, SIGKILL);
  if (getppid () != imgbuild_pid)
    _exit (125);
  reset_signals (); /* still blocked */
  prctl (PR_SET_DUMPABLE, 0, 0, 0, 0);
  /* Before anything of the sandbox exists: only stdio and our own pipes
   * go on to pid 1 and the command. */
  int keep[] = { ctx->err_w, ctx->tail_w, ctx->ldcache_fd, ctx->console_w };
  close_fds_except (keep, sizeof keep / sizeof *keep);

  int flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWUTS | CLONE_NEWIPC;
  if (ctx->opts->network_none)
    flags |= CLONE_NEWNET;
  if (unshare (flags) < 0)
    child_fail (efd, 125, errno, "sandbox: unshare");

  pid_t p1 = fork ();
  if (p1 < 0)
    child_fail (efd, 125, errno, "sandbox: fork pid 1");
  if (p1 == 0)
    pid1_main (ctx);

  close (efd);
  if (ctx->tail_w >= 0)
    close (ctx->tail_w);
  if (ctx->console_w >= 0)
    close (ctx->console_w);
  child_install_forwarding (p1);
  unblock_all_signals ();

  int status;
  while (waitpid (p1, &status, 0) < 0)
    if (errno != EINTR)
      _exit (125);
  _exit (status_to_code (status));
}

/* --- imgbuild side -------------------------------------------------------- */

static char **
exec_candidates (const char *argv0, char *const *env)
{
  char **v = NULL;
  if (strchr (argv0, '/'))
    {
      ib_strv_push (&v, argv0);
      return v;
    }
  const char *path = DEFAULT_PATH;
  for (char *const *e = env; e && *e; e++)
    if (ib_str_has_prefix (*e, "PATH="))
      path = *e + 5;
  /* An empty PATH element means the working directory, as for execvp. */
  const char *s = path;
  for (;;)
    {
      const char *colon = strchrnul (s, ':');
      cleanup_free char *dir = colon == s ? xstrdup (".") : xstrndup (s, (size_t) (colon - s));
      cleanup_free char *p = ib_path_join (dir, argv0);
      ib_strv_push (&v, p);
      if (*colon == '\0')
        break;
      s = colon + 1;
    }
  if (v == NULL)
    v = xmalloc (sizeof (char *));
  return v;
}

static char **
build_env (char *const *env, ib_userns_mode_t mode)
{
  char **v = ib_strv_dup (env);
  if (v == NULL)
    v = xmalloc (sizeof (char *));
  if (mode == IB_USERNS_SINGLE)
    {
      for (char **e = v; *e; e++)
        if (ib_str_has_prefix (*e, "APT_CONFIG="))
          return v;
      ib_strv_push (&v, "APT_CONFIG=" APT_CONF);
    }
  return v;
}

/* Keep the last `lines` lines (and at most TAIL_MAX_BYTES) of b. */
static void
tail_trim (ib_buf_t *b, int lines)
{
  if (b->len == 0)
    return;
  size_t i = b->len;
  if (b->data[i - 1] == '\n')
    i--;
  int seen = 0;
  size_t cut = 0;
  while (i > 0)
    {
      i--;
      if (b->data[i] == '\n' && ++seen == lines)
        {
          cut = i + 1;
          break;
        }
    }
  if (b->len - cut > TAIL_MAX_BYTES)
    cut = b->len - TAIL_MAX_BYTES;
  if (cut > 0)
    {
      memmove (b->data, b->data + cut, b->len - cut);
      b->len -= cut;
      b->data[b->len] = '\0';
    }
}

static void
write_all (int fd, const char *p, size_t n)
{
  while (n > 0)
    {
      ssize_t w = write (fd, p, n);
      if (w < 0 && errno == EINTR)
        continue;
      if (w <= 0)
        return;
      p += w;
      n -= (size_t) w;
    }
}

/* Read the error pipe and the tail pipe until both are closed. */
static void
collect_output (int err_r, int tail_r, const ib_sandbox_opts_t *opts, ib_buf_t *errmsg,
                ib_buf_t *tail)
{
  int tail_lines = opts->tail_lines;
  char buf[65536];
  while (err_r >= 0 || tail_r >= 0)
    {
      struct pollfd fds[2];
      nfds_t n = 0;
      if (err_r >= 0)
        fds[n++] = (struct pollfd){ .fd = err_r, .events = POLLIN };
      if (tail_r >= 0)
        fds[n++] = (struct pollfd){ .fd = tail_r, .events = POLLIN };
      if (poll (fds, n, -1) < 0)
        {
          if (errno == EINTR)
            continue;
          break;
        }
      for (nfds_t i = 0; i < n; i++)
        {
          if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
          ssize_t k = read (fds[i].fd, buf, sizeof buf);
          if (k < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
          bool is_err = fds[i].fd == err_r;
          if (k <= 0)
            {
              close (fds[i].fd);
              if (is_err)
                err_r = -1;
              else
                tail_r = -1;
              continue;
            }
          if (is_err)
            ib_buf_append (errmsg, buf, (size_t) k);
          else
            {
              if (opts->output_fn)
                opts->output_fn (opts->output_ud, buf, (size_t) k);
              else
                write_all (2, buf, (size_t) k);
              ib_buf_append (tail, buf, (size_t) k);
              tail_trim (tail, tail_lines);
            }
        }
    }
}

/* provide_etc_files: an empty placeholder for /etc/NAME, created before
 * the run when the rootfs has none, removed afterwards. */
struct placeholder
{
  char *path;
  dev_t dev;
  ino_t ino;
};

static void
placeholder_create (const char *rootfs, const char *name, struct placeholder *ph)
{
  cleanup_free char *etc = ib_path_join (rootfs, "etc");
  cleanup_free char *path = ib_path_join (etc, name);
  struct stat st;
  if (!is_real_dir (etc) || lstat (path, &st) == 0 || errno != ENOENT)
    return;
  int fd = open (path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0)
    {
      ib_debug ("sandbox: create placeholder %s: %s", path, strerror (errno));
      return;
    }
  if (fstat (fd, &st) == 0)
    {
      ph->path = steal_pointer (&path);
      ph->dev = st.st_dev;
      ph->ino = st.st_ino;
    }
  close (fd);
}

static void
placeholder_remove (struct placeholder *ph)
{
  struct stat st;
  if (ph->path == NULL)
    return;
  /* Only our file: the step cannot replace a mount point, but be sure. */
  if (lstat (ph->path, &st) == 0 && S_ISREG (st.st_mode) && st.st_dev == ph->dev
      && st.st_ino == ph->ino && unlink (ph->path) < 0)
    ib_warn ("sandbox: remove placeholder %s: %s", ph->path, strerror (errno));
  free (ph->path);
  ph->path = NULL;
}

static int
check_opts (const ib_sandbox_opts_t *o, ib_error_t *err)
{
  if (o == NULL || o->rootfs == NULL)
    return ib_error_set (err, EINVAL, "sandbox: no rootfs");
  if (o->argv == NULL || o->argv[0] == NULL || o->argv[0][0] == '\0')
    return ib_error_set (err, EINVAL, "sandbox: empty command");
  if (o->cwd != NULL && o->cwd[0] != '/')
    return ib_error_set (err, EINVAL, "sandbox: working directory %s is not absolute", o->cwd);
  if (o->tty && o->tail_lines > 0)
    return ib_error_set (err, EINVAL, "sandbox: a terminal and an output tail exclude each other");
  return 0;
}

/* A file of the rootfs saved before the run and put back afterwards. */
struct saved_file
{
  char *path;          /* host path, inside the rootfs */
  bool had;            /* it existed (a regular file) */
  char *data;
  size_t len;
  struct stat st;
};

static void
saved_file_take (struct saved_file *f, const char *path)
{
  f->path = xstrdup (path);
  ib_error_t e = NULL;
  if (lstat (path, &f->st) == 0 && S_ISREG (f->st.st_mode)
      && ib_read_file (path, &f->data, &f->len, &e) == 0)
    f->had = true;
  ib_error_free (&e);
}

static void
saved_file_restore (struct saved_file *f)
{
  if (f->path == NULL)
    return;
  struct stat st;
  if (!f->had)
    {
      if (lstat (f->path, &st) == 0 && S_ISREG (st.st_mode) && unlink (f->path) < 0)
        ib_warn ("sandbox: remove %s: %s", f->path, strerror (errno));
      return;
    }
  ib_error_t e = NULL;
  if (ib_write_file_atomic (f->path, f->data, f->len, f->st.st_mode & 07777, &e) < 0)
    {
      ib_warn ("sandbox: restore %s: %s", f->path, e->msg);
      ib_error_free (&e);
      return;
    }
  if (lchown (f->path, f->st.st_uid, f->st.st_gid) < 0)
    ib_debug ("sandbox: chown %s: %s", f->path, strerror (errno));
  struct timespec ts[2] = { f->st.st_atim, f->st.st_mtim };
  utimensat (AT_FDCWD, f->path, ts, AT_SYMLINK_NOFOLLOW);
}

static void
saved_file_free (struct saved_file *f)
{
  free (f->path);
  free (f->data);
  memset (f, 0, sizeof *f);
}

/* What ib_sandbox_run prepares in the rootfs beside the mount tree. */
struct extras
{
  struct prepared_mount *mounts;
  size_t n_mounts;
  char *ldconfig;      /* inside the rootfs */
  int ldcache_fd;      /* memfd */
  bool had_cache;      /* the rootfs had /etc/ld.so.cache (a regular file) */
  char *cache;         /* its bytes */
  size_t cache_len;
  struct stat cache_st;
  /* /var/cache/ldconfig/aux-cache, which ldconfig rewrites too */
  struct saved_file aux;
};

static void
extras_free (struct extras *x)
{
  for (size_t i = 0; i < x->n_mounts; i++)
    free (x->mounts[i].real);
  free (x->mounts);
  free (x->ldconfig);
  free (x->cache);
  saved_file_free (&x->aux);
  if (x->ldcache_fd >= 0)
    close (x->ldcache_fd);
  memset (x, 0, sizeof *x);
  x->ldcache_fd = -1;
}

static int
prepare_extras (const ib_sandbox_opts_t *o, const char *rootfs, struct made_list *made,
                struct extras *x, ib_error_t *err)
{
  if (o->n_mounts == 0 && o->n_symlinks == 0 && !o->ldconfig)
    return 0;
  cleanup_close int rootfd = open (rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (rootfd < 0)
    return ib_error_sys (err, errno, "sandbox: rootfs %s", rootfs);
  if (o->n_mounts)
    {
      x->mounts = xmalloc (sizeof *x->mounts * o->n_mounts);
      for (size_t i = 0; i < o->n_mounts; i++)
        {
          if (prepare_mount (rootfd, rootfs, &o->mounts[i], &x->mounts[i], made, err) < 0)
            return -1;
          x->n_mounts++;
        }
      /* stable: equal depths keep the caller's order */
      for (size_t i = 1; i < x->n_mounts; i++)
        for (size_t j = i; j > 0 && cmp_depth (&x->mounts[j - 1], &x->mounts[j]) > 0; j--)
          {
            struct prepared_mount t = x->mounts[j];
            x->mounts[j] = x->mounts[j - 1];
            x->mounts[j - 1] = t;
          }
    }
  for (size_t i = 0; i < o->n_symlinks; i++)
    if (make_symlink (rootfd, rootfs, &o->symlinks[i], made, err) < 0)
      return -1;
  if (o->ldconfig)
    {
      static const char *const cands[] = { "/sbin/ldconfig", "/usr/sbin/ldconfig",
                                           "/usr/bin/ldconfig" };
      for (size_t i = 0; i < sizeof cands / sizeof *cands && x->ldconfig == NULL; i++)
        {
          cleanup_free char *p = ib_path_join (rootfs, cands[i] + 1);
          struct stat st;
          /* a symlink (usrmerge /sbin -> usr/sbin) is fine: exec happens
           * after pivot_root, inside the rootfs */
          if (stat (p, &st) == 0 && S_ISREG (st.st_mode))
            x->ldconfig = xstrdup (cands[i]);
        }
      if (x->ldconfig == NULL)
        {
          ib_warn ("sandbox: the rootfs has no ldconfig: the driver libraries are found only "
                   "through LD_LIBRARY_PATH");
          return 0;
        }
      cleanup_close int etc = ib_open_dir_in_root (rootfd, "etc");
      if (etc >= 0)
        made_note_dir (made, etc, true);
      struct stat st;
      if (etc >= 0 && fstatat (etc, "ld.so.cache", &st, AT_SYMLINK_NOFOLLOW) == 0)
        {
          if (!S_ISREG (st.st_mode))
            {
              ib_warn ("sandbox: /etc/ld.so.cache is not a regular file in the rootfs: not "
                       "running ldconfig");
              free (x->ldconfig);
              x->ldconfig = NULL;
              return 0;
            }
          cleanup_free char *etcp = fd_path (etc);
          cleanup_free char *cp = etcp ? ib_path_join (etcp, "ld.so.cache") : NULL;
          if (cp == NULL || ib_read_file (cp, &x->cache, &x->cache_len, err) < 0)
            return -1;
          x->had_cache = true;
          x->cache_st = st;
        }
      cleanup_close int vc = ib_open_dir_in_root (rootfd, "var/cache/ldconfig");
      cleanup_free char *vcp = vc >= 0 ? fd_path (vc) : NULL;
      if (vcp)
        {
          made_note_dir (made, vc, true);
          cleanup_free char *aux = ib_path_join (vcp, "aux-cache");
          saved_file_take (&x->aux, aux);
        }
      x->ldcache_fd = memfd_create ("imgbuild-ldcache", MFD_CLOEXEC);
      if (x->ldcache_fd < 0)
        return ib_error_sys (err, errno, "sandbox: memfd_create");
    }
  return 0;
}

/* After the run: /etc/ld.so.cache back to what the rootfs had, or, when
 * the command rewrote it (it ran ldconfig itself, e.g. apt installing a
 * library), regenerated without the mounts. */
static void
restore_ldcache (const ib_sandbox_opts_t *o, const char *rootfs, struct extras *x)
{
  cleanup_close int rootfd = open (rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC);
  cleanup_close int etc = rootfd >= 0 ? ib_open_dir_in_root (rootfd, "etc") : -1;
  cleanup_free char *etcp = etc >= 0 ? fd_path (etc) : NULL;
  if (etcp == NULL)
    return;
  cleanup_free char *path = ib_path_join (etcp, "ld.so.cache");
  off_t n = lseek (x->ldcache_fd, 0, SEEK_END);
  cleanup_free char *ours = xmalloc ((size_t) (n > 0 ? n : 0) + 1);
  if (n > 0 && pread (x->ldcache_fd, ours, (size_t) n, 0) != n)
    n = -1;
  cleanup_free char *now = NULL;
  size_t now_len = 0;
  ib_error_t e = NULL;
  struct stat st;
  bool exists = lstat (path, &st) == 0 && S_ISREG (st.st_mode);
  if (exists && ib_read_file (path, &now, &now_len, &e) < 0)
    {
      ib_error_free (&e);
      return;
    }
  bool untouched = n >= 0 && exists && now_len == (size_t) n && memcmp (now, ours, now_len) == 0;
  if (!exists && !x->had_cache)
    return;
  if (untouched || (!exists && x->had_cache))
    {
      saved_file_restore (&x->aux);
      if (!x->had_cache)
        {
          if (unlink (path) < 0)
            ib_warn ("sandbox: remove %s: %s", path, strerror (errno));
          return;
        }
      if (ib_write_file_atomic (path, x->cache, x->cache_len, x->cache_st.st_mode & 07777, &e) < 0)
        {
          ib_warn ("sandbox: restore %s: %s", path, e->msg);
          ib_error_free (&e);
          return;
        }
      if (lchown (path, x->cache_st.st_uid, x->cache_st.st_gid) < 0)
        ib_debug ("sandbox: chown %s: %s", path, strerror (errno));
      struct timespec ts[2] = { x->cache_st.st_atim, x->cache_st.st_mtim };
      utimensat (AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW);
      return;
    }
  /* The command changed the cache while the driver libraries were bound:
   * make it again from the rootfs's own libraries. */
  char *argv[] = { x->ldconfig, NULL };
  ib_sandbox_opts_t again = { .rootfs = rootfs, .argv = argv, .env = NULL, .uid = 0, .gid = 0,
                              .network_none = true };
  int status = 0;
  if (ib_sandbox_run (&again, &status, &e) < 0 || status != 0)
    {
      ib_warn ("sandbox: regenerate /etc/ld.so.cache: %s",
               e ? e->msg : "ldconfig failed (it may list bound driver libraries)");
      ib_error_free (&e);
    }
  (void) o;
}

static int run_in_sandbox (const ib_sandbox_opts_t *opts, ib_userns_mode_t mode, char *rootfs,
                           char **envp, const struct extras *x, int *exit_status,
                           ib_error_t *err);

int
ib_sandbox_run (const ib_sandbox_opts_t *opts, int *exit_status, ib_error_t *err)
{
  if (check_opts (opts, err) < 0)
    return -1;
  if (opts->tail_lines > 0 && opts->tail != NULL)
    *opts->tail = NULL;

  ib_userns_mode_t mode = ib_userns_mode ();
  if (mode == IB_USERNS_AUTO)
    return ib_error_set (err, EPERM, "sandbox: not in a user namespace (ib_userns_enter first)");

  cleanup_free char *rootfs = realpath (opts->rootfs, NULL);
  if (rootfs == NULL)
    return ib_error_sys (err, errno, "sandbox: rootfs %s", opts->rootfs);
  if (!is_dir (rootfs))
    return ib_error_set (err, ENOTDIR, "sandbox: rootfs %s is not a directory", rootfs);

  if (mode == IB_USERNS_SINGLE && (opts->uid != 0 || opts->gid != 0))
    {
      static int warned;
      if (!__atomic_exchange_n (&warned, 1, __ATOMIC_SEQ_CST))
        ib_warn ("user %lu:%lu is emulated: without /etc/subuid ranges only root is mapped, "
                 "steps run as 0:0",
                 (unsigned long) opts->uid, (unsigned long) opts->gid);
    }

  cleanup_strv char **envp = build_env (opts->env, mode);
  struct placeholder placeholders[2] = { { 0 }, { 0 } };
  struct made_list made = { 0 };
  if (opts->provide_etc_files)
    {
      /* /etc's times are put back with the rest (made_remove_all) */
      cleanup_free char *etc = ib_path_join (rootfs, "etc");
      cleanup_close int efd = open (etc, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (efd >= 0)
        made_note_parent (&made, efd);
      placeholder_create (rootfs, "resolv.conf", &placeholders[0]);
      placeholder_create (rootfs, "hosts", &placeholders[1]);
    }
  /* A rootfs without /dev or /proc (FROM scratch plus a static binary)
   * gets them as mount points for this run only, as runc makes them: they
   * are removed afterwards and the root's times put back, so the step's
   * layer does not hold them. */
  {
    cleanup_close int rfd = open (rootfs, O_PATH | O_DIRECTORY | O_CLOEXEC);
    static const char *const points[] = { "dev", "proc" };
    for (size_t i = 0; rfd >= 0 && i < sizeof points / sizeof *points; i++)
      {
        struct stat sb;
        if (fstatat (rfd, points[i], &sb, AT_SYMLINK_NOFOLLOW) == 0 || errno != ENOENT)
          continue;
        made_note_parent (&made, rfd);
        cleanup_free char *p = ib_path_join (rootfs, points[i]);
        if (mkdir (p, 0755) == 0)
          made_add (&made, p);
      }
  }
  struct extras x = { .ldcache_fd = -1 };
  int ret = prepare_extras (opts, rootfs, &made, &x, err);
  made_snapshot (&made);
  if (ret == 0)
    ret = run_in_sandbox (opts, mode, rootfs, envp, &x, exit_status, err);
  made_check (&made);
  if (x.ldconfig)
    restore_ldcache (opts, rootfs, &x);
  extras_free (&x);
  placeholder_remove (&placeholders[0]);
  placeholder_remove (&placeholders[1]);
  made_remove_all (&made); /* last: it puts back directory times */
  return ret;
}

/* ib_sandbox_run once the options are checked: fork S, collect, reap. */
static int
run_in_sandbox (const ib_sandbox_opts_t *opts, ib_userns_mode_t mode, char *rootfs, char **envp,
                const struct extras *x, int *exit_status, ib_error_t *err)
{
  cleanup_strv char **candidates = exec_candidates (opts->argv[0], envp);

  int errp[2];
  if (pipe2 (errp, O_CLOEXEC) < 0)
    return ib_error_sys (err, errno, "sandbox: pipe");
  cleanup_close int err_r = errp[0];
  cleanup_close int err_w = errp[1];
  cleanup_close int tail_r = -1;
  cleanup_close int tail_w = -1;
  bool want_tail = opts->tail_lines > 0;
  if (want_tail)
    {
      int tp[2];
      /* The write end must survive exec in the command: no O_CLOEXEC; the
       * read end is ours only. */
      if (pipe (tp) < 0)
        return ib_error_sys (err, errno, "sandbox: pipe");
      tail_r = tp[0];
      tail_w = tp[1];
      fcntl (tail_r, F_SETFD, FD_CLOEXEC);
    }

  cleanup_close int console_r = -1;
  cleanup_close int console_w = -1;
  struct winsize ws = { 0 };
  if (opts->tty)
    {
      int sv[2];
      if (socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return ib_error_sys (err, errno, "sandbox: socketpair");
      console_r = sv[0];
      console_w = sv[1];
      if (ioctl (STDOUT_FILENO, TIOCGWINSZ, &ws) < 0)
        ioctl (STDIN_FILENO, TIOCGWINSZ, &ws);
    }

  struct run_ctx ctx = {
    .opts = opts,
    .mounts = x->mounts,
    .n_mounts = x->n_mounts,
    .ldconfig = x->ldconfig,
    .ldcache_fd = x->ldcache_fd,
    .mode = mode,
    .rootfs = rootfs,
    .envp = envp,
    .candidates = candidates,
    .cwd = opts->cwd ? opts->cwd : "/",
    .err_w = err_w,
    .tail_w = tail_w,
    .console_w = console_w,
    .ws = ws,
  };

  /* Block the forwarded signals across fork: a child must not run our
   * handler before it has installed its own. */
  sigset_t block, saved_mask;
  sigemptyset (&block);
  for (size_t i = 0; i < N_FORWARDED; i++)
    sigaddset (&block, forwarded_signals[i]);
  parent_forwarding_begin ();
  pthread_sigmask (SIG_BLOCK, &block, &saved_mask);

  fflush (NULL); /* don't duplicate buffered output in the children */
  pid_t me = getpid ();
  pid_t child = fork ();
  if (child < 0)
    {
      int e = errno;
      pthread_sigmask (SIG_SETMASK, &saved_mask, NULL);
      parent_forwarding_end ();
      return ib_error_sys (err, e, "sandbox: fork");
    }
  if (child == 0)
    {
      close (err_r);
      if (tail_r >= 0)
        close (tail_r);
      if (console_r >= 0)
        close (console_r);
      setup_parent_main (&ctx, me);
    }
  int slot = forward_slot_add (child);
  pthread_sigmask (SIG_SETMASK, &saved_mask, NULL);

  close (steal_fd (&err_w));
  if (tail_w >= 0)
    close (steal_fd (&tail_w));

  ib_buf_t errmsg = { 0 };
  ib_buf_t tail = { 0 };
  int master = -1;
  if (console_r >= 0)
    {
      close (steal_fd (&console_w));
      ib_error_t cerr = NULL;
      if (ib_console_recv (console_r, &master, &cerr) < 0)
        {
          ib_buf_puts (&errmsg, "0:");
          ib_buf_puts (&errmsg, cerr->msg);
          ib_error_free (&cerr);
        }
    }
  if (master >= 0)
    ib_console_relay (master, STDIN_FILENO, STDOUT_FILENO, steal_fd (&err_r), &errmsg);
  else
    collect_output (steal_fd (&err_r), steal_fd (&tail_r), opts, &errmsg, &tail);

  int status = 0;
  int wait_errno = 0;
  while (waitpid (child, &status, 0) < 0)
    if (errno != EINTR)
      {
        wait_errno = errno;
        break;
      }
  forward_slot_remove (slot);
  parent_forwarding_end ();

  if (want_tail && opts->tail != NULL)
    *opts->tail = ib_buf_steal (&tail);
  ib_buf_free (&tail);

  if (errmsg.len > 0)
    {
      char *colon = strchr (errmsg.data, ':');
      int e = colon ? atoi (errmsg.data) : 0;
      ib_error_set (err, e, "%s", colon ? colon + 1 : errmsg.data);
      ib_buf_free (&errmsg);
      if (exit_status)
        *exit_status = wait_errno ? -1 : status_to_code (status);
      return -1;
    }
  ib_buf_free (&errmsg);
  if (wait_errno)
    return ib_error_sys (err, wait_errno, "sandbox: waitpid");
  if (exit_status)
    *exit_status = status_to_code (status);
  return 0;
}
