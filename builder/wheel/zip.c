/* builder/wheel/zip.c — a repaired wheel written: RECORD made anew
 * (sha256 and size of every file), the zip written with libarchive
 * reproducibly (entries sorted, .dist-info last, RECORD the very last;
 * modes 0644 / 0755; uid and gid 0), and its MS-DOS time fields set in
 * UTC afterwards by editing the central directory and the local headers
 * (SOURCE_DATE_EPOCH's, else each member's as the original zip stored
 * them, read from its central directory).  See wheel.h (ib_wheel_repair).
 */
#include "builder/wheel/wheel-int.h"
#include "common/util.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* RECORD's CSV field for a path (quoted when it must be). */
static void
csv_field (ib_buf_t *b, const char *s)
{
  if (!strpbrk (s, ",\"\r\n"))
    {
      ib_buf_puts (b, s);
      return;
    }
  ib_buf_puts (b, "\"");
  for (; *s; s++)
    {
      if (*s == '"')
        ib_buf_puts (b, "\"");
      ib_buf_append (b, s, 1);
    }
  ib_buf_puts (b, "\"");
}

typedef struct zip_item
{
  char *rel;
  bool dist_info, record;
} zip_item_t;

static int
cmp_zip_item (const void *x, const void *y)
{
  const zip_item_t *a = x, *b = y;
  if (a->record != b->record)
    return a->record ? 1 : -1;
  if (a->dist_info != b->dist_info)
    return a->dist_info ? 1 : -1;
  return strcmp (a->rel, b->rel);
}

static uint16_t
get16 (const unsigned char *p)
{
  return (uint16_t) (p[0] | p[1] << 8);
}

static uint32_t
get32 (const unsigned char *p)
{
  return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16 | (uint32_t) p[3] << 24;
}

static uint64_t
get64 (const unsigned char *p)
{
  return (uint64_t) get32 (p) | (uint64_t) get32 (p + 4) << 32;
}

/* The MS-DOS time and date fields of `t` in UTC (APPNOTE.TXT 4.4.6; two
 * seconds resolution; 1980-01-01 00:00:00 for anything earlier). */
static void
dos_time_utc (time_t t, unsigned char out[4])
{
  struct tm tm;
  if (t < 315532800 || !gmtime_r (&t, &tm))
    {
      t = 315532800;
      gmtime_r (&t, &tm);
    }
  unsigned tv = (unsigned) (tm.tm_hour << 11 | tm.tm_min << 5 | tm.tm_sec / 2);
  unsigned dv = (unsigned) ((tm.tm_year - 80) << 9 | (tm.tm_mon + 1) << 5 | tm.tm_mday);
  out[0] = (unsigned char) tv;
  out[1] = (unsigned char) (tv >> 8);
  out[2] = (unsigned char) dv;
  out[3] = (unsigned char) (dv >> 8);
}

/* dos_time_utc's inverse: the time the MS-DOS fields `d` name, read as
 * UTC (as bdist_wheel writes them), whatever TZ says. */
static time_t
dos_fields_utc (const unsigned char d[4])
{
  unsigned tv = d[0] | (unsigned) d[1] << 8, dv = d[2] | (unsigned) d[3] << 8;
  struct tm tm = { .tm_sec = (int) (tv & 0x1f) * 2, .tm_min = (int) (tv >> 5 & 0x3f),
                   .tm_hour = (int) (tv >> 11), .tm_mday = (int) (dv & 0x1f),
                   .tm_mon = (int) (dv >> 5 & 0xf) - 1, .tm_year = (int) (dv >> 9) + 80 };
  return timegm (&tm);
}

/* A member's time: its MS-DOS fields read as UTC, not libarchive's
 * reading of them (in the local time zone), so that the extended
 * timestamp field a repair writes agrees with them whatever TZ says. */
static time_t
member_time (const member_t *m)
{
  return m->has_dos ? dos_fields_utc (m->dos) : (time_t) m->mtime;
}

/* The central directory of the zip open as `fd` (`size` bytes), as its end
 * of central directory record (or, when a field overflowed, the zip64
 * record) places it (APPNOTE.TXT 4.3.12-4.3.16): *cd (caller frees) holds
 * *cd_size bytes read from *cd_off, *count entries.  A zip with a comment
 * is not looked for: libarchive and bdist_wheel write none. */
