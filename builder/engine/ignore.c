/* builder/engine/ignore.c — .dockerignore and --exclude patterns (ignore.h).
 *
 * The semantics are moby/patternmatcher's (patternmatcher.go, the version
 * BuildKit vendors): New cleans and checks each pattern, compile() sorts
 * it into an exact, prefix, suffix or regexp match and writes the Go
 * regular expression of the last kind, match() applies it, and
 * MatchesOrParentMatches lets the last pattern that matches a path or one
 * of its parent directories decide.  This file follows those functions
 * step by step (their names are in the comments), down to Go's own
 * helpers where the result depends on them: path.Clean, strings.TrimSpace,
 * utf8.DecodeRune and filepath.Match's syntax check.
 *
 * The regular expression is compiled once (goregexp-int.h: Go's
 * regexp/syntax for the subset compile() can write) and run as Go's
 * regexp runs it, a Pike VM: a match costs O(path length x program size)
 * whatever the pattern; a path's parent directories are checked in the
 * same pass (the prefix before each '/' as a text of its own).  The old
 * matcher recursed on every `**` and took seconds for a few of them
 * (issue 38). */
#include "builder/engine/ignore.h"
#include "builder/engine/goregexp-int.h"
#include "common/util.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define RUNE_ERROR GRE_RUNE_ERROR

/* ---------- Go's helpers ---------- */


/* unicode.IsSpace */
static bool
is_space (uint32_t r)
{
  return (r >= '\t' && r <= '\r') || r == ' ' || r == 0x85 || r == 0xa0 || r == 0x1680
         || (r >= 0x2000 && r <= 0x200a) || r == 0x2028 || r == 0x2029 || r == 0x202f
         || r == 0x205f || r == 0x3000;
}

/* strings.TrimSpace on s[0..*n), in place. */
static void
trim_space (const char **s, size_t *n)
{
  const unsigned char *p = (const unsigned char *) *s;
  size_t len = *n, w;
  while (len && is_space (gre_decode_rune (p, len, &w)))
    p += w, len -= w;
  for (;;)
    {
      /* utf8.DecodeLastRune: a space is 1, 2 or 3 bytes long, and ends
       * the text only when decoding from its first byte gives it whole */
      bool cut = false;
      for (size_t k = 1; k <= 3 && k <= len && !cut; k++)
        {
          uint32_t r = gre_decode_rune (p + len - k, k, &w);
          if (w == k && is_space (r))
            len -= k, cut = true;
        }
      if (!cut)
        break;
    }
  *s = (const char *) p;
  *n = len;
}

/* path.Clean of s[0..n) (filepath.Clean on Linux); never NULL. */
static char *
go_clean (const char *s, size_t n)
{
  if (n == 0)
    return xstrdup (".");
  char *out = xmalloc (n + 1);
  bool rooted = s[0] == '/';
  size_t r = 0, w = 0, dotdot = 0;
  if (rooted)
    out[w++] = '/', r = 1, dotdot = 1;
  while (r < n)
    {
      if (s[r] == '/')
        r++;
      else if (s[r] == '.' && (r + 1 == n || s[r + 1] == '/'))
        r++;
      else if (s[r] == '.' && s[r + 1] == '.' && (r + 2 == n || s[r + 2] == '/'))
        {
          r += 2;
          if (w > dotdot)
            {
              w--;
              while (w > dotdot && out[w] != '/')
                w--;
            }
          else if (!rooted)
            {
              if (w > 0)
                out[w++] = '/';
              out[w++] = '.';
              out[w++] = '.';
              dotdot = w;
            }
        }
      else
        {
          if ((rooted && w != 1) || (!rooted && w != 0))
            out[w++] = '/';
          for (; r < n && s[r] != '/'; r++)
            out[w++] = s[r];
        }
    }
  if (w == 0)
    out[w++] = '.';
  out[w] = '\0';
  return out;
}

/* filepath.Match's getEsc: one character of a class, s[*i..n). */
static bool
glob_class_char (const char *s, size_t n, size_t *i)
{
  if (*i >= n || s[*i] == '-' || s[*i] == ']')
    return false;
  if (s[*i] == '\\' && ++*i >= n)
    return false;
  size_t w;
  uint32_t r = gre_decode_rune ((const unsigned char *) s + *i, n - *i, &w);
  if (r == RUNE_ERROR && w == 1)
    return false;
  *i += w;
  return *i < n;
}

