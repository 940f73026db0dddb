/* tests/unit/test_ref.c — image reference normalization (oci/ref.h), sha256
 * digests (oci/digest.h) and the WWW-Authenticate parser (oci/registry.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/util.h"
#include "oci/digest.h"
#include "oci/ref.h"
#include "oci/auth.h"
#include "oci/registry.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define D64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define DG "sha256:" D64

struct ok_case
{
  const char *in, *registry, *repository, *tag, *digest, *full;
};

static const struct ok_case ok_cases[] = {
  { "ubuntu", "docker.io", "library/ubuntu", "latest", NULL, "docker.io/library/ubuntu:latest" },
  { "ubuntu:14.04", "docker.io", "library/ubuntu", "14.04", NULL, "docker.io/library/ubuntu:14.04" },
  { "library/ubuntu:14.04", "docker.io", "library/ubuntu", "14.04", NULL,
    "docker.io/library/ubuntu:14.04" },
  { "docker.io/ubuntu", "docker.io", "library/ubuntu", "latest", NULL,
    "docker.io/library/ubuntu:latest" },
  { "index.docker.io/library/debian:bookworm", "docker.io", "library/debian", "bookworm", NULL,
    "docker.io/library/debian:bookworm" },
  { "nvidia/cuda:9.0-devel", "docker.io", "nvidia/cuda", "9.0-devel", NULL,
    "docker.io/nvidia/cuda:9.0-devel" },
  { "quay.io/pypa/manylinux2014_x86_64", "quay.io", "pypa/manylinux2014_x86_64", "latest", NULL,
    "quay.io/pypa/manylinux2014_x86_64:latest" },
  { "nvcr.io/nvidia/cuda:9.0-devel", "nvcr.io", "nvidia/cuda", "9.0-devel", NULL,
    "nvcr.io/nvidia/cuda:9.0-devel" },
  { "127.0.0.1:5000/x", "127.0.0.1:5000", "x", "latest", NULL, "127.0.0.1:5000/x:latest" },
  { "localhost/foo", "localhost", "foo", "latest", NULL, "localhost/foo:latest" },
  { "localhost:5000/a/b:tag@" DG, "localhost:5000", "a/b", "tag", DG,
    "localhost:5000/a/b:tag@" DG },
  { "ubuntu@" DG, "docker.io", "library/ubuntu", NULL, DG, "docker.io/library/ubuntu@" DG },
  { "[::1]:5000/img:v1", "[::1]:5000", "img", "v1", NULL, "[::1]:5000/img:v1" },
  { "Example.COM/foo", "Example.COM", "foo", "latest", NULL, "Example.COM/foo:latest" },
  { "a-b__c---d/f_g.h:Tag_1.x-y", "docker.io", "a-b__c---d/f_g.h", "Tag_1.x-y", NULL,
    "docker.io/a-b__c---d/f_g.h:Tag_1.x-y" },
  { "localhost:5000", "docker.io", "library/localhost", "5000", NULL,
    "docker.io/library/localhost:5000" },
  { "ghcr.io/a/b/c/d:1", "ghcr.io", "a/b/c/d", "1", NULL, "ghcr.io/a/b/c/d:1" },
};

static void
test_ref_ok (void **state)
{
  (void) state;
  for (size_t i = 0; i < sizeof ok_cases / sizeof ok_cases[0]; i++)
    {
      const struct ok_case *c = &ok_cases[i];
      ib_ref_t r;
      ib_error_t err = NULL;
      int rc = ib_ref_parse (c->in, &r, &err);
      if (rc != 0)
        fail_msg ("%s: %s", c->in, err->msg);
      assert_string_equal (r.registry, c->registry);
      assert_string_equal (r.repository, c->repository);
      if (c->tag)
        assert_string_equal (r.tag, c->tag);
      else
        assert_null (r.tag);
      if (c->digest)
        assert_string_equal (r.digest, c->digest);
      else
        assert_null (r.digest);
      char *s = ib_ref_string (&r);
      assert_string_equal (s, c->full);
      /* normalization is idempotent */
      ib_ref_t r2;
      assert_int_equal (ib_ref_parse (s, &r2, &err), 0);
      char *s2 = ib_ref_string (&r2);
      assert_string_equal (s, s2);
      free (s);
      free (s2);
      ib_ref_free (&r2);
      ib_ref_free (&r);
    }
}

