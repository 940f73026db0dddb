/* builder/engine/outputs.c — OUTPUT and --output: the stage's image stored
 * and tagged, files exported, wheels audited; the OCI layout export. */
#include "builder/engine/engine.h"
#include "oci/export.h"
#include "builder/engine/fsops.h"
#include "oci/registry.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* An OUTPUT option as written (to be expanded), or NULL. */
const char *
kv_get (const ib_instr_t *in, const char *key)
{
  for (size_t i = 0; i < in->n_kvs; i++)
    if (strcmp (in->kvs[i].key, key) == 0)
      return in->kvs[i].raw ? in->kvs[i].raw : in->kvs[i].value;
  return NULL;
}

int
store_stage_image (build_t *b, stage_state_t *st, ib_error_t *err)
{
  if (st->manifest_digest[0])
    return 0;
  /* `created`: the time of the last step (its history entry), so that a
   * rebuild whose steps all hit the cache gives the same config. */
  json_t *h = json_object_get (st->config, "history");
  const char *last = json_string_value (
      json_object_get (json_array_get (h, json_array_size (h) ? json_array_size (h) - 1 : 0),
                       "created"));
  cleanup_free char *created = last ? xstrdup (last) : created_now (b);
  json_object_set_new (st->config, "created", json_string (created));
  /* --label KEY=VALUE: in the stored image's config only (a stage FROM
   * this one does not inherit them: they are the build's, not the recipe's) */
  json_t *labeled = NULL;
  if (b->opts->labels)
    {
      labeled = json_deep_copy (st->config);
      json_t *cc = json_object_get (labeled, "config");
      if (!json_is_object (cc))
        json_object_set_new (labeled, "config", cc = json_object ());
      json_t *labels = json_object_get (cc, "Labels");
      if (!json_is_object (labels))
        json_object_set_new (cc, "Labels", labels = json_object ());
      for (char *const *l = b->opts->labels; *l; l++)
        {
          const char *eq = strchr (*l, '=');
          cleanup_free char *k = xstrndup (*l, (size_t) (eq - *l));
          json_object_set_new (labels, k, json_string (eq + 1));
        }
    }
  cleanup_free char *cfg = json_dumps (labeled ? labeled : st->config, JSON_COMPACT | JSON_SORT_KEYS);
  if (labeled)
    json_decref (labeled);
  ib_descriptor_t cd = { .media_type = IB_MT_OCI_CONFIG, .size = (int64_t) strlen (cfg) };
  if (ib_store_put_blob (b->store, cfg, strlen (cfg), cd.digest, err) < 0)
    return -1;
  json_t *ann = NULL;
  for (char **a = b->opts->annotations; a && *a; a++)
    {
      const char *eq = strchr (*a, '=');
      if (ann == NULL)
        ann = json_object ();
      cleanup_free char *k = xstrndup (*a, (size_t) (eq - *a));
      json_object_set_new (ann, k, json_string (eq + 1));
    }
  cleanup_free char *man = ib_manifest_serialize (&cd, st->layers, st->n_layers, ann);
  json_decref (ann);
  if (ib_store_put_blob (b->store, man, strlen (man), st->manifest_digest, err) < 0)
    return -1;
  st->manifest_size = (int64_t) strlen (man);
  return 0;
}

/* Tag the stored manifest or index `digest` (`mt`, `size` bytes) as
 * `name`, normalized into *full (caller frees). */
static int
tag_image (ib_store_t *store, const char *name, const char *mt, const char *digest, int64_t size,
           char **full, ib_error_t *err)
{
  ib_ref_t ref = { 0 };
  if (ib_ref_parse (name, &ref, err) < 0)
    return -1;
  *full = ib_ref_string (&ref);
  ib_ref_free (&ref);
  if (ib_store_lock (store, true, err) < 0)
    return -1;
  int r = ib_store_tag (store, *full, mt, digest, size, err);
  ib_store_unlock (store);
  return r;
}

