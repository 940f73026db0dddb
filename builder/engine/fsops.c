#include "builder/engine/fsops.h"
#include "common/util.h"
#include "rootfs/owner.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <search.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

int
ib_root_resolve (const char *root, const char *path, bool follow_last, char **host_path,
                 ib_error_t *err)
{
  /* `done` is the resolved part (always starts with '/'), `todo` what is
   * left; a symlink's target is put in front of the remaining components. */
  cleanup_free char *todo = xstrdup (path);
  ib_buf_t done = { 0 };
  int links = 0;
  ib_buf_puts (&done, "");
  char *rest = todo;
  for (;;)
    {
      while (*rest == '/')
        rest++;
      if (*rest == '\0')
        break;
      char *slash = strchr (rest, '/');
      size_t n = slash ? (size_t) (slash - rest) : strlen (rest);
      cleanup_free char *comp = xstrndup (rest, n);
      rest += n;
      bool last = *rest == '\0' || strspn (rest, "/") == strlen (rest);
      if (strcmp (comp, ".") == 0)
        continue;
      if (strcmp (comp, "..") == 0)
        {
          char *p = strrchr (done.data, '/');
          if (p)
            {
              *p = '\0';
              done.len = (size_t) (p - done.data);
            }
          continue;
        }
      size_t saved = done.len;
      ib_buf_printf (&done, "/%s", comp);
      if (last && !follow_last)
        continue;
      cleanup_free char *hp = xasprintf ("%s%s", root, done.data);
      char target[PATH_MAX];
      ssize_t tl = readlink (hp, target, sizeof target - 1);
      if (tl < 0)
        continue; /* not a symlink, or missing: keep as written */
      target[tl] = '\0';
      if (++links > 40)
        {
          ib_buf_free (&done);
          return ib_error_set (err, ELOOP, "resolve %s in %s: too many levels of symbolic links",
                               path, root);
        }
      if (target[0] == '/')
        {
          done.len = 0;
          done.data[0] = '\0';
        }
      else
        {
          done.len = saved;
          done.data[saved] = '\0';
        }
      char *next = xasprintf ("%s/%s", target, rest);
      free (todo);
      todo = next;
      rest = todo;
    }
  *host_path = xasprintf ("%s%s", root, done.len ? done.data : "/");
  ib_buf_free (&done);
  return 0;
}

/* dst gets src's metadata (stat st) or the options' owner and mode.  An
 * owner the kernel cannot give (the single-id mode) is recorded
 * (rootfs/owner.h); src's own recorded owner is what is copied. */
static void
apply_meta (const char *src, const char *dst, const struct stat *st, const ib_copy_opts_t *o)
{
  uid_t uid = o->set_owner ? o->uid : st->st_uid;
  gid_t gid = o->set_owner ? o->gid : st->st_gid;
  if (!o->set_owner && !S_ISLNK (st->st_mode))
    (void) ib_owner_get_at (AT_FDCWD, src, &uid, &gid);
  if (ib_owner_chown_at (AT_FDCWD, dst, uid, gid) < 0)
    ib_debug ("%s: owner %u:%u not set: %s", dst, (unsigned) uid, (unsigned) gid,
              strerror (errno));
  if (!S_ISLNK (st->st_mode))
    chmod (dst, o->chmod >= 0 ? (mode_t) o->chmod : st->st_mode & 07777);
  struct timespec ts[2] = { st->st_atim, st->st_mtim };
  utimensat (AT_FDCWD, dst, ts, AT_SYMLINK_NOFOLLOW);
}

/* One ib_copy_into call: its options, and the files with more than one
 * link copied so far, so that names hard-linked to each other in the
 * source are hard-linked in the copy (BuildKit's copier keeps the links
 * among the files of one source; tonistiigi/fsutil copy.go). */
typedef struct copied_inode
{
  dev_t dev;
  ino_t ino;
  char *dst; /* the first copy's path */
} copied_inode_t;

typedef struct copy_run
{
  const ib_copy_opts_t *o;
  void *inodes;        /* tsearch tree of copied_inode_t */
  size_t dev_skipped;  /* device nodes the namespace may not make */
  char *dev_first;     /* the first of them, for the warning */
} copy_run_t;

static int
cmp_inode (const void *a, const void *b)
{
  const copied_inode_t *x = a, *y = b;
  if (x->dev != y->dev)
    return x->dev < y->dev ? -1 : 1;
  return x->ino < y->ino ? -1 : x->ino > y->ino;
}

