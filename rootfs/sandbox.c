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
 *
 * This file is imgbuild's side (options, environment, output, what is
 * made in the rootfs for the run and put back after it);
 * sandbox_proc.c holds S, P1 and C, sandbox_tree.c the mount tree.
 */
#include "rootfs/sandbox.h"
#include <ctype.h>
#include "common/util.h"
#include "rootfs/chown_notify.h"
#include "rootfs/console.h"
#include "rootfs/resolve.h"
#include "rootfs/rootfs_int.h"
#include "rootfs/sandbox_int.h"
#include "rootfs/userns.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* The tail keeps at most this many bytes, whatever the line count. */
#define TAIL_MAX_BYTES (256 * 1024)

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
                rfs_write_full (2, buf, (size_t) k);
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
  if (!rfs_is_real_dir (etc) || lstat (path, &st) == 0 || errno != ENOENT)
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
  if (lstat (path, &f->st) == 0 && S_ISREG (f->st.st_mode)
      && ib_read_file (path, &f->data, &f->len, NULL) == 0)
    f->had = true;
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
          if (rfs_prepare_mount (rootfd, rootfs, &o->mounts[i], &x->mounts[i], made, err) < 0)
            return -1;
          x->n_mounts++;
        }
      /* stable: equal depths keep the caller's order */
      for (size_t i = 1; i < x->n_mounts; i++)
        for (size_t j = i; j > 0 && rfs_mount_cmp_depth (&x->mounts[j - 1], &x->mounts[j]) > 0; j--)
          {
            struct prepared_mount t = x->mounts[j];
            x->mounts[j] = x->mounts[j - 1];
            x->mounts[j - 1] = t;
          }
    }
  for (size_t i = 0; i < o->n_symlinks; i++)
    if (rfs_make_symlink (rootfd, rootfs, &o->symlinks[i], made, err) < 0)
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
        rfs_made_note_dir (made, etc, true);
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
          cleanup_free char *etcp = rfs_fd_path (etc);
          cleanup_free char *cp = etcp ? ib_path_join (etcp, "ld.so.cache") : NULL;
          if (cp == NULL || ib_read_file (cp, &x->cache, &x->cache_len, err) < 0)
            return -1;
          x->had_cache = true;
          x->cache_st = st;
        }
      cleanup_close int vc = ib_open_dir_in_root (rootfd, "var/cache/ldconfig");
      cleanup_free char *vcp = vc >= 0 ? rfs_fd_path (vc) : NULL;
      if (vcp)
        {
          rfs_made_note_dir (made, vc, true);
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
  cleanup_free char *etcp = etc >= 0 ? rfs_fd_path (etc) : NULL;
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

/* The gids of `groups` that /proc/self/gid_map maps (setgroups(2) fails
 * with EINVAL on any other); a warning, once per process, for those left
 * out.  Caller frees. */
static gid_t *
mapped_groups (const gid_t *groups, size_t n, size_t *n_out)
{
  gid_t *out = n ? xmalloc (n * sizeof (gid_t)) : NULL;
  *n_out = 0;
  if (n == 0)
    return out;
  unsigned long inside[64], count[64];
  size_t n_ranges = 0;
  cleanup_file FILE *f = fopen ("/proc/self/gid_map", "re");
  unsigned long in, outside, cnt;
  while (f && n_ranges < 64 && fscanf (f, "%lu %lu %lu", &in, &outside, &cnt) == 3)
    {
      inside[n_ranges] = in;
      count[n_ranges++] = cnt;
    }
  for (size_t i = 0; i < n; i++)
    {
      bool mapped = false;
      for (size_t r = 0; !mapped && r < n_ranges; r++)
        mapped = groups[i] >= inside[r] && groups[i] - inside[r] < count[r];
      if (mapped)
        out[(*n_out)++] = groups[i];
      else
        {
          static int warned;
          if (!__atomic_exchange_n (&warned, 1, __ATOMIC_SEQ_CST))
            ib_warn ("supplementary group %lu is not mapped in the user namespace: steps run "
                     "without it",
                     (unsigned long) groups[i]);
        }
    }
  return out;
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
  if (!rfs_is_dir (rootfs))
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
      /* /etc's times are put back with the rest (rfs_made_remove_all) */
      cleanup_free char *etc = ib_path_join (rootfs, "etc");
      cleanup_close int efd = open (etc, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (efd >= 0)
        rfs_made_note_parent (&made, efd);
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
        rfs_made_note_parent (&made, rfd);
        cleanup_free char *p = ib_path_join (rootfs, points[i]);
        if (mkdir (p, 0755) == 0)
          rfs_made_add (&made, p);
      }
  }
  struct extras x = { .ldcache_fd = -1 };
  int ret = prepare_extras (opts, rootfs, &made, &x, err);
  rfs_made_snapshot (&made);
  if (ret == 0)
    ret = run_in_sandbox (opts, mode, rootfs, envp, &x, exit_status, err);
  rfs_made_check (&made);
  if (x.ldconfig)
    restore_ldcache (opts, rootfs, &x);
  extras_free (&x);
  placeholder_remove (&placeholders[0]);
  placeholder_remove (&placeholders[1]);
  rfs_made_remove_all (&made); /* last: it puts back directory times */
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

  /* SINGLE mode: the step's chown calls are answered by a supervisor
   * thread, which gets the command's seccomp listener over this socket.
   * The thread starts after the fork: a thread running at fork time may
   * hold a lock the child then waits on forever (seen with ASan's
   * allocator, which gcc 12's runtime does not lock around fork). */
  cleanup_close int notify_w = -1;
  cleanup_close int notify_r = -1;
  ib_chown_notify_t *notify = NULL;
  if (mode == IB_USERNS_SINGLE)
    {
      int sv[2];
      if (socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        return ib_error_sys (err, errno, "sandbox: socketpair");
      notify_r = sv[0];
      notify_w = sv[1];
    }

  size_t n_groups = 0;
  cleanup_free gid_t *groups
      = mode == IB_USERNS_SINGLE ? NULL : mapped_groups (opts->groups, opts->n_groups, &n_groups);
  struct run_ctx ctx = {
    .opts = opts,
    .groups = groups,
    .n_groups = n_groups,
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
    .notify_w = notify_w,
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
      rfs_setup_parent_main (&ctx, me);
    }
  int slot = forward_slot_add (child);
  pthread_sigmask (SIG_SETMASK, &saved_mask, NULL);
  ib_error_t notify_err = NULL;
  if (notify_r >= 0 && ib_chown_notify_start (steal_fd (&notify_r), &notify, &notify_err) < 0)
    kill (child, SIGKILL); /* its chowns would wait for an answer nobody gives */

  close (steal_fd (&err_w));
  if (tail_w >= 0)
    close (steal_fd (&tail_w));
  if (notify_w >= 0)
    close (steal_fd (&notify_w));

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
  /* every process of the step is gone: no call is waiting */
  unsigned long chowns = ib_chown_notify_stop (notify);
  if (chowns > 0)
    ib_debug ("sandbox: %lu chown calls answered by the supervisor", chowns);
  if (notify_err)
    {
      ib_buf_free (&tail);
      ib_buf_free (&errmsg);
      return ib_error_propagate (err, &notify_err);
    }

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
        *exit_status = wait_errno ? -1 : rfs_status_to_code (status);
      return -1;
    }
  ib_buf_free (&errmsg);
  if (wait_errno)
    return ib_error_sys (err, wait_errno, "sandbox: waitpid");
  if (exit_status)
    *exit_status = rfs_status_to_code (status);
  return 0;
}

