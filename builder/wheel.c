/* builder/wheel.c — wheel verification (PEP 427), manylinux audit (PEP 600,
 * auditwheel's algorithm and policy table) and repair.  See wheel.h.
 *
 * The audit follows auditwheel 6.x (src/auditwheel/wheel_abi.py,
 * policy/__init__.py, lddtree.py, elfutils.py; read, not copied): names
 * below (full tree, external references, symbol / ref / blacklist / graft /
 * machine policy) are auditwheel's.  Known departure: musllinux and
 * Android policies are not shipped.
 */
#include "builder/wheel.h"
#include "rootfs/unpack.h"
#include "common/util.h"

#include <archive.h>
#include <archive_entry.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <gelf.h>
#include <glob.h>
#include <libelf.h>
#include <inttypes.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The policy table, embedded at build time (see data/SOURCES.md). */
__asm__ (".pushsection .rodata\n"
         ".global ib_wheel_policy_data\n"
         ".hidden ib_wheel_policy_data\n"
         "ib_wheel_policy_data:\n"
         ".incbin \"data/manylinux-policy.json\"\n"
         ".global ib_wheel_policy_end\n"
         ".hidden ib_wheel_policy_end\n"
         "ib_wheel_policy_end:\n"
         ".byte 0\n"
         ".popsection\n");
extern const char ib_wheel_policy_data[], ib_wheel_policy_end[];

const char *
ib_wheel_policy_json (size_t *len)
{
  if (len)
    *len = (size_t) (ib_wheel_policy_end - ib_wheel_policy_data);
  return ib_wheel_policy_data;
}

/* ---- small containers ---------------------------------------------------- */

static void
strv_add_unique (char ***v, const char *s)
{
  if (!ib_strv_has (*v, s))
    ib_strv_push (v, s);
}

static int
cmp_strp (const void *a, const void *b)
{
  return strcmp (*(char *const *) a, *(char *const *) b);
}

static void
strv_sort (char **v)
{
  if (v)
    qsort (v, ib_strv_len (v), sizeof *v, cmp_strp);
}

/* An insertion-ordered map from a string to a string vector. */
typedef struct smap_ent
{
  char *key;
  char **vals;
} smap_ent_t;
typedef struct smap
{
  smap_ent_t *e;
  size_t n;
} smap_t;

static smap_ent_t *
smap_find (const smap_t *m, const char *key)
{
  for (size_t i = 0; i < m->n; i++)
    if (strcmp (m->e[i].key, key) == 0)
      return &m->e[i];
  return NULL;
}

static smap_ent_t *
smap_get (smap_t *m, const char *key)
{
  smap_ent_t *e = smap_find (m, key);
  if (e)
    return e;
  m->e = xrealloc (m->e, (m->n + 1) * sizeof *m->e);
  m->e[m->n] = (smap_ent_t) { xstrdup (key), NULL };
  return &m->e[m->n++];
}

static void
smap_clear (smap_t *m)
{
  for (size_t i = 0; i < m->n; i++)
    {
      free (m->e[i].key);
      ib_strv_free (m->e[i].vals);
    }
  free (m->e);
  m->e = NULL;
  m->n = 0;
}

static void
smap_merge (smap_t *dst, const smap_t *src)
{
  for (size_t i = 0; i < src->n; i++)
    {
      smap_ent_t *e = smap_get (dst, src->e[i].key);
      for (size_t k = 0; src->e[i].vals && src->e[i].vals[k]; k++)
        strv_add_unique (&e->vals, src->e[i].vals[k]);
    }
}

static void
smap_copy (smap_t *dst, const smap_t *src)
{
  smap_clear (dst);
  smap_merge (dst, src);
}

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
              strv_add_unique (&out, t);
            }
        }
    }
  return out;
}

/* ---- opening and verifying ----------------------------------------------- */

typedef struct member
{
  char *path;     /* relative, '/'-separated */
  uint64_t size;
  mode_t mode;    /* permission bits as stored (0644 when none) */
  int64_t mtime;
  unsigned char dos[4]; /* MS-DOS time and date fields as stored, when has_dos */
  bool has_dos;
  char *sha256;   /* urlsafe base64, no padding */
  bool extracted; /* written under the wheel's directory */
  int alt_bits;   /* 384 or 512: RECORD names sha384 / sha512 ... */
  char *alt_want; /* ... with this digest, checked in a second pass */
} member_t;

struct ib_wheel
{
  char *file;      /* the path given */
  char *base;      /* its base name */
  ib_wheel_name_t name;
  char *dir;       /* extraction directory (realpath) */
  char *dist_info; /* "foo-1.0.dist-info" */
  member_t *m;
  size_t n, cap;
  size_t *slot;      /* hash table of member paths: index + 1, 0 empty */
  size_t nslot;      /* a power of two, above twice n */
  bool root_is_purelib;
  char **wheel_tags; /* Tag lines of WHEEL */
  bool extract_all;  /* every member; else ELF objects and .dist-info only */
  char *last_parent; /* the directory last made while extracting */
  uint64_t unpacked; /* uncompressed bytes read so far (ib_unpack_max_bytes) */
};

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

static int
hash_file (const char *path, const EVP_MD *md, char **out, ib_error_t *err)
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
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned int dl = 0;
  EVP_DigestFinal_ex (c, d, &dl);
  EVP_MD_CTX_free (c);
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

static member_t *
find_member (ib_wheel_t *w, const char *path)
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
      member_t *m = name ? find_member (w, name) : NULL;
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
      member_t *m = find_member (w, f[0]);
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
  if (!find_member (w, rel))
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

static int
wheel_open (const char *path, bool all, ib_wheel_t **out, ib_error_t *err)
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
      if (find_member (w, name))
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
  return wheel_open (path, false, out, err);
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

/* ---- ELF objects (libelf) ------------------------------------------------- */

#define IB_GNU_PROPERTY_X86_ISA_1_NEEDED 0xc0008002u

typedef struct elf_info
{
  char *path;
  int cls, data, machine, osabi;
  char *interp;
  char **needed, **rpath, **runpath;
  smap_t verneed;  /* needed library -> versions (ld-linux / ld64 skipped) */
  char **undef;    /* undefined, non-weak .dynsym names */
  bool pyext, py2, pyfpe, ucs2;
  unsigned isa_level; /* 0 baseline, 2..4: x86-64-v2..v4 */
} elf_info_t;

static void
elf_info_free (elf_info_t *i)
{
  if (!i)
    return;
  free (i->path);
  free (i->interp);
  ib_strv_free (i->needed);
  ib_strv_free (i->rpath);
  ib_strv_free (i->runpath);
  smap_clear (&i->verneed);
  ib_strv_free (i->undef);
  free (i);
}

static const char *
base_arch (const elf_info_t *i)
{
  bool le = i->data == ELFDATA2LSB;
  switch (i->machine)
    {
    case EM_386: return i->cls == ELFCLASS32 && le ? "i686" : NULL;
    case EM_X86_64: return i->cls == ELFCLASS64 && le ? "x86_64" : NULL;
    case EM_PPC64: return i->cls == ELFCLASS64 ? (le ? "ppc64le" : "ppc64") : NULL;
    case EM_AARCH64: return i->cls == ELFCLASS64 && le ? "aarch64" : NULL;
    case EM_S390: return i->cls == ELFCLASS64 && !le ? "s390x" : NULL;
    case EM_ARM: return i->cls == ELFCLASS32 && le ? "armv7l" : NULL;
    case EM_RISCV: return i->cls == ELFCLASS64 && le ? "riscv64" : NULL;
#ifdef EM_LOONGARCH
    case EM_LOONGARCH: return i->cls == ELFCLASS64 && le ? "loongarch64" : NULL;
#endif
    default: return NULL;
    }
}

static bool
osabi_compatible (int a, int b)
{
  /* NONE/SYSV (0) and GNU/LINUX (3) load together */
  return a == b || ((a == 0 || a == 3) && (b == 0 || b == 3));
}

static void
split_path_list (const char *s, char ***out)
{
  cleanup_free char *c = xstrdup (s);
  char *p = c;
  for (;;)
    {
      char *colon = strchr (p, ':');
      if (colon)
        *colon = '\0';
      ib_strv_push (out, p);
      if (!colon)
        break;
      p = colon + 1;
    }
}

/* Read `path`.  *out NULL (and 0 returned) when the file is no ELF object.
 * `modname`: the Python module name the file would be (its name up to the
 * first '.'), to recognize an extension's init function; NULL: not asked. */
