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
/* A copy of the `n` bytes at `s` without the ASCII white space (space, \t,
 * \n, \v, \f, \r) at either end.  Caller frees. */
char *xstrndup_trimmed (const char *s, size_t n);
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
void ib_strv_sort (char **v);                      /* by strcmp, in place; NULL ok */
int ib_cmp_strp (const void *a, const void *b);    /* qsort / bsearch over char * */
void ib_strv_push (char ***v, const char *s);   /* copies s */
/* Set "K=V" (copied) in an environment vector: it replaces the entry of
 * the same name K, else goes at the end (execve's envp: one entry per
 * name, as runc and CDI's spec edits make it). */
void ib_env_set (char ***env, const char *kv);
void ib_strv_free (char **v);
char **ib_strv_dup (char *const *v);

/* A string vector that keeps its length and capacity, for lists that grow
 * large (ib_strv_push counts the list on every call: n pushes cost O(n^2)).
 * Start from IB_STRV_BUILDER_INIT; `v` is NULL-terminated whenever n > 0.
 * ib_strv_builder_push copies s; ib_strv_builder_take takes ownership of s
 * (malloc'd).  ib_strv_builder_steal returns the vector (never NULL: an empty
 * one when nothing was pushed; caller frees with ib_strv_free) and resets the
 * builder; ib_strv_builder_free frees what it holds. */
typedef struct ib_strv_builder
{
  char **v;
  size_t n, cap;
} ib_strv_builder_t;
#define IB_STRV_BUILDER_INIT { NULL, 0, 0 }
void ib_strv_builder_push (ib_strv_builder_t *b, const char *s);
void ib_strv_builder_take (ib_strv_builder_t *b, char *s);
char **ib_strv_builder_steal (ib_strv_builder_t *b);
void ib_strv_builder_free (ib_strv_builder_t *b);

/* A copy of `s` fit to print on a terminal: every control character
 * becomes '?' — C0 (below 0x20) and DEL, except '\n' when keep_nl
 * (multi-line messages keep their lines; a recipe's text can never hold a
 * raw newline in a one-line message), and C1: U+0080-U+009F in UTF-8 (one
 * '?' for the two bytes) and a byte 0x80-0x9f outside a UTF-8 sequence
 * (8-bit CSI, OSC...).  Other text, UTF-8 or not, is kept.  Escape
 * sequences (ESC = 0x1b, CSI = 0x9b) are thus never passed through.  The
 * one escaper of terminal output: the error line, log lines, the
 * progress display and `imgbuild plan`.  NULL -> NULL; caller frees. */
char *ib_str_printable (const char *s, bool keep_nl);

/* A copy of `s` that is valid UTF-8: each byte outside a UTF-8 sequence
 * (as ib_str_printable reads them) becomes U+FFFD, as Go's encoding/json
 * writes such text; for JSON, which jansson refuses otherwise.  NULL ->
 * NULL; caller frees. */
char *ib_str_utf8 (const char *s);

/* Parse a decimal user or group id: digits only (no sign, no blanks), value
 * 0 to 4294967294 ((uid_t) -1 is refused: it means "no change" to chown and
 * setresuid).  Returns 0 with *out set, or -1 (no error object: callers name
 * the thing in their own message). */
int ib_parse_id (const char *s, uint32_t *out);

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

/* ib_read_file, reading at most `max` bytes: a longer file (or a device
 * such as /dev/zero, a pipe that does not end) fails with EFBIG, "read
 * PATH: more than MAX bytes", after reading max + 1 bytes.  `what` names
 * the file in messages (e.g. "recipe"; NULL: the path alone). */
int ib_read_file_max (const char *path, size_t max, const char *what, char **data, size_t *len,
                      ib_error_t *err);

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
/* ib_copy_fd_data naming each side: errors reading name `src_shown`
 * ("read SRC: ..."), errors writing name `dst_shown` ("write DST: No space
 * left on device": ENOSPC, EDQUOT, EFBIG, EROFS and EIO of the copy or of a
 * write are the destination's), others both ("copy SRC to DST: ...").
 * `dst_shown` NULL: every error names the source, as ib_copy_fd_data's. */
int ib_copy_fd_data_to (int in, int out, const char *src_shown, const char *dst_shown,
                        ib_error_t *err);

/* fsync a directory (after a rename into it). */
int ib_fsync_dir (const char *dir, ib_error_t *err);

/* Remove a tree like `rm -rf`, making directories writable first where
 * needed.  A missing path is not an error. */
int ib_rm_rf (const char *path, ib_error_t *err);

/* Logging to stderr.  ib_verbosity: 0 quiet (warnings and errors only),
 * 1 normal, 2 debug.  Control characters of a line other than '\n' are
 * written as '?' (lines quote recipes and image data). */
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
