/* tests/unit/test_artifact.c — the artifact repository's pure parts
 * (builder/artifact/artifact.h, builder/artifact/s3.h): the equivalents of
 * MXNet CD's cd/utils/test_artifact_repository.py (apache/mxnet at
 * 3027296b38cc055e9748c604869b3f1aed3c4172) — commit-id precedence,
 * os-release parsing with quotes and indentation, the CUDA version from
 * real `nvcc --version` output, variant derivation, the key prefix with
 * and without subdir, path sanitising, the meta file — and our own
 * additions: OCI tags, safe relative paths, ListObjectsV2 parsing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/unit/unit.h"

#include "builder/artifact/artifact.h"
#include "builder/artifact/s3.h"
#include "common/util.h"
#include "oci/digest.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void
write_text (const char *dir, const char *name, const char *text)
{
  char *p = ib_path_join (dir, name);
  FILE *f = fopen (p, "w");
  assert_non_null (f);
  fputs (text, f);
  fclose (f);
  free (p);
}

/* ---- key prefix (test_get_s3_key_prefix, _with_subdir) ----------------- */

static void
test_key_prefix (void **state)
{
  (void) state;
  ib_artifact_id_t id = { .commit = (char *) "abc123", .libtype = (char *) "static",
                          .os = (char *) "linux", .variant = (char *) "cpu" };
  char *k = ib_artifact_key_prefix (&id, NULL);
  assert_string_equal (k, "abc123/static/linux/cpu/");
  free (k);
  k = ib_artifact_key_prefix (&id, "");
  assert_string_equal (k, "abc123/static/linux/cpu/");
  free (k);
  k = ib_artifact_key_prefix (&id, "subdir");
  assert_string_equal (k, "abc123/static/linux/cpu/subdir/");
  free (k);
}

static void
test_id_check (void **state)
{
  (void) state;
  ib_error_t err = NULL;
  ib_artifact_id_t id = { .commit = (char *) "abc123", .libtype = (char *) "dynamic",
                          .os = (char *) "ubuntu16.04", .variant = (char *) "cu100" };
  assert_int_equal (ib_artifact_id_check (&id, &err), 0);
  id.os = (char *) "be/os";
  assert_int_equal (ib_artifact_id_check (&id, &err), -1);
  assert_non_null (strstr (err->msg, "be/os"));
  assert_non_null (strstr (err->msg, "--os"));
  ib_error_free (&err);
  id.os = (char *) "ubuntu16.04";
  id.libtype = (char *) "stynamic";
  assert_int_equal (ib_artifact_id_check (&id, &err), -1);
  assert_non_null (strstr (err->msg, "stynamic"));
  ib_error_free (&err);
  id.libtype = (char *) "static";
  id.commit = NULL;
  assert_int_equal (ib_artifact_id_check (&id, &err), -1);
  assert_non_null (strstr (err->msg, "--git-sha"));
  ib_error_free (&err);
  id.commit = (char *) "..";
  assert_int_equal (ib_artifact_id_check (&id, &err), -1);
  ib_error_free (&err);
}

/* ---- commit id (test_probe_commit_id_*) -------------------------------- */

