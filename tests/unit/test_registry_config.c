/* tests/unit/test_registry_config.c — registries.conf (oci/regconf.h),
 * certs.d lookup (oci/certs.h), size parsing, and the store's record of
 * where images were pulled from (ib_store_tag_source, ib_store_blob_sources),
 * which push uses for cross-repository mounts. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/unit/unit.h"

#include "common/util.h"
#include "oci/certs.h"
#include "oci/digest.h"
#include "oci/manifest.h"
#include "oci/regconf.h"
#include "oci/shortname.h"
#include "oci/store.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static ib_regconf_t *
parse_ok (const char *text)
{
  ib_regconf_t *c = NULL;
  ib_error_t err = NULL;
  if (ib_regconf_parse ("t.conf", text, &c, &err) < 0)
    fail_msg ("%s", err->msg);
  return c;
}

/* Parse must fail with a message containing `want` (file:line included). */
static void
parse_bad (const char *text, const char *want)
{
  ib_regconf_t *c = NULL;
  ib_error_t err = NULL;
  if (ib_regconf_parse ("t.conf", text, &c, &err) == 0)
    fail_msg ("parsed, expected an error with \"%s\":\n%s", want, text);
  assert_null (c);
  assert_int_equal (err->status, EINVAL);
  if (strstr (err->msg, want) == NULL)
    fail_msg ("error \"%s\" lacks \"%s\"", err->msg, want);
  ib_error_free (&err);
}

static const char full_conf[]
    = "# registries.conf for the tests\n"
      "unqualified-search-registries = [\"docker.io\",\n"
      "   \"quay.io\", # comment inside an array\n"
      "]\n"
      "short-name-mode = 'enforcing'\n"
      "\n"
      "[[registry]]\n"
      "prefix = \"docker.io/library\"\n"
      "location = \"127.0.0.1:5000/lib\"   # trailing comment\n"
      "insecure = true\n"
      "\n"
      "[[registry.mirror]]\n"
      "location = \"mirror-a.example:5000\"\n"
      "\n"
      "[[registry.mirror]]\n"
      "location = \"mirror-b.example/cache\"\n"
      "insecure = true\n"
      "pull-from-mirror = \"digest-only\"\n"
      "\n"
      "[[registry]]\n"
      "location = \"quay.io\"\n"
      "blocked = true\n"
      "\n"
      "[[registry]]\n"
      "prefix = \"*.corp.example\"\n"
      "insecure = true\n"
      "\n"
      "[[registry]]\n"
      "\"prefix\" = \"ghcr.io\"\n"
      "mirror-by-digest-only = true\n"
      "mirror = [{ location = \"ghcr-mirror.example\" }, { location = \"m2.example\", "
      "insecure = true }]\n"
      "\n"
      "[aliases]\n"
      "\"fedora\" = \"registry.fedoraproject.org/fedora\"\n"
      "[registries.search]\n"
      "registries = []\n";

static void
test_parse_full (void **state)
{
  (void) state;
  ib_regconf_t *c = parse_ok (full_conf);
  assert_int_equal (c->n_entries, 4);
  const ib_reg_entry_t *e = &c->entries[0];
  assert_string_equal (e->prefix, "docker.io/library");
  assert_string_equal (e->location, "127.0.0.1:5000/lib");
  assert_true (e->insecure);
  assert_false (e->blocked);
  assert_int_equal (e->line, 7);
  assert_int_equal (e->n_mirrors, 2);
  assert_string_equal (e->mirrors[0].location, "mirror-a.example:5000");
  assert_false (e->mirrors[0].insecure);
  assert_int_equal (e->mirrors[0].pull_from, IB_MIRROR_PULL_ALL);
  assert_string_equal (e->mirrors[1].location, "mirror-b.example/cache");
  assert_true (e->mirrors[1].insecure);
  assert_int_equal (e->mirrors[1].pull_from, IB_MIRROR_PULL_DIGEST_ONLY);
  /* prefix defaults to location */
  assert_string_equal (c->entries[1].prefix, "quay.io");
  assert_true (c->entries[1].blocked);
  assert_string_equal (c->entries[2].prefix, "*.corp.example");
  /* inline-table mirrors */
  e = &c->entries[3];
  assert_true (e->mirror_by_digest_only);
  assert_int_equal (e->n_mirrors, 2);
  assert_string_equal (e->mirrors[0].location, "ghcr-mirror.example");
  assert_string_equal (e->mirrors[1].location, "m2.example");
  assert_true (e->mirrors[1].insecure);
  ib_regconf_free (c);

  /* escapes and literal strings */
  c = parse_ok ("[[registry]]\nprefix = \"a\\u0062c.example\"\nlocation = 'x\\y.example'\n");
  assert_string_equal (c->entries[0].prefix, "abc.example");
  assert_string_equal (c->entries[0].location, "x\\y.example");
  ib_regconf_free (c);

  /* CRLF line ends, empty file */
  c = parse_ok ("[[registry]]\r\nlocation = \"a.example\"\r\n");
  assert_int_equal (c->n_entries, 1);
  ib_regconf_free (c);
  c = parse_ok ("");
  assert_int_equal (c->n_entries, 0);
  ib_regconf_free (c);
}

