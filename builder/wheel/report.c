/* builder/wheel/report.c — an audit told: the text of `auditwheel show`
 * (paragraphs wrapped at 70 columns, sets sorted), the JSON of `show
 * --json`, and the reasons a wheel falls short of a policy for
 * `OUTPUT require=`.  See wheel.h.
 */
#include "builder/wheel/wheel-int.h"
#include "common/util.h"

#include <stdlib.h>
#include <string.h>

/* The keys of `m`, sorted (strcmp); NULL when it is empty.  Caller frees. */
static char **
sorted_keys (const smap_t *m)
{
  char **keys = NULL;
  for (size_t i = 0; i < m->n; i++)
    ib_strv_push (&keys, m->e[i].key);
  ib_strv_sort (keys);
  return keys;
}

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
          ib_strv_sort (v);
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
          cleanup_strv char **names = sorted_keys (&r->libs);
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
          cleanup_strv char **keys = sorted_keys (&r->blacklist);
          for (size_t i = 0; keys[i]; i++)
            {
              ib_buf_t l = { 0 };
              ib_buf_printf (&l, "From %s: ", keys[i]);
              char **v = ibw_smap_find (&r->blacklist, keys[i])->vals;
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
  ib_strv_sort (c);
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
  cleanup_strv char **keys = sorted_keys (&a->versioned);
  for (size_t i = 0; keys && keys[i]; i++)
    json_object_set_new (vs, keys[i], sorted_strings (ibw_smap_find (&a->versioned, keys[i])->vals));
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
          cleanup_strv char **names = sorted_keys (&r->libs);
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

/* ---- require= ------------------------------------------------------------ */

/* Why the audited wheel `a` does not satisfy policy `req` (a->overall <
 * req): the versioned symbols above it, the libraries off its whitelist,
 * its black-listed symbols, and the other criteria, in auditwheel's terms. */
char *
ibw_unmet_reasons (const ib_wheel_audit_t *a, size_t req)
{
  ib_buf_t b = { 0 };
  const policy_t *p = &a->pol[req];
  if (req > a->sym)
    {
      ib_buf_printf (&b, "versioned symbols need %s (", a->pol[a->sym].name);
      bool first = true;
      cleanup_strv char **keys = sorted_keys (&a->versioned);
      for (size_t i = 0; keys && keys[i]; i++)
        {
          cleanup_strv char **vals = ib_strv_dup (ibw_smap_find (&a->versioned, keys[i])->vals);
          ib_strv_sort (vals);
          for (size_t j = 0; vals && vals[j]; j++)
            {
              const char *us = strchr (vals[j], '_');
              cleanup_free char *prefix
                  = us ? xstrndup (vals[j], (size_t) (us - vals[j])) : xstrdup (vals[j]);
              json_t *arr = p->symvers ? json_object_get (p->symvers, prefix) : NULL;
              if (!arr || (us && ibw_json_array_has (arr, us + 1)))
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
      cleanup_strv char **names = sorted_keys (&r->libs);
      for (size_t i = 0; names[i]; i++)
        ib_buf_printf (&b, "%s %s", i ? "," : "", names[i]);
    }
  if (r->blacklist.n)
    {
      ib_buf_printf (&b, "%sblack-listed symbols:", b.len ? "; " : "");
      for (size_t i = 0; i < r->blacklist.n; i++)
        {
          cleanup_strv char **syms = ib_strv_dup (r->blacklist.e[i].vals);
          ib_strv_sort (syms);
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
