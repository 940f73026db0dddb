/* builder/engine/platforms.c — a build for several platforms (--platform
 * linux/amd64,linux/arm64), as buildx's: the recipe is built once per
 * platform (build_one; TARGETPLATFORM & co. are that platform's, and a
 * foreign platform's RUN goes through binfmt_misc), with -j several
 * platforms at once, each in a process of its own.  An image output
 * (type=image, registry, oci) waits until every platform is built and is
 * then made once, from an OCI image index (image-index.md) listing each
 * platform's image in the order given; type=local writes each platform's
 * tree under DEST/OS_ARCH[_VARIANT]; type=docker and type=tar, which hold
 * one image or tree, are refused before anything runs.
 *
 * Reading order: parse_platforms (the list, normalized), run_part (one
 * platform's build, in this process) and its process wrapper (fork_part,
 * reap_part: the part's outcome travels as JSON through a file in the
 * store's tmp/), then build_platforms: the parts, the indexes, the
 * outputs, the result.
 */
#include "builder/engine/engine.h"
#include "oci/manifest.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct part
{
  char *text;                /* as given ("linux/arm64") */
  char *os, *arch, *variant; /* normalized (ib_platform_parse) */
  char *label;               /* "linux/arm64[/v8]": the step labels' lead */
  char *dir;                 /* "linux_arm64[_v8]": type=local's subdirectory */
  json_t *deferred;          /* the image outputs its build left (build_t.deferred) */
  ib_build_result_t result;  /* its target stage's image, the wheels it wrote */
  ib_error_t error;          /* why it failed */
  pid_t pid;                 /* its process (-j), 0 when none */
  char *out_path;            /* the JSON its process writes */
} part_t;

static void
parts_free (part_t *p, size_t n)
{
  for (size_t i = 0; i < n; i++)
    {
      free (p[i].text);
      free (p[i].os);
      free (p[i].arch);
      free (p[i].variant);
      free (p[i].label);
      free (p[i].dir);
      json_decref (p[i].deferred);
      ib_build_result_clear (&p[i].result);
      ib_error_free (&p[i].error);
      if (p[i].out_path)
        unlink (p[i].out_path);
      free (p[i].out_path);
    }
  free (p);
}

/* "A,B,...": each OS/ARCH[/VARIANT], none twice. */
static int
parse_platforms (const char *list, part_t **out, size_t *n_out, ib_error_t *err)
{
  part_t *p = NULL;
  size_t n = 0;
  cleanup_free char *copy = xstrdup (list);
  char *save = NULL;
  for (char *one = strtok_r (copy, ",", &save); one; one = strtok_r (NULL, ",", &save))
    {
      while (*one == ' ')
        one++;
      p = xrealloc (p, (n + 1) * sizeof *p);
      part_t *q = &p[n++];
      memset (q, 0, sizeof *q);
      q->text = xstrdup (one);
      if (ib_platform_parse (one, &q->os, &q->arch, &q->variant, err) < 0)
        goto fail;
      q->label = ib_platform_string (q->os, q->arch, q->variant);
      q->dir = xstrdup (q->label);
      for (char *c = q->dir; *c; c++)
        if (*c == '/')
          *c = '_';
      for (size_t k = 0; k + 1 < n; k++)
        if (strcmp (p[k].label, q->label) == 0)
          {
            ib_error_set (err, EINVAL, "--platform %s: %s is given twice", list, q->label);
            goto fail;
          }
      q->deferred = json_array ();
    }
  if (n < 2)
    {
      ib_error_set (err, EINVAL, "--platform %s: expected OS/ARCH[/VARIANT],...", list);
      goto fail;
    }
  *out = p;
  *n_out = n;
  return 0;
fail:
  parts_free (p, n);
  return -1;
}

/* The build of part `q`, in this process, with `jobs` stage jobs. */
static int
run_part (ib_store_t *store, const ib_build_opts_t *opts, part_t *q, int jobs, ib_error_t *err)
{
  ib_build_opts_t o = *opts;
  o.platform = q->text;
  o.jobs = jobs;
  o.result = &q->result;
  platform_part_t pp = { .label = q->label, .dir = q->dir, .deferred = q->deferred };
  if (build_one (store, &o, &pp, err) < 0)
    return ib_error_prefix (err, "%s", q->label);
  return 0;
}

