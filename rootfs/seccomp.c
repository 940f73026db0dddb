/* rootfs/seccomp.c — the seccomp filter of a build step (libseccomp).
 *
 * Default action ALLOW: a build runs compilers, package managers and test
 * suites, so an allow list would break builds in ways nobody can predict.
 * The filter denies what a build never needs and what widens the kernel's
 * attack surface from inside a user namespace, and optionally emulates root
 * (charliecloud's approach) for the single-id mode.
 *
 * Rules are added by name for the native architecture and, on x86_64, for
 * x86 (i386) as well: without them a 32-bit binary in the rootfs (a
 * manylinux i686 userland) would hit the "bad arch" action on its first
 * syscall.  The x32 ABI is not listed: its calls, and those of any other
 * architecture, fail with EPERM (the bad-arch action).
 * Names a libseccomp version or an architecture does not know are skipped.
 */
#include "rootfs/seccomp.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <seccomp.h>
#include <stdint.h>
#include <sys/stat.h>

/* Denied with EPERM, whatever the arguments. */
static const char *const deny_eperm[] = {
  /* Replacing or extending the running kernel. */
  "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
  /* The kernel keyring is not namespaced. */
  "keyctl", "add_key", "request_key",
  /* File handles bypass path-based access checks (the "shocker" escape). */
  "open_by_handle_at", "name_to_handle_at",
  /* Large, frequently exploited kernel interfaces no build needs. */
  "bpf", "perf_event_open", "userfaultfd", "lookup_dcookie",
  /* The sandbox's mounts are final: a step must not unmount /proc or the
   * /etc/resolv.conf bind, nor build its own mount tree. */
  "mount", "umount", "umount2", "pivot_root", "move_mount", "open_tree", "fsopen", "fsmount",
  "fsconfig", "fspick", "mount_setattr",
  /* Joining other namespaces. */
  "setns",
  /* Host-wide state. */
  "swapon", "swapoff", "reboot", "syslog", "acct", "settimeofday", "clock_settime",
  "clock_adjtime", "adjtimex", "stime", "iopl", "ioperm", "quotactl", "quotactl_fd",
  /* io_uring: a second way into most of the kernel, past this filter's
   * view, with a long CVE record (Docker denies it too). */
  "io_uring_setup", "io_uring_enter", "io_uring_register",
};

/* Root emulation: with a single id mapped, these would fail with EPERM or
 * EINVAL (no other id exists in the namespace) and make apt, dpkg, yum, rpm
 * and useradd abort.  The chown family goes to imgbuild's supervisor when
 * there is one (rootfs/chown_notify.h: the owner is recorded and the call
 * answered as a real chown would be); else, as the id family always,
 * answering 0 without doing anything lets them go on.  The *32 names are
 * the i386 variants. */
static const char *const emulate_chown[] = {
  "chown", "fchown", "lchown", "fchownat", "chown32", "fchown32", "lchown32",
};
/* With a supervisor that can let the kernel run a call (API level 6),
 * the stat of an open file (fstat, and newfstatat/statx with
 * AT_EMPTY_PATH, which glibc's fstat uses) goes to it too, and shows an
 * owner that is recorded (rootfs/chown_notify.h); a stat by path does not:
 * there are far more of those (ls, find, make, a compiler's include
 * search) and each would pay the round trip.  (The flags' argument: 3 of
 * newfstatat, 2 of statx.) */
static const struct
{
  const char *name;
  int flags_arg; /* -1: none */
} supervised_stat[] = {
  { "fstat", -1 },
  { "newfstatat", 3 },
  { "statx", 2 },
};
static const char *const emulate_ok[] = {
  "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid",
  "setuid32", "setgid32", "setreuid32", "setregid32", "setresuid32", "setresgid32",
  "setgroups", "setgroups32", "setfsuid", "setfsgid", "setfsuid32", "setfsgid32",
};

