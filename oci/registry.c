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
#include "common/util.h"
#include "oci/digest.h"
#include "oci/manifest.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <openssl/evp.h>
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
#define STALL_TIMEOUT_S 60        /* default of IMGBUILD_STALL_TIMEOUT */
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
  char *scope;
  char *value;
};

struct ib_registry
{
  char *name;    /* registry as in references: "docker.io", "localhost:5000" */
  char *host;    /* API host[:port]: "registry-1.docker.io" */
  char *base;    /* "https://registry-1.docker.io" */
  bool pinged;
  enum auth_kind auth;
  char *realm, *service; /* Bearer challenge from the ping */
  char *creds;           /* "user:password" from an auth file, or NULL */
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
  int upload_fd; /* PUT body from this file when >= 0 */
  uint64_t upload_size, upload_off;
  uint64_t range_from; /* send Range: bytes=N- when > 0 */
  const char *scope;   /* token scope the request needs */
  size_t body_max;     /* cap on the in-memory response body */

  /* sink for 200/206 bodies when >= 0 (blob downloads) */
  int sink_fd;
  ib_sha256_t *sink_hash;
  uint64_t sink_written;
  int sink_errno;
  bool sink_started;

  /* response */
  long status;
  char *content_type_resp, *location, *www_auth, *content_range;
  char *retry_after; /* Retry-After header value (RFC 9110 10.2.3), or NULL */
  CURLcode curl_code; /* of the last http_once; CURLE_OK when it got a response */
  ib_buf_t resp;
  bool overflow;
  bool transient; /* the failure may go away when retried */
} xfer_t;

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
  x->content_type_resp = x->location = x->www_auth = x->content_range = x->retry_after = NULL;
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

/* ---------- credentials ---------- */

static char *
base64_decode (const char *in)
{
  size_t n = strlen (in);
  unsigned char *out = xmalloc (n / 4 * 3 + 4);
  int r = EVP_DecodeBlock (out, (const unsigned char *) in, (int) n);
  if (r < 0)
    {
      free (out);
      return NULL;
    }
  /* EVP_DecodeBlock counts padding bytes as output: drop them */
  while (n > 0 && in[n - 1] == '=' && r > 0)
    {
      n--;
      r--;
    }
  out[r] = '\0';
  return (char *) out;
}

static char *
base64_encode (const char *in)
{
  size_t n = strlen (in);
  char *out = xmalloc ((n + 2) / 3 * 4 + 1);
  EVP_EncodeBlock ((unsigned char *) out, (const unsigned char *) in, (int) n);
  return out;
}

static char *
creds_from_file (const char *path, const char *registry)
{
  json_t *j = json_load_file (path, 0, NULL);
  if (j == NULL)
    return NULL;
  json_t *auths = json_object_get (j, "auths");
  json_t *e = json_object_get (auths, registry);
  if (e == NULL && strcmp (registry, "docker.io") == 0)
    e = json_object_get (auths, "https://index.docker.io/v1/");
  if (e == NULL)
    {
      cleanup_free char *https = xasprintf ("https://%s", registry);
      e = json_object_get (auths, https);
    }
  const char *a = json_string_value (json_object_get (e, "auth"));
  char *r = a && *a ? base64_decode (a) : NULL;
  if (r && strchr (r, ':') == NULL)
    {
      free (r);
      r = NULL;
    }
  json_decref (j);
  return r;
}

static char *
find_credentials (const char *registry)
{
  const char *e = getenv ("REGISTRY_AUTH_FILE");
  char *r = NULL;
  if (e && *e && (r = creds_from_file (e, registry)))
    return r;
  e = getenv ("XDG_RUNTIME_DIR");
  if (e && *e)
    {
      cleanup_free char *p = xasprintf ("%s/containers/auth.json", e);
      if ((r = creds_from_file (p, registry)))
        return r;
    }
  e = getenv ("DOCKER_CONFIG");
  cleanup_free char *p = NULL;
  if (e && *e)
    p = xasprintf ("%s/config.json", e);
  else if ((e = getenv ("HOME")) && *e)
    p = xasprintf ("%s/.docker/config.json", e);
  return p ? creds_from_file (p, registry) : NULL;
}

