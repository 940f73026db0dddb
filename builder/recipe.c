/* builder/recipe.c — recipe (Dockerfile + OUTPUT) parser and word expansion.
 *
 * Reading order: small helpers, word lexer (ib_expand / ib_expand_word and
 * the parser's own quote removal share one engine), word splitting, logical
 * lines, per-instruction parsers, ib_recipe_parse, accessors.
 */
#include "builder/recipe.h"
#include "common/util.h"

#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define EXCERPT_MAX 72

/* ------------------------------------------------------------------ */
/* helpers                                                            */
/* ------------------------------------------------------------------ */

static bool
is_space (char c)
{
  return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r' || c == '\n';
}

static bool
is_name_start (char c)
{
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}

static bool
is_name_char (char c)
{
  return is_name_start (c) || (c >= '0' && c <= '9');
}

static bool
is_digit (char c)
{
  return c >= '0' && c <= '9';
}

/* A copy of s fit to quote in a one-line message: control chars become '?',
 * long text is cut with "...". */
static char *
excerpt_n (const char *s, size_t n)
{
  ib_buf_t b = { 0 };
  size_t i;

  ib_buf_append (&b, "", 0);
  for (i = 0; i < n && s[i]; i++)
    {
      if (i == EXCERPT_MAX)
        {
          ib_buf_puts (&b, "...");
          break;
        }
      unsigned char c = (unsigned char) s[i];
      char ch = (c < 0x20 || c == 0x7f) ? '?' : (char) c;
      ib_buf_append (&b, &ch, 1);
    }
  return ib_buf_steal (&b);
}

/* Mask control chars in place: messages stay on one line. */
static void
mask_controls (char *s)
{
  for (; *s; s++)
    if ((unsigned char) *s < 0x20 || *s == 0x7f)
      *s = '?';
}

static char *
excerpt (const char *s)
{
  return excerpt_n (s, strlen (s));
}

static char *
trim_dup (const char *s, size_t n)
{
  while (n > 0 && is_space (*s))
    s++, n--;
  while (n > 0 && is_space (s[n - 1]))
    n--;
  return xstrndup (s, n);
}

static void
kv_clear (ib_kv_t *kv)
{
  free (kv->key);
  free (kv->value);
  free (kv->raw);
  memset (kv, 0, sizeof *kv);
}

static void
instr_clear (ib_instr_t *in)
{
  size_t i;

  free (in->text);
  ib_strv_free (in->flags);
  ib_strv_free (in->args);
  for (i = 0; i < in->n_kvs; i++)
    kv_clear (&in->kvs[i]);
  free (in->kvs);
  for (i = 0; i < in->n_heredocs; i++)
    {
      free (in->heredocs[i].name);
      free (in->heredocs[i].content);
    }
  free (in->heredocs);
  if (in->trigger)
    {
      instr_clear (in->trigger);
      free (in->trigger);
    }
  memset (in, 0, sizeof *in);
}

/* Room for element n of an array `*v` of elements of `size` bytes that
 * grows one at a time: the allocation doubles when n is 0 or a power of
 * two, so that n appends cost O(n) (its capacity is never stored). */
static void
grow_for (void *v, size_t n, size_t size)
{
  void **pv = v;
  if (n == 0 || (n & (n - 1)) == 0)
    *pv = xrealloc (*pv, (n ? 2 * n : 1) * size);
}

/* Append a pair to an instruction; takes ownership of the strings. */
static void
instr_add_kv (ib_instr_t *in, char *key, char *value, char *raw)
{
  grow_for (&in->kvs, in->n_kvs, sizeof *in->kvs);
  in->kvs[in->n_kvs].key = key;
  in->kvs[in->n_kvs].value = value;
  in->kvs[in->n_kvs].raw = raw;
  in->n_kvs++;
}

static char **
strv_new (void)
{
  return xmalloc (sizeof (char *));
}

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
  cleanup_free char *msg = NULL;
  cleanup_free char *ex = excerpt (l->word);
  va_list ap;

  va_start (ap, fmt);
  if (vasprintf (&msg, fmt, ap) < 0)
    abort ();
  va_end (ap);
  mask_controls (msg);
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

static void
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
static int
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
static char **
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

static char **
split_raw_words (const char *s, char esc)
{
  return split_raw_words_at (s, esc, NULL);
}

/* ------------------------------------------------------------------ */
/* parser state and errors                                            */
/* ------------------------------------------------------------------ */

struct phys_line
{
  const char *s;
  size_t len;     /* without "\n" and one trailing "\r" */
  size_t raw_len; /* with them (heredoc bodies keep their line endings) */
};

/* Where a piece of the logical line came from: the byte at logical offset
 * `off` is at (line, col) in the file, and so are the following bytes of the
 * same physical line. */
struct seg
{
  size_t off;
  int line;
  int col; /* 1-based byte column */
};

struct parser
{
  const char *path;
  char esc;
  ib_recipe_t *r;
  ib_error_t *err;
  /* the logical line being parsed and where its pieces came from */
  const char *lbase;
  struct seg *segs;
  size_t n_segs;
  size_t text_off; /* offset in lbase of the current instruction's text */
  /* physical lines; `next` is the first one after the current logical line
   * (heredoc bodies are read from there) */
  const struct phys_line *lines;
  size_t n_lines, next;
  size_t cap_segs;
  /* "\n" BODY NAME for each heredoc read for the current instruction, bodies
   * as written: what BuildKit appends to a RUN (or ONBUILD) command line */
  ib_buf_t tail;
};

static int
perr (struct parser *p, int line, const char *fmt, ...) __attribute__ ((format (printf, 3, 4)));

static int
perr (struct parser *p, int line, const char *fmt, ...)
{
  cleanup_free char *msg = NULL;
  va_list ap;

  va_start (ap, fmt);
  if (vasprintf (&msg, fmt, ap) < 0)
    abort ();
  va_end (ap);
  mask_controls (msg);
  return ib_error_set (p->err, EINVAL, "%s:%d: %s", p->path, line, msg);
}

/* File position of logical offset `off`. */
static void
pos_of (const struct parser *p, size_t off, int *line, int *col)
{
  const struct seg *best = NULL;

  for (size_t i = 0; i < p->n_segs; i++)
    if (p->segs[i].off <= off)
      best = &p->segs[i];
  if (best == NULL)
    {
      *line = 1;
      *col = 1;
      return;
    }
  *line = best->line;
  *col = best->col + (int) (off - best->off);
}

/* An error about the text at logical offset `off`: "PATH:LINE:COL: msg". */
static int
perr_at (struct parser *p, size_t off, const char *fmt, ...) __attribute__ ((format (printf, 3, 4)));

static int
perr_at (struct parser *p, size_t off, const char *fmt, ...)
{
  cleanup_free char *msg = NULL;
  va_list ap;
  int line, col;

  va_start (ap, fmt);
  if (vasprintf (&msg, fmt, ap) < 0)
    abort ();
  va_end (ap);
  mask_controls (msg);
  pos_of (p, off, &line, &col);
  return ib_error_set (p->err, EINVAL, "%s:%d:%d: %s", p->path, line, col, msg);
}

/* Logical offset of `at`, a pointer into in->text. */
static size_t
text_off (const struct parser *p, const ib_instr_t *in, const char *at)
{
  return p->text_off + (size_t) (at - in->text);
}

/* ------------------------------------------------------------------ */
/* flags                                                              */
/* ------------------------------------------------------------------ */