/* type=oci: does `dest` take a layout directory (where dest is one
 * already, ends in '/', or tar=false) rather than buildx's tarball of it
 * (docs/recipe.md)? */
static bool
oci_dest_is_dir (const ib_instr_t *in, const char *dest)
{
  const char *tar = kv_get (in, "tar");
  struct stat sb;
  return tar ? strcmp (tar, "false") == 0
             : ib_str_has_suffix (dest, "/") || (stat (dest, &sb) == 0 && S_ISDIR (sb.st_mode));
}

/* type=oci: the image or index `digest` as a layout directory or tarball at `dest`. */
static int
write_oci (ib_store_t *store, const char *digest, const char *name, const char *dest, bool dir,
           ib_error_t *err)
{
  cleanup_free char *d = xstrdup (dest);
  for (size_t n = strlen (d); dir && n > 1 && d[n - 1] == '/'; n--)
    d[n - 1] = '\0';
  return dir ? ib_export_oci (store, digest, name ? name : "latest", d, err)
             : ib_export_oci_archive (store, digest, name ? name : "latest", d, err);
}

/* The host path of an OUTPUT's src= (default "/") in the stage's rootfs,
 * resolved inside it, and its stat. */
static int
output_src (stage_state_t *st, const char *src, char **from, struct stat *sb, ib_error_t *err)
{
  if (ib_root_resolve (st->rootfs, src ? src : "/", true, from, err) < 0)
    return -1;
  if (stat (*from, sb) < 0)
    return ib_error_sys (err, errno, "src=%s", src ? src : "/");
  return 0;
}

/* Whether an LD_LIBRARY_PATH entry holds one of ld.so's dynamic string
 * tokens (ld.so(8): $ORIGIN, $LIB, $PLATFORM, also as ${NAME}). */
static bool
has_dst (const char *entry)
{
  static const char *const tokens[] = { "$ORIGIN", "${ORIGIN}", "$LIB", "${LIB}",
                                        "$PLATFORM", "${PLATFORM}", NULL };
  for (size_t i = 0; tokens[i]; i++)
    if (strstr (entry, tokens[i]))
      return true;
  return false;
}

/* The stage's LD_LIBRARY_PATH (the value its image config's Env ends
 * with) as the wheel checks search it (ib_wheel_hooks_t): each entry,
 * separated by ':' or ';' as ld.so separates them, resolved inside the
 * stage's root filesystem (symlinks taken inside it) into a host path.
 * As ld.so does, an empty or relative entry is taken from the directory a
 * process of the stage starts in, its WORKDIR; an entry with a dynamic
 * string token ($ORIGIN, $LIB, $PLATFORM, which ld.so expands per
 * program) is skipped, as is one that cannot be resolved.  NULL when the
 * stage sets none; the process's own LD_LIBRARY_PATH is never read.
 * Caller frees. */
char **
stage_ld_library_path (stage_state_t *st)
{
  const char *v = config_env_get (st->config, "LD_LIBRARY_PATH");
  if (v == NULL || *v == '\0')
    return NULL;
  const char *wd = config_string (st->config, "WorkingDir");
  if (wd == NULL || wd[0] != '/')
    wd = "/";
  char **out = xmalloc (sizeof *out);
  for (const char *p = v;; p++)
    {
      size_t len = strcspn (p, ":;");
      cleanup_free char *entry = xstrndup (p, len);
      if (!has_dst (entry))
        {
          cleanup_free char *in_root = entry[0] == '/' ? xstrdup (entry) : ib_path_join (wd, entry);
          char *host = NULL;
          if (ib_root_resolve (st->rootfs, in_root, true, &host, NULL) == 0)
            {
              ib_strv_push (&out, host);
              free (host);
            }
        }
      p += len;
      if (*p == '\0')
        break;
    }
  return out;
}

