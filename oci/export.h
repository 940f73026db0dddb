/* oci/export.h — a stored image written out of the store: as an OCI
 * image layout directory (image-spec "Image Layout") or as a `docker save`
 * tarball.  Both read the image through the store's API (oci/store.h) and
 * write beside the destination, renamed into place when complete. */
#ifndef IB_OCI_EXPORT_H
#define IB_OCI_EXPORT_H

#include "common/error.h"
#include "oci/store.h"

/* Write the stored image `manifest_digest` as a standalone OCI image layout
 * at `dest` (created, or replaced atomically), index.json naming it `name`
 * (org.opencontainers.image.ref.name; NULL: no name). */
int ib_export_oci (ib_store_t *store, const char *manifest_digest, const char *name,
                   const char *dest, ib_error_t *err);

/* Write the stored image `manifest_digest` as a tarball of an OCI image
 * layout at `dest` (FILE; parent directories created; written beside it,
 * fsynced and renamed into place), as buildx's oci exporter writes and
 * skopeo's oci-archive: reads: oci-layout, index.json (naming it `name`, as
 * ib_export_oci), blobs/sha256/ with the manifest, config and layers as
 * stored (each once).  Times are 0: the same image gives the same bytes. */
int ib_export_oci_archive (ib_store_t *store, const char *manifest_digest, const char *name,
                           const char *dest, ib_error_t *err);

/* Write the stored image `manifest_digest` as a `docker save` tarball at
 * `dest` (FILE; parent directories created; written beside it and renamed
 * into place): manifest.json, the config, each layer uncompressed as
 * <diff_id>/layer.tar (its diff_id checked), and `repositories`.  `name`
 * (may be NULL: untagged) becomes RepoTags in Docker's short form
 * ("client:1", "127.0.0.1:5000/x:1").  Loads with docker load, podman load
 * and skopeo's docker-archive: transport. */
int ib_export_docker (ib_store_t *store, const char *manifest_digest, const char *name,
                      const char *dest, ib_error_t *err);

#endif
