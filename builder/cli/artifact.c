/* imgbuild artifact push|pull (builder/artifact.h). */
#include "builder/artifact/artifact.h"
#include "builder/cli/cli.h"
#include "common/util.h"

#include <getopt.h>
#include <string.h>

/* imgbuild artifact push|pull (builder/artifact.h; docs/cli.md "Artifact
 * repository"). */
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
    OPT_LIB,
    OPT_LICENSES,
    OPT_DEPENDENCIES,
    OPT_DESTINATION,
  };
  static const struct option opts[] = {
    { "repository", required_argument, NULL, OPT_REPOSITORY },
    { "bucket", required_argument, NULL, OPT_BUCKET },
    { "s3-endpoint", required_argument, NULL, OPT_S3_ENDPOINT },
    { "git-sha", required_argument, NULL, OPT_GIT_SHA },
    { "os", required_argument, NULL, OPT_OS },
    { "variant", required_argument, NULL, OPT_VARIANT },
    { "libtype", required_argument, NULL, OPT_LIBTYPE },
    { "lib", required_argument, NULL, OPT_LIB },
    { "libmxnet", required_argument, NULL, OPT_LIB },
    { "licenses", required_argument, NULL, OPT_LICENSES },
    { "dependencies", required_argument, NULL, OPT_DEPENDENCIES },
    { "destination", required_argument, NULL, OPT_DESTINATION },
    REGISTRY_OPTIONS,
    GLOBAL_OPTIONS,
    { NULL, 0, NULL, 0 },
  };
  if (argc < 2 || (strcmp (argv[1], "push") != 0 && strcmp (argv[1], "pull") != 0))
    usage_error ("%s", "artifact: expected push or pull");
  bool push = strcmp (argv[1], "push") == 0;
  ib_artifact_opts_t o = { 0 };
  cleanup_free char *bucket_url = NULL;
  cleanup_strv char **licenses = NULL;
  cleanup_strv char **deps = NULL;
  o.repository = getenv ("IMGBUILD_ARTIFACT_REPOSITORY");
  const char *env_bucket = getenv ("ARTIFACT_REPOSITORY_BUCKET");
  if ((o.repository == NULL || *o.repository == '\0') && env_bucket && *env_bucket)
    o.repository = bucket_url = xasprintf ("s3://%s", env_bucket);
  int c;
  /* "-": operands come back in order as option 1, so that, as with the
   * tool's argparse nargs, `--licenses A B --dependencies C D` works */
  char ***last_list = NULL;
  /* optind 0: getopt starts over (main parsed with "+"), from argv[1] of
   * the vector given, so give it the one that starts at "push"/"pull" */
  int sub_argc = argc - 1;
  char **sub_argv = argv + 1;
  optind = 0;
  while ((c = getopt_long (sub_argc, sub_argv, "-", opts, NULL)) != -1)
    {
      switch (c)
        {
        case 1:
          if (last_list == NULL)
            usage_error ("artifact: unexpected argument '%s'", optarg);
          ib_strv_push (last_list, optarg);
          break;
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
          free (o.id.libtype);
          o.id.libtype = xstrdup (optarg);
          break;
        case OPT_LIB: o.lib = optarg; break;
        case OPT_LICENSES: ib_strv_push (&licenses, optarg); last_list = &licenses; continue;
        case OPT_DEPENDENCIES: ib_strv_push (&deps, optarg); last_list = &deps; continue;
        case OPT_DESTINATION: o.destination = optarg; break;
        default:
          if (registry_option (c, optarg) || global_option (c, optarg, "artifact"))
            break;
          usage_error ("%s", "artifact: bad option");
        }
      if (c != 1)
        last_list = NULL; /* operands after any other option are errors */
    }
  if (optind < sub_argc)
    usage_error ("artifact: unexpected argument '%s'", sub_argv[optind]);
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
