/* common/progress.h — progress output for long operations (pull, push).
 *
 * One progress display per operation ("pull docker.io/library/debian:bookworm")
 * with one item per blob ("4f4fb700ef54: Downloading").  Output goes to
 * stderr (or the FILE given to ib_progress_set_output) in the process-wide
 * mode set once by the CLI (docs/cli.md, "Progress output"):
 *
 *   TTY    docker-pull-like bars, one line per item, redrawn in place with
 *          ANSI cursor movement at most 10 times a second; only the last
 *          (terminal rows - 1) items are redrawn, lines are cut to the
 *          terminal width (TIOCGWINSZ); the final state stays on screen.
 *   PLAIN  no redraws: one line per state change of an item, plus at most
 *          one "still <action>" line per item per 10 s of transfer.
 *   JSON   one JSON object per line (schema in docs/cli.md); updates at
 *          most twice a second per item.
 *   QUIET  nothing.
 *
 * Every function is thread-safe (one mutex per display; each line or redraw
 * is written with one fwrite) and accepts p == NULL as a no-op, so callers
 * can pass a NULL display where they want no progress.  Byte counts are
 * bytes; times come from CLOCK_MONOTONIC (speeds, throttling) and
 * CLOCK_REALTIME (JSON "time") unless ib_progress_set_clock says otherwise.
 * Nothing here fails: output errors are ignored, allocation aborts (xmalloc).
 * Implements the "Progress" bullet of issue 3.
 */
#ifndef IB_COMMON_PROGRESS_H
#define IB_COMMON_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef enum
{
  IB_PROGRESS_AUTO,  /* TTY when the output is a terminal and TERM is set and not "dumb", else PLAIN */
  IB_PROGRESS_TTY,
  IB_PROGRESS_PLAIN,
  IB_PROGRESS_JSON,
  IB_PROGRESS_QUIET,
} ib_progress_mode_t;

/* Process-wide mode (default AUTO); set once by the CLI before any display
 * begins.  AUTO is resolved when a display begins. */
void ib_progress_set_mode (ib_progress_mode_t mode);

/* The mode set (not resolved): what ib_progress_set_mode last got. */
ib_progress_mode_t ib_progress_get_mode (void);

/* The mode a display begun now would use: AUTO resolved against the
 * output (TTY when it is a terminal and TERM is set and not "dumb", else
 * PLAIN). */
ib_progress_mode_t ib_progress_resolved_mode (void);

/* Parse "auto", "tty", "plain", "json" or "quiet" into *mode; -1 for
 * anything else (the CLI reports it). */
int ib_progress_parse_mode (const char *s, ib_progress_mode_t *mode);

/* Where output goes (default stderr; NULL restores stderr).  For tests;
 * set before ib_progress_begin.  Not owned: the caller closes it. */
void ib_progress_set_output (FILE *f);

/* Replace the clock (for tests): now_ns returns nanoseconds and serves both
 * as the monotonic clock (throttling, speeds) and as time since the epoch
 * (JSON "time").  NULL restores the real clocks. */
void ib_progress_set_clock (int64_t (*now_ns) (void));

/* Fix the terminal size used in TTY mode (for tests); 0, 0 (the default)
 * asks the output's terminal with TIOCGWINSZ on every redraw, 80x24 when
 * that fails. */
void ib_progress_set_term_size (int cols, int rows);

typedef struct ib_progress ib_progress_t;

/* Begin a display titled `title` (copied), e.g. "pull
 * docker.io/library/debian:bookworm"; TTY and PLAIN print the title as a
 * line.  Never NULL; free with ib_progress_end.  One TTY display at a time
 * per terminal; while it is up, log lines (ib_info, ib_warn: common/util.h
 * ib_log_set_sink) are printed above its bars instead of through them. */
ib_progress_t *ib_progress_begin (const char *title);

/* Add an item and return its index (0, 1, ...).  id: short name shown
 * first, e.g. the first 12 hex digits of a digest; action: what is done
 * to it, e.g. "Downloading", "Preparing" (both copied); total: size in
 * bytes, or -1 when unknown (then bytes and speed only, no bar).  PLAIN
 * prints "ID: ACTION TOTAL".  Returns -1 when p is NULL. */
int ib_progress_add (ib_progress_t *p, const char *id, const char *action, int64_t total);

/* Bytes of the item done so far (absolute, not a delta).  The first update
 * marks the start of the transfer: call it with the bytes already present
 * (0, or the offset a resumed download starts at); speeds count the bytes
 * after it.  Cheap: takes the lock, renders only when the throttle allows
 * (TTY 10/s overall, JSON 2/s per item, PLAIN a "still" line per 10 s).
 * Out-of-range items are ignored. */
void ib_progress_update (ib_progress_t *p, int item, int64_t done);

/* Change the text shown for the item, e.g. "Pushing", "Extracting",
 * "Retrying in 2s (HTTP 503)", "Waiting" (copied); NULL goes back to the
 * action.  PLAIN prints "ID: STATUS" when it differs from the last line. */
void ib_progress_set_status (ib_progress_t *p, int item, const char *status);

/* The item is finished: ok or not, with its final text ("Pull complete",
 * "Already exists", "Pushed", or an error message; copied; NULL keeps the
 * current text).  PLAIN prints "ID: STATUS (SIZE in T s, SPEED/s)" when
 * bytes were transferred, "ID: STATUS" otherwise.  Later calls for the item
 * are ignored. */
void ib_progress_done (ib_progress_t *p, int item, bool ok, const char *status);

/* A one-line message belonging to the display, e.g. "bookworm: digest:
 * sha256:.. size: 529" (printf format): TTY prints it above the item lines,
 * PLAIN as a line, JSON as a "message" event, QUIET not at all. */
void ib_progress_message (ib_progress_t *p, const char *fmt, ...)
    __attribute__ ((format (printf, 2, 3)));

/* Final render (TTY: every item's final line stays on screen) and free.
 * NULL ok. */
void ib_progress_end (ib_progress_t *p);

/* The first 12 hex digits of a "sha256:..." digest (or of any string after
 * its last ':'), as ids are shown: out gets at most 12 characters + NUL. */
void ib_progress_short_id (const char *digest, char out[13]);

#endif
