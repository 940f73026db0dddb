/* tests/unit/test_recipe.c — recipe parser, ib_expand*, ib_split_words. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "builder/engine/recipe.h"
#include "common/util.h"

/* ------------------------------------------------------------------ */
/* helpers                                                            */
/* ------------------------------------------------------------------ */

static ib_recipe_t *
parse_ok (const char *text)
{
  ib_recipe_t *r = NULL;
  ib_error_t err = NULL;
  int ret = ib_recipe_parse ("test.recipe", text, &r, &err);
  if (ret != 0)
    fail_msg ("unexpected parse error: %s", err ? err->msg : "(none)");
  assert_non_null (r);
  assert_null (err);
  return r;
}

/* Parse text that must fail; returns the message (caller frees). */
static char *
parse_err (const char *text)
{
  ib_recipe_t *r = (ib_recipe_t *) 0x1;
  ib_error_t err = NULL;
  int ret = ib_recipe_parse ("test.recipe", text, &r, &err);
  if (ret == 0)
    fail_msg ("expected a parse error for:\n%s", text);
  assert_int_equal (ret, -1);
  assert_null (r);
  assert_non_null (err);
  assert_non_null (err->msg);
  assert_null (strchr (err->msg, '\n'));
  char *msg = xstrdup (err->msg);
  ib_error_free (&err);
  return msg;
}

static void
assert_err_contains (const char *text, const char *want)
{
  char *msg = parse_err (text);
  if (strstr (msg, want) == NULL)
    fail_msg ("error '%s' lacks '%s'", msg, want);
  free (msg);
}

static void
assert_err_is (const char *text, const char *want)
{
  char *msg = parse_err (text);
  if (strcmp (msg, want) != 0)
    fail_msg ("error '%s', wanted '%s'", msg, want);
  free (msg);
}

static void
assert_strv (char **v, ...)
{
  va_list ap;
  size_t i = 0;
  const char *s;

  assert_non_null (v);
  va_start (ap, v);
  while ((s = va_arg (ap, const char *)) != NULL)
    {
      if (v[i] == NULL)
        fail_msg ("vector too short: wanted '%s' at %zu", s, i);
      assert_string_equal (v[i], s);
      i++;
    }
  va_end (ap);
  if (v[i] != NULL)
    fail_msg ("vector too long: extra '%s' at %zu", v[i], i);
}

/* Lookup over a NULL-terminated array of "NAME=VALUE" strings. */
static const char *
lookup_tbl (void *ctx, const char *name)
{
  const char *const *tbl = ctx;
  size_t n = strlen (name);
  for (size_t i = 0; tbl[i]; i++)
    if (strncmp (tbl[i], name, n) == 0 && tbl[i][n] == '=')
      return tbl[i] + n + 1;
  return NULL;
}

static const char *const vars[] = { "A=alpha", "B=beta", "EMPTY=", "SP=x y", "V=v1.2.3",
                                    "PATHV=/usr/local/lib/python3", "N1=one",
                                    "Q=it's \"$A\" ${B}", NULL };

static char *
expand (const char *w)
{
  char *out = NULL;
  ib_error_t err = NULL;
  if (ib_expand (w, '\\', lookup_tbl, (void *) vars, &out, &err) < 0)
    fail_msg ("ib_expand '%s': %s", w, err->msg);
  return out;
}

static void
assert_expand (const char *w, const char *want)
{
  char *got = expand (w);
  if (strcmp (got, want) != 0)
    fail_msg ("ib_expand '%s' = '%s', wanted '%s'", w, got, want);
  free (got);
}

static void
assert_expand_word (const char *w, const char *want)
{
  char *got = NULL;
  ib_error_t err = NULL;
  if (ib_expand_word (w, '\\', lookup_tbl, (void *) vars, &got, &err) < 0)
    fail_msg ("ib_expand_word '%s': %s", w, err->msg);
  if (strcmp (got, want) != 0)
    fail_msg ("ib_expand_word '%s' = '%s', wanted '%s'", w, got, want);
  free (got);
}

static void
assert_expand_fails (const char *w, const char *want)
{
  char *out = (char *) 0x1;
  ib_error_t err = NULL;
  assert_int_equal (ib_expand (w, '\\', lookup_tbl, (void *) vars, &out, &err), -1);
  assert_null (out);
  assert_non_null (err);
  if (strstr (err->msg, want) == NULL)
    fail_msg ("ib_expand '%s' error '%s' lacks '%s'", w, err->msg, want);
  ib_error_free (&err);
  out = (char *) 0x1;
  assert_int_equal (ib_expand_word (w, '\\', lookup_tbl, (void *) vars, &out, &err), -1);
  assert_null (out);
  assert_non_null (err);
  ib_error_free (&err);
}

static const ib_kv_t *
kv (const ib_instr_t *in, const char *key)
{
  for (size_t i = 0; i < in->n_kvs; i++)
    if (strcmp (in->kvs[i].key, key) == 0)
      return &in->kvs[i];
  fail_msg ("no key '%s'", key);
  return NULL;
}

/* ------------------------------------------------------------------ */
/* structure                                                          */
/* ------------------------------------------------------------------ */

static void
test_demo_recipe (void **state)
{
  (void) state;
  ib_recipe_t *r = parse_ok ("ARG BASE=localhost:5000/debian:bookworm\n"
                             "FROM ${BASE} AS build\n"
                             "RUN apt-get update && \\\n"
                             "    apt-get install -y gcc python3-dev\n"
                             "WORKDIR /src\n"
                             "RUN python3 setup.py bdist_wheel\n"
                             "OUTPUT type=local,dest=dist,src=/src/dist\n"
                             "FROM ${BASE} AS client\n"
                             "COPY --from=build /src/dist/ /opt/\n"
                             "OUTPUT type=image,name=demo-client:latest\n");
  assert_string_equal (r->path, "test.recipe");
  assert_int_equal (r->escape, '\\');
  assert_int_equal (r->n_global_args, 1);
  assert_int_equal (r->global_args[0].kind, IB_I_ARG);
  assert_string_equal (r->global_args[0].kvs[0].key, "BASE");
  assert_string_equal (r->global_args[0].kvs[0].value, "localhost:5000/debian:bookworm");
  assert_int_equal (r->n_stages, 2);

  const ib_stage_t *b = &r->stages[0];
  assert_string_equal (b->name, "build");
  assert_int_equal (b->index, 0);
  assert_int_equal (b->n_instrs, 5);
  assert_int_equal (b->instrs[0].kind, IB_I_FROM);
  assert_string_equal (b->instrs[0].keyword, "FROM");
  assert_string_equal (b->instrs[0].text, "${BASE}");
  assert_int_equal (b->instrs[0].line, 2);
  assert_int_equal (b->instrs[1].kind, IB_I_RUN);
  assert_false (b->instrs[1].json_form);
  assert_null (b->instrs[1].args);
  assert_string_equal (b->instrs[1].text,
                       "apt-get update &&     apt-get install -y gcc python3-dev");
  assert_int_equal (b->instrs[1].line, 3);
  assert_int_equal (b->instrs[2].kind, IB_I_WORKDIR);
  assert_string_equal (b->instrs[2].text, "/src");
  assert_int_equal (b->instrs[2].line, 5);
  assert_int_equal (b->instrs[3].line, 6);
  const ib_instr_t *o = &b->instrs[4];
  assert_int_equal (o->kind, IB_I_OUTPUT);
  assert_int_equal (o->n_kvs, 3);
  assert_string_equal (kv (o, "type")->value, "local");
  assert_string_equal (kv (o, "dest")->value, "dist");
  assert_string_equal (kv (o, "src")->value, "/src/dist");

  const ib_stage_t *c = &r->stages[1];
  assert_string_equal (c->name, "client");
  assert_int_equal (c->index, 1);
  assert_int_equal (c->n_instrs, 3);
  assert_int_equal (c->instrs[1].kind, IB_I_COPY);
  assert_string_equal (ib_instr_flag (&c->instrs[1], "from"), "build");
  assert_strv (c->instrs[1].args, "/src/dist/", "/opt/", NULL);
  assert_string_equal (kv (&c->instrs[2], "type")->value, "image");
  assert_string_equal (kv (&c->instrs[2], "name")->value, "demo-client:latest");

  /* The builder's view: FROM text expanded with the global ARG. */
  const char *const env[] = { "BASE=localhost:5000/debian:bookworm", NULL };
  char *img = NULL;
  ib_error_t err = NULL;
  assert_int_equal (ib_expand_word (c->instrs[0].text, r->escape, lookup_tbl, (void *) env, &img,
                                    &err),
                    0);
  assert_string_equal (img, "localhost:5000/debian:bookworm");
  free (img);

  assert_ptr_equal (ib_recipe_stage (r, "build"), b);
  assert_ptr_equal (ib_recipe_stage (r, "CLIENT"), c);
  assert_ptr_equal (ib_recipe_stage (r, "0"), b);
  assert_ptr_equal (ib_recipe_stage (r, "1"), c);
  assert_null (ib_recipe_stage (r, "2"));
  assert_null (ib_recipe_stage (r, "nope"));
  assert_null (ib_recipe_stage (r, ""));
  assert_null (ib_recipe_stage (r, NULL));
  assert_null (ib_recipe_stage (r, "99999999999999999999999"));
  ib_recipe_free (r);
}

/* A stage name given twice parses (BuildKit warns: DuplicateStageName);
 * lookups by name find the last stage of it, by index each one. */
