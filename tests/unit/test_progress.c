/* tests/unit/test_progress.c — progress output (common/progress.h) in each
 * mode, with the output captured in memory and a fake clock. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/progress.h"
#include "common/util.h"

#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MS 1000000LL
#define S 1000000000LL

static int64_t fake_now;

static int64_t
fake_clock (void)
{
  return fake_now;
}

/* Captured output of one display. */
static char *cap_data;
static size_t cap_len;
static FILE *cap;

static void
capture (ib_progress_mode_t mode, int64_t start_ns)
{
  free (cap_data);
  cap_data = NULL;
  cap = open_memstream (&cap_data, &cap_len);
  assert_non_null (cap);
  ib_progress_set_output (cap);
  ib_progress_set_mode (mode);
  ib_progress_set_clock (fake_clock);
  ib_progress_set_term_size (0, 0);
  fake_now = start_ns;
}

/* Close the capture and return what was written (owned by the test file). */
static const char *
captured (void)
{
  fclose (cap);
  cap = NULL;
  ib_progress_set_output (NULL);
  ib_progress_set_clock (NULL);
  ib_progress_set_mode (IB_PROGRESS_AUTO);
  ib_progress_set_term_size (0, 0);
  return cap_data;
}

static int
count (const char *hay, const char *needle)
{
  int n = 0;
  for (const char *s = strstr (hay, needle); s; s = strstr (s + 1, needle))
    n++;
  return n;
}

static void
test_parse_mode_and_short_id (void **state)
{
  (void) state;
  ib_progress_mode_t m = IB_PROGRESS_AUTO;
  assert_int_equal (ib_progress_parse_mode ("json", &m), 0);
  assert_int_equal (m, IB_PROGRESS_JSON);
  assert_int_equal (ib_progress_parse_mode ("tty", &m), 0);
  assert_int_equal (m, IB_PROGRESS_TTY);
  assert_int_equal (ib_progress_parse_mode ("plain", &m), 0);
  assert_int_equal (m, IB_PROGRESS_PLAIN);
  assert_int_equal (ib_progress_parse_mode ("quiet", &m), 0);
  assert_int_equal (m, IB_PROGRESS_QUIET);
  assert_int_equal (ib_progress_parse_mode ("auto", &m), 0);
  assert_int_equal (m, IB_PROGRESS_AUTO);
  assert_int_equal (ib_progress_parse_mode ("JSON", &m), -1);
  assert_int_equal (ib_progress_parse_mode ("", &m), -1);
  assert_int_equal (ib_progress_parse_mode (NULL, &m), -1);

  char id[13];
  ib_progress_short_id ("sha256:4f4fb700ef54461cfa02571ae0db9a0dc1e0cdb5577484a6d75e68dc38e8acc1", id);
  assert_string_equal (id, "4f4fb700ef54");
  ib_progress_short_id ("abc", id);
  assert_string_equal (id, "abc");

  /* A NULL display is a no-op everywhere. */
  assert_int_equal (ib_progress_add (NULL, "x", "y", 1), -1);
  ib_progress_update (NULL, 0, 1);
  ib_progress_set_status (NULL, 0, "s");
  ib_progress_done (NULL, 0, true, "d");
  ib_progress_message (NULL, "m %d", 1);
  ib_progress_end (NULL);
}

static void
test_plain_lines (void **state)
{
  (void) state;
  capture (IB_PROGRESS_PLAIN, 0);
  ib_progress_t *p = ib_progress_begin ("pull docker.io/library/debian:bookworm");
  int a = ib_progress_add (p, "4f4fb700ef54", "Downloading", 45600000);
  int b = ib_progress_add (p, "aaaaaaaaaaaa", "Preparing", -1);
  assert_int_equal (a, 0);
  assert_int_equal (b, 1);
  ib_progress_done (p, b, true, "Already exists");
  fake_now = 100 * MS;
  ib_progress_update (p, a, 0); /* the transfer starts */
  fake_now = 1 * S;
  ib_progress_update (p, a, 10000000);
  fake_now = 10 * S + 50 * MS; /* 9.95 s after the start: no line yet */
  ib_progress_update (p, a, 12000000);
  fake_now = 10 * S + 100 * MS;
  ib_progress_update (p, a, 12300000);
  fake_now = 15 * S;
  ib_progress_update (p, a, 20000000); /* 4.9 s after the last line: none */
  ib_progress_set_status (p, a, "Retrying in 2s (HTTP 503)");
  ib_progress_set_status (p, a, "Retrying in 2s (HTTP 503)"); /* same text: no line */
  ib_progress_set_status (p, a, NULL);
  fake_now = 20 * S + 100 * MS;
  ib_progress_update (p, a, 45600000);
  ib_progress_done (p, a, true, "Pull complete");
  ib_progress_done (p, a, false, "too late"); /* finished: ignored */
  ib_progress_update (p, 7, 1);               /* no such item: ignored */
  ib_progress_update (p, -1, 1);
  ib_progress_message (p, "bookworm: digest: sha256:%s size: %d", "abc", 529);
  ib_progress_end (p);
  assert_string_equal (captured (),
                       "pull docker.io/library/debian:bookworm\n"
                       "4f4fb700ef54: Downloading 45.6MB\n"
                       "aaaaaaaaaaaa: Preparing\n"
                       "aaaaaaaaaaaa: Already exists\n"
                       "4f4fb700ef54: still downloading 12.3MB/45.6MB (1.2MB/s)\n"
                       "4f4fb700ef54: Retrying in 2s (HTTP 503)\n"
                       "4f4fb700ef54: Downloading\n"
                       "4f4fb700ef54: Pull complete (45.6MB in 20.0s, 2.3MB/s)\n"
                       "bookworm: digest: sha256:abc size: 529\n");
}

