/* rootfs/resolve.h — resolve a path beneath a directory as if it were "/"
 * (layer unpack, the sandbox's mount targets).
 *
 * Symlinks met on the way, absolute or relative, and ".." stay inside the
 * root directory; magic links (/proc/self/...) are refused.  Nothing
 * outside the root is ever opened.
 */
#ifndef IB_ROOTFS_RESOLVE_H
#define IB_ROOTFS_RESOLVE_H

#include <stdbool.h>

/* O_PATH | O_DIRECTORY fd (close-on-exec, caller closes) of directory
 * `path` resolved beneath `rootfd` as if rootfd were "/": symlinks met on
 * the way, absolute or relative, and ".." stay inside; magic links
 * (/proc/self/...) are refused.  openat2(RESOLVE_IN_ROOT) where the kernel
 * has it, the same walk in user space where not.  Leading '/' ignored; ""
 * is rootfd itself.  -1 with errno (ENOENT, ENOTDIR, ELOOP...) on failure.
 * Used by the sandbox for mount targets and by the unpack for every
 * entry's parent directory. */
int ib_open_dir_in_root (int rootfd, const char *path);

/* Testing aid: `use` false makes path resolution skip openat2 and use the
 * user-space fallback (the one taken when the kernel lacks openat2).
 * Process-wide. */
void ib_unpack_set_openat2 (bool use);

#endif
