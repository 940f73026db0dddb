/* tests/unit/test_auth.c — credentials and token bookkeeping (oci/auth.h):
 * auth file parsing, lookup order, the credential helper protocol (a fake
 * helper script put on PATH here), login/logout file writes, token URLs,
 * answers and expiry. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/util.h"
#include "oci/auth.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* base64 of "tester:pw1", "other:pw2", "deep:pw3" */
#define B64_TESTER "dGVzdGVyOnB3MQ=="
#define B64_OTHER "b3RoZXI6cHcy"
#define B64_DEEP "ZGVlcDpwdzM="

static char *tmpdir;
static char *saved_path;

static char *
tpath (const char *name)
{
  return ib_path_join (tmpdir, name);
}

static char *
write_tmp (const char *name, const char *text)
{
  char *p = tpath (name);
  ib_error_t err = NULL;
  cleanup_free char *dir = xstrdup (p);
  *strrchr (dir, '/') = '\0';
  assert_int_equal (ib_mkdir_p (dir, 0700, &err), 0);
  FILE *f = fopen (p, "w");
  assert_non_null (f);
  fputs (text, f);
  fclose (f);
  return p;
}

static int
setup (void **state)
{
  (void) state;
  tmpdir = xstrdup ("/tmp/ib-test-auth-XXXXXX");
  if (mkdtemp (tmpdir) == NULL)
    return -1;
  saved_path = xstrdup (getenv ("PATH"));
  unsetenv ("REGISTRY_AUTH_FILE");
  unsetenv ("XDG_RUNTIME_DIR");
  unsetenv ("DOCKER_CONFIG");
  unsetenv ("XDG_CONFIG_HOME");
  cleanup_free char *home = tpath ("home");
  setenv ("HOME", home, 1);
  ib_auth_set_authfile (NULL);
  ib_auth_set_override (NULL, NULL, NULL);
  return 0;
}

static int
teardown (void **state)
{
  (void) state;
  ib_error_t err = NULL;
  ib_rm_rf (tmpdir, &err);
  ib_error_free (&err);
  free (tmpdir);
  setenv ("PATH", saved_path, 1);
  free (saved_path);
  return 0;
}

