/* oci/regconf.c — registries.conf (containers-registries.conf(5) v2
 * subset) with a small strict TOML parser, mirror and prefix resolution,
 * and the process-wide registry options.  See oci/regconf.h. */
#include "oci/regconf.h"
#include "oci/ref.h"
#include "common/util.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---------- a TOML subset ---------- */

typedef enum
{
  TV_STRING,
  TV_BOOL,
  TV_INT,
  TV_ARRAY,
  TV_TABLE,
} tv_kind_t;

typedef struct tval
{
  tv_kind_t kind;
  int line;
  char *s;            /* TV_STRING */
  bool b;             /* TV_BOOL */
  long long i;        /* TV_INT */
  struct tval *items; /* TV_ARRAY items, TV_TABLE values */
  char **keys;        /* TV_TABLE keys, n of them */
  size_t n;
} tval_t;

static void
tval_clear (tval_t *v)
{
  free (v->s);
  for (size_t i = 0; i < v->n; i++)
    tval_clear (&v->items[i]);
  free (v->items);
  if (v->keys)
    ib_strv_free (v->keys);
  memset (v, 0, sizeof *v);
}

static const char *
tv_kind_name (tv_kind_t k)
{
  switch (k)
    {
    case TV_STRING: return "a string";
    case TV_BOOL: return "a boolean";
    case TV_INT: return "an integer";
    case TV_ARRAY: return "an array";
    default: return "a table";
    }
}

typedef struct tparser
{
  const char *path;
  const char *p;
  int line;
  ib_error_t *err;
} tparser_t;

static int
tp_error (tparser_t *t, const char *what)
{
  return ib_error_set (t->err, EINVAL, "%s:%d: %s", t->path, t->line, what);
}

static void
skip_ws (tparser_t *t)
{
  while (*t->p == ' ' || *t->p == '\t')
    t->p++;
}

static void
skip_comment (tparser_t *t)
{
  if (*t->p == '#')
    while (*t->p && *t->p != '\n')
      t->p++;
}

/* Spaces, comments and newlines (inside arrays, between statements). */
static void
skip_space_lines (tparser_t *t)
{
  for (;;)
    {
      skip_ws (t);
      skip_comment (t);
      if (*t->p == '\r' && t->p[1] == '\n')
        t->p++;
      if (*t->p != '\n')
        return;
      t->p++;
      t->line++;
    }
}

/* After a statement: spaces, an optional comment, then end of line or file. */
static int
end_of_line (tparser_t *t)
{
  skip_ws (t);
  skip_comment (t);
  if (*t->p == '\r' && t->p[1] == '\n')
    t->p++;
  if (*t->p == '\n')
    {
      t->p++;
      t->line++;
      return 0;
    }
  if (*t->p == '\0')
    return 0;
  return tp_error (t, "unexpected text after the value (one key = value per line)");
}

static void
put_utf8 (ib_buf_t *b, unsigned long c)
{
  char u[4];
  size_t n;
  if (c < 0x80)
    u[0] = (char) c, n = 1;
  else if (c < 0x800)
    u[0] = (char) (0xc0 | (c >> 6)), u[1] = (char) (0x80 | (c & 0x3f)), n = 2;
  else if (c < 0x10000)
    u[0] = (char) (0xe0 | (c >> 12)), u[1] = (char) (0x80 | ((c >> 6) & 0x3f)),
    u[2] = (char) (0x80 | (c & 0x3f)), n = 3;
  else
    u[0] = (char) (0xf0 | (c >> 18)), u[1] = (char) (0x80 | ((c >> 12) & 0x3f)),
    u[2] = (char) (0x80 | ((c >> 6) & 0x3f)), u[3] = (char) (0x80 | (c & 0x3f)), n = 4;
  ib_buf_append (b, u, n);
}

/* A basic ("...") or literal ('...') one-line string at t->p. */
static int
parse_string (tparser_t *t, char **out)
{
  char q = *t->p;
  if (t->p[1] == q && t->p[2] == q)
    return tp_error (t, "multi-line strings are not supported here");
  t->p++;
  ib_buf_t b = { 0 };
  while (*t->p != q)
    {
      unsigned char c = (unsigned char) *t->p;
      if (c == '\0' || c == '\n' || c == '\r')
        {
          ib_buf_free (&b);
          return tp_error (t, "unterminated string");
        }
      if (c < 0x20 && c != '\t')
        {
          ib_buf_free (&b);
          return tp_error (t, "control character in a string");
        }
      if (q == '"' && c == '\\')
        {
          char e = t->p[1];
          const char *simple = strchr ("btnfr\"\\", e);
          if (e && simple)
            {
              static const char repl[] = "\b\t\n\f\r\"\\";
              ib_buf_append (&b, &repl[simple - "btnfr\"\\"], 1);
              t->p += 2;
              continue;
            }
          if (e == 'u' || e == 'U')
            {
              int digits = e == 'u' ? 4 : 8;
              unsigned long cp = 0;
              for (int k = 0; k < digits; k++)
                {
                  char h = t->p[2 + k];
                  if (!isxdigit ((unsigned char) h))
                    {
                      ib_buf_free (&b);
                      return tp_error (t, "bad \\u escape in a string");
                    }
                  cp = cp * 16 + (unsigned long) (isdigit ((unsigned char) h)
                                                      ? h - '0'
                                                      : tolower ((unsigned char) h) - 'a' + 10);
                }
              if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
                {
                  ib_buf_free (&b);
                  return tp_error (t, "escape names no Unicode scalar value");
                }
              put_utf8 (&b, cp);
              t->p += 2 + digits;
              continue;
            }
          ib_buf_free (&b);
          return tp_error (t, "unknown escape sequence in a string");
        }
      ib_buf_append (&b, t->p, 1);
      t->p++;
    }
  t->p++;
  *out = ib_buf_steal (&b);
  return 0;
}

