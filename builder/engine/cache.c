#include "builder/engine/cache.h"
#include "common/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <search.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int
cmp_str (const void *a, const void *b)
{
  return strcmp (*(char *const *) a, *(char *const *) b);
}

static void
hash_str (ib_sha256_t *h, const char *s)
{
  ib_sha256_update (h, s, strlen (s) + 1); /* with the NUL: no ambiguity */
}

/* ---- the file digest memo ---- */

#define MEMO_REC 72 /* key 32 + digest 32 + check 8 */

struct ib_cache_memo
{
  char *path;
  unsigned char *slots; /* open addressing: n_slots * 64 bytes (key, digest); key 0 = empty */
  size_t n_slots, n_used;
  unsigned char *fresh; /* new records to append */
  size_t n_fresh;
};

static void
raw_sha256 (const void *a, size_t alen, const void *b, size_t blen, unsigned char out[32])
{
  ib_sha256_t *h = ib_sha256_new ();
  char d[IB_DIGEST_LEN];
  ib_sha256_update (h, a, alen);
  if (blen)
    ib_sha256_update (h, b, blen);
  ib_sha256_final (h, d);
  for (int i = 0; i < 32; i++)
    sscanf (d + 7 + 2 * i, "%2hhx", &out[i]);
}

static bool
m_slots_nonempty (ib_cache_memo_t *m)
{
  return m->n_slots != 0;
}

static unsigned char *
memo_slot (ib_cache_memo_t *m, const unsigned char key[32])
{
  size_t i;
  memcpy (&i, key, sizeof i);
  for (i %= m->n_slots;; i = (i + 1) % m->n_slots)
    {
      unsigned char *s = m->slots + i * 64;
      static const unsigned char zero[32];
      if (memcmp (s, key, 32) == 0 || memcmp (s, zero, 32) == 0)
        return s;
    }
}

static void
memo_put (ib_cache_memo_t *m, const unsigned char key[32], const unsigned char digest[32])
{
  if ((m->n_used + 1) * 2 > m->n_slots)
    {
      unsigned char *old = m->slots;
      size_t old_n = m->n_slots;
      m->n_slots = old_n ? old_n * 2 : 1024;
      m->slots = xmalloc (m->n_slots * 64);
      m->n_used = 0;
      for (size_t i = 0; i < old_n; i++)
        {
          static const unsigned char zero[32];
          if (memcmp (old + i * 64, zero, 32) != 0)
            {
              memcpy (memo_slot (m, old + i * 64), old + i * 64, 64);
              m->n_used++;
            }
        }
      free (old);
    }
  unsigned char *s = memo_slot (m, key);
  static const unsigned char zero[32];
  if (memcmp (s, zero, 32) == 0) /* an empty slot */
    m->n_used++;
  memcpy (s, key, 32);
  memcpy (s + 32, digest, 32);
}

ib_cache_memo_t *
ib_cache_memo_open (ib_store_t *store)
{
  ib_cache_memo_t *m = xmalloc (sizeof *m);
  m->path = ib_store_path (store, IB_STORE_CACHE, "filehash.bin");
  cleanup_free char *data = NULL;
  size_t len = 0;
  if (ib_read_file (m->path, &data, &len, NULL) < 0)
    {
      return m;
    }
  for (size_t off = 0; off + MEMO_REC <= len; off += MEMO_REC)
    {
      unsigned char check[32];
      raw_sha256 (data + off, 64, NULL, 0, check);
      if (memcmp (check, data + off + 64, 8) == 0)
        memo_put (m, (unsigned char *) data + off, (unsigned char *) data + off + 32);
    }
  return m;
}

void
ib_cache_memo_close (ib_cache_memo_t *m)
{
  if (m == NULL)
    return;
  if (m->n_fresh)
    {
      cleanup_free char *dir = xstrdup (m->path);
      *strrchr (dir, '/') = '\0';
      int fd = ib_mkdir_p (dir, 0700, NULL) == 0
                   ? open (m->path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644)
                   : -1;
      if (fd >= 0)
        {
          /* one write: whole records, appended atomically */
          if (write (fd, m->fresh, m->n_fresh * MEMO_REC) < 0)
            ib_debug ("file digest memo %s: %s", m->path, strerror (errno));
          close (fd);
        }
    }
  free (m->fresh);
  free (m->slots);
  free (m->path);
  free (m);
}

