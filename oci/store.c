/* oci/store.c — the content store, an OCI image layout (image-spec
 * image-layout.md) plus imgbuild's snapshots/, cache/, tmp/ and lock. */
#include "oci/store.h"
#include "common/util.h"
#include "oci/json_int.h"
#include "oci/ref.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define REF_NAME_ANNOTATION "org.opencontainers.image.ref.name"
#define OCI_LAYOUT_JSON "{\"imageLayoutVersion\":\"1.0.0\"}"
#define EMPTY_INDEX_JSON "{\"schemaVersion\":2,\"manifests\":[]}"

char *
ib_store_default_root (void)
{
  const char *e = getenv ("IMGBUILD_STORE");
  if (e && *e)
    return xstrdup (e);
  e = getenv ("XDG_DATA_HOME");
  if (e && *e == '/')
    return ib_path_join (e, "imgbuild");
  const char *home = getenv ("HOME");
  if (home == NULL || *home == '\0')
    {
      struct passwd *pw = getpwuid (getuid ());
      home = pw && pw->pw_dir ? pw->pw_dir : "/";
    }
  return xasprintf ("%s/.local/share/imgbuild", strcmp (home, "/") == 0 ? "" : home);
}

static int
write_if_missing (ib_store_t *s, const char *name, const char *content, ib_error_t *err)
{
  cleanup_free char *p = ib_path_join (s->root, name);
  if (access (p, F_OK) == 0)
    return 0;
  if (errno != ENOENT)
    return ib_error_sys (err, errno, "access %s", p);
  return ib_write_file_atomic (p, content, strlen (content), 0644, err);
}

static int
check_layout (ib_store_t *s, ib_error_t *err)
{
  cleanup_free char *p = ib_path_join (s->root, "oci-layout");
  cleanup_free char *data = NULL;
  size_t len;
  if (ib_read_file (p, &data, &len, err) < 0)
    return -1;
  json_t *j = json_loadb (data, len, 0, NULL);
  const char *v = json_string_value (json_object_get (j, "imageLayoutVersion"));
  bool ok = v && strncmp (v, "1.", 2) == 0;
  json_decref (j);
  if (!ok)
    return ib_error_set (err, EINVAL, "%s: not an OCI image layout version 1.x", p);
  return 0;
}

/* ---------------------------------------------------------------------- */
/* The store's path (ib_store_check_path).                                 */

#define STORE_MAX_LINKS 40 /* the kernel's MAXSYMLINKS */

typedef struct path_walk
{
  uid_t uid;       /* whose components are trusted, with root's */
  uid_t overflow;  /* userns_overflow_uid () */
  size_t trusted;  /* leading components checked already (ib_store_vet) */
  bool create;     /* make what is missing (mode 0700) */
  ib_buf_t res;    /* the path resolved so far ("" for /) */
  size_t depth;    /* components in res */
  size_t existing; /* leading components of res that exist; fd is the last's */
  int fd;          /* O_PATH fd of the deepest existing directory */
  bool created;    /* the last component was made by this walk */
} path_walk_t;

/* Inside a user namespace that does not map every id (a rootless
 * container, `unshare --map-root-user`), the files of the ids it does not
 * map, root's and other users' outside, all show as the overflow id, and
 * no check can tell them apart.  That id then counts as root's for the
 * directories on the way (the container's view of the host's /tmp or
 * /home), and for a link only in a directory no one else may write.
 * (uid_t) -1 in the initial namespace (or one mapping every id as it is),
 * or where /proc does not say. */
static uid_t
userns_overflow_uid (void)
{
  cleanup_free char *map = NULL;
  if (ib_read_file_max ("/proc/self/uid_map", 65536, NULL, &map, NULL, NULL) < 0)
    return (uid_t) -1;
  unsigned long in, out, count;
  int end = 0;
  if (sscanf (map, " %lu %lu %lu %n", &in, &out, &count, &end) == 3 && in == 0 && out == 0
      && count == 4294967295UL && map[end] == '\0')
    return (uid_t) -1;
  cleanup_free char *ov = NULL;
  unsigned long o = 65534;
  if (ib_read_file_max ("/proc/sys/kernel/overflowuid", 64, NULL, &ov, NULL, NULL) == 0)
    o = strtoul (ov, NULL, 10);
  return (uid_t) o;
}

/* `owner` is this user, root, or (in a user namespace) whoever is outside
 * it (userns_overflow_uid). */
static bool
walk_owner_ok (const path_walk_t *w, uid_t owner)
{
  return owner == w->uid || owner == 0 || (w->overflow != (uid_t) -1 && owner == w->overflow);
}

static void
walk_free (path_walk_t *w)
{
  ib_buf_free (&w->res);
  if (w->fd >= 0)
    close (w->fd);
  w->fd = -1;
}

static char *
walk_comp_path (path_walk_t *w, const char *comp)
{
  return xasprintf ("%.*s/%s", (int) w->res.len, w->res.len ? w->res.data : "", comp);
}

static void
walk_append (path_walk_t *w, const char *comp)
{
  ib_buf_printf (&w->res, "/%s", comp);
  w->depth++;
}

