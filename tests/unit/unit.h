/* tests/unit/unit.h — what several unit tests share: a fresh temp
 * directory per test as cmocka's state (unit_tmpdir_setup, its path a
 * char *; unit_tmpdir_teardown removes it with all it holds;
 * unit_test_in_tmpdir names such a test in the list).  Under
 * $TMPDIR when set (the suite's scratch file system), else /tmp. */
#ifndef IB_TESTS_UNIT_H
#define IB_TESTS_UNIT_H

#include "common/util.h"

#include <stdlib.h>

static inline int
unit_tmpdir_setup (void **state)
{
  const char *t = getenv ("TMPDIR");
  char *dir = xasprintf ("%s/ib-unit-XXXXXX", t && *t ? t : "/tmp");
  if (mkdtemp (dir) == NULL)
    {
      free (dir);
      return -1;
    }
  *state = dir;
  return 0;
}

static inline int
unit_tmpdir_teardown (void **state)
{
  ib_rm_rf (*state, NULL); /* best effort: a test that failed may have left anything */
  free (*state);
  return 0;
}

/* A cmocka test run in a fresh temp directory (*state). */
#define unit_test_in_tmpdir(f)                                                                    \
  cmocka_unit_test_setup_teardown (f, unit_tmpdir_setup, unit_tmpdir_teardown)

#endif