/* The part's outcome as its process writes it. */
static json_t *
part_json (const part_t *q, ib_error_t e)
{
  if (e)
    return json_pack ("{s:b, s:i, s:s}", "ok", 0, "status", e->status, "msg", e->msg);
  json_t *names = json_array ();
  for (char **n = q->result.names; n && *n; n++)
    json_array_append_new (names, json_string (*n));
  return json_pack ("{s:b, s:O, s:{s:s, s:I, s:s, s:o, s:O}}", "ok", 1, "deferred", q->deferred,
                    "result", "manifest", q->result.manifest_digest, "size",
                    (json_int_t) q->result.manifest_size, "config", q->result.config_digest,
                    "names", names, "wheels",
                    q->result.wheels ? q->result.wheels : json_array ());
}

/* Start part `q`'s build in a process of its own. */
static int
fork_part (ib_store_t *store, const ib_build_opts_t *opts, part_t *q, int jobs, bool plain,
           ib_error_t *err)
{
  int fd = ib_store_tmp_file (store, "platform", &q->out_path, err);
  if (fd < 0)
    return -1;
  fflush (NULL);
  pid_t pid = fork ();
  if (pid < 0)
    {
      close (fd);
      return ib_error_sys (err, errno, "fork");
    }
  if (pid == 0)
    {
      /* several displays cannot share one terminal */
      if (plain)
        ib_progress_set_mode (IB_PROGRESS_PLAIN);
      ib_error_t e = NULL;
      int r = ib_store_after_fork (store, &e) < 0 ? -1 : run_part (store, opts, q, jobs, &e);
      json_t *j = part_json (q, e);
      int w = json_dumpfd (j, fd, JSON_COMPACT);
      json_decref (j);
      fflush (NULL);
      _exit (r == 0 && w == 0 && fsync (fd) == 0 ? 0 : 1);
    }
  close (fd);
  q->pid = pid;
  return 0;
}

/* Read what part `q`'s process left (it has exited with `status`). */
static void
reap_part (part_t *q, int status)
{
  q->pid = 0;
  json_error_t je;
  json_t *j = json_load_file (q->out_path, 0, &je);
  if (j == NULL || !json_is_true (json_object_get (j, "ok")))
    {
      const char *msg = json_string_value (json_object_get (j, "msg"));
      if (msg)
        ib_error_set (&q->error, (int) json_integer_value (json_object_get (j, "status")), "%s",
                      msg);
      else if (WIFSIGNALED (status))
        ib_error_set (&q->error, EINTR, "%s: the build's process was killed by signal %d",
                      q->label, WTERMSIG (status));
      else
        ib_error_set (&q->error, EIO, "%s: the build's process exited with status %d and no "
                      "outcome", q->label, WEXITSTATUS (status));
      json_decref (j);
      return;
    }
  json_decref (q->deferred);
  q->deferred = json_incref (json_object_get (j, "deferred"));
  json_t *r = json_object_get (j, "result");
  snprintf (q->result.manifest_digest, IB_DIGEST_LEN, "%s",
            json_string_value (json_object_get (r, "manifest")));
  q->result.manifest_size = json_integer_value (json_object_get (r, "size"));
  snprintf (q->result.config_digest, IB_DIGEST_LEN, "%s",
            json_string_value (json_object_get (r, "config")));
  size_t i;
  json_t *v;
  json_array_foreach (json_object_get (r, "names"), i, v)
    ib_strv_push (&q->result.names, json_string_value (v));
  q->result.wheels = json_incref (json_object_get (r, "wheels"));
  json_decref (j);
}

/* Run every part: one after the other, or -j N at most N at once (each
 * with N / at-once stage jobs). */
static int
run_parts (ib_store_t *store, const ib_build_opts_t *opts, part_t *p, size_t n, ib_error_t *err)
{
  if (opts->jobs <= 1)
    {
      for (size_t i = 0; i < n; i++)
        if (run_part (store, opts, &p[i], opts->jobs, err) < 0)
          return -1;
      return 0;
    }
  size_t at_once = (size_t) opts->jobs < n ? (size_t) opts->jobs : n;
  int jobs = opts->jobs / (int) at_once;
  bool plain = ib_progress_resolved_mode () == IB_PROGRESS_TTY;
  size_t next = 0, running = 0, done = 0;
  int ret = 0;
  while (done < n)
    {
      while (ret == 0 && running < at_once && next < n)
        {
          if (fork_part (store, opts, &p[next], jobs, plain, err) < 0)
            {
              ret = -1;
              break;
            }
          next++;
          running++;
        }
      if (running == 0)
        break;
      int status;
      pid_t pid = waitpid (-1, &status, 0);
      if (pid < 0 && errno == EINTR)
        continue;
      if (pid < 0)
        {
          ret = ib_error_sys (err, errno, "wait for the platforms' builds");
          break;
        }
      for (size_t i = 0; i < n; i++)
        if (p[i].pid == pid)
          {
            reap_part (&p[i], status);
            running--;
            done++;
            if (p[i].error)
              next = n; /* start no more */
          }
    }
  for (size_t i = 0; i < n; i++)
    if (ret == 0 && p[i].error)
      {
        ib_error_propagate (err, &p[i].error);
        ret = -1;
      }
  return ret;
}

