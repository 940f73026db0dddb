/* rootfs/lazy_zlib.c — zlib, loaded on its first use (common/lazylib.h):
 * a stub per function imgbuild calls (gzip layers' dictionaries and
 * CRCs, zip members), checked by the compiler against <zlib.h>. */
#include "common/lazylib.h"

#include <zlib.h>

IB_LAZYLIB (zlib_lib, IB_SONAME_ZLIB, "gzip and zip (zlib)");

IB_LAZY (zlib_lib, uLong, crc32_combine, (uLong a0, uLong a1, off_t a2), (a0, a1, a2))
IB_LAZY (zlib_lib, int, deflate, (z_streamp a0, int a1), (a0, a1))
IB_LAZY (zlib_lib, int, deflateEnd, (z_streamp a0), (a0))
IB_LAZY (zlib_lib, int, deflateInit2_, (z_streamp a0, int a1, int a2, int a3, int a4, int a5, const char *a6, int a7), (a0, a1, a2, a3, a4, a5, a6, a7))
IB_LAZY (zlib_lib, int, deflateSetDictionary, (z_streamp a0, const Bytef *a1, uInt a2), (a0, a1, a2))

/* used by the unit tests only */
IB_LAZY (zlib_lib, int, inflate, (z_streamp a0, int a1), (a0, a1))
IB_LAZY (zlib_lib, int, inflateEnd, (z_streamp a0), (a0))
IB_LAZY (zlib_lib, int, inflateInit2_, (z_streamp a0, int a1, const char *a2, int a3), (a0, a1, a2, a3))
IB_LAZY (zlib_lib, const char *, zlibVersion, (void), ())
