/* oci/digest.c — sha256 digests (image-spec descriptor.md "Digests"). */
#include "oci/digest.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct ib_sha256
{
  EVP_MD_CTX *ctx;
};

ib_sha256_t *
ib_sha256_new (void)
{
  ib_sha256_t *h = xmalloc (sizeof *h);
  h->ctx = EVP_MD_CTX_new ();
  if (h->ctx == NULL || EVP_DigestInit_ex (h->ctx, EVP_sha256 (), NULL) != 1)
    abort ();
  return h;
}

void
ib_sha256_update (ib_sha256_t *h, const void *data, size_t len)
{
  if (len == 0)
    return;
  if (EVP_DigestUpdate (h->ctx, data, len) != 1)
    abort ();
}

void
ib_sha256_final (ib_sha256_t *h, char out[IB_DIGEST_LEN])
{
  static const char hex[] = "0123456789abcdef";
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_DigestFinal_ex (h->ctx, md, &n) != 1 || n != 32)
    abort ();
  memcpy (out, "sha256:", 7);
  for (unsigned int i = 0; i < n; i++)
    {
      out[7 + 2 * i] = hex[md[i] >> 4];
      out[7 + 2 * i + 1] = hex[md[i] & 0xf];
    }
  out[7 + 64] = '\0';
  ib_sha256_free (h);
}

void
ib_sha256_free (ib_sha256_t *h)
{
  if (h == NULL)
    return;
  EVP_MD_CTX_free (h->ctx);
  free (h);
}

void
ib_digest_buf (const void *data, size_t len, char out[IB_DIGEST_LEN])
{
  ib_sha256_t *h = ib_sha256_new ();
  ib_sha256_update (h, data, len);
  ib_sha256_final (h, out);
}

int
ib_digest_file (const char *path, char out[IB_DIGEST_LEN], uint64_t *size, ib_error_t *err)
{
  cleanup_close int fd = open (path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return ib_error_sys (err, errno, "open %s", path);
  ib_sha256_t *h = ib_sha256_new ();
  uint64_t total = 0;
  char *buf = xmalloc (1 << 16);
  for (;;)
    {
      ssize_t n = read (fd, buf, 1 << 16);
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        {
          int e = errno;
          free (buf);
          ib_sha256_free (h);
          return ib_error_sys (err, e, "read %s", path);
        }
      if (n == 0)
        break;
      ib_sha256_update (h, buf, (size_t) n);
      total += (uint64_t) n;
    }
  free (buf);
  ib_sha256_final (h, out);
  if (size)
    *size = total;
  return 0;
}

bool
ib_digest_valid (const char *digest)
{
  if (digest == NULL || strncmp (digest, "sha256:", 7) != 0)
    return false;
  const char *p = digest + 7;
  size_t n = 0;
  for (; p[n]; n++)
    if (!((p[n] >= '0' && p[n] <= '9') || (p[n] >= 'a' && p[n] <= 'f')))
      return false;
  return n == 64;
}

const char *
ib_digest_hex (const char *digest)
{
  const char *c = strchr (digest, ':');
  return c ? c + 1 : digest;
}
