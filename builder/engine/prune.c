#include "builder/engine/prune.h"
#include "common/util.h"
#include "oci/digest.h"
#include "oci/manifest.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A set of strings (digests, chain ids): a sorted vector after seal. */
typedef struct strset
{
  char **v;
  size_t n;
} strset_t;

static void
set_add (strset_t *s, const char *x)
{
  s->v = xrealloc (s->v, (s->n + 1) * sizeof (char *));
  s->v[s->n++] = xstrdup (x);
}

static int
cmp_str (const void *a, const void *b)
{
  return strcmp (*(char *const *) a, *(char *const *) b);
}

static void
set_seal (strset_t *s)
{
  if (s->n)
    qsort (s->v, s->n, sizeof (char *), cmp_str);
}

static bool
set_has (const strset_t *s, const char *x)
{
  return s->n && bsearch (&x, s->v, s->n, sizeof (char *), cmp_str) != NULL;
}

static void
set_free (strset_t *s)
{
  for (size_t i = 0; i < s->n; i++)
    free (s->v[i]);
  free (s->v);
}

static __thread int64_t du_total;

static int
du_cb (const char *p, const struct stat *sb, int flag, struct FTW *f)
{
  (void) p, (void) flag, (void) f;
  du_total += (int64_t) sb->st_blocks * 512;
  return 0;
}

/* Disk space of a file or tree (what removing it gives back, hard links
 * aside). */
static int64_t
disk_usage (const char *path)
{
  du_total = 0;
  nftw (path, du_cb, 32, FTW_PHYS);
  return du_total;
}

/* Remove a tree so that its name goes first: rename it into tmp/, then
 * delete it there. */
static int
remove_tree (ib_store_t *store, const char *path, ib_error_t *err)
{
  cleanup_free char *dir = NULL;
  if (ib_store_tmp_dir (store, "prune", &dir, err) < 0)
    return -1;
  cleanup_free char *dst = ib_path_join (dir, "x");
  if (rename (path, dst) < 0)
    {
      int e = errno;
      rmdir (dir);
      return ib_error_sys (err, e, "remove %s", path);
    }
  return ib_rm_rf (dir, err);
}

/* Names in directory `dir` (NULL-terminated, caller frees); an absent
 * directory is empty. */
static int
list_dir (const char *dir, char ***out, ib_error_t *err)
{
  *out = NULL;
  DIR *d = opendir (dir);
  if (d == NULL)
    {
      if (errno == ENOENT)
        return 0;
      return ib_error_sys (err, errno, "read %s", dir);
    }
  struct dirent *de;
  while ((de = readdir (d)) != NULL)
    if (strcmp (de->d_name, ".") != 0 && strcmp (de->d_name, "..") != 0)
      ib_strv_push (out, de->d_name);
  closedir (d);
  return 0;
}

/* Mark a manifest or index blob and what it names as live; with
 * `chains`, add the chain id of every layer prefix of an image. */
