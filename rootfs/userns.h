/* rootfs/userns.h — one user namespace for the whole process.
 *
 * ib_userns_enter puts the calling process into a new user namespace once,
 * before any rootfs work, so that unpacking, build steps and layer writing
 * all see the same ids:
 *   IB_USERNS_ROOT   real root: identity map of 0..4294967294 (uid and gid)
 *   IB_USERNS_MAP    unprivileged with /etc/subuid and /etc/subgid ranges:
 *                    0 -> own id, 1..N -> the range, written by newuidmap /
 *                    newgidmap
 *   IB_USERNS_SINGLE unprivileged without ranges: own id -> 0 only
 *                    (setgroups denied); the sandbox then turns on seccomp
 *                    root emulation
 * The maps are written by a helper child that stays in the parent namespace.
 * ROOT maps every id the current namespace has (in the initial namespace
 * "0 0 4294967295"; inside a container, that container's ranges).
 */
#ifndef IB_ROOTFS_USERNS_H
#define IB_ROOTFS_USERNS_H

#include "common/error.h"

typedef enum
{
  IB_USERNS_AUTO = 0,
  IB_USERNS_ROOT,
  IB_USERNS_MAP,
  IB_USERNS_SINGLE,
} ib_userns_mode_t;

/* Enter the namespace (AUTO picks ROOT when euid 0, MAP when the user has
 * ranges in both /etc/subuid and /etc/subgid and newuidmap/newgidmap exist,
 * else SINGLE).  Afterwards the process has uid/gid 0 in the namespace.
 * Calling it again is a no-op returning the mode in force.
 *
 * Must be called before the process starts any thread (the kernel refuses
 * unshare(CLONE_NEWUSER) in a multithreaded process: EINVAL, reported with
 * that hint).  MAP uses the user's first range in each file (matched by
 * name or numeric uid) and maps 0 -> own id, 1..count -> the range.  The
 * IMGBUILD_USERNS environment variable is the caller's business: the
 * requested mode is the argument.  Requesting ROOT without euid 0 or MAP
 * without ranges fails.  When the map helper fails (e.g. newuidmap's
 * stderr is in the message) the process is left in a namespace without
 * maps: report the error and exit. */
int ib_userns_enter (ib_userns_mode_t requested, ib_userns_mode_t *mode_in_force,
                     ib_error_t *err);
/* The mode ib_userns_enter (requested) would put the process in (the mode
 * in force when already entered), without entering: the same checks and
 * errors (MAP without ranges, ROOT without euid 0).  For a caller that
 * enters late (a build that only reads its cache never enters) but must
 * know the mode early. */
int ib_userns_plan (ib_userns_mode_t requested, ib_userns_mode_t *mode, ib_error_t *err);
/* Why AUTO chose SINGLE in the last plan, as a clause ("user NAME has no
 * subordinate id range in /etc/subuid and /etc/subgid", "newuidmap and
 * newgidmap are not installed (Debian's uidmap package)"); NULL when AUTO
 * chose another mode or was not asked.  Static. */
const char *ib_userns_single_reason (void);
/* Mode in force (AUTO when not entered yet). */
ib_userns_mode_t ib_userns_mode (void);
const char *ib_userns_mode_name (ib_userns_mode_t m);

#endif
