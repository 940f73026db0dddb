/* builder/engine/recipe_words.c — the word lexer (ib_expand / ib_expand_word and
 * the parser's own quote removal share one engine: Docker's ProcessWord) and
 * word splitting. */
#include "builder/engine/recipe-int.h"
#include "common/util.h"

#include <errno.h>
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* word lexer                                                         */
/* ------------------------------------------------------------------ */

enum
{
  LEX_EXPAND = 1 << 0,  /* expand $VAR (else '$' is an ordinary char) */
  LEX_UNQUOTE = 1 << 1, /* remove quotes and process escapes (Docker's ProcessWord) */
};

struct lex
{
  const char *s;
  size_t i, n;
  char esc;
  int mode;
  int depth;            /* ${...} words being evaluated around l->i */
  size_t max;           /* the most bytes any output buffer may hold */
  ib_lookup_fn lookup;
  void *ctx;
  const char *word;     /* the whole input, for messages */
  ib_error_t *err;
};

static int
lex_fail (struct lex *l, const char *fmt, ...) __attribute__ ((format (printf, 2, 3)));

static int
lex_fail (struct lex *l, const char *fmt, ...)
{
  cleanup_free char *ex = excerpt (l->word);
  va_list ap;
  va_start (ap, fmt);
  cleanup_free char *msg = vformat_masked (fmt, ap);
  va_end (ap);
  return ib_error_set (l->err, EINVAL, "expand '%s': %s", ex, msg);
}

static int lex_until (struct lex *l, int stop, ib_buf_t *out);

/* After `name`'s value (or a ${name...} word) went into `out`: refuse a
 * result above the limit (ARG A=$B$B doubling would grow without bound). */
static int
lex_check_size (struct lex *l, const ib_buf_t *out, const char *name)
{
  if (out->len <= l->max)
    return 0;
  cleanup_free char *ex = excerpt_n (name, 64);
  return lex_fail (l, "$%s makes the expansion longer than %zu bytes (the limit of an expanded word)",
                   ex, l->max);
}

void
put_char (ib_buf_t *out, char c)
{
  ib_buf_append (out, &c, 1);
}

const char IB_LOOKUP_KEEP[] = "";

static const char *
lex_get (struct lex *l, const char *name)
{
  if (l->lookup == NULL)
    return NULL;
  return l->lookup (l->ctx, name);
}

/* Remove the shortest/longest prefix/suffix of `value` that matches glob `pat`
 * (the caller bounds the work: IB_EXPAND_TRIM_MAX). */
static void
trim_pattern (const char *value, const char *pat, bool suffix, bool longest, ib_buf_t *out)
{
  size_t len = strlen (value);
  size_t k;

  if (!suffix)
    {
      /* each prefix in place (a NUL moved along a copy), not a copy each */
      cleanup_free char *prefix = xstrdup (value);
      for (size_t step = 0; step <= len; step++)
        {
          k = longest ? len - step : step;
          char saved = prefix[k];
          prefix[k] = '\0';
          int m = fnmatch (pat, prefix, 0);
          prefix[k] = saved;
          if (m == 0)
            {
              ib_buf_puts (out, value + k);
              return;
            }
        }
    }
  else
    {
      for (size_t step = 0; step <= len; step++)
        {
          k = longest ? step : len - step;
          if (fnmatch (pat, value + k, 0) == 0)
            {
              ib_buf_append (out, value, k);
              return;
            }
        }
    }
  ib_buf_puts (out, value);
}

/* Read a variable name at l->i: [A-Za-z_][A-Za-z0-9_]* or a run of digits. */
static char *
lex_name (struct lex *l)
{
  size_t start = l->i;

  if (l->i < l->n && is_digit (l->s[l->i]))
    {
      while (l->i < l->n && is_digit (l->s[l->i]))
        l->i++;
    }
  else if (l->i < l->n && is_name_start (l->s[l->i]))
    {
      while (l->i < l->n && is_name_char (l->s[l->i]))
        l->i++;
    }
  return xstrndup (l->s + start, l->i - start);
}