static int
mark_manifest (ib_store_t *store, const char *digest, strset_t *live, strset_t *chains, int depth,
               ib_error_t *err)
{
  set_add (live, digest);
  if (depth > 8 || !ib_store_has_blob (store, digest))
    return 0; /* a tag whose blob is missing holds nothing else */
  cleanup_free char *data = NULL;
  size_t len = 0;
  if (ib_store_read_blob (store, digest, &data, &len, err) < 0)
    return -1;
  json_t *doc = json_loadb (data, len, 0, NULL);
  if (doc == NULL)
    return 0;
  size_t i;
  json_t *e;
  json_array_foreach (json_object_get (doc, "manifests"), i, e)
  {
    const char *d = json_string_value (json_object_get (e, "digest"));
    if (d && ib_digest_valid (d) && mark_manifest (store, d, live, chains, depth + 1, err) < 0)
      {
        json_decref (doc);
        return -1;
      }
  }
  const char *cd = json_string_value (json_object_get (json_object_get (doc, "config"), "digest"));
  if (cd && ib_digest_valid (cd))
    {
      set_add (live, cd);
      /* chain ids of the image's layer prefixes: the snapshots it uses */
      cleanup_free char *cdata = NULL;
      size_t clen = 0;
      json_t *config = NULL;
      cleanup_strv char **diff_ids = NULL;
      if (ib_store_has_blob (store, cd) && ib_store_read_blob (store, cd, &cdata, &clen, NULL) == 0
          && ib_config_parse (cdata, clen, &config, NULL) == 0
          && ib_config_diff_ids (config, &diff_ids, NULL) == 0)
        for (size_t k = 0; diff_ids && diff_ids[k]; k++)
          {
            char chain[IB_DIGEST_LEN];
            ib_chain_id (diff_ids, k, chain);
            set_add (chains, ib_digest_hex (chain));
          }
      json_decref (config);
    }
  json_array_foreach (json_object_get (doc, "layers"), i, e)
  {
    const char *d = json_string_value (json_object_get (e, "digest"));
    if (d && ib_digest_valid (d))
      set_add (live, d);
  }
  json_decref (doc);
  return 0;
}