static int
zip_cd_load (int fd, const char *path, off_t size, unsigned char **cd, uint64_t *cd_size,
             uint64_t *cd_off, uint64_t *count, ib_error_t *err)
{
  unsigned char eocd[22], z[56];
  if (size < 22 || pread (fd, eocd, 22, size - 22) != 22 || get32 (eocd) != 0x06054b50)
    return ib_error_set (err, EIO, "%s: no end of central directory record", path);
  *count = get16 (eocd + 10);
  *cd_size = get32 (eocd + 12);
  *cd_off = get32 (eocd + 16);
  if (*count == 0xffff || *cd_size == 0xffffffff || *cd_off == 0xffffffff)
    {
      unsigned char loc[20];
      if (size < 42 || pread (fd, loc, 20, size - 42) != 20 || get32 (loc) != 0x07064b50
          || pread (fd, z, 56, (off_t) get64 (loc + 8)) != 56 || get32 (z) != 0x06064b50)
        return ib_error_set (err, EIO, "%s: no zip64 end of central directory record", path);
      *count = get64 (z + 32);
      *cd_size = get64 (z + 40);
      *cd_off = get64 (z + 48);
    }
  if (*cd_off > (uint64_t) size || *cd_size > (uint64_t) size - *cd_off)
    return ib_error_set (err, EIO, "%s: central directory beyond the end", path);
  *cd = xmalloc (*cd_size ? *cd_size : 1);
  if (pread (fd, *cd, *cd_size, (off_t) *cd_off) != (ssize_t) *cd_size)
    {
      free (*cd);
      *cd = NULL;
      return ib_error_set (err, EIO, "%s: short read of its central directory", path);
    }
  return 0;
}

/* The central directory entry at cd[*pos] (APPNOTE.TXT 4.3.12): returns
 * it and moves *pos to the next one, or NULL when it is damaged. */
static unsigned char *
zip_cd_next (unsigned char *cd, uint64_t cd_size, uint64_t *pos)
{
  if (*pos + 46 > cd_size || get32 (cd + *pos) != 0x02014b50)
    return NULL;
  unsigned char *e = cd + *pos;
  uint64_t len = 46 + (uint64_t) get16 (e + 28) + get16 (e + 30) + get16 (e + 32);
  if (*pos + len > cd_size)
    return NULL;
  *pos += len;
  return e;
}

/* The offset of entry e's local file header: its 4-byte field, or the
 * zip64 extra field's value when that holds 0xffffffff (the 8-byte values
 * present there are the sizes that overflowed, then the offset). */
static uint64_t
zip_cd_local (const unsigned char *e)
{
  uint64_t local = get32 (e + 42);
  if (local != 0xffffffff)
    return local;
  const unsigned char *x = e + 46 + get16 (e + 28), *xe = x + get16 (e + 30);
  while (x + 4 <= xe)
    {
      size_t len = get16 (x + 2);
      if (x + 4 + len > xe)
        break;
      if (get16 (x) == 0x0001)
        {
          size_t skip = (get32 (e + 24) == 0xffffffff ? 8 : 0)
                        + (get32 (e + 20) == 0xffffffff ? 8 : 0);
          return skip + 8 <= len ? get64 (x + 4 + skip) : UINT64_MAX;
        }
      x += 4 + len;
    }
  return UINT64_MAX;
}

/* Note in each member of `w` its MS-DOS time and date fields (4 bytes, as
 * stored), read from the central directory of w->file, not through
 * libarchive, which converts them with the local time zone. */
static int
zip_dos_times (ib_wheel_t *w, ib_error_t *err)
{
  cleanup_close int fd = open (w->file, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat (fd, &st) < 0)
    return ib_error_sys (err, errno, "open %s", w->file);
  cleanup_free unsigned char *cd = NULL;
  uint64_t cd_size, cd_off, count, pos = 0;
  if (zip_cd_load (fd, w->file, st.st_size, &cd, &cd_size, &cd_off, &count, err) < 0)
    return -1;
  for (uint64_t i = 0; i < count; i++)
    {
      unsigned char *e = zip_cd_next (cd, cd_size, &pos);
      if (!e)
        return ib_error_set (err, EIO, "%s: central directory entry %llu is damaged", w->file,
                             (unsigned long long) i);
      cleanup_free char *name = xstrndup ((const char *) e + 46, get16 (e + 28));
      member_t *m = ibw_find_member (w, name);
      if (m)
        {
          memcpy (m->dos, e + 12, 4);
          m->has_dos = true;
        }
    }
  return 0;
}

