/* rootfs/unpack.h — apply image layers to a directory (image-spec layer.md)
 * and keep unpacked snapshots per chain id.
 *
 * Safety: every path is resolved beneath the target directory fd with
 * openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS) (fallback: component-wise
 * openat with O_NOFOLLOW where openat2 is missing).  Entry names with ".."
 * components or absolute names are rejected; symlinks are created as written
 * but never followed while unpacking; hardlink targets must resolve inside.
 * Nothing outside the target is ever created, changed or read.
 */
#ifndef IB_ROOTFS_UNPACK_H
#define IB_ROOTFS_UNPACK_H

#include "common/error.h"
#include "oci/digest.h"
#include "oci/store.h"
#include <stdbool.h>
#include <stdint.h>

typedef struct ib_unpack_stats
{
  uint64_t entries;      /* tar entries applied */
  uint64_t bytes;        /* uncompressed bytes read */
  uint64_t skipped;      /* device nodes etc. skipped with a warning */
} ib_unpack_stats_t;

/* Apply one layer blob (`layer_path`: tar, tar+gzip or tar+zstd, detected by
 * magic bytes, not by media type) onto directory `target`.  Whiteouts
 * (".wh.NAME") delete NAME; opaque whiteouts (".wh..wh..opq") empty the
 * directory of what lower layers put there; hardlinks, symlinks, modes
 * (incl. setuid/setgid/sticky), mtimes are applied; ownership is applied
 * with lchown and silently kept as the caller's when the id is not mapped
 * (EINVAL/EPERM); device nodes that cannot be created are skipped with a
 * warning.  `diff_id` (may be NULL) receives the sha256 of the uncompressed
 * tar stream, computed while unpacking.  Errors name the entry. */
int ib_unpack_layer (const char *layer_path, const char *target, char diff_id[IB_DIGEST_LEN],
                     ib_unpack_stats_t *stats, ib_error_t *err);

/* Make `dest` (must not exist) a rootfs of the stored image whose layers are
 * `layer_digests` (blobs in the store) with `diff_ids` from its config.
 * Uses <store>/snapshots/<chainid> of the longest already-unpacked prefix,
 * unpacks the rest, verifies each diff_id, and records the new top snapshot
 * (temp dir + rename).  The snapshot is copied to dest (reflink where the
 * filesystem can), never shared, so a build may modify dest freely. */
int ib_rootfs_prepare (ib_store_t *store, char *const *layer_digests, char *const *diff_ids,
                       const char *dest, ib_error_t *err);

/* Copy a tree (cp -a semantics: modes, owners where permitted, mtimes,
 * symlinks as links, hardlinks kept within the tree).  `dst` must not exist. */
int ib_copy_tree (const char *src, const char *dst, ib_error_t *err);

#endif
