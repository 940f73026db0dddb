/* builder/engine/goregexp.c — Go's regexp subset for .dockerignore
 * patterns, compiled once and run without backtracking
 * (goregexp-int.h): regexp/syntax's parser for what patternmatcher's
 * compile() can write, the program, and the Pike VM that runs it. */
#include "builder/engine/goregexp-int.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NONE UINT32_MAX
#define RUNE_ERROR GRE_RUNE_ERROR
#define RUNE_MAX 0x10FFFFu
/* Go's regexp/syntax refuses a program larger than this ("expression too
 * large": maxSize, 128 MiB of 40-byte instructions); so does imgbuild,
 * counting its own instructions. */
#define PROG_MAX 3355443u
/* and nesting deeper than maxHeight */
#define DEPTH_MAX 1000

/* ---------- runes, as Go's unicode/utf8 ---------- */

/* The rune at s[0..n) (n > 0) and its width, as utf8.DecodeRune: an
 * invalid, overlong, surrogate or short sequence is U+FFFD of width 1. */
uint32_t
gre_decode_rune (const unsigned char *s, size_t n, size_t *w)
{
  unsigned c = s[0];
  *w = 1;
  if (c < 0x80)
    return c;
  size_t need;
  uint32_t r;
  unsigned lo = 0x80, hi = 0xbf;
  if (c >= 0xc2 && c <= 0xdf)
    need = 1, r = c & 0x1f;
  else if (c >= 0xe0 && c <= 0xef)
    {
      need = 2, r = c & 0x0f;
      lo = c == 0xe0 ? 0xa0 : 0x80;
      hi = c == 0xed ? 0x9f : 0xbf;
    }
  else if (c >= 0xf0 && c <= 0xf4)
    {
      need = 3, r = c & 0x07;
      lo = c == 0xf0 ? 0x90 : 0x80;
      hi = c == 0xf4 ? 0x8f : 0xbf;
    }
  else
    return RUNE_ERROR;
  if (n < need + 1)
    return RUNE_ERROR;
  for (size_t i = 1; i <= need; i++)
    {
      unsigned b = s[i];
      if (b < (i == 1 ? lo : 0x80) || b > (i == 1 ? hi : 0xbf))
        return RUNE_ERROR;
      r = (r << 6) | (b & 0x3f);
    }
  *w = need + 1;
  return r;
}

void
gre_put_rune (ib_buf_t *b, uint32_t r)
{
  unsigned char t[4];
  size_t n;
  if (r < 0x80)
    t[0] = (unsigned char) r, n = 1;
  else if (r < 0x800)
    t[0] = (unsigned char) (0xc0 | (r >> 6)), t[1] = (unsigned char) (0x80 | (r & 0x3f)), n = 2;
  else if (r < 0x10000)
    {
      t[0] = (unsigned char) (0xe0 | (r >> 12));
      t[1] = (unsigned char) (0x80 | ((r >> 6) & 0x3f));
      t[2] = (unsigned char) (0x80 | (r & 0x3f));
      n = 3;
    }
  else
    {
      t[0] = (unsigned char) (0xf0 | (r >> 18));
      t[1] = (unsigned char) (0x80 | ((r >> 12) & 0x3f));
      t[2] = (unsigned char) (0x80 | ((r >> 6) & 0x3f));
      t[3] = (unsigned char) (0x80 | (r & 0x3f));
      n = 4;
    }
  ib_buf_append (b, t, n);
}

/* ---------- regexp/syntax: the parser ---------- */

enum
{
  N_EMPTY,
  N_RUNE,  /* val */
  N_CLASS, /* val: class index */
  N_ANY,   /* any character but '\n' (Go's `.` without the s flag) */
  N_ASSERT,
  N_CAT, /* sub: first child, linked by next */
  N_ALT,
  N_REP, /* sub{min,max}, max -1: no bound */
};

enum
{
  A_BEGIN,    /* ^ \A (Go's OneLine flag: the text's start only) */
  A_END,      /* $ \z */
  A_WORD,     /* \b (ASCII word characters) */
  A_NOT_WORD, /* \B */
};

typedef struct node
{
  uint8_t kind, aux;
  uint32_t val, sub, next;
  int32_t min, max;
} node_t;

typedef struct ranges
{
  uint32_t *v; /* [lo, hi] pairs */
  size_t n, cap;
} ranges_t;

typedef struct re_parser
{
  const char *s;
  size_t n, i;
  node_t *nodes;
  size_t nn, ncap;
  ranges_t all;           /* every class's ranges, one after another */
  uint32_t (*cls)[2];     /* a class: its first pair in `all`, its pair count */
  size_t ncls, clscap;
  ranges_t tmp;           /* the class being parsed */
  int depth;
  bool bad;
} re_parser_t;