enum flag_type
{
  FLAG_BOOL,
  FLAG_STRING,
  FLAG_LIST,
};

struct flag_spec
{
  const char *name;
  enum flag_type type;
};

static const struct flag_spec from_flags[] = {
  { "platform", FLAG_STRING },
  { NULL, 0 },
};

static const struct flag_spec run_flags[] = {
  { "mount", FLAG_LIST },
  { "network", FLAG_STRING },
  { "device", FLAG_LIST },
  { "security", FLAG_STRING },
  { NULL, 0 },
};

static const struct flag_spec healthcheck_flags[] = {
  { "interval", FLAG_STRING },
  { "timeout", FLAG_STRING },
  { "start-period", FLAG_STRING },
  { "start-interval", FLAG_STRING },
  { "retries", FLAG_STRING },
  { NULL, 0 },
};

static const struct flag_spec copy_flags[] = {
  { "from", FLAG_STRING },
  { "chown", FLAG_STRING },
  { "chmod", FLAG_STRING },
  { "link", FLAG_BOOL },
  { "parents", FLAG_BOOL },
  { "exclude", FLAG_LIST },
  { NULL, 0 },
};

static const struct flag_spec add_flags[] = {
  { "chown", FLAG_STRING },
  { "chmod", FLAG_STRING },
  { "link", FLAG_BOOL },
  { "exclude", FLAG_LIST },
  { "checksum", FLAG_STRING },
  { "keep-git-dir", FLAG_BOOL },
  { NULL, 0 },
};

/* Read the words that start with "--" at the head of `rest` into *words
 * (quotes removed, backslash escapes processed, as BuildKit does for flags),
 * and the offset of each from `base` into *offs; a bare "--" ends them.
 * Returns a pointer to what follows. */
static const char *
extract_flag_words (const char *rest, const char *base, ib_strv_builder_t *words, size_t **offs)
{
  const char *s = rest;
  size_t n = 0, cap = 0;

  for (;;)
    {
      while (*s && is_space (*s))
        s++;
      if (!(s[0] == '-' && s[1] == '-'))
        return s;

      ib_buf_t w = { 0 };
      char quote = 0;
      size_t start = (size_t) (s - base);
      ib_buf_append (&w, "", 0);
      while (*s && (quote || !is_space (*s)))
        {
          char c = *s++;
          if (quote && c == quote)
            quote = 0;
          else if (!quote && (c == '\'' || c == '"'))
            quote = c;
          else if (c == '\\' && quote != '\'')
            {
              if (*s)
                put_char (&w, *s++);
            }
          else
            put_char (&w, c);
        }
      if (strcmp (w.data, "--") == 0)
        {
          ib_buf_free (&w);
          while (*s && is_space (*s))
            s++;
          return s;
        }
      ib_strv_builder_take (words, ib_buf_steal (&w));
      if (n + 1 > cap)
        {
          cap = cap ? cap * 2 : 8;
          *offs = xrealloc (*offs, cap * sizeof (size_t));
        }
      (*offs)[n++] = start;
    }
}

static char *
flag_names (const struct flag_spec *spec)
{
  ib_buf_t b = { 0 };

  for (size_t i = 0; spec[i].name; i++)
    ib_buf_printf (&b, "%s--%s", i ? ", " : "", spec[i].name);
  return ib_buf_steal (&b);
}

/* Validate and normalize the flag words of one instruction into in->flags;
 * offs[i] is the logical offset of words[i], for messages. */
static int
parse_flags (struct parser *p, ib_instr_t *in, const struct flag_spec *spec, char **words,
             const size_t *offs)
{
  ib_strv_builder_t flags = IB_STRV_BUILDER_INIT;

  /* in->flags is built here, one list grown in O(1) per flag; it is
   * flags.v all along, so that ib_instr_flag sees the flags so far and an
   * error leaves them to instr_clear */
  ib_strv_free (in->flags);
  in->flags = NULL;
  for (size_t i = 0; words && words[i]; i++)
    {
      const char *w = words[i] + 2;
      const char *eq = strchr (w, '=');
      size_t nlen = eq ? (size_t) (eq - w) : strlen (w);
      const struct flag_spec *f = NULL;
      cleanup_free char *ex = excerpt (words[i]);

      for (size_t j = 0; spec && spec[j].name; j++)
        if (strlen (spec[j].name) == nlen && strncmp (spec[j].name, w, nlen) == 0)
          f = &spec[j];
      if (f == NULL)
        {
          if (spec == NULL)
            return perr_at (p, offs[i], "%s takes no flags, got '%s'", in->keyword, ex);
          cleanup_free char *names = flag_names (spec);
          return perr_at (p, offs[i], "%s accepts %s, got '%s'", in->keyword, names, ex);
        }

      cleanup_free char *norm = NULL;
      if (f->type == FLAG_BOOL)
        {
          const char *v = eq ? eq + 1 : "true";
          if (strcasecmp (v, "true") != 0 && strcasecmp (v, "false") != 0)
            return perr_at (p, offs[i], "--%s takes true or false, got '%s'", f->name, ex);
          norm = xasprintf ("--%s=%s", f->name, strcasecmp (v, "true") == 0 ? "true" : "false");
        }
      else
        {
          if (eq == NULL || eq[1] == '\0')
            return perr_at (p, offs[i], "--%s needs a value (--%s=VALUE), got '%s'", f->name,
                            f->name, ex);
          norm = xasprintf ("--%s=%s", f->name, eq + 1);
        }

      if (f->type != FLAG_LIST && ib_instr_flag (in, f->name) != NULL)
        return perr_at (p, offs[i], "--%s may be given once, got '%s' again", f->name, ex);
      ib_strv_builder_take (&flags, steal_pointer (&norm));
      in->flags = flags.v;
    }
  in->flags = ib_strv_builder_steal (&flags);
  return 0;
}

/* ------------------------------------------------------------------ */
/* JSON form                                                          */
/* ------------------------------------------------------------------ */

/* JSON (exec) form, as BuildKit decides it: text starting with '[' that is a
 * valid JSON array.  Returns 1 with *out set for an array of strings, 0 when
 * the text is not a JSON array (shell form), -1 (error set) for a valid JSON
 * array holding something other than strings. */
static int
parse_json_array (struct parser *p, ib_instr_t *in, char ***out)
{
  json_error_t jerr;
  json_t *j;
  size_t i;

  *out = NULL;
  if (in->text[0] != '[')
    return 0;
  j = json_loads (in->text, 0, &jerr);
  if (j == NULL)
    return 0;
  if (!json_is_array (j))
    {
      json_decref (j);
      return 0;
    }
  for (i = 0; i < json_array_size (j); i++)
    if (!json_is_string (json_array_get (j, i)))
      {
        cleanup_free char *ex = excerpt (in->text);
        json_decref (j);
        return perr_at (p, text_off (p, in, in->text), "expected a JSON array of strings, got '%s'",
                        ex);
      }
  ib_strv_builder_t v = IB_STRV_BUILDER_INIT;
  for (i = 0; i < json_array_size (j); i++)
    ib_strv_builder_push (&v, json_string_value (json_array_get (j, i)));
  *out = ib_strv_builder_steal (&v);
  json_decref (j);
  return 1;
}

/* ------------------------------------------------------------------ */
/* instructions                                                       */
/* ------------------------------------------------------------------ */