static void
test_commit_precedence (void **state)
{
  const char *dir = *state;
  char cwd[4096];
  assert_non_null (getcwd (cwd, sizeof cwd));
  ib_error_t err = NULL;
  char *c = NULL;

  setenv ("MXNET_SHA", "efgh5678", 1);
  setenv ("GIT_COMMIT", "abcd1234", 1);
  assert_int_equal (ib_artifact_probe_commit (&c, &err), 0);
  assert_string_equal (c, "efgh5678");
  free (c);

  unsetenv ("MXNET_SHA");
  assert_int_equal (ib_artifact_probe_commit (&c, &err), 0);
  assert_string_equal (c, "abcd1234");
  free (c);

  setenv ("MXNET_SHA", "", 1); /* empty counts as unset */
  assert_int_equal (ib_artifact_probe_commit (&c, &err), 0);
  assert_string_equal (c, "abcd1234");
  free (c);
  unsetenv ("MXNET_SHA");
  unsetenv ("GIT_COMMIT");

  /* neither: git rev-parse HEAD in the current directory */
  char *repo = ib_path_join (dir, "repo");
  char *cmd = xasprintf ("git init -q '%s' && cd '%s' && git -c user.name=t -c user.email=t@e "
                         "commit -q --allow-empty -m x && git rev-parse HEAD > ../head",
                         repo, repo);
  if (system (cmd) != 0)
    {
      free (cmd);
      free (repo);
      skip ();
    }
  free (cmd);
  char *head_path = ib_path_join (dir, "head");
  char *head = NULL;
  size_t len;
  assert_int_equal (ib_read_file (head_path, &head, &len, &err), 0);
  head[strcspn (head, "\n")] = '\0';
  assert_int_equal ((int) strlen (head), 40);
  assert_int_equal (chdir (repo), 0);
  assert_int_equal (ib_artifact_probe_commit (&c, &err), 0);
  assert_string_equal (c, head);
  free (c);

  /* git fails (not a repository): the error says what to do */
  assert_int_equal (chdir (dir), 0);
  setenv ("GIT_DIR", "/nonexistent/imgbuild-test", 1);
  assert_int_equal (ib_artifact_probe_commit (&c, &err), -1);
  assert_non_null (strstr (err->msg, "--git-sha"));
  ib_error_free (&err);
  unsetenv ("GIT_DIR");
  assert_int_equal (chdir (cwd), 0);
  free (head);
  free (head_path);
  free (repo);
}

/* ---- os-release (test_get_linux_os_release_properties*, test_probe_operating_system_*) */

static void
test_os_release_values (void **state)
{
  (void) state;
  /* as the tool's test writes it: indented lines, a blank first line */
  const char *text = "\n        KEY=value\n        KEY2=value2\n        KEY3=value3\n        ";
  char *v = ib_os_release_value (text, "KEY3");
  assert_string_equal (v, "value3");
  free (v);
  v = ib_os_release_value ("\n        KEY=\"value\"\n        ", "KEY");
  assert_string_equal (v, "value");
  free (v);
  v = ib_os_release_value ("KEY='single quoted'\n", "KEY");
  assert_string_equal (v, "single quoted");
  free (v);
  assert_null (ib_os_release_value ("KEY=value\n", "KEY2"));
  assert_null (ib_os_release_value ("# KEY=commented\n", "KEY"));
  /* a value with '=' keeps it; later lines win */
  v = ib_os_release_value ("A=x=y\nA=z\n", "A");
  assert_string_equal (v, "z");
  free (v);
  v = ib_os_release_value ("A=x=y\n", "A");
  assert_string_equal (v, "x=y");
  free (v);
}

/* Ubuntu 16.04's /etc/os-release (os-release(5) fields as shipped). */
static const char ubuntu1604[] = "NAME=\"Ubuntu\"\n"
                                 "VERSION=\"16.04.7 LTS (Xenial Xerus)\"\n"
                                 "ID=ubuntu\n"
                                 "ID_LIKE=debian\n"
                                 "PRETTY_NAME=\"Ubuntu 16.04.7 LTS\"\n"
                                 "VERSION_ID=\"16.04\"\n"
                                 "HOME_URL=\"http://www.ubuntu.com/\"\n"
                                 "VERSION_CODENAME=xenial\n"
                                 "UBUNTU_CODENAME=xenial\n";
/* CentOS 7's. */
static const char centos7[] = "NAME=\"CentOS Linux\"\n"
                              "VERSION=\"7 (Core)\"\n"
                              "ID=\"centos\"\n"
                              "ID_LIKE=\"rhel fedora\"\n"
                              "VERSION_ID=\"7\"\n"
                              "PRETTY_NAME=\"CentOS Linux 7 (Core)\"\n"
                              "ANSI_COLOR=\"0;31\"\n"
                              "CPE_NAME=\"cpe:/o:centos:centos:7\"\n";

