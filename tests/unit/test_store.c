/* tests/unit/test_store.c — the content store (oci/store.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/unit/unit.h"

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
    cmocka_unit_test (test_default_root),
  };
  return cmocka_run_group_tests (tests, NULL, NULL);
}
