/* tests/unit/test_manifest.c — manifests, indexes, configs, chain ids
 * (oci/manifest.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/util.h"
#include "oci/manifest.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define H1 "1111111111111111111111111111111111111111111111111111111111111111"
#define H2 "2222222222222222222222222222222222222222222222222222222222222222"
#define H3 "3333333333333333333333333333333333333333333333333333333333333333"
#define H4 "4444444444444444444444444444444444444444444444444444444444444444"

static const char oci_manifest[] =
  "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\","
  "\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\"digest\":\"sha256:" H1
  "\",\"size\":123},"
  "\"layers\":[{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar+gzip\",\"digest\":\"sha256:" H2
  "\",\"size\":45200000},"
  "{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar+zstd\",\"digest\":\"sha256:" H3
  "\",\"size\":7}]}";

/* OCI without the optional mediaType */
static const char oci_manifest_bare[] =
  "{\"schemaVersion\":2,"
  "\"config\":{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\"digest\":\"sha256:" H1
  "\",\"size\":2},\"layers\":[]}";

static const char docker_manifest[] =
  "{\n   \"schemaVersion\": 2,\n   \"mediaType\": \"application/vnd.docker.distribution.manifest.v2+json\",\n"
  "   \"config\": {\"mediaType\": \"application/vnd.docker.container.image.v1+json\", \"size\": 1469,"
  " \"digest\": \"sha256:" H1 "\"},\n"
  "   \"layers\": [{\"mediaType\": \"application/vnd.docker.image.rootfs.diff.tar.gzip\","
  " \"size\": 28566345, \"digest\": \"sha256:" H2 "\"}]\n}";

static const char docker_list[] =
  "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.docker.distribution.manifest.list.v2+json\","
  "\"manifests\":["
  "{\"mediaType\":\"application/vnd.docker.distribution.manifest.v2+json\",\"size\":529,"
  "\"digest\":\"sha256:" H1 "\",\"platform\":{\"architecture\":\"arm\",\"os\":\"linux\",\"variant\":\"v7\"}},"
  "{\"mediaType\":\"application/vnd.docker.distribution.manifest.v2+json\",\"size\":530,"
  "\"digest\":\"sha256:" H2 "\",\"platform\":{\"architecture\":\"arm64\",\"os\":\"linux\",\"variant\":\"v8\"}},"
  "{\"mediaType\":\"application/vnd.docker.distribution.manifest.v2+json\",\"size\":531,"
  "\"digest\":\"sha256:" H3 "\",\"platform\":{\"architecture\":\"amd64\",\"os\":\"linux\"}},"
  "{\"mediaType\":\"application/vnd.docker.distribution.manifest.v2+json\",\"size\":532,"
  "\"digest\":\"sha256:" H4 "\",\"platform\":{\"architecture\":\"ppc64le\",\"os\":\"linux\"}}]}";

static const char oci_index[] =
  "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.index.v1+json\",\"manifests\":["
  "{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"size\":10,\"digest\":\"sha256:" H1
  "\",\"platform\":{\"architecture\":\"amd64\",\"os\":\"linux\",\"variant\":\"v3\"}},"
  "{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"size\":11,\"digest\":\"sha256:" H2
  "\",\"platform\":{\"architecture\":\"amd64\",\"os\":\"linux\"}},"
  "{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"size\":12,\"digest\":\"sha256:" H3
  "\",\"platform\":{\"architecture\":\"unknown\",\"os\":\"unknown\"}}]}";

static const char schema1[] =
  "{\"schemaVersion\":1,\"name\":\"library/x\",\"tag\":\"1\",\"architecture\":\"amd64\","
  "\"fsLayers\":[{\"blobSum\":\"sha256:" H1 "\"}],\"history\":[]}";

