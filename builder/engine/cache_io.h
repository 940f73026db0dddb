/* builder/engine/cache_io.h — sharing the build cache between machines
 * (`build --cache-to`, `--cache-from`), as BuildKit's cache exporters do:
 *
 *   type=local,dest=DIR   (--cache-to)   / type=local,src=DIR (--cache-from)
 *   type=registry,ref=REF (both)
 *
 * What travels: the step records (builder/cache.h) a build used or made,
 * and the layer blobs they name, as one OCI artifact: an image manifest
 * with artifactType IB_CACHE_ARTIFACT_TYPE whose config blob (media type
 * IB_CACHE_CONFIG_TYPE) is {"v":1,"records":{"<key hex>": <record>...}}
 * and whose layers are the layer blobs.  type=local writes it as an OCI
 * image layout at DIR (index.json naming it "cache"); type=registry pushes
 * it to REF.  Import adds the records to the local store (existing ones are
 * kept) and the blobs they name.
 */
#ifndef IB_BUILDER_CACHE_IO_H
#define IB_BUILDER_CACHE_IO_H

#include "common/error.h"
#include "oci/store.h"

#define IB_CACHE_ARTIFACT_TYPE "application/vnd.imgbuild.cache.v1"
#define IB_CACHE_CONFIG_TYPE "application/vnd.imgbuild.cache.config.v1+json"

/* Import the cache named by `spec` ("type=local,src=DIR" or
 * "type=registry,ref=REF") into `store`.  A cache that does not exist yet
 * (no DIR, REF not found) is only a warning, as in BuildKit; a malformed
 * spec or a damaged cache is an error naming it.  Records naming blobs
 * that cannot be fetched are skipped. */
int ib_cache_import (ib_store_t *store, const char *spec, ib_error_t *err);

/* Export the records `keys` (NULL-terminated "sha256:..." step keys;
 * those without a record are skipped) with their layer blobs to `spec`
 * ("type=local,dest=DIR" or "type=registry,ref=REF").  DIR is written
 * beside and renamed into place. */
int ib_cache_export (ib_store_t *store, char *const *keys, const char *spec, ib_error_t *err);

#endif
