/* builder/artifact/characteristics.c — the four characteristics of an
 * artifact (builder/artifact/artifact.h): the commit id ($MXNET_SHA,
 * $GIT_COMMIT, `git rev-parse HEAD`), the os (os-release), the variant
 * (the library's MXLibInfoFeatures through dlopen, `nvcc --version`) and
 * the libtype, and the check that each can be a key component.
 *
 * Behaviour follows MXNet CD's tool, apache/mxnet
 * cd/utils/artifact_repository.py at 22b51361f51204ec29f171c5a8c7c84168752250
 * (written anew in C; where we differ the header says so).
 */
#include "builder/artifact/artifact.h"
#include "builder/artifact/private.h"

#include "common/util.h"

#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
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

char *
ib_os_release_value (const char *text, const char *key)
{
  char *found = NULL;
  cleanup_free char *copy = xstrdup (text);
  char *save = NULL;
  for (char *line = strtok_r (copy, "\n", &save); line; line = strtok_r (NULL, "\n", &save))
    {
      char *l = ib_art_strip (line);
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
      if (strcmp (ib_art_strip (l), key) != 0)
        continue;
      char *v = ib_art_strip (eq + 1);
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
      char *c = ib_art_strip (text);
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
      if (run_capture (argv, &nvcc, &st, NULL) < 0 || !WIFEXITED (st) || WEXITSTATUS (st) != 0)
        {
          free (nvcc);
          nvcc = NULL;
        }
    }
  int ret = ib_artifact_variant_from_features (f, n, nvcc, out, err);
  ib_lib_features_free (f, n);
  return ret;
}
