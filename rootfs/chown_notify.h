/* rootfs/chown_notify.h — a step's chown reaching the ownership record.
 *
 * In the single-id mode a step's chown/fchown/lchown/fchownat cannot give
 * any owner but 0:0 (only one id exists in the user namespace), yet dpkg,
 * useradd's callers and package scripts chown all the time and must
 * believe it worked.  The step's seccomp filter sends these calls to
 * imgbuild (ib_seccomp_install_supervised: seccomp user notification) and
 * the supervisor started here does what the kernel cannot: it resolves the
 * call's path as the step would (in the step's root and working directory,
 * following the last symlink or not as the call says), chowns where the
 * kernel allows it and records the owner on the file otherwise
 * (rootfs/owner.h: the `user.rootlesscontainers` xattr), clears the
 * set-user-ID and set-group-ID bits a chown clears, and answers the call
 * with 0 or the error a chown in the root mode would have given (ENOENT,
 * ENOTDIR, ELOOP, EBADF, EROFS...).
 *
 * The stat of an open file (fstat; newfstatat and statx with
 * AT_EMPTY_PATH) comes here too where the kernel can let a call continue:
 * a file with a record is answered with the kernel's stat and the recorded
 * ids (written into the caller's buffer through /proc/PID/mem), every other
 * call continues in the kernel unchanged.  So a tool that copies an owner
 * from an open file (useradd's rewrite of /etc/shadow) keeps it.  A stat
 * by path is not sent (there are far more of them) and shows 0:0.
 *
 * Nothing in it acts under the recorded ids: the supervisor runs with the
 * step's own credentials (root of the same user namespace), reaches files
 * only through the step's own root (/proc/PID/root, its thread chroot()ed
 * there) and writes nothing but the owner, the record and a stat result
 * into the buffer the caller passed (docs/security.md).
 */
#ifndef IB_ROOTFS_CHOWN_NOTIFY_H
#define IB_ROOTFS_CHOWN_NOTIFY_H

#include "common/error.h"

typedef struct ib_chown_notify ib_chown_notify_t;

/* Start the supervisor thread.  sock (taken: closed by ib_chown_notify_stop)
 * is the receiving end of an AF_UNIX socket over which the sandboxed
 * command sends its listener fd (ib_console_send) before it execs; until it
 * arrives, and after the peer closed without sending, the thread only
 * waits to be stopped.  -1 with err when no thread can be made. */
int ib_chown_notify_start (int sock, ib_chown_notify_t **out, ib_error_t *err);

/* Stop the thread (after the sandbox's processes are gone), join it and
 * close the listener and the socket; NULL is a no-op.  Returns how many
 * calls it answered (for tests and debug output). */
unsigned long ib_chown_notify_stop (ib_chown_notify_t *n);

#endif
