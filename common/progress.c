/* common/progress.c — progress output: TTY bars, plain lines, JSON lines.
 *
 * State lives in one struct per display under one mutex; every output
 * (a line, or a whole TTY redraw) is formatted into a buffer first and
 * written with one fwrite, so lines from different threads never mix.  In
 * TTY mode with the real clock a ticker thread redraws what changed every
 * 100 ms, so the threads that report bytes never write to the terminal.
 */
#include "common/progress.h"
#include "common/util.h"

#include <ctype.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define NS_PER_MS 1000000LL
#define NS_PER_S 1000000000LL
#define TTY_INTERVAL_NS (100 * NS_PER_MS)   /* at most 10 redraws a second */
#define JSON_INTERVAL_NS (500 * NS_PER_MS)  /* at most 2 updates a second per item */
#define PLAIN_STILL_NS (10 * NS_PER_S)      /* a "still ..." line per 10 s per item */
#define BAR_MAX 50                          /* inner width of the bar, as docker */
#define BAR_MIN 10                          /* narrower than this: no bar */

static ib_progress_mode_t g_mode = IB_PROGRESS_AUTO;
static FILE *g_out;
static int64_t (*g_clock) (void);
static int g_cols, g_rows;

struct item
{
  char *id, *action;
  char *status;     /* shown text; NULL: the action */
  char *last_plain; /* PLAIN: the text of the item's last line */
  int64_t total, done;
  bool started, finished, ok;
  bool frozen_unfinished; /* TTY: scrolled out of the redrawn rows before it finished */
  bool elapsed;           /* TTY: its line ends with the time since it was added */
  char *tail[IB_PROGRESS_TAIL_LINES]; /* TTY: its last output lines, oldest first */
  int n_tail;
  int64_t start_ns, start_done, end_ns;
  int64_t last_json_ns, last_plain_ns;
};

struct ib_progress
{
  pthread_mutex_t lock;
  ib_progress_mode_t mode; /* resolved: never AUTO nor RELAY (that is JSON with `relay`) */
  bool relay;              /* JSON events for a parent process (ib_progress_relay_to) */
  FILE *out;
  char *title;
  struct item *items;
  int n, cap;
  /* TTY */
  int first_live;  /* items before it are lines above the redrawn rows */
  int lines_drawn; /* rows drawn last time, below which the cursor sits */
  int64_t last_draw_ns;
  bool dirty;
  bool ticker_running, stop;
  pthread_t ticker;
  pthread_cond_t wake;
  ib_log_sink_fn saved_sink; /* TTY: log lines go above the bars meanwhile */
  void *saved_sink_ud;
};

void
ib_progress_set_mode (ib_progress_mode_t mode)
{
  g_mode = mode;
}

ib_progress_mode_t
ib_progress_get_mode (void)
{
  return g_mode;
}

int
ib_progress_parse_mode (const char *s, ib_progress_mode_t *mode)
{
  static const struct
  {
    const char *name;
    ib_progress_mode_t mode;
  } names[] = { { "auto", IB_PROGRESS_AUTO }, { "tty", IB_PROGRESS_TTY },
                { "plain", IB_PROGRESS_PLAIN }, { "json", IB_PROGRESS_JSON },
                { "quiet", IB_PROGRESS_QUIET } };
  for (size_t i = 0; s && i < sizeof names / sizeof names[0]; i++)
    if (strcmp (s, names[i].name) == 0)
      {
        *mode = names[i].mode;
        return 0;
      }
  return -1;
}

void
ib_progress_set_output (FILE *f)
{
  g_out = f;
}

void
ib_progress_set_clock (int64_t (*now_ns) (void))
{
  g_clock = now_ns;
}

void
ib_progress_set_term_size (int cols, int rows)
{
  g_cols = cols;
  g_rows = rows;
}

void
ib_progress_short_id (const char *digest, char out[13])
{
  const char *s = digest ? digest : "";
  const char *colon = strrchr (s, ':');
  snprintf (out, 13, "%s", colon ? colon + 1 : s);
}

/* ---------- clocks and formatting ---------- */

static int64_t
clock_ns (clockid_t id)
{
  struct timespec ts;
  clock_gettime (id, &ts);
  return (int64_t) ts.tv_sec * NS_PER_S + ts.tv_nsec;
}

static int64_t
mono_now (void)
{
  return g_clock ? g_clock () : clock_ns (CLOCK_MONOTONIC);
}

/* RFC 3339 UTC with milliseconds: "2024-05-01T12:00:00.123Z". */
static void
rfc3339_now (char out[32])
{
  int64_t ns = g_clock ? g_clock () : clock_ns (CLOCK_REALTIME);
  time_t sec = (time_t) (ns / NS_PER_S);
  struct tm tm;
  gmtime_r (&sec, &tm);
  size_t n = strftime (out, 32, "%Y-%m-%dT%H:%M:%S", &tm);
  snprintf (out + n, 32 - n, ".%03dZ", (int) ((ns % NS_PER_S) / NS_PER_MS));
}

