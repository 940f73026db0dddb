/* rootfs/chown_notify.c — the supervisor of a step's chown calls
 * (rootfs/chown_notify.h).
 *
 * Reading order: ib_chown_notify_start makes the thread (supervise), which
 * waits for the listener fd, learns the syscall numbers of the chown family
 * (sys_table) and answers each notification (answer): the call's arguments
 * are read (args_of, read_path), its target opened inside the step's root
 * (open_target), and the owner set or recorded (apply_owner).
 *
 * The thread has a file system context of its own (unshare(CLONE_FS)) so
 * that it can chroot() into the step's root for each call: the kernel then
 * resolves the path exactly as for the step (absolute paths and symlinks
 * from the step's root, ".." stopped there), and a path never reaches the
 * host's tree.  /proc is reached through a descriptor opened before that.
 * Every notification's id is checked again (seccomp_notify_id_valid) after
 * the /proc entries of its pid are opened and after its memory is read, so
 * that a pid reused by another process is never acted on.
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
};

struct sysent
{
  uint32_t arch;
  int nr;
  enum kind kind;
  bool id16; /* i386's original calls: 16-bit ids, 0xffff for "unchanged" */
};

#define MAX_SYS 16

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
  int fd;          /* K_FCHOWN: the fd; K_FCHOWNAT: dirfd */
  uint64_t path;   /* address in the caller, 0 when none */
  uid_t uid;       /* (uid_t) -1: unchanged */
  gid_t gid;
  bool follow;
  bool empty_path; /* AT_EMPTY_PATH */
};

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

/* Open /proc/PID/WHAT (O_PATH; followed: a magic link leads to the file). */
static int
proc_open (int procfd, pid_t pid, const char *what, int flags)
{
  char p[64];
  snprintf (p, sizeof p, "%d/%s", (int) pid, what);
  return openat (procfd, p, O_PATH | O_CLOEXEC | flags);
}

/* An O_PATH descriptor of what the call names, resolved as the step would
 * resolve it; -errno on failure.  Leaves the thread chroot()ed in the
 * step's root. */
static int
open_target (int procfd, int listener, const struct seccomp_notif *req, const struct call *c,
             const char *path)
{
  pid_t pid = (pid_t) req->pid;
  bool by_fd = c->kind == K_FCHOWN || (c->kind == K_FCHOWNAT && c->empty_path && !*path);
  if (!by_fd && !*path)
    return -ENOENT;
  char what[32];
  cleanup_close int root = proc_open (procfd, pid, "root", O_DIRECTORY);
  cleanup_close int dir = -1;
  if (by_fd)
    {
      snprintf (what, sizeof what, "fd/%d", c->fd);
      dir = c->kind == K_FCHOWNAT && c->fd == AT_FDCWD ? proc_open (procfd, pid, "cwd", 0)
                                                       : proc_open (procfd, pid, what, 0);
      if (dir < 0)
        return errno == ENOENT ? -EBADF : -errno;
    }
  else if (path[0] != '/')
    {
      bool cwd = c->kind != K_FCHOWNAT || c->fd == AT_FDCWD;
      snprintf (what, sizeof what, "fd/%d", c->fd);
      dir = proc_open (procfd, pid, cwd ? "cwd" : what, 0);
      if (dir < 0)
        return errno == ENOENT && !cwd ? -EBADF : -errno;
      struct stat st;
      if (fstat (dir, &st) < 0)
        return -errno;
      if (!S_ISDIR (st.st_mode))
        return -ENOTDIR;
    }
  if (root < 0)
    return -errno;
  if (seccomp_notify_id_valid (listener, req->id) != 0)
    return -ESRCH;
  if (by_fd)
    return steal_fd (&dir);
  if (fchdir (root) < 0 || chroot (".") < 0)
    return -errno;
  int fd = openat (path[0] == '/' ? AT_FDCWD : dir, path,
                   O_PATH | O_CLOEXEC | (c->follow ? 0 : O_NOFOLLOW));
  return fd < 0 ? -errno : fd;
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

/* The answer (0 or -errno) to one notification; 1 when it must not be
 * answered (the caller is gone). */
static int
answer (int procfd, int listener, const struct sysent *t, size_t n_sys,
        const struct seccomp_notif *req)
{
  const struct sysent *e = NULL;
  for (size_t i = 0; i < n_sys && e == NULL; i++)
    if (t[i].arch == req->data.arch && t[i].nr == req->data.nr)
      e = &t[i];
  if (e == NULL)
    return 0; /* not one of ours: as before notification, emulated */
  struct call c;
  int r = args_of (e, req->data.args, &c);
  if (r < 0)
    return r;
  char path[PATH_MAX];
  path[0] = '\0';
  if (c.kind != K_FCHOWN && (r = read_path ((pid_t) req->pid, c.path, path, sizeof path)) < 0)
    return r;
  int target = open_target (procfd, listener, req, &c, path);
  if (target == -ESRCH)
    return 1;
  if (target < 0)
    return target;
  r = apply_owner (procfd, target, &c);
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
  bool own_fs = unshare (CLONE_FS) == 0;
  if (!own_fs || procfd < 0)
    ib_warn ("chown supervisor: %s: a step's chown is answered without effect",
             strerror (errno));
  struct sysent t[MAX_SYS];
  size_t n_sys = sys_table (t);
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
      int r = own_fs && procfd >= 0 ? answer (procfd, n->listener, t, n_sys, req) : 0;
      if (r == 1)
        continue;
      memset (resp, 0, sizeof *resp);
      resp->id = req->id;
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
