/* tests/unit/test_unpack.c — layer unpacking (normal and hostile tars built
 * here with libarchive's writer), tree copies, snapshots.
 *
 * Every hostile case runs in a temp parent holding target/ and outside/
 * (with a sentinel file) and checks that nothing outside target/ changed.
 * Runs as root and as an unprivileged user (ownership then stays ours,
 * device nodes are skipped). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/util.h"
#include "oci/digest.h"
#include "oci/manifest.h"
#include "oci/store.h"
#include "rootfs/prepare.h"
#include "rootfs/resolve.h"
#include "rootfs/treecopy.h"
#include "rootfs/unpack.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <zlib.h>

#define MTIME 1234567890

enum comp
{
  C_NONE,
  C_GZIP,
  C_ZSTD
};

struct fx
{
  char *parent;   /* temp dir: target/ outside/sentinel */
  char *target;
  char *outside;
  char *layers;   /* temp dir for layer files, not under parent */
  int n_layers;
};

static char *
layer_path (struct fx *f)
{
  return xasprintf ("%s/layer%d", f->layers, f->n_layers++);
}

static struct archive *
tw_open (const char *path, enum comp c)
{
  struct archive *a = archive_write_new ();
  assert_non_null (a);
  assert_int_equal (archive_write_set_format_pax_restricted (a), ARCHIVE_OK);
  if (c == C_GZIP)
    assert_int_equal (archive_write_add_filter_gzip (a), ARCHIVE_OK);
  else if (c == C_ZSTD)
    assert_int_equal (archive_write_add_filter_zstd (a), ARCHIVE_OK);
  assert_int_equal (archive_write_open_filename (a, path), ARCHIVE_OK);
  return a;
}

static void
tw_close (struct archive *a)
{
  assert_int_equal (archive_write_close (a), ARCHIVE_OK);
  archive_write_free (a);
}

static void
tw_entry (struct archive *a, const char *name, mode_t type, mode_t perm, const char *data,
          const char *symlink, const char *hardlink, int64_t uid)
{
  struct archive_entry *e = archive_entry_new ();
  archive_entry_set_pathname (e, name);
  archive_entry_set_filetype (e, type);
  archive_entry_set_perm (e, perm);
  archive_entry_set_mtime (e, MTIME, 0);
  archive_entry_set_uid (e, uid);
  archive_entry_set_gid (e, uid);
  size_t len = data ? strlen (data) : 0;
  archive_entry_set_size (e, (la_int64_t) len);
  if (symlink)
    archive_entry_set_symlink (e, symlink);
  if (hardlink)
    {
      archive_entry_set_hardlink (e, hardlink);
      archive_entry_set_size (e, 0);
      len = 0;
    }
  if (type == AE_IFCHR)
    {
      archive_entry_set_rdevmajor (e, 1);
      archive_entry_set_rdevminor (e, 3);
    }
  assert_int_equal (archive_write_header (a, e), ARCHIVE_OK);
  if (len)
    assert_int_equal (archive_write_data (a, data, len), (la_ssize_t) len);
  archive_entry_free (e);
}

static void
tw_file (struct archive *a, const char *name, mode_t perm, const char *data)
{
  tw_entry (a, name, AE_IFREG, perm, data, NULL, NULL, getuid ());
}
static void
tw_dir (struct archive *a, const char *name, mode_t perm)
{
  tw_entry (a, name, AE_IFDIR, perm, NULL, NULL, NULL, getuid ());
}
static void
tw_symlink (struct archive *a, const char *name, const char *target)
{
  tw_entry (a, name, AE_IFLNK, 0777, NULL, target, NULL, getuid ());
}
static void
tw_hardlink (struct archive *a, const char *name, const char *target)
{
  tw_entry (a, name, AE_IFREG, 0644, NULL, NULL, target, getuid ());
}

/* One-entry-per-call layer built from a spec: "f:NAME=DATA", "d:NAME",
 * "l:NAME>TARGET", "h:NAME>TARGET"; NULL-terminated. */
static char *
make_layer (struct fx *f, enum comp c, ...)
{
  char *path = layer_path (f);
  struct archive *a = tw_open (path, c);
  va_list ap;
  va_start (ap, c);
  const char *spec;
  while ((spec = va_arg (ap, const char *)) != NULL)
    {
      cleanup_free char *s = xstrdup (spec + 2);
      char *sep;
      switch (spec[0])
        {
        case 'f':
          sep = strchr (s, '=');
          if (sep)
            *sep++ = '\0';
          tw_file (a, s, 0644, sep ? sep : "");
          break;
        case 'd':
          tw_dir (a, s, 0755);
          break;
        case 'l':
          sep = strchr (s, '>');
          *sep++ = '\0';
          tw_symlink (a, s, sep);
          break;
        case 'h':
          sep = strchr (s, '>');
          *sep++ = '\0';
          tw_hardlink (a, s, sep);
          break;
        default:
          fail ();
        }
    }
  va_end (ap);
  tw_close (a);
  return path;
}

static int
setup (void **state)
{
  struct fx *f = xmalloc (sizeof *f);
  f->parent = xstrdup ("/tmp/ib-unpack-XXXXXX");
  f->layers = xstrdup ("/tmp/ib-layers-XXXXXX");
  assert_non_null (mkdtemp (f->parent));
  assert_non_null (mkdtemp (f->layers));
  f->target = xasprintf ("%s/target", f->parent);
  f->outside = xasprintf ("%s/outside", f->parent);
  assert_int_equal (mkdir (f->target, 0755), 0);
  assert_int_equal (mkdir (f->outside, 0755), 0);
  cleanup_free char *sentinel = xasprintf ("%s/sentinel", f->outside);
  ib_error_t err = NULL;
  assert_int_equal (ib_write_file_atomic (sentinel, "keep", 4, 0644, &err), 0);
  *state = f;
  return 0;
}

static int
teardown (void **state)
{
  struct fx *f = *state;
  ib_error_t err = NULL;
  ib_rm_rf (f->parent, &err);
  ib_rm_rf (f->layers, &err);
  ib_error_free (&err);
  free (f->parent);
  free (f->target);
  free (f->outside);
  free (f->layers);
  free (f);
  ib_unpack_set_max_bytes (0);
  ib_unpack_set_openat2 (true);
  return 0;
}

static size_t
count_dir (const char *path)
{
  DIR *d = opendir (path);
  assert_non_null (d);
  size_t n = 0;
  struct dirent *de;
  while ((de = readdir (d)) != NULL)
    if (strcmp (de->d_name, ".") && strcmp (de->d_name, ".."))
      n++;
  closedir (d);
  return n;
}

/* parent holds exactly target/ and outside/, outside holds exactly the
 * untouched sentinel; nothing appeared at the host paths tests aim at. */