static void
test_plain_unknown_total_and_failure (void **state)
{
  (void) state;
  capture (IB_PROGRESS_PLAIN, 5 * S);
  ib_progress_t *p = ib_progress_begin ("push x");
  int a = ib_progress_add (p, "cafe", "Pushing", -1);
  ib_progress_update (p, a, 0);
  fake_now += 12 * S;
  ib_progress_update (p, a, 999);
  fake_now += 1 * S;
  ib_progress_done (p, a, false, "blob upload\x1b[31m unknown");
  ib_progress_message (p, "evil\033[2J\r\nline");
  ib_progress_end (p);
  assert_string_equal (captured (), "push x\n"
                                    "cafe: Pushing\n"
                                    "cafe: still pushing 999B (83B/s)\n"
                                    "cafe: blob upload?[31m unknown (999B in 13.0s, 76B/s)\n"
                                    "evil?[2J??line\n"); /* no control characters */
}

static json_t *
json_line (const char *line, size_t len)
{
  json_error_t je;
  json_t *j = json_loadb (line, len, 0, &je);
  if (j == NULL)
    fail_msg ("not a JSON line: %.*s (%s)", (int) len, line, je.text);
  assert_true (json_is_object (j));
  return j;
}

/* Every line of `out` as a JSON object, in an array. */
static json_t *
json_lines (const char *out)
{
  json_t *a = json_array ();
  for (const char *s = out; *s;)
    {
      const char *nl = strchr (s, '\n');
      assert_non_null (nl); /* every line is complete */
      json_array_append_new (a, json_line (s, (size_t) (nl - s)));
      s = nl + 1;
    }
  return a;
}

static const char *
str_field (json_t *o, const char *k)
{
  json_t *v = json_object_get (o, k);
  assert_true (json_is_string (v));
  return json_string_value (v);
}

static json_int_t
int_field (json_t *o, const char *k)
{
  json_t *v = json_object_get (o, k);
  assert_true (json_is_integer (v));
  return json_integer_value (v);
}

static void
test_json_events (void **state)
{
  (void) state;
  /* 2024-05-01T12:00:00.123Z */
  int64_t t0 = 1714564800LL * S + 123 * MS;
  capture (IB_PROGRESS_JSON, t0);
  ib_progress_t *p = ib_progress_begin ("pull docker.io/library/debian:bookworm");
  int a = ib_progress_add (p, "4f4fb700ef54", "Downloading", 1000);
  ib_progress_update (p, a, 0);
  fake_now = t0 + 100 * MS;
  ib_progress_update (p, a, 100); /* 100 ms after the add: throttled */
  fake_now = t0 + 600 * MS;
  ib_progress_update (p, a, 500);
  fake_now = t0 + 700 * MS;
  ib_progress_update (p, a, 600); /* 100 ms after the last: throttled */
  ib_progress_set_status (p, a, "Extracting");
  fake_now = t0 + 2 * S + 5 * MS;
  ib_progress_done (p, a, true, "Pull complete");
  int b = ib_progress_add (p, "b\"q", "Downloading", -1);
  ib_progress_done (p, b, false, "HTTP 404: blob unknown");
  ib_progress_message (p, "digest: %s", "sha256:x");
  ib_progress_end (p);
  const char *out = captured ();
  assert_null (strstr (out, "\033"));
  json_t *ev = json_lines (out);
  static const char *events[] = { "add", "update", "status", "done", "add", "done", "message" };
  assert_int_equal (json_array_size (ev), 7);
  for (size_t i = 0; i < 7; i++)
    {
      json_t *o = json_array_get (ev, i);
      assert_string_equal (str_field (o, "event"), events[i]);
      assert_string_equal (str_field (o, "title"), "pull docker.io/library/debian:bookworm");
      assert_int_equal (strlen (str_field (o, "time")), 24);
    }
  json_t *o = json_array_get (ev, 0);
  assert_string_equal (str_field (o, "time"), "2024-05-01T12:00:00.123Z");
  assert_string_equal (str_field (o, "id"), "4f4fb700ef54");
  assert_string_equal (str_field (o, "action"), "Downloading");
  assert_string_equal (str_field (o, "status"), "Downloading");
  assert_int_equal (int_field (o, "current"), 0);
  assert_int_equal (int_field (o, "total"), 1000);
  assert_null (json_object_get (o, "ok"));
  o = json_array_get (ev, 1);
  assert_string_equal (str_field (o, "time"), "2024-05-01T12:00:00.723Z");
  assert_int_equal (int_field (o, "current"), 500);
  o = json_array_get (ev, 2);
  assert_string_equal (str_field (o, "status"), "Extracting");
  assert_string_equal (str_field (o, "action"), "Downloading");
  assert_int_equal (int_field (o, "current"), 600);
  o = json_array_get (ev, 3);
  assert_string_equal (str_field (o, "time"), "2024-05-01T12:00:02.128Z");
  assert_string_equal (str_field (o, "status"), "Pull complete");
  assert_true (json_is_true (json_object_get (o, "ok")));
  assert_int_equal (int_field (o, "current"), 600);
  o = json_array_get (ev, 4);
  assert_string_equal (str_field (o, "id"), "b\"q");
  assert_true (json_is_null (json_object_get (o, "total")));
  o = json_array_get (ev, 5);
  assert_true (json_is_false (json_object_get (o, "ok")));
  assert_string_equal (str_field (o, "status"), "HTTP 404: blob unknown");
  o = json_array_get (ev, 6);
  assert_string_equal (str_field (o, "message"), "digest: sha256:x");
  assert_null (json_object_get (o, "id"));
  json_decref (ev);
}

