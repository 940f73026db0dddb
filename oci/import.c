/* oci/import.c — image archives into the store (oci/import.h).
 *
 * Reading order: ib_import → (a tar: unpack_tar into the store's tmp/) →
 * import_oci (index.json, each descriptor through import_desc) or
 * import_docker (manifest.json) → the tags, all at the end. */
#include "oci/import.h"
#include "common/util.h"
#include "oci/digest.h"
#include "common/error.h"
#include "oci/manifest.h"
#include "oci/ref.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <linux/openat2.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* manifests, indexes, configs, manifest.json, index.json */
#define SMALL_MAX (16u << 20)
/* an index inside an index inside ...: more is refused */
#define NEST_MAX 4

struct pending_tag
{
  char *name, *media_type;
  char digest[IB_DIGEST_LEN];
  int64_t size;
};

typedef struct import
{
  ib_store_t *store;
  const char *shown; /* the archive as the user named it */
  int root;          /* the layout, or the unpacked tar */
  const char *name;  /* the name given, normalized (ib_ref_string), or NULL */
  char **loaded;
  struct pending_tag *tags;
  size_t n_tags;
} import_t;

static int
fail (import_t *im, ib_error_t *err)
{
  return ib_error_prefix (err, "load %s", im->shown);
}

/* A member of the archive, opened for reading: resolved inside the root
 * (symbolic links included), a regular file. */
static int
open_member (import_t *im, const char *rel, ib_error_t *err)
{
  struct open_how how = { .flags = O_RDONLY | O_CLOEXEC | O_NOCTTY,
                          .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV };
  int fd = (int) syscall (SYS_openat2, im->root, rel, &how, sizeof how);
  if (fd < 0)
    return ib_error_sys (err, errno == ENOENT ? ENOENT : errno, "%s", rel);
  struct stat st;
  if (fstat (fd, &st) < 0 || !S_ISREG (st.st_mode))
    {
      close (fd);
      return ib_error_set (err, EINVAL, "%s: not a regular file", rel);
    }
  return fd;
}

/* A small member into memory (NUL-terminated; caller frees). */
static int
read_member (import_t *im, const char *rel, char **data, size_t *len, ib_error_t *err)
{
  *data = NULL;
  int fd = open_member (im, rel, err);
  if (fd < 0)
    return -1;
  ib_buf_t b = { 0 };
  char chunk[65536];
  ssize_t n;
  while ((n = read (fd, chunk, sizeof chunk)) != 0)
    {
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0 || b.len + (size_t) n > SMALL_MAX)
        {
          int e = n < 0 ? errno : EFBIG;
          close (fd);
          ib_buf_free (&b);
          return n < 0 ? ib_error_sys (err, e, "read %s", rel)
                       : ib_error_set (err, e, "%s: more than %u bytes", rel, SMALL_MAX);
        }
      ib_buf_append (&b, chunk, (size_t) n);
    }
  close (fd);
  ib_buf_append (&b, "", 1);
  *len = b.len - 1;
  *data = b.data;
  return 0;
}

/* "blobs/sha256/HEX" of a digest that ib_digest_valid accepts. */
static char *
blob_path (const char *digest)
{
  const char *colon = strchr (digest, ':');
  return xasprintf ("blobs/%.*s/%s", (int) (colon - digest), digest, colon + 1);
}

/* A member copied into the store as a blob: checked against `expected`
 * (NULL: any), its digest and size out; *magic gets its first 4 bytes
 * (zeros when shorter), for the compression of a docker layer. */
static int
copy_member (import_t *im, const char *rel, const char *expected, char digest[IB_DIGEST_LEN],
             uint64_t *size, unsigned char magic[4], ib_error_t *err)
{
  int in = open_member (im, rel, err);
  if (in < 0)
    return -1;
  if (magic)
    {
      memset (magic, 0, 4);
      if (pread (in, magic, 4, 0) < 0)
        magic[0] = 0;
    }
  cleanup_free char *tmp = NULL;
  int out = ib_store_tmp_file (im->store, "load-", &tmp, err);
  if (out < 0)
    {
      close (in);
      return -1;
    }
  int r = ib_copy_fd_data_to (in, out, rel, tmp, err);
  close (in);
  close (out);
  if (r == 0)
    r = ib_store_commit_blob (im->store, tmp, expected, digest, size, err);
  if (r < 0)
    {
      unlink (tmp);
      return ib_error_prefix (err, "%s", rel);
    }
  return 0;
}