static bool
is_bare_key_char (char c)
{
  return isalnum ((unsigned char) c) || c == '_' || c == '-';
}

static int
parse_key (tparser_t *t, char **out)
{
  if (*t->p == '"' || *t->p == '\'')
    return parse_string (t, out);
  const char *s = t->p;
  while (is_bare_key_char (*t->p))
    t->p++;
  if (t->p == s)
    return tp_error (t, "expected a key");
  *out = xstrndup (s, (size_t) (t->p - s));
  return 0;
}

/* a.b."c" -> "a.b.c" (keys here never contain dots themselves). */
static int
parse_dotted_key (tparser_t *t, char **out)
{
  ib_buf_t b = { 0 };
  for (;;)
    {
      char *k = NULL;
      if (parse_key (t, &k) < 0)
        {
          ib_buf_free (&b);
          return -1;
        }
      if (b.len)
        ib_buf_puts (&b, ".");
      ib_buf_puts (&b, k);
      free (k);
      skip_ws (t);
      if (*t->p != '.')
        break;
      t->p++;
      skip_ws (t);
    }
  *out = ib_buf_steal (&b);
  return 0;
}

static int parse_value (tparser_t *t, tval_t *v);

static void
tv_push (tval_t *v, tval_t *item)
{
  v->items = xrealloc (v->items, (v->n + 1) * sizeof *v->items);
  v->items[v->n++] = *item;
  memset (item, 0, sizeof *item);
}

static int
parse_array (tparser_t *t, tval_t *v)
{
  v->kind = TV_ARRAY;
  t->p++; /* [ */
  for (;;)
    {
      skip_space_lines (t);
      if (*t->p == ']')
        {
          t->p++;
          return 0;
        }
      tval_t item = { 0 };
      if (parse_value (t, &item) < 0)
        return -1;
      tv_push (v, &item);
      skip_space_lines (t);
      if (*t->p == ',')
        t->p++;
      else if (*t->p != ']')
        return tp_error (t, "expected ',' or ']' in an array");
    }
}

static int
parse_inline_table (tparser_t *t, tval_t *v)
{
  v->kind = TV_TABLE;
  t->p++; /* { */
  skip_ws (t);
  if (*t->p == '}')
    {
      t->p++;
      return 0;
    }
  for (;;)
    {
      skip_ws (t);
      char *k = NULL;
      if (parse_dotted_key (t, &k) < 0)
        return -1;
      for (size_t i = 0; i < v->n; i++)
        if (strcmp (v->keys[i], k) == 0)
          {
            free (k);
            return tp_error (t, "duplicate key in an inline table");
          }
      ib_strv_push (&v->keys, k);
      free (k);
      skip_ws (t);
      if (*t->p != '=')
        return tp_error (t, "expected '=' after a key");
      t->p++;
      skip_ws (t);
      tval_t item = { 0 };
      if (parse_value (t, &item) < 0)
        return -1;
      tv_push (v, &item);
      skip_ws (t);
      if (*t->p == ',')
        {
          t->p++;
          continue;
        }
      if (*t->p == '}')
        {
          t->p++;
          return 0;
        }
      return tp_error (t, "expected ',' or '}' in an inline table (one line)");
    }
}

static int
parse_value (tparser_t *t, tval_t *v)
{
  memset (v, 0, sizeof *v);
  v->line = t->line;
  const char *p = t->p;
  if (*p == '"' || *p == '\'')
    {
      v->kind = TV_STRING;
      return parse_string (t, &v->s);
    }
  if (*p == '[')
    return parse_array (t, v);
  if (*p == '{')
    return parse_inline_table (t, v);
  if (strncmp (p, "true", 4) == 0 && !is_bare_key_char (p[4]))
    {
      v->kind = TV_BOOL;
      v->b = true;
      t->p += 4;
      return 0;
    }
  if (strncmp (p, "false", 5) == 0 && !is_bare_key_char (p[5]))
    {
      v->kind = TV_BOOL;
      t->p += 5;
      return 0;
    }
  if (*p == '+' || *p == '-' || isdigit ((unsigned char) *p))
    {
      /* decimal integers (underscores between digits allowed); no floats, dates */
      const char *s = p + (*p == '+' || *p == '-');
      ib_buf_t digits = { 0 };
      if (*p == '-')
        ib_buf_puts (&digits, "-");
      const char *q = s;
      while (isdigit ((unsigned char) *q) || (*q == '_' && q > s && isdigit ((unsigned char) q[1])))
        {
          if (*q != '_')
            ib_buf_append (&digits, q, 1);
          q++;
        }
      bool bad = q == s || strchr (".eE:-+xob", *q) != NULL || is_bare_key_char (*q)
                 || (q - s > 1 && *s == '0');
      if (bad)
        {
          ib_buf_free (&digits);
          return tp_error (t, "only strings, booleans, decimal integers, arrays and inline "
                              "tables are supported as values");
        }
      errno = 0;
      v->kind = TV_INT;
      v->i = strtoll (digits.data, NULL, 10);
      ib_buf_free (&digits);
      if (errno)
        return tp_error (t, "integer out of range");
      t->p = q;
      return 0;
    }
  return tp_error (t, "expected a value (string, boolean, integer, array or inline table)");
}

