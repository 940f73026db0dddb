/* tests/unit/test_mountspec.c — --mount / -v / --tmpfs parsing. */
#include "builder/engine/mountspec.h"
#include "common/util.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <stdlib.h>

static void
test_bind (void **state)
{
  (void) state;
  ib_mount_spec_t m;
  ib_error_t err = NULL;
  assert_int_equal (ib_mount_spec_parse ("target=ctx,source=src/a,from=build,rw", &m, &err), 0);
  assert_int_equal (m.type, IB_MSPEC_BIND);
  assert_string_equal (m.target, "ctx"); /* relative: RUN puts it under WORKDIR */
  assert_string_equal (m.source, "src/a");
  assert_string_equal (m.from, "build");
  assert_true (m.rw);
  assert_false (m.readonly);
  ib_mount_spec_clear (&m);
  assert_int_equal (ib_mount_spec_parse ("type=bind,dst=/x,src=.,ro", &m, &err), 0);
  assert_string_equal (m.target, "/x");
  assert_true (m.readonly);
  assert_false (m.rw);
  ib_mount_spec_clear (&m);
}

static void
test_cache_and_tmpfs (void **state)
{
  (void) state;
  ib_mount_spec_t m;
  ib_error_t err = NULL;
  assert_int_equal (ib_mount_spec_parse ("type=cache,target=/root/.ccache,id=cc,sharing=locked,"
                                         "mode=0700,uid=1000,gid=1001",
                                         &m, &err),
                    0);
  assert_int_equal (m.type, IB_MSPEC_CACHE);
  assert_string_equal (m.id, "cc");
  assert_string_equal (m.sharing, "locked");
  assert_int_equal (m.mode, 0700);
  assert_int_equal (m.uid, 1000);
  assert_int_equal (m.gid, 1001);
  ib_mount_spec_clear (&m);
  assert_int_equal (ib_mount_spec_parse ("type=cache,target=/c", &m, &err), 0);
  assert_null (m.id);
  assert_int_equal (m.mode, 0755);
  ib_mount_spec_clear (&m);
  /* BuildKit: from= is the base of the cache, source= a path in it */
  assert_int_equal (ib_mount_spec_parse ("type=cache,target=/c,from=seed,source=/opt/s", &m, &err),
                    0);
  assert_string_equal (m.from, "seed");
  assert_string_equal (m.source, "/opt/s");
  ib_mount_spec_clear (&m);
  assert_int_equal (ib_mount_spec_parse ("type=tmpfs,destination=/t,size=64m", &m, &err), 0);
  assert_int_equal (m.type, IB_MSPEC_TMPFS);
  assert_string_equal (m.size, "64m");
  ib_mount_spec_clear (&m);
}

static void
check_error (const char *value, const char *message)
{
  ib_mount_spec_t m;
  ib_error_t err = NULL;
  assert_int_equal (ib_mount_spec_parse (value, &m, &err), -1);
  assert_non_null (err);
  assert_string_equal (err->msg, message);
  ib_error_free (&err);
}

static void
test_errors (void **state)
{
  (void) state;
  check_error ("type=foo,target=/x", "--mount=type=foo,target=/x: unknown mount type 'foo' (bind, cache, tmpfs)");
  check_error ("type=secret,id=a", "--mount=type=secret,id=a: type=secret is not supported");
  check_error ("type=cache", "--mount=type=cache: target= is missing");
  check_error ("target=/x,bogus=1", "--mount=target=/x,bogus=1: unknown option 'bogus=1'");
  check_error ("type=cache,target=/x,sharing=maybe",
               "--mount=type=cache,target=/x,sharing=maybe: sharing takes shared, private or locked, got 'maybe'");
  check_error ("type=cache,target=/x,mode=99", "--mount=type=cache,target=/x,mode=99: bad mode '99'");
  check_error ("type=cache,target=/x,source=/a",
               "--mount=type=cache,target=/x,source=/a: a cache mount's source= is a path in from=, which is missing");
  check_error ("type=tmpfs,target=/x,from=a",
               "--mount=type=tmpfs,target=/x,from=a: from= and source= are for type=bind and type=cache");
  check_error ("type=tmpfs,target=/x,size=big", "--mount=type=tmpfs,target=/x,size=big: bad size 'big' (bytes, or k, m, g, t, or N%)");
  check_error ("type=bind,target=/x,size=1", "--mount=type=bind,target=/x,size=1: size= is for type=tmpfs");
  check_error ("target=/x,rw=perhaps", "--mount=target=/x,rw=perhaps: rw takes true or false, got 'perhaps'");
}

