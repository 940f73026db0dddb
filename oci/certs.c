/* oci/certs.c — per-registry TLS files (certs.d convention); see oci/certs.h. */
#include "oci/certs.h"
#include "common/util.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void
ib_certs_clear (ib_certs_t *c)
{
  if (c == NULL)
    return;
  free (c->dir);
  ib_strv_free (c->ca_files);
  free (c->client_cert);
  free (c->client_key);
  memset (c, 0, sizeof *c);
}

static int
cmp_str (const void *a, const void *b)
{
  return strcmp (*(char *const *) a, *(char *const *) b);
}

static bool
is_dir (const char *p)
{
  struct stat st;
  return stat (p, &st) == 0 && S_ISDIR (st.st_mode);
}

/* Sorted names in `dir` ending in `suffix`. */
static int
list_suffix (const char *dir, char ***names, ib_error_t *err)
{
  *names = NULL;
  DIR *d = opendir (dir);
  if (d == NULL)
    return ib_error_sys (err, errno, "certificates directory %s", dir);
  struct dirent *de;
  while ((de = readdir (d)))
    {
      const char *n = de->d_name;
      if (n[0] == '.')
        continue;
      if (ib_str_has_suffix (n, ".crt") || ib_str_has_suffix (n, ".cert")
          || ib_str_has_suffix (n, ".key"))
        ib_strv_push (names, n);
    }
  closedir (d);
  size_t n = ib_strv_len (*names);
  if (n > 1)
    qsort (*names, n, sizeof **names, cmp_str);
  return 0;
}

static bool
strv_has (char *const *v, const char *s)
{
  for (size_t i = 0; v && v[i]; i++)
    if (strcmp (v[i], s) == 0)
      return true;
  return false;
}

static int
read_dir (const char *dir, ib_certs_t *out, ib_error_t *err)
{
  cleanup_strv char **names = NULL;
  if (list_suffix (dir, &names, err) < 0)
    return -1;
  out->dir = xstrdup (dir);
  for (size_t i = 0; names && names[i]; i++)
    {
      const char *n = names[i];
      size_t len = strlen (n);
      if (ib_str_has_suffix (n, ".crt"))
        {
          cleanup_free char *p = ib_path_join (dir, n);
          ib_strv_push (&out->ca_files, p);
        }
      else if (ib_str_has_suffix (n, ".cert"))
        {
          cleanup_free char *key = xasprintf ("%.*s.key", (int) (len - 5), n);
          if (!strv_has (names, key))
            return ib_error_set (err, EINVAL, "client certificate %s/%s has no key %s/%s", dir, n,
                                 dir, key);
          if (out->client_cert == NULL)
            {
              out->client_cert = ib_path_join (dir, n);
              out->client_key = ib_path_join (dir, key);
            }
        }
      else
        {
          cleanup_free char *cert = xasprintf ("%.*s.cert", (int) (len - 4), n);
          if (!strv_has (names, cert))
            return ib_error_set (err, EINVAL, "client key %s/%s has no certificate %s/%s", dir, n,
                                 dir, cert);
        }
    }
  return 0;
}

int
ib_certs_find (const char *hostport, const char *cert_dir, const char *const *roots,
               ib_certs_t *out, ib_error_t *err)
{
  memset (out, 0, sizeof *out);
  int r;
  if (cert_dir)
    {
      if (!is_dir (cert_dir))
        return ib_error_set (err, ENOENT, "--cert-dir %s: no such directory", cert_dir);
      r = read_dir (cert_dir, out, err);
    }
  else
    {
      cleanup_strv char **dirs = NULL;
      if (roots)
        for (size_t i = 0; roots[i]; i++)
          ib_strv_push (&dirs, roots[i]);
      else
        {
          const char *xdg = getenv ("XDG_CONFIG_HOME"), *home = getenv ("HOME");
          cleanup_free char *user = NULL;
          if (xdg && *xdg)
            user = xasprintf ("%s/containers/certs.d", xdg);
          else if (home && *home)
            user = xasprintf ("%s/.config/containers/certs.d", home);
          if (user)
            ib_strv_push (&dirs, user);
          ib_strv_push (&dirs, "/etc/containers/certs.d");
          ib_strv_push (&dirs, "/etc/docker/certs.d");
        }
      r = 0;
      for (size_t i = 0; dirs && dirs[i]; i++)
        {
          cleanup_free char *d = ib_path_join (dirs[i], hostport);
          if (is_dir (d))
            {
              r = read_dir (d, out, err);
              break;
            }
        }
    }
  if (r < 0)
    ib_certs_clear (out);
  return r;
}

static int
append_file (ib_buf_t *b, const char *path, ib_error_t *err)
{
  cleanup_free char *data = NULL;
  size_t len = 0;
  if (ib_read_file (path, &data, &len, err) < 0)
    return ib_error_prefix (err, "CA certificate");
  ib_buf_append (b, data, len);
  if (len > 0 && data[len - 1] != '\n')
    ib_buf_puts (b, "\n");
  return 0;
}

int
ib_certs_ca_bundle (const ib_certs_t *c, const char *system_bundle, char **out, size_t *len,
                    ib_error_t *err)
{
  *out = NULL;
  *len = 0;
  if (c == NULL || ib_strv_len (c->ca_files) == 0)
    return 0;
  ib_buf_t b = { 0 };
  if (system_bundle && access (system_bundle, R_OK) == 0)
    {
      ib_error_t e = NULL;
      if (append_file (&b, system_bundle, &e) < 0)
        {
          ib_warn ("%s; using only the registry's own CA certificates", e->msg);
          ib_error_free (&e);
        }
    }
  for (size_t i = 0; c->ca_files[i]; i++)
    if (append_file (&b, c->ca_files[i], err) < 0)
      {
        ib_buf_free (&b);
        return -1;
      }
  *len = b.len;
  *out = ib_buf_steal (&b);
  return 0;
}
