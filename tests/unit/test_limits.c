/* Limits against hostile recipes and options (docs/recipe.md, "Limits"):
 * ${...} nesting, expanded sizes, recipe size, lists that grow large,
 * EXPOSE and STOPSIGNAL values, tmpfs sizes, uid/gid ranges, a full disk
 * under COPY, and control characters in the final error line. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "builder/engine/fsops.h"
#include "builder/engine/mountspec.h"
#include "builder/engine/recipe.h"
#include "common/util.h"

static double now_s (void);

static const char *
lookup_env (void *ctx, const char *name)
{
  (void) ctx;
  return getenv (name);
}

/* "${X:-" n times, "x", "}" n times */
static char *
nested (size_t n)
{
  ib_buf_t b = { 0 };
  for (size_t i = 0; i < n; i++)
    ib_buf_puts (&b, "${X:-");
  ib_buf_puts (&b, "x");
  for (size_t i = 0; i < n; i++)
    ib_buf_puts (&b, "}");
  return ib_buf_steal (&b);
}

static void
test_nesting_depth (void **state)
{
  (void) state;
  ib_error_t err = NULL;
  char *out = NULL;

  /* at the limit: fine */
  cleanup_free char *ok = nested (IB_EXPAND_MAX_DEPTH);
  assert_int_equal (ib_expand_word (ok, '\\', NULL, NULL, &out, &err), 0);
  assert_string_equal (out, "x");
  free (out);

  /* one more, and the probe's 40,000 (a stack overflow before) */
  size_t depths[] = { IB_EXPAND_MAX_DEPTH + 1, 40000 };
  for (size_t i = 0; i < 2; i++)
    {
      cleanup_free char *deep = nested (depths[i]);
      assert_int_equal (ib_expand_word (deep, '\\', NULL, NULL, &out, &err), -1);
      assert_null (out);
      assert_int_equal (err->status, EINVAL);
      assert_non_null (strstr (err->msg, ": ${...} nested more than 64 deep"));
      assert_true (strncmp (err->msg, "expand '${X:-${X:-", 18) == 0);
      ib_error_free (&err);
      /* ib_expand as well (quotes kept) */
      assert_int_equal (ib_expand (deep, '\\', NULL, NULL, &out, &err), -1);
      ib_error_free (&err);
    }

  /* the parser never expands: a deep word parses (the build refuses it) */
  cleanup_free char *deep = nested (40000);
  cleanup_free char *text = xasprintf ("FROM x\nLABEL a=%s\n", deep);
  ib_recipe_t *r = NULL;
  assert_int_equal (ib_recipe_parse ("r", text, &r, &err), 0);
  ib_recipe_free (r);
}

