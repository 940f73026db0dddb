/* tests/unit/test_matrix.c — --matrix specs (ib_matrix_add), the conflict
 * with --build-arg, and the order of the combinations. */
#include "builder/engine/matrix.h"
#include "common/util.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static void
assert_combo (const ib_matrix_t *m, size_t i, const char *a, const char *b)
{
  char **c = ib_matrix_combination (m, i);
  assert_string_equal (c[0], a);
  if (b)
    assert_string_equal (c[1], b);
  assert_null (c[b ? 2 : 1]);
  ib_strv_free (c);
}

static void
test_order_first_axis_slowest (void **state)
{
  (void) state;
  ib_matrix_t m = { 0 };
  ib_error_t err = NULL;
  assert_int_equal (ib_matrix_add (&m, "PYTORCH_VERSION=1.13.1,1.12.1", &err), 0);
  assert_int_equal (ib_matrix_add (&m, "PYTHON_VERSION=3.9,3.10,3.11", &err), 0);
  assert_int_equal (ib_matrix_count (&m), 6);
  assert_combo (&m, 0, "PYTORCH_VERSION=1.13.1", "PYTHON_VERSION=3.9");
  assert_combo (&m, 1, "PYTORCH_VERSION=1.13.1", "PYTHON_VERSION=3.10");
  assert_combo (&m, 2, "PYTORCH_VERSION=1.13.1", "PYTHON_VERSION=3.11");
  assert_combo (&m, 3, "PYTORCH_VERSION=1.12.1", "PYTHON_VERSION=3.9");
  assert_combo (&m, 5, "PYTORCH_VERSION=1.12.1", "PYTHON_VERSION=3.11");
  ib_matrix_clear (&m);
  assert_int_equal (m.n_axes, 0);
  assert_int_equal (ib_matrix_count (&m), 1); /* no axes: one empty combination */
  char **c = ib_matrix_combination (&m, 0);
  assert_null (c[0]);
  ib_strv_free (c);
}

static void
test_values_may_hold_equals_and_spaces (void **state)
{
  (void) state;
  ib_matrix_t m = { 0 };
  ib_error_t err = NULL;
  assert_int_equal (ib_matrix_add (&m, "_X=a=b,c d", &err), 0);
  assert_int_equal (ib_matrix_count (&m), 2);
  assert_combo (&m, 0, "_X=a=b", NULL);
  assert_combo (&m, 1, "_X=c d", NULL);
  ib_matrix_clear (&m);
}

static void
expect_error (ib_matrix_t *m, const char *spec, const char *msg)
{
  ib_error_t err = NULL;
  size_t before = m->n_axes;
  assert_int_equal (ib_matrix_add (m, spec, &err), -1);
  assert_non_null (err);
  assert_string_equal (err->msg, msg);
  assert_int_equal (err->status, EINVAL);
  assert_int_equal (m->n_axes, before);
  ib_error_free (&err);
}

static void
test_malformed_specs (void **state)
{
  (void) state;
  ib_matrix_t m = { 0 };
  ib_error_t err = NULL;
  assert_int_equal (ib_matrix_add (&m, "A=1,2", &err), 0);
  expect_error (&m, "B", "--matrix B: expected NAME=VALUE[,VALUE...]");
  expect_error (&m, "=1", "--matrix =1: '' is not a build-arg name");
  expect_error (&m, "1B=1", "--matrix 1B=1: '1B' is not a build-arg name");
  expect_error (&m, "B-C=1", "--matrix B-C=1: 'B-C' is not a build-arg name");
  expect_error (&m, "B=", "--matrix B=: no values (expected B=VALUE[,VALUE...])");
  expect_error (&m, "B=1,,2", "--matrix B=1,,2: an empty value");
  expect_error (&m, "B=1,", "--matrix B=1,: an empty value");
  expect_error (&m, "B=,1", "--matrix B=,1: an empty value");
  expect_error (&m, "B=x,y,x", "--matrix B=x,y,x: value 'x' listed twice");
  expect_error (&m, "A=3", "--matrix A=3: A is given by an earlier --matrix");
  assert_int_equal (ib_matrix_count (&m), 2);
  ib_matrix_clear (&m);
}

static void
test_build_arg_conflict (void **state)
{
  (void) state;
  ib_matrix_t m = { 0 };
  ib_error_t err = NULL;
  assert_int_equal (ib_matrix_add (&m, "PY=3.9,3.10", &err), 0);
  char *ok[] = { "PYX=1", "P=2", "OTHER", NULL };
  assert_int_equal (ib_matrix_check_args (&m, ok, &err), 0);
  assert_int_equal (ib_matrix_check_args (&m, NULL, &err), 0);
  char *bad[] = { "X=1", "PY=3.11", NULL };
  assert_int_equal (ib_matrix_check_args (&m, bad, &err), -1);
  assert_string_equal (err->msg, "--build-arg PY=3.11: PY is a --matrix argument");
  ib_error_free (&err);
  char *bare[] = { "PY", NULL }; /* --build-arg NAME (value from the environment) */
  assert_int_equal (ib_matrix_check_args (&m, bare, &err), -1);
  ib_error_free (&err);
  ib_matrix_clear (&m);
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test (test_order_first_axis_slowest),
    cmocka_unit_test (test_values_may_hold_equals_and_spaces),
    cmocka_unit_test (test_malformed_specs),
    cmocka_unit_test (test_build_arg_conflict),
  };
  return cmocka_run_group_tests (tests, NULL, NULL);
}
