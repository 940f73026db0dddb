/* builder/engine/cache_io.c — `build --cache-to` / `--cache-from`: the step records
 * a build used, with their layer blobs, as one OCI artifact in an image
 * layout directory or a registry (the format is in cache_io.h). */
#include "builder/engine/cache_io.h"
#include "builder/engine/cache.h"
#include "common/util.h"
#include "oci/digest.h"
#include "oci/manifest.h"
#include "oci/ref.h"
#include "oci/registry.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define REF_NAME_ANNOTATION "org.opencontainers.image.ref.name"
#define LAYOUT_NAME "cache" /* the manifest's name in a layout's index.json */

/* ------------------------------------------------------------------ */
/* specs */

typedef enum
{
  SPEC_LOCAL,
  SPEC_REGISTRY
} spec_type_t;

typedef struct cache_spec
{
  spec_type_t type;
  char *path; /* type=local: dest= (export) or src= (import) */
  char *ref;  /* type=registry: ref= */
  bool ignore_error; /* ignore-error=true: a failure is a warning (BuildKit's key) */
} cache_spec_t;

static void
spec_clear (cache_spec_t *s)
{
  free (s->path);
  free (s->ref);
  s->path = s->ref = NULL;
}

/* Parse "type=local,dest=DIR" (export) / "type=local,src=DIR" (import) /
 * "type=registry,ref=REF", with BuildKit's mode=min|max accepted (and
 * ignored: everything the build used is exported), as are
 * oci-mediatypes= and image-manifest= (we always write an OCI image
 * manifest).  Errors are EINVAL and name the option and the spec. */
static int
parse_spec (const char *spec, bool export, cache_spec_t *out, ib_error_t *err)
{
  const char *opt = export ? "--cache-to" : "--cache-from";
  const char *dir_key = export ? "dest" : "src";
  memset (out, 0, sizeof *out);
  cleanup_free char *type = NULL;
  cleanup_free char *unknown = NULL;
  cleanup_free char *copy = xstrdup (spec);
  char *save = NULL;
  for (char *item = strtok_r (copy, ",", &save); item; item = strtok_r (NULL, ",", &save))
    {
      char *eq = strchr (item, '=');
      if (eq == NULL)
        {
          spec_clear (out);
          return ib_error_set (err, EINVAL, "%s %s: \"%s\" is not KEY=VALUE", opt, spec, item);
        }
      *eq = '\0';
      const char *v = eq + 1;
      char **slot = NULL;
      if (strcmp (item, "type") == 0)
        slot = &type;
      else if (strcmp (item, dir_key) == 0)
        slot = &out->path;
      else if (strcmp (item, "ref") == 0)
        slot = &out->ref;
      else if (strcmp (item, "mode") == 0)
        {
          if (strcmp (v, "min") != 0 && strcmp (v, "max") != 0)
            {
              spec_clear (out);
              return ib_error_set (err, EINVAL, "%s %s: mode=%s: expected min or max", opt, spec,
                                   v);
            }
        }
      else if (strcmp (item, "ignore-error") == 0)
        {
          if (strcmp (v, "true") != 0 && strcmp (v, "false") != 0)
            {
              spec_clear (out);
              return ib_error_set (err, EINVAL, "%s %s: ignore-error=%s: expected true or false",
                                   opt, spec, v);
            }
          out->ignore_error = strcmp (v, "true") == 0;
        }
      else if (strcmp (item, "oci-mediatypes") != 0 && strcmp (item, "image-manifest") != 0
               && unknown == NULL)
        unknown = xstrdup (item);
      if (slot)
        {
          free (*slot);
          *slot = *v ? xstrdup (v) : NULL;
        }
    }
  int ret = 0;
  if (type == NULL)
    ret = ib_error_set (err, EINVAL, "%s %s: no type= (expected type=local or type=registry)", opt,
                        spec);
  else if (strcmp (type, "local") == 0)
    {
      out->type = SPEC_LOCAL;
      if (out->path == NULL)
        ret = ib_error_set (err, EINVAL, "%s %s: type=local needs %s=DIR", opt, spec, dir_key);
    }
  else if (strcmp (type, "registry") == 0)
    {
      out->type = SPEC_REGISTRY;
      if (out->ref == NULL)
        ret = ib_error_set (err, EINVAL, "%s %s: type=registry needs ref=REF", opt, spec);
    }
  else
    ret = ib_error_set (err, EINVAL, "%s %s: unknown cache type \"%s\" (expected local or registry)",
                        opt, spec, type);
  if (ret == 0 && unknown)
    ret = ib_error_set (err, EINVAL, "%s %s: unknown option \"%s\"", opt, spec, unknown);
  if (ret < 0)
    spec_clear (out);
  return ret;
}

