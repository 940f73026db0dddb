/* oci/export.c — a stored image written out (export.h): an OCI image
 * layout directory or its tarball (OUTPUT type=oci), and a `docker save`
 * tarball (OUTPUT type=docker: docker load, podman load, skopeo
 * docker-archive:).
 *
 * The tarball's layout (Docker's image tarball, "manifest.json" format):
 *   manifest.json                 [{"Config": "<hex>.json", "RepoTags": [...],
 *                                   "Layers": ["<diff_id hex>/layer.tar", ...]}]
 *   <config digest hex>.json      the image config, byte for byte
 *   <diff_id hex>/layer.tar       each layer UNCOMPRESSED (its sha256 is the
 *                                 diff_id, checked while writing)
 *   repositories                  {"NAME": {"TAG": "<top diff_id hex>"}} when tagged
 * Entries are written in that order (manifest.json last but one is what
 * docker save does; readers look entries up by name).  Times are 0 so the
 * same image gives the same tarball.
 */
#include "oci/export.h"
#include "common/util.h"
#include "oci/digest.h"
#include "oci/manifest.h"
#include "oci/ref.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The stored image an export writes: its descriptor, manifest and config
 * (ib_store_load_image); image_free releases them. */
typedef struct image
{
  ib_descriptor_t desc;
  ib_manifest_t *m;
  json_t *config;
} image_t;

static int
image_load (ib_store_t *store, const char *manifest_digest, image_t *img, ib_error_t *err)
{
  return ib_store_load_image (store, manifest_digest, &img->desc, &img->m, &img->config, err);
}

static void
image_free (image_t *img)
{
  ib_descriptor_clear (&img->desc);
  ib_manifest_free (img->m);
  json_decref (img->config);
}

static int
add_bytes (struct archive *a, const char *name, const void *data, size_t len, const char *dest,
           ib_error_t *err)
{
  struct archive_entry *e = archive_entry_new ();
  archive_entry_set_pathname (e, name);
  archive_entry_set_filetype (e, AE_IFREG);
  archive_entry_set_perm (e, 0644);
  archive_entry_set_size (e, (la_int64_t) len);
  int r = archive_write_header (a, e);
  archive_entry_free (e);
  if (r != ARCHIVE_OK || (len && archive_write_data (a, data, len) != (la_ssize_t) len))
    return ib_error_set (err, archive_errno (a) ? archive_errno (a) : EIO, "write %s: %s", dest,
                         archive_error_string (a) ? archive_error_string (a) : "error");
  return 0;
}

static int
add_dir (struct archive *a, const char *name, const char *dest, ib_error_t *err)
{
  struct archive_entry *e = archive_entry_new ();
  archive_entry_set_pathname (e, name);
  archive_entry_set_filetype (e, AE_IFDIR);
  archive_entry_set_perm (e, 0755);
  int r = archive_write_header (a, e);
  archive_entry_free (e);
  if (r != ARCHIVE_OK)
    return ib_error_set (err, EIO, "write %s: %s", dest, archive_error_string (a));
  return 0;
}

/* Decompress layer blob `blob` into the open temp file `fd`; its sha256
 * must be `diff_id`.  *size: the uncompressed bytes. */
/* A regular-file entry `name` of `size` bytes, read from `fd` to its end
 * (`src` names it in errors). */
