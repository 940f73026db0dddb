/* libFuzzer target: the .dockerignore matcher (builder/engine/ignore.c).
 *
 * Input: a .dockerignore text, a NUL byte, then a path (no NUL: the rest
 * is cut there).  Both are capped (1 KiB of patterns, 256 bytes of path),
 * which bounds one call of the matcher to 256 positions x about 150,000
 * instructions (1 KiB of `a{1000}`).  Checked:
 *
 *  - no crash, leak or undefined behaviour (ASan, UBSan), through every
 *    entry point: ib_ignore_parse, _from_patterns, _check, _excluded (the
 *    path and each of its parents), _may_include_below, ib_path_filter_skip;
 *  - bounded time: an input taking over 10 s of CPU aborts (the old
 *    recursive matcher took minutes for "**" + "/" ten times; this one
 *    is O(path x program));
 *  - the same answers as a small reference kept here, written again
 *    from moby/patternmatcher's patternmatcher.go (New, compile, match,
 *    MatchesOrParentMatches) and ignorefile.ReadAll, when the input lies
 *    in the subset the reference knows: lines of a, b, c, '.', '/', '*',
 *    '?', '!', simple classes ("[ab]", "[^c]") and '\' before one of
 *    "*?.[]", and a clean ASCII path of 48 bytes or less.  It matches by
 *    backtracking with a memo of (token, position): O(tokens x path^2).
 *    (The full syntax was compared with patternmatcher itself under Go:
 *    tests/unit/test_ignore.c.) */
#include "builder/engine/ignore.h"
#include "common/util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TEXT_MAX 1024
#define PATH_MAX_ 256
#define REF_PATH_MAX 48

/* ---------- the reference ---------- */

enum
{
  T_LIT,
  T_STAR,   /* [^/]* */
  T_QM,     /* [^/] */
  T_DSLASH, /* (.*\/)? */
  T_DEND,   /* .* */
  T_CLASS,
};

typedef struct tok
{
  int kind;
  char c;
  char set[8];
  int neg;
} tok_t;

typedef struct ref_pat
{
  char body[TEXT_MAX + 1];
  int negate, kind; /* kind: 0 exact, 1 prefix, 2 suffix, 3 regexp, 4 bad */
  tok_t t[TEXT_MAX];
  int nt;
} ref_pat_t;

/* path.Clean, written again: split, drop "" and ".", ".." pops (kept
 * at the start of a relative path, dropped at the root). */
static void
ref_clean (const char *in, char *out)
{
  const char *cs[TEXT_MAX + 1];
  size_t cl[TEXT_MAX + 1];
  int n = 0, dd = 0, rooted = in[0] == '/';
  for (const char *p = in; *p;)
    {
      size_t l = strcspn (p, "/");
      if (l == 0 || (l == 1 && p[0] == '.'))
        ;
      else if (l == 2 && p[0] == '.' && p[1] == '.')
        {
          if (n > dd)
            n--;
          else if (!rooted)
            cs[n] = "..", cl[n] = 2, n++, dd++;
        }
      else
        cs[n] = p, cl[n] = l, n++;
      p += l;
      if (*p)
        p++;
    }
  char *o = out;
  if (rooted)
    *o++ = '/';
  for (int i = 0; i < n; i++)
    {
      if (i)
        *o++ = '/';
      memcpy (o, cs[i], cl[i]);
      o += cl[i];
    }
  if (o == out)
    *o++ = '.';
  *o = '\0';
}

/* compile(): the kind, and the tokens of a regexp. */
static void
ref_compile (ref_pat_t *p)
{
  const char *s = p->body;
  int kind = 0;
  p->nt = 0;
  for (int i = 0; *s; i++)
    {
      tok_t t = { .kind = T_LIT, .c = *s };
      if (s[0] == '*' && s[1] == '*')
        {
          s += 2;
          if (*s == '/')
            s++;
          if (!*s)
            {
              if (kind == 0)
                kind = 1;
              else
                kind = 3, t.kind = T_DEND, p->t[p->nt++] = t;
            }
          else
            kind = 3, t.kind = T_DSLASH, p->t[p->nt++] = t;
          if (i == 0)
            kind = 2;
          continue;
        }
      if (*s == '*' || *s == '?')
        t.kind = *s == '*' ? T_STAR : T_QM, kind = 3, s++;
      else if (*s == '\\')
        t.c = s[1], kind = 3, s += 2;
      else if (*s == '[')
        {
          t.kind = T_CLASS, kind = 3, s++;
          if (*s == '^')
            t.neg = 1, s++;
          int k = 0;
          while (*s != ']')
            t.set[k++] = *s++;
          s++;
        }
      else
        s++;
      p->t[p->nt++] = t;
    }
  p->kind = kind;
}

static int
tok_one (const tok_t *t, char c)
{
  if (t->kind == T_QM)
    return c != '/';
  if (t->kind == T_LIT)
    return c == t->c;
  return (strchr (t->set, c) != NULL && c) != t->neg;
}

/* ^tokens$ against s[0..n), by backtracking, each (token, position)
 * answered once (memo: 0 unknown, 1 no, 2 yes; the text's end is fixed
 * for one call of ref_re_top). */
