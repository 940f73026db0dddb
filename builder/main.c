/* imgbuild — daemonless, rootless container image builder.  The CLI: parses
 * arguments, opens the store, enters the user namespace where rootfs work
 * needs it, and reports errors.  The only place that calls exit(). */
#include "builder/build.h"
#include "builder/fsops.h"
#include "common/util.h"
#include "oci/manifest.h"
#include "oci/ref.h"
#include "oci/registry.h"
#include "oci/store.h"
#include "rootfs/sandbox.h"
#include "rootfs/unpack.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef IMGBUILD_VERSION
#define IMGBUILD_VERSION "0.1.0"
#endif

#define EXIT_OWN_FAILURE 125 /* imgbuild run: failure of imgbuild itself, as podman/docker */

static const char *store_dir;
static ib_userns_mode_t userns_mode = IB_USERNS_AUTO;

static const char usage_text[] =
  "Usage: imgbuild [GLOBAL OPTIONS] COMMAND [ARGS]\n"
  "\n"
  "Commands:\n"
  "  [build] RECIPE [--build-arg K=V] [--target STAGE] [--output SPEC] [-t REF] [--context DIR]\n"
  "                         build a recipe (a Dockerfile with OUTPUT)\n"
  "  pull REF [--platform OS/ARCH[/VARIANT]]   pull an image into the store\n"
  "  push SRC DST           push a stored image to a registry\n"
  "  unpack REF DIR         unpack an image's rootfs into DIR\n"
  "  run [-e K=V] [-w DIR] [--network host|none] (REF | --rootfs DIR) [-- CMD...]\n"
  "                         run a command in the sandbox; exits with its status\n"
  "  inspect REF            print the manifest and config as JSON\n"
  "  images                 list stored images\n"
  "  version                print the version\n"
  "\n"
  "Global options:\n"
  "  --store DIR            the store (default $IMGBUILD_STORE or $XDG_DATA_HOME/imgbuild)\n"
  "  --userns MODE          auto, root, map or single (default auto; env IMGBUILD_USERNS)\n"
  "  -q, --quiet            only warnings and errors\n"
  "  -v, --verbose          debug output\n"
  "  -h, --help             this text\n";

static void
usage_error (const char *fmt, const char *arg)
{
  fprintf (stderr, "imgbuild: ");
  fprintf (stderr, fmt, arg);
  fprintf (stderr, "\nTry 'imgbuild --help'.\n");
  exit (2);
}

static int
parse_userns (const char *s, ib_userns_mode_t *m)
{
  if (strcmp (s, "auto") == 0)
    *m = IB_USERNS_AUTO;
  else if (strcmp (s, "root") == 0)
    *m = IB_USERNS_ROOT;
  else if (strcmp (s, "map") == 0)
    *m = IB_USERNS_MAP;
  else if (strcmp (s, "single") == 0)
    *m = IB_USERNS_SINGLE;
  else
    return -1;
  return 0;
}

static int
open_store (ib_store_t **store, ib_error_t *err)
{
  cleanup_free char *def = store_dir ? NULL : ib_store_default_root ();
  return ib_store_open (store_dir ? store_dir : def, store, err);
}

static int
enter_userns (ib_error_t *err)
{
  ib_userns_mode_t got;
  if (ib_userns_enter (userns_mode, &got, err) < 0)
    return ib_error_prefix (err, "enter user namespace");
  ib_debug ("user namespace mode: %s", ib_userns_mode_name (got));
  return 0;
}

/* Resolve a stored image by name, pulling it when absent. */
static int
ensure_image (ib_store_t *store, const char *name, ib_error_t *err)
{
  ib_descriptor_t d = { 0 };
  if (ib_store_resolve (store, name, &d, err) == 0)
    {
      ib_descriptor_clear (&d);
      return 0;
    }
  ib_error_free (err);
  return ib_pull (store, name, NULL, NULL, NULL, NULL, err);
}

static int
image_rootfs (ib_store_t *store, const char *name, const char *dest, json_t **config_out,
              ib_error_t *err)
{
  ib_descriptor_t desc = { 0 };
  ib_manifest_t *m = NULL;
  json_t *config = NULL;
  if (ensure_image (store, name, err) < 0
      || ib_store_load_image (store, name, &desc, &m, &config, err) < 0)
    return -1;
  cleanup_strv char **diff_ids = NULL;
  cleanup_strv char **digests = NULL;
  int ret = ib_config_diff_ids (config, &diff_ids, err);
  for (size_t i = 0; ret == 0 && i < m->n_layers; i++)
    ib_strv_push (&digests, m->layers[i].digest);
  if (ret == 0)
    ret = ib_rootfs_prepare (store, digests, diff_ids, dest, err);
  ib_descriptor_clear (&desc);
  ib_manifest_free (m);
  if (ret == 0 && config_out)
    *config_out = config;
  else
    json_decref (config);
  return ret;
}