static void
pend_tag (import_t *im, const char *name, const char *media_type, const char *digest, int64_t size)
{
  im->tags = xrealloc (im->tags, (im->n_tags + 1) * sizeof *im->tags);
  struct pending_tag *t = &im->tags[im->n_tags++];
  t->name = xstrdup (name);
  t->media_type = xstrdup (media_type);
  snprintf (t->digest, sizeof t->digest, "%s", digest);
  t->size = size;
}

/* `text` as a stored name (normalized), or NULL when it is not a whole
 * reference: an OCI layout's ref.name is often a bare tag ("latest"). */
static char *
full_name (const char *text, bool bare_tag_ok)
{
  if (text == NULL || *text == '\0' || (!bare_tag_ok && !strchr (text, '/') && !strchr (text, ':')))
    return NULL;
  ib_ref_t ref;
  if (ib_ref_parse (text, &ref, NULL) < 0)
    return NULL;
  char *s = ref.digest ? NULL : ib_ref_string (&ref);
  ib_ref_free (&ref);
  return s;
}

/* One descriptor of an OCI layout: the manifest or index blob and all it
 * names, into the store; `name` (may be NULL) tags it. */
static int
import_desc (import_t *im, json_t *desc, const char *name, int depth, ib_error_t *err)
{
  const char *mt = json_string_value (json_object_get (desc, "mediaType"));
  const char *digest = json_string_value (json_object_get (desc, "digest"));
  if (digest == NULL || !ib_digest_valid (digest))
    return ib_error_set (err, EINVAL, "index.json: a descriptor without a valid digest");
  if (depth > NEST_MAX)
    return ib_error_set (err, EINVAL, "%s: indexes nested more than %d deep", digest, NEST_MAX);
  cleanup_free char *rel = blob_path (digest);
  cleanup_free char *data = NULL;
  size_t len = 0;
  if (read_member (im, rel, &data, &len, err) < 0)
    return -1;
  char got[IB_DIGEST_LEN];
  ib_digest_buf (data, len, got);
  if (strcmp (got, digest) != 0)
    return ib_error_set (err, EINVAL, "%s: digest mismatch (the file's is %s)", rel, got);
  ib_doc_kind_t kind;
  if (ib_doc_kind (data, len, mt, &kind, err) < 0)
    return ib_error_prefix (err, "%s", rel);
  if (kind == IB_DOC_INDEX)
    {
      json_t *j = json_loadb (data, len, 0, NULL);
      json_t *children = json_object_get (j, "manifests");
      size_t i;
      json_t *c;
      int r = json_is_array (children) ? 0 : ib_error_set (err, EINVAL, "%s: no manifests", rel);
      json_array_foreach (children, i, c)
      {
        if (r < 0)
          break;
        r = import_desc (im, c, NULL, depth + 1, err);
      }
      json_decref (j);
      if (r < 0)
        return -1;
    }
  else
    {
      ib_manifest_t *m = NULL;
      if (ib_manifest_parse (data, len, &m, err) < 0)
        return ib_error_prefix (err, "%s", rel);
      int r = 0;
      for (size_t k = 0; r == 0 && k <= m->n_layers; k++)
        {
          const ib_descriptor_t *d = k == 0 ? &m->config : &m->layers[k - 1];
          char dg[IB_DIGEST_LEN];
          uint64_t sz;
          if (ib_store_has_blob (im->store, d->digest))
            continue;
          cleanup_free char *p = blob_path (d->digest);
          r = copy_member (im, p, d->digest, dg, &sz, NULL, err);
        }
      ib_manifest_free (m);
      if (r < 0)
        return -1;
    }
  char put[IB_DIGEST_LEN];
  if (ib_store_put_blob (im->store, data, len, put, err) < 0)
    return -1;
  const char *type = mt ? mt : kind == IB_DOC_INDEX ? IB_MT_OCI_INDEX : IB_MT_OCI_MANIFEST;
  if (name)
    pend_tag (im, name, type, digest, (int64_t) len);
  else if (depth == 0)
    ib_strv_push (&im->loaded, digest);
  return 0;
}

