/* builder/engine/shared.c — `build --shared-only` (ib_build_opts_t's
 * shared_only): where a stage stops because the rest of it depends on a
 * --matrix axis.
 *
 * Reading order: tainted() says which build-arg names an axis reaches (the
 * axes, and global ARGs whose defaults read one, transitively); reads()
 * whether a word mentions one ($NAME, ${NAME...}); shared_stops_here() is
 * asked by run_stage before each instruction.  What counts as reading
 * follows the Dockerfile's scoping: a RUN sees a build arg only after an
 * ARG of the stage declares it, a FROM sees the global ARGs, --from and
 * from= name stages or images. */
#include "builder/engine/engine.h"

#include <ctype.h>
#include <string.h>

/* Does `word` mention the variable `name` ($name or ${name...})? */
static bool
mentions (const char *word, const char *name)
{
  size_t n = strlen (name);
  for (const char *p = word ? strchr (word, '$') : NULL; p; p = strchr (p + 1, '$'))
    {
      const char *v = p[1] == '{' ? p + 2 : p + 1;
      if (strncmp (v, name, n) == 0 && !(isalnum ((unsigned char) v[n]) || v[n] == '_'))
        return true;
    }
  return false;
}

/* The axes and every global ARG whose default reads one (in recipe order,
 * so a default reading an earlier tainted ARG is tainted too).  The
 * caller frees it. */
static char **
tainted (build_t *b)
{
  char **t = ib_strv_dup (b->opts->shared_only);
  for (size_t i = 0; i < b->recipe->n_global_args; i++)
    {
      const ib_instr_t *in = &b->recipe->global_args[i];
      for (size_t k = 0; k < in->n_kvs; k++)
        for (char **n = t; n && *n; n++)
          if (in->kvs[k].raw && mentions (in->kvs[k].raw, *n))
            {
              ib_strv_push (&t, in->kvs[k].key);
              break;
            }
    }
  return t;
}

static bool
reads (const char *word, char *const *names)
{
  for (char *const *n = names; n && *n; n++)
    if (mentions (word, *n))
      return true;
  return false;
}

/* `value` (a --from= value, or a from= inside --mount=) names a stage that
 * stopped, or reads a tainted name. */
static bool
from_stopped (build_t *b, const stage_state_t *st, const char *value, size_t len,
              char *const *names)
{
  cleanup_free char *v = strndup (value, len);
  if (reads (v, names))
    return true;
  /* FROM: the last such stage before this one; elsewhere the last one */
  int k = st ? stage_index_before (b, v, (size_t) (st - b->stages)) : stage_index (b, v);
  return k >= 0 && b->stages[k].stopped;
}

bool
shared_stops_here (build_t *b, stage_state_t *st, const ib_instr_t *in)
{
  cleanup_strv char **names = tainted (b);
  if (in->kind == IB_I_ARG)
    {
      for (size_t k = 0; k < in->n_kvs; k++)
        if (ib_strv_has (names, in->kvs[k].key))
          return true;
      return false;
    }
  if (in->kind == IB_I_FROM && from_stopped (b, st, in->text, strlen (in->text), names))
    return true;
  for (char **f = in->flags; *f; f++)
    {
      if (ib_str_has_prefix (*f, "--from=")
          && from_stopped (b, NULL, *f + 7, strlen (*f + 7), names))
        return true;
      if (ib_str_has_prefix (*f, "--platform=") && reads (*f, names))
        return true;
      for (const char *p = strstr (*f, "from="); ib_str_has_prefix (*f, "--mount=") && p;
           p = strstr (p + 1, "from="))
        if ((p[-1] == ',' || p[-1] == '=')
            && from_stopped (b, NULL, p + 5, strcspn (p + 5, ","), names))
          return true;
    }
  return false;
}
