/* rootfs/prepare.h — an image's rootfs, made from the store (snapshots per
 * chain id, then its layer blobs unpacked: rootfs/unpack.h) or unpacked
 * while the image is pulled.
 */
#ifndef IB_ROOTFS_PREPARE_H
#define IB_ROOTFS_PREPARE_H

#include "common/error.h"
#include "oci/store.h"
#include <stdbool.h>

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

#endif
