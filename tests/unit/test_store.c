/* tests/unit/test_store.c — the content store (oci/store.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/unit/unit.h"

#include "builder/engine/prune.h"
#include "common/util.h"
#include "oci/manifest.h"
#include "oci/store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define HELLO_DIGEST "sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"

static ib_store_t *
open_store (const char *dir)
{
  ib_store_t *s = NULL;
  ib_error_t err = NULL;
  cleanup_free char *root = ib_path_join (dir, "store");
  if (ib_store_open (root, &s, &err) < 0)
    fail_msg ("%s", err->msg);
  return s;
}

static char *
slurp (const char *root, const char *name)
{
  cleanup_free char *p = ib_path_join (root, name);
  char *data = NULL;
  ib_error_t err = NULL;
  if (ib_read_file (p, &data, NULL, &err) < 0)
    fail_msg ("%s", err->msg);
  return data;
}

static size_t
count_entries (const char *path)
{
  DIR *d = opendir (path);
  assert_non_null (d);
  size_t n = 0;
  struct dirent *de;
  while ((de = readdir (d)))
    if (strcmp (de->d_name, ".") && strcmp (de->d_name, ".."))
      n++;
  closedir (d);
  return n;
}

static void
test_open (void **state)
{
  ib_store_t *s = open_store (*state);
  assert_true (s->root[0] == '/');
  char *layout = slurp (s->root, "oci-layout");
  assert_string_equal (layout, "{\"imageLayoutVersion\":\"1.0.0\"}");
  free (layout);
  char *index = slurp (s->root, "index.json");
  json_t *j = json_loads (index, 0, NULL);
  assert_non_null (j);
  assert_int_equal (json_integer_value (json_object_get (j, "schemaVersion")), 2);
  assert_true (json_is_array (json_object_get (j, "manifests")));
  json_decref (j);
  free (index);
  static const char *dirs[] = { "blobs/sha256", "snapshots", "cache", "tmp" };
  for (size_t i = 0; i < 4; i++)
    {
      cleanup_free char *p = ib_path_join (s->root, dirs[i]);
      struct stat st;
      assert_int_equal (stat (p, &st), 0);
      assert_true (S_ISDIR (st.st_mode));
    }
  cleanup_free char *lock = ib_path_join (s->root, "lock");
  assert_int_equal (access (lock, F_OK), 0);
  ib_store_close (s);

  /* opening again keeps what is there */
  s = open_store (*state);
  ib_error_t err = NULL;
  assert_int_equal (ib_store_tag (s, "docker.io/library/x:1", IB_MT_OCI_MANIFEST, HELLO_DIGEST, 5, &err), 0);
  ib_store_close (s);
  s = open_store (*state);
  json_t *ms = NULL;
  assert_int_equal (ib_store_list (s, &ms, &err), 0);
  assert_int_equal (json_array_size (ms), 1);
  json_decref (ms);
  ib_store_close (s);

  /* not a layout */
  cleanup_free char *bad = ib_path_join (*state, "bad");
  assert_int_equal (ib_mkdir_p (bad, 0755, &err), 0);
  cleanup_free char *bl = ib_path_join (bad, "oci-layout");
  assert_int_equal (ib_write_file_atomic (bl, "{\"imageLayoutVersion\":\"9\"}", 26, 0644, &err), 0);
  assert_int_equal (ib_store_open (bad, &s, &err), -1);
  assert_null (s);
  assert_non_null (strstr (err->msg, "not an OCI image layout"));
  ib_error_free (&err);
}

static void
test_blobs (void **state)
{
  ib_store_t *s = open_store (*state);
  ib_error_t err = NULL;
  char d[IB_DIGEST_LEN];
  assert_false (ib_store_has_blob (s, HELLO_DIGEST));
  assert_int_equal (ib_store_put_blob (s, "hello", 5, d, &err), 0);
  assert_string_equal (d, HELLO_DIGEST);
  assert_true (ib_store_has_blob (s, HELLO_DIGEST));
  cleanup_free char *p = ib_store_blob_path (s, HELLO_DIGEST);
  cleanup_free char *want = xasprintf ("%s/blobs/sha256/%s", s->root, &HELLO_DIGEST[7]);
  assert_string_equal (p, want);
  /* again: fine, no duplicate */
  assert_int_equal (ib_store_put_blob (s, "hello", 5, NULL, &err), 0);

  char *data = NULL;
  size_t len = 0;
  assert_int_equal (ib_store_read_blob (s, HELLO_DIGEST, &data, &len, &err), 0);
  assert_int_equal (len, 5);
  assert_memory_equal (data, "hello", 5);
  free (data);

  /* missing */
  const char *missing = "sha256:0000000000000000000000000000000000000000000000000000000000000000";
  assert_int_equal (ib_store_read_blob (s, missing, &data, &len, &err), -1);
  assert_int_equal (err->status, ENOENT);
  assert_non_null (strstr (err->msg, "not found"));
  ib_error_free (&err);

  /* corrupt on disk: read_blob notices */
  chmod (p, 0644);
  assert_int_equal (ib_write_file_atomic (p, "jello", 5, 0644, &err), 0);
  assert_int_equal (ib_store_read_blob (s, HELLO_DIGEST, &data, &len, &err), -1);
  assert_non_null (strstr (err->msg, "corrupt"));
  assert_null (data);
  ib_error_free (&err);
  ib_store_close (s);
}

