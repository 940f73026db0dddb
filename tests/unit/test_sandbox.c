/* tests/unit/test_sandbox.c — ib_userns_enter + ib_sandbox_run on a tiny
 * rootfs made of the host's static busybox (Debian: busybox-static).
 *
 * The test process enters the user namespace first (mode from
 * $IMGBUILD_USERNS: root|map|single|auto, default auto), then runs commands
 * in the sandbox.  Run it as root and as an unprivileged user; set
 * IB_TEST_DEBUG=1 for the sandbox's debug messages.  Fails
 * (exit 1 with a message) when no static busybox is installed. */
#include "rootfs/owner.h"
#include "rootfs/sandbox.h"
#include "rootfs/userns.h"
#include "common/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

static char rootfs[] = "/tmp/ib-sandbox-XXXXXX";
static ib_userns_mode_t mode;
static char *env_default[] = { (char *) "PATH=/usr/bin:/bin", (char *) "HOME=/root", NULL };

static const char *const applets[]
    = { "sh", "cat", "ls", "id", "sleep", "echo", "pwd", "mknod", "unshare", "hostname",
        "grep", "wc", "test", "true", "stat", "touch", "ps", "env", "readlink", "mkdir",
        "chown", "chgrp", "chmod", "ln", NULL };

static const char *
find_busybox (void)
{
  static const char *const candidates[] = { "/bin/busybox", "/usr/bin/busybox", NULL };
  for (int i = 0; candidates[i]; i++)
    if (access (candidates[i], X_OK) == 0)
      return candidates[i];
  return NULL;
}

static int
copy_file (const char *from, const char *to, mode_t m)
{
  char *data = NULL;
  size_t len = 0;
  ib_error_t err = NULL;
  if (ib_read_file (from, &data, &len, &err) < 0)
    {
      ib_error_report (&err);
      return -1;
    }
  int fd = open (to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, m);
  if (fd < 0 || write (fd, data, len) != (ssize_t) len)
    {
      free (data);
      return -1;
    }
  close (fd);
  free (data);
  return 0;
}

static int
make_rootfs (const char *busybox)
{
  if (mkdtemp (rootfs) == NULL)
    return -1;
  chmod (rootfs, 0755);
  static const char *const dirs[] = { "bin", "proc", "dev", "sys", "etc", "tmp", NULL };
  for (int i = 0; dirs[i]; i++)
    {
      cleanup_free char *d = ib_path_join (rootfs, dirs[i]);
      if (mkdir (d, 0755) < 0)
        return -1;
    }
  cleanup_free char *tmp = ib_path_join (rootfs, "tmp");
  chmod (tmp, 01777);
  cleanup_free char *bb = ib_path_join (rootfs, "bin/busybox");
  if (copy_file (busybox, bb, 0755) < 0)
    return -1;
  for (int i = 0; applets[i]; i++)
    {
      cleanup_free char *rel = xasprintf ("bin/%s", applets[i]);
      cleanup_free char *l = ib_path_join (rootfs, rel);
      if (symlink ("busybox", l) < 0)
        return -1;
    }
  /* A regular /etc/hosts gets the host's bound onto it; no resolv.conf:
   * the sandbox must not create one. */
  cleanup_free char *hosts = ib_path_join (rootfs, "etc/hosts");
  int fd = open (hosts, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0 || write (fd, "# rootfs hosts\n", 15) != 15)
    return -1;
  close (fd);
  return 0;
}

/* Run argv; returns ib_sandbox_run's result, fills *status, *out (tail) and
 * *msg (error message). */
static int
run_full (char *const *argv, const char *cwd, uid_t uid, bool net_none, int tail_lines,
          int *status, char **out, char **msg)
{
  ib_sandbox_opts_t o = {
    .rootfs = rootfs,
    .argv = argv,
    .env = env_default,
    .cwd = cwd,
    .uid = uid,
    .gid = uid,
    .network_none = net_none,
    .tail_lines = tail_lines,
    .tail = out,
  };
  ib_error_t err = NULL;
  *status = -12345;
  int r = ib_sandbox_run (&o, status, &err);
  if (msg)
    *msg = err ? xstrdup (err->msg) : NULL;
  if (err)
    fprintf (stderr, "sandbox error: %s\n", err->msg);
  ib_error_free (&err);
  return r;
}

