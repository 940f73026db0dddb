/* rootfs/owner.c — the `user.rootlesscontainers` ownership record
 * (rootfs/owner.h).
 *
 * The value is a two-field protobuf message; a varint codec of a few lines
 * is written here rather than linking a protobuf runtime and generated code
 * for it (wire format: protobuf's encoding guide, "Base 128 Varints" and
 * "Message Structure").
 */
#include "rootfs/owner.h"
#include "common/util.h"
#include "rootfs/userns.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

static size_t
put_varint (unsigned char *p, uint32_t v)
{
  size_t n = 0;
  while (v >= 0x80)
    {
      p[n++] = (unsigned char) (v | 0x80);
      v >>= 7;
    }
  p[n++] = (unsigned char) v;
  return n;
}

size_t
ib_owner_encode (uint32_t uid, uint32_t gid, unsigned char *out)
{
  size_t n = 0;
  if (uid != 0)
    {
      out[n++] = 1 << 3 | 0; /* field 1, varint */
      n += put_varint (out + n, uid);
    }
  if (gid != 0)
    {
      out[n++] = 2 << 3 | 0; /* field 2, varint */
      n += put_varint (out + n, gid);
    }
  return n;
}

/* A varint at *p (before end) into *v (its low 64 bits); false when cut. */
static bool
get_varint (const unsigned char **p, const unsigned char *end, uint64_t *v)
{
  *v = 0;
  for (unsigned shift = 0; *p < end && shift < 70; shift += 7)
    {
      unsigned char b = *(*p)++;
      if (shift < 64)
        *v |= (uint64_t) (b & 0x7f) << shift;
      if (!(b & 0x80))
        return true;
    }
  return false;
}

int
ib_owner_decode (const void *buf, size_t n, uint32_t *uid, uint32_t *gid)
{
  const unsigned char *p = buf, *end = p + n;
  *uid = 0;
  *gid = 0;
  while (p < end)
    {
      uint64_t key, v;
      if (!get_varint (&p, end, &key))
        return -1;
      switch (key & 7)
        {
        case 0: /* varint */
          if (!get_varint (&p, end, &v))
            return -1;
          if (key >> 3 == 1)
            *uid = (uint32_t) v;
          else if (key >> 3 == 2)
            *gid = (uint32_t) v;
          break;
        case 1: /* 64-bit */
          if (end - p < 8)
            return -1;
          p += 8;
          break;
        case 2: /* length-delimited */
          if (!get_varint (&p, end, &v) || v > (uint64_t) (end - p))
            return -1;
          p += v;
          break;
        case 5: /* 32-bit */
          if (end - p < 4)
            return -1;
          p += 4;
          break;
        default:
          return -1;
        }
    }
  return 0;
}

bool
ib_owner_is_xattr (const char *name)
{
  return strcmp (name, IB_OWNER_XATTR) == 0;
}

/* Record uid:gid on fd, or else on path (its last component followed only
 * when `follow`: /proc/self/fd/N itself); 0:0 is no record. */
static int
record (int fd, const char *path, bool follow, uid_t uid, gid_t gid)
{
  unsigned char val[IB_OWNER_MAX];
  size_t n = ib_owner_encode ((uint32_t) uid, (uint32_t) gid, val);
  int r;
  if (n == 0)
    {
      r = fd >= 0   ? fremovexattr (fd, IB_OWNER_XATTR)
          : follow ? removexattr (path, IB_OWNER_XATTR)
                   : lremovexattr (path, IB_OWNER_XATTR);
      return r < 0 && errno == ENODATA ? 0 : r;
    }
  if (fd >= 0)
    return fsetxattr (fd, IB_OWNER_XATTR, val, n, 0);
  return follow ? setxattr (path, IB_OWNER_XATTR, val, n, 0)
                : lsetxattr (path, IB_OWNER_XATTR, val, n, 0);
}

/* A chown succeeded: a record on the file would now be stale.  In the root
 * mode every id exists, nothing is recorded and nothing reads records. */
