/* tests/unit/test_plan.c — ib_build_plan (ARG resolution, needed stages,
 * expansion as the build does it) and the plan's text rendering. */
#include "builder/engine/build.h"
#include "builder/engine/plan.h"
#include "common/util.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

static const char recipe_text[]
    = "ARG REG=r.example\n"
      "ARG BASE=${REG}/deb:12\n"
      "FROM ${BASE} AS build\n"
      "ARG VER=1.0\n"
      "ARG REG\n"
      "ARG TARGETARCH\n"
      "ENV P=/opt/x-${VER}\n"
      "WORKDIR src\n"
      "RUN --mount=type=cache,target=/c-${VER} echo \"$VER\" '$VER' $P $UNSET ${UNSET:+w} ${UNSET:-d}\n"
      "OUTPUT type=local,dest=out-${VER},src=/w\n"
      "FROM build AS unused\n"
      "RUN true\n"
      "FROM scratch AS client\n"
      "COPY --from=build /w/${VER} /opt/\n";

static char *
write_recipe (const char *text)
{
  char *path = xstrdup ("/tmp/test_plan-XXXXXX");
  int fd = mkstemp (path);
  assert_true (fd >= 0);
  assert_int_equal (write (fd, text, strlen (text)), (ssize_t) strlen (text));
  close (fd);
  return path;
}

static json_t *
plan_of (const char *path, char **args, const char *target, const char *platform)
{
  ib_build_opts_t o = { .recipe_path = path, .build_args = args, .target = target,
                        .platform = platform };
  json_t *plan = NULL;
  ib_error_t err = NULL;
  int r = ib_build_plan (&o, &plan, &err);
  if (r < 0)
    fprintf (stderr, "%s\n", err->msg);
  assert_int_equal (r, 0);
  return plan;
}

static const char *
jstr (json_t *o, const char *path)
{
  /* "a.b.0.c": object keys and array indexes */
  cleanup_free char *p = xstrdup (path);
  char *save = NULL;
  for (char *t = strtok_r (p, ".", &save); t && o; t = strtok_r (NULL, ".", &save))
    o = json_is_array (o) ? json_array_get (o, (size_t) atoi (t)) : json_object_get (o, t);
  const char *s = json_string_value (o);
  assert_non_null (s);
  return s;
}

static void
test_resolution (void **state)
{
  (void) state;
  cleanup_free char *path = write_recipe (recipe_text);
  char *args[] = { "VER=2.0", "NOPE=1", NULL };
  json_t *plan = plan_of (path, args, NULL, "linux/arm64");
  assert_string_equal (jstr (plan, "global_args.REG"), "r.example");
  assert_string_equal (jstr (plan, "global_args.BASE"), "r.example/deb:12");
  assert_string_equal (jstr (plan, "platform"), "linux/arm64");
  assert_int_equal (json_integer_value (json_object_get (json_object_get (plan, "target"), "index")), 2);
  json_t *stages = json_object_get (plan, "stages");
  assert_int_equal (json_array_size (stages), 3);
  /* build: needed for its OUTPUT; unused: not needed; client: the target */
  assert_true (json_is_true (json_object_get (json_array_get (stages, 0), "needed")));
  assert_true (json_is_false (json_object_get (json_array_get (stages, 1), "needed")));
  assert_null (json_object_get (json_array_get (stages, 1), "steps"));
  assert_string_equal (jstr (plan, "stages.0.base.image"), "r.example/deb:12");
  assert_string_equal (jstr (plan, "stages.0.steps.0.args.VER"), "2.0"); /* --build-arg wins */
  assert_string_equal (jstr (plan, "stages.0.steps.1.args.REG"), "r.example");
  assert_string_equal (jstr (plan, "stages.0.steps.2.args.TARGETARCH"), "arm64");
  assert_string_equal (jstr (plan, "stages.0.steps.3.env.P"), "/opt/x-2.0");
  assert_string_equal (jstr (plan, "stages.0.steps.4.path"), "/src");
  assert_string_equal (jstr (plan, "stages.0.steps.5.instruction"), "RUN");
  assert_string_equal (jstr (plan, "stages.0.steps.5.flags.0"), "--mount=type=cache,target=/c-2.0");
  assert_string_equal (jstr (plan, "stages.0.steps.5.command"), "echo \"$VER\" '$VER' $P $UNSET ${UNSET:+w} ${UNSET:-d}");
  /* the preview: ENV and ARGs in, single quotes kept, unknown names as written */
  assert_string_equal (jstr (plan, "stages.0.steps.5.expanded"),
                       "echo \"2.0\" '$VER' /opt/x-2.0 $UNSET ${UNSET:+w} ${UNSET:-d}");
  json_t *rargs = json_object_get (json_array_get (json_object_get (json_array_get (stages, 0), "steps"), 5), "args");
  assert_int_equal (json_object_size (rargs), 3); /* VER, REG, TARGETARCH */
  assert_string_equal (jstr (plan, "stages.0.outputs.0.type"), "local");
  assert_string_equal (jstr (plan, "stages.0.outputs.0.dest"), "out-2.0");
  assert_string_equal (jstr (plan, "stages.0.outputs.0.src"), "/w");
  /* client: FROM scratch, COPY --from=build; VER is not declared there */
  assert_true (json_is_true (json_object_get (json_object_get (json_array_get (stages, 2), "base"), "scratch")));
  json_t *deps = json_object_get (json_array_get (stages, 2), "depends_on");
  assert_int_equal (json_array_size (deps), 1);
  assert_int_equal (json_integer_value (json_array_get (deps, 0)), 0);
  assert_string_equal (jstr (plan, "stages.2.steps.0.sources.0"), "/w/");
  assert_string_equal (jstr (plan, "stages.2.steps.0.dest"), "/opt/");
  assert_string_equal (jstr (plan, "stages.2.steps.0.flags.0"), "--from=build");
  json_t *unused = json_object_get (plan, "unused_build_args");
  assert_int_equal (json_array_size (unused), 1);
  assert_string_equal (json_string_value (json_array_get (unused, 0)), "NOPE");

  cleanup_free char *text = ib_plan_text (plan);
  assert_non_null (strstr (text, "\nstage 1 unused: skipped (not needed)\n"));
  assert_non_null (strstr (text, "  from: image r.example/deb:12\n"));
  assert_non_null (strstr (text, "  line 9: RUN --mount=type=cache,target=/c-2.0 echo \"2.0\" '$VER' /opt/x-2.0 $UNSET ${UNSET:+w} ${UNSET:-d}\n"
                                 "    args: VER=2.0 REG=r.example TARGETARCH=arm64\n"));
  assert_non_null (strstr (text, "  output: type=local dest=out-2.0 src=/w\n"));
  assert_non_null (strstr (text, "  depends on: 0 build\n"));
  assert_non_null (strstr (text, "warning: build arg NOPE was not consumed by any ARG\n"));
  json_decref (plan);
  unlink (path);
}