static void
test_expanded_size (void **state)
{
  (void) state;
  ib_error_t err = NULL;
  char *out = NULL;
  cleanup_free char *half = xmalloc (IB_EXPAND_MAX / 2 + 1);
  memset (half, 'a', IB_EXPAND_MAX / 2);
  setenv ("IBT_HALF", half, 1);

  /* 2 x 512 KiB = 1 MiB: at the limit */
  assert_int_equal (ib_expand_word ("$IBT_HALF$IBT_HALF", '\\', lookup_env, NULL, &out, &err), 0);
  assert_int_equal (strlen (out), IB_EXPAND_MAX);
  free (out);

  /* one byte more: refused, naming the variable that crossed the limit;
   * a literal after the variables is counted too (found by fuzz_recipe) */
  assert_int_equal (ib_expand_word ("$IBT_HALF${IBT_HALF}b", '\\', lookup_env, NULL, &out, &err),
                    -1);
  assert_null (out);
  assert_string_equal (err->msg, "expand '$IBT_HALF${IBT_HALF}b': the expansion is longer than "
                                 "1048576 bytes (the limit of an expanded word)");
  ib_error_free (&err);
  assert_int_equal (ib_expand ("${IBT_HALF}${IBT_HALF}\"\"", '\\', lookup_env, NULL, &out, &err),
                    -1);
  ib_error_free (&err);
  assert_int_equal (ib_expand_word ("b$IBT_HALF${IBT_HALF}", '\\', lookup_env, NULL, &out, &err),
                    -1);
  assert_null (out);
  assert_string_equal (err->msg, "expand 'b$IBT_HALF${IBT_HALF}': $IBT_HALF makes the expansion "
                                 "longer than 1048576 bytes (the limit of an expanded word)");
  ib_error_free (&err);

  /* the word of a modifier counts too, used or not */
  assert_int_equal (ib_expand_word ("${UNSET_IBT:+$IBT_HALF$IBT_HALF$IBT_HALF}", '\\', lookup_env,
                                    NULL, &out, &err),
                    -1);
  assert_non_null (strstr (err->msg, "$IBT_HALF makes the expansion longer"));
  ib_error_free (&err);

  /* a doubling chain stops at 1 MiB */
  char *prev = xstrdup ("x");
  int steps = 0;
  for (;;)
    {
      setenv ("IBT_A", prev, 1);
      if (ib_expand_word ("${IBT_A}${IBT_A}", '\\', lookup_env, NULL, &out, &err) < 0)
        break;
      free (prev);
      prev = out;
      steps++;
    }
  assert_int_equal (steps, 20); /* 2^20 bytes */
  assert_int_equal (strlen (prev), IB_EXPAND_MAX);
  free (prev);
  ib_error_free (&err);

  /* a word longer than the limit as written (a COPY heredoc body) may stay so */
  cleanup_free char *big = xmalloc (IB_EXPAND_MAX + 11);
  memset (big, 'b', IB_EXPAND_MAX + 10);
  assert_int_equal (ib_expand (big, '\\', NULL, NULL, &out, &err), 0);
  assert_int_equal (strlen (out), IB_EXPAND_MAX + 10);
  free (out);
  unsetenv ("IBT_HALF");
  unsetenv ("IBT_A");
}

/* ${V%p}: every prefix or suffix of V against p; refused beyond
 * IB_EXPAND_TRIM_MAX (the fuzzer found 38 s for a 64 KiB value). */
static void
test_trim_limit (void **state)
{
  (void) state;
  ib_error_t err = NULL;
  char *out = NULL;
  cleanup_free char *v = xmalloc (65537);
  memset (v, 'b', 65536);
  v[65536] = '\0';
  setenv ("IBT_BIG", v, 1);
  setenv ("IBT_PATH", "/usr/local/bin:/usr/bin:/bin", 1);
  assert_int_equal (ib_expand_word ("${IBT_PATH%%:*} ${IBT_PATH##*:} ${IBT_PATH#/usr/}", '\\',
                                    lookup_env, NULL, &out, &err),
                    0);
  assert_string_equal (out, "/usr/local/bin /bin local/bin:/usr/bin:/bin");
  free (out);
  double t0 = now_s ();
  assert_int_equal (ib_expand_word ("${IBT_BIG%${IBT_BIG}x}", '\\', lookup_env, NULL, &out, &err),
                    -1);
  assert_true (now_s () - t0 < 1);
  assert_string_equal (err->msg, "expand '${IBT_BIG%${IBT_BIG}x}': ${IBT_BIG%...}: removing a "
                                 "pattern of 65537 bytes from a value of 65536 bytes is over the "
                                 "limit");
  ib_error_free (&err);
  assert_int_equal (ib_expand_word ("${IBT_BIG##*a}", '\\', lookup_env, NULL, &out, &err), -1);
  assert_non_null (strstr (err->msg, "${IBT_BIG##...}: removing a pattern of 2 bytes"));
  ib_error_free (&err);
  /* 8 KiB values are fine, and quick */
  v[8192] = '\0';
  setenv ("IBT_BIG", v, 1);
  t0 = now_s ();
  assert_int_equal (ib_expand_word ("${IBT_BIG%*a}", '\\', lookup_env, NULL, &out, &err), 0);
  assert_int_equal (strlen (out), 8192);
  free (out);
  assert_true (now_s () - t0 < 5);
  unsetenv ("IBT_BIG");
  unsetenv ("IBT_PATH");
}

