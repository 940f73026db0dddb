/* builder/engine/run.c — RUN: its environment, user, mounts (--mount), key,
 * the sandbox it runs in, and the tree kept after a failure. */
#include "builder/engine/engine.h"
#include "builder/engine/fsops.h"
#include "builder/engine/mountspec.h"
#include "rootfs/gpu.h"
#include "rootfs/overlay.h"
#include "rootfs/treecopy.h"

#include <dirent.h>
#include <errno.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* The environment of a RUN: the image's Env plus the stage's ARGs (which
 * are not persisted in the image), plus SOURCE_DATE_EPOCH when the build has
 * one (environment or --reproducible) and neither defines it, so that the
 * tools that honour it (wheel, gzip, dpkg-deb, ...) do.  PATH defaults as
 * Docker's. */
static char **
run_env (build_t *b, stage_state_t *st)
{
  char **env = NULL;
  json_t *jenv = json_object_get (config_section (st->config), "Env");
  size_t i;
  json_t *e;
  bool has_path = false;
  json_array_foreach (jenv, i, e)
  {
    if (json_is_string (e))
      {
        ib_strv_push (&env, json_string_value (e));
        has_path |= ib_str_has_prefix (json_string_value (e), "PATH=");
      }
  }
  for (size_t k = 0; k < st->args.n; k++)
    if (st->args.values[k] && config_env_get (st->config, st->args.names[k]) == NULL)
      {
        cleanup_free char *kv = xasprintf ("%s=%s", st->args.names[k], st->args.values[k]);
        ib_strv_push (&env, kv);
      }
  for (size_t k = 0; k < b->build_args.n; k++)
    if (is_proxy_arg (b->build_args.names[k]) && !vars_declared (&st->args, b->build_args.names[k])
        && config_env_get (st->config, b->build_args.names[k]) == NULL)
      {
        cleanup_free char *kv = xasprintf ("%s=%s", b->build_args.names[k],
                                           b->build_args.values[k] ? b->build_args.values[k] : "");
        ib_strv_push (&env, kv);
      }
  if (!has_path)
    ib_strv_push (&env, DEFAULT_PATH);
  bool has_sde = false;
  for (size_t k = 0; env && env[k]; k++)
    has_sde |= ib_str_has_prefix (env[k], "SOURCE_DATE_EPOCH=");
  if (b->sde >= 0 && !has_sde)
    {
      cleanup_free char *kv = xasprintf ("SOURCE_DATE_EPOCH=%lld", (long long) b->sde);
      ib_strv_push (&env, kv);
    }
  if (env == NULL)
    env = xmalloc (sizeof (char *));
  return env;
}

const char *
config_string (json_t *config, const char *key)
{
  return json_string_value (json_object_get (config_section (config), key));
}

static int
resolve_user (stage_state_t *st, uid_t *uid, gid_t *gid, ib_error_t *err)
{
  const char *user = config_string (st->config, "User");
  *uid = 0;
  *gid = 0;
  if (user == NULL || *user == '\0')
    return 0;
  return ib_lookup_user (st->rootfs, user, uid, gid, err);
}

/* The mounts of one RUN (--mount), resolved to host paths. */
typedef struct run_mounts
{
  ib_mount_t *v;
  size_t n;
  char **strings;   /* owned by this struct */
  char **copies;    /* rw bind copies, removed afterwards */
  int *locks;       /* flock()ed cache lock fds */
  size_t n_locks;
} run_mounts_t;

static const char *
rm_keep (run_mounts_t *r, char *s)
{
  size_t n = ib_strv_len (r->strings);
  r->strings = xrealloc (r->strings, sizeof (char *) * (n + 2));
  r->strings[n] = s;
  r->strings[n + 1] = NULL;
  return s;
}

