/* oci/registry.h — registry client on libcurl (OCI distribution-spec,
 * Docker registry token auth).
 *
 * Auth (distribution token spec, RFC 7617 Basic): on 401 the
 * WWW-Authenticate challenge is parsed; Bearer realm / service / scope ->
 * GET realm?service=..&scope=.. (Basic-authenticated with the user's
 * credentials, or anonymous; an OAuth2 refresh-token POST with an identity
 * token); tokens are reused per scope until shortly before they expire;
 * Basic -> the user's credentials (oci/auth.h).  Authorization goes only to
 * the registry's own origin, never after a redirect to another host.
 * localhost / 127.0.0.1 / [::1] use plain HTTP, others HTTPS with the
 * system CAs.  Errors name the reference and say what happened in
 * words: "manifest unknown", "unauthorized", "connection refused to HOST".
 *
 * TLS (docs/security.md): HTTPS verified with the system CAs plus the
 * registry's certs.d *.crt, with its certs.d client certificate
 * (oci/certs.h); localhost / 127.0.0.1 / [::1] use plain HTTP unless they
 * have certs.d files, --cert-dir is given or --tls-verify=true; insecure
 * registries (ib_registry_add_insecure, registries.conf insecure = true,
 * --tls-verify=false) get HTTPS without verification, or plain HTTP when
 * they do not speak TLS.  Process-wide options: oci/regconf.h.
 *
 * Deadlines (oci/regconf.h ib_regconf_net_limit; docs/cli.md "Network
 * deadlines"): every small request (ping, token, manifest, tag list page,
 * HEAD, image config, upload POST, manifest PUT) must be done, retries
 * included, within $IMGBUILD_REQUEST_TIMEOUT seconds, else it fails with
 * ETIMEDOUT naming the request and the limit; every transfer moving less
 * than 1 KiB/s for $IMGBUILD_STALL_TIMEOUT seconds is cut (ETIMEDOUT,
 * retried where the request may be); blob transfers have no total
 * deadline (ib_fetch_start: the no-progress rule).
 */
#ifndef IB_OCI_REGISTRY_H
#define IB_OCI_REGISTRY_H

#include "common/error.h"
#include "common/progress.h"
#include "oci/manifest.h"
#include "oci/ref.h"
#include <jansson.h>
#include "oci/store.h"
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct ib_registry ib_registry_t;

/* Treat `registry` ("host" or "host:port", as in a reference) as insecure
 * (Docker's and podman's --insecure-registry): HTTPS without certificate
 * verification, falling back to plain HTTP when the first request finds no
 * TLS there.  Process-wide; call before ib_registry_new. */
void ib_registry_add_insecure (const char *registry);

/* A client for the registry that `ref` names (registry host and
 * repository are used: the repository picks repository-scoped credentials).
 * One client serves one thread at a time (it owns one curl handle, which
 * keeps connections alive between requests).
 * No network traffic here: the first request pings GET /v2/ (an insecure
 * registry first tries HTTPS once).  Credentials are looked up (oci/auth.h:
 * ib_auth_find) when the registry first asks for authentication; without
 * any, requests are anonymous.  Errors: the registry's certs.d files (a
 * client certificate without its key, --cert-dir missing, a CA file that
 * cannot be read). */
int ib_registry_new (const ib_ref_t *ref, ib_registry_t **out, ib_error_t *err);
void ib_registry_free (ib_registry_t *r);

/* Check credentials for `registry` ("host" or "host:port") as `imgbuild
 * login` does, before they are stored: GET /v2/; a Basic challenge -> GET
 * /v2/ again with them; a Bearer challenge -> a token request (no scope)
 * authenticated with them (distribution token spec).  A registry that
 * asks for no authentication accepts any.  Errors: EACCES "wrong username
 * or password" when the registry or its token server answers 401;
 * connection and TLS errors as for pulls. */
int ib_registry_login (const char *registry, const char *user, const char *password,
                       ib_error_t *err);

/* GET /v2/<repo>/manifests/<reference> with Accept: IB_MANIFEST_ACCEPT.
 * *data is NUL-terminated, caller frees; *content_type may be NULL, caller frees.
 * `digest` (may be NULL) gets the sha256 of the bytes received; when
 * `reference` is a digest the bytes are verified against it. */
int ib_registry_get_manifest (ib_registry_t *r, const char *repo, const char *reference,
                              char **data, size_t *len, char **content_type,
                              char digest[IB_DIGEST_LEN], ib_error_t *err);

