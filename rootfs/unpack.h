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
#include <sys/types.h>

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

/* Make `dest` (must not exist) a rootfs of the stored image whose layers are
 * `layer_digests` (blobs in the store) with `diff_ids` from its config.
 * Uses <store>/snapshots/<chainid> of the longest already-unpacked prefix,
 * unpacks the rest, verifies each diff_id, and with `snapshot` records the
 * new top snapshot (a copy: temp dir + rename).  The snapshot is copied to
 * dest, or mounted under an overlay (ib_rootfs_overlay_from), never shared,
 * so a build may modify dest freely; remove dest with ib_rootfs_remove.
 * On failure (missing blob, diff_id mismatch: the error names the layer's
 * index and digest) dest is removed.  Failing to record the snapshot is only
 * a warning.  Snapshot names: ib_chain_id (diff_ids, i, ...) with i the
 * index of the topmost layer they contain. */
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

void ib_rootfs_allow_overlay (bool on);
int ib_rootfs_overlay_from (const char *src, const char *dest, ib_error_t *err);
int ib_rootfs_remove (const char *dest, ib_error_t *err);
bool ib_rootfs_is_overlay (const char *dest);

int ib_rootfs_prepare (ib_store_t *store, char *const *layer_digests, char *const *diff_ids,
                       const char *dest, bool snapshot, ib_error_t *err);

/* Pull image `ref` (os/arch/variant as ib_pull; NULL = the host's) and
 * make `dest` (must not exist) its rootfs in the same pass: each layer is
 * unpacked while it downloads (ib_pull_begin / ib_pull_session_read), in
 * order, while the later layers download in parallel; every diff_id is
 * verified; the image is stored and tagged as ib_pull does.  When a
 * download had to start over from byte 0 (a digest mismatch, a server
 * ignoring Range) the rootfs is made again from the stored blobs.  With
 * `snapshot` the result is also recorded as the image's snapshot (a copy,
 * for later builds).  On failure dest is removed and the store holds no
 * wrong blob; what downloaded completely stays (verified).  Errors start
 * "pull REF: ". */
int ib_rootfs_pull (ib_store_t *store, const char *ref, const char *os, const char *arch,
                    const char *variant, const char *dest, bool snapshot, ib_error_t *err);

/* Limit on the uncompressed bytes of one layer (a guard against decompression
 * bombs): ib_unpack_layer fails with EFBIG, naming the limit, once the tar
 * stream grows past it.  `max` in bytes; 0 restores the default, which is
 * $IMGBUILD_MAX_LAYER_BYTES when set to a positive number, else 64 GiB.
 * Process-wide, not thread-safe against a concurrent unpack. */
void ib_unpack_set_max_bytes (uint64_t max);
/* The limit in effect now, in bytes. */
uint64_t ib_unpack_max_bytes (void);

/* Testing aid: `use` false makes path resolution skip openat2 and use the
 * user-space fallback (the one taken when the kernel lacks openat2). */
void ib_unpack_set_openat2 (bool use);

/* O_PATH | O_DIRECTORY fd (close-on-exec, caller closes) of directory
 * `path` resolved beneath `rootfd` as if rootfd were "/": symlinks met on
 * the way, absolute or relative, and ".." stay inside; magic links
 * (/proc/self/...) are refused.  openat2(RESOLVE_IN_ROOT) where the kernel
 * has it, the same walk in user space where not.  Leading '/' ignored; ""
 * is rootfd itself.  -1 with errno (ENOENT, ENOTDIR, ELOOP...) on failure.
 * Used by the sandbox for mount targets. */
int ib_open_dir_in_root (int rootfd, const char *path);

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
