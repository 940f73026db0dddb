/* rootfs/decode.c — the decoding half of the unpack pipeline
 * (rootfs_int.h, struct src): a layer blob's bytes -> its uncompressed tar
 * stream, hashed (the diff_id) and limited (ib_unpack_max_bytes).
 *
 * The layer blob is decompressed here (ISA-L igzip / libzstd streaming
 * APIs), in a decoder thread, so that the sha256 of the uncompressed tar
 * stream (the diff_id) is computed in the same single pass that feeds
 * libarchive (rootfs/unpack.c), which only ever sees a plain tar.  The
 * compression is detected from the magic bytes, not the media type.
 */
#include "rootfs/rootfs_int.h"
#include "common/util.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <isa-l/igzip_lib.h>
#include <pthread.h>
#include <zstd.h>

#define SRC_BUF_SIZE (256 * 1024)

/* ---------------------------------------------------------------------- */
/* Decompressing source: the layer file -> uncompressed tar, hashed.        */

static ssize_t
src_fail (struct src *s, int status, const char *msg)
{
  if (s->msg == NULL)
    {
      s->status = status;
      s->msg = xstrdup (msg);
    }
  return -1;
}

/* Read more input into s->in after what is there (compacting first). */
static int
src_read_more (struct src *s)
{
  if (s->in_pos > 0)
    {
      memmove (s->in, s->in + s->in_pos, s->in_len - s->in_pos);
      s->in_len -= s->in_pos;
      s->in_pos = 0;
    }
  if (s->in_len == SRC_BUF_SIZE)
    return 0;
  ib_error_t e = NULL;
  ssize_t n = s->read (s->ud, s->in + s->in_len, SRC_BUF_SIZE - s->in_len, &e);
  if (n < 0)
    {
      src_fail (s, e && e->status ? e->status : EIO, e ? e->msg : "read failed");
      ib_error_free (&e);
      return -1;
    }
  if (n == 0)
    s->in_eof = true;
  s->in_len += (size_t) n;
  return 0;
}

static int
src_fill (struct src *s)
{
  if (s->in_pos < s->in_len || s->in_eof)
    return 0;
  return src_read_more (s);
}

static int
src_detect (struct src *s)
{
  while (s->in_len < 4 && !s->in_eof)
    if (src_read_more (s) < 0)
      return -1;
  const unsigned char *m = s->in;
  if (s->in_len >= 2 && m[0] == 0x1f && m[1] == 0x8b)
    {
      s->kind = SRC_GZIP;
      s->gz = xmalloc (sizeof *s->gz);
      isal_inflate_init (s->gz);
      s->gz->crc_flag = ISAL_GZIP;
    }
  else if (s->in_len >= 4 && m[0] == 0x28 && m[1] == 0xb5 && m[2] == 0x2f && m[3] == 0xfd)
    {
      s->kind = SRC_ZSTD;
      s->zs = ZSTD_createDStream ();
      if (s->zs == NULL)
        return (int) src_fail (s, ENOMEM, "ZSTD_createDStream failed");
      ZSTD_initDStream (s->zs);
      s->zret = 1;
    }
  else
    s->kind = SRC_TAR;
  s->kind_known = true;
  return 0;
}

/* Decode up to `cap` bytes of the tar stream into `out`: the count, 0 at
 * the end, -1 on error (s->msg set).  Counts and limits s->total. */
