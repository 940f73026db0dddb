/* rootfs/pgzip.h — gzip (RFC 1952) compressed on several threads, with
 * bytes that do not depend on the thread count.
 *
 * The input is cut into blocks of IB_PGZ_BLOCK bytes at fixed offsets
 * (0, IB_PGZ_BLOCK, 2 * IB_PGZ_BLOCK, ...).  Each block is deflated
 * (RFC 1951) on its own, with the IB_PGZ_DICT bytes of input before it as
 * preset dictionary, so matches reach back across the block boundary as in
 * one stream.  Every block but the last ends with a sync flush (an empty
 * stored block, 00 00 ff ff: byte-aligned, BFINAL 0); the last one ends the
 * deflate stream.  Their concatenation is one deflate stream in one gzip
 * member (as pigz writes it), which any gzip reader inflates.
 *
 * The gzip header is the 10 bytes 1f 8b 08 00 00000000 00 03 (no name,
 * mtime 0, OS Unix); the trailer the CRC-32 and ISIZE of the input.
 * Levels: 1-3 are ISA-L's igzip levels, 0 and 4-9 zlib's (0 = stored).
 * The bytes for a given input and level depend only on the library
 * versions (ISA-L, zlib), never on `threads` or on how the input is split
 * into ib_pgz_write calls.
 *
 * Threads: ib_pgz_write and ib_pgz_finish run on the caller's thread and
 * call `emit` there, in stream order; up to `threads` worker threads
 * deflate blocks meanwhile.  They start with the second block (an input of
 * one block is deflated on the caller's thread) and are joined by
 * ib_pgz_finish and ib_pgz_free: none runs once either returns.
 */
#ifndef IB_ROOTFS_PGZIP_H
#define IB_ROOTFS_PGZIP_H

#include "common/error.h"

#include <stddef.h>
#include <stdint.h>

#define IB_PGZ_BLOCK (1u << 20) /* input bytes per block */
#define IB_PGZ_DICT (32u * 1024) /* preset dictionary: the deflate window */

/* The output: n bytes of the gzip stream at p, in order; 0 on success,
 * -1 to stop (the caller keeps its own reason; ib_pgz_* then fail with
 * EIO "output failed"). */
typedef int (*ib_pgz_emit_fn) (void *ud, const unsigned char *p, size_t n);

typedef struct ib_pgz ib_pgz_t;

/* A compressor at `level` (0-9; -1: 1) on up to `threads` worker threads
 * (< 1: the online CPUs; at most 8).  The header is emitted with the first
 * output.  Never NULL (allocation failure aborts, as xmalloc).  Free with
 * ib_pgz_free. */
ib_pgz_t *ib_pgz_new (int level, int threads, ib_pgz_emit_fn emit, void *ud);

/* Append n input bytes (p is not kept).  May emit completed blocks, and
 * waits while every block buffer is in use.  0, or -1 with *err set (a
 * block failed to deflate, or emit failed); after a failure every later
 * call fails too. */
int ib_pgz_write (ib_pgz_t *z, const void *p, size_t n, ib_error_t *err);

/* End the stream: deflate what is left, emit every block and the trailer.
 * The threads are joined.  0, or -1 with *err set. */
int ib_pgz_finish (ib_pgz_t *z, ib_error_t *err);

/* Input bytes taken so far. */
uint64_t ib_pgz_in_size (const ib_pgz_t *z);

/* Stop the threads (a block being deflated is finished first) and free.
 * NULL is a no-op. */
void ib_pgz_free (ib_pgz_t *z);

#endif
