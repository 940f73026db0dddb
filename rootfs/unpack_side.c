/* rootfs/unpack_side.c — layers unpacked at once (unpack.h): a layer on
 * the side, in an empty directory of its own, and its merge onto the
 * layers below it.
 *
 * Reading order: ib_unpack_layer_side (unpack.c in side mode: hard links
 * out of the layer and paths through its own symlinks stop it; whiteouts
 * are recorded, struct side_whiteout); then ib_unpack_side_merge:
 * wh_check() and check() walk the side tree beside the target without
 * changing anything and find what would make the result depend on the
 * lower layers; wh_apply() removes what the whiteouts remove (wh_gone()
 * tells check() what will be gone); merge() then renames each side entry
 * into the target (a directory both have is merged, anything else in the
 * target replaced); last, the directories' metadata: the layer's own
 * directory entries (moved to the target's inode where the target had
 * that directory) and the mtimes and modes of the target's directories the
 * merge changed, all put back as unpack.c does at the end of a layer
 * (unp_apply_dirmeta).
 *
 * Safety: the target is walked with O_NOFOLLOW at every step from its root
 * (a symlink there is replaced or makes the layer dependent, never
 * followed), and entries move by renameat between directory fds.
 */
#include "common/util.h"
#include "rootfs/rootfs_int.h"
#include "rootfs/unpack.h"
#include "rootfs/unpack_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

struct ib_unpack_side
{
  struct unpack u;       /* the side unpack's state: its directory records */
  char *dir;
};

int
ib_unpack_layer_side (const char *name, ib_layer_read_fn read_fn, void *ud, const char *side_dir,
                      char diff_id[IB_DIGEST_LEN], ib_unpack_stats_t *stats,
                      ib_unpack_side_t **out, ib_error_t *err)
{
  ib_unpack_side_t *side = xmalloc (sizeof *side);
  memset (side, 0, sizeof *side);
  ib_error_t e = NULL;
  int r = unp_side_run (&side->u, name, read_fn, ud, side_dir, diff_id, stats, &e);
  if (r < 0 && side->u.dependent)
    {
      ib_debug ("unpack layer %s on the side: it depends on the layers below (%s)", name,
                side->u.dependent);
      ib_error_free (&e);
      ib_unpack_side_free (side);
      return 1;
    }
  if (r < 0)
    {
      *err = e;
      ib_unpack_side_free (side);
      return -1;
    }
  side->dir = xstrdup (side_dir);
  *out = side;
  return 0;
}

void
ib_unpack_side_free (ib_unpack_side_t *side)
{
  if (side == NULL)
    return;
  unp_free (&side->u);
  free (side->dir);
  free (side);
}

/* The side's record of directory sst when the layer has an entry for it
 * (explicit: it sets the owner), else NULL (made as a parent). */
static struct dirmeta *
explicit_dir (struct unpack *s, const struct stat *sst)
{
  cleanup_free char *k = rfs_ino_key (sst);
  hslot_t *slot = rfs_hmap_find (&s->dir_idx, k);
  if (slot == NULL || slot->val == NULL)
    return NULL;
  struct dirmeta *d = &s->dirs[(uintptr_t) slot->val - 1];
  return d->set_owner && !d->dead ? d : NULL;
}

static char *
join_rel (const char *rel, const char *name)
{
  return *rel ? xasprintf ("%s/%s", rel, name) : xstrdup (name);
}

