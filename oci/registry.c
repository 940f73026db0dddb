/* oci/registry.c — registry client on libcurl's easy interface.
 *
 * OCI distribution-spec (pull: GET manifests / blobs; push: POST uploads,
 * monolithic PUT ?digest=, PUT manifests) and the Docker registry token
 * authentication spec (WWW-Authenticate: Bearer realm/service/scope ->
 * anonymous or Basic-authenticated GET realm -> {"token"|"access_token"}).
 *
 * Redirects are followed by hand: the Authorization header goes only to
 * the registry's own scheme://host:port, never to a blob CDN it redirects to.
 */
#include "oci/registry.h"
#include "common/progress.h"
#include "common/util.h"
#include "oci/auth.h"
#include "oci/certs.h"
#include "oci/digest.h"
#include "oci/manifest.h"
#include "oci/regconf.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MANIFEST_MAX (4 << 20)  /* bytes; as containerd limits manifests */
#define ERROR_BODY_MAX (64 << 10)
#define TOKEN_BODY_MAX (1 << 20)
#define MAX_REDIRECTS 10
#define BLOB_ATTEMPTS 3
#define REQUEST_ATTEMPTS 5        /* manifests, tokens, pings: tries in all */
#define RETRY_BASE_MS 250         /* backoff: 250 ms, 500 ms, 1 s, .. */
#define RETRY_CAP_MS 8000         /* .. at most 8 s between tries */
#define RETRY_AFTER_CAP_MS 60000  /* a server's Retry-After is honoured up to 60 s */
#define CONFIG_MAX (8 << 20)      /* bytes; image configs are read into memory */
#define INDEX_DEPTH_MAX 4         /* an index in an index in an index in an index */
#define USER_AGENT "imgbuild/0.1"

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

/* A small request (docs/cli.md "Network deadlines"): neither a blob's bytes
 * nor an answer that waits on them; it gets a total deadline
 * (IB_NET_REQUEST).  Bulk transfers only the stall rule (IB_NET_STALL). */
static bool
xfer_small (const xfer_t *x)
{
  return x->sink_fd < 0 && x->upload_fd < 0 && !x->bulk;
}

static int64_t
now_ms (void)
{
  struct timespec ts;
  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
xfer_init (xfer_t *x, const char *method)
{
  memset (x, 0, sizeof *x);
  x->method = method;
  x->upload_fd = -1;
  x->sink_fd = -1;
  x->body_max = ERROR_BODY_MAX;
}

static void
xfer_reset_response (xfer_t *x)
{
  x->status = 0;
  free (x->content_type_resp);
  free (x->location);
  free (x->www_auth);
  free (x->content_range);
  free (x->retry_after);
  free (x->link);
  x->content_type_resp = x->location = x->www_auth = x->content_range = x->retry_after = NULL;
  x->link = NULL;
  x->chunk_min = 0;
  ib_buf_free (&x->resp);
  x->overflow = false;
}

static void
xfer_free (xfer_t *x)
{
  xfer_reset_response (x);
}

/* ---------- insecure registries ---------- */

static pthread_mutex_t insecure_lock = PTHREAD_MUTEX_INITIALIZER;
static char **insecure_registries;

void
ib_registry_add_insecure (const char *registry)
{
  pthread_mutex_lock (&insecure_lock);
  ib_strv_push (&insecure_registries, registry);
  pthread_mutex_unlock (&insecure_lock);
}

static bool
is_insecure (const char *registry)
{
  bool r = false;
  pthread_mutex_lock (&insecure_lock);
  for (size_t i = 0; insecure_registries && insecure_registries[i]; i++)
    if (strcmp (insecure_registries[i], registry) == 0)
      r = true;
  pthread_mutex_unlock (&insecure_lock);
  return r;
}

/* ---------- WWW-Authenticate ---------- */

static bool
is_tchar (char c)
{
  return isalnum ((unsigned char) c) || (c && strchr ("!#$%&'*+.^_`|~-", c));
}

void
ib_auth_challenge_clear (ib_auth_challenge_t *c)
{
  if (c == NULL)
    return;
  free (c->scheme);
  free (c->realm);
  free (c->service);
  free (c->scope);
  memset (c, 0, sizeof *c);
}

int
ib_auth_challenge_parse (const char *h, ib_auth_challenge_t *out, ib_error_t *err)
{
  memset (out, 0, sizeof *out);
  const char *p = h ? h : "";
  while (*p == ' ' || *p == '\t')
    p++;
  const char *s = p;
  while (is_tchar (*p))
    p++;
  if (p == s)
    return ib_error_set (err, EPROTO, "WWW-Authenticate \"%s\": no auth scheme", h ? h : "");
  out->scheme = xstrndup (s, (size_t) (p - s));
  for (;;)
    {
      while (*p == ' ' || *p == '\t' || *p == ',')
        p++;
      if (*p == '\0')
        return 0;
      const char *k = p;
      while (is_tchar (*p))
        p++;
      size_t kn = (size_t) (p - k);
      const char *after = p;
      while (*p == ' ' || *p == '\t')
        p++;
      if (kn == 0 || *p != '=')
        {
          /* token68 or the start of another challenge: stop at a new scheme */
          if (kn > 0 && (*after == ' ' || *after == '\t'))
            return 0;
          if (kn > 0 && (*after == '\0' || *after == ','))
            continue; /* lone token68, ignore */
          ib_auth_challenge_clear (out);
          return ib_error_set (err, EPROTO, "WWW-Authenticate \"%s\": malformed parameters", h);
        }
      p++;
      while (*p == ' ' || *p == '\t')
        p++;
      ib_buf_t v = { 0 };
      if (*p == '"')
        {
          p++;
          while (*p && *p != '"')
            {
              if (*p == '\\' && p[1])
                p++;
              ib_buf_append (&v, p, 1);
              p++;
            }
          if (*p != '"')
            {
              ib_buf_free (&v);
              ib_auth_challenge_clear (out);
              return ib_error_set (err, EPROTO, "WWW-Authenticate \"%s\": unterminated quoted string",
                                   h);
            }
          p++;
        }
      else
        {
          const char *vs = p;
          while (*p && *p != ',' && *p != ' ' && *p != '\t')
            p++;
          ib_buf_append (&v, vs, (size_t) (p - vs));
        }
      char **slot = NULL;
      if (kn == 5 && strncasecmp (k, "realm", 5) == 0)
        slot = &out->realm;
      else if (kn == 7 && strncasecmp (k, "service", 7) == 0)
        slot = &out->service;
      else if (kn == 5 && strncasecmp (k, "scope", 5) == 0)
        slot = &out->scope;
      if (slot)
        {
          free (*slot);
          *slot = ib_buf_steal (&v);
        }
      else
        ib_buf_free (&v);
    }
}

/* ---------- client ---------- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;

static void
curl_init_once (void)
{
  curl_global_init (CURL_GLOBAL_DEFAULT);
  srandom ((unsigned) time (NULL) ^ (unsigned) getpid ()); /* backoff jitter */
}

/* Decide the scheme and TLS settings of a new client (docs/security.md):
 *   insecure (--insecure-registry, registries.conf insecure = true,
 *   --tls-verify=false): HTTPS without verification, plain HTTP when the
 *   server does not speak TLS (probed by the first request);
 *   loopback: plain HTTP, unless it has certs.d files or --cert-dir, or
 *   --tls-verify=true was given;
 *   others: HTTPS verified with the system CAs plus certs.d's *.crt. */
static int
tls_configure (ib_registry_t *r, bool loopback, ib_error_t *err)
{
  ib_certs_t certs;
  if (ib_certs_find (r->name, ib_registry_cert_dir (), NULL, &certs, err) < 0)
    return -1;
  int verify = ib_registry_tls_verify ();
  bool insecure = is_insecure (r->name) || verify == 0;
  r->https_base = xasprintf ("https://%s", r->host);
  r->tls_verify = !insecure;
  if (insecure)
    r->probe_scheme = true;
  else if (loopback && certs.dir == NULL && verify != 1)
    {
      r->base = xasprintf ("http://%s", r->host);
      ib_certs_clear (&certs);
      return 0;
    }
  r->base = xstrdup (r->https_base);
  if (certs.dir)
    ib_debug ("registry %s: TLS files from %s", r->name, certs.dir);
  const char *system_bundle = NULL;
  curl_easy_getinfo (r->curl, CURLINFO_CAINFO, &system_bundle);
  int ret = ib_certs_ca_bundle (&certs, system_bundle, &r->ca_blob, &r->ca_blob_len, err);
  r->client_cert = steal_pointer (&certs.client_cert);
  r->client_key = steal_pointer (&certs.client_key);
  ib_certs_clear (&certs);
  return ret;
}

/* Every option of a curl easy handle that does not depend on the request:
 * user agent, protocols, redirects (never followed by curl: see
 * registry_do), timeouts, TLS verification, CA certificates, client
 * certificate.  Called for every handle that talks to the registry `r`. */
static bool retryable_failure (CURLcode c, long status);

