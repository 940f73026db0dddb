/* oci/manifest.h — manifests, indexes and image configs (jansson).
 * image-spec manifest.md, image-index.md, config.md; Docker's schema2 media
 * types are accepted as their OCI equivalents. */
#ifndef IB_OCI_MANIFEST_H
#define IB_OCI_MANIFEST_H

#include "common/error.h"
#include "oci/digest.h"
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#define IB_MT_OCI_MANIFEST "application/vnd.oci.image.manifest.v1+json"
#define IB_MT_OCI_INDEX "application/vnd.oci.image.index.v1+json"
#define IB_MT_OCI_CONFIG "application/vnd.oci.image.config.v1+json"
#define IB_MT_OCI_LAYER "application/vnd.oci.image.layer.v1.tar"
#define IB_MT_OCI_LAYER_GZIP "application/vnd.oci.image.layer.v1.tar+gzip"
#define IB_MT_OCI_LAYER_ZSTD "application/vnd.oci.image.layer.v1.tar+zstd"
#define IB_MT_DOCKER_MANIFEST "application/vnd.docker.distribution.manifest.v2+json"
#define IB_MT_DOCKER_LIST "application/vnd.docker.distribution.manifest.list.v2+json"
#define IB_MT_DOCKER_CONFIG "application/vnd.docker.container.image.v1+json"
#define IB_MT_DOCKER_LAYER_GZIP "application/vnd.docker.image.rootfs.diff.tar.gzip"
#define IB_MT_DOCKER_SCHEMA1 "application/vnd.docker.distribution.manifest.v1+json"
#define IB_MT_DOCKER_SCHEMA1_SIGNED "application/vnd.docker.distribution.manifest.v1+prettyjws"

/* The Accept header value for manifest GETs: all four types above. */
extern const char IB_MANIFEST_ACCEPT[];

/* Is `mt` an image manifest's media type (OCI, or Docker schema 2)?  false
 * for NULL and for indexes. */
bool ib_media_type_is_manifest (const char *mt);

typedef struct ib_descriptor
{
  char *media_type;
  char digest[IB_DIGEST_LEN];
  int64_t size;       /* bytes */
  char *os, *arch, *variant; /* platform, only in index entries; may be NULL */
} ib_descriptor_t;

typedef struct ib_manifest
{
  char *media_type;          /* of the manifest itself */
  ib_descriptor_t config;
  ib_descriptor_t *layers;   /* n_layers entries, base layer first */
  size_t n_layers;
} ib_manifest_t;

typedef enum { IB_DOC_MANIFEST, IB_DOC_INDEX } ib_doc_kind_t;

/* Classify a manifest document from its mediaType field, falling back on the
 * HTTP Content-Type (may be NULL) and on shape (manifests/layers keys).
 * Schema1 is refused with a message saying so.  Returns 0 and sets *kind. */
int ib_doc_kind (const char *data, size_t len, const char *content_type, ib_doc_kind_t *kind,
                 ib_error_t *err);

/* Parse an image manifest (OCI or Docker schema2).  Caller frees with ib_manifest_free. */
int ib_manifest_parse (const char *data, size_t len, ib_manifest_t **out, ib_error_t *err);
void ib_manifest_free (ib_manifest_t *m);

/* Platforms (image-spec image-index.md "platform"; matching as containerd's
 * platforms package).  Both sides are normalized first: os lowercase;
 * x86_64 -> amd64, aarch64 -> arm64, i386 -> 386, armhf -> arm/v7,
 * armel -> arm/v6; variant "7" -> "v7"; no variant means v7 for arm, v8 for
 * arm64, v1 for amd64.
 * ib_platform_rank: how well an image for os/arch/variant serves a request
 * for want_*: 0 = not at all, else higher is better (at most 1000).  OS and
 * architecture must be equal.  amd64, arm and arm64 variants are ordered
 * levels: an image of the requested level or a lower one matches, the
 * closest best (arm/v7 accepts v7, v6, v5; arm64 = arm64/v8); a plain amd64
 * request (want_variant NULL) accepts every amd64 level (v1, v2, v3..),
 * lowest first.  Other architectures: the variant must be equal when one is
 * asked for; without one, any, an image without a variant first. */
int ib_platform_rank (const char *want_os, const char *want_arch, const char *want_variant,
                      const char *os, const char *arch, const char *variant);
/* "os/arch[/variant]" (variant NULL or "" left out; NULL os/arch as "?"); caller frees. */
char *ib_platform_string (const char *os, const char *arch, const char *variant);
/* Parse "OS/ARCH[/VARIANT]" (--platform, FROM --platform=) into normalized
 * strings the caller frees; *variant is NULL when none was given.  EINVAL
 * for anything else, naming the input. */
int ib_platform_parse (const char *s, char **os, char **arch, char **variant, ib_error_t *err);

/* From an index / manifest list (image-index.md, Docker manifest list)
 * choose for os/arch[/variant] (variant NULL = the default, see
 * ib_platform_rank): the best-ranked image manifest entry.  Entries for
 * unknown/unknown (BuildKit attestation manifests) and artifacts are never
 * chosen nor listed.  When no image manifest matches, the nested_skip-th
 * (0-based) entry that is itself an index and has no platform or a matching
 * one is returned instead (out->media_type is an index type): the caller
 * searches it, with nested_skip + 1 here when it holds nothing.
 * Returns 0 with *out filled (caller clears).  Otherwise -1; when nothing
 * matches the status is ENOENT, the message "no image for linux/s390x; the
 * index offers linux/amd64, linux/arm64/v8" and *offered (may be NULL) gets
 * the list of platforms offered (caller frees; "" when none). */
int ib_index_select (const char *data, size_t len, const char *os, const char *arch,
                     const char *variant, size_t nested_skip, ib_descriptor_t *out,
                     char **offered, ib_error_t *err);
void ib_descriptor_clear (ib_descriptor_t *d);

/* Serialize a manifest (always OCI media types) with the given config and
 * layer descriptors; annotations may be NULL.  Returns compact JSON with
 * sorted keys (stable bytes -> stable digest); caller frees. */
char *ib_manifest_serialize (const ib_descriptor_t *config, const ib_descriptor_t *layers,
                             size_t n_layers, json_t *annotations);

/* Serialize an OCI image index (image-index.md) of the `n` image
 * manifests given, in that order, each with its platform (os, arch and
 * variant of the descriptor; variant left out when NULL or "") and its
 * media type (NULL: the OCI manifest's).  Compact
 * JSON with sorted keys, as ib_manifest_serialize; caller frees. */
char *ib_index_serialize (const ib_descriptor_t *manifests, size_t n);

/* Image config (config.md): parsed to a jansson object the caller owns. */
int ib_config_parse (const char *data, size_t len, json_t **out, ib_error_t *err);
/* rootfs.diff_ids as a NULL-terminated vector of digests; error if malformed. */
int ib_config_diff_ids (json_t *config, char ***diff_ids, ib_error_t *err);

/* The current host platform in OCI terms ("linux", "amd64", variant NULL). */
void ib_host_platform (const char **os, const char **arch, const char **variant);

/* Chain id of layer `upto` (0-based, so diff_ids[0..upto] are used and
 * must exist) per image-spec config.md "Layer ChainID":
 * chain(0)=diff_id(0), chain(n)=sha256(chain(n-1) + " " + diff_id(n)),
 * written as "sha256:<hex>" into out. */
void ib_chain_id (char *const *diff_ids, size_t upto, char out[IB_DIGEST_LEN]);

#endif
