/* tests/unit/test_pgzip.c — block-parallel gzip (rootfs/pgzip.h).
 *
 * Every stream is inflated by zlib in gzip mode (which checks the header,
 * the CRC-32 and ISIZE) and must give the input back as one member; the
 * bytes must not depend on the thread count or on how the input is cut
 * into writes; matches must reach across block boundaries (the preset
 * dictionary); and `gzip -dc`, a decoder of its own, must agree. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/util.h"
#include "rootfs/pgzip.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

struct buf
{
  unsigned char *p;
  size_t len, cap;
  size_t fail_after; /* emit fails once this many bytes were taken (0: never) */
};

static int
to_buf (void *ud, const unsigned char *p, size_t n)
{
  struct buf *b = ud;
  if (b->fail_after && b->len + n > b->fail_after)
    return -1;
  if (b->len + n > b->cap)
    {
      b->cap = (b->len + n) * 2;
      b->p = xrealloc (b->p, b->cap);
    }
  memcpy (b->p + b->len, p, n);
  b->len += n;
  return 0;
}

/* gzip `in` at `level` on `threads` threads, in writes of `piece` bytes. */
static struct buf
pgz (const unsigned char *in, size_t n, int level, int threads, size_t piece)
{
  struct buf out = { 0 };
  ib_pgz_t *z = ib_pgz_new (level, threads, to_buf, &out);
  ib_error_t err = NULL;
  for (size_t off = 0; off < n; off += piece)
    if (ib_pgz_write (z, in + off, n - off < piece ? n - off : piece, &err) < 0)
      fail_msg ("write: %s", err->msg);
  if (ib_pgz_finish (z, &err) < 0)
    fail_msg ("finish: %s", err->msg);
  assert_int_equal (ib_pgz_in_size (z), n);
  ib_pgz_free (z);
  return out;
}

/* Inflate one gzip member that must fill the whole of `gz`. */
static void
check_inflates (const struct buf *gz, const unsigned char *in, size_t n)
{
  static const unsigned char hdr[10] = { 0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3 };
  assert_true (gz->len >= 18);
  assert_memory_equal (gz->p, hdr, 10);
  z_stream z;
  memset (&z, 0, sizeof z);
  assert_int_equal (inflateInit2 (&z, 16 + 15), Z_OK);
  unsigned char *out = xmalloc (n + 1);
  z.next_in = gz->p;
  z.avail_in = (uInt) gz->len;
  z.next_out = out;
  z.avail_out = (uInt) n + 1;
  int r = inflate (&z, Z_FINISH);
  assert_int_equal (r, Z_STREAM_END); /* CRC-32 and ISIZE checked */
  assert_int_equal (z.avail_in, 0);   /* one member, nothing after it */
  assert_int_equal (z.total_out, n);
  if (n > 0)
    assert_memory_equal (out, in, n);
  inflateEnd (&z);
  free (out);
}

static unsigned char *
random_bytes (size_t n, uint32_t seed)
{
  unsigned char *p = xmalloc (n ? n : 1);
  for (size_t i = 0; i < n; i++)
    {
      seed = seed * 1103515245 + 12345;
      p[i] = (unsigned char) (seed >> 24);
    }
  return p;
}

/* Text-like data: compressible, with matches at every distance. */
static unsigned char *
texty_bytes (size_t n)
{
  static const char *words[] = { "usr/", "lib/", "x86_64-linux-gnu/", "python3", ".so.1",
                                 "share/doc/", "changelog.Debian.gz", "0000644", "\n",
                                 "ustar", "copyright", "libstdc++" };
  unsigned char *p = xmalloc (n ? n : 1);
  uint32_t s = 7;
  size_t i = 0;
  while (i < n)
    {
      s = s * 1103515245 + 12345;
      const char *w = words[(s >> 16) % (sizeof words / sizeof *words)];
      for (size_t k = 0; w[k] && i < n; k++)
        p[i++] = (unsigned char) w[k];
      if ((s & 0xff) < 20 && i < n)
        p[i++] = (unsigned char) (s >> 8);
    }
  return p;
}

static const int levels[] = { 0, 1, 2, 3, 6, 9 };

/* Sizes at and around the block boundaries, every level: inflates, and
 * the same bytes on 1, 2 and 7 threads and for odd write sizes. */
static void
test_sizes (void **state)
{
  (void) state;
  const size_t B = IB_PGZ_BLOCK;
  const size_t sizes[] = { 0, 1, 1000, B - 1, B, B + 1, 2 * B, 3 * B + 12345 };
  unsigned char *data = texty_bytes (3 * B + 12345);
  for (size_t li = 0; li < sizeof levels / sizeof *levels; li++)
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++)
      {
        size_t n = sizes[si];
        struct buf a = pgz (data, n, levels[li], 1, n ? n : 1);
        check_inflates (&a, data, n);
        struct buf b = pgz (data, n, levels[li], 2, 4093);
        struct buf c = pgz (data, n, levels[li], 7, 1);
        if (n > 2 * B)
          assert_true (levels[li] == 0 || a.len < n / 2);
        assert_int_equal (b.len, a.len);
        assert_memory_equal (b.p, a.p, a.len);
        assert_int_equal (c.len, a.len);
        assert_memory_equal (c.p, a.p, a.len);
        free (a.p);
        free (b.p);
        free (c.p);
      }
  free (data);
}

