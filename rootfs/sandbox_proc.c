/* rootfs/sandbox_proc.c — the sandbox's processes (sandbox.c shows them):
 * the setup parent S, pid 1 P1 and the command C; their failure reports
 * on the error pipe, their signal forwarding, the descriptors they keep,
 * pid 1's hardening and CDI's ldconfig run.
 */
#include "rootfs/sandbox.h"
#include "common/proctitle.h"
#include "common/util.h"
#include "rootfs/console.h"
#include "rootfs/rootfs_int.h"
#include "rootfs/sandbox_int.h"
#include "rootfs/seccomp.h"
#include "rootfs/userns.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

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
  child_fail (fd, code, 0, "%s", err && *err ? (*err)->msg : "failed");
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
      if (setgroups (ctx->n_groups, ctx->groups) < 0)
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

  for (size_t i = 0; i < o->n_rlimits; i++) /* --ulimit */
    {
      const ib_rlimit_t *l = &o->rlimits[i];
      struct rlimit rl = { .rlim_cur = l->soft, .rlim_max = l->hard };
      if (setrlimit (l->resource, &rl) < 0)
        child_fail (efd, 125, errno, "ulimit %s=%llu:%llu", l->name, (unsigned long long) l->soft,
                    (unsigned long long) l->hard);
    }
  if (ctx->notify_w >= 0)
    {
      /* the chown family goes to imgbuild's supervisor: the listener is
       * passed on and none of it survives exec */
      int listener;
      if (ib_seccomp_install_supervised (&listener, &err) < 0)
        child_fail_err (efd, 125, &err);
      if (listener >= 0 && ib_console_send (ctx->notify_w, listener, &err) < 0)
        child_fail_err (efd, 125, &err);
      if (listener >= 0)
        close (listener);
      close (ctx->notify_w);
    }
  else if (ib_seccomp_install (ctx->mode == IB_USERNS_SINGLE, &err) < 0)
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

/* --- pid 1 (P1) and the setup parent (S) ---------------------------------- */

int
rfs_status_to_code (int status)
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
      rfs_write_full (ctx->tail_w >= 0 ? ctx->tail_w : 2, msg, (size_t) n);
    }
  if (ctx->ldcache_fd >= 0)
    {
      int in = open ("/etc/ld.so.cache", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
      if (in >= 0)
        {
          char buf[65536];
          ssize_t k;
          while ((k = read (in, buf, sizeof buf)) > 0)
            rfs_write_full (ctx->ldcache_fd, buf, (size_t) k);
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
  /* /proc/1/cmdline is any step's to read: not imgbuild's command line
   * (host paths, build arguments, secret sources), which this process
   * still carries (common/proctitle.h). */
  ib_proctitle_set ("imgbuild-init");
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
  if (rfs_setup_rootfs (ctx, &err) < 0)
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
        _exit (rfs_status_to_code (status)); /* the kernel kills the rest */
    }
}

void __attribute__ ((noreturn))
rfs_setup_parent_main (const struct run_ctx *ctx, pid_t imgbuild_pid)
{
  int efd = ctx->err_w;

  prctl (PR_SET_PDEATHSIG, SIGKILL);
  if (getppid () != imgbuild_pid)
    _exit (125);
  reset_signals (); /* still blocked */
  prctl (PR_SET_DUMPABLE, 0, 0, 0, 0);
  /* Before anything of the sandbox exists: only stdio and our own pipes
   * go on to pid 1 and the command. */
  int keep[] = { ctx->err_w, ctx->tail_w, ctx->ldcache_fd, ctx->console_w, ctx->notify_w };
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
  if (ctx->notify_w >= 0)
    close (ctx->notify_w);
  child_install_forwarding (p1);
  unblock_all_signals ();

  int status;
  while (waitpid (p1, &status, 0) < 0)
    if (errno != EINTR)
      _exit (125);
  _exit (rfs_status_to_code (status));
}