static const struct
{
  const char *in, *want; /* want: a substring of the error message */
} bad_cases[] = {
  { "", "empty" },
  { "Ubuntu", "lowercase" },
  { "docker.io/Library/ubuntu", "lowercase" },
  { "ubuntu@sha256:abc", "bad digest" },
  { "ubuntu@sha256:" D64 "00", "bad digest" },
  { "ubuntu@sha512:" D64, "bad digest" },
  { "ubuntu@sha256:0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef", "bad digest" },
  { "ubuntu:", "bad tag" },
  { "ubuntu:-x", "bad tag" },
  { "ubuntu:a/b", "bad registry host" }, /* "ubuntu:a" has ':' so it is a host, port "a" */
  { D64, "image id" },
  { "a//b", "bad repository name component" },
  { "a/b/", "bad repository name component" },
  { "_a/b", "bad repository name component" },
  { "a_/b", "bad repository name component" },
  { "a/b..c", "bad repository name component" },
  { "a/b___c", "bad repository name component" },
  { "ex ample/x", "whitespace" },
  { "quay.io:/x", "bad registry host" },
  { "a__b.c/x", "bad registry host" }, /* '.' makes it a host; '_' is no host character */
  { "-quay.io/x", "bad registry host" },
  { "quay.io:50a/x", "bad registry host" },
  { "a@" DG "@" DG, "more than one" },
  { "localhost:5000/", "empty" },
  { ":tag", "empty" },
};

static void
test_ref_bad (void **state)
{
  (void) state;
  for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++)
    {
      ib_ref_t r;
      ib_error_t err = NULL;
      int rc = ib_ref_parse (bad_cases[i].in, &r, &err);
      if (rc == 0)
        {
          char *s = ib_ref_string (&r);
          fail_msg ("\"%s\" parsed as %s", bad_cases[i].in, s);
        }
      assert_non_null (err);
      if (strstr (err->msg, bad_cases[i].want) == NULL)
        fail_msg ("\"%s\": message \"%s\" lacks \"%s\"", bad_cases[i].in, err->msg,
                  bad_cases[i].want);
      /* errors name the input */
      assert_non_null (strstr (err->msg, bad_cases[i].in));
      ib_error_free (&err);
    }
}

static void
test_ref_long (void **state)
{
  (void) state;
  char name[300];
  memset (name, 'a', sizeof name);
  name[sizeof name - 1] = '\0';
  ib_ref_t r;
  ib_error_t err = NULL;
  assert_int_equal (ib_ref_parse (name, &r, &err), -1);
  assert_non_null (strstr (err->msg, "longer than"));
  ib_error_free (&err);

  char tag[140];
  memset (tag, 'x', sizeof tag);
  tag[sizeof tag - 1] = '\0';
  char *s = xasprintf ("ubuntu:%s", tag);
  assert_int_equal (ib_ref_parse (s, &r, &err), -1);
  ib_error_free (&err);
  free (s);
}

static void
test_ref_host (void **state)
{
  (void) state;
  ib_ref_t r;
  ib_error_t err = NULL;
  assert_int_equal (ib_ref_parse ("ubuntu", &r, &err), 0);
  assert_string_equal (ib_ref_api_host (&r), "registry-1.docker.io");
  assert_false (ib_ref_plain_http (&r));
  ib_ref_free (&r);

  static const char *plain[] = { "localhost:5000/a", "127.0.0.1:5000/x", "[::1]:5000/x",
                                 "localhost/x", "127.1.2.3/x" };
  for (size_t i = 0; i < 5; i++)
    {
      assert_int_equal (ib_ref_parse (plain[i], &r, &err), 0);
      assert_true (ib_ref_plain_http (&r));
      assert_string_equal (ib_ref_api_host (&r), r.registry);
      ib_ref_free (&r);
    }
  static const char *tls[] = { "quay.io/a/b", "nvcr.io/nvidia/cuda", "localhost.example.com/x",
                               "127.0.0.1.nip.io/x", "[::2]:5000/x" };
  for (size_t i = 0; i < 5; i++)
    {
      assert_int_equal (ib_ref_parse (tls[i], &r, &err), 0);
      assert_false (ib_ref_plain_http (&r));
      ib_ref_free (&r);
    }
}