static void
free_inode (void *p)
{
  copied_inode_t *c = p;
  free (c->dst);
  free (c);
}

static int copy_entry (const char *src, const char *dst, const char *rel, copy_run_t *run,
                       ib_error_t *err);

/* `rel`: src's path relative to the directory the copy started at ("" for
 * that directory), for the filter. */
static int
copy_dir_contents (const char *src, const char *dst, const char *rel, copy_run_t *run,
                   ib_error_t *err)
{
  const ib_copy_opts_t *o = run->o;
  DIR *d = opendir (src);
  if (d == NULL)
    return ib_error_sys (err, errno, "open directory %s", src);
  struct dirent *de;
  int ret = 0;
  while ((de = readdir (d)) != NULL)
    {
      if (strcmp (de->d_name, ".") == 0 || strcmp (de->d_name, "..") == 0)
        continue;
      cleanup_free char *crel = *rel ? xasprintf ("%s/%s", rel, de->d_name) : xstrdup (de->d_name);
      bool descend = false;
      bool skip = o->filter && ib_path_filter_skip (o->filter, crel, &descend);
      cleanup_free char *s = ib_path_join (src, de->d_name);
      cleanup_free char *t = ib_path_join (dst, de->d_name);
      struct stat sb;
      if (skip && (!descend || lstat (s, &sb) < 0 || !S_ISDIR (sb.st_mode)))
        continue;
      /* an excluded directory walked for the exceptions below it is made
       * only when something below it is copied (BuildKit's fsutil walker
       * emits a skipped parent with its first included child) */
      bool made = skip && lstat (t, &sb) < 0;
      if ((ret = copy_entry (s, t, crel, run, err)) < 0)
        break;
      if (made)
        rmdir (t); /* fails unless empty: then it stays */
    }
  closedir (d);
  return ret;
}

/* `dst` as messages show it: the path in the image when o->root holds it. */
static const char *
shown_dst (const ib_copy_opts_t *o, const char *dst)
{
  size_t n = o->root ? strlen (o->root) : 0;
  while (n > 1 && o->root[n - 1] == '/')
    n--;
  if (n > 1 && strncmp (dst, o->root, n) == 0 && (dst[n] == '/' || dst[n] == '\0'))
    return dst[n] ? dst + n : "/";
  return dst;
}

