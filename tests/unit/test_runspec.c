/* tests/unit/test_runspec.c — RUN's flags typed once (ib_run_spec_from_instr):
 * mounts, devices, network, the expanded flags the cache key reads, the
 * errors, and the lenient preview that skips what does not parse. */
#include "builder/engine/recipe.h"
#include "builder/engine/runspec.h"
#include "common/util.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <stdlib.h>

/* $DIR is "/cache", $GPU is "0"; anything else is unset */
static const char *
lookup (void *ctx, const char *name)
{
  (void) ctx;
  if (strcmp (name, "DIR") == 0)
    return "/cache";
  if (strcmp (name, "GPU") == 0)
    return "0";
  return NULL;
}

static int
expand_test (void *ctx, const char *word, char **out, ib_error_t *err)
{
  (*(int *) ctx)++;
  return ib_expand_word (word, '\\', lookup, NULL, out, err);
}

/* The RUN of "FROM x\n<line>\n" (the recipe is kept in *r). */
static const ib_instr_t *
parse_run (const char *line, ib_recipe_t **r)
{
  cleanup_free char *text = xasprintf ("FROM x\n%s\n", line);
  ib_error_t err = NULL;
  if (ib_recipe_parse ("t.recipe", text, r, &err) < 0)
    fail_msg ("parse: %s", err->msg);
  return &(*r)->stages[0].instrs[1];
}

static void
test_typed_flags (void **state)
{
  (void) state;
  ib_recipe_t *r = NULL;
  const ib_instr_t *in = parse_run (
      "RUN --mount=type=cache,target=$DIR,sharing=locked --network=none "
      "--device=nvidia.com/gpu=$GPU --mount=type=bind,from=build,source=/out,target=o "
      "--security=sandbox --mount=type=tmpfs,target=/t,size=1m make",
      &r);
  ib_run_spec_t spec;
  ib_error_t err = NULL;
  int calls = 0;
  assert_int_equal (ib_run_spec_from_instr (in, expand_test, &calls, false, &spec, &err), 0);
  assert_int_equal (calls, 6); /* each flag expanded once */
  assert_int_equal (spec.network, IB_RUN_NET_NONE);
  assert_int_equal (spec.n_mounts, 3);
  assert_int_equal (spec.mounts[0].type, IB_MSPEC_CACHE);
  assert_string_equal (spec.mounts[0].target, "/cache");
  assert_string_equal (spec.mounts[0].sharing, "locked");
  assert_string_equal (spec.shown[0], "--mount=type=cache,target=/cache,sharing=locked");
  assert_int_equal (spec.mounts[1].type, IB_MSPEC_BIND);
  assert_string_equal (spec.mounts[1].from, "build");
  assert_string_equal (spec.mounts[1].source, "/out");
  assert_string_equal (spec.mounts[1].target, "o");
  assert_int_equal (spec.mounts[2].type, IB_MSPEC_TMPFS);
  assert_string_equal (spec.mounts[2].size, "1m");
  assert_null (spec.shown[3]);
  assert_non_null (spec.devices);
  assert_string_equal (spec.devices[0], "nvidia.com/gpu=0");
  assert_null (spec.devices[1]);
  /* every flag, expanded, in the order written: the cache key's text */
  const char *flags[] = { "--mount=type=cache,target=/cache,sharing=locked", "--network=none",
                          "--device=nvidia.com/gpu=0",
                          "--mount=type=bind,from=build,source=/out,target=o",
                          "--security=sandbox", "--mount=type=tmpfs,target=/t,size=1m", NULL };
  for (size_t i = 0; flags[i]; i++)
    assert_string_equal (spec.flags[i], flags[i]);
  assert_null (spec.flags[6]);
  ib_run_spec_clear (&spec);
  assert_null (spec.mounts);
  ib_recipe_free (r);

  /* no flags: nothing, the default network */
  in = parse_run ("RUN true", &r);
  assert_int_equal (ib_run_spec_from_instr (in, expand_test, &calls, false, &spec, &err), 0);
  assert_int_equal (spec.n_mounts, 0);
  assert_null (spec.devices);
  assert_null (spec.flags);
  assert_int_equal (spec.network, IB_RUN_NET_DEFAULT);
  ib_run_spec_clear (&spec);
  ib_recipe_free (r);
  in = parse_run ("RUN --network=host true", &r);
  assert_int_equal (ib_run_spec_from_instr (in, expand_test, &calls, false, &spec, &err), 0);
  assert_int_equal (spec.network, IB_RUN_NET_HOST);
  ib_run_spec_clear (&spec);
  ib_recipe_free (r);
}

static void
expect_error (const char *line, int status, const char *msg, int expansions)
{
  ib_recipe_t *r = NULL;
  const ib_instr_t *in = parse_run (line, &r);
  ib_run_spec_t spec;
  ib_error_t err = NULL;
  int calls = 0;
  assert_int_equal (ib_run_spec_from_instr (in, expand_test, &calls, false, &spec, &err), -1);
  assert_non_null (err);
  if (strstr (err->msg, msg) == NULL)
    fail_msg ("'%s' lacks '%s'", err->msg, msg);
  assert_int_equal (err->status, status);
  assert_int_equal (calls, expansions);
  ib_error_free (&err);
  ib_run_spec_clear (&spec);
  ib_recipe_free (r);
}

static void
test_errors (void **state)
{
  (void) state;
  /* checked as written, before anything is expanded */
  expect_error ("RUN --mount=type=tmpfs,target=/t --security=insecure true", ENOTSUP,
                "--security=insecure is not supported: imgbuild never gives a step more than "
                "its sandbox",
                0);
  expect_error ("RUN --network=$NET true", EINVAL,
                "--network=$NET: expected host, none or default", 0);
  /* the mount's own parser, naming the expanded value */
  expect_error ("RUN --mount=type=cache,target=$DIR,sharing=never true", EINVAL,
                "sharing", 1);
  expect_error ("RUN --mount=type=nope,target=/x true", EINVAL,
                "unknown mount type 'nope' (bind, cache, tmpfs, secret, ssh)", 1);
  /* expansion errors as they come, and nothing after them is expanded */
  expect_error ("RUN --mount=type=tmpfs,target=${X:?unset} --device=a.com/b=c true",
                EINVAL, "X: unset", 1);
}

static void
test_lenient_preview (void **state)
{
  (void) state;
  ib_recipe_t *r = NULL;
  const ib_instr_t *in = parse_run (
      "RUN --security=insecure --network=$NET --mount=type=nope,target=/x "
      "--mount=target=${X:?u} --mount=type=bind,from=build,target=/b --device=${Y:?u} "
      "--device=v.com/c=$GPU true",
      &r);
  ib_run_spec_t spec;
  int calls = 0;
  assert_int_equal (ib_run_spec_from_instr (in, expand_test, &calls, true, &spec, NULL), 0);
  assert_int_equal (calls, 5); /* --mount and --device only */
  assert_int_equal (spec.n_mounts, 1);
  assert_string_equal (spec.mounts[0].from, "build");
  assert_string_equal (spec.devices[0], "v.com/c=0");
  assert_null (spec.devices[1]);
  assert_null (spec.flags);
  ib_run_spec_clear (&spec);
  ib_recipe_free (r);
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test (test_typed_flags),
    cmocka_unit_test (test_errors),
    cmocka_unit_test (test_lenient_preview),
  };
  return cmocka_run_group_tests (tests, NULL, NULL);
}
