/* tests/unit/test_unpack_side.c — layers unpacked on the side and merged
 * (rootfs/unpack_side.c) against the same layers applied in order
 * (ib_unpack_layer): random stacks of layers over a small set of names,
 * with files, directories (setgid, read-only, with xattrs, after their
 * children), symlinks, hard links, whiteouts, opaque whiteouts and "./",
 * must give the same tree: types, modes, owners, sizes, contents, link
 * targets, mtimes, xattrs and hard-link groups.  Runs as root and as an
 * unprivileged user. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/util.h"
#include "oci/digest.h"
#include "rootfs/unpack.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#define LAYERS 4
#define CASES 300

static uint64_t rng_state;

static unsigned
rnd (unsigned n)
{
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (unsigned) ((rng_state >> 33) % n);
}

/* The names a layer may use: few, so layers meet each other often. */
static const char *const paths[] = {
  "a", "a/b", "a/b/c", "a/b/c/x", "a/x", "a/y", "d", "d/x", "d/e", "d/e/y", "l", "l/x", "usr",
  "usr/lib", "usr/lib/x", "usr/lib/y",
};
#define NPATHS (sizeof paths / sizeof *paths)
static const char *const leaves[] = {
  "a/b/c/x", "a/x", "a/y", "d/x", "d/e/y", "l/x", "usr/lib/x", "usr/lib/y",
};
static const char *const inner[] = { "a", "a/b", "a/b/c", "d", "d/e", "usr", "usr/lib", "l" };

/* Mostly a leaf for a file, an inner name for a directory; now and then
 * the other kind, which replaces what is there. */
static const char *
pick (bool leaf)
{
  if (rnd (12) == 0)
    return paths[rnd (NPATHS)];
  return leaf ? leaves[rnd (8)] : inner[rnd (8)];
}

static void
entry (struct archive *a, const char *name, mode_t type, mode_t perm, const char *data,
       const char *link, bool hard, time_t mtime, bool xattr)
{
  struct archive_entry *e = archive_entry_new ();
  archive_entry_set_pathname (e, name);
  archive_entry_set_filetype (e, type);
  archive_entry_set_perm (e, perm);
  archive_entry_set_mtime (e, mtime, 0);
  archive_entry_set_uid (e, geteuid ());
  archive_entry_set_gid (e, getegid ());
  size_t len = data ? strlen (data) : 0;
  archive_entry_set_size (e, (la_int64_t) len);
  if (link && hard)
    {
      archive_entry_set_hardlink (e, link);
      archive_entry_set_size (e, 0);
      len = 0;
    }
  else if (link)
    archive_entry_set_symlink (e, link);
  if (xattr)
    archive_entry_xattr_add_entry (e, "user.side", name, strlen (name));
  assert_int_equal (archive_write_header (a, e), ARCHIVE_OK);
  if (len)
    assert_int_equal (archive_write_data (a, data, len), (la_ssize_t) len);
  archive_entry_free (e);
}

/* A random layer at `path`; layer 0 is a plain base.  Returns whether it
 * has a whiteout. */