static int
import_oci (import_t *im, ib_error_t *err)
{
  cleanup_free char *layout = NULL, *text = NULL;
  size_t len;
  if (read_member (im, "oci-layout", &layout, &len, err) < 0)
    return -1;
  json_t *lj = json_loadb (layout, len, 0, NULL);
  const char *v = json_string_value (json_object_get (lj, "imageLayoutVersion"));
  bool ok = v && strncmp (v, "1.", 2) == 0;
  json_decref (lj);
  if (!ok)
    return ib_error_set (err, EINVAL, "oci-layout: not an image layout of version 1.x");
  if (read_member (im, "index.json", &text, &len, err) < 0)
    return -1;
  json_t *index = json_loadb (text, len, 0, NULL);
  json_t *ms = json_object_get (index, "manifests");
  int r = 0;
  if (!json_is_array (ms))
    r = ib_error_set (err, EINVAL, "index.json: no manifests array");
  else if (im->name && json_array_size (ms) != 1)
    r = ib_error_set (err, EINVAL, "a name is given but the layout holds %zu images",
                      json_array_size (ms));
  size_t i;
  json_t *e;
  json_array_foreach (ms, i, e)
  {
    if (r < 0)
      break;
    cleanup_free char *name = im->name ? xstrdup (im->name)
                                       : full_name (json_string_value (json_object_get (
                                                        json_object_get (e, "annotations"),
                                                        "org.opencontainers.image.ref.name")),
                                                    false);
    r = import_desc (im, e, name, 0, err);
  }
  json_decref (index);
  return r;
}

static int
import_docker (import_t *im, ib_error_t *err)
{
  cleanup_free char *text = NULL;
  size_t len;
  if (read_member (im, "manifest.json", &text, &len, err) < 0)
    return -1;
  json_t *list = json_loadb (text, len, 0, NULL);
  int r = json_is_array (list) ? 0 : ib_error_set (err, EINVAL, "manifest.json: not an array");
  if (r == 0 && im->name && json_array_size (list) != 1)
    r = ib_error_set (err, EINVAL, "a name is given but the archive holds %zu images",
                      json_array_size (list));
  size_t i;
  json_t *e;
  json_array_foreach (list, i, e)
  {
    if (r < 0)
      break;
    const char *cfg_path = json_string_value (json_object_get (e, "Config"));
    json_t *layers = json_object_get (e, "Layers");
    if (cfg_path == NULL || !json_is_array (layers))
      {
        r = ib_error_set (err, EINVAL, "manifest.json: an entry without Config or Layers");
        break;
      }
    cleanup_free char *cdata = NULL;
    size_t clen;
    json_t *config = NULL;
    cleanup_strv char **diff_ids = NULL;
    ib_descriptor_t cd = { .media_type = (char *) IB_MT_OCI_CONFIG };
    if (read_member (im, cfg_path, &cdata, &clen, err) < 0
        || ib_config_parse (cdata, clen, &config, err) < 0
        || ib_config_diff_ids (config, &diff_ids, err) < 0
        || ib_store_put_blob (im->store, cdata, clen, cd.digest, err) < 0)
      {
        if (config)
          json_decref (config);
        r = ib_error_prefix (err, "%s", cfg_path);
        break;
      }
    json_decref (config);
    cd.size = (int64_t) clen;
    size_t n = json_array_size (layers);
    if (ib_strv_len (diff_ids) != n)
      {
        r = ib_error_set (err, EINVAL, "%s lists %zu diff_ids, manifest.json %zu layers",
                          cfg_path, ib_strv_len (diff_ids), n);
        break;
      }
    ib_descriptor_t *ld = xmalloc ((n ? n : 1) * sizeof *ld); /* zeroed */
    for (size_t k = 0; r == 0 && k < n; k++)
      {
        const char *lp = json_string_value (json_array_get (layers, k));
        unsigned char magic[4];
        uint64_t sz = 0;
        if (lp == NULL)
          r = ib_error_set (err, EINVAL, "manifest.json: layer %zu is not a path", k);
        else if (copy_member (im, lp, NULL, ld[k].digest, &sz, magic, err) < 0)
          r = -1;
        else if (magic[0] == 0x1f && magic[1] == 0x8b)
          ld[k].media_type = (char *) IB_MT_OCI_LAYER_GZIP;
        else if (magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f && magic[3] == 0xfd)
          ld[k].media_type = (char *) IB_MT_OCI_LAYER_ZSTD;
        else if (strcmp (ld[k].digest, diff_ids[k]) != 0)
          r = ib_error_set (err, EINVAL, "%s: digest %s is not the config's diff_id %s", lp,
                            ld[k].digest, diff_ids[k]);
        else
          ld[k].media_type = (char *) IB_MT_OCI_LAYER;
        ld[k].size = (int64_t) sz;
      }
    if (r == 0)
      {
        cleanup_free char *mj = ib_manifest_serialize (&cd, ld, n, NULL);
        char md[IB_DIGEST_LEN];
        r = ib_store_put_blob (im->store, mj, strlen (mj), md, err);
        json_t *tags = json_object_get (e, "RepoTags");
        bool named = false;
        if (r == 0 && im->name)
          {
            pend_tag (im, im->name, IB_MT_OCI_MANIFEST, md, (int64_t) strlen (mj));
            named = true;
          }
        size_t t;
        json_t *tag;
        json_array_foreach (tags, t, tag)
        {
          cleanup_free char *full = im->name ? NULL : full_name (json_string_value (tag), true);
          if (r == 0 && full)
            {
              pend_tag (im, full, IB_MT_OCI_MANIFEST, md, (int64_t) strlen (mj));
              named = true;
            }
        }
        if (r == 0 && !named)
          ib_strv_push (&im->loaded, md);
      }
    free (ld);
  }
  json_decref (list);
  return r;
}