/* OUTPUT type=tar: the stage's root filesystem (or the tree under src=)
 * as one tarball written by the layer writer (sorted, PAX, mtimes clamped
 * to SOURCE_DATE_EPOCH: byte-identical across builds of the same tree),
 * uncompressed unless compression=gzip|zstd; written beside dest, fsynced
 * and renamed over it. */
static int
export_tar (build_t *b, stage_state_t *st, const ib_instr_t *in, const char *src,
            const char *dest, const char *shown, ib_error_t *err)
{
  ib_layer_opts_t lo = { .compression = IB_COMPRESSION_NONE, .level = -1, .sde = b->sde };
  const char *c = kv_get (in, "compression");
  if (c && ib_compression_parse (c, &lo.compression) < 0)
    return ib_error_set (err, EINVAL, "compression=%s: expected gzip, zstd or none", c);
  cleanup_free char *from = NULL;
  struct stat sb;
  if (output_src (st, src, &from, &sb, err) < 0)
    return -1;
  if (!S_ISDIR (sb.st_mode))
    return ib_error_set (err, ENOTDIR, "src=%s: not a directory", src);
  bool whole = src == NULL || strcmp (from, st->rootfs) == 0;
  cleanup_free char *dir = xstrdup (dest);
  char *slash = strrchr (dir, '/');
  if (slash)
    slash[slash == dir ? 1 : 0] = '\0';
  if (slash && ib_mkdir_p (dir, 0755, err) < 0)
    return -1;
  cleanup_free char *tmp = xasprintf ("%s/.%s.imgbuild-XXXXXX", slash ? dir : ".",
                                      slash ? strrchr (dest, '/') + 1 : dest);
  int fd = mkstemp (tmp);
  if (fd < 0)
    return ib_error_sys (err, errno, "create a file beside %s", dest);
  close (fd);
  ib_layer_result_t res;
  /* the sandbox's mount points are empty directories in the tarball */
  static char *const mount_points[] = { "proc/*", "sys/*", "dev/*", NULL };
  if (ib_layer_write_diff (from, NULL, whole ? mount_points : NULL, tmp, &lo, &res, err) < 0)
    {
      unlink (tmp);
      return -1;
    }
  int tfd = open (tmp, O_RDONLY | O_CLOEXEC);
  if (tfd < 0 || fsync (tfd) < 0 || chmod (tmp, 0644) < 0 || rename (tmp, dest) < 0)
    {
      int e = errno;
      if (tfd >= 0)
        close (tfd);
      unlink (tmp);
      return ib_error_sys (err, e, "write %s", dest);
    }
  close (tfd);
  if (ib_fsync_dir (slash ? dir : ".", err) < 0)
    return -1;
  ib_info ("  tar %s  %llu entries, %s", res.digest, (unsigned long long) res.entries, shown);
  return 0;
}

/* Append to the stage's emitted record (engine.h) under `key`. */
static void
emit (stage_state_t *st, const char *key, json_t *value)
{
  if (st->emitted == NULL)
    st->emitted = json_pack ("{s:[], s:[]}", "names", "wheels");
  json_array_append_new (json_object_get (st->emitted, key), value);
}

/* Where a wheel copied to `path` is now: there, or, when repair= retagged
 * it, the newest wheel beside it whose name differs only in the platform
 * tag (PEP 427: {dist}-{version}[-{build}]-{python}-{abi}-{platform}.whl).
 * NULL when neither (caller frees). */
