/* oci/http.c — the registry client's HTTP transport, on libcurl's easy
 * interface.
 *
 * One exchange is an xfer_t (oci/registry_int.h): http_once performs it on
 * the client's handle, with every option that does not depend on the
 * request set by http_setup_handle (user agent, protocols, redirects never
 * followed by curl, the connect timeout, the stall rule, TLS); http_retry
 * repeats what may be repeated (retryable failures; Retry-After, else
 * jittered exponential backoff) within a small request's deadline
 * ($IMGBUILD_REQUEST_TIMEOUT, oci/regconf.h).  Failures come back in words:
 * curl's (connection, TLS, timeouts) and HTTP statuses with the registry's
 * distribution-spec error codes.  Authentication is oci/auth_http.c's,
 * what the requests are for oci/registry.c's.
 */
#include "oci/registry_int.h"
#include "oci/regconf.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define ERROR_BODY_MAX (64 << 10)
#define REQUEST_ATTEMPTS 5        /* manifests, tokens, pings: tries in all */
#define RETRY_BASE_MS 250         /* backoff: 250 ms, 500 ms, 1 s, .. */
#define RETRY_CAP_MS 8000         /* .. at most 8 s between tries */
#define RETRY_AFTER_CAP_MS 60000  /* a server's Retry-After is honoured up to 60 s */
#define USER_AGENT "imgbuild/0.1"

/* A small request (docs/cli.md "Network deadlines"): neither a blob's bytes
 * nor an answer that waits on them; it gets a total deadline
 * (IB_NET_REQUEST).  Bulk transfers only the stall rule (IB_NET_STALL). */
static bool
xfer_small (const xfer_t *x)
{
  return x->sink_fd < 0 && x->upload_fd < 0 && !x->bulk;
}

int64_t
http_now_ms (void)
{
  struct timespec ts;
  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void
xfer_init (xfer_t *x, const char *method)
{
  memset (x, 0, sizeof *x);
  x->method = method;
  x->upload_fd = -1;
  x->sink_fd = -1;
  x->body_max = ERROR_BODY_MAX;
}

void
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

void
xfer_free (xfer_t *x)
{
  xfer_reset_response (x);
}

/* ---------- handles ---------- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;

static void
curl_init_once (void)
{
  curl_global_init (CURL_GLOBAL_DEFAULT);
  srandom ((unsigned) time (NULL) ^ (unsigned) getpid ()); /* backoff jitter */
}

void
http_global_init (void)
{
  pthread_once (&curl_once, curl_init_once);
}

/* Every option of a curl easy handle that does not depend on the request:
 * user agent, protocols, redirects (never followed by curl: see
 * registry_do), timeouts, TLS verification, CA certificates, client
 * certificate.  Called for every handle that talks to the registry `r`. */
static bool retryable_failure (CURLcode c, long status);

void
http_setup_handle (ib_registry_t *r, CURL *c)
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
  curl_easy_setopt (c, CURLOPT_LOW_SPEED_TIME, ib_regconf_net_limit (IB_NET_STALL));
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

/* ---------- curl callbacks ---------- */

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

size_t
http_on_header (char *line, size_t size, size_t nmemb, void *ud)
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
      x->content_type_resp = xstrndup_trimmed (v, vn);
    }
  else if (header_is (line, n, "Location", &v, &vn))
    {
      free (x->location);
      x->location = xstrndup_trimmed (v, vn);
    }
  else if (header_is (line, n, "Link", &v, &vn))
    {
      free (x->link);
      x->link = xstrndup_trimmed (v, vn);
    }
  else if (header_is (line, n, "Retry-After", &v, &vn))
    {
      free (x->retry_after);
      x->retry_after = xstrndup_trimmed (v, vn);
    }
  else if (header_is (line, n, "Content-Range", &v, &vn))
    {
      free (x->content_range);
      x->content_range = xstrndup_trimmed (v, vn);
    }
  else if (header_is (line, n, "OCI-Chunk-Min-Length", &v, &vn))
    {
      cleanup_free char *val = xstrndup_trimmed (v, vn);
      char *end;
      unsigned long long m = strtoull (val, &end, 10);
      x->chunk_min = (*val && *end == '\0') ? (uint64_t) m : 0;
    }
  else if (header_is (line, n, "WWW-Authenticate", &v, &vn))
    {
      char *val = xstrndup_trimmed (v, vn);
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

size_t
http_on_write (char *data, size_t size, size_t nmemb, void *ud)
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
char *
http_url_host (const char *url)
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
  cleanup_free char *host = http_url_host (url);
  char *r = xasprintf ("%s%s", host, path ? path : "");
  curl_free (path);
  curl_url_cleanup (u);
  return r;
}

static int
curl_failure (ib_registry_t *r, xfer_t *x, CURLcode c, const char *url, ib_error_t *err)
{
  return http_curl_failure_on (r, r->curl, r->errbuf, x, c, url, err);
}

/* An error in words for a failed transfer on `handle` (its error buffer
 * `errbuf`); sets x->transient when a retry may succeed. */