static void
test_json_throttle (void **state)
{
  (void) state;
  capture (IB_PROGRESS_JSON, 0);
  ib_progress_t *p = ib_progress_begin ("t");
  int a = ib_progress_add (p, "a", "Downloading", 1 << 30);
  int b = ib_progress_add (p, "b", "Downloading", 1 << 30);
  /* 10 s of updates every millisecond on two items: at most 2/s each. */
  for (int i = 1; i <= 10000; i++)
    {
      fake_now = i * MS;
      ib_progress_update (p, a, i * 1000LL);
      ib_progress_update (p, b, i * 10LL);
    }
  ib_progress_done (p, a, true, "Pull complete");
  ib_progress_done (p, b, true, "Pull complete");
  ib_progress_end (p);
  json_t *ev = json_lines (captured ());
  int updates[2] = { 0, 0 }, dones = 0;
  size_t i;
  json_t *o;
  json_array_foreach (ev, i, o)
  {
    if (strcmp (str_field (o, "event"), "update") == 0)
      updates[str_field (o, "id")[0] - 'a']++;
    dones += strcmp (str_field (o, "event"), "done") == 0;
  }
  assert_in_range (updates[0], 19, 21);
  assert_in_range (updates[1], 19, 21);
  assert_int_equal (dones, 2);
  /* the last event of item a carries its final bytes */
  o = json_array_get (ev, json_array_size (ev) - 2);
  assert_string_equal (str_field (o, "event"), "done");
  assert_int_equal (int_field (o, "current"), 10000000);
  json_decref (ev);
}

static void
test_quiet_prints_nothing (void **state)
{
  (void) state;
  capture (IB_PROGRESS_QUIET, 0);
  ib_progress_t *p = ib_progress_begin ("push x");
  int a = ib_progress_add (p, "a", "Pushing", 10);
  ib_progress_update (p, a, 5);
  ib_progress_set_status (p, a, "Retrying");
  ib_progress_done (p, a, false, "failed");
  ib_progress_message (p, "m");
  ib_progress_end (p);
  const char *out = captured ();
  assert_int_equal (cap_len, 0);
  assert_string_equal (out, "");
}

static void
test_auto_is_plain_when_not_a_terminal (void **state)
{
  (void) state;
  capture (IB_PROGRESS_AUTO, 0);
  ib_progress_t *p = ib_progress_begin ("t");
  int a = ib_progress_add (p, "a", "Pushing", 10);
  ib_progress_update (p, a, 5);
  ib_progress_done (p, a, true, "Pushed");
  ib_progress_end (p);
  assert_string_equal (captured (), "t\na: Pushing 10B\na: Pushed (5B in 0.0s)\n");
}

static void
test_tty_bars_and_final_lines (void **state)
{
  (void) state;
  capture (IB_PROGRESS_TTY, 0);
  ib_progress_set_term_size (100, 24);
  ib_progress_t *p = ib_progress_begin ("pull x");
  int a = ib_progress_add (p, "4f4fb700ef54", "Downloading", 45600000);
  fake_now += 200 * MS;
  int b = ib_progress_add (p, "aaaaaaaaaaaa", "Downloading", -1);
  fake_now += 200 * MS;
  ib_progress_update (p, a, 0);
  fake_now += 1 * S;
  ib_progress_update (p, a, 12300000);
  ib_progress_update (p, b, 2000000); /* throttled: same instant; b starts here */
  fake_now += 200 * MS;
  ib_progress_set_status (p, b, "Waiting");
  fake_now += 200 * MS;
  ib_progress_done (p, a, true, "Pull complete");
  ib_progress_done (p, b, true, "Already exists");
  ib_progress_end (p);
  const char *out = captured ();
  /* "id: label [bar]  done/total  speed" at 99 columns: a 46-wide bar */
  char bar[64];
  memset (bar, ' ', 46);
  memset (bar, '=', 11);
  bar[11] = '>';
  bar[46] = '\0';
  char line[256];
  snprintf (line, sizeof line,
            "\033[2A\r4f4fb700ef54: Downloading [%s]  12.3MB/45.6MB  12.3MB/s\033[K\n"
            "aaaaaaaaaaaa: Downloading\033[K\n",
            bar);
  assert_non_null (strstr (out, line));
  assert_int_equal (strstr (line, "\033[K") - (line + 5), 99); /* the bar fills the width */
  /* unknown total: bytes and speed (since b's first update), no bar */
  assert_non_null (strstr (out, "\naaaaaaaaaaaa: Waiting  2.0MB  0B/s\033[K\n"));
  assert_true (ib_str_has_prefix (out, "pull x\n4f4fb700ef54: Downloading\033[K\n"));
  /* The last redraw leaves each item's final line. */
  assert_true (ib_str_has_suffix (out, "\033[2A\r4f4fb700ef54: Pull complete\033[K\n"
                                       "aaaaaaaaaaaa: Already exists\033[K\n"));
  assert_int_equal (count (out, "\033[1A"), 1); /* the second add */
}

static void
test_tty_unknown_total_and_width (void **state)
{
  (void) state;
  capture (IB_PROGRESS_TTY, 0);
  ib_progress_set_term_size (40, 24);
  ib_progress_t *p = ib_progress_begin ("t");
  int a = ib_progress_add (p, "abc", "Downloading", -1);
  ib_progress_update (p, a, 0);
  fake_now += 2 * S;
  ib_progress_update (p, a, 4000000);
  fake_now += 1 * S;
  ib_progress_set_term_size (30, 24); /* resized */
  ib_progress_set_status (p, a, "Retrying in 2s (HTTP 503) after a reset connection");
  ib_progress_end (p);
  const char *out = captured ();
  /* unknown total: bytes and speed, no bar */
  assert_non_null (strstr (out, "\033[1A\rabc: Downloading  4.0MB  2.0MB/s\033[K\n"));
  /* cut to 29 columns */
  assert_true (ib_str_has_suffix (out, "\033[1A\rabc: Retrying in 2s (HTTP 503\033[K\n"));
}