/* ---------- registries.conf ---------- */

enum ctx
{
  CTX_TOP,
  CTX_REGISTRY,
  CTX_MIRROR,
  CTX_ALIASES,
  CTX_IGNORED,
};

enum
{
  SEEN_PREFIX = 1,
  SEEN_LOCATION = 2,
  SEEN_INSECURE = 4,
  SEEN_BLOCKED = 8,
  SEEN_DIGEST_ONLY = 16,
  SEEN_MIRROR = 32,
  SEEN_PULL_FROM = 64,
};

typedef struct conf_parser
{
  tparser_t t;
  ib_regconf_t *c;
  enum ctx ctx;
  unsigned seen;         /* keys set in the current registry / mirror table */
  char **top_keys;       /* keys set at the top level */
  char *ignored_table;   /* name of the ignored table we are in */
} conf_parser_t;

static int
want_kind (conf_parser_t *cp, const char *key, const tval_t *v, tv_kind_t kind)
{
  if (v->kind == kind)
    return 0;
  return ib_error_set (cp->t.err, EINVAL, "%s:%d: %s must be %s, not %s", cp->t.path, v->line,
                       key, tv_kind_name (kind), tv_kind_name (v->kind));
}

static int
once (conf_parser_t *cp, unsigned bit, const char *key, int line)
{
  if (cp->seen & bit)
    return ib_error_set (cp->t.err, EINVAL, "%s:%d: %s given twice in one table", cp->t.path,
                         line, key);
  cp->seen |= bit;
  return 0;
}

static ib_reg_entry_t *
cur_entry (conf_parser_t *cp)
{
  return &cp->c->entries[cp->c->n_entries - 1];
}

static ib_reg_mirror_t *
add_mirror (ib_reg_entry_t *e)
{
  e->mirrors = xrealloc (e->mirrors, (e->n_mirrors + 1) * sizeof *e->mirrors);
  ib_reg_mirror_t *m = &e->mirrors[e->n_mirrors++];
  memset (m, 0, sizeof *m);
  return m;
}

static int
mirror_key (conf_parser_t *cp, ib_reg_mirror_t *m, const char *key, tval_t *v, unsigned *seen)
{
  unsigned saved = cp->seen;
  cp->seen = *seen;
  int r = 0;
  if (strcmp (key, "location") == 0)
    {
      if ((r = once (cp, SEEN_LOCATION, key, v->line)) == 0
          && (r = want_kind (cp, key, v, TV_STRING)) == 0)
        m->location = steal_pointer (&v->s);
    }
  else if (strcmp (key, "insecure") == 0)
    {
      if ((r = once (cp, SEEN_INSECURE, key, v->line)) == 0
          && (r = want_kind (cp, key, v, TV_BOOL)) == 0)
        m->insecure = v->b;
    }
  else if (strcmp (key, "pull-from-mirror") == 0)
    {
      if ((r = once (cp, SEEN_PULL_FROM, key, v->line)) == 0
          && (r = want_kind (cp, key, v, TV_STRING)) == 0)
        {
          if (strcmp (v->s, "all") == 0)
            m->pull_from = IB_MIRROR_PULL_ALL;
          else if (strcmp (v->s, "digest-only") == 0)
            m->pull_from = IB_MIRROR_PULL_DIGEST_ONLY;
          else if (strcmp (v->s, "tag-only") == 0)
            m->pull_from = IB_MIRROR_PULL_TAG_ONLY;
          else
            r = ib_error_set (cp->t.err, EINVAL,
                              "%s:%d: pull-from-mirror must be \"all\", \"digest-only\" or "
                              "\"tag-only\", not \"%s\"",
                              cp->t.path, v->line, v->s);
        }
    }
  else
    ib_debug ("%s:%d: mirror key %s is not supported by imgbuild; ignored", cp->t.path, v->line,
              key);
  *seen = cp->seen;
  cp->seen = saved;
  return r;
}

static int
registry_key (conf_parser_t *cp, const char *key, tval_t *v)
{
  ib_reg_entry_t *e = cur_entry (cp);
  if (strcmp (key, "prefix") == 0 || strcmp (key, "location") == 0)
    {
      bool is_prefix = key[0] == 'p';
      if (once (cp, is_prefix ? SEEN_PREFIX : SEEN_LOCATION, key, v->line) < 0
          || want_kind (cp, key, v, TV_STRING) < 0)
        return -1;
      char **slot = is_prefix ? &e->prefix : &e->location;
      *slot = steal_pointer (&v->s);
      return 0;
    }
  bool *flag = NULL;
  unsigned bit = 0;
  if (strcmp (key, "insecure") == 0)
    flag = &e->insecure, bit = SEEN_INSECURE;
  else if (strcmp (key, "blocked") == 0)
    flag = &e->blocked, bit = SEEN_BLOCKED;
  else if (strcmp (key, "mirror-by-digest-only") == 0)
    flag = &e->mirror_by_digest_only, bit = SEEN_DIGEST_ONLY;
  if (flag)
    {
      if (once (cp, bit, key, v->line) < 0 || want_kind (cp, key, v, TV_BOOL) < 0)
        return -1;
      *flag = v->b;
      return 0;
    }
  if (strcmp (key, "mirror") == 0)
    {
      if (once (cp, SEEN_MIRROR, key, v->line) < 0 || want_kind (cp, key, v, TV_ARRAY) < 0)
        return -1;
      for (size_t i = 0; i < v->n; i++)
        {
          tval_t *tab = &v->items[i];
          if (want_kind (cp, "each mirror", tab, TV_TABLE) < 0)
            return -1;
          ib_reg_mirror_t *m = add_mirror (e);
          unsigned seen = 0;
          for (size_t k = 0; k < tab->n; k++)
            if (mirror_key (cp, m, tab->keys[k], &tab->items[k], &seen) < 0)
              return -1;
        }
      return 0;
    }
  ib_debug ("%s:%d: registry key %s is not supported by imgbuild; ignored", cp->t.path, v->line,
            key);
  return 0;
}

