/* builder/engine/runspec.h — what a command asks of its sandbox besides its
 * argv, typed: the flags of a recipe's RUN (BuildKit's Dockerfile
 * reference: "RUN --mount", "RUN --network", "RUN --security", and
 * imgbuild's --device) and the options of `imgbuild run` (-v, --mount,
 * --tmpfs, --device, --network), in one shape (ib_run_spec_t), and the one
 * function that turns that shape into the sandbox's mounts, devices,
 * network and environment (ib_run_spec_sandbox), used by both.
 *
 * The recipe parser keeps flags as written (unexpanded strings,
 * builder/engine/recipe.h); ib_run_spec_from_instr expands and parses them
 * once per step, and every later reader (the cache key, the stages a RUN
 * mounts, the mounts themselves) reads the typed spec.
 */
#ifndef IB_BUILDER_RUNSPEC_H
#define IB_BUILDER_RUNSPEC_H

#include "builder/engine/mountspec.h"
#include "builder/engine/recipe.h"
#include "builder/engine/secrets.h"
#include "common/error.h"
#include "oci/store.h"
#include "rootfs/gpu.h"
#include "rootfs/sandbox.h"

#include <stdbool.h>
#include <stddef.h>

typedef enum
{
  IB_RUN_NET_DEFAULT = 0, /* the sandbox's default: the host's network */
  IB_RUN_NET_HOST,
  IB_RUN_NET_NONE,        /* a network namespace of its own, loopback only */
} ib_run_network_t;

typedef struct ib_run_spec
{
  ib_mount_spec_t *mounts; /* in the order given */
  char **shown;            /* per mount, how the user wrote it, for messages:
                              "--mount=type=cache,target=/c" (RUN: expanded),
                              "-v /h:/c", "--tmpfs /t" */
  size_t n_mounts;
  char **devices;          /* --device requests (CDI names, nvidia.com/gpu=...),
                              expanded, in order; NULL-terminated or NULL */
  ib_run_network_t network;
  char **flags;            /* RUN: every flag, expanded, "--name=value", in the
                              order written (the cache key's text); NULL-terminated
                              or NULL */
} ib_run_spec_t;

/* Expands one word of a step (the engine's ARG/ENV scope); *out caller-owned. */
typedef int (*ib_run_expand_fn) (void *ctx, const char *word, char **out, ib_error_t *err);

/* RUN's flags, checked, expanded and typed into *out (zeroed first; free
 * with ib_run_spec_clear, also after a failure).
 *  1. checked as written, before any expansion: --security=sandbox is the
 *     only --security (ENOTSUP "--security=insecure is not supported:
 *     ..."), --network is host, none or default (EINVAL), flags other than
 *     --mount, --network, --device, --security fail with ENOTSUP "--X=V is
 *     not supported yet";
 *  2. every flag is expanded with `expand` (its errors as they come) into
 *     out->flags; --mount values are parsed (ib_mount_spec_parse: EINVAL
 *     naming the --mount=VALUE); --device values go to out->devices.
 * With `lenient` (a preview from outside the step's scope: which stages a
 * RUN mounts, before the stage has run), step 1 is skipped and a --mount or
 * --device that fails to expand or parse is left out, no error; -1 is then
 * never returned. */
int ib_run_spec_from_instr (const ib_instr_t *in, ib_run_expand_fn expand, void *ctx,
                            bool lenient, ib_run_spec_t *out, ib_error_t *err);

/* Append one parsed mount (taken: *ms is zeroed) and how it was written. */
void ib_run_spec_add_mount (ib_run_spec_t *spec, ib_mount_spec_t *ms, const char *shown);

void ib_run_spec_clear (ib_run_spec_t *spec);

/* What the mounts of a spec are made of while the command runs: strings
 * the sandbox options point into, temp copies (removed by
 * ib_run_mounts_free), held cache-mount locks, device edits. */
typedef struct ib_run_mounts
{
  ib_mount_t *v;
  size_t n;
  char **strings;        /* owned; v[] points into them */
  char **copies;         /* temp trees under the store's tmp/, removed at free */
  int *locks;            /* flock()ed cache-mount lock fds, closed at free */
  size_t n_locks;
  ib_gpu_edits_t gpu;
  ib_secret_run_t *secrets; /* type=secret files, type=ssh sockets and their relay */
  char **env;            /* when a secret or ssh mount sets variables: the
                            command's environment (so->env), the caller's
                            *env plus those, wiped at free; else NULL */
} ib_run_mounts_t;

