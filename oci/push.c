/* oci/push.c — pushing images (ib_push, ib_push_refs; distribution-spec
 * "Pushing blobs", "Pushing manifests").
 *
 * Blobs: skipped when the registry has them, mounted from another
 * repository of the same registry that holds them (POST ?mount=&from=),
 * else uploaded from the store with pread: one PUT, or PATCH chunks of
 * --chunk-size with Content-Range, each to the Location of the previous
 * answer.  Then the manifest, or for an index each platform's manifest
 * and the index.  Several destinations in one push upload each blob once.
 */
#include "oci/registry_int.h"
#include "oci/manifest.h"
#include "oci/regconf.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *
url_escape (CURL *c, const char *s)
{
  char *e = curl_easy_escape (c, s, 0);
  char *r = xstrdup (e ? e : "");
  curl_free (e);
  return r;
}

/* An upload URL the registry gave (Location): with our token when it is
 * the registry itself, without one when an upload service elsewhere. */
static int
upload_request (ib_registry_t *r, xfer_t *x, const char *url, ib_error_t *err)
{
  if (http_same_origin (url, r->base))
    return registry_do (r, x, url, err);
  return http_once (r, x, url, NULL, err);
}

/* The token scope for pushing to `repo`, mounting from `from` (may be NULL):
 * "repository:dst:pull,push repository:src:pull"; caller frees. */
static char *
upload_scope (const char *repo, const char *from)
{
  if (from)
    return xasprintf ("repository:%s:pull,push repository:%s:pull", repo, from);
  return registry_push_scope (repo);
}

/* POST /v2/<repo>/blobs/uploads/, with ?mount=<digest>&from=<from> when
 * `from` is not NULL (distribution-spec "Mounting a blob from another
 * repository").  *mounted: the registry answered 201 and linked the blob.
 * Else *location (caller frees) is the upload URL of its 202 and
 * *chunk_min its OCI-Chunk-Min-Length (0 when absent). */
static int
start_upload (ib_registry_t *r, const char *repo, const char *digest, const char *from,
              bool *mounted, char **location, uint64_t *chunk_min, ib_error_t *err)
{
  *mounted = false;
  *location = NULL;
  *chunk_min = 0;
  cleanup_free char *scope = upload_scope (repo, from);
  cleanup_free char *url = NULL;
  if (from)
    {
      cleanup_free char *d = url_escape (r->curl, digest);
      cleanup_free char *f = url_escape (r->curl, from);
      url = xasprintf ("%s/v2/%s/blobs/uploads/?mount=%s&from=%s", r->base, repo, d, f);
    }
  else
    url = xasprintf ("%s/v2/%s/blobs/uploads/", r->base, repo);
  xfer_t x;
  xfer_init (&x, "POST");
  x.scope = scope;
  int ret = registry_do (r, &x, url, err);
  if (ret == 0)
    {
      if (from && x.status == 201)
        *mounted = true;
      else if (x.status == 202 && x.location)
        {
          cleanup_free char *used = registry_rebase_url (r, url);
          *location = http_resolve_url (used, x.location);
          *chunk_min = x.chunk_min;
        }
      else if (x.status == 202)
        ret = ib_error_set (err, EPROTO, "the registry started an upload without a Location");
      else
        ret = http_status_error (&x, err);
    }
  xfer_free (&x);
  return ret;
}

/* "<url>?digest=<digest>" (or "&digest=" when url has a query); caller frees. */
static char *
digest_url (ib_registry_t *r, const char *url, const char *digest)
{
  cleanup_free char *d = url_escape (r->curl, digest);
  return xasprintf ("%s%cdigest=%s", url, strchr (url, '?') ? '&' : '?', d);
}

/* Monolithic upload: PUT <location>?digest= with the whole blob, streamed
 * from fd. */
static int
upload_monolithic (ib_registry_t *r, const char *scope, const char *location, const char *digest,
                   int fd, uint64_t size, ib_progress_t *progress, int item, ib_error_t *err)
{
  cleanup_free char *put_url = digest_url (r, location, digest);
  xfer_t x;
  xfer_init (&x, "PUT");
  x.progress = progress;
  x.progress_item = item;
  x.scope = scope;
  x.content_type = "application/octet-stream";
  x.upload_fd = fd;
  x.upload_size = size;
  int ret = upload_request (r, &x, put_url, err);
  if (ret == 0 && (x.status < 200 || x.status >= 300))
    ret = http_status_error (&x, err);
  xfer_free (&x);
  return ret;
}