static void
test_tty_more_items_than_rows (void **state)
{
  (void) state;
  capture (IB_PROGRESS_TTY, 0);
  ib_progress_set_term_size (80, 4); /* 3 item rows */
  ib_progress_t *p = ib_progress_begin ("t");
  char id[16];
  for (int i = 0; i < 6; i++)
    {
      snprintf (id, sizeof id, "item%d", i);
      fake_now += 200 * MS;
      ib_progress_add (p, id, "Downloading", 100);
    }
  ib_progress_done (p, 2, true, "Pull complete"); /* throttled: same instant */
  for (int i = 0; i < 6; i++)
    {
      fake_now += 200 * MS;
      ib_progress_done (p, i, true, "Pull complete");
    }
  ib_progress_end (p);
  const char *out = captured ();
  /* never more than the 3 rows redrawn */
  for (const char *s = strstr (out, "\033["); s; s = strstr (s + 1, "\033["))
    {
      int n;
      char c;
      if (sscanf (s, "\033[%d%c", &n, &c) == 2 && c == 'A')
        assert_in_range (n, 1, 3);
    }
  /* every item ends with its final line: 0, 1 and 2 scrolled out of the
   * redrawn rows before they finished and are printed again at the end */
  for (int i = 0; i < 6; i++)
    {
      char l[64];
      snprintf (l, sizeof l, "item%d: Pull complete\033[K\n", i);
      assert_non_null (strstr (out, l));
    }
  assert_true (ib_str_has_suffix (out, "\033[3A\ritem3: Pull complete\033[K\n"
                                       "item4: Pull complete\033[K\n"
                                       "item5: Pull complete\033[K\n"
                                       "item0: Pull complete\033[K\n"
                                       "item1: Pull complete\033[K\n"
                                       "item2: Pull complete\033[K\n"));
  /* item0..2 were fixed as lines while still downloading */
  assert_non_null (strstr (out, "item0: Downloading\033[K\n"));
}

static void
test_tty_throttle (void **state)
{
  (void) state;
  capture (IB_PROGRESS_TTY, 0);
  ib_progress_set_term_size (80, 24);
  ib_progress_t *p = ib_progress_begin ("t");
  int a = ib_progress_add (p, "a", "Downloading", 1000000);
  /* 1000 updates over 1 s: at most ~10 redraws */
  for (int i = 1; i <= 1000; i++)
    {
      fake_now = i * MS;
      ib_progress_update (p, a, i * 1000LL);
    }
  ib_progress_done (p, a, true, "Pull complete");
  ib_progress_end (p);
  const char *out = captured ();
  int redraws = count (out, "\033[1A");
  assert_in_range (redraws, 9, 12);
  assert_true (ib_str_has_suffix (out, "a: Pull complete\033[K\n"));
}

static void
test_tty_message_above_or_below_items (void **state)
{
  (void) state;
  capture (IB_PROGRESS_TTY, 0);
  ib_progress_set_term_size (80, 24);
  ib_progress_t *p = ib_progress_begin ("t");
  int a = ib_progress_add (p, "a", "Pushing", 10);
  ib_progress_message (p, "a is running: above"); /* forced redraw */
  ib_progress_done (p, a, true, "Pushed");        /* throttled */
  ib_progress_message (p, "x: digest: sha256:x size: 5");
  fake_now += 1 * S;
  int b = ib_progress_add (p, "b", "Pushing", 10); /* rows start below the message */
  ib_progress_done (p, b, true, "Pushed");
  ib_progress_end (p);
  assert_string_equal (captured (), "t\n"
                                    "a: Pushing\033[K\n"
                                    "\033[1A\ra is running: above\033[K\n"
                                    "a: Pushing\033[K\n"
                                    "\033[1A\ra: Pushed\033[K\n"
                                    "x: digest: sha256:x size: 5\033[K\n"
                                    "b: Pushing\033[K\n"
                                    "\033[1A\rb: Pushed\033[K\n");
}

static void
test_tty_message_when_all_finished_and_nothing_after (void **state)
{
  (void) state;
  capture (IB_PROGRESS_TTY, 0);
  ib_progress_set_term_size (80, 24);
  ib_progress_t *p = ib_progress_begin ("t");
  ib_progress_message (p, "no items");
  int a = ib_progress_add (p, "a", "Pushing", 10);
  fake_now += 1 * S;
  ib_progress_done (p, a, true, "Pushed");
  ib_progress_message (p, "done");
  ib_progress_end (p); /* nothing left to redraw */
  assert_string_equal (captured (), "t\nno items\033[K\n"
                                    "a: Pushed\033[K\n" /* the add was throttled */
                                    "\033[1A\ra: Pushed\033[K\n"
                                    "done\033[K\n");
}

static void
test_tty_elapsed_time (void **state)
{
  (void) state;
  capture (IB_PROGRESS_TTY, 0);
  ib_progress_set_term_size (30, 24);
  ib_progress_t *p = ib_progress_begin ("t");
  int a = ib_progress_add (p, "[a 2/3] RUN make", "Running", -1);
  int b = ib_progress_add (p, "[a 3/3] RUN x", "Running", -1);
  ib_progress_show_elapsed (p, a);
  fake_now += 2500 * MS;
  ib_progress_set_status (p, a, "gcc -c a-rather-long-file-name.c");
  fake_now += 1 * S;
  ib_progress_done (p, a, true, "DONE 3.5s");
  ib_progress_show_elapsed (p, a); /* finished: ignored */
  ib_progress_done (p, b, true, "DONE");
  ib_progress_end (p);
  const char *out = captured ();
  /* the seconds stay at the end of the row, the status is cut before them */
  assert_non_null (strstr (out, "\033[1A\r[a 2/3] RUN make: gcc -c   2s\033[K\n"
                                "[a 3/3] RUN x: Running\033[K\n"));
  assert_true (ib_str_has_suffix (out, "\033[2A\r[a 2/3] RUN make: DONE 3.5s\033[K\n"
                                       "[a 3/3] RUN x: DONE\033[K\n"));
  /* JSON and PLAIN: nothing for it */
  capture (IB_PROGRESS_JSON, 0);
  p = ib_progress_begin ("t");
  a = ib_progress_add (p, "s", "Running", -1);
  ib_progress_show_elapsed (p, a);
  ib_progress_end (p);
  assert_int_equal (count (captured (), "\n"), 1);
  capture (IB_PROGRESS_PLAIN, 0);
  p = ib_progress_begin ("t");
  a = ib_progress_add (p, "s", "Running", -1);
  ib_progress_show_elapsed (p, a);
  ib_progress_end (p);
  assert_string_equal (captured (), "t\ns: Running\n");
  ib_progress_show_elapsed (NULL, 0);
}