/* A copy with control characters (C0, DEL) made '?' (ib_str_printable):
 * texts can come from a registry's error body and must not move the
 * cursor or recolour the terminal.  Log lines of imgbuild's own (ib_warn,
 * ib_info) keep their '\n' (ib_str_printable's keep_nl). */
static char *
clean_dup (const char *s)
{
  return ib_str_printable (s, false);
}

static const char *
label (const struct item *it)
{
  return it->status ? it->status : it->action;
}

/* Bytes per second since the first update; false when too early to say. */
static bool
item_rate (const struct item *it, int64_t now, double *rate)
{
  int64_t t = (it->finished ? it->end_ns : now) - it->start_ns;
  if (!it->started || t < NS_PER_MS)
    return false;
  *rate = (double) (it->done - it->start_done) * 1e9 / (double) t;
  return true;
}

static void
write_buf (ib_progress_t *p, ib_buf_t *b)
{
  if (b->len)
    {
      fwrite (b->data, 1, b->len, p->out);
      fflush (p->out);
    }
  ib_buf_free (b);
}

/* ---------- TTY ---------- */

static void
term_size (ib_progress_t *p, int *cols, int *rows)
{
  *cols = g_cols;
  *rows = g_rows;
  if (*cols > 0 && *rows > 0)
    return;
  struct winsize ws;
  if (ioctl (fileno (p->out), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0)
    {
      *cols = ws.ws_col;
      *rows = ws.ws_row;
    }
  else
    {
      *cols = 80;
      *rows = 24;
    }
}

/* The item's line, not yet cut to the terminal width. */
static void
tty_item_line (const struct item *it, int cols, int64_t now, ib_buf_t *b)
{
  ib_buf_printf (b, "%s: %s", it->id, label (it));
  if (it->finished || !it->started)
    return;
  char done[24], total[24], speed[40] = "";
  double rate;
  ib_human_size (it->done, done);
  if (item_rate (it, now, &rate) && now - it->start_ns >= 100 * NS_PER_MS)
    {
      char r[24];
      ib_human_size ((int64_t) rate, r);
      snprintf (speed, sizeof speed, "  %s/s", r);
    }
  char tail[96];
  if (it->total >= 0)
    {
      ib_human_size (it->total, total);
      snprintf (tail, sizeof tail, "  %s/%s%s", done, total, speed);
    }
  else
    snprintf (tail, sizeof tail, "  %s%s", done, speed);
  /* "id: label [bar]tail" within cols - 1 */
  int width = cols - 1 - (int) b->len - 3 - (int) strlen (tail);
  if (width > BAR_MAX)
    width = BAR_MAX;
  if (it->total > 0 && width >= BAR_MIN)
    {
      int64_t d = it->done < it->total ? it->done : it->total;
      int filled = (int) (d * width / it->total);
      ib_buf_puts (b, " [");
      for (int i = 0; i < width; i++)
        ib_buf_puts (b, i < filled - 1 ? "=" : i == filled - 1 ? ">" : " ");
      ib_buf_puts (b, "]");
    }
  ib_buf_puts (b, tail);
}

/* Append `line` cut to cols - 1 columns (so that a redrawn row never wraps) (not inside a UTF-8 sequence),
 * then clear to the end of the row and go to the next. */
static void
tty_put_line (ib_buf_t *b, const char *line, size_t len, int cols)
{
  size_t max = cols > 1 ? (size_t) cols - 1 : 1;
  if (len > max)
    {
      len = max;
      while (len > 0 && ((unsigned char) line[len] & 0xC0) == 0x80)
        len--;
    }
  ib_buf_append (b, line, len);
  ib_buf_puts (b, "\033[K\n");
}

/* Put a message (never redrawn: its lines may wrap) line by line, each
 * clearing the rest of its row; the lines put. */
static int
tty_put_message (ib_buf_t *b, const char *message)
{
  int n = 0;
  for (const char *l = message;; n++)
    {
      const char *nl = strchr (l, '\n');
      tty_put_line (b, l, nl ? (size_t) (nl - l) : strlen (l), INT_MAX);
      if (nl == NULL)
        return n + 1;
      l = nl + 1;
    }
}

/* The output lines a redrawn item shows under its line: at most `cap`,
 * none once it finished. */
static int
tty_tail_rows (const struct item *it, int cap)
{
  if (it->finished)
    return 0;
  return it->n_tail < cap ? it->n_tail : cap;
}

/* The last `cap` output lines of the item, indented under its line. */
static void
tty_put_tail (ib_buf_t *b, const struct item *it, int cols, int cap)
{
  int k = tty_tail_rows (it, cap);
  for (int i = it->n_tail - k; i < it->n_tail; i++)
    {
      ib_buf_t l = { 0 };
      ib_buf_printf (&l, "  > %s", it->tail[i]);
      tty_put_line (b, l.data, l.len, cols);
      ib_buf_free (&l);
    }
}

/* The item's row.  Where it is wider than the terminal, its id (a
 * step's command line, a reference) is cut, with "...", and what follows
 * the id stays whole: the state ("DONE 2.2s", "ERROR after 1.0s"), the
 * sizes; where that is too long itself, the row is cut at the end.  A
 * running item's elapsed seconds ("  12s") stay at the end either way. */
static void
tty_put_item (ib_buf_t *b, const struct item *it, int cols, int64_t now)
{
  ib_buf_t l = { 0 };
  tty_item_line (it, cols, now, &l);
  char t[32] = "";
  if (it->elapsed && !it->finished)
    snprintf (t, sizeof t, "  %llds", (long long) ((now - it->start_ns) / NS_PER_S));
  size_t max = cols > 1 ? (size_t) cols - 1 : 1, tl = strlen (t), id_len = strlen (it->id);
  if (l.len + tl > max)
    {
      size_t rest = l.len > id_len ? l.len - id_len : 0; /* what follows the id */
      if (rest > 0 && rest + tl + 3 + 8 <= max)
        {
          size_t keep = max - rest - tl - 3;
          while (keep > 0 && ((unsigned char) l.data[keep] & 0xC0) == 0x80)
            keep--;
          ib_buf_t cut = { 0 };
          ib_buf_append (&cut, l.data, keep);
          ib_buf_puts (&cut, "...");
          ib_buf_append (&cut, l.data + id_len, rest);
          ib_buf_free (&l);
          l = cut;
        }
      else
        {
          l.len = max > tl ? max - tl : 0;
          while (l.len > 0 && ((unsigned char) l.data[l.len] & 0xC0) == 0x80)
            l.len--;
        }
    }
  ib_buf_puts (&l, t);
  tty_put_line (b, l.data, l.len, cols);
  ib_buf_free (&l);
}

/* A redrawn item shows its elapsed time: redraw once a second for it. */
static bool
tty_elapsed_due (ib_progress_t *p, int64_t now)
{
  if (now - p->last_draw_ns < NS_PER_S)
    return false;
  for (int i = p->first_live; i < p->n; i++)
    if (p->items[i].elapsed && !p->items[i].finished)
      return true;
  return false;
}

/* Redraw: cursor up over the rows drawn last time, an optional message
 * line, then the item rows (the last rows - 1 items; older ones become
 * fixed lines above).  A message goes below the items when all of them
 * have finished (they become fixed lines), else above.  `final`: also the
 * final lines of items that scrolled out before they finished. */
static void
tty_render (ib_progress_t *p, int64_t now, const char *message, bool final)
{
  int cols, rows;
  term_size (p, &cols, &rows);
  int max = rows - 1 > 0 ? rows - 1 : 1;
  ib_buf_t b = { 0 };
  if (p->lines_drawn > 0)
    ib_buf_printf (&b, "\033[%dA\r", p->lines_drawn);
  bool all_finished = true;
  for (int i = p->first_live; i < p->n; i++)
    all_finished &= p->items[i].finished;
  int pre = 0; /* rows before the redrawn ones, of this render */
  if (message && !all_finished)
    pre += tty_put_message (&b, message);
  while (p->n - p->first_live > max)
    {
      pre++;
      struct item *it = &p->items[p->first_live++];
      tty_put_item (&b, it, cols, now);
      if (!it->finished)
        it->frozen_unfinished = true;
    }
  /* the running items' output lines, as many as the rows left allow */
  int cap = IB_PROGRESS_TAIL_LINES, used;
  for (;; cap--)
    {
      used = p->n - p->first_live;
      for (int i = p->first_live; i < p->n; i++)
        used += tty_tail_rows (&p->items[i], cap);
      if (used <= max || cap == 0)
        break;
    }
  for (int i = p->first_live; i < p->n; i++)
    {
      tty_put_item (&b, &p->items[i], cols, now);
      tty_put_tail (&b, &p->items[i], cols, cap);
    }
  /* rows drawn last time and not now (a finished item's output lines)
   * are cleared, and the cursor goes back under the new rows */
  int stale = p->lines_drawn - pre - used;
  for (int i = 0; i < stale; i++)
    ib_buf_puts (&b, "\033[K\n");
  if (stale > 0)
    ib_buf_printf (&b, "\033[%dA", stale);
  p->lines_drawn = used;
  if (message && all_finished)
    {
      tty_put_message (&b, message);
      p->first_live = p->n;
      p->lines_drawn = 0;
    }
  if (final)
    for (int i = 0; i < p->first_live; i++)
      if (p->items[i].frozen_unfinished)
        {
          tty_put_item (&b, &p->items[i], cols, now);
          p->items[i].frozen_unfinished = false;
        }
  write_buf (p, &b);
  p->last_draw_ns = now;
  p->dirty = false;
}

/* Something changed: the ticker draws it, or (fake clock) draw now when the
 * throttle allows. */
static void
tty_changed (ib_progress_t *p, int64_t now)
{
  p->dirty = true;
  if (!p->ticker_running && now - p->last_draw_ns >= TTY_INTERVAL_NS)
    tty_render (p, now, NULL, false);
}

static void *
ticker_main (void *arg)
{
  ib_progress_t *p = arg;
  pthread_mutex_lock (&p->lock);
  while (!p->stop)
    {
      struct timespec ts;
      clock_gettime (CLOCK_MONOTONIC, &ts);
      ts.tv_nsec += TTY_INTERVAL_NS;
      if (ts.tv_nsec >= NS_PER_S)
        {
          ts.tv_sec++;
          ts.tv_nsec -= NS_PER_S;
        }
      pthread_cond_timedwait (&p->wake, &p->lock, &ts);
      int64_t now = mono_now ();
      if (!p->stop && (p->dirty || tty_elapsed_due (p, now)))
        tty_render (p, now, NULL, false);
    }
  pthread_mutex_unlock (&p->lock);
  return NULL;
}

/* Start the ticker thread (TTY, real clock); without one (pthread_create
 * failed) changes are drawn as they come, throttled. */
static void
ticker_start (ib_progress_t *p)
{
  pthread_condattr_t ca;
  pthread_condattr_init (&ca);
  pthread_condattr_setclock (&ca, CLOCK_MONOTONIC);
  pthread_cond_init (&p->wake, &ca);
  pthread_condattr_destroy (&ca);
  p->stop = false;
  p->ticker_running = pthread_create (&p->ticker, NULL, ticker_main, p) == 0;
  if (!p->ticker_running)
    pthread_cond_destroy (&p->wake);
}

/* Stop and join the ticker thread, if it runs. */
static void
ticker_stop (ib_progress_t *p)
{
  if (!p->ticker_running)
    return;
  pthread_mutex_lock (&p->lock);
  p->stop = true;
  pthread_cond_signal (&p->wake);
  pthread_mutex_unlock (&p->lock);
  pthread_join (p->ticker, NULL);
  pthread_cond_destroy (&p->wake);
  p->ticker_running = false;
}

/* A log line (warning, info) while a TTY display is up: printed above the
 * item rows, which are redrawn below it, so the bars are not torn. */
static void
tty_log (const char *level, const char *line, void *ud)
{
  (void) level;
  ib_progress_t *p = ud;
  cleanup_free char *text = ib_str_printable (line, true);
  pthread_mutex_lock (&p->lock);
  tty_render (p, mono_now (), text, false);
  pthread_mutex_unlock (&p->lock);
}

/* ---------- PLAIN and JSON ---------- */

static void
plain_line (ib_progress_t *p, struct item *it, int64_t now, const char *fmt, ...)
    __attribute__ ((format (printf, 4, 5)));

static void
plain_line (ib_progress_t *p, struct item *it, int64_t now, const char *fmt, ...)
{
  ib_buf_t b = { 0 };
  va_list ap;
  va_start (ap, fmt);
  cleanup_free char *text = NULL;
  if (vasprintf (&text, fmt, ap) < 0)
    abort ();
  va_end (ap);
  ib_buf_printf (&b, "%s: %s\n", it->id, text);
  write_buf (p, &b);
  it->last_plain_ns = now;
}

/* Length of the UTF-8 sequence at q (1-4), 0 when it is not one (a stray
 * continuation byte, an overlong form, a surrogate, past U+10FFFF). */
static int
utf8_seq (const unsigned char *q)
{
  unsigned char c = q[0];
  int n;
  unsigned char lo = 0x80, hi = 0xBF; /* range of the second byte */
  if (c < 0x80)
    return 1;
  if (c >= 0xC2 && c <= 0xDF)
    n = 2;
  else if (c >= 0xE0 && c <= 0xEF)
    {
      n = 3;
      lo = c == 0xE0 ? 0xA0 : 0x80;
      hi = c == 0xED ? 0x9F : 0xBF;
    }
  else if (c >= 0xF0 && c <= 0xF4)
    {
      n = 4;
      lo = c == 0xF0 ? 0x90 : 0x80;
      hi = c == 0xF4 ? 0x8F : 0xBF;
    }
  else
    return 0;
  if (q[1] < lo || q[1] > hi)
    return 0;
  for (int k = 2; k < n; k++)
    if ((q[k] & 0xC0) != 0x80)
      return 0;
  return n;
}

/* `o` (taken) as one compact line of JSON, newline included, appended to b. */
static void
json_line (json_t *o, ib_buf_t *b)
{
  char *s = json_dumps (o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII);
  json_decref (o);
  if (s == NULL)
    abort ();
  ib_buf_puts (b, s);
  ib_buf_puts (b, "\n");
  free (s);
}

/* A JSON string of `s`; NULL when s is not UTF-8 (the field is left out,
 * as JSON mode always did), unless `repair`: then bytes that do not decode
 * are made '?' (relay: a RUN's output line in another encoding must still
 * reach the parent). */
static json_t *
json_text (const char *s, bool repair)
{
  json_t *j = json_string (s);
  if (j || !repair || s == NULL)
    return j;
  cleanup_free char *c = xstrdup (s);
  for (unsigned char *q = (unsigned char *) c; *q;)
    {
      int n = utf8_seq (q);
      if (n == 0)
        *q++ = '?';
      else
        q += n;
    }
  return json_string (c);
}

static void
json_emit (ib_progress_t *p, const char *event, struct item *it, int64_t now, const char *message)
{
  char ts[32];
  rfc3339_now (ts);
  json_t *o = json_object ();
  json_object_set_new (o, "time", json_string (ts));
  json_object_set_new (o, "title", json_text (p->title, p->relay));
  json_object_set_new (o, "event", json_string (event));
  if (it)
    {
      json_object_set_new (o, "id", json_text (it->id, p->relay));
      json_object_set_new (o, "action", json_text (it->action, p->relay));
      json_object_set_new (o, "status", json_text (label (it), p->relay));
      json_object_set_new (o, "current", json_integer (it->done));
      json_object_set_new (o, "total", it->total >= 0 ? json_integer (it->total) : json_null ());
      if (it->finished)
        json_object_set_new (o, "ok", json_boolean (it->ok));
      it->last_json_ns = now;
    }
  if (message)
    json_object_set_new (o, "message", json_text (message, p->relay));
  ib_buf_t b = { 0 };
  json_line (o, &b);
  write_buf (p, &b);
}

/* ---------- the API ---------- */

static ib_progress_mode_t
resolve_mode (FILE *out)
{
  if (g_mode != IB_PROGRESS_AUTO)
    return g_mode;
  const char *term = getenv ("TERM");
  if (isatty (fileno (out)) && term && *term && strcmp (term, "dumb") != 0)
    return IB_PROGRESS_TTY;
  return IB_PROGRESS_PLAIN;
}

ib_progress_mode_t
ib_progress_resolved_mode (void)
{
  return resolve_mode (g_out ? g_out : stderr);
}

static ib_progress_t *progress_begin (const char *title, bool show_title);

ib_progress_t *
ib_progress_begin (const char *title)
{
  return progress_begin (title, true);
}

ib_progress_t *
ib_progress_continue (const char *title)
{
  return progress_begin (title, false);
}

static ib_progress_t *
progress_begin (const char *title, bool show_title)
{
  ib_progress_t *p = xmalloc (sizeof *p);
  pthread_mutex_init (&p->lock, NULL);
  p->out = g_out ? g_out : stderr;
  p->mode = resolve_mode (p->out);
  if (p->mode == IB_PROGRESS_RELAY)
    {
      p->mode = IB_PROGRESS_JSON;
      p->relay = true;
    }
  p->title = clean_dup (title ? title : "");
  p->last_draw_ns = INT64_MIN / 2;
  if (show_title && (p->mode == IB_PROGRESS_TTY || p->mode == IB_PROGRESS_PLAIN))
    {
      ib_buf_t b = { 0 };
      ib_buf_printf (&b, "%s\n", p->title);
      write_buf (p, &b);
    }
  if (p->mode == IB_PROGRESS_TTY)
    {
      ib_log_get_sink (&p->saved_sink, &p->saved_sink_ud);
      ib_log_set_sink (tty_log, p);
    }
  if (p->mode == IB_PROGRESS_TTY && g_clock == NULL)
    ticker_start (p);
  return p;
}

int
ib_progress_add (ib_progress_t *p, const char *id, const char *action, int64_t total)
{
  if (p == NULL)
    return -1;
  pthread_mutex_lock (&p->lock);
  if (p->n == p->cap)
    {
      p->cap = p->cap ? 2 * p->cap : 8;
      p->items = xrealloc (p->items, (size_t) p->cap * sizeof *p->items);
    }
  int idx = p->n++;
  struct item *it = &p->items[idx];
  int64_t now = mono_now ();
  memset (it, 0, sizeof *it);
  it->id = clean_dup (id ? id : "");
  it->action = clean_dup (action ? action : "");
  it->total = total < 0 ? -1 : total;
  it->start_ns = now;
  switch (p->mode)
    {
    case IB_PROGRESS_TTY: tty_changed (p, now); break;
    case IB_PROGRESS_PLAIN:
      if (it->total >= 0)
        {
          char t[24];
          ib_human_size (it->total, t);
          plain_line (p, it, now, "%s %s", it->action, t);
        }
      else
        plain_line (p, it, now, "%s", it->action);
      it->last_plain = xstrdup (it->action);
      break;
    case IB_PROGRESS_JSON: json_emit (p, "add", it, now, NULL); break;
    default: break;
    }
  pthread_mutex_unlock (&p->lock);
  return idx;
}

/* The item, or NULL when out of range or finished; called under the lock. */
static struct item *
live_item (ib_progress_t *p, int item)
{
  if (item < 0 || item >= p->n || p->items[item].finished)
    return NULL;
  return &p->items[item];
}

void
ib_progress_update (ib_progress_t *p, int item, int64_t done)
{
  if (p == NULL || p->mode == IB_PROGRESS_QUIET)
    return;
  pthread_mutex_lock (&p->lock);
  struct item *it = live_item (p, item);
  if (it == NULL)
    goto out;
  int64_t now = mono_now ();
  it->done = done;
  if (!it->started)
    {
      it->started = true;
      it->start_ns = now;
      it->start_done = done;
      it->last_plain_ns = now;
    }
  switch (p->mode)
    {
    case IB_PROGRESS_TTY: tty_changed (p, now); break;
    case IB_PROGRESS_PLAIN:
      if (now - it->last_plain_ns >= PLAIN_STILL_NS)
        {
          char d[24], t[24] = "", r[24] = "";
          double rate;
          ib_human_size (done, d);
          if (it->total >= 0)
            ib_human_size (it->total, t);
          if (item_rate (it, now, &rate))
            ib_human_size ((int64_t) rate, r);
          const char *l = label (it);
          plain_line (p, it, now, "still %c%s %s%s%s%s%s%s", tolower ((unsigned char) l[0]),
                      l[0] ? l + 1 : "", d, t[0] ? "/" : "", t, r[0] ? " (" : "", r,
                      r[0] ? "/s)" : "");
        }
      break;
    case IB_PROGRESS_JSON:
      if (now - it->last_json_ns >= JSON_INTERVAL_NS)
        json_emit (p, "update", it, now, NULL);
      break;
    default: break;
    }
out:
  pthread_mutex_unlock (&p->lock);
}

void
ib_progress_set_status (ib_progress_t *p, int item, const char *status)
{
  if (p == NULL || p->mode == IB_PROGRESS_QUIET)
    return;
  pthread_mutex_lock (&p->lock);
  cleanup_free char *before = NULL; /* before the goto: cleanup must not see it uninitialised */
  struct item *it = live_item (p, item);
  if (it == NULL)
    goto out;
  int64_t now = mono_now ();
  before = xstrdup (label (it));
  free (it->status);
  it->status = clean_dup (status);
  if (strcmp (before, label (it)) == 0)
    goto out; /* the same text: nothing to show (a JSON "status" event included) */
  switch (p->mode)
    {
    case IB_PROGRESS_TTY: tty_changed (p, now); break;
    case IB_PROGRESS_PLAIN:
      if (it->last_plain == NULL || strcmp (it->last_plain, label (it)) != 0)
        {
          plain_line (p, it, now, "%s", label (it));
          free (it->last_plain);
          it->last_plain = xstrdup (label (it));
        }
      break;
    case IB_PROGRESS_JSON: json_emit (p, "status", it, now, NULL); break;
    default: break;
    }
out:
  pthread_mutex_unlock (&p->lock);
}

static void
tail_clear (struct item *it)
{
  for (int i = 0; i < it->n_tail; i++)
    free (it->tail[i]);
  it->n_tail = 0;
}

void
ib_progress_output (ib_progress_t *p, int item, const char *line)
{
  if (p == NULL || p->mode == IB_PROGRESS_QUIET)
    return;
  pthread_mutex_lock (&p->lock);
  struct item *it = live_item (p, item);
  if (it == NULL || it->finished)
    goto out;
  int64_t now = mono_now ();
  switch (p->mode)
    {
    case IB_PROGRESS_TTY:
      if (it->n_tail == IB_PROGRESS_TAIL_LINES)
        {
          free (it->tail[0]);
          memmove (it->tail, it->tail + 1, (IB_PROGRESS_TAIL_LINES - 1) * sizeof *it->tail);
          it->n_tail--;
        }
      it->tail[it->n_tail++] = clean_dup (line);
      tty_changed (p, now);
      break;
    case IB_PROGRESS_PLAIN: plain_line (p, it, now, "%s", line); break;
    case IB_PROGRESS_JSON:
      /* relay: for the parent's item; JSON: a message naming the item */
      if (p->relay)
        json_emit (p, "output", it, now, line);
      else
        {
          cleanup_free char *m = xasprintf ("%s %s", it->id, line);
          json_emit (p, "message", NULL, now, m);
        }
      break;
    default: break;
    }
out:
  pthread_mutex_unlock (&p->lock);
}

void
ib_progress_show_elapsed (ib_progress_t *p, int item)
{
  if (p == NULL || p->mode == IB_PROGRESS_QUIET)
    return;
  pthread_mutex_lock (&p->lock);
  struct item *it = live_item (p, item);
  if (it && !it->elapsed)
    {
      int64_t now = mono_now ();
      it->elapsed = true;
      if (p->mode == IB_PROGRESS_TTY)
        tty_changed (p, now);
      else if (p->relay)
        json_emit (p, "elapsed", it, now, NULL); /* relay only: JSON mode says nothing */
    }
  pthread_mutex_unlock (&p->lock);
}

void
ib_progress_done (ib_progress_t *p, int item, bool ok, const char *status)
{
  if (p == NULL || p->mode == IB_PROGRESS_QUIET)
    return;
  pthread_mutex_lock (&p->lock);
  struct item *it = live_item (p, item);
  if (it == NULL)
    goto out;
  int64_t now = mono_now ();
  if (status)
    {
      free (it->status);
      it->status = clean_dup (status);
    }
  it->finished = true;
  it->ok = ok;
  it->end_ns = now;
  tail_clear (it);
  switch (p->mode)
    {
    case IB_PROGRESS_TTY: tty_changed (p, now); break;
    case IB_PROGRESS_PLAIN:
      if (it->started && it->done > 0)
        {
          char d[24], r[24];
          double rate, secs = (double) (now - it->start_ns) / 1e9;
          ib_human_size (it->done, d);
          if (item_rate (it, now, &rate))
            {
              ib_human_size ((int64_t) rate, r);
              plain_line (p, it, now, "%s (%s in %.1fs, %s/s)", label (it), d, secs, r);
            }
          else
            plain_line (p, it, now, "%s (%s in %.1fs)", label (it), d, secs);
        }
      else
        plain_line (p, it, now, "%s", label (it));
      break;
    case IB_PROGRESS_JSON: json_emit (p, "done", it, now, NULL); break;
    default: break;
    }
out:
  pthread_mutex_unlock (&p->lock);
}

void
ib_progress_message (ib_progress_t *p, const char *fmt, ...)
{
  if (p == NULL || p->mode == IB_PROGRESS_QUIET)
    return;
  va_list ap;
  va_start (ap, fmt);
  cleanup_free char *raw = NULL;
  if (vasprintf (&raw, fmt, ap) < 0)
    abort ();
  va_end (ap);
  cleanup_free char *text = clean_dup (raw);
  pthread_mutex_lock (&p->lock);
  int64_t now = mono_now ();
  switch (p->mode)
    {
    case IB_PROGRESS_TTY: tty_render (p, now, text, false); break;
    case IB_PROGRESS_PLAIN:
      {
        ib_buf_t b = { 0 };
        ib_buf_printf (&b, "%s\n", text);
        write_buf (p, &b);
        break;
      }
    case IB_PROGRESS_JSON: json_emit (p, "message", NULL, now, text); break;
    default: break;
    }
  pthread_mutex_unlock (&p->lock);
}

void
ib_progress_end (ib_progress_t *p)
{
  if (p == NULL)
    return;
  ticker_stop (p);
  if (p->mode == IB_PROGRESS_TTY)
    ib_log_set_sink (p->saved_sink, p->saved_sink_ud);
  pthread_mutex_lock (&p->lock);
  if (p->mode == IB_PROGRESS_TTY && (p->lines_drawn > 0 || p->first_live < p->n))
    tty_render (p, mono_now (), NULL, true);
  pthread_mutex_unlock (&p->lock);
  for (int i = 0; i < p->n; i++)
    {
      free (p->items[i].id);
      free (p->items[i].action);
      free (p->items[i].status);
      free (p->items[i].last_plain);
      tail_clear (&p->items[i]);
    }
  free (p->items);
  free (p->title);
  pthread_mutex_destroy (&p->lock);
  free (p);
}

pid_t
ib_progress_fork (ib_progress_t *p)
{
  if (p == NULL)
    return fork ();
  /* The child must start with one thread and no lock taken: not the
   * display's, nor stdio's, nor the allocator's (AddressSanitizer's is
   * not reset at fork as glibc's malloc is).  The ticker goes meanwhile. */
  bool ticker = p->ticker_running;
  ticker_stop (p);
  pid_t pid = fork ();
  int saved = errno;
  if (pid == 0)
    {
      if (p->mode == IB_PROGRESS_TTY)
        ib_log_set_sink (p->saved_sink, p->saved_sink_ud); /* tty_log would use p */
      return 0;
    }
  if (ticker)
    ticker_start (p);
  errno = saved;
  return pid;
}

/* ---------- relay ---------- */

#define RELAY_LINE_MAX (1024 * 1024)

static FILE *g_relay; /* ib_progress_relay_to's stream */

/* One line of JSON on the relay stream, in one fwrite (the stream's lock
 * keeps lines of different threads whole). */
static void
relay_write (json_t *o)
{
  ib_buf_t b = { 0 };
  json_line (o, &b);
  fwrite (b.data, 1, b.len, g_relay);
  fflush (g_relay);
  ib_buf_free (&b);
}

static void
relay_log (const char *level, const char *line, void *ud)
{
  (void) ud;
  json_t *o = json_object ();
  json_object_set_new (o, "event", json_string ("log"));
  json_object_set_new (o, "level", json_text (level, true));
  json_object_set_new (o, "message", json_text (line, true));
  relay_write (o);
}

int
ib_progress_relay_to (int fd)
{
  FILE *f = fdopen (fd, "w");
  if (f == NULL)
    return -1;
  g_relay = f;
  g_out = f;
  g_mode = IB_PROGRESS_RELAY;
  ib_log_set_sink (relay_log, NULL);
  return 0;
}

/* An item of the child's, by the title of its display and its id. */
struct relay_item
{
  char *title, *id;
  int item;      /* in the parent's display */
  bool finished; /* a later "add" of the same id is a new item */
};

struct ib_progress_relay
{
  ib_progress_t *p;
  char *prefix;  /* before the titles and ids of displays other than p's */
  ib_buf_t line; /* a partial line */
  bool skipping; /* the line being read is too long: dropped up to its newline */
  struct relay_item *items;
  size_t n;
  char **titles; /* titles other than p's, shown as a message once */
};

ib_progress_relay_t *
ib_progress_relay_new (ib_progress_t *p, const char *prefix)
{
  ib_progress_relay_t *r = xmalloc (sizeof *r);
  memset (r, 0, sizeof *r);
  r->p = p;
  r->prefix = xstrdup (prefix ? prefix : "");
  return r;
}

static struct relay_item *
relay_find (ib_progress_relay_t *r, const char *title, const char *id)
{
  for (size_t i = r->n; i-- > 0;) /* the latest first */
    if (!r->items[i].finished && strcmp (r->items[i].title, title) == 0
        && strcmp (r->items[i].id, id) == 0)
      return &r->items[i];
  return NULL;
}

/* A display titled other than p: its title as a message, once; true when
 * the title is not p's (its ids get the prefix). */
static bool
relay_title (ib_progress_relay_t *r, const char *title)
{
  if (strcmp (title, r->p->title) == 0)
    return false;
  for (char **t = r->titles; t && *t; t++)
    if (strcmp (*t, title) == 0)
      return true;
  ib_strv_push (&r->titles, title);
  ib_progress_message (r->p, "%s%s", r->prefix, title);
  return true;
}

static void
relay_event (ib_progress_relay_t *r, const char *text, size_t len)
{
  cleanup_free char *id = NULL; /* before the gotos: cleanup must not see it uninitialised */
  json_t *o = json_loadb (text, len, 0, NULL);
  const char *event = json_string_value (json_object_get (o, "event"));
  const char *message = json_string_value (json_object_get (o, "message"));
  if (event == NULL)
    goto out;
  if (strcmp (event, "log") == 0 && message)
    {
      if (r->p && r->p->mode == IB_PROGRESS_TTY)
        tty_log ("", message, r->p); /* a log line of the child's: its lines stay lines */
      else if (r->p)
        ib_progress_message (r->p, "%s", message);
      else
        {
          cleanup_free char *l = xasprintf ("%s\n", message);
          fputs (l, stderr);
        }
      goto out;
    }
  const char *title = json_string_value (json_object_get (o, "title"));
  if (r->p == NULL || title == NULL)
    goto out;
  bool other = relay_title (r, title);
  if (strcmp (event, "message") == 0)
    {
      if (message)
        ib_progress_message (r->p, "%s", message);
      goto out;
    }
  const char *raw_id = json_string_value (json_object_get (o, "id"));
  id = raw_id && other ? xasprintf ("%s%s", r->prefix, raw_id) : raw_id ? xstrdup (raw_id) : NULL;
  const char *status = json_string_value (json_object_get (o, "status"));
  json_t *cur = json_object_get (o, "current"), *total = json_object_get (o, "total");
  if (id == NULL)
    goto out;
  struct relay_item *it = relay_find (r, title, id);
  if (strcmp (event, "add") == 0 && it == NULL)
    {
      const char *action = json_string_value (json_object_get (o, "action"));
      int idx = ib_progress_add (r->p, id, action ? action : "",
                                 json_is_integer (total) ? json_integer_value (total) : -1);
      r->items = xrealloc (r->items, (r->n + 1) * sizeof *r->items);
      it = &r->items[r->n++];
      *it = (struct relay_item){ .title = xstrdup (title), .id = xstrdup (id), .item = idx };
      if (status && action && strcmp (status, action) != 0)
        ib_progress_set_status (r->p, idx, status);
      goto out;
    }
  if (it == NULL)
    goto out;
  if (strcmp (event, "update") == 0 && json_is_integer (cur))
    ib_progress_update (r->p, it->item, json_integer_value (cur));
  else if (strcmp (event, "status") == 0 || strcmp (event, "add") == 0)
    ib_progress_set_status (r->p, it->item, status);
  else if (strcmp (event, "elapsed") == 0)
    ib_progress_show_elapsed (r->p, it->item);
  else if (strcmp (event, "output") == 0 && message)
    ib_progress_output (r->p, it->item, message);
  else if (strcmp (event, "done") == 0)
    {
      if (json_is_integer (cur) && json_integer_value (cur) > 0)
        ib_progress_update (r->p, it->item, json_integer_value (cur));
      ib_progress_done (r->p, it->item, json_is_true (json_object_get (o, "ok")), status);
      it->finished = true;
    }
out:
  json_decref (o);
}

void
ib_progress_relay_feed (ib_progress_relay_t *r, const char *data, size_t len)
{
  if (r == NULL)
    return;
  while (len > 0)
    {
      const char *nl = memchr (data, '\n', len);
      size_t n = nl ? (size_t) (nl - data) : len;
      if (!r->skipping)
        {
          if (r->line.len + n > RELAY_LINE_MAX)
            {
              r->skipping = true;
              r->line.len = 0;
            }
          else
            ib_buf_append (&r->line, data, n);
        }
      if (nl == NULL)
        return;
      if (!r->skipping && r->line.len)
        relay_event (r, r->line.data, r->line.len);
      r->line.len = 0;
      r->skipping = false;
      data += n + 1;
      len -= n + 1;
    }
}

void
ib_progress_relay_end (ib_progress_relay_t *r, const char *status)
{
  if (r == NULL)
    return;
  if (!r->skipping && r->line.len)
    relay_event (r, r->line.data, r->line.len);
  for (size_t i = 0; i < r->n; i++)
    {
      if (!r->items[i].finished)
        ib_progress_done (r->p, r->items[i].item, false, status ? status : "ERROR");
      free (r->items[i].title);
      free (r->items[i].id);
    }
  free (r->items);
  ib_strv_free (r->titles);
  ib_buf_free (&r->line);
  free (r->prefix);
  free (r);
}