static void
assert_outside_unchanged (struct fx *f)
{
  assert_int_equal (count_dir (f->parent), 2);
  assert_int_equal (count_dir (f->outside), 1);
  cleanup_free char *sentinel = xasprintf ("%s/sentinel", f->outside);
  cleanup_free char *data = NULL;
  ib_error_t err = NULL;
  assert_int_equal (ib_read_file (sentinel, &data, NULL, &err), 0);
  assert_string_equal (data, "keep");
  struct stat st;
  assert_int_equal (lstat (sentinel, &st), 0);
  assert_int_equal (st.st_nlink, 1);
  assert_true (lstat ("/tmp/outside-dir", &st) < 0);
  assert_true (lstat ("/escape", &st) < 0);
  assert_true (lstat ("/abs", &st) < 0);
  assert_true (lstat ("/x", &st) < 0);
}

static char *
tpath (struct fx *f, const char *rel)
{
  return xasprintf ("%s/%s", f->target, rel);
}

static bool
texists (struct fx *f, const char *rel)
{
  cleanup_free char *p = tpath (f, rel);
  struct stat st;
  return lstat (p, &st) == 0;
}

static char *
tread (struct fx *f, const char *rel)
{
  cleanup_free char *p = tpath (f, rel);
  char *data = NULL;
  ib_error_t err = NULL;
  if (ib_read_file (p, &data, NULL, &err) < 0)
    {
      ib_error_free (&err);
      return NULL;
    }
  return data;
}

static struct stat
tstat (struct fx *f, const char *rel)
{
  cleanup_free char *p = tpath (f, rel);
  struct stat st;
  assert_int_equal (lstat (p, &st), 0);
  return st;
}

/* Unpack and expect failure with `needle` in the message. */
static void
expect_fail (struct fx *f, const char *layer, const char *needle)
{
  ib_error_t err = NULL;
  int r = ib_unpack_layer (layer, f->target, NULL, NULL, &err);
  assert_int_equal (r, -1);
  assert_non_null (err);
  if (needle && strstr (err->msg, needle) == NULL)
    fail_msg ("error \"%s\" lacks \"%s\"", err->msg, needle);
  ib_error_free (&err);
}

static void
expect_ok (struct fx *f, const char *layer, ib_unpack_stats_t *stats)
{
  ib_error_t err = NULL;
  int r = ib_unpack_layer (layer, f->target, NULL, stats, &err);
  if (r < 0)
    fail_msg ("unpack failed: %s", err->msg);
}

/* ---------------------------------------------------------------------- */

static void
test_normal (void **state)
{
  struct fx *f = *state;
  cleanup_free char *layer = layer_path (f);
  struct archive *a = tw_open (layer, C_GZIP);
  tw_dir (a, "./", 0755);
  tw_dir (a, "./usr/", 0755);
  tw_dir (a, "usr/bin", 0755);
  tw_file (a, "./usr/bin/tool", 0755, "#!/bin/sh\n");
  tw_file (a, "usr/bin/suid", 04755, "suid");
  tw_file (a, "usr/bin/sgid", 02711, "sgid");
  tw_dir (a, "tmp/", 01777);
  tw_file (a, "etc/conf", 0600, "conf"); /* implicit parent */
  tw_symlink (a, "usr/bin/link", "tool");
  tw_symlink (a, "abs", "/etc/conf");
  tw_hardlink (a, "usr/bin/hard", "usr/bin/tool");
  tw_dir (a, "ro/", 0555);
  tw_file (a, "ro/inside", 0444, "ro");
  tw_entry (a, "owned", AE_IFREG, 0640, "x", NULL, NULL, 1234);
  tw_entry (a, "fifo", AE_IFIFO, 0600, NULL, NULL, NULL, getuid ());
  tw_entry (a, "nulldev", AE_IFCHR, 0666, NULL, NULL, NULL, 0);
  tw_close (a);

  ib_unpack_stats_t stats;
  char diff_id[IB_DIGEST_LEN];
  ib_error_t err = NULL;
  int r = ib_unpack_layer (layer, f->target, diff_id, &stats, &err);
  if (r < 0)
    fail_msg ("%s", err->msg);
  assert_int_equal (stats.entries, 16);
  assert_true (ib_digest_valid (diff_id));
  assert_true (stats.bytes > 0);

  cleanup_free char *tool = tread (f, "usr/bin/tool");
  assert_string_equal (tool, "#!/bin/sh\n");
  struct stat st = tstat (f, "usr/bin/tool");
  assert_int_equal (st.st_mode & 07777, 0755);
  assert_int_equal (st.st_mtime, MTIME);
  struct stat hard = tstat (f, "usr/bin/hard");
  assert_int_equal (hard.st_ino, st.st_ino);
  assert_int_equal (tstat (f, "usr/bin/suid").st_mode & 07777, 04755);
  assert_int_equal (tstat (f, "usr/bin/sgid").st_mode & 07777, 02711);
  assert_int_equal (tstat (f, "tmp").st_mode & 07777, 01777);
  assert_true (S_ISDIR (tstat (f, "tmp").st_mode));
  assert_int_equal (tstat (f, "etc").st_mode & 07777, 0755);
  assert_int_equal (tstat (f, "etc/conf").st_mode & 07777, 0600);
  assert_int_equal (tstat (f, "ro").st_mode & 07777, 0555);
  assert_int_equal (tstat (f, "ro").st_mtime, MTIME);
  assert_int_equal (tstat (f, "usr/bin").st_mtime, MTIME);
  assert_true (S_ISFIFO (tstat (f, "fifo").st_mode));

  cleanup_free char *lp = tpath (f, "usr/bin/link");
  char buf[64] = { 0 };
  assert_int_equal (readlink (lp, buf, sizeof buf), 4);
  assert_string_equal (buf, "tool");
  assert_true (S_ISLNK (tstat (f, "abs").st_mode));

  if (geteuid () == 0)
    assert_int_equal (tstat (f, "owned").st_uid, 1234);
  else
    assert_int_equal (tstat (f, "owned").st_uid, geteuid ());

  if (texists (f, "nulldev"))
    {
      struct stat d = tstat (f, "nulldev");
      assert_true (S_ISCHR (d.st_mode));
      assert_int_equal (major (d.st_rdev), 1);
      assert_int_equal (minor (d.st_rdev), 3);
      assert_int_equal (stats.skipped, 0);
    }
  else
    assert_int_equal (stats.skipped, 1);
  assert_outside_unchanged (f);

  /* A second layer over the first: files replace files, a directory entry
   * over an existing directory keeps its contents and updates its mode,
   * a file replaces a directory, a directory replaces a file, writing into
   * a 0555 directory works even rootless and the mode comes back. */
  cleanup_free char *l2 = layer_path (f);
  a = tw_open (l2, C_NONE);
  tw_dir (a, "usr/bin/", 0700);
  tw_file (a, "usr/bin/tool", 0700, "new");
  tw_file (a, "ro/added", 0644, "added");
  tw_file (a, "tmp", 0644, "now a file");
  tw_dir (a, "etc/conf/", 0750);
  tw_close (a);
  expect_ok (f, l2, NULL);
  cleanup_free char *tool2 = tread (f, "usr/bin/tool");
  assert_string_equal (tool2, "new");
  assert_int_equal (tstat (f, "usr/bin").st_mode & 07777, 0700);
  assert_true (texists (f, "usr/bin/suid"));
  cleanup_free char *hard2 = tread (f, "usr/bin/hard"); /* the old inode, untouched */
  assert_string_equal (hard2, "#!/bin/sh\n");
  assert_true (S_ISREG (tstat (f, "tmp").st_mode));
  assert_true (S_ISDIR (tstat (f, "etc/conf").st_mode));
  assert_int_equal (tstat (f, "ro").st_mode & 07777, 0555);
  cleanup_free char *added = tread (f, "ro/added");
  assert_string_equal (added, "added");
  assert_outside_unchanged (f);
}

