/* tests/unit/test_s3.c — the S3 client's XML (builder/artifact/s3.h),
 * parsed with libxml2: ListObjectsV2 pages as S3 writes them (namespace,
 * pretty-printed, continuation token), error bodies, and hostile replies:
 * entity declarations (billion laughs, external entities), undeclared
 * entities, a tag inside another element's text, truncated, too large and
 * too deeply nested documents.  Nothing may be printed while parsing.
 * (The parts shared with MXNet CD's tests are in test_artifact.c.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "builder/artifact/s3.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* stderr goes to a temp file from setup to teardown, which checks that
 * libxml2 printed nothing. */
static int saved_stderr = -1;
static char stderr_path[64];

static int
setup (void **state)
{
  (void) state;
  strcpy (stderr_path, "/tmp/ib-test-s3-stderr-XXXXXX");
  int fd = mkstemp (stderr_path);
  if (fd < 0)
    return -1;
  fflush (stderr);
  saved_stderr = dup (2);
  dup2 (fd, 2);
  close (fd);
  return 0;
}

static int
teardown (void **state)
{
  (void) state;
  fflush (stderr);
  dup2 (saved_stderr, 2);
  close (saved_stderr);
  struct stat st;
  int rc = stat (stderr_path, &st);
  unlink (stderr_path);
  assert_int_equal (rc, 0);
  assert_int_equal ((int) st.st_size, 0);
  return 0;
}

/* ib_s3_parse_list into a fresh vector; the error's message (or NULL) in
 * *msg, caller frees. */
static int
parse_list (const char *xml, char ***keys, char **next, char **msg)
{
  ib_error_t err = NULL;
  *keys = xmalloc (sizeof (char *));
  *msg = NULL;
  int rc = ib_s3_parse_list (xml, keys, next, &err);
  if (rc < 0)
    {
      assert_non_null (err);
      assert_int_equal (err->status, EPROTO);
      *msg = xstrdup (err->msg);
      ib_error_free (&err);
    }
  return rc;
}

