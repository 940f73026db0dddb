/* oci/lazy_archive.c — libarchive, loaded on its first use
 * (common/lazylib.h): a stub per function imgbuild calls.  A function
 * used for the first time gets a line here (the build fails with an
 * undefined reference until it has one); the compiler checks each
 * against <archive.h> and <archive_entry.h>. */
#include "common/lazylib.h"

#include <archive.h>
#include <archive_entry.h>
#include <stdarg.h>
#include <stdio.h>

IB_LAZYLIB (archive_lib, IB_SONAME_ARCHIVE, "tar archives, layers and zip files");

IB_LAZY (archive_lib, time_t, archive_entry_atime, (struct archive_entry *a0), (a0))
IB_LAZY (archive_lib, int, archive_entry_atime_is_set, (struct archive_entry *a0), (a0))
IB_LAZY (archive_lib, long, archive_entry_atime_nsec, (struct archive_entry *a0), (a0))
IB_LAZY (archive_lib, mode_t, archive_entry_filetype, (struct archive_entry *a0), (a0))
IB_LAZY_VOID (archive_lib, archive_entry_free, (struct archive_entry *a0), (a0))
IB_LAZY (archive_lib, la_int64_t, archive_entry_gid, (struct archive_entry *a0), (a0))
IB_LAZY (archive_lib, const char *, archive_entry_hardlink, (struct archive_entry *a0), (a0))
IB_LAZY (archive_lib, time_t, archive_entry_mtime, (struct archive_entry *a0), (a0))
IB_LAZY (archive_lib, int, archive_entry_mtime_is_set, (struct archive_entry *a0), (a0))
IB_LAZY (archive_lib, long, archive_entry_mtime_nsec, (struct archive_entry *a0), (a0))
IB_LAZY (archive_lib, struct archive_entry *, archive_entry_new, (void), ())
IB_LAZY (archive_lib, const char *, archive_entry_pathname, (struct archive_entry *a0), (a0))
IB_LAZY (archive_lib, mode_t, archive_entry_perm, (struct archive_entry *a0), (a0))
IB_LAZY (archive_lib, dev_t, archive_entry_rdevmajor, (struct archive_entry *a0), (a0))
IB_LAZY (archive_lib, dev_t, archive_entry_rdevminor, (struct archive_entry *a0), (a0))
IB_LAZY_VOID (archive_lib, archive_entry_set_filetype, (struct archive_entry *a0, unsigned int a1), (a0, a1))
IB_LAZY_VOID (archive_lib, archive_entry_set_gid, (struct archive_entry *a0, la_int64_t a1), (a0, a1))
IB_LAZY_VOID (archive_lib, archive_entry_set_hardlink, (struct archive_entry *a0, const char *a1), (a0, a1))
IB_LAZY_VOID (archive_lib, archive_entry_set_mtime, (struct archive_entry *a0, time_t a1, long a2), (a0, a1, a2))
IB_LAZY_VOID (archive_lib, archive_entry_set_pathname, (struct archive_entry *a0, const char *a1), (a0, a1))
IB_LAZY_VOID (archive_lib, archive_entry_set_perm, (struct archive_entry *a0, mode_t a1), (a0, a1))
IB_LAZY_VOID (archive_lib, archive_entry_set_rdevmajor, (struct archive_entry *a0, dev_t a1), (a0, a1))
IB_LAZY_VOID (archive_lib, archive_entry_set_rdevminor, (struct archive_entry *a0, dev_t a1), (a0, a1))
IB_LAZY_VOID (archive_lib, archive_entry_set_size, (struct archive_entry *a0, la_int64_t a1), (a0, a1))
IB_LAZY_VOID (archive_lib, archive_entry_set_symlink, (struct archive_entry *a0, const char *a1), (a0, a1))
IB_LAZY_VOID (archive_lib, archive_entry_set_uid, (struct archive_entry *a0, la_int64_t a1), (a0, a1))
IB_LAZY (archive_lib, la_int64_t, archive_entry_size, (struct archive_entry *a0), (a0))
IB_LAZY (archive_lib, const char *, archive_entry_symlink, (struct archive_entry *a0), (a0))
IB_LAZY (archive_lib, la_int64_t, archive_entry_uid, (struct archive_entry *a0), (a0))
IB_LAZY_VOID (archive_lib, archive_entry_xattr_add_entry, (struct archive_entry *a0, const char *a1, const void *a2, size_t a3), (a0, a1, a2, a3))
IB_LAZY (archive_lib, int, archive_entry_xattr_count, (struct archive_entry *a0), (a0))
IB_LAZY (archive_lib, int, archive_entry_xattr_next, (struct archive_entry *a0, const char **a1, const void **a2, size_t *a3), (a0, a1, a2, a3))
IB_LAZY (archive_lib, int, archive_entry_xattr_reset, (struct archive_entry *a0), (a0))
IB_LAZY (archive_lib, int, archive_errno, (struct archive *a0), (a0))
IB_LAZY (archive_lib, const char *, archive_error_string, (struct archive *a0), (a0))
IB_LAZY (archive_lib, la_ssize_t, archive_read_data, (struct archive *a0, void *a1, size_t a2), (a0, a1, a2))
IB_LAZY (archive_lib, int, archive_read_data_block, (struct archive *a0, const void **a1, size_t *a2, la_int64_t *a3), (a0, a1, a2, a3))
IB_LAZY (archive_lib, int, archive_read_free, (struct archive *a0), (a0))
IB_LAZY (archive_lib, struct archive *, archive_read_new, (void), ())
IB_LAZY (archive_lib, int, archive_read_next_header, (struct archive *a0, struct archive_entry **a1), (a0, a1))
IB_LAZY (archive_lib, int, archive_read_open, (struct archive *a0, void *a1, archive_open_callback *a2, archive_read_callback *a3, archive_close_callback *a4), (a0, a1, a2, a3, a4))
IB_LAZY (archive_lib, int, archive_read_open_filename, (struct archive *a0, const char *a1, size_t a2), (a0, a1, a2))
IB_LAZY (archive_lib, int, archive_read_support_filter_all, (struct archive *a0), (a0))
IB_LAZY (archive_lib, int, archive_read_support_format_empty, (struct archive *a0), (a0))
IB_LAZY (archive_lib, int, archive_read_support_format_gnutar, (struct archive *a0), (a0))
IB_LAZY (archive_lib, int, archive_read_support_format_raw, (struct archive *a0), (a0))
IB_LAZY (archive_lib, int, archive_read_support_format_tar, (struct archive *a0), (a0))
IB_LAZY (archive_lib, int, archive_read_support_format_zip_seekable, (struct archive *a0), (a0))
IB_LAZY (archive_lib, int, archive_write_add_filter_none, (struct archive *a0), (a0))
IB_LAZY (archive_lib, int, archive_write_close, (struct archive *a0), (a0))
IB_LAZY (archive_lib, la_ssize_t, archive_write_data, (struct archive *a0, const void *a1, size_t a2), (a0, a1, a2))
IB_LAZY (archive_lib, la_ssize_t, archive_write_data_block, (struct archive *a0, const void *a1, size_t a2, la_int64_t a3), (a0, a1, a2, a3))
IB_LAZY (archive_lib, struct archive *, archive_write_disk_new, (void), ())
IB_LAZY (archive_lib, int, archive_write_disk_set_options, (struct archive *a0, int a1), (a0, a1))
IB_LAZY (archive_lib, int, archive_write_finish_entry, (struct archive *a0), (a0))
IB_LAZY (archive_lib, int, archive_write_free, (struct archive *a0), (a0))
IB_LAZY (archive_lib, int, archive_write_header, (struct archive *a0, struct archive_entry *a1), (a0, a1))
IB_LAZY (archive_lib, struct archive *, archive_write_new, (void), ())
IB_LAZY (archive_lib, int, archive_write_open2, (struct archive *a0, void *a1, archive_open_callback *a2, archive_write_callback *a3, archive_close_callback *a4, archive_free_callback *a5), (a0, a1, a2, a3, a4, a5))
IB_LAZY (archive_lib, int, archive_write_open_filename, (struct archive *a0, const char *a1), (a0, a1))
IB_LAZY (archive_lib, int, archive_write_set_bytes_in_last_block, (struct archive *a0, int a1), (a0, a1))
IB_LAZY (archive_lib, int, archive_write_set_bytes_per_block, (struct archive *a0, int a1), (a0, a1))
IB_LAZY (archive_lib, int, archive_write_set_format_option, (struct archive *a0, const char *a1, const char *a2, const char *a3), (a0, a1, a2, a3))
IB_LAZY (archive_lib, int, archive_write_set_format_pax_restricted, (struct archive *a0), (a0))
IB_LAZY (archive_lib, int, archive_write_set_format_ustar, (struct archive *a0), (a0))
IB_LAZY (archive_lib, int, archive_write_set_format_zip, (struct archive *a0), (a0))
IB_LAZY (archive_lib, int, archive_write_set_options, (struct archive *a0, const char *a1), (a0, a1))

