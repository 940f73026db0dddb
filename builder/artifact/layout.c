/* builder/artifact/layout.c — where an artifact's files go: the key
 * prefix, the --licenses / --dependencies paths, the OCI tag of a key, the
 * safe relative paths a pull may create, and the pulled layout's .meta
 * file (name and YAML text), as MXNet CD's tool lays them out
 * (builder/artifact/artifact.h).
 */
#include "builder/artifact/artifact.h"
#include "builder/artifact/private.h"

#include "common/util.h"
#include "oci/digest.h"

#include <ctype.h>
#include <errno.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

char *
ib_artifact_key_prefix (const ib_artifact_id_t *id, const char *subdir)
{
  if (subdir && *subdir)
    return xasprintf ("%s/%s/%s/%s/%s/", id->commit, id->libtype, id->os, id->variant, subdir);
  return xasprintf ("%s/%s/%s/%s/", id->commit, id->libtype, id->os, id->variant);
}

int
ib_artifact_expand_paths (char *const *patterns, const char *what, char ***out, ib_error_t *err)
{
  cleanup_strv char **files = xmalloc (sizeof (char *));
  for (size_t i = 0; patterns && patterns[i]; i++)
    {
      cleanup_free char *copy = xstrdup (patterns[i]);
      char *pat = ib_art_strip (copy);
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
            if (strcmp (ib_art_base_name (files[k]), ib_art_base_name (g.gl_pathv[j])) == 0)
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
