/* rootfs/sandbox.h — the sandbox a build step runs in (the user namespace
 * it needs: rootfs/userns.h; its seccomp filter: rootfs/seccomp.h).
 *
 * ib_sandbox_run forks a process that unshares mount + pid namespaces,
 * bind-mounts the rootfs, mounts fresh /proc, a minimal /dev (tmpfs with
 * null zero full random urandom tty bind-mounted from the host, devpts at
 * /dev/pts with ptmx, tmpfs /dev/shm), /sys read-only, binds the host's
 * /etc/resolv.conf and /etc/hosts, pivot_root()s, and as pid 1 of the new pid
 * namespace forks the command (after seccomp) and reaps every child,
 * forwarding SIGINT/SIGTERM/SIGHUP/SIGQUIT.  The host network is shared
 * unless network_none.  UTS and IPC namespaces are new too (hostname
 * "imgbuild").
 */
#ifndef IB_ROOTFS_SANDBOX_H
#define IB_ROOTFS_SANDBOX_H

#include "common/error.h"
#include <stdbool.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>

/* One mount added to the sandbox (RUN --mount, `imgbuild run -v/--mount`,
 * CDI containerEdits).  Strings are borrowed for the duration of
 * ib_sandbox_run. */
typedef enum
{
  IB_MOUNT_BIND = 0,  /* source (a host path: directory, file or device node)
                         bound onto target, recursively */
  IB_MOUNT_TMPFS,     /* a fresh tmpfs; source ignored */
} ib_mount_type_t;

typedef struct ib_mount
{
  ib_mount_type_t type;
  const char *source;  /* BIND: host path, followed if a symlink (the user
                          named it); must exist */
  const char *target;  /* absolute path inside the rootfs, resolved as if the
                          rootfs were "/" (symlinks in the image never lead
                          outside it) */
  bool readonly;       /* read-only, recursively where the kernel can
                          (mount_setattr, Linux 5.12) */
  const char *data;    /* TMPFS: mount data such as "size=64m,mode=1777"
                          (NULL: mode=1777); BIND: ignored */
} ib_mount_t;

/* A symlink made in the rootfs for the run (CDI's create-symlinks hook:
 * libcuda.so -> libcuda.so.1) and removed afterwards. */
typedef struct ib_sandbox_symlink
{
  const char *path;    /* absolute, inside the rootfs; made only where
                          nothing exists */
  const char *target;  /* written as is */
} ib_sandbox_symlink_t;

/* One --ulimit NAME=SOFT[:HARD] (setrlimit(2)); `name` for messages. */
typedef struct ib_rlimit
{
  int resource; /* RLIMIT_NOFILE ... */
  const char *name;
  rlim_t soft, hard;
} ib_rlimit_t;

/* Parse docker's --ulimit value "NAME=SOFT[:HARD]" (NAME: core, cpu,
 * data, fsize, locks, memlock, msgqueue, nice, nofile, nproc, rss,
 * rtprio, rttime, sigpending, stack; -1 or "unlimited": RLIM_INFINITY;
 * HARD defaults to SOFT).  EINVAL naming the value. */
int ib_rlimit_parse (const char *value, ib_rlimit_t *out, ib_error_t *err);