static void
test_whiteouts (void **state)
{
  struct fx *f = *state;
  cleanup_free char *l1 = make_layer (f, C_GZIP, "f:a/x=1", "f:a/y=2", "f:b/sub/z=3", "f:c/keep=4",
                                      "f:d/1=5", "f:d/2=6", "f:e/sub/old=7", "f:g/lower=8",
                                      "d:h/", "f:h/sub/old=9", NULL);
  expect_ok (f, l1, NULL);
  cleanup_free char *l2 = make_layer (
      f, C_GZIP, "f:a/.wh.x", "f:.wh.b", "f:d/new=n", "f:d/.wh..wh..opq",
      /* e/sub exists below; this layer adds to it, then makes e opaque */
      "f:e/sub/new=n", "f:e/.wh..wh..opq",
      /* opaque marker first, then new content */
      "f:g/.wh..wh..opq", "f:g/mine=m",
      /* h/sub re-declared in this layer: lower content of it goes */
      "d:h/sub/", "f:h/.wh..wh..opq",
      /* whiteout of a missing name, whiteout metadata */
      "f:nothere/.wh.x", "f:c/.wh..wh.plnk", NULL);
  expect_ok (f, l2, NULL);

  assert_false (texists (f, "a/x"));
  assert_true (texists (f, "a/y"));
  assert_false (texists (f, "b"));
  assert_true (texists (f, "c/keep"));
  assert_false (texists (f, "d/1"));
  assert_false (texists (f, "d/2"));
  assert_true (texists (f, "d/new"));
  assert_true (texists (f, "e/sub/new"));
  assert_false (texists (f, "e/sub/old"));
  assert_false (texists (f, "g/lower"));
  assert_true (texists (f, "g/mine"));
  assert_true (texists (f, "h/sub"));
  assert_false (texists (f, "h/sub/old"));
  assert_false (texists (f, "nothere"));
  assert_false (texists (f, "a/.wh.x"));
  assert_outside_unchanged (f);

  /* A whiteout of a name this very layer created does not apply to it. */
  cleanup_free char *l3 = make_layer (f, C_NONE, "f:same=1", "f:.wh.same", NULL);
  expect_ok (f, l3, NULL);
  assert_true (texists (f, "same"));
}

static void
test_compression (void **state)
{
  struct fx *f = *state;
  char ids[3][IB_DIGEST_LEN];
  char plain_digest[IB_DIGEST_LEN];
  for (int c = C_NONE; c <= C_ZSTD; c++)
    {
      cleanup_free char *l = make_layer (f, (enum comp) c, "d:dir/", "f:dir/file=hello",
                                         "l:dir/link>file", NULL);
      ib_error_t err = NULL;
      cleanup_free char *dest = xasprintf ("%s/t%d", f->target, c);
      assert_int_equal (mkdir (dest, 0755), 0);
      if (ib_unpack_layer (l, dest, ids[c], NULL, &err) < 0)
        fail_msg ("%s", err->msg);
      cleanup_free char *p = xasprintf ("%s/dir/file", dest);
      cleanup_free char *data = NULL;
      assert_int_equal (ib_read_file (p, &data, NULL, &err), 0);
      assert_string_equal (data, "hello");
      if (c == C_NONE)
        assert_int_equal (ib_digest_file (l, plain_digest, NULL, &err), 0);
    }
  /* diff_id is the digest of the uncompressed tar, whatever the compression */
  assert_string_equal (ids[0], plain_digest);
  assert_string_equal (ids[1], plain_digest);
  assert_string_equal (ids[2], plain_digest);

  /* garbage is an error, not a crash */
  cleanup_free char *junk = layer_path (f);
  ib_error_t err = NULL;
  assert_int_equal (ib_write_file_atomic (junk, "\x1f\x8bjunkjunkjunk", 14, 0644, &err), 0);
  expect_fail (f, junk, "gzip");
  assert_int_equal (ib_write_file_atomic (junk, "\x28\xb5\x2f\xfdjunkjunk", 12, 0644, &err), 0);
  expect_fail (f, junk, "zstd");
  assert_outside_unchanged (f);
}

static void
test_bad_names (void **state)
{
  struct fx *f = *state;
  cleanup_free char *l1 = make_layer (f, C_NONE, "f:../escape=x", NULL);
  expect_fail (f, l1, "../escape");
  cleanup_free char *l2 = make_layer (f, C_GZIP, "f:/abs=x", NULL);
  expect_fail (f, l2, "/abs");
  cleanup_free char *l3 = make_layer (f, C_ZSTD, "f:a/../../x=x", NULL);
  expect_fail (f, l3, "a/../../x");
  cleanup_free char *l4 = make_layer (f, C_NONE, "f:ok=x", "h:h>../../etc/passwd", NULL);
  expect_fail (f, l4, "../../etc/passwd");
  cleanup_free char *l5 = make_layer (f, C_NONE, "f:a/.wh...", NULL);
  expect_fail (f, l5, "whiteout");
  cleanup_free char *l6 = make_layer (f, C_NONE, "f:.wh..", NULL);
  expect_fail (f, l6, "whiteout");
  cleanup_free char *l7 = make_layer (f, C_NONE, "f:a/.wh.", NULL);
  expect_fail (f, l7, "whiteout");
  assert_outside_unchanged (f);
}

