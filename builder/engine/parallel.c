/* builder/engine/parallel.c — -j N: independent stages in processes of their
 * own, a base two stages share pulled once, results and progress relayed to
 * the parent. */
#include "builder/engine/engine.h"
#include "rootfs/overlay.h"
#include "rootfs/prepare.h"

#include <errno.h>
#include <string.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/wait.h>

/* The child that builds stage `st`: its result goes to `wfd` as one JSON
 * object, then it exits without cleaning up (the parent owns the stage's
 * tree).  Trees of other stages that it must make (a COPY --from of a
 * stage that came whole from the cache) are made in private directories
 * of its own, removed before it exits.  `evfd` (-1: none): where its
 * progress and log lines go as relay events (common/progress.h) for the
 * parent's TTY display, which the child must not touch. */
static void
stage_child (build_t *b, stage_state_t *st, int wfd, int evfd)
{
  prctl (PR_SET_PDEATHSIG, SIGTERM);
  b->stage_process = true;
  /* the parent's display (ib_progress_fork: abandoned here, never ended) */
  b->prog = NULL;
  b->prog_paused = false;
  bool relay = evfd >= 0 && ib_progress_relay_to (evfd) == 0;
  if (evfd >= 0 && !relay)
    close (evfd); /* no stream: plain lines on stderr, as before */
  char **private = NULL;
  for (size_t i = 0; i < b->n_stages; i++)
    {
      stage_state_t *o = &b->stages[i];
      char *dir = NULL;
      if (o != st && o->built && !o->rootfs_ready
          && ib_store_tmp_dir (b->store, "stage", &dir, NULL) == 0)
        {
          free (o->rootfs);
          o->rootfs = dir;
          ib_strv_push (&private, dir);
        }
    }
  /* JSON: each stage's process emits its own step events (one line per
   * write, ids "[stage i/n] ..." unique across stages).  TTY: the same
   * events go to the parent (relay), whose display shows every stage's
   * steps: one process draws the terminal. */
  if (ib_progress_resolved_mode () == IB_PROGRESS_JSON || relay)
    {
      cleanup_free char *title = xasprintf ("build %s", b->recipe->path);
      b->prog = ib_progress_begin (title);
    }
  size_t h0 = b->hits, m0 = b->misses, k0 = ib_strv_len (b->keys);
  ib_error_t e = NULL;
  /* its own store lock: the stages' processes exclude each other */
  int r = ib_store_after_fork (b->store, &e) < 0 ? -1 : run_stage (b, st, &e);
  if (b->n_jobs > 0)
    {
      /* a failed stage: the steps that ran keep their records */
      ib_error_t je = NULL;
      if (join_layers (b, NULL, &je) < 0)
        {
          ib_warn ("%s", je->msg);
          ib_error_free (&je);
        }
    }
  ib_progress_end (b->prog);
  b->prog = NULL;
  json_t *keys = json_array ();
  for (size_t k = k0; b->keys && b->keys[k]; k++)
    json_array_append_new (keys, json_string (b->keys[k]));
  json_t *o = json_pack ("{s:b, s:s, s:s, s:I, s:s, s:b, s:s?, s:I, s:I, s:o}", "ok", r == 0, "key",
                         st->key, "manifest", st->manifest_digest,
                         "manifest_size", (json_int_t) st->manifest_size, "rootfs",
                         st->rootfs ? st->rootfs : "", "rootfs_ready", st->rootfs_ready, "foreign",
                         st->foreign, "hits", (json_int_t) (b->hits - h0), "misses",
                         (json_int_t) (b->misses - m0), "keys", keys);
  if (st->emitted)
    json_object_set (o, "emitted", st->emitted);
  if (r < 0)
    {
      json_object_set_new (o, "error", json_string (e->msg));
      json_object_set_new (o, "status", json_integer (e->status));
    }
  char *text = json_dumps (o, JSON_COMPACT);
  /* a failed write leaves the parent without a result: it reports that */
  ib_write_all (wfd, text, strlen (text), "result", NULL);
  close (wfd);
  for (char **p = private; p && *p; p++)
    ib_rootfs_remove (*p, NULL); /* temp trees: best effort */
  ib_cache_memo_close (b->memo);
  fflush (NULL);
  _exit (r == 0 ? 0 : 1);
}

