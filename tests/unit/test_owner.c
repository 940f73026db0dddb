/* tests/unit/test_owner.c — ownership records (rootfs/owner.h): the
 * `user.rootlesscontainers` value's protobuf bytes, and, in a user
 * namespace with one id mapped (what the single-id mode is), a chown the
 * kernel refuses recorded, read back by the layer writer into the tar
 * header (never as an xattr), dropped by a later chown that succeeds, and
 * taken from tar headers by the unpack while a record a layer carries is
 * refused.  Runs as root and as an unprivileged user. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/util.h"
#include "rootfs/layer.h"
#include "rootfs/owner.h"
#include "rootfs/unpack.h"
#include "unit.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

static void
test_encode_vectors (void **state)
{
  (void) state;
  unsigned char b[IB_OWNER_MAX];
  /* protobuf: field 1 varint = tag 0x08, field 2 = 0x10; 0 left out */
  assert_int_equal (ib_owner_encode (0, 0, b), 0);
  assert_int_equal (ib_owner_encode (0, 42, b), 2);
  assert_memory_equal (b, "\x10\x2a", 2);
  assert_int_equal (ib_owner_encode (1000, 1000, b), 6);
  assert_memory_equal (b, "\x08\xe8\x07\x10\xe8\x07", 6);
  assert_int_equal (ib_owner_encode (IB_OWNER_NOOP, 5, b), 8);
  assert_memory_equal (b, "\x08\xff\xff\xff\xff\x0f\x10\x05", 8);
  assert_int_equal (ib_owner_encode (IB_OWNER_NOOP, IB_OWNER_NOOP, b), IB_OWNER_MAX);
}

static void
test_decode (void **state)
{
  (void) state;
  uint32_t u, g;
  assert_int_equal (ib_owner_decode ("", 0, &u, &g), 0);
  assert_int_equal (u, 0);
  assert_int_equal (g, 0);
  assert_int_equal (ib_owner_decode ("\x08\xe8\x07\x10\xe8\x07", 6, &u, &g), 0);
  assert_int_equal (u, 1000);
  assert_int_equal (g, 1000);
  /* unknown fields of every wire type are skipped; the last value wins */
  static const unsigned char skip[] = { 0x18, 0x01,                   /* 3: varint */
                                        0x21, 1, 2, 3, 4, 5, 6, 7, 8, /* 4: 64-bit */
                                        0x2a, 0x02, 'h', 'i',         /* 5: bytes */
                                        0x35, 1, 2, 3, 4,             /* 6: 32-bit */
                                        0x10, 0x07, 0x10, 0x2a };
  assert_int_equal (ib_owner_decode (skip, sizeof skip, &u, &g), 0);
  assert_int_equal (u, 0);
  assert_int_equal (g, 42);
  /* malformed: a cut varint, a length past the end, wire type 7 */
  assert_int_equal (ib_owner_decode ("\x08\xe8", 2, &u, &g), -1);
  assert_int_equal (ib_owner_decode ("\x2a\x05hi", 4, &u, &g), -1);
  assert_int_equal (ib_owner_decode ("\x0f", 1, &u, &g), -1);
  assert_int_equal (ib_owner_decode ("\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12, &u,
                                     &g),
                    -1);
  /* round trip */
  for (uint32_t v = 1; v && v < 0xF0000000u; v = v * 3 + 1)
    {
      unsigned char b[IB_OWNER_MAX];
      size_t n = ib_owner_encode (v, v ^ 0x5555, b);
      assert_int_equal (ib_owner_decode (b, n, &u, &g), 0);
      assert_int_equal (u, v);
      assert_int_equal (g, v ^ 0x5555);
    }
}