static ssize_t
src_produce (struct src *s, unsigned char *out, size_t cap)
{
  if (s->msg)
    return -1;
  if (!s->kind_known && src_detect (s) < 0)
    return -1;
  while (!s->end)
    {
      size_t produced = 0;
      if (src_fill (s) < 0)
        return -1;
      bool no_input = s->in_pos == s->in_len && s->in_eof;
      if (s->kind == SRC_TAR)
        {
          if (no_input)
            {
              s->end = true;
              break;
            }
          produced = s->in_len - s->in_pos < cap ? s->in_len - s->in_pos : cap;
          memcpy (out, s->in + s->in_pos, produced);
          s->in_pos += produced;
        }
      else if (s->kind == SRC_GZIP)
        {
          if (s->gz_between)
            {
              if (no_input)
                {
                  s->end = true;
                  break;
                }
              if (s->in[s->in_pos] != 0x1f)
                {
                  ib_debug ("trailing bytes after the gzip stream ignored");
                  s->end = true;
                  break;
                }
              isal_inflate_reset (s->gz);
              s->gz->crc_flag = ISAL_GZIP;
              s->gz_between = false;
            }
          s->gz->next_in = s->in + s->in_pos;
          s->gz->avail_in = (uint32_t) (s->in_len - s->in_pos);
          s->gz->next_out = out;
          s->gz->avail_out = (uint32_t) cap;
          int r = isal_inflate (s->gz);
          s->in_pos = s->in_len - s->gz->avail_in;
          produced = cap - s->gz->avail_out;
          if (r < 0)
            {
              cleanup_free char *m = xasprintf (
                  "gzip stream is corrupt: %s",
                  r == ISAL_INCORRECT_CHECKSUM ? "checksum mismatch"
                  : r == ISAL_INVALID_WRAPPER  ? "bad gzip header"
                                               : "invalid deflate data");
              return src_fail (s, EIO, m);
            }
          if (s->gz->block_state == ISAL_BLOCK_FINISH)
            s->gz_between = true;
          else if (produced == 0 && no_input)
            return src_fail (s, EIO, "gzip stream is truncated");
        }
      else
        {
          if (no_input)
            {
              if (s->zret != 0)
                return src_fail (s, EIO, "zstd stream is truncated");
              s->end = true;
              break;
            }
          ZSTD_inBuffer ib = { s->in, s->in_len, s->in_pos };
          ZSTD_outBuffer ob = { out, cap, 0 };
          size_t r = ZSTD_decompressStream (s->zs, &ob, &ib);
          if (ZSTD_isError (r))
            {
              cleanup_free char *m
                  = xasprintf ("zstd stream is corrupt: %s", ZSTD_getErrorName (r));
              return src_fail (s, EIO, m);
            }
          s->zret = r;
          s->in_pos = ib.pos;
          produced = ob.pos;
        }
      if (produced > 0)
        {
          s->total += produced;
          if (s->total > s->limit)
            {
              cleanup_free char *m = xasprintf (
                  "uncompressed size exceeds the limit of %" PRIu64
                  " bytes (decompression bomb?); set IMGBUILD_MAX_LAYER_BYTES to allow more",
                  s->limit);
              return src_fail (s, EFBIG, m);
            }
          return (ssize_t) produced;
        }
    }
  return 0;
}

static void *
src_decoder (void *arg)
{
  struct src *s = arg;
  for (;;)
    {
      pthread_mutex_lock (&s->mu);
      while (s->count == PIPE_NBUF && !s->cancel)
        {
          /* The reader is the slower side: hash for it, in order, what it
           * has not taken yet, rather than wait. */
          uint64_t q = s->hash_next;
          if (!s->hashing && q >= s->taken && q < s->produced)
            {
              s->hashing = true;
              pthread_mutex_unlock (&s->mu);
              ib_sha256_update (s->hash, s->buf[q % PIPE_NBUF], s->len[q % PIPE_NBUF]);
              pthread_mutex_lock (&s->mu);
              s->hashing = false;
              s->hash_next = q + 1;
              s->decoder_hashed++;
              pthread_cond_broadcast (&s->cv);
              continue;
            }
          pthread_cond_wait (&s->cv, &s->mu);
        }
      bool cancel = s->cancel;
      unsigned slot = (s->head + s->count) % PIPE_NBUF;
      pthread_mutex_unlock (&s->mu);
      if (cancel)
        break;

      size_t n = 0;
      ssize_t r = 1;
      while (n < PIPE_BUF_SIZE && (r = src_produce (s, s->buf[slot] + n, PIPE_BUF_SIZE - n)) > 0)
        n += (size_t) r;

      pthread_mutex_lock (&s->mu);
      if (n > 0)
        {
          s->len[slot] = n;
          s->count++;
          s->produced++;
        }
      if (r <= 0)
        s->done = true;
      pthread_cond_broadcast (&s->cv);
      pthread_mutex_unlock (&s->mu);
      if (r <= 0)
        break;
    }
  return NULL;
}

