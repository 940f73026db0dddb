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
 *   RELAY  (a child process whose parent shows its progress) JSON lines
 *          on a pipe, log lines included; see "relay" below.
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
#include <sys/types.h>

typedef enum
{
  IB_PROGRESS_AUTO,  /* TTY when the output is a terminal and TERM is set and not "dumb", else PLAIN */
  IB_PROGRESS_TTY,
  IB_PROGRESS_PLAIN,
  IB_PROGRESS_JSON,
  IB_PROGRESS_QUIET,
  IB_PROGRESS_RELAY, /* set by ib_progress_relay_to only: JSON lines for a parent process */
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

/* ib_progress_begin for a display that goes on after another one showed
 * in between (a build's, after a pull's): the title is not printed again
 * (JSON events still carry it). */
ib_progress_t *ib_progress_continue (const char *title);

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

/* Output lines an item keeps for the TTY view. */
#define IB_PROGRESS_TAIL_LINES 5

/* A line of output of the item's work (e.g. a build step's RUN; copied,
 * control characters shown as '?'), while it is unfinished.  TTY: the
 * item's last IB_PROGRESS_TAIL_LINES lines are shown under its line, "  > "
 * first (fewer when the terminal has not the rows), until it finishes.
 * PLAIN: "ID: LINE".  JSON: a "message" event "ID LINE"; relay: an
 * "output" event, which the parent's item shows.  Finished and
 * out-of-range items are ignored. */
void ib_progress_output (ib_progress_t *p, int item, const char *line);

/* TTY: while the item is unfinished, its line ends with the whole seconds
 * since it was added ("  12s"; the text before it is cut to make room),
 * redrawn at least once a second (e.g. a build step that runs).  Relay: an
 * "elapsed" event, so that the parent's item shows it too.  PLAIN and
 * JSON: nothing.  Out-of-range and finished items are ignored. */
void ib_progress_show_elapsed (ib_progress_t *p, int item);

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

/* fork() with p's ticker thread (TTY) stopped, so that the child starts
 * with one thread and no lock (of the display, of stdio, of the
 * allocator) held by a thread it does not have; the parent's ticker is
 * started again after.  The caller must have no other threads at the
 * time.  Returns fork()'s value (-1 with errno on failure).  In the child
 * p is abandoned: it must not be used or ended (its memory goes with the
 * process), and log lines go where they went before p began.  p == NULL:
 * a plain fork(). */
pid_t ib_progress_fork (ib_progress_t *p);

/* ---------- relay: a child process's displays shown by its parent ----------
 *
 * A child that must not write to the parent's terminal sends its progress
 * over a pipe instead: every display it begins emits the JSON mode's
 * events (one object per line, schema in docs/cli.md; plus "elapsed" for
 * ib_progress_show_elapsed, which JSON mode does not emit) and every log line
 * of the process (ib_info, ib_warn) becomes a line
 * {"event":"log","level":"info","message":"..."}.  The parent reads the
 * pipe and replays the events on a display of its own
 * (ib_progress_relay_feed). */

/* Send this process's progress to `fd` from now on: the mode becomes
 * IB_PROGRESS_RELAY (ib_progress_resolved_mode says so; displays behave
 * as in JSON mode), the output a stream on fd and every log line a "log"
 * event.  fd is owned from then on (the stream stays open until the
 * process exits).  For a freshly forked child, before any display begins.
 * Returns 0, or -1 with errno when fd cannot be opened as a stream (then
 * nothing changed). */
int ib_progress_relay_to (int fd);

typedef struct ib_progress_relay ib_progress_relay_t;

/* A reader of one child's relay lines that replays them on display p (not
 * owned; it must outlive the reader): the child's items become items of
 * p, its messages and log lines messages of p.  A display of the child's
 * titled other than p (a pull while it builds) shows as a message with
 * its title, then its items; both start with `prefix` (copied; NULL: "";
 * e.g. "[build] ", so that two children's pulls can be told apart).
 * p == NULL: log lines go to stderr, the rest is dropped.  Never NULL;
 * free with ib_progress_relay_end. */
ib_progress_relay_t *ib_progress_relay_new (ib_progress_t *p, const char *prefix);

/* Bytes read from the child's pipe, split anywhere: complete lines are
 * replayed, a partial line is kept until its newline (at most 1 MiB; a
 * longer line is dropped).  Lines that are not relay events are ignored.
 * NULL r ok. */
void ib_progress_relay_feed (ib_progress_relay_t *r, const char *data, size_t len);

/* The child has ended: what is left of a last line without newline is
 * replayed, items it left unfinished are marked failed with `status`
 * (copied; e.g. "CANCELED"; NULL: "ERROR"), and r is freed.  NULL ok. */
void ib_progress_relay_end (ib_progress_relay_t *r, const char *status);

/* The first 12 hex digits of a "sha256:..." digest (or of any string after
 * its last ':'), as ids are shown: out gets at most 12 characters + NUL. */
void ib_progress_short_id (const char *digest, char out[13]);

#endif