/* At '$' (LEX_EXPAND mode). */
static int
lex_dollar (struct lex *l, ib_buf_t *out)
{
  cleanup_free char *name = NULL;
  const char *value;
  size_t start = l->i;

  l->i++; /* '$' */
  if (l->i >= l->n || (l->s[l->i] != '{' && !is_name_start (l->s[l->i])
                       && !is_digit (l->s[l->i])))
    {
      put_char (out, '$');
      return 0;
    }

  if (l->s[l->i] != '{')
    {
      name = lex_name (l);
      value = lex_get (l, name);
      if (value == IB_LOOKUP_KEEP)
        ib_buf_append (out, l->s + start, l->i - start);
      else if (value)
        ib_buf_puts (out, value);
      return lex_check_size (l, out, name);
    }

  l->i++; /* '{' */
  if (l->i >= l->n)
    return lex_fail (l, "expected '}', got end of text");
  name = lex_name (l);
  if (name[0] == '\0')
    {
      char bad[2] = { l->s[l->i], '\0' };
      return lex_fail (l, "bad substitution: expected a variable name after '${', got '%s'",
                       bad);
    }
  if (l->i >= l->n)
    return lex_fail (l, "expected '}', got end of text");

  value = lex_get (l, name);
  char op = l->s[l->i++];
  if (op == '}')
    {
      if (value == IB_LOOKUP_KEEP)
        ib_buf_append (out, l->s + start, l->i - start);
      else if (value)
        ib_buf_puts (out, value);
      return lex_check_size (l, out, name);
    }

  bool colon = false, twice = false;
  if (op == ':')
    {
      if (l->i >= l->n)
        return lex_fail (l, "expected '}', got end of text");
      colon = true;
      op = l->s[l->i++];
      if (op != '-' && op != '+' && op != '?')
        {
          char bad[2] = { op, '\0' };
          return lex_fail (l, "unsupported modifier in ${%s:...}, got '%s'", name, bad);
        }
    }
  else if (op == '#' || op == '%')
    {
      if (l->i < l->n && l->s[l->i] == op)
        {
          twice = true;
          l->i++;
        }
    }
  else if (op != '-' && op != '+' && op != '?')
    {
      char bad[2] = { op, '\0' };
      return lex_fail (l, "unsupported modifier in ${%s...}, got '%s'", name, bad);
    }

  /* The word is always evaluated (errors in it count), used or not.  It may
   * hold ${...} itself: the recursion is bounded. */
  if (l->depth >= IB_EXPAND_MAX_DEPTH)
    return lex_fail (l, "${...} nested more than %d deep", IB_EXPAND_MAX_DEPTH);
  ib_buf_t word = { 0 };
  ib_buf_append (&word, "", 0);
  l->depth++;
  int wr = lex_until (l, '}', &word);
  l->depth--;
  if (wr < 0 || lex_check_size (l, &word, name) < 0)
    {
      ib_buf_free (&word);
      return -1;
    }
  if (l->i >= l->n)
    {
      ib_buf_free (&word);
      return lex_fail (l, "expected '}', got end of text");
    }
  l->i++; /* '}' */
  if (value == IB_LOOKUP_KEEP)
    {
      ib_buf_free (&word);
      ib_buf_append (out, l->s + start, l->i - start);
      return 0;
    }

  bool set = value != NULL;
  bool nonempty = value != NULL && value[0] != '\0';
  bool have = colon ? nonempty : set;
  int ret = 0;

  switch (op)
    {
    case '-':
      ib_buf_puts (out, have ? value : word.data);
      break;
    case '+':
      if (have)
        ib_buf_puts (out, word.data);
      break;
    case '?':
      if (have)
        ib_buf_puts (out, value);
      else
        ret = lex_fail (l, "%s: %s", name,
                        word.data[0] ? word.data
                                     : (colon ? "is unset or empty" : "is unset"));
      break;
    case '#':
    case '%':
      {
        /* up to len + 1 fnmatch calls, each up to len + pattern steps */
        size_t vlen = value ? strlen (value) : 0;
        if ((double) (vlen + 1) * (double) (vlen + word.len + 1) > (double) IB_EXPAND_TRIM_MAX)
          {
            cleanup_free char *ex = excerpt_n (name, 64);
            ret = lex_fail (l, "${%s%s...}: removing a pattern of %zu bytes from a value of %zu "
                            "bytes is over the limit", ex, op == '%' ? (twice ? "%%" : "%")
                                                                    : (twice ? "##" : "#"),
                            word.len, vlen);
            break;
          }
        trim_pattern (value ? value : "", word.data, op == '%', twice, out);
        break;
      }
    default:
      break;
    }
  ib_buf_free (&word);
  if (ret == 0)
    ret = lex_check_size (l, out, name);
  return ret;
}