static signed char memo[TEXT_MAX + 1][REF_PATH_MAX + 2];
static const char *memo_end;

static int
ref_re (const tok_t *t, int nt, const char *s, size_t n)
{
  if (nt == 0)
    return n == 0;
  signed char *m = &memo[nt][memo_end - s];
  if (*m)
    return *m == 2;
  int r = 0;
  switch (t->kind)
    {
    case T_STAR:
      for (size_t k = 0; !r; k++)
        {
          r = ref_re (t + 1, nt - 1, s + k, n - k);
          if (k == n || s[k] == '/')
            break;
        }
      break;
    case T_DEND:
      r = memchr (s, '\n', n) == NULL && ref_re (t + 1, nt - 1, s + n, 0);
      break;
    case T_DSLASH:
      r = ref_re (t + 1, nt - 1, s, n);
      for (size_t k = 0; !r && k < n && s[k] != '\n'; k++)
        if (s[k] == '/')
          r = ref_re (t + 1, nt - 1, s + k + 1, n - k - 1);
      break;
    default:
      r = n > 0 && tok_one (t, s[0]) && ref_re (t + 1, nt - 1, s + 1, n - 1);
    }
  *m = r ? 2 : 1;
  return r;
}

static int
ref_re_top (const tok_t *t, int nt, const char *s, size_t n)
{
  for (int i = 0; i <= nt; i++)
    memset (memo[i], 0, n + 1);
  memo_end = s + n;
  return ref_re (t, nt, s, n);
}

/* match() of s[0..n) */
static int
ref_match (const ref_pat_t *p, const char *s, size_t n)
{
  size_t L = strlen (p->body);
  switch (p->kind)
    {
    case 0:
      return L == n && memcmp (s, p->body, n) == 0;
    case 1:
      return n >= L - 2 && memcmp (s, p->body, L - 2) == 0;
    case 2:
      {
        const char *sfx = p->body + 2;
        size_t m = L - 2;
        if (n >= m && memcmp (s + n - m, sfx, m) == 0)
          return 1;
        return sfx[0] == '/' && n == m - 1 && memcmp (s, sfx + 1, n) == 0;
      }
    case 3:
      return ref_re_top (p->t, p->nt, s, n);
    }
  return 0;
}

static int
in_subset_line (const char *l, size_t n)
{
  for (size_t i = 0; i < n; i++)
    {
      char c = l[i];
      if (strchr ("abc./!", c))
        continue;
      if (c == '*' || c == '?')
        continue;
      if (c == '\\' && i + 1 < n && strchr ("*?.[]", l[i + 1]))
        {
          i++;
          continue;
        }
      if (c == '[')
        {
          size_t j = i + 1;
          if (j < n && l[j] == '^')
            j++;
          size_t k = j;
          while (k < n && strchr ("abc", l[k]) && k - j < 6)
            k++;
          if (k == j || k >= n || l[k] != ']')
            return 0;
          i = k;
          continue;
        }
      return 0;
    }
  return 1;
}

/* The reference's answer for `text` (in the subset), or -1 when it
 * cannot tell. */
static int
ref_excluded (const char *text, const char *path)
{
  static ref_pat_t pats[64];
  int np = 0;
  size_t pn = strlen (path);
  if (pn == 0 || pn > REF_PATH_MAX)
    return -1;
  for (const char *c = path; *c; c++)
    if ((unsigned char) *c >= 0x80)
      return -1;
  /* a path as BuildKit passes it: already clean */
  char cp[PATH_MAX_ + 2];
  ref_clean (path, cp);
  if (strcmp (cp, path) != 0 || path[0] == '/' || path[0] == '.')
    return -1;
  for (const char *l = text; *l;)
    {
      const char *e = strchr (l, '\n');
      size_t n = e ? (size_t) (e - l) : strlen (l);
      if (!in_subset_line (l, n))
        return -1;
      if (n > 0)
        {
          if (np == 64)
            return -1;
          ref_pat_t *p = &pats[np++];
          /* ReadAll: '!', the rest cleaned, a leading '/' dropped, '!'
           * put back; New: cleaned again, then a leading '!' is the
           * exception ("./!a" is one too) */
          char raw[TEXT_MAX + 1], c1[TEXT_MAX + 2], c2[TEXT_MAX + 4], c3[TEXT_MAX + 4];
          memcpy (raw, l, n);
          raw[n] = '\0';
          int invert = raw[0] == '!';
          ref_clean (raw + invert, c1);
          if (!raw[invert])
            c1[0] = '\0';
          snprintf (c2, sizeof c2, "%s%s", invert ? "!" : "", c1[0] == '/' && c1[1] ? c1 + 1 : c1);
          ref_clean (c2, c3);
          p->negate = c3[0] == '!';
          if (p->negate && !c3[1])
            return -1; /* "!" alone: New refuses it */
          snprintf (p->body, sizeof p->body, "%s", c3 + p->negate);
          ref_compile (p);
        }
      if (!e)
        break;
      l = e + 1;
    }
  /* MatchesOrParentMatches: the last pattern matching the path or a
   * parent directory decides */
  int excluded = 0;
  for (int i = 0; i < np; i++)
    {
      int m = ref_match (&pats[i], path, pn);
      for (size_t k = 1; !m && k < pn; k++)
        if (path[k] == '/')
          m = ref_match (&pats[i], path, k);
      if (m)
        excluded = !pats[i].negate;
    }
  return excluded;
}