static char *
wheel_written (const char *path)
{
  struct stat sb;
  if (stat (path, &sb) == 0)
    return xstrdup (path);
  cleanup_free char *dir = xstrdup (path);
  char *slash = strrchr (dir, '/');
  const char *base = slash ? slash + 1 : path;
  if (slash)
    *slash = '\0';
  const char *last = strrchr (base, '-');
  if (last == NULL)
    return NULL;
  size_t plen = (size_t) (last - base) + 1;
  DIR *d = opendir (slash ? dir : ".");
  if (d == NULL)
    return NULL;
  char *best = NULL;
  struct timespec bt = { 0 };
  struct dirent *de;
  while ((de = readdir (d)))
    {
      if (strncmp (de->d_name, base, plen) != 0 || !ib_str_has_suffix (de->d_name, ".whl")
          || strchr (de->d_name + plen, '-'))
        continue;
      char *p = slash ? ib_path_join (dir, de->d_name) : xstrdup (de->d_name);
      if (stat (p, &sb) == 0 && S_ISREG (sb.st_mode)
          && (best == NULL || sb.st_mtim.tv_sec > bt.tv_sec
              || (sb.st_mtim.tv_sec == bt.tv_sec && sb.st_mtim.tv_nsec > bt.tv_nsec)))
        {
          free (best);
          best = p;
          bt = sb.st_mtim;
        }
      else
        free (p);
    }
  closedir (d);
  return best;
}

/* Record the wheels among `from` (a file or a tree, walked in sorted
 * order), copied to `to`, in st->emitted (path and sha256). */
static int
emit_wheels_at (stage_state_t *st, const char *from, const char *to, ib_error_t *err)
{
  struct stat sb;
  if (lstat (from, &sb) < 0)
    return 0;
  if (S_ISREG (sb.st_mode))
    {
      cleanup_free char *at = ib_str_has_suffix (from, ".whl") ? wheel_written (to) : NULL;
      char d[IB_DIGEST_LEN];
      if (at == NULL)
        return 0;
      if (ib_digest_file (at, d, NULL, err) < 0)
        return -1;
      emit (st, "wheels", json_pack ("{s:s, s:s}", "path", at, "sha256", ib_digest_hex (d)));
      return 0;
    }
  if (!S_ISDIR (sb.st_mode))
    return 0;
  struct dirent **list = NULL;
  int n = scandir (from, &list, NULL, alphasort);
  int ret = 0;
  for (int i = 0; i < n; i++)
    {
      const char *nm = list[i]->d_name;
      if (ret == 0 && strcmp (nm, ".") != 0 && strcmp (nm, "..") != 0)
        {
          cleanup_free char *f = ib_path_join (from, nm), *t = ib_path_join (to, nm);
          ret = emit_wheels_at (st, f, t, err);
        }
      free (list[i]);
    }
  free (list);
  return ret;
}

/* The wheels an OUTPUT type=local copied from `from` into `dest` (a tree's
 * contents go under dest, a file into it), as ib_copy_into copies them. */
static int
emit_wheels (stage_state_t *st, const char *from, const char *dest, ib_error_t *err)
{
  struct stat sb;
  if (stat (from, &sb) == 0 && !S_ISDIR (sb.st_mode))
    {
      const char *b = strrchr (from, '/');
      cleanup_free char *to = ib_path_join (dest, b ? b + 1 : from);
      return emit_wheels_at (st, from, to, err);
    }
  return emit_wheels_at (st, from, dest, err);
}

/* dest=-: the output is written to a temp file in the store (*tmp), then
 * to stdout (to_stdout), which must not be a terminal. */
static int
stdout_begin (ib_store_t *store, const char *type, char **tmp, ib_error_t *err)
{
  if (isatty (STDOUT_FILENO))
    return ib_error_set (err, EINVAL, "type=%s,dest=-: stdout is a terminal; redirect it to a "
                         "file or a pipe", type);
  int fd = ib_store_tmp_file (store, "stdout", tmp, err);
  if (fd < 0)
    return -1;
  close (fd);
  return 0;
}

