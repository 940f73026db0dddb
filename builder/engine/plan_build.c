/* builder/engine/plan_build.c — ib_build_plan: what ib_build would do, as
 * JSON, without doing it. */
#include "builder/engine/engine.h"

#include <errno.h>
#include <string.h>

/* json_string, for text from the recipe too: invalid UTF-8 (a raw 0x9b)
 * would make it NULL and the value vanish from the plan; its stray bytes
 * are U+FFFD instead. */
static json_t *
jstr (const char *s)
{
  json_t *j = json_string (s);
  if (j || s == NULL)
    return j;
  cleanup_free char *u = ib_str_utf8 (s);
  return json_string (u);
}

static json_t *
plan_vars_json (const vars_t *v)
{
  json_t *o = json_object ();
  for (size_t i = 0; i < v->n; i++)
    json_object_set_new (o, v->names[i], jstr (v->values[i] ? v->values[i] : ""));
  return o;
}

static json_t *
plan_strv_json (char **v)
{
  json_t *a = json_array ();
  for (char **s = v; s && *s; s++)
    json_array_append_new (a, jstr (*s));
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
      json_array_append_new (a, jstr (x));
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
                               jstr (vars_get (&st->args, in->kvs[i].key, NULL)));
        json_object_set_new (step, "args", o);
        return 0;
      }
    case IB_I_ENV:
    case IB_I_LABEL:
      {
        json_t *o = json_object ();
        json_object_set_new (step, in->kind == IB_I_ENV ? "env" : "labels", o);
        /* a name the recipe does not set (the base image's PATH: the
         * plan reads no image config) stays as written, as in a RUN's
         * preview: `ENV PATH=/opt/x/bin:${PATH}` is not "/opt/x/bin:" */
        plan_lookup_ctx_t pc = { { st, &st->args } };
        for (size_t i = 0; i < in->n_kvs; i++)
          {
            cleanup_free char *k = NULL, *v = NULL;
            if (expand (b, st, in->kvs[i].raw ? in->kvs[i].raw : "", &v, err) < 0)
              return -1;
            if (in->kind == IB_I_ENV)
              {
                free (v);
                v = NULL;
                if (ib_expand (in->kvs[i].raw ? in->kvs[i].raw : "", escape_char (b), plan_lookup,
                               &pc, &v, err) < 0)
                  return -1;
              }
            if (in->kind == IB_I_LABEL && expand (b, st, in->kvs[i].key, &k, err) < 0)
              return -1;
            cleanup_free char *ku = ib_str_utf8 (k ? k : in->kvs[i].key); /* a key, too */
            json_object_set_new (o, ku, jstr (v));
            if (in->kind == IB_I_ENV)
              config_env_set (st->config, in->kvs[i].key, v);
          }
        return 0;
      }
    case IB_I_RUN:
      {
        if (plan_flags (b, st, in, step, err) < 0)
          return -1;
        json_object_set_new (step, "form", jstr (in->json_form ? "exec" : "shell"));
        if (in->json_form)
          json_object_set_new (step, "argv", plan_strv_json (in->args));
        else
          {
            json_object_set_new (step, "shell", plan_strv_json (st->shell));
            json_object_set_new (step, "command", jstr (in->text ? in->text : ""));
            /* A preview: the shell expands the command when it runs */
            plan_lookup_ctx_t pc = { { st, &st->args } };
            cleanup_free char *x = NULL;
            /* not the builder's syntax to check: the shell's */
            ib_expand (in->text ? in->text : "", '\\', plan_lookup, &pc, &x, NULL);
            json_object_set_new (step, "expanded", jstr (x ? x : in->text ? in->text : ""));
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
              json_array_append_new (srcs, jstr (w));
            else
              json_object_set_new (step, "dest", jstr (w));
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
        json_object_set_new (c, "WorkingDir", jstr (abs));
        json_object_set_new (step, "path", jstr (abs));
        return 0;
      }
    case IB_I_USER:
    case IB_I_STOPSIGNAL:
      {
        cleanup_free char *v = NULL;
        if (expand (b, st, in->text, &v, err) < 0
            || (in->kind == IB_I_STOPSIGNAL && ib_stop_signal (v, NULL, err) < 0))
          return -1;
        json_object_set_new (step, "value", jstr (v));
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
            json_array_append_new (a, jstr (x));
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
      json_object_set_new (step, "text", jstr (in->text ? in->text : ""));
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
            json_object_set_new (js, "platform", jstr (want));
          int idx = stage_index_before (b, image, (size_t) (st - b->stages));
          if (idx >= 0 && (size_t) idx < (size_t) (st - b->stages))
            {
              stage_state_t *src = &b->stages[idx];
              st->config = json_deep_copy (src->config);
              json_object_set_new (base, "stage", json_integer (idx));
              json_object_set_new (base, "name", jstr (src->def->name));
            }
          else
            {
              /* the base image's own ENV, SHELL and WORKDIR are not known
               * without pulling it */
              st->config = json_object ();
              json_object_set_new (base, strcmp (image, "scratch") == 0 ? "scratch" : "image",
                                   strcmp (image, "scratch") == 0 ? json_true ()
                                                                  : jstr (image));
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
              json_object_set_new (o, key, jstr (x));
            }
          json_array_append_new (outputs, o);
          continue;
        }
      const char *from = (in->kind == IB_I_COPY || in->kind == IB_I_ADD)
                             ? ib_instr_flag (in, "from") : NULL;
      cleanup_free char *fx = NULL;
      if (from && expand (b, st, from, &fx, NULL) == 0 && stage_index (b, fx) < 0
          && strspn (fx, "0123456789") != strlen (fx))
        {
          /* COPY --from=IMAGE: pulled by the step (image_source) */
          json_t *images = json_object_get (js, "copies_from_images");
          if (images == NULL)
            json_object_set_new (js, "copies_from_images", images = json_array ());
          bool seen = false;
          size_t k;
          json_t *v;
          json_array_foreach (images, k, v)
            seen |= strcmp (json_string_value (v), fx) == 0;
          if (!seen)
            json_array_append_new (images, jstr (fx));
        }
      json_t *step = json_object ();
      json_array_append_new (steps, step);
      json_object_set_new (step, "line", json_integer (in->line));
      json_object_set_new (step, "instruction", jstr (in->keyword));
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
  if (opts->recipe_text)
    text = xstrdup (opts->recipe_text);
  else if (ib_read_file_max (opts->recipe_path, IB_RECIPE_MAX, "recipe", &text, NULL, err) < 0)
    return -1;
  if (ib_recipe_parse (opts->recipe_path, text, &b.recipe, err) < 0)
    return -1;
  /* As ib_build: build args, platform ARGs, global ARGs, the stages needed. */
  size_t target;
  if (resolve_args (&b, err) < 0 || resolve_target (&b, &target, err) < 0)
    goto out;
  plan = json_object ();
  json_object_set_new (plan, "recipe", jstr (b.recipe->path));
  json_object_set_new (plan, "platform", jstr (vars_get (&b.auto_args, "TARGETPLATFORM", NULL)));
  json_object_set_new (plan, "build_platform",
                       jstr (vars_get (&b.auto_args, "BUILDPLATFORM", NULL)));
  json_object_set_new (plan, "build_args", plan_vars_json (&b.build_args));
  json_t *globals = json_object ();
  json_object_set_new (plan, "global_args", globals);
  for (size_t i = 0; i < b.recipe->n_global_args; i++)
    {
      const ib_instr_t *in = &b.recipe->global_args[i];
      for (size_t k = 0; k < in->n_kvs; k++)
        json_object_set_new (globals, in->kvs[k].key,
                             jstr (vars_get (&b.global_args, in->kvs[k].key, NULL)));
    }
  /* as ib_build: --output and -t are OUTPUTs at the end of the target */
  if (cli_outputs (&b, &b.stages[target], err) < 0 || mark_stages_needed (&b, target, err) < 0)
    goto out;
  json_t *tj = json_object ();
  json_object_set_new (tj, "index", json_integer ((json_int_t) target));
  json_object_set_new (tj, "name", b.stages[target].def->name
                                       ? jstr (b.stages[target].def->name)
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
      json_object_set_new (js, "name", st->def->name ? jstr (st->def->name) : json_null ());
      json_object_set_new (js, "needed", json_boolean (st->needed));
      if (st->needed && plan_stage (&b, st, js, err) < 0)
        goto out;
    }
  json_t *unused = json_array ();
  json_object_set_new (plan, "unused_build_args", unused);
  for (size_t k = 0; k < b.build_args.n; k++)
    if (!b.build_arg_used[k] && !is_proxy_arg (b.build_args.names[k])
        && !vars_declared (&b.global_args, b.build_args.names[k]))
      json_array_append_new (unused, jstr (b.build_args.names[k]));
  *out = plan;
  plan = NULL;
  ret = 0;
out:
  json_decref (plan);
  build_free (&b);
  return ret;
}
