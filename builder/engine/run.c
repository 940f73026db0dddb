/* builder/engine/run.c — RUN: its environment, user, mounts (--mount), key,
 * the sandbox it runs in, and the tree kept after a failure. */
#include "builder/engine/engine.h"
#include "rootfs/binfmt.h"
#include "builder/engine/fsops.h"
#include "builder/engine/runspec.h"
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

/* The host source of a RUN --mount=type=bind (ib_run_bind_fn): in the
 * build context, or in the earlier stage from= names; a copy when the
 * mount is rw (its writes are discarded) or when .dockerignore leaves out
 * some of it. */
typedef struct bind_ctx
{
  build_t *b;
  stage_state_t *st;
} bind_ctx_t;

static int
run_bind_source (void *ctx, const ib_mount_spec_t *ms, const char *shown, ib_run_mounts_t *r,
                 char **out, ib_error_t *err)
{
  build_t *b = ((bind_ctx_t *) ctx)->b;
  stage_state_t *st = ((bind_ctx_t *) ctx)->st;
  const char *root = b->context;
  if (ms->from)
    {
      stage_state_t *from = earlier_stage (b, st, ms->from);
      if (from == NULL)
        return ib_error_set (err, ENOENT,
                             "%s: from=%s: no earlier stage of that name (images in from= are "
                             "not supported yet)",
                             shown, ms->from);
      root = from->rootfs;
    }
  cleanup_free char *src = NULL;
  if (ib_root_resolve (root, ms->source ? ms->source : ".", true, &src, err) < 0)
    return ib_error_prefix (err, "%s", shown);
  struct stat sst;
  if (stat (src, &sst) < 0)
    return ib_error_sys (err, errno, "%s: source %s", shown, ms->source ? ms->source : ".");
  /* From the context, what .dockerignore leaves out is not there (the
   * context BuildKit receives lacks it): the mount shows a filtered copy
   * when the source holds any such name. */
  const char *crel = ms->from ? NULL : src + strlen (root);
  while (crel && *crel == '/')
    crel++;
  ib_path_filter_t filter = { .ignore = b->ignore, .ignore_base = crel };
  bool filtered = false;
  if (crel && !ib_ignore_empty (b->ignore))
    {
      if (*crel && ib_ignore_excluded (b->ignore, crel))
        return ib_error_set (err, ENOENT, "%s: source %s is excluded by .dockerignore", shown,
                             ms->source ? ms->source : ".");
      filtered = S_ISDIR (sst.st_mode) && filter_leaves_out (src, "", &filter);
    }
  if (ms->rw || filtered)
    {
      /* BuildKit: writes to a bind mount are discarded; they go to a copy
       * made for this step. */
      char *tmp = NULL;
      if (ib_store_tmp_dir (b->store, "bind", &tmp, err) < 0)
        return -1;
      cleanup_free char *dst = ib_path_join (tmp, "src");
      ib_run_mounts_keep_copy (r, tmp);
      ib_copy_opts_t co = { .chmod = -1, .filter = &filter };
      if ((filtered ? ib_copy_into (src, dst, true, &co, err) : ib_copy_tree (src, dst, err)) < 0)
        return ib_error_prefix (err, "%s: copy the source", shown);
      free (src);
      src = steal_pointer (&dst);
    }
  *out = steal_pointer (&src);
  return 0;
}

/* The key text of a RUN (see builder/cache.h): the command, its flags
 * expanded, the content of context bind mounts, the identity of stages it
 * mounts, every ARG in scope (its environment), the build's devices and
 * the layer format.  A type=secret or type=ssh mount counts by its flag
 * text (id, target, options) alone: never the secret's bytes nor the
 * agent's socket, as in BuildKit. */
