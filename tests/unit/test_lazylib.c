/* tests/unit/test_lazylib.c — common/lazylib: a library loaded on the
 * first use of one of its functions; a missing library or function, or a
 * first use after ib_lazylib_seal(), ends the process with status 127 and
 * a message naming the library. */
#include "common/lazylib.h"

#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>

static void
test_loads_on_first_use (void **state)
{
  (void) state;
  ib_lazylib_t z = { .soname = "libz.so.1", .what = "a test" };
  assert_false (ib_lazylib_loaded (&z));
  const char *(*version) (void) = (const char *(*) (void)) ib_lazylib_sym (&z, "zlibVersion");
  assert_true (ib_lazylib_loaded (&z));
  assert_string_equal (version (), zlibVersion ());
  /* the same handle the second time */
  void *h = z.handle;
  assert_non_null (ib_lazylib_sym (&z, "crc32"));
  assert_ptr_equal (z.handle, h);
}

/* Run `fn` in a child; its exit status and what it wrote to stderr. */
static int
in_child (void (*fn) (void), char *msg, size_t size)
{
  int p[2];
  assert_int_equal (pipe (p), 0);
  pid_t pid = fork ();
  assert_true (pid >= 0);
  if (pid == 0)
    {
      dup2 (p[1], STDERR_FILENO);
      fn ();
      _exit (0);
    }
  close (p[1]);
  ssize_t n = read (p[0], msg, size - 1);
  msg[n > 0 ? n : 0] = '\0';
  close (p[0]);
  int status;
  assert_int_equal (waitpid (pid, &status, 0), pid);
  assert_true (WIFEXITED (status));
  return WEXITSTATUS (status);
}

static void
missing_library (void)
{
  ib_lazylib_t x = { .soname = "libib-not-there.so.7", .what = "nothing real" };
  ib_lazylib_sym (&x, "f");
}

static void
missing_function (void)
{
  ib_lazylib_t z = { .soname = "libz.so.1", .what = "a test" };
  ib_lazylib_sym (&z, "ib_no_such_function");
}

static ib_lazylib_t sealed_z = { .soname = "libz.so.1", .what = "a test" };

static void
after_seal (void)
{
  ib_lazylib_t zstd = { .soname = "libzstd.so.1", .what = "a test" };
  ib_lazylib_sym (&sealed_z, "zlibVersion");
  ib_lazylib_seal ();
  /* a loaded library still answers */
  if (ib_lazylib_sym (&sealed_z, "crc32") == NULL)
    _exit (3);
  ib_lazylib_sym (&zstd, "ZSTD_versionNumber");
}

static void
test_failures_end_the_process (void **state)
{
  (void) state;
  char msg[1024];
  assert_int_equal (in_child (missing_library, msg, sizeof msg), 127);
  assert_non_null (strstr (msg, "imgbuild: cannot load libib-not-there.so.7 (needed for nothing "
                                "real): "));
  assert_int_equal (in_child (missing_function, msg, sizeof msg), 127);
  assert_non_null (strstr (msg, "imgbuild: cannot load libz.so.1 (needed for a test): no "
                                "function ib_no_such_function in it"));
  assert_int_equal (in_child (after_seal, msg, sizeof msg), 127);
  assert_string_equal (msg, "imgbuild: cannot load libzstd.so.1 (needed for a test): not loaded "
                            "before the sandbox entered the rootfs\n");
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    cmocka_unit_test (test_loads_on_first_use),
    cmocka_unit_test (test_failures_end_the_process),
  };
  return cmocka_run_group_tests (tests, NULL, NULL);
}