static void
test_normalize_key (void **state)
{
  (void) state;
  static const char *const cases[][2] = {
    { "https://index.docker.io/v1/", "docker.io" },
    { "index.docker.io", "docker.io" },
    { "registry-1.docker.io", "docker.io" },
    { "docker.io", "docker.io" },
    { "http://127.0.0.1:5000/v2/", "127.0.0.1:5000" },
    { "https://quay.io", "quay.io" },
    { "quay.io/", "quay.io" },
    { "quay.io/ns/repo", "quay.io/ns/repo" },
    { "index.docker.io/library/ubuntu", "docker.io/library/ubuntu" },
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    {
      cleanup_free char *n = ib_auth_normalize_key (cases[i][0]);
      assert_string_equal (n, cases[i][1]);
    }
}

static void
test_base64 (void **state)
{
  (void) state;
  cleanup_free char *e = ib_base64_encode ("tester:pw1", 10);
  assert_string_equal (e, B64_TESTER);
  cleanup_free char *d = ib_base64_decode (B64_OTHER);
  assert_string_equal (d, "other:pw2");
  assert_null (ib_base64_decode ("not base64!"));
  ib_auth_creds_t c = { .username = xstrdup ("tester"), .password = xstrdup ("pw1") };
  cleanup_free char *h = ib_auth_basic_header (&c);
  assert_string_equal (h, "Authorization: Basic " B64_TESTER);
  ib_auth_creds_clear (&c);
  assert_null (ib_auth_basic_header (&c));
}

static void
test_file_entries_most_specific_wins (void **state)
{
  (void) state;
  cleanup_free char *f = write_tmp ("auth.json", "{\"auths\": {"
                                    "\"https://index.docker.io/v1/\": {\"auth\": \"" B64_TESTER "\"},"
                                    "\"quay.io\": {\"auth\": \"" B64_OTHER "\"},"
                                    "\"quay.io/team\": {\"auth\": \"" B64_DEEP "\"},"
                                    "\"quay.io/teamx\": {\"auth\": \"" B64_TESTER "\"},"
                                    "\"ghcr.io\": {\"identitytoken\": \"refresh-xyz\"},"
                                    "\"empty.io\": {}}}");
  ib_error_t err = NULL;
  ib_auth_creds_t c;
  bool found;
  assert_int_equal (ib_auth_find_in_file (f, "docker.io", "library/ubuntu", &c, &found, &err), 0);
  assert_true (found);
  assert_string_equal (c.username, "tester");
  assert_string_equal (c.password, "pw1");
  assert_string_equal (c.source, f);
  ib_auth_creds_clear (&c);
  /* quay.io/team/app: "quay.io/team" beats "quay.io"; "quay.io/teamx" is no prefix */
  assert_int_equal (ib_auth_find_in_file (f, "quay.io", "team/app", &c, &found, &err), 0);
  assert_true (found);
  assert_string_equal (c.username, "deep");
  ib_auth_creds_clear (&c);
  assert_int_equal (ib_auth_find_in_file (f, "quay.io", "teamx2/app", &c, &found, &err), 0);
  assert_string_equal (c.username, "other");
  ib_auth_creds_clear (&c);
  assert_int_equal (ib_auth_find_in_file (f, "ghcr.io", "a/b", &c, &found, &err), 0);
  assert_true (found);
  assert_null (c.password);
  assert_string_equal (c.identity_token, "refresh-xyz");
  ib_auth_creds_clear (&c);
  /* an entry without a secret, and no entry at all */
  assert_int_equal (ib_auth_find_in_file (f, "empty.io", "a", &c, &found, &err), 0);
  assert_false (found);
  assert_true (ib_auth_creds_empty (&c));
  assert_int_equal (ib_auth_find_in_file (f, "127.0.0.1:5000", "a", &c, &found, &err), 0);
  assert_false (found);
  /* missing file: no entry, no error */
  assert_int_equal (ib_auth_find_in_file ("/nonexistent/auth.json", "quay.io", "a", &c, &found,
                                          &err), 0);
  assert_false (found);
}

static void
test_file_errors (void **state)
{
  (void) state;
  ib_error_t err = NULL;
  ib_auth_creds_t c;
  bool found;
  cleanup_free char *bad = write_tmp ("bad.json", "{\"auths\": {");
  assert_int_equal (ib_auth_find_in_file (bad, "quay.io", "a", &c, &found, &err), -1);
  assert_non_null (strstr (err->msg, bad));
  assert_non_null (strstr (err->msg, "not valid JSON"));
  ib_error_free (&err);
  cleanup_free char *nocolon = write_tmp ("nocolon.json",
                                          "{\"auths\": {\"quay.io\": {\"auth\": \"bm9jb2xvbg==\"}}}");
  assert_int_equal (ib_auth_find_in_file (nocolon, "quay.io", "a", &c, &found, &err), -1);
  assert_non_null (strstr (err->msg, "user:password"));
  assert_non_null (strstr (err->msg, "quay.io"));
  ib_error_free (&err);
}

static void
test_lookup_order (void **state)
{
  (void) state;
  cleanup_free char *a = write_tmp ("a.json", "{\"auths\": {\"r.io\": {\"auth\": \"" B64_TESTER "\"}}}");
  cleanup_free char *x = write_tmp ("xdg/containers/auth.json",
                                    "{\"auths\": {\"r.io\": {\"auth\": \"" B64_OTHER "\"},"
                                    "\"s.io\": {\"auth\": \"" B64_OTHER "\"}}}");
  cleanup_free char *dk = write_tmp ("dc/config.json",
                                     "{\"auths\": {\"r.io\": {\"auth\": \"" B64_DEEP "\"},"
                                     "\"s.io\": {\"auth\": \"" B64_DEEP "\"},"
                                     "\"t.io\": {\"auth\": \"" B64_DEEP "\"}}}");
  cleanup_free char *home = write_tmp ("home/.docker/config.json",
                                       "{\"auths\": {\"u.io\": {\"auth\": \"" B64_TESTER "\"}}}");
  (void) dk; /* written for its side effect: the file */
  cleanup_free char *xdg = tpath ("xdg");
  cleanup_free char *dc = tpath ("dc");
  setenv ("REGISTRY_AUTH_FILE", a, 1);
  setenv ("XDG_RUNTIME_DIR", xdg, 1);
  setenv ("DOCKER_CONFIG", dc, 1);
  ib_error_t err = NULL;
  ib_auth_creds_t c;
  static const char *const expect[][2] = {
    { "r.io", "tester" }, { "s.io", "other" }, { "t.io", "deep" }, { "u.io", NULL }, { "v.io", NULL },
  };
  for (size_t i = 0; i < 5; i++)
    {
      assert_int_equal (ib_auth_find (expect[i][0], "x/y", &c, &err), 0);
      if (expect[i][1])
        assert_string_equal (c.username, expect[i][1]);
      else
        assert_true (ib_auth_creds_empty (&c)); /* ~/.docker is not read with DOCKER_CONFIG set */
      ib_auth_creds_clear (&c);
    }
  unsetenv ("DOCKER_CONFIG");
  assert_int_equal (ib_auth_find ("u.io", "x", &c, &err), 0);
  assert_string_equal (c.username, "tester");
  ib_auth_creds_clear (&c);
  /* --authfile takes REGISTRY_AUTH_FILE's place */
  cleanup_free char *o = write_tmp ("o.json", "{\"auths\": {\"r.io\": {\"auth\": \"" B64_DEEP "\"}}}");
  ib_auth_set_authfile (o);
  assert_int_equal (ib_auth_find ("r.io", "x", &c, &err), 0);
  assert_string_equal (c.username, "deep");
  ib_auth_creds_clear (&c);
  /* --creds beats every file, for its registry only */
  ib_auth_set_override ("r.io", "cli", "clipw");
  assert_int_equal (ib_auth_find ("r.io", "x", &c, &err), 0);
  assert_string_equal (c.username, "cli");
  assert_string_equal (c.password, "clipw");
  ib_auth_creds_clear (&c);
  assert_int_equal (ib_auth_find ("s.io", "x", &c, &err), 0);
  assert_string_equal (c.username, "other");
  ib_auth_creds_clear (&c);
  ib_auth_set_override (NULL, NULL, NULL);
  ib_auth_set_authfile (NULL);
  /* login's file: REGISTRY_AUTH_FILE, then XDG, then ~/.docker */
  cleanup_free char *d1 = ib_auth_default_file (&err);
  assert_string_equal (d1, a);
  unsetenv ("REGISTRY_AUTH_FILE");
  cleanup_free char *d2 = ib_auth_default_file (&err);
  assert_string_equal (d2, x);
  unsetenv ("XDG_RUNTIME_DIR");
  cleanup_free char *d3 = ib_auth_default_file (&err);
  assert_string_equal (d3, home);
}

/* The search path is containers-auth.json(5)'s, then docker's. */
static void
test_search_path (void **state)
{
  (void) state;
  cleanup_free char *home = tpath ("home");
  cleanup_strv char **v = ib_auth_search_path ();
  cleanup_free char *run = xasprintf ("/run/containers/%u/auth.json", (unsigned) getuid ());
  cleanup_free char *cfg = xasprintf ("%s/.config/containers/auth.json", home);
  cleanup_free char *dk = xasprintf ("%s/.docker/config.json", home);
  assert_int_equal (ib_strv_len (v), 3);
  assert_string_equal (v[0], run); /* podman login's file without XDG_RUNTIME_DIR */
  assert_string_equal (v[1], cfg);
  assert_string_equal (v[2], dk);
  ib_strv_free (v);
  setenv ("REGISTRY_AUTH_FILE", "/a.json", 1);
  setenv ("XDG_RUNTIME_DIR", "/xdg", 1);
  setenv ("XDG_CONFIG_HOME", "/cfg", 1);
  setenv ("DOCKER_CONFIG", "/dc", 1);
  v = ib_auth_search_path ();
  const char *want[] = { "/a.json", "/xdg/containers/auth.json", "/cfg/containers/auth.json",
                         "/dc/config.json", NULL };
  for (size_t i = 0; want[i]; i++)
    assert_string_equal (v[i], want[i]);
  assert_null (v[4]);
  unsetenv ("REGISTRY_AUTH_FILE");
  unsetenv ("XDG_RUNTIME_DIR");
  unsetenv ("XDG_CONFIG_HOME");
  unsetenv ("DOCKER_CONFIG");

  /* credentials in ~/.config/containers/auth.json are found */
  ib_strv_free (v);
  v = NULL;
  cleanup_free char *f = write_tmp ("home/.config/containers/auth.json",
                                    "{\"auths\": {\"c.io\": {\"auth\": \"" B64_TESTER "\"}}}");
  (void) f;
  ib_error_t err = NULL;
  ib_auth_creds_t c;
  assert_int_equal (ib_auth_find ("c.io", "x", &c, &err), 0);
  assert_string_equal (c.username, "tester");
  ib_auth_creds_clear (&c);
}

/* A fake docker-credential-fake: logs "ACTION INPUT" lines to $FAKE_LOG,
 * knows 127.0.0.1:5000 (user helper-user) and docker.io (an identity
 * token), says "credentials not found" otherwise. */
static void
install_fake_helper (void)
{
  cleanup_free char *log = tpath ("helper.log");
  setenv ("FAKE_LOG", log, 1);
  cleanup_free char *p = write_tmp ("bin/docker-credential-fake",
                                    "#!/bin/sh\n"
                                    "in=$(cat)\n"
                                    "echo \"$1 $in\" >> \"$FAKE_LOG\"\n"
                                    "case \"$1 $in\" in\n"
                                    "'get 127.0.0.1:5000') echo '{\"ServerURL\":\"127.0.0.1:5000\","
                                    "\"Username\":\"helper-user\",\"Secret\":\"helper-secret\"}' ;;\n"
                                    "'get https://index.docker.io/v1/') echo '{\"ServerURL\":\"x\","
                                    "\"Username\":\"<token>\",\"Secret\":\"id-token\"}' ;;\n"
                                    "'get broken.io') echo 'the keychain is locked' >&2; exit 3 ;;\n"
                                    "get*) echo 'credentials not found in native keychain'; exit 1 ;;\n"
                                    "store*|erase*) ;;\n"
                                    "esac\n");
  chmod (p, 0755);
  cleanup_free char *bin = tpath ("bin");
  cleanup_free char *path = xasprintf ("%s:%s", bin, saved_path);
  setenv ("PATH", path, 1);
}

static void
test_cred_helpers (void **state)
{
  (void) state;
  install_fake_helper ();
  cleanup_free char *f = write_tmp ("helpers.json",
                                    "{\"credHelpers\": {\"127.0.0.1:5000\": \"fake\","
                                    "\"docker.io\": \"fake\", \"gone.io\": \"missing\","
                                    "\"broken.io\": \"fake\", \"none.io\": \"fake\"},"
                                    "\"auths\": {\"127.0.0.1:5000\": {\"auth\": \"" B64_TESTER "\"}}}");
  ib_error_t err = NULL;
  ib_auth_creds_t c;
  bool found;
  /* credHelpers beats auths */
  assert_int_equal (ib_auth_find_in_file (f, "127.0.0.1:5000", "a", &c, &found, &err), 0);
  assert_true (found);
  assert_string_equal (c.username, "helper-user");
  assert_string_equal (c.password, "helper-secret");
  assert_non_null (strstr (c.source, "docker-credential-fake"));
  ib_auth_creds_clear (&c);
  /* Docker Hub is asked for under Docker's URL; "<token>" = identity token */
  assert_int_equal (ib_auth_find_in_file (f, "docker.io", "library/x", &c, &found, &err), 0);
  assert_true (found);
  assert_null (c.username);
  assert_string_equal (c.identity_token, "id-token");
  ib_auth_creds_clear (&c);
  /* not found: anonymous, no error */
  assert_int_equal (ib_auth_find_in_file (f, "none.io", "a", &c, &found, &err), 0);
  assert_false (found);
  /* a missing helper binary and a failing helper are errors that say so */
  assert_int_equal (ib_auth_find_in_file (f, "gone.io", "a", &c, &found, &err), -1);
  assert_non_null (strstr (err->msg, "docker-credential-missing not found"));
  ib_error_free (&err);
  assert_int_equal (ib_auth_find_in_file (f, "broken.io", "a", &c, &found, &err), -1);
  assert_non_null (strstr (err->msg, "the keychain is locked"));
  assert_non_null (strstr (err->msg, "exit status 3"));
  ib_error_free (&err);
  cleanup_free char *log = NULL;
  size_t len;
  assert_int_equal (ib_read_file (getenv ("FAKE_LOG"), &log, &len, &err), 0);
  assert_string_equal (log, "get 127.0.0.1:5000\nget https://index.docker.io/v1/\nget none.io\n"
                            "get broken.io\n");
}

static void
test_creds_store (void **state)
{
  (void) state;
  install_fake_helper ();
  cleanup_free char *f = write_tmp ("store.json", "{\"credsStore\": \"fake\", \"auths\": {"
                                    "\"127.0.0.1:5000\": {}, \"file.io\": {\"auth\": \"" B64_DEEP "\"}}}");
  ib_error_t err = NULL;
  ib_auth_creds_t c;
  bool found;
  assert_int_equal (ib_auth_find_in_file (f, "127.0.0.1:5000", "a", &c, &found, &err), 0);
  assert_true (found);
  assert_string_equal (c.username, "helper-user");
  ib_auth_creds_clear (&c);
  /* an auths entry with a secret is used as it is */
  assert_int_equal (ib_auth_find_in_file (f, "file.io", "a", &c, &found, &err), 0);
  assert_string_equal (c.username, "deep");
  ib_auth_creds_clear (&c);
  /* login / logout go through the helper, and the file keeps its bytes */
  cleanup_free char *before = NULL, *after = NULL, *log = NULL;
  size_t len;
  assert_int_equal (ib_read_file (f, &before, &len, &err), 0);
  assert_int_equal (ib_auth_store (f, "new.io", "u", "p", &err), 0);
  bool removed;
  assert_int_equal (ib_auth_remove (f, "new.io", &removed, &err), 0);
  assert_true (removed);
  assert_int_equal (ib_read_file (f, &after, &len, &err), 0);
  assert_string_equal (before, after);
  assert_int_equal (ib_read_file (getenv ("FAKE_LOG"), &log, &len, &err), 0);
  assert_non_null (strstr (log, "store {\"ServerURL\":\"new.io\",\"Username\":\"u\",\"Secret\":\"p\"}\n"));
  assert_non_null (strstr (log, "erase new.io\n"));
}

static void
test_store_and_remove (void **state)
{
  (void) state;
  cleanup_free char *f = write_tmp ("login/auth.json",
                                    "{\"auths\": {\"https://r.io/v1/\": {\"auth\": \"" B64_OTHER "\"},"
                                    "\"keep.io\": {\"auth\": \"" B64_DEEP "\"}}, \"HttpHeaders\": {\"X\": \"y\"}}");
  ib_error_t err = NULL;
  assert_int_equal (ib_auth_store (f, "r.io", "tester", "pw1", &err), 0);
  struct stat st;
  assert_int_equal (stat (f, &st), 0);
  assert_int_equal (st.st_mode & 07777, 0600);
  json_t *j = json_load_file (f, 0, NULL);
  assert_non_null (j);
  json_t *auths = json_object_get (j, "auths");
  assert_int_equal (json_object_size (auths), 2); /* the URL spelling was replaced */
  assert_string_equal (json_string_value (json_object_get (json_object_get (auths, "r.io"), "auth")),
                       B64_TESTER);
  assert_non_null (json_object_get (auths, "keep.io"));
  assert_string_equal (json_string_value (json_object_get (json_object_get (j, "HttpHeaders"), "X")),
                       "y");
  json_decref (j);
  bool removed;
  assert_int_equal (ib_auth_remove (f, "r.io", &removed, &err), 0);
  assert_true (removed);
  assert_int_equal (ib_auth_remove (f, "r.io", &removed, &err), 0);
  assert_false (removed);
  assert_int_equal (ib_auth_remove (f, NULL, &removed, &err), 0);
  assert_true (removed);
  j = json_load_file (f, 0, NULL);
  assert_int_equal (json_object_size (json_object_get (j, "auths")), 0);
  assert_non_null (json_object_get (j, "HttpHeaders"));
  json_decref (j);
  /* a new file in a new directory */
  cleanup_free char *nf = tpath ("new/dir/auth.json");
  assert_int_equal (ib_auth_store (nf, "n.io", "a", "b", &err), 0);
  assert_int_equal (stat (nf, &st), 0);
  assert_int_equal (st.st_mode & 07777, 0600);
  /* an invalid file is not overwritten */
  cleanup_free char *bad = write_tmp ("bad-login.json", "not json");
  assert_int_equal (ib_auth_store (bad, "n.io", "a", "b", &err), -1);
  assert_non_null (strstr (err->msg, "not valid JSON"));
  ib_error_free (&err);
  cleanup_free char *data = NULL;
  size_t len;
  assert_int_equal (ib_read_file (bad, &data, &len, &err), 0);
  assert_string_equal (data, "not json");
}

static void
test_token_url_and_form (void **state)
{
  (void) state;
  cleanup_free char *u = ib_auth_token_url ("https://auth.example/token", "reg service",
                                            "repository:dst/a:pull,push repository:src/b:pull",
                                            NULL);
  assert_string_equal (u, "https://auth.example/token?service=reg%20service"
                          "&scope=repository%3Adst%2Fa%3Apull%2Cpush&scope=repository%3Asrc%2Fb%3Apull");
  cleanup_free char *u2 = ib_auth_token_url ("http://h/t?x=1", "s", NULL, "tester");
  assert_string_equal (u2, "http://h/t?x=1&service=s&account=tester");
  cleanup_free char *f = ib_auth_oauth_form ("s", "repository:a:pull repository:b:pull", "rt+/=");
  assert_string_equal (f, "grant_type=refresh_token&service=s&client_id=imgbuild"
                          "&refresh_token=rt%2B%2F%3D&scope=repository%3Aa%3Apull%20repository%3Ab%3Apull");
}

static void
test_token_parse_and_expiry (void **state)
{
  (void) state;
  ib_error_t err = NULL;
  ib_auth_token_t t;
  int64_t now = 1700000000000LL;
  const char *a = "{\"token\": \"T1\", \"expires_in\": 300, \"issued_at\": \"2023-11-14T22:13:10Z\"}";
  assert_int_equal (ib_auth_token_parse (a, strlen (a), now, &t, &err), 0);
  assert_string_equal (t.token, "T1");
  /* issued_at 2023-11-14T22:13:10Z = 1699999990 s */
  assert_int_equal (t.expires_ms, 1699999990000LL + 300000);
  assert_int_equal (t.lifetime_ms, 300000);
  ib_auth_token_clear (&t);
  const char *b = "{\"access_token\": \"T2\", \"refresh_token\": \"R\"}";
  assert_int_equal (ib_auth_token_parse (b, strlen (b), now, &t, &err), 0);
  assert_string_equal (t.token, "T2");
  assert_string_equal (t.refresh_token, "R");
  assert_int_equal (t.expires_ms, now + 60000); /* the spec's default */
  ib_auth_token_clear (&t);
  /* issued_at in the future (a clock ahead of ours) is not trusted; offsets work */
  const char *c = "{\"token\": \"T3\", \"expires_in\": 2, \"issued_at\": \"2030-01-01T00:00:00.5+02:00\"}";
  assert_int_equal (ib_auth_token_parse (c, strlen (c), now, &t, &err), 0);
  assert_int_equal (t.expires_ms, now + 2000);
  ib_auth_token_clear (&t);
  const char *d = "{\"token\": \"T4\", \"expires_in\": 60, \"issued_at\": \"2023-11-14T23:13:15.250+01:00\"}";
  assert_int_equal (ib_auth_token_parse (d, strlen (d), now, &t, &err), 0);
  assert_int_equal (t.expires_ms, 1699999995250LL + 60000);
  ib_auth_token_clear (&t);
  const char *e = "{\"nothing\": 1}";
  assert_int_equal (ib_auth_token_parse (e, strlen (e), now, &t, &err), -1);
  assert_non_null (strstr (err->msg, "no token"));
  ib_error_free (&err);
  assert_int_equal (ib_auth_token_parse ("<html>", 6, now, &t, &err), -1);
  ib_error_free (&err);
  /* fresh until 10 s before expiry (long lifetimes), a fifth of short ones */
  assert_true (ib_auth_token_fresh (now + 300000, 300000, now + 289000));
  assert_false (ib_auth_token_fresh (now + 300000, 300000, now + 290000));
  assert_true (ib_auth_token_fresh (now + 2000, 2000, now + 1599));
  assert_false (ib_auth_token_fresh (now + 2000, 2000, now + 1600));
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown (test_normalize_key, setup, teardown),
    cmocka_unit_test_setup_teardown (test_base64, setup, teardown),
    cmocka_unit_test_setup_teardown (test_file_entries_most_specific_wins, setup, teardown),
    cmocka_unit_test_setup_teardown (test_file_errors, setup, teardown),
    cmocka_unit_test_setup_teardown (test_lookup_order, setup, teardown),
    cmocka_unit_test_setup_teardown (test_search_path, setup, teardown),
    cmocka_unit_test_setup_teardown (test_cred_helpers, setup, teardown),
    cmocka_unit_test_setup_teardown (test_creds_store, setup, teardown),
    cmocka_unit_test_setup_teardown (test_store_and_remove, setup, teardown),
    cmocka_unit_test_setup_teardown (test_token_url_and_form, setup, teardown),
    cmocka_unit_test_setup_teardown (test_token_parse_and_expiry, setup, teardown),
  };
  return cmocka_run_group_tests (tests, NULL, NULL);
}