static int
to_stdout (const char *tmp, ib_error_t *err)
{
  int fd = open (tmp, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return ib_error_sys (err, errno, "read %s", tmp);
  fflush (stdout);
  int r = ib_copy_fd_data_to (fd, STDOUT_FILENO, tmp, "stdout", err);
  close (fd);
  unlink (tmp);
  return r;
}

/* The OUTPUT keys whose values run_output expands (and the plan shows
 * expanded); the others are read as written. */
bool
output_key_expanded (const char *key)
{
  static const char *const keys[] = { "dest", "name", "src", "repair", "repair-exclude",
                                      "require" };
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
    if (strcmp (key, keys[i]) == 0)
      return true;
  return false;
}

static int output_one (build_t *b, stage_state_t *st, const ib_instr_t *in, const char *type,
                       const char *dest, const char *shown, const char *name, const char *src,
                       const char *repair, const char *repair_excl, const char *require,
                       ib_error_t *err);

/* One platform of several: an image output waits for the others' images
 * (index_output makes it).  Whether type=oci writes a directory is
 * decided now, as output_one would. */
static int
defer_output (build_t *b, stage_state_t *st, const ib_instr_t *in, const char *type,
              const char *dest, const char *name, ib_error_t *err)
{
  const char *push = kv_get (in, "push");
  bool dir = strcmp (type, "oci") == 0 && dest && oci_dest_is_dir (in, dest);
  if (dir && strcmp (dest, "-") == 0)
    return ib_error_set (err, EINVAL, "type=oci,dest=-,tar=false: a layout directory cannot "
                         "go to stdout");
  json_t *rec = json_pack ("{s:s, s:o, s:o, s:b, s:b, s:s, s:i, s:s, s:I}", "type", type,
                           "name", name ? json_string (name) : json_null (),
                           "dest", dest ? json_string (dest) : json_null (),
                           "push", push ? strcmp (push, "true") == 0 : strcmp (type, "registry") == 0,
                           "dir", dir, "stage", stage_label (st), "line", in->line,
                           "manifest", st->manifest_digest, "size", (json_int_t) st->manifest_size);
  json_array_append_new (b->deferred, rec);
  ib_info ("[%s %s] OUTPUT %s %s: once every platform is built", b->platform_label,
           stage_label (st), type, name ? name : dest ? dest : "");
  return 0;
}

int
run_output (build_t *b, stage_state_t *st, const ib_instr_t *in, ib_error_t *err)
{
  /* Expand every option value first. */
  const char *type = kv_get (in, "type");
  cleanup_free char *dest = NULL, *name = NULL, *src = NULL, *repair = NULL, *repair_excl = NULL,
                    *require = NULL;
  const char *v;
  if ((v = kv_get (in, "dest")) && expand (b, st, v, &dest, err) < 0)
    return -1;
  if ((v = kv_get (in, "name")) && expand (b, st, v, &name, err) < 0)
    return -1;
  if ((v = kv_get (in, "src")) && expand (b, st, v, &src, err) < 0)
    return -1;
  if ((v = kv_get (in, "repair")) && expand (b, st, v, &repair, err) < 0)
    return -1;
  if ((v = kv_get (in, "repair-exclude")) && expand (b, st, v, &repair_excl, err) < 0)
    return -1;
  if ((v = kv_get (in, "require")) && expand (b, st, v, &require, err) < 0)
    return -1;
  /* local and tar read the tree; the others need the image, whose layers
   * run_stage has finished */
  bool from_tree = strcmp (type, "local") == 0 || strcmp (type, "tar") == 0;
  if (!from_tree && finish_stage (b, st, err) < 0)
    return -1;
  if (from_tree && ensure_rootfs (b, st, err) < 0)
    return -1;
  const char *push = kv_get (in, "push");
  if ((strcmp (type, "registry") == 0 || (push && strcmp (push, "true") == 0))
      && need_userns (b, err) < 0)
    return -1;

  cleanup_free char *tmp = NULL; /* dest=-: the file stdout gets */
  if (dest && strcmp (dest, "-") == 0)
    {
      if (strcmp (type, "local") == 0) /* dest=${VAR}: the parser saw no '-' */
        return ib_error_set (err, EINVAL, "type=local,dest=-: a directory cannot go to stdout "
                             "(type=tar|oci|docker,dest=- write a tarball there)");
      if (b->deferred) /* index_output writes it */
        return defer_output (b, st, in, type, dest, name, err);
      if (stdout_begin (b->store, type, &tmp, err) < 0)
        return -1;
      free (dest);
      dest = xstrdup (tmp);
    }
  int r = output_one (b, st, in, type, dest, tmp ? "-" : dest, name, src, repair, repair_excl,
                      require, err);
  if (tmp && r == 0)
    return to_stdout (tmp, err);
  if (tmp)
    unlink (tmp);
  return r;
}

/* One OUTPUT, its values expanded (run_output); dest is a path. */
static int
output_one (build_t *b, stage_state_t *st, const ib_instr_t *in, const char *type,
            const char *dest, const char *shown, const char *name, const char *src,
            const char *repair, const char *repair_excl, const char *require, ib_error_t *err)
{
  if (strcmp (type, "local") == 0)
    {
      if (dest == NULL)
        return ib_error_set (err, EINVAL, "type=local needs dest=DIR");
      cleanup_free char *from = NULL;
      struct stat sb;
      if (output_src (st, src, &from, &sb, err) < 0)
        return -1;
      const ib_wheel_hooks_t *wh = b->opts->wheels;
      if (wh == NULL && ((require && *require) || (repair && *repair)))
        return ib_error_set (err, ENOTSUP, "require= and repair= need the wheel checks, "
                             "which this build was started without");
      cleanup_strv char **ld_path = wh ? stage_ld_library_path (st) : NULL;
      /* one platform of several: its own subdirectory, as buildx's local exporter */
      cleanup_free char *sub = b->platform_dir ? ib_path_join (dest, b->platform_dir) : NULL;
      if (sub)
        dest = sub;
      if (require && *require
          && wh->check_required (from, st->rootfs, ld_path, require, err) < 0)
        return -1; /* nothing copied: dest holds no wheel that falls short */
      ib_copy_opts_t co = { .chmod = -1, .atomic = true };
      if (ib_copy_into (from, dest, true, &co, err) < 0
          || (wh && wh->check_copied (from, dest, st->rootfs, ld_path, repair, repair_excl,
                                      err) < 0)
          || emit_wheels (st, from, dest, err) < 0)
        return -1;
      ib_info ("[%s] OUTPUT local %s -> %s", stage_label (st),
               src ? src : "/", dest);
      return 0;
    }
  if (b->deferred && (strcmp (type, "image") == 0 || strcmp (type, "registry") == 0
                     || strcmp (type, "oci") == 0))
    {
      if (name == NULL && strcmp (type, "oci") != 0)
        return ib_error_set (err, EINVAL, "type=%s needs name=REF", type);
      if (dest == NULL && strcmp (type, "oci") == 0)
        return ib_error_set (err, EINVAL, "type=oci needs dest=FILE|DIR");
      return defer_output (b, st, in, type, dest, name, err);
    }
  if (strcmp (type, "image") == 0 || strcmp (type, "registry") == 0)
    {
      if (name == NULL)
        return ib_error_set (err, EINVAL, "type=%s needs name=REF", type);
      /* buildx: name=a,b tags (and pushes) both; type=registry is
       * type=image,push=true */
      const char *push = kv_get (in, "push");
      bool pushing = push ? strcmp (push, "true") == 0 : strcmp (type, "registry") == 0;
      cleanup_free char *list = xstrdup (name);
      char *save = NULL;
      for (char *one = strtok_r (list, ",", &save); one; one = strtok_r (NULL, ",", &save))
        {
          cleanup_free char *full = NULL;
          if (tag_image (b->store, one, IB_MT_OCI_MANIFEST, st->manifest_digest,
                         st->manifest_size, &full, err)
              < 0)
            return -1;
          ib_info ("[%s] OUTPUT image %s (%s)", stage_label (st), full, st->manifest_digest);
          emit (st, "names", json_string (full));
          if (pushing)
            {
              prog_pause (b);
              int pr = ib_push (b->store, full, full, err);
              prog_resume (b);
              if (pr < 0)
                return -1;
            }
        }
      return 0;
    }
  if (strcmp (type, "oci") == 0)
    {
      if (dest == NULL)
        return ib_error_set (err, EINVAL, "type=oci needs dest=FILE|DIR");
      bool dir = oci_dest_is_dir (in, dest);
      if (dir && strcmp (shown, "-") == 0)
        return ib_error_set (err, EINVAL, "type=oci,dest=-,tar=false: a layout directory cannot "
                             "go to stdout");
      if (write_oci (b->store, st->manifest_digest, name, dest, dir, err) < 0)
        return -1;
      ib_info ("[%s] OUTPUT oci %s%s", stage_label (st), shown, dir ? " (layout directory)" : "");
      return 0;
    }
  if (strcmp (type, "docker") == 0)
    {
      if (dest == NULL)
        return ib_error_set (err, EINVAL, "type=docker needs dest=FILE");
      if (ib_export_docker (b->store, st->manifest_digest, name, dest, err) < 0)
        return -1;
      ib_info ("[%s] OUTPUT docker %s%s%s", stage_label (st), shown, name ? " as " : "",
               name ? name : "");
      return 0;
    }
  if (strcmp (type, "tar") == 0)
    {
      if (dest == NULL)
        return ib_error_set (err, EINVAL, "type=tar needs dest=FILE");
      if (export_tar (b, st, in, src, dest, shown, err) < 0)
        return ib_error_prefix (err, "type=tar,dest=%s", shown);
      ib_info ("[%s] OUTPUT tar %s -> %s", stage_label (st),
               src ? src : "/", shown);
      return 0;
    }
  return ib_error_set (err, ENOTSUP, "type=%s is not supported yet", type);
}


int
index_output (ib_store_t *store, json_t *rec, const char *index_digest, int64_t index_size,
              char ***names, ib_error_t *err)
{
  const char *type = json_string_value (json_object_get (rec, "type"));
  const char *name = json_string_value (json_object_get (rec, "name"));
  const char *dest = json_string_value (json_object_get (rec, "dest"));
  const char *stage = json_string_value (json_object_get (rec, "stage"));
  if (strcmp (type, "oci") == 0)
    {
      bool dir = json_is_true (json_object_get (rec, "dir"));
      bool to_out = strcmp (dest, "-") == 0;
      cleanup_free char *tmp = NULL;
      if (to_out && stdout_begin (store, type, &tmp, err) < 0)
        return -1;
      int r = write_oci (store, index_digest, name, to_out ? tmp : dest, dir, err);
      if (r == 0 && to_out)
        return to_stdout (tmp, err);
      if (tmp)
        unlink (tmp);
      if (r < 0)
        return -1;
      ib_info ("[%s] OUTPUT oci %s%s: index %s", stage, dest, dir ? " (layout directory)" : "",
               index_digest);
      return 0;
    }
  bool pushing = json_is_true (json_object_get (rec, "push"));
  cleanup_free char *list = xstrdup (name);
  char *save = NULL;
  for (char *one = strtok_r (list, ",", &save); one; one = strtok_r (NULL, ",", &save))
    {
      cleanup_free char *full = NULL;
      if (tag_image (store, one, IB_MT_OCI_INDEX, index_digest, index_size, &full, err) < 0)
        return -1;
      ib_info ("[%s] OUTPUT image %s (index %s)", stage, full, index_digest);
      if (names && !ib_strv_has (*names, full))
        ib_strv_push (names, full);
      if (pushing && ib_push (store, full, full, err) < 0)
        return -1;
    }
  return 0;
}