static void
test_duplicate_stage_name (void **state)
{
  (void) state;
  ib_recipe_t *r = parse_ok ("FROM a AS b\nFROM c AS B\nFROM b\n");
  assert_int_equal (r->n_stages, 3);
  assert_string_equal (r->stages[0].name, "b");
  assert_string_equal (r->stages[1].name, "b");
  assert_ptr_equal (ib_recipe_stage (r, "b"), &r->stages[1]);
  assert_ptr_equal (ib_recipe_stage (r, "B"), &r->stages[1]);
  assert_ptr_equal (ib_recipe_stage (r, "0"), &r->stages[0]);
  ib_recipe_free (r);
}

static void
test_multistage (void **state)
{
  (void) state;
  ib_recipe_t *r = parse_ok ("# a comment before everything\n"
                             "ARG PY=3.9 TORCH\n"
                             "arg CUDA=\"10.2\"\n"
                             "\n"
                             "from --platform=linux/amd64 quay.io/pypa/manylinux2014_x86_64 As "
                             "Builder\n"
                             "run echo hi\n"
                             "FROM builder\n"
                             "Run echo again\n"
                             "FROM scratch\n"
                             "COPY --from=0 /a /b\n");
  assert_int_equal (r->n_global_args, 2);
  const ib_instr_t *a = &r->global_args[0];
  assert_int_equal (a->n_kvs, 2);
  assert_string_equal (a->kvs[0].key, "PY");
  assert_string_equal (a->kvs[0].value, "3.9");
  assert_string_equal (a->kvs[0].raw, "3.9");
  assert_string_equal (a->kvs[1].key, "TORCH");
  assert_null (a->kvs[1].value);
  assert_null (a->kvs[1].raw);
  assert_string_equal (r->global_args[1].keyword, "ARG");
  assert_string_equal (r->global_args[1].kvs[0].value, "10.2");
  assert_string_equal (r->global_args[1].kvs[0].raw, "\"10.2\"");
  assert_int_equal (r->global_args[1].line, 3);

  assert_int_equal (r->n_stages, 3);
  assert_string_equal (r->stages[0].name, "builder");
  assert_string_equal (r->stages[0].instrs[0].text, "quay.io/pypa/manylinux2014_x86_64");
  assert_string_equal (ib_instr_flag (&r->stages[0].instrs[0], "--platform"), "linux/amd64");
  assert_int_equal (r->stages[0].instrs[0].line, 5);
  assert_string_equal (r->stages[0].instrs[1].keyword, "RUN");
  assert_string_equal (r->stages[0].instrs[1].text, "echo hi");
  assert_null (r->stages[1].name);
  assert_string_equal (r->stages[1].instrs[0].text, "builder");
  assert_null (r->stages[2].name);
  assert_string_equal (ib_instr_flag (&r->stages[2].instrs[1], "from"), "0");
  assert_ptr_equal (ib_recipe_stage (r, "BUILDER"), &r->stages[0]);
  ib_recipe_free (r);
}

static void
test_escape_directive (void **state)
{
  (void) state;
  ib_recipe_t *r = parse_ok ("# syntax=docker/dockerfile:1\n"
                             "# escape=`\n"
                             "\n"
                             "FROM scratch\n"
                             "RUN echo a `\n"
                             "    b\n"
                             "WORKDIR C:\\foo\\\n"
                             "ENV P=C:\\dir X=a`\"b\n");
  assert_int_equal (r->escape, '`');
  const ib_stage_t *s = &r->stages[0];
  assert_int_equal (s->n_instrs, 4);
  assert_string_equal (s->instrs[1].text, "echo a     b");
  assert_string_equal (s->instrs[2].text, "C:\\foo\\");
  assert_string_equal (kv (&s->instrs[3], "P")->value, "C:\\dir");
  assert_string_equal (kv (&s->instrs[3], "X")->value, "a\"b");
  assert_int_equal (s->instrs[3].line, 8);
  ib_recipe_free (r);

  /* Backslash spelled explicitly; directive names are case-insensitive. */
  r = parse_ok ("#  ESCAPE = \\  \nFROM x\nRUN a \\\n b\n");
  assert_int_equal (r->escape, '\\');
  assert_string_equal (r->stages[0].instrs[1].text, "a  b");
  ib_recipe_free (r);

  /* After a comment, a blank line or an instruction, it is just a comment. */
  const char *late[] = { "# hello\n# escape=`\nFROM x\nRUN a `\n",
                         "\n# escape=`\nFROM x\nRUN a `\n",
                         "FROM x\n# escape=`\nRUN a `\n" };
  for (size_t i = 0; i < 3; i++)
    {
      r = parse_ok (late[i]);
      assert_int_equal (r->escape, '\\');
      assert_string_equal (r->stages[0].instrs[1].text, "a `");
      ib_recipe_free (r);
    }

  /* An unknown directive ends the directives. */
  r = parse_ok ("# foo=bar\n# escape=`\nFROM x\n");
  assert_int_equal (r->escape, '\\');
  ib_recipe_free (r);

  assert_err_is ("# escape=x\nFROM x\n",
                 "test.recipe:1: expected escape character '\\' or '`', got 'x'");
  assert_err_contains ("# escape=`\n# escape=\\\nFROM x\n", "test.recipe:2:");
}

static void
test_continuations (void **state)
{
  (void) state;
  ib_recipe_t *r = parse_ok ("FROM x\n"
                             "RUN apt-get update \\\n"
                             "# a comment inside\n"
                             "   # an indented one\n"
                             "\n"
                             "   \t\n"
                             "  && apt-get install -y \\   \t\n"
                             "     gcc\n"
                             "\n"
                             "LABEL a=b\n"
                             "RUN echo last \\");
  const ib_stage_t *s = &r->stages[0];
  assert_int_equal (s->n_instrs, 4);
  assert_string_equal (s->instrs[1].text, "apt-get update   && apt-get install -y      gcc");
  assert_int_equal (s->instrs[1].line, 2);
  assert_int_equal (s->instrs[2].kind, IB_I_LABEL);
  assert_int_equal (s->instrs[2].line, 10);
  assert_string_equal (s->instrs[3].text, "echo last");
  ib_recipe_free (r);

  /* As in Docker, a blank line does not end a continuation: the next
   * non-blank line joins it. */
  r = parse_ok ("FROM x\nRUN a \\\n\nLABEL b=c\n");
  s = &r->stages[0];
  assert_int_equal (s->n_instrs, 2);
  assert_string_equal (s->instrs[1].text, "a LABEL b=c");
  ib_recipe_free (r);

  /* A '#' not at the start of a line is not a comment. */
  r = parse_ok ("FROM x\nRUN echo a # not a comment\n  # comment\n");
  assert_int_equal (r->stages[0].n_instrs, 2);
  assert_string_equal (r->stages[0].instrs[1].text, "echo a # not a comment");
  ib_recipe_free (r);

  /* Keyword alone on its line, arguments continued. */
  r = parse_ok ("FROM x\nENV \\\n A=1 \\\n B=2\n");
  assert_int_equal (r->stages[0].instrs[1].n_kvs, 2);
  assert_string_equal (kv (&r->stages[0].instrs[1], "B")->value, "2");
  ib_recipe_free (r);
}

static void
test_crlf (void **state)
{
  (void) state;
  ib_recipe_t *r = parse_ok ("\xef\xbb\xbf# escape=\\\r\n"
                             "FROM debian AS b\r\n"
                             "RUN echo a \\\r\n"
                             "    b\r\n"
                             "\r\n"
                             "ENV K=v\r\n"
                             "CMD [\"sh\", \"-c\", \"echo\"]\r\n");
  const ib_stage_t *s = &r->stages[0];
  assert_string_equal (s->name, "b");
  assert_string_equal (s->instrs[0].text, "debian");
  assert_string_equal (s->instrs[1].text, "echo a     b");
  assert_string_equal (kv (&s->instrs[2], "K")->value, "v");
  assert_int_equal (s->instrs[2].line, 6);
  assert_true (s->instrs[3].json_form);
  assert_strv (s->instrs[3].args, "sh", "-c", "echo", NULL);
  ib_recipe_free (r);
}

static void
test_json_and_shell_forms (void **state)
{
  (void) state;
  ib_recipe_t *r = parse_ok ("FROM x\n"
                             "RUN [\"/bin/sh\", \"-c\", \"echo \\\"hi\\\"\"]\n"
                             "RUN [ \"broken\n"
                             "CMD [\"a\", 1\n"
                             "ENTRYPOINT [ \"/entry\" , \"--flag\" ]  \n"
                             "CMD []\n"
                             "SHELL [\"/bin/bash\", \"-eo\", \"pipefail\", \"-c\"]\n"
                             "RUN [\"a\"] trailing\n"
                             "CMD echo $HOME\n"
                             "RUN --network=none [\"true\"]\n");
  const ib_instr_t *in = r->stages[0].instrs;
  assert_true (in[1].json_form);
  assert_strv (in[1].args, "/bin/sh", "-c", "echo \"hi\"", NULL);
  assert_false (in[2].json_form);
  assert_null (in[2].args);
  assert_string_equal (in[2].text, "[ \"broken");
  assert_false (in[3].json_form);
  assert_string_equal (in[3].text, "[\"a\", 1");
  assert_true (in[4].json_form);
  assert_int_equal (in[4].kind, IB_I_ENTRYPOINT);
  assert_strv (in[4].args, "/entry", "--flag", NULL);
  assert_true (in[5].json_form);
  assert_strv (in[5].args, NULL);
  assert_true (in[6].json_form);
  assert_int_equal (in[6].kind, IB_I_SHELL);
  assert_strv (in[6].args, "/bin/bash", "-eo", "pipefail", "-c", NULL);
  assert_false (in[7].json_form);
  assert_false (in[8].json_form);
  assert_string_equal (in[8].text, "echo $HOME");
  assert_true (in[9].json_form);
  assert_strv (in[9].args, "true", NULL);
  assert_string_equal (ib_instr_flag (&in[9], "network"), "none");
  ib_recipe_free (r);

  /* A valid JSON array of non-strings is an error, as in BuildKit. */
  assert_err_is ("FROM x\nCMD [\"a\", 1]\n",
                 "test.recipe:2:5: expected a JSON array of strings, got '[\"a\", 1]'");
  assert_err_contains ("FROM x\nCOPY [1, 2]\n", "test.recipe:2:6: expected a JSON array of strings");
  assert_err_contains ("FROM x\nSHELL /bin/bash -c\n", "test.recipe:2: SHELL needs the JSON form");
  assert_err_contains ("FROM x\nSHELL []\n", "test.recipe:2: SHELL needs at least");
  assert_err_is ("FROM x\nRUN\n", "test.recipe:2: RUN needs a command, got 'RUN'");
  assert_err_contains ("FROM x\nCMD   \n", "test.recipe:2: CMD needs a command");
}