static void
test_recipe_size (void **state)
{
  (void) state;
  ib_error_t err = NULL;
  ib_recipe_t *r = NULL;
  size_t n = (size_t) IB_RECIPE_MAX + 1;
  char *text = xmalloc (n + 1);
  memset (text, '#', n);
  memcpy (text, "FROM x\n", 7);
  text[7] = '#';
  assert_int_equal (ib_recipe_parse ("big", text, &r, &err), -1);
  assert_null (r);
  assert_int_equal (err->status, EFBIG);
  assert_string_equal (err->msg, "big: the recipe is larger than 16777216 bytes (16 MiB)");
  ib_error_free (&err);
  text[n - 1] = '\0'; /* exactly the limit: fine */
  assert_int_equal (ib_recipe_parse ("big", text, &r, &err), 0);
  ib_recipe_free (r);
  free (text);

  /* the reader stops after max + 1 bytes: /dev/zero does not end */
  char *data = NULL;
  assert_int_equal (ib_read_file_max ("/dev/zero", IB_RECIPE_MAX, "recipe", &data, NULL, &err),
                    -1);
  assert_null (data);
  assert_int_equal (err->status, EFBIG);
  assert_string_equal (err->msg, "read recipe /dev/zero: more than 16777216 bytes");
  ib_error_free (&err);

  /* a file of exactly max bytes is read whole */
  char path[] = "/tmp/ibt-limits-XXXXXX";
  int fd = mkstemp (path);
  assert_true (fd >= 0);
  assert_int_equal (write (fd, "0123456789", 10), 10);
  close (fd);
  size_t len = 0;
  assert_int_equal (ib_read_file_max (path, 10, NULL, &data, &len, &err), 0);
  assert_int_equal (len, 10);
  assert_string_equal (data, "0123456789");
  free (data);
  data = NULL;
  assert_int_equal (ib_read_file_max (path, 9, NULL, &data, &len, &err), -1);
  assert_string_equal (strstr (err->msg, ": more than"), ": more than 9 bytes");
  ib_error_free (&err);
  unlink (path);
}

static void
test_many_stages (void **state)
{
  (void) state;
  ib_buf_t b = { 0 };
  for (int i = 0; i <= IB_RECIPE_MAX_STAGES; i++)
    ib_buf_printf (&b, "FROM x AS s%d\n", i);
  ib_error_t err = NULL;
  ib_recipe_t *r = NULL;
  assert_int_equal (ib_recipe_parse ("r", b.data, &r, &err), -1);
  assert_string_equal (err->msg, "r:4097: more than 4096 stages (FROM instructions)");
  ib_error_free (&err);
  ib_buf_free (&b);
}

static double
now_s (void)
{
  struct timespec t;
  clock_gettime (CLOCK_MONOTONIC, &t);
  return (double) t.tv_sec + (double) t.tv_nsec / 1e9;
}

/* 1M continuation lines (quadratic before: minutes); every list the parser
 * grows (words, flags, JSON arrays, pairs) is linear now. */
