#include "builder/cache_io.h"

#include <errno.h>

/* Not written yet: the specs are refused with a clear message. */
int
ib_cache_import (ib_store_t *store, const char *spec, ib_error_t *err)
{
  (void) store;
  return ib_error_set (err, ENOTSUP, "--cache-from %s: not supported yet", spec);
}

int
ib_cache_export (ib_store_t *store, char *const *keys, const char *spec, ib_error_t *err)
{
  (void) store;
  (void) keys;
  return ib_error_set (err, ENOTSUP, "--cache-to %s: not supported yet", spec);
}
