/* oci/digest.h — sha256 digests as the OCI image-spec writes them
 * ("sha256:" + 64 lowercase hex; image-spec descriptor.md "Digests"). */
#ifndef IB_OCI_DIGEST_H
#define IB_OCI_DIGEST_H

#include "common/error.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define IB_DIGEST_LEN 72 /* "sha256:" + 64 hex + NUL, rounded */

typedef struct ib_sha256 ib_sha256_t;  /* opaque streaming hasher (libcrypto EVP) */
ib_sha256_t *ib_sha256_new (void);                                   /* aborts on OOM */
void ib_sha256_update (ib_sha256_t *h, const void *data, size_t len);
/* Writes "sha256:<hex>" into out and frees h. */
void ib_sha256_final (ib_sha256_t *h, char out[IB_DIGEST_LEN]);
void ib_sha256_free (ib_sha256_t *h);                                /* NULL ok */

void ib_digest_buf (const void *data, size_t len, char out[IB_DIGEST_LEN]);
/* Digest of a file's bytes; *size (may be NULL) gets its length in bytes. */
int ib_digest_file (const char *path, char out[IB_DIGEST_LEN], uint64_t *size, ib_error_t *err);
/* true for "sha256:" + exactly 64 lowercase hex digits (the only algorithm we accept). */
bool ib_digest_valid (const char *digest);
/* Pointer to the hex part of a valid digest. */
const char *ib_digest_hex (const char *digest);

#endif