/* ------------------------------------------------------------------ */
/* helpers */

static int
cmp_str (const void *a, const void *b)
{
  return strcmp (*(char *const *) a, *(char *const *) b);
}

/* 64 lowercase hex digits: a record's name in the config and on disk. */
static bool
valid_hex (const char *s)
{
  if (strlen (s) != 64)
    return false;
  for (const char *p = s; *p; p++)
    if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
      return false;
  return true;
}

/* A record as cache.c writes it: {"v":1,"config":{..},"layers":[{mediaType,
 * digest,size}..]} with valid digests. */
static bool
record_valid (json_t *rec)
{
  json_t *ls = json_object_get (rec, "layers");
  if (!json_is_object (rec) || json_integer_value (json_object_get (rec, "v")) != 1
      || !json_is_object (json_object_get (rec, "config")) || !json_is_array (ls))
    return false;
  size_t i;
  json_t *l;
  json_array_foreach (ls, i, l)
  {
    const char *dg = json_string_value (json_object_get (l, "digest"));
    if (!json_is_string (json_object_get (l, "mediaType")) || dg == NULL || !ib_digest_valid (dg)
        || !json_is_integer (json_object_get (l, "size")))
      return false;
  }
  return true;
}

static char *
record_path (ib_store_t *store, const char *hex)
{
  return xasprintf ("%s/cache/steps/%s.json", store->root, hex);
}

static char *
dump (json_t *j)
{
  return json_dumps (j, JSON_COMPACT | JSON_SORT_KEYS);
}

/* ------------------------------------------------------------------ */
/* export */

typedef struct export_set
{
  json_t *records; /* hex -> record */
  json_t *layers;  /* descriptors of the blobs the records name, first seen first */
  json_t *seen;    /* digest -> true */
  int64_t bytes;   /* sum of the layers' sizes */
} export_set_t;

/* Add the record of `key` (skipped when there is none, it is malformed or
 * names a blob the store no longer holds). */
static void
collect_record (ib_store_t *store, const char *key, export_set_t *set)
{
  if (!ib_digest_valid (key))
    return;
  const char *hex = ib_digest_hex (key);
  if (json_object_get (set->records, hex))
    return;
  cleanup_free char *path = record_path (store, hex);
  cleanup_free char *data = NULL;
  size_t len = 0;
  ib_error_t e = NULL;
  if (ib_read_file (path, &data, &len, &e) < 0)
    {
      if (e->status != ENOENT)
        ib_warn ("cache export: skipping the record %s: %s", path, e->msg);
      ib_error_free (&e);
      return;
    }
  json_t *rec = json_loadb (data, len, 0, NULL);
  if (!record_valid (rec))
    {
      ib_warn ("cache export: skipping the malformed record %s", path);
      json_decref (rec);
      return;
    }
  json_t *ls = json_object_get (rec, "layers");
  size_t i;
  json_t *l;
  json_array_foreach (ls, i, l)
  {
    const char *dg = json_string_value (json_object_get (l, "digest"));
    if (!ib_store_has_blob (store, dg))
      {
        ib_debug ("cache export: skipping the record %s: blob %s is gone", path, dg);
        json_decref (rec);
        return;
      }
  }
  json_array_foreach (ls, i, l)
  {
    const char *dg = json_string_value (json_object_get (l, "digest"));
    if (json_object_get (set->seen, dg))
      continue;
    json_object_set_new (set->seen, dg, json_true ());
    json_array_append_new (set->layers,
                           json_pack ("{s:O, s:O, s:O}", "mediaType",
                                      json_object_get (l, "mediaType"), "digest",
                                      json_object_get (l, "digest"), "size",
                                      json_object_get (l, "size")));
    set->bytes += json_integer_value (json_object_get (l, "size"));
  }
  json_object_set_new (set->records, hex, rec);
}

