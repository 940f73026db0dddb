/* builder/engine/recipe.h — recipe parser.  A recipe is a Dockerfile (BuildKit's
 * Dockerfile reference) plus the OUTPUT instruction:
 *   OUTPUT type=local,dest=DIR[,src=/path]   copy files out of the stage
 *   OUTPUT type=image,name=REF               tag the stage's image in the store
 *   OUTPUT type=oci,dest=DIR[,name=REF]      write an OCI image layout
 *   OUTPUT type=docker,dest=FILE[,name=REF]  write a docker-archive tarball
 *   OUTPUT type=tar,dest=FILE                write the stage's rootfs as a tarball
 *   OUTPUT type=registry,name=REF            push
 * (docs/recipe.md is the user-facing reference.)
 *
 * The parser works on logical lines: comments and blank lines skipped, lines
 * joined on a trailing escape char ('\' or the one set by `# escape=`),
 * comment lines and blank lines inside continuations dropped, a trailing '\r'
 * (CRLF files) dropped, keywords case-insensitive.  Parser directives
 * (`# escape=`, `# syntax=`, `# check=`) are read only before any other line.
 * The bodies of heredocs (RUN/COPY/ADD `<<EOF`, ib_heredoc_t) are the raw
 * lines after their instruction, taken out of the logical-line reading.
 *
 * It does not expand variables: that happens at build time, once ARG/ENV
 * values are known, with ib_expand_word() (Docker's semantics: expansion,
 * quote removal and escapes in one pass) on the raw, unexpanded words the
 * parser keeps: ib_kv_t.raw, ib_instr_t.text of FROM/WORKDIR/USER/STOPSIGNAL,
 * each of ib_instr_t.args of COPY/ADD/EXPOSE/VOLUME (shell form) except the
 * COPY/ADD heredoc source words (ib_instr_heredoc() says which), flag values,
 * and the content of COPY/ADD heredocs whose `expand` is set.
 * RUN/CMD/ENTRYPOINT are never expanded by the builder (the shell does it).
 */
#ifndef IB_BUILDER_RECIPE_H
#define IB_BUILDER_RECIPE_H

#include "common/error.h"
#include <stdbool.h>
#include <stddef.h>

/* Limits (docs/recipe.md, "Limits"), each far above what real recipes use,
 * so that an untrusted recipe cannot take the builder's memory, stack or
 * time:
 *  - IB_RECIPE_MAX: bytes of recipe text (ib_recipe_parse; the builder
 *    reads no more than this from the file, ib_read_file_max);
 *  - IB_RECIPE_MAX_STAGES: FROM instructions in one recipe;
 *  - IB_EXPAND_MAX_DEPTH: ${...} inside the word of a ${V:-word} (and the
 *    other modifiers), nested; ib_expand/ib_expand_word;
 *  - IB_EXPAND_MAX: bytes one expanded word may grow to (or the length of
 *    the word as written, when that is larger: a COPY heredoc's body);
 *    ib_expand/ib_expand_word;
 *  - IB_EXPAND_TRIM_MAX: ${V#p} ${V##p} ${V%p} ${V%%p} match p against up
 *    to len(V) + 1 prefixes or suffixes of V: (len(V) + 1) x (len(V) +
 *    len(p) + 1) may not exceed it (about 11 KiB values with short
 *    patterns; real ones are versions and paths).
 * The builder adds a bound on the expanded text of one instruction and of
 * a whole build (builder/build.h). */
#define IB_RECIPE_MAX (16 << 20)
#define IB_RECIPE_MAX_STAGES 4096
#define IB_EXPAND_MAX_DEPTH 64
#define IB_EXPAND_MAX ((size_t) 1 << 20)
#define IB_EXPAND_TRIM_MAX ((size_t) 1 << 27)

typedef enum
{
  IB_I_FROM, IB_I_ARG, IB_I_ENV, IB_I_RUN, IB_I_COPY, IB_I_ADD, IB_I_WORKDIR, IB_I_LABEL,
  IB_I_USER, IB_I_ENTRYPOINT, IB_I_CMD, IB_I_EXPOSE, IB_I_VOLUME, IB_I_STOPSIGNAL,
  IB_I_SHELL, IB_I_MAINTAINER, IB_I_OUTPUT, IB_I_HEALTHCHECK, IB_I_ONBUILD,
} ib_instr_kind_t;

typedef struct ib_kv
{
  char *key;         /* quotes removed, never expanded */
  char *value;       /* quotes removed and escapes processed, NOT expanded ("$A" stays
                        "$A", and so does "\$A"); NULL for "ARG NAME" without a
                        default.  Fine where no '$' occurs; otherwise expand `raw`. */
  char *raw;         /* the value exactly as written (quotes, escapes kept): what the
                        builder passes to ib_expand_word(); NULL when value is NULL */
} ib_kv_t;