static void
test_target_and_stage_base (void **state)
{
  (void) state;
  cleanup_free char *path = write_recipe (recipe_text);
  /* --target: only it and what it reads; OUTPUT stages are not added */
  json_t *plan = plan_of (path, NULL, "unused", NULL);
  json_t *stages = json_object_get (plan, "stages");
  assert_true (json_is_true (json_object_get (json_array_get (stages, 0), "needed")));
  assert_true (json_is_true (json_object_get (json_array_get (stages, 1), "needed")));
  assert_true (json_is_false (json_object_get (json_array_get (stages, 2), "needed")));
  assert_int_equal (json_integer_value (json_object_get (json_object_get (json_array_get (stages, 1), "base"), "stage")), 0);
  assert_string_equal (jstr (plan, "stages.0.steps.0.args.VER"), "1.0");
  cleanup_free char *text = ib_plan_text (plan);
  assert_non_null (strstr (text, "stage 1 unused\n  from: stage 0 build\n  depends on: 0 build\n"
                                 "  line 12: RUN true\n    args: (none)\n"));
  json_decref (plan);

  ib_build_opts_t o = { .recipe_path = path, .target = "nope" };
  ib_error_t err = NULL;
  plan = NULL;
  assert_int_equal (ib_build_plan (&o, &plan, &err), -1);
  assert_null (plan);
  assert_non_null (strstr (err->msg, "no stage named 'nope'"));
  ib_error_free (&err);
  unlink (path);
}

static void
test_errors (void **state)
{
  (void) state;
  cleanup_free char *path = write_recipe ("FROM a\nRUN x\nFOO bar\n");
  ib_build_opts_t o = { .recipe_path = path };
  json_t *plan = NULL;
  ib_error_t err = NULL;
  assert_int_equal (ib_build_plan (&o, &plan, &err), -1);
  assert_non_null (strstr (err->msg, ":3:1: unknown instruction 'FOO'"));
  ib_error_free (&err);
  unlink (path);
  free (path);
  path = write_recipe ("FROM a\nENV X=${Y:?needsY}\n");
  o.recipe_path = path;
  assert_int_equal (ib_build_plan (&o, &plan, &err), -1);
  assert_non_null (strstr (err->msg, ":2: ENV"));
  assert_non_null (strstr (err->msg, "Y: needsY"));
  ib_error_free (&err);
  unlink (path);
}

