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

/* Layers unpacked at once (rootfs/unpack_side.c).  Layer i > 0 of an
 * image can be unpacked into an empty directory of its own on the side,
 * while the layers below it are being unpacked, and merged onto the
 * target once they are: the result is the tree ib_unpack_layer gives,
 * byte for byte and in every piece of metadata.  Where the layer's result
 * depends on what the lower layers hold, the side unpack (or the merge)
 * stops and says so; the caller then applies the layer in order with
 * ib_unpack_layer (from its start).  A layer depends on its lower layers
 * when it has a whiteout or an opaque whiteout, a hard link to a file it
 * does not hold itself, or an entry under a symlink of its own; its
 * merge does when an entry's parent directory, made by this layer
 * implicitly or by a directory entry that came after its first child,
 * meets a non-directory in the target, or when a directory the layer
 * makes implicitly would land in a setgid directory of the target. */
typedef struct ib_unpack_side ib_unpack_side_t;

/* The layer read by `read_fn` unpacked into `side_dir`, an existing empty
 * directory on the target's file system (the caller makes and removes
 * it).  Directory modes and times are kept for the merge.  Returns 0 with
 * *out (caller frees with ib_unpack_side_free) and `diff_id`; 1 when the
 * layer depends on its lower layers (`side_dir` holds a part of it, the
 * stream was not read to its end; nothing is reported); -1 with *err on
 * any other failure (as ib_unpack_layer_stream).  Thread-safe: layers may
 * be unpacked at once, each into its own directory. */
int ib_unpack_layer_side (const char *name, ib_layer_read_fn read_fn, void *ud,
                          const char *side_dir, char diff_id[IB_DIGEST_LEN],
                          ib_unpack_stats_t *stats, ib_unpack_side_t **out, ib_error_t *err);

/* Merge a layer unpacked on the side onto `target`, which holds the
 * layers below it: entries are renamed in (no data copied), directories
 * are merged, the layer's directory metadata applied.  Returns 0 when
 * merged (what is left of the side directory is for the caller to
 * remove); 1 when the result would depend on the lower layers (the target
 * is unchanged: apply the layer with ib_unpack_layer); -1 with *err on
 * failure (the target is partly changed). */
int ib_unpack_side_merge (ib_unpack_side_t *side, const char *target, ib_error_t *err);

void ib_unpack_side_free (ib_unpack_side_t *side);

/* Limit on the uncompressed bytes of one layer (a guard against decompression
 * bombs): ib_unpack_layer fails with EFBIG, naming the limit, once the tar
 * stream grows past it.  `max` in bytes; 0 restores the default, which is
 * $IMGBUILD_MAX_LAYER_BYTES when set to a positive number, else 64 GiB.
 * Process-wide, not thread-safe against a concurrent unpack. */
void ib_unpack_set_max_bytes (uint64_t max);
/* The limit in effect now, in bytes. */
uint64_t ib_unpack_max_bytes (void);

#endif
