/* oci/pull.c — pulling images (ib_pull, ib_pull_begin .. ib_pull_end).
 *
 * The manifest comes from the first source that serves it (registries.conf
 * mirrors in order, then the primary location, maybe rewritten; blocked
 * registries refused); an index is walked to one platform's manifest
 * (nested indexes, at most INDEX_DEPTH_MAX deep), every document checked
 * against the digest and size that named it; the image config is read
 * into memory and checked; the layers are downloaded by oci/fetch.c (read
 * as they arrive by a caller that unpacks them); last the manifest is
 * stored and tagged with the source it came from.  Nothing is stored
 * before the manifest and config checked out.
 */
#include "oci/registry_int.h"
#include "oci/manifest.h"
#include "oci/regconf.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define CONFIG_MAX (8 << 20)      /* bytes; image configs are read into memory */
#define INDEX_DEPTH_MAX 4         /* an index in an index in an index in an index */

static void
short_digest (const char *digest, char out[24])
{
  snprintf (out, 24, "sha256:%.8s..", ib_digest_hex (digest));
}

static bool
is_config_media_type (const char *mt)
{
  return strcmp (mt, IB_MT_OCI_CONFIG) == 0 || strcmp (mt, IB_MT_DOCKER_CONFIG) == 0;
}

/* ---------- pull: from a reference to one platform's manifest ---------- */

typedef struct manifest_walk
{
  const char *repo, *shown;
  const char *os, *arch, *variant; /* the platform asked for */
  ib_buf_t offered;                /* platforms the indexes walked offer, for the error */
  char **indexes;                  /* verified index documents, stored at the end */
  size_t *index_lens;
  size_t n_indexes;
} manifest_walk_t;

static void
walk_offered (manifest_walk_t *w, const char *list)
{
  /* append each platform of `list` ("a, b") not listed yet */
  const char *p = list;
  while (p && *p)
    {
      size_t n = strcspn (p, ",");
      cleanup_free char *one = xstrndup (p, n);
      bool seen = false;
      const char *q = w->offered.data;
      while (q && *q && !seen)
        {
          size_t k = strcspn (q, ",");
          seen = k == n && strncmp (q, one, n) == 0;
          q += k;
          while (*q == ',' || *q == ' ')
            q++;
        }
      if (!seen)
        ib_buf_printf (&w->offered, "%s%s", w->offered.len ? ", " : "", one);
      p += n;
      while (*p == ',' || *p == ' ')
        p++;
    }
}

static void
walk_keep_index (manifest_walk_t *w, const char *data, size_t len)
{
  w->indexes = xrealloc (w->indexes, (w->n_indexes + 1) * sizeof *w->indexes);
  w->index_lens = xrealloc (w->index_lens, (w->n_indexes + 1) * sizeof *w->index_lens);
  char *copy = xmalloc (len + 1);
  memcpy (copy, data, len);
  copy[len] = '\0';
  w->indexes[w->n_indexes] = copy;
  w->index_lens[w->n_indexes++] = len;
}

static void
walk_free (manifest_walk_t *w)
{
  for (size_t i = 0; i < w->n_indexes; i++)
    free (w->indexes[i]);
  free (w->indexes);
  free (w->index_lens);
  ib_buf_free (&w->offered);
}

/* GET the manifest or index an index entry names; the bytes must hash to
 * its digest (ib_registry_get_manifest checks) and be as long as its size. */
