/* rootfs/pgzip.c — block-parallel gzip with thread-independent bytes.
 * See pgzip.h for the format. */
#include "rootfs/pgzip.h"
#include "common/util.h"

#include <errno.h>
#include <isa-l/crc.h>
#include <isa-l/igzip_lib.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

/* 8 workers deflate (igzip level 1) faster than one thread hashes the
 * output; each costs two blocks of memory (about 6 MiB) */
#define PGZ_MAX_THREADS 8

/* gzip member header (RFC 1952): no FNAME, MTIME 0, XFL 0, OS 3 (Unix). */
static const unsigned char gzip_header[10] = { 0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3 };

enum slot_state
{
  SLOT_FREE,
  SLOT_FILLING, /* the caller appends input */
  SLOT_QUEUED,  /* waits for a worker */
  SLOT_BUSY,    /* a worker deflates it */
  SLOT_DONE,    /* out/out_len (or status/msg) are final */
};

struct slot
{
  enum slot_state state;
  unsigned char *in;  /* IB_PGZ_DICT bytes of dictionary room, then the block */
  size_t dict_len;    /* dictionary bytes, right before the block */
  size_t len;         /* block bytes */
  bool last;
  unsigned char *out; /* the block's deflate bytes */
  size_t out_len, out_cap;
  uint32_t crc;       /* CRC-32 of the block */
  int status;         /* non-zero: deflate failed, msg says why */
  char *msg;
  struct isal_zstream *iz; /* ISA-L state and level buffer, kept for reuse */
  unsigned char *level_buf;
};

struct ib_pgz
{
  int level;
  int max_threads, n_threads;
  pthread_t th[PGZ_MAX_THREADS];
  ib_pgz_emit_fn emit;
  void *ud;
  pthread_mutex_t mu;
  pthread_cond_t work_cv; /* workers: a block was queued, or stop */
  pthread_cond_t done_cv; /* caller: a block is done */
  struct slot *slots;
  size_t n_slots;
  uint64_t submitted; /* blocks handed over (QUEUED or later) */
  uint64_t taken;     /* blocks a worker took (mutex) */
  uint64_t emitted;   /* blocks emitted and freed (caller only) */
  struct slot *cur;   /* the block being filled, number `submitted` */
  unsigned char dict[IB_PGZ_DICT];
  size_t dict_len;
  bool header_done, stopping, aborting;
  uint32_t crc;
  uint64_t in_size;
  int status;
  char *msg;
};

static int
level_engine_isal (int level)
{
  return level >= 1 && level <= ISAL_DEF_MAX_LEVEL;
}

static void
slot_fail (struct slot *s, int status, char *msg)
{
  s->status = status;
  free (s->msg);
  s->msg = msg;
}

/* Room for `need` more output bytes. */
static void
slot_grow (struct slot *s, size_t need)
{
  if (s->out_cap - s->out_len >= need)
    return;
  size_t cap = s->out_cap ? s->out_cap : 4096;
  while (cap - s->out_len < need)
    cap *= 2;
  s->out = xrealloc (s->out, cap);
  s->out_cap = cap;
}

