/* oci/ref.c — image references, normalized the way Docker's
 * distribution/reference package does (ParseNormalizedNamed):
 *
 *   reference := name [ ":" tag ] [ "@" digest ]
 *   name      := [ domain "/" ] path-component { "/" path-component }
 *   domain    := host [ ":" port ]   (host: dotted labels or "[ipv6]")
 *
 * The first component is a domain when it contains '.' or ':', is
 * "localhost", or has an uppercase letter (which a path component may not
 * have); otherwise the domain is docker.io and a one-component path gets
 * "library/".  index.docker.io is docker.io. */
#include "oci/ref.h"
#include "common/util.h"
#include "oci/digest.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define NAME_MAX_TOTAL 255 /* distribution/reference NameTotalLengthMax */
#define TAG_MAX 128

static bool
is_lower_alnum (char c)
{
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static bool
is_alnum (char c)
{
  return isascii ((unsigned char) c) && isalnum ((unsigned char) c);
}

/* path-component := [a-z0-9]+ ( ( "." | "_" | "__" | "-"+ ) [a-z0-9]+ )* */
static bool
valid_path_component (const char *s, size_t n)
{
  size_t i = 0;
  if (n == 0 || !is_lower_alnum (s[0]))
    return false;
  while (i < n)
    {
      while (i < n && is_lower_alnum (s[i]))
        i++;
      if (i == n)
        return true;
      /* separator */
      size_t start = i;
      if (s[i] == '.')
        i++;
      else if (s[i] == '_')
        {
          i++;
          if (i < n && s[i] == '_')
            i++;
        }
      else if (s[i] == '-')
        while (i < n && s[i] == '-')
          i++;
      else
        return false;
      if (i == start || i == n || !is_lower_alnum (s[i]))
        return false;
    }
  return true;
}

/* domain-component := [a-zA-Z0-9] | [a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9] */
static bool
valid_host (const char *s, size_t n)
{
  if (n == 0)
    return false;
  if (s[0] == '[')
    {
      /* IPv6 literal: "[" hex and colons "]" */
      if (n < 3 || s[n - 1] != ']')
        return false;
      for (size_t i = 1; i + 1 < n; i++)
        if (!isxdigit ((unsigned char) s[i]) && s[i] != ':')
          return false;
      return true;
    }
  size_t i = 0;
  while (i < n)
    {
      size_t start = i;
      while (i < n && s[i] != '.')
        {
          if (!is_alnum (s[i]) && s[i] != '-')
            return false;
          i++;
        }
      if (i == start || s[start] == '-' || s[i - 1] == '-')
        return false;
      if (i < n)
        {
          i++; /* '.' */
          if (i == n)
            return false;
        }
    }
  return true;
}

static bool
valid_domain (const char *s, size_t n)
{
  /* the port is after the last ':' that follows a closing ']' or any host char */
  const char *close = memchr (s, ']', n);
  const char *from = close ? close : s;
  const char *colon = memchr (from, ':', n - (size_t) (from - s));
  if (s[0] == '[' && close == NULL)
    return false;
  if (colon == NULL)
    return valid_host (s, n);
  size_t hn = (size_t) (colon - s);
  const char *port = colon + 1;
  size_t pn = n - hn - 1;
  if (pn == 0)
    return false;
  for (size_t i = 0; i < pn; i++)
    if (!isdigit ((unsigned char) port[i]))
      return false;
  return valid_host (s, hn);
}

/* tag := [\w][\w.-]{0,127} */
static bool
valid_tag (const char *t)
{
  size_t n = strlen (t);
  if (n == 0 || n > TAG_MAX)
    return false;
  for (size_t i = 0; i < n; i++)
    {
      char c = t[i];
      bool word = is_alnum (c) || c == '_';
      if (!word && (i == 0 || (c != '.' && c != '-')))
        return false;
    }
  return true;
}

static bool
is_64_hex (const char *s)
{
  size_t n = 0;
  for (; s[n]; n++)
    if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f')))
      return false;
  return n == 64;
}

void
ib_ref_free (ib_ref_t *r)
{
  if (r == NULL)
    return;
  free (r->registry);
  free (r->repository);
  free (r->tag);
  free (r->digest);
  memset (r, 0, sizeof *r);
}

bool
ib_ref_names_registry (const char *name)
{
  const char *first = strchr (name, '/');
  if (first == NULL)
    return false;
  size_t n = (size_t) (first - name);
  for (size_t i = 0; i < n; i++)
    if (isupper ((unsigned char) name[i]))
      return true;
  return memchr (name, '.', n) || memchr (name, ':', n)
         || (n == 9 && strncmp (name, "localhost", 9) == 0);
}

int
ib_ref_parse (const char *s, ib_ref_t *out, ib_error_t *err)
{
  memset (out, 0, sizeof *out);
  if (s == NULL || *s == '\0')
    return ib_error_set (err, EINVAL, "invalid reference \"\": empty image name");
  if (is_64_hex (s))
    return ib_error_set (err, EINVAL,
                         "invalid reference \"%s\": a 64-hex-digit string is an image id, "
                         "not a repository name",
                         s);
  for (const char *p = s; *p; p++)
    if (isspace ((unsigned char) *p) || !isprint ((unsigned char) *p))
      return ib_error_set (err, EINVAL, "invalid reference \"%s\": contains whitespace or "
                           "control characters", s);

  cleanup_free char *name = NULL;
  cleanup_free char *tag = NULL;
  cleanup_free char *digest = NULL;

  /* "@digest" */
  const char *at = strchr (s, '@');
  if (at)
    {
      digest = xstrdup (at + 1);
      if (strchr (digest, '@'))
        return ib_error_set (err, EINVAL, "invalid reference \"%s\": more than one '@'", s);
      if (!ib_digest_valid (digest))
        return ib_error_set (err, EINVAL,
                             "invalid reference \"%s\": bad digest \"%s\" (want sha256: and 64 "
                             "lowercase hex digits)",
                             s, digest);
      name = xstrndup (s, (size_t) (at - s));
    }
  else
    name = xstrdup (s);

  /* ":tag" is after the last ':' that follows the last '/' */
  char *slash = strrchr (name, '/');
  char *colon = strrchr (slash ? slash : name, ':');
  if (colon)
    {
      tag = xstrdup (colon + 1);
      *colon = '\0';
      if (!valid_tag (tag))
        return ib_error_set (err, EINVAL,
                             "invalid reference \"%s\": bad tag \"%s\" (want [A-Za-z0-9_] then "
                             "up to 127 of [A-Za-z0-9_.-])",
                             s, tag);
    }
  if (*name == '\0')
    return ib_error_set (err, EINVAL, "invalid reference \"%s\": empty repository name", s);

  /* Split the domain off, as splitDockerDomain does. */
  cleanup_free char *domain = NULL;
  const char *remainder;
  char *first = strchr (name, '/');
  if (ib_ref_names_registry (name))
    {
      domain = xstrndup (name, (size_t) (first - name));
      remainder = first + 1;
      if (!valid_domain (domain, strlen (domain)))
        return ib_error_set (err, EINVAL, "invalid reference \"%s\": bad registry host \"%s\"",
                             s, domain);
      if (strcmp (domain, "index.docker.io") == 0)
        {
          free (domain);
          domain = xstrdup ("docker.io");
        }
    }
  else
    {
      domain = xstrdup ("docker.io");
      remainder = name;
    }

  for (const char *p = remainder; *p; p++)
    if (isupper ((unsigned char) *p))
      return ib_error_set (err, EINVAL,
                           "invalid reference \"%s\": repository name \"%s\" must be lowercase", s,
                           remainder);

  /* Validate every path component. */
  if (*remainder == '\0')
    return ib_error_set (err, EINVAL, "invalid reference \"%s\": empty repository name", s);
  for (const char *p = remainder;;)
    {
      const char *e = strchr (p, '/');
      size_t n = e ? (size_t) (e - p) : strlen (p);
      if (!valid_path_component (p, n))
        return ib_error_set (err, EINVAL,
                             "invalid reference \"%s\": bad repository name component \"%.*s\" "
                             "(want lowercase letters and digits separated by '.', '_', '__' "
                             "or '-')",
                             s, (int) n, p);
      if (e == NULL)
        break;
      p = e + 1;
    }

  char *repository;
  if (strcmp (domain, "docker.io") == 0 && strchr (remainder, '/') == NULL)
    repository = xasprintf ("library/%s", remainder);
  else
    repository = xstrdup (remainder);

  if (strlen (domain) + 1 + strlen (repository) > NAME_MAX_TOTAL)
    {
      free (repository);
      return ib_error_set (err, EINVAL, "invalid reference \"%s\": name longer than %d characters",
                           s, NAME_MAX_TOTAL);
    }

  out->registry = steal_pointer (&domain);
  out->repository = repository;
  out->digest = steal_pointer (&digest);
  if (tag)
    out->tag = steal_pointer (&tag);
  else if (out->digest == NULL)
    out->tag = xstrdup ("latest");
  return 0;
}

char *
ib_ref_string (const ib_ref_t *r)
{
  ib_buf_t b = { 0 };
  ib_buf_printf (&b, "%s/%s", r->registry, r->repository);
  if (r->tag)
    ib_buf_printf (&b, ":%s", r->tag);
  if (r->digest)
    ib_buf_printf (&b, "@%s", r->digest);
  return ib_buf_steal (&b);
}

const char *
ib_ref_api_host (const ib_ref_t *r)
{
  if (strcmp (r->registry, "docker.io") == 0)
    return "registry-1.docker.io";
  return r->registry;
}

bool
ib_ref_host_is_loopback (const char *registry)
{
  const char *end;
  if (registry[0] == '[')
    {
      end = strchr (registry, ']');
      if (end == NULL)
        return false;
      return (size_t) (end - registry) == 4 && strncmp (registry, "[::1", 4) == 0;
    }
  end = strchr (registry, ':');
  size_t n = end ? (size_t) (end - registry) : strlen (registry);
  if (n == 9 && strncmp (registry, "localhost", 9) == 0)
    return true;
  /* 127.0.0.0/8, dotted quad */
  if (n >= 7 && strncmp (registry, "127.", 4) == 0)
    {
      int dots = 0;
      for (size_t i = 0; i < n; i++)
        {
          if (registry[i] == '.')
            dots++;
          else if (!isdigit ((unsigned char) registry[i]))
            return false;
        }
      return dots == 3;
    }
  return false;
}

bool
ib_ref_plain_http (const ib_ref_t *r)
{
  return ib_ref_host_is_loopback (r->registry);
}
