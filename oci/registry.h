/* oci/registry.h — registry client on libcurl (OCI distribution-spec,
 * Docker registry token auth).
 *
 * Auth: on 401 the WWW-Authenticate challenge is parsed; Bearer realm /
 * service / scope -> GET realm?service=..&scope=.. (anonymous) and the token
 * is reused for later requests to that registry; Basic is not sent without
 * credentials.  Errors name the reference and say what happened in words:
 * "manifest unknown", "unauthorized", "connection refused to HOST".
 *
 * TLS (docs/security.md): HTTPS verified with the system CAs plus the
 * registry's certs.d *.crt, with its certs.d client certificate
 * (oci/certs.h); localhost / 127.0.0.1 / [::1] use plain HTTP unless they
 * have certs.d files, --cert-dir is given or --tls-verify=true; insecure
 * registries (ib_registry_add_insecure, registries.conf insecure = true,
 * --tls-verify=false) get HTTPS without verification, or plain HTTP when
 * they do not speak TLS.  Process-wide options: oci/regconf.h.
 */
#ifndef IB_OCI_REGISTRY_H
#define IB_OCI_REGISTRY_H

#include "common/error.h"
#include "oci/ref.h"
#include "oci/store.h"
#include <stdbool.h>

typedef struct ib_registry ib_registry_t;

/* A WWW-Authenticate challenge (RFC 7235 section 4.1; Docker token auth
 * spec): `Bearer realm="https://auth.docker.io/token",service="x",scope="a:b:pull,push"`.
 * Parameter values may be quoted strings (with backslash escapes, commas
 * inside) or bare tokens; parameter names are case-insensitive. */
typedef struct ib_auth_challenge
{
  char *scheme;  /* "Bearer", "Basic", as sent */
  char *realm;   /* NULL when absent */
  char *service; /* NULL when absent */
  char *scope;   /* NULL when absent */
} ib_auth_challenge_t;

/* Parse the first challenge of a WWW-Authenticate header value into *out
 * (fields owned by out; free with ib_auth_challenge_clear).  Error when the
 * value has no scheme or a malformed parameter list. */
int ib_auth_challenge_parse (const char *header, ib_auth_challenge_t *out, ib_error_t *err);
void ib_auth_challenge_clear (ib_auth_challenge_t *c);

/* Treat `registry` ("host" or "host:port", as in a reference) as insecure
 * (Docker's and podman's --insecure-registry): HTTPS without certificate
 * verification, falling back to plain HTTP when the first request finds no
 * TLS there.  Process-wide; call before ib_registry_new. */
void ib_registry_add_insecure (const char *registry);

/* A client for the registry that `ref` names (registry host only is used).
 * One client serves one thread at a time (it owns one curl handle, which
 * keeps connections alive between requests).
 * No network traffic here: the first request pings GET /v2/ (an insecure
 * registry first tries HTTPS once).  Errors: the registry's certs.d files
 * (a client certificate without its key, --cert-dir missing, a CA file
 * that cannot be read).  Credentials
 * (for token requests and Basic auth) come from the first auth file that has
 * an entry for the registry: $REGISTRY_AUTH_FILE,
 * $XDG_RUNTIME_DIR/containers/auth.json, ~/.docker/config.json ("auths" ->
 * "auth": base64 "user:password"; docker.io also as
 * "https://index.docker.io/v1/").  Without one, requests are anonymous. */
int ib_registry_new (const ib_ref_t *ref, ib_registry_t **out, ib_error_t *err);
void ib_registry_free (ib_registry_t *r);

/* GET /v2/<repo>/manifests/<reference> with Accept: IB_MANIFEST_ACCEPT.
 * *data is NUL-terminated, caller frees; *content_type may be NULL, caller frees.
 * `digest` (may be NULL) gets the sha256 of the bytes received; when
 * `reference` is a digest the bytes are verified against it. */