enum parse_kind
{
  PK_FROM,
  PK_ARG,
  PK_KEYVAL,  /* ENV, LABEL */
  PK_COMMAND, /* RUN, CMD, ENTRYPOINT, SHELL */
  PK_COPY,    /* COPY, ADD */
  PK_STRING,  /* WORKDIR, USER, STOPSIGNAL, MAINTAINER */
  PK_WORDS,   /* EXPOSE, VOLUME */
  PK_OUTPUT,
  PK_HEALTHCHECK,
  PK_ONBUILD,
};

struct keyword
{
  const char *name;
  ib_instr_kind_t kind;
  enum parse_kind pk;
  const struct flag_spec *flags;
};

static const struct keyword keywords[] = {
  { "FROM", IB_I_FROM, PK_FROM, from_flags },
  { "ARG", IB_I_ARG, PK_ARG, NULL },
  { "ENV", IB_I_ENV, PK_KEYVAL, NULL },
  { "RUN", IB_I_RUN, PK_COMMAND, run_flags },
  { "COPY", IB_I_COPY, PK_COPY, copy_flags },
  { "ADD", IB_I_ADD, PK_COPY, add_flags },
  { "WORKDIR", IB_I_WORKDIR, PK_STRING, NULL },
  { "LABEL", IB_I_LABEL, PK_KEYVAL, NULL },
  { "USER", IB_I_USER, PK_STRING, NULL },
  { "ENTRYPOINT", IB_I_ENTRYPOINT, PK_COMMAND, NULL },
  { "CMD", IB_I_CMD, PK_COMMAND, NULL },
  { "EXPOSE", IB_I_EXPOSE, PK_WORDS, NULL },
  { "VOLUME", IB_I_VOLUME, PK_WORDS, NULL },
  { "STOPSIGNAL", IB_I_STOPSIGNAL, PK_STRING, NULL },
  { "SHELL", IB_I_SHELL, PK_COMMAND, NULL },
  { "MAINTAINER", IB_I_MAINTAINER, PK_STRING, NULL },
  { "OUTPUT", IB_I_OUTPUT, PK_OUTPUT, NULL },
  { "HEALTHCHECK", IB_I_HEALTHCHECK, PK_HEALTHCHECK, healthcheck_flags },
  { "ONBUILD", IB_I_ONBUILD, PK_ONBUILD, NULL },
};

static const struct keyword *
find_keyword (const char *word)
{
  for (size_t i = 0; i < sizeof keywords / sizeof keywords[0]; i++)
    if (strcasecmp (keywords[i].name, word) == 0)
      return &keywords[i];
  return NULL;
}

/* ------------------------------------------------------------------ */
/* heredocs                                                           */
/* ------------------------------------------------------------------ */

static size_t
count_quotes (const char *s)
{
  size_t n = 0;
  for (; *s; s++)
    n += *s == '\'' || *s == '"';
  return n;
}

/* Is raw word `w` (at logical offset `off`) a heredoc word?  BuildKit's rule:
 * the whole word matches [0-9]*<<-?REST with REST non-empty and free of '<';
 * the name is REST with quotes removed and backslash escapes processed (no
 * expansion).  Returns 1 and fills h->name/chomp/expand, 0 if not, -1 on
 * error (an unterminated quote, an empty name). */
static int
heredoc_word (struct parser *p, const char *w, size_t off, ib_heredoc_t *h)
{
  const char *s = w;

  while (is_digit (*s))
    s++;
  if (s[0] != '<' || s[1] != '<')
    return 0;
  s += 2;
  bool chomp = *s == '-';
  if (chomp)
    s++;
  if (*s == '\0' || strchr (s, '<'))
    return 0;

  char *name = NULL;
  ib_error_t e = NULL;
  cleanup_free char *ex = excerpt (w);
  if (unquote (s, '\\', &name, &e) < 0)
    {
      ib_error_free (&e);
      return perr_at (p, off, "expected a closing quote in the heredoc delimiter, got '%s'", ex);
    }
  if (name[0] == '\0')
    {
      free (name);
      return perr_at (p, off, "expected a heredoc delimiter after '<<', got '%s'", ex);
    }
  memset (h, 0, sizeof *h);
  h->name = name;
  h->chomp = chomp;
  h->expand = count_quotes (s) == count_quotes (name);
  h->arg = -1;
  return 1;
}

/* Read the body of heredoc `h` (its word `w` at logical offset `off`) from
 * p->next on, up to its terminator line; append "\n" BODY NAME to p->tail. */
static int
heredoc_body (struct parser *p, ib_heredoc_t *h, const char *w, size_t off)
{
  ib_buf_t raw = { 0 };
  size_t nlen = strlen (h->name);

  ib_buf_append (&raw, "", 0);
  h->line = (int) p->next + 1;
  for (;;)
    {
      if (p->next >= p->n_lines)
        {
          cleanup_free char *ex = excerpt (w);
          cleanup_free char *exn = excerpt (h->name);
          ib_buf_free (&raw);
          return perr_at (p, off, "unterminated heredoc '%s': expected a line '%s', got end of file",
                          ex, exn);
        }
      const struct phys_line *l = &p->lines[p->next++];
      const char *c = l->s;
      size_t len = l->raw_len;
      while (len > 0 && (c[len - 1] == '\n' || c[len - 1] == '\r'))
        len--;
      if (h->chomp)
        while (len > 0 && *c == '\t')
          c++, len--;
      if (len == nlen && memcmp (c, h->name, nlen) == 0)
        break;
      ib_buf_append (&raw, l->s, l->raw_len);
    }

  if (h->chomp)
    {
      ib_buf_t b = { 0 };
      ib_buf_append (&b, "", 0);
      for (size_t i = 0; i < raw.len;)
        {
          while (i < raw.len && raw.data[i] == '\t')
            i++;
          const char *nl = memchr (raw.data + i, '\n', raw.len - i);
          size_t end = nl ? (size_t) (nl - raw.data) + 1 : raw.len;
          ib_buf_append (&b, raw.data + i, end - i);
          i = end;
        }
      h->content = ib_buf_steal (&b);
    }
  else
    h->content = xstrdup (raw.data);
  ib_buf_puts (&p->tail, "\n");
  ib_buf_append (&p->tail, raw.data, raw.len);
  ib_buf_puts (&p->tail, h->name);
  ib_buf_free (&raw);
  return 0;
}

/* Find the heredoc words among `words` (offsets in in->text: `offs`), read
 * their bodies, record them in `in` (arg: the word's index when `is_args`). */
static int
read_heredocs (struct parser *p, ib_instr_t *in, char **words, const size_t *offs, bool is_args)
{
  for (size_t i = 0; words[i]; i++)
    {
      ib_heredoc_t h = { 0 };
      size_t off = p->text_off + offs[i];
      int r = heredoc_word (p, words[i], off, &h);
      if (r < 0)
        return -1;
      if (r == 0)
        continue;
      if (heredoc_body (p, &h, words[i], off) < 0)
        {
          free (h.name);
          return -1;
        }
      h.arg = is_args ? (int) i : -1;
      grow_for (&in->heredocs, in->n_heredocs, sizeof *in->heredocs);
      in->heredocs[in->n_heredocs++] = h;
    }
  return 0;
}

