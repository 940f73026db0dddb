/* tests/unit/test_cache.c — the build cache (builder/engine/cache.h): what the
 * content hash of copied files sees and ignores, keys, and records. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/unit/unit.h"

#include "builder/engine/cache.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

static void
put (const char *dir, const char *name, const char *text, mode_t mode)
{
  cleanup_free char *p = ib_path_join (dir, name);
  FILE *f = fopen (p, "w");
  assert_non_null (f);
  fputs (text, f);
  fclose (f);
  assert_int_equal (chmod (p, mode), 0);
}

/* The content hash of `path` as a digest string. */
static void
hash (const char *path, char out[IB_DIGEST_LEN], size_t *entries)
{
  ib_sha256_t *h = ib_sha256_new ();
  ib_error_t err = NULL;
  size_t n = 0;
  assert_int_equal (ib_cache_hash_path (path, h, &n, &err), 0);
  assert_null (err);
  ib_sha256_final (h, out);
  if (entries)
    *entries = n;
}

static void
test_hash_sees_content_mode_names_links (void **state)
{
  const char *dir = *state;
  cleanup_free char *src = ib_path_join (dir, "src");
  cleanup_free char *sub = ib_path_join (src, "sub");
  assert_int_equal (mkdir (src, 0755), 0);
  assert_int_equal (mkdir (sub, 0755), 0);
  put (src, "a.txt", "alpha\n", 0644);
  put (sub, "b.txt", "beta\n", 0644);
  cleanup_free char *link = ib_path_join (src, "l");
  assert_int_equal (symlink ("a.txt", link), 0);

  char h0[IB_DIGEST_LEN], h1[IB_DIGEST_LEN];
  size_t n = 0;
  hash (src, h0, &n);
  assert_int_equal (n, 5); /* src, a.txt, l, sub, sub/b.txt */

  /* same tree again: same hash */
  hash (src, h1, NULL);
  assert_string_equal (h0, h1);

  /* content */
  put (sub, "b.txt", "BETA\n", 0644);
  hash (src, h1, NULL);
  assert_string_not_equal (h0, h1);
  put (sub, "b.txt", "beta\n", 0644);
  hash (src, h1, NULL);
  assert_string_equal (h0, h1);

  /* mode */
  cleanup_free char *a = ib_path_join (src, "a.txt");
  assert_int_equal (chmod (a, 0755), 0);
  hash (src, h1, NULL);
  assert_string_not_equal (h0, h1);
  assert_int_equal (chmod (a, 0644), 0);

  /* link target */
  assert_int_equal (unlink (link), 0);
  assert_int_equal (symlink ("sub/b.txt", link), 0);
  hash (src, h1, NULL);
  assert_string_not_equal (h0, h1);
  assert_int_equal (unlink (link), 0);
  assert_int_equal (symlink ("a.txt", link), 0);
  hash (src, h1, NULL);
  assert_string_equal (h0, h1);

  /* a rename with the same bytes is another tree */
  cleanup_free char *b = ib_path_join (sub, "b.txt");
  cleanup_free char *c = ib_path_join (sub, "c.txt");
  assert_int_equal (rename (b, c), 0);
  hash (src, h1, NULL);
  assert_string_not_equal (h0, h1);
  assert_int_equal (rename (c, b), 0);

  /* an empty file added */
  put (src, "empty", "", 0644);
  hash (src, h1, NULL);
  assert_string_not_equal (h0, h1);
  cleanup_free char *e = ib_path_join (src, "empty");
  assert_int_equal (unlink (e), 0);

  /* times are not hashed (BuildKit's rule: touching a file keeps the cache) */
  struct timeval tv[2] = { { 1000000000, 0 }, { 1000000000, 0 } };
  assert_int_equal (utimes (a, tv), 0);
  assert_int_equal (utimes (sub, tv), 0);
  hash (src, h1, NULL);
  assert_string_equal (h0, h1);
}

/* Hard links: a tree whose files are hard-linked to each other hashes
 * otherwise than the same bytes as separate files (COPY keeps the links);
 * a link to a file outside the tree changes nothing (trees without links
 * inside hash as they always did). */
static void
test_hash_sees_hard_links (void **state)
{
  const char *dir = *state;
  cleanup_free char *src = ib_path_join (dir, "src");
  cleanup_free char *a = ib_path_join (src, "a");
  cleanup_free char *b = ib_path_join (src, "b");
  cleanup_free char *outside = ib_path_join (dir, "outside");
  assert_int_equal (mkdir (src, 0755), 0);
  put (src, "a", "same\n", 0644);
  put (src, "b", "same\n", 0644);
  char copies[IB_DIGEST_LEN], linked[IB_DIGEST_LEN], h[IB_DIGEST_LEN];
  hash (src, copies, NULL);

  /* b a second name of a */
  assert_int_equal (unlink (b), 0);
  assert_int_equal (link (a, b), 0);
  hash (src, linked, NULL);
  assert_string_not_equal (copies, linked);
  hash (src, h, NULL);
  assert_string_equal (linked, h);

  /* b a copy again, a linked from outside the tree: as the copies */
  assert_int_equal (unlink (b), 0);
  put (src, "b", "same\n", 0644);
  assert_int_equal (link (a, outside), 0);
  hash (src, h, NULL);
  assert_string_equal (copies, h);
}

