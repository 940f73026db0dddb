/* rootfs/chown_notify.c — the supervisor of a step's chown calls and of
 * its stats of open files (rootfs/chown_notify.h).
 *
 * Reading order: ib_chown_notify_start makes the thread (supervise), which
 * waits for the listener fd, learns the syscall numbers it is sent
 * (sys_table) and answers each notification (answer): the call's
 * arguments are read (args_of, read_path), its target named as the step
 * would name it (target_path, in the caller's root: enter_root), then a
 * chown opens it (open_target) and sets or records the owner
 * (apply_owner), and a stat shows a recorded owner (emulate_stat) or lets
 * the kernel answer.
 *
 * The thread has a file system context of its own (unshare(CLONE_FS)): its
 * root is chroot()ed into the caller's root (again only when a caller has
 * another one) and its working directory is the host's /proc.  The kernel
 * then resolves a path exactly as for the step (absolute paths and
 * symlinks from the step's root, ".." stopped there; relative ones through
 * the PID/cwd and PID/fd/N magic links), and never reaches the host's
 * tree.  Every notification's id is checked again
 * (seccomp_notify_id_valid) after the caller's /proc entries are opened
 * and its memory read, and before anything is changed or written, so that
 * a pid reused by another process is never acted on.
 */
#include "rootfs/chown_notify.h"
#include "common/util.h"
#include "rootfs/console.h"
#include "rootfs/owner.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <seccomp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/xattr.h>
#include <unistd.h>

struct ib_chown_notify
{
  pthread_t thread;
  int sock;      /* where the listener arrives */
  int stop_r, stop_w;
  int listener;  /* -1 until received */
  unsigned long answered;
};

/* --- the family's syscall numbers ----------------------------------------- */

enum kind
{
  K_CHOWN,    /* (path, uid, gid), last symlink followed */
  K_LCHOWN,   /* (path, uid, gid), not followed */
  K_FCHOWN,   /* (fd, uid, gid) */
  K_FCHOWNAT, /* (dirfd, path, uid, gid, flags) */
  /* the stat family, native architecture only (struct stat is ours) */
  K_STAT,       /* (path, buf) */
  K_LSTAT,      /* (path, buf) */
  K_FSTAT,      /* (fd, buf) */
  K_NEWFSTATAT, /* (dirfd, path, buf, flags) */
  K_STATX,      /* (dirfd, path, flags, mask, buf) */
};

#define IS_STAT(k) ((k) >= K_STAT)

struct sysent
{
  uint32_t arch;
  int nr;
  enum kind kind;
  bool id16; /* i386's original calls: 16-bit ids, 0xffff for "unchanged" */
};

#define MAX_SYS 24

static size_t
sys_table (struct sysent *t)
{
  static const struct
  {
    const char *name;
    enum kind kind;
    bool id16;
  } names[] = {
    { "chown", K_CHOWN, false },      { "lchown", K_LCHOWN, false },
    { "fchown", K_FCHOWN, false },    { "fchownat", K_FCHOWNAT, false },
    { "chown32", K_CHOWN, false },    { "lchown32", K_LCHOWN, false },
    { "fchown32", K_FCHOWN, false },
    { "stat", K_STAT, false },        { "lstat", K_LSTAT, false },
    { "fstat", K_FSTAT, false },      { "newfstatat", K_NEWFSTATAT, false },
    { "statx", K_STATX, false },
  };
  uint32_t arches[2] = { seccomp_arch_native (), 0 };
  if (arches[0] == SCMP_ARCH_X86_64)
    arches[1] = SCMP_ARCH_X86;
  size_t n = 0;
  for (size_t a = 0; a < 2 && arches[a]; a++)
    for (size_t i = 0; i < sizeof names / sizeof names[0] && n < MAX_SYS; i++)
      {
        int nr = seccomp_syscall_resolve_name_arch (arches[a], names[i].name);
        if (nr < 0) /* not a call of this architecture */
          continue;
        if (IS_STAT (names[i].kind) && a > 0) /* i386: another struct stat */
          continue;
        /* On i386 the plain names are the 16-bit calls (chown32 is the
         * one with 32-bit ids); fchownat always has 32-bit ids. */
        bool id16 = arches[a] == SCMP_ARCH_X86 && names[i].kind != K_FCHOWNAT
                    && strstr (names[i].name, "32") == NULL;
        t[n++] = (struct sysent){ arches[a], nr, names[i].kind, id16 };
      }
  return n;
}