static void
test_parse_oci (void **state)
{
  (void) state;
  ib_manifest_t *m = NULL;
  ib_error_t err = NULL;
  assert_int_equal (ib_manifest_parse (oci_manifest, strlen (oci_manifest), &m, &err), 0);
  assert_string_equal (m->media_type, IB_MT_OCI_MANIFEST);
  assert_string_equal (m->config.media_type, IB_MT_OCI_CONFIG);
  assert_string_equal (m->config.digest, "sha256:" H1);
  assert_int_equal (m->config.size, 123);
  assert_int_equal (m->n_layers, 2);
  assert_string_equal (m->layers[0].media_type, IB_MT_OCI_LAYER_GZIP);
  assert_string_equal (m->layers[0].digest, "sha256:" H2);
  assert_int_equal (m->layers[0].size, 45200000);
  assert_string_equal (m->layers[1].media_type, IB_MT_OCI_LAYER_ZSTD);
  assert_null (m->layers[0].os);
  ib_manifest_free (m);

  assert_int_equal (ib_manifest_parse (oci_manifest_bare, strlen (oci_manifest_bare), &m, &err), 0);
  assert_string_equal (m->media_type, IB_MT_OCI_MANIFEST);
  assert_int_equal (m->n_layers, 0);
  ib_manifest_free (m);

  ib_doc_kind_t k;
  assert_int_equal (ib_doc_kind (oci_manifest, strlen (oci_manifest), NULL, &k, &err), 0);
  assert_int_equal (k, IB_DOC_MANIFEST);
  assert_int_equal (ib_doc_kind (oci_manifest_bare, strlen (oci_manifest_bare), NULL, &k, &err), 0);
  assert_int_equal (k, IB_DOC_MANIFEST);
}

static void
test_parse_docker (void **state)
{
  (void) state;
  ib_manifest_t *m = NULL;
  ib_error_t err = NULL;
  assert_int_equal (ib_manifest_parse (docker_manifest, strlen (docker_manifest), &m, &err), 0);
  assert_string_equal (m->media_type, IB_MT_DOCKER_MANIFEST);
  assert_string_equal (m->config.media_type, IB_MT_DOCKER_CONFIG);
  assert_int_equal (m->config.size, 1469);
  assert_int_equal (m->n_layers, 1);
  assert_string_equal (m->layers[0].media_type, IB_MT_DOCKER_LAYER_GZIP);
  ib_manifest_free (m);

  ib_doc_kind_t k;
  assert_int_equal (ib_doc_kind (docker_manifest, strlen (docker_manifest), NULL, &k, &err), 0);
  assert_int_equal (k, IB_DOC_MANIFEST);
  assert_int_equal (ib_doc_kind (docker_list, strlen (docker_list), NULL, &k, &err), 0);
  assert_int_equal (k, IB_DOC_INDEX);
  assert_int_equal (ib_doc_kind (oci_index, strlen (oci_index), NULL, &k, &err), 0);
  assert_int_equal (k, IB_DOC_INDEX);

  /* an index is not a manifest */
  assert_int_equal (ib_manifest_parse (docker_list, strlen (docker_list), &m, &err), -1);
  assert_non_null (strstr (err->msg, "index"));
  ib_error_free (&err);
}

static void
test_doc_kind_fallbacks (void **state)
{
  (void) state;
  ib_error_t err = NULL;
  ib_doc_kind_t k;
  /* no mediaType: Content-Type decides, then shape */
  const char *idx = "{\"schemaVersion\":2,\"manifests\":[]}";
  assert_int_equal (ib_doc_kind (idx, strlen (idx), IB_MT_OCI_INDEX "; charset=utf-8", &k, &err), 0);
  assert_int_equal (k, IB_DOC_INDEX);
  assert_int_equal (ib_doc_kind (idx, strlen (idx), "application/json", &k, &err), 0);
  assert_int_equal (k, IB_DOC_INDEX);
  assert_int_equal (ib_doc_kind (idx, strlen (idx), NULL, &k, &err), 0);
  assert_int_equal (k, IB_DOC_INDEX);

  const char *junk = "{\"schemaVersion\":2}";
  assert_int_equal (ib_doc_kind (junk, strlen (junk), NULL, &k, &err), -1);
  assert_non_null (strstr (err->msg, "neither"));
  ib_error_free (&err);

  assert_int_equal (ib_doc_kind ("not json", 8, NULL, &k, &err), -1);
  assert_non_null (strstr (err->msg, "invalid JSON"));
  ib_error_free (&err);

  const char *helm = "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.cncf.helm.chart\"}";
  assert_int_equal (ib_doc_kind (helm, strlen (helm), NULL, &k, &err), -1);
  assert_non_null (strstr (err->msg, "unsupported manifest media type"));
  ib_error_free (&err);
}