static void
test_hash_file_vs_dir_and_errors (void **state)
{
  const char *dir = *state;
  put (dir, "f", "x", 0644);
  cleanup_free char *f = ib_path_join (dir, "f");
  char h0[IB_DIGEST_LEN], h1[IB_DIGEST_LEN];
  hash (f, h0, NULL);
  /* the same bytes under another top-level name hash the same: the top
   * path is the caller's (it keys the path itself) */
  put (dir, "g", "x", 0644);
  cleanup_free char *g = ib_path_join (dir, "g");
  hash (g, h1, NULL);
  assert_string_equal (h0, h1);

  /* missing path: an error naming it */
  cleanup_free char *missing = ib_path_join (dir, "nope");
  ib_sha256_t *h = ib_sha256_new ();
  ib_error_t err = NULL;
  assert_int_equal (ib_cache_hash_path (missing, h, NULL, &err), -1);
  assert_non_null (err);
  assert_non_null (strstr (err->msg, "nope"));
  assert_int_equal (err->status, ENOENT);
  ib_error_free (&err);
  ib_sha256_free (h);

  /* unreadable file (as non-root): error, not a silent hash */
  if (geteuid () != 0)
    {
      assert_int_equal (chmod (g, 0), 0);
      h = ib_sha256_new ();
      assert_int_equal (ib_cache_hash_path (g, h, NULL, &err), -1);
      assert_int_equal (err->status, EACCES);
      ib_error_free (&err);
      ib_sha256_free (h);
    }
}

static void
test_key_depends_on_parent_and_text (void **state)
{
  (void) state;
  char k1[IB_DIGEST_LEN], k2[IB_DIGEST_LEN], k3[IB_DIGEST_LEN], k4[IB_DIGEST_LEN];
  ib_cache_key ("sha256:aa", "RUN x", k1);
  ib_cache_key ("sha256:aa", "RUN x", k2);
  assert_string_equal (k1, k2);
  ib_cache_key ("sha256:ab", "RUN x", k3);
  assert_string_not_equal (k1, k3);
  ib_cache_key ("sha256:aa", "RUN y", k3);
  assert_string_not_equal (k1, k3);
  /* the parent/text boundary is not ambiguous */
  ib_cache_key ("sha256:a", "aRUN x", k4);
  assert_string_not_equal (k1, k4);
  assert_true (ib_digest_valid (k1));
}

static ib_store_t *
open_store (const char *dir)
{
  ib_store_t *s = NULL;
  ib_error_t err = NULL;
  cleanup_free char *root = ib_path_join (dir, "store");
  assert_int_equal (ib_store_open (root, &s, &err), 0);
  return s;
}

static void
test_record_roundtrip_and_misses (void **state)
{
  ib_store_t *s = open_store (*state);
  ib_error_t err = NULL;
  char layer[IB_DIGEST_LEN];
  assert_int_equal (ib_store_put_blob (s, "layer-bytes", 11, layer, &err), 0);
  ib_descriptor_t l = { .media_type = (char *) IB_MT_OCI_LAYER_GZIP, .size = 11 };
  memcpy (l.digest, layer, IB_DIGEST_LEN);
  json_t *config = json_pack ("{s:s, s:{s:[s]}}", "architecture", "amd64", "config", "Env",
                              "A=1");
  char key[IB_DIGEST_LEN];
  ib_cache_key (NULL, "step", key);

  json_t *c = NULL;
  ib_descriptor_t *ls = NULL;
  size_t n = 99;
  assert_int_equal (ib_cache_get (s, key, &c, &ls, &n), 0); /* nothing recorded */
  assert_null (c);
  assert_int_equal (n, 0);

  assert_int_equal (ib_cache_put (s, key, config, &l, 1, &err), 0);
  assert_int_equal (ib_cache_get (s, key, &c, &ls, &n), 1);
  assert_int_equal (n, 1);
  assert_string_equal (ls[0].digest, layer);
  assert_string_equal (ls[0].media_type, IB_MT_OCI_LAYER_GZIP);
  assert_int_equal (ls[0].size, 11);
  assert_true (json_equal (c, config));
  json_decref (c);
  free (ls[0].media_type);
  free (ls);

  /* the record is a whole file named by the key */
  cleanup_free char *path = xasprintf ("%s/cache/steps/%s.json", s->root, ib_digest_hex (key));
  struct stat sb;
  assert_int_equal (stat (path, &sb), 0);

  /* a pruned layer blob makes the record a miss */
  cleanup_free char *blob = ib_store_blob_path (s, layer);
  assert_int_equal (unlink (blob), 0);
  assert_int_equal (ib_cache_get (s, key, &c, &ls, &n), 0);
  assert_int_equal (ib_store_put_blob (s, "layer-bytes", 11, layer, &err), 0);
  assert_int_equal (ib_cache_get (s, key, &c, &ls, &n), 1);
  json_decref (c);
  free (ls[0].media_type);
  free (ls);

  /* a damaged record (truncated by a crash without fsync) is a miss */
  assert_int_equal (truncate (path, 10), 0);
  assert_int_equal (ib_cache_get (s, key, &c, &ls, &n), 0);
  assert_null (c);
  /* ... and so is one of another format version */
  FILE *f = fopen (path, "w");
  fputs ("{\"v\":2,\"config\":{},\"layers\":[]}", f);
  fclose (f);
  assert_int_equal (ib_cache_get (s, key, &c, &ls, &n), 0);

  json_decref (config);
  ib_store_close (s);
}