/* A row wider than the terminal: the id (a step's command) is cut, the
 * state after it kept whole ("DONE 2.2s" was lost at 80 columns), and the
 * elapsed seconds stay at the end. */
static void
test_tty_long_id_keeps_its_state (void **state)
{
  (void) state;
  capture (IB_PROGRESS_TTY, 0);
  ib_progress_set_term_size (30, 24);
  ib_progress_t *p = ib_progress_begin ("t");
  int a = ib_progress_add (p, "[a 2/3] RUN make -j8 all install", "Running", -1);
  int b = ib_progress_add (p, "[a 3/3] RUN for i in 1 2 3; do x; done", "Running", -1);
  ib_progress_show_elapsed (p, a);
  fake_now += 2500 * MS;
  ib_progress_set_status (p, b, "Waiting");
  fake_now += 1 * S;
  ib_progress_done (p, a, true, "DONE 3.5s");
  ib_progress_done (p, b, false, "ERROR after 1.0s");
  ib_progress_end (p);
  const char *out = captured ();
  /* 29 columns: "[a 2/3] RUN m" + "..." + ": Running" + "  2s" */
  assert_non_null (strstr (out, "\033[1A\r[a 2/3] RUN m...: Running  2s\033[K\n"
                                "[a 3/3] RUN for i...: Waiting\033[K\n"));
  assert_true (ib_str_has_suffix (out, "\033[2A\r[a 2/3] RUN mak...: DONE 3.5s\033[K\n"
                                       "[a 3/3] ...: ERROR after 1.0s\033[K\n"));
  /* each fills the 29 columns */
  assert_int_equal (strlen ("[a 2/3] RUN m...: Running  2s"), 29);
  assert_int_equal (strlen ("[a 2/3] RUN mak...: DONE 3.5s"), 29);
  assert_int_equal (strlen ("[a 3/3] ...: ERROR after 1.0s"), 29);
  /* a state too long to keep whole with 8 columns of the id: cut at the end */
  capture (IB_PROGRESS_TTY, 0);
  ib_progress_set_term_size (30, 24);
  p = ib_progress_begin ("t");
  a = ib_progress_add (p, "[a 1/1] RUN x", "Running", -1);
  ib_progress_done (p, a, true, "a state of thirty characters!!");
  ib_progress_end (p);
  assert_true (ib_str_has_suffix (captured (), "\r[a 1/1] RUN x: a state of thi\033[K\n"));
}

/* A display that goes on after another (a build's, after a pull's) does
 * not print its title again. */
static void
test_continue_prints_no_title (void **state)
{
  (void) state;
  capture (IB_PROGRESS_PLAIN, 0);
  ib_progress_t *p = ib_progress_begin ("build r");
  ib_progress_end (p);
  p = ib_progress_begin ("pull x");
  ib_progress_end (p);
  p = ib_progress_continue ("build r");
  int a = ib_progress_add (p, "[s 2/2] RUN x", "Running", -1);
  ib_progress_done (p, a, true, "DONE");
  ib_progress_end (p);
  assert_string_equal (captured (), "build r\npull x\n[s 2/2] RUN x: Running\n[s 2/2] RUN x: DONE\n");
}

/* A running item's last output lines under its line (TTY), as many as the
 * terminal's rows allow; gone, their rows cleared, once it finishes. */
