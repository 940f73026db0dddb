/* builder/engine/prune.h — `imgbuild prune`: give back the disk space the store
 * holds for nothing, without touching any tagged image.
 *
 *   default   temp files of builds and pulls that died (tmp/), blobs that
 *             neither a tag (manifest, config, layers, nested manifests of
 *             an index) nor a build cache record names, and snapshots
 *             (snapshots/<chain id>) that are no prefix of a tagged image's
 *             or a cache record's layers;
 *   cache     also the build cache: step records (cache/steps/) and RUN
 *             --mount=type=cache directories (cache/mounts/), and so the
 *             blobs only they held (layers of intermediate steps);
 *   all       also every snapshot (later builds unpack the layers again);
 *   keep_storage  (without cache) also the least recently used step
 *             records, oldest first, until what stays (blobs, snapshots,
 *             records, cache mounts) fits in that many bytes, as buildx
 *             prune --keep-storage: a record's last use is its mtime,
 *             which a cache hit sets (ib_cache_get); a blob or snapshot
 *             goes with the last record that holds it; what tags hold is
 *             never removed, even over the budget.
 *
 * It holds the store's gc lock exclusively (ib_store_gc_lock), so it waits
 * for running builds, pulls and runs to end and none starts meanwhile.
 * Directories are renamed into tmp/ before they are removed, so a prune
 * that is killed never leaves half a snapshot under its name.
 *
 * Only entries whose names imgbuild makes are removed (ib_store_name_ours:
 * chain ids in snapshots/, digests in blobs/, temp names with imgbuild's
 * prefixes in tmp/, ...); anything else there is left as it is and said
 * at debug level (-v).
 */
#ifndef IB_BUILDER_PRUNE_H
#define IB_BUILDER_PRUNE_H

#include "common/error.h"
#include "oci/store.h"
#include <stdbool.h>
#include <stdint.h>

typedef struct ib_prune_opts
{
  bool cache; /* the build cache too */
  bool all;   /* the build cache and every snapshot */
  bool keep_storage_set;
  uint64_t keep_storage; /* bytes (disk blocks): the budget above */
} ib_prune_opts_t;

/* What was removed: counts and bytes (st_blocks * 512, i.e. disk space;
 * hard links counted once per removal). */
typedef struct ib_prune_result
{
  size_t tmp_entries, cache_records, cache_mounts, snapshots, blobs;
  int64_t tmp_bytes, cache_bytes, snapshot_bytes, blob_bytes;
  int64_t kept_bytes; /* with keep_storage: what the store holds after it */
} ib_prune_result_t;

/* Prune `store` as `opts` says; *res is filled even on failure (what was
 * removed until then).  Errors name the path that could not be read or
 * removed; index.json is never written. */
int ib_prune (ib_store_t *store, const ib_prune_opts_t *opts, ib_prune_result_t *res,
              ib_error_t *err);

#endif
