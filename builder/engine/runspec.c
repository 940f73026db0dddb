/* builder/engine/runspec.c — a command's sandbox besides its argv: RUN's
 * flags typed once (ib_run_spec_from_instr), and the spec turned into the
 * sandbox's mounts, devices, network and environment (ib_run_spec_sandbox)
 * for RUN and `imgbuild run` alike. */
#include "builder/engine/runspec.h"
#include "builder/engine/fsops.h"
#include "common/util.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void
ib_run_spec_add_mount (ib_run_spec_t *spec, ib_mount_spec_t *ms, const char *shown)
{
  spec->mounts = xrealloc (spec->mounts, sizeof *spec->mounts * (spec->n_mounts + 1));
  spec->shown = xrealloc (spec->shown, sizeof *spec->shown * (spec->n_mounts + 2));
  spec->mounts[spec->n_mounts] = *ms;
  spec->shown[spec->n_mounts] = xstrdup (shown);
  spec->shown[++spec->n_mounts] = NULL;
  memset (ms, 0, sizeof *ms);
}

void
ib_run_spec_clear (ib_run_spec_t *spec)
{
  for (size_t i = 0; i < spec->n_mounts; i++)
    ib_mount_spec_clear (&spec->mounts[i]);
  free (spec->mounts);
  ib_strv_free (spec->shown);
  ib_strv_free (spec->devices);
  ib_strv_free (spec->flags);
  memset (spec, 0, sizeof *spec);
}

/* Step 1 of ib_run_spec_from_instr: the flags as written. */
static int
check_flags (const ib_instr_t *in, ib_run_spec_t *out, ib_error_t *err)
{
  for (char **f = in->flags; f && *f; f++)
    if (ib_str_has_prefix (*f, "--security="))
      {
        if (strcmp (*f, "--security=sandbox") != 0)
          return ib_error_set (err, ENOTSUP,
                               "%s is not supported: imgbuild never gives a step more than its "
                               "sandbox, --allow security.insecure or not (use "
                               "--security=sandbox, the default)",
                               *f);
      }
    else if (!ib_str_has_prefix (*f, "--network=") && !ib_str_has_prefix (*f, "--mount=")
             && !ib_str_has_prefix (*f, "--device="))
      return ib_error_set (err, ENOTSUP, "%s is not supported yet", *f);
  const char *net = ib_instr_flag (in, "network");
  if (net == NULL || strcmp (net, "default") == 0)
    out->network = IB_RUN_NET_DEFAULT;
  else if (strcmp (net, "host") == 0)
    out->network = IB_RUN_NET_HOST;
  else if (strcmp (net, "none") == 0)
    out->network = IB_RUN_NET_NONE;
  else
    return ib_error_set (err, EINVAL, "--network=%s: expected host, none or default", net);
  return 0;
}

int
ib_run_spec_from_instr (const ib_instr_t *in, ib_run_expand_fn expand, void *ctx, bool lenient,
                        ib_run_spec_t *out, ib_error_t *err)
{
  memset (out, 0, sizeof *out);
  if (!lenient && check_flags (in, out, err) < 0)
    return -1;
  for (char **f = in->flags; f && *f; f++)
    {
      bool mount = ib_str_has_prefix (*f, "--mount="), device = ib_str_has_prefix (*f, "--device=");
      if (lenient && !mount && !device)
        continue;
      cleanup_free char *x = NULL;
      if (expand (ctx, *f, &x, lenient ? NULL : err) < 0)
        {
          if (!lenient)
            return -1;
          continue;
        }
      if (!lenient)
        ib_strv_push (&out->flags, x);
      if (device)
        ib_strv_push (&out->devices, x + strlen ("--device="));
      if (!mount)
        continue;
      ib_mount_spec_t ms;
      if (ib_mount_spec_parse (x + strlen ("--mount="), &ms, lenient ? NULL : err) < 0)
        {
          if (!lenient)
            return -1;
          continue;
        }
      ib_run_spec_add_mount (out, &ms, x);
    }
  return 0;
}

void
ib_run_mounts_keep_copy (ib_run_mounts_t *res, char *path)
{
  ib_strv_push (&res->copies, path);
  free (path);
}

/* Keep `s` (taken) for as long as the mounts; returns it. */
static const char *
keep_string (ib_run_mounts_t *r, char *s)
{
  size_t n = ib_strv_len (r->strings);
  r->strings = xrealloc (r->strings, sizeof (char *) * (n + 2));
  r->strings[n] = s;
  r->strings[n + 1] = NULL;
  return s;
}

static void
add_mount (ib_run_mounts_t *r, const ib_mount_t *m)
{
  r->v = xrealloc (r->v, sizeof *r->v * (r->n + 1));
  r->v[r->n++] = *m;
}

/* cleanup: a vector of secrets' variables, wiped before it is freed */
static void
wipe_strvp (char ***v)
{
  for (char **e = *v; e && *e; e++)
    explicit_bzero (*e, strlen (*e));
  ib_strv_free (*v);
}

