/* builder/engine/plan.h — `imgbuild plan RECIPE`: what a build would do, shown
 * without doing it.  ib_build_plan() (builder/build.h) resolves the recipe
 * the way ib_build() does and returns the plan as JSON; the functions here
 * render it as text.  Nothing here touches a store or runs anything. */
#ifndef IB_BUILDER_PLAN_H
#define IB_BUILDER_PLAN_H

#include <jansson.h>

/* `s` as one shell word: as it is when it is non-empty and holds only
 * letters, digits and `_@%+=:,./-`, else in single quotes (a `'` inside
 * written `'\''`).  Never NULL; the caller frees it. */
char *ib_plan_quote (const char *s);

/* The plan `plan` (ib_build_plan's object) as text, for people: a header
 * (recipe, target stage, platform, build args, the recipe's global ARGs),
 * then every stage in build order: a needed stage as
 *   stage INDEX NAME
 *     from: image REF | stage INDEX NAME | scratch [(--platform=P)]
 *     depends on: INDEX NAME, ... | none
 *     line N: INSTRUCTION WORDS...      (values expanded, words quoted as
 *                                        ib_plan_quote)
 *       shell: ...                      (RUN, when not /bin/sh -c)
 *       args: NAME=VALUE ...            (RUN: the ARGs in scope) | (none)
 *     output: type=T KEY=VALUE ...
 * and a stage not needed as "stage INDEX NAME: skipped (not needed)"; then
 * a line "warning: build arg NAME was not consumed by any ARG" for each.
 * Lines end with "\n"; a multi-line RUN command continues on lines
 * indented by 4 spaces.  Control characters of the recipe's text (C0
 * but the line breaks, DEL, C1) are shown as '?' (ib_str_printable, as
 * on the build's display).  Never NULL; the caller frees it.  A document
 * lacking fields renders them empty (no error). */
char *ib_plan_text (const json_t *plan);

#endif
