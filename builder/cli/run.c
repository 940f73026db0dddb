/* imgbuild run: a command in the sandbox, on an image's rootfs or a
 * directory, with docker run's options. */
#include "builder/cli/cli.h"
#include "oci/regconf.h"
#include <arpa/inet.h>
#include "builder/engine/fsops.h"
#include "builder/engine/runspec.h"
#include "common/util.h"
#include "rootfs/overlay.h"

#include <errno.h>
#include <getopt.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* --env-file FILE: Docker's format: one K=V per line, '#' comments and
 * blank lines skipped, a bare K takes the caller's value; no quotes are
 * removed. */
static int
read_env_file (const char *path, char ***env, ib_error_t *err)
{
  cleanup_free char *data = NULL;
  if (ib_read_file (path, &data, NULL, err) < 0)
    return ib_error_prefix (err, "--env-file");
  int lineno = 0;
  for (char *save = NULL, *line = strtok_r (data, "\n", &save); line;
       line = strtok_r (NULL, "\n", &save))
    {
      lineno++;
      size_t n = strlen (line);
      if (n && line[n - 1] == '\r')
        line[--n] = '\0';
      while (*line == ' ' || *line == '\t')
        line++;
      if (*line == '\0' || *line == '#')
        continue;
      if (*line == '=')
        return ib_error_set (err, EINVAL, "--env-file %s: a line with no variable name: '%s'",
                             path, line);
      ib_strv_push (env, line);
    }
  return 0;
}

/* A bind mount's source for `imgbuild run` (ib_run_bind_fn): the host path. */
static int
host_bind_source (void *ctx, const ib_mount_spec_t *ms, const char *shown, ib_run_mounts_t *res,
                  char **source, ib_error_t *err)
{
  (void) ctx, (void) shown, (void) res;
  *source = realpath (ms->source, NULL);
  if (*source == NULL)
    return ib_error_sys (err, errno, "mount source %s", ms->source);
  return 0;
}

/* -u USER[:GROUP]: a numeric uid or gid is checked before anything is
 * pulled: 0 to 4294967294, never wrapped into another id (a usage error). */
static void
check_user_ids (const char *user)
{
  cleanup_free char *u = xstrdup (user);
  char *g = strchr (u, ':');
  if (g)
    *g++ = '\0';
  uint32_t id;
  if (*u && strspn (u, "0123456789") == strlen (u) && ib_parse_id (u, &id) < 0)
    usage_error ("run: -u %s: a uid is 0 to 4294967294", user);
  if (g && *g && strspn (g, "0123456789") == strlen (g) && ib_parse_id (g, &id) < 0)
    usage_error ("run: -u %s: a gid is 0 to 4294967294", user);
}

/* The command's environment: the image's Env (PATH added when it has
 * none), then -e/--env-file's, which replace the image's as docker run's
 * do (a bare NAME takes imgbuild's own value).  Caller frees. */
