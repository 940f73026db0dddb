/* builder/cli/slurm.c — `build --slurm` (slurm.h).
 *
 * Reading order: run_capture() runs sbatch/squeue/scancel; the job
 * directory (job_dir_*, job.json); slurm_task_argv() and the batch
 * scripts; slurm_submit(); the follower (queue_read, cell_view,
 * slurm_follow); the task's side (slurm_task_store, slurm_task_run);
 * cmd_matrix. */
#include "builder/cli/slurm.h"
#include "builder/cli/cli.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* Slurm's commands */

/* Run `argv` (PATH searched), its stdout into *out (caller frees), its
 * stderr passed through.  0 when it exits 0; else -1, the error naming the
 * command and its status, with its output's first line. */
static int
run_capture (char *const *argv, char **out, ib_error_t *err)
{
  *out = NULL;
  int fds[2];
  if (pipe2 (fds, O_CLOEXEC) < 0)
    return ib_error_set (err, errno, "pipe: %s", strerror (errno));
  pid_t pid = fork ();
  if (pid < 0)
    {
      int e = errno;
      close (fds[0]);
      close (fds[1]);
      return ib_error_set (err, e, "fork: %s", strerror (e));
    }
  if (pid == 0)
    {
      dup2 (fds[1], 1);
      execvp (argv[0], argv);
      fprintf (stderr, "imgbuild: %s: %s\n", argv[0], strerror (errno));
      _exit (127);
    }
  close (fds[1]);
  ib_buf_t b = { 0 };
  ib_buf_puts (&b, "");
  char chunk[4096];
  ssize_t n;
  while ((n = read (fds[0], chunk, sizeof chunk)) != 0)
    {
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        break;
      ib_buf_printf (&b, "%.*s", (int) n, chunk);
    }
  close (fds[0]);
  int st = 0;
  while (waitpid (pid, &st, 0) < 0)
    if (errno != EINTR)
      return ib_error_set (err, errno, "wait for %s: %s", argv[0], strerror (errno));
  *out = ib_buf_steal (&b);
  if (WIFEXITED (st) && WEXITSTATUS (st) == 0)
    return 0;
  if (WIFEXITED (st) && WEXITSTATUS (st) == 127)
    return ib_error_set (err, ENOENT, "%s: not found (is Slurm's client installed and on PATH?)",
                         argv[0]);
  return ib_error_set (err, EIO, "%s failed (%s %d)", argv[0],
                       WIFEXITED (st) ? "exit status" : "signal",
                       WIFEXITED (st) ? WEXITSTATUS (st) : WTERMSIG (st));
}

/* scancel the ids (NULL entries skipped); failures are warnings */
static void
scancel (const char *a, const char *b)
{
  char *argv[] = { "scancel", (char *) a, (char *) b, NULL };
  if (a == NULL)
    argv[1] = (char *) b, argv[2] = NULL;
  if (argv[1] == NULL)
    return;
  cleanup_free char *out = NULL;
  ib_error_t e = NULL;
  if (run_capture (argv, &out, &e) < 0)
    {
      ib_warn ("%s", e->msg);
      ib_error_free (&e);
    }
}

/* ------------------------------------------------------------------ */
/* the job directory */

static char *
default_slurm_dir (void)
{
  const char *state = getenv ("XDG_STATE_HOME");
  if (state && *state == '/')
    return xasprintf ("%s/imgbuild/slurm", state);
  const char *home = getenv ("HOME");
  if (home == NULL || *home != '/')
    {
      struct passwd *pw = getpwuid (getuid ());
      home = pw ? pw->pw_dir : "/tmp";
    }
  return xasprintf ("%s/.local/state/imgbuild/slurm", home);
}

/* job.json of a job directory, as slurm_submit wrote it */
typedef struct job
{
  json_t *json;      /* owns the strings below */
  const char *array; /* the array's job id */
  const char *seed;  /* the seed job's id, or NULL */
  json_t *labels;    /* the cells' labels, in matrix order */
  size_t n;          /* the number of cells */
} job_t;

static void
job_clear (job_t *j)
{
  json_decref (j->json);
  memset (j, 0, sizeof *j);
}

/* Read DIR/job.json into *j (job_clear frees); -1 with *err set. */
static int
job_read (const char *dir, job_t *j, ib_error_t *err)
{
  memset (j, 0, sizeof *j);
  cleanup_free char *path = ib_path_join (dir, "job.json");
  cleanup_free char *data = NULL;
  size_t len = 0;
  if (ib_read_file (path, &data, &len, err) < 0)
    return -1;
  j->json = json_loadb (data, len, 0, NULL);
  j->array = json_string_value (json_object_get (j->json, "array"));
  j->seed = json_string_value (json_object_get (j->json, "seed"));
  j->labels = json_object_get (j->json, "labels");
  j->n = json_array_size (j->labels);
  if (j->array == NULL || !json_is_array (j->labels) || j->n == 0)
    {
      job_clear (j);
      return ib_error_set (err, EINVAL, "%s: not an imgbuild Slurm job record", path);
    }
  return 0;
}