/* Is the chunk s[0..n) well formed for filepath.Match's matchChunk? */
static bool
glob_chunk_valid (const char *s, size_t n)
{
  size_t i = 0;
  while (i < n)
    switch (s[i])
      {
      case '[':
        {
          i++;
          if (i < n && s[i] == '^')
            i++;
          for (size_t nrange = 0;; nrange++)
            {
              if (i < n && s[i] == ']' && nrange > 0)
                {
                  i++;
                  break;
                }
              if (!glob_class_char (s, n, &i))
                return false;
              if (s[i] == '-' && (++i, !glob_class_char (s, n, &i)))
                return false;
            }
          break;
        }
      case '\\':
        if (++i >= n)
          return false;
        i++;
        break;
      default:
        i++;
      }
  return true;
}

/* patternmatcher's New checks a pattern with filepath.Match(p, "."),
 * which fails exactly when one of its chunks (scanChunk) is malformed. */
static bool
glob_valid (const char *p)
{
  size_t n = strlen (p), i = 0;
  while (i < n)
    {
      while (i < n && p[i] == '*')
        i++;
      size_t start = i;
      bool inrange = false;
      for (; i < n; i++)
        {
          if (p[i] == '\\')
            {
              if (i + 1 < n)
                i++;
            }
          else if (p[i] == '[')
            inrange = true;
          else if (p[i] == ']')
            inrange = false;
          else if (p[i] == '*' && !inrange)
            break;
        }
      if (!glob_chunk_valid (p + start, i - start))
        return false;
    }
  return true;
}

/* ---------- compile(): the pattern's kind and regular expression ---------- */

typedef enum
{
  M_EXACT,  /* path == pattern */
  M_PREFIX, /* "P**": path starts with P */
  M_SUFFIX, /* "**S": path ends with S, or is S less its leading '/' */
  M_REGEXP,
  M_BAD, /* refused by New (or its regexp by regexp.Compile): matches nothing */
} mtype_t;

/* shouldEscape: the bitmap patternmatcher builds from ".+()|{}$" with
 * escapeBytes[b%8] |= 1 << (b/8) in an 8-byte array.  For '|', '{' and '}'
 * (b/8 == 15) the byte shift is 0, so those three are never escaped and
 * keep their regexp meaning ("a|b*" is an alternation); computed the same
 * way here rather than listed. */
static bool
should_escape (uint32_t b)
{
  static const char set[] = ".+()|{}$";
  if (b >= 0x80)
    return false;
  uint8_t bits[8] = { 0 };
  for (const char *c = set; *c; c++)
    bits[*c % 8] |= (uint8_t) (1u << (*c / 8));
  return (bits[b % 8] & (uint8_t) (1u << (b / 8))) != 0;
}

/* Pattern.compile with sl "/": the kind of match, and for M_REGEXP the
 * expression in `re` ("^...$"). */
static mtype_t
translate (const char *pat, ib_buf_t *re)
{
  const unsigned char *s = (const unsigned char *) pat;
  size_t n = strlen (pat), i = 0, w;
  mtype_t t = M_EXACT;
  if (n >= 3 && memcmp (s, "\xef\xbb\xbf", 3) == 0)
    i = 3; /* text/scanner skips a BOM opening its input */
  ib_buf_puts (re, "^");
  for (size_t k = 0; i < n; k++)
    {
      uint32_t ch = gre_decode_rune (s + i, n - i, &w);
      i += w;
      if (ch == '*' && i < n && s[i] == '*')
        {
          i++;
          if (i < n && s[i] == '/') /* "**" + "/" is "**" */
            i++;
          if (i == n)
            {
              if (t == M_EXACT)
                t = M_PREFIX;
              else
                ib_buf_puts (re, ".*"), t = M_REGEXP;
            }
          else
            ib_buf_puts (re, "(.*/)?"), t = M_REGEXP;
          if (k == 0)
            t = M_SUFFIX;
        }
      else if (ch == '*')
        ib_buf_puts (re, "[^/]*"), t = M_REGEXP;
      else if (ch == '?')
        ib_buf_puts (re, "[^/]"), t = M_REGEXP;
      else if (should_escape (ch))
        {
          ib_buf_puts (re, "\\");
          gre_put_rune (re, ch);
        }
      else if (ch == '\\')
        {
          ib_buf_puts (re, "\\");
          if (i < n)
            {
              gre_put_rune (re, gre_decode_rune (s + i, n - i, &w));
              i += w;
              t = M_REGEXP;
            }
        }
      else
        {
          gre_put_rune (re, ch);
          if (ch == '[' || ch == ']')
            t = M_REGEXP;
        }
    }
  if (t == M_REGEXP)
    ib_buf_puts (re, "$");
  return t;
}