/* libarchive writes a zip entry's MS-DOS time fields in local time (it
 * calls localtime_r); bdist_wheel writes them in UTC.  Set them, in the
 * local file header and the central directory entry of the i-th entry of
 * the zip libarchive just wrote at `path`, to dos[i] (4 bytes as stored),
 * so that the bytes do not depend on TZ and nothing sets TZ (setenv is not
 * thread-safe).  The extended-timestamp extra field libarchive adds holds
 * the time in UTC already. */
static int
zip_set_dos_times (const char *path, const unsigned char (*dos)[4], size_t n, ib_error_t *err)
{
  cleanup_close int fd = open (path, O_RDWR | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat (fd, &st) < 0)
    return ib_error_sys (err, errno, "open %s", path);
  cleanup_free unsigned char *cd = NULL;
  uint64_t cd_size, cd_off, count, pos = 0;
  if (zip_cd_load (fd, path, st.st_size, &cd, &cd_size, &cd_off, &count, err) < 0)
    return -1;
  if (count != n)
    return ib_error_set (err, EIO, "%s: %llu entries in its central directory, %zu written", path,
                         (unsigned long long) count, n);
  for (size_t i = 0; i < n; i++)
    {
      unsigned char *e = zip_cd_next (cd, cd_size, &pos), sig[4];
      uint64_t local = e ? zip_cd_local (e) : UINT64_MAX;
      if (!e || local > (uint64_t) st.st_size - 30 || pread (fd, sig, 4, (off_t) local) != 4
          || get32 (sig) != 0x04034b50)
        return ib_error_set (err, EIO, "%s: entry %zu: damaged or no local header", path, i);
      memcpy (e + 12, dos[i], 4);
      if (pwrite (fd, dos[i], 4, (off_t) local + 10) != 4)
        return ib_error_sys (err, errno ? errno : EIO, "write %s", path);
    }
  if (pwrite (fd, cd, cd_size, (off_t) cd_off) != (ssize_t) cd_size)
    return ib_error_sys (err, errno ? errno : EIO, "write %s", path);
  return 0;
}

/* ---- the wheel written ---------------------------------------------------- */

