/* rootfs/unpack.h — apply an image layer to a directory (image-spec
 * layer.md: changesets, whiteouts, opaque whiteouts).
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
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct ib_unpack_stats
{
  uint64_t entries;      /* tar entries applied */
  uint64_t bytes;        /* uncompressed bytes read */
  uint64_t skipped;      /* device nodes etc. skipped with a warning */
  uint64_t decoder_hashed; /* tar stream buffers whose diff_id hash the decoder
                              thread took (writing was the slower half) */
} ib_unpack_stats_t;

/* Apply one layer blob (`layer_path`: tar, tar+gzip or tar+zstd, detected by
 * magic bytes, not by media type) onto directory `target`.  Whiteouts
 * (".wh.NAME") delete NAME; opaque whiteouts (".wh..wh..opq") empty the
 * directory of what lower layers put there; hardlinks, symlinks, modes
 * (incl. setuid/setgid/sticky), mtimes are applied; ownership is applied
 * with lchown and silently kept as the caller's when the id is not mapped
 * (EINVAL/EPERM); device nodes that cannot be created are skipped with a
 * warning.  `diff_id` (may be NULL) receives the sha256 of the uncompressed
 * tar stream, computed while unpacking.  Errors name the entry.
 *
 * More precisely: whiteouts and opaque whiteouts apply to lower layers only,
 * whatever their position in the tar (names this layer created, and
 * directories holding entries of this layer, survive; their lower contents
 * do not); ".wh..wh.*" names other than the opaque marker are ignored;
 * whiteout names "", "." and ".." are errors.  Symlinks in an entry's path
 * resolve as inside the container ("/" and ".." stop at `target`); a
 * missing parent is created (0755) unless a dangling symlink or a
 * non-directory is in its way (an error).  A non-directory entry replaces
 * whatever is at its path (directories recursively); a directory entry keeps
 * an existing directory and gives it the entry's metadata (its user.* and
 * security.capability xattrs are replaced by the entry's).  Directory modes and
 * mtimes are applied after all entries; directories lacking owner write
 * permission get it for the time of the unpack (rootless).  A directory
 * that the layer changes (adds to, or removes from) without an entry for it
 * keeps the mtime it had, so the tree does not depend on the time of the
 * unpack.  Xattrs: user.* are applied, and security.capability (file
 * capabilities) where the kernel allows it (in a user namespace it stores
 * them as capabilities of the namespace's root); the files where it refuses
 * are named in one warning per layer; other names (trusted.*,
 * security.selinux, ...) are skipped (debug message).  The uncompressed
 * size is limited (see
 * ib_unpack_set_max_bytes).  A "./" entry (the target itself) gives the
 * target its metadata, as any directory entry does.
 * On failure `target` is left partly unpacked; stats (may be NULL) counts
 * the tar entries seen and uncompressed bytes read. */
int ib_unpack_layer (const char *layer_path, const char *target, char diff_id[IB_DIGEST_LEN],
                     ib_unpack_stats_t *stats, ib_error_t *err);

/* A source of a layer blob's bytes for ib_unpack_layer_stream: read up to
 * `len` bytes into `buf`; return the count (may be short), 0 at the end of
 * the blob, or -1 with *err set.  Called from the unpack's decoder thread,
 * never concurrently with itself. */
typedef ssize_t (*ib_layer_read_fn) (void *ud, void *buf, size_t len, ib_error_t *err);

/* ib_unpack_layer over bytes that `read_fn` delivers as they arrive (e.g.
 * from a download in progress), so that a layer is unpacked while it is
 * still being fetched.  `name` names the layer in messages.  The
 * compression is detected from the first bytes.  Decoding (and the
 * diff_id hash) runs in a second thread, overlapped with writing; memory
 * used is bounded (about 5 MiB) whatever the layer's size.  A read error
 * fails the unpack with the reader's message. */
int ib_unpack_layer_stream (const char *name, ib_layer_read_fn read_fn, void *ud,
                            const char *target, char diff_id[IB_DIGEST_LEN],
                            ib_unpack_stats_t *stats, ib_error_t *err);

/* Limit on the uncompressed bytes of one layer (a guard against decompression
 * bombs): ib_unpack_layer fails with EFBIG, naming the limit, once the tar
 * stream grows past it.  `max` in bytes; 0 restores the default, which is
 * $IMGBUILD_MAX_LAYER_BYTES when set to a positive number, else 64 GiB.
 * Process-wide, not thread-safe against a concurrent unpack. */
void ib_unpack_set_max_bytes (uint64_t max);
/* The limit in effect now, in bytes. */
uint64_t ib_unpack_max_bytes (void);

#endif
