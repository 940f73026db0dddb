/* builder/engine/mountspec.c — see mountspec.h. */
#include "builder/engine/mountspec.h"
#include "common/util.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void
ib_mount_spec_clear (ib_mount_spec_t *m)
{
  free (m->target);
  free (m->source);
  free (m->from);
  free (m->id);
  free (m->sharing);
  free (m->size);
  free (m->env);
  memset (m, 0, sizeof *m);
}

static int
parse_bool (const char *key, const char *v, bool *out, const char *value, ib_error_t *err)
{
  if (v == NULL || strcasecmp (v, "true") == 0 || strcmp (v, "1") == 0)
    *out = true;
  else if (strcasecmp (v, "false") == 0 || strcmp (v, "0") == 0)
    *out = false;
  else
    return ib_error_set (err, EINVAL, "--mount=%s: %s takes true or false, got '%s'", value, key,
                         v);
  return 0;
}

static int
parse_id_number (const char *key, const char *v, unsigned long max, int base, unsigned long *out,
                 const char *value, ib_error_t *err)
{
  char *end = NULL;
  errno = 0;
  unsigned long n = v && *v ? strtoul (v, &end, base) : 0;
  if (v == NULL || *v == '\0' || *end || errno || n > max)
    return ib_error_set (err, EINVAL, "--mount=%s: bad %s '%s'", value, key, v ? v : "");
  *out = n;
  return 0;
}

int
ib_tmpfs_size_parse (const char *v, char **norm, ib_error_t *err)
{
  uint64_t n = 0;
  size_t i = 0;

  *norm = NULL;
  if (v == NULL || v[0] < '0' || v[0] > '9')
    return ib_error_set (err, EINVAL, "bad size '%s' (bytes, or k, m, g, t, or N%%)", v ? v : "");
  for (; v[i] >= '0' && v[i] <= '9'; i++)
    {
      if (n > (UINT64_MAX - 9) / 10)
        return ib_error_set (err, ERANGE, "size '%s' is out of range (1 byte to 1 PiB, or 1%% to "
                             "100%%)", v);
      n = n * 10 + (uint64_t) (v[i] - '0');
    }
  const char *unit = v + i;
  if (strcmp (unit, "%") == 0)
    {
      if (n < 1 || n > 100)
        return ib_error_set (err, ERANGE, "size '%s' is out of range (1%% to 100%% of memory)", v);
      *norm = xstrdup (v);
      return 0;
    }
  static const char units[] = "kmgt";
  uint64_t mult = 1;
  if (unit[0] && unit[1] == '\0' && strchr (units, unit[0] | 0x20))
    mult = (uint64_t) 1 << (10 * (1 + (strchr (units, unit[0] | 0x20) - units)));
  else if (unit[0])
    return ib_error_set (err, EINVAL, "bad size '%s' (bytes, or k, m, g, t, or N%%)", v);
  if (n == 0 || n > IB_TMPFS_SIZE_MAX / mult)
    return ib_error_set (err, ERANGE, "size '%s' is out of range (1 byte to 1 PiB, or 1%% to 100%%)",
                         v);
  *norm = xstrdup (v);
  return 0;
}

/* type=secret and type=ssh: BuildKit's checks and defaults
 * (dockerfile2llb: dispatchSecret, dispatchSSH). */
static int
secret_defaults (ib_mount_spec_t *m, const char *value, ib_error_t *err)
{
  const char *what = m->type == IB_MSPEC_SECRET ? "secret" : "ssh";
  if (m->from)
    return ib_error_set (err, EINVAL, "--mount=%s: a %s mount takes no from=", value, what);
  if (m->sharing)
    return ib_error_set (err, EINVAL, "--mount=%s: sharing= is for type=cache", value);
  if (m->size)
    return ib_error_set (err, EINVAL, "--mount=%s: size= is for type=tmpfs", value);
  if (m->rw)
    return ib_error_set (err, EINVAL, "--mount=%s: a %s mount is read-only", value, what);
  if (m->type == IB_MSPEC_SSH)
    {
      if (m->source)
        return ib_error_set (err, EINVAL, "--mount=%s: an ssh mount takes no source=", value);
      if (m->id == NULL)
        m->id = xstrdup ("default");
      return 0;
    }
  if (m->source && m->id)
    return ib_error_set (err, EINVAL, "--mount=%s: give id= or source=, not both", value);
  if (m->source)
    {
      m->id = m->source;
      m->source = NULL;
    }
  if (m->id == NULL && m->target == NULL)
    return ib_error_set (err, EINVAL, "--mount=%s: a secret mount needs id= or target=", value);
  if (m->id == NULL)
    {
      const char *slash = strrchr (m->target, '/');
      m->id = xstrdup (slash ? slash + 1 : m->target);
      if (*m->id == '\0')
        return ib_error_set (err, EINVAL, "--mount=%s: no secret id in target=%s (give id=)", value,
                             m->target);
    }
  if (m->target == NULL && m->env == NULL)
    {
      const char *slash = strrchr (m->id, '/');
      m->target = xasprintf ("/run/secrets/%s", slash ? slash + 1 : m->id);
    }
  return 0;
}

