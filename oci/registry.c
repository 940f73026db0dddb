/* oci/registry.c — the registry client (ib_registry_*, oci/registry.h).
 *
 * A client is made for one registry: its scheme and TLS settings are
 * chosen here (docs/security.md).  registry_do is the loop every request
 * to the registry goes through: the scheme probe of an insecure registry,
 * the ping, Authorization for the request's scope, one retry after a 401
 * (oci/auth_http.c), redirects of GET / HEAD followed by hand, sending
 * Authorization only to the registry's own scheme://host:port, never to a
 * blob CDN it redirects to.  Here too the small requests of the
 * distribution-spec (manifests GET and PUT, tag lists, blob HEAD), login,
 * and the ib_registry_* entry points over oci/fetch.c, oci/pull.c and
 * oci/push.c.  The transport is oci/http.c.
 */
#include "oci/registry_int.h"
#include "oci/certs.h"
#include "oci/manifest.h"
#include "oci/regconf.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MANIFEST_MAX (4 << 20)  /* bytes; as containerd limits manifests */

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

bool
registry_is_insecure (const char *registry)
{
  bool r = false;
  pthread_mutex_lock (&insecure_lock);
  for (size_t i = 0; insecure_registries && insecure_registries[i]; i++)
    if (strcmp (insecure_registries[i], registry) == 0)
      r = true;
  pthread_mutex_unlock (&insecure_lock);
  return r;
}

/* ---------- client ---------- */

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
  if (ib_certs_find (r->name, ib_regconf_cert_dir (), NULL, &certs, err) < 0)
    return -1;
  int verify = ib_regconf_tls_verify ();
  bool insecure = registry_is_insecure (r->name) || verify == 0;
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

int
ib_registry_new (const ib_ref_t *ref, ib_registry_t **out, ib_error_t *err)
{
  *out = NULL;
  http_global_init ();
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

/* ---------- requests ---------- */

/* An insecure registry (tls_configure): try HTTPS without verification
 * once; when the server does not speak TLS there, use plain HTTP from then
 * on, as Docker and podman do. */
int
registry_probe_scheme (ib_registry_t *r, ib_error_t *err)
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

/* A URL made with r->base before registry_probe_scheme chose plain HTTP, made right;
 * caller frees. */
char *
registry_rebase_url (ib_registry_t *r, const char *url)
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
int
registry_do (ib_registry_t *r, xfer_t *x, const char *url, ib_error_t *err)
{
  if (registry_probe_scheme (r, err) < 0)
    return -1;
  ib_error_t pe = NULL;
  if (auth_ping (r, &pe) < 0)
    {
      if (ib_str_has_prefix (r->base, "http:") && pe && strstr (pe->msg, "HTTP status 400"))
        {
          /* Go's TLS servers answer plain HTTP with 400 */
          ib_error_free (&pe);
          return ib_error_set (err, EPROTO,
                               "%s answered plain HTTP with 400 Bad Request: it probably speaks "
                               "HTTPS (loopback registries use plain HTTP unless they have "
                               "certs.d files, --cert-dir or --tls-verify)",
                               r->host);
        }
      return ib_error_propagate (err, &pe);
    }
  cleanup_free char *cur = registry_rebase_url (r, url);
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
          if (auth_handle_401 (r, x, err) < 0)
            return -1;
          continue;
        }
      if (follow && x->location
          && (x->status == 301 || x->status == 302 || x->status == 303 || x->status == 307
              || x->status == 308))
        {
          if (++redirects > MAX_REDIRECTS)
            return ib_error_set (err, ELOOP, "%s: too many redirects", r->host);
          char *next = http_resolve_url (cur, x->location);
          free (cur);
          cur = next;
          own = http_same_origin (cur, r->base);
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
  int ret = auth_ping (r, err);
  if (ret == 0 && r->auth == AUTH_BEARER)
    ret = auth_fetch_token (r, r->realm, r->service, NULL, err);
  else if (ret == 0 && r->auth == AUTH_BASIC)
    {
      cleanup_free char *url = xasprintf ("%s/v2/", r->base);
      cleanup_free char *auth = ib_auth_basic_header (&r->creds);
      xfer_t x;
      xfer_init (&x, "GET");
      ret = http_once (r, &x, url, auth, err);
      explicit_bzero (auth, strlen (auth));
      if (ret == 0 && x.status == 401)
        ret = auth_wrong_password (r, err);
      else if (ret == 0 && x.status >= 300)
        ret = http_status_error (&x, err);
      xfer_free (&x);
    }
  else if (ret == 0)
    ib_debug ("login %s: the registry asks for no authentication", registry);
  ib_registry_free (r);
  return ret;
}

char *
registry_pull_scope (const char *repo)
{
  return xasprintf ("repository:%s:pull", repo);
}

char *
registry_push_scope (const char *repo)
{
  return xasprintf ("repository:%s:pull,push", repo);
}

int
registry_get_small (ib_registry_t *r, const char *repo, const char *kind, const char *reference,
                    const char *accept, size_t max, xfer_t *x, char got[IB_DIGEST_LEN],
                    ib_error_t *err)
{
  cleanup_free char *scope = registry_pull_scope (repo);
  cleanup_free char *url = xasprintf ("%s/v2/%s/%s/%s", r->base, repo, kind, reference);
  xfer_init (x, "GET");
  x->accept = accept;
  x->scope = scope;
  x->body_max = max;
  int ret = registry_do (r, x, url, err);
  if (ret == 0 && x->status != 200)
    ret = http_status_error (x, err);
  if (ret == 0)
    ib_digest_buf (x->resp.data ? x->resp.data : "", x->resp.len, got);
  x->scope = NULL; /* freed on return */
  return ret;
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
  xfer_t x;
  char got[IB_DIGEST_LEN];
  int ret = registry_get_small (r, repo, "manifests", reference, IB_MANIFEST_ACCEPT, MANIFEST_MAX,
                                &x, got, err);
  if (ret == 0)
    {
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
  cleanup_free char *scope = registry_pull_scope (repo);
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
        ret = http_status_error (&x, err);
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
  cleanup_free char *scope = registry_push_scope (repo);
  cleanup_free char *url = xasprintf ("%s/v2/%s/manifests/%s", r->base, repo, reference);
  xfer_t x;
  xfer_init (&x, "PUT");
  x.content_type = media_type;
  x.body = data;
  x.body_len = len;
  x.scope = scope;
  int ret = registry_do (r, &x, url, err);
  if (ret == 0 && (x.status < 200 || x.status >= 300))
    ret = http_status_error (&x, err);
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
  cleanup_free char *scope = registry_pull_scope (repo);
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
        ret = http_status_error (&x, err);
    }
  xfer_free (&x);
  if (ret < 0)
    ib_error_prefix (err, "blob %s", digest);
  return ret;
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
  return push_upload_blob (r, repo, digest, store, NULL, how, NULL, -1, err);
}

/* ---------- where pulls and pushes go ---------- */

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
