/* tests/unit/test_seccomp.c — the seccomp filter, tested from inside (as
 * bubblewrap's try-syscall does).  Each check runs in a forked child that
 * installs the filter; the child's exit code says which check failed. */
#include "rootfs/seccomp.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <sys/mount.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

static char tmpdir[] = "/tmp/ib-seccomp-XXXXXX";

/* Run fn in a child after installing the filter; returns the child's exit
 * code (0 = all checks passed, else the failing check's number). */
static int
in_child (bool root_emulation, int (*fn) (void))
{
  fflush (NULL);
  pid_t p = fork ();
  if (p == 0)
    {
      ib_error_t err = NULL;
      if (ib_seccomp_install (root_emulation, &err) < 0)
        {
          fprintf (stderr, "%s\n", err->msg);
          _exit (100);
        }
      _exit (fn ());
    }
  int status;
  if (waitpid (p, &status, 0) < 0)
    return -1;
  if (!WIFEXITED (status))
    return 200 + (WIFSIGNALED (status) ? WTERMSIG (status) : 0);
  return WEXITSTATUS (status);
}

#define CHECK(n, cond)                                                                   \
  do                                                                                     \
    {                                                                                    \
      if (!(cond))                                                                       \
        {                                                                                \
          fprintf (stderr, "check %d failed: %s (errno %s)\n", n, #cond, strerror (errno)); \
          return n;                                                                      \
        }                                                                                \
    }                                                                                    \
  while (0)

static int
deny_checks (void)
{
  errno = 0;
  CHECK (1, syscall (SYS_keyctl, 0 /* KEYCTL_GET_KEYRING_ID */, -3, 0) < 0 && errno == EPERM);
  errno = 0;
  CHECK (2, syscall (SYS_kexec_load, 0, 0, NULL, 0) < 0 && errno == EPERM);
  errno = 0;
  CHECK (3, unshare (CLONE_NEWUSER) < 0 && errno == EPERM);
  errno = 0;
  CHECK (4, mount ("none", "/", "tmpfs", 0, NULL) < 0 && errno == EPERM);
  errno = 0;
  CHECK (5, syscall (SYS_clone3, NULL, 0) < 0 && errno == ENOSYS);
  errno = 0;
  CHECK (6, syscall (SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0) < 0 && errno == EPERM);
  errno = 0;
  CHECK (7, syscall (SYS_open_by_handle_at, -1, NULL, 0) < 0 && errno == EPERM);
  errno = 0;
  CHECK (8, syscall (SYS_bpf, 0, NULL, 0) < 0 && errno == EPERM);
  CHECK (9, umount2 ("/", MNT_DETACH) < 0 && errno == EPERM);
  /* Ordinary syscalls still work. */
  CHECK (10, getpid () > 0);
  int fd = open ("/dev/null", O_RDONLY | O_CLOEXEC);
  CHECK (11, fd >= 0);
  close (fd);
  /* fork (clone without CLONE_NEWUSER) still works. */
  pid_t p = fork ();
  CHECK (12, p >= 0);
  if (p == 0)
    _exit (7);
  int status;
  CHECK (13, waitpid (p, &status, 0) == p && WIFEXITED (status) && WEXITSTATUS (status) == 7);
  /* Terminal injection, whatever the descriptor and the request's high
   * bits (the kernel reads the request as 32 bits); other ioctls pass. */
  int pfd = posix_openpt (O_RDWR | O_NOCTTY);
  CHECK (14, pfd >= 0);
  char c = 'x';
  errno = 0;
  CHECK (15, syscall (SYS_ioctl, pfd, (unsigned long) TIOCSTI, &c) < 0 && errno == EPERM);
  errno = 0;
  CHECK (16, syscall (SYS_ioctl, pfd, 0xdead00000000ul | TIOCSTI, &c) < 0 && errno == EPERM);
  char sub = 3;
  errno = 0;
  CHECK (17, syscall (SYS_ioctl, pfd, (unsigned long) TIOCLINUX, &sub) < 0 && errno == EPERM);
  struct winsize ws;
  CHECK (18, ioctl (pfd, TIOCGWINSZ, &ws) == 0);
  close (pfd);
  return 0;
}

static void
test_deny_list (void **state)
{
  (void) state;
  assert_int_equal (in_child (false, deny_checks), 0);
  /* The deny list holds with root emulation too. */
  assert_int_equal (in_child (true, deny_checks), 0);
}

static char *
tmp_path (const char *name)
{
  return ib_path_join (tmpdir, name);
}

static int
emulation_checks (void)
{
  cleanup_free char *f = tmp_path ("owned");
  cleanup_free char *chr = tmp_path ("chr");
  cleanup_free char *blk = tmp_path ("blk");
  cleanup_free char *fifo = tmp_path ("fifo");
  struct stat before, after;
  CHECK (1, stat (f, &before) == 0);
  CHECK (2, chown (f, 12345, 12345) == 0);
  CHECK (3, lchown (f, 12345, 12345) == 0);
  CHECK (4, fchownat (AT_FDCWD, f, 12345, 12345, 0) == 0);
  int fd = open (f, O_RDONLY | O_CLOEXEC);
  CHECK (5, fd >= 0 && fchown (fd, 12345, 12345) == 0);
  close (fd);
  CHECK (6, stat (f, &after) == 0 && after.st_uid == before.st_uid
                && after.st_gid == before.st_gid);
  uid_t uid = getuid ();
  CHECK (7, setuid (12345) == 0 && getuid () == uid);
  CHECK (8, setgid (12345) == 0);
  CHECK (9, setresuid (12345, 12345, 12345) == 0 && setresgid (1, 2, 3) == 0);
  gid_t groups[] = { 4, 5 };
  CHECK (10, setgroups (2, groups) == 0);
  CHECK (11, mknod (chr, S_IFCHR | 0600, makedev (1, 3)) == 0);
  CHECK (12, lstat (chr, &after) < 0 && errno == ENOENT); /* success without effect */
  CHECK (13, mknodat (AT_FDCWD, blk, S_IFBLK | 0600, makedev (7, 0)) == 0);
  CHECK (14, lstat (blk, &after) < 0 && errno == ENOENT);
  CHECK (15, mknod (fifo, S_IFIFO | 0600, 0) == 0);
  CHECK (16, lstat (fifo, &after) == 0 && S_ISFIFO (after.st_mode)); /* FIFOs are real */
  return 0;
}

static void
test_root_emulation (void **state)
{
  (void) state;
  cleanup_free char *f = tmp_path ("owned");
  int fd = open (f, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  assert_true (fd >= 0);
  close (fd);
  assert_int_equal (in_child (true, emulation_checks), 0);
}

static int
no_emulation_checks (void)
{
  /* Without emulation chown to an unmapped id fails as the kernel says
   * (EPERM unprivileged, EINVAL for an unmapped id in a namespace); as real
   * root outside a namespace it would succeed, which we undo. */
  cleanup_free char *f = tmp_path ("owned2");
  int fd = open (f, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  CHECK (1, fd >= 0);
  close (fd);
  cleanup_free char *chr = tmp_path ("chr2");
  int r = mknod (chr, S_IFCHR | 0600, makedev (1, 3));
  if (r == 0)
    unlink (chr); /* real root in the initial namespace may */
  return 0;
}

static void
test_no_emulation (void **state)
{
  (void) state;
  assert_int_equal (in_child (false, no_emulation_checks), 0);
}

static int
setup (void **state)
{
  (void) state;
  return mkdtemp (tmpdir) ? 0 : -1;
}

static int
teardown (void **state)
{
  (void) state;
  ib_error_t err = NULL;
  ib_rm_rf (tmpdir, &err);
  ib_error_free (&err);
  return 0;
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test (test_deny_list),
    cmocka_unit_test (test_root_emulation),
    cmocka_unit_test (test_no_emulation),
  };
  return cmocka_run_group_tests (tests, setup, teardown);
}
