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
static __thread bool du_share;

static int
du_cb (const char *p, const struct stat *sb, int flag, struct FTW *f)
{
  (void) p, (void) flag, (void) f;
  int64_t b = (int64_t) sb->st_blocks * 512;
  if (du_share && !S_ISDIR (sb->st_mode) && sb->st_nlink > 1)
    b /= (int64_t) sb->st_nlink;
  du_total += b;
  return 0;
}

/* Disk space of a file or tree (what removing it gives back, hard links
 * aside). */
static int64_t
disk_usage (const char *path)
{
  du_total = 0;
  du_share = false;
  nftw (path, du_cb, 32, FTW_PHYS);
  return du_total;
}

/* The same with a file of N hard links counted as 1/N: snapshots share
 * files, and the sum over all of them is then what the store holds (as
 * du counts it), each tree charged its share. */
static int64_t
disk_share (const char *path)
{
  du_total = 0;
  du_share = true;
  nftw (path, du_cb, 32, FTW_PHYS);
  return du_total;
}

/* The chain id a snapshot entry is of: a layered snapshot
 * (ib_rootfs_freeze) is <chain>.ovl, a plain one <chain> (caller frees). */
static char *
snapshot_chain (const char *name)
{
  size_t nl = strlen (name);
  return nl > 4 && strcmp (name + nl - 4, ".ovl") == 0 ? xstrndup (name, nl - 4) : xstrdup (name);
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

/* The names in area `area`'s directory `dir` that imgbuild makes there
 * (ib_store_name_ours): all prune may remove.  Any other (a file of
 * another program, in a directory given as the store) is left where it
 * is; with `say`, said at debug level. */
static int
list_area (const char *dir, ib_store_area_t area, bool say, char ***out, ib_error_t *err)
{
  cleanup_strv char **all = NULL;
  *out = NULL;
  if (list_dir (dir, &all, err) < 0)
    return -1;
  for (char **n = all; n && *n; n++)
    if (ib_store_name_ours (area, *n))
      ib_strv_push (out, *n);
    else if (say)
      ib_debug ("prune: %s/%s: not a name imgbuild makes: left as it is", dir, *n);
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

/* A step record of the build cache, as prune sees it. */
typedef struct prune_rec
{
  char *path;
  int64_t used_ns; /* its mtime: its last use (ib_cache_get sets it on a hit) */
  int64_t bytes;
  strset_t blobs, chains; /* the layers it names; its layer prefixes' chain ids */
  bool drop;
} prune_rec_t;

static void
recs_free (prune_rec_t *r, size_t n)
{
  for (size_t i = 0; i < n; i++)
    {
      free (r[i].path);
      set_free (&r[i].blobs);
      set_free (&r[i].chains);
    }
  free (r);
}

/* Every record in `steps` (one that cannot be read names nothing); with
 * `names_too` false only its path, time and size (all go). */
static int
load_records (const char *steps, bool names_too, prune_rec_t **out, size_t *n_out,
              ib_error_t *err)
{
  cleanup_strv char **names = NULL;
  *out = NULL;
  *n_out = 0;
  if (list_area (steps, IB_STORE_CACHE_STEPS, true, &names, err) < 0)
    return -1;
  size_t n = ib_strv_len (names);
  prune_rec_t *recs = xmalloc ((n + 1) * sizeof *recs);
  for (size_t k = 0; k < n; k++)
    {
      prune_rec_t *r = &recs[k];
      r->path = ib_path_join (steps, names[k]);
      struct stat sb;
      if (lstat (r->path, &sb) == 0)
        {
          r->used_ns = (int64_t) sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
          r->bytes = (int64_t) sb.st_blocks * 512;
        }
      cleanup_free char *data = NULL;
      size_t len = 0;
      if (!names_too || ib_read_file (r->path, &data, &len, NULL) < 0)
        continue;
      json_t *rec = json_loadb (data, len, 0, NULL);
      cleanup_strv char **diff_ids = NULL;
      if (ib_config_diff_ids (json_object_get (rec, "config"), &diff_ids, NULL) == 0)
        for (size_t i = 0; diff_ids && diff_ids[i]; i++)
          {
            char chain[IB_DIGEST_LEN];
            ib_chain_id (diff_ids, i, chain);
            set_add (&r->chains, ib_digest_hex (chain));
          }
      size_t i;
      json_t *l;
      json_array_foreach (json_object_get (rec, "layers"), i, l)
      {
        const char *d = json_string_value (json_object_get (l, "digest"));
        if (d && ib_digest_valid (d))
          set_add (&r->blobs, d);
      }
      json_decref (rec);
      set_seal (&r->blobs);
      set_seal (&r->chains);
    }
  *out = recs;
  *n_out = n;
  return 0;
}

/* What the store would hold with the records used at `t` or before
 * dropped: `fixed` (what tags and cache mounts hold), the items (blobs,
 * snapshots) some record used after `t` holds, the records used after t. */
typedef struct held
{
  int64_t used_ns, bytes;
} held_t;

static int
cmp_held (const void *a, const void *b)
{
  const held_t *x = a, *y = b;
  return x->used_ns < y->used_ns ? -1 : x->used_ns > y->used_ns;
}

/* The last use of an item named `name` in the records' sets `which`
 * (0: blobs, 1: chains); INT64_MIN when no record names it. */
static int64_t
last_use (const prune_rec_t *recs, size_t n, int which, const char *name)
{
  int64_t t = INT64_MIN;
  for (size_t i = 0; i < n; i++)
    if (set_has (which ? &recs[i].chains : &recs[i].blobs, name) && recs[i].used_ns > t)
      t = recs[i].used_ns;
  return t;
}

/* (an item no record names is removed anyway: not counted) */
static void
add_item (held_t **items, size_t *n, int64_t used_ns, int64_t bytes)
{
  if (used_ns == INT64_MIN)
    return;
  *items = xrealloc (*items, (*n + 1) * sizeof **items);
  (*items)[(*n)++] = (held_t){ .used_ns = used_ns, .bytes = bytes };
}

/* --keep-storage: mark the least recently used records to drop, oldest
 * first and all of one last-use time together, until what stays fits in
 * opts->keep_storage bytes (all of them when the tags alone hold more).
 * `live` and `chains` hold what the tags name.  *kept: the bytes that
 * stay. */
static int
choose_drops (prune_rec_t *recs, size_t n, const strset_t *live, const strset_t *chains,
              const char *blobs, const char *snaps, const char *mounts, int64_t budget,
              int64_t *kept, ib_error_t *err)
{
  int64_t fixed = disk_share (mounts);
  held_t *items = NULL;
  size_t n_items = 0;
  cleanup_strv char **names = NULL;
  if (list_area (blobs, IB_STORE_BLOBS, false, &names, err) < 0)
    return -1;
  for (char **nm = names; nm && *nm; nm++)
    {
      cleanup_free char *d = xasprintf ("sha256:%s", *nm);
      cleanup_free char *p = ib_path_join (blobs, *nm);
      int64_t sz = disk_share (p);
      if (set_has (live, d))
        fixed += sz;
      else
        add_item (&items, &n_items, last_use (recs, n, 0, d), sz);
    }
  ib_strv_free (names);
  names = NULL;
  if (list_area (snaps, IB_STORE_SNAPSHOTS, false, &names, err) < 0)
    {
      free (items);
      return -1;
    }
  for (char **nm = names; nm && *nm; nm++)
    {
      cleanup_free char *chain = snapshot_chain (*nm);
      cleanup_free char *p = ib_path_join (snaps, *nm);
      int64_t sz = disk_share (p);
      if (set_has (chains, chain))
        fixed += sz;
      else
        add_item (&items, &n_items, last_use (recs, n, 1, chain), sz);
    }
  for (size_t i = 0; i < n; i++)
    add_item (&items, &n_items, recs[i].used_ns, recs[i].bytes);
  if (n_items)
    qsort (items, n_items, sizeof *items, cmp_held);
  /* drop nothing, then the items of each last-use time in turn */
  int64_t total = fixed;
  for (size_t i = 0; i < n_items; i++)
    total += items[i].bytes;
  int64_t cutoff = INT64_MIN;
  size_t i = 0;
  while (total > budget && i < n_items)
    {
      cutoff = items[i].used_ns;
      for (; i < n_items && items[i].used_ns == cutoff; i++)
        total -= items[i].bytes;
    }
  free (items);
  for (size_t k = 0; k < n; k++)
    recs[k].drop = recs[k].used_ns <= cutoff;
  *kept = total;
  return 0;
}

int
ib_prune (ib_store_t *store, const ib_prune_opts_t *opts, ib_prune_result_t *res, ib_error_t *err)
{
  memset (res, 0, sizeof *res);
  bool cache = opts->cache || opts->all;
  int ret = -1;
  strset_t live = { 0 }, chains = { 0 };
  prune_rec_t *recs = NULL;
  size_t n_recs = 0;
  cleanup_strv char **names = NULL;
  /* declared before the first goto: cleanup must never see them uninitialised */
  cleanup_free char *snaps = ib_store_path (store, IB_STORE_SNAPSHOTS, NULL);
  cleanup_free char *blobs = ib_store_path (store, IB_STORE_BLOBS, NULL);
  cleanup_free char *steps = ib_store_path (store, IB_STORE_CACHE_STEPS, NULL);
  cleanup_free char *mounts = ib_store_path (store, IB_STORE_CACHE_MOUNTS, NULL);

  /* 1. tmp/: nothing else runs (we hold the gc lock), so all of it is
   * left over from processes that died. */
  cleanup_free char *tmp = ib_store_path (store, IB_STORE_TMP, NULL);
  if (list_area (tmp, IB_STORE_TMP, true, &names, err) < 0)
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

  /* 2. what the tags hold */
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

  /* 3. the build cache: every record with --cache, the least recently
   * used ones over --keep-storage; those kept hold their layers and
   * snapshots (a build's snapshots made from cached steps stay with it) */
  if (load_records (steps, !cache, &recs, &n_recs, err) < 0)
    goto out;
  /* (a budget past what int64_t holds is no budget at all) */
  if (opts->keep_storage_set && !cache
      && choose_drops (recs, n_recs, &live, &chains, blobs, snaps, mounts,
                       opts->keep_storage > INT64_MAX ? INT64_MAX
                                                      : (int64_t) opts->keep_storage,
                       &res->kept_bytes, err) < 0)
    goto out;
  for (size_t k = 0; k < n_recs; k++)
    {
      prune_rec_t *r = &recs[k];
      if (cache || r->drop)
        {
          if (unlink (r->path) < 0 && errno != ENOENT)
            {
              ib_error_sys (err, errno, "remove %s", r->path);
              goto out;
            }
          res->cache_records++;
          res->cache_bytes += r->bytes;
          continue;
        }
      for (size_t i = 0; i < r->blobs.n; i++)
        set_add (&live, r->blobs.v[i]);
      for (size_t i = 0; i < r->chains.n; i++)
        set_add (&chains, r->chains.v[i]);
    }
  set_seal (&live);
  set_seal (&chains);
  if (cache)
    {
      if (list_area (mounts, IB_STORE_CACHE_MOUNTS, true, &names, err) < 0)
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

  /* 4. snapshots */
  if (list_area (snaps, IB_STORE_SNAPSHOTS, true, &names, err) < 0)
    goto out;
  for (char **n = names; n && *n; n++)
    {
      /* (the snapshots under a layered one are its chain's prefixes,
       * kept with it) */
      cleanup_free char *chain = snapshot_chain (*n);
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
  if (list_area (blobs, IB_STORE_BLOBS, true, &names, err) < 0)
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
  recs_free (recs, n_recs);
  set_free (&live);
  set_free (&chains);
  if (ret < 0)
    ib_error_prefix (err, "prune %s", store->root);
  return ret;
}