/* sh -c SCRIPT as root in "/", output captured. */
static int
sh (const char *script, char **out)
{
  char *argv[] = { (char *) "sh", (char *) "-c", (char *) script, NULL };
  int status;
  int r = run_full (argv, NULL, 0, false, 1000, &status, out, NULL);
  assert_int_equal (r, 0);
  return status;
}

static void
test_exit_code (void **state)
{
  (void) state;
  cleanup_free char *out = NULL;
  assert_int_equal (sh ("exit 3", &out), 3);
  free (out);
  out = NULL;
  assert_int_equal (sh ("kill -9 $$", &out), 128 + 9);
}

static void
test_pid_namespace (void **state)
{
  (void) state;
  cleanup_free char *out = NULL;
  char *argv[] = { (char *) "cat", (char *) "/proc/self/status", NULL };
  int status;
  assert_int_equal (run_full (argv, NULL, 0, false, 1000, &status, &out, NULL), 0);
  assert_int_equal (status, 0);
  /* The command is pid 2 (pid 1 is our init), seen in the fresh /proc. */
  assert_non_null (strstr (out, "\nNSpid:\t2\n"));
  assert_non_null (strstr (out, "\nSeccomp:\t2\n"));
  assert_non_null (strstr (out, "\nNoNewPrivs:\t1\n"));
  free (out);
  out = NULL;
  assert_int_equal (sh ("echo pid=$$; test -d /proc/1 && echo init-ok; hostname", &out), 0);
  assert_non_null (strstr (out, "pid=2\n"));
  assert_non_null (strstr (out, "init-ok\n"));
  assert_non_null (strstr (out, "imgbuild\n"));
}

static void
test_dev (void **state)
{
  (void) state;
  cleanup_free char *out = NULL;
  assert_int_equal (sh ("ls /dev", &out), 0);
  static const char *const want[] = { "null", "zero", "full", "random", "urandom", "tty",
                                      "pts", "shm", "ptmx", "fd", "stdout", NULL };
  for (int i = 0; want[i]; i++)
    {
      cleanup_free char *line = xasprintf ("\n%s\n", want[i]);
      cleanup_free char *padded = xasprintf ("\n%s", out);
      if (strstr (padded, line) == NULL)
        fail_msg ("/dev lacks %s: %s", want[i], out);
    }
  free (out);
  out = NULL;
  assert_int_equal (sh ("echo hi > /dev/null && head -c 4 /dev/zero | wc -c && "
                        "test -c /dev/urandom && test -d /dev/pts && echo x > /dev/shm/y && "
                        "echo dev-ok",
                        &out),
                    0);
  assert_non_null (strstr (out, "dev-ok"));
}

static void
test_ids (void **state)
{
  (void) state;
  char *argv[] = { (char *) "id", NULL };
  cleanup_free char *out = NULL;
  int status;
  assert_int_equal (run_full (argv, NULL, 0, false, 10, &status, &out, NULL), 0);
  assert_int_equal (status, 0);
  assert_true (ib_str_has_prefix (out, "uid=0 gid=0"));
  free (out);
  out = NULL;
  /* As another user: real in ROOT/MAP, emulated (stays 0) in SINGLE. */
  assert_int_equal (run_full (argv, NULL, 1000, false, 10, &status, &out, NULL), 0);
  assert_int_equal (status, 0);
  if (mode == IB_USERNS_SINGLE)
    assert_true (ib_str_has_prefix (out, "uid=0 gid=0"));
  else
    assert_true (ib_str_has_prefix (out, "uid=1000 gid=1000"));
}

static void
test_root_is_rootfs (void **state)
{
  (void) state;
  cleanup_free char *out = NULL;
  assert_int_equal (sh ("ls /", &out), 0);
  assert_string_equal (out, "bin\ndev\netc\nproc\nsys\ntmp\n");
}