int
ib_prune (ib_store_t *store, const ib_prune_opts_t *opts, ib_prune_result_t *res, ib_error_t *err)
{
  memset (res, 0, sizeof *res);
  bool cache = opts->cache || opts->all;
  int ret = -1;
  strset_t live = { 0 }, chains = { 0 };
  cleanup_strv char **names = NULL;
  /* declared before the first goto: cleanup must never see them uninitialised */
  cleanup_free char *snaps = ib_store_path (store, IB_STORE_SNAPSHOTS, NULL);
  cleanup_free char *blobs = ib_store_path (store, IB_STORE_BLOBS, NULL);
  cleanup_free char *steps = ib_store_path (store, IB_STORE_CACHE_STEPS, NULL);
  cleanup_free char *mounts = ib_store_path (store, IB_STORE_CACHE_MOUNTS, NULL);

  /* 1. tmp/: nothing else runs (we hold the gc lock), so all of it is
   * left over from processes that died. */
  cleanup_free char *tmp = ib_store_path (store, IB_STORE_TMP, NULL);
  if (list_dir (tmp, &names, err) < 0)
    goto out;
  for (char **n = names; n && *n; n++)
    {
      cleanup_free char *p = ib_path_join (tmp, *n);
      int64_t sz = disk_usage (p);
      if (ib_rm_rf (p, err) < 0)
        goto out;
      res->tmp_entries++;
      res->tmp_bytes += sz;
    }
  ib_strv_free (names);
  names = NULL;

  /* 2. the build cache */
  if (list_dir (steps, &names, err) < 0)
    goto out;
  for (char **n = names; n && *n; n++)
    {
      cleanup_free char *p = ib_path_join (steps, *n);
      if (cache)
        {
          int64_t sz = disk_usage (p);
          if (unlink (p) < 0 && errno != ENOENT)
            {
              ib_error_sys (err, errno, "remove %s", p);
              goto out;
            }
          res->cache_records++;
          res->cache_bytes += sz;
          continue;
        }
      /* kept: the layers it names stay */
      cleanup_free char *data = NULL;
      size_t len = 0;
      if (ib_read_file (p, &data, &len, NULL) < 0)
        {
          continue;
        }
      json_t *rec = json_loadb (data, len, 0, NULL);
      size_t i;
      json_t *l;
      /* the snapshots a build made from cached steps stay with the cache */
      cleanup_strv char **diff_ids = NULL;
      if (ib_config_diff_ids (json_object_get (rec, "config"), &diff_ids, NULL) == 0)
        for (size_t k = 0; diff_ids && diff_ids[k]; k++)
          {
            char chain[IB_DIGEST_LEN];
            ib_chain_id (diff_ids, k, chain);
            set_add (&chains, ib_digest_hex (chain));
          }
      json_array_foreach (json_object_get (rec, "layers"), i, l)
      {
        const char *d = json_string_value (json_object_get (l, "digest"));
        if (d && ib_digest_valid (d))
          set_add (&live, d);
      }
      json_decref (rec);
    }
  ib_strv_free (names);
  names = NULL;
  if (cache)
    {
      if (list_dir (mounts, &names, err) < 0)
        goto out;
      for (char **n = names; n && *n; n++)
        {
          cleanup_free char *p = ib_path_join (mounts, *n);
          struct stat sb;
          if (lstat (p, &sb) < 0)
            continue;
          int64_t sz = disk_usage (p);
          if (S_ISDIR (sb.st_mode))
            {
              if (remove_tree (store, p, err) < 0)
                goto out;
              res->cache_mounts++;
            }
          else if (unlink (p) < 0 && errno != ENOENT)
            {
              ib_error_sys (err, errno, "remove %s", p);
              goto out;
            }
          res->cache_bytes += sz;
        }
      ib_strv_free (names);
      names = NULL;
    }

  /* 3. what the tags hold */
  {
    json_t *ms = NULL;
    if (ib_store_list (store, &ms, err) < 0)
      goto out;
    size_t i;
    json_t *e;
    int r = 0;
    json_array_foreach (ms, i, e)
    {
      /* the manifest tagged; a pulled one's bytes as served and its index */
      json_t *ann = json_object_get (e, "annotations");
      const char *ds[] = { json_string_value (json_object_get (e, "digest")),
                           json_string_value (json_object_get (ann, IB_REGISTRY_DIGEST_ANNOTATION)),
                           json_string_value (json_object_get (ann, IB_REGISTRY_INDEX_ANNOTATION)) };
      for (size_t k = 0; k < 3 && r == 0; k++)
        if (ds[k] && ib_digest_valid (ds[k]))
          r = mark_manifest (store, ds[k], &live, &chains, 0, err);
      if (r < 0)
        break;
    }
    json_decref (ms);
    if (r < 0)
      goto out;
  }
  set_seal (&live);
  set_seal (&chains);

  /* 4. snapshots */
  if (list_dir (snaps, &names, err) < 0)
    goto out;
  for (char **n = names; n && *n; n++)
    {
      /* a layered snapshot (ib_rootfs_freeze) is <chain>.ovl; the
       * snapshots under it are its chain's prefixes, kept with it */
      size_t nl = strlen (*n);
      cleanup_free char *chain = nl > 4 && strcmp (*n + nl - 4, ".ovl") == 0
                                     ? xstrndup (*n, nl - 4) : xstrdup (*n);
      if (!opts->all && set_has (&chains, chain))
        continue;
      cleanup_free char *p = ib_path_join (snaps, *n);
      int64_t sz = disk_usage (p);
      if (remove_tree (store, p, err) < 0)
        goto out;
      res->snapshots++;
      res->snapshot_bytes += sz;
    }
  ib_strv_free (names);
  names = NULL;

  /* 5. blobs nothing names */
  if (list_dir (blobs, &names, err) < 0)
    goto out;
  for (char **n = names; n && *n; n++)
    {
      cleanup_free char *d = xasprintf ("sha256:%s", *n);
      if (set_has (&live, d))
        continue;
      cleanup_free char *p = ib_path_join (blobs, *n);
      int64_t sz = disk_usage (p);
      if (unlink (p) < 0 && errno != ENOENT)
        {
          ib_error_sys (err, errno, "remove %s", p);
          goto out;
        }
      res->blobs++;
      res->blob_bytes += sz;
    }
  ret = 0;
out:
  set_free (&live);
  set_free (&chains);
  if (ret < 0)
    ib_error_prefix (err, "prune %s", store->root);
  return ret;
}
