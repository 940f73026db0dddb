#include "builder/cache.h"
#include "common/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int
cmp_str (const void *a, const void *b)
{
  return strcmp (*(char *const *) a, *(char *const *) b);
}

static void
hash_str (ib_sha256_t *h, const char *s)
{
  ib_sha256_update (h, s, strlen (s) + 1); /* with the NUL: no ambiguity */
}

static int
hash_entry (int dirfd, const char *name, const char *shown, const char *rel, bool follow,
            ib_sha256_t *h, size_t *entries, ib_error_t *err)
{
  struct stat sb;
  if (fstatat (dirfd, name, &sb, follow ? 0 : AT_SYMLINK_NOFOLLOW) < 0)
    return ib_error_sys (err, errno, "%s", shown);
  if (entries)
    (*entries)++;
  char head[64];
  char type = S_ISREG (sb.st_mode) ? 'f' : S_ISDIR (sb.st_mode) ? 'd' : S_ISLNK (sb.st_mode) ? 'l' : 'o';
  snprintf (head, sizeof head, "%c %o", type, (unsigned) (sb.st_mode & 07777));
  hash_str (h, rel);
  hash_str (h, head);
  if (S_ISLNK (sb.st_mode))
    {
      char target[4096];
      ssize_t n = readlinkat (dirfd, name, target, sizeof target - 1);
      if (n < 0)
        return ib_error_sys (err, errno, "%s", shown);
      target[n] = '\0';
      hash_str (h, target);
      return 0;
    }
  if (S_ISREG (sb.st_mode))
    {
      cleanup_close int fd = openat (dirfd, name, O_RDONLY | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW));
      if (fd < 0)
        return ib_error_sys (err, errno, "%s", shown);
      char sz[32];
      snprintf (sz, sizeof sz, "%lld", (long long) sb.st_size);
      hash_str (h, sz);
      char buf[65536];
      for (;;)
        {
          ssize_t n = read (fd, buf, sizeof buf);
          if (n < 0 && errno == EINTR)
            continue;
          if (n < 0)
            return ib_error_sys (err, errno, "read %s", shown);
          if (n == 0)
            break;
          ib_sha256_update (h, buf, (size_t) n);
        }
      return 0;
    }
  if (!S_ISDIR (sb.st_mode))
    return 0;
  cleanup_close int fd = openat (dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW));
  if (fd < 0)
    return ib_error_sys (err, errno, "%s", shown);
  int dfd = dup (fd);
  if (dfd < 0)
    return ib_error_sys (err, errno, "%s", shown);
  DIR *d = fdopendir (dfd);
  if (d == NULL)
    {
      close (dfd);
      return ib_error_sys (err, errno, "%s", shown);
    }
  char **names = NULL;
  size_t n = 0;
  struct dirent *de;
  while ((de = readdir (d)) != NULL)
    {
      if (strcmp (de->d_name, ".") == 0 || strcmp (de->d_name, "..") == 0)
        continue;
      names = xrealloc (names, (n + 1) * sizeof (char *));
      names[n++] = xstrdup (de->d_name);
    }
  closedir (d);
  if (n)
    qsort (names, n, sizeof (char *), cmp_str);
  int ret = 0;
  for (size_t i = 0; i < n; i++)
    {
      if (ret == 0)
        {
          cleanup_free char *crel = *rel ? xasprintf ("%s/%s", rel, names[i]) : xstrdup (names[i]);
          cleanup_free char *cshown = xasprintf ("%s/%s", shown, names[i]);
          ret = hash_entry (fd, names[i], cshown, crel, false, h, entries, err);
        }
      free (names[i]);
    }
  free (names);
  return ret;
}

int
ib_cache_hash_path (const char *path, ib_sha256_t *h, size_t *entries, ib_error_t *err)
{
  return hash_entry (AT_FDCWD, path, path, "", true, h, entries, err);
}

void
ib_cache_key (const char *parent, const char *text, char out[IB_DIGEST_LEN])
{
  ib_sha256_t *h = ib_sha256_new ();
  hash_str (h, IB_CACHE_VERSION);
  hash_str (h, parent ? parent : "");
  hash_str (h, text ? text : "");
  ib_sha256_final (h, out); /* frees h */
}

static char *
record_path (ib_store_t *store, const char *key)
{
  return xasprintf ("%s/cache/steps/%s.json", store->root, ib_digest_hex (key));
}

int
ib_cache_get (ib_store_t *store, const char *key, json_t **config, ib_descriptor_t **layers,
              size_t *n_layers)
{
  *config = NULL;
  *layers = NULL;
  *n_layers = 0;
  cleanup_free char *path = record_path (store, key);
  cleanup_free char *data = NULL;
  size_t len = 0;
  ib_error_t e = NULL;
  if (ib_read_file (path, &data, &len, &e) < 0)
    {
      ib_error_free (&e);
      return 0;
    }
  json_t *rec = json_loadb (data, len, 0, NULL);
  json_t *cfg = json_object_get (rec, "config");
  json_t *ls = json_object_get (rec, "layers");
  if (!json_is_object (cfg) || !json_is_array (ls)
      || json_integer_value (json_object_get (rec, "v")) != 1)
    {
      ib_warn ("build cache: ignoring the malformed record %s", path);
      json_decref (rec);
      return 0;
    }
  size_t n = json_array_size (ls);
  ib_descriptor_t *v = xmalloc ((n + 1) * sizeof (ib_descriptor_t));
  size_t i;
  json_t *l;
  json_array_foreach (ls, i, l)
  {
    const char *mt = json_string_value (json_object_get (l, "mediaType"));
    const char *dg = json_string_value (json_object_get (l, "digest"));
    json_t *sz = json_object_get (l, "size");
    if (mt == NULL || dg == NULL || !ib_digest_valid (dg) || !json_is_integer (sz)
        || !ib_store_has_blob (store, dg))
      {
        for (size_t k = 0; k < i; k++)
          free (v[k].media_type);
        free (v);
        json_decref (rec);
        return 0;
      }
    v[i].media_type = xstrdup (mt);
    snprintf (v[i].digest, IB_DIGEST_LEN, "%s", dg);
    v[i].size = json_integer_value (sz);
  }
  *config = json_incref (cfg);
  *layers = v;
  *n_layers = n;
  json_decref (rec);
  return 1;
}

int
ib_cache_put (ib_store_t *store, const char *key, json_t *config, const ib_descriptor_t *layers,
              size_t n_layers, ib_error_t *err)
{
  cleanup_free char *dir = xasprintf ("%s/cache/steps", store->root);
  if (ib_mkdir_p (dir, 0700, err) < 0)
    return -1;
  json_t *ls = json_array ();
  for (size_t i = 0; i < n_layers; i++)
    json_array_append_new (ls, json_pack ("{s:s, s:s, s:I}", "mediaType", layers[i].media_type,
                                          "digest", layers[i].digest, "size",
                                          (json_int_t) layers[i].size));
  json_t *rec = json_pack ("{s:i, s:O, s:o}", "v", 1, "config", config, "layers", ls);
  cleanup_free char *text = json_dumps (rec, JSON_COMPACT | JSON_SORT_KEYS);
  json_decref (rec);
  cleanup_free char *path = record_path (store, key);
  if (ib_write_file_atomic (path, text, strlen (text), 0644, err) < 0)
    return ib_error_prefix (err, "build cache");
  return 0;
}
