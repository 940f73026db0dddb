/* rootfs/resolve.c — in-root path resolution (resolve.h): a path resolved
 * beneath a directory fd as if that directory were "/".
 *
 * openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS): symlinks planted by
 * earlier entries or layers are followed as the container would see them,
 * i.e. never out of the root.  Where openat2 is missing the same
 * resolution is done in user space, one component at a time with
 * O_NOFOLLOW.
 */
#include "rootfs/resolve.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_SYMLINKS 40
static bool openat2_disabled;      /* by ib_unpack_set_openat2 (false) */
static bool openat2_missing;       /* the kernel said ENOSYS */

void
ib_unpack_set_openat2 (bool use)
{
  openat2_disabled = !use;
}

static long
sys_openat2 (int dirfd, const char *path, struct open_how *how)
{
  return syscall (SYS_openat2, dirfd, path, how, sizeof *how);
}

/* User-space RESOLVE_IN_ROOT: walk `path` from rootfd with O_NOFOLLOW,
 * expanding symlinks ourselves (absolute ones and ".." clamped at the root).
 * Returns an O_PATH fd of the directory, -1 with errno on failure. */
static int
resolve_fallback (int rootfd, const char *path)
{
  int stack_cap = 16, depth = 0, links = 0, ret = -1, saved = 0;
  int *stack = xmalloc (sizeof (int) * (size_t) stack_cap);
  ib_buf_t rest = { 0 };
  ib_buf_puts (&rest, path);
  stack[depth++] = openat (rootfd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (stack[0] < 0)
    {
      saved = errno;
      goto out;
    }
  size_t pos = 0;
  for (;;)
    {
      while (pos < rest.len && rest.data[pos] == '/')
        pos++;
      if (pos >= rest.len)
        break;
      size_t start = pos;
      while (pos < rest.len && rest.data[pos] != '/')
        pos++;
      cleanup_free char *comp = xstrndup (rest.data + start, pos - start);
      if (strcmp (comp, ".") == 0)
        continue;
      if (strcmp (comp, "..") == 0)
        {
          if (depth > 1)
            close (stack[--depth]);
          continue;
        }
      int top = stack[depth - 1];
      struct stat st;
      if (fstatat (top, comp, &st, AT_SYMLINK_NOFOLLOW) < 0)
        {
          saved = errno;
          goto out;
        }
      if (S_ISLNK (st.st_mode))
        {
          if (++links > MAX_SYMLINKS)
            {
              saved = ELOOP;
              goto out;
            }
          size_t sz = (size_t) st.st_size + 1;
          if (sz < 256)
            sz = 256;
          cleanup_free char *target = xmalloc (sz + 1);
          ssize_t n = readlinkat (top, comp, target, sz);
          if (n < 0)
            {
              saved = errno;
              goto out;
            }
          if ((size_t) n >= sz)
            {
              saved = ENAMETOOLONG;
              goto out;
            }
          target[n] = '\0';
          /* new rest = target + "/" + what was left after this component */
          ib_buf_t nr = { 0 };
          ib_buf_puts (&nr, target);
          ib_buf_append (&nr, "/", 1);
          ib_buf_append (&nr, rest.data + pos, rest.len - pos);
          ib_buf_free (&rest);
          rest = nr;
          pos = 0;
          if (target[0] == '/')
            while (depth > 1)
              close (stack[--depth]);
          continue;
        }
      if (!S_ISDIR (st.st_mode))
        {
          saved = ENOTDIR;
          goto out;
        }
      int fd = openat (top, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0)
        {
          saved = errno;
          goto out;
        }
      if (depth == stack_cap)
        {
          stack_cap *= 2;
          stack = xrealloc (stack, sizeof (int) * (size_t) stack_cap);
        }
      stack[depth++] = fd;
    }
  ret = stack[--depth];
out:
  while (depth > 0)
    {
      depth--;
      if (stack[depth] >= 0)
        close (stack[depth]);
    }
  free (stack);
  ib_buf_free (&rest);
  if (ret < 0)
    errno = saved ? saved : EIO;
  return ret;
}

/* O_PATH fd of directory `path` resolved beneath rootfd as if rootfd were
 * "/"; -1 with errno on failure. */
static int
open_dir_in_root (int rootfd, const char *path)
{
  if (*path == '\0')
    return openat (rootfd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (!openat2_disabled && !openat2_missing)
    {
      struct open_how how = { 0 };
      how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
      how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
      for (int i = 0; i < 32; i++)
        {
          long fd = sys_openat2 (rootfd, path, &how);
          if (fd >= 0)
            return (int) fd;
          if (errno == EAGAIN || errno == EINTR)
            continue;
          if (errno != ENOSYS)
            return -1;
          openat2_missing = true;
          break;
        }
      if (!openat2_missing)
        return -1;
    }
  return resolve_fallback (rootfd, path);
}

int
ib_open_dir_in_root (int rootfd, const char *path)
{
  while (*path == '/')
    path++;
  return open_dir_in_root (rootfd, path);
}
