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
#include <sys/time.h>
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

/* A listening socket at `path` (the "agent"). */
static int
listen_at (const char *path)
{
  int fd = socket (AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un a = { .sun_family = AF_UNIX };
  strcpy (a.sun_path, path);
  assert_int_equal (bind (fd, (struct sockaddr *) &a, sizeof a), 0);
  assert_int_equal (listen (fd, 4), 0);
  return fd;
}

/* A connection to `path`, reads timing out after 10 s (a relay that
 * swallows a frame fails the test instead of hanging it). */
static int
connect_to (const char *path)
{
  int fd = socket (AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un a = { .sun_family = AF_UNIX };
  strcpy (a.sun_path, path);
  assert_int_equal (connect (fd, (struct sockaddr *) &a, sizeof a), 0);
  struct timeval tv = { .tv_sec = 10 };
  assert_int_equal (setsockopt (fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
  return fd;
}

static int
accept_on (int lfd)
{
  int fd = accept (lfd, NULL, NULL);
  assert_true (fd >= 0);
  struct timeval tv = { .tv_sec = 10 };
  assert_int_equal (setsockopt (fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
  return fd;
}

/* Read exactly n bytes (a test failure on a short read). */
static void
read_exactly (int fd, void *buf, size_t n)
{
  size_t have = 0;
  while (have < n)
    {
      ssize_t got = read (fd, (char *) buf + have, n - have);
      assert_true (got > 0);
      have += (size_t) got;
    }
}

/* The peer closed: end of file, or ECONNRESET when it closed with bytes
 * of ours unread. */
static void
assert_closed (int fd)
{
  char b;
  ssize_t got = read (fd, &b, 1);
  assert_true (got == 0 || (got < 0 && errno == ECONNRESET));
}

static void
write_all (int fd, const void *buf, size_t n)
{
  assert_int_equal (write (fd, buf, n), (ssize_t) n);
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

  /* the agent: a listening socket that answers one agent request */
  cleanup_free char *agent = ib_path_join (tmp, "agent.sock");
  int afd = listen_at (agent);
  assert_int_equal (ib_secret_run_ssh (&run, agent, 0600, getuid (), getgid (), &p, &err), 0);
  cleanup_free char *sock = xstrdup (p);
  assert_int_equal (stat (sock, &st), 0);
  assert_true (S_ISSOCK (st.st_mode));
  assert_int_equal (st.st_mode & 0777, 0600);
  assert_int_equal (ib_secret_run_start (run, &err), 0);
  int c = connect_to (sock);
  /* SSH_AGENTC_REQUEST_IDENTITIES, answered by an empty list */
  write_all (c, "\0\0\0\1\13", 5);
  int s = accept_on (afd);
  unsigned char buf[16] = { 0 };
  read_exactly (s, buf, 5);
  assert_memory_equal (buf, "\0\0\0\1\13", 5);
  write_all (s, "\0\0\0\5\14\0\0\0\0", 9);
  read_exactly (c, buf, 9);
  assert_memory_equal (buf, "\0\0\0\5\14\0\0\0\0", 9);
  close (s);
  assert_int_equal (read (c, buf, 4), 0); /* the agent's end closed: so is the step's */
  close (c);

  ib_secret_run_end (&run);
  assert_null (run);
  assert_int_equal (access (dir, F_OK), -1);
  close (afd);
}

/* The relay is BuildKit's read-only agent (moby/buildkit
 * session/sshforward/sshprovider/agentprovider.go, readOnlyAgent):
 * REMOVE_ALL_IDENTITIES, LOCK and ADD_IDENTITY (issue 38) get
 * SSH_AGENT_FAILURE from the relay and never reach the agent; requests
 * sent back to back are answered in order, one at a time; a frame cut in
 * pieces is put together; an oversize or zero-length frame ends the
 * connection. */
static void
test_relay_read_only (void **state)
{
  (void) state;
  ib_error_t err = NULL;
  ib_secret_run_t *run = NULL;
  const char *p = NULL;
  cleanup_free char *agent = ib_path_join (tmp, "agent-ro.sock");
  int afd = listen_at (agent);
  assert_int_equal (ib_secret_run_ssh (&run, agent, 0600, getuid (), getgid (), &p, &err), 0);
  cleanup_free char *sock = xstrdup (p);
  assert_int_equal (ib_secret_run_start (run, &err), 0);

  int c = connect_to (sock);
  int s = accept_on (afd);
  /* in one write: REMOVE_ALL_IDENTITIES (19), LOCK (22) "pw", ADD_IDENTITY
   * (17) of a (made-up) ed25519 key, then REQUEST_IDENTITIES (11) */
  static const unsigned char burst[]
      = { 0, 0, 0, 1,  19, 0,   0,   0, 7,   22, 0,   0,   0,   2,   'p', 'w', 0,
          0, 0, 24, 17, 0, 0,   0,   11, 's', 's', 'h', '-', 'e', 'd', '2', '5', '5',
          '1', '9', 0, 0, 0, 4, 'k', 'e', 'y', '!', 0,   0,   0,   1,   11 };
  write_all (c, burst, sizeof burst);
  unsigned char buf[64] = { 0 };
  for (int i = 0; i < 3; i++)
    {
      read_exactly (c, buf, 5);
      assert_memory_equal (buf, "\0\0\0\1\5", 5); /* SSH_AGENT_FAILURE */
    }
  /* the first (and only) bytes the agent got: the REQUEST_IDENTITIES */
  read_exactly (s, buf, 5);
  assert_memory_equal (buf, "\0\0\0\1\13", 5);
  /* a reply in two pieces reaches the step whole */
  write_all (s, "\0\0\0\5", 4);
  usleep (20000);
  write_all (s, "\14\0\0\0\0", 5);
  read_exactly (c, buf, 9);
  assert_memory_equal (buf, "\0\0\0\5\14\0\0\0\0", 9);

  /* a SIGN_REQUEST in three pieces reaches the agent whole, as sent */
  static const unsigned char sign[]
      = { 0, 0, 0, 28, 13, 0, 0, 0, 11, 0, 0, 0, 3, 'k', 't', 'y', 'K', 'E',
          'Y', 'S', 0, 0, 0, 4, 'd', 'a', 't', 'a', 0, 0, 0, 0 };
  assert_int_equal (sizeof sign, 32);
  write_all (c, sign, 2);
  usleep (20000);
  write_all (c, sign + 2, 10);
  usleep (20000);
  write_all (c, sign + 12, sizeof sign - 12);
  read_exactly (s, buf, sizeof sign);
  assert_memory_equal (buf, sign, sizeof sign);
  /* an answer of the wrong type becomes SSH_AGENT_FAILURE */
  write_all (s, "\0\0\0\1\6", 5); /* SSH_AGENT_SUCCESS */
  read_exactly (c, buf, 5);
  assert_memory_equal (buf, "\0\0\0\1\5", 5);

  /* an oversize request (256 KiB + 1): both connections end */
  write_all (c, "\0\4\0\1\13", 5);
  assert_closed (c);
  assert_closed (s);
  close (c);
  close (s);

  /* a zero-length one too; and an oversize reply */
  c = connect_to (sock);
  s = accept_on (afd);
  write_all (c, "\0\0\0\0", 4);
  assert_closed (c);
  assert_closed (s);
  close (c);
  close (s);
  c = connect_to (sock);
  s = accept_on (afd);
  write_all (c, "\0\0\0\1\13", 5);
  read_exactly (s, buf, 5);
  write_all (s, "\1\0\0\0\14", 5);
  assert_closed (c);
  close (c);
  close (s);

  ib_secret_run_end (&run);
  close (afd);
}

/* A step holds at most 64 agent connections at once (secrets.c,
 * RELAY_CONNS_MAX): the 65th is closed at once, never reaching the agent;
 * once one of the 64 goes, a new one is relayed again. */
static void
test_relay_connection_cap (void **state)
{
  (void) state;
  ib_error_t err = NULL;
  ib_secret_run_t *run = NULL;
  const char *p = NULL;
  cleanup_free char *agent = ib_path_join (tmp, "agent-cap.sock");
  int afd = listen_at (agent);
  assert_int_equal (ib_secret_run_ssh (&run, agent, 0600, getuid (), getgid (), &p, &err), 0);
  cleanup_free char *sock = xstrdup (p);
  assert_int_equal (ib_secret_run_start (run, &err), 0);
  int c[65], s[65];
  unsigned char buf[16];
  for (int i = 0; i < 64; i++)
    {
      c[i] = connect_to (sock);
      s[i] = accept_on (afd); /* the relay's connection for it */
    }
  c[64] = connect_to (sock);
  assert_closed (c[64]);
  close (c[64]);
  /* the 64 still work */
  write_all (c[63], "\0\0\0\1\13", 5);
  read_exactly (s[63], buf, 5);
  assert_memory_equal (buf, "\0\0\0\1\13", 5);
  /* one goes (the step's side: the relay closes the agent's), a new one
   * is relayed */
  close (c[0]);
  assert_closed (s[0]);
  close (s[0]);
  c[0] = connect_to (sock);
  s[0] = accept_on (afd);
  write_all (c[0], "\0\0\0\1\13", 5);
  read_exactly (s[0], buf, 5);
  assert_memory_equal (buf, "\0\0\0\1\13", 5);
  for (int i = 0; i < 64; i++)
    close (c[i]), close (s[i]);
  ib_secret_run_end (&run);
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
    cmocka_unit_test (test_relay_read_only),
    cmocka_unit_test (test_relay_connection_cap),
  };
  return cmocka_run_group_tests (tests, setup, teardown);
}
