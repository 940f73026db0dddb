/* oci/auth.c — registry credentials (auth files, credential helpers),
 * token bookkeeping and WWW-Authenticate challenges, all without the
 * network (that is oci/auth_http.c).  See oci/auth.h. */
#include "oci/auth.h"
#include "common/util.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define HELPER_OUTPUT_MAX (1 << 20)
#define DOCKER_HUB_SERVER "https://index.docker.io/v1/"

/* ---------- process-wide settings ---------- */

static pthread_mutex_t settings_lock = PTHREAD_MUTEX_INITIALIZER;
static char *authfile_override;
static char *override_registry, *override_user, *override_password;

static void
free_secret (char *s)
{
  if (s)
    {
      explicit_bzero (s, strlen (s));
      free (s);
    }
}

void
ib_auth_set_authfile (const char *path)
{
  pthread_mutex_lock (&settings_lock);
  free (authfile_override);
  authfile_override = xstrdup (path);
  pthread_mutex_unlock (&settings_lock);
}

void
ib_auth_set_override (const char *registry, const char *user, const char *password)
{
  pthread_mutex_lock (&settings_lock);
  free (override_registry);
  free_secret (override_user);
  free_secret (override_password);
  override_registry = registry ? ib_auth_normalize_key (registry) : NULL;
  override_user = xstrdup (user);
  override_password = xstrdup (password);
  pthread_mutex_unlock (&settings_lock);
}

/* ---------- credentials ---------- */

void
ib_auth_creds_clear (ib_auth_creds_t *c)
{
  if (c == NULL)
    return;
  free_secret (c->username);
  free_secret (c->password);
  free_secret (c->identity_token);
  free (c->source);
  memset (c, 0, sizeof *c);
}

bool
ib_auth_creds_empty (const ib_auth_creds_t *c)
{
  return c->username == NULL && c->password == NULL && c->identity_token == NULL;
}

char *
ib_base64_encode (const void *data, size_t len)
{
  char *out = xmalloc ((len + 2) / 3 * 4 + 1);
  EVP_EncodeBlock ((unsigned char *) out, data, (int) len);
  return out;
}

char *
ib_base64_decode (const char *in)
{
  size_t n = strlen (in);
  if (n % 4 != 0)
    return NULL;
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
  if (memchr (out, '\0', (size_t) r))
    {
      free_secret ((char *) out);
      return NULL;
    }
  return (char *) out;
}

char *
ib_auth_basic_header (const ib_auth_creds_t *c)
{
  if (c == NULL || c->username == NULL || c->password == NULL)
    return NULL;
  cleanup_free char *up = xasprintf ("%s:%s", c->username, c->password);
  char *b = ib_base64_encode (up, strlen (up));
  char *h = xasprintf ("Authorization: Basic %s", b);
  explicit_bzero (up, strlen (up));
  free_secret (b);
  return h;
}

char *
ib_auth_normalize_key (const char *key)
{
  const char *s = key;
  bool url = false;
  if (strncasecmp (s, "https://", 8) == 0)
    s += 8, url = true;
  else if (strncasecmp (s, "http://", 7) == 0)
    s += 7, url = true;
  size_t n = url ? strcspn (s, "/") : strlen (s);
  while (n > 0 && s[n - 1] == '/')
    n--;
  char *r = xstrndup (s, n);
  size_t hl = strcspn (r, "/");
  static const char *const hub[] = { "index.docker.io", "registry-1.docker.io" };
  for (size_t i = 0; i < 2; i++)
    if (hl == strlen (hub[i]) && strncasecmp (r, hub[i], hl) == 0)
      {
        char *m = xasprintf ("docker.io%s", r + hl);
        free (r);
        return m;
      }
  return r;
}

