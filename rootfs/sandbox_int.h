/* rootfs/sandbox_int.h — what the sandbox's files share (sandbox.c,
 * sandbox_proc.c, sandbox_tree.c); not for other modules.
 */
#ifndef IB_ROOTFS_SANDBOX_INT_H
#define IB_ROOTFS_SANDBOX_INT_H

#include "common/error.h"
#include "rootfs/sandbox.h"
#include "rootfs/userns.h"
#include <signal.h>
#include <stdbool.h>
#include <sys/ioctl.h>
#include <sys/types.h>

#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define HOSTNAME "imgbuild"
/* Our files inside the /dev tmpfs: never part of the rootfs, gone with the
 * mount namespace. */
#define PRIVATE_DIR "/dev/.imgbuild"
#define APT_CONF PRIVATE_DIR "/apt.conf"

static const int forwarded_signals[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT };
#define N_FORWARDED (sizeof forwarded_signals / sizeof forwarded_signals[0])

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

/* Everything the children need, computed before the first fork so that the
 * children allocate as little as possible. */
struct run_ctx
{
  const ib_sandbox_opts_t *opts;
  struct prepared_mount *mounts; /* sorted by depth of target */
  size_t n_mounts;
  const char *ldconfig;  /* path of ldconfig inside the rootfs, or NULL */
  int ldcache_fd;        /* memfd that gets ldconfig's /etc/ld.so.cache, or -1 */
  ib_userns_mode_t mode;
  const gid_t *groups; /* opts->groups mapped in the namespace (setgroups) */
  size_t n_groups;
  char *rootfs;       /* realpath of opts->rootfs */
  char **envp;        /* opts->env, plus APT_CONFIG in SINGLE mode */
  char **candidates;  /* paths to try for argv[0], inside the rootfs */
  const char *cwd;
  int err_w;          /* close-on-exec pipe for setup / exec failures */
  int tail_w;         /* -1, or stdout+stderr of the command */
  int console_w;      /* opts->tty: socket that gets the pty's master, else -1 */
  int notify_w;       /* SINGLE mode: socket that gets the command's seccomp
                         listener (rootfs/chown_notify.h), else -1 */
  struct winsize ws;  /* opts->tty: our terminal's size (0x0: unknown) */
};

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

/* --- sandbox_tree.c ------------------------------------------------------ */

/* A directory, and not a symlink to one. */
bool rfs_is_real_dir (const char *path);

/* The made list (imgbuild's side, before and after the run).
 * rfs_made_note_dir: call before making something in directory fd `dfd`
 * (its times are put back afterwards; `always`: even when the command
 * changed it); rfs_made_note_parent: the same, not always;
 * rfs_made_add: record `path` (just made: an empty directory or file, or
 * a symlink); rfs_made_snapshot: just before the run, the directories'
 * times as they are left; rfs_made_check: just after it, a directory the
 * command changed keeps its new time; rfs_made_remove_all: remove what is
 * still as made, deepest first, put the times back, free the list. */
void rfs_made_note_dir (struct made_list *l, int dfd, bool always);
void rfs_made_note_parent (struct made_list *l, int dfd);
void rfs_made_snapshot (struct made_list *l);
void rfs_made_check (struct made_list *l);
void rfs_made_add (struct made_list *l, const char *path);
void rfs_made_remove_all (struct made_list *l);

/* Host path of an O_PATH fd (it lies inside the rootfs); caller frees,
 * NULL on failure. */
char *rfs_fd_path (int fd);

/* qsort order of struct prepared_mount: by depth of target, shallow first. */
int rfs_mount_cmp_depth (const void *a, const void *b);

/* Resolve (creating what is missing, recorded in `made`) the target of
 * mount `m` in the rootfs (rootfd, its path rootfs) into *pm.  Errors
 * name the mount. */
int rfs_prepare_mount (int rootfd, const char *rootfs, const ib_mount_t *m,
                       struct prepared_mount *pm, struct made_list *made, ib_error_t *err);
/* Make symlink `l` in the rootfs where nothing is at its path (recorded
 * in `made`). */
int rfs_make_symlink (int rootfd, const char *rootfs, const ib_sandbox_symlink_t *l,
                      struct made_list *made, ib_error_t *err);

/* In P1: build the mount tree and pivot_root into it. */
int rfs_setup_rootfs (const struct run_ctx *ctx, ib_error_t *err);

/* --- sandbox_proc.c ------------------------------------------------------ */

/* A wait status as an exit code: the code, 128+signal, else 125. */
int rfs_status_to_code (int status);

/* The setup parent S, in the child imgbuild forked: unshares the
 * namespaces, forks P1 and exits with its status.  Failures go to
 * ctx->err_w. */
void __attribute__ ((noreturn)) rfs_setup_parent_main (const struct run_ctx *ctx,
                                                       pid_t imgbuild_pid);

#endif