/* Whether any process on the host has the command line "sleep <n>". */
static bool
host_has_sleep (const char *n)
{
  DIR *d = opendir ("/proc");
  if (d == NULL)
    return false;
  bool found = false;
  struct dirent *de;
  while (!found && (de = readdir (d)))
    {
      if (de->d_name[0] < '0' || de->d_name[0] > '9')
        continue;
      char path[300];
      snprintf (path, sizeof path, "/proc/%s/cmdline", de->d_name);
      char buf[64] = { 0 };
      int fd = open (path, O_RDONLY | O_CLOEXEC);
      if (fd < 0)
        continue;
      ssize_t k = read (fd, buf, sizeof buf - 1);
      close (fd);
      if (k > 0 && strcmp (buf, "sleep") == 0 && strcmp (buf + 6, n) == 0)
        found = true;
    }
  closedir (d);
  return found;
}

static void
test_background_killed (void **state)
{
  (void) state;
  struct timespec t0, t1;
  clock_gettime (CLOCK_MONOTONIC, &t0);
  char *argv[] = { (char *) "sh", (char *) "-c", (char *) "sleep 4242 & echo started; exit 0",
                   NULL };
  int status;
  /* No tail: the background sleep holds no pipe of ours. */
  assert_int_equal (run_full (argv, NULL, 0, false, 0, &status, NULL, NULL), 0);
  assert_int_equal (status, 0);
  /* Same with the tail pipe, which the sleep keeps open until it dies. */
  cleanup_free char *out = NULL;
  assert_int_equal (run_full (argv, NULL, 0, false, 5, &status, &out, NULL), 0);
  assert_int_equal (status, 0);
  clock_gettime (CLOCK_MONOTONIC, &t1);
  assert_true (t1.tv_sec - t0.tv_sec < 20);
  bool alive = true;
  for (int i = 0; i < 50 && (alive = host_has_sleep ("4242")); i++)
    usleep (100 * 1000);
  assert_false (alive);
}

static void
test_tail (void **state)
{
  (void) state;
  char *argv[] = { (char *) "sh", (char *) "-c",
                   (char *) "for i in 1 2 3 4; do echo line$i; done; echo err5 >&2; printf x", NULL };
  cleanup_free char *out = NULL;
  int status;
  assert_int_equal (run_full (argv, NULL, 0, false, 2, &status, &out, NULL), 0);
  assert_int_equal (status, 0);
  assert_string_equal (out, "err5\nx");
  free (out);
  out = NULL;
  char *argv2[] = { (char *) "sh", (char *) "-c", (char *) "echo a; echo b; echo c", NULL };
  assert_int_equal (run_full (argv2, NULL, 0, false, 2, &status, &out, NULL), 0);
  assert_string_equal (out, "b\nc\n");
}

static void
test_not_found (void **state)
{
  (void) state;
  char *argv[] = { (char *) "no-such-command", NULL };
  cleanup_free char *msg = NULL;
  cleanup_free char *out = NULL;
  int status;
  assert_int_equal (run_full (argv, NULL, 0, false, 5, &status, &out, &msg), -1);
  assert_non_null (msg);
  assert_non_null (strstr (msg, "command not found: no-such-command"));
  free (msg);
  msg = NULL;
  char *argv2[] = { (char *) "/etc/hosts", NULL }; /* not executable */
  assert_int_equal (run_full (argv2, NULL, 0, false, 0, &status, NULL, &msg), -1);
  assert_non_null (strstr (msg, "Permission denied"));
}

static void
test_network_none (void **state)
{
  (void) state;
  char *argv[] = { (char *) "cat", (char *) "/proc/net/dev", NULL };
  cleanup_free char *out = NULL;
  int status;
  assert_int_equal (run_full (argv, NULL, 0, true, 100, &status, &out, NULL), 0);
  assert_int_equal (status, 0);
  /* two header lines and lo */
  int lines = 0;
  for (char *p = out; *p; p++)
    lines += *p == '\n';
  assert_int_equal (lines, 3);
  assert_non_null (strstr (out, "lo:"));
}

static void
test_cwd_created (void **state)
{
  (void) state;
  char *argv[] = { (char *) "pwd", NULL };
  cleanup_free char *out = NULL;
  int status;
  assert_int_equal (run_full (argv, "/work/sub", 0, false, 10, &status, &out, NULL), 0);
  assert_int_equal (status, 0);
  assert_string_equal (out, "/work/sub\n");
  cleanup_free char *d = ib_path_join (rootfs, "work/sub");
  struct stat st;
  assert_int_equal (stat (d, &st), 0);
  cleanup_free char *w = ib_path_join (rootfs, "work");
  ib_error_t err = NULL;
  assert_int_equal (ib_rm_rf (w, &err), 0);
}