/* ---------- the target ---------- */

static double
cpu_seconds (void)
{
  struct timespec t;
  clock_gettime (CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double) t.tv_sec + (double) t.tv_nsec / 1e9;
}

/* Inputs whose first byte is '~', below '\t' or one UTF-8 never uses
 * (0xf5-0xff) are spelt in the reference's subset, so that most of those
 * are compared (the coverage of the reference's code keeps such inputs
 * in the corpus): each byte of the text picks a
 * token, each byte of the path a, b, c or '/' (runs of '/' and the ends
 * trimmed, as a clean path). */
static void
to_subset (char **text, char **path)
{
  static const char *const tok[] = { "a", "b", "c", ".", "/", "*", "?", "!", "\n", "[ab]", "[^c]", "\\*", "**/", "**", "/", "a" };
  ib_buf_t t = { 0 }, p = { 0 };
  for (const char *c = *text + 1; *c; c++)
    ib_buf_puts (&t, tok[(unsigned char) *c % 16]);
  for (const char *c = *path; *c; c++)
    {
      char ch = "abc/"[(unsigned char) *c % 4];
      if (ch == '/' && (p.len == 0 || p.data[p.len - 1] == '/'))
        continue;
      ib_buf_append (&p, &ch, 1);
    }
  while (p.len && p.data[p.len - 1] == '/')
    p.len--;
  ib_buf_append (&t, "", 0);
  ib_buf_append (&p, "", 0);
  if (t.len > TEXT_MAX)
    t.data[TEXT_MAX] = '\0';
  if (p.len > REF_PATH_MAX)
    p.data[REF_PATH_MAX] = '\0';
  p.data[p.len] = '\0';
  free (*text);
  free (*path);
  *text = ib_buf_steal (&t);
  *path = ib_buf_steal (&p);
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  const uint8_t *nul = memchr (data, 0, size);
  size_t tn = nul ? (size_t) (nul - data) : size;
  const uint8_t *pd = nul ? nul + 1 : data + size;
  size_t pn = nul ? size - tn - 1 : 0;
  const uint8_t *nul2 = memchr (pd, 0, pn);
  if (nul2)
    pn = (size_t) (nul2 - pd);
  if (tn > TEXT_MAX)
    tn = TEXT_MAX;
  if (pn > PATH_MAX_)
    pn = PATH_MAX_;
  char *text = xstrndup ((const char *) data, tn);
  char *path = xstrndup ((const char *) pd, pn);
  if (tn && (text[0] == '~' || (unsigned char) text[0] < '\t' || (unsigned char) text[0] >= 0xf5))
    {
      to_subset (&text, &path);
      pn = strlen (path);
    }
  double t0 = cpu_seconds ();

  ib_ignore_t *ig = ib_ignore_parse (text);
  ib_error_t err = NULL;
  bool bad = ib_ignore_check (ig, &err) < 0;
  if (bad != (err != NULL))
    abort ();
  ib_error_free (&err);
  bool ex = ib_ignore_excluded (ig, path);
  /* each parent, as a walker asks on its way down */
  for (size_t k = 1; k < pn; k++)
    if (path[k] == '/')
      {
        char *par = xstrndup (path, k);
        if (ib_ignore_excluded (ig, par))
          (void) ib_ignore_may_include_below (ig, par);
        free (par);
      }
  (void) ib_ignore_may_include_below (ig, path);

  /* the same lines as --exclude values, and both through a filter */
  char **lines = NULL;
  for (char *l = text, *e; l; l = e ? e + 1 : NULL)
    {
      e = strchr (l, '\n');
      char *one = e ? xstrndup (l, (size_t) (e - l)) : xstrdup (l);
      ib_strv_push (&lines, one);
      free (one);
    }
  ib_ignore_t *exl = ib_ignore_from_patterns (lines);
  ib_path_filter_t f = { .ignore = ig, .ignore_base = "", .exclude = exl };
  bool descend;
  bool skip = ib_path_filter_skip (&f, path, &descend);
  if (ex && *path && !skip)
    abort (); /* the filter skips what .dockerignore excludes */
  if (descend && !skip)
    abort ();
  ib_strv_free (lines);
  ib_ignore_free (exl);

  /* the reference, where it knows the input */
  int want = ref_excluded (text, path);
  if (want >= 0 && !bad && want != ex)
    {
      fprintf (stderr, "fuzz_ignore: text '%s' path '%s': reference %d, matcher %d\n", text, path,
               want, ex);
      abort ();
    }
  ib_ignore_free (ig);
  if (cpu_seconds () - t0 > 10.0)
    {
      fprintf (stderr, "fuzz_ignore: %.1f s of CPU for one input\n", cpu_seconds () - t0);
      abort ();
    }
  free (text);
  free (path);
  return 0;
}
