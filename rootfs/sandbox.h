/* rootfs/sandbox.h — user namespace for the whole process, and the sandbox
 * a build step runs in.
 *
 * ib_userns_enter puts the calling process into a new user namespace once,
 * before any rootfs work, so that unpacking, build steps and layer writing
 * all see the same ids:
 *   IB_USERNS_ROOT   real root: identity map of 0..4294967294 (uid and gid)
 *   IB_USERNS_MAP    unprivileged with /etc/subuid and /etc/subgid ranges:
 *                    0 -> own id, 1..N -> the range, written by newuidmap /
 *                    newgidmap
 *   IB_USERNS_SINGLE unprivileged without ranges: own id -> 0 only
 *                    (setgroups denied); the sandbox then turns on seccomp
 *                    root emulation
 * The maps are written by a helper child that stays in the parent namespace.
 *
 * ib_sandbox_run forks a process that unshares mount + pid namespaces,
 * bind-mounts the rootfs, mounts fresh /proc, a minimal /dev (tmpfs with
 * null zero full random urandom tty bind-mounted from the host, devpts at
 * /dev/pts with ptmx, tmpfs /dev/shm), /sys read-only, binds the host's
 * /etc/resolv.conf and /etc/hosts, pivot_root()s, and as pid 1 of the new pid
 * namespace forks the command (after seccomp) and reaps every child,
 * forwarding SIGINT/SIGTERM/SIGHUP.  The host network is shared.
 */
#ifndef IB_ROOTFS_SANDBOX_H
#define IB_ROOTFS_SANDBOX_H

#include "common/error.h"
#include <stdbool.h>
#include <sys/types.h>

typedef enum
{
  IB_USERNS_AUTO = 0,
  IB_USERNS_ROOT,
  IB_USERNS_MAP,
  IB_USERNS_SINGLE,
} ib_userns_mode_t;

/* Enter the namespace (AUTO picks ROOT when euid 0, MAP when the user has
 * ranges in both /etc/subuid and /etc/subgid and newuidmap/newgidmap exist,
 * else SINGLE).  Afterwards the process has uid/gid 0 in the namespace.
 * Calling it again is a no-op returning the mode in force. */
int ib_userns_enter (ib_userns_mode_t requested, ib_userns_mode_t *mode_in_force,
                     ib_error_t *err);
/* Mode in force (AUTO when not entered yet). */
ib_userns_mode_t ib_userns_mode (void);
const char *ib_userns_mode_name (ib_userns_mode_t m);

typedef struct ib_sandbox_opts
{
  const char *rootfs;     /* directory to pivot_root into */
  char *const *argv;      /* command; argv[0] looked up in PATH from env */
  char *const *env;       /* complete environment, NULL-terminated */
  const char *cwd;        /* inside the rootfs; created if missing; NULL = "/" */
  uid_t uid;              /* ids inside the namespace to run as */
  gid_t gid;
  bool network_none;      /* new empty network namespace (only lo) */
  /* When tail_lines > 0 stdout+stderr of the command go through a pipe: each
   * line is copied to our stderr and the last tail_lines lines are kept in
   * *tail (caller frees) for error messages. */
  int tail_lines;
  char **tail;
} ib_sandbox_opts_t;

/* Run the command; *exit_status gets its exit code, or 128+signal.  Returns
 * -1 only for failures of the sandbox itself (mounts, exec: "command not
 * found: X"), not for a command that exits non-zero. */
int ib_sandbox_run (const ib_sandbox_opts_t *opts, int *exit_status, ib_error_t *err);

/* Install the seccomp filter in the calling process: the deny list always
 * (kexec, module loading, keyctl family, open_by_handle_at, bpf, mount family,
 * nested user namespaces via clone/unshare, ...), plus root emulation when
 * `root_emulation` (chown family, setuid/setgid family, setgroups and mknod
 * of device nodes return success without effect).  Exposed for tests. */
int ib_seccomp_install (bool root_emulation, ib_error_t *err);

#endif
