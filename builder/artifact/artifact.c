/* builder/artifact/artifact.c — the artifact repository: characteristics,
 * key layout, and push/pull to S3 or an OCI registry
 * (builder/artifact/artifact.h).
 *
 * Behaviour follows MXNet CD's tool, apache/mxnet
 * cd/utils/artifact_repository.py at 22b51361f51204ec29f171c5a8c7c84168752250
 * (written anew in C; where we differ the header says so).
 */
#include "builder/artifact/artifact.h"

#include "builder/artifact/s3.h"
#include "common/util.h"
#include "oci/digest.h"
#include "oci/manifest.h"
#include "oci/ref.h"
#include "oci/registry.h"

#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <jansson.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

void
ib_artifact_id_clear (ib_artifact_id_t *id)
{
  free (id->commit);
  free (id->libtype);
  free (id->os);
  free (id->variant);
  memset (id, 0, sizeof *id);
}

char *
ib_artifact_key_prefix (const ib_artifact_id_t *id, const char *subdir)
{
  if (subdir && *subdir)
    return xasprintf ("%s/%s/%s/%s/%s/", id->commit, id->libtype, id->os, id->variant, subdir);
  return xasprintf ("%s/%s/%s/%s/", id->commit, id->libtype, id->os, id->variant);
}

static int
check_component (const char *what, const char *flag, const char *v, ib_error_t *err)
{
  if (v == NULL || *v == '\0')
    return ib_error_set (err, EINVAL, "the %s is not set (give %s)", what, flag);
  if (strcmp (v, ".") == 0 || strcmp (v, "..") == 0)
    return ib_error_set (err, EINVAL, "%s '%s' cannot be a key component (give %s)", what, v,
                         flag);
  for (const unsigned char *p = (const unsigned char *) v; *p; p++)
    if (*p == '/' || *p <= ' ' || *p == 0x7f)
      return ib_error_set (err, EINVAL,
                           "%s '%s' has a '/', blank or control character, which a key "
                           "component cannot have (give %s)",
                           what, v, flag);
  return 0;
}

int
ib_artifact_id_check (const ib_artifact_id_t *id, ib_error_t *err)
{
  if (check_component ("commit id", "--git-sha", id->commit, err) < 0
      || check_component ("library type", "--libtype", id->libtype, err) < 0
      || check_component ("operating system", "--os", id->os, err) < 0
      || check_component ("variant", "--variant", id->variant, err) < 0)
    return -1;
  if (strcmp (id->libtype, "static") != 0 && strcmp (id->libtype, "dynamic") != 0)
    return ib_error_set (err, EINVAL, "--libtype: expected static or dynamic, got '%s'",
                         id->libtype);
  return 0;
}

/* ---- characteristics ---------------------------------------------------- */

static char *
strip (char *s)
{
  while (*s && isspace ((unsigned char) *s))
    s++;
  size_t n = strlen (s);
  while (n > 0 && isspace ((unsigned char) s[n - 1]))
    s[--n] = '\0';
  return s;
}

char *
ib_os_release_value (const char *text, const char *key)
{
  char *found = NULL;
  cleanup_free char *copy = xstrdup (text);
  char *save = NULL;
  for (char *line = strtok_r (copy, "\n", &save); line; line = strtok_r (NULL, "\n", &save))
    {
      char *l = strip (line);
      if (*l == '\0' || *l == '#')
        continue;
      /* all double quotes go, wherever they are (the tool's replace('"', '')) */
      char *w = l;
      for (char *r = l; *r; r++)
        if (*r != '"')
          *w++ = *r;
      *w = '\0';
      char *eq = strchr (l, '=');
      if (eq == NULL)
        continue;
      *eq = '\0';
      if (strcmp (strip (l), key) != 0)
        continue;
      char *v = strip (eq + 1);
      size_t n = strlen (v);
      if (n >= 2 && v[0] == '\'' && v[n - 1] == '\'')
        {
          v[n - 1] = '\0';
          v++;
        }
      free (found); /* the last assignment wins, as in the tool's dict */
      found = xstrdup (v);
    }
  return found;
}

int
ib_artifact_probe_os (const char *platform, const char *path, char **out, ib_error_t *err)
{
  if (!ib_str_has_prefix (platform, "linux"))
    {
      *out = xstrdup (platform);
      return 0;
    }
  cleanup_free char *text = NULL;
  size_t len;
  if (ib_read_file (path, &text, &len, err) < 0)
    return ib_error_prefix (err, "operating system (give --os)");
  cleanup_free char *id = ib_os_release_value (text, "ID");
  cleanup_free char *version = ib_os_release_value (text, "VERSION_ID");
  if (id == NULL || *id == '\0')
    return ib_error_set (err, EINVAL, "operating system: %s has no ID (give --os)", path);
  *out = xasprintf ("%s%s", id, version ? version : "");
  return 0;
}

