/* builder/engine/addsrc.h — what ADD does beyond COPY (Dockerfile reference, ADD):
 * a local tar archive (plain, gzip, bzip2, xz, zstd; recognised by its
 * content, not its name) is extracted into the destination; an http(s)
 * URL is downloaded (never extracted), optionally checked against
 * --checksum=sha256:HEX.
 */
#ifndef IB_BUILDER_ADDSRC_H
#define IB_BUILDER_ADDSRC_H

#include "common/error.h"
#include "oci/digest.h"
#include <stdbool.h>
#include <time.h>

/* Is the file at host path `path` a tar archive, possibly compressed, as
 * Docker's ADD decides (its first entry reads as a tar header)?  An empty
 * or unreadable file is not. */
bool ib_add_is_archive (const char *path);

/* Extract archive `path` into the host directory `dir` (made with its
 * parents), keeping modes, times and, where allowed, owners.  Safe against
 * hostile archives: entries with "..", absolute names or paths through a
 * symlink are refused (libarchive's ARCHIVE_EXTRACT_SECURE_* with the
 * directory as the working directory), as are device nodes.  Errors name
 * the archive and the entry. */
int ib_add_extract (const char *path, const char *dir, ib_error_t *err);

/* Download `url` (http or https; TLS verified against the system's CAs) into
 * the file `dest` (created, mode 0600 as Docker gives downloaded files);
 * `digest` gets the sha256 of the bytes, `*mtime` the Last-Modified time (0
 * when the server sends none).  HTTP errors name the URL and the status.
 * Redirects are followed (at most 10). */
int ib_add_download (const char *url, const char *dest, char digest[IB_DIGEST_LEN], time_t *mtime,
                     ib_error_t *err);

/* The file name a URL's content gets when ADD's destination is a directory:
 * the last path component, query and fragment left out ("index.html" when
 * empty).  Caller frees. */
char *ib_add_url_basename (const char *url);

#endif
