/* oci/lazy_crypto.c — OpenSSL's libcrypto, loaded on its first use
 * (common/lazylib.h): a stub per function imgbuild calls, checked by the
 * compiler against <openssl/evp.h>. */
#include "common/lazylib.h"

#include <openssl/evp.h>

IB_LAZYLIB (crypto_lib, IB_SONAME_CRYPTO, "digests (sha256) and base64");

IB_LAZY (crypto_lib, int, EVP_DecodeBlock, (unsigned char *a0, const unsigned char *a1, int a2), (a0, a1, a2))
IB_LAZY (crypto_lib, int, EVP_DigestFinal_ex, (EVP_MD_CTX *a0, unsigned char *a1, unsigned int *a2), (a0, a1, a2))
IB_LAZY (crypto_lib, int, EVP_DigestInit_ex, (EVP_MD_CTX *a0, const EVP_MD *a1, ENGINE *a2), (a0, a1, a2))
IB_LAZY (crypto_lib, int, EVP_DigestUpdate, (EVP_MD_CTX *a0, const void *a1, size_t a2), (a0, a1, a2))
IB_LAZY (crypto_lib, int, EVP_EncodeBlock, (unsigned char *a0, const unsigned char *a1, int a2), (a0, a1, a2))
IB_LAZY_VOID (crypto_lib, EVP_MD_CTX_free, (EVP_MD_CTX *a0), (a0))
IB_LAZY (crypto_lib, EVP_MD_CTX *, EVP_MD_CTX_new, (void), ())
IB_LAZY (crypto_lib, const EVP_MD *, EVP_sha256, (void), ())
IB_LAZY (crypto_lib, const EVP_MD *, EVP_sha384, (void), ())
IB_LAZY (crypto_lib, const EVP_MD *, EVP_sha512, (void), ())

/* used by the unit tests only */
IB_LAZY (crypto_lib, int, EVP_Digest, (const void *a0, size_t a1, unsigned char *a2, unsigned int *a3, const EVP_MD *a4, ENGINE *a5), (a0, a1, a2, a3, a4, a5))