static int
cmd_build (int argc, char **argv, ib_error_t *err)
{
  static const struct option opts[] = {
    { "build-arg", required_argument, NULL, 'a' }, { "target", required_argument, NULL, 'T' },
    { "output", required_argument, NULL, 'o' },    { "tag", required_argument, NULL, 't' },
    { "context", required_argument, NULL, 'C' },   { "file", required_argument, NULL, 'f' },
    { NULL, 0, NULL, 0 },
  };
  cleanup_strv char **args = NULL, **outputs = NULL, **tags = NULL;
  const char *target = NULL, *context = NULL, *file = NULL;
  int c;
  optind = 0; /* 0: GNU getopt re-reads the optstring's ordering flag */
  while ((c = getopt_long (argc, argv, "t:o:f:", opts, NULL)) != -1)
    switch (c)
      {
      case 'a': ib_strv_push (&args, optarg); break;
      case 'T': target = optarg; break;
      case 'o': ib_strv_push (&outputs, optarg); break;
      case 't': ib_strv_push (&tags, optarg); break;
      case 'C': context = optarg; break;
      case 'f': file = optarg; break;
      default: exit (2);
      }
  const char *recipe = file;
  if (optind < argc)
    {
      struct stat st;
      if (file && stat (argv[optind], &st) == 0 && S_ISDIR (st.st_mode))
        context = argv[optind]; /* imgbuild build -f RECIPE CONTEXT, as docker build */
      else
        recipe = argv[optind];
      optind++;
    }
  if (recipe == NULL)
    usage_error ("%s", "build: missing RECIPE");
  if (optind < argc)
    usage_error ("build: unexpected argument '%s'", argv[optind]);
  ib_store_t *store = NULL;
  if (enter_userns (err) < 0 || open_store (&store, err) < 0)
    return -1;
  ib_build_opts_t bo = { .recipe_path = recipe, .context_dir = context, .build_args = args,
                         .target = target, .tags = tags, .outputs = outputs };
  int r = ib_build (store, &bo, err);
  ib_store_close (store);
  return r;
}

static int
cmd_pull (int argc, char **argv, ib_error_t *err)
{
  static const struct option opts[] = { { "platform", required_argument, NULL, 'p' },
                                        { NULL, 0, NULL, 0 } };
  cleanup_free char *os = NULL, *arch = NULL, *variant = NULL;
  int c;
  optind = 0; /* 0: GNU getopt re-reads the optstring's ordering flag */
  while ((c = getopt_long (argc, argv, "+", opts, NULL)) != -1)
    {
      ib_error_t perr = NULL;
      free (os), free (arch), free (variant);
      if (c != 'p' || ib_platform_parse (optarg, &os, &arch, &variant, &perr) < 0)
        {
          ib_error_free (&perr);
          usage_error ("pull: --platform takes OS/ARCH[/VARIANT], got '%s'", optarg ? optarg : "");
        }
    }
  if (argc - optind != 1)
    usage_error ("%s", "pull: expected one image reference");
  ib_store_t *store = NULL;
  if (open_store (&store, err) < 0)
    return -1;
  ib_descriptor_t d = { 0 };
  int r = ib_pull (store, argv[optind], os, arch, variant, &d, err);
  if (r == 0)
    printf ("%s\n", d.digest);
  ib_descriptor_clear (&d);
  ib_store_close (store);
  return r;
}

static int
cmd_push (int argc, char **argv, ib_error_t *err)
{
  if (argc != 3)
    usage_error ("%s", "push: expected SRC DST");
  ib_store_t *store = NULL;
  if (open_store (&store, err) < 0)
    return -1;
  int r = ib_push (store, argv[1], argv[2], err);
  ib_store_close (store);
  return r;
}

static int
cmd_unpack (int argc, char **argv, ib_error_t *err)
{
  if (argc != 3)
    usage_error ("%s", "unpack: expected REF DIR");
  struct stat st;
  if (lstat (argv[2], &st) == 0)
    return ib_error_set (err, EEXIST, "unpack: %s already exists", argv[2]);
  ib_store_t *store = NULL;
  if (enter_userns (err) < 0 || open_store (&store, err) < 0)
    return -1;
  int r = image_rootfs (store, argv[1], argv[2], NULL, err);
  ib_store_close (store);
  return r;
}

