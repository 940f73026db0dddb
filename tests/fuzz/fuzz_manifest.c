/* libFuzzer target: the manifest, index and config parsers (oci/manifest.c)
 * on any bytes: classification, manifest parsing, platform selection from
 * an index (nested entries skipped in turn), config diff_ids. */
#include "oci/manifest.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  const char *d = (const char *) data;
  ib_error_t err = NULL;
  ib_doc_kind_t kind;
  if (ib_doc_kind (d, size, NULL, &kind, &err) < 0)
    ib_error_free (&err);
  ib_manifest_t *m = NULL;
  if (ib_manifest_parse (d, size, &m, &err) == 0)
    ib_manifest_free (m);
  else
    ib_error_free (&err);
  for (size_t skip = 0; skip < 3; skip++)
    {
      ib_descriptor_t sel;
      char *offered = NULL;
      if (ib_index_select (d, size, "linux", "arm64", "v8", skip, &sel, &offered, &err) == 0)
        ib_descriptor_clear (&sel);
      else
        ib_error_free (&err);
      free (offered);
    }
  json_t *config = NULL;
  if (ib_config_parse (d, size, &config, &err) == 0)
    {
      char **ids = NULL;
      if (ib_config_diff_ids (config, &ids, &err) == 0)
        ib_strv_free (ids);
      else
        ib_error_free (&err);
      json_decref (config);
    }
  else
    ib_error_free (&err);
  return 0;
}