static void
test_etc_files (void **state)
{
  (void) state;
  cleanup_free char *out = NULL;
  /* hosts: the host's copy plus our hostname; writes go to the copy. */
  assert_int_equal (sh ("cat /etc/hosts; echo 10.9.9.9 scribble >> /etc/hosts && echo wrote", &out),
                    0);
  assert_null (strstr (out, "# rootfs hosts"));
  assert_non_null (strstr (out, "imgbuild"));
  assert_non_null (strstr (out, "wrote"));
  char *host = NULL;
  ib_error_t err = NULL;
  assert_int_equal (ib_read_file ("/etc/hosts", &host, NULL, &err), 0);
  assert_null (strstr (host, "scribble"));
  free (host);
  cleanup_free char *mine = NULL;
  cleanup_free char *hosts = ib_path_join (rootfs, "etc/hosts");
  assert_int_equal (ib_read_file (hosts, &mine, NULL, &err), 0);
  assert_string_equal (mine, "# rootfs hosts\n");
  /* resolv.conf is absent in the rootfs: nothing is created. */
  cleanup_free char *resolv = ib_path_join (rootfs, "etc/resolv.conf");
  struct stat st;
  assert_int_equal (lstat (resolv, &st), -1);
  /* /sys is read-only. */
  free (out);
  out = NULL;
  assert_int_equal (sh ("touch /sys/x 2>/dev/null && echo sys-rw || echo sys-ro", &out), 0);
  assert_non_null (strstr (out, "sys-ro"));
}

static void
test_provide_etc_files (void **state)
{
  (void) state;
  char *argv[] = { (char *) "sh", (char *) "-c", (char *) "cat /etc/resolv.conf; echo end", NULL };
  ib_sandbox_opts_t o = { .rootfs = rootfs, .argv = argv, .env = env_default,
                          .tail_lines = 100, .provide_etc_files = true };
  cleanup_free char *out = NULL;
  o.tail = &out;
  int status;
  ib_error_t err = NULL;
  assert_int_equal (ib_sandbox_run (&o, &status, &err), 0);
  assert_int_equal (status, 0);
  char *host = NULL;
  if (ib_read_file ("/etc/resolv.conf", &host, NULL, &err) == 0)
    {
      cleanup_free char *want = xasprintf ("%send\n", host);
      assert_string_equal (out, want);
      free (host);
    }
  ib_error_free (&err);
  /* The placeholder is gone; the rootfs's own hosts is untouched. */
  cleanup_free char *resolv = ib_path_join (rootfs, "etc/resolv.conf");
  struct stat st;
  assert_int_equal (lstat (resolv, &st), -1);
  cleanup_free char *hosts = ib_path_join (rootfs, "etc/hosts");
  assert_int_equal (lstat (hosts, &st), 0);
  assert_int_equal (st.st_size, 15);
}

static void
test_stdin (void **state)
{
  (void) state;
  int p[2];
  assert_int_equal (pipe (p), 0);
  assert_int_equal (write (p[1], "from-stdin\n", 11), 11);
  close (p[1]);
  int saved = dup (0);
  dup2 (p[0], 0);
  close (p[0]);
  char *argv[] = { (char *) "cat", NULL };
  ib_sandbox_opts_t o = { .rootfs = rootfs, .argv = argv, .env = env_default, .tail_lines = 10 };
  cleanup_free char *out = NULL;
  o.tail = &out;
  int status;
  ib_error_t err = NULL;
  assert_int_equal (ib_sandbox_run (&o, &status, &err), 0); /* stdin is /dev/null */
  assert_string_equal (out, "");
  free (out);
  out = NULL;
  o.keep_stdin = true;
  assert_int_equal (ib_sandbox_run (&o, &status, &err), 0);
  assert_string_equal (out, "from-stdin\n");
  dup2 (saved, 0);
  close (saved);
}