static int
lex_single_quote (struct lex *l, ib_buf_t *out)
{
  bool keep = !(l->mode & LEX_UNQUOTE);

  l->i++; /* opening ' */
  if (keep)
    put_char (out, '\'');
  while (l->i < l->n && l->s[l->i] != '\'')
    put_char (out, l->s[l->i++]);
  if (l->i >= l->n)
    return lex_fail (l, "expected a closing single quote, got end of text");
  l->i++;
  if (keep)
    put_char (out, '\'');
  return 0;
}

static int
lex_double_quote (struct lex *l, ib_buf_t *out)
{
  bool keep = !(l->mode & LEX_UNQUOTE);

  l->i++; /* opening " */
  if (keep)
    put_char (out, '"');
  for (;;)
    {
      if (l->i >= l->n)
        return lex_fail (l, "expected a closing double quote, got end of text");
      char c = l->s[l->i];
      if (c == '"')
        {
          l->i++;
          if (keep)
            put_char (out, '"');
          return 0;
        }
      if (c == '$' && (l->mode & LEX_EXPAND))
        {
          if (lex_dollar (l, out) < 0)
            return -1;
          continue;
        }
      l->i++;
      if (c == l->esc && l->i < l->n)
        {
          char d = l->s[l->i];
          if (d == '$')
            {
              /* Both modes drop the escape before '$'. */
              put_char (out, d);
              l->i++;
              continue;
            }
          if (d == '"' || d == l->esc)
            {
              if (keep)
                put_char (out, c);
              put_char (out, d);
              l->i++;
              continue;
            }
        }
      put_char (out, c);
    }
}

/* Process l->s from l->i up to `stop` (not consumed; -1: the end). */
static int
lex_until (struct lex *l, int stop, ib_buf_t *out)
{
  bool keep = !(l->mode & LEX_UNQUOTE);

  while (l->i < l->n)
    {
      char c = l->s[l->i];
      if (stop >= 0 && c == (char) stop)
        return 0;
      if (c == l->esc)
        {
          l->i++;
          if (l->i >= l->n)
            {
              if (keep)
                put_char (out, c);
              return 0;
            }
          char d = l->s[l->i++];
          if (keep && d != '$')
            put_char (out, c);
          put_char (out, d);
          continue;
        }
      if (c == '\'')
        {
          if (lex_single_quote (l, out) < 0)
            return -1;
          continue;
        }
      if (c == '"')
        {
          if (lex_double_quote (l, out) < 0)
            return -1;
          continue;
        }
      if (c == '$' && (l->mode & LEX_EXPAND))
        {
          if (lex_dollar (l, out) < 0)
            return -1;
          continue;
        }
      put_char (out, c);
      l->i++;
    }
  return 0;
}

static int
lex_run (const char *word, char escape, int mode, ib_lookup_fn lookup, void *ctx, char **out,
         ib_error_t *err)
{
  struct lex l = {
    .s = word ? word : "",
    .esc = escape ? escape : '\\',
    .mode = mode,
    .lookup = lookup,
    .ctx = ctx,
    .err = err,
  };
  ib_buf_t b = { 0 };

  *out = NULL;
  l.n = strlen (l.s);
  l.word = l.s;
  l.max = l.n > IB_EXPAND_MAX ? l.n : IB_EXPAND_MAX;
  ib_buf_append (&b, "", 0);
  if (lex_until (&l, -1, &b) < 0)
    {
      ib_buf_free (&b);
      return -1;
    }
  /* lex_check_size looks after each variable; the text written after the
   * last one can still cross the limit (by at most the word's length) */
  if (b.len > l.max)
    {
      ib_buf_free (&b);
      return lex_fail (&l, "the expansion is longer than %zu bytes (the limit of an expanded "
                       "word)", l.max);
    }
  *out = ib_buf_steal (&b);
  return 0;
}