static void
test_parse_errors (void **state)
{
  (void) state;
  parse_bad ("[registry]\nlocation = \"a\"\n", "t.conf:1: write [[registry]]");
  parse_bad ("[[registry]]\nlocation = \"\"\"x\"\"\"\n", "t.conf:2: multi-line strings");
  parse_bad ("[[registry]]\nlocation = 1.5\n", "t.conf:2: only strings");
  parse_bad ("x = 1979-05-27\n", "t.conf:1: only strings");
  parse_bad ("[[registry]]\nlocation \"a\"\n", "t.conf:2: expected '='");
  parse_bad ("[[registry]]\nlocation = \"a\"\nlocation = \"b\"\n", "t.conf:3: location given twice");
  parse_bad ("[[registry]]\nlocation = \"a\"\ninsecure = \"yes\"\n",
             "t.conf:3: insecure must be a boolean, not a string");
  parse_bad ("[[registry]]\ninsecure = true\n", "t.conf:1: [[registry]] needs a prefix or a location");
  parse_bad ("[[registry]]\nlocation = \"a\"\n[[registry]]\nprefix = \"a\"\nlocation = \"b\"\n",
             "t.conf:3: prefix a already given on line 1");
  parse_bad ("[[registry]]\nlocation = \"https://a.example\"\n", "without a scheme");
  parse_bad ("[[registry]]\nprefix = \"*.a.example\"\nlocation = \"b\"\n", "t.conf:1: a wildcard prefix");
  parse_bad ("[[registry]]\nlocation = \"a\"\n[[registry.mirror]]\ninsecure = true\n",
             "t.conf:1: a mirror of a has no location");
  parse_bad ("[[registry.mirror]]\nlocation = \"a\"\n", "t.conf:1: [[registry.mirror]] before any");
  parse_bad ("[[registry]]\nlocation = \"a\n", "t.conf:2: unterminated string");
  parse_bad ("[[registry]]\nlocation = \"a\" b\n", "t.conf:2: unexpected text after the value");
  parse_bad ("[[registry]]\nlocation = \"a\"\n[[registry.mirror]]\nlocation = \"m\"\n"
             "pull-from-mirror = \"sometimes\"\n",
             "t.conf:5: pull-from-mirror must be");
  parse_bad ("a = 1\na = 2\n", "t.conf:2: a given twice");
  parse_bad ("x = [1, 2\n", "expected ',' or ']'");
  parse_bad ("[[registry]]\nlocation = \"a\\q\"\n", "t.conf:2: unknown escape");
}

static void
test_match (void **state)
{
  (void) state;
  ib_regconf_t *c = parse_ok ("[[registry]]\nlocation = \"docker.io\"\n"
                              "[[registry]]\nprefix = \"docker.io/library\"\nlocation = \"m/lib\"\n"
                              "[[registry]]\nprefix = \"*.corp.example\"\n");
  assert_ptr_equal (ib_regconf_match (c, "docker.io/library/debian"), &c->entries[1]);
  assert_ptr_equal (ib_regconf_match (c, "docker.io/library"), &c->entries[1]);
  /* prefixes end at a path component */
  assert_ptr_equal (ib_regconf_match (c, "docker.io/libraryx/debian"), &c->entries[0]);
  assert_ptr_equal (ib_regconf_match (c, "docker.io/nvidia/cuda"), &c->entries[0]);
  assert_null (ib_regconf_match (c, "docker.iox/a"));
  assert_ptr_equal (ib_regconf_match (c, "reg.corp.example:5000/a/b"), &c->entries[2]);
  assert_ptr_equal (ib_regconf_match (c, "a.b.corp.example/x"), &c->entries[2]);
  assert_null (ib_regconf_match (c, "corp.example/x"));
  assert_null (ib_regconf_match (c, "quay.io/a"));
  assert_null (ib_regconf_match (NULL, "quay.io/a"));
  ib_regconf_free (c);
}

