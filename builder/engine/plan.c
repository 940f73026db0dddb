/* builder/engine/plan.c — text rendering of a build plan (plan.h). */
#include "builder/engine/plan.h"
#include "common/util.h"

#include <string.h>

char *
ib_plan_quote (const char *s)
{
  static const char safe[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                             "_@%+=:,./-";
  if (s == NULL)
    s = "";
  if (*s && strspn (s, safe) == strlen (s))
    return xstrdup (s);
  ib_buf_t b = { 0 };
  ib_buf_append (&b, (char[]){ '\'' }, 1);
  for (const char *p = s; *p; p++)
    if (*p == '\'')
      ib_buf_puts (&b, "'\\''");
    else
      ib_buf_append (&b, (char[]){ *p }, 1);
  ib_buf_append (&b, (char[]){ '\'' }, 1);
  return ib_buf_steal (&b);
}

static const char *
str (const json_t *o, const char *key)
{
  const char *s = json_string_value (json_object_get (o, key));
  return s ? s : "";
}

static void
put_quoted (ib_buf_t *b, const char *s)
{
  cleanup_free char *q = ib_plan_quote (s);
  ib_buf_puts (b, q);
}

/* " K=V K2=V2" from an object of strings. */
static void
put_kvs (ib_buf_t *b, const json_t *o)
{
  const char *k;
  json_t *v;
  json_object_foreach ((json_t *) o, k, v)
  {
    ib_buf_printf (b, " %s=", k);
    put_quoted (b, json_string_value (v));
  }
}

/* " w1 w2" from an array of strings. */
static void
put_words (ib_buf_t *b, const json_t *a)
{
  size_t i;
  json_t *v;
  json_array_foreach (a, i, v)
  {
    ib_buf_append (b, (char[]){ ' ' }, 1);
    put_quoted (b, json_string_value (v));
  }
}

static void
put_json (ib_buf_t *b, const json_t *v)
{
  cleanup_free char *s = json_dumps (v, JSON_COMPACT | JSON_ENCODE_ANY);
  ib_buf_printf (b, " %s", s ? s : "");
}

/* "NAME" or "INDEX NAME" of stage `i` for "depends on" and "from". */
static void
put_stage_ref (ib_buf_t *b, const json_t *plan, json_int_t i)
{
  const json_t *st = json_array_get (json_object_get (plan, "stages"), (size_t) i);
  const char *name = json_string_value (json_object_get (st, "name"));
  ib_buf_printf (b, "%lld%s%s", (long long) i, name ? " " : "", name ? name : "");
}

/* Text after a newline in a multi-line value goes on indented lines. */
static void
put_indented (ib_buf_t *b, const char *s, const char *indent)
{
  for (const char *p = s; *p; p++)
    {
      ib_buf_append (b, (char[]){ *p }, 1);
      if (*p == '\n' && p[1])
        ib_buf_puts (b, indent);
    }
}

/* RUN's ARGs after the first RUN of a stage: those of the previous RUN
 * (which the text names by line) plus what changed since. */
typedef struct prev_run
{
  const json_t *args;
  json_int_t line;
} prev_run_t;

static void
put_run_args (ib_buf_t *b, const json_t *step, prev_run_t *prev)
{
  const json_t *args = json_object_get (step, "args");
  ib_buf_puts (b, "    args:");
  if (json_object_size (args) == 0)
    ib_buf_puts (b, " (none)");
  else if (prev->args == NULL)
    put_kvs (b, args);
  else
    {
      ib_buf_printf (b, " those of line %lld", (long long) prev->line);
      const char *k;
      json_t *v;
      bool first = true;
      json_object_foreach ((json_t *) args, k, v)
      {
        const char *old = json_string_value (json_object_get (prev->args, k));
        if (old && strcmp (old, json_string_value (v)) == 0)
          continue;
        ib_buf_printf (b, "%s %s=", first ? ", and" : "", k);
        first = false;
        put_quoted (b, json_string_value (v));
      }
    }
  ib_buf_puts (b, "\n");
  prev->args = args;
  prev->line = json_integer_value (json_object_get (step, "line"));
}

static void
put_step (ib_buf_t *b, const json_t *step, prev_run_t *prev)
{
  const char *ins = str (step, "instruction");
  ib_buf_printf (b, "  line %lld: %s", (long long) json_integer_value (json_object_get (step, "line")),
                 ins);
  put_words (b, json_object_get (step, "flags"));
  if (strcmp (ins, "ARG") == 0)
    put_kvs (b, json_object_get (step, "args"));
  else if (strcmp (ins, "ENV") == 0)
    put_kvs (b, json_object_get (step, "env"));
  else if (strcmp (ins, "LABEL") == 0)
    put_kvs (b, json_object_get (step, "labels"));
  else if (strcmp (ins, "RUN") == 0)
    {
      if (json_object_get (step, "argv"))
        put_json (b, json_object_get (step, "argv"));
      else
        {
          ib_buf_append (b, (char[]){ ' ' }, 1);
          put_indented (b, json_object_get (step, "expanded") ? str (step, "expanded")
                                                              : str (step, "command"),
                        "    ");
        }
      ib_buf_append (b, (char[]){ '\n' }, 1);
      const json_t *shell = json_object_get (step, "shell");
      if (shell && !(json_array_size (shell) == 2
                     && strcmp (json_string_value (json_array_get (shell, 0)), "/bin/sh") == 0
                     && strcmp (json_string_value (json_array_get (shell, 1)), "-c") == 0))
        {
          ib_buf_puts (b, "    shell:");
          put_json (b, shell);
          ib_buf_append (b, (char[]){ '\n' }, 1);
        }
      put_run_args (b, step, prev);
      return;
    }
  else if (strcmp (ins, "COPY") == 0 || strcmp (ins, "ADD") == 0)
    {
      put_words (b, json_object_get (step, "sources"));
      ib_buf_append (b, (char[]){ ' ' }, 1);
      put_quoted (b, str (step, "dest"));
    }
  else if (json_object_get (step, "path"))
    {
      ib_buf_append (b, (char[]){ ' ' }, 1);
      put_quoted (b, str (step, "path"));
    }
  else if (json_object_get (step, "value"))
    {
      ib_buf_append (b, (char[]){ ' ' }, 1);
      put_quoted (b, str (step, "value"));
    }
  else if (json_object_get (step, "values"))
    put_words (b, json_object_get (step, "values"));
  else if (json_object_get (step, "argv"))
    put_json (b, json_object_get (step, "argv"));
  else
    {
      ib_buf_append (b, (char[]){ ' ' }, 1);
      put_indented (b, str (step, "text"), "    ");
    }
  ib_buf_append (b, (char[]){ '\n' }, 1);
}

static void
put_stage (ib_buf_t *b, const json_t *plan, const json_t *st)
{
  const char *name = json_string_value (json_object_get (st, "name"));
  ib_buf_printf (b, "stage %lld%s%s", (long long) json_integer_value (json_object_get (st, "index")),
                 name ? " " : "", name ? name : "");
  if (!json_is_true (json_object_get (st, "needed")))
    {
      ib_buf_puts (b, ": skipped (not needed)\n");
      return;
    }
  ib_buf_puts (b, "\n  from: ");
  const json_t *base = json_object_get (st, "base");
  if (json_object_get (base, "stage"))
    {
      ib_buf_puts (b, "stage ");
      put_stage_ref (b, plan, json_integer_value (json_object_get (base, "stage")));
    }
  else if (json_object_get (base, "image"))
    ib_buf_printf (b, "image %s", str (base, "image"));
  else
    ib_buf_puts (b, "scratch");
  if (json_object_get (st, "platform"))
    ib_buf_printf (b, " (--platform=%s)", str (st, "platform"));
  ib_buf_puts (b, "\n  depends on: ");
  const json_t *deps = json_object_get (st, "depends_on");
  if (json_array_size (deps) == 0)
    ib_buf_puts (b, "none");
  size_t i;
  json_t *v;
  json_array_foreach (deps, i, v)
  {
    if (i)
      ib_buf_puts (b, ", ");
    put_stage_ref (b, plan, json_integer_value (v));
  }
  ib_buf_append (b, (char[]){ '\n' }, 1);
  json_array_foreach (json_object_get (st, "copies_from_images"), i, v)
    ib_buf_printf (b, "  copies from image %s\n", json_string_value (v));
  prev_run_t prev = { NULL, 0 };
  json_array_foreach (json_object_get (st, "steps"), i, v)
    put_step (b, v, &prev);
  json_array_foreach (json_object_get (st, "outputs"), i, v)
  {
    ib_buf_printf (b, "  output: type=%s", str (v, "type"));
    const char *k;
    json_t *x;
    json_object_foreach (v, k, x)
    {
      if (strcmp (k, "type") == 0 || strcmp (k, "line") == 0)
        continue;
      ib_buf_printf (b, " %s=", k);
      put_quoted (b, json_string_value (x));
    }
    ib_buf_append (b, (char[]){ '\n' }, 1);
  }
}

char *
ib_plan_text (const json_t *plan)
{
  ib_buf_t b = { 0 };
  const json_t *target = json_object_get (plan, "target");
  const char *tname = json_string_value (json_object_get (target, "name"));
  ib_buf_printf (&b, "recipe: %s\n", str (plan, "recipe"));
  ib_buf_printf (&b, "target: stage %lld%s%s\n",
                 (long long) json_integer_value (json_object_get (target, "index")),
                 tname ? " " : "", tname ? tname : "");
  ib_buf_printf (&b, "platform: %s\n", str (plan, "platform"));
  if (json_object_size (json_object_get (plan, "build_args")))
    {
      ib_buf_puts (&b, "build args:");
      put_kvs (&b, json_object_get (plan, "build_args"));
      ib_buf_append (&b, (char[]){ '\n' }, 1);
    }
  const char *k;
  json_t *v;
  json_object_foreach (json_object_get (plan, "global_args"), k, v)
  {
    ib_buf_printf (&b, "global ARG %s=", k);
    put_quoted (&b, json_string_value (v));
    ib_buf_append (&b, (char[]){ '\n' }, 1);
  }
  size_t i;
  json_array_foreach (json_object_get (plan, "stages"), i, v)
  {
    ib_buf_puts (&b, "\n");
    put_stage (&b, plan, v);
  }
  json_array_foreach (json_object_get (plan, "unused_build_args"), i, v)
    ib_buf_printf (&b, "warning: build arg %s was not consumed by any ARG\n", json_string_value (v));
  /* the recipe's text goes to a terminal: its control characters (ESC,
   * BEL, CR, C1...) shown as '?' by the escaper of every other line
   * imgbuild prints; the line breaks are the text's own */
  cleanup_free char *raw = ib_buf_steal (&b);
  return ib_str_printable (raw, true);
}