static void
test_tty_output_tail (void **state)
{
  (void) state;
  capture (IB_PROGRESS_TTY, 0);
  ib_progress_set_term_size (40, 24);
  ib_progress_t *p = ib_progress_begin ("t");
  int a = ib_progress_add (p, "[a 2/2] RUN x", "Running", -1);
  for (int i = 1; i <= 7; i++)
    {
      fake_now += 200 * MS;
      char l[32];
      snprintf (l, sizeof l, "line %d%s", i, i == 7 ? " \033[31mred" : "");
      ib_progress_output (p, a, l);
    }
  fake_now += 200 * MS;
  ib_progress_done (p, a, true, "DONE 1.6s");
  ib_progress_output (p, a, "late"); /* finished: ignored */
  ib_progress_end (p);
  const char *out = captured ();
  /* the last five, oldest first, control characters as '?' */
  assert_non_null (strstr (out, "\033[6A\r[a 2/2] RUN x: Running\033[K\n"
                                "  > line 3\033[K\n  > line 4\033[K\n  > line 5\033[K\n"
                                "  > line 6\033[K\n  > line 7 ?[31mred\033[K\n"));
  /* done: the item's line, then the five rows cleared and the cursor back
   * under it (where the final render finds it) */
  assert_true (ib_str_has_suffix (out, "\033[6A\r[a 2/2] RUN x: DONE 1.6s\033[K\n"
                                       "\033[K\n\033[K\n\033[K\n\033[K\n\033[K\n\033[5A"
                                       "\033[1A\r[a 2/2] RUN x: DONE 1.6s\033[K\n"));
  assert_null (strstr (out, "late"));
  /* a terminal of 4 rows: the item and two of its lines */
  capture (IB_PROGRESS_TTY, 0);
  ib_progress_set_term_size (40, 4);
  p = ib_progress_begin ("t");
  a = ib_progress_add (p, "s", "Running", -1);
  for (int i = 1; i <= 4; i++)
    {
      fake_now += 200 * MS;
      char l[16];
      snprintf (l, sizeof l, "out %d", i);
      ib_progress_output (p, a, l);
    }
  ib_progress_end (p);
  out = captured ();
  assert_non_null (strstr (out, "\033[3A\rs: Running\033[K\n  > out 3\033[K\n  > out 4\033[K\n"));
  assert_null (strstr (out, "  > out 1\033[K\n  > out 2\033[K\n  > out 3")); /* never 3 */
  /* PLAIN: each line once; JSON: a message naming the item */
  capture (IB_PROGRESS_PLAIN, 0);
  p = ib_progress_begin ("t");
  a = ib_progress_add (p, "s", "Running", -1);
  ib_progress_output (p, a, "hello");
  ib_progress_end (p);
  assert_string_equal (captured (), "t\ns: Running\ns: hello\n");
  capture (IB_PROGRESS_JSON, 0);
  p = ib_progress_begin ("t");
  a = ib_progress_add (p, "s", "Running", -1);
  ib_progress_output (p, a, "hello");
  ib_progress_end (p);
  json_t *ev = json_lines (captured ());
  assert_int_equal (json_array_size (ev), 2); /* add, message */
  assert_string_equal (str_field (json_array_get (ev, 1), "event"), "message");
  assert_string_equal (str_field (json_array_get (ev, 1), "message"), "s hello");
  json_decref (ev);
  ib_progress_output (NULL, 0, "x");
  /* a log line of several lines above the items: each a row of its own,
   * other control characters as '?' */
  capture (IB_PROGRESS_TTY, 0);
  ib_progress_set_term_size (40, 24);
  p = ib_progress_begin ("t");
  a = ib_progress_add (p, "s", "Running", -1);
  fake_now += 200 * MS;
  ib_warn ("kept in X; to look:\n  run it\033[2J");
  ib_progress_end (p);
  assert_non_null (strstr (captured (), "\033[1A\rimgbuild: warning: kept in X; to look:\033[K\n"
                                        "  run it?[2J\033[K\ns: Running\033[K\n"));
}

/* ---------- threads ---------- */

struct worker
{
  ib_progress_t *p;
  int n;
};

static void *
worker_main (void *arg)
{
  struct worker *w = arg;
  char id[16];
  snprintf (id, sizeof id, "t%d", w->n);
  int it = ib_progress_add (w->p, id, "Downloading", 200000);
  for (int i = 0; i <= 200000; i += 10)
    {
      ib_progress_update (w->p, it, i);
      if (i % 50000 == 0)
        ib_progress_set_status (w->p, it, i % 100000 ? "Extracting" : "Downloading");
    }
  ib_progress_done (w->p, it, true, "Done");
  return NULL;
}

static const char *
run_threads (ib_progress_mode_t mode)
{
  capture (mode, 0);
  ib_progress_set_clock (NULL); /* the real clock: the TTY ticker runs */
  ib_progress_set_term_size (80, 24);
  ib_progress_t *p = ib_progress_begin ("threads");
  pthread_t th[4];
  struct worker w[4];
  for (int i = 0; i < 4; i++)
    {
      w[i] = (struct worker) { p, i };
      assert_int_equal (pthread_create (&th[i], NULL, worker_main, &w[i]), 0);
    }
  for (int i = 0; i < 4; i++)
    pthread_join (th[i], NULL);
  ib_progress_end (p);
  return captured ();
}

static void
test_threads_json (void **state)
{
  (void) state;
  json_t *ev = json_lines (run_threads (IB_PROGRESS_JSON));
  int adds = 0, dones = 0;
  size_t i;
  json_t *o;
  json_array_foreach (ev, i, o)
  {
    adds += strcmp (str_field (o, "event"), "add") == 0;
    if (strcmp (str_field (o, "event"), "done") == 0)
      {
        dones++;
        assert_int_equal (int_field (o, "current"), 200000);
      }
  }
  assert_int_equal (adds, 4);
  assert_int_equal (dones, 4);
  json_decref (ev);
}

static void
test_threads_plain_and_tty (void **state)
{
  (void) state;
  const char *out = run_threads (IB_PROGRESS_PLAIN);
  /* whole lines only: every line is "threads" or "tN: ..." */
  for (const char *s = out; *s;)
    {
      const char *nl = strchr (s, '\n');
      assert_non_null (nl);
      assert_true (strncmp (s, "threads\n", 8) == 0
                   || (s[0] == 't' && s[1] >= '0' && s[1] <= '3' && s[2] == ':'));
      s = nl + 1;
    }
  for (int i = 0; i < 4; i++)
    {
      char l[64];
      snprintf (l, sizeof l, "t%d: Done (200.0kB in ", i);
      assert_int_equal (count (out, l), 1);
    }
  out = run_threads (IB_PROGRESS_TTY);
  /* the final redraw ends with four final lines */
  const char *last = out + strlen (out);
  for (int n = 0; n < 5 && last > out; last--)
    n += last[-1] == '\n';
  assert_int_equal (count (last, ": Done\033[K\n"), 4);
}

/* ---------- relay: a child's displays replayed by its parent ---------- */

/* What a child process in relay mode writes: a build display with a step
 * that runs (output lines, one not UTF-8), log lines, a pull display of
 * its own, and a step left running. */