int
ib_expand (const char *word, char escape, ib_lookup_fn lookup, void *ctx, char **out,
           ib_error_t *err)
{
  return lex_run (word, escape, LEX_EXPAND, lookup, ctx, out, err);
}

int
ib_expand_word (const char *word, char escape, ib_lookup_fn lookup, void *ctx, char **out,
                ib_error_t *err)
{
  return lex_run (word, escape, LEX_EXPAND | LEX_UNQUOTE, lookup, ctx, out, err);
}

/* Quote removal and escapes without expansion: ib_kv_t.value. */
int
unquote (const char *word, char escape, char **out, ib_error_t *err)
{
  return lex_run (word, escape, LEX_UNQUOTE, NULL, NULL, out, err);
}

/* ------------------------------------------------------------------ */
/* word splitting                                                     */
/* ------------------------------------------------------------------ */

char **
ib_split_words (const char *s)
{
  ib_strv_builder_t words = IB_STRV_BUILDER_INIT;
  ib_buf_t w = { 0 };
  bool in_word = false;
  char quote = 0;

  if (s == NULL)
    return ib_strv_builder_steal (&words);
  for (size_t i = 0; s[i]; i++)
    {
      char c = s[i];
      if (quote == '\'')
        {
          if (c == '\'')
            quote = 0;
          else
            put_char (&w, c);
          continue;
        }
      if (quote == '"')
        {
          if (c == '"')
            quote = 0;
          else if (c == '\\' && (s[i + 1] == '"' || s[i + 1] == '\\' || s[i + 1] == '$'))
            put_char (&w, s[++i]);
          else
            put_char (&w, c);
          continue;
        }
      if (is_space (c))
        {
          if (in_word)
            {
              ib_buf_append (&w, "", 0);
              ib_strv_builder_take (&words, ib_buf_steal (&w));
              in_word = false;
            }
          continue;
        }
      in_word = true;
      if (c == '\'' || c == '"')
        quote = c;
      else if (c == '\\')
        {
          if (s[i + 1])
            put_char (&w, s[++i]);
        }
      else
        put_char (&w, c);
    }
  if (in_word)
    {
      ib_buf_append (&w, "", 0);
      ib_strv_builder_take (&words, ib_buf_steal (&w));
    }
  ib_buf_free (&w);
  return ib_strv_builder_steal (&words);
}

/* Split on unquoted whitespace, keeping quotes and escapes as written
 * (Dockerfile's own word splitting for ENV/LABEL/ARG/COPY...).  With `offs`,
 * (*offs)[i] is the offset of word i in `s` (caller frees). */
char **
split_raw_words_at (const char *s, char esc, size_t **offs)
{
  ib_strv_builder_t words = IB_STRV_BUILDER_INIT;
  size_t i = 0, start, n = 0, cap = 1;

  if (offs)
    *offs = xmalloc (sizeof (size_t));

  for (;;)
    {
      while (s[i] && is_space (s[i]))
        i++;
      if (s[i] == '\0')
        break;
      start = i;
      char quote = 0;
      while (s[i])
        {
          char c = s[i];
          if (quote == 0 && is_space (c))
            break;
          if (c == esc && quote != '\'')
            {
              i++;
              if (s[i])
                i++;
              continue;
            }
          if (quote == 0 && (c == '\'' || c == '"'))
            quote = c;
          else if (quote != 0 && c == quote)
            quote = 0;
          i++;
        }
      ib_strv_builder_take (&words, xstrndup (s + start, i - start));
      if (offs)
        {
          if (n + 2 > cap)
            {
              cap = (n + 2) * 2;
              *offs = xrealloc (*offs, cap * sizeof (size_t));
            }
          (*offs)[n] = start;
        }
      n++;
    }
  return ib_strv_builder_steal (&words);
}

char **
split_raw_words (const char *s, char esc)
{
  return split_raw_words_at (s, esc, NULL);
}