static void
expect_source (const ib_reg_source_t *s, const char *registry, const char *repository,
               bool insecure, bool mirror)
{
  assert_string_equal (s->registry, registry);
  assert_string_equal (s->repository, repository);
  assert_int_equal (s->insecure, insecure);
  assert_int_equal (s->mirror, mirror);
}

static void
test_sources (void **state)
{
  (void) state;
  ib_regconf_t *c = parse_ok (full_conf);
  ib_reg_source_t *s = NULL;
  size_t n = 0;
  ib_error_t err = NULL;

  /* by tag: mirror a (b is digest-only), then the rewritten location */
  assert_int_equal (ib_regconf_sources (c, "docker.io", "library/debian", false, false, &s, &n, &err), 0);
  assert_int_equal (n, 2);
  expect_source (&s[0], "mirror-a.example:5000", "debian", false, true);
  expect_source (&s[1], "127.0.0.1:5000", "lib/debian", true, false);
  ib_reg_sources_free (s, n);

  /* by digest: both mirrors */
  assert_int_equal (ib_regconf_sources (c, "docker.io", "library/debian", true, false, &s, &n, &err), 0);
  assert_int_equal (n, 3);
  expect_source (&s[1], "mirror-b.example", "cache/debian", true, true);
  ib_reg_sources_free (s, n);

  /* push: never a mirror */
  assert_int_equal (ib_regconf_sources (c, "docker.io", "library/debian", false, true, &s, &n, &err), 0);
  assert_int_equal (n, 1);
  expect_source (&s[0], "127.0.0.1:5000", "lib/debian", true, false);
  ib_reg_sources_free (s, n);

  /* mirror-by-digest-only */
  assert_int_equal (ib_regconf_sources (c, "ghcr.io", "a/b", false, false, &s, &n, &err), 0);
  assert_int_equal (n, 1);
  expect_source (&s[0], "ghcr.io", "a/b", false, false);
  ib_reg_sources_free (s, n);
  assert_int_equal (ib_regconf_sources (c, "ghcr.io", "a/b", true, false, &s, &n, &err), 0);
  assert_int_equal (n, 3);
  expect_source (&s[0], "ghcr-mirror.example", "a/b", false, true);
  expect_source (&s[1], "m2.example", "a/b", true, true);
  ib_reg_sources_free (s, n);

  /* wildcard: insecure, no rewrite */
  assert_int_equal (ib_regconf_sources (c, "r.corp.example", "x", false, false, &s, &n, &err), 0);
  assert_int_equal (n, 1);
  expect_source (&s[0], "r.corp.example", "x", true, false);
  ib_reg_sources_free (s, n);

  /* no entry, no config */
  assert_int_equal (ib_regconf_sources (c, "nvcr.io", "nvidia/cuda", false, false, &s, &n, &err), 0);
  expect_source (&s[0], "nvcr.io", "nvidia/cuda", false, false);
  ib_reg_sources_free (s, n);
  assert_int_equal (ib_regconf_sources (NULL, "nvcr.io", "nvidia/cuda", false, false, &s, &n, &err), 0);
  assert_int_equal (n, 1);
  ib_reg_sources_free (s, n);

  /* blocked, for pulls and pushes */
  for (int push = 0; push < 2; push++)
    {
      assert_int_equal (ib_regconf_sources (c, "quay.io", "pypa/x", false, push, &s, &n, &err), -1);
      assert_int_equal (err->status, EACCES);
      assert_string_equal (err->msg, "quay.io/pypa/x: blocked by t.conf:20 (blocked = true)");
      assert_null (s);
      ib_error_free (&err);
    }
  ib_regconf_free (c);

  /* a location that leaves no repository */
  c = parse_ok ("[[registry]]\nprefix = \"docker.io/library/debian\"\nlocation = \"m.example\"\n");
  assert_int_equal (ib_regconf_sources (c, "docker.io", "library/debian", false, false, &s, &n, &err), -1);
  assert_non_null (strstr (err->msg, "names no repository"));
  ib_error_free (&err);
  ib_regconf_free (c);
}