static void
setup_handle (ib_registry_t *r, CURL *c)
{
  curl_easy_setopt (c, CURLOPT_USERAGENT, USER_AGENT);
  curl_easy_setopt (c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt (c, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt (c, CURLOPT_UNRESTRICTED_AUTH, 0L);
  curl_easy_setopt (c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt (c, CURLOPT_CONNECTTIMEOUT, 30L);
  /* less than this many bytes/s ... */
  curl_easy_setopt (c, CURLOPT_LOW_SPEED_LIMIT, (long) IB_NET_STALL_MIN_SPEED);
  /* ... for this long: stalled (CURLE_OPERATION_TIMEDOUT) */
  curl_easy_setopt (c, CURLOPT_LOW_SPEED_TIME, ib_registry_net_limit (IB_NET_STALL));
  curl_easy_setopt (c, CURLOPT_SSL_VERIFYPEER, r->tls_verify ? 1L : 0L);
  curl_easy_setopt (c, CURLOPT_SSL_VERIFYHOST, r->tls_verify ? 2L : 0L);
  if (r->ca_blob)
    {
      struct curl_blob blob = { .data = r->ca_blob, .len = r->ca_blob_len,
                                .flags = CURL_BLOB_NOCOPY }; /* r outlives its handles */
      curl_easy_setopt (c, CURLOPT_CAINFO_BLOB, &blob);
    }
  if (r->client_cert)
    {
      curl_easy_setopt (c, CURLOPT_SSLCERT, r->client_cert);
      curl_easy_setopt (c, CURLOPT_SSLCERTTYPE, "PEM");
      curl_easy_setopt (c, CURLOPT_SSLKEY, r->client_key);
      curl_easy_setopt (c, CURLOPT_SSLKEYTYPE, "PEM");
    }
}

int
ib_registry_new (const ib_ref_t *ref, ib_registry_t **out, ib_error_t *err)
{
  *out = NULL;
  pthread_once (&curl_once, curl_init_once);
  ib_registry_t *r = xmalloc (sizeof *r);
  r->name = xstrdup (ref->registry);
  r->host = xstrdup (ib_ref_api_host (ref));
  r->repo = xstrdup (ref->repository);
  r->curl = curl_easy_init ();
  if (r->curl == NULL)
    {
      ib_registry_free (r);
      return ib_error_set (err, ENOMEM, "registry %s: cannot create a curl handle", ref->registry);
    }
  if (tls_configure (r, ib_ref_plain_http (ref), err) < 0)
    {
      ib_registry_free (r);
      return ib_error_prefix (err, "registry %s", ref->registry);
    }
  *out = r;
  return 0;
}

void
ib_registry_free (ib_registry_t *r)
{
  if (r == NULL)
    return;
  if (r->curl)
    curl_easy_cleanup (r->curl);
  for (size_t i = 0; i < r->n_tokens; i++)
    {
      free (r->tokens[i].scope);
      explicit_bzero (r->tokens[i].value, strlen (r->tokens[i].value));
      free (r->tokens[i].value);
    }
  free (r->tokens);
  free (r->repo);
  ib_auth_creds_clear (&r->creds);
  free (r->name);
  free (r->host);
  free (r->base);
  free (r->realm);
  free (r->service);
  free (r->https_base);
  free (r->ca_blob);
  free (r->client_cert);
  free (r->client_key);
  free (r);
}

/* ---------- curl callbacks ---------- */

static char *
trim_dup (const char *s, size_t n)
{
  while (n > 0 && (*s == ' ' || *s == '\t'))
    {
      s++;
      n--;
    }
  while (n > 0 && (s[n - 1] == '\r' || s[n - 1] == '\n' || s[n - 1] == ' ' || s[n - 1] == '\t'))
    n--;
  return xstrndup (s, n);
}

static bool
header_is (const char *line, size_t n, const char *name, const char **value, size_t *vlen)
{
  size_t k = strlen (name);
  if (n <= k || strncasecmp (line, name, k) != 0 || line[k] != ':')
    return false;
  *value = line + k + 1;
  *vlen = n - k - 1;
  return true;
}

static size_t
on_header (char *line, size_t size, size_t nmemb, void *ud)
{
  xfer_t *x = ud;
  size_t n = size * nmemb;
  const char *v;
  size_t vn;
  if (n >= 5 && strncmp (line, "HTTP/", 5) == 0)
    {
      /* a new response (after 100 Continue): forget the previous one's headers */
      xfer_reset_response (x);
      const char *sp = memchr (line, ' ', n);
      if (sp)
        x->status = strtol (sp + 1, NULL, 10);
    }
  else if (header_is (line, n, "Content-Type", &v, &vn))
    {
      free (x->content_type_resp);
      x->content_type_resp = trim_dup (v, vn);
    }
  else if (header_is (line, n, "Location", &v, &vn))
    {
      free (x->location);
      x->location = trim_dup (v, vn);
    }
  else if (header_is (line, n, "Link", &v, &vn))
    {
      free (x->link);
      x->link = trim_dup (v, vn);
    }
  else if (header_is (line, n, "Retry-After", &v, &vn))
    {
      free (x->retry_after);
      x->retry_after = trim_dup (v, vn);
    }
  else if (header_is (line, n, "Content-Range", &v, &vn))
    {
      free (x->content_range);
      x->content_range = trim_dup (v, vn);
    }
  else if (header_is (line, n, "OCI-Chunk-Min-Length", &v, &vn))
    {
      cleanup_free char *val = trim_dup (v, vn);
      char *end;
      unsigned long long m = strtoull (val, &end, 10);
      x->chunk_min = (*val && *end == '\0') ? (uint64_t) m : 0;
    }
  else if (header_is (line, n, "WWW-Authenticate", &v, &vn))
    {
      char *val = trim_dup (v, vn);
      /* several challenges: prefer Bearer */
      if (x->www_auth == NULL || strncasecmp (val, "Bearer", 6) == 0)
        {
          free (x->www_auth);
          x->www_auth = val;
        }
      else
        free (val);
    }
  return n;
}

static size_t
on_write (char *data, size_t size, size_t nmemb, void *ud)
{
  xfer_t *x = ud;
  size_t n = size * nmemb;
  if (x->sink_fd >= 0 && (x->status == 200 || x->status == 206))
    {
      if (!x->sink_started)
        {
          x->sink_started = true;
          if (x->status == 200 && x->sink_written > 0)
            {
              /* the server ignored our Range: start over */
              if (ftruncate (x->sink_fd, 0) < 0 || lseek (x->sink_fd, 0, SEEK_SET) < 0)
                {
                  x->sink_errno = errno;
                  return 0;
                }
              ib_sha256_free (x->sink_hash);
              x->sink_hash = ib_sha256_new ();
              x->sink_written = 0;
            }
        }
      const char *p = data;
      size_t left = n;
      while (left > 0)
        {
          ssize_t w = write (x->sink_fd, p, left);
          if (w < 0 && errno == EINTR)
            continue;
          if (w < 0)
            {
              x->sink_errno = errno;
              return 0;
            }
          p += w;
          left -= (size_t) w;
        }
      ib_sha256_update (x->sink_hash, data, n);
      x->sink_written += n;
      return n;
    }
  if (x->resp.len + n > x->body_max)
    {
      x->overflow = true;
      /* error bodies are only informative: keep the start, drop the rest */
      return (x->status >= 200 && x->status < 300) ? 0 : n;
    }
  ib_buf_append (&x->resp, data, n);
  return n;
}

static size_t
on_read (char *buf, size_t size, size_t nmemb, void *ud)
{
  xfer_t *x = ud;
  size_t want = size * nmemb;
  if (x->upload_off >= x->upload_size)
    return 0;
  if (want > x->upload_size - x->upload_off)
    want = (size_t) (x->upload_size - x->upload_off);
  for (;;)
    {
      ssize_t n = pread (x->upload_fd, buf, want, (off_t) (x->upload_base + x->upload_off));
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return CURL_READFUNC_ABORT;
      x->upload_off += (uint64_t) n;
      return (size_t) n;
    }
}

/* CURLOPT_XFERINFOFUNCTION: upload bytes so far to the progress display. */
static int
on_xferinfo (void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow)
{
  xfer_t *x = ud;
  (void) dltotal, (void) dlnow, (void) ultotal;
  ib_progress_update (x->progress, x->progress_item, (int64_t) (x->upload_base + (uint64_t) ulnow));
  return 0;
}

/* ---------- errors ---------- */

/* "host[:port]" of a URL, for messages; caller frees. */
static char *
url_host (const char *url)
{
  CURLU *u = curl_url ();
  char *host = NULL, *port = NULL, *r;
  if (curl_url_set (u, CURLUPART_URL, url, 0) == CURLUE_OK)
    {
      curl_url_get (u, CURLUPART_HOST, &host, 0);
      curl_url_get (u, CURLUPART_PORT, &port, 0);
    }
  if (host && port)
    r = xasprintf ("%s:%s", host, port);
  else
    r = xstrdup (host ? host : url);
  curl_free (host);
  curl_free (port);
  curl_url_cleanup (u);
  return r;
}

/* "host:port/path" of `url`, without scheme and query (a token URL's
 * query names the account), for messages; caller frees. */
static char *
url_shown (const char *url)
{
  CURLU *u = curl_url ();
  char *path = NULL;
  if (curl_url_set (u, CURLUPART_URL, url, 0) == CURLUE_OK)
    curl_url_get (u, CURLUPART_PATH, &path, 0);
  cleanup_free char *host = url_host (url);
  char *r = xasprintf ("%s%s", host, path ? path : "");
  curl_free (path);
  curl_url_cleanup (u);
  return r;
}

static int curl_failure_on (ib_registry_t *r, CURL *handle, const char *errbuf, xfer_t *x,
                            CURLcode c, const char *url, ib_error_t *err);

static int
curl_failure (ib_registry_t *r, xfer_t *x, CURLcode c, const char *url, ib_error_t *err)
{
  return curl_failure_on (r, r->curl, r->errbuf, x, c, url, err);
}

/* An error in words for a failed transfer on `handle` (its error buffer
 * `errbuf`); sets x->transient when a retry may succeed. */
static int
curl_failure_on (ib_registry_t *r, CURL *handle, const char *errbuf, xfer_t *x, CURLcode c,
                 const char *url, ib_error_t *err)
{
  cleanup_free char *host = url_host (url);
  const char *detail = errbuf[0] ? errbuf : curl_easy_strerror (c);
  x->transient = false;
  if (x->sink_errno)
    return ib_error_sys (err, x->sink_errno, "write downloaded data");
  if (x->overflow)
    return ib_error_set (err, EFBIG, "%s: response larger than %zu bytes", host, x->body_max);
  if (r->client_cert == NULL
      && (strstr (detail, "alert certificate required") || strstr (detail, "alert bad certificate")
          || strstr (detail, "alert handshake failure")))
    return ib_error_set (err, EACCES,
                         "%s: the registry wants a TLS client certificate (%s); put NAME.cert "
                         "and NAME.key in certs.d/%s/ or in --cert-dir DIR",
                         host, detail, r->name);
  x->transient = retryable_failure (c, 0);
  switch (c)
    {
    case CURLE_COULDNT_CONNECT:
      {
        long oe = 0;
        curl_easy_getinfo (handle, CURLINFO_OS_ERRNO, &oe);
        switch (oe)
          {
          case ECONNREFUSED:
            return ib_error_set (err, ECONNREFUSED, "connect to %s: connection refused", host);
          case ETIMEDOUT:
            x->transient = true;
            return ib_error_set (err, ETIMEDOUT, "connect to %s: timed out", host);
          case ENETUNREACH:
            return ib_error_set (err, ENETUNREACH, "connect to %s: network unreachable", host);
          case EHOSTUNREACH:
            return ib_error_set (err, EHOSTUNREACH, "connect to %s: host unreachable", host);
          default:
            return ib_error_set (err, oe ? (int) oe : ECONNREFUSED, "connect to %s: %s", host,
                                 detail);
          }
      }
    case CURLE_COULDNT_RESOLVE_HOST:
      return ib_error_set (err, ENOENT, "resolve %s: unknown host name (%s)", host, detail);
    case CURLE_COULDNT_RESOLVE_PROXY:
      return ib_error_set (err, ENOENT, "resolve proxy for %s: %s", host, detail);
    case CURLE_OPERATION_TIMEDOUT:
      if (x->deadline_hit)
        {
          /* the request's deadline covers its retries: none is left */
          x->transient = false;
          cleanup_free char *what = url_shown (url);
          return ib_error_set (err, ETIMEDOUT,
                               "%s %s: timed out: no complete answer within the %ld s deadline "
                               "of one request (retries included; set %s=SECONDS to allow more)",
                               x->method, what, ib_registry_net_limit (IB_NET_REQUEST),
                               ib_registry_net_limit_var (IB_NET_REQUEST));
        }
      if (strstr (detail, "too slow"))
        return ib_error_set (err, ETIMEDOUT,
                             "%s: timed out: stalled, less than %d bytes/s for %ld s (set %s="
                             "SECONDS to allow more)",
                             host, IB_NET_STALL_MIN_SPEED, ib_registry_net_limit (IB_NET_STALL),
                             ib_registry_net_limit_var (IB_NET_STALL));
      return ib_error_set (err, ETIMEDOUT, "%s: timed out (%s)", host, detail);
    case CURLE_PEER_FAILED_VERIFICATION:
      return ib_error_set (err, EPROTO,
                           "%s: TLS certificate verification failed (%s); put the registry's CA "
                           "certificate in certs.d/%s/ or --cert-dir DIR, or pass "
                           "--tls-verify=false",
                           host, detail, r->name);
    case CURLE_SSL_CERTPROBLEM:
      return ib_error_set (err, EINVAL, "%s: client certificate %s: %s", host,
                           r->client_cert ? r->client_cert : "", detail);
    case CURLE_SSL_CACERT_BADFILE:
      return ib_error_set (err, EINVAL, "%s: CA certificates: %s", host, detail);
    case CURLE_SSL_CONNECT_ERROR:
      return ib_error_set (err, EPROTO,
                           "%s: TLS handshake failed (%s); a plain-HTTP registry needs "
                           "--insecure-registry",
                           host, detail);
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      if (x->status == 0 && r->client_cert == NULL && ib_str_has_prefix (url, "https:"))
        /* a registry that wants a client certificate often just hangs up */
        return ib_error_set (err, EIO,
                             "%s: connection broken before any answer (%s); if the registry "
                             "wants a TLS client certificate, put NAME.cert and NAME.key in "
                             "certs.d/%s/ or in --cert-dir DIR",
                             host, detail, r->name);
      return ib_error_set (err, EIO, "%s: connection broken (%s)", host, detail);
    default:
      return ib_error_set (err, EIO, "%s: %s", host, detail);
    }
}

/* Error codes of distribution-spec "Error Codes": our words, and the
 * spec's message, which is not repeated when a registry sends it verbatim. */
struct code_phrase
{
  const char *code, *phrase, *spec_message;
};

static const struct code_phrase code_phrases[] = {
  { "MANIFEST_UNKNOWN", "manifest unknown (the registry has no such image or tag)", "manifest unknown" },
  { "NAME_UNKNOWN", "name unknown (the registry has no such repository)",
    "repository name not known to registry" },
  { "BLOB_UNKNOWN", "blob unknown (the registry does not have it)", "blob unknown to registry" },
  { "UNAUTHORIZED", "unauthorized", NULL },
  { "DENIED", "denied (access to the resource is not allowed)",
    "requested access to the resource is denied" },
  { "TOOMANYREQUESTS", "too many requests (the registry rate-limits this client)", NULL },
  { "NAME_INVALID", "invalid repository name", "invalid repository name" },
  { "TAG_INVALID", "manifest tag does not match the URL", "manifest tag did not match URI" },
  { "MANIFEST_INVALID", "manifest invalid", "manifest invalid" },
  { "MANIFEST_BLOB_UNKNOWN", "the manifest references a blob the registry does not have",
    "blob unknown to registry" },
  { "DIGEST_INVALID", "digest invalid (the uploaded content does not match it)",
    "provided digest did not match uploaded content" },
  { "SIZE_INVALID", "size invalid (the uploaded length does not match)",
    "provided length did not match content length" },
  { "BLOB_UPLOAD_UNKNOWN", "blob upload unknown", "blob upload unknown to registry" },
  { "BLOB_UPLOAD_INVALID", "blob upload invalid", "blob upload invalid" },
  { "UNSUPPORTED", "the registry does not support this operation", "The operation is unsupported." },
};

static int
status_errno (long status)
{
  if (status == 404)
    return ENOENT;
  if (status == 401 || status == 403)
    return EACCES;
  if (status == 429)
    return EAGAIN;
  if (status >= 500)
    return EIO;
  return EPROTO;
}

/* The registry's own words for "code" with '_' as ' ', lowercased. */
static bool
same_words (const char *code, const char *msg)
{
  size_t i = 0;
  for (; code[i] && msg[i]; i++)
    {
      char c = code[i] == '_' ? ' ' : (char) tolower ((unsigned char) code[i]);
      if (c != tolower ((unsigned char) msg[i]))
        return false;
    }
  return code[i] == '\0' && msg[i] == '\0';
}

/* An error from a non-success HTTP status, in words: the registry's JSON
 * error code (distribution-spec "Error Codes") when the body has one. */
static int
status_error (xfer_t *x, ib_error_t *err)
{
  int e = status_errno (x->status);
  json_t *j = x->resp.len ? json_loadb (x->resp.data, x->resp.len, 0, NULL) : NULL;
  json_t *first = json_array_get (json_object_get (j, "errors"), 0);
  const char *code = json_string_value (json_object_get (first, "code"));
  const char *msg = json_string_value (json_object_get (first, "message"));
  int ret;
  if (code)
    {
      const char *phrase = NULL, *spec = NULL;
      for (size_t i = 0; i < sizeof code_phrases / sizeof code_phrases[0]; i++)
        if (strcmp (code_phrases[i].code, code) == 0)
          {
            phrase = code_phrases[i].phrase;
            spec = code_phrases[i].spec_message;
          }
      cleanup_free char *lc = NULL;
      if (phrase == NULL)
        {
          lc = xstrdup (code);
          for (char *p = lc; *p; p++)
            *p = *p == '_' ? ' ' : (char) tolower ((unsigned char) *p);
          phrase = lc;
        }
      if (msg && *msg && !same_words (code, msg) && !(spec && strcasecmp (spec, msg) == 0))
        ret = ib_error_set (err, e, "%s: %s", phrase, msg);
      else
        ret = ib_error_set (err, e, "%s", phrase);
    }
  else
    {
      switch (x->status)
        {
        case 401:
          ret = ib_error_set (err, e, "unauthorized");
          break;
        case 403:
          ret = ib_error_set (err, e, "denied (access to the resource is not allowed)");
          break;
        case 404:
          ret = ib_error_set (err, e, "not found");
          break;
        case 405:
          ret = ib_error_set (err, e, "method not allowed (the registry does not support this operation)");
          break;
        case 429:
          ret = ib_error_set (err, e, "too many requests (the registry rate-limits this client)");
          break;
        default:
          if (x->status >= 500)
            ret = ib_error_set (err, e, "registry server error (HTTP %ld)", x->status);
          else
            ret = ib_error_set (err, e, "unexpected HTTP status %ld", x->status);
        }
    }
  x->transient = retryable_failure (CURLE_OK, x->status);
  if (j)
    json_decref (j);
  return ret;
}

/* ---------- requests ---------- */

/* Does `url` point at the registry itself (same scheme, host and port)? */
static bool
same_origin (const char *a, const char *b)
{
  CURLU *ua = curl_url (), *ub = curl_url ();
  bool same = false;
  if (curl_url_set (ua, CURLUPART_URL, a, 0) == CURLUE_OK
      && curl_url_set (ub, CURLUPART_URL, b, 0) == CURLUE_OK)
    {
      static const CURLUPart parts[] = { CURLUPART_SCHEME, CURLUPART_HOST, CURLUPART_PORT };
      same = true;
      for (size_t i = 0; i < 3 && same; i++)
        {
          char *pa = NULL, *pb = NULL;
          curl_url_get (ua, parts[i], &pa, CURLU_DEFAULT_PORT);
          curl_url_get (ub, parts[i], &pb, CURLU_DEFAULT_PORT);
          same = pa && pb && strcasecmp (pa, pb) == 0;
          curl_free (pa);
          curl_free (pb);
        }
    }
  curl_url_cleanup (ua);
  curl_url_cleanup (ub);
  return same;
}

/* Resolve a Location header against the URL it came from; caller frees. */
static char *
resolve_url (const char *base, const char *loc)
{
  CURLU *u = curl_url ();
  char *out = NULL, *r;
  if (curl_url_set (u, CURLUPART_URL, base, 0) == CURLUE_OK
      && curl_url_set (u, CURLUPART_URL, loc, 0) == CURLUE_OK
      && curl_url_get (u, CURLUPART_URL, &out, 0) == CURLUE_OK)
    r = xstrdup (out);
  else
    r = xstrdup (loc);
  curl_free (out);
  curl_url_cleanup (u);
  return r;
}

/* ---------- retries ---------- */

/* May trying the same request again succeed?  Connection failures other than
 * a refused connection (dropped, reset, stalled, timed out), 408, 429 and
 * 5xx other than 501/505 (not implemented, version not supported).
 * `c` is the transfer's result; `status` counts only when c is CURLE_OK. */
static bool
retryable_failure (CURLcode c, long status)
{
  switch (c)
    {
    case CURLE_OK:
      return status == 408 || status == 429 || (status >= 500 && status != 501 && status != 505);
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return true;
    default:
      return false;
    }
}

/* Milliseconds to wait before try number attempt+1 after try `attempt`
 * (1-based) failed.  A Retry-After value (RFC 9110 section 10.2.3: delay
 * seconds, or an HTTP-date) sent with a 429 or 5xx is honoured, capped at
 * RETRY_AFTER_CAP_MS; otherwise exponential backoff with jitter: a random
 * time between half and all of RETRY_BASE_MS * 2^(attempt-1), at most
 * RETRY_CAP_MS. */
static long
retry_delay_ms (int attempt, long status, const char *retry_after_value)
{
  const char *ra = retry_after_value;
  if (ra && (status == 429 || status >= 500))
    {
      while (*ra == ' ' || *ra == '\t')
        ra++;
      long long ms = -1;
      if (isdigit ((unsigned char) *ra))
        {
          char *end;
          long long secs = strtoll (ra, &end, 10);
          while (*end == ' ' || *end == '\t')
            end++;
          if (*end == '\0')
            ms = secs > RETRY_AFTER_CAP_MS / 1000 ? RETRY_AFTER_CAP_MS : secs * 1000;
        }
      else if (*ra)
        {
          time_t t = curl_getdate (ra, NULL);
          if (t != (time_t) -1)
            {
              struct timespec now;
              clock_gettime (CLOCK_REALTIME, &now);
              ms = (long long) t * 1000 - ((long long) now.tv_sec * 1000 + now.tv_nsec / 1000000);
              if (ms < 0)
                ms = 0;
            }
        }
      if (ms >= 0)
        return (long) (ms > RETRY_AFTER_CAP_MS ? RETRY_AFTER_CAP_MS : ms);
    }
  long d = RETRY_CAP_MS;
  if (attempt < 1)
    attempt = 1;
  if (attempt <= 6)
    d = RETRY_BASE_MS << (attempt - 1);
  if (d > RETRY_CAP_MS)
    d = RETRY_CAP_MS;
  return d / 2 + (long) (random () % (d / 2 + 1));
}

static void
sleep_ms (long ms)
{
  struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
  while (nanosleep (&ts, &ts) < 0 && errno == EINTR)
    ;
}

static int http_once (ib_registry_t *r, xfer_t *x, const char *url, const char *auth,
                      ib_error_t *err);

/* http_once, tried again on a retryable failure (retryable_failure,
 * retry_delay_ms) up to REQUEST_ATTEMPTS times in all, for requests that
 * can be repeated as they are: not a POST, no body streamed from a file and
 * no response streamed into one (blob downloads have their own loop, which
 * resumes).  The last try's outcome is returned: a status such as 503 for
 * the caller to judge, or the connection error. */
static int
http_retry (ib_registry_t *r, xfer_t *x, const char *url, const char *auth, ib_error_t *err)
{
  bool repeatable = x->sink_fd < 0 && x->upload_fd < 0 && strcmp (x->method, "POST") != 0;
  bool own_deadline = xfer_small (x) && x->deadline_ms == 0;
  if (own_deadline)
    x->deadline_ms = now_ms () + ib_registry_net_limit (IB_NET_REQUEST) * 1000;
  for (int attempt = 1;; attempt++)
    {
      ib_error_t e = NULL;
      int rc = http_once (r, x, url, auth, &e);
      /* a failed transfer: as curl_failure_on judged it (x->transient) */
      bool again = rc < 0 ? x->transient : retryable_failure (CURLE_OK, x->status);
      long ms = 0;
      bool late = false;
      if (repeatable && attempt < REQUEST_ATTEMPTS && again)
        {
          ms = retry_delay_ms (attempt, rc < 0 ? 0 : x->status, rc < 0 ? NULL : x->retry_after);
          /* no retry that could not be done before the deadline */
          late = xfer_small (x) && now_ms () + ms >= x->deadline_ms;
        }
      if (!repeatable || attempt >= REQUEST_ATTEMPTS || !again || late)
        {
          if (own_deadline)
            x->deadline_ms = 0;
          if (rc < 0 && late)
            {
              cleanup_free char *what = url_shown (url);
              ib_error_set (err, e->status,
                            "%s %s: timed out: no time left to try again within the %ld s "
                            "deadline of one request (retries included; set %s=SECONDS to "
                            "allow more); the last try: %s",
                            x->method, what, ib_registry_net_limit (IB_NET_REQUEST),
                            ib_registry_net_limit_var (IB_NET_REQUEST), e->msg);
              ib_error_free (&e);
            }
          else if (rc < 0)
            *err = e;
          else if (late)
            {
              cleanup_free char *what = url_shown (url);
              ib_warn ("%s %s: HTTP %ld; not tried again: the wait would end past the %ld s "
                       "deadline of one request (%s)", x->method, what, x->status,
                       ib_registry_net_limit (IB_NET_REQUEST),
                       ib_registry_net_limit_var (IB_NET_REQUEST));
            }
          return rc;
        }
      cleanup_free char *what = url_shown (url);
      if (rc < 0)
        ib_warn ("%s %s: %s; trying again in %.1f s", x->method, what, e->msg, (double) ms / 1e3);
      else
        ib_warn ("%s %s: HTTP %ld%s; trying again in %.1f s", x->method, what, x->status,
                 x->status == 429 ? " (too many requests)" : "", (double) ms / 1e3);
      ib_error_free (&e);
      sleep_ms (ms);
    }
}

/* Perform one request on `url`; `auth` is a full "Authorization: ..." line or NULL. */
static int
http_once (ib_registry_t *r, xfer_t *x, const char *url, const char *auth, ib_error_t *err)
{
  CURL *c = r->curl;
  curl_easy_reset (c);
  xfer_reset_response (x);
  x->sink_started = false;
  x->upload_off = 0;
  x->deadline_hit = false;
  r->errbuf[0] = '\0';
  /* a small request's deadline: the one http_retry set for all its tries,
   * else one for this try alone */
  int64_t deadline = 0;
  if (xfer_small (x))
    {
      deadline = x->deadline_ms ? x->deadline_ms
                                : now_ms () + ib_registry_net_limit (IB_NET_REQUEST) * 1000;
      if (deadline - now_ms () <= 0)
        {
          x->curl_code = CURLE_OPERATION_TIMEDOUT;
          x->deadline_hit = true;
          return curl_failure (r, x, CURLE_OPERATION_TIMEDOUT, url, err);
        }
    }

  struct curl_slist *h = NULL;
  char range[64];
  if (x->accept)
    {
      cleanup_free char *a = xasprintf ("Accept: %s", x->accept);
      h = curl_slist_append (h, a);
    }
  if (x->content_type)
    {
      cleanup_free char *a = xasprintf ("Content-Type: %s", x->content_type);
      h = curl_slist_append (h, a);
    }
  char crange[80];
  if (x->send_range)
    {
      snprintf (crange, sizeof crange, "Content-Range: %s", x->send_range);
      h = curl_slist_append (h, crange);
    }
  if (x->range_from > 0)
    {
      snprintf (range, sizeof range, "Range: bytes=%llu-", (unsigned long long) x->range_from);
      h = curl_slist_append (h, range);
    }
  if (auth)
    h = curl_slist_append (h, auth);
  h = curl_slist_append (h, "Expect:");

  setup_handle (r, c);
  if (deadline)
    curl_easy_setopt (c, CURLOPT_TIMEOUT_MS, (long) (deadline - now_ms ()));
  curl_easy_setopt (c, CURLOPT_URL, url);
  curl_easy_setopt (c, CURLOPT_HTTPHEADER, h);
  curl_easy_setopt (c, CURLOPT_ERRORBUFFER, r->errbuf);
  curl_easy_setopt (c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt (c, CURLOPT_HEADERDATA, x);
  curl_easy_setopt (c, CURLOPT_WRITEFUNCTION, on_write);
  curl_easy_setopt (c, CURLOPT_WRITEDATA, x);
  if (x->sink_fd < 0)
    /* compressed transfer for JSON only: blob bytes must arrive exactly as stored */
    curl_easy_setopt (c, CURLOPT_ACCEPT_ENCODING, "");

  if (strcmp (x->method, "HEAD") == 0)
    curl_easy_setopt (c, CURLOPT_NOBODY, 1L);
  else if ((strcmp (x->method, "PUT") == 0 || strcmp (x->method, "PATCH") == 0)
           && x->upload_fd >= 0)
    {
      curl_easy_setopt (c, CURLOPT_UPLOAD, 1L);
      if (strcmp (x->method, "PATCH") == 0)
        curl_easy_setopt (c, CURLOPT_CUSTOMREQUEST, "PATCH");
      curl_easy_setopt (c, CURLOPT_READFUNCTION, on_read);
      curl_easy_setopt (c, CURLOPT_READDATA, x);
      curl_easy_setopt (c, CURLOPT_INFILESIZE_LARGE, (curl_off_t) x->upload_size);
      if (x->progress)
        {
          curl_easy_setopt (c, CURLOPT_XFERINFOFUNCTION, on_xferinfo);
          curl_easy_setopt (c, CURLOPT_XFERINFODATA, x);
          curl_easy_setopt (c, CURLOPT_NOPROGRESS, 0L);
        }
    }
  else if (strcmp (x->method, "POST") == 0 || strcmp (x->method, "PUT") == 0)
    {
      curl_easy_setopt (c, CURLOPT_POST, 1L);
      curl_easy_setopt (c, CURLOPT_POSTFIELDS, x->body ? x->body : "");
      curl_easy_setopt (c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t) x->body_len);
      if (strcmp (x->method, "PUT") == 0)
        curl_easy_setopt (c, CURLOPT_CUSTOMREQUEST, "PUT");
    }

  ib_debug ("%s %s", x->method, url);
  CURLcode rc = curl_easy_perform (c);
  curl_slist_free_all (h);
  x->curl_code = rc;
  /* timed out at the deadline rather than by a stall or the connect timeout */
  x->deadline_hit = rc == CURLE_OPERATION_TIMEDOUT && deadline && now_ms () >= deadline - 50;
  if (rc != CURLE_OK)
    return curl_failure (r, x, rc, url, err);
  long st = 0;
  curl_easy_getinfo (c, CURLINFO_RESPONSE_CODE, &st);
  x->status = st;
  ib_debug ("-> %ld", st);
  return 0;
}

/* ---------- authentication ---------- */

/* The token for `scope` ("" for none) while it is fresh (oci/auth.h:
 * ib_auth_token_fresh), else NULL. */
static const char *
token_find (ib_registry_t *r, const char *scope)
{
  int64_t now = ib_auth_now_ms ();
  for (size_t i = 0; i < r->n_tokens; i++)
    if (strcmp (r->tokens[i].scope, scope ? scope : "") == 0)
      return ib_auth_token_fresh (r->tokens[i].expires_ms, r->tokens[i].lifetime_ms, now)
                 ? r->tokens[i].value
                 : NULL;
  return NULL;
}

static void
token_put (ib_registry_t *r, const char *scope, const char *value, int64_t expires_ms,
           int64_t lifetime_ms)
{
  scope = scope ? scope : "";
  struct token *t = NULL;
  for (size_t i = 0; i < r->n_tokens && t == NULL; i++)
    if (strcmp (r->tokens[i].scope, scope) == 0)
      t = &r->tokens[i];
  if (t == NULL)
    {
      r->tokens = xrealloc (r->tokens, (r->n_tokens + 1) * sizeof *r->tokens);
      t = &r->tokens[r->n_tokens++];
      t->scope = xstrdup (scope);
      t->value = NULL;
    }
  char *v = xstrdup (value); /* value may be t->value itself */
  if (t->value)
    {
      explicit_bzero (t->value, strlen (t->value));
      free (t->value);
    }
  t->value = v;
  t->expires_ms = expires_ms;
  t->lifetime_ms = lifetime_ms;
}

static char *
url_escape (CURL *c, const char *s)
{
  char *e = curl_easy_escape (c, s, 0);
  char *r = xstrdup (e ? e : "");
  curl_free (e);
  return r;
}

/* The credentials for this registry (oci/auth.h lookup order), looked up
 * once, when the registry first asks for authentication. */
static int
load_creds (ib_registry_t *r, ib_error_t *err)
{
  if (r->creds_loaded)
    return 0;
  if (ib_auth_find (r->name, r->repo, &r->creds, err) < 0)
    return -1;
  r->creds_loaded = true;
  return 0;
}

static bool
have_password (const ib_registry_t *r)
{
  return r->creds.username != NULL && r->creds.password != NULL;
}

static int
login_needed (ib_registry_t *r, ib_error_t *err)
{
  return ib_error_set (err, EACCES, "%s requires authentication: run imgbuild login %s", r->name,
                       r->name);
}

static int
wrong_password (ib_registry_t *r, ib_error_t *err)
{
  if (r->login)
    return ib_error_set (err, EACCES, "wrong username or password");
  return ib_error_set (err, EACCES, "wrong username or password for %s (credentials from %s)",
                       r->name, r->creds.source ? r->creds.source : "?");
}

/* Distribution token spec: GET realm?service=S&scope=A&scope=B, with
 * Basic credentials when we have a user and password (anonymous
 * otherwise); with an identity token, the OAuth2 form POST
 * (grant_type=refresh_token).  The answer's token is cached for `scope`
 * until shortly before it expires.  A 401 from the token server means the
 * credentials are wrong (or, anonymous, that the registry wants some). */
static int
fetch_token (ib_registry_t *r, const char *realm, const char *service, const char *scope,
             ib_error_t *err)
{
  if (realm == NULL || *realm == '\0')
    return ib_error_set (err, EPROTO, "registry %s: Bearer challenge without a realm", r->host);
  if (load_creds (r, err) < 0)
    return -1;
  bool oauth = r->creds.identity_token != NULL;
  cleanup_free char *u = NULL;
  cleanup_free char *auth = NULL;
  cleanup_free char *form = NULL;
  xfer_t x;
  if (oauth)
    {
      u = xstrdup (realm);
      form = ib_auth_oauth_form (service, scope, r->creds.identity_token);
      xfer_init (&x, "POST");
      x.content_type = "application/x-www-form-urlencoded";
      x.body = form;
      x.body_len = strlen (form);
    }
  else
    {
      u = ib_auth_token_url (realm, service, scope, r->creds.username);
      auth = ib_auth_basic_header (&r->creds);
      xfer_init (&x, "GET");
    }
  x.body_max = TOKEN_BODY_MAX;
  int64_t asked = ib_auth_now_ms ();
  int ret = http_retry (r, &x, u, auth, err);
  if (auth)
    explicit_bzero (auth, strlen (auth));
  if (form)
    explicit_bzero (form, strlen (form));
  if (ret == 0 && x.status == 401 && (have_password (r) || oauth))
    ret = oauth ? ib_error_set (err, EACCES, "the identity token for %s was refused: run imgbuild "
                                "login %s", r->name, r->name)
                : wrong_password (r, err);
  else if (ret == 0 && x.status == 401)
    ret = login_needed (r, err);
  else if (ret == 0 && x.status == 400 && oauth)
    ret = ib_error_set (err, EACCES, "the identity token for %s was refused (%.200s): run "
                        "imgbuild login %s", r->name, x.resp.data ? x.resp.data : "", r->name);
  else if (ret == 0 && x.status != 200)
    {
      status_error (&x, err);
      cleanup_free char *h = url_host (realm);
      ib_error_prefix (err, "get a token for %s from %s", scope && *scope ? scope : r->host, h);
      ret = -1;
    }
  if (ret == 0)
    {
      ib_auth_token_t t;
      if (ib_auth_token_parse (x.resp.data, x.resp.len, asked, &t, err) < 0)
        {
          cleanup_free char *h = url_host (realm);
          ib_error_prefix (err, "get a token for %s from %s", scope && *scope ? scope : r->host, h);
          ret = -1;
        }
      else
        {
          token_put (r, scope, t.token, t.expires_ms, t.lifetime_ms);
          if (t.refresh_token && oauth)
            {
              explicit_bzero (r->creds.identity_token, strlen (r->creds.identity_token));
              free (r->creds.identity_token);
              r->creds.identity_token = steal_pointer (&t.refresh_token);
            }
          ib_auth_token_clear (&t);
        }
    }
  if (x.resp.data)
    explicit_bzero (x.resp.data, x.resp.len);
  xfer_free (&x);
  return ret;
}

/* GET /v2/ once per client: learn whether (and how) the registry wants auth. */
static int
ping (ib_registry_t *r, ib_error_t *err)
{
  if (r->pinged)
    return 0;
  cleanup_free char *url = xasprintf ("%s/v2/", r->base);
  xfer_t x;
  xfer_init (&x, "GET");
  int ret = http_retry (r, &x, url, NULL, err);
  if (ret == 0)
    {
      if (x.status == 401 && x.www_auth)
        {
          ib_auth_challenge_t ch;
          if (ib_auth_challenge_parse (x.www_auth, &ch, err) < 0)
            ret = -1;
          else
            {
              if (strcasecmp (ch.scheme, "Bearer") == 0)
                {
                  r->auth = AUTH_BEARER;
                  r->realm = steal_pointer (&ch.realm);
                  r->service = steal_pointer (&ch.service);
                }
              else if (strcasecmp (ch.scheme, "Basic") == 0)
                r->auth = AUTH_BASIC;
              ib_auth_challenge_clear (&ch);
            }
        }
      else if (x.status == 404)
        ret = ib_error_set (err, EPROTO,
                            "%s does not offer the registry API v2 (GET /v2/ answered 404)",
                            r->host);
      else if (x.status >= 300 && x.status != 401)
        ret = status_error (&x, err);
    }
  xfer_free (&x);
  if (ret == 0)
    r->pinged = true;
  return ret;
}

/* *out = the full header line "Authorization: Bearer ..." / "Authorization:
 * Basic ..." for a request needing `scope` (NULL: none), fetching a token
 * when the registry uses Bearer and none is cached or the cached one is
 * about to expire; NULL when the request goes anonymous.  Caller frees.
 * Called from one thread at a time (the fetch engine's loop thread, or the
 * caller of the ib_registry_* functions). */
static int
auth_header (ib_registry_t *r, const char *scope, char **out, ib_error_t *err)
{
  *out = NULL;
  if (r->auth == AUTH_BEARER)
    {
      if (token_find (r, scope) == NULL && fetch_token (r, r->realm, r->service, scope, err) < 0)
        return -1;
      const char *t = token_find (r, scope);
      if (t == NULL) /* a token whose lifetime is already spent: use it once all the same */
        for (size_t i = 0; i < r->n_tokens && t == NULL; i++)
          if (strcmp (r->tokens[i].scope, scope ? scope : "") == 0)
            t = r->tokens[i].value;
      *out = xasprintf ("Authorization: Bearer %s", t);
    }
  else if (r->auth == AUTH_BASIC)
    {
      if (load_creds (r, err) < 0)
        return -1;
      *out = ib_auth_basic_header (&r->creds);
    }
  return 0;
}

/* Is `part` one of the space-separated scopes of `scopes`? */
static bool
scope_has (const char *scopes, const char *part)
{
  size_t n = strlen (part);
  for (const char *p = scopes; p && *p;)
    {
      size_t l = strcspn (p, " ");
      if (l == n && strncmp (p, part, n) == 0)
        return true;
      p += l;
      while (*p == ' ')
        p++;
    }
  return false;
}

/* React to a 401 answer's WWW-Authenticate value for a request that needed
 * `scope` (may be NULL), so that the next auth_header (r, scope) gives a
 * usable header: Bearer -> fetch a new token (the cached one was refused or
 * expired) for `scope` plus the challenge's scope when that is another one
 * (cross-repository mounts ask for several); Basic -> send the user's
 * credentials from now on.  Errors: no credentials for a Basic registry
 * ("REGISTRY requires authentication: run imgbuild login REGISTRY"), Basic
 * credentials already sent and refused ("wrong username or password for
 * REGISTRY"), token server errors (fetch_token).  One thread at a time. */
static int
auth_challenge (ib_registry_t *r, const char *www_authenticate, const char *scope,
                ib_error_t *err)
{
  if (www_authenticate == NULL)
    return ib_error_set (err, EACCES, "%s: unauthorized (HTTP 401 without a WWW-Authenticate "
                         "challenge)", r->name);
  ib_auth_challenge_t ch;
  if (ib_auth_challenge_parse (www_authenticate, &ch, err) < 0)
    return -1;
  int ret = 0;
  if (strcasecmp (ch.scheme, "Bearer") == 0)
    {
      r->auth = AUTH_BEARER;
      if (ch.realm)
        {
          free (r->realm);
          r->realm = xstrdup (ch.realm);
        }
      if (ch.service)
        {
          free (r->service);
          r->service = xstrdup (ch.service);
        }
      cleanup_free char *want = NULL;
      if (scope && *scope && ch.scope && !scope_has (scope, ch.scope))
        want = xasprintf ("%s %s", scope, ch.scope);
      else
        want = xstrdup (scope && *scope ? scope : ch.scope);
      ret = fetch_token (r, r->realm, r->service, want, err);
      if (ret == 0 && strcmp (want ? want : "", scope ? scope : "") != 0)
        for (size_t i = 0; i < r->n_tokens; i++)
          if (strcmp (r->tokens[i].scope, want ? want : "") == 0)
            {
              struct token t = r->tokens[i];
              token_put (r, scope, t.value, t.expires_ms, t.lifetime_ms);
              break;
            }
    }
  else if (strcasecmp (ch.scheme, "Basic") == 0)
    {
      if (load_creds (r, err) < 0)
        ret = -1;
      else if (!have_password (r))
        ret = login_needed (r, err);
      else if (r->auth == AUTH_BASIC)
        ret = wrong_password (r, err);
      r->auth = AUTH_BASIC;
    }
  else
    ret = ib_error_set (err, EACCES, "%s: unauthorized (unsupported auth scheme %s)", r->name,
                        ch.scheme);
  ib_auth_challenge_clear (&ch);
  return ret;
}

/* The error for a 401 that persists after auth_challenge: a Bearer token
 * without the access asked for (the token server grants what it will;
 * Docker Hub answers so for repositories that do not exist, too), or
 * refused Basic credentials. */
static int
auth_refused (ib_registry_t *r, const char *www_authenticate, const char *scope,
              ib_error_t *err)
{
  bool basic = false;
  ib_auth_challenge_t ch;
  if (www_authenticate && ib_auth_challenge_parse (www_authenticate, &ch, NULL) == 0)
    {
      basic = strcasecmp (ch.scheme, "Basic") == 0;
      ib_auth_challenge_clear (&ch);
    }
  if (basic)
    return have_password (r) ? wrong_password (r, err) : login_needed (r, err);
  /* "repository:NAME:ACTIONS" -> NAME */
  cleanup_free char *what = NULL;
  if (scope && strncmp (scope, "repository:", 11) == 0)
    {
      const char *name = scope + 11;
      const char *end = strchr (name, ':');
      what = end ? xstrndup (name, (size_t) (end - name)) : xstrdup (name);
    }
  else
    what = xstrdup (r->repo ? r->repo : r->name);
  if (ib_auth_creds_empty (&r->creds))
    return ib_error_set (err, EACCES, "%s requires authentication: run imgbuild login %s "
                         "(anonymous access to %s: not found or access denied)", r->name, r->name,
                         what);
  return ib_error_set (err, EACCES, "%s: not found or access denied for %s (credentials from %s)",
                       what, r->creds.username ? r->creds.username : "the identity token",
                       r->creds.source ? r->creds.source : "?");
}

/* After a 401: learn from its challenge so that one retry can succeed. */
static int
handle_401 (ib_registry_t *r, xfer_t *x, ib_error_t *err)
{
  if (x->www_auth == NULL)
    return status_error (x, err);
  return auth_challenge (r, x->www_auth, x->scope, err);
}

/* An insecure registry (tls_configure): try HTTPS without verification
 * once; when the server does not speak TLS there, use plain HTTP from then
 * on, as Docker and podman do. */
static int
probe_scheme (ib_registry_t *r, ib_error_t *err)
{
  if (!r->probe_scheme)
    return 0;
  cleanup_free char *url = xasprintf ("%s/v2/", r->https_base);
  xfer_t x;
  xfer_init (&x, "GET");
  ib_error_t e = NULL;
  int rc = http_once (r, &x, url, NULL, &e);
  CURLcode code = (CURLcode) x.curl_code;
  xfer_free (&x);
  if (rc < 0 && (code == CURLE_COULDNT_CONNECT || code == CURLE_COULDNT_RESOLVE_HOST
                 || code == CURLE_OPERATION_TIMEDOUT))
    {
      *err = e;
      return -1;
    }
  r->probe_scheme = false;
  if (rc < 0)
    {
      ib_debug ("registry %s: no TLS (%s); using plain HTTP", r->name, e->msg);
      ib_error_free (&e);
      free (r->base);
      r->base = xasprintf ("http://%s", r->host);
    }
  return 0;
}

/* A URL made with r->base before probe_scheme chose plain HTTP, made right;
 * caller frees. */
static char *
rebase_url (ib_registry_t *r, const char *url)
{
  size_t n = strlen (r->https_base);
  if (strcmp (r->base, r->https_base) != 0 && strncmp (url, r->https_base, n) == 0
      && (url[n] == '/' || url[n] == '?' || url[n] == '\0'))
    return xasprintf ("%s%s", r->base, url + n);
  return xstrdup (url);
}

/* A request to the registry: ping first, authenticate (retrying once after
 * a 401 with a fresh token), follow redirects of GET/HEAD by hand, sending
 * Authorization only to the registry's own origin.  On return x->status
 * is the final status; non-2xx statuses are for the caller to judge. */
static int
registry_do (ib_registry_t *r, xfer_t *x, const char *url, ib_error_t *err)
{
  if (probe_scheme (r, err) < 0)
    return -1;
  if (ping (r, err) < 0)
    {
      if (ib_str_has_prefix (r->base, "http:") && *err && strstr ((*err)->msg, "HTTP status 400"))
        {
          /* Go's TLS servers answer plain HTTP with 400 */
          ib_error_free (err);
          return ib_error_set (err, EPROTO,
                               "%s answered plain HTTP with 400 Bad Request: it probably speaks "
                               "HTTPS (loopback registries use plain HTTP unless they have "
                               "certs.d files, --cert-dir or --tls-verify)",
                               r->host);
        }
      return -1;
    }
  cleanup_free char *cur = rebase_url (r, url);
  bool own = true;
  bool retried_auth = false;
  bool follow = strcmp (x->method, "GET") == 0 || strcmp (x->method, "HEAD") == 0;
  for (int redirects = 0;;)
    {
      cleanup_free char *auth = NULL;
      if (own && auth_header (r, x->scope, &auth, err) < 0)
        return -1;
      if (http_retry (r, x, cur, auth, err) < 0)
        return -1;
      if (x->status == 401 && own && retried_auth)
        return auth_refused (r, x->www_auth, x->scope, err);
      if (x->status == 401 && own)
        {
          retried_auth = true;
          if (handle_401 (r, x, err) < 0)
            return -1;
          continue;
        }
      if (follow && x->location
          && (x->status == 301 || x->status == 302 || x->status == 303 || x->status == 307
              || x->status == 308))
        {
          if (++redirects > MAX_REDIRECTS)
            return ib_error_set (err, ELOOP, "%s: too many redirects", r->host);
          char *next = resolve_url (cur, x->location);
          free (cur);
          cur = next;
          own = same_origin (cur, r->base);
          continue;
        }
      return 0;
    }
}

int
ib_registry_login (const char *registry, const char *user, const char *password, ib_error_t *err)
{
  ib_ref_t ref = { .registry = (char *) registry };
  ib_registry_t *r = NULL;
  if (ib_registry_new (&ref, &r, err) < 0)
    return -1;
  r->login = true;
  r->creds_loaded = true;
  r->creds.username = xstrdup (user);
  r->creds.password = xstrdup (password);
  r->creds.source = xstrdup ("the command line");
  int ret = ping (r, err);
  if (ret == 0 && r->auth == AUTH_BEARER)
    ret = fetch_token (r, r->realm, r->service, NULL, err);
  else if (ret == 0 && r->auth == AUTH_BASIC)
    {
      cleanup_free char *url = xasprintf ("%s/v2/", r->base);
      cleanup_free char *auth = ib_auth_basic_header (&r->creds);
      xfer_t x;
      xfer_init (&x, "GET");
      ret = http_once (r, &x, url, auth, err);
      explicit_bzero (auth, strlen (auth));
      if (ret == 0 && x.status == 401)
        ret = wrong_password (r, err);
      else if (ret == 0 && x.status >= 300)
        ret = status_error (&x, err);
      xfer_free (&x);
    }
  else if (ret == 0)
    ib_debug ("login %s: the registry asks for no authentication", registry);
  ib_registry_free (r);
  return ret;
}

static char *
pull_scope (const char *repo)
{
  return xasprintf ("repository:%s:pull", repo);
}

static char *
push_scope (const char *repo)
{
  return xasprintf ("repository:%s:pull,push", repo);
}

/* ---------- manifests ---------- */

int
ib_registry_get_manifest (ib_registry_t *r, const char *repo, const char *reference,
                          char **data, size_t *len, char **content_type,
                          char digest[IB_DIGEST_LEN], ib_error_t *err)
{
  *data = NULL;
  if (content_type)
    *content_type = NULL;
  cleanup_free char *scope = pull_scope (repo);
  cleanup_free char *url = xasprintf ("%s/v2/%s/manifests/%s", r->base, repo, reference);
  xfer_t x;
  xfer_init (&x, "GET");
  x.accept = IB_MANIFEST_ACCEPT;
  x.scope = scope;
  x.body_max = MANIFEST_MAX;
  int ret = registry_do (r, &x, url, err);
  if (ret == 0 && x.status != 200)
    ret = status_error (&x, err);
  if (ret == 0)
    {
      char got[IB_DIGEST_LEN];
      ib_digest_buf (x.resp.data ? x.resp.data : "", x.resp.len, got);
      if (ib_digest_valid (reference) && strcmp (got, reference) != 0)
        ret = ib_error_set (err, EINVAL, "manifest %s: digest mismatch (the bytes received hash "
                            "to %s)", reference, got);
      else
        {
          if (digest)
            memcpy (digest, got, IB_DIGEST_LEN);
          if (len)
            *len = x.resp.len;
          if (content_type)
            *content_type = steal_pointer (&x.content_type_resp);
          *data = ib_buf_steal (&x.resp);
        }
    }
  xfer_free (&x);
  return ret;
}

/* The target of `link`'s rel="next" (RFC 8288: `<URL>; rel="next"`),
 * made absolute against `base` ("http://host:port") when it is a path;
 * NULL when there is none or it names another host. */
static char *
link_next (const char *link, const char *base)
{
  for (const char *p = link; p && (p = strchr (p, '<')) != NULL;)
    {
      const char *e = strchr (p, '>');
      if (e == NULL)
        return NULL;
      const char *params = e + 1, *stop = strchr (params, ',');
      size_t plen = stop ? (size_t) (stop - params) : strlen (params);
      cleanup_free char *ps = xstrndup (params, plen);
      if (strstr (ps, "rel=\"next\"") || strstr (ps, "rel=next"))
        {
          cleanup_free char *target = xstrndup (p + 1, (size_t) (e - p - 1));
          if (target[0] == '/')
            return xasprintf ("%s%s", base, target);
          /* an absolute URL only on this registry: the request carries
           * its credentials, which another host must not get */
          size_t bl = strlen (base);
          if (strncmp (target, base, bl) == 0 && target[bl] == '/')
            return steal_pointer (&target);
          ib_debug ("tag list: next page %s is not on %s: not followed", target, base);
          return NULL;
        }
      p = stop;
    }
  return NULL;
}

int
ib_registry_list_tags (ib_registry_t *r, const char *repo, char ***tags, ib_error_t *err)
{
  *tags = NULL;
  cleanup_free char *scope = pull_scope (repo);
  cleanup_free char *url = xasprintf ("%s/v2/%s/tags/list", r->base, repo);
  char **v = xmalloc (sizeof (char *));
  v[0] = NULL;
  int ret = 0;
  /* distribution-spec "Listing Tags": the registry may cut the list into
   * pages, each naming the next in a Link header; followed, up to a
   * bound that only a registry answering in a loop would reach */
  for (int page = 0; ret == 0 && url != NULL; page++)
    {
      if (page == 10000)
        {
          ret = ib_error_set (err, EPROTO, "tags of %s: more than 10000 pages", repo);
          break;
        }
      xfer_t x;
      xfer_init (&x, "GET");
      x.accept = "application/json";
      x.scope = scope;
      x.body_max = MANIFEST_MAX;
      ret = registry_do (r, &x, url, err);
      if (ret == 0 && x.status != 200)
        ret = status_error (&x, err);
      json_t *j = NULL;
      if (ret == 0)
        {
          json_error_t je;
          j = json_loadb (x.resp.data ? x.resp.data : "", x.resp.len, 0, &je);
          json_t *list = json_object_get (j, "tags");
          if (!json_is_object (j) || !(json_is_array (list) || json_is_null (list) || list == NULL))
            ret = ib_error_set (err, EPROTO, "tags of %s: not a tag list", repo);
          size_t i;
          json_t *t;
          json_array_foreach (ret == 0 ? list : NULL, i, t)
            if (json_is_string (t))
              ib_strv_push (&v, json_string_value (t));
        }
      json_decref (j);
      free (url);
      url = ret == 0 ? link_next (x.link, r->base) : NULL;
      xfer_free (&x);
    }
  if (ret < 0)
    {
      ib_strv_free (v);
      return ib_error_prefix (err, "list tags of %s", repo);
    }
  *tags = v;
  return 0;
}

int
ib_registry_put_manifest (ib_registry_t *r, const char *repo, const char *reference,
                          const char *data, size_t len, const char *media_type, ib_error_t *err)
{
  cleanup_free char *scope = push_scope (repo);
  cleanup_free char *url = xasprintf ("%s/v2/%s/manifests/%s", r->base, repo, reference);
  xfer_t x;
  xfer_init (&x, "PUT");
  x.content_type = media_type;
  x.body = data;
  x.body_len = len;
  x.scope = scope;
  int ret = registry_do (r, &x, url, err);
  if (ret == 0 && (x.status < 200 || x.status >= 300))
    ret = status_error (&x, err);
  xfer_free (&x);
  if (ret < 0)
    ib_error_prefix (err, "put manifest %s", reference);
  return ret;
}

/* ---------- blobs ---------- */

int
ib_registry_blob_exists (ib_registry_t *r, const char *repo, const char *digest, bool *exists,
                         ib_error_t *err)
{
  *exists = false;
  cleanup_free char *scope = pull_scope (repo);
  cleanup_free char *url = xasprintf ("%s/v2/%s/blobs/%s", r->base, repo, digest);
  xfer_t x;
  xfer_init (&x, "HEAD");
  x.scope = scope;
  int ret = registry_do (r, &x, url, err);
  if (ret == 0)
    {
      if (x.status == 200)
        *exists = true;
      else if (x.status != 404)
        ret = status_error (&x, err);
    }
  xfer_free (&x);
  if (ret < 0)
    ib_error_prefix (err, "blob %s", digest);
  return ret;
}

static void
short_digest (const char *digest, char out[24])
{
  snprintf (out, 24, "sha256:%.8s..", ib_digest_hex (digest));
}

/* ---------- parallel blob downloads (curl multi) ---------- */

#define FETCH_MAX_ACTIVE 6      /* transfers at once; also the per-host connection bound */
#define FETCH_ATTEMPTS 6        /* per blob, counting connection errors, 5xx, 429, mismatches */
#define FETCH_BUFFER (512 * 1024)

enum job_state
{
  JOB_WAITING,  /* not started, or waiting for its retry time */
  JOB_ACTIVE,
  JOB_DONE,     /* verified and committed to the store (or there already) */
  JOB_FAILED
};

typedef struct fetch_job
{
  ib_descriptor_t desc;
  struct ib_fetch *f;
  enum job_state state;
  int fd;                 /* the partial file (later: the committed blob) */
  char *path;             /* <store>/tmp/blob-<hex>.partial */
  int attempt;            /* failed attempts so far */
  int redirects;
  bool auth_retried;
  int64_t not_before_ms;  /* monotonic time before which no retry starts */
  char *url;              /* current URL (after redirects) */
  bool own;               /* url is on the registry's origin: send Authorization */
  bool resumed;           /* this download continued what an earlier run left */
  bool oversize;          /* the server sent more bytes than the descriptor's size */
  CURL *easy;
  struct curl_slist *hdrs;
  char errbuf[CURL_ERROR_SIZE];
  xfer_t x;               /* headers, status, and the sink (fd, hash, bytes written) */
  char *retry_after;      /* Retry-After of the last response */
  char *last_error;       /* why the last attempt failed, while a retry waits */
  int64_t peer_size;      /* size of the partial file another process holds */
  /* shared with readers, under f->mu */
  uint64_t published;     /* bytes of the partial file readers may read */
  unsigned generation;    /* +1 whenever the file starts over from byte 0 */
  ib_error_t err;
  int item;               /* its progress item */
} fetch_job_t;

struct ib_fetch
{
  ib_registry_t *r;
  ib_store_t *store;
  char *repo, *scope, *shown;
  fetch_job_t *jobs;
  size_t n;
  CURLM *multi;
  pthread_t thread;
  bool thread_live;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool cancel;            /* under mu */
  bool finished;          /* under mu: the loop thread has ended */
  int64_t stall_s;
  int64_t progress_s;     /* IB_NET_PROGRESS */
  int64_t progress_ms;    /* when a blob last received a byte or completed */
  ib_progress_t *progress; /* not owned; may be NULL */
  bool unpacking;         /* a caller unpacks the layers: "Pull complete" is theirs to say */
};

static void
job_wake (struct ib_fetch *f)
{
  pthread_cond_broadcast (&f->cv);
}

/* Start the partial file over from byte 0 (the server ignored Range, the
 * bytes did not match the digest, ...): readers see a new generation. */
static int
job_restart_file (fetch_job_t *j)
{
  pthread_mutex_lock (&j->f->mu);
  j->generation++;
  j->published = 0;
  pthread_mutex_unlock (&j->f->mu);
  ib_sha256_free (j->x.sink_hash);
  j->x.sink_hash = ib_sha256_new ();
  j->x.sink_written = 0;
  j->resumed = false;
  if (ftruncate (j->fd, 0) < 0 || lseek (j->fd, 0, SEEK_SET) < 0)
    return -1;
  return 0;
}

static size_t
job_on_header (char *line, size_t size, size_t nmemb, void *ud)
{
  fetch_job_t *j = ud;
  size_t n = size * nmemb;
  const char *v;
  size_t vn;
  if (n >= 5 && strncmp (line, "HTTP/", 5) == 0)
    {
      free (j->retry_after);
      j->retry_after = NULL;
    }
  else if (header_is (line, n, "Retry-After", &v, &vn))
    {
      free (j->retry_after);
      j->retry_after = trim_dup (v, vn);
    }
  return on_header (line, size, nmemb, &j->x);
}

static size_t
job_on_write (char *data, size_t size, size_t nmemb, void *ud)
{
  fetch_job_t *j = ud;
  xfer_t *x = &j->x;
  size_t n = size * nmemb;
  if (x->sink_fd >= 0 && x->status == 200 && !x->sink_started && x->sink_written > 0)
    {
      /* the server ignored our Range: on_write starts the file over */
      pthread_mutex_lock (&j->f->mu);
      j->generation++;
      j->published = 0;
      pthread_mutex_unlock (&j->f->mu);
      j->resumed = false;
    }
  bool body = x->sink_fd >= 0 && (x->status == 200 || x->status == 206);
  uint64_t before = x->status == 200 && !x->sink_started ? 0 : x->sink_written;
  if (body && j->desc.size >= 0 && before + n > (uint64_t) j->desc.size)
    {
      /* more than the descriptor says: stop now, not when the disk is full */
      j->oversize = true;
      return 0;
    }
  size_t r = on_write (data, size, nmemb, x);
  if (body)
    {
      j->f->progress_ms = now_ms (); /* the loop thread's own: no lock */
      pthread_mutex_lock (&j->f->mu);
      j->published = x->sink_written;
      job_wake (j->f);
      pthread_mutex_unlock (&j->f->mu);
      ib_progress_update (j->f->progress, j->item, (int64_t) x->sink_written);
    }
  return r;
}

static void
job_fail (fetch_job_t *j, ib_error_t *e)
{
  ib_progress_done (j->f->progress, j->item, false, (*e)->msg);
  pthread_mutex_lock (&j->f->mu);
  j->err = *e;
  *e = NULL;
  ib_error_prefix (&j->err, "blob %s", j->desc.digest);
  j->state = JOB_FAILED;
  job_wake (j->f);
  pthread_mutex_unlock (&j->f->mu);
}

static void
job_done (fetch_job_t *j)
{
  j->f->progress_ms = now_ms ();
  pthread_mutex_lock (&j->f->mu);
  j->state = JOB_DONE;
  job_wake (j->f);
  pthread_mutex_unlock (&j->f->mu);
}

/* First start of a job: the blob may be in the store already, or partly
 * downloaded by an earlier run (resumed).  Returns 1 when done, 0 to
 * download, 2 when another process holds the partial file (try later). */
static int
job_open (fetch_job_t *j, ib_error_t *err)
{
  struct ib_fetch *f = j->f;
  if (ib_store_has_blob (f->store, j->desc.digest))
    goto in_store;
  if (j->path == NULL)
    j->path = xasprintf ("%s/tmp/blob-%s.partial", f->store->root, ib_digest_hex (j->desc.digest));
  for (;;)
    {
      int fd = open (j->path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
      if (fd < 0)
        return ib_error_sys (err, errno, "open %s", j->path);
      if (flock (fd, LOCK_EX | LOCK_NB) < 0)
        {
          int e = errno;
          close (fd);
          if (e == EWOULDBLOCK || e == EINTR)
            return 2;
          return ib_error_sys (err, e, "lock %s", j->path);
        }
      struct stat a, b;
      bool same = fstat (fd, &a) == 0 && stat (j->path, &b) == 0 && a.st_dev == b.st_dev
                  && a.st_ino == b.st_ino;
      if (ib_store_has_blob (f->store, j->desc.digest))
        {
          if (same)
            unlink (j->path);
          close (fd);
          goto in_store;
        }
      if (!same)
        {
          close (fd); /* renamed or removed under us: again */
          continue;
        }
      pthread_mutex_lock (&f->mu);
      j->fd = fd;
      pthread_mutex_unlock (&f->mu);
      break;
    }
  /* hash what an earlier, interrupted download left */
  j->x.sink_fd = j->fd;
  j->x.sink_hash = ib_sha256_new ();
  char *buf = xmalloc (1 << 16);
  for (;;)
    {
      ssize_t n = read (j->fd, buf, 1 << 16);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        break;
      ib_sha256_update (j->x.sink_hash, buf, (size_t) n);
      j->x.sink_written += (uint64_t) n;
    }
  free (buf);
  if (j->desc.size >= 0 && j->x.sink_written > (uint64_t) j->desc.size)
    {
      if (job_restart_file (j) < 0)
        return ib_error_sys (err, errno, "truncate %s", j->path);
    }
  else if (lseek (j->fd, (off_t) j->x.sink_written, SEEK_SET) < 0)
    return ib_error_sys (err, errno, "seek %s", j->path);
  if (j->x.sink_written > 0)
    {
      j->resumed = true;
      ib_debug ("blob %s: resuming at byte %llu", j->desc.digest,
                (unsigned long long) j->x.sink_written);
    }
  pthread_mutex_lock (&f->mu);
  j->published = j->x.sink_written;
  pthread_mutex_unlock (&f->mu);
  return 0;

in_store:;
  cleanup_free char *p = ib_store_blob_path (f->store, j->desc.digest);
  int fd = open (p, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat (fd, &st) < 0)
    {
      int e = errno;
      if (fd >= 0)
        close (fd);
      return ib_error_sys (err, e, "open %s", p);
    }
  pthread_mutex_lock (&f->mu);
  j->fd = fd;
  j->published = (uint64_t) st.st_size;
  pthread_mutex_unlock (&f->mu);
  return 1;
}

static void
job_release_easy (fetch_job_t *j)
{
  if (j->easy)
    {
      curl_multi_remove_handle (j->f->multi, j->easy);
      curl_easy_cleanup (j->easy);
      j->easy = NULL;
    }
  curl_slist_free_all (j->hdrs);
  j->hdrs = NULL;
}

/* Start (or restart) the transfer of job j on the multi handle. */
static int
job_start (fetch_job_t *j, ib_error_t *err)
{
  struct ib_fetch *f = j->f;
  if (j->fd < 0)
    {
      int r = job_open (j, err);
      if (r < 0)
        return -1;
      if (r == 1)
        {
          ib_progress_done (f->progress, j->item, true, "Already exists");
          job_done (j);
          return 0;
        }
      if (r == 2)
        {
          /* another process downloads it: its progress is ours */
          struct stat st;
          if (stat (j->path, &st) == 0 && st.st_size != j->peer_size)
            {
              j->peer_size = st.st_size;
              f->progress_ms = now_ms ();
            }
          j->not_before_ms = now_ms () + 200;
          return 0;
        }
    }
  if (j->url == NULL)
    {
      j->url = xasprintf ("%s/v2/%s/blobs/%s", f->r->base, f->repo, j->desc.digest);
      j->own = true;
    }
  cleanup_free char *auth = NULL;
  if (j->own && auth_header (f->r, f->scope, &auth, err) < 0)
    return -1;

  xfer_reset_response (&j->x);
  j->x.sink_started = false;
  j->errbuf[0] = '\0';
  CURL *c = curl_easy_init ();
  if (c == NULL)
    return ib_error_set (err, ENOMEM, "curl_easy_init failed");
  j->easy = c;
  if (j->x.sink_written > 0)
    {
      char range[64];
      snprintf (range, sizeof range, "Range: bytes=%llu-", (unsigned long long) j->x.sink_written);
      j->hdrs = curl_slist_append (j->hdrs, range);
    }
  if (auth)
    j->hdrs = curl_slist_append (j->hdrs, auth);
  setup_handle (f->r, c);
  curl_easy_setopt (c, CURLOPT_URL, j->url);
  curl_easy_setopt (c, CURLOPT_HTTPHEADER, j->hdrs);
  curl_easy_setopt (c, CURLOPT_ERRORBUFFER, j->errbuf);
  curl_easy_setopt (c, CURLOPT_LOW_SPEED_TIME, (long) f->stall_s);
  curl_easy_setopt (c, CURLOPT_BUFFERSIZE, (long) FETCH_BUFFER);
  curl_easy_setopt (c, CURLOPT_HEADERFUNCTION, job_on_header);
  curl_easy_setopt (c, CURLOPT_HEADERDATA, j);
  curl_easy_setopt (c, CURLOPT_WRITEFUNCTION, job_on_write);
  curl_easy_setopt (c, CURLOPT_WRITEDATA, j);
  curl_easy_setopt (c, CURLOPT_PRIVATE, j);
  ib_debug ("GET %s%s", j->url, j->x.sink_written ? " (resuming)" : "");
  ib_progress_set_status (f->progress, j->item, NULL);
  ib_progress_update (f->progress, j->item, (int64_t) j->x.sink_written);
  CURLMcode mc = curl_multi_add_handle (f->multi, c);
  if (mc != CURLM_OK)
    return ib_error_set (err, EIO, "curl_multi_add_handle: %s", curl_multi_strerror (mc));
  j->state = JOB_ACTIVE;
  return 0;
}

/* Give up now, or schedule another attempt of a transient failure. */
static void
job_retry_or_fail (fetch_job_t *j, ib_error_t *e, bool transient, long status)
{
  j->attempt++;
  if (!transient || j->attempt >= FETCH_ATTEMPTS)
    {
      if (transient)
        ib_error_prefix (e, "gave up after %d attempts", j->attempt);
      job_fail (j, e);
      return;
    }
  int64_t delay = retry_delay_ms (j->attempt, status, j->retry_after);
  {
    char st[64];
    if (status)
      snprintf (st, sizeof st, "Retrying in %.1fs (HTTP %ld)", (double) delay / 1000.0, status);
    else
      snprintf (st, sizeof st, "Retrying in %.1fs", (double) delay / 1000.0);
    ib_progress_set_status (j->f->progress, j->item, st);
  }
  ib_warn ("%s: blob %.19s..: %s; retrying in %.1f s (%llu bytes so far)", j->f->shown,
           j->desc.digest, (*e)->msg, (double) delay / 1000.0,
           (unsigned long long) j->x.sink_written);
  free (j->last_error);
  j->last_error = xstrdup ((*e)->msg);
  ib_error_free (e);
  j->not_before_ms = now_ms () + delay;
  j->state = JOB_WAITING;
}

/* A transfer of job j ended with `rc`. */
static void
job_finished (fetch_job_t *j, CURLcode rc)
{
  struct ib_fetch *f = j->f;
  ib_error_t e = NULL;
  long st = 0;
  curl_easy_getinfo (j->easy, CURLINFO_RESPONSE_CODE, &st);
  if (rc == CURLE_WRITE_ERROR && j->oversize)
    {
      j->oversize = false;
      job_release_easy (j);
      if (job_restart_file (j) < 0)
        {
          ib_error_sys (&e, errno, "truncate %s", j->path);
          job_fail (j, &e);
          return;
        }
      ib_error_set (&e, EBADMSG, "the registry sent more than the %lld bytes its descriptor gives",
                    (long long) j->desc.size);
      job_retry_or_fail (j, &e, true, 0);
      return;
    }
  if (rc != CURLE_OK)
    {
      j->x.transient = false;
      curl_failure_on (f->r, j->easy, j->errbuf, &j->x, rc, j->url, &e);
      job_release_easy (j);
      if (j->x.sink_errno)
        {
          job_fail (j, &e);
          return;
        }
      job_retry_or_fail (j, &e, j->x.transient, 0);
      return;
    }
  job_release_easy (j);
  j->x.status = st;
  j->state = JOB_WAITING;
  j->not_before_ms = 0;
  if (st == 401 && j->own && !j->auth_retried)
    {
      j->auth_retried = true;
      j->x.scope = f->scope;
      if (handle_401 (f->r, &j->x, &e) < 0)
        job_fail (j, &e);
      return;
    }
  if (j->x.location && (st == 301 || st == 302 || st == 303 || st == 307 || st == 308))
    {
      if (++j->redirects > MAX_REDIRECTS)
        {
          ib_error_set (&e, ELOOP, "%s: too many redirects", f->r->host);
          job_fail (j, &e);
          return;
        }
      char *next = resolve_url (j->url, j->x.location);
      free (j->url);
      j->url = next;
      j->own = same_origin (next, f->r->base);
      return;
    }
  if (st == 416 && j->x.sink_written > 0)
    {
      /* nothing past our offset, or a bad partial file: start over */
      if (job_restart_file (j) < 0)
        {
          ib_error_sys (&e, errno, "truncate %s", j->path);
          job_fail (j, &e);
        }
      return;
    }
  if (st != 200 && st != 206)
    {
      j->x.transient = false;
      status_error (&j->x, &e);
      if (st == 404)
        ib_error_prefix (&e, "the registry does not have it");
      job_retry_or_fail (j, &e, j->x.transient, st);
      return;
    }
  /* a redirect target may be a fresh URL per request (signed): start at the registry again */
  free (j->url);
  j->url = NULL;
  j->redirects = 0;
  j->auth_retried = false;
  ib_sha256_t *h = j->x.sink_hash;
  j->x.sink_hash = NULL;
  char got[IB_DIGEST_LEN];
  ib_sha256_final (h, got);
  if (strcmp (got, j->desc.digest) != 0
      || (j->desc.size >= 0 && j->x.sink_written != (uint64_t) j->desc.size))
    {
      bool was_resumed = j->resumed;
      uint64_t got_size = j->x.sink_written;
      if (job_restart_file (j) < 0)
        {
          ib_error_sys (&e, errno, "truncate %s", j->path);
          job_fail (j, &e);
          return;
        }
      if (was_resumed)
        {
          ib_warn ("%s: blob %.19s..: the resumed download does not match its digest; "
                   "downloading it again", f->shown, j->desc.digest);
          return;
        }
      ib_error_set (&e, EBADMSG, "digest mismatch: %llu bytes received that hash to %s",
                    (unsigned long long) got_size, got);
      job_retry_or_fail (j, &e, true, 0);
      return;
    }
  if (ib_store_commit_blob_hashed (f->store, j->path, j->desc.digest, &e) < 0)
    {
      job_fail (j, &e);
      return;
    }
  if (f->unpacking)
    ib_progress_set_status (f->progress, j->item, "Download complete");
  else
    ib_progress_done (f->progress, j->item, true, "Download complete");
  job_done (j); /* the fd stays open for readers: the blob file, now committed */
}

/* The pull's blobs received nothing for f->progress_s seconds, retries
 * and their waits included (docs/cli.md "Network deadlines"): every blob
 * still open fails, naming the limit and, when a retry was waiting, why
 * the last attempt failed. */
static void
fetch_no_progress (struct ib_fetch *f)
{
  for (size_t i = 0; i < f->n; i++)
    {
      fetch_job_t *j = &f->jobs[i];
      if (j->state != JOB_WAITING && j->state != JOB_ACTIVE)
        continue;
      job_release_easy (j);
      ib_error_t e = NULL;
      ib_error_set (&e, ETIMEDOUT,
                    "timed out: no progress for %lld s (no blob received a byte from %s; set "
                    "%s=SECONDS to allow more)%s%s",
                    (long long) f->progress_s, f->r->name,
                    ib_registry_net_limit_var (IB_NET_PROGRESS),
                    j->last_error ? "; the last attempt: " : "",
                    j->last_error ? j->last_error : "");
      job_fail (j, &e);
    }
}

static void *
fetch_loop (void *arg)
{
  struct ib_fetch *f = arg;
  for (;;)
    {
      pthread_mutex_lock (&f->mu);
      bool cancel = f->cancel;
      pthread_mutex_unlock (&f->mu);
      if (cancel)
        break;
      int64_t now = now_ms ();
      size_t active = 0, open_jobs = 0;
      int64_t next_wake = -1;
      for (size_t i = 0; i < f->n; i++)
        if (f->jobs[i].state == JOB_ACTIVE)
          active++;
      for (size_t i = 0; i < f->n; i++)
        {
          fetch_job_t *j = &f->jobs[i];
          if (j->state == JOB_WAITING)
            {
              if (j->not_before_ms > now)
                {
                  if (next_wake < 0 || j->not_before_ms < next_wake)
                    next_wake = j->not_before_ms;
                }
              else if (active < FETCH_MAX_ACTIVE)
                {
                  ib_error_t e = NULL;
                  if (job_start (j, &e) < 0)
                    {
                      job_release_easy (j);
                      job_fail (j, &e);
                    }
                  else if (j->state == JOB_ACTIVE)
                    active++;
                  else if (j->state == JOB_WAITING
                           && (next_wake < 0 || j->not_before_ms < next_wake))
                    next_wake = j->not_before_ms;
                }
            }
          if (j->state == JOB_WAITING || j->state == JOB_ACTIVE)
            open_jobs++;
        }
      if (open_jobs == 0)
        break;
      if (now - f->progress_ms >= f->progress_s * 1000)
        {
          fetch_no_progress (f);
          continue;
        }
      int running = 0;
      curl_multi_perform (f->multi, &running);
      CURLMsg *msg;
      int left;
      bool progressed = false;
      while ((msg = curl_multi_info_read (f->multi, &left)))
        if (msg->msg == CURLMSG_DONE)
          {
            fetch_job_t *j = NULL;
            curl_easy_getinfo (msg->easy_handle, CURLINFO_PRIVATE, (char **) &j);
            job_finished (j, msg->data.result);
            progressed = true;
          }
      if (progressed)
        continue;
      int timeout = 200;
      if (next_wake >= 0)
        {
          int64_t d = next_wake - now_ms ();
          if (d < timeout)
            timeout = d < 0 ? 0 : (int) d;
        }
      curl_multi_poll (f->multi, NULL, 0, timeout, NULL);
    }
  /* cancelled: stop what runs */
  for (size_t i = 0; i < f->n; i++)
    job_release_easy (&f->jobs[i]);
  pthread_mutex_lock (&f->mu);
  f->finished = true;
  job_wake (f);
  pthread_mutex_unlock (&f->mu);
  return NULL;
}

int
ib_fetch_start (ib_registry_t *r, ib_store_t *store, const char *repo, const char *shown,
                const ib_descriptor_t *blobs, size_t n, ib_progress_t *progress, bool unpacking,
                ib_fetch_t **out, ib_error_t *err)
{
  *out = NULL;
  for (size_t i = 0; i < n; i++)
    if (!ib_digest_valid (blobs[i].digest))
      return ib_error_set (err, EINVAL, "blob \"%s\": not a sha256 digest", blobs[i].digest);
  if (probe_scheme (r, err) < 0 || ping (r, err) < 0)
    return -1;
  struct ib_fetch *f = xmalloc (sizeof *f);
  f->r = r;
  f->store = store;
  f->repo = xstrdup (repo);
  f->scope = pull_scope (repo);
  f->shown = xstrdup (shown ? shown : repo);
  f->n = n;
  f->jobs = xmalloc ((n ? n : 1) * sizeof *f->jobs);
  f->stall_s = ib_registry_net_limit (IB_NET_STALL);
  f->progress_s = ib_registry_net_limit (IB_NET_PROGRESS);
  f->progress_ms = now_ms ();
  f->progress = progress;
  f->unpacking = unpacking;
  for (size_t i = 0; i < n; i++)
    {
      fetch_job_t *j = &f->jobs[i];
      char id[13];
      ib_progress_short_id (blobs[i].digest, id);
      j->item = ib_progress_add (progress, id, "Downloading", blobs[i].size > 0 ? blobs[i].size : -1);
      j->f = f;
      j->fd = -1;
      memcpy (j->desc.digest, blobs[i].digest, IB_DIGEST_LEN);
      j->desc.size = blobs[i].size > 0 ? blobs[i].size : -1;
      xfer_init (&j->x, "GET");
      j->x.scope = f->scope;
    }
  pthread_mutex_init (&f->mu, NULL);
  pthread_cond_init (&f->cv, NULL);
  f->multi = curl_multi_init ();
  curl_multi_setopt (f->multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long) FETCH_MAX_ACTIVE);
  int rc = pthread_create (&f->thread, NULL, fetch_loop, f);
  if (rc != 0)
    {
      ib_fetch_free (f);
      return ib_error_sys (err, rc, "start the download thread");
    }
  f->thread_live = true;
  *out = f;
  return 0;
}

ssize_t
ib_fetch_read (ib_fetch_t *f, size_t i, ib_fetch_cursor_t *cur, void *buf, size_t len,
               ib_error_t *err)
{
  fetch_job_t *j = &f->jobs[i];
  pthread_mutex_lock (&f->mu);
  for (;;)
    {
      if (j->state == JOB_FAILED)
        {
          int st = j->err ? j->err->status : EIO;
          ib_error_set (err, st ? st : EIO, "%s", j->err ? j->err->msg : "download failed");
          pthread_mutex_unlock (&f->mu);
          return -1;
        }
      if (cur->started && cur->generation != j->generation)
        {
          pthread_mutex_unlock (&f->mu);
          return ib_error_set (err, ESTALE, "blob %s: the download started over", j->desc.digest);
        }
      if (j->fd >= 0 && cur->pos < j->published)
        break;
      if (j->state == JOB_DONE || (f->finished && j->state != JOB_FAILED))
        {
          pthread_mutex_unlock (&f->mu);
          if (j->state != JOB_DONE)
            return ib_error_set (err, ECANCELED, "blob %s: download cancelled", j->desc.digest);
          return 0;
        }
      pthread_cond_wait (&f->cv, &f->mu);
    }
  if (!cur->started)
    {
      cur->started = true;
      cur->generation = j->generation;
    }
  uint64_t avail = j->published - cur->pos;
  size_t want = len < avail ? len : (size_t) avail;
  int fd = j->fd;
  unsigned gen = j->generation;
  pthread_mutex_unlock (&f->mu);
  ssize_t n;
  do
    n = pread (fd, buf, want, (off_t) cur->pos);
  while (n < 0 && errno == EINTR);
  if (n < 0)
    return ib_error_sys (err, errno, "blob %s: read", j->desc.digest);
  pthread_mutex_lock (&f->mu);
  bool stale = j->generation != gen;
  pthread_mutex_unlock (&f->mu);
  if (stale)
    return ib_error_set (err, ESTALE, "blob %s: the download started over", j->desc.digest);
  cur->pos += (uint64_t) n;
  return n;
}

int
ib_fetch_wait (ib_fetch_t *f, ib_error_t *err)
{
  pthread_mutex_lock (&f->mu);
  while (!f->finished)
    pthread_cond_wait (&f->cv, &f->mu);
  pthread_mutex_unlock (&f->mu);
  for (size_t i = 0; i < f->n; i++)
    if (f->jobs[i].state == JOB_FAILED)
      {
        *err = f->jobs[i].err;
        f->jobs[i].err = NULL;
        return -1;
      }
    else if (f->jobs[i].state != JOB_DONE)
      return ib_error_set (err, ECANCELED, "blob %s: download cancelled", f->jobs[i].desc.digest);
  return 0;
}

void
ib_fetch_free (ib_fetch_t *f)
{
  if (f == NULL)
    return;
  if (f->thread_live)
    {
      pthread_mutex_lock (&f->mu);
      f->cancel = true;
      pthread_mutex_unlock (&f->mu);
      curl_multi_wakeup (f->multi);
      pthread_join (f->thread, NULL);
    }
  for (size_t i = 0; i < f->n; i++)
    {
      fetch_job_t *j = &f->jobs[i];
      job_release_easy (j);
      if (j->fd >= 0)
        close (j->fd); /* releases the partial file's lock */
      free (j->path);
      free (j->url);
      free (j->retry_after);
      free (j->last_error);
      ib_sha256_free (j->x.sink_hash);
      xfer_free (&j->x);
      ib_error_free (&j->err);
    }
  if (f->multi)
    curl_multi_cleanup (f->multi);
  pthread_mutex_destroy (&f->mu);
  pthread_cond_destroy (&f->cv);
  free (f->jobs);
  free (f->repo);
  free (f->scope);
  free (f->shown);
  free (f);
}

int
ib_registry_fetch_blob (ib_registry_t *r, const char *repo, const char *digest, ib_store_t *store,
                        ib_error_t *err)
{
  if (!ib_digest_valid (digest))
    return ib_error_set (err, EINVAL, "blob \"%s\": not a sha256 digest", digest);
  if (ib_store_has_blob (store, digest))
    return 0;
  ib_descriptor_t d = { .size = -1 };
  memcpy (d.digest, digest, IB_DIGEST_LEN);
  ib_fetch_t *f = NULL;
  int ret = ib_fetch_start (r, store, repo, NULL, &d, 1, NULL, false, &f, err);
  if (ret == 0)
    ret = ib_fetch_wait (f, err);
  ib_fetch_free (f);
  return ret;
}

/* An upload URL the registry gave (Location): with our token when it is
 * the registry itself, without one when an upload service elsewhere. */
static int
upload_request (ib_registry_t *r, xfer_t *x, const char *url, ib_error_t *err)
{
  if (same_origin (url, r->base))
    return registry_do (r, x, url, err);
  return http_once (r, x, url, NULL, err);
}

/* The token scope for pushing to `repo`, mounting from `from` (may be NULL):
 * "repository:dst:pull,push repository:src:pull"; caller frees. */
static char *
upload_scope (const char *repo, const char *from)
{
  if (from)
    return xasprintf ("repository:%s:pull,push repository:%s:pull", repo, from);
  return push_scope (repo);
}

/* POST /v2/<repo>/blobs/uploads/, with ?mount=<digest>&from=<from> when
 * `from` is not NULL (distribution-spec "Mounting a blob from another
 * repository").  *mounted: the registry answered 201 and linked the blob.
 * Else *location (caller frees) is the upload URL of its 202 and
 * *chunk_min its OCI-Chunk-Min-Length (0 when absent). */
static int
start_upload (ib_registry_t *r, const char *repo, const char *digest, const char *from,
              bool *mounted, char **location, uint64_t *chunk_min, ib_error_t *err)
{
  *mounted = false;
  *location = NULL;
  *chunk_min = 0;
  cleanup_free char *scope = upload_scope (repo, from);
  cleanup_free char *url = NULL;
  if (from)
    {
      cleanup_free char *d = url_escape (r->curl, digest);
      cleanup_free char *f = url_escape (r->curl, from);
      url = xasprintf ("%s/v2/%s/blobs/uploads/?mount=%s&from=%s", r->base, repo, d, f);
    }
  else
    url = xasprintf ("%s/v2/%s/blobs/uploads/", r->base, repo);
  xfer_t x;
  xfer_init (&x, "POST");
  x.scope = scope;
  int ret = registry_do (r, &x, url, err);
  if (ret == 0)
    {
      if (from && x.status == 201)
        *mounted = true;
      else if (x.status == 202 && x.location)
        {
          cleanup_free char *used = rebase_url (r, url);
          *location = resolve_url (used, x.location);
          *chunk_min = x.chunk_min;
        }
      else if (x.status == 202)
        ret = ib_error_set (err, EPROTO, "the registry started an upload without a Location");
      else
        ret = status_error (&x, err);
    }
  xfer_free (&x);
  return ret;
}

/* "<url>?digest=<digest>" (or "&digest=" when url has a query); caller frees. */
static char *
digest_url (ib_registry_t *r, const char *url, const char *digest)
{
  cleanup_free char *d = url_escape (r->curl, digest);
  return xasprintf ("%s%cdigest=%s", url, strchr (url, '?') ? '&' : '?', d);
}

/* Monolithic upload: PUT <location>?digest= with the whole blob, streamed
 * from fd. */
static int
upload_monolithic (ib_registry_t *r, const char *scope, const char *location, const char *digest,
                   int fd, uint64_t size, ib_progress_t *progress, int item, ib_error_t *err)
{
  cleanup_free char *put_url = digest_url (r, location, digest);
  xfer_t x;
  xfer_init (&x, "PUT");
  x.progress = progress;
  x.progress_item = item;
  x.scope = scope;
  x.content_type = "application/octet-stream";
  x.upload_fd = fd;
  x.upload_size = size;
  int ret = upload_request (r, &x, put_url, err);
  if (ret == 0 && (x.status < 200 || x.status >= 300))
    ret = status_error (&x, err);
  xfer_free (&x);
  return ret;
}

/* Chunked upload (distribution-spec "Pushing a blob in chunks"): PATCH
 * chunks of `chunk` bytes (at least the registry's OCI-Chunk-Min-Length)
 * with Content-Range: start-end, each to the Location of the previous 202,
 * then PUT ?digest= without a body.  Streamed from fd with pread; *chunks
 * gets the number of PATCH requests. */
static int
upload_chunked (ib_registry_t *r, const char *scope, const char *location, const char *digest,
                int fd, uint64_t size, uint64_t chunk, uint64_t chunk_min, unsigned *chunks,
                ib_progress_t *progress, int item, ib_error_t *err)
{
  if (chunk < chunk_min)
    {
      ib_debug ("blob %s: chunks of %llu bytes, the registry's minimum", digest,
                (unsigned long long) chunk_min);
      chunk = chunk_min;
    }
  *chunks = 0;
  cleanup_free char *cur = xstrdup (location);
  for (uint64_t off = 0; off < size;)
    {
      uint64_t len = size - off < chunk ? size - off : chunk;
      char range[64];
      snprintf (range, sizeof range, "%llu-%llu", (unsigned long long) off,
                (unsigned long long) (off + len - 1));
      xfer_t x;
      xfer_init (&x, "PATCH");
      x.scope = scope;
      x.content_type = "application/octet-stream";
      x.send_range = range;
      x.upload_fd = fd;
      x.upload_base = off;
      x.upload_size = len;
      x.progress = progress;
      x.progress_item = item;
      int ret = upload_request (r, &x, cur, err);
      if (ret == 0 && x.status != 202)
        ret = status_error (&x, err);
      if (ret == 0 && x.location)
        {
          char *next = resolve_url (cur, x.location);
          free (cur);
          cur = next;
        }
      xfer_free (&x);
      if (ret < 0)
        return ib_error_prefix (err, "chunk bytes %s", range);
      off += len;
      (*chunks)++;
    }
  cleanup_free char *put_url = digest_url (r, cur, digest);
  xfer_t x;
  xfer_init (&x, "PUT");
  x.scope = scope;
  x.content_type = "application/octet-stream";
  x.bulk = true; /* the registry may take its time to assemble the blob */
  int ret = upload_request (r, &x, put_url, err);
  if (ret == 0 && (x.status < 200 || x.status >= 300))
    ret = status_error (&x, err);
  xfer_free (&x);
  if (ret < 0)
    return ib_error_prefix (err, "finish chunked upload");
  return 0;
}

/* Put a stored blob into `repo`: mounted from repository `from` of the same
 * registry when `from` is not NULL and the registry agrees (201), else
 * uploaded (into the upload its mount answer started, or a new one):
 * monolithic, or chunked when ib_registry_chunk_size() is set and the blob
 * is larger.  `how` (64 bytes) gets what happened, for the progress line:
 * "Mounted from REPO", "Pushed" or "Pushed (N chunks)"; bytes sent go to
 * the progress item (may be NULL/-1). */
static int
upload_blob (ib_registry_t *r, const char *repo, const char *digest, ib_store_t *store,
             const char *from, char how[64], ib_progress_t *progress, int item, ib_error_t *err)
{
  cleanup_free char *path = ib_store_blob_path (store, digest);
  cleanup_close int fd = open (path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    {
      if (errno == ENOENT)
        return ib_error_set (err, ENOENT, "blob %s not found in store %s", digest, store->root);
      return ib_error_sys (err, errno, "blob %s: open %s", digest, path);
    }
  struct stat st;
  if (fstat (fd, &st) < 0)
    return ib_error_sys (err, errno, "blob %s: stat %s", digest, path);

  bool mounted = false;
  cleanup_free char *location = NULL;
  uint64_t chunk_min = 0;
  ib_error_t e = NULL;
  if (start_upload (r, repo, digest, from, &mounted, &location, &chunk_min, &e) < 0)
    {
      if (from == NULL)
        {
          *err = e;
          return ib_error_prefix (err, "push blob %s: start upload", digest);
        }
      ib_debug ("blob %s: mount from %s refused (%s); uploading it", digest, from, e->msg);
      ib_error_free (&e);
      from = NULL;
      if (start_upload (r, repo, digest, NULL, &mounted, &location, &chunk_min, err) < 0)
        return ib_error_prefix (err, "push blob %s: start upload", digest);
    }
  if (mounted)
    {
      snprintf (how, 64, "Mounted from %s", from);
      return 0;
    }
  if (from)
    ib_debug ("blob %s: the registry did not mount it from %s; uploading it", digest, from);
  cleanup_free char *scope = push_scope (repo);
  uint64_t size = (uint64_t) st.st_size, chunk = ib_registry_chunk_size ();
  int ret;
  ib_progress_set_status (progress, item, "Pushing");
  ib_progress_update (progress, item, 0);
  if (chunk > 0 && size > chunk)
    {
      unsigned n = 0;
      ret = upload_chunked (r, scope, location, digest, fd, size, chunk, chunk_min, &n, progress,
                            item, err);
      snprintf (how, 64, "Pushed (%u chunks)", n);
    }
  else
    {
      ret = upload_monolithic (r, scope, location, digest, fd, size, progress, item, err);
      snprintf (how, 64, "Pushed");
    }
  if (ret == 0)
    ib_progress_update (progress, item, (int64_t) size);
  if (ret < 0)
    return ib_error_prefix (err, "push blob %s", digest);
  return 0;
}

int
ib_registry_push_blob (ib_registry_t *r, const char *repo, const char *digest, ib_store_t *store,
                       ib_error_t *err)
{
  bool exists;
  if (ib_registry_blob_exists (r, repo, digest, &exists, err) < 0)
    return -1;
  if (exists)
    return 0;
  char how[64];
  return upload_blob (r, repo, digest, store, NULL, how, NULL, -1, err);
}

/* ---------- pull / push ---------- */


static bool
is_manifest_media_type (const char *mt)
{
  return mt && (strcmp (mt, IB_MT_OCI_MANIFEST) == 0 || strcmp (mt, IB_MT_DOCKER_MANIFEST) == 0);
}

static bool
is_config_media_type (const char *mt)
{
  return strcmp (mt, IB_MT_OCI_CONFIG) == 0 || strcmp (mt, IB_MT_DOCKER_CONFIG) == 0;
}

/* ---------- pull: from a reference to one platform's manifest ---------- */

typedef struct manifest_walk
{
  const char *repo, *shown;
  const char *os, *arch, *variant; /* the platform asked for */
  ib_buf_t offered;                /* platforms the indexes walked offer, for the error */
  char **indexes;                  /* verified index documents, stored at the end */
  size_t *index_lens;
  size_t n_indexes;
} manifest_walk_t;

static void
walk_offered (manifest_walk_t *w, const char *list)
{
  /* append each platform of `list` ("a, b") not listed yet */
  const char *p = list;
  while (p && *p)
    {
      size_t n = strcspn (p, ",");
      cleanup_free char *one = xstrndup (p, n);
      bool seen = false;
      const char *q = w->offered.data;
      while (q && *q && !seen)
        {
          size_t k = strcspn (q, ",");
          seen = k == n && strncmp (q, one, n) == 0;
          q += k;
          while (*q == ',' || *q == ' ')
            q++;
        }
      if (!seen)
        ib_buf_printf (&w->offered, "%s%s", w->offered.len ? ", " : "", one);
      p += n;
      while (*p == ',' || *p == ' ')
        p++;
    }
}

static void
walk_keep_index (manifest_walk_t *w, const char *data, size_t len)
{
  w->indexes = xrealloc (w->indexes, (w->n_indexes + 1) * sizeof *w->indexes);
  w->index_lens = xrealloc (w->index_lens, (w->n_indexes + 1) * sizeof *w->index_lens);
  char *copy = xmalloc (len + 1);
  memcpy (copy, data, len);
  copy[len] = '\0';
  w->indexes[w->n_indexes] = copy;
  w->index_lens[w->n_indexes++] = len;
}

static void
walk_free (manifest_walk_t *w)
{
  for (size_t i = 0; i < w->n_indexes; i++)
    free (w->indexes[i]);
  free (w->indexes);
  free (w->index_lens);
  ib_buf_free (&w->offered);
}

/* GET the manifest or index an index entry names; the bytes must hash to
 * its digest (ib_registry_get_manifest checks) and be as long as its size. */
static int
get_child (ib_registry_t *r, manifest_walk_t *w, const ib_descriptor_t *d, char **data,
           size_t *len, ib_doc_kind_t *kind, ib_error_t *err)
{
  cleanup_free char *ct = NULL;
  char got[IB_DIGEST_LEN];
  if (ib_registry_get_manifest (r, w->repo, d->digest, data, len, &ct, got, err) < 0)
    return -1;
  int ret = 0;
  if ((int64_t) *len != d->size)
    ret = ib_error_set (err, EINVAL, "manifest %s: the index gives its size as %lld bytes, the "
                        "registry sent %zu", d->digest, (long long) d->size, *len);
  else if (ib_doc_kind (*data, *len, ct, kind, err) < 0)
    ret = ib_error_prefix (err, "manifest %s", d->digest);
  else if (*kind == IB_DOC_INDEX && is_manifest_media_type (d->media_type))
    ret = ib_error_set (err, EINVAL, "manifest %s: the index lists it as an image manifest (%s) "
                        "but it is an index", d->digest, d->media_type);
  if (ret < 0)
    {
      free (*data);
      *data = NULL;
    }
  return ret;
}

/* Search the index `data` (digest `digest`, `depth` levels deep) for the
 * platform's manifest: 0 and *mdata etc. set when found, 1 when it holds
 * none (w->offered extended), -1 on errors. */
static int
walk_index (ib_registry_t *r, manifest_walk_t *w, const char *data, size_t len,
            const char *digest, int depth, char **mdata, size_t *mlen, char mdigest[IB_DIGEST_LEN],
            ib_error_t *err)
{
  for (size_t skip = 0;; skip++)
    {
      ib_descriptor_t sel;
      cleanup_free char *offered = NULL;
      ib_error_t e = NULL;
      if (ib_index_select (data, len, w->os, w->arch, w->variant, skip, &sel, &offered, &e) < 0)
        {
          if (e->status != ENOENT)
            {
              *err = e;
              return ib_error_prefix (err, "index %s", digest);
            }
          ib_error_free (&e);
          walk_offered (w, offered);
          return 1;
        }
      char *cdata = NULL;
      size_t clen = 0;
      ib_doc_kind_t kind;
      char sd[24];
      short_digest (digest, sd);
      if (get_child (r, w, &sel, &cdata, &clen, &kind, err) < 0)
        {
          ib_descriptor_clear (&sel);
          return -1;
        }
      int rc;
      if (kind == IB_DOC_MANIFEST)
        {
          cleanup_free char *ps = ib_platform_string (sel.os, sel.arch, sel.variant);
          ib_info ("pull %s: index %s -> %s manifest", w->shown, sd, ps);
          *mdata = cdata;
          *mlen = clen;
          memcpy (mdigest, sel.digest, IB_DIGEST_LEN);
          rc = 0;
        }
      else if (depth >= INDEX_DEPTH_MAX)
        {
          free (cdata);
          rc = ib_error_set (err, ELOOP, "index %s: indexes nested more than %d deep", sel.digest,
                             INDEX_DEPTH_MAX);
        }
      else
        {
          ib_info ("pull %s: index %s -> index %.19s..", w->shown, sd, sel.digest);
          rc = walk_index (r, w, cdata, clen, sel.digest, depth + 1, mdata, mlen, mdigest, err);
          free (cdata);
        }
      ib_descriptor_clear (&sel);
      if (rc == 0)
        walk_keep_index (w, data, len);
      if (rc <= 0)
        return rc;
      /* that nested index holds nothing for us: the next one */
    }
}

/* GET a small blob (an image config) into memory; verified against the
 * descriptor's digest and size. */
static int
get_small_blob (ib_registry_t *r, const char *repo, const ib_descriptor_t *d, char **data,
                size_t *len, ib_error_t *err)
{
  *data = NULL;
  if (d->size > CONFIG_MAX)
    return ib_error_set (err, EFBIG, "blob %s: %lld bytes, more than the %d allowed for an "
                         "image config", d->digest, (long long) d->size, CONFIG_MAX);
  cleanup_free char *scope = pull_scope (repo);
  cleanup_free char *url = xasprintf ("%s/v2/%s/blobs/%s", r->base, repo, d->digest);
  xfer_t x;
  xfer_init (&x, "GET");
  x.scope = scope;
  x.body_max = CONFIG_MAX;
  int ret = registry_do (r, &x, url, err);
  if (ret == 0 && x.status != 200)
    ret = status_error (&x, err);
  if (ret == 0)
    {
      char got[IB_DIGEST_LEN];
      ib_digest_buf (x.resp.data ? x.resp.data : "", x.resp.len, got);
      if (strcmp (got, d->digest) != 0)
        ret = ib_error_set (err, EINVAL, "digest mismatch (the bytes received hash to %s)", got);
      else if ((int64_t) x.resp.len != d->size)
        ret = ib_error_set (err, EINVAL, "the manifest gives its size as %lld bytes, the "
                            "registry sent %zu", (long long) d->size, x.resp.len);
      else
        {
          *len = x.resp.len;
          *data = ib_buf_steal (&x.resp);
        }
    }
  xfer_free (&x);
  if (ret < 0)
    ib_error_prefix (err, "config %s", d->digest);
  return ret;
}

/* The manifest-resolution part of a pull (distribution-spec "Pulling
 * manifests", image-index.md): GET the reference (verified when it is a
 * digest); schema 1 refused; from an index (or nested indexes, at most
 * INDEX_DEPTH_MAX deep) the platform's manifest, whose bytes must match the
 * index's descriptor (digest and size).  The image config is read into
 * memory and verified; when the manifest did not come from an index, its
 * platform is checked against an explicitly asked one (error) or the host's
 * (warning).  Only when everything checked out are the indexes walked and
 * the config stored as blobs; the platform manifest itself is left to the
 * caller.  *data (caller frees), *len, mdigest and *m (ib_manifest_free)
 * describe the platform manifest. */
static int
resolve_manifest (ib_registry_t *r, ib_store_t *store, const ib_ref_t *ref, const char *shown,
                  const char *os, const char *arch, const char *variant, bool explicit_platform,
                  char **top_doc, size_t top_len, const char *ctype,
                  const char top_digest[IB_DIGEST_LEN], char **data, size_t *len,
                  char mdigest[IB_DIGEST_LEN], ib_manifest_t **m, json_t **config_out,
                  ib_error_t *err)
{
  *data = NULL;
  *m = NULL;
  *config_out = NULL;
  manifest_walk_t w = { .repo = ref->repository, .shown = shown, .os = os, .arch = arch,
                        .variant = variant };
  cleanup_free char *top = steal_pointer (top_doc);
  cleanup_free char *config = NULL;
  size_t config_len = 0;
  ib_doc_kind_t kind;
  bool from_index = false;
  int ret = -1;

  if (ib_doc_kind (top, top_len, ctype, &kind, err) < 0)
    goto out;
  if (kind == IB_DOC_INDEX)
    {
      int rc = walk_index (r, &w, top, top_len, top_digest, 1, data, len, mdigest, err);
      if (rc < 0)
        goto out;
      if (rc > 0)
        {
          cleanup_free char *want = ib_platform_string (os, arch, variant);
          ib_error_set (err, ENOENT, "no image for %s; the index offers %s", want,
                        w.offered.len ? w.offered.data : "no image for any platform");
          goto out;
        }
      from_index = true;
    }
  else
    {
      *data = steal_pointer (&top);
      *len = top_len;
      memcpy (mdigest, top_digest, IB_DIGEST_LEN);
    }
  if (ib_manifest_parse (*data, *len, m, err) < 0)
    goto out;
  if (!is_config_media_type ((*m)->config.media_type))
    {
      ib_error_set (err, ENOTSUP, "not a container image (config media type %s)",
                    (*m)->config.media_type);
      goto out;
    }
  /* a config the store holds (another name of the image, a base pulled
   * before) is read there: verified, and no request; one larger than a
   * config may be (a manifest naming a layer as its config) is left to
   * get_small_blob, which refuses it before reading a byte */
  ib_error_t se = NULL;
  if (store == NULL || (*m)->config.size > CONFIG_MAX
      || !ib_store_has_blob (store, (*m)->config.digest)
      || ib_store_read_blob (store, (*m)->config.digest, &config, &config_len, &se) < 0
      || (int64_t) config_len != (*m)->config.size)
    {
      ib_error_free (&se);
      free (config);
      config = NULL;
      if (get_small_blob (r, ref->repository, &(*m)->config, &config, &config_len, err) < 0)
        goto out;
    }
  json_error_t je;
  json_t *c = json_loadb (config, config_len, 0, &je);
  if (!json_is_object (c))
    {
      if (c)
        json_decref (c);
      ib_error_set (err, EINVAL, "config %s: not a JSON object (%s)", (*m)->config.digest,
                    je.text);
      goto out;
    }
  *config_out = c;
  if (!from_index)
    {
      const char *cos = json_string_value (json_object_get (c, "os"));
      const char *carch = json_string_value (json_object_get (c, "architecture"));
      const char *cvar = json_string_value (json_object_get (c, "variant"));
      int rc = 0;
      if (cos && carch && ib_platform_rank (os, arch, variant, cos, carch, cvar) == 0)
        {
          cleanup_free char *have = ib_platform_string (cos, carch, cvar);
          cleanup_free char *want = ib_platform_string (os, arch, variant);
          if (explicit_platform)
            rc = ib_error_set (err, ENOENT, "the image is for %s, not %s (it is a single-platform "
                               "image, not an index)", have, want);
          else
            ib_warn ("pull %s: the image is for %s, not for this host's %s", shown, have, want);
        }
      if (rc < 0)
        goto out;
    }
  for (size_t i = 0; i < w.n_indexes; i++)
    if (ib_store_put_blob (store, w.indexes[i], w.index_lens[i], NULL, err) < 0)
      goto out;
  if (ib_store_put_blob (store, config, config_len, NULL, err) < 0)
    goto out;
  ret = 0;
out:
  if (ret < 0)
    {
      free (*data);
      *data = NULL;
      ib_manifest_free (*m);
      *m = NULL;
      if (*config_out)
        json_decref (*config_out);
      *config_out = NULL;
    }
  walk_free (&w);
  return ret;
}

/* Get the manifest `reference` of `ref` from the first source that serves
 * it: registries.conf's mirrors in order, then the primary location (a
 * mirror that fails, whatever the reason, hands over to the next with a
 * debug line).  On success *r is a client for that source and ref's
 * registry and repository are replaced by the source's. */
static int
pull_open (ib_ref_t *ref, const char *reference, const char *shown, ib_registry_t **r,
           char **data, size_t *len, char **ctype, char mdigest[IB_DIGEST_LEN], ib_error_t *err)
{
  *r = NULL;
  const ib_regconf_t *conf;
  ib_reg_source_t *src = NULL;
  size_t n = 0;
  if (ib_registry_conf (&conf, err) < 0
      || ib_regconf_sources (conf, ref->registry, ref->repository, ref->digest != NULL, false,
                             &src, &n, err)
             < 0)
    return -1;
  int ret = -1;
  for (size_t i = 0; i < n; i++)
    {
      ib_ref_t at = { .registry = src[i].registry, .repository = src[i].repository,
                      .tag = ref->tag, .digest = ref->digest };
      if (src[i].insecure && !is_insecure (at.registry))
        ib_registry_add_insecure (at.registry);
      ib_error_t e = NULL;
      ib_registry_t *c = NULL;
      if (ib_registry_new (&at, &c, &e) == 0
          && ib_registry_get_manifest (c, at.repository, reference, data, len, ctype, mdigest, &e)
                 == 0)
        {
          if (src[i].mirror)
            ib_info ("pull %s: from mirror %s/%s", shown, at.registry, at.repository);
          else if (strcmp (at.registry, ref->registry) || strcmp (at.repository, ref->repository))
            ib_info ("pull %s: from %s/%s", shown, at.registry, at.repository);
          free (ref->registry);
          free (ref->repository);
          ref->registry = steal_pointer (&src[i].registry);
          ref->repository = steal_pointer (&src[i].repository);
          *r = c;
          ret = 0;
          break;
        }
      ib_registry_free (c);
      if (i + 1 == n)
        {
          *err = e;
          break;
        }
      ib_debug ("pull %s: mirror %s/%s: %s; trying the next source", shown, at.registry,
                at.repository, e->msg);
      ib_error_free (&e);
    }
  ib_reg_sources_free (src, n);
  return ret;
}

struct ib_pull_session
{
  ib_store_t *store;
  ib_ref_t ref;
  char *shown;
  ib_registry_t *r;
  char *data;                 /* the image manifest's bytes as the registry sent them */
  size_t len;
  char mdigest[IB_DIGEST_LEN];
  ib_manifest_t *m;
  json_t *config;
  ib_fetch_t *fetch;
  ib_progress_t *progress;
};

static void
pull_session_free (ib_pull_session_t *s)
{
  if (s == NULL)
    return;
  ib_fetch_free (s->fetch);
  ib_progress_end (s->progress);
  ib_registry_free (s->r);
  ib_manifest_free (s->m);
  if (s->config)
    json_decref (s->config);
  free (s->data);
  free (s->shown);
  ib_ref_free (&s->ref);
  free (s);
}

int
ib_pull_begin (ib_store_t *store, const char *ref_string, const char *os, const char *arch,
               const char *variant, bool unpacking, ib_pull_session_t **out, ib_error_t *err)
{
  *out = NULL;
  ib_ref_t ref;
  if (ib_ref_parse (ref_string, &ref, err) < 0)
    return ib_error_prefix (err, "pull");
  cleanup_free char *shown = ib_ref_string (&ref);
  bool explicit_platform = os != NULL || arch != NULL;
  if (os == NULL || arch == NULL)
    {
      const char *hos, *harch, *hvar;
      ib_host_platform (&hos, &harch, &hvar);
      if (os == NULL)
        os = hos;
      if (arch == NULL)
        {
          arch = harch;
          if (variant == NULL)
            variant = hvar;
        }
    }

  ib_registry_t *r = NULL;
  char *data = NULL;
  size_t len = 0;
  char mdigest[IB_DIGEST_LEN];
  ib_manifest_t *m = NULL;
  int ret = -1;
  cleanup_free char *ctype = NULL;
  cleanup_free char *top = NULL;
  size_t top_len = 0;
  char top_digest[IB_DIGEST_LEN];
  json_t *config = NULL;
  const char *reference = ref.digest ? ref.digest : ref.tag;

  /* from here on `ref` names where the image comes from (a mirror, a
   * location registries.conf rewrote); `shown` keeps the name asked for */
  if (pull_open (&ref, reference, shown, &r, &top, &top_len, &ctype, top_digest, err) < 0
      || resolve_manifest (r, store, &ref, shown, os, arch, variant, explicit_platform, &top,
                           top_len, ctype, top_digest, &data, &len, mdigest, &m, &config, err)
             < 0)
    goto out;
  ib_fetch_t *fetch = NULL;
  ib_progress_t *progress = NULL;
  {
    cleanup_free char *title = xasprintf ("pull %s", shown);
    progress = ib_progress_begin (title);
  }
  if (ib_fetch_start (r, store, ref.repository, shown, m->layers, m->n_layers, progress,
                      unpacking, &fetch, err)
      < 0)
    {
      ib_progress_end (progress);
      json_decref (config);
      goto out;
    }
  ib_pull_session_t *s = xmalloc (sizeof *s);
  s->store = store;
  s->ref = ref;
  memset (&ref, 0, sizeof ref);
  s->shown = steal_pointer (&shown);
  s->r = steal_pointer (&r);
  s->data = steal_pointer (&data);
  s->len = len;
  memcpy (s->mdigest, mdigest, IB_DIGEST_LEN);
  s->m = steal_pointer (&m);
  s->config = config;
  s->fetch = fetch;
  s->progress = progress;
  *out = s;
  ret = 0;

out:
  if (ret < 0)
    ib_error_prefix (err, "pull %s", shown);
  free (data);
  ib_manifest_free (m);
  ib_registry_free (r);
  ib_ref_free (&ref);
  return ret;
}

const ib_manifest_t *
ib_pull_session_manifest (const ib_pull_session_t *s)
{
  return s->m;
}

json_t *
ib_pull_session_config (const ib_pull_session_t *s)
{
  return s->config;
}

ssize_t
ib_pull_session_read (ib_pull_session_t *s, size_t layer, ib_fetch_cursor_t *cur, void *buf,
                      size_t len, ib_error_t *err)
{
  return ib_fetch_read (s->fetch, layer, cur, buf, len, err);
}

void
ib_pull_session_layer_done (ib_pull_session_t *s, size_t layer, bool ok, const char *why)
{
  if (layer < s->m->n_layers)
    ib_progress_done (s->progress, (int) layer, ok, ok ? "Pull complete" : why);
}

void
ib_pull_abort (ib_pull_session_t *s)
{
  pull_session_free (s);
}

int
ib_pull_end (ib_pull_session_t *s, ib_descriptor_t *out, ib_error_t *err)
{
  if (out)
    memset (out, 0, sizeof *out);
  ib_store_t *store = s->store;
  const char *shown = s->shown;
  ib_manifest_t *m = s->m;
  /* where it came from (a mirror, maybe): a source for cross-repo mounts */
  cleanup_free char *source = xasprintf ("%s/%s", s->ref.registry, s->ref.repository);
  int ret = -1;
  if (ib_fetch_wait (s->fetch, err) < 0)
    goto out;
  if (ib_store_put_blob (store, s->data, s->len, NULL, err) < 0)
    goto out;
  if (strcmp (m->media_type, IB_MT_DOCKER_MANIFEST) == 0)
    {
      /* skopeo's oci: transport reads only OCI descriptors from index.json:
       * tag an OCI rendering of the same config and layers. */
      char *oci = ib_manifest_serialize (&m->config, m->layers, m->n_layers, NULL);
      ib_progress_message (s->progress, "Docker schema 2 manifest stored as an OCI manifest");
      free (s->data);
      s->data = oci;
      s->len = strlen (oci);
      free (m->media_type);
      m->media_type = xstrdup (IB_MT_OCI_MANIFEST);
      if (ib_store_put_blob (store, s->data, s->len, s->mdigest, err) < 0)
        goto out;
    }
  if (ib_store_tag_source (store, shown, m->media_type, s->mdigest, (int64_t) s->len, source,
                          err)
      < 0)
    goto out;
  if (ib_progress_get_mode () == IB_PROGRESS_QUIET)
    ib_info ("pull %s: manifest %s", shown, s->mdigest);
  else
    ib_progress_message (s->progress, "Digest: %s", s->mdigest);
  if (out)
    {
      out->media_type = xstrdup (m->media_type);
      memcpy (out->digest, s->mdigest, IB_DIGEST_LEN);
      out->size = (int64_t) s->len;
    }
  ret = 0;
out:
  if (ret < 0)
    ib_error_prefix (err, "pull %s", shown);
  pull_session_free (s);
  return ret;
}

int
ib_pull (ib_store_t *store, const char *ref_string, const char *os, const char *arch,
         const char *variant, ib_descriptor_t *out, ib_error_t *err)
{
  if (out)
    memset (out, 0, sizeof *out);
  ib_pull_session_t *s = NULL;
  if (ib_pull_begin (store, ref_string, os, arch, variant, false, &s, err) < 0)
    return -1;
  return ib_pull_end (s, out, err);
}

/* One `imgbuild push`: what is known to be in the registries already, so
 * that several destinations upload each blob once. */
typedef struct push_ctx
{
  ib_store_t *store;
  const char *shown; /* the destination, for messages */
  char **present;    /* "REGISTRY/REPO@DIGEST" known to be there */
  ib_progress_t *progress; /* this destination's display */
} push_ctx_t;

/* docker push's last line for a manifest: "TAG: digest: D size: N" (or
 * without "TAG: " when pushed by digest). */
static void
pushed_message (ib_progress_t *progress, const char *reference, const char *data, size_t len)
{
  char md[IB_DIGEST_LEN];
  ib_digest_buf (data, len, md);
  if (ib_str_has_prefix (reference, "sha256:"))
    ib_progress_message (progress, "digest: %s size: %zu", md, len);
  else
    ib_progress_message (progress, "%s: digest: %s size: %zu", reference, md, len);
}

static bool
push_known (push_ctx_t *pc, const char *registry, const char *repo, const char *digest)
{
  cleanup_free char *key = xasprintf ("%s/%s@%s", registry, repo, digest);
  for (char **p = pc->present; p && *p; p++)
    if (strcmp (*p, key) == 0)
      return true;
  return false;
}

static void
push_note (push_ctx_t *pc, const char *registry, const char *repo, const char *digest)
{
  if (!push_known (pc, registry, repo, digest))
    {
      cleanup_free char *key = xasprintf ("%s/%s@%s", registry, repo, digest);
      ib_strv_push (&pc->present, key);
    }
}

/* A repository of `registry` other than `repo` that holds `digest`: one
 * this push put it in, else one a stored image pulled it from (the store's
 * org.imgbuild.source annotations).  NULL when none; caller frees. */
static char *
mount_source (push_ctx_t *pc, const char *registry, const char *repo, const char *digest)
{
  size_t rn = strlen (registry);
  cleanup_free char *suffix = xasprintf ("@%s", digest);
  for (char **p = pc->present; p && *p; p++)
    if (strncmp (*p, registry, rn) == 0 && (*p)[rn] == '/' && ib_str_has_suffix (*p, suffix))
      {
        char *from = xstrndup (*p + rn + 1, strlen (*p) - rn - 1 - strlen (suffix));
        if (strcmp (from, repo) != 0)
          return from;
        free (from);
      }
  cleanup_strv char **sources = NULL;
  ib_error_t e = NULL;
  if (ib_store_blob_sources (pc->store, digest, &sources, &e) < 0)
    {
      ib_debug ("blob %s: no mount source: %s", digest, e->msg);
      ib_error_free (&e);
      return NULL;
    }
  for (char **s = sources; s && *s; s++)
    if (strncmp (*s, registry, rn) == 0 && (*s)[rn] == '/' && strcmp (*s + rn + 1, repo) != 0)
      return xstrdup (*s + rn + 1);
  return NULL;
}

/* Push one stored image manifest's blobs, then the manifest under
 * `reference`: per blob, known from this push -> skipped; HEAD says it is
 * there -> skipped; else mounted from another repository of the registry
 * when one is known to hold it, else uploaded. */
static int
push_manifest (push_ctx_t *pc, ib_registry_t *r, const char *repo, const char *data, size_t len,
               const char *media_type, const char *reference, ib_error_t *err)
{
  ib_manifest_t *m = NULL;
  if (ib_manifest_parse (data, len, &m, err) < 0)
    return -1;
  int ret = 0;
  for (size_t i = 0; i <= m->n_layers && ret == 0; i++)
    {
      const ib_descriptor_t *d = i == 0 ? &m->config : &m->layers[i - 1];
      const char *already = i == 0 ? "Already exists" : "Layer already exists";
      char id[13];
      ib_progress_short_id (d->digest, id);
      int item = ib_progress_add (pc->progress, id, "Preparing", d->size);
      if (push_known (pc, r->name, repo, d->digest))
        {
          ib_progress_done (pc->progress, item, true, already);
          continue;
        }
      bool exists = false;
      ret = ib_registry_blob_exists (r, repo, d->digest, &exists, err);
      if (ret == 0 && exists)
        ib_progress_done (pc->progress, item, true, already);
      else if (ret == 0)
        {
          cleanup_free char *from = mount_source (pc, r->name, repo, d->digest);
          char how[64];
          ret = upload_blob (r, repo, d->digest, pc->store, from, how, pc->progress, item, err);
          if (ret == 0)
            ib_progress_done (pc->progress, item, true, how);
        }
      if (ret < 0)
        ib_progress_done (pc->progress, item, false, (*err)->msg);
      else
        push_note (pc, r->name, repo, d->digest);
    }
  if (ret == 0)
    ret = ib_registry_put_manifest (r, repo, reference, data, len,
                                    media_type ? media_type : m->media_type, err);
  if (ret == 0)
    pushed_message (pc->progress, reference, data, len);
  ib_manifest_free (m);
  return ret;
}

/* Push the stored image `d` (bytes data/len) to one destination. */
static int
push_one (push_ctx_t *pc, ib_registry_t *r, const ib_ref_t *dst, const ib_descriptor_t *d,
          const char *data, size_t len, ib_doc_kind_t kind, ib_error_t *err)
{
  const char *reference = dst->tag ? dst->tag : d->digest;
  if (kind != IB_DOC_INDEX)
    return push_manifest (pc, r, dst->repository, data, len, d->media_type, reference, err);
  /* an index: each platform's manifest by digest first, then the index */
  json_t *j = json_loadb (data, len, 0, NULL);
  json_t *ms = json_object_get (j, "manifests");
  size_t i;
  json_t *e;
  int rc = 0;
  json_array_foreach (ms, i, e)
  {
    const char *cmt = json_string_value (json_object_get (e, "mediaType"));
    const char *cd = json_string_value (json_object_get (e, "digest"));
    cleanup_free char *cdata = NULL;
    size_t clen = 0;
    if (cd == NULL || cmt == NULL
        || !(strcmp (cmt, IB_MT_OCI_MANIFEST) == 0 || strcmp (cmt, IB_MT_DOCKER_MANIFEST) == 0))
      continue;
    if (push_known (pc, r->name, dst->repository, cd))
      continue;
    if (!ib_store_has_blob (pc->store, cd))
      {
        rc = ib_error_set (err, ENOENT, "the index names manifest %s, which is not in store %s",
                           cd, pc->store->root);
        break;
      }
    if (ib_store_read_blob (pc->store, cd, &cdata, &clen, err) < 0
        || push_manifest (pc, r, dst->repository, cdata, clen, cmt, cd, err) < 0)
      {
        rc = -1;
        break;
      }
    push_note (pc, r->name, dst->repository, cd);
  }
  json_decref (j);
  if (rc < 0)
    return -1;
  if (ib_registry_put_manifest (r, dst->repository, reference, data, len, d->media_type, err) < 0)
    return -1;
  pushed_message (pc->progress, reference, data, len);
  return 0;
}

/* Where a push of `ref` goes: its registries.conf location (never a
 * mirror); blocked registries refused.  Replaces ref's registry and
 * repository. */
static int
push_target (ib_ref_t *ref, ib_error_t *err)
{
  const ib_regconf_t *conf;
  ib_reg_source_t *src = NULL;
  size_t n = 0;
  if (ib_registry_conf (&conf, err) < 0
      || ib_regconf_sources (conf, ref->registry, ref->repository, ref->digest != NULL, true, &src,
                             &n, err)
             < 0)
    return -1;
  if (src[0].insecure && !is_insecure (src[0].registry))
    ib_registry_add_insecure (src[0].registry);
  free (ref->registry);
  free (ref->repository);
  ref->registry = steal_pointer (&src[0].registry);
  ref->repository = steal_pointer (&src[0].repository);
  ib_reg_sources_free (src, n);
  return 0;
}

int
ib_registry_open_pull (ib_ref_t *ref, const char *reference, ib_registry_t **r, char **data,
                       size_t *len, ib_error_t *err)
{
  cleanup_free char *shown = xasprintf ("%s/%s", ref->registry, ref->repository);
  char md[IB_DIGEST_LEN];
  return pull_open (ref, reference, shown, r, data, len, NULL, md, err);
}

int
ib_registry_open_push (ib_ref_t *ref, ib_registry_t **r, ib_error_t *err)
{
  *r = NULL;
  if (push_target (ref, err) < 0)
    return -1;
  return ib_registry_new (ref, r, err);
}

int
ib_push_refs (ib_store_t *store, const char *src_name, char *const *dst_refs, ib_error_t *err)
{
  ib_descriptor_t d = { 0 };
  cleanup_free char *data = NULL;
  size_t len = 0;
  ib_doc_kind_t kind;
  if (ib_store_resolve (store, src_name, &d, err) < 0
      || ib_store_read_blob (store, d.digest, &data, &len, err) < 0
      || ib_doc_kind (data, len, d.media_type, &kind, err) < 0)
    {
      ib_descriptor_clear (&d);
      return ib_error_prefix (err, "push %s", src_name);
    }
  push_ctx_t pc = { .store = store };
  ib_registry_t **clients = NULL;
  size_t n_clients = 0;
  int ret = 0;
  for (size_t k = 0; ret == 0 && dst_refs && dst_refs[k]; k++)
    {
      ib_ref_t ref;
      if (ib_ref_parse (dst_refs[k], &ref, err) < 0)
        {
          ret = ib_error_prefix (err, "push %s", src_name);
          break;
        }
      cleanup_free char *shown = ib_ref_string (&ref);
      pc.shown = shown;
      ib_registry_t *r = NULL;
      if (ref.digest && strcmp (ref.digest, d.digest) != 0)
        ret = ib_error_set (err, EINVAL, "the stored image %s has digest %s, not %s", src_name,
                            d.digest, ref.digest);
      if (ret == 0)
        ret = push_target (&ref, err);
      for (size_t i = 0; ret == 0 && i < n_clients && r == NULL; i++)
        if (strcmp (clients[i]->name, ref.registry) == 0)
          r = clients[i]; /* same registry: keep its token and connections */
      if (ret == 0 && r == NULL)
        {
          ret = ib_registry_new (&ref, &r, err);
          if (ret == 0)
            {
              clients = xrealloc (clients, (n_clients + 1) * sizeof *clients);
              clients[n_clients++] = r;
            }
        }
      if (ret == 0)
        {
          cleanup_free char *title = xasprintf ("push %s", shown);
          pc.progress = ib_progress_begin (title);
          ret = push_one (&pc, r, &ref, &d, data, len, kind, err);
          ib_progress_end (pc.progress);
          pc.progress = NULL;
        }
      if (ret == 0 && ib_progress_get_mode () == IB_PROGRESS_QUIET)
        ib_info ("push %s: manifest %s", shown, d.digest);
      else if (ret < 0)
        ib_error_prefix (err, "push %s to %s", src_name, shown);
      ib_ref_free (&ref);
    }
  for (size_t i = 0; i < n_clients; i++)
    ib_registry_free (clients[i]);
  free (clients);
  ib_strv_free (pc.present);
  ib_descriptor_clear (&d);
  return ret;
}

int
ib_push (ib_store_t *store, const char *src_name, const char *dst_ref, ib_error_t *err)
{
  char *refs[] = { (char *) dst_ref, NULL };
  return ib_push_refs (store, src_name, refs, err);
}