static void
symlink_attacks (struct fx *f)
{
  cleanup_free char *abs_out = xstrdup (f->outside);

  /* same layer: symlink to the real outside dir, then a file through it */
  cleanup_free char *s1 = xasprintf ("l:evil>%s", abs_out);
  cleanup_free char *l1 = make_layer (f, C_NONE, s1, "f:evil/pwned=x", NULL);
  expect_fail (f, l1, "evil/pwned");
  assert_outside_unchanged (f);

  /* the brief's classic */
  cleanup_free char *l1b
      = make_layer (f, C_NONE, "l:evil2>/tmp/outside-dir", "f:evil2/pwned=x", NULL);
  expect_fail (f, l1b, "evil2/pwned");
  assert_outside_unchanged (f);

  /* relative ".." symlink */
  cleanup_free char *l2
      = make_layer (f, C_NONE, "l:rel>../../../../../outside", "f:rel/pwned=x", NULL);
  expect_fail (f, l2, "rel/pwned");
  assert_outside_unchanged (f);

  /* across two layers */
  cleanup_free char *s3 = xasprintf ("l:evil3>%s", abs_out);
  cleanup_free char *l3a = make_layer (f, C_NONE, s3, NULL);
  expect_ok (f, l3a, NULL);
  cleanup_free char *l3b = make_layer (f, C_GZIP, "f:evil3/pwned=x", NULL);
  expect_fail (f, l3b, "evil3/pwned");
  assert_outside_unchanged (f);

  /* a directory entry and a hardlink through it */
  cleanup_free char *l3c = make_layer (f, C_NONE, "d:evil3/sub/", NULL);
  expect_fail (f, l3c, "evil3/sub");
  cleanup_free char *l3d = make_layer (f, C_NONE, "h:stolen>evil3/sentinel", NULL);
  expect_fail (f, l3d, "evil3/sentinel");
  assert_outside_unchanged (f);

  /* whiteouts through it: nothing to delete inside, nothing deleted outside */
  cleanup_free char *l3e = make_layer (f, C_NONE, "f:evil3/.wh.sentinel", NULL);
  expect_ok (f, l3e, NULL);
  cleanup_free char *l3f = make_layer (f, C_NONE, "f:evil3/.wh..wh..opq", NULL);
  expect_fail (f, l3f, "evil3");
  assert_outside_unchanged (f);

  /* the symlink itself may be replaced by a layer */
  cleanup_free char *l3g = make_layer (f, C_NONE, "f:.wh.evil3", "f:evil3=now a file", NULL);
  expect_ok (f, l3g, NULL);
  assert_true (S_ISREG (tstat (f, "evil3").st_mode));

  /* symlinks resolve as in the container: "/" is the target */
  cleanup_free char *l4 = make_layer (f, C_NONE, "l:root>/", "f:root/etc/inside=x",
                                      "l:up>../../..", "f:up/inside2=y", NULL);
  expect_ok (f, l4, NULL);
  assert_true (texists (f, "etc/inside"));
  assert_true (texists (f, "inside2"));
  assert_outside_unchanged (f);

  /* hardlink through an in-root symlink stays in-root */
  cleanup_free char *l5 = make_layer (f, C_NONE, "h:hl>root/etc/inside", NULL);
  expect_ok (f, l5, NULL);
  assert_int_equal (tstat (f, "hl").st_ino, tstat (f, "etc/inside").st_ino);

  /* hardlink to a symlink pointing out links the symlink, not its target */
  cleanup_free char *s6 = xasprintf ("l:outlink>%s/sentinel", abs_out);
  cleanup_free char *l6 = make_layer (f, C_NONE, s6, "h:hl2>outlink", NULL);
  expect_ok (f, l6, NULL);
  assert_true (S_ISLNK (tstat (f, "hl2").st_mode));
  assert_outside_unchanged (f);

  /* a file entry over an existing symlink replaces the link */
  cleanup_free char *l7 = make_layer (f, C_NONE, "f:outlink=mine", NULL);
  expect_ok (f, l7, NULL);
  assert_true (S_ISREG (tstat (f, "outlink").st_mode));
  assert_outside_unchanged (f);
}

static void
test_symlink_attacks (void **state)
{
  symlink_attacks (*state);
}

static void
test_symlink_attacks_fallback (void **state)
{
  ib_unpack_set_openat2 (false);
  symlink_attacks (*state);
}

static void
test_whiteouts_fallback (void **state)
{
  ib_unpack_set_openat2 (false);
  test_whiteouts (state);
}

static void
test_bomb (void **state)
{
  struct fx *f = *state;
  cleanup_free char *l = layer_path (f);
  struct archive *a = tw_open (l, C_GZIP);
  struct archive_entry *e = archive_entry_new ();
  archive_entry_set_pathname (e, "zeros");
  archive_entry_set_filetype (e, AE_IFREG);
  archive_entry_set_perm (e, 0644);
  archive_entry_set_size (e, 32 << 20);
  assert_int_equal (archive_write_header (a, e), ARCHIVE_OK);
  archive_entry_free (e);
  cleanup_free char *zeros = xmalloc (1 << 20);
  for (int i = 0; i < 32; i++)
    assert_int_equal (archive_write_data (a, zeros, 1 << 20), 1 << 20);
  tw_close (a);
  struct stat st;
  assert_int_equal (stat (l, &st), 0);
  assert_true (st.st_size < (1 << 20));

  ib_unpack_set_max_bytes (1 << 20);
  ib_error_t err = NULL;
  assert_int_equal (ib_unpack_layer (l, f->target, NULL, NULL, &err), -1);
  assert_int_equal (err->status, EFBIG);
  assert_non_null (strstr (err->msg, "limit of 1048576 bytes"));
  ib_error_free (&err);
  assert_outside_unchanged (f);

  setenv ("IMGBUILD_MAX_LAYER_BYTES", "2097152", 1);
  ib_unpack_set_max_bytes (0);
  assert_int_equal (ib_unpack_max_bytes (), 2097152);
  expect_fail (f, l, "limit of 2097152 bytes");
  unsetenv ("IMGBUILD_MAX_LAYER_BYTES");
  assert_int_equal (ib_unpack_max_bytes (), 64ULL << 30);
  expect_ok (f, l, NULL);
  assert_int_equal (tstat (f, "zeros").st_size, 32 << 20);
}