static void
test_list_pages (void **state)
{
  (void) state;
  char **keys;
  char *next;
  char *msg;
  /* a first page as S3 writes it (its namespace, pretty-printed, Owner,
   * a CDATA section and character references in keys) */
  const char *page1
      = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\n"
        "  <Name>bucket</Name>\n  <Prefix>c/dynamic/</Prefix>\n  <KeyCount>2</KeyCount>\n"
        "  <MaxKeys>2</MaxKeys>\n  <IsTruncated>true</IsTruncated>\n"
        "  <ContinuationToken>abc</ContinuationToken>\n"
        "  <Contents>\n    <Key>c/dynamic/ubuntu16.04/cpu/libmxnet.so</Key>\n"
        "    <LastModified>2019-01-01T00:00:00.000Z</LastModified>\n"
        "    <ETag>&quot;d41d8cd98f00b204e9800998ecf8427e&quot;</ETag>\n"
        "    <Size>0</Size>\n"
        "    <Owner><ID>x</ID><DisplayName>y</DisplayName></Owner>\n"
        "    <StorageClass>STANDARD</StorageClass>\n  </Contents>\n"
        "  <Contents><Key><![CDATA[c/dynamic/a <b> & c]]>&#x2F;d&#233;</Key></Contents>\n"
        "  <NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM="
        "</NextContinuationToken>\n"
        "</ListBucketResult>\n";
  assert_int_equal (parse_list (page1, &keys, &next, &msg), 0);
  assert_int_equal ((int) ib_strv_len (keys), 2);
  assert_string_equal (keys[0], "c/dynamic/ubuntu16.04/cpu/libmxnet.so");
  assert_string_equal (keys[1], "c/dynamic/a <b> & c/d\xc3\xa9");
  assert_string_equal (next, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
  free (next);
  ib_strv_free (keys);

  /* the last page: a token without IsTruncated true is not followed */
  assert_int_equal (parse_list ("<ListBucketResult><IsTruncated>false</IsTruncated>"
                                "<Contents><Key>k</Key></Contents>"
                                "<NextContinuationToken>t</NextContinuationToken>"
                                "</ListBucketResult>",
                                &keys, &next, &msg),
                    0);
  assert_null (next);
  assert_int_equal ((int) ib_strv_len (keys), 1);
  ib_strv_free (keys);

  /* an empty Key is a key (a "folder" marker at the prefix itself) */
  assert_int_equal (parse_list ("<ListBucketResult><Contents><Key/></Contents>"
                                "</ListBucketResult>",
                                &keys, &next, &msg),
                    0);
  assert_int_equal ((int) ib_strv_len (keys), 1);
  assert_string_equal (keys[0], "");
  ib_strv_free (keys);

  /* only elements count: a Contents written inside another element's text
   * (a CDATA section, escaped markup) is no key; strstr on the text took
   * the first one for a key */
  assert_int_equal (parse_list ("<ListBucketResult><Prefix><![CDATA[<Contents><Key>evil</Key>"
                                "</Contents>]]></Prefix><Marker>&lt;Contents&gt;&lt;Key&gt;x"
                                "&lt;/Key&gt;&lt;/Contents&gt;</Marker></ListBucketResult>",
                                &keys, &next, &msg),
                    0);
  assert_null (keys[0]);
  ib_strv_free (keys);

  /* errors, with the messages they had */
  assert_int_equal (parse_list ("<ListBucketResult><IsTruncated>true</IsTruncated>"
                                "<NextContinuationToken></NextContinuationToken>"
                                "</ListBucketResult>",
                                &keys, &next, &msg),
                    -1);
  assert_string_equal (msg, "ListBucketResult: truncated without NextContinuationToken");
  free (msg);
  ib_strv_free (keys);
  assert_int_equal (parse_list ("<ListBucketResult><Contents><Size>1</Size></Contents>"
                                "</ListBucketResult>",
                                &keys, &next, &msg),
                    -1);
  assert_string_equal (msg, "ListBucketResult: Contents without a Key");
  free (msg);
  ib_strv_free (keys);
  const char *not_list[] = { "", "{\"something\": \"not quite right\"}",
                             "<Error><Code>AccessDenied</Code></Error>",
                             "<html><body>502 Bad Gateway</body></html>", NULL };
  for (size_t i = 0; not_list[i]; i++)
    {
      assert_int_equal (parse_list (not_list[i], &keys, &next, &msg), -1);
      assert_string_equal (msg, "not a ListBucketResult");
      free (msg);
      ib_strv_free (keys);
    }
}

static void
test_error_body (void **state)
{
  (void) state;
  const char *body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                     "<Error><Code>SignatureDoesNotMatch</Code><Message>The request signature "
                     "we calculated does not match the signature you provided. Check your key "
                     "&amp; signing method.</Message><RequestId>4442587FB7D0A2F9</RequestId>"
                     "</Error>";
  char *code, *msg;
  ib_s3_parse_error (body, strlen (body), &code, &msg);
  assert_string_equal (code, "SignatureDoesNotMatch");
  assert_string_equal (msg, "The request signature we calculated does not match the signature "
                            "you provided. Check your key & signing method.");
  free (code);
  free (msg);
  /* the first of each, wherever it is; one may be missing */
  body = "<Error><Resource>/b/k</Resource><Code>NoSuchKey</Code><Code>second</Code></Error>";
  ib_s3_parse_error (body, strlen (body), &code, &msg);
  assert_string_equal (code, "NoSuchKey");
  assert_null (msg);
  free (code);
  /* `len` bounds the body */
  body = "<Error><Code>A</Code></Error>trailing garbage";
  ib_s3_parse_error (body, strlen ("<Error><Code>A</Code></Error>"), &code, &msg);
  assert_string_equal (code, "A");
  free (code);
  /* no XML: nothing (the error then says only the HTTP status) */
  const char *bad[] = { "", "<html><body><h1>502 Bad Gateway</h1><p>nginx<br></body></html>",
                        "<Error><Code>Truncated</Code><Mess", NULL };
  for (size_t i = 0; bad[i]; i++)
    {
      ib_s3_parse_error (bad[i], strlen (bad[i]), &code, &msg);
      assert_null (code);
      assert_null (msg);
    }
}

static void
test_hostile (void **state)
{
  (void) state;
  char **keys;
  char *next;
  char *msg;
  char *code, *emsg;
  /* entity declarations: billion laughs, an external entity, a parameter
   * entity; refused at <!DOCTYPE, nothing expanded or read */
  const char *dtd[]
      = { "<?xml version=\"1.0\"?><!DOCTYPE ListBucketResult [<!ENTITY a \"aaaaaaaaaa\">"
          "<!ENTITY b \"&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;\"><!ENTITY c \"&b;&b;&b;&b;&b;&b;&b;&b;&b;"
          "&b;\"><!ENTITY d \"&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;\"><!ENTITY e \"&d;&d;&d;&d;&d;&d;&d;"
          "&d;&d;&d;\"><!ENTITY f \"&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;\"><!ENTITY g \"&f;&f;&f;&f;&f;"
          "&f;&f;&f;&f;&f;\">]><ListBucketResult><Contents><Key>&g;</Key></Contents>"
          "</ListBucketResult>",
          "<!DOCTYPE ListBucketResult [<!ENTITY x SYSTEM \"file:///etc/passwd\">]>"
          "<ListBucketResult><Contents><Key>&x;</Key></Contents></ListBucketResult>",
          "<!DOCTYPE ListBucketResult SYSTEM \"http://127.0.0.1:9/evil.dtd\">"
          "<ListBucketResult><Contents><Key>k</Key></Contents></ListBucketResult>",
          "<!DOCTYPE Error [<!ENTITY % p SYSTEM \"file:///etc/passwd\"> %p;]>"
          "<Error><Code>C</Code></Error>",
          NULL };
  for (size_t i = 0; dtd[i]; i++)
    {
      assert_int_equal (parse_list (dtd[i], &keys, &next, &msg), -1);
      assert_non_null (strstr (msg, "document type declaration (<!DOCTYPE>)"));
      assert_null (keys[0]);
      free (msg);
      ib_strv_free (keys);
      ib_s3_parse_error (dtd[i], strlen (dtd[i]), &code, &emsg);
      assert_null (code);
      assert_null (emsg);
    }

  /* an undeclared entity, a NUL character reference: not well-formed */
  const char *bad[] = { "<ListBucketResult><Contents><Key>&x;</Key></Contents></ListBucketResult>",
                        "<ListBucketResult><Contents><Key>a&#0;</Key></Contents>"
                        "</ListBucketResult>",
                        NULL };
  for (size_t i = 0; bad[i]; i++)
    {
      assert_int_equal (parse_list (bad[i], &keys, &next, &msg), -1);
      assert_true (ib_str_has_prefix (msg, "ListBucketResult: not well-formed XML (line 1: "));
      free (msg);
      ib_strv_free (keys);
    }

  /* truncated: the keys read so far must not pass for the whole list */
  const char *cut = "<ListBucketResult><IsTruncated>false</IsTruncated>"
                    "<Contents><Key>a</Key></Contents><Contents><Key>b</Key></Contents>"
                    "<Contents><Key>c</Ke";
  assert_int_equal (parse_list (cut, &keys, &next, &msg), -1);
  assert_true (ib_str_has_prefix (msg, "ListBucketResult: not well-formed XML (line 1: "));
  free (msg);
  ib_strv_free (keys);

  /* too large: refused before parsing */
  size_t big = (size_t) IB_S3_REPLY_MAX + 1;
  char *huge = xmalloc (big + 1);
  const char *open = "<ListBucketResult><Name>";
  memcpy (huge, open, strlen (open));
  memset (huge + strlen (open), 'a', big - strlen (open));
  huge[big] = '\0';
  assert_int_equal (parse_list (huge, &keys, &next, &msg), -1);
  assert_string_equal (msg, "the reply is larger than 16 MiB");
  free (msg);
  ib_strv_free (keys);
  ib_s3_parse_error (huge, big, &code, &emsg);
  assert_null (code);
  free (huge);

  /* nested far deeper than any reply: libxml2's depth limit */
  ib_buf_t deep = { 0 };
  ib_buf_puts (&deep, "<ListBucketResult>");
  for (int i = 0; i < 100000; i++)
    ib_buf_puts (&deep, "<a>");
  char *d = ib_buf_steal (&deep);
  assert_int_equal (parse_list (d, &keys, &next, &msg), -1);
  assert_true (ib_str_has_prefix (msg, "ListBucketResult: not well-formed XML"));
  free (msg);
  ib_strv_free (keys);
  free (d);
}

int
main (void)
{
  ib_verbosity = 0;
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown (test_list_pages, setup, teardown),
    cmocka_unit_test_setup_teardown (test_error_body, setup, teardown),
    cmocka_unit_test_setup_teardown (test_hostile, setup, teardown),
  };
  return cmocka_run_group_tests (tests, NULL, NULL);
}
