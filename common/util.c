#include "common/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

int ib_verbosity = 1;

void *
xmalloc (size_t size)
{
  void *p = calloc (1, size ? size : 1);
  if (p == NULL)
    abort ();
  return p;
}

void *
xrealloc (void *p, size_t size)
{
  void *r = realloc (p, size ? size : 1);
  if (r == NULL)
    abort ();
  return r;
}

char *
xstrdup (const char *s)
{
  if (s == NULL)
    return NULL;
  char *r = strdup (s);
  if (r == NULL)
    abort ();
  return r;
}

char *
xstrndup (const char *s, size_t n)
{
  char *r = strndup (s, n);
  if (r == NULL)
    abort ();
  return r;
}

char *
xstrndup_trimmed (const char *s, size_t n)
{
  static const char ws[] = " \t\n\v\f\r";
  while (n > 0 && *s && strchr (ws, *s))
    s++, n--;
  while (n > 0 && s[n - 1] && strchr (ws, s[n - 1]))
    n--;
  return xstrndup (s, n);
}

char *
xasprintf (const char *fmt, ...)
{
  char *r = NULL;
  va_list ap;
  va_start (ap, fmt);
  if (vasprintf (&r, fmt, ap) < 0)
    abort ();
  va_end (ap);
  return r;
}

void ib_cleanup_freep (void *p) { free (*(void **) p); }
void ib_cleanup_closep (int *fd) { if (*fd >= 0) close (*fd); }
void ib_cleanup_fclosep (FILE **f) { if (*f) fclose (*f); }
void ib_cleanup_strvp (char ***v) { ib_strv_free (*v); }

void
ib_buf_append (ib_buf_t *b, const void *data, size_t len)
{
  if (b->len + len + 1 > b->cap)
    {
      size_t cap = b->cap ? b->cap : 256;
      while (cap < b->len + len + 1)
        cap *= 2;
      b->data = xrealloc (b->data, cap);
      b->cap = cap;
    }
  if (len)
    memcpy (b->data + b->len, data, len);
  b->len += len;
  b->data[b->len] = '\0';
}

void ib_buf_puts (ib_buf_t *b, const char *s) { ib_buf_append (b, s, strlen (s)); }

void
ib_buf_printf (ib_buf_t *b, const char *fmt, ...)
{
  char *s = NULL;
  va_list ap;
  va_start (ap, fmt);
  int n = vasprintf (&s, fmt, ap);
  va_end (ap);
  if (n < 0)
    abort ();
  ib_buf_append (b, s, (size_t) n);
  free (s);
}

char *
ib_buf_steal (ib_buf_t *b)
{
  if (b->data == NULL)
    ib_buf_append (b, "", 0);
  char *r = b->data;
  b->data = NULL;
  b->len = b->cap = 0;
  return r;
}

void
ib_buf_free (ib_buf_t *b)
{
  free (b->data);
  b->data = NULL;
  b->len = b->cap = 0;
}

size_t
ib_strv_len (char *const *v)
{
  size_t n = 0;
  while (v && v[n])
    n++;
  return n;
}

bool
ib_strv_has (char *const *v, const char *s)
{
  for (size_t i = 0; v && v[i]; i++)
    if (strcmp (v[i], s) == 0)
      return true;
  return false;
}

void
ib_strv_push (char ***v, const char *s)
{
  size_t n = ib_strv_len (*v);
  *v = xrealloc (*v, (n + 2) * sizeof (char *));
  (*v)[n] = xstrdup (s);
  (*v)[n + 1] = NULL;
}

int
ib_cmp_strp (const void *a, const void *b)
{
  return strcmp (*(char *const *) a, *(char *const *) b);
}

void
ib_strv_sort (char **v)
{
  if (v)
    qsort (v, ib_strv_len (v), sizeof *v, ib_cmp_strp);
}

void
ib_env_set (char ***env, const char *kv)
{
  size_t kl = strcspn (kv, "=");
  for (char **e = *env; e && *e; e++)
    if (strncmp (*e, kv, kl) == 0 && (*e)[kl] == '=')
      {
        free (*e);
        *e = xstrdup (kv);
        return;
      }
  ib_strv_push (env, kv);
}

