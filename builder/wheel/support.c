/* builder/wheel/support.c — the wheel wing's small shared pieces: string
 * vectors kept sorted or free of repeats, the insertion-ordered string map
 * the audit keeps its results in, ':'-separated lists, and the one
 * recursive directory walk (the audit's and the zip writer's walk over an
 * extracted wheel, OUTPUT's search for *.whl files).  See wheel-int.h.
 */
#include "builder/wheel/wheel-int.h"
#include "common/util.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- string vectors ------------------------------------------------------ */

void
ibw_strv_add_unique (char ***v, const char *s)
{
  if (!ib_strv_has (*v, s))
    ib_strv_push (v, s);
}

/* ---- the string map ------------------------------------------------------ */

smap_ent_t *
ibw_smap_find (const smap_t *m, const char *key)
{
  for (size_t i = 0; i < m->n; i++)
    if (strcmp (m->e[i].key, key) == 0)
      return &m->e[i];
  return NULL;
}

smap_ent_t *
ibw_smap_get (smap_t *m, const char *key)
{
  smap_ent_t *e = ibw_smap_find (m, key);
  if (e)
    return e;
  m->e = xrealloc (m->e, (m->n + 1) * sizeof *m->e);
  m->e[m->n] = (smap_ent_t) { xstrdup (key), NULL };
  return &m->e[m->n++];
}

void
ibw_smap_clear (smap_t *m)
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

void
ibw_smap_merge (smap_t *dst, const smap_t *src)
{
  for (size_t i = 0; i < src->n; i++)
    {
      smap_ent_t *e = ibw_smap_get (dst, src->e[i].key);
      for (size_t k = 0; src->e[i].vals && src->e[i].vals[k]; k++)
        ibw_strv_add_unique (&e->vals, src->e[i].vals[k]);
    }
}

void
ibw_smap_copy (smap_t *dst, const smap_t *src)
{
  ibw_smap_clear (dst);
  ibw_smap_merge (dst, src);
}

/* ---- paths --------------------------------------------------------------- */

void
ibw_split_path_list (const char *s, char ***out)
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

/* ---- the walk ------------------------------------------------------------- */

typedef struct walk_ent
{
  char *rel;
  bool dir;
} walk_ent_t;

static int
cmp_walk_ent (const void *x, const void *y)
{
  return strcmp (((const walk_ent_t *) x)->rel, ((const walk_ent_t *) y)->rel);
}

static int
walk_dir (const char *root, const char *rel, const char *suffix, bool files_first,
          ibw_walk_fn fn, void *ctx, ib_error_t *err)
{
  cleanup_free char *dir = rel ? ib_path_join (root, rel) : xstrdup (root);
  DIR *d = opendir (dir);
  if (!d)
    return ib_error_sys (err, errno, "opendir %s", dir);
  walk_ent_t *e = NULL;
  size_t n = 0;
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
      else if (S_ISDIR (st.st_mode)
               || (S_ISREG (st.st_mode) && (!suffix || ib_str_has_suffix (de->d_name, suffix))))
        {
          e = xrealloc (e, (n + 1) * sizeof *e);
          e[n++] = (walk_ent_t) { steal_pointer (&sub), S_ISDIR (st.st_mode) };
        }
    }
  closedir (d);
  /* sorted: what is logged, and the first failure, do not depend on readdir */
  if (n)
    qsort (e, n, sizeof *e, cmp_walk_ent);
  /* files_first: the files in a first pass, the subdirectories in a second */
  for (int pass = files_first ? 0 : 1; r == 0 && pass < 2; pass++)
    for (size_t i = 0; r == 0 && i < n; i++)
      {
        if (files_first && e[i].dir != (pass == 1))
          continue;
        r = e[i].dir ? walk_dir (root, e[i].rel, suffix, files_first, fn, ctx, err)
                     : fn (e[i].rel, ctx, err);
      }
  for (size_t i = 0; i < n; i++)
    free (e[i].rel);
  free (e);
  return r;
}

int
ibw_walk (const char *root, const char *suffix, bool files_first, ibw_walk_fn fn, void *ctx,
          ib_error_t *err)
{
  return walk_dir (root, NULL, suffix, files_first, fn, ctx, err);
}

int
ibw_walk_push (const char *rel, void *ctx, ib_error_t *err)
{
  (void) err;
  ib_strv_push ((char ***) ctx, rel);
  return 0;
}
