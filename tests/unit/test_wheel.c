/* tests/unit/test_wheel.c — wheel file names and verification (PEP 427),
 * the embedded policy table (builder/wheel/wheel.h).  Wheels are written here
 * with libarchive's zip writer; RECORD digests are computed here with
 * libcrypto (sha256, urlsafe base64 without padding, as PEP 427 says).
 * ELF audits are compared with auditwheel in tests/e2e/test_wheel.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "builder/wheel/wheel.h"
#include "common/util.h"

#include <archive.h>
#include <archive_entry.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[] = "/tmp/ib-test-wheel-XXXXXX";

static char *
record_hash (const char *data, size_t len)
{
  unsigned char d[32];
  unsigned int dl = 0;
  EVP_Digest (data, len, d, &dl, EVP_sha256 (), NULL);
  char b[64];
  EVP_EncodeBlock ((unsigned char *) b, d, (int) dl);
  for (char *p = b; *p; p++)
    if (*p == '+')
      *p = '-';
    else if (*p == '/')
      *p = '_';
  char *eq = strchr (b, '=');
  if (eq)
    *eq = '\0';
  return xasprintf ("sha256=%s", b);
}

typedef struct
{
  const char *path, *data;
} mem_t;

/* Write a zip with `m` (NULL-path terminated) plus, unless `record` is
 * given, a RECORD made from them. */
static char *
write_wheel (const char *name, const mem_t *m, const char *record)
{
  char *path = xasprintf ("%s/%s", tmpdir, name);
  struct archive *a = archive_write_new ();
  archive_write_set_format_zip (a);
  assert_int_equal (archive_write_open_filename (a, path), ARCHIVE_OK);
  ib_buf_t rec = { 0 };
  const char *di = NULL;
  for (size_t i = 0; m[i].path; i++)
    {
      struct archive_entry *e = archive_entry_new ();
      archive_entry_set_pathname (e, m[i].path);
      archive_entry_set_filetype (e, AE_IFREG);
      archive_entry_set_perm (e, 0644);
      archive_entry_set_size (e, (la_int64_t) strlen (m[i].data));
      assert_int_equal (archive_write_header (a, e), ARCHIVE_OK);
      archive_write_data (a, m[i].data, strlen (m[i].data));
      archive_entry_free (e);
      cleanup_free char *h = record_hash (m[i].data, strlen (m[i].data));
      ib_buf_printf (&rec, "%s,%s,%zu\n", m[i].path, h, strlen (m[i].data));
      if (strstr (m[i].path, ".dist-info/"))
        di = m[i].path;
    }
  cleanup_free char *rp = NULL;
  if (di)
    {
      rp = xstrndup (di, (size_t) (strchr (di, '/') - di));
      char *t = xasprintf ("%s/RECORD", rp);
      free (rp);
      rp = t;
      ib_buf_printf (&rec, "%s,,\n", rp);
    }
  if (rp)
    {
      const char *text = record ? record : rec.data;
      struct archive_entry *e = archive_entry_new ();
      archive_entry_set_pathname (e, rp);
      archive_entry_set_filetype (e, AE_IFREG);
      archive_entry_set_perm (e, 0644);
      archive_entry_set_size (e, (la_int64_t) strlen (text));
      assert_int_equal (archive_write_header (a, e), ARCHIVE_OK);
      archive_write_data (a, text, strlen (text));
      archive_entry_free (e);
    }
  ib_buf_free (&rec);
  archive_write_close (a);
  archive_write_free (a);
  return path;
}

#define WHEEL_FILE "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
#define METADATA "Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n\nA body: with colons\n"

static int
open_err (const char *name, const mem_t *m, const char *record, char **msg)
{
  cleanup_free char *p = write_wheel (name, m, record);
  ib_wheel_t *w = NULL;
  ib_error_t err = NULL;
  int r = ib_wheel_open (p, &w, &err);
  if (r == 0)
    {
      ib_wheel_close (w);
      *msg = NULL;
    }
  else
    {
      *msg = xstrdup (err->msg);
      ib_error_free (&err);
    }
  unlink (p);
  return r;
}