static void
test_long_lists (void **state)
{
  (void) state;
  const size_t n = 1000000;
  const char *shapes[] = {
    "RUN echo \\\n", "a \\\n", "b\n",                       /* RUN shell form */
    "COPY \\\n", "a \\\n", "/dst/\n",                        /* COPY sources */
    "ENV \\\n", "a=1 \\\n", "b=2\n",                         /* ENV pairs */
    "RUN \\\n", "--device=a \\\n", "true\n",    /* flags */
    "CMD [\"x\" \\\n", ",\"a\" \\\n", "]\n",                  /* a JSON array */
  };
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s += 3)
    {
      ib_buf_t b = { 0 };
      ib_buf_puts (&b, "FROM x\n");
      ib_buf_puts (&b, shapes[s]);
      for (size_t i = 0; i < n; i++)
        ib_buf_puts (&b, shapes[s + 1]);
      ib_buf_puts (&b, shapes[s + 2]);
      ib_error_t err = NULL;
      ib_recipe_t *r = NULL;
      double t0 = now_s ();
      if (ib_recipe_parse ("r", b.data, &r, &err) < 0)
        fail_msg ("%s: %s", shapes[s], err->msg);
      double t = now_s () - t0;
      const ib_instr_t *in = &r->stages[0].instrs[1];
      size_t got = in->n_kvs + ib_strv_len (in->args) + ib_strv_len (in->flags);
      if (in->kind == IB_I_RUN && in->flags[0] == NULL)
        got = strlen (in->text) / 2; /* "echo a a ... b" */
      assert_true (got >= n);
      /* seconds, not minutes (quadratic: 6 min for the RUN shape without
       * sanitizers; generous here for ASan on a busy machine: about 40 s) */
      if (t > 120)
        fail_msg ("%s: %.1f s for %zu lines", shapes[s], t, n);
      ib_recipe_free (r);
      ib_buf_free (&b);
    }

  ib_strv_builder_t sb = IB_STRV_BUILDER_INIT;
  char **empty = ib_strv_builder_steal (&sb);
  assert_non_null (empty);
  assert_null (empty[0]);
  ib_strv_free (empty);
  for (int i = 0; i < 1000; i++)
    ib_strv_builder_push (&sb, "w");
  assert_int_equal (sb.n, 1000);
  assert_null (sb.v[1000]);
  ib_strv_builder_free (&sb);
}

static void
check_expose (const char *spec, const char *key)
{
  ib_error_t err = NULL;
  char *k = NULL;
  assert_int_equal (ib_expose_key (spec, &k, &err), 0);
  assert_string_equal (k, key);
  free (k);
}

static void
check_expose_bad (const char *spec, const char *msg)
{
  ib_error_t err = NULL;
  char *k = NULL;
  assert_int_equal (ib_expose_key (spec, &k, &err), -1);
  assert_null (k);
  assert_int_equal (err->status, EINVAL);
  assert_string_equal (err->msg, msg);
  ib_error_free (&err);
}

static void
test_expose (void **state)
{
  (void) state;
  check_expose ("80", "80/tcp");
  check_expose ("0", "0/tcp");
  check_expose ("65535/udp", "65535/udp");
  check_expose ("53/UDP", "53/udp");
  check_expose ("9/sctp", "9/sctp");
  check_expose ("8000-8010/tcp", "8000-8010/tcp");
  check_expose ("127.0.0.1:8080:80", "80/tcp");
  check_expose ("8080:80/udp", "80/udp");
  check_expose ("127.0.0.1::80", "80/tcp");
  const char *range = "port '99999999/tcpx': expected a port 0-65535 or a range PORT-PORT, "
                      "optionally /tcp, /udp or /sctp";
  check_expose_bad ("99999999/tcpx", range);
  check_expose_bad ("65536", "port '65536': expected a port 0-65535 or a range PORT-PORT, "
                             "optionally /tcp, /udp or /sctp");
  check_expose_bad ("80/tcpx", "port '80/tcpx': expected protocol tcp, udp or sctp");
  check_expose_bad ("80/", "port '80/': expected protocol tcp, udp or sctp");
  check_expose_bad ("", "port '': expected a port 0-65535 or a range PORT-PORT, optionally "
                        "/tcp, /udp or /sctp");
  check_expose_bad ("-1", "port '-1': expected a port 0-65535 or a range PORT-PORT, optionally "
                          "/tcp, /udp or /sctp");
  check_expose_bad ("90-80", "port '90-80': expected a port 0-65535 or a range PORT-PORT, "
                             "optionally /tcp, /udp or /sctp");
  check_expose_bad ("x:80", "port 'x:80': expected a host port 0-65535 before ':'");
  check_expose_bad ("80\x1b]0;t\x07", "port '80?]0;t?': expected a port 0-65535 or a range "
                                      "PORT-PORT, optionally /tcp, /udp or /sctp");
}