char **
ib_auth_search_path (void)
{
  char **v = NULL;
  pthread_mutex_lock (&settings_lock);
  const char *e = authfile_override ? authfile_override : getenv ("REGISTRY_AUTH_FILE");
  if (e && *e)
    ib_strv_push (&v, e);
  pthread_mutex_unlock (&settings_lock);
  {
    cleanup_free char *p = (e = getenv ("XDG_RUNTIME_DIR")) && *e
                               ? xasprintf ("%s/containers/auth.json", e)
                               : xasprintf ("/run/containers/%u/auth.json", (unsigned) getuid ());
    ib_strv_push (&v, p);
  }
  const char *home = getenv ("HOME");
  {
    cleanup_free char *p = NULL;
    if ((e = getenv ("XDG_CONFIG_HOME")) && *e)
      p = xasprintf ("%s/containers/auth.json", e);
    else if (home && *home)
      p = xasprintf ("%s/.config/containers/auth.json", home);
    if (p)
      ib_strv_push (&v, p);
  }
  cleanup_free char *p = NULL;
  if ((e = getenv ("DOCKER_CONFIG")) && *e)
    p = xasprintf ("%s/config.json", e);
  else if ((e = getenv ("HOME")) && *e)
    p = xasprintf ("%s/.docker/config.json", e);
  if (p)
    ib_strv_push (&v, p);
  return v;
}

char *
ib_auth_default_file (ib_error_t *err)
{
  const char *e;
  pthread_mutex_lock (&settings_lock);
  char *r = xstrdup (authfile_override);
  pthread_mutex_unlock (&settings_lock);
  if (r)
    return r;
  if ((e = getenv ("REGISTRY_AUTH_FILE")) && *e)
    return xstrdup (e);
  if ((e = getenv ("XDG_RUNTIME_DIR")) && *e)
    return xasprintf ("%s/containers/auth.json", e);
  if ((e = getenv ("HOME")) && *e)
    return xasprintf ("%s/.docker/config.json", e);
  ib_error_set (err, ENOENT, "no auth file: set REGISTRY_AUTH_FILE, XDG_RUNTIME_DIR or HOME, "
                "or give --authfile");
  return NULL;
}

/* ---------- credential helpers ---------- */

static bool
helper_name_ok (const char *name)
{
  if (name == NULL || *name == '\0')
    return false;
  for (const char *p = name; *p; p++)
    if (!isalnum ((unsigned char) *p) && *p != '-' && *p != '_' && *p != '.')
      return false;
  return name[0] != '.';
}

/* The server URL a helper stores credentials under, as Docker names it. */
static const char *
helper_server (const char *key)
{
  return strcmp (key, "docker.io") == 0 ? DOCKER_HUB_SERVER : key;
}

/* Run `docker-credential-NAME action` with `input` on stdin; *output gets
 * stdout and stderr, *status the exit status (-1: killed by a signal). */