static int
get_child (ib_registry_t *r, manifest_walk_t *w, const ib_descriptor_t *d, char **data,
           size_t *len, ib_doc_kind_t *kind, ib_error_t *err)
{
  cleanup_free char *ct = NULL;
  char got[IB_DIGEST_LEN];
  if (ib_registry_get_manifest (r, w->repo, d->digest, data, len, &ct, got, err) < 0)
    return -1;
  int ret = 0;
  if ((int64_t) *len != d->size)
    ret = ib_error_set (err, EINVAL, "manifest %s: the index gives its size as %lld bytes, the "
                        "registry sent %zu", d->digest, (long long) d->size, *len);
  else if (ib_doc_kind (*data, *len, ct, kind, err) < 0)
    ret = ib_error_prefix (err, "manifest %s", d->digest);
  else if (*kind == IB_DOC_INDEX && ib_media_type_is_manifest (d->media_type))
    ret = ib_error_set (err, EINVAL, "manifest %s: the index lists it as an image manifest (%s) "
                        "but it is an index", d->digest, d->media_type);
  if (ret < 0)
    {
      free (*data);
      *data = NULL;
    }
  return ret;
}

/* Search the index `data` (digest `digest`, `depth` levels deep) for the
 * platform's manifest: 0 and *mdata etc. set when found, 1 when it holds
 * none (w->offered extended), -1 on errors. */
static int
walk_index (ib_registry_t *r, manifest_walk_t *w, const char *data, size_t len,
            const char *digest, int depth, char **mdata, size_t *mlen, char mdigest[IB_DIGEST_LEN],
            ib_error_t *err)
{
  for (size_t skip = 0;; skip++)
    {
      ib_descriptor_t sel;
      cleanup_free char *offered = NULL;
      ib_error_t e = NULL;
      if (ib_index_select (data, len, w->os, w->arch, w->variant, skip, &sel, &offered, &e) < 0)
        {
          if (e->status != ENOENT)
            {
              *err = e;
              return ib_error_prefix (err, "index %s", digest);
            }
          ib_error_free (&e);
          walk_offered (w, offered);
          return 1;
        }
      char *cdata = NULL;
      size_t clen = 0;
      ib_doc_kind_t kind;
      char sd[24];
      short_digest (digest, sd);
      if (get_child (r, w, &sel, &cdata, &clen, &kind, err) < 0)
        {
          ib_descriptor_clear (&sel);
          return -1;
        }
      int rc;
      if (kind == IB_DOC_MANIFEST)
        {
          cleanup_free char *ps = ib_platform_string (sel.os, sel.arch, sel.variant);
          ib_info ("pull %s: index %s -> %s manifest", w->shown, sd, ps);
          *mdata = cdata;
          *mlen = clen;
          memcpy (mdigest, sel.digest, IB_DIGEST_LEN);
          rc = 0;
        }
      else if (depth >= INDEX_DEPTH_MAX)
        {
          free (cdata);
          rc = ib_error_set (err, ELOOP, "index %s: indexes nested more than %d deep", sel.digest,
                             INDEX_DEPTH_MAX);
        }
      else
        {
          ib_info ("pull %s: index %s -> index %.19s..", w->shown, sd, sel.digest);
          rc = walk_index (r, w, cdata, clen, sel.digest, depth + 1, mdata, mlen, mdigest, err);
          free (cdata);
        }
      ib_descriptor_clear (&sel);
      if (rc == 0)
        walk_keep_index (w, data, len);
      if (rc <= 0)
        return rc;
      /* that nested index holds nothing for us: the next one */
    }
}

/* GET a small blob (an image config) into memory; verified against the
 * descriptor's digest and size. */
static int
get_small_blob (ib_registry_t *r, const char *repo, const ib_descriptor_t *d, char **data,
                size_t *len, ib_error_t *err)
{
  *data = NULL;
  if (d->size > CONFIG_MAX)
    return ib_error_set (err, EFBIG, "blob %s: %lld bytes, more than the %d allowed for an "
                         "image config", d->digest, (long long) d->size, CONFIG_MAX);
  xfer_t x;
  char got[IB_DIGEST_LEN];
  int ret = registry_get_small (r, repo, "blobs", d->digest, NULL, CONFIG_MAX, &x, got, err);
  if (ret == 0)
    {
      if (strcmp (got, d->digest) != 0)
        ret = ib_error_set (err, EINVAL, "digest mismatch (the bytes received hash to %s)", got);
      else if ((int64_t) x.resp.len != d->size)
        ret = ib_error_set (err, EINVAL, "the manifest gives its size as %lld bytes, the "
                            "registry sent %zu", (long long) d->size, x.resp.len);
      else
        {
          *len = x.resp.len;
          *data = ib_buf_steal (&x.resp);
        }
    }
  xfer_free (&x);
  if (ret < 0)
    ib_error_prefix (err, "config %s", d->digest);
  return ret;
}