/* --- one call --------------------------------------------------------------- */

struct call
{
  enum kind kind;
  int fd;          /* K_FCHOWN, K_FSTAT: the fd; *at, statx: dirfd */
  uint64_t path;   /* address in the caller, 0 when none */
  uid_t uid;       /* (uid_t) -1: unchanged */
  gid_t gid;
  bool follow;
  bool empty_path; /* AT_EMPTY_PATH */
  uint64_t buf;    /* stat family: the caller's struct stat or statx */
  int flags;       /* statx: its flags */
  unsigned mask;   /* statx: its mask */
};

/* answer(): let the kernel run the call as if it had not been stopped */
#define CONTINUE 2

static uint32_t
id_arg (uint64_t v, bool id16)
{
  uint32_t id = (uint32_t) v;
  if (id16)
    id = (id & 0xffff) == 0xffff ? (uint32_t) -1 : id & 0xffff;
  return id;
}

/* The call's arguments; -EINVAL for flags a real fchownat refuses. */
static int
args_of (const struct sysent *e, const __u64 *a, struct call *c)
{
  *c = (struct call){ .kind = e->kind, .fd = -1, .follow = true };
  switch (e->kind)
    {
    case K_CHOWN:
    case K_LCHOWN:
      c->path = a[0];
      c->uid = id_arg (a[1], e->id16);
      c->gid = id_arg (a[2], e->id16);
      c->follow = e->kind == K_CHOWN;
      break;
    case K_FCHOWN:
      c->fd = (int) a[0];
      c->uid = id_arg (a[1], e->id16);
      c->gid = id_arg (a[2], e->id16);
      break;
    case K_FCHOWNAT:
      {
        c->fd = (int) a[0];
        c->path = a[1];
        c->uid = id_arg (a[2], false);
        c->gid = id_arg (a[3], false);
        int flags = (int) a[4];
        if (flags & ~(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH))
          return -EINVAL;
        c->follow = !(flags & AT_SYMLINK_NOFOLLOW);
        c->empty_path = flags & AT_EMPTY_PATH;
        break;
      }
    case K_STAT:
    case K_LSTAT:
      c->path = a[0];
      c->buf = a[1];
      c->follow = e->kind == K_STAT;
      break;
    case K_FSTAT:
      c->fd = (int) a[0];
      c->buf = a[1];
      break;
    case K_NEWFSTATAT:
    case K_STATX:
      {
        c->fd = (int) a[0];
        c->path = a[1];
        int flags = (int) (e->kind == K_STATX ? a[2] : a[3]);
        int known = AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH | AT_NO_AUTOMOUNT
                    | (e->kind == K_STATX ? AT_STATX_SYNC_TYPE : 0);
        if (flags & ~known)
          return CONTINUE; /* the kernel's EINVAL */
        c->flags = flags;
        c->follow = !(flags & AT_SYMLINK_NOFOLLOW);
        c->empty_path = flags & AT_EMPTY_PATH;
        c->buf = e->kind == K_STATX ? a[4] : a[2];
        c->mask = (unsigned) a[3];
        break;
      }
    }
  return 0;
}

/* The NUL-terminated string at addr in process pid, read a page at a time
 * (the string may end just before an unmapped page).  0, or -errno:
 * EFAULT (unreadable), ENAMETOOLONG. */
static int
read_path (pid_t pid, uint64_t addr, char *buf, size_t size)
{
  if (addr == 0)
    return -EFAULT;
  size_t got = 0;
  while (got < size)
    {
      size_t chunk = 4096 - (size_t) ((addr + got) % 4096);
      if (chunk > size - got)
        chunk = size - got;
      struct iovec local = { buf + got, chunk };
      struct iovec remote = { (void *) (uintptr_t) (addr + got), chunk };
      ssize_t n = process_vm_readv (pid, &local, 1, &remote, 1, 0);
      if (n <= 0)
        return -EFAULT;
      if (memchr (buf + got, '\0', (size_t) n))
        return 0;
      got += (size_t) n;
    }
  return -ENAMETOOLONG;
}