/* Chunked upload (distribution-spec "Pushing a blob in chunks"): PATCH
 * chunks of `chunk` bytes (at least the registry's OCI-Chunk-Min-Length)
 * with Content-Range: start-end, each to the Location of the previous 202,
 * then PUT ?digest= without a body.  Streamed from fd with pread; *chunks
 * gets the number of PATCH requests. */
static int
upload_chunked (ib_registry_t *r, const char *scope, const char *location, const char *digest,
                int fd, uint64_t size, uint64_t chunk, uint64_t chunk_min, unsigned *chunks,
                ib_progress_t *progress, int item, ib_error_t *err)
{
  if (chunk < chunk_min)
    {
      ib_debug ("blob %s: chunks of %llu bytes, the registry's minimum", digest,
                (unsigned long long) chunk_min);
      chunk = chunk_min;
    }
  *chunks = 0;
  cleanup_free char *cur = xstrdup (location);
  for (uint64_t off = 0; off < size;)
    {
      uint64_t len = size - off < chunk ? size - off : chunk;
      char range[64];
      snprintf (range, sizeof range, "%llu-%llu", (unsigned long long) off,
                (unsigned long long) (off + len - 1));
      xfer_t x;
      xfer_init (&x, "PATCH");
      x.scope = scope;
      x.content_type = "application/octet-stream";
      x.send_range = range;
      x.upload_fd = fd;
      x.upload_base = off;
      x.upload_size = len;
      x.progress = progress;
      x.progress_item = item;
      int ret = upload_request (r, &x, cur, err);
      if (ret == 0 && x.status != 202)
        ret = http_status_error (&x, err);
      if (ret == 0 && x.location)
        {
          char *next = http_resolve_url (cur, x.location);
          free (cur);
          cur = next;
        }
      xfer_free (&x);
      if (ret < 0)
        return ib_error_prefix (err, "chunk bytes %s", range);
      off += len;
      (*chunks)++;
    }
  cleanup_free char *put_url = digest_url (r, cur, digest);
  xfer_t x;
  xfer_init (&x, "PUT");
  x.scope = scope;
  x.content_type = "application/octet-stream";
  x.bulk = true; /* the registry may take its time to assemble the blob */
  int ret = upload_request (r, &x, put_url, err);
  if (ret == 0 && (x.status < 200 || x.status >= 300))
    ret = http_status_error (&x, err);
  xfer_free (&x);
  if (ret < 0)
    return ib_error_prefix (err, "finish chunked upload");
  return 0;
}

/* Put a stored blob into `repo`: mounted from repository `from` of the same
 * registry when `from` is not NULL and the registry agrees (201), else
 * uploaded (into the upload its mount answer started, or a new one):
 * monolithic, or chunked when ib_regconf_chunk_size() is set and the blob
 * is larger.  `how` (64 bytes) gets what happened, for the progress line:
 * "Mounted from REPO", "Pushed" or "Pushed (N chunks)"; bytes sent go to
 * the progress item (may be NULL/-1). */