/* Take a child's result into the parent's state of the stage. */
static int
stage_result (build_t *b, stage_state_t *st, const char *text, int wstatus, ib_error_t *err)
{
  json_t *o = json_loads (text, 0, NULL);
  if (o == NULL)
    {
      if (WIFSIGNALED (wstatus))
        return ib_error_set (err, EINTR, "stage %s: the process building it was killed (signal %d)",
                             stage_label (st), WTERMSIG (wstatus));
      return ib_error_set (err, EIO, "stage %s: the process building it ended without a result",
                           stage_label (st));
    }
  int ret = -1;
  const char *rootfs = json_string_value (json_object_get (o, "rootfs"));
  if (rootfs && *rootfs)
    {
      free (st->rootfs);
      st->rootfs = xstrdup (rootfs);
    }
  json_t *emitted = json_object_get (o, "emitted");
  if (emitted)
    {
      json_decref (st->emitted);
      st->emitted = json_incref (emitted);
    }
  b->hits += (size_t) json_integer_value (json_object_get (o, "hits"));
  b->misses += (size_t) json_integer_value (json_object_get (o, "misses"));
  size_t i;
  json_t *k;
  json_array_foreach (json_object_get (o, "keys"), i, k)
    ib_strv_push (&b->keys, json_string_value (k));
  if (!json_is_true (json_object_get (o, "ok")))
    {
      const char *msg = json_string_value (json_object_get (o, "error"));
      ib_error_set (err, (int) json_integer_value (json_object_get (o, "status")), "%s",
                    msg ? msg : "failed");
      goto out;
    }
  snprintf (st->key, IB_DIGEST_LEN, "%s", json_string_value (json_object_get (o, "key")));
  snprintf (st->manifest_digest, IB_DIGEST_LEN, "%s",
            json_string_value (json_object_get (o, "manifest")));
  st->manifest_size = json_integer_value (json_object_get (o, "manifest_size"));
  st->rootfs_ready = json_is_true (json_object_get (o, "rootfs_ready"));
  const char *foreign = json_string_value (json_object_get (o, "foreign"));
  free (st->foreign);
  st->foreign = foreign ? xstrdup (foreign) : NULL;
  ib_descriptor_t desc = { 0 };
  ib_manifest_t *m = NULL;
  json_t *config = NULL;
  if (ib_store_load_image (b->store, st->manifest_digest, &desc, &m, &config, err) < 0)
    goto out;
  json_decref (st->config);
  st->config = config;
  for (size_t l = 0; l < st->n_layers; l++)
    free (st->layers[l].media_type);
  free (st->layers);
  st->layers = xmalloc ((m->n_layers + 1) * sizeof (ib_descriptor_t));
  for (size_t l = 0; l < m->n_layers; l++)
    {
      st->layers[l] = m->layers[l];
      st->layers[l].media_type = xstrdup (m->layers[l].media_type);
      st->layers[l].os = st->layers[l].arch = st->layers[l].variant = NULL;
    }
  st->n_layers = m->n_layers;
  ib_manifest_free (m);
  ib_descriptor_clear (&desc);
  st->built = true;
  ret = 0;
out:
  json_decref (o);
  return ret;
}

/* A child's relay events, as much as the pipe has now (nonblocking);
 * at end of file the pipe is closed and *fd set to -1. */
static void
relay_read (ib_progress_relay_t *r, int *fd)
{
  char buf[4096];
  for (;;)
    {
      ssize_t n = read (*fd, buf, sizeof buf);
      if (n > 0)
        {
          ib_progress_relay_feed (r, buf, (size_t) n);
          continue;
        }
      if (n < 0 && errno == EINTR)
        continue;
      if (n == 0 || errno != EAGAIN)
        {
          close (*fd);
          *fd = -1;
        }
      return;
    }
}

/* -j: an image that two or more of the stages to build start FROM (the
 * same name and platform) and that the store does not hold is pulled here,
 * once, before the stages' processes start; each would download it by
 * itself.  The pull records its snapshot, from which the stages make their
 * trees.  An image only one stage uses is left to that stage, whose pull
 * unpacks while it downloads. */
