/* oci/certs.h — per-registry TLS files following containers' certs.d
 * convention (containers-certs.d(5), Docker's /etc/docker/certs.d):
 *
 *   DIR/NAME.crt         extra CA certificates (PEM, any NAME), added to the system CAs
 *   DIR/NAME.cert        a client certificate (PEM) ...
 *   DIR/NAME.key         ... and its private key (PEM)
 *
 * DIR is `--cert-dir DIR` itself when given, else the first existing of
 * $XDG_CONFIG_HOME/containers/certs.d/HOST[:PORT] (~/.config when unset),
 * /etc/containers/certs.d/HOST[:PORT], /etc/docker/certs.d/HOST[:PORT].
 */
#ifndef IB_OCI_CERTS_H
#define IB_OCI_CERTS_H

#include "common/error.h"
#include <stddef.h>

typedef struct ib_certs
{
  char *dir;         /* the directory used; NULL when none exists */
  char **ca_files;   /* paths of *.crt, sorted; NULL when none */
  char *client_cert; /* path of the first *.cert (sorted), or NULL */
  char *client_key;  /* path of its *.key */
} ib_certs_t;

/* Find the TLS files for registry `hostport` ("host" or "host:port" as in
 * references).  `cert_dir` (may be NULL) is used alone when given and must
 * exist.  `roots` (NULL: the default three above) lists certs.d
 * directories to look in, NULL-terminated.  *out is owned by the caller
 * (ib_certs_clear); out->dir is NULL when no directory exists.  Errors: a
 * *.cert without its *.key or a *.key without its *.cert (EINVAL, naming
 * the file), an unreadable directory (errno). */
int ib_certs_find (const char *hostport, const char *cert_dir, const char *const *roots,
                   ib_certs_t *out, ib_error_t *err);
void ib_certs_clear (ib_certs_t *c);

/* The PEM bytes of `system_bundle` (a file; NULL or missing: none) followed
 * by those of every c->ca_files, in one NUL-terminated buffer for
 * CURLOPT_CAINFO_BLOB (which replaces, not adds to, curl's default CAs).
 * *out is owned by the caller; NULL with *len 0 when c has no CA files.
 * Errors: a CA file that cannot be read (errno, naming it). */
int ib_certs_ca_bundle (const ib_certs_t *c, const char *system_bundle, char **out, size_t *len,
                        ib_error_t *err);

#endif