static bool has_scheme (const char *s);

/* [aliases] "NAME" = "REGISTRY/REPOSITORY": the name short, the value
 * qualified, neither with a tag or digest; a name given again in one file
 * is an error, in a later file it replaces (ib_regconf_merge). */
static int
add_alias (conf_parser_t *cp, const char *key, tval_t *v)
{
  ib_regconf_t *c = cp->c;
  if (ib_ref_names_registry (key) || strpbrk (key, ":@") || *key == '\0')
    return ib_error_set (cp->t.err, EINVAL,
                         "%s:%d: alias \"%s\": a short name (no registry, tag or digest)",
                         cp->t.path, v->line, key);
  const char *last = strrchr (v->s, '/');
  if (!ib_ref_names_registry (v->s) || has_scheme (v->s) || strchr (last, ':') || strchr (v->s, '@'))
    return ib_error_set (cp->t.err, EINVAL,
                         "%s:%d: alias %s = \"%s\": the value is REGISTRY/REPOSITORY, with "
                         "no tag or digest",
                         cp->t.path, v->line, key, v->s);
  for (size_t i = 0; i < ib_strv_len (c->alias_names); i++)
    if (strcmp (c->alias_names[i], key) == 0)
      return ib_error_set (cp->t.err, EINVAL, "%s:%d: alias %s given twice", cp->t.path,
                           v->line, key);
  ib_strv_push (&c->alias_names, key);
  ib_strv_push (&c->alias_values, v->s);
  ib_strv_push (&c->alias_paths, cp->t.path);
  return 0;
}

static int
handle_kv (conf_parser_t *cp, const char *key, tval_t *v)
{
  switch (cp->ctx)
    {
    case CTX_TOP:
      if (ib_strv_len (cp->top_keys) > 0)
        for (char **k = cp->top_keys; *k; k++)
          if (strcmp (*k, key) == 0)
            return ib_error_set (cp->t.err, EINVAL, "%s:%d: %s given twice", cp->t.path, v->line,
                                 key);
      ib_strv_push (&cp->top_keys, key);
      if (strcmp (key, "registry") == 0)
        return ib_error_set (cp->t.err, EINVAL,
                             "%s:%d: write registries as [[registry]] tables", cp->t.path,
                             v->line);
      if (strcmp (key, "unqualified-search-registries") == 0)
        {
          if (want_kind (cp, key, v, TV_ARRAY) < 0)
            return -1;
          ib_strv_free (cp->c->search);
          cp->c->search = xmalloc (sizeof (char *));
          for (size_t i = 0; i < v->n; i++)
            {
              if (want_kind (cp, "each search registry", &v->items[i], TV_STRING) < 0)
                return -1;
              const char *r = v->items[i].s;
              if (*r == '\0' || strchr (r, '/') || has_scheme (r))
                return ib_error_set (cp->t.err, EINVAL,
                                     "%s:%d: search registry \"%s\": a host[:port], without a "
                                     "path or scheme",
                                     cp->t.path, v->line, r);
              ib_strv_push (&cp->c->search, r);
            }
          free (cp->c->search_path);
          cp->c->search_path = xstrdup (cp->t.path);
          return 0;
        }
      if (strcmp (key, "short-name-mode") == 0)
        {
          if (want_kind (cp, key, v, TV_STRING) < 0)
            return -1;
          static const char *modes[] = { "enforcing", "permissive", "disabled" };
          for (int m = 0; m < 3; m++)
            if (strcmp (v->s, modes[m]) == 0)
              {
                cp->c->short_name_mode = (ib_short_name_mode_t) (IB_SHORT_NAME_ENFORCING + m);
                return 0;
              }
          return ib_error_set (cp->t.err, EINVAL,
                               "%s:%d: short-name-mode \"%s\": expected enforcing, permissive "
                               "or disabled",
                               cp->t.path, v->line, v->s);
        }
      ib_debug ("%s:%d: %s is not supported by imgbuild; ignored", cp->t.path, v->line, key);
      return 0;
    case CTX_ALIASES:
      if (want_kind (cp, "an alias", v, TV_STRING) < 0)
        return -1;
      return add_alias (cp, key, v);
    case CTX_REGISTRY:
      return registry_key (cp, key, v);
    case CTX_MIRROR:
      {
        ib_reg_entry_t *e = cur_entry (cp);
        unsigned seen = cp->seen;
        cp->seen = 0;
        int r = mirror_key (cp, &e->mirrors[e->n_mirrors - 1], key, v, &seen);
        cp->seen = seen;
        return r;
      }
    default:
      ib_debug ("%s:%d: [%s] %s is not supported by imgbuild; ignored", cp->t.path, v->line,
                cp->ignored_table, key);
      return 0;
    }
}

