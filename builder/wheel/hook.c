/* builder/wheel/hook.c — the build's hooks for the wheels an OUTPUT
 * copies: verify and audit each one and log its tag (ib_wheel_check_output,
 * ib_wheel_check_copied), repair it in place when asked, remove one that
 * fails from the destination, and check `require=PLAT` before anything
 * is copied (ib_wheel_check_required).  See wheel.h.
 */
#include "builder/wheel/wheel-int.h"
#include "common/util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int
check_one (const char *path, const char *root, char *const *ld_library_path, bool *pure,
           ib_error_t *err)
{
  ib_wheel_t *w = NULL;
  if (ib_wheel_open (path, &w, err) < 0)
    return -1;
  ib_wheel_audit_t *a = NULL;
  ib_wheel_audit_opts_t ao = { .root = root, .ld_library_path = ld_library_path };
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
  return check_one (path, NULL, NULL, NULL, err);
}

typedef struct output_check
{
  const char *root, *plat;
  char *const *ld_library_path;
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
check_or_repair_at (const char *path, const output_check_t *o, char **repaired, ib_error_t *err)
{
  bool pure = false;
  if (repaired)
    *repaired = NULL;
  if (check_one (path, o->root, o->ld_library_path, &pure, err) < 0)
    return reject_wheel (path, err);
  if (!o->plat || pure)
    {
      if (repaired)
        *repaired = xstrdup (path);
      return 0;
    }
  cleanup_free char *dir = xstrdup (path);
  char *sl = strrchr (dir, '/');
  if (sl)
    *sl = '\0';
  ib_wheel_repair_opts_t ro = { .plat = o->plat, .out_dir = sl ? dir : ".",
                                .exclude = o->exclude, .root = o->root,
                                .ld_library_path = o->ld_library_path };
  cleanup_free char *out = NULL;
  if (ib_wheel_repair (path, &ro, &out, err) < 0)
    return reject_wheel (path, err);
  if (strcmp (out, path) != 0 && unlink (path) < 0)
    return ib_error_sys (err, errno, "remove %s (repaired as %s)", path, out);
  if (repaired)
    *repaired = steal_pointer (&out);
  return 0;
}

static int
check_or_repair (const char *path, const output_check_t *o, ib_error_t *err)
{
  return check_or_repair_at (path, o, NULL, err);
}

int
ib_wheel_check_one (const char *path, const char *root, char *const *ld_library_path,
                    const char *repair, const char *repair_exclude, char **out_path,
                    ib_error_t *err)
{
  output_check_t o = { .root = root, .ld_library_path = ld_library_path,
                       .plat = repair && *repair ? repair : NULL };
  cleanup_strv char **excl = NULL;
  if (repair_exclude && *repair_exclude)
    ibw_split_path_list (repair_exclude, &excl);
  o.exclude = excl;
  return check_or_repair_at (path, &o, out_path, err);
}

/* ibw_walk's callback for a directory copied into `dest`: `rel` a *.whl
 * file under it, checked (or repaired) at its place in `dest`. */
typedef struct copied_walk
{
  const char *dest;
  const output_check_t *o;
} copied_walk_t;

static int
check_copied (const char *rel, void *ctx, ib_error_t *err)
{
  const copied_walk_t *c = ctx;
  cleanup_free char *out = ib_path_join (c->dest, rel);
  return check_or_repair (out, c->o, err);
}

int
ib_wheel_check_copied (const char *src, const char *dest, const char *root,
                       char *const *ld_library_path, const char *repair,
                       const char *repair_exclude, ib_error_t *err)
{
  output_check_t o = { .root = root, .plat = repair && *repair ? repair : NULL,
                       .ld_library_path = ld_library_path };
  cleanup_strv char **excl = NULL;
  if (repair_exclude && *repair_exclude)
    ibw_split_path_list (repair_exclude, &excl);
  o.exclude = excl;
  struct stat st;
  if (lstat (src, &st) < 0)
    return ib_error_sys (err, errno, "stat %s", src);
  if (S_ISDIR (st.st_mode))
    {
      /* files before subdirectories, sorted: the log lines and the first
       * failure do not depend on readdir */
      copied_walk_t c = { dest, &o };
      return ibw_walk (src, ".whl", true, check_copied, &c, err);
    }
  if (!S_ISREG (st.st_mode) || !ib_str_has_suffix (src, ".whl"))
    return 0;
  const char *b = strrchr (src, '/');
  cleanup_free char *out = ib_path_join (dest, b ? b + 1 : src);
  return check_or_repair (out, &o, err);
}

/* ---- require= ------------------------------------------------------------ */

int
ib_wheel_check_required (const char *src, const char *root, char *const *ld_library_path,
                         const char *plat, ib_error_t *err)
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
      if (ibw_walk (src, ".whl", false, ibw_walk_push, &rels, err) < 0)
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
      ib_wheel_audit_opts_t ao = { .root = root, .ld_library_path = ld_library_path };
      if (ib_wheel_open (full, &w, err) < 0 || ib_wheel_audit (w, &ao, &a, err) < 0)
        {
          ib_wheel_close (w);
          ib_buf_free (&why);
          return -1;
        }
      size_t req = a->pure ? SIZE_MAX : ibw_policy_index (a->pol, a->npol, plat);
      if (!a->pure && req == SIZE_MAX)
        ib_buf_printf (&why, "%swheel %s: not a %s wheel", failed++ ? "; " : "", w->base,
                       ibw_name_arch (plat));
      else if (!a->pure && a->overall < req)
        {
          cleanup_free char *reasons = ibw_unmet_reasons (a, req);
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