/* Where a bind mount's host source comes from.  `shown` is the mount as
 * written (for messages).  On success *source is the host path (caller-owned);
 * the callback may make a temp copy and register it with
 * ib_run_mounts_keep_copy.  RUN: the build context or an earlier stage;
 * `imgbuild run`: a host path. */
typedef int (*ib_run_bind_fn) (void *ctx, const ib_mount_spec_t *ms, const char *shown,
                               ib_run_mounts_t *res, char **source, ib_error_t *err);

typedef struct ib_run_env
{
  ib_store_t *store;        /* cache mounts (ib_store_cache_mount_dir) */
  const char *cwd;          /* a relative mount target is under it, as BuildKit's;
                               NULL: refused, EINVAL "mount target T: must be an
                               absolute path" (docker run's rule) */
  bool bind_writable;       /* a bind mount is writable unless ro (docker run);
                               false: read-only unless rw (RUN; the callback gives
                               rw binds a copy) */
  ib_run_bind_fn bind;
  void *bind_ctx;
  const ib_mount_t *extra;  /* mounts placed after the spec's, before the devices'
                               (RUN's heredoc script); strings the caller's */
  size_t n_extra;
  char *const *cdi_spec_dirs; /* NULL: the CDI defaults (rootfs/gpu.h) */
  const ib_secrets_t *secrets; /* --secret, --ssh (NULL: none given) */
} ib_run_env_t;

/* The one way from a spec to the sandbox: fills so->mounts and n_mounts
 * (the spec's mounts in order, then `extra`, then the devices'), the
 * devices' symlinks and ldconfig, so->network_none, and so->env = *env
 * after setting the devices' variables in *env (replacing the same names)
 * and HOME as runc does (from so->rootfs's /etc/passwd for so->uid, when
 * *env lacks it).  So so->rootfs and so->uid must be set before.
 *  - tmpfs: mode 1777, size= as given;
 *  - cache: the store's directory for id= (default the target), made with
 *    mode=, uid=, gid= when new; sharing=locked and private wait for an
 *    exclusive lock on it (the store's lock file) and hold it until
 *    ib_run_mounts_free ("waiting for the cache mount ID" is shown);
 *  - bind: env->bind gives the source; read-only unless writable (see
 *    bind_writable);
 *  - secret: the bytes of env->secrets' id= (secrets.h), in a file of
 *    mode=, uid=, gid= outside the store bound read-only on the target,
 *    and/or with env= the variable NAME=bytes in so->env only (never in
 *    *env, so never in what a caller prints or keeps);
 *  - ssh: a socket relayed to the agent of id= (secrets.h), mode=, uid=,
 *    gid=, on the target (default /run/buildkit/ssh_agent.N, N counting
 *    the spec's ssh mounts from 0); the first sets SSH_AUTH_SOCK to its
 *    target in so->env unless *env has it, even when it is left out
 *    (BuildKit's llb);
 *  - a secret or ssh id the build lacks: with required, ENOENT "SHOWN:
 *    secret ID: not given (--secret id=ID,src=FILE or id=ID,env=VAR)"
 *    (ssh: "... ssh agent ID: not given (--ssh ID=SOCKET)"); without it
 *    the mount is left out, as in BuildKit.
 * The devices are resolved with the environment *env holds on entry
 * (NVIDIA_VISIBLE_DEVICES ...; ib_gpu_resolve_all).  On failure -1 with
 * the error naming the mount ("SHOWN: cache directory D: ...") or device;
 * *res must still be freed.  so's pointers are into *res and *env: keep
 * both until the sandbox has run. */
int ib_run_spec_sandbox (const ib_run_spec_t *spec, const ib_run_env_t *env_opts, char ***env,
                         ib_sandbox_opts_t *so, ib_run_mounts_t *res, ib_error_t *err);

/* Keep `path` (a temp tree, taken) for removal by ib_run_mounts_free. */
void ib_run_mounts_keep_copy (ib_run_mounts_t *res, char *path);

/* Release what the mounts hold: remove the copies (errors reported as
 * warnings), close the locks, free the strings and the device edits. */
void ib_run_mounts_free (ib_run_mounts_t *res);

#endif