static void
test_parse_size (void **state)
{
  (void) state;
  static const struct
  {
    const char *in;
    uint64_t want;
  } ok[] = {
    { "0", 0 },          { "1048576", 1048576 }, { "512k", 524288 },   { "1M", 1048576 },
    { "1MiB", 1048576 }, { "5mb", 5000000 },     { "2G", 2147483648ULL }, { "3kB", 3000 },
    { "7b", 7 },
  };
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
    {
      uint64_t v = 1;
      ib_error_t err = NULL;
      if (ib_parse_size (ok[i].in, &v, &err) < 0)
        fail_msg ("%s: %s", ok[i].in, err->msg);
      assert_int_equal (v, ok[i].want);
    }
  static const char *bad[] = { "", "M", "-1", "1.5M", "1T", "1 M", "99999999999999999999", "20000000000G" };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    {
      uint64_t v;
      ib_error_t err = NULL;
      if (ib_parse_size (bad[i], &v, &err) == 0)
        fail_msg ("\"%s\" parsed as %llu", bad[i], (unsigned long long) v);
      assert_non_null (strstr (err->msg, bad[i]));
      ib_error_free (&err);
    }
}

static void
test_parse_seconds (void **state)
{
  (void) state;
  static const struct
  {
    const char *in;
    long want;
  } ok[] = { { "1", 1 }, { "60", 60 }, { "90s", 90 }, { "86400", 86400 } };
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
    {
      long v = 0;
      ib_error_t err = NULL;
      if (ib_parse_seconds (ok[i].in, &v, &err) < 0)
        fail_msg ("%s: %s", ok[i].in, err->msg);
      assert_int_equal (v, ok[i].want);
    }
  static const char *bad[] = { "", "0", "-5", "soon", "1m", "1.5", "86401", " 5", "5 ",
                               "99999999999999999999" };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    {
      long v = 0;
      ib_error_t err = NULL;
      if (ib_parse_seconds (bad[i], &v, &err) == 0)
        fail_msg ("\"%s\" parsed as %ld", bad[i], v);
      assert_non_null (strstr (err->msg, bad[i]));
      ib_error_free (&err);
    }
}

/* The network limits: defaults, the environment, a bad value ignored.
 * They are read once per process: the only test that asks for them. */
static void
test_net_limits (void **state)
{
  (void) state;
  unsetenv ("IMGBUILD_REQUEST_TIMEOUT");
  setenv ("IMGBUILD_STALL_TIMEOUT", "later", 1);
  setenv ("IMGBUILD_PROGRESS_TIMEOUT", "7", 1);
  assert_int_equal (ib_regconf_net_limit (IB_NET_REQUEST), 60);
  assert_int_equal (ib_regconf_net_limit (IB_NET_STALL), 60);
  assert_int_equal (ib_regconf_net_limit (IB_NET_PROGRESS), 7);
  setenv ("IMGBUILD_PROGRESS_TIMEOUT", "8", 1); /* read once: no change */
  assert_int_equal (ib_regconf_net_limit (IB_NET_PROGRESS), 7);
  assert_string_equal (ib_regconf_net_limit_var (IB_NET_REQUEST), "IMGBUILD_REQUEST_TIMEOUT");
  assert_string_equal (ib_regconf_net_limit_var (IB_NET_STALL), "IMGBUILD_STALL_TIMEOUT");
  assert_string_equal (ib_regconf_net_limit_var (IB_NET_PROGRESS), "IMGBUILD_PROGRESS_TIMEOUT");
  unsetenv ("IMGBUILD_STALL_TIMEOUT");
  unsetenv ("IMGBUILD_PROGRESS_TIMEOUT");
}

static void
put (const char *dir, const char *name, const char *text)
{
  cleanup_free char *p = ib_path_join (dir, name);
  ib_error_t err = NULL;
  if (ib_write_file_atomic (p, text, strlen (text), 0644, &err) < 0)
    fail_msg ("%s", err->msg);
}

static void
mkdirs (const char *p)
{
  ib_error_t err = NULL;
  if (ib_mkdir_p (p, 0755, &err) < 0)
    fail_msg ("%s", err->msg);
}