/* The content digest of an open regular file, from the memo when its
 * metadata key is known. */
static int
file_digest (int fd, const struct stat *sb, ib_cache_memo_t *memo, const char *shown,
             unsigned char out[32], ib_error_t *err)
{
  unsigned char key[32];
  if (memo)
    {
      long long meta[7] = { (long long) sb->st_dev, (long long) sb->st_ino, (long long) sb->st_size,
                            (long long) sb->st_mtim.tv_sec, sb->st_mtim.tv_nsec,
                            (long long) sb->st_ctim.tv_sec, sb->st_ctim.tv_nsec };
      raw_sha256 ("imgbuild-filehash-1", 19, meta, sizeof meta, key);
      if (m_slots_nonempty (memo))
        {
          unsigned char *s = memo_slot (memo, key);
          if (memcmp (s, key, 32) == 0)
            {
              memcpy (out, s + 32, 32);
              return 0;
            }
        }
    }
  ib_sha256_t *h = ib_sha256_new ();
  char buf[65536];
  for (;;)
    {
      ssize_t n = read (fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        {
          int e = errno;
          ib_sha256_free (h);
          return ib_error_sys (err, e, "read %s", shown);
        }
      if (n == 0)
        break;
      ib_sha256_update (h, buf, (size_t) n);
    }
  char d[IB_DIGEST_LEN];
  ib_sha256_final (h, d);
  for (int i = 0; i < 32; i++)
    sscanf (d + 7 + 2 * i, "%2hhx", &out[i]);
  struct timespec now;
  clock_gettime (CLOCK_REALTIME, &now);
  if (memo && sb->st_ctim.tv_sec + 2 < now.tv_sec)
    {
      memo_put (memo, key, out);
      memo->fresh = xrealloc (memo->fresh, (memo->n_fresh + 1) * MEMO_REC);
      unsigned char *r = memo->fresh + memo->n_fresh * MEMO_REC;
      memcpy (r, key, 32);
      memcpy (r + 32, out, 32);
      unsigned char check[32];
      raw_sha256 (r, 64, NULL, 0, check);
      memcpy (r + 64, check, 8);
      memo->n_fresh++;
    }
  return 0;
}

/* A file with more than one link met in a walk: its first path, so that
 * a later name of it hashes as a link to that path (COPY keeps the links
 * among the files of one source). */
typedef struct walk_inode
{
  dev_t dev;
  ino_t ino;
  char *rel;
} walk_inode_t;

static int
cmp_walk_inode (const void *a, const void *b)
{
  const walk_inode_t *x = a, *y = b;
  if (x->dev != y->dev)
    return x->dev < y->dev ? -1 : 1;
  return x->ino < y->ino ? -1 : x->ino > y->ino;
}

static void
free_walk_inode (void *p)
{
  walk_inode_t *w = p;
  free (w->rel);
  free (w);
}

static int
hash_entry (int dirfd, const char *name, const char *shown, const char *rel, bool follow,
            ib_cache_memo_t *memo, const ib_path_filter_t *filter, ib_sha256_t *h,
            size_t *entries, void **inodes, ib_error_t *err)
{
  struct stat sb;
  if (fstatat (dirfd, name, &sb, follow ? 0 : AT_SYMLINK_NOFOLLOW) < 0)
    return ib_error_sys (err, errno, "%s", shown);
  if (entries)
    (*entries)++;
  char head[64];
  char type = S_ISREG (sb.st_mode) ? 'f' : S_ISDIR (sb.st_mode) ? 'd' : S_ISLNK (sb.st_mode) ? 'l' : 'o';
  snprintf (head, sizeof head, "%c %o", type, (unsigned) (sb.st_mode & 07777));
  hash_str (h, rel);
  hash_str (h, head);
  if (S_ISLNK (sb.st_mode))
    {
      char target[4096];
      ssize_t n = readlinkat (dirfd, name, target, sizeof target - 1);
      if (n < 0)
        return ib_error_sys (err, errno, "%s", shown);
      target[n] = '\0';
      hash_str (h, target);
      return 0;
    }
  if (S_ISREG (sb.st_mode) && sb.st_nlink > 1)
    {
      /* the second and later names of a file: "= first path" hashed
       * besides the content (nothing for files with one name, so the
       * hashes of trees without hard links are as they were) */
      walk_inode_t key = { .dev = sb.st_dev, .ino = sb.st_ino };
      void *node = tfind (&key, inodes, cmp_walk_inode);
      if (node)
        {
          cleanup_free char *eq = xasprintf ("= %s", (*(walk_inode_t **) node)->rel);
          hash_str (h, eq);
        }
      else
        {
          walk_inode_t *w = xmalloc (sizeof *w);
          *w = key;
          w->rel = xstrdup (rel);
          if (tsearch (w, inodes, cmp_walk_inode) == NULL)
            free_walk_inode (w);
        }
    }
  if (S_ISREG (sb.st_mode))
    {
      cleanup_close int fd = openat (dirfd, name, O_RDONLY | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW));
      if (fd < 0)
        return ib_error_sys (err, errno, "%s", shown);
      char sz[32];
      snprintf (sz, sizeof sz, "%lld", (long long) sb.st_size);
      hash_str (h, sz);
      struct stat fsb;
      if (fstat (fd, &fsb) < 0)
        return ib_error_sys (err, errno, "%s", shown);
      unsigned char d[32];
      if (file_digest (fd, &fsb, memo, shown, d, err) < 0)
        return -1;
      ib_sha256_update (h, d, 32);
      return 0;
    }
  if (!S_ISDIR (sb.st_mode))
    return 0;
  cleanup_close int fd = openat (dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW));
  if (fd < 0)
    return ib_error_sys (err, errno, "%s", shown);
  int dfd = dup (fd);
  if (dfd < 0)
    return ib_error_sys (err, errno, "%s", shown);
  DIR *d = fdopendir (dfd);
  if (d == NULL)
    {
      close (dfd);
      return ib_error_sys (err, errno, "%s", shown);
    }
  char **names = NULL;
  size_t n = 0;
  struct dirent *de;
  while ((de = readdir (d)) != NULL)
    {
      if (strcmp (de->d_name, ".") == 0 || strcmp (de->d_name, "..") == 0)
        continue;
      names = xrealloc (names, (n + 1) * sizeof (char *));
      names[n++] = xstrdup (de->d_name);
    }
  closedir (d);
  if (n)
    qsort (names, n, sizeof (char *), cmp_str);
  int ret = 0;
  for (size_t i = 0; i < n; i++)
    {
      if (ret == 0)
        {
          cleanup_free char *crel = *rel ? xasprintf ("%s/%s", rel, names[i]) : xstrdup (names[i]);
          cleanup_free char *cshown = xasprintf ("%s/%s", shown, names[i]);
          bool descend = false;
          struct stat sb;
          /* a skipped file never counts; a skipped directory is walked
           * when an exception may include something below it */
          if (!filter || !ib_path_filter_skip (filter, crel, &descend)
              || (descend && fstatat (fd, names[i], &sb, AT_SYMLINK_NOFOLLOW) == 0
                  && S_ISDIR (sb.st_mode)))
            ret = hash_entry (fd, names[i], cshown, crel, false, memo, filter, h, entries, inodes,
                              err);
        }
      free (names[i]);
    }
  free (names);
  return ret;
}