static void
deflate_isal (struct slot *s, int level)
{
  static const uint32_t bufsz[] = { 0, ISAL_DEF_LVL1_DEFAULT, ISAL_DEF_LVL2_DEFAULT,
                                    ISAL_DEF_LVL3_DEFAULT };
  if (s->iz == NULL)
    {
      s->iz = xmalloc (sizeof *s->iz);
      s->level_buf = xmalloc (bufsz[level]);
    }
  struct isal_zstream *st = s->iz;
  isal_deflate_init (st);
  st->level = (uint32_t) level;
  st->level_buf = s->level_buf;
  st->level_buf_size = bufsz[level];
  st->gzip_flag = IGZIP_DEFLATE; /* raw deflate: header and trailer are ours */
  if (s->dict_len > 0)
    {
      int r = isal_deflate_set_dict (st, s->in + IB_PGZ_DICT - s->dict_len,
                                     (uint32_t) s->dict_len);
      if (r != COMP_OK)
        {
          slot_fail (s, EIO, xasprintf ("igzip: set dictionary failed (%d)", r));
          return;
        }
    }
  st->next_in = s->in + IB_PGZ_DICT;
  st->avail_in = (uint32_t) s->len;
  st->end_of_stream = s->last;
  st->flush = s->last ? NO_FLUSH : SYNC_FLUSH;
  for (;;)
    {
      slot_grow (s, 64 * 1024);
      st->next_out = s->out + s->out_len;
      st->avail_out = (uint32_t) (s->out_cap - s->out_len);
      int r = isal_deflate (st);
      if (r != COMP_OK)
        {
          slot_fail (s, EIO, xasprintf ("igzip deflate failed (%d)", r));
          return;
        }
      s->out_len = s->out_cap - st->avail_out;
      /* igzip returns with output room left only once all input is taken
       * and, for a flush, written */
      if (s->last ? st->internal_state.state == ZSTATE_END
                  : st->avail_in == 0 && st->avail_out > 0)
        return;
    }
}

