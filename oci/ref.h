/* oci/ref.h — image references with Docker's normalization
 * (distribution/reference: "ubuntu:14.04" -> docker.io/library/ubuntu:14.04). */
#ifndef IB_OCI_REF_H
#define IB_OCI_REF_H

#include "common/error.h"
#include <stdbool.h>

typedef struct ib_ref
{
  char *registry;   /* "docker.io", "localhost:5000", "quay.io" */
  char *repository; /* "library/ubuntu", "pypa/manylinux2014_x86_64" */
  char *tag;        /* "14.04"; "latest" when neither tag nor digest given; NULL if digest only */
  char *digest;     /* "sha256:..." or NULL */
} ib_ref_t;

/* Parse and normalize `s`.  The first path component is a registry when it
 * contains '.' or ':' or is "localhost"; otherwise the registry is docker.io
 * and a single-component repository gets "library/".  Repository components
 * must be lowercase [a-z0-9] with separators [._-]; tags [\w][\w.-]{0,127};
 * digests must be valid sha256 (oci/digest.h).  Errors name the input. */
int ib_ref_parse (const char *s, ib_ref_t *out, ib_error_t *err);
/* Whether `name`'s first path component is a registry by that rule (a
 * '.', a ':', "localhost", or an uppercase letter, as Docker's
 * splitDockerDomain): "quay.io/x" yes, "library/x" and "x" no. */
bool ib_ref_names_registry (const char *name);
void ib_ref_free (ib_ref_t *r);

/* "registry/repository:tag", "registry/repository@digest" or both
 * ("...:tag@digest").  Caller frees. */
char *ib_ref_string (const ib_ref_t *r);
/* Host name to talk to: docker.io -> registry-1.docker.io, others unchanged. */
const char *ib_ref_api_host (const ib_ref_t *r);
/* localhost, 127.0.0.1 and [::1] registries (any port) use plain HTTP, as Docker does. */
bool ib_ref_plain_http (const ib_ref_t *r);
/* true when `registry` ("host" or "host:port", IPv6 as "[::1]:port") is
 * localhost, a 127.0.0.0/8 address or [::1]; what ib_ref_plain_http tests. */
bool ib_ref_host_is_loopback (const char *registry);

#endif