int
ib_rlimit_parse (const char *value, ib_rlimit_t *out, ib_error_t *err)
{
  static const struct
  {
    const char *name;
    int resource;
  } names[] = {
    { "core", RLIMIT_CORE },       { "cpu", RLIMIT_CPU },         { "data", RLIMIT_DATA },
    { "fsize", RLIMIT_FSIZE },     { "locks", RLIMIT_LOCKS },     { "memlock", RLIMIT_MEMLOCK },
    { "msgqueue", RLIMIT_MSGQUEUE }, { "nice", RLIMIT_NICE },     { "nofile", RLIMIT_NOFILE },
    { "nproc", RLIMIT_NPROC },     { "rss", RLIMIT_RSS },         { "rtprio", RLIMIT_RTPRIO },
    { "rttime", RLIMIT_RTTIME },   { "sigpending", RLIMIT_SIGPENDING },
    { "stack", RLIMIT_STACK },
  };
  memset (out, 0, sizeof *out);
  const char *eq = strchr (value, '=');
  size_t i = 0, n = sizeof names / sizeof *names;
  while (eq && i < n && (strlen (names[i].name) != (size_t) (eq - value)
                         || strncmp (names[i].name, value, (size_t) (eq - value)) != 0))
    i++;
  if (eq == NULL || i == n)
    return ib_error_set (err, EINVAL,
                         "--ulimit %s: expected NAME=SOFT[:HARD], NAME one of core, cpu, data, "
                         "fsize, locks, memlock, msgqueue, nice, nofile, nproc, rss, rtprio, "
                         "rttime, sigpending, stack",
                         value);
  rlim_t v[2];
  const char *p = eq + 1;
  for (int k = 0; k < 2; k++)
    {
      const char *end = strchr (p, ':');
      size_t len = end ? (size_t) (end - p) : strlen (p);
      char *stop = NULL;
      if ((len == 2 && !strncmp (p, "-1", 2)) || (len == 9 && !strncmp (p, "unlimited", 9)))
        v[k] = RLIM_INFINITY;
      else
        {
          errno = 0;
          unsigned long long x = strtoull (p, &stop, 10);
          if (len == 0 || !isdigit ((unsigned char) *p) || stop != p + len || errno)
            return ib_error_set (err, EINVAL, "--ulimit %s: a limit is a number, -1 or unlimited",
                                 value);
          v[k] = (rlim_t) x;
        }
      if (end == NULL)
        {
          if (k == 0)
            v[1] = v[0];
          break;
        }
      if (k == 1)
        return ib_error_set (err, EINVAL, "--ulimit %s: expected NAME=SOFT[:HARD]", value);
      p = end + 1;
    }
  if (v[1] != RLIM_INFINITY && (v[0] == RLIM_INFINITY || v[0] > v[1]))
    return ib_error_set (err, EINVAL, "--ulimit %s: the soft limit is above the hard one", value);
  out->resource = names[i].resource;
  out->name = names[i].name;
  out->soft = v[0];
  out->hard = v[1];
  return 0;
}