static int
elf_read (const char *path, const char *modname, elf_info_t **out, ib_error_t *err)
{
  *out = NULL;
  cleanup_close int fd = open (path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return ib_error_sys (err, errno, "open %s", path);
  Elf *e = elf_begin (fd, ELF_C_READ_MMAP, NULL);
  if (!e)
    return 0;
  if (elf_kind (e) != ELF_K_ELF)
    {
      elf_end (e);
      return 0;
    }
  GElf_Ehdr eh;
  if (!gelf_getehdr (e, &eh))
    {
      elf_end (e);
      return 0; /* a truncated header: pyelftools fails too, "not an ELF" */
    }
  elf_info_t *i = xmalloc (sizeof *i);
  i->path = xstrdup (path);
  i->cls = gelf_getclass (e);
  i->data = eh.e_ident[EI_DATA];
  i->machine = eh.e_machine;
  i->osabi = eh.e_ident[EI_OSABI];
  cleanup_free char *py3 = modname ? xasprintf ("PyInit_%s", modname) : NULL;
  cleanup_free char *py2 = modname ? xasprintf ("init%s", modname) : NULL;
  cleanup_free char *pypy = modname ? xasprintf ("_cffi_pypyinit_%s", modname) : NULL;

  size_t phnum = 0;
  if (elf_getphdrnum (e, &phnum) == 0)
    for (size_t k = 0; k < phnum; k++)
      {
        GElf_Phdr ph;
        if (gelf_getphdr (e, (int) k, &ph) && ph.p_type == PT_INTERP)
          {
            size_t sz = 0;
            char *raw = elf_rawfile (e, &sz);
            if (raw && ph.p_offset < sz && ph.p_filesz <= sz - ph.p_offset)
              i->interp = xstrndup (raw + ph.p_offset, ph.p_filesz);
            break;
          }
      }
  size_t shstrndx = 0;
  elf_getshdrstrndx (e, &shstrndx);
  bool seen_dynamic = false, seen_verneed = false, seen_dynsym = false, seen_prop = false;
  bool has_runpath = false;
  for (Elf_Scn *scn = elf_nextscn (e, NULL); scn; scn = elf_nextscn (e, scn))
    {
      GElf_Shdr sh;
      if (!gelf_getshdr (scn, &sh))
        continue;
      const char *sname = elf_strptr (e, shstrndx, sh.sh_name);
      Elf_Data *d = NULL;
      if (sh.sh_type == SHT_DYNAMIC && !seen_dynamic && sh.sh_entsize)
        {
          seen_dynamic = true;
          d = elf_getdata (scn, NULL);
          for (size_t k = 0; d && k < sh.sh_size / sh.sh_entsize; k++)
            {
              GElf_Dyn dyn;
              if (!gelf_getdyn (d, (int) k, &dyn))
                break;
              if (dyn.d_tag == DT_NULL)
                break;
              if (dyn.d_tag != DT_NEEDED && dyn.d_tag != DT_RPATH && dyn.d_tag != DT_RUNPATH)
                continue;
              const char *s = elf_strptr (e, sh.sh_link, dyn.d_un.d_val);
              if (!s)
                continue;
              if (dyn.d_tag == DT_NEEDED)
                ib_strv_push (&i->needed, s);
              else if (dyn.d_tag == DT_RPATH)
                split_path_list (s, &i->rpath);
              else
                {
                  split_path_list (s, &i->runpath);
                  has_runpath = true;
                }
            }
        }
      else if (sh.sh_type == SHT_GNU_verneed && !seen_verneed
               && (!sname || strcmp (sname, ".gnu.version_r") == 0))
        {
          seen_verneed = true;
          d = elf_getdata (scn, NULL);
          size_t off = 0;
          for (size_t k = 0; d && k < sh.sh_info; k++)
            {
              GElf_Verneed vn;
              if (!gelf_getverneed (d, (int) off, &vn))
                break;
              const char *file = elf_strptr (e, sh.sh_link, vn.vn_file);
              bool skip = !file || ib_str_has_prefix (file, "ld-linux")
                          || strcmp (file, "ld64.so.2") == 0 || strcmp (file, "ld64.so.1") == 0;
              size_t aoff = off + vn.vn_aux;
              for (size_t j = 0; j < vn.vn_cnt; j++)
                {
                  GElf_Vernaux va;
                  if (!gelf_getvernaux (d, (int) aoff, &va))
                    break;
                  const char *vname = elf_strptr (e, sh.sh_link, va.vna_name);
                  if (!skip && vname)
                    strv_add_unique (&smap_get (&i->verneed, file)->vals, vname);
                  if (!va.vna_next)
                    break;
                  aoff += va.vna_next;
                }
              if (!vn.vn_next)
                break;
              off += vn.vn_next;
            }
        }
      else if (sh.sh_type == SHT_DYNSYM && !seen_dynsym && sh.sh_entsize)
        {
          seen_dynsym = true;
          d = elf_getdata (scn, NULL);
          for (size_t k = 0; d && k < sh.sh_size / sh.sh_entsize; k++)
            {
              GElf_Sym sym;
              if (!gelf_getsym (d, (int) k, &sym))
                break;
              const char *n = elf_strptr (e, sh.sh_link, sym.st_name);
              if (!n)
                continue;
              int type = GELF_ST_TYPE (sym.st_info), bind = GELF_ST_BIND (sym.st_info);
              bool undef = sym.st_shndx == SHN_UNDEF;
              if (undef && bind != STB_WEAK && *n)
                ib_strv_push (&i->undef, n);
              if (modname && !undef && type == STT_FUNC && !i->pyext)
                {
                  if (strcmp (n, py3) == 0)
                    i->pyext = true;
                  else if (strcmp (n, py2) == 0 || strcmp (n, pypy) == 0)
                    i->pyext = i->py2 = true;
                }
              if (undef && (type == STT_FUNC || type == STT_NOTYPE)
                  && (strcmp (n, "PyFPE_jbuf") == 0 || strcmp (n, "PyFPE_dummy") == 0
                      || strcmp (n, "PyFPE_counter") == 0))
                i->pyfpe = true;
              if (undef && type == STT_FUNC && strstr (n, "PyUnicodeUCS2_"))
                i->ucs2 = true;
            }
        }
      else if (sh.sh_type == SHT_NOTE && !seen_prop && i->machine == EM_X86_64)
        {
          d = elf_getdata (scn, NULL);
          GElf_Nhdr nh;
          size_t off = 0, noff, doff;
          while (d && (off = gelf_getnote (d, off, &nh, &noff, &doff)) > 0)
            {
              if (nh.n_type != NT_GNU_PROPERTY_TYPE_0 || nh.n_namesz != 4
                  || memcmp ((char *) d->d_buf + noff, "GNU", 4) != 0)
                continue;
              seen_prop = true;
              const unsigned char *p = (const unsigned char *) d->d_buf + doff;
              const unsigned char *end = p + nh.n_descsz;
              size_t align = i->cls == ELFCLASS64 ? 8 : 4;
              while (p + 8 <= end)
                {
                  uint32_t type, sz;
                  memcpy (&type, p, 4);
                  memcpy (&sz, p + 4, 4);
                  if (type == IB_GNU_PROPERTY_X86_ISA_1_NEEDED && sz == 4 && p + 12 <= end)
                    {
                      uint32_t v;
                      memcpy (&v, p + 8, 4);
                      v &= ~1u;
                      i->isa_level = (v & 8) ? 4 : (v & 4) ? 3 : (v & 2) ? 2 : 0;
                      break;
                    }
                  p += 8 + ((sz + align - 1) / align) * align;
                }
              break;
            }
        }
    }
  if (has_runpath)
    {
      /* both set: only RUNPATH counts (the loader, and lddtree) */
      ib_strv_free (i->rpath);
      i->rpath = NULL;
    }
  strv_sort (i->undef);
  elf_end (e);
  *out = i;
  return 0;
}

/* ---- policies -------------------------------------------------------------- */

typedef struct policy
{
  char *name; /* with the architecture: "manylinux_2_17_x86_64" */
  char **aliases;
  int priority;
  json_t *symvers;   /* prefix -> [versions], or NULL (linux) */
  json_t *whitelist; /* array */
  json_t *blacklist; /* soname -> [symbols] */
} policy_t;

static int
cmp_policy (const void *a, const void *b)
{
  return ((const policy_t *) a)->priority - ((const policy_t *) b)->priority;
}

static bool
json_array_has (json_t *arr, const char *s)
{
  size_t k;
  json_t *v;
  json_array_foreach (arr, k, v)
    if (json_is_string (v) && strcmp (json_string_value (v), s) == 0)
      return true;
  return false;
}

static int
load_policies (const char *arch, json_t **root, policy_t **out, size_t *n, ib_error_t *err)
{
  size_t len;
  const char *data = ib_wheel_policy_json (&len);
  json_error_t je;
  json_t *j = json_loadb (data, len, 0, &je);
  if (!j || !json_is_array (j))
    {
      json_decref (j);
      return ib_error_set (err, EINVAL, "the embedded manylinux policy: %s", je.text);
    }
  policy_t *p = NULL;
  size_t cnt = 0, k;
  json_t *pol;
  json_array_foreach (j, k, pol)
    {
      const char *name = json_string_value (json_object_get (pol, "name"));
      json_t *sv = json_object_get (json_object_get (pol, "symbol_versions"), arch);
      if (!name || (!sv && strcmp (name, "linux") != 0))
        continue;
      p = xrealloc (p, (cnt + 1) * sizeof *p);
      policy_t *q = &p[cnt++];
      memset (q, 0, sizeof *q);
      q->name = xasprintf ("%s_%s", name, arch);
      q->priority = (int) json_integer_value (json_object_get (pol, "priority"));
      q->symvers = strcmp (name, "linux") == 0 ? NULL : sv;
      q->whitelist = json_object_get (pol, "lib_whitelist");
      q->blacklist = json_object_get (pol, "blacklist");
      size_t a;
      json_t *al;
      json_array_foreach (json_object_get (pol, "aliases"), a, al)
        {
          cleanup_free char *s = xasprintf ("%s_%s", json_string_value (al), arch);
          ib_strv_push (&q->aliases, s);
        }
    }
  qsort (p, cnt, sizeof *p, cmp_policy);
  if (cnt < 2 || p[0].priority != 0)
    {
      for (size_t i = 0; i < cnt; i++)
        {
          free (p[i].name);
          ib_strv_free (p[i].aliases);
        }
      free (p);
      json_decref (j);
      return ib_error_set (err, ENOTSUP, "no manylinux policy for architecture %s", arch);
    }
  *root = j;
  *out = p;
  *n = cnt;
  return 0;
}

/* versioned_symbols_policy: the highest policy whose symbol_versions hold
 * every required version, prefix by prefix (prefixes a policy does not
 * list are not checked).  Returns the index. */
static size_t
symbols_policy (const policy_t *p, size_t np, const smap_t *vs)
{
  for (size_t k = np; k-- > 0;)
    {
      if (!p[k].symvers)
        return k;
      bool ok = true;
      for (size_t i = 0; ok && i < vs->n; i++)
        for (size_t j = 0; ok && vs->e[i].vals && vs->e[i].vals[j]; j++)
          {
            const char *s = vs->e[i].vals[j];
            const char *us = strchr (s, '_');
            cleanup_free char *prefix = us ? xstrndup (s, (size_t) (us - s)) : xstrdup (s);
            json_t *arr = json_object_get (p[k].symvers, prefix);
            if (!arr)
              continue;
            if (!us || !json_array_has (arr, us + 1))
              ok = false;
          }
      if (ok)
        return k;
    }
  return 0;
}

/* ---- the audit ------------------------------------------------------------ */

typedef struct lib
{
  char *soname;
  char *realpath; /* NULL: not found */
  char **needed;
} lib_t;

typedef struct extref
{
  smap_t libs;      /* soname -> [realpath] or no value (not found) */
  smap_t blacklist; /* soname -> symbols */
} extref_t;

typedef struct tree
{
  char *rel;       /* path in the wheel */
  elf_info_t *info;
  char **needed;   /* DT_NEEDED minus excluded */
  lib_t *libs;
  size_t nlibs;
  bool full;       /* in auditwheel's full_elftree */
  extref_t *refs;  /* one per policy */
} tree_t;

struct ib_wheel_audit
{
  char *wheel;       /* base name */
  bool pure;
  json_t *root;
  policy_t *pol;
  size_t npol;
  tree_t *t;
  size_t nt;
  extref_t *refs;    /* merged, one per policy */
  smap_t versioned;  /* the symbol policy's versioned symbols */
  size_t overall, sym, ucs, pyfpe, blacklist, machine, ref, graft;
  /* cache of libraries read while resolving */
  elf_info_t **cache;
  size_t ncache;
  char **conf_paths, **env_paths;
  char *wheel_dir;
  char *sysroot; /* prefix of every library path ("" : this host) */
};

static const char *const driver_patterns[] = { "libcuda.so*", "libnvidia-*.so*", NULL };

static bool
excluded (char *const *pats, const char *s)
{
  const char *b = strrchr (s, '/');
  b = b ? b + 1 : s;
  for (size_t i = 0; driver_patterns[i]; i++)
    if (fnmatch (driver_patterns[i], b, 0) == 0)
      return true;
  for (size_t i = 0; pats && pats[i]; i++)
    if (fnmatch (pats[i], s, 0) == 0)
      return true;
  return false;
}

static int
cached_elf (ib_wheel_audit_t *a, const char *path, elf_info_t **out, ib_error_t *err)
{
  for (size_t i = 0; i < a->ncache; i++)
    if (strcmp (a->cache[i]->path, path) == 0)
      {
        *out = a->cache[i];
        return 0;
      }
  if (elf_read (path, NULL, out, err) < 0)
    return -1;
  if (*out)
    {
      a->cache = xrealloc (a->cache, (a->ncache + 1) * sizeof *a->cache);
      a->cache[a->ncache++] = *out;
    }
  return 0;
}

/* os.path.normpath: lexical; "." and ".." resolved, "//" collapsed.  Caller frees. */
static char *
normpath (const char *p)
{
  bool abs = p[0] == '/';
  cleanup_strv char **parts = NULL;
  cleanup_free char *c = xstrdup (p);
  char *save = NULL;
  for (char *t = strtok_r (c, "/", &save); t; t = strtok_r (NULL, "/", &save))
    {
      size_t n = ib_strv_len (parts);
      if (strcmp (t, ".") == 0)
        continue;
      if (strcmp (t, "..") == 0 && n > 0 && strcmp (parts[n - 1], "..") != 0)
        {
          free (parts[n - 1]);
          parts[n - 1] = NULL;
          continue;
        }
      if (strcmp (t, "..") == 0 && abs)
        continue;
      ib_strv_push (&parts, t);
    }
  ib_buf_t b = { 0 };
  if (abs)
    ib_buf_puts (&b, "/");
  for (size_t i = 0; parts && parts[i]; i++)
    ib_buf_printf (&b, "%s%s", i ? "/" : "", parts[i]);
  if (b.len == 0)
    ib_buf_puts (&b, ".");
  return ib_buf_steal (&b);
}

/* lddtree's readlink(): follow symlinks of the last component only (a
 * directory symlink such as /lib -> usr/lib stays), then normpath. */
static char *
resolve_links (const char *path, const char *sysroot)
{
  char *p = xstrdup (path);
  for (int hops = 0; hops < 40; hops++)
    {
      char buf[PATH_MAX];
      ssize_t n = readlink (p, buf, sizeof buf - 1);
      if (n < 0)
        break;
      buf[n] = '\0';
      char *next;
      if (buf[0] == '/')
        next = xasprintf ("%s%s", sysroot, buf);
      else
        {
          cleanup_free char *d = xstrdup (p);
          char *sl = strrchr (d, '/');
          if (sl)
            *sl = '\0';
          next = sl ? xasprintf ("%s/%s", *d ? d : "", buf) : xstrdup (buf);
        }
      free (p);
      p = next;
    }
  char *r = normpath (p);
  free (p);
  return r;
}

static void
add_dir (char ***v, const char *d)
{
  struct stat st;
  if (stat (d, &st) == 0 && S_ISDIR (st.st_mode))
    strv_add_unique (v, d);
}

/* An RPATH/RUNPATH entry with $ORIGIN and ${ORIGIN} replaced by `dir`
 * (the directory of the object that holds it), as ld.so does; caller frees. */
static char *
expand_origin (const char *entry, const char *dir)
{
  ib_buf_t b = { 0 };
  const char *s = entry;
  while (*s)
    {
      if (strncmp (s, "${ORIGIN}", 9) == 0)
        {
          ib_buf_puts (&b, dir);
          s += 9;
        }
      else if (strncmp (s, "$ORIGIN", 7) == 0)
        {
          ib_buf_puts (&b, dir);
          s += 7;
        }
      else
        ib_buf_append (&b, s++, 1);
    }
  return ib_buf_steal (&b);
}

/* parse_ld_paths: $ORIGIN relative to `origin_file`'s directory; an empty
 * entry is the current directory; only existing directories kept. */
static void
expand_paths (char *const *in, const char *origin_file, const char *sysroot, char ***out)
{
  cleanup_free char *dir = xstrdup (origin_file);
  char *sl = strrchr (dir, '/');
  if (sl)
    *sl = '\0';
  for (size_t i = 0; in && in[i]; i++)
    {
      cleanup_free char *p = NULL;
      if (!*in[i])
        p = getcwd (NULL, 0);
      else if (strstr (in[i], "$ORIGIN") || strstr (in[i], "${ORIGIN}"))
        p = expand_origin (in[i], dir);
      else
        p = xasprintf ("%s%s", in[i][0] == '/' ? sysroot : "", in[i]);
      if (!p)
        continue;
      cleanup_free char *np = normpath (p);
      add_dir (out, np);
    }
}

static void
parse_ld_so_conf (const char *file, const char *sysroot, char ***out, int depth)
{
  if (depth > 8)
    return;
  char *text = NULL;
  size_t len;
  ib_error_t e = NULL;
  if (ib_read_file (file, &text, &len, &e) < 0)
    {
      ib_error_free (&e);
      return;
    }
  char *save = NULL;
  for (char *line = strtok_r (text, "\n", &save); line; line = strtok_r (NULL, "\n", &save))
    {
      char *h = strchr (line, '#');
      if (h)
        *h = '\0';
      while (*line && isspace ((unsigned char) *line))
        line++;
      char *end = line + strlen (line);
      while (end > line && isspace ((unsigned char) end[-1]))
        *--end = '\0';
      if (!*line)
        continue;
      if (strncmp (line, "include", 7) == 0 && isspace ((unsigned char) line[7]))
        {
          char *pat = line + 8;
          while (isspace ((unsigned char) *pat))
            pat++;
          cleanup_free char *full = NULL;
          if (*pat != '/')
            {
              cleanup_free char *d = xstrdup (file);
              *strrchr (d, '/') = '\0';
              full = ib_path_join (d, pat);
            }
          else
            full = xasprintf ("%s%s", sysroot, pat);
          glob_t g;
          if (glob (full, 0, NULL, &g) == 0)
            {
              for (size_t k = 0; k < g.gl_pathc; k++)
                parse_ld_so_conf (g.gl_pathv[k], sysroot, out, depth + 1);
              globfree (&g);
            }
        }
      else
        {
          cleanup_free char *full = xasprintf ("%s%s", *line == '/' ? sysroot : "", line);
          cleanup_free char *np = normpath (full);
          add_dir (out, np);
        }
    }
  free (text);
}

typedef struct ldpaths
{
  char **rpath, **runpath, **interp; /* of the top-level object */
} ldpaths_t;

static bool
elf_compatible (const elf_info_t *a, const elf_info_t *b)
{
  return a->cls == b->cls && a->data == b->data && a->machine == b->machine
         && osabi_compatible (a->osabi, b->osabi);
}

static lib_t *
tree_lib (tree_t *t, const char *soname)
{
  for (size_t i = 0; i < t->nlibs; i++)
    if (strcmp (t->libs[i].soname, soname) == 0)
      return &t->libs[i];
  return NULL;
}

static bool
is_libpython (const char *s)
{
  /* ^libpython\d+\.\d+m?.so(\.\d)*$ */
  if (!ib_str_has_prefix (s, "libpython"))
    return false;
  s += 9;
  if (!isdigit ((unsigned char) *s))
    return false;
  while (isdigit ((unsigned char) *s))
    s++;
  if (*s++ != '.' || !isdigit ((unsigned char) *s))
    return false;
  while (isdigit ((unsigned char) *s))
    s++;
  if (*s == 'm')
    s++;
  if (!*s++ || strncmp (s, "so", 2) != 0)
    return false;
  s += 2;
  while (*s)
    {
      if (s[0] != '.' || !isdigit ((unsigned char) s[1]))
        return false;
      s += 2;
    }
  return true;
}

/* lddtree's ldd(): resolve the needed libraries of `info` into t->libs,
 * depth first, each soname once per tree. */
static int
ldd (ib_wheel_audit_t *a, tree_t *t, const elf_info_t *info, const ldpaths_t *lp,
     char *const *exclude, char ***needed_out, ib_error_t *err)
{
  cleanup_strv char **rp = NULL, **rn = NULL;
  expand_paths (info->rpath, info->path, a->sysroot, &rp);
  expand_paths (info->runpath, info->path, a->sysroot, &rn);
  cleanup_strv char **all = NULL;
  char **groups[] = { lp->rpath, rp, rn, a->env_paths, lp->runpath, a->conf_paths, lp->interp };
  for (size_t g = 0; g < sizeof groups / sizeof *groups; g++)
    for (size_t k = 0; groups[g] && groups[g][k]; k++)
      ib_strv_push (&all, groups[g][k]);
  for (size_t k = 0; info->needed && info->needed[k]; k++)
    {
      const char *so = info->needed[k];
      if (excluded (exclude, so))
        continue;
      ib_strv_push (needed_out, so);
      if (tree_lib (t, so))
        continue;
      t->libs = xrealloc (t->libs, (t->nlibs + 1) * sizeof *t->libs);
      lib_t *l = &t->libs[t->nlibs++];
      *l = (lib_t) { xstrdup (so), NULL, NULL };
      if (is_libpython (so))
        continue;
      elf_info_t *dep = NULL;
      char *found = NULL;
      for (size_t d = 0; all && all[d] && !found; d++)
        {
          cleanup_free char *p = ib_path_join (all[d], so);
          char *r = resolve_links (p, a->sysroot);
          struct stat st;
          if (stat (r, &st) < 0 || !S_ISREG (st.st_mode))
            {
              free (r);
              continue;
            }
          if (cached_elf (a, r, &dep, err) < 0)
            {
              free (r);
              return -1;
            }
          if (dep && elf_compatible (info, dep))
            found = r;
          else
            free (r);
        }
      if (!found)
        continue;
      if (excluded (exclude, found))
        {
          /* excluded by its path: out of the tree, and out of the
           * needed list `so` was pushed on last */
          free (found);
          free (l->soname);
          t->nlibs--;
          size_t last = ib_strv_len (*needed_out) - 1;
          free ((*needed_out)[last]);
          (*needed_out)[last] = NULL;
          continue;
        }
      size_t idx = (size_t) (l - t->libs);
      t->libs[idx].realpath = found;
      cleanup_strv char **dn = NULL;
      if (ldd (a, t, dep, lp, exclude, &dn, err) < 0)
        return -1;
      t->libs[idx].needed = steal_pointer (&dn);
    }
  return 0;
}

static bool
in_whitelist (const policy_t *p, const char *so)
{
  if (strstr (so, "ld-linux") || strcmp (so, "ld64.so.2") == 0 || strcmp (so, "ld64.so.1") == 0)
    return true;
  return json_array_has (p->whitelist, so);
}

static bool
is_subdir (const char *path, const char *dir)
{
  size_t l = strlen (dir);
  return path && strncmp (path, dir, l) == 0 && (path[l] == '/' || path[l] == '\0');
}

/* lddtree_external_references for one tree and every policy. */
static int
external_refs (ib_wheel_audit_t *a, tree_t *t, ib_error_t *err)
{
  (void) err;
  t->refs = xmalloc (a->npol * sizeof *t->refs);
  for (size_t k = 1; k < a->npol; k++)
    {
      const policy_t *p = &a->pol[k];
      extref_t *r = &t->refs[k];
      /* blacklisted symbols of needed libraries the object really uses */
      const char *key;
      json_t *syms;
      json_object_foreach (p->blacklist, key, syms)
        {
          if (!ib_strv_has (t->needed, key))
            continue;
          size_t i;
          json_t *s;
          json_array_foreach (syms, i, s)
            {
              const char *sym = json_string_value (s);
              if (sym && (strcmp (sym, "*") == 0
                          || (t->info->undef
                              && bsearch (&sym, t->info->undef, ib_strv_len (t->info->undef),
                                          sizeof (char *), cmp_strp))))
                strv_add_unique (&smap_get (&r->blacklist, key)->vals, sym);
            }
        }
      for (size_t i = 0; i < r->blacklist.n; i++)
        strv_sort (r->blacklist.e[i].vals);
      /* get_req_external: the closure over needed libraries off the whitelist */
      cleanup_strv char **todo = NULL, **reqs = NULL;
      for (size_t i = 0; t->needed && t->needed[i]; i++)
        if (!in_whitelist (p, t->needed[i]))
          strv_add_unique (&todo, t->needed[i]);
      while (ib_strv_len (todo))
        {
          size_t last = ib_strv_len (todo) - 1;
          cleanup_free char *lib = todo[last];
          todo[last] = NULL;
          strv_add_unique (&reqs, lib);
          lib_t *l = tree_lib (t, lib);
          for (size_t i = 0; l && l->needed && l->needed[i]; i++)
            if (!in_whitelist (p, l->needed[i]) && !ib_strv_has (reqs, l->needed[i]))
              strv_add_unique (&todo, l->needed[i]);
        }
      for (size_t i = 0; reqs && reqs[i]; i++)
        {
          lib_t *l = tree_lib (t, reqs[i]);
          const char *rp = l ? l->realpath : NULL;
          if (is_subdir (rp, a->wheel_dir))
            continue; /* resolved inside the wheel (RPATH): not external */
          smap_ent_t *e = smap_get (&r->libs, reqs[i]);
          if (rp)
            {
              ib_strv_free (e->vals);
              e->vals = NULL;
              ib_strv_push (&e->vals, rp);
            }
        }
    }
  return 0;
}

static void
extref_clear (extref_t *r)
{
  smap_clear (&r->libs);
  smap_clear (&r->blacklist);
}

void
ib_wheel_audit_free (ib_wheel_audit_t *a)
{
  if (!a)
    return;
  for (size_t i = 0; i < a->nt; i++)
    {
      tree_t *t = &a->t[i];
      free (t->rel);
      elf_info_free (t->info);
      ib_strv_free (t->needed);
      for (size_t k = 0; k < t->nlibs; k++)
        {
          free (t->libs[k].soname);
          free (t->libs[k].realpath);
          ib_strv_free (t->libs[k].needed);
        }
      free (t->libs);
      for (size_t k = 0; t->refs && k < a->npol; k++)
        extref_clear (&t->refs[k]);
      free (t->refs);
    }
  free (a->t);
  for (size_t k = 0; a->refs && k < a->npol; k++)
    extref_clear (&a->refs[k]);
  free (a->refs);
  for (size_t k = 0; k < a->npol; k++)
    {
      free (a->pol[k].name);
      ib_strv_free (a->pol[k].aliases);
    }
  free (a->pol);
  json_decref (a->root);
  smap_clear (&a->versioned);
  for (size_t i = 0; i < a->ncache; i++)
    elf_info_free (a->cache[i]);
  free (a->cache);
  ib_strv_free (a->conf_paths);
  ib_strv_free (a->env_paths);
  free (a->wheel_dir);
  free (a->sysroot);
  free (a->wheel);
  free (a);
}

/* The architecture the file name's platform tags name, or NULL. */
static const char *
name_arch (const char *platform)
{
  static const char *const arches[] = { "x86_64", "i686", "aarch64", "ppc64le", "ppc64",
                                        "s390x", "armv7l", "riscv64", "loongarch64", NULL };
  for (size_t i = 0; arches[i]; i++)
    {
      cleanup_free char *suffix = xasprintf ("_%s", arches[i]);
      if (ib_str_has_suffix (platform, suffix))
        return arches[i];
    }
  return NULL;
}

static int
collect_files (const char *root, const char *rel, char ***out, ib_error_t *err)
{
  cleanup_free char *dir = rel ? ib_path_join (root, rel) : xstrdup (root);
  DIR *d = opendir (dir);
  if (!d)
    return ib_error_sys (err, errno, "opendir %s", dir);
  struct dirent *de;
  int r = 0;
  while (r == 0 && (de = readdir (d)))
    {
      if (strcmp (de->d_name, ".") == 0 || strcmp (de->d_name, "..") == 0)
        continue;
      cleanup_free char *sub = rel ? xasprintf ("%s/%s", rel, de->d_name) : xstrdup (de->d_name);
      cleanup_free char *full = ib_path_join (root, sub);
      struct stat st;
      if (lstat (full, &st) < 0)
        r = ib_error_sys (err, errno, "stat %s", full);
      else if (S_ISDIR (st.st_mode))
        r = collect_files (root, sub, out, err);
      else if (S_ISREG (st.st_mode))
        ib_strv_push (out, sub);
    }
  closedir (d);
  return r;
}

static bool
tree_resolved (const tree_t *t)
{
  for (size_t i = 0; i < t->nlibs; i++)
    if (!t->libs[i].realpath)
      return false;
  return true;
}

static void
tree_add_lib (tree_t *t, const lib_t *l)
{
  t->libs = xrealloc (t->libs, (t->nlibs + 1) * sizeof *t->libs);
  t->libs[t->nlibs++] = (lib_t) { xstrdup (l->soname), xstrdup (l->realpath),
                                  ib_strv_dup (l->needed) };
}

/* auditwheel's _fixup_elf_trees: a library of the wheel that is no Python
 * extension and has dependencies its own search paths do not find takes
 * them (and what they need) from the tree of an object that loads it and
 * whose dependencies are all found: at run time it is loaded there. */
static void
fixup_trees (ib_wheel_audit_t *a)
{
  bool *resolved = xmalloc ((a->nt + 1) * sizeof *resolved);
  for (size_t i = 0; i < a->nt; i++)
    resolved[i] = tree_resolved (&a->t[i]);
  for (size_t i = 0; i < a->nt; i++)
    {
      tree_t *t = &a->t[i];
      if (t->info->pyext || resolved[i])
        continue;
      const tree_t *ref = NULL;
      for (size_t k = 0; k < a->nt && !ref; k++)
        if (resolved[k])
          for (size_t j = 0; j < a->t[k].nlibs && !ref; j++)
            if (a->t[k].libs[j].realpath && strcmp (a->t[k].libs[j].realpath, t->info->path) == 0)
              ref = &a->t[k];
      if (!ref)
        continue;
      tree_t fixed = { 0 };
      cleanup_strv char **all = NULL;
      for (size_t j = 0; j < t->nlibs; j++)
        ib_strv_push (&all, t->libs[j].soname);
      for (size_t j = 0; j < t->nlibs; j++)
        {
          lib_t *l = &t->libs[j];
          lib_t *rl = l->realpath ? NULL : tree_lib ((tree_t *) ref, l->soname);
          if (!rl)
            {
              if (!l->realpath)
                ib_warn ("wheel %s: %s not found in %s's tree", a->wheel, l->soname, ref->rel);
              tree_add_lib (&fixed, l);
              continue;
            }
          tree_add_lib (&fixed, rl);
          /* and what it needs, transitively, from the same tree */
          cleanup_strv char **todo = NULL;
          for (size_t k = 0; rl->needed && rl->needed[k]; k++)
            if (!ib_strv_has (all, rl->needed[k]))
              strv_add_unique (&todo, rl->needed[k]);
          while (ib_strv_len (todo))
            {
              size_t last = ib_strv_len (todo) - 1;
              cleanup_free char *so = todo[last];
              todo[last] = NULL;
              strv_add_unique (&all, so);
              lib_t *dep = tree_lib ((tree_t *) ref, so);
              if (!dep)
                {
                  ib_warn ("wheel %s: %s not found in %s's tree", a->wheel, so, ref->rel);
                  continue;
                }
              if (!tree_lib (&fixed, so))
                tree_add_lib (&fixed, dep);
              for (size_t k = 0; dep->needed && dep->needed[k]; k++)
                if (!ib_strv_has (all, dep->needed[k]))
                  strv_add_unique (&todo, dep->needed[k]);
            }
        }
      for (size_t j = 0; j < t->nlibs; j++)
        {
          free (t->libs[j].soname);
          free (t->libs[j].realpath);
          ib_strv_free (t->libs[j].needed);
        }
      free (t->libs);
      t->libs = fixed.libs;
      t->nlibs = fixed.nlibs;
    }
  free (resolved);
}

int
ib_wheel_audit (ib_wheel_t *w, const ib_wheel_audit_opts_t *opts, ib_wheel_audit_t **out,
                ib_error_t *err)
{
  static const ib_wheel_audit_opts_t defaults = { 0 };
  if (!opts)
    opts = &defaults;
  *out = NULL;
  if (elf_version (EV_CURRENT) == EV_NONE)
    return ib_error_set (err, EINVAL, "libelf: %s", elf_errmsg (-1));
  ib_wheel_audit_t *a = xmalloc (sizeof *a);
  a->wheel = xstrdup (w->base);
  a->wheel_dir = xstrdup (w->dir);
  a->sysroot = normpath (opts->root && *opts->root ? opts->root : "/");
  if (strcmp (a->sysroot, "/") == 0)
    a->sysroot[0] = '\0';
  int r = -1;
  const char *arch = name_arch (w->name.platform);
  const char *elf_arch = NULL;
  cleanup_strv char **files = NULL;
  cleanup_strv char **purelib = NULL;
  cleanup_strv char **needed_libs = NULL;
  if (collect_files (w->dir, NULL, &files, err) < 0)
    goto out;
  strv_sort (files);
  for (size_t i = 0; files && files[i]; i++)
    {
      if (ib_str_has_suffix (files[i], ".py"))
        continue;
      cleanup_free char *full = ib_path_join (w->dir, files[i]);
      const char *b = strrchr (files[i], '/');
      b = b ? b + 1 : files[i];
      cleanup_free char *mod = xstrndup (b, strcspn (b, "."));
      elf_info_t *info = NULL;
      if (elf_read (full, mod, &info, err) < 0)
        goto out;
      if (!info)
        continue;
      /* a shared library under a .data/purelib directory */
      if (strstr (files[i], "/purelib/") || ib_str_has_prefix (files[i], "purelib/"))
        {
          ib_strv_push (&purelib, b);
          elf_info_free (info);
          continue;
        }
      if (purelib)
        {
          elf_info_free (info);
          continue;
        }
      const char *ea = base_arch (info);
      if (!ea || (arch && strcmp (ea, arch) != 0) || (elf_arch && strcmp (ea, elf_arch) != 0))
        {
          ib_warn ("wheel %s: ignoring %s (%s architecture)", w->base, files[i],
                   ea ? ea : "unknown");
          elf_info_free (info);
          continue;
        }
      if (info->interp && strstr (info->interp, "ld-musl-"))
        {
          elf_info_free (info);
          ib_error_set (err, ENOTSUP, "wheel %s: %s: musl libc objects are not supported "
                        "(only manylinux policies are shipped)", w->base, files[i]);
          goto out;
        }
      for (size_t k = 0; info->needed && info->needed[k]; k++)
        if (ib_str_has_prefix (info->needed[k], "libc.musl-")
            || ib_str_has_prefix (info->needed[k], "ld-musl-"))
          {
            elf_info_free (info);
            ib_error_set (err, ENOTSUP, "wheel %s: %s: musl libc objects are not supported "
                          "(only manylinux policies are shipped)", w->base, files[i]);
            goto out;
          }
      elf_arch = ea;
      a->t = xrealloc (a->t, (a->nt + 1) * sizeof *a->t);
      tree_t *t = &a->t[a->nt++];
      memset (t, 0, sizeof *t);
      t->rel = xstrdup (files[i]);
      t->info = info;
    }
  if (purelib)
    {
      cleanup_free char *list = NULL;
      ib_buf_t b = { 0 };
      for (size_t i = 0; purelib[i]; i++)
        ib_buf_printf (&b, "%s%s", i ? ", " : "", purelib[i]);
      list = ib_buf_steal (&b);
      ib_error_set (err, EINVAL,
                    "wheel %s: invalid binary wheel: shared libraries in the purelib folder: "
                    "%s; the wheel has to be platlib compliant",
                    w->base, list);
      goto out;
    }
  if (a->nt == 0)
    {
      a->pure = true;
      r = 0;
      goto out;
    }
  if (!arch)
    arch = elf_arch;
  if (load_policies (arch, &a->root, &a->pol, &a->npol, err) < 0)
    {
      ib_error_prefix (err, "wheel %s", w->base);
      goto out;
    }
  /* library search paths: LD_LIBRARY_PATH, /etc/ld.so.conf, defaults */
  const char *env = getenv ("LD_LIBRARY_PATH");
  if (env && *env && !*a->sysroot) /* the host's, not the build's */
    {
      cleanup_strv char **raw = NULL;
      split_path_list (env, &raw);
      expand_paths (raw, "/", "", &a->env_paths);
    }
  {
    cleanup_free char *conf = xasprintf ("%s/etc/ld.so.conf", a->sysroot);
    parse_ld_so_conf (conf, a->sysroot, &a->conf_paths, 0);
  }
  const char *defaults_dirs[] = { "/lib", "/lib64", "/usr/lib", "/usr/lib64", NULL };
  for (size_t i = 0; defaults_dirs[i]; i++)
    {
      cleanup_free char *d = xasprintf ("%s%s", a->sysroot, defaults_dirs[i]);
      add_dir (&a->conf_paths, d);
    }
  /* each object's tree */
  for (size_t i = 0; i < a->nt; i++)
    {
      tree_t *t = &a->t[i];
      ldpaths_t lp = { 0 };
      expand_paths (t->info->rpath, t->info->path, a->sysroot, &lp.rpath);
      expand_paths (t->info->runpath, t->info->path, a->sysroot, &lp.runpath);
      if (t->info->interp)
        {
          cleanup_free char *d = xstrdup (t->info->interp);
          char *sl = strrchr (d, '/');
          if (sl)
            {
              *sl = '\0';
              cleanup_strv char **raw = NULL;
              ib_strv_push (&raw, *d ? d : "/");
              cleanup_free char *ud = xasprintf ("/usr%s", d);
              ib_strv_push (&raw, ud);
              expand_paths (raw, "/", a->sysroot, &lp.interp);
            }
        }
      /* the top object's own RPATH is searched as lddtree does: via lp.rpath
       * (and again as its own, harmless) */
      r = ldd (a, t, t->info, &lp, opts->exclude, &t->needed, err);
      ib_strv_free (lp.rpath);
      ib_strv_free (lp.runpath);
      ib_strv_free (lp.interp);
      if (r < 0)
        goto out;
      r = -1;
    }
  fixup_trees (a);
  /* full_elftree: extensions, and other objects no object in the wheel needs */
  for (size_t i = 0; i < a->nt; i++)
    for (size_t k = 0; a->t[i].needed && a->t[i].needed[k]; k++)
      strv_add_unique (&needed_libs, a->t[i].needed[k]);
  for (size_t i = 0; i < a->nt; i++)
    {
      tree_t *t = &a->t[i];
      const char *b = strrchr (t->rel, '/');
      b = b ? b + 1 : t->rel;
      t->full = t->info->pyext || !ib_strv_has (needed_libs, b);
      if (external_refs (a, t, err) < 0)
        goto out;
    }
  /* merge the references of the full tree; versioned symbols of every object */
  a->refs = xmalloc (a->npol * sizeof *a->refs);
  smap_t versioned = { 0 };
  bool pyfpe = false, ucs2 = false;
  for (size_t i = 0; i < a->nt; i++)
    {
      tree_t *t = &a->t[i];
      smap_merge (&versioned, &t->info->verneed);
      if (t->info->pyext)
        {
          pyfpe |= t->info->pyfpe;
          ucs2 |= t->info->py2 && t->info->ucs2;
        }
      if (!t->full)
        continue;
      for (size_t k = 1; k < a->npol; k++)
        {
          smap_merge (&a->refs[k].blacklist, &t->refs[k].blacklist);
          for (size_t j = 0; j < t->refs[k].libs.n; j++)
            {
              smap_ent_t *src = &t->refs[k].libs.e[j];
              smap_ent_t *dst = smap_get (&a->refs[k].libs, src->key);
              ib_strv_free (dst->vals);
              dst->vals = ib_strv_dup (src->vals);
            }
        }
    }
  for (size_t k = 1; k < a->npol; k++)
    for (size_t j = 0; j < a->refs[k].blacklist.n; j++)
      strv_sort (a->refs[k].blacklist.e[j].vals);
  /* symbol policy: per policy, the wheel's versions plus those of the
   * external libraries that policy would graft */
  size_t best = 0;
  bool have_best = false;
  smap_t best_vs = { 0 };
  for (size_t k = 1; k < a->npol; k++)
    {
      smap_t ps = { 0 };
      smap_copy (&ps, &versioned);
      for (size_t j = 0; j < a->refs[k].libs.n; j++)
        {
          char **v = a->refs[k].libs.e[j].vals;
          if (!v || !v[0])
            continue;
          elf_info_t *li = NULL;
          if (cached_elf (a, v[0], &li, err) < 0)
            {
              smap_clear (&ps);
              smap_clear (&versioned);
              smap_clear (&best_vs);
              goto out;
            }
          if (li)
            smap_merge (&ps, &li->verneed);
        }
      size_t found = symbols_policy (a->pol, a->npol, &ps);
      if (found > k)
        found = k;
      if (!have_best || found > best)
        {
          best = found;
          have_best = true;
          smap_copy (&best_vs, &ps);
        }
      smap_clear (&ps);
    }
  if (have_best)
    {
      a->sym = best;
      a->versioned = best_vs;
      smap_clear (&versioned);
    }
  else
    {
      a->sym = symbols_policy (a->pol, a->npol, &versioned);
      a->versioned = versioned;
    }
  size_t highest = a->npol - 1;
  a->ref = 0;
  a->blacklist = 0;
  for (size_t k = 1; k < a->npol; k++)
    {
      if (a->refs[k].libs.n == 0)
        a->ref = k;
      if (a->refs[k].blacklist.n == 0)
        a->blacklist = k;
    }
  /* graft policy */
  size_t graft_count = SIZE_MAX;
  for (size_t k = 1; k < a->npol; k++)
    {
      bool counts = true;
      if (opts->requested_base && strcmp (opts->requested_base, "auto") != 0)
        {
          cleanup_free char *pre = xasprintf ("%s_", opts->requested_base);
          counts = ib_str_has_prefix (a->pol[k].name, pre);
        }
      if (counts && a->refs[k].libs.n < graft_count)
        graft_count = a->refs[k].libs.n;
    }
  if (graft_count == SIZE_MAX)
    graft_count = 0;
  a->graft = 0;
  for (size_t k = 1; k < a->npol; k++)
    if (a->refs[k].libs.n <= graft_count)
      a->graft = k;
  /* machine policy: x86-64 ISA levels above the baseline */
  a->machine = highest;
  if (strcmp (arch, "x86_64") == 0)
    for (size_t i = 0; i < a->nt; i++)
      {
        tree_t *t = &a->t[i];
        if (!t->full)
          continue;
        if (t->info->isa_level > 0)
          a->machine = 0;
        for (size_t j = 0; j < t->nlibs; j++)
          {
            lib_t *l = &t->libs[j];
            if (!l->realpath)
              continue;
            bool external = false;
            for (size_t k = 1; k < a->npol && !external; k++)
              external = smap_find (&a->refs[k].libs, l->soname) != NULL;
            if (!external)
              continue;
            elf_info_t *li = NULL;
            if (cached_elf (a, l->realpath, &li, err) < 0)
              goto out;
            if (!li || li->isa_level == 0)
              continue;
            size_t f = 0;
            for (size_t k = 1; k < a->npol; k++)
              if (json_array_has (a->pol[k].whitelist, l->soname))
                f = k;
            if (f > 0)
              {
                if (f < a->machine)
                  a->machine = f;
              }
            else
              a->machine = 0;
          }
      }
  a->ucs = ucs2 ? 0 : highest;
  a->pyfpe = pyfpe ? 0 : highest;
  size_t o = a->sym;
  size_t cands[] = { a->ucs, a->pyfpe, a->blacklist, a->machine };
  for (size_t i = 0; i < 4; i++)
    if (cands[i] < o)
      o = cands[i];
  if (opts->requested_base && a->graft < o)
    o = a->graft;
  if (!opts->allow_graft && a->ref < o)
    o = a->ref;
  a->overall = o;
  r = 0;
out:
  if (r < 0)
    ib_wheel_audit_free (a);
  else
    *out = a;
  return r;
}

const char *
ib_wheel_audit_tag (const ib_wheel_audit_t *a)
{
  return a->pure ? NULL : a->pol[a->overall].name;
}

/* ---- output ------------------------------------------------------------- */

/* printp(): a blank line, then `text` wrapped at 70 columns (Python's
 * textwrap.wrap without breaking long words or at hyphens). */
static void
printp (ib_buf_t *b, const char *text)
{
  ib_buf_puts (b, "\n");
  size_t col = 0;
  const char *s = text;
  while (*s)
    {
      while (*s == ' ')
        s++;
      if (!*s)
        break;
      size_t l = strcspn (s, " ");
      if (col > 0 && col + 1 + l > 70)
        {
          ib_buf_puts (b, "\n");
          col = 0;
        }
      if (col > 0)
        {
          ib_buf_puts (b, " ");
          col++;
        }
      ib_buf_append (b, s, l);
      col += l;
      s += l;
    }
  ib_buf_puts (b, "\n");
}

static char *
libs_json (const smap_t *libs)
{
  json_t *o = json_object ();
  for (size_t i = 0; i < libs->n; i++)
    json_object_set_new (o, libs->e[i].key,
                         libs->e[i].vals && libs->e[i].vals[0]
                             ? json_string (libs->e[i].vals[0])
                             : json_null ());
  char *s = json_dumps (o, JSON_SORT_KEYS | JSON_COMPACT);
  json_decref (o);
  /* Python's json.dumps separators: ", " and ": " */
  ib_buf_t b = { 0 };
  bool in_str = false;
  for (const char *p = s; *p; p++)
    {
      ib_buf_append (&b, p, 1);
      if (*p == '"' && (p == s || p[-1] != '\\'))
        in_str = !in_str;
      else if (!in_str && (*p == ',' || *p == ':'))
        ib_buf_puts (&b, " ");
    }
  free (s);
  return ib_buf_steal (&b);
}

char *
ib_wheel_audit_show (const ib_wheel_audit_t *a)
{
  ib_buf_t b = { 0 };
  if (a->pure)
    {
      cleanup_free char *t
          = xasprintf ("%s is a pure Python wheel: it holds no ELF object, no platform tag "
                       "applies.", a->wheel);
      printp (&b, t);
      return ib_buf_steal (&b);
    }
  const policy_t *p = a->pol;
  size_t highest = a->npol - 1;
  cleanup_free char *head = xasprintf (
      "%s is consistent with the following platform tag: \"%s\".", a->wheel, p[a->overall].name);
  printp (&b, head);
  if (a->pyfpe == 0)
    printp (&b, "This wheel uses the PyFPE_jbuf function, which is not compatible with the "
                "manylinux/musllinux tags. (see https://www.python.org/dev/peps/pep-0513/"
                "#fpectl-builds-vs-no-fpectl-builds)");
  else if (a->ucs == 0)
    printp (&b, "This wheel is compiled against a narrow unicode (UCS2) version of Python, "
                "which is not compatible with the manylinux/musllinux tags.");
  else if (a->machine == 0)
    printp (&b, "This wheel depends on unsupported ISA extensions.");
  if (a->pyfpe == 0 || a->ucs == 0 || a->machine == 0)
    return ib_buf_steal (&b);
  if (a->versioned.n == 0)
    printp (&b, "The wheel references no external versioned symbols from system-provided "
                "shared libraries.");
  else
    {
      ib_buf_t t = { 0 };
      ib_buf_puts (&t, "The wheel references external versioned symbols in these "
                       "system-provided shared libraries: ");
      for (size_t i = 0; i < a->versioned.n; i++)
        {
          cleanup_strv char **v = ib_strv_dup (a->versioned.e[i].vals);
          strv_sort (v);
          ib_buf_printf (&t, "%s%s with versions {", i ? ", " : "", a->versioned.e[i].key);
          for (size_t k = 0; v && v[k]; k++)
            ib_buf_printf (&t, "%s'%s'", k ? ", " : "", v[k]);
          ib_buf_puts (&t, "}");
        }
      printp (&b, t.data);
      ib_buf_free (&t);
    }
  if (a->sym < highest)
    {
      cleanup_free char *t = xasprintf (
          "This constrains the platform tag to \"%s\". In order to achieve a more compatible "
          "tag, you would need to recompile a new wheel from source on a system with earlier "
          "versions of these libraries, such as a recent manylinux image.",
          p[a->sym].name);
      printp (&b, t);
      return ib_buf_steal (&b);
    }
  const smap_t *low = &a->refs[1].libs;
  if (low->n == 0)
    printp (&b, "The wheel requires no external shared libraries! :)");
  else
    {
      printp (&b, "The following external shared libraries are required by the wheel:");
      cleanup_free char *j = libs_json (low);
      ib_buf_printf (&b, "%s\n", j);
    }
  for (size_t k = a->overall + 1; k < a->npol; k++)
    {
      const extref_t *r = &a->refs[k];
      if (r->libs.n)
        {
          cleanup_free char *t = xasprintf ("In order to achieve the tag platform tag '%s' the "
                                            "following shared library dependencies will need "
                                            "to be eliminated:", p[k].name);
          printp (&b, t);
          cleanup_strv char **names = NULL;
          for (size_t i = 0; i < r->libs.n; i++)
            ib_strv_push (&names, r->libs.e[i].key);
          strv_sort (names);
          ib_buf_t l = { 0 };
          for (size_t i = 0; names[i]; i++)
            ib_buf_printf (&l, "%s%s", i ? ", " : "", names[i]);
          printp (&b, l.data);
          ib_buf_free (&l);
        }
      if (r->blacklist.n)
        {
          cleanup_free char *t = xasprintf ("In order to achieve the tag platform tag '%s' the "
                                            "following black-listed symbol dependencies will "
                                            "need to be eliminated:", p[k].name);
          printp (&b, t);
          cleanup_strv char **keys = NULL;
          for (size_t i = 0; i < r->blacklist.n; i++)
            ib_strv_push (&keys, r->blacklist.e[i].key);
          strv_sort (keys);
          for (size_t i = 0; keys[i]; i++)
            {
              ib_buf_t l = { 0 };
              ib_buf_printf (&l, "From %s: ", keys[i]);
              char **v = smap_find (&r->blacklist, keys[i])->vals;
              for (size_t s = 0; v && v[s]; s++)
                ib_buf_printf (&l, "%s%s", s ? ", " : "", v[s]);
              printp (&b, l.data);
              ib_buf_free (&l);
            }
        }
    }
  return ib_buf_steal (&b);
}

static json_t *
sorted_strings (char *const *v)
{
  cleanup_strv char **c = ib_strv_dup (v);
  strv_sort (c);
  json_t *arr = json_array ();
  for (size_t i = 0; c && c[i]; i++)
    json_array_append_new (arr, json_string (c[i]));
  return arr;
}

json_t *
ib_wheel_audit_json (const ib_wheel_audit_t *a)
{
  if (a->pure)
    return json_pack ("{s:i, s:s, s:b}", "version", 1, "wheel", a->wheel, "pure", 1);
  json_t *vs = json_object ();
  cleanup_strv char **keys = NULL;
  for (size_t i = 0; i < a->versioned.n; i++)
    ib_strv_push (&keys, a->versioned.e[i].key);
  strv_sort (keys);
  for (size_t i = 0; keys && keys[i]; i++)
    json_object_set_new (vs, keys[i], sorted_strings (smap_find (&a->versioned, keys[i])->vals));
  json_t *libs = json_object ();
  const smap_t *hl = &a->refs[a->npol - 1].libs;
  for (size_t i = 0; i < hl->n; i++)
    json_object_set_new (libs, hl->e[i].key,
                         hl->e[i].vals && hl->e[i].vals[0] ? json_string (hl->e[i].vals[0])
                                                           : json_null ());
  json_t *up = json_object ();
  for (size_t k = a->overall + 1; k < a->npol; k++)
    {
      const extref_t *r = &a->refs[k];
      json_t *e = json_object ();
      if (r->libs.n)
        {
          cleanup_strv char **names = NULL;
          for (size_t i = 0; i < r->libs.n; i++)
            ib_strv_push (&names, r->libs.e[i].key);
          json_object_set_new (e, "libs_to_eliminate", sorted_strings (names));
        }
      if (r->blacklist.n)
        {
          json_t *bl = json_object ();
          for (size_t i = 0; i < r->blacklist.n; i++)
            json_object_set_new (bl, r->blacklist.e[i].key,
                                 sorted_strings (r->blacklist.e[i].vals));
          json_object_set_new (e, "blacklisted_symbols", bl);
        }
      if (json_object_size (e))
        json_object_set_new (up, a->pol[k].name, e);
      else
        json_decref (e);
    }
  return json_pack ("{s:i, s:s, s:b, s:s, s:s, s:b, s:b, s:b, s:o, s:o, s:o}", "version", 1,
                    "wheel", a->wheel, "pure", 0, "overall_tag", a->pol[a->overall].name,
                    "sym_tag", a->pol[a->sym].name, "pyfpe", a->pyfpe == 0, "ucs2", a->ucs == 0,
                    "unsupported_isa", a->machine == 0, "versioned_symbols", vs,
                    "external_libs", libs, "policy_upgrades", up);
}

/* ---- the build's hook ---------------------------------------------------- */

static int
check_one (const char *path, const char *root, bool *pure, ib_error_t *err)
{
  ib_wheel_t *w = NULL;
  if (ib_wheel_open (path, &w, err) < 0)
    return -1;
  ib_wheel_audit_t *a = NULL;
  ib_wheel_audit_opts_t ao = { .root = root };
  if (ib_wheel_audit (w, &ao, &a, err) < 0)
    {
      ib_wheel_close (w);
      return -1;
    }
  const char *tag = ib_wheel_audit_tag (a);
  if (tag)
    ib_info ("wheel %s: verified, %zu files; platform tag %s", w->base, w->n, tag);
  else
    ib_info ("wheel %s: verified, %zu files; pure Python", w->base, w->n);
  if (pure)
    *pure = tag == NULL;
  ib_wheel_audit_free (a);
  ib_wheel_close (w);
  return 0;
}

int
ib_wheel_check_output (const char *path, ib_error_t *err)
{
  return check_one (path, NULL, NULL, err);
}

typedef struct output_check
{
  const char *root, *plat;
  char **exclude;
} output_check_t;

/* A wheel the output copied that fails its check or repair does not stay
 * in the destination: a CD step uploading dist/ wheels must not find it. */
static int
reject_wheel (const char *path, ib_error_t *err)
{
  if (unlink (path) == 0)
    return ib_error_prefix (err, "%s (removed)", path);
  return -1;
}

static int
check_or_repair (const char *path, const output_check_t *o, ib_error_t *err)
{
  bool pure = false;
  if (check_one (path, o->root, &pure, err) < 0)
    return reject_wheel (path, err);
  if (!o->plat || pure)
    return 0;
  cleanup_free char *dir = xstrdup (path);
  char *sl = strrchr (dir, '/');
  if (sl)
    *sl = '\0';
  ib_wheel_repair_opts_t ro = { .plat = o->plat, .out_dir = sl ? dir : ".",
                                .exclude = o->exclude, .root = o->root };
  cleanup_free char *out = NULL;
  if (ib_wheel_repair (path, &ro, &out, err) < 0)
    return reject_wheel (path, err);
  if (strcmp (out, path) != 0 && unlink (path) < 0)
    return ib_error_sys (err, errno, "remove %s (repaired as %s)", path, out);
  return 0;
}

/* Walk `src` (a directory copied into `dest`) for *.whl files. */
static int
check_copied_dir (const char *src, const char *dest, const char *rel, const output_check_t *o,
                  ib_error_t *err)
{
  cleanup_free char *dir = rel ? ib_path_join (src, rel) : xstrdup (src);
  DIR *d = opendir (dir);
  if (!d)
    return ib_error_sys (err, errno, "opendir %s", dir);
  cleanup_strv char **wheels = NULL, **subdirs = NULL;
  struct dirent *de;
  int r = 0;
  while (r == 0 && (de = readdir (d)))
    {
      if (strcmp (de->d_name, ".") == 0 || strcmp (de->d_name, "..") == 0)
        continue;
      cleanup_free char *sub = rel ? xasprintf ("%s/%s", rel, de->d_name) : xstrdup (de->d_name);
      cleanup_free char *full = ib_path_join (src, sub);
      struct stat st;
      if (lstat (full, &st) < 0)
        r = ib_error_sys (err, errno, "stat %s", full);
      else if (S_ISDIR (st.st_mode))
        ib_strv_push (&subdirs, sub);
      else if (S_ISREG (st.st_mode) && ib_str_has_suffix (de->d_name, ".whl"))
        ib_strv_push (&wheels, sub);
    }
  closedir (d);
  /* sorted: the log lines and the first failure do not depend on readdir */
  strv_sort (wheels);
  strv_sort (subdirs);
  for (size_t i = 0; r == 0 && wheels && wheels[i]; i++)
    {
      cleanup_free char *out = ib_path_join (dest, wheels[i]);
      r = check_or_repair (out, o, err);
    }
  for (size_t i = 0; r == 0 && subdirs && subdirs[i]; i++)
    r = check_copied_dir (src, dest, subdirs[i], o, err);
  return r;
}

int
ib_wheel_check_copied (const char *src, const char *dest, const char *root, const char *repair,
                       const char *repair_exclude, ib_error_t *err)
{
  output_check_t o = { .root = root, .plat = repair && *repair ? repair : NULL };
  cleanup_strv char **excl = NULL;
  if (repair_exclude && *repair_exclude)
    split_path_list (repair_exclude, &excl);
  o.exclude = excl;
  struct stat st;
  if (lstat (src, &st) < 0)
    return ib_error_sys (err, errno, "stat %s", src);
  if (S_ISDIR (st.st_mode))
    return check_copied_dir (src, dest, NULL, &o, err);
  if (!S_ISREG (st.st_mode) || !ib_str_has_suffix (src, ".whl"))
    return 0;
  const char *b = strrchr (src, '/');
  cleanup_free char *out = ib_path_join (dest, b ? b + 1 : src);
  return check_or_repair (out, &o, err);
}

/* ---- require= ----------------------------------------------------------- */

static size_t
policy_index (const ib_wheel_audit_t *a, const char *name)
{
  for (size_t k = 0; k < a->npol; k++)
    if (strcmp (a->pol[k].name, name) == 0 || ib_strv_has (a->pol[k].aliases, name))
      return k;
  return SIZE_MAX;
}

int
ib_wheel_policy_check (const char *plat, ib_error_t *err)
{
  const char *arch = name_arch (plat);
  if (!arch)
    return ib_error_set (err, EINVAL, "%s names no architecture (like manylinux_2_17_x86_64)",
                         plat);
  json_t *root = NULL;
  policy_t *p = NULL;
  size_t n = 0;
  if (load_policies (arch, &root, &p, &n, err) < 0)
    return -1;
  bool found = false;
  for (size_t k = 1; k < n; k++) /* 0 is linux_<arch>: not a policy to satisfy */
    if (strcmp (p[k].name, plat) == 0 || ib_strv_has (p[k].aliases, plat))
      found = true;
  for (size_t k = 0; k < n; k++)
    {
      free (p[k].name);
      ib_strv_free (p[k].aliases);
    }
  free (p);
  json_decref (root);
  if (!found)
    return ib_error_set (err, EINVAL, "%s: no manylinux policy of that name", plat);
  return 0;
}

/* Why the audited wheel `a` does not satisfy policy `req` (a->overall <
 * req): the versioned symbols above it, the libraries off its whitelist,
 * its black-listed symbols, and the other criteria, in auditwheel's terms. */
static char *
unmet_reasons (const ib_wheel_audit_t *a, size_t req)
{
  ib_buf_t b = { 0 };
  const policy_t *p = &a->pol[req];
  if (req > a->sym)
    {
      ib_buf_printf (&b, "versioned symbols need %s (", a->pol[a->sym].name);
      bool first = true;
      cleanup_strv char **keys = NULL;
      for (size_t i = 0; i < a->versioned.n; i++)
        ib_strv_push (&keys, a->versioned.e[i].key);
      strv_sort (keys);
      for (size_t i = 0; keys && keys[i]; i++)
        {
          cleanup_strv char **vals = ib_strv_dup (smap_find (&a->versioned, keys[i])->vals);
          strv_sort (vals);
          for (size_t j = 0; vals && vals[j]; j++)
            {
              const char *us = strchr (vals[j], '_');
              cleanup_free char *prefix
                  = us ? xstrndup (vals[j], (size_t) (us - vals[j])) : xstrdup (vals[j]);
              json_t *arr = p->symvers ? json_object_get (p->symvers, prefix) : NULL;
              if (!arr || (us && json_array_has (arr, us + 1)))
                continue;
              ib_buf_printf (&b, "%s%s %s", first ? "" : ", ", keys[i], vals[j]);
              first = false;
            }
        }
      ib_buf_puts (&b, ")");
    }
  const extref_t *r = &a->refs[req];
  if (r->libs.n)
    {
      ib_buf_printf (&b, "%sexternal libraries off its whitelist:", b.len ? "; " : "");
      cleanup_strv char **names = NULL;
      for (size_t i = 0; i < r->libs.n; i++)
        ib_strv_push (&names, r->libs.e[i].key);
      strv_sort (names);
      for (size_t i = 0; names[i]; i++)
        ib_buf_printf (&b, "%s %s", i ? "," : "", names[i]);
    }
  if (r->blacklist.n)
    {
      ib_buf_printf (&b, "%sblack-listed symbols:", b.len ? "; " : "");
      for (size_t i = 0; i < r->blacklist.n; i++)
        {
          cleanup_strv char **syms = ib_strv_dup (r->blacklist.e[i].vals);
          strv_sort (syms);
          for (size_t j = 0; syms && syms[j]; j++)
            ib_buf_printf (&b, "%s %s %s", i || j ? "," : "", r->blacklist.e[i].key, syms[j]);
        }
    }
  if (req > a->ucs)
    ib_buf_printf (&b, "%sa UCS2 build of Python", b.len ? "; " : "");
  if (req > a->pyfpe)
    ib_buf_printf (&b, "%sthe PyFPE_jbuf symbol", b.len ? "; " : "");
  if (req > a->machine)
    ib_buf_printf (&b, "%sunsupported ISA extensions", b.len ? "; " : "");
  if (!b.len)
    ib_buf_printf (&b, "the audit's tag is %s", a->pol[a->overall].name);
  return ib_buf_steal (&b);
}

/* Collect the regular *.whl files under `dir`/`rel` (relative paths). */
static int
collect_wheels (const char *dir, const char *rel, char ***out, ib_error_t *err)
{
  cleanup_free char *path = rel ? ib_path_join (dir, rel) : xstrdup (dir);
  DIR *d = opendir (path);
  if (!d)
    return ib_error_sys (err, errno, "opendir %s", path);
  cleanup_strv char **names = NULL;
  struct dirent *de;
  while ((de = readdir (d)))
    if (strcmp (de->d_name, ".") && strcmp (de->d_name, ".."))
      ib_strv_push (&names, de->d_name);
  closedir (d);
  strv_sort (names);
  for (size_t i = 0; names && names[i]; i++)
    {
      cleanup_free char *sub = rel ? xasprintf ("%s/%s", rel, names[i]) : xstrdup (names[i]);
      cleanup_free char *full = ib_path_join (dir, sub);
      struct stat st;
      if (lstat (full, &st) < 0)
        return ib_error_sys (err, errno, "stat %s", full);
      if (S_ISDIR (st.st_mode))
        {
          if (collect_wheels (dir, sub, out, err) < 0)
            return -1;
        }
      else if (S_ISREG (st.st_mode) && ib_str_has_suffix (names[i], ".whl"))
        ib_strv_push (out, sub);
    }
  return 0;
}

int
ib_wheel_check_required (const char *src, const char *root, const char *plat, ib_error_t *err)
{
  if (ib_wheel_policy_check (plat, err) < 0)
    return ib_error_prefix (err, "OUTPUT require");
  struct stat st;
  if (lstat (src, &st) < 0)
    return ib_error_sys (err, errno, "stat %s", src);
  cleanup_strv char **rels = NULL;
  cleanup_free char *dir = NULL;
  if (S_ISDIR (st.st_mode))
    {
      dir = xstrdup (src);
      if (collect_wheels (src, NULL, &rels, err) < 0)
        return -1;
    }
  else if (S_ISREG (st.st_mode) && ib_str_has_suffix (src, ".whl"))
    {
      const char *sl = strrchr (src, '/');
      dir = !sl ? xstrdup (".") : sl == src ? xstrdup ("/") : xstrndup (src, (size_t) (sl - src));
      ib_strv_push (&rels, sl ? sl + 1 : src);
    }
  ib_buf_t why = { 0 };
  size_t failed = 0, total = ib_strv_len (rels);
  for (size_t i = 0; i < total; i++)
    {
      cleanup_free char *full = ib_path_join (dir, rels[i]);
      ib_wheel_t *w = NULL;
      ib_wheel_audit_t *a = NULL;
      ib_wheel_audit_opts_t ao = { .root = root };
      if (ib_wheel_open (full, &w, err) < 0 || ib_wheel_audit (w, &ao, &a, err) < 0)
        {
          ib_wheel_close (w);
          ib_buf_free (&why);
          return -1;
        }
      size_t req = a->pure ? SIZE_MAX : policy_index (a, plat);
      if (!a->pure && req == SIZE_MAX)
        ib_buf_printf (&why, "%swheel %s: not a %s wheel", failed++ ? "; " : "", w->base,
                       name_arch (plat));
      else if (!a->pure && a->overall < req)
        {
          cleanup_free char *reasons = unmet_reasons (a, req);
          ib_buf_printf (&why, "%swheel %s: platform tag %s, not %s: %s", failed++ ? "; " : "",
                         w->base, a->pol[a->overall].name, plat, reasons);
        }
      else
        ib_info ("wheel %s: satisfies %s", w->base, plat);
      ib_wheel_audit_free (a);
      ib_wheel_close (w);
    }
  if (failed)
    {
      ib_error_set (err, EINVAL, "require=%s: %zu of %zu wheels do not satisfy it (nothing "
                    "copied): %s", plat, failed, total, why.data);
      ib_buf_free (&why);
      return -1;
    }
  return 0;
}

/* ---- repair ------------------------------------------------------------- */

/* Find `prog` in $PATH (or take it as given when it holds a '/'). */
static char *
find_program (const char *prog)
{
  if (strchr (prog, '/'))
    return access (prog, X_OK) == 0 ? xstrdup (prog) : NULL;
  const char *path = getenv ("PATH");
  cleanup_free char *copy = xstrdup (path && *path ? path : "/usr/local/bin:/usr/bin:/bin");
  char *save = NULL;
  for (char *d = strtok_r (copy, ":", &save); d; d = strtok_r (NULL, ":", &save))
    {
      char *c = ib_path_join (d, prog);
      if (access (c, X_OK) == 0)
        return c;
      free (c);
    }
  return NULL;
}

/* Run patchelf with one change: argv {opt, [arg1, [arg2]], file}.  Debian
 * 12's patchelf 0.14.3 mis-handles several changes in one call, so every
 * call makes one. */
static int
patchelf (const char *prog, const char *opt, const char *a1, const char *a2, const char *file,
          const char *shown, ib_error_t *err)
{
  const char *argv[7];
  size_t n = 0;
  argv[n++] = prog;
  argv[n++] = opt;
  if (a1)
    argv[n++] = a1;
  if (a2)
    argv[n++] = a2;
  argv[n++] = file;
  argv[n] = NULL;
  ib_debug ("wheel repair: patchelf %s %s%s%s %s", opt, a1 ? a1 : "", a2 ? " " : "", a2 ? a2 : "",
            shown);
  pid_t pid = fork ();
  if (pid < 0)
    return ib_error_sys (err, errno, "fork");
  if (pid == 0)
    {
      execv (prog, (char *const *) argv);
      _exit (127);
    }
  int st;
  while (waitpid (pid, &st, 0) < 0)
    if (errno != EINTR)
      return ib_error_sys (err, errno, "waitpid");
  if (!WIFEXITED (st) || WEXITSTATUS (st) != 0)
    return ib_error_set (err, EIO, "patchelf %s%s%s%s%s %s: %s %d", opt, a1 ? " " : "",
                         a1 ? a1 : "", a2 ? " " : "", a2 ? a2 : "", shown,
                         WIFEXITED (st) ? "exit status" : "killed by signal",
                         WIFEXITED (st) ? WEXITSTATUS (st) : WTERMSIG (st));
  return 0;
}

static int
copy_file (const char *src, const char *dst, mode_t mode, ib_error_t *err)
{
  cleanup_close int in = open (src, O_RDONLY | O_CLOEXEC);
  if (in < 0)
    return ib_error_sys (err, errno, "open %s", src);
  cleanup_close int out = open (dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (out < 0)
    return ib_error_sys (err, errno, "create %s", dst);
  if (ib_copy_fd_data (in, out, src, err) < 0)
    return -1;
  if (fchmod (out, mode) < 0)
    return ib_error_sys (err, errno, "chmod %s", dst);
  return 0;
}

static int
sha256_hex8 (const char *path, char out[9], ib_error_t *err)
{
  cleanup_close int fd = open (path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return ib_error_sys (err, errno, "open %s", path);
  EVP_MD_CTX *c = EVP_MD_CTX_new ();
  EVP_DigestInit_ex (c, EVP_sha256 (), NULL);
  char buf[65536];
  ssize_t r;
  while ((r = read (fd, buf, sizeof buf)) > 0)
    EVP_DigestUpdate (c, buf, (size_t) r);
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned int dl = 0;
  EVP_DigestFinal_ex (c, d, &dl);
  EVP_MD_CTX_free (c);
  if (r < 0)
    return ib_error_sys (err, errno, "read %s", path);
  snprintf (out, 9, "%02x%02x%02x%02x", d[0], d[1], d[2], d[3]);
  return 0;
}

/* "$ORIGIN/<path from dir(rel) to dest>", both relative to the wheel root. */
static char *
origin_rpath (const char *rel, const char *dest)
{
  ib_buf_t b = { 0 };
  ib_buf_puts (&b, "$ORIGIN/");
  for (const char *p = rel; (p = strchr (p, '/')); p++)
    ib_buf_puts (&b, "../");
  ib_buf_puts (&b, dest);
  return ib_buf_steal (&b);
}

/* Is an RPATH entry of the object at `abs` one that stays inside the wheel? */
static bool
rpath_within (const char *entry, const char *abs, const char *wheel_dir)
{
  cleanup_free char *dir = xstrdup (abs);
  *strrchr (dir, '/') = '\0';
  if (!strstr (entry, "$ORIGIN") && !strstr (entry, "${ORIGIN}"))
    {
      /* an absolute entry: inside only if it names the extraction
       * directory, which no wheel can know */
      cleanup_free char *np = normpath (entry);
      return entry[0] == '/' && is_subdir (np, wheel_dir);
    }
  cleanup_free char *full = expand_origin (entry, dir);
  cleanup_free char *np = normpath (full);
  return is_subdir (np, wheel_dir);
}

/* RECORD's CSV field for a path (quoted when it must be). */
static void
csv_field (ib_buf_t *b, const char *s)
{
  if (!strpbrk (s, ",\"\r\n"))
    {
      ib_buf_puts (b, s);
      return;
    }
  ib_buf_puts (b, "\"");
  for (; *s; s++)
    {
      if (*s == '"')
        ib_buf_puts (b, "\"");
      ib_buf_append (b, s, 1);
    }
  ib_buf_puts (b, "\"");
}

typedef struct zip_item
{
  char *rel;
  bool dist_info, record;
} zip_item_t;

static int
cmp_zip_item (const void *x, const void *y)
{
  const zip_item_t *a = x, *b = y;
  if (a->record != b->record)
    return a->record ? 1 : -1;
  if (a->dist_info != b->dist_info)
    return a->dist_info ? 1 : -1;
  return strcmp (a->rel, b->rel);
}

static uint16_t
get16 (const unsigned char *p)
{
  return (uint16_t) (p[0] | p[1] << 8);
}

static uint32_t
get32 (const unsigned char *p)
{
  return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16 | (uint32_t) p[3] << 24;
}

static uint64_t
get64 (const unsigned char *p)
{
  return (uint64_t) get32 (p) | (uint64_t) get32 (p + 4) << 32;
}

/* The MS-DOS time and date fields of `t` in UTC (APPNOTE.TXT 4.4.6; two
 * seconds resolution; 1980-01-01 00:00:00 for anything earlier). */
static void
dos_time_utc (time_t t, unsigned char out[4])
{
  struct tm tm;
  if (t < 315532800 || !gmtime_r (&t, &tm))
    {
      t = 315532800;
      gmtime_r (&t, &tm);
    }
  unsigned tv = (unsigned) (tm.tm_hour << 11 | tm.tm_min << 5 | tm.tm_sec / 2);
  unsigned dv = (unsigned) ((tm.tm_year - 80) << 9 | (tm.tm_mon + 1) << 5 | tm.tm_mday);
  out[0] = (unsigned char) tv;
  out[1] = (unsigned char) (tv >> 8);
  out[2] = (unsigned char) dv;
  out[3] = (unsigned char) (dv >> 8);
}

/* The central directory of the zip open as `fd` (`size` bytes), as its end
 * of central directory record (or, when a field overflowed, the zip64
 * record) places it (APPNOTE.TXT 4.3.12-4.3.16): *cd (caller frees) holds
 * *cd_size bytes read from *cd_off, *count entries.  A zip with a comment
 * is not looked for: libarchive and bdist_wheel write none. */
static int
zip_cd_load (int fd, const char *path, off_t size, unsigned char **cd, uint64_t *cd_size,
             uint64_t *cd_off, uint64_t *count, ib_error_t *err)
{
  unsigned char eocd[22], z[56];
  if (size < 22 || pread (fd, eocd, 22, size - 22) != 22 || get32 (eocd) != 0x06054b50)
    return ib_error_set (err, EIO, "%s: no end of central directory record", path);
  *count = get16 (eocd + 10);
  *cd_size = get32 (eocd + 12);
  *cd_off = get32 (eocd + 16);
  if (*count == 0xffff || *cd_size == 0xffffffff || *cd_off == 0xffffffff)
    {
      unsigned char loc[20];
      if (size < 42 || pread (fd, loc, 20, size - 42) != 20 || get32 (loc) != 0x07064b50
          || pread (fd, z, 56, (off_t) get64 (loc + 8)) != 56 || get32 (z) != 0x06064b50)
        return ib_error_set (err, EIO, "%s: no zip64 end of central directory record", path);
      *count = get64 (z + 32);
      *cd_size = get64 (z + 40);
      *cd_off = get64 (z + 48);
    }
  if (*cd_off > (uint64_t) size || *cd_size > (uint64_t) size - *cd_off)
    return ib_error_set (err, EIO, "%s: central directory beyond the end", path);
  *cd = xmalloc (*cd_size ? *cd_size : 1);
  if (pread (fd, *cd, *cd_size, (off_t) *cd_off) != (ssize_t) *cd_size)
    {
      free (*cd);
      *cd = NULL;
      return ib_error_set (err, EIO, "%s: short read of its central directory", path);
    }
  return 0;
}

/* The central directory entry at cd[*pos] (APPNOTE.TXT 4.3.12): returns
 * it and moves *pos to the next one, or NULL when it is damaged. */
static unsigned char *
zip_cd_next (unsigned char *cd, uint64_t cd_size, uint64_t *pos)
{
  if (*pos + 46 > cd_size || get32 (cd + *pos) != 0x02014b50)
    return NULL;
  unsigned char *e = cd + *pos;
  uint64_t len = 46 + (uint64_t) get16 (e + 28) + get16 (e + 30) + get16 (e + 32);
  if (*pos + len > cd_size)
    return NULL;
  *pos += len;
  return e;
}

/* The offset of entry e's local file header: its 4-byte field, or the
 * zip64 extra field's value when that holds 0xffffffff (the 8-byte values
 * present there are the sizes that overflowed, then the offset). */
static uint64_t
zip_cd_local (const unsigned char *e)
{
  uint64_t local = get32 (e + 42);
  if (local != 0xffffffff)
    return local;
  const unsigned char *x = e + 46 + get16 (e + 28), *xe = x + get16 (e + 30);
  while (x + 4 <= xe)
    {
      size_t len = get16 (x + 2);
      if (x + 4 + len > xe)
        break;
      if (get16 (x) == 0x0001)
        {
          size_t skip = (get32 (e + 24) == 0xffffffff ? 8 : 0)
                        + (get32 (e + 20) == 0xffffffff ? 8 : 0);
          return skip + 8 <= len ? get64 (x + 4 + skip) : UINT64_MAX;
        }
      x += 4 + len;
    }
  return UINT64_MAX;
}

/* Note in each member of `w` its MS-DOS time and date fields (4 bytes, as
 * stored), read from the central directory of w->file, not through
 * libarchive, which converts them with the local time zone. */
static int
zip_dos_times (ib_wheel_t *w, ib_error_t *err)
{
  cleanup_close int fd = open (w->file, O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat (fd, &st) < 0)
    return ib_error_sys (err, errno, "open %s", w->file);
  cleanup_free unsigned char *cd = NULL;
  uint64_t cd_size, cd_off, count, pos = 0;
  if (zip_cd_load (fd, w->file, st.st_size, &cd, &cd_size, &cd_off, &count, err) < 0)
    return -1;
  for (uint64_t i = 0; i < count; i++)
    {
      unsigned char *e = zip_cd_next (cd, cd_size, &pos);
      if (!e)
        return ib_error_set (err, EIO, "%s: central directory entry %llu is damaged", w->file,
                             (unsigned long long) i);
      cleanup_free char *name = xstrndup ((const char *) e + 46, get16 (e + 28));
      member_t *m = find_member (w, name);
      if (m)
        {
          memcpy (m->dos, e + 12, 4);
          m->has_dos = true;
        }
    }
  return 0;
}

/* libarchive writes a zip entry's MS-DOS time fields in local time (it
 * calls localtime_r); bdist_wheel writes them in UTC.  Set them, in the
 * local file header and the central directory entry of the i-th entry of
 * the zip libarchive just wrote at `path`, to dos[i] (4 bytes as stored),
 * so that the bytes do not depend on TZ and nothing sets TZ (setenv is not
 * thread-safe).  The extended-timestamp extra field libarchive adds holds
 * the time in UTC already. */
static int
zip_set_dos_times (const char *path, const unsigned char (*dos)[4], size_t n, ib_error_t *err)
{
  cleanup_close int fd = open (path, O_RDWR | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat (fd, &st) < 0)
    return ib_error_sys (err, errno, "open %s", path);
  cleanup_free unsigned char *cd = NULL;
  uint64_t cd_size, cd_off, count, pos = 0;
  if (zip_cd_load (fd, path, st.st_size, &cd, &cd_size, &cd_off, &count, err) < 0)
    return -1;
  if (count != n)
    return ib_error_set (err, EIO, "%s: %llu entries in its central directory, %zu written", path,
                         (unsigned long long) count, n);
  for (size_t i = 0; i < n; i++)
    {
      unsigned char *e = zip_cd_next (cd, cd_size, &pos), sig[4];
      uint64_t local = e ? zip_cd_local (e) : UINT64_MAX;
      if (!e || local > (uint64_t) st.st_size - 30 || pread (fd, sig, 4, (off_t) local) != 4
          || get32 (sig) != 0x04034b50)
        return ib_error_set (err, EIO, "%s: entry %zu: damaged or no local header", path, i);
      memcpy (e + 12, dos[i], 4);
      if (pwrite (fd, dos[i], 4, (off_t) local + 10) != 4)
        return ib_error_sys (err, errno ? errno : EIO, "write %s", path);
    }
  if (pwrite (fd, cd, cd_size, (off_t) cd_off) != (ssize_t) cd_size)
    return ib_error_sys (err, errno ? errno : EIO, "write %s", path);
  return 0;
}

/* Write RECORD for the tree `w->dir` and zip it into `out` (reproducibly). */
static int
write_wheel_zip (ib_wheel_t *w, const char *out, ib_error_t *err)
{
  cleanup_strv char **files = NULL;
  if (collect_files (w->dir, NULL, &files, err) < 0)
    return -1;
  cleanup_free char *record_rel = xasprintf ("%s/RECORD", w->dist_info);
  cleanup_free char *di_prefix = xasprintf ("%s/", w->dist_info);
  size_t n = ib_strv_len (files);
  bool have_record = ib_strv_has (files, record_rel);
  zip_item_t *items = xmalloc ((n + 1) * sizeof *items);
  size_t ni = 0;
  for (size_t i = 0; i < n; i++)
    items[ni++] = (zip_item_t) { files[i], ib_str_has_prefix (files[i], di_prefix),
                                 strcmp (files[i], record_rel) == 0 };
  if (!have_record)
    items[ni++] = (zip_item_t) { record_rel, true, true };
  qsort (items, ni, sizeof *items, cmp_zip_item);
  /* RECORD: every other file's digest and size */
  ib_buf_t rec = { 0 };
  int r = -1;
  for (size_t i = 0; i < ni; i++)
    {
      if (items[i].record)
        continue;
      cleanup_free char *full = ib_path_join (w->dir, items[i].rel);
      cleanup_free char *h = NULL;
      struct stat st;
      if (stat (full, &st) < 0)
        {
          ib_error_sys (err, errno, "stat %s", full);
          goto out;
        }
      if (hash_file (full, EVP_sha256 (), &h, err) < 0)
        goto out;
      csv_field (&rec, items[i].rel);
      ib_buf_printf (&rec, ",sha256=%s,%lld\n", h, (long long) st.st_size);
    }
  csv_field (&rec, record_rel);
  ib_buf_puts (&rec, ",,\n");
  {
    cleanup_free char *full = ib_path_join (w->dir, record_rel);
    unlink (full);
    if (ib_write_file_atomic (full, rec.data, rec.len, 0644, err) < 0)
      goto out;
  }
  {
    int64_t sde = ib_source_date_epoch ();
    if (sde >= 0 && sde < 315532800) /* zip (DOS) times start in 1980 */
      sde = 315532800;
    cleanup_free char *tmp = xasprintf ("%s.tmp-%d", out, (int) getpid ());
    struct archive *a = archive_write_new ();
    archive_write_set_format_zip (a);
    archive_write_set_options (a, "zip:compression=deflate");
    if (archive_write_open_filename (a, tmp) != ARCHIVE_OK)
      {
        ib_error_set (err, EIO, "write %s: %s", tmp, archive_error_string (a));
        archive_write_free (a);
        goto out;
      }
    time_t now = time (NULL);
    /* each entry's MS-DOS time fields, set by zip_set_dos_times afterwards:
     * SOURCE_DATE_EPOCH's in UTC, else a member's as the wheel stored
     * them, else (a grafted library, a new RECORD) now's in UTC */
    unsigned char (*dos)[4] = xmalloc ((ni ? ni : 1) * sizeof *dos);
    if (sde < 0 && zip_dos_times (w, err) < 0)
      {
        archive_write_free (a);
        unlink (tmp);
        free (dos);
        goto out;
      }
    for (size_t i = 0; i < ni; i++)
      {
        cleanup_free char *full = ib_path_join (w->dir, items[i].rel);
        cleanup_free char *data = NULL;
        size_t len = 0;
        struct stat st;
        if (stat (full, &st) < 0)
          {
            ib_error_sys (err, errno, "stat %s", full);
            archive_write_free (a);
            unlink (tmp);
            goto out;
          }
        if (ib_read_file (full, &data, &len, err) < 0)
          {
            archive_write_free (a);
            unlink (tmp);
            goto out;
          }
        member_t *m = find_member (w, items[i].rel);
        struct archive_entry *e = archive_entry_new ();
        archive_entry_set_pathname (e, items[i].rel);
        archive_entry_set_filetype (e, AE_IFREG);
        archive_entry_set_perm (e, (st.st_mode & 0111) ? 0755 : 0644);
        archive_entry_set_size (e, (la_int64_t) len);
        if (sde < 0 && m && m->has_dos)
          memcpy (dos[i], m->dos, 4);
        else
          dos_time_utc (sde >= 0 ? (time_t) sde : now, dos[i]);
        archive_entry_set_mtime (e, sde >= 0 ? (time_t) sde : m && m->mtime ? (time_t) m->mtime
                                                                             : now, 0);
        archive_entry_set_uid (e, 0);
        archive_entry_set_gid (e, 0);
        int wr = archive_write_header (a, e);
        la_ssize_t wd = wr == ARCHIVE_OK ? archive_write_data (a, data, len) : -1;
        archive_entry_free (e);
        if (wr != ARCHIVE_OK || wd < 0 || (size_t) wd != len)
          {
            ib_error_set (err, EIO, "write %s: %s: %s", tmp, items[i].rel,
                          archive_error_string (a));
            archive_write_free (a);
            unlink (tmp);
            goto out;
          }
      }
    int closed = archive_write_close (a);
    if (closed != ARCHIVE_OK)
      {
        ib_error_set (err, EIO, "write %s: %s", tmp, archive_error_string (a));
        archive_write_free (a);
        unlink (tmp);
        goto out;
      }
    archive_write_free (a);
    int set = zip_set_dos_times (tmp, (const unsigned char (*)[4]) dos, ni, err);
    free (dos);
    if (set < 0)
      {
        unlink (tmp);
        goto out;
      }
    if (rename (tmp, out) < 0)
      {
        ib_error_sys (err, errno, "rename %s", tmp);
        unlink (tmp);
        goto out;
      }
  }
  r = 0;
out:
  ib_buf_free (&rec);
  free (items);
  return r;
}

/* add_platforms: the new platform tags in the file name and WHEEL. */
static int
retag (ib_wheel_t *w, char *const *abis, const char *remove, char **new_base, ib_error_t *err)
{
  cleanup_strv char **plats = NULL;
  {
    cleanup_free char *c = xstrdup (w->name.platform);
    char *save = NULL;
    for (char *t = strtok_r (c, ".", &save); t; t = strtok_r (NULL, ".", &save))
      if (strcmp (t, remove) != 0)
        strv_add_unique (&plats, t);
  }
  for (size_t i = 0; abis[i]; i++)
    strv_add_unique (&plats, abis[i]);
  if (ib_strv_len (plats) > 1 && ib_strv_has (plats, "any"))
    {
      cleanup_strv char **np = NULL;
      for (size_t i = 0; plats[i]; i++)
        if (strcmp (plats[i], "any") != 0)
          ib_strv_push (&np, plats[i]);
      ib_strv_free (plats);
      plats = steal_pointer (&np);
    }
  /* auditwheel: a wheel that was tagged "any" is now definitely platlib */
  bool had_any = false;
  {
    cleanup_free char *c = xstrdup (w->name.platform);
    char *save = NULL;
    for (char *t = strtok_r (c, ".", &save); t; t = strtok_r (NULL, ".", &save))
      had_any |= strcmp (t, "any") == 0;
  }
  strv_sort (plats);
  ib_buf_t pb = { 0 };
  for (size_t i = 0; plats[i]; i++)
    ib_buf_printf (&pb, "%s%s", i ? "." : "", plats[i]);
  cleanup_free char *plat = ib_buf_steal (&pb);
  const char *dash = strrchr (w->base, '-');
  *new_base = xasprintf ("%.*s-%s.whl", (int) (dash - w->base), w->base, plat);
  /* WHEEL: Tag lines for every python-abi pair and new platform */
  cleanup_free char *wheel_rel = xasprintf ("%s/WHEEL", w->dist_info);
  cleanup_free char *full = ib_path_join (w->dir, wheel_rel);
  cleanup_free char *text = NULL;
  size_t len;
  if (ib_read_file (full, &text, &len, err) < 0)
    return -1;
  cleanup_strv char **pairs = NULL, **tags = NULL;
  for (size_t i = 0; w->wheel_tags && w->wheel_tags[i]; i++)
    {
      const char *d = strrchr (w->wheel_tags[i], '-');
      cleanup_free char *pair = xstrndup (w->wheel_tags[i], (size_t) (d - w->wheel_tags[i]));
      strv_add_unique (&pairs, pair);
    }
  for (size_t i = 0; w->wheel_tags && w->wheel_tags[i]; i++)
    {
      const char *d = strrchr (w->wheel_tags[i], '-');
      if (strcmp (d + 1, remove) != 0 && !(strcmp (d + 1, "any") == 0 && abis[0]))
        strv_add_unique (&tags, w->wheel_tags[i]);
    }
  for (size_t p = 0; pairs && pairs[p]; p++)
    for (size_t i = 0; abis[i]; i++)
      {
        cleanup_free char *t = xasprintf ("%s-%s", pairs[p], abis[i]);
        strv_add_unique (&tags, t);
      }
  ib_buf_t b = { 0 };
  const char *s = text;
  while (*s)
    {
      const char *e = strchrnul (s, '\n');
      size_t l = (size_t) (e - s);
      bool is_tag = l >= 4 && strncasecmp (s, "Tag:", 4) == 0;
      bool is_pure = l >= 16 && strncasecmp (s, "Root-Is-Purelib:", 16) == 0;
      if (l == 0 || (l == 1 && *s == '\r'))
        break;
      if (is_pure && had_any)
        ib_buf_puts (&b, "Root-Is-Purelib: false\n");
      else if (!is_tag)
        {
          ib_buf_append (&b, s, l);
          ib_buf_puts (&b, "\n");
        }
      s = *e ? e + 1 : e;
    }
  for (size_t i = 0; tags && tags[i]; i++)
    ib_buf_printf (&b, "Tag: %s\n", tags[i]);
  ib_buf_puts (&b, s); /* a body after the headers, if any */
  unlink (full);
  int r = ib_write_file_atomic (full, b.data, b.len, 0644, err);
  ib_buf_free (&b);
  return r;
}

int
ib_wheel_repair (const char *path, const ib_wheel_repair_opts_t *opts, char **out_path,
                 ib_error_t *err)
{
  *out_path = NULL;
  cleanup_free char *prog = find_program (opts->patchelf ? opts->patchelf : "patchelf");
  if (!prog)
    return ib_error_set (err, ENOENT,
                         "wheel repair: patchelf not found (install Debian's patchelf, or give "
                         "--patchelf PATH)");
  const char *plat_arch = name_arch (opts->plat);
  if (!plat_arch)
    return ib_error_set (err, EINVAL, "wheel repair: --plat %s names no architecture",
                         opts->plat);
  cleanup_free char *base
      = xstrndup (opts->plat, strlen (opts->plat) - strlen (plat_arch) - 1);
  ib_wheel_t *w = NULL;
  ib_wheel_audit_t *a = NULL;
  cleanup_strv char **abis = NULL;
  cleanup_free char *new_base = NULL;
  cleanup_free char *dest_rel = NULL;
  cleanup_free char *remove = xasprintf ("linux_%s", plat_arch);
  smap_t soname_map = { 0 }; /* soname -> [new soname, path in the wheel] */
  int r = -1;
  if (wheel_open (path, true, &w, err) < 0)
    return -1;
  const char *wa = name_arch (w->name.platform);
  if (wa && strcmp (wa, plat_arch) != 0)
    {
      ib_error_set (err, EINVAL, "wheel %s: cannot repair a %s wheel to %s", w->base, wa,
                    opts->plat);
      goto out;
    }
  ib_wheel_audit_opts_t ao = { .allow_graft = true, .requested_base = base,
                               .exclude = opts->exclude, .root = opts->root };
  if (ib_wheel_audit (w, &ao, &a, err) < 0)
    goto out;
  if (a->pure)
    {
      ib_error_set (err, EINVAL, "wheel %s: a pure Python wheel: nothing to repair", w->base);
      goto out;
    }
  size_t req = policy_index (a, opts->plat);
  if (req == SIZE_MAX || req == 0)
    {
      ib_error_set (err, EINVAL, "wheel %s: no manylinux policy named %s", w->base, opts->plat);
      goto out;
    }
  const char *why = req > a->sym ? "too-recent versioned symbols (the symbols allow %s at most; "
                                   "compile on an older toolchain)"
                    : req > a->ucs ? "a UCS2 build of Python"
                    : req > a->blacklist ? "black-listed symbols"
                    : req > a->machine ? "unsupported ISA extensions"
                                       : NULL;
  if (why)
    {
      cleanup_free char *reason = xasprintf (why, a->pol[a->sym].name);
      ib_error_set (err, EINVAL, "wheel %s: cannot repair to %s because of %s", w->base,
                    a->pol[req].name, reason);
      goto out;
    }
  size_t top = req < a->overall ? a->overall : req;
  ib_strv_push (&abis, a->pol[top].name);
  for (size_t i = 0; a->pol[top].aliases && a->pol[top].aliases[i]; i++)
    ib_strv_push (&abis, a->pol[top].aliases[i]);
  if (top != req)
    {
      ib_info ("wheel %s: eligible for %s, above the requested %s", w->base, a->pol[top].name,
               a->pol[req].name);
      ib_strv_push (&abis, a->pol[req].name);
      for (size_t i = 0; a->pol[req].aliases && a->pol[req].aliases[i]; i++)
        ib_strv_push (&abis, a->pol[req].aliases[i]);
    }
  dest_rel = xasprintf ("%s.libs", w->name.distribution);
  for (size_t i = 0; i < a->nt; i++)
    {
      tree_t *t = &a->t[i];
      smap_t *libs = &t->refs[top].libs;
      cleanup_free char *file = ib_path_join (w->dir, t->rel);
      for (size_t j = 0; j < libs->n; j++)
        {
          const char *so = libs->e[j].key;
          const char *src = libs->e[j].vals ? libs->e[j].vals[0] : NULL;
          if (is_libpython (so))
            {
              ib_warn ("wheel %s: removing %s from %s: linking libpython is forbidden in "
                       "manylinux wheels", w->base, so, t->rel);
              if (patchelf (prog, "--remove-needed", so, NULL, file, t->rel, err) < 0)
                goto out;
              continue;
            }
          if (!src)
            {
              ib_error_set (err, ENOENT, "wheel %s: cannot repair: %s needs %s, which was not "
                            "found on this host", w->base, t->rel, so);
              goto out;
            }
          smap_ent_t *m = smap_find (&soname_map, so);
          if (!m)
            {
              char hash[9];
              if (sha256_hex8 (src, hash, err) < 0)
                goto out;
              const char *sb = strrchr (src, '/');
              sb = sb ? sb + 1 : src;
              const char *dot = strchr (sb, '.');
              cleanup_free char *bpart = dot ? xstrndup (sb, (size_t) (dot - sb)) : xstrdup (sb);
              cleanup_free char *suffix = xasprintf ("-%s", hash);
              cleanup_free char *newso
                  = ib_str_has_suffix (bpart, suffix) ? xstrdup (sb)
                                                      : xasprintf ("%s-%s%s", bpart, hash,
                                                                   dot ? dot : "");
              cleanup_free char *rel = xasprintf ("%s/%s", dest_rel, newso);
              cleanup_free char *dst = ib_path_join (w->dir, rel);
              cleanup_free char *dd = ib_path_join (w->dir, dest_rel);
              if (ib_mkdir_p (dd, 0755, err) < 0)
                goto out;
              struct stat st;
              if (stat (dst, &st) < 0)
                {
                  if (stat (src, &st) < 0)
                    {
                      ib_error_sys (err, errno, "stat %s", src);
                      goto out;
                    }
                  if (copy_file (src, dst, (st.st_mode & 0777) | S_IWUSR, err) < 0
                      || patchelf (prog, "--set-soname", newso, NULL, dst, rel, err) < 0)
                    goto out;
                }
              ib_info ("wheel %s: grafting %s (%s) as %s", w->base, so, src, rel);
              m = smap_get (&soname_map, so);
              ib_strv_push (&m->vals, newso);
              ib_strv_push (&m->vals, rel);
            }
          if (patchelf (prog, "--replace-needed", so, m->vals[0], file, t->rel, err) < 0)
            goto out;
        }
      if (libs->n > 0)
        {
          /* append $ORIGIN/<.libs> to the RPATH entries that stay in the wheel */
          char **old = t->info->runpath ? t->info->runpath : t->info->rpath;
          cleanup_strv char **keep = NULL;
          for (size_t k = 0; old && old[k]; k++)
            if (rpath_within (old[k], file, w->dir))
              strv_add_unique (&keep, old[k]);
          cleanup_free char *mine = origin_rpath (t->rel, dest_rel);
          strv_add_unique (&keep, mine);
          ib_buf_t b = { 0 };
          for (size_t k = 0; keep[k]; k++)
            ib_buf_printf (&b, "%s%s", k ? ":" : "", keep[k]);
          cleanup_free char *rp = ib_buf_steal (&b);
          if (patchelf (prog, "--remove-rpath", NULL, NULL, file, t->rel, err) < 0
              || patchelf (prog, "--force-rpath", "--set-rpath", rp, file, t->rel, err) < 0)
            goto out;
        }
    }
  /* grafted libraries that need one another: their new names, RPATH $ORIGIN */
  for (size_t i = 0; i < soname_map.n; i++)
    {
      const char *rel = soname_map.e[i].vals[1];
      cleanup_free char *file = ib_path_join (w->dir, rel);
      elf_info_t *li = NULL;
      if (elf_read (file, NULL, &li, err) < 0)
        goto out;
      bool any = false;
      for (size_t k = 0; li && li->needed && li->needed[k]; k++)
        {
          smap_ent_t *m = smap_find (&soname_map, li->needed[k]);
          if (!m)
            continue;
          if (!any && patchelf (prog, "--force-rpath", "--set-rpath", "$ORIGIN", file, rel, err) < 0)
            {
              elf_info_free (li);
              goto out;
            }
          any = true;
          if (patchelf (prog, "--replace-needed", li->needed[k], m->vals[0], file, rel, err) < 0)
            {
              elf_info_free (li);
              goto out;
            }
        }
      bool had_rpath = li && (li->rpath || li->runpath);
      elf_info_free (li);
      if (!any && had_rpath && patchelf (prog, "--remove-rpath", NULL, NULL, file, rel, err) < 0)
        goto out;
    }
  if (retag (w, abis, remove, &new_base, err) < 0)
    goto out;
  if (ib_mkdir_p (opts->out_dir, 0755, err) < 0)
    goto out;
  {
    cleanup_free char *out = ib_path_join (opts->out_dir, new_base);
    if (write_wheel_zip (w, out, err) < 0)
      goto out;
    /* the result must verify and audit as the requested policy or better */
    ib_wheel_t *w2 = NULL;
    ib_wheel_audit_t *a2 = NULL;
    ib_wheel_audit_opts_t o2 = { .exclude = opts->exclude, .root = opts->root };
    if (ib_wheel_open (out, &w2, err) < 0 || ib_wheel_audit (w2, &o2, &a2, err) < 0)
      {
        ib_wheel_close (w2);
        ib_error_prefix (err, "wheel repair: the repaired wheel");
        goto out;
      }
    size_t got = policy_index (a2, ib_wheel_audit_tag (a2));
    ib_info ("wheel %s: repaired as %s; platform tag %s", w->base, new_base,
             ib_wheel_audit_tag (a2));
    bool ok = got != SIZE_MAX && got >= req;
    ib_wheel_audit_free (a2);
    ib_wheel_close (w2);
    if (!ok)
      {
        ib_error_set (err, EINVAL, "wheel %s: the repaired wheel %s does not audit as %s",
                      w->base, new_base, opts->plat);
        goto out;
      }
    *out_path = steal_pointer (&out);
  }
  r = 0;
out:
  smap_clear (&soname_map);
  ib_wheel_audit_free (a);
  ib_wheel_close (w);
  return r;
}