static char **
command_env (json_t *cc, char *const *extra_env)
{
  char **env = NULL;
  size_t i;
  json_t *e;
  bool has_path = false;
  json_array_foreach (json_object_get (cc, "Env"), i, e)
  {
    ib_strv_push (&env, json_string_value (e));
    has_path |= ib_str_has_prefix (json_string_value (e), "PATH=");
  }
  if (!has_path)
    ib_strv_push (&env, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
  for (char *const *x = extra_env; x && *x; x++)
    {
      if (strchr (*x, '=') == NULL)
        {
          const char *v = getenv (*x);
          cleanup_free char *kv = xasprintf ("%s=%s", *x, v ? v : "");
          ib_env_set (&env, kv);
        }
      else
        ib_env_set (&env, *x);
    }
  return env;
}

/* The command: ENTRYPOINT + (the `n` arguments given, or CMD), as docker
 * run's; --entrypoint CMD replaces the image's, and its Cmd.  Caller
 * frees; NULL when there is none. */
static char **
command_line (json_t *cc, const char *entrypoint, char **args, int n)
{
  char **cmd = NULL;
  size_t i;
  json_t *e;
  json_array_foreach (json_object_get (cc, "Entrypoint"), i, e)
    if (entrypoint == NULL)
      ib_strv_push (&cmd, json_string_value (e));
  if (entrypoint && *entrypoint)
    ib_strv_push (&cmd, entrypoint);
  if (n > 0)
    for (int k = 0; k < n; k++)
      ib_strv_push (&cmd, args[k]);
  else if (entrypoint == NULL)
    json_array_foreach (json_object_get (cc, "Cmd"), i, e)
      ib_strv_push (&cmd, json_string_value (e));
  return cmd;
}

int
cmd_run (int argc, char **argv, int *exit_status, ib_error_t *err)
{
  static const struct option opts[] = {
    { "env", required_argument, NULL, 'e' },      { "workdir", required_argument, NULL, 'w' },
    { "rootfs", required_argument, NULL, 'r' },   { "network", required_argument, NULL, 'n' },
    { "user", required_argument, NULL, 'u' },     { "volume", required_argument, NULL, 'v' },
    { "mount", required_argument, NULL, 'M' },    { "tmpfs", required_argument, NULL, 'T' },
    { "env-file", required_argument, NULL, 'E' }, { "device", required_argument, NULL, 'D' },
    { "cdi-spec-dir", required_argument, NULL, 'S' }, { "entrypoint", required_argument, NULL, 'P' },
    { "tty", no_argument, NULL, 't' },            { "interactive", no_argument, NULL, 'i' },
    { "rm", no_argument, NULL, 'R' },             { "secret", required_argument, NULL, 0x3a0 },
    { "ssh", required_argument, NULL, 0x3a1 },    SANDBOX_EXTRA_OPTIONS, GLOBAL_OPTIONS,
    { NULL, 0, NULL, 0 },
  };
  bool want_tty = false;
  cleanup_strv char **extra_env = NULL, **cdi_dirs = NULL;
  const char *workdir = NULL, *rootfs = NULL, *network = NULL, *user = NULL, *entrypoint = NULL;
  ib_run_spec_t spec = { 0 };
  /* --secret, --ssh: as build's, for --mount=type=secret|ssh */
  __attribute__ ((cleanup (ib_secrets_clear))) ib_secrets_t secrets = { 0 };
  __attribute__ ((cleanup (sandbox_extras_clear))) sandbox_extras_t extras = { 0 };
  int c;
  optind = 0; /* 0: GNU getopt re-reads the optstring's ordering flag */
  while ((c = getopt_long (argc, argv, "+e:w:u:v:tiq", opts, NULL)) != -1)
    {
      ib_mount_spec_t ms;
      ib_error_t perr = NULL;
      int pr = 0;
      switch (c)
        {
        case 'e': ib_strv_push (&extra_env, optarg); continue;
        case 'w': workdir = optarg; continue;
        case 'r': rootfs = optarg; continue;
        case 'n': network = optarg; continue;
        case 'u': user = optarg; continue;
        case 'D': ib_strv_push (&spec.devices, optarg); continue;
        case 'S': ib_strv_push (&cdi_dirs, optarg); continue;
        case 'P': entrypoint = optarg; continue;
        case 't': want_tty = true; continue;
        case 'i': continue; /* stdin is always the command's (docker's -i) */
        case 'E':
          if (read_env_file (optarg, &extra_env, &perr) < 0)
            usage_error ("run: %s", perr->msg);
          continue;
        case 'v': pr = ib_mount_spec_parse_volume (optarg, &ms, &perr); break;
        case 'M': pr = ib_mount_spec_parse (optarg, &ms, &perr); break;
        case 'T': pr = ib_mount_spec_parse_tmpfs (optarg, &ms, &perr); break;
        case 'R': continue; /* docker's --rm: a run leaves nothing behind anyway */
        case 0x3a0:
        case 0x3a1:
          if ((c == 0x3a0 ? ib_secrets_add_secret (&secrets, optarg, &perr)
                          : ib_secrets_add_ssh (&secrets, optarg, &perr))
              < 0)
            usage_error ("run: %s", perr->msg);
          continue;
        default:
          if (sandbox_extra_option (c, optarg, &extras, "run") || global_option (c, optarg, "run"))
            continue;
          exit (2);
        }
      if (pr < 0)
        usage_error ("run: %s", perr->msg);
      if (ms.type == IB_MSPEC_BIND && ms.from)
        usage_error ("run: --mount=%s: from= is for recipes; give a host path as source=", optarg);
      if (ms.type == IB_MSPEC_BIND && ms.source == NULL)
        usage_error ("run: --mount=%s: source= is missing", optarg);
      cleanup_free char *shown = xasprintf ("%s%s", c == 'v' ? "-v " : c == 'T' ? "--tmpfs " : "--mount=", optarg);
      ib_run_spec_add_mount (&spec, &ms, shown);
    }
  const char *image = NULL;
  if (rootfs == NULL)
    {
      if (optind >= argc || strcmp (argv[optind], "--") == 0)
        usage_error ("%s", "run: expected an image reference or --rootfs DIR");
      image = argv[optind++];
    }
  if (optind < argc && strcmp (argv[optind], "--") == 0)
    optind++;
  if (network && strcmp (network, "host") && strcmp (network, "none"))
    usage_error ("run: --network takes host or none, got '%s'", network);
  spec.network = network && strcmp (network, "none") == 0 ? IB_RUN_NET_NONE : IB_RUN_NET_DEFAULT;
  if (want_tty && !isatty (STDIN_FILENO))
    usage_error ("%s", "run: -t: stdin is not a terminal");
  /* on a terminal the command gets a pty of its own, relayed: the
   * caller's terminal never reaches the sandbox */
  bool tty = want_tty || (isatty (STDIN_FILENO) && isatty (STDOUT_FILENO));
  if (user)
    check_user_ids (user);
  /* as build's: the files opened and the sockets found before the user
   * namespace is entered */
  if (ib_secrets_check (&secrets, err) < 0)
    {
      ib_run_spec_clear (&spec);
      return ib_error_prefix (err, "run");
    }

  ib_store_t *store = NULL;
  if (enter_userns (err) < 0 || open_store (&store, err) < 0)
    return -1;
  ib_rootfs_allow_overlay (true); /* the image's tree: an overlay on its snapshot */
  int ret = -1;
  json_t *config = NULL;
  cleanup_free char *tmp_rootfs = NULL;
  cleanup_strv char **cmd = NULL, **env = NULL;
  ib_run_mounts_t mounts = { 0 };
  if (image)
    {
      if (ib_store_tmp_dir (store, "run", &tmp_rootfs, err) < 0)
        goto out;
      rmdir (tmp_rootfs);
      if (image_rootfs (store, image, tmp_rootfs, true, &config, err) < 0)
        goto out;
      rootfs = tmp_rootfs;
    }
  json_t *cc = json_object_get (config, "config");
  env = command_env (cc, extra_env);
  cmd = command_line (cc, entrypoint, argv + optind, argc - optind);
  if (ib_strv_len (cmd) == 0)
    {
      ib_error_set (err, EINVAL, "run: no command given and the image has no Entrypoint or Cmd");
      goto out;
    }
  uid_t uid = 0;
  gid_t gid = 0;
  const char *u = user ? user : json_string_value (json_object_get (cc, "User"));
  if (u && *u && ib_lookup_user (rootfs, u, &uid, &gid, err) < 0)
    goto out;
  /* Mounts (docker run's: binds are host paths, writable unless ro; the
   * store's cache directories; tmpfs) and devices, as RUN's */
  const char *wd = workdir ? workdir : json_string_value (json_object_get (cc, "WorkingDir"));
  ib_run_env_t ro = { .store = store, .bind_writable = true, .bind = host_bind_source,
                      .cdi_spec_dirs = cdi_dirs, .secrets = &secrets };
  ib_sandbox_opts_t so = { .rootfs = rootfs, .argv = cmd, .cwd = wd && *wd ? wd : "/",
                           .uid = uid, .gid = gid, .keep_stdin = true, .tty = tty,
                           .provide_etc_files = true, .add_hosts = extras.add_hosts,
                           .shm_size = extras.shm_size, .rlimits = extras.rlimits,
                           .n_rlimits = extras.n_rlimits };
  if (ib_run_spec_sandbox (&spec, &ro, &env, &so, &mounts, err) < 0)
    {
      ib_error_prefix (err, "run");
      goto out;
    }
  if (ib_sandbox_run (&so, exit_status, err) < 0)
    goto out;
  ret = 0;
out:
  ib_run_mounts_free (&mounts);
  ib_run_spec_clear (&spec);
  if (tmp_rootfs)
    {
      ib_error_t e2 = NULL;
      if (ib_rootfs_remove (tmp_rootfs, &e2) < 0)
        ib_error_report (&e2);
    }
  json_decref (config);
  ib_store_close (store);
  return ret;
}

bool
sandbox_extra_option (int c, const char *arg, sandbox_extras_t *x, const char *cmd)
{
  ib_error_t e = NULL;
  switch (c)
    {
    case OPT_ADD_HOST:
      {
        /* NAME:IP (docker's; split at the first ':', so IPv6 works) or NAME=IP */
        const char *sep = strpbrk (arg, ":=");
        unsigned char buf[sizeof (struct in6_addr)];
        cleanup_free char *ip = sep ? xstrdup (sep + 1) : NULL;
        if (ip && *ip == '[' && ip[strlen (ip) - 1] == ']')
          {
            memmove (ip, ip + 1, strlen (ip));
            ip[strlen (ip) - 1] = '\0';
          }
        if (sep == NULL || sep == arg
            || (inet_pton (AF_INET, ip, buf) != 1 && inet_pton (AF_INET6, ip, buf) != 1))
          {
            cleanup_free char *m = xasprintf ("%s: --add-host %s: expected NAME:IP (an IPv4 or "
                                              "IPv6 address)",
                                              cmd, arg);
            usage_error ("%s", m);
          }
        cleanup_free char *line = xasprintf ("%s\t%.*s", ip, (int) (sep - arg), arg);
        ib_strv_push (&x->add_hosts, line);
        return true;
      }
    case OPT_SHM_SIZE:
      if (ib_parse_size (arg, &x->shm_size, &e) < 0 || x->shm_size == 0)
        {
          cleanup_free char *m = xasprintf ("%s: --shm-size %s: expected a size above 0 (64m, "
                                            "1g)",
                                            cmd, arg);
          ib_error_free (&e);
          usage_error ("%s", m);
        }
      return true;
    case OPT_ULIMIT:
      x->rlimits = xrealloc (x->rlimits, (x->n_rlimits + 1) * sizeof *x->rlimits);
      if (ib_rlimit_parse (arg, &x->rlimits[x->n_rlimits], &e) < 0)
        {
          cleanup_free char *m = xasprintf ("%s: %s", cmd, e->msg);
          ib_error_free (&e);
          usage_error ("%s", m);
        }
      x->n_rlimits++;
      return true;
    default: return false;
    }
}

void
sandbox_extras_clear (sandbox_extras_t *x)
{
  ib_strv_free (x->add_hosts);
  free (x->rlimits);
  memset (x, 0, sizeof *x);
}