static char *
relay_child_lines (void)
{
  char path[] = "/tmp/test_progress_relay.XXXXXX";
  int fd = mkstemp (path);
  assert_true (fd >= 0);
  unlink (path);
  int wfd = dup (fd);
  assert_int_equal (ib_progress_relay_to (wfd), 0);
  assert_int_equal (ib_progress_resolved_mode (), IB_PROGRESS_RELAY);
  ib_progress_set_clock (fake_clock);
  fake_now = 5 * S;
  ib_progress_t *p = ib_progress_begin ("build r.recipe");
  int a = ib_progress_add (p, "[a 2/3] RUN make", "Running", -1);
  ib_progress_show_elapsed (p, a);
  ib_progress_set_status (p, a, "gcc -c x.c");
  ib_progress_set_status (p, a, "caf\xe9 \xc3\xa9t\xc3\xa9");
  ib_progress_output (p, a, "cc1: note");
  ib_info ("an info line");
  ib_warn ("careful: %d", 7);
  fake_now += 1 * S;
  ib_progress_done (p, a, true, "DONE 1.0s");
  ib_progress_end (p);
  p = ib_progress_begin ("pull x");
  int l = ib_progress_add (p, "0123456789ab", "Downloading", 100);
  ib_progress_update (p, l, 0); /* throttled: the add was just sent */
  fake_now += 1 * S;
  ib_progress_update (p, l, 40);
  ib_progress_done (p, l, true, "Pull complete");
  ib_progress_message (p, "Digest: sha256:abc");
  ib_progress_end (p);
  p = ib_progress_begin ("build r.recipe");
  ib_progress_add (p, "[a 3/3] RUN sleep 9", "Running", -1);
  ib_progress_end (p); /* the child is stopped here (ending says nothing) */
  ib_log_set_sink (NULL, NULL);
  ib_progress_set_mode (IB_PROGRESS_AUTO);
  ib_progress_set_output (NULL);
  ib_progress_set_clock (NULL);
  char *text = NULL;
  size_t len = 0;
  FILE *m = open_memstream (&text, &len);
  char buf[4096];
  ssize_t n;
  lseek (fd, 0, SEEK_SET);
  while ((n = read (fd, buf, sizeof buf)) > 0)
    fwrite (buf, 1, (size_t) n, m);
  fclose (m);
  close (fd);
  return text;
}

static void
test_relay_lines_are_json_events (void **state)
{
  (void) state;
  char *text = relay_child_lines ();
  json_t *ev = json_lines (text);
  size_t n = json_array_size (ev);
  assert_int_equal (n, 13);
  const char *want[] = { "add", "elapsed", "status", "status", "output", "log", "log", "done",
                         "add", "update", "done", "message", "add" };
  for (size_t i = 0; i < n; i++)
    assert_string_equal (str_field (json_array_get (ev, i), "event"), want[i]);
  json_t *o = json_array_get (ev, 0);
  assert_string_equal (str_field (o, "title"), "build r.recipe");
  assert_string_equal (str_field (o, "id"), "[a 2/3] RUN make");
  /* bytes that are not UTF-8 are '?', the rest stays */
  assert_string_equal (str_field (json_array_get (ev, 3), "status"), "caf? \xc3\xa9t\xc3\xa9");
  assert_string_equal (str_field (json_array_get (ev, 4), "message"), "cc1: note");
  o = json_array_get (ev, 5);
  assert_string_equal (str_field (o, "level"), "info");
  assert_string_equal (str_field (o, "message"), "an info line");
  o = json_array_get (ev, 6);
  assert_string_equal (str_field (o, "level"), "warning");
  assert_string_equal (str_field (o, "message"), "imgbuild: warning: careful: 7");
  o = json_array_get (ev, 9);
  assert_string_equal (str_field (o, "title"), "pull x");
  assert_int_equal (int_field (o, "current"), 40);
  assert_int_equal (int_field (o, "total"), 100);
  json_decref (ev);
  free (text);
}

/* Feed `text` to a relay on a display of `mode`, `chunk` bytes at a time
 * (the clock `step` further each time), with a junk line, an over-long
 * line and a last line without newline; the output of the display. */
static const char *
replay (ib_progress_mode_t mode, const char *text, size_t chunk, int64_t step)
{
  capture (mode, 100 * S);
  ib_progress_set_term_size (60, 24);
  ib_progress_t *p = ib_progress_begin ("build r.recipe");
  ib_progress_relay_t *r = ib_progress_relay_new (p, "[a] ");
  ib_progress_relay_feed (r, "not json\n{\"event\":\"done\"}\n", 27);
  size_t big = 1024 * 1024 + 10;
  char *junk = malloc (big);
  memset (junk, 'x', big);
  ib_progress_relay_feed (r, junk, big);
  free (junk);
  ib_progress_relay_feed (r, "\n", 1);
  size_t len = strlen (text);
  for (size_t off = 0; off < len; off += chunk)
    {
      ib_progress_relay_feed (r, text + off, len - off < chunk ? len - off : chunk);
      fake_now += step;
    }
  const char *last = "{\"event\":\"log\",\"level\":\"info\",\"message\":\"no newline\"}";
  ib_progress_relay_feed (r, last, strlen (last));
  ib_progress_relay_end (r, "CANCELED");
  ib_progress_end (p);
  return captured ();
}

static void
test_relay_replays_on_plain_display (void **state)
{
  (void) state;
  char *text = relay_child_lines ();
  char *out = xstrdup (replay (IB_PROGRESS_PLAIN, text, 1, 0)); /* split anywhere */
  assert_string_equal (out, "build r.recipe\n"
                            "[a 2/3] RUN make: Running\n"
                            "[a 2/3] RUN make: gcc -c x.c\n"
                            "[a 2/3] RUN make: caf? \xc3\xa9t\xc3\xa9\n"
                            "[a 2/3] RUN make: cc1: note\n"
                            "an info line\n"
                            "imgbuild: warning: careful: 7\n"
                            "[a 2/3] RUN make: DONE 1.0s\n"
                            "[a] pull x\n"
                            "[a] 0123456789ab: Downloading 100B\n"
                            "[a] 0123456789ab: Pull complete (40B in 0.0s)\n"
                            "Digest: sha256:abc\n"
                            "[a 3/3] RUN sleep 9: Running\n"
                            "no newline\n"
                            "[a 3/3] RUN sleep 9: CANCELED\n");
  /* the same in big pieces */
  const char *again = replay (IB_PROGRESS_PLAIN, text, 4096, 0);
  assert_string_equal (again, out);
  free (out);
  free (text);
}

