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
 * set, compression with fixed settings (gzip header without name or mtime;
 * zstd parameters fixed, multithreaded output independent of the thread
 * count): same tree -> same bytes.
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
 * xattrs user.* and security.capability as PAX SCHILY.xattr records,
 * sorted by name (others, e.g. security.selinux, are host details);
 * tar blocks of 10240 bytes.
 *
 * Compression (ib_layer_opts_t): gzip is rootfs/pgzip.h's block-parallel
 * stream (1 MiB blocks deflated on their own with the 32 KiB before them
 * as dictionary, one gzip member; bytes independent of the thread count);
 * levels 1-3 are ISA-L's igzip levels 1-3 (default 1: several times faster
 * than zlib), 0 and 4-9 zlib's levels (0 = stored); the gzip header is
 * always the 10 bytes 1f 8b 08 00 00000000 00 03 (no name, mtime 0, OS
 * Unix).  zstd: libzstd at the level (default 3), checksum on, nbWorkers =
 * opts->threads or the online CPUs (at least 1: zstd's multithreaded
 * format does not depend on the worker count).  none: the tar itself
 * (media type ...layer.v1.tar).  Bytes for a given level depend on the
 * library version (ISA-L, zlib, libzstd) as well.
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
 * under it is recorded, and such contents are never part of a layer;
 * "proc/" followed by "*" leaves out only what is under proc).
 * Directories we own but may not read (rootless, mode 0000) are opened by
 * granting u+rx for the time of the read.  Caller frees *out with
 * ib_fs_scan_free. */
int ib_fs_scan (const char *rootfs, char *const *exclude, ib_fs_scan_t **out, ib_error_t *err);
void ib_fs_scan_free (ib_fs_scan_t *s);
/* For cleanup_scan: frees *s. */
void ib_fs_scan_freep (ib_fs_scan_t **s);
#define cleanup_scan __attribute__ ((cleanup (ib_fs_scan_freep)))

typedef enum
{
  IB_COMPRESSION_GZIP = 0,
  IB_COMPRESSION_ZSTD,
  IB_COMPRESSION_NONE,
} ib_compression_t;

typedef struct ib_layer_opts
{
  ib_compression_t compression;
  int level;                   /* -1: the compression's default (gzip 1, zstd 3) */
  int64_t sde;                 /* SOURCE_DATE_EPOCH (seconds) or -1: mtimes are kept */
  int threads;                 /* gzip/zstd worker threads; 0: the online CPUs.  The
                                * bytes do not depend on it. */
  /* ib_layer_write_diff: when not 0 and the layer's tar comes to at least
   * this many bytes (counted from the entries before writing), the file
   * gets the uncompressed tar instead (res->raw), for the caller to
   * compress later with ib_layer_compress. */
  uint64_t raw_above;
  /* With raw_above: asked, once the estimate `est` (bytes) reaches it and
   * before anything is written to the file, whether to write the tar
   * uncompressed; false keeps the compressed one pass.  A caller may start
   * reading the file as it grows here (ib_layer_compress_follow).  NULL:
   * always. */
  bool (*raw_start) (void *ud, uint64_t est);
  void *raw_ud;
  /* ib_layer_write_diff with sde >= 0: set the mtime of every entry written
   * in the tree itself to the one its tar header got (whole seconds, at
   * most sde), so the tree equals an unpack of the layer */
  bool match_tree;
} ib_layer_opts_t;

/* "gzip", "zstd" or "none" (also "uncompressed") -> *out; -1 (errno EINVAL)
 * for anything else. */
int ib_compression_parse (const char *s, ib_compression_t *out);
/* The OCI media type of a layer so compressed (image-spec media-types.md). */
const char *ib_compression_media_type (ib_compression_t c);
/* Whether `level` is valid for `c` (-1 always is): gzip 0-9, zstd 1-19,
 * none only -1. */
bool ib_compression_level_ok (ib_compression_t c, int level);

typedef struct ib_layer_result
{
  char diff_id[IB_DIGEST_LEN]; /* sha256 of the uncompressed tar */
  char digest[IB_DIGEST_LEN];  /* sha256 of the blob (compressed as asked) */
  uint64_t size;               /* blob size in bytes */
  uint64_t entries;            /* tar entries written (0 = the step changed nothing) */
  bool raw;                    /* opts->raw_above applied: the file is the uncompressed
                                  tar, digest == diff_id, size its length */
} ib_layer_result_t;