static void
test_probe_os (void **state)
{
  const char *dir = *state;
  ib_error_t err = NULL;
  char *os = NULL;
  write_text (dir, "ubuntu", ubuntu1604);
  write_text (dir, "centos", centos7);
  write_text (dir, "noid", "NAME=x\nVERSION_ID=1\n");
  write_text (dir, "rolling", "  ID=arch\n  NAME=\"Arch Linux\"\n");
  char *u = ib_path_join (dir, "ubuntu"), *c = ib_path_join (dir, "centos"),
       *n = ib_path_join (dir, "noid"), *r = ib_path_join (dir, "rolling"),
       *m = ib_path_join (dir, "missing");

  assert_int_equal (ib_artifact_probe_os ("linux", u, &os, &err), 0);
  assert_string_equal (os, "ubuntu16.04");
  free (os);
  /* sys.platform can say linux2 */
  assert_int_equal (ib_artifact_probe_os ("linux2", u, &os, &err), 0);
  assert_string_equal (os, "ubuntu16.04");
  free (os);
  assert_int_equal (ib_artifact_probe_os ("linux", c, &os, &err), 0);
  assert_string_equal (os, "centos7");
  free (os);
  assert_int_equal (ib_artifact_probe_os ("linux", r, &os, &err), 0);
  assert_string_equal (os, "arch");
  free (os);
  assert_int_equal (ib_artifact_probe_os ("win32", m, &os, &err), 0);
  assert_string_equal (os, "win32");
  free (os);
  assert_int_equal (ib_artifact_probe_os ("darwin", m, &os, &err), 0);
  assert_string_equal (os, "darwin");
  free (os);

  assert_int_equal (ib_artifact_probe_os ("linux", m, &os, &err), -1);
  assert_non_null (strstr (err->msg, "--os"));
  ib_error_free (&err);
  assert_int_equal (ib_artifact_probe_os ("linux", n, &os, &err), -1);
  assert_non_null (strstr (err->msg, "no ID"));
  ib_error_free (&err);
  free (u), free (c), free (n), free (r), free (m);
}

/* ---- CUDA version (test_get_cuda_version*) ----------------------------- */

/* Real `nvcc --version` outputs of CUDA 8.0, 10.0 and 11.8. */
static const char nvcc80[] = "nvcc: NVIDIA (R) Cuda compiler driver\n"
                             "Copyright (c) 2005-2016 NVIDIA Corporation\n"
                             "Built on Sun_Sep__4_22:14:01_CDT_2016\n"
                             "Cuda compilation tools, release 8.0, V8.0.44\n";
static const char nvcc100[] = "nvcc: NVIDIA (R) Cuda compiler driver\n"
                              "Copyright (c) 2005-2018 NVIDIA Corporation\n"
                              "Built on Sat_Aug_25_21:08:01_CDT_2018\n"
                              "Cuda compilation tools, release 10.0, V10.0.130\n";
static const char nvcc118[] = "nvcc: NVIDIA (R) Cuda compiler driver\n"
                              "Copyright (c) 2005-2022 NVIDIA Corporation\n"
                              "Built on Wed_Sep_21_10:33:58_PDT_2022\n"
                              "Cuda compilation tools, release 11.8, V11.8.89\n"
                              "Build cuda_11.8.r11.8/compiler.31833905_0\n";

static void
test_nvcc_version (void **state)
{
  (void) state;
  ib_error_t err = NULL;
  char *v = NULL;
  assert_int_equal (ib_artifact_parse_nvcc (nvcc100, &v, &err), 0);
  assert_string_equal (v, "100");
  free (v);
  assert_int_equal (ib_artifact_parse_nvcc (nvcc80, &v, &err), 0);
  assert_string_equal (v, "80");
  free (v);
  assert_int_equal (ib_artifact_parse_nvcc (nvcc118, &v, &err), 0);
  assert_string_equal (v, "118");
  free (v);
  /* the lines the tool's test feeds it */
  assert_int_equal (
      ib_artifact_parse_nvcc ("Cuda compilation tools, release 9.2, V9.2.148", &v, &err), 0);
  assert_string_equal (v, "92");
  free (v);
  assert_int_equal (ib_artifact_parse_nvcc ("nvcc: command not found\n", &v, &err), -1);
  assert_non_null (strstr (err->msg, "--variant"));
  ib_error_free (&err);
  assert_int_equal (ib_artifact_parse_nvcc ("release notes\n", &v, &err), -1);
  ib_error_free (&err);
}