/* RUN (shell form): heredoc bodies, and the script the shell gets. */
static int
run_heredocs (struct parser *p, ib_instr_t *in)
{
  /* Words as BuildKit finds heredocs: backslash escapes, whatever the
   * escape directive. */
  cleanup_free size_t *offs = NULL;
  cleanup_strv char **words = split_raw_words_at (in->text, '\\', &offs);

  if (read_heredocs (p, in, words, offs, false) < 0)
    return -1;
  if (in->n_heredocs == 0)
    return 0;
  char *text;
  if (in->n_heredocs == 1 && words[1] == NULL)
    {
      in->heredoc_script = true;
      text = xstrdup (in->heredocs[0].content);
    }
  else
    text = xasprintf ("%s%s", in->text, p->tail.data);
  free (in->text);
  in->text = text;
  return 0;
}

static int
parse_from (struct parser *p, ib_instr_t *in, char **stage_name)
{
  cleanup_free size_t *offs = NULL;
  cleanup_strv char **w = split_raw_words_at (in->text, p->esc, &offs);
  size_t n = ib_strv_len (w);
  cleanup_free char *ex = excerpt (in->text);

  *stage_name = NULL;
  if (n != 1 && !(n == 3 && strcasecmp (w[1], "AS") == 0))
    return perr (p, in->line, "expected 'FROM [--platform=P] IMAGE [AS NAME]', got 'FROM %s'",
                 ex);
  if (n == 3)
    {
      char *name = xstrdup (w[2]);
      for (char *c = name; *c; c++)
        *c = (char) tolower ((unsigned char) *c);
      bool ok = name[0] >= 'a' && name[0] <= 'z';
      for (char *c = name; ok && *c; c++)
        ok = (*c >= 'a' && *c <= 'z') || is_digit (*c) || *c == '-' || *c == '_' || *c == '.';
      if (!ok)
        {
          cleanup_free char *exn = excerpt (w[2]);
          free (name);
          return perr_at (p, p->text_off + offs[2],
                          "a stage name starts with a letter and holds only letters, digits, "
                          "'-', '_' and '.', got '%s'",
                          exn);
        }
      for (size_t i = 0; i < p->r->n_stages; i++)
        if (p->r->stages[i].name && strcmp (p->r->stages[i].name, name) == 0)
          {
            cleanup_free char *exn = excerpt (w[2]);
            free (name);
            return perr_at (p, p->text_off + offs[2], "a stage name must be unique, got '%s' twice",
                            exn);
          }
      *stage_name = name;
    }
  free (in->text);
  in->text = xstrdup (w[0]);
  return 0;
}

/* One NAME[=VALUE] of ENV/LABEL/ARG; koff and voff are the text offsets of
 * the raw key and value, for messages. */
static int
value_pair (struct parser *p, ib_instr_t *in, const char *rawkey, size_t koff,
            const char *rawval, size_t voff)
{
  char *key = NULL, *value = NULL;
  ib_error_t e = NULL;

  if (unquote (rawkey, p->esc, &key, &e) < 0
      || (rawval && unquote (rawval, p->esc, &value, &e) < 0))
    {
      /* Without expansion the only failure is an unterminated quote. */
      bool in_value = key != NULL;
      cleanup_free char *ex = excerpt (in_value ? rawval : rawkey);
      ib_error_free (&e);
      free (key);
      return perr_at (p, p->text_off + (in_value ? voff : koff),
                      "expected a closing quote in %s %s, got '%s'", in->keyword,
                      in_value ? "value" : "name", ex);
    }
  if (key[0] == '\0')
    {
      cleanup_free char *ex = excerpt (rawkey);
      free (key);
      free (value);
      return perr_at (p, p->text_off + koff, "%s needs a non-empty name, got '%s'", in->keyword,
                      ex);
    }
  instr_add_kv (in, key, value, xstrdup (rawval));
  return 0;
}

static int
parse_arg (struct parser *p, ib_instr_t *in)
{
  cleanup_free size_t *offs = NULL;
  cleanup_strv char **w = split_raw_words_at (in->text, p->esc, &offs);

  if (w[0] == NULL)
    return perr (p, in->line, "expected 'ARG NAME[=DEFAULT]', got 'ARG'");
  for (size_t i = 0; w[i]; i++)
    {
      char *eq = strchr (w[i], '=');
      if (eq)
        *eq = '\0';
      if (w[i][0] == '\0')
        {
          cleanup_free char *ex = excerpt (eq ? eq + 1 : "");
          return perr_at (p, p->text_off + offs[i], "expected 'ARG NAME[=DEFAULT]', got '=%s'", ex);
        }
      if (value_pair (p, in, w[i], offs[i], eq ? eq + 1 : NULL,
                      eq ? offs[i] + (size_t) (eq - w[i]) + 1 : 0) < 0)
        return -1;
    }
  return 0;
}

static int
parse_keyval (struct parser *p, ib_instr_t *in)
{
  cleanup_free size_t *offs = NULL;
  cleanup_strv char **w = split_raw_words_at (in->text, p->esc, &offs);

  if (w[0] == NULL)
    return perr (p, in->line, "expected '%s NAME=VALUE ...', got '%s'", in->keyword,
                 in->keyword);

  if (strchr (w[0], '=') == NULL)
    {
      /* Old form: "KEY the rest of the line". */
      const char *t = in->text;
      size_t k = 0;
      while (t[k] && !is_space (t[k]))
        k++;
      cleanup_free char *key = xstrndup (t, k);
      const char *v = t + k;
      while (*v && is_space (*v))
        v++;
      if (*v == '\0')
        {
          cleanup_free char *ex = excerpt (in->text);
          return perr (p, in->line, "expected '%s NAME VALUE' or '%s NAME=VALUE ...', got '%s %s'",
                       in->keyword, in->keyword, in->keyword, ex);
        }
      return value_pair (p, in, key, 0, v, (size_t) (v - t));
    }

  for (size_t i = 0; w[i]; i++)
    {
      char *eq = strchr (w[i], '=');
      if (eq == NULL)
        {
          cleanup_free char *ex = excerpt (w[i]);
          return perr_at (p, p->text_off + offs[i], "expected NAME=VALUE, got '%s'", ex);
        }
      *eq = '\0';
      if (value_pair (p, in, w[i], offs[i], eq + 1, offs[i] + (size_t) (eq - w[i]) + 1) < 0)
        return -1;
    }
  return 0;
}

static int
parse_command (struct parser *p, ib_instr_t *in)
{
  if (in->text[0] == '\0')
    return perr (p, in->line, "%s needs a command, got '%s'", in->keyword, in->keyword);
  if (parse_json_array (p, in, &in->args) < 0)
    return -1;
  in->json_form = in->args != NULL;
  if (in->kind == IB_I_SHELL)
    {
      cleanup_free char *ex = excerpt (in->text);
      if (!in->json_form)
        return perr (p, in->line, "SHELL needs the JSON form [\"executable\", \"parameters\"], "
                     "got '%s'", ex);
      if (in->args[0] == NULL)
        return perr (p, in->line, "SHELL needs at least the executable, got '%s'", ex);
    }
  if (in->kind == IB_I_RUN && !in->json_form)
    return run_heredocs (p, in);
  return 0;
}

