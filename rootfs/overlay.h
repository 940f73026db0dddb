/* rootfs/overlay.h — copy-free rootfs trees: overlayfs mounts on the
 * store's snapshots, frozen steps kept as layered snapshots
 * (<store>/snapshots/<chainid>.ovl), read-only views of lower layers.
 * docs/design.md ("Copy-free trees") says why and how.
 */
#ifndef IB_ROOTFS_OVERLAY_H
#define IB_ROOTFS_OVERLAY_H

#include "common/error.h"
#include "oci/store.h"
#include <stdbool.h>

/* Copy-free trees.  ib_rootfs_allow_overlay (true) lets this process make
 * private rootfs trees as overlayfs mounts instead of copies (build and run
 * do; unpack, whose result the user keeps, does not; IMGBUILD_OVERLAY=0
 * turns it off).  The process must have its own mount namespace (it gets
 * one with the user namespace, ib_userns_enter), so the mounts vanish
 * with it.
 *
 * ib_rootfs_overlay_from: make `dest` (absent or an empty directory) an
 * overlay whose lower layers are `src` (a snapshot; or, when src is itself
 * such an overlay, its upper directory over its own lower layers, so that
 * stacks stay one mount deep) and whose upper and work directories are in
 * `dest`.ovl/.  src must not change while dest exists.  Returns 1 when
 * mounted, 0 when overlayfs is not allowed or not usable (the first
 * failure turns it off for the process; the caller copies instead), -1 on
 * an error of its own (errno status, the path named).
 *
 * ib_rootfs_remove: remove a rootfs made by ib_rootfs_prepare, ib_copy_tree
 * or ib_rootfs_overlay_from: unmounted first when an overlay, with its
 * .ovl directory.  ib_rootfs_is_overlay: whether `dest` is such an overlay
 * (rename() of it fails: copy it instead). */
void ib_rootfs_allow_overlay (bool on);
int ib_rootfs_overlay_from (const char *src, const char *dest, ib_error_t *err);
int ib_rootfs_remove (const char *dest, ib_error_t *err);
bool ib_rootfs_is_overlay (const char *dest);

/* ib_rootfs_freeze: make the changes of overlay tree `dest` (its upper
 * directory) the layered snapshot STORE/snapshots/<chain_hex>.ovl/ (upper/
 * plus a `lowers` file naming the snapshots under it), and mount dest again
 * as an overlay on it with an empty upper directory: the tree's content is
 * unchanged, nothing is copied, and a later build that needs the tree of
 * chain id `chain_hex` (hex, no algorithm) mounts it instead of unpacking
 * layers (ib_rootfs_prepare).  dest must not be in use (no process inside
 * it, no mount under it).  Returns 1 when frozen; 0 when dest is not an
 * overlay, a snapshot of that chain exists, a lower layer is not a snapshot
 * (a stage stacked on another stage's tree) or the stack would be too deep:
 * dest is left as it was; -1 on an error, after which dest may be
 * unmounted (the caller removes it with ib_rootfs_remove). */
int ib_rootfs_freeze (ib_store_t *store, const char *dest, const char *chain_hex, ib_error_t *err);

/* ib_rootfs_overlay_clean: whether `dest` is an overlay tree made here
 * (ib_rootfs_overlay_from, ib_rootfs_prepare, ib_rootfs_freeze) whose
 * upper directory is empty: nothing changed since it was mounted or
 * frozen, so what a step does next is exactly what the upper directory
 * will hold (ib_fs_scan_overlay).  Then *upper (its path) and *lowers (the
 * lower layers, top first) are set, owned by the caller; else both NULL.
 *
 * ib_rootfs_lower_view: a directory showing the tree `lowers` make (top
 * first): the single lower itself (returns 0), or a read-only overlay of
 * them mounted on a new directory under <store>/tmp (returns 1; take it
 * away with ib_rootfs_lower_view_end (view, 1)).  *view is the caller's
 * to free.  -1 when no overlay could be mounted (errno status). */
bool ib_rootfs_overlay_clean (const char *dest, char **upper, char ***lowers);
int ib_rootfs_lower_view (ib_store_t *store, char *const *lowers, char **view, ib_error_t *err);
void ib_rootfs_lower_view_end (const char *view, int mounted);

#endif