void
ib_strv_builder_take (ib_strv_builder_t *b, char *s)
{
  if (b->n + 2 > b->cap)
    {
      size_t cap = b->cap ? b->cap * 2 : 8;
      while (cap < b->n + 2)
        cap *= 2;
      b->v = xrealloc (b->v, cap * sizeof (char *));
      b->cap = cap;
    }
  b->v[b->n++] = s;
  b->v[b->n] = NULL;
}

void
ib_strv_builder_push (ib_strv_builder_t *b, const char *s)
{
  ib_strv_builder_take (b, xstrdup (s));
}

char **
ib_strv_builder_steal (ib_strv_builder_t *b)
{
  char **v = b->v ? b->v : xmalloc (sizeof (char *));
  b->v = NULL;
  b->n = b->cap = 0;
  return v;
}

void
ib_strv_builder_free (ib_strv_builder_t *b)
{
  ib_strv_free (b->v);
  b->v = NULL;
  b->n = b->cap = 0;
}

/* The length of the UTF-8 sequence at s (1 to 4) and its code point, or
 * 0 when s does not start one (a stray byte, an overlong or short form). */
static size_t
utf8_seq (const unsigned char *s, uint32_t *cp)
{
  unsigned c = s[0];
  size_t n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
  if (n == 0)
    return 0;
  uint32_t r = c & (0x7f >> n);
  for (size_t i = 1; i < n; i++)
    {
      if ((s[i] & 0xc0) != 0x80)
        return 0;
      r = (r << 6) | (s[i] & 0x3f);
    }
  if ((n == 3 && (r < 0x800 || (r >= 0xd800 && r <= 0xdfff))) || (n == 4 && (r < 0x10000 || r > 0x10ffff)))
    return 0;
  *cp = r;
  return n;
}

char *
ib_str_printable (const char *s, bool keep_nl)
{
  if (s == NULL)
    return NULL;
  char *c = xmalloc (strlen (s) + 1), *o = c;
  for (const unsigned char *q = (const unsigned char *) s; *q;)
    {
      uint32_t cp = 0;
      size_t n = *q < 0x80 ? 1 : utf8_seq (q, &cp);
      if (*q < 0x80)
        *o++ = ((*q < 0x20 && !(keep_nl && *q == '\n')) || *q == 0x7f) ? '?' : (char) *q;
      else if (n == 0) /* a stray byte: a C1 control in an 8-bit terminal when 0x80-0x9f */
        *o++ = *q <= 0x9f ? '?' : (char) *q, n = 1;
      else if (cp <= 0x9f) /* U+0080-U+009F, the C1 controls (CSI, OSC, ...) */
        *o++ = '?';
      else
        memcpy (o, q, n), o += n;
      q += n;
    }
  *o = '\0';
  return c;
}

char *
ib_str_utf8 (const char *s)
{
  if (s == NULL)
    return NULL;
  ib_buf_t b = { 0 };
  for (const unsigned char *q = (const unsigned char *) s; *q;)
    {
      uint32_t cp;
      size_t n = *q < 0x80 ? 1 : utf8_seq (q, &cp);
      if (n == 0)
        ib_buf_puts (&b, "\xef\xbf\xbd"), n = 1;
      else
        ib_buf_append (&b, q, n);
      q += n;
    }
  return ib_buf_steal (&b);
}

int
ib_parse_id (const char *s, uint32_t *out)
{
  uint64_t v = 0;
  if (s == NULL || *s == '\0')
    return -1;
  for (const char *p = s; *p; p++)
    {
      if (*p < '0' || *p > '9')
        return -1;
      v = v * 10 + (uint64_t) (*p - '0');
      if (v > 4294967294ULL)
        return -1;
    }
  *out = (uint32_t) v;
  return 0;
}

void
ib_strv_free (char **v)
{
  for (size_t i = 0; v && v[i]; i++)
    free (v[i]);
  free (v);
}