/* HEALTHCHECK [flags] CMD command | HEALTHCHECK [flags] NONE */
static int
parse_healthcheck (struct parser *p, ib_instr_t *in)
{
  cleanup_free char *ex = excerpt (in->text);
  const char *t = in->text;
  if (strcasecmp (t, "NONE") == 0)
    {
      if (in->flags && in->flags[0])
        return perr (p, in->line, "HEALTHCHECK NONE takes no options, got '%s'", in->flags[0]);
      in->args = strv_new ();
      ib_strv_push (&in->args, "NONE");
      in->json_form = false;
      return 0;
    }
  if (strncasecmp (t, "CMD", 3) != 0 || (t[3] != '\0' && !is_space (t[3])))
    return perr (p, in->line, "HEALTHCHECK needs CMD command or NONE, got '%s'", ex);
  const char *cmd = t + 3;
  while (*cmd && is_space (*cmd))
    cmd++;
  char *rest = xstrdup (cmd);
  p->text_off = text_off (p, in, cmd);
  free (in->text);
  in->text = rest;
  if (in->text[0] == '\0')
    return perr (p, in->line, "HEALTHCHECK CMD needs a command, got '%s'", ex);
  if (parse_json_array (p, in, &in->args) < 0)
    return -1;
  in->json_form = in->args != NULL;
  return 0;
}

static int
parse_copy (struct parser *p, ib_instr_t *in)
{
  if (parse_json_array (p, in, &in->args) < 0)
    return -1;
  in->json_form = in->args != NULL;
  cleanup_free size_t *offs = NULL;
  if (!in->json_form)
    {
      in->args = split_raw_words_at (in->text, p->esc, &offs);
      if (read_heredocs (p, in, in->args, offs, true) < 0)
        return -1;
    }
  size_t n = ib_strv_len (in->args);
  if (n < 2)
    {
      cleanup_free char *ex = excerpt (in->text);
      return perr (p, in->line, "%s needs at least one source and a destination, got '%s%s%s'",
                   in->keyword, in->keyword, ex[0] ? " " : "", ex);
    }
  if (in->n_heredocs && in->heredocs[in->n_heredocs - 1].arg == (int) n - 1)
    {
      cleanup_free char *ex = excerpt (in->args[n - 1]);
      return perr_at (p, p->text_off + offs[n - 1],
                      "%s cannot accept a heredoc as a destination, got '%s'", in->keyword, ex);
    }
  return 0;
}

static int
parse_string (struct parser *p, ib_instr_t *in)
{
  static const char *const what[] = {
    [IB_I_WORKDIR] = "a path",
    [IB_I_USER] = "a user[:group]",
    [IB_I_STOPSIGNAL] = "a signal",
    [IB_I_MAINTAINER] = "a name",
  };
  if (in->text[0] == '\0')
    return perr (p, in->line, "%s needs %s, got '%s'", in->keyword, what[in->kind], in->keyword);
  return 0;
}

static int
parse_words (struct parser *p, ib_instr_t *in)
{
  if (in->kind == IB_I_VOLUME)
    {
      if (parse_json_array (p, in, &in->args) < 0)
        return -1;
      in->json_form = in->args != NULL;
    }
  if (!in->json_form)
    in->args = split_raw_words (in->text, p->esc);
  if (in->args[0] == NULL)
    {
      cleanup_free char *ex = excerpt (in->text);
      return perr (p, in->line, "%s needs at least one %s, got '%s%s%s'", in->keyword,
                   in->kind == IB_I_EXPOSE ? "port" : "path", in->keyword, ex[0] ? " " : "",
                   ex);
    }
  return 0;
}

static const char *const output_types[] = { "local", "image", "oci", "docker", "registry", "tar",
                                            NULL };

static const ib_kv_t *
find_kv (const ib_instr_t *in, const char *key)
{
  for (size_t i = 0; i < in->n_kvs; i++)
    if (strcmp (in->kvs[i].key, key) == 0)
      return &in->kvs[i];
  return NULL;
}

/* OUTPUT options: fields separated by ',' (or whitespace) outside double
 * quotes; "" inside quotes is a literal '"'; each field is key=value. */
static int
parse_output (struct parser *p, ib_instr_t *in)
{
  const char *s = in->text;
  size_t i = 0;

  for (;;)
    {
      while (s[i] && (s[i] == ',' || is_space (s[i])))
        i++;
      if (s[i] == '\0')
        break;
      size_t start = i;
      bool quoted = false;
      ib_buf_t f = { 0 };
      ib_buf_append (&f, "", 0);
      while (s[i] && (quoted || (s[i] != ',' && !is_space (s[i]))))
        {
          if (s[i] == '"')
            {
              if (quoted && s[i + 1] == '"')
                {
                  put_char (&f, '"');
                  i += 2;
                  continue;
                }
              quoted = !quoted;
              i++;
              continue;
            }
          put_char (&f, s[i++]);
        }
      cleanup_free char *rawfield = excerpt_n (s + start, i - start);
      if (quoted)
        {
          ib_buf_free (&f);
          return perr_at (p, text_off (p, in, s + start),
                          "expected a closing double quote in OUTPUT, got '%s'", rawfield);
        }
      char *eq = strchr (f.data, '=');
      if (eq == NULL || eq == f.data)
        {
          ib_buf_free (&f);
          return perr_at (p, text_off (p, in, s + start), "expected OUTPUT option key=value, got '%s'",
                          rawfield);
        }
      char *key = xstrndup (f.data, (size_t) (eq - f.data));
      for (char *c = key; *c; c++)
        *c = (char) tolower ((unsigned char) *c);
      if (find_kv (in, key))
        {
          ib_buf_free (&f);
          free (key);
          return perr_at (p, text_off (p, in, s + start),
                          "expected each OUTPUT option once, got '%s' again", rawfield);
        }
      instr_add_kv (in, key, xstrdup (eq + 1), xstrdup (eq + 1));
      ib_buf_free (&f);
    }

  const ib_kv_t *type = find_kv (in, "type");
  cleanup_free char *ex = excerpt (in->text);
  if (type == NULL)
    return perr (p, in->line,
                 "expected 'OUTPUT type=local|image|oci|docker|registry|tar,...', got 'OUTPUT %s'",
                 ex);
  bool known = false;
  for (size_t k = 0; output_types[k]; k++)
    known |= strcmp (type->value, output_types[k]) == 0;
  if (!known)
    {
      cleanup_free char *ext = excerpt (type->value);
      return perr (p, in->line,
                   "expected OUTPUT type local, image, oci, docker, registry or tar, got '%s'",
                   ext);
    }
  const char *need = (strcmp (type->value, "image") == 0 || strcmp (type->value, "registry") == 0)
                         ? "name"
                         : "dest";
  const ib_kv_t *v = find_kv (in, need);
  if (v == NULL || v->value[0] == '\0')
    return perr (p, in->line, "OUTPUT type=%s needs %s=..., got 'OUTPUT %s'", type->value, need,
                 ex);
  return 0;
}

/* ------------------------------------------------------------------ */
/* logical lines                                                      */
/* ------------------------------------------------------------------ */


static struct phys_line *
split_lines (const char *text, size_t *n_out)
{
  struct phys_line *v = NULL;
  size_t n = 0, cap = 0;
  const char *s = text;

  /* UTF-8 byte order mark. */
  if ((unsigned char) s[0] == 0xef && (unsigned char) s[1] == 0xbb
      && (unsigned char) s[2] == 0xbf)
    s += 3;
  while (*s)
    {
      const char *nl = strchr (s, '\n');
      size_t len = nl ? (size_t) (nl - s) : strlen (s);
      if (n == cap)
        {
          cap = cap ? cap * 2 : 64;
          v = xrealloc (v, cap * sizeof *v);
        }
      v[n].s = s;
      v[n].len = (len > 0 && s[len - 1] == '\r') ? len - 1 : len;
      v[n].raw_len = len + (s[len] == '\n' ? 1 : 0);
      n++;
      s += len;
      if (*s == '\n')
        s++;
    }
  *n_out = n;
  return v;
}