/* ------------------------------------------------------------------ */
/* the batch scripts */

/* `s` quoted for sh: '...' with ' as '\'' */
static void
sh_quote (ib_buf_t *b, const char *s)
{
  ib_buf_puts (b, "'");
  for (const char *p = s; *p; p++)
    {
      if (*p == '\'')
        ib_buf_puts (b, "'\\''");
      else
        ib_buf_printf (b, "%c", *p);
    }
  ib_buf_puts (b, "'");
}

char **
slurm_task_argv (char *const *argv)
{
  /* (--slurm-store stays: it is the task's) */
  static const char *const with_value[] = { "--slurm-opt", "--slurm-script", "--slurm-dir",
                                            "--jobs", "-j", NULL };
  char **out = NULL;
  for (size_t i = 0; argv && argv[i]; i++)
    {
      const char *a = argv[i];
      if (strcmp (a, "--") == 0)
        {
          for (; argv[i]; i++)
            ib_strv_push (&out, argv[i]);
          break;
        }
      if (i > 0 && (strcmp (a, "--slurm") == 0 || strcmp (a, "--detach") == 0))
        continue;
      bool drop = false;
      for (size_t k = 0; i > 0 && with_value[k] && !drop; k++)
        {
          size_t n = strlen (with_value[k]);
          if (strcmp (a, with_value[k]) == 0)
            {
              drop = true;
              if (argv[i + 1])
                i++;
            }
          else if (strncmp (a, with_value[k], n) == 0 && (a[n] == '=' || k == 4))
            drop = true; /* --slurm-opt=X, -j4 */
        }
      if (!drop)
        ib_strv_push (&out, a);
    }
  return out;
}

/* The batch script: the user's --slurm-script lines (its #! line
 * dropped) first, so that its #SBATCH lines count, then the task's exec. */
static int
write_script (const char *path, const char *prologue, char *const *task_argv,
              const char *extra, const char *dir, ib_error_t *err)
{
  ib_buf_t b = { 0 };
  ib_buf_puts (&b, "#!/bin/sh\n");
  if (prologue)
    {
      cleanup_free char *text = NULL;
      size_t len = 0;
      if (ib_read_file_max (prologue, 1 << 20, "--slurm-script", &text, &len, err) < 0)
        {
          ib_buf_free (&b);
          return -1;
        }
      const char *body = text;
      if (strncmp (body, "#!", 2) == 0)
        body = strchr (body, '\n') ? strchr (body, '\n') + 1 : "";
      ib_buf_printf (&b, "%s%s", body, *body && body[strlen (body) - 1] != '\n' ? "\n" : "");
    }
  ib_buf_puts (&b, "# written by imgbuild build --slurm: one cell of the build per array task\n"
                   "exec");
  for (char *const *a = task_argv; *a; a++)
    {
      ib_buf_puts (&b, " ");
      sh_quote (&b, *a);
    }
  if (extra)
    ib_buf_printf (&b, " %s", extra);
  ib_buf_puts (&b, " --slurm-task ");
  sh_quote (&b, dir);
  ib_buf_puts (&b, "\n");
  int r = ib_write_file_atomic (path, b.data, b.len, 0755, err);
  ib_buf_free (&b);
  return r;
}

/* Does a --slurm-opt ask for GPUs itself? */
static bool
asks_gpus (char *const *opts)
{
  for (char *const *o = opts; o && *o; o++)
    if (ib_str_has_prefix (*o, "--gres") || ib_str_has_prefix (*o, "--gpus")
        || ib_str_has_prefix (*o, "-G") || ib_str_has_prefix (*o, "--gpus-per-task"))
      return true;
  return false;
}

/* sbatch ... SCRIPT --parsable: the job id (caller frees) */
static int
sbatch (char **args, const char *script, char **id, ib_error_t *err)
{
  cleanup_strv char **argv = NULL;
  ib_strv_push (&argv, "sbatch");
  ib_strv_push (&argv, "--parsable");
  for (char **a = args; a && *a; a++)
    ib_strv_push (&argv, *a);
  ib_strv_push (&argv, script);
  cleanup_free char *out = NULL;
  if (run_capture (argv, &out, err) < 0)
    return ib_error_prefix (err, "submit %s", script);
  /* --parsable: "JOBID" or "JOBID;CLUSTER" */
  out[strcspn (out, ";\n")] = '\0';
  if (*out == '\0' || strspn (out, "0123456789") != strlen (out))
    return ib_error_set (err, EIO, "sbatch printed no job id ('%s')", out);
  *id = steal_pointer (&out);
  return 0;
}