static int
drop_stale (int fd, const char *path, bool follow)
{
  if (ib_userns_mode () != IB_USERNS_ROOT)
    (void) record (fd, path, follow, 0, 0); /* (ENOTSUP: none can exist) */
  return 0;
}

/* dfd/name as a path for the *xattr calls: /proc/self/fd/N/name, or name
 * itself beside AT_FDCWD. */
static int
at_path (int dfd, const char *name, char *path, size_t size)
{
  int n = dfd == AT_FDCWD
              ? snprintf (path, size, "%s", name)
              : snprintf (path, size, "/proc/self/fd/%d%s%s", dfd, *name ? "/" : "", name);
  if (n < 0 || (size_t) n >= size)
    {
      errno = ENAMETOOLONG;
      return -1;
    }
  return 0;
}

int
ib_owner_chown_fd (int fd, uid_t uid, gid_t gid)
{
  if (fchown (fd, uid, gid) == 0)
    return drop_stale (fd, NULL, false);
  if (errno != EINVAL && errno != EPERM)
    return -1;
  return record (fd, NULL, false, uid, gid);
}

int
ib_owner_chown_at (int dfd, const char *name, uid_t uid, gid_t gid)
{
  int flags = AT_SYMLINK_NOFOLLOW | (*name ? 0 : AT_EMPTY_PATH);
  char path[64 + 4096];
  if (at_path (dfd, name, path, sizeof path) < 0)
    return -1;
  struct stat st;
  if (fchownat (dfd, name, uid, gid, flags) == 0)
    {
      if (fstatat (dfd, name, &st, flags) == 0 && (S_ISREG (st.st_mode) || S_ISDIR (st.st_mode)))
        drop_stale (-1, path, *name == '\0');
      return 0;
    }
  if (errno != EINVAL && errno != EPERM)
    return -1;
  int chown_errno = errno;
  if (fstatat (dfd, name, &st, flags) < 0)
    return -1;
  if (!S_ISREG (st.st_mode) && !S_ISDIR (st.st_mode))
    {
      /* the kernel keeps user.* xattrs off symlinks and special files */
      ib_debug ("%s: owner %u:%u not recorded on a %s", *name ? name : ".", (unsigned) uid,
                (unsigned) gid, S_ISLNK (st.st_mode) ? "symlink" : "special file");
      errno = chown_errno;
      return 0;
    }
  return record (-1, path, *name == '\0', uid, gid);
}

/* A read record (n bytes of val, or n < 0 with errno) into *uid / *gid. */
static int
take_record (const char *what, const unsigned char *val, ssize_t n, uid_t *uid, gid_t *gid)
{
  if (n < 0)
    return errno == ENODATA || errno == ENOTSUP || errno == ERANGE ? 0 : -1;
  uint32_t ru, rg;
  if (ib_owner_decode (val, (size_t) n, &ru, &rg) < 0)
    {
      ib_debug ("%s: malformed %s ignored", what, IB_OWNER_XATTR);
      return 0;
    }
  if (ru != IB_OWNER_NOOP)
    *uid = ru;
  if (rg != IB_OWNER_NOOP)
    *gid = rg;
  return 1;
}

int
ib_owner_get_at (int dfd, const char *name, uid_t *uid, gid_t *gid)
{
  char path[64 + 4096];
  if (at_path (dfd, name, path, sizeof path) < 0)
    return -1;
  unsigned char val[256];
  ssize_t n = *name ? lgetxattr (path, IB_OWNER_XATTR, val, sizeof val)
                    : getxattr (path, IB_OWNER_XATTR, val, sizeof val);
  return take_record (*name ? name : ".", val, n, uid, gid);
}

int
ib_owner_get_fd (int fd, uid_t *uid, gid_t *gid)
{
  unsigned char val[256];
  ssize_t n = fgetxattr (fd, IB_OWNER_XATTR, val, sizeof val);
  return take_record ("fd", val, n, uid, gid);
}