/* The thread's view: /proc, and the step root it is chroot()ed in. */
struct view
{
  int procfd;   /* the host's /proc (imgbuild's pid namespace) */
  int listener;
  bool in_root; /* root_dev/root_ino: the root we are chroot()ed in */
  dev_t root_dev;
  ino_t root_ino;
};

/* Make the thread's root the caller's (/proc/PID/root), unless it is
 * already (the usual case: every process of a step has the sandbox's
 * root; one that chroot()s has another).  The thread's working directory
 * stays /proc.  0 or -errno. */
static int
enter_root (struct view *v, pid_t pid)
{
  char p[32];
  snprintf (p, sizeof p, "%d/root", (int) pid);
  struct stat st;
  if (fstatat (v->procfd, p, &st, 0) < 0)
    return -errno;
  if (v->in_root && st.st_dev == v->root_dev && st.st_ino == v->root_ino)
    return 0;
  int root = openat (v->procfd, p, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root < 0)
    return -errno;
  int r = fchdir (root) == 0 && chroot (".") == 0 ? 0 : -errno;
  close (root);
  if (fchdir (v->procfd) < 0 && r == 0)
    r = -errno;
  v->in_root = r == 0;
  v->root_dev = st.st_dev;
  v->root_ino = st.st_ino;
  return r;
}

/* The rest of an absolute path that names the caller's /proc/self or
 * /proc/thread-self ("fd/3" of "/proc/self/fd/3", "" of "/proc/self"),
 * *thread telling which; NULL for any other path. */
static const char *
self_rest (const char *path, bool *thread)
{
  static const char *const prefixes[] = { "/proc/self", "/proc/thread-self" };
  for (int i = 0; i < 2; i++)
    {
      size_t n = strlen (prefixes[i]);
      if (strncmp (path, prefixes[i], n) == 0 && (path[n] == '/' || path[n] == '\0'))
        {
          *thread = i == 1;
          return path[n] == '/' ? path + n + 1 : path + n;
        }
    }
  return NULL;
}

/* The thread group of task `tid` (its "Tgid:" in PID/status), or tid. */
static pid_t
tgid_of (int procfd, pid_t tid)
{
  char p[32], buf[1024];
  snprintf (p, sizeof p, "%d/status", (int) tid);
  cleanup_close int fd = openat (procfd, p, O_RDONLY | O_CLOEXEC);
  ssize_t n = fd < 0 ? -1 : read (fd, buf, sizeof buf - 1);
  if (n <= 0)
    return tid;
  buf[n] = '\0';
  const char *t = strstr (buf, "\nTgid:");
  long v = t ? strtol (t + 6, NULL, 10) : 0;
  return v > 0 ? (pid_t) v : tid;
}

/* The call's target as a path the thread resolves as the caller would,
 * its root being the caller's and its working directory /proc: an
 * absolute path as is, a relative one through PID/cwd/ or PID/fd/N/ (the
 * magic link leads to the caller's directory; "..", symlinks and absolute
 * links inside then stay in the root), an fd as PID/fd/N (to follow).
 * The caller's /proc/self/REST and /proc/thread-self/REST become TGID/REST
 * and TGID/task/PID/REST: this thread is not in the step's pid namespace,
 * and the step's /proc answers "self" to it with ENOENT (systemd-tmpfiles
 * and other O_PATH users chown "/proc/self/fd/N"; issue 38, hole 8).
 * *by_fd says whether the call names an fd; -ENOENT for an empty path. */