int
slurm_submit (const slurm_opts_t *so, char *const *argv, const ib_matrix_t *m,
              bool fail_fast, bool seed, int gpus, ib_error_t *err)
{
  size_t n = ib_matrix_count (m);
  cleanup_free char *base = so->dir ? xstrdup (so->dir) : default_slurm_dir ();
  if (ib_mkdir_p (base, 0700, err) < 0)
    return ib_error_prefix (err, "--slurm-dir %s", base);
  cleanup_free char *tmpl = ib_path_join (base, "job-XXXXXX");
  if (mkdtemp (tmpl) == NULL)
    return ib_error_set (err, errno, "--slurm-dir %s: %s", base, strerror (errno));
  /* the job directory's own path, absolute: the tasks' cwd is ours, but
   * their scripts name it */
  cleanup_free char *dir = realpath (tmpl, NULL);
  if (dir == NULL)
    dir = xstrdup (tmpl);
  cleanup_free char *cells = ib_path_join (dir, "cells");
  cleanup_free char *logs = ib_path_join (dir, "logs");
  if (ib_mkdir_p (cells, 0755, err) < 0 || ib_mkdir_p (logs, 0755, err) < 0)
    return -1;
  cleanup_free char *self = realpath ("/proc/self/exe", NULL);
  cleanup_strv char **targv = slurm_task_argv (argv);
  if (self && targv)
    {
      free (targv[0]);
      targv[0] = xstrdup (self);
    }
  cleanup_free char *cell_sh = ib_path_join (dir, "cell.sh");
  cleanup_free char *seed_sh = ib_path_join (dir, "seed.sh");
  bool want_seed = seed && n > 1;
  if (write_script (cell_sh, so->script, targv, NULL, dir, err) < 0
      || (want_seed && write_script (seed_sh, so->script, targv, "--shared-only", dir, err) < 0))
    return -1;

  /* imgbuild's sbatch options, then the user's (the later one wins) */
  cleanup_free char *cwd = getcwd (NULL, 0);
  cleanup_strv char **common = NULL;
  ib_strv_push (&common, "--job-name=imgbuild");
  if (cwd)
    {
      cleanup_free char *c = xasprintf ("--chdir=%s", cwd);
      ib_strv_push (&common, c);
    }
  ib_strv_push (&common, "--open-mode=append");
  if (gpus > 0 && !asks_gpus (so->sbatch_opts))
    {
      cleanup_free char *g = xasprintf ("--gres=gpu:%d", gpus);
      ib_strv_push (&common, g);
    }
  cleanup_free char *seed_id = NULL, *array_id = NULL;
  if (want_seed)
    {
      cleanup_strv char **args = ib_strv_dup (common);
      cleanup_free char *o = xasprintf ("--output=%s/seed.out", logs);
      ib_strv_push (&args, o);
      for (char **u = so->sbatch_opts; u && *u; u++)
        ib_strv_push (&args, *u);
      if (sbatch (args, seed_sh, &seed_id, err) < 0)
        return -1;
    }
  cleanup_strv char **args = ib_strv_dup (common);
  cleanup_free char *o = xasprintf ("--output=%s/cell-%%a.out", logs);
  cleanup_free char *arr = so->jobs > 0 ? xasprintf ("--array=0-%zu%%%d", n - 1, so->jobs)
                                        : xasprintf ("--array=0-%zu", n - 1);
  cleanup_free char *dep = seed_id ? xasprintf ("--dependency=afterany:%s", seed_id) : NULL;
  ib_strv_push (&args, o);
  ib_strv_push (&args, arr);
  ib_strv_push (&args, "--requeue");
  if (dep)
    ib_strv_push (&args, dep);
  for (char **u = so->sbatch_opts; u && *u; u++)
    ib_strv_push (&args, *u);
  if (sbatch (args, cell_sh, &array_id, err) < 0)
    {
      scancel (seed_id, NULL);
      return -1;
    }

  json_t *labels = json_array ();
  for (size_t i = 0; i < n; i++)
    {
      cleanup_strv char **combo = ib_matrix_combination (m, i);
      ib_buf_t l = { 0 };
      ib_buf_puts (&l, "");
      for (char **c = combo; *c; c++)
        ib_buf_printf (&l, "%s%s", c == combo ? "" : " ", *c);
      json_array_append_new (labels, json_string (m->n_axes ? l.data : "(one build)"));
      ib_buf_free (&l);
    }
  json_t *job = json_pack ("{s:s, s:s?, s:o, s:b, s:s?}", "array", array_id, "seed", seed_id,
                           "labels", labels, "fail_fast", fail_fast, "cwd", cwd);
  cleanup_free char *text = json_dumps (job, JSON_INDENT (1) | JSON_SORT_KEYS);
  json_decref (job);
  cleanup_free char *job_path = ib_path_join (dir, "job.json");
  if (ib_write_file_atomic (job_path, text, strlen (text), 0644, err) < 0)
    {
      scancel (seed_id, array_id);
      return -1;
    }
  cleanup_free char *link = ib_path_join (base, array_id);
  unlink (link);
  if (symlink (dir, link) < 0)
    ib_warn ("%s: %s", link, strerror (errno));
  ib_info ("submitted Slurm job %s: %zu cell%s%s%s; job directory %s", array_id, n,
           n == 1 ? "" : "s", seed_id ? ", after seed job " : "", seed_id ? seed_id : "", dir);
  if (so->detach)
    {
      printf ("%s\n", array_id);
      fflush (stdout);
      return 0;
    }
  return slurm_follow (dir, fail_fast, err);
}

