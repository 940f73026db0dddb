/* builder/engine/goregexp-int.h — private to builder/engine/: the subset
 * of Go's regular expressions (regexp/syntax, Perl flags) that
 * moby/patternmatcher's compile() writes for a .dockerignore pattern,
 * compiled once to a program and run as Go's regexp runs it, a Pike VM
 * without captures: every thread advances one character at a time, so a
 * match costs O(text length x program size) whatever the expression,
 * never backtracking (issue 38).  Used by ignore.c only.
 *
 * Why our own and not a library's: the answers must be Go's to the byte
 * (patternmatcher's quirks included: `|`, `{n,m}`, `\b` keep their
 * meaning, invalid UTF-8 reads as U+FFFD), checked against the Go package
 * on 180 table rows and 600,000 random cases.  PCRE2's DFA matcher
 * (pcre2_dfa_match) was tried in its place: it still needed a 380-line
 * translation of Go's syntax to PCRE2's, ran 1.6 to 8 times slower, and
 * its cost grows with the square of the live states (a 4 KiB path took
 * 0.94 s against 0.034 s here).
 *
 * Text is UTF-8; runes as utf8.DecodeRune reads them.  A program and its
 * scratch space are the caller's to free; neither is shared between
 * threads. */
#ifndef IB_BUILDER_GOREGEXP_INT_H
#define IB_BUILDER_GOREGEXP_INT_H

#include "common/util.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GRE_RUNE_ERROR 0xFFFDu

typedef struct prog gre_prog_t;
typedef struct scratch gre_scratch_t;

/* The rune at s[0..n) (n > 0) and its width in *w, as utf8.DecodeRune: an
 * invalid, overlong, surrogate or short sequence is U+FFFD of width 1. */
uint32_t gre_decode_rune (const unsigned char *s, size_t n, size_t *w);

/* Append rune r to b in UTF-8. */
void gre_put_rune (ib_buf_t *b, uint32_t r);

/* regexp.Compile of re[0..n) (Go syntax, Perl flags): a program, or NULL
 * when Go would refuse it (a syntax error, nesting over 1,000, a program
 * over Go's size limit). */
gre_prog_t *gre_compile (const char *re, size_t n);
void gre_free (gre_prog_t *g);

/* The program's size in instructions (what gre_scratch_new must hold). */
size_t gre_size (const gre_prog_t *g);

/* Scratch space for programs of up to `cap` instructions; NULL for 0. */
gre_scratch_t *gre_scratch_new (size_t cap);
void gre_scratch_free (gre_scratch_t *sc);

/* Does g match s[0..n) (regexp.MatchString: a match anywhere in it), or
 * with `parents` the text before one of its '/' (a parent directory:
 * MatchesOrParentMatches)?  With `open` the text may go on after s (a
 * path below it): true also when a thread is still alive at its end.
 * `sc` holds at least gre_size (g) instructions. */
bool gre_run (const gre_prog_t *g, gre_scratch_t *sc, const char *s, size_t n, bool parents,
              bool open);

#endif