/* The index of entry `k` of every part (k == SIZE_MAX: their target
 * images), stored; its digest and size. */
static int
store_index (ib_store_t *store, part_t *p, size_t n, size_t k, char digest[IB_DIGEST_LEN],
             int64_t *size, ib_error_t *err)
{
  ib_descriptor_t *d = xmalloc (n * sizeof *d);
  memset (d, 0, n * sizeof *d);
  for (size_t i = 0; i < n; i++)
    {
      json_t *rec = k == SIZE_MAX ? NULL : json_array_get (p[i].deferred, k);
      snprintf (d[i].digest, IB_DIGEST_LEN, "%s",
                rec ? json_string_value (json_object_get (rec, "manifest"))
                    : p[i].result.manifest_digest);
      d[i].size = rec ? json_integer_value (json_object_get (rec, "size"))
                      : p[i].result.manifest_size;
      d[i].os = p[i].os;
      d[i].arch = p[i].arch;
      d[i].variant = p[i].variant;
    }
  cleanup_free char *idx = ib_index_serialize (d, n);
  free (d);
  *size = (int64_t) strlen (idx);
  return ib_store_put_blob (store, idx, strlen (idx), digest, err);
}

int
build_platforms (ib_store_t *store, const ib_build_opts_t *opts, ib_error_t *err)
{
  part_t *p = NULL;
  size_t n = 0;
  if (parse_platforms (opts->platform, &p, &n, err) < 0)
    return -1;
  int ret = -1;
  cleanup_strv char **names = NULL;
  if (run_parts (store, opts, p, n, err) < 0)
    goto out;
  if (opts->shared_only)
    {
      ret = 0;
      goto out;
    }
  /* the same recipe: the same outputs, in the same order */
  size_t n_out = json_array_size (p[0].deferred);
  for (size_t i = 1; i < n; i++)
    {
      bool same = json_array_size (p[i].deferred) == n_out;
      for (size_t k = 0; same && k < n_out; k++)
        same = json_integer_value (json_object_get (json_array_get (p[i].deferred, k), "line"))
               == json_integer_value (json_object_get (json_array_get (p[0].deferred, k), "line"));
      if (!same)
        {
          ib_error_set (err, EINVAL, "%s and %s made different image outputs (OUTPUT or FROM "
                        "chosen by platform): build them one at a time", p[0].label, p[i].label);
          goto out;
        }
    }
  for (size_t k = 0; k < n_out; k++)
    {
      char digest[IB_DIGEST_LEN];
      int64_t size;
      if (store_index (store, p, n, k, digest, &size, err) < 0
          || index_output (store, json_array_get (p[0].deferred, k), digest, size, &names, err)
                 < 0)
        goto out;
    }
  char digest[IB_DIGEST_LEN];
  int64_t size;
  if (store_index (store, p, n, SIZE_MAX, digest, &size, err) < 0)
    goto out;
  if (opts->result)
    {
      ib_build_result_t *r = opts->result;
      /* buildx: a multi-platform build's image ID is its index's digest */
      snprintf (r->manifest_digest, IB_DIGEST_LEN, "%s", digest);
      r->manifest_size = size;
      snprintf (r->config_digest, IB_DIGEST_LEN, "%s", digest);
      for (char **nm = names; nm && *nm; nm++)
        ib_strv_push (&r->names, *nm);
      r->wheels = json_array ();
      for (size_t i = 0; i < n; i++)
        json_array_extend (r->wheels, p[i].result.wheels);
    }
  ib_info ("build %s: done for %zu platforms, index %s", opts->recipe_path, n, digest);
  ret = 0;
out:
  parts_free (p, n);
  return ret;
}