/* ------------------------------------------------------------------ */
/* following */

/* What squeue says of one task: "RUNNING", "PENDING", "COMPLETED"... and
 * its node; state NULL when squeue does not list it. */
typedef struct queue_entry
{
  char *state;
  char *node;
  char *reason;
} queue_entry_t;

static void
queue_entry_clear (queue_entry_t *e)
{
  free (e->state);
  free (e->node);
  free (e->reason);
  memset (e, 0, sizeof *e);
}

/* squeue -r -t all of the array (and the seed): entries[i] for task i,
 * *seed for the seed.  -1 when squeue failed (the caller retries). */
static int
queue_read (const char *array, const char *seed_id, size_t n, queue_entry_t *entries,
            queue_entry_t *seed, ib_error_t *err)
{
  cleanup_free char *jobs = seed_id ? xasprintf ("%s,%s", array, seed_id) : xstrdup (array);
  char *argv[] = { "squeue", "-h", "-r", "-t", "all", "-j", jobs, "-o", "%i|%T|%N|%r", NULL };
  cleanup_free char *out = NULL;
  if (run_capture (argv, &out, err) < 0)
    return -1;
  for (size_t i = 0; i < n; i++)
    queue_entry_clear (&entries[i]);
  queue_entry_clear (seed);
  char *save = NULL;
  for (char *line = strtok_r (out, "\n", &save); line; line = strtok_r (NULL, "\n", &save))
    {
      char *f[4] = { 0 };
      char *p = line;
      for (int k = 0; k < 4 && p; k++)
        {
          f[k] = p;
          p = strchr (p, '|');
          if (p)
            *p++ = '\0';
        }
      if (f[3] == NULL)
        continue;
      queue_entry_t *e = NULL;
      size_t alen = strlen (array);
      if (strncmp (f[0], array, alen) == 0 && f[0][alen] == '_')
        {
          char *end;
          unsigned long i = strtoul (f[0] + alen + 1, &end, 10);
          if (*end == '\0' && i < n)
            e = &entries[i];
        }
      else if (seed_id && strcmp (f[0], seed_id) == 0)
        e = seed;
      if (e == NULL)
        continue;
      e->state = xstrdup (f[1]);
      e->node = *f[2] && strcmp (f[2], "(null)") != 0 ? xstrdup (f[2]) : NULL;
      e->reason = xstrdup (f[3]);
    }
  return 0;
}

static bool
active_state (const char *s)
{
  static const char *const active[] = { "PENDING", "RUNNING", "CONFIGURING", "COMPLETING",
                                        "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESIZING",
                                        "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT",
                                        "RESV_DEL_HOLD", NULL };
  for (size_t i = 0; s && active[i]; i++)
    if (strcmp (s, active[i]) == 0)
      return true;
  return false;
}

/* What the follower knows of one cell this round. */
typedef struct cell_view
{
  matrix_cell_t result; /* cells/I.json when there (state NULL: not) */
  char *started_node;   /* cells/I.start: node and attempt */
  int attempt;
  bool final;           /* ended, for good as far as Slurm says */
  double gone_since;    /* when the task was first seen ended without a result */
} cell_view_t;

static double
now_s (void)
{
  struct timespec t;
  clock_gettime (CLOCK_MONOTONIC, &t);
  return (double) t.tv_sec + t.tv_nsec / 1e9;
}

static void
read_start (const char *path, char **node, int *attempt)
{
  cleanup_free char *data = NULL;
  size_t len = 0;
  *attempt = 0;
  if (ib_read_file (path, &data, &len, NULL) < 0)
    return;
  json_t *j = json_loadb (data, len, 0, NULL);
  const char *nd = json_string_value (json_object_get (j, "node"));
  free (*node);
  *node = nd ? xstrdup (nd) : NULL;
  *attempt = (int) json_integer_value (json_object_get (j, "attempt"));
  json_decref (j);
}

