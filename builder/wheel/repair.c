/* builder/wheel/repair.c — auditwheel repair: the wheel opened with every
 * member extracted and audited with grafting allowed; each external
 * library copied into <distribution>.libs/ under a name with its digest,
 * its soname set and the DT_NEEDED entries naming it rewritten, RPATH set
 * to $ORIGIN (Debian's patchelf, one change per call); libpython links
 * removed; the platform tag replaced in the file name and WHEEL; the
 * wheel written (zip.c), verified and audited again.  See wheel.h.
 */
#include "builder/wheel/wheel-int.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

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
  unsigned char d[EVP_MAX_MD_SIZE];
  unsigned int dl = 0;
  if (ibw_digest_file (path, EVP_sha256 (), d, &dl, err) < 0)
    return -1;
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
      cleanup_free char *np = ibw_normpath (entry);
      return entry[0] == '/' && ibw_is_subdir (np, wheel_dir);
    }
  cleanup_free char *full = ibw_expand_origin (entry, dir);
  cleanup_free char *np = ibw_normpath (full);
  return ibw_is_subdir (np, wheel_dir);
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
        ibw_strv_add_unique (&plats, t);
  }
  for (size_t i = 0; abis[i]; i++)
    ibw_strv_add_unique (&plats, abis[i]);
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
  ib_strv_sort (plats);
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
      ibw_strv_add_unique (&pairs, pair);
    }
  for (size_t i = 0; w->wheel_tags && w->wheel_tags[i]; i++)
    {
      const char *d = strrchr (w->wheel_tags[i], '-');
      if (strcmp (d + 1, remove) != 0 && !(strcmp (d + 1, "any") == 0 && abis[0]))
        ibw_strv_add_unique (&tags, w->wheel_tags[i]);
    }
  for (size_t p = 0; pairs && pairs[p]; p++)
    for (size_t i = 0; abis[i]; i++)
      {
        cleanup_free char *t = xasprintf ("%s-%s", pairs[p], abis[i]);
        ibw_strv_add_unique (&tags, t);
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
  const char *plat_arch = ibw_name_arch (opts->plat);
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
  if (ibw_open (path, true, &w, err) < 0)
    return -1;
  const char *wa = ibw_name_arch (w->name.platform);
  if (wa && strcmp (wa, plat_arch) != 0)
    {
      ib_error_set (err, EINVAL, "wheel %s: cannot repair a %s wheel to %s", w->base, wa,
                    opts->plat);
      goto out;
    }
  ib_wheel_audit_opts_t ao = { .allow_graft = true, .requested_base = base,
                               .exclude = opts->exclude, .root = opts->root,
                               .ld_library_path = opts->ld_library_path };
  if (ib_wheel_audit (w, &ao, &a, err) < 0)
    goto out;
  if (a->pure)
    {
      ib_error_set (err, EINVAL, "wheel %s: a pure Python wheel: nothing to repair", w->base);
      goto out;
    }
  size_t req = ibw_policy_index (a->pol, a->npol, opts->plat);
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
          if (ibw_is_libpython (so))
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
                            "found %s", w->base, t->rel, so,
                            opts->root && *opts->root
                                ? "in the root filesystem's library path (LD_LIBRARY_PATH, "
                                  "/etc/ld.so.conf, default directories)"
                                : "on this host");
              goto out;
            }
          smap_ent_t *m = ibw_smap_find (&soname_map, so);
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
              m = ibw_smap_get (&soname_map, so);
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
              ibw_strv_add_unique (&keep, old[k]);
          cleanup_free char *mine = origin_rpath (t->rel, dest_rel);
          ibw_strv_add_unique (&keep, mine);
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
      if (ibw_elf_read (file, NULL, &li, err) < 0)
        goto out;
      bool any = false;
      for (size_t k = 0; li && li->needed && li->needed[k]; k++)
        {
          smap_ent_t *m = ibw_smap_find (&soname_map, li->needed[k]);
          if (!m)
            continue;
          if (!any && patchelf (prog, "--force-rpath", "--set-rpath", "$ORIGIN", file, rel, err) < 0)
            {
              ibw_elf_info_free (li);
              goto out;
            }
          any = true;
          if (patchelf (prog, "--replace-needed", li->needed[k], m->vals[0], file, rel, err) < 0)
            {
              ibw_elf_info_free (li);
              goto out;
            }
        }
      bool had_rpath = li && (li->rpath || li->runpath);
      ibw_elf_info_free (li);
      if (!any && had_rpath && patchelf (prog, "--remove-rpath", NULL, NULL, file, rel, err) < 0)
        goto out;
    }
  if (retag (w, abis, remove, &new_base, err) < 0)
    goto out;
  if (ib_mkdir_p (opts->out_dir, 0755, err) < 0)
    goto out;
  {
    cleanup_free char *out = ib_path_join (opts->out_dir, new_base);
    if (ibw_write_zip (w, out, err) < 0)
      goto out;
    /* the result must verify and audit as the requested policy or better */
    ib_wheel_t *w2 = NULL;
    ib_wheel_audit_t *a2 = NULL;
    ib_wheel_audit_opts_t o2 = { .exclude = opts->exclude, .root = opts->root,
                                 .ld_library_path = opts->ld_library_path };
    if (ib_wheel_open (out, &w2, err) < 0 || ib_wheel_audit (w2, &o2, &a2, err) < 0)
      {
        ib_wheel_close (w2);
        ib_error_prefix (err, "wheel repair: the repaired wheel");
        goto out;
      }
    size_t got = ibw_policy_index (a2->pol, a2->npol, ib_wheel_audit_tag (a2));
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
  ibw_smap_clear (&soname_map);
  ib_wheel_audit_free (a);
  ib_wheel_close (w);
  return r;
}
