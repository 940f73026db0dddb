/* rootfs/lazy_isal.c — ISA-L, loaded on its first use (common/lazylib.h):
 * a stub per function imgbuild calls (gzip layers: inflate, parallel
 * deflate), checked by the compiler against ISA-L's headers. */
#include "common/lazylib.h"

#include <isa-l/crc.h>
#include <isa-l/igzip_lib.h>

IB_LAZYLIB (isal_lib, IB_SONAME_ISAL, "gzip layers (ISA-L)");

IB_LAZY (isal_lib, uint32_t, crc32_gzip_refl, (uint32_t a0, const unsigned char *a1, uint64_t a2), (a0, a1, a2))
IB_LAZY (isal_lib, int, isal_deflate, (struct isal_zstream *a0), (a0))
IB_LAZY_VOID (isal_lib, isal_deflate_init, (struct isal_zstream *a0), (a0))
IB_LAZY (isal_lib, int, isal_deflate_set_dict, (struct isal_zstream *a0, uint8_t *a1, uint32_t a2), (a0, a1, a2))
IB_LAZY (isal_lib, int, isal_inflate, (struct inflate_state *a0), (a0))
IB_LAZY_VOID (isal_lib, isal_inflate_init, (struct inflate_state *a0), (a0))
IB_LAZY_VOID (isal_lib, isal_inflate_reset, (struct inflate_state *a0), (a0))