static int
target_path (int procfd, pid_t pid, const struct call *c, const char *path, char *out,
             size_t size, bool *by_fd)
{
  bool has_dirfd = c->kind == K_FCHOWNAT || c->kind == K_NEWFSTATAT || c->kind == K_STATX;
  *by_fd = c->kind == K_FCHOWN || c->kind == K_FSTAT || (has_dirfd && c->empty_path && !*path);
  if (!*by_fd && !*path)
    return -ENOENT;
  bool cwd = has_dirfd && c->fd == AT_FDCWD;
  int n;
  if (*by_fd)
    n = cwd ? snprintf (out, size, "%d/cwd", (int) pid)
            : snprintf (out, size, "%d/fd/%d", (int) pid, c->fd);
  else if (path[0] == '/')
    {
      bool thread = false;
      const char *rest = self_rest (path, &thread);
      pid_t tgid = rest ? tgid_of (procfd, pid) : 0;
      if (rest == NULL)
        n = snprintf (out, size, "%s", path);
      else if (thread)
        n = snprintf (out, size, "%d/task/%d/%s", (int) tgid, (int) pid, rest);
      else
        n = snprintf (out, size, "%d/%s", (int) tgid, rest);
    }
  else if (!has_dirfd || cwd)
    n = snprintf (out, size, "%d/cwd/%s", (int) pid, path);
  else
    n = snprintf (out, size, "%d/fd/%d/%s", (int) pid, c->fd, path);
  return n < 0 || (size_t) n >= size ? -ENAMETOOLONG : 0;
}

/* An O_PATH descriptor of what a chown names, resolved as the step would
 * resolve it; -errno on failure (EBADF for an fd the caller lacks),
 * -ESRCH when the caller is gone. */