static int
run_helper (const char *name, const char *action, const char *input, char **output, int *status,
            ib_error_t *err)
{
  *output = NULL;
  if (!helper_name_ok (name))
    return ib_error_set (err, EINVAL, "credential helper name \"%s\" is not valid", name);
  cleanup_free char *prog = xasprintf ("docker-credential-%s", name);
  int in[2], out[2];
  if (pipe2 (in, O_CLOEXEC) < 0)
    return ib_error_sys (err, errno, "credential helper %s: pipe", prog);
  if (pipe2 (out, O_CLOEXEC) < 0)
    {
      int e = errno;
      close (in[0]);
      close (in[1]);
      return ib_error_sys (err, e, "credential helper %s: pipe", prog);
    }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init (&fa);
  posix_spawn_file_actions_adddup2 (&fa, in[0], 0);
  posix_spawn_file_actions_adddup2 (&fa, out[1], 1);
  posix_spawn_file_actions_adddup2 (&fa, out[1], 2);
  char *argv[] = { prog, (char *) action, NULL };
  pid_t pid;
  int rc = posix_spawnp (&pid, prog, &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy (&fa);
  close (in[0]);
  close (out[1]);
  if (rc != 0)
    {
      close (in[1]);
      close (out[0]);
      if (rc == ENOENT)
        return ib_error_set (err, ENOENT, "credential helper %s not found in PATH", prog);
      if (rc == EACCES) /* a PATH directory we may not search, or a file we may not run */
        return ib_error_set (err, EACCES, "credential helper %s not found in PATH (or not "
                             "executable: permission denied)", prog);
      return ib_error_sys (err, rc, "run credential helper %s", prog);
    }
  /* The helper may exit without reading: no SIGPIPE for us, and what it
   * did not read does not matter (its answer says how it went). */
  ib_write_pipe (in[1], input, strlen (input), "credential helper input", NULL);
  close (in[1]);

  ib_buf_t b = { 0 };
  char buf[4096];
  for (;;)
    {
      ssize_t n = read (out[0], buf, sizeof buf);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        break;
      if (b.len + (size_t) n <= HELPER_OUTPUT_MAX)
        ib_buf_append (&b, buf, (size_t) n);
    }
  close (out[0]);
  int ws;
  while (waitpid (pid, &ws, 0) < 0)
    if (errno != EINTR)
      {
        int e = errno;
        ib_buf_free (&b);
        return ib_error_sys (err, e, "wait for credential helper %s", prog);
      }
  *status = WIFEXITED (ws) ? WEXITSTATUS (ws) : -1;
  *output = ib_buf_steal (&b);
  return 0;
}

/* The helper's words for a failure: its output, trimmed, on one line. */
static char *
helper_message (const char *output)
{
  cleanup_free char *s = xstrdup (output);
  for (char *p = s; *p; p++)
    if (*p == '\n' || *p == '\r')
      *p = ' ';
  size_t n = strlen (s);
  while (n > 0 && s[n - 1] == ' ')
    s[--n] = '\0';
  return xstrdup (*s ? s : "no output");
}

/* `docker-credential-NAME get` for `key`. */
static int
helper_get (const char *name, const char *key, const char *file, ib_auth_creds_t *out,
            bool *found, ib_error_t *err)
{
  *found = false;
  cleanup_free char *output = NULL;
  int status;
  if (run_helper (name, "get", helper_server (key), &output, &status, err) < 0)
    return ib_error_prefix (err, "credentials for %s (%s)", key, file);
  if (status != 0)
    {
      if (strcasestr (output, "credentials not found"))
        return 0;
      cleanup_free char *m = helper_message (output);
      if (status < 0)
        return ib_error_set (err, EIO, "credentials for %s: docker-credential-%s get was killed",
                             key, name);
      return ib_error_set (err, EIO, "credentials for %s: docker-credential-%s get failed "
                           "(exit status %d): %s", key, name, status, m);
    }
  json_error_t je;
  json_t *j = json_loads (output, 0, &je);
  explicit_bzero (output, strlen (output));
  const char *u = json_string_value (json_object_get (j, "Username"));
  const char *s = json_string_value (json_object_get (j, "Secret"));
  if (j == NULL || s == NULL)
    {
      if (j)
        json_decref (j);
      return ib_error_set (err, EPROTO, "credentials for %s: docker-credential-%s get did not "
                           "answer JSON with a Secret", key, name);
    }
  memset (out, 0, sizeof *out);
  if (u && strcmp (u, "<token>") == 0)
    out->identity_token = xstrdup (s);
  else
    {
      out->username = xstrdup (u ? u : "");
      out->password = xstrdup (s);
    }
  out->source = xasprintf ("%s (docker-credential-%s)", file, name);
  *found = true;
  json_decref (j);
  return 0;
}

/* How well auths key `nk` (normalized) matches registry/repository: the
 * key's length, or 0 when it does not match. */
static size_t
key_match (const char *nk, const char *registry, const char *repository)
{
  size_t rl = strlen (registry);
  if (strcmp (nk, registry) == 0)
    return rl;
  if (repository == NULL || strncmp (nk, registry, rl) != 0 || nk[rl] != '/')
    return 0;
  const char *path = nk + rl + 1;
  size_t pl = strlen (path);
  if (strncmp (repository, path, pl) == 0 && (repository[pl] == '\0' || repository[pl] == '/'))
    return strlen (nk);
  return 0;
}

static int
creds_from_entry (json_t *e, const char *key, const char *file, ib_auth_creds_t *out,
                  ib_error_t *err)
{
  memset (out, 0, sizeof *out);
  const char *a = json_string_value (json_object_get (e, "auth"));
  const char *it = json_string_value (json_object_get (e, "identitytoken"));
  const char *u = json_string_value (json_object_get (e, "username"));
  const char *p = json_string_value (json_object_get (e, "password"));
  if (a && *a)
    {
      char *d = ib_base64_decode (a);
      char *colon = d ? strchr (d, ':') : NULL;
      if (colon == NULL)
        {
          free_secret (d);
          return ib_error_set (err, EINVAL, "auth file %s: entry \"%s\": \"auth\" is not base64 "
                               "of user:password", file, key);
        }
      *colon = '\0';
      out->username = xstrdup (d);
      out->password = xstrdup (colon + 1);
      explicit_bzero (colon + 1, strlen (colon + 1));
      free_secret (d);
    }
  else if (u && p && *p)
    {
      out->username = xstrdup (u);
      out->password = xstrdup (p);
    }
  if (it && *it)
    {
      /* the refresh token replaces the password (Docker's login stores "<token>") */
      free_secret (out->password);
      out->password = NULL;
      out->identity_token = xstrdup (it);
    }
  out->source = xstrdup (file);
  return 0;
}

static bool
entry_has_secret (json_t *e)
{
  static const char *const fields[] = { "auth", "identitytoken", "password" };
  for (size_t i = 0; i < 3; i++)
    {
      const char *s = json_string_value (json_object_get (e, fields[i]));
      if (s && *s)
        return true;
    }
  return false;
}

/* Load an auth file; *j NULL (and 0) when it does not exist. */
static int
load_auth_file (const char *path, json_t **j, ib_error_t *err)
{
  *j = NULL;
  cleanup_free char *data = NULL;
  size_t len;
  if (access (path, F_OK) < 0 && errno == ENOENT)
    return 0;
  if (ib_read_file (path, &data, &len, err) < 0)
    return ib_error_prefix (err, "auth file");
  json_error_t je;
  *j = json_loadb (data, len, 0, &je);
  explicit_bzero (data, len);
  if (*j == NULL && len == 0)
    {
      *j = json_object ();
      return 0;
    }
  if (*j == NULL)
    return ib_error_set (err, EINVAL, "auth file %s: not valid JSON (line %d: %s)", path, je.line,
                         je.text);
  if (!json_is_object (*j))
    {
      json_decref (*j);
      *j = NULL;
      return ib_error_set (err, EINVAL, "auth file %s: not a JSON object", path);
    }
  return 0;
}

/* The credential helper the file names for `key` (credHelpers, else
 * credsStore), or NULL. */
static const char *
file_helper (json_t *j, const char *key, bool *from_store)
{
  const char *k;
  json_t *v;
  *from_store = false;
  json_object_foreach (json_object_get (j, "credHelpers"), k, v)
  {
    cleanup_free char *nk = ib_auth_normalize_key (k);
    if (strcmp (nk, key) == 0 && json_string_value (v) && *json_string_value (v))
      return json_string_value (v);
  }
  const char *s = json_string_value (json_object_get (j, "credsStore"));
  if (s && *s)
    {
      *from_store = true;
      return s;
    }
  return NULL;
}

int
ib_auth_find_in_file (const char *path, const char *registry, const char *repository,
                      ib_auth_creds_t *out, bool *found, ib_error_t *err)
{
  memset (out, 0, sizeof *out);
  *found = false;
  json_t *j;
  if (load_auth_file (path, &j, err) < 0)
    return -1;
  if (j == NULL)
    return 0;
  cleanup_free char *reg = ib_auth_normalize_key (registry);
  int ret = 0;
  bool from_store;
  const char *helper = file_helper (j, reg, &from_store);
  if (helper && !from_store)
    {
      ret = helper_get (helper, reg, path, out, found, err);
      goto out;
    }
  const char *k, *best_key = NULL;
  json_t *v, *best = NULL;
  size_t best_len = 0;
  json_object_foreach (json_object_get (j, "auths"), k, v)
  {
    if (!entry_has_secret (v))
      continue;
    cleanup_free char *nk = ib_auth_normalize_key (k);
    size_t m = key_match (nk, reg, repository);
    if (m > best_len)
      {
        best_len = m;
        best = v;
        best_key = k;
      }
  }
  if (best)
    {
      ret = creds_from_entry (best, best_key, path, out, err);
      *found = ret == 0;
    }
  else if (helper)
    ret = helper_get (helper, reg, path, out, found, err);
out:
  json_decref (j);
  return ret;
}

int
ib_auth_find (const char *registry, const char *repository, ib_auth_creds_t *out,
              ib_error_t *err)
{
  memset (out, 0, sizeof *out);
  cleanup_free char *reg = ib_auth_normalize_key (registry);
  pthread_mutex_lock (&settings_lock);
  bool over = override_registry && strcmp (override_registry, reg) == 0;
  if (over)
    {
      out->username = xstrdup (override_user);
      out->password = xstrdup (override_password);
      out->source = xstrdup ("--creds");
    }
  pthread_mutex_unlock (&settings_lock);
  if (over)
    return 0;
  cleanup_strv char **files = ib_auth_search_path ();
  for (size_t i = 0; files && files[i]; i++)
    {
      bool found;
      if (ib_auth_find_in_file (files[i], reg, repository, out, &found, err) < 0)
        return -1;
      if (found)
        {
          ib_debug ("credentials for %s from %s", reg, out->source);
          return 0;
        }
    }
  return 0;
}

/* ---------- login / logout ---------- */

static int
save_auth_file (const char *path, json_t *j, ib_error_t *err)
{
  cleanup_free char *dir = xstrdup (path);
  char *slash = strrchr (dir, '/');
  if (slash && slash != dir)
    {
      *slash = '\0';
      if (ib_mkdir_p (dir, 0700, err) < 0)
        return ib_error_prefix (err, "auth file %s", path);
    }
  char *data = json_dumps (j, JSON_INDENT (2) | JSON_PRESERVE_ORDER);
  int r = ib_write_file_atomic (path, data, strlen (data), 0600, err);
  explicit_bzero (data, strlen (data));
  free (data);
  return r < 0 ? ib_error_prefix (err, "auth file") : 0;
}

int
ib_auth_store (const char *path, const char *key, const char *user, const char *password,
               ib_error_t *err)
{
  json_t *j;
  if (load_auth_file (path, &j, err) < 0)
    return -1;
  if (j == NULL)
    j = json_object ();
  int ret = 0;
  bool from_store;
  const char *helper = file_helper (j, key, &from_store);
  if (helper)
    {
      json_t *in = json_pack ("{s:s, s:s, s:s}", "ServerURL", helper_server (key), "Username", user,
                              "Secret", password);
      char *text = json_dumps (in, JSON_COMPACT);
      json_decref (in);
      cleanup_free char *output = NULL;
      int status = 0;
      ret = run_helper (helper, "store", text, &output, &status, err);
      explicit_bzero (text, strlen (text));
      free (text);
      if (ret == 0 && status != 0)
        {
          cleanup_free char *m = helper_message (output);
          ret = ib_error_set (err, EIO, "docker-credential-%s store failed (exit status %d): %s",
                              helper, status, m);
        }
      if (ret < 0)
        ib_error_prefix (err, "store credentials for %s (credential helper named in %s)", key, path);
      json_decref (j);
      return ret;
    }
  json_t *auths = json_object_get (j, "auths");
  if (!json_is_object (auths))
    {
      auths = json_object ();
      json_object_set_new (j, "auths", auths);
    }
  /* one entry per registry: drop other spellings of the same key */
  const char *k;
  json_t *v;
  void *tmp;
  json_object_foreach_safe (auths, tmp, k, v)
  {
    cleanup_free char *nk = ib_auth_normalize_key (k);
    if (strcmp (nk, key) == 0)
      json_object_del (auths, k);
  }
  cleanup_free char *up = xasprintf ("%s:%s", user, password);
  char *b = ib_base64_encode (up, strlen (up));
  explicit_bzero (up, strlen (up));
  json_object_set_new (auths, key, json_pack ("{s:s}", "auth", b));
  free_secret (b);
  ret = save_auth_file (path, j, err);
  json_decref (j);
  return ret;
}

int
ib_auth_remove (const char *path, const char *key, bool *removed, ib_error_t *err)
{
  *removed = false;
  json_t *j;
  if (load_auth_file (path, &j, err) < 0)
    return -1;
  if (j == NULL)
    return 0;
  int ret = 0;
  bool from_store;
  const char *helper = key ? file_helper (j, key, &from_store) : NULL;
  if (helper)
    {
      cleanup_free char *output = NULL;
      int status = 0;
      ret = run_helper (helper, "erase", helper_server (key), &output, &status, err);
      if (ret == 0 && status == 0)
        *removed = true;
      else if (ret == 0 && !strcasestr (output, "credentials not found"))
        {
          cleanup_free char *m = helper_message (output);
          ret = ib_error_set (err, EIO, "docker-credential-%s erase failed (exit status %d): %s",
                              helper, status, m);
        }
      if (ret < 0)
        ib_error_prefix (err, "remove credentials for %s (credential helper named in %s)", key,
                         path);
    }
  json_t *auths = json_object_get (j, "auths");
  const char *k;
  json_t *v;
  void *tmp;
  bool changed = false;
  json_object_foreach_safe (auths, tmp, k, v)
  {
    cleanup_free char *nk = ib_auth_normalize_key (k);
    if (key == NULL || strcmp (nk, key) == 0)
      {
        json_object_del (auths, k);
        changed = true;
      }
  }
  if (ret == 0 && changed)
    {
      *removed = true;
      ret = save_auth_file (path, j, err);
    }
  json_decref (j);
  return ret;
}

/* ---------- tokens ---------- */

int64_t
ib_auth_now_ms (void)
{
  struct timespec ts;
  clock_gettime (CLOCK_REALTIME, &ts);
  return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
url_encode (ib_buf_t *b, const char *s)
{
  for (const unsigned char *p = (const unsigned char *) s; *p; p++)
    if (isalnum (*p) || strchr ("-._~", *p))
      ib_buf_append (b, p, 1);
    else
      ib_buf_printf (b, "%%%02X", *p);
}

/* Append "&name=value" (or '?' first) to a URL / form. */
static void
add_param (ib_buf_t *b, char *sep, const char *name, const char *value)
{
  if (*sep)
    ib_buf_append (b, sep, 1);
  ib_buf_printf (b, "%s=", name);
  url_encode (b, value);
  *sep = '&';
}

char *
ib_auth_token_url (const char *realm, const char *service, const char *scope, const char *account)
{
  ib_buf_t b = { 0 };
  ib_buf_puts (&b, realm);
  char sep = strchr (realm, '?') ? '&' : '?';
  if (service && *service)
    add_param (&b, &sep, "service", service);
  if (scope)
    {
      cleanup_free char *copy = xstrdup (scope);
      char *save = NULL;
      for (char *s = strtok_r (copy, " ", &save); s; s = strtok_r (NULL, " ", &save))
        add_param (&b, &sep, "scope", s);
    }
  if (account && *account)
    add_param (&b, &sep, "account", account);
  return ib_buf_steal (&b);
}

char *
ib_auth_oauth_form (const char *service, const char *scope, const char *refresh_token)
{
  ib_buf_t b = { 0 };
  char sep = '\0';
  add_param (&b, &sep, "grant_type", "refresh_token");
  if (service && *service)
    add_param (&b, &sep, "service", service);
  add_param (&b, &sep, "client_id", "imgbuild");
  add_param (&b, &sep, "refresh_token", refresh_token);
  if (scope && *scope)
    add_param (&b, &sep, "scope", scope);
  return ib_buf_steal (&b);
}

/* RFC 3339 date-time -> ms since the epoch; -1 when malformed. */
static int64_t
parse_rfc3339 (const char *s)
{
  struct tm tm;
  memset (&tm, 0, sizeof tm);
  const char *p = strptime (s, "%Y-%m-%dT%H:%M:%S", &tm);
  if (p == NULL)
    return -1;
  int64_t ms = 0;
  if (*p == '.')
    {
      int64_t scale = 100;
      for (p++; isdigit ((unsigned char) *p); p++, scale /= 10)
        ms += (*p - '0') * scale;
    }
  int64_t offset = 0;
  if (*p == 'Z' || *p == 'z')
    p++;
  else if (*p == '+' || *p == '-')
    {
      int sign = *p == '-' ? -1 : 1;
      int hh, mm;
      if (sscanf (p + 1, "%2d:%2d", &hh, &mm) != 2)
        return -1;
      offset = sign * (hh * 3600 + mm * 60);
      p += 6;
    }
  else
    return -1;
  if (*p)
    return -1;
  time_t t = timegm (&tm);
  return ((int64_t) t - offset) * 1000 + ms;
}

void
ib_auth_token_clear (ib_auth_token_t *t)
{
  if (t == NULL)
    return;
  free_secret (t->token);
  free_secret (t->refresh_token);
  memset (t, 0, sizeof *t);
}

int
ib_auth_token_parse (const char *body, size_t len, int64_t now_ms, ib_auth_token_t *out,
                     ib_error_t *err)
{
  memset (out, 0, sizeof *out);
  json_t *j = json_loadb (body ? body : "", len, 0, NULL);
  if (!json_is_object (j))
    {
      if (j)
        json_decref (j);
      return ib_error_set (err, EPROTO, "the token server's answer is not a JSON object");
    }
  const char *t = json_string_value (json_object_get (j, "token"));
  if (t == NULL || *t == '\0')
    t = json_string_value (json_object_get (j, "access_token"));
  if (t == NULL || *t == '\0')
    {
      json_decref (j);
      return ib_error_set (err, EPROTO, "the token server's answer has no token");
    }
  out->token = xstrdup (t);
  const char *rt = json_string_value (json_object_get (j, "refresh_token"));
  if (rt && *rt)
    out->refresh_token = xstrdup (rt);
  json_t *ei = json_object_get (j, "expires_in");
  int64_t secs = json_is_number (ei) ? (int64_t) json_number_value (ei) : 0;
  if (secs <= 0)
    secs = 60; /* the spec's default */
  int64_t issued = now_ms;
  const char *ia = json_string_value (json_object_get (j, "issued_at"));
  if (ia)
    {
      int64_t v = parse_rfc3339 (ia);
      if (v >= 0 && v < now_ms) /* a clock ahead of ours cannot stretch the lifetime */
        issued = v;
    }
  out->lifetime_ms = secs * 1000;
  out->expires_ms = issued + out->lifetime_ms;
  json_decref (j);
  return 0;
}

bool
ib_auth_token_fresh (int64_t expires_ms, int64_t lifetime_ms, int64_t now_ms)
{
  int64_t margin = lifetime_ms >= 60000 ? 10000 : lifetime_ms / 5;
  return now_ms + margin < expires_ms;
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