static void
test_certs (void **state)
{
  const char *dir = *state;
  cleanup_free char *r1 = ib_path_join (dir, "user-certs.d");
  cleanup_free char *r2 = ib_path_join (dir, "etc-certs.d");
  cleanup_free char *h1 = ib_path_join (r1, "reg.example:5000");
  cleanup_free char *h2 = ib_path_join (r2, "reg.example:5000");
  cleanup_free char *h3 = ib_path_join (r2, "other.example");
  mkdirs (h2);
  mkdirs (h3);
  put (h2, "b.crt", "B-CA\n");
  put (h2, "a.crt", "A-CA");
  put (h2, "z.cert", "CLIENT-Z");
  put (h2, "z.key", "KEY-Z");
  put (h2, "c.cert", "CLIENT-C");
  put (h2, "c.key", "KEY-C");
  put (h2, "README", "not a certificate");
  const char *roots[] = { r1, r2, NULL };

  /* the first root has no directory for the host: the second is used */
  ib_certs_t c;
  ib_error_t err = NULL;
  assert_int_equal (ib_certs_find ("reg.example:5000", NULL, roots, &c, &err), 0);
  assert_string_equal (c.dir, h2);
  assert_int_equal (ib_strv_len (c.ca_files), 2);
  cleanup_free char *a = ib_path_join (h2, "a.crt");
  cleanup_free char *ck = ib_path_join (h2, "c.key");
  cleanup_free char *cc = ib_path_join (h2, "c.cert");
  assert_string_equal (c.ca_files[0], a);
  assert_string_equal (c.client_cert, cc);
  assert_string_equal (c.client_key, ck);

  /* the bundle: system CAs first, then the registry's, each ending in a newline */
  cleanup_free char *sys = ib_path_join (dir, "system.pem");
  put (dir, "system.pem", "SYSTEM\n");
  cleanup_free char *bundle = NULL;
  size_t len = 0;
  assert_int_equal (ib_certs_ca_bundle (&c, sys, &bundle, &len, &err), 0);
  assert_string_equal (bundle, "SYSTEM\nA-CA\nB-CA\n");
  assert_int_equal (len, strlen (bundle));
  free (bundle);
  bundle = NULL;
  cleanup_free char *nosys = ib_path_join (dir, "no-such.pem");
  assert_int_equal (ib_certs_ca_bundle (&c, nosys, &bundle, &len, &err), 0);
  assert_string_equal (bundle, "A-CA\nB-CA\n");
  ib_certs_clear (&c);

  /* an existing directory in the first root wins, even when empty */
  mkdirs (h1);
  assert_int_equal (ib_certs_find ("reg.example:5000", NULL, roots, &c, &err), 0);
  assert_string_equal (c.dir, h1);
  assert_null (c.ca_files);
  assert_null (c.client_cert);
  free (bundle);
  bundle = NULL;
  assert_int_equal (ib_certs_ca_bundle (&c, sys, &bundle, &len, &err), 0);
  assert_null (bundle);
  ib_certs_clear (&c);

  /* no directory at all */
  assert_int_equal (ib_certs_find ("none.example", NULL, roots, &c, &err), 0);
  assert_null (c.dir);
  ib_certs_clear (&c);

  /* --cert-dir: the directory itself, whatever the host */
  assert_int_equal (ib_certs_find ("none.example", h2, roots, &c, &err), 0);
  assert_string_equal (c.dir, h2);
  assert_int_equal (ib_strv_len (c.ca_files), 2);
  ib_certs_clear (&c);
  cleanup_free char *missing = ib_path_join (dir, "missing");
  assert_int_equal (ib_certs_find ("none.example", missing, roots, &c, &err), -1);
  assert_int_equal (err->status, ENOENT);
  assert_non_null (strstr (err->msg, "--cert-dir"));
  ib_error_free (&err);

  /* a certificate without its key, a key without its certificate */
  put (h3, "client.cert", "C");
  assert_int_equal (ib_certs_find ("other.example", NULL, roots, &c, &err), -1);
  assert_non_null (strstr (err->msg, "client.cert has no key"));
  ib_error_free (&err);
  cleanup_free char *cert = ib_path_join (h3, "client.cert");
  unlink (cert);
  put (h3, "client.key", "K");
  assert_int_equal (ib_certs_find ("other.example", NULL, roots, &c, &err), -1);
  assert_non_null (strstr (err->msg, "client.key has no certificate"));
  ib_error_free (&err);
}

static void
put_manifest (ib_store_t *s, const char *config_digest, const char *layer_digest,
              char out[IB_DIGEST_LEN])
{
  ib_descriptor_t config = { .media_type = (char *) IB_MT_OCI_CONFIG, .size = 2 };
  ib_descriptor_t layer = { .media_type = (char *) IB_MT_OCI_LAYER_GZIP, .size = 3 };
  snprintf (config.digest, sizeof config.digest, "%s", config_digest);
  snprintf (layer.digest, sizeof layer.digest, "%s", layer_digest);
  cleanup_free char *m = ib_manifest_serialize (&config, &layer, 1, NULL);
  ib_error_t err = NULL;
  if (ib_store_put_blob (s, m, strlen (m), out, &err) < 0)
    fail_msg ("%s", err->msg);
}