static void
test_sparse_and_xattr (void **state)
{
  struct fx *f = *state;
  cleanup_free char *l = layer_path (f);
  struct archive *a = tw_open (l, C_NONE);
  struct archive_entry *e = archive_entry_new ();
  archive_entry_set_pathname (e, "sparse");
  archive_entry_set_filetype (e, AE_IFREG);
  archive_entry_set_perm (e, 0644);
  archive_entry_set_size (e, 1 << 20);
  archive_entry_sparse_add_entry (e, 0, 4);
  archive_entry_sparse_add_entry (e, 65536, 4);
  archive_entry_xattr_add_entry (e, "user.test", "val", 3);
  archive_entry_xattr_add_entry (e, "trusted.nope", "val", 3);
  assert_int_equal (archive_write_header (a, e), ARCHIVE_OK);
  /* the writer takes the whole logical content and skips the holes */
  cleanup_free char *content = xmalloc (1 << 20);
  memcpy (content, "ABCD", 4);
  memcpy (content + 65536, "EFGH", 4);
  assert_int_equal (archive_write_data (a, content, 1 << 20), 1 << 20);
  archive_entry_free (e);
  tw_close (a);
  struct stat lst;
  assert_int_equal (stat (l, &lst), 0);
  assert_true (lst.st_size < 65536); /* really sparse in the tar */
  expect_ok (f, l, NULL);
  cleanup_free char *data = NULL;
  size_t len = 0;
  cleanup_free char *p = tpath (f, "sparse");
  ib_error_t err = NULL;
  assert_int_equal (ib_read_file (p, &data, &len, &err), 0);
  assert_int_equal (len, 1 << 20);
  assert_memory_equal (data, "ABCD", 4);
  assert_memory_equal (data + 4, "\0\0\0\0", 4);
  assert_memory_equal (data + 65536, "EFGH", 4);
  char v[16] = { 0 };
  ssize_t n = getxattr (p, "user.test", v, sizeof v);
  if (n >= 0)
    assert_string_equal (v, "val");
  else
    assert_true (errno == ENOTSUP || errno == ENODATA);
  assert_true (getxattr (p, "trusted.nope", v, sizeof v) < 0);
}

/* security.capability is applied where the kernel lets us (root outside a
 * user namespace: as written; an unprivileged caller: EPERM, the layer still
 * unpacks, with one warning); trusted.* never. */
static void
test_file_capability (void **state)
{
  struct fx *f = *state;
  /* cap_net_bind_service+ep: struct vfs_cap_data, revision 2 */
  const uint32_t cap[5] = { 0x02000001, 1u << 10, 0, 0, 0 };
  cleanup_free char *l = layer_path (f);
  struct archive *a = tw_open (l, C_NONE);
  const char *names[] = { "cap1", "cap2" };
  for (int i = 0; i < 2; i++)
    {
      struct archive_entry *e = archive_entry_new ();
      archive_entry_set_pathname (e, names[i]);
      archive_entry_set_filetype (e, AE_IFREG);
      archive_entry_set_perm (e, 0755);
      archive_entry_set_size (e, 0);
      archive_entry_xattr_add_entry (e, "security.capability", cap, sizeof cap);
      archive_entry_xattr_add_entry (e, "trusted.nope", "val", 3);
      assert_int_equal (archive_write_header (a, e), ARCHIVE_OK);
      archive_entry_free (e);
    }
  tw_close (a);
  expect_ok (f, l, NULL);
  cleanup_free char *p = tpath (f, "cap1");
  unsigned char v[64];
  ssize_t n = getxattr (p, "security.capability", v, sizeof v);
  if (geteuid () == 0 && n < 0)
    assert_int_equal (errno, ENOTSUP); /* a filesystem without xattrs */
  else if (geteuid () == 0)
    {
      assert_int_equal (n, sizeof cap);
      assert_memory_equal (v, cap, sizeof cap);
    }
  else
    assert_true (n < 0);
  assert_true (getxattr (p, "trusted.nope", v, sizeof v) < 0);
}

/* An entry for an existing directory replaces the user xattrs a lower
 * layer set on it. */
static void
test_dir_entry_replaces_xattrs (void **state)
{
  struct fx *f = *state;
  const char *names[] = { "user.old", "user.new" };
  for (int i = 0; i < 2; i++)
    {
      cleanup_free char *l = layer_path (f);
      struct archive *a = tw_open (l, C_NONE);
      struct archive_entry *e = archive_entry_new ();
      archive_entry_set_pathname (e, "d");
      archive_entry_set_filetype (e, AE_IFDIR);
      archive_entry_set_perm (e, 0755);
      archive_entry_xattr_add_entry (e, names[i], "v", 1);
      assert_int_equal (archive_write_header (a, e), ARCHIVE_OK);
      archive_entry_free (e);
      tw_close (a);
      expect_ok (f, l, NULL);
    }
  cleanup_free char *p = tpath (f, "d");
  char v[16];
  if (getxattr (p, "user.new", v, sizeof v) < 0)
    {
      assert_int_equal (errno, ENOTSUP); /* a filesystem without user xattrs */
      return;
    }
  assert_true (getxattr (p, "user.old", v, sizeof v) < 0);
}

/* A directory the layer touched, then replaced by a hardlink (no new
 * inode): directories made after it (at the freed inode, where the
 * filesystem reuses it) still get their own entries' metadata. */
static void
test_dir_inode_reused (void **state)
{
  struct fx *f = *state;
  cleanup_free char *l1 = make_layer (f, C_NONE, "d:a", "f:other=o", NULL);
  expect_ok (f, l1, NULL);
  cleanup_free char *l2 = make_layer (f, C_NONE, "f:a/y=2", "h:a>other", "d:b", "d:c", "d:d",
                                      NULL);
  expect_ok (f, l2, NULL);
  assert_true (S_ISREG (tstat (f, "a").st_mode));
  const char *dirs[] = { "b", "c", "d" };
  for (int i = 0; i < 3; i++)
    {
      struct stat st = tstat (f, dirs[i]);
      assert_int_equal (st.st_mode & 07777, 0755);
      assert_int_equal (st.st_mtime, MTIME);
    }
}

/* The "./" entry gives the target its mode and mtime (umoci and Docker
 * apply it too). */
static void
test_root_entry (void **state)
{
  struct fx *f = *state;
  cleanup_free char *l = layer_path (f);
  struct archive *a = tw_open (l, C_NONE);
  tw_dir (a, "./", 0750);
  tw_file (a, "./file", 0644, "x");
  tw_close (a);
  expect_ok (f, l, NULL);
  struct stat st;
  assert_int_equal (stat (f->target, &st), 0);
  assert_int_equal (st.st_mode & 07777, 0750);
  assert_int_equal (st.st_mtime, MTIME);
  assert_true (texists (f, "file"));
}

/* A directory of a lower layer that a layer adds to, or removes from,
 * without an entry for it keeps its mtime. */
