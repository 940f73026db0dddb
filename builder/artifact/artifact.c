/* builder/artifact/artifact.c — `imgbuild artifact push|pull`
 * (builder/artifact/artifact.h): check the arguments, derive the missing
 * characteristics, hand the files to a backend (s3_backend.c,
 * oci_backend.c), and for pull move the fetched files from their temp
 * directory into place with their .meta files.  Also the helpers the
 * backends share (builder/artifact/private.h).
 */
#include "builder/artifact/artifact.h"
#include "builder/artifact/private.h"

#include "common/util.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

/* ---- shared with the backends (builder/artifact/private.h) ------------- */

static void
files_free (art_file_t *f, size_t n)
{
  for (size_t i = 0; f && i < n; i++)
    {
      free (f[i].rel);
      free (f[i].path);
    }
  free (f);
}

void
ib_art_files_add (art_file_t **f, size_t *n, const char *rel, const char *path)
{
  *f = xrealloc (*f, sizeof **f * (*n + 1));
  (*f)[*n].rel = xstrdup (rel);
  (*f)[*n].path = xstrdup (path);
  (*n)++;
}

bool
ib_art_files_has (const art_file_t *f, size_t n, const char *rel)
{
  for (size_t i = 0; i < n; i++)
    if (strcmp (f[i].rel, rel) == 0)
      return true;
  return false;
}