/* One here-document of RUN, COPY or ADD (shell form), as BuildKit reads it:
 * a word `<<NAME`, `<<-NAME`, `<<"NAME"`, `<<'NAME'` (optionally after a
 * file descriptor number, `3<<NAME`) in the instruction, and the lines after
 * the instruction up to a line that is exactly NAME (with `<<-`, after leading
 * tabs).  Several heredocs on one instruction take their bodies in order. */
typedef struct ib_heredoc
{
  char *name;      /* the delimiter word with quotes removed and escapes processed
                      ("EOF" for <<'EOF'): for COPY/ADD the file name the source gets */
  char *content;   /* the body: every line between the instruction and the
                      terminator line, each with its line ending as in the file ("\n",
                      or "\r\n" in a CRLF recipe), so "" or ending in a newline; with
                      `chomp`, leading tabs of every line already removed.  What a
                      COPY/ADD file holds (before expansion, see `expand`) and what a
                      RUN heredoc script is. */
  bool chomp;      /* written `<<-NAME` */
  bool expand;     /* the delimiter has no quote characters (BuildKit's rule: `<<EOF`
                      and `<<\EOF` expand, `<<"EOF"`, `<<'EOF'`, `<<E"O"F` do not).
                      COPY/ADD: expand ARG/ENV variables in `content` (BuildKit does);
                      RUN: informational, the shell sees the delimiter as written */
  int line;        /* 1-based line of the first body line (of the terminator if empty) */
  int arg;         /* COPY/ADD: index in ib_instr_t.args of the `<<NAME` source word
                      this heredoc stands for; RUN: -1 */
} ib_heredoc_t;

typedef struct ib_instr
{
  ib_instr_kind_t kind;
  const char *keyword;  /* canonical upper-case name, static */
  int line;             /* 1-based line of the keyword */
  char *text;           /* everything after the keyword and flags, continuations joined
                           (escape + newline removed, pieces concatenated), trimmed;
                           FROM: the image word only (unexpanded, e.g. "${BASE}") */
  char **flags;         /* "--from=build", "--chown=0:0" ... NULL-terminated, never NULL,
                           unexpanded, quotes removed, always "--name=value" (a bare
                           boolean "--link" is stored as "--link=true") */
  bool json_form;       /* RUN/CMD/ENTRYPOINT/SHELL/COPY/ADD/VOLUME in ["exec", "form"];
                           HEALTHCHECK CMD [...] */
  char **args;          /* json_form: the decoded array (may be empty for CMD []);
                           COPY/ADD (shell form): sources..dest; EXPOSE/VOLUME (shell
                           form): words.  HEALTHCHECK: text is the command after CMD
                           (shell form: args NULL; exec form: json_form and args);
                           HEALTHCHECK NONE: json_form false, args {"NONE"}.  Shell-form words are split on unquoted
                           whitespace and kept raw (quotes/escapes intact, unexpanded).
                           Others: NULL */
  ib_kv_t *kvs;         /* ENV/LABEL/ARG pairs (both "K V" and "K=V" forms),
                           OUTPUT's key=value options (keys lower-cased, "type" always
                           present and valid) */
  size_t n_kvs;
  ib_heredoc_t *heredocs; /* RUN/COPY/ADD (shell form) heredocs in the order of their
                           words, NULL when none; owned by the instruction.
                           RUN: `text` is the script the shell must run, as BuildKit
                           builds it: the command line, then for each heredoc "\n",
                           its body as written (tabs kept: the shell strips them for
                           <<-) and NAME, e.g. "cat <<EOF >/f\nhello\nEOF" (no newline
                           after the last NAME) -- except with `heredoc_script`.
                           COPY/ADD: args keeps each heredoc source word as written
                           ("<<EOF", "<<-'EOF'") where it stands; the heredoc whose
                           `arg` is its index (ib_instr_heredoc()) says what file it
                           is: name `name`, data `content`.  The destination is never
                           a heredoc. */
  size_t n_heredocs;
  bool heredoc_script;  /* RUN whose command is one heredoc and nothing else
                           (`RUN <<EOF`, `RUN <<-"EOF"`): `text` is heredocs[0].content
                           (tabs removed for <<-), the script.  BuildKit: a body
                           starting with "#!" is written to a file (mode 0755) that
                           is executed; any other body is run as `text` with the shell
                           (SHELL / sh -c), like a shell-form RUN. */
  struct ib_instr *trigger; /* ONBUILD: the trigger instruction, parsed and validated
                           as if it stood alone (line: the ONBUILD's line), owned;
                           NULL for other kinds.  The ONBUILD's own `text` is the
                           trigger as written (keyword case kept, continuations
                           joined, trimmed), followed for each heredoc of the trigger
                           by "\n", its body as written and its NAME: BuildKit's
                           expression, the string for the image config's OnBuild
                           list (it parses again as an instruction with its bodies).
                           The ONBUILD itself has no flags, args, kvs or heredocs. */
} ib_instr_t;

