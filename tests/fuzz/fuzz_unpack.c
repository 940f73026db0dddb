/* libFuzzer target: the layer unpack path (rootfs/unpack.c: decompression
 * sniffing, ISA-L/zstd decoders, libarchive's tar reader, entry
 * application with whiteouts, links and the path checks) on any bytes,
 * into a fresh directory under a private temp directory.  After each run
 * the fuzzer checks that the sibling "outside" directory is untouched and
 * aborts otherwise, so an escape is reported like a crash. */
#include "common/util.h"
#include "rootfs/unpack.h"

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *base, *outside;

struct mem
{
  const uint8_t *p;
  size_t left;
};

static ssize_t
mem_read (void *ud, void *buf, size_t len, ib_error_t *err)
{
  (void) err;
  struct mem *m = ud;
  size_t n = len < m->left ? len : m->left;
  memcpy (buf, m->p, n);
  m->p += n;
  m->left -= n;
  return (ssize_t) n;
}

static size_t
count_entries (const char *dir)
{
  DIR *d = opendir (dir);
  if (d == NULL)
    abort ();
  size_t n = 0;
  for (struct dirent *e; (e = readdir (d));)
    n++;
  closedir (d);
  return n;
}

int
LLVMFuzzerInitialize (int *argc, char ***argv)
{
  (void) argc, (void) argv;
  char tmpl[] = "/tmp/imgbuild-fuzz-XXXXXX";
  if (mkdtemp (tmpl) == NULL)
    abort ();
  base = strdup (tmpl);
  outside = xasprintf ("%s/outside", base);
  if (mkdir (outside, 0755) < 0)
    abort ();
  ib_verbosity = 0;
  setenv ("IMGBUILD_MAX_LAYER_BYTES", "67108864", 1);
  return 0;
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  char *target = xasprintf ("%s/target", base);
  ib_error_t err = NULL;
  if (mkdir (target, 0755) < 0)
    abort ();
  struct mem m = { data, size };
  char diff_id[IB_DIGEST_LEN];
  ib_unpack_stats_t stats = { 0 };
  if (ib_unpack_layer_stream ("fuzz", mem_read, &m, target, diff_id, &stats, &err) < 0)
    ib_error_free (&err);
  if (ib_rm_rf (target, &err) < 0)
    abort ();
  if (count_entries (outside) != 2 || count_entries (base) != 3)
    abort (); /* something was created outside the target */
  free (target);
  return 0;
}
