/* builder/wheel/policy.c — the manylinux policies (PEP 600): auditwheel's
 * policy table, embedded at build time with .incbin from
 * data/manylinux-policy.json (the Makefile makes this object depend on
 * it), loaded per architecture and ordered by priority; the versioned
 * symbols policy; policy names and aliases.  See wheel-int.h.
 */
#include "builder/wheel/wheel-int.h"
#include "common/util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

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

static int
cmp_policy (const void *a, const void *b)
{
  return ((const policy_t *) a)->priority - ((const policy_t *) b)->priority;
}

bool
ibw_json_array_has (json_t *arr, const char *s)
{
  size_t k;
  json_t *v;
  json_array_foreach (arr, k, v)
    if (json_is_string (v) && strcmp (json_string_value (v), s) == 0)
      return true;
  return false;
}

int
ibw_policies_load (const char *arch, json_t **root, policy_t **out, size_t *n, ib_error_t *err)
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
      ibw_policies_free (p, cnt);
      json_decref (j);
      return ib_error_set (err, ENOTSUP, "no manylinux policy for architecture %s", arch);
    }
  *root = j;
  *out = p;
  *n = cnt;
  return 0;
}

void
ibw_policies_free (policy_t *p, size_t n)
{
  for (size_t i = 0; i < n; i++)
    {
      free (p[i].name);
      ib_strv_free (p[i].aliases);
    }
  free (p);
}

/* versioned_symbols_policy: the highest policy whose symbol_versions hold
 * every required version, prefix by prefix (prefixes a policy does not
 * list are not checked).  Returns the index. */
size_t
ibw_symbols_policy (const policy_t *p, size_t np, const smap_t *vs)
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
            if (!us || !ibw_json_array_has (arr, us + 1))
              ok = false;
          }
      if (ok)
        return k;
    }
  return 0;
}

const char *
ibw_name_arch (const char *platform)
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

size_t
ibw_policy_index (const policy_t *p, size_t np, const char *name)
{
  for (size_t k = 0; k < np; k++)
    if (strcmp (p[k].name, name) == 0 || ib_strv_has (p[k].aliases, name))
      return k;
  return SIZE_MAX;
}

int
ib_wheel_policy_check (const char *plat, ib_error_t *err)
{
  const char *arch = ibw_name_arch (plat);
  if (!arch)
    return ib_error_set (err, EINVAL, "%s names no architecture (like manylinux_2_17_x86_64)",
                         plat);
  json_t *root = NULL;
  policy_t *p = NULL;
  size_t n = 0;
  if (ibw_policies_load (arch, &root, &p, &n, err) < 0)
    return -1;
  size_t k = ibw_policy_index (p, n, plat);
  bool found = k != SIZE_MAX && k > 0; /* 0 is linux_<arch>: not a policy to satisfy */
  ibw_policies_free (p, n);
  json_decref (root);
  if (!found)
    return ib_error_set (err, EINVAL, "%s: no manylinux policy of that name", plat);
  return 0;
}