static int
cmd_inspect (int argc, char **argv, ib_error_t *err)
{
  if (argc != 2)
    usage_error ("%s", "inspect: expected REF");
  ib_store_t *store = NULL;
  if (open_store (&store, err) < 0)
    return -1;
  ib_descriptor_t d = { 0 };
  int r = -1;
  char *mdata = NULL, *cdata = NULL;
  size_t mlen = 0, clen = 0;
  ib_manifest_t *m = NULL;
  if (ib_store_load_image (store, argv[1], &d, &m, NULL, err) < 0
      || ib_store_read_blob (store, d.digest, &mdata, &mlen, err) < 0
      || ib_store_read_blob (store, m->config.digest, &cdata, &clen, err) < 0)
    goto out;
  {
    json_t *jm = json_loadb (mdata, mlen, 0, NULL), *jc = json_loadb (cdata, clen, 0, NULL);
    json_t *o = json_pack ("{s:s, s:o, s:o}", "digest", d.digest, "manifest", jm, "config", jc);
    json_dumpf (o, stdout, JSON_INDENT (2) | JSON_PRESERVE_ORDER);
    printf ("\n");
    json_decref (o);
  }
  r = 0;
out:
  free (mdata);
  free (cdata);
  ib_manifest_free (m);
  ib_descriptor_clear (&d);
  ib_store_close (store);
  return r;
}

static int
cmd_images (int argc, char **argv, ib_error_t *err)
{
  (void) argv;
  if (argc != 1)
    usage_error ("%s", "images: takes no arguments");
  ib_store_t *store = NULL;
  if (open_store (&store, err) < 0)
    return -1;
  json_t *list = NULL;
  if (ib_store_list (store, &list, err) < 0)
    {
      ib_store_close (store);
      return -1;
    }
  printf ("%-60s %-19s %-16s %10s\n", "NAME", "DIGEST", "PLATFORM", "SIZE");
  size_t i;
  json_t *e;
  json_array_foreach (list, i, e)
  {
    const char *name = json_string_value (
        json_object_get (json_object_get (e, "annotations"), "org.opencontainers.image.ref.name"));
    const char *digest = json_string_value (json_object_get (e, "digest"));
    if (digest == NULL)
      continue;
    ib_manifest_t *m = NULL;
    ib_descriptor_t d = { 0 };
    json_t *config = NULL;
    double size = 0;
    cleanup_free char *platform = NULL;
    if (ib_store_load_image (store, digest, &d, &m, &config, NULL) == 0)
      {
        size = (double) m->config.size;
        for (size_t k = 0; k < m->n_layers; k++)
          size += (double) m->layers[k].size;
        const char *os = json_string_value (json_object_get (config, "os"));
        const char *arch = json_string_value (json_object_get (config, "architecture"));
        if (os && arch)
          platform = ib_platform_string (
              os, arch, json_string_value (json_object_get (config, "variant")));
      }
    ib_manifest_free (m);
    ib_descriptor_clear (&d);
    if (config)
      json_decref (config);
    printf ("%-60s %.19s %-16s %8.1fMB\n", name ? name : "<none>", digest,
            platform ? platform : "-", size / 1e6);
  }
  json_decref (list);
  ib_store_close (store);
  return 0;
}