/* Compare `rootfs` now with `before` and write the layer to `out_path`
 * (created/truncated, mode 0644, not fsynced: commit it to the store),
 * compressed as `opts` says (NULL: gzip at its default level, mtimes kept).
 * `before` may be NULL: every entry counts as added (a layer of the whole
 * tree).  Entries of `before` under `exclude` are ignored too (no whiteouts
 * for them).  Mtimes later than opts->sde are written as opts->sde.  res->diff_id, digest and size are computed in the same
 * single pass that writes the file; res->entries == 0 means nothing changed
 * (the file then holds an empty tar).  A file that shrinks while it is read
 * is an error. */
int ib_layer_write_diff (const char *rootfs, const ib_fs_scan_t *before, char *const *exclude,
                         const char *out_path, const ib_layer_opts_t *opts,
                         ib_layer_result_t *res, ib_error_t *err);

/* ib_layer_write_diff with the current state given as a scan too (`cur`,
 * NULL: the tree is scanned here), as ib_fs_scan_overlay makes them. */
int ib_layer_write_diff_scans (const char *rootfs, const ib_fs_scan_t *before,
                               const ib_fs_scan_t *cur, char *const *exclude,
                               const char *out_path, const ib_layer_opts_t *opts,
                               ib_layer_result_t *res, ib_error_t *err);

/* The two scans ib_layer_write_diff_scans needs for a step done in an
 * overlay tree `rootfs` whose upper directory `upper` was empty before the
 * step (ib_rootfs_overlay_clean), without walking the whole tree: *cur
 * holds the entries the upper directory has (as the merged tree shows
 * them), *before their state before the step as `lower` (a directory
 * showing the tree of the overlay's lower layers, ib_rootfs_lower_view)
 * shows it, plus what the step deleted (whiteouts) and, for a directory
 * made anew (opaque), everything below it before.  The layer written
 * from them equals the one ib_layer_write_diff writes from a scan taken
 * before the step (entries under `exclude` are left out the same way;
 * st_dev is not recorded, as the two views are different mounts).  Errors
 * name the path; EOPNOTSUPP for an upper directory overlayfs redirected
 * (redirect_dir), which the caller handles by scanning the whole trees.
 * Caller frees both with ib_fs_scan_free. */
int ib_fs_scan_overlay (const char *rootfs, const char *upper, const char *lower,
                        char *const *exclude, ib_fs_scan_t **before, ib_fs_scan_t **cur,
                        ib_error_t *err);
/* ib_fs_scan without st_dev (see ib_fs_scan_overlay): for the fallback
 * that compares a lower view with the merged tree. */
int ib_fs_scan_nodev (const char *rootfs, char *const *exclude, ib_fs_scan_t **out,
                      ib_error_t *err);

/* Compress the uncompressed layer tar `tar_path` (as ib_layer_write_diff
 * writes it with IB_COMPRESSION_NONE) into `out_path` (created/truncated,
 * mode 0644, not fsynced) as `opts` says (compression must not be none;
 * sde is not used: the tar is taken as it is).  The bytes equal those
 * ib_layer_write_diff writes for the same tree and opts, so a builder may
 * write the tar first (its diff_id is then known) and compress later, in
 * another process.  *digest (sha256 of the written bytes) and *size (bytes)
 * on success; errors (read, write, a full disk) name the path. */
int ib_layer_compress (const char *tar_path, const char *out_path, const ib_layer_opts_t *opts,
                       char digest[IB_DIGEST_LEN], uint64_t *size, ib_error_t *err);
/* ib_layer_compress of a tar still being written: reads `tar_path` as it
 * grows until the writer sends its final length on `ctl_fd` (8 bytes,
 * little-endian; ctl_fd < 0: the file is complete), polling every 5 ms at
 * the end of what is there.  The bytes are the same as ib_layer_compress
 * gives for the finished file.  ECANCELED when ctl_fd closes without a
 * length (the writer failed); EIO when the file is shorter than said. */
int ib_layer_compress_follow (const char *tar_path, int ctl_fd, const char *out_path,
                              const ib_layer_opts_t *opts, char digest[IB_DIGEST_LEN],
                              uint64_t *size, ib_error_t *err);

#endif
