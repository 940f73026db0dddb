/* builder/recipe.h — recipe parser.  A recipe is a Dockerfile (BuildKit's
 * Dockerfile reference) plus the OUTPUT instruction:
 *   OUTPUT type=local,dest=DIR[,src=/path]   copy files out of the stage
 *   OUTPUT type=image,name=REF               tag the stage's image in the store
 *   OUTPUT type=oci,dest=DIR[,name=REF]      write an OCI image layout
 *   OUTPUT type=registry,name=REF            push
 *
 * The parser works on logical lines: comments and blank lines skipped, lines
 * joined on a trailing escape char ('\' or the one set by `# escape=`),
 * comment lines inside continuations dropped, keywords case-insensitive.
 * It does not expand variables: that happens at build time with
 * ib_expand() once ARG/ENV values are known.
 */
#ifndef IB_BUILDER_RECIPE_H
#define IB_BUILDER_RECIPE_H

#include "common/error.h"
#include <stdbool.h>
#include <stddef.h>

typedef enum
{
  IB_I_FROM, IB_I_ARG, IB_I_ENV, IB_I_RUN, IB_I_COPY, IB_I_ADD, IB_I_WORKDIR, IB_I_LABEL,
  IB_I_USER, IB_I_ENTRYPOINT, IB_I_CMD, IB_I_EXPOSE, IB_I_VOLUME, IB_I_STOPSIGNAL,
  IB_I_SHELL, IB_I_MAINTAINER, IB_I_OUTPUT,
} ib_instr_kind_t;

typedef struct ib_kv
{
  char *key;
  char *value;       /* NULL for "ARG NAME" without a default */
} ib_kv_t;

typedef struct ib_instr
{
  ib_instr_kind_t kind;
  const char *keyword;  /* canonical upper-case name, static */
  int line;             /* 1-based line of the keyword */
  char *text;           /* everything after the keyword and flags, continuations joined */
  char **flags;         /* "--from=build", "--chown=0:0" ... NULL-terminated, unexpanded */
  bool json_form;       /* RUN/CMD/ENTRYPOINT/COPY/SHELL in ["exec", "form"] */
  char **args;          /* json_form: the decoded array; COPY/ADD: sources..dest split on
                           whitespace; EXPOSE/VOLUME: words; others: NULL */
  ib_kv_t *kvs;         /* ENV/LABEL/ARG pairs (both "K V" and "K=V" forms, quotes
                           removed), OUTPUT's key=value options */
  size_t n_kvs;
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
  ib_instr_t *global_args; /* ARGs before the first FROM */
  size_t n_global_args;
  ib_stage_t *stages;
  size_t n_stages;
} ib_recipe_t;

/* Parse recipe text.  `path` is used in messages: errors read
 * "PATH:LINE: <what was expected>, got '<text>'".  Caller frees. */
int ib_recipe_parse (const char *path, const char *text, ib_recipe_t **out, ib_error_t *err);
void ib_recipe_free (ib_recipe_t *r);

/* Find a stage by name (case-insensitive) or decimal index; NULL if none. */
const ib_stage_t *ib_recipe_stage (const ib_recipe_t *r, const char *name_or_index);

/* Variable lookup for expansion: returns the value or NULL if unset. */
typedef const char *(*ib_lookup_fn) (void *ctx, const char *name);

/* Expand $VAR, ${VAR}, ${VAR:-word}, ${VAR:+word}, ${VAR-word}, ${VAR+word}
 * and `escape`-escaped '$' in `word` (Dockerfile "Environment replacement").
 * Quotes are kept.  *out is owned by the caller.  Error on an unterminated
 * ${. */
int ib_expand (const char *word, char escape, ib_lookup_fn lookup, void *ctx, char **out,
               ib_error_t *err);

/* Split a shell-ish word list the way Dockerfile does for COPY/ADD/EXPOSE
 * operands: whitespace separated, quotes removed.  Caller frees. */
char **ib_split_words (const char *s);

/* Value of flag "--name=VALUE" in a flags vector, or NULL. */
const char *ib_instr_flag (const ib_instr_t *in, const char *name);

#endif
