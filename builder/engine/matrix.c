/* builder/engine/matrix.c — --matrix specs and their combinations (matrix.h). */
#include "builder/engine/matrix.h"
#include "common/util.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static bool
arg_name_ok (const char *s, size_t n)
{
  if (n == 0 || !(isalpha ((unsigned char) s[0]) || s[0] == '_'))
    return false;
  for (size_t i = 1; i < n; i++)
    if (!(isalnum ((unsigned char) s[i]) || s[i] == '_'))
      return false;
  return true;
}

int
ib_matrix_add (ib_matrix_t *m, const char *spec, ib_error_t *err)
{
  const char *eq = strchr (spec, '=');
  if (eq == NULL)
    return ib_error_set (err, EINVAL, "--matrix %s: expected NAME=VALUE[,VALUE...]", spec);
  size_t nlen = (size_t) (eq - spec);
  if (!arg_name_ok (spec, nlen))
    return ib_error_set (err, EINVAL, "--matrix %s: '%.*s' is not a build-arg name", spec,
                         (int) nlen, spec);
  cleanup_free char *name = xstrndup (spec, nlen);
  for (size_t i = 0; i < m->n_axes; i++)
    if (strcmp (m->axes[i].name, name) == 0)
      return ib_error_set (err, EINVAL, "--matrix %s: %s is given by an earlier --matrix", spec,
                           name);
  if (eq[1] == '\0')
    return ib_error_set (err, EINVAL, "--matrix %s: no values (expected %s=VALUE[,VALUE...])",
                         spec, name);
  cleanup_strv char **values = NULL;
  for (const char *p = eq + 1;;)
    {
      const char *comma = strchr (p, ',');
      size_t len = comma ? (size_t) (comma - p) : strlen (p);
      if (len == 0)
        return ib_error_set (err, EINVAL, "--matrix %s: an empty value", spec);
      cleanup_free char *v = xstrndup (p, len);
      for (char **o = values; o && *o; o++)
        if (strcmp (*o, v) == 0)
          return ib_error_set (err, EINVAL, "--matrix %s: value '%s' listed twice", spec, v);
      ib_strv_push (&values, v);
      if (comma == NULL)
        break;
      p = comma + 1;
    }
  m->axes = xrealloc (m->axes, (m->n_axes + 1) * sizeof (ib_matrix_axis_t));
  m->axes[m->n_axes].name = steal_pointer (&name);
  m->axes[m->n_axes].values = steal_pointer (&values);
  m->n_axes++;
  return 0;
}

int
ib_matrix_check_args (const ib_matrix_t *m, char *const *build_args, ib_error_t *err)
{
  for (char *const *a = build_args; a && *a; a++)
    {
      size_t n = strcspn (*a, "=");
      for (size_t i = 0; i < m->n_axes; i++)
        if (strlen (m->axes[i].name) == n && strncmp (m->axes[i].name, *a, n) == 0)
          return ib_error_set (err, EINVAL, "--build-arg %s: %s is a --matrix argument", *a,
                               m->axes[i].name);
    }
  return 0;
}

size_t
ib_matrix_count (const ib_matrix_t *m)
{
  size_t n = 1;
  for (size_t i = 0; i < m->n_axes; i++)
    n *= ib_strv_len (m->axes[i].values);
  return n;
}

char **
ib_matrix_combination (const ib_matrix_t *m, size_t index)
{
  /* mixed radix, the last axis the fastest digit */
  size_t *pick = xmalloc ((m->n_axes + 1) * sizeof (size_t));
  for (size_t i = m->n_axes; i-- > 0;)
    {
      size_t n = ib_strv_len (m->axes[i].values);
      pick[i] = index % n;
      index /= n;
    }
  char **out = xmalloc (sizeof (char *));
  for (size_t i = 0; i < m->n_axes; i++)
    {
      cleanup_free char *kv = xasprintf ("%s=%s", m->axes[i].name, m->axes[i].values[pick[i]]);
      ib_strv_push (&out, kv);
    }
  free (pick);
  return out;
}

void
ib_matrix_clear (ib_matrix_t *m)
{
  for (size_t i = 0; i < m->n_axes; i++)
    {
      free (m->axes[i].name);
      ib_strv_free (m->axes[i].values);
    }
  free (m->axes);
  m->axes = NULL;
  m->n_axes = 0;
}