/* The next buffer of the tar stream: its length, 0 at the end, -1 on error
 * (s->msg set).  Releases the buffer returned before. */
ssize_t
rfs_src_next (struct src *s, const void **out)
{
  pthread_mutex_lock (&s->mu);
  if (s->holding)
    {
      s->head = (s->head + 1) % PIPE_NBUF;
      s->count--;
      s->holding = false;
      pthread_cond_broadcast (&s->cv);
    }
  while (s->count == 0 && !s->done)
    pthread_cond_wait (&s->cv, &s->mu);
  ssize_t n;
  bool hash_here = false;
  if (s->count > 0)
    {
      s->holding = true;
      *out = s->buf[s->head];
      n = (ssize_t) s->len[s->head];
      uint64_t q = s->taken++;
      /* the decoder may be hashing this very buffer: let it finish */
      while (s->hashing && s->hash_next == q)
        pthread_cond_wait (&s->cv, &s->mu);
      if (s->hash_next == q)
        {
          s->hashing = true;
          hash_here = true;
        }
    }
  else
    n = s->msg ? -1 : 0;
  pthread_mutex_unlock (&s->mu);
  /* The diff_id: hashed here, on the reader's side of the ring, where the
   * bytes are about to be read anyway, unless the decoder did while it
   * waited for room (a reader slower than inflate: many small files); a
   * decoder slower than the reader (inflate-bound layers) leaves it all
   * here, so the two sides stay about even. */
  if (hash_here)
    {
      ib_sha256_update (s->hash, *out, (size_t) n);
      pthread_mutex_lock (&s->mu);
      s->hashing = false;
      s->hash_next++;
      pthread_cond_broadcast (&s->cv);
      pthread_mutex_unlock (&s->mu);
    }
  return n;
}

int
rfs_src_open (struct src *s, ib_layer_read_fn read_fn, void *ud, ib_error_t *err)
{
  memset (s, 0, sizeof *s);
  s->read = read_fn;
  s->ud = ud;
  s->in = xmalloc (SRC_BUF_SIZE);
  for (int i = 0; i < PIPE_NBUF; i++)
    s->buf[i] = xmalloc (PIPE_BUF_SIZE);
  s->hash = ib_sha256_new ();
  s->limit = ib_unpack_max_bytes ();
  pthread_mutex_init (&s->mu, NULL);
  pthread_cond_init (&s->cv, NULL);
  int r = pthread_create (&s->thread, NULL, src_decoder, s);
  if (r != 0)
    return ib_error_sys (err, r, "start the decoder thread");
  s->thread_live = true;
  return 0;
}

void
rfs_src_close (struct src *s)
{
  if (s->thread_live)
    {
      pthread_mutex_lock (&s->mu);
      s->cancel = true;
      pthread_cond_broadcast (&s->cv);
      pthread_mutex_unlock (&s->mu);
      pthread_join (s->thread, NULL);
      s->thread_live = false;
    }
  pthread_mutex_destroy (&s->mu);
  pthread_cond_destroy (&s->cv);
  free (s->gz);
  s->gz = NULL;
  ZSTD_freeDStream (s->zs);
  s->zs = NULL;
  free (s->in);
  s->in = NULL;
  for (int i = 0; i < PIPE_NBUF; i++)
    {
      free (s->buf[i]);
      s->buf[i] = NULL;
    }
  free (s->msg);
  s->msg = NULL;
  /* s->hash stays: the caller reads the diff_id from it, then frees it. */
}