static void
test_blob_sources (void **state)
{
  const char *dir = *state;
  cleanup_free char *root = ib_path_join (dir, "store");
  ib_store_t *s = NULL;
  ib_error_t err = NULL;
  if (ib_store_open (root, &s, &err) < 0)
    fail_msg ("%s", err->msg);
  char cfg[IB_DIGEST_LEN], l1[IB_DIGEST_LEN], l2[IB_DIGEST_LEN];
  ib_digest_buf ("c", 1, cfg);
  ib_digest_buf ("layer1", 6, l1);
  ib_digest_buf ("layer2", 6, l2);
  char m1[IB_DIGEST_LEN], m2[IB_DIGEST_LEN], m3[IB_DIGEST_LEN];
  put_manifest (s, cfg, l1, m1);
  put_manifest (s, cfg, l2, m2);
  put_manifest (s, cfg, l1, m3);
  /* same content as m1: same digest */
  assert_string_equal (m1, m3);
  assert_int_equal (ib_store_tag_source (s, "r.example/a:1", IB_MT_OCI_MANIFEST, m1, 10,
                                         "r.example/a", &err), 0);
  assert_int_equal (ib_store_tag_source (s, "r.example/b:1", IB_MT_OCI_MANIFEST, m2, 10,
                                         "mirror.example/cache/b", &err), 0);
  assert_int_equal (ib_store_tag (s, "local/built:1", IB_MT_OCI_MANIFEST, m1, 10, &err), 0);
  /* the same source twice is listed once */
  assert_int_equal (ib_store_tag_source (s, "r.example/a:2", IB_MT_OCI_MANIFEST, m1, 10,
                                         "r.example/a", &err), 0);

  cleanup_strv char **src = NULL;
  assert_int_equal (ib_store_blob_sources (s, l1, &src, &err), 0);
  assert_int_equal (ib_strv_len (src), 1);
  assert_string_equal (src[0], "r.example/a");
  ib_strv_free (src);
  src = NULL;
  assert_int_equal (ib_store_blob_sources (s, cfg, &src, &err), 0);
  assert_int_equal (ib_strv_len (src), 2);
  assert_string_equal (src[0], "r.example/a");
  assert_string_equal (src[1], "mirror.example/cache/b");
  ib_strv_free (src);
  src = NULL;
  char other[IB_DIGEST_LEN];
  ib_digest_buf ("other", 5, other);
  assert_int_equal (ib_store_blob_sources (s, other, &src, &err), 0);
  assert_null (src);

  /* retagging without a source drops it */
  assert_int_equal (ib_store_tag (s, "r.example/b:1", IB_MT_OCI_MANIFEST, m2, 10, &err), 0);
  assert_int_equal (ib_store_blob_sources (s, l2, &src, &err), 0);
  assert_null (src);
  ib_store_close (s);
}

static void
put_file (const char *dir, const char *rel, const char *text)
{
  cleanup_free char *p = ib_path_join (dir, rel);
  cleanup_free char *d = xstrdup (p);
  *strrchr (d, '/') = '\0';
  ib_error_t err = NULL;
  assert_int_equal (ib_mkdir_p (d, 0700, &err), 0);
  assert_int_equal (ib_write_file_atomic (p, text, strlen (text), 0644, &err), 0);
}

/* containers-registries.conf(5)'s files: a main file, then the drop-ins
 * of the system's and the user's registries.conf.d (a user one replacing
 * the system one of its name), merged by prefix. */