static void
test_schema1 (void **state)
{
  (void) state;
  ib_error_t err = NULL;
  ib_doc_kind_t k;
  ib_manifest_t *m = NULL;
  assert_int_equal (ib_doc_kind (schema1, strlen (schema1), NULL, &k, &err), -1);
  assert_non_null (strstr (err->msg, "schema 1 is not supported"));
  ib_error_free (&err);
  assert_int_equal (ib_doc_kind (schema1, strlen (schema1), IB_MT_DOCKER_SCHEMA1_SIGNED, &k, &err), -1);
  assert_non_null (strstr (err->msg, "schema 1"));
  ib_error_free (&err);
  assert_int_equal (ib_manifest_parse (schema1, strlen (schema1), &m, &err), -1);
  assert_non_null (strstr (err->msg, "schema 1"));
  assert_null (m);
  ib_error_free (&err);
  const char *mt1 = "{\"mediaType\":\"" IB_MT_DOCKER_SCHEMA1 "\"}";
  assert_int_equal (ib_doc_kind (mt1, strlen (mt1), NULL, &k, &err), -1);
  assert_non_null (strstr (err->msg, "schema 1"));
  ib_error_free (&err);
}

static void
test_bad_manifests (void **state)
{
  (void) state;
  ib_error_t err = NULL;
  ib_manifest_t *m = NULL;
  static const char *bad[] = {
    "{\"schemaVersion\":2,\"layers\":[]}",
    "{\"schemaVersion\":2,\"config\":{\"mediaType\":\"x\",\"digest\":\"sha256:abc\",\"size\":1},"
    "\"layers\":[]}",
    "{\"schemaVersion\":2,\"config\":{\"mediaType\":\"x\",\"digest\":\"sha256:" H1 "\",\"size\":-1},"
    "\"layers\":[]}",
    "{\"schemaVersion\":2,\"config\":{\"mediaType\":\"x\",\"digest\":\"sha256:" H1 "\",\"size\":1}}",
    "{\"schemaVersion\":2,\"config\":{\"mediaType\":\"x\",\"digest\":\"sha256:" H1 "\",\"size\":1},"
    "\"layers\":[{\"digest\":\"sha256:" H2 "\",\"size\":1}]}",
    "{\"schemaVersion\":3,\"config\":{},\"layers\":[]}",
    "[1,2]",
    "{",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    {
      if (ib_manifest_parse (bad[i], strlen (bad[i]), &m, &err) != -1)
        fail_msg ("accepted: %s", bad[i]);
      assert_null (m);
      assert_non_null (err);
      ib_error_free (&err);
    }
}

#define SEL(doc, os, arch, var, d, err) \
  ib_index_select (doc, strlen (doc), os, arch, var, 0, d, NULL, err)

static const char nested_index[] =
  "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.index.v1+json\",\"manifests\":["
  "{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"size\":12,\"digest\":\"sha256:" H3
  "\",\"platform\":{\"architecture\":\"unknown\",\"os\":\"unknown\"}},"
  "{\"mediaType\":\"application/vnd.oci.image.index.v1+json\",\"size\":20,\"digest\":\"sha256:" H1
  "\",\"platform\":{\"architecture\":\"s390x\",\"os\":\"linux\"}},"
  "{\"mediaType\":\"application/vnd.oci.image.index.v1+json\",\"size\":21,\"digest\":\"sha256:" H2 "\"},"
  "{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"size\":13,\"digest\":\"sha256:" H4
  "\",\"platform\":{\"architecture\":\"riscv64\",\"os\":\"linux\"}},"
  "{\"mediaType\":\"application/vnd.docker.distribution.manifest.list.v2+json\",\"size\":22,"
  "\"digest\":\"sha256:" H3 "\"}]}";

static const char attest_index[] =
  "{\"schemaVersion\":2,\"manifests\":["
  "{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"size\":12,\"digest\":\"sha256:" H3
  "\",\"platform\":{\"architecture\":\"amd64\",\"os\":\"linux\"},\"annotations\":"
  "{\"vnd.docker.reference.type\":\"attestation-manifest\"}},"
  "{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"size\":13,\"digest\":\"sha256:" H4
  "\",\"platform\":{\"architecture\":\"amd64\",\"os\":\"linux\",\"variant\":\"v2\"}}]}";

static void
test_index_select (void **state)
{
  (void) state;
  ib_descriptor_t d;
  ib_error_t err = NULL;
  assert_int_equal (SEL (docker_list, "linux", "amd64", NULL, &d, &err), 0);
  assert_string_equal (d.digest, "sha256:" H3);
  assert_string_equal (d.media_type, IB_MT_DOCKER_MANIFEST);
  assert_int_equal (d.size, 531);
  assert_string_equal (d.os, "linux");
  assert_string_equal (d.arch, "amd64");
  assert_null (d.variant);
  ib_descriptor_clear (&d);

  /* arm64 means arm64/v8, with or without the variant written */
  assert_int_equal (SEL (docker_list, "linux", "arm64", NULL, &d, &err), 0);
  assert_string_equal (d.digest, "sha256:" H2);
  assert_string_equal (d.variant, "v8");
  ib_descriptor_clear (&d);
  assert_int_equal (SEL (docker_list, "linux", "arm64", "v8", &d, &err), 0);
  assert_string_equal (d.digest, "sha256:" H2);
  ib_descriptor_clear (&d);
  assert_int_equal (SEL (docker_list, "linux", "aarch64", NULL, &d, &err), 0);
  assert_string_equal (d.digest, "sha256:" H2);
  ib_descriptor_clear (&d);

  assert_int_equal (SEL (docker_list, "linux", "arm", "v7", &d, &err), 0);
  assert_string_equal (d.digest, "sha256:" H1);
  ib_descriptor_clear (&d);
  /* plain arm is arm/v7 */
  assert_int_equal (SEL (docker_list, "linux", "arm", NULL, &d, &err), 0);
  assert_string_equal (d.digest, "sha256:" H1);
  ib_descriptor_clear (&d);
  /* an arm/v8 (32-bit) machine runs arm/v7 images */
  assert_int_equal (SEL (docker_list, "linux", "arm", "v8", &d, &err), 0);
  assert_string_equal (d.digest, "sha256:" H1);
  ib_descriptor_clear (&d);

  /* plain amd64: an entry without a variant wins over amd64/v3 */
  assert_int_equal (SEL (oci_index, "linux", "amd64", NULL, &d, &err), 0);
  assert_string_equal (d.digest, "sha256:" H2);
  ib_descriptor_clear (&d);
  assert_int_equal (SEL (oci_index, "linux", "amd64", "v3", &d, &err), 0);
  assert_string_equal (d.digest, "sha256:" H1);
  ib_descriptor_clear (&d);
  /* v2 asked: v3 needs a newer CPU, v1 (no variant) does not */
  assert_int_equal (SEL (oci_index, "linux", "amd64", "v2", &d, &err), 0);
  assert_string_equal (d.digest, "sha256:" H2);
  ib_descriptor_clear (&d);
  /* a plain amd64 request takes amd64/v2 when that is all there is;
   * attestations (by annotation or unknown/unknown) are never chosen */
  assert_int_equal (SEL (attest_index, "linux", "amd64", NULL, &d, &err), 0);
  assert_string_equal (d.digest, "sha256:" H4);
  ib_descriptor_clear (&d);
  assert_int_equal (SEL (attest_index, "linux", "amd64", "v1", &d, &err), -1);
  assert_string_equal (err->msg, "no image for linux/amd64/v1; the index offers linux/amd64/v2");
  ib_error_free (&err);

  /* not offered: the error lists what is (attestations left out) */
  char *offered = NULL;
  assert_int_equal (ib_index_select (docker_list, strlen (docker_list), "linux", "s390x", NULL, 0,
                                     &d, &offered, &err),
                    -1);
  assert_int_equal (err->status, ENOENT);
  assert_string_equal (err->msg, "no image for linux/s390x; the index offers linux/arm/v7, "
                                 "linux/arm64/v8, linux/amd64, linux/ppc64le");
  assert_string_equal (offered, "linux/arm/v7, linux/arm64/v8, linux/amd64, linux/ppc64le");
  free (offered);
  ib_error_free (&err);
  assert_int_equal (SEL (docker_list, "linux", "arm", "v6", &d, &err), -1);
  assert_non_null (strstr (err->msg, "linux/arm/v6"));
  ib_error_free (&err);
  assert_int_equal (SEL (oci_index, "windows", "amd64", NULL, &d, &err), -1);
  assert_non_null (strstr (err->msg, "offers linux/amd64/v3, linux/amd64"));
  assert_null (strstr (err->msg, "unknown"));
  ib_error_free (&err);

  /* nested indexes: a matching manifest first, then each index that may
   * hold one (no platform or a matching one), in order */
  assert_int_equal (SEL (nested_index, "linux", "riscv64", NULL, &d, &err), 0);
  assert_string_equal (d.digest, "sha256:" H4);
  ib_descriptor_clear (&d);
  assert_int_equal (SEL (nested_index, "linux", "amd64", NULL, &d, &err), 0);
  assert_string_equal (d.digest, "sha256:" H2);
  assert_string_equal (d.media_type, IB_MT_OCI_INDEX);
  ib_descriptor_clear (&d);
  assert_int_equal (ib_index_select (nested_index, strlen (nested_index), "linux", "amd64", NULL,
                                     1, &d, NULL, &err),
                    0);
  assert_string_equal (d.digest, "sha256:" H3);
  assert_string_equal (d.media_type, IB_MT_DOCKER_LIST);
  ib_descriptor_clear (&d);
  assert_int_equal (ib_index_select (nested_index, strlen (nested_index), "linux", "amd64", NULL,
                                     2, &d, &offered, &err),
                    -1);
  assert_string_equal (offered, "linux/riscv64");
  free (offered);
  ib_error_free (&err);
  /* the s390x-only nested index is searched for s390x */
  assert_int_equal (SEL (nested_index, "linux", "s390x", NULL, &d, &err), 0);
  assert_string_equal (d.digest, "sha256:" H1);
  ib_descriptor_clear (&d);

  const char *empty = "{\"schemaVersion\":2,\"manifests\":[]}";
  assert_int_equal (SEL (empty, "linux", "amd64", NULL, &d, &err), -1);
  assert_non_null (strstr (err->msg, "no image for any platform"));
  ib_error_free (&err);
}

static void
test_platforms (void **state)
{
  (void) state;
  char *os, *arch, *variant;
  ib_error_t err = NULL;
  assert_int_equal (ib_platform_parse ("linux/arm64", &os, &arch, &variant, &err), 0);
  assert_string_equal (os, "linux");
  assert_string_equal (arch, "arm64");
  assert_null (variant);
  free (os), free (arch), free (variant);
  assert_int_equal (ib_platform_parse ("Linux/x86_64", &os, &arch, &variant, &err), 0);
  assert_string_equal (os, "linux");
  assert_string_equal (arch, "amd64");
  assert_null (variant);
  free (os), free (arch), free (variant);
  assert_int_equal (ib_platform_parse ("linux/armhf", &os, &arch, &variant, &err), 0);
  assert_string_equal (arch, "arm");
  assert_string_equal (variant, "v7");
  free (os), free (arch), free (variant);
  assert_int_equal (ib_platform_parse ("linux/arm/7", &os, &arch, &variant, &err), 0);
  assert_string_equal (variant, "v7");
  free (os), free (arch), free (variant);
  const char *bad[] = { "linux", "linux/", "/amd64", "linux//v7", "linux/arm/v7/x", "linux/arm/", "" };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    {
      if (ib_platform_parse (bad[i], &os, &arch, &variant, &err) != -1)
        fail_msg ("accepted platform '%s'", bad[i]);
      assert_int_equal (err->status, EINVAL);
      assert_non_null (strstr (err->msg, "OS/ARCH"));
      ib_error_free (&err);
    }

  /* ranks: 0 = no, equal platforms best */
  assert_int_equal (ib_platform_rank ("linux", "amd64", NULL, "linux", "amd64", NULL), 1000);
  assert_int_equal (ib_platform_rank ("linux", "amd64", NULL, "linux", "arm64", NULL), 0);
  assert_int_equal (ib_platform_rank ("linux", "amd64", NULL, "windows", "amd64", NULL), 0);
  assert_true (ib_platform_rank ("linux", "amd64", NULL, "linux", "amd64", "v3") > 0);
  assert_true (ib_platform_rank ("linux", "amd64", NULL, "linux", "amd64", "v2")
               > ib_platform_rank ("linux", "amd64", NULL, "linux", "amd64", "v3"));
  assert_int_equal (ib_platform_rank ("linux", "amd64", "v2", "linux", "amd64", "v3"), 0);
  assert_int_equal (ib_platform_rank ("linux", "arm64", NULL, "linux", "arm64", "v8"), 1000);
  assert_int_equal (ib_platform_rank ("linux", "arm64", "v8", "linux", "aarch64", NULL), 1000);
  assert_int_equal (ib_platform_rank ("linux", "arm", "v6", "linux", "arm", "v7"), 0);
  assert_true (ib_platform_rank ("linux", "arm", "v7", "linux", "arm", "v6") > 0);
  assert_int_equal (ib_platform_rank ("linux", "ppc64le", NULL, "linux", "ppc64le", NULL), 1000);
  assert_int_equal (ib_platform_rank ("linux", "mips64", "x", "linux", "mips64", "y"), 0);
  assert_int_equal (ib_platform_rank ("linux", "amd64", NULL, NULL, "amd64", NULL), 0);
  char *s = ib_platform_string ("linux", "arm64", "v8");
  assert_string_equal (s, "linux/arm64/v8");
  free (s);
  s = ib_platform_string ("linux", "amd64", "");
  assert_string_equal (s, "linux/amd64");
  free (s);
}

static void
test_serialize (void **state)
{
  (void) state;
  ib_descriptor_t config = { .media_type = (char *) IB_MT_DOCKER_CONFIG, .size = 5 };
  strcpy (config.digest, "sha256:" H1);
  ib_descriptor_t layers[2] = { { .media_type = (char *) IB_MT_DOCKER_LAYER_GZIP, .size = 100 },
                                { .media_type = (char *) IB_MT_OCI_LAYER_ZSTD, .size = 200 } };
  strcpy (layers[0].digest, "sha256:" H2);
  strcpy (layers[1].digest, "sha256:" H3);
  json_t *ann = json_pack ("{s:s}", "org.opencontainers.image.created", "1970-01-01T00:00:00Z");
  char *s = ib_manifest_serialize (&config, layers, 2, ann);
  assert_string_equal (
      s, "{\"annotations\":{\"org.opencontainers.image.created\":\"1970-01-01T00:00:00Z\"},"
         "\"config\":{\"digest\":\"sha256:" H1 "\",\"mediaType\":\"" IB_MT_OCI_CONFIG "\",\"size\":5},"
         "\"layers\":[{\"digest\":\"sha256:" H2 "\",\"mediaType\":\"" IB_MT_OCI_LAYER_GZIP
         "\",\"size\":100},{\"digest\":\"sha256:" H3 "\",\"mediaType\":\"" IB_MT_OCI_LAYER_ZSTD
         "\",\"size\":200}],\"mediaType\":\"" IB_MT_OCI_MANIFEST "\",\"schemaVersion\":2}");
  /* still ours: the caller's reference is untouched */
  assert_int_equal (ann->refcount, 1);
  json_decref (ann);

  /* round trip: parse, serialize again, same bytes */
  ib_manifest_t *m = NULL;
  ib_error_t err = NULL;
  assert_int_equal (ib_manifest_parse (s, strlen (s), &m, &err), 0);
  assert_string_equal (m->media_type, IB_MT_OCI_MANIFEST);
  assert_int_equal (m->n_layers, 2);
  json_t *ann2 = json_pack ("{s:s}", "org.opencontainers.image.created", "1970-01-01T00:00:00Z");
  char *s2 = ib_manifest_serialize (&m->config, m->layers, m->n_layers, ann2);
  assert_string_equal (s, s2);
  json_decref (ann2);
  free (s2);
  /* no annotations: no key */
  s2 = ib_manifest_serialize (&m->config, m->layers, m->n_layers, NULL);
  assert_null (strstr (s2, "annotations"));
  free (s2);
  ib_manifest_free (m);
  free (s);
}

/* An index of a build for two platforms: its exact bytes (each entry
 * keeps its manifest's own media type: a descriptor names the blob as it
 * is), and the platform selection a puller makes reads it back. */
static void
test_index_serialize (void **state)
{
  (void) state;
  ib_descriptor_t m[2] = { { .size = 715, .os = (char *) "linux", .arch = (char *) "amd64" },
                           { .media_type = (char *) IB_MT_DOCKER_MANIFEST, .size = 716,
                             .os = (char *) "linux", .arch = (char *) "arm",
                             .variant = (char *) "v7" } };
  strcpy (m[0].digest, "sha256:" H1);
  strcpy (m[1].digest, "sha256:" H2);
  char *s = ib_index_serialize (m, 2);
  assert_string_equal (
      s, "{\"manifests\":[{\"digest\":\"sha256:" H1 "\",\"mediaType\":\"" IB_MT_OCI_MANIFEST
         "\",\"platform\":{\"architecture\":\"amd64\",\"os\":\"linux\"},\"size\":715},"
         "{\"digest\":\"sha256:" H2 "\",\"mediaType\":\"" IB_MT_DOCKER_MANIFEST "\",\"platform\":"
         "{\"architecture\":\"arm\",\"os\":\"linux\",\"variant\":\"v7\"},\"size\":716}],"
         "\"mediaType\":\"" IB_MT_OCI_INDEX "\",\"schemaVersion\":2}");
  ib_descriptor_t got = { 0 };
  ib_error_t err = NULL;
  assert_int_equal (ib_index_select (s, strlen (s), "linux", "arm", "v7", 0, &got, NULL, &err), 0);
  assert_string_equal (got.digest, "sha256:" H2);
  assert_int_equal (got.size, 716);
  ib_descriptor_clear (&got);
  char *offered = NULL;
  assert_int_equal (ib_index_select (s, strlen (s), "linux", "arm64", NULL, 0, &got, &offered, &err),
                    -1);
  assert_int_equal (err->status, ENOENT);
  assert_string_equal (offered, "linux/amd64, linux/arm/v7");
  free (offered);
  ib_error_free (&err);
  free (s);
}

static void
test_config (void **state)
{
  (void) state;
  const char *c = "{\"architecture\":\"amd64\",\"os\":\"linux\",\"rootfs\":{\"type\":\"layers\","
                  "\"diff_ids\":[\"sha256:" H1 "\",\"sha256:" H2 "\"]}}";
  json_t *j = NULL;
  ib_error_t err = NULL;
  char **ids = NULL;
  assert_int_equal (ib_config_parse (c, strlen (c), &j, &err), 0);
  assert_int_equal (ib_config_diff_ids (j, &ids, &err), 0);
  assert_int_equal (ib_strv_len (ids), 2);
  assert_string_equal (ids[0], "sha256:" H1);
  assert_string_equal (ids[1], "sha256:" H2);
  ib_strv_free (ids);
  json_decref (j);

  const char *empty = "{\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]}}";
  assert_int_equal (ib_config_parse (empty, strlen (empty), &j, &err), 0);
  assert_int_equal (ib_config_diff_ids (j, &ids, &err), 0);
  assert_non_null (ids);
  assert_null (ids[0]);
  ib_strv_free (ids);
  json_decref (j);

  static const char *bad[] = { "{}", "{\"rootfs\":{\"type\":\"layers\"}}",
                               "{\"rootfs\":{\"type\":\"x\",\"diff_ids\":[]}}",
                               "{\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[\"sha256:ab\"]}}",
                               "{\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[1]}}" };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    {
      assert_int_equal (ib_config_parse (bad[i], strlen (bad[i]), &j, &err), 0);
      assert_int_equal (ib_config_diff_ids (j, &ids, &err), -1);
      assert_null (ids);
      ib_error_free (&err);
      json_decref (j);
    }
  assert_int_equal (ib_config_parse ("[]", 2, &j, &err), -1);
  assert_null (j);
  ib_error_free (&err);
}

static void
test_chain_id (void **state)
{
  (void) state;
  /* diff ids: sha256 of "a", "b", "c"; chains computed with
   *   printf '%s %s' $prev $next | sha256sum */
  char *ids[] = { "sha256:ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb",
                  "sha256:3e23e8160039594a33894f6564e1b1348bbd7a0088d42c4acb73eeaed59c009d",
                  "sha256:2e7d2c03a9507ae265ecf5b5356885a53393a2029d241394997265a1a25aefc6", NULL };
  char out[IB_DIGEST_LEN];
  ib_chain_id (ids, 0, out);
  assert_string_equal (out, ids[0]);
  ib_chain_id (ids, 1, out);
  assert_string_equal (out, "sha256:51c0c8ace48498d6f5fee6b0592cc06f2da0f3cbe09c5a34a97dce85c3889676");
  ib_chain_id (ids, 2, out);
  assert_string_equal (out, "sha256:2fce7f8ce91bcf0a1428b36e1024639fdbd9469eea762dba98aa749631885106");
}

static void
test_host_platform (void **state)
{
  (void) state;
  const char *os, *arch, *variant;
  ib_host_platform (&os, &arch, &variant);
  assert_string_equal (os, "linux");
#if defined(__x86_64__)
  assert_string_equal (arch, "amd64");
  assert_null (variant);
#endif
  assert_non_null (strstr (IB_MANIFEST_ACCEPT, IB_MT_DOCKER_LIST));
  assert_non_null (strstr (IB_MANIFEST_ACCEPT, IB_MT_OCI_INDEX));
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test (test_parse_oci),     cmocka_unit_test (test_parse_docker),
    cmocka_unit_test (test_doc_kind_fallbacks), cmocka_unit_test (test_schema1),
    cmocka_unit_test (test_bad_manifests), cmocka_unit_test (test_index_select),
    cmocka_unit_test (test_platforms),
    cmocka_unit_test (test_serialize),     cmocka_unit_test (test_config),
    cmocka_unit_test (test_index_serialize),
    cmocka_unit_test (test_chain_id),      cmocka_unit_test (test_host_platform),
  };
  return cmocka_run_group_tests (tests, NULL, NULL);
}
