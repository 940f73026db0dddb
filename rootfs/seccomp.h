/* rootfs/seccomp.h — the seccomp filter of a build step (libseccomp):
 * the deny list, and root emulation for a namespace with a single id.
 */
#ifndef IB_ROOTFS_SECCOMP_H
#define IB_ROOTFS_SECCOMP_H

#include "common/error.h"
#include <stdbool.h>

/* Install the seccomp filter in the calling process: the deny list always
 * (kexec, module loading, keyctl family, open_by_handle_at, bpf, mount family,
 * nested user namespaces via clone/unshare, ...), plus root emulation when
 * `root_emulation` (chown family, setuid/setgid family, setgroups and mknod
 * of device nodes return success without effect).  Exposed for tests.
 * Denied calls fail with EPERM; clone3 fails with ENOSYS (glibc then falls
 * back to clone, whose flags the filter can check).  Sets NO_NEW_PRIVS.
 * On x86_64 the filter also covers i386 and x32 binaries.  Irreversible:
 * call it in a child process. */
int ib_seccomp_install (bool root_emulation, ib_error_t *err);

/* The same with root emulation, except that the chown family (chown,
 * fchown, lchown, fchownat and their i386 variants) waits for an answer
 * from a supervisor (seccomp user notification, SECCOMP_RET_USER_NOTIF):
 * *listener gets the close-on-exec notification fd to pass to it
 * (rootfs/chown_notify.h), which the caller must not keep across exec:
 * the calls then wait only until every copy of it is closed, and fail
 * with ENOSYS after that.  Where libseccomp's API level is 6 (the kernel
 * can let a notified call continue) the stat of an open file (fstat;
 * newfstatat and statx with AT_EMPTY_PATH) is sent too.  On a kernel or
 * libseccomp without user
 * notification *listener is -1 and the family is answered 0, as by
 * ib_seccomp_install (true). */
int ib_seccomp_install_supervised (int *listener, ib_error_t *err);

#endif