static size_t
skip_ws (const struct phys_line *l, size_t i)
{
  while (i < l->len && is_space (l->s[i]))
    i++;
  return i;
}

static bool
is_comment_line (const struct phys_line *l)
{
  size_t i = skip_ws (l, 0);
  return i < l->len && l->s[i] == '#';
}

static bool
is_blank_line (const struct phys_line *l)
{
  return skip_ws (l, 0) == l->len;
}

/* Try "# name=value" at the head of the recipe.  Returns 1 if it was a
 * directive we know, 0 if directives are over, -1 on error. */
static int
parse_directive (struct parser *p, const struct phys_line *l, int lineno, bool *seen_escape,
                 bool *seen_syntax, bool *seen_check)
{
  size_t i = skip_ws (l, 0);
  size_t ns, ne, vs, ve;

  if (i >= l->len || l->s[i] != '#')
    return 0;
  i = skip_ws (l, i + 1);
  ns = i;
  if (i >= l->len || !((l->s[i] >= 'A' && l->s[i] <= 'Z') || (l->s[i] >= 'a' && l->s[i] <= 'z')))
    return 0;
  while (i < l->len && ((l->s[i] >= 'A' && l->s[i] <= 'Z') || (l->s[i] >= 'a' && l->s[i] <= 'z')
                        || is_digit (l->s[i])))
    i++;
  ne = i;
  i = skip_ws (l, i);
  if (i >= l->len || l->s[i] != '=')
    return 0;
  vs = skip_ws (l, i + 1);
  ve = l->len;
  while (ve > vs && is_space (l->s[ve - 1]))
    ve--;
  if (ve == vs)
    return 0;

  cleanup_free char *name = xstrndup (l->s + ns, ne - ns);
  cleanup_free char *value = xstrndup (l->s + vs, ve - vs);
  bool *seen;
  if (strcasecmp (name, "escape") == 0)
    seen = seen_escape;
  else if (strcasecmp (name, "syntax") == 0)
    seen = seen_syntax;
  else if (strcasecmp (name, "check") == 0)
    seen = seen_check;
  else
    return 0;
  if (*seen)
    return perr (p, lineno, "expected one '# %s=' parser directive, got another", name);
  *seen = true;
  if (seen == seen_escape)
    {
      if (strcmp (value, "\\") != 0 && strcmp (value, "`") != 0)
        {
          cleanup_free char *ex = excerpt (value);
          return perr (p, lineno, "expected escape character '\\' or '`', got '%s'", ex);
        }
      p->esc = value[0];
    }
  return 1;
}

/* Strip a trailing escape (plus whitespace after it): true if the line continues. */
static bool
trim_continuation (const char *s, size_t *len, char esc)
{
  size_t n = *len;

  while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t'))
    n--;
  if (n > 0 && s[n - 1] == esc)
    {
      *len = n - 1;
      return true;
    }
  return false;
}

/* Append a piece of physical line `line` (starting at 1-based column `col`)
 * to the logical line in `b`, remembering where it came from. */
static void
add_piece (struct parser *p, ib_buf_t *b, const char *s, size_t len, int line, int col)
{
  if (len == 0)
    return;
  if (p->n_segs == p->cap_segs)
    {
      p->cap_segs = p->cap_segs ? p->cap_segs * 2 : 16;
      p->segs = xrealloc (p->segs, p->cap_segs * sizeof *p->segs);
    }
  p->segs[p->n_segs].off = b->len;
  p->segs[p->n_segs].line = line;
  p->segs[p->n_segs].col = col;
  p->n_segs++;
  ib_buf_append (b, s, len);
}

/* ------------------------------------------------------------------ */
/* recipe                                                             */
/* ------------------------------------------------------------------ */

static ib_instr_t *
push_instr (ib_instr_t **v, size_t *n)
{
  grow_for (v, *n, sizeof **v);
  memset (&(*v)[*n], 0, sizeof **v);
  return &(*v)[(*n)++];
}

static int parse_one (struct parser *p, const char *line, int lineno, bool is_trigger,
                      ib_instr_t *in, char **stage_name);

/* ONBUILD INSTRUCTION: the trigger is parsed as an instruction of its own. */
static int
parse_onbuild (struct parser *p, ib_instr_t *in)
{
  const char *t = p->lbase + p->text_off; /* the trigger, in the logical line */
  size_t k = 0;

  if (in->text[0] == '\0')
    return perr (p, in->line, "ONBUILD needs an instruction, got 'ONBUILD'");
  while (t[k] && !is_space (t[k]))
    k++;
  cleanup_free char *word = xstrndup (t, k);
  for (char *c = word; *c; c++)
    *c = (char) toupper ((unsigned char) *c);
  if (strcmp (word, "ONBUILD") == 0)
    return perr_at (p, p->text_off, "Chaining ONBUILD via `ONBUILD ONBUILD` isn't allowed");
  if (strcmp (word, "FROM") == 0 || strcmp (word, "MAINTAINER") == 0)
    return perr_at (p, p->text_off, "%s isn't allowed as an ONBUILD trigger", word);

  size_t saved = p->text_off;
  ib_instr_t trig = { 0 };
  char *stage_name = NULL;
  if (parse_one (p, t, in->line, true, &trig, &stage_name) < 0)
    {
      instr_clear (&trig);
      free (stage_name);
      return -1;
    }
  p->text_off = saved;
  in->trigger = xmalloc (sizeof *in->trigger);
  *in->trigger = trig;
  if (p->tail.len > 0)
    {
      char *text = xasprintf ("%s%s", in->text, p->tail.data);
      free (in->text);
      in->text = text;
    }
  return 0;
}

/* One logical line (or an ONBUILD trigger, `is_trigger`) into *in: keyword,
 * flags, then the instruction's own grammar.  `line` points into p->lbase. */
static int
parse_one (struct parser *p, const char *line, int lineno, bool is_trigger, ib_instr_t *in,
           char **stage_name)
{
  ib_recipe_t *r = p->r;
  size_t k = 0;
  ib_strv_builder_t flag_words = IB_STRV_BUILDER_INIT;
  cleanup_strv char **flag_wordv = NULL;
  cleanup_free size_t *flag_offs = NULL;
  size_t kw_off = (size_t) (line - p->lbase);

  while (line[k] && !is_space (line[k]))
    k++;
  cleanup_free char *word = xstrndup (line, k);
  cleanup_free char *exw = excerpt (word);
  const struct keyword *kw = find_keyword (word);
  if (kw == NULL)
    return perr_at (p, kw_off, "unknown instruction '%s'", exw);
  if (!is_trigger && r->n_stages == 0 && kw->kind != IB_I_FROM && kw->kind != IB_I_ARG)
    return perr_at (p, kw_off, "expected FROM, got '%s'", exw);

  const char *rest = line + k;
  while (*rest && is_space (*rest))
    rest++;

  in->kind = kw->kind;
  in->keyword = kw->name;
  in->line = lineno;
  in->flags = strv_new ();
  if (kw->flags)
    rest = extract_flag_words (rest, p->lbase, &flag_words, &flag_offs);
  flag_wordv = flag_words.v;
  in->text = trim_dup (rest, strlen (rest));
  p->text_off = (size_t) (rest - p->lbase);

  if (parse_flags (p, in, kw->flags, flag_wordv, flag_offs) < 0)
    return -1;
  switch (kw->pk)
    {
    case PK_FROM:
      return parse_from (p, in, stage_name);
    case PK_ARG:
      return parse_arg (p, in);
    case PK_KEYVAL:
      return parse_keyval (p, in);
    case PK_COMMAND:
      return parse_command (p, in);
    case PK_COPY:
      return parse_copy (p, in);
    case PK_STRING:
      return parse_string (p, in);
    case PK_WORDS:
      return parse_words (p, in);
    case PK_OUTPUT:
      return parse_output (p, in);
    case PK_HEALTHCHECK:
      return parse_healthcheck (p, in);
    case PK_ONBUILD:
      return parse_onbuild (p, in);
    default:
      abort ();
    }
}