/* Random blocks, each starting with a copy of the 16 KiB that end the
 * block before it: only the preset dictionary finds those matches (5 x
 * 16 KiB that would otherwise be stored). */
static void
test_dictionary (void **state)
{
  (void) state;
  const size_t seam = 16 * 1024, n = 6 * IB_PGZ_BLOCK;
  unsigned char *data = random_bytes (n, 99);
  for (size_t k = 1; k < 6; k++)
    memcpy (data + k * IB_PGZ_BLOCK, data + k * IB_PGZ_BLOCK - seam, seam);
  for (size_t li = 1; li < sizeof levels / sizeof *levels; li++)
    {
      struct buf a = pgz (data, n, levels[li], 3, 65536);
      check_inflates (&a, data, n);
      if (a.len > n - 3 * seam)
        fail_msg ("level %d: %zu bytes for %zu: the dictionary was not used", levels[li],
                  a.len, n);
      free (a.p);
    }
  /* incompressible data: stored blocks, a little larger than the input */
  unsigned char *r = random_bytes (n, 5);
  struct buf b = pgz (r, n, 1, 2, n);
  check_inflates (&b, r, n);
  assert_true (b.len > n && b.len < n + n / 100);
  free (b.p);
  free (r);
  free (data);
}

/* gzip(1), a decoder of its own, reads the stream back. */
static void
test_gzip_tool (void **state)
{
  (void) state;
  size_t n = 2 * IB_PGZ_BLOCK + 777;
  unsigned char *data = texty_bytes (n);
  char dir[] = "/tmp/pgzip-XXXXXX";
  assert_non_null (mkdtemp (dir));
  cleanup_free char *in = xasprintf ("%s/in", dir), *gz = xasprintf ("%s/in.gz", dir);
  for (int level = 1; level <= 9; level += 8)
    {
      struct buf a = pgz (data, n, level, 2, 100000);
      FILE *f = fopen (gz, "wb");
      assert_non_null (f);
      assert_int_equal (fwrite (a.p, 1, a.len, f), a.len);
      fclose (f);
      f = fopen (in, "wb");
      assert_int_equal (fwrite (data, 1, n, f), n);
      fclose (f);
      cleanup_free char *cmd = xasprintf ("gzip -t '%s' && gzip -dc '%s' | cmp -s - '%s'", gz,
                                          gz, in);
      assert_int_equal (system (cmd), 0);
      free (a.p);
    }
  cleanup_free char *rm = xasprintf ("rm -rf '%s'", dir);
  assert_int_equal (system (rm), 0);
  free (data);
}

/* The output fails: the error comes back from write or finish, every
 * later call fails, and free joins the threads. */
static void
test_emit_fails (void **state)
{
  (void) state;
  size_t n = 5 * IB_PGZ_BLOCK;
  unsigned char *data = random_bytes (n, 3);
  const size_t fail_at[] = { 1, 20, IB_PGZ_BLOCK, 4 * IB_PGZ_BLOCK };
  for (size_t i = 0; i < sizeof fail_at / sizeof *fail_at; i++)
    for (int threads = 1; threads <= 3; threads += 2)
      {
        struct buf out = { .fail_after = fail_at[i] };
        ib_pgz_t *z = ib_pgz_new (1, threads, to_buf, &out);
        ib_error_t err = NULL;
        int r = 0;
        for (size_t off = 0; off < n && r == 0; off += 300000)
          r = ib_pgz_write (z, data + off, n - off < 300000 ? n - off : 300000, &err);
        if (r == 0)
          r = ib_pgz_finish (z, &err);
        assert_int_equal (r, -1);
        assert_int_equal (err->status, EIO);
        assert_non_null (strstr (err->msg, "output failed"));
        ib_error_free (&err);
        assert_int_equal (ib_pgz_write (z, data, 10, &err), -1);
        ib_error_free (&err);
        assert_int_equal (ib_pgz_finish (z, &err), -1);
        ib_error_free (&err);
        ib_pgz_free (z);
        free (out.p);
      }
  /* freed in the middle of a stream: the threads stop */
  struct buf out = { 0 };
  ib_pgz_t *z = ib_pgz_new (9, 4, to_buf, &out);
  ib_error_t err = NULL;
  assert_int_equal (ib_pgz_write (z, data, n, &err), 0);
  ib_pgz_free (z);
  free (out.p);
  free (data);
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test (test_sizes),
    cmocka_unit_test (test_dictionary),
    cmocka_unit_test (test_gzip_tool),
    cmocka_unit_test (test_emit_fails),
  };
  return cmocka_run_group_tests (tests, NULL, NULL);
}
