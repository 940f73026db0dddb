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

/* BuildKit's defaults (dockerfile2llb's dispatchSecret, dispatchSSH) */
static void
test_secret_and_ssh (void **state)
{
  (void) state;
  ib_mount_spec_t m;
  ib_error_t err = NULL;
  assert_int_equal (ib_mount_spec_parse ("type=secret,id=tok", &m, &err), 0);
  assert_int_equal (m.type, IB_MSPEC_SECRET);
  assert_string_equal (m.id, "tok");
  assert_string_equal (m.target, "/run/secrets/tok");
  assert_int_equal (m.mode, 0400);
  assert_int_equal (m.uid, 0);
  assert_int_equal (m.gid, 0);
  assert_false (m.required);
  assert_null (m.env);
  ib_mount_spec_clear (&m);
  /* the id's last component names the default file */
  assert_int_equal (ib_mount_spec_parse ("type=secret,id=a/b", &m, &err), 0);
  assert_string_equal (m.target, "/run/secrets/b");
  ib_mount_spec_clear (&m);
  /* source= is id=; the target's last component is the default id */
  assert_int_equal (ib_mount_spec_parse ("type=secret,source=pip", &m, &err), 0);
  assert_string_equal (m.id, "pip");
  assert_null (m.source);
  ib_mount_spec_clear (&m);
  assert_int_equal (ib_mount_spec_parse ("type=secret,target=/etc/apt/auth.conf,required,"
                                         "mode=0440,uid=100,gid=101",
                                         &m, &err),
                    0);
  assert_string_equal (m.id, "auth.conf");
  assert_string_equal (m.target, "/etc/apt/auth.conf");
  assert_true (m.required);
  assert_int_equal (m.mode, 0440);
  assert_int_equal (m.uid, 100);
  assert_int_equal (m.gid, 101);
  ib_mount_spec_clear (&m);
  /* env= alone: a variable and no file; with target= both */
  assert_int_equal (ib_mount_spec_parse ("type=secret,id=tok,env=TOKEN,required=false", &m,
                                         &err),
                    0);
  assert_string_equal (m.env, "TOKEN");
  assert_null (m.target);
  assert_false (m.required);
  ib_mount_spec_clear (&m);
  assert_int_equal (ib_mount_spec_parse ("type=secret,id=tok,env=TOKEN,dst=/t", &m, &err), 0);
  assert_string_equal (m.env, "TOKEN");
  assert_string_equal (m.target, "/t");
  ib_mount_spec_clear (&m);
  /* ssh: id default, target left to the RUN (ssh_agent.N), mode 0600 */
  assert_int_equal (ib_mount_spec_parse ("type=ssh", &m, &err), 0);
  assert_int_equal (m.type, IB_MSPEC_SSH);
  assert_string_equal (m.id, "default");
  assert_null (m.target);
  assert_int_equal (m.mode, 0600);
  ib_mount_spec_clear (&m);
  assert_int_equal (ib_mount_spec_parse ("type=ssh,id=gh,target=/a.sock,required=true,mode=0666,"
                                         "uid=7",
                                         &m, &err),
                    0);
  assert_string_equal (m.id, "gh");
  assert_string_equal (m.target, "/a.sock");
  assert_true (m.required);
  assert_int_equal (m.mode, 0666);
  assert_int_equal (m.uid, 7);
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
  check_error ("type=foo,target=/x", "--mount=type=foo,target=/x: unknown mount type 'foo' (bind, cache, tmpfs, secret, ssh)");
  check_error ("type=secret,id=a,source=b", "--mount=type=secret,id=a,source=b: give id= or source=, not both");
  check_error ("type=secret,required", "--mount=type=secret,required: a secret mount needs id= or target=");
  check_error ("type=secret,target=/run/secrets/", "--mount=type=secret,target=/run/secrets/: no secret id in target=/run/secrets/ (give id=)");
  check_error ("type=secret,id=a,from=b", "--mount=type=secret,id=a,from=b: a secret mount takes no from=");
  check_error ("type=secret,id=a,rw", "--mount=type=secret,id=a,rw: a secret mount is read-only");
  check_error ("type=secret,id=a,sharing=locked", "--mount=type=secret,id=a,sharing=locked: sharing= is for type=cache");
  check_error ("type=secret,id=a,required=maybe", "--mount=type=secret,id=a,required=maybe: required takes true or false, got 'maybe'");
  check_error ("type=ssh,source=x", "--mount=type=ssh,source=x: an ssh mount takes no source=");
  check_error ("type=ssh,env=X", "--mount=type=ssh,env=X: env= is for type=secret");
  check_error ("type=cache,target=/c,required", "--mount=type=cache,target=/c,required: required= is for type=secret and type=ssh");
  check_error ("type=tmpfs,target=/c,env=X", "--mount=type=tmpfs,target=/c,env=X: env= is for type=secret");
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
    cmocka_unit_test (test_secret_and_ssh),
    cmocka_unit_test (test_errors),
    cmocka_unit_test (test_volume_and_tmpfs_forms),
  };
  return cmocka_run_group_tests (tests, NULL, NULL);
}
