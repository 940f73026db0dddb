/* builder/wheel/ldd.c — library resolution as auditwheel's lddtree does
 * it: each object's DT_NEEDED entries looked up, depth first, in RPATH
 * (with $ORIGIN), LD_LIBRARY_PATH (a build stage's, given; this host's
 * only for an audit of this host), RUNPATH, /etc/ld.so.conf and its
 * includes, the default directories and the interpreter's; only the last
 * path component's symlinks followed; all of it under a build stage's
 * root filesystem when the audit is given one.  The NVIDIA driver and
 * --exclude patterns are never resolved.  See wheel-int.h.
 */
#include "builder/wheel/wheel-int.h"
#include "common/util.h"

#include <ctype.h>
#include <fnmatch.h>
#include <glob.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

int
ibw_cached_elf (ib_wheel_audit_t *a, const char *path, elf_info_t **out, ib_error_t *err)
{
  for (size_t i = 0; i < a->ncache; i++)
    if (strcmp (a->cache[i]->path, path) == 0)
      {
        *out = a->cache[i];
        return 0;
      }
  if (ibw_elf_read (path, NULL, out, err) < 0)
    return -1;
  if (*out)
    {
      a->cache = xrealloc (a->cache, (a->ncache + 1) * sizeof *a->cache);
      a->cache[a->ncache++] = *out;
    }
  return 0;
}

char *
ibw_normpath (const char *p)
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
  char *r = ibw_normpath (p);
  free (p);
  return r;
}

static void
add_dir (char ***v, const char *d)
{
  struct stat st;
  if (stat (d, &st) == 0 && S_ISDIR (st.st_mode))
    ibw_strv_add_unique (v, d);
}

char *
ibw_expand_origin (const char *entry, const char *dir)
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
 * entry is the current directory; only existing directories kept.  Under
 * a root (`sysroot` not ""), empty and relative entries are skipped: ld.so
 * takes them from the current directory of the process that loads the
 * object, which is the stage's, not imgbuild's (lddtree with a root
 * would read its own), so an audit of a stage never depends on the
 * directory imgbuild was started in. */
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
      bool origin = strstr (in[i], "$ORIGIN") || strstr (in[i], "${ORIGIN}");
      if (*sysroot && in[i][0] != '/' && !origin)
        continue;
      if (!*in[i])
        p = getcwd (NULL, 0);
      else if (origin)
        p = ibw_expand_origin (in[i], dir);
      else
        p = xasprintf ("%s%s", in[i][0] == '/' ? sysroot : "", in[i]);
      if (!p)
        continue;
      cleanup_free char *np = ibw_normpath (p);
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
  if (ib_read_file (file, &text, &len, NULL) < 0)
    {
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
          cleanup_free char *np = ibw_normpath (full);
          add_dir (out, np);
        }
    }
  free (text);
}

typedef struct ldpaths
{
  char **rpath, **runpath, **interp; /* of the top-level object */
} ldpaths_t;

lib_t *
ibw_tree_lib (tree_t *t, const char *soname)
{
  for (size_t i = 0; i < t->nlibs; i++)
    if (strcmp (t->libs[i].soname, soname) == 0)
      return &t->libs[i];
  return NULL;
}

bool
ibw_is_libpython (const char *s)
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
      if (ibw_tree_lib (t, so))
        continue;
      t->libs = xrealloc (t->libs, (t->nlibs + 1) * sizeof *t->libs);
      lib_t *l = &t->libs[t->nlibs++];
      *l = (lib_t) { xstrdup (so), NULL, NULL };
      if (ibw_is_libpython (so))
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
          if (ibw_cached_elf (a, r, &dep, err) < 0)
            {
              free (r);
              return -1;
            }
          if (dep && ibw_elf_compatible (info, dep))
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

bool
ibw_is_subdir (const char *path, const char *dir)
{
  size_t l = strlen (dir);
  return path && strncmp (path, dir, l) == 0 && (path[l] == '/' || path[l] == '\0');
}

void
ibw_ld_paths (ib_wheel_audit_t *a, char *const *ld_library_path)
{
  /* the LD_LIBRARY_PATH given (a stage's, resolved in its root by the
   * caller); else, for this host only, the process's own: never the
   * host's for an audit under a root */
  const char *env = ld_library_path || *a->sysroot ? NULL : getenv ("LD_LIBRARY_PATH");
  for (size_t i = 0; ld_library_path && ld_library_path[i]; i++)
    if (*ld_library_path[i])
      {
        cleanup_free char *np = ibw_normpath (ld_library_path[i]);
        add_dir (&a->env_paths, np);
      }
  if (env && *env)
    {
      cleanup_strv char **raw = NULL;
      ibw_split_path_list (env, &raw);
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
}

int
ibw_ldd_tree (ib_wheel_audit_t *a, tree_t *t, char *const *exclude, ib_error_t *err)
{
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
  int r = ldd (a, t, t->info, &lp, exclude, &t->needed, err);
  ib_strv_free (lp.rpath);
  ib_strv_free (lp.runpath);
  ib_strv_free (lp.interp);
  return r;
}