static void
test_commit (void **state)
{
  ib_store_t *s = open_store (*state);
  ib_error_t err = NULL;
  cleanup_free char *blobs = ib_path_join (s->root, "blobs/sha256");
  cleanup_free char *tmpdir = ib_path_join (s->root, "tmp");
  size_t before = count_entries (blobs);

  /* wrong expected digest: error, temp file gone, nothing in blobs/ */
  char *tmp = NULL;
  int fd = ib_store_tmp_file (s, "dl", &tmp, &err);
  assert_true (fd >= 0);
  assert_true (ib_str_has_prefix (tmp, tmpdir));
  assert_int_equal (write (fd, "hello", 5), 5);
  close (fd);
  const char *wrong = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
  char d[IB_DIGEST_LEN];
  uint64_t size = 0;
  assert_int_equal (ib_store_commit_blob (s, tmp, wrong, d, &size, &err), -1);
  assert_non_null (strstr (err->msg, "digest mismatch"));
  assert_non_null (strstr (err->msg, wrong));
  ib_error_free (&err);
  assert_int_equal (access (tmp, F_OK), -1);
  assert_int_equal (count_entries (blobs), before);
  assert_false (ib_store_has_blob (s, wrong));
  assert_false (ib_store_has_blob (s, HELLO_DIGEST));
  free (tmp);

  /* right digest */
  fd = ib_store_tmp_file (s, "dl", &tmp, &err);
  assert_int_equal (write (fd, "hello", 5), 5);
  close (fd);
  assert_int_equal (ib_store_commit_blob (s, tmp, HELLO_DIGEST, d, &size, &err), 0);
  assert_string_equal (d, HELLO_DIGEST);
  assert_int_equal (size, 5);
  assert_true (ib_store_has_blob (s, HELLO_DIGEST));
  assert_int_equal (access (tmp, F_OK), -1);
  free (tmp);

  /* no expectation: digest computed */
  fd = ib_store_tmp_file (s, "dl", &tmp, &err);
  close (fd);
  assert_int_equal (ib_store_commit_blob (s, tmp, NULL, d, NULL, &err), 0);
  assert_string_equal (d, "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  free (tmp);
  assert_int_equal (count_entries (tmpdir), 0);

  char *dir = NULL;
  assert_int_equal (ib_store_tmp_dir (s, "unpack", &dir, &err), 0);
  struct stat st;
  assert_int_equal (stat (dir, &st), 0);
  assert_true (S_ISDIR (st.st_mode));
  assert_true (ib_str_has_prefix (dir, tmpdir));
  free (dir);
  ib_store_close (s);
}

static const char *
entry_name (json_t *e)
{
  return json_string_value (
      json_object_get (json_object_get (e, "annotations"), "org.opencontainers.image.ref.name"));
}

static void
test_tags (void **state)
{
  ib_store_t *s = open_store (*state);
  ib_error_t err = NULL;
  const char *m1 = "{\"schemaVersion\":2,\"mediaType\":\"" IB_MT_OCI_MANIFEST "\",\"config\":{"
                   "\"mediaType\":\"" IB_MT_OCI_CONFIG "\",\"digest\":\"" HELLO_DIGEST "\",\"size\":5},"
                   "\"layers\":[]}";
  char d1[IB_DIGEST_LEN], d2[IB_DIGEST_LEN], cd[IB_DIGEST_LEN];
  assert_int_equal (ib_store_put_blob (s, m1, strlen (m1), d1, &err), 0);
  const char *cfg = "{\"rootfs\":{\"type\":\"layers\",\"diff_ids\":[]}}";
  const char *m2fmt = "{\"schemaVersion\":2,\"mediaType\":\"" IB_MT_DOCKER_MANIFEST "\",\"config\":{"
                      "\"mediaType\":\"" IB_MT_DOCKER_CONFIG "\",\"digest\":\"%s\",\"size\":%zu},"
                      "\"layers\":[]}";
  assert_int_equal (ib_store_put_blob (s, cfg, strlen (cfg), cd, &err), 0);
  cleanup_free char *m2 = xasprintf (m2fmt, cd, strlen (cfg));
  assert_int_equal (ib_store_put_blob (s, m2, strlen (m2), d2, &err), 0);

  const char *name = "docker.io/library/debian:bookworm";
  assert_int_equal (ib_store_tag (s, name, IB_MT_OCI_MANIFEST, d1, (int64_t) strlen (m1), &err), 0);
  assert_int_equal (ib_store_tag (s, "localhost:5000/a/b:1", IB_MT_OCI_MANIFEST, d1,
                                  (int64_t) strlen (m1), &err), 0);

  ib_descriptor_t d;
  static const char *aliases[] = { "docker.io/library/debian:bookworm", "debian:bookworm",
                                   "library/debian:bookworm", "index.docker.io/debian:bookworm" };
  for (size_t i = 0; i < 4; i++)
    {
      if (ib_store_resolve (s, aliases[i], &d, &err) < 0)
        fail_msg ("%s: %s", aliases[i], err->msg);
      assert_string_equal (d.digest, d1);
      assert_string_equal (d.media_type, IB_MT_OCI_MANIFEST);
      assert_int_equal (d.size, (int64_t) strlen (m1));
      ib_descriptor_clear (&d);
    }
  /* by digest */
  assert_int_equal (ib_store_resolve (s, d1, &d, &err), 0);
  assert_string_equal (d.digest, d1);
  ib_descriptor_clear (&d);
  /* an untagged manifest in blobs/ resolves by digest too */
  assert_int_equal (ib_store_resolve (s, d2, &d, &err), 0);
  assert_string_equal (d.media_type, IB_MT_DOCKER_MANIFEST);
  assert_int_equal (d.size, (int64_t) strlen (m2));
  ib_descriptor_clear (&d);
  /* an image ID (the config's digest, docker build -q) finds a tag whose
   * manifest has that config; m2 is untagged, so not until it is tagged */
  assert_int_equal (ib_store_resolve (s, cd, &d, &err), -1);
  assert_non_null (strstr (err->msg, "not found"));
  ib_error_free (&err);
  assert_int_equal (ib_store_tag (s, "localhost:5000/by/id:1", IB_MT_DOCKER_MANIFEST, d2,
                                  (int64_t) strlen (m2), &err), 0);
  assert_int_equal (ib_store_resolve (s, cd, &d, &err), 0);
  assert_string_equal (d.digest, d2);
  ib_descriptor_clear (&d);
  assert_int_equal (ib_store_untag (s, "localhost:5000/by/id:1", NULL, &err), 0);

  /* not found names the image and the store */
  assert_int_equal (ib_store_resolve (s, "debian:trixie", &d, &err), -1);
  cleanup_free char *want = xasprintf ("image debian:trixie not found in store %s", s->root);
  assert_string_equal (err->msg, want);
  ib_error_free (&err);
  assert_int_equal (ib_store_resolve (s, "Not A Name", &d, &err), -1);
  ib_error_free (&err);

  /* replace the tag: one entry with that name, pointing at the new digest */
  assert_int_equal (ib_store_tag (s, name, IB_MT_DOCKER_MANIFEST, d2, (int64_t) strlen (m2), &err), 0);
  assert_int_equal (ib_store_resolve (s, "debian:bookworm", &d, &err), 0);
  assert_string_equal (d.digest, d2);
  assert_string_equal (d.media_type, IB_MT_DOCKER_MANIFEST);
  ib_descriptor_clear (&d);
  json_t *ms = NULL;
  assert_int_equal (ib_store_list (s, &ms, &err), 0);
  assert_int_equal (json_array_size (ms), 2);
  size_t named = 0;
  for (size_t i = 0; i < json_array_size (ms); i++)
    if (strcmp (entry_name (json_array_get (ms, i)), name) == 0)
      named++;
  assert_int_equal (named, 1);
  json_decref (ms);

  /* load the image */
  ib_manifest_t *m = NULL;
  json_t *config = NULL;
  assert_int_equal (ib_store_load_image (s, "debian:bookworm", &d, &m, &config, &err), 0);
  assert_string_equal (d.digest, d2);
  assert_string_equal (m->config.digest, cd);
  assert_non_null (json_object_get (config, "rootfs"));
  ib_descriptor_clear (&d);
  ib_manifest_free (m);
  json_decref (config);
  /* m1's config is "hello": not JSON, load fails with context */
  assert_int_equal (ib_store_load_image (s, "localhost:5000/a/b:1", NULL, &m, &config, &err), -1);
  assert_null (m);
  assert_null (config);
  assert_non_null (strstr (err->msg, "load image localhost:5000/a/b:1"));
  ib_error_free (&err);

  /* bad input */
  assert_int_equal (ib_store_tag (s, name, NULL, "sha256:xyz", 1, &err), -1);
  ib_error_free (&err);
  ib_store_close (s);
}

static void
test_lock (void **state)
{
  ib_store_t *s = open_store (*state);
  ib_error_t err = NULL;
  cleanup_free char *lp = ib_path_join (s->root, "lock");

  /* another open file description of the lock file stands for another process */
  int other = open (lp, O_RDWR | O_CLOEXEC);
  assert_true (other >= 0);

  assert_int_equal (ib_store_lock (s, false, &err), 0);
  assert_int_equal (flock (other, LOCK_SH | LOCK_NB), 0); /* readers share */
  assert_int_equal (flock (other, LOCK_UN), 0);
  assert_int_equal (flock (other, LOCK_EX | LOCK_NB), -1); /* a writer waits */
  assert_int_equal (errno, EWOULDBLOCK);

  /* nested exclusive (what ib_store_tag does) upgrades, inner unlock keeps it */
  assert_int_equal (ib_store_lock (s, true, &err), 0);
  assert_int_equal (flock (other, LOCK_SH | LOCK_NB), -1);
  ib_store_unlock (s);
  assert_int_equal (flock (other, LOCK_SH | LOCK_NB), -1);
  assert_int_equal (ib_store_tag (s, "x/y:z", NULL, HELLO_DIGEST, 5, &err), 0);
  assert_int_equal (s->lock_depth, 1);
  ib_store_unlock (s);
  assert_int_equal (s->lock_depth, 0);
  assert_int_equal (flock (other, LOCK_EX | LOCK_NB), 0);

  flock (other, LOCK_UN);

  /* while we write, a writer in another process is kept out */
  assert_int_equal (ib_store_lock (s, true, &err), 0);
  pid_t pid = fork ();
  assert_true (pid >= 0);
  if (pid == 0)
    {
      int cfd = open (lp, O_RDWR | O_CLOEXEC);
      if (cfd < 0)
        _exit (2);
      _exit (flock (cfd, LOCK_EX | LOCK_NB) == -1 && errno == EWOULDBLOCK ? 0 : 3);
    }
  int status = 0;
  waitpid (pid, &status, 0);
  assert_true (WIFEXITED (status));
  assert_int_equal (WEXITSTATUS (status), 0);
  ib_store_unlock (s);

  /* unlock without lock: harmless */
  ib_store_unlock (s);
  close (other);
  ib_store_close (s);
}

/* Processes forked from the one that opened the store (a -j stage's, a
 * platform's): without ib_store_after_fork they share the parent's open
 * file description of the lock file, and flock lets a child "take" the
 * exclusive lock its parent holds; after it, the parent keeps it out. */
static void
test_lock_after_fork (void **state)
{
  ib_store_t *s = open_store (*state);
  ib_error_t err = NULL;
  assert_int_equal (ib_store_lock (s, true, &err), 0);
  for (int reopen = 0; reopen < 2; reopen++)
    {
      pid_t pid = fork ();
      assert_true (pid >= 0);
      if (pid == 0)
        {
          if (reopen && ib_store_after_fork (s, NULL) < 0)
            _exit (2);
          if (flock (s->lock_fd, LOCK_EX | LOCK_NB) == 0)
            _exit (10); /* got it while the parent holds it */
          _exit (errno == EWOULDBLOCK ? 11 : 3);
        }
      int status = 0;
      waitpid (pid, &status, 0);
      assert_true (WIFEXITED (status));
      assert_int_equal (WEXITSTATUS (status), reopen ? 11 : 10);
    }
  /* the children's exits left the parent's lock held */
  cleanup_free char *lp = ib_path_join (s->root, "lock");
  int other = open (lp, O_RDWR | O_CLOEXEC);
  assert_true (other >= 0);
  assert_int_equal (flock (other, LOCK_SH | LOCK_NB), -1);
  ib_store_unlock (s);
  assert_int_equal (flock (other, LOCK_SH | LOCK_NB), 0);
  close (other);
  ib_store_close (s);
}

/* A cache mount's lock (sharing=locked): one holder at a time; a second
 * open of the lock stands for another step.  Also the error convention's
 * NULL (ignore) and ib_error_propagate. */
static void
test_cache_mount_lock (void **state)
{
  ib_store_t *s = open_store (*state);
  ib_error_t err = NULL;
  cleanup_free char *dir = NULL;
  bool created = false;
  assert_int_equal (ib_store_cache_mount_dir (s, "/root/.ccache", true, &dir, &created, &err), 0);
  assert_true (created);
  int a = ib_store_cache_mount_lock (s, "/root/.ccache", false, &err);
  assert_true (a >= 0);
  /* the lock file lies beside the directory, not in it (the step sees the directory) */
  cleanup_free char *lp = xasprintf ("%s.lock", dir);
  struct stat sb;
  assert_int_equal (stat (lp, &sb), 0);
  assert_int_equal (count_entries (dir), 0);
  assert_int_equal (ib_store_cache_mount_lock (s, "/root/.ccache", false, &err), -1);
  assert_int_equal (err->status, EWOULDBLOCK);
  assert_string_equal (err->msg, "cache mount /root/.ccache is in use");
  ib_error_free (&err);
  /* another id is another lock */
  int c = ib_store_cache_mount_lock (s, "other", false, &err);
  assert_true (c >= 0);
  /* ignored (NULL): the same failure, no error made */
  assert_int_equal (ib_store_cache_mount_lock (s, "/root/.ccache", false, NULL), -1);
  close (a);
  int b = ib_store_cache_mount_lock (s, "/root/.ccache", false, &err);
  assert_true (b >= 0);
  close (b);
  close (c);
  assert_int_equal (ib_store_cache_mount_lock (s, "", true, &err), -1);
  assert_int_equal (err->status, EINVAL);

  /* propagate: taken into an empty err, dropped into NULL or a kept first one */
  ib_error_t from = NULL, to = NULL;
  ib_error_set (&from, ENOENT, "second");
  assert_int_equal (ib_error_propagate (&err, &from), -1);
  assert_null (from);
  assert_string_equal (err->msg, "cache mount: empty id"); /* the first is kept */
  ib_error_set (&from, ENOENT, "moved");
  ib_error_propagate (&to, &from);
  assert_null (from);
  assert_string_equal (to->msg, "moved");
  assert_int_equal (to->status, ENOENT);
  ib_error_set (&from, ENOENT, "dropped");
  ib_error_propagate (NULL, &from);
  assert_null (from);
  ib_error_free (&to);
  ib_error_free (&err);
  ib_store_close (s);
}

/* The layout's one door: each area's path as docs/design.md and the
 * other tools (skopeo's oci: transport for blobs/) expect it. */
static void
test_paths (void **state)
{
  ib_store_t *s = open_store (*state);
  struct
  {
    ib_store_area_t area;
    const char *rel;
  } want[] = {
    { IB_STORE_BLOBS, "blobs/sha256" },         { IB_STORE_SNAPSHOTS, "snapshots" },
    { IB_STORE_TMP, "tmp" },                    { IB_STORE_CACHE_STEPS, "cache/steps" },
    { IB_STORE_CACHE_MOUNTS, "cache/mounts" },  { IB_STORE_CACHE, "cache" },
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    {
      cleanup_free char *dir = ib_store_path (s, want[i].area, NULL);
      cleanup_free char *exp = ib_path_join (s->root, want[i].rel);
      assert_string_equal (dir, exp);
      cleanup_free char *f = ib_store_path (s, want[i].area, "x.json");
      cleanup_free char *expf = xasprintf ("%s/x.json", exp);
      assert_string_equal (f, expf);
    }
  cleanup_free char *blob = ib_store_blob_path (s, HELLO_DIGEST);
  cleanup_free char *expb = xasprintf ("%s/blobs/sha256/%s", s->root, &HELLO_DIGEST[7]);
  assert_string_equal (blob, expb);
  cleanup_free char *part = ib_store_partial_path (s, HELLO_DIGEST);
  cleanup_free char *expp = xasprintf ("%s/tmp/blob-%s.partial", s->root, &HELLO_DIGEST[7]);
  assert_string_equal (part, expp);
  ib_store_close (s);
}

static void
test_default_root (void **state)
{
  (void) state;
  char *saved_store = xstrdup (getenv ("IMGBUILD_STORE"));
  char *saved_xdg = xstrdup (getenv ("XDG_DATA_HOME"));
  char *saved_home = xstrdup (getenv ("HOME"));
  setenv ("IMGBUILD_STORE", "/x/store", 1);
  char *r = ib_store_default_root ();
  assert_string_equal (r, "/x/store");
  free (r);
  unsetenv ("IMGBUILD_STORE");
  setenv ("XDG_DATA_HOME", "/x/data", 1);
  r = ib_store_default_root ();
  assert_string_equal (r, "/x/data/imgbuild");
  free (r);
  unsetenv ("XDG_DATA_HOME");
  setenv ("HOME", "/home/u", 1);
  r = ib_store_default_root ();
  assert_string_equal (r, "/home/u/.local/share/imgbuild");
  free (r);
  if (saved_store)
    setenv ("IMGBUILD_STORE", saved_store, 1);
  if (saved_xdg)
    setenv ("XDG_DATA_HOME", saved_xdg, 1);
  if (saved_home)
    setenv ("HOME", saved_home, 1);
  else
    unsetenv ("HOME");
  free (saved_store);
  free (saved_xdg);
  free (saved_home);
}

/* Another user, as far as a check can be made to see one: as root, uid
 * 65534 really owns what `own_as_other` is given (lchown); unprivileged,
 * this user's own files are another's to a check done as uid + 1, made
 * in /tmp (root's, sticky: trusted by both) rather than in the test's
 * directory (this user's: another's too, to that check). */
static uid_t
checker_uid (void)
{
  return geteuid () == 0 ? 0 : geteuid () + 1;
}

static uid_t
other_uid (void)
{
  return geteuid () == 0 ? 65534 : geteuid ();
}

static void
own_as_other (const char *path)
{
  if (geteuid () == 0)
    assert_int_equal (lchown (path, 65534, 65534), 0);
}

static void
expect_refused (const char *path, uid_t uid, int status, const char *msg)
{
  ib_error_t err = NULL;
  char *res = NULL;
  assert_int_equal (ib_store_check_path (path, uid, &res, &err), -1);
  assert_null (res);
  assert_int_equal (err->status, status);
  if (strstr (err->msg, msg) == NULL)
    fail_msg ("%s: got '%s', want '%s'", path, err->msg, msg);
  ib_error_free (&err);
}

static void
expect_resolved (const char *path, uid_t uid, const char *want)
{
  ib_error_t err = NULL;
  char *res = NULL;
  if (ib_store_check_path (path, uid, &res, &err) < 0)
    fail_msg ("%s: %s", path, err->msg);
  assert_string_equal (res, want);
  free (res);
}

/* The store's path: links of this user or root followed, another user's
 * link or directory on the way refused, a directory every user may write
 * only when sticky (ib_store_check_path). */
static void
test_check_path (void **state)
{
  char *d = realpath (*state, NULL);
  uid_t me = geteuid ();
  ib_error_t err = NULL;
  cleanup_free char *real = ib_path_join (d, "real");
  assert_int_equal (mkdir (real, 0755), 0);
  cleanup_free char *mine = ib_path_join (d, "mine");
  assert_int_equal (symlink ("real", mine), 0);

  /* one's own link, a missing rest, "." and ".." */
  cleanup_free char *p = xasprintf ("%s/mine/store", d);
  cleanup_free char *want = xasprintf ("%s/real/store", d);
  expect_resolved (p, me, want);
  free (p);
  p = xasprintf ("%s/./mine/../real/new/../store/", d);
  expect_resolved (p, me, want);
  free (p);
  p = xasprintf ("%s/real/new/../store", d); /* (nothing made: names only below "new") */
  expect_resolved (p, me, want);
  {
    struct stat st;
    cleanup_free char *nw = ib_path_join (real, "new");
    assert_int_equal (lstat (nw, &st), -1);
  }
  /* relative to the working directory */
  cleanup_free char *cwd = getcwd (NULL, 0);
  assert_int_equal (chdir (d), 0);
  expect_resolved ("mine/store", me, want);
  assert_int_equal (chdir (cwd), 0);

  /* another user's link: refused, also as the last component */
  const char *base = me == 0 ? d : "/tmp";
  cleanup_free char *theirs = xasprintf ("%s/ib-unit-theirs-link-%d", base, (int) getpid ());
  unlink (theirs);
  assert_int_equal (symlink (real, theirs), 0);
  own_as_other (theirs);
  cleanup_free char *msg = xasprintf ("%s is a symbolic link of uid %lu, not of this user (uid "
                                      "%lu) or root: its owner could point the store anywhere",
                                      theirs, (unsigned long) other_uid (),
                                      (unsigned long) checker_uid ());
  expect_refused (theirs, checker_uid (), EPERM, msg);
  free (p);
  p = ib_path_join (theirs, "store");
  expect_refused (p, checker_uid (), EPERM, msg);
  if (me == 0)
    {
      /* root's link is trusted by everyone */
      assert_int_equal (lchown (theirs, 0, 0), 0);
      expect_resolved (p, 12345, want);
    }

  /* another user's directory on the way: refused; as the last, it is
   * ib_store_open's to judge */
  cleanup_free char *tdir = xasprintf ("%s/ib-unit-theirs-dir-%d", base, (int) getpid ());
  rmdir (tdir);
  assert_int_equal (mkdir (tdir, 01777), 0);
  assert_int_equal (chmod (tdir, 01777), 0);
  own_as_other (tdir);
  free (msg);
  msg = xasprintf ("%s belongs to uid %lu, not to this user (uid %lu) or root: its owner could "
                   "put anything in the store's place; use a store of your own (--store DIR)",
                   tdir, (unsigned long) other_uid (), (unsigned long) checker_uid ());
  free (p);
  p = ib_path_join (tdir, "store");
  expect_refused (p, checker_uid (), EPERM, msg);
  expect_resolved (tdir, checker_uid (), tdir);
  if (me != 0)
    {
      assert_int_equal (unlink (theirs), 0);
      assert_int_equal (rmdir (tdir), 0);
    }

  /* a directory every user may write: only with the sticky bit */
  cleanup_free char *ww = ib_path_join (d, "ww");
  assert_int_equal (mkdir (ww, 0700), 0);
  assert_int_equal (chmod (ww, 0777), 0);
  free (p);
  p = ib_path_join (ww, "store");
  free (msg);
  msg = xasprintf ("%s is writable by every user (mode 0777) and not sticky", ww);
  expect_refused (p, me, EPERM, msg);
  assert_int_equal (chmod (ww, 01777), 0);
  cleanup_free char *wws = ib_path_join (ww, "store");
  expect_resolved (p, me, wws);

  /* loops, and a file on the way */
  cleanup_free char *loop = ib_path_join (d, "loop");
  assert_int_equal (symlink ("loop", loop), 0);
  expect_refused (loop, me, ELOOP, "more than 40 symbolic links");
  cleanup_free char *file = ib_path_join (d, "file");
  assert_int_equal (ib_write_file_atomic (file, "x", 1, 0644, &err), 0);
  free (p);
  p = ib_path_join (file, "store");
  free (msg);
  msg = xasprintf ("%s is not a directory", file);
  expect_refused (p, me, ENOTDIR, msg);
  free (d);
}

/* ib_store_open refuses, untouched, what is no store and what another
 * user could have pointed it at; ib_store_vet's answer is what it opens
 * inside a user namespace. */
static void
test_open_refusals (void **state)
{
  const char *d = *state;
  ib_error_t err = NULL;
  ib_store_t *s = NULL;
  /* a directory with files and no oci-layout (a home directory) */
  cleanup_free char *home = ib_path_join (d, "home");
  cleanup_free char *notes = ib_path_join (home, "notes.txt");
  cleanup_free char *htmp = ib_path_join (home, "tmp");
  assert_int_equal (ib_mkdir_p (htmp, 0755, &err), 0);
  assert_int_equal (chmod (home, 0755), 0);
  assert_int_equal (ib_write_file_atomic (notes, "mine", 4, 0644, &err), 0);
  assert_int_equal (ib_store_open (home, &s, &err), -1);
  assert_null (s);
  assert_int_equal (err->status, ENOTEMPTY);
  cleanup_free char *want = xasprintf (
      "open store %s: %s is not an imgbuild store (no oci-layout, and it holds 'notes.txt'): "
      "imgbuild would make it private (0700) and fill it; give a new or empty directory, or an "
      "existing store (--store DIR)",
      home, home);
  assert_string_equal (err->msg, want);
  ib_error_free (&err);
  struct stat st;
  assert_int_equal (stat (home, &st), 0);
  assert_int_equal (st.st_mode & 07777, 0755);
  assert_int_equal (count_entries (home), 2);
  /* only names a store has (a first open killed half way): a store */
  assert_int_equal (unlink (notes), 0);
  assert_int_equal (ib_store_open (home, &s, &err), 0);
  ib_store_close (s);
  /* an empty directory, and an OCI layout another tool wrote */
  cleanup_free char *empty = ib_path_join (d, "empty");
  assert_int_equal (mkdir (empty, 0700), 0);
  assert_int_equal (ib_store_open (empty, &s, &err), 0);
  ib_store_close (s);
  cleanup_free char *lay = ib_path_join (d, "layout");
  cleanup_free char *lay_f = ib_path_join (lay, "oci-layout");
  cleanup_free char *lay_x = ib_path_join (lay, "README");
  assert_int_equal (ib_mkdir_p (lay, 0700, &err), 0);
  assert_int_equal (ib_write_file_atomic (lay_f, "{\"imageLayoutVersion\":\"1.0.0\"}", 30, 0644,
                                          &err), 0);
  assert_int_equal (ib_write_file_atomic (lay_x, "x", 1, 0644, &err), 0);
  assert_int_equal (ib_store_open (lay, &s, &err), 0);
  ib_store_close (s);

  /* another user's link to one's own directory: refused, the target as
   * it was (as root: a link of uid 65534; unprivileged, there is no
   * making one: test_check_path pretends) */
  if (geteuid () == 0)
    {
      cleanup_free char *target = ib_path_join (d, "target");
      cleanup_free char *tf = ib_path_join (target, "f");
      assert_int_equal (ib_mkdir_p (target, 0755, &err), 0);
      assert_int_equal (chmod (target, 0755), 0);
      assert_int_equal (ib_write_file_atomic (tf, "x", 1, 0644, &err), 0);
      cleanup_free char *link = ib_path_join (d, "link-store");
      assert_int_equal (symlink (target, link), 0);
      assert_int_equal (lchown (link, 65534, 65534), 0);
      assert_int_equal (ib_store_open (link, &s, &err), -1);
      assert_int_equal (err->status, EPERM);
      assert_non_null (strstr (err->msg, "is a symbolic link of uid 65534, not of this user (uid 0)"));
      ib_error_free (&err);
      assert_int_equal (ib_store_vet (link, &err), -1);
      ib_error_free (&err);
      assert_int_equal (stat (target, &st), 0);
      assert_int_equal (st.st_mode & 07777, 0755);
      assert_int_equal (count_entries (target), 1);
    }

  /* vetted: the same string opens what the check found, made on the way */
  cleanup_free char *link2 = ib_path_join (d, "mine");
  assert_int_equal (symlink ("empty", link2), 0);
  cleanup_free char *vp = xasprintf ("%s/mine/sub/store", d);
  assert_int_equal (ib_store_vet (vp, &err), 0);
  assert_int_equal (ib_store_open (vp, &s, &err), 0);
  char *rd = realpath (d, NULL);
  cleanup_free char *wantroot = xasprintf ("%s/empty/sub/store", rd);
  free (rd);
  assert_string_equal (s->root, wantroot);
  assert_int_equal (stat (s->root, &st), 0);
  assert_int_equal (st.st_mode & 07777, 0700);
  ib_store_close (s);
}

/* What prune may remove: the names imgbuild makes (ib_store_name_ours). */
static void
test_name_ours (void **state)
{
  (void) state;
  const char *hex64 = &HELLO_DIGEST[7];
  cleanup_free char *ovl = xasprintf ("%s.ovl", hex64);
  cleanup_free char *rec = xasprintf ("%s.json", hex64);
  cleanup_free char *part = xasprintf ("blob-%s.partial", hex64);
  cleanup_free char *m32 = xstrndup (hex64, 32);
  cleanup_free char *m32id = xasprintf ("%s.id", m32);
  cleanup_free char *m32lock = xasprintf ("%s.lock", m32);
  const struct
  {
    ib_store_area_t area;
    const char *name;
    bool ours;
  } cases[] = {
    { IB_STORE_BLOBS, hex64, true },        { IB_STORE_BLOBS, "README", false },
    { IB_STORE_BLOBS, ovl, false },         { IB_STORE_SNAPSHOTS, hex64, true },
    { IB_STORE_SNAPSHOTS, ovl, true },      { IB_STORE_SNAPSHOTS, "holiday", false },
    { IB_STORE_SNAPSHOTS, rec, false },     { IB_STORE_CACHE_STEPS, rec, true },
    { IB_STORE_CACHE_STEPS, hex64, false }, { IB_STORE_CACHE_STEPS, "notes.json", false },
    { IB_STORE_CACHE_MOUNTS, m32, true },   { IB_STORE_CACHE_MOUNTS, m32id, true },
    { IB_STORE_CACHE_MOUNTS, m32lock, true }, { IB_STORE_CACHE_MOUNTS, "photos", false },
    { IB_STORE_TMP, part, true },           { IB_STORE_TMP, "stage-Ab12Cd", true },
    { IB_STORE_TMP, "stage-Ab12Cd.ovl", true }, { IB_STORE_TMP, "stage-dead", true },
    { IB_STORE_TMP, "snap-x1y2z3", true },  { IB_STORE_TMP, "debug-build-Qw12er", true },
    { IB_STORE_TMP, "load--Qw12er", true }, { IB_STORE_TMP, "blob-Qw12er", true },
    { IB_STORE_TMP, "tmp-Qw12er", true },   { IB_STORE_TMP, "stage", false },
    { IB_STORE_TMP, "stage-", false },      { IB_STORE_TMP, "notes.txt", false },
    { IB_STORE_TMP, "Downloads", false },   { IB_STORE_TMP, "stages-x", false },
    { IB_STORE_TMP, ".hidden", false },
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (ib_store_name_ours (cases[i].area, cases[i].name) != cases[i].ours)
      fail_msg ("area %d, '%s': want %s", (int) cases[i].area, cases[i].name,
                cases[i].ours ? "ours" : "not ours");
}

/* prune --all removes the leftovers imgbuild made and leaves what it did
 * not (the report's store that was someone's home: ~/tmp, ~/snapshots). */
static void
test_prune_only_ours (void **state)
{
  ib_store_t *s = open_store (*state);
  ib_error_t err = NULL;
  const char *hex64 = &HELLO_DIGEST[7];
  cleanup_free char *tmp = ib_store_path (s, IB_STORE_TMP, NULL);
  cleanup_free char *snaps = ib_store_path (s, IB_STORE_SNAPSHOTS, NULL);
  cleanup_free char *blobs = ib_store_path (s, IB_STORE_BLOBS, NULL);
  const char *keep[] = { "tmp/notes.txt", "tmp/Downloads/a", "snapshots/holiday/b",
                         "blobs/sha256/README", "cache/steps/mine.txt" };
  for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++)
    {
      cleanup_free char *p = ib_path_join (s->root, keep[i]);
      cleanup_free char *dir = xstrdup (p);
      *strrchr (dir, '/') = '\0';
      assert_int_equal (ib_mkdir_p (dir, 0755, &err), 0);
      assert_int_equal (ib_write_file_atomic (p, "mine", 4, 0644, &err), 0);
    }
  cleanup_free char *st1 = ib_path_join (tmp, "stage-Ab12Cd");
  cleanup_free char *st1f = ib_path_join (st1, "f");
  assert_int_equal (ib_mkdir_p (st1, 0755, &err), 0);
  assert_int_equal (ib_write_file_atomic (st1f, "x", 1, 0644, &err), 0);
  cleanup_free char *part = xasprintf ("%s/blob-%s.partial", tmp, hex64);
  assert_int_equal (ib_write_file_atomic (part, "x", 1, 0644, &err), 0);
  cleanup_free char *snap = ib_path_join (snaps, hex64);
  assert_int_equal (mkdir (snap, 0755), 0);
  char d[IB_DIGEST_LEN];
  assert_int_equal (ib_store_put_blob (s, "hello", 5, d, &err), 0);

  ib_prune_opts_t po = { .all = true };
  ib_prune_result_t res;
  assert_int_equal (ib_store_gc_lock (s, true, true, &err), 0);
  if (ib_prune (s, &po, &res, &err) < 0)
    fail_msg ("%s", err->msg);
  assert_int_equal (res.tmp_entries, 2);
  assert_int_equal (res.snapshots, 1);
  assert_int_equal (res.blobs, 1);
  for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++)
    {
      char *data = slurp (s->root, keep[i]);
      assert_string_equal (data, "mine");
      free (data);
    }
  assert_int_equal (count_entries (tmp), 2);  /* notes.txt, Downloads */
  assert_int_equal (count_entries (snaps), 1); /* holiday */
  assert_int_equal (count_entries (blobs), 1); /* README */
  ib_store_close (s);
}

/* A pulled Docker schema 2 image: the tag points at the OCI rendering and
 * records the served manifest; digests resolve through the annotations. */
static void
test_registry_digest (void **state)
{
  ib_store_t *s = open_store (*state);
  ib_error_t err = NULL;
  static const char docker[] = "{\"mediaType\":\"" IB_MT_DOCKER_MANIFEST "\",\"layers\":[]}";
  static const char oci[] = "{\"mediaType\":\"" IB_MT_OCI_MANIFEST "\",\"layers\":[]}";
  char dd[IB_DIGEST_LEN], od[IB_DIGEST_LEN];
  assert_int_equal (ib_store_put_blob (s, docker, strlen (docker), dd, &err), 0);
  assert_int_equal (ib_store_put_blob (s, oci, strlen (oci), od, &err), 0);
  const char *idx = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
  ib_tag_meta_t meta = { .source = "r.example:5000/app", .served_digest = dd,
                         .served_media_type = IB_MT_DOCKER_MANIFEST, .index_digest = idx };
  const char *name = "r.example:5000/app:1";
  assert_int_equal (ib_store_tag_meta (s, name, IB_MT_OCI_MANIFEST, od, (int64_t) strlen (oci),
                                       &meta, &err), 0);
  /* tagging the same again leaves index.json as it is (same inode) */
  cleanup_free char *ip = ib_path_join (s->root, "index.json");
  struct stat a, b;
  assert_int_equal (stat (ip, &a), 0);
  assert_int_equal (ib_store_tag_meta (s, name, IB_MT_OCI_MANIFEST, od, (int64_t) strlen (oci),
                                       &meta, &err), 0);
  assert_int_equal (stat (ip, &b), 0);
  assert_int_equal (a.st_ino, b.st_ino);

  cleanup_free char *by_served = xasprintf ("r.example:5000/app@%s", dd);
  cleanup_free char *by_index = xasprintf ("r.example:5000/app:9@%s", idx);
  cleanup_free char *other_repo = xasprintf ("r.example:5000/other@%s", dd);
  const char *finds[] = { name, dd, od, idx, by_served, by_index };
  for (size_t i = 0; i < sizeof finds / sizeof *finds; i++)
    {
      ib_descriptor_t d, sv, st;
      char ix[IB_DIGEST_LEN];
      assert_int_equal (ib_store_resolve (s, finds[i], &d, &err), 0);
      assert_string_equal (d.digest, od); /* the tagged rendering: cache keys use it */
      assert_string_equal (d.media_type, IB_MT_OCI_MANIFEST);
      assert_int_equal (ib_store_resolve_served (s, finds[i], &sv, &st, ix, &err), 0);
      assert_string_equal (sv.digest, dd);
      assert_string_equal (sv.media_type, IB_MT_DOCKER_MANIFEST);
      assert_int_equal (sv.size, (int64_t) strlen (docker));
      assert_string_equal (st.digest, od);
      assert_string_equal (ix, idx);
      ib_descriptor_clear (&d);
      ib_descriptor_clear (&sv);
      ib_descriptor_clear (&st);
    }
  ib_descriptor_t d;
  assert_int_equal (ib_store_resolve (s, other_repo, &d, &err), -1);
  assert_int_equal (err->status, ENOENT);
  assert_non_null (strstr (err->msg, other_repo));
  ib_error_free (&err);

  /* the served blob gone (pruned by an older imgbuild): the tagged one */
  cleanup_free char *bp = ib_store_blob_path (s, dd);
  assert_int_equal (unlink (bp), 0);
  ib_descriptor_t sv;
  assert_int_equal (ib_store_resolve_served (s, name, &sv, NULL, NULL, &err), 0);
  assert_string_equal (sv.digest, od);
  ib_descriptor_clear (&sv);

  /* a tag without meta records no registry annotations */
  assert_int_equal (ib_store_tag_meta (s, name, IB_MT_OCI_MANIFEST, od, (int64_t) strlen (oci),
                                       NULL, &err), 0);
  json_t *ms = NULL;
  assert_int_equal (ib_store_list (s, &ms, &err), 0);
  assert_int_equal (json_array_size (ms), 1);
  json_t *ann = json_object_get (json_array_get (ms, 0), "annotations");
  assert_int_equal (json_object_size (ann), 1);
  json_decref (ms);
  assert_int_equal (ib_store_resolve (s, by_served, &d, &err), -1);
  ib_error_free (&err);
  ib_store_close (s);
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    unit_test_in_tmpdir (test_open),
    unit_test_in_tmpdir (test_blobs),
    unit_test_in_tmpdir (test_commit),
    unit_test_in_tmpdir (test_tags),
    unit_test_in_tmpdir (test_registry_digest),
    unit_test_in_tmpdir (test_lock),
    unit_test_in_tmpdir (test_lock_after_fork),
    unit_test_in_tmpdir (test_cache_mount_lock),
    unit_test_in_tmpdir (test_paths),
    unit_test_in_tmpdir (test_check_path),
    unit_test_in_tmpdir (test_open_refusals),
    cmocka_unit_test (test_name_ours),
    unit_test_in_tmpdir (test_prune_only_ours),
    cmocka_unit_test (test_default_root),
  };
  return cmocka_run_group_tests (tests, NULL, NULL);
}
