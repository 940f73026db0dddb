/* rootfs/layer.h — detect what a build step changed and write it as a
 * reproducible layer (image-spec layer.md "Representing Changes").
 *
 * Before a step the builder scans the rootfs (ib_fs_scan); after it,
 * ib_layer_write_diff compares the tree with the scan by (type, mode, uid,
 * gid, size, mtime, ctime, inode, link target) and writes a tar with the
 * added/changed entries and ".wh." whiteouts for deletions.  A directory
 * whose own metadata is unchanged is emitted only as the parent of changed
 * entries.  Entries are sorted by path bytes, PAX format, uid/gid as seen in
 * the namespace, no atime/ctime, mtimes clamped to SOURCE_DATE_EPOCH when
 * set, gzip with fixed settings and no name/mtime in the gzip header: same
 * tree -> same bytes.
 */
#ifndef IB_ROOTFS_LAYER_H
#define IB_ROOTFS_LAYER_H

#include "common/error.h"
#include "oci/digest.h"
#include <stdbool.h>
#include <stdint.h>

typedef struct ib_fs_scan ib_fs_scan_t;

/* Record the state of every entry under `rootfs`, skipping the paths in
 * `exclude` (NULL-terminated, relative like "proc", "dev", "sys"; their
 * contents are never part of a layer). */
int ib_fs_scan (const char *rootfs, char *const *exclude, ib_fs_scan_t **out, ib_error_t *err);
void ib_fs_scan_free (ib_fs_scan_t *s);

typedef struct ib_layer_result
{
  char diff_id[IB_DIGEST_LEN]; /* sha256 of the uncompressed tar */
  char digest[IB_DIGEST_LEN];  /* sha256 of the gzip blob */
  uint64_t size;               /* blob size in bytes */
  uint64_t entries;            /* tar entries written (0 = the step changed nothing) */
} ib_layer_result_t;

/* Compare `rootfs` now with `before` and write the tar+gzip to `out_path`
 * (created/truncated).  `sde` is SOURCE_DATE_EPOCH or -1. */
int ib_layer_write_diff (const char *rootfs, const ib_fs_scan_t *before, char *const *exclude,
                         const char *out_path, int64_t sde, ib_layer_result_t *res,
                         ib_error_t *err);

#endif
