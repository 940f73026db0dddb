/* oci/manifest.c — manifests, indexes and image configs (image-spec
 * manifest.md, image-index.md, config.md; Docker image manifest v2 schema 2
 * and manifest list as their OCI equivalents). */
#include "oci/manifest.h"
#include "common/util.h"
#include "oci/json_int.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

const char IB_MANIFEST_ACCEPT[] = IB_MT_OCI_MANIFEST ", " IB_MT_OCI_INDEX ", " IB_MT_DOCKER_MANIFEST
                                  ", " IB_MT_DOCKER_LIST;

#define SCHEMA1_MSG                                                                             \
  "Docker image manifest v2 schema 1 is not supported (deprecated and unsigned-content); "     \
  "push the image again with a current client to get schema 2 or OCI"

static json_t *
parse_json (const char *data, size_t len, const char *what, ib_error_t *err)
{
  json_error_t je;
  json_t *j = json_loadb (data, len, 0, &je);
  if (j == NULL)
    {
      ib_error_set (err, EINVAL, "%s: invalid JSON at line %d column %d: %s", what, je.line,
                    je.column, je.text);
      return NULL;
    }
  if (!json_is_object (j))
    {
      json_decref (j);
      ib_error_set (err, EINVAL, "%s: not a JSON object", what);
      return NULL;
    }
  return j;
}

/* A manifest's JSON object; schema 1 refused (ENOTSUP, SCHEMA1_MSG). */
static json_t *
parse_manifest_json (const char *data, size_t len, ib_error_t *err)
{
  json_t *j = parse_json (data, len, "manifest", err);
  json_t *sv = json_object_get (j, "schemaVersion");
  if (json_is_integer (sv) && json_integer_value (sv) == 1)
    {
      json_decref (j);
      ib_error_set (err, ENOTSUP, "%s", SCHEMA1_MSG);
      return NULL;
    }
  return j;
}

static bool
is_schema1 (const char *mt)
{
  return mt && (strcmp (mt, IB_MT_DOCKER_SCHEMA1) == 0 || strcmp (mt, IB_MT_DOCKER_SCHEMA1_SIGNED) == 0);
}

bool
ib_media_type_is_manifest (const char *mt)
{
  return mt && (strcmp (mt, IB_MT_OCI_MANIFEST) == 0 || strcmp (mt, IB_MT_DOCKER_MANIFEST) == 0);
}

static bool
is_index_mt (const char *mt)
{
  return strcmp (mt, IB_MT_OCI_INDEX) == 0 || strcmp (mt, IB_MT_DOCKER_LIST) == 0;
}

/* Content-Type without parameters ("; charset=..."), lowercase not forced. */
static char *
bare_content_type (const char *ct)
{
  if (ct == NULL)
    return NULL;
  while (*ct == ' ')
    ct++;
  size_t n = strcspn (ct, "; \t");
  return xstrndup (ct, n);
}

int
ib_doc_kind (const char *data, size_t len, const char *content_type, ib_doc_kind_t *kind,
             ib_error_t *err)
{
  cleanup_json json_t *j = parse_manifest_json (data, len, err);
  if (j == NULL)
    return -1;
  const char *mt = json_string_value (json_object_get (j, "mediaType"));
  cleanup_free char *ct = bare_content_type (content_type);
  if (mt == NULL && ct && strcmp (ct, "application/json") != 0
      && strcmp (ct, "application/octet-stream") != 0 && strcmp (ct, "text/plain") != 0)
    mt = ct;
  if (mt)
    {
      if (is_schema1 (mt))
        return ib_error_set (err, ENOTSUP, "%s", SCHEMA1_MSG);
      if (ib_media_type_is_manifest (mt))
        {
          *kind = IB_DOC_MANIFEST;
          return 0;
        }
      if (is_index_mt (mt))
        {
          *kind = IB_DOC_INDEX;
          return 0;
        }
      return ib_error_set (err, ENOTSUP, "unsupported manifest media type %s", mt);
    }
  if (json_is_array (json_object_get (j, "manifests")))
    {
      *kind = IB_DOC_INDEX;
      return 0;
    }
  if (json_is_array (json_object_get (j, "layers")) && json_is_object (json_object_get (j, "config")))
    {
      *kind = IB_DOC_MANIFEST;
      return 0;
    }
  if (json_object_get (j, "fsLayers"))
    return ib_error_set (err, ENOTSUP, "%s", SCHEMA1_MSG);
  return ib_error_set (err, EINVAL, "document is neither an image manifest nor an index");
}