static int
handle_header (conf_parser_t *cp, const char *name, bool array, int line)
{
  free (cp->ignored_table);
  cp->ignored_table = NULL;
  cp->seen = 0;
  if (strcmp (name, "registry") == 0 || strcmp (name, "registry.mirror") == 0)
    {
      if (!array)
        return ib_error_set (cp->t.err, EINVAL, "%s:%d: write [[%s]], an array of tables",
                             cp->t.path, line, name);
      if (strcmp (name, "registry") == 0)
        {
          ib_regconf_t *c = cp->c;
          c->entries = xrealloc (c->entries, (c->n_entries + 1) * sizeof *c->entries);
          memset (&c->entries[c->n_entries], 0, sizeof *c->entries);
          c->entries[c->n_entries++].line = line;
          cp->ctx = CTX_REGISTRY;
          return 0;
        }
      if (cp->c->n_entries == 0)
        return ib_error_set (cp->t.err, EINVAL, "%s:%d: [[registry.mirror]] before any [[registry]]",
                             cp->t.path, line);
      ib_reg_entry_t *e = cur_entry (cp);
      add_mirror (e);
      cp->ctx = CTX_MIRROR;
      return 0;
    }
  if (strcmp (name, "aliases") == 0 && !array)
    {
      cp->ctx = CTX_ALIASES;
      return 0;
    }
  ib_debug ("%s:%d: [%s] is not supported by imgbuild; ignored", cp->t.path, line, name);
  cp->ignored_table = xstrdup (name);
  cp->ctx = CTX_IGNORED;
  return 0;
}

static bool
has_scheme (const char *s)
{
  return s && strstr (s, "://") != NULL;
}

static int
validate (ib_regconf_t *c, ib_error_t *err)
{
  for (size_t i = 0; i < c->n_entries; i++)
    {
      ib_reg_entry_t *e = &c->entries[i];
      if ((e->prefix == NULL || *e->prefix == '\0') && (e->location == NULL || *e->location == '\0'))
        return ib_error_set (err, EINVAL, "%s:%d: [[registry]] needs a prefix or a location",
                             c->path, e->line);
      if (e->prefix == NULL || *e->prefix == '\0')
        {
          free (e->prefix);
          e->prefix = xstrdup (e->location);
        }
      bool wild = ib_str_has_prefix (e->prefix, "*.");
      if (wild && ((e->location && *e->location) || strchr (e->prefix, '/')))
        return ib_error_set (err, EINVAL,
                             "%s:%d: a wildcard prefix (%s) names hosts only and takes no "
                             "location",
                             c->path, e->line, e->prefix);
      if (!wild && strchr (e->prefix, '*'))
        return ib_error_set (err, EINVAL, "%s:%d: prefix %s: '*' only as \"*.domain\"", c->path,
                             e->line, e->prefix);
      if (e->location == NULL || (*e->location == '\0' && !wild))
        {
          free (e->location);
          e->location = xstrdup (e->prefix);
        }
      if (has_scheme (e->prefix) || has_scheme (e->location))
        return ib_error_set (err, EINVAL,
                             "%s:%d: prefix and location are host[:port][/path], without a "
                             "scheme",
                             c->path, e->line);
      for (size_t k = 0; k < e->n_mirrors; k++)
        {
          const char *l = e->mirrors[k].location;
          if (l == NULL || *l == '\0')
            return ib_error_set (err, EINVAL, "%s:%d: a mirror of %s has no location", c->path,
                                 e->line, e->prefix);
          if (has_scheme (l))
            return ib_error_set (err, EINVAL,
                                 "%s:%d: mirror location %s: host[:port][/path], without a "
                                 "scheme",
                                 c->path, e->line, l);
        }
      for (size_t j = 0; j < i; j++)
        if (strcmp (c->entries[j].prefix, e->prefix) == 0)
          return ib_error_set (err, EINVAL, "%s:%d: prefix %s already given on line %d", c->path,
                               e->line, e->prefix, c->entries[j].line);
    }
  return 0;
}

int
ib_regconf_parse (const char *path, const char *text, ib_regconf_t **out, ib_error_t *err)
{
  *out = NULL;
  conf_parser_t cp = { .t = { .path = path, .p = text, .line = 1, .err = err } };
  cp.c = xmalloc (sizeof *cp.c);
  cp.c->path = xstrdup (path);
  tparser_t *t = &cp.t;
  int ret = 0;
  for (;;)
    {
      skip_space_lines (t);
      if (*t->p == '\0')
        break;
      int line = t->line;
      char *name = NULL;
      if (*t->p == '[')
        {
          bool array = t->p[1] == '[';
          t->p += array ? 2 : 1;
          skip_ws (t);
          if (parse_dotted_key (t, &name) < 0)
            {
              ret = -1;
              break;
            }
          skip_ws (t);
          if (strncmp (t->p, array ? "]]" : "]", array ? 2 : 1) != 0)
            {
              free (name);
              ret = tp_error (t, array ? "expected ']]'" : "expected ']'");
              break;
            }
          t->p += array ? 2 : 1;
          ret = end_of_line (t);
          if (ret == 0)
            ret = handle_header (&cp, name, array, line);
          free (name);
          if (ret < 0)
            break;
          continue;
        }
      if (parse_dotted_key (t, &name) < 0)
        {
          ret = -1;
          break;
        }
      skip_ws (t);
      if (*t->p != '=')
        {
          free (name);
          ret = tp_error (t, "expected '=' after a key");
          break;
        }
      t->p++;
      skip_ws (t);
      tval_t v;
      ret = parse_value (t, &v);
      if (ret == 0)
        ret = end_of_line (t);
      if (ret == 0)
        ret = handle_kv (&cp, name, &v);
      tval_clear (&v);
      free (name);
      if (ret < 0)
        break;
    }
  ib_strv_free (cp.top_keys);
  free (cp.ignored_table);
  if (ret == 0)
    ret = validate (cp.c, err);
  if (ret < 0)
    {
      ib_regconf_free (cp.c);
      return -1;
    }
  for (size_t i = 0; i < cp.c->n_entries; i++)
    cp.c->entries[i].path = xstrdup (path);
  *out = cp.c;
  return 0;
}

