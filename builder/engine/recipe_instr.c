/* builder/engine/recipe_instr.c — one parser per instruction kind: flags (--mount,
 * --from, ...), the JSON form, the keyword table, heredocs, FROM, ARG,
 * ENV/LABEL, RUN/CMD/ENTRYPOINT/SHELL, HEALTHCHECK, COPY/ADD, OUTPUT. */
#include "builder/engine/recipe-int.h"
#include "common/util.h"

#include <ctype.h>
#include <jansson.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* flags                                                              */
/* ------------------------------------------------------------------ */

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
  { "repair", FLAG_STRING },         /* imgbuild: the wheels copied, repaired */
  { "repair-exclude", FLAG_STRING },
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
const char *
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
int
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

const struct keyword *
find_keyword (const char *word)
{
  for (size_t i = 0; i < sizeof keywords / sizeof keywords[0]; i++)
    if (strcasecmp (keywords[i].name, word) == 0)
      return &keywords[i];
  return NULL;
}

/* Levenshtein distance of a and b, case-insensitive (both at most 32). */
static size_t
edit_distance (const char *a, const char *b)
{
  size_t la = strlen (a), lb = strlen (b), row[33];
  for (size_t j = 0; j <= lb; j++)
    row[j] = j;
  for (size_t i = 1; i <= la; i++)
    {
      size_t diag = row[0];
      row[0] = i;
      for (size_t j = 1; j <= lb; j++)
        {
          size_t up = row[j];
          size_t cost = tolower ((unsigned char) a[i - 1]) != tolower ((unsigned char) b[j - 1]);
          size_t best = diag + cost;
          if (up + 1 < best)
            best = up + 1;
          if (row[j - 1] + 1 < best)
            best = row[j - 1] + 1;
          row[j] = best;
          diag = up;
        }
    }
  return row[lb];
}

const char *
suggest_keyword (const char *word)
{
  size_t n = strlen (word);
  if (n < 2 || n > 32)
    return NULL;
  size_t limit = n <= 5 ? 1 : 2, best = limit + 1;
  const char *found = NULL;
  for (size_t i = 0; i < sizeof keywords / sizeof keywords[0]; i++)
    {
      size_t d = edit_distance (word, keywords[i].name);
      if (d < best)
        {
          best = d;
          found = keywords[i].name;
        }
    }
  return found;
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
  cleanup_free char *ex = excerpt (w);
  if (unquote (s, '\\', &name, NULL) < 0)
    {
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

int
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
      /* A name used twice is no error: BuildKit warns (its DuplicateStageName
       * check) and builds; the build says which stage each use means. */
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

  if (unquote (rawkey, p->esc, &key, NULL) < 0
      || (rawval && unquote (rawval, p->esc, &value, NULL) < 0))
    {
      /* Without expansion the only failure is an unterminated quote. */
      bool in_value = key != NULL;
      cleanup_free char *ex = excerpt (in_value ? rawval : rawkey);
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

int
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

int
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

int
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
int
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

int
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

int
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

int
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
int
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
  /* the keys each type takes (docs/recipe.md, OUTPUT): anything else is a
   * typo or an exporter option of BuildKit's that is not here, said before
   * the build starts rather than ignored */
  static const struct
  {
    const char *type, *keys;
  } accepted[] = {
    { "local", "type, dest, src, require, repair, repair-exclude" },
    { "tar", "type, dest, src, compression" },
    { "image", "type, name, push" },
    { "registry", "type, name, push" },
    { "oci", "type, dest, name, tar" },
    { "docker", "type, dest, name" },
  };
  for (size_t k = 0; k < sizeof accepted / sizeof accepted[0]; k++)
    {
      if (strcmp (type->value, accepted[k].type) != 0)
        continue;
      for (size_t i = 0; i < in->n_kvs; i++)
        {
          const char *key = in->kvs[i].key, *list = accepted[k].keys, *at;
          size_t n = strlen (key);
          bool ok = false;
          for (at = strstr (list, key); at && !ok; at = strstr (at + 1, key))
            ok = (at == list || at[-1] == ' ') && (at[n] == ',' || at[n] == '\0');
          if (!ok)
            {
              cleanup_free char *ek = excerpt (key);
              return perr (p, in->line, "OUTPUT type=%s: unknown key '%s' (accepted: %s)",
                           type->value, ek, accepted[k].keys);
            }
        }
    }
  const ib_kv_t *dest = find_kv (in, "dest"), *tar = find_kv (in, "tar");
  if (dest && strcmp (dest->value, "-") == 0
      && (strcmp (type->value, "local") == 0 || (tar && strcmp (tar->value, "false") == 0)))
    return perr (p, in->line, "OUTPUT type=%s,dest=-: a directory cannot go to stdout "
                 "(type=tar|oci|docker,dest=- write a tarball there)", type->value);
  static const char *const bool_keys[] = { "push", "tar" };
  for (size_t k = 0; k < 2; k++)
    {
      const ib_kv_t *b = find_kv (in, bool_keys[k]);
      if (b && strcmp (b->value, "true") != 0 && strcmp (b->value, "false") != 0)
        {
          cleanup_free char *ev = excerpt (b->value);
          return perr (p, in->line, "OUTPUT %s=%s: expected true or false", bool_keys[k], ev);
        }
    }
  return 0;
}