int
http_curl_failure_on (ib_registry_t *r, CURL *handle, const char *errbuf, xfer_t *x, CURLcode c,
                 const char *url, ib_error_t *err)
{
  cleanup_free char *host = http_url_host (url);
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
                               x->method, what, ib_regconf_net_limit (IB_NET_REQUEST),
                               ib_regconf_net_limit_var (IB_NET_REQUEST));
        }
      if (strstr (detail, "too slow"))
        return ib_error_set (err, ETIMEDOUT,
                             "%s: timed out: stalled, less than %d bytes/s for %ld s (set %s="
                             "SECONDS to allow more)",
                             host, IB_NET_STALL_MIN_SPEED, ib_regconf_net_limit (IB_NET_STALL),
                             ib_regconf_net_limit_var (IB_NET_STALL));
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
int
http_status_error (xfer_t *x, ib_error_t *err)
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

/* ---------- URLs ---------- */

/* Does `url` point at the registry itself (same scheme, host and port)? */
bool
http_same_origin (const char *a, const char *b)
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
char *
http_resolve_url (const char *base, const char *loc)
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
long
http_retry_delay_ms (int attempt, long status, const char *retry_after_value)
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

/* http_once, tried again on a retryable failure (retryable_failure,
 * http_retry_delay_ms) up to REQUEST_ATTEMPTS times in all, for requests that
 * can be repeated as they are: not a POST, no body streamed from a file and
 * no response streamed into one (blob downloads have their own loop, which
 * resumes).  The last try's outcome is returned: a status such as 503 for
 * the caller to judge, or the connection error. */
int
http_retry (ib_registry_t *r, xfer_t *x, const char *url, const char *auth, ib_error_t *err)
{
  bool repeatable = x->sink_fd < 0 && x->upload_fd < 0 && strcmp (x->method, "POST") != 0;
  bool own_deadline = xfer_small (x) && x->deadline_ms == 0;
  if (own_deadline)
    x->deadline_ms = http_now_ms () + ib_regconf_net_limit (IB_NET_REQUEST) * 1000;
  for (int attempt = 1;; attempt++)
    {
      ib_error_t e = NULL;
      int rc = http_once (r, x, url, auth, &e);
      /* a failed transfer: as http_curl_failure_on judged it (x->transient) */
      bool again = rc < 0 ? x->transient : retryable_failure (CURLE_OK, x->status);
      long ms = 0;
      bool late = false;
      if (repeatable && attempt < REQUEST_ATTEMPTS && again)
        {
          ms = http_retry_delay_ms (attempt, rc < 0 ? 0 : x->status, rc < 0 ? NULL : x->retry_after);
          /* no retry that could not be done before the deadline */
          late = xfer_small (x) && http_now_ms () + ms >= x->deadline_ms;
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
                            x->method, what, ib_regconf_net_limit (IB_NET_REQUEST),
                            ib_regconf_net_limit_var (IB_NET_REQUEST), e->msg);
              ib_error_free (&e);
            }
          else if (rc < 0)
            *err = e;
          else if (late)
            {
              cleanup_free char *what = url_shown (url);
              ib_warn ("%s %s: HTTP %ld; not tried again: the wait would end past the %ld s "
                       "deadline of one request (%s)", x->method, what, x->status,
                       ib_regconf_net_limit (IB_NET_REQUEST),
                       ib_regconf_net_limit_var (IB_NET_REQUEST));
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
int
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
                                : http_now_ms () + ib_regconf_net_limit (IB_NET_REQUEST) * 1000;
      if (deadline - http_now_ms () <= 0)
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

  http_setup_handle (r, c);
  if (deadline)
    curl_easy_setopt (c, CURLOPT_TIMEOUT_MS, (long) (deadline - http_now_ms ()));
  curl_easy_setopt (c, CURLOPT_URL, url);
  curl_easy_setopt (c, CURLOPT_HTTPHEADER, h);
  curl_easy_setopt (c, CURLOPT_ERRORBUFFER, r->errbuf);
  curl_easy_setopt (c, CURLOPT_HEADERFUNCTION, http_on_header);
  curl_easy_setopt (c, CURLOPT_HEADERDATA, x);
  curl_easy_setopt (c, CURLOPT_WRITEFUNCTION, http_on_write);
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
  x->deadline_hit = rc == CURLE_OPERATION_TIMEDOUT && deadline && http_now_ms () >= deadline - 50;
  if (rc != CURLE_OK)
    return curl_failure (r, x, rc, url, err);
  long st = 0;
  curl_easy_getinfo (c, CURLINFO_RESPONSE_CODE, &st);
  x->status = st;
  ib_debug ("-> %ld", st);
  return 0;
}

bool
ib_registry_error_is_unreachable (const ib_error_t e)
{
  if (e == NULL)
    return false;
  if (e->status == ENETUNREACH || e->status == EHOSTUNREACH)
    return true;
  /* http_error's "resolve HOST: unknown host name (...)", under any prefix */
  return e->status == ENOENT && (ib_str_has_prefix (e->msg, "resolve ") || strstr (e->msg, ": resolve "));
}