static bool
random_layer (const char *path, int layer)
{
  struct archive *a = archive_write_new ();
  assert_int_equal (archive_write_set_format_pax_restricted (a), ARCHIVE_OK);
  assert_int_equal (archive_write_open_filename (a, path), ARCHIVE_OK);
  static const mode_t dir_modes[] = { 0755, 0755, 0700, 02775, 0555, 01777 };
  static const mode_t file_modes[] = { 0644, 0755, 0600, 04755, 0444 };
  if (layer == 0) /* a base has its directories, as images do */
    for (size_t i = 0; i < 8; i++)
      entry (a, inner[i], AE_IFDIR, i == 7 ? 0755 : dir_modes[rnd (6)], NULL, NULL, false,
             1300000000 + (time_t) i, false);
  if (layer > 0 && rnd (6) == 0)
    entry (a, "./", AE_IFDIR, 0751, NULL, NULL, false, 1500000000 + layer, rnd (2));
  bool whiteouts = layer > 0 && rnd (3) == 0, wrote_whiteout = false;
  const char *last_file = NULL;
  unsigned n = 2 + rnd (layer == 0 ? 12 : 7);
  for (unsigned i = 0; i < n; i++)
    {
      const char *p = pick (true);
      time_t mt = 1400000000 + (time_t) rnd (1000) * 1000;
      char data[64];
      snprintf (data, sizeof data, "%s@%d.%u", p, layer, i);
      unsigned kind = rnd (layer == 0 ? 16 : whiteouts ? 20 : 17);
      if (kind <= 8)
        {
          entry (a, p, AE_IFREG, file_modes[rnd (5)], data, NULL, false, mt, rnd (4) == 0);
          last_file = p;
        }
      else if (kind <= 13)
        entry (a, pick (false), AE_IFDIR, dir_modes[rnd (6)], NULL, NULL, false, mt, rnd (3) == 0);
      else if (kind <= 15)
        {
          static const char *const targets[] = { "usr/lib", "/usr/lib", "a/b", "../d", "nowhere", "a/x" };
          const char *at = rnd (2) ? "l" : rnd (2) ? p : pick (false);
          entry (a, at, AE_IFLNK, 0777, NULL, targets[rnd (rnd (4) ? 4 : 6)], false, mt, false);
        }
      else if (kind == 16)
        {
          /* mostly to a file of this layer, now and then to a lower one */
          const char *to = last_file && rnd (4) ? last_file : leaves[rnd (8)];
          if (strcmp (to, p) != 0)
            entry (a, p, AE_IFREG, 0644, NULL, to, true, mt, false);
        }
      else if (kind <= 18)
        {
          cleanup_free char *dir = xstrdup (p);
          char *slash = strrchr (dir, '/');
          const char *base = slash ? slash + 1 : dir;
          cleanup_free char *wh = slash ? (*slash = '\0', xasprintf ("%s/.wh.%s", dir, base))
                                        : xasprintf (".wh.%s", base);
          entry (a, wh, AE_IFREG, 0644, NULL, NULL, false, mt, false);
          wrote_whiteout = true;
        }
      else
        {
          cleanup_free char *opq = xasprintf ("%s/.wh..wh..opq", pick (false));
          entry (a, opq, AE_IFREG, 0644, NULL, NULL, false, mt, false);
          wrote_whiteout = true;
        }
    }
  assert_int_equal (archive_write_close (a), ARCHIVE_OK);
  archive_write_free (a);
  return wrote_whiteout;
}