static void
test_quote (void **state)
{
  (void) state;
  const char *cases[][2] = {
    { "v1.1.0", "v1.1.0" },
    { "https://github.com/pytorch/pytorch.git", "https://github.com/pytorch/pytorch.git" },
    { "", "''" },
    { "3.5;6.0;6.1;7.0+PTX", "'3.5;6.0;6.1;7.0+PTX'" },
    { "a b", "'a b'" },
    { "it's", "'it'\\''s'" },
    { "$X", "'$X'" },
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    {
      cleanup_free char *q = ib_plan_quote (cases[i][0]);
      assert_string_equal (q, cases[i][1]);
    }
}

/* OUTPUT's repair= and repair-exclude= are expanded like dest (an ARG picks
 * the platform); --output and -t are OUTPUTs at the end of the target,
 * expanded with its variables. */
static void
test_output_values_and_cli_outputs (void **state)
{
  (void) state;
  cleanup_free char *path = write_recipe ("FROM scratch AS w\n"
                                          "ARG ARCH=x86_64\n"
                                          "ARG V=1\n"
                                          "OUTPUT type=local,dest=d-${V},src=/w,repair=manylinux_2_31_${ARCH},"
                                          "repair-exclude=libx-${V}.so\n"
                                          "OUTPUT type=tar,dest=t-${V},compression=${V}\n");
  char *args[] = { "ARCH=aarch64", NULL };
  char *outputs[] = { "type=local,dest=cli-${V}", NULL };
  char *tags[] = { "app:${V}-${ARCH}", NULL };
  ib_build_opts_t o = { .recipe_path = path, .build_args = args, .outputs = outputs, .tags = tags };
  json_t *plan = NULL;
  ib_error_t err = NULL;
  assert_int_equal (ib_build_plan (&o, &plan, &err), 0);
  assert_string_equal (jstr (plan, "stages.0.outputs.0.dest"), "d-1");
  assert_string_equal (jstr (plan, "stages.0.outputs.0.repair"), "manylinux_2_31_aarch64");
  assert_string_equal (jstr (plan, "stages.0.outputs.0.repair-exclude"), "libx-1.so");
  assert_string_equal (jstr (plan, "stages.0.outputs.1.dest"), "t-1");
  assert_string_equal (jstr (plan, "stages.0.outputs.1.compression"), "${V}"); /* as written */
  assert_string_equal (jstr (plan, "stages.0.outputs.2.dest"), "cli-1");
  assert_string_equal (jstr (plan, "stages.0.outputs.3.type"), "image");
  assert_string_equal (jstr (plan, "stages.0.outputs.3.name"), "app:1-aarch64");
  assert_int_equal (json_array_size (json_object_get (json_array_get (json_object_get (plan, "stages"), 0),
                                                      "outputs")), 4);
  json_decref (plan);
  unlink (path);
}

/* Issue 38: the recipe's control characters never reach the terminal
 * raw: `plan` text shows them as '?' (ESC, BEL, CR, DEL, C1 in UTF-8 and
 * as a stray byte), as the build's display does; line breaks stay.  A
 * stray byte the JSON cannot hold is U+FFFD there (it used to drop the
 * value). */
static void
test_text_escapes_control_characters (void **state)
{
  (void) state;
  cleanup_free char *path = write_recipe ("FROM scratch\n"
                                          "LABEL t=\"\x1b]0;x\x07\r\x7f\xc2\x9b" "2J\x9b" "2J\xc3\xa9\"\n"
                                          "LABEL k\x9bx=1\n"
                                          "RUN <<EOF\necho \x1b[2J\nls\nEOF\n");
  json_t *plan = plan_of (path, NULL, NULL, NULL);
  assert_string_equal (jstr (plan, "stages.0.steps.0.labels.t"),
                       "\x1b]0;x\x07\r\x7f\xc2\x9b" "2J\xef\xbf\xbd" "2J\xc3\xa9");
  assert_string_equal (jstr (plan, "stages.0.steps.1.labels.k\xef\xbf\xbdx"), "1"); /* a key too */
  cleanup_free char *text = ib_plan_text (plan);
  assert_non_null (strstr (text, "  line 2: LABEL t='?]0;x????2J\xef\xbf\xbd" "2J\xc3\xa9'\n"));
  assert_non_null (strstr (text, "echo ?[2J\n    ls\n"));
  for (const unsigned char *c = (const unsigned char *) text; *c; c++)
    assert_true (((*c >= 0x20 && *c != 0x7f) || *c == '\n') && !(*c >= 0x80 && *c <= 0x9f));
  json_decref (plan);
  unlink (path);
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test (test_resolution),
    cmocka_unit_test (test_output_values_and_cli_outputs),
    cmocka_unit_test (test_target_and_stage_base),
    cmocka_unit_test (test_errors),
    cmocka_unit_test (test_quote),
    cmocka_unit_test (test_text_escapes_control_characters),
  };
  return cmocka_run_group_tests (tests, NULL, NULL);
}
