/* rootfs/rootfs_int.h — what the files of rootfs/ share among themselves;
 * not for other modules (their contracts are the public headers).
 *
 * Errors follow common/error.h; paths are host paths unless said.
 */
#ifndef IB_ROOTFS_INT_H
#define IB_ROOTFS_INT_H

#include "common/error.h"
#include "oci/digest.h"
#include "rootfs/layer.h"
#include "rootfs/unpack.h"
#include <dirent.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <zstd.h>

/* --- scan.c (used by layer.c's diff) ------------------------------------- */

struct scan_ent
{
  char *path;            /* relative, no leading "./" or "/", no trailing "/" */
  mode_t mode;           /* type and permission bits */
  uid_t uid;
  gid_t gid;
  uint64_t size;
  int64_t mtime_ns, ctime_ns;
  dev_t dev, rdev;
  ino_t ino;
  nlink_t nlink;
  char *link;            /* symlink target, else NULL */
};

struct ib_fs_scan
{
  struct scan_ent *ents; /* sorted by strcmp of path */
  size_t n, cap;
  bool no_dev;           /* st_dev not recorded (0): the scans of an overlay step
                            come from two mounts of the same layers */
  bool owners;           /* owners recorded on files (rootfs/owner.h) are read:
                            in every mode but root, which has every id */
  const char *root;      /* (while scanning) the tree's path, for those reads:
                            a plain path walk costs less than /proc/self/fd */
};

/* Exclusions normalized like entry paths ("/proc/" -> "proc"; DIR and a
 * trailing slash-star -> "DIR/", which matches only what is under DIR);
 * caller frees. */
char **rfs_normalize_excludes (char *const *exclude);
/* Is `path` (an entry path) one of `ex` (normalized) or under one? */
bool rfs_excluded (char *const *ex, const char *path);
/* The entry of `s` at `path`, NULL when none (binary search). */
struct scan_ent *rfs_scan_find (const ib_fs_scan_t *s, const char *path);
/* Scan the tree at `rootfs`, leaving out `ex` (normalized); no_dev: st_dev
 * not recorded.  *out sorted by path; caller frees (ib_fs_scan_free). */
int rfs_scan_tree (const char *rootfs, char *const *ex, bool no_dev, ib_fs_scan_t **out,
                   ib_error_t *err);

/* --- helpers.c ----------------------------------------------------------- */

/* A small string-keyed hash map (open addressing, linear probing).  Keys
 * are copied; values are the caller's (freed by rfs_hmap_free when
 * free_vals).  Zero-initialised it is empty. */
typedef struct
{
  char *key;
  void *val;
} hslot_t;

typedef struct
{
  hslot_t *slots;
  size_t cap, n;
} hmap_t;

/* The slot of `key`, NULL when absent. */
hslot_t *rfs_hmap_find (const hmap_t *m, const char *key);
/* Insert `key` or replace its value. */
void rfs_hmap_put (hmap_t *m, const char *key, void *val);
void rfs_hmap_free (hmap_t *m, bool free_vals);

/* ib_layer_read_fn over a file: `ud` points to its fd. */
ssize_t rfs_fd_read (void *ud, void *buf, size_t len, ib_error_t *err);

/* The user.* and security.capability xattrs of fd sfd set on dfd (others
 * are host-specific); a failure is a debug message naming `shown`. */
void rfs_copy_xattrs (int sfd, int dfd, const char *shown);

/* "dev:ino" of a stat (caller frees). */
char *rfs_ino_key (const struct stat *st);

/* After a failed chown of `name` (errno set): EPERM/EINVAL (an id not
 * mapped in the user namespace) is a debug message, the owner stays the
 * caller's; anything else a warning. */
void rfs_ignore_chown_error (const char *name);

/* Whether `path` is a directory (symlinks followed). */
bool rfs_is_dir (const char *path);

/* fdopendir (fd); when it fails fd is closed, errno kept. */
DIR *rfs_fdopendir (int fd);
/* The names in directory stream d but "." and "..", in readdir order:
 * a NULL-terminated vector (NULL when there are none), caller frees
 * (ib_strv_free). */
char **rfs_dir_names (DIR *d);

/* write(2) all of p[0..n) to fd, retrying on EINTR; false when a write
 * fails or writes nothing.  Async-signal-safe (used in the sandbox's
 * children). */
bool rfs_write_full (int fd, const char *p, size_t n);

/* --- decode.c: the decoding half of the unpack pipeline ------------------ */

enum src_kind
{
  SRC_TAR,
  SRC_GZIP,
  SRC_ZSTD
};

/* The decoding half of the unpack pipeline.  A worker thread reads the
 * layer's bytes through `read`, decompresses them (gzip with ISA-L's
 * igzip, several times faster than zlib's inflate; zstd with libzstd)
 * and hands the tar stream over in PIPE_BUF_SIZE buffers through a ring of
 * PIPE_NBUF; in the calling thread libarchive parses the tar and the
 * files are written.  Each buffer is hashed (the diff_id), in order, by
 * the calling thread as it takes it, or earlier by the worker while the
 * ring is full.  Decoding and writing thus run on two cores, and memory
 * stays bounded (PIPE_NBUF MiB). */
