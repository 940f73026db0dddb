/* imgbuild — daemonless, rootless container image builder.  The CLI: parses
 * arguments, opens the store, enters the user namespace where rootfs work
 * needs it, and reports errors.  The only place that calls exit(). */
#include "builder/artifact/artifact.h"
#include "builder/build.h"
#include "builder/plan.h"
#include "builder/prune.h"
#include "builder/mountspec.h"
#include "builder/fsops.h"
#include "builder/matrix.h"
#include "builder/wheel/wheel.h"
#include "common/progress.h"
#include "common/util.h"
#include "oci/auth.h"
#include "rootfs/gpu.h"
#include "oci/manifest.h"
#include "oci/ref.h"
#include "oci/regconf.h"
#include "oci/registry.h"
#include "oci/store.h"
#include "rootfs/overlay.h"
#include "rootfs/prepare.h"
#include "rootfs/sandbox.h"
#include "rootfs/userns.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <termios.h>
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
  "  [build] RECIPE [--build-arg K=V] [--matrix K=V1,V2...] [--fail-fast] [--target STAGE]\n"
  "          [--output SPEC] [-t REF] [--context DIR]\n"
  "          [--compression gzip|zstd|none] [--compression-level N] [--reproducible]\n"
  "          [--device CDI-NAME] [--cdi-spec-dir DIR] [--no-cache] [--no-cache-filter STAGE]\n"
  "          [--keep-on-failure] [--debug-shell] [--cache-from SPEC] [--cache-to SPEC]\n"
  "          [--annotation KEY=VALUE] [-j N] [--platform OS/ARCH[/VARIANT]]\n"
  "                         build a recipe (a Dockerfile with OUTPUT); --matrix: once\n"
  "                         per combination of the values, then a summary\n"
  "  plan RECIPE [--build-arg K=V] [--matrix K=V1,V2...] [--target STAGE]\n"
  "       [--platform OS/ARCH[/VARIANT]] [--json]\n"
  "                         print what a build would do (stages, steps after ARG\n"
  "                         expansion, cache key inputs, outputs) without running it\n"
  "  pull REF [--platform OS/ARCH[/VARIANT]] [--authfile FILE] [--creds USER:PASS]\n"
  "                         pull an image into the store\n"
  "  push SRC DST [DST...] [-t TAG] [--chunk-size SIZE] [--authfile FILE] [--creds USER:PASS]\n"
  "                         push a stored image to registries\n"
  "  login REGISTRY [-u USER] [-p PASS | --password-stdin] [--authfile FILE]\n"
  "                         check credentials with the registry and store them\n"
  "  logout (REGISTRY | --all) [--authfile FILE]\n"
  "                         remove stored credentials\n"
  "  unpack REF DIR         unpack an image's rootfs into DIR\n"
  "  run [-e K=V] [--env-file F] [-w DIR] [-u USER] [--entrypoint CMD] [--network host|none] [-v SRC:DST[:ro]]\n"
  "      [--mount type=bind|cache|tmpfs,...] [--tmpfs DST[:size=N]] [--device CDI-NAME]\n"
  "      [--cdi-spec-dir DIR] (REF | --rootfs DIR) [-- CMD...]\n"
  "                         run a command in the sandbox; exits with its status\n"
  "  inspect REF            print the manifest and config as JSON\n"
  "  images                 list stored images\n"
  "  prune [--cache] [--all] remove leftovers of dead builds, blobs no tag or cache\n"
  "                         record names, unused snapshots; --cache: the build cache\n"
  "                         too; --all: also every snapshot\n"
  "  wheel audit FILE.whl [--json] [--root DIR]\n"
  "                         verify a wheel (PEP 427) and print its manylinux audit\n"
  "                         (like auditwheel show); exit 1 when it does not verify\n"
  "  wheel repair FILE.whl --plat TAG [-w DIR] [--exclude PATTERN]... [--root DIR]\n"
  "                         graft external libraries into the wheel and retag it\n"
  "                         (like auditwheel repair; needs patchelf)\n"
  "  artifact push --lib FILE --licenses FILE... [--dependencies FILE...] [ARTIFACT OPTIONS]\n"
  "                         store a library build with its licenses and dependencies\n"
  "  artifact pull [--destination DIR] [ARTIFACT OPTIONS]\n"
  "                         fetch one into DIR (default: the current directory)\n"
  "         ARTIFACT OPTIONS: --repository s3://BUCKET[/PREFIX] | REGISTRY/REPOSITORY\n"
  "                         (env IMGBUILD_ARTIFACT_REPOSITORY), --bucket NAME (env\n"
  "                         ARTIFACT_REPOSITORY_BUCKET), --s3-endpoint URL, --git-sha SHA,\n"
  "                         --os OS, --variant VARIANT, --libtype static|dynamic\n"
  "  version                print the version\n"
  "\n"
  "Global options:\n"
  "  --store DIR            the store (default $IMGBUILD_STORE or $XDG_DATA_HOME/imgbuild)\n"
  "  --userns MODE          auto, root, map or single (default auto; env IMGBUILD_USERNS)\n"
  "  --progress MODE        pull/push progress: auto, tty, plain, json or quiet\n"
  "                         (default auto; env IMGBUILD_PROGRESS)\n"
  "  -q, --quiet            only warnings and errors (and --progress quiet)\n"
  "  -v, --verbose          debug output\n"
  "\n"
  "Registry options (global, or after build, pull, push):\n"
  "  --cert-dir DIR         TLS files (*.crt CAs, *.cert + *.key client certificate) for\n"
  "                         every registry, instead of certs.d/HOST[:PORT]\n"
  "  --tls-verify[=BOOL]    true: HTTPS with verified certificates for every registry,\n"
  "                         loopback included; false: every registry is insecure\n"
  "  --insecure-registry HOST[:PORT]  HTTPS without verification, or plain HTTP (repeatable)\n"
  "  --registries-conf FILE registries.conf (mirrors, prefix rewrites, blocked registries)\n"
  "  --chunk-size SIZE      push blobs larger than SIZE in chunks of SIZE (like 8M; default:\n"
  "                         monolithic; env IMGBUILD_PUSH_CHUNK_SIZE)\n"
  "  -h, --help             this text\n";

static void
usage_error (const char *fmt, const char *arg)
{
  /* arg is the user's (an operand, an error quoting one): shown with its
   * control characters as '?', like every final error line */
  char *msg = NULL;
  if (asprintf (&msg, fmt, arg) < 0)
    abort ();
  cleanup_free char *shown = ib_str_printable (msg, true);
  free (msg);
  fprintf (stderr, "imgbuild: %s\nTry 'imgbuild --help'.\n", shown);
  exit (2);
}

/* Registry options, accepted globally and by build, pull and push. */
enum
{
  OPT_CERT_DIR = 0x100,
  OPT_TLS_VERIFY,
  OPT_INSECURE_REGISTRY,
  OPT_REGISTRIES_CONF,
  OPT_CHUNK_SIZE,
  OPT_AUTHFILE,
};
#define REGISTRY_OPTIONS                                                                         \
  { "cert-dir", required_argument, NULL, OPT_CERT_DIR },                                        \
  { "tls-verify", optional_argument, NULL, OPT_TLS_VERIFY },                                    \
  { "insecure-registry", required_argument, NULL, OPT_INSECURE_REGISTRY },                      \
  { "registries-conf", required_argument, NULL, OPT_REGISTRIES_CONF },                          \
  { "chunk-size", required_argument, NULL, OPT_CHUNK_SIZE },                                    \
  { "authfile", required_argument, NULL, OPT_AUTHFILE }