static void
test_names (void **state)
{
  (void) state;
  ib_wheel_name_t n;
  ib_error_t err = NULL;
  assert_int_equal (ib_wheel_parse_name ("torch-1.10.0+cu113-cp39-cp39-linux_x86_64.whl", &n,
                                         &err), 0);
  assert_string_equal (n.distribution, "torch");
  assert_string_equal (n.version, "1.10.0+cu113");
  assert_null (n.build);
  assert_string_equal (n.python, "cp39");
  assert_string_equal (n.abi, "cp39");
  assert_string_equal (n.platform, "linux_x86_64");
  ib_wheel_name_clear (&n);
  assert_int_equal (ib_wheel_parse_name ("a_b-2.0-1local-py2.py3-none-manylinux_2_17_x86_64."
                                         "manylinux2014_x86_64.whl", &n, &err), 0);
  assert_string_equal (n.build, "1local");
  assert_string_equal (n.python, "py2.py3");
  assert_string_equal (n.platform, "manylinux_2_17_x86_64.manylinux2014_x86_64");
  ib_wheel_name_clear (&n);
  const char *bad[] = { "foo-1.0-py3-none.whl",            /* 4 parts */
                        "foo-1.0-x-y-py3-none-any.whl",    /* 7 parts */
                        "foo-1.0-abc-py3-none-any.whl",    /* build tag not a digit */
                        "foo-1.0-py3-none-any.zip",        /* suffix */
                        "foo--1.0-py3-none-any.whl",       /* empty part */
                        "fo o-1.0-py3-none-any.whl",       /* space */
                        NULL };
  for (size_t i = 0; bad[i]; i++)
    {
      assert_int_equal (ib_wheel_parse_name (bad[i], &n, &err), -1);
      assert_non_null (strstr (err->msg, bad[i]));
      ib_error_free (&err);
    }
}

static void
test_policy_embedded (void **state)
{
  (void) state;
  size_t len = 0;
  const char *p = ib_wheel_policy_json (&len);
  /* the digest data/SOURCES.md records for the copy of auditwheel's file */
  assert_int_equal (len, 127035);
  unsigned char d[32];
  unsigned int dl = 0;
  EVP_Digest (p, len, d, &dl, EVP_sha256 (), NULL);
  char hex[65];
  for (size_t i = 0; i < 32; i++)
    sprintf (hex + 2 * i, "%02x", d[i]);
  assert_string_equal (hex, "104863eb197685edf6407a51ccde6cbd906be736efb959a991a60d102f1ccf96");
  assert_int_equal (p[len], '\0');
}

static void
test_verify_good_and_pure (void **state)
{
  (void) state;
  const mem_t m[] = { { "demo/__init__.py", "x = 1\n" },
                      { "demo-1.0.dist-info/WHEEL", WHEEL_FILE },
                      { "demo-1.0.dist-info/METADATA", METADATA },
                      { NULL, NULL } };
  cleanup_free char *p = write_wheel ("demo-1.0-py3-none-any.whl", m, NULL);
  ib_wheel_t *w = NULL;
  ib_error_t err = NULL;
  assert_int_equal (ib_wheel_open (p, &w, &err), 0);
  assert_int_equal (ib_wheel_member_count (w), 4);
  assert_string_equal (ib_wheel_get_name (w)->distribution, "demo");
  ib_wheel_audit_t *a = NULL;
  assert_int_equal (ib_wheel_audit (w, NULL, &a, &err), 0);
  assert_null (ib_wheel_audit_tag (a));
  json_t *j = ib_wheel_audit_json (a);
  assert_true (json_is_true (json_object_get (j, "pure")));
  json_decref (j);
  ib_wheel_audit_free (a);
  ib_wheel_close (w);
  assert_int_equal (ib_wheel_check_output (p, &err), 0);
  unlink (p);
}

