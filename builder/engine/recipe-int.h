/* builder/engine/recipe-int.h — what the recipe parser's files share (private to
 * recipe.c, recipe_words.c and recipe_instr.c; the API is recipe.h): the
 * character classes, the parser's state, flag and keyword tables' types,
 * and the functions below, grouped by the file that defines them.
 * Functions that can fail return -1 with the parser's error set (perr,
 * perr_at) unless their comment there says otherwise. */
#ifndef IB_RECIPE_INT_H
#define IB_RECIPE_INT_H

#include "builder/engine/recipe.h"
#include "common/util.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

#define EXCERPT_MAX 72

static inline bool
is_space (char c)
{
  return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r' || c == '\n';
}

static inline bool
is_name_start (char c)
{
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}

static inline bool
is_name_char (char c)
{
  return is_name_start (c) || (c >= '0' && c <= '9');
}

static inline bool
is_digit (char c)
{
  return c >= '0' && c <= '9';
}



struct phys_line
{
  const char *s;
  size_t len;     /* without "\n" and one trailing "\r" */
  size_t raw_len; /* with them (heredoc bodies keep their line endings) */
};

/* Where a piece of the logical line came from: the byte at logical offset
 * `off` is at (line, col) in the file, and so are the following bytes of the
 * same physical line. */
struct seg
{
  size_t off;
  int line;
  int col; /* 1-based byte column */
};

struct parser
{
  const char *path;
  char esc;
  ib_recipe_t *r;
  ib_error_t *err;
  /* the logical line being parsed and where its pieces came from */
  const char *lbase;
  struct seg *segs;
  size_t n_segs;
  size_t text_off; /* offset in lbase of the current instruction's text */
  /* physical lines; `next` is the first one after the current logical line
   * (heredoc bodies are read from there) */
  const struct phys_line *lines;
  size_t n_lines, next;
  size_t cap_segs;
  /* "\n" BODY NAME for each heredoc read for the current instruction, bodies
   * as written: what BuildKit appends to a RUN (or ONBUILD) command line */
  ib_buf_t tail;
};


enum flag_type
{
  FLAG_BOOL,
  FLAG_STRING,
  FLAG_LIST,
};

struct flag_spec
{
  const char *name;
  enum flag_type type;
};

enum parse_kind
{
  PK_FROM,
  PK_ARG,
  PK_KEYVAL,  /* ENV, LABEL */
  PK_COMMAND, /* RUN, CMD, ENTRYPOINT, SHELL */
  PK_COPY,    /* COPY, ADD */
  PK_STRING,  /* WORKDIR, USER, STOPSIGNAL, MAINTAINER */
  PK_WORDS,   /* EXPOSE, VOLUME */
  PK_OUTPUT,
  PK_HEALTHCHECK,
  PK_ONBUILD,
};

struct keyword
{
  const char *name;
  ib_instr_kind_t kind;
  enum parse_kind pk;
  const struct flag_spec *flags;
};

/* recipe.c */
char *excerpt (const char *s);
char *excerpt_n (const char *s, size_t n);
void grow_for (void *v, size_t n, size_t size);
void instr_add_kv (ib_instr_t *in, char *key, char *value, char *raw);
void instr_clear (ib_instr_t *in);
void mask_controls (char *s);
/* vasprintf with control characters masked (mask_controls); caller frees */
char *vformat_masked (const char *fmt, va_list ap);
int perr (struct parser *p, int line, const char *fmt, ...) __attribute__ ((format (printf, 3, 4)));
int perr_at (struct parser *p, size_t off, const char *fmt, ...) __attribute__ ((format (printf, 3, 4)));
char ** strv_new (void);
size_t text_off (const struct parser *p, const ib_instr_t *in, const char *at);

/* recipe_words.c */
void put_char (ib_buf_t *out, char c);
char ** split_raw_words (const char *s, char esc);
char ** split_raw_words_at (const char *s, char esc, size_t **offs);
int unquote (const char *word, char escape, char **out, ib_error_t *err);

/* recipe_instr.c */
const char *extract_flag_words (const char *rest, const char *base, ib_strv_builder_t *words, size_t **offs);
const struct keyword *find_keyword (const char *word);
/* The instruction `word` (not one) was probably meant to be: the keyword
 * within edit distance 1 (words of up to 5 letters) or 2, or NULL. */
const char *suggest_keyword (const char *word);
int parse_arg (struct parser *p, ib_instr_t *in);
int parse_command (struct parser *p, ib_instr_t *in);
int parse_copy (struct parser *p, ib_instr_t *in);
int parse_flags (struct parser *p, ib_instr_t *in, const struct flag_spec *spec, char **words, const size_t *offs);
int parse_from (struct parser *p, ib_instr_t *in, char **stage_name);
int parse_healthcheck (struct parser *p, ib_instr_t *in);
int parse_keyval (struct parser *p, ib_instr_t *in);
int parse_output (struct parser *p, ib_instr_t *in);
int parse_string (struct parser *p, ib_instr_t *in);
int parse_words (struct parser *p, ib_instr_t *in);

#endif