int
ibw_write_zip (ib_wheel_t *w, const char *out, ib_error_t *err)
{
  cleanup_strv char **files = NULL;
  if (ibw_walk (w->dir, NULL, false, ibw_walk_push, &files, err) < 0)
    return -1;
  cleanup_free char *record_rel = xasprintf ("%s/RECORD", w->dist_info);
  cleanup_free char *di_prefix = xasprintf ("%s/", w->dist_info);
  size_t n = ib_strv_len (files);
  bool have_record = ib_strv_has (files, record_rel);
  zip_item_t *items = xmalloc ((n + 1) * sizeof *items);
  size_t ni = 0;
  for (size_t i = 0; i < n; i++)
    items[ni++] = (zip_item_t) { files[i], ib_str_has_prefix (files[i], di_prefix),
                                 strcmp (files[i], record_rel) == 0 };
  if (!have_record)
    items[ni++] = (zip_item_t) { record_rel, true, true };
  qsort (items, ni, sizeof *items, cmp_zip_item);
  /* RECORD: every other file's digest and size */
  ib_buf_t rec = { 0 };
  int r = -1;
  for (size_t i = 0; i < ni; i++)
    {
      if (items[i].record)
        continue;
      cleanup_free char *full = ib_path_join (w->dir, items[i].rel);
      cleanup_free char *h = NULL;
      struct stat st;
      if (stat (full, &st) < 0)
        {
          ib_error_sys (err, errno, "stat %s", full);
          goto out;
        }
      if (ibw_hash_file (full, EVP_sha256 (), &h, err) < 0)
        goto out;
      csv_field (&rec, items[i].rel);
      ib_buf_printf (&rec, ",sha256=%s,%lld\n", h, (long long) st.st_size);
    }
  csv_field (&rec, record_rel);
  ib_buf_puts (&rec, ",,\n");
  {
    cleanup_free char *full = ib_path_join (w->dir, record_rel);
    unlink (full);
    if (ib_write_file_atomic (full, rec.data, rec.len, 0644, err) < 0)
      goto out;
  }
  {
    int64_t sde = ib_source_date_epoch ();
    if (sde >= 0 && sde < 315532800) /* zip (DOS) times start in 1980 */
      sde = 315532800;
    cleanup_free char *tmp = xasprintf ("%s.tmp-%d", out, (int) getpid ());
    struct archive *a = archive_write_new ();
    archive_write_set_format_zip (a);
    archive_write_set_options (a, "zip:compression=deflate");
    if (archive_write_open_filename (a, tmp) != ARCHIVE_OK)
      {
        ib_error_set (err, EIO, "write %s: %s", tmp, archive_error_string (a));
        archive_write_free (a);
        goto out;
      }
    /* each entry's MS-DOS time fields, set by zip_set_dos_times afterwards:
     * SOURCE_DATE_EPOCH's in UTC, else a member's as the wheel stored
     * them, else (a grafted library, a new RECORD) those of the wheel's
     * newest member: a repair is a function of its inputs, so that the
     * same wheel repaired twice (OUTPUT repair= and COPY --repair) gives
     * the same bytes */
    const member_t *newest = NULL;
    if (sde < 0 && zip_dos_times (w, err) < 0)
      {
        archive_write_free (a);
        unlink (tmp);
        goto out;
      }
    for (size_t i = 0; i < w->n; i++)
      if (newest == NULL || member_time (&w->m[i]) > member_time (newest))
        newest = &w->m[i];
    time_t now = newest && member_time (newest) > 0 ? member_time (newest) : 315532800;
    unsigned char (*dos)[4] = xmalloc ((ni ? ni : 1) * sizeof *dos);
    for (size_t i = 0; i < ni; i++)
      {
        cleanup_free char *full = ib_path_join (w->dir, items[i].rel);
        cleanup_free char *data = NULL;
        size_t len = 0;
        struct stat st;
        if (stat (full, &st) < 0)
          {
            ib_error_sys (err, errno, "stat %s", full);
            archive_write_free (a);
            unlink (tmp);
            goto out;
          }
        if (ib_read_file (full, &data, &len, err) < 0)
          {
            archive_write_free (a);
            unlink (tmp);
            goto out;
          }
        member_t *m = ibw_find_member (w, items[i].rel);
        struct archive_entry *e = archive_entry_new ();
        archive_entry_set_pathname (e, items[i].rel);
        archive_entry_set_filetype (e, AE_IFREG);
        archive_entry_set_perm (e, (st.st_mode & 0111) ? 0755 : 0644);
        archive_entry_set_size (e, (la_int64_t) len);
        if (sde < 0 && m && m->has_dos)
          memcpy (dos[i], m->dos, 4);
        else if (sde < 0 && !m && newest && newest->has_dos)
          memcpy (dos[i], newest->dos, 4);
        else
          dos_time_utc (sde >= 0 ? (time_t) sde : now, dos[i]);
        archive_entry_set_mtime (e, sde >= 0 ? (time_t) sde : m && member_time (m) ? member_time (m)
                                                                                  : now, 0);
        archive_entry_set_uid (e, 0);
        archive_entry_set_gid (e, 0);
        int wr = archive_write_header (a, e);
        la_ssize_t wd = wr == ARCHIVE_OK ? archive_write_data (a, data, len) : -1;
        archive_entry_free (e);
        if (wr != ARCHIVE_OK || wd < 0 || (size_t) wd != len)
          {
            ib_error_set (err, EIO, "write %s: %s: %s", tmp, items[i].rel,
                          archive_error_string (a));
            archive_write_free (a);
            unlink (tmp);
            goto out;
          }
      }
    int closed = archive_write_close (a);
    if (closed != ARCHIVE_OK)
      {
        ib_error_set (err, EIO, "write %s: %s", tmp, archive_error_string (a));
        archive_write_free (a);
        unlink (tmp);
        goto out;
      }
    archive_write_free (a);
    int set = zip_set_dos_times (tmp, (const unsigned char (*)[4]) dos, ni, err);
    free (dos);
    if (set < 0)
      {
        unlink (tmp);
        goto out;
      }
    if (rename (tmp, out) < 0)
      {
        ib_error_sys (err, errno, "rename %s", tmp);
        unlink (tmp);
        goto out;
      }
  }
  r = 0;
out:
  ib_buf_free (&rec);
  free (items);
  return r;
}