/* One logical line: parse it and add it to the recipe. */
static int
parse_instruction (struct parser *p, const char *line, int lineno)
{
  ib_recipe_t *r = p->r;
  ib_instr_t in = { 0 };
  cleanup_free char *stage_name = NULL;

  if (parse_one (p, line, lineno, false, &in, &stage_name) < 0)
    {
      instr_clear (&in);
      return -1;
    }

  ib_instr_t *slot;
  if (in.kind == IB_I_FROM)
    {
      if (r->n_stages == IB_RECIPE_MAX_STAGES)
        {
          instr_clear (&in);
          return perr (p, lineno, "more than %d stages (FROM instructions)", IB_RECIPE_MAX_STAGES);
        }
      grow_for (&r->stages, r->n_stages, sizeof *r->stages);
      ib_stage_t *st = &r->stages[r->n_stages];
      memset (st, 0, sizeof *st);
      st->index = (int) r->n_stages;
      st->name = steal_pointer (&stage_name);
      r->n_stages++;
      slot = push_instr (&st->instrs, &st->n_instrs);
    }
  else if (r->n_stages == 0)
    slot = push_instr (&r->global_args, &r->n_global_args);
  else
    {
      ib_stage_t *st = &r->stages[r->n_stages - 1];
      slot = push_instr (&st->instrs, &st->n_instrs);
    }
  *slot = in;
  return 0;
}

static int
parse_all (struct parser *p, const char *text)
{
  size_t n = 0, i = 0;
  struct phys_line *lines = split_lines (text, &n);
  bool seen_escape = false, seen_syntax = false, seen_check = false;
  int ret = 0;

  p->lines = lines;
  p->n_lines = n;

  /* Parser directives: only at the very top. */
  for (; i < n; i++)
    {
      ret = parse_directive (p, &lines[i], (int) i + 1, &seen_escape, &seen_syntax, &seen_check);
      if (ret < 0)
        goto out;
      if (ret == 0)
        break;
    }
  ret = 0;
  p->r->escape = p->esc;

  for (i = 0; i < n; i++)
    {
      if (is_comment_line (&lines[i]) || is_blank_line (&lines[i]))
        continue;

      int lineno = (int) i + 1;
      ib_buf_t b = { 0 };
      size_t st = skip_ws (&lines[i], 0);
      size_t len = lines[i].len - st;
      bool cont = trim_continuation (lines[i].s + st, &len, p->esc);
      ib_buf_append (&b, "", 0);
      add_piece (p, &b, lines[i].s + st, len, lineno, (int) st + 1);
      while (cont && i + 1 < n)
        {
          i++;
          if (is_comment_line (&lines[i]) || is_blank_line (&lines[i]))
            continue;
          len = lines[i].len;
          cont = trim_continuation (lines[i].s, &len, p->esc);
          add_piece (p, &b, lines[i].s, len, (int) i + 1, 1);
        }
      /* Trim in place: offsets into b.data stay those of the pieces. */
      size_t lead = 0, end = b.len;
      while (lead < end && is_space (b.data[lead]))
        lead++;
      while (end > lead && is_space (b.data[end - 1]))
        end--;
      b.data[end] = '\0';
      p->lbase = b.data;
      p->next = i + 1;
      ib_buf_free (&p->tail);
      ib_buf_append (&p->tail, "", 0);
      if (lead < end)
        ret = parse_instruction (p, b.data + lead, lineno);
      i = p->next - 1; /* past heredoc bodies */
      p->lbase = NULL;
      free (p->segs);
      p->segs = NULL;
      p->n_segs = p->cap_segs = 0;
      ib_buf_free (&b);
      if (ret < 0)
        goto out;
    }

  if (p->r->n_stages == 0)
    ret = perr (p, n ? (int) n : 1, "expected FROM, got end of file");

out:
  free (lines);
  free (p->segs);
  p->segs = NULL;
  p->n_segs = p->cap_segs = 0;
  ib_buf_free (&p->tail);
  return ret;
}

int
ib_recipe_parse (const char *path, const char *text, ib_recipe_t **out, ib_error_t *err)
{
  struct parser p = {
    .path = path ? path : "<recipe>",
    .esc = '\\',
    .err = err,
  };

  *out = NULL;
  if (text == NULL)
    return ib_error_set (err, EINVAL, "%s: no recipe text", p.path);
  size_t len = strnlen (text, (size_t) IB_RECIPE_MAX + 1);
  if (len > IB_RECIPE_MAX)
    return ib_error_set (err, EFBIG, "%s: the recipe is larger than %d bytes (16 MiB)", p.path,
                         IB_RECIPE_MAX);
  p.r = xmalloc (sizeof *p.r);
  p.r->path = xstrdup (p.path);
  p.r->escape = '\\';
  if (parse_all (&p, text) < 0)
    {
      ib_recipe_free (p.r);
      return -1;
    }
  *out = p.r;
  return 0;
}

void
ib_recipe_free (ib_recipe_t *r)
{
  if (r == NULL)
    return;
  for (size_t i = 0; i < r->n_global_args; i++)
    instr_clear (&r->global_args[i]);
  free (r->global_args);
  for (size_t s = 0; s < r->n_stages; s++)
    {
      for (size_t i = 0; i < r->stages[s].n_instrs; i++)
        instr_clear (&r->stages[s].instrs[i]);
      free (r->stages[s].instrs);
      free (r->stages[s].name);
    }
  free (r->stages);
  free (r->path);
  free (r);
}

const ib_stage_t *
ib_recipe_stage (const ib_recipe_t *r, const char *name_or_index)
{
  if (r == NULL || name_or_index == NULL || name_or_index[0] == '\0')
    return NULL;
  bool numeric = true;
  for (const char *c = name_or_index; *c; c++)
    numeric &= is_digit (*c);
  if (numeric)
    {
      errno = 0;
      unsigned long idx = strtoul (name_or_index, NULL, 10);
      if (errno != 0 || idx >= r->n_stages)
        return NULL;
      return &r->stages[idx];
    }
  for (size_t i = 0; i < r->n_stages; i++)
    if (r->stages[i].name && strcasecmp (r->stages[i].name, name_or_index) == 0)
      return &r->stages[i];
  return NULL;
}

static const char *
flag_match (const char *flag, const char *name)
{
  size_t n = strlen (name);

  if (strncmp (flag, "--", 2) != 0 || strncmp (flag + 2, name, n) != 0)
    return NULL;
  if (flag[2 + n] == '=')
    return flag + 2 + n + 1;
  if (flag[2 + n] == '\0')
    return "true";
  return NULL;
}