static void
test_drop_ins (void **state)
{
  const char *root = *state;
  cleanup_free char *home = ib_path_join (root, "home");
  cleanup_free char *saved_home = xstrdup (getenv ("HOME"));
  cleanup_free char *saved_xdg = getenv ("XDG_CONFIG_HOME") ? xstrdup (getenv ("XDG_CONFIG_HOME"))
                                                            : NULL;
  setenv ("HOME", home, 1);
  unsetenv ("XDG_CONFIG_HOME");
  cleanup_strv char **none = ib_regconf_default_files (root);
  assert_null (none);

  put_file (root, "etc/containers/registries.conf",
            "[[registry]]\nprefix = \"a.io\"\nlocation = \"sys-main.io\"\n");
  put_file (root, "etc/containers/registries.conf.d/10-b.conf",
            "[[registry]]\nprefix = \"b.io\"\nlocation = \"sys-b.io\"\n");
  put_file (root, "etc/containers/registries.conf.d/20-a.conf",
            "[[registry]]\nprefix = \"a.io\"\nlocation = \"sys-dropin.io\"\n");
  put_file (root, "etc/containers/registries.conf.d/30-c.conf",
            "[[registry]]\nprefix = \"c.io\"\nlocation = \"sys-c.io\"\n");
  put_file (root, "etc/containers/registries.conf.d/notes.txt", "not a drop-in\n");
  put_file (home, ".config/containers/registries.conf.d/30-c.conf",
            "[[registry]]\nprefix = \"c.io\"\nlocation = \"user-c.io\"\n");
  put_file (home, ".config/containers/registries.conf.d/40-d.conf",
            "[[registry]]\nprefix = \"d.io\"\nlocation = \"user-d.io\"\n");
  cleanup_strv char **files = ib_regconf_default_files (root);
  const char *want[] = { "etc/containers/registries.conf",
                         "etc/containers/registries.conf.d/10-b.conf",
                         "etc/containers/registries.conf.d/20-a.conf",
                         "home/.config/containers/registries.conf.d/30-c.conf",
                         "home/.config/containers/registries.conf.d/40-d.conf", NULL };
  for (size_t i = 0; want[i]; i++)
    {
      cleanup_free char *p = ib_path_join (root, want[i]);
      assert_non_null (files[i]);
      assert_string_equal (files[i], p);
    }
  assert_null (files[5]);

  ib_regconf_t *all = NULL;
  for (char **f = files; *f; f++)
    {
      ib_regconf_t *c = NULL;
      ib_error_t err = NULL;
      assert_int_equal (ib_regconf_load (*f, &c, &err), 0);
      ib_regconf_merge (&all, c);
    }
  const char *loc[][3] = { { "a.io/x", "sys-dropin.io", "20-a.conf" },
                           { "b.io/x", "sys-b.io", "10-b.conf" },
                           { "c.io/x", "user-c.io", "home/.config" },
                           { "d.io/x", "user-d.io", "40-d.conf" } };
  assert_int_equal (all->n_entries, 4);
  for (size_t i = 0; i < 4; i++)
    {
      const ib_reg_entry_t *e = ib_regconf_match (all, loc[i][0]);
      assert_non_null (e);
      assert_string_equal (e->location, loc[i][1]);
      assert_non_null (strstr (e->path, loc[i][2])); /* messages name the drop-in */
    }
  ib_regconf_free (all);

  /* the user's containers/registries.conf is the main file when it exists,
   * and imgbuild's own before it */
  put_file (home, ".config/containers/registries.conf", "");
  cleanup_strv char **f2 = ib_regconf_default_files (root);
  assert_non_null (strstr (f2[0], "home/.config/containers/registries.conf"));
  put_file (home, ".config/imgbuild/registries.conf", "");
  cleanup_strv char **f3 = ib_regconf_default_files (root);
  assert_non_null (strstr (f3[0], "home/.config/imgbuild/registries.conf"));
  setenv ("HOME", saved_home, 1);
  if (saved_xdg)
    setenv ("XDG_CONFIG_HOME", saved_xdg, 1);
}

/* Short names: [aliases], unqualified-search-registries, short-name-mode
 * (containers-registries.conf(5)), merged as drop-ins are, and resolved. */
static void
expect_candidates (const ib_regconf_t *c, const char *name, const char *want, const char *how)
{
  cleanup_strv char **got = NULL;
  cleanup_free char *h = NULL;
  ib_error_t err = NULL;
  if (ib_short_name_resolve (c, name, &got, &h, &err) < 0)
    fail_msg ("%s: %s", name, err->msg);
  ib_buf_t b = { 0 };
  for (char **g = got; *g; g++)
    ib_buf_printf (&b, "%s%s", g == got ? "" : " ", *g);
  if (strcmp (b.data, want) != 0)
    fail_msg ("%s: got \"%s\", want \"%s\"", name, b.data, want);
  ib_buf_free (&b);
  if (how == NULL)
    assert_null (h);
  else if (h == NULL || strcmp (h, how) != 0)
    fail_msg ("%s: how \"%s\", want \"%s\"", name, h ? h : "(null)", how);
}