/* Through the registries configuration (oci/regconf.h,
 * ib_regconf_get), as pull and push go.
 * ib_registry_open_pull: GET the manifest `reference` (ref's tag or
 * digest) from the first source that serves it: the mirrors in order, then
 * the primary location; blocked registries refused (EACCES).  On success
 * *r is a client for that source (caller frees, ib_registry_free), ref's
 * registry and repository become the source's, and *data (NUL-terminated,
 * *len bytes) is the manifest, caller frees; on failure the last source's
 * error (ENOENT when it has no such manifest).
 * ib_registry_open_push: a client for ref's push location (never a mirror;
 * ref's registry and repository replaced by it). */
int ib_registry_open_pull (ib_ref_t *ref, const char *reference, ib_registry_t **r, char **data,
                           size_t *len, ib_error_t *err);
int ib_registry_open_push (ib_ref_t *ref, ib_registry_t **r, ib_error_t *err);

/* GET /v2/<repo>/blobs/<digest> streamed into a store temp file, sha256
 * computed on the fly, committed with ib_store_commit_blob (mismatch ->
 * deleted, error).  No-op when the store already has it. */
int ib_registry_fetch_blob (ib_registry_t *r, const char *repo, const char *digest,
                            ib_store_t *store, ib_error_t *err);

/* Parallel blob downloads (distribution-spec "Pulling blobs").
 *
 * ib_fetch_start downloads `n` blobs of `repo` into the store on a
 * background thread that drives libcurl's multi interface: at most 6
 * transfers (and connections to one host) at once, each streamed into
 * <store>/tmp/blob-<hex>.partial (flock'ed, so two processes never write
 * one blob) and through sha256; committed to the store only when the
 * digest (and the descriptor's size, when > 0) match.  What an earlier
 * run left in a partial file is resumed with a Range request; connection
 * errors, stalls (less than 1 KiB/s for $IMGBUILD_STALL_TIMEOUT seconds,
 * default 60), 5xx and 429 are retried with exponential backoff (250 ms
 * doubling, capped at 8 s, jittered) or after the response's Retry-After,
 * resuming from the bytes received; a blob whose bytes do not match its
 * digest is discarded and downloaded again; 6 attempts per blob in all.
 * When no blob received a byte (or completed) for
 * $IMGBUILD_PROGRESS_TIMEOUT seconds (default 180), retries included,
 * every blob still open fails with ETIMEDOUT ("timed out: no progress for
 * N s ...").  Blob transfers have no total deadline (oci/regconf.h:
 * ib_regconf_net_limit).  Redirects
 * (to blob storage) are followed by hand, sending Authorization only to
 * the registry's own origin.  Blobs already in the store are not fetched.
 * `shown` (may be NULL) names the image in messages.  `blobs` is copied.
 * `progress` (may be NULL; not owned, must outlive the fetch) gets one item
 * per blob, added in order: "Downloading" with its bytes, "Retrying in
 * 1.2s (HTTP 503)" while a retry waits, done with "Already exists",
 * "Download complete" or the error; when `unpacking`, a verified blob's
 * item only gets the status "Download complete" and the caller says when
 * it is done (ib_pull_session_layer_done).  The registry client `r` must
 * not be used by the caller until ib_fetch_wait returned. */
typedef struct ib_fetch ib_fetch_t;
int ib_fetch_start (ib_registry_t *r, ib_store_t *store, const char *repo, const char *shown,
                    const ib_descriptor_t *blobs, size_t n, ib_progress_t *progress,
                    bool unpacking, ib_fetch_t **out, ib_error_t *err);

/* A reader's position in one blob of a fetch; zero-initialise. */
typedef struct ib_fetch_cursor
{
  uint64_t pos;          /* bytes read so far */
  unsigned generation;   /* of the partial file when reading started */
  bool started;
} ib_fetch_cursor_t;

/* Read blob `i`'s bytes as they arrive (from the partial file, or the
 * stored blob): blocks until bytes past cur->pos are there; returns their
 * count (<= len), 0 once the blob is complete and verified, -1 with *err
 * when its download failed, or ESTALE when the download had to start over
 * from byte 0 after this cursor read (the caller must then discard what
 * it made of the bytes and, after ib_fetch_wait, read the stored blob).
 * Bytes are returned before the digest is verified: a consumer must not
 * publish its result before this returned 0.  Thread-safe; one cursor
 * per reader. */
ssize_t ib_fetch_read (ib_fetch_t *f, size_t i, ib_fetch_cursor_t *cur, void *buf, size_t len,
                       ib_error_t *err);

