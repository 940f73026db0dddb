/* tests/unit/test_binfmt.c — can the host run another platform's
 * binaries (rootfs/binfmt.h), against binfmt_misc directories written
 * here as the kernel prints them: the handler files are those Debian's
 * qemu-user-static registers (read off /proc/sys/fs/binfmt_misc on a
 * bookworm host), so the ELF headers built for each platform meet real
 * magics and masks, little- and big-endian. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/util.h"
#include "rootfs/binfmt.h"
#include "unit.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char qemu_aarch64[] = "enabled\n"
                                   "interpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\n"
                                   "flags: PF\n"
                                   "offset 0\n"
                                   "magic 7f454c460201010000000000000000000200b700\n"
                                   "mask ffffffffffffff00fffffffffffffffffeffffff\n";
static const char qemu_arm[] = "enabled\n"
                               "interpreter /usr/libexec/qemu-binfmt/arm-binfmt-P\n"
                               "flags: PF\n"
                               "offset 0\n"
                               "magic 7f454c4601010100000000000000000002002800\n"
                               "mask ffffffffffffff00fffffffffffffffffeffffff\n";
static const char qemu_s390x[] = "enabled\n"
                                 "interpreter /usr/libexec/qemu-binfmt/s390x-binfmt-P\n"
                                 "flags: PF\n"
                                 "offset 0\n"
                                 "magic 7f454c4602020100000000000000000000020016\n"
                                 "mask fffffffffffffffcfffffffffffffffffffeffff\n";
static const char python[] = "enabled\n"
                             "interpreter /usr/bin/python3.11\n"
                             "flags: \n"
                             "offset 0\n"
                             "magic a70d0d0a\n";
static const char jar[] = "enabled\n"
                          "interpreter /usr/bin/jexec\n"
                          "flags: \n"
                          "extension .jar\n";

static void
put (const char *dir, const char *name, const char *text)
{
  cleanup_free char *p = ib_path_join (dir, name);
  FILE *f = fopen (p, "w");
  assert_non_null (f);
  fputs (text, f);
  fclose (f);
}

/* `dir`/binfmt with status `status` (NULL: none, as when not mounted) */
static char *
binfmt_dir (const char *dir, const char *status)
{
  char *b = ib_path_join (dir, "binfmt");
  assert_int_equal (mkdir (b, 0755), 0);
  if (status)
    put (b, "status", status);
  put (b, "register", "");
  return b;
}

static int
check (const char *b, const char *plat, const char *rootfs, char **handler, ib_error_t *err)
{
  char tmp[64];
  snprintf (tmp, sizeof tmp, "%s", plat);
  char *os = tmp, *arch = strchr (tmp, '/'), *variant;
  *arch++ = '\0';
  variant = strchr (arch, '/');
  if (variant)
    *variant++ = '\0';
  return ib_binfmt_check (b, os, arch, variant, rootfs, handler, err);
}

static void
test_native (void **state)
{
  cleanup_free char *b = ib_path_join (*state, "none");
  char *h = NULL;
  ib_error_t e = NULL;
  /* the host's own platform needs no binfmt_misc at all */
  assert_int_equal (check (b, "linux/amd64", NULL, &h, &e), 0);
  assert_null (h);
  assert_int_equal (check (b, "linux/386", NULL, &h, &e), 0);
  assert_null (h);
  assert_int_equal (check (b, "windows/arm64", NULL, &h, &e), -1);
  assert_int_equal (e->status, ENOTSUP);
  assert_non_null (strstr (e->msg, "windows/arm64"));
  ib_error_free (&e);
}

static void
test_not_mounted_or_disabled (void **state)
{
  cleanup_free char *b = binfmt_dir (*state, NULL);
  char *h = NULL;
  ib_error_t e = NULL;
  assert_int_equal (check (b, "linux/arm64", NULL, &h, &e), -1);
  assert_int_equal (e->status, ENOEXEC);
  assert_non_null (strstr (e->msg, "cannot run linux/arm64 binaries on linux/amd64"));
  assert_non_null (strstr (e->msg, "binfmt_misc is not mounted"));
  assert_non_null (strstr (e->msg, "mount -t binfmt_misc"));
  ib_error_free (&e);
  put (b, "status", "disabled\n");
  put (b, "qemu-aarch64", qemu_aarch64);
  assert_int_equal (check (b, "linux/arm64", NULL, &h, &e), -1);
  assert_non_null (strstr (e->msg, "binfmt_misc is disabled"));
  ib_error_free (&e);
}