static void
entry_clear (ib_reg_entry_t *e)
{
  free (e->prefix);
  free (e->location);
  free (e->path);
  for (size_t k = 0; k < e->n_mirrors; k++)
    free (e->mirrors[k].location);
  free (e->mirrors);
  memset (e, 0, sizeof *e);
}

void
ib_regconf_merge (ib_regconf_t **into, ib_regconf_t *from)
{
  if (*into == NULL)
    {
      *into = from;
      return;
    }
  ib_regconf_t *c = *into;
  for (size_t i = 0; i < from->n_entries; i++)
    {
      ib_reg_entry_t *e = &from->entries[i];
      size_t k = 0;
      while (k < c->n_entries && strcmp (c->entries[k].prefix, e->prefix) != 0)
        k++;
      if (k == c->n_entries)
        c->entries = xrealloc (c->entries, (++c->n_entries) * sizeof *c->entries);
      else
        entry_clear (&c->entries[k]);
      c->entries[k] = *e;
      memset (e, 0, sizeof *e);
    }
  if (from->search_path)
    {
      ib_strv_free (c->search);
      free (c->search_path);
      c->search = steal_pointer (&from->search);
      c->search_path = steal_pointer (&from->search_path);
    }
  if (from->short_name_mode != IB_SHORT_NAME_UNSET)
    c->short_name_mode = from->short_name_mode;
  for (size_t i = 0; i < ib_strv_len (from->alias_names); i++)
    {
      size_t k = 0, n = ib_strv_len (c->alias_names);
      while (k < n && strcmp (c->alias_names[k], from->alias_names[i]) != 0)
        k++;
      if (k == n)
        {
          ib_strv_push (&c->alias_names, from->alias_names[i]);
          ib_strv_push (&c->alias_values, from->alias_values[i]);
          ib_strv_push (&c->alias_paths, from->alias_paths[i]);
        }
      else
        {
          free (c->alias_values[k]);
          free (c->alias_paths[k]);
          c->alias_values[k] = xstrdup (from->alias_values[i]);
          c->alias_paths[k] = xstrdup (from->alias_paths[i]);
        }
    }
  ib_regconf_free (from);
}

int
ib_regconf_load (const char *path, ib_regconf_t **out, ib_error_t *err)
{
  *out = NULL;
  cleanup_free char *text = NULL;
  size_t len = 0;
  if (ib_read_file (path, &text, &len, err) < 0)
    return -1;
  if (strlen (text) != len)
    return ib_error_set (err, EINVAL, "%s: contains a NUL byte", path);
  return ib_regconf_parse (path, text, out, err);
}

void
ib_regconf_free (ib_regconf_t *c)
{
  if (c == NULL)
    return;
  for (size_t i = 0; i < c->n_entries; i++)
    entry_clear (&c->entries[i]);
  free (c->entries);
  free (c->path);
  ib_strv_free (c->search);
  free (c->search_path);
  ib_strv_free (c->alias_names);
  ib_strv_free (c->alias_values);
  ib_strv_free (c->alias_paths);
  free (c);
}

const ib_reg_entry_t *
ib_regconf_match (const ib_regconf_t *c, const char *name)
{
  if (c == NULL)
    return NULL;
  const ib_reg_entry_t *best = NULL;
  size_t best_len = 0;
  const char *slash = strchr (name, '/');
  size_t reg_len = slash ? (size_t) (slash - name) : strlen (name);
  /* the registry's host, without a port, for wildcard prefixes */
  size_t host_len = reg_len;
  const char *colon = memchr (name, ':', reg_len);
  if (colon && name[0] != '[')
    host_len = (size_t) (colon - name);
  for (size_t i = 0; i < c->n_entries; i++)
    {
      const ib_reg_entry_t *e = &c->entries[i];
      size_t n = strlen (e->prefix);
      bool match;
      if (ib_str_has_prefix (e->prefix, "*."))
        {
          const char *dom = e->prefix + 1; /* ".example.com" */
          size_t dn = n - 1;
          match = host_len > dn && strncasecmp (name + host_len - dn, dom, dn) == 0;
        }
      else
        match = strncmp (name, e->prefix, n) == 0 && (name[n] == '\0' || name[n] == '/');
      if (match && (best == NULL || n > best_len))
        {
          best = e;
          best_len = n;
        }
    }
  return best;
}

static int
add_source (ib_reg_source_t **out, size_t *n, const ib_reg_entry_t *e, const char *location,
            const char *name, bool insecure, bool mirror, const char *path, ib_error_t *err)
{
  cleanup_free char *full = NULL;
  if (e && !ib_str_has_prefix (e->prefix, "*."))
    full = xasprintf ("%s%s", location, name + strlen (e->prefix));
  else
    full = xstrdup (name);
  char *slash = strchr (full, '/');
  if (slash == NULL || slash[1] == '\0' || slash == full)
    return ib_error_set (err, EINVAL, "%s:%d: %s rewritten to %s names no repository",
                         e && e->path ? e->path : path, e ? e->line : 0, name, full);
  *out = xrealloc (*out, (*n + 1) * sizeof **out);
  ib_reg_source_t *s = &(*out)[(*n)++];
  s->registry = xstrndup (full, (size_t) (slash - full));
  s->repository = xstrdup (slash + 1);
  s->insecure = insecure;
  s->mirror = mirror;
  return 0;
}