/* Wait until every blob is stored or failed: 0, or the first failure. */
int ib_fetch_wait (ib_fetch_t *f, ib_error_t *err);

/* Stop the downloads still running (partial files stay, for resuming)
 * and free f.  NULL ok. */
void ib_fetch_free (ib_fetch_t *f);

/* HEAD /v2/<repo>/blobs/<digest>. */
int ib_registry_blob_exists (ib_registry_t *r, const char *repo, const char *digest,
                             bool *exists, ib_error_t *err);

/* Upload a stored blob, skipped when HEAD says it exists: POST
 * /v2/<repo>/blobs/uploads/ then PUT <location>?digest= (monolithic), or,
 * when ib_regconf_chunk_size() is set and the blob is larger, PATCH chunks
 * with Content-Range (at least the registry's OCI-Chunk-Min-Length),
 * following each Location, then PUT ?digest= (distribution-spec "Pushing
 * blobs").  Streamed from the store file. */
int ib_registry_push_blob (ib_registry_t *r, const char *repo, const char *digest,
                           ib_store_t *store, ib_error_t *err);

/* GET /v2/<repo>/tags/list (distribution-spec "Listing Tags"): every
 * page, following each response's Link rel="next" (a path is taken
 * relative to the registry, a URL on another host is not followed; at
 * most 10000 pages).  *tags is
 * NULL-terminated (empty when the repository has none), caller frees.
 * Errors: ENOENT "name unknown" for a repository the registry does not
 * know; auth and connection errors as for manifests. */
int ib_registry_list_tags (ib_registry_t *r, const char *repo, char ***tags, ib_error_t *err);

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
 * registry's bytes are kept as a blob too, and the tag records their digest
 * and media type (IB_REGISTRY_DIGEST_ANNOTATION, oci/store.h), and the
 * index the manifest was chosen from (IB_REGISTRY_INDEX_ANNOTATION).  out
 * (may be NULL) gets the descriptor of the manifest as the registry served
 * it (the digest shown as "Digest:"); caller clears it.  Progress lines go
 * through ib_info.  Errors start "pull REF: ". */
int ib_pull (ib_store_t *store, const char *ref_string, const char *os, const char *arch,
             const char *variant, ib_descriptor_t *out, ib_error_t *err);

/* ib_pull in two halves, for a caller that unpacks layers while they
 * download.  ib_pull_begin resolves the manifest (index -> platform
 * manifest), stores and parses the config, and starts the layer downloads
 * (ib_fetch_start); ib_pull_session_read reads layer i's compressed bytes
 * as they arrive (ib_fetch_read's contract); ib_pull_end waits for every
 * layer, stores the manifest and tags it (as ib_pull does), and frees the
 * session whatever the outcome; ib_pull_abort stops and frees it (the
 * partial downloads stay, to be resumed).  The manifest and config
 * (borrowed, valid until end/abort) give the layers and diff_ids.  The
 * session shows a progress display "pull REF" (common/progress.h, the
 * mode the CLI set) with an item per layer from begin to end/abort.
 * Errors start "pull REF: ". */
typedef struct ib_pull_session ib_pull_session_t;
int ib_pull_begin (ib_store_t *store, const char *ref_string, const char *os, const char *arch,
                   const char *variant, bool unpacking, ib_pull_session_t **out,
                   ib_error_t *err);
const ib_manifest_t *ib_pull_session_manifest (const ib_pull_session_t *s);
json_t *ib_pull_session_config (const ib_pull_session_t *s);
ssize_t ib_pull_session_read (ib_pull_session_t *s, size_t layer, ib_fetch_cursor_t *cur,
                              void *buf, size_t len, ib_error_t *err);
int ib_pull_end (ib_pull_session_t *s, ib_descriptor_t *out, ib_error_t *err);
void ib_pull_abort (ib_pull_session_t *s);
/* With `unpacking` (ib_pull_begin): layer i is unpacked (ok) or its unpack
 * failed (`why`, copied): its progress item says "Pull complete" or why. */
void ib_pull_session_layer_done (ib_pull_session_t *s, size_t layer, bool ok, const char *why);

/* Push stored image `src_name` (name or digest) to `dst_ref` (its
 * registries.conf location; never a mirror; blocked refused): blobs then
 * the manifest (its stored bytes and media type, so its digest is kept; a
 * pulled image's as the registry served them, ib_store_resolve_served),
 * tagged with dst_ref's tag (or by digest, which must be that digest).  A stored index is pushed with
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
