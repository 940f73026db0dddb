/* builder/artifact/s3_backend.c — the artifact repository's S3 backend:
 * s3://BUCKET[/PREFIX], one object per file under PREFIX/KEY, through the
 * S3 client (builder/artifact/s3.h).
 */
#include "builder/artifact/private.h"
#include "builder/artifact/s3.h"

#include "common/util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/* The repository's bucket and base (parse_s3_url), and a client for it. */
static int
open_bucket (ib_artifact_opts_t *o, char **bucket, char **base, ib_s3_t **s, ib_error_t *err)
{
  if (parse_s3_url (o->repository, bucket, base, err) < 0)
    return -1;
  return ib_s3_new (*bucket, o->s3_endpoint, s, err);
}

int
ib_art_push_s3 (ib_artifact_opts_t *o, const char *key, const art_file_t *f, size_t n,
                ib_error_t *err)
{
  cleanup_free char *bucket = NULL;
  cleanup_free char *base = NULL;
  ib_s3_t *s;
  if (open_bucket (o, &bucket, &base, &s, err) < 0)
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

int
ib_art_pull_s3 (ib_artifact_opts_t *o, const char *key, const char *tmp, art_file_t **f,
                size_t *n, ib_error_t *err)
{
  cleanup_free char *bucket = NULL;
  cleanup_free char *base = NULL;
  ib_s3_t *s;
  if (open_bucket (o, &bucket, &base, &s, err) < 0)
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
      if (ib_s3_list (s, commit_prefix, &others, NULL) == 0)
        for (size_t i = 0; others[i]; i++)
          {
            const char *rest = others[i] + strlen (commit_prefix);
            const char *a = strchr (rest, '/');
            const char *b = a ? strchr (a + 1, '/') : NULL;
            const char *c = b ? strchr (b + 1, '/') : NULL;
            if (c)
              {
                cleanup_free char *t = xstrndup (rest, (size_t) (c - rest));
                ib_art_add_distinct (&found, t);
              }
          }
      cleanup_free char *hint = ib_art_stored_hint (o->id.commit, found);
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
      if (ib_art_files_has (*f, *n, rel))
        continue;
      ib_info ("Downloading s3://%s/%s", bucket, keys[i]);
      int fd = ib_art_create_in (tmp, rel, err);
      if (fd < 0)
        ret = -1;
      else if (ib_s3_get_file (s, keys[i], fd, NULL, err) < 0)
        {
          close (fd);
          ret = -1;
        }
      else
        ret = ib_art_finish_fd (fd, rel, err);
      if (ret == 0)
        ib_art_files_add (f, n, rel, rel);
    }
  ib_s3_free (s);
  return ret;
}