int
ib_regconf_sources (const ib_regconf_t *c, const char *registry, const char *repository,
                    bool by_digest, bool push, ib_reg_source_t **out, size_t *n, ib_error_t *err)
{
  *out = NULL;
  *n = 0;
  cleanup_free char *name = xasprintf ("%s/%s", registry, repository);
  const ib_reg_entry_t *e = ib_regconf_match (c, name);
  int r = 0;
  if (e == NULL)
    return add_source (out, n, NULL, NULL, name, false, false, NULL, err);
  if (e->blocked)
    return ib_error_set (err, EACCES, "%s: blocked by %s:%d (blocked = true)", name, c->path,
                         e->line);
  if (!push && !(e->mirror_by_digest_only && !by_digest))
    for (size_t i = 0; i < e->n_mirrors && r == 0; i++)
      {
        const ib_reg_mirror_t *m = &e->mirrors[i];
        if ((m->pull_from == IB_MIRROR_PULL_DIGEST_ONLY && !by_digest)
            || (m->pull_from == IB_MIRROR_PULL_TAG_ONLY && by_digest))
          continue;
        r = add_source (out, n, e, m->location, name, m->insecure, true, c->path, err);
      }
  if (r == 0)
    r = add_source (out, n, e, e->location, name, e->insecure, false, c->path, err);
  if (r < 0)
    {
      ib_reg_sources_free (*out, *n);
      *out = NULL;
      *n = 0;
    }
  return r;
}

void
ib_reg_sources_free (ib_reg_source_t *s, size_t n)
{
  for (size_t i = 0; i < n; i++)
    {
      free (s[i].registry);
      free (s[i].repository);
    }
  free (s);
}

/* ---------- process-wide options ---------- */

static char *opt_cert_dir;
static int opt_tls_verify = -1;
static uint64_t opt_chunk_size;
static char *opt_conf_path;

static pthread_mutex_t conf_lock = PTHREAD_MUTEX_INITIALIZER;
static bool conf_loaded;
static ib_regconf_t *conf;
static ib_error_t conf_err;

void
ib_regconf_set_cert_dir (const char *dir)
{
  free (opt_cert_dir);
  opt_cert_dir = xstrdup (dir);
}

const char *
ib_regconf_cert_dir (void)
{
  return opt_cert_dir;
}

void
ib_regconf_set_tls_verify (int v)
{
  opt_tls_verify = v < 0 ? -1 : v > 0;
}

int
ib_regconf_tls_verify (void)
{
  return opt_tls_verify;
}

void
ib_regconf_set_chunk_size (uint64_t bytes)
{
  opt_chunk_size = bytes;
}

uint64_t
ib_regconf_chunk_size (void)
{
  return opt_chunk_size;
}

void
ib_regconf_set_conf_path (const char *path)
{
  free (opt_conf_path);
  opt_conf_path = xstrdup (path);
}

/* The *.conf files of `dir` (a registries.conf.d), sorted by name. */
static char **
drop_in_names (const char *dir)
{
  char **names = NULL;
  DIR *d = opendir (dir);
  if (d == NULL)
    return NULL;
  struct dirent *de;
  while ((de = readdir (d)) != NULL)
    {
      size_t n = strlen (de->d_name);
      if (de->d_name[0] != '.' && n > 5 && strcmp (de->d_name + n - 5, ".conf") == 0)
        ib_strv_push (&names, de->d_name);
    }
  closedir (d);
  ib_strv_sort (names);
  return names;
}

char **
ib_regconf_default_files (const char *sys_root)
{
  char **files = NULL;
  const char *xdg = getenv ("XDG_CONFIG_HOME"), *home = getenv ("HOME");
  cleanup_free char *cfg = xdg && *xdg ? xstrdup (xdg)
                           : home && *home ? xasprintf ("%s/.config", home)
                                           : NULL;
  cleanup_free char *own = cfg ? xasprintf ("%s/imgbuild/registries.conf", cfg) : NULL;
  cleanup_free char *user = cfg ? xasprintf ("%s/containers/registries.conf", cfg) : NULL;
  cleanup_free char *sys = xasprintf ("%s/etc/containers/registries.conf", sys_root);
  const char *main_file = own && access (own, F_OK) == 0     ? own
                          : user && access (user, F_OK) == 0 ? user
                          : access (sys, F_OK) == 0          ? sys
                                                             : NULL;
  if (main_file)
    ib_strv_push (&files, main_file);
  cleanup_free char *sys_d = xasprintf ("%s.d", sys);
  cleanup_free char *user_d = user ? xasprintf ("%s.d", user) : NULL;
  cleanup_strv char **sys_names = drop_in_names (sys_d);
  cleanup_strv char **user_names = user_d ? drop_in_names (user_d) : NULL;
  for (char **n = sys_names; n && *n; n++)
    if (!ib_strv_has (user_names, *n))
      {
        cleanup_free char *p = ib_path_join (sys_d, *n);
        ib_strv_push (&files, p);
      }
  for (char **n = user_names; n && *n; n++)
    {
      cleanup_free char *p = ib_path_join (user_d, *n);
      ib_strv_push (&files, p);
    }
  return files;
}