/* how long a task that ended may take to show its result file on this
 * host (a shared file system's attribute cache) before it counts as lost */
#define RESULT_GRACE_S 15.0

static volatile sig_atomic_t interrupted;

static void
on_signal (int sig)
{
  interrupted = sig;
}

/* One round for cell i: read its files, decide whether it has ended, and
 * say what changed on stderr.  `q` is squeue's entry (state NULL: not
 * listed); `queue_ok`: squeue answered this round. */
static void
cell_round (const char *dir, size_t i, size_t n, const char *label, const queue_entry_t *q,
            bool queue_ok, cell_view_t *v)
{
  cleanup_free char *rpath = xasprintf ("%s/cells/%zu.json", dir, i);
  cleanup_free char *spath = xasprintf ("%s/cells/%zu.start", dir, i);
  int old_attempt = v->attempt;
  bool was_final = v->final;
  read_start (spath, &v->started_node, &v->attempt);
  if (v->attempt > old_attempt)
    {
      cleanup_free char *att = v->attempt > 1 ? xasprintf (" (attempt %d)", v->attempt)
                                              : xstrdup ("");
      ib_info ("matrix %zu/%zu: %s: running on %s%s", i + 1, n, label,
               v->started_node ? v->started_node : "?", att);
    }
  cell_clear (&v->result);
  if (cell_read (rpath, &v->result, NULL) < 0)
    cell_clear (&v->result);
  bool active = queue_ok && active_state (q->state);
  if (!queue_ok)
    return; /* decide nothing without the queue */
  if (v->result.state && !active)
    v->final = true;
  else if (v->result.state == NULL && !active)
    {
      /* ended (or not listed) without a result: give the file a moment */
      if (v->gone_since == 0)
        v->gone_since = now_s ();
      if (now_s () - v->gone_since >= RESULT_GRACE_S || (q->state && v->attempt == 0))
        {
          v->final = true;
          free (v->result.state);
          free (v->result.why);
          bool never = v->attempt == 0;
          v->result.state = xstrdup (never ? "not built" : "FAILED");
          cleanup_free char *log = xasprintf ("%s/logs/cell-%zu.out", dir, i);
          v->result.why = q->state ? xasprintf ("%s by Slurm%s%s%s", q->state,
                                                never ? "" : ", no result; log: ",
                                                never ? "" : log, "")
                                   : xasprintf ("not in Slurm's queue any more, no result; log: %s",
                                                log);
          v->result.label = xstrdup (label);
          v->result.index = i;
          v->result.n = n;
          v->result.seconds = -1;
          v->result.node = v->started_node ? xstrdup (v->started_node) : NULL;
          v->result.attempt = v->attempt;
        }
    }
  else
    {
      v->final = false;
      v->gone_since = 0;
    }
  if (v->final && !was_final)
    {
      cleanup_free char *line = cell_status_line (&v->result);
      ib_info ("%s", line);
    }
  else if (was_final && !v->final)
    ib_info ("matrix %zu/%zu: %s: requeued", i + 1, n, label);
}

