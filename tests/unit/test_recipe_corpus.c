/* tests/unit/test_recipe_corpus.c — table-driven parser tests: every
 * tests/recipe-corpus/NAME.Dockerfile is parsed and its parsed form, printed
 * in the format tests/recipe-corpus/README.md describes, compared with the
 * hand-written NAME.expected.  One cmocka test per case; a mismatch prints a
 * line diff (-expected +got) and the whole parsed form.
 *
 * The corpus directory is $IMGBUILD_RECIPE_CORPUS, else tests/recipe-corpus
 * (make unit and run-e2e.sh run the tests from the top of a tree). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "builder/engine/recipe.h"
#include "common/util.h"

#define MIN_CASES 40

struct corpus_case
{
  char *name;          /* NAME, without .Dockerfile */
  char *dockerfile;    /* paths */
  char *expected;
};

static const char *
corpus_dir (void)
{
  const char *d = getenv ("IMGBUILD_RECIPE_CORPUS");
  return d && *d ? d : "tests/recipe-corpus";
}

/* ------------------------------------------------------------------ */
/* printing the parsed form                                           */
/* ------------------------------------------------------------------ */

static void
put_quoted (ib_buf_t *b, const char *s)
{
  if (s == NULL)
    {
      ib_buf_puts (b, "null");
      return;
    }
  ib_buf_puts (b, "\"");
  for (; *s; s++)
    {
      unsigned char c = (unsigned char) *s;
      switch (c)
        {
        case '"':
          ib_buf_puts (b, "\\\"");
          break;
        case '\\':
          ib_buf_puts (b, "\\\\");
          break;
        case '\n':
          ib_buf_puts (b, "\\n");
          break;
        case '\r':
          ib_buf_puts (b, "\\r");
          break;
        case '\t':
          ib_buf_puts (b, "\\t");
          break;
        default:
          if (c < 0x20 || c == 0x7f)
            ib_buf_printf (b, "\\x%02x", c);
          else
            ib_buf_append (b, s, 1);
        }
    }
  ib_buf_puts (b, "\"");
}

static void
print_instr (ib_buf_t *b, const ib_instr_t *in, int depth)
{
  const char *ind = depth ? "    " : "  ";

  ib_buf_printf (b, "%s%s %d\n", depth ? "  " : "", in->keyword, in->line);
  ib_buf_printf (b, "%stext ", ind);
  put_quoted (b, in->text);
  ib_buf_puts (b, "\n");
  for (char **f = in->flags; f && *f; f++)
    {
      ib_buf_printf (b, "%sflag ", ind);
      put_quoted (b, *f);
      ib_buf_puts (b, "\n");
    }
  if (in->json_form)
    ib_buf_printf (b, "%sjson\n", ind);
  if (in->args)
    {
      ib_buf_printf (b, "%sargs", ind);
      for (char **a = in->args; *a; a++)
        {
          ib_buf_puts (b, " ");
          put_quoted (b, *a);
        }
      ib_buf_puts (b, "\n");
    }
  for (size_t i = 0; i < in->n_kvs; i++)
    {
      ib_buf_printf (b, "%skv ", ind);
      put_quoted (b, in->kvs[i].key);
      ib_buf_puts (b, " ");
      put_quoted (b, in->kvs[i].value);
      ib_buf_puts (b, " ");
      put_quoted (b, in->kvs[i].raw);
      ib_buf_puts (b, "\n");
    }
  for (size_t i = 0; i < in->n_heredocs; i++)
    {
      const ib_heredoc_t *h = &in->heredocs[i];
      ib_buf_printf (b, "%sheredoc ", ind);
      put_quoted (b, h->name);
      ib_buf_printf (b, " line=%d arg=%d chomp=%s expand=%s\n", h->line, h->arg,
                     h->chomp ? "yes" : "no", h->expand ? "yes" : "no");
      ib_buf_printf (b, "%scontent ", ind);
      put_quoted (b, h->content);
      ib_buf_puts (b, "\n");
    }
  if (in->heredoc_script)
    ib_buf_printf (b, "%sscript\n", ind);
  if (in->trigger)
    {
      ib_buf_printf (b, "%strigger\n", ind);
      print_instr (b, in->trigger, depth + 1);
    }
}

static char *
print_recipe (const ib_recipe_t *r)
{
  ib_buf_t b = { 0 };

  ib_buf_append (&b, "", 0);
  if (r->escape != '\\')
    ib_buf_printf (&b, "escape %c\n", r->escape);
  for (size_t i = 0; i < r->n_global_args; i++)
    print_instr (&b, &r->global_args[i], 0);
  for (size_t s = 0; s < r->n_stages; s++)
    {
      const ib_stage_t *st = &r->stages[s];
      ib_buf_printf (&b, "stage %d", st->index);
      if (st->name)
        {
          ib_buf_puts (&b, " ");
          put_quoted (&b, st->name);
        }
      ib_buf_puts (&b, "\n");
      for (size_t i = 0; i < st->n_instrs; i++)
        print_instr (&b, &st->instrs[i], 0);
    }
  return ib_buf_steal (&b);
}

/* ------------------------------------------------------------------ */
/* comparing                                                          */
/* ------------------------------------------------------------------ */

/* The significant lines of a form: leading/trailing whitespace removed,
 * blank lines and lines starting with '#' dropped. */