static void
test_stop_signal (void **state)
{
  (void) state;
  static const struct
  {
    const char *s;
    int n;
  } ok[] = {
    { "SIGTERM", 15 }, { "TERM", 15 },      { "sigkill", 9 },     { "KILL", 9 },
    { "9", 9 },        { "1", 1 },          { "64", 64 },         { "SIGUSR1", 10 },
    { "RTMIN", 34 },   { "SIGRTMIN+3", 37 }, { "RTMAX-2", 62 },   { "SIGRTMAX", 64 },
    { "WINCH", 28 },   { "SIGIOT", 6 },
  };
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
    {
      ib_error_t err = NULL;
      int n = 0;
      if (ib_stop_signal (ok[i].s, &n, &err) < 0)
        fail_msg ("%s: %s", ok[i].s, err->msg);
      assert_int_equal (n, ok[i].n);
    }
  const char *bad[] = { "SIGFOO", "0", "65", "99999999999999999999", "", "SIG", "RTMIN-1",
                        "RTMAX+1", "RTMIN+16", "KILL+1", "-9", " 9", "SIGRTMIN+03" };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    {
      ib_error_t err = NULL;
      if (ib_stop_signal (bad[i], NULL, &err) == 0)
        fail_msg ("'%s' accepted", bad[i]);
      assert_int_equal (err->status, EINVAL);
      ib_error_free (&err);
    }
  ib_error_t err = NULL;
  assert_int_equal (ib_stop_signal ("SIGFOO", NULL, &err), -1);
  assert_string_equal (err->msg, "signal 'SIGFOO': expected a signal name (SIGTERM, KILL, "
                                 "RTMIN+1, ...) or a number 1 to 64");
  ib_error_free (&err);
  assert_int_equal (ib_stop_signal ("65", NULL, &err), -1);
  assert_string_equal (err->msg, "signal '65': a signal number is 1 to 64");
  ib_error_free (&err);
}