static int
add_fd (struct archive *a, const char *name, int fd, int64_t size, const char *src,
        const char *dest, ib_error_t *err)
{
  struct archive_entry *e = archive_entry_new ();
  archive_entry_set_pathname (e, name);
  archive_entry_set_filetype (e, AE_IFREG);
  archive_entry_set_perm (e, 0644);
  archive_entry_set_size (e, size);
  int r = archive_write_header (a, e);
  archive_entry_free (e);
  if (r != ARCHIVE_OK)
    return ib_error_set (err, EIO, "write %s: %s", dest, archive_error_string (a));
  char buf[1 << 16];
  for (;;)
    {
      ssize_t n = read (fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        return ib_error_sys (err, errno, "read %s", src);
      if (n == 0)
        break;
      if (archive_write_data (a, buf, (size_t) n) != n)
        return ib_error_set (err, archive_errno (a) ? archive_errno (a) : EIO, "write %s: %s",
                             dest, archive_error_string (a));
    }
  return 0;
}

static int
inflate_layer (const char *blob, int fd, const char *diff_id, int64_t *size, ib_error_t *err)
{
  struct archive *in = archive_read_new ();
  archive_read_support_filter_all (in);
  archive_read_support_format_raw (in);
  int ret = -1;
  struct archive_entry *e;
  if (archive_read_open_filename (in, blob, 1 << 20) != ARCHIVE_OK
      || archive_read_next_header (in, &e) != ARCHIVE_OK)
    {
      ib_error_set (err, EIO, "read layer %s: %s", blob, archive_error_string (in));
      goto out;
    }
  ib_sha256_t *h = ib_sha256_new ();
  char buf[1 << 16];
  *size = 0;
  for (;;)
    {
      la_ssize_t n = archive_read_data (in, buf, sizeof buf);
      if (n < 0)
        {
          ib_sha256_free (h);
          ib_error_set (err, EIO, "read layer %s: %s", blob, archive_error_string (in));
          goto out;
        }
      if (n == 0)
        break;
      ib_sha256_update (h, buf, (size_t) n);
      if (ib_write_all (fd, buf, (size_t) n, "layer.tar", err) < 0)
        {
          ib_sha256_free (h);
          goto out;
        }
      *size += n;
    }
  char d[IB_DIGEST_LEN];
  ib_sha256_final (h, d);
  if (strcmp (d, diff_id) != 0)
    {
      ib_error_set (err, EINVAL, "layer %s: uncompressed it is %s, the config says %s", blob, d,
                    diff_id);
      goto out;
    }
  ret = 0;
out:
  archive_read_free (in);
  return ret;
}

static int
add_layer (struct archive *a, ib_store_t *store, const char *digest, const char *diff_id,
           const char *dest, ib_error_t *err)
{
  cleanup_free char *tmp = NULL;
  cleanup_close int fd = ib_store_tmp_file (store, "docker-layer", &tmp, err);
  if (fd < 0)
    return -1;
  unlink (tmp); /* anonymous: gone with the fd */
  cleanup_free char *blob = ib_store_blob_path (store, digest);
  int64_t size = 0;
  if (inflate_layer (blob, fd, diff_id, &size, err) < 0 || lseek (fd, 0, SEEK_SET) < 0)
    return -1;
  cleanup_free char *dir = xstrdup (ib_digest_hex (diff_id));
  cleanup_free char *name = xasprintf ("%s/layer.tar", dir);
  if (add_dir (a, dir, dest, err) < 0)
    return -1;
  return add_fd (a, name, fd, size, tmp, dest, err);
}

/* A ustar tarball opened at `tmp` (beside `dest`, whose parent
 * directories are created) into *a. */
static int
tar_begin (const char *dest, const char *tmp, struct archive **a, ib_error_t *err)
{
  cleanup_free char *dir = xstrdup (dest);
  char *slash = strrchr (dir, '/');
  if (slash && slash != dir)
    {
      *slash = '\0';
      if (ib_mkdir_p (dir, 0755, err) < 0)
        return -1;
    }
  *a = archive_write_new ();
  archive_write_set_format_ustar (*a);
  archive_write_set_bytes_in_last_block (*a, 1);
  if (archive_write_open_filename (*a, tmp) != ARCHIVE_OK)
    return ib_error_set (err, archive_errno (*a) ? archive_errno (*a) : EIO, "create %s: %s", tmp,
                         archive_error_string (*a));
  return 0;
}

/* The tarball closed, fsynced and renamed from `tmp` to `dest`. */
static int
tar_commit (struct archive *a, const char *tmp, const char *dest, ib_error_t *err)
{
  if (archive_write_close (a) != ARCHIVE_OK)
    return ib_error_set (err, archive_errno (a) ? archive_errno (a) : EIO, "write %s: %s", dest,
                         archive_error_string (a));
  int fd = open (tmp, O_RDONLY | O_CLOEXEC);
  if (fd < 0 || fsync (fd) < 0)
    {
      int e = errno;
      if (fd >= 0)
        close (fd);
      return ib_error_sys (err, e, "write %s", tmp);
    }
  close (fd);
  if (rename (tmp, dest) < 0)
    return ib_error_sys (err, errno, "write %s", dest);
  return 0;
}

int
ib_export_docker (ib_store_t *store, const char *manifest_digest, const char *name,
                  const char *dest, ib_error_t *err)
{
  image_t img = { 0 };
  if (image_load (store, manifest_digest, &img, err) < 0)
    return -1;
  ib_manifest_t *m = img.m;
  int ret = -1;
  struct archive *a = NULL;
  cleanup_strv char **diff_ids = NULL;
  cleanup_free char *cfg = NULL;
  size_t cfg_len = 0;
  cleanup_free char *tmp = xasprintf ("%s.tmp-%d", dest, (int) getpid ());
  cleanup_free char *repo = NULL, *tag = NULL;
  /* declared before the first goto: cleanup must never see them uninitialised */
  cleanup_free char *cfg_name = NULL, *mj = NULL, *rj = NULL;
  json_t *layers = NULL;
  if (ib_config_diff_ids (img.config, &diff_ids, err) < 0)
    goto out;
  if (ib_strv_len (diff_ids) != m->n_layers)
    {
      ib_error_set (err, EINVAL, "image %s: %zu layers but %zu diff_ids", manifest_digest,
                    m->n_layers, ib_strv_len (diff_ids));
      goto out;
    }
  if (ib_store_read_blob (store, m->config.digest, &cfg, &cfg_len, err) < 0)
    goto out;
  if (name)
    {
      /* RepoTags as docker save writes them: the familiar name
       * ("debian:bookworm", "127.0.0.1:5000/x:1") with its tag */
      ib_ref_t ref = { 0 };
      if (ib_ref_parse (name, &ref, err) < 0)
        goto out;
      const char *r = ref.repository;
      if (strcmp (ref.registry, "docker.io") == 0)
        repo = ib_str_has_prefix (r, "library/") ? xstrdup (r + 8) : xstrdup (r);
      else
        repo = xasprintf ("%s/%s", ref.registry, r);
      tag = xstrdup (ref.tag ? ref.tag : "latest");
      ib_ref_free (&ref);
    }
  if (tar_begin (dest, tmp, &a, err) < 0)
    goto out;
  layers = json_array ();
  for (size_t i = 0; i < m->n_layers; i++)
    {
      if (add_layer (a, store, m->layers[i].digest, diff_ids[i], dest, err) < 0)
        goto out;
      json_array_append_new (layers, json_sprintf ("%s/layer.tar", ib_digest_hex (diff_ids[i])));
    }
  cfg_name = xasprintf ("%s.json", ib_digest_hex (m->config.digest));
  if (add_bytes (a, cfg_name, cfg, cfg_len, dest, err) < 0)
    goto out;
  json_t *tags = json_array ();
  if (repo)
    json_array_append_new (tags, json_sprintf ("%s:%s", repo, tag));
  json_t *manifest = json_pack ("[{s:s, s:o, s:o}]", "Config", cfg_name, "RepoTags", tags,
                                "Layers", layers);
  layers = NULL; /* the manifest holds it */
  mj = json_dumps (manifest, JSON_COMPACT);
  json_decref (manifest);
  if (add_bytes (a, "manifest.json", mj, strlen (mj), dest, err) < 0)
    goto out;
  if (repo && m->n_layers)
    {
      json_t *repos = json_pack ("{s:{s:s}}", repo, tag, ib_digest_hex (diff_ids[m->n_layers - 1]));
      rj = json_dumps (repos, JSON_COMPACT);
      json_decref (repos);
      if (add_bytes (a, "repositories", rj, strlen (rj), dest, err) < 0)
        goto out;
    }
  if (tar_commit (a, tmp, dest, err) < 0)
    goto out;
  ret = 0;
out:
  json_decref (layers);
  if (a)
    archive_write_free (a);
  if (ret < 0)
    unlink (tmp);
  image_free (&img);
  return ret;
}

/* The layout's index.json naming the image or index `d` `name` (NULL:
 * unnamed, no annotations) (caller frees). */
static char *
layout_index (const ib_descriptor_t *d, const char *name)
{
  json_t *index = json_pack ("{s:i, s:s, s:[{s:s, s:s, s:I}]}", "schemaVersion", 2,
                             "mediaType", IB_MT_OCI_INDEX, "manifests", "mediaType",
                             d->media_type ? d->media_type : IB_MT_OCI_MANIFEST,
                             "digest", d->digest, "size", (json_int_t) d->size);
  if (name)
    json_object_set_new (json_array_get (json_object_get (index, "manifests"), 0), "annotations",
                         json_pack ("{s:s}", "org.opencontainers.image.ref.name", name));
  char *s = json_dumps (index, JSON_COMPACT | JSON_SORT_KEYS);
  json_decref (index);
  return s;
}

/* The blobs of the stored image manifest `digest` (it, its config, its
 * layers) added to *blobs, each once; *desc (may be NULL) gets its
 * descriptor. */
static int
image_blobs (ib_store_t *store, const char *digest, ib_descriptor_t *desc, char ***blobs,
             ib_error_t *err)
{
  image_t img = { 0 };
  if (image_load (store, digest, &img, err) < 0)
    return -1;
  if (!ib_strv_has (*blobs, digest))
    ib_strv_push (blobs, digest);
  if (!ib_strv_has (*blobs, img.m->config.digest))
    ib_strv_push (blobs, img.m->config.digest);
  for (size_t i = 0; i < img.m->n_layers; i++)
    if (!ib_strv_has (*blobs, img.m->layers[i].digest))
      ib_strv_push (blobs, img.m->layers[i].digest);
  if (desc)
    {
      snprintf (desc->digest, IB_DIGEST_LEN, "%s", digest);
      desc->media_type = xstrdup (img.desc.media_type ? img.desc.media_type : IB_MT_OCI_MANIFEST);
      desc->size = img.desc.size;
    }
  image_free (&img);
  return 0;
}

/* What an export of `digest` writes: *desc its descriptor (caller clears)
 * and *blobs (caller frees) every blob, each once: an image manifest's as
 * image_blobs; an OCI index (image-index.md) itself, then each image it
 * lists, in its order. */
static int
export_blobs (ib_store_t *store, const char *digest, ib_descriptor_t *desc, char ***blobs,
              ib_error_t *err)
{
  cleanup_free char *data = NULL;
  size_t len = 0;
  if (ib_store_read_blob (store, digest, &data, &len, err) < 0)
    return -1;
  json_t *j = json_loadb (data, len, 0, NULL);
  const char *mt = json_string_value (json_object_get (j, "mediaType"));
  if (mt == NULL || strcmp (mt, IB_MT_OCI_INDEX) != 0)
    {
      json_decref (j);
      return image_blobs (store, digest, desc, blobs, err);
    }
  snprintf (desc->digest, IB_DIGEST_LEN, "%s", digest);
  desc->media_type = xstrdup (IB_MT_OCI_INDEX);
  desc->size = (int64_t) len;
  ib_strv_push (blobs, digest);
  size_t i;
  json_t *e;
  json_array_foreach (json_object_get (j, "manifests"), i, e)
    {
      const char *d = json_string_value (json_object_get (e, "digest"));
      if (d == NULL || image_blobs (store, d, NULL, blobs, err) < 0)
        {
          json_decref (j);
          return d ? ib_error_prefix (err, "index %s", digest)
                   : ib_error_set (err, EINVAL, "index %s: entry %zu has no digest", digest, i);
        }
    }
  json_decref (j);
  return 0;
}

/* Blob `digest` of the store as the tarball entry blobs/sha256/<hex>. */
static int
add_blob (struct archive *a, ib_store_t *store, const char *digest, const char *dest,
          ib_error_t *err)
{
  cleanup_free char *path = ib_store_blob_path (store, digest);
  cleanup_close int fd = open (path, O_RDONLY | O_CLOEXEC);
  struct stat sb;
  if (fd < 0 || fstat (fd, &sb) < 0)
    return ib_error_sys (err, errno, "blob %s", digest);
  cleanup_free char *name = xasprintf ("blobs/sha256/%s", ib_digest_hex (digest));
  cleanup_free char *src = xasprintf ("blob %s", digest);
  return add_fd (a, name, fd, sb.st_size, src, dest, err);
}

/* OUTPUT type=oci,dest=FILE: the layout as a tarball (buildx's oci
 * exporter; skopeo's oci-archive:), entries oci-layout, index.json, then
 * blobs/ with the manifest (or index, then each of its manifests), the
 * config and the layers (each once), times 0: the same image gives the
 * same bytes.  Written beside dest, fsynced, renamed over it. */
int
ib_export_oci_archive (ib_store_t *store, const char *manifest_digest, const char *name,
                       const char *dest, ib_error_t *err)
{
  ib_descriptor_t desc = { 0 };
  cleanup_strv char **blobs = NULL;
  if (export_blobs (store, manifest_digest, &desc, &blobs, err) < 0)
    {
      ib_descriptor_clear (&desc);
      return -1;
    }
  int ret = -1;
  struct archive *a = NULL;
  cleanup_free char *tmp = xasprintf ("%s.tmp-%d", dest, (int) getpid ());
  cleanup_free char *index = layout_index (&desc, name);
  const char *layout = "{\"imageLayoutVersion\":\"1.0.0\"}";
  if (tar_begin (dest, tmp, &a, err) < 0)
    goto out;
  if (add_bytes (a, "oci-layout", layout, strlen (layout), dest, err) < 0
      || add_bytes (a, "index.json", index, strlen (index), dest, err) < 0
      || add_dir (a, "blobs", dest, err) < 0 || add_dir (a, "blobs/sha256", dest, err) < 0)
    goto out;
  for (char **b = blobs; *b; b++)
    if (add_blob (a, store, *b, dest, err) < 0)
      goto out;
  if (tar_commit (a, tmp, dest, err) < 0)
    goto out;
  ret = 0;
out:
  if (a)
    archive_write_free (a);
  if (ret < 0)
    unlink (tmp);
  ib_descriptor_clear (&desc);
  return ret;
}

/* OUTPUT type=oci */
int
ib_export_oci (ib_store_t *store, const char *manifest_digest, const char *name, const char *dest,
               ib_error_t *err)
{
  ib_descriptor_t desc = { 0 };
  cleanup_strv char **list = NULL;
  if (export_blobs (store, manifest_digest, &desc, &list, err) < 0)
    {
      ib_descriptor_clear (&desc);
      return -1;
    }
  int ret = -1;
  cleanup_free char *tmp = xasprintf ("%s.tmp-%d", dest, (int) getpid ());
  cleanup_free char *blobs = ib_path_join (tmp, "blobs/sha256");
  cleanup_free char *old = xasprintf ("%s.old-%d", dest, (int) getpid ());
  ib_rm_rf (tmp, NULL);
  if (ib_mkdir_p (blobs, 0755, err) < 0)
    goto out;
  for (char **b = list; *b; b++)
    if (ib_store_export_blob (store, *b, blobs, err) < 0)
      goto out;
  {
    cleanup_free char *p = ib_path_join (tmp, "oci-layout");
    const char *layout = "{\"imageLayoutVersion\":\"1.0.0\"}";
    if (ib_write_file_atomic (p, layout, strlen (layout), 0644, err) < 0)
      goto out;
    cleanup_free char *s = layout_index (&desc, name);
    cleanup_free char *ip = ib_path_join (tmp, "index.json");
    if (ib_write_file_atomic (ip, s, strlen (s), 0644, err) < 0)
      goto out;
  }
  /* Replace dest: old moved aside, new renamed in, old removed. */
  if (rename (dest, old) < 0 && errno != ENOENT)
    {
      ib_error_sys (err, errno, "replace %s", dest);
      goto out;
    }
  if (rename (tmp, dest) < 0)
    {
      ib_error_sys (err, errno, "write %s", dest);
      rename (old, dest);
      goto out;
    }
  ib_rm_rf (old, NULL);
  ret = 0;
out:
  if (ret < 0)
    ib_rm_rf (tmp, NULL);
  ib_descriptor_clear (&desc);
  return ret;
}
