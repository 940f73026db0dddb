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
 *
 * Details of the bytes written: entries sorted by strcmp of their path
 * (without the trailing "/" that directory names carry in the tar); names
 * relative ("usr/bin/x", "usr/bin/"), written as the bytes on disk whatever
 * the locale (pax hdrcharset=BINARY where a name is not plain ASCII); plain
 * ustar headers unless a field needs a pax record (long names, big ids);
 * mtimes in whole seconds; uname/gname empty; files of one inode (nlink > 1)
 * among the entries of the layer: the first path in sorted order carries the
 * data, the others are hardlink entries to it; whiteouts are empty regular
 * files "DIR/.wh.NAME", mode 0, uid/gid 0, mtime SOURCE_DATE_EPOCH or 0,
 * only for the topmost deleted path; sockets are never part of a layer;
 * tar blocks of 10240 bytes; gzip level 6 (zlib), header OS byte 3 (Unix).
 */
#ifndef IB_ROOTFS_LAYER_H
#define IB_ROOTFS_LAYER_H

#include "common/error.h"
#include "oci/digest.h"
#include <stdbool.h>
#include <stdint.h>

typedef struct ib_fs_scan ib_fs_scan_t;

/* Record the state of every entry under `rootfs` (not following symlinks;
 * the rootfs directory itself is not an entry), skipping the paths in
 * `exclude` (NULL-terminated, relative like "proc", "dev", "sys"; a leading
 * "/" or "./" and trailing "/" are ignored; neither the path nor anything
 * under it is recorded, and such contents are never part of a layer).
 * Directories we own but may not read (rootless, mode 0000) are opened by
 * granting u+rx for the time of the read.  Caller frees *out with
 * ib_fs_scan_free. */
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
 * (created/truncated, mode 0644, not fsynced: commit it to the store).
 * `before` may be NULL: every entry counts as added (a layer of the whole
 * tree).  Entries of `before` under `exclude` are ignored too (no whiteouts
 * for them).  `sde` is SOURCE_DATE_EPOCH or -1; mtimes later than `sde` are
 * written as `sde`.  res->diff_id, digest and size are computed in the same
 * single pass that writes the file; res->entries == 0 means nothing changed
 * (the file then holds an empty tar).  A file that shrinks while it is read
 * is an error. */
int ib_layer_write_diff (const char *rootfs, const ib_fs_scan_t *before, char *const *exclude,
                         const char *out_path, int64_t sde, ib_layer_result_t *res,
                         ib_error_t *err);

#endif