/* ---------- patterns ---------- */

typedef struct pattern
{
  char *text; /* patternmatcher's cleanedPattern (without the '!') */
  size_t len;
  bool negate;
  mtype_t type;
  const char *why; /* M_BAD: Go's error */
  gre_prog_t *prog;    /* M_REGEXP */
} pattern_t;

struct ib_ignore
{
  pattern_t *v;
  size_t n;
  bool has_negation;
  size_t max_prog; /* the largest program's instructions */
};

/* New, for one pattern of `s`: trimmed, cleaned, '!', checked, compiled. */
static void
new_pattern (ib_ignore_t *ig, const char *s, size_t n)
{
  trim_space (&s, &n);
  if (n == 0)
    return;
  pattern_t pt = { .text = go_clean (s, n) };
  if (pt.text[0] == '!')
    {
      memmove (pt.text, pt.text + 1, strlen (pt.text));
      pt.negate = true;
      ig->has_negation = true;
      if (pt.text[0] == '\0')
        pt.type = M_BAD, pt.why = "illegal exclusion pattern: \"!\"";
    }
  pt.len = strlen (pt.text);
  if (pt.type != M_BAD && !glob_valid (pt.text))
    pt.type = M_BAD, pt.why = "syntax error in pattern";
  if (pt.type != M_BAD)
    {
      ib_buf_t re = { 0 };
      pt.type = translate (pt.text, &re);
      if (pt.type == M_REGEXP && (pt.prog = gre_compile (re.data, re.len)) == NULL)
        pt.type = M_BAD, pt.why = "syntax error in pattern";
      ib_buf_free (&re);
      if (pt.prog && gre_size (pt.prog) > ig->max_prog)
        ig->max_prog = gre_size (pt.prog);
    }
  ig->v = xrealloc (ig->v, (ig->n + 1) * sizeof (pattern_t));
  ig->v[ig->n++] = pt;
}

/* One line as ignorefile.ReadAll hands it to New: trimmed; after a '!'
 * trimmed again; cleaned and its leading '/' dropped (the context's root
 * is "/"); the '!' put back. */
static void
add (ib_ignore_t *ig, const char *line, size_t n)
{
  trim_space (&line, &n);
  if (n == 0)
    return;
  bool invert = line[0] == '!';
  if (invert)
    {
      line++, n--;
      trim_space (&line, &n);
    }
  cleanup_free char *p = n ? go_clean (line, n) : xstrdup ("");
  const char *q = (p[0] == '/' && p[1]) ? p + 1 : p;
  cleanup_free char *full = xasprintf ("%s%s", invert ? "!" : "", q);
  new_pattern (ig, full, strlen (full));
}

ib_ignore_t *
ib_ignore_parse (const char *text)
{
  ib_ignore_t *ig = xmalloc (sizeof *ig);
  /* ReadAll: bufio.ScanLines (a '\r' before each '\n' dropped), a BOM
   * before the first line dropped, a line starting with '#' (before any
   * trimming) a comment */
  for (const char *l = text; l && *l;)
    {
      const char *e = strchr (l, '\n');
      size_t n = e ? (size_t) (e - l) : strlen (l);
      const char *s = l;
      if (n && s[n - 1] == '\r')
        n--;
      if (l == text && n >= 3 && memcmp (s, "\xef\xbb\xbf", 3) == 0)
        s += 3, n -= 3;
      if (!(n && s[0] == '#'))
        add (ig, s, n);
      if (e == NULL)
        break;
      l = e + 1;
    }
  return ig;
}

/* --exclude values: BuildKit gives them to New as they are; they go
 * through ReadAll's steps here too (no comments), so a leading '/' is
 * the source's root as in .dockerignore. */
ib_ignore_t *
ib_ignore_from_patterns (char *const *patterns)
{
  ib_ignore_t *ig = xmalloc (sizeof *ig);
  for (char *const *p = patterns; p && *p; p++)
    add (ig, *p, strlen (*p));
  return ig;
}

void
ib_ignore_free (ib_ignore_t *ig)
{
  if (ig == NULL)
    return;
  for (size_t i = 0; i < ig->n; i++)
    {
      free (ig->v[i].text);
      gre_free (ig->v[i].prog);
    }
  free (ig->v);
  free (ig);
}

bool
ib_ignore_empty (const ib_ignore_t *ig)
{
  return ig == NULL || ig->n == 0;
}

int
ib_ignore_check (const ib_ignore_t *ig, ib_error_t *err)
{
  for (size_t i = 0; ig && i < ig->n; i++)
    if (ig->v[i].type == M_BAD)
      return ib_error_set (err, EINVAL, "pattern '%s%s': %s", ig->v[i].negate ? "!" : "",
                           ig->v[i].text, ig->v[i].why);
  return 0;
}