int
slurm_follow (const char *dir, bool fail_fast, ib_error_t *err)
{
  __attribute__ ((cleanup (job_clear))) job_t job;
  if (job_read (dir, &job, err) < 0)
    return -1;
  const char *array = job.array, *seed_id = job.seed;
  json_t *labels = job.labels;
  size_t n = job.n;
  cell_view_t *views = xmalloc (n * sizeof *views);
  queue_entry_t *q = xmalloc (n * sizeof *q);
  queue_entry_t qs = { 0 };
  struct sigaction sa = { .sa_handler = on_signal }, old_int, old_term;
  sigemptyset (&sa.sa_mask);
  sigaction (SIGINT, &sa, &old_int);
  sigaction (SIGTERM, &sa, &old_term);
  interrupted = 0;
  int ret = 0, queue_failures = 0;
  bool seed_said = false, cancelled = false;
  /* the cells that had failed when --fail-fast cancelled the job: one that
   * fails after it (killed mid-step, exit 143) was cancelled, not failed */
  bool *failed_first = xmalloc (n * sizeof *failed_first);
  memset (failed_first, 0, n * sizeof *failed_first);
  double poll = 1.0;
  const char *env_poll = getenv ("IMGBUILD_SLURM_POLL");
  if (env_poll && atof (env_poll) > 0)
    poll = atof (env_poll);
  for (;;)
    {
      ib_error_t qe = NULL;
      bool queue_ok = queue_read (array, seed_id, n, q, &qs, &qe) == 0;
      if (!queue_ok)
        {
          if (++queue_failures >= 30)
            {
              *err = qe;
              ib_error_prefix (err, "follow Slurm job %s", array);
              ret = -1;
              break;
            }
          ib_debug ("%s", qe->msg);
          ib_error_free (&qe);
        }
      else
        queue_failures = 0;
      if (seed_id && !seed_said && queue_ok && !active_state (qs.state))
        {
          seed_said = true;
          cleanup_free char *sp = xasprintf ("%s/cells/seed.json", dir);
          matrix_cell_t sc = { 0 };
          if (cell_read (sp, &sc, NULL) == 0)
            ib_info ("seed job %s (the steps every cell shares): %s in %.1f s on %s", seed_id,
                     sc.state, sc.seconds, sc.node ? sc.node : "?");
          else
            ib_info ("seed job %s: %s, no result (log: %s/logs/seed.out); the cells go on",
                     seed_id, qs.state ? qs.state : "gone", dir);
          cell_clear (&sc);
        }
      size_t done = 0;
      bool failed = false;
      for (size_t i = 0; i < n; i++)
        {
          cell_round (dir, i, n, json_string_value (json_array_get (labels, i)), &q[i], queue_ok,
                      &views[i]);
          done += views[i].final;
          failed |= views[i].final && views[i].result.state
                    && strcmp (views[i].result.state, "FAILED") == 0;
        }
      if (done == n)
        break;
      if (interrupted || (fail_fast && failed && !cancelled))
        {
          ib_warn ("%s: cancelling Slurm job %s", interrupted ? "interrupted" : "--fail-fast",
                   array);
          scancel (seed_id, array);
          cancelled = true;
          for (size_t i = 0; i < n; i++)
            failed_first[i] = views[i].final && views[i].result.state
                              && strcmp (views[i].result.state, "FAILED") == 0;
          if (interrupted)
            {
              ret = ib_error_set (err, EINTR, "interrupted: Slurm job %s cancelled", array);
              break;
            }
        }
      struct timespec ts = { (time_t) poll, (long) ((poll - (time_t) poll) * 1e9) };
      nanosleep (&ts, NULL); /* a signal ends it early */
    }
  sigaction (SIGINT, &old_int, NULL);
  sigaction (SIGTERM, &old_term, NULL);
  matrix_cell_t *cells = xmalloc (n * sizeof *cells);
  size_t bad = 0;
  for (size_t i = 0; i < n; i++)
    {
      cells[i] = views[i].result;
      if (cells[i].state == NULL)
        {
          cells[i].state = xstrdup ("not built");
          cells[i].why = xstrdup (cancelled ? "cancelled" : "unknown");
          cells[i].seconds = -1;
        }
      else if (cancelled && !interrupted && !failed_first[i]
               && strcmp (cells[i].state, "FAILED") == 0)
        {
          ib_debug ("matrix %zu/%zu: failed after the job was cancelled: %s", i + 1, n,
                    cells[i].why ? cells[i].why : "?");
          free (cells[i].state);
          free (cells[i].why);
          cells[i].state = xstrdup ("not built");
          cells[i].why = xstrdup ("CANCELLED by Slurm");
          cells[i].seconds = -1;
        }
      if (cells[i].label == NULL)
        cells[i].label = xstrdup (json_string_value (json_array_get (labels, i)));
      cells[i].index = i;
      cells[i].n = n;
      bad += strcmp (cells[i].state, "ok") != 0;
    }
  cells_print_summary (stdout, cells, n);
  for (size_t i = 0; i < n; i++)
    {
      cell_clear (&cells[i]);
      free (views[i].started_node);
      queue_entry_clear (&q[i]);
    }
  queue_entry_clear (&qs);
  free (cells);
  free (views);
  free (failed_first);
  free (q);
  if (ret == 0 && bad)
    ret = ib_error_set (err, EIO, "matrix: %zu of %zu combinations not built (Slurm job %s)",
                        bad, n, array);
  return ret;
}

/* ------------------------------------------------------------------ */
/* the task's side */

char *
slurm_cell_cache_spec (const char *spec, const char *cell)
{
  /* the value of ref= (type=registry) or dest= (type=local) gets "-CELL":
   * after the tag (":TAG-CELL"; ":CELL" without one), after the path */
  const char *keys[] = { "ref=", "dest=" };
  for (size_t k = 0; k < 2; k++)
    {
      const char *v = NULL;
      for (const char *p = spec; p; p = strchr (p, ','))
        {
          p += *p == ',';
          if (ib_str_has_prefix (p, keys[k]))
            {
              v = p + strlen (keys[k]);
              break;
            }
        }
      if (v == NULL)
        continue;
      size_t len = strcspn (v, ",");
      const char *slash = memrchr (v, '/', len);
      const char *colon = memrchr (v, ':', len);
      bool tagged = k == 1 || (colon && (slash == NULL || colon > slash));
      return xasprintf ("%.*s%s%s%s", (int) (v - spec + len), spec, tagged ? "-" : ":", cell,
                        v + len);
    }
  return NULL;
}