int ib_registry_get_manifest (ib_registry_t *r, const char *repo, const char *reference,
                              char **data, size_t *len, char **content_type,
                              char digest[IB_DIGEST_LEN], ib_error_t *err);

/* GET /v2/<repo>/blobs/<digest> streamed into a store temp file, sha256
 * computed on the fly, committed with ib_store_commit_blob (mismatch ->
 * deleted, error).  No-op when the store already has it. */
int ib_registry_fetch_blob (ib_registry_t *r, const char *repo, const char *digest,
                            ib_store_t *store, ib_error_t *err);

/* HEAD /v2/<repo>/blobs/<digest>. */
int ib_registry_blob_exists (ib_registry_t *r, const char *repo, const char *digest,
                             bool *exists, ib_error_t *err);

/* Upload a stored blob, skipped when HEAD says it exists: POST
 * /v2/<repo>/blobs/uploads/ then PUT <location>?digest= (monolithic), or,
 * when ib_registry_chunk_size() is set and the blob is larger, PATCH chunks
 * with Content-Range (at least the registry's OCI-Chunk-Min-Length),
 * following each Location, then PUT ?digest= (distribution-spec "Pushing
 * blobs").  Streamed from the store file. */
int ib_registry_push_blob (ib_registry_t *r, const char *repo, const char *digest,
                           ib_store_t *store, ib_error_t *err);

/* PUT /v2/<repo>/manifests/<reference> with Content-Type media_type. */
int ib_registry_put_manifest (ib_registry_t *r, const char *repo, const char *reference,
                              const char *data, size_t len, const char *media_type,
                              ib_error_t *err);

/* Pull `ref_string` for os/arch[/variant] (NULLs: host platform) into the
 * store: manifest (index -> selected manifest), config, layers; then tag it
 * under the normalized reference (ib_ref_string) with IB_SOURCE_ANNOTATION
 * naming the registry/repository it came from.  The manifest comes from the
 * first source of ib_regconf_sources that serves it (registries.conf
 * mirrors in order, then the primary location, maybe rewritten); blobs
 * from that same source.  A blocked registry is refused.  A Docker schema 2
 * manifest is tagged as its OCI rendering (ib_manifest_serialize: same
 * config and layer blobs, OCI media types, so a different manifest digest),
 * because skopeo/umoci read only OCI descriptors from index.json; the
 * registry's bytes are kept as a blob too.  out (may be NULL) gets the
 * descriptor of the manifest tagged; caller clears it.  Progress lines go
 * through ib_info.  Errors start "pull REF: ". */
int ib_pull (ib_store_t *store, const char *ref_string, const char *os, const char *arch,
             const char *variant, ib_descriptor_t *out, ib_error_t *err);

/* Push stored image `src_name` (name or digest) to `dst_ref` (its
 * registries.conf location; never a mirror; blocked refused): blobs then
 * the manifest (its stored bytes and media type, so its digest is kept),
 * tagged with dst_ref's tag (or by digest).  A stored index is pushed with
 * every platform manifest it lists, by digest, before the index (each must
 * be in the store).  Per blob: HEAD says the registry has it -> skipped;
 * else mounted (POST ?mount=&from=, token scope "repository:DST:pull,push
 * repository:SRC:pull") from a repository of the same registry that a
 * stored image was pulled from (IB_SOURCE_ANNOTATION) and lists it, falling
 * back to an upload when the registry answers 202 or refuses; else
 * uploaded.  Errors start "push SRC to DST: ". */
int ib_push (ib_store_t *store, const char *src_name, const char *dst_ref, ib_error_t *err);

/* ib_push to each of `dst_refs` (NULL-terminated) in turn, uploading each
 * blob once: a blob already pushed to the same repository is skipped, one
 * pushed to another repository of the same registry is mounted from there.
 * Stops at the first failure. */
int ib_push_refs (ib_store_t *store, const char *src_name, char *const *dst_refs,
                  ib_error_t *err);

#endif
