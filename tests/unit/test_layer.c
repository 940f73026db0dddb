/* tests/unit/test_layer.c — scan + diff + reproducible layer writer.
 *
 * The layers written are read back with libarchive and checked entry by
 * entry; digests are checked against sha256sum / gzip -dc run via popen; a
 * layer unpacked (rootfs/unpack.h) onto a copy of the original tree must
 * give the modified tree. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/util.h"
#include "oci/digest.h"
#include "rootfs/layer.h"
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
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#define SDE 1000

static const ib_layer_opts_t at_sde = { .compression = IB_COMPRESSION_GZIP, .level = -1, .sde = SDE };
static const ib_layer_opts_t keep_mtimes = { .compression = IB_COMPRESSION_GZIP, .level = -1,
                                             .sde = -1 };

struct fx
{
  char *tmp;
  char *a, *b;     /* trees */
  char *out;       /* layer file */
};

static char *const exclude[] = { "proc", "/dev/", NULL };

static int
setup (void **state)
{
  struct fx *f = xmalloc (sizeof *f);
  f->tmp = xstrdup ("/tmp/ib-layer-XXXXXX");
  assert_non_null (mkdtemp (f->tmp));
  f->a = xasprintf ("%s/a", f->tmp);
  f->b = xasprintf ("%s/b", f->tmp);
  f->out = xasprintf ("%s/layer.tar.gz", f->tmp);
  *state = f;
  return 0;
}

static int
teardown (void **state)
{
  struct fx *f = *state;
  ib_error_t err = NULL;
  ib_rm_rf (f->tmp, &err);
  ib_error_free (&err);
  free (f->tmp);
  free (f->a);
  free (f->b);
  free (f->out);
  free (f);
  return 0;
}