char *
slurm_task_store (const slurm_opts_t *so, const char *store_opt)
{
  const char *pattern = so->store ? so->store : store_opt;
  cleanup_free char *dflt = NULL;
  if (pattern == NULL)
    {
      const char *tmp = getenv ("SLURM_TMPDIR");
      if (tmp == NULL || *tmp != '/')
        tmp = getenv ("TMPDIR");
      if (tmp == NULL || *tmp != '/')
        tmp = "/tmp";
      pattern = dflt = xasprintf ("%s/imgbuild-%%u-%%n", tmp);
    }
  ib_buf_t b = { 0 };
  ib_buf_puts (&b, "");
  for (const char *p = pattern; *p; p++)
    {
      if (*p != '%' || p[1] == '\0')
        {
          ib_buf_printf (&b, "%c", *p);
          continue;
        }
      const char *v = NULL;
      char uid[32];
      switch (*++p)
        {
        case 'n': v = getenv ("SLURMD_NODENAME"); break;
        case 'j': v = getenv ("SLURM_ARRAY_JOB_ID") ? getenv ("SLURM_ARRAY_JOB_ID")
                                                     : getenv ("SLURM_JOB_ID"); break;
        case 'a': v = getenv ("SLURM_ARRAY_TASK_ID"); break;
        case 'u':
          {
            struct passwd *pw = getpwuid (getuid ());
            snprintf (uid, sizeof uid, "%u", (unsigned) getuid ());
            v = pw ? pw->pw_name : uid;
            break;
          }
        case '%': v = "%"; break;
        default: ib_buf_printf (&b, "%%%c", *p); continue;
        }
      ib_buf_puts (&b, v ? v : "unknown");
    }
  return ib_buf_steal (&b);
}

int
slurm_task_run (const slurm_opts_t *so, ib_store_t *store, const ib_build_opts_t *bo,
                const ib_matrix_t *m, ib_error_t *err)
{
  const char *node = getenv ("SLURMD_NODENAME");
  const char *restarts = getenv ("SLURM_RESTART_COUNT");
  int attempt = 1 + (restarts ? atoi (restarts) : 0);
  if (bo->shared_only)
    {
      /* the seed: the build cmd_build set up, timed, its outcome in seed.json */
      struct timespec t0, t1;
      clock_gettime (CLOCK_MONOTONIC, &t0);
      int r = ib_build (store, bo, err);
      clock_gettime (CLOCK_MONOTONIC, &t1);
      matrix_cell_t c = { .label = xstrdup ("seed"), .n = 1,
                          .state = xstrdup (r == 0 ? "ok" : "FAILED"),
                          .seconds = (double) (t1.tv_sec - t0.tv_sec)
                                     + (t1.tv_nsec - t0.tv_nsec) / 1e9,
                          .node = node ? xstrdup (node) : NULL, .attempt = attempt };
      if (r < 0)
        c.why = ib_str_printable ((*err)->msg, true);
      cleanup_free char *path = xasprintf ("%s/cells/seed.json", so->task_dir);
      ib_error_t we = NULL;
      if (cell_write (path, &c, &we) < 0)
        {
          ib_warn ("%s", we->msg);
          ib_error_free (&we);
        }
      cell_clear (&c);
      return r;
    }
  const char *task = getenv ("SLURM_ARRAY_TASK_ID");
  char *end = NULL;
  unsigned long i = task ? strtoul (task, &end, 10) : 0;
  size_t n = ib_matrix_count (m);
  if (task == NULL || *end || i >= n)
    return ib_error_set (err, EINVAL, "--slurm-task %s: SLURM_ARRAY_TASK_ID is %s, not 0 to %zu",
                         so->task_dir, task ? task : "unset", n - 1);
  cleanup_free char *spath = xasprintf ("%s/cells/%lu.start", so->task_dir, i);
  cleanup_free char *rpath = xasprintf ("%s/cells/%lu.json", so->task_dir, i);
  unlink (rpath); /* an earlier attempt's */
  json_t *start = json_pack ("{s:s?, s:i, s:I}", "node", node, "attempt", attempt, "time",
                             (json_int_t) time (NULL));
  cleanup_free char *st = json_dumps (start, JSON_COMPACT);
  json_decref (start);
  if (ib_write_file_atomic (spath, st, strlen (st), 0644, err) < 0)
    return -1;
  ib_info ("==> matrix %lu/%zu on %s, attempt %d, store %s", i + 1, n, node ? node : "?",
           attempt, store->root);
  matrix_cell_t c = { 0 };
  int r = matrix_build_cell (store, bo, m, i, &c, err);
  c.node = node ? xstrdup (node) : NULL;
  c.attempt = attempt;
  if (m->n_axes == 0)
    {
      free (c.label);
      c.label = xstrdup ("(one build)");
    }
  ib_error_t we = NULL;
  if (cell_write (rpath, &c, &we) < 0)
    {
      if (r == 0)
        *err = we;
      else
        {
          ib_warn ("%s", we->msg);
          ib_error_free (&we);
        }
      r = -1;
    }
  cell_clear (&c);
  return r;
}