static void
test_lower_dir_mtime_kept (void **state)
{
  struct fx *f = *state;
  cleanup_free char *l1 = make_layer (f, C_NONE, "d:dir", "f:dir/old=1", "d:dir2", "f:dir2/a=a",
                                      "d:dir3", "l:link>dir3", NULL);
  expect_ok (f, l1, NULL);
  assert_int_equal (tstat (f, "dir").st_mtime, MTIME);
  cleanup_free char *l2 = make_layer (f, C_NONE, "f:dir/new=2", "f:dir2/.wh.a=",
                                      "f:top/implicit/file=3", "f:link/through-symlink=4", NULL);
  expect_ok (f, l2, NULL);
  assert_true (texists (f, "dir/new") && !texists (f, "dir2/a"));
  assert_true (texists (f, "dir3/through-symlink") && S_ISLNK (tstat (f, "link").st_mode));
  assert_int_equal (tstat (f, "dir").st_mtime, MTIME);
  assert_int_equal (tstat (f, "dir2").st_mtime, MTIME);
  assert_int_equal (tstat (f, "dir3").st_mtime, MTIME);
}

/* ---------------------------------------------------------------------- */

static void
test_copy_tree (void **state)
{
  struct fx *f = *state;
  cleanup_free char *l = layer_path (f);
  struct archive *a = tw_open (l, C_NONE);
  tw_dir (a, "d/", 0750);
  tw_file (a, "d/f", 04755, "data");
  tw_hardlink (a, "d/h", "d/f");
  tw_symlink (a, "d/s", "/nowhere");
  tw_dir (a, "ro/", 0555);
  tw_file (a, "ro/secret", 0, "secret");
  tw_entry (a, "p", AE_IFIFO, 0640, NULL, NULL, NULL, getuid ());
  tw_close (a);
  expect_ok (f, l, NULL);

  cleanup_free char *dst = xasprintf ("%s/copy", f->layers);
  ib_error_t err = NULL;
  if (ib_copy_tree (f->target, dst, &err) < 0)
    fail_msg ("%s", err->msg);
  cleanup_free char *df = xasprintf ("%s/d/f", dst), *dh = xasprintf ("%s/d/h", dst),
                     *ds = xasprintf ("%s/d/s", dst), *dd = xasprintf ("%s/d", dst),
                     *dsec = xasprintf ("%s/ro/secret", dst), *dro = xasprintf ("%s/ro", dst),
                     *dp = xasprintf ("%s/p", dst);
  struct stat a1, a2, s;
  assert_int_equal (lstat (df, &a1), 0);
  assert_int_equal (lstat (dh, &a2), 0);
  assert_int_equal (a1.st_ino, a2.st_ino);
  assert_int_equal (a1.st_nlink, 2);
  assert_int_equal (a1.st_mode & 07777, 04755);
  assert_int_equal (a1.st_mtime, MTIME);
  assert_int_equal (lstat (ds, &s), 0);
  assert_true (S_ISLNK (s.st_mode));
  assert_int_equal (lstat (dd, &s), 0);
  assert_int_equal (s.st_mode & 07777, 0750);
  assert_int_equal (s.st_mtime, MTIME);
  assert_int_equal (lstat (dsec, &s), 0);
  assert_int_equal (s.st_mode & 07777, 0);
  assert_int_equal (s.st_size, 6);
  assert_int_equal (lstat (dro, &s), 0);
  assert_int_equal (s.st_mode & 07777, 0555);
  assert_int_equal (lstat (dp, &s), 0);
  assert_true (S_ISFIFO (s.st_mode));
  /* source untouched */
  assert_int_equal (tstat (f, "ro/secret").st_mode & 07777, 0);
  /* dst must not exist */
  assert_int_equal (ib_copy_tree (f->target, dst, &err), -1);
  ib_error_free (&err);
}

/* A sparse file's copy keeps its holes (and its content). */
static void
test_copy_tree_sparse (void **state)
{
  struct fx *f = *state;
  cleanup_free char *src = tpath (f, "sparse"), *hole = tpath (f, "all-hole");
  int fd = open (src, O_WRONLY | O_CREAT | O_EXCL, 0644);
  assert_true (fd >= 0);
  assert_int_equal (pwrite (fd, "ABCD", 4, 4 << 20), 4);
  assert_int_equal (ftruncate (fd, 16 << 20), 0);
  close (fd);
  fd = open (hole, O_WRONLY | O_CREAT | O_EXCL, 0644);
  assert_true (fd >= 0);
  assert_int_equal (ftruncate (fd, 1 << 20), 0);
  close (fd);
  cleanup_free char *dst = xasprintf ("%s/copy", f->layers);
  ib_error_t err = NULL;
  if (ib_copy_tree (f->target, dst, &err) < 0)
    fail_msg ("%s", err->msg);
  cleanup_free char *dsp = xasprintf ("%s/sparse", dst), *dh = xasprintf ("%s/all-hole", dst);
  struct stat s;
  assert_int_equal (stat (dsp, &s), 0);
  assert_int_equal (s.st_size, 16 << 20);
  assert_true (s.st_blocks * 512 < (1 << 20));
  assert_int_equal (stat (dh, &s), 0);
  assert_int_equal (s.st_size, 1 << 20);
  assert_true (s.st_blocks * 512 < (1 << 20));
  cleanup_free char *data = NULL;
  size_t len = 0;
  assert_int_equal (ib_read_file (dsp, &data, &len, &err), 0);
  assert_int_equal (len, 16 << 20);
  assert_memory_equal (data + (4 << 20), "ABCD", 4);
  assert_int_equal (data[0] | data[(4 << 20) - 1] | data[(16 << 20) - 1], 0);
}

/* A tar (in memory) holding big/file: 3 MiB of varied bytes, so that the
 * decoder hands over several pipe buffers. */
static unsigned char *
big_tar (size_t *len, unsigned char **content, size_t *content_len)
{
  size_t n = 3u << 20;
  unsigned char *data = xmalloc (n);
  uint32_t x = 12345;
  for (size_t i = 0; i < n; i++)
    {
      x = x * 1103515245u + 12345u;
      data[i] = (unsigned char) ((x >> 16) % 17 + 'a');
    }
  size_t cap = n + (64 << 10), used = 0;
  unsigned char *buf = xmalloc (cap);
  struct archive *a = archive_write_new ();
  assert_int_equal (archive_write_set_format_pax_restricted (a), ARCHIVE_OK);
  assert_int_equal (archive_write_open_memory (a, buf, cap, &used), ARCHIVE_OK);
  struct archive_entry *e = archive_entry_new ();
  archive_entry_set_pathname (e, "big/file");
  archive_entry_set_filetype (e, AE_IFREG);
  archive_entry_set_perm (e, 0644);
  archive_entry_set_size (e, (la_int64_t) n);
  assert_int_equal (archive_write_header (a, e), ARCHIVE_OK);
  assert_int_equal (archive_write_data (a, data, n), (la_ssize_t) n);
  archive_entry_free (e);
  tw_close (a);
  *len = used;
  *content = data;
  *content_len = n;
  return buf;
}

/* gzip members (RFC 1952) of in[0..len), split at `split` into two members
 * when split < len. */
