/* oci/registry_int.h — what the registry client's files share; private to
 * oci/ (never included outside it).  The public API is oci/registry.h.
 *
 * The client (struct ib_registry), one HTTP exchange (xfer_t), and what
 * each file lends the others:
 *   http.c       the libcurl transport: handles, one request, retries,
 *                errors in words (no authentication, no registry API);
 *   auth_http.c  authentication on the wire: the /v2/ ping, tokens, Basic,
 *                401 challenges;
 *   registry.c   the client and its request loop (registry_do);
 *   pull.c, push.c  what registry.c's ib_registry_open_pull / _open_push /
 *                _push_blob wrap.
 * fetch.c (ib_fetch_*) uses them and lends nothing.
 */
#ifndef IB_OCI_REGISTRY_INT_H
#define IB_OCI_REGISTRY_INT_H

#include "common/error.h"
#include "common/progress.h"
#include "common/util.h"
#include "oci/auth.h"
#include "oci/digest.h"
#include "oci/ref.h"
#include "oci/registry.h"
#include "oci/store.h"

#include <curl/curl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MAX_REDIRECTS 10

enum auth_kind
{
  AUTH_NONE,
  AUTH_BEARER,
  AUTH_BASIC
};

struct token
{
  char *scope;                     /* as requested; "" for none */
  char *value;                     /* the bearer token (a secret) */
  int64_t expires_ms, lifetime_ms; /* oci/auth.h: ib_auth_token_t */
};

struct ib_registry
{
  char *name;    /* registry as in references: "docker.io", "localhost:5000" */
  char *host;    /* API host[:port]: "registry-1.docker.io" */
  char *base;    /* "https://registry-1.docker.io" */
  bool pinged;
  /* TLS (setup_handle) */
  bool tls_verify;      /* verify the server's certificate and name */
  bool probe_scheme;    /* insecure registry: HTTPS not tried yet; plain HTTP if it fails */
  char *https_base;     /* "https://HOST", what URLs were built with before the probe */
  char *ca_blob;        /* system CAs + the registry's certs.d *.crt, or NULL: curl's default */
  size_t ca_blob_len;
  char *client_cert, *client_key; /* certs.d *.cert / *.key, or NULL */
  enum auth_kind auth;
  char *realm, *service; /* Bearer challenge from the ping */
  char *repo;            /* repository of the reference: picks repo-scoped credentials */
  ib_auth_creds_t creds; /* looked up when the registry first asks for auth */
  bool creds_loaded;
  bool login;            /* ib_registry_login: errors say "wrong username or password" only */
  struct token *tokens;
  size_t n_tokens;
  CURL *curl;
  char errbuf[CURL_ERROR_SIZE];
};

/* One HTTP exchange: request settings, response, and the body sink. */
typedef struct xfer
{
  /* request */
  const char *method; /* GET HEAD POST PUT */
  const char *accept;
  const char *content_type;
  const char *body; /* in-memory request body (POST/PUT) */
  size_t body_len;
  int upload_fd; /* PUT/PATCH body from this file when >= 0 ... */
  uint64_t upload_base; /* ... its bytes [upload_base, upload_base + upload_size) */
  uint64_t upload_size, upload_off;
  const char *send_range; /* PATCH: Content-Range "start-end" (inclusive), or NULL */
  uint64_t range_from; /* send Range: bytes=N- when > 0 */
  const char *scope;   /* token scope the request needs */
  size_t body_max;     /* cap on the in-memory response body */
  ib_progress_t *progress; /* when set: bytes uploaded go to this display's item */
  int progress_item;
  bool bulk;           /* an answer whose wait grows with a blob's size (the PUT
                        * closing a chunked upload): the stall rule only */
  int64_t deadline_ms; /* small requests: monotonic time by which the request,
                        * retries included, must be done; 0: http_once sets one */

  /* sink for 200/206 bodies when >= 0 (blob downloads) */
  int sink_fd;
  ib_sha256_t *sink_hash;
  uint64_t sink_written;
  int sink_errno;
  bool sink_started;

  /* response */
  long status;
  char *content_type_resp, *location, *www_auth, *content_range;
  char *link; /* Link header (RFC 8288), for paginated lists */
  uint64_t chunk_min; /* OCI-Chunk-Min-Length of the response, 0 when absent */
  char *retry_after; /* Retry-After header value (RFC 9110 10.2.3), or NULL */
  CURLcode curl_code; /* of the last http_once; CURLE_OK when it got a response */
  ib_buf_t resp;
  bool overflow;
  bool transient; /* the failure may go away when retried */
  bool deadline_hit; /* the last http_once ended at deadline_ms */
} xfer_t;

/* ---------- http.c ---------- */

/* Once per process, before the first handle: curl_global_init, and the
 * seed of the backoff jitter. */
