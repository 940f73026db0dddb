/* builder/artifact/s3.c — S3 PUT / GET / ListObjectsV2 with libcurl's
 * SigV4 signer (builder/artifact/s3.h). */
#include "builder/artifact/s3.h"
#include "builder/artifact/private.h"

#include "common/util.h"
#include "oci/digest.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <libxml/parser.h>
#include <libxml/parserInternals.h>
#include <libxml/tree.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* sha256 of no bytes: the payload hash of GET requests (SigV4) */
#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

struct ib_s3
{
  char *bucket;
  char *endpoint; /* no trailing '/' */
  char *region;
  char *access_key, *secret_key, *session_token;
  CURL *h;
};

/* ---- configuration ----------------------------------------------------- */

static char *
env_nonempty (const char *name)
{
  const char *v = getenv (name);
  return v && *v ? xstrdup (v) : NULL;
}

static char *
home_file (const char *env, const char *rel)
{
  char *v = env_nonempty (env);
  if (v)
    return v;
  const char *home = getenv ("HOME");
  return home && *home ? xasprintf ("%s/%s", home, rel) : NULL;
}

/* Value of `key` in section `section` of the INI file `path` (the AWS
 * shared config/credentials format); NULL when absent or the file is
 * missing.  Error only when the file exists but cannot be read. */
static int
ini_value (const char *path, const char *section, const char *key, char **out, ib_error_t *err)
{
  *out = NULL;
  if (path == NULL)
    return 0;
  cleanup_free char *text = NULL;
  size_t len;
  if (access (path, F_OK) < 0)
    return 0;
  if (ib_read_file (path, &text, &len, err) < 0)
    return -1;
  bool in = false;
  char *save = NULL;
  for (char *line = strtok_r (text, "\n", &save); line; line = strtok_r (NULL, "\n", &save))
    {
      char *l = ib_art_strip (line);
      if (*l == '#' || *l == ';' || *l == '\0')
        continue;
      if (*l == '[')
        {
          char *end = strchr (l, ']');
          if (end)
            *end = '\0';
          in = strcmp (ib_art_strip (l + 1), section) == 0;
          continue;
        }
      char *eq = strchr (l, '=');
      if (!in || eq == NULL)
        continue;
      *eq = '\0';
      if (strcmp (ib_art_strip (l), key) == 0)
        {
          free (*out);
          *out = xstrdup (ib_art_strip (eq + 1));
        }
    }
  return 0;
}

