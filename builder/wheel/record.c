/* builder/wheel/record.c — opening a wheel and verifying it (PEP 427):
 * the file name and its compressed tag sets, the zip read once with
 * libarchive (every member hashed, ELF objects and .dist-info extracted,
 * names checked before anything is written), RECORD's digests and sizes,
 * the .dist-info directory's WHEEL and METADATA.  See wheel.h.
 */
#include "builder/wheel/wheel-int.h"
#include "rootfs/unpack.h"
#include "common/util.h"

#include <archive.h>
#include <archive_entry.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- file names (PEP 427) ------------------------------------------------ */

static bool
valid_component (const char *s, const char *extra)
{
  if (!*s)
    return false;
  for (; *s; s++)
    if (!isalnum ((unsigned char) *s) && *s != '_' && *s != '.' && !strchr (extra, *s))
      return false;
  return true;
}

int
ib_wheel_parse_name (const char *filename, ib_wheel_name_t *out, ib_error_t *err)
{
  memset (out, 0, sizeof *out);
  if (!ib_str_has_suffix (filename, ".whl") || strlen (filename) <= 4)
    return ib_error_set (err, EINVAL, "wheel %s: the file name does not end in .whl", filename);
  cleanup_free char *stem = xstrndup (filename, strlen (filename) - 4);
  char *parts[7];
  size_t n = 0;
  char *save = NULL;
  for (char *p = strtok_r (stem, "-", &save); p; p = strtok_r (NULL, "-", &save))
    {
      if (n == 6)
        return ib_error_set (err, EINVAL,
                             "wheel %s: the file name has more than 6 dash-separated parts "
                             "(PEP 427: name-version[-build]-python-abi-platform.whl)",
                             filename);
      parts[n++] = p;
    }
  if (n < 5)
    return ib_error_set (err, EINVAL,
                         "wheel %s: the file name has %zu dash-separated parts, expected 5 or 6 "
                         "(PEP 427: name-version[-build]-python-abi-platform.whl)",
                         filename, n);
  /* a name ending or starting in '-', or "--", leaves an empty part that
   * strtok_r skips: compare lengths to catch it */
  size_t total = 0;
  for (size_t i = 0; i < n; i++)
    total += strlen (parts[i]) + 1;
  if (total - 1 != strlen (filename) - 4)
    return ib_error_set (err, EINVAL, "wheel %s: the file name has an empty part", filename);
  const char *what[] = { "distribution", "version", "build tag", "python tag", "abi tag",
                         "platform tag" };
  for (size_t i = 0; i < n; i++)
    {
      size_t role = n == 5 && i >= 2 ? i + 1 : i;
      if (!valid_component (parts[i], role == 1 ? "+!" : ""))
        return ib_error_set (err, EINVAL, "wheel %s: invalid %s '%s'", filename, what[role],
                             parts[i]);
      if (role == 2 && !isdigit ((unsigned char) parts[i][0]))
        return ib_error_set (err, EINVAL,
                             "wheel %s: build tag '%s' must start with a digit (PEP 427)",
                             filename, parts[i]);
    }
  out->distribution = xstrdup (parts[0]);
  out->version = xstrdup (parts[1]);
  out->build = n == 6 ? xstrdup (parts[2]) : NULL;
  out->python = xstrdup (parts[n - 3]);
  out->abi = xstrdup (parts[n - 2]);
  out->platform = xstrdup (parts[n - 1]);
  return 0;
}

void
ib_wheel_name_clear (ib_wheel_name_t *n)
{
  free (n->distribution);
  free (n->version);
  free (n->build);
  free (n->python);
  free (n->abi);
  free (n->platform);
  memset (n, 0, sizeof *n);
}

/* The expanded tag triples of a name: "py-abi-plat" for each combination. */
static char **
expand_tags (const char *python, const char *abi, const char *platform)
{
  char **out = NULL;
  cleanup_free char *p = xstrdup (python);
  char *s1 = NULL;
  for (char *a = strtok_r (p, ".", &s1); a; a = strtok_r (NULL, ".", &s1))
    {
      cleanup_free char *b = xstrdup (abi);
      char *s2 = NULL;
      for (char *x = strtok_r (b, ".", &s2); x; x = strtok_r (NULL, ".", &s2))
        {
          cleanup_free char *c = xstrdup (platform);
          char *s3 = NULL;
          for (char *y = strtok_r (c, ".", &s3); y; y = strtok_r (NULL, ".", &s3))
            {
              cleanup_free char *t = xasprintf ("%s-%s-%s", a, x, y);
              ibw_strv_add_unique (&out, t);
            }
        }
    }
  return out;
}