static void
test_single_mode_env (void **state)
{
  (void) state;
  cleanup_free char *out = NULL;
  assert_int_equal (sh ("echo APT=$APT_CONFIG; cat /dev/.imgbuild/apt.conf 2>/dev/null; "
                        "mknod /tmp/c c 1 3; echo mknod=$?; mknod /tmp/f p; echo fifo=$?; "
                        "test -p /tmp/f && echo fifo-real; rm -f /tmp/f /tmp/c; "
                        "unshare -U true; echo unshare=$?",
                        &out),
                    0);
  if (mode == IB_USERNS_SINGLE)
    {
      assert_non_null (strstr (out, "APT=/dev/.imgbuild/apt.conf\n"));
      assert_non_null (strstr (out, "APT::Sandbox::User \"root\";"));
      assert_non_null (strstr (out, "mknod=0\n"));
    }
  else
    assert_non_null (strstr (out, "APT=\n"));
  assert_non_null (strstr (out, "fifo-real\n"));
  assert_null (strstr (out, "unshare=0\n"));
}

/* The owner a file has in the image: its own, or the one recorded where
 * the kernel could not give it (single-id mode). */
static void
image_owner (const char *rel, uid_t *uid, gid_t *gid, mode_t *mode)
{
  cleanup_free char *p = ib_path_join (rootfs, rel);
  struct stat st;
  assert_int_equal (lstat (p, &st), 0);
  *uid = st.st_uid;
  *gid = st.st_gid;
  *mode = st.st_mode & 07777;
  assert_true (ib_owner_get_at (AT_FDCWD, p, uid, gid) >= 0);
}

#define assert_owner(rel, u, g, m)                                                            \
  do                                                                                          \
    {                                                                                         \
      uid_t ou;                                                                               \
      gid_t og;                                                                               \
      mode_t om;                                                                              \
      image_owner (rel, &ou, &og, &om);                                                       \
      if (ou != (uid_t) (u) || og != (gid_t) (g) || om != (mode_t) (m))                       \
        fail_msg ("%s: %u:%u %04o, want %u:%u %04o", rel, (unsigned) ou, (unsigned) og,       \
                  (unsigned) om, (unsigned) (u), (unsigned) (g), (unsigned) (m));             \
    }                                                                                         \
  while (0)

/* A step's chown gives the image the same owners in every mode: real ones
 * where the ids exist, recorded ones in the single-id mode (the seccomp
 * supervisor, rootfs/chown_notify.c); paths resolve as in the step. */
static void
test_chown_owners (void **state)
{
  (void) state;
  cleanup_free char *out = NULL;
  assert_int_equal (sh ("set -e; mkdir -p /tmp/o/sub; cd /tmp/o; touch f g h z\n"
                        "chmod 4755 g; chmod 2755 h\n"
                        "chown 1234:1235 f\n"
                        "chgrp 42 /tmp/o\n"
                        "chown 5 g\n"          /* set-user-ID goes */
                        "chgrp 7 h\n"          /* set-group-ID with g+x goes */
                        "ln -s /tmp/o/f abs\n" /* absolute: inside the root */
                        "chown -h 9:9 abs\n"   /* a symlink: may be lost, not an error */
                        "chown 77:50 abs\n"    /* followed: f is 77:50 */
                        "chown 3:3 z; chown 0:0 z\n"
                        "cd sub; chown 88:89 ../../o/sub; cd ..\n"
                        "if chown 1:1 missing; then echo bad; fi\n"
                        "echo done",
                        &out),
                    0);
  assert_non_null (strstr (out, "missing: No such file or directory"));
  assert_null (strstr (out, "bad"));
  assert_non_null (strstr (out, "done"));
  assert_owner ("tmp/o", 0, 42, 0755);
  assert_owner ("tmp/o/f", 77, 50, 0644);
  assert_owner ("tmp/o/g", 5, 0, 0755);
  assert_owner ("tmp/o/h", 0, 7, 0755);
  assert_owner ("tmp/o/z", 0, 0, 0644);
  assert_owner ("tmp/o/sub", 88, 89, 0755);
  cleanup_free char *z = ib_path_join (rootfs, "tmp/o/z");
  char v[64];
  assert_true (lgetxattr (z, IB_OWNER_XATTR, v, sizeof v) < 0);
  free (out);
  out = NULL;
  assert_int_equal (sh ("rm -rf /tmp/o", &out), 0);
}