typedef struct ib_sandbox_opts
{
  const char *rootfs;     /* directory to pivot_root into */
  char *const *argv;      /* command; argv[0] looked up in PATH from env */
  char *const *env;       /* complete environment, NULL-terminated (NULL =
                             empty); its PATH (default /usr/local/sbin:
                             /usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)
                             is searched inside the rootfs */
  const char *cwd;        /* absolute, inside the rootfs; created (as root,
                             mode 0755) if missing; NULL = "/" */
  uid_t uid;              /* ids inside the namespace to run as.  In SINGLE
                             mode only 0 exists: other ids are emulated (the
                             step runs as 0:0, one warning per process) */
  gid_t gid;
  const gid_t *groups;    /* supplementary groups (setgroups(2)), n_groups of
                             them, not owned; none when n_groups is 0.  Those
                             not mapped in the user namespace are left out
                             (one warning per process); in SINGLE mode none
                             are set (setgroups is denied there: the step
                             keeps the groups it inherits, shown as the
                             overflow gid, see docs/security.md) */
  size_t n_groups;
  bool network_none;      /* new empty network namespace (only lo, up) */
  /* When tail_lines > 0 stdout+stderr of the command go through a pipe: the
   * bytes are copied to our stderr as they come and the last tail_lines
   * lines (at most 256 KiB) are kept in *tail (caller frees; set on both
   * success and failure when tail is not NULL; "" when there was no output)
   * for error messages.  Otherwise the command shares our stdout/stderr. */
  int tail_lines;
  char **tail;
  /* With tail_lines > 0: where the command's output goes instead of our
   * stderr (a progress view), called from the calling thread with each
   * chunk as it arrives (not split at lines); NULL: our stderr. */
  void (*output_fn) (void *ud, const char *data, size_t len);
  void *output_ud;
  /* Added: false (the default) gives the command /dev/null as stdin, as a
   * build step must not wait for input; true lets it read our stdin
   * (`imgbuild run`). */
  bool keep_stdin;
  /* Added: the command's stdin, stdout and stderr are a new terminal of
   * the sandbox (a pty on its devpts, its controlling terminal), which
   * ib_sandbox_run relays to and from our stdin and stdout (in raw mode
   * while it runs; window size passed on), as podman run -t does: the
   * caller's terminal itself never reaches the sandbox.  For an
   * interactive shell; implies keep_stdin; tail_lines must be 0. */
  bool tty;
  /* Added: when the rootfs has an /etc directory but no /etc/resolv.conf
   * (or /etc/hosts) at all, create an empty one for the duration of the
   * run so that the host's can be bound onto it, and remove it before
   * returning: the step sees DNS settings and its layer (diffed after the
   * run) gets no new file.  Off by default: the file exists in the rootfs
   * while the step runs, and would stay behind if imgbuild were killed.
   * A symlink (e.g. to ../run/resolvconf/resolv.conf) is never followed. */
  bool provide_etc_files;
  /* Added: mounts made after /proc, /dev, /sys and the /etc files, in
   * order of target depth (a parent before what is mounted beneath it).
   * A target that does not exist is created (directories mode 0755; an
   * empty file, mode 0644, where the source is not a directory) and, with
   * every directory created on the way, removed after the run when it is
   * still empty: the step's layer gets nothing of it.  Errors name the
   * mount: "mount SOURCE on TARGET: ...". */
  const ib_mount_t *mounts;
  size_t n_mounts;
  const ib_sandbox_symlink_t *symlinks;
  size_t n_symlinks;
  /* Added: run the rootfs's ldconfig (/sbin/ldconfig or /usr/sbin/ldconfig)
   * after the mounts, before the command, so that bound driver libraries
   * are found (CDI's update-ldcache hook).  Extra library directories to
   * search: ldconfig_dirs (absolute, inside the rootfs; NULL-terminated or
   * NULL).  The rootfs's /etc/ld.so.cache is put back afterwards: restored
   * byte for byte when the command left ldconfig's output alone, else
   * regenerated by a second ldconfig without the mounts, so the layer never
   * lists libraries it does not contain. */
  bool ldconfig;
  char *const *ldconfig_dirs;
  /* Added (docker run's and docker build's --add-host, --shm-size,
   * --ulimit): add_hosts, "IP NAME" lines (NULL-terminated or NULL),
   * appended to the command's copy of /etc/hosts (where /dev is the
   * sandbox's own, as it is but for `run --rootfs` trees without /dev);
   * shm_size, the bytes of /dev/shm's tmpfs (0: the kernel's default,
   * half of the memory); rlimits, set in the command's process before
   * seccomp and exec: a limit above the caller's hard limit fails the run
   * ("ulimit nofile=...: Operation not permitted"), since nothing in a
   * user namespace may raise it. */
  char *const *add_hosts;
  uint64_t shm_size;
  const ib_rlimit_t *rlimits;
  size_t n_rlimits;
} ib_sandbox_opts_t;

/* Run the command; *exit_status gets its exit code, or 128+signal.  Returns
 * -1 only for failures of the sandbox itself (mounts, exec: "command not
 * found: X"), not for a command that exits non-zero.  ib_userns_enter must
 * have been called (else -1, EPERM).
 *
 * The command runs in a session of its own without a controlling terminal
 * (with tty: its pty is the controlling terminal), with stdin from
 * /dev/null unless keep_stdin,
 * umask 022, default signal dispositions, an empty signal mask, no fds but
 * 0-2, seccomp (root emulation in SINGLE mode) and NO_NEW_PRIVS.  It is pid 2;
 * when it exits every process it left behind is killed.
 *
 * The mount tree: /proc (fresh), /dev (tmpfs; see sandbox_tree.c) and /sys (the
 * host's, read-only where the kernel allows) are mounted only where the
 * rootfs has that directory (not a symlink); nothing is created in the
 * rootfs except cwd.  /etc/resolv.conf and /etc/hosts get a copy of the
 * host's file (hosts plus "127.0.0.1 imgbuild") bound onto them only where
 * the rootfs has them as regular files: writes go to the copy.  An image
 * without /etc/resolv.conf has no DNS configuration in the step, unless
 * provide_etc_files.
 * In SINGLE mode APT_CONFIG=/dev/.imgbuild/apt.conf (APT::Sandbox::User
 * "root") is added to the environment unless it sets APT_CONFIG: apt's drop
 * to _apt cannot work when setuid is only emulated.
 *
 * While it waits, SIGINT/SIGTERM/SIGHUP/SIGQUIT of this process are caught
 * and forwarded to the sandbox (the previous dispositions are restored when
 * the last concurrent ib_sandbox_run returns); the children die with
 * SIGKILL if the calling thread dies.  May be called from several threads
 * at once.  A SIGCHLD disposition of SIG_IGN breaks it (no status to reap). */
int ib_sandbox_run (const ib_sandbox_opts_t *opts, int *exit_status, ib_error_t *err);

#endif
