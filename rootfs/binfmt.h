/* rootfs/binfmt.h — can this host run another platform's binaries:
 * natively, or through a binfmt_misc handler (qemu-user) the kernel
 * starts for them (Documentation/admin-guide/binfmt-misc.rst).
 *
 * The check is the kernel's own: an ELF header of the platform is matched
 * against every registered "magic" entry's offset, magic and mask, as
 * fs/binfmt_misc.c does at exec time.  A handler serves a sandboxed step
 * when it is enabled and either has the F flag (fix-binary: the
 * interpreter was opened when it was registered, so it is found from any
 * root) or its interpreter path exists inside the step's root filesystem.
 * The handlers of the initial user namespace serve a step's user namespace
 * too: the sandbox mounts no binfmt_misc of its own.
 */
#ifndef IB_ROOTFS_BINFMT_H
#define IB_ROOTFS_BINFMT_H

#include "common/error.h"

/* Where the kernel shows its handlers. */
#define IB_BINFMT_DIR "/proc/sys/fs/binfmt_misc"

/* Whether this host runs os/arch[/variant] binaries (OCI platform names,
 * normalized as ib_platform_parse gives them) with `rootfs` as "/" (NULL:
 * a handler without the F flag counts as usable, the root being unknown).
 * 0: natively (*handler NULL) or through a handler (*handler: its name
 * under `binfmt_dir`, e.g. "qemu-aarch64", and its interpreter, caller
 * frees).  -1 with ENOEXEC when it cannot, the message naming the missing
 * piece: no binfmt_misc mounted at `binfmt_dir`, binfmt_misc disabled, no
 * handler for the platform's ELF machine (install Debian's
 * qemu-user-static and binfmt-support), the handler disabled, or its
 * interpreter absent from the root filesystem without the F flag;
 * ENOTSUP for an OS other than linux or an architecture whose ELF header
 * is not known here.  `binfmt_dir`: IB_BINFMT_DIR except in tests. */
int ib_binfmt_check (const char *binfmt_dir, const char *os, const char *arch,
                     const char *variant, const char *rootfs, char **handler, ib_error_t *err);

#endif
