/* tests/unit/test_ignore.c — .dockerignore / --exclude patterns
 * (builder/engine/ignore.h), cases from Docker's documentation of .dockerignore
 * ("the build context", "dockerignore file") and its pattern rules. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "builder/engine/ignore.h"
#include "common/util.h"

static bool
ex (const char *text, const char *path)
{
  ib_ignore_t *ig = ib_ignore_parse (text);
  bool r = ib_ignore_excluded (ig, path);
  ib_ignore_free (ig);
  return r;
}

static void
test_docs_example (void **state)
{
  (void) state;
  /* the example .dockerignore of Docker's documentation */
  const char *t = "# comment\n*/temp*\n*/*/temp*\ntemp?\n";
  assert_true (ex (t, "somedir/temporary.txt"));
  assert_true (ex (t, "somedir/temp"));
  assert_true (ex (t, "somedir/subdir/temporary.txt"));
  assert_true (ex (t, "tempa"));
  assert_true (ex (t, "tempb"));
  assert_false (ex (t, "temp"));          /* temp? needs one more char */
  assert_false (ex (t, "temporary.txt")); /* the pattern with one directory level needs a directory */
  assert_false (ex (t, "a/b/c/temp"));    /* three levels: no pattern */
  assert_false (ex (t, "# comment"));
}

static void
test_double_star_and_dirs (void **state)
{
  (void) state;
  assert_true (ex ("**/*.go", "a.go"));
  assert_true (ex ("**/*.go", "x/y/z/a.go"));
  assert_false (ex ("**/*.go", "x/y/z/a.goo"));
  assert_true (ex ("a/**/b", "a/b"));
  assert_true (ex ("a/**/b", "a/x/y/b"));
  assert_true (ex ("a/**", "a/x/y/b"));
  /* a directory pattern takes everything under it */
  assert_true (ex ("node_modules", "node_modules/x/y.js"));
  assert_false (ex ("node_modules", "src/node_modules/x")); /* anchored at the root */
  assert_true (ex ("**/node_modules", "src/node_modules/x"));
  /* cleaning: leading /, ./, trailing /, "//" */
  assert_true (ex ("/build/", "build/out.o"));
  assert_true (ex ("./build//out.o", "build/out.o"));
  assert_true (ex ("a/../b", "b/c"));
  /* whitespace around a pattern is trimmed; CRLF files */
  assert_true (ex ("  *.tmp  \r\n", "x.tmp"));
  /* character classes, escapes */
  assert_true (ex ("file[0-9].txt", "file7.txt"));
  assert_false (ex ("file[0-9].txt", "filex.txt"));
  assert_true (ex ("\\*.txt", "*.txt"));
  assert_false (ex ("\\*.txt", "a.txt"));
  /* * does not cross a '/' */
  assert_false (ex ("*.txt", "dir/a.txt"));
  /* dotfiles match * */
  assert_true (ex ("*", ".git"));
  /* the root itself is never excluded */
  assert_false (ex ("*", ""));
  assert_false (ex ("", "a"));
  assert_false (ex (NULL, "a"));
}

static void
test_exceptions_last_match_wins (void **state)
{
  (void) state;
  const char *t = "*.md\n!README.md\n";
  assert_true (ex (t, "CHANGES.md"));
  assert_false (ex (t, "README.md"));
  /* Docker's documentation: the order matters */
  const char *t2 = "*.md\n!README*.md\nREADME-secret.md\n";
  assert_true (ex (t2, "README-secret.md"));
  assert_false (ex (t2, "README-public.md"));
  const char *t3 = "*.md\nREADME-secret.md\n!README*.md\n";
  assert_false (ex (t3, "README-secret.md"));
  /* re-including inside an excluded directory: the walker must descend */
  ib_ignore_t *ig = ib_ignore_parse ("logs\n!logs/keep.log\n");
  assert_true (ib_ignore_excluded (ig, "logs"));
  assert_true (ib_ignore_excluded (ig, "logs/other.log"));
  assert_false (ib_ignore_excluded (ig, "logs/keep.log"));
  assert_true (ib_ignore_may_include_below (ig, "logs"));
  assert_false (ib_ignore_may_include_below (ig, "other"));
  ib_ignore_free (ig);
  ig = ib_ignore_parse ("tmp\n");
  assert_false (ib_ignore_may_include_below (ig, "tmp"));
  ib_ignore_free (ig);
  /* only an exception after the last rule matching the directory can
   * include something below it: `!src` matches src/etc as a parent, but
   * `src/etc` (later) decides for everything below src/etc */
  ig = ib_ignore_parse ("*\n!src\n**/*.in\nsrc/etc\n");
  assert_false (ib_ignore_excluded (ig, "src"));
  assert_true (ib_ignore_excluded (ig, "src/a.in"));
  assert_true (ib_ignore_excluded (ig, "src/etc/conf"));
  assert_false (ib_ignore_excluded (ig, "src/a.c"));
  assert_false (ib_ignore_may_include_below (ig, "src/etc"));
  assert_false (ib_ignore_may_include_below (ig, "src/a.in"));
  ib_ignore_free (ig);
  /* a wildcard exception may include below any excluded directory */
  ig = ib_ignore_parse ("*\nsubdir\n!*/sub1*\n");
  assert_true (ib_ignore_may_include_below (ig, "subdir"));
  assert_false (ib_ignore_excluded (ig, "subdir/sub1.txt"));
  assert_true (ib_ignore_excluded (ig, "subdir/other"));
  ib_ignore_free (ig);
}

static void
test_filter_combines_ignore_and_exclude (void **state)
{
  (void) state;
  ib_ignore_t *ig = ib_ignore_parse ("src/*.log\n");
  char *pats[] = { (char *) "*.txt", (char *) "sub", NULL };
  ib_ignore_t *exl = ib_ignore_from_patterns (pats);
  /* walking the context's "src": .dockerignore sees "src/x", --exclude "x" */
  ib_path_filter_t f = { .ignore = ig, .ignore_base = "src", .exclude = exl };
  bool descend = true;
  assert_true (ib_path_filter_skip (&f, "a.log", &descend));
  assert_false (descend);
  assert_true (ib_path_filter_skip (&f, "a.txt", NULL));
  assert_true (ib_path_filter_skip (&f, "sub", &descend));
  assert_false (descend);
  assert_true (ib_path_filter_skip (&f, "sub/deep.c", NULL));
  assert_false (ib_path_filter_skip (&f, "a.c", NULL));
  /* a stage source: no .dockerignore */
  ib_path_filter_t g = { .ignore = ig, .ignore_base = NULL, .exclude = NULL };
  assert_false (ib_path_filter_skip (&g, "a.log", NULL));
  assert_false (ib_path_filter_skip (NULL, "a.log", NULL));
  ib_ignore_free (ig);
  ib_ignore_free (exl);
  assert_true (ib_ignore_empty (NULL));
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test (test_docs_example),
    cmocka_unit_test (test_double_star_and_dirs),
    cmocka_unit_test (test_exceptions_last_match_wins),
    cmocka_unit_test (test_filter_combines_ignore_and_exclude),
  };
  return cmocka_run_group_tests (tests, NULL, NULL);
}