/* ---------- client ---------- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;

static void
curl_init_once (void)
{
  curl_global_init (CURL_GLOBAL_DEFAULT);
  srandom ((unsigned) time (NULL) ^ (unsigned) getpid ()); /* backoff jitter */
}

int
ib_registry_new (const ib_ref_t *ref, ib_registry_t **out, ib_error_t *err)
{
  *out = NULL;
  pthread_once (&curl_once, curl_init_once);
  ib_registry_t *r = xmalloc (sizeof *r);
  r->name = xstrdup (ref->registry);
  r->host = xstrdup (ib_ref_api_host (ref));
  bool plain = ib_ref_plain_http (ref) || is_insecure (ref->registry);
  r->base = xasprintf ("%s://%s", plain ? "http" : "https", r->host);
  r->creds = find_credentials (ref->registry);
  r->curl = curl_easy_init ();
  if (r->curl == NULL)
    {
      ib_registry_free (r);
      return ib_error_set (err, ENOMEM, "registry %s: cannot create a curl handle", ref->registry);
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
      free (r->tokens[i].value);
    }
  free (r->tokens);
  free (r->name);
  free (r->host);
  free (r->base);
  free (r->realm);
  free (r->service);
  if (r->creds)
    {
      explicit_bzero (r->creds, strlen (r->creds));
      free (r->creds);
    }
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
      ssize_t n = pread (x->upload_fd, buf, want, (off_t) x->upload_off);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return CURL_READFUNC_ABORT;
      x->upload_off += (uint64_t) n;
      return (size_t) n;
    }
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