static char *
run_key_text (build_t *b, stage_state_t *st, const ib_instr_t *in, char **argv,
              const ib_run_spec_t *spec)
{
  ib_buf_t t = { 0 };
  ib_buf_printf (&t, "RUN %s\n", in->json_form ? "exec" : "shell");
  for (char **a = argv; *a; a++)
    key_str (&t, "argv", *a);
  key_str (&t, "text", in->text ? in->text : "");
  size_t k = 0; /* spec->mounts[k]: the next --mount among the flags */
  for (char **f = spec->flags; f && *f; f++)
    {
      key_str (&t, "flag", *f);
      if (!ib_str_has_prefix (*f, "--mount="))
        continue;
      const ib_mount_spec_t *ms = &spec->mounts[k++];
      if (ms->type == IB_MSPEC_BIND && ms->from == NULL)
        key_context_path (b, &t, ms->source ? ms->source : ".", NULL);
      else if (ms->from && ms->type != IB_MSPEC_TMPFS)
        {
          /* bind from=, and cache from= (the base of a new cache: an
           * input of the step, as in BuildKit's LLB) */
          stage_state_t *src = earlier_stage (b, st, ms->from);
          ib_buf_printf (&t, "stage %s\n", src ? src->key : "none");
        }
    }
  for (size_t i = 0; i < st->args.n; i++)
    {
      key_str (&t, "arg", st->args.names[i]);
      key_str (&t, "=", st->args.values[i] ? st->args.values[i] : "");
    }
  for (char **d = b->opts->devices; d && *d; d++)
    key_str (&t, "device", *d);
  if (b->opts->network_none && spec->network == IB_RUN_NET_DEFAULT)
    key_str (&t, "network", "none"); /* absent otherwise: earlier keys stay */
  for (char *const *h = b->opts->add_hosts; h && *h; h++) /* the same: only when given */
    key_str (&t, "add-host", *h);
  if (b->opts->shm_size)
    ib_buf_printf (&t, "shm-size %llu\n", (unsigned long long) b->opts->shm_size);
  for (size_t i = 0; i < b->opts->n_rlimits; i++)
    ib_buf_printf (&t, "ulimit %s %llu %llu\n", b->opts->rlimits[i].name,
                   (unsigned long long) b->opts->rlimits[i].soft,
                   (unsigned long long) b->opts->rlimits[i].hard);
  key_layer_format (b, &t);
  return ib_buf_steal (&t);
}

/* RUN --mount=type=bind|cache,from=STAGE reads STAGE's tree: make it. */
static int
ensure_mount_sources (build_t *b, stage_state_t *st, const ib_run_spec_t *spec, ib_error_t *err)
{
  for (size_t k = 0; k < spec->n_mounts; k++)
    {
      const ib_mount_spec_t *ms = &spec->mounts[k];
      stage_state_t *src = ms->type != IB_MSPEC_TMPFS && ms->from ? earlier_stage (b, st, ms->from)
                                                                   : NULL;
      if (src && ensure_rootfs (b, src, err) < 0)
        return -1;
    }
  return 0;
}

/* RUN --mount=type=cache,from=STAGE[,source=P]: BuildKit's "base of the
 * cache mount".  A cache of its own for the id and that base (BuildKit
 * keys a based cache by id and base), made as a copy of STAGE's P when
 * new.  Sets ids[k] (ids: n_mounts entries, each "" on entry) to that
 * cache's id for each such mount of `spec`. */
static int
cache_bases (build_t *b, stage_state_t *st, const ib_run_spec_t *spec, char **ids,
             ib_error_t *err)
{
  for (size_t k = 0; k < spec->n_mounts; k++)
    {
      const ib_mount_spec_t *ms = &spec->mounts[k];
      if (ms->type != IB_MSPEC_CACHE || ms->from == NULL)
        continue;
      stage_state_t *src = earlier_stage (b, st, ms->from);
      if (src == NULL)
        return ib_error_set (err, ENOENT, "--mount=type=cache,from=%s: no earlier stage of that "
                             "name", ms->from);
      const char *source = ms->source ? ms->source : "/";
      free (ids[k]);
      ids[k] = xasprintf ("%s from %s:%s", ms->id ? ms->id : ms->target, src->key, source);
      cleanup_free char *dir = NULL, *base = NULL;
      bool created = false;
      if (ib_store_cache_mount_dir (b->store, ids[k], true, &dir, &created, err) < 0)
        return -1;
      if (!created)
        continue;
      struct stat sb;
      ib_copy_opts_t co = { .chmod = -1 };
      if (ib_root_resolve (src->rootfs, source, true, &base, err) < 0
          || (stat (base, &sb) < 0 && ib_error_sys (err, errno, "%s", source) < 0)
          || (!S_ISDIR (sb.st_mode)
              && ib_error_set (err, ENOTDIR, "%s is not a directory", source) < 0)
          || ib_copy_into (base, dir, true, &co, err) < 0)
        {
          ib_error_t e2 = NULL;
          ib_rm_rf (dir, &e2); /* made again next time */
          ib_error_free (&e2);
          return ib_error_prefix (err, "--mount=type=cache,from=%s,source=%s", ms->from, source);
        }
    }
  return 0;
}

