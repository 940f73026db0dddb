/* oci/auth.h — registry credentials and bearer-token bookkeeping.
 *
 * Credentials come from auth files in the formats of containers-auth.json(5)
 * and Docker's config.json: "auths" entries (base64 "auth" = "user:password",
 * or "username"/"password", "identitytoken"), "credHelpers" and "credsStore"
 * through the docker-credential-helpers protocol
 * (`docker-credential-NAME get|store|erase`, JSON on stdin/stdout).
 *
 * Token helpers implement the parts of the distribution token spec
 * (https://distribution.github.io/distribution/spec/auth/token/ and
 * .../auth/oauth/) that do not need the network: the token request URL
 * (one `scope=` per scope), the OAuth2 refresh-token form, the token
 * response ("token" / "access_token", "expires_in" default 60 s,
 * "issued_at") and when a cached token is still fresh; the syntax of a
 * WWW-Authenticate challenge.  The HTTP exchanges themselves live in
 * oci/auth_http.c.
 */
#ifndef IB_OCI_AUTH_H
#define IB_OCI_AUTH_H

#include "common/error.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Credentials for one registry.  All NULL: anonymous.  Secrets are wiped
 * by ib_auth_creds_clear. */
typedef struct ib_auth_creds
{
  char *username;       /* NULL when anonymous or with an identity token only */
  char *password;       /* NULL with an identity token */
  char *identity_token; /* OAuth2 refresh token ("identitytoken", or a helper's
                         * answer with Username "<token>"); NULL when none */
  char *source;         /* where they came from, for messages: "FILE", "FILE
                         * (credHelpers: NAME)", "--creds"; NULL when anonymous */
} ib_auth_creds_t;

void ib_auth_creds_clear (ib_auth_creds_t *c);
bool ib_auth_creds_empty (const ib_auth_creds_t *c);

/* Process-wide settings from the command line (call before any lookup;
 * not thread-safe against concurrent lookups).
 * ib_auth_set_authfile: `path` takes the place of $REGISTRY_AUTH_FILE
 * (--authfile); NULL restores the environment's.
 * ib_auth_set_override: `user`/`password` are used for `registry`
 * (host[:port] as in references) instead of any file (--creds); copies. */
void ib_auth_set_authfile (const char *path);
void ib_auth_set_override (const char *registry, const char *user, const char *password);

/* The auth files searched, in order (first file with an entry wins), as
 * containers-auth.json(5) reads them (podman, skopeo, buildah) and then
 * docker's:
 *  1. --authfile, else $REGISTRY_AUTH_FILE;
 *  2. $XDG_RUNTIME_DIR/containers/auth.json, or /run/containers/UID/auth.json
 *     when XDG_RUNTIME_DIR is unset (what `podman login` writes);
 *  3. $XDG_CONFIG_HOME/containers/auth.json, XDG_CONFIG_HOME defaulting to
 *     ~/.config;
 *  4. $DOCKER_CONFIG/config.json, else ~/.docker/config.json.
 * Entries that need an unset variable (HOME) are skipped; missing files
 * are skipped by the lookup.  Caller frees the vector. */
char **ib_auth_search_path (void);

/* The file `imgbuild login` writes: --authfile, else $REGISTRY_AUTH_FILE,
 * else $XDG_RUNTIME_DIR/containers/auth.json when XDG_RUNTIME_DIR is set,
 * else ~/.docker/config.json (podman's order).  Caller frees; NULL (with an
 * error) when none can be named (no HOME). */
char *ib_auth_default_file (ib_error_t *err);

/* Normalize an auth-file key or a login argument: drop "http(s)://" (and
 * then any path, as Docker writes "https://index.docker.io/v1/"), drop a
 * trailing "/", and map index.docker.io / registry-1.docker.io to
 * docker.io.  "host/ns/repo" keys without a scheme keep their path
 * (containers-auth.json allows them).  Caller frees. */
char *ib_auth_normalize_key (const char *key);

/* Look in one auth file for credentials of `registry` (host[:port]) and
 * `repository` (may be NULL).  In the file: credHelpers[registry] first,
 * then the most specific "auths" key (registry/repo/path beats
 * registry/ns beats registry; Docker-style URL keys match their host) whose
 * entry has a secret, then credsStore.  A helper answering "credentials not
 * found" counts as no entry.  *found tells whether *out was filled.
 * A missing file is not an error (*found = false); unreadable or invalid
 * JSON, a missing helper binary or a failing helper are errors naming the
 * file / the helper. */
