/* builder/engine/recipe.c — recipe (Dockerfile + OUTPUT) parser: physical and
 * logical lines, parser directives, the instructions of a recipe in order
 * (ONBUILD triggers, stages), accessors, and EXPOSE/STOPSIGNAL values.
 * Reading order: helpers, parser state and errors, logical lines,
 * ib_recipe_parse, accessors; the word lexer is recipe_words.c, each
 * instruction's own parser recipe_instr.c. */
#include "builder/engine/recipe-int.h"
#include "common/util.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* A copy of s fit to quote in a one-line message: control chars become '?',
 * long text is cut with "...". */
char *
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
void
mask_controls (char *s)
{
  for (; *s; s++)
    if ((unsigned char) *s < 0x20 || *s == 0x7f)
      *s = '?';
}

char *
excerpt (const char *s)
{
  return excerpt_n (s, strlen (s));
}

static void
kv_clear (ib_kv_t *kv)
{
  free (kv->key);
  free (kv->value);
  free (kv->raw);
  memset (kv, 0, sizeof *kv);
}

void
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
void
grow_for (void *v, size_t n, size_t size)
{
  void **pv = v;
  if (n == 0 || (n & (n - 1)) == 0)
    *pv = xrealloc (*pv, (n ? 2 * n : 1) * size);
}

/* Append a pair to an instruction; takes ownership of the strings. */
void
instr_add_kv (ib_instr_t *in, char *key, char *value, char *raw)
{
  grow_for (&in->kvs, in->n_kvs, sizeof *in->kvs);
  in->kvs[in->n_kvs].key = key;
  in->kvs[in->n_kvs].value = value;
  in->kvs[in->n_kvs].raw = raw;
  in->n_kvs++;
}

char **
strv_new (void)
{
  return xmalloc (sizeof (char *));
}


char *
vformat_masked (const char *fmt, va_list ap)
{
  char *msg = NULL;
  if (vasprintf (&msg, fmt, ap) < 0)
    abort ();
  mask_controls (msg);
  return msg;
}

int
perr (struct parser *p, int line, const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  cleanup_free char *msg = vformat_masked (fmt, ap);
  va_end (ap);
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
int
perr_at (struct parser *p, size_t off, const char *fmt, ...)
{
  int line, col;
  va_list ap;
  va_start (ap, fmt);
  cleanup_free char *msg = vformat_masked (fmt, ap);
  va_end (ap);
  pos_of (p, off, &line, &col);
  return ib_error_set (p->err, EINVAL, "%s:%d:%d: %s", p->path, line, col, msg);
}

/* Logical offset of `at`, a pointer into in->text. */
size_t
text_off (const struct parser *p, const ib_instr_t *in, const char *at)
{
  return p->text_off + (size_t) (at - in->text);
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
    {
      const char *near = suggest_keyword (word);
      return perr_at (p, kw_off, "unknown instruction '%s'%s%s%s", exw,
                      near ? " (did you mean " : "", near ? near : "", near ? "?)" : "");
    }
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
  in->text = xstrndup_trimmed (rest, strlen (rest));
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
  for (size_t i = r->n_stages; i-- > 0;)
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