/* ---- variant (test_probe_variant_*) ------------------------------------ */

static void
test_variant_from_features (void **state)
{
  (void) state;
  ib_error_t err = NULL;
  char *v = NULL;
  ib_lib_feature_t cuda_dnn[] = { { (char *) "CUDA", true }, { (char *) "ONEDNN", true } };
  ib_lib_feature_t cuda_only[] = { { (char *) "CUDA", true }, { (char *) "ONEDNN", false } };
  ib_lib_feature_t dnn[] = { { (char *) "CUDA", false }, { (char *) "ONEDNN", true } };
  ib_lib_feature_t mkldnn[] = { { (char *) "CUDA", false }, { (char *) "MKLDNN", true } };
  ib_lib_feature_t none[] = { { (char *) "CUDA", false }, { (char *) "ONEDNN", false },
                              { (char *) "OPENMP", true } };

  assert_int_equal (ib_artifact_variant_from_features (cuda_dnn, 2, nvcc100, &v, &err), 0);
  assert_string_equal (v, "cu100");
  free (v);
  assert_int_equal (ib_artifact_variant_from_features (cuda_only, 2, nvcc118, &v, &err), 0);
  assert_string_equal (v, "cu118");
  free (v);
  /* CUDA on but no nvcc, or nvcc without a version: an error, not a guess */
  assert_int_equal (ib_artifact_variant_from_features (cuda_dnn, 2, NULL, &v, &err), -1);
  assert_non_null (strstr (err->msg, "--variant"));
  ib_error_free (&err);
  assert_int_equal (ib_artifact_variant_from_features (cuda_dnn, 2, "garbage", &v, &err), -1);
  ib_error_free (&err);

  assert_int_equal (ib_artifact_variant_from_features (dnn, 2, nvcc100, &v, &err), 0);
  assert_string_equal (v, "cpu");
  free (v);
  assert_int_equal (ib_artifact_variant_from_features (mkldnn, 2, NULL, &v, &err), 0);
  assert_string_equal (v, "cpu");
  free (v);
  assert_int_equal (ib_artifact_variant_from_features (none, 3, NULL, &v, &err), 0);
  assert_string_equal (v, "native");
  free (v);
  assert_int_equal (ib_artifact_variant_from_features (NULL, 0, NULL, &v, &err), 0);
  assert_string_equal (v, "native");
  free (v);
}

static void
test_lib_features_errors (void **state)
{
  const char *dir = *state;
  ib_error_t err = NULL;
  ib_lib_feature_t *f = NULL;
  size_t n = 0;
  write_text (dir, "not-a-library.so", "just text\n");
  char *p = ib_path_join (dir, "not-a-library.so");
  assert_int_equal (ib_artifact_lib_features (p, &f, &n, &err), -1);
  assert_non_null (strstr (err->msg, p));
  assert_non_null (strstr (err->msg, "--variant"));
  ib_error_free (&err);
  free (p);
  /* libc has no MXLibInfoFeatures */
  assert_int_equal (ib_artifact_lib_features ("libc.so.6", &f, &n, &err), -1);
  ib_error_free (&err);
}

/* ---- licenses and dependencies (test_sanitize_path_array_*, test_is_file_*) */