/* used by the unit tests only */
IB_LAZY (archive_lib, int, archive_entry_birthtime_is_set, (struct archive_entry *a0), (a0))
IB_LAZY (archive_lib, int, archive_entry_ctime_is_set, (struct archive_entry *a0), (a0))
IB_LAZY (archive_lib, const char *, archive_entry_gname, (struct archive_entry *a0), (a0))
IB_LAZY_VOID (archive_lib, archive_entry_sparse_add_entry, (struct archive_entry *a0, la_int64_t a1, la_int64_t a2), (a0, a1, a2))
IB_LAZY (archive_lib, const char *, archive_entry_uname, (struct archive_entry *a0), (a0))
IB_LAZY (archive_lib, int, archive_read_support_filter_gzip, (struct archive *a0), (a0))
IB_LAZY (archive_lib, int, archive_write_add_filter_gzip, (struct archive *a0), (a0))
IB_LAZY (archive_lib, int, archive_write_add_filter_zstd, (struct archive *a0), (a0))
IB_LAZY (archive_lib, int, archive_write_open_memory, (struct archive *a0, void *a1, size_t a2, size_t *a3), (a0, a1, a2, a3))

/* (variadic: the message is formatted here) */
void
archive_set_error (struct archive *a, int code, const char *fmt, ...)
{
  char msg[1024];
  va_list ap;
  va_start (ap, fmt);
  vsnprintf (msg, sizeof msg, fmt, ap);
  va_end (ap);
  IB_LAZY_FN (archive_lib, archive_set_error) (a, code, "%s", msg);
}