static uint32_t
new_node (re_parser_t *p, uint8_t kind)
{
  if (p->nn == p->ncap)
    {
      p->ncap = p->ncap ? 2 * p->ncap : 16;
      p->nodes = xrealloc (p->nodes, p->ncap * sizeof *p->nodes);
    }
  p->nodes[p->nn] = (node_t) { .kind = kind, .sub = NONE, .next = NONE };
  return (uint32_t) p->nn++;
}

static uint32_t
rune_node (re_parser_t *p, uint32_t r)
{
  uint32_t x = new_node (p, N_RUNE);
  p->nodes[x].val = r;
  return x;
}

static uint32_t
assert_node (re_parser_t *p, uint8_t a)
{
  uint32_t x = new_node (p, N_ASSERT);
  p->nodes[x].aux = a;
  return x;
}

static void
range_add (ranges_t *r, uint32_t lo, uint32_t hi)
{
  if (r->n + 2 > r->cap)
    {
      r->cap = r->cap ? 2 * r->cap : 16;
      r->v = xrealloc (r->v, r->cap * sizeof *r->v);
    }
  r->v[r->n++] = lo;
  r->v[r->n++] = hi;
}

static int
range_cmp (const void *a, const void *b)
{
  uint32_t x = *(const uint32_t *) a, y = *(const uint32_t *) b;
  return x < y ? -1 : x > y;
}

/* The parsed class in p->tmp, sorted, merged and (neg) complemented over
 * every rune, stored as a class of its own: its N_CLASS node. */
static uint32_t
class_node (re_parser_t *p, bool neg)
{
  ranges_t *t = &p->tmp;
  qsort (t->v, t->n / 2, 2 * sizeof *t->v, range_cmp);
  size_t m = 0;
  for (size_t k = 0; k < t->n; k += 2)
    if (m && t->v[k] <= t->v[m - 1] + 1)
      t->v[m - 1] = t->v[k + 1] > t->v[m - 1] ? t->v[k + 1] : t->v[m - 1];
    else
      t->v[m++] = t->v[k], t->v[m++] = t->v[k + 1];
  t->n = m;
  size_t off = p->all.n / 2;
  if (!neg)
    for (size_t k = 0; k < m; k += 2)
      range_add (&p->all, t->v[k], t->v[k + 1]);
  else
    {
      uint32_t next = 0;
      for (size_t k = 0; k < m; k += 2)
        {
          if (t->v[k] > next)
            range_add (&p->all, next, t->v[k] - 1);
          next = t->v[k + 1] + 1;
        }
      if (next <= RUNE_MAX)
        range_add (&p->all, next, RUNE_MAX);
    }
  if (p->ncls == p->clscap)
    {
      p->clscap = p->clscap ? 2 * p->clscap : 8;
      p->cls = xrealloc (p->cls, p->clscap * sizeof *p->cls);
    }
  p->cls[p->ncls][0] = (uint32_t) off;
  p->cls[p->ncls][1] = (uint32_t) (p->all.n / 2 - off);
  uint32_t x = new_node (p, N_CLASS);
  p->nodes[x].val = (uint32_t) p->ncls++;
  return x;
}

/* A class of regexp/syntax's perlGroup and posixGroup: sorted [lo, hi]
 * pairs (perl_groups.go). */
typedef struct group
{
  const char *name;
  uint8_t n;
  uint32_t r[8];
} group_t;

static const group_t posix_groups[] = {
  { "alnum", 6, { '0', '9', 'A', 'Z', 'a', 'z' } },
  { "alpha", 4, { 'A', 'Z', 'a', 'z' } },
  { "ascii", 2, { 0x00, 0x7f } },
  { "blank", 4, { '\t', '\t', ' ', ' ' } },
  { "cntrl", 4, { 0x00, 0x1f, 0x7f, 0x7f } },
  { "digit", 2, { '0', '9' } },
  { "graph", 2, { '!', '~' } },
  { "lower", 2, { 'a', 'z' } },
  { "print", 2, { ' ', '~' } },
  { "punct", 8, { '!', '/', ':', '@', '[', '`', '{', '~' } },
  { "space", 4, { '\t', '\r', ' ', ' ' } },
  { "upper", 2, { 'A', 'Z' } },
  { "word", 8, { '0', '9', 'A', 'Z', '_', '_', 'a', 'z' } },
  { "xdigit", 6, { '0', '9', 'A', 'F', 'a', 'f' } },
};

/* \d \s \w, and (upper case) their complements */
static const group_t *
perl_group (char c)
{
  static const group_t d = { "d", 2, { '0', '9' } };
  static const group_t s = { "s", 6, { '\t', '\n', '\f', '\r', ' ', ' ' } };
  static const group_t w = { "w", 8, { '0', '9', 'A', 'Z', '_', '_', 'a', 'z' } };
  switch (c)
    {
    case 'd':
    case 'D':
      return &d;
    case 's':
    case 'S':
      return &s;
    case 'w':
    case 'W':
      return &w;
    }
  return NULL;
}