static char **
names_of (int dfd)
{
  int fd = openat (dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return NULL;
  DIR *d = rfs_fdopendir (fd);
  if (d == NULL)
    return NULL;
  errno = 0;
  char **names = rfs_dir_names (d);
  int e = errno;
  closedir (d);
  if (names == NULL && e == 0)
    {
      names = xmalloc (sizeof *names); /* empty */
      names[0] = NULL;
    }
  return names;
}

/* Whether side entry `name` in sfd (stat sst), or a directory below it, is
 * a directory the layer made as a parent.  Moved into a setgid directory
 * it would differ from the in-order tree: there every directory made
 * below inherits the setgid bit and the group as it is made, and one made
 * as a parent keeps them. */
static bool
made_as_parent_below (struct unpack *s, int sfd, const char *name, const struct stat *sst)
{
  if (!S_ISDIR (sst->st_mode))
    return false;
  if (!explicit_dir (s, sst))
    return true;
  cleanup_close int sub = openat (sfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  cleanup_strv char **names = sub >= 0 ? names_of (sub) : NULL;
  if (names == NULL)
    return true; /* unknown: in order */
  for (size_t i = 0; names[i]; i++)
    {
      struct stat cst;
      if (fstatat (sub, names[i], &cst, AT_SYMLINK_NOFOLLOW) < 0
          || made_as_parent_below (s, sub, names[i], &cst))
        return true;
    }
  return false;
}

/* Whether whiteout w removes the target's entry at `rel`: rel is w's path
 * or beneath it (opaque: strictly beneath), and on the way down from there
 * a path the layer had not made when the whiteout came is met before one
 * it had made as a non-directory. */
static bool
wh_removes (const struct side_whiteout *w, const char *rel)
{
  size_t plen = strlen (w->path);
  if (plen > 0 && (strncmp (rel, w->path, plen) != 0 || (rel[plen] != '\0' && rel[plen] != '/')))
    return false;
  const char *end = rel + plen; /* the end of the path looked at */
  if (w->opaque)
    {
      if (*end == '\0')
        return false; /* the directory itself stays */
      end += plen > 0; /* past the '/' */
      while (*end && *end != '/')
        end++;
    }
  for (;;)
    {
      cleanup_free char *prefix = xstrndup (rel, (size_t) (end - rel));
      hslot_t *slot = rfs_hmap_find (&w->spared, prefix);
      if (slot == NULL)
        return true;
      if ((uintptr_t) slot->val == WH_NONDIR || *end == '\0')
        return false;
      end++;
      while (*end && *end != '/')
        end++;
    }
}

/* Whether some whiteout of the side layer removes the target's entry at
 * `rel` before the merge. */
static bool
wh_gone (const struct unpack *s, const char *rel)
{
  if (s->n_whs == 0)
    return false;
  for (const char *c = rel + strlen (rel);; c--)
    {
      if (*c == '/' || *c == '\0')
        {
          cleanup_free char *prefix = xstrndup (rel, (size_t) (c - rel));
          hslot_t *slot = rfs_hmap_find (&s->wh_idx, prefix);
          for (size_t i = slot ? (size_t) (uintptr_t) slot->val : 0; i; i = s->whs[i - 1].next)
            if (wh_removes (&s->whs[i - 1], rel))
              return true;
        }
      if (c == rel)
        break;
    }
  hslot_t *top = rfs_hmap_find (&s->wh_idx, ""); /* an opaque "./" */
  for (size_t i = top ? (size_t) (uintptr_t) top->val : 0; i; i = s->whs[i - 1].next)
    if (*rel && wh_removes (&s->whs[i - 1], rel))
      return true;
  return false;
}

/* The target's directory `dir` (an O_PATH fd into *out), walked from its
 * root without following a symlink, for a whiteout there.  1: found; 0:
 * missing or under a non-directory (a plain whiteout has nothing to
 * remove, as in order); -1: the layer depends on the layers below (*why):
 * in order the whiteout would follow a symlink of theirs, or an opaque
 * whiteout make its directory where they have a non-directory. */
static int
wh_open_dir (int rootfd, const char *dir, bool opaque, int *out, const char **why)
{
  int cur = openat (rootfd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (cur < 0)
    {
      *why = "the target could not be opened";
      return -1;
    }
  cleanup_free char *copy = xstrdup (dir);
  char *save = NULL;
  for (char *comp = strtok_r (copy, "/", &save); comp; comp = strtok_r (NULL, "/", &save))
    {
      struct stat st;
      int r = 1;
      if (fstatat (cur, comp, &st, AT_SYMLINK_NOFOLLOW) < 0)
        {
          r = errno == ENOENT ? 0 : -1;
          *why = "a directory of the target could not be read";
        }
      else if (S_ISLNK (st.st_mode))
        {
          r = -1;
          *why = "a whiteout beneath a symlink of the lower layers";
        }
      else if (!S_ISDIR (st.st_mode))
        {
          r = opaque ? -1 : 0;
          *why = "an opaque whiteout beneath a non-directory of the lower layers";
        }
      int next = r > 0 ? openat (cur, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
      close (cur);
      if (r > 0 && next < 0)
        {
          *why = "a directory of the target could not be opened";
          r = -1;
        }
      if (r <= 0)
        return r;
      cur = next;
    }
  *out = cur;
  return 1;
}

/* The parent directory of whiteout w's path (allocated) and its last name. */
static char *
wh_dir (const struct side_whiteout *w, const char **victim)
{
  const char *slash = strrchr (w->path, '/');
  *victim = w->opaque ? NULL : slash ? slash + 1 : w->path;
  if (w->opaque)
    return xstrdup (w->path);
  return slash ? xstrndup (w->path, (size_t) (slash - w->path)) : xstrdup ("");
}

/* Whether every whiteout of the side layer can be applied to the target
 * as in order (see wh_open_dir); changes nothing. */
static bool
wh_check (const struct unpack *s, int rootfd, const char **why)
{
  for (size_t i = 0; i < s->n_whs; i++)
    {
      const char *victim;
      cleanup_free char *dir = wh_dir (&s->whs[i], &victim);
      int fd = -1;
      int r = wh_open_dir (rootfd, dir, s->whs[i].opaque, &fd, why);
      if (fd >= 0)
        close (fd);
      if (r < 0)
        return false;
    }
  return true;
}

/* Remove what the lower layers have at dfd/name (dfd: the target's
 * directory dpath, stat dst), beneath paths whiteout w spares. */
static int
wh_remove (const struct side_whiteout *w, struct unpack *t, int dfd, const struct stat *dst,
           const char *dpath, const char *name, ib_error_t *err)
{
  cleanup_free char *shown = join_rel (dpath, name);
  struct stat st;
  if (fstatat (dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
    return errno == ENOENT ? 0 : ib_error_sys (err, errno, "whiteout /%s", shown);
  hslot_t *slot = rfs_hmap_find (&w->spared, shown);
  if (slot == NULL)
    {
      unp_keep_times (t, dpath, dst);
      if (unp_make_writable (t, dpath, dfd, dst, err) < 0)
        return -1;
      return unp_remove_at (dfd, name, shown, err);
    }
  if ((uintptr_t) slot->val == WH_NONDIR || !S_ISDIR (st.st_mode))
    return 0; /* the merge replaces it */
  cleanup_close int sub = openat (dfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (sub < 0)
    return ib_error_sys (err, errno, "whiteout /%s", shown);
  if (faccessat (sub, ".", R_OK, AT_EACCESS) < 0
      && unp_make_writable (t, shown, sub, &st, err) < 0)
    return -1;
  cleanup_strv char **names = names_of (sub);
  if (names == NULL)
    return ib_error_sys (err, errno, "whiteout /%s", shown);
  for (size_t i = 0; names[i]; i++)
    if (wh_remove (w, t, sub, &st, shown, names[i], err) < 0)
      return -1;
  return 0;
}

/* The side layer's whiteouts applied to the target, in the layer's order. */
static int
wh_apply (const struct unpack *s, struct unpack *t, ib_error_t *err)
{
  for (size_t i = 0; i < s->n_whs; i++)
    {
      const struct side_whiteout *w = &s->whs[i];
      const char *victim, *why;
      cleanup_free char *dir = wh_dir (w, &victim);
      cleanup_close int dfd = -1;
      int r = wh_open_dir (t->rootfd, dir, w->opaque, &dfd, &why);
      if (r < 0)
        return ib_error_set (err, EIO, "whiteout /%s: %s", w->path, why);
      if (r == 0)
        continue;
      struct stat dst;
      if (fstat (dfd, &dst) < 0)
        return ib_error_sys (err, errno, "whiteout /%s", w->path);
      if (victim)
        {
          if (wh_remove (w, t, dfd, &dst, dir, victim, err) < 0)
            return -1;
          continue;
        }
      if (faccessat (dfd, ".", R_OK, AT_EACCESS) < 0
          && unp_make_writable (t, dir, dfd, &dst, err) < 0)
        return -1;
      cleanup_strv char **names = names_of (dfd);
      if (names == NULL)
        return ib_error_sys (err, errno, "whiteout /%s", w->path);
      for (size_t j = 0; names[j]; j++)
        if (wh_remove (w, t, dfd, &dst, dir, names[j], err) < 0)
          return -1;
    }
  return 0;
}

/* Whether merging side directory sfd onto target directory tfd (stat tst)
 * gives what applying the layer in order gives; `why` says what stands in
 * the way.  Changes nothing. */
static bool
check (struct unpack *s, int sfd, int tfd, const struct stat *tst, const char *rel,
       const char **why)
{
  cleanup_strv char **names = names_of (sfd);
  if (names == NULL)
    {
      *why = "a side directory could not be read";
      return false;
    }
  for (size_t i = 0; names[i]; i++)
    {
      struct stat sst, cst;
      if (fstatat (sfd, names[i], &sst, AT_SYMLINK_NOFOLLOW) < 0)
        {
          *why = "a side entry could not be read";
          return false;
        }
      cleanup_free char *sub_rel = join_rel (rel, names[i]);
      /* (an entry a whiteout removes is not there for the merge) */
      if (fstatat (tfd, names[i], &cst, AT_SYMLINK_NOFOLLOW) < 0 || wh_gone (s, sub_rel))
        {
          if (errno != ENOENT && !wh_gone (s, sub_rel))
            {
              *why = "a directory of the target could not be read";
              return false;
            }
          if ((tst->st_mode & S_ISGID) && made_as_parent_below (s, sfd, names[i], &sst))
            {
              *why = "a directory made as a parent in a setgid directory";
              return false;
            }
          continue;
        }
      if (!S_ISDIR (sst.st_mode) || rfs_hmap_find (&s->nondirs, sub_rel))
        {
          /* replaces what is there */
          if ((tst->st_mode & S_ISGID) && made_as_parent_below (s, sfd, names[i], &sst))
            {
              *why = "a directory made as a parent in a setgid directory";
              return false;
            }
          continue;
        }
      if (!S_ISDIR (cst.st_mode))
        {
          struct dirmeta *d = explicit_dir (s, &sst);
          if (d == NULL || d->late)
            {
              *why = "a parent directory where the target has a non-directory";
              return false;
            }
          /* the directory entry replaces it */
          if ((tst->st_mode & S_ISGID) && made_as_parent_below (s, sfd, names[i], &sst))
            {
              *why = "a directory made as a parent in a setgid directory";
              return false;
            }
          continue;
        }
      cleanup_close int sub_s = openat (sfd, names[i], O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      cleanup_close int sub_t = openat (tfd, names[i], O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub_s < 0 || sub_t < 0 || !check (s, sub_s, sub_t, &cst, sub_rel, why))
        {
          if (sub_s < 0 || sub_t < 0)
            *why = "a directory could not be opened";
          return false;
        }
    }
  return true;
}

/* The user.* and security.capability xattrs of side directory `sub` in sfd
 * given to target directory `sub` in tfd (its own of those kinds go), as a
 * directory entry over an existing directory does. */
static void
copy_dir_xattrs (int sfd, int tfd, const char *sub, const char *rel)
{
  cleanup_close int from = openat (sfd, sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  cleanup_close int to = openat (tfd, sub, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (from < 0 || to < 0)
    {
      ib_debug ("/%s: xattrs not merged: %s", rel, strerror (errno));
      return;
    }
  unp_clear_xattrs (to, rel);
  rfs_copy_xattrs (from, to, rel);
}

/* The side record d of a directory that the target already had (stat
 * cst) goes to the target's inode. */
static void
retarget (struct unpack *t, struct dirmeta *d, const struct stat *cst)
{
  bool fresh;
  struct dirmeta *n = unp_dirmeta_get (t, d->path, cst, &fresh);
  n->mode = d->mode;
  n->set_owner = true;
  n->uid = d->uid;
  n->gid = d->gid;
  if (d->set_times)
    {
      n->set_times = true;
      n->ts[0] = d->ts[0];
      n->ts[1] = d->ts[1];
    }
  d->dead = true; /* the side's inode goes with the side directory */
}

static int
merge (struct unpack *s, struct unpack *t, int sfd, int tfd, const struct stat *tst,
       const char *rel, ib_error_t *err)
{
  cleanup_strv char **names = names_of (sfd);
  if (names == NULL)
    return ib_error_sys (err, errno, "merge /%s: read the side directory", rel);
  for (size_t i = 0; names[i]; i++)
    {
      cleanup_free char *sub_rel = join_rel (rel, names[i]);
      struct stat sst, cst;
      if (fstatat (sfd, names[i], &sst, AT_SYMLINK_NOFOLLOW) < 0)
        return ib_error_sys (err, errno, "merge /%s", sub_rel);
      bool there = fstatat (tfd, names[i], &cst, AT_SYMLINK_NOFOLLOW) == 0;
      if (!there && errno != ENOENT)
        return ib_error_sys (err, errno, "merge /%s", sub_rel);
      /* a directory both have is merged, unless the layer put something
       * else there first (which replaced the lower layers' directory) */
      if (there && S_ISDIR (sst.st_mode) && S_ISDIR (cst.st_mode)
          && !rfs_hmap_find (&s->nondirs, sub_rel))
        {
          cleanup_close int sub_s
              = openat (sfd, names[i], O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
          cleanup_close int sub_t
              = openat (tfd, names[i], O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
          if (sub_s < 0 || sub_t < 0)
            return ib_error_sys (err, errno, "merge /%s", sub_rel);
          struct dirmeta *d = explicit_dir (s, &sst);
          if (d)
            {
              /* the layer's entry for it: its metadata (the mode at the
               * end), its xattrs now, as an in-order unpack gives them */
              retarget (t, d, &cst);
              if (unp_make_writable (t, sub_rel, sub_t, &cst, err) < 0)
                return ib_error_prefix (err, "merge /%s", sub_rel);
              copy_dir_xattrs (sfd, tfd, names[i], sub_rel);
            }
          if (merge (s, t, sub_s, sub_t, &cst, sub_rel, err) < 0)
            return -1;
          continue;
        }
      unp_keep_times (t, rel, tst);
      if (unp_make_writable (t, rel, tfd, tst, err) < 0)
        return ib_error_prefix (err, "merge /%s", sub_rel);
      if (there && unp_remove_at (tfd, names[i], sub_rel, err) < 0)
        return ib_error_prefix (err, "merge");
      if (renameat (sfd, names[i], tfd, names[i]) < 0)
        return ib_error_sys (err, errno, "merge /%s", sub_rel);
    }
  return 0;
}

int
ib_unpack_side_merge (ib_unpack_side_t *side, const char *target, ib_error_t *err)
{
  struct unpack *s = &side->u;
  struct unpack t = { .rootfd = -1, .pc_fd = -1 };
  cleanup_close int sroot = open (side->dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (sroot < 0)
    return ib_error_sys (err, errno, "merge %s: open", side->dir);
  t.rootfd = open (target, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (t.rootfd < 0 || fstat (t.rootfd, &t.root_st) < 0)
    {
      ib_error_sys (err, errno, "merge into %s: open", target);
      unp_free (&t);
      return -1;
    }
  const char *why = NULL;
  if (!wh_check (s, t.rootfd, &why) || !check (s, sroot, t.rootfd, &t.root_st, "", &why))
    {
      ib_debug ("merge %s into %s: the layer depends on the layers below (%s)", side->dir, target,
                why);
      unp_free (&t);
      return 1;
    }
  /* the whiteouts first: they removed from the lower layers, in order */
  int r = wh_apply (s, &t, err);
  /* the "./" entry: the target's own metadata */
  struct stat sst;
  struct dirmeta *d = r == 0 && fstat (sroot, &sst) == 0 ? explicit_dir (s, &sst) : NULL;
  if (d)
    {
      copy_dir_xattrs (sroot, t.rootfd, ".", ".");
      retarget (&t, d, &t.root_st);
    }
  if (r == 0 && merge (s, &t, sroot, t.rootfd, &t.root_st, "", err) < 0)
    r = -1;
  /* the side's other records (directories moved in whole, with their
   * inodes) join the target's, then all are applied */
  for (size_t i = 0; r == 0 && i < s->n_dirs; i++)
    {
      struct dirmeta *sd = &s->dirs[i];
      if (sd->dead || *sd->path == '\0')
        continue;
      struct stat st = { .st_dev = sd->dev, .st_ino = sd->ino, .st_mode = S_IFDIR | sd->mode };
      bool fresh;
      struct dirmeta *n = unp_dirmeta_get (&t, sd->path, &st, &fresh);
      if (!fresh)
        continue;
      char *path = n->path;
      *n = *sd;
      n->path = path;
    }
  if (r == 0 && unp_apply_dirmeta (&t, err) < 0)
    r = -1;
  unp_free (&t);
  return r < 0 ? ib_error_prefix (err, "merge %s into %s", side->dir, target) : 0;
}