static void
test_volume_and_tmpfs_forms (void **state)
{
  (void) state;
  ib_mount_spec_t m;
  ib_error_t err = NULL;
  assert_int_equal (ib_mount_spec_parse_volume ("/host:/c:ro", &m, &err), 0);
  assert_string_equal (m.source, "/host");
  assert_string_equal (m.target, "/c");
  assert_true (m.readonly);
  ib_mount_spec_clear (&m);
  assert_int_equal (ib_mount_spec_parse_volume ("./rel:/c", &m, &err), 0);
  assert_false (m.readonly);
  assert_false (m.relabel);
  ib_mount_spec_clear (&m);
  /* podman's relabel options: accepted, recorded, nothing else */
  assert_int_equal (ib_mount_spec_parse_volume ("/h:/c:ro,Z", &m, &err), 0);
  assert_true (m.readonly);
  assert_true (m.relabel);
  ib_mount_spec_clear (&m);
  assert_int_equal (ib_mount_spec_parse_volume ("/h:/c:z", &m, &err), 0);
  assert_false (m.readonly);
  assert_true (m.relabel);
  ib_mount_spec_clear (&m);
  assert_int_equal (ib_mount_spec_parse ("type=bind,source=s,target=/t,Z", &m, &err), 0);
  assert_true (m.relabel);
  ib_mount_spec_clear (&m);
  assert_int_equal (ib_mount_spec_parse ("type=cache,target=/t,z", &m, &err), 0);
  assert_true (m.relabel);
  ib_mount_spec_clear (&m);
  assert_int_equal (ib_mount_spec_parse ("type=cache,target=/t,z=1", &m, &err), -1);
  assert_string_equal (err->msg, "--mount=type=cache,target=/t,z=1: unknown option 'z=1'");
  ib_error_free (&err);
  assert_int_equal (ib_mount_spec_parse_volume ("named:/c", &m, &err), -1);
  assert_non_null (strstr (err->msg, "named volumes do not exist"));
  ib_error_free (&err);
  assert_int_equal (ib_mount_spec_parse_tmpfs ("/t:size=1g", &m, &err), 0);
  assert_string_equal (m.size, "1g");
  ib_mount_spec_clear (&m);
  assert_int_equal (ib_mount_spec_parse_tmpfs ("/t:mode=1", &m, &err), -1);
  assert_string_equal (err->msg, "--tmpfs /t:mode=1: the only option is size=N");
  ib_error_free (&err);
}

/* RUN --mount=target=REL is joined to WORKDIR and cleaned (Go's path.Clean
 * on an absolute path, as BuildKit does). */
static void
test_path_clean_abs (void **state)
{
  (void) state;
  static const char *const cases[][2] = {
    { "/w/x/.", "/w/x" },   { "/w/x/", "/w/x" },     { "//a//b", "/a/b" },
    { "/a/../b", "/b" },    { "/../..", "/" },       { "/", "/" },
    { "", "/" },            { "rel/./p", "/rel/p" }, { "/a/b/../../c/./", "/c" },
    { "/a/..b/c", "/a/..b/c" },
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    {
      char *got = ib_path_clean_abs (cases[i][0]);
      assert_string_equal (got, cases[i][1]);
      free (got);
    }
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test (test_bind),
    cmocka_unit_test (test_path_clean_abs),
    cmocka_unit_test (test_cache_and_tmpfs),
    cmocka_unit_test (test_errors),
    cmocka_unit_test (test_volume_and_tmpfs_forms),
  };
  return cmocka_run_group_tests (tests, NULL, NULL);
}
