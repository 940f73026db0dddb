/* libFuzzer target: image reference parsing (oci/ref.c, distribution
 * reference grammar).  Any input: an error or a reference whose string
 * form parses again to the same string. */
#include "oci/ref.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  char *s = malloc (size + 1);
  memcpy (s, data, size);
  s[size] = '\0';
  ib_ref_t r;
  ib_error_t err = NULL;
  if (ib_ref_parse (s, &r, &err) == 0)
    {
      char *again = ib_ref_string (&r);
      ib_ref_t r2;
      ib_error_t err2 = NULL;
      if (ib_ref_parse (again, &r2, &err2) != 0)
        abort (); /* what we print must parse */
      char *twice = ib_ref_string (&r2);
      if (strcmp (again, twice) != 0)
        abort ();
      free (twice);
      free (again);
      ib_ref_free (&r2);
      ib_ref_free (&r);
    }
  else
    ib_error_free (&err);
  free (s);
  return 0;
}
