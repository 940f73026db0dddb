/* builder/engine/steps.c — one stage's steps in order: the instruction
 * dispatch, ONBUILD triggers, and the stage finished into an image. */
#include "builder/engine/engine.h"

#include <errno.h>
#include <string.h>

int
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

/* The shell of RUN and shell-form CMD/ENTRYPOINT: the base's config Shell
 * when it has one (a SHELL of the image or stage this one is FROM). */
void
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
int
finish_stage (build_t *b, stage_state_t *st, ib_error_t *err)
{
  if (st->n_pending > 0 && join_layers (b, st, err) < 0)
    return -1;
  return store_stage_image (b, st, err);
}

int
run_stage (build_t *b, stage_state_t *st, ib_error_t *err)
{
  const ib_stage_t *def = st->def;
  st->shell = NULL;
  ib_strv_push (&st->shell, "/bin/sh");
  ib_strv_push (&st->shell, "-c");
  st->no_cache = b->opts->no_cache;
  for (char **f = b->opts->no_cache_filter; f && *f; f++)
    if (ib_recipe_stage (b->recipe, *f) == def
        || (def->name && strcasecmp (def->name, *f) == 0)) /* each stage of a name */
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
      if (b->opts->shared_only && shared_stops_here (b, st, in))
        {
          ib_info ("[%s] --shared-only: stopped before line %d (its %s depends on a --matrix argument)",
                   stage_label (st), in->line, in->keyword);
          st->stopped = true;
          break;
        }
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
  if (st->stopped)
    return st->n_pending > 0 ? join_layers (b, st, err) : 0; /* the blobs, for --cache-to */
  bool image = b->opts->jobs > 1 || b->opts->shared_only;
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
      if (in->kind == IB_I_OUTPUT && !b->opts->shared_only && run_output (b, st, in, err) < 0)
        return instr_error (b, in, err);
    }
  st->built = true;
  return 0;
}