static void
set_chunk_size (const char *what, const char *s)
{
  uint64_t n;
  ib_error_t e = NULL;
  if (ib_parse_size (s, &n, &e) < 0)
    {
      cleanup_free char *shown = ib_str_printable (e->msg, false);
      fprintf (stderr, "imgbuild: %s: %s\nTry 'imgbuild --help'.\n", what, shown);
      ib_error_free (&e);
      exit (2);
    }
  ib_regconf_set_chunk_size (n);
}

/* Handle one of REGISTRY_OPTIONS; false when `c` is none of them. */
static bool
registry_option (int c, const char *arg)
{
  switch (c)
    {
    case OPT_CERT_DIR:
      ib_regconf_set_cert_dir (arg);
      return true;
    case OPT_TLS_VERIFY:
      if (arg == NULL || strcmp (arg, "true") == 0 || strcmp (arg, "1") == 0)
        ib_regconf_set_tls_verify (1);
      else if (strcmp (arg, "false") == 0 || strcmp (arg, "0") == 0)
        ib_regconf_set_tls_verify (0);
      else
        usage_error ("--tls-verify: expected true or false, got '%s'", arg);
      return true;
    case OPT_INSECURE_REGISTRY:
      if (*arg == '\0' || strchr (arg, '/'))
        usage_error ("--insecure-registry: expected HOST[:PORT], got '%s'", arg);
      ib_registry_add_insecure (arg);
      return true;
    case OPT_REGISTRIES_CONF:
      ib_regconf_set_conf_path (arg);
      return true;
    case OPT_CHUNK_SIZE:
      set_chunk_size ("--chunk-size", arg);
      return true;
    case OPT_AUTHFILE:
      ib_auth_set_authfile (arg);
      return true;
    default:
      return false;
    }
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
  if (ib_store_open (store_dir ? store_dir : def, store, err) < 0)
    return -1;
  /* held shared while the command runs: `imgbuild prune` waits for it */
  if (ib_store_gc_lock (*store, false, true, err) < 0)
    {
      ib_store_close (*store);
      *store = NULL;
      return -1;
    }
  return 0;
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

/* `dest` := the rootfs of image `name`, pulled (and unpacked while it
 * downloads) when the store lacks it; `snapshot`: record the result as the
 * image's snapshot for later runs and builds (run does; unpack, an export,
 * does not). */
static int
image_rootfs (ib_store_t *store, const char *name, const char *dest, bool snapshot,
              json_t **config_out, ib_error_t *err)
{
  ib_descriptor_t desc = { 0 };
  ib_manifest_t *m = NULL;
  json_t *config = NULL;
  bool pulled = false;
  if (ib_store_resolve (store, name, &desc, err) < 0)
    {
      /* not stored: pull it, unpacking each layer while it downloads */
      ib_error_free (err);
      if (ib_rootfs_pull (store, name, NULL, NULL, NULL, dest, snapshot, err) < 0)
        return -1;
      pulled = true;
    }
  ib_descriptor_clear (&desc);
  if (ib_store_load_image (store, name, &desc, &m, &config, err) < 0)
    return -1;
  cleanup_strv char **diff_ids = NULL;
  cleanup_strv char **digests = NULL;
  int ret = ib_config_diff_ids (config, &diff_ids, err);
  for (size_t i = 0; ret == 0 && i < m->n_layers; i++)
    ib_strv_push (&digests, m->layers[i].digest);
  if (ret == 0 && !pulled)
    ret = ib_rootfs_prepare (store, digests, diff_ids, dest, snapshot, err);
  ib_descriptor_clear (&desc);
  ib_manifest_free (m);
  if (ret == 0 && config_out)
    *config_out = config;
  else
    json_decref (config);
  return ret;
}

/* The strings of `v` joined by `sep` (caller frees). */
static char *
strv_join (char **v, const char *sep)
{
  ib_buf_t b = { 0 };
  for (size_t i = 0; v && v[i]; i++)
    ib_buf_printf (&b, "%s%s", i ? sep : "", v[i]);
  return ib_buf_steal (&b); /* "" when v is empty */
}

static int
cmp_str (const void *a, const void *b)
{
  return strcmp (*(char *const *) a, *(char *const *) b);
}

/* A --matrix error is a usage error (exit 2): its message, then usage. */
static void
matrix_usage_error (int r, ib_error_t *e)
{
  if (r == 0)
    return;
  cleanup_free char *msg = xstrdup ((*e)->msg);
  ib_error_free (e);
  usage_error ("%s", msg);
}

/* Every *.whl under `dir` (recursively), as DIR/REL paths, sorted. */
static void
list_wheels (const char *dir, char ***out)
{
  DIR *d = opendir (dir);
  if (d == NULL)
    return;
  cleanup_strv char **found = NULL;
  struct dirent *de;
  while ((de = readdir (d)))
    {
      if (strcmp (de->d_name, ".") == 0 || strcmp (de->d_name, "..") == 0)
        continue;
      cleanup_free char *p = ib_path_join (dir, de->d_name);
      struct stat st;
      if (lstat (p, &st) < 0)
        continue;
      if (S_ISDIR (st.st_mode))
        list_wheels (p, &found);
      else if (S_ISREG (st.st_mode) && ib_str_has_suffix (de->d_name, ".whl"))
        ib_strv_push (&found, p);
    }
  closedir (d);
  size_t n = ib_strv_len (found);
  if (n > 1)
    qsort (found, n, sizeof (char *), cmp_str);
  for (size_t i = 0; i < n; i++)
    ib_strv_push (out, found[i]);
}

/* One combination's lines of the matrix summary: its outputs as the plan
 * names them (needed stages, ARGs expanded), the wheels now in each
 * type=local dest, the images tagged. */
static void
matrix_summary_outputs (const ib_build_opts_t *bo, ib_buf_t *sum)
{
  json_t *plan = NULL;
  ib_error_t e = NULL;
  if (ib_build_plan (bo, &plan, &e) < 0)
    {
      ib_buf_printf (sum, "  (outputs unknown: %s)\n", e->msg);
      ib_error_free (&e);
      return;
    }
  size_t si, oi;
  json_t *stage, *o;
  json_array_foreach (json_object_get (plan, "stages"), si, stage)
    json_array_foreach (json_object_get (stage, "outputs"), oi, o)
    {
      const char *type = json_string_value (json_object_get (o, "type"));
      const char *dest = json_string_value (json_object_get (o, "dest"));
      const char *name = json_string_value (json_object_get (o, "name"));
      if (type && strcmp (type, "local") == 0 && dest)
        {
          cleanup_strv char **wheels = NULL;
          list_wheels (dest, &wheels);
          if (wheels == NULL)
            ib_buf_printf (sum, "  local %s (no wheels)\n", dest);
          for (char **w = wheels; w && *w; w++)
            ib_buf_printf (sum, "  wheel %s\n", *w);
        }
      else if (type && (strcmp (type, "image") == 0 || strcmp (type, "registry") == 0) && name)
        ib_buf_printf (sum, "  image %s\n", name);
      else if (type && dest)
        ib_buf_printf (sum, "  %s %s\n", type, dest);
    }
  json_decref (plan);
}

/* imgbuild build --matrix: ib_build once per combination (matrix.h's
 * order), each with the --build-args plus the combination's values, all
 * in one store (so steps that do not read a matrix ARG are cache hits
 * after the first combination).  A failed combination is reported and
 * the next one built (--fail-fast: none after it); at the end a summary
 * on stdout lists per combination its outcome, the wheels in each
 * type=local dest and the images tagged.  Fails when any combination did. */
static int
build_matrix (ib_store_t *store, const ib_build_opts_t *base, const ib_matrix_t *m,
              bool fail_fast, ib_error_t *err)
{
  size_t n = ib_matrix_count (m), failed = 0, built = 0;
  ib_buf_t sum = { 0 };
  ib_buf_puts (&sum, "");
  for (size_t i = 0; i < n; i++)
    {
      cleanup_strv char **combo = ib_matrix_combination (m, i);
      cleanup_strv char **args = ib_strv_dup (base->build_args);
      for (char **c = combo; *c; c++)
        ib_strv_push (&args, *c);
      cleanup_free char *label = strv_join (combo, " ");
      ib_build_opts_t bo = *base;
      bo.build_args = args;
      ib_info ("==> matrix %zu/%zu: %s", i + 1, n, label);
      ib_error_t e = NULL;
      if (ib_build (store, &bo, &e) < 0)
        {
          failed++;
          const char *nl = strchr (e->msg, '\n');
          cleanup_free char *first = ib_str_printable (e->msg, true); /* no escapes */
          ib_buf_printf (&sum, "matrix %zu/%zu: %s: FAILED: %.*s\n", i + 1, n, label,
                         nl ? (int) (nl - e->msg) : (int) strlen (e->msg), first);
          ib_error_prefix (&e, "matrix %s", label);
          ib_error_report (&e);
          if (fail_fast)
            {
              for (size_t k = i + 1; k < n; k++)
                {
                  cleanup_strv char **rest = ib_matrix_combination (m, k);
                  cleanup_free char *rl = strv_join (rest, " ");
                  ib_buf_printf (&sum, "matrix %zu/%zu: %s: not built (--fail-fast)\n", k + 1, n,
                                 rl);
                }
              break;
            }
          continue;
        }
      built++;
      ib_buf_printf (&sum, "matrix %zu/%zu: %s: ok\n", i + 1, n, label);
      matrix_summary_outputs (&bo, &sum);
    }
  printf ("matrix summary: %zu of %zu combinations built, %zu failed\n%s", built, n, failed,
          sum.data);
  fflush (stdout);
  ib_buf_free (&sum);
  if (failed)
    return ib_error_set (err, EIO, "matrix: %zu of %zu combinations failed", failed, n);
  return 0;
}

static int
cmd_build (int argc, char **argv, ib_error_t *err)
{
  static const struct option opts[] = {
    { "build-arg", required_argument, NULL, 'a' }, { "target", required_argument, NULL, 'T' },
    { "output", required_argument, NULL, 'o' },    { "tag", required_argument, NULL, 't' },
    { "context", required_argument, NULL, 'C' },   { "file", required_argument, NULL, 'f' },
    { "compression", required_argument, NULL, 'Z' },
    { "compression-level", required_argument, NULL, 'L' },
    { "reproducible", no_argument, NULL, 'R' },
    { "device", required_argument, NULL, 'D' },    { "cdi-spec-dir", required_argument, NULL, 'S' },
    { "no-cache", no_argument, NULL, 'N' },       { "no-cache-filter", required_argument, NULL, 'F' },
    { "keep-on-failure", no_argument, NULL, 'K' }, { "debug-shell", no_argument, NULL, 'H' },
    { "cache-from", required_argument, NULL, 'I' }, { "cache-to", required_argument, NULL, 'E' },
    { "annotation", required_argument, NULL, 'A' }, { "jobs", required_argument, NULL, 'j' },
    { "platform", required_argument, NULL, 'P' },  { "matrix", required_argument, NULL, 'M' },
    { "fail-fast", no_argument, NULL, 'X' },
    REGISTRY_OPTIONS,                              { NULL, 0, NULL, 0 },
  };
  cleanup_strv char **args = NULL, **outputs = NULL, **tags = NULL, **devices = NULL,
                    **cdi_dirs = NULL, **no_cache_filter = NULL, **cache_from = NULL,
                    **cache_to = NULL, **annotations = NULL;
  bool no_cache = false, keep_on_failure = false, debug_shell = false, fail_fast = false;
  const char *target = NULL, *context = NULL, *file = NULL, *platform = NULL;
  __attribute__ ((cleanup (ib_matrix_clear))) ib_matrix_t matrix = { 0 };
  ib_compression_t compression = IB_COMPRESSION_GZIP;
  int level = -1;
  bool reproducible = false;
  char *end;
  int c;
  optind = 0; /* 0: GNU getopt re-reads the optstring's ordering flag */
  int jobs = 1;
  while ((c = getopt_long (argc, argv, "t:o:f:j:", opts, NULL)) != -1)
    switch (c)
      {
      case 'a': ib_strv_push (&args, optarg); break;
      case 'M': { ib_error_t me = NULL; matrix_usage_error (ib_matrix_add (&matrix, optarg, &me), &me); } break;
      case 'X': fail_fast = true; break;
      case 'T': target = optarg; break;
      case 'o': ib_strv_push (&outputs, optarg); break;
      case 't': ib_strv_push (&tags, optarg); break;
      case 'C': context = optarg; break;
      case 'f': file = optarg; break;
      case 'Z':
        if (ib_compression_parse (optarg, &compression) < 0)
          usage_error ("--compression: expected gzip, zstd or none, got '%s'", optarg);
        break;
      case 'L':
        errno = 0;
        level = (int) strtol (optarg, &end, 10);
        if (errno || end == optarg || *end || level < 0)
          usage_error ("--compression-level: expected a number, got '%s'", optarg);
        break;
      case 'R': reproducible = true; break;
      case 'D': ib_strv_push (&devices, optarg); break;
      case 'S': ib_strv_push (&cdi_dirs, optarg); break;
      case 'N': no_cache = true; break;
      case 'K': keep_on_failure = true; break;
      case 'I': ib_strv_push (&cache_from, optarg); break;
      case 'E': ib_strv_push (&cache_to, optarg); break;
      case 'j':
        errno = 0;
        jobs = (int) strtol (optarg, &end, 10);
        if (errno || end == optarg || *end || jobs < 1 || jobs > 64)
          usage_error ("--jobs: expected a number from 1 to 64, got '%s'", optarg);
        break;
      case 'A':
        /* buildx spells it [TYPE:]KEY=VALUE; manifest is the only type here */
        ib_strv_push (&annotations, ib_str_has_prefix (optarg, "manifest:") ? optarg + 9 : optarg);
        break;
      case 'H': debug_shell = true; break;
      case 'P':
        {
          cleanup_free char *os = NULL, *arch = NULL, *variant = NULL;
          ib_error_t perr = NULL;
          if (ib_platform_parse (optarg, &os, &arch, &variant, &perr) < 0)
            {
              ib_error_free (&perr);
              usage_error ("--platform: expected OS/ARCH[/VARIANT], got '%s'", optarg);
            }
          platform = optarg;
          break;
        }
      case 'F':
        {
          /* BuildKit: --no-cache-filter takes one or more comma-separated stages */
          cleanup_free char *list = xstrdup (optarg);
          char *save = NULL;
          for (char *t = strtok_r (list, ",", &save); t; t = strtok_r (NULL, ",", &save))
            ib_strv_push (&no_cache_filter, t);
          break;
        }
      default:
        if (!registry_option (c, optarg))
          exit (2);
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
  {
    ib_error_t me = NULL;
    matrix_usage_error (ib_matrix_check_args (&matrix, args, &me), &me);
  }
  if (fail_fast && matrix.n_axes == 0)
    usage_error ("%s", "build: --fail-fast goes with --matrix");
  if (!ib_compression_level_ok (compression, level))
    {
      static const char *const ranges[] = { "0-9 for gzip", "1-19 for zstd", "none for none" };
      fprintf (stderr, "imgbuild: --compression-level %d: out of range (%s)\nTry 'imgbuild --help'.\n",
               level, ranges[compression]);
      exit (2);
    }
  /* The build enters the user namespace itself, when it first needs a
   * rootfs or the network (build.h). */
  ib_store_t *store = NULL;
  if (open_store (&store, err) < 0)
    return -1;
  ib_rootfs_allow_overlay (true); /* stage trees: overlays on the snapshots, not copies */
  ib_build_opts_t bo = { .userns = userns_mode, .recipe_path = recipe, .context_dir = context, .build_args = args,
                         .target = target, .tags = tags, .outputs = outputs,
                         .compression = compression, .compression_level = level,
                         .reproducible = reproducible, .devices = devices,
                         .cdi_spec_dirs = cdi_dirs, .no_cache = no_cache,
                         .no_cache_filter = no_cache_filter, .platform = platform, .keep_on_failure = keep_on_failure,
                         .debug_shell = debug_shell, .cache_from = cache_from,
                         .cache_to = cache_to, .annotations = annotations, .jobs = jobs };
  int r = matrix.n_axes ? build_matrix (store, &bo, &matrix, fail_fast, err)
                        : ib_build (store, &bo, err);
  ib_store_close (store);
  return r;
}

/* imgbuild plan: the build's plan (build.h, plan.h); no store, no namespace. */
static int
cmd_plan (int argc, char **argv, ib_error_t *err)
{
  static const struct option opts[] = {
    { "build-arg", required_argument, NULL, 'a' }, { "target", required_argument, NULL, 'T' },
    { "platform", required_argument, NULL, 'P' },  { "json", no_argument, NULL, 'J' },
    { "matrix", required_argument, NULL, 'M' },    { NULL, 0, NULL, 0 },
  };
  cleanup_strv char **args = NULL;
  __attribute__ ((cleanup (ib_matrix_clear))) ib_matrix_t matrix = { 0 };
  const char *target = NULL, *platform = NULL;
  bool as_json = false;
  int c;
  optind = 0;
  while ((c = getopt_long (argc, argv, "", opts, NULL)) != -1)
    switch (c)
      {
      case 'a': ib_strv_push (&args, optarg); break;
      case 'M': { ib_error_t me = NULL; matrix_usage_error (ib_matrix_add (&matrix, optarg, &me), &me); } break;
      case 'T': target = optarg; break;
      case 'J': as_json = true; break;
      case 'P':
        {
          cleanup_free char *os = NULL, *arch = NULL, *variant = NULL;
          ib_error_t perr = NULL;
          if (ib_platform_parse (optarg, &os, &arch, &variant, &perr) < 0)
            {
              ib_error_free (&perr);
              usage_error ("--platform: expected OS/ARCH[/VARIANT], got '%s'", optarg);
            }
          platform = optarg;
          break;
        }
      default: exit (2);
      }
  if (optind >= argc)
    usage_error ("%s", "plan: missing RECIPE");
  if (optind + 1 < argc)
    usage_error ("plan: unexpected argument '%s'", argv[optind + 1]);
  {
    ib_error_t me = NULL;
    matrix_usage_error (ib_matrix_check_args (&matrix, args, &me), &me);
  }
  /* With --matrix: one plan per combination, in the build's order; text
   * plans under a "matrix I/N: K=V ..." line, JSON ones as an array of
   * {"matrix": {K: V}, "plan": PLAN}. */
  size_t n = ib_matrix_count (&matrix);
  json_t *all = matrix.n_axes && as_json ? json_array () : NULL;
  for (size_t i = 0; i < n; i++)
    {
      cleanup_strv char **combo = ib_matrix_combination (&matrix, i);
      cleanup_strv char **cargs = ib_strv_dup (args);
      for (char **c = combo; *c; c++)
        ib_strv_push (&cargs, *c);
      ib_build_opts_t bo = { .recipe_path = argv[optind], .build_args = cargs, .target = target,
                             .platform = platform };
      json_t *plan = NULL;
      if (ib_build_plan (&bo, &plan, err) < 0)
        {
          json_decref (all);
          if (matrix.n_axes)
            {
              cleanup_free char *label = strv_join (combo, " ");
              ib_error_prefix (err, "matrix %s", label);
            }
          return -1;
        }
      if (all)
        {
          json_t *m = json_object ();
          for (char **c = combo; *c; c++)
            {
              char *eq = strchr (*c, '=');
              cleanup_free char *k = xstrndup (*c, (size_t) (eq - *c));
              json_object_set_new (m, k, json_string (eq + 1));
            }
          json_array_append_new (all, json_pack ("{s:o, s:o}", "matrix", m, "plan", plan));
          continue;
        }
      if (matrix.n_axes)
        {
          cleanup_free char *label = strv_join (combo, " ");
          printf ("%smatrix %zu/%zu: %s\n\n", i ? "\n" : "", i + 1, n, label);
        }
      char *text = as_json ? json_dumps (plan, JSON_INDENT (2) | JSON_PRESERVE_ORDER)
                           : ib_plan_text (plan);
      json_decref (plan);
      if (text == NULL)
        return ib_error_set (err, ENOMEM, "plan: JSON output");
      fputs (text, stdout);
      if (as_json)
        fputc ('\n', stdout);
      free (text);
    }
  if (all)
    {
      char *text = json_dumps (all, JSON_INDENT (2) | JSON_PRESERVE_ORDER);
      json_decref (all);
      if (text == NULL)
        return ib_error_set (err, ENOMEM, "plan: JSON output");
      puts (text);
      free (text);
    }
  return 0;
}

/* --creds USER:PASSWORD for the registry of `ref_string` (skopeo's option). */
static int
set_creds (const char *cmd, const char *creds, const char *ref_string, ib_error_t *err)
{
  const char *colon = strchr (creds, ':');
  if (colon == NULL || colon == creds)
    {
      fprintf (stderr, "imgbuild: %s: --creds takes USER:PASSWORD\nTry 'imgbuild --help'.\n", cmd);
      exit (2);
    }
  ib_ref_t ref;
  if (ib_ref_parse (ref_string, &ref, err) < 0)
    return ib_error_prefix (err, "%s", cmd);
  cleanup_free char *user = xstrndup (creds, (size_t) (colon - creds));
  ib_auth_set_override (ref.registry, user, colon + 1);
  ib_ref_free (&ref);
  return 0;
}

static int
cmd_pull (int argc, char **argv, ib_error_t *err)
{
  static const struct option opts[] = { { "platform", required_argument, NULL, 'p' },
                                        { "creds", required_argument, NULL, 'c' },
                                        REGISTRY_OPTIONS, { NULL, 0, NULL, 0 } };
  cleanup_free char *os = NULL, *arch = NULL, *variant = NULL;
  const char *creds = NULL;
  int c;
  optind = 0; /* 0: GNU getopt re-reads the optstring's ordering flag */
  while ((c = getopt_long (argc, argv, "+", opts, NULL)) != -1)
    {
      if (c == '?')
        exit (2);
      if (registry_option (c, optarg))
        continue;
      if (c == 'c')
        {
          creds = optarg;
          continue;
        }
      ib_error_t perr = NULL;
      free (os), free (arch), free (variant);
      os = arch = variant = NULL;
      if (c != 'p' || ib_platform_parse (optarg, &os, &arch, &variant, &perr) < 0)
        {
          ib_error_free (&perr);
          usage_error ("pull: --platform takes OS/ARCH[/VARIANT], got '%s'", optarg ? optarg : "");
        }
    }
  if (argc - optind != 1)
    usage_error ("%s", "pull: expected one image reference");
  if (creds && set_creds ("pull", creds, argv[optind], err) < 0)
    return -1;
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
  static const struct option opts[] = { { "tag", required_argument, NULL, 't' },
                                        { "creds", required_argument, NULL, 'c' },
                                        REGISTRY_OPTIONS, { NULL, 0, NULL, 0 } };
  cleanup_strv char **tags = NULL, **dsts = NULL;
  const char *creds = NULL;
  int c;
  optind = 0; /* 0: GNU getopt re-reads the optstring's ordering flag */
  while ((c = getopt_long (argc, argv, "t:", opts, NULL)) != -1)
    {
      if (c == 't')
        ib_strv_push (&tags, optarg);
      else if (c == 'c')
        creds = optarg;
      else if (!registry_option (c, optarg))
        exit (2);
    }
  if (argc - optind < 2)
    usage_error ("%s", "push: expected SRC DST [DST...]");
  for (int i = optind + 1; i < argc; i++)
    ib_strv_push (&dsts, argv[i]);
  /* -t TAG: DST's repository with another tag; -t REF (with a '/'): another reference */
  for (char **t = tags; t && *t; t++)
    {
      if (strchr (*t, '/'))
        {
          ib_strv_push (&dsts, *t);
          continue;
        }
      ib_ref_t ref;
      if (ib_ref_parse (argv[optind + 1], &ref, err) < 0)
        return ib_error_prefix (err, "push");
      cleanup_free char *full = xasprintf ("%s/%s:%s", ref.registry, ref.repository, *t);
      ib_ref_free (&ref);
      ib_strv_push (&dsts, full);
    }
  for (char **d = dsts; creds && d && *d; d++)
    if (set_creds ("push", creds, *d, err) < 0)
      return -1;
  ib_store_t *store = NULL;
  if (open_store (&store, err) < 0)
    return -1;
  int r = ib_push_refs (store, argv[optind], dsts, err);
  ib_store_close (store);
  return r;
}

/* The registry part of a login argument ("host[:port][/path]", scheme
 * already dropped), checked for characters a host cannot have. */
static char *
login_host (const char *cmd, const char *key)
{
  char *host = xstrndup (key, strcspn (key, "/"));
  bool ok = *host != '\0';
  for (const char *p = host; *p && ok; p++)
    ok = isalnum ((unsigned char) *p) || strchr (".-:[]_", *p);
  if (!ok)
    {
      fprintf (stderr, "imgbuild: %s: '%s' is not a registry (HOST[:PORT])\nTry 'imgbuild --help'.\n",
               cmd, key);
      exit (2);
    }
  return host;
}

/* One line from stdin without its newline; NULL at EOF.  Echo off while
 * reading when `secret` (stdin is a terminal). */
static char *
prompt_line (const char *prompt, bool secret)
{
  struct termios old, quiet;
  bool restore = false;
  /* Echo off before the prompt shows, and without flushing: what is typed
   * (or written by a program) once the prompt is seen must not be lost. */
  if (secret && tcgetattr (STDIN_FILENO, &old) == 0)
    {
      quiet = old;
      quiet.c_lflag &= ~(tcflag_t) ECHO;
      quiet.c_lflag |= ECHONL;
      restore = tcsetattr (STDIN_FILENO, TCSANOW, &quiet) == 0;
    }
  fputs (prompt, stderr);
  fflush (stderr);
  char *line = NULL;
  size_t cap = 0;
  ssize_t n = getline (&line, &cap, stdin);
  if (restore)
    tcsetattr (STDIN_FILENO, TCSANOW, &old);
  if (n < 0)
    {
      free (line);
      return NULL;
    }
  while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
    line[--n] = '\0';
  return line;
}

static void
free_secret (char *s)
{
  if (s)
    {
      explicit_bzero (s, strlen (s));
      free (s);
    }
}

static int
cmd_login (int argc, char **argv, ib_error_t *err)
{
  static const struct option opts[] = {
    { "username", required_argument, NULL, 'u' }, { "password", required_argument, NULL, 'p' },
    { "password-stdin", no_argument, NULL, 'S' }, { "authfile", required_argument, NULL, 'A' },
    { NULL, 0, NULL, 0 },
  };
  const char *user_arg = NULL, *pass_arg = NULL;
  bool pass_stdin = false;
  int c;
  optind = 0;
  while ((c = getopt_long (argc, argv, "+u:p:", opts, NULL)) != -1)
    switch (c)
      {
      case 'u': user_arg = optarg; break;
      case 'p': pass_arg = optarg; break;
      case 'S': pass_stdin = true; break;
      case 'A': ib_auth_set_authfile (optarg); break;
      default: exit (2);
      }
  if (argc - optind != 1)
    usage_error ("%s", "login: expected one REGISTRY");
  if (pass_arg && pass_stdin)
    usage_error ("%s", "login: -p and --password-stdin exclude each other");
  cleanup_free char *key = ib_auth_normalize_key (argv[optind]);
  cleanup_free char *host = login_host ("login", key);
  char *user = xstrdup (user_arg), *pass = xstrdup (pass_arg);
  bool tty = isatty (STDIN_FILENO);
  if (pass_stdin)
    {
      if (user == NULL)
        usage_error ("%s", "login: --password-stdin needs -u USER");
      ib_buf_t b = { 0 };
      char buf[4096];
      size_t n;
      while ((n = fread (buf, 1, sizeof buf, stdin)) > 0)
        ib_buf_append (&b, buf, n);
      explicit_bzero (buf, sizeof buf);
      while (b.len > 0 && (b.data[b.len - 1] == '\n' || b.data[b.len - 1] == '\r'))
        b.data[--b.len] = '\0';
      pass = ib_buf_steal (&b);
    }
  else if (pass == NULL || user == NULL)
    {
      if (!tty)
        usage_error ("%s", "login: stdin is not a terminal: give -u USER with -p PASSWORD or "
                     "--password-stdin");
      if (user == NULL)
        user = prompt_line ("Username: ", false);
      if (pass == NULL && user)
        pass = prompt_line ("Password: ", true);
    }
  else
    ib_warn ("login: a password on the command line is visible to other users; prefer "
             "--password-stdin");
  int ret = 0;
  if (user == NULL || *user == '\0' || strchr (user, ':'))
    ret = ib_error_set (err, EINVAL, "login %s: the user name is empty or contains ':'", host);
  else if (pass == NULL || *pass == '\0')
    ret = ib_error_set (err, EINVAL, "login %s: the password is empty", host);
  cleanup_free char *file = NULL;
  if (ret == 0 && (file = ib_auth_default_file (err)) == NULL)
    ret = -1;
  if (ret == 0 && ib_registry_login (host, user, pass, err) < 0)
    ret = ib_error_prefix (err, "login %s", host);
  if (ret == 0 && ib_auth_store (file, key, user, pass, err) < 0)
    ret = ib_error_prefix (err, "login %s", host);
  free_secret (user);
  free_secret (pass);
  if (ret == 0)
    printf ("Login Succeeded (credentials for %s stored in %s)\n", key, file);
  return ret;
}

static int
cmd_logout (int argc, char **argv, ib_error_t *err)
{
  static const struct option opts[] = { { "all", no_argument, NULL, 'a' },
                                        { "authfile", required_argument, NULL, 'A' },
                                        { NULL, 0, NULL, 0 } };
  bool all = false;
  int c;
  optind = 0;
  while ((c = getopt_long (argc, argv, "+a", opts, NULL)) != -1)
    switch (c)
      {
      case 'a': all = true; break;
      case 'A': ib_auth_set_authfile (optarg); break;
      default: exit (2);
      }
  if (all ? argc - optind != 0 : argc - optind != 1)
    usage_error ("%s", "logout: expected one REGISTRY, or --all");
  cleanup_free char *key = all ? NULL : ib_auth_normalize_key (argv[optind]);
  if (key)
    free (login_host ("logout", key));
  cleanup_free char *file = ib_auth_default_file (err);
  if (file == NULL)
    return -1;
  bool removed;
  if (ib_auth_remove (file, key, &removed, err) < 0)
    return ib_error_prefix (err, "logout %s", all ? "--all" : key);
  if (all)
    printf ("Removed all credentials from %s\n", file);
  else if (removed)
    printf ("Removed credentials for %s from %s\n", key, file);
  else
    return ib_error_set (err, ENOENT, "logout %s: not logged in (no credentials for it in %s)", key,
                         file);
  return 0;
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
  int r = image_rootfs (store, argv[1], argv[2], false, NULL, err);
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
cmd_prune (int argc, char **argv, ib_error_t *err)
{
  static const struct option opts[] = {
    { "cache", no_argument, NULL, 'c' },
    { "all", no_argument, NULL, 'a' },
    { NULL, 0, NULL, 0 },
  };
  ib_prune_opts_t po = { 0 };
  int c;
  optind = 0;
  while ((c = getopt_long (argc, argv, "+a", opts, NULL)) != -1)
    switch (c)
      {
      case 'c': po.cache = true; break;
      case 'a': po.all = true; break;
      default: exit (2);
      }
  if (optind < argc)
    usage_error ("prune: unexpected argument '%s'", argv[optind]);
  /* Files of map-mode builds belong to subordinate ids: remove them from
   * inside the user namespace, as the build made them. */
  if (enter_userns (err) < 0)
    return -1;
  cleanup_free char *def = store_dir ? NULL : ib_store_default_root ();
  ib_store_t *store = NULL;
  if (ib_store_open (store_dir ? store_dir : def, &store, err) < 0)
    return -1;
  ib_error_t busy = NULL;
  if (ib_store_gc_lock (store, true, false, &busy) < 0)
    {
      ib_error_free (&busy);
      ib_info ("prune: waiting for the builds, pulls and runs using %s to end", store->root);
      if (ib_store_gc_lock (store, true, true, err) < 0)
        {
          ib_store_close (store);
          return -1;
        }
    }
  ib_prune_result_t res;
  int r = ib_prune (store, &po, &res, err);
  char a[24], b[24], cc[24], d[24], t[24];
  ib_human_size (res.tmp_bytes, a);
  ib_human_size (res.cache_bytes, b);
  ib_human_size (res.snapshot_bytes, cc);
  ib_human_size (res.blob_bytes, d);
  ib_human_size (res.tmp_bytes + res.cache_bytes + res.snapshot_bytes + res.blob_bytes, t);
  printf ("temporary files:      %zu removed, %s\n", res.tmp_entries, a);
  printf ("build cache:          %zu step records, %zu cache mounts removed, %s\n",
          res.cache_records, res.cache_mounts, b);
  printf ("snapshots:            %zu removed, %s\n", res.snapshots, cc);
  printf ("unreferenced blobs:   %zu removed, %s\n", res.blobs, d);
  printf ("Total reclaimed space: %s\n", t);
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

static int
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
    { NULL, 0, NULL, 0 },
  };
  bool want_tty = false;
  cleanup_strv char **extra_env = NULL, **devices = NULL, **cdi_dirs = NULL;
  const char *workdir = NULL, *rootfs = NULL, *network = NULL, *user = NULL, *entrypoint = NULL;
  ib_mount_spec_t *specs = NULL;
  size_t n_specs = 0;
  int c;
  optind = 0; /* 0: GNU getopt re-reads the optstring's ordering flag */
  while ((c = getopt_long (argc, argv, "+e:w:u:v:ti", opts, NULL)) != -1)
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
        case 'D': ib_strv_push (&devices, optarg); continue;
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
        default: exit (2);
        }
      if (pr < 0)
        usage_error ("run: %s", perr->msg);
      if (ms.type == IB_MSPEC_BIND && ms.from)
        usage_error ("run: --mount=%s: from= is for recipes; give a host path as source=", optarg);
      if (ms.type == IB_MSPEC_BIND && ms.source == NULL)
        usage_error ("run: --mount=%s: source= is missing", optarg);
      specs = xrealloc (specs, sizeof *specs * (n_specs + 1));
      specs[n_specs++] = ms;
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
  if (want_tty && !isatty (STDIN_FILENO))
    usage_error ("%s", "run: -t: stdin is not a terminal");
  /* on a terminal the command gets a pty of its own, relayed: the
   * caller's terminal never reaches the sandbox */
  bool tty = want_tty || (isatty (STDIN_FILENO) && isatty (STDOUT_FILENO));
  if (user)
    {
      /* a numeric uid or gid is checked before anything is pulled:
       * 0 to 4294967294, never wrapped into another id */
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

  ib_store_t *store = NULL;
  if (enter_userns (err) < 0 || open_store (&store, err) < 0)
    return -1;
  ib_rootfs_allow_overlay (true); /* the image's tree: an overlay on its snapshot */
  int ret = -1;
  json_t *config = NULL;
  cleanup_free char *tmp_rootfs = NULL;
  cleanup_strv char **cmd = NULL, **env = NULL, **mount_strings = NULL;
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
    if (entrypoint == NULL)
      ib_strv_push (&cmd, json_string_value (e));
  /* --entrypoint CMD (docker run's): replaces the image's, and its Cmd */
  if (entrypoint && *entrypoint)
    ib_strv_push (&cmd, entrypoint);
  if (optind < argc)
    for (int k = optind; k < argc; k++)
      ib_strv_push (&cmd, argv[k]);
  else if (entrypoint == NULL)
    json_array_foreach (json_object_get (cc, "Cmd"), i, e)
      ib_strv_push (&cmd, json_string_value (e));
  if (ib_strv_len (cmd) == 0)
    {
      ib_error_set (err, EINVAL, "run: no command given and the image has no Entrypoint or Cmd");
      goto out;
    }
  /* Mounts: host paths for binds (Docker's semantics: writable unless ro),
   * the store's cache directories, tmpfs. */
  ib_mount_t *mounts = xmalloc (sizeof *mounts * (n_specs + 1));
  for (size_t k = 0; k < n_specs; k++)
    {
      ib_mount_spec_t *ms = &specs[k];
      if (ms->target[0] != '/')
        {
          /* as docker run: no working directory to resolve it against yet */
          ib_error_set (err, EINVAL, "run: mount target %s: must be an absolute path", ms->target);
          free (mounts);
          goto out;
        }
      mounts[k] = (ib_mount_t){ .target = ms->target, .readonly = ms->readonly };
      if (ms->type == IB_MSPEC_TMPFS)
        {
          mounts[k].type = IB_MOUNT_TMPFS;
          char *data = ms->size ? xasprintf ("size=%s,mode=1777", ms->size) : xstrdup ("mode=1777");
          ib_strv_push (&mount_strings, data);
          mounts[k].data = mount_strings[ib_strv_len (mount_strings) - 1];
          free (data);
        }
      else if (ms->type == IB_MSPEC_BIND)
        {
          char *real = realpath (ms->source, NULL);
          if (real == NULL)
            {
              ib_error_sys (err, errno, "run: mount source %s", ms->source);
              free (mounts);
              goto out;
            }
          ib_strv_push (&mount_strings, real);
          free (real);
          mounts[k].type = IB_MOUNT_BIND;
          mounts[k].source = mount_strings[ib_strv_len (mount_strings) - 1];
        }
      else
        {
          char *dir = NULL;
          bool created = false;
          if (ib_store_cache_mount_dir (store, ms->id ? ms->id : ms->target, true, &dir, &created,
                                        err)
              < 0)
            {
              free (mounts);
              goto out;
            }
          if (created && (chmod (dir, ms->mode) < 0 || chown (dir, ms->uid, ms->gid) < 0))
            ib_warn ("cache directory %s: %s", dir, strerror (errno));
          ib_strv_push (&mount_strings, dir);
          free (dir);
          mounts[k].type = IB_MOUNT_BIND;
          mounts[k].source = mount_strings[ib_strv_len (mount_strings) - 1];
        }
    }
  /* Devices: CDI specs or NVIDIA discovery (rootfs/gpu.h). */
  ib_gpu_edits_t gpu = { 0 };
  if (devices)
    {
      ib_gpu_opts_t go = { .spec_dirs = cdi_dirs };
      for (char **x = env; x && *x; x++)
        if (ib_str_has_prefix (*x, "NVIDIA_VISIBLE_DEVICES="))
          go.visible_devices = strchr (*x, '=') + 1;
        else if (ib_str_has_prefix (*x, "NVIDIA_DRIVER_CAPABILITIES="))
          go.capabilities = strchr (*x, '=') + 1;
      for (char **d = devices; *d; d++)
        if (ib_gpu_resolve (*d, &go, &gpu, err) < 0)
          {
            ib_gpu_edits_free (&gpu);
            free (mounts);
            goto out;
          }
      mounts = xrealloc (mounts, sizeof *mounts * (n_specs + gpu.n_mounts + 1));
      for (size_t k = 0; k < gpu.n_mounts; k++)
        mounts[n_specs + k] = gpu.mounts[k];
      for (char **kv = gpu.env; kv && *kv; kv++)
        ib_strv_push (&env, *kv);
    }
  uid_t uid = 0;
  gid_t gid = 0;
  const char *u = user ? user : json_string_value (json_object_get (cc, "User"));
  if (u && *u && ib_lookup_user (rootfs, u, &uid, &gid, err) < 0)
    {
      ib_gpu_edits_free (&gpu);
      free (mounts);
      goto out;
    }
  ib_env_default_home (&env, rootfs, uid); /* as runc: HOME from the image's /etc/passwd */
  const char *wd = workdir ? workdir : json_string_value (json_object_get (cc, "WorkingDir"));
  ib_sandbox_opts_t so = { .rootfs = rootfs, .argv = cmd, .env = env,
                           .cwd = wd && *wd ? wd : "/", .uid = uid, .gid = gid,
                           .network_none = network && strcmp (network, "none") == 0,
                           .keep_stdin = true, .tty = tty, .provide_etc_files = true,
                           .mounts = mounts, .n_mounts = n_specs + gpu.n_mounts,
                           .symlinks = gpu.symlinks, .n_symlinks = gpu.n_symlinks,
                           .ldconfig = gpu.ldconfig, .ldconfig_dirs = gpu.ldconfig_dirs };
  int sr = ib_sandbox_run (&so, exit_status, err);
  free (mounts);
  ib_gpu_edits_free (&gpu);
  if (sr < 0)
    goto out;
  ret = 0;
out:
  for (size_t k = 0; k < n_specs; k++)
    ib_mount_spec_clear (&specs[k]);
  free (specs);
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

/* imgbuild wheel audit FILE.whl [--json] | wheel repair FILE.whl --plat TAG [-w DIR]
 * [--exclude PATTERN]... */
static int
cmd_wheel (int argc, char **argv, ib_error_t *err)
{
  if (argc < 2)
    usage_error ("%s", "wheel: expected audit or repair");
  const char *sub = argv[1];
  bool audit = strcmp (sub, "audit") == 0 || strcmp (sub, "show") == 0;
  if (!audit && strcmp (sub, "repair") != 0)
    usage_error ("wheel: unknown subcommand '%s' (audit or repair)", sub);
  enum { OPT_JSON = 0x200, OPT_PLAT, OPT_EXCLUDE, OPT_PATCHELF, OPT_ROOT };
  static const struct option opts[] = {
    { "json", no_argument, NULL, OPT_JSON },          { "plat", required_argument, NULL, OPT_PLAT },
    { "wheel-dir", required_argument, NULL, 'w' },    { "exclude", required_argument, NULL, OPT_EXCLUDE },
    { "patchelf", required_argument, NULL, OPT_PATCHELF }, { "root", required_argument, NULL, OPT_ROOT },
    { NULL, 0, NULL, 0 },
  };
  bool json = false;
  const char *plat = NULL, *dir = "wheelhouse", *patchelf = NULL, *root = NULL;
  cleanup_strv char **exclude = NULL;
  int c;
  optind = 0; /* 0: GNU getopt re-reads the optstring's ordering flag */
  while ((c = getopt_long (argc - 1, argv + 1, "w:", opts, NULL)) != -1)
    switch (c)
      {
      case OPT_JSON: json = true; break;
      case OPT_PLAT: plat = optarg; break;
      case 'w': dir = optarg; break;
      case OPT_EXCLUDE: ib_strv_push (&exclude, optarg); break;
      case OPT_PATCHELF: patchelf = optarg; break;
      case OPT_ROOT: root = optarg; break;
      default: usage_error ("%s", "wheel: bad option"); break;
      }
  if (optind + 2 != argc)
    usage_error ("wheel %s: expected one FILE.whl", sub);
  const char *file = argv[optind + 1];
  if (audit)
    {
      if (plat || exclude || patchelf)
        usage_error ("%s", "wheel audit: --plat, -w, --exclude and --patchelf are for repair");
      ib_wheel_t *w = NULL;
      ib_wheel_audit_t *a = NULL;
      if (ib_wheel_open (file, &w, err) < 0)
        return -1;
      ib_wheel_audit_opts_t ao = { .root = root };
      if (ib_wheel_audit (w, &ao, &a, err) < 0)
        {
          ib_wheel_close (w);
          return -1;
        }
      if (json)
        {
          json_t *j = ib_wheel_audit_json (a);
          json_dumpf (j, stdout, JSON_PRESERVE_ORDER);
          printf ("\n");
          json_decref (j);
        }
      else
        {
          cleanup_free char *text = ib_wheel_audit_show (a);
          fputs (text, stdout);
        }
      ib_wheel_audit_free (a);
      ib_wheel_close (w);
      return 0;
    }
  if (json)
    usage_error ("%s", "wheel repair: --json is for audit");
  if (!plat)
    usage_error ("%s", "wheel repair: --plat TAG is required (like manylinux_2_17_x86_64)");
  ib_wheel_repair_opts_t ro = { .plat = plat, .out_dir = dir, .exclude = exclude,
                                .patchelf = patchelf, .root = root };
  cleanup_free char *out = NULL;
  if (ib_wheel_repair (file, &ro, &out, err) < 0)
    return -1;
  printf ("%s\n", out);
  return 0;
}

/* imgbuild artifact push|pull (builder/artifact.h; docs/cli.md "Artifact
 * repository"). */
static int
cmd_artifact (int argc, char **argv, ib_error_t *err)
{
  enum
  {
    OPT_REPOSITORY = 0x200,
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
          if (registry_option (c, optarg))
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

int
main (int argc, char **argv)
{
  static const struct option opts[] = {
    { "store", required_argument, NULL, 's' }, { "userns", required_argument, NULL, 'U' },
    { "quiet", no_argument, NULL, 'q' },       { "verbose", no_argument, NULL, 'v' },
    { "help", no_argument, NULL, 'h' },        { "version", no_argument, NULL, 'V' },
    { "progress", required_argument, NULL, 'P' }, REGISTRY_OPTIONS,
    { NULL, 0, NULL, 0 },
  };
  const char *env_chunk = getenv ("IMGBUILD_PUSH_CHUNK_SIZE");
  if (env_chunk && *env_chunk)
    set_chunk_size ("IMGBUILD_PUSH_CHUNK_SIZE", env_chunk);
  const char *env_userns = getenv ("IMGBUILD_USERNS");
  if (env_userns && *env_userns && parse_userns (env_userns, &userns_mode) < 0)
    usage_error ("IMGBUILD_USERNS: expected auto, root, map or single, got '%s'", env_userns);
  ib_progress_mode_t progress = IB_PROGRESS_AUTO;
  bool progress_given = false, quiet = false;
  const char *env_progress = getenv ("IMGBUILD_PROGRESS");
  if (env_progress && *env_progress && ib_progress_parse_mode (env_progress, &progress) < 0)
    usage_error ("IMGBUILD_PROGRESS: expected auto, tty, plain, json or quiet, got '%s'",
                 env_progress);
  int c;
  while ((c = getopt_long (argc, argv, "+qvh", opts, NULL)) != -1)
    switch (c)
      {
      case 's': store_dir = optarg; break;
      case 'U':
        if (parse_userns (optarg, &userns_mode) < 0)
          usage_error ("--userns: expected auto, root, map or single, got '%s'", optarg);
        break;
      case 'P':
        if (ib_progress_parse_mode (optarg, &progress) < 0)
          usage_error ("--progress: expected auto, tty, plain, json or quiet, got '%s'", optarg);
        progress_given = true;
        break;
      case 'q': ib_verbosity = 0; quiet = true; break;
      case 'v': ib_verbosity = 2; break;
      case 'h': fputs (usage_text, stdout); return 0;
      case 'V': printf ("imgbuild %s\n", IMGBUILD_VERSION); return 0;
      default:
        if (registry_option (c, optarg))
          break;
        fputs (usage_text, stderr);
        return 2;
      }
  if (optind >= argc)
    {
      fputs (usage_text, stderr);
      return 2;
    }
  /* -q silences progress too unless --progress says otherwise; -v's debug
   * lines would tear TTY redraws apart, so auto means plain with -v. */
  if (quiet && !progress_given)
    progress = IB_PROGRESS_QUIET;
  if (progress == IB_PROGRESS_AUTO && ib_verbosity >= 2)
    progress = IB_PROGRESS_PLAIN;
  ib_progress_set_mode (progress);
  const char *cmd = argv[optind];
  int sub_argc = argc - optind;
  char **sub_argv = argv + optind;
  ib_error_t err = NULL;
  int r = -1, status = 0;
  if (strcmp (cmd, "build") == 0)
    r = cmd_build (sub_argc, sub_argv, &err);
  else if (strcmp (cmd, "plan") == 0)
    r = cmd_plan (sub_argc, sub_argv, &err);
  else if (strcmp (cmd, "pull") == 0)
    r = cmd_pull (sub_argc, sub_argv, &err);
  else if (strcmp (cmd, "push") == 0)
    r = cmd_push (sub_argc, sub_argv, &err);
  else if (strcmp (cmd, "login") == 0)
    r = cmd_login (sub_argc, sub_argv, &err);
  else if (strcmp (cmd, "logout") == 0)
    r = cmd_logout (sub_argc, sub_argv, &err);
  else if (strcmp (cmd, "unpack") == 0)
    r = cmd_unpack (sub_argc, sub_argv, &err);
  else if (strcmp (cmd, "inspect") == 0)
    r = cmd_inspect (sub_argc, sub_argv, &err);
  else if (strcmp (cmd, "images") == 0)
    r = cmd_images (sub_argc, sub_argv, &err);
  else if (strcmp (cmd, "prune") == 0)
    r = cmd_prune (sub_argc, sub_argv, &err);
  else if (strcmp (cmd, "wheel") == 0)
    r = cmd_wheel (sub_argc, sub_argv, &err);
  else if (strcmp (cmd, "artifact") == 0)
    r = cmd_artifact (sub_argc, sub_argv, &err);
  else if (strcmp (cmd, "version") == 0)
    {
      printf ("imgbuild %s\n", IMGBUILD_VERSION);
      return 0;
    }
  else if (strcmp (cmd, "run") == 0)
    {
      status = EXIT_OWN_FAILURE;
      r = cmd_run (sub_argc, sub_argv, &status, &err);
      if (r < 0)
        {
          ib_error_report (&err);
          /* Docker's codes: 126 cannot be run, 127 not found; else 125 */
          return status == 126 || status == 127 ? status : EXIT_OWN_FAILURE;
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