static void
hash_memo (const char *path, ib_cache_memo_t *memo, char out[IB_DIGEST_LEN])
{
  ib_sha256_t *h = ib_sha256_new ();
  ib_error_t err = NULL;
  assert_int_equal (ib_cache_hash_path_memo (path, memo, NULL, h, NULL, &err), 0);
  ib_sha256_final (h, out);
}

static void
test_memo_same_digests_and_sees_changes (void **state)
{
  const char *dir = *state;
  ib_store_t *s = open_store (dir);
  cleanup_free char *src = ib_path_join (dir, "src");
  assert_int_equal (mkdir (src, 0755), 0);
  put (src, "old", "written long ago\n", 0644);
  put (src, "new", "written just now\n", 0644);
  /* "old" has a ctime in the past only if we wait; the memo refuses
   * files changed in the last 2 s, so check both kinds */
  char plain[IB_DIGEST_LEN], m1[IB_DIGEST_LEN], m2[IB_DIGEST_LEN];
  hash (src, plain, NULL);
  ib_cache_memo_t *memo = ib_cache_memo_open (s);
  hash_memo (src, memo, m1);
  assert_string_equal (plain, m1);
  ib_cache_memo_close (memo);
  /* nothing memoized yet: both files are too fresh */
  cleanup_free char *mf = xasprintf ("%s/cache/filehash.bin", s->root);
  struct stat sb;
  assert_true (stat (mf, &sb) < 0 || sb.st_size == 0);

  sleep (3);
  memo = ib_cache_memo_open (s);
  hash_memo (src, memo, m1);
  ib_cache_memo_close (memo);
  assert_string_equal (plain, m1);
  assert_int_equal (stat (mf, &sb), 0);
  assert_int_equal (sb.st_size, 2 * 72); /* one record per file */

  /* from the memo: the same digest */
  memo = ib_cache_memo_open (s);
  hash_memo (src, memo, m2);
  ib_cache_memo_close (memo);
  assert_string_equal (m1, m2);

  /* same size, mtime put back: ctime still changes, so it is seen */
  cleanup_free char *oldp = ib_path_join (src, "old");
  struct stat before;
  assert_int_equal (stat (oldp, &before), 0);
  put (src, "old", "WRITTEN LONG AGO\n", 0644);
  struct timespec ts[2] = { before.st_atim, before.st_mtim };
  assert_int_equal (utimensat (AT_FDCWD, oldp, ts, 0), 0);
  memo = ib_cache_memo_open (s);
  hash_memo (src, memo, m2);
  ib_cache_memo_close (memo);
  assert_string_not_equal (m1, m2);
  char plain2[IB_DIGEST_LEN];
  hash (src, plain2, NULL);
  assert_string_equal (plain2, m2);

  /* a damaged memo record is ignored, never trusted */
  FILE *f = fopen (mf, "r+");
  fseek (f, 40, SEEK_SET);
  fputc ('X', f);
  fclose (f);
  memo = ib_cache_memo_open (s);
  hash_memo (src, memo, m2);
  ib_cache_memo_close (memo);
  assert_string_equal (plain2, m2);
  ib_store_close (s);
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    unit_test_in_tmpdir (test_hash_sees_content_mode_names_links),
    unit_test_in_tmpdir (test_hash_sees_hard_links),
    unit_test_in_tmpdir (test_hash_file_vs_dir_and_errors),
    cmocka_unit_test (test_key_depends_on_parent_and_text),
    unit_test_in_tmpdir (test_record_roundtrip_and_misses),
    unit_test_in_tmpdir (test_memo_same_digests_and_sees_changes),
  };
  return cmocka_run_group_tests (tests, NULL, NULL);
}