static int
pull_shared_bases (build_t *b, ib_error_t *err)
{
  cleanup_strv char **seen = NULL, **done = NULL;
  for (size_t i = 0; i < b->n_stages; i++)
    {
      stage_state_t *st = &b->stages[i];
      if (!st->needed)
        continue;
      cleanup_free char *image = NULL, *want = NULL, *os = NULL, *arch = NULL, *variant = NULL;
      if (from_target (b, &st->def->instrs[0], &image, &want, &os, &arch, &variant, NULL) < 0)
        {
          /* the stage reports it */
          continue;
        }
      int idx = stage_index_before (b, image, i);
      if ((idx >= 0 && (size_t) idx < i) || strcmp (image, "scratch") == 0)
        continue;
      cleanup_free char *key = xasprintf ("%s\n%s", image, want ? want : "");
      if (!ib_strv_has (seen, key))
        {
          ib_strv_push (&seen, key);
          continue;
        }
      if (ib_strv_has (done, key))
        continue;
      ib_strv_push (&done, key);
      ib_descriptor_t desc = { 0 };
      ib_manifest_t *m = NULL;
      json_t *config = NULL;
      bool stored = ib_store_load_image (b->store, image, &desc, &m, &config, NULL) == 0
                    && config_serves (config, os, arch, variant);
      ib_descriptor_clear (&desc);
      ib_manifest_free (m);
      json_decref (config);
      if (stored)
        continue;
      cleanup_free char *tree = NULL;
      if (ib_store_tmp_dir (b->store, "stage", &tree, err) < 0)
        return -1;
      rmdir (tree); /* ib_rootfs_pull creates it */
      prog_pause (b); /* the pull shows its own display */
      int r = ib_rootfs_pull (b->store, image, want ? os : NULL, want ? arch : NULL,
                              want ? variant : NULL, tree, true, err);
      prog_resume (b);
      ib_error_t e2 = NULL;
      if (ib_rootfs_remove (tree, &e2) < 0)
        {
          ib_warn ("%s", e2->msg);
          ib_error_free (&e2);
        }
      if (r < 0)
        return -1;
    }
  return 0;
}

/* Build the needed stages, up to `jobs` at once, each in a child process
 * (forked after the user namespace is entered), a stage starting once the
 * stages it reads are built.  The first failure stops the others (SIGTERM)
 * and is the build's error.  TTY: this process owns the terminal; each
 * child sends its step events through a second pipe (relay) and they are
 * shown in this process's display, read while the children run. */