/* In the child: a failed check exits with its line number. */
#define CHECK(c)                                                                                   \
  do                                                                                               \
    {                                                                                              \
      if (!(c))                                                                                    \
        {                                                                                          \
          fprintf (stderr, "test_owner.c:%d: %s\n", __LINE__, #c);                                 \
          _exit (1);                                                                               \
        }                                                                                          \
    }                                                                                              \
  while (0)

static void
write_map (const char *file, const char *line)
{
  int fd = open (file, O_WRONLY | O_CLOEXEC);
  CHECK (fd >= 0);
  CHECK (write (fd, line, strlen (line)) == (ssize_t) strlen (line));
  close (fd);
}

/* A user namespace where only our own ids exist, as 0 (the single-id
 * mode's map). */
static void
enter_single_id (void)
{
  uid_t uid = geteuid ();
  gid_t gid = getegid ();
  CHECK (unshare (CLONE_NEWUSER) == 0);
  write_map ("/proc/self/setgroups", "deny");
  char line[64];
  snprintf (line, sizeof line, "0 %u 1\n", (unsigned) uid);
  write_map ("/proc/self/uid_map", line);
  snprintf (line, sizeof line, "0 %u 1\n", (unsigned) gid);
  write_map ("/proc/self/gid_map", line);
}

static void
put (const char *dir, const char *name, const char *data)
{
  cleanup_free char *p = xasprintf ("%s/%s", dir, name);
  int fd = open (p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  CHECK (fd >= 0);
  CHECK (write (fd, data, strlen (data)) == (ssize_t) strlen (data));
  close (fd);
}

/* {uid, gid, xattr count} of `name` in tarball path (-1s when absent). */
static void
header_of (const char *path, const char *name, long out[3])
{
  out[0] = out[1] = out[2] = -1;
  struct archive *a = archive_read_new ();
  archive_read_support_filter_all (a);
  archive_read_support_format_tar (a);
  CHECK (archive_read_open_filename (a, path, 10240) == ARCHIVE_OK);
  struct archive_entry *e;
  while (archive_read_next_header (a, &e) == ARCHIVE_OK)
    if (strcmp (archive_entry_pathname (e), name) == 0)
      {
        out[0] = (long) archive_entry_uid (e);
        out[1] = (long) archive_entry_gid (e);
        out[2] = archive_entry_xattr_count (e);
      }
  archive_read_free (a);
}

static void
record_cases (const char *dir)
{
  enter_single_id ();
  cleanup_free char *tree = xasprintf ("%s/tree", dir);
  CHECK (mkdir (tree, 0755) == 0);
  put (tree, "shadow", "x");
  put (tree, "plain", "y");
  CHECK (mkdir (xasprintf ("%s/partial", tree), 0700) == 0);
  CHECK (symlink ("shadow", xasprintf ("%s/link", tree)) == 0);
  int dfd = open (tree, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  CHECK (dfd >= 0);

  /* gid 42 does not exist here: recorded */
  CHECK (ib_owner_chown_at (dfd, "shadow", 0, 42) == 0);
  struct stat st;
  CHECK (fstatat (dfd, "shadow", &st, 0) == 0 && st.st_uid == 0 && st.st_gid == 0);
  uid_t u = 7;
  gid_t g = 7;
  CHECK (ib_owner_get_at (dfd, "shadow", &u, &g) == 1 && u == 0 && g == 42);
  unsigned char val[32];
  cleanup_free char *ps = xasprintf ("%s/shadow", tree);
  CHECK (getxattr (ps, IB_OWNER_XATTR, val, sizeof val) == 2 && memcmp (val, "\x10\x2a", 2) == 0);
  /* a directory, by fd */
  int pfd = openat (dfd, "partial", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  CHECK (pfd >= 0 && ib_owner_chown_fd (pfd, 100, 65534) == 0);
  close (pfd);
  u = g = 7;
  CHECK (ib_owner_get_at (dfd, "partial", &u, &g) == 1 && u == 100 && g == 65534);
  /* "" is the directory itself */
  CHECK (ib_owner_chown_at (dfd, "", 0, 8) == 0);
  u = g = 7;
  CHECK (ib_owner_get_at (dfd, "", &u, &g) == 1 && u == 0 && g == 8);
  /* a symlink cannot carry it: lost, not an error */
  CHECK (ib_owner_chown_at (dfd, "link", 5, 5) == 0);
  u = g = 7;
  CHECK (ib_owner_get_at (dfd, "plain", &u, &g) == 0 && u == 7 && g == 7);

  /* the layer writer: the recorded owner in the header, no xattr */
  cleanup_free char *layer = xasprintf ("%s/layer.tar", dir);
  ib_layer_opts_t o = { .compression = IB_COMPRESSION_NONE, .level = -1, .sde = 1000 };
  ib_layer_result_t r;
  ib_error_t err = NULL;
  CHECK (ib_layer_write_diff (tree, NULL, NULL, layer, &o, &r, &err) == 0);
  long h[3];
  header_of (layer, "shadow", h);
  CHECK (h[0] == 0 && h[1] == 42 && h[2] == 0);
  header_of (layer, "partial/", h);
  CHECK (h[0] == 100 && h[1] == 65534 && h[2] == 0);
  header_of (layer, "plain", h);
  CHECK (h[0] == 0 && h[1] == 0 && h[2] == 0);
  cleanup_free char *bytes = NULL;
  size_t len = 0;
  CHECK (ib_read_file (layer, &bytes, &len, &err) == 0);
  CHECK (memmem (bytes, len, "rootlesscontainers", 18) == NULL);

  /* a chown that succeeds drops the record */
  CHECK (ib_owner_chown_at (dfd, "shadow", 0, 0) == 0);
  CHECK (getxattr (ps, IB_OWNER_XATTR, val, sizeof val) < 0 && errno == ENODATA);
  u = g = 7;
  CHECK (ib_owner_get_at (dfd, "shadow", &u, &g) == 0);

  /* the unpack: owners from the headers; a record in the layer refused */
  cleanup_free char *in = xasprintf ("%s/in.tar", dir);
  struct archive *a = archive_write_new ();
  CHECK (archive_write_set_format_pax_restricted (a) == ARCHIVE_OK);
  CHECK (archive_write_open_filename (a, in) == ARCHIVE_OK);
  const char *names[] = { "etc/", "etc/gshadow", "forged" };
  for (int i = 0; i < 3; i++)
    {
      struct archive_entry *e = archive_entry_new ();
      archive_entry_set_pathname (e, names[i]);
      archive_entry_set_filetype (e, i == 0 ? AE_IFDIR : AE_IFREG);
      archive_entry_set_perm (e, i == 0 ? 0755 : 0640);
      archive_entry_set_uid (e, i == 0 ? 0 : i == 1 ? 0 : 1234);
      archive_entry_set_gid (e, i == 0 ? 8 : i == 1 ? 42 : 1234);
      archive_entry_set_mtime (e, 1000, 0);
      archive_entry_set_size (e, 0);
      if (i == 2) /* claims 0:0 */
        archive_entry_xattr_add_entry (e, IB_OWNER_XATTR, "\x08\x00", 2);
      CHECK (archive_write_header (a, e) == ARCHIVE_OK);
      archive_entry_free (e);
    }
  CHECK (archive_write_close (a) == ARCHIVE_OK);
  archive_write_free (a);
  cleanup_free char *out = xasprintf ("%s/out", dir);
  CHECK (mkdir (out, 0755) == 0);
  if (ib_unpack_layer (in, out, NULL, NULL, &err) < 0)
    {
      fprintf (stderr, "unpack: %s\n", err->msg);
      _exit (1);
    }
  int ofd = open (out, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  u = g = 7;
  CHECK (ib_owner_get_at (ofd, "etc", &u, &g) == 1 && u == 0 && g == 8);
  u = g = 7;
  CHECK (ib_owner_get_at (ofd, "etc/gshadow", &u, &g) == 1 && u == 0 && g == 42);
  u = g = 7;
  CHECK (ib_owner_get_at (ofd, "forged", &u, &g) == 1 && u == 1234 && g == 1234);
  CHECK (fstatat (ofd, "etc/gshadow", &st, 0) == 0 && (st.st_mode & 07777) == 0640);
  _exit (0);
}

static void
test_records_in_single_id_namespace (void **state)
{
  const char *dir = *state;
  pid_t pid = fork ();
  assert_true (pid >= 0);
  if (pid == 0)
    record_cases (dir);
  int status;
  assert_int_equal (waitpid (pid, &status, 0), pid);
  assert_true (WIFEXITED (status));
  assert_int_equal (WEXITSTATUS (status), 0);
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test (test_encode_vectors),
    cmocka_unit_test (test_decode),
    unit_test_in_tmpdir (test_records_in_single_id_namespace),
  };
  return cmocka_run_group_tests (tests, NULL, NULL);
}
