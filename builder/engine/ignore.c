#include "builder/engine/ignore.h"
#include "common/util.h"

#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

typedef struct pattern
{
  char **comps; /* cleaned path components */
  bool negate;
} pattern_t;

struct ib_ignore
{
  pattern_t *v;
  size_t n;
  bool has_negation;
};

/* Split a cleaned relative path into components ("" -> none). */
static char **
split_clean (const char *p)
{
  char **out = NULL;
  cleanup_free char *s = xstrdup (p);
  char *save = NULL;
  for (char *c = strtok_r (s, "/", &save); c; c = strtok_r (NULL, "/", &save))
    {
      if (strcmp (c, ".") == 0)
        continue;
      if (strcmp (c, "..") == 0)
        {
          size_t n = ib_strv_len (out);
          if (n)
            {
              free (out[n - 1]);
              out[n - 1] = NULL;
            }
          continue;
        }
      ib_strv_push (&out, c);
    }
  return out;
}

static void
add (ib_ignore_t *ig, const char *line)
{
  while (*line == ' ' || *line == '\t')
    line++;
  cleanup_free char *p = xstrdup (line);
  size_t n = strlen (p);
  while (n && (p[n - 1] == ' ' || p[n - 1] == '\t' || p[n - 1] == '\r'))
    p[--n] = '\0';
  if (n == 0)
    return;
  bool neg = p[0] == '!';
  char **comps = split_clean (neg ? p + 1 : p);
  if (comps == NULL)
    return; /* "." or "/": Docker ignores such a pattern */
  ig->v = xrealloc (ig->v, (ig->n + 1) * sizeof (pattern_t));
  ig->v[ig->n++] = (pattern_t) { .comps = comps, .negate = neg };
  if (neg)
    ig->has_negation = true;
}

ib_ignore_t *
ib_ignore_parse (const char *text)
{
  ib_ignore_t *ig = xmalloc (sizeof *ig);
  if (text == NULL)
    return ig;
  cleanup_free char *t = xstrdup (text);
  char *save = NULL;
  for (char *l = strtok_r (t, "\n", &save); l; l = strtok_r (NULL, "\n", &save))
    {
      const char *s = l;
      while (*s == ' ' || *s == '\t')
        s++;
      if (*s == '#')
        continue;
      add (ig, l);
    }
  return ig;
}

ib_ignore_t *
ib_ignore_from_patterns (char *const *patterns)
{
  ib_ignore_t *ig = xmalloc (sizeof *ig);
  for (char *const *p = patterns; p && *p; p++)
    add (ig, *p);
  return ig;
}

void
ib_ignore_free (ib_ignore_t *ig)
{
  if (ig == NULL)
    return;
  for (size_t i = 0; i < ig->n; i++)
    ib_strv_free (ig->v[i].comps);
  free (ig->v);
  free (ig);
}

bool
ib_ignore_empty (const ib_ignore_t *ig)
{
  return ig == NULL || ig->n == 0;
}

/* Do pattern components pc[0..] match path components c[0..nc) exactly? */
static bool
match_comps (char *const *pc, char *const *c, size_t nc)
{
  if (*pc == NULL)
    return nc == 0;
  if (strcmp (*pc, "**") == 0)
    {
      for (size_t k = 0; k <= nc; k++)
        if (match_comps (pc + 1, c + k, nc - k))
          return true;
      return false;
    }
  if (nc == 0)
    return false;
  if (fnmatch (*pc, *c, 0) != 0)
    return false;
  return match_comps (pc + 1, c + 1, nc - 1);
}

/* The pattern matches the path or one of its parent directories. */
static bool
matches (const pattern_t *p, char *const *c, size_t nc)
{
  for (size_t k = 1; k <= nc; k++)
    if (match_comps (p->comps, c, k))
      return true;
  return false;
}

bool
ib_ignore_excluded (const ib_ignore_t *ig, const char *rel)
{
  if (ig == NULL || ig->n == 0)
    return false;
  cleanup_strv char **c = split_clean (rel);
  size_t nc = ib_strv_len (c);
  if (nc == 0)
    return false;
  bool excluded = false;
  for (size_t i = 0; i < ig->n; i++)
    if (matches (&ig->v[i], c, nc))
      excluded = !ig->v[i].negate;
  return excluded;
}

bool
ib_ignore_may_include_below (const ib_ignore_t *ig, const char *rel)
{
  if (ig == NULL || !ig->has_negation)
    return false;
  cleanup_strv char **c = split_clean (rel);
  size_t nc = ib_strv_len (c);
  /* Every pattern up to the last one matching rel (or a parent of it)
   * matches each path below rel in the same way, and that last one
   * excludes; only a later `!` pattern can include something below. */
  size_t first = 0;
  for (size_t i = 0; i < ig->n; i++)
    if (matches (&ig->v[i], c, nc))
      first = i + 1;
  for (size_t i = first; i < ig->n; i++)
    {
      if (!ig->v[i].negate)
        continue;
      /* could the pattern match something under rel/?  Its components
       * must be able to match rel's as a prefix ("**" can). */
      char *const *pc = ig->v[i].comps;
      size_t k = 0;
      bool ok = true;
      for (; k < nc && pc[k]; k++)
        {
          if (strcmp (pc[k], "**") == 0)
            break;
          if (fnmatch (pc[k], c[k], 0) != 0)
            {
              ok = false;
              break;
            }
        }
      if (ok && (pc[k] != NULL || k < nc))
        return true;
    }
  return false;
}

bool
ib_path_filter_skip (const ib_path_filter_t *f, const char *rel, bool *descend)
{
  if (descend)
    *descend = false;
  if (f == NULL)
    return false;
  /* skipped when either set excludes it; descended into when every set
   * that excludes it may re-include something below */
  bool skip = false, down = true;
  if (f->exclude && ib_ignore_excluded (f->exclude, rel))
    {
      skip = true;
      down = down && ib_ignore_may_include_below (f->exclude, rel);
    }
  if (f->ignore && f->ignore_base)
    {
      cleanup_free char *crel = *f->ignore_base ? xasprintf ("%s/%s", f->ignore_base, rel)
                                                : xstrdup (rel);
      if (ib_ignore_excluded (f->ignore, crel))
        {
          skip = true;
          down = down && ib_ignore_may_include_below (f->ignore, crel);
        }
    }
  if (descend)
    *descend = skip && down;
  return skip;
}