static void
run_mounts_free (run_mounts_t *r)
{
  for (char **c = r->copies; c && *c; c++)
    {
      ib_error_t e = NULL;
      if (ib_rm_rf (*c, &e) < 0)
        ib_error_report (&e);
    }
  ib_strv_free (r->copies);
  for (size_t i = 0; i < r->n_locks; i++)
    close (r->locks[i]);
  free (r->locks);
  ib_strv_free (r->strings);
  free (r->v);
  memset (r, 0, sizeof *r);
}

/* Does `filter` leave out anything below directory `dir` (`rel`: its path
 * relative to the walked source, "" for the source)?  A walk of names
 * only; unreadable directories count as nothing left out. */
static bool
filter_leaves_out (const char *dir, const char *rel, const ib_path_filter_t *filter)
{
  DIR *d = opendir (dir);
  if (d == NULL)
    return false;
  bool found = false;
  struct dirent *de;
  while (!found && (de = readdir (d)) != NULL)
    {
      if (strcmp (de->d_name, ".") == 0 || strcmp (de->d_name, "..") == 0)
        continue;
      cleanup_free char *r2 = *rel ? xasprintf ("%s/%s", rel, de->d_name) : xstrdup (de->d_name);
      if (ib_path_filter_skip (filter, r2, NULL))
        found = true;
      else if (de->d_type == DT_DIR || de->d_type == DT_UNKNOWN)
        {
          cleanup_free char *sub = ib_path_join (dir, de->d_name);
          struct stat sb;
          if (lstat (sub, &sb) == 0 && S_ISDIR (sb.st_mode))
            found = filter_leaves_out (sub, r2, filter);
        }
    }
  closedir (d);
  return found;
}

