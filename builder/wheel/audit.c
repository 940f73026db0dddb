/* builder/wheel/audit.c — the manylinux audit, auditwheel 6.x's
 * analyze_wheel_abi: every ELF object of the opened wheel read and its
 * libraries resolved (ldd.c), auditwheel's _fixup_elf_trees, the full
 * tree, each policy's external references and black-listed symbols, then
 * the symbol, ref, blacklist, graft, machine (x86-64 ISA level), UCS2 and
 * PyFPE policies and the overall tag.  See wheel.h (ib_wheel_audit).
 */
#include "builder/wheel/wheel-int.h"
#include "common/util.h"

#include <errno.h>
#include <libelf.h>
#include <stdlib.h>
#include <string.h>

static bool
in_whitelist (const policy_t *p, const char *so)
{
  if (strstr (so, "ld-linux") || strcmp (so, "ld64.so.2") == 0 || strcmp (so, "ld64.so.1") == 0)
    return true;
  return ibw_json_array_has (p->whitelist, so);
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
                                          sizeof (char *), ib_cmp_strp))))
                ibw_strv_add_unique (&ibw_smap_get (&r->blacklist, key)->vals, sym);
            }
        }
      for (size_t i = 0; i < r->blacklist.n; i++)
        ib_strv_sort (r->blacklist.e[i].vals);
      /* get_req_external: the closure over needed libraries off the whitelist */
      cleanup_strv char **todo = NULL, **reqs = NULL;
      for (size_t i = 0; t->needed && t->needed[i]; i++)
        if (!in_whitelist (p, t->needed[i]))
          ibw_strv_add_unique (&todo, t->needed[i]);
      while (ib_strv_len (todo))
        {
          size_t last = ib_strv_len (todo) - 1;
          cleanup_free char *lib = todo[last];
          todo[last] = NULL;
          ibw_strv_add_unique (&reqs, lib);
          lib_t *l = ibw_tree_lib (t, lib);
          for (size_t i = 0; l && l->needed && l->needed[i]; i++)
            if (!in_whitelist (p, l->needed[i]) && !ib_strv_has (reqs, l->needed[i]))
              ibw_strv_add_unique (&todo, l->needed[i]);
        }
      for (size_t i = 0; reqs && reqs[i]; i++)
        {
          lib_t *l = ibw_tree_lib (t, reqs[i]);
          const char *rp = l ? l->realpath : NULL;
          if (ibw_is_subdir (rp, a->wheel_dir))
            continue; /* resolved inside the wheel (RPATH): not external */
          smap_ent_t *e = ibw_smap_get (&r->libs, reqs[i]);
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
  ibw_smap_clear (&r->libs);
  ibw_smap_clear (&r->blacklist);
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
      ibw_elf_info_free (t->info);
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
  ibw_policies_free (a->pol, a->npol);
  json_decref (a->root);
  ibw_smap_clear (&a->versioned);
  for (size_t i = 0; i < a->ncache; i++)
    ibw_elf_info_free (a->cache[i]);
  free (a->cache);
  ib_strv_free (a->conf_paths);
  ib_strv_free (a->env_paths);
  free (a->wheel_dir);
  free (a->sysroot);
  free (a->wheel);
  free (a);
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
          lib_t *rl = l->realpath ? NULL : ibw_tree_lib ((tree_t *) ref, l->soname);
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
              ibw_strv_add_unique (&todo, rl->needed[k]);
          while (ib_strv_len (todo))
            {
              size_t last = ib_strv_len (todo) - 1;
              cleanup_free char *so = todo[last];
              todo[last] = NULL;
              ibw_strv_add_unique (&all, so);
              lib_t *dep = ibw_tree_lib ((tree_t *) ref, so);
              if (!dep)
                {
                  ib_warn ("wheel %s: %s not found in %s's tree", a->wheel, so, ref->rel);
                  continue;
                }
              if (!ibw_tree_lib (&fixed, so))
                tree_add_lib (&fixed, dep);
              for (size_t k = 0; dep->needed && dep->needed[k]; k++)
                if (!ib_strv_has (all, dep->needed[k]))
                  ibw_strv_add_unique (&todo, dep->needed[k]);
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
  a->sysroot = ibw_normpath (opts->root && *opts->root ? opts->root : "/");
  if (strcmp (a->sysroot, "/") == 0)
    a->sysroot[0] = '\0';
  int r = -1;
  const char *arch = ibw_name_arch (w->name.platform);
  const char *elf_arch = NULL;
  cleanup_strv char **files = NULL;
  cleanup_strv char **purelib = NULL;
  cleanup_strv char **needed_libs = NULL;
  if (ibw_walk (w->dir, NULL, false, ibw_walk_push, &files, err) < 0)
    goto out;
  ib_strv_sort (files);
  for (size_t i = 0; files && files[i]; i++)
    {
      if (ib_str_has_suffix (files[i], ".py"))
        continue;
      cleanup_free char *full = ib_path_join (w->dir, files[i]);
      const char *b = strrchr (files[i], '/');
      b = b ? b + 1 : files[i];
      cleanup_free char *mod = xstrndup (b, strcspn (b, "."));
      elf_info_t *info = NULL;
      if (ibw_elf_read (full, mod, &info, err) < 0)
        goto out;
      if (!info)
        continue;
      /* a shared library under a .data/purelib directory */
      if (strstr (files[i], "/purelib/") || ib_str_has_prefix (files[i], "purelib/"))
        {
          ib_strv_push (&purelib, b);
          ibw_elf_info_free (info);
          continue;
        }
      if (purelib)
        {
          ibw_elf_info_free (info);
          continue;
        }
      const char *ea = ibw_base_arch (info);
      if (!ea || (arch && strcmp (ea, arch) != 0) || (elf_arch && strcmp (ea, elf_arch) != 0))
        {
          ib_warn ("wheel %s: ignoring %s (%s architecture)", w->base, files[i],
                   ea ? ea : "unknown");
          ibw_elf_info_free (info);
          continue;
        }
      if (info->interp && strstr (info->interp, "ld-musl-"))
        {
          ibw_elf_info_free (info);
          ib_error_set (err, ENOTSUP, "wheel %s: %s: musl libc objects are not supported "
                        "(only manylinux policies are shipped)", w->base, files[i]);
          goto out;
        }
      for (size_t k = 0; info->needed && info->needed[k]; k++)
        if (ib_str_has_prefix (info->needed[k], "libc.musl-")
            || ib_str_has_prefix (info->needed[k], "ld-musl-"))
          {
            ibw_elf_info_free (info);
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
  if (ibw_policies_load (arch, &a->root, &a->pol, &a->npol, err) < 0)
    {
      ib_error_prefix (err, "wheel %s", w->base);
      goto out;
    }
  /* library search paths: LD_LIBRARY_PATH, /etc/ld.so.conf, defaults */
  ibw_ld_paths (a, opts->ld_library_path);
  /* each object's tree */
  for (size_t i = 0; i < a->nt; i++)
    if (ibw_ldd_tree (a, &a->t[i], opts->exclude, err) < 0)
      goto out;
  fixup_trees (a);
  /* full_elftree: extensions, and other objects no object in the wheel needs */
  for (size_t i = 0; i < a->nt; i++)
    for (size_t k = 0; a->t[i].needed && a->t[i].needed[k]; k++)
      ibw_strv_add_unique (&needed_libs, a->t[i].needed[k]);
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
      ibw_smap_merge (&versioned, &t->info->verneed);
      if (t->info->pyext)
        {
          pyfpe |= t->info->pyfpe;
          ucs2 |= t->info->py2 && t->info->ucs2;
        }
      if (!t->full)
        continue;
      for (size_t k = 1; k < a->npol; k++)
        {
          ibw_smap_merge (&a->refs[k].blacklist, &t->refs[k].blacklist);
          for (size_t j = 0; j < t->refs[k].libs.n; j++)
            {
              smap_ent_t *src = &t->refs[k].libs.e[j];
              smap_ent_t *dst = ibw_smap_get (&a->refs[k].libs, src->key);
              ib_strv_free (dst->vals);
              dst->vals = ib_strv_dup (src->vals);
            }
        }
    }
  for (size_t k = 1; k < a->npol; k++)
    for (size_t j = 0; j < a->refs[k].blacklist.n; j++)
      ib_strv_sort (a->refs[k].blacklist.e[j].vals);
  /* symbol policy: per policy, the wheel's versions plus those of the
   * external libraries that policy would graft */
  size_t best = 0;
  bool have_best = false;
  smap_t best_vs = { 0 };
  for (size_t k = 1; k < a->npol; k++)
    {
      smap_t ps = { 0 };
      ibw_smap_copy (&ps, &versioned);
      for (size_t j = 0; j < a->refs[k].libs.n; j++)
        {
          char **v = a->refs[k].libs.e[j].vals;
          if (!v || !v[0])
            continue;
          elf_info_t *li = NULL;
          if (ibw_cached_elf (a, v[0], &li, err) < 0)
            {
              ibw_smap_clear (&ps);
              ibw_smap_clear (&versioned);
              ibw_smap_clear (&best_vs);
              goto out;
            }
          if (li)
            ibw_smap_merge (&ps, &li->verneed);
        }
      size_t found = ibw_symbols_policy (a->pol, a->npol, &ps);
      if (found > k)
        found = k;
      if (!have_best || found > best)
        {
          best = found;
          have_best = true;
          ibw_smap_copy (&best_vs, &ps);
        }
      ibw_smap_clear (&ps);
    }
  if (have_best)
    {
      a->sym = best;
      a->versioned = best_vs;
      ibw_smap_clear (&versioned);
    }
  else
    {
      a->sym = ibw_symbols_policy (a->pol, a->npol, &versioned);
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
              external = ibw_smap_find (&a->refs[k].libs, l->soname) != NULL;
            if (!external)
              continue;
            elf_info_t *li = NULL;
            if (ibw_cached_elf (a, l->realpath, &li, err) < 0)
              goto out;
            if (!li || li->isa_level == 0)
              continue;
            size_t f = 0;
            for (size_t k = 1; k < a->npol; k++)
              if (ibw_json_array_has (a->pol[k].whitelist, l->soname))
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