void
ib_descriptor_clear (ib_descriptor_t *d)
{
  if (d == NULL)
    return;
  free (d->media_type);
  free (d->os);
  free (d->arch);
  free (d->variant);
  memset (d, 0, sizeof *d);
}

/* Fill d from a descriptor object (descriptor.md).  `what` names it in errors. */
static int
parse_descriptor (json_t *o, ib_descriptor_t *d, const char *what, ib_error_t *err)
{
  memset (d, 0, sizeof *d);
  if (!json_is_object (o))
    return ib_error_set (err, EINVAL, "%s: not a descriptor object", what);
  const char *mt = json_string_value (json_object_get (o, "mediaType"));
  const char *dg = json_string_value (json_object_get (o, "digest"));
  json_t *size = json_object_get (o, "size");
  if (mt == NULL)
    return ib_error_set (err, EINVAL, "%s: missing mediaType", what);
  if (dg == NULL)
    return ib_error_set (err, EINVAL, "%s: missing digest", what);
  if (!ib_digest_valid (dg))
    return ib_error_set (err, EINVAL, "%s: unsupported or malformed digest \"%s\" (want sha256)",
                         what, dg);
  if (!json_is_integer (size) || json_integer_value (size) < 0)
    return ib_error_set (err, EINVAL, "%s: missing or negative size", what);
  d->media_type = xstrdup (mt);
  snprintf (d->digest, sizeof d->digest, "%s", dg);
  d->size = (int64_t) json_integer_value (size);
  json_t *p = json_object_get (o, "platform");
  if (json_is_object (p))
    {
      d->os = xstrdup (json_string_value (json_object_get (p, "os")));
      d->arch = xstrdup (json_string_value (json_object_get (p, "architecture")));
      const char *v = json_string_value (json_object_get (p, "variant"));
      d->variant = v && *v ? xstrdup (v) : NULL;
    }
  return 0;
}

void
ib_manifest_free (ib_manifest_t *m)
{
  if (m == NULL)
    return;
  free (m->media_type);
  ib_descriptor_clear (&m->config);
  for (size_t i = 0; i < m->n_layers; i++)
    ib_descriptor_clear (&m->layers[i]);
  free (m->layers);
  free (m);
}

int
ib_manifest_parse (const char *data, size_t len, ib_manifest_t **out, ib_error_t *err)
{
  *out = NULL;
  cleanup_json json_t *j = parse_manifest_json (data, len, err);
  if (j == NULL)
    return -1;
  json_t *sv = json_object_get (j, "schemaVersion");
  if (!json_is_integer (sv) || json_integer_value (sv) != 2)
    return ib_error_set (err, EINVAL, "manifest: schemaVersion is not 2");
  const char *mt = json_string_value (json_object_get (j, "mediaType"));
  if (mt && is_schema1 (mt))
    return ib_error_set (err, ENOTSUP, "%s", SCHEMA1_MSG);
  if (mt && is_index_mt (mt))
    return ib_error_set (err, EINVAL, "manifest: is an index (%s), not an image manifest", mt);
  if (mt && !ib_media_type_is_manifest (mt))
    return ib_error_set (err, ENOTSUP, "manifest: unsupported media type %s", mt);
  json_t *layers = json_object_get (j, "layers");
  if (!json_is_array (layers))
    return ib_error_set (err, EINVAL, "manifest: missing layers array");

  ib_manifest_t *m = xmalloc (sizeof *m);
  m->media_type = xstrdup (mt ? mt : IB_MT_OCI_MANIFEST);
  if (parse_descriptor (json_object_get (j, "config"), &m->config, "manifest: config", err) < 0)
    {
      ib_manifest_free (m);
      return -1;
    }
  size_t n = json_array_size (layers);
  m->layers = xmalloc ((n ? n : 1) * sizeof *m->layers);
  for (size_t i = 0; i < n; i++)
    {
      char what[64];
      snprintf (what, sizeof what, "manifest: layer %zu", i);
      if (parse_descriptor (json_array_get (layers, i), &m->layers[i], what, err) < 0)
        {
          ib_manifest_free (m);
          return -1;
        }
      m->n_layers = i + 1;
    }
  *out = m;
  return 0;
}