static void
test_signal_forwarded (void **state)
{
  (void) state;
  pid_t me = getpid ();
  pid_t killer = fork ();
  assert_true (killer >= 0);
  if (killer == 0)
    {
      usleep (500 * 1000);
      kill (me, SIGTERM);
      _exit (0);
    }
  char *argv[] = { (char *) "sleep", (char *) "4243", NULL };
  int status;
  assert_int_equal (run_full (argv, NULL, 0, false, 0, &status, NULL, NULL), 0);
  assert_int_equal (status, 128 + SIGTERM);
  waitpid (killer, NULL, 0);
  /* Our disposition is back to the default afterwards. */
  struct sigaction sa;
  sigaction (SIGTERM, NULL, &sa);
  assert_true (sa.sa_handler == SIG_DFL);
}

static bool
exists (const char *rel)
{
  cleanup_free char *p = ib_path_join (rootfs, rel);
  struct stat st;
  return lstat (p, &st) == 0;
}

static void
write_text (const char *path, const char *text, mode_t m)
{
  int fd = open (path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, m);
  assert_true (fd >= 0);
  assert_int_equal (write (fd, text, strlen (text)), (ssize_t) strlen (text));
  close (fd);
}

static char *
read_text (const char *path)
{
  char *data = NULL;
  ib_error_t err = NULL;
  if (ib_read_file (path, &data, NULL, &err) < 0)
    {
      ib_error_free (&err);
      return NULL;
    }
  return data;
}

static int
run_opts (ib_sandbox_opts_t *o, int *status, char **out, char **msg)
{
  o->rootfs = rootfs;
  o->env = env_default;
  o->tail_lines = 1000;
  o->tail = out;
  ib_error_t err = NULL;
  *status = -12345;
  int r = ib_sandbox_run (o, status, &err);
  if (msg)
    *msg = err ? xstrdup (err->msg) : NULL;
  ib_error_free (&err);
  return r;
}

/* Bind (rw, ro, a single file) and tmpfs mounts: visible where asked,
 * writes reach the source or are refused, and every mount point made for
 * the run is gone afterwards. */
static void
test_mounts (void **state)
{
  (void) state;
  char src[] = "/tmp/ib-mnt-src-XXXXXX", ro[] = "/tmp/ib-mnt-ro-XXXXXX";
  assert_non_null (mkdtemp (src));
  assert_non_null (mkdtemp (ro));
  chmod (src, 0777);
  cleanup_free char *a = ib_path_join (src, "a");
  write_text (a, "from the host\n", 0644);
  cleanup_free char *conf = ib_path_join (ro, "extra.conf");
  write_text (conf, "k=v\n", 0644);
  ib_mount_t m[] = {
    { .type = IB_MOUNT_BIND, .source = src, .target = "/mnt/deep/rw" },
    { .type = IB_MOUNT_BIND, .source = ro, .target = "/mnt/ro", .readonly = true },
    { .type = IB_MOUNT_TMPFS, .target = "/scratch", .data = "size=1m,mode=0700" },
    { .type = IB_MOUNT_BIND, .source = conf, .target = "/etc/extra.conf", .readonly = true },
  };
  char *argv[] = { (char *) "sh", (char *) "-c",
                   (char *) "cat /mnt/deep/rw/a; echo written > /mnt/deep/rw/b; "
                            "(echo x > /mnt/ro/c) 2>/dev/null; echo ro=$?; "
                            "echo t > /scratch/t && stat -c %a /scratch; cat /etc/extra.conf; "
                            "(echo x >> /etc/extra.conf) 2>/dev/null; echo conf=$?",
                   NULL };
  ib_sandbox_opts_t o = { .argv = argv, .mounts = m, .n_mounts = 4 };
  int status;
  cleanup_free char *out = NULL, *msg = NULL;
  assert_int_equal (run_opts (&o, &status, &out, &msg), 0);
  assert_int_equal (status, 0);
  assert_string_equal (out, "from the host\nro=1\n700\nk=v\nconf=1\n");
  cleanup_free char *b = ib_path_join (src, "b");
  cleanup_free char *bt = read_text (b);
  assert_non_null (bt);
  assert_string_equal (bt, "written\n");
  cleanup_free char *c = ib_path_join (ro, "c");
  assert_int_equal (access (c, F_OK), -1);
  /* nothing of the mounts stays in the rootfs */
  assert_false (exists ("mnt"));
  assert_false (exists ("scratch"));
  assert_false (exists ("etc/extra.conf"));
  assert_true (exists ("etc/hosts"));
  ib_error_t err = NULL;
  ib_rm_rf (src, &err);
  ib_rm_rf (ro, &err);
  ib_error_free (&err);
}

