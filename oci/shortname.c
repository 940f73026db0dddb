/* oci/shortname.c — short-name resolution (oci/shortname.h). */
#include "oci/shortname.h"
#include "common/util.h"
#include "oci/ref.h"
#include "oci/registry.h"

#include <errno.h>
#include <string.h>

/* The repository part of `name` (without ":tag" or "@digest") and the
 * rest, which the candidates keep. */
static void
split_name (const char *name, char **repo, const char **suffix)
{
  const char *at = strchr (name, '@');
  const char *slash = strrchr (name, '/');
  const char *colon = strchr (slash ? slash : name, ':');
  const char *cut = at ? at : colon;
  if (at && colon && colon < at)
    cut = colon;
  *repo = cut ? xstrndup (name, (size_t) (cut - name)) : xstrdup (name);
  *suffix = cut ? cut : "";
}

int
ib_short_name_resolve (const ib_regconf_t *c, const char *name, char ***candidates, char **how,
                       ib_error_t *err)
{
  *candidates = NULL;
  if (how)
    *how = NULL;
  cleanup_free char *repo = NULL;
  const char *suffix;
  split_name (name, &repo, &suffix);
  if (c == NULL || ib_ref_names_registry (repo))
    {
      ib_strv_push (candidates, name);
      return 0;
    }
  for (size_t i = 0; i < ib_strv_len (c->alias_names); i++)
    if (strcmp (c->alias_names[i], repo) == 0)
      {
        cleanup_free char *full = xasprintf ("%s%s", c->alias_values[i], suffix);
        ib_strv_push (candidates, full);
        if (how)
          *how = xasprintf ("alias %s in %s", repo, c->alias_paths[i]);
        return 0;
      }
  if (c->search_path == NULL)
    {
      ib_strv_push (candidates, name);
      return 0;
    }
  size_t n = ib_strv_len (c->search);
  if (n == 0)
    return ib_error_set (err, EINVAL,
                         "short name %s: no alias for it, and unqualified-search-registries "
                         "in %s is empty: write the whole name (REGISTRY/%s)",
                         name, c->search_path, name);
  if (n > 1 && (c->short_name_mode == IB_SHORT_NAME_UNSET
                || c->short_name_mode == IB_SHORT_NAME_ENFORCING))
    {
      ib_buf_t list = { 0 };
      for (size_t i = 0; i < n; i++)
        ib_buf_printf (&list, "%s%s", i ? ", " : "", c->search[i]);
      ib_error_set (err, EINVAL,
                           "short name %s is ambiguous: unqualified-search-registries in %s "
                           "lists %s, and short-name-mode is enforcing (imgbuild does not "
                           "prompt): write the whole name (%s/%s), add an alias under "
                           "[aliases], or set short-name-mode = \"permissive\" to try them "
                           "in order",
                           name, c->search_path, list.data, c->search[0], name);
      ib_buf_free (&list);
      return -1;
    }
  for (size_t i = 0; i < n; i++)
    {
      bool hub = strcmp (c->search[i], "docker.io") == 0 && strchr (repo, '/') == NULL;
      cleanup_free char *full
          = xasprintf ("%s/%s%s%s", c->search[i], hub ? "library/" : "", repo, suffix);
      ib_strv_push (candidates, full);
    }
  if (how)
    *how = xasprintf ("unqualified-search-registries of %s", c->search_path);
  return 0;
}

int
ib_short_name_stored (ib_store_t *store, char *const *candidates)
{
  for (int i = 0; candidates && candidates[i]; i++)
    {
      ib_descriptor_t d = { 0 };
      bool found = ib_store_resolve (store, candidates[i], &d, NULL) == 0;
      ib_descriptor_clear (&d);
      if (found)
        return i;
    }
  return -1;
}

int
ib_short_name_choose (ib_store_t *store, const char *name, const char *os, const char *arch,
                      const char *variant, void (*before_pull) (void *), void *ud,
                      char **chosen, ib_error_t *err)
{
  *chosen = NULL;
  const ib_regconf_t *c = NULL;
  if (ib_regconf_get (&c, err) < 0)
    return -1;
  cleanup_strv char **cand = NULL;
  cleanup_free char *how = NULL;
  if (ib_short_name_resolve (c, name, &cand, &how, err) < 0)
    return -1;
  if (how)
    ib_debug ("%s: %zu candidate(s) from the %s, first %s", name, ib_strv_len (cand), how,
              cand[0]);
  if (cand[1] == NULL)
    {
      *chosen = xstrdup (cand[0]);
      return 0;
    }
  int k = ib_short_name_stored (store, cand);
  if (k >= 0)
    {
      *chosen = xstrdup (cand[k]);
      return 0;
    }
  if (before_pull)
    before_pull (ud);
  ib_buf_t why = { 0 };
  for (size_t i = 0; cand[i]; i++)
    {
      ib_error_t e = NULL;
      ib_descriptor_t d = { 0 };
      int r = ib_pull (store, cand[i], os, arch, variant, &d, &e);
      ib_descriptor_clear (&d);
      if (r == 0)
        {
          ib_buf_free (&why);
          *chosen = xstrdup (cand[i]);
          return 0;
        }
      ib_buf_printf (&why, "%s%s", i ? "; " : "", e->msg);
      ib_error_free (&e);
    }
  ib_error_set (err, ENOENT, "short name %s: no candidate of the %s could be pulled: %s", name,
                how, why.data);
  ib_buf_free (&why);
  return -1;
}