static char **
significant_lines (const char *text)
{
  char **v = xmalloc (sizeof (char *)); /* zeroed: an empty vector */
  const char *s = text;

  while (*s)
    {
      const char *nl = strchr (s, '\n');
      size_t len = nl ? (size_t) (nl - s) : strlen (s);
      const char *a = s, *e = s + len;
      while (a < e && (*a == ' ' || *a == '\t' || *a == '\r'))
        a++;
      while (e > a && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
        e--;
      if (e > a && *a != '#')
        {
          char *line = xstrndup (a, (size_t) (e - a));
          ib_strv_push (&v, line);
          free (line);
        }
      s += len;
      if (*s == '\n')
        s++;
    }
  return v;
}

/* A line diff of a (expected) and b (got), by longest common subsequence. */
static char *
line_diff (char **a, char **b)
{
  size_t n = ib_strv_len (a), m = ib_strv_len (b);
  size_t *L = xmalloc ((n + 1) * (m + 1) * sizeof *L);
  ib_buf_t out = { 0 };

#define AT(i, j) L[(i) * (m + 1) + (j)]
  for (size_t i = n + 1; i-- > 0;)
    for (size_t j = m + 1; j-- > 0;)
      {
        if (i == n || j == m)
          AT (i, j) = 0;
        else if (strcmp (a[i], b[j]) == 0)
          AT (i, j) = AT (i + 1, j + 1) + 1;
        else
          AT (i, j) = AT (i + 1, j) > AT (i, j + 1) ? AT (i + 1, j) : AT (i, j + 1);
      }
  size_t i = 0, j = 0;
  ib_buf_append (&out, "", 0);
  while (i < n || j < m)
    {
      if (i < n && j < m && strcmp (a[i], b[j]) == 0)
        {
          ib_buf_printf (&out, "   %s\n", a[i]);
          i++, j++;
        }
      else if (j < m && (i == n || AT (i, j + 1) > AT (i + 1, j)))
        ib_buf_printf (&out, " + %s\n", b[j++]);
      else
        ib_buf_printf (&out, " - %s\n", a[i++]);
    }
#undef AT
  free (L);
  return ib_buf_steal (&out);
}

static void
run_case (void **state)
{
  const struct corpus_case *c = *state;
  cleanup_free char *text = NULL, *want = NULL;
  ib_error_t err = NULL;

  if (ib_read_file (c->dockerfile, &text, NULL, &err) < 0
      || ib_read_file (c->expected, &want, NULL, &err) < 0)
    fail_msg ("%s: %s", c->name, err->msg);

  cleanup_free char *shown = xasprintf ("%s.Dockerfile", c->name);
  ib_recipe_t *r = NULL;
  cleanup_free char *got = NULL;
  if (ib_recipe_parse (shown, text, &r, &err) < 0)
    {
      got = xasprintf ("error %s\n", err->msg);
      ib_error_free (&err);
      assert_null (r);
    }
  else
    {
      got = print_recipe (r);
      ib_recipe_free (r);
    }

  cleanup_strv char **wl = significant_lines (want);
  cleanup_strv char **gl = significant_lines (got);
  bool same = ib_strv_len (wl) == ib_strv_len (gl);
  for (size_t i = 0; same && wl[i]; i++)
    same = strcmp (wl[i], gl[i]) == 0;
  if (!same)
    {
      cleanup_free char *d = line_diff (wl, gl);
      print_error ("%s: the parsed form differs from %s (- expected, + got):\n%s", c->name,
                   c->expected, d);
      fail_msg ("%s: mismatch", c->name);
    }
}

/* ------------------------------------------------------------------ */
/* the cases                                                          */
/* ------------------------------------------------------------------ */

static int
cmp_str (const void *a, const void *b)
{
  return strcmp (*(char *const *) a, *(char *const *) b);
}

int
main (void)
{
  const char *dir = corpus_dir ();
  DIR *d = opendir (dir);
  char **names = xmalloc (sizeof (char *));
  const char *suffix = ".Dockerfile";

  if (d == NULL)
    {
      fprintf (stderr, "test_recipe_corpus: cannot open %s (run from the top of the tree, or "
                       "set IMGBUILD_RECIPE_CORPUS)\n", dir);
      return 1;
    }
  for (struct dirent *e; (e = readdir (d)) != NULL;)
    if (ib_str_has_suffix (e->d_name, suffix) && strlen (e->d_name) > strlen (suffix))
      {
        char *n = xstrndup (e->d_name, strlen (e->d_name) - strlen (suffix));
        ib_strv_push (&names, n);
        free (n);
      }
  closedir (d);

  size_t n = ib_strv_len (names);
  qsort (names, n, sizeof *names, cmp_str);
  if (n < MIN_CASES)
    {
      fprintf (stderr, "test_recipe_corpus: %zu cases in %s, expected at least %d\n", n, dir,
               MIN_CASES);
      ib_strv_free (names);
      return 1;
    }

  struct corpus_case *cases = xmalloc (n * sizeof *cases);
  struct CMUnitTest *tests = xmalloc (n * sizeof *tests);
  for (size_t i = 0; i < n; i++)
    {
      cases[i].name = names[i];
      cases[i].dockerfile = xasprintf ("%s/%s.Dockerfile", dir, names[i]);
      cases[i].expected = xasprintf ("%s/%s.expected", dir, names[i]);
      tests[i].name = names[i];
      tests[i].test_func = run_case;
      tests[i].setup_func = NULL;
      tests[i].teardown_func = NULL;
      tests[i].initial_state = &cases[i];
    }
  int ret = _cmocka_run_group_tests ("recipe_corpus", tests, n, NULL, NULL);
  for (size_t i = 0; i < n; i++)
    {
      free (cases[i].dockerfile);
      free (cases[i].expected);
    }
  free (cases);
  free (tests);
  ib_strv_free (names);
  return ret;
}
