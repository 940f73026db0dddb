/* oci/json_int.h — jansson helpers the oci/ files share; private to oci/
 * (never included outside it). */
#ifndef IB_OCI_JSON_INT_H
#define IB_OCI_JSON_INT_H

#include <jansson.h>

static inline void
json_decref_p (json_t **j)
{
  if (*j)
    json_decref (*j);
}
/* A json_t * released when it goes out of scope (NULL ok). */
#define cleanup_json __attribute__ ((cleanup (json_decref_p)))

#endif