/* A tar unpacked into a new directory of the store's tmp/: regular files,
 * directories, symbolic and hard links, nothing else; no owners or modes
 * of the archive's; no absolute path or ".." (libarchive's secure
 * extraction also refuses to write through a link). */
static int
unpack_tar (import_t *im, const char *path, char **dir, ib_error_t *err)
{
  if (ib_store_tmp_dir (im->store, "load-", dir, err) < 0)
    return -1;
  struct archive *a = archive_read_new ();
  struct archive *w = archive_write_disk_new ();
  archive_read_support_filter_all (a);
  archive_read_support_format_tar (a);
  archive_write_disk_set_options (w, ARCHIVE_EXTRACT_SECURE_SYMLINKS
                                         | ARCHIVE_EXTRACT_SECURE_NODOTDOT);
  int ret = 0;
  if (archive_read_open_filename (a, path, 1 << 16) != ARCHIVE_OK)
    ret = ib_error_set (err, archive_errno (a) > 0 ? archive_errno (a) : EINVAL, "read: %s",
                        archive_error_string (a));
  struct archive_entry *e;
  int rc;
  while (ret == 0 && (rc = archive_read_next_header (a, &e)) != ARCHIVE_EOF)
    {
      if (rc < ARCHIVE_WARN)
        {
          ret = ib_error_set (err, EINVAL, "not a tar archive, or a damaged one: %s",
                              archive_error_string (a));
          break;
        }
      /* copies: the entry's own strings change with set_pathname */
      cleanup_free char *p = xstrdup (archive_entry_pathname (e) ?: "");
      cleanup_free char *hl = archive_entry_hardlink (e) ? xstrdup (archive_entry_hardlink (e))
                                                         : NULL;
      mode_t type = archive_entry_filetype (e);
      if (*p == '\0' || *p == '/' || (hl && *hl == '/'))
        {
          ret = ib_error_set (err, EINVAL, "member %s: an absolute path", *p ? p : "(unnamed)");
          break;
        }
      if (!hl && type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK)
        continue; /* devices, fifos: not part of an image archive */
      cleanup_free char *full = xasprintf ("%s/%s", *dir, p);
      archive_entry_set_pathname (e, full);
      cleanup_free char *hfull = hl ? xasprintf ("%s/%s", *dir, hl) : NULL;
      if (hl)
        archive_entry_set_hardlink (e, hfull);
      archive_entry_set_perm (e, type == AE_IFDIR ? 0755 : 0644);
      if (archive_write_header (w, e) < ARCHIVE_WARN)
        {
          ret = ib_error_set (err, archive_errno (w) > 0 ? archive_errno (w) : EINVAL,
                              "member %s: %s", p, archive_error_string (w));
          break;
        }
      const void *buf;
      size_t size;
      la_int64_t off;
      while ((rc = archive_read_data_block (a, &buf, &size, &off)) == ARCHIVE_OK)
        if (archive_write_data_block (w, buf, size, off) < ARCHIVE_WARN)
          {
            rc = ARCHIVE_FATAL;
            ret = ib_error_set (err, archive_errno (w) > 0 ? archive_errno (w) : EIO,
                                "member %s: %s", p, archive_error_string (w));
            break;
          }
      if (ret == 0 && rc != ARCHIVE_EOF)
        ret = ib_error_set (err, EINVAL, "member %s: %s", p, archive_error_string (a));
    }
  if (archive_write_close (w) != ARCHIVE_OK && ret == 0)
    ret = ib_error_set (err, EIO, "%s", archive_error_string (w));
  archive_write_free (w);
  archive_read_free (a);
  return ret;
}