/* Run argv (PATH searched), stdout captured, stderr to /dev/null. */
static int
run_capture (char *const argv[], char **out, int *status, ib_error_t *err)
{
  int p[2];
  if (pipe2 (p, O_CLOEXEC) < 0)
    return ib_error_sys (err, errno, "pipe");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init (&fa);
  posix_spawn_file_actions_adddup2 (&fa, p[1], 1);
  posix_spawn_file_actions_addopen (&fa, 2, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen (&fa, 0, "/dev/null", O_RDONLY, 0);
  pid_t pid;
  int rc = posix_spawnp (&pid, argv[0], &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy (&fa);
  close (p[1]);
  if (rc != 0)
    {
      close (p[0]);
      return ib_error_sys (err, rc, "run %s", argv[0]);
    }
  ib_buf_t b = { 0 };
  char buf[4096];
  for (;;)
    {
      ssize_t n = read (p[0], buf, sizeof buf);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        break;
      if (b.len < (1 << 20))
        ib_buf_append (&b, buf, (size_t) n);
    }
  close (p[0]);
  int st;
  while (waitpid (pid, &st, 0) < 0)
    if (errno != EINTR)
      {
        ib_buf_free (&b);
        return ib_error_sys (err, errno, "wait for %s", argv[0]);
      }
  *status = st;
  *out = ib_buf_steal (&b);
  return 0;
}

int
ib_artifact_probe_commit (char **out, ib_error_t *err)
{
  const char *envs[] = { "MXNET_SHA", "GIT_COMMIT" };
  for (size_t i = 0; i < 2; i++)
    {
      const char *v = getenv (envs[i]);
      if (v && *v)
        {
          *out = xstrdup (v);
          return 0;
        }
    }
  char *const argv[] = { (char *) "git", (char *) "rev-parse", (char *) "HEAD", NULL };
  cleanup_free char *text = NULL;
  int st;
  ib_error_t e = NULL;
  if (run_capture (argv, &text, &st, &e) == 0 && WIFEXITED (st) && WEXITSTATUS (st) == 0)
    {
      char *nl = strchr (text, '\n');
      if (nl)
        *nl = '\0';
      char *c = strip (text);
      if (*c)
        {
          *out = xstrdup (c);
          return 0;
        }
    }
  const char *why = e ? e->msg : "git rev-parse HEAD failed";
  ib_error_set (err, ENOENT,
                "could not determine the commit id (MXNET_SHA and GIT_COMMIT are unset, %s): "
                "give --git-sha, or run in a git checkout",
                why);
  ib_error_free (&e);
  return -1;
}

int
ib_artifact_parse_nvcc (const char *text, char **out, ib_error_t *err)
{
  for (const char *p = text; (p = strstr (p, "release ")) != NULL; p++)
    {
      const char *d = p + strlen ("release ");
      size_t maj = strspn (d, "0123456789");
      if (maj == 0 || d[maj] != '.')
        continue;
      size_t min = strspn (d + maj + 1, "0123456789");
      if (min == 0)
        continue;
      *out = xasprintf ("%.*s%.*s", (int) maj, d, (int) min, d + maj + 1);
      return 0;
    }
  return ib_error_set (err, EINVAL,
                       "could not find the CUDA version ('release X.Y') in the output of "
                       "nvcc --version (give --variant)");
}

/* MXNet's include/mxnet/c_api.h: struct LibFeature { const char* name; bool enabled; }; */
struct mx_lib_feature
{
  const char *name;
  bool enabled;
};
typedef int (*mx_lib_info_features_fn) (const struct mx_lib_feature **, size_t *);

void
ib_lib_features_free (ib_lib_feature_t *f, size_t n)
{
  for (size_t i = 0; f && i < n; i++)
    free (f[i].name);
  free (f);
}

int
ib_artifact_lib_features (const char *lib, ib_lib_feature_t **out, size_t *n, ib_error_t *err)
{
  /* a name without '/' would be searched for by the dynamic linker */
  cleanup_free char *path = strchr (lib, '/') ? xstrdup (lib) : xasprintf ("./%s", lib);
  void *h = dlopen (path, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL)
    {
      const char *e = dlerror ();
      return ib_error_set (err, ENOEXEC, "variant: cannot load %s (%s): give --variant", lib,
                           e ? e : "dlopen failed");
    }
  dlerror ();
  void *sym = dlsym (h, "MXLibInfoFeatures");
  if (sym == NULL)
    {
      dlclose (h);
      return ib_error_set (err, ENOENT,
                           "variant: %s has no MXLibInfoFeatures to tell its features: give "
                           "--variant",
                           lib);
    }
  mx_lib_info_features_fn fn;
  memcpy (&fn, &sym, sizeof fn);
  const struct mx_lib_feature *feats = NULL;
  size_t count = 0;
  int rc = fn (&feats, &count);
  if (rc != 0 || (feats == NULL && count > 0) || count > 4096)
    {
      dlclose (h);
      return ib_error_set (err, EIO, "variant: MXLibInfoFeatures of %s failed (returned %d): give "
                           "--variant", lib, rc);
    }
  ib_lib_feature_t *f = xmalloc (sizeof *f * (count ? count : 1));
  for (size_t i = 0; i < count; i++)
    {
      f[i].name = xstrdup (feats[i].name ? feats[i].name : "");
      f[i].enabled = feats[i].enabled;
    }
  /* the names are copied: the library can go (as the tool's CDLL object does) */
  dlclose (h);
  *out = f;
  *n = count;
  return 0;
}

static bool
feature_on (const ib_lib_feature_t *f, size_t n, const char *name)
{
  for (size_t i = 0; i < n; i++)
    if (strcmp (f[i].name, name) == 0)
      return f[i].enabled;
  return false;
}

int
ib_artifact_variant_from_features (const ib_lib_feature_t *f, size_t n,
                                   const char *nvcc_output, char **out, ib_error_t *err)
{
  if (feature_on (f, n, "CUDA"))
    {
      if (nvcc_output == NULL)
        return ib_error_set (err, ENOENT,
                             "variant: the library has CUDA, but nvcc --version could not be "
                             "run to tell its version: put nvcc on PATH or give --variant");
      cleanup_free char *v = NULL;
      if (ib_artifact_parse_nvcc (nvcc_output, &v, err) < 0)
        return ib_error_prefix (err, "variant");
      *out = xasprintf ("cu%s", v);
      return 0;
    }
  *out = xstrdup (feature_on (f, n, "ONEDNN") || feature_on (f, n, "MKLDNN") ? "cpu" : "native");
  return 0;
}

int
ib_artifact_probe_variant (const char *lib, char **out, ib_error_t *err)
{
  ib_lib_feature_t *f = NULL;
  size_t n = 0;
  if (ib_artifact_lib_features (lib, &f, &n, err) < 0)
    return -1;
  cleanup_free char *nvcc = NULL;
  if (feature_on (f, n, "CUDA"))
    {
      char *const argv[] = { (char *) "nvcc", (char *) "--version", NULL };
      int st;
      ib_error_t e = NULL;
      if (run_capture (argv, &nvcc, &st, &e) < 0 || !WIFEXITED (st) || WEXITSTATUS (st) != 0)
        {
          free (nvcc);
          nvcc = NULL;
        }
      ib_error_free (&e);
    }
  int ret = ib_artifact_variant_from_features (f, n, nvcc, out, err);
  ib_lib_features_free (f, n);
  return ret;
}

/* ---- files ------------------------------------------------------------- */

static const char *
base_name (const char *p)
{
  const char *s = strrchr (p, '/');
  return s ? s + 1 : p;
}

int
ib_artifact_expand_paths (char *const *patterns, const char *what, char ***out, ib_error_t *err)
{
  cleanup_strv char **files = xmalloc (sizeof (char *));
  for (size_t i = 0; patterns && patterns[i]; i++)
    {
      cleanup_free char *copy = xstrdup (patterns[i]);
      char *pat = strip (copy);
      if (*pat == '\0')
        continue;
      glob_t g;
      int rc = glob (pat, GLOB_NOCHECK, NULL, &g);
      if (rc != 0)
        {
          globfree (&g);
          return ib_error_set (err, EINVAL, "%s '%s': cannot expand the pattern", what, pat);
        }
      for (size_t j = 0; j < g.gl_pathc; j++)
        {
          struct stat st;
          if (stat (g.gl_pathv[j], &st) < 0)
            {
              int e = errno;
              ib_error_set (err, e, "%s file '%s' not found%s", what, g.gl_pathv[j],
                            e == ENOENT ? "" : ": cannot be read");
              globfree (&g);
              return -1;
            }
          if (!S_ISREG (st.st_mode))
            continue; /* directories (and other non-files) are dropped, as the tool does */
          for (size_t k = 0; files[k]; k++)
            if (strcmp (base_name (files[k]), base_name (g.gl_pathv[j])) == 0)
              {
                if (strcmp (files[k], g.gl_pathv[j]) == 0)
                  goto next; /* named twice: once is enough */
                ib_error_set (err, EINVAL,
                              "%s files '%s' and '%s' have the same name: they would be "
                              "stored under one key",
                              what, files[k], g.gl_pathv[j]);
                globfree (&g);
                return -1;
              }
          ib_strv_push (&files, g.gl_pathv[j]);
        next:;
        }
      globfree (&g);
    }
  *out = steal_pointer (&files);
  return 0;
}

/* A YAML plain scalar when that reads back as the same string (YAML 1.1
 * as PyYAML resolves it: a letter somewhere, so no int, float or date; not
 * 0x / 0b; no bool or null word), else single-quoted (YAML 1.2 section
 * 7.3.2: '' stands for '). */
static void
yaml_scalar (ib_buf_t *b, const char *v)
{
  bool letter = false;
  for (const char *p = v; *p; p++)
    letter = letter || isalpha ((unsigned char) *p);
  bool plain = letter && isalnum ((unsigned char) v[0])
               && strspn (v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
                      == strlen (v)
               && !(v[0] == '0' && (v[1] == 'x' || v[1] == 'b'));
  static const char *const special[] = { "true", "false", "yes", "no", "on", "off",
                                         "null", "y", "n", NULL };
  for (size_t i = 0; plain && special[i]; i++)
    if (strcasecmp (v, special[i]) == 0)
      plain = false;
  if (plain)
    {
      ib_buf_puts (b, v);
      return;
    }
  ib_buf_puts (b, "'");
  for (const char *p = v; *p; p++)
    ib_buf_puts (b, *p == '\'' ? "''" : (char[]){ *p, 0 });
  ib_buf_puts (b, "'");
}

char *
ib_artifact_meta_text (const ib_artifact_id_t *id)
{
  ib_buf_t b = { 0 };
  const char *keys[] = { "commit_id", "dependency_linking", "os", "variant" };
  const char *vals[] = { id->commit, id->libtype, id->os, id->variant };
  for (size_t i = 0; i < 4; i++)
    {
      ib_buf_printf (&b, "%s: ", keys[i]);
      yaml_scalar (&b, vals[i] ? vals[i] : "");
      ib_buf_puts (&b, "\n");
    }
  return ib_buf_steal (&b);
}

char *
ib_artifact_meta_name (const char *lib_name)
{
  const char *so = NULL;
  for (const char *p = lib_name; (p = strstr (p, ".so")) != NULL; p++)
    if (p > lib_name && (p[3] == '\0' || p[3] == '.'))
      {
        so = p;
        break;
      }
  if (so)
    return xasprintf ("%.*s.meta", (int) (so - lib_name), lib_name);
  const char *exts[] = { ".dylib", ".dll", ".a" };
  for (size_t i = 0; i < 3; i++)
    {
      size_t n = strlen (lib_name), e = strlen (exts[i]);
      if (n > e && strcmp (lib_name + n - e, exts[i]) == 0)
        return xasprintf ("%.*s.meta", (int) (n - e), lib_name);
    }
  return xasprintf ("%s.meta", lib_name);
}

char *
ib_artifact_oci_tag (const char *key)
{
  size_t n = strlen (key);
  if (n > 0 && key[n - 1] == '/')
    n--;
  bool ok = n > 0 && n <= 128 && isalnum ((unsigned char) key[0]);
  for (size_t i = 0; ok && i < n; i++)
    {
      char c = key[i];
      if (c == '/')
        ok = i + 1 < n && key[i + 1] != '/'; /* no empty component */
      else if (!(isalnum ((unsigned char) c) || c == '.' || c == '-'))
        ok = false;
    }
  if (ok)
    {
      char *t = xstrndup (key, n);
      for (char *p = t; *p; p++)
        if (*p == '/')
          *p = '_';
      return t;
    }
  char d[IB_DIGEST_LEN];
  ib_digest_buf (key, strlen (key), d);
  return xasprintf ("sha256_%s", d + strlen ("sha256:"));
}

bool
ib_artifact_rel_path_ok (const char *rel)
{
  if (rel == NULL || *rel == '\0' || *rel == '/')
    return false;
  for (const unsigned char *p = (const unsigned char *) rel; *p; p++)
    if (*p < ' ' || *p == 0x7f)
      return false;
  const char *p = rel;
  for (;;)
    {
      const char *s = strchr (p, '/');
      size_t len = s ? (size_t) (s - p) : strlen (p);
      if (len == 0 || (len == 1 && p[0] == '.') || (len == 2 && p[0] == '.' && p[1] == '.'))
        return false;
      if (s == NULL)
        return true;
      p = s + 1;
    }
}

bool
ib_artifact_is_s3 (const char *repository)
{
  return repository && ib_str_has_prefix (repository, "s3://");
}

/* ---- push and pull ----------------------------------------------------- */

/* A file of an artifact: its path below the key prefix and, for push, its
 * local path. */
typedef struct art_file
{
  char *rel;
  char *path;
} art_file_t;

static void
files_free (art_file_t *f, size_t n)
{
  for (size_t i = 0; f && i < n; i++)
    {
      free (f[i].rel);
      free (f[i].path);
    }
  free (f);
}

static void
files_add (art_file_t **f, size_t *n, const char *rel, const char *path)
{
  *f = xrealloc (*f, sizeof **f * (*n + 1));
  (*f)[*n].rel = xstrdup (rel);
  (*f)[*n].path = xstrdup (path);
  (*n)++;
}

static int
resolve_id (ib_artifact_opts_t *o, bool pull, ib_error_t *err)
{
  ib_artifact_id_t *id = &o->id;
  if (id->commit == NULL && ib_artifact_probe_commit (&id->commit, err) < 0)
    return -1;
  if (id->variant == NULL && pull)
    {
      ib_warn ("variant not set: using 'cpu' (give --variant)");
      id->variant = xstrdup ("cpu");
    }
  if (id->variant == NULL && ib_artifact_probe_variant (o->lib, &id->variant, err) < 0)
    return -1;
  if (id->os == NULL)
    {
      struct utsname u;
      if (uname (&u) < 0)
        return ib_error_sys (err, errno, "operating system: uname (give --os)");
      for (char *p = u.sysname; *p; p++)
        *p = (char) tolower ((unsigned char) *p);
      if (ib_artifact_probe_os (u.sysname, "/etc/os-release", &id->os, err) < 0)
        return -1;
    }
  if (id->libtype == NULL)
    id->libtype = xstrdup ("dynamic");
  return ib_artifact_id_check (id, err);
}

/* "s3://BUCKET[/PREFIX]" -> bucket, and "PREFIX/" (or "") to put before keys. */
static int
parse_s3_url (const char *url, char **bucket, char **base, ib_error_t *err)
{
  const char *b = url + strlen ("s3://");
  const char *slash = strchr (b, '/');
  *bucket = slash ? xstrndup (b, (size_t) (slash - b)) : xstrdup (b);
  if (**bucket == '\0')
    {
      free (*bucket);
      *bucket = NULL;
      return ib_error_set (err, EINVAL, "%s: no bucket name (expected s3://BUCKET[/PREFIX])", url);
    }
  cleanup_free char *p = xstrdup (slash ? slash + 1 : "");
  size_t n = strlen (p);
  while (n > 0 && p[n - 1] == '/')
    p[--n] = '\0';
  *base = n ? xasprintf ("%s/", p) : xstrdup ("");
  return 0;
}

static int
push_s3 (ib_artifact_opts_t *o, const char *key, const art_file_t *f, size_t n, ib_error_t *err)
{
  cleanup_free char *bucket = NULL;
  cleanup_free char *base = NULL;
  if (parse_s3_url (o->repository, &bucket, &base, err) < 0)
    return -1;
  ib_s3_t *s;
  if (ib_s3_new (bucket, o->s3_endpoint, &s, err) < 0)
    return -1;
  int ret = 0;
  for (size_t i = 0; ret == 0 && i < n; i++)
    {
      cleanup_free char *k = xasprintf ("%s%s%s", base, key, f[i].rel);
      ib_info ("Uploading %s to s3://%s/%s", f[i].path, bucket, k);
      ret = ib_s3_put_file (s, k, f[i].path, err);
    }
  ib_s3_free (s);
  return ret;
}

/* Copy `path` into the store as a blob. */
static int
store_file (ib_store_t *store, const char *path, char digest[IB_DIGEST_LEN], uint64_t *size,
            ib_error_t *err)
{
  cleanup_close int in = open (path, O_RDONLY | O_CLOEXEC);
  if (in < 0)
    return ib_error_sys (err, errno, "open %s", path);
  cleanup_free char *tmp = NULL;
  int out = ib_store_tmp_file (store, "artifact", &tmp, err);
  if (out < 0)
    return -1;
  int ret = ib_copy_fd_data (in, out, path, err);
  close (out);
  if (ret == 0)
    ret = ib_store_commit_blob (store, tmp, NULL, digest, size, err);
  if (ret < 0)
    unlink (tmp);
  return ret;
}

static int
push_oci (ib_artifact_opts_t *o, ib_store_t *store, const char *key, const art_file_t *f,
          size_t n, ib_error_t *err)
{
  if (store == NULL)
    return ib_error_set (err, EINVAL, "artifact push to a registry needs the store");
  ib_ref_t ref;
  if (ib_ref_parse (o->repository, &ref, err) < 0)
    return ib_error_prefix (err, "repository");
  cleanup_free char *tag = ib_artifact_oci_tag (key);
  ib_registry_t *r = NULL;
  int ret = 0;
  if (ref.digest)
    ret = ib_error_set (err, EINVAL, "repository %s: give a repository, not a digest (the tag "
                        "comes from the key)", o->repository);
  if (ret == 0)
    ret = ib_registry_new (&ref, &r, err);
  json_t *layers = json_array ();
  for (size_t i = 0; ret == 0 && i < n; i++)
    {
      char d[IB_DIGEST_LEN];
      uint64_t size = 0;
      ret = store_file (store, f[i].path, d, &size, err);
      if (ret == 0)
        {
          ib_info ("Uploading %s (%s) to %s/%s", f[i].path, d, ref.registry, ref.repository);
          ret = ib_registry_push_blob (r, ref.repository, d, store, err);
        }
      if (ret == 0)
        json_array_append_new (layers,
                               json_pack ("{s:s, s:s, s:I, s:{s:s}}", "mediaType",
                                          IB_ARTIFACT_FILE_TYPE, "digest", d, "size",
                                          (json_int_t) size, "annotations",
                                          IB_ARTIFACT_TITLE_ANNOTATION, f[i].rel));
    }
  json_t *config = json_pack ("{s:s, s:s, s:s, s:s}", "commit_id", o->id.commit,
                              "dependency_linking", o->id.libtype, "os", o->id.os, "variant",
                              o->id.variant);
  cleanup_free char *config_s = json_dumps (config, JSON_SORT_KEYS | JSON_COMPACT);
  json_decref (config);
  char cd[IB_DIGEST_LEN];
  if (ret == 0)
    ret = ib_store_put_blob (store, config_s, strlen (config_s), cd, err);
  if (ret == 0)
    ret = ib_registry_push_blob (r, ref.repository, cd, store, err);
  cleanup_free char *manifest = NULL;
  if (ret == 0)
    {
      json_t *m = json_pack ("{s:i, s:s, s:s, s:{s:s, s:s, s:I}, s:O, s:{s:s}}", "schemaVersion",
                             2, "mediaType", IB_MT_OCI_MANIFEST, "artifactType", IB_ARTIFACT_TYPE,
                             "config", "mediaType", IB_ARTIFACT_CONFIG_TYPE, "digest", cd, "size",
                             (json_int_t) strlen (config_s), "layers", layers, "annotations",
                             IB_ARTIFACT_KEY_ANNOTATION, key);
      manifest = json_dumps (m, JSON_COMPACT);
      json_decref (m);
      ib_info ("Tagging %s/%s:%s (key %s)", ref.registry, ref.repository, tag, key);
      ret = ib_registry_put_manifest (r, ref.repository, tag, manifest, strlen (manifest),
                                      IB_MT_OCI_MANIFEST, err);
    }
  json_decref (layers);
  ib_registry_free (r);
  ib_ref_free (&ref);
  return ret;
}

int
ib_artifact_push (ib_artifact_opts_t *o, ib_store_t *store, ib_error_t *err)
{
  if (o->repository == NULL || *o->repository == '\0')
    return ib_error_set (err, EINVAL, "artifact push: no repository (give --repository "
                         "s3://BUCKET[/PREFIX] or REGISTRY/REPOSITORY)");
  if (o->lib == NULL || *o->lib == '\0')
    return ib_error_set (err, EINVAL, "artifact push: the library must be given (--lib FILE)");
  struct stat st;
  if (stat (o->lib, &st) < 0)
    return ib_error_sys (err, errno, "artifact push: library '%s'", o->lib);
  if (!S_ISREG (st.st_mode))
    return ib_error_set (err, EINVAL, "artifact push: library '%s' is not a regular file", o->lib);
  cleanup_strv char **licenses = NULL;
  cleanup_strv char **deps = NULL;
  if (ib_artifact_expand_paths (o->licenses, "license", &licenses, err) < 0
      || ib_artifact_expand_paths (o->dependencies, "dependency", &deps, err) < 0)
    return ib_error_prefix (err, "artifact push");
  if (licenses[0] == NULL)
    return ib_error_set (err, EINVAL, "artifact push: No licenses defined. Please submit the "
                         "licenses to be shipped with the binary (--licenses FILE).");
  if (resolve_id (o, false, err) < 0)
    return ib_error_prefix (err, "artifact push");
  cleanup_free char *key = ib_artifact_key_prefix (&o->id, NULL);
  art_file_t *f = NULL;
  size_t n = 0;
  files_add (&f, &n, base_name (o->lib), o->lib);
  for (size_t i = 0; licenses[i]; i++)
    {
      cleanup_free char *rel = xasprintf ("licenses/%s", base_name (licenses[i]));
      files_add (&f, &n, rel, licenses[i]);
    }
  for (size_t i = 0; deps[i]; i++)
    {
      cleanup_free char *rel = xasprintf ("dependencies/%s", base_name (deps[i]));
      files_add (&f, &n, rel, deps[i]);
    }
  ib_info ("Pushing artifact %s (commit id %s, os %s, variant %s, libtype %s) to %s", key,
           o->id.commit, o->id.os, o->id.variant, o->id.libtype, o->repository);
  int ret = ib_artifact_is_s3 (o->repository) ? push_s3 (o, key, f, n, err)
                                                : push_oci (o, store, key, f, n, err);
  files_free (f, n);
  if (ret < 0)
    return ib_error_prefix (err, "artifact push %s", key);
  ib_info ("Pushed %s", key);
  return 0;
}

/* Create tmp/rel (parents too) for writing. */
static int
create_in (const char *tmp, const char *rel, ib_error_t *err)
{
  cleanup_free char *path = ib_path_join (tmp, rel);
  cleanup_free char *dir = xstrdup (path);
  *strrchr (dir, '/') = '\0';
  if (ib_mkdir_p (dir, 0755, err) < 0)
    return -1;
  int fd = open (path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    return ib_error_sys (err, errno, "create %s", path);
  return fd;
}

static int
finish_fd (int fd, const char *shown, ib_error_t *err)
{
  if (fsync (fd) < 0)
    {
      int e = errno;
      close (fd);
      return ib_error_sys (err, e, "fsync %s", shown);
    }
  if (close (fd) < 0)
    return ib_error_sys (err, errno, "close %s", shown);
  return 0;
}

static bool
files_has (const art_file_t *f, size_t n, const char *rel)
{
  for (size_t i = 0; i < n; i++)
    if (strcmp (f[i].rel, rel) == 0)
      return true;
  return false;
}

/* "; stored for commit C: L/O/V, ..." from the distinct "L/O/V" in
 * `found` (NULL-terminated, may be NULL or empty: ""). */
static char *
stored_hint (const char *commit, char **found)
{
  if (found == NULL || found[0] == NULL)
    return xstrdup ("");
  ib_buf_t b = { 0 };
  ib_buf_printf (&b, "; stored for commit %s: ", commit);
  for (size_t i = 0; found[i]; i++)
    ib_buf_printf (&b, "%s%s", i ? ", " : "", found[i]);
  return ib_buf_steal (&b);
}

static void
add_distinct (char ***v, const char *s)
{
  for (size_t i = 0; *v && (*v)[i]; i++)
    if (strcmp ((*v)[i], s) == 0)
      return;
  ib_strv_push (v, s);
}

static int
pull_s3 (ib_artifact_opts_t *o, const char *key, const char *tmp, art_file_t **f, size_t *n,
         ib_error_t *err)
{
  cleanup_free char *bucket = NULL;
  cleanup_free char *base = NULL;
  if (parse_s3_url (o->repository, &bucket, &base, err) < 0)
    return -1;
  ib_s3_t *s;
  if (ib_s3_new (bucket, o->s3_endpoint, &s, err) < 0)
    return -1;
  cleanup_free char *prefix = xasprintf ("%s%s", base, key);
  cleanup_strv char **keys = NULL;
  int ret = ib_s3_list (s, prefix, &keys, err);
  if (ret == 0 && keys[0] == NULL)
    {
      /* say what the commit has, if anything: other libtype/os/variant */
      cleanup_free char *commit_prefix = xasprintf ("%s%s/", base, o->id.commit);
      cleanup_strv char **others = NULL;
      cleanup_strv char **found = NULL;
      ib_error_t e2 = NULL;
      if (ib_s3_list (s, commit_prefix, &others, &e2) == 0)
        for (size_t i = 0; others[i]; i++)
          {
            const char *rest = others[i] + strlen (commit_prefix);
            const char *a = strchr (rest, '/');
            const char *b = a ? strchr (a + 1, '/') : NULL;
            const char *c = b ? strchr (b + 1, '/') : NULL;
            if (c)
              {
                cleanup_free char *t = xstrndup (rest, (size_t) (c - rest));
                add_distinct (&found, t);
              }
          }
      ib_error_free (&e2);
      cleanup_free char *hint = stored_hint (o->id.commit, found);
      ret = ib_error_set (err, ENOENT, "no artifact found for %s in %s (no key starts with "
                          "s3://%s/%s)%s", key, o->repository, bucket, prefix, hint);
    }
  for (size_t i = 0; ret == 0 && keys[i]; i++)
    {
      const char *rel = keys[i] + strlen (prefix);
      while (*rel == '/')
        rel++;
      if (*rel == '\0' || ib_str_has_suffix (rel, "/"))
        continue; /* a "folder" marker object */
      if (!ib_artifact_rel_path_ok (rel))
        {
          ret = ib_error_set (err, EINVAL, "s3://%s/%s: key is not a safe relative path below "
                              "the prefix", bucket, keys[i]);
          break;
        }
      if (files_has (*f, *n, rel))
        continue;
      ib_info ("Downloading s3://%s/%s", bucket, keys[i]);
      int fd = create_in (tmp, rel, err);
      if (fd < 0)
        ret = -1;
      else if (ib_s3_get_file (s, keys[i], fd, NULL, err) < 0)
        {
          close (fd);
          ret = -1;
        }
      else
        ret = finish_fd (fd, rel, err);
      if (ret == 0)
        files_add (f, n, rel, rel);
    }
  ib_s3_free (s);
  return ret;
}

static int
pull_oci (ib_artifact_opts_t *o, ib_store_t *store, const char *key, const char *tmp,
          art_file_t **f, size_t *n, ib_error_t *err)
{
  if (store == NULL)
    return ib_error_set (err, EINVAL, "artifact pull from a registry needs the store");
  ib_ref_t ref;
  if (ib_ref_parse (o->repository, &ref, err) < 0)
    return ib_error_prefix (err, "repository");
  cleanup_free char *tag = ib_artifact_oci_tag (key);
  ib_registry_t *r = NULL;
  cleanup_free char *data = NULL;
  size_t len = 0;
  json_t *m = NULL;
  int ret = ib_registry_new (&ref, &r, err);
  if (ret == 0)
    {
      ret = ib_registry_get_manifest (r, ref.repository, tag, &data, &len, NULL, NULL, err);
      if (ret < 0 && (*err)->status == ENOENT)
        {
          /* say what the commit has, if anything: readable tags
           * "COMMIT_LIBTYPE_OS_VARIANT" (ib_artifact_oci_tag) */
          ib_error_free (err);
          cleanup_strv char **tags = NULL;
          cleanup_strv char **found = NULL;
          cleanup_free char *start = xasprintf ("%s_", o->id.commit);
          ib_error_t e2 = NULL;
          if (ib_registry_list_tags (r, ref.repository, &tags, &e2) == 0)
            for (size_t i = 0; tags[i]; i++)
              {
                if (!ib_str_has_prefix (tags[i], start))
                  continue;
                cleanup_free char *t = xstrdup (tags[i] + strlen (start));
                size_t parts = 1;
                for (char *p = t; *p; p++)
                  if (*p == '_')
                    *p = '/', parts++;
                if (parts == 3)
                  add_distinct (&found, t);
              }
          ib_error_free (&e2);
          cleanup_free char *hint = stored_hint (o->id.commit, found);
          ret = ib_error_set (err, ENOENT, "no artifact found for %s in %s (no tag %s)%s", key,
                              o->repository, tag, hint);
        }
    }
  if (ret == 0)
    {
      json_error_t je;
      m = json_loadb (data, len, 0, &je);
      const char *at = json_string_value (json_object_get (m, "artifactType"));
      const char *k = json_string_value (
          json_object_get (json_object_get (m, "annotations"), IB_ARTIFACT_KEY_ANNOTATION));
      if (!json_is_object (m))
        ret = ib_error_set (err, EPROTO, "tag %s: manifest is not JSON: %s", tag, je.text);
      else if (at == NULL || strcmp (at, IB_ARTIFACT_TYPE) != 0)
        ret = ib_error_set (err, EPROTO, "tag %s: not an imgbuild artifact (artifactType %s)",
                            tag, at ? at : "none");
      else if (k == NULL || strcmp (k, key) != 0)
        ret = ib_error_set (err, EPROTO, "tag %s holds the artifact of key %s, not %s", tag,
                            k ? k : "(none)", key);
    }
  json_t *layers = ret == 0 ? json_object_get (m, "layers") : NULL;
  size_t i;
  json_t *l;
  json_array_foreach (layers, i, l)
  {
    if (ret < 0)
      break;
    const char *d = json_string_value (json_object_get (l, "digest"));
    const char *rel = json_string_value (
        json_object_get (json_object_get (l, "annotations"), IB_ARTIFACT_TITLE_ANNOTATION));
    if (d == NULL || !ib_digest_valid (d))
      ret = ib_error_set (err, EPROTO, "tag %s: layer %zu has no valid digest", tag, i);
    else if (rel == NULL || !ib_artifact_rel_path_ok (rel))
      ret = ib_error_set (err, EPROTO, "tag %s: layer %s: title '%s' is not a safe relative path",
                          tag, d, rel ? rel : "");
    else if (files_has (*f, *n, rel))
      ret = ib_error_set (err, EPROTO, "tag %s: two layers are titled %s", tag, rel);
    if (ret < 0)
      break;
    ib_info ("Downloading %s (%s)", rel, d);
    ret = ib_registry_fetch_blob (r, ref.repository, d, store, err);
    cleanup_free char *blob = ret == 0 ? ib_store_blob_path (store, d) : NULL;
    cleanup_close int in = ret == 0 ? open (blob, O_RDONLY | O_CLOEXEC) : -1;
    if (ret == 0 && in < 0)
      ret = ib_error_sys (err, errno, "open %s", blob);
    int out = ret == 0 ? create_in (tmp, rel, err) : -1;
    if (ret == 0 && out < 0)
      ret = -1;
    if (ret == 0 && ib_copy_fd_data (in, out, blob, err) < 0)
      {
        close (out);
        ret = -1;
      }
    else if (ret == 0)
      ret = finish_fd (out, rel, err);
    if (ret == 0)
      files_add (f, n, rel, rel);
  }
  if (ret == 0 && *n == 0)
    ret = ib_error_set (err, ENOENT, "no artifact found for %s in %s (tag %s lists no files)",
                        key, o->repository, tag);
  json_decref (m);
  ib_registry_free (r);
  ib_ref_free (&ref);
  return ret;
}

int
ib_artifact_pull (ib_artifact_opts_t *o, ib_store_t *store, ib_error_t *err)
{
  if (o->repository == NULL || *o->repository == '\0')
    return ib_error_set (err, EINVAL, "artifact pull: no repository (give --repository "
                         "s3://BUCKET[/PREFIX] or REGISTRY/REPOSITORY)");
  if (resolve_id (o, true, err) < 0)
    return ib_error_prefix (err, "artifact pull");
  const char *dest = o->destination && *o->destination ? o->destination : ".";
  cleanup_free char *key = ib_artifact_key_prefix (&o->id, NULL);
  ib_info ("Pulling artifact %s (commit id %s, os %s, variant %s, libtype %s) from %s into %s",
           key, o->id.commit, o->id.os, o->id.variant, o->id.libtype, o->repository, dest);
  if (ib_mkdir_p (dest, 0755, err) < 0)
    return ib_error_prefix (err, "artifact pull");
  cleanup_free char *tmp = xasprintf ("%s/.imgbuild-artifact-XXXXXX", dest);
  if (mkdtemp (tmp) == NULL)
    return ib_error_sys (err, errno, "artifact pull: create %s", tmp);
  art_file_t *f = NULL;
  size_t n = 0;
  int ret = ib_artifact_is_s3 (o->repository) ? pull_s3 (o, key, tmp, &f, &n, err)
                                                : pull_oci (o, store, key, tmp, &f, &n, err);
  /* every file is complete and verified: move them into place */
  for (size_t i = 0; ret == 0 && i < n; i++)
    {
      cleanup_free char *from = ib_path_join (tmp, f[i].rel);
      cleanup_free char *to = ib_path_join (dest, f[i].rel);
      cleanup_free char *dir = xstrdup (to);
      *strrchr (dir, '/') = '\0';
      if (ib_mkdir_p (dir, 0755, err) < 0)
        ret = -1;
      else if (rename (from, to) < 0)
        ret = ib_error_sys (err, errno, "rename %s to %s", from, to);
    }
  cleanup_free char *meta = ib_artifact_meta_text (&o->id);
  for (size_t i = 0; ret == 0 && i < n; i++)
    {
      if (strchr (f[i].rel, '/'))
        continue;
      cleanup_free char *name = ib_artifact_meta_name (f[i].rel);
      cleanup_free char *path = ib_path_join (dest, name);
      ret = ib_write_file_atomic (path, meta, strlen (meta), 0644, err);
    }
  if (ret == 0)
    ret = ib_fsync_dir (dest, err);
  ib_error_t e2 = NULL;
  if (ib_rm_rf (tmp, &e2) < 0)
    ib_error_report (&e2);
  if (ret < 0)
    {
      files_free (f, n);
      return ib_error_prefix (err, "artifact pull %s", key);
    }
  ib_info ("Pulled %zu files of %s into %s", n, key, dest);
  files_free (f, n);
  return 0;
}