static void
test_verify_failures (void **state)
{
  (void) state;
  char *msg = NULL;
  const char *name = "demo-1.0-py3-none-any.whl";
  /* a hash that does not match the member */
  const mem_t m[] = { { "demo/__init__.py", "x = 1\n" },
                      { "demo-1.0.dist-info/WHEEL", WHEEL_FILE },
                      { "demo-1.0.dist-info/METADATA", METADATA },
                      { NULL, NULL } };
  cleanup_free char *h_wheel = record_hash (WHEEL_FILE, strlen (WHEEL_FILE));
  cleanup_free char *h_meta = record_hash (METADATA, strlen (METADATA));
  cleanup_free char *h_other = record_hash ("x = 2\n", 6);
  cleanup_free char *h_ok = record_hash ("x = 1\n", 6);
  cleanup_free char *rec = xasprintf ("demo/__init__.py,%s,6\ndemo-1.0.dist-info/WHEEL,%s,%zu\n"
                                      "demo-1.0.dist-info/METADATA,%s,%zu\n"
                                      "demo-1.0.dist-info/RECORD,,\n",
                                      h_other, h_wheel, strlen (WHEEL_FILE), h_meta,
                                      strlen (METADATA));
  assert_int_equal (open_err (name, m, rec, &msg), -1);
  assert_string_equal (msg, "wheel demo-1.0-py3-none-any.whl: RECORD: hash mismatch for "
                            "demo/__init__.py");
  free (msg);
  /* a wrong size */
  free (rec);
  rec = xasprintf ("demo/__init__.py,%s,7\ndemo-1.0.dist-info/WHEEL,%s,%zu\n"
                   "demo-1.0.dist-info/METADATA,%s,%zu\ndemo-1.0.dist-info/RECORD,,\n",
                   h_ok, h_wheel, strlen (WHEEL_FILE), h_meta, strlen (METADATA));
  assert_int_equal (open_err (name, m, rec, &msg), -1);
  assert_non_null (strstr (msg, "RECORD: size mismatch for demo/__init__.py (RECORD 7, member 6)"));
  free (msg);
  /* a member RECORD does not list */
  free (rec);
  rec = xasprintf ("demo-1.0.dist-info/WHEEL,%s,%zu\n"
                   "demo-1.0.dist-info/METADATA,%s,%zu\ndemo-1.0.dist-info/RECORD,,\n",
                   h_wheel, strlen (WHEEL_FILE), h_meta, strlen (METADATA));
  assert_int_equal (open_err (name, m, rec, &msg), -1);
  assert_non_null (strstr (msg, "RECORD does not list demo/__init__.py"));
  free (msg);
  /* RECORD lists a missing member */
  free (rec);
  rec = xasprintf ("demo/__init__.py,%s,6\ndemo/gone.py,%s,6\ndemo-1.0.dist-info/WHEEL,%s,%zu\n"
                   "demo-1.0.dist-info/METADATA,%s,%zu\ndemo-1.0.dist-info/RECORD,,\n",
                   h_ok, h_ok, h_wheel, strlen (WHEEL_FILE), h_meta, strlen (METADATA));
  assert_int_equal (open_err (name, m, rec, &msg), -1);
  assert_non_null (strstr (msg, "RECORD lists demo/gone.py, which the wheel lacks"));
  free (msg);
  /* md5 is not allowed */
  free (rec);
  rec = xasprintf ("demo/__init__.py,md5=abc,6\ndemo-1.0.dist-info/WHEEL,%s,%zu\n"
                   "demo-1.0.dist-info/METADATA,%s,%zu\ndemo-1.0.dist-info/RECORD,,\n",
                   h_wheel, strlen (WHEEL_FILE), h_meta, strlen (METADATA));
  assert_int_equal (open_err (name, m, rec, &msg), -1);
  assert_non_null (strstr (msg, "hash algorithm md5"));
  free (msg);
  /* sha512 is allowed (and checked) */
  {
    unsigned char d[64];
    unsigned int dl = 0;
    EVP_Digest ("x = 1\n", 6, d, &dl, EVP_sha512 (), NULL);
    char b[100];
    EVP_EncodeBlock ((unsigned char *) b, d, (int) dl);
    for (char *q = b; *q; q++)
      *q = *q == '+' ? '-' : *q == '/' ? '_' : *q == '=' ? '\0' : *q;
    free (rec);
    rec = xasprintf ("demo/__init__.py,sha512=%s,6\ndemo-1.0.dist-info/WHEEL,%s,%zu\n"
                     "demo-1.0.dist-info/METADATA,%s,%zu\ndemo-1.0.dist-info/RECORD,,\n",
                     b, h_wheel, strlen (WHEEL_FILE), h_meta, strlen (METADATA));
    assert_int_equal (open_err (name, m, rec, &msg), 0);
    b[3] = b[3] == 'A' ? 'B' : 'A';
    free (rec);
    rec = xasprintf ("demo/__init__.py,sha512=%s,6\ndemo-1.0.dist-info/WHEEL,%s,%zu\n"
                     "demo-1.0.dist-info/METADATA,%s,%zu\ndemo-1.0.dist-info/RECORD,,\n",
                     b, h_wheel, strlen (WHEEL_FILE), h_meta, strlen (METADATA));
    assert_int_equal (open_err (name, m, rec, &msg), -1);
    assert_string_equal (msg, "wheel demo-1.0-py3-none-any.whl: RECORD: hash mismatch for "
                              "demo/__init__.py");
    free (msg);
  }
  /* a quoted path with a comma is CSV, as Python's csv module writes it */
  const mem_t mc[] = { { "demo/a,b.py", "x = 1\n" },
                       { "demo-1.0.dist-info/WHEEL", WHEEL_FILE },
                       { "demo-1.0.dist-info/METADATA", METADATA },
                       { NULL, NULL } };
  free (rec);
  rec = xasprintf ("\"demo/a,b.py\",%s,6\r\ndemo-1.0.dist-info/WHEEL,%s,%zu\r\n"
                   "demo-1.0.dist-info/METADATA,%s,%zu\r\ndemo-1.0.dist-info/RECORD,,\r\n",
                   h_ok, h_wheel, strlen (WHEEL_FILE), h_meta, strlen (METADATA));
  assert_int_equal (open_err (name, mc, rec, &msg), 0);
  /* WHEEL's tags must be the file name's */
  assert_int_equal (open_err ("demo-1.0-py2-none-any.whl", m, NULL, &msg), -1);
  assert_non_null (strstr (msg, "WHEEL: no Tag line for py2-none-any"));
  free (msg);
  /* the .dist-info name must match the file name */
  assert_int_equal (open_err ("other-1.0-py3-none-any.whl", m, NULL, &msg), -1);
  assert_non_null (strstr (msg, "the .dist-info directory is demo-1.0.dist-info"));
  free (msg);
  /* names compare as PEP 503 normalizes them */
  const mem_t norm[] = { { "demo_pkg-1.0.dist-info/WHEEL", WHEEL_FILE },
                         { "demo_pkg-1.0.dist-info/METADATA", METADATA },
                         { NULL, NULL } };
  assert_int_equal (open_err ("Demo.Pkg-1.0-py3-none-any.whl", norm, NULL, &msg), 0);
  assert_int_equal (open_err ("demo_pkg-1.1-py3-none-any.whl", norm, NULL, &msg), -1);
  assert_non_null (strstr (msg, "the .dist-info directory is demo_pkg-1.0.dist-info"));
  free (msg);
  /* no METADATA */
  const mem_t nm[] = { { "demo-1.0.dist-info/WHEEL", WHEEL_FILE }, { NULL, NULL } };
  assert_int_equal (open_err (name, nm, NULL, &msg), -1);
  assert_non_null (strstr (msg, "missing demo-1.0.dist-info/METADATA"));
  free (msg);
  /* a member escaping the wheel */
  const mem_t esc[] = { { "../evil.py", "x = 1\n" },
                        { "demo-1.0.dist-info/WHEEL", WHEEL_FILE },
                        { "demo-1.0.dist-info/METADATA", METADATA },
                        { NULL, NULL } };
  assert_int_equal (open_err (name, esc, NULL, &msg), -1);
  assert_non_null (strstr (msg, "unsafe member name '../evil.py'"));
  free (msg);
  /* not a zip at all */
  cleanup_free char *junk = xasprintf ("%s/%s", tmpdir, name);
  ib_error_t err = NULL;
  assert_int_equal (ib_write_file_atomic (junk, "not a zip", 9, 0644, &err), 0);
  ib_wheel_t *w = NULL;
  assert_int_equal (ib_wheel_open (junk, &w, &err), -1);
  assert_non_null (strstr (err->msg, "not a readable zip"));
  ib_error_free (&err);
  assert_int_equal (ib_wheel_check_output (junk, &err), -1);
  ib_error_free (&err);
  unlink (junk);
}

static int
setup (void **state)
{
  (void) state;
  if (!mkdtemp (tmpdir))
    return -1;
  setenv ("TMPDIR", tmpdir, 1);
  return 0;
}

static int
teardown (void **state)
{
  (void) state;
  /* every wheel's extraction directory went away with its ib_wheel_close */
  int r = rmdir (tmpdir);
  return r;
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test (test_names),
    cmocka_unit_test (test_policy_embedded),
    cmocka_unit_test (test_verify_good_and_pure),
    cmocka_unit_test (test_verify_failures),
  };
  return cmocka_run_group_tests (tests, setup, teardown);
}