/* ---------- platforms ---------- */

/* A platform normalized as containerd's platforms.Normalize does: os
 * lowercase; architecture aliases (x86_64 -> amd64, aarch64 -> arm64,
 * armhf -> arm/v7, armel -> arm/v6, i386 -> 386); variants with a "v";
 * defaults: arm -> v7, arm64 -> v8, amd64 -> v1.  `level` is the variant as
 * a number (v8.2 -> 82, v7 -> 70, v3 -> 30) for arches whose variants are
 * ordered (amd64, arm, arm64); -1 otherwise. */
typedef struct norm_platform
{
  char os[64], arch[64], variant[64];
  int level;
} norm_platform_t;

static void
lower_copy (char *dst, size_t n, const char *src)
{
  size_t i = 0;
  for (; src && src[i] && i + 1 < n; i++)
    dst[i] = (char) tolower ((unsigned char) src[i]);
  dst[i] = '\0';
}

static bool
ordered_arch (const char *arch)
{
  return strcmp (arch, "amd64") == 0 || strcmp (arch, "arm") == 0 || strcmp (arch, "arm64") == 0;
}

/* "v8.2" -> 82, "v7" -> 70; -1 when not of that form */
static int
variant_level (const char *v)
{
  if (v[0] != 'v' || !isdigit ((unsigned char) v[1]))
    return -1;
  char *end;
  long major = strtol (v + 1, &end, 10);
  long minor = 0;
  if (*end == '.')
    {
      if (!isdigit ((unsigned char) end[1]))
        return -1;
      minor = strtol (end + 1, &end, 10);
    }
  if (*end || major > 99 || minor > 9)
    return -1;
  return (int) (major * 10 + minor);
}

static void
normalize (const char *os, const char *arch, const char *variant, norm_platform_t *n)
{
  lower_copy (n->os, sizeof n->os, os);
  lower_copy (n->arch, sizeof n->arch, arch);
  char v[64];
  lower_copy (v, sizeof v, variant);
  if (strcmp (n->arch, "x86_64") == 0 || strcmp (n->arch, "x86-64") == 0)
    strcpy (n->arch, "amd64");
  else if (strcmp (n->arch, "aarch64") == 0)
    strcpy (n->arch, "arm64");
  else if (strcmp (n->arch, "i386") == 0)
    strcpy (n->arch, "386");
  else if (strcmp (n->arch, "armhf") == 0)
    {
      strcpy (n->arch, "arm");
      if (!*v)
        strcpy (v, "v7");
    }
  else if (strcmp (n->arch, "armel") == 0)
    {
      strcpy (n->arch, "arm");
      if (!*v)
        strcpy (v, "v6");
    }
  if (ordered_arch (n->arch) && isdigit ((unsigned char) v[0]))
    {
      char t[sizeof v];
      snprintf (t, sizeof t, "v%.60s", v); /* "7" -> "v7" */
      memcpy (v, t, sizeof v);
    }
  if (!*v && strcmp (n->arch, "arm") == 0)
    strcpy (v, "v7");
  else if (!*v && strcmp (n->arch, "arm64") == 0)
    strcpy (v, "v8");
  else if (!*v && strcmp (n->arch, "amd64") == 0)
    strcpy (v, "v1");
  snprintf (n->variant, sizeof n->variant, "%s", v);
  n->level = ordered_arch (n->arch) ? variant_level (v) : -1;
}