void http_global_init (void);
/* Milliseconds of CLOCK_MONOTONIC, what deadlines and retry times use. */
int64_t http_now_ms (void);
void xfer_init (xfer_t *x, const char *method);
void xfer_reset_response (xfer_t *x);
void xfer_free (xfer_t *x);
/* Every request-independent option of a handle that talks to `r`. */
void http_setup_handle (ib_registry_t *r, CURL *c);
/* curl callbacks filling x's response (CURLOPT_HEADERFUNCTION,
 * CURLOPT_WRITEFUNCTION with x as their data). */
size_t http_on_header (char *line, size_t size, size_t nmemb, void *x);
size_t http_on_write (char *data, size_t size, size_t nmemb, void *x);
/* "host[:port]" of a URL, for messages; caller frees. */
char *http_url_host (const char *url);
/* An error in words for a transfer on `handle` that failed with `c`;
 * sets x->transient. */
int http_curl_failure_on (ib_registry_t *r, CURL *handle, const char *errbuf, xfer_t *x,
                          CURLcode c, const char *url, ib_error_t *err);
/* An error in words for x's non-success HTTP status; sets x->transient. */
int http_status_error (xfer_t *x, ib_error_t *err);
bool http_same_origin (const char *a, const char *b);
/* `loc` resolved against `base`; caller frees. */
char *http_resolve_url (const char *base, const char *loc);
long http_retry_delay_ms (int attempt, long status, const char *retry_after_value);
/* One request on `url` (`auth`: a whole "Authorization: ..." line, or NULL). */
int http_once (ib_registry_t *r, xfer_t *x, const char *url, const char *auth, ib_error_t *err);
/* http_once, tried again while a retry may help and is allowed. */
int http_retry (ib_registry_t *r, xfer_t *x, const char *url, const char *auth, ib_error_t *err);

/* ---------- auth_http.c (one thread at a time per client) ---------- */

/* GET /v2/ once per client: how the registry wants authentication. */
int auth_ping (ib_registry_t *r, ib_error_t *err);
/* A token for `scope` from `realm`, cached in r. */
int auth_fetch_token (ib_registry_t *r, const char *realm, const char *service, const char *scope,
                      ib_error_t *err);
/* *out: the Authorization line for a request needing `scope`, or NULL. */
int auth_header (ib_registry_t *r, const char *scope, char **out, ib_error_t *err);
/* After a 401 to x: learn from its challenge so that one retry can succeed. */
int auth_handle_401 (ib_registry_t *r, xfer_t *x, ib_error_t *err);
/* The error for a 401 that persists after auth_handle_401. */
int auth_refused (ib_registry_t *r, const char *www_authenticate, const char *scope,
                  ib_error_t *err);
int auth_wrong_password (ib_registry_t *r, ib_error_t *err);

/* ---------- registry.c ---------- */

bool registry_is_insecure (const char *registry);
/* An insecure registry: HTTPS tried once, plain HTTP when it has no TLS. */
int registry_probe_scheme (ib_registry_t *r, ib_error_t *err);
/* A URL made before registry_probe_scheme chose plain HTTP, made right;
 * caller frees. */
char *registry_rebase_url (ib_registry_t *r, const char *url);
/* A request to the registry: probe, ping, authenticate, follow redirects. */
int registry_do (ib_registry_t *r, xfer_t *x, const char *url, ib_error_t *err);
/* "repository:REPO:pull" / "repository:REPO:pull,push"; caller frees. */
char *registry_pull_scope (const char *repo);
char *registry_push_scope (const char *repo);
/* GET a small document (a manifest, an image config) whole into memory:
 * <base>/v2/<repo>/<kind>/<reference> with the pull scope, `accept`
 * (may be NULL), at most `max` bytes; an answer other than 200 is an
 * error (http_status_error).  On success x->resp holds the bytes and
 * `got` their sha256 digest ("sha256:<hex>"), for the caller to check;
 * *x (xfer_init'ed here) is the caller's to xfer_free, also on failure. */
int registry_get_small (ib_registry_t *r, const char *repo, const char *kind,
                        const char *reference, const char *accept, size_t max, xfer_t *x,
                        char got[IB_DIGEST_LEN], ib_error_t *err);

/* ---------- pull.c, push.c ---------- */

int pull_open (ib_ref_t *ref, const char *reference, const char *shown, ib_registry_t **r,
               char **data, size_t *len, char **ctype, char mdigest[IB_DIGEST_LEN],
               ib_error_t *err);
int push_target (ib_ref_t *ref, ib_error_t *err);
int push_upload_blob (ib_registry_t *r, const char *repo, const char *digest, ib_store_t *store,
                      const char *from, char how[64], ib_progress_t *progress, int item,
                      ib_error_t *err);

#endif