/* The manifest-resolution part of a pull (distribution-spec "Pulling
 * manifests", image-index.md): GET the reference (verified when it is a
 * digest); schema 1 refused; from an index (or nested indexes, at most
 * INDEX_DEPTH_MAX deep) the platform's manifest, whose bytes must match the
 * index's descriptor (digest and size).  The image config is read into
 * memory and verified; when the manifest did not come from an index, its
 * platform is checked against an explicitly asked one (error) or the host's
 * (warning).  Only when everything checked out are the indexes walked and
 * the config stored as blobs; the platform manifest itself is left to the
 * caller.  *data (caller frees), *len, mdigest and *m (ib_manifest_free)
 * describe the platform manifest. */
static int
resolve_manifest (ib_registry_t *r, ib_store_t *store, const ib_ref_t *ref, const char *shown,
                  const char *os, const char *arch, const char *variant, bool explicit_platform,
                  char **top_doc, size_t top_len, const char *ctype,
                  const char top_digest[IB_DIGEST_LEN], char **data, size_t *len,
                  char mdigest[IB_DIGEST_LEN], ib_manifest_t **m, json_t **config_out,
                  ib_error_t *err)
{
  *data = NULL;
  *m = NULL;
  *config_out = NULL;
  manifest_walk_t w = { .repo = ref->repository, .shown = shown, .os = os, .arch = arch,
                        .variant = variant };
  cleanup_free char *top = steal_pointer (top_doc);
  cleanup_free char *config = NULL;
  size_t config_len = 0;
  ib_doc_kind_t kind;
  bool from_index = false;
  int ret = -1;

  if (ib_doc_kind (top, top_len, ctype, &kind, err) < 0)
    goto out;
  if (kind == IB_DOC_INDEX)
    {
      int rc = walk_index (r, &w, top, top_len, top_digest, 1, data, len, mdigest, err);
      if (rc < 0)
        goto out;
      if (rc > 0)
        {
          cleanup_free char *want = ib_platform_string (os, arch, variant);
          ib_error_set (err, ENOENT, "no image for %s; the index offers %s", want,
                        w.offered.len ? w.offered.data : "no image for any platform");
          goto out;
        }
      from_index = true;
    }
  else
    {
      *data = steal_pointer (&top);
      *len = top_len;
      memcpy (mdigest, top_digest, IB_DIGEST_LEN);
    }
  if (ib_manifest_parse (*data, *len, m, err) < 0)
    goto out;
  if (!is_config_media_type ((*m)->config.media_type))
    {
      ib_error_set (err, ENOTSUP, "not a container image (config media type %s)",
                    (*m)->config.media_type);
      goto out;
    }
  /* a config the store holds (another name of the image, a base pulled
   * before) is read there: verified, and no request; one larger than a
   * config may be (a manifest naming a layer as its config) is left to
   * get_small_blob, which refuses it before reading a byte */
  if (store == NULL || (*m)->config.size > CONFIG_MAX
      || !ib_store_has_blob (store, (*m)->config.digest)
      || ib_store_read_blob (store, (*m)->config.digest, &config, &config_len, NULL) < 0
      || (int64_t) config_len != (*m)->config.size)
    {
      free (config);
      config = NULL;
      if (get_small_blob (r, ref->repository, &(*m)->config, &config, &config_len, err) < 0)
        goto out;
    }
  json_error_t je;
  json_t *c = json_loadb (config, config_len, 0, &je);
  if (!json_is_object (c))
    {
      if (c)
        json_decref (c);
      ib_error_set (err, EINVAL, "config %s: not a JSON object (%s)", (*m)->config.digest,
                    je.text);
      goto out;
    }
  *config_out = c;
  if (!from_index)
    {
      const char *cos = json_string_value (json_object_get (c, "os"));
      const char *carch = json_string_value (json_object_get (c, "architecture"));
      const char *cvar = json_string_value (json_object_get (c, "variant"));
      int rc = 0;
      if (cos && carch && ib_platform_rank (os, arch, variant, cos, carch, cvar) == 0)
        {
          cleanup_free char *have = ib_platform_string (cos, carch, cvar);
          cleanup_free char *want = ib_platform_string (os, arch, variant);
          if (explicit_platform)
            rc = ib_error_set (err, ENOENT, "the image is for %s, not %s (it is a single-platform "
                               "image, not an index)", have, want);
          else
            ib_warn ("pull %s: the image is for %s, not for this host's %s", shown, have, want);
        }
      if (rc < 0)
        goto out;
    }
  for (size_t i = 0; i < w.n_indexes; i++)
    if (ib_store_put_blob (store, w.indexes[i], w.index_lens[i], NULL, err) < 0)
      goto out;
  if (ib_store_put_blob (store, config, config_len, NULL, err) < 0)
    goto out;
  ret = 0;
out:
  if (ret < 0)
    {
      free (*data);
      *data = NULL;
      ib_manifest_free (*m);
      *m = NULL;
      if (*config_out)
        json_decref (*config_out);
      *config_out = NULL;
    }
  walk_free (&w);
  return ret;
}

