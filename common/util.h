/* common/util.h — allocation, cleanup attributes, buffers, files, logging.
 *
 * x* allocators abort on out-of-memory (as crun's xmalloc does): every other
 * failure goes through ib_error_t (common/error.h).
 */
#ifndef IB_COMMON_UTIL_H
#define IB_COMMON_UTIL_H

#include "common/error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

void *xmalloc (size_t size);              /* zeroed */
void *xrealloc (void *p, size_t size);
char *xstrdup (const char *s);            /* NULL -> NULL */
char *xstrndup (const char *s, size_t n);
char *xasprintf (const char *fmt, ...) __attribute__ ((format (printf, 1, 2)));

/* Cleanup attributes: the variable is released when it goes out of scope. */
void ib_cleanup_freep (void *p);
void ib_cleanup_closep (int *fd);
void ib_cleanup_fclosep (FILE **f);
void ib_cleanup_strvp (char ***v);
#define cleanup_free __attribute__ ((cleanup (ib_cleanup_freep)))
#define cleanup_close __attribute__ ((cleanup (ib_cleanup_closep)))
#define cleanup_file __attribute__ ((cleanup (ib_cleanup_fclosep)))
#define cleanup_strv __attribute__ ((cleanup (ib_cleanup_strvp)))

/* Transfer ownership out of a cleanup variable: returns *p and sets it to NULL / -1. */
#define steal_pointer(pp) ({ __typeof__ (*(pp)) _v = *(pp); *(pp) = NULL; _v; })
static inline int steal_fd (int *fd) { int v = *fd; *fd = -1; return v; }

/* Growable byte buffer; data is always NUL-terminated (not counted in len). */
typedef struct ib_buf
{
  char *data;
  size_t len, cap;
} ib_buf_t;
void ib_buf_append (ib_buf_t *b, const void *data, size_t len);
void ib_buf_puts (ib_buf_t *b, const char *s);
void ib_buf_printf (ib_buf_t *b, const char *fmt, ...) __attribute__ ((format (printf, 2, 3)));
char *ib_buf_steal (ib_buf_t *b);         /* returns data (never NULL), resets b */
void ib_buf_free (ib_buf_t *b);

/* NULL-terminated string vectors. */
size_t ib_strv_len (char *const *v);
bool ib_strv_has (char *const *v, const char *s); /* an element equal to s (v may be NULL) */
void ib_strv_push (char ***v, const char *s);   /* copies s */
void ib_strv_free (char **v);
char **ib_strv_dup (char *const *v);

bool ib_str_has_prefix (const char *s, const char *prefix);
bool ib_str_has_suffix (const char *s, const char *suffix);

/* "a" + "/" + "b" without doubled slashes; caller frees. */
char *ib_path_join (const char *a, const char *b);

/* An absolute path cleaned lexically, as Go's path.Clean: doubled slashes
 * and "." dropped, ".." removes the component before it (never above "/"),
 * no trailing slash.  PATH is taken as absolute whether or not it starts
 * with "/".  Caller frees. */
char *ib_path_clean_abs (const char *path);

/* mkdir -p; existing directories are fine. */
int ib_mkdir_p (const char *path, mode_t mode, ib_error_t *err);

/* Read a whole file; *data is NUL-terminated and owned by the caller. */
int ib_read_file (const char *path, char **data, size_t *len, ib_error_t *err);

/* Write `len` bytes to `path` atomically: temp file in the same directory,
 * fsync, rename, fsync of the directory.  Readers see the old or new file. */
int ib_write_file_atomic (const char *path, const void *data, size_t len, mode_t mode,
                          ib_error_t *err);

/* write() all `len` bytes, retrying on EINTR and short writes.  `shown`
 * names the file in the error. */
int ib_write_all (int fd, const void *data, size_t len, const char *shown, ib_error_t *err);
/* ib_write_all to a pipe whose reader may be gone (a child that exited):
 * EPIPE comes back as an error naming `shown` instead of SIGPIPE killing
 * the process (SIGPIPE is blocked for the calling thread meanwhile, and a
 * pending one consumed). */
int ib_write_pipe (int fd, const void *data, size_t len, const char *shown, ib_error_t *err);

/* Copy the rest of `in` to `out` (both regular files): a reflink (FICLONE)
 * where the filesystem shares extents, else copy_file_range, else
 * read/write.  `shown` names the source in errors. */
int ib_copy_fd_data (int in, int out, const char *shown, ib_error_t *err);

/* fsync a directory (after a rename into it). */
int ib_fsync_dir (const char *dir, ib_error_t *err);

/* Remove a tree like `rm -rf`, making directories writable first where
 * needed.  A missing path is not an error. */
int ib_rm_rf (const char *path, ib_error_t *err);

/* Logging to stderr.  ib_verbosity: 0 quiet (warnings and errors only),
 * 1 normal, 2 debug. */
extern int ib_verbosity;
void ib_info (const char *fmt, ...) __attribute__ ((format (printf, 1, 2)));
void ib_warn (const char *fmt, ...) __attribute__ ((format (printf, 1, 2)));
void ib_debug (const char *fmt, ...) __attribute__ ((format (printf, 1, 2)));

/* Where log lines go instead of stderr while a progress display needs them
 * (common/progress.c: above the TTY bars, or as JSON events).  `sink` gets
 * the level ("info", "warning" or "debug"), the whole line as it would be
 * printed (prefix included, no newline) and `ud`; NULL restores stderr.
 * Set and cleared by one thread while no other thread logs. */
typedef void (*ib_log_sink_fn) (const char *level, const char *line, void *ud);
void ib_log_set_sink (ib_log_sink_fn sink, void *ud);
void ib_log_get_sink (ib_log_sink_fn *sink, void **ud);

/* Seconds since the epoch from $SOURCE_DATE_EPOCH, or -1 when unset/invalid. */
int64_t ib_source_date_epoch (void);

/* `n` bytes in decimal units without a space, as docker prints them:
 * "512B", "12.3kB", "45.6MB", "1.23GB".  Writes at most 24 bytes. */
void ib_human_size (int64_t n, char out[24]);

#endif