int
ib_mount_spec_parse (const char *value, ib_mount_spec_t *out, ib_error_t *err)
{
  ib_mount_spec_t m = { .mode = 0755 };
  cleanup_free char *copy = xstrdup (value);
  char *save = NULL;
  const char *type = "bind";
  bool saw_type = false, saw_mode = false, saw_required = false;
  for (char *tok = strtok_r (copy, ",", &save); tok; tok = strtok_r (NULL, ",", &save))
    {
      char *eq = strchr (tok, '=');
      const char *v = NULL;
      if (eq)
        {
          *eq = '\0';
          v = eq + 1;
        }
      for (char *c = tok; *c; c++)
        *c = (char) (*c >= 'A' && *c <= 'Z' ? *c + 32 : *c);
      bool b;
      unsigned long n;
      if (strcmp (tok, "type") == 0 && v)
        {
          type = v;
          saw_type = true;
        }
      else if ((strcmp (tok, "target") == 0 || strcmp (tok, "dst") == 0
                || strcmp (tok, "destination") == 0)
               && v && *v)
        {
          free (m.target);
          m.target = xstrdup (v); /* relative: the caller's working directory */
        }
      else if ((strcmp (tok, "source") == 0 || strcmp (tok, "src") == 0) && v)
        {
          free (m.source);
          m.source = xstrdup (v);
        }
      else if (strcmp (tok, "from") == 0 && v && *v)
        {
          free (m.from);
          m.from = xstrdup (v);
        }
      else if (strcmp (tok, "rw") == 0 || strcmp (tok, "readwrite") == 0)
        {
          if (parse_bool (tok, v, &b, value, err) < 0)
            goto fail;
          m.rw = b;
          m.readonly = !b;
        }
      else if (strcmp (tok, "ro") == 0 || strcmp (tok, "readonly") == 0)
        {
          if (parse_bool (tok, v, &b, value, err) < 0)
            goto fail;
          m.readonly = b;
          m.rw = !b;
        }
      else if (strcmp (tok, "z") == 0 && v == NULL)
        m.relabel = true; /* z and Z (buildah's, podman's): SELinux relabeling */
      else if (strcmp (tok, "id") == 0 && v && *v)
        {
          free (m.id);
          m.id = xstrdup (v);
        }
      else if (strcmp (tok, "sharing") == 0 && v)
        {
          if (strcmp (v, "shared") && strcmp (v, "private") && strcmp (v, "locked"))
            {
              ib_error_set (err, EINVAL,
                            "--mount=%s: sharing takes shared, private or locked, got '%s'",
                            value, v);
              goto fail;
            }
          free (m.sharing);
          m.sharing = xstrdup (v);
        }
      else if (strcmp (tok, "mode") == 0)
        {
          if (parse_id_number (tok, v, 07777, 8, &n, value, err) < 0)
            goto fail;
          m.mode = (mode_t) n;
          saw_mode = true;
        }
      else if (strcmp (tok, "uid") == 0 || strcmp (tok, "gid") == 0)
        {
          if (parse_id_number (tok, v, 4294967294UL, 10, &n, value, err) < 0)
            goto fail;
          if (tok[0] == 'u')
            m.uid = (uid_t) n;
          else
            m.gid = (gid_t) n;
        }
      else if (strcmp (tok, "required") == 0)
        {
          if (parse_bool (tok, v, &b, value, err) < 0)
            goto fail;
          m.required = b;
          saw_required = true;
        }
      else if (strcmp (tok, "env") == 0 && v && *v)
        {
          free (m.env);
          m.env = xstrdup (v);
        }
      else if (strcmp (tok, "size") == 0 && v && *v)
        {
          char *sz = NULL;
          if (ib_tmpfs_size_parse (v, &sz, err) < 0)
            {
              ib_error_prefix (err, "--mount=%s", value);
              goto fail;
            }
          free (m.size);
          m.size = sz;
        }
      else
        {
          ib_error_set (err, EINVAL, "--mount=%s: unknown option '%s%s%s'", value, tok,
                        v ? "=" : "", v ? v : "");
          goto fail;
        }
    }
  if (saw_type && strcmp (type, "bind") == 0)
    m.type = IB_MSPEC_BIND;
  else if (strcmp (type, "bind") == 0)
    m.type = IB_MSPEC_BIND;
  else if (strcmp (type, "cache") == 0)
    m.type = IB_MSPEC_CACHE;
  else if (strcmp (type, "tmpfs") == 0)
    m.type = IB_MSPEC_TMPFS;
  else if (strcmp (type, "secret") == 0)
    m.type = IB_MSPEC_SECRET;
  else if (strcmp (type, "ssh") == 0)
    m.type = IB_MSPEC_SSH;
  else
    {
      ib_error_set (err, EINVAL,
                    "--mount=%s: unknown mount type '%s' (bind, cache, tmpfs, secret, ssh)", value,
                    type);
      goto fail;
    }
  if (m.env && m.type != IB_MSPEC_SECRET)
    {
      ib_error_set (err, EINVAL, "--mount=%s: env= is for type=secret", value);
      goto fail;
    }
  if (saw_required && m.type != IB_MSPEC_SECRET && m.type != IB_MSPEC_SSH)
    {
      ib_error_set (err, EINVAL, "--mount=%s: required= is for type=secret and type=ssh", value);
      goto fail;
    }
  if (m.type == IB_MSPEC_SECRET || m.type == IB_MSPEC_SSH)
    {
      if (secret_defaults (&m, value, err) < 0)
        goto fail;
      if (!saw_mode)
        m.mode = m.type == IB_MSPEC_SECRET ? 0400 : 0600;
      *out = m;
      return 0;
    }
  if (m.target == NULL)
    {
      ib_error_set (err, EINVAL, "--mount=%s: target= is missing", value);
      goto fail;
    }
  if (m.type == IB_MSPEC_CACHE && m.source && !m.from)
    {
      ib_error_set (err, EINVAL, "--mount=%s: a cache mount's source= is a path in from=, "
                    "which is missing", value);
      goto fail;
    }
  if (m.type == IB_MSPEC_TMPFS && (m.from || m.source))
    {
      ib_error_set (err, EINVAL, "--mount=%s: from= and source= are for type=bind and type=cache",
                    value);
      goto fail;
    }
  if (m.type != IB_MSPEC_TMPFS && m.size)
    {
      ib_error_set (err, EINVAL, "--mount=%s: size= is for type=tmpfs", value);
      goto fail;
    }
  *out = m;
  return 0;
fail:
  ib_mount_spec_clear (&m);
  return -1;
}