static void
test_digest (void **state)
{
  (void) state;
  char d[IB_DIGEST_LEN];
  /* values from `printf ... | sha256sum` */
  ib_digest_buf ("", 0, d);
  assert_string_equal (d, "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  ib_digest_buf ("hello", 5, d);
  assert_string_equal (d, "sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824");
  ib_sha256_t *h = ib_sha256_new ();
  ib_sha256_update (h, "he", 2);
  ib_sha256_update (h, "llo", 3);
  ib_sha256_final (h, d);
  assert_string_equal (d, "sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824");
  assert_true (ib_digest_valid (d));
  assert_string_equal (ib_digest_hex (d), d + 7);
  assert_false (ib_digest_valid ("sha256:"));
  assert_false (ib_digest_valid (NULL));
  assert_false (ib_digest_valid ("sha512:" D64));
  assert_false (ib_digest_valid ("sha256:" D64 "0"));
  assert_false (ib_digest_valid ("sha256:0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef"));
  ib_sha256_free (NULL);
  ib_sha256_free (ib_sha256_new ());

  char path[] = "/tmp/ib-test-digest-XXXXXX";
  int fd = mkstemp (path);
  assert_true (fd >= 0);
  assert_int_equal (write (fd, "hello", 5), 5);
  close (fd);
  uint64_t size = 0;
  ib_error_t err = NULL;
  assert_int_equal (ib_digest_file (path, d, &size, &err), 0);
  assert_int_equal (size, 5);
  assert_string_equal (d, "sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824");
  unlink (path);
  assert_int_equal (ib_digest_file (path, d, &size, &err), -1);
  assert_non_null (strstr (err->msg, path));
  ib_error_free (&err);
}

static void
test_challenge (void **state)
{
  (void) state;
  ib_auth_challenge_t c;
  ib_error_t err = NULL;

  assert_int_equal (ib_auth_challenge_parse (
                        "Bearer realm=\"https://auth.docker.io/token\",service=\"registry.docker.io\","
                        "scope=\"repository:library/ubuntu:pull\"",
                        &c, &err),
                    0);
  assert_string_equal (c.scheme, "Bearer");
  assert_string_equal (c.realm, "https://auth.docker.io/token");
  assert_string_equal (c.service, "registry.docker.io");
  assert_string_equal (c.scope, "repository:library/ubuntu:pull");
  ib_auth_challenge_clear (&c);

  /* commas inside quotes, spaces around '=' and ',', case-insensitive names, escapes */
  assert_int_equal (ib_auth_challenge_parse (
                        "  bearer Realm = \"https://h/t?a=1,b=2\" , SCOPE=\"repository:a/b:pull,push\","
                        " service=\"svc \\\"q\\\"\", error=\"insufficient_scope\"",
                        &c, &err),
                    0);
  assert_string_equal (c.scheme, "bearer");
  assert_string_equal (c.realm, "https://h/t?a=1,b=2");
  assert_string_equal (c.scope, "repository:a/b:pull,push");
  assert_string_equal (c.service, "svc \"q\"");
  ib_auth_challenge_clear (&c);

  /* bare token values, no scope */
  assert_int_equal (ib_auth_challenge_parse ("Bearer realm=https://x/token,service=x", &c, &err), 0);
  assert_string_equal (c.realm, "https://x/token");
  assert_string_equal (c.service, "x");
  assert_null (c.scope);
  ib_auth_challenge_clear (&c);

  assert_int_equal (ib_auth_challenge_parse ("Basic realm=\"Registry Realm\"", &c, &err), 0);
  assert_string_equal (c.scheme, "Basic");
  assert_string_equal (c.realm, "Registry Realm");
  ib_auth_challenge_clear (&c);

  /* only the first of two challenges */
  assert_int_equal (ib_auth_challenge_parse ("Basic realm=\"r\", Bearer realm=\"s\"", &c, &err), 0);
  assert_string_equal (c.scheme, "Basic");
  assert_string_equal (c.realm, "r");
  ib_auth_challenge_clear (&c);

  assert_int_equal (ib_auth_challenge_parse ("Bearer", &c, &err), 0);
  assert_null (c.realm);
  ib_auth_challenge_clear (&c);

  assert_int_equal (ib_auth_challenge_parse ("", &c, &err), -1);
  ib_error_free (&err);
  assert_int_equal (ib_auth_challenge_parse ("Bearer realm=\"unterminated", &c, &err), -1);
  assert_non_null (strstr (err->msg, "unterminated"));
  ib_error_free (&err);
  assert_int_equal (ib_auth_challenge_parse ("Bearer =x", &c, &err), -1);
  ib_error_free (&err);
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test (test_ref_ok),    cmocka_unit_test (test_ref_bad),
    cmocka_unit_test (test_ref_long),  cmocka_unit_test (test_ref_host),
    cmocka_unit_test (test_digest),    cmocka_unit_test (test_challenge),
  };
  return cmocka_run_group_tests (tests, NULL, NULL);
}