static int
load_conf (ib_regconf_t **out, ib_error_t *err)
{
  *out = NULL;
  const char *p = opt_conf_path;
  if (p == NULL || *p == '\0')
    p = getenv ("IMGBUILD_REGISTRIES_CONF");
  if (p && *p)
    {
      ib_debug ("registries configuration: %s", p);
      return ib_regconf_load (p, out, err);
    }
  /* a broken file under /etc is skipped (with a debug line): it is the
   * machine's, and podman may read it differently; the user's own fail */
  cleanup_strv char **files = ib_regconf_default_files ("");
  for (char **f = files; f && *f; f++)
    {
      ib_regconf_t *c = NULL;
      ib_error_t e = NULL;
      if (ib_regconf_load (*f, &c, &e) < 0)
        {
          if (!ib_str_has_prefix (*f, "/etc/"))
            {
              ib_regconf_free (*out);
              *out = NULL;
              return ib_error_propagate (err, &e);
            }
          ib_debug ("registries configuration %s not used: %s", *f, e->msg);
          ib_error_free (&e);
          continue;
        }
      ib_debug ("registries configuration: %s", *f);
      ib_regconf_merge (out, c);
    }
  return 0;
}

int
ib_regconf_get (const ib_regconf_t **out, ib_error_t *err)
{
  *out = NULL;
  pthread_mutex_lock (&conf_lock);
  if (!conf_loaded)
    {
      conf_loaded = true;
      load_conf (&conf, &conf_err);
    }
  int r = 0;
  if (conf_err)
    r = ib_error_set (err, conf_err->status, "registries configuration: %s", conf_err->msg);
  else
    *out = conf;
  pthread_mutex_unlock (&conf_lock);
  return r;
}

int
ib_parse_size (const char *s, uint64_t *out, ib_error_t *err)
{
  const char *p = s;
  if (!isdigit ((unsigned char) *p))
    return ib_error_set (err, EINVAL, "size \"%s\": expected a number of bytes (like 5M)", s);
  errno = 0;
  char *end;
  unsigned long long n = strtoull (p, &end, 10);
  if (errno)
    return ib_error_set (err, EINVAL, "size \"%s\": too large", s);
  static const struct
  {
    const char *suffix;
    uint64_t mult;
  } units[] = {
    { "", 1 },
    { "b", 1 },
    { "k", 1ULL << 10 },     { "kib", 1ULL << 10 },    { "kb", 1000ULL },
    { "m", 1ULL << 20 },     { "mib", 1ULL << 20 },    { "mb", 1000000ULL },
    { "g", 1ULL << 30 },     { "gib", 1ULL << 30 },    { "gb", 1000000000ULL },
  };
  for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
    if (strcasecmp (end, units[i].suffix) == 0)
      {
        if (n > UINT64_MAX / units[i].mult)
          return ib_error_set (err, EINVAL, "size \"%s\": too large", s);
        *out = (uint64_t) n * units[i].mult;
        return 0;
      }
  return ib_error_set (err, EINVAL, "size \"%s\": unknown unit (use k, M, G, kB, MB or GB)", s);
}

int
ib_parse_seconds (const char *s, long *out, ib_error_t *err)
{
  if (!isdigit ((unsigned char) *s))
    return ib_error_set (err, EINVAL, "\"%s\": expected a number of seconds (like 60)", s);
  errno = 0;
  char *end;
  long v = strtol (s, &end, 10);
  if (strcmp (end, "s") == 0)
    end++;
  if (*end != '\0')
    return ib_error_set (err, EINVAL, "\"%s\": expected a number of seconds (like 60)", s);
  if (errno || v < 1 || v > 86400)
    return ib_error_set (err, EINVAL, "\"%s\": seconds must be from 1 to 86400", s);
  *out = v;
  return 0;
}

/* ---------- network limits ---------- */

static const struct
{
  const char *var;
  long def;
} net_limits[] = {
  [IB_NET_REQUEST] = { "IMGBUILD_REQUEST_TIMEOUT", 60 },
  [IB_NET_STALL] = { "IMGBUILD_STALL_TIMEOUT", 60 },
  [IB_NET_PROGRESS] = { "IMGBUILD_PROGRESS_TIMEOUT", 180 },
};
#define N_NET_LIMITS (sizeof net_limits / sizeof net_limits[0])

static pthread_once_t net_once = PTHREAD_ONCE_INIT;
static long net_value[N_NET_LIMITS];

static void
net_limits_init (void)
{
  for (size_t i = 0; i < N_NET_LIMITS; i++)
    {
      net_value[i] = net_limits[i].def;
      const char *e = getenv (net_limits[i].var);
      if (e == NULL || *e == '\0')
        continue;
      ib_error_t err = NULL;
      if (ib_parse_seconds (e, &net_value[i], &err) < 0)
        {
          ib_warn ("%s %s; using the default, %ld s", net_limits[i].var, err->msg,
                   net_limits[i].def);
          ib_error_free (&err);
        }
    }
}

long
ib_regconf_net_limit (ib_net_limit_t which)
{
  pthread_once (&net_once, net_limits_init);
  return (size_t) which < N_NET_LIMITS ? net_value[which] : 60;
}

const char *
ib_regconf_net_limit_var (ib_net_limit_t which)
{
  return (size_t) which < N_NET_LIMITS ? net_limits[which].var : "?";
}