/* A mount target through a symlink of the image that points at a host
 * path, or with "..": resolved inside the rootfs, the host is untouched. */
static void
test_mount_target_stays_inside (void **state)
{
  (void) state;
  char canary[] = "/tmp/ib-canary-XXXXXX";
  assert_non_null (mkdtemp (canary));
  cleanup_free char *link = ib_path_join (rootfs, "evil");
  assert_int_equal (symlink (canary, link), 0);
  ib_mount_t m[] = {
    { .type = IB_MOUNT_TMPFS, .target = "/evil/x" },
    { .type = IB_MOUNT_TMPFS, .target = "/../../../up" },
  };
  char *argv[] = { (char *) "sh", (char *) "-c",
                   (char *) "grep -c ' /up tmpfs' /proc/mounts; touch /evil/x/f", NULL };
  ib_sandbox_opts_t o = { .argv = argv, .mounts = m, .n_mounts = 2 };
  int status;
  cleanup_free char *out = NULL, *msg = NULL;
  int r = run_opts (&o, &status, &out, &msg);
  if (r < 0)
    fprintf (stderr, "sandbox error: %s\n", msg);
  assert_int_equal (r, 0);
  assert_int_equal (status, 0);
  assert_string_equal (out, "1\n");
  /* the host directory the symlink names got nothing */
  DIR *d = opendir (canary);
  assert_non_null (d);
  int n = 0;
  for (struct dirent *de; (de = readdir (d)) != NULL;)
    n += strcmp (de->d_name, ".") && strcmp (de->d_name, "..");
  closedir (d);
  assert_int_equal (n, 0);
  /* what was made inside the rootfs for it is gone again */
  cleanup_free char *inside = xasprintf ("%s%s", rootfs, canary);
  assert_int_equal (access (inside, F_OK), -1);
  assert_false (exists ("up"));
  unlink (link);
  rmdir (canary);
  /* a missing bind source is named, and nothing is made */
  ib_mount_t bad = { .type = IB_MOUNT_BIND, .source = "/nonexistent-src", .target = "/new/t" };
  ib_sandbox_opts_t o2 = { .argv = argv, .mounts = &bad, .n_mounts = 1 };
  cleanup_free char *out2 = NULL, *msg2 = NULL;
  assert_int_equal (run_opts (&o2, &status, &out2, &msg2), -1);
  assert_string_equal (msg2, "mount /nonexistent-src on /new/t: source /nonexistent-src: No such "
                             "file or directory");
  assert_false (exists ("new"));
}

/* CDI's hooks: symlinks made for the run only; ldconfig run in the rootfs
 * (-X plus the extra dirs) and /etc/ld.so.cache put back afterwards, or
 * regenerated when the command rewrote it.  The rootfs's "ldconfig" is a
 * script that writes its arguments into the cache. */