static int
cmd_run (int argc, char **argv, int *exit_status, ib_error_t *err)
{
  static const struct option opts[] = {
    { "env", required_argument, NULL, 'e' },     { "workdir", required_argument, NULL, 'w' },
    { "rootfs", required_argument, NULL, 'r' },  { "network", required_argument, NULL, 'n' },
    { "user", required_argument, NULL, 'u' },    { NULL, 0, NULL, 0 },
  };
  cleanup_strv char **extra_env = NULL;
  const char *workdir = NULL, *rootfs = NULL, *network = NULL, *user = NULL;
  int c;
  optind = 0; /* 0: GNU getopt re-reads the optstring's ordering flag */
  while ((c = getopt_long (argc, argv, "+e:w:u:", opts, NULL)) != -1)
    switch (c)
      {
      case 'e': ib_strv_push (&extra_env, optarg); break;
      case 'w': workdir = optarg; break;
      case 'r': rootfs = optarg; break;
      case 'n': network = optarg; break;
      case 'u': user = optarg; break;
      default: exit (2);
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

  ib_store_t *store = NULL;
  if (enter_userns (err) < 0 || open_store (&store, err) < 0)
    return -1;
  int ret = -1;
  json_t *config = NULL;
  cleanup_free char *tmp_rootfs = NULL;
  cleanup_strv char **cmd = NULL, **env = NULL;
  if (image)
    {
      if (ib_store_tmp_dir (store, "run", &tmp_rootfs, err) < 0)
        goto out;
      rmdir (tmp_rootfs);
      if (image_rootfs (store, image, tmp_rootfs, &config, err) < 0)
        goto out;
      rootfs = tmp_rootfs;
    }
  json_t *cc = json_object_get (config, "config");
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
  for (char **x = extra_env; x && *x; x++)
    {
      if (strchr (*x, '=') == NULL)
        {
          const char *v = getenv (*x);
          cleanup_free char *kv = xasprintf ("%s=%s", *x, v ? v : "");
          ib_strv_push (&env, kv);
        }
      else
        ib_strv_push (&env, *x);
    }
  /* Command: ENTRYPOINT + (arguments given, or CMD). */
  json_array_foreach (json_object_get (cc, "Entrypoint"), i, e)
    ib_strv_push (&cmd, json_string_value (e));
  if (optind < argc)
    for (int k = optind; k < argc; k++)
      ib_strv_push (&cmd, argv[k]);
  else
    json_array_foreach (json_object_get (cc, "Cmd"), i, e)
      ib_strv_push (&cmd, json_string_value (e));
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
  const char *wd = workdir ? workdir : json_string_value (json_object_get (cc, "WorkingDir"));
  ib_sandbox_opts_t so = { .rootfs = rootfs, .argv = cmd, .env = env,
                           .cwd = wd && *wd ? wd : "/", .uid = uid, .gid = gid,
                           .network_none = network && strcmp (network, "none") == 0,
                           .keep_stdin = true, .provide_etc_files = true };
  if (ib_sandbox_run (&so, exit_status, err) < 0)
    goto out;
  ret = 0;
out:
  if (tmp_rootfs)
    {
      ib_error_t e2 = NULL;
      if (ib_rm_rf (tmp_rootfs, &e2) < 0)
        ib_error_report (&e2);
    }
  json_decref (config);
  ib_store_close (store);
  return ret;
}

int
main (int argc, char **argv)
{
  static const struct option opts[] = {
    { "store", required_argument, NULL, 's' }, { "userns", required_argument, NULL, 'U' },
    { "quiet", no_argument, NULL, 'q' },       { "verbose", no_argument, NULL, 'v' },
    { "help", no_argument, NULL, 'h' },        { "version", no_argument, NULL, 'V' },
    { NULL, 0, NULL, 0 },
  };
  const char *env_userns = getenv ("IMGBUILD_USERNS");
  if (env_userns && *env_userns && parse_userns (env_userns, &userns_mode) < 0)
    usage_error ("IMGBUILD_USERNS: expected auto, root, map or single, got '%s'", env_userns);
  int c;
  while ((c = getopt_long (argc, argv, "+qvh", opts, NULL)) != -1)
    switch (c)
      {
      case 's': store_dir = optarg; break;
      case 'U':
        if (parse_userns (optarg, &userns_mode) < 0)
          usage_error ("--userns: expected auto, root, map or single, got '%s'", optarg);
        break;
      case 'q': ib_verbosity = 0; break;
      case 'v': ib_verbosity = 2; break;
      case 'h': fputs (usage_text, stdout); return 0;
      case 'V': printf ("imgbuild %s\n", IMGBUILD_VERSION); return 0;
      default: fputs (usage_text, stderr); return 2;
      }
  if (optind >= argc)
    {
      fputs (usage_text, stderr);
      return 2;
    }
  const char *cmd = argv[optind];
  int sub_argc = argc - optind;
  char **sub_argv = argv + optind;
  ib_error_t err = NULL;
  int r, status = 0;
  if (strcmp (cmd, "build") == 0)
    r = cmd_build (sub_argc, sub_argv, &err);
  else if (strcmp (cmd, "pull") == 0)
    r = cmd_pull (sub_argc, sub_argv, &err);
  else if (strcmp (cmd, "push") == 0)
    r = cmd_push (sub_argc, sub_argv, &err);
  else if (strcmp (cmd, "unpack") == 0)
    r = cmd_unpack (sub_argc, sub_argv, &err);
  else if (strcmp (cmd, "inspect") == 0)
    r = cmd_inspect (sub_argc, sub_argv, &err);
  else if (strcmp (cmd, "images") == 0)
    r = cmd_images (sub_argc, sub_argv, &err);
  else if (strcmp (cmd, "version") == 0)
    {
      printf ("imgbuild %s\n", IMGBUILD_VERSION);
      return 0;
    }
  else if (strcmp (cmd, "run") == 0)
    {
      r = cmd_run (sub_argc, sub_argv, &status, &err);
      if (r < 0)
        {
          ib_error_report (&err);
          return EXIT_OWN_FAILURE;
        }
      return status;
    }
  else if (access (cmd, F_OK) == 0)
    {
      /* imgbuild RECIPE: build.  Shift so that cmd_build sees RECIPE as an operand. */
      r = cmd_build (sub_argc + 1, sub_argv - 1, &err);
    }
  else
    usage_error ("unknown command or recipe file '%s'", cmd);
  if (r < 0)
    {
      ib_error_report (&err);
      return 1;
    }
  return 0;
}