static void
test_expand_paths (void **state)
{
  const char *dir = *state;
  ib_error_t err = NULL;
  char **out = NULL;

  /* blanks only: nothing */
  char *blanks[] = { (char *) " ", (char *) "\t", (char *) "     \n", NULL };
  assert_int_equal (ib_artifact_expand_paths (blanks, "license", &out, &err), 0);
  assert_null (out[0]);
  ib_strv_free (out);
  assert_int_equal (ib_artifact_expand_paths (NULL, "license", &out, &err), 0);
  assert_null (out[0]);
  ib_strv_free (out);

  char *d1 = ib_path_join (dir, "dir1"), *d2 = ib_path_join (dir, "dir2");
  assert_int_equal (mkdir (d1, 0755), 0);
  assert_int_equal (mkdir (d2, 0755), 0);
  write_text (dir, "file", "x");
  write_text (dir, "LICENSE.b", "b");
  write_text (dir, "LICENSE.a", "a");
  char *f = ib_path_join (dir, "file");
  /* directories dropped, surrounding blanks stripped */
  char *spaced = xasprintf ("  %s \n", f);
  char *mixed[] = { d1, spaced, d2, NULL };
  assert_int_equal (ib_artifact_expand_paths (mixed, "license", &out, &err), 0);
  assert_non_null (out[0]);
  assert_string_equal (out[0], f);
  assert_null (out[1]);
  ib_strv_free (out);

  /* globbed, sorted */
  char *pat = ib_path_join (dir, "LICENSE.*");
  char *globbed[] = { pat, NULL };
  assert_int_equal (ib_artifact_expand_paths (globbed, "license", &out, &err), 0);
  assert_int_equal ((int) ib_strv_len (out), 2);
  assert_true (ib_str_has_suffix (out[0], "/LICENSE.a"));
  assert_true (ib_str_has_suffix (out[1], "/LICENSE.b"));
  ib_strv_free (out);

  /* a missing file is named in the error */
  char *missing = ib_path_join (dir, "NOTICE");
  char *with_missing[] = { f, missing, NULL };
  assert_int_equal (ib_artifact_expand_paths (with_missing, "license", &out, &err), -1);
  assert_int_equal (err->status, ENOENT);
  assert_non_null (strstr (err->msg, missing));
  assert_non_null (strstr (err->msg, "not found"));
  ib_error_free (&err);

  /* the same name twice would be one key */
  char *d1file = ib_path_join (d1, "file");
  write_text (d1, "file", "other");
  char *clash[] = { f, d1file, NULL };
  assert_int_equal (ib_artifact_expand_paths (clash, "dependency", &out, &err), -1);
  assert_non_null (strstr (err->msg, "same name"));
  ib_error_free (&err);
  /* ... but the same file twice is just one */
  char *twice[] = { f, f, NULL };
  assert_int_equal (ib_artifact_expand_paths (twice, "dependency", &out, &err), 0);
  assert_int_equal ((int) ib_strv_len (out), 1);
  ib_strv_free (out);

  free (d1), free (d2), free (f), free (spaced), free (pat), free (missing), free (d1file);
}

/* ---- meta (test_write_libmxnet_meta) ------------------------------------ */

static void
test_meta (void **state)
{
  (void) state;
  ib_artifact_id_t id = { .commit = (char *) "abcd1234", .libtype = (char *) "stynamic",
                          .os = (char *) "lunix", .variant = (char *) "gpu" };
  char *t = ib_artifact_meta_text (&id);
  assert_string_equal (t, "commit_id: abcd1234\ndependency_linking: stynamic\nos: lunix\n"
                          "variant: gpu\n");
  free (t);
  /* values YAML would read as something else are quoted */
  id.commit = (char *) "1234";
  id.os = (char *) "it's";
  id.variant = (char *) "yes";
  t = ib_artifact_meta_text (&id);
  assert_string_equal (t, "commit_id: '1234'\ndependency_linking: stynamic\nos: 'it''s'\n"
                          "variant: 'yes'\n");
  free (t);
  id.commit = (char *) "22b51361f51204ec29f171c5a8c7c84168752250";
  id.os = (char *) "ubuntu16.04";
  id.variant = (char *) "16.04";
  t = ib_artifact_meta_text (&id);
  assert_string_equal (t, "commit_id: 22b51361f51204ec29f171c5a8c7c84168752250\n"
                          "dependency_linking: stynamic\nos: ubuntu16.04\nvariant: '16.04'\n");
  free (t);

  const char *names[][2] = { { "libmxnet.so", "libmxnet.meta" },
                             { "libmxnet.so.1.9.1", "libmxnet.meta" },
                             { "libmxnet.a", "libmxnet.meta" },
                             { "libmxnet.dylib", "libmxnet.meta" },
                             { "mxnet.dll", "mxnet.meta" },
                             { "mxnet", "mxnet.meta" },
                             { "libsolver.solution", "libsolver.solution.meta" } };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    {
      char *m = ib_artifact_meta_name (names[i][0]);
      assert_string_equal (m, names[i][1]);
      free (m);
    }
}