static void
test_env (void **state)
{
  (void) state;
  ib_recipe_t *r = parse_ok ("FROM x\n"
                             "ENV A=\"x y\" B=z\\ w C='q $r' D=\"say \\\"hi\\\"\" E= F=$HOME/bin\n"
                             "ENV GREETING hello \"big\" world\n"
                             "ENV MSG=\"it's $A\"\n"
                             "ENV K1=v1 \\\n    K2=\"multi \\\n    line\"\n");
  const ib_instr_t *in = r->stages[0].instrs;
  assert_int_equal (in[1].n_kvs, 6);
  assert_string_equal (kv (&in[1], "A")->value, "x y");
  assert_string_equal (kv (&in[1], "A")->raw, "\"x y\"");
  assert_string_equal (kv (&in[1], "B")->value, "z w");
  assert_string_equal (kv (&in[1], "B")->raw, "z\\ w");
  assert_string_equal (kv (&in[1], "C")->value, "q $r");
  assert_string_equal (kv (&in[1], "C")->raw, "'q $r'");
  assert_string_equal (kv (&in[1], "D")->value, "say \"hi\"");
  assert_string_equal (kv (&in[1], "E")->value, "");
  assert_string_equal (kv (&in[1], "E")->raw, "");
  assert_string_equal (kv (&in[1], "F")->value, "$HOME/bin");

  assert_int_equal (in[2].n_kvs, 1);
  assert_string_equal (in[2].kvs[0].key, "GREETING");
  assert_string_equal (in[2].kvs[0].value, "hello big world");
  assert_string_equal (in[2].kvs[0].raw, "hello \"big\" world");

  assert_string_equal (kv (&in[3], "MSG")->value, "it's $A");
  assert_string_equal (kv (&in[4], "K2")->value, "multi     line");

  /* The builder expands raw with ib_expand_word: single quotes protect,
   * double quotes do not, and an apostrophe inside "..." is plain. */
  const char *const env[] = { "A=alpha", "r=ERR", "HOME=/root", NULL };
  struct
  {
    const ib_kv_t *kv;
    const char *want;
  } cases[] = {
    { kv (&in[1], "A"), "x y" },           { kv (&in[1], "B"), "z w" },
    { kv (&in[1], "C"), "q $r" },          { kv (&in[1], "D"), "say \"hi\"" },
    { kv (&in[1], "F"), "/root/bin" },     { &in[2].kvs[0], "hello big world" },
    { kv (&in[3], "MSG"), "it's alpha" },
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    {
      char *out = NULL;
      ib_error_t err = NULL;
      assert_int_equal (ib_expand_word (cases[i].kv->raw, r->escape, lookup_tbl, (void *) env,
                                        &out, &err),
                        0);
      assert_string_equal (out, cases[i].want);
      free (out);
    }
  ib_recipe_free (r);

  assert_err_contains ("FROM x\nENV\n", "test.recipe:2: expected 'ENV NAME=VALUE ...'");
  assert_err_contains ("FROM x\nENV ONLYKEY\n", "test.recipe:2: expected 'ENV NAME VALUE'");
  assert_err_is ("FROM x\nENV A=1 B\n", "test.recipe:2:9: expected NAME=VALUE, got 'B'");
  assert_err_contains ("FROM x\nENV A=\"open\n", "test.recipe:2:7: expected a closing quote");
  assert_err_contains ("FROM x\nENV =v\n", "test.recipe:2:5: ENV needs a non-empty name");
}

static void
test_label_and_arg (void **state)
{
  (void) state;
  ib_recipe_t *r = parse_ok ("FROM x\n"
                             "LABEL \"com.example.vendor\"=\"ACME Inc\" version=1.0 \\\n"
                             "      description=\"a \\\n"
                             "multi-line\" empty=\"\"\n"
                             "LABEL maintainer Jane Doe <jane@example.org>\n"
                             "ARG V=1 W X=\"a b\"\n"
                             "MAINTAINER Someone <s@example.org>\n");
  const ib_instr_t *in = r->stages[0].instrs;
  assert_int_equal (in[1].n_kvs, 4);
  assert_string_equal (in[1].kvs[0].key, "com.example.vendor");
  assert_string_equal (in[1].kvs[0].value, "ACME Inc");
  assert_string_equal (in[1].kvs[1].key, "version");
  assert_string_equal (in[1].kvs[1].value, "1.0");
  assert_string_equal (in[1].kvs[2].value, "a multi-line");
  assert_string_equal (in[1].kvs[3].value, "");
  assert_string_equal (in[2].kvs[0].key, "maintainer");
  assert_string_equal (in[2].kvs[0].value, "Jane Doe <jane@example.org>");
  assert_int_equal (in[3].kind, IB_I_ARG);
  assert_int_equal (in[3].n_kvs, 3);
  assert_string_equal (in[3].kvs[0].value, "1");
  assert_null (in[3].kvs[1].value);
  assert_string_equal (in[3].kvs[2].value, "a b");
  assert_int_equal (in[4].kind, IB_I_MAINTAINER);
  assert_string_equal (in[4].text, "Someone <s@example.org>");
  ib_recipe_free (r);

  assert_err_is ("FROM x\nARG\n", "test.recipe:2: expected 'ARG NAME[=DEFAULT]', got 'ARG'");
  assert_err_contains ("FROM x\nARG =1\n", "test.recipe:2:5: expected 'ARG NAME[=DEFAULT]'");
  assert_err_contains ("FROM x\nLABEL\n", "test.recipe:2:");
}

static void
test_copy_and_flags (void **state)
{
  (void) state;
  ib_recipe_t *r = parse_ok ("FROM x\n"
                             "COPY --from=build --chown=1:1 a b /dst/\n"
                             "COPY [\"with space\", \"/d st/\"]\n"
                             "ADD --chmod=0755 --link tool.sh /usr/bin/\n"
                             "COPY --link=false --exclude=*.pyc --exclude=.git \"a b\" c\\ d /x\n"
                             "RUN --mount=type=cache,target=/root/.cache "
                             "--mount=type=bind,source=.,target=/src --device=nvidia.com/gpu=all "
                             "pip wheel .\n"
                             "RUN -- --not-a-flag\n"
                             "COPY --chown=\"user name\" a /b\n"
                             "WORKDIR --not-a-flag\n");
  const ib_instr_t *in = r->stages[0].instrs;

  assert_strv (in[1].flags, "--from=build", "--chown=1:1", NULL);
  assert_string_equal (ib_instr_flag (&in[1], "from"), "build");
  assert_string_equal (ib_instr_flag (&in[1], "--chown"), "1:1");
  assert_null (ib_instr_flag (&in[1], "chmod"));
  assert_null (ib_instr_flag (&in[1], "fro"));
  assert_false (in[1].json_form);
  assert_strv (in[1].args, "a", "b", "/dst/", NULL);
  assert_string_equal (in[1].text, "a b /dst/");

  assert_true (in[2].json_form);
  assert_strv (in[2].args, "with space", "/d st/", NULL);
  assert_strv (in[2].flags, NULL);

  assert_int_equal (in[3].kind, IB_I_ADD);
  assert_strv (in[3].flags, "--chmod=0755", "--link=true", NULL);
  assert_string_equal (ib_instr_flag (&in[3], "link"), "true");
  assert_strv (in[3].args, "tool.sh", "/usr/bin/", NULL);

  assert_string_equal (ib_instr_flag (&in[4], "link"), "false");
  char **ex = ib_instr_flag_values (&in[4], "exclude");
  assert_strv (ex, "*.pyc", ".git", NULL);
  ib_strv_free (ex);
  assert_strv (in[4].args, "\"a b\"", "c\\ d", "/x", NULL);

  char **mounts = ib_instr_flag_values (&in[5], "--mount");
  assert_strv (mounts, "type=cache,target=/root/.cache", "type=bind,source=.,target=/src", NULL);
  ib_strv_free (mounts);
  assert_string_equal (ib_instr_flag (&in[5], "device"), "nvidia.com/gpu=all");
  assert_string_equal (in[5].text, "pip wheel .");
  char **none = ib_instr_flag_values (&in[5], "exclude");
  assert_strv (none, NULL);
  ib_strv_free (none);

  assert_strv (in[6].flags, NULL);
  assert_string_equal (in[6].text, "--not-a-flag");
  assert_string_equal (ib_instr_flag (&in[7], "chown"), "user name");
  assert_string_equal (in[8].text, "--not-a-flag");
  ib_recipe_free (r);

  assert_err_is ("FROM x\nCOPY onlyone\n",
                 "test.recipe:2: COPY needs at least one source and a destination, got 'COPY "
                 "onlyone'");
  assert_err_contains ("FROM x\nADD\n", "test.recipe:2: ADD needs at least one source");
  assert_err_contains ("FROM x\nCOPY [\"a\"]\n", "COPY needs at least one source");
  assert_err_is ("FROM x\nCOPY --frm=a b c\n",
                 "test.recipe:2:6: COPY accepts --from, --chown, --chmod, --link, --parents, "
                 "--exclude, --repair, --repair-exclude, got '--frm=a'");
  assert_err_contains ("FROM x\nADD --from=a b c\n", "ADD accepts");
  assert_err_contains ("FROM x\nCOPY --link=maybe a b\n", "--link takes true or false");
  assert_err_contains ("FROM x\nCOPY --from a b\n", "--from needs a value");
  assert_err_contains ("FROM x\nCOPY --from= a b\n", "--from needs a value");
  assert_err_contains ("FROM x\nCOPY --from=a --from=b c d\n", "--from may be given once");
  assert_err_contains ("FROM x\nRUN --privileged true\n", "RUN accepts --mount");
  assert_err_contains ("FROM --foo=1 x\n", "test.recipe:1:6: FROM accepts --platform");
}

static void
test_other_instructions (void **state)
{
  (void) state;
  ib_recipe_t *r = parse_ok ("FROM x\n"
                             "USER 1000:1000\n"
                             "STOPSIGNAL SIGTERM\n"
                             "EXPOSE 80/tcp  443 ${PORT}\n"
                             "VOLUME /data /cache\n"
                             "VOLUME [\"/a b\"]\n"
                             "workdir   /opt/app  \n");
  const ib_instr_t *in = r->stages[0].instrs;
  assert_string_equal (in[1].text, "1000:1000");
  assert_null (in[1].args);
  assert_int_equal (in[2].kind, IB_I_STOPSIGNAL);
  assert_string_equal (in[2].text, "SIGTERM");
  assert_strv (in[3].args, "80/tcp", "443", "${PORT}", NULL);
  assert_false (in[4].json_form);
  assert_strv (in[4].args, "/data", "/cache", NULL);
  assert_true (in[5].json_form);
  assert_strv (in[5].args, "/a b", NULL);
  assert_string_equal (in[6].text, "/opt/app");
  ib_recipe_free (r);

  assert_err_is ("FROM x\nWORKDIR\n", "test.recipe:2: WORKDIR needs a path, got 'WORKDIR'");
  assert_err_contains ("FROM x\nUSER  \n", "test.recipe:2: USER needs");
  assert_err_contains ("FROM x\nEXPOSE\n", "test.recipe:2: EXPOSE needs at least one port");
  assert_err_contains ("FROM x\nVOLUME []\n", "test.recipe:2: VOLUME needs at least one path");
}

static void
test_output (void **state)
{
  (void) state;
  ib_recipe_t *r = parse_ok ("FROM x\n"
                             "OUTPUT type=local,dest=dist,src=/wheels\n"
                             "OUTPUT Type=oci, dest=out/oci ,name=demo:1\n"
                             "OUTPUT type=registry,\"name=localhost:5000/a:b\",push=true\n"
                             "OUTPUT type=docker dest=img.tar \"name=a,b\"\n"
                             "OUTPUT type=tar,dest=rootfs.tar\n"
                             "OUTPUT type=image,name=\"quoted\"\"q\"\n");
  const ib_instr_t *in = r->stages[0].instrs;
  assert_int_equal (in[1].kind, IB_I_OUTPUT);
  assert_string_equal (in[1].keyword, "OUTPUT");
  assert_string_equal (in[1].text, "type=local,dest=dist,src=/wheels");
  assert_int_equal (in[1].n_kvs, 3);
  assert_string_equal (in[1].kvs[0].key, "type");
  assert_string_equal (in[1].kvs[0].value, "local");
  assert_string_equal (in[1].kvs[1].key, "dest");
  assert_string_equal (in[1].kvs[1].value, "dist");
  assert_string_equal (in[1].kvs[2].key, "src");
  assert_string_equal (in[1].kvs[2].value, "/wheels");
  assert_string_equal (kv (&in[2], "type")->value, "oci");
  assert_string_equal (kv (&in[2], "dest")->value, "out/oci");
  assert_string_equal (kv (&in[2], "name")->value, "demo:1");
  assert_string_equal (kv (&in[3], "name")->value, "localhost:5000/a:b");
  assert_string_equal (kv (&in[3], "push")->value, "true");
  assert_string_equal (kv (&in[4], "name")->value, "a,b");
  assert_string_equal (kv (&in[4], "dest")->value, "img.tar");
  assert_string_equal (kv (&in[5], "type")->value, "tar");
  assert_string_equal (kv (&in[6], "name")->value, "quoted\"q");
  ib_recipe_free (r);

  assert_err_is ("FROM x\nOUTPUT type=zip,dest=a\n",
                 "test.recipe:2: expected OUTPUT type local, image, oci, docker, registry or "
                 "tar, got 'zip'");
  assert_err_contains ("FROM x\nOUTPUT dest=a\n", "test.recipe:2: expected 'OUTPUT type=");
  assert_err_contains ("FROM x\nOUTPUT\n", "test.recipe:2: expected 'OUTPUT type=");
  assert_err_is ("FROM x\nOUTPUT type=local,dist\n",
                 "test.recipe:2:19: expected OUTPUT option key=value, got 'dist'");
  assert_err_contains ("FROM x\nOUTPUT type=local\n", "OUTPUT type=local needs dest=");
  assert_err_contains ("FROM x\nOUTPUT type=image,dest=x\n", "OUTPUT type=image needs name=");
  assert_err_contains ("FROM x\nOUTPUT type=local,dest=a,dest=b\n", "got 'dest=b' again");
  assert_err_is ("FROM x\nOUTPUT type=image,name=a,pusj=true\n",
                 "test.recipe:2: OUTPUT type=image: unknown key 'pusj' (accepted: type, name, push)");
  assert_err_is ("FROM x\nOUTPUT type=local,dest=a,repair-excl=x\n",
                 "test.recipe:2: OUTPUT type=local: unknown key 'repair-excl' (accepted: type, "
                 "dest, src, require, repair, repair-exclude)");
  assert_err_contains ("FROM x\nOUTPUT type=docker,dest=a,tar=false\n", "unknown key 'tar'");
  assert_err_contains ("FROM x\nOUTPUT type=local,dest=a,compression=gzip\n",
                       "unknown key 'compression'");
  assert_err_is ("FROM x\nOUTPUT type=registry,name=a,push=yes\n",
                 "test.recipe:2: OUTPUT push=yes: expected true or false");
  assert_err_contains ("FROM x\nOUTPUT type=local,dest=-\n",
                       "OUTPUT type=local,dest=-: a directory cannot go to stdout");
  assert_err_contains ("FROM x\nOUTPUT type=oci,dest=-,tar=false\n",
                       "OUTPUT type=oci,dest=-: a directory cannot go to stdout");
  assert_err_is ("FROM x\nOUTPUT type=oci,dest=a,tar=1\n",
                 "test.recipe:2: OUTPUT tar=1: expected true or false");
  assert_err_contains ("FROM x\nOUTPUT type=local,\"dest=a\n", "expected a closing double quote");
  assert_err_contains ("FROM x\nOUTPUT =x,type=local\n", "expected OUTPUT option key=value");
}

static void
test_healthcheck (void **state)
{
  (void) state;
  ib_recipe_t *r = parse_ok ("FROM x\n"
                             "HEALTHCHECK --interval=30s --timeout=3s --retries=2 \\\n"
                             "  CMD curl -f http://localhost/ || exit 1\n"
                             "healthcheck cmd [\"/bin/check\", \"--quick\"]\n"
                             "HEALTHCHECK none\n");
  const ib_stage_t *st = &r->stages[0];
  assert_int_equal (st->n_instrs, 4);
  const ib_instr_t *a = &st->instrs[1], *b = &st->instrs[2], *c = &st->instrs[3];
  assert_int_equal (a->kind, IB_I_HEALTHCHECK);
  assert_false (a->json_form);
  assert_null (a->args);
  assert_string_equal (a->text, "curl -f http://localhost/ || exit 1");
  assert_string_equal (ib_instr_flag (a, "interval"), "30s");
  assert_string_equal (ib_instr_flag (a, "timeout"), "3s");
  assert_string_equal (ib_instr_flag (a, "retries"), "2");
  assert_true (b->json_form);
  assert_int_equal (ib_strv_len (b->args), 2);
  assert_string_equal (b->args[0], "/bin/check");
  assert_string_equal (b->args[1], "--quick");
  assert_false (c->json_form);
  assert_non_null (c->args);
  assert_string_equal (c->args[0], "NONE");
  ib_recipe_free (r);
}

static void
test_errors (void **state)
{
  (void) state;
  assert_err_is ("FROM x\n\nFOO bar\n", "test.recipe:3:1: unknown instruction 'FOO'");
  /* a typo gets the instruction meant (edit distance 1, or 2 past 5 letters) */
  assert_err_is ("FROM x\nRUNN make\n",
                 "test.recipe:2:1: unknown instruction 'RUNN' (did you mean RUN?)");
  assert_err_is ("FROM x\nCOPPY . /\n",
                 "test.recipe:2:1: unknown instruction 'COPPY' (did you mean COPY?)");
  assert_err_is ("FROM x\nentrypiont [\"a\"]\n",
                 "test.recipe:2:1: unknown instruction 'entrypiont' (did you mean ENTRYPOINT?)");
  assert_err_is ("FROM x\nWRKDIR /a\n",
                 "test.recipe:2:1: unknown instruction 'WRKDIR' (did you mean WORKDIR?)");
  /* nothing near enough: no guess */
  assert_err_is ("FROM x\nPIP install x\n", "test.recipe:2:1: unknown instruction 'PIP'");
  assert_err_is ("FROM x\nRUN a \\\n b\nfrobnicate\n",
                 "test.recipe:4:1: unknown instruction 'frobnicate'");
  assert_err_is ("RUN echo\n", "test.recipe:1:1: expected FROM, got 'RUN'");
  assert_err_is ("# c\nARG A\nENV B=1\nFROM x\n", "test.recipe:3:1: expected FROM, got 'ENV'");
  assert_err_is ("ARG A\nOUTPUT type=local,dest=x\n", "test.recipe:2:1: expected FROM, got 'OUTPUT'");
  assert_err_is ("", "test.recipe:1: expected FROM, got end of file");
  assert_err_is ("# only a comment\n\nARG X\n", "test.recipe:3: expected FROM, got end of file");
  assert_err_is ("FROM x\nHEALTHCHECK true\n",
                 "test.recipe:2: HEALTHCHECK needs CMD command or NONE, got 'true'");
  assert_err_is ("FROM x\nHEALTHCHECK CMD\n",
                 "test.recipe:2: HEALTHCHECK CMD needs a command, got 'CMD'");
  assert_err_is ("FROM x\nHEALTHCHECK --interval=5s NONE\n",
                 "test.recipe:2: HEALTHCHECK NONE takes no options, got '--interval=5s'");
  assert_err_contains ("FROM x\nHEALTHCHECK --every=5s CMD true\n", "--every");
  assert_err_is ("FROM a b\n",
                 "test.recipe:1: expected 'FROM [--platform=P] IMAGE [AS NAME]', got 'FROM a b'");
  assert_err_contains ("FROM a AS b c\n", "test.recipe:1: expected 'FROM");
  assert_err_contains ("FROM\n", "test.recipe:1: expected 'FROM");
  assert_err_contains ("FROM a AS 1st\n", "a stage name starts with a letter");
  assert_err_contains ("FROM a AS b/c\n", "got 'b/c'");

  /* Columns: the physical line and 1-based byte column of the offending text,
   * also on continuation lines, after a BOM, with CRLF and indentation. */
  assert_err_is ("FROM x\nRUN --network=none \\\n  --bad=1 true\n",
                 "test.recipe:3:3: RUN accepts --mount, --network, --device, --security, got "
                 "'--bad=1'");
  assert_err_is ("\xef\xbb\xbf" "FROM x\r\n\t  BOGUS x\r\n",
                 "test.recipe:2:4: unknown instruction 'BOGUS'");
  assert_err_is ("FROM x\nHEALTHCHECK --retries=3 CMD [\"a\", 2]\n",
                 "test.recipe:2:29: expected a JSON array of strings, got '[\"a\", 2]'");
  assert_err_is ("FROM x\nENV A=1 \\\n# comment\n\n    B=\"x\n",
                 "test.recipe:5:7: expected a closing quote in ENV value, got '\"x'");
  assert_err_is ("FROM a AS b\nFROM c \\\n  AS 9x\n",
                 "test.recipe:3:6: a stage name starts with a letter and holds only letters, "
                 "digits, '-', '_' and '.', got '9x'");
  assert_err_is ("FROM x\nCOPY --chmod=644 \\\n--chmod=600 a b\n",
                 "test.recipe:3:1: --chmod may be given once, got '--chmod=600' again");

  /* Not heredocs. */
  ib_recipe_t *r = parse_ok ("FROM x\n"
                             "RUN echo $((1<<2)) \"a <<EOF\" '<<X' && x=$((3 << 1))\n");
  ib_recipe_free (r);

  /* Control characters in offending text are masked: one line. */
  char *msg = parse_err ("FROM x\nBAD\x01\x1b[31m\n");
  assert_null (strchr (msg, '\x1b'));
  assert_non_null (strstr (msg, "unknown instruction 'BAD??[31m'"));
  free (msg);

  /* Long offending text is cut. */
  char longline[400];
  memset (longline, 'Z', sizeof longline - 1);
  longline[sizeof longline - 1] = '\0';
  char *text = xasprintf ("FROM x\n%s\n", longline);
  msg = parse_err (text);
  assert_true (strlen (msg) < 200);
  assert_non_null (strstr (msg, "...'"));
  free (msg);
  free (text);

  /* NULL text; NULL err is allowed. */
  ib_recipe_t *out = NULL;
  ib_error_t err = NULL;
  assert_int_equal (ib_recipe_parse ("p", NULL, &out, &err), -1);
  assert_null (out);
  ib_error_free (&err);
  assert_int_equal (ib_recipe_parse ("p", "RUN x", &out, NULL), -1);
  assert_null (out);
  ib_recipe_free (NULL);
}

/* ------------------------------------------------------------------ */
/* heredocs                                                           */
/* ------------------------------------------------------------------ */

static const ib_instr_t *
instr_at (const ib_recipe_t *r, size_t stage, size_t i)
{
  assert_true (stage < r->n_stages);
  assert_true (i < r->stages[stage].n_instrs);
  return &r->stages[stage].instrs[i];
}

static void
assert_heredoc (const ib_heredoc_t *h, const char *name, const char *content, bool chomp,
                bool expand, int line, int arg)
{
  assert_string_equal (h->name, name);
  assert_string_equal (h->content, content);
  assert_int_equal (h->chomp, chomp);
  assert_int_equal (h->expand, expand);
  assert_int_equal (h->line, line);
  assert_int_equal (h->arg, arg);
}

static void
test_heredocs (void **state)
{
  (void) state;
  ib_recipe_t *r;
  const ib_instr_t *in;

  /* RUN <<EOF alone: the body is the script. */
  r = parse_ok ("FROM x\n"
                "RUN <<EOF\n"
                "apt-get update\n"
                "# not a comment: part of the body\n"
                "\n"
                "RUN not an instruction\n"
                "EOF\n"
                "RUN after\n");
  assert_int_equal (r->stages[0].n_instrs, 3);
  in = instr_at (r, 0, 1);
  assert_int_equal (in->kind, IB_I_RUN);
  assert_int_equal (in->line, 2);
  assert_true (in->heredoc_script);
  assert_false (in->json_form);
  assert_null (in->args);
  assert_int_equal (in->n_heredocs, 1);
  assert_heredoc (&in->heredocs[0], "EOF",
                  "apt-get update\n# not a comment: part of the body\n\nRUN not an instruction\n",
                  false, true, 3, -1);
  assert_string_equal (in->text, in->heredocs[0].content);
  in = instr_at (r, 0, 2);
  assert_int_equal (in->line, 8);
  assert_string_equal (in->text, "after");
  assert_int_equal (in->n_heredocs, 0);
  assert_null (in->heredocs);
  assert_false (in->heredoc_script);
  ib_recipe_free (r);

  /* A command with heredocs: the shell gets command line + bodies + names. */
  r = parse_ok ("FROM x\n"
                "RUN --network=none <<EOT bash\n"
                "  set -e\n"
                "  echo \"$HOME\"\n"
                "EOT\n"
                "RUN python3 <<'PY'\n"
                "print('hi')\n"
                "PY\n"
                "RUN <<A cat /dev/stdin <<\"B\" > /out\n"
                "first\n"
                "A\n"
                "second\n"
                "B\n");
  in = instr_at (r, 0, 1);
  assert_false (in->heredoc_script);
  assert_string_equal (in->text, "<<EOT bash\n  set -e\n  echo \"$HOME\"\nEOT");
  assert_strv (in->flags, "--network=none", NULL);
  assert_heredoc (&in->heredocs[0], "EOT", "  set -e\n  echo \"$HOME\"\n", false, true, 3, -1);
  in = instr_at (r, 0, 2);
  assert_int_equal (in->line, 6);
  assert_string_equal (in->text, "python3 <<'PY'\nprint('hi')\nPY");
  assert_heredoc (&in->heredocs[0], "PY", "print('hi')\n", false, false, 7, -1);
  in = instr_at (r, 0, 3);
  assert_int_equal (in->line, 9);
  assert_int_equal (in->n_heredocs, 2);
  assert_heredoc (&in->heredocs[0], "A", "first\n", false, true, 10, -1);
  assert_heredoc (&in->heredocs[1], "B", "second\n", false, false, 12, -1);
  assert_string_equal (in->text, "<<A cat /dev/stdin <<\"B\" > /out\nfirst\nA\nsecond\nB");
  ib_recipe_free (r);

  /* <<-: tabs (only tabs) removed from the body and before the terminator;
   * the RUN text keeps them (the shell removes them itself). */
  r = parse_ok ("FROM x\n"
                "RUN <<-EOF\n"
                "\techo a\n"
                "\t\t  echo b\n"
                "  \techo c\n"
                "\t\tEOF\n"
                "RUN cat <<-'X' >/f\n"
                "\tkeep\n"
                "\tX\n"
                "RUN cat <<EOF\n"
                "\tEOF\n"
                "EOF\n");
  in = instr_at (r, 0, 1);
  assert_true (in->heredoc_script);
  assert_heredoc (&in->heredocs[0], "EOF", "echo a\n  echo b\n  \techo c\n", true, true, 3, -1);
  assert_string_equal (in->text, "echo a\n  echo b\n  \techo c\n");
  in = instr_at (r, 0, 2);
  assert_int_equal (in->line, 7);
  assert_heredoc (&in->heredocs[0], "X", "keep\n", true, false, 8, -1);
  assert_string_equal (in->text, "cat <<-'X' >/f\n\tkeep\nX");
  in = instr_at (r, 0, 3);
  assert_int_equal (in->line, 10);
  assert_heredoc (&in->heredocs[0], "EOF", "\tEOF\n", false, true, 11, -1);
  ib_recipe_free (r);

  /* COPY/ADD: heredoc sources keep their word in args; dest is a path. */
  r = parse_ok ("FROM x\n"
                "COPY <<EOF /etc/motd\n"
                "Hello $USER\n"
                "EOF\n"
                "COPY --chmod=755 <<a.sh <<\"b.sh\" ./plain /dest/\n"
                "echo a\n"
                "a.sh\n"
                "echo b\n"
                "b.sh\n"
                "ADD <<-'conf' /etc/app.conf\n"
                "\tkey=1\n"
                "\tconf\n"
                "COPY a b\n");
  in = instr_at (r, 0, 1);
  assert_int_equal (in->kind, IB_I_COPY);
  assert_strv (in->args, "<<EOF", "/etc/motd", NULL);
  assert_heredoc (&in->heredocs[0], "EOF", "Hello $USER\n", false, true, 3, 0);
  assert_string_equal (in->text, "<<EOF /etc/motd");
  assert_ptr_equal (ib_instr_heredoc (in, 0), &in->heredocs[0]);
  assert_null (ib_instr_heredoc (in, 1));
  in = instr_at (r, 0, 2);
  assert_int_equal (in->line, 5);
  assert_strv (in->args, "<<a.sh", "<<\"b.sh\"", "./plain", "/dest/", NULL);
  assert_heredoc (&in->heredocs[0], "a.sh", "echo a\n", false, true, 6, 0);
  assert_heredoc (&in->heredocs[1], "b.sh", "echo b\n", false, false, 8, 1);
  assert_ptr_equal (ib_instr_heredoc (in, 1), &in->heredocs[1]);
  assert_null (ib_instr_heredoc (in, 2));
  in = instr_at (r, 0, 3);
  assert_int_equal (in->kind, IB_I_ADD);
  assert_int_equal (in->line, 10);
  assert_heredoc (&in->heredocs[0], "conf", "key=1\n", true, false, 11, 0);
  in = instr_at (r, 0, 4);
  assert_int_equal (in->line, 13);
  assert_null (ib_instr_heredoc (in, 0));
  ib_recipe_free (r);

  /* Continuation lines before the body; empty body; CRLF keeps "\r\n" in the
   * body; a terminator with trailing text is not one. */
  r = parse_ok ("FROM x\r\n"
                "RUN cat <<EOF \\\r\n"
                "  > /f\r\n"
                "a\r\n"
                "EOF \r\n"
                "EOF\r\n"
                "RUN cat <<EOF\r\n"
                "EOF\r\n"
                "USER u\r\n");
  in = instr_at (r, 0, 1);
  assert_string_equal (in->text, "cat <<EOF   > /f\na\r\nEOF \r\nEOF");
  assert_heredoc (&in->heredocs[0], "EOF", "a\r\nEOF \r\n", false, true, 4, -1);
  in = instr_at (r, 0, 2);
  assert_int_equal (in->line, 7);
  assert_heredoc (&in->heredocs[0], "EOF", "", false, true, 8, -1);
  assert_string_equal (in->text, "cat <<EOF\nEOF");
  assert_int_equal (instr_at (r, 0, 3)->line, 9);
  ib_recipe_free (r);

  /* Not heredocs: exec form, other instructions, quoted or glued words. */
  r = parse_ok ("FROM x\n"
                "RUN [\"cat\", \"<<EOF\"]\n"
                "CMD cat <<EOF\n"
                "RUN echo '<<EOF' \"<<X\" a<<B $((1<<2)) << C\n");
  assert_int_equal (instr_at (r, 0, 1)->n_heredocs, 0);
  assert_int_equal (instr_at (r, 0, 2)->n_heredocs, 0);
  assert_int_equal (instr_at (r, 0, 3)->n_heredocs, 0);
  assert_string_equal (instr_at (r, 0, 3)->text, "echo '<<EOF' \"<<X\" a<<B $((1<<2)) << C");
  ib_recipe_free (r);

  /* Errors. */
  assert_err_is ("FROM x\nRUN cat <<EOF\nhello\n",
                 "test.recipe:2:9: unterminated heredoc '<<EOF': expected a line 'EOF', got end "
                 "of file");
  assert_err_is ("FROM x\nCOPY <<A <<B /d\nA\nA\n",
                 "test.recipe:2:10: unterminated heredoc '<<B': expected a line 'B', got end of "
                 "file");
  assert_err_is ("FROM x\nRUN cat \\\n  <<-EOF\n  EOF\n",
                 "test.recipe:3:3: unterminated heredoc '<<-EOF': expected a line 'EOF', got end "
                 "of file");
  assert_err_is ("FROM x\nCOPY a <<EOF\nx\nEOF\n",
                 "test.recipe:2:8: COPY cannot accept a heredoc as a destination, got '<<EOF'");
  assert_err_is ("FROM x\nRUN cat <<\"EOF\n",
                 "test.recipe:2:9: expected a closing quote in the heredoc delimiter, got "
                 "'<<\"EOF'");
  assert_err_is ("FROM x\nRUN cat <<''\n\n",
                 "test.recipe:2:9: expected a heredoc delimiter after '<<', got '<<'''");
  /* The lines of a heredoc on CMD are instructions. */
  assert_err_is ("FROM x\nCMD cat <<EOF\nhello\nEOF\n",
                 "test.recipe:3:1: unknown instruction 'hello'");
  /* Line numbers after bodies stay right. */
  assert_err_is ("FROM x\nRUN <<EOF\na\nb\nEOF\n\nBAD\n",
                 "test.recipe:7:1: unknown instruction 'BAD'");
}

static void
test_onbuild (void **state)
{
  (void) state;
  ib_recipe_t *r;
  const ib_instr_t *in;

  r = parse_ok ("FROM x\n"
                "ONBUILD ADD . /app/src\n"
                "onbuild   run --mount=type=cache,target=/c \\\n"
                "    make  \n"
                "ONBUILD COPY <<EOF /etc/motd\n"
                "hi $USER\n"
                "EOF\n"
                "ONBUILD RUN <<-EOF\n"
                "\techo a\n"
                "\tEOF\n"
                "ONBUILD ENV A=1 B=\"two words\"\n"
                "ONBUILD HEALTHCHECK --interval=5s CMD [\"true\"]\n"
                "USER after\n");
  assert_int_equal (r->stages[0].n_instrs, 8);

  in = instr_at (r, 0, 1);
  assert_int_equal (in->kind, IB_I_ONBUILD);
  assert_string_equal (in->keyword, "ONBUILD");
  assert_int_equal (in->line, 2);
  assert_string_equal (in->text, "ADD . /app/src");
  assert_strv (in->flags, NULL);
  assert_null (in->args);
  assert_int_equal (in->n_kvs, 0);
  assert_int_equal (in->n_heredocs, 0);
  assert_non_null (in->trigger);
  assert_int_equal (in->trigger->kind, IB_I_ADD);
  assert_int_equal (in->trigger->line, 2);
  assert_strv (in->trigger->args, ".", "/app/src", NULL);
  assert_null (in->trigger->trigger);

  in = instr_at (r, 0, 2);
  assert_int_equal (in->line, 3);
  assert_string_equal (in->text, "run --mount=type=cache,target=/c     make");
  assert_int_equal (in->trigger->kind, IB_I_RUN);
  assert_strv (in->trigger->flags, "--mount=type=cache,target=/c", NULL);
  assert_string_equal (in->trigger->text, "make");

  /* Heredocs of the trigger: bodies appended to the text as BuildKit does. */
  in = instr_at (r, 0, 3);
  assert_int_equal (in->line, 5);
  assert_string_equal (in->text, "COPY <<EOF /etc/motd\nhi $USER\nEOF");
  assert_int_equal (in->n_heredocs, 0);
  assert_int_equal (in->trigger->n_heredocs, 1);
  assert_heredoc (&in->trigger->heredocs[0], "EOF", "hi $USER\n", false, true, 6, 0);
  in = instr_at (r, 0, 4);
  assert_int_equal (in->line, 8);
  assert_string_equal (in->text, "RUN <<-EOF\n\techo a\nEOF");
  assert_true (in->trigger->heredoc_script);
  assert_string_equal (in->trigger->text, "echo a\n");

  in = instr_at (r, 0, 5);
  assert_int_equal (in->line, 11);
  assert_int_equal (in->trigger->kind, IB_I_ENV);
  assert_string_equal (kv (in->trigger, "B")->value, "two words");
  in = instr_at (r, 0, 6);
  assert_int_equal (in->trigger->kind, IB_I_HEALTHCHECK);
  assert_true (in->trigger->json_form);
  assert_string_equal (ib_instr_flag (in->trigger, "interval"), "5s");
  in = instr_at (r, 0, 7);
  assert_int_equal (in->kind, IB_I_USER);
  assert_int_equal (in->line, 13);
  assert_string_equal (in->text, "after");
  ib_recipe_free (r);

  /* Docker's messages for forbidden triggers; the trigger must parse. */
  assert_err_is ("FROM x\nONBUILD ONBUILD RUN true\n",
                 "test.recipe:2:9: Chaining ONBUILD via `ONBUILD ONBUILD` isn't allowed");
  assert_err_is ("FROM x\nONBUILD from scratch\n",
                 "test.recipe:2:9: FROM isn't allowed as an ONBUILD trigger");
  assert_err_is ("FROM x\nONBUILD  MAINTAINER me\n",
                 "test.recipe:2:10: MAINTAINER isn't allowed as an ONBUILD trigger");
  assert_err_is ("FROM x\nONBUILD\n", "test.recipe:2: ONBUILD needs an instruction, got 'ONBUILD'");
  assert_err_is ("FROM x\nONBUILD RUN\n", "test.recipe:2: RUN needs a command, got 'RUN'");
  assert_err_is ("FROM x\nONBUILD FOO bar\n", "test.recipe:2:9: unknown instruction 'FOO'");
  assert_err_is ("FROM x\nONBUILD COPY --form=a b c\n",
                 "test.recipe:2:14: COPY accepts --from, --chown, --chmod, --link, --parents, "
                 "--exclude, --repair, --repair-exclude, got '--form=a'");
  assert_err_is ("FROM x\nONBUILD RUN cat <<EOF\n",
                 "test.recipe:2:17: unterminated heredoc '<<EOF': expected a line 'EOF', got end "
                 "of file");
  assert_err_is ("ONBUILD RUN true\nFROM x\n", "test.recipe:1:1: expected FROM, got 'ONBUILD'");
}

/* ------------------------------------------------------------------ */
/* expansion                                                          */
/* ------------------------------------------------------------------ */

static void
test_expand (void **state)
{
  (void) state;
  assert_expand ("", "");
  assert_expand ("plain", "plain");
  assert_expand ("$A", "alpha");
  assert_expand ("${A}", "alpha");
  assert_expand ("x$A-y", "xalpha-y");
  assert_expand ("${A}_$B", "alpha_beta");
  assert_expand ("$Ax", "");
  assert_expand ("$UNSET|${UNSET}", "|");
  assert_expand ("$N1$1", "one");
  /* Substituted values are not re-scanned. */
  assert_expand ("$Q", "it's \"$A\" ${B}");
  assert_expand ("\"$Q\"", "\"it's \"$A\" ${B}\"");

  assert_expand ("${A:-def}", "alpha");
  assert_expand ("${UNSET:-def}", "def");
  assert_expand ("${EMPTY:-def}", "def");
  assert_expand ("${EMPTY-def}", "");
  assert_expand ("${UNSET-def}", "def");
  assert_expand ("${A:+alt}", "alt");
  assert_expand ("${EMPTY:+alt}", "");
  assert_expand ("${EMPTY+alt}", "alt");
  assert_expand ("${UNSET+alt}", "");
  assert_expand ("${UNSET:+alt}", "");
  assert_expand ("${UNSET:-}", "");
  assert_expand ("${UNSET:-a b c}", "a b c");

  /* Recursive words. */
  assert_expand ("${UNSET:-${B}}", "beta");
  assert_expand ("${UNSET:-${UNSET2:-$A}x}", "alphax");
  assert_expand ("${A:+[${B}]}", "[beta]");
  assert_expand ("${UNSET:-pre${A}post}", "prealphapost");

  /* Patterns. */
  assert_expand ("${V#v}", "1.2.3");
  assert_expand ("${V#*.}", "2.3");
  assert_expand ("${V##*.}", "3");
  assert_expand ("${V%.*}", "v1.2");
  assert_expand ("${V%%.*}", "v1");
  assert_expand ("${PATHV##*/}", "python3");
  assert_expand ("${V#nomatch}", "v1.2.3");
  assert_expand ("${UNSET#x}", "");

  /* Literal '$'. */
  assert_expand ("$", "$");
  assert_expand ("a$", "a$");
  assert_expand ("$ x", "$ x");
  assert_expand ("$-", "$-");
  assert_expand ("$$", "$$");
  assert_expand ("100$/", "100$/");
  assert_expand ("$(cmd)", "$(cmd)");

  /* Escapes: only before '$' is the escape removed. */
  assert_expand ("\\$A", "$A");
  assert_expand ("\\${A}", "${A}");
  assert_expand ("a\\ b", "a\\ b");
  assert_expand ("\\\\$A", "\\\\alpha");
  assert_expand ("C:\\dir", "C:\\dir");
  assert_expand ("trail\\", "trail\\");
  assert_expand ("it\\'s $A", "it\\'s alpha");

  /* Quotes are kept; single quotes stop expansion, double quotes do not. */
  assert_expand ("'$A'", "'$A'");
  assert_expand ("\"$A\"", "\"alpha\"");
  assert_expand ("\"it's $A\"", "\"it's alpha\"");
  assert_expand ("'a'$A'b'", "'a'alpha'b'");
  assert_expand ("\"\\$A\"", "\"$A\"");
  assert_expand ("\"q\\\"$A\"", "\"q\\\"alpha\"");
  assert_expand ("${UNSET:-'$A'}", "'$A'");
  assert_expand ("${UNSET:-'}'}", "'}'");
  assert_expand ("${UNSET:-x\\}y}", "x\\}y");

  /* Other escape character. */
  char *out = NULL;
  ib_error_t err = NULL;
  assert_int_equal (ib_expand ("`$A \\$A", '`', lookup_tbl, (void *) vars, &out, &err), 0);
  assert_string_equal (out, "$A \\alpha");
  free (out);
  /* NULL lookup: everything unset. */
  assert_int_equal (ib_expand ("[$A${B:-b}]", 0, NULL, NULL, &out, &err), 0);
  assert_string_equal (out, "[b]");
  free (out);

  /* Errors. */
  assert_expand_fails ("${A", "expected '}', got end of text");
  assert_expand_fails ("${", "expected '}'");
  assert_expand_fails ("x${A:-y", "expected '}'");
  assert_expand_fails ("${A:-${B}", "expected '}'");
  assert_expand_fails ("${}", "bad substitution");
  assert_expand_fails ("${:-x}", "bad substitution");
  assert_expand_fails ("${A:", "expected '}'");
  assert_expand_fails ("${A*}", "unsupported modifier");
  assert_expand_fails ("${A:=x}", "unsupported modifier");
  assert_expand_fails ("'open", "closing single quote");
  assert_expand_fails ("\"open $A", "closing double quote");
  assert_expand_fails ("${UNSET?must be set}", "UNSET: must be set");
  assert_expand_fails ("${EMPTY:?}", "EMPTY: is unset or empty");
  assert_expand ("${EMPTY?x}", "");
  assert_expand ("${A:?x}", "alpha");
}

static void
test_expand_word (void **state)
{
  (void) state;
  assert_expand_word ("$A", "alpha");
  assert_expand_word ("\"$SP\"", "x y");
  assert_expand_word ("'$A'", "$A");
  assert_expand_word ("\\$A", "$A");
  assert_expand_word ("a\\ b", "a b");
  assert_expand_word ("trail\\", "trail");
  assert_expand_word ("\"it's $A\"", "it's alpha");
  assert_expand_word ("it\\'s", "it's");
  assert_expand_word ("\"a\\\"b\\\\c\\$A\\x\"", "a\"b\\c$A\\x");
  assert_expand_word ("'a\\b'", "a\\b");
  assert_expand_word ("${UNSET:-\"d e\"}", "d e");
  assert_expand_word ("${UNSET:-'$A'}", "$A");
  assert_expand_word ("pre\"$A\"'$B'post", "prealpha$Bpost");
  assert_expand_word ("  spaced  out ", "  spaced  out ");
  assert_expand_word ("\"\"", "");
  assert_expand_word ("$Q", "it's \"$A\" ${B}");

  char *out = NULL;
  ib_error_t err = NULL;
  assert_int_equal (ib_expand_word ("C:\\dir `$A a` b", '`', lookup_tbl, (void *) vars, &out,
                                    &err),
                    0);
  assert_string_equal (out, "C:\\dir $A a b");
  free (out);
}

static void
test_split_words (void **state)
{
  (void) state;
  char **w;

  w = ib_split_words ("  a  b\tc\n");
  assert_strv (w, "a", "b", "c", NULL);
  ib_strv_free (w);
  w = ib_split_words ("\"a b\" 'c d' e\"f g\"h");
  assert_strv (w, "a b", "c d", "ef gh", NULL);
  ib_strv_free (w);
  w = ib_split_words ("\"q\\\"x\" \"b\\\\s\" \"d\\$\" \"k\\ep\" 'n\\o'");
  assert_strv (w, "q\"x", "b\\s", "d$", "k\\ep", "n\\o", NULL);
  ib_strv_free (w);
  w = ib_split_words ("a\\ b c\\");
  assert_strv (w, "a b", "c", NULL);
  ib_strv_free (w);
  w = ib_split_words ("\"\" ''");
  assert_strv (w, "", "", NULL);
  ib_strv_free (w);
  w = ib_split_words ("\"open quote");
  assert_strv (w, "open quote", NULL);
  ib_strv_free (w);
  w = ib_split_words ("$A ${B}");
  assert_strv (w, "$A", "${B}", NULL);
  ib_strv_free (w);
  w = ib_split_words ("");
  assert_strv (w, NULL);
  ib_strv_free (w);
  w = ib_split_words (NULL);
  assert_strv (w, NULL);
  ib_strv_free (w);
}

/* ------------------------------------------------------------------ */
/* robustness: mutated inputs must parse or fail cleanly              */
/* ------------------------------------------------------------------ */

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint64_t
rng (void)
{
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

static const char *const seeds[] = {
  "ARG BASE=localhost:5000/debian:bookworm\nFROM ${BASE} AS build\nRUN apt-get update && \\\n"
  "    apt-get install -y gcc python3-dev\nWORKDIR /src\nRUN python3 setup.py bdist_wheel\n"
  "OUTPUT type=local,dest=dist,src=/src/dist\nFROM ${BASE} AS client\n"
  "COPY --from=build /src/dist/ /opt/\nOUTPUT type=image,name=demo-client:latest\n",
  "# escape=`\nFROM x\nRUN a `\n  b\nENV A=\"x y\" B='z' C=d` e\nLABEL k v w\n",
  "FROM x\nCMD [\"a\", \"b\"]\nENTRYPOINT [\"e\"]\nSHELL [\"/bin/sh\",\"-c\"]\nVOLUME [\"/v\"]\n"
  "EXPOSE 80 443\nUSER u:g\nSTOPSIGNAL 9\nMAINTAINER m\n",
  "FROM --platform=linux/amd64 a AS b\nCOPY --chown=1:1 --link --exclude=x a b /c/\n"
  "ADD --chmod=755 f /g\nRUN --mount=type=cache,target=/c --network=none make\n",
  "FROM x\r\nARG A B=1\r\nENV K V\r\nOUTPUT type=oci,dest=o,\"name=a,b\"\r\n",
  "FROM x\nRUN <<EOF\necho a\nEOF\nRUN <<-A cat <<'B' \\\n  > /o\n\ta\n\tA\nb\nB\n"
  "COPY <<f1 <<\"f2\" /d/\n1\nf1\n2\nf2\nUSER u\n",
  "FROM x\nONBUILD RUN <<EOF\necho\nEOF\nONBUILD COPY --from=a b c\nonbuild ENV A=1\n",
};

static const char special[] = "\\`\n\r\"'${}[]#=,- \t<AS:";

static char *
mutate (const char *seed)
{
  ib_buf_t b = { 0 };
  ib_buf_puts (&b, seed);
  int rounds = 1 + (int) (rng () % 6);
  for (int k = 0; k < rounds; k++)
    {
      size_t len = b.len;
      size_t pos = len ? (size_t) (rng () % len) : 0;
      switch (rng () % 6)
        {
        case 0: /* flip a byte */
          if (len)
            b.data[pos] = (char) (1 + rng () % 255);
          break;
        case 1: /* put a special char */
          if (len)
            b.data[pos] = special[rng () % (sizeof special - 1)];
          break;
        case 2: /* insert a special char */
          {
            char c = special[rng () % (sizeof special - 1)];
            ib_buf_append (&b, "", 1); /* grow by one (content fixed below) */
            memmove (b.data + pos + 1, b.data + pos, len - pos);
            b.data[pos] = c;
            b.data[b.len] = '\0';
            break;
          }
        case 3: /* delete a chunk */
          {
            size_t n = (size_t) (rng () % 16);
            if (pos + n > len)
              n = len - pos;
            memmove (b.data + pos, b.data + pos + n, len - pos - n);
            b.len -= n;
            b.data[b.len] = '\0';
            break;
          }
        case 4: /* truncate */
          b.len = pos;
          b.data[b.len] = '\0';
          break;
        default: /* duplicate a chunk */
          {
            size_t n = (size_t) (rng () % 24);
            if (pos + n > len)
              n = len - pos;
            char *chunk = xstrndup (b.data + pos, n);
            size_t at = len ? (size_t) (rng () % len) : 0;
            char *tail = xstrdup (b.data + at);
            b.len = at;
            b.data[at] = '\0';
            ib_buf_puts (&b, chunk);
            ib_buf_puts (&b, tail);
            free (chunk);
            free (tail);
            break;
          }
        }
    }
  ib_buf_append (&b, "", 0);
  return ib_buf_steal (&b);
}

static void
exercise_expand (const char *s, char esc)
{
  char *out = NULL;
  ib_error_t err = NULL;
  if (ib_expand (s, esc, lookup_tbl, (void *) vars, &out, &err) == 0)
    {
      assert_non_null (out);
      free (out);
    }
  else
    {
      assert_null (out);
      assert_non_null (err);
      assert_null (strchr (err->msg, '\n'));
      ib_error_free (&err);
    }
  if (ib_expand_word (s, esc, lookup_tbl, (void *) vars, &out, &err) == 0)
    free (out);
  else
    {
      assert_non_null (err);
      ib_error_free (&err);
    }
  char **w = ib_split_words (s);
  assert_non_null (w);
  ib_strv_free (w);
}

static void
walk_instr (const ib_recipe_t *r, const ib_instr_t *in)
{
  assert_non_null (in->keyword);
  assert_non_null (in->text);
  assert_non_null (in->flags);
  assert_true (in->line >= 1);
  exercise_expand (in->text, r->escape);
  for (size_t i = 0; in->args && in->args[i]; i++)
    exercise_expand (in->args[i], r->escape);
  for (size_t i = 0; in->flags[i]; i++)
    assert_true (strncmp (in->flags[i], "--", 2) == 0 && strchr (in->flags[i], '='));
  for (size_t i = 0; i < in->n_kvs; i++)
    {
      assert_non_null (in->kvs[i].key);
      assert_true ((in->kvs[i].value == NULL) == (in->kvs[i].raw == NULL));
      if (in->kvs[i].raw)
        exercise_expand (in->kvs[i].raw, r->escape);
    }
  for (size_t i = 0; i < in->n_heredocs; i++)
    {
      const ib_heredoc_t *h = &in->heredocs[i];
      assert_non_null (h->name);
      assert_true (h->name[0] != '\0');
      assert_non_null (h->content);
      assert_true (h->line > in->line);
      if (h->arg >= 0)
        {
          assert_true ((size_t) h->arg < ib_strv_len (in->args));
          assert_ptr_equal (ib_instr_heredoc (in, (size_t) h->arg), h);
        }
      else
        assert_int_equal (in->kind, IB_I_RUN);
    }
  assert_true (!in->heredoc_script || in->n_heredocs == 1);
  assert_true ((in->kind == IB_I_ONBUILD) == (in->trigger != NULL));
  if (in->trigger)
    {
      assert_int_equal (in->trigger->line, in->line);
      assert_true (in->trigger->kind != IB_I_ONBUILD && in->trigger->kind != IB_I_FROM
                   && in->trigger->kind != IB_I_MAINTAINER);
      walk_instr (r, in->trigger);
    }
  (void) ib_instr_flag (in, "from");
  char **m = ib_instr_flag_values (in, "mount");
  ib_strv_free (m);
}

static void
test_robustness (void **state)
{
  (void) state;
  int ok = 0, failed = 0;

  for (int iter = 0; iter < 3000; iter++)
    {
      const char *seed = seeds[rng () % (sizeof seeds / sizeof seeds[0])];
      char *text = mutate (seed);
      ib_recipe_t *r = NULL;
      ib_error_t err = NULL;
      int ret = ib_recipe_parse ("fuzz.recipe", text, &r, &err);
      if (ret == 0)
        {
          ok++;
          assert_non_null (r);
          assert_null (err);
          assert_true (r->n_stages >= 1);
          for (size_t i = 0; i < r->n_global_args; i++)
            walk_instr (r, &r->global_args[i]);
          for (size_t s = 0; s < r->n_stages; s++)
            {
              assert_int_equal (r->stages[s].instrs[0].kind, IB_I_FROM);
              for (size_t i = 0; i < r->stages[s].n_instrs; i++)
                walk_instr (r, &r->stages[s].instrs[i]);
              assert_ptr_equal (ib_recipe_stage (r, r->stages[s].name ? r->stages[s].name : "0"),
                                r->stages[s].name ? &r->stages[s] : &r->stages[0]);
            }
          ib_recipe_free (r);
        }
      else
        {
          failed++;
          assert_int_equal (ret, -1);
          assert_null (r);
          assert_non_null (err);
          assert_non_null (err->msg);
          assert_true (strncmp (err->msg, "fuzz.recipe:", 12) == 0);
          assert_null (strchr (err->msg, '\n'));
          ib_error_free (&err);
        }
      /* The raw mutated text through the word functions too. */
      exercise_expand (text, (rng () & 1) ? '\\' : '`');
      free (text);
    }
  /* Both outcomes must have been exercised. */
  assert_true (ok > 100);
  assert_true (failed > 100);

  /* Fully random bytes. */
  for (int iter = 0; iter < 500; iter++)
    {
      char buf[128];
      size_t n = (size_t) (rng () % sizeof buf);
      for (size_t i = 0; i < n; i++)
        buf[i] = (rng () & 1) ? special[rng () % (sizeof special - 1)] : (char) (1 + rng () % 255);
      buf[n] = '\0';
      ib_recipe_t *r = NULL;
      ib_error_t err = NULL;
      if (ib_recipe_parse ("rand", buf, &r, &err) == 0)
        ib_recipe_free (r);
      else
        {
          assert_non_null (err);
          ib_error_free (&err);
        }
      exercise_expand (buf, '\\');
    }
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test (test_demo_recipe),
    cmocka_unit_test (test_multistage),
    cmocka_unit_test (test_duplicate_stage_name),
    cmocka_unit_test (test_escape_directive),
    cmocka_unit_test (test_continuations),
    cmocka_unit_test (test_crlf),
    cmocka_unit_test (test_json_and_shell_forms),
    cmocka_unit_test (test_env),
    cmocka_unit_test (test_label_and_arg),
    cmocka_unit_test (test_copy_and_flags),
    cmocka_unit_test (test_other_instructions),
    cmocka_unit_test (test_output),
    cmocka_unit_test (test_healthcheck),
    cmocka_unit_test (test_errors),
    cmocka_unit_test (test_heredocs),
    cmocka_unit_test (test_onbuild),
    cmocka_unit_test (test_expand),
    cmocka_unit_test (test_expand_word),
    cmocka_unit_test (test_split_words),
    cmocka_unit_test (test_robustness),
  };
  return cmocka_run_group_tests (tests, NULL, NULL);
}