int
ib_s3_new (const char *bucket, const char *endpoint, ib_s3_t **out, ib_error_t *err)
{
  if (bucket == NULL || *bucket == '\0' || strchr (bucket, '/'))
    return ib_error_set (err, EINVAL, "s3: bad bucket name '%s'", bucket ? bucket : "");
  ib_s3_t *s = xmalloc (sizeof *s);
  s->bucket = xstrdup (bucket);
  cleanup_free char *profile = env_nonempty ("AWS_PROFILE");
  if (profile == NULL)
    profile = xstrdup ("default");

  s->access_key = env_nonempty ("AWS_ACCESS_KEY_ID");
  s->secret_key = env_nonempty ("AWS_SECRET_ACCESS_KEY");
  if (s->access_key && s->secret_key)
    s->session_token = env_nonempty ("AWS_SESSION_TOKEN");
  else
    {
      free (s->access_key);
      free (s->secret_key);
      s->access_key = s->secret_key = NULL;
      cleanup_free char *cred = home_file ("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
      if (ini_value (cred, profile, "aws_access_key_id", &s->access_key, err) < 0
          || ini_value (cred, profile, "aws_secret_access_key", &s->secret_key, err) < 0
          || ini_value (cred, profile, "aws_session_token", &s->session_token, err) < 0)
        {
          ib_s3_free (s);
          return ib_error_prefix (err, "s3 credentials");
        }
      if (s->access_key == NULL || s->secret_key == NULL || !*s->access_key || !*s->secret_key)
        {
          ib_error_set (err, EACCES,
                        "s3: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
                        "or aws_access_key_id and aws_secret_access_key in profile '%s' of %s",
                        profile, cred ? cred : "~/.aws/credentials");
          ib_s3_free (s);
          return -1;
        }
    }

  s->region = env_nonempty ("AWS_REGION");
  if (s->region == NULL)
    s->region = env_nonempty ("AWS_DEFAULT_REGION");
  if (s->region == NULL)
    {
      cleanup_free char *conf = home_file ("AWS_CONFIG_FILE", ".aws/config");
      cleanup_free char *section
          = strcmp (profile, "default") == 0 ? xstrdup ("default")
                                             : xasprintf ("profile %s", profile);
      if (ini_value (conf, section, "region", &s->region, err) < 0)
        {
          ib_s3_free (s);
          return ib_error_prefix (err, "s3 region");
        }
    }
  if (s->region == NULL || *s->region == '\0')
    {
      free (s->region);
      s->region = xstrdup ("us-east-1");
    }
  if (strchr (s->region, ':'))
    {
      ib_error_set (err, EINVAL, "s3: bad region '%s'", s->region);
      ib_s3_free (s);
      return -1;
    }

  char *ep = endpoint && *endpoint ? xstrdup (endpoint) : env_nonempty ("AWS_ENDPOINT_URL_S3");
  if (ep == NULL)
    ep = env_nonempty ("AWS_ENDPOINT_URL");
  if (ep == NULL)
    ep = xasprintf ("https://s3.%s.amazonaws.com", s->region);
  size_t n = strlen (ep);
  while (n > 0 && ep[n - 1] == '/')
    ep[--n] = '\0';
  s->endpoint = ep;
  if (!ib_str_has_prefix (ep, "http://") && !ib_str_has_prefix (ep, "https://"))
    {
      ib_error_set (err, EINVAL, "s3: endpoint '%s' is not an http:// or https:// URL", ep);
      ib_s3_free (s);
      return -1;
    }

  s->h = curl_easy_init ();
  if (s->h == NULL)
    {
      ib_s3_free (s);
      return ib_error_set (err, ENOMEM, "s3: curl_easy_init failed");
    }
  *out = s;
  return 0;
}

void
ib_s3_free (ib_s3_t *s)
{
  if (s == NULL)
    return;
  if (s->h)
    curl_easy_cleanup (s->h);
  free (s->bucket);
  free (s->endpoint);
  free (s->region);
  free (s->access_key);
  if (s->secret_key)
    explicit_bzero (s->secret_key, strlen (s->secret_key));
  free (s->secret_key);
  free (s->session_token);
  free (s);
}

char *
ib_s3_uri_encode (const char *s, int keep_slash)
{
  ib_buf_t b = { 0 };
  for (const unsigned char *p = (const unsigned char *) s; *p; p++)
    {
      if (isalnum (*p) || *p == '-' || *p == '_' || *p == '.' || *p == '~'
          || (keep_slash && *p == '/'))
        ib_buf_append (&b, p, 1);
      else
        ib_buf_printf (&b, "%%%02X", *p);
    }
  return ib_buf_steal (&b);
}

/* ---- XML (ListObjectsV2 results and error bodies) ---------------------- */

/* libxml2 with its safe options: no network (XML_PARSE_NONET), entities
 * left alone (no XML_PARSE_NOENT), no external DTD (no XML_PARSE_DTDLOAD),
 * nothing printed (NOERROR, NOWARNING, and a quiet structured handler: the
 * message goes into the error instead).  Beyond that a reply with a
 * document type declaration is refused as soon as `<!DOCTYPE` is read
 * (S3 never sends one), so no entity is ever declared: no entity expansion
 * (billion laughs), no external entity.  libxml2's own limits without
 * XML_PARSE_HUGE stay (256 levels of nesting, 10 MB of text in one node). */
#define XML_OPTIONS (XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING)

typedef enum
{
  XML_OK,
  XML_BAD,     /* not XML, or not well-formed */
  XML_REFUSED, /* too large, or has a DTD */
} xml_status_t;

static void
xml_quiet (void *ud, xmlErrorPtr e)
{
  (void) ud;
  (void) e;
}

static void
xml_refuse_dtd (void *ctx, const xmlChar *name, const xmlChar *external_id,
                const xmlChar *system_id)
{
  (void) name;
  (void) external_id;
  (void) system_id;
  xmlParserCtxtPtr c = ctx;
  *(bool *) c->_private = true;
  xmlStopParser (c);
}

/* Parse the `len` bytes at `xml`.  XML_OK: *doc is the document (free it
 * with xmlFreeDoc).  Otherwise *doc is NULL and *why (caller frees) says
 * what is wrong.  Either way *root (caller frees) gets the name of the
 * root element when the parser got that far, NULL otherwise. */
static xml_status_t
xml_parse (const char *xml, size_t len, xmlDoc **doc, char **root, char **why)
{
  *doc = NULL;
  *root = NULL;
  *why = NULL;
  if (len > IB_S3_REPLY_MAX)
    {
      *why = xasprintf ("the reply is larger than %d MiB", IB_S3_REPLY_MAX >> 20);
      return XML_REFUSED;
    }
  xmlInitParser ();
  xmlParserCtxtPtr c = len ? xmlCreateMemoryParserCtxt (xml, (int) len) : NULL;
  if (c == NULL)
    {
      *why = xstrdup (len ? "out of memory" : "the reply is empty");
      return XML_BAD;
    }
  bool dtd = false;
  c->_private = &dtd;
  xmlCtxtUseOptions (c, XML_OPTIONS);
  c->sax->internalSubset = xml_refuse_dtd;
  c->sax->serror = xml_quiet;
  xmlParseDocument (c);
  xmlDoc *d = c->myDoc;
  c->myDoc = NULL;
  xmlNode *r = d ? xmlDocGetRootElement (d) : NULL;
  if (r)
    *root = xstrdup ((const char *) r->name);
  xml_status_t st = XML_OK;
  if (dtd)
    {
      *why = xstrdup ("the reply has a document type declaration (<!DOCTYPE>), which S3 "
                      "replies never have");
      st = XML_REFUSED;
    }
  else if (!c->wellFormed || r == NULL)
    {
      xmlErrorPtr e = xmlCtxtGetLastError (c);
      cleanup_free char *msg = xstrdup (e && e->message ? e->message : "no root element");
      *why = xasprintf ("not well-formed XML (line %d: %s)", e ? e->line : 1, ib_art_strip (msg));
      st = XML_BAD;
    }
  xmlFreeParserCtxt (c);
  if (st != XML_OK)
    xmlFreeDoc (d);
  else
    *doc = d;
  return st;
}

static bool
xml_is (const xmlNode *n, const char *name)
{
  return n->type == XML_ELEMENT_NODE && strcmp ((const char *) n->name, name) == 0;
}

/* The first child element of `parent` named `name` (any namespace: S3's
 * replies are in its default namespace, some servers' in none). */
static xmlNode *
xml_child (const xmlNode *parent, const char *name)
{
  for (xmlNode *c = parent->children; c; c = c->next)
    if (xml_is (c, name))
      return c;
  return NULL;
}

/* The first element named `name` at or below `n`, in document order. */
static xmlNode *
xml_find (xmlNode *n, const char *name)
{
  for (; n; n = n->next)
    {
      if (xml_is (n, name))
        return n;
      xmlNode *f = n->type == XML_ELEMENT_NODE ? xml_find (n->children, name) : NULL;
      if (f)
        return f;
    }
  return NULL;
}

/* The text of element `n` (its text and CDATA children: S3's elements hold
 * text only), entities and character references decoded by the parser;
 * NULL when n is NULL.  Caller frees. */
static char *
xml_text (const xmlNode *n)
{
  if (n == NULL)
    return NULL;
  ib_buf_t b = { 0 };
  for (const xmlNode *c = n->children; c; c = c->next)
    if ((c->type == XML_TEXT_NODE || c->type == XML_CDATA_SECTION_NODE) && c->content)
      ib_buf_puts (&b, (const char *) c->content);
  return ib_buf_steal (&b);
}

int
ib_s3_parse_list (const char *xml, char ***keys, char **next, ib_error_t *err)
{
  *next = NULL;
  xmlDoc *doc;
  cleanup_free char *root = NULL;
  cleanup_free char *why = NULL;
  xml_status_t st = xml_parse (xml, strlen (xml), &doc, &root, &why);
  if (st == XML_REFUSED)
    return ib_error_set (err, EPROTO, "%s", why);
  if (root == NULL || strcmp (root, "ListBucketResult") != 0)
    {
      xmlFreeDoc (doc);
      return ib_error_set (err, EPROTO, "not a ListBucketResult");
    }
  if (st == XML_BAD)
    return ib_error_set (err, EPROTO, "ListBucketResult: %s", why);
  xmlNode *r = xmlDocGetRootElement (doc);
  int ret = 0;
  for (xmlNode *c = r->children; ret == 0 && c; c = c->next)
    {
      if (!xml_is (c, "Contents"))
        continue;
      cleanup_free char *key = xml_text (xml_child (c, "Key"));
      if (key == NULL)
        ret = ib_error_set (err, EPROTO, "ListBucketResult: Contents without a Key");
      else
        ib_strv_push (keys, key);
    }
  cleanup_free char *trunc = xml_text (xml_child (r, "IsTruncated"));
  if (ret == 0 && trunc && strcmp (trunc, "true") == 0)
    {
      *next = xml_text (xml_child (r, "NextContinuationToken"));
      if (*next == NULL || **next == '\0')
        {
          free (*next);
          *next = NULL;
          ret = ib_error_set (err, EPROTO,
                              "ListBucketResult: truncated without NextContinuationToken");
        }
    }
  xmlFreeDoc (doc);
  return ret;
}

void
ib_s3_parse_error (const char *xml, size_t len, char **code, char **message)
{
  *code = *message = NULL;
  xmlDoc *doc;
  cleanup_free char *root = NULL;
  cleanup_free char *why = NULL;
  if (xml_parse (xml, len, &doc, &root, &why) != XML_OK)
    return;
  xmlNode *r = xmlDocGetRootElement (doc);
  *code = xml_text (xml_find (r, "Code"));
  *message = xml_text (xml_find (r, "Message"));
  xmlFreeDoc (doc);
}

/* ---- requests ---------------------------------------------------------- */

typedef struct req
{
  int out_fd;          /* GET: bytes go here on 2xx (-1: into body) */
  ib_sha256_t *hash;   /* of what went to out_fd */
  uint64_t written;
  ib_buf_t body;       /* error bodies, list results */
  long status;
  CURL *h;
  char *meta_sha256;   /* x-amz-meta-sha256 of the response */
  int64_t content_length;
  int write_errno;
} req_t;

static size_t
on_header (char *data, size_t size, size_t n, void *ud)
{
  req_t *r = ud;
  size_t len = size * n;
  cleanup_free char *line = xstrndup (data, len);
  char *colon = strchr (line, ':');
  if (colon == NULL)
    {
      if (ib_str_has_prefix (line, "HTTP/"))
        {
          free (r->meta_sha256); /* a new response (after 100 Continue) */
          r->meta_sha256 = NULL;
          r->content_length = -1;
        }
      return len;
    }
  *colon = '\0';
  char *v = ib_art_strip (colon + 1);
  if (strcasecmp (line, "x-amz-meta-sha256") == 0)
    {
      free (r->meta_sha256);
      r->meta_sha256 = xstrdup (v);
    }
  else if (strcasecmp (line, "content-length") == 0)
    r->content_length = strtoll (v, NULL, 10);
  return len;
}

static size_t
on_write (char *data, size_t size, size_t n, void *ud)
{
  req_t *r = ud;
  size_t len = size * n;
  long code = 0;
  curl_easy_getinfo (r->h, CURLINFO_RESPONSE_CODE, &code);
  if (r->out_fd >= 0 && code >= 200 && code < 300)
    {
      ib_error_t e = NULL;
      if (ib_write_all (r->out_fd, data, len, "download", &e) < 0)
        {
          r->write_errno = e->status ? e->status : EIO;
          ib_error_free (&e);
          return 0;
        }
      ib_sha256_update (r->hash, data, len);
      r->written += len;
      return len;
    }
  if (r->body.len < IB_S3_REPLY_MAX)
    ib_buf_append (&r->body, data, len);
  return len;
}

/* Perform one request.  `url_path` is "/BUCKET/KEY" already encoded,
 * `query` (may be NULL) canonical (sorted, encoded).  `upload` (may be
 * NULL) is the file to PUT, with its hex sha256.  On a non-2xx answer:
 * error "s3 METHOD what: HTTP N Code: Message". */
static int
s3_perform (ib_s3_t *s, const char *method, const char *what, const char *url_path,
            const char *query, FILE *upload, uint64_t upload_size, const char *sha_hex,
            req_t *r, ib_error_t *err)
{
  CURL *h = s->h;
  curl_easy_reset (h);
  cleanup_free char *url = xasprintf ("%s%s%s%s", s->endpoint, url_path, query ? "?" : "",
                                      query ? query : "");
  cleanup_free char *sigv4 = xasprintf ("aws:amz:%s:s3", s->region);
  struct curl_slist *hdrs = NULL;
  cleanup_free char *h_sha = xasprintf ("x-amz-content-sha256: %s", upload ? sha_hex : EMPTY_SHA256);
  hdrs = curl_slist_append (hdrs, h_sha);
  cleanup_free char *h_meta = upload ? xasprintf ("x-amz-meta-sha256: %s", sha_hex) : NULL;
  if (h_meta)
    hdrs = curl_slist_append (hdrs, h_meta);
  cleanup_free char *h_tok
      = s->session_token ? xasprintf ("x-amz-security-token: %s", s->session_token) : NULL;
  if (h_tok)
    hdrs = curl_slist_append (hdrs, h_tok);
  /* no "Expect:" to turn 100-continue off: libcurl 7.88's signer signs
   * the empty header that it then does not send */
  r->h = h;
  r->content_length = -1;
  curl_easy_setopt (h, CURLOPT_URL, url);
  curl_easy_setopt (h, CURLOPT_AWS_SIGV4, sigv4);
  curl_easy_setopt (h, CURLOPT_USERNAME, s->access_key);
  curl_easy_setopt (h, CURLOPT_PASSWORD, s->secret_key);
  curl_easy_setopt (h, CURLOPT_HTTPHEADER, hdrs);
  curl_easy_setopt (h, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt (h, CURLOPT_HEADERDATA, r);
  curl_easy_setopt (h, CURLOPT_WRITEFUNCTION, on_write);
  curl_easy_setopt (h, CURLOPT_WRITEDATA, r);
  curl_easy_setopt (h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt (h, CURLOPT_CONNECTTIMEOUT, 30L);
  curl_easy_setopt (h, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt (h, CURLOPT_LOW_SPEED_TIME, 120L);
  curl_easy_setopt (h, CURLOPT_PROTOCOLS_STR, "http,https");
  if (upload)
    {
      curl_easy_setopt (h, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt (h, CURLOPT_READDATA, upload);
      curl_easy_setopt (h, CURLOPT_INFILESIZE_LARGE, (curl_off_t) upload_size);
    }
  char ebuf[CURL_ERROR_SIZE] = "";
  curl_easy_setopt (h, CURLOPT_ERRORBUFFER, ebuf);
  CURLcode rc = curl_easy_perform (h);
  curl_slist_free_all (hdrs);
  curl_easy_getinfo (h, CURLINFO_RESPONSE_CODE, &r->status);
  if (r->write_errno)
    return ib_error_sys (err, r->write_errno, "s3 %s %s: write", method, what);
  if (rc != CURLE_OK)
    return ib_error_set (err, EIO, "s3 %s %s: %s", method, what, *ebuf ? ebuf : curl_easy_strerror (rc));
  if (r->status < 200 || r->status >= 300)
    {
      cleanup_free char *code = NULL;
      cleanup_free char *msg = NULL;
      ib_s3_parse_error (r->body.data ? r->body.data : "", r->body.len, &code, &msg);
      int st = r->status == 404 ? ENOENT : r->status == 403 || r->status == 401 ? EACCES : EIO;
      return ib_error_set (err, st, "s3 %s %s: HTTP %ld%s%s%s%s", method, what, r->status,
                           code ? " " : "", code ? code : "", msg ? ": " : "", msg ? msg : "");
    }
  return 0;
}

static void
req_clear (req_t *r)
{
  ib_buf_free (&r->body);
  free (r->meta_sha256);
  ib_sha256_free (r->hash);
}

int
ib_s3_put_file (ib_s3_t *s, const char *key, const char *path, ib_error_t *err)
{
  char digest[IB_DIGEST_LEN];
  uint64_t size;
  if (ib_digest_file (path, digest, &size, err) < 0)
    return -1;
  cleanup_file FILE *f = fopen (path, "rbe");
  if (f == NULL)
    return ib_error_sys (err, errno, "open %s", path);
  cleanup_free char *enc = ib_s3_uri_encode (key, 1);
  cleanup_free char *bucket = ib_s3_uri_encode (s->bucket, 0);
  cleanup_free char *url_path = xasprintf ("/%s/%s", bucket, enc);
  cleanup_free char *what = xasprintf ("s3://%s/%s", s->bucket, key);
  req_t r = { .out_fd = -1 };
  int ret = s3_perform (s, "PUT", what, url_path, NULL, f, size,
                        digest + strlen ("sha256:"), &r, err);
  req_clear (&r);
  return ret;
}

int
ib_s3_get_file (ib_s3_t *s, const char *key, int fd, uint64_t *size, ib_error_t *err)
{
  cleanup_free char *enc = ib_s3_uri_encode (key, 1);
  cleanup_free char *bucket = ib_s3_uri_encode (s->bucket, 0);
  cleanup_free char *url_path = xasprintf ("/%s/%s", bucket, enc);
  cleanup_free char *what = xasprintf ("s3://%s/%s", s->bucket, key);
  req_t r = { .out_fd = fd, .hash = ib_sha256_new () };
  int ret = s3_perform (s, "GET", what, url_path, NULL, NULL, 0, NULL, &r, err);
  if (ret == 0 && r.content_length >= 0 && (uint64_t) r.content_length != r.written)
    ret = ib_error_set (err, EIO, "s3 GET %s: got %llu bytes, Content-Length says %lld", what,
                        (unsigned long long) r.written, (long long) r.content_length);
  if (ret == 0 && r.meta_sha256)
    {
      char d[IB_DIGEST_LEN];
      ib_sha256_final (r.hash, d);
      r.hash = NULL;
      if (strcasecmp (d + strlen ("sha256:"), r.meta_sha256) != 0)
        ret = ib_error_set (err, EIO,
                            "s3 GET %s: digest mismatch: the bytes have sha256 %s, the object's "
                            "x-amz-meta-sha256 says %s",
                            what, d + strlen ("sha256:"), r.meta_sha256);
    }
  if (ret == 0 && size)
    *size = r.written;
  req_clear (&r);
  return ret;
}

int
ib_s3_list (ib_s3_t *s, const char *prefix, char ***keys, ib_error_t *err)
{
  cleanup_strv char **all = xmalloc (sizeof (char *));
  cleanup_free char *bucket = ib_s3_uri_encode (s->bucket, 0);
  cleanup_free char *url_path = xasprintf ("/%s", bucket);
  cleanup_free char *what = xasprintf ("s3://%s/%s (list)", s->bucket, prefix);
  cleanup_free char *enc_prefix = ib_s3_uri_encode (prefix, 0);
  cleanup_free char *token = NULL;
  for (int page = 0; page < 100000; page++)
    {
      /* parameters sorted by name, values encoded: already SigV4's canonical query */
      cleanup_free char *enc_token = token ? ib_s3_uri_encode (token, 0) : NULL;
      cleanup_free char *query
          = enc_token ? xasprintf ("continuation-token=%s&list-type=2&prefix=%s", enc_token,
                                   enc_prefix)
                      : xasprintf ("list-type=2&prefix=%s", enc_prefix);
      req_t r = { .out_fd = -1 };
      int ret = s3_perform (s, "GET", what, url_path, query, NULL, 0, NULL, &r, err);
      free (token);
      token = NULL;
      if (ret == 0 && ib_s3_parse_list (r.body.data ? r.body.data : "", &all, &token, err) < 0)
        ret = ib_error_prefix (err, "s3 GET %s", what);
      req_clear (&r);
      if (ret < 0)
        return -1;
      if (token == NULL)
        {
          *keys = steal_pointer (&all);
          return 0;
        }
    }
  return ib_error_set (err, EPROTO, "s3 GET %s: too many pages", what);
}