static unsigned char *
gzip_members (const unsigned char *in, size_t len, size_t split, size_t *out_len)
{
  size_t cap = len + 4096, used = 0;
  unsigned char *out = xmalloc (cap);
  size_t starts[2] = { 0, split }, ends[2] = { split, len };
  for (int m = 0; m < 2; m++)
    {
      if (starts[m] >= ends[m])
        continue;
      z_stream z = { 0 };
      assert_int_equal (deflateInit2 (&z, 6, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY), Z_OK);
      z.next_in = (unsigned char *) in + starts[m];
      z.avail_in = (uInt) (ends[m] - starts[m]);
      z.next_out = out + used;
      z.avail_out = (uInt) (cap - used);
      assert_int_equal (deflate (&z, Z_FINISH), Z_STREAM_END);
      used = cap - z.avail_out;
      deflateEnd (&z);
    }
  *out_len = used;
  return out;
}

struct mem_reader
{
  const unsigned char *data;
  size_t len, pos, step;
  size_t fail_at; /* 0: never */
};

static ssize_t
mem_read (void *ud, void *buf, size_t len, ib_error_t *err)
{
  struct mem_reader *m = ud;
  if (m->fail_at && m->pos >= m->fail_at)
    return ib_error_set (err, ECONNRESET, "connection lost at byte %zu", m->pos);
  size_t n = m->len - m->pos;
  if (n > len)
    n = len;
  if (n > m->step)
    n = m->step;
  memcpy (buf, m->data + m->pos, n);
  m->pos += n;
  return (ssize_t) n;
}

static void
stream_case (struct fx *f, const unsigned char *data, size_t len, size_t step, size_t fail_at,
             const char *want_error, const char *want_diff_id, const unsigned char *content,
             size_t content_len)
{
  static int k;
  cleanup_free char *dest = xasprintf ("%s/s%d", f->target, k++);
  assert_int_equal (mkdir (dest, 0755), 0);
  struct mem_reader m = { data, len, 0, step, fail_at };
  char id[IB_DIGEST_LEN];
  ib_error_t err = NULL;
  int r = ib_unpack_layer_stream ("mem", mem_read, &m, dest, id, NULL, &err);
  if (want_error)
    {
      assert_int_equal (r, -1);
      assert_non_null (err);
      if (strstr (err->msg, want_error) == NULL)
        fail_msg ("error '%s' lacks '%s'", err->msg, want_error);
      assert_non_null (strstr (err->msg, "unpack layer mem"));
      ib_error_free (&err);
      return;
    }
  if (r < 0)
    fail_msg ("%s", err->msg);
  assert_string_equal (id, want_diff_id);
  cleanup_free char *p = xasprintf ("%s/big/file", dest);
  cleanup_free char *got = NULL;
  size_t got_len = 0;
  assert_int_equal (ib_read_file (p, &got, &got_len, &err), 0);
  assert_int_equal (got_len, content_len);
  assert_memory_equal (got, content, content_len);
}

/* The streaming reader: byte-sized reads, multi-member gzip, truncated and
 * corrupt gzip, a reader that fails midway; diff_id always that of the tar. */
static void
test_stream (void **state)
{
  struct fx *f = *state;
  size_t tar_len, content_len;
  cleanup_free unsigned char *content = NULL;
  cleanup_free unsigned char *tar = big_tar (&tar_len, &content, &content_len);
  char tar_id[IB_DIGEST_LEN];
  ib_digest_buf (tar, tar_len, tar_id);

  size_t gz_len, gz2_len;
  cleanup_free unsigned char *gz = gzip_members (tar, tar_len, tar_len, &gz_len);
  cleanup_free unsigned char *gz2 = gzip_members (tar, tar_len, tar_len / 3, &gz2_len);

  stream_case (f, tar, tar_len, 1 << 20, 0, NULL, tar_id, content, content_len);
  stream_case (f, gz, gz_len, 7, 0, NULL, tar_id, content, content_len);
  stream_case (f, gz, gz_len, 1 << 20, 0, NULL, tar_id, content, content_len);
  stream_case (f, gz2, gz2_len, 4093, 0, NULL, tar_id, content, content_len);
  stream_case (f, gz, gz_len / 2, 65536, 0, "gzip stream is truncated", NULL, NULL, 0);
  stream_case (f, gz, gz_len, 65536, gz_len / 2, "connection lost at byte", NULL, NULL, 0);
  /* the CRC32 in the gzip trailer (RFC 1952 2.3.1), one bit flipped */
  gz[gz_len - 8] ^= 1;
  stream_case (f, gz, gz_len, 65536, 0, "checksum mismatch", NULL, NULL, 0);
  assert_outside_unchanged (f);
}

/* A tar (in memory) of `n` small files many/fNNNNN (600 bytes each): a
 * stream whose writing is much slower than its decoding. */
static unsigned char *
many_files_tar (size_t n, size_t *len)
{
  size_t cap = n * 2048 + (64 << 10), used = 0;
  unsigned char *buf = xmalloc (cap);
  struct archive *a = archive_write_new ();
  assert_int_equal (archive_write_set_format_pax_restricted (a), ARCHIVE_OK);
  assert_int_equal (archive_write_open_memory (a, buf, cap, &used), ARCHIVE_OK);
  char data[600];
  for (size_t i = 0; i < n; i++)
    {
      char name[32];
      snprintf (name, sizeof name, "many/f%05zu", i);
      memset (data, (int) ('a' + i % 26), sizeof data);
      struct archive_entry *e = archive_entry_new ();
      archive_entry_set_pathname (e, name);
      archive_entry_set_filetype (e, AE_IFREG);
      archive_entry_set_perm (e, 0644);
      archive_entry_set_size (e, (la_int64_t) sizeof data);
      assert_int_equal (archive_write_header (a, e), ARCHIVE_OK);
      assert_int_equal (archive_write_data (a, data, sizeof data), (la_ssize_t) sizeof data);
      archive_entry_free (e);
    }
  tw_close (a);
  *len = used;
  return buf;
}

/* A layer of many small files: creating them is slower than handing the
 * stream over, so the decoder thread takes part of the diff_id hash while
 * the ring is full; the diff_id is still the tar's, every file is there. */
