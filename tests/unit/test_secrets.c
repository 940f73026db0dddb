/* tests/unit/test_secrets.c — --secret and --ssh values (buildx's forms,
 * BuildKit's defaults), the start-of-build checks, reading a secret, and
 * one step's secret file (outside a user namespace: no tmpfs, a plain
 * private directory, wiped and removed at the end). */
#include "builder/engine/secrets.h"
#include "common/util.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>
#include <stdlib.h>

static char *tmp;

static int
setup (void **state)
{
  (void) state;
  tmp = xstrdup ("/tmp/test-secrets-XXXXXX");
  assert_non_null (mkdtemp (tmp));
  setenv ("TMPDIR", tmp, 1);
  return 0;
}

static int
teardown (void **state)
{
  (void) state;
  ib_rm_rf (tmp, NULL);
  free (tmp);
  return 0;
}

static void
test_secret_values (void **state)
{
  (void) state;
  ib_secrets_t s = { 0 };
  ib_error_t err = NULL;
  assert_int_equal (ib_secrets_add_secret (&s, "id=a,src=/f/a", &err), 0);
  assert_int_equal (ib_secrets_add_secret (&s, "ID=b,Source=/f/b", &err), 0);
  assert_int_equal (ib_secrets_add_secret (&s, "id=c,env=VAR_C", &err), 0);
  /* type=env: src= names the variable */
  assert_int_equal (ib_secrets_add_secret (&s, "id=d,type=env,src=VAR_D", &err), 0);
  /* id alone: the variable when set, else the file (BuildKit's NewStore) */
  setenv ("IB_UNIT_SECRET_E", "x", 1);
  unsetenv ("IB_UNIT_SECRET_F");
  assert_int_equal (ib_secrets_add_secret (&s, "id=IB_UNIT_SECRET_E", &err), 0);
  assert_int_equal (ib_secrets_add_secret (&s, "id=IB_UNIT_SECRET_F", &err), 0);
  /* a later one of the same id replaces the earlier */
  assert_int_equal (ib_secrets_add_secret (&s, "id=a,src=/f/a2", &err), 0);
  assert_int_equal (s.n_secrets, 6);
  assert_string_equal (ib_secrets_find_secret (&s, "a")->path, "/f/a2");
  assert_string_equal (ib_secrets_find_secret (&s, "b")->path, "/f/b");
  assert_string_equal (ib_secrets_find_secret (&s, "c")->env, "VAR_C");
  assert_null (ib_secrets_find_secret (&s, "c")->path);
  assert_string_equal (ib_secrets_find_secret (&s, "d")->env, "VAR_D");
  assert_null (ib_secrets_find_secret (&s, "d")->path);
  assert_string_equal (ib_secrets_find_secret (&s, "IB_UNIT_SECRET_E")->env, "IB_UNIT_SECRET_E");
  assert_string_equal (ib_secrets_find_secret (&s, "IB_UNIT_SECRET_F")->path, "IB_UNIT_SECRET_F");
  assert_null (ib_secrets_find_secret (&s, "zz"));
  static const char *const bad[][2] = {
    { "src=/f", "--secret src=/f: id= is missing" },
    { "id=a,bogus=1", "--secret id=a,bogus=1: unknown key 'bogus' (id, src, env, type)" },
    { "id=a,type=dir", "--secret id=a,type=dir: type takes file or env, got 'dir'" },
    { "id=a,src", "--secret id=a,src: expected KEY=VALUE, got 'src'" },
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    {
      assert_int_equal (ib_secrets_add_secret (&s, bad[i][0], &err), -1);
      assert_string_equal (err->msg, bad[i][1]);
      ib_error_free (&err);
    }
  assert_int_equal (s.n_secrets, 6);
  ib_secrets_clear (&s);
}

static void
test_ssh_values (void **state)
{
  (void) state;
  ib_secrets_t s = { 0 };
  ib_error_t err = NULL;
  setenv ("SSH_AUTH_SOCK", "/run/agent.sock", 1);
  assert_int_equal (ib_secrets_add_ssh (&s, "default", &err), 0);
  assert_int_equal (ib_secrets_add_ssh (&s, "gh", &err), 0);
  assert_int_equal (ib_secrets_add_ssh (&s, "work=/w.sock", &err), 0);
  assert_string_equal (ib_secrets_find_ssh (&s, "default")->socket, "/run/agent.sock");
  assert_string_equal (ib_secrets_find_ssh (&s, "gh")->socket, "/run/agent.sock");
  assert_string_equal (ib_secrets_find_ssh (&s, "work")->socket, "/w.sock");
  assert_int_equal (ib_secrets_add_ssh (&s, "work=/a,/b", &err), -1);
  assert_int_equal (err->status, ENOTSUP);
  ib_error_free (&err);
  unsetenv ("SSH_AUTH_SOCK");
  assert_int_equal (ib_secrets_add_ssh (&s, "default", &err), -1);
  assert_string_equal (err->msg, "--ssh default: SSH_AUTH_SOCK is not set (start an agent, or "
                                 "give default=SOCKET)");
  ib_error_free (&err);
  assert_int_equal (s.n_ssh, 3);
  ib_secrets_clear (&s);
}

static void
test_check_and_read (void **state)
{
  (void) state;
  ib_error_t err = NULL;
  cleanup_free char *f = ib_path_join (tmp, "tok");
  cleanup_free char *big = ib_path_join (tmp, "big");
  assert_int_equal (ib_write_file_atomic (f, "s3cr\0t", 6, 0600, &err), 0);
  char *zeros = xmalloc (IB_SECRET_MAX + 1);
  assert_int_equal (ib_write_file_atomic (big, zeros, IB_SECRET_MAX + 1, 0600, &err), 0);
  free (zeros);

  ib_secrets_t s = { 0 };
  cleanup_free char *v = xasprintf ("id=tok,src=%s", f);
  assert_int_equal (ib_secrets_add_secret (&s, v, &err), 0);
  setenv ("IB_UNIT_TOKEN", "from-env", 1);
  assert_int_equal (ib_secrets_add_secret (&s, "id=e,env=IB_UNIT_TOKEN", &err), 0);
  assert_int_equal (ib_secrets_check (&s, &err), 0);
  char *data = NULL;
  size_t len = 0;
  assert_int_equal (ib_secret_read (ib_secrets_find_secret (&s, "tok"), &data, &len, &err), 0);
  assert_int_equal (len, 6);
  assert_memory_equal (data, "s3cr\0t", 6); /* bytes as they are */
  ib_secret_free (data, len);
  assert_int_equal (ib_secret_read (ib_secrets_find_secret (&s, "e"), &data, &len, &err), 0);
  assert_string_equal (data, "from-env");
  ib_secret_free (data, len);

  /* opened at the check: read from the same file later, from any
   * working directory, its bytes as they are then */
  ib_secrets_clear (&s);
  cleanup_free char *cwd = getcwd (NULL, 0);
  assert_int_equal (chdir (tmp), 0);
  assert_int_equal (ib_secrets_add_secret (&s, "id=rel,src=tok", &err), 0);
  assert_int_equal (ib_secrets_check (&s, &err), 0);
  assert_int_equal (chdir ("/"), 0);
  FILE *fp = fopen (f, "r+");
  assert_non_null (fp);
  assert_int_equal (fputs ("NEW", fp) >= 0, 1);
  fclose (fp);
  assert_int_equal (ib_secret_read (ib_secrets_find_secret (&s, "rel"), &data, &len, &err), 0);
  assert_int_equal (len, 6);
  assert_memory_equal (data, "NEWr\0t", 6);
  ib_secret_free (data, len);
  assert_int_equal (chdir (cwd), 0);
  setenv ("IB_UNIT_TOKEN", "from-env", 1);
  assert_int_equal (ib_secrets_add_secret (&s, "id=e,env=IB_UNIT_TOKEN", &err), 0);

  /* what the build's start refuses */
  unsetenv ("IB_UNIT_TOKEN");
  assert_int_equal (ib_secrets_check (&s, &err), -1);
  assert_string_equal (err->msg, "--secret id=e: variable IB_UNIT_TOKEN is not set");
  ib_error_free (&err);
  ib_secrets_clear (&s);
  v = (free (v), xasprintf ("id=big,src=%s", big));
  assert_int_equal (ib_secrets_add_secret (&s, v, &err), 0);
  assert_int_equal (ib_secrets_check (&s, &err), -1);
  assert_int_equal (err->status, EFBIG);
  ib_error_free (&err);
  assert_int_equal (ib_secret_read (ib_secrets_find_secret (&s, "big"), &data, &len, &err), -1);
  assert_int_equal (err->status, EFBIG);
  assert_non_null (strstr (err->msg, "secret big"));
  ib_error_free (&err);
  ib_secrets_clear (&s);
  v = (free (v), xasprintf ("id=dir,src=%s", tmp));
  assert_int_equal (ib_secrets_add_secret (&s, v, &err), 0);
  assert_int_equal (ib_secrets_check (&s, &err), -1);
  assert_non_null (strstr (err->msg, "is not a file"));
  ib_error_free (&err);
  ib_secrets_clear (&s);
  v = (free (v), xasprintf ("k=%s", f));
  assert_int_equal (ib_secrets_add_ssh (&s, v, &err), 0);
  assert_int_equal (ib_secrets_check (&s, &err), -1);
  assert_int_equal (err->status, ENOTSUP);
  assert_non_null (strstr (err->msg, "is not a socket"));
  ib_error_free (&err);
  ib_secrets_clear (&s);
}

/* A step's file: the bytes, the mode; a socket relayed to an "agent" (a
 * listening socket here) that answers; everything gone at the end. */
static void
test_run_files_and_relay (void **state)
{
  (void) state;
  ib_error_t err = NULL;
  ib_secret_run_t *run = NULL;
  const char *p = NULL;
  /* as the caller's own ids: the unit tests also run as an unprivileged
   * user, outside any user namespace, where a chown to 0 is refused */
  assert_int_equal (ib_secret_run_file (&run, "abc", 3, 0440, getuid (), getgid (), &p, &err), 0);
  cleanup_free char *path = xstrdup (p);
  assert_true (ib_str_has_prefix (path, tmp));
  struct stat st;
  assert_int_equal (stat (path, &st), 0);
  assert_int_equal (st.st_mode & 07777, 0440);
  char *data = NULL;
  size_t len = 0;
  assert_int_equal (ib_read_file (path, &data, &len, &err), 0);
  assert_string_equal (data, "abc");
  free (data);
  /* the directory holding it is private */
  cleanup_free char *dir = xstrndup (path, (size_t) (strrchr (path, '/') - path));
  assert_int_equal (stat (dir, &st), 0);
  assert_int_equal (st.st_mode & 0777, 0700);

  /* the agent: a listening socket that answers "pong" to what it reads */
  cleanup_free char *agent = ib_path_join (tmp, "agent.sock");
  int afd = socket (AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un a = { .sun_family = AF_UNIX };
  strcpy (a.sun_path, agent);
  assert_int_equal (bind (afd, (struct sockaddr *) &a, sizeof a), 0);
  assert_int_equal (listen (afd, 4), 0);
  assert_int_equal (ib_secret_run_ssh (&run, agent, 0600, getuid (), getgid (), &p, &err), 0);
  cleanup_free char *sock = xstrdup (p);
  assert_int_equal (stat (sock, &st), 0);
  assert_true (S_ISSOCK (st.st_mode));
  assert_int_equal (st.st_mode & 0777, 0600);
  assert_int_equal (ib_secret_run_start (run, &err), 0);
  int c = socket (AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un b = { .sun_family = AF_UNIX };
  strcpy (b.sun_path, sock);
  assert_int_equal (connect (c, (struct sockaddr *) &b, sizeof b), 0);
  assert_int_equal (write (c, "ping", 4), 4);
  int s = accept (afd, NULL, NULL);
  assert_true (s >= 0);
  char buf[8] = { 0 };
  assert_int_equal (read (s, buf, 4), 4);
  assert_string_equal (buf, "ping");
  assert_int_equal (write (s, "pong", 4), 4);
  memset (buf, 0, sizeof buf);
  assert_int_equal (read (c, buf, 4), 4);
  assert_string_equal (buf, "pong");
  close (s);
  assert_int_equal (read (c, buf, 4), 0); /* the agent's end closed: so is the step's */
  close (c);

  ib_secret_run_end (&run);
  assert_null (run);
  assert_int_equal (access (dir, F_OK), -1);
  close (afd);
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test (test_secret_values),
    cmocka_unit_test (test_ssh_values),
    cmocka_unit_test (test_check_and_read),
    cmocka_unit_test (test_run_files_and_relay),
  };
  return cmocka_run_group_tests (tests, setup, teardown);
}