/* "..": the parent of what is resolved (the walk holds no link in res). */
static int
walk_up (path_walk_t *w, ib_error_t *err)
{
  if (w->depth == 0)
    return 0;
  if (w->depth == w->existing)
    {
      int up = openat (w->fd, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
      if (up < 0)
        return ib_error_sys (err, errno, "%.*s/..", (int) w->res.len, w->res.data);
      close (w->fd);
      w->fd = up;
      w->existing--;
    }
  while (w->res.len > 0 && w->res.data[--w->res.len] != '/')
    ;
  w->res.data[w->res.len] = '\0';
  w->depth--;
  if (w->trusted > w->depth)
    w->trusted = w->depth; /* what comes after is another path */
  return 0;
}

/* The link `comp` (of `st`) followed: its target replaces it in *todo. */
static int
walk_link (path_walk_t *w, const char *comp, const struct stat *st, char **todo, size_t *links,
           ib_error_t *err)
{
  cleanup_free char *p = walk_comp_path (w, comp);
  if (w->depth < w->trusted)
    return ib_error_set (err, EPERM, "%s changed while the store was opened", p);
  struct stat dst;
  bool trusted = st->st_uid == w->uid || st->st_uid == 0;
  if (!trusted && walk_owner_ok (w, st->st_uid) && fstat (w->fd, &dst) == 0)
    trusted = (dst.st_mode & (S_IWGRP | S_IWOTH)) == 0; /* (no one else put it there) */
  if (!trusted)
    return ib_error_set (err, EPERM,
                         "%s is a symbolic link of uid %lu, not of this user (uid %lu) or root: "
                         "its owner could point the store anywhere; give the store's path "
                         "without it (--store DIR)",
                         p, (unsigned long) st->st_uid, (unsigned long) w->uid);
  if (++*links > STORE_MAX_LINKS)
    return ib_error_set (err, ELOOP, "%s: more than %d symbolic links", p, STORE_MAX_LINKS);
  size_t cap = st->st_size > 0 && st->st_size < PATH_MAX ? (size_t) st->st_size + 1 : PATH_MAX;
  cleanup_free char *target = xmalloc (cap + 1);
  ssize_t n = readlinkat (w->fd, comp, target, cap);
  if (n < 0)
    return ib_error_sys (err, errno, "read link %s", p);
  if ((size_t) n >= cap)
    return ib_error_set (err, ENAMETOOLONG, "read link %s: changed or too long", p);
  target[n] = '\0';
  char *next = xasprintf ("%s/%s", target, *todo);
  free (*todo);
  *todo = next;
  if (target[0] == '/')
    {
      /* from the root again */
      int root = open ("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
      if (root < 0)
        return ib_error_sys (err, errno, "open /");
      close (w->fd);
      w->fd = root;
      ib_buf_free (&w->res);
      w->depth = w->existing = w->trusted = 0;
    }
  return 0;
}

/* A directory on the way (not the last): its owner, or root, alone may
 * change what it holds, and a directory every user may write is sticky. */
static int
walk_check_dir (path_walk_t *w, const struct stat *st, ib_error_t *err)
{
  if (!walk_owner_ok (w, st->st_uid))
    return ib_error_set (err, EPERM,
                         "%s belongs to uid %lu, not to this user (uid %lu) or root: its owner "
                         "could put anything in the store's place; use a store of your own "
                         "(--store DIR)",
                         w->res.data, (unsigned long) st->st_uid, (unsigned long) w->uid);
  if ((st->st_mode & S_IWOTH) && !(st->st_mode & S_ISVTX))
    return ib_error_set (err, EPERM,
                         "%s is writable by every user (mode %04o) and not sticky: another user "
                         "could put anything in the store's place; use a store of your own "
                         "(--store DIR)",
                         w->res.data, (unsigned) (st->st_mode & 07777));
  return 0;
}

/* One component `comp` that is neither "." nor ".."; `last` when nothing
 * follows it. */
static int
walk_step (path_walk_t *w, const char *comp, bool last, char **todo, size_t *links,
           ib_error_t *err)
{
  if (w->depth > w->existing)
    {
      walk_append (w, comp); /* below a missing one: names only */
      return 0;
    }
  struct stat st;
  bool made = false;
  for (int tries = 0; fstatat (w->fd, comp, &st, AT_SYMLINK_NOFOLLOW) < 0; tries++)
    {
      cleanup_free char *p = walk_comp_path (w, comp);
      if (errno != ENOENT || tries == 3)
        return ib_error_sys (err, errno, "%s", p);
      if (!w->create)
        {
          walk_append (w, comp);
          return 0;
        }
      if (mkdirat (w->fd, comp, 0700) == 0)
        made = true;
      else if (errno != EEXIST) /* (made meanwhile by someone else: checked as found) */
        return ib_error_sys (err, errno, "create directory %s", p);
    }
  if (S_ISLNK (st.st_mode))
    return walk_link (w, comp, &st, todo, links, err);
  if (!S_ISDIR (st.st_mode))
    {
      cleanup_free char *p = walk_comp_path (w, comp);
      return ib_error_set (err, ENOTDIR, "%s is not a directory", p);
    }
  int fd = openat (w->fd, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 || fstat (fd, &st) < 0)
    {
      int e = errno;
      if (fd >= 0)
        close (fd);
      cleanup_free char *p = walk_comp_path (w, comp);
      return ib_error_sys (err, e, "%s", p);
    }
  close (w->fd);
  w->fd = fd;
  walk_append (w, comp);
  w->existing = w->depth;
  w->created = made;
  if (!last && w->depth > w->trusted)
    return walk_check_dir (w, &st, err);
  return 0;
}

/* Walk `path` (see ib_store_check_path); w->uid, trusted and create are
 * set.  On success w->res is the path, w->fd its deepest existing
 * directory's.  The caller calls walk_free. */
static int
walk_path (const char *path, path_walk_t *w, ib_error_t *err)
{
  cleanup_free char *todo = NULL;
  if (path[0] == '/')
    todo = xstrdup (path);
  else
    {
      cleanup_free char *cwd = getcwd (NULL, 0);
      if (cwd == NULL)
        return ib_error_sys (err, errno, "the working directory");
      todo = xasprintf ("%s/%s", cwd, path);
    }
  w->overflow = userns_overflow_uid ();
  w->fd = open ("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (w->fd < 0)
    return ib_error_sys (err, errno, "open /");
  ib_buf_puts (&w->res, "");
  size_t links = 0;
  for (;;)
    {
      const char *p = todo;
      while (*p == '/')
        p++;
      if (*p == '\0')
        break;
      const char *end = strchrnul (p, '/');
      cleanup_free char *comp = xstrndup (p, (size_t) (end - p));
      bool last = end[strspn (end, "/")] == '\0';
      char *rest = xstrdup (end);
      free (todo);
      todo = rest;
      int r = 0;
      if (strcmp (comp, "..") == 0)
        r = walk_up (w, err);
      else if (strcmp (comp, ".") != 0)
        r = walk_step (w, comp, last, &todo, &links, err);
      if (r < 0)
        return -1;
    }
  return 0;
}

int
ib_store_check_path (const char *path, uid_t uid, char **resolved, ib_error_t *err)
{
  path_walk_t w = { .uid = uid, .fd = -1 };
  int r = walk_path (path, &w, err);
  if (r == 0 && resolved)
    *resolved = w.res.len ? xstrdup (w.res.data) : xstrdup ("/");
  walk_free (&w);
  return r;
}

/* What ib_store_vet found, for ib_store_open inside the user namespace. */
static struct
{
  char *given, *resolved;
  size_t depth;
} vetted;

int
ib_store_vet (const char *root, ib_error_t *err)
{
  path_walk_t w = { .uid = geteuid (), .fd = -1 };
  if (walk_path (root, &w, err) < 0)
    {
      walk_free (&w);
      return ib_error_prefix (err, "open store %s", root);
    }
  free (vetted.given);
  free (vetted.resolved);
  vetted.given = xstrdup (root);
  vetted.resolved = w.res.len ? xstrdup (w.res.data) : xstrdup ("/");
  vetted.depth = w.existing;
  walk_free (&w);
  return 0;
}

/* The names a store holds at its top: the layout's, imgbuild's areas and
 * locks, and ib_write_file_atomic's temp files of the two JSON files. */
static bool
top_name_ours (const char *n)
{
  static const char *const names[] = { "oci-layout", "index.json", "blobs", "snapshots",
                                       "cache",      "tmp",        "lock",  "gc.lock" };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strcmp (n, names[i]) == 0)
      return true;
  return strncmp (n, "oci-layout.tmp-", 15) == 0 || strncmp (n, "index.json.tmp-", 15) == 0;
}

/* The directory the store is in, `fd` (O_PATH) at `abs`, made by this open
 * or not (`created`).  The store is its owner's alone (containers/storage
 * makes rootless stores 0700 too): base snapshots keep the image's 1777
 * directories (tmp, var/tmp), and another local user who could reach them
 * could put files into the owner's next build.  A store of another user is
 * refused; a directory that is no store (files, and no oci-layout) too,
 * untouched; one open to others is closed, once, with a warning. */
static int
check_store_dir (int fd, const char *abs, bool created, ib_error_t *err)
{
  struct stat st;
  if (fstat (fd, &st) < 0)
    return ib_error_sys (err, errno, "%s", abs);
  if (st.st_uid != geteuid ())
    return ib_error_set (err, EPERM,
                         "%s belongs to uid %lu, not to this user (uid %lu): another user could "
                         "change what the builds run; use a store of your own (--store DIR)",
                         abs, (unsigned long) st.st_uid, (unsigned long) geteuid ());
  cleanup_close int dfd = openat (fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0)
    return ib_error_sys (err, errno, "%s", abs);
  if (!created)
    {
      DIR *d = fdopendir (dup (dfd));
      if (d == NULL)
        return ib_error_sys (err, errno, "read %s", abs);
      bool layout = false;
      cleanup_free char *foreign = NULL;
      struct dirent *de;
      while ((de = readdir (d)) != NULL)
        if (strcmp (de->d_name, "oci-layout") == 0)
          layout = true;
        else if (foreign == NULL && strcmp (de->d_name, ".") != 0
                 && strcmp (de->d_name, "..") != 0 && !top_name_ours (de->d_name))
          foreign = xstrdup (de->d_name);
      closedir (d);
      if (!layout && foreign)
        return ib_error_set (err, ENOTEMPTY,
                             "%s is not an imgbuild store (no oci-layout, and it holds '%s'): "
                             "imgbuild would make it private (0700) and fill it; give a new or "
                             "empty directory, or an existing store (--store DIR)",
                             abs, foreign);
    }
  if ((st.st_mode & 077) == 0)
    return 0;
  if (fchmod (dfd, st.st_mode & 07700) < 0)
    return ib_error_sys (err, errno, "%s is open to other users (mode %04o): chmod 0700", abs,
                         (unsigned) (st.st_mode & 07777));
  ib_warn ("store %s was open to other users (mode %04o): made private (0700)", abs,
           (unsigned) (st.st_mode & 07777));
  return 0;
}

/* The store's directory, made when missing: its path walked and checked
 * (ib_store_check_path; from what ib_store_vet found when it checked
 * `root`), the directory checked (check_store_dir).  *abs: its path. */
static int
open_root (const char *root, char **abs, ib_error_t *err)
{
  path_walk_t w = { .uid = geteuid (), .create = true, .fd = -1 };
  const char *path = root;
  if (vetted.given && strcmp (vetted.given, root) == 0)
    {
      path = vetted.resolved;
      w.trusted = vetted.depth;
    }
  int r = walk_path (path, &w, err);
  if (r == 0 && w.depth == 0)
    r = ib_error_set (err, EPERM, "/ is no place for a store");
  if (r == 0)
    r = check_store_dir (w.fd, w.res.data, w.created, err);
  if (r == 0)
    *abs = xstrdup (w.res.data);
  walk_free (&w);
  return r;
}

int
ib_store_open (const char *root, ib_store_t **out, ib_error_t *err)
{
  *out = NULL;
  char *abs = NULL;
  if (open_root (root, &abs, err) < 0)
    return ib_error_prefix (err, "open store %s", root);
  ib_store_t *s = xmalloc (sizeof *s);
  s->root = abs;
  s->lock_fd = -1;
  s->gc_fd = -1;

  static const ib_store_area_t dirs[] = { IB_STORE_BLOBS, IB_STORE_SNAPSHOTS, IB_STORE_CACHE,
                                           IB_STORE_TMP };
  for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++)
    {
      cleanup_free char *d = ib_store_path (s, dirs[i], NULL);
      if (ib_mkdir_p (d, 0755, err) < 0)
        goto fail;
    }
  {
    cleanup_free char *lp = ib_path_join (s->root, "lock");
    s->lock_fd = open (lp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (s->lock_fd < 0)
      {
        ib_error_sys (err, errno, "open %s", lp);
        goto fail;
      }
  }
  /* Create the layout files under the lock, so that a concurrent first
   * ib_store_tag never sees its index.json replaced by an empty one. */
  if (ib_store_lock (s, true, err) < 0)
    goto fail;
  int r = write_if_missing (s, "oci-layout", OCI_LAYOUT_JSON, err);
  if (r == 0)
    r = write_if_missing (s, "index.json", EMPTY_INDEX_JSON, err);
  ib_store_unlock (s);
  if (r < 0 || check_layout (s, err) < 0)
    goto fail;
  *out = s;
  return 0;

fail:
  ib_error_prefix (err, "open store %s", root);
  ib_store_close (s);
  return -1;
}

void
ib_store_close (ib_store_t *s)
{
  if (s == NULL)
    return;
  if (s->lock_fd >= 0)
    close (s->lock_fd); /* drops any flock */
  if (s->gc_fd >= 0)
    close (s->gc_fd);
  free (s->root);
  free (s);
}

static int
do_flock (ib_store_t *s, int op, ib_error_t *err)
{
  while (flock (s->lock_fd, op) < 0)
    {
      if (errno == EINTR)
        continue;
      return ib_error_sys (err, errno, "lock store %s", s->root);
    }
  return 0;
}

int
ib_store_gc_lock (ib_store_t *s, bool exclusive, bool wait, ib_error_t *err)
{
  if (s->gc_fd < 0)
    {
      cleanup_free char *lp = ib_path_join (s->root, "gc.lock");
      s->gc_fd = open (lp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
      if (s->gc_fd < 0)
        return ib_error_sys (err, errno, "open %s", lp);
    }
  int op = (exclusive ? LOCK_EX : LOCK_SH) | (wait ? 0 : LOCK_NB);
  while (flock (s->gc_fd, op) < 0)
    {
      if (errno == EINTR)
        continue;
      if (errno == EWOULDBLOCK && !wait)
        return ib_error_set (err, EWOULDBLOCK, "store %s is in use", s->root);
      return ib_error_sys (err, errno, "lock %s/gc.lock", s->root);
    }
  return 0;
}

int
ib_store_lock (ib_store_t *s, bool exclusive, ib_error_t *err)
{
  if (s->lock_depth == 0 || (exclusive && !s->lock_exclusive))
    {
      if (do_flock (s, exclusive ? LOCK_EX : LOCK_SH, err) < 0)
        return -1;
      if (s->lock_depth == 0 || exclusive)
        s->lock_exclusive = exclusive;
    }
  s->lock_depth++;
  return 0;
}

int
ib_store_after_fork (ib_store_t *s, ib_error_t *err)
{
  cleanup_free char *lp = ib_path_join (s->root, "lock");
  int fd = open (lp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return ib_error_sys (err, errno, "open %s", lp);
  if (s->lock_fd >= 0)
    close (s->lock_fd); /* the parent's lock, if any, stays: its fd still refers to it */
  s->lock_fd = fd;
  s->lock_depth = 0;
  s->lock_exclusive = false;
  return 0;
}

void
ib_store_unlock (ib_store_t *s)
{
  if (s->lock_depth <= 0)
    return;
  if (--s->lock_depth == 0)
    {
      flock (s->lock_fd, LOCK_UN);
      s->lock_exclusive = false;
    }
}

char *
ib_store_blob_path (ib_store_t *s, const char *digest)
{
  return ib_store_path (s, IB_STORE_BLOBS, ib_digest_hex (digest));
}

bool
ib_store_has_blob (ib_store_t *s, const char *digest)
{
  if (!ib_digest_valid (digest))
    return false;
  cleanup_free char *p = ib_store_blob_path (s, digest);
  struct stat st;
  return stat (p, &st) == 0 && S_ISREG (st.st_mode);
}

char *
ib_store_path (ib_store_t *s, ib_store_area_t area, const char *name)
{
  static const char *const areas[] = {
    [IB_STORE_BLOBS] = "blobs/sha256",          [IB_STORE_SNAPSHOTS] = "snapshots",
    [IB_STORE_TMP] = "tmp",                     [IB_STORE_CACHE_STEPS] = "cache/steps",
    [IB_STORE_CACHE_MOUNTS] = "cache/mounts",   [IB_STORE_CACHE] = "cache",
  };
  if (name)
    return xasprintf ("%s/%s/%s", s->root, areas[area], name);
  return xasprintf ("%s/%s", s->root, areas[area]);
}

/* `n` hex digits (lower case, as digests are written) at `s`. */
static bool
hex_run (const char *s, size_t n)
{
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
      return false;
  return true;
}

/* The prefixes given to ib_store_tmp_file and ib_store_tmp_dir, and the
 * snapshot makers' "snap" (rootfs/prepare.c, overlay.c): every temp entry
 * of the store begins with one and '-' ("debug-" with the stage's name:
 * builder/engine/run.c).  Trees made beside one (<tree>.ovl,
 * <tree>.layerN-XXXXXX) begin so too. */
static const char *const tmp_prefixes[] = {
  "add-url", "artifact", "bind",   "blob",     "cache-import", "debug",  "docker-layer",
  "heredoc", "layer",    "load",   "lower",    "platform",     "prune",  "pull",
  "record",  "run",      "save",   "snap",     "stage",        "stdout", "tmp",
};

bool
ib_store_name_ours (ib_store_area_t area, const char *name)
{
  size_t n = strlen (name);
  switch (area)
    {
    case IB_STORE_BLOBS:
      return n == 64 && hex_run (name, 64);
    case IB_STORE_SNAPSHOTS:
      return (n == 64 || (n == 68 && strcmp (name + 64, ".ovl") == 0)) && hex_run (name, 64);
    case IB_STORE_CACHE_STEPS:
      return n == 69 && hex_run (name, 64) && strcmp (name + 64, ".json") == 0;
    case IB_STORE_CACHE_MOUNTS:
      return n >= 32 && hex_run (name, 32) && (name[32] == '\0' || name[32] == '.');
    case IB_STORE_TMP:
      if (n == 5 + 64 + 8 && strncmp (name, "blob-", 5) == 0 && hex_run (name + 5, 64)
          && strcmp (name + 69, ".partial") == 0)
        return true;
      for (size_t i = 0; i < sizeof tmp_prefixes / sizeof tmp_prefixes[0]; i++)
        {
          size_t pl = strlen (tmp_prefixes[i]);
          if (strncmp (name, tmp_prefixes[i], pl) == 0 && name[pl] == '-' && name[pl + 1])
            return true;
        }
      return false;
    case IB_STORE_CACHE:
      return strcmp (name, "steps") == 0 || strcmp (name, "mounts") == 0
             || strncmp (name, "filehash.bin", 12) == 0;
    }
  return false;
}

char *
ib_store_partial_path (ib_store_t *s, const char *digest)
{
  cleanup_free char *name = xasprintf ("blob-%s.partial", ib_digest_hex (digest));
  return ib_store_path (s, IB_STORE_TMP, name);
}

int
ib_store_tmp_file (ib_store_t *s, const char *prefix, char **path, ib_error_t *err)
{
  cleanup_free char *name = xasprintf ("%s-XXXXXX", prefix ? prefix : "tmp");
  if (!ib_store_name_ours (IB_STORE_TMP, name))
    ib_debug ("store: temp name %s has a prefix prune does not know (oci/store.c)", name);
  char *p = ib_store_path (s, IB_STORE_TMP, name);
  int fd = mkostemp (p, O_CLOEXEC);
  if (fd < 0)
    {
      int e = errno;
      free (p);
      return ib_error_sys (err, e, "create temp file in %s/tmp", s->root);
    }
  *path = p;
  return fd;
}

int
ib_store_tmp_dir (ib_store_t *s, const char *prefix, char **path, ib_error_t *err)
{
  cleanup_free char *name = xasprintf ("%s-XXXXXX", prefix ? prefix : "tmp");
  if (!ib_store_name_ours (IB_STORE_TMP, name))
    ib_debug ("store: temp name %s has a prefix prune does not know (oci/store.c)", name);
  char *p = ib_store_path (s, IB_STORE_TMP, name);
  if (mkdtemp (p) == NULL)
    {
      int e = errno;
      free (p);
      return ib_error_sys (err, e, "create temp directory in %s/tmp", s->root);
    }
  *path = p;
  return 0;
}

int
ib_store_cache_mount_dir (ib_store_t *s, const char *id, bool create, char **path,
                          bool *created, ib_error_t *err)
{
  if (id == NULL || *id == '\0')
    return ib_error_set (err, EINVAL, "cache mount: empty id");
  char digest[IB_DIGEST_LEN];
  ib_digest_buf (id, strlen (id), digest);
  cleanup_free char *base = ib_store_path (s, IB_STORE_CACHE_MOUNTS, NULL);
  char *p = xasprintf ("%s/%.32s", base, digest + 7);
  if (created)
    *created = false;
  if (create)
    {
      if (ib_mkdir_p (base, 0700, err) < 0)
        {
          free (p);
          return -1;
        }
      if (mkdir (p, 0755) == 0)
        {
          if (created)
            *created = true;
          /* what the directory is for, for `imgbuild prune` and people */
          cleanup_free char *idf = xasprintf ("%s.id", p);
          ib_write_file_atomic (idf, id, strlen (id), 0644, NULL);
        }
      else if (errno != EEXIST)
        {
          int e = errno;
          free (p);
          return ib_error_sys (err, e, "cache mount %s: create its directory", id);
        }
    }
  *path = p;
  return 0;
}

int
ib_store_cache_mount_lock (ib_store_t *s, const char *id, bool wait, ib_error_t *err)
{
  cleanup_free char *dir = NULL;
  if (ib_store_cache_mount_dir (s, id, false, &dir, NULL, err) < 0)
    return -1;
  cleanup_free char *lp = xasprintf ("%s.lock", dir);
  int fd = open (lp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return ib_error_sys (err, errno, "cache mount %s: lock %s", id, lp);
  while (flock (fd, LOCK_EX | (wait ? 0 : LOCK_NB)) < 0)
    {
      int e = errno;
      if (e == EINTR)
        continue;
      close (fd);
      if (e == EWOULDBLOCK && !wait)
        return ib_error_set (err, e, "cache mount %s is in use", id);
      return ib_error_sys (err, e, "cache mount %s: lock %s", id, lp);
    }
  return fd;
}

int
ib_store_commit_blob_hashed (ib_store_t *s, const char *tmp_path, const char *digest,
                             ib_error_t *err)
{
  if (!ib_digest_valid (digest))
    return ib_error_set (err, EINVAL, "store blob: bad digest \"%s\"", digest);
  {
    cleanup_close int fd = open (tmp_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      return ib_error_sys (err, errno, "open %s", tmp_path);
    if (fchmod (fd, 0644) < 0 || fsync (fd) < 0)
      return ib_error_sys (err, errno, "fsync %s", tmp_path);
  }
  cleanup_free char *dst = ib_store_blob_path (s, digest);
  if (rename (tmp_path, dst) < 0)
    return ib_error_sys (err, errno, "store blob %s: rename %s", digest, tmp_path);
  cleanup_free char *dir = ib_path_join (s->root, "blobs/sha256");
  return ib_fsync_dir (dir, err);
}

int
ib_store_commit_blob (ib_store_t *s, const char *tmp_path, const char *expected,
                      char out_digest[IB_DIGEST_LEN], uint64_t *out_size, ib_error_t *err)
{
  char got[IB_DIGEST_LEN];
  uint64_t size = 0;
  if (ib_digest_file (tmp_path, got, &size, err) < 0)
    return -1;
  if (expected && strcmp (expected, got) != 0)
    {
      unlink (tmp_path);
      return ib_error_set (err, EINVAL, "blob %s: digest mismatch (the bytes hash to %s)", expected,
                           got);
    }
  if (ib_store_commit_blob_hashed (s, tmp_path, got, err) < 0)
    return -1;
  if (out_digest)
    memcpy (out_digest, got, IB_DIGEST_LEN);
  if (out_size)
    *out_size = size;
  return 0;
}

int
ib_store_export_blob (ib_store_t *s, const char *digest, const char *blobs_dir, ib_error_t *err)
{
  cleanup_free char *src = ib_store_blob_path (s, digest);
  cleanup_free char *dst = ib_path_join (blobs_dir, ib_digest_hex (digest));
  if (access (dst, F_OK) == 0)
    return 0;
  if (link (src, dst) == 0)
    return 0;
  if (errno != EXDEV && errno != EPERM && errno != EMLINK && errno != EACCES && errno != ENOTSUP
      && errno != EOPNOTSUPP)
    return ib_error_sys (err, errno, "link %s to %s", src, dst);
  cleanup_close int in = open (src, O_RDONLY | O_CLOEXEC);
  if (in < 0)
    return ib_error_sys (err, errno, "open %s", src);
  cleanup_close int out = open (dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (out < 0)
    return ib_error_sys (err, errno, "create %s", dst);
  if (ib_copy_fd_data (in, out, src, err) < 0)
    return -1;
  if (fsync (out) < 0)
    return ib_error_sys (err, errno, "fsync %s", dst);
  return 0;
}

int
ib_store_put_blob (ib_store_t *s, const void *data, size_t len, char out_digest[IB_DIGEST_LEN],
                   ib_error_t *err)
{
  char d[IB_DIGEST_LEN];
  ib_digest_buf (data, len, d);
  if (out_digest)
    memcpy (out_digest, d, IB_DIGEST_LEN);
  if (ib_store_has_blob (s, d))
    return 0;
  cleanup_free char *tmp = NULL;
  cleanup_close int fd = ib_store_tmp_file (s, "blob", &tmp, err);
  if (fd < 0)
    return -1;
  if (ib_write_all (fd, data, len, tmp, err) < 0)
    {
      unlink (tmp);
      return -1;
    }
  if (ib_store_commit_blob_hashed (s, tmp, d, err) < 0)
    {
      unlink (tmp);
      return -1;
    }
  return 0;
}

int
ib_store_read_blob (ib_store_t *s, const char *digest, char **data, size_t *len, ib_error_t *err)
{
  *data = NULL;
  if (!ib_digest_valid (digest))
    return ib_error_set (err, EINVAL, "blob \"%s\": not a sha256 digest", digest);
  cleanup_free char *p = ib_store_blob_path (s, digest);
  cleanup_free char *buf = NULL;
  size_t n = 0;
  if (access (p, F_OK) < 0 && errno == ENOENT)
    return ib_error_set (err, ENOENT, "blob %s not found in store %s", digest, s->root);
  if (ib_read_file (p, &buf, &n, err) < 0)
    return -1;
  char got[IB_DIGEST_LEN];
  ib_digest_buf (buf, n, got);
  if (strcmp (got, digest) != 0)
    return ib_error_set (err, EIO, "blob %s in store %s is corrupt (its bytes hash to %s)", digest,
                         s->root, got);
  *data = steal_pointer (&buf);
  if (len)
    *len = n;
  return 0;
}

/* index.json, parsed; always an object with a "manifests" array. */
static json_t *
load_index (ib_store_t *s, ib_error_t *err)
{
  cleanup_free char *p = ib_path_join (s->root, "index.json");
  json_error_t je;
  json_t *j = json_load_file (p, 0, &je);
  if (j == NULL)
    {
      ib_error_set (err, EINVAL, "%s: %s (line %d)", p, je.text, je.line);
      return NULL;
    }
  if (!json_is_object (j) || !json_is_array (json_object_get (j, "manifests")))
    {
      json_decref (j);
      ib_error_set (err, EINVAL, "%s: not an image index (no manifests array)", p);
      return NULL;
    }
  return j;
}

static int
save_index (ib_store_t *s, json_t *index, ib_error_t *err)
{
  cleanup_free char *p = ib_path_join (s->root, "index.json");
  cleanup_free char *data = json_dumps (index, JSON_INDENT (2) | JSON_PRESERVE_ORDER);
  if (data == NULL)
    abort ();
  return ib_write_file_atomic (p, data, strlen (data), 0644, err);
}

static const char *
entry_name (json_t *e)
{
  return json_string_value (json_object_get (json_object_get (e, "annotations"), REF_NAME_ANNOTATION));
}

int
ib_store_tag (ib_store_t *s, const char *name, const char *media_type, const char *digest,
              int64_t size, ib_error_t *err)
{
  return ib_store_tag_source (s, name, media_type, digest, size, NULL, err);
}

int
ib_store_tag_source (ib_store_t *s, const char *name, const char *media_type, const char *digest,
                     int64_t size, const char *source, ib_error_t *err)
{
  ib_tag_meta_t meta = { .source = source };
  return ib_store_tag_meta (s, name, media_type, digest, size, &meta, err);
}

static void
annotate (json_t *d, const char *key, const char *value)
{
  if (value && *value)
    json_object_set_new (json_object_get (d, "annotations"), key, json_string (value));
}

int
ib_store_tag_meta (ib_store_t *s, const char *name, const char *media_type, const char *digest,
                   int64_t size, const ib_tag_meta_t *meta, ib_error_t *err)
{
  if (!ib_digest_valid (digest))
    return ib_error_set (err, EINVAL, "tag %s: bad digest \"%s\"", name, digest);
  if (name == NULL || *name == '\0')
    return ib_error_set (err, EINVAL, "tag: empty name");
  ib_tag_meta_t none = { 0 };
  if (meta == NULL)
    meta = &none;
  json_t *d = json_pack ("{s:s, s:s, s:I, s:{s:s}}", "mediaType",
                         media_type ? media_type : IB_MT_OCI_MANIFEST, "digest", digest, "size",
                         (json_int_t) size, "annotations", REF_NAME_ANNOTATION, name);
  annotate (d, IB_SOURCE_ANNOTATION, meta->source);
  if (meta->served_digest && strcmp (meta->served_digest, digest) != 0)
    {
      annotate (d, IB_REGISTRY_DIGEST_ANNOTATION, meta->served_digest);
      annotate (d, IB_REGISTRY_MEDIA_TYPE_ANNOTATION, meta->served_media_type);
    }
  annotate (d, IB_REGISTRY_INDEX_ANNOTATION, meta->index_digest);
  if (ib_store_lock (s, true, err) < 0)
    {
      json_decref (d);
      return -1;
    }
  int ret = -1;
  json_t *index = load_index (s, err);
  if (index)
    {
      json_t *ms = json_object_get (index, "manifests");
      bool same = false;
      for (size_t i = json_array_size (ms); i-- > 0;)
        {
          json_t *e = json_array_get (ms, i);
          const char *n = entry_name (e);
          if (n && strcmp (n, name) == 0)
            {
              /* already so (a rebuild from the cache): leave index.json be */
              if (json_equal (e, d) && !same)
                same = true;
              else
                json_array_remove (ms, i);
            }
        }
      if (same)
        ret = 0;
      else
        {
          json_array_append (ms, d);
          ret = save_index (s, index, err);
        }
      json_decref (index);
    }
  json_decref (d);
  ib_store_unlock (s);
  if (ret < 0)
    ib_error_prefix (err, "tag %s in store %s", name, s->root);
  return ret;
}

int
ib_store_untag (ib_store_t *s, const char *name, char **removed, ib_error_t *err)
{
  if (removed)
    *removed = NULL;
  cleanup_free char *full = NULL;
  ib_ref_t ref;
  if (ib_ref_parse (name, &ref, NULL) == 0)
    {
      full = ib_ref_string (&ref);
      ib_ref_free (&ref);
    }
  if (ib_store_lock (s, true, err) < 0)
    return -1;
  int ret = -1;
  json_t *index = load_index (s, err);
  if (index)
    {
      /* the exact name first (names other tools wrote), else the normalized one */
      json_t *ms = json_object_get (index, "manifests");
      const char *want[2] = { name, full };
      for (int k = 0; k < 2 && ret < 0; k++)
        for (size_t i = json_array_size (ms); want[k] && i-- > 0;)
          {
            const char *n = entry_name (json_array_get (ms, i));
            if (n && strcmp (n, want[k]) == 0)
              {
                if (removed && *removed == NULL)
                  *removed = xstrdup (n);
                json_array_remove (ms, i);
                ret = 0;
              }
          }
      if (ret < 0)
        ib_error_set (err, ENOENT, "image %s not found in store %s", name, s->root);
      else if ((ret = save_index (s, index, err)) < 0)
        ib_error_prefix (err, "untag %s in store %s", name, s->root);
      json_decref (index);
    }
  ib_store_unlock (s);
  if (ret < 0 && removed)
    {
      free (*removed);
      *removed = NULL;
    }
  return ret;
}

int
ib_store_list (ib_store_t *s, json_t **manifests, ib_error_t *err)
{
  *manifests = NULL;
  cleanup_json json_t *index = load_index (s, err);
  if (index == NULL)
    return -1;
  *manifests = json_incref (json_object_get (index, "manifests"));
  return 0;
}

int
ib_store_blob_sources (ib_store_t *s, const char *digest, char ***sources, ib_error_t *err)
{
  *sources = NULL;
  cleanup_json json_t *index = load_index (s, err);
  if (index == NULL)
    return -1;
  size_t i;
  json_t *e;
  json_array_foreach (json_object_get (index, "manifests"), i, e)
  {
    const char *src
        = json_string_value (json_object_get (json_object_get (e, "annotations"), IB_SOURCE_ANNOTATION));
    const char *md = json_string_value (json_object_get (e, "digest"));
    if (src == NULL || md == NULL || !ib_digest_valid (md) || !ib_store_has_blob (s, md))
      continue;
    bool dup = false;
    for (char **p = *sources; p && *p && !dup; p++)
      dup = strcmp (*p, src) == 0;
    if (dup)
      continue;
    cleanup_free char *data = NULL;
    size_t len = 0;
    ib_manifest_t *m = NULL;
    ib_error_t e2 = NULL;
    if (ib_store_read_blob (s, md, &data, &len, &e2) < 0 || ib_manifest_parse (data, len, &m, &e2) < 0)
      {
        ib_debug ("mount sources: %s skipped: %s", md, e2->msg); /* an index, or damaged */
        ib_error_free (&e2);
        continue;
      }
    bool has = strcmp (m->config.digest, digest) == 0;
    for (size_t k = 0; k < m->n_layers && !has; k++)
      has = strcmp (m->layers[k].digest, digest) == 0;
    ib_manifest_free (m);
    if (has)
      ib_strv_push (sources, src);
  }
  return 0;
}

static int
fill_descriptor (json_t *e, ib_descriptor_t *out)
{
  memset (out, 0, sizeof *out);
  const char *mt = json_string_value (json_object_get (e, "mediaType"));
  const char *dg = json_string_value (json_object_get (e, "digest"));
  if (dg == NULL || !ib_digest_valid (dg))
    return -1;
  out->media_type = xstrdup (mt ? mt : IB_MT_OCI_MANIFEST);
  snprintf (out->digest, sizeof out->digest, "%s", dg);
  out->size = (int64_t) json_integer_value (json_object_get (e, "size"));
  return 0;
}

static const char *
entry_annotation (json_t *e, const char *key)
{
  return json_string_value (json_object_get (json_object_get (e, "annotations"), key));
}

/* Does tag entry `e` stand for manifest or index `digest`: the one it
 * points at, or one its IB_REGISTRY_* annotations record? */
static bool
entry_has_digest (json_t *e, const char *digest)
{
  const char *dg = json_string_value (json_object_get (e, "digest"));
  const char *served = entry_annotation (e, IB_REGISTRY_DIGEST_ANNOTATION);
  const char *idx = entry_annotation (e, IB_REGISTRY_INDEX_ANNOTATION);
  return (dg && strcmp (dg, digest) == 0) || (served && strcmp (served, digest) == 0)
         || (idx && strcmp (idx, digest) == 0);
}

/* Is tag entry `e` named in repository registry/repository? */
static bool
entry_in_repository (json_t *e, const char *registry, const char *repository)
{
  const char *n = entry_name (e);
  ib_ref_t r;
  if (n == NULL || ib_ref_parse (n, &r, NULL) < 0)
    return false;
  bool same = strcmp (r.registry, registry) == 0 && strcmp (r.repository, repository) == 0;
  ib_ref_free (&r);
  return same;
}

/* The index.json entry `name` finds (borrowed from `index`), or NULL when
 * none does; then *blob_only is set when `name` is a digest of a manifest
 * or index in blobs/ that no tag names, *out filled for it. */
static json_t *
resolve_entry (ib_store_t *s, json_t *index, const char *name, ib_descriptor_t *out,
               bool *blob_only)
{
  *blob_only = false;
  json_t *ms = json_object_get (index, "manifests");
  size_t i;
  json_t *e;

  if (ib_digest_valid (name))
    {
      json_array_foreach (ms, i, e)
      {
        const char *dg = json_string_value (json_object_get (e, "digest"));
        if (dg && strcmp (dg, name) == 0 && fill_descriptor (e, out) == 0)
          return e;
      }
      /* the digest a pulled manifest or its index was served under */
      json_array_foreach (ms, i, e)
      if (entry_has_digest (e, name) && fill_descriptor (e, out) == 0)
        return e;
      /* An untagged manifest that is in blobs/ all the same. */
      cleanup_free char *data = NULL;
      size_t len;
      if (ib_store_has_blob (s, name) && ib_store_read_blob (s, name, &data, &len, NULL) == 0)
        {
          json_t *j = json_loadb (data, len, 0, NULL);
          const char *mt = json_string_value (json_object_get (j, "mediaType"));
          bool idx = json_is_array (json_object_get (j, "manifests"));
          bool man = json_is_array (json_object_get (j, "layers"));
          if (idx || man)
            {
              out->media_type = xstrdup (mt ? mt : idx ? IB_MT_OCI_INDEX : IB_MT_OCI_MANIFEST);
              snprintf (out->digest, sizeof out->digest, "%s", name);
              out->size = (int64_t) len;
              *blob_only = true;
            }
          json_decref (j);
        }
      if (*blob_only)
        return NULL;
      /* an image ID (docker build -q, --iidfile): a stored image's config digest */
      json_array_foreach (ms, i, e)
      {
        const char *dg = json_string_value (json_object_get (e, "digest"));
        cleanup_free char *md = NULL;
        size_t ml = 0;
        ib_manifest_t *m = NULL;
        bool hit = dg && ib_digest_valid (dg) && ib_store_read_blob (s, dg, &md, &ml, NULL) == 0
                   && ib_manifest_parse (md, ml, &m, NULL) == 0
                   && strcmp (m->config.digest, name) == 0;
        ib_manifest_free (m);
        if (hit && fill_descriptor (e, out) == 0)
          return e;
      }
      return NULL;
    }

  /* exact name first (also names that other tools wrote, such as "t") */
  json_array_foreach (ms, i, e)
  {
    const char *n = entry_name (e);
    if (n && strcmp (n, name) == 0 && fill_descriptor (e, out) == 0)
      return e;
  }
  ib_ref_t ref;
  if (ib_ref_parse (name, &ref, NULL) < 0)
    return NULL;
  cleanup_free char *full = ib_ref_string (&ref);
  json_t *found = NULL;
  json_array_foreach (ms, i, e)
  {
    const char *n = entry_name (e);
    if (n && strcmp (n, full) == 0 && fill_descriptor (e, out) == 0)
      {
        found = e;
        break;
      }
  }
  /* NAME@DIGEST: any tag of NAME's repository that stands for DIGEST
   * (docker's RepoDigests), so a pinned FROM needs no request */
  if (found == NULL && ref.digest)
    json_array_foreach (ms, i, e)
    {
      if (entry_has_digest (e, ref.digest)
          && entry_in_repository (e, ref.registry, ref.repository)
          && fill_descriptor (e, out) == 0)
        {
          found = e;
          break;
        }
    }
  ib_ref_free (&ref);
  return found;
}

int
ib_store_resolve (ib_store_t *s, const char *name, ib_descriptor_t *out, ib_error_t *err)
{
  memset (out, 0, sizeof *out);
  cleanup_json json_t *index = load_index (s, err);
  if (index == NULL)
    return -1;
  bool blob_only;
  if (resolve_entry (s, index, name, out, &blob_only) || blob_only)
    return 0;
  return ib_error_set (err, ENOENT, "image %s not found in store %s", name, s->root);
}

int
ib_store_resolve_served (ib_store_t *s, const char *name, ib_descriptor_t *out,
                         ib_descriptor_t *stored, char index_digest[IB_DIGEST_LEN],
                         ib_error_t *err)
{
  memset (out, 0, sizeof *out);
  if (stored)
    memset (stored, 0, sizeof *stored);
  if (index_digest)
    index_digest[0] = '\0';
  cleanup_json json_t *index = load_index (s, err);
  if (index == NULL)
    return -1;
  ib_descriptor_t d = { 0 };
  bool blob_only;
  json_t *e = resolve_entry (s, index, name, &d, &blob_only);
  if (e == NULL && !blob_only)
    return ib_error_set (err, ENOENT, "image %s not found in store %s", name, s->root);
  const char *served = e ? entry_annotation (e, IB_REGISTRY_DIGEST_ANNOTATION) : NULL;
  const char *smt = e ? entry_annotation (e, IB_REGISTRY_MEDIA_TYPE_ANNOTATION) : NULL;
  const char *idx = e ? entry_annotation (e, IB_REGISTRY_INDEX_ANNOTATION) : NULL;
  struct stat st;
  cleanup_free char *p = served && ib_digest_valid (served) ? ib_store_blob_path (s, served) : NULL;
  if (p && stat (p, &st) == 0)
    {
      out->media_type = xstrdup (smt ? smt : IB_MT_DOCKER_MANIFEST);
      snprintf (out->digest, sizeof out->digest, "%s", served);
      out->size = (int64_t) st.st_size;
    }
  else
    {
      out->media_type = xstrdup (d.media_type);
      memcpy (out->digest, d.digest, IB_DIGEST_LEN);
      out->size = d.size;
    }
  if (index_digest && idx && ib_digest_valid (idx))
    snprintf (index_digest, IB_DIGEST_LEN, "%s", idx);
  if (stored)
    *stored = d;
  else
    ib_descriptor_clear (&d);
  return 0;
}

int
ib_store_load_image (ib_store_t *s, const char *name, ib_descriptor_t *desc,
                     ib_manifest_t **manifest, json_t **config, ib_error_t *err)
{
  if (manifest)
    *manifest = NULL;
  if (config)
    *config = NULL;
  ib_descriptor_t d;
  if (ib_store_resolve (s, name, &d, err) < 0)
    return -1;
  cleanup_free char *data = NULL;
  size_t len = 0;
  ib_manifest_t *m = NULL;
  json_t *cfg = NULL;
  ib_doc_kind_t kind;
  if (ib_store_read_blob (s, d.digest, &data, &len, err) < 0
      || ib_doc_kind (data, len, d.media_type, &kind, err) < 0)
    goto fail;
  if (kind == IB_DOC_INDEX)
    {
      /* a multi-platform image that another tool stored: take the host's */
      const char *os, *arch, *variant;
      ib_host_platform (&os, &arch, &variant);
      ib_descriptor_t sel;
      if (ib_index_select (data, len, os, arch, variant, 0, &sel, NULL, err) < 0)
        goto fail;
      ib_descriptor_clear (&d);
      d = sel;
      free (data);
      data = NULL;
      if (ib_store_read_blob (s, d.digest, &data, &len, err) < 0)
        goto fail;
    }
  if (ib_manifest_parse (data, len, &m, err) < 0)
    goto fail;
  if (config)
    {
      cleanup_free char *cdata = NULL;
      size_t clen = 0;
      if (ib_store_read_blob (s, m->config.digest, &cdata, &clen, err) < 0
          || ib_config_parse (cdata, clen, &cfg, err) < 0)
        goto fail;
    }
  if (desc)
    *desc = d;
  else
    ib_descriptor_clear (&d);
  if (manifest)
    *manifest = m;
  else
    ib_manifest_free (m);
  if (config)
    *config = cfg;
  return 0;

fail:
  ib_descriptor_clear (&d);
  ib_manifest_free (m);
  if (cfg)
    json_decref (cfg);
  return ib_error_prefix (err, "load image %s", name);
}