int
ib_platform_rank (const char *want_os, const char *want_arch, const char *want_variant,
                  const char *os, const char *arch, const char *variant)
{
  if (os == NULL || arch == NULL || want_os == NULL || want_arch == NULL)
    return 0;
  norm_platform_t w, h;
  normalize (want_os, want_arch, want_variant && *want_variant ? want_variant : NULL, &w);
  normalize (os, arch, variant && *variant ? variant : NULL, &h);
  if (strcmp (w.os, h.os) != 0 || strcmp (w.arch, h.arch) != 0)
    return 0;
  bool want_any = want_variant == NULL || *want_variant == '\0';
  if (w.level >= 0 && h.level >= 0)
    {
      if (want_any && strcmp (w.arch, "amd64") == 0)
        /* plain amd64: any microarchitecture level, the lowest first (an
         * amd64/v3 image is still amd64; v1 runs on every amd64 CPU) */
        return 1000 - (h.level - 10);
      if (h.level > w.level)
        return 0; /* needs a newer CPU than asked for */
      return 1000 - (w.level - h.level); /* closest level below the request */
    }
  if (strcmp (w.variant, h.variant) == 0)
    return 1000;
  if (want_any)
    return 999; /* no variant asked for: any will do, none preferred */
  return 0;
}

char *
ib_platform_string (const char *os, const char *arch, const char *variant)
{
  return xasprintf ("%s/%s%s%s", os ? os : "?", arch ? arch : "?",
                    variant && *variant ? "/" : "", variant && *variant ? variant : "");
}

int
ib_platform_parse (const char *s, char **os, char **arch, char **variant, ib_error_t *err)
{
  *os = *arch = *variant = NULL;
  const char *a = s ? strchr (s, '/') : NULL;
  const char *b = a ? strchr (a + 1, '/') : NULL;
  if (s == NULL || a == NULL || a == s || a[1] == '/' || a[1] == '\0'
      || (b && (b[1] == '\0' || strchr (b + 1, '/'))))
    return ib_error_set (err, EINVAL, "platform \"%s\": expected OS/ARCH[/VARIANT]",
                         s ? s : "");
  cleanup_free char *o = xstrndup (s, (size_t) (a - s));
  cleanup_free char *ar = b ? xstrndup (a + 1, (size_t) (b - a - 1)) : xstrdup (a + 1);
  norm_platform_t n;
  normalize (o, ar, b ? b + 1 : NULL, &n);
  *os = xstrdup (n.os);
  *arch = xstrdup (n.arch);
  /* keep a variant only where one was given or implied by an alias */
  bool implied = strcmp (n.arch, "arm") == 0 && strcmp (ar, "arm") != 0;
  *variant = (b || implied) ? xstrdup (n.variant) : NULL;
  return 0;
}

static bool
is_attestation (json_t *e, const char *eos, const char *earch)
{
  const char *rt = json_string_value (
      json_object_get (json_object_get (e, "annotations"), "vnd.docker.reference.type"));
  return (eos && strcmp (eos, "unknown") == 0) || (earch && strcmp (earch, "unknown") == 0)
         || (rt && strcmp (rt, "attestation-manifest") == 0);
}

