/* builder/engine/display.c — a step's line on the progress display (TTY,
 * plain, JSON) and the RUN output relayed under it. */
#include "builder/engine/engine.h"

#include <string.h>

const char *
stage_label (stage_state_t *st)
{
  return st->def->name ? st->def->name : "stage";
}

/* Step progress.  PLAIN (and QUIET, through -q): a line per step,
 * "[build 2/5] RUN make" (" CACHED" on a hit), the command's output as it
 * comes, then "[build 2/5] DONE 3.2s".  TTY and JSON: an item per step in a
 * progress display ("build RECIPE"): TTY shows each step's state and, while
 * a step runs, the seconds it has run (and for a RUN its last output line);
 * JSON emits the items' events and each output line as a "message" event.
 * With -j the stages' processes relay (IB_PROGRESS_RELAY) their items to
 * the parent's TTY display, output lines as the item's status
 * (run_stages_parallel). */
void
step_line (build_t *b, stage_state_t *st, const char *keyword, const char *what_full, bool cached,
           bool timed)
{
  /* a heredoc script shows as its first line */
  const char *nl = strchr (what_full, '\n');
  cleanup_free char *what = nl ? xasprintf ("%.*s ...", (int) (nl - what_full), what_full)
                               : xstrdup (what_full);
  /* "[build 2/5]"; one of several platforms' builds: "[linux/arm64 build 2/5]", as buildx */
  const char *pl = b->platform_label ? b->platform_label : "";
  const char *sp = b->platform_label ? " " : "";
  cleanup_free char *label = st->def->name
                                 ? xasprintf ("[%s%s%s %zu/%zu]", pl, sp, st->def->name, st->step,
                                              st->n_steps)
                                 : xasprintf ("[%s%sstage-%d %zu/%zu]", pl, sp, st->def->index,
                                              st->step, st->n_steps);
  free (b->step_label);
  b->step_label = xstrdup (label);
  b->step_open = timed && !cached;
  clock_gettime (CLOCK_MONOTONIC, &b->step_t0);
  if (b->prog)
    {
      free (b->step_text);
      b->step_text = xasprintf ("%s %s %s", label, keyword, what);
      b->step_item = ib_progress_add (b->prog, b->step_text, "Running", -1);
      if (cached || !timed)
        ib_progress_done (b->prog, b->step_item, true, cached ? "CACHED" : "DONE");
      else
        ib_progress_show_elapsed (b->prog, b->step_item);
      return;
    }
  ib_info ("%s %s %s%s", label, keyword, what, cached ? " CACHED" : "");
}

/* The end of a step that ran (step_line with `timed`). */
void
step_end (build_t *b, bool ok)
{
  if (!b->step_open)
    return;
  b->step_open = false;
  struct timespec t1;
  clock_gettime (CLOCK_MONOTONIC, &t1);
  double s = (double) (t1.tv_sec - b->step_t0.tv_sec)
             + (double) (t1.tv_nsec - b->step_t0.tv_nsec) / 1e9;
  if (b->prog)
    {
      cleanup_free char *st = xasprintf (ok ? "DONE %.1fs" : "ERROR after %.1fs", s);
      ib_progress_done (b->prog, b->step_item, ok, st);
    }
  else if (ok)
    ib_info ("%s DONE %.1fs", b->step_label, s);
}

/* A RUN's output in TTY/JSON mode: complete lines become the step's output
 * lines (TTY: the last ones under the step's line; RELAY: for the parent's
 * TTY) or "message" events (JSON). */
void
step_output (void *ud, const char *data, size_t len)
{
  build_t *b = ud;
  ib_buf_append (&b->out_line, data, len);
  char *start = b->out_line.data;
  char *nl;
  while ((nl = memchr (start, '\n', b->out_line.len - (size_t) (start - b->out_line.data))))
    {
      *nl = '\0';
      char *line = start;
      start = nl + 1;
      size_t n = strlen (line);
      while (n && (line[n - 1] == '\r' || line[n - 1] == ' '))
        line[--n] = '\0';
      char *cr = strrchr (line, '\r'); /* progress bars redraw with \r */
      if (cr)
        line = cr + 1;
      if (!*line)
        continue;
      if (ib_progress_resolved_mode () == IB_PROGRESS_JSON)
        ib_progress_message (b->prog, "%s %s", b->step_label, line);
      else
        ib_progress_output (b->prog, b->step_item, line);
    }
  size_t rest = b->out_line.len - (size_t) (start - b->out_line.data);
  memmove (b->out_line.data, start, rest);
  b->out_line.len = rest;
  if (b->out_line.len > 65536)
    b->out_line.len = 0; /* a line without end: drop what was kept */
}

/* The build's display goes while a pull or push shows its own (one TTY
 * display at a time), and comes back after. */
void
prog_pause (build_t *b)
{
  if (b->prog)
    {
      ib_progress_end (b->prog);
      b->prog = NULL;
      b->prog_paused = true;
    }
}

void
prog_resume (build_t *b)
{
  if (b->prog_paused)
    {
      cleanup_free char *title = xasprintf ("build %s", b->recipe->path);
      b->prog = ib_progress_continue (title);
      b->prog_paused = false;
      if (b->step_open && b->step_text) /* the running step goes on in the new display */
        {
          b->step_item = ib_progress_add (b->prog, b->step_text, "Running", -1);
          ib_progress_show_elapsed (b->prog, b->step_item);
        }
    }
}