/* "[:name:]" or "[:^name:]" (the whole text from "[:" to ":]") */
static const group_t *
posix_group (const char *name, size_t n, bool *neg)
{
  if (n < 5 || memcmp (name, "[:", 2) != 0 || memcmp (name + n - 2, ":]", 2) != 0)
    return NULL;
  name += 2, n -= 4;
  *neg = n && name[0] == '^';
  if (*neg)
    name++, n--;
  for (size_t k = 0; k < sizeof posix_groups / sizeof posix_groups[0]; k++)
    if (strlen (posix_groups[k].name) == n && memcmp (posix_groups[k].name, name, n) == 0)
      return &posix_groups[k];
  return NULL;
}

/* Add g's ranges to p->tmp, or (neg) their complement. */
static void
add_group (re_parser_t *p, const group_t *g, bool neg)
{
  uint32_t next = 0;
  for (size_t k = 0; k < g->n; k += 2)
    if (!neg)
      range_add (&p->tmp, g->r[k], g->r[k + 1]);
    else
      {
        if (g->r[k] > next)
          range_add (&p->tmp, next, g->r[k] - 1);
        next = g->r[k + 1] + 1;
      }
  if (neg)
    range_add (&p->tmp, next, RUNE_MAX);
}

static int
unhex (uint32_t c)
{
  if (c >= '0' && c <= '9')
    return (int) (c - '0');
  if (c >= 'a' && c <= 'f')
    return (int) (c - 'a' + 10);
  if (c >= 'A' && c <= 'F')
    return (int) (c - 'A' + 10);
  return -1;
}

static uint32_t
next_rune (re_parser_t *p)
{
  size_t w;
  uint32_t r = gre_decode_rune ((const unsigned char *) p->s + p->i, p->n - p->i, &w);
  p->i += w;
  return r;
}

/* parseEscape: the character a `\` at p->i stands for; NONE (and bad)
 * for an escape Go refuses. */