static void
test_tmpfs_size (void **state)
{
  (void) state;
  const char *ok[] = { "1", "64m", "64M", "1g", "4096", "1t", "1024T", "50%", "100%", "1%" };
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
    {
      ib_error_t err = NULL;
      char *n = NULL;
      if (ib_tmpfs_size_parse (ok[i], &n, &err) < 0)
        fail_msg ("%s: %s", ok[i], err->msg);
      assert_string_equal (n, ok[i]);
      free (n);
    }
  static const struct
  {
    const char *v, *msg;
  } bad[] = {
    { "18446744073709551616", "size '18446744073709551616' is out of range (1 byte to 1 PiB, or "
                              "1% to 100%)" },
    { "99999999999999999999g", "size '99999999999999999999g' is out of range (1 byte to 1 PiB, "
                               "or 1% to 100%)" },
    { "17179869184g", "size '17179869184g' is out of range (1 byte to 1 PiB, or 1% to 100%)" },
    { "1025t", "size '1025t' is out of range (1 byte to 1 PiB, or 1% to 100%)" },
    { "0", "size '0' is out of range (1 byte to 1 PiB, or 1% to 100%)" },
    { "101%", "size '101%' is out of range (1% to 100% of memory)" },
    { "0%", "size '0%' is out of range (1% to 100% of memory)" },
    { "big", "bad size 'big' (bytes, or k, m, g, t, or N%)" },
    { "1p", "bad size '1p' (bytes, or k, m, g, t, or N%)" },
    { "1mb", "bad size '1mb' (bytes, or k, m, g, t, or N%)" },
    { "-1", "bad size '-1' (bytes, or k, m, g, t, or N%)" },
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    {
      ib_error_t err = NULL;
      char *n = NULL;
      assert_int_equal (ib_tmpfs_size_parse (bad[i].v, &n, &err), -1);
      assert_null (n);
      assert_string_equal (err->msg, bad[i].msg);
      ib_error_free (&err);
    }
  /* both option parsers name the option */
  ib_mount_spec_t m;
  ib_error_t err = NULL;
  assert_int_equal (ib_mount_spec_parse ("type=tmpfs,target=/t,size=18446744073709551616", &m,
                                         &err),
                    -1);
  assert_string_equal (err->msg, "--mount=type=tmpfs,target=/t,size=18446744073709551616: size "
                                 "'18446744073709551616' is out of range (1 byte to 1 PiB, or 1% "
                                 "to 100%)");
  ib_error_free (&err);
  assert_int_equal (ib_mount_spec_parse_tmpfs ("/t:size=99999999999999999999g", &m, &err), -1);
  assert_string_equal (err->msg, "--tmpfs /t:size=99999999999999999999g: size "
                                 "'99999999999999999999g' is out of range (1 byte to 1 PiB, or 1% "
                                 "to 100%)");
  ib_error_free (&err);
}

static void
write_text (const char *path, const char *text)
{
  FILE *f = fopen (path, "w");
  assert_non_null (f);
  fputs (text, f);
  fclose (f);
}

static void
test_ids (void **state)
{
  (void) state;
  uint32_t id = 7;
  assert_int_equal (ib_parse_id ("0", &id), 0);
  assert_int_equal (id, 0);
  assert_int_equal (ib_parse_id ("4294967294", &id), 0);
  assert_int_equal (id, 4294967294U);
  const char *bad[] = { "4294967295", "4294967296", "99999999999999", "", "-1", "+1", " 1", "1x",
                        "18446744073709551617" };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    assert_int_equal (ib_parse_id (bad[i], &id), -1);

  char root[] = "/tmp/ibt-root-XXXXXX";
  assert_non_null (mkdtemp (root));
  cleanup_free char *etc = xasprintf ("%s/etc", root);
  cleanup_free char *pw = xasprintf ("%s/etc/passwd", root);
  cleanup_free char *gr = xasprintf ("%s/etc/group", root);
  mkdir (etc, 0755);
  write_text (pw, "root:x:0:0::/root:/bin/sh\nbig:x:99999999999999:0::/:/bin/sh\n"
                  "app:x:1000:1000::/home/app:/bin/sh\n");
  write_text (gr, "root:x:0:\nhuge:x:4294967295:app\ndev:x:50:other,app\nbad:x:5x:app\n"
                  "short:x:60\nops:x:70:app\nappish:x:80:apps,ap\n");
  uid_t u;
  gid_t g;
  ib_error_t err = NULL;
  assert_int_equal (ib_lookup_user (root, "app", &u, &g, &err), 0);
  assert_int_equal (u, 1000);
  assert_int_equal (g, 1000);
  assert_int_equal (ib_lookup_user (root, "4294967294:4294967294", &u, &g, &err), 0);
  assert_int_equal (u, 4294967294U);
  assert_int_equal (g, 4294967294U);

  assert_int_equal (ib_lookup_user (root, "99999999999999", &u, &g, &err), -1);
  assert_int_equal (err->status, ERANGE);
  assert_string_equal (err->msg, "user '99999999999999': a uid is 0 to 4294967294");
  ib_error_free (&err);
  assert_int_equal (ib_lookup_user (root, "4294967295", &u, &g, &err), -1);
  assert_string_equal (err->msg, "user '4294967295': a uid is 0 to 4294967294");
  ib_error_free (&err);
  assert_int_equal (ib_lookup_user (root, "0:4294967295", &u, &g, &err), -1);
  assert_string_equal (err->msg, "group '4294967295': a gid is 0 to 4294967294");
  ib_error_free (&err);
  /* ids out of range in the image's own files */
  assert_int_equal (ib_lookup_user (root, "big", &u, &g, &err), -1);
  assert_int_equal (err->status, ERANGE);
  ib_error_free (&err);
  assert_int_equal (ib_lookup_user (root, "app:huge", &u, &g, &err), -1);
  assert_int_equal (err->status, ERANGE);
  ib_error_free (&err);
  /* supplementary groups: groups listing the user's passwd name, by name
   * or uid, only when no group is named; a gid out of range, one that is
   * not a number and a line without a member list are skipped */
  gid_t *gids = NULL;
  assert_int_equal (ib_lookup_groups (root, "app", &gids), 2);
  assert_int_equal (gids[0], 50);
  assert_int_equal (gids[1], 70);
  free (gids);
  assert_int_equal (ib_lookup_groups (root, "1000", &gids), 2);
  assert_int_equal (gids[1], 70);
  free (gids);
  assert_int_equal (ib_lookup_groups (root, "app:", &gids), 2);
  free (gids);
  assert_int_equal (ib_lookup_groups (root, "app:dev", &gids), 0);
  assert_null (gids);
  assert_int_equal (ib_lookup_groups (root, "4242", &gids), 0);
  assert_int_equal (ib_lookup_groups (root, "", &gids), 0);
  assert_int_equal (ib_lookup_groups (root, NULL, &gids), 0);
  assert_null (gids);
  /* a name with an escape sequence is masked in the message */
  assert_int_equal (ib_lookup_user (root, "ev\x1b[2Jil", &u, &g, &err), -1);
  assert_string_equal (err->msg, "user 'ev?[2Jil' not found in the image's /etc/passwd");
  ib_error_free (&err);
  unlink (pw);
  unlink (gr);
  rmdir (etc);
  rmdir (root);
}

/* A full disk under COPY: the error names the destination (as the image
 * has it) and ENOSPC, not the source.  /dev/full answers every write
 * with ENOSPC, for any user. */
static void
test_copy_full_disk (void **state)
{
  (void) state;
  char src[] = "/tmp/ibt-src-XXXXXX";
  int in = mkstemp (src);
  assert_true (in >= 0);
  char buf[65536];
  memset (buf, 'z', sizeof buf);
  for (int i = 0; i < 4; i++)
    assert_int_equal (write (in, buf, sizeof buf), (ssize_t) sizeof buf);
  lseek (in, 0, SEEK_SET);
  int out = open ("/dev/full", O_WRONLY | O_CLOEXEC);
  assert_true (out >= 0);
  ib_error_t err = NULL;
  assert_int_equal (ib_copy_fd_data_to (in, out, src, "/usr/lib/big.so", &err), -1);
  assert_int_equal (err->status, ENOSPC);
  assert_string_equal (err->msg, "write /usr/lib/big.so: No space left on device");
  ib_error_free (&err);
  close (out);
  close (in);
  unlink (src);
}

/* The final error line: no control character reaches the terminal. */
static void
test_error_line (void **state)
{
  (void) state;
  cleanup_free char *p = ib_str_printable ("evil\x1b]0;title\x07 \x7f\r\nnext\tline", true);
  assert_string_equal (p, "evil?]0;title? ??\nnext?line");
  cleanup_free char *q = ib_str_printable ("a\nb", false);
  assert_string_equal (q, "a?b");

  char path[] = "/tmp/ibt-stderr-XXXXXX";
  int fd = mkstemp (path);
  assert_true (fd >= 0);
  fflush (stderr);
  int saved = dup (2);
  dup2 (fd, 2);
  ib_error_t err = NULL;
  ib_error_set (&err, EINVAL, "r:1: FROM: pull: invalid reference \"evil\x1b]0;title\x07\"");
  ib_error_report (&err);
  ib_info ("[stage-0 1/1] FROM evil\x1b]0;title\x07");
  fflush (stderr);
  dup2 (saved, 2);
  close (saved);
  char *data = NULL;
  assert_int_equal (ib_read_file (path, &data, NULL, &err), 0);
  assert_string_equal (data, "imgbuild: r:1: FROM: pull: invalid reference \"evil?]0;title?\"\n"
                             "[stage-0 1/1] FROM evil?]0;title?\n");
  free (data);
  close (fd);
  unlink (path);
}

int
main (void)
{
  ib_verbosity = 1;
  const struct CMUnitTest tests[] = {
    cmocka_unit_test (test_nesting_depth), cmocka_unit_test (test_expanded_size),
    cmocka_unit_test (test_trim_limit),
    cmocka_unit_test (test_recipe_size),   cmocka_unit_test (test_many_stages),
    cmocka_unit_test (test_long_lists),    cmocka_unit_test (test_expose),
    cmocka_unit_test (test_stop_signal),   cmocka_unit_test (test_tmpfs_size),
    cmocka_unit_test (test_ids),           cmocka_unit_test (test_copy_full_disk),
    cmocka_unit_test (test_error_line),
  };
  return cmocka_run_group_tests (tests, NULL, NULL);
}