int
push_upload_blob (ib_registry_t *r, const char *repo, const char *digest, ib_store_t *store,
             const char *from, char how[64], ib_progress_t *progress, int item, ib_error_t *err)
{
  cleanup_free char *path = ib_store_blob_path (store, digest);
  cleanup_close int fd = open (path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    {
      if (errno == ENOENT)
        return ib_error_set (err, ENOENT, "blob %s not found in store %s", digest, store->root);
      return ib_error_sys (err, errno, "blob %s: open %s", digest, path);
    }
  struct stat st;
  if (fstat (fd, &st) < 0)
    return ib_error_sys (err, errno, "blob %s: stat %s", digest, path);

  bool mounted = false;
  cleanup_free char *location = NULL;
  uint64_t chunk_min = 0;
  ib_error_t e = NULL;
  if (start_upload (r, repo, digest, from, &mounted, &location, &chunk_min, &e) < 0)
    {
      if (from == NULL)
        {
          *err = e;
          return ib_error_prefix (err, "push blob %s: start upload", digest);
        }
      ib_debug ("blob %s: mount from %s refused (%s); uploading it", digest, from, e->msg);
      ib_error_free (&e);
      from = NULL;
      if (start_upload (r, repo, digest, NULL, &mounted, &location, &chunk_min, err) < 0)
        return ib_error_prefix (err, "push blob %s: start upload", digest);
    }
  if (mounted)
    {
      snprintf (how, 64, "Mounted from %s", from);
      return 0;
    }
  if (from)
    ib_debug ("blob %s: the registry did not mount it from %s; uploading it", digest, from);
  cleanup_free char *scope = registry_push_scope (repo);
  uint64_t size = (uint64_t) st.st_size, chunk = ib_regconf_chunk_size ();
  int ret;
  ib_progress_set_status (progress, item, "Pushing");
  ib_progress_update (progress, item, 0);
  if (chunk > 0 && size > chunk)
    {
      unsigned n = 0;
      ret = upload_chunked (r, scope, location, digest, fd, size, chunk, chunk_min, &n, progress,
                            item, err);
      snprintf (how, 64, "Pushed (%u chunks)", n);
    }
  else
    {
      ret = upload_monolithic (r, scope, location, digest, fd, size, progress, item, err);
      snprintf (how, 64, "Pushed");
    }
  if (ret == 0)
    ib_progress_update (progress, item, (int64_t) size);
  if (ret < 0)
    return ib_error_prefix (err, "push blob %s", digest);
  return 0;
}

/* ---------- push ---------- */

/* One `imgbuild push`: what is known to be in the registries already, so
 * that several destinations upload each blob once. */
typedef struct push_ctx
{
  ib_store_t *store;
  const char *shown; /* the destination, for messages */
  char **present;    /* "REGISTRY/REPO@DIGEST" known to be there */
  ib_progress_t *progress; /* this destination's display */
} push_ctx_t;

/* docker push's last line for a manifest: "TAG: digest: D size: N" (or
 * without "TAG: " when pushed by digest). */
static void
pushed_message (ib_progress_t *progress, const char *reference, const char *data, size_t len)
{
  char md[IB_DIGEST_LEN];
  ib_digest_buf (data, len, md);
  if (ib_str_has_prefix (reference, "sha256:"))
    ib_progress_message (progress, "digest: %s size: %zu", md, len);
  else
    ib_progress_message (progress, "%s: digest: %s size: %zu", reference, md, len);
}

static bool
push_known (push_ctx_t *pc, const char *registry, const char *repo, const char *digest)
{
  cleanup_free char *key = xasprintf ("%s/%s@%s", registry, repo, digest);
  for (char **p = pc->present; p && *p; p++)
    if (strcmp (*p, key) == 0)
      return true;
  return false;
}

static void
push_note (push_ctx_t *pc, const char *registry, const char *repo, const char *digest)
{
  if (!push_known (pc, registry, repo, digest))
    {
      cleanup_free char *key = xasprintf ("%s/%s@%s", registry, repo, digest);
      ib_strv_push (&pc->present, key);
    }
}

/* A repository of `registry` other than `repo` that holds `digest`: one
 * this push put it in, else one a stored image pulled it from (the store's
 * org.imgbuild.source annotations).  NULL when none; caller frees. */
static char *
mount_source (push_ctx_t *pc, const char *registry, const char *repo, const char *digest)
{
  size_t rn = strlen (registry);
  cleanup_free char *suffix = xasprintf ("@%s", digest);
  for (char **p = pc->present; p && *p; p++)
    if (strncmp (*p, registry, rn) == 0 && (*p)[rn] == '/' && ib_str_has_suffix (*p, suffix))
      {
        char *from = xstrndup (*p + rn + 1, strlen (*p) - rn - 1 - strlen (suffix));
        if (strcmp (from, repo) != 0)
          return from;
        free (from);
      }
  cleanup_strv char **sources = NULL;
  ib_error_t e = NULL;
  if (ib_store_blob_sources (pc->store, digest, &sources, &e) < 0)
    {
      ib_debug ("blob %s: no mount source: %s", digest, e->msg);
      ib_error_free (&e);
      return NULL;
    }
  for (char **s = sources; s && *s; s++)
    if (strncmp (*s, registry, rn) == 0 && (*s)[rn] == '/' && strcmp (*s + rn + 1, repo) != 0)
      return xstrdup (*s + rn + 1);
  return NULL;
}

/* Push one stored image manifest's blobs, then the manifest under
 * `reference`: per blob, known from this push -> skipped; HEAD says it is
 * there -> skipped; else mounted from another repository of the registry
 * when one is known to hold it, else uploaded. */
static int
push_manifest (push_ctx_t *pc, ib_registry_t *r, const char *repo, const char *data, size_t len,
               const char *media_type, const char *reference, ib_error_t *err)
{
  ib_manifest_t *m = NULL;
  if (ib_manifest_parse (data, len, &m, err) < 0)
    return -1;
  int ret = 0;
  for (size_t i = 0; i <= m->n_layers && ret == 0; i++)
    {
      const ib_descriptor_t *d = i == 0 ? &m->config : &m->layers[i - 1];
      const char *already = i == 0 ? "Already exists" : "Layer already exists";
      char id[13];
      ib_progress_short_id (d->digest, id);
      int item = ib_progress_add (pc->progress, id, "Preparing", d->size);
      if (push_known (pc, r->name, repo, d->digest))
        {
          ib_progress_done (pc->progress, item, true, already);
          continue;
        }
      bool exists = false;
      ret = ib_registry_blob_exists (r, repo, d->digest, &exists, err);
      if (ret == 0 && exists)
        ib_progress_done (pc->progress, item, true, already);
      else if (ret == 0)
        {
          cleanup_free char *from = mount_source (pc, r->name, repo, d->digest);
          char how[64];
          ret = push_upload_blob (r, repo, d->digest, pc->store, from, how, pc->progress, item, err);
          if (ret == 0)
            ib_progress_done (pc->progress, item, true, how);
        }
      if (ret < 0)
        ib_progress_done (pc->progress, item, false, err && *err ? (*err)->msg : "failed");
      else
        push_note (pc, r->name, repo, d->digest);
    }
  if (ret == 0)
    ret = ib_registry_put_manifest (r, repo, reference, data, len,
                                    media_type ? media_type : m->media_type, err);
  if (ret == 0)
    pushed_message (pc->progress, reference, data, len);
  ib_manifest_free (m);
  return ret;
}

/* Push the stored image `d` (bytes data/len) to one destination. */
static int
push_one (push_ctx_t *pc, ib_registry_t *r, const ib_ref_t *dst, const ib_descriptor_t *d,
          const char *data, size_t len, ib_doc_kind_t kind, ib_error_t *err)
{
  const char *reference = dst->tag ? dst->tag : d->digest;
  if (kind != IB_DOC_INDEX)
    return push_manifest (pc, r, dst->repository, data, len, d->media_type, reference, err);
  /* an index: each platform's manifest by digest first, then the index */
  json_t *j = json_loadb (data, len, 0, NULL);
  json_t *ms = json_object_get (j, "manifests");
  size_t i;
  json_t *e;
  int rc = 0;
  json_array_foreach (ms, i, e)
  {
    const char *cmt = json_string_value (json_object_get (e, "mediaType"));
    const char *cd = json_string_value (json_object_get (e, "digest"));
    cleanup_free char *cdata = NULL;
    size_t clen = 0;
    if (cd == NULL || !ib_media_type_is_manifest (cmt))
      continue;
    if (push_known (pc, r->name, dst->repository, cd))
      continue;
    if (!ib_store_has_blob (pc->store, cd))
      {
        rc = ib_error_set (err, ENOENT, "the index names manifest %s, which is not in store %s",
                           cd, pc->store->root);
        break;
      }
    if (ib_store_read_blob (pc->store, cd, &cdata, &clen, err) < 0
        || push_manifest (pc, r, dst->repository, cdata, clen, cmt, cd, err) < 0)
      {
        rc = -1;
        break;
      }
    push_note (pc, r->name, dst->repository, cd);
  }
  json_decref (j);
  if (rc < 0)
    return -1;
  if (ib_registry_put_manifest (r, dst->repository, reference, data, len, d->media_type, err) < 0)
    return -1;
  pushed_message (pc->progress, reference, data, len);
  return 0;
}

/* Where a push of `ref` goes: its registries.conf location (never a
 * mirror); blocked registries refused.  Replaces ref's registry and
 * repository. */
int
push_target (ib_ref_t *ref, ib_error_t *err)
{
  const ib_regconf_t *conf;
  ib_reg_source_t *src = NULL;
  size_t n = 0;
  if (ib_regconf_get (&conf, err) < 0
      || ib_regconf_sources (conf, ref->registry, ref->repository, ref->digest != NULL, true, &src,
                             &n, err)
             < 0)
    return -1;
  if (src[0].insecure && !registry_is_insecure (src[0].registry))
    ib_registry_add_insecure (src[0].registry);
  free (ref->registry);
  free (ref->repository);
  ref->registry = steal_pointer (&src[0].registry);
  ref->repository = steal_pointer (&src[0].repository);
  ib_reg_sources_free (src, n);
  return 0;
}

int
ib_push_refs (ib_store_t *store, const char *src_name, char *const *dst_refs, ib_error_t *err)
{
  ib_descriptor_t d = { 0 };
  cleanup_free char *data = NULL;
  size_t len = 0;
  ib_doc_kind_t kind;
  /* a pulled image goes out as its registry served it (same digest) */
  if (ib_store_resolve_served (store, src_name, &d, NULL, NULL, err) < 0
      || ib_store_read_blob (store, d.digest, &data, &len, err) < 0
      || ib_doc_kind (data, len, d.media_type, &kind, err) < 0)
    {
      ib_descriptor_clear (&d);
      return ib_error_prefix (err, "push %s", src_name);
    }
  push_ctx_t pc = { .store = store };
  ib_registry_t **clients = NULL;
  size_t n_clients = 0;
  int ret = 0;
  for (size_t k = 0; ret == 0 && dst_refs && dst_refs[k]; k++)
    {
      ib_ref_t ref;
      if (ib_ref_parse (dst_refs[k], &ref, err) < 0)
        {
          ret = ib_error_prefix (err, "push %s", src_name);
          break;
        }
      cleanup_free char *shown = ib_ref_string (&ref);
      pc.shown = shown;
      ib_registry_t *r = NULL;
      if (ref.digest && strcmp (ref.digest, d.digest) != 0)
        ret = ib_error_set (err, EINVAL, "the stored image %s has digest %s, not %s", src_name,
                            d.digest, ref.digest);
      if (ret == 0)
        ret = push_target (&ref, err);
      for (size_t i = 0; ret == 0 && i < n_clients && r == NULL; i++)
        if (strcmp (clients[i]->name, ref.registry) == 0)
          r = clients[i]; /* same registry: keep its token and connections */
      if (ret == 0 && r == NULL)
        {
          ret = ib_registry_new (&ref, &r, err);
          if (ret == 0)
            {
              clients = xrealloc (clients, (n_clients + 1) * sizeof *clients);
              clients[n_clients++] = r;
            }
        }
      if (ret == 0)
        {
          cleanup_free char *title = xasprintf ("push %s", shown);
          pc.progress = ib_progress_begin (title);
          ret = push_one (&pc, r, &ref, &d, data, len, kind, err);
          ib_progress_end (pc.progress);
          pc.progress = NULL;
        }
      if (ret == 0 && ib_progress_get_mode () == IB_PROGRESS_QUIET)
        ib_info ("push %s: manifest %s", shown, d.digest);
      else if (ret < 0)
        ib_error_prefix (err, "push %s to %s", src_name, shown);
      ib_ref_free (&ref);
    }
  for (size_t i = 0; i < n_clients; i++)
    ib_registry_free (clients[i]);
  free (clients);
  ib_strv_free (pc.present);
  ib_descriptor_clear (&d);
  return ret;
}

int
ib_push (ib_store_t *store, const char *src_name, const char *dst_ref, ib_error_t *err)
{
  char *refs[] = { (char *) dst_ref, NULL };
  return ib_push_refs (store, src_name, refs, err);
}