typedef struct ib_stage
{
  char *name;           /* lower-cased "AS name", or NULL */
  int index;            /* 0-based */
  ib_instr_t *instrs;   /* instrs[0] is the FROM */
  size_t n_instrs;
} ib_stage_t;

typedef struct ib_recipe
{
  char *path;           /* for messages */
  char escape;          /* '\\' or '`' (from `# escape=`): pass it to ib_expand*() */
  ib_instr_t *global_args; /* ARGs before the first FROM */
  size_t n_global_args;
  ib_stage_t *stages;
  size_t n_stages;
} ib_recipe_t;

/* Parse recipe text (NUL-terminated).  `path` is used in messages: errors
 * (status EINVAL) are one line, "PATH:LINE: <what was expected>, got '<text>'"
 * with LINE the line of the instruction's keyword, or, where the parser knows
 * which piece of text is at fault, "PATH:LINE:COL: ..." with LINE and COL
 * (1-based, in bytes, a tab counting 1, after a BOM) where that text starts,
 * which may be a continuation line: unknown keywords ("PATH:LINE:COL: unknown
 * instruction 'FOO'"), "expected FROM", flags, JSON arrays holding
 * non-strings, ENV/LABEL/ARG words, stage names, OUTPUT fields, heredoc words
 * ("PATH:LINE:COL: unterminated heredoc '<<EOF': expected a line 'EOF', got
 * end of file"), ONBUILD triggers ("PATH:LINE:COL: FROM isn't allowed as an
 * ONBUILD trigger", Docker's words).  On success *out is set and owned by the
 * caller (ib_recipe_free); on failure *out is NULL.  A text longer than
 * IB_RECIPE_MAX fails with EFBIG ("PATH: the recipe is larger than ..."),
 * more than IB_RECIPE_MAX_STAGES stages with EINVAL. */
int ib_recipe_parse (const char *path, const char *text, ib_recipe_t **out, ib_error_t *err);
/* Free a recipe and everything it owns; NULL is fine. */
void ib_recipe_free (ib_recipe_t *r);

/* Find a stage by name (case-insensitive) or decimal index; NULL if none.
 * A name given to several stages finds the last of them, as BuildKit's
 * --target and COPY --from do (dockerfile2llb keeps the last stage of each
 * name). */
const ib_stage_t *ib_recipe_stage (const ib_recipe_t *r, const char *name_or_index);

/* Variable lookup for expansion: returns the value or NULL if unset, or
 * IB_LOOKUP_KEEP: the name is unknown here (a preview, `imgbuild plan`), so
 * the whole expression that names it ($V, ${V}, ${V:-w}, ...) is copied to
 * the output as written, its word unexpanded. */
typedef const char *(*ib_lookup_fn) (void *ctx, const char *name);
extern const char IB_LOOKUP_KEEP[];

/* Expand $VAR, ${VAR}, ${VAR:-word}, ${VAR:+word}, ${VAR-word}, ${VAR+word}
 * and `escape`-escaped '$' in `word` (Dockerfile "Environment replacement").
 * Quotes are kept.  *out is owned by the caller.  Error on an unterminated
 * ${.
 *
 * Exact rules (shared with ib_expand_word):
 *  - a name is [A-Za-z_][A-Za-z0-9_]* or a run of digits; `$` followed by
 *    anything else (or nothing) stays a literal '$';
 *  - unset variables expand to ""; `lookup` may be NULL (everything unset);
 *  - ${V:-w} w if V unset or empty; ${V-w} w if V unset; ${V:+w} w if V set and
 *    non-empty; ${V+w} w if V set; ${V:?w} / ${V?w} error "V: w" if V
 *    empty/unset; ${V#p} ${V##p} ${V%p} ${V%%p} remove the shortest/longest
 *    prefix/suffix matching glob p.  w and p are expanded themselves (nested
 *    ${A:-${B}} works), with the same quote rules;
 *  - `escape` (0 means '\') followed by '$' gives a literal '$'; followed by
 *    any other char, both are copied unchanged (and that char loses any special
 *    meaning: \' does not open a quote); a lone trailing escape is kept;
 *  - inside '...' nothing is expanded; inside "..." $ is expanded and '
 *    is an ordinary char; the quote chars themselves are copied to the output;
 *  - errors (status EINVAL, message "expand '<word>': ..."): unterminated ${,
 *    bad substitution (${}, ${:x}), unsupported modifier, unterminated quote,
 *    ${V?w} on an unset V; limits: a ${...} in the word of a ${...} nested
 *    more than IB_EXPAND_MAX_DEPTH deep ("${...} nested more than 64 deep"),
 *    a result (or the word of a modifier) longer than IB_EXPAND_MAX bytes,
 *    or than `word` itself when that is longer ("$V makes the expansion
 *    longer than N bytes ...", naming the variable that crossed it), a
 *    pattern removal over IB_EXPAND_TRIM_MAX ("${V%...}: removing a pattern
 *    of N bytes from a value of M bytes is over the limit").
 * Use ib_expand_word() instead where Docker would also remove quotes. */