/* ---- OCI tags and relative paths --------------------------------------- */

static bool
valid_tag (const char *t)
{
  size_t n = strlen (t);
  if (n == 0 || n > 128 || !(isalnum ((unsigned char) t[0]) || t[0] == '_'))
    return false;
  for (size_t i = 0; i < n; i++)
    if (!(isalnum ((unsigned char) t[i]) || t[i] == '_' || t[i] == '.' || t[i] == '-'))
      return false;
  return true;
}

static void
test_oci_tag (void **state)
{
  (void) state;
  char *t = ib_artifact_oci_tag ("abc123/static/ubuntu16.04/cu100/");
  assert_string_equal (t, "abc123_static_ubuntu16.04_cu100");
  free (t);
  /* '_' in a component would make the readable form ambiguous: hashed */
  const char *odd[] = { "abc_1/static/linux/cpu/", "a/static/linux/cpu/",
                        "Abc/static/linux+gnu/cpu/", "-x/static/linux/cpu/", NULL };
  for (size_t i = 0; odd[i]; i++)
    {
      t = ib_artifact_oci_tag (odd[i]);
      assert_true (valid_tag (t));
      if (i == 1)
        {
          assert_string_equal (t, "a_static_linux_cpu");
          free (t);
          continue;
        }
      char d[IB_DIGEST_LEN];
      ib_digest_buf (odd[i], strlen (odd[i]), d);
      char *want = xasprintf ("sha256_%s", d + 7);
      assert_string_equal (t, want);
      free (want);
      free (t);
    }
  /* too long for a tag */
  char key[300];
  memset (key, 'a', 200);
  strcpy (key + 200, "/static/linux/cpu/");
  t = ib_artifact_oci_tag (key);
  assert_true (valid_tag (t));
  assert_true (ib_str_has_prefix (t, "sha256_"));
  free (t);
  /* two different keys never share a tag */
  char *t1 = ib_artifact_oci_tag ("a_b/static/linux/cpu/");
  char *t2 = ib_artifact_oci_tag ("a/b_static/linux/cpu/");
  assert_string_not_equal (t1, t2);
  free (t1);
  free (t2);
}

static void
test_rel_path_ok (void **state)
{
  (void) state;
  const char *good[] = { "libmxnet.so", "licenses/LICENSE", "another/sub/dir/f.txt", "..x",
                         NULL };
  const char *bad[] = { "", "/etc/passwd", "../x", "a/../../x", "a//b", "a/./b", "a/",
                        "a/\nb", ".", NULL };
  for (size_t i = 0; good[i]; i++)
    assert_true (ib_artifact_rel_path_ok (good[i]));
  for (size_t i = 0; bad[i]; i++)
    assert_false (ib_artifact_rel_path_ok (bad[i]));
  assert_false (ib_artifact_rel_path_ok (NULL));
}

/* ---- S3 (test_try_s3_download_*) --------------------------------------- */