static void
test_stream_hash_shared (void **state)
{
  struct fx *f = *state;
  size_t n = 12000, tar_len;
  cleanup_free unsigned char *tar = many_files_tar (n, &tar_len);
  char tar_id[IB_DIGEST_LEN];
  ib_digest_buf (tar, tar_len, tar_id);
  cleanup_free char *dest = xasprintf ("%s/shared", f->target);
  assert_int_equal (mkdir (dest, 0755), 0);
  struct mem_reader m = { tar, tar_len, 0, 1 << 20, 0 };
  char id[IB_DIGEST_LEN];
  ib_unpack_stats_t st;
  ib_error_t err = NULL;
  if (ib_unpack_layer_stream ("mem", mem_read, &m, dest, id, &st, &err) < 0)
    fail_msg ("%s", err->msg);
  assert_string_equal (id, tar_id);
  assert_int_equal (st.entries, n);
  assert_true (st.decoder_hashed > 0);
  cleanup_free char *last = xasprintf ("%s/many/f%05zu", dest, n - 1);
  struct stat sb;
  assert_int_equal (stat (last, &sb), 0);
  assert_int_equal (sb.st_size, 600);
  assert_outside_unchanged (f);
}

static void
test_rootfs_prepare (void **state)
{
  struct fx *f = *state;
  cleanup_free char *root = xasprintf ("%s/store", f->layers);
  cleanup_free char *blobs = xasprintf ("%s/blobs/sha256", root);
  ib_error_t err = NULL;
  assert_int_equal (ib_mkdir_p (blobs, 0755, &err), 0);
  ib_store_t store = { .root = root, .lock_fd = -1, .gc_fd = -1 };

  cleanup_free char *l1 = make_layer (f, C_GZIP, "f:base=1", "f:gone=x", NULL);
  cleanup_free char *l2 = make_layer (f, C_ZSTD, "f:top=2", "f:.wh.gone", NULL);
  char *digests[3] = { NULL }, *diff_ids[3] = { NULL };
  char *files[2] = { l1, l2 };
  for (int i = 0; i < 2; i++)
    {
      char d[IB_DIGEST_LEN], id[IB_DIGEST_LEN];
      assert_int_equal (ib_digest_file (files[i], d, NULL, &err), 0);
      cleanup_free char *dir = xasprintf ("%s/d%d", f->layers, i);
      assert_int_equal (mkdir (dir, 0755), 0);
      assert_int_equal (ib_unpack_layer (files[i], dir, id, NULL, &err), 0);
      digests[i] = xstrdup (d);
      diff_ids[i] = xstrdup (id);
      cleanup_free char *bp = ib_store_blob_path (&store, d);
      assert_int_equal (rename (files[i], bp), 0);
    }

  cleanup_free char *dest1 = xasprintf ("%s/rootfs1", f->layers);
  if (ib_rootfs_prepare (&store, digests, diff_ids, dest1, true, &err) < 0)
    fail_msg ("%s", err->msg);
  cleanup_free char *p_top = xasprintf ("%s/top", dest1), *p_gone = xasprintf ("%s/gone", dest1);
  struct stat st;
  assert_int_equal (stat (p_top, &st), 0);
  assert_true (stat (p_gone, &st) < 0);

  char chain[IB_DIGEST_LEN];
  ib_chain_id (diff_ids, 1, chain);
  cleanup_free char *snap = xasprintf ("%s/snapshots/%s", root, ib_digest_hex (chain));
  assert_int_equal (stat (snap, &st), 0);
  assert_true (S_ISDIR (st.st_mode));

  /* the snapshot alone suffices now: take the blobs away */
  for (int i = 0; i < 2; i++)
    {
      cleanup_free char *bp = ib_store_blob_path (&store, digests[i]);
      cleanup_free char *keep = xasprintf ("%s.keep", bp);
      assert_int_equal (rename (bp, keep), 0);
    }
  cleanup_free char *dest2 = xasprintf ("%s/rootfs2", f->layers);
  if (ib_rootfs_prepare (&store, digests, diff_ids, dest2, true, &err) < 0)
    fail_msg ("%s", err->msg);
  cleanup_free char *p2 = xasprintf ("%s/top", dest2);
  assert_int_equal (stat (p2, &st), 0);
  /* dest exists already */
  assert_int_equal (ib_rootfs_prepare (&store, digests, diff_ids, dest2, true, &err), -1);
  ib_error_free (&err);
  for (int i = 0; i < 2; i++)
    {
      cleanup_free char *bp = ib_store_blob_path (&store, digests[i]);
      cleanup_free char *keep = xasprintf ("%s.keep", bp);
      assert_int_equal (rename (keep, bp), 0);
    }

  /* a wrong diff_id: error naming the layer, dest removed */
  free (diff_ids[1]);
  diff_ids[1] = xstrdup ("sha256:0000000000000000000000000000000000000000000000000000000000000000");
  cleanup_free char *dest3 = xasprintf ("%s/rootfs3", f->layers);
  assert_int_equal (ib_rootfs_prepare (&store, digests, diff_ids, dest3, true, &err), -1);
  assert_non_null (strstr (err->msg, "diff_id mismatch"));
  assert_non_null (strstr (err->msg, digests[1]));
  ib_error_free (&err);
  assert_true (stat (dest3, &st) < 0);
  for (int i = 0; i < 2; i++)
    {
      free (digests[i]);
      free (diff_ids[i]);
    }
}

int
main (void)
{
  if (getenv ("IB_TEST_DEBUG"))
    ib_verbosity = 2;
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown (test_normal, setup, teardown),
    cmocka_unit_test_setup_teardown (test_whiteouts, setup, teardown),
    cmocka_unit_test_setup_teardown (test_whiteouts_fallback, setup, teardown),
    cmocka_unit_test_setup_teardown (test_compression, setup, teardown),
    cmocka_unit_test_setup_teardown (test_stream, setup, teardown),
    cmocka_unit_test_setup_teardown (test_stream_hash_shared, setup, teardown),
    cmocka_unit_test_setup_teardown (test_bad_names, setup, teardown),
    cmocka_unit_test_setup_teardown (test_symlink_attacks, setup, teardown),
    cmocka_unit_test_setup_teardown (test_symlink_attacks_fallback, setup, teardown),
    cmocka_unit_test_setup_teardown (test_bomb, setup, teardown),
    cmocka_unit_test_setup_teardown (test_sparse_and_xattr, setup, teardown),
    cmocka_unit_test_setup_teardown (test_file_capability, setup, teardown),
    cmocka_unit_test_setup_teardown (test_lower_dir_mtime_kept, setup, teardown),
    cmocka_unit_test_setup_teardown (test_dir_entry_replaces_xattrs, setup, teardown),
    cmocka_unit_test_setup_teardown (test_root_entry, setup, teardown),
    cmocka_unit_test_setup_teardown (test_dir_inode_reused, setup, teardown),
    cmocka_unit_test_setup_teardown (test_copy_tree_sparse, setup, teardown),
    cmocka_unit_test_setup_teardown (test_copy_tree, setup, teardown),
    cmocka_unit_test_setup_teardown (test_rootfs_prepare, setup, teardown),
  };
  return cmocka_run_group_tests (tests, NULL, NULL);
}
