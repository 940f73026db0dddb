#include "builder/build.h"
#include "builder/addsrc.h"
#include "builder/cache.h"
#include "builder/cache_io.h"
#include "builder/ignore.h"
#include "builder/fsops.h"
#include "builder/wheel.h"
#include "builder/mountspec.h"
#include "builder/recipe.h"
#include "common/progress.h"
#include "common/util.h"
#include "oci/digest.h"
#include "oci/manifest.h"
#include "oci/ref.h"
#include "oci/registry.h"
#include "rootfs/gpu.h"
#include "rootfs/layer.h"
#include "rootfs/overlay.h"
#include "rootfs/prepare.h"
#include "rootfs/sandbox.h"
#include "rootfs/treecopy.h"
#include "rootfs/userns.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

char *const ib_layer_exclude[] = { "proc", "sys", "dev", NULL };

#define DEFAULT_PATH "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define TAIL_LINES 20

/* A list of NAME=VALUE variables (ARGs in scope, build args). */
typedef struct vars
{
  char **names;
  char **values; /* NULL value = declared without one */
  size_t n, cap;
  json_t *idx;   /* name -> position: lookups and sets in O(1) (an ARG of 1M
                    names was O(n^2)); never copied, freed by vars_free */
} vars_t;

static const char *
vars_get (const vars_t *v, const char *name, bool *found)
{
  json_t *at = v->idx ? json_object_get (v->idx, name) : NULL;
  if (found)
    *found = at != NULL;
  return at ? v->values[json_integer_value (at)] : NULL;
}

static void
vars_set (vars_t *v, const char *name, const char *value)
{
  json_t *at = v->idx ? json_object_get (v->idx, name) : NULL;
  if (at)
    {
      size_t i = (size_t) json_integer_value (at);
      free (v->values[i]);
      v->values[i] = xstrdup (value);
      return;
    }
  if (v->n == v->cap)
    {
      v->cap = v->cap ? 2 * v->cap : 8;
      v->names = xrealloc (v->names, v->cap * sizeof (char *));
      v->values = xrealloc (v->values, v->cap * sizeof (char *));
    }
  if (v->idx == NULL)
    v->idx = json_object ();
  json_object_set_new_nocheck (v->idx, name, json_integer ((json_int_t) v->n));
  v->names[v->n] = xstrdup (name);
  v->values[v->n] = xstrdup (value);
  v->n++;
}

static bool
vars_declared (const vars_t *v, const char *name)
{
  bool found = false;
  vars_get (v, name, &found);
  return found;
}

static void
vars_free (vars_t *v)
{
  for (size_t i = 0; i < v->n; i++)
    {
      free (v->names[i]);
      free (v->values[i]);
    }
  free (v->names);
  free (v->values);
  json_decref (v->idx);
  memset (v, 0, sizeof *v);
}

typedef struct stage_state
{
  const ib_stage_t *def;
  bool needed, built;
  char *rootfs;              /* host path of the working rootfs */
  json_t *config;            /* image config being built */
  ib_descriptor_t *layers;   /* manifest layers */
  size_t n_layers;
  vars_t args;               /* ARGs declared in this stage */
  char **shell;              /* SHELL, default /bin/sh -c */
  bool cmd_set;              /* CMD seen in this stage: ENTRYPOINT keeps it */
  char manifest_digest[IB_DIGEST_LEN];
  int64_t manifest_size;
  char *foreign;             /* "linux/arm64" when the host cannot run the stage's binaries */
  /* Build cache.  The rootfs is made lazily: while steps hit the cache only
   * config and layers advance; the first step that must run (or an output,
   * or a stage reading this one) makes it from the layers (ensure_rootfs). */
  char key[IB_DIGEST_LEN];   /* cache key of the last step (the stage's identity) */
  bool rootfs_ready;         /* st->rootfs holds the tree of st->layers */
  struct stage_state *copy_src; /* FROM <stage>: its tree may be copied ... */
  size_t copy_n_layers;         /* ... while the stage still has this many layers */
  bool no_cache;             /* --no-cache / --no-cache-filter: never look up */
  size_t step, n_steps;      /* progress: [name step/n_steps] */
  size_t *deps;              /* stages this one reads (FROM, COPY --from, --mount from=) */
  size_t n_deps;
  size_t n_pending;          /* layers of st->layers still compressing (layer_job_t) */
} stage_state_t;

/* A layer compressed in the background (commit_layer): its tar is written
 * and its diff_id known; a child process compresses the tar into the blob
 * while the next steps run.  st->layers[index] has no digest until
 * join_layers takes the result. */
typedef struct layer_job
{
  stage_state_t *st;
  size_t index;
  pid_t pid;
  int fd;                    /* the child's struct job_result */
  char *tar, *blob;          /* temp files in the store */
  char *what;                /* "RECIPE:LINE: KEYWORD" of the step, for messages */
  uint64_t entries;
  struct timespec t0;        /* when the step's layer write began */
} layer_job_t;

/* A cache record of a step whose layers are not all compressed yet:
 * written when they are (join_layers). */
typedef struct pending_record
{
  stage_state_t *st;
  char key[IB_DIGEST_LEN];
  json_t *config;            /* the config after the step (a copy) */
  size_t n_layers;           /* st->layers[0..n_layers) are the step's */
} pending_record_t;

typedef struct build
{
  ib_store_t *store;
  const ib_build_opts_t *opts;
  ib_recipe_t *recipe;
  char *context;
  vars_t build_args;         /* --build-arg */
  vars_t global_args;        /* ARGs before the first FROM, resolved */
  vars_t auto_args;          /* TARGETPLATFORM, BUILDOS, ... (platform_args) */
  bool *build_arg_used;
  stage_state_t *stages;
  size_t n_stages;
  int64_t sde;
  size_t hits, misses;
  char **keys;               /* every step key this build looked up or recorded (--cache-to) */
  ib_userns_mode_t userns;   /* the mode the build runs in (planned, or in force) */
  ib_progress_t *prog;       /* TTY/JSON: the build's display (step items) */
  bool prog_paused;
  int step_item;             /* the display's item of the current step */
  char *step_label;          /* "[build 2/5]" of the current step */
  char *step_text;           /* its display item's text */
  bool step_open;            /* the current step runs (DONE to print) */
  struct timespec step_t0;
  ib_buf_t out_line;         /* a RUN's partial output line (TTY/JSON) */
  ib_cache_memo_t *memo;     /* content digests of context files (opened when first needed) */
  ib_ignore_t *ignore;       /* .dockerignore of the context (empty when none) */
  const ib_instr_t *cur_in;  /* the instruction running (messages of background work) */
  const ib_instr_t *budget_in; /* the instruction instr_expanded counts for */
  size_t instr_expanded;     /* bytes of expanded words of budget_in (IB_EXPAND_INSTR_MAX) */
  size_t build_expanded;     /* bytes of expanded words of the build (IB_EXPAND_BUILD_MAX) */
  bool stage_process;        /* -j: this is a stage's process (stage_child) */
  layer_job_t *jobs;         /* layers compressing in the background, oldest first */
  size_t n_jobs;
  pending_record_t *records; /* cache records waiting for them */
  size_t n_records;
} build_t;

static void prog_pause (build_t *b);
static int join_layers (build_t *b, stage_state_t *only, ib_error_t *err);
static int finish_stage (build_t *b, stage_state_t *st, ib_error_t *err);
static bool is_proxy_arg (const char *name);
static void prog_resume (build_t *b);

/* Enter the user namespace if not done yet: before anything that makes or
 * reads a rootfs, and before network transfers (whose threads would make
 * a later unshare(CLONE_NEWUSER) impossible). */
static int
need_userns (build_t *b, ib_error_t *err)
{
  if (ib_userns_mode () != IB_USERNS_AUTO)
    return 0;
  ib_userns_mode_t got;
  /* the TTY display's ticker thread would make unshare() fail: the
   * display goes for the moment (ending it joins the thread) */
  bool was = b->prog != NULL;
  prog_pause (b);
  int r = ib_userns_enter (b->opts->userns, &got, err);
  if (was)
    prog_resume (b);
  if (r < 0)
    return -1;
  ib_debug ("user namespace mode: %s", ib_userns_mode_name (got));
  return 0;
}

/* Variable lookup inside a stage: ENV of the image first (Dockerfile: ENV
 * overrides ARG), then the stage's ARGs. */
typedef struct lookup_ctx
{
  stage_state_t *st;
  const vars_t *args;
} lookup_ctx_t;

/* The index of an image config's Env array: NAME -> the position of its
 * first "NAME=..." entry, so that a lookup (every $VAR of every word) and an
 * ENV pair cost O(1), not a scan of the array (an ENV of 1M pairs took
 * O(n^2): 22 s for 50,000).  One array at a time, held (json_incref) so
 * that its address is never another's.  Only config_env_set changes Env
 * arrays, by replacing an entry with one of the same name or appending, so
 * the index stays right and is extended by the entries appended since. */
static struct
{
  json_t *arr;
  json_t *idx;
  size_t n;
} env_memo;

static json_t *
env_index (json_t *env)
{
  size_t n = json_array_size (env);
  if (env_memo.arr != env || n < env_memo.n)
    {
      json_decref (env_memo.arr);
      json_decref (env_memo.idx);
      env_memo.arr = json_incref (env);
      env_memo.idx = json_object ();
      env_memo.n = 0;
    }
  for (size_t i = env_memo.n; i < n; i++)
    {
      const char *s = json_string_value (json_array_get (env, i));
      const char *eq = s ? strchr (s, '=') : NULL;
      if (eq == NULL)
        continue;
      cleanup_free char *name = xstrndup (s, (size_t) (eq - s));
      if (json_object_get (env_memo.idx, name) == NULL)
        json_object_set_new_nocheck (env_memo.idx, name, json_integer ((json_int_t) i));
    }
  env_memo.n = n;
  return env_memo.idx;
}

static const char *
config_env_get (json_t *config, const char *name)
{
  json_t *env = json_object_get (json_object_get (config, "config"), "Env");
  if (!json_is_array (env))
    return NULL;
  json_t *at = json_object_get (env_index (env), name);
  if (at == NULL)
    return NULL;
  const char *s = json_string_value (json_array_get (env, (size_t) json_integer_value (at)));
  size_t n = strlen (name);
  if (s && strncmp (s, name, n) == 0 && s[n] == '=')
    return s + n + 1;
  return NULL;
}

static const char *
lookup (void *p, const char *name)
{
  lookup_ctx_t *c = p;
  if (c->st)
    {
      const char *v = config_env_get (c->st->config, name);
      if (v)
        return v;
    }
  return c->args ? vars_get (c->args, name, NULL) : NULL;
}

static char
escape_char (build_t *b)
{
  return b->recipe->escape ? b->recipe->escape : '\\';
}

/* Count the `len` bytes an expansion made against the instruction's and the
 * build's bounds (build.h: IB_EXPAND_INSTR_MAX, IB_EXPAND_BUILD_MAX): one
 * word is at most IB_EXPAND_MAX, but an instruction may hold many words
 * and a recipe many instructions. */
static int
expand_count (build_t *b, size_t len, ib_error_t *err)
{
  if (b->budget_in != b->cur_in || b->cur_in == NULL)
    {
      b->budget_in = b->cur_in;
      b->instr_expanded = 0;
    }
  b->instr_expanded += len;
  b->build_expanded += len;
  if (b->cur_in && b->instr_expanded > IB_EXPAND_INSTR_MAX)
    return ib_error_set (err, EFBIG,
                         "the expanded words of this instruction add up to more than %zu bytes",
                         (size_t) IB_EXPAND_INSTR_MAX);
  if (b->build_expanded > IB_EXPAND_BUILD_MAX)
    return ib_error_set (err, EFBIG,
                         "the expanded words of the build add up to more than %zu bytes",
                         (size_t) IB_EXPAND_BUILD_MAX);
  return 0;
}

static int
expand (build_t *b, stage_state_t *st, const char *word, char **out, ib_error_t *err)
{
  lookup_ctx_t c = { st, st ? &st->args : &b->global_args };
  if (ib_expand_word (word, escape_char (b), lookup, &c, out, err) < 0)
    return -1;
  if (expand_count (b, strlen (*out), err) < 0)
    {
      free (*out);
      *out = NULL;
      return -1;
    }
  return 0;
}

static int
instr_error (build_t *b, const ib_instr_t *in, ib_error_t *err)
{
  return ib_error_prefix (err, "%s:%d: %s", b->recipe->path, in->line, in->keyword);
}

static json_t *
config_section (json_t *config)
{
  json_t *c = json_object_get (config, "config");
  if (!json_is_object (c))
    {
      c = json_object ();
      json_object_set_new (config, "config", c);
    }
  return c;
}

static void
config_env_set (json_t *config, const char *name, const char *value)
{
  json_t *c = config_section (config);
  json_t *env = json_object_get (c, "Env");
  if (!json_is_array (env))
    {
      env = json_array ();
      json_object_set_new (c, "Env", env);
    }
  cleanup_free char *kv = xasprintf ("%s=%s", name, value);
  json_t *at = json_object_get (env_index (env), name);
  if (at)
    json_array_set_new (env, (size_t) json_integer_value (at), json_string (kv));
  else
    json_array_append_new (env, json_string (kv));
}