static void
test_s3_parse_list (void **state)
{
  (void) state;
  ib_error_t err = NULL;
  char **keys = xmalloc (sizeof (char *));
  char *next = NULL;
  const char *page1
      = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
        "<Name>bucket</Name><Prefix>some/key/prefix</Prefix><KeyCount>3</KeyCount>"
        "<MaxKeys>3</MaxKeys><IsTruncated>true</IsTruncated>"
        "<Contents><Key>some/key/prefix/file.txt</Key><Size>3</Size></Contents>"
        "<Contents><Key>some/key/prefix/subdir/other &amp; more.txt</Key></Contents>"
        "<Contents><Key>some/key/prefix/another/sub/dir/f&#233;.txt</Key></Contents>"
        "<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>"
        "</ListBucketResult>";
  assert_int_equal (ib_s3_parse_list (page1, &keys, &next, &err), 0);
  assert_int_equal ((int) ib_strv_len (keys), 3);
  assert_string_equal (keys[0], "some/key/prefix/file.txt");
  assert_string_equal (keys[1], "some/key/prefix/subdir/other & more.txt");
  assert_string_equal (keys[2], "some/key/prefix/another/sub/dir/f\xc3\xa9.txt");
  assert_string_equal (next, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
  free (next);
  /* the last page: not truncated */
  assert_int_equal (ib_s3_parse_list ("<ListBucketResult><KeyCount>1</KeyCount>"
                                      "<IsTruncated>false</IsTruncated><Contents><Key>k</Key>"
                                      "</Contents></ListBucketResult>",
                                      &keys, &next, &err),
                    0);
  assert_null (next);
  assert_int_equal ((int) ib_strv_len (keys), 4);
  ib_strv_free (keys);

  /* no keys (test_try_s3_download_returns_false_on_no_keys) */
  keys = xmalloc (sizeof (char *));
  assert_int_equal (ib_s3_parse_list ("<ListBucketResult><KeyCount>0</KeyCount>"
                                      "<IsTruncated>false</IsTruncated></ListBucketResult>",
                                      &keys, &next, &err),
                    0);
  assert_null (keys[0]);
  /* a bad response (test_try_s3_download_fails_on_bad_response) */
  assert_int_equal (ib_s3_parse_list ("{\"something\": \"not quite right\"}", &keys, &next, &err),
                    -1);
  ib_error_free (&err);
  assert_int_equal (ib_s3_parse_list ("<ListBucketResult><Contents><Size>1</Size></Contents>"
                                      "</ListBucketResult>",
                                      &keys, &next, &err),
                    -1);
  ib_error_free (&err);
  assert_int_equal (ib_s3_parse_list ("<ListBucketResult><IsTruncated>true</IsTruncated>"
                                      "</ListBucketResult>",
                                      &keys, &next, &err),
                    -1);
  ib_error_free (&err);
  ib_strv_free (keys);
}

static void
test_s3_uri_encode (void **state)
{
  (void) state;
  char *e = ib_s3_uri_encode ("abc/static/ubuntu16.04/cu100/libmxnet.so", 1);
  assert_string_equal (e, "abc/static/ubuntu16.04/cu100/libmxnet.so");
  free (e);
  e = ib_s3_uri_encode ("a b/c+d~e=f&\xc3\xa9", 1);
  assert_string_equal (e, "a%20b/c%2Bd~e%3Df%26%C3%A9");
  free (e);
  e = ib_s3_uri_encode ("a/b", 0);
  assert_string_equal (e, "a%2Fb");
  free (e);
}

int
main (void)
{
  ib_verbosity = 0;
  const struct CMUnitTest tests[] = {
    cmocka_unit_test (test_key_prefix),
    cmocka_unit_test (test_id_check),
    unit_test_in_tmpdir (test_commit_precedence),
    cmocka_unit_test (test_os_release_values),
    unit_test_in_tmpdir (test_probe_os),
    cmocka_unit_test (test_nvcc_version),
    cmocka_unit_test (test_variant_from_features),
    unit_test_in_tmpdir (test_lib_features_errors),
    unit_test_in_tmpdir (test_expand_paths),
    cmocka_unit_test (test_meta),
    cmocka_unit_test (test_oci_tag),
    cmocka_unit_test (test_rel_path_ok),
    cmocka_unit_test (test_s3_parse_list),
    cmocka_unit_test (test_s3_uri_encode),
  };
  return cmocka_run_group_tests (tests, NULL, NULL);
}