static int
copy_entry (const char *src, const char *dst, const char *rel, copy_run_t *run, ib_error_t *err)
{
  const ib_copy_opts_t *o = run->o;
  struct stat st, dst_st;
  if (lstat (src, &st) < 0)
    return ib_error_sys (err, errno, "copy %s", src);
  bool dst_exists = lstat (dst, &dst_st) == 0;
  if (S_ISDIR (st.st_mode))
    {
      if (dst_exists && !S_ISDIR (dst_st.st_mode) && unlink (dst) < 0)
        return ib_error_sys (err, errno, "replace %s", dst);
      if ((!dst_exists || !S_ISDIR (dst_st.st_mode)) && mkdir (dst, 0700) < 0)
        return ib_error_sys (err, errno, "create directory %s", shown_dst (o, dst));
      if (copy_dir_contents (src, dst, rel, run, err) < 0)
        return -1;
      apply_meta (src, dst, &st, o);
      return 0;
    }
  if (dst_exists)
    {
      if (S_ISDIR (dst_st.st_mode))
        {
          if (ib_rm_rf (dst, err) < 0)
            return -1;
        }
      else if (!(o->atomic && S_ISREG (st.st_mode)) && unlink (dst) < 0)
        return ib_error_sys (err, errno, "replace %s", dst); /* (atomic: renamed over) */
    }
  if (S_ISLNK (st.st_mode))
    {
      char target[PATH_MAX];
      ssize_t n = readlink (src, target, sizeof target - 1);
      if (n < 0)
        return ib_error_sys (err, errno, "read link %s", src);
      target[n] = '\0';
      if (symlink (target, dst) < 0)
        return ib_error_sys (err, errno, "create symlink %s", shown_dst (o, dst));
      apply_meta (src, dst, &st, o);
      return 0;
    }
  if (!S_ISREG (st.st_mode))
    {
      /* fifos and sockets are made as they are; device nodes where the
       * user namespace allows it (never: mknod needs CAP_MKNOD in the
       * initial namespace), else left out and counted for one warning,
       * as unpacking a layer does */
      if (mknod (dst, st.st_mode, S_ISCHR (st.st_mode) || S_ISBLK (st.st_mode) ? st.st_rdev : 0)
          < 0)
        {
          if ((errno == EPERM || errno == EACCES) && (S_ISCHR (st.st_mode) || S_ISBLK (st.st_mode)))
            {
              if (run->dev_skipped++ == 0)
                run->dev_first = xstrdup (shown_dst (o, dst));
              return 0;
            }
          return ib_error_sys (err, errno, "create %s", shown_dst (o, dst));
        }
      apply_meta (src, dst, &st, o);
      return 0;
    }
  copied_inode_t key = { .dev = st.st_dev, .ino = st.st_ino }, *seen = NULL;
  if (st.st_nlink > 1)
    {
      void *node = tfind (&key, &run->inodes, cmp_inode);
      seen = node ? *(copied_inode_t **) node : NULL;
      if (seen && link (seen->dst, dst) == 0)
        return 0;
      /* the first name of the file (or a link the file system refused:
       * EMLINK): copied */
    }
  cleanup_close int in = open (src, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (in < 0)
    return ib_error_sys (err, errno, "open %s", src);
  /* o->atomic: written beside dst under a temporary name, renamed over
   * it when complete */
  cleanup_free char *tmp = NULL;
  if (o->atomic)
    {
      const char *slash = strrchr (dst, '/');
      tmp = slash ? xasprintf ("%.*s/.%s.imgbuild-XXXXXX", (int) (slash - dst), dst, slash + 1)
                  : xasprintf (".%s.imgbuild-XXXXXX", dst);
    }
  cleanup_close int out = tmp ? mkostemp (tmp, O_CLOEXEC)
                              : open (dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                                      0600);
  if (out < 0)
    return ib_error_sys (err, errno, "create %s", shown_dst (o, dst));
  /* a full disk names the file being written, as the image will have it */
  if (ib_copy_fd_data_to (in, out, src, shown_dst (o, dst), err) < 0
      || (close (steal_fd (&out)) < 0 /* NFS, quotas: a deferred write error */
          && ib_error_sys (err, errno, "write %s", shown_dst (o, dst)) < 0))
    {
      if (tmp)
        unlink (tmp);
      return -1;
    }
  apply_meta (src, tmp ? tmp : dst, &st, o);
  if (tmp && rename (tmp, dst) < 0)
    {
      int e = errno;
      unlink (tmp);
      return ib_error_sys (err, e, "replace %s", shown_dst (o, dst));
    }
  if (st.st_nlink > 1 && seen == NULL)
    {
      copied_inode_t *c = xmalloc (sizeof *c);
      *c = key;
      c->dst = xstrdup (dst);
      if (tsearch (c, &run->inodes, cmp_inode) == NULL)
        free_inode (c); /* out of memory: that file's other names are copies */
    }
  return 0;
}

int
ib_mkdir_p_owned (const char *dir, const ib_copy_opts_t *o, ib_error_t *err)
{
  struct stat st;
  if (lstat (dir, &st) == 0 || !o->set_owner)
    return ib_mkdir_p (dir, 0755, err);
  /* the first missing component: from there on everything is new */
  cleanup_free char *p = xstrdup (dir);
  size_t first = strlen (p);
  for (char *s = strchr (p + 1, '/'); s; s = strchr (s + 1, '/'))
    {
      *s = '\0';
      bool missing = lstat (p, &st) < 0 && errno == ENOENT;
      *s = '/';
      if (missing)
        {
          first = (size_t) (s - p);
          break;
        }
    }
  if (ib_mkdir_p (dir, 0755, err) < 0)
    return -1;
  size_t len = strlen (p);
  for (size_t i = first; i < len; i++)
    if (p[i] == '/')
      {
        p[i] = '\0';
        (void) ib_owner_chown_at (AT_FDCWD, p, o->uid, o->gid);
        p[i] = '/';
      }
  (void) ib_owner_chown_at (AT_FDCWD, p, o->uid, o->gid);
  return 0;
}

static int
copy_into (const char *src, const char *dst, bool dst_is_dir, copy_run_t *run, ib_error_t *err)
{
  const ib_copy_opts_t *o = run->o;
  struct stat st, dst_st;
  if (lstat (src, &st) < 0)
    return ib_error_sys (err, errno, "copy %s", src);
  if (S_ISDIR (st.st_mode))
    {
      if (ib_mkdir_p_owned (dst, o, err) < 0)
        return -1;
      if (copy_dir_contents (src, dst, "", run, err) < 0)
        return -1;
      return 0;
    }
  cleanup_free char *target = NULL;
  if (dst_is_dir || (stat (dst, &dst_st) == 0 && S_ISDIR (dst_st.st_mode)))
    {
      if (ib_mkdir_p_owned (dst, o, err) < 0)
        return -1;
      const char *base = strrchr (src, '/');
      target = ib_path_join (dst, o->name ? o->name : base ? base + 1 : src);
    }
  else
    {
      target = xstrdup (dst);
      char *slash = strrchr (target, '/');
      if (slash && slash != target)
        {
          *slash = '\0';
          int r = ib_mkdir_p_owned (target, o, err);
          *slash = '/';
          if (r < 0)
            return -1;
        }
    }
  return copy_entry (src, target, "", run, err);
}

int
ib_copy_into (const char *src, const char *dst, bool dst_is_dir, const ib_copy_opts_t *o,
              ib_error_t *err)
{
  copy_run_t run = { .o = o };
  int r = copy_into (src, dst, dst_is_dir, &run, err);
  tdestroy (run.inodes, free_inode);
  if (run.dev_skipped)
    ib_warn ("copy %s: %zu device node%s left out: a user namespace cannot make them (%s%s)",
             src, run.dev_skipped, run.dev_skipped > 1 ? "s" : "", run.dev_first,
             run.dev_skipped > 1 ? ", ..." : "");
  free (run.dev_first);
  return r;
}

/* Find `name` (or numeric id) in an /etc/passwd- or /etc/group-style file;
 * returns field 3 (the id) and, for passwd, field 4 (primary gid). */
static int
lookup_db (const char *root, const char *file, const char *name, long *id, long *gid)
{
  /* resolved in the root: an image's /etc/passwd may be a symlink */
  cleanup_free char *rel = xasprintf ("/etc/%s", file);
  cleanup_free char *path = NULL;
  if (ib_root_resolve (root, rel, true, &path, NULL) < 0)
    {
      return -1;
    }
  cleanup_file FILE *f = fopen (path, "re");
  if (f == NULL)
    return -1;
  char *line = NULL;
  size_t cap = 0;
  int found = -1;
  while (getline (&line, &cap, f) > 0)
    {
      char *save = NULL;
      char *fname = strtok_r (line, ":", &save);
      strtok_r (NULL, ":", &save); /* password */
      char *fid = strtok_r (NULL, ":", &save);
      char *fgid = strtok_r (NULL, ":\n", &save);
      if (fname == NULL || fid == NULL)
        continue;
      if (strcmp (fname, name) == 0 || strcmp (fid, name) == 0)
        {
          *id = strtol (fid, NULL, 10);
          if (gid)
            *gid = fgid ? strtol (fgid, NULL, 10) : 0;
          found = 0;
          break;
        }
    }
  free (line);
  return found;
}

static bool
is_number (const char *s)
{
  return *s && strspn (s, "0123456789") == strlen (s);
}

char *
ib_lookup_home (const char *root, uid_t uid)
{
  cleanup_free char *path = NULL;
  ib_root_resolve (root, "/etc/passwd", true, &path, NULL);
  cleanup_file FILE *f = path ? fopen (path, "re") : NULL;
  char *line = NULL, *home = NULL;
  size_t cap = 0;
  while (f && home == NULL && getline (&line, &cap, f) > 0)
    {
      /* name:password:uid:gid:gecos:home:shell (passwd(5)); gecos may be empty */
      char *fields[7] = { 0 };
      char *p = line;
      for (int i = 0; i < 7 && p; i++)
        {
          fields[i] = p;
          p = strchr (p, ':');
          if (p)
            *p++ = '\0';
        }
      if (fields[5] == NULL || fields[2] == NULL || !is_number (fields[2])
          || (uid_t) strtoul (fields[2], NULL, 10) != uid)
        continue;
      fields[5][strcspn (fields[5], "\n")] = '\0';
      if (fields[5][0] == '/')
        home = xstrdup (fields[5]);
    }
  free (line);
  return home ? home : xstrdup (uid == 0 ? "/root" : "/");
}

void
ib_env_default_home (char ***env, const char *root, uid_t uid)
{
  for (char **kv = *env; kv && *kv; kv++)
    if (ib_str_has_prefix (*kv, "HOME="))
      return;
  cleanup_free char *home = ib_lookup_home (root, uid);
  cleanup_free char *kv = xasprintf ("HOME=%s", home);
  ib_strv_push (env, kv);
}

int
ib_lookup_user (const char *root, const char *spec, uid_t *uid, gid_t *gid, ib_error_t *err)
{
  cleanup_free char *user = xstrdup (spec);
  char *group = strchr (user, ':');
  if (group)
    *group++ = '\0';
  cleanup_free char *exu = ib_str_printable (user, false);
  cleanup_free char *exg = group ? ib_str_printable (group, false) : NULL;
  /* numbers are ids whether or not the image names them: checked first */
  uint32_t u32 = 0, g32 = 0;
  if (is_number (user) && ib_parse_id (user, &u32) < 0)
    return ib_error_set (err, ERANGE, "user '%s': a uid is 0 to 4294967294", exu);
  if (group && is_number (group) && ib_parse_id (group, &g32) < 0)
    return ib_error_set (err, ERANGE, "group '%s': a gid is 0 to 4294967294", exg);
  long u = 0, g = 0;
  if (lookup_db (root, "passwd", user, &u, &g) < 0)
    {
      if (!is_number (user))
        return ib_error_set (err, ENOENT, "user '%s' not found in the image's /etc/passwd", exu);
      u = (long) u32;
      g = 0;
    }
  else if (u < 0 || u > 4294967294L || g < 0 || g > 4294967294L)
    return ib_error_set (err, ERANGE, "user '%s': the image's /etc/passwd gives an id out of "
                         "range (0 to 4294967294)", exu);
  if (group && *group)
    {
      if (lookup_db (root, "group", group, &g, NULL) < 0)
        {
          if (!is_number (group))
            return ib_error_set (err, ENOENT, "group '%s' not found in the image's /etc/group",
                                 exg);
          g = (long) g32;
        }
      else if (g < 0 || g > 4294967294L)
        return ib_error_set (err, ERANGE, "group '%s': the image's /etc/group gives a gid out "
                             "of range (0 to 4294967294)", exg);
    }
  *uid = (uid_t) u;
  *gid = (gid_t) g;
  return 0;
}

/* The passwd name of `user` (a name, or a uid that an entry has), or NULL. */
static char *
passwd_name (const char *root, const char *user)
{
  cleanup_free char *path = NULL;
  if (ib_root_resolve (root, "/etc/passwd", true, &path, NULL) < 0)
    return NULL;
  cleanup_file FILE *f = fopen (path, "re");
  char *line = NULL, *name = NULL;
  size_t cap = 0;
  while (f && name == NULL && getline (&line, &cap, f) > 0)
    {
      char *save = NULL;
      char *fname = strtok_r (line, ":", &save);
      strtok_r (NULL, ":", &save); /* password */
      char *fid = strtok_r (NULL, ":\n", &save);
      if (fname && fid && (strcmp (fname, user) == 0 || strcmp (fid, user) == 0))
        name = xstrdup (fname);
    }
  free (line);
  return name;
}

size_t
ib_lookup_groups (const char *root, const char *spec, gid_t **gids)
{
  *gids = NULL;
  cleanup_free char *user = xstrdup (spec && *spec ? spec : "0");
  char *colon = strchr (user, ':');
  if (colon && colon[1] != '\0')
    return 0; /* an explicit group: no supplementary ones */
  if (colon)
    *colon = '\0';
  cleanup_free char *name = passwd_name (root, user);
  cleanup_free char *path = NULL;
  if (name == NULL || ib_root_resolve (root, "/etc/group", true, &path, NULL) < 0)
    return 0;
  cleanup_file FILE *f = fopen (path, "re");
  char *line = NULL;
  size_t cap = 0, n = 0;
  while (f && n < IB_MAX_GROUPS && getline (&line, &cap, f) > 0)
    {
      /* group_name:password:GID:user_list (group(5)), members comma-separated */
      line[strcspn (line, "\n")] = '\0';
      char *fields[4] = { 0 };
      char *p = line;
      for (int i = 0; i < 4 && p; i++)
        {
          fields[i] = p;
          p = strchr (p, ':');
          if (p)
            *p++ = '\0';
        }
      uint32_t g32;
      if (fields[3] == NULL || !is_number (fields[2]) || ib_parse_id (fields[2], &g32) < 0)
        continue;
      char *save = NULL;
      for (char *m = strtok_r (fields[3], ",", &save); m; m = strtok_r (NULL, ",", &save))
        if (strcmp (m, name) == 0)
          {
            *gids = xrealloc (*gids, (n + 1) * sizeof (gid_t));
            (*gids)[n++] = (gid_t) g32;
            break;
          }
    }
  free (line);
  return n;
}