static void
test_short_names (void **state)
{
  (void) state;
  ib_regconf_t *c = parse_ok ("unqualified-search-registries = [\"registry.example\", "
                              "\"docker.io\"]\n"
                              "short-name-mode = \"permissive\"\n"
                              "[aliases]\n"
                              "\"centos\" = \"quay.io/centos/centos\"\n"
                              "\"team/app\" = \"ghcr.io/team/app\"\n");
  assert_int_equal (ib_strv_len (c->search), 2);
  assert_string_equal (c->search_path, "t.conf");
  assert_int_equal (c->short_name_mode, IB_SHORT_NAME_PERMISSIVE);
  /* an alias keeps the tag or digest */
  expect_candidates (c, "centos:7", "quay.io/centos/centos:7", "alias centos in t.conf");
  expect_candidates (c, "team/app@sha256:" "0123456789abcdef0123456789abcdef0123456789abcdef"
                        "0123456789abcdef",
                     "ghcr.io/team/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef"
                     "0123456789abcdef",
                     "alias team/app in t.conf");
  /* search registries in order, docker.io's library/ for one component */
  expect_candidates (c, "debian:12", "registry.example/debian:12 docker.io/library/debian:12",
                     "unqualified-search-registries of t.conf");
  expect_candidates (c, "pypa/manylinux", "registry.example/pypa/manylinux docker.io/pypa/manylinux",
                     "unqualified-search-registries of t.conf");
  /* a name with a registry is itself */
  expect_candidates (c, "localhost:5000/centos:7", "localhost:5000/centos:7", NULL);
  expect_candidates (c, "quay.io/x/y", "quay.io/x/y", NULL);
  /* no configuration: Docker's rule downstream */
  expect_candidates (NULL, "debian", "debian", NULL);

  /* a drop-in: the search list replaced, an alias replaced, one added,
   * the mode back to enforcing: two registries are then ambiguous */
  ib_regconf_t *d = NULL;
  ib_error_t err = NULL;
  assert_int_equal (ib_regconf_parse ("d.conf",
                                      "short-name-mode = \"enforcing\"\n[aliases]\n"
                                      "\"centos\" = \"registry.example/centos\"\n"
                                      "\"alpine\" = \"docker.io/library/alpine\"\n",
                                      &d, &err),
                    0);
  ib_regconf_merge (&c, d);
  expect_candidates (c, "centos", "registry.example/centos", "alias centos in d.conf");
  expect_candidates (c, "alpine:3", "docker.io/library/alpine:3", "alias alpine in d.conf");
  cleanup_strv char **got = NULL;
  assert_int_equal (ib_short_name_resolve (c, "debian", &got, NULL, &err), -1);
  assert_non_null (strstr (err->msg, "short name debian is ambiguous: unqualified-search-registries "
                                     "in t.conf lists registry.example, docker.io"));
  assert_non_null (strstr (err->msg, "write the whole name (registry.example/debian)"));
  ib_error_free (&err);
  ib_regconf_t *one = NULL;
  assert_int_equal (ib_regconf_parse ("e.conf", "unqualified-search-registries = [\"docker.io\"]\n",
                                      &one, &err),
                    0);
  ib_regconf_merge (&c, one);
  expect_candidates (c, "debian", "docker.io/library/debian",
                     "unqualified-search-registries of e.conf");
  ib_regconf_t *none = NULL;
  assert_int_equal (ib_regconf_parse ("f.conf", "unqualified-search-registries = []\n", &none, &err), 0);
  ib_regconf_merge (&c, none);
  assert_int_equal (ib_short_name_resolve (c, "debian", &got, NULL, &err), -1);
  assert_non_null (strstr (err->msg, "unqualified-search-registries in f.conf is empty"));
  ib_error_free (&err);
  ib_regconf_free (c);

  parse_bad ("[aliases]\n\"quay.io/x\" = \"quay.io/x\"\n", "t.conf:2: alias \"quay.io/x\": a short name");
  parse_bad ("[aliases]\n\"x\" = \"x/y\"\n", "alias x = \"x/y\": the value is REGISTRY/REPOSITORY");
  parse_bad ("[aliases]\n\"x\" = \"quay.io/x:1\"\n", "the value is REGISTRY/REPOSITORY");
  parse_bad ("[aliases]\n\"x\" = \"quay.io/x\"\n\"x\" = \"quay.io/y\"\n", "t.conf:3: alias x given twice");
  parse_bad ("short-name-mode = \"ask\"\n", "short-name-mode \"ask\": expected enforcing");
  parse_bad ("unqualified-search-registries = [\"https://x\"]\n", "a host[:port], without a path");
  parse_bad ("unqualified-search-registries = \"docker.io\"\n", "must be an array");
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test (test_parse_full),
    cmocka_unit_test (test_parse_errors),
    cmocka_unit_test (test_match),
    cmocka_unit_test (test_short_names),
    cmocka_unit_test (test_sources),
    cmocka_unit_test (test_parse_size),
    cmocka_unit_test (test_parse_seconds),
    cmocka_unit_test (test_net_limits),
    unit_test_in_tmpdir (test_certs),
    unit_test_in_tmpdir (test_blob_sources),
    unit_test_in_tmpdir (test_drop_ins),
  };
  return cmocka_run_group_tests (tests, NULL, NULL);
}