static int
open_target (struct view *v, const struct seccomp_notif *req, const struct call *c,
             const char *path)
{
  pid_t pid = (pid_t) req->pid;
  char tp[PATH_MAX + 64];
  bool by_fd;
  int r = target_path (v->procfd, pid, c, path, tp, sizeof tp, &by_fd);
  if (r < 0)
    return r;
  if ((r = enter_root (v, pid)) < 0)
    return r;
  bool has_dirfd = c->kind == K_FCHOWNAT;
  if ((by_fd || (has_dirfd && path[0] != '/')) && c->fd != AT_FDCWD)
    {
      char fdp[32];
      struct stat st;
      snprintf (fdp, sizeof fdp, "%d/fd/%d", (int) pid, c->fd);
      if (fstatat (v->procfd, fdp, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? -EBADF : -errno;
    }
  int fd = openat (AT_FDCWD, tp, O_PATH | O_CLOEXEC | (c->follow || by_fd ? 0 : O_NOFOLLOW));
  if (fd < 0)
    return -errno;
  if (seccomp_notify_id_valid (v->listener, req->id) != 0)
    {
      close (fd);
      return -ESRCH;
    }
  return fd;
}

/* chown as the kernel would, with ids it lacks recorded; -errno or 0. */
static int
apply_owner (int procfd, int target, const struct call *c)
{
  struct stat st;
  if (fstat (target, &st) < 0)
    return -errno;
  if (!S_ISREG (st.st_mode) && !S_ISDIR (st.st_mode))
    {
      /* symlinks and special files cannot carry the record: their owner
       * is lost, as ib_owner_chown_at says */
      if (fchownat (target, "", c->uid, c->gid, AT_EMPTY_PATH) < 0 && errno != EINVAL
          && errno != EPERM)
        return -errno;
      return 0;
    }
  /* An O_PATH descriptor takes no xattrs: open the file itself (no side
   * effects for a regular file or a directory). */
  char self[64];
  snprintf (self, sizeof self, "self/fd/%d", target);
  cleanup_close int fd = openat (procfd, self, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0)
    return -errno;
  uid_t uid = st.st_uid;
  gid_t gid = st.st_gid;
  if (ib_owner_get_fd (fd, &uid, &gid) < 0)
    return -errno;
  if (c->uid != (uid_t) -1)
    uid = c->uid;
  if (c->gid != (gid_t) -1)
    gid = c->gid;
  if (ib_owner_chown_fd (fd, uid, gid) < 0)
    {
      if (errno != ENOTSUP)
        return -errno;
      ib_debug ("chown: no user xattrs here, owner %u:%u not recorded", (unsigned) uid,
                (unsigned) gid);
    }
  /* What notify_change() does on every chown of a non-directory, also
   * when the ids are unchanged: set-user-ID goes, and set-group-ID where
   * the group may execute (else it marks mandatory locking and stays).  A
   * chown the kernel did has done it already. */
  mode_t m = st.st_mode & 07777;
  if (S_ISREG (st.st_mode))
    {
      mode_t keep = m & ~(mode_t) S_ISUID;
      if ((m & S_ISGID) && (m & S_IXGRP))
        keep &= ~(mode_t) S_ISGID;
      if (keep != m && fchmod (fd, keep) < 0)
        return -errno;
    }
  return 0;
}

/* A stat of a file whose owner is recorded: the kernel's answer with the
 * recorded ids, written into the caller's buffer; CONTINUE (the kernel
 * answers) for every other file, and for every error (the kernel's own).
 * The usual case, an open file without a record, costs one getxattr.
 * 0, CONTINUE, 1 (the caller is gone) or -EFAULT. */
static int
emulate_stat (struct view *v, const struct seccomp_notif *req, const struct call *c,
              const char *path)
{
  pid_t pid = (pid_t) req->pid;
  char tp[PATH_MAX + 64];
  bool by_fd;
  if (target_path (v->procfd, pid, c, path, tp, sizeof tp, &by_fd) < 0)
    return CONTINUE;
  /* PID/fd/N leads to the file whatever the thread's root (the usual
   * case: glibc's fstat) */
  if (!by_fd && enter_root (v, pid) < 0)
    return CONTINUE;
  bool follow = c->follow || by_fd;
  unsigned char val[256];
  ssize_t len = follow ? getxattr (tp, IB_OWNER_XATTR, val, sizeof val)
                       : lgetxattr (tp, IB_OWNER_XATTR, val, sizeof val);
  uint32_t ru, rg;
  if (len < 0 || ib_owner_decode (val, (size_t) len, &ru, &rg) < 0)
    return CONTINUE;
  /* the caller's memory through its own mm: a reused pid is another mm */
  char mem[32];
  snprintf (mem, sizeof mem, "%d/mem", (int) pid);
  cleanup_close int memfd = openat (v->procfd, mem, O_RDWR | O_CLOEXEC);
  if (memfd < 0)
    return CONTINUE;
  int nofollow = follow ? 0 : AT_SYMLINK_NOFOLLOW;
  struct stat st;
  struct statx sx;
  const void *out;
  size_t size;
  if (c->kind == K_STATX)
    {
      if (statx (AT_FDCWD, tp, nofollow | (c->flags & (AT_STATX_SYNC_TYPE | AT_NO_AUTOMOUNT)),
                 c->mask, &sx) < 0)
        return CONTINUE;
      if (ru != IB_OWNER_NOOP)
        sx.stx_uid = ru;
      if (rg != IB_OWNER_NOOP)
        sx.stx_gid = rg;
      out = &sx;
      size = sizeof sx;
    }
  else
    {
      if (fstatat (AT_FDCWD, tp, &st, nofollow) < 0)
        return CONTINUE;
      if (ru != IB_OWNER_NOOP)
        st.st_uid = ru;
      if (rg != IB_OWNER_NOOP)
        st.st_gid = rg;
      out = &st;
      size = sizeof st;
    }
  if (seccomp_notify_id_valid (v->listener, req->id) != 0)
    return 1;
  return pwrite (memfd, out, size, (off_t) c->buf) == (ssize_t) size ? 0 : -EFAULT;
}

/* The answer (0 or -errno) to one notification; 1 when it must not be
 * answered (the caller is gone), CONTINUE when the kernel is to run it. */
static int
answer (struct view *v, const struct sysent *t, size_t n_sys, const struct seccomp_notif *req)
{
  const struct sysent *e = NULL;
  for (size_t i = 0; i < n_sys && e == NULL; i++)
    if (t[i].arch == req->data.arch && t[i].nr == req->data.nr)
      e = &t[i];
  if (e == NULL) /* not one of ours (i386's stat family): as if not stopped */
    return CONTINUE;
  if (v == NULL) /* no root of our own: emulated as without a supervisor */
    return IS_STAT (e->kind) ? CONTINUE : 0;
  struct call c;
  int r = args_of (e, req->data.args, &c);
  if (r != 0)
    return r;
  char path[PATH_MAX];
  path[0] = '\0';
  if (c.kind != K_FCHOWN && c.kind != K_FSTAT
      && (r = read_path ((pid_t) req->pid, c.path, path, sizeof path)) < 0)
    return IS_STAT (c.kind) ? CONTINUE : r;
  if (IS_STAT (c.kind))
    return emulate_stat (v, req, &c, path);
  int target = open_target (v, req, &c, path);
  if (target == -ESRCH)
    return 1;
  if (target < 0)
    return target;
  r = apply_owner (v->procfd, target, &c);
  close (target);
  return r;
}

/* --- the thread ------------------------------------------------------------- */

/* Wait for fd or the stop pipe: true when fd is readable. */
static bool
wait_for (int fd, int stop)
{
  struct pollfd p[2] = { { .fd = stop, .events = POLLIN }, { .fd = fd, .events = POLLIN } };
  for (;;)
    {
      int r = poll (p, fd >= 0 ? 2 : 1, -1);
      if (r < 0 && errno == EINTR)
        continue;
      if (r < 0 || p[0].revents)
        return false;
      if (p[1].revents & POLLIN)
        return true;
      if (p[1].revents) /* HUP, ERR: nothing more will come */
        p[1].fd = -1;
    }
}

static void *
supervise (void *arg)
{
  ib_chown_notify_t *n = arg;
  ib_error_t err = NULL;
  if (wait_for (n->sock, n->stop_r) && ib_console_recv (n->sock, &n->listener, &err) < 0)
    ib_error_report (&err);
  if (n->listener < 0)
    {
      wait_for (-1, n->stop_r);
      return NULL;
    }
  /* A root of our own to chroot() into per call; the rest of imgbuild
   * keeps the process's. */
  cleanup_close int procfd = open ("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC);
  bool own_fs = unshare (CLONE_FS) == 0 && procfd >= 0 && fchdir (procfd) == 0;
  if (!own_fs || procfd < 0)
    ib_warn ("chown supervisor: %s: a step's chown is answered without effect",
             strerror (errno));
  struct sysent t[MAX_SYS];
  size_t n_sys = sys_table (t);
  struct view view = { .procfd = procfd, .listener = n->listener };
  struct seccomp_notif *req = NULL;
  struct seccomp_notif_resp *resp = NULL;
  if (seccomp_notify_alloc (&req, &resp) < 0)
    {
      ib_warn ("chown supervisor: out of memory");
      own_fs = false;
    }
  while (req && wait_for (n->listener, n->stop_r))
    {
      memset (req, 0, sizeof *req);
      if (seccomp_notify_receive (n->listener, req) < 0)
        continue; /* ENOENT: the caller died meanwhile */
      int r = answer (own_fs && procfd >= 0 ? &view : NULL, t, n_sys, req);
      if (r == 1)
        continue;
      memset (resp, 0, sizeof *resp);
      resp->id = req->id;
      if (r == CONTINUE)
        resp->flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
      else
        resp->error = r;
      resp->val = 0;
      if (seccomp_notify_respond (n->listener, resp) == 0)
        n->answered++;
    }
  seccomp_notify_free (req, resp);
  return NULL;
}

int
ib_chown_notify_start (int sock, ib_chown_notify_t **out, ib_error_t *err)
{
  *out = NULL;
  ib_chown_notify_t *n = xmalloc (sizeof *n);
  n->sock = sock;
  n->listener = -1;
  int p[2];
  if (pipe2 (p, O_CLOEXEC) < 0)
    {
      int e = errno;
      close (sock);
      free (n);
      return ib_error_sys (err, e, "chown supervisor: pipe");
    }
  n->stop_r = p[0];
  n->stop_w = p[1];
  int r = pthread_create (&n->thread, NULL, supervise, n);
  if (r != 0)
    {
      close (sock);
      close (p[0]);
      close (p[1]);
      free (n);
      return ib_error_sys (err, r, "chown supervisor: thread");
    }
  *out = n;
  return 0;
}

unsigned long
ib_chown_notify_stop (ib_chown_notify_t *n)
{
  if (n == NULL)
    return 0;
  char b = 1;
  while (write (n->stop_w, &b, 1) < 0 && errno == EINTR)
    ;
  pthread_join (n->thread, NULL);
  unsigned long answered = n->answered;
  close (n->stop_r);
  close (n->stop_w);
  close (n->sock);
  if (n->listener >= 0)
    close (n->listener);
  free (n);
  return answered;
}