void
ib_run_mounts_free (ib_run_mounts_t *r)
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
  ib_gpu_edits_free (&r->gpu);
  ib_secret_run_end (&r->secrets);
  wipe_strvp (&r->env);
  memset (r, 0, sizeof *r);
}

/* A type=cache mount: the store's directory for its id, made with the
 * mount's mode and owner when new, locked for sharing=locked/private. */
static int
cache_source (const ib_run_env_t *o, const ib_mount_spec_t *ms, const char *shown,
              ib_run_mounts_t *r, char **dir, ib_error_t *err)
{
  if (ms->from)
    return ib_error_set (err, ENOTSUP, "%s: from= of a cache mount names a build stage: only a "
                         "RUN step of a build can use it", shown);
  const char *id = ms->id ? ms->id : ms->target;
  bool created = false;
  if (ib_store_cache_mount_dir (o->store, id, true, dir, &created, err) < 0)
    return ib_error_prefix (err, "%s", shown);
  if (created && (chmod (*dir, ms->mode) < 0 || chown (*dir, ms->uid, ms->gid) < 0))
    return ib_error_sys (err, errno, "%s: cache directory %s", shown, *dir);
  if (ms->sharing == NULL || strcmp (ms->sharing, "shared") == 0)
    return 0;
  /* locked (and private, which imgbuild treats as locked): one step at a
   * time uses the cache; the others wait. */
  ib_error_t busy = NULL;
  int fd = ib_store_cache_mount_lock (o->store, id, false, &busy);
  if (fd < 0 && busy->status == EWOULDBLOCK)
    {
      ib_error_free (&busy);
      ib_info ("waiting for the cache mount %s (sharing=%s)", id, ms->sharing);
      fd = ib_store_cache_mount_lock (o->store, id, true, err);
    }
  else if (fd < 0)
    *err = steal_pointer (&busy);
  if (fd < 0)
    return ib_error_prefix (err, "%s", shown);
  r->locks = xrealloc (r->locks, sizeof (int) * (r->n_locks + 1));
  r->locks[r->n_locks++] = fd;
  return 0;
}

/* type=secret: the file and/or the variable; *skip when the build lacks
 * the secret and the mount is optional.  Variables go to *vars. */
static int
secret_source (const ib_run_env_t *o, const ib_mount_spec_t *ms, const char *shown,
               ib_run_mounts_t *r, char ***vars, const char **file, bool *skip, ib_error_t *err)
{
  const ib_secret_source_t *src = ib_secrets_find_secret (o->secrets, ms->id);
  *file = NULL;
  *skip = src == NULL;
  if (src == NULL)
    return ms->required ? ib_error_set (err, ENOENT, "%s: secret %s: not given (--secret "
                                        "id=%s,src=FILE or id=%s,env=VAR)",
                                        shown, ms->id, ms->id, ms->id)
                        : 0;
  char *data = NULL;
  size_t len = 0;
  if (ib_secret_read (src, &data, &len, err) < 0)
    return ib_error_prefix (err, "%s", shown);
  int ret = 0;
  if (ms->target)
    ret = ib_secret_run_file (&r->secrets, data, len, ms->mode, ms->uid, ms->gid, file, err);
  if (ret == 0 && ms->env)
    {
      /* a variable cannot hold a NUL: the bytes up to the first, as execve
       * would pass them */
      char *kv = xasprintf ("%s=%s", ms->env, data);
      ib_strv_push (vars, kv);
      explicit_bzero (kv, strlen (kv));
      free (kv);
    }
  ib_secret_free (data, len);
  return ret < 0 ? ib_error_prefix (err, "%s", shown) : 0;
}