int
ib_index_select (const char *data, size_t len, const char *os, const char *arch,
                 const char *variant, size_t nested_skip, ib_descriptor_t *out, char **offered,
                 ib_error_t *err)
{
  memset (out, 0, sizeof *out);
  if (offered)
    *offered = NULL;
  cleanup_json json_t *j = parse_json (data, len, "index", err);
  if (j == NULL)
    return -1;
  json_t *ms = json_object_get (j, "manifests");
  if (!json_is_array (ms))
    return ib_error_set (err, EINVAL, "index: missing manifests array");

  /* The best-ranked image manifest (ib_platform_rank; the first of equals);
   * failing that, the nested_skip-th nested index that may hold it. */
  ssize_t best = -1, nested = -1;
  int best_rank = 0;
  size_t n_nested = 0;
  ib_buf_t off = { 0 };
  size_t i;
  json_t *e;
  json_array_foreach (ms, i, e)
  {
    json_t *p = json_object_get (e, "platform");
    const char *mt = json_string_value (json_object_get (e, "mediaType"));
    const char *eos = json_string_value (json_object_get (p, "os"));
    const char *earch = json_string_value (json_object_get (p, "architecture"));
    const char *evar = json_string_value (json_object_get (p, "variant"));
    if (is_attestation (e, eos, earch))
      continue;
    if (mt && is_index_mt (mt))
      {
        if (json_is_object (p) && eos && earch
            && ib_platform_rank (os, arch, variant, eos, earch, evar) == 0)
          continue;
        if (n_nested++ == nested_skip)
          nested = (ssize_t) i;
        continue;
      }
    if (mt && !ib_media_type_is_manifest (mt) && !is_schema1 (mt))
      continue; /* artifacts */
    if (eos == NULL || earch == NULL)
      continue;
    cleanup_free char *ps = ib_platform_string (eos, earch, evar);
    ib_buf_printf (&off, "%s%s", off.len ? ", " : "", ps);
    int rank = ib_platform_rank (os, arch, variant, eos, earch, evar);
    if (rank > best_rank)
      {
        best = (ssize_t) i;
        best_rank = rank;
      }
  }
  if (best < 0)
    best = nested;
  if (best < 0)
    {
      cleanup_free char *want = ib_platform_string (os, arch, variant);
      int r = ib_error_set (err, ENOENT, "no image for %s; the index offers %s", want,
                            off.len ? off.data : "no image for any platform");
      if (offered)
        *offered = ib_buf_steal (&off);
      ib_buf_free (&off);
      return r;
    }
  ib_buf_free (&off);
  char what[64];
  snprintf (what, sizeof what, "index: manifest %zd", best);
  return parse_descriptor (json_array_get (ms, (size_t) best), out, what, err);
}

/* OCI equivalent of a Docker media type; others unchanged. */
static const char *
oci_media_type (const char *mt, const char *dflt)
{
  if (mt == NULL)
    return dflt;
  if (strcmp (mt, IB_MT_DOCKER_CONFIG) == 0)
    return IB_MT_OCI_CONFIG;
  if (strcmp (mt, IB_MT_DOCKER_LAYER_GZIP) == 0)
    return IB_MT_OCI_LAYER_GZIP;
  if (strcmp (mt, "application/vnd.docker.image.rootfs.diff.tar") == 0)
    return IB_MT_OCI_LAYER;
  if (strcmp (mt, "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip") == 0)
    return "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip";
  return mt;
}

static json_t *
descriptor_json (const ib_descriptor_t *d, const char *dflt_mt)
{
  return json_pack ("{s:s, s:s, s:I}", "mediaType", oci_media_type (d->media_type, dflt_mt),
                    "digest", d->digest, "size", (json_int_t) d->size);
}

char *
ib_manifest_serialize (const ib_descriptor_t *config, const ib_descriptor_t *layers,
                       size_t n_layers, json_t *annotations)
{
  json_t *m = json_object ();
  json_object_set_new (m, "schemaVersion", json_integer (2));
  json_object_set_new (m, "mediaType", json_string (IB_MT_OCI_MANIFEST));
  json_object_set_new (m, "config", descriptor_json (config, IB_MT_OCI_CONFIG));
  json_t *ls = json_array ();
  for (size_t i = 0; i < n_layers; i++)
    json_array_append_new (ls, descriptor_json (&layers[i], IB_MT_OCI_LAYER_GZIP));
  json_object_set_new (m, "layers", ls);
  if (annotations && json_is_object (annotations) && json_object_size (annotations) > 0)
    json_object_set (m, "annotations", annotations);
  char *s = json_dumps (m, JSON_SORT_KEYS | JSON_COMPACT);
  json_decref (m);
  if (s == NULL)
    abort ();
  return s; /* jansson's default allocator is malloc: the caller free()s */
}

