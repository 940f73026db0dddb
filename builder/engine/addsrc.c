#include "builder/engine/addsrc.h"
#include "common/util.h"

#include <archive.h>
#include <archive_entry.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

bool
ib_add_is_archive (const char *path)
{
  struct archive *a = archive_read_new ();
  archive_read_support_filter_all (a);
  archive_read_support_format_tar (a);
  archive_read_support_format_gnutar (a);
  struct archive_entry *e;
  bool yes = archive_read_open_filename (a, path, 1 << 16) == ARCHIVE_OK
             && archive_read_next_header (a, &e) == ARCHIVE_OK;
  archive_read_free (a);
  return yes;
}

int
ib_add_extract (const char *path, const char *dir, ib_error_t *err)
{
  if (ib_mkdir_p (dir, 0755, err) < 0)
    return -1;
  cleanup_close int here = open (".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (here < 0)
    return ib_error_sys (err, errno, "extract %s: open the working directory", path);
  if (chdir (dir) < 0)
    return ib_error_sys (err, errno, "extract %s: enter %s", path, dir);
  struct archive *in = archive_read_new ();
  archive_read_support_filter_all (in);
  archive_read_support_format_tar (in);
  archive_read_support_format_gnutar (in);
  struct archive *out = archive_write_disk_new ();
  int flags = ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_PERM | ARCHIVE_EXTRACT_XATTR
              | ARCHIVE_EXTRACT_SECURE_SYMLINKS | ARCHIVE_EXTRACT_SECURE_NODOTDOT
              | ARCHIVE_EXTRACT_SECURE_NOABSOLUTEPATHS | ARCHIVE_EXTRACT_UNLINK;
  if (geteuid () == 0)
    flags |= ARCHIVE_EXTRACT_OWNER;
  archive_write_disk_set_options (out, flags);
  int ret = -1;
  struct archive_entry *e;
  if (archive_read_open_filename (in, path, 1 << 20) != ARCHIVE_OK)
    {
      ib_error_set (err, EINVAL, "extract %s: %s", path, archive_error_string (in));
      goto out;
    }
  for (;;)
    {
      int r = archive_read_next_header (in, &e);
      if (r == ARCHIVE_EOF)
        break;
      if (r < ARCHIVE_WARN)
        {
          ib_error_set (err, EINVAL, "extract %s: %s", path, archive_error_string (in));
          goto out;
        }
      const char *name = archive_entry_pathname (e);
      mode_t type = archive_entry_filetype (e);
      if (type == AE_IFCHR || type == AE_IFBLK)
        {
          ib_error_set (err, EPERM, "extract %s: %s: device nodes are not extracted", path, name);
          goto out;
        }
      if (archive_write_header (out, e) < ARCHIVE_WARN)
        {
          ib_error_set (err, archive_errno (out) ? archive_errno (out) : EINVAL,
                        "extract %s: %s: %s", path, name ? name : "?",
                        archive_error_string (out));
          goto out;
        }
      const void *buf;
      size_t len;
      la_int64_t off;
      while ((r = archive_read_data_block (in, &buf, &len, &off)) == ARCHIVE_OK)
        if (archive_write_data_block (out, buf, len, off) < ARCHIVE_WARN)
          {
            ib_error_set (err, archive_errno (out) ? archive_errno (out) : EIO,
                          "extract %s: %s: %s", path, name, archive_error_string (out));
            goto out;
          }
      if (r != ARCHIVE_EOF)
        {
          ib_error_set (err, EINVAL, "extract %s: %s: %s", path, name, archive_error_string (in));
          goto out;
        }
      if (archive_write_finish_entry (out) < ARCHIVE_WARN)
        {
          ib_error_set (err, EIO, "extract %s: %s: %s", path, name, archive_error_string (out));
          goto out;
        }
    }
  if (archive_write_close (out) < ARCHIVE_WARN)
    {
      ib_error_set (err, EIO, "extract %s: %s", path, archive_error_string (out));
      goto out;
    }
  ret = 0;
out:
  archive_read_free (in);
  archive_write_free (out);
  if (fchdir (here) < 0 && ret == 0)
    ret = ib_error_sys (err, errno, "extract %s: back to the working directory", path);
  return ret;
}

struct dl
{
  int fd;
  ib_sha256_t *h;
  ib_error_t *err;
  const char *dest;
  bool failed;
};

static size_t
dl_write (char *p, size_t size, size_t n, void *ud)
{
  struct dl *d = ud;
  size_t len = size * n;
  if (ib_write_all (d->fd, p, len, d->dest, d->err) < 0)
    {
      d->failed = true;
      return 0;
    }
  ib_sha256_update (d->h, p, len);
  return len;
}

int
ib_add_download (const char *url, const char *dest, char digest[IB_DIGEST_LEN], time_t *mtime,
                 ib_error_t *err)
{
  if (!ib_str_has_prefix (url, "http://") && !ib_str_has_prefix (url, "https://"))
    return ib_error_set (err, EINVAL, "%s: only http and https URLs are downloaded", url);
  cleanup_close int fd = open (dest, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    return ib_error_sys (err, errno, "create %s", dest);
  CURL *c = curl_easy_init ();
  if (c == NULL)
    return ib_error_set (err, ENOMEM, "download %s: curl_easy_init", url);
  struct dl d = { .fd = fd, .h = ib_sha256_new (), .err = err, .dest = dest };
  char errbuf[CURL_ERROR_SIZE] = "";
  curl_easy_setopt (c, CURLOPT_URL, url);
  curl_easy_setopt (c, CURLOPT_WRITEFUNCTION, dl_write);
  curl_easy_setopt (c, CURLOPT_WRITEDATA, &d);
  curl_easy_setopt (c, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt (c, CURLOPT_MAXREDIRS, 10L);
  curl_easy_setopt (c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt (c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt (c, CURLOPT_FILETIME, 1L);
  curl_easy_setopt (c, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt (c, CURLOPT_USERAGENT, "imgbuild");
  curl_easy_setopt (c, CURLOPT_NOSIGNAL, 1L);
  CURLcode rc = curl_easy_perform (c);
  long status = 0;
  curl_easy_getinfo (c, CURLINFO_RESPONSE_CODE, &status);
  long ft = -1;
  curl_easy_getinfo (c, CURLINFO_FILETIME, &ft);
  curl_easy_cleanup (c);
  int ret = -1;
  if (d.failed)
    goto out;
  if (rc != CURLE_OK)
    {
      ib_error_set (err, EIO, "download %s: %s", url, *errbuf ? errbuf : curl_easy_strerror (rc));
      goto out;
    }
  if (status < 200 || status >= 300)
    {
      ib_error_set (err, EIO, "download %s: HTTP status %ld", url, status);
      goto out;
    }
  if (fsync (fd) < 0)
    {
      ib_error_sys (err, errno, "write %s", dest);
      goto out;
    }
  ib_sha256_final (d.h, digest);
  d.h = NULL;
  *mtime = ft > 0 ? (time_t) ft : 0;
  ret = 0;
out:
  ib_sha256_free (d.h);
  return ret;
}

char *
ib_add_url_basename (const char *url)
{
  const char *p = strstr (url, "://");
  p = p ? p + 3 : url;
  size_t n = strcspn (p, "?#");
  cleanup_free char *path = xstrndup (p, n);
  char *slash = strchr (path, '/'); /* after the host */
  if (slash == NULL)
    return xstrdup ("index.html");
  while (strlen (slash) > 1 && slash[strlen (slash) - 1] == '/')
    slash[strlen (slash) - 1] = '\0';
  const char *base = strrchr (slash, '/') + 1;
  return xstrdup (*base ? base : "index.html");
}