static int
curl_failure (ib_registry_t *r, xfer_t *x, CURLcode c, const char *url, ib_error_t *err)
{
  cleanup_free char *host = url_host (url);
  const char *detail = r->errbuf[0] ? r->errbuf : curl_easy_strerror (c);
  if (x->sink_errno)
    return ib_error_sys (err, x->sink_errno, "write downloaded data");
  if (x->overflow)
    return ib_error_set (err, EFBIG, "%s: response larger than %zu bytes", host, x->body_max);
  switch (c)
    {
    case CURLE_COULDNT_CONNECT:
      {
        long oe = 0;
        curl_easy_getinfo (r->curl, CURLINFO_OS_ERRNO, &oe);
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
      x->transient = true;
      return ib_error_set (err, ETIMEDOUT, "%s: timed out (%s)", host, detail);
    case CURLE_PEER_FAILED_VERIFICATION:
      return ib_error_set (err, EPROTO, "%s: TLS certificate not trusted (%s)", host, detail);
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
      x->transient = true;
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
  if (x->status >= 500 || x->status == 429)
    x->transient = true;
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

/* Seconds without a single byte received after which a transfer counts as
 * stalled and fails with CURLE_OPERATION_TIMEDOUT: $IMGBUILD_STALL_TIMEOUT
 * (a positive integer), else STALL_TIMEOUT_S. */
static long
stall_timeout_s (void)
{
  const char *e = getenv ("IMGBUILD_STALL_TIMEOUT");
  if (e && *e)
    {
      char *end;
      long v = strtol (e, &end, 10);
      if (*end == '\0' && v > 0 && v <= 86400)
        return v;
      ib_warn ("IMGBUILD_STALL_TIMEOUT=%s is not a number of seconds; using %d", e,
               STALL_TIMEOUT_S);
    }
  return STALL_TIMEOUT_S;
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
  for (int attempt = 1;; attempt++)
    {
      ib_error_t e = NULL;
      int rc = http_once (r, x, url, auth, &e);
      CURLcode c = rc < 0 ? x->curl_code : CURLE_OK;
      if (rc < 0 && c == CURLE_OK)
        c = CURLE_ABORTED_BY_CALLBACK; /* our own failure (write error, overflow) */
      if (!repeatable || attempt >= REQUEST_ATTEMPTS || !retryable_failure (c, x->status))
        {
          if (rc < 0)
            *err = e;
          return rc;
        }
      long ms = retry_delay_ms (attempt, rc < 0 ? 0 : x->status, rc < 0 ? NULL : x->retry_after);
      cleanup_free char *host = url_host (url);
      if (rc < 0)
        ib_warn ("%s %s: %s; trying again in %.1f s", x->method, host, e->msg, (double) ms / 1e3);
      else
        ib_warn ("%s %s: HTTP %ld%s; trying again in %.1f s", x->method, host, x->status,
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
  r->errbuf[0] = '\0';

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
  if (x->range_from > 0)
    {
      snprintf (range, sizeof range, "Range: bytes=%llu-", (unsigned long long) x->range_from);
      h = curl_slist_append (h, range);
    }
  if (auth)
    h = curl_slist_append (h, auth);
  h = curl_slist_append (h, "Expect:");

  curl_easy_setopt (c, CURLOPT_URL, url);
  curl_easy_setopt (c, CURLOPT_HTTPHEADER, h);
  curl_easy_setopt (c, CURLOPT_USERAGENT, USER_AGENT);
  curl_easy_setopt (c, CURLOPT_ERRORBUFFER, r->errbuf);
  curl_easy_setopt (c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt (c, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt (c, CURLOPT_UNRESTRICTED_AUTH, 0L);
  curl_easy_setopt (c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt (c, CURLOPT_CONNECTTIMEOUT, 30L);
  curl_easy_setopt (c, CURLOPT_LOW_SPEED_LIMIT, 1L);   /* bytes/s ... */
  curl_easy_setopt (c, CURLOPT_LOW_SPEED_TIME, stall_timeout_s ()); /* ... this long = stalled */
  curl_easy_setopt (c, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt (c, CURLOPT_HEADERDATA, x);
  curl_easy_setopt (c, CURLOPT_WRITEFUNCTION, on_write);
  curl_easy_setopt (c, CURLOPT_WRITEDATA, x);
  if (x->sink_fd < 0)
    /* compressed transfer for JSON only: blob bytes must arrive exactly as stored */
    curl_easy_setopt (c, CURLOPT_ACCEPT_ENCODING, "");

  if (strcmp (x->method, "HEAD") == 0)
    curl_easy_setopt (c, CURLOPT_NOBODY, 1L);
  else if (strcmp (x->method, "PUT") == 0 && x->upload_fd >= 0)
    {
      curl_easy_setopt (c, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt (c, CURLOPT_READFUNCTION, on_read);
      curl_easy_setopt (c, CURLOPT_READDATA, x);
      curl_easy_setopt (c, CURLOPT_INFILESIZE_LARGE, (curl_off_t) x->upload_size);
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
  if (rc != CURLE_OK)
    return curl_failure (r, x, rc, url, err);
  long st = 0;
  curl_easy_getinfo (c, CURLINFO_RESPONSE_CODE, &st);
  x->status = st;
  ib_debug ("-> %ld", st);
  return 0;
}

static const char *
token_find (ib_registry_t *r, const char *scope)
{
  for (size_t i = 0; i < r->n_tokens; i++)
    if (strcmp (r->tokens[i].scope, scope ? scope : "") == 0)
      return r->tokens[i].value;
  return NULL;
}

static void
token_put (ib_registry_t *r, const char *scope, const char *value)
{
  scope = scope ? scope : "";
  for (size_t i = 0; i < r->n_tokens; i++)
    if (strcmp (r->tokens[i].scope, scope) == 0)
      {
        free (r->tokens[i].value);
        r->tokens[i].value = xstrdup (value);
        return;
      }
  r->tokens = xrealloc (r->tokens, (r->n_tokens + 1) * sizeof *r->tokens);
  r->tokens[r->n_tokens].scope = xstrdup (scope);
  r->tokens[r->n_tokens].value = xstrdup (value);
  r->n_tokens++;
}

static char *
url_escape (CURL *c, const char *s)
{
  char *e = curl_easy_escape (c, s, 0);
  char *r = xstrdup (e ? e : "");
  curl_free (e);
  return r;
}

/* Docker token auth: GET realm?service=S&scope=X, Basic-authenticated when
 * we have credentials; the JSON answer has "token" or "access_token". */
static int
fetch_token (ib_registry_t *r, const char *realm, const char *service, const char *scope,
             ib_error_t *err)
{
  if (realm == NULL || *realm == '\0')
    return ib_error_set (err, EPROTO, "registry %s: Bearer challenge without a realm", r->host);
  ib_buf_t url = { 0 };
  ib_buf_puts (&url, realm);
  char sep = strchr (realm, '?') ? '&' : '?';
  if (service)
    {
      cleanup_free char *e = url_escape (r->curl, service);
      ib_buf_printf (&url, "%cservice=%s", sep, e);
      sep = '&';
    }
  if (scope && *scope)
    {
      cleanup_free char *e = url_escape (r->curl, scope);
      ib_buf_printf (&url, "%cscope=%s", sep, e);
    }
  cleanup_free char *u = ib_buf_steal (&url);
  cleanup_free char *auth = NULL;
  if (r->creds)
    {
      cleanup_free char *b = base64_encode (r->creds);
      auth = xasprintf ("Authorization: Basic %s", b);
    }
  xfer_t x;
  xfer_init (&x, "GET");
  x.body_max = TOKEN_BODY_MAX;
  int ret = http_retry (r, &x, u, auth, err);
  if (ret == 0 && x.status != 200)
    {
      status_error (&x, err);
      ret = -1;
    }
  if (ret == 0)
    {
      json_t *j = json_loadb (x.resp.data ? x.resp.data : "", x.resp.len, 0, NULL);
      const char *t = json_string_value (json_object_get (j, "token"));
      if (t == NULL || *t == '\0')
        t = json_string_value (json_object_get (j, "access_token"));
      if (t && *t)
        token_put (r, scope, t);
      else
        ret = ib_error_set (err, EPROTO, "the answer has no token");
      if (j)
        json_decref (j);
    }
  xfer_free (&x);
  if (ret < 0)
    {
      cleanup_free char *h = url_host (realm);
      ib_error_prefix (err, "get a token for %s from %s", scope ? scope : r->host, h);
    }
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

/* "Authorization: ..." for a request needing `scope`, fetching a token when
 * the registry uses Bearer and we have none yet; NULL when none is needed. */
static int
auth_header (ib_registry_t *r, const char *scope, char **out, ib_error_t *err)
{
  *out = NULL;
  if (r->auth == AUTH_BEARER)
    {
      if (token_find (r, scope) == NULL && fetch_token (r, r->realm, r->service, scope, err) < 0)
        return -1;
      *out = xasprintf ("Authorization: Bearer %s", token_find (r, scope));
    }
  else if (r->auth == AUTH_BASIC && r->creds)
    {
      cleanup_free char *b = base64_encode (r->creds);
      *out = xasprintf ("Authorization: Basic %s", b);
    }
  return 0;
}

/* After a 401: learn from its challenge so that one retry can succeed. */
static int
handle_401 (ib_registry_t *r, xfer_t *x, ib_error_t *err)
{
  if (x->www_auth == NULL)
    return status_error (x, err);
  ib_auth_challenge_t ch;
  if (ib_auth_challenge_parse (x->www_auth, &ch, err) < 0)
    return -1;
  int ret = 0;
  if (strcasecmp (ch.scheme, "Bearer") == 0)
    {
      const char *scope = ch.scope ? ch.scope : x->scope;
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
      ret = fetch_token (r, r->realm, r->service, scope, err);
      if (ret == 0 && x->scope && strcmp (scope, x->scope) != 0)
        token_put (r, x->scope, token_find (r, scope));
    }
  else if (strcasecmp (ch.scheme, "Basic") == 0)
    {
      if (r->creds == NULL || r->auth == AUTH_BASIC)
        ret = ib_error_set (err, EACCES, "unauthorized (the registry wants a user name and "
                            "password%s)", r->creds ? "; the configured ones were refused" : "");
      r->auth = AUTH_BASIC;
    }
  else
    ret = ib_error_set (err, EACCES, "unauthorized (unsupported auth scheme %s)", ch.scheme);
  ib_auth_challenge_clear (&ch);
  return ret;
}

/* A request to the registry: ping first, authenticate (retrying once after
 * a 401 with a fresh token), follow redirects of GET/HEAD by hand, sending
 * Authorization only to the registry's own origin.  On return x->status
 * is the final status; non-2xx statuses are for the caller to judge. */
static int
registry_do (ib_registry_t *r, xfer_t *x, const char *url, ib_error_t *err)
{
  if (ping (r, err) < 0)
    return -1;
  cleanup_free char *cur = xstrdup (url);
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
      if (x->status == 401 && own && !retried_auth)
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

/* Open (creating) tmp/blob-<hex>.partial and flock it: one download of a
 * blob at a time, across processes; what an earlier, interrupted download
 * left there is resumed.  Returns the fd, or 0 via *done when the blob
 * appeared in the store meanwhile. */
static int
open_partial (ib_store_t *store, const char *digest, const char *path, bool *done,
              ib_error_t *err)
{
  *done = false;
  for (;;)
    {
      int fd = open (path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
      if (fd < 0)
        return ib_error_sys (err, errno, "open %s", path);
      while (flock (fd, LOCK_EX) < 0)
        if (errno != EINTR)
          {
            int e = errno;
            close (fd);
            return ib_error_sys (err, e, "lock %s", path);
          }
      struct stat a, b;
      bool same = fstat (fd, &a) == 0 && stat (path, &b) == 0 && a.st_dev == b.st_dev
                  && a.st_ino == b.st_ino;
      if (ib_store_has_blob (store, digest))
        {
          if (same)
            unlink (path);
          close (fd);
          *done = true;
          return 0;
        }
      if (same)
        return fd;
      close (fd); /* renamed or removed under us: start again */
    }
}

static void
short_digest (const char *digest, char out[24])
{
  snprintf (out, 24, "sha256:%.8s..", ib_digest_hex (digest));
}

int
ib_registry_fetch_blob (ib_registry_t *r, const char *repo, const char *digest, ib_store_t *store,
                        ib_error_t *err)
{
  if (!ib_digest_valid (digest))
    return ib_error_set (err, EINVAL, "blob \"%s\": not a sha256 digest", digest);
  if (ib_store_has_blob (store, digest))
    return 0;
  cleanup_free char *path = xasprintf ("%s/tmp/blob-%s.partial", store->root, ib_digest_hex (digest));
  bool done;
  cleanup_close int fd = open_partial (store, digest, path, &done, err);
  if (fd < 0)
    return ib_error_prefix (err, "blob %s", digest);
  if (done)
    {
      fd = -1;
      return 0;
    }

  /* hash what an earlier attempt left */
  xfer_t x;
  xfer_init (&x, "GET");
  x.sink_fd = fd;
  x.sink_hash = ib_sha256_new ();
  {
    char *buf = xmalloc (1 << 16);
    for (;;)
      {
        ssize_t n = read (fd, buf, 1 << 16);
        if (n < 0 && errno == EINTR)
          continue;
        if (n <= 0)
          break;
        ib_sha256_update (x.sink_hash, buf, (size_t) n);
        x.sink_written += (uint64_t) n;
      }
    free (buf);
    if (lseek (fd, (off_t) x.sink_written, SEEK_SET) < 0)
      {
        ib_sha256_free (x.sink_hash);
        return ib_error_sys (err, errno, "blob %s: seek %s", digest, path);
      }
  }
  if (x.sink_written > 0)
    ib_debug ("blob %s: resuming at byte %llu", digest, (unsigned long long) x.sink_written);

  cleanup_free char *scope = pull_scope (repo);
  cleanup_free char *url = xasprintf ("%s/v2/%s/blobs/%s", r->base, repo, digest);
  x.scope = scope;
  uint64_t resumed_from = x.sink_written;
  int ret;
again:
  ret = -1;
  for (int attempt = 1;; attempt++)
    {
      x.range_from = x.sink_written;
      x.transient = false;
      ib_error_t e = NULL;
      uint64_t before = x.sink_written;
      int rc = registry_do (r, &x, url, &e);
      if (rc == 0 && x.status == 416 && x.sink_written > 0)
        {
          /* nothing left past our offset, or a bad partial file: start over */
          if (ftruncate (fd, 0) < 0 || lseek (fd, 0, SEEK_SET) < 0)
            {
              ret = ib_error_sys (err, errno, "truncate %s", path);
              break;
            }
          ib_sha256_free (x.sink_hash);
          x.sink_hash = ib_sha256_new ();
          x.sink_written = 0;
          if (attempt < BLOB_ATTEMPTS)
            continue;
        }
      if (rc == 0 && x.status != 200 && x.status != 206)
        rc = status_error (&x, &e);
      if (rc == 0)
        {
          ret = 0;
          break;
        }
      if (!x.transient || attempt >= BLOB_ATTEMPTS)
        {
          *err = e;
          break;
        }
      ib_warn ("blob %s: %s; retrying (%llu bytes so far)", digest, e->msg,
               (unsigned long long) x.sink_written);
      ib_error_free (&e);
      if (x.sink_written == before)
        sleep ((unsigned) attempt);
    }
  if (ret < 0)
    {
      ib_sha256_free (x.sink_hash);
      xfer_free (&x);
      return ib_error_prefix (err, "blob %s", digest);
    }
  char got[IB_DIGEST_LEN];
  ib_sha256_final (x.sink_hash, got);
  xfer_free (&x);
  if (strcmp (got, digest) != 0 && resumed_from > 0)
    {
      /* what an earlier run left was bad: once more from the start */
      ib_warn ("blob %s: the resumed download does not match its digest; downloading it again",
               digest);
      if (ftruncate (fd, 0) < 0 || lseek (fd, 0, SEEK_SET) < 0)
        {
          int e = errno;
          unlink (path);
          return ib_error_sys (err, e, "blob %s: truncate %s", digest, path);
        }
      x.sink_hash = ib_sha256_new ();
      x.sink_written = 0;
      resumed_from = 0;
      goto again;
    }
  if (strcmp (got, digest) != 0)
    {
      unlink (path);
      return ib_error_set (err, EINVAL, "blob %s: digest mismatch (the bytes received hash to %s)",
                           digest, got);
    }
  if (ib_store_commit_blob_hashed (store, path, digest, err) < 0)
    return ib_error_prefix (err, "blob %s", digest);
  return 0; /* closing fd releases the partial file's lock */
}

/* POST uploads/ then a monolithic PUT <location>?digest= of the stored blob. */
static int
upload_blob (ib_registry_t *r, const char *repo, const char *digest, ib_store_t *store,
             ib_error_t *err)
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

  cleanup_free char *scope = push_scope (repo);
  cleanup_free char *url = xasprintf ("%s/v2/%s/blobs/uploads/", r->base, repo);
  xfer_t x;
  xfer_init (&x, "POST");
  x.scope = scope;
  int ret = registry_do (r, &x, url, err);
  if (ret == 0 && x.status != 202)
    ret = status_error (&x, err);
  if (ret == 0 && x.location == NULL)
    ret = ib_error_set (err, EPROTO, "the registry started an upload without a Location");
  cleanup_free char *put_url = NULL;
  if (ret == 0)
    {
      cleanup_free char *loc = resolve_url (url, x.location);
      cleanup_free char *d = url_escape (r->curl, digest);
      put_url = xasprintf ("%s%cdigest=%s", loc, strchr (loc, '?') ? '&' : '?', d);
    }
  xfer_free (&x);
  if (ret < 0)
    return ib_error_prefix (err, "push blob %s: start upload", digest);

  xfer_init (&x, "PUT");
  x.scope = scope;
  x.content_type = "application/octet-stream";
  x.upload_fd = fd;
  x.upload_size = (uint64_t) st.st_size;
  if (same_origin (put_url, r->base))
    ret = registry_do (r, &x, put_url, err);
  else
    ret = http_once (r, &x, put_url, NULL, err); /* an upload service elsewhere: no token */
  if (ret == 0 && x.status != 201 && (x.status < 200 || x.status >= 300))
    ret = status_error (&x, err);
  xfer_free (&x);
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
  return upload_blob (r, repo, digest, store, err);
}

/* ---------- pull / push ---------- */

static void
human_size (int64_t n, char out[32])
{
  if (n < 1000)
    snprintf (out, 32, "%lld B", (long long) n);
  else if (n < 1000 * 1000)
    snprintf (out, 32, "%.1f kB", (double) n / 1e3);
  else if (n < 1000LL * 1000 * 1000)
    snprintf (out, 32, "%.1f MB", (double) n / 1e6);
  else
    snprintf (out, 32, "%.2f GB", (double) n / 1e9);
}

static int
pull_blob (ib_registry_t *r, ib_store_t *store, const char *repo, const char *shown,
           const char *what, const ib_descriptor_t *d, ib_error_t *err)
{
  char sd[24], sz[32];
  short_digest (d->digest, sd);
  human_size (d->size, sz);
  if (ib_store_has_blob (store, d->digest))
    {
      ib_info ("pull %s: %s %s %s (already in store)", shown, what, sd, sz);
      return 0;
    }
  ib_info ("pull %s: %s %s %s", shown, what, sd, sz);
  return ib_registry_fetch_blob (r, repo, d->digest, store, err);
}

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
                  char **data, size_t *len, char mdigest[IB_DIGEST_LEN], ib_manifest_t **m,
                  ib_error_t *err)
{
  *data = NULL;
  *m = NULL;
  manifest_walk_t w = { .repo = ref->repository, .shown = shown, .os = os, .arch = arch,
                        .variant = variant };
  cleanup_free char *top = NULL;
  cleanup_free char *ctype = NULL;
  cleanup_free char *config = NULL;
  size_t top_len = 0, config_len = 0;
  char top_digest[IB_DIGEST_LEN];
  ib_doc_kind_t kind;
  bool from_index = false;
  int ret = -1;
  const char *reference = ref->digest ? ref->digest : ref->tag;

  if (ib_registry_get_manifest (r, ref->repository, reference, &top, &top_len, &ctype, top_digest,
                                err)
          < 0
      || ib_doc_kind (top, top_len, ctype, &kind, err) < 0)
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
  if (get_small_blob (r, ref->repository, &(*m)->config, &config, &config_len, err) < 0)
    goto out;
  if (!from_index)
    {
      json_t *c = json_loadb (config, config_len, 0, NULL);
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
      json_decref (c);
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
    }
  walk_free (&w);
  return ret;
}

int
ib_pull (ib_store_t *store, const char *ref_string, const char *os, const char *arch,
         const char *variant, ib_descriptor_t *out, ib_error_t *err)
{
  if (out)
    memset (out, 0, sizeof *out);
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
  cleanup_free char *data = NULL;
  size_t len = 0;
  char mdigest[IB_DIGEST_LEN];
  ib_manifest_t *m = NULL;
  int ret = -1;

  if (ib_registry_new (&ref, &r, err) < 0
      || resolve_manifest (r, store, &ref, shown, os, arch, variant, explicit_platform, &data,
                           &len, mdigest, &m, err)
             < 0)
    goto out;
  if (pull_blob (r, store, ref.repository, shown, "config", &m->config, err) < 0)
    goto out;
  for (size_t i = 0; i < m->n_layers; i++)
    if (pull_blob (r, store, ref.repository, shown, "layer", &m->layers[i], err) < 0)
      goto out;
  if (ib_store_put_blob (store, data, len, NULL, err) < 0)
    goto out;
  if (strcmp (m->media_type, IB_MT_DOCKER_MANIFEST) == 0)
    {
      /* skopeo's oci: transport reads only OCI descriptors from index.json:
       * tag an OCI rendering of the same config and layers. */
      char *oci = ib_manifest_serialize (&m->config, m->layers, m->n_layers, NULL);
      ib_info ("pull %s: manifest %s (Docker schema 2, stored as OCI)", shown, mdigest);
      free (data);
      data = oci;
      len = strlen (oci);
      free (m->media_type);
      m->media_type = xstrdup (IB_MT_OCI_MANIFEST);
      if (ib_store_put_blob (store, data, len, mdigest, err) < 0)
        goto out;
    }
  if (ib_store_tag (store, shown, m->media_type, mdigest, (int64_t) len, err) < 0)
    goto out;
  ib_info ("pull %s: manifest %s", shown, mdigest);
  if (out)
    {
      out->media_type = xstrdup (m->media_type);
      memcpy (out->digest, mdigest, IB_DIGEST_LEN);
      out->size = (int64_t) len;
    }
  ret = 0;

out:
  if (ret < 0)
    ib_error_prefix (err, "pull %s", shown);
  ib_manifest_free (m);
  ib_registry_free (r);
  ib_ref_free (&ref);
  return ret;
}

/* Push one stored image manifest's blobs, then the manifest under `reference`. */
static int
push_manifest (ib_registry_t *r, ib_store_t *store, const char *repo, const char *shown,
               const char *data, size_t len, const char *media_type, const char *reference,
               ib_error_t *err)
{
  ib_manifest_t *m = NULL;
  if (ib_manifest_parse (data, len, &m, err) < 0)
    return -1;
  int ret = 0;
  for (size_t i = 0; i <= m->n_layers && ret == 0; i++)
    {
      const ib_descriptor_t *d = i == 0 ? &m->config : &m->layers[i - 1];
      char sd[24], sz[32];
      short_digest (d->digest, sd);
      human_size (d->size, sz);
      bool exists = false;
      ret = ib_registry_blob_exists (r, repo, d->digest, &exists, err);
      if (ret < 0)
        break;
      ib_info ("push %s: %s %s %s%s", shown, i == 0 ? "config" : "layer", sd, sz,
               exists ? " (already in the registry)" : "");
      if (!exists)
        ret = upload_blob (r, repo, d->digest, store, err);
    }
  if (ret == 0)
    ret = ib_registry_put_manifest (r, repo, reference, data, len,
                                    media_type ? media_type : m->media_type, err);
  ib_manifest_free (m);
  return ret;
}

int
ib_push (ib_store_t *store, const char *src_name, const char *dst_ref, ib_error_t *err)
{
  ib_ref_t ref;
  if (ib_ref_parse (dst_ref, &ref, err) < 0)
    return ib_error_prefix (err, "push");
  cleanup_free char *shown = ib_ref_string (&ref);
  ib_descriptor_t d = { 0 };
  ib_registry_t *r = NULL;
  cleanup_free char *data = NULL;
  size_t len = 0;
  ib_doc_kind_t kind;
  int ret = -1;

  if (ib_store_resolve (store, src_name, &d, err) < 0
      || ib_store_read_blob (store, d.digest, &data, &len, err) < 0
      || ib_doc_kind (data, len, d.media_type, &kind, err) < 0)
    goto out;
  if (ref.digest && strcmp (ref.digest, d.digest) != 0)
    {
      ib_error_set (err, EINVAL, "the stored image %s has digest %s, not %s", src_name, d.digest,
                    ref.digest);
      goto out;
    }
  if (ib_registry_new (&ref, &r, err) < 0)
    goto out;
  const char *reference = ref.tag ? ref.tag : d.digest;
  if (kind == IB_DOC_INDEX)
    {
      /* push each platform's manifest by digest, then the index */
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
        if (!ib_store_has_blob (store, cd))
          {
            rc = ib_error_set (err, ENOENT, "the index names manifest %s, which is not in store %s",
                               cd, store->root);
            break;
          }
        if (ib_store_read_blob (store, cd, &cdata, &clen, err) < 0
            || push_manifest (r, store, ref.repository, shown, cdata, clen, cmt, cd, err) < 0)
          {
            rc = -1;
            break;
          }
      }
      json_decref (j);
      if (rc < 0)
        goto out;
      if (ib_registry_put_manifest (r, ref.repository, reference, data, len, d.media_type, err) < 0)
        goto out;
    }
  else if (push_manifest (r, store, ref.repository, shown, data, len, d.media_type, reference,
                          err)
           < 0)
    goto out;
  ib_info ("push %s: manifest %s", shown, d.digest);
  ret = 0;

out:
  if (ret < 0)
    ib_error_prefix (err, "push %s to %s", src_name, shown);
  ib_descriptor_clear (&d);
  ib_registry_free (r);
  ib_ref_free (&ref);
  return ret;
}
