/* common/error.h — the one error convention of imgbuild (crun's, see DESIGN.md).
 *
 * A function that can fail takes `ib_error_t *err` as its last argument,
 * returns a negative int (or NULL) on failure and sets *err to an allocated
 * error.  The caller owns *err: it either passes it up (optionally adding
 * context with ib_error_prefix) or reports it and calls ib_error_free.
 * *err must be NULL on entry.  No exit() outside the CLI (builder/cli/).
 *
 * Ignoring an error: pass NULL as `err`.  The call fails as it would
 * (same return value, same cleanup) and no error is made; the caller
 * writes why it goes on regardless, e.g.
 *     // best effort: the .id file only names the directory for people
 *     ib_write_file_atomic (idf, id, strlen (id), 0644, NULL);
 * Every function taking `ib_error_t *err` accepts NULL: one that must look
 * at a callee's error (its status, to go on after ENOENT) takes it in a
 * local `ib_error_t` and hands it up with ib_error_propagate, never
 * through (*err).  To show an error instead of dropping it, use
 * ib_error_report (or ib_warn with its msg) and ib_error_free.
 */
#ifndef IB_COMMON_ERROR_H
#define IB_COMMON_ERROR_H

#include <stdarg.h>

struct ib_error_s {
  int status;   /* errno-style code (0 when the failure has none) */
  char *msg;    /* full message, context first: "pull X: blob Y: digest mismatch" */
};
typedef struct ib_error_s *ib_error_t;

/* Set *err to a new error with errno-style `status` and a printf message.
 * Returns -1 so that `return ib_error_set(err, ...)` reads naturally. */
int ib_error_set(ib_error_t *err, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Same, with ": strerror(status)" appended to the message. */
int ib_error_sys(ib_error_t *err, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepend "context: " to an existing error; returns -1.  No-op if *err is NULL. */
int ib_error_prefix(ib_error_t *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Hand the error in *from (taken: *from becomes NULL) to the caller's
 * `err`: stored there when err is not NULL and holds no error yet, freed
 * otherwise (ignored, or a first error kept, as ib_error_set does).
 * Returns -1. */
int ib_error_propagate(ib_error_t *err, ib_error_t *from);

/* Free *err (may be NULL) and set it to NULL. */
void ib_error_free(ib_error_t *err);

/* Print "imgbuild: <msg>" to stderr and free the error.  Control
 * characters of the message (ESC and the rest below 0x20, 0x7f) are
 * printed as '?', newlines excepted (ib_str_printable): a message may
 * quote any text of a recipe or an image. */
void ib_error_report(ib_error_t *err);

#endif
