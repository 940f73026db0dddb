/* builder/engine/mountspec.h — the mount options of RUN --mount (BuildKit's
 * Dockerfile reference, "RUN --mount") and of `imgbuild run`
 * (--mount, -v, --tmpfs), parsed into one shape.
 *
 *   type=bind (default) target=P [source=P] [from=STAGE] [rw|readwrite[=true]]
 *   type=cache target=P [id=ID] [sharing=shared|private|locked] [ro|readonly]
 *              [mode=0755] [uid=0] [gid=0] [from=STAGE [source=P]]
 *              (from=: the cache starts as a copy of STAGE's P, BuildKit's
 *              "base of the cache mount"; source= needs from=)
 *   type=tmpfs target=P [size=BYTES]
 *   type=secret [id=ID] [target=P] [env=NAME] [required[=true]] [mode=0400]
 *               [uid=0] [gid=0]: source= is id= (BuildKit's alias; both
 *               given is an error); id defaults to the target's last
 *               component, target to /run/secrets/ID unless env= is given
 *               (then no file, only the variable, unless target= is given
 *               too); at least one of id, source, target is needed
 *   type=ssh [id=default] [target=P] [required[=true]] [mode=0600] [uid=0]
 *            [gid=0]: target stays NULL when not given (the RUN's N-th ssh
 *            mount goes to /run/buildkit/ssh_agent.N, runspec.h)
 *   dst= and destination= are target=; src= is source=.
 *   z and Z (buildah's SELinux relabel options) are accepted and do
 *   nothing: imgbuild applies no SELinux labels (`relabel` records them).
 */
#ifndef IB_BUILDER_MOUNTSPEC_H
#define IB_BUILDER_MOUNTSPEC_H

#include "common/error.h"
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

typedef enum
{
  IB_MSPEC_BIND = 0,
  IB_MSPEC_CACHE,
  IB_MSPEC_TMPFS,
  IB_MSPEC_SECRET, /* a build secret (--secret), a read-only file and/or a variable */
  IB_MSPEC_SSH,    /* an ssh agent socket (--ssh) */
} ib_mspec_type_t;

typedef struct ib_mount_spec
{
  ib_mspec_type_t type;
  char *target;     /* in the sandbox, as written: a relative one is under the
                       step's working directory (RUN --mount, as BuildKit);
                       never NULL but for type=secret with env= and type=ssh
                       (see above) */
  char *source;     /* bind: path in the context / stage / host; NULL = "."
                       cache: path in `from` that the new cache copies */
  char *from;       /* bind: stage name or index; NULL = the build context;
                       cache: the stage whose tree a new cache starts from */
  bool rw;          /* bind: rw/readwrite given (RUN: writes go to a copy and
                       are discarded, as BuildKit; without it RUN's bind
                       mounts are read-only) */
  bool readonly;    /* ro/readonly given (`imgbuild run`: binds are
                       writable unless this is set, as Docker's) */
  char *id;         /* cache: NULL = the target; secret: never NULL (the
                       default filled in); ssh: never NULL ("default") */
  char *sharing;    /* cache: "shared" (default), "private" or "locked" */
  mode_t mode;      /* cache: mode of a new cache directory (default 0755);
                       secret: of the file (0400); ssh: of the socket (0600) */
  uid_t uid;        /* cache: owner of a new cache directory (default 0:0);
                       secret, ssh: owner of the file or socket (0:0) */
  gid_t gid;
  char *env;        /* secret: env=NAME, the variable the step gets the secret
                       in (that RUN only), or NULL */
  bool required;    /* secret, ssh: required[=true]: the step fails when the
                       build has no such secret or agent (else the mount is
                       left out) */
  bool relabel;     /* z or Z given (ignored; a note says so) */
  char *size;       /* tmpfs: size= as written (bytes; k/m/g/t suffixes as the
                       kernel's tmpfs takes them, or N%), checked by
                       ib_tmpfs_size_parse; or NULL */
} ib_mount_spec_t;

/* The most a tmpfs size= may say: 1 PiB.  Far above any machine's memory,
 * far below 2^64, where the kernel's parser wraps (size=18446744073709551616
 * reads as 0, which tmpfs takes as "no limit"). */
#define IB_TMPFS_SIZE_MAX ((uint64_t) 1 << 50)

/* Check a tmpfs size= value: decimal digits, optionally one suffix k, m, g
 * or t (any case, powers of 1024, as the kernel reads them), 1 byte to
 * IB_TMPFS_SIZE_MAX, checked for overflow; or N% with N 1 to 100.  0 is
 * refused (tmpfs reads it as unlimited: leave size= out for the default,
 * half of memory).  On success *norm (caller frees) is the value to give
 * the kernel.  Errors: EINVAL "bad size 'V' (...)", ERANGE "size 'V' is out
 * of range (...)"; callers prefix the option ("--mount=...", "--tmpfs ..."). */
int ib_tmpfs_size_parse (const char *v, char **norm, ib_error_t *err);

/* Parse one --mount value (comma-separated key=value; a bare key is
 * key=true).  `shown` names the flag in errors, e.g. "--mount=type=foo":
 * "--mount=type=foo: unknown mount type 'foo' (bind, cache, tmpfs, secret,
 * ssh)".
 * *out is filled (free with ib_mount_spec_clear) only on success. */
int ib_mount_spec_parse (const char *value, ib_mount_spec_t *out, ib_error_t *err);

/* `imgbuild run -v SRC:DST[:ro|:rw]` (Docker's short form, host paths only:
 * SRC must be absolute or start with "." ). */
int ib_mount_spec_parse_volume (const char *value, ib_mount_spec_t *out, ib_error_t *err);

/* `imgbuild run --tmpfs DST[:size=N]`. */
int ib_mount_spec_parse_tmpfs (const char *value, ib_mount_spec_t *out, ib_error_t *err);

void ib_mount_spec_clear (ib_mount_spec_t *m);

#endif
