/* libFuzzer target: the recipe parser (builder/engine/recipe*.c) and word
 * expansion.  Any input: ib_recipe_parse, then for every instruction
 * (global ARGs, stages, ONBUILD triggers) every word the builder expands
 * goes through ib_expand_word (and RUN text, COPY heredoc bodies through
 * ib_expand), with a lookup that knows a few variables, one of them large;
 * EXPOSE and STOPSIGNAL words through their checks; the accessors.
 * Properties checked (abort on failure): an expanded word is never longer
 * than max(IB_EXPAND_MAX, the word's length); no error message holds a
 * control character (they end up on the user's terminal); an accepted
 * EXPOSE key ends in /tcp, /udp or /sctp; a STOPSIGNAL is 1 to 64.
 * Seeds: tests/fuzz/seeds/recipe (every instruction, heredocs, line
 * continuations, and the hostile inputs of docs/recipe.md's limits). */
#include "builder/engine/recipe.h"
#include "common/util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static char *big_value;

static const char *
lookup (void *ctx, const char *name)
{
  (void) ctx;
  if (strcmp (name, "A") == 0)
    return "aa";
  if (strcmp (name, "EMPTY") == 0)
    return "";
  if (strcmp (name, "REF") == 0)
    return "${A}$A"; /* values are not expanded again */
  if (strcmp (name, "PORT") == 0)
    return "8080/udp";
  if (strcmp (name, "SIG") == 0)
    return "SIGTERM";
  if (strcmp (name, "BIG") == 0)
    return big_value;
  if (strcmp (name, "KEEP") == 0)
    return IB_LOOKUP_KEEP;
  return NULL;
}

static void
check_msg (const char *msg)
{
  for (const char *c = msg; *c; c++)
    if ((unsigned char) *c < 0x20 || *c == 0x7f)
      abort (); /* a control character would reach the terminal */
}

static void
check_err (ib_error_t *err)
{
  if (*err)
    {
      check_msg ((*err)->msg);
      ib_error_free (err);
    }
}

/* Expand `w` both ways; returns the ib_expand_word result (caller frees) or NULL. */
static char *
expand_both (const char *w, char esc)
{
  ib_error_t err = NULL;
  char *out = NULL;
  size_t limit = strlen (w) > IB_EXPAND_MAX ? strlen (w) : IB_EXPAND_MAX;

  if (ib_expand (w, esc, lookup, NULL, &out, &err) == 0)
    {
      if (strlen (out) > limit)
        abort ();
      free (out);
    }
  check_err (&err);
  out = NULL;
  if (ib_expand_word (w, esc, lookup, NULL, &out, &err) == 0)
    {
      if (strlen (out) > limit)
        abort ();
      return out;
    }
  check_err (&err);
  return NULL;
}

static void
instr (const ib_instr_t *in, char esc)
{
  ib_error_t err = NULL;

  for (size_t i = 0; in->flags && in->flags[i]; i++)
    free (expand_both (in->flags[i], esc));
  for (size_t i = 0; i < in->n_kvs; i++)
    {
      free (expand_both (in->kvs[i].key, esc));
      if (in->kvs[i].raw)
        free (expand_both (in->kvs[i].raw, esc));
    }
  for (size_t i = 0; in->args && in->args[i]; i++)
    {
      if (ib_instr_heredoc (in, i))
        continue;
      char *x = expand_both (in->args[i], esc);
      if (x && in->kind == IB_I_EXPOSE)
        {
          char *key = NULL;
          if (ib_expose_key (x, &key, &err) == 0)
            {
              size_t n = strlen (key);
              if (!(n > 4 && (strcmp (key + n - 4, "/tcp") == 0 || strcmp (key + n - 4, "/udp") == 0
                              || (n > 5 && strcmp (key + n - 5, "/sctp") == 0))))
                abort ();
              free (key);
            }
          check_err (&err);
        }
      free (x);
    }
  for (size_t i = 0; i < in->n_heredocs; i++)
    if (in->heredocs[i].expand)
      {
        char *out = NULL;
        if (ib_expand (in->heredocs[i].content, esc, lookup, NULL, &out, &err) == 0)
          free (out);
        check_err (&err);
      }
  if (in->text && in->kind != IB_I_ONBUILD)
    {
      char *x = expand_both (in->text, esc);
      if (x && in->kind == IB_I_STOPSIGNAL)
        {
          int n = 0;
          if (ib_stop_signal (x, &n, &err) == 0 && (n < 1 || n > 64))
            abort ();
          check_err (&err);
        }
      free (x);
    }
  (void) ib_instr_flag (in, "from");
  char **v = ib_instr_flag_values (in, "mount");
  ib_strv_free (v);
  if (in->trigger)
    instr (in->trigger, esc);
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  if (big_value == NULL)
    {
      big_value = malloc (65537);
      memset (big_value, 'b', 65536);
      big_value[65536] = '\0';
    }
  char *s = malloc (size + 1);
  memcpy (s, data, size);
  s[size] = '\0';
  ib_recipe_t *r = NULL;
  ib_error_t err = NULL;
  if (ib_recipe_parse ("fuzz", s, &r, &err) == 0)
    {
      for (size_t i = 0; i < r->n_global_args; i++)
        instr (&r->global_args[i], r->escape);
      for (size_t k = 0; k < r->n_stages; k++)
        {
          const ib_stage_t *st = &r->stages[k];
          if (st->name && ib_recipe_stage (r, st->name) == NULL)
            abort ();
          for (size_t i = 0; i < st->n_instrs; i++)
            instr (&st->instrs[i], r->escape);
        }
      ib_recipe_free (r);
    }
  else
    {
      if (r != NULL)
        abort ();
      check_err (&err);
    }
  /* the word splitter on the raw input */
  char **w = ib_split_words (s);
  ib_strv_free (w);
  free (s);
  return 0;
}