/* Get the manifest `reference` of `ref` from the first source that serves
 * it: registries.conf's mirrors in order, then the primary location (a
 * mirror that fails, whatever the reason, hands over to the next with a
 * debug line).  On success *r is a client for that source and ref's
 * registry and repository are replaced by the source's. */
int
pull_open (ib_ref_t *ref, const char *reference, const char *shown, ib_registry_t **r,
           char **data, size_t *len, char **ctype, char mdigest[IB_DIGEST_LEN], ib_error_t *err)
{
  *r = NULL;
  const ib_regconf_t *conf;
  ib_reg_source_t *src = NULL;
  size_t n = 0;
  if (ib_regconf_get (&conf, err) < 0
      || ib_regconf_sources (conf, ref->registry, ref->repository, ref->digest != NULL, false,
                             &src, &n, err)
             < 0)
    return -1;
  int ret = -1;
  for (size_t i = 0; i < n; i++)
    {
      ib_ref_t at = { .registry = src[i].registry, .repository = src[i].repository,
                      .tag = ref->tag, .digest = ref->digest };
      if (src[i].insecure && !registry_is_insecure (at.registry))
        ib_registry_add_insecure (at.registry);
      ib_error_t e = NULL;
      ib_registry_t *c = NULL;
      if (ib_registry_new (&at, &c, &e) == 0
          && ib_registry_get_manifest (c, at.repository, reference, data, len, ctype, mdigest, &e)
                 == 0)
        {
          if (src[i].mirror)
            ib_info ("pull %s: from mirror %s/%s", shown, at.registry, at.repository);
          else if (strcmp (at.registry, ref->registry) || strcmp (at.repository, ref->repository))
            ib_info ("pull %s: from %s/%s", shown, at.registry, at.repository);
          free (ref->registry);
          free (ref->repository);
          ref->registry = steal_pointer (&src[i].registry);
          ref->repository = steal_pointer (&src[i].repository);
          *r = c;
          ret = 0;
          break;
        }
      ib_registry_free (c);
      if (i + 1 == n)
        {
          *err = e;
          break;
        }
      ib_debug ("pull %s: mirror %s/%s: %s; trying the next source", shown, at.registry,
                at.repository, e->msg);
      ib_error_free (&e);
    }
  ib_reg_sources_free (src, n);
  return ret;
}