int
run_stages_parallel (build_t *b, size_t jobs, ib_error_t *err)
{
  if (need_userns (b, err) < 0)
    return -1;
  if (b->prog == NULL && ib_progress_resolved_mode () == IB_PROGRESS_TTY)
    {
      cleanup_free char *title = xasprintf ("build %s", b->recipe->path);
      b->prog = ib_progress_begin (title);
    }
  if (pull_shared_bases (b, err) < 0)
    return -1;
  size_t n = b->n_stages;
  pid_t *pid = xmalloc (n * sizeof (pid_t));
  int *fd = xmalloc (n * sizeof (int));
  int *evfd = xmalloc (n * sizeof (int));
  ib_progress_relay_t **relay = xmalloc (n * sizeof *relay);
  ib_buf_t *out = xmalloc (n * sizeof (ib_buf_t));
  bool *started = xmalloc (n * sizeof (bool));
  bool *stopped = xmalloc (n * sizeof (bool));
  for (size_t i = 0; i < n; i++)
    {
      evfd[i] = -1;
      relay[i] = NULL;
    }
  size_t running = 0;
  ib_error_t first = NULL;
  for (;;)
    {
      for (size_t i = 0; i < n && running < jobs && first == NULL; i++)
        {
          stage_state_t *st = &b->stages[i];
          if (!st->needed || started[i])
            continue;
          bool ready = true;
          for (size_t d = 0; d < st->n_deps; d++)
            ready = ready && b->stages[st->deps[d]].built;
          if (!ready)
            continue;
          int p[2], ev[2] = { -1, -1 };
          if (pipe2 (p, O_CLOEXEC) < 0)
            {
              ib_error_sys (&first, errno, "pipe");
              break;
            }
          if (b->prog && pipe2 (ev, O_CLOEXEC) < 0)
            {
              ib_error_sys (&first, errno, "pipe");
              close (p[0]);
              close (p[1]);
              break;
            }
          fflush (NULL);
          pid_t c = ib_progress_fork (b->prog);
          if (c < 0)
            {
              ib_error_sys (&first, errno, "fork");
              close (p[0]);
              close (p[1]);
              if (ev[0] >= 0)
                {
                  close (ev[0]);
                  close (ev[1]);
                }
              break;
            }
          if (c == 0)
            {
              close (p[0]);
              if (ev[0] >= 0)
                close (ev[0]);
              stage_child (b, st, p[1], ev[1]);
            }
          close (p[1]);
          if (ev[0] >= 0)
            {
              close (ev[1]);
              fcntl (ev[0], F_SETFL, fcntl (ev[0], F_GETFL) | O_NONBLOCK);
              cleanup_free char *prefix = st->def->name ? xasprintf ("[%s] ", st->def->name)
                                                        : xasprintf ("[stage-%d] ", st->def->index);
              relay[i] = ib_progress_relay_new (b->prog, prefix);
            }
          started[i] = true;
          pid[i] = c;
          fd[i] = p[0];
          evfd[i] = ev[0];
          running++;
        }
      if (running == 0)
        break;
      struct pollfd *pf = xmalloc (2 * running * sizeof (struct pollfd));
      size_t *who = xmalloc (2 * running * sizeof (size_t));
      size_t np = 0;
      for (size_t i = 0; i < n; i++)
        if (started[i] && fd[i] >= 0 && !b->stages[i].built && pid[i] > 0)
          {
            pf[np] = (struct pollfd){ .fd = fd[i], .events = POLLIN };
            who[np++] = i;
            if (evfd[i] >= 0)
              {
                pf[np] = (struct pollfd){ .fd = evfd[i], .events = POLLIN };
                who[np++] = i;
              }
          }
      if (poll (pf, np, -1) < 0 && errno != EINTR)
        {
          ib_error_sys (&first, errno, "poll");
          np = 0;
        }
      for (size_t k = 0; k < np; k++)
        {
          if (!(pf[k].revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
          size_t i = who[k];
          if (pf[k].fd == evfd[i])
            {
              relay_read (relay[i], &evfd[i]);
              continue;
            }
          if (pf[k].fd != fd[i])
            continue; /* closed above in this round */
          char buf[4096];
          ssize_t r = read (fd[i], buf, sizeof buf);
          if (r < 0 && errno == EINTR)
            continue;
          if (r > 0)
            {
              ib_buf_append (&out[i], buf, (size_t) r);
              continue;
            }
          /* the child is done */
          close (fd[i]);
          fd[i] = -1;
          int ws = 0;
          while (waitpid (pid[i], &ws, 0) < 0 && errno == EINTR)
            ;
          pid[i] = 0;
          running--;
          /* what it showed before it ended comes first */
          if (evfd[i] >= 0)
            relay_read (relay[i], &evfd[i]);
          if (evfd[i] >= 0)
            {
              close (evfd[i]);
              evfd[i] = -1;
            }
          ib_progress_relay_end (relay[i], stopped[i] ? "CANCELED" : NULL);
          relay[i] = NULL;
          ib_buf_append (&out[i], "", 1);
          ib_error_t e = NULL;
          if (stage_result (b, &b->stages[i], out[i].data, ws, &e) < 0)
            {
              if (first == NULL)
                {
                  first = e;
                  for (size_t j = 0; j < n; j++) /* stop the others */
                    if (started[j] && pid[j] > 0)
                      {
                        kill (pid[j], SIGTERM);
                        stopped[j] = true;
                      }
                }
              else
                ib_error_free (&e);
            }
        }
      free (pf);
      free (who);
    }
  for (size_t i = 0; i < n; i++)
    {
      ib_buf_free (&out[i]);
      if (evfd[i] >= 0)
        close (evfd[i]);
      ib_progress_relay_end (relay[i], "CANCELED");
    }
  free (pid);
  free (fd);
  free (evfd);
  free (relay);
  free (out);
  free (started);
  free (stopped);
  if (first)
    {
      *err = first;
      return -1;
    }
  return 0;
}
