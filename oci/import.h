/* oci/import.h — an image archive read into the store: `docker load`,
 * `podman load`, and skopeo's oci:, oci-archive: and docker-archive:
 * sources.  The counterpart of oci/export.h. */
#ifndef IB_OCI_IMPORT_H
#define IB_OCI_IMPORT_H

#include "common/error.h"
#include "oci/store.h"

/* Load the image(s) of `path` into the store:
 * - a directory: an OCI image layout (image-spec "Image Layout":
 *   oci-layout, index.json, blobs/ALG/HEX);
 * - a file: a tar (plain, gzip or zstd) of an OCI image layout
 *   (oci-archive), or a `docker save` tarball (manifest.json naming each
 *   image's config, RepoTags and layer files, as docker, podman and
 *   skopeo's docker-archive: write them).
 * Every blob is checked against its digest (OCI) or, for an uncompressed
 * docker layer, against the config's diff_id; manifests, indexes and
 * configs are kept as they are (their digests, the image ID included, do
 * not change); a docker archive's images get OCI manifests.  A tar is
 * unpacked in the store's tmp/ first, regular files, directories and links
 * only, and every path the archive names is resolved inside it (openat2
 * RESOLVE_IN_ROOT): a hostile archive cannot reach outside.
 * Names: `name` (may be NULL), else the archive's own (index.json's
 * org.opencontainers.image.ref.name when it is a whole reference, a docker
 * archive's RepoTags), normalized as ib_ref_parse does; an image without
 * one is stored untagged.  *loaded (may be NULL) gets, per image, the name
 * tagged or the manifest digest (a NULL-terminated vector, caller frees).
 * Errors name the archive and the member ("load x.tar: blobs/sha256/ab..:
 * digest mismatch"); the store gains no tag when one fails (blobs already
 * put are left for prune). */
int ib_import (ib_store_t *store, const char *path, const char *name, char ***loaded,
               ib_error_t *err);

#endif
