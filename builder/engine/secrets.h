/* builder/engine/secrets.h — build secrets and ssh agents: what
 * `--secret` and `--ssh` give a build (docker buildx build's options,
 * BuildKit's session secrets and ssh forwarding), and how a RUN's
 * `--mount=type=secret|ssh` gets them (runspec.h) without their bytes
 * reaching the store, a layer, a cache key or a log.
 *
 * A step's secrets are files in a private directory outside the store
 * (`$TMPDIR/imgbuild-secrets-XXXXXX`, mode 0700, with a tmpfs mounted on
 * it in imgbuild's own mount namespace, so the bytes live in memory and
 * vanish with the process), bound read-only onto their targets.  An ssh
 * mount is a socket there, relayed by a thread of imgbuild to the agent's
 * socket: the agent sees imgbuild's process as its peer, and the step's
 * socket has the mode and owner the mount asks for.  The relay is a
 * read-only agent, as BuildKit's: a step may list the keys and ask for
 * signatures, nothing else (agent_filter.h).  Both are gone when the step
 * ends (ib_secret_run_end).  docs/security.md tells the story.
 */
#ifndef IB_BUILDER_SECRETS_H
#define IB_BUILDER_SECRETS_H

#include "common/error.h"

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* BuildKit's limit on one secret (secretsprovider.MaxSecretSize): 500 KiB. */
#define IB_SECRET_MAX ((size_t) 500 * 1024)

/* One --secret: where the bytes of secret `id` come from. */
typedef struct ib_secret_source
{
  char *id;
  char *path; /* src=/source=: a file, read when a step mounts it; or NULL */
  char *env;  /* env=: a variable of imgbuild's environment; or NULL */
  int fd;     /* the file, opened by ib_secrets_check (with the caller's
                 own credentials and working directory, before the user
                 namespace drops supplementary groups), else -1 */
} ib_secret_source_t;

/* One --ssh: the agent socket forwarded as ssh id `id`. */
typedef struct ib_ssh_source
{
  char *id;
  char *socket; /* the agent's socket ($SSH_AUTH_SOCK for `default` and a
                   bare ID) */
} ib_ssh_source_t;

/* What a build was given.  A later --secret (or --ssh) of the same id
 * replaces the earlier one, as in buildx. */
typedef struct ib_secrets
{
  ib_secret_source_t *secrets;
  size_t n_secrets;
  ib_ssh_source_t *ssh;
  size_t n_ssh;
} ib_secrets_t;

/* Parse one --secret value, buildx's form: comma-separated
 * `id=ID`, `src=PATH` (`source=`), `env=VAR`, `type=file|env` (keys in
 * any case).  type=env with src= and no env= takes src as the variable's
 * name.  With neither src= nor env= (BuildKit's NewStore): the variable
 * ID when imgbuild's environment has it, else the file ID (relative to the
 * current directory).  Nothing is read here (ib_secrets_check).  Errors
 * (EINVAL): "--secret VALUE: id= is missing", "unknown key 'K'", "type
 * takes file or env, got 'T'", "expected KEY=VALUE, got 'F'". */
int ib_secrets_add_secret (ib_secrets_t *s, const char *value, ib_error_t *err);

/* Parse one --ssh value: `default`, `ID` (both: the agent at
 * $SSH_AUTH_SOCK) or `ID=SOCKET`.  buildx's key files and lists of paths
 * are refused (ENOTSUP naming them): imgbuild forwards agent sockets.
 * EINVAL "--ssh default: SSH_AUTH_SOCK is not set" when it is needed and
 * unset. */
int ib_secrets_add_ssh (ib_secrets_t *s, const char *value, ib_error_t *err);

/* Check every source as BuildKit does when a build starts: a file exists,
 * is a regular file of at most IB_SECRET_MAX bytes (it is opened here,
 * read when a step mounts it); a variable is set (buildx would give an
 * empty secret; imgbuild fails, as podman does); an ssh socket exists and
 * is a socket (its path made absolute).  Call it before entering the user
 * namespace.  Errors name the option:
 * "--secret id=tok: /path: No such file or directory". */
int ib_secrets_check (ib_secrets_t *s, ib_error_t *err);

const ib_secret_source_t *ib_secrets_find_secret (const ib_secrets_t *s, const char *id);
const ib_ssh_source_t *ib_secrets_find_ssh (const ib_secrets_t *s, const char *id);

/* The bytes of a secret (*data NUL-terminated beyond *len, caller frees;
 * wipe with ib_secret_free).  Errors name the id, never the bytes:
 * "secret tok: read /path: ...", EFBIG over IB_SECRET_MAX. */
int ib_secret_read (const ib_secret_source_t *src, char **data, size_t *len, ib_error_t *err);
/* Zero `len` bytes of `data`, then free it. */
void ib_secret_free (char *data, size_t len);

void ib_secrets_clear (ib_secrets_t *s);

/* One step's secret files and agent sockets (opaque). */
typedef struct ib_secret_run ib_secret_run_t;

/* A file holding `len` bytes of `data`, mode `mode`, owned by uid:gid (ids
 * in imgbuild's user namespace; in single-id mode only 0 exists and the
 * file stays 0:0, the step running as 0 there anyway), in *run's private
 * directory (made on first use).  *path (borrowed from *run) is its host
 * path, for a read-only bind mount. */
int ib_secret_run_file (ib_secret_run_t **run, const char *data, size_t len, mode_t mode,
                        uid_t uid, gid_t gid, const char **path, ib_error_t *err);

/* A socket in *run's private directory, mode/uid/gid as above, whose
 * connections are relayed to the agent at `agent` once ib_secret_run_start
 * has run: one request at a time, REQUEST_IDENTITIES and SIGN_REQUEST
 * forwarded, every other answered SSH_AGENT_FAILURE by the relay, a frame
 * over 256 KiB closing the connection (agent_filter.h).  *path as above. */
int ib_secret_run_ssh (ib_secret_run_t **run, const char *agent, mode_t mode, uid_t uid,
                       gid_t gid, const char **path, ib_error_t *err);

/* Start relaying the sockets (a thread; nothing when there are none). */
int ib_secret_run_start (ib_secret_run_t *run, ib_error_t *err);

/* Stop the relay, wipe and remove the files, unmount and remove the
 * directory; *run is freed and set to NULL.  Errors are warnings. */
void ib_secret_run_end (ib_secret_run_t **run);

#endif