struct ib_pull_session
{
  ib_store_t *store;
  ib_ref_t ref;
  char *shown;
  ib_registry_t *r;
  char *data;                 /* the image manifest's bytes as the registry sent them */
  size_t len;
  char mdigest[IB_DIGEST_LEN];
  char index_digest[IB_DIGEST_LEN]; /* the index it was chosen from, or "" */
  ib_manifest_t *m;
  json_t *config;
  ib_fetch_t *fetch;
  ib_progress_t *progress;
};

static void
pull_session_free (ib_pull_session_t *s)
{
  if (s == NULL)
    return;
  ib_fetch_free (s->fetch);
  ib_progress_end (s->progress);
  ib_registry_free (s->r);
  ib_manifest_free (s->m);
  if (s->config)
    json_decref (s->config);
  free (s->data);
  free (s->shown);
  ib_ref_free (&s->ref);
  free (s);
}

int
ib_pull_begin (ib_store_t *store, const char *ref_string, const char *os, const char *arch,
               const char *variant, bool unpacking, ib_pull_session_t **out, ib_error_t *err)
{
  *out = NULL;
  ib_ref_t ref;
  if (ib_ref_parse (ref_string, &ref, err) < 0)
    return ib_error_prefix (err, "pull");
  cleanup_free char *shown = ib_ref_string (&ref);
  bool explicit_platform = os != NULL || arch != NULL;
  if (os == NULL || arch == NULL)
    {
      const char *hos, *harch, *hvar;
      ib_host_platform (&hos, &harch, &hvar);
      if (os == NULL)
        os = hos;
      if (arch == NULL)
        {
          arch = harch;
          if (variant == NULL)
            variant = hvar;
        }
    }

  ib_registry_t *r = NULL;
  char *data = NULL;
  size_t len = 0;
  char mdigest[IB_DIGEST_LEN];
  ib_manifest_t *m = NULL;
  int ret = -1;
  cleanup_free char *ctype = NULL;
  cleanup_free char *top = NULL;
  size_t top_len = 0;
  char top_digest[IB_DIGEST_LEN];
  json_t *config = NULL;
  const char *reference = ref.digest ? ref.digest : ref.tag;

  /* from here on `ref` names where the image comes from (a mirror, a
   * location registries.conf rewrote); `shown` keeps the name asked for */
  if (pull_open (&ref, reference, shown, &r, &top, &top_len, &ctype, top_digest, err) < 0
      || resolve_manifest (r, store, &ref, shown, os, arch, variant, explicit_platform, &top,
                           top_len, ctype, top_digest, &data, &len, mdigest, &m, &config, err)
             < 0)
    goto out;
  ib_fetch_t *fetch = NULL;
  ib_progress_t *progress = NULL;
  {
    cleanup_free char *title = xasprintf ("pull %s", shown);
    progress = ib_progress_begin (title);
  }
  if (ib_fetch_start (r, store, ref.repository, shown, m->layers, m->n_layers, progress,
                      unpacking, &fetch, err)
      < 0)
    {
      ib_progress_end (progress);
      json_decref (config);
      goto out;
    }
  ib_pull_session_t *s = xmalloc (sizeof *s);
  s->store = store;
  s->ref = ref;
  memset (&ref, 0, sizeof ref);
  s->shown = steal_pointer (&shown);
  s->r = steal_pointer (&r);
  s->data = steal_pointer (&data);
  s->len = len;
  memcpy (s->mdigest, mdigest, IB_DIGEST_LEN);
  /* a manifest that is not the document the reference named came from an index */
  snprintf (s->index_digest, sizeof s->index_digest, "%s",
            strcmp (mdigest, top_digest) != 0 ? top_digest : "");
  s->m = steal_pointer (&m);
  s->config = config;
  s->fetch = fetch;
  s->progress = progress;
  *out = s;
  ret = 0;

out:
  if (ret < 0)
    ib_error_prefix (err, "pull %s", shown);
  free (data);
  ib_manifest_free (m);
  ib_registry_free (r);
  ib_ref_free (&ref);
  return ret;
}