int
ib_import (ib_store_t *store, const char *path, const char *name, char ***loaded, ib_error_t *err)
{
  if (loaded)
    *loaded = NULL;
  /* a name given is checked before anything is read */
  cleanup_free char *given = name ? full_name (name, true) : NULL;
  if (name && given == NULL)
    return ib_error_set (err, EINVAL, "load %s: name %s: not an image reference (a tag, "
                                      "no digest)",
                         path, name);
  import_t im = { .store = store, .shown = path, .root = -1, .name = given };
  cleanup_free char *dir = NULL;
  int ret = -1;
  struct stat st;
  if (stat (path, &st) < 0)
    {
      ib_error_sys (err, errno, "load %s", path);
      return -1;
    }
  if (S_ISDIR (st.st_mode))
    im.root = open (path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  else if (unpack_tar (&im, path, &dir, err) == 0)
    im.root = open (dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  else
    goto out;
  if (im.root < 0)
    {
      ib_error_sys (err, errno, "open %s", dir ? dir : path);
      goto out;
    }
  /* an OCI layout, unless it has only docker's manifest.json (docker 25
   * writes both; then the layout is read) */
  struct stat ls;
  bool oci = fstatat (im.root, "oci-layout", &ls, 0) == 0;
  if (!oci && fstatat (im.root, "manifest.json", &ls, 0) != 0)
    {
      ib_error_set (err, EINVAL, "neither an OCI image layout (oci-layout, index.json) nor a "
                                 "docker save archive (manifest.json)");
      goto out;
    }
  if ((oci ? import_oci (&im, err) : import_docker (&im, err)) < 0)
    goto out;
  for (size_t i = 0; i < im.n_tags; i++)
    {
      struct pending_tag *t = &im.tags[i];
      if (ib_store_tag (store, t->name, t->media_type, t->digest, t->size, err) < 0)
        goto out;
      ib_strv_push (&im.loaded, t->name);
    }
  ret = 0;
out:
  if (ret < 0)
    fail (&im, err);
  if (im.root >= 0)
    close (im.root);
  if (dir)
    ib_rm_rf (dir, NULL);
  for (size_t i = 0; i < im.n_tags; i++)
    {
      free (im.tags[i].name);
      free (im.tags[i].media_type);
    }
  free (im.tags);
  if (ret == 0 && loaded)
    *loaded = im.loaded;
  else
    ib_strv_free (im.loaded);
  return ret;
}
