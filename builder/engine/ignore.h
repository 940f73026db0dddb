/* builder/engine/ignore.h — path patterns of `.dockerignore` and `COPY/ADD
 * --exclude`, with Docker's semantics: moby/patternmatcher
 * (patternmatcher.go: New, Pattern.compile, Pattern.match,
 * MatchesOrParentMatches) as BuildKit applies them, and its ignorefile
 * reader (ReadAll) for the text of a .dockerignore:
 *
 *  - one pattern per line; a line whose first byte is '#' is a comment
 *    (" # x" is a pattern: the comment check comes before trimming), a
 *    UTF-8 BOM opening the file is dropped, surrounding white space
 *    (Go's strings.TrimSpace) is trimmed, blank lines are skipped;
 *  - `!pattern` re-includes what earlier patterns excluded; the last
 *    pattern that matches a path or one of its parent directories decides
 *    (so a pattern that matches a directory matches everything below it);
 *  - a pattern is cleaned as Go's path.Clean does ("//", "/.", "a/.."
 *    collapsed, the trailing "/" dropped) and a leading "/" removed
 *    (--exclude values too, which BuildKit hands to New as they are: so
 *    "/x" names the source's x there, as in .dockerignore);
 *  - matching is patternmatcher's: a pattern without wildcards compares
 *    equal, "P**" is a prefix test, "**S" (no wildcard in S) a suffix test,
 *    any other is translated to a Go regular expression run over the
 *    whole path: `*` any run of characters but '/', `?` one of them,
 *    `**` (and "**" + "/") any run of whole directories, zero included
 *    (at the end: anything), `[...]` a class, `\c` what Go's regexp
 *    makes of it (c itself for punctuation, `\d` a digit, `\b` a word
 *    boundary...).  Its quirks included: "**foo" matches "xfoo", "a**b"
 *    matches "a/x/b" but not "axb", and `|`, `{n,m}` and `^` keep their
 *    regexp meaning.
 *
 * Cost: a pattern is compiled once, to a program of at most about 1,000
 * times its length (a `{n,m}` repeats, n, m <= 1,000, as Go's regexp
 * allows); matching a path runs that program as a Thompson NFA over the
 * path's characters, parent directories included in the one pass:
 * O(path length x program size), never backtracking.  A pattern Go
 * refuses (filepath.Match's syntax check, over the whole pattern as
 * current Go releases make it; a regexp that does not compile; "!"
 * alone; a program over Go's size limit) matches nothing and is reported
 * by ib_ignore_check.  Divergence: `\p`/`\P` Unicode classes, which Go's
 * regexp would accept after a `\`, make a pattern bad here.
 */
#ifndef IB_BUILDER_IGNORE_H
#define IB_BUILDER_IGNORE_H

#include "common/error.h"
#include <stdbool.h>

typedef struct ib_ignore ib_ignore_t;

/* Patterns from .dockerignore text (NUL-terminated; may be NULL or empty:
 * nothing excluded).  Never fails; *out is owned by the caller. */
ib_ignore_t *ib_ignore_parse (const char *text);

/* Patterns from a vector (COPY --exclude values, NULL-terminated). */
ib_ignore_t *ib_ignore_from_patterns (char *const *patterns);

void ib_ignore_free (ib_ignore_t *ig);

/* Is `rel` (relative to the patterns' root, "a/b/c", no leading "/")
 * excluded?  NULL `ig` excludes nothing. */
bool ib_ignore_excluded (const ib_ignore_t *ig, const char *rel);

/* May something below the excluded directory `rel` be re-included by a
 * `!` pattern after the last pattern that matches `rel` (so a walker must
 * still descend into it)?  A walker makes such a directory only when
 * something below it is included, as BuildKit's fsutil walker does. */
bool ib_ignore_may_include_below (const ib_ignore_t *ig, const char *rel);

/* Does `ig` hold any pattern? */
bool ib_ignore_empty (const ib_ignore_t *ig);

/* 0 when every pattern of `ig` is one BuildKit accepts (NULL included);
 * else -1 with *err naming the first bad one and why, as "pattern
 * 'a[': syntax error in pattern" (EINVAL).  A bad pattern matches
 * nothing whether or not a caller checks. */
int ib_ignore_check (const ib_ignore_t *ig, ib_error_t *err);

/* A walker's filter (ib_copy_into, ib_cache_hash_path): up to two pattern
 * sets, each with the path of the walked source relative to its root
 * ("" when the source is the root itself). */
typedef struct ib_path_filter
{
  const ib_ignore_t *ignore;  /* .dockerignore, relative to the context */
  const char *ignore_base;    /* the source's path in the context, or NULL: not applied */
  const ib_ignore_t *exclude; /* --exclude, relative to the source */
} ib_path_filter_t;

/* Should the entry `rel` (relative to the walked source) be skipped?
 * *descend (may be NULL) is set for a skipped entry whose contents, if it
 * is a directory, may still be partly included: a walker descends only
 * into a directory, and skips a file whatever *descend says. */
bool ib_path_filter_skip (const ib_path_filter_t *f, const char *rel, bool *descend);

#endif