/* Pattern.match of s[0..n), or with `parents` of one of its parent
 * directories (the text before a '/'). */
static bool
pattern_matches (const pattern_t *p, gre_scratch_t *sc, const char *s, size_t n, bool parents)
{
  switch (p->type)
    {
    case M_EXACT:
      return p->len <= n && memcmp (s, p->text, p->len) == 0
             && (p->len == n || (parents && s[p->len] == '/'));
    case M_PREFIX:
      /* a parent that starts with P is a path that starts with P */
      return n >= p->len - 2 && memcmp (s, p->text, p->len - 2) == 0;
    case M_SUFFIX:
      {
        const char *sfx = p->text + 2;
        size_t m = p->len - 2;
        for (size_t end = 0; end <= n; end++)
          {
            if (end < n && (!parents || s[end] != '/'))
              continue;
            if (end >= m && memcmp (s + end - m, sfx, m) == 0)
              return true;
            if (m && sfx[0] == '/' && end == m - 1 && memcmp (s, sfx + 1, m - 1) == 0)
              return true;
          }
        return false;
      }
    case M_REGEXP:
      return gre_run (p->prog, sc, s, n, parents, false);
    case M_BAD:
      break;
    }
  return false;
}

/* `rel` as patterns see it: cleaned, no leading '/'; "" for the root. */
static char *
clean_rel (const char *rel)
{
  char *c = go_clean (rel, strlen (rel));
  size_t k = strspn (c, "/");
  memmove (c, c + k, strlen (c + k) + 1);
  if (strcmp (c, ".") == 0)
    c[0] = '\0';
  return c;
}

static void
scratch_freep (gre_scratch_t **sc)
{
  gre_scratch_free (*sc);
}
#define cleanup_scratch __attribute__ ((cleanup (scratch_freep)))

bool
ib_ignore_excluded (const ib_ignore_t *ig, const char *rel)
{
  if (ig == NULL || ig->n == 0)
    return false;
  cleanup_free char *c = clean_rel (rel);
  size_t n = strlen (c);
  if (n == 0)
    return false;
  cleanup_scratch gre_scratch_t *sc = gre_scratch_new (ig->max_prog);
  bool excluded = false;
  for (size_t i = 0; i < ig->n; i++)
    {
      /* MatchesOrParentMatches: an exclusion can only include what is
       * excluded so far, a pattern only exclude what is not */
      if (ig->v[i].negate != excluded)
        continue;
      if (pattern_matches (&ig->v[i], sc, c, n, true))
        excluded = !ig->v[i].negate;
    }
  return excluded;
}

/* Could p match some path below the directory s[0..n) ("DIR/...")? */
static bool
may_match_below (const pattern_t *p, gre_scratch_t *sc, const char *s, size_t n)
{
  switch (p->type)
    {
    case M_EXACT:
      return p->len > n + 1 && memcmp (p->text, s, n) == 0 && p->text[n] == '/';
    case M_PREFIX:
      {
        size_t m = p->len - 2 < n + 1 ? p->len - 2 : n + 1;
        return memcmp (p->text, s, m < n ? m : n) == 0 && (m <= n || p->text[n] == '/');
      }
    case M_SUFFIX:
      return true; /* DIR/x/SUFFIX ends with it */
    case M_REGEXP:
      {
        cleanup_free char *t = xasprintf ("%.*s/", (int) n, s);
        return gre_run (p->prog, sc, t, n + 1, false, true);
      }
    case M_BAD:
      break;
    }
  return false;
}

bool
ib_ignore_may_include_below (const ib_ignore_t *ig, const char *rel)
{
  if (ig == NULL || !ig->has_negation)
    return false;
  cleanup_free char *c = clean_rel (rel);
  size_t n = strlen (c);
  if (n == 0)
    return true;
  cleanup_scratch gre_scratch_t *sc = gre_scratch_new (ig->max_prog);
  /* Every pattern up to the last one matching rel (or a parent of it)
   * matches each path below rel in the same way, and that last one
   * excludes; only a later `!` pattern can include something below. */
  size_t first = 0;
  for (size_t i = ig->n; i-- > 0;)
    if (pattern_matches (&ig->v[i], sc, c, n, true))
      {
        first = i + 1;
        break;
      }
  for (size_t i = first; i < ig->n; i++)
    if (ig->v[i].negate && may_match_below (&ig->v[i], sc, c, n))
      return true;
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