int ib_auth_find_in_file (const char *path, const char *registry, const char *repository,
                          ib_auth_creds_t *out, bool *found, ib_error_t *err);

/* The credentials to use for `registry`/`repository`: the --creds
 * override, else the first file of ib_auth_search_path that has an entry,
 * else anonymous (all NULL, returns 0). */
int ib_auth_find (const char *registry, const char *repository, ib_auth_creds_t *out,
                  ib_error_t *err);

/* `imgbuild login`: store user/password for `key` (a normalized registry,
 * or registry/namespace) in auth file `path`.  When the file names a
 * credential helper for the key (credHelpers, credsStore), the helper's
 * `store` gets them; otherwise "auths"[key] = {"auth": base64}.  The file is
 * rewritten atomically (temp file + fsync + rename, mode 0600, parent
 * directories created 0700), keeping every other key. */
int ib_auth_store (const char *path, const char *key, const char *user, const char *password,
                   ib_error_t *err);

/* `imgbuild logout`: remove the entry for `key` (any auths key that
 * normalizes to it; the helper's `erase` when one is configured for it),
 * or with key NULL every "auths" entry.  *removed tells whether something
 * was there.  The file is rewritten as ib_auth_store does. */
int ib_auth_remove (const char *path, const char *key, bool *removed, ib_error_t *err);

/* "Authorization: Basic base64(user:password)"; caller frees (wipe with
 * explicit_bzero first).  NULL when c has no username/password. */
char *ib_auth_basic_header (const ib_auth_creds_t *c);

/* base64 (RFC 4648, padded) of `len` bytes; caller frees. */
char *ib_base64_encode (const void *data, size_t len);
/* Decode padded base64 into a NUL-terminated string; NULL when invalid. */
char *ib_base64_decode (const char *in);

/* ---------- tokens ---------- */

/* Milliseconds since the epoch (CLOCK_REALTIME), what expiry times use. */
int64_t ib_auth_now_ms (void);

/* GET realm?service=S&scope=A&scope=B: one `scope` parameter per
 * space-separated scope in `scope` (the token spec's "scope" may be given
 * several times, e.g. for a cross-repository mount
 * "repository:dst:pull,push repository:src:pull").  service/scope may be
 * NULL or empty (login asks for no scope).  `account` (may be NULL) is
 * added as Docker does when logging in.  Values are URL-encoded.  Caller frees. */
char *ib_auth_token_url (const char *realm, const char *service, const char *scope,
                         const char *account);

/* The OAuth2 form (distribution's spec/auth/oauth) exchanging a refresh
 * token: grant_type=refresh_token&service=S&client_id=imgbuild&
 * refresh_token=T&scope=SCOPES (space-separated, one parameter).  Caller
 * frees (it contains a secret). */
char *ib_auth_oauth_form (const char *service, const char *scope, const char *refresh_token);

/* A parsed token answer.  expires_ms: when the token stops being valid
 * (issued_at, or now when absent or in the future, + expires_in, default
 * 60 s); lifetime_ms: expires_in in ms. */
typedef struct ib_auth_token
{
  char *token;         /* "token", else "access_token"; the bearer secret */
  char *refresh_token; /* OAuth2 answers may renew it; NULL when absent */
  int64_t expires_ms, lifetime_ms;
} ib_auth_token_t;

/* Parse a token server's JSON answer received at `now_ms`.  Error (EPROTO)
 * when it is not JSON or has no non-empty token. */
int ib_auth_token_parse (const char *body, size_t len, int64_t now_ms, ib_auth_token_t *out,
                         ib_error_t *err);
void ib_auth_token_clear (ib_auth_token_t *t);

/* Is a token still worth sending at `now_ms`?  It is reused until shortly
 * before it expires: 10 s before for lifetimes of 60 s and more, a fifth of
 * the lifetime before for shorter ones (so that a request started just
 * before expiry does not arrive with a dead token). */
bool ib_auth_token_fresh (int64_t expires_ms, int64_t lifetime_ms, int64_t now_ms);

/* ---------- challenges ---------- */

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

#endif