int
ib_mount_spec_parse_volume (const char *value, ib_mount_spec_t *out, ib_error_t *err)
{
  cleanup_free char *copy = xstrdup (value);
  char *dst = strchr (copy, ':');
  if (dst == NULL || dst == copy || dst[1] == '\0')
    return ib_error_set (err, EINVAL, "-v %s: expected SRC:DST[:ro|rw]", value);
  *dst++ = '\0';
  char *opt = strchr (dst, ':');
  bool ro = false, relabel = false;
  if (opt)
    {
      *opt++ = '\0';
      char *save = NULL;
      for (char *o = strtok_r (opt, ",", &save); o; o = strtok_r (NULL, ",", &save))
        if (strcmp (o, "ro") == 0)
          ro = true;
        else if (strcmp (o, "z") == 0 || strcmp (o, "Z") == 0)
          relabel = true;
        else if (strcmp (o, "rw") != 0)
          return ib_error_set (err, EINVAL, "-v %s: options are ro, rw, z or Z, got '%s'", value,
                               o);
    }
  if (copy[0] != '/' && copy[0] != '.')
    return ib_error_set (err, EINVAL,
                         "-v %s: the source must be a host path (absolute or ./relative); named "
                         "volumes do not exist in imgbuild",
                         value);
  if (dst[0] != '/')
    return ib_error_set (err, EINVAL, "-v %s: the target must be absolute", value);
  *out = (ib_mount_spec_t){ .type = IB_MSPEC_BIND, .source = xstrdup (copy),
                            .target = xstrdup (dst), .readonly = ro, .rw = !ro, .mode = 0755,
                            .relabel = relabel };
  return 0;
}

int
ib_mount_spec_parse_tmpfs (const char *value, ib_mount_spec_t *out, ib_error_t *err)
{
  cleanup_free char *copy = xstrdup (value);
  char *opt = strchr (copy, ':');
  if (opt)
    *opt++ = '\0';
  if (copy[0] != '/')
    return ib_error_set (err, EINVAL, "--tmpfs %s: the target must be absolute", value);
  char *size = NULL;
  if (opt)
    {
      if (!ib_str_has_prefix (opt, "size=") || opt[5] == '\0')
        return ib_error_set (err, EINVAL, "--tmpfs %s: the only option is size=N", value);
      if (ib_tmpfs_size_parse (opt + 5, &size, err) < 0)
        return ib_error_prefix (err, "--tmpfs %s", value);
    }
  *out = (ib_mount_spec_t){ .type = IB_MSPEC_TMPFS, .target = xstrdup (copy),
                            .size = size, .mode = 0755 };
  return 0;
}
