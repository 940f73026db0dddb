/* imgbuild artifact push|pull (builder/artifact.h). */
#include "builder/artifact/artifact.h"
#include "builder/cli/cli.h"
#include "common/util.h"

#include <getopt.h>
#include <string.h>
#include <unistd.h>

/* `dir` as the tool's os.path.abspath makes it: absolute (against the
 * current directory), cleaned lexically.  Caller frees. */
static char *
abs_clean (const char *dir)
{
  if (dir[0] == '/')
    return ib_path_clean_abs (dir);
  cleanup_free char *cwd = getcwd (NULL, 0);
  cleanup_free char *joined = ib_path_join (cwd ? cwd : "/", dir);
  return ib_path_clean_abs (joined);
}

/* imgbuild artifact push|pull, or the tool's own form with --push/--pull
 * (builder/artifact.h; docs/cli.md "Artifact repository"). */
int
cmd_artifact (int argc, char **argv, ib_error_t *err)
{
  enum
  {
    OPT_REPOSITORY = 0x300,
    OPT_BUCKET,
    OPT_S3_ENDPOINT,
    OPT_GIT_SHA,
    OPT_OS,
    OPT_VARIANT,
    OPT_LIBTYPE,
    OPT_STATIC,
    OPT_DYNAMIC,
    OPT_LIB,
    OPT_LICENSES,
    OPT_DEPENDENCIES,
    OPT_DESTINATION,
    OPT_PUSH,
    OPT_PULL,
  };
  /* --licenses and --dependencies take no argument of their own in the
   * table (optional_argument: only "--licenses=P" gives one): the operands
   * after them are their patterns, zero or more, as the tool's argparse
   * nargs='*' (MXNet's Jenkins passes `--dependencies` with none) */
  static const struct option opts[] = {
    { "repository", required_argument, NULL, OPT_REPOSITORY },
    { "bucket", required_argument, NULL, OPT_BUCKET },
    { "s3-endpoint", required_argument, NULL, OPT_S3_ENDPOINT },
    { "git-sha", required_argument, NULL, OPT_GIT_SHA },
    { "os", required_argument, NULL, OPT_OS },
    { "variant", required_argument, NULL, OPT_VARIANT },
    { "libtype", required_argument, NULL, OPT_LIBTYPE },
    { "static", no_argument, NULL, OPT_STATIC },
    { "dynamic", no_argument, NULL, OPT_DYNAMIC },
    { "lib", required_argument, NULL, OPT_LIB },
    { "libmxnet", required_argument, NULL, OPT_LIB },
    { "licenses", optional_argument, NULL, OPT_LICENSES },
    { "dependencies", optional_argument, NULL, OPT_DEPENDENCIES },
    { "destination", required_argument, NULL, OPT_DESTINATION },
    { "push", no_argument, NULL, OPT_PUSH },
    { "pull", no_argument, NULL, OPT_PULL },
    REGISTRY_OPTIONS,
    GLOBAL_OPTIONS,
    { NULL, 0, NULL, 0 },
  };
  /* the action: the subcommand word (argv[1]) or the tool's --push/--pull
   * flag; both may be given when they agree */
  const char *word = NULL;
  if (argc >= 2 && (strcmp (argv[1], "push") == 0 || strcmp (argv[1], "pull") == 0))
    word = argv[1];
  const char *flag = NULL;
  ib_artifact_opts_t o = { 0 };
  cleanup_free char *bucket_url = NULL;
  cleanup_strv char **licenses = NULL;
  cleanup_strv char **deps = NULL;
  cleanup_strv char **operands = NULL;
  const char *libtype_opt = NULL;  /* the last --libtype */
  const char *libtype_flag = NULL; /* --static or --dynamic */
  o.repository = getenv ("IMGBUILD_ARTIFACT_REPOSITORY");
  const char *env_bucket = getenv ("ARTIFACT_REPOSITORY_BUCKET");
  if ((o.repository == NULL || *o.repository == '\0') && env_bucket && *env_bucket)
    o.repository = bucket_url = xasprintf ("s3://%s", env_bucket);
  int c;
  /* "-": operands come back in order as option 1, so that, as with the
   * tool's argparse nargs, `--licenses A B --dependencies C D` works */
  char ***last_list = NULL;
  /* optind 0: getopt starts over (main parsed with "+"), from argv[1] of
   * the vector given: with a subcommand word, the vector that starts at
   * it, else the command's own ("artifact --push ...") */
  int sub_argc = word ? argc - 1 : argc;
  char **sub_argv = word ? argv + 1 : argv;
  optind = 0;
  while ((c = getopt_long (sub_argc, sub_argv, "-", opts, NULL)) != -1)
    {
      switch (c)
        {
        case 1:
          if (last_list)
            ib_strv_push (last_list, optarg);
          else
            ib_strv_push (&operands, optarg); /* pull's destination */
          continue;
        case OPT_REPOSITORY: o.repository = optarg; break;
        case OPT_BUCKET:
          free (bucket_url);
          o.repository = bucket_url = xasprintf ("s3://%s", optarg);
          break;
        case OPT_S3_ENDPOINT: o.s3_endpoint = optarg; break;
        case OPT_GIT_SHA: free (o.id.commit); o.id.commit = xstrdup (optarg); break;
        case OPT_OS: free (o.id.os); o.id.os = xstrdup (optarg); break;
        case OPT_VARIANT: free (o.id.variant); o.id.variant = xstrdup (optarg); break;
        case OPT_LIBTYPE:
          if (strcmp (optarg, "static") != 0 && strcmp (optarg, "dynamic") != 0)
            usage_error ("artifact: --libtype: expected static or dynamic, got '%s'", optarg);
          libtype_opt = optarg;
          break;
        case OPT_STATIC:
        case OPT_DYNAMIC:
          {
            const char *t = c == OPT_STATIC ? "static" : "dynamic";
            if (libtype_flag && strcmp (libtype_flag, t) != 0)
              usage_error ("%s", "artifact: --static and --dynamic cannot be used together");
            libtype_flag = t;
            break;
          }
        case OPT_PUSH:
        case OPT_PULL:
          {
            const char *f = c == OPT_PUSH ? "push" : "pull";
            if (flag && strcmp (flag, f) != 0)
              usage_error ("%s", "artifact: --push and --pull cannot be used together");
            flag = f;
            break;
          }
        case OPT_LIB: o.lib = optarg; break;
        case OPT_LICENSES:
          if (optarg)
            ib_strv_push (&licenses, optarg);
          else if (licenses == NULL)
            licenses = xmalloc (sizeof *licenses); /* given, maybe empty */
          last_list = &licenses;
          continue;
        case OPT_DEPENDENCIES:
          if (optarg)
            ib_strv_push (&deps, optarg);
          else if (deps == NULL)
            deps = xmalloc (sizeof *deps);
          last_list = &deps;
          continue;
        case OPT_DESTINATION: o.destination = optarg; break;
        default:
          if (registry_option (c, optarg) || global_option (c, optarg, "artifact"))
            break;
          usage_error ("%s", "artifact: bad option");
        }
      last_list = NULL; /* operands after any other option are not its list's */
    }
  if (optind < sub_argc)
    ib_strv_push (&operands, sub_argv[optind]); /* after "--" */
  if (word && flag && strcmp (word, flag) != 0)
    {
      cleanup_free char *msg = xasprintf ("artifact %s: --%s conflicts with the subcommand "
                                          "'%s' (give one action)", word, flag, word);
      usage_error ("%s", msg);
    }
  const char *action = word ? word : flag;
  if (action == NULL)
    usage_error ("%s", "artifact: expected push or pull (the subcommand, or --push / --pull)");
  bool push = strcmp (action, "push") == 0;
  if (libtype_opt && libtype_flag && strcmp (libtype_opt, libtype_flag) != 0)
    {
      cleanup_free char *msg = xasprintf ("artifact %s: --%s conflicts with --libtype %s",
                                          action, libtype_flag, libtype_opt);
      usage_error ("%s", msg);
    }
  const char *libtype = libtype_flag ? libtype_flag : libtype_opt;
  if (libtype)
    o.id.libtype = xstrdup (libtype);
  if (push && operands)
    usage_error ("artifact push: unexpected argument '%s'", operands[0]);
  if (!push && operands && operands[1])
    usage_error ("artifact pull: unexpected argument '%s' (one destination only)", operands[1]);
  if (!push && operands)
    {
      if (o.destination)
        {
          cleanup_free char *a = abs_clean (o.destination);
          cleanup_free char *b = abs_clean (operands[0]);
          if (strcmp (a, b) != 0)
            {
              cleanup_free char *msg
                = xasprintf ("artifact pull: destination '%s' conflicts with --destination '%s'",
                             operands[0], o.destination);
              usage_error ("%s", msg);
            }
        }
      o.destination = operands[0];
    }
  if (!push && (o.lib || licenses || deps))
    usage_error ("%s", "artifact pull: --lib, --licenses and --dependencies are for push");
  if (push && o.destination)
    usage_error ("%s", "artifact push: --destination is for pull");
  o.licenses = licenses;
  o.dependencies = deps;
  ib_store_t *store = NULL;
  int ret = 0;
  if (o.repository && *o.repository && !ib_artifact_is_s3 (o.repository))
    ret = open_store (&store, err);
  if (ret == 0)
    ret = push ? ib_artifact_push (&o, store, err) : ib_artifact_pull (&o, store, err);
  ib_artifact_id_clear (&o.id);
  ib_store_close (store);
  return ret;
}