static void
put (const char *root, const char *rel, const char *data, mode_t mode)
{
  cleanup_free char *p = xasprintf ("%s/%s", root, rel);
  cleanup_free char *dir = xstrdup (p);
  *strrchr (dir, '/') = '\0';
  ib_error_t err = NULL;
  assert_int_equal (ib_mkdir_p (dir, 0755, &err), 0);
  int fd = open (p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  assert_true (fd >= 0);
  assert_int_equal (write (fd, data, strlen (data)), (ssize_t) strlen (data));
  assert_int_equal (fchmod (fd, mode), 0);
  close (fd);
}

static void
mkd (const char *root, const char *rel, mode_t mode)
{
  cleanup_free char *p = xasprintf ("%s/%s", root, rel);
  ib_error_t err = NULL;
  assert_int_equal (ib_mkdir_p (p, 0755, &err), 0);
  assert_int_equal (chmod (p, mode), 0);
}

static void
rm (const char *root, const char *rel)
{
  cleanup_free char *p = xasprintf ("%s/%s", root, rel);
  ib_error_t err = NULL;
  assert_int_equal (ib_rm_rf (p, &err), 0);
}

static void
make_base (const char *root)
{
  mkd (root, "", 0755);
  mkd (root, "dir/sub", 0755);
  put (root, "dir/sub/keep.txt", "keep", 0644);
  put (root, "same.txt", "aaaa", 0644);
  put (root, "mode.txt", "mode", 0644);
  put (root, "gone.txt", "gone", 0644);
  put (root, "deltree/sub/x", "x", 0644);
  put (root, "unchanged.txt", "same", 0644);
  put (root, "typechg/c", "child", 0644);
  put (root, "f2d", "file", 0644);
  put (root, "proc/cpuinfo", "excluded", 0644);
  mkd (root, "dev", 0755);
}

static void
modify (const char *root)
{
  put (root, "new.txt", "new", 0644);
  put (root, "same.txt", "bbbb", 0644);
  cleanup_free char *m = xasprintf ("%s/mode.txt", root);
  assert_int_equal (chmod (m, 0600), 0);
  rm (root, "gone.txt");
  rm (root, "deltree");
  cleanup_free char *nl = xasprintf ("%s/newlink", root);
  assert_int_equal (symlink ("same.txt", nl), 0);
  put (root, "hl1", "linked", 0755);
  cleanup_free char *h1 = xasprintf ("%s/hl1", root), *h2 = xasprintf ("%s/hl2", root);
  assert_int_equal (link (h1, h2), 0);
  put (root, "dir/sub/added.txt", "added", 0644);
  rm (root, "typechg");
  put (root, "typechg", "now a file", 0644);
  rm (root, "f2d");
  put (root, "f2d/x", "in dir", 0644);
  put (root, "caf\xc3\xa9", "utf-8 name", 0644);
  put (root, "bin\xff", "not utf-8", 0644);
  put (root, "proc/new", "excluded", 0644);
  put (root, "dev/null", "excluded", 0644);
}

/* "name type[>link]" per entry, in tar order; asserts the reproducibility
 * properties of each entry on the way. */
static char **
read_layer (const char *path, int64_t sde)
{
  struct archive *a = archive_read_new ();
  archive_read_support_filter_gzip (a);
  archive_read_support_format_tar (a);
  assert_int_equal (archive_read_open_filename (a, path, 10240), ARCHIVE_OK);
  char **v = NULL;
  struct archive_entry *e;
  int r;
  while ((r = archive_read_next_header (a, &e)) == ARCHIVE_OK)
    {
      const char *name = archive_entry_pathname (e);
      char type = 'f';
      const char *target = NULL;
      if (archive_entry_hardlink (e))
        {
          type = 'h';
          target = archive_entry_hardlink (e);
        }
      else if (archive_entry_filetype (e) == AE_IFDIR)
        type = 'd';
      else if (archive_entry_filetype (e) == AE_IFLNK)
        {
          type = 'l';
          target = archive_entry_symlink (e);
        }
      cleanup_free char *s = target ? xasprintf ("%s %c>%s", name, type, target)
                                    : xasprintf ("%s %c", name, type);
      ib_strv_push (&v, s);
      assert_false (archive_entry_atime_is_set (e));
      assert_false (archive_entry_ctime_is_set (e));
      assert_false (archive_entry_birthtime_is_set (e));
      const char *un = archive_entry_uname (e), *gn = archive_entry_gname (e);
      assert_true (un == NULL || *un == '\0');
      assert_true (gn == NULL || *gn == '\0');
      assert_true (name[0] != '/' && strncmp (name, "./", 2) != 0);
      if (sde >= 0)
        assert_true (archive_entry_mtime (e) <= sde);
      assert_int_equal (archive_entry_mtime_nsec (e), 0);
      if (strstr (name, ".wh.") == NULL)
        assert_int_equal (archive_entry_uid (e), geteuid ());
    }
  assert_int_equal (r, ARCHIVE_EOF);
  archive_read_free (a);
  return v;
}

static char *
run (const char *cmd)
{
  FILE *p = popen (cmd, "r");
  assert_non_null (p);
  char buf[256] = { 0 };
  assert_non_null (fgets (buf, sizeof buf, p));
  assert_int_equal (pclose (p), 0);
  char *sp = strchr (buf, ' ');
  if (sp)
    *sp = '\0';
  return xasprintf ("sha256:%s", buf);
}

static void
check_digests (const char *path, const ib_layer_result_t *res)
{
  cleanup_free char *c1 = xasprintf ("sha256sum '%s'", path);
  cleanup_free char *c2 = xasprintf ("gzip -dc '%s' | sha256sum", path);
  cleanup_free char *d = run (c1), *id = run (c2);
  assert_string_equal (res->digest, d);
  assert_string_equal (res->diff_id, id);
  struct stat st;
  assert_int_equal (stat (path, &st), 0);
  assert_int_equal (res->size, (uint64_t) st.st_size);
  /* gzip header: no FNAME/FCOMMENT/FEXTRA, mtime 0, OS unix */
  unsigned char h[10];
  FILE *fp = fopen (path, "rb");
  assert_non_null (fp);
  assert_int_equal (fread (h, 1, 10, fp), 10);
  fclose (fp);
  assert_int_equal (h[0], 0x1f);
  assert_int_equal (h[1], 0x8b);
  assert_int_equal (h[3], 0);
  assert_int_equal (h[4] | h[5] | h[6] | h[7], 0);
  assert_int_equal (h[9], 3);
}

static void
test_diff (void **state)
{
  struct fx *f = *state;
  make_base (f->a);
  ib_error_t err = NULL;
  ib_fs_scan_t *scan = NULL;
  if (ib_fs_scan (f->a, exclude, &scan, &err) < 0)
    fail_msg ("%s", err->msg);
  modify (f->a);
  ib_layer_result_t res;
  if (ib_layer_write_diff (f->a, scan, exclude, f->out, &at_sde, &res, &err) < 0)
    fail_msg ("%s", err->msg);
  ib_fs_scan_free (scan);

  const char *expected[] = {
    ".wh.deltree f",
    ".wh.gone.txt f",
    "bin\xff f",
    "caf\xc3\xa9 f",
    "dir/ d",
    "dir/sub/ d",
    "dir/sub/added.txt f",
    "f2d/ d",
    "f2d/x f",
    "hl1 f",
    "hl2 h>hl1",
    "mode.txt f",
    "new.txt f",
    "newlink l>same.txt",
    "same.txt f",
    "typechg f",
    NULL,
  };
  cleanup_strv char **got = read_layer (f->out, SDE);
  size_t n = ib_strv_len (got);
  for (size_t i = 0; i < n || expected[i]; i++)
    {
      if (i >= n || expected[i] == NULL)
        fail_msg ("entry %zu: got \"%s\", expected \"%s\"", i, i < n ? got[i] : "(end)",
                  expected[i] ? expected[i] : "(end)");
      assert_string_equal (got[i], expected[i]);
    }
  assert_int_equal (res.entries, n);
  check_digests (f->out, &res);

  /* whiteouts: empty regular files, mtime = SOURCE_DATE_EPOCH; modes exact */
  struct archive *a = archive_read_new ();
  archive_read_support_filter_gzip (a);
  archive_read_support_format_tar (a);
  assert_int_equal (archive_read_open_filename (a, f->out, 10240), ARCHIVE_OK);
  struct archive_entry *e;
  while (archive_read_next_header (a, &e) == ARCHIVE_OK)
    {
      const char *name = archive_entry_pathname (e);
      assert_int_equal (archive_entry_mtime (e), SDE);
      if (strncmp (name, ".wh.", 4) == 0)
        assert_int_equal (archive_entry_size (e), 0);
      if (strcmp (name, "mode.txt") == 0)
        assert_int_equal (archive_entry_perm (e), 0600);
      if (strcmp (name, "hl1") == 0)
        assert_int_equal (archive_entry_perm (e), 0755);
      if (strcmp (name, "same.txt") == 0)
        {
          char buf[8] = { 0 };
          assert_int_equal (archive_read_data (a, buf, sizeof buf), 4);
          assert_string_equal (buf, "bbbb");
        }
    }
  archive_read_free (a);
}

static void
make_repro (const char *root)
{
  mkd (root, "", 0755);
  mkd (root, "usr/bin", 0755);
  mkd (root, "usr/lib/x", 0700);
  put (root, "usr/bin/tool", "#!/bin/sh\necho hi\n", 04755);
  put (root, "usr/lib/x/lib.so", "ELF........", 0644);
  put (root, "etc/config", "a=b\n", 0600);
  cleanup_free char *h1 = xasprintf ("%s/usr/bin/tool", root), *h2 = xasprintf ("%s/usr/bin/tool2", root);
  assert_int_equal (link (h1, h2), 0);
  cleanup_free char *s = xasprintf ("%s/usr/bin/sh", root);
  assert_int_equal (symlink ("tool", s), 0);
  cleanup_free char *longp = xstrdup ("very/long/path/that/needs/more/than/a/hundred/bytes/"
                                      "in/the/tar/header/so/pax/records/are/used/file.txt");
  put (root, longp, "long", 0644);
}

static void
test_reproducible (void **state)
{
  struct fx *f = *state;
  make_repro (f->a);
  sleep (1);
  make_repro (f->b);
  ib_error_t err = NULL;
  ib_layer_result_t r1, r2, r3, r4;
  cleanup_free char *o2 = xasprintf ("%s/l2.tar.gz", f->tmp);
  assert_int_equal (ib_layer_write_diff (f->a, NULL, NULL, f->out, &at_sde, &r1, &err), 0);
  assert_int_equal (ib_layer_write_diff (f->b, NULL, NULL, o2, &at_sde, &r2, &err), 0);
  assert_string_equal (r1.digest, r2.digest);
  assert_string_equal (r1.diff_id, r2.diff_id);
  assert_int_equal (r1.size, r2.size);
  assert_int_equal (r1.entries, 30);
  check_digests (f->out, &r1);
  cleanup_strv char **got = read_layer (o2, SDE);
  assert_string_equal (got[0], "etc/ d");
  assert_string_equal (got[4], "usr/bin/sh l>tool");
  assert_string_equal (got[6], "usr/bin/tool2 h>usr/bin/tool");

  /* against an empty scan: the same as no scan */
  cleanup_free char *empty = xasprintf ("%s/empty", f->tmp);
  assert_int_equal (mkdir (empty, 0755), 0);
  ib_fs_scan_t *scan = NULL;
  assert_int_equal (ib_fs_scan (empty, NULL, &scan, &err), 0);
  assert_int_equal (ib_layer_write_diff (f->a, scan, NULL, o2, &at_sde, &r3, &err), 0);
  ib_fs_scan_free (scan);
  assert_string_equal (r1.digest, r3.digest);

  /* without SOURCE_DATE_EPOCH the mtimes (a second apart) show */
  assert_int_equal (ib_layer_write_diff (f->a, NULL, NULL, o2, &keep_mtimes, &r3, &err), 0);
  assert_int_equal (ib_layer_write_diff (f->b, NULL, NULL, o2, &keep_mtimes, &r4, &err), 0);
  assert_string_not_equal (r3.diff_id, r4.diff_id);
}

static void
test_unchanged (void **state)
{
  struct fx *f = *state;
  make_base (f->a);
  ib_error_t err = NULL;
  ib_fs_scan_t *scan = NULL;
  assert_int_equal (ib_fs_scan (f->a, exclude, &scan, &err), 0);
  put (f->a, "proc/more", "excluded", 0644);
  ib_layer_result_t res;
  assert_int_equal (ib_layer_write_diff (f->a, scan, exclude, f->out, &at_sde, &res, &err), 0);
  ib_fs_scan_free (scan);
  assert_int_equal (res.entries, 0);
  cleanup_strv char **got = read_layer (f->out, SDE);
  assert_null (got);
  check_digests (f->out, &res);

  /* a scan taken with exclusions that the diff does not share: the paths
   * the scan never saw show as added, nothing is whited out */
  assert_int_equal (ib_fs_scan (f->a, NULL, &scan, &err), 0);
  assert_int_equal (ib_layer_write_diff (f->a, scan, exclude, f->out, &at_sde, &res, &err), 0);
  ib_fs_scan_free (scan);
  assert_int_equal (res.entries, 0);

  /* "DIR/" + "*": the directory is written, what is under it is not */
  char *const contents_only[] = { "/proc/*", "dev/*", NULL };
  assert_int_equal (ib_layer_write_diff (f->a, NULL, contents_only, f->out, &at_sde, &res, &err), 0);
  cleanup_strv char **got2 = read_layer (f->out, SDE);
  bool proc = false, dev = false;
  for (size_t i = 0; got2 && got2[i]; i++)
    {
      assert_true (strncmp (got2[i], "proc/", 5) != 0 || strcmp (got2[i], "proc/ d") == 0);
      assert_true (strncmp (got2[i], "dev/", 4) != 0 || strcmp (got2[i], "dev/ d") == 0);
      proc |= strcmp (got2[i], "proc/ d") == 0;
      dev |= strcmp (got2[i], "dev/ d") == 0;
    }
  assert_true (proc && dev);
}

/* Sorted "path type mode size data|target" lines of a tree, without the
 * excluded paths. */
static void
describe (int dfd, const char *rel, char ***out)
{
  DIR *d = fdopendir (dup (dfd));
  assert_non_null (d);
  struct dirent *de;
  while ((de = readdir (d)) != NULL)
    {
      if (!strcmp (de->d_name, ".") || !strcmp (de->d_name, ".."))
        continue;
      cleanup_free char *p = *rel ? xasprintf ("%s/%s", rel, de->d_name) : xstrdup (de->d_name);
      if (!strcmp (p, "proc") || !strcmp (p, "dev"))
        continue;
      struct stat st;
      assert_int_equal (fstatat (dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW), 0);
      char extra[256] = { 0 };
      if (S_ISLNK (st.st_mode))
        assert_true (readlinkat (dfd, de->d_name, extra, sizeof extra - 1) >= 0);
      else if (S_ISREG (st.st_mode))
        {
          int fd = openat (dfd, de->d_name, O_RDONLY);
          assert_true (fd >= 0);
          assert_true (read (fd, extra, sizeof extra - 1) >= 0);
          close (fd);
        }
      cleanup_free char *line = xasprintf ("%s %o %u:%u %jd %s", p, (unsigned) st.st_mode,
                                           (unsigned) st.st_uid, (unsigned) st.st_gid,
                                           S_ISDIR (st.st_mode) ? (intmax_t) 0 : (intmax_t) st.st_size,
                                           extra);
      ib_strv_push (out, line);
      if (S_ISDIR (st.st_mode))
        {
          int sub = openat (dfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
          assert_true (sub >= 0);
          describe (sub, p, out);
          close (sub);
        }
    }
  closedir (d);
}

static int
cmp_str (const void *a, const void *b)
{
  return strcmp (*(char *const *) a, *(char *const *) b);
}

static char **
describe_tree (const char *root)
{
  char **v = NULL;
  int fd = open (root, O_RDONLY | O_DIRECTORY);
  assert_true (fd >= 0);
  describe (fd, "", &v);
  close (fd);
  qsort (v, ib_strv_len (v), sizeof *v, cmp_str);
  return v;
}

static void
test_roundtrip (void **state)
{
  struct fx *f = *state;
  make_base (f->a);
  ib_error_t err = NULL;
  if (ib_copy_tree (f->a, f->b, &err) < 0)
    fail_msg ("%s", err->msg);
  ib_fs_scan_t *scan = NULL;
  assert_int_equal (ib_fs_scan (f->a, exclude, &scan, &err), 0);
  modify (f->a);
  ib_layer_result_t res;
  assert_int_equal (ib_layer_write_diff (f->a, scan, exclude, f->out, &at_sde, &res, &err), 0);
  ib_fs_scan_free (scan);
  char diff_id[IB_DIGEST_LEN];
  if (ib_unpack_layer (f->out, f->b, diff_id, NULL, &err) < 0)
    fail_msg ("%s", err->msg);
  assert_string_equal (diff_id, res.diff_id);

  cleanup_strv char **da = describe_tree (f->a);
  cleanup_strv char **db = describe_tree (f->b);
  size_t na = ib_strv_len (da), nb = ib_strv_len (db);
  for (size_t i = 0; i < na || i < nb; i++)
    if (i >= na || i >= nb || strcmp (da[i], db[i]) != 0)
      fail_msg ("trees differ at %zu: modified \"%s\" vs unpacked \"%s\"", i,
                i < na ? da[i] : "(end)", i < nb ? db[i] : "(end)");
  cleanup_free char *h1 = xasprintf ("%s/hl1", f->b), *h2 = xasprintf ("%s/hl2", f->b);
  struct stat s1, s2;
  assert_int_equal (stat (h1, &s1), 0);
  assert_int_equal (stat (h2, &s2), 0);
  assert_int_equal (s1.st_ino, s2.st_ino);

  /* and the scan of the unpacked tree diffed against itself is empty */
  assert_int_equal (ib_fs_scan (f->b, exclude, &scan, &err), 0);
  assert_int_equal (ib_layer_write_diff (f->b, scan, exclude, f->out, &at_sde, &res, &err), 0);
  ib_fs_scan_free (scan);
  assert_int_equal (res.entries, 0);
}

/* Every compression and level: valid streams that decode (with the peers'
 * tools, which check the gzip CRC-32 and length) to the same tar, the same
 * bytes when written twice, the gzip header fixed. */
/* ib_layer_compress_follow on a copy of `plain` written by a child in
 * pieces while it reads: the same bytes; and a writer that gives up. */
static void
follow_case (const char *tmp, const char *plain, const ib_layer_opts_t *o, const char *digest,
             uint64_t size)
{
  cleanup_free char *grow = xasprintf ("%s/growing.tar", tmp);
  cleanup_free char *out = xasprintf ("%s/growing.gz", tmp);
  for (int give_up = 0; give_up < 2; give_up++)
    {
      int fd = open (grow, O_WRONLY | O_CREAT | O_TRUNC, 0644);
      assert_true (fd >= 0);
      int ctl[2];
      assert_int_equal (pipe (ctl), 0);
      pid_t pid = fork ();
      assert_true (pid >= 0);
      if (pid == 0)
        {
          close (ctl[0]);
          int in = open (plain, O_RDONLY);
          char buf[300000];
          ssize_t n;
          uint64_t len = 0;
          while ((n = read (in, buf, sizeof buf)) > 0)
            {
              if (write (fd, buf, (size_t) n) != n)
                _exit (2);
              len += (uint64_t) n;
              usleep (3000);
            }
          unsigned char v[8];
          for (int k = 0; k < 8; k++)
            v[k] = (unsigned char) (len >> (8 * k));
          if (!give_up && write (ctl[1], v, 8) != 8)
            _exit (3);
          _exit (0);
        }
      close (fd);
      close (ctl[1]);
      char dg[IB_DIGEST_LEN];
      uint64_t sz = 0;
      ib_error_t err = NULL;
      int r = ib_layer_compress_follow (grow, ctl[0], out, o, dg, &sz, &err);
      close (ctl[0]);
      int st;
      assert_int_equal (waitpid (pid, &st, 0), pid);
      assert_true (WIFEXITED (st) && WEXITSTATUS (st) == 0);
      if (give_up)
        {
          assert_int_equal (r, -1);
          assert_int_equal (err->status, ECANCELED);
          ib_error_free (&err);
        }
      else
        {
          if (r < 0)
            fail_msg ("follow: %s", err->msg);
          assert_string_equal (dg, digest);
          assert_int_equal (sz, size);
        }
    }
}

static void
test_compressions (void **state)
{
  struct fx *f = *state;
  make_repro (f->a);
  /* incompressible data larger than the 256 KiB output buffer, so the
   * compressors drain it several times and the trailer may straddle it */
  cleanup_free char *big = xmalloc (3 << 20);
  uint32_t x = 12345;
  for (size_t i = 0; i < (3u << 20) - 1; i++)
    {
      x = x * 1103515245 + 12345;
      big[i] = (char) (1 + (x >> 24) % 255);
    }
  big[(3 << 20) - 1] = '\0';
  put (f->a, "usr/share/big.bin", big, 0644);
  struct
  {
    ib_compression_t c;
    int level;
    const char *decode;
  } cases[] = {
    { IB_COMPRESSION_GZIP, -1, "gzip -dc" }, { IB_COMPRESSION_GZIP, 0, "gzip -dc" },
    { IB_COMPRESSION_GZIP, 2, "gzip -dc" },  { IB_COMPRESSION_GZIP, 3, "gzip -dc" },
    { IB_COMPRESSION_GZIP, 6, "gzip -dc" },  { IB_COMPRESSION_GZIP, 9, "busybox gunzip -c" },
    { IB_COMPRESSION_ZSTD, -1, "zstd -qdc" }, { IB_COMPRESSION_ZSTD, 19, "zstd -qdc" },
    { IB_COMPRESSION_NONE, -1, "cat" },
  };
  char diff_id[IB_DIGEST_LEN] = "";
  /* the uncompressed tar, compressed afterwards (ib_layer_compress), must
   * give the very bytes the one-pass writer gives */
  cleanup_free char *plain = xasprintf ("%s/plain.tar", f->tmp);
  {
    ib_layer_opts_t o = { .compression = IB_COMPRESSION_NONE, .level = -1, .sde = SDE };
    ib_layer_result_t r;
    ib_error_t err = NULL;
    if (ib_layer_write_diff (f->a, NULL, NULL, plain, &o, &r, &err) < 0)
      fail_msg ("plain: %s", err->msg);
    assert_string_equal (r.digest, r.diff_id);
    assert_false (r.raw);
    /* raw_above: a gzip layer of at least that many tar bytes comes out as
     * its tar (3 MiB of data here), a smaller one compressed */
    cleanup_free char *o4 = xasprintf ("%s/raw.tar", f->tmp);
    ib_layer_opts_t g = { .compression = IB_COMPRESSION_GZIP, .level = -1, .sde = SDE,
                          .raw_above = 3u << 20 };
    ib_layer_result_t rr;
    if (ib_layer_write_diff (f->a, NULL, NULL, o4, &g, &rr, &err) < 0)
      fail_msg ("raw: %s", err->msg);
    assert_true (rr.raw);
    assert_string_equal (rr.digest, r.diff_id);
    assert_string_equal (rr.diff_id, r.diff_id);
    assert_int_equal (rr.size, r.size);
    cleanup_free char *c4 = xasprintf ("cmp -s '%s' '%s'", o4, plain);
    assert_int_equal (system (c4), 0);
    g.raw_above = (4u << 20);
    if (ib_layer_write_diff (f->a, NULL, NULL, o4, &g, &rr, &err) < 0)
      fail_msg ("not raw: %s", err->msg);
    assert_false (rr.raw);
    assert_string_equal (rr.diff_id, r.diff_id);
    assert_string_not_equal (rr.digest, r.diff_id);
  }
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    {
      ib_layer_opts_t o = { .compression = cases[i].c, .level = cases[i].level, .sde = SDE };
      ib_layer_result_t r1, r2;
      ib_error_t err = NULL;
      cleanup_free char *o1 = xasprintf ("%s/c%zu-1", f->tmp, i);
      cleanup_free char *o2 = xasprintf ("%s/c%zu-2", f->tmp, i);
      if (ib_layer_write_diff (f->a, NULL, NULL, o1, &o, &r1, &err) < 0
          || ib_layer_write_diff (f->a, NULL, NULL, o2, &o, &r2, &err) < 0)
        fail_msg ("case %zu: %s", i, err->msg);
      assert_string_equal (r1.digest, r2.digest);
      if (cases[i].c != IB_COMPRESSION_NONE)
        {
          cleanup_free char *o3 = xasprintf ("%s/c%zu-3", f->tmp, i);
          char dg[IB_DIGEST_LEN];
          uint64_t sz = 0;
          if (ib_layer_compress (plain, o3, &o, dg, &sz, &err) < 0)
            fail_msg ("case %zu: compress: %s", i, err->msg);
          assert_string_equal (dg, r1.digest);
          assert_int_equal (sz, r1.size);
          cleanup_free char *c3 = xasprintf ("cmp -s '%s' '%s'", o1, o3);
          assert_int_equal (system (c3), 0);
          if (i == 0)
            follow_case (f->tmp, plain, &o, r1.digest, r1.size);
        }
      else
        {
          char dg[IB_DIGEST_LEN];
          uint64_t sz = 0;
          cleanup_free char *o3 = xasprintf ("%s/c%zu-3", f->tmp, i);
          assert_int_equal (ib_layer_compress (plain, o3, &o, dg, &sz, &err), -1);
          ib_error_free (&err);
        }
      if (*diff_id)
        assert_string_equal (r1.diff_id, diff_id);
      memcpy (diff_id, r1.diff_id, IB_DIGEST_LEN);
      cleanup_free char *c1 = xasprintf ("sha256sum '%s'", o1);
      cleanup_free char *c2 = xasprintf ("%s '%s' | sha256sum", cases[i].decode, o1);
      cleanup_free char *d = run (c1), *id = run (c2);
      assert_string_equal (r1.digest, d);
      assert_string_equal (r1.diff_id, id);
      struct stat st;
      assert_int_equal (stat (o1, &st), 0);
      assert_int_equal (r1.size, (uint64_t) st.st_size);
      unsigned char h[10];
      FILE *fp = fopen (o1, "rb");
      assert_non_null (fp);
      assert_int_equal (fread (h, 1, 10, fp), 10);
      fclose (fp);
      if (cases[i].c == IB_COMPRESSION_GZIP)
        {
          static const unsigned char want[10] = { 0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3 };
          assert_memory_equal (h, want, 10);
          /* the decoders must not merely tolerate a bad trailer */
          cleanup_free char *t = xasprintf ("gzip -t '%s'", o1);
          assert_int_equal (system (t), 0);
        }
      else if (cases[i].c == IB_COMPRESSION_ZSTD)
        assert_int_equal (h[0] | h[1] << 8 | h[2] << 16 | (unsigned) h[3] << 24, 0xFD2FB528u);
      if (cases[i].c == IB_COMPRESSION_GZIP && cases[i].level == 0)
        assert_true (r1.size > (3u << 20)); /* stored */
      if (cases[i].c == IB_COMPRESSION_NONE)
        assert_string_equal (r1.digest, r1.diff_id);
    }
  assert_string_equal (ib_compression_media_type (IB_COMPRESSION_ZSTD),
                       "application/vnd.oci.image.layer.v1.tar+zstd");
  assert_string_equal (ib_compression_media_type (IB_COMPRESSION_NONE),
                       "application/vnd.oci.image.layer.v1.tar");
  assert_true (ib_compression_level_ok (IB_COMPRESSION_GZIP, 9));
  assert_false (ib_compression_level_ok (IB_COMPRESSION_GZIP, 10));
  assert_false (ib_compression_level_ok (IB_COMPRESSION_ZSTD, 0));
  assert_false (ib_compression_level_ok (IB_COMPRESSION_NONE, 1));
  ib_compression_t c;
  assert_int_equal (ib_compression_parse ("zstd", &c), 0);
  assert_int_equal (c, IB_COMPRESSION_ZSTD);
  assert_int_equal (ib_compression_parse ("xz", &c), -1);

  /* a full disk: the compressor thread's write error comes back, named */
  for (int k = 0; k < 3; k++)
    {
      ib_layer_opts_t o = { .compression = (ib_compression_t) k, .level = -1, .sde = SDE };
      ib_layer_result_t r;
      ib_error_t err = NULL;
      assert_int_equal (ib_layer_write_diff (f->a, NULL, NULL, "/dev/full", &o, &r, &err), -1);
      assert_non_null (strstr (err->msg, "/dev/full"));
      assert_non_null (strstr (err->msg, strerror (ENOSPC)));
      ib_error_free (&err);
    }
}

/* user.* and security.capability xattrs travel in the layer, sorted;
 * others do not. */
static void
test_xattrs (void **state)
{
  struct fx *f = *state;
  mkd (f->a, "", 0755);
  put (f->a, "f", "x", 0644);
  mkd (f->a, "d", 0755);
  cleanup_free char *pf = xasprintf ("%s/f", f->a), *pd = xasprintf ("%s/d", f->a);
  if (setxattr (pf, "user.zeta", "z", 1, 0) < 0)
    skip (); /* no user xattrs on this file system */
  assert_int_equal (setxattr (pf, "user.alpha", "a\0b", 3, 0), 0);
  assert_int_equal (setxattr (pd, "user.dir", "dv", 2, 0), 0);
  ib_layer_result_t r;
  ib_error_t err = NULL;
  if (ib_layer_write_diff (f->a, NULL, NULL, f->out, &at_sde, &r, &err) < 0)
    fail_msg ("%s", err->msg);
  struct archive *a = archive_read_new ();
  archive_read_support_filter_gzip (a);
  archive_read_support_format_tar (a);
  assert_int_equal (archive_read_open_filename (a, f->out, 10240), ARCHIVE_OK);
  struct archive_entry *e;
  int seen = 0;
  while (archive_read_next_header (a, &e) == ARCHIVE_OK)
    {
      const char *name = archive_entry_pathname (e), *xn;
      const void *xv;
      size_t xs;
      archive_entry_xattr_reset (e);
      if (strcmp (name, "f") == 0)
        {
          /* (libarchive's reader lists them in reverse order) */
          assert_int_equal (archive_entry_xattr_count (e), 2);
          int got = 0;
          while (archive_entry_xattr_next (e, &xn, &xv, &xs) == ARCHIVE_OK)
            if (strcmp (xn, "user.alpha") == 0 && xs == 3 && memcmp (xv, "a\0b", 3) == 0)
              got |= 1;
            else if (strcmp (xn, "user.zeta") == 0 && xs == 1 && memcmp (xv, "z", 1) == 0)
              got |= 2;
          assert_int_equal (got, 3);
          seen++;
        }
      else if (strcmp (name, "d/") == 0)
        {
          assert_int_equal (archive_entry_xattr_count (e), 1);
          assert_int_equal (archive_entry_xattr_next (e, &xn, &xv, &xs), ARCHIVE_OK);
          assert_string_equal (xn, "user.dir");
          seen++;
        }
    }
  archive_read_free (a);
  assert_int_equal (seen, 2);

  /* the records in the tar are sorted by name, SCHILY.xattr only */
  ib_layer_opts_t o = { .compression = IB_COMPRESSION_NONE, .level = -1, .sde = SDE };
  assert_int_equal (ib_layer_write_diff (f->a, NULL, NULL, f->out, &o, &r, &err), 0);
  cleanup_free char *tar = NULL;
  size_t len = 0;
  assert_int_equal (ib_read_file (f->out, &tar, &len, &err), 0);
  const char *pa = memmem (tar, len, "SCHILY.xattr.user.alpha=a", 25);
  const char *pz = memmem (tar, len, "SCHILY.xattr.user.zeta=z", 24);
  assert_non_null (pa);
  assert_non_null (pz);
  assert_true (pa < pz);
  assert_null (memmem (tar, len, "LIBARCHIVE.xattr", 16));
}

int
main (void)
{
  if (getenv ("IB_TEST_DEBUG"))
    ib_verbosity = 2;
  const struct CMUnitTest tests[] = {
    cmocka_unit_test_setup_teardown (test_diff, setup, teardown),
    cmocka_unit_test_setup_teardown (test_reproducible, setup, teardown),
    cmocka_unit_test_setup_teardown (test_unchanged, setup, teardown),
    cmocka_unit_test_setup_teardown (test_compressions, setup, teardown),
    cmocka_unit_test_setup_teardown (test_xattrs, setup, teardown),
    cmocka_unit_test_setup_teardown (test_roundtrip, setup, teardown),
  };
  return cmocka_run_group_tests (tests, NULL, NULL);
}