/* ------------------------------------------------------------------ */
/* imgbuild matrix status JOBID */

int
cmd_matrix (int argc, char **argv, ib_error_t *err)
{
  enum
  {
    OPT_SLURM_DIR = 0x3e0,
    OPT_FOLLOW,
  };
  static const struct option opts[] = {
    { "slurm-dir", required_argument, NULL, OPT_SLURM_DIR },
    { "follow", no_argument, NULL, OPT_FOLLOW },
    REGISTRY_OPTIONS,
    GLOBAL_OPTIONS,
    { NULL, 0, NULL, 0 },
  };
  const char *sdir = NULL;
  bool follow = false;
  int c;
  optind = 0;
  while ((c = getopt_long (argc, argv, "q", opts, NULL)) != -1)
    switch (c)
      {
      case OPT_SLURM_DIR: sdir = optarg; break;
      case OPT_FOLLOW: follow = true; break;
      default:
        if (!registry_option (c, optarg) && !global_option (c, optarg, "matrix"))
          exit (2);
      }
  if (optind >= argc || strcmp (argv[optind], "status") != 0)
    usage_error ("matrix: expected 'status JOBID', got '%s'",
                 optind < argc ? argv[optind] : "nothing");
  if (optind + 2 != argc)
    usage_error ("%s", "matrix status: expected one JOBID");
  const char *id = argv[optind + 1];
  if (*id == '\0' || strspn (id, "0123456789") != strlen (id))
    usage_error ("matrix status: a job id is a number, got '%s'", id);
  cleanup_free char *base = sdir ? xstrdup (sdir) : default_slurm_dir ();
  cleanup_free char *link = ib_path_join (base, id);
  cleanup_free char *dir = realpath (link, NULL);
  if (dir == NULL)
    return ib_error_set (err, ENOENT, "matrix status: no job %s in %s (the --slurm-dir it was "
                         "submitted with)", id, base);
  if (follow)
    return slurm_follow (dir, false, err);
  /* once: the table as it stands; cells not ended say what Slurm says */
  __attribute__ ((cleanup (job_clear))) job_t job;
  if (job_read (dir, &job, err) < 0)
    return -1;
  const char *array = job.array, *seed_id = job.seed;
  json_t *labels = job.labels;
  size_t n = job.n;
  queue_entry_t *q = xmalloc (n * sizeof *q), qs = { 0 };
  ib_error_t qe = NULL;
  bool queue_ok = queue_read (array, seed_id, n, q, &qs, &qe) == 0;
  if (!queue_ok)
    {
      ib_warn ("%s", qe->msg);
      ib_error_free (&qe);
    }
  matrix_cell_t *cells = xmalloc (n * sizeof *cells);
  for (size_t i = 0; i < n; i++)
    {
      cleanup_free char *rpath = xasprintf ("%s/cells/%zu.json", dir, i);
      bool active = queue_ok && active_state (q[i].state);
      if (active || cell_read (rpath, &cells[i], NULL) < 0)
        {
          cell_clear (&cells[i]);
          cleanup_free char *spath = xasprintf ("%s/cells/%zu.start", dir, i);
          read_start (spath, &cells[i].node, &cells[i].attempt);
          cells[i].state = xstrdup ("not built");
          cells[i].why = xasprintf ("%s%s%s", q[i].state ? q[i].state : "no result yet",
                                    q[i].node ? " on " : "", q[i].node ? q[i].node : "");
          cells[i].seconds = -1;
        }
      free (cells[i].label);
      cells[i].label = xstrdup (json_string_value (json_array_get (labels, i)));
      cells[i].index = i;
      cells[i].n = n;
    }
  printf ("Slurm job %s%s%s, job directory %s\n", array, seed_id ? ", seed job " : "",
          seed_id ? seed_id : "", dir);
  cells_print_summary (stdout, cells, n);
  for (size_t i = 0; i < n; i++)
    {
      cell_clear (&cells[i]);
      queue_entry_clear (&q[i]);
    }
  queue_entry_clear (&qs);
  free (cells);
  free (q);
  return 0;
}