/* Create tmp/rel (parents too) for writing. */
int
ib_art_create_in (const char *tmp, const char *rel, ib_error_t *err)
{
  cleanup_free char *path = ib_path_join (tmp, rel);
  cleanup_free char *dir = xstrdup (path);
  *strrchr (dir, '/') = '\0';
  if (ib_mkdir_p (dir, 0755, err) < 0)
    return -1;
  int fd = open (path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    return ib_error_sys (err, errno, "create %s", path);
  return fd;
}

int
ib_art_finish_fd (int fd, const char *shown, ib_error_t *err)
{
  if (fsync (fd) < 0)
    {
      int e = errno;
      close (fd);
      return ib_error_sys (err, e, "fsync %s", shown);
    }
  if (close (fd) < 0)
    return ib_error_sys (err, errno, "close %s", shown);
  return 0;
}

/* "; stored for commit C: L/O/V, ..." from the distinct "L/O/V" in
 * `found` (NULL-terminated, may be NULL or empty: ""). */
char *
ib_art_stored_hint (const char *commit, char **found)
{
  if (found == NULL || found[0] == NULL)
    return xstrdup ("");
  ib_buf_t b = { 0 };
  ib_buf_printf (&b, "; stored for commit %s: ", commit);
  for (size_t i = 0; found[i]; i++)
    ib_buf_printf (&b, "%s%s", i ? ", " : "", found[i]);
  return ib_buf_steal (&b);
}

void
ib_art_add_distinct (char ***v, const char *s)
{
  for (size_t i = 0; *v && (*v)[i]; i++)
    if (strcmp ((*v)[i], s) == 0)
      return;
  ib_strv_push (v, s);
}

/* ---- push and pull ----------------------------------------------------- */

static int
resolve_id (ib_artifact_opts_t *o, bool pull, ib_error_t *err)
{
  ib_artifact_id_t *id = &o->id;
  if (id->commit == NULL && ib_artifact_probe_commit (&id->commit, err) < 0)
    return -1;
  if (id->variant == NULL && pull)
    {
      ib_warn ("variant not set: using 'cpu' (give --variant)");
      id->variant = xstrdup ("cpu");
    }
  if (id->variant == NULL && ib_artifact_probe_variant (o->lib, &id->variant, err) < 0)
    return -1;
  if (id->os == NULL)
    {
      struct utsname u;
      if (uname (&u) < 0)
        return ib_error_sys (err, errno, "operating system: uname (give --os)");
      for (char *p = u.sysname; *p; p++)
        *p = (char) tolower ((unsigned char) *p);
      if (ib_artifact_probe_os (u.sysname, "/etc/os-release", &id->os, err) < 0)
        return -1;
    }
  if (id->libtype == NULL)
    id->libtype = xstrdup ("dynamic");
  return ib_artifact_id_check (id, err);
}

int
ib_artifact_push (ib_artifact_opts_t *o, ib_store_t *store, ib_error_t *err)
{
  if (o->repository == NULL || *o->repository == '\0')
    return ib_error_set (err, EINVAL, "artifact push: no repository (give --repository "
                         "s3://BUCKET[/PREFIX] or REGISTRY/REPOSITORY)");
  if (o->lib == NULL || *o->lib == '\0')
    return ib_error_set (err, EINVAL, "artifact push: the library must be given (--lib FILE)");
  struct stat st;
  if (stat (o->lib, &st) < 0)
    return ib_error_sys (err, errno, "artifact push: library '%s'", o->lib);
  if (!S_ISREG (st.st_mode))
    return ib_error_set (err, EINVAL, "artifact push: library '%s' is not a regular file", o->lib);
  cleanup_strv char **licenses = NULL;
  cleanup_strv char **deps = NULL;
  if (ib_artifact_expand_paths (o->licenses, "license", &licenses, err) < 0
      || ib_artifact_expand_paths (o->dependencies, "dependency", &deps, err) < 0)
    return ib_error_prefix (err, "artifact push");
  if (licenses[0] == NULL)
    return ib_error_set (err, EINVAL, "artifact push: No licenses defined. Please submit the "
                         "licenses to be shipped with the binary (--licenses FILE).");
  if (resolve_id (o, false, err) < 0)
    return ib_error_prefix (err, "artifact push");
  cleanup_free char *key = ib_artifact_key_prefix (&o->id, NULL);
  art_file_t *f = NULL;
  size_t n = 0;
  ib_art_files_add (&f, &n, ib_art_base_name (o->lib), o->lib);
  for (size_t i = 0; licenses[i]; i++)
    {
      cleanup_free char *rel = xasprintf ("licenses/%s", ib_art_base_name (licenses[i]));
      ib_art_files_add (&f, &n, rel, licenses[i]);
    }
  for (size_t i = 0; deps[i]; i++)
    {
      cleanup_free char *rel = xasprintf ("dependencies/%s", ib_art_base_name (deps[i]));
      ib_art_files_add (&f, &n, rel, deps[i]);
    }
  ib_info ("Pushing artifact %s (commit id %s, os %s, variant %s, libtype %s) to %s", key,
           o->id.commit, o->id.os, o->id.variant, o->id.libtype, o->repository);
  int ret = ib_artifact_is_s3 (o->repository) ? ib_art_push_s3 (o, key, f, n, err)
                                                : ib_art_push_oci (o, store, key, f, n, err);
  files_free (f, n);
  if (ret < 0)
    return ib_error_prefix (err, "artifact push %s", key);
  ib_info ("Pushed %s", key);
  return 0;
}

int
ib_artifact_pull (ib_artifact_opts_t *o, ib_store_t *store, ib_error_t *err)
{
  if (o->repository == NULL || *o->repository == '\0')
    return ib_error_set (err, EINVAL, "artifact pull: no repository (give --repository "
                         "s3://BUCKET[/PREFIX] or REGISTRY/REPOSITORY)");
  if (resolve_id (o, true, err) < 0)
    return ib_error_prefix (err, "artifact pull");
  const char *dest = o->destination && *o->destination ? o->destination : ".";
  cleanup_free char *key = ib_artifact_key_prefix (&o->id, NULL);
  ib_info ("Pulling artifact %s (commit id %s, os %s, variant %s, libtype %s) from %s into %s",
           key, o->id.commit, o->id.os, o->id.variant, o->id.libtype, o->repository, dest);
  if (ib_mkdir_p (dest, 0755, err) < 0)
    return ib_error_prefix (err, "artifact pull");
  cleanup_free char *tmp = xasprintf ("%s/.imgbuild-artifact-XXXXXX", dest);
  if (mkdtemp (tmp) == NULL)
    return ib_error_sys (err, errno, "artifact pull: create %s", tmp);
  art_file_t *f = NULL;
  size_t n = 0;
  int ret = ib_artifact_is_s3 (o->repository) ? ib_art_pull_s3 (o, key, tmp, &f, &n, err)
                                                : ib_art_pull_oci (o, store, key, tmp, &f, &n, err);
  /* every file is complete and verified: move them into place */
  for (size_t i = 0; ret == 0 && i < n; i++)
    {
      cleanup_free char *from = ib_path_join (tmp, f[i].rel);
      cleanup_free char *to = ib_path_join (dest, f[i].rel);
      cleanup_free char *dir = xstrdup (to);
      *strrchr (dir, '/') = '\0';
      if (ib_mkdir_p (dir, 0755, err) < 0)
        ret = -1;
      else if (rename (from, to) < 0)
        ret = ib_error_sys (err, errno, "rename %s to %s", from, to);
    }
  cleanup_free char *meta = ib_artifact_meta_text (&o->id);
  for (size_t i = 0; ret == 0 && i < n; i++)
    {
      if (strchr (f[i].rel, '/'))
        continue;
      cleanup_free char *name = ib_artifact_meta_name (f[i].rel);
      cleanup_free char *path = ib_path_join (dest, name);
      ret = ib_write_file_atomic (path, meta, strlen (meta), 0644, err);
    }
  if (ret == 0)
    ret = ib_fsync_dir (dest, err);
  ib_error_t e2 = NULL;
  if (ib_rm_rf (tmp, &e2) < 0)
    ib_error_report (&e2);
  if (ret < 0)
    {
      files_free (f, n);
      return ib_error_prefix (err, "artifact pull %s", key);
    }
  ib_info ("Pulled %zu files of %s into %s", n, key, dest);
  files_free (f, n);
  return 0;
}