static void
deflate_zlib (struct slot *s, int level)
{
  z_stream z;
  memset (&z, 0, sizeof z);
  /* raw deflate (windowBits -15): the header is ours, the trailer too */
  if (deflateInit2 (&z, level, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    {
      slot_fail (s, ENOMEM, xstrdup ("deflateInit2 failed"));
      return;
    }
  if (s->dict_len > 0
      && deflateSetDictionary (&z, s->in + IB_PGZ_DICT - s->dict_len, (uInt) s->dict_len)
             != Z_OK)
    {
      slot_fail (s, EIO, xstrdup ("deflateSetDictionary failed"));
      deflateEnd (&z);
      return;
    }
  z.next_in = s->in + IB_PGZ_DICT;
  z.avail_in = (uInt) s->len;
  for (;;)
    {
      slot_grow (s, 64 * 1024);
      z.next_out = s->out + s->out_len;
      z.avail_out = (uInt) (s->out_cap - s->out_len);
      int r = deflate (&z, s->last ? Z_FINISH : Z_SYNC_FLUSH);
      if (r == Z_STREAM_ERROR)
        {
          slot_fail (s, EIO, xstrdup ("deflate failed"));
          break;
        }
      s->out_len = s->out_cap - z.avail_out;
      /* zlib: output room left after a flush means it is all written */
      if (s->last ? r == Z_STREAM_END : z.avail_in == 0 && z.avail_out > 0)
        break;
    }
  deflateEnd (&z);
}

static void
deflate_slot (struct slot *s, int level)
{
  s->out_len = 0;
  slot_grow (s, s->len + (s->len >> 4) + 1024);
  s->crc = s->len > 0 ? crc32_gzip_refl (0, s->in + IB_PGZ_DICT, s->len) : 0;
  if (level_engine_isal (level))
    deflate_isal (s, level);
  else
    deflate_zlib (s, level);
}

static void *
worker_main (void *arg)
{
  ib_pgz_t *z = arg;
  pthread_mutex_lock (&z->mu);
  for (;;)
    {
      while (z->taken == z->submitted && !z->stopping)
        pthread_cond_wait (&z->work_cv, &z->mu);
      if (z->taken == z->submitted)
        break;
      struct slot *s = &z->slots[z->taken % z->n_slots];
      z->taken++;
      s->state = SLOT_BUSY;
      bool skip = z->aborting;
      pthread_mutex_unlock (&z->mu);
      if (skip)
        slot_fail (s, ECANCELED, xstrdup ("cancelled"));
      else
        deflate_slot (s, z->level);
      pthread_mutex_lock (&z->mu);
      s->state = SLOT_DONE;
      pthread_cond_broadcast (&z->done_cv);
    }
  pthread_mutex_unlock (&z->mu);
  return NULL;
}

static int
pgz_fail (ib_pgz_t *z, int status, char *msg)
{
  if (z->status == 0)
    {
      z->status = status;
      z->msg = msg;
    }
  else
    free (msg);
  return -1;
}

static int
pgz_error (ib_pgz_t *z, ib_error_t *err)
{
  return ib_error_set (err, z->status ? z->status : EIO, "gzip: %s",
                       z->msg ? z->msg : "failed");
}

static int
emit (ib_pgz_t *z, const unsigned char *p, size_t n)
{
  if (n == 0)
    return 0;
  if (z->emit (z->ud, p, n) < 0)
    return pgz_fail (z, EIO, xstrdup ("output failed"));
  return 0;
}

static int
emit_header (ib_pgz_t *z)
{
  if (z->header_done)
    return 0;
  z->header_done = true;
  return emit (z, gzip_header, sizeof gzip_header);
}

/* Emit block number z->emitted, waiting until it is done, and free its
 * slot. */
static int
emit_next (ib_pgz_t *z)
{
  struct slot *s = &z->slots[z->emitted % z->n_slots];
  pthread_mutex_lock (&z->mu);
  while (s->state != SLOT_DONE)
    pthread_cond_wait (&z->done_cv, &z->mu);
  pthread_mutex_unlock (&z->mu);
  int r = 0;
  if (s->status != 0)
    r = pgz_fail (z, s->status, xstrdup (s->msg ? s->msg : "deflate failed"));
  else if (z->status == 0)
    {
      z->crc = (uint32_t) crc32_combine (z->crc, s->crc, (z_off_t) s->len);
      r = emit_header (z);
      if (r == 0)
        r = emit (z, s->out, s->out_len);
    }
  else
    r = -1;
  s->state = SLOT_FREE;
  s->status = 0;
  z->emitted++;
  return r;
}

/* Emit the blocks that are done, in order, without waiting. */
static int
emit_ready (ib_pgz_t *z)
{
  while (z->emitted < z->submitted)
    {
      struct slot *s = &z->slots[z->emitted % z->n_slots];
      pthread_mutex_lock (&z->mu);
      bool done = s->state == SLOT_DONE;
      pthread_mutex_unlock (&z->mu);
      if (!done)
        return 0;
      if (emit_next (z) < 0)
        return -1;
    }
  return 0;
}

static void
start_workers (ib_pgz_t *z)
{
  while (z->n_threads < z->max_threads)
    {
      if (pthread_create (&z->th[z->n_threads], NULL, worker_main, z) != 0)
        break; /* fewer threads: the same bytes, later */
      z->n_threads++;
    }
}

/* Hand z->cur over to the workers (or deflate it here when there are
 * none). */
static void
submit_cur (ib_pgz_t *z, bool last)
{
  struct slot *s = z->cur;
  z->cur = NULL;
  s->last = last;
  if (!last && z->n_threads == 0)
    start_workers (z);
  if (z->n_threads == 0)
    {
      deflate_slot (s, z->level);
      s->state = SLOT_DONE;
      z->submitted++;
      z->taken++;
      return;
    }
  pthread_mutex_lock (&z->mu);
  s->state = SLOT_QUEUED;
  z->submitted++;
  pthread_cond_signal (&z->work_cv);
  pthread_mutex_unlock (&z->mu);
}

/* z->cur := the slot of block number z->submitted, emptied, with the
 * dictionary; emits older blocks while that slot is in use. */
static int
acquire_cur (ib_pgz_t *z)
{
  while (z->submitted - z->emitted >= z->n_slots)
    if (emit_next (z) < 0)
      return -1;
  struct slot *s = &z->slots[z->submitted % z->n_slots];
  if (s->in == NULL)
    s->in = xmalloc (IB_PGZ_DICT + IB_PGZ_BLOCK);
  s->state = SLOT_FILLING;
  s->len = 0;
  s->dict_len = z->dict_len;
  memcpy (s->in + IB_PGZ_DICT - z->dict_len, z->dict, z->dict_len);
  z->cur = s;
  return 0;
}

ib_pgz_t *
ib_pgz_new (int level, int threads, ib_pgz_emit_fn emit_fn, void *ud)
{
  ib_pgz_t *z = xmalloc (sizeof *z);
  z->level = level < 0 ? 1 : level;
  if (threads < 1)
    {
      long n = sysconf (_SC_NPROCESSORS_ONLN);
      threads = n < 1 ? 1 : (int) n;
    }
  z->max_threads = threads > PGZ_MAX_THREADS ? PGZ_MAX_THREADS : threads;
  z->emit = emit_fn;
  z->ud = ud;
  /* two blocks a worker and two more: the caller fills and emits while
   * every worker has the next block queued */
  z->n_slots = (size_t) z->max_threads * 2 + 2;
  z->slots = xmalloc (z->n_slots * sizeof *z->slots);
  pthread_mutex_init (&z->mu, NULL);
  pthread_cond_init (&z->work_cv, NULL);
  pthread_cond_init (&z->done_cv, NULL);
  return z;
}

uint64_t
ib_pgz_in_size (const ib_pgz_t *z)
{
  return z->in_size;
}

int
ib_pgz_write (ib_pgz_t *z, const void *p, size_t n, ib_error_t *err)
{
  const unsigned char *b = p;
  if (z->status != 0)
    return pgz_error (z, err);
  while (n > 0)
    {
      if (z->cur != NULL && z->cur->len == IB_PGZ_BLOCK)
        {
          /* more input: the full block is not the last */
          memcpy (z->dict, z->cur->in + IB_PGZ_DICT + IB_PGZ_BLOCK - IB_PGZ_DICT, IB_PGZ_DICT);
          z->dict_len = IB_PGZ_DICT;
          submit_cur (z, false);
          if (emit_ready (z) < 0)
            return pgz_error (z, err);
        }
      if (z->cur == NULL && acquire_cur (z) < 0)
        return pgz_error (z, err);
      size_t k = IB_PGZ_BLOCK - z->cur->len;
      if (k > n)
        k = n;
      memcpy (z->cur->in + IB_PGZ_DICT + z->cur->len, b, k);
      z->cur->len += k;
      z->in_size += k;
      b += k;
      n -= k;
    }
  return 0;
}

static void
stop_workers (ib_pgz_t *z, bool abort)
{
  pthread_mutex_lock (&z->mu);
  z->stopping = true;
  z->aborting |= abort;
  pthread_cond_broadcast (&z->work_cv);
  pthread_mutex_unlock (&z->mu);
  for (int i = 0; i < z->n_threads; i++)
    pthread_join (z->th[i], NULL);
  z->n_threads = 0;
}

int
ib_pgz_finish (ib_pgz_t *z, ib_error_t *err)
{
  if (z->status != 0)
    {
      stop_workers (z, true);
      return pgz_error (z, err);
    }
  if (z->cur == NULL && acquire_cur (z) < 0) /* no input at all */
    {
      stop_workers (z, true);
      return pgz_error (z, err);
    }
  submit_cur (z, true);
  while (z->emitted < z->submitted)
    if (emit_next (z) < 0)
      {
        stop_workers (z, true);
        return pgz_error (z, err);
      }
  stop_workers (z, false);
  /* the gzip trailer (RFC 1952): CRC-32 and ISIZE, little-endian */
  unsigned char t[8];
  uint32_t isize = (uint32_t) z->in_size;
  for (int i = 0; i < 4; i++)
    {
      t[i] = (unsigned char) (z->crc >> (8 * i));
      t[4 + i] = (unsigned char) (isize >> (8 * i));
    }
  if (emit_header (z) < 0 || emit (z, t, sizeof t) < 0)
    return pgz_error (z, err);
  return 0;
}

void
ib_pgz_free (ib_pgz_t *z)
{
  if (z == NULL)
    return;
  stop_workers (z, true);
  for (size_t i = 0; i < z->n_slots; i++)
    {
      struct slot *s = &z->slots[i];
      free (s->in);
      free (s->out);
      free (s->msg);
      free (s->iz);
      free (s->level_buf);
    }
  free (z->slots);
  free (z->msg);
  pthread_mutex_destroy (&z->mu);
  pthread_cond_destroy (&z->work_cv);
  pthread_cond_destroy (&z->done_cv);
  free (z);
}
