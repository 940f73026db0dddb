/* builder/engine/build.c — ib_build: read the recipe, resolve build args and
 * the target, mark the stages needed, run them (in order or with -j) and
 * write the outputs. */
#include "builder/engine/engine.h"
#include "builder/engine/cache_io.h"
#include "builder/engine/runspec.h"
#include "rootfs/overlay.h"

#include <errno.h>
#include <string.h>
#include <time.h>

char *const ib_layer_exclude[] = { "proc", "sys", "dev", NULL };

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
        {
          /* --from=${STAGE}: expanded with the global ARGs, as BuildKit
           * finds a COPY's source stage; one that does not expand here is
           * left for the step to report */
          dep = ib_instr_flag (in, "from");
          if (strchr (dep, '$') && expand (b, NULL, dep, &x, NULL) == 0)
            dep = x;
        }
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
  /* FROM (index_ok false): the last stage of that name before this one;
   * COPY --from, --mount from=: the last of the recipe (stage_index) */
  int idx = index_ok ? stage_index (b, dep) : stage_index_before (b, dep, i);
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
  ib_run_spec_t spec;
  run_spec (b, NULL, in, true, &spec, NULL);
  int r = 0;
  for (size_t k = 0; r == 0 && k < spec.n_mounts; k++)
    if (spec.mounts[k].from)
      r = mark_dep (b, i, spec.mounts[k].from, true, err);
  ib_run_spec_clear (&spec);
  return r;
}

static void
stage_state_free (stage_state_t *st)
{
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
  json_decref (st->emitted);
}

