/* builder/engine/cache.h — the build cache: step keys, the content hash of the
 * files a step copies, and the records that map a key to the image state
 * (config and layers) the step produced.
 *
 * A step's key is the sha256 of its parent's key (or, for a stage's first
 * step, the identity of its base: a manifest digest, "scratch", or another
 * stage's last key), the instruction after expansion, the build args it
 * sees (RUN: every ARG in scope, as they are its environment), the content
 * of every file it copies from the build context (ib_cache_hash_path), the
 * key of every stage it reads (COPY --from, RUN --mount from=) and what
 * shapes the bytes of its layer (compression, level, SOURCE_DATE_EPOCH,
 * identity mode).  The builder composes the text; this module hashes it.
 *
 * Records live in <store>/cache/steps/<hex of key>.json:
 *   {"v":1, "config":{the image config after the step},
 *    "layers":[{"mediaType","digest","size"}...]}  (all layers of the image)
 * written atomically (temp file + fsync + rename), so a crash leaves either
 * no record or a whole one.  A record whose layer blob is gone (pruned) is a
 * miss.
 */
#ifndef IB_BUILDER_CACHE_H
#define IB_BUILDER_CACHE_H

#include "builder/engine/ignore.h"
#include "common/error.h"
#include "oci/digest.h"
#include "oci/manifest.h"
#include "oci/store.h"
#include <jansson.h>
#include <stdbool.h>

/* Version of the key text and record format; part of every key, so a new
 * format never reads an old record. */
#define IB_CACHE_VERSION "imgbuild-cache-1"

/* Feed the content of host path `path` into `h`: for a regular file its
 * mode bits (07777) and bytes; for a symlink its target; for a directory,
 * recursively, every entry's path relative to `path` (sorted by bytes), type,
 * mode bits and content.  Not hashed: owners (COPY sets them), times (as
 * BuildKit: touching a file does not invalidate), xattrs.  `path` itself is
 * followed when it is a symlink (callers pass resolved paths).  A regular
 * file met before under another name (a hard link) hashes that name too
 * (trees without hard links hash as they did).  Other file
 * types (devices, sockets, fifos) hash as their type and mode.  Errors
 * (unreadable entries) name the path.  `*entries` (may be NULL) is
 * incremented by the number of entries hashed. */
int ib_cache_hash_path (const char *path, ib_sha256_t *h, size_t *entries, ib_error_t *err);

/* A memo of regular files' content digests (as git's index): keyed by
 * (device, inode, size, mtime, ctime, in ns) and kept in
 * <store>/cache/filehash.bin, so that a rebuild does not read every byte
 * of a large context again.  A file whose ctime is less than 2 s before
 * the moment it is hashed is never memoized (a second change within the
 * clock's granularity would keep both times).  Records are appended
 * whole (O_APPEND, 72 bytes each with their own checksum): a torn or
 * damaged record is ignored.  Never fails: an unreadable memo is empty,
 * and a memo that cannot be written only costs the next build time. */
typedef struct ib_cache_memo ib_cache_memo_t;
ib_cache_memo_t *ib_cache_memo_open (ib_store_t *store);
/* Append what was learnt, free.  NULL is fine. */
void ib_cache_memo_close (ib_cache_memo_t *m);
/* ib_cache_hash_path using (and filling) `memo` (may be NULL; the same
 * result as without it), leaving out what `filter` (may be NULL) skips
 * below a directory, as ib_copy_into does. */
int ib_cache_hash_path_memo (const char *path, ib_cache_memo_t *memo,
                             const ib_path_filter_t *filter, ib_sha256_t *h, size_t *entries,
                             ib_error_t *err);

/* Key of a step: sha256 over IB_CACHE_VERSION, `parent` and `text`. */
void ib_cache_key (const char *parent, const char *text, char out[IB_DIGEST_LEN]);

/* Look `key` up.  Returns 1 and sets *config (new reference) and *layers /
 * *n_layers (owned by the caller: free each media_type, then the array)
 * on a hit; 0 on a miss (no record, an unreadable or malformed one, or one
 * naming a blob the store no longer holds); never fails.  A hit sets the
 * record's mtime to now: its last use, which prune --keep-storage reads. */
int ib_cache_get (ib_store_t *store, const char *key, json_t **config,
                  ib_descriptor_t **layers, size_t *n_layers);

/* Record the image state after the step `key`.  Errors (disk full) name the
 * record's path; the caller may treat them as warnings. */
int ib_cache_put (ib_store_t *store, const char *key, json_t *config,
                  const ib_descriptor_t *layers, size_t n_layers, ib_error_t *err);

#endif