char **
ib_strv_dup (char *const *v)
{
  size_t n = ib_strv_len (v);
  char **r = xmalloc ((n + 1) * sizeof (char *));
  for (size_t i = 0; i < n; i++)
    r[i] = xstrdup (v[i]);
  return r;
}

bool
ib_str_has_prefix (const char *s, const char *prefix)
{
  return strncmp (s, prefix, strlen (prefix)) == 0;
}

bool
ib_str_has_suffix (const char *s, const char *suffix)
{
  size_t a = strlen (s), b = strlen (suffix);
  return a >= b && strcmp (s + a - b, suffix) == 0;
}

char *
ib_path_join (const char *a, const char *b)
{
  size_t la = strlen (a);
  while (la > 1 && a[la - 1] == '/')
    la--;
  while (*b == '/')
    b++;
  if (*b == '\0')
    return xstrndup (a, la);
  if (la == 1 && a[0] == '/')
    return xasprintf ("/%s", b);
  return xasprintf ("%.*s/%s", (int) la, a, b);
}

char *
ib_path_clean_abs (const char *path)
{
  size_t n = strlen (path);
  char *out = xmalloc (n + 2);
  size_t o = 0;
  const char *p = path;
  while (*p)
    {
      while (*p == '/')
        p++;
      const char *e = strchrnul (p, '/');
      size_t len = (size_t) (e - p);
      if (len == 0 || (len == 1 && p[0] == '.'))
        ;
      else if (len == 2 && p[0] == '.' && p[1] == '.')
        {
          while (o > 0 && out[o - 1] != '/')
            o--;
          if (o > 0)
            o--; /* the slash before it */
        }
      else
        {
          out[o++] = '/';
          memcpy (out + o, p, len);
          o += len;
        }
      p = e;
    }
  if (o == 0)
    out[o++] = '/';
  out[o] = '\0';
  return out;
}

int
ib_mkdir_p (const char *path, mode_t mode, ib_error_t *err)
{
  cleanup_free char *p = xstrdup (path);
  for (char *s = p + 1; *s; s++)
    {
      if (*s != '/')
        continue;
      *s = '\0';
      if (mkdir (p, mode) < 0 && errno != EEXIST)
        return ib_error_sys (err, errno, "create directory %s", p);
      *s = '/';
    }
  if (mkdir (p, mode) < 0 && errno != EEXIST)
    return ib_error_sys (err, errno, "create directory %s", p);
  struct stat st;
  if (stat (p, &st) < 0 || !S_ISDIR (st.st_mode))
    return ib_error_set (err, ENOTDIR, "create directory %s: exists and is not a directory", p);
  return 0;
}

int
ib_read_file (const char *path, char **data, size_t *len, ib_error_t *err)
{
  return ib_read_file_max (path, SIZE_MAX - 1, NULL, data, len, err);
}

