/* libFuzzer target: a wheel (builder/wheel/) from any bytes: the zip
 * reader, member names, RECORD (CSV), WHEEL and METADATA headers, and for
 * what verifies, the audit (libelf on the extracted members, the policy
 * decision) and its text and JSON output. */
#include "builder/wheel/wheel.h"
#include "common/util.h"

#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

static char dir[] = "/tmp/ib-fuzz-wheel-XXXXXX";

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  static int ready;
  if (!ready)
    {
      if (!mkdtemp (dir))
        abort ();
      setenv ("TMPDIR", dir, 1);
      ready = 1;
    }
  char *path = xasprintf ("%s/demo-1.0-cp311-cp311-linux_x86_64.whl", dir);
  ib_error_t err = NULL;
  if (ib_write_file_atomic (path, data, size, 0644, &err) < 0)
    abort ();
  ib_wheel_t *w = NULL;
  if (ib_wheel_open (path, &w, &err) == 0)
    {
      ib_wheel_audit_t *a = NULL;
      ib_wheel_audit_opts_t o = { .root = dir }; /* never the host's libraries */
      if (ib_wheel_audit (w, &o, &a, &err) == 0)
        {
          free (ib_wheel_audit_show (a));
          json_decref (ib_wheel_audit_json (a));
          ib_wheel_audit_free (a);
        }
      else
        ib_error_free (&err);
      ib_wheel_close (w);
    }
  else
    ib_error_free (&err);
  unlink (path);
  free (path);
  return 0;
}