static char *
created_now (build_t *b)
{
  time_t t = b->sde >= 0 ? (time_t) b->sde : time (NULL);
  struct tm tm;
  gmtime_r (&t, &tm);
  char buf[64];
  strftime (buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return xstrdup (buf);
}

static void
add_history_at (build_t *b, stage_state_t *st, const char *created_by, bool empty_layer,
                const char *when)
{
  json_t *h = json_object_get (st->config, "history");
  if (!json_is_array (h))
    {
      h = json_array ();
      json_object_set_new (st->config, "history", h);
    }
  cleanup_free char *created = when ? xstrdup (when) : created_now (b);
  json_t *e = json_pack ("{s:s, s:s, s:s}", "created", created, "created_by", created_by,
                         "comment", "imgbuild");
  if (empty_layer)
    json_object_set_new (e, "empty_layer", json_true ());
  json_array_append_new (h, e);
}

static void
add_history (build_t *b, stage_state_t *st, const char *created_by, bool empty_layer)
{
  add_history_at (b, st, created_by, empty_layer, NULL);
}

/* ------------------------------------------------------------------ */
/* FROM                                                               */

static int
stage_index (build_t *b, const char *name)
{
  for (size_t i = 0; i < b->n_stages; i++)
    {
      const ib_stage_t *s = b->stages[i].def;
      if (s->name && strcasecmp (s->name, name) == 0)
        return (int) i;
    }
  return -1;
}

/* Is the stored image's config for a platform that serves os/arch/variant
 * (ib_platform_rank)?  A config that names none (scratch builds of other
 * tools) counts as serving any. */
static bool
config_serves (json_t *config, const char *os, const char *arch, const char *variant)
{
  const char *cos = json_string_value (json_object_get (config, "os"));
  const char *carch = json_string_value (json_object_get (config, "architecture"));
  if (cos == NULL || carch == NULL)
    return true;
  return ib_platform_rank (os, arch, variant, cos, carch,
                           json_string_value (json_object_get (config, "variant")))
         > 0;
}

/* FROM an image for os/arch/variant (explicit_platform: from --platform,
 * else the host's): the stored one when its platform serves, else pulled
 * for that platform (which moves the name's tag to it). */
static int
from_image (build_t *b, stage_state_t *st, const char *image, const char *os, const char *arch,
            const char *variant, bool explicit_platform, ib_error_t *err)
{
  ib_descriptor_t desc = { 0 };
  ib_manifest_t *m = NULL;
  json_t *config = NULL;
  bool pulled = false;
  if (ib_store_load_image (b->store, image, &desc, &m, &config, err) == 0
      && !config_serves (config, os, arch, variant))
    {
      cleanup_free char *want = ib_platform_string (os, arch, variant);
      if (need_userns (b, err) < 0)
        return -1;
      prog_pause (b);
      ib_info ("[%s] FROM %s: the stored image is for another platform; pulling %s",
               st->def->name ? st->def->name : "stage", image, want);
      ib_descriptor_clear (&desc);
      ib_manifest_free (m);
      json_decref (config);
      m = NULL;
      config = NULL;
      if (ib_rootfs_pull (b->store, image, os, arch, variant, st->rootfs, true, err) < 0
          || ib_store_load_image (b->store, image, &desc, &m, &config, err) < 0)
        return -1;
      pulled = true;
    }
  else if (m == NULL)
    {
      /* not stored: pull it, unpacking each layer while it downloads */
      ib_error_free (err);
      if (need_userns (b, err) < 0)
        return -1;
      prog_pause (b);
      if (ib_rootfs_pull (b->store, image, explicit_platform ? os : NULL,
                          explicit_platform ? arch : NULL, explicit_platform ? variant : NULL,
                          st->rootfs, true, err)
              < 0
          || ib_store_load_image (b->store, image, &desc, &m, &config, err) < 0)
        return -1;
      pulled = true;
    }
  prog_resume (b);
  int ret = -1;
  cleanup_strv char **diff_ids = NULL;
  if (ib_config_diff_ids (config, &diff_ids, err) < 0)
    goto out;
  if (ib_strv_len (diff_ids) != m->n_layers)
    {
      ib_error_set (err, EINVAL, "image %s: config lists %zu diff_ids but the manifest %zu layers",
                    image, ib_strv_len (diff_ids), m->n_layers);
      goto out;
    }
  /* Not pulled: the rootfs is made from the stored layers (snapshot) when
   * a step needs it (ensure_rootfs). */
  st->rootfs_ready = pulled;
  {
    cleanup_free char *plat = ib_platform_string (os, arch, variant);
    cleanup_free char *text = xasprintf ("FROM image %s %s", desc.digest, plat);
    ib_cache_key (NULL, text, st->key);
  }
  st->config = config;
  config = NULL;
  st->layers = xmalloc ((m->n_layers + 1) * sizeof (ib_descriptor_t));
  for (size_t i = 0; i < m->n_layers; i++)
    {
      ib_descriptor_t *d = &st->layers[i];
      const char *mt = m->layers[i].media_type;
      /* Same bytes, OCI name: our manifests are OCI manifests. */
      if (mt && strcmp (mt, IB_MT_DOCKER_LAYER_GZIP) == 0)
        mt = IB_MT_OCI_LAYER_GZIP;
      d->media_type = xstrdup (mt ? mt : IB_MT_OCI_LAYER_GZIP);
      memcpy (d->digest, m->layers[i].digest, IB_DIGEST_LEN);
      d->size = m->layers[i].size;
    }
  st->n_layers = m->n_layers;
  ret = 0;
out:
  ib_descriptor_clear (&desc);
  ib_manifest_free (m);
  json_decref (config);
  return ret;
}

/* FROM <an earlier stage>: its config and layers now; its tree (copied, or
 * made from the layers) when a step needs it. */
static int
from_stage (stage_state_t *st, stage_state_t *src, ib_error_t *err)
{
  (void) err;
  st->config = json_deep_copy (src->config);
  st->layers = xmalloc ((src->n_layers + 1) * sizeof (ib_descriptor_t));
  for (size_t i = 0; i < src->n_layers; i++)
    {
      st->layers[i] = src->layers[i];
      st->layers[i].media_type = xstrdup (src->layers[i].media_type);
      st->layers[i].os = st->layers[i].arch = st->layers[i].variant = NULL;
    }
  st->n_layers = src->n_layers;
  st->foreign = src->foreign ? xstrdup (src->foreign) : NULL;
  st->copy_src = src;
  st->copy_n_layers = src->n_layers;
  cleanup_free char *text = xasprintf ("FROM stage %s", src->key);
  ib_cache_key (NULL, text, st->key);
  return 0;
}

/* Make st->rootfs the tree of st->layers, if not done yet: a copy of the
 * FROM stage's tree when no layer was added since, else the layers
 * unpacked over the longest stored snapshot (ib_rootfs_prepare). */
static int
ensure_rootfs (build_t *b, stage_state_t *st, ib_error_t *err)
{
  if (need_userns (b, err) < 0)
    return -1;
  if (st->rootfs_ready)
    return 0;
  if (st->copy_src && st->copy_src->rootfs_ready && st->n_layers == st->copy_n_layers)
    {
      if (rmdir (st->rootfs) < 0 && errno != ENOENT)
        return ib_error_sys (err, errno, "prepare %s", st->rootfs);
      /* an overlay over the FROM stage's finished tree, else a copy */
      int o = ib_rootfs_overlay_from (st->copy_src->rootfs, st->rootfs, err);
      if (o < 0 || (o == 0 && ib_copy_rootfs (st->copy_src->rootfs, st->rootfs, err) < 0))
        return -1;
      st->rootfs_ready = true;
      return 0;
    }
  if (st->n_layers == 0)
    {
      st->rootfs_ready = true; /* FROM scratch: the empty directory */
      return 0;
    }
  if (st->n_pending > 0 && join_layers (b, st, err) < 0)
    return -1;
  cleanup_strv char **diff_ids = NULL;
  cleanup_strv char **digests = NULL;
  if (ib_config_diff_ids (st->config, &diff_ids, err) < 0)
    return -1;
  if (ib_strv_len (diff_ids) != st->n_layers)
    return ib_error_set (err, EINVAL, "config lists %zu diff_ids for %zu layers",
                         ib_strv_len (diff_ids), st->n_layers);
  for (size_t i = 0; i < st->n_layers; i++)
    ib_strv_push (&digests, st->layers[i].digest);
  if (rmdir (st->rootfs) < 0 && errno != ENOENT)
    return ib_error_sys (err, errno, "prepare %s", st->rootfs);
  /* The new top is recorded as a snapshot: the next build that misses
   * after the same cached steps (an edit-rebuild loop) copies it instead of
   * unpacking the layers again. */
  if (ib_rootfs_prepare (b->store, digests, diff_ids, st->rootfs, true, err) < 0)
    return -1;
  st->rootfs_ready = true;
  return 0;
}

static const char *
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
static void
step_line (build_t *b, stage_state_t *st, const char *keyword, const char *what_full, bool cached,
           bool timed)
{
  /* a heredoc script shows as its first line */
  const char *nl = strchr (what_full, '\n');
  cleanup_free char *what = nl ? xasprintf ("%.*s ...", (int) (nl - what_full), what_full)
                               : xstrdup (what_full);
  cleanup_free char *label = st->def->name
                                 ? xasprintf ("[%s %zu/%zu]", st->def->name, st->step, st->n_steps)
                                 : xasprintf ("[stage-%d %zu/%zu]", st->def->index, st->step,
                                              st->n_steps);
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
static void
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
static void
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
static void
prog_pause (build_t *b)
{
  if (b->prog)
    {
      ib_progress_end (b->prog);
      b->prog = NULL;
      b->prog_paused = true;
    }
}

static void
prog_resume (build_t *b)
{
  if (b->prog_paused)
    {
      cleanup_free char *title = xasprintf ("build %s", b->recipe->path);
      b->prog = ib_progress_begin (title);
      b->prog_paused = false;
      if (b->step_open && b->step_text) /* the running step goes on in the new display */
        {
          b->step_item = ib_progress_add (b->prog, b->step_text, "Running", -1);
          ib_progress_show_elapsed (b->prog, b->step_item);
        }
    }
}

static bool
same_layers (const ib_descriptor_t *a, size_t na, const ib_descriptor_t *b, size_t nb)
{
  if (na != nb)
    return false;
  for (size_t i = 0; i < na; i++)
    if (strcmp (a[i].digest, b[i].digest) != 0)
      return false;
  return true;
}

/* After a step (run or taken from the cache) the stage's identity is its
 * input key plus the content of the layers it has (their diff_ids: known
 * as soon as a layer's tar is written, before its compression ends): a
 * step that ran again (--no-cache) and made other bytes changes what the
 * following steps, and the stages that read this one, are keyed on; the
 * same bytes keep their cache hits. */
static void
set_result_key (stage_state_t *st, const char *key)
{
  ib_buf_t t = { 0 };
  cleanup_strv char **diff_ids = NULL;
  ib_error_t e = NULL;
  if (ib_config_diff_ids (st->config, &diff_ids, &e) < 0)
    ib_error_free (&e); /* none: FROM scratch */
  for (char **d = diff_ids; d && *d; d++)
    ib_buf_printf (&t, "diff_id %s\n", *d);
  cleanup_free char *text = ib_buf_steal (&t);
  char out[IB_DIGEST_LEN];
  ib_cache_key (key, text, out);
  memcpy (st->key, out, IB_DIGEST_LEN);
}

/* Look the step `key` up, unless the stage runs without the cache.  On a
 * hit the stage takes the recorded config and layers (a tree already made
 * for other layers is dropped, to be made again when needed) and returns
 * 1; 0 on a miss. */
static int
cache_lookup (build_t *b, stage_state_t *st, const char *key)
{
  ib_strv_push (&b->keys, key);
  /* A stage with layers still compressing has run a step of its own in
   * this build: its key chain is new, so the later steps' keys are too
   * (records are only written once a step ran), and they run. */
  if (st->no_cache || st->n_pending > 0)
    return 0;
  json_t *cfg = NULL;
  ib_descriptor_t *ls = NULL;
  size_t n = 0;
  if (ib_cache_get (b->store, key, &cfg, &ls, &n) == 0)
    return 0;
  if (!same_layers (st->layers, st->n_layers, ls, n))
    {
      if (st->rootfs_ready && n != 0)
        {
          ib_error_t e = NULL;
          if (ib_rootfs_remove (st->rootfs, &e) < 0 || mkdir (st->rootfs, 0700) < 0)
            {
              ib_warn ("build cache: %s", e ? e->msg : strerror (errno));
              ib_error_free (&e);
              json_decref (cfg);
              for (size_t i = 0; i < n; i++)
                free (ls[i].media_type);
              free (ls);
              return 0;
            }
          st->rootfs_ready = false;
        }
    }
  json_decref (st->config);
  st->config = cfg;
  for (size_t i = 0; i < st->n_layers; i++)
    free (st->layers[i].media_type);
  free (st->layers);
  st->layers = ls;
  st->n_layers = n;
  set_result_key (st, key);
  b->hits++;
  return 1;
}

/* Record the state after a step that ran; failing to is only a warning.
 * While layers of the stage compress, the record waits for them
 * (join_layers writes it). */
static void
cache_record (build_t *b, stage_state_t *st, const char *key)
{
  set_result_key (st, key);
  b->misses++;
  if (st->n_pending > 0)
    {
      b->records = xrealloc (b->records, (b->n_records + 1) * sizeof *b->records);
      pending_record_t *r = &b->records[b->n_records++];
      r->st = st;
      snprintf (r->key, IB_DIGEST_LEN, "%s", key);
      r->config = json_deep_copy (st->config);
      r->n_layers = st->n_layers;
      return;
    }
  ib_error_t e = NULL;
  if (ib_cache_put (b->store, key, st->config, st->layers, st->n_layers, &e) < 0)
    {
      ib_warn ("%s", e->msg);
      ib_error_free (&e);
    }
}

/* What shapes the bytes of a layer step's result besides its instruction:
 * the layer format, SOURCE_DATE_EPOCH, the identity mode (owners in the
 * layer). */
static void
key_layer_format (build_t *b, ib_buf_t *t)
{
  ib_buf_printf (t, "layer %s %d sde %lld userns %s\n",
                 ib_compression_media_type (b->opts->compression), b->opts->compression_level,
                 (long long) b->sde, ib_userns_mode_name (b->userns));
}

/* The content of a build context path, for a key: "context PATH sha256:..."
 * or "context PATH missing" (the step reports that when it runs). */
static void
key_context_path (build_t *b, ib_buf_t *t, const char *path, const ib_ignore_t *excl)
{
  cleanup_free char *host = NULL;
  ib_error_t e = NULL;
  if (ib_root_resolve (b->context, path, true, &host, &e) < 0 || access (host, F_OK) < 0)
    {
      ib_error_free (&e);
      ib_buf_printf (t, "context %s missing\n", path);
      return;
    }
  ib_sha256_t *h = ib_sha256_new ();
  char d[IB_DIGEST_LEN];
  if (b->memo == NULL)
    b->memo = ib_cache_memo_open (b->store);
  const char *rel = host + strlen (b->context);
  while (*rel == '/')
    rel++;
  ib_path_filter_t filter = { .ignore = b->ignore, .ignore_base = rel, .exclude = excl };
  if (ib_cache_hash_path_memo (host, b->memo, &filter, h, NULL, &e) < 0)
    {
      /* unreadable: the step fails when it runs, so no record has this key */
      ib_buf_printf (t, "context %s unreadable\n", path);
      ib_error_free (&e);
      ib_sha256_free (h);
    }
  else
    {
      ib_sha256_final (h, d); /* frees h */
      ib_buf_printf (t, "context %s %s\n", path, d);
    }
}

/* What a FROM names, its ARGs expanded (*image), and the platform asked
 * (*want: its --platform or the build's, NULL for the host's) as os,
 * arch and variant (the host's when none is asked).  All allocated. */
static int
from_target (build_t *b, const ib_instr_t *in, char **image, char **want, char **os, char **arch,
             char **variant, ib_error_t *err)
{
  *image = *want = *os = *arch = *variant = NULL;
  if (expand (b, NULL, in->text, image, err) < 0)
    return -1;
  const char *platform = ib_instr_flag (in, "platform");
  if (platform && expand (b, NULL, platform, want, err) < 0)
    return -1;
  if (*want == NULL && b->opts->platform)
    *want = xstrdup (b->opts->platform); /* build --platform: the default of every FROM */
  if (*want)
    {
      if (ib_platform_parse (*want, os, arch, variant, err) < 0)
        return ib_error_prefix (err, "--platform=%s", *want);
      return 0;
    }
  const char *hos, *harch, *hvar;
  ib_host_platform (&hos, &harch, &hvar);
  *os = xstrdup (hos);
  *arch = xstrdup (harch);
  *variant = hvar ? xstrdup (hvar) : NULL;
  return 0;
}

static int
do_from (build_t *b, stage_state_t *st, const ib_instr_t *in, ib_error_t *err)
{
  cleanup_free char *image = NULL, *want = NULL, *os = NULL, *arch = NULL, *variant = NULL;
  if (from_target (b, in, &image, &want, &os, &arch, &variant, err) < 0)
    return -1;
  const char *hos, *harch, *hvar;
  ib_host_platform (&hos, &harch, &hvar);
  /* Another platform's image may be pulled, copied from and added to; RUN
   * in it is refused (do_run), as there is no emulation. */
  if (want && ib_platform_rank (hos, harch, hvar, os, arch, variant) == 0)
    st->foreign = ib_platform_string (os, arch, variant);
  if (ib_store_tmp_dir (b->store, "stage", &st->rootfs, err) < 0)
    return -1;
  int idx = stage_index (b, image);
  step_line (b, st, "FROM", image, false, false);
  if (idx >= 0 && (size_t) idx < (size_t) (st - b->stages))
    {
      /* its layers' blobs: the new stage's manifest lists them */
      if (b->stages[idx].n_pending > 0 && join_layers (b, &b->stages[idx], err) < 0)
        return -1;
      return from_stage (st, &b->stages[idx], err);
    }
  if (strcmp (image, "scratch") == 0)
    {
      st->config = json_pack ("{s:s, s:s, s:{}, s:{s:s, s:[]}}", "architecture", arch, "os", os,
                              "config", "rootfs", "type", "layers", "diff_ids");
      if (variant)
        json_object_set_new (st->config, "variant", json_string (variant));
      st->layers = xmalloc (sizeof (ib_descriptor_t));
      st->rootfs_ready = true;
      cleanup_free char *plat = ib_platform_string (os, arch, variant);
      cleanup_free char *text = xasprintf ("FROM scratch %s", plat);
      ib_cache_key (NULL, text, st->key);
      return 0;
    }
  if (rmdir (st->rootfs) < 0) /* ib_rootfs_prepare creates it */
    return ib_error_sys (err, errno, "prepare %s", st->rootfs);
  return from_image (b, st, image, os, arch, variant, want != NULL, err);
}

/* ------------------------------------------------------------------ */
/* Steps that change the rootfs                                       */

/* What a layer job's child sends back: one write, less than PIPE_BUF. */
struct job_result
{
  int status;                  /* 0, else the errno of the failure */
  char digest[IB_DIGEST_LEN];
  uint64_t size;
  char msg[1024];
};

/* Layers whose tar is smaller are compressed at once: a process costs more. */
#define JOB_MIN_TAR (4u << 20)
/* Room the store's file system must have left besides the tar for a layer
 * to be compressed in the background (its blob may be as large as it). */
#define JOB_SPARE (64u << 20)

static double
seconds_since (const struct timespec *t0)
{
  struct timespec t1;
  clock_gettime (CLOCK_MONOTONIC, &t1);
  return (double) (t1.tv_sec - t0->tv_sec) + (double) (t1.tv_nsec - t0->tv_nsec) / 1e9;
}

static void
layer_line (const char *digest, uint64_t entries, uint64_t size, double secs)
{
  ib_info ("  layer %.19s  %llu entries, %.1f kB, written in %.2f s", digest,
           (unsigned long long) entries, (double) size / 1000.0, secs);
}

/* A compressor process started while a layer's tar is being written
 * (ib_layer_opts_t.raw_start): it follows the file as it grows. */
typedef struct raw_start_ctx
{
  build_t *b;
  const char *tar;
  pid_t pid;                 /* -1: none started */
  int res_fd, ctl_fd;        /* its struct job_result; the tar's final length to it */
  char *blob;
} raw_start_ctx_t;

/* Start a process compressing c->tar (followed while written, until its
 * length comes on the control pipe) into a new temp blob. */
static int
spawn_compressor (raw_start_ctx_t *c, ib_error_t *err)
{
  build_t *b = c->b;
  char *blob = NULL;
  int fd = ib_store_tmp_file (b->store, "layer", &blob, err);
  if (fd < 0)
    return -1;
  close (fd);
  int p[2], q[2];
  if (pipe2 (p, O_CLOEXEC) < 0)
    {
      ib_error_sys (err, errno, "compress layer: pipe");
      unlink (blob);
      free (blob);
      return -1;
    }
  if (pipe2 (q, O_CLOEXEC) < 0)
    {
      ib_error_sys (err, errno, "compress layer: pipe");
      close (p[0]);
      close (p[1]);
      unlink (blob);
      free (blob);
      return -1;
    }
  ib_layer_opts_t lo = { .compression = b->opts->compression, .level = b->opts->compression_level,
                         .sde = b->sde };
  pid_t parent = getpid ();
  fflush (NULL);
  /* the display's ticker thread stopped across the fork: the child starts
   * with one thread and no lock held by another */
  pid_t pid = ib_progress_fork (b->prog);
  if (pid == 0)
    {
      close (p[0]);
      close (q[1]);
      prctl (PR_SET_PDEATHSIG, SIGKILL);
      if (getppid () != parent)
        _exit (1);
      struct job_result r;
      memset (&r, 0, sizeof r);
      ib_error_t e = NULL;
      if (ib_layer_compress_follow (c->tar, q[0], blob, &lo, r.digest, &r.size, &e) < 0)
        {
          r.status = e->status ? e->status : EIO;
          snprintf (r.msg, sizeof r.msg, "%s", e->msg);
        }
      ssize_t w = write (p[1], &r, sizeof r);
      _exit (w == (ssize_t) sizeof r ? 0 : 1);
    }
  int en = errno;
  close (p[1]);
  close (q[0]);
  if (pid < 0)
    {
      close (p[0]);
      close (q[1]);
      unlink (blob);
      free (blob);
      return ib_error_sys (err, en, "compress layer: fork");
    }
  c->pid = pid;
  c->res_fd = p[0];
  c->ctl_fd = q[1];
  c->blob = blob;
  return 0;
}

/* ib_layer_opts_t.raw_start: a large layer is written as its tar, and
 * compressed by a process that starts now, when the store's file system
 * has room for the tar beside the blob (which may be as large). */
static bool
layer_raw_start (void *ud, uint64_t est)
{
  raw_start_ctx_t *c = ud;
  struct statvfs fs;
  if (statvfs (c->tar, &fs) < 0 || (uint64_t) fs.f_bavail * fs.f_frsize < est + JOB_SPARE)
    return false;
  ib_error_t e = NULL;
  if (spawn_compressor (c, &e) < 0)
    {
      ib_debug ("%s: compressing in one pass", e->msg);
      ib_error_free (&e);
      return false;
    }
  return true;
}

/* The tar was not finished: the compressor is stopped, its blob removed. */
static void
abandon_compressor (raw_start_ctx_t *c)
{
  if (c->pid < 0)
    return;
  close (c->ctl_fd); /* without a length: the child gives up */
  close (c->res_fd);
  kill (c->pid, SIGKILL);
  while (waitpid (c->pid, NULL, 0) < 0 && errno == EINTR)
    ;
  unlink (c->blob);
  free (c->blob);
  c->pid = -1;
  c->blob = NULL;
}

/* The tar *tar (taken: the job removes and frees it) of layer
 * st->layers[st->n_layers - 1] is complete at `len` bytes: tell its
 * compressor, and let join_layers take the result. */
static void
add_layer_job (build_t *b, stage_state_t *st, raw_start_ctx_t *c, char **tar, uint64_t len,
               uint64_t entries, const struct timespec *t0)
{
  unsigned char v[8];
  for (int i = 0; i < 8; i++)
    v[i] = (unsigned char) (len >> (8 * i));
  ib_error_t e = NULL;
  if (ib_write_pipe (c->ctl_fd, v, sizeof v, "compressor", &e) < 0)
    ib_error_free (&e); /* the child died: join_layers reports it */
  close (c->ctl_fd);
  b->jobs = xrealloc (b->jobs, (b->n_jobs + 1) * sizeof *b->jobs);
  layer_job_t *j = &b->jobs[b->n_jobs++];
  memset (j, 0, sizeof *j);
  j->st = st;
  j->index = st->n_layers - 1;
  j->pid = c->pid;
  j->fd = c->res_fd;
  j->tar = *tar;
  *tar = NULL;
  j->blob = c->blob;
  j->what = b->cur_in ? xasprintf ("%s:%d: %s", b->recipe->path, b->cur_in->line,
                                   b->cur_in->keyword)
                      : xstrdup (b->recipe->path);
  j->entries = entries;
  j->t0 = *t0;
  st->n_pending++;
  c->pid = -1;
  c->blob = NULL;
}

/* Wait for job j and take its blob into the store; its layer gets its
 * digest and size.  The job's files are removed either way.  Errors name
 * the step. */
static int
finish_layer_job (build_t *b, layer_job_t *j, ib_error_t *err)
{
  struct job_result r;
  memset (&r, 0, sizeof r);
  size_t got = 0;
  while (got < sizeof r)
    {
      ssize_t n = read (j->fd, (char *) &r + got, sizeof r - got);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        break;
      got += (size_t) n;
    }
  close (j->fd);
  int ws = 0;
  while (waitpid (j->pid, &ws, 0) < 0 && errno == EINTR)
    ;
  int ret = 0;
  if (got != sizeof r)
    ret = ib_error_set (err, EIO, "%s: compress layer %s: the process compressing it ended "
                        "without a result%s", j->what, j->tar,
                        WIFSIGNALED (ws) ? " (killed by a signal)" : "");
  else if (r.status != 0)
    ret = ib_error_set (err, r.status, "%s: %s", j->what, r.msg);
  else if (ib_store_commit_blob_hashed (b->store, j->blob, r.digest, err) < 0)
    ret = ib_error_prefix (err, "%s", j->what);
  if (ret < 0)
    unlink (j->blob);
  unlink (j->tar);
  stage_state_t *st = j->st;
  if (ret == 0)
    {
      ib_descriptor_t *d = &st->layers[j->index];
      memcpy (d->digest, r.digest, IB_DIGEST_LEN);
      d->size = (int64_t) r.size;
      layer_line (r.digest, j->entries, r.size, seconds_since (&j->t0));
    }
  st->n_pending--;
  free (j->tar);
  free (j->blob);
  free (j->what);
  return ret;
}

/* Whether every layer the record names has its blob. */
static bool
record_complete (const pending_record_t *r)
{
  for (size_t i = 0; i < r->n_layers; i++)
    if (r->st->layers[i].digest[0] == '\0')
      return false;
  return true;
}

/* Wait for the layers compressing for stage `only` (NULL: every stage),
 * then write the cache records that waited for them.  The first failure
 * is returned (later ones are warnings); the records of the steps whose
 * layers all made it are written still. */
static int
join_layers (build_t *b, stage_state_t *only, ib_error_t *err)
{
  int ret = 0;
  size_t k = 0;
  for (size_t i = 0; i < b->n_jobs; i++)
    {
      layer_job_t *j = &b->jobs[i];
      if (only && j->st != only)
        {
          b->jobs[k++] = *j;
          continue;
        }
      ib_error_t e = NULL;
      if (finish_layer_job (b, j, &e) < 0)
        {
          if (ret == 0)
            {
              *err = e;
              ret = -1;
            }
          else
            {
              ib_warn ("%s", e->msg);
              ib_error_free (&e);
            }
        }
    }
  b->n_jobs = k;
  k = 0;
  for (size_t i = 0; i < b->n_records; i++)
    {
      pending_record_t *r = &b->records[i];
      if (r->st->n_pending > 0)
        {
          b->records[k++] = *r;
          continue;
        }
      ib_error_t e = NULL;
      if (record_complete (r)
          && ib_cache_put (b->store, r->key, r->config, r->st->layers, r->n_layers, &e) < 0)
        {
          ib_warn ("%s", e->msg);
          ib_error_free (&e);
        }
      json_decref (r->config);
    }
  b->n_records = k;
  return ret;
}

/* Stop what still compresses (a build that failed): the children are
 * killed, their files removed, the records that waited dropped. */
static void
drop_layer_jobs (build_t *b)
{
  for (size_t i = 0; i < b->n_jobs; i++)
    {
      layer_job_t *j = &b->jobs[i];
      kill (j->pid, SIGKILL);
      while (waitpid (j->pid, NULL, 0) < 0 && errno == EINTR)
        ;
      close (j->fd);
      unlink (j->tar);
      unlink (j->blob);
      free (j->tar);
      free (j->blob);
      free (j->what);
      j->st->n_pending--;
    }
  free (b->jobs);
  b->jobs = NULL;
  b->n_jobs = 0;
  for (size_t i = 0; i < b->n_records; i++)
    json_decref (b->records[i].config);
  free (b->records);
  b->records = NULL;
  b->n_records = 0;
}

/* The state of a tree before a step, for its layer: a scan of the whole
 * tree, or, for an overlay tree with nothing in its upper directory yet,
 * that directory and the lower layers (nothing is scanned: the step's
 * changes will be what the upper directory holds). */
typedef struct step_scan
{
  ib_fs_scan_t *full;
  char *upper;
  char **lowers;
} step_scan_t;

static int
step_scan_begin (stage_state_t *st, step_scan_t *ss, ib_error_t *err)
{
  memset (ss, 0, sizeof *ss);
  if (ib_rootfs_overlay_clean (st->rootfs, &ss->upper, &ss->lowers))
    return 0;
  return ib_fs_scan (st->rootfs, ib_layer_exclude, &ss->full, err);
}

static void
step_scan_free (step_scan_t *ss)
{
  ib_fs_scan_free (ss->full);
  free (ss->upper);
  ib_strv_free (ss->lowers);
  memset (ss, 0, sizeof *ss);
}

/* The scans of an overlay step (ib_fs_scan_overlay) against a view of its
 * lower layers; when overlayfs redirected a directory, whole scans of
 * that view and of the tree. */
static int
step_scans (build_t *b, stage_state_t *st, step_scan_t *ss, ib_fs_scan_t **before,
            ib_fs_scan_t **cur, ib_error_t *err)
{
  cleanup_free char *view = NULL;
  int mounted = ib_rootfs_lower_view (b->store, ss->lowers, &view, err);
  if (mounted < 0)
    return -1;
  ib_error_t e = NULL;
  int r = ib_fs_scan_overlay (st->rootfs, ss->upper, view, ib_layer_exclude, before, cur, &e);
  if (r < 0 && e->status == EOPNOTSUPP)
    {
      ib_debug ("%s: %s: scanning the whole tree", st->rootfs, e->msg);
      ib_error_free (&e);
      r = ib_fs_scan_nodev (view, ib_layer_exclude, before, err);
      if (r == 0 && (r = ib_fs_scan_nodev (st->rootfs, ib_layer_exclude, cur, err)) < 0)
        {
          ib_fs_scan_free (*before);
          *before = NULL;
        }
    }
  else if (r < 0)
    *err = e;
  else
    ib_debug ("%s: the step's changes from the upper directory alone", st->rootfs);
  ib_rootfs_lower_view_end (view, mounted);
  return r;
}

/* The layer of a step.  A large one (JOB_MIN_TAR) is written as its
 * uncompressed tar first, so its diff_id (which the keys of the following
 * steps need) is known at once, and compressed in a child process while
 * the next steps run (join_layers waits for it where its blob is needed:
 * the stage's image, a stage built FROM this one, the end of the build).
 * Small layers, and any layer when the store's file system cannot hold
 * the tar beside the blob, take one pass (tar, hash and compression). */
static int
commit_layer (build_t *b, stage_state_t *st, step_scan_t *ss, const char *created_by,
              ib_error_t *err)
{
  /* what the step changed: an overlay tree's upper directory (the scans
   * of only what it holds), else the whole tree against the scan before */
  cleanup_scan ib_fs_scan_t *pbefore = NULL, *pcur = NULL;
  const ib_fs_scan_t *before = ss->full, *cur = NULL;
  if (ss->upper && step_scans (b, st, ss, &pbefore, &pcur, err) < 0)
    return -1;
  if (ss->upper)
    {
      before = pbefore;
      cur = pcur;
    }
  struct timespec t0;
  clock_gettime (CLOCK_MONOTONIC, &t0);
  char *tmp = NULL;
  int fd = ib_store_tmp_file (b->store, "layer", &tmp, err);
  if (fd < 0)
    return -1;
  close (fd);
  ib_layer_result_t res;
  ib_layer_opts_t lo = { .compression = b->opts->compression, .level = b->opts->compression_level,
                         .sde = b->sde };
  raw_start_ctx_t rc = { .b = b, .tar = tmp, .pid = -1, .res_fd = -1, .ctl_fd = -1 };
  if (lo.compression != IB_COMPRESSION_NONE)
    {
      lo.raw_above = JOB_MIN_TAR;
      lo.raw_start = layer_raw_start;
      lo.raw_ud = &rc;
    }
  bool background = false;
  int ret = -1;
  ib_error_t e = NULL;
  if (ib_layer_write_diff_scans (st->rootfs, before, cur, ib_layer_exclude, tmp, &lo, &res, &e) < 0)
    {
      abandon_compressor (&rc);
      /* the tar may not fit where the compressed blob does */
      if (lo.raw_above == 0 || (e->status != ENOSPC && e->status != EDQUOT))
        {
          *err = e;
          goto out;
        }
      ib_error_free (&e);
      lo.raw_above = 0;
      lo.raw_start = NULL;
      if (ib_layer_write_diff_scans (st->rootfs, before, cur, ib_layer_exclude, tmp, &lo, &res, err) < 0)
        goto out;
    }
  background = res.raw;
  if (res.entries == 0)
    {
      add_history (b, st, created_by, true);
      ret = 0;
      goto out;
    }
  if (!background && ib_store_commit_blob_hashed (b->store, tmp, res.digest, err) < 0)
    goto out;
  st->layers = xrealloc (st->layers, (st->n_layers + 1) * sizeof (ib_descriptor_t));
  ib_descriptor_t *d = &st->layers[st->n_layers++];
  memset (d, 0, sizeof *d);
  d->media_type = xstrdup (ib_compression_media_type (b->opts->compression));
  if (!background)
    {
      memcpy (d->digest, res.digest, IB_DIGEST_LEN);
      d->size = (int64_t) res.size;
    }
  json_t *rootfs = json_object_get (st->config, "rootfs");
  if (!json_is_object (rootfs))
    {
      rootfs = json_pack ("{s:s, s:[]}", "type", "layers", "diff_ids");
      json_object_set_new (st->config, "rootfs", rootfs);
    }
  json_array_append_new (json_object_get (rootfs, "diff_ids"), json_string (res.diff_id));
  add_history (b, st, created_by, false);
  if (background)
    add_layer_job (b, st, &rc, &tmp, res.size, res.entries, &t0);
  /* An overlay tree keeps this step's changes as a layered snapshot (its
   * upper directory, moved, not copied): a later build that misses after
   * this step (the edit loop) mounts it instead of unpacking the layers. */
  {
    cleanup_strv char **diff_ids = NULL;
    ib_error_t e = NULL;
    if (ib_config_diff_ids (st->config, &diff_ids, &e) < 0)
      ib_error_free (&e);
    else
      {
        char chain[IB_DIGEST_LEN];
        ib_chain_id (diff_ids, ib_strv_len (diff_ids) - 1, chain);
        if (ib_rootfs_freeze (b->store, st->rootfs, ib_digest_hex (chain), err) < 0)
          goto out;
      }
  }
  if (!background)
    layer_line (res.digest, res.entries, res.size, seconds_since (&t0));
  ret = 0;
out:
  abandon_compressor (&rc); /* none left once the job is added */
  if (tmp)
    {
      if (ret < 0 || !background)
        unlink (tmp);
      free (tmp);
    }
  return ret;
}

/* The environment of a RUN: the image's Env plus the stage's ARGs (which
 * are not persisted in the image), plus SOURCE_DATE_EPOCH when the build has
 * one (environment or --reproducible) and neither defines it, so that the
 * tools that honour it (wheel, gzip, dpkg-deb, ...) do.  PATH defaults as
 * Docker's. */
static char **
run_env (build_t *b, stage_state_t *st)
{
  char **env = NULL;
  json_t *jenv = json_object_get (config_section (st->config), "Env");
  size_t i;
  json_t *e;
  bool has_path = false;
  json_array_foreach (jenv, i, e)
  {
    if (json_is_string (e))
      {
        ib_strv_push (&env, json_string_value (e));
        has_path |= ib_str_has_prefix (json_string_value (e), "PATH=");
      }
  }
  for (size_t k = 0; k < st->args.n; k++)
    if (st->args.values[k] && config_env_get (st->config, st->args.names[k]) == NULL)
      {
        cleanup_free char *kv = xasprintf ("%s=%s", st->args.names[k], st->args.values[k]);
        ib_strv_push (&env, kv);
      }
  for (size_t k = 0; k < b->build_args.n; k++)
    if (is_proxy_arg (b->build_args.names[k]) && !vars_declared (&st->args, b->build_args.names[k])
        && config_env_get (st->config, b->build_args.names[k]) == NULL)
      {
        cleanup_free char *kv = xasprintf ("%s=%s", b->build_args.names[k],
                                           b->build_args.values[k] ? b->build_args.values[k] : "");
        ib_strv_push (&env, kv);
      }
  if (!has_path)
    ib_strv_push (&env, DEFAULT_PATH);
  bool has_sde = false;
  for (size_t k = 0; env && env[k]; k++)
    has_sde |= ib_str_has_prefix (env[k], "SOURCE_DATE_EPOCH=");
  if (b->sde >= 0 && !has_sde)
    {
      cleanup_free char *kv = xasprintf ("SOURCE_DATE_EPOCH=%lld", (long long) b->sde);
      ib_strv_push (&env, kv);
    }
  if (env == NULL)
    env = xmalloc (sizeof (char *));
  return env;
}

static const char *
config_string (json_t *config, const char *key)
{
  return json_string_value (json_object_get (config_section (config), key));
}

static int
resolve_user (stage_state_t *st, uid_t *uid, gid_t *gid, ib_error_t *err)
{
  const char *user = config_string (st->config, "User");
  *uid = 0;
  *gid = 0;
  if (user == NULL || *user == '\0')
    return 0;
  return ib_lookup_user (st->rootfs, user, uid, gid, err);
}

/* The mounts of one RUN (--mount), resolved to host paths. */
typedef struct run_mounts
{
  ib_mount_t *v;
  size_t n;
  char **strings;   /* owned by this struct */
  char **copies;    /* rw bind copies, removed afterwards */
  int *locks;       /* flock()ed cache lock fds */
  size_t n_locks;
} run_mounts_t;

static const char *
rm_keep (run_mounts_t *r, char *s)
{
  size_t n = ib_strv_len (r->strings);
  r->strings = xrealloc (r->strings, sizeof (char *) * (n + 2));
  r->strings[n] = s;
  r->strings[n + 1] = NULL;
  return s;
}

static void
run_mounts_free (run_mounts_t *r)
{
  for (char **c = r->copies; c && *c; c++)
    {
      ib_error_t e = NULL;
      if (ib_rm_rf (*c, &e) < 0)
        ib_error_report (&e);
    }
  ib_strv_free (r->copies);
  for (size_t i = 0; i < r->n_locks; i++)
    close (r->locks[i]);
  free (r->locks);
  ib_strv_free (r->strings);
  free (r->v);
  memset (r, 0, sizeof *r);
}

static int
stage_index (build_t *b, const char *name);

/* Does `filter` leave out anything below directory `dir` (`rel`: its path
 * relative to the walked source, "" for the source)?  A walk of names
 * only; unreadable directories count as nothing left out. */
static bool
filter_leaves_out (const char *dir, const char *rel, const ib_path_filter_t *filter)
{
  DIR *d = opendir (dir);
  if (d == NULL)
    return false;
  bool found = false;
  struct dirent *de;
  while (!found && (de = readdir (d)) != NULL)
    {
      if (strcmp (de->d_name, ".") == 0 || strcmp (de->d_name, "..") == 0)
        continue;
      cleanup_free char *r2 = *rel ? xasprintf ("%s/%s", rel, de->d_name) : xstrdup (de->d_name);
      if (ib_path_filter_skip (filter, r2, NULL))
        found = true;
      else if (de->d_type == DT_DIR || de->d_type == DT_UNKNOWN)
        {
          cleanup_free char *sub = ib_path_join (dir, de->d_name);
          struct stat sb;
          if (lstat (sub, &sb) == 0 && S_ISDIR (sb.st_mode))
            found = filter_leaves_out (sub, r2, filter);
        }
    }
  closedir (d);
  return found;
}

static int
run_mount_one (build_t *b, stage_state_t *st, const char *flag, run_mounts_t *r,
               ib_error_t *err)
{
  cleanup_free char *value = NULL;
  if (expand (b, st, flag, &value, err) < 0)
    return -1;
  ib_mount_spec_t ms;
  if (ib_mount_spec_parse (value, &ms, err) < 0)
    return -1;
  /* A relative target is under the working directory, as in BuildKit */
  const char *wd = config_string (st->config, "WorkingDir");
  cleanup_free char *joined = ms.target[0] == '/' ? xstrdup (ms.target)
                                                 : ib_path_join (wd && *wd ? wd : "/", ms.target);
  char *target = ib_path_clean_abs (joined);
  ib_mount_t m = { .target = rm_keep (r, target), .readonly = ms.readonly };
  int ret = -1;
  if (ms.type == IB_MSPEC_TMPFS)
    {
      m.type = IB_MOUNT_TMPFS;
      m.data = rm_keep (r, ms.size ? xasprintf ("size=%s,mode=1777", ms.size)
                                   : xstrdup ("mode=1777"));
    }
  else if (ms.type == IB_MSPEC_BIND)
    {
      const char *root = b->context;
      if (ms.from)
        {
          int idx = stage_index (b, ms.from);
          if (idx < 0 && strspn (ms.from, "0123456789") == strlen (ms.from))
            idx = atoi (ms.from);
          if (idx < 0 || (size_t) idx >= (size_t) (st - b->stages))
            {
              ib_error_set (err, ENOENT,
                            "--mount=%s: from=%s: no earlier stage of that name (images in "
                            "from= are not supported yet)",
                            value, ms.from);
              goto out;
            }
          root = b->stages[idx].rootfs;
        }
      cleanup_free char *src = NULL;
      if (ib_root_resolve (root, ms.source ? ms.source : ".", true, &src, err) < 0)
        {
          ib_error_prefix (err, "--mount=%s", value);
          goto out;
        }
      struct stat sst;
      if (stat (src, &sst) < 0)
        {
          ib_error_sys (err, errno, "--mount=%s: source %s", value, ms.source ? ms.source : ".");
          goto out;
        }
      /* From the context, what .dockerignore leaves out is not there (the
       * context BuildKit receives lacks it): the mount shows a filtered copy
       * when the source holds any such name. */
      const char *crel = ms.from ? NULL : src + strlen (root);
      while (crel && *crel == '/')
        crel++;
      ib_path_filter_t filter = { .ignore = b->ignore, .ignore_base = crel };
      bool filtered = false;
      if (crel && !ib_ignore_empty (b->ignore))
        {
          if (*crel && ib_ignore_excluded (b->ignore, crel))
            {
              ib_error_set (err, ENOENT, "--mount=%s: source %s is excluded by .dockerignore",
                            value, ms.source ? ms.source : ".");
              goto out;
            }
          filtered = S_ISDIR (sst.st_mode) && filter_leaves_out (src, "", &filter);
        }
      if (ms.rw || filtered)
        {
          /* BuildKit: writes to a bind mount are discarded; they go to a
           * copy made for this step. */
          cleanup_free char *tmp = NULL;
          if (ib_store_tmp_dir (b->store, "bind", &tmp, err) < 0)
            goto out;
          ib_strv_push (&r->copies, tmp);
          cleanup_free char *dst = ib_path_join (tmp, "src");
          ib_copy_opts_t co = { .chmod = -1, .filter = &filter };
          if ((filtered ? ib_copy_into (src, dst, true, &co, err) : ib_copy_tree (src, dst, err)) < 0)
            {
              ib_error_prefix (err, "--mount=%s: copy the source", value);
              goto out;
            }
          free (src);
          src = steal_pointer (&dst);
        }
      m.type = IB_MOUNT_BIND;
      m.readonly = !ms.rw;
      m.source = rm_keep (r, steal_pointer (&src));
    }
  else
    {
      const char *id = ms.id ? ms.id : ms.target;
      char *dir = NULL;
      bool created = false;
      if (ib_store_cache_mount_dir (b->store, id, true, &dir, &created, err) < 0)
        goto out;
      rm_keep (r, dir);
      if (created && (chmod (dir, ms.mode) < 0 || chown (dir, ms.uid, ms.gid) < 0))
        {
          ib_error_sys (err, errno, "--mount=%s: cache directory %s", value, dir);
          goto out;
        }
      if (ms.sharing && strcmp (ms.sharing, "shared") != 0)
        {
          /* locked (and private, which imgbuild treats as locked): one step
           * at a time uses the cache; the others wait. */
          cleanup_free char *lp = xasprintf ("%s.lock", dir);
          int fd = open (lp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
          if (fd < 0)
            {
              ib_error_sys (err, errno, "--mount=%s: lock %s", value, lp);
              goto out;
            }
          r->locks = xrealloc (r->locks, sizeof (int) * (r->n_locks + 1));
          r->locks[r->n_locks++] = fd;
          if (flock (fd, LOCK_EX | LOCK_NB) < 0)
            {
              ib_info ("waiting for the cache mount %s (sharing=%s)", id, ms.sharing);
              while (flock (fd, LOCK_EX) < 0)
                if (errno != EINTR)
                  {
                    ib_error_sys (err, errno, "--mount=%s: lock %s", value, lp);
                    goto out;
                  }
            }
        }
      m.type = IB_MOUNT_BIND;
      m.source = dir;
    }
  r->v = xrealloc (r->v, sizeof *r->v * (r->n + 1));
  r->v[r->n++] = m;
  ret = 0;
out:
  ib_mount_spec_clear (&ms);
  return ret;
}

/* Set "K=V" in an environment vector, replacing an earlier K. */
static void
env_set (char ***env, const char *kv)
{
  size_t kl = strcspn (kv, "=");
  for (char **e = *env; e && *e; e++)
    if (strncmp (*e, kv, kl) == 0 && (*e)[kl] == '=')
      {
        free (*e);
        *e = xstrdup (kv);
        return;
      }
  ib_strv_push (env, kv);
}

/* An earlier stage named (or numbered) `name`, or NULL. */
static stage_state_t *
earlier_stage (build_t *b, stage_state_t *st, const char *name)
{
  int idx = stage_index (b, name);
  if (idx < 0 && *name && strspn (name, "0123456789") == strlen (name))
    idx = atoi (name);
  if (idx < 0 || (size_t) idx >= (size_t) (st - b->stages))
    return NULL;
  return &b->stages[idx];
}

static void
key_str (ib_buf_t *t, const char *what, const char *s)
{
  ib_buf_printf (t, "%s %zu:%s\n", what, strlen (s), s);
}

/* The key text of a RUN (see builder/cache.h): the command, its flags
 * expanded, the content of context bind mounts, the identity of stages it
 * mounts, every ARG in scope (its environment), the build's devices and
 * the layer format.  Malformed --mount values are left for the step to
 * report. */
static int
run_key_text (build_t *b, stage_state_t *st, const ib_instr_t *in, char **argv, char **out,
              ib_error_t *err)
{
  ib_buf_t t = { 0 };
  ib_buf_printf (&t, "RUN %s\n", in->json_form ? "exec" : "shell");
  for (char **a = argv; *a; a++)
    key_str (&t, "argv", *a);
  key_str (&t, "text", in->text ? in->text : "");
  for (char **f = in->flags; f && *f; f++)
    {
      cleanup_free char *x = NULL;
      if (expand (b, st, *f, &x, err) < 0)
        {
          ib_buf_free (&t);
          return -1;
        }
      key_str (&t, "flag", x);
      if (!ib_str_has_prefix (x, "--mount="))
        continue;
      ib_mount_spec_t ms;
      ib_error_t e2 = NULL;
      if (ib_mount_spec_parse (x + 8, &ms, &e2) < 0)
        {
          ib_error_free (&e2);
          continue;
        }
      if (ms.type == IB_MSPEC_BIND && ms.from == NULL)
        key_context_path (b, &t, ms.source ? ms.source : ".", NULL);
      else if (ms.type == IB_MSPEC_BIND)
        {
          stage_state_t *src = earlier_stage (b, st, ms.from);
          ib_buf_printf (&t, "stage %s\n", src ? src->key : "none");
        }
      ib_mount_spec_clear (&ms);
    }
  for (size_t i = 0; i < st->args.n; i++)
    {
      key_str (&t, "arg", st->args.names[i]);
      key_str (&t, "=", st->args.values[i] ? st->args.values[i] : "");
    }
  for (char **d = b->opts->devices; d && *d; d++)
    key_str (&t, "device", *d);
  key_layer_format (b, &t);
  *out = ib_buf_steal (&t);
  return 0;
}

/* RUN --mount=type=bind,from=STAGE reads STAGE's tree: make it. */
static int
ensure_mount_sources (build_t *b, stage_state_t *st, const ib_instr_t *in, ib_error_t *err)
{
  cleanup_strv char **vals = ib_instr_flag_values (in, "mount");
  for (char **v = vals; *v; v++)
    {
      cleanup_free char *x = NULL;
      ib_error_t e2 = NULL;
      ib_mount_spec_t ms;
      if (expand (b, st, *v, &x, &e2) < 0 || ib_mount_spec_parse (x, &ms, &e2) < 0)
        {
          ib_error_free (&e2); /* reported by run_mount_one */
          continue;
        }
      stage_state_t *src = ms.type == IB_MSPEC_BIND && ms.from ? earlier_stage (b, st, ms.from)
                                                                : NULL;
      ib_mount_spec_clear (&ms);
      if (src && ensure_rootfs (b, src, err) < 0)
        return -1;
    }
  return 0;
}

/* --keep-on-failure / --debug-shell: the tree of the failed RUN (with
 * whatever the command changed) is kept under the store's tmp/ as
 * debug-STAGE-XXXXXX, the command that looks around in it is printed, and
 * with --debug-shell a shell is opened there, in the same sandbox (user,
 * working directory, environment; without the step's --mount, --device).
 * Nothing here fails the build further. */
static void
keep_failed_tree (build_t *b, stage_state_t *st, char **env, const char *cwd, uid_t uid, gid_t gid)
{
  cleanup_free char *prefix = xasprintf ("debug-%s", stage_label (st));
  cleanup_free char *dir = NULL;
  ib_error_t e = NULL;
  bool ovl = ib_rootfs_is_overlay (st->rootfs);
  if (ib_store_tmp_dir (b->store, prefix, &dir, &e) < 0 || rmdir (dir) < 0
      || (ovl ? ib_copy_tree (st->rootfs, dir, &e) < 0 || ib_rootfs_remove (st->rootfs, &e) < 0
              : rename (st->rootfs, dir) < 0))
    {
      ib_warn ("--keep-on-failure: %s", e ? e->msg : strerror (errno));
      ib_error_free (&e);
      return;
    }
  /* the stage's rootfs path now names nothing: build_free has nothing to remove */
  ib_buf_t c = { 0 };
  ib_buf_printf (&c, "imgbuild --store '%s' run --rootfs '%s' -w '%s'", b->store->root, dir, cwd);
  if (uid != 0 || gid != 0)
    ib_buf_printf (&c, " -u %u:%u", (unsigned) uid, (unsigned) gid);
  for (char **v = env; v && *v; v++)
    if ((!ib_str_has_prefix (*v, "PATH=") || strcmp (*v, DEFAULT_PATH) != 0)
        && (!ib_str_has_prefix (*v, "HOME=") || config_env_get (st->config, "HOME")))
      ib_buf_printf (&c, " -e '%s'", *v); /* run sets PATH and HOME as the step had them */
  ib_buf_printf (&c, " -- %s", st->shell && st->shell[0] ? st->shell[0] : "/bin/sh");
  cleanup_free char *cmd = ib_buf_steal (&c);
  ib_warn ("the failed step's tree is kept in %s; to look around in it:\n  %s", dir, cmd);
  if (!b->opts->debug_shell)
    return;
  if (!isatty (STDIN_FILENO))
    {
      ib_warn ("--debug-shell: stdin is not a terminal: run the command above instead");
      return;
    }
  if (b->stage_process)
    {
      /* the other stages' processes and the display share the terminal */
      ib_warn ("--debug-shell: with -j the stages share the terminal: run the command above "
               "instead");
      return;
    }
  prog_pause (b);
  char *argv[] = { st->shell && st->shell[0] ? st->shell[0] : (char *) "/bin/sh", NULL };
  ib_sandbox_opts_t so = { .rootfs = dir, .argv = argv, .env = env, .cwd = cwd, .uid = uid,
                           .gid = gid, .keep_stdin = true, .tty = true,
                           .provide_etc_files = true };
  int status = 0;
  ib_info ("--debug-shell: a shell in the failed step's tree (exit to end the build)");
  if (ib_sandbox_run (&so, &status, &e) < 0)
    {
      ib_warn ("--debug-shell: %s", e->msg);
      ib_error_free (&e);
    }
  prog_resume (b);
}

static int
do_run (build_t *b, stage_state_t *st, const ib_instr_t *in, ib_error_t *err)
{
  const char *net = ib_instr_flag (in, "network");
  for (char **f = in->flags; f && *f; f++)
    if (ib_str_has_prefix (*f, "--security="))
      {
        if (strcmp (*f, "--security=sandbox") != 0)
          return ib_error_set (err, ENOTSUP,
                               "%s is not supported: imgbuild never gives a step more than its "
                               "sandbox (use --security=sandbox, the default)",
                               *f);
      }
    else if (!ib_str_has_prefix (*f, "--network=") && !ib_str_has_prefix (*f, "--mount=")
             && !ib_str_has_prefix (*f, "--device="))
      return ib_error_set (err, ENOTSUP, "%s is not supported yet", *f);
  if (net && strcmp (net, "host") != 0 && strcmp (net, "none") != 0 && strcmp (net, "default") != 0)
    return ib_error_set (err, EINVAL, "--network=%s: expected host, none or default", net);
  if (st->foreign)
    {
      const char *os, *arch, *variant;
      ib_host_platform (&os, &arch, &variant);
      cleanup_free char *host = ib_platform_string (os, arch, variant);
      return ib_error_set (err, ENOEXEC, "cannot run %s binaries on %s (the stage is FROM "
                           "--platform=%s; only COPY and COPY --from work there)",
                           st->foreign, host, st->foreign);
    }

  cleanup_strv char **argv = NULL;
  cleanup_free char *shown = NULL;
  if (in->json_form)
    {
      argv = ib_strv_dup (in->args);
      ib_buf_t s = { 0 };
      for (char **a = argv; *a; a++)
        ib_buf_printf (&s, "%s%s", a == argv ? "" : " ", *a);
      shown = ib_buf_steal (&s);
    }
  else
    {
      /* Shell form: the shell expands variables itself at run time. */
      argv = ib_strv_dup (st->shell);
      ib_strv_push (&argv, in->text);
      shown = xstrdup (in->text);
    }
  /* RUN <<EOF whose body starts with "#!": BuildKit runs the body as a
   * file (at /dev/pipes/NAME), so its interpreter line counts. */
  const ib_heredoc_t *script = in->heredoc_script && in->n_heredocs
                                       && ib_str_has_prefix (in->heredocs[0].content, "#!")
                                   ? &in->heredocs[0]
                                   : NULL;
  cleanup_free char *script_path = NULL;
  if (script)
    {
      if (strchr (script->name, '/') || !*script->name)
        return ib_error_set (err, EINVAL, "heredoc name '%s' is not a file name", script->name);
      script_path = xasprintf ("/dev/pipes/%s", script->name);
      ib_strv_free (argv);
      argv = NULL;
      ib_strv_push (&argv, script_path);
    }
  char key[IB_DIGEST_LEN];
  {
    cleanup_free char *text = NULL;
    if (run_key_text (b, st, in, argv, &text, err) < 0)
      return -1;
    ib_cache_key (st->key, text, key);
  }
  if (cache_lookup (b, st, key))
    {
      step_line (b, st, "RUN", shown, true, true);
      return 0;
    }
  step_line (b, st, "RUN", shown, false, true);
  if (ensure_rootfs (b, st, err) < 0 || ensure_mount_sources (b, st, in, err) < 0)
    return -1;

  cleanup_strv char **env = run_env (b, st);
  uid_t uid;
  gid_t gid;
  if (resolve_user (st, &uid, &gid, err) < 0)
    return -1;
  run_mounts_t mounts = { 0 };
  cleanup_strv char **mount_flags = ib_instr_flag_values (in, "mount");
  for (char **f = mount_flags; *f; f++)
    if (run_mount_one (b, st, *f, &mounts, err) < 0)
      {
        run_mounts_free (&mounts);
        return -1;
      }
  if (script)
    {
      char *dir = NULL;
      if (ib_store_tmp_dir (b->store, "heredoc", &dir, err) < 0)
        {
          run_mounts_free (&mounts);
          return -1;
        }
      ib_strv_push (&mounts.copies, dir); /* removed with the mounts */
      char *file = ib_path_join (dir, "script");
      free (dir);
      rm_keep (&mounts, file);
      if (ib_write_file_atomic (file, script->content, strlen (script->content), 0755, err) < 0)
        {
          run_mounts_free (&mounts);
          return -1;
        }
      ib_mount_t m = { .type = IB_MOUNT_BIND, .source = file,
                       .target = rm_keep (&mounts, xstrdup (script_path)), .readonly = true };
      mounts.v = xrealloc (mounts.v, sizeof *mounts.v * (mounts.n + 1));
      mounts.v[mounts.n++] = m;
    }
  /* Devices (CDI, NVIDIA discovery): the build's --device, then the
   * step's; their mounts follow the step's own. */
  ib_gpu_edits_t gpu = { 0 };
  cleanup_strv char **dev_flags = ib_instr_flag_values (in, "device");
  cleanup_strv char **devices = ib_strv_dup (b->opts->devices);
  for (char **f = dev_flags; *f; f++)
    {
      cleanup_free char *x = NULL;
      if (expand (b, st, *f, &x, err) < 0)
        {
          run_mounts_free (&mounts);
          return -1;
        }
      ib_strv_push (&devices, x);
    }
  if (devices && *devices)
    {
      cleanup_strv char **step_env = run_env (b, st);
      ib_gpu_opts_t go = { .spec_dirs = b->opts->cdi_spec_dirs };
      for (char **e = step_env; e && *e; e++)
        if (ib_str_has_prefix (*e, "NVIDIA_VISIBLE_DEVICES="))
          go.visible_devices = strchr (*e, '=') + 1;
        else if (ib_str_has_prefix (*e, "NVIDIA_DRIVER_CAPABILITIES="))
          go.capabilities = strchr (*e, '=') + 1;
      for (char **d = devices; *d; d++)
        if (ib_gpu_resolve (*d, &go, &gpu, err) < 0)
          {
            ib_gpu_edits_free (&gpu);
            run_mounts_free (&mounts);
            return -1;
          }
      for (size_t k = 0; k < gpu.n_mounts; k++)
        {
          mounts.v = xrealloc (mounts.v, sizeof *mounts.v * (mounts.n + 1));
          mounts.v[mounts.n++] = gpu.mounts[k];
        }
    }
  for (char **kv = gpu.env; kv && *kv; kv++)
    env_set (&env, *kv);
  ib_env_default_home (&env, st->rootfs, uid); /* as runc, so Docker, BuildKit, buildah */
  step_scan_t before = { 0 };
  if (step_scan_begin (st, &before, err) < 0)
    {
      run_mounts_free (&mounts);
      ib_gpu_edits_free (&gpu);
      return -1;
    }
  const char *wd = config_string (st->config, "WorkingDir");
  cleanup_free char *tail = NULL;
  ib_sandbox_opts_t so = {
    .rootfs = st->rootfs,
    .argv = argv,
    .env = env,
    .cwd = wd && *wd ? wd : "/",
    .uid = uid,
    .gid = gid,
    .network_none = net && strcmp (net, "none") == 0,
    .tail_lines = TAIL_LINES,
    .tail = &tail,
    .provide_etc_files = true, /* DNS in images without /etc/resolv.conf */
    .mounts = mounts.v,
    .n_mounts = mounts.n,
    .symlinks = gpu.symlinks,
    .n_symlinks = gpu.n_symlinks,
    .ldconfig = gpu.ldconfig,
    .ldconfig_dirs = gpu.ldconfig_dirs,
    .output_fn = b->prog ? step_output : NULL,
    .output_ud = b,
  };
  int status = 0;
  int sr = ib_sandbox_run (&so, &status, err);
  run_mounts_free (&mounts);
  ib_gpu_edits_free (&gpu);
  if (sr < 0)
    {
      step_scan_free (&before);
      return -1;
    }
  if (status != 0)
    {
      step_scan_free (&before);
      if (b->opts->keep_on_failure || b->opts->debug_shell)
        keep_failed_tree (b, st, env, so.cwd, uid, gid);
      return ib_error_set (err, ECHILD, "%s: exit status %d%s%s", shown, status,
                           tail && *tail ? "; last output lines:\n" : "", tail ? tail : "");
    }
  /* BuildKit's history text: the stage's ARGs (an ENV of the same name
   * wins) as "|N K=V ..." before the command */
  ib_buf_t hb = { 0 };
  ib_buf_puts (&hb, "RUN ");
  if (st->args.n)
    {
      ib_buf_printf (&hb, "|%zu ", st->args.n);
      for (size_t k = 0; k < st->args.n; k++)
        {
          const char *ev = config_env_get (st->config, st->args.names[k]);
          ib_buf_printf (&hb, "%s=%s ", st->args.names[k],
                         ev ? ev : st->args.values[k] ? st->args.values[k] : "");
        }
    }
  ib_buf_printf (&hb, "%s%s", in->json_form ? "" : "/bin/sh -c ", shown);
  cleanup_free char *created_by = ib_buf_steal (&hb);
  int r = commit_layer (b, st, &before, created_by, err);
  step_scan_free (&before);
  if (r == 0)
    cache_record (b, st, key);
  return r;
}

/* A path inside the context dir: no escape through ".." or symlinks. */
static int
context_path (build_t *b, const char *src, char **out, ib_error_t *err)
{
  return ib_root_resolve (b->context, src, true, out, err);
}


/* A COPY/ADD source as a path relative to its root: "/" and "./" in front
 * dropped, "" -> ".". */
static char *
source_rel (const char *word)
{
  while (*word == '/' || (word[0] == '.' && word[1] == '/'))
    word += word[0] == '/' ? 1 : 2;
  return xstrdup (*word ? word : ".");
}

/* The sources a COPY/ADD word names under `root`, relative to it: the word
 * itself, or the sorted matches of a pattern (`*`, `?`, `[...]`: Go's
 * filepath.Match, dotfiles included), leaving out what `ignore`
 * (.dockerignore) excludes.  A pattern matching nothing is an error, as in
 * Docker; a plain path is checked when it is copied. */
static int
source_matches (const char *root, const char *word, const ib_ignore_t *ignore, char ***out,
                ib_error_t *err)
{
  cleanup_free char *rel = source_rel (word);
  if (strpbrk (rel, "*?[") == NULL)
    {
      if (!ib_ignore_excluded (ignore, rel))
        ib_strv_push (out, rel);
      return 0;
    }
  cleanup_free char *pattern = xasprintf ("%s/%s", root, rel);
  glob_t g;
  int r = glob (pattern, GLOB_PERIOD, NULL, &g);
  size_t found = 0;
  if (r == 0)
    for (size_t i = 0; i < g.gl_pathc; i++)
      {
        const char *m = g.gl_pathv[i] + strlen (root) + 1;
        const char *base = strrchr (m, '/');
        base = base ? base + 1 : m;
        if (strcmp (base, ".") == 0 || strcmp (base, "..") == 0 || ib_ignore_excluded (ignore, m))
          continue;
        ib_strv_push (out, m);
        found++;
      }
  if (r == 0)
    globfree (&g);
  if (found == 0)
    return ib_error_set (err, ENOENT, "%s: no source files were specified (nothing matches)", word);
  return 0;
}

static void
ignore_freep (ib_ignore_t **p)
{
  ib_ignore_free (*p);
}

static int
do_copy (build_t *b, stage_state_t *st, const ib_instr_t *in, ib_error_t *err)
{
  const char *from = ib_instr_flag (in, "from");
  const char *chown_spec = ib_instr_flag (in, "chown");
  const char *chmod_spec = ib_instr_flag (in, "chmod");
  const char *parents_flag = ib_instr_flag (in, "parents");
  bool parents = parents_flag && strcmp (parents_flag, "true") == 0;
  bool add = in->kind == IB_I_ADD;
  for (char **f = in->flags; f && *f; f++)
    if (!ib_str_has_prefix (*f, "--from=") && !ib_str_has_prefix (*f, "--chown=")
        && !ib_str_has_prefix (*f, "--chmod=") && !ib_str_has_prefix (*f, "--exclude=")
        && !ib_str_has_prefix (*f, "--parents=") && !ib_str_has_prefix (*f, "--link=")
        && !(add && ib_str_has_prefix (*f, "--checksum=")))
      return ib_error_set (err, ENOTSUP, "%s is not supported yet", *f);
  cleanup_free char *checksum = NULL;
  if (ib_instr_flag (in, "checksum"))
    {
      if (expand (b, st, ib_instr_flag (in, "checksum"), &checksum, err) < 0)
        return -1;
      if (!ib_digest_valid (checksum))
        return ib_error_set (err, EINVAL, "--checksum=%s: expected sha256:<64 hex digits>",
                             checksum);
    }

  stage_state_t *src_stage = NULL;
  if (from)
    {
      cleanup_free char *fx = NULL;
      if (expand (b, st, from, &fx, err) < 0)
        return -1;
      src_stage = earlier_stage (b, st, fx);
      if (src_stage == NULL)
        return ib_error_set (err, ENOENT,
                             "--from=%s: no earlier stage of that name (images in --from are "
                             "not supported yet)",
                             fx);
    }

  /* Files of the context are 0:0 unless --chown; COPY --from keeps the
   * source stage's owners unless --chown (BuildKit: no chown option). */
  ib_copy_opts_t co = { .chmod = -1, .set_owner = from == NULL || chown_spec != NULL,
                        .root = st->rootfs };
  cleanup_free char *chown_x = NULL;
  if (chown_spec && expand (b, st, chown_spec, &chown_x, err) < 0)
    return -1;
  if (chmod_spec)
    {
      char *end = NULL;
      long m = strtol (chmod_spec, &end, 8);
      if (*end || m < 0 || m > 07777)
        return ib_error_set (err, EINVAL, "--chmod=%s: expected an octal mode", chmod_spec);
      co.chmod = (int) m;
    }
  /* --exclude: patterns relative to each source, as .dockerignore's */
  cleanup_strv char **ex_raw = ib_instr_flag_values (in, "exclude");
  cleanup_strv char **ex_words = NULL;
  for (char **e = ex_raw; *e; e++)
    {
      cleanup_free char *x = NULL;
      if (expand (b, st, *e, &x, err) < 0)
        return -1;
      ib_strv_push (&ex_words, x);
    }
  __attribute__ ((cleanup (ignore_freep))) ib_ignore_t *excl
      = ex_words ? ib_ignore_from_patterns (ex_words) : NULL;

  size_t n = ib_strv_len (in->args);
  cleanup_strv char **words = NULL;
  /* heredoc sources (COPY <<EOF /dest): their content, expanded as
   * BuildKit does unless the delimiter was quoted; "" for other words */
  cleanup_strv char **hdoc = NULL;
  for (size_t i = 0; i < n; i++)
    {
      char *w = NULL;
      const ib_heredoc_t *h = i + 1 < n ? ib_instr_heredoc (in, i) : NULL;
      char *content = NULL;
      if (h)
        {
          lookup_ctx_t lc = { st, &st->args };
          if (h->expand && ib_expand (h->content, escape_char (b), lookup, &lc, &content, err) < 0)
            return -1;
          if (content && expand_count (b, strlen (content), err) < 0)
            {
              free (content);
              return -1;
            }
          w = xstrdup (in->args[i]);
        }
      else if (expand (b, st, in->args[i], &w, err) < 0)
        return -1;
      ib_strv_push (&words, w);
      ib_strv_push (&hdoc, h ? (content ? content : h->content) : "");
      free (w);
      free (content);
    }
  const char *dest = words[n - 1];
  cleanup_free char *dest_abs = NULL;
  if (dest[0] == '/')
    dest_abs = xstrdup (dest);
  else
    {
      const char *wd = config_string (st->config, "WorkingDir");
      dest_abs = ib_path_join (wd && *wd ? wd : "/", dest);
    }
  /* Context sources, patterns expanded now (their content is part of the
   * key); a stage's sources are expanded when the step runs. */
  cleanup_strv char **ctx_srcs = NULL; /* per source word: "\1" separated matches */
  size_t n_sources = 0;
  /* ADD of URLs: downloaded now unless --checksum names the content (then
   * only when the step runs); the key holds the content's digest */
  cleanup_strv char **url_files = NULL; /* per source word: downloaded file, or "" */
  cleanup_strv char **url_digests = NULL;
  /* declared before the first goto: cleanup must never see them uninitialised */
  cleanup_free char *shown = NULL;
  cleanup_free char *line = NULL;
  cleanup_free char *dst_host = NULL;
  cleanup_free char *hdoc_dir = NULL;
  step_scan_t before = { 0 };
  int ret = -1;
  for (size_t i = 0; i + 1 < n; i++)
    {
      ib_strv_push (&url_files, "");
      ib_strv_push (&url_digests, "");
    }
  for (size_t i = 0; i + 1 < n; i++)
    {
      cleanup_strv char **m = NULL;
      bool url = add && !ib_instr_heredoc (in, i) && strstr (words[i], "://");
      if (url && !checksum)
        {
          cleanup_free char *tmpf = NULL;
          int fd = ib_store_tmp_file (b->store, "add-url", &tmpf, err);
          if (fd < 0)
            goto out_urls;
          close (fd);
          char d[IB_DIGEST_LEN];
          time_t mt = 0;
          free (url_files[i]);
          url_files[i] = xstrdup (tmpf);
          if (ib_add_download (words[i], tmpf, d, &mt, err) < 0)
            goto out_urls;
          free (url_digests[i]);
          url_digests[i] = xasprintf ("%s %lld", d, (long long) mt);
        }
      if (!url && !ib_instr_heredoc (in, i) && !src_stage
          && source_matches (b->context, words[i], b->ignore, &m, err) < 0)
        goto out_urls;
      ib_buf_t j = { 0 };
      for (char **x = m; x && *x; x++)
        ib_buf_printf (&j, "%s%s", x == m ? "" : "\1", *x);
      char *joined = ib_buf_steal (&j);
      ib_strv_push (&ctx_srcs, joined);
      free (joined);
      n_sources += m ? ib_strv_len (m) : 1;
    }
  bool dst_is_dir = ib_str_has_suffix (dest, "/") || n_sources > 1 || n > 2;
  {
    ib_buf_t s = { 0 };
    for (size_t i = 0; i < n; i++)
      ib_buf_printf (&s, "%s%s", i ? " " : "", words[i]);
    shown = ib_buf_steal (&s);
  }
  char key[IB_DIGEST_LEN];
  {
    ib_buf_t t = { 0 };
    ib_buf_printf (&t, "%s\n", in->keyword);
    if (src_stage)
      ib_buf_printf (&t, "from %s\n", src_stage->key);
    if (chown_x)
      key_str (&t, "chown", chown_x);
    ib_buf_printf (&t, "chmod %d parents %d\n", co.chmod, parents);
    for (char **e = ex_words; e && *e; e++)
      key_str (&t, "exclude", *e);
    for (size_t i = 0; i < n; i++)
      key_str (&t, "word", words[i]);
    key_str (&t, "dest", dest_abs);
    for (size_t i = 0; i + 1 < n; i++)
      if (ib_instr_heredoc (in, i))
        {
          key_str (&t, "heredoc", ib_instr_heredoc (in, i)->name);
          key_str (&t, "content", hdoc[i]);
        }
      else if (add && strstr (words[i], "://"))
        {
          key_str (&t, "url", words[i]);
          key_str (&t, "url-content", checksum ? checksum : url_digests[i]);
        }
      else if (!src_stage)
        {
          cleanup_free char *list = xstrdup (ctx_srcs[i]);
          char *save = NULL;
          for (char *m = strtok_r (list, "\1", &save); m; m = strtok_r (NULL, "\1", &save))
            key_context_path (b, &t, m, excl);
          if (!*ctx_srcs[i])
            key_str (&t, "excluded", words[i]);
        }
    key_layer_format (b, &t);
    cleanup_free char *text = ib_buf_steal (&t);
    ib_cache_key (st->key, text, key);
  }
  line = xasprintf ("%s%s%s%s", from ? "--from=" : "", from ? from : "", from ? " " : "", shown);
  if (cache_lookup (b, st, key))
    {
      step_line (b, st, in->keyword, line, true, true);
      ret = 0;
      goto out;
    }
  step_line (b, st, in->keyword, line, false, true);
  if (ensure_rootfs (b, st, err) < 0 || (src_stage && ensure_rootfs (b, src_stage, err) < 0))
    goto out;
  const char *src_root = src_stage ? src_stage->rootfs : NULL;
  if (chown_x && ib_lookup_user (st->rootfs, chown_x, &co.uid, &co.gid, err) < 0)
    goto out;

  if (step_scan_begin (st, &before, err) < 0)
    goto out;
  if (ib_root_resolve (st->rootfs, dest_abs, true, &dst_host, err) < 0)
    goto out;
  for (size_t i = 0; i + 1 < n; i++)
    {
      const ib_heredoc_t *h = ib_instr_heredoc (in, i);
      if (h)
        {
          /* the heredoc as a file named by its delimiter, mode 0644 */
          if (hdoc_dir == NULL && ib_store_tmp_dir (b->store, "heredoc", &hdoc_dir, err) < 0)
            goto out;
          cleanup_free char *src_host = ib_path_join (hdoc_dir, h->name);
          if (strchr (h->name, '/') || ib_write_file_atomic (src_host, hdoc[i], strlen (hdoc[i]),
                                                             0644, err) < 0)
            {
              if (strchr (h->name, '/'))
                ib_error_set (err, EINVAL, "heredoc name '%s' holds a '/'", h->name);
              goto out;
            }
          if (ib_copy_into (src_host, dst_host, dst_is_dir, &co, err) < 0)
            goto out;
          continue;
        }
      if (add && strstr (words[i], "://"))
        {
          /* a URL: downloaded (mode 0600, Last-Modified as mtime), never
           * extracted; a directory destination gets the URL's file name */
          char d[IB_DIGEST_LEN];
          time_t mt = 0;
          if (!*url_files[i])
            {
              cleanup_free char *tmpf = NULL;
              int fd = ib_store_tmp_file (b->store, "add-url", &tmpf, err);
              if (fd < 0)
                goto out;
              close (fd);
              free (url_files[i]);
              url_files[i] = xstrdup (tmpf);
              if (ib_add_download (words[i], tmpf, d, &mt, err) < 0)
                goto out;
              if (checksum && strcmp (checksum, d) != 0)
                {
                  ib_error_set (err, EINVAL, "%s: checksum mismatch: --checksum=%s, the content is %s",
                                words[i], checksum, d);
                  goto out;
                }
            }
          else
            mt = (time_t) strtoll (strchr (url_digests[i], ' ') + 1, NULL, 10);
          if (mt > 0)
            {
              struct timespec ts[2] = { { mt, 0 }, { mt, 0 } };
              utimensat (AT_FDCWD, url_files[i], ts, 0);
            }
          cleanup_free char *base = ib_add_url_basename (words[i]);
          cleanup_free char *target = dst_is_dir ? ib_path_join (dst_host, base) : xstrdup (dst_host);
          if (ib_copy_into (url_files[i], target, false, &co, err) < 0)
            goto out;
          continue;
        }
      cleanup_strv char **srcs = NULL;
      if (src_stage)
        {
          if (source_matches (src_root, words[i], NULL, &srcs, err) < 0)
            goto out;
        }
      else
        {
          cleanup_free char *list = xstrdup (ctx_srcs[i]);
          char *save = NULL;
          for (char *m = strtok_r (list, "\1", &save); m; m = strtok_r (NULL, "\1", &save))
            ib_strv_push (&srcs, m);
          if (srcs == NULL)
            {
              ib_error_set (err, ENOENT, "%s: no such file or directory in the build context "
                            "(excluded by .dockerignore)", words[i]);
              goto out;
            }
        }
      if (ib_strv_len (srcs) > 1 || dst_is_dir)
        dst_is_dir = true;
      for (char **m = srcs; *m; m++)
        {
          cleanup_free char *src_host = NULL;
          int r = src_root ? ib_root_resolve (src_root, *m, true, &src_host, err)
                           : context_path (b, *m, &src_host, err);
          if (r < 0)
            goto out;
          struct stat ssb;
          if (stat (src_host, &ssb) < 0)
            {
              ib_error_set (err, ENOENT, "%s: no such file or directory in %s", *m,
                            from ? "that stage" : "the build context");
              goto out;
            }
          const char *base = src_root ? src_root : b->context;
          const char *rel_in_root = src_host + strlen (base);
          while (*rel_in_root == '/')
            rel_in_root++;
          ib_path_filter_t filter = { .ignore = src_root ? NULL : b->ignore,
                                      .ignore_base = src_root ? NULL : rel_in_root,
                                      .exclude = excl };
          co.filter = &filter;
          cleanup_free char *target = NULL;
          bool into_dir = dst_is_dir;
          if (parents && strcmp (*m, ".") != 0)
            {
              /* --parents: the source's path under its root is kept */
              cleanup_free char *rel = source_rel (*m);
              char *slash = strrchr (rel, '/');
              if (S_ISDIR (ssb.st_mode))
                target = ib_path_join (dst_host, rel);
              else
                {
                  if (slash)
                    *slash = '\0';
                  target = slash ? ib_path_join (dst_host, rel) : xstrdup (dst_host);
                }
              into_dir = true;
            }
          if (add && S_ISREG (ssb.st_mode) && ib_add_is_archive (src_host))
            {
              /* ADD of a local tar archive: its contents go into DEST */
              r = ib_add_extract (src_host, dst_host, err);
              co.filter = NULL;
              if (r < 0)
                goto out;
              continue;
            }
          r = ib_copy_into (src_host, target ? target : dst_host, into_dir, &co, err);
          co.filter = NULL;
          if (r < 0)
            goto out;
        }
    }
  {
    cleanup_free char *created_by = xasprintf ("%s %s", in->keyword, shown);
    ret = commit_layer (b, st, &before, created_by, err);
    if (ret == 0)
      cache_record (b, st, key);
  }
out:
  if (hdoc_dir)
    {
      ib_error_t e2 = NULL;
      if (ib_rm_rf (hdoc_dir, &e2) < 0)
        ib_error_free (&e2);
    }
  step_scan_free (&before);
out_urls:
  for (char **u = url_files; u && *u; u++)
    if (**u)
      unlink (*u);
  return ret;
}

static int
do_workdir (build_t *b, stage_state_t *st, const ib_instr_t *in, ib_error_t *err)
{
  cleanup_free char *dir = NULL;
  if (expand (b, st, in->text, &dir, err) < 0)
    return -1;
  const char *cur = config_string (st->config, "WorkingDir");
  cleanup_free char *abs = dir[0] == '/' ? xstrdup (dir) : ib_path_join (cur && *cur ? cur : "/", dir);
  char key[IB_DIGEST_LEN];
  {
    ib_buf_t t = { 0 };
    key_str (&t, "WORKDIR", abs);
    key_layer_format (b, &t);
    cleanup_free char *text = ib_buf_steal (&t);
    ib_cache_key (st->key, text, key);
  }
  if (cache_lookup (b, st, key))
    {
      step_line (b, st, "WORKDIR", abs, true, true);
      return 0;
    }
  step_line (b, st, "WORKDIR", abs, false, true);
  if (ensure_rootfs (b, st, err) < 0)
    return -1;
  json_object_set_new (config_section (st->config), "WorkingDir", json_string (abs));
  step_scan_t before = { 0 };
  if (step_scan_begin (st, &before, err) < 0)
    return -1;
  cleanup_free char *host = NULL;
  /* after USER, the directories made are that user's (BuildKit) */
  const char *user = config_string (st->config, "User");
  ib_copy_opts_t owner = { .set_owner = user && *user };
  int r = owner.set_owner ? ib_lookup_user (st->rootfs, user, &owner.uid, &owner.gid, err) : 0;
  if (r == 0)
    r = ib_root_resolve (st->rootfs, abs, true, &host, err);
  if (r == 0)
    r = ib_mkdir_p_owned (host, &owner, err);
  cleanup_free char *created_by = xasprintf ("WORKDIR %s", abs);
  if (r == 0)
    r = commit_layer (b, st, &before, created_by, err);
  step_scan_free (&before);
  if (r == 0)
    cache_record (b, st, key);
  return r;
}

/* ------------------------------------------------------------------ */
/* Config-only instructions                                           */

static json_t *
argv_json (build_t *b, stage_state_t *st, const ib_instr_t *in)
{
  (void) b;
  json_t *a = json_array ();
  if (in->json_form)
    for (char **s = in->args; s && *s; s++)
      json_array_append_new (a, json_string (*s));
  else
    {
      for (char **s = st->shell; s && *s; s++)
        json_array_append_new (a, json_string (*s));
      json_array_append_new (a, json_string (in->text));
    }
  return a;
}

/* A Go duration as Docker's HEALTHCHECK flags take it ("30s", "1m30s",
 * "500ms", "1.5h"; units ns us µs ms s m h), in nanoseconds. */
static int
parse_duration (const char *flag, const char *v, int64_t *ns, ib_error_t *err)
{
  static const struct { const char *unit; double ns; } units[] = {
    { "ns", 1 }, { "us", 1e3 }, { "\xc2\xb5s", 1e3 }, { "ms", 1e6 }, { "s", 1e9 },
    { "m", 60e9 }, { "h", 3600e9 },
  };
  double total = 0;
  const char *s = v;
  if (*s == '\0')
    goto bad;
  if (strcmp (s, "0") == 0)
    {
      *ns = 0;
      return 0;
    }
  while (*s)
    {
      char *end;
      double n = strtod (s, &end);
      if (end == s || n < 0)
        goto bad;
      s = end;
      size_t best = 0;
      int found = -1;
      for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        {
          size_t l = strlen (units[i].unit);
          if (strncmp (s, units[i].unit, l) == 0 && l > best)
            {
              best = l;
              found = (int) i;
            }
        }
      if (found < 0)
        goto bad;
      total += n * units[found].ns;
      s += best;
    }
  if (total > 9.2e18)
    goto bad;
  *ns = (int64_t) total;
  if (*ns != 0 && *ns < 1000000)
    return ib_error_set (err, EINVAL, "HEALTHCHECK --%s=%s: at least 1ms, or 0", flag, v);
  return 0;
bad:
  return ib_error_set (err, EINVAL,
                       "HEALTHCHECK --%s=%s: expected a duration such as 30s, 1m30s or 500ms",
                       flag, v);
}

static int
do_healthcheck (build_t *b, stage_state_t *st, const ib_instr_t *in, json_t *c, ib_error_t *err)
{
  json_t *hc = json_object ();
  json_t *test = json_array ();
  json_object_set_new (hc, "Test", test);
  if (!in->json_form && in->args)
    json_array_append_new (test, json_string ("NONE"));
  else if (in->json_form)
    {
      json_array_append_new (test, json_string ("CMD"));
      for (char **a = in->args; a && *a; a++)
        json_array_append_new (test, json_string (*a));
    }
  else
    {
      json_array_append_new (test, json_string ("CMD-SHELL"));
      json_array_append_new (test, json_string (in->text));
    }
  static const struct { const char *flag, *key; } durations[] = {
    { "interval", "Interval" }, { "timeout", "Timeout" }, { "start-period", "StartPeriod" },
    { "start-interval", "StartInterval" },
  };
  for (size_t i = 0; i < sizeof durations / sizeof durations[0]; i++)
    {
      const char *raw = ib_instr_flag (in, durations[i].flag);
      if (raw == NULL)
        continue;
      cleanup_free char *v = NULL;
      int64_t ns = 0;
      if (expand (b, st, raw, &v, err) < 0 || parse_duration (durations[i].flag, v, &ns, err) < 0)
        {
          json_decref (hc);
          return -1;
        }
      if (ns)
        json_object_set_new (hc, durations[i].key, json_integer (ns));
    }
  const char *raw = ib_instr_flag (in, "retries");
  if (raw)
    {
      cleanup_free char *v = NULL;
      char *end;
      if (expand (b, st, raw, &v, err) < 0)
        {
          json_decref (hc);
          return -1;
        }
      errno = 0;
      long n = strtol (v, &end, 10);
      if (*v == '\0' || *end || errno || n < 0 || n > 1000000)
        {
          json_decref (hc);
          return ib_error_set (err, EINVAL, "HEALTHCHECK --retries=%s: expected a number", v);
        }
      if (n)
        json_object_set_new (hc, "Retries", json_integer (n));
    }
  json_object_set_new (c, "Healthcheck", hc);
  return 0;
}

static int
do_config (build_t *b, stage_state_t *st, const ib_instr_t *in, ib_error_t *err)
{
  json_t *c = config_section (st->config);
  cleanup_free char *created_by = xasprintf ("%s %s", in->keyword, in->text ? in->text : "");
  switch (in->kind)
    {
    case IB_I_ENV:
      for (size_t i = 0; i < in->n_kvs; i++)
        {
          cleanup_free char *v = NULL;
          if (expand (b, st, in->kvs[i].raw ? in->kvs[i].raw : "", &v, err) < 0)
            return ib_error_prefix (err, "%s", in->kvs[i].key);
          config_env_set (st->config, in->kvs[i].key, v);
        }
      break;
    case IB_I_LABEL:
      {
        json_t *labels = json_object_get (c, "Labels");
        if (!json_is_object (labels))
          {
            labels = json_object ();
            json_object_set_new (c, "Labels", labels);
          }
        for (size_t i = 0; i < in->n_kvs; i++)
          {
            cleanup_free char *k = NULL, *v = NULL;
            if (expand (b, st, in->kvs[i].key, &k, err) < 0
                || expand (b, st, in->kvs[i].raw ? in->kvs[i].raw : "", &v, err) < 0)
              return -1;
            json_object_set_new (labels, k, json_string (v));
          }
        break;
      }
    case IB_I_USER:
      {
        cleanup_free char *u = NULL;
        if (expand (b, st, in->text, &u, err) < 0)
          return -1;
        json_object_set_new (c, "User", json_string (u));
        break;
      }
    case IB_I_CMD:
      json_object_set_new (c, "Cmd", argv_json (b, st, in));
      st->cmd_set = true;
      break;
    case IB_I_ENTRYPOINT:
      json_object_set_new (c, "Entrypoint", argv_json (b, st, in));
      /* Dockerfile: ENTRYPOINT resets a CMD inherited from the base image,
       * not one set earlier in this stage (BuildKit's cmd.IsSet). */
      if (!st->cmd_set)
        json_object_del (c, "Cmd");
      break;
    case IB_I_EXPOSE:
    case IB_I_VOLUME:
      {
        const char *key = in->kind == IB_I_EXPOSE ? "ExposedPorts" : "Volumes";
        json_t *o = json_object_get (c, key);
        if (!json_is_object (o))
          {
            o = json_object ();
            json_object_set_new (c, key, o);
          }
        for (char **w = in->args; w && *w; w++)
          {
            cleanup_free char *x = NULL;
            if (expand (b, st, *w, &x, err) < 0)
              return -1;
            cleanup_free char *k = NULL;
            if (in->kind == IB_I_EXPOSE)
              {
                /* checked after expansion (EXPOSE $PORT), as BuildKit does */
                if (ib_expose_key (x, &k, err) < 0)
                  return -1;
              }
            else
              k = xstrdup (x);
            json_object_set_new (o, k, json_object ());
          }
        break;
      }
    case IB_I_STOPSIGNAL:
      {
        cleanup_free char *s = NULL;
        if (expand (b, st, in->text, &s, err) < 0 || ib_stop_signal (s, NULL, err) < 0)
          return -1;
        json_object_set_new (c, "StopSignal", json_string (s));
        break;
      }
    case IB_I_MAINTAINER:
      json_object_set_new (st->config, "author", json_string (in->text));
      break;
    case IB_I_HEALTHCHECK:
      if (do_healthcheck (b, st, in, c, err) < 0)
        return -1;
      free (created_by);
      created_by = in->json_form || !in->args
                       ? xasprintf ("HEALTHCHECK CMD %s", in->text)
                       : xstrdup ("HEALTHCHECK NONE");
      break;
    case IB_I_ONBUILD:
      {
        json_t *o = json_object_get (c, "OnBuild");
        if (!json_is_array (o))
          {
            o = json_array ();
            json_object_set_new (c, "OnBuild", o);
          }
        json_array_append_new (o, json_string (in->text));
        break;
      }
    case IB_I_SHELL:
      if (!in->json_form || ib_strv_len (in->args) == 0)
        return ib_error_set (err, EINVAL, "SHELL needs the JSON form, e.g. [\"/bin/bash\", \"-c\"]");
      ib_strv_free (st->shell);
      st->shell = ib_strv_dup (in->args);
      /* Docker and BuildKit record it (config Shell): images and stages
       * built FROM this one inherit it. */
      {
        json_t *a = json_array ();
        for (char **w = in->args; *w; w++)
          json_array_append_new (a, json_string (*w));
        json_object_set_new (c, "Shell", a);
      }
      break;
    default:
      return ib_error_set (err, ENOTSUP, "not supported yet");
    }
  add_history (b, st, created_by, true);
  return 0;
}

/* BuildKit's automatic platform ARGs (Dockerfile reference, "Automatic
 * platform ARGs in the global scope"): BUILD* name the platform imgbuild
 * runs on, TARGET* the build's --platform (default: the same).  They are
 * set in the global scope without a declaration (so FROM --platform=
 * $BUILDPLATFORM works) and reach a stage through `ARG NAME` without a
 * value, as any global ARG. */
static void
platform_args (build_t *b)
{
  const char *os, *arch, *variant;
  ib_host_platform (&os, &arch, &variant);
  cleanup_free char *tos = NULL, *tarch = NULL, *tvariant = NULL;
  ib_error_t e = NULL;
  if (b->opts->platform == NULL
      || ib_platform_parse (b->opts->platform, &tos, &tarch, &tvariant, &e) < 0)
    {
      ib_error_free (&e); /* checked by the CLI */
      tos = xstrdup (os), tarch = xstrdup (arch), tvariant = variant ? xstrdup (variant) : NULL;
    }
  const char *sides[2][4] = { { "BUILD", os, arch, variant }, { "TARGET", tos, tarch, tvariant } };
  for (int i = 0; i < 2; i++)
    {
      cleanup_free char *plat = ib_platform_string (sides[i][1], sides[i][2], sides[i][3]);
      const char *vals[4] = { plat, sides[i][1], sides[i][2], sides[i][3] ? sides[i][3] : "" };
      const char *names[4] = { "PLATFORM", "OS", "ARCH", "VARIANT" };
      for (int k = 0; k < 4; k++)
        {
          cleanup_free char *name = xasprintf ("%s%s", sides[i][0], names[k]);
          vars_set (&b->auto_args, name, vals[k]);
          vars_set (&b->global_args, name, vals[k]);
        }
    }
}

/* Docker's predefined ARGs: given with --build-arg they reach every RUN's
 * environment without an ARG instruction, and (as in BuildKit) stay out of
 * the history and of the cache key, as proxy settings differ between
 * machines that should share a cache. */
static bool
is_proxy_arg (const char *name)
{
  static const char *const names[] = { "HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy",
                                       "FTP_PROXY", "ftp_proxy", "NO_PROXY", "no_proxy",
                                       "ALL_PROXY", "all_proxy", NULL };
  for (const char *const *n = names; *n; n++)
    if (strcmp (*n, name) == 0)
      return true;
  return false;
}

static int
do_arg (build_t *b, stage_state_t *st, const ib_instr_t *in, ib_error_t *err)
{
  ib_buf_t hist = { 0 };
  for (size_t i = 0; i < in->n_kvs; i++)
    {
      const char *name = in->kvs[i].key;
      bool found = false;
      const char *v = NULL;
      for (size_t k = 0; k < b->build_args.n; k++)
        if (strcmp (b->build_args.names[k], name) == 0)
          {
            v = b->build_args.values[k];
            b->build_arg_used[k] = true;
            found = true;
          }
      cleanup_free char *value = NULL;
      if (st)
        {
          /* history: "ARG NAME" or "ARG NAME=default" as BuildKit writes it */
          ib_buf_printf (&hist, "%s%s", i ? " " : "ARG ", name);
          if (in->kvs[i].raw)
            {
              cleanup_free char *d = NULL;
              if (expand (b, st, in->kvs[i].raw, &d, err) < 0)
                {
                  ib_buf_free (&hist);
                  return ib_error_prefix (err, "%s", name);
                }
              ib_buf_printf (&hist, "=%s", d);
            }
        }
      if (!found && in->kvs[i].raw)
        {
          if (expand (b, st, in->kvs[i].raw, &value, err) < 0)
            {
              ib_buf_free (&hist);
              return ib_error_prefix (err, "%s", name);
            }
          v = value;
        }
      else if (!found && st)
        v = vars_get (&b->global_args, name, NULL); /* re-declared global ARG */
      if (!found && !in->kvs[i].raw && v == NULL)
        v = vars_get (&b->auto_args, name, NULL); /* ARG TARGETOS: the automatic value */
      vars_set (st ? &st->args : &b->global_args, name, v ? v : "");
    }
  if (st)
    {
      /* An empty-layer entry, as BuildKit records; its time is the previous
       * entry's (an ARG makes nothing), so that a rebuild from the cache,
       * whose steps keep their recorded times, gives the same image. */
      json_t *h = json_object_get (st->config, "history");
      size_t n = json_is_array (h) ? json_array_size (h) : 0;
      const char *prev = n ? json_string_value (json_object_get (json_array_get (h, n - 1),
                                                                 "created"))
                           : NULL;
      cleanup_free char *text = ib_buf_steal (&hist);
      add_history_at (b, st, text, true, prev);
    }
  return 0;
}

/* ------------------------------------------------------------------ */
/* Outputs                                                            */

/* An OUTPUT option as written (to be expanded), or NULL. */
static const char *
kv_get (const ib_instr_t *in, const char *key)
{
  for (size_t i = 0; i < in->n_kvs; i++)
    if (strcmp (in->kvs[i].key, key) == 0)
      return in->kvs[i].raw ? in->kvs[i].raw : in->kvs[i].value;
  return NULL;
}

static int
store_stage_image (build_t *b, stage_state_t *st, ib_error_t *err)
{
  if (st->manifest_digest[0])
    return 0;
  /* `created`: the time of the last step (its history entry), so that a
   * rebuild whose steps all hit the cache gives the same config. */
  json_t *h = json_object_get (st->config, "history");
  const char *last = json_string_value (
      json_object_get (json_array_get (h, json_array_size (h) ? json_array_size (h) - 1 : 0),
                       "created"));
  cleanup_free char *created = last ? xstrdup (last) : created_now (b);
  json_object_set_new (st->config, "created", json_string (created));
  cleanup_free char *cfg = json_dumps (st->config, JSON_COMPACT | JSON_SORT_KEYS);
  ib_descriptor_t cd = { .media_type = IB_MT_OCI_CONFIG, .size = (int64_t) strlen (cfg) };
  if (ib_store_put_blob (b->store, cfg, strlen (cfg), cd.digest, err) < 0)
    return -1;
  json_t *ann = NULL;
  for (char **a = b->opts->annotations; a && *a; a++)
    {
      const char *eq = strchr (*a, '=');
      if (ann == NULL)
        ann = json_object ();
      cleanup_free char *k = xstrndup (*a, (size_t) (eq - *a));
      json_object_set_new (ann, k, json_string (eq + 1));
    }
  cleanup_free char *man = ib_manifest_serialize (&cd, st->layers, st->n_layers, ann);
  json_decref (ann);
  if (ib_store_put_blob (b->store, man, strlen (man), st->manifest_digest, err) < 0)
    return -1;
  st->manifest_size = (int64_t) strlen (man);
  return 0;
}

static int
tag_image (build_t *b, stage_state_t *st, const char *name, char **full, ib_error_t *err)
{
  ib_ref_t ref = { 0 };
  if (ib_ref_parse (name, &ref, err) < 0)
    return -1;
  *full = ib_ref_string (&ref);
  ib_ref_free (&ref);
  if (ib_store_lock (b->store, true, err) < 0)
    return -1;
  int r = ib_store_tag (b->store, *full, IB_MT_OCI_MANIFEST, st->manifest_digest, st->manifest_size,
                        err);
  ib_store_unlock (b->store);
  return r;
}

/* The host path of an OUTPUT's src= (default "/") in the stage's rootfs,
 * resolved inside it, and its stat. */
static int
output_src (stage_state_t *st, const char *src, char **from, struct stat *sb, ib_error_t *err)
{
  if (ib_root_resolve (st->rootfs, src ? src : "/", true, from, err) < 0)
    return -1;
  if (stat (*from, sb) < 0)
    return ib_error_sys (err, errno, "src=%s", src ? src : "/");
  return 0;
}

/* OUTPUT type=tar: the stage's root filesystem (or the tree under src=)
 * as one tarball written by the layer writer (sorted, PAX, mtimes clamped
 * to SOURCE_DATE_EPOCH: byte-identical across builds of the same tree),
 * uncompressed unless compression=gzip|zstd; written beside dest, fsynced
 * and renamed over it. */
static int
export_tar (build_t *b, stage_state_t *st, const ib_instr_t *in, const char *src,
            const char *dest, ib_error_t *err)
{
  ib_layer_opts_t lo = { .compression = IB_COMPRESSION_NONE, .level = -1, .sde = b->sde };
  const char *c = kv_get (in, "compression");
  if (c && ib_compression_parse (c, &lo.compression) < 0)
    return ib_error_set (err, EINVAL, "compression=%s: expected gzip, zstd or none", c);
  cleanup_free char *from = NULL;
  struct stat sb;
  if (output_src (st, src, &from, &sb, err) < 0)
    return -1;
  if (!S_ISDIR (sb.st_mode))
    return ib_error_set (err, ENOTDIR, "src=%s: not a directory", src);
  bool whole = src == NULL || strcmp (from, st->rootfs) == 0;
  cleanup_free char *dir = xstrdup (dest);
  char *slash = strrchr (dir, '/');
  if (slash)
    slash[slash == dir ? 1 : 0] = '\0';
  if (slash && ib_mkdir_p (dir, 0755, err) < 0)
    return -1;
  cleanup_free char *tmp = xasprintf ("%s/.%s.imgbuild-XXXXXX", slash ? dir : ".",
                                      slash ? strrchr (dest, '/') + 1 : dest);
  int fd = mkstemp (tmp);
  if (fd < 0)
    return ib_error_sys (err, errno, "create a file beside %s", dest);
  close (fd);
  ib_layer_result_t res;
  /* the sandbox's mount points are empty directories in the tarball */
  static char *const mount_points[] = { "proc/*", "sys/*", "dev/*", NULL };
  if (ib_layer_write_diff (from, NULL, whole ? mount_points : NULL, tmp, &lo, &res, err) < 0)
    {
      unlink (tmp);
      return -1;
    }
  int tfd = open (tmp, O_RDONLY | O_CLOEXEC);
  if (tfd < 0 || fsync (tfd) < 0 || chmod (tmp, 0644) < 0 || rename (tmp, dest) < 0)
    {
      int e = errno;
      if (tfd >= 0)
        close (tfd);
      unlink (tmp);
      return ib_error_sys (err, e, "write %s", dest);
    }
  close (tfd);
  if (ib_fsync_dir (slash ? dir : ".", err) < 0)
    return -1;
  ib_info ("  tar %s  %llu entries, %s", res.digest, (unsigned long long) res.entries, dest);
  return 0;
}

/* The OUTPUT keys whose values run_output expands (and the plan shows
 * expanded); the others are read as written. */
static bool
output_key_expanded (const char *key)
{
  static const char *const keys[] = { "dest", "name", "src", "repair", "repair-exclude",
                                      "require" };
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
    if (strcmp (key, keys[i]) == 0)
      return true;
  return false;
}

static int
run_output (build_t *b, stage_state_t *st, const ib_instr_t *in, ib_error_t *err)
{
  /* Expand every option value first. */
  const char *type = kv_get (in, "type");
  cleanup_free char *dest = NULL, *name = NULL, *src = NULL, *repair = NULL, *repair_excl = NULL,
                    *require = NULL;
  const char *v;
  if ((v = kv_get (in, "dest")) && expand (b, st, v, &dest, err) < 0)
    return -1;
  if ((v = kv_get (in, "name")) && expand (b, st, v, &name, err) < 0)
    return -1;
  if ((v = kv_get (in, "src")) && expand (b, st, v, &src, err) < 0)
    return -1;
  if ((v = kv_get (in, "repair")) && expand (b, st, v, &repair, err) < 0)
    return -1;
  if ((v = kv_get (in, "repair-exclude")) && expand (b, st, v, &repair_excl, err) < 0)
    return -1;
  if ((v = kv_get (in, "require")) && expand (b, st, v, &require, err) < 0)
    return -1;
  /* local and tar read the tree; the others need the image, whose layers
   * run_stage has finished */
  bool from_tree = strcmp (type, "local") == 0 || strcmp (type, "tar") == 0;
  if (!from_tree && finish_stage (b, st, err) < 0)
    return -1;
  if (from_tree && ensure_rootfs (b, st, err) < 0)
    return -1;
  if (strcmp (type, "registry") == 0 && need_userns (b, err) < 0)
    return -1;

  if (strcmp (type, "local") == 0)
    {
      if (dest == NULL)
        return ib_error_set (err, EINVAL, "type=local needs dest=DIR");
      cleanup_free char *from = NULL;
      struct stat sb;
      if (output_src (st, src, &from, &sb, err) < 0)
        return -1;
      if (require && *require && ib_wheel_check_required (from, st->rootfs, require, err) < 0)
        return -1; /* nothing copied: dest holds no wheel that falls short */
      ib_copy_opts_t co = { .chmod = -1 };
      if (ib_copy_into (from, dest, true, &co, err) < 0
          || ib_wheel_check_copied (from, dest, st->rootfs, repair, repair_excl,
                                    err) < 0) /* wheel.h */
        return -1;
      ib_info ("[%s] OUTPUT local %s -> %s", stage_label (st),
               src ? src : "/", dest);
      return 0;
    }
  if (strcmp (type, "image") == 0 || strcmp (type, "registry") == 0)
    {
      if (name == NULL)
        return ib_error_set (err, EINVAL, "type=%s needs name=REF", type);
      cleanup_free char *full = NULL;
      if (tag_image (b, st, name, &full, err) < 0)
        return -1;
      ib_info ("[%s] OUTPUT image %s (%s)", stage_label (st), full,
               st->manifest_digest);
      if (strcmp (type, "registry") == 0)
        {
          prog_pause (b);
          int pr = ib_push (b->store, full, full, err);
          prog_resume (b);
          if (pr < 0)
            return -1;
        }
      return 0;
    }
  if (strcmp (type, "oci") == 0)
    {
      if (dest == NULL)
        return ib_error_set (err, EINVAL, "type=oci needs dest=DIR");
      if (ib_export_oci (b->store, st->manifest_digest, name ? name : "latest", dest, err) < 0)
        return -1;
      ib_info ("[%s] OUTPUT oci %s", stage_label (st), dest);
      return 0;
    }
  if (strcmp (type, "docker") == 0)
    {
      if (dest == NULL)
        return ib_error_set (err, EINVAL, "type=docker needs dest=FILE");
      if (ib_export_docker (b->store, st->manifest_digest, name, dest, err) < 0)
        return -1;
      ib_info ("[%s] OUTPUT docker %s%s%s", stage_label (st), dest, name ? " as " : "",
               name ? name : "");
      return 0;
    }
  if (strcmp (type, "tar") == 0)
    {
      if (dest == NULL)
        return ib_error_set (err, EINVAL, "type=tar needs dest=FILE");
      if (export_tar (b, st, in, src, dest, err) < 0)
        return ib_error_prefix (err, "type=tar,dest=%s", dest);
      ib_info ("[%s] OUTPUT tar %s -> %s", stage_label (st),
               src ? src : "/", dest);
      return 0;
    }
  return ib_error_set (err, ENOTSUP, "type=%s is not supported yet", type);
}

/* ------------------------------------------------------------------ */

/* A config-only step (ENV, LABEL, CMD, ...) has been applied to the
 * config; its key is the result (config without history, and the SHELL)
 * plus the instruction as written.  A hit takes the recorded config, whose
 * history keeps the times of the build that ran the step, so a rebuild
 * without changes gives the same image digest. */
static void
config_step_cache (build_t *b, stage_state_t *st, const ib_instr_t *in)
{
  json_t *c = json_copy (st->config);
  json_object_del (c, "history");
  json_object_del (c, "created");
  cleanup_free char *cj = json_dumps (c, JSON_COMPACT | JSON_SORT_KEYS);
  json_decref (c);
  ib_buf_t t = { 0 };
  key_str (&t, in->keyword, in->text ? in->text : "");
  for (size_t i = 0; i < in->n_kvs; i++)
    {
      key_str (&t, "k", in->kvs[i].key);
      key_str (&t, "v", in->kvs[i].raw ? in->kvs[i].raw : "");
    }
  for (char **f = in->flags; f && *f; f++)
    key_str (&t, "flag", *f);
  key_str (&t, "config", cj);
  for (char **a = st->shell; a && *a; a++)
    key_str (&t, "shell", *a);
  cleanup_free char *text = ib_buf_steal (&t);
  char key[IB_DIGEST_LEN];
  ib_cache_key (st->key, text, key);
  cleanup_free char *shown = in->text ? xstrdup (in->text) : xstrdup ("");
  if (cache_lookup (b, st, key))
    step_line (b, st, in->keyword, shown, true, false);
  else
    {
      step_line (b, st, in->keyword, shown, false, false);
      cache_record (b, st, key);
    }
}

static int
run_instr (build_t *b, stage_state_t *st, const ib_instr_t *in, ib_error_t *err)
{
  int r = 0;
  switch (in->kind)
    {
    case IB_I_FROM:
      r = do_from (b, st, in, err);
      break;
    case IB_I_ARG:
      r = do_arg (b, st, in, err);
      break;
    case IB_I_RUN:
      r = do_run (b, st, in, err);
      break;
    case IB_I_COPY:
    case IB_I_ADD:
      r = do_copy (b, st, in, err);
      break;
    case IB_I_WORKDIR:
      r = do_workdir (b, st, in, err);
      break;
    case IB_I_OUTPUT:
      break; /* after the stage */
    default:
      r = do_config (b, st, in, err);
      if (r == 0)
        config_step_cache (b, st, in);
      break;
    }
  return r;
}

/* ONBUILD triggers of the base (an image, or an earlier stage): run right
 * after FROM, in order, as Docker does; the new image does not inherit
 * them.  Errors name the FROM line and the trigger. */
static int
run_onbuild_triggers (build_t *b, stage_state_t *st, const ib_instr_t *from, ib_error_t *err)
{
  json_t *c = json_object_get (st->config, "config");
  json_t *triggers = json_object_get (c, "OnBuild");
  if (!json_is_array (triggers) || json_array_size (triggers) == 0)
    {
      json_object_del (c, "OnBuild");
      return 0;
    }
  json_incref (triggers);
  json_object_del (c, "OnBuild");
  int ret = 0;
  size_t i;
  json_t *t;
  json_array_foreach (triggers, i, t)
  {
    const char *text = json_string_value (t);
    if (text == NULL)
      continue;
    cleanup_free char *doc = xasprintf ("FROM scratch\n%s\n", text);
    ib_recipe_t *r = NULL;
    if (ib_recipe_parse ("ONBUILD trigger", doc, &r, err) < 0)
      ret = -1;
    for (size_t k = 1; ret == 0 && r && k < r->stages[0].n_instrs; k++)
      {
        const ib_instr_t *in = &r->stages[0].instrs[k];
        ib_info ("[%s] ONBUILD %s", stage_label (st), text);
        if (in->kind == IB_I_OUTPUT || run_instr (b, st, in, err) < 0)
          {
            if (in->kind == IB_I_OUTPUT)
              ib_error_set (err, EINVAL, "OUTPUT is not allowed as an ONBUILD trigger");
            ret = -1;
          }
      }
    ib_recipe_free (r);
    if (ret < 0)
      {
        ib_error_prefix (err, "%s:%d: ONBUILD trigger '%s' of the base image", b->recipe->path,
                         from->line, text);
        break;
      }
  }
  json_decref (triggers);
  return ret;
}

/* ------------------------------------------------------------------ */
/* -j N: independent stages at once                                   */

static int run_stage (build_t *b, stage_state_t *st, ib_error_t *err);

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
      ib_error_t e = NULL;
      char *dir = NULL;
      if (o != st && o->built && !o->rootfs_ready && ib_store_tmp_dir (b->store, "stage", &dir, &e) == 0)
        {
          free (o->rootfs);
          o->rootfs = dir;
          ib_strv_push (&private, dir);
        }
      ib_error_free (&e);
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
  int r = run_stage (b, st, &e);
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
  if (r < 0)
    {
      json_object_set_new (o, "error", json_string (e->msg));
      json_object_set_new (o, "status", json_integer (e->status));
    }
  char *text = json_dumps (o, JSON_COMPACT);
  ib_error_t we = NULL;
  ib_write_all (wfd, text, strlen (text), "result", &we);
  close (wfd);
  for (char **p = private; p && *p; p++)
    {
      ib_error_t re = NULL;
      if (ib_rootfs_remove (*p, &re) < 0)
        ib_error_free (&re);
    }
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
      ib_error_t e = NULL;
      if (from_target (b, &st->def->instrs[0], &image, &want, &os, &arch, &variant, &e) < 0)
        {
          ib_error_free (&e); /* the stage reports it */
          continue;
        }
      int idx = stage_index (b, image);
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
      bool stored = ib_store_load_image (b->store, image, &desc, &m, &config, &e) == 0
                    && config_serves (config, os, arch, variant);
      ib_error_free (&e);
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
static int
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

/* The shell of RUN and shell-form CMD/ENTRYPOINT: the base's config Shell
 * when it has one (a SHELL of the image or stage this one is FROM). */
static void
shell_from_config (stage_state_t *st)
{
  json_t *a = json_object_get (config_section (st->config), "Shell");
  if (!json_is_array (a) || json_array_size (a) == 0)
    return;
  char **shell = NULL;
  size_t i;
  json_t *v;
  json_array_foreach (a, i, v)
  {
    if (!json_is_string (v))
      {
        ib_strv_free (shell);
        return;
      }
    ib_strv_push (&shell, json_string_value (v));
  }
  ib_strv_free (st->shell);
  st->shell = shell;
}

/* The stage's layers all in the store and its image (config, manifest)
 * stored. */
static int
finish_stage (build_t *b, stage_state_t *st, ib_error_t *err)
{
  if (st->n_pending > 0 && join_layers (b, st, err) < 0)
    return -1;
  return store_stage_image (b, st, err);
}

static int
run_stage (build_t *b, stage_state_t *st, ib_error_t *err)
{
  const ib_stage_t *def = st->def;
  st->shell = NULL;
  ib_strv_push (&st->shell, "/bin/sh");
  ib_strv_push (&st->shell, "-c");
  st->no_cache = b->opts->no_cache;
  for (char **f = b->opts->no_cache_filter; f && *f; f++)
    if (ib_recipe_stage (b->recipe, *f) == def)
      st->no_cache = true;
  st->n_steps = 0;
  for (size_t i = 0; i < def->n_instrs; i++)
    if (def->instrs[i].kind != IB_I_OUTPUT && def->instrs[i].kind != IB_I_ARG)
      st->n_steps++;
  st->step = 0;
  for (size_t i = 0; i < def->n_instrs; i++)
    {
      const ib_instr_t *in = &def->instrs[i];
      int r = 0;
      if (in->kind != IB_I_OUTPUT && in->kind != IB_I_ARG)
        st->step++;
      b->cur_in = in;
      r = run_instr (b, st, in, err);
      b->cur_in = NULL;
      step_end (b, r == 0);
      if (r < 0)
        return instr_error (b, in, err);
      if (in->kind == IB_I_FROM)
        shell_from_config (st);
      if (in->kind == IB_I_FROM && run_onbuild_triggers (b, st, in, err) < 0)
        return -1;
    }
  /* A stage whose OUTPUTs only read its tree (local, tar), in a build of
   * one process, leaves its layers compressing while the next stages run;
   * ib_build finishes it.  A stage's process (-j) finishes its own. */
  bool image = b->opts->jobs > 1;
  for (size_t i = 0; i < def->n_instrs; i++)
    {
      const char *type = def->instrs[i].kind == IB_I_OUTPUT ? kv_get (&def->instrs[i], "type") : NULL;
      image = image || (type && strcmp (type, "local") != 0 && strcmp (type, "tar") != 0);
    }
  if (image && finish_stage (b, st, err) < 0)
    return -1;
  for (size_t i = 0; i < def->n_instrs; i++)
    {
      const ib_instr_t *in = &def->instrs[i];
      if (in->kind == IB_I_OUTPUT && run_output (b, st, in, err) < 0)
        return instr_error (b, in, err);
    }
  st->built = true;
  return 0;
}

static int mark_dep (build_t *b, size_t i, const char *dep, bool index_ok, ib_error_t *err);
static int mark_mount_deps (build_t *b, size_t i, const ib_instr_t *in, ib_error_t *err);

/* Mark stage i and what it depends on as needed. */
static int
mark_needed (build_t *b, size_t i, ib_error_t *err)
{
  stage_state_t *st = &b->stages[i];
  if (st->needed)
    return 0;
  st->needed = true;
  for (size_t k = 0; k < st->def->n_instrs; k++)
    {
      const ib_instr_t *in = &st->def->instrs[k];
      const char *dep = NULL;
      cleanup_free char *x = NULL;
      if (in->kind == IB_I_FROM)
        {
          if (expand (b, NULL, in->text, &x, err) < 0)
            return instr_error (b, in, err);
          dep = x;
        }
      else if ((in->kind == IB_I_COPY || in->kind == IB_I_ADD) && ib_instr_flag (in, "from"))
        dep = ib_instr_flag (in, "from");
      else if (in->kind == IB_I_RUN && mark_mount_deps (b, i, in, err) < 0)
        return -1;
      if (dep == NULL)
        continue;
      if (mark_dep (b, i, dep, in->kind != IB_I_FROM, err) < 0)
        return -1;
    }
  return 0;
}

static int
mark_dep (build_t *b, size_t i, const char *dep, bool index_ok, ib_error_t *err)
{
  int idx = stage_index (b, dep);
  if (idx < 0 && index_ok && *dep && strspn (dep, "0123456789") == strlen (dep))
    idx = atoi (dep);
  if (idx >= 0 && (size_t) idx < i)
    {
      stage_state_t *st = &b->stages[i];
      st->deps = xrealloc (st->deps, (st->n_deps + 1) * sizeof (size_t));
      st->deps[st->n_deps++] = (size_t) idx;
      if (mark_needed (b, (size_t) idx, err) < 0)
        return -1;
    }
  return 0;
}

/* RUN --mount=...,from=STAGE needs that stage.  Unexpanded values with a
 * variable are expanded with the global ARGs only, as for COPY --from;
 * values that do not parse are left for the step to report. */
static int
mark_mount_deps (build_t *b, size_t i, const ib_instr_t *in, ib_error_t *err)
{
  cleanup_strv char **vals = ib_instr_flag_values (in, "mount");
  for (char **v = vals; *v; v++)
    {
      cleanup_free char *x = NULL;
      ib_error_t e2 = NULL;
      if (expand (b, NULL, *v, &x, &e2) < 0)
        {
          ib_error_free (&e2);
          continue;
        }
      ib_mount_spec_t ms;
      if (ib_mount_spec_parse (x, &ms, &e2) < 0)
        {
          ib_error_free (&e2);
          continue;
        }
      int r = ms.from ? mark_dep (b, i, ms.from, true, err) : 0;
      ib_mount_spec_clear (&ms);
      if (r < 0)
        return -1;
    }
  return 0;
}

static void
build_free (build_t *b)
{
  drop_layer_jobs (b);
  for (size_t i = 0; i < b->n_stages; i++)
    {
      stage_state_t *st = &b->stages[i];
      if (st->rootfs)
        {
          ib_error_t e = NULL;
          if (ib_rootfs_remove (st->rootfs, &e) < 0)
            ib_warn ("%s", e->msg);
          ib_error_free (&e);
          free (st->rootfs);
        }
      json_decref (st->config);
      for (size_t k = 0; k < st->n_layers; k++)
        free (st->layers[k].media_type);
      free (st->layers);
      vars_free (&st->args);
      ib_strv_free (st->shell);
      free (st->foreign);
      free (st->deps);
    }
  free (b->stages);
  vars_free (&b->build_args);
  vars_free (&b->global_args);
  vars_free (&b->auto_args);
  free (b->build_arg_used);
  free (b->context);
  ib_progress_end (b->prog);
  b->prog = NULL;
  free (b->step_label);
  free (b->step_text);
  ib_buf_free (&b->out_line);
  ib_cache_memo_close (b->memo);
  ib_ignore_free (b->ignore);
  ib_strv_free (b->keys);
  ib_recipe_free (b->recipe);
}

/* Add CLI --output / -t to the target stage as extra OUTPUT instructions. */
static int
cli_outputs (build_t *b, stage_state_t *target, ib_error_t *err)
{
  ib_buf_t text = { 0 };
  ib_buf_puts (&text, "FROM scratch\n");
  for (char **o = b->opts->outputs; o && *o; o++)
    ib_buf_printf (&text, "OUTPUT %s\n", *o);
  for (char **t = b->opts->tags; t && *t; t++)
    ib_buf_printf (&text, "OUTPUT type=image,name=%s\n", *t);
  ib_recipe_t *extra = NULL;
  int r = ib_recipe_parse ("command line", text.data, &extra, err);
  ib_buf_free (&text);
  if (r < 0)
    return -1;
  /* Append the parsed OUTPUTs to a private copy of the target's instructions. */
  ib_stage_t *def = (ib_stage_t *) target->def;
  ib_stage_t *es = &extra->stages[0];
  size_t add = es->n_instrs - 1;
  if (add)
    {
      def->instrs = xrealloc (def->instrs, (def->n_instrs + add) * sizeof (ib_instr_t));
      memcpy (def->instrs + def->n_instrs, es->instrs + 1, add * sizeof (ib_instr_t));
      def->n_instrs += add;
      es->n_instrs = 1; /* moved out: not freed with extra */
    }
  ib_recipe_free (extra);
  return 0;
}

/* --build-arg values, the automatic platform ARGs, the global ARGs (in
 * recipe order), and a stage_state_t per stage: what a build and a plan
 * start from. */
static int
resolve_args (build_t *b, ib_error_t *err)
{
  for (char **a = b->opts->build_args; a && *a; a++)
    {
      const char *eq = strchr (*a, '=');
      if (eq == NULL)
        {
          const char *env = getenv (*a); /* docker build --build-arg NAME takes it from env */
          vars_set (&b->build_args, *a, env ? env : "");
          continue;
        }
      cleanup_free char *k = xstrndup (*a, (size_t) (eq - *a));
      vars_set (&b->build_args, k, eq + 1);
    }
  b->build_arg_used = xmalloc ((b->build_args.n + 1) * sizeof (bool));
  platform_args (b);
  for (size_t i = 0; i < b->recipe->n_global_args; i++)
    {
      b->cur_in = &b->recipe->global_args[i];
      int r = do_arg (b, NULL, &b->recipe->global_args[i], err);
      b->cur_in = NULL;
      if (r < 0)
        return instr_error (b, &b->recipe->global_args[i], err);
    }
  b->n_stages = b->recipe->n_stages;
  b->stages = xmalloc (b->n_stages * sizeof (stage_state_t));
  for (size_t i = 0; i < b->n_stages; i++)
    b->stages[i].def = &b->recipe->stages[i];
  return 0;
}

/* The target stage: --target, else the last one. */
static int
resolve_target (build_t *b, size_t *target, ib_error_t *err)
{
  *target = b->n_stages - 1;
  if (b->opts->target == NULL)
    return 0;
  const ib_stage_t *t = ib_recipe_stage (b->recipe, b->opts->target);
  if (t == NULL)
    return ib_error_set (err, ENOENT, "%s: no stage named '%s'", b->recipe->path,
                         b->opts->target);
  *target = (size_t) t->index;
  return 0;
}

/* The target and what it reads; without --target also every stage with
 * an OUTPUT and what those read. */
static int
mark_stages_needed (build_t *b, size_t target, ib_error_t *err)
{
  if (mark_needed (b, target, err) < 0)
    return -1;
  if (b->opts->target == NULL)
    for (size_t i = 0; i < b->n_stages; i++)
      for (size_t k = 0; k < b->stages[i].def->n_instrs; k++)
        if (b->stages[i].def->instrs[k].kind == IB_I_OUTPUT && mark_needed (b, i, err) < 0)
          return -1;
  return 0;
}

int
ib_build (ib_store_t *store, const ib_build_opts_t *opts, ib_error_t *err)
{
  build_t b = { .store = store, .opts = opts, .sde = ib_source_date_epoch () };
  if (ib_userns_plan (opts->userns, &b.userns, err) < 0)
    return -1;
  if (b.sde < 0 && opts->reproducible)
    b.sde = 0;
  int ret = -1;
  cleanup_free char *text = NULL;
  if (ib_read_file_max (opts->recipe_path, IB_RECIPE_MAX, "recipe", &text, NULL, err) < 0)
    return -1;
  if (ib_recipe_parse (opts->recipe_path, text, &b.recipe, err) < 0)
    return -1;
  ib_progress_mode_t pm = ib_progress_resolved_mode ();
  if ((pm == IB_PROGRESS_TTY || pm == IB_PROGRESS_JSON) && opts->jobs <= 1)
    {
      cleanup_free char *title = xasprintf ("build %s", b.recipe->path);
      b.prog = ib_progress_begin (title);
    }
  if (opts->context_dir)
    b.context = realpath (opts->context_dir, NULL);
  else
    {
      cleanup_free char *dir = xstrdup (opts->recipe_path);
      char *slash = strrchr (dir, '/');
      if (slash)
        *slash = '\0';
      b.context = realpath (slash ? dir : ".", NULL);
    }
  if (b.context == NULL)
    {
      ib_error_sys (err, errno, "build context %s", opts->context_dir ? opts->context_dir : ".");
      goto out;
    }
  {
    /* BuildKit: RECIPE.dockerignore beside the recipe wins over the
     * context's .dockerignore */
    cleanup_free char *own = xasprintf ("%s.dockerignore", opts->recipe_path);
    cleanup_free char *ctx_ig = ib_path_join (b.context, ".dockerignore");
    cleanup_free char *itext = NULL;
    ib_error_t e2 = NULL;
    if (ib_read_file_max (own, IB_RECIPE_MAX, ".dockerignore", &itext, NULL, &e2) < 0)
      {
        if (e2->status == EFBIG)
          {
            *err = e2;
            goto out;
          }
        ib_error_free (&e2);
        if (ib_read_file_max (ctx_ig, IB_RECIPE_MAX, ".dockerignore", &itext, NULL, &e2) < 0)
          {
            if (e2->status != ENOENT)
              {
                *err = e2;
                goto out;
              }
            ib_error_free (&e2);
          }
      }
    b.ignore = ib_ignore_parse (itext);
  }
  size_t target;
  if (resolve_args (&b, err) < 0 || resolve_target (&b, &target, err) < 0)
    goto out;
  for (char **a = opts->annotations; a && *a; a++)
    if (strchr (*a, '=') == NULL || **a == '=')
      {
        ib_error_set (err, EINVAL, "--annotation %s: expected KEY=VALUE", *a);
        goto out;
      }
  for (char **f = opts->no_cache_filter; f && *f; f++)
    if (ib_recipe_stage (b.recipe, *f) == NULL)
      {
        ib_error_set (err, ENOENT, "--no-cache-filter %s: %s has no stage of that name", *f,
                      b.recipe->path);
        goto out;
      }
  if (cli_outputs (&b, &b.stages[target], err) < 0)
    goto out;
  if (mark_stages_needed (&b, target, err) < 0)
    goto out;
  /* Refuse output types we cannot produce before doing any work. */
  for (size_t i = 0; i < b.n_stages; i++)
    for (size_t k = 0; b.stages[i].needed && k < b.stages[i].def->n_instrs; k++)
      {
        const ib_instr_t *in = &b.stages[i].def->instrs[k];
        const char *type = in->kind == IB_I_OUTPUT ? kv_get (in, "type") : NULL;
        if (type && strcmp (type, "local") && strcmp (type, "image") && strcmp (type, "oci")
            && strcmp (type, "registry") && strcmp (type, "tar") && strcmp (type, "docker"))
          {
            ib_error_set (err, ENOTSUP, "%s:%d: OUTPUT type=%s is not supported yet",
                          b.recipe->path, in->line, type);
            goto out;
          }
        const char *req = type && strcmp (type, "local") == 0 ? kv_get (in, "require") : NULL;
        const char *rep = type && strcmp (type, "local") == 0 ? kv_get (in, "repair") : NULL;
        if (req && *req && rep && *rep)
          {
            ib_error_set (err, EINVAL, "%s:%d: OUTPUT require= and repair= together: repair= "
                          "already fails for a wheel it cannot bring to its policy; require= "
                          "is for wheels left as built", b.recipe->path, in->line);
            goto out;
          }
        /* a value naming ARGs is checked once expanded, when the stage ends */
        if (req && *req && !strchr (req, '$') && ib_wheel_policy_check (req, err) < 0)
          {
            ib_error_prefix (err, "%s:%d: OUTPUT require", b.recipe->path, in->line);
            goto out;
          }
        const char *comp = type && strcmp (type, "tar") == 0 ? kv_get (in, "compression") : NULL;
        ib_compression_t c;
        if (comp && ib_compression_parse (comp, &c) < 0)
          {
            ib_error_set (err, EINVAL, "%s:%d: OUTPUT compression=%s: expected gzip, zstd or none",
                          b.recipe->path, in->line, comp);
            goto out;
          }
      }

  for (char **c = opts->cache_from; c && *c; c++)
    {
      if (need_userns (&b, err) < 0) /* network threads come next */
        goto out;
      prog_pause (&b);
      int r = ib_cache_import (store, *c, err);
      prog_resume (&b);
      if (r < 0)
        goto out;
    }
  if (opts->jobs > 1)
    {
      if (run_stages_parallel (&b, (size_t) opts->jobs, err) < 0)
        goto out;
    }
  else
    {
      for (size_t i = 0; i < b.n_stages; i++)
        {
          if (!b.stages[i].needed)
            continue;
          if (run_stage (&b, &b.stages[i], err) < 0)
            goto out;
        }
      for (size_t i = 0; i < b.n_stages; i++)
        if (b.stages[i].built && finish_stage (&b, &b.stages[i], err) < 0)
          goto out;
    }
  for (char **c = opts->cache_to; c && *c; c++)
    {
      if (need_userns (&b, err) < 0)
        goto out;
      prog_pause (&b);
      int r = ib_cache_export (store, b.keys, *c, err);
      prog_resume (&b);
      if (r < 0)
        goto out;
    }
  for (size_t k = 0; k < b.build_args.n; k++)
    if (!b.build_arg_used[k] && !is_proxy_arg (b.build_args.names[k]))
      {
        bool global = false;
        vars_get (&b.global_args, b.build_args.names[k], &global);
        if (!global)
          ib_warn ("build arg %s was not consumed by any ARG", b.build_args.names[k]);
      }
  ib_info ("build %s: done, target stage %s image %s (%zu steps cached, %zu run)",
           b.recipe->path, b.stages[target].def->name ? b.stages[target].def->name : "(unnamed)",
           b.stages[target].manifest_digest, b.hits, b.misses);
  ret = 0;
out:
  if (b.n_jobs > 0)
    {
      /* a failed build still records the steps that ran (the next build
       * starts from them): their layers are finished first */
      ib_error_t e = NULL;
      if (join_layers (&b, NULL, &e) < 0)
        {
          ib_warn ("%s", e->msg);
          ib_error_free (&e);
        }
    }
  build_free (&b);
  return ret;
}

/* ------------------------------------------------------------------ */

int
ib_export_oci (ib_store_t *store, const char *manifest_digest, const char *name, const char *dest,
               ib_error_t *err)
{
  ib_descriptor_t desc = { 0 };
  ib_manifest_t *m = NULL;
  json_t *config = NULL;
  if (ib_store_load_image (store, manifest_digest, &desc, &m, &config, err) < 0)
    return -1;
  int ret = -1;
  cleanup_free char *tmp = xasprintf ("%s.tmp-%d", dest, (int) getpid ());
  cleanup_free char *blobs = ib_path_join (tmp, "blobs/sha256");
  cleanup_free char *old = xasprintf ("%s.old-%d", dest, (int) getpid ());
  ib_rm_rf (tmp, NULL);
  if (ib_mkdir_p (blobs, 0755, err) < 0)
    goto out;
  if (ib_store_export_blob (store, manifest_digest, blobs, err) < 0
      || ib_store_export_blob (store, m->config.digest, blobs, err) < 0)
    goto out;
  for (size_t i = 0; i < m->n_layers; i++)
    if (ib_store_export_blob (store, m->layers[i].digest, blobs, err) < 0)
      goto out;
  {
    cleanup_free char *p = ib_path_join (tmp, "oci-layout");
    const char *layout = "{\"imageLayoutVersion\":\"1.0.0\"}";
    if (ib_write_file_atomic (p, layout, strlen (layout), 0644, err) < 0)
      goto out;
    json_t *index = json_pack ("{s:i, s:s, s:[{s:s, s:s, s:I, s:{s:s}}]}", "schemaVersion", 2,
                               "mediaType", IB_MT_OCI_INDEX, "manifests", "mediaType",
                               desc.media_type ? desc.media_type : IB_MT_OCI_MANIFEST, "digest",
                               manifest_digest, "size", (json_int_t) desc.size, "annotations",
                               "org.opencontainers.image.ref.name", name);
    cleanup_free char *s = json_dumps (index, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref (index);
    cleanup_free char *ip = ib_path_join (tmp, "index.json");
    if (ib_write_file_atomic (ip, s, strlen (s), 0644, err) < 0)
      goto out;
  }
  /* Replace dest: old moved aside, new renamed in, old removed. */
  if (rename (dest, old) < 0 && errno != ENOENT)
    {
      ib_error_sys (err, errno, "replace %s", dest);
      goto out;
    }
  if (rename (tmp, dest) < 0)
    {
      ib_error_sys (err, errno, "write %s", dest);
      rename (old, dest);
      goto out;
    }
  ib_rm_rf (old, NULL);
  ret = 0;
out:
  if (ret < 0)
    ib_rm_rf (tmp, NULL);
  ib_descriptor_clear (&desc);
  ib_manifest_free (m);
  json_decref (config);
  return ret;
}

/* ------------------------------------------------------------------ */
/* Plan: what ib_build would do, without doing it (ib_build_plan)     */

static json_t *
plan_vars_json (const vars_t *v)
{
  json_t *o = json_object ();
  for (size_t i = 0; i < v->n; i++)
    json_object_set_new (o, v->names[i], json_string (v->values[i] ? v->values[i] : ""));
  return o;
}

static json_t *
plan_strv_json (char **v)
{
  json_t *a = json_array ();
  for (char **s = v; s && *s; s++)
    json_array_append_new (a, json_string (*s));
  return a;
}

/* Lookup for the plan's preview of a RUN command: the step's ENV and
 * ARGs as `lookup`; a name the recipe does not set (a shell variable, one
 * of the base image's ENV) stays as written, with its operator and word
 * ("${NAME:+w}" would otherwise show w for a name that may be unset). */
typedef struct plan_lookup_ctx
{
  lookup_ctx_t inner;
} plan_lookup_ctx_t;

static const char *
plan_lookup (void *p, const char *name)
{
  plan_lookup_ctx_t *c = p;
  const char *v = lookup (&c->inner, name);
  return v ? v : IB_LOOKUP_KEEP; /* the shell's business: shown as written */
}

/* The flags of `in`, values expanded with the stage's variables. */
static int
plan_flags (build_t *b, stage_state_t *st, const ib_instr_t *in, json_t *step, ib_error_t *err)
{
  json_t *a = json_array ();
  json_object_set_new (step, "flags", a);
  for (char **f = in->flags; f && *f; f++)
    {
      cleanup_free char *x = NULL;
      if (expand (b, st, *f, &x, err) < 0)
        return -1;
      json_array_append_new (a, json_string (x));
    }
  return 0;
}

/* One instruction of a needed stage: what the step would see, the
 * variables expanded as run_instr's helpers expand them.  Only the plan's
 * view of the config changes (ENV, WORKDIR, SHELL): nothing is pulled,
 * stored or run. */
static int
plan_instr (build_t *b, stage_state_t *st, const ib_instr_t *in, json_t *step, ib_error_t *err)
{
  json_t *c = config_section (st->config);
  switch (in->kind)
    {
    case IB_I_ARG:
      {
        if (do_arg (b, st, in, err) < 0)
          return -1;
        json_t *o = json_object ();
        for (size_t i = 0; i < in->n_kvs; i++)
          json_object_set_new (o, in->kvs[i].key,
                               json_string (vars_get (&st->args, in->kvs[i].key, NULL)));
        json_object_set_new (step, "args", o);
        return 0;
      }
    case IB_I_ENV:
    case IB_I_LABEL:
      {
        json_t *o = json_object ();
        json_object_set_new (step, in->kind == IB_I_ENV ? "env" : "labels", o);
        for (size_t i = 0; i < in->n_kvs; i++)
          {
            cleanup_free char *k = NULL, *v = NULL;
            if (expand (b, st, in->kvs[i].raw ? in->kvs[i].raw : "", &v, err) < 0)
              return -1;
            if (in->kind == IB_I_LABEL && expand (b, st, in->kvs[i].key, &k, err) < 0)
              return -1;
            json_object_set_new (o, k ? k : in->kvs[i].key, json_string (v));
            if (in->kind == IB_I_ENV)
              config_env_set (st->config, in->kvs[i].key, v);
          }
        return 0;
      }
    case IB_I_RUN:
      {
        if (plan_flags (b, st, in, step, err) < 0)
          return -1;
        json_object_set_new (step, "form", json_string (in->json_form ? "exec" : "shell"));
        if (in->json_form)
          json_object_set_new (step, "argv", plan_strv_json (in->args));
        else
          {
            json_object_set_new (step, "shell", plan_strv_json (st->shell));
            json_object_set_new (step, "command", json_string (in->text ? in->text : ""));
            /* A preview: the shell expands the command when it runs */
            plan_lookup_ctx_t pc = { { st, &st->args } };
            cleanup_free char *x = NULL;
            ib_error_t e2 = NULL;
            if (ib_expand (in->text ? in->text : "", '\\', plan_lookup, &pc, &x, &e2) < 0)
              ib_error_free (&e2); /* not the builder's syntax to check: the shell's */
            json_object_set_new (step, "expanded", json_string (x ? x : in->text ? in->text : ""));
          }
        json_object_set_new (step, "args", plan_vars_json (&st->args));
        return 0;
      }
    case IB_I_COPY:
    case IB_I_ADD:
      {
        if (plan_flags (b, st, in, step, err) < 0)
          return -1;
        size_t n = ib_strv_len (in->args);
        json_t *srcs = json_array ();
        json_object_set_new (step, "sources", srcs);
        for (size_t i = 0; i < n; i++)
          {
            cleanup_free char *w = NULL;
            if (i + 1 < n && ib_instr_heredoc (in, i))
              w = xstrdup (in->args[i]); /* the heredoc word, as written */
            else if (expand (b, st, in->args[i], &w, err) < 0)
              return -1;
            if (i + 1 < n)
              json_array_append_new (srcs, json_string (w));
            else
              json_object_set_new (step, "dest", json_string (w));
          }
        return 0;
      }
    case IB_I_WORKDIR:
      {
        cleanup_free char *dir = NULL;
        if (expand (b, st, in->text, &dir, err) < 0)
          return -1;
        const char *cur = config_string (st->config, "WorkingDir");
        cleanup_free char *abs = dir[0] == '/' ? xstrdup (dir)
                                               : ib_path_join (cur && *cur ? cur : "/", dir);
        json_object_set_new (c, "WorkingDir", json_string (abs));
        json_object_set_new (step, "path", json_string (abs));
        return 0;
      }
    case IB_I_USER:
    case IB_I_STOPSIGNAL:
      {
        cleanup_free char *v = NULL;
        if (expand (b, st, in->text, &v, err) < 0
            || (in->kind == IB_I_STOPSIGNAL && ib_stop_signal (v, NULL, err) < 0))
          return -1;
        json_object_set_new (step, "value", json_string (v));
        return 0;
      }
    case IB_I_EXPOSE:
    case IB_I_VOLUME:
      {
        json_t *a = json_array ();
        json_object_set_new (step, "values", a);
        for (char **w = in->args; w && *w; w++)
          {
            cleanup_free char *x = NULL;
            cleanup_free char *k = NULL;
            if (expand (b, st, *w, &x, err) < 0
                || (in->kind == IB_I_EXPOSE && ib_expose_key (x, &k, err) < 0))
              return -1;
            json_array_append_new (a, json_string (x));
          }
        return 0;
      }
    case IB_I_CMD:
    case IB_I_ENTRYPOINT:
      json_object_set_new (step, "argv", argv_json (b, st, in));
      return 0;
    case IB_I_SHELL:
      if (!in->json_form || ib_strv_len (in->args) == 0)
        return ib_error_set (err, EINVAL, "SHELL needs the JSON form, e.g. [\"/bin/bash\", \"-c\"]");
      ib_strv_free (st->shell);
      st->shell = ib_strv_dup (in->args);
      json_object_set_new (c, "Shell", plan_strv_json (in->args));
      json_object_set_new (step, "argv", plan_strv_json (in->args));
      return 0;
    default: /* MAINTAINER, HEALTHCHECK, ONBUILD: as written */
      json_object_set_new (step, "text", json_string (in->text ? in->text : ""));
      return 0;
    }
}

/* A needed stage: its base, dependencies, steps and outputs. */
static int
plan_stage (build_t *b, stage_state_t *st, json_t *js, ib_error_t *err)
{
  const ib_stage_t *def = st->def;
  st->shell = NULL;
  ib_strv_push (&st->shell, "/bin/sh");
  ib_strv_push (&st->shell, "-c");
  json_t *steps = json_array (), *outputs = json_array (), *deps = json_array ();
  json_object_set_new (js, "depends_on", deps);
  json_object_set_new (js, "steps", steps);
  json_object_set_new (js, "outputs", outputs);
  for (size_t k = 0; k < st->n_deps; k++)
    {
      bool seen = false;
      for (size_t j = 0; j < k; j++)
        seen |= st->deps[j] == st->deps[k];
      if (!seen)
        json_array_append_new (deps, json_integer ((json_int_t) st->deps[k]));
    }
  for (size_t i = 0; i < def->n_instrs; i++)
    {
      const ib_instr_t *in = &def->instrs[i];
      if (in->kind == IB_I_FROM)
        {
          /* as do_from: global ARGs only; an earlier stage by name, else an image */
          cleanup_free char *image = NULL, *want = NULL;
          const char *platform = ib_instr_flag (in, "platform");
          if (expand (b, NULL, in->text, &image, err) < 0
              || (platform && expand (b, NULL, platform, &want, err) < 0))
            return instr_error (b, in, err);
          json_t *base = json_object ();
          json_object_set_new (js, "base", base);
          json_object_set_new (js, "line", json_integer (in->line));
          if (want)
            json_object_set_new (js, "platform", json_string (want));
          int idx = stage_index (b, image);
          if (idx >= 0 && (size_t) idx < (size_t) (st - b->stages))
            {
              stage_state_t *src = &b->stages[idx];
              st->config = json_deep_copy (src->config);
              json_object_set_new (base, "stage", json_integer (idx));
              json_object_set_new (base, "name", json_string (src->def->name));
            }
          else
            {
              /* the base image's own ENV, SHELL and WORKDIR are not known
               * without pulling it */
              st->config = json_object ();
              json_object_set_new (base, strcmp (image, "scratch") == 0 ? "scratch" : "image",
                                   strcmp (image, "scratch") == 0 ? json_true ()
                                                                  : json_string (image));
            }
          shell_from_config (st);
          /* keep the document's order: base before what follows it */
          const char *later[] = { "depends_on", "steps", "outputs" };
          for (size_t k = 0; k < 3; k++)
            {
              json_t *v = json_incref (json_object_get (js, later[k]));
              json_object_del (js, later[k]);
              json_object_set_new (js, later[k], v);
            }
          continue;
        }
      if (in->kind == IB_I_OUTPUT)
        {
          json_t *o = json_object ();
          json_object_set_new (o, "line", json_integer (in->line));
          for (size_t k = 0; k < in->n_kvs; k++)
            {
              const char *key = in->kvs[k].key;
              const char *raw = kv_get (in, key);
              cleanup_free char *x = NULL;
              /* run_output expands these; the others are read as written */
              if (output_key_expanded (key))
                {
                  if (expand (b, st, raw, &x, err) < 0)
                    {
                      json_decref (o);
                      return instr_error (b, in, err);
                    }
                }
              else
                x = xstrdup (raw ? raw : "");
              json_object_set_new (o, key, json_string (x));
            }
          json_array_append_new (outputs, o);
          continue;
        }
      json_t *step = json_object ();
      json_array_append_new (steps, step);
      json_object_set_new (step, "line", json_integer (in->line));
      json_object_set_new (step, "instruction", json_string (in->keyword));
      b->cur_in = in;
      int r = plan_instr (b, st, in, step, err);
      b->cur_in = NULL;
      if (r < 0)
        return instr_error (b, in, err);
    }
  return 0;
}

int
ib_build_plan (const ib_build_opts_t *opts, json_t **out, ib_error_t *err)
{
  *out = NULL;
  build_t b = { .opts = opts, .sde = -1 };
  int ret = -1;
  json_t *plan = NULL;
  cleanup_free char *text = NULL;
  if (ib_read_file_max (opts->recipe_path, IB_RECIPE_MAX, "recipe", &text, NULL, err) < 0)
    return -1;
  if (ib_recipe_parse (opts->recipe_path, text, &b.recipe, err) < 0)
    return -1;
  /* As ib_build: build args, platform ARGs, global ARGs, the stages needed. */
  size_t target;
  if (resolve_args (&b, err) < 0 || resolve_target (&b, &target, err) < 0)
    goto out;
  plan = json_object ();
  json_object_set_new (plan, "recipe", json_string (b.recipe->path));
  json_object_set_new (plan, "platform", json_string (vars_get (&b.auto_args, "TARGETPLATFORM", NULL)));
  json_object_set_new (plan, "build_platform",
                       json_string (vars_get (&b.auto_args, "BUILDPLATFORM", NULL)));
  json_object_set_new (plan, "build_args", plan_vars_json (&b.build_args));
  json_t *globals = json_object ();
  json_object_set_new (plan, "global_args", globals);
  for (size_t i = 0; i < b.recipe->n_global_args; i++)
    {
      const ib_instr_t *in = &b.recipe->global_args[i];
      for (size_t k = 0; k < in->n_kvs; k++)
        json_object_set_new (globals, in->kvs[k].key,
                             json_string (vars_get (&b.global_args, in->kvs[k].key, NULL)));
    }
  /* as ib_build: --output and -t are OUTPUTs at the end of the target */
  if (cli_outputs (&b, &b.stages[target], err) < 0 || mark_stages_needed (&b, target, err) < 0)
    goto out;
  json_t *tj = json_object ();
  json_object_set_new (tj, "index", json_integer ((json_int_t) target));
  json_object_set_new (tj, "name", b.stages[target].def->name
                                       ? json_string (b.stages[target].def->name)
                                       : json_null ());
  json_object_set_new (plan, "target", tj);
  json_t *stages = json_array ();
  json_object_set_new (plan, "stages", stages);
  for (size_t i = 0; i < b.n_stages; i++)
    {
      stage_state_t *st = &b.stages[i];
      json_t *js = json_object ();
      json_array_append_new (stages, js);
      json_object_set_new (js, "index", json_integer ((json_int_t) i));
      json_object_set_new (js, "name", st->def->name ? json_string (st->def->name) : json_null ());
      json_object_set_new (js, "needed", json_boolean (st->needed));
      if (st->needed && plan_stage (&b, st, js, err) < 0)
        goto out;
    }
  json_t *unused = json_array ();
  json_object_set_new (plan, "unused_build_args", unused);
  for (size_t k = 0; k < b.build_args.n; k++)
    if (!b.build_arg_used[k] && !is_proxy_arg (b.build_args.names[k])
        && !vars_declared (&b.global_args, b.build_args.names[k]))
      json_array_append_new (unused, json_string (b.build_args.names[k]));
  *out = plan;
  plan = NULL;
  ret = 0;
out:
  json_decref (plan);
  build_free (&b);
  return ret;
}