/* ib_run_expand_fn over the stage's scope (the global ARGs when st is NULL) */
typedef struct expand_ctx
{
  build_t *b;
  stage_state_t *st;
} expand_ctx_t;

static int
expand_in (void *ctx, const char *word, char **out, ib_error_t *err)
{
  expand_ctx_t *c = ctx;
  return expand (c->b, c->st, word, out, err);
}

int
run_spec (build_t *b, stage_state_t *st, const ib_instr_t *in, bool lenient, ib_run_spec_t *spec,
          ib_error_t *err)
{
  expand_ctx_t c = { b, st };
  return ib_run_spec_from_instr (in, expand_in, &c, lenient, spec, err);
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

static int run_step (build_t *b, stage_state_t *st, const ib_instr_t *in,
                     const ib_run_spec_t *spec, ib_error_t *err);

/* A stage of another platform (st->foreign): can the kernel run its
 * binaries (rootfs/binfmt.h)?  The error names what is missing. */
static int
check_emulation (stage_state_t *st, ib_error_t *err)
{
  if (st->foreign == NULL)
    return 0;
  cleanup_free char *os = NULL, *arch = NULL, *variant = NULL, *handler = NULL;
  if (ib_platform_parse (st->foreign, &os, &arch, &variant, err) < 0)
    return -1;
  if (ib_binfmt_check (IB_BINFMT_DIR, os, arch, variant, st->rootfs, &handler, err) < 0)
    return -1;
  if (handler)
    ib_debug ("RUN for %s through binfmt_misc %s", st->foreign, handler);
  return 0;
}

int
do_run (build_t *b, stage_state_t *st, const ib_instr_t *in, ib_error_t *err)
{
  ib_run_spec_t spec;
  int ret = run_spec (b, st, in, false, &spec, err);
  /* BuildKit's entitlement (solver/llbsolver/vertex.go, ValidateEntitlements:
   * "network.host is not allowed"): the
   * recipe cannot give itself the host's network, even where the build's
   * default is the host's network, and above all not past the user's
   * --network none */
  if (ret == 0 && spec.network == IB_RUN_NET_HOST && !b->opts->allow_network_host)
    ret = ib_error_set (err, EPERM,
                        "RUN --network=host needs the network.host entitlement: build with "
                        "--allow network.host to grant it");
  if (ret == 0)
    ret = run_step (b, st, in, &spec, err);
  ib_run_spec_clear (&spec);
  return ret;
}

static int
run_step (build_t *b, stage_state_t *st, const ib_instr_t *in, const ib_run_spec_t *spec,
          ib_error_t *err)
{
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
    cleanup_free char *text = run_key_text (b, st, in, argv, spec);
    ib_cache_key (st->key, text, key);
  }
  if (cache_lookup (b, st, key))
    {
      step_line (b, st, "RUN", shown, true, true);
      return 0;
    }
  step_line (b, st, "RUN", shown, false, true);
  if (ensure_rootfs (b, st, err) < 0 || ensure_mount_sources (b, st, spec, err) < 0
      || check_emulation (st, err) < 0)
    return -1;

  cleanup_strv char **env = run_env (b, st);
  uid_t uid;
  gid_t gid;
  if (resolve_user (st, &uid, &gid, err) < 0)
    return -1;
  /* USER's supplementary groups from the image's /etc/group, as runc's
   * additionalGids in BuildKit */
  cleanup_free gid_t *groups = NULL;
  size_t n_groups = ib_lookup_groups (st->rootfs, config_string (st->config, "User"), &groups);
  /* the heredoc script (RUN <<EOF with "#!"): a file of its own */
  ib_run_mounts_t mounts = { 0 };
  ib_mount_t script_mount = { 0 };
  cleanup_free char *script_file = NULL;
  if (script)
    {
      char *dir = NULL;
      if (ib_store_tmp_dir (b->store, "heredoc", &dir, err) < 0)
        return -1;
      script_file = ib_path_join (dir, "script");
      ib_run_mounts_keep_copy (&mounts, dir); /* removed with the mounts */
      if (ib_write_file_atomic (script_file, script->content, strlen (script->content), 0755,
                                err)
          < 0)
        {
          ib_run_mounts_free (&mounts);
          return -1;
        }
      script_mount = (ib_mount_t){ .type = IB_MOUNT_BIND, .source = script_file,
                                   .target = script_path, .readonly = true };
    }
  /* The build's --device, then the step's */
  ib_run_spec_t all = *spec;
  /* cache mounts with from=: their own caches, made from the stage */
  cleanup_free ib_mount_spec_t *mspecs = NULL;
  cleanup_strv char **cache_ids = NULL;
  if (spec->n_mounts)
    {
      for (size_t k = 0; k < spec->n_mounts; k++)
        ib_strv_push (&cache_ids, "");
      if (cache_bases (b, st, spec, cache_ids, err) < 0)
        {
          ib_run_mounts_free (&mounts);
          return -1;
        }
      mspecs = xmalloc (spec->n_mounts * sizeof (ib_mount_spec_t));
      memcpy (mspecs, spec->mounts, spec->n_mounts * sizeof (ib_mount_spec_t));
      for (size_t k = 0; k < spec->n_mounts; k++)
        if (*cache_ids[k])
          {
            mspecs[k].id = cache_ids[k];
            mspecs[k].from = mspecs[k].source = NULL;
          }
      all.mounts = mspecs;
    }
  cleanup_strv char **devices = ib_strv_dup (b->opts->devices);
  for (char **d = spec->devices; d && *d; d++)
    ib_strv_push (&devices, *d);
  all.devices = devices;
  const char *wd = config_string (st->config, "WorkingDir");
  cleanup_free char *tail = NULL;
  bind_ctx_t bc = { b, st };
  ib_run_env_t ro = { .store = b->store, .cwd = wd && *wd ? wd : "/", .bind = run_bind_source,
                      .bind_ctx = &bc, .extra = script ? &script_mount : NULL,
                      .n_extra = script ? 1 : 0, .cdi_spec_dirs = b->opts->cdi_spec_dirs,
                      .secrets = b->opts->secrets };
  ib_sandbox_opts_t so = {
    .rootfs = st->rootfs,
    .argv = argv,
    .cwd = ro.cwd,
    .uid = uid,
    .gid = gid,
    .groups = groups,
    .n_groups = n_groups,
    .tail_lines = TAIL_LINES,
    .tail = &tail,
    .provide_etc_files = true, /* DNS in images without /etc/resolv.conf */
    .output_fn = b->prog ? step_output : NULL,
    .output_ud = b,
  };
  if (ib_run_spec_sandbox (&all, &ro, &env, &so, &mounts, err) < 0)
    {
      ib_run_mounts_free (&mounts);
      return -1;
    }
  if (b->opts->network_none && spec->network == IB_RUN_NET_DEFAULT)
    so.network_none = true; /* build --network none */
  so.add_hosts = b->opts->add_hosts;
  so.shm_size = b->opts->shm_size;
  so.rlimits = b->opts->rlimits;
  so.n_rlimits = b->opts->n_rlimits;
  step_scan_t before = { 0 };
  if (step_scan_begin (st, &before, ib_layer_exclude, err) < 0)
    {
      ib_run_mounts_free (&mounts);
      return -1;
    }
  int status = 0;
  int sr = ib_sandbox_run (&so, &status, err);
  ib_run_mounts_free (&mounts);
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