static uint32_t
parse_escape (re_parser_t *p)
{
  if (++p->i >= p->n)
    return p->bad = true, NONE;
  uint32_t c = next_rune (p);
  if (c < 0x80 && !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')))
    return c; /* punctuation stands for itself */
  const char *s = p->s;
  switch (c)
    {
    case '1' ... '7':
      if (p->i >= p->n || s[p->i] < '0' || s[p->i] > '7')
        break; /* a backreference: not supported */
      /* fall through */
    case '0':
      {
        uint32_t r = c - '0';
        for (int k = 1; k < 3 && p->i < p->n && s[p->i] >= '0' && s[p->i] <= '7'; k++)
          r = r * 8 + (uint32_t) (s[p->i++] - '0');
        return r;
      }
    case 'x':
      {
        if (p->i >= p->n)
          break;
        c = next_rune (p);
        if (c == '{')
          {
            uint32_t r = 0;
            int nhex = 0;
            for (;;)
              {
                if (p->i >= p->n)
                  return p->bad = true, NONE;
                c = next_rune (p);
                if (c == '}')
                  break;
                int v = unhex (c);
                if (v < 0 || (r = r * 16 + (uint32_t) v) > RUNE_MAX)
                  return p->bad = true, NONE;
                nhex++;
              }
            if (nhex == 0)
              break;
            return r;
          }
        int x = unhex (c), y = p->i < p->n ? unhex (next_rune (p)) : -1;
        if (x < 0 || y < 0)
          break;
        return (uint32_t) (x * 16 + y);
      }
    case 'a':
      return '\a';
    case 'f':
      return '\f';
    case 'n':
      return '\n';
    case 'r':
      return '\r';
    case 't':
      return '\t';
    case 'v':
      return '\v';
    }
  p->bad = true;
  return NONE;
}

/* parseClass, at p->i on '[' (Go's Perl flags: ClassNL, PerlX). */
static uint32_t
parse_class (re_parser_t *p)
{
  const char *s = p->s;
  size_t n = p->n;
  p->i++;
  bool neg = p->i < n && s[p->i] == '^';
  if (neg)
    p->i++;
  p->tmp.n = 0;
  for (bool first = true; p->i >= n || s[p->i] != ']' || first; first = false)
    {
      if (n - p->i > 2 && s[p->i] == '[' && s[p->i + 1] == ':')
        {
          /* "[:" up to the first ":]" anywhere after it, as Go looks */
          const char *e = memmem (s + p->i + 2, n - p->i - 2, ":]", 2);
          if (e)
            {
              bool gneg;
              const group_t *g = posix_group (s + p->i, (size_t) (e + 2 - (s + p->i)), &gneg);
              if (g == NULL)
                return p->bad = true, NONE;
              add_group (p, g, gneg);
              p->i = (size_t) (e + 2 - s);
              continue;
            }
        }
      if (n - p->i >= 2 && s[p->i] == '\\' && (s[p->i + 1] == 'p' || s[p->i + 1] == 'P'))
        return p->bad = true, NONE; /* Unicode classes: not supported (ignore.h) */
      if (n - p->i >= 2 && s[p->i] == '\\' && perl_group (s[p->i + 1]))
        {
          add_group (p, perl_group (s[p->i + 1]), s[p->i + 1] <= 'Z');
          p->i += 2;
          continue;
        }
      if (p->i >= n)
        return p->bad = true, NONE; /* missing ] */
      uint32_t lo = s[p->i] == '\\' ? parse_escape (p) : next_rune (p), hi = lo;
      if (p->bad)
        return NONE;
      if (n - p->i >= 2 && s[p->i] == '-' && s[p->i + 1] != ']')
        {
          p->i++;
          hi = s[p->i] == '\\' ? parse_escape (p) : next_rune (p);
          if (p->bad || hi < lo)
            return p->bad = true, NONE;
        }
      range_add (&p->tmp, lo, hi);
    }
  p->i++;
  return class_node (p, neg);
}

/* parseRepeat: "{n}", "{n,}", "{n,m}" at p->i; false (a literal '{')
 * when it is not one.  A number over 1e8 is -1. */
static bool
parse_repeat (re_parser_t *p, int32_t *min, int32_t *max, size_t *end)
{
  const char *s = p->s;
  size_t i = p->i + 1, n = p->n;
  int32_t *dst[2] = { min, max };
  for (int k = 0; k < 2; k++)
    {
      if (k == 1)
        {
          if (i >= n)
            return false;
          if (s[i] != ',')
            {
              *max = *min;
              break;
            }
          if (++i >= n)
            return false;
          if (s[i] == '}')
            {
              *max = -1;
              break;
            }
        }
      if (i >= n || s[i] < '0' || s[i] > '9' || (s[i] == '0' && i + 1 < n && s[i + 1] >= '0' && s[i + 1] <= '9'))
        return false;
      int64_t v = 0;
      for (; i < n && s[i] >= '0' && s[i] <= '9'; i++)
        if (v >= 0)
          v = v >= 100000000 ? -1 : v * 10 + (s[i] - '0');
      *dst[k] = (int32_t) v;
      if (k == 1 && v < 0)
        *min = -1;
    }
  if (i >= n || s[i] != '}')
    return false;
  *end = i + 1;
  return true;
}

static uint32_t parse_alt (re_parser_t *p);

/* Turn the item `x` into x{min,max} (in place, so lists keep it). */
static void
make_repeat (re_parser_t *p, uint32_t x, int32_t min, int32_t max)
{
  uint32_t inner = new_node (p, N_EMPTY);
  p->nodes[inner] = p->nodes[x];
  p->nodes[inner].next = NONE;
  p->nodes[x] = (node_t) { .kind = N_REP, .sub = inner, .next = NONE, .min = min, .max = max };
}

/* `\` outside a class, at p->i: its item, or NONE after appending a
 * \Q...\E text's characters itself (through `add`). */
static uint32_t
parse_backslash (re_parser_t *p, void (*add) (re_parser_t *, uint32_t, void *), void *ud)
{
  const char *s = p->s;
  if (p->n - p->i >= 2)
    switch (s[p->i + 1])
      {
      case 'A':
        p->i += 2;
        return assert_node (p, A_BEGIN);
      case 'b':
        p->i += 2;
        return assert_node (p, A_WORD);
      case 'B':
        p->i += 2;
        return assert_node (p, A_NOT_WORD);
      case 'z':
        p->i += 2;
        return assert_node (p, A_END);
      case 'C':
        return p->bad = true, NONE;
      case 'Q':
        {
          const char *e = memmem (s + p->i + 2, p->n - p->i - 2, "\\E", 2);
          size_t end = e ? (size_t) (e - s) : p->n;
          p->i += 2;
          while (p->i < end)
            add (p, rune_node (p, next_rune (p)), ud);
          p->i = e ? end + 2 : p->n;
          return NONE;
        }
      case 'p':
      case 'P':
        return p->bad = true, NONE; /* Unicode classes: not supported (ignore.h) */
      default:
        if (perl_group (s[p->i + 1]))
          {
            p->tmp.n = 0;
            add_group (p, perl_group (s[p->i + 1]), false);
            bool neg = s[p->i + 1] <= 'Z';
            p->i += 2;
            return class_node (p, neg);
          }
      }
  uint32_t r = parse_escape (p);
  return p->bad ? NONE : rune_node (p, r);
}

typedef struct cat
{
  uint32_t head, tail;
  size_t n;
} cat_t;

static void
cat_add (re_parser_t *p, uint32_t x, void *ud)
{
  cat_t *c = ud;
  if (c->tail == NONE)
    c->head = x;
  else
    p->nodes[c->tail].next = x;
  c->tail = x;
  c->n++;
}

/* A concatenation, up to '|', ')' or the end: one node. */
static uint32_t
parse_cat (re_parser_t *p)
{
  cat_t c = { NONE, NONE, 0 };
  bool last_repeat = false;
  while (!p->bad && p->i < p->n && p->s[p->i] != '|' && p->s[p->i] != ')')
    {
      const char *s = p->s;
      uint32_t item = NONE;
      int32_t min = 0, max = 0;
      size_t after = p->i + 1;
      bool repeat = false;
      switch (s[p->i])
        {
        case '(':
          if ((p->i + 1 < p->n && s[p->i + 1] == '?') || ++p->depth > DEPTH_MAX)
            return p->bad = true, NONE; /* flags and named groups: never written */
          p->i++;
          item = parse_alt (p);
          if (p->bad || p->i >= p->n || s[p->i] != ')')
            return p->bad = true, NONE; /* missing ) */
          p->i++;
          p->depth--;
          break;
        case '*':
          repeat = true, min = 0, max = -1;
          break;
        case '+':
          repeat = true, min = 1, max = -1;
          break;
        case '?':
          repeat = true, min = 0, max = 1;
          break;
        case '{':
          if (parse_repeat (p, &min, &max, &after))
            {
              if (min < 0 || min > 1000 || max > 1000 || (max >= 0 && min > max))
                return p->bad = true, NONE;
              repeat = true;
            }
          else
            item = rune_node (p, '{'), p->i++;
          break;
        case '^':
          item = assert_node (p, A_BEGIN), p->i++;
          break;
        case '$':
          item = assert_node (p, A_END), p->i++;
          break;
        case '.':
          item = new_node (p, N_ANY), p->i++;
          break;
        case '[':
          item = parse_class (p);
          break;
        case '\\':
          item = parse_backslash (p, cat_add, &c);
          break;
        default:
          item = rune_node (p, next_rune (p));
        }
      if (p->bad)
        return NONE;
      if (repeat)
        {
          /* Go: no argument (the start, after '(' or '|'), or stacked
           * repetition operators ("a**") are errors; "*?" is non-greedy,
           * which matches the same paths */
          p->i = after;
          if (p->i < p->n && s[p->i] == '?')
            p->i++;
          if (c.tail == NONE || last_repeat)
            return p->bad = true, NONE;
          make_repeat (p, c.tail, min, max);
        }
      else if (item != NONE)
        cat_add (p, item, &c);
      last_repeat = repeat;
    }
  if (c.n == 0)
    return new_node (p, N_EMPTY);
  if (c.n == 1)
    return c.head;
  uint32_t x = new_node (p, N_CAT);
  p->nodes[x].sub = c.head;
  return x;
}

static uint32_t
parse_alt (re_parser_t *p)
{
  uint32_t first = parse_cat (p), last = first;
  size_t n = 1;
  while (!p->bad && p->i < p->n && p->s[p->i] == '|')
    {
      p->i++;
      uint32_t x = parse_cat (p);
      if (p->bad)
        return NONE;
      p->nodes[last].next = x;
      last = x;
      n++;
    }
  if (p->bad || n == 1)
    return first;
  uint32_t a = new_node (p, N_ALT);
  p->nodes[a].sub = first;
  return a;
}

/* ---------- the program (Thompson NFA) ---------- */

enum
{
  OP_RUNE,  /* x: the rune */
  OP_CLASS, /* x: the class */
  OP_ANY,   /* any character but '\n' */
  OP_MATCH,
  OP_SPLIT, /* to x and y */
  OP_JMP,   /* to x */
  OP_ASSERT /* aux: A_*; then the next instruction */
};

typedef struct inst
{
  uint8_t op, aux;
  uint32_t x, y;
} inst_t;

typedef struct prog
{
  inst_t *v;
  size_t n, cap;
  uint32_t *ranges;   /* the classes' [lo, hi] pairs */
  uint32_t (*cls)[2]; /* a class's first pair and pair count */
  bool anchored;      /* every thread passes `^` first: none starts after 0 */
  bool bad;           /* over PROG_MAX */
  char *suffix;       /* NULL, or bytes every matched text ends with */
} prog_t;

static uint32_t
emit (prog_t *g, uint8_t op, uint32_t x)
{
  if (g->n >= PROG_MAX)
    {
      g->bad = true;
      return 0;
    }
  if (g->n == g->cap)
    {
      g->cap = g->cap ? 2 * g->cap : 32;
      g->v = xrealloc (g->v, g->cap * sizeof *g->v);
    }
  g->v[g->n] = (inst_t) { .op = op, .x = x };
  return (uint32_t) g->n++;
}

static void emit_node (prog_t *g, const re_parser_t *p, uint32_t x);

/* x? */
static void
emit_quest (prog_t *g, const re_parser_t *p, uint32_t x)
{
  uint32_t l = emit (g, OP_SPLIT, 0);
  if (g->bad)
    return;
  g->v[l].x = l + 1;
  emit_node (g, p, x);
  if (!g->bad)
    g->v[l].y = (uint32_t) g->n;
}

/* x* */
static void
emit_star (prog_t *g, const re_parser_t *p, uint32_t x)
{
  uint32_t l = emit (g, OP_SPLIT, 0);
  if (g->bad)
    return;
  g->v[l].x = l + 1;
  emit_node (g, p, x);
  emit (g, OP_JMP, l);
  if (!g->bad)
    g->v[l].y = (uint32_t) g->n;
}

static void
emit_node (prog_t *g, const re_parser_t *p, uint32_t x)
{
  const node_t *nd = &p->nodes[x];
  switch (nd->kind)
    {
    case N_EMPTY:
      break;
    case N_RUNE:
      emit (g, OP_RUNE, nd->val);
      break;
    case N_CLASS:
      emit (g, OP_CLASS, nd->val);
      break;
    case N_ANY:
      emit (g, OP_ANY, 0);
      break;
    case N_ASSERT:
      {
        uint32_t l = emit (g, OP_ASSERT, 0);
        if (!g->bad)
          g->v[l].aux = nd->aux;
        break;
      }
    case N_CAT:
      for (uint32_t c = nd->sub; c != NONE && !g->bad; c = p->nodes[c].next)
        emit_node (g, p, c);
      break;
    case N_ALT:
      {
        /* SPLIT to each alternative but the last, each JMPing to the end
         * (the JMPs chained through x until the end is known) */
        uint32_t jmps = NONE;
        for (uint32_t c = nd->sub; c != NONE && !g->bad; c = p->nodes[c].next)
          {
            if (p->nodes[c].next == NONE)
              {
                emit_node (g, p, c);
                break;
              }
            uint32_t l = emit (g, OP_SPLIT, 0);
            if (g->bad)
              break;
            g->v[l].x = l + 1;
            emit_node (g, p, c);
            uint32_t j = emit (g, OP_JMP, jmps);
            jmps = j;
            if (!g->bad)
              g->v[l].y = (uint32_t) g->n;
          }
        while (!g->bad && jmps != NONE)
          {
            uint32_t nx = g->v[jmps].x;
            g->v[jmps].x = (uint32_t) g->n;
            jmps = nx;
          }
        break;
      }
    case N_REP:
      /* x{min,max}: min copies, then x* (no bound) or max - min x? */
      for (int32_t k = 0; k < nd->min && !g->bad; k++)
        emit_node (g, p, nd->sub);
      if (nd->max < 0)
        emit_star (g, p, nd->sub);
      else
        for (int32_t k = nd->min; k < nd->max && !g->bad; k++)
          emit_quest (g, p, nd->sub);
      break;
    }
}

/* Can a thread from instruction 0 read a character or match without
 * passing `^` (which holds at the text's start only)? */
static bool
reaches_unanchored (const prog_t *g)
{
  cleanup_free uint8_t *seen = xmalloc (g->n);
  cleanup_free uint32_t *stack = xmalloc ((2 * g->n + 1) * sizeof *stack);
  size_t sp = 0;
  stack[sp++] = 0;
  while (sp)
    {
      uint32_t pc = stack[--sp];
      if (seen[pc])
        continue;
      seen[pc] = 1;
      const inst_t *in = &g->v[pc];
      if (in->op == OP_JMP)
        stack[sp++] = in->x;
      else if (in->op == OP_SPLIT)
        stack[sp++] = in->x, stack[sp++] = in->y;
      else if (in->op == OP_ASSERT)
        {
          if (in->aux != A_BEGIN)
            stack[sp++] = pc + 1;
        }
      else
        return true;
    }
  return false;
}

static void
prog_free (prog_t *g)
{
  if (g == NULL)
    return;
  free (g->v);
  free (g->ranges);
  free (g->cls);
  free (g->suffix);
  free (g);
}

/* The literal characters right before a final `$` of a regexp with one
 * alternative (those of `**` then "*.pyc" end in ".pyc" then `$`): a text
 * the regexp matches ends with them, a cheap test before the NFA.  Their
 * UTF-8 bytes can only be read as those characters (no sequence reaches
 * into a lead or ASCII byte); U+FFFD, which an invalid byte also reads
 * as, ends the run. */
static char *
required_suffix (const re_parser_t *p, uint32_t root)
{
  if (p->nodes[root].kind != N_CAT)
    return NULL;
  size_t n = 0;
  for (uint32_t c = p->nodes[root].sub; c != NONE; c = p->nodes[c].next)
    n++;
  cleanup_free uint32_t *items = xmalloc (n * sizeof *items);
  n = 0;
  for (uint32_t c = p->nodes[root].sub; c != NONE; c = p->nodes[c].next)
    items[n++] = c;
  const node_t *last = &p->nodes[items[n - 1]];
  if (last->kind != N_ASSERT || last->aux != A_END)
    return NULL;
  size_t k = n - 1;
  while (k > 0 && p->nodes[items[k - 1]].kind == N_RUNE && p->nodes[items[k - 1]].val != RUNE_ERROR)
    k--;
  if (k == n - 1)
    return NULL;
  ib_buf_t b = { 0 };
  for (size_t i = k; i < n - 1; i++)
    gre_put_rune (&b, p->nodes[items[i]].val);
  return ib_buf_steal (&b);
}

/* regexp.Compile of `re` (Go syntax, Perl flags), or NULL: it does not
 * compile, or is too large. */
static prog_t *
prog_compile (const char *re, size_t n)
{
  re_parser_t p = { .s = re, .n = n };
  uint32_t root = parse_alt (&p);
  if (!p.bad && p.i < p.n)
    p.bad = true; /* an unmatched ')' */
  prog_t *g = NULL;
  if (!p.bad)
    {
      g = xmalloc (sizeof *g);
      emit_node (g, &p, root);
      emit (g, OP_MATCH, 0);
      if (g->bad)
        {
          prog_free (g);
          g = NULL;
        }
    }
  if (g)
    {
      g->ranges = p.all.v, p.all.v = NULL;
      g->cls = p.cls, p.cls = NULL;
      g->anchored = !reaches_unanchored (g);
      g->suffix = required_suffix (&p, root);
    }
  free (p.nodes);
  free (p.all.v);
  free (p.cls);
  free (p.tmp.v);
  return g;
}

/* ---------- running it (a Pike VM without captures) ---------- */

typedef struct sparse
{
  uint32_t *dense, *index;
  size_t n;
} sparse_t;

static bool
sparse_has (const sparse_t *s, uint32_t x)
{
  uint32_t i = s->index[x];
  return i < s->n && s->dense[i] == x;
}

static void
sparse_add (sparse_t *s, uint32_t x)
{
  s->index[x] = (uint32_t) s->n;
  s->dense[s->n++] = x;
}

typedef struct scratch
{
  sparse_t cur, end, seen; /* threads; threads if the text ended here; seeds */
  uint32_t *seeds, *stack;
  size_t nseeds;
} scratch_t;

/* Scratch space for programs of up to `cap` instructions, one zeroed
 * block (the sparse sets' index arrays are read before written). */
static scratch_t *
scratch_new (size_t cap)
{
  if (cap == 0)
    return NULL;
  scratch_t *sc = xmalloc (sizeof *sc + (9 * cap + 3) * sizeof (uint32_t));
  uint32_t *m = (uint32_t *) (sc + 1);
  sparse_t *sets[] = { &sc->cur, &sc->end, &sc->seen };
  for (size_t k = 0; k < 3; k++)
    {
      sets[k]->dense = m, m += cap;
      sets[k]->index = m, m += cap;
    }
  sc->seeds = m, m += cap + 1;
  sc->stack = m;
  return sc;
}

static void
scratch_free (scratch_t *sc)
{
  free (sc);
}

static bool
is_word (int64_t r)
{
  return r >= 0 && r < 0x80
         && ((r >= '0' && r <= '9') || (r >= 'A' && r <= 'Z') || (r >= 'a' && r <= 'z') || r == '_');
}

static bool
class_has (const prog_t *g, uint32_t c, uint32_t r)
{
  const uint32_t *v = g->ranges + 2 * (size_t) g->cls[c][0];
  size_t lo = 0, hi = g->cls[c][1];
  while (lo < hi)
    {
      size_t mid = (lo + hi) / 2;
      if (r < v[2 * mid])
        hi = mid;
      else if (r > v[2 * mid + 1])
        lo = mid + 1;
      else
        return true;
    }
  return false;
}

/* Add pc and every instruction it reaches without reading a character to
 * `set`, at a position between the characters `before` and `after` (-1:
 * the text's edge; `open`: the text may go on, every assertion but `^`
 * holds).  True when that reaches the match. */
static bool
closure (const prog_t *g, sparse_t *set, uint32_t *stack, uint32_t pc, int64_t before,
         int64_t after, bool open)
{
  bool matched = false;
  size_t sp = 0;
  stack[sp++] = pc;
  while (sp)
    {
      pc = stack[--sp];
      if (sparse_has (set, pc))
        continue;
      sparse_add (set, pc);
      const inst_t *in = &g->v[pc];
      bool ok;
      switch (in->op)
        {
        case OP_MATCH:
          matched = true;
          break;
        case OP_JMP:
          stack[sp++] = in->x;
          break;
        case OP_SPLIT:
          stack[sp++] = in->y;
          stack[sp++] = in->x;
          break;
        case OP_ASSERT:
          if (in->aux == A_BEGIN)
            ok = before < 0;
          else if (open)
            ok = true;
          else if (in->aux == A_END)
            ok = after < 0;
          else
            ok = (is_word (before) != is_word (after)) == (in->aux == A_WORD);
          if (ok)
            stack[sp++] = pc + 1;
          break;
        }
    }
  return matched;
}

/* Does the program match s[0..n) (regexp.MatchString: a match anywhere
 * in it), or with `parents` the text before one of its '/' (a parent
 * directory: MatchesOrParentMatches)?  With `open` the text may go on
 * after s (a path below it): true also when a thread is still alive at
 * its end. */
static bool
prog_run (const prog_t *g, scratch_t *sc, const char *s, size_t n, bool parents, bool open)
{
  if (g->suffix && !open)
    {
      /* the path, or a parent (the text before a '/'), must end with it */
      size_t m = strlen (g->suffix);
      bool may = false;
      for (size_t end = n + 1; end-- > 0 && !may;)
        if ((end == n || (parents && s[end] == '/')) && end >= m
            && memcmp (s + end - m, g->suffix, m) == 0)
          may = true;
      if (!may)
        return false;
    }
  size_t pos = 0;
  int64_t prev = -1;
  sc->nseeds = 0;
  sc->seeds[sc->nseeds++] = 0;
  for (;;)
    {
      size_t w = 0;
      int64_t cur = pos < n ? (int64_t) gre_decode_rune ((const unsigned char *) s + pos, n - pos, &w) : -1;
      sc->cur.n = 0;
      for (size_t k = 0; k < sc->nseeds; k++)
        if (closure (g, &sc->cur, sc->stack, sc->seeds[k], prev, cur, open && pos == n))
          return true;
      if (parents && cur == '/' && pos > 0)
        {
          sc->end.n = 0;
          for (size_t k = 0; k < sc->nseeds; k++)
            if (closure (g, &sc->end, sc->stack, sc->seeds[k], prev, -1, false))
              return true;
        }
      if (pos == n)
        {
          for (size_t k = 0; open && k < sc->cur.n; k++)
            if (g->v[sc->cur.dense[k]].op <= OP_ANY)
              return true;
          return false;
        }
      /* each thread reads cur; the survivors (and, unless anchored, a new
       * thread from the start: the search goes on at every position) are
       * the next position's seeds */
      sc->nseeds = 0;
      sc->seen.n = 0;
      for (size_t k = 0; k < sc->cur.n; k++)
        {
          uint32_t pc = sc->cur.dense[k];
          const inst_t *in = &g->v[pc];
          bool ok = (in->op == OP_RUNE && in->x == cur)
                    || (in->op == OP_CLASS && class_has (g, in->x, (uint32_t) cur))
                    || (in->op == OP_ANY && cur != '\n');
          if (ok && !sparse_has (&sc->seen, pc + 1))
            {
              sparse_add (&sc->seen, pc + 1);
              sc->seeds[sc->nseeds++] = pc + 1;
            }
        }
      if (!g->anchored && !sparse_has (&sc->seen, 0))
        {
          sparse_add (&sc->seen, 0);
          sc->seeds[sc->nseeds++] = 0;
        }
      if (sc->nseeds == 0)
        return false;
      prev = cur;
      pos += w;
    }
}

/* ---------- the contract (goregexp-int.h) ---------- */

gre_prog_t *
gre_compile (const char *re, size_t n)
{
  return prog_compile (re, n);
}

void
gre_free (gre_prog_t *g)
{
  prog_free (g);
}

size_t
gre_size (const gre_prog_t *g)
{
  return g->n;
}

gre_scratch_t *
gre_scratch_new (size_t cap)
{
  return scratch_new (cap);
}

void
gre_scratch_free (gre_scratch_t *sc)
{
  scratch_free (sc);
}

bool
gre_run (const gre_prog_t *g, gre_scratch_t *sc, const char *s, size_t n, bool parents, bool open)
{
  return prog_run (g, sc, s, n, parents, open);
}
