/* rootfs/helpers.c — small helpers the files of rootfs/ share
 * (rootfs_int.h): a string-keyed hash map and inode keys (unpack, tree
 * copy), chown failures in a user namespace, a directory test, a write
 * loop safe in the sandbox's children.
 */
#include "rootfs/rootfs_int.h"
#include "common/util.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

/* ---------------------------------------------------------------------- */
/* A small string-keyed hash map (open addressing, linear probing).        */

static uint64_t
hash_str (const char *s)
{
  uint64_t h = 1469598103934665603ULL;
  for (; *s; s++)
    {
      h ^= (unsigned char) *s;
      h *= 1099511628211ULL;
    }
  return h;
}

hslot_t *
rfs_hmap_find (const hmap_t *m, const char *key)
{
  if (m->cap == 0)
    return NULL;
  size_t i = hash_str (key) & (m->cap - 1);
  while (m->slots[i].key)
    {
      if (strcmp (m->slots[i].key, key) == 0)
        return &m->slots[i];
      i = (i + 1) & (m->cap - 1);
    }
  return NULL;
}

static void
hmap_insert_slot (hslot_t *slots, size_t cap, char *key, void *val)
{
  size_t i = hash_str (key) & (cap - 1);
  while (slots[i].key)
    i = (i + 1) & (cap - 1);
  slots[i].key = key;
  slots[i].val = val;
}

void
rfs_hmap_put (hmap_t *m, const char *key, void *val)
{
  hslot_t *s = rfs_hmap_find (m, key);
  if (s)
    {
      s->val = val;
      return;
    }
  if ((m->n + 1) * 2 > m->cap)
    {
      size_t cap = m->cap ? m->cap * 2 : 64;
      hslot_t *slots = xmalloc (cap * sizeof *slots);
      for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i].key)
          hmap_insert_slot (slots, cap, m->slots[i].key, m->slots[i].val);
      free (m->slots);
      m->slots = slots;
      m->cap = cap;
    }
  hmap_insert_slot (m->slots, m->cap, xstrdup (key), val);
  m->n++;
}

void
rfs_hmap_free (hmap_t *m, bool free_vals)
{
  for (size_t i = 0; i < m->cap; i++)
    if (m->slots[i].key)
      {
        free (m->slots[i].key);
        if (free_vals)
          free (m->slots[i].val);
      }
  free (m->slots);
  m->slots = NULL;
  m->cap = m->n = 0;
}

/* "dev:ino" of a stat. */
char *
rfs_ino_key (const struct stat *st)
{
  return xasprintf ("%jx:%jx", (uintmax_t) st->st_dev, (uintmax_t) st->st_ino);
}

void
rfs_ignore_chown_error (const char *name)
{
  if (errno == EPERM || errno == EINVAL)
    ib_debug ("%s: ownership kept as the caller's: %s", name, strerror (errno));
  else
    ib_warn ("%s: cannot set ownership: %s", name, strerror (errno));
}

bool
rfs_is_dir (const char *path)
{
  struct stat st;
  return stat (path, &st) == 0 && S_ISDIR (st.st_mode);
}

DIR *
rfs_fdopendir (int fd)
{
  DIR *d = fdopendir (fd);
  if (d == NULL)
    {
      int e = errno;
      close (fd);
      errno = e;
    }
  return d;
}

char **
rfs_dir_names (DIR *d)
{
  char **names = NULL;
  struct dirent *de;
  while ((de = readdir (d)) != NULL)
    if (strcmp (de->d_name, ".") != 0 && strcmp (de->d_name, "..") != 0)
      ib_strv_push (&names, de->d_name);
  return names;
}

bool
rfs_write_full (int fd, const char *p, size_t n)
{
  while (n > 0)
    {
      ssize_t k = write (fd, p, n);
      if (k < 0 && errno == EINTR)
        continue;
      if (k <= 0)
        return false;
      p += k;
      n -= (size_t) k;
    }
  return true;
}

ssize_t
rfs_fd_read (void *ud, void *buf, size_t len, ib_error_t *err)
{
  int fd = *(int *) ud;
  for (;;)
    {
      ssize_t n = read (fd, buf, len);
      if (n >= 0)
        return n;
      if (errno != EINTR)
        return ib_error_sys (err, errno, "read");
    }
}

void
rfs_copy_xattrs (int sfd, int dfd, const char *shown)
{
  char list[65536];
  ssize_t n = flistxattr (sfd, list, sizeof list);
  if (n <= 0)
    return;
  for (char *k = list; k < list + n; k += strlen (k) + 1)
    {
      if (!ib_str_has_prefix (k, "user.") && strcmp (k, "security.capability") != 0)
        continue;
      char val[65536];
      ssize_t vn = fgetxattr (sfd, k, val, sizeof val);
      if (vn < 0 || fsetxattr (dfd, k, val, (size_t) vn, 0) < 0)
        ib_debug ("%s: xattr %s not copied: %s", shown, k, strerror (errno));
    }
}