#define PIPE_BUF_SIZE (1 << 20)
#define PIPE_NBUF 4

struct inflate_state;

struct src
{
  ib_layer_read_fn read;
  void *ud;
  enum src_kind kind;
  bool kind_known;
  struct inflate_state *gz;
  bool gz_between;       /* a gzip member ended; another may follow */
  ZSTD_DStream *zs;
  size_t zret;           /* last ZSTD_decompressStream result: 0 = frame complete */
  unsigned char *in;
  size_t in_len, in_pos;
  bool in_eof;
  bool end;              /* uncompressed stream finished */
  ib_sha256_t *hash;
  uint64_t total, limit;
  int status;            /* pipeline error: reported in preference to libarchive's */
  char *msg;

  /* The ring between the decoder thread and the tar reader. */
  pthread_t thread;
  bool thread_live;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  unsigned char *buf[PIPE_NBUF];
  size_t len[PIPE_NBUF];
  unsigned head, count;  /* buf[head] is the next (or current) buffer to read */
  bool holding;          /* the reader holds buf[head] */
  bool done;             /* the decoder stopped: end of stream or s->msg */
  bool cancel;           /* the reader gave up: stop decoding */
  /* The diff_id hash, in stream order, by whichever side would wait:
   * buffer number q (counted from 0) lives in buf[q % PIPE_NBUF]. */
  uint64_t produced;     /* buffers the decoder has put in the ring */
  uint64_t taken;        /* buffers the reader has taken */
  uint64_t hash_next;    /* the next buffer to hash */
  bool hashing;          /* buffer hash_next is being hashed (by either side) */
  uint64_t decoder_hashed; /* buffers the decoder hashed */
};

/* Start decoding the layer bytes `read_fn` delivers (compression detected
 * from the first bytes; the size limit is ib_unpack_max_bytes ()).  -1
 * with *err when the decoder thread cannot start; rfs_src_close in any
 * case. */
int rfs_src_open (struct src *s, ib_layer_read_fn read_fn, void *ud, ib_error_t *err);
/* The next buffer of the tar stream (hashed into s->hash, in order, by the
 * decoder thread while the ring is full, else here): its length, 0
 * at the end, -1 on error (s->status, s->msg).  Releases the buffer
 * returned before. */
ssize_t rfs_src_next (struct src *s, const void **out);
/* Stop and join the decoder, free the buffers; s->total and s->hash stay
 * (the caller reads the diff_id from the hash, then frees it). */
void rfs_src_close (struct src *s);

/* --- overlay.c ----------------------------------------------------------- */

/* DEST.ovl: the directory of overlay tree `dest` (upper, work, lowers);
 * caller frees. */
char *rfs_ovl_dir (const char *dest);
/* Whether overlays may be made now (allowed, and not found unusable). */
bool rfs_overlay_usable (void);
/* Whether `snap` (STORE/snapshots/<chain>) is usable as a layered snapshot
 * (snap.ovl/upper and every lower its `lowers` file names exist) while
 * overlays can be made. */
bool rfs_layered_snapshot_ok (const char *snap);

/* --- unpack_jobs.c ------------------------------------------------------- */

/* Where an image's layers come from, for rfs_unpack_layers. */
typedef struct rfs_layer_src
{
  /* A new read of layer i's bytes from its start: *fn and *ud, for one
   * thread; close ends it.  Layers may be read at once. */
  int (*open) (void *ctx, size_t i, ib_layer_read_fn *fn, void **ud, ib_error_t *err);
  void (*close) (void *ctx, size_t i, void *ud);
  /* Layer i is on dest (in order, on the calling thread), its diff_id
   * checked (may be NULL). */
  void (*applied) (void *ctx, size_t i);
  char *const *names;    /* each layer's name in messages */
  char *const *digests;  /* each layer's blob digest, in messages */
  char *const *diff_ids; /* what each layer's tar must hash to (the config's) */
  void *ctx;
} rfs_layer_src_t;

/* Layers first..n-1 onto directory dest (holding the layers below
 * `first`), each diff_id checked ("layer I (DIGEST): diff_id mismatch").
 * With `at_once` (dest a plain directory, not an overlay), several at once
 * where that helps (unpack.h: ib_unpack_layer_side; side directories are
 * made beside dest, named DEST.layerI-XXXXXX, and removed); else one by
 * one.  The result is what applying them one by one gives.  -1 with *err
 * (dest partly unpacked) on the first failure; the later layers are not
 * applied. */
int rfs_unpack_layers (const char *dest, size_t first, size_t n, bool at_once,
                       const rfs_layer_src_t *src, ib_error_t *err);

#endif