static int
add_rule (scmp_filter_ctx ctx, uint32_t action, const char *name, unsigned int argc,
          const struct scmp_arg_cmp *cmp, ib_error_t *err)
{
  int nr = seccomp_syscall_resolve_name (name);
  if (nr == __NR_SCMP_ERROR)
    {
      ib_debug ("seccomp: syscall %s unknown to libseccomp, skipped", name);
      return 0;
    }
  int r = seccomp_rule_add_array (ctx, action, nr, argc, cmp);
  if (r == -EDOM || r == -EFAULT)
    {
      /* Not a syscall on any architecture in the filter. */
      ib_debug ("seccomp: syscall %s not on this architecture, skipped", name);
      return 0;
    }
  if (r < 0)
    return ib_error_sys (err, -r, "seccomp: add rule for %s", name);
  return 0;
}

static int install (bool root_emulation, int *listener, ib_error_t *err);

int
ib_seccomp_install (bool root_emulation, ib_error_t *err)
{
  return install (root_emulation, NULL, err);
}

int
ib_seccomp_install_supervised (int *listener, ib_error_t *err)
{
  *listener = -1;
  return install (true, listener, err);
}

static int
install (bool root_emulation, int *listener, ib_error_t *err)
{
  scmp_filter_ctx ctx = seccomp_init (SCMP_ACT_ALLOW);
  if (ctx == NULL)
    return ib_error_set (err, ENOMEM, "seccomp: init failed");
  int ret = -1;
  int r;
  /* Calls of an architecture the filter does not list (x32, or anything
   * else a binfmt handler might run) fail with EPERM instead of killing
   * the process, like every other refusal. */
  r = seccomp_attr_set (ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_ERRNO (EPERM));
  if (r < 0)
    {
      ib_error_sys (err, -r, "seccomp: bad-arch action");
      goto out;
    }

  if (seccomp_arch_native () == SCMP_ARCH_X86_64)
    {
      /* i386 stays (manylinux i686 userlands build wheels in it); x32 is
       * left out, so its calls meet the bad-arch action below. */
      uint32_t extra[] = { SCMP_ARCH_X86 };
      for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++)
        {
          r = seccomp_arch_add (ctx, extra[i]);
          if (r < 0 && r != -EEXIST)
            {
              ib_error_sys (err, -r, "seccomp: add architecture");
              goto out;
            }
        }
    }

  /* NO_NEW_PRIVS (libseccomp's default, set explicitly to say so): the
   * kernel demands it from a process without CAP_SYS_ADMIN, which is what
   * a step running as a non-root USER is.  The filter is inherited by every
   * child; setuid binaries in the rootfs run without gaining ids. */
  r = seccomp_attr_set (ctx, SCMP_FLTATR_CTL_NNP, 1);
  if (r < 0)
    {
      ib_error_sys (err, -r, "seccomp: set no_new_privs");
      goto out;
    }

  for (size_t i = 0; i < sizeof deny_eperm / sizeof deny_eperm[0]; i++)
    if (add_rule (ctx, SCMP_ACT_ERRNO (EPERM), deny_eperm[i], 0, NULL, err) < 0)
      goto out;

  /* Nested user namespaces give a step a fresh set of capabilities over new
   * namespaces: the largest source of kernel exploits reachable from
   * unprivileged code.  Other namespace flags stay allowed (a test suite
   * may want a network namespace; without CAP_SYS_ADMIN over the user
   * namespace the kernel refuses it anyway when the step is not root). */
  {
    struct scmp_arg_cmp newuser = SCMP_A0 (SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER);
    if (add_rule (ctx, SCMP_ACT_ERRNO (EPERM), "unshare", 1, &newuser, err) < 0
        || add_rule (ctx, SCMP_ACT_ERRNO (EPERM), "clone", 1, &newuser, err) < 0)
      goto out;
  }
  /* AF_VSOCK reaches the hypervisor's services, and no network namespace
   * (not even --network=none) confines it (Docker denies it too). */
  {
    struct scmp_arg_cmp vsock = SCMP_A0 (SCMP_CMP_EQ, 40 /* AF_VSOCK */);
    if (add_rule (ctx, SCMP_ACT_ERRNO (EPERM), "socket", 1, &vsock, err) < 0)
      goto out;
  }
  /* Typing into a terminal (TIOCSTI) and the Linux console's control
   * calls (TIOCLINUX, which can also paste a selection as input): a step
   * runs in a session of its own, so the kernel refuses TIOCSTI on the
   * caller's terminal already; this is the second line (bubblewrap's
   * CVE-2017-5226; Docker's profile allows it and relies on the missing
   * capability).  The kernel reads the request as a 32-bit int: the mask
   * makes sure high bits set in the 64-bit register do not slip past. */
  {
    struct scmp_arg_cmp sti = SCMP_A1 (SCMP_CMP_MASKED_EQ, 0xffffffffu, 0x5412 /* TIOCSTI */);
    struct scmp_arg_cmp lnx = SCMP_A1 (SCMP_CMP_MASKED_EQ, 0xffffffffu, 0x541C /* TIOCLINUX */);
    if (add_rule (ctx, SCMP_ACT_ERRNO (EPERM), "ioctl", 1, &sti, err) < 0
        || add_rule (ctx, SCMP_ACT_ERRNO (EPERM), "ioctl", 1, &lnx, err) < 0)
      goto out;
  }
  /* clone3 passes its flags in a struct that seccomp cannot look into:
   * answer ENOSYS so that glibc falls back to clone, which is filtered above
   * (Docker and runc do the same). */
  if (add_rule (ctx, SCMP_ACT_ERRNO (ENOSYS), "clone3", 0, NULL, err) < 0)
    goto out;

  /* User notification needs API level 5 (Linux 5.0, libseccomp 2.5):
   * without it the chown family is answered 0 as before. */
  bool notify = root_emulation && listener && seccomp_api_get () >= 5;
  if (root_emulation)
    {
      uint32_t chown_action = notify ? SCMP_ACT_NOTIFY : SCMP_ACT_ERRNO (0);
      for (size_t i = 0; i < sizeof emulate_chown / sizeof emulate_chown[0]; i++)
        if (add_rule (ctx, chown_action, emulate_chown[i], 0, NULL, err) < 0)
          goto out;
      for (size_t i = 0; notify && seccomp_api_get () >= 6
                         && i < sizeof supervised_stat / sizeof supervised_stat[0];
           i++)
        {
          int a = supervised_stat[i].flags_arg;
          struct scmp_arg_cmp empty = { (unsigned) a, SCMP_CMP_MASKED_EQ, AT_EMPTY_PATH,
                                        AT_EMPTY_PATH };
          if (add_rule (ctx, SCMP_ACT_NOTIFY, supervised_stat[i].name, a < 0 ? 0 : 1, &empty, err)
              < 0)
            goto out;
        }
      for (size_t i = 0; i < sizeof emulate_ok / sizeof emulate_ok[0]; i++)
        if (add_rule (ctx, SCMP_ACT_ERRNO (0), emulate_ok[i], 0, NULL, err) < 0)
          goto out;
      /* Device nodes cannot be created in a user namespace; packages that
       * ship them (makedev, udev) only need the call to succeed.  FIFOs,
       * sockets and regular files are created for real. */
      struct scmp_arg_cmp mknod_chr = SCMP_A1 (SCMP_CMP_MASKED_EQ, S_IFMT, S_IFCHR);
      struct scmp_arg_cmp mknod_blk = SCMP_A1 (SCMP_CMP_MASKED_EQ, S_IFMT, S_IFBLK);
      struct scmp_arg_cmp mknodat_chr = SCMP_A2 (SCMP_CMP_MASKED_EQ, S_IFMT, S_IFCHR);
      struct scmp_arg_cmp mknodat_blk = SCMP_A2 (SCMP_CMP_MASKED_EQ, S_IFMT, S_IFBLK);
      if (add_rule (ctx, SCMP_ACT_ERRNO (0), "mknod", 1, &mknod_chr, err) < 0
          || add_rule (ctx, SCMP_ACT_ERRNO (0), "mknod", 1, &mknod_blk, err) < 0
          || add_rule (ctx, SCMP_ACT_ERRNO (0), "mknodat", 1, &mknodat_chr, err) < 0
          || add_rule (ctx, SCMP_ACT_ERRNO (0), "mknodat", 1, &mknodat_blk, err) < 0)
        goto out;
    }

  r = seccomp_load (ctx);
  if (r < 0)
    {
      ib_error_sys (err, -r, "seccomp: load filter");
      goto out;
    }
  if (notify)
    {
      r = seccomp_notify_fd (ctx);
      if (r < 0)
        {
          ib_error_sys (err, -r, "seccomp: notification fd");
          goto out;
        }
      *listener = r;
    }
  ret = 0;
out:
  seccomp_release (ctx);
  return ret;
}