int
ib_cache_hash_path (const char *path, ib_sha256_t *h, size_t *entries, ib_error_t *err)
{
  return ib_cache_hash_path_memo (path, NULL, NULL, h, entries, err);
}

int
ib_cache_hash_path_memo (const char *path, ib_cache_memo_t *memo, const ib_path_filter_t *filter,
                         ib_sha256_t *h, size_t *entries, ib_error_t *err)
{
  void *inodes = NULL;
  int r = hash_entry (AT_FDCWD, path, path, "", true, memo, filter, h, entries, &inodes, err);
  tdestroy (inodes, free_walk_inode);
  return r;
}

void
ib_cache_key (const char *parent, const char *text, char out[IB_DIGEST_LEN])
{
  ib_sha256_t *h = ib_sha256_new ();
  hash_str (h, IB_CACHE_VERSION);
  hash_str (h, parent ? parent : "");
  hash_str (h, text ? text : "");
  ib_sha256_final (h, out); /* frees h */
}

static char *
record_path (ib_store_t *store, const char *key)
{
  cleanup_free char *name = xasprintf ("%s.json", ib_digest_hex (key));
  return ib_store_path (store, IB_STORE_CACHE_STEPS, name);
}

int
ib_cache_get (ib_store_t *store, const char *key, json_t **config, ib_descriptor_t **layers,
              size_t *n_layers)
{
  *config = NULL;
  *layers = NULL;
  *n_layers = 0;
  cleanup_free char *path = record_path (store, key);
  cleanup_free char *data = NULL;
  size_t len = 0;
  if (ib_read_file (path, &data, &len, NULL) < 0)
    {
      return 0;
    }
  json_t *rec = json_loadb (data, len, 0, NULL);
  json_t *cfg = json_object_get (rec, "config");
  json_t *ls = json_object_get (rec, "layers");
  if (!json_is_object (cfg) || !json_is_array (ls)
      || json_integer_value (json_object_get (rec, "v")) != 1)
    {
      ib_warn ("build cache: ignoring the malformed record %s", path);
      json_decref (rec);
      return 0;
    }
  size_t n = json_array_size (ls);
  ib_descriptor_t *v = xmalloc ((n + 1) * sizeof (ib_descriptor_t));
  size_t i;
  json_t *l;
  json_array_foreach (ls, i, l)
  {
    const char *mt = json_string_value (json_object_get (l, "mediaType"));
    const char *dg = json_string_value (json_object_get (l, "digest"));
    json_t *sz = json_object_get (l, "size");
    if (mt == NULL || dg == NULL || !ib_digest_valid (dg) || !json_is_integer (sz)
        || !ib_store_has_blob (store, dg))
      {
        for (size_t k = 0; k < i; k++)
          free (v[k].media_type);
        free (v);
        json_decref (rec);
        return 0;
      }
    v[i].media_type = xstrdup (mt);
    snprintf (v[i].digest, IB_DIGEST_LEN, "%s", dg);
    v[i].size = json_integer_value (sz);
  }
  *config = json_incref (cfg);
  *layers = v;
  *n_layers = n;
  json_decref (rec);
  /* its last use, for prune --keep-storage (best effort) */
  utimensat (AT_FDCWD, path, NULL, 0);
  return 1;
}