static void
test_handlers_match_their_machine (void **state)
{
  cleanup_free char *b = binfmt_dir (*state, "enabled\n");
  put (b, "python3.11", python);
  put (b, "jar", jar);
  put (b, "qemu-arm", qemu_arm);
  put (b, "qemu-s390x", qemu_s390x);
  char *h = NULL;
  ib_error_t e = NULL;
  /* arm64 finds no handler: the arm one is for 32-bit ELF machine 40 */
  assert_int_equal (check (b, "linux/arm64", NULL, &h, &e), -1);
  assert_int_equal (e->status, ENOEXEC);
  assert_non_null (strstr (e->msg, "no binfmt_misc handler for ELF machine 183 (aarch64)"));
  assert_non_null (strstr (e->msg, "qemu-user-static"));
  assert_non_null (strstr (e->msg, "binfmt-support"));
  ib_error_free (&e);
  put (b, "qemu-aarch64", qemu_aarch64);
  assert_int_equal (check (b, "linux/arm64/v8", NULL, &h, &e), 0);
  assert_string_equal (h, "qemu-aarch64 (/usr/libexec/qemu-binfmt/aarch64-binfmt-P)");
  free (h);
  assert_int_equal (check (b, "linux/arm/v7", NULL, &h, &e), 0);
  assert_string_equal (h, "qemu-arm (/usr/libexec/qemu-binfmt/arm-binfmt-P)");
  free (h);
  /* big-endian: e_machine 22 is 00 16 */
  assert_int_equal (check (b, "linux/s390x", NULL, &h, &e), 0);
  assert_string_equal (h, "qemu-s390x (/usr/libexec/qemu-binfmt/s390x-binfmt-P)");
  free (h);
  /* nothing here runs ppc64le (ELF machine 21) or riscv64 */
  assert_int_equal (check (b, "linux/ppc64le", NULL, &h, &e), -1);
  assert_non_null (strstr (e->msg, "ELF machine 21 (ppc64le)"));
  ib_error_free (&e);
  assert_int_equal (check (b, "linux/riscv64", NULL, &h, &e), -1);
  assert_non_null (strstr (e->msg, "qemu-riscv64"));
  ib_error_free (&e);
}

static void
test_disabled_handler (void **state)
{
  cleanup_free char *b = binfmt_dir (*state, "enabled\n");
  put (b, "qemu-aarch64", qemu_aarch64 + strlen ("enabled\n"));
  char *h = NULL;
  ib_error_t e = NULL;
  cleanup_free char *text = xasprintf ("disabled\n%s", qemu_aarch64 + strlen ("enabled\n"));
  put (b, "qemu-aarch64", text);
  assert_int_equal (check (b, "linux/arm64", NULL, &h, &e), -1);
  assert_int_equal (e->status, ENOEXEC);
  assert_non_null (strstr (e->msg, "qemu-aarch64 is disabled"));
  assert_non_null (strstr (e->msg, "update-binfmts --enable qemu-aarch64"));
  ib_error_free (&e);
}

/* Without F the kernel opens the interpreter by path at exec time, in the
 * step's mount namespace: it must be inside the root filesystem. */
static void
test_interpreter_inside_root (void **state)
{
  cleanup_free char *b = binfmt_dir (*state, "enabled\n");
  cleanup_free char *text = xstrdup (qemu_aarch64);
  char *flags = strstr (text, "flags: PF");
  flags[strlen ("flags: P")] = ' '; /* "flags: P " */
  put (b, "qemu-aarch64", text);
  cleanup_free char *root = ib_path_join (*state, "root");
  assert_int_equal (mkdir (root, 0755), 0);
  char *h = NULL;
  ib_error_t e = NULL;
  assert_int_equal (check (b, "linux/arm64", root, &h, &e), -1);
  assert_non_null (strstr (e->msg, "qemu-aarch64 lacks the F (fix-binary) flag"));
  assert_non_null (strstr (e->msg, "/usr/libexec/qemu-binfmt/aarch64-binfmt-P is not inside"));
  ib_error_free (&e);
  /* an unknown root: the handler is taken as usable */
  assert_int_equal (check (b, "linux/arm64", NULL, &h, &e), 0);
  free (h);
  /* the interpreter in the root, an absolute symlink resolved inside it */
  cleanup_free char *dir = ib_path_join (root, "usr/libexec/qemu-binfmt");
  cleanup_free char *bin = ib_path_join (root, "usr/bin");
  assert_int_equal (ib_mkdir_p (dir, 0755, NULL), 0);
  assert_int_equal (ib_mkdir_p (bin, 0755, NULL), 0);
  cleanup_free char *link = ib_path_join (dir, "aarch64-binfmt-P");
  assert_int_equal (symlink ("/usr/bin/qemu-aarch64-static", link), 0);
  assert_int_equal (check (b, "linux/arm64", root, &h, &e), -1); /* dangling inside */
  ib_error_free (&e);
  put (bin, "qemu-aarch64-static", "");
  assert_int_equal (check (b, "linux/arm64", root, &h, &e), 0);
  assert_non_null (strstr (h, "qemu-aarch64"));
  free (h);
}

int
main (void)
{
  const struct CMUnitTest tests[] = {
    unit_test_in_tmpdir (test_native),
    unit_test_in_tmpdir (test_not_mounted_or_disabled),
    unit_test_in_tmpdir (test_handlers_match_their_machine),
    unit_test_in_tmpdir (test_disabled_handler),
    unit_test_in_tmpdir (test_interpreter_inside_root),
  };
  return cmocka_run_group_tests (tests, NULL, NULL);
}