int ib_expand (const char *word, char escape, ib_lookup_fn lookup, void *ctx, char **out,
               ib_error_t *err);

/* Docker's single-word processing (BuildKit's ProcessWord), used for ENV/ARG/
 * LABEL values (ib_kv_t.raw), FROM image, WORKDIR, USER, STOPSIGNAL, COPY/ADD
 * sources and destination, EXPOSE, VOLUME and flag values: the expansion rules
 * of ib_expand(), plus quote removal and escapes in the same pass:
 *  - outside quotes, escape + c gives c (a lone trailing escape is dropped);
 *  - inside "...", escape + one of '"', '$', escape gives that char, escape +
 *    anything else is kept as both chars;
 *  - inside '...' everything is literal.
 * Whitespace is kept (the whole string is one word).  E.g. with A=x:
 *  `"$A y"` -> `x y`, `'$A'` -> `$A`, `\$A` -> `$A`, `a\ b` -> `a b`.
 * *out is owned by the caller.  Errors as ib_expand(). */
int ib_expand_word (const char *word, char escape, ib_lookup_fn lookup, void *ctx, char **out,
                    ib_error_t *err);

/* EXPOSE, one expanded word, checked as BuildKit's port specs:
 * [[IP:]HOSTPORT:]PORT[-PORT][/PROTO], ports 0-65535 (a range's end not
 * below its start), PROTO tcp, udp or sctp in any case (default tcp).  On
 * success *key (caller frees) is the image config's ExposedPorts key for
 * it, "PORT[-PORT]/proto" with proto lower-cased.  Errors EINVAL:
 * "port 'SPEC': ..." naming the bad part, control characters masked. */
int ib_expose_key (const char *spec, char **key, ib_error_t *err);

/* STOPSIGNAL, the expanded word, checked as Docker's signal.ParseSignal:
 * a signal name with or without "SIG", any case (TERM, SIGKILL, RTMIN+3,
 * SIGRTMAX-2), or a number 1 to 64.  *signo (may be NULL) gets its number.
 * Errors EINVAL: "signal 'S': ...". */
int ib_stop_signal (const char *s, int *signo, ib_error_t *err);

/* Split a shell-ish word list the way Dockerfile does for COPY/ADD/EXPOSE
 * operands: whitespace separated, quotes removed.  Caller frees.
 * Rules: words are separated by unquoted whitespace; '...' is literal; in
 * "..." a backslash escapes '"', '\\' and '$' (before other chars it is kept);
 * outside quotes a backslash escapes any char (a trailing one is dropped);
 * "" gives an empty word; an unterminated quote runs to the end of `s`.
 * No expansion.  Never returns NULL (s == NULL gives an empty vector). */
char **ib_split_words (const char *s);

/* The heredoc that COPY/ADD source in->args[i] stands for, or NULL when
 * args[i] is an ordinary path (or `in` has no heredocs).  The pointer is into
 * in->heredocs. */
const ib_heredoc_t *ib_instr_heredoc (const ib_instr_t *in, size_t i);

/* Value of flag "--name=VALUE" in a flags vector, or NULL.  `name` may be
 * given with or without the leading "--" ("from" or "--from").  The first
 * occurrence wins; a bare boolean flag reads "true".  The pointer is into
 * in->flags (not a copy). */
const char *ib_instr_flag (const ib_instr_t *in, const char *name);

/* All values of a repeatable flag (--mount, --device, --exclude), in order;
 * NULL-terminated, never NULL, owned by the caller (ib_strv_free). */
char **ib_instr_flag_values (const ib_instr_t *in, const char *name);

#endif