const ib_heredoc_t *
ib_instr_heredoc (const ib_instr_t *in, size_t i)
{
  if (in == NULL)
    return NULL;
  for (size_t k = 0; k < in->n_heredocs; k++)
    if (in->heredocs[k].arg >= 0 && (size_t) in->heredocs[k].arg == i)
      return &in->heredocs[k];
  return NULL;
}

const char *
ib_instr_flag (const ib_instr_t *in, const char *name)
{
  if (in == NULL || name == NULL)
    return NULL;
  if (strncmp (name, "--", 2) == 0)
    name += 2;
  for (size_t i = 0; in->flags && in->flags[i]; i++)
    {
      const char *v = flag_match (in->flags[i], name);
      if (v)
        return v;
    }
  return NULL;
}

char **
ib_instr_flag_values (const ib_instr_t *in, const char *name)
{
  char **v = strv_new ();

  if (in == NULL || name == NULL)
    return v;
  if (strncmp (name, "--", 2) == 0)
    name += 2;
  for (size_t i = 0; in->flags && in->flags[i]; i++)
    {
      const char *f = flag_match (in->flags[i], name);
      if (f)
        ib_strv_push (&v, f);
    }
  return v;
}

/* ------------------------------------------------------------------ */
/* EXPOSE and STOPSIGNAL values                                       */
/* ------------------------------------------------------------------ */

/* A port "0".."65535" (decimal digits only) of n bytes at s. */
static bool
parse_port (const char *s, size_t n, unsigned *out)
{
  unsigned v = 0;
  if (n == 0 || n > 5)
    return false;
  for (size_t i = 0; i < n; i++)
    {
      if (!is_digit (s[i]))
        return false;
      v = v * 10 + (unsigned) (s[i] - '0');
    }
  if (v > 65535)
    return false;
  *out = v;
  return true;
}

/* PORT or PORT-PORT of n bytes at s. */
static bool
parse_port_range (const char *s, size_t n, unsigned *lo, unsigned *hi)
{
  const char *dash = memchr (s, '-', n);
  if (dash == NULL)
    {
      if (!parse_port (s, n, lo))
        return false;
      *hi = *lo;
      return true;
    }
  return parse_port (s, (size_t) (dash - s), lo)
         && parse_port (dash + 1, n - (size_t) (dash - s) - 1, hi) && *hi >= *lo;
}

int
ib_expose_key (const char *spec, char **key, ib_error_t *err)
{
  cleanup_free char *ex = excerpt (spec ? spec : "");
  const char *s = spec ? spec : "";
  const char *slash = strrchr (s, '/');
  size_t plen = slash ? (size_t) (slash - s) : strlen (s);
  const char *colon = memrchr (s, ':', plen);
  const char *port = colon ? colon + 1 : s;
  size_t port_len = plen - (size_t) (port - s);
  unsigned lo, hi;

  *key = NULL;
  if (!parse_port_range (port, port_len, &lo, &hi))
    return ib_error_set (err, EINVAL,
                         "port '%s': expected a port 0-65535 or a range PORT-PORT, optionally "
                         "/tcp, /udp or /sctp", ex);
  if (colon)
    {
      /* [IP:]HOSTPORT: before it (BuildKit accepts, and warns: EXPOSE does
       * not publish); HOSTPORT may be empty ("IP::80") */
      const char *hp_end = colon;
      const char *hp = memrchr (s, ':', (size_t) (hp_end - s));
      hp = hp ? hp + 1 : s;
      unsigned hlo, hhi;
      if (hp < hp_end && !parse_port_range (hp, (size_t) (hp_end - hp), &hlo, &hhi))
        return ib_error_set (err, EINVAL, "port '%s': expected a host port 0-65535 before ':'",
                             ex);
    }
  char proto[8] = "tcp";
  if (slash)
    {
      size_t n = strlen (slash + 1);
      if (n == 0 || n >= sizeof proto)
        return ib_error_set (err, EINVAL, "port '%s': expected protocol tcp, udp or sctp", ex);
      for (size_t i = 0; i <= n; i++)
        proto[i] = (char) tolower ((unsigned char) slash[1 + i]);
      if (strcmp (proto, "tcp") && strcmp (proto, "udp") && strcmp (proto, "sctp"))
        return ib_error_set (err, EINVAL, "port '%s': expected protocol tcp, udp or sctp", ex);
    }
  *key = lo == hi ? xasprintf ("%u/%s", lo, proto) : xasprintf ("%u-%u/%s", lo, hi, proto);
  return 0;
}

/* Docker's signal map for Linux (moby/sys signal_linux.go), without SIG. */
static const struct
{
  const char *name;
  int signo;
} signal_names[] = {
  { "ABRT", 6 },   { "ALRM", 14 },   { "BUS", 7 },     { "CHLD", 17 },  { "CLD", 17 },
  { "CONT", 18 },  { "FPE", 8 },     { "HUP", 1 },     { "ILL", 4 },    { "INT", 2 },
  { "IO", 29 },    { "IOT", 6 },     { "KILL", 9 },    { "PIPE", 13 },  { "POLL", 29 },
  { "PROF", 27 },  { "PWR", 30 },    { "QUIT", 3 },    { "SEGV", 11 },  { "STKFLT", 16 },
  { "STOP", 19 },  { "SYS", 31 },    { "TERM", 15 },   { "TRAP", 5 },   { "TSTP", 20 },
  { "TTIN", 21 },  { "TTOU", 22 },   { "URG", 23 },    { "USR1", 10 },  { "USR2", 12 },
  { "VTALRM", 26 }, { "WINCH", 28 }, { "XCPU", 24 },   { "XFSZ", 25 },  { "RTMIN", 34 },
  { "RTMAX", 64 },
};

int
ib_stop_signal (const char *s, int *signo, ib_error_t *err)
{
  cleanup_free char *ex = excerpt (s ? s : "");
  const char *v = s ? s : "";
  int n = 0;

  if (*v && strspn (v, "0123456789") == strlen (v))
    {
      for (const char *c = v; *c && n <= 64; c++)
        n = n * 10 + (*c - '0');
      if (n < 1 || n > 64)
        return ib_error_set (err, EINVAL, "signal '%s': a signal number is 1 to 64", ex);
      if (signo)
        *signo = n;
      return 0;
    }
  if (strncasecmp (v, "SIG", 3) == 0)
    v += 3;
  /* RTMIN+1..RTMIN+15, RTMAX-14..RTMAX-1 as Docker names them */
  size_t base = strcspn (v, "+-");
  for (size_t i = 0; i < sizeof signal_names / sizeof signal_names[0]; i++)
    {
      if (strlen (signal_names[i].name) != base || strncasecmp (v, signal_names[i].name, base))
        continue;
      n = signal_names[i].signo;
      if (v[base] == '\0')
        break;
      bool rt = signal_names[i].signo >= 34;
      const char *d = v + base + 1;
      bool plus = v[base] == '+';
      int k = 0;
      if (!rt || (plus != (n == 34)) || *d == '\0' || strlen (d) > 2
          || strspn (d, "0123456789") != strlen (d) || d[0] == '0')
        {
          n = 0;
          break;
        }
      k = atoi (d);
      if (k < 1 || k > (plus ? 15 : 14))
        n = 0;
      else
        n = plus ? n + k : n - k;
      break;
    }
  if (n == 0)
    return ib_error_set (err, EINVAL,
                         "signal '%s': expected a signal name (SIGTERM, KILL, RTMIN+1, ...) or "
                         "a number 1 to 64", ex);
  if (signo)
    *signo = n;
  return 0;
}
