/* imgbuild build's outputs for scripts and buildx's shorthands: -o DIR and
 * -o - as output specs, and what a build made (ib_build_result_t) as
 * --iidfile and --metadata-file write it (cli.h). */
#include "builder/cli/cli.h"
#include "common/util.h"
#include "oci/manifest.h"

#include <errno.h>
#include <string.h>

char *
build_output_spec (const char *arg)
{
  if (strchr (arg, '=') != NULL)
    return xstrdup (arg);
  if (strcmp (arg, "-") == 0)
    return xstrdup ("type=tar,dest=-");
  /* a directory: quoted, so that commas and blanks in it stay in the field */
  ib_buf_t b = { 0 };
  ib_buf_puts (&b, "type=local,\"dest=");
  for (const char *c = arg; *c; c++)
    ib_buf_puts (&b, *c == '"' ? "\"\"" : (char[]) { *c, '\0' });
  ib_buf_puts (&b, "\"");
  return ib_buf_steal (&b);
}

int
write_build_result (const ib_build_result_t *r, const char *iidfile, const char *metadata_file,
                    ib_error_t *err)
{
  if (iidfile
      && ib_write_file_atomic (iidfile, r->config_digest, strlen (r->config_digest), 0644, err) < 0)
    return ib_error_prefix (err, "--iidfile %s", iidfile);
  if (metadata_file == NULL)
    return 0;
  json_t *o = json_pack ("{s:s, s:s, s:{s:s, s:s, s:I}, s:O}", "containerimage.digest",
                         r->manifest_digest, "containerimage.config.digest", r->config_digest,
                         "containerimage.descriptor", "mediaType", IB_MT_OCI_MANIFEST, "digest",
                         r->manifest_digest, "size", (json_int_t) r->manifest_size,
                         "imgbuild.wheels", r->wheels ? r->wheels : json_array ());
  if (o == NULL)
    return ib_error_set (err, ENOMEM, "--metadata-file %s: JSON", metadata_file);
  if (r->names)
    {
      ib_buf_t names = { 0 };
      for (char **n = r->names; *n; n++)
        ib_buf_printf (&names, "%s%s", n == r->names ? "" : ",", *n);
      json_object_set_new (o, "image.name", json_string (names.data));
      ib_buf_free (&names);
    }
  char *text = json_dumps (o, JSON_INDENT (2) | JSON_SORT_KEYS);
  json_decref (o);
  if (text == NULL)
    return ib_error_set (err, ENOMEM, "--metadata-file %s: JSON", metadata_file);
  cleanup_free char *line = xasprintf ("%s\n", text);
  free (text);
  if (ib_write_file_atomic (metadata_file, line, strlen (line), 0644, err) < 0)
    return ib_error_prefix (err, "--metadata-file %s", metadata_file);
  return 0;
}