/* ---- opening and verifying ----------------------------------------------- */

static void
b64url (const unsigned char *d, size_t n, char **out)
{
  char *b = xmalloc (4 * ((n + 2) / 3) + 1);
  EVP_EncodeBlock ((unsigned char *) b, d, (int) n);
  for (char *p = b; *p; p++)
    {
      if (*p == '+')
        *p = '-';
      else if (*p == '/')
        *p = '_';
      else if (*p == '=')
        {
          *p = '\0';
          break;
        }
    }
  *out = b;
}

int
ibw_digest_file (const char *path, const EVP_MD *md, unsigned char *d, unsigned int *dl,
                 ib_error_t *err)
{
  cleanup_close int fd = open (path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return ib_error_sys (err, errno, "open %s", path);
  EVP_MD_CTX *c = EVP_MD_CTX_new ();
  EVP_DigestInit_ex (c, md, NULL);
  char buf[65536];
  for (;;)
    {
      ssize_t r = read (fd, buf, sizeof buf);
      if (r < 0 && errno == EINTR)
        continue;
      if (r < 0)
        {
          EVP_MD_CTX_free (c);
          return ib_error_sys (err, errno, "read %s", path);
        }
      if (r == 0)
        break;
      EVP_DigestUpdate (c, buf, (size_t) r);
    }
  *dl = 0;
  EVP_DigestFinal_ex (c, d, dl);
  EVP_MD_CTX_free (c);
  return 0;
}

int
ibw_hash_file (const char *path, const EVP_MD *md, char **out, ib_error_t *err)
{
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned int dl = 0;
  if (ibw_digest_file (path, md, d, &dl, err) < 0)
    return -1;
  b64url (d, dl, out);
  return 0;
}

static bool
safe_member_path (const char *p)
{
  if (!*p || p[0] == '/' || strchr (p, '\\'))
    return false;
  const char *s = p;
  while (*s)
    {
      const char *e = strchrnul (s, '/');
      size_t l = (size_t) (e - s);
      if (l == 0 || (l == 1 && s[0] == '.') || (l == 2 && s[0] == '.' && s[1] == '.'))
        return false;
      s = *e ? e + 1 : e;
    }
  return true;
}

static size_t
path_hash (const char *s)
{
  size_t h = 1469598103934665603ull; /* FNV-1a */
  for (; *s; s++)
    h = (h ^ (unsigned char) *s) * 1099511628211ull;
  return h;
}

member_t *
ibw_find_member (ib_wheel_t *w, const char *path)
{
  if (!w->nslot)
    return NULL;
  for (size_t i = path_hash (path) & (w->nslot - 1);; i = (i + 1) & (w->nslot - 1))
    {
      if (!w->slot[i])
        return NULL;
      if (strcmp (w->m[w->slot[i] - 1].path, path) == 0)
        return &w->m[w->slot[i] - 1];
    }
}

static void
slot_insert (ib_wheel_t *w, size_t idx)
{
  size_t i = path_hash (w->m[idx].path) & (w->nslot - 1);
  while (w->slot[i])
    i = (i + 1) & (w->nslot - 1);
  w->slot[i] = idx + 1;
}

/* A new member named `path` (not yet in the wheel); returns it zeroed but
 * for its path. */
static member_t *
add_member (ib_wheel_t *w, const char *path)
{
  if (w->n == w->cap)
    {
      w->cap = w->cap ? 2 * w->cap : 64;
      w->m = xrealloc (w->m, w->cap * sizeof *w->m);
    }
  member_t *m = &w->m[w->n++];
  memset (m, 0, sizeof *m);
  m->path = xstrdup (path);
  if (2 * w->n >= w->nslot)
    {
      free (w->slot);
      w->nslot = w->nslot ? 2 * w->nslot : 256;
      w->slot = xmalloc (w->nslot * sizeof *w->slot);
      for (size_t k = 0; k < w->n; k++)
        slot_insert (w, k);
    }
  else
    slot_insert (w, w->n - 1);
  return m;
}

static int
make_tmpdir (const char *what, char **out, ib_error_t *err)
{
  const char *t = getenv ("TMPDIR");
  cleanup_free char *tmpl = xasprintf ("%s/imgbuild-%s-XXXXXX", t && *t ? t : "/var/tmp", what);
  if (!mkdtemp (tmpl))
    return ib_error_sys (err, errno, "mkdtemp %s", tmpl);
  char *r = realpath (tmpl, NULL);
  if (!r)
    return ib_error_sys (err, errno, "realpath %s", tmpl);
  *out = r;
  return 0;
}

static bool
is_dist_info_member (const char *path)
{
  const char *sl = strchr (path, '/');
  return sl && sl - path > 10 && strncmp (sl - 10, ".dist-info", 10) == 0;
}

/* Hash one entry's data and, when it is to be extracted (every member with
 * extract_all, else ELF objects, by their first bytes, and the .dist-info
 * files), write it to dir/path. */
static int
extract_entry (ib_wheel_t *w, struct archive *a, member_t *m, ib_error_t *err)
{
  cleanup_free char *dst = ib_path_join (w->dir, m->path);
  cleanup_close int fd = -1;
  bool decided = w->extract_all || is_dist_info_member (m->path), write_it = decided;
  EVP_MD_CTX *c = EVP_MD_CTX_new ();
  EVP_DigestInit_ex (c, EVP_sha256 (), NULL);
  char buf[65536];
  size_t have = 0; /* bytes in buf not yet written */
  uint64_t total = 0;
  int r = 0;
  for (;;)
    {
      la_ssize_t n = archive_read_data (a, buf + have, sizeof buf - have);
      if (n < 0)
        {
          r = ib_error_set (err, EIO, "wheel %s: %s: %s", w->base, m->path,
                            archive_error_string (a));
          break;
        }
      EVP_DigestUpdate (c, buf + have, (size_t) n);
      total += (uint64_t) n;
      w->unpacked += (uint64_t) n;
      if (w->unpacked > ib_unpack_max_bytes ())
        {
          /* a decompression bomb: the same limit as a layer's */
          r = ib_error_set (err, EFBIG,
                            "wheel %s: more than %" PRIu64 " bytes uncompressed (the limit; "
                            "IMGBUILD_MAX_LAYER_BYTES sets it)",
                            w->base, ib_unpack_max_bytes ());
          break;
        }
      have += (size_t) n;
      if (!decided && (have >= 4 || n == 0))
        {
          decided = true;
          write_it = have >= 4 && memcmp (buf, "\177ELF", 4) == 0;
        }
      if (decided && write_it && fd < 0 && (have > 0 || n == 0))
        {
          cleanup_free char *parent = xstrdup (dst);
          *strrchr (parent, '/') = '\0';
          if (!w->last_parent || strcmp (w->last_parent, parent) != 0)
            {
              if (ib_mkdir_p (parent, 0755, err) < 0)
                {
                  r = -1;
                  break;
                }
              free (w->last_parent);
              w->last_parent = steal_pointer (&parent);
            }
          fd = open (dst, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                     (m->mode & 0111) ? 0755 : 0644);
          if (fd < 0)
            {
              r = ib_error_sys (err, errno, "wheel %s: extract %s", w->base, m->path);
              break;
            }
          m->extracted = true;
        }
      if (decided)
        {
          if (write_it && have && ib_write_all (fd, buf, have, dst, err) < 0)
            {
              r = -1;
              break;
            }
          have = 0;
        }
      if (n == 0)
        break;
    }
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned int dl = 0;
  EVP_DigestFinal_ex (c, d, &dl);
  EVP_MD_CTX_free (c);
  if (r < 0)
    return -1;
  b64url (d, dl, &m->sha256);
  m->size = total;
  return 0;
}

/* RFC 822-style headers ("Key: value" lines up to the first blank line).
 * Returns the values of `key`, in order. */
static char **
header_values (const char *text, const char *key)
{
  char **out = NULL;
  size_t kl = strlen (key);
  const char *s = text;
  while (*s)
    {
      const char *e = strchrnul (s, '\n');
      size_t l = (size_t) (e - s);
      if (l && s[l - 1] == '\r')
        l--;
      if (l == 0)
        break; /* body follows */
      if (l > kl && strncasecmp (s, key, kl) == 0 && s[kl] == ':')
        {
          const char *v = s + kl + 1;
          while (v < s + l && (*v == ' ' || *v == '\t'))
            v++;
          const char *ve = s + l;
          while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
            ve--;
          cleanup_free char *val = xstrndup (v, (size_t) (ve - v));
          ib_strv_push (&out, val);
        }
      s = *e ? e + 1 : e;
    }
  return out;
}

/* One CSV record (RFC 4180 quoting, as Python's csv module writes RECORD).
 * Advances *p past the line; fields in *fields (caller frees). */
static int
csv_line (const char **p, char ***fields)
{
  const char *s = *p;
  ib_buf_t f = { 0 };
  *fields = NULL;
  bool any = false;
  for (;;)
    {
      ib_buf_free (&f);
      f = (ib_buf_t) { 0 };
      ib_buf_append (&f, "", 0);
      if (*s == '"')
        {
          s++;
          for (;;)
            {
              if (!*s)
                {
                  ib_buf_free (&f);
                  return -1;
                }
              if (*s == '"' && s[1] == '"')
                {
                  ib_buf_append (&f, "\"", 1);
                  s += 2;
                }
              else if (*s == '"')
                {
                  s++;
                  break;
                }
              else
                ib_buf_append (&f, s++, 1);
            }
        }
      while (*s && *s != ',' && *s != '\n' && *s != '\r')
        ib_buf_append (&f, s++, 1);
      ib_strv_push (fields, f.data);
      any = true;
      if (*s == ',')
        {
          s++;
          continue;
        }
      break;
    }
  ib_buf_free (&f);
  if (*s == '\r')
    s++;
  if (*s == '\n')
    s++;
  *p = s;
  return any ? 0 : -1;
}

/* The second pass for RECORD's sha384 / sha512 digests: members are hashed
 * with sha256 while they are read, and RECORD comes last. */
static int
rehash_members (ib_wheel_t *w, ib_error_t *err)
{
  struct archive *a = archive_read_new ();
  archive_read_support_format_zip_seekable (a);
  int r = 0;
  if (archive_read_open_filename (a, w->file, 65536) != ARCHIVE_OK)
    r = ib_error_set (err, EIO, "wheel %s: %s", w->base, archive_error_string (a));
  while (r == 0)
    {
      struct archive_entry *e;
      int ar = archive_read_next_header (a, &e);
      if (ar == ARCHIVE_EOF)
        break;
      if (ar != ARCHIVE_OK && ar != ARCHIVE_WARN)
        {
          r = ib_error_set (err, EIO, "wheel %s: %s", w->base, archive_error_string (a));
          break;
        }
      const char *name = archive_entry_pathname (e);
      member_t *m = name ? ibw_find_member (w, name) : NULL;
      if (!m || !m->alt_bits)
        continue;
      EVP_MD_CTX *c = EVP_MD_CTX_new ();
      EVP_DigestInit_ex (c, m->alt_bits == 384 ? EVP_sha384 () : EVP_sha512 (), NULL);
      char buf[65536];
      la_ssize_t n;
      while ((n = archive_read_data (a, buf, sizeof buf)) > 0)
        EVP_DigestUpdate (c, buf, (size_t) n);
      unsigned char d[EVP_MAX_MD_SIZE];
      unsigned int dl = 0;
      EVP_DigestFinal_ex (c, d, &dl);
      EVP_MD_CTX_free (c);
      if (n < 0)
        {
          r = ib_error_set (err, EIO, "wheel %s: %s: %s", w->base, name, archive_error_string (a));
          break;
        }
      cleanup_free char *got = NULL;
      b64url (d, dl, &got);
      if (strcmp (got, m->alt_want) != 0)
        r = ib_error_set (err, EINVAL, "wheel %s: RECORD: hash mismatch for %s", w->base, name);
      m->alt_bits = 0;
    }
  archive_read_free (a);
  return r;
}

static int
verify_record (ib_wheel_t *w, const char *record_path, const char *text, ib_error_t *err)
{
  cleanup_free char *jws = xasprintf ("%s/RECORD.jws", w->dist_info);
  cleanup_free char *p7s = xasprintf ("%s/RECORD.p7s", w->dist_info);
  cleanup_free bool *listed = xmalloc ((w->n + 1) * sizeof *listed);
  const char *p = text;
  size_t lineno = 0;
  while (*p)
    {
      lineno++;
      if (*p == '\n' || *p == '\r')
        {
          p++;
          continue;
        }
      cleanup_strv char **f = NULL;
      if (csv_line (&p, &f) < 0 || ib_strv_len (f) != 3)
        return ib_error_set (err, EINVAL,
                             "wheel %s: RECORD line %zu: expected path,hash,size", w->base, lineno);
      member_t *m = ibw_find_member (w, f[0]);
      if (!m)
        return ib_error_set (err, ENOENT, "wheel %s: RECORD lists %s, which the wheel lacks",
                             w->base, f[0]);
      size_t idx = (size_t) (m - w->m);
      if (listed[idx])
        return ib_error_set (err, EINVAL, "wheel %s: RECORD lists %s twice", w->base, f[0]);
      listed[idx] = true;
      bool unhashed = strcmp (f[0], record_path) == 0 || strcmp (f[0], jws) == 0
                      || strcmp (f[0], p7s) == 0;
      if (!*f[1])
        {
          if (unhashed)
            continue;
          return ib_error_set (err, EINVAL, "wheel %s: RECORD: no hash for %s", w->base, f[0]);
        }
      char *eq = strchr (f[1], '=');
      if (!eq)
        return ib_error_set (err, EINVAL, "wheel %s: RECORD: malformed hash '%s' for %s",
                             w->base, f[1], f[0]);
      *eq = '\0';
      const char *want = eq + 1;
      const char *got = NULL;
      if (strcmp (f[1], "sha256") == 0)
        got = m->sha256;
      else if (strcmp (f[1], "sha384") == 0 || strcmp (f[1], "sha512") == 0)
        {
          /* checked by rehash_members, in a second pass over the zip */
          m->alt_bits = strcmp (f[1], "sha384") == 0 ? 384 : 512;
          free (m->alt_want);
          m->alt_want = xstrdup (want);
          got = want;
        }
      else
        return ib_error_set (err, EINVAL,
                             "wheel %s: RECORD: hash algorithm %s for %s is not sha256 or "
                             "stronger (PEP 427)",
                             w->base, f[1], f[0]);
      if (strcmp (got, want) != 0)
        return ib_error_set (err, EINVAL, "wheel %s: RECORD: hash mismatch for %s", w->base, f[0]);
      char *end = NULL;
      errno = 0;
      unsigned long long sz = strtoull (f[2], &end, 10);
      if (!*f[2] || *end || errno)
        return ib_error_set (err, EINVAL, "wheel %s: RECORD: malformed size '%s' for %s",
                             w->base, f[2], f[0]);
      if (sz != m->size)
        return ib_error_set (err, EINVAL,
                             "wheel %s: RECORD: size mismatch for %s (RECORD %llu, member %llu)",
                             w->base, f[0], sz, (unsigned long long) m->size);
    }
  for (size_t i = 0; i < w->n; i++)
    if (!listed[i] && strcmp (w->m[i].path, record_path) != 0 && strcmp (w->m[i].path, jws) != 0
        && strcmp (w->m[i].path, p7s) != 0)
      return ib_error_set (err, EINVAL, "wheel %s: RECORD does not list %s", w->base,
                           w->m[i].path);
  for (size_t i = 0; i < w->n; i++)
    if (w->m[i].alt_bits)
      return rehash_members (w, err);
  return 0;
}

static int
read_member_text (ib_wheel_t *w, const char *rel, char **text, ib_error_t *err)
{
  if (!ibw_find_member (w, rel))
    return ib_error_set (err, ENOENT, "wheel %s: missing %s", w->base, rel);
  cleanup_free char *path = ib_path_join (w->dir, rel);
  size_t len;
  if (ib_read_file (path, text, &len, err) < 0)
    return ib_error_prefix (err, "wheel %s", w->base);
  return 0;
}

/* A project name as PEP 503 compares them: lower case, runs of "-", "_"
 * and "." as one "_" (tools differ in how they escape names). */
static char *
normalize_name (const char *s)
{
  ib_buf_t b = { 0 };
  for (; *s; s++)
    {
      if (*s == '-' || *s == '_' || *s == '.')
        {
          if (b.len == 0 || b.data[b.len - 1] != '_')
            ib_buf_puts (&b, "_");
          continue;
        }
      char c = (char) tolower ((unsigned char) *s);
      ib_buf_append (&b, &c, 1);
    }
  return ib_buf_steal (&b);
}

static int
verify_dist_info (ib_wheel_t *w, ib_error_t *err)
{
  /* exactly one top-level *.dist-info directory */
  for (size_t i = 0; i < w->n; i++)
    {
      const char *sl = strchr (w->m[i].path, '/');
      if (!sl)
        continue;
      size_t l = (size_t) (sl - w->m[i].path);
      if (l > 10 && strncmp (sl - 10, ".dist-info", 10) == 0)
        {
          if (!w->dist_info)
            w->dist_info = xstrndup (w->m[i].path, l);
          else if (strlen (w->dist_info) != l || strncmp (w->dist_info, w->m[i].path, l) != 0)
            return ib_error_set (err, EINVAL, "wheel %s: more than one .dist-info directory "
                                 "(%s, %.*s)", w->base, w->dist_info, (int) l, w->m[i].path);
        }
    }
  if (!w->dist_info)
    return ib_error_set (err, EINVAL, "wheel %s: no .dist-info directory", w->base);
  cleanup_free char *expect
      = xasprintf ("%s-%s.dist-info", w->name.distribution, w->name.version);
  cleanup_free char *got_name = xstrndup (w->dist_info, strlen (w->dist_info) - 10);
  char *dash = strrchr (got_name, '-');
  if (dash)
    *dash = '\0';
  cleanup_free char *n1 = normalize_name (w->name.distribution);
  cleanup_free char *n2 = normalize_name (got_name);
  if (!dash || strcmp (n1, n2) != 0 || strcmp (dash + 1, w->name.version) != 0)
    return ib_error_set (err, EINVAL,
                         "wheel %s: the .dist-info directory is %s, the file name wants %s "
                         "(PEP 427)",
                         w->base, w->dist_info, expect);
  cleanup_free char *wheel_rel = xasprintf ("%s/WHEEL", w->dist_info);
  cleanup_free char *meta_rel = xasprintf ("%s/METADATA", w->dist_info);
  cleanup_free char *record_rel = xasprintf ("%s/RECORD", w->dist_info);
  cleanup_free char *wheel_text = NULL, *meta_text = NULL, *record_text = NULL;
  if (read_member_text (w, wheel_rel, &wheel_text, err) < 0
      || read_member_text (w, meta_rel, &meta_text, err) < 0
      || read_member_text (w, record_rel, &record_text, err) < 0)
    return -1;
  /* WHEEL */
  cleanup_strv char **wv = header_values (wheel_text, "Wheel-Version");
  if (ib_strv_len (wv) != 1)
    return ib_error_set (err, EINVAL, "wheel %s: WHEEL: no Wheel-Version", w->base);
  if (strncmp (wv[0], "1.", 2) != 0)
    return ib_error_set (err, EINVAL, "wheel %s: WHEEL: Wheel-Version %s is not 1.x", w->base,
                         wv[0]);
  cleanup_strv char **purelib = header_values (wheel_text, "Root-Is-Purelib");
  w->root_is_purelib = purelib && strcasecmp (purelib[0], "true") == 0;
  w->wheel_tags = header_values (wheel_text, "Tag");
  cleanup_strv char **want
      = expand_tags (w->name.python, w->name.abi, w->name.platform);
  for (size_t i = 0; want[i]; i++)
    if (!ib_strv_has (w->wheel_tags, want[i]))
      return ib_error_set (err, EINVAL,
                           "wheel %s: WHEEL: no Tag line for %s, a tag of the file name", w->base,
                           want[i]);
  for (size_t i = 0; w->wheel_tags && w->wheel_tags[i]; i++)
    if (!ib_strv_has (want, w->wheel_tags[i]))
      return ib_error_set (err, EINVAL, "wheel %s: WHEEL: Tag %s is not in the file name",
                           w->base, w->wheel_tags[i]);
  /* METADATA */
  const char *meta_keys[] = { "Metadata-Version", "Name", "Version" };
  for (size_t i = 0; i < 3; i++)
    {
      cleanup_strv char **v = header_values (meta_text, meta_keys[i]);
      if (!v)
        return ib_error_set (err, EINVAL, "wheel %s: METADATA: no %s", w->base, meta_keys[i]);
    }
  return verify_record (w, record_rel, record_text, err);
}

int
ibw_open (const char *path, bool all, ib_wheel_t **out, ib_error_t *err)
{
  *out = NULL;
  ib_wheel_t *w = xmalloc (sizeof *w);
  w->extract_all = all;
  w->file = xstrdup (path);
  const char *sl = strrchr (path, '/');
  w->base = xstrdup (sl ? sl + 1 : path);
  struct archive *a = NULL;
  int r = -1;
  if (ib_wheel_parse_name (w->base, &w->name, err) < 0)
    goto out;
  if (make_tmpdir ("wheel", &w->dir, err) < 0)
    goto out;
  a = archive_read_new ();
  archive_read_support_format_zip_seekable (a);
  if (archive_read_open_filename (a, path, 65536) != ARCHIVE_OK)
    {
      ib_error_set (err, archive_errno (a) > 0 ? archive_errno (a) : EINVAL,
                    "wheel %s: not a readable zip: %s", w->base, archive_error_string (a));
      goto out;
    }
  for (;;)
    {
      struct archive_entry *e;
      int ar = archive_read_next_header (a, &e);
      if (ar == ARCHIVE_EOF)
        break;
      if (ar != ARCHIVE_OK && ar != ARCHIVE_WARN)
        {
          ib_error_set (err, EINVAL, "wheel %s: not a readable zip: %s", w->base,
                        archive_error_string (a));
          goto out;
        }
      const char *name = archive_entry_pathname (e);
      if (!name)
        {
          ib_error_set (err, EINVAL, "wheel %s: a member without a name", w->base);
          goto out;
        }
      if (archive_entry_filetype (e) == AE_IFDIR)
        continue;
      if (archive_entry_filetype (e) != AE_IFREG)
        {
          ib_error_set (err, EINVAL, "wheel %s: member %s is not a regular file", w->base, name);
          goto out;
        }
      if (!safe_member_path (name))
        {
          ib_error_set (err, EINVAL, "wheel %s: unsafe member name '%s'", w->base, name);
          goto out;
        }
      if (ibw_find_member (w, name))
        {
          ib_error_set (err, EINVAL, "wheel %s: member %s appears twice", w->base, name);
          goto out;
        }
      member_t *m = add_member (w, name);
      m->mode = archive_entry_perm (e);
      if (m->mode == 0)
        m->mode = 0644;
      m->mtime = archive_entry_mtime_is_set (e) ? (int64_t) archive_entry_mtime (e) : 0;
      if (extract_entry (w, a, m, err) < 0)
        goto out;
    }
  if (verify_dist_info (w, err) < 0)
    goto out;
  r = 0;
out:
  free (w->last_parent);
  w->last_parent = NULL;
  if (a)
    archive_read_free (a);
  if (r < 0)
    ib_wheel_close (w);
  else
    *out = w;
  return r;
}

int
ib_wheel_open (const char *path, ib_wheel_t **out, ib_error_t *err)
{
  return ibw_open (path, false, out, err);
}

void
ib_wheel_close (ib_wheel_t *w)
{
  if (!w)
    return;
  if (w->dir)
    {
      ib_error_t e = NULL;
      if (ib_rm_rf (w->dir, &e) < 0)
        ib_error_report (&e);
    }
  for (size_t i = 0; i < w->n; i++)
    {
      free (w->m[i].path);
      free (w->m[i].sha256);
      free (w->m[i].alt_want);
    }
  free (w->m);
  free (w->slot);
  free (w->file);
  free (w->base);
  free (w->dir);
  free (w->dist_info);
  ib_strv_free (w->wheel_tags);
  ib_wheel_name_clear (&w->name);
  free (w);
}

const ib_wheel_name_t *
ib_wheel_get_name (const ib_wheel_t *w)
{
  return &w->name;
}

size_t
ib_wheel_member_count (const ib_wheel_t *w)
{
  return w->n;
}
