/* rootfs/lazy_zstd.c — libzstd, loaded on its first use
 * (common/lazylib.h): a stub per function imgbuild calls (zstd layers),
 * checked by the compiler against <zstd.h>. */
#include "common/lazylib.h"

#include <zstd.h>

IB_LAZYLIB (zstd_lib, IB_SONAME_ZSTD, "zstd layers");

IB_LAZY (zstd_lib, size_t, ZSTD_CCtx_setParameter, (ZSTD_CCtx*a0, ZSTD_cParameter a1, int a2), (a0, a1, a2))
IB_LAZY (zstd_lib, size_t, ZSTD_compressStream2, (ZSTD_CCtx*a0, ZSTD_outBuffer*a1, ZSTD_inBuffer*a2, ZSTD_EndDirective a3), (a0, a1, a2, a3))
IB_LAZY (zstd_lib, ZSTD_CCtx*, ZSTD_createCCtx, (void), ())
IB_LAZY (zstd_lib, ZSTD_DStream*, ZSTD_createDStream, (void), ())
IB_LAZY (zstd_lib, size_t, ZSTD_decompressStream, (ZSTD_DStream*a0, ZSTD_outBuffer*a1, ZSTD_inBuffer*a2), (a0, a1, a2))
IB_LAZY (zstd_lib, size_t, ZSTD_freeCCtx, (ZSTD_CCtx*a0), (a0))
IB_LAZY (zstd_lib, size_t, ZSTD_freeDStream, (ZSTD_DStream*a0), (a0))
IB_LAZY (zstd_lib, const char*, ZSTD_getErrorName, (size_t a0), (a0))
IB_LAZY (zstd_lib, size_t, ZSTD_initDStream, (ZSTD_DStream*a0), (a0))
IB_LAZY (zstd_lib, unsigned, ZSTD_isError, (size_t a0), (a0))