static int
add_spec_mount (const ib_run_env_t *o, const ib_mount_spec_t *ms, const char *shown,
                size_t ssh_index, ib_run_mounts_t *r, char ***vars, ib_error_t *err)
{
  cleanup_free char *ssh_target = NULL;
  if (ms->type == IB_MSPEC_SSH && ms->target == NULL)
    ssh_target = xasprintf ("/run/buildkit/ssh_agent.%zu", ssh_index);
  const char *target = ssh_target ? ssh_target : ms->target;
  const char *secret_file = NULL;
  const ib_ssh_source_t *agent = NULL;
  if (ms->type == IB_MSPEC_SECRET)
    {
      bool skip = false;
      if (secret_source (o, ms, shown, r, vars, &secret_file, &skip, err) < 0)
        return -1;
      if (skip || target == NULL) /* missing and optional; env= only */
        return 0;
    }
  if (ms->type == IB_MSPEC_SSH && ssh_index == 0)
    {
      /* BuildKit's llb: the first ssh mount's target, even when its agent
       * is missing and the mount optional */
      cleanup_free char *kv = xasprintf ("SSH_AUTH_SOCK=%s", target);
      ib_strv_push (vars, kv);
    }
  if (ms->type == IB_MSPEC_SSH && (agent = ib_secrets_find_ssh (o->secrets, ms->id)) == NULL)
    return ms->required ? ib_error_set (err, ENOENT, "%s: ssh agent %s: not given (--ssh "
                                        "%s=SOCKET%s)",
                                        shown, ms->id, ms->id,
                                        strcmp (ms->id, "default") ? "" : ", or --ssh default")
                        : 0;
  if (target[0] != '/' && o->cwd == NULL)
    return ib_error_set (err, EINVAL, "mount target %s: must be an absolute path", target);
  cleanup_free char *joined = target[0] == '/' ? xstrdup (target) : ib_path_join (o->cwd, target);
  ib_mount_t m = { .target = keep_string (r, ib_path_clean_abs (joined)),
                   .readonly = ms->readonly };
  if (ms->relabel)
    ib_info ("%s: z/Z ignored: imgbuild applies no SELinux labels", shown);
  char *source = NULL;
  switch (ms->type)
    {
    case IB_MSPEC_TMPFS:
      m.type = IB_MOUNT_TMPFS;
      m.data = keep_string (r, ms->size ? xasprintf ("size=%s,mode=1777", ms->size)
                                        : xstrdup ("mode=1777"));
      break;
    case IB_MSPEC_BIND:
      if (o->bind (o->bind_ctx, ms, shown, r, &source, err) < 0)
        return -1;
      m.type = IB_MOUNT_BIND;
      m.readonly = o->bind_writable ? ms->readonly : !ms->rw;
      m.source = keep_string (r, source);
      break;
    case IB_MSPEC_CACHE:
      if (cache_source (o, ms, shown, r, &source, err) < 0)
        {
          free (source);
          return -1;
        }
      m.type = IB_MOUNT_BIND;
      m.source = keep_string (r, source);
      break;
    case IB_MSPEC_SECRET:
      m.type = IB_MOUNT_BIND;
      m.readonly = true;
      m.source = secret_file; /* the private directory's, kept until the mounts go */
      break;
    case IB_MSPEC_SSH:
      {
        const char *sock = NULL;
        if (ib_secret_run_ssh (&r->secrets, agent->socket, ms->mode, ms->uid, ms->gid, &sock,
                               err)
            < 0)
          return ib_error_prefix (err, "%s", shown);
        m.type = IB_MOUNT_BIND;
        m.readonly = true;
        m.source = sock;
        break;
      }
    }
  add_mount (r, &m);
  return 0;
}

int
ib_run_spec_sandbox (const ib_run_spec_t *spec, const ib_run_env_t *o, char ***env,
                     ib_sandbox_opts_t *so, ib_run_mounts_t *r, ib_error_t *err)
{
  /* secret env=, SSH_AUTH_SOCK */
  __attribute__ ((cleanup (wipe_strvp))) char **vars = NULL;
  size_t n_ssh = 0;
  for (size_t k = 0; k < spec->n_mounts; k++)
    {
      int ret = add_spec_mount (o, &spec->mounts[k], spec->shown[k], n_ssh, r, &vars, err);
      n_ssh += spec->mounts[k].type == IB_MSPEC_SSH;
      if (ret < 0)
        return -1;
    }
  if (ib_secret_run_start (r->secrets, err) < 0)
    return -1;
  for (size_t k = 0; k < o->n_extra; k++)
    add_mount (r, &o->extra[k]);
  /* Devices (CDI, NVIDIA discovery): their mounts follow the others. */
  if (spec->devices && *spec->devices)
    {
      if (ib_gpu_resolve_all (spec->devices, o->cdi_spec_dirs, *env, &r->gpu, err) < 0)
        return -1;
      for (size_t k = 0; k < r->gpu.n_mounts; k++)
        add_mount (r, &r->gpu.mounts[k]);
    }
  for (char **kv = r->gpu.env; kv && *kv; kv++)
    ib_env_set (env, *kv);
  ib_env_default_home (env, so->rootfs, so->uid); /* as runc, so Docker, BuildKit, buildah */
  so->env = *env;
  if (vars)
    {
      /* the secrets' variables: in the command's environment only */
      r->env = ib_strv_dup (*env);
      for (char **v = vars; *v; v++)
        {
          bool is_sock = ib_str_has_prefix (*v, "SSH_AUTH_SOCK=");
          bool have = false;
          for (char **e = *env; is_sock && e && *e; e++)
            have |= ib_str_has_prefix (*e, "SSH_AUTH_SOCK=");
          if (!have)
            ib_env_set (&r->env, *v);
        }
      so->env = r->env;
    }
  so->mounts = r->v;
  so->n_mounts = r->n;
  so->symlinks = r->gpu.symlinks;
  so->n_symlinks = r->gpu.n_symlinks;
  so->ldconfig = r->gpu.ldconfig;
  so->ldconfig_dirs = r->gpu.ldconfig_dirs;
  so->network_none = spec->network == IB_RUN_NET_NONE;
  return 0;
}
