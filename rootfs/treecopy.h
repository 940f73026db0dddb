/* rootfs/treecopy.h — copy a directory tree (cp -a): snapshots, and the
 * private rootfs that stands in for an overlay where overlayfs is not
 * usable.
 */
#ifndef IB_ROOTFS_TREECOPY_H
#define IB_ROOTFS_TREECOPY_H

#include "common/error.h"

/* Copy a tree (cp -a semantics: modes, owners where permitted, mtimes,
 * symlinks as links, hardlinks kept within the tree, user.* and
 * security.capability xattrs where permitted; file data reflinked where the
 * filesystem can, else copy_file_range, else read/write).  `dst` must not
 * exist; on failure it is removed again.  Device nodes that cannot be created
 * (rootless) are skipped with a warning. */
int ib_copy_tree (const char *src, const char *dst, ib_error_t *err);

/* ib_copy_tree for a private rootfs standing in for an overlay
 * (ib_rootfs_overlay_from) where overlayfs is not usable: hard links are
 * not kept, each name becomes a file of its own, so that a step that
 * writes, links or removes one name of a file hard-linked in the lower
 * tree changes the same entries as overlayfs' copy-up does (and Docker's
 * overlay2): images do not depend on whether overlayfs was used. */
int ib_copy_rootfs (const char *src, const char *dst, ib_error_t *err);

#endif