static int
run_mount_one (build_t *b, stage_state_t *st, const char *flag, run_mounts_t *r,
               ib_error_t *err)
{
  cleanup_free char *value = NULL;
  if (expand (b, st, flag, &value, err) < 0)
    return -1;
  ib_mount_spec_t ms;
  if (ib_mount_spec_parse (value, &ms, err) < 0)
    return -1;
  /* A relative target is under the working directory, as in BuildKit */
  const char *wd = config_string (st->config, "WorkingDir");
  cleanup_free char *joined = ms.target[0] == '/' ? xstrdup (ms.target)
                                                 : ib_path_join (wd && *wd ? wd : "/", ms.target);
  char *target = ib_path_clean_abs (joined);
  ib_mount_t m = { .target = rm_keep (r, target), .readonly = ms.readonly };
  int ret = -1;
  if (ms.type == IB_MSPEC_TMPFS)
    {
      m.type = IB_MOUNT_TMPFS;
      m.data = rm_keep (r, ms.size ? xasprintf ("size=%s,mode=1777", ms.size)
                                   : xstrdup ("mode=1777"));
    }
  else if (ms.type == IB_MSPEC_BIND)
    {
      const char *root = b->context;
      if (ms.from)
        {
          int idx = stage_index (b, ms.from);
          if (idx < 0 && strspn (ms.from, "0123456789") == strlen (ms.from))
            idx = atoi (ms.from);
          if (idx < 0 || (size_t) idx >= (size_t) (st - b->stages))
            {
              ib_error_set (err, ENOENT,
                            "--mount=%s: from=%s: no earlier stage of that name (images in "
                            "from= are not supported yet)",
                            value, ms.from);
              goto out;
            }
          root = b->stages[idx].rootfs;
        }
      cleanup_free char *src = NULL;
      if (ib_root_resolve (root, ms.source ? ms.source : ".", true, &src, err) < 0)
        {
          ib_error_prefix (err, "--mount=%s", value);
          goto out;
        }
      struct stat sst;
      if (stat (src, &sst) < 0)
        {
          ib_error_sys (err, errno, "--mount=%s: source %s", value, ms.source ? ms.source : ".");
          goto out;
        }
      /* From the context, what .dockerignore leaves out is not there (the
       * context BuildKit receives lacks it): the mount shows a filtered copy
       * when the source holds any such name. */
      const char *crel = ms.from ? NULL : src + strlen (root);
      while (crel && *crel == '/')
        crel++;
      ib_path_filter_t filter = { .ignore = b->ignore, .ignore_base = crel };
      bool filtered = false;
      if (crel && !ib_ignore_empty (b->ignore))
        {
          if (*crel && ib_ignore_excluded (b->ignore, crel))
            {
              ib_error_set (err, ENOENT, "--mount=%s: source %s is excluded by .dockerignore",
                            value, ms.source ? ms.source : ".");
              goto out;
            }
          filtered = S_ISDIR (sst.st_mode) && filter_leaves_out (src, "", &filter);
        }
      if (ms.rw || filtered)
        {
          /* BuildKit: writes to a bind mount are discarded; they go to a
           * copy made for this step. */
          cleanup_free char *tmp = NULL;
          if (ib_store_tmp_dir (b->store, "bind", &tmp, err) < 0)
            goto out;
          ib_strv_push (&r->copies, tmp);
          cleanup_free char *dst = ib_path_join (tmp, "src");
          ib_copy_opts_t co = { .chmod = -1, .filter = &filter };
          if ((filtered ? ib_copy_into (src, dst, true, &co, err) : ib_copy_tree (src, dst, err)) < 0)
            {
              ib_error_prefix (err, "--mount=%s: copy the source", value);
              goto out;
            }
          free (src);
          src = steal_pointer (&dst);
        }
      m.type = IB_MOUNT_BIND;
      m.readonly = !ms.rw;
      m.source = rm_keep (r, steal_pointer (&src));
    }
  else
    {
      const char *id = ms.id ? ms.id : ms.target;
      char *dir = NULL;
      bool created = false;
      if (ib_store_cache_mount_dir (b->store, id, true, &dir, &created, err) < 0)
        goto out;
      rm_keep (r, dir);
      if (created && (chmod (dir, ms.mode) < 0 || chown (dir, ms.uid, ms.gid) < 0))
        {
          ib_error_sys (err, errno, "--mount=%s: cache directory %s", value, dir);
          goto out;
        }
      if (ms.sharing && strcmp (ms.sharing, "shared") != 0)
        {
          /* locked (and private, which imgbuild treats as locked): one step
           * at a time uses the cache; the others wait. */
          cleanup_free char *lp = xasprintf ("%s.lock", dir);
          int fd = open (lp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
          if (fd < 0)
            {
              ib_error_sys (err, errno, "--mount=%s: lock %s", value, lp);
              goto out;
            }
          r->locks = xrealloc (r->locks, sizeof (int) * (r->n_locks + 1));
          r->locks[r->n_locks++] = fd;
          if (flock (fd, LOCK_EX | LOCK_NB) < 0)
            {
              ib_info ("waiting for the cache mount %s (sharing=%s)", id, ms.sharing);
              while (flock (fd, LOCK_EX) < 0)
                if (errno != EINTR)
                  {
                    ib_error_sys (err, errno, "--mount=%s: lock %s", value, lp);
                    goto out;
                  }
            }
        }
      m.type = IB_MOUNT_BIND;
      m.source = dir;
    }
  r->v = xrealloc (r->v, sizeof *r->v * (r->n + 1));
  r->v[r->n++] = m;
  ret = 0;
out:
  ib_mount_spec_clear (&ms);
  return ret;
}

/* Set "K=V" in an environment vector, replacing an earlier K. */
static void
env_set (char ***env, const char *kv)
{
  size_t kl = strcspn (kv, "=");
  for (char **e = *env; e && *e; e++)
    if (strncmp (*e, kv, kl) == 0 && (*e)[kl] == '=')
      {
        free (*e);
        *e = xstrdup (kv);
        return;
      }
  ib_strv_push (env, kv);
}

/* An earlier stage named (or numbered) `name`, or NULL. */
stage_state_t *
earlier_stage (build_t *b, stage_state_t *st, const char *name)
{
  int idx = stage_index (b, name);
  if (idx < 0 && *name && strspn (name, "0123456789") == strlen (name))
    idx = atoi (name);
  if (idx < 0 || (size_t) idx >= (size_t) (st - b->stages))
    return NULL;
  return &b->stages[idx];
}

void
key_str (ib_buf_t *t, const char *what, const char *s)
{
  ib_buf_printf (t, "%s %zu:%s\n", what, strlen (s), s);
}

/* The key text of a RUN (see builder/cache.h): the command, its flags
 * expanded, the content of context bind mounts, the identity of stages it
 * mounts, every ARG in scope (its environment), the build's devices and
 * the layer format.  Malformed --mount values are left for the step to
 * report. */
static int
run_key_text (build_t *b, stage_state_t *st, const ib_instr_t *in, char **argv, char **out,
              ib_error_t *err)
{
  ib_buf_t t = { 0 };
  ib_buf_printf (&t, "RUN %s\n", in->json_form ? "exec" : "shell");
  for (char **a = argv; *a; a++)
    key_str (&t, "argv", *a);
  key_str (&t, "text", in->text ? in->text : "");
  for (char **f = in->flags; f && *f; f++)
    {
      cleanup_free char *x = NULL;
      if (expand (b, st, *f, &x, err) < 0)
        {
          ib_buf_free (&t);
          return -1;
        }
      key_str (&t, "flag", x);
      if (!ib_str_has_prefix (x, "--mount="))
        continue;
      ib_mount_spec_t ms;
      ib_error_t e2 = NULL;
      if (ib_mount_spec_parse (x + 8, &ms, &e2) < 0)
        {
          ib_error_free (&e2);
          continue;
        }
      if (ms.type == IB_MSPEC_BIND && ms.from == NULL)
        key_context_path (b, &t, ms.source ? ms.source : ".", NULL);
      else if (ms.type == IB_MSPEC_BIND)
        {
          stage_state_t *src = earlier_stage (b, st, ms.from);
          ib_buf_printf (&t, "stage %s\n", src ? src->key : "none");
        }
      ib_mount_spec_clear (&ms);
    }
  for (size_t i = 0; i < st->args.n; i++)
    {
      key_str (&t, "arg", st->args.names[i]);
      key_str (&t, "=", st->args.values[i] ? st->args.values[i] : "");
    }
  for (char **d = b->opts->devices; d && *d; d++)
    key_str (&t, "device", *d);
  key_layer_format (b, &t);
  *out = ib_buf_steal (&t);
  return 0;
}

/* RUN --mount=type=bind,from=STAGE reads STAGE's tree: make it. */
static int
ensure_mount_sources (build_t *b, stage_state_t *st, const ib_instr_t *in, ib_error_t *err)
{
  cleanup_strv char **vals = ib_instr_flag_values (in, "mount");
  for (char **v = vals; *v; v++)
    {
      cleanup_free char *x = NULL;
      ib_error_t e2 = NULL;
      ib_mount_spec_t ms;
      if (expand (b, st, *v, &x, &e2) < 0 || ib_mount_spec_parse (x, &ms, &e2) < 0)
        {
          ib_error_free (&e2); /* reported by run_mount_one */
          continue;
        }
      stage_state_t *src = ms.type == IB_MSPEC_BIND && ms.from ? earlier_stage (b, st, ms.from)
                                                                : NULL;
      ib_mount_spec_clear (&ms);
      if (src && ensure_rootfs (b, src, err) < 0)
        return -1;
    }
  return 0;
}

/* --keep-on-failure / --debug-shell: the tree of the failed RUN (with
 * whatever the command changed) is kept under the store's tmp/ as
 * debug-STAGE-XXXXXX, the command that looks around in it is printed, and
 * with --debug-shell a shell is opened there, in the same sandbox (user,
 * working directory, environment; without the step's --mount, --device).
 * Nothing here fails the build further. */
static void
keep_failed_tree (build_t *b, stage_state_t *st, char **env, const char *cwd, uid_t uid, gid_t gid)
{
  cleanup_free char *prefix = xasprintf ("debug-%s", stage_label (st));
  cleanup_free char *dir = NULL;
  ib_error_t e = NULL;
  bool ovl = ib_rootfs_is_overlay (st->rootfs);
  if (ib_store_tmp_dir (b->store, prefix, &dir, &e) < 0 || rmdir (dir) < 0
      || (ovl ? ib_copy_tree (st->rootfs, dir, &e) < 0 || ib_rootfs_remove (st->rootfs, &e) < 0
              : rename (st->rootfs, dir) < 0))
    {
      ib_warn ("--keep-on-failure: %s", e ? e->msg : strerror (errno));
      ib_error_free (&e);
      return;
    }
  /* the stage's rootfs path now names nothing: build_free has nothing to remove */
  ib_buf_t c = { 0 };
  ib_buf_printf (&c, "imgbuild --store '%s' run --rootfs '%s' -w '%s'", b->store->root, dir, cwd);
  if (uid != 0 || gid != 0)
    ib_buf_printf (&c, " -u %u:%u", (unsigned) uid, (unsigned) gid);
  for (char **v = env; v && *v; v++)
    if ((!ib_str_has_prefix (*v, "PATH=") || strcmp (*v, DEFAULT_PATH) != 0)
        && (!ib_str_has_prefix (*v, "HOME=") || config_env_get (st->config, "HOME")))
      ib_buf_printf (&c, " -e '%s'", *v); /* run sets PATH and HOME as the step had them */
  ib_buf_printf (&c, " -- %s", st->shell && st->shell[0] ? st->shell[0] : "/bin/sh");
  cleanup_free char *cmd = ib_buf_steal (&c);
  ib_warn ("the failed step's tree is kept in %s; to look around in it:\n  %s", dir, cmd);
  if (!b->opts->debug_shell)
    return;
  if (!isatty (STDIN_FILENO))
    {
      ib_warn ("--debug-shell: stdin is not a terminal: run the command above instead");
      return;
    }
  if (b->stage_process)
    {
      /* the other stages' processes and the display share the terminal */
      ib_warn ("--debug-shell: with -j the stages share the terminal: run the command above "
               "instead");
      return;
    }
  prog_pause (b);
  char *argv[] = { st->shell && st->shell[0] ? st->shell[0] : (char *) "/bin/sh", NULL };
  ib_sandbox_opts_t so = { .rootfs = dir, .argv = argv, .env = env, .cwd = cwd, .uid = uid,
                           .gid = gid, .keep_stdin = true, .tty = true,
                           .provide_etc_files = true };
  int status = 0;
  ib_info ("--debug-shell: a shell in the failed step's tree (exit to end the build)");
  if (ib_sandbox_run (&so, &status, &e) < 0)
    {
      ib_warn ("--debug-shell: %s", e->msg);
      ib_error_free (&e);
    }
  prog_resume (b);
}

int
do_run (build_t *b, stage_state_t *st, const ib_instr_t *in, ib_error_t *err)
{
  const char *net = ib_instr_flag (in, "network");
  for (char **f = in->flags; f && *f; f++)
    if (ib_str_has_prefix (*f, "--security="))
      {
        if (strcmp (*f, "--security=sandbox") != 0)
          return ib_error_set (err, ENOTSUP,
                               "%s is not supported: imgbuild never gives a step more than its "
                               "sandbox (use --security=sandbox, the default)",
                               *f);
      }
    else if (!ib_str_has_prefix (*f, "--network=") && !ib_str_has_prefix (*f, "--mount=")
             && !ib_str_has_prefix (*f, "--device="))
      return ib_error_set (err, ENOTSUP, "%s is not supported yet", *f);
  if (net && strcmp (net, "host") != 0 && strcmp (net, "none") != 0 && strcmp (net, "default") != 0)
    return ib_error_set (err, EINVAL, "--network=%s: expected host, none or default", net);
  if (st->foreign)
    {
      const char *os, *arch, *variant;
      ib_host_platform (&os, &arch, &variant);
      cleanup_free char *host = ib_platform_string (os, arch, variant);
      return ib_error_set (err, ENOEXEC, "cannot run %s binaries on %s (the stage is FROM "
                           "--platform=%s; only COPY and COPY --from work there)",
                           st->foreign, host, st->foreign);
    }

  cleanup_strv char **argv = NULL;
  cleanup_free char *shown = NULL;
  if (in->json_form)
    {
      argv = ib_strv_dup (in->args);
      ib_buf_t s = { 0 };
      for (char **a = argv; *a; a++)
        ib_buf_printf (&s, "%s%s", a == argv ? "" : " ", *a);
      shown = ib_buf_steal (&s);
    }
  else
    {
      /* Shell form: the shell expands variables itself at run time. */
      argv = ib_strv_dup (st->shell);
      ib_strv_push (&argv, in->text);
      shown = xstrdup (in->text);
    }
  /* RUN <<EOF whose body starts with "#!": BuildKit runs the body as a
   * file (at /dev/pipes/NAME), so its interpreter line counts. */
  const ib_heredoc_t *script = in->heredoc_script && in->n_heredocs
                                       && ib_str_has_prefix (in->heredocs[0].content, "#!")
                                   ? &in->heredocs[0]
                                   : NULL;
  cleanup_free char *script_path = NULL;
  if (script)
    {
      if (strchr (script->name, '/') || !*script->name)
        return ib_error_set (err, EINVAL, "heredoc name '%s' is not a file name", script->name);
      script_path = xasprintf ("/dev/pipes/%s", script->name);
      ib_strv_free (argv);
      argv = NULL;
      ib_strv_push (&argv, script_path);
    }
  char key[IB_DIGEST_LEN];
  {
    cleanup_free char *text = NULL;
    if (run_key_text (b, st, in, argv, &text, err) < 0)
      return -1;
    ib_cache_key (st->key, text, key);
  }
  if (cache_lookup (b, st, key))
    {
      step_line (b, st, "RUN", shown, true, true);
      return 0;
    }
  step_line (b, st, "RUN", shown, false, true);
  if (ensure_rootfs (b, st, err) < 0 || ensure_mount_sources (b, st, in, err) < 0)
    return -1;

  cleanup_strv char **env = run_env (b, st);
  uid_t uid;
  gid_t gid;
  if (resolve_user (st, &uid, &gid, err) < 0)
    return -1;
  run_mounts_t mounts = { 0 };
  cleanup_strv char **mount_flags = ib_instr_flag_values (in, "mount");
  for (char **f = mount_flags; *f; f++)
    if (run_mount_one (b, st, *f, &mounts, err) < 0)
      {
        run_mounts_free (&mounts);
        return -1;
      }
  if (script)
    {
      char *dir = NULL;
      if (ib_store_tmp_dir (b->store, "heredoc", &dir, err) < 0)
        {
          run_mounts_free (&mounts);
          return -1;
        }
      ib_strv_push (&mounts.copies, dir); /* removed with the mounts */
      char *file = ib_path_join (dir, "script");
      free (dir);
      rm_keep (&mounts, file);
      if (ib_write_file_atomic (file, script->content, strlen (script->content), 0755, err) < 0)
        {
          run_mounts_free (&mounts);
          return -1;
        }
      ib_mount_t m = { .type = IB_MOUNT_BIND, .source = file,
                       .target = rm_keep (&mounts, xstrdup (script_path)), .readonly = true };
      mounts.v = xrealloc (mounts.v, sizeof *mounts.v * (mounts.n + 1));
      mounts.v[mounts.n++] = m;
    }
  /* Devices (CDI, NVIDIA discovery): the build's --device, then the
   * step's; their mounts follow the step's own. */
  ib_gpu_edits_t gpu = { 0 };
  cleanup_strv char **dev_flags = ib_instr_flag_values (in, "device");
  cleanup_strv char **devices = ib_strv_dup (b->opts->devices);
  for (char **f = dev_flags; *f; f++)
    {
      cleanup_free char *x = NULL;
      if (expand (b, st, *f, &x, err) < 0)
        {
          run_mounts_free (&mounts);
          return -1;
        }
      ib_strv_push (&devices, x);
    }
  if (devices && *devices)
    {
      cleanup_strv char **step_env = run_env (b, st);
      if (ib_gpu_resolve_all (devices, b->opts->cdi_spec_dirs, step_env, &gpu, err) < 0)
        {
          run_mounts_free (&mounts);
          return -1;
        }
      for (size_t k = 0; k < gpu.n_mounts; k++)
        {
          mounts.v = xrealloc (mounts.v, sizeof *mounts.v * (mounts.n + 1));
          mounts.v[mounts.n++] = gpu.mounts[k];
        }
    }
  for (char **kv = gpu.env; kv && *kv; kv++)
    env_set (&env, *kv);
  ib_env_default_home (&env, st->rootfs, uid); /* as runc, so Docker, BuildKit, buildah */
  step_scan_t before = { 0 };
  if (step_scan_begin (st, &before, err) < 0)
    {
      run_mounts_free (&mounts);
      ib_gpu_edits_free (&gpu);
      return -1;
    }
  const char *wd = config_string (st->config, "WorkingDir");
  cleanup_free char *tail = NULL;
  ib_sandbox_opts_t so = {
    .rootfs = st->rootfs,
    .argv = argv,
    .env = env,
    .cwd = wd && *wd ? wd : "/",
    .uid = uid,
    .gid = gid,
    .network_none = net && strcmp (net, "none") == 0,
    .tail_lines = TAIL_LINES,
    .tail = &tail,
    .provide_etc_files = true, /* DNS in images without /etc/resolv.conf */
    .mounts = mounts.v,
    .n_mounts = mounts.n,
    .symlinks = gpu.symlinks,
    .n_symlinks = gpu.n_symlinks,
    .ldconfig = gpu.ldconfig,
    .ldconfig_dirs = gpu.ldconfig_dirs,
    .output_fn = b->prog ? step_output : NULL,
    .output_ud = b,
  };
  int status = 0;
  int sr = ib_sandbox_run (&so, &status, err);
  run_mounts_free (&mounts);
  ib_gpu_edits_free (&gpu);
  if (sr < 0)
    {
      step_scan_free (&before);
      return -1;
    }
  if (status != 0)
    {
      step_scan_free (&before);
      if (b->opts->keep_on_failure || b->opts->debug_shell)
        keep_failed_tree (b, st, env, so.cwd, uid, gid);
      return ib_error_set (err, ECHILD, "%s: exit status %d%s%s", shown, status,
                           tail && *tail ? "; last output lines:\n" : "", tail ? tail : "");
    }
  /* BuildKit's history text: the stage's ARGs (an ENV of the same name
   * wins) as "|N K=V ..." before the command */
  ib_buf_t hb = { 0 };
  ib_buf_puts (&hb, "RUN ");
  if (st->args.n)
    {
      ib_buf_printf (&hb, "|%zu ", st->args.n);
      for (size_t k = 0; k < st->args.n; k++)
        {
          const char *ev = config_env_get (st->config, st->args.names[k]);
          ib_buf_printf (&hb, "%s=%s ", st->args.names[k],
                         ev ? ev : st->args.values[k] ? st->args.values[k] : "");
        }
    }
  ib_buf_printf (&hb, "%s%s", in->json_form ? "" : "/bin/sh -c ", shown);
  cleanup_free char *created_by = ib_buf_steal (&hb);
  int r = commit_layer (b, st, &before, created_by, err);
  step_scan_free (&before);
  if (r == 0)
    cache_record (b, st, key);
  return r;
}