int
ib_cache_put (ib_store_t *store, const char *key, json_t *config, const ib_descriptor_t *layers,
              size_t n_layers, ib_error_t *err)
{
  cleanup_free char *dir = ib_store_path (store, IB_STORE_CACHE_STEPS, NULL);
  if (ib_mkdir_p (dir, 0700, err) < 0)
    return -1;
  json_t *ls = json_array ();
  for (size_t i = 0; i < n_layers; i++)
    json_array_append_new (ls, json_pack ("{s:s, s:s, s:I}", "mediaType", layers[i].media_type,
                                          "digest", layers[i].digest, "size",
                                          (json_int_t) layers[i].size));
  json_t *rec = json_pack ("{s:i, s:O, s:o}", "v", 1, "config", config, "layers", ls);
  cleanup_free char *text = json_dumps (rec, JSON_COMPACT | JSON_SORT_KEYS);
  json_decref (rec);
  cleanup_free char *path = record_path (store, key);
  /* Written in the store's tmp/ (which prune empties) and renamed into
   * place: a process killed while writing leaves nothing in cache/steps. */
  cleanup_free char *tmp = NULL;
  int fd = ib_store_tmp_file (store, "record", &tmp, err);
  if (fd < 0)
    return ib_error_prefix (err, "build cache");
  if (ib_write_all (fd, text, strlen (text), path, err) < 0 || fchmod (fd, 0644) < 0
      || fsync (fd) < 0)
    {
      ib_error_sys (err, errno, "write %s", tmp); /* keeps ib_write_all's error */
      close (fd);
      unlink (tmp);
      return ib_error_prefix (err, "build cache");
    }
  if (close (fd) < 0 || rename (tmp, path) < 0)
    {
      ib_error_sys (err, errno, "write %s", path);
      unlink (tmp);
      return ib_error_prefix (err, "build cache");
    }
  if (ib_fsync_dir (dir, err) < 0)
    return ib_error_prefix (err, "build cache");
  return 0;
}
