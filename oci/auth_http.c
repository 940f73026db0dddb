/* oci/auth_http.c — registry authentication on the wire (the Docker
 * registry token authentication spec, distribution's OAuth2 refresh-token
 * form, RFC 7617 Basic).
 *
 * GET /v2/ once per client learns whether and how the registry wants
 * credentials (auth_ping).  Bearer: tokens come from the challenge's realm
 * (anonymous, Basic-authenticated, or the OAuth2 POST with an identity
 * token), are cached per scope and renewed shortly before they expire
 * (auth_header).  A 401's WWW-Authenticate challenge is answered so that
 * one retry can succeed (auth_handle_401); a 401 that persists is put in
 * words (auth_refused).  Credentials are looked up when the registry first
 * asks.  What needs no network (auth files, token URLs and answers, the
 * challenge's syntax) is oci/auth.c's.  One thread at a time per client.
 */
#include "oci/registry_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define TOKEN_BODY_MAX (1 << 20)

/* ---------- tokens ---------- */

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

int
auth_wrong_password (ib_registry_t *r, ib_error_t *err)
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
int
auth_fetch_token (ib_registry_t *r, const char *realm, const char *service, const char *scope,
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
                : auth_wrong_password (r, err);
  else if (ret == 0 && x.status == 401)
    ret = login_needed (r, err);
  else if (ret == 0 && x.status == 400 && oauth)
    ret = ib_error_set (err, EACCES, "the identity token for %s was refused (%.200s): run "
                        "imgbuild login %s", r->name, x.resp.data ? x.resp.data : "", r->name);
  else if (ret == 0 && x.status != 200)
    {
      http_status_error (&x, err);
      cleanup_free char *h = http_url_host (realm);
      ib_error_prefix (err, "get a token for %s from %s", scope && *scope ? scope : r->host, h);
      ret = -1;
    }
  if (ret == 0)
    {
      ib_auth_token_t t;
      if (ib_auth_token_parse (x.resp.data, x.resp.len, asked, &t, err) < 0)
        {
          cleanup_free char *h = http_url_host (realm);
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
int
auth_ping (ib_registry_t *r, ib_error_t *err)
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
        ret = http_status_error (&x, err);
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
int
auth_header (ib_registry_t *r, const char *scope, char **out, ib_error_t *err)
{
  *out = NULL;
  if (r->auth == AUTH_BEARER)
    {
      if (token_find (r, scope) == NULL && auth_fetch_token (r, r->realm, r->service, scope, err) < 0)
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
 * REGISTRY"), token server errors (auth_fetch_token).  One thread at a time. */
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
      ret = auth_fetch_token (r, r->realm, r->service, want, err);
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
        ret = auth_wrong_password (r, err);
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
int
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
    return have_password (r) ? auth_wrong_password (r, err) : login_needed (r, err);
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
int
auth_handle_401 (ib_registry_t *r, xfer_t *x, ib_error_t *err)
{
  if (x->www_auth == NULL)
    return http_status_error (x, err);
  return auth_challenge (r, x->www_auth, x->scope, err);
}