const ib_manifest_t *
ib_pull_session_manifest (const ib_pull_session_t *s)
{
  return s->m;
}

json_t *
ib_pull_session_config (const ib_pull_session_t *s)
{
  return s->config;
}

ssize_t
ib_pull_session_read (ib_pull_session_t *s, size_t layer, ib_fetch_cursor_t *cur, void *buf,
                      size_t len, ib_error_t *err)
{
  return ib_fetch_read (s->fetch, layer, cur, buf, len, err);
}

void
ib_pull_session_layer_done (ib_pull_session_t *s, size_t layer, bool ok, const char *why)
{
  if (layer < s->m->n_layers)
    ib_progress_done (s->progress, (int) layer, ok, ok ? "Pull complete" : why);
}

void
ib_pull_abort (ib_pull_session_t *s)
{
  pull_session_free (s);
}

int
ib_pull_end (ib_pull_session_t *s, ib_descriptor_t *out, ib_error_t *err)
{
  if (out)
    memset (out, 0, sizeof *out);
  ib_store_t *store = s->store;
  const char *shown = s->shown;
  ib_manifest_t *m = s->m;
  /* where it came from (a mirror, maybe): a source for cross-repo mounts */
  cleanup_free char *source = xasprintf ("%s/%s", s->ref.registry, s->ref.repository);
  /* the registry's bytes, kept as they came: their digest is the image's
   * digest everywhere it is shown, and what a push sends */
  ib_descriptor_t served = { .media_type = xstrdup (m->media_type), .size = (int64_t) s->len };
  memcpy (served.digest, s->mdigest, IB_DIGEST_LEN);
  char tagged[IB_DIGEST_LEN]; /* what index.json's tag points at */
  memcpy (tagged, s->mdigest, IB_DIGEST_LEN);
  size_t tagged_len = s->len;
  const char *tagged_type = m->media_type;
  cleanup_free char *oci = NULL;
  int ret = -1;
  if (ib_fetch_wait (s->fetch, err) < 0
      || ib_store_put_blob (store, s->data, s->len, NULL, err) < 0)
    goto out;
  if (strcmp (m->media_type, IB_MT_DOCKER_MANIFEST) == 0)
    {
      /* skopeo's oci: transport reads only OCI descriptors from index.json:
       * tag an OCI rendering of the same config and layers, and record the
       * served manifest on the tag (IB_REGISTRY_DIGEST_ANNOTATION). */
      oci = ib_manifest_serialize (&m->config, m->layers, m->n_layers, NULL);
      tagged_len = strlen (oci);
      tagged_type = IB_MT_OCI_MANIFEST;
      if (ib_store_put_blob (store, oci, tagged_len, tagged, err) < 0)
        goto out;
    }
  ib_tag_meta_t meta = { .source = source, .served_digest = served.digest,
                         .served_media_type = served.media_type,
                         .index_digest = s->index_digest[0] ? s->index_digest : NULL };
  if (ib_store_tag_meta (store, shown, tagged_type, tagged, (int64_t) tagged_len, &meta, err) < 0)
    goto out;
  if (ib_progress_get_mode () == IB_PROGRESS_QUIET)
    ib_info ("pull %s: manifest %s", shown, served.digest);
  else
    ib_progress_message (s->progress, "Digest: %s", served.digest);
  if (out)
    {
      *out = served;
      memset (&served, 0, sizeof served);
    }
  ret = 0;
out:
  if (ret < 0)
    ib_error_prefix (err, "pull %s", shown);
  ib_descriptor_clear (&served);
  pull_session_free (s);
  return ret;
}

int
ib_pull (ib_store_t *store, const char *ref_string, const char *os, const char *arch,
         const char *variant, ib_descriptor_t *out, ib_error_t *err)
{
  if (out)
    memset (out, 0, sizeof *out);
  ib_pull_session_t *s = NULL;
  if (ib_pull_begin (store, ref_string, os, arch, variant, false, &s, err) < 0)
    return -1;
  return ib_pull_end (s, out, err);
}