/* One line per entry beneath `root` (sorted walk): what a tree is. */
static void
describe (int dfd, const char *rel, time_t recent, ib_buf_t *out, ib_buf_t *inodes)
{
  int fd = openat (dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    {
      ib_buf_printf (out, "%s: unreadable\n", rel);
      return;
    }
  DIR *d = fdopendir (fd);
  assert_non_null (d);
  char *names[256];
  size_t n = 0;
  struct dirent *de;
  while ((de = readdir (d)) != NULL)
    if (strcmp (de->d_name, ".") && strcmp (de->d_name, "..") && n < 256)
      names[n++] = xstrdup (de->d_name);
  for (size_t i = 1; i < n; i++)
    for (size_t j = i; j > 0 && strcmp (names[j - 1], names[j]) > 0; j--)
      {
        char *t = names[j];
        names[j] = names[j - 1];
        names[j - 1] = t;
      }
  for (size_t i = 0; i < n; i++)
    {
      cleanup_free char *p = *rel ? xasprintf ("%s/%s", rel, names[i]) : xstrdup (names[i]);
      struct stat st;
      assert_int_equal (fstatat (dirfd (d), names[i], &st, AT_SYMLINK_NOFOLLOW), 0);
      /* a directory made as a parent has the time of the unpack */
      long mt = st.st_mtime >= recent ? -1 : (long) st.st_mtime;
      ib_buf_printf (out, "%s %o %u:%u %lld %ld", p, (unsigned) st.st_mode, (unsigned) st.st_uid,
                     (unsigned) st.st_gid, S_ISDIR (st.st_mode) ? 0LL : (long long) st.st_size, mt);
      if (S_ISLNK (st.st_mode))
        {
          char t[256];
          ssize_t l = readlinkat (dirfd (d), names[i], t, sizeof t - 1);
          t[l < 0 ? 0 : l] = '\0';
          ib_buf_printf (out, " -> %s", t);
        }
      else
        {
          int f = openat (dirfd (d), names[i], O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
          if (f >= 0)
            {
              char x[256];
              ssize_t xl = fgetxattr (f, "user.side", x, sizeof x - 1);
              if (xl >= 0)
                ib_buf_printf (out, " xattr=%.*s", (int) xl, x);
              if (S_ISREG (st.st_mode))
                {
                  char c[128];
                  ssize_t cl = read (f, c, sizeof c - 1);
                  ib_buf_printf (out, " data=%.*s", (int) (cl < 0 ? 0 : cl), c);
                }
              close (f);
            }
        }
      if (!S_ISDIR (st.st_mode) && st.st_nlink > 1)
        {
          /* hard-link groups by the first path of each inode */
          char key[64];
          snprintf (key, sizeof key, "\n%lu=", (unsigned long) st.st_ino);
          const char *hit = inodes->data ? strstr (inodes->data, key) : NULL;
          if (hit)
            ib_buf_printf (out, " link=%.*s", (int) strcspn (hit + strlen (key), "\n"),
                           hit + strlen (key));
          else
            ib_buf_printf (inodes, "%s%s", key, p);
        }
      ib_buf_printf (out, "\n");
      if (S_ISDIR (st.st_mode))
        {
          int sub = openat (dirfd (d), names[i], O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
          assert_true (sub >= 0);
          describe (sub, p, recent, out, inodes);
          close (sub);
        }
    }
  for (size_t i = 0; i < n; i++)
    free (names[i]);
  closedir (d);
}

static char *
tree_text (const char *root, time_t recent)
{
  ib_buf_t out = { 0 }, inodes = { 0 };
  int fd = open (root, O_PATH | O_DIRECTORY | O_CLOEXEC);
  assert_true (fd >= 0);
  struct stat st;
  assert_int_equal (fstat (fd, &st), 0);
  ib_buf_printf (&out, ". %o %ld\n", (unsigned) st.st_mode,
                 st.st_mtime >= recent ? -1L : (long) st.st_mtime);
  describe (fd, "", recent, &out, &inodes);
  close (fd);
  ib_buf_free (&inodes);
  ib_buf_printf (&out, "%s", "");
  return ib_buf_steal (&out);
}

static void
make_writable_tree (const char *root)
{
  cleanup_free char *cmd = xasprintf ("chmod -R u+rwx '%s' 2>/dev/null", root);
  (void) !system (cmd);
}

static ssize_t
fd_read (void *ud, void *buf, size_t len, ib_error_t *err)
{
  ssize_t n = read (*(int *) ud, buf, len);
  return n < 0 ? ib_error_sys (err, errno, "read") : n;
}

struct counts
{
  unsigned cases, failed_in_order, merged, merged_whiteouts, dependent_side, dependent_merge;
};

static void
one_case (const char *top, struct counts *c)
{
  cleanup_free char *seq = xasprintf ("%s/seq", top);
  cleanup_free char *par = xasprintf ("%s/par", top);
  assert_int_equal (mkdir (seq, 0755), 0);
  assert_int_equal (mkdir (par, 0755), 0);
  char *layers[LAYERS];
  bool has_wh[LAYERS];
  for (int i = 0; i < LAYERS; i++)
    {
      layers[i] = xasprintf ("%s/layer%d.tar", top, i);
      has_wh[i] = random_layer (layers[i], i);
    }
  time_t recent = time (NULL) - 5;
  bool ok = true;
  char ids_seq[LAYERS][IB_DIGEST_LEN], ids_par[LAYERS][IB_DIGEST_LEN];
  for (int i = 0; i < LAYERS && ok; i++)
    {
      ib_error_t err = NULL;
      ok = ib_unpack_layer (layers[i], seq, ids_seq[i], NULL, &err) == 0;
      if (!ok && getenv ("IB_TEST_VERBOSE"))
        fprintf (stderr, "in order: %s\n", err->msg);
      ib_error_free (&err);
    }
  c->cases++;
  if (!ok)
    c->failed_in_order++;
  else
    {
      /* layer 0 in place, the others on the side, all unpacked before
       * the first merge (as at once) */
      ib_error_t err = NULL;
      assert_int_equal (ib_unpack_layer (layers[0], par, ids_par[0], NULL, &err), 0);
      ib_unpack_side_t *side[LAYERS] = { 0 };
      char *sdir[LAYERS] = { 0 };
      for (int i = 1; i < LAYERS; i++)
        {
          sdir[i] = xasprintf ("%s/side%d", top, i);
          assert_int_equal (mkdir (sdir[i], 0700), 0);
          int fd = open (layers[i], O_RDONLY | O_CLOEXEC);
          assert_true (fd >= 0);
          int r = ib_unpack_layer_side (layers[i], fd_read, &fd, sdir[i], ids_par[i], NULL,
                                        &side[i], &err);
          close (fd);
          if (r < 0)
            fail_msg ("side unpack of layer %d failed: %s", i, err->msg);
          if (r == 1)
            c->dependent_side++;
        }
      for (int i = 1; i < LAYERS; i++)
        {
          int r = 1;
          if (side[i])
            {
              r = ib_unpack_side_merge (side[i], par, &err);
              if (r < 0)
                fail_msg ("merge of layer %d failed: %s", i, err->msg);
              if (r == 1)
                c->dependent_merge++;
              else
                {
                  c->merged++;
                  c->merged_whiteouts += has_wh[i];
                }
              ib_unpack_side_free (side[i]);
            }
          if (r == 1)
            {
              int u = ib_unpack_layer (layers[i], par, ids_par[i], NULL, &err);
              if (u < 0)
                fail_msg ("layer %d in order after the side failed: %s", i, err->msg);
            }
          make_writable_tree (sdir[i]);
          ib_rm_rf (sdir[i], NULL);
          free (sdir[i]);
        }
      for (int i = 0; i < LAYERS; i++)
        assert_string_equal (ids_seq[i], ids_par[i]);
      cleanup_free char *a = tree_text (seq, recent);
      cleanup_free char *b = tree_text (par, recent);
      if (strcmp (a, b) != 0)
        {
          fprintf (stderr, "in order:\n%s\nside+merge:\n%s\n", a, b);
          for (int i = 0; i < LAYERS; i++)
            {
              cleanup_free char *cmd = xasprintf ("echo layer %d:; tar -tvf '%s' >&2", i, layers[i]);
              (void) !system (cmd);
            }
          fail_msg ("the trees differ (seed case %u)", c->cases);
        }
    }
  for (int i = 0; i < LAYERS; i++)
    {
      unlink (layers[i]);
      free (layers[i]);
    }
  make_writable_tree (seq);
  make_writable_tree (par);
  ib_rm_rf (seq, NULL);
  ib_rm_rf (par, NULL);
}

static void
test_side_merge_equals_in_order (void **state)
{
  (void) state;
  char top[] = "/tmp/ib-side-XXXXXX";
  assert_non_null (mkdtemp (top));
  struct counts c = { 0 };
  const char *seed = getenv ("IB_TEST_SEED");
  rng_state = seed ? strtoull (seed, NULL, 10) : 24;
  for (int i = 0; i < CASES; i++)
    one_case (top, &c);
  ib_rm_rf (top, NULL);
  fprintf (stderr,
           "side merge: %u cases, %u failed in order (skipped), %u layers merged (%u with "
           "whiteouts), %u dependent on the side, %u at the merge\n",
           c.cases, c.failed_in_order, c.merged, c.merged_whiteouts, c.dependent_side,
           c.dependent_merge);
  /* the cases exercise every path, not only the fallback */
  assert_true (c.failed_in_order < c.cases * 2 / 3);
  assert_true (c.merged > CASES / 2);
  assert_true (c.merged_whiteouts > 20); /* whiteouts are applied before the merge */
  assert_true (c.dependent_side > 10);
  assert_true (c.dependent_merge > 5);
}

/* Layers that do not depend on each other merge (no fallback), and the
 * result is the in-order tree: new and empty directories, files into
 * existing directories, a file replaced, a directory entry over an
 * existing directory (new mode and mtime), a hard link within the layer,
 * whiteouts and an opaque whiteout. */
static void
test_independent_layers_merge (void **state)
{
  (void) state;
  char top[] = "/tmp/ib-side-XXXXXX";
  assert_non_null (mkdtemp (top));
  /* the last layer's whiteouts: a lower file; an opaque directory with
   * the layer's own files before and after it; a directory the layer had
   * already put a file in (only the lower file goes) */
  const char *specs[4][10] = {
    { "d:usr", "d:usr/lib", "f:usr/lib/a", "f:usr/lib/b", "d:etc", "f:etc/conf", NULL },
    { "d:opt", "d:opt/empty", "f:usr/lib/c", "d:usr/share", "f:usr/share/doc", "h:usr/share/doc2>usr/share/doc", NULL },
    { "f:etc/conf", "D:usr/lib", "f:usr/lib/d", "d:var", "d:var/cache", "f:var/cache/old", "d:srv", "f:srv/lower", NULL },
    { "w:usr/lib/.wh.b", "f:usr/lib/e", "f:srv/new", "w:srv/.wh..wh..opq", "f:srv/after", "f:var/cache/x", "w:var/.wh.cache", NULL },
  };
  char *layers[4];
  for (int i = 0; i < 4; i++)
    {
      layers[i] = xasprintf ("%s/layer%d.tar", top, i);
      struct archive *a = archive_write_new ();
      assert_int_equal (archive_write_set_format_pax_restricted (a), ARCHIVE_OK);
      assert_int_equal (archive_write_open_filename (a, layers[i]), ARCHIVE_OK);
      for (int k = 0; specs[i][k]; k++)
        {
          const char *sp = specs[i][k];
          char data[64];
          snprintf (data, sizeof data, "%s in %d", sp + 2, i);
          if (sp[0] == 'f' || sp[0] == 'w')
            entry (a, sp + 2, AE_IFREG, 0644, data, NULL, false, 1400000000 + k, false);
          else if (sp[0] == 'd' || sp[0] == 'D')
            entry (a, sp + 2, AE_IFDIR, sp[0] == 'D' ? 0750 : 0755, NULL, NULL, false,
                   1400000000 + k, sp[0] == 'D');
          else
            {
              cleanup_free char *n = xstrdup (sp + 2);
              char *to = strchr (n, '>');
              *to++ = '\0';
              entry (a, n, AE_IFREG, 0644, NULL, to, true, 1400000000 + k, false);
            }
        }
      assert_int_equal (archive_write_close (a), ARCHIVE_OK);
      archive_write_free (a);
    }
  cleanup_free char *seq = xasprintf ("%s/seq", top);
  cleanup_free char *par = xasprintf ("%s/par", top);
  assert_int_equal (mkdir (seq, 0755), 0);
  assert_int_equal (mkdir (par, 0755), 0);
  ib_error_t err = NULL;
  for (int i = 0; i < 4; i++)
    assert_int_equal (ib_unpack_layer (layers[i], seq, NULL, NULL, &err), 0);
  assert_int_equal (ib_unpack_layer (layers[0], par, NULL, NULL, &err), 0);
  for (int i = 1; i < 4; i++)
    {
      cleanup_free char *sdir = xasprintf ("%s/side%d", top, i);
      assert_int_equal (mkdir (sdir, 0700), 0);
      int fd = open (layers[i], O_RDONLY | O_CLOEXEC);
      ib_unpack_side_t *side = NULL;
      char id[IB_DIGEST_LEN];
      assert_int_equal (ib_unpack_layer_side (layers[i], fd_read, &fd, sdir, id, NULL, &side, &err), 0);
      close (fd);
      assert_int_equal (ib_unpack_side_merge (side, par, &err), 0);
      ib_unpack_side_free (side);
    }
  time_t recent = time (NULL) - 5;
  cleanup_free char *a = tree_text (seq, recent);
  cleanup_free char *b = tree_text (par, recent);
  assert_string_equal (a, b);
  assert_non_null (strstr (b, "opt/empty 40755"));
  assert_non_null (strstr (b, "usr/lib 40750"));
  assert_non_null (strstr (b, "usr/lib/a 100644"));
  assert_non_null (strstr (b, "data=etc/conf in 2"));
  assert_non_null (strstr (b, "usr/share/doc2 100644"));
  assert_non_null (strstr (b, "link=usr/share/doc"));
  assert_null (strstr (b, "\nusr/lib/b "));
  assert_non_null (strstr (b, "\nusr/lib/e "));
  assert_null (strstr (b, "\nsrv/lower "));
  assert_non_null (strstr (b, "\nsrv/new "));
  assert_non_null (strstr (b, "\nsrv/after "));
  assert_null (strstr (b, "\nvar/cache/old "));
  assert_non_null (strstr (b, "\nvar/cache/x "));
  for (int i = 0; i < 4; i++)
    free (layers[i]);
  ib_rm_rf (top, NULL);
}

int
main (void)
{
  if (getenv ("IB_TEST_DEBUG"))
    ib_verbosity = 2;
  const struct CMUnitTest tests[] = {
    cmocka_unit_test (test_independent_layers_merge),
    cmocka_unit_test (test_side_merge_equals_in_order),
  };
  return cmocka_run_group_tests (tests, NULL, NULL);
}