void
build_free (build_t *b)
{
  drop_layer_jobs (b);
  for (size_t i = 0; i < b->n_stages; i++)
    stage_state_free (&b->stages[i]);
  for (size_t i = 0; i < b->n_image_sources; i++)
    {
      stage_state_t *st = b->image_sources[i];
      ib_stage_t *def = (ib_stage_t *) st->def;
      if (def->index == DIR_CONTEXT_INDEX)
        {
          free (st->rootfs); /* the user's directory: never removed */
          st->rootfs = NULL;
        }
      stage_state_free (st);
      free (def->name);
      free (def);
      free (st);
    }
  free (b->image_sources);
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

/* A --output type=image|registry without name= names the -t references
 * (buildx: `-t app:1 -o type=image,push=true`, `--push`): true when
 * `spec` is one of those types and has no name field. */
static bool
output_wants_tags (const char *spec)
{
  bool image = false, named = false;
  cleanup_free char *copy = xstrdup (spec);
  char *save = NULL;
  for (char *f = strtok_r (copy, ", \t", &save); f; f = strtok_r (NULL, ", \t", &save))
    {
      if (*f == '"')
        f++;
      if (strncasecmp (f, "name=", 5) == 0)
        named = true;
      else if (strcasecmp (f, "type=image") == 0 || strcasecmp (f, "type=registry") == 0)
        image = true;
    }
  return image && !named;
}

/* Add CLI --output / -t to the target stage as extra OUTPUT instructions.
 * A --output that does not parse is reported as "--output SPEC: ...". */
int
cli_outputs (build_t *b, stage_state_t *target, ib_error_t *err)
{
  ib_buf_t text = { 0 };
  ib_buf_puts (&text, "FROM scratch\n");
  cleanup_free char *tags = NULL;
  {
    ib_buf_t t = { 0 };
    for (char **tg = b->opts->tags; tg && *tg; tg++)
      ib_buf_printf (&t, "%s%s", t.len ? "," : "", *tg);
    tags = ib_buf_steal (&t);
  }
  for (char **o = b->opts->outputs; o && *o; o++)
    {
      cleanup_free char *line = output_wants_tags (*o) && tags && *tags
                                    ? xasprintf ("OUTPUT %s,\"name=%s\"\n", *o, tags)
                                    : xasprintf ("OUTPUT %s\n", *o);
      ib_recipe_t *one = NULL;
      cleanup_free char *t1 = xasprintf ("FROM scratch\n%s", line);
      ib_error_t e = NULL;
      if (ib_recipe_parse ("command line", t1, &one, &e) < 0)
        {
          /* "command line:2[:COL]: MSG" -> "--output SPEC: MSG" */
          const char *msg = e->msg + strlen ("command line:");
          while (*msg && *msg != ' ')
            msg++;
          ib_buf_free (&text);
          ib_error_set (err, e->status, "--output %s: %s", *o, *msg ? msg + 1 : e->msg);
          ib_error_free (&e);
          return -1;
        }
      ib_recipe_free (one);
      ib_buf_puts (&text, line);
    }
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
int
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

/* The target stage: --target, else the last one.  Warns first of each
 * stage name given twice (BuildKit's DuplicateStageName check, a warning:
 * the build goes on, each use meaning the stage stage_index says). */
int
resolve_target (build_t *b, size_t *target, ib_error_t *err)
{
  for (size_t i = 1; i < b->n_stages; i++)
    {
      const ib_stage_t *s = b->stages[i].def;
      int prev = s->name ? stage_index_before (b, s->name, i) : -1;
      if (prev >= 0)
        ib_warn ("%s:%d: the stage name '%s' is also used on line %d; FROM %s after this "
                 "line, COPY --from=%s, --mount from=%s and --target %s mean the last "
                 "stage of that name",
                 b->recipe->path, s->instrs[0].line, s->name,
                 b->stages[prev].def->instrs[0].line, s->name, s->name, s->name, s->name);
    }
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
int
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

void
ib_build_result_clear (ib_build_result_t *r)
{
  ib_strv_free (r->names);
  r->names = NULL;
  json_decref (r->wheels);
  r->wheels = NULL;
}

/* opts->result from the target stage's image and every stage's emitted
 * names and wheels (build.h). */
static int
fill_result (build_t *b, stage_state_t *target, ib_build_result_t *r, ib_error_t *err)
{
  ib_descriptor_t desc = { 0 };
  ib_manifest_t *m = NULL;
  json_t *config = NULL;
  if (ib_store_load_image (b->store, target->manifest_digest, &desc, &m, &config, err) < 0)
    return -1;
  json_decref (config);
  snprintf (r->manifest_digest, IB_DIGEST_LEN, "%s", target->manifest_digest);
  r->manifest_size = target->manifest_size;
  snprintf (r->config_digest, IB_DIGEST_LEN, "%s", m->config.digest);
  ib_manifest_free (m);
  ib_descriptor_clear (&desc);
  r->wheels = json_array ();
  size_t i;
  json_t *v;
  json_array_foreach (json_object_get (target->emitted, "names"), i, v)
    if (!ib_strv_has (r->names, json_string_value (v)))
      ib_strv_push (&r->names, json_string_value (v));
  for (size_t s = 0; s < b->n_stages; s++)
    json_array_extend (r->wheels, json_object_get (b->stages[s].emitted, "wheels"));
  return 0;
}

int
ib_build (ib_store_t *store, const ib_build_opts_t *opts, ib_error_t *err)
{
  if (opts->platform && strchr (opts->platform, ','))
    return build_platforms (store, opts, err);
  return build_one (store, opts, NULL, err);
}

/* The build's context directory (--context, else the recipe's) and its
 * .dockerignore (RECIPE.dockerignore beside the recipe wins, as in
 * BuildKit) into b->context and b->ignore. */
static int
load_context (build_t *b, ib_error_t *err)
{
  const ib_build_opts_t *opts = b->opts;
  if (opts->context_dir)
    b->context = realpath (opts->context_dir, NULL);
  else
    {
      cleanup_free char *dir = xstrdup (opts->recipe_path);
      char *slash = strrchr (dir, '/');
      if (slash)
        *slash = '\0';
      b->context = realpath (slash ? dir : ".", NULL);
    }
  if (b->context == NULL)
    {
      return ib_error_sys (err, errno, "build context %s",
                           opts->context_dir ? opts->context_dir : ".");
    }
  {
    /* BuildKit: RECIPE.dockerignore beside the recipe wins over the
     * context's .dockerignore */
    cleanup_free char *own = opts->recipe_text ? NULL
                                               : xasprintf ("%s.dockerignore", opts->recipe_path);
    cleanup_free char *ctx_ig = ib_path_join (b->context, ".dockerignore");
    cleanup_free char *itext = NULL;
    ib_error_t e2 = NULL;
    const char *ig_path = own;
    if (own == NULL || ib_read_file_max (own, IB_RECIPE_MAX, ".dockerignore", &itext, NULL, &e2) < 0)
      {
        ig_path = ctx_ig;
        if (e2 && e2->status == EFBIG)
          {
            ib_error_propagate (err, &e2);
            return -1;
          }
        ib_error_free (&e2);
        if (ib_read_file_max (ctx_ig, IB_RECIPE_MAX, ".dockerignore", &itext, NULL, &e2) < 0)
          {
            if (e2->status != ENOENT)
              {
                ib_error_propagate (err, &e2);
                return -1;
              }
            ib_error_free (&e2);
          }
      }
    b->ignore = ib_ignore_parse (itext);
    /* BuildKit refuses the context of a pattern patternmatcher.New
     * refuses ("invalid excludepatterns: [...]: syntax error in pattern") */
    if (ib_ignore_check (b->ignore, err) < 0)
      {
        ib_error_prefix (err, "%s", ig_path);
        return -1;
      }
  }
  return 0;
}

/* The build's KEY=VALUE options and stage names, checked before any work. */
static int
check_options (build_t *b, ib_error_t *err)
{
  const ib_build_opts_t *opts = b->opts;
  for (char **a = opts->annotations; a && *a; a++)
    if (strchr (*a, '=') == NULL || **a == '=')
      {
        ib_error_set (err, EINVAL, "--annotation %s: expected KEY=VALUE", *a);
        return -1;
      }
  if (check_named_contexts (b, err) < 0)
    return -1;
  for (char *const *l = opts->labels; l && *l; l++)
    if (strchr (*l, '=') == NULL || **l == '=')
      {
        ib_error_set (err, EINVAL, "--label %s: expected KEY=VALUE", *l);
        return -1;
      }
  for (char **f = opts->no_cache_filter; f && *f; f++)
    if (ib_recipe_stage (b->recipe, *f) == NULL)
      {
        ib_error_set (err, ENOENT, "--no-cache-filter %s: %s has no stage of that name", *f,
                      b->recipe->path);
        return -1;
      }
  return 0;
}

/* Refuse OUTPUT types and keys the needed stages cannot have, before
 * doing any work; `several`: a build of several platforms. */
static int
check_outputs (build_t *b, bool several, ib_error_t *err)
{
  const ib_build_opts_t *opts = b->opts;
  for (size_t i = 0; i < b->n_stages; i++)
    for (size_t k = 0; b->stages[i].needed && k < b->stages[i].def->n_instrs; k++)
      {
        const ib_instr_t *in = &b->stages[i].def->instrs[k];
        const char *type = in->kind == IB_I_OUTPUT ? kv_get (in, "type") : NULL;
        if (type && strcmp (type, "local") && strcmp (type, "image") && strcmp (type, "oci")
            && strcmp (type, "registry") && strcmp (type, "tar") && strcmp (type, "docker"))
          {
            ib_error_set (err, ENOTSUP, "%s:%d: OUTPUT type=%s is not supported yet",
                          b->recipe->path, in->line, type);
            return -1;
          }
        if (type && several && (strcmp (type, "docker") == 0 || strcmp (type, "tar") == 0))
          {
            ib_error_set (err, ENOTSUP, "%s:%d: OUTPUT type=%s holds one platform's image or "
                          "tree, and this build is for several platforms (type=oci and "
                          "type=image take an index of them all; type=local a directory per "
                          "platform)", b->recipe->path, in->line, type);
            return -1;
          }
        const char *req = type && strcmp (type, "local") == 0 ? kv_get (in, "require") : NULL;
        const char *rep = type && strcmp (type, "local") == 0 ? kv_get (in, "repair") : NULL;
        if (req && *req && rep && *rep)
          {
            ib_error_set (err, EINVAL, "%s:%d: OUTPUT require= and repair= together: repair= "
                          "already fails for a wheel it cannot bring to its policy; require= "
                          "is for wheels left as built", b->recipe->path, in->line);
            return -1;
          }
        /* a value naming ARGs is checked once expanded, when the stage ends */
        if (((req && *req) || (rep && *rep)) && opts->wheels == NULL)
          {
            ib_error_set (err, ENOTSUP, "%s:%d: OUTPUT require= and repair= need the wheel "
                          "checks, which this build was started without", b->recipe->path,
                          in->line);
            return -1;
          }
        if (req && *req && !strchr (req, '$') && opts->wheels->policy_check (req, err) < 0)
          {
            ib_error_prefix (err, "%s:%d: OUTPUT require", b->recipe->path, in->line);
            return -1;
          }
        const char *comp = type && strcmp (type, "tar") == 0 ? kv_get (in, "compression") : NULL;
        ib_compression_t c;
        if (comp && ib_compression_parse (comp, &c) < 0)
          {
            ib_error_set (err, EINVAL, "%s:%d: OUTPUT compression=%s: expected gzip, zstd or none",
                          b->recipe->path, in->line, comp);
            return -1;
          }
      }
  return 0;
}

int
build_one (ib_store_t *store, const ib_build_opts_t *opts, const platform_part_t *part,
           ib_error_t *err)
{
  build_t b = { .store = store, .opts = opts, .sde = ib_source_date_epoch () };
  if (part)
    {
      b.platform_label = part->label;
      b.platform_dir = part->dir;
      b.deferred = part->deferred;
    }
  if (ib_userns_plan (opts->userns, &b.userns, err) < 0)
    return -1;
  if (b.sde < 0 && opts->reproducible)
    b.sde = 0;
  int ret = -1;
  cleanup_free char *text = NULL;
  if (opts->recipe_text)
    text = xstrdup (opts->recipe_text);
  else if (ib_read_file_max (opts->recipe_path, IB_RECIPE_MAX, "recipe", &text, NULL, err) < 0)
    return -1;
  if (ib_recipe_parse (opts->recipe_path, text, &b.recipe, err) < 0)
    return -1;
  ib_progress_mode_t pm = ib_progress_resolved_mode ();
  if ((pm == IB_PROGRESS_TTY || pm == IB_PROGRESS_JSON) && opts->jobs <= 1)
    {
      cleanup_free char *title = xasprintf ("build %s", b.recipe->path);
      b.prog = ib_progress_begin (title);
    }
  if (load_context (&b, err) < 0)
    goto out;
  size_t target;
  if (resolve_args (&b, err) < 0 || resolve_target (&b, &target, err) < 0)
    goto out;
  if (check_options (&b, err) < 0)
    goto out;
  if (cli_outputs (&b, &b.stages[target], err) < 0)
    goto out;
  if (mark_stages_needed (&b, target, err) < 0)
    goto out;
  if (check_outputs (&b, part != NULL, err) < 0)
    goto out;

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
  if (opts->jobs > 1 && opts->shared_only == NULL)
    {
      if (run_stages_parallel (&b, (size_t) opts->jobs, err) < 0)
        goto out;
    }
  else
    {
      size_t last = 0;
      for (size_t i = 0; i < b.n_stages; i++)
        if (b.stages[i].needed)
          last = i;
      struct timespec since;
      clock_gettime (CLOCK_MONOTONIC, &since);
      for (size_t i = 0; i < b.n_stages; i++)
        {
          if (!b.stages[i].needed)
            continue;
          if (run_stage (&b, &b.stages[i], err) < 0)
            goto out;
          /* --cache-to after each stage but the last (the end exports
           * anyway) that ended cache_to_after_s or more after the last
           * export: what a killed build finished is in the cache */
          if (opts->cache_to_each_stage && i < last && opts->cache_to
              && seconds_since (&since) >= opts->cache_to_after_s)
            {
              if (join_layers (&b, &b.stages[i], err) < 0 || need_userns (&b, err) < 0)
                goto out; /* (the user namespace before the network's threads) */
              for (char **c = opts->cache_to; *c; c++)
                {
                  prog_pause (&b);
                  ib_error_t e = NULL;
                  if (ib_cache_export (store, b.keys, *c, &e) < 0)
                    {
                      ib_warn ("%s", e->msg);
                      ib_error_free (&e);
                    }
                  prog_resume (&b);
                }
              clock_gettime (CLOCK_MONOTONIC, &since);
            }
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
    if (!b.build_arg_used[k] && !is_proxy_arg (b.build_args.names[k])
        && !ib_strv_has (opts->shared_only, b.build_args.names[k]))
      {
        bool global = false;
        vars_get (&b.global_args, b.build_args.names[k], &global);
        if (!global)
          ib_warn ("build arg %s was not consumed by any ARG", b.build_args.names[k]);
      }
  if (opts->result && !opts->shared_only && fill_result (&b, &b.stages[target], opts->result, err) < 0)
    goto out;
  if (opts->shared_only)
    ib_info ("build %s: done, the steps every combination shares (%zu steps cached, %zu run)",
             b.recipe->path, b.hits, b.misses);
  else
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