static void
test_relay_replays_on_tty_display (void **state)
{
  (void) state;
  char *text = relay_child_lines ();
  const char *out = replay (IB_PROGRESS_TTY, text, 1, 20 * MS); /* a redraw per 5 bytes */
  /* the step's output lines were its status, redrawn in place, with the
   * seconds it ran; log lines and messages came whole between the redraws;
   * the pull's item with its bar; the step left running ends CANCELED */
  /* 20 ms a byte */
  assert_non_null (strstr (out, "\033[1A\r[a 2/3] RUN make: gcc -c x.c  6s\033[K\n"));
  assert_non_null (strstr (out, "\033[1A\r[a 2/3] RUN make: caf? \xc3\xa9t\xc3\xa9  "));
  /* the output line under the step's line, and gone once it is done */
  assert_non_null (strstr (out, "\033[1A\r[a 2/3] RUN make: caf? \xc3\xa9t\xc3\xa9  14s\033[K\n"
                                "  > cc1: note\033[K\n"));
  assert_non_null (strstr (out, "\033[2A\r[a 2/3] RUN make: DONE 1.0s\033[K\n\033[K\n\033[1A"));
  assert_non_null (strstr (out, "\033[2A\rimgbuild: warning: careful: 7\033[K\n"));
  assert_non_null (strstr (out, "[a 2/3] RUN make: DONE 1.0s\033[K\n[a] pull x\033[K\n"));
  assert_non_null (
      strstr (out, "[a] 0123456789ab: Downloading [=====>           ]  40B/100B\033[K\n"));
  assert_non_null (
      strstr (out, "\033[1A\r[a] 0123456789ab: Pull complete\033[K\nDigest: sha256:abc\033[K\n"));
  assert_true (ib_str_has_suffix (out, "\033[1A\r[a 3/3] RUN sleep 9: CANCELED\033[K\n"));
  free (text);
}

/* ib_progress_fork: the child does not log through the parent's display;
 * the parent's ticker goes on after. */
static void
test_fork_leaves_display_to_parent (void **state)
{
  (void) state;
  capture (IB_PROGRESS_TTY, 0);
  ib_progress_set_clock (NULL); /* the real clock: the ticker runs */
  ib_progress_set_term_size (80, 24);
  ib_progress_t *p = ib_progress_begin ("t");
  ib_log_sink_fn sink;
  void *ud;
  ib_log_get_sink (&sink, &ud);
  assert_non_null (sink); /* log lines go above the bars */
  pid_t pid = ib_progress_fork (p);
  assert_true (pid >= 0);
  if (pid == 0)
    {
      ib_log_get_sink (&sink, &ud);
      _exit (sink == NULL ? 0 : 1);
    }
  int ws = 0;
  assert_int_equal (waitpid (pid, &ws, 0), pid);
  assert_true (WIFEXITED (ws) && WEXITSTATUS (ws) == 0);
  ib_progress_message (p, "still here");
  int a = ib_progress_add (p, "a", "Waiting", -1);
  struct timespec ts = { 0, 300 * MS };
  nanosleep (&ts, NULL); /* the ticker draws the item */
  ib_progress_done (p, a, true, "Done");
  ib_progress_end (p);
  const char *out = captured ();
  assert_true (ib_str_has_prefix (out, "t\nstill here\033[K\na: Waiting\033[K\n"));
  assert_true (ib_str_has_suffix (out, "\033[1A\ra: Done\033[K\n"));
  pid = ib_progress_fork (NULL); /* no display: a plain fork */
  if (pid == 0)
    _exit (3);
  assert_int_equal (waitpid (pid, &ws, 0), pid);
  assert_true (WIFEXITED (ws) && WEXITSTATUS (ws) == 3);
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test (test_parse_mode_and_short_id),
    cmocka_unit_test (test_plain_lines),
    cmocka_unit_test (test_plain_unknown_total_and_failure),
    cmocka_unit_test (test_json_events),
    cmocka_unit_test (test_json_throttle),
    cmocka_unit_test (test_quiet_prints_nothing),
    cmocka_unit_test (test_auto_is_plain_when_not_a_terminal),
    cmocka_unit_test (test_tty_bars_and_final_lines),
    cmocka_unit_test (test_tty_unknown_total_and_width),
    cmocka_unit_test (test_tty_more_items_than_rows),
    cmocka_unit_test (test_tty_throttle),
    cmocka_unit_test (test_tty_message_above_or_below_items),
    cmocka_unit_test (test_tty_message_when_all_finished_and_nothing_after),
    cmocka_unit_test (test_tty_elapsed_time),
    cmocka_unit_test (test_tty_long_id_keeps_its_state),
    cmocka_unit_test (test_continue_prints_no_title),
    cmocka_unit_test (test_tty_output_tail),
    cmocka_unit_test (test_threads_json),
    cmocka_unit_test (test_threads_plain_and_tty),
    cmocka_unit_test (test_relay_lines_are_json_events),
    cmocka_unit_test (test_relay_replays_on_plain_display),
    cmocka_unit_test (test_relay_replays_on_tty_display),
    cmocka_unit_test (test_fork_leaves_display_to_parent),
  };
  int r = cmocka_run_group_tests (tests, NULL, NULL);
  free (cap_data);
  return r;
}
