/* builder/artifact/oci_backend.c — the artifact repository's OCI-registry
 * backend: one OCI image manifest per key (artifactType IB_ARTIFACT_TYPE,
 * a config blob with the characteristics, one layer per file titled with
 * its path below the key), tagged ib_artifact_oci_tag(key), pushed and
 * pulled through the registry client (oci/registry.h) and the store.
 */
#include "builder/artifact/private.h"

#include "common/util.h"
#include "oci/digest.h"
#include "oci/manifest.h"
#include "oci/ref.h"
#include "oci/registry.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

int
ib_art_push_oci (ib_artifact_opts_t *o, ib_store_t *store, const char *key,
                 const art_file_t *f, size_t n, ib_error_t *err)
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
ib_art_pull_oci (ib_artifact_opts_t *o, ib_store_t *store, const char *key, const char *tmp,
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
      ib_error_t ge = NULL;
      ret = ib_registry_get_manifest (r, ref.repository, tag, &data, &len, NULL, NULL, &ge);
      if (ret < 0 && ge->status != ENOENT)
        ib_error_propagate (err, &ge);
      else if (ret < 0)
        {
          /* say what the commit has, if anything: readable tags
           * "COMMIT_LIBTYPE_OS_VARIANT" (ib_artifact_oci_tag) */
          ib_error_free (&ge);
          cleanup_strv char **tags = NULL;
          cleanup_strv char **found = NULL;
          cleanup_free char *start = xasprintf ("%s_", o->id.commit);
          if (ib_registry_list_tags (r, ref.repository, &tags, NULL) == 0)
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
                  ib_art_add_distinct (&found, t);
              }
          cleanup_free char *hint = ib_art_stored_hint (o->id.commit, found);
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
    else if (ib_art_files_has (*f, *n, rel))
      ret = ib_error_set (err, EPROTO, "tag %s: two layers are titled %s", tag, rel);
    if (ret < 0)
      break;
    ib_info ("Downloading %s (%s)", rel, d);
    ret = ib_registry_fetch_blob (r, ref.repository, d, store, err);
    cleanup_free char *blob = ret == 0 ? ib_store_blob_path (store, d) : NULL;
    cleanup_close int in = ret == 0 ? open (blob, O_RDONLY | O_CLOEXEC) : -1;
    if (ret == 0 && in < 0)
      ret = ib_error_sys (err, errno, "open %s", blob);
    int out = ret == 0 ? ib_art_create_in (tmp, rel, err) : -1;
    if (ret == 0 && out < 0)
      ret = -1;
    if (ret == 0 && ib_copy_fd_data (in, out, blob, err) < 0)
      {
        close (out);
        ret = -1;
      }
    else if (ret == 0)
      ret = ib_art_finish_fd (out, rel, err);
    if (ret == 0)
      ib_art_files_add (f, n, rel, rel);
  }
  if (ret == 0 && *n == 0)
    ret = ib_error_set (err, ENOENT, "no artifact found for %s in %s (tag %s lists no files)",
                        key, o->repository, tag);
  json_decref (m);
  ib_registry_free (r);
  ib_ref_free (&ref);
  return ret;
}