/* Write `len` bytes to a new file `path` and fsync it. */
static int
write_new_file (const char *path, const void *data, size_t len, ib_error_t *err)
{
  cleanup_close int fd = open (path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    return ib_error_sys (err, errno, "create %s", path);
  if (ib_write_all (fd, data, len, path, err) < 0)
    return -1;
  if (fsync (fd) < 0)
    return ib_error_sys (err, errno, "fsync %s", path);
  return 0;
}

/* Is the existing directory `dir` one we may replace: empty, or a cache
 * exported earlier (its index.json lists a manifest of artifactType
 * IB_CACHE_ARTIFACT_TYPE), never some other directory a mistyped dest=
 * names? */
static bool
replaceable (const char *dir)
{
  cleanup_free char *ipath = ib_path_join (dir, "index.json");
  json_t *index = json_load_file (ipath, 0, NULL);
  bool ours = false;
  size_t i;
  json_t *d;
  json_array_foreach (json_object_get (index, "manifests"), i, d)
  {
    const char *at = json_string_value (json_object_get (d, "artifactType"));
    ours = ours || (at && strcmp (at, IB_CACHE_ARTIFACT_TYPE) == 0);
  }
  json_decref (index);
  if (ours)
    return true;
  return rmdir (dir) == 0 || errno == ENOENT; /* empty: removed, the rename recreates it */
}

/* Move the finished directory `tmp` to `dest`, replacing what is there. */
static int
replace_dir (const char *tmp, const char *dest, const char *parent, ib_error_t *err)
{
  struct stat st;
  if (lstat (dest, &st) == 0)
    {
      if (!S_ISDIR (st.st_mode))
        return ib_error_set (err, ENOTDIR, "%s exists and is not a directory", dest);
      if (!replaceable (dest))
        return ib_error_set (err, EEXIST,
                             "%s exists and is not a cache exported by imgbuild; refusing to replace it",
                             dest);
    }
  else if (errno != ENOENT)
    return ib_error_sys (err, errno, "%s", dest);
  if (rename (tmp, dest) == 0)
    return ib_fsync_dir (parent, err);
  if (errno != EEXIST && errno != ENOTEMPTY)
    return ib_error_sys (err, errno, "rename %s to %s", tmp, dest);
  /* an earlier cache is there: move it away, put the new one in place,
   * then remove the old one */
  cleanup_free char *old = xasprintf ("%s.old-XXXXXX", dest);
  if (mkdtemp (old) == NULL)
    return ib_error_sys (err, errno, "create a directory beside %s", dest);
  if (rename (dest, old) < 0)
    {
      int e = errno;
      rmdir (old);
      return ib_error_sys (err, e, "rename %s to %s", dest, old);
    }
  if (rename (tmp, dest) < 0)
    {
      int e = errno;
      if (rename (old, dest) < 0)
        ib_warn ("the previous cache %s is left at %s", dest, old);
      return ib_error_sys (err, e, "rename %s to %s", tmp, dest);
    }
  if (ib_fsync_dir (parent, err) < 0)
    return -1;
  ib_error_t e = NULL;
  if (ib_rm_rf (old, &e) < 0)
    {
      ib_warn ("remove the previous cache %s: %s", old, e->msg);
      ib_error_free (&e);
    }
  return 0;
}

/* The layout directory tmp/: oci-layout, blobs/sha256/..., index.json. */
static int
write_layout (ib_store_t *store, const char *tmp, json_t *layers, const char *config,
              const char *config_digest, const char *manifest, const char *manifest_digest,
              ib_error_t *err)
{
  cleanup_free char *blobs = ib_path_join (tmp, "blobs");
  cleanup_free char *blobdir = ib_path_join (tmp, "blobs/sha256");
  if (ib_mkdir_p (blobdir, 0755, err) < 0)
    return -1;
  size_t i;
  json_t *l;
  json_array_foreach (layers, i, l)
  {
    if (ib_store_export_blob (store, json_string_value (json_object_get (l, "digest")), blobdir, err)
        < 0)
      return -1;
  }
  cleanup_free char *cpath = ib_path_join (blobdir, ib_digest_hex (config_digest));
  cleanup_free char *mpath = ib_path_join (blobdir, ib_digest_hex (manifest_digest));
  if (write_new_file (cpath, config, strlen (config), err) < 0
      || write_new_file (mpath, manifest, strlen (manifest), err) < 0)
    return -1;

  static const char layout[] = "{\"imageLayoutVersion\":\"1.0.0\"}";
  json_t *index
      = json_pack ("{s:i, s:s, s:[{s:s, s:s, s:I, s:s, s:{s:s}}]}", "schemaVersion", 2,
                   "mediaType", IB_MT_OCI_INDEX, "manifests", "mediaType", IB_MT_OCI_MANIFEST,
                   "digest", manifest_digest, "size", (json_int_t) strlen (manifest),
                   "artifactType", IB_CACHE_ARTIFACT_TYPE, "annotations", REF_NAME_ANNOTATION,
                   LAYOUT_NAME);
  cleanup_free char *index_text = dump (index);
  json_decref (index);
  cleanup_free char *lpath = ib_path_join (tmp, "oci-layout");
  cleanup_free char *ipath = ib_path_join (tmp, "index.json");
  if (write_new_file (lpath, layout, strlen (layout), err) < 0
      || write_new_file (ipath, index_text, strlen (index_text), err) < 0)
    return -1;
  if (ib_fsync_dir (blobdir, err) < 0 || ib_fsync_dir (blobs, err) < 0
      || ib_fsync_dir (tmp, err) < 0)
    return -1;
  return 0;
}

static int
export_local (ib_store_t *store, const char *dir, json_t *layers, const char *config,
              const char *config_digest, const char *manifest, const char *manifest_digest,
              ib_error_t *err)
{
  cleanup_free char *dest = xstrdup (dir);
  for (size_t n = strlen (dest); n > 1 && dest[n - 1] == '/'; n--)
    dest[n - 1] = '\0';
  cleanup_free char *parent = xstrdup (dest);
  char *slash = strrchr (parent, '/');
  if (slash == NULL)
    {
      free (parent);
      parent = xstrdup (".");
    }
  else
    slash[slash == parent ? 1 : 0] = '\0';
  if (ib_mkdir_p (parent, 0755, err) < 0)
    return -1;
  cleanup_free char *tmp = xasprintf ("%s.tmp-XXXXXX", dest);
  if (mkdtemp (tmp) == NULL)
    return ib_error_sys (err, errno, "create a directory beside %s", dest);
  int ret = 0;
  if (chmod (tmp, 0755) < 0) /* mkdtemp makes it 0700 */
    ret = ib_error_sys (err, errno, "chmod %s", tmp);
  if (ret == 0)
    ret = write_layout (store, tmp, layers, config, config_digest, manifest, manifest_digest, err);
  if (ret == 0)
    ret = replace_dir (tmp, dest, parent, err);
  if (ret < 0)
    {
      ib_rm_rf (tmp, NULL);
      return -1;
    }
  return 0;
}

static int
export_registry (ib_store_t *store, const char *ref_string, json_t *layers, const char *config,
                 const char *manifest, ib_error_t *err)
{
  ib_ref_t ref;
  if (ib_ref_parse (ref_string, &ref, err) < 0)
    return -1;
  int ret = 0;
  ib_registry_t *r = NULL;
  if (ref.digest)
    ret = ib_error_set (err, EINVAL, "ref=%s: a cache is pushed under a tag, not a digest",
                        ref_string);
  if (ret == 0)
    ret = ib_registry_open_push (&ref, &r, err); /* registries.conf's location */
  size_t i;
  json_t *l;
  json_array_foreach (layers, i, l)
  {
    if (ret < 0)
      break;
    ret = ib_registry_push_blob (r, ref.repository,
                                 json_string_value (json_object_get (l, "digest")), store, err);
  }
  char cd[IB_DIGEST_LEN];
  if (ret == 0)
    ret = ib_store_put_blob (store, config, strlen (config), cd, err);
  if (ret == 0)
    ret = ib_registry_push_blob (r, ref.repository, cd, store, err);
  if (ret == 0)
    ret = ib_registry_put_manifest (r, ref.repository, ref.tag, manifest, strlen (manifest),
                                    IB_MT_OCI_MANIFEST, err);
  ib_registry_free (r);
  ib_ref_free (&ref);
  return ret;
}

int
ib_cache_export (ib_store_t *store, char *const *keys, const char *spec, ib_error_t *err)
{
  cache_spec_t sp;
  if (parse_spec (spec, true, &sp, err) < 0)
    return -1;

  /* the keys, sorted and without duplicates */
  cleanup_strv char **sorted = ib_strv_dup (keys);
  size_t n = ib_strv_len (sorted);
  if (n)
    qsort (sorted, n, sizeof (char *), cmp_str);
  export_set_t set = { .records = json_object (), .layers = json_array (), .seen = json_object () };
  for (size_t i = 0; i < n; i++)
    if (i == 0 || strcmp (sorted[i], sorted[i - 1]) != 0)
      collect_record (store, sorted[i], &set);

  json_t *cfg = json_pack ("{s:i, s:O}", "v", 1, "records", set.records);
  cleanup_free char *config = dump (cfg);
  json_decref (cfg);
  char config_digest[IB_DIGEST_LEN];
  ib_digest_buf (config, strlen (config), config_digest);
  json_t *m = json_pack ("{s:i, s:s, s:s, s:{s:s, s:s, s:I}, s:O}", "schemaVersion", 2,
                         "mediaType", IB_MT_OCI_MANIFEST, "artifactType", IB_CACHE_ARTIFACT_TYPE,
                         "config", "mediaType", IB_CACHE_CONFIG_TYPE, "digest", config_digest,
                         "size", (json_int_t) strlen (config), "layers", set.layers);
  cleanup_free char *manifest = dump (m);
  json_decref (m);
  char manifest_digest[IB_DIGEST_LEN];
  ib_digest_buf (manifest, strlen (manifest), manifest_digest);

  int ret;
  if (sp.type == SPEC_LOCAL)
    ret = export_local (store, sp.path, set.layers, config, config_digest, manifest,
                        manifest_digest, err);
  else
    ret = export_registry (store, sp.ref, set.layers, config, manifest, err);
  if (ret < 0 && sp.ignore_error && err)
    {
      ib_warn ("cache export to %s failed (ignore-error=true): %s", spec, (*err)->msg);
      ib_error_free (err);
      ret = 0;
    }
  else if (ret < 0)
    ib_error_prefix (err, "--cache-to %s", spec);
  else
    ib_info ("cache exported to %s: %zu records, %zu blobs (%.1f MB)", spec,
             json_object_size (set.records), json_array_size (set.layers), set.bytes / 1e6);
  json_decref (set.records);
  json_decref (set.layers);
  json_decref (set.seen);
  spec_clear (&sp);
  return ret;
}

/* ------------------------------------------------------------------ */
/* import */

/* Where an import reads from: a layout directory or a registry repository. */
typedef struct import_src
{
  ib_store_t *store;
  const char *dir;   /* type=local */
  ib_registry_t *r;  /* type=registry */
  const char *repo;
  json_t *fetched;   /* digest -> true (in the store) / false (not at the source) */
} import_src_t;

/* Read the blob `digest` (`size` bytes, or -1: not checked) whole,
 * verified. */
static int
src_read (import_src_t *s, const char *digest, int64_t size, char **data, size_t *len,
          ib_error_t *err)
{
  if (!ib_digest_valid (digest))
    return ib_error_set (err, EINVAL, "bad digest \"%s\"", digest);
  if (s->dir)
    {
      cleanup_free char *path = xasprintf ("%s/blobs/sha256/%s", s->dir, ib_digest_hex (digest));
      cleanup_free char *buf = NULL;
      if (ib_read_file (path, &buf, len, err) < 0)
        return -1;
      char got[IB_DIGEST_LEN];
      ib_digest_buf (buf, *len, got);
      if (strcmp (got, digest) != 0)
        return ib_error_set (err, EINVAL, "blob %s: digest mismatch (the bytes hash to %s)",
                             digest, got);
      *data = steal_pointer (&buf);
    }
  else if (ib_registry_fetch_blob (s->r, s->repo, digest, s->store, err) < 0
           || ib_store_read_blob (s->store, digest, data, len, err) < 0)
    return -1;
  if (size >= 0 && (int64_t) *len != size)
    {
      free (*data);
      *data = NULL;
      return ib_error_set (err, EINVAL, "blob %s: %zu bytes, the descriptor says %lld", digest,
                           *len, (long long) size);
    }
  return 0;
}

/* Bring the blob `digest` into the store, verified: 1 when it is there, 0
 * when the source lacks it, -1 on errors (a digest mismatch among them). */
static int
src_fetch (import_src_t *s, const char *digest, ib_error_t *err)
{
  json_t *known = json_object_get (s->fetched, digest);
  if (known)
    return json_is_true (known);
  int ret = 1;
  if (ib_store_has_blob (s->store, digest))
    ;
  else if (s->dir)
    {
      cleanup_free char *path = xasprintf ("%s/blobs/sha256/%s", s->dir, ib_digest_hex (digest));
      cleanup_close int in = open (path, O_RDONLY | O_CLOEXEC);
      cleanup_free char *tmp = NULL;
      if (in < 0 && errno == ENOENT)
        ret = 0;
      else if (in < 0)
        return ib_error_sys (err, errno, "open %s", path);
      else
        {
          cleanup_close int out = ib_store_tmp_file (s->store, "cache-import", &tmp, err);
          if (out < 0)
            return -1;
          if (ib_copy_fd_data (in, out, path, err) < 0
              || ib_store_commit_blob (s->store, tmp, digest, NULL, NULL, err) < 0)
            {
              unlink (tmp);
              return -1;
            }
        }
    }
  else
    {
      ib_error_t e = NULL;
      if (ib_registry_fetch_blob (s->r, s->repo, digest, s->store, &e) < 0)
        {
          if (e->status != ENOENT)
            {
              *err = e;
              return -1;
            }
          ib_debug ("cache import: blob %s: %s", digest, e->msg);
          ib_error_free (&e);
          ret = 0;
        }
    }
  json_object_set_new (s->fetched, digest, json_boolean (ret));
  return ret;
}

/* Import what the cache manifest `mdata` names; *n gets the number of
 * records the store now has from it. */
static int
import_manifest (import_src_t *s, const char *mdata, size_t mlen, size_t *n, ib_error_t *err)
{
  *n = 0;
  json_t *m = json_loadb (mdata, mlen, 0, NULL);
  json_t *c = json_object_get (m, "config");
  const char *mt = json_string_value (json_object_get (m, "mediaType"));
  const char *at = json_string_value (json_object_get (m, "artifactType"));
  const char *cmt = json_string_value (json_object_get (c, "mediaType"));
  const char *cd = json_string_value (json_object_get (c, "digest"));
  json_t *csize = json_object_get (c, "size");
  int ret = 0;
  if (!json_is_object (m) || (mt && strcmp (mt, IB_MT_OCI_MANIFEST) != 0))
    ret = ib_error_set (err, EINVAL, "the manifest is not an OCI image manifest");
  else if ((at && strcmp (at, IB_CACHE_ARTIFACT_TYPE) != 0) || cmt == NULL
           || strcmp (cmt, IB_CACHE_CONFIG_TYPE) != 0)
    ret = ib_error_set (err, EINVAL, "not an imgbuild cache (artifactType %s, config media type %s)",
                        at ? at : "none", cmt ? cmt : "none");
  else if (cd == NULL || !ib_digest_valid (cd) || !json_is_integer (csize))
    ret = ib_error_set (err, EINVAL, "the manifest's config descriptor is malformed");
  cleanup_free char *cdata = NULL;
  size_t clen = 0;
  if (ret == 0)
    ret = src_read (s, cd, json_integer_value (csize), &cdata, &clen, err);
  json_decref (m);
  if (ret < 0)
    return -1;

  json_t *cfg = json_loadb (cdata, clen, 0, NULL);
  json_t *records = json_object_get (cfg, "records");
  if (json_integer_value (json_object_get (cfg, "v")) != 1 || !json_is_object (records))
    {
      json_decref (cfg);
      return ib_error_set (err, EINVAL, "config %s: not a version 1 cache config", cd);
    }
  cleanup_free char *steps = xasprintf ("%s/cache/steps", s->store->root);
  const char *hex;
  json_t *rec;
  json_object_foreach (records, hex, rec)
  {
    if (!valid_hex (hex) || !record_valid (rec))
      {
        ret = ib_error_set (err, EINVAL, "config %s: record \"%.80s\" is malformed", cd, hex);
        break;
      }
    /* a record the store has, with its blobs, is kept */
    cleanup_free char *key = xasprintf ("sha256:%s", hex);
    json_t *have_cfg = NULL;
    ib_descriptor_t *have = NULL;
    size_t n_have = 0;
    if (ib_cache_get (s->store, key, &have_cfg, &have, &n_have))
      {
        json_decref (have_cfg);
        for (size_t k = 0; k < n_have; k++)
          free (have[k].media_type);
        free (have);
        (*n)++;
        continue;
      }
    bool complete = true;
    size_t i;
    json_t *l;
    json_array_foreach (json_object_get (rec, "layers"), i, l)
    {
      int r = src_fetch (s, json_string_value (json_object_get (l, "digest")), err);
      if (r < 0)
        ret = -1;
      if (r <= 0)
        {
          complete = false;
          break;
        }
    }
    if (ret < 0)
      break;
    if (!complete)
      {
        ib_debug ("cache import: record %s skipped: a blob it names is missing", hex);
        continue;
      }
    cleanup_free char *text = dump (rec);
    cleanup_free char *path = record_path (s->store, hex);
    if (ib_mkdir_p (steps, 0700, err) < 0
        || ib_write_file_atomic (path, text, strlen (text), 0644, err) < 0)
      {
        ret = -1;
        break;
      }
    (*n)++;
  }
  json_decref (cfg);
  return ret;
}

static void
not_found (const char *spec, const char *why)
{
  ib_warn ("cache %s not found; building without it", spec);
  ib_debug ("cache %s: %s", spec, why);
}

/* type=local,src=DIR: DIR/index.json's manifest named "cache" (else its
 * first).  Returns 1 when there is no cache at DIR. */
static int
import_local (import_src_t *s, const char *spec, size_t *n, ib_error_t *err)
{
  cleanup_free char *ipath = ib_path_join (s->dir, "index.json");
  cleanup_free char *idata = NULL;
  size_t ilen = 0;
  ib_error_t e = NULL;
  if (ib_read_file (ipath, &idata, &ilen, &e) < 0)
    {
      if (e->status != ENOENT)
        {
          *err = e;
          return -1;
        }
      not_found (spec, e->msg);
      ib_error_free (&e);
      return 1;
    }
  json_t *index = json_loadb (idata, ilen, 0, NULL);
  json_t *ms = json_object_get (index, "manifests");
  json_t *pick = json_array_get (ms, 0);
  size_t i;
  json_t *d;
  json_array_foreach (ms, i, d)
  {
    const char *name = json_string_value (
        json_object_get (json_object_get (d, "annotations"), REF_NAME_ANNOTATION));
    if (name && strcmp (name, LAYOUT_NAME) == 0)
      {
        pick = d;
        break;
      }
  }
  const char *md = json_string_value (json_object_get (pick, "digest"));
  json_t *msize = json_object_get (pick, "size");
  int ret = 0;
  cleanup_free char *mdata = NULL;
  size_t mlen = 0;
  if (!json_is_array (ms))
    ret = ib_error_set (err, EINVAL, "%s is not an OCI image index", ipath);
  else if (pick == NULL)
    ret = ib_error_set (err, EINVAL, "%s lists no manifest", ipath);
  else if (md == NULL || !ib_digest_valid (md) || !json_is_integer (msize))
    ret = ib_error_set (err, EINVAL, "%s: the manifest descriptor is malformed", ipath);
  else
    ret = src_read (s, md, json_integer_value (msize), &mdata, &mlen, err);
  json_decref (index);
  if (ret == 0)
    ret = import_manifest (s, mdata, mlen, n, err);
  return ret;
}

/* type=registry,ref=REF.  Returns 1 when the registry has no such manifest. */
static int
import_registry (import_src_t *s, const char *spec, const char *ref_string, size_t *n,
                 ib_error_t *err)
{
  ib_ref_t ref;
  if (ib_ref_parse (ref_string, &ref, err) < 0)
    return -1;
  cleanup_free char *mdata = NULL;
  size_t mlen = 0;
  /* registries.conf applies as for a pull: mirrors, then the location */
  ib_error_t e = NULL;
  int ret = ib_registry_open_pull (&ref, ref.digest ? ref.digest : ref.tag, &s->r, &mdata, &mlen,
                                   &e);
  s->repo = ref.repository;
  if (ret < 0 && e->status == ENOENT)
    {
      not_found (spec, e->msg);
      ib_error_free (&e);
      ret = 1;
    }
  else if (ret < 0)
    *err = e;
  if (ret == 0)
    ret = import_manifest (s, mdata, mlen, n, err);
  ib_registry_free (s->r);
  s->r = NULL;
  s->repo = NULL;
  ib_ref_free (&ref);
  return ret;
}

/* errno values of a registry that cannot be reached at all (oci/http.c) */
static bool
unreachable (int status)
{
  return status == ECONNREFUSED || status == ETIMEDOUT || status == ENETUNREACH
         || status == EHOSTUNREACH || status == EHOSTDOWN || status == ECONNRESET;
}

int
ib_cache_import (ib_store_t *store, const char *spec, ib_error_t *err)
{
  cache_spec_t sp;
  if (parse_spec (spec, false, &sp, err) < 0)
    return -1;
  import_src_t s = { .store = store, .fetched = json_object () };
  size_t n = 0;
  int ret;
  if (sp.type == SPEC_LOCAL)
    {
      struct stat st;
      if (stat (sp.path, &st) < 0 && errno == ENOENT)
        {
          not_found (spec, "no such directory");
          ret = 1;
        }
      else
        {
          s.dir = sp.path;
          ret = import_local (&s, spec, &n, err);
        }
    }
  else
    ret = import_registry (&s, spec, sp.ref, &n, err);
  /* A registry that cannot be reached costs the cache, not the build (a
   * build farm's cells go on uncached when the cache registry is down);
   * ignore-error=true makes any failure a warning.  A damaged cache at a
   * registry that answered is an error otherwise. */
  if (ret < 0 && err && (sp.ignore_error || unreachable ((*err)->status)))
    {
      ib_warn ("cache %s could not be read; building without it: %s", spec, (*err)->msg);
      ib_error_free (err);
      ret = 1;
    }
  if (ret < 0)
    ib_error_prefix (err, "--cache-from %s", spec);
  else if (ret == 0)
    ib_info ("cache imported from %s: %zu records", spec, n);
  json_decref (s.fetched);
  spec_clear (&sp);
  return ret < 0 ? -1 : 0;
}