char *
ib_index_serialize (const ib_descriptor_t *manifests, size_t n)
{
  json_t *ms = json_array ();
  for (size_t i = 0; i < n; i++)
    {
      json_t *d = descriptor_json (&manifests[i], IB_MT_OCI_MANIFEST);
      json_t *p = json_pack ("{s:s, s:s}", "os", manifests[i].os ? manifests[i].os : "linux",
                             "architecture", manifests[i].arch ? manifests[i].arch : "unknown");
      if (manifests[i].variant && *manifests[i].variant)
        json_object_set_new (p, "variant", json_string (manifests[i].variant));
      json_object_set_new (d, "platform", p);
      json_array_append_new (ms, d);
    }
  json_t *idx = json_pack ("{s:i, s:s, s:o}", "schemaVersion", 2, "mediaType", IB_MT_OCI_INDEX,
                           "manifests", ms);
  char *s = json_dumps (idx, JSON_SORT_KEYS | JSON_COMPACT);
  json_decref (idx);
  if (s == NULL)
    abort ();
  return s;
}

int
ib_config_parse (const char *data, size_t len, json_t **out, ib_error_t *err)
{
  *out = parse_json (data, len, "image config", err);
  return *out ? 0 : -1;
}

int
ib_config_diff_ids (json_t *config, char ***diff_ids, ib_error_t *err)
{
  *diff_ids = NULL;
  json_t *rootfs = json_object_get (config, "rootfs");
  if (!json_is_object (rootfs))
    return ib_error_set (err, EINVAL, "image config: missing rootfs");
  const char *type = json_string_value (json_object_get (rootfs, "type"));
  if (type && strcmp (type, "layers") != 0)
    return ib_error_set (err, EINVAL, "image config: rootfs.type is \"%s\", not \"layers\"", type);
  json_t *ids = json_object_get (rootfs, "diff_ids");
  if (!json_is_array (ids))
    return ib_error_set (err, EINVAL, "image config: missing rootfs.diff_ids");
  char **v = xmalloc (sizeof (char *));
  size_t i;
  json_t *e;
  json_array_foreach (ids, i, e)
  {
    const char *s = json_string_value (e);
    if (!ib_digest_valid (s))
      {
        ib_strv_free (v);
        return ib_error_set (err, EINVAL, "image config: rootfs.diff_ids[%zu] is not a sha256 digest",
                             i);
      }
    ib_strv_push (&v, s);
  }
  *diff_ids = v;
  return 0;
}

void
ib_host_platform (const char **os, const char **arch, const char **variant)
{
  /* GOOS / GOARCH names, as image-spec config.md asks. */
  *os = "linux";
  *variant = NULL;
#if defined(__x86_64__)
  *arch = "amd64";
#elif defined(__aarch64__)
  *arch = "arm64";
#elif defined(__arm__)
  *arch = "arm";
  *variant = "v7";
#elif defined(__i386__)
  *arch = "386";
#elif defined(__powerpc64__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  *arch = "ppc64le";
#elif defined(__s390x__)
  *arch = "s390x";
#elif defined(__riscv) && __riscv_xlen == 64
  *arch = "riscv64";
#else
  *arch = "unknown";
#endif
}

void
ib_chain_id (char *const *diff_ids, size_t upto, char out[IB_DIGEST_LEN])
{
  snprintf (out, IB_DIGEST_LEN, "%s", diff_ids[0]);
  for (size_t i = 1; i <= upto; i++)
    {
      char tmp[IB_DIGEST_LEN * 2 + 2];
      int n = snprintf (tmp, sizeof tmp, "%s %s", out, diff_ids[i]);
      ib_digest_buf (tmp, (size_t) n, out);
    }
}
