/* builder/artifact/s3.h — a small S3 client on libcurl: PUT object, GET
 * object, ListObjectsV2 (Amazon S3 API reference), signed with AWS Signature
 * Version 4 by libcurl's built-in signer (CURLOPT_AWS_SIGV4
 * "aws:amz:REGION:s3", libcurl >= 7.75), path-style URLs
 * (ENDPOINT/BUCKET/KEY), so that S3-compatible servers work too.
 *
 * Configuration, as the AWS CLI and SDKs read it:
 *   credentials  $AWS_ACCESS_KEY_ID + $AWS_SECRET_ACCESS_KEY (+ $AWS_SESSION_TOKEN),
 *                else the profile $AWS_PROFILE (default "default") of
 *                $AWS_SHARED_CREDENTIALS_FILE (default ~/.aws/credentials):
 *                aws_access_key_id, aws_secret_access_key, aws_session_token;
 *                none -> an error (anonymous requests are not made);
 *   region       $AWS_REGION, else $AWS_DEFAULT_REGION, else "region" of the
 *                profile in $AWS_CONFIG_FILE (default ~/.aws/config: section
 *                [default] or [profile NAME]), else us-east-1;
 *   endpoint     the caller's, else $AWS_ENDPOINT_URL_S3, else
 *                $AWS_ENDPOINT_URL, else https://s3.REGION.amazonaws.com.
 *
 * Errors name the request ("s3 GET s3://BUCKET/KEY") and say what the
 * server answered: its XML error Code and Message ("403 SignatureDoesNotMatch:
 * The request signature we calculated does not match ...").
 */
#ifndef IB_BUILDER_ARTIFACT_S3_H
#define IB_BUILDER_ARTIFACT_S3_H

#include "common/error.h"

#include <stddef.h>
#include <stdint.h>

typedef struct ib_s3 ib_s3_t;

/* A client for `bucket`; `endpoint` (may be NULL) as above.  No network
 * traffic here.  Errors: no credentials found, a credentials file that
 * cannot be read. */
int ib_s3_new (const char *bucket, const char *endpoint, ib_s3_t **out, ib_error_t *err);
void ib_s3_free (ib_s3_t *s);

/* PUT the regular file `path` as object `key`, its bytes' sha256 sent as
 * x-amz-content-sha256 (signed) and stored as user metadata
 * x-amz-meta-sha256 for ib_s3_get_file to verify. */
int ib_s3_put_file (ib_s3_t *s, const char *key, const char *path, ib_error_t *err);

/* GET object `key` into `fd` (from its current offset).  The byte count
 * must match Content-Length, and the sha256 the x-amz-meta-sha256
 * metadata when the object has it; *size (may be NULL) gets the count. */
int ib_s3_get_file (ib_s3_t *s, const char *key, int fd, uint64_t *size, ib_error_t *err);

/* Every key starting with `prefix` (ListObjectsV2, following
 * continuation tokens), in the server's (lexicographic) order.  *keys is
 * NULL-terminated, caller frees; an empty vector when none. */
int ib_s3_list (ib_s3_t *s, const char *prefix, char ***keys, ib_error_t *err);

/* The most bytes of a reply body kept (the rest is dropped) and parsed. */
#define IB_S3_REPLY_MAX (16 << 20)

/* Replies are parsed with libxml2 (no network, no entity substitution, no
 * DTD: a reply with <!DOCTYPE> is refused) and must be well-formed XML of
 * at most IB_S3_REPLY_MAX bytes.  Elements are matched by local name, in
 * any namespace. */

/* Parse one ListObjectsV2 response body (NUL-terminated): appends the Key
 * of each Contents element of the root (entities and character references
 * decoded) to *keys; *next gets NextContinuationToken when IsTruncated is
 * "true", else NULL (caller frees).  EPROTO errors: "not a
 * ListBucketResult" (not XML, or another root element), "ListBucketResult:
 * not well-formed XML (line N: ...)", "ListBucketResult: Contents without
 * a Key", "ListBucketResult: truncated without NextContinuationToken", or
 * what refused the reply (its size, a DTD).  Keys found before an error
 * stay in *keys. */
int ib_s3_parse_list (const char *xml, char ***keys, char **next, ib_error_t *err);

/* The Code and Message of an S3 error response body (<Error><Code>...),
 * `len` bytes: the text of the first element of each name, in document
 * order.  Each NULL when absent or when the body is not well-formed XML
 * (an HTML page from a proxy, nothing).  Caller frees both. */
void ib_s3_parse_error (const char *xml, size_t len, char **code, char **message);

/* "%XX"-encode all but RFC 3986 unreserved characters (and '/' when
 * `keep_slash`), as SigV4's canonical URI and query want.  Caller frees. */
char *ib_s3_uri_encode (const char *s, int keep_slash);

#endif