int
ib_read_file_max (const char *path, size_t max, const char *what, char **data, size_t *len,
                  ib_error_t *err)
{
  cleanup_close int fd = open (path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return ib_error_sys (err, errno, "open %s", path);
  ib_buf_t b = { 0 };
  char tmp[65536];
  for (;;)
    {
      if (b.len > max)
        {
          ib_buf_free (&b);
          return ib_error_set (err, EFBIG, "read %s%s%s: more than %zu bytes", what ? what : "",
                               what ? " " : "", path, max);
        }
      size_t want = sizeof tmp;
      if (max - b.len + 1 < want)
        want = max - b.len + 1;
      ssize_t n = read (fd, tmp, want);
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        {
          int e = errno;
          ib_buf_free (&b);
          return ib_error_sys (err, e, "read %s", path);
        }
      if (n == 0)
        break;
      ib_buf_append (&b, tmp, (size_t) n);
    }
  if (len)
    *len = b.len;
  *data = ib_buf_steal (&b);
  return 0;
}

int
ib_write_all (int fd, const void *data, size_t len, const char *shown, ib_error_t *err)
{
  const char *p = data;
  while (len > 0)
    {
      ssize_t n = write (fd, p, len);
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        return ib_error_sys (err, errno, "write %s", shown);
      p += n;
      len -= (size_t) n;
    }
  return 0;
}

int
ib_write_pipe (int fd, const void *data, size_t len, const char *shown, ib_error_t *err)
{
  sigset_t pipe_set, old;
  sigemptyset (&pipe_set);
  sigaddset (&pipe_set, SIGPIPE);
  pthread_sigmask (SIG_BLOCK, &pipe_set, &old);
  int r = ib_write_all (fd, data, len, shown, err);
  if (r < 0)
    {
      struct timespec zero = { 0, 0 };
      while (sigtimedwait (&pipe_set, NULL, &zero) > 0)
        ;
    }
  pthread_sigmask (SIG_SETMASK, &old, NULL);
  return r;
}

static bool
is_write_side (int e)
{
  return e == ENOSPC || e == EDQUOT || e == EFBIG || e == EROFS || e == EIO;
}

int
ib_copy_fd_data_to (int in, int out, const char *src_shown, const char *dst_shown,
                    ib_error_t *err)
{
  if (ioctl (out, FICLONE, in) == 0)
    return 0;
  for (;;)
    {
      ssize_t n = copy_file_range (in, NULL, out, NULL, 1 << 30, 0);
      if (n > 0 || (n < 0 && errno == EINTR))
        continue;
      if (n == 0)
        return 0;
      if (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP
          || errno == EBADF || errno == EPERM)
        break; /* not for these files: plain copy of what is left */
      if (dst_shown == NULL)
        return ib_error_sys (err, errno, "copy %s", src_shown);
      if (is_write_side (errno))
        return ib_error_sys (err, errno, "write %s", dst_shown);
      return ib_error_sys (err, errno, "copy %s to %s", src_shown, dst_shown);
    }
  cleanup_free char *buf = xmalloc (1 << 17);
  for (;;)
    {
      ssize_t n = read (in, buf, 1 << 17);
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        return ib_error_sys (err, errno, "read %s", src_shown);
      if (n == 0)
        return 0;
      if (ib_write_all (out, buf, (size_t) n, dst_shown ? dst_shown : src_shown, err) < 0)
        return -1;
    }
}

int
ib_copy_fd_data (int in, int out, const char *shown, ib_error_t *err)
{
  return ib_copy_fd_data_to (in, out, shown, NULL, err);
}

int
ib_fsync_dir (const char *dir, ib_error_t *err)
{
  cleanup_close int fd = open (dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return ib_error_sys (err, errno, "open directory %s", dir);
  if (fsync (fd) < 0 && errno != EINVAL)
    return ib_error_sys (err, errno, "fsync %s", dir);
  return 0;
}

int
ib_write_file_atomic (const char *path, const void *data, size_t len, mode_t mode, ib_error_t *err)
{
  cleanup_free char *dir = xstrdup (path);
  char *slash = strrchr (dir, '/');
  if (slash == NULL)
    {
      free (dir);
      dir = xstrdup (".");
    }
  else if (slash == dir)
    slash[1] = '\0';
  else
    *slash = '\0';
  cleanup_free char *tmp = xasprintf ("%s.tmp-XXXXXX", path);
  int fd = mkostemp (tmp, O_CLOEXEC);
  if (fd < 0)
    return ib_error_sys (err, errno, "create %s", tmp);
  if (ib_write_all (fd, data, len, path, err) < 0)
    {
      close (fd);
      unlink (tmp);
      return -1;
    }
  if (fchmod (fd, mode) < 0 || fsync (fd) < 0)
    {
      int e = errno;
      close (fd);
      unlink (tmp);
      return ib_error_sys (err, e, "write %s", path);
    }
  if (close (fd) < 0 || rename (tmp, path) < 0)
    {
      int e = errno;
      unlink (tmp);
      return ib_error_sys (err, e, "write %s", path);
    }
  return ib_fsync_dir (dir, err);
}

static int
rm_rf_at (int parent, const char *name, const char *shown, ib_error_t *err)
{
  if (unlinkat (parent, name, 0) == 0 || errno == ENOENT)
    return 0;
  if (errno != EISDIR && errno != EPERM)
    return ib_error_sys (err, errno, "remove %s", shown);
  int fd = openat (parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == EACCES)
    {
      fchmodat (parent, name, 0700, 0);
      fd = openat (parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
  if (fd < 0)
    return ib_error_sys (err, errno, "open %s", shown);
  fchmod (fd, 0700);
  DIR *d = fdopendir (fd);
  if (d == NULL)
    {
      close (fd);
      return ib_error_sys (err, errno, "open %s", shown);
    }
  struct dirent *de;
  int ret = 0;
  while ((de = readdir (d)) != NULL)
    {
      if (strcmp (de->d_name, ".") == 0 || strcmp (de->d_name, "..") == 0)
        continue;
      cleanup_free char *sub = xasprintf ("%s/%s", shown, de->d_name);
      if (rm_rf_at (dirfd (d), de->d_name, sub, err) < 0)
        {
          ret = -1;
          break;
        }
    }
  closedir (d);
  if (ret < 0)
    return ret;
  if (unlinkat (parent, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
    return ib_error_sys (err, errno, "remove %s", shown);
  return 0;
}

int
ib_rm_rf (const char *path, ib_error_t *err)
{
  return rm_rf_at (AT_FDCWD, path, path, err);
}

static ib_log_sink_fn log_sink;
static void *log_sink_ud;

void
ib_log_set_sink (ib_log_sink_fn sink, void *ud)
{
  __atomic_store_n (&log_sink_ud, ud, __ATOMIC_RELEASE);
  __atomic_store_n (&log_sink, sink, __ATOMIC_RELEASE);
}

void
ib_log_get_sink (ib_log_sink_fn *sink, void **ud)
{
  *sink = __atomic_load_n (&log_sink, __ATOMIC_ACQUIRE);
  *ud = __atomic_load_n (&log_sink_ud, __ATOMIC_ACQUIRE);
}

static void
log_va (const char *level, const char *prefix, const char *fmt, va_list ap)
{
  ib_buf_t b = { 0 };
  ib_buf_puts (&b, prefix);
  char *s = NULL;
  if (vasprintf (&s, fmt, ap) < 0)
    abort ();
  /* log lines quote recipes, references, paths: never a control character
   * (an escape sequence) to the terminal, newlines excepted */
  char *shown = ib_str_printable (s, true);
  free (s);
  ib_buf_puts (&b, shown);
  free (shown);
  ib_log_sink_fn sink;
  void *ud;
  ib_log_get_sink (&sink, &ud);
  if (sink)
    sink (level, b.data, ud);
  else
    {
      ib_buf_puts (&b, "\n");
      fwrite (b.data, 1, b.len, stderr); /* one write: lines from threads don't interleave */
    }
  ib_buf_free (&b);
}

void
ib_info (const char *fmt, ...)
{
  if (ib_verbosity < 1)
    return;
  va_list ap;
  va_start (ap, fmt);
  log_va ("info", "", fmt, ap);
  va_end (ap);
}

void
ib_warn (const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  log_va ("warning", "imgbuild: warning: ", fmt, ap);
  va_end (ap);
}

void
ib_debug (const char *fmt, ...)
{
  if (ib_verbosity < 2)
    return;
  va_list ap;
  va_start (ap, fmt);
  log_va ("debug", "imgbuild: debug: ", fmt, ap);
  va_end (ap);
}

int64_t
ib_source_date_epoch (void)
{
  const char *s = getenv ("SOURCE_DATE_EPOCH");
  if (s == NULL || *s == '\0')
    return -1;
  char *end = NULL;
  errno = 0;
  long long v = strtoll (s, &end, 10);
  if (errno || *end != '\0' || v < 0)
    return -1;
  return (int64_t) v;
}

void
ib_human_size (int64_t n, char out[24])
{
  if (n < 1000)
    snprintf (out, 24, "%lldB", (long long) n);
  else if (n < 1000 * 1000)
    snprintf (out, 24, "%.1fkB", (double) n / 1e3);
  else if (n < 1000LL * 1000 * 1000)
    snprintf (out, 24, "%.1fMB", (double) n / 1e6);
  else
    snprintf (out, 24, "%.2fGB", (double) n / 1e9);
}