static void
test_symlinks_and_ldconfig (void **state)
{
  (void) state;
  cleanup_free char *sbin = ib_path_join (rootfs, "sbin");
  mkdir (sbin, 0755);
  cleanup_free char *ldc = ib_path_join (rootfs, "sbin/ldconfig");
  write_text (ldc, "#!/bin/sh\necho \"args:$*\" > /etc/ld.so.cache\n", 0755);
  cleanup_free char *cache = ib_path_join (rootfs, "etc/ld.so.cache");
  write_text (cache, "original cache\n", 0644);
  struct timespec old[2] = { { 1000, 0 }, { 1000, 0 } };
  assert_int_equal (utimensat (AT_FDCWD, cache, old, 0), 0);
  char *dirs[] = { (char *) "/opt/drv/lib", NULL };
  ib_sandbox_symlink_t l[] = { { "/usr/lib/libfoo.so", "libfoo.so.1" } };
  char *argv[] = { (char *) "sh", (char *) "-c",
                   (char *) "cat /etc/ld.so.cache; readlink /usr/lib/libfoo.so", NULL };
  ib_sandbox_opts_t o = { .argv = argv, .symlinks = l, .n_symlinks = 1, .ldconfig = true,
                          .ldconfig_dirs = dirs };
  int status;
  cleanup_free char *out = NULL, *msg = NULL;
  assert_int_equal (run_opts (&o, &status, &out, &msg), 0);
  assert_int_equal (status, 0);
  assert_string_equal (out, "args:-X /opt/drv/lib\nlibfoo.so.1\n");
  assert_false (exists ("usr/lib/libfoo.so"));
  cleanup_free char *back = read_text (cache);
  assert_string_equal (back, "original cache\n");
  struct stat st;
  assert_int_equal (stat (cache, &st), 0);
  assert_int_equal (st.st_mtim.tv_sec, 1000);

  /* The command writes the cache itself (as ldconfig run by apt would):
   * regenerated by a plain ldconfig, without the extra dirs. */
  char *argv2[] = { (char *) "sh", (char *) "-c", (char *) "echo mine > /etc/ld.so.cache", NULL };
  ib_sandbox_opts_t o2 = { .argv = argv2, .ldconfig = true, .ldconfig_dirs = dirs };
  cleanup_free char *out2 = NULL;
  assert_int_equal (run_opts (&o2, &status, &out2, NULL), 0);
  assert_int_equal (status, 0);
  cleanup_free char *regen = read_text (cache);
  assert_string_equal (regen, "args:\n");
  unlink (cache);
  unlink (ldc);
  rmdir (sbin);
}

static int
teardown (void **state)
{
  (void) state;
  ib_error_t err = NULL;
  ib_rm_rf (rootfs, &err);
  ib_error_free (&err);
  return 0;
}

int
main (void)
{
  const char *busybox = find_busybox ();
  if (busybox == NULL)
    {
      /* A missing dependency is a failure, never a silent pass. */
      fprintf (stderr, "test_sandbox: no busybox found; run 'make deps' (busybox-static)\n");
      return 1;
    }
  if (make_rootfs (busybox) < 0)
    {
      perror ("test_sandbox: make rootfs");
      return 1;
    }

  if (getenv ("IB_TEST_DEBUG"))
    ib_verbosity = 2;
  ib_userns_mode_t requested = IB_USERNS_AUTO;
  const char *m = getenv ("IMGBUILD_USERNS");
  if (m && strcmp (m, "root") == 0)
    requested = IB_USERNS_ROOT;
  else if (m && strcmp (m, "map") == 0)
    requested = IB_USERNS_MAP;
  else if (m && strcmp (m, "single") == 0)
    requested = IB_USERNS_SINGLE;
  ib_error_t err = NULL;
  if (ib_userns_enter (requested, &mode, &err) < 0)
    {
      fprintf (stderr, "test_sandbox: %s\n", err->msg);
      ib_error_free (&err);
      teardown (NULL);
      return 1;
    }
  ib_userns_mode_t again;
  if (ib_userns_enter (IB_USERNS_SINGLE, &again, &err) < 0 || again != mode
      || ib_userns_mode () != mode)
    {
      fprintf (stderr, "test_sandbox: second ib_userns_enter is not a no-op\n");
      return 1;
    }
  printf ("test_sandbox: user namespace mode %s (uid %d)\n", ib_userns_mode_name (mode),
          (int) getuid ());

  const struct CMUnitTest tests[] = {
    cmocka_unit_test (test_exit_code),
    cmocka_unit_test (test_pid_namespace),
    cmocka_unit_test (test_dev),
    cmocka_unit_test (test_ids),
    cmocka_unit_test (test_root_is_rootfs),
    cmocka_unit_test (test_background_killed),
    cmocka_unit_test (test_tail),
    cmocka_unit_test (test_not_found),
    cmocka_unit_test (test_network_none),
    cmocka_unit_test (test_cwd_created),
    cmocka_unit_test (test_etc_files),
    cmocka_unit_test (test_provide_etc_files),
    cmocka_unit_test (test_stdin),
    cmocka_unit_test (test_single_mode_env),
    cmocka_unit_test (test_chown_owners),
    cmocka_unit_test (test_signal_forwarded),
    cmocka_unit_test (test_mounts),
    cmocka_unit_test (test_mount_target_stays_inside),
    cmocka_unit_test (test_symlinks_and_ldconfig),
  };
  return cmocka_run_group_tests (tests, NULL, teardown);
}
