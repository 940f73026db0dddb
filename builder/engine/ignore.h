/* builder/engine/ignore.h — path patterns of `.dockerignore` and `COPY/ADD
 * --exclude`, with Docker's semantics (moby/patternmatcher, as BuildKit
 * applies them):
 *
 *  - one pattern per line of .dockerignore; lines starting with '#' are
 *    comments, blank lines are ignored, surrounding whitespace is trimmed;
 *  - a pattern is cleaned like a path (leading "/" and "./" dropped, "//"
 *    and "/." collapsed, ".." resolved) and matched against paths relative
 *    to its root (the build context for .dockerignore, the copied source
 *    for --exclude), component by component: `*`, `?`, `[...]` and `\`
 *    escapes within a component (fnmatch), `**` any number of components
 *    (zero included);
 *  - a pattern that matches a directory matches everything below it;
 *  - `!pattern` re-includes what earlier patterns excluded; the last
 *    pattern that matches a path decides.
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
