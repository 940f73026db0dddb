/* imgbuild — daemonless, rootless container image builder.  The CLI wing's
 * entry: global options, the usage text, dispatch to the commands (one file
 * each in builder/cli/, over the library), and the helpers they share
 * (cli.h).  The CLI is the only place that calls exit(). */
#include "builder/cli/cli.h"
#include "builder/cli/slurm.h"
#include "common/proctitle.h"
#include "common/util.h"
#include "oci/auth.h"
#include "oci/regconf.h"
#include "oci/registry.h"

#include <getopt.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef IMGBUILD_VERSION
#define IMGBUILD_VERSION "0.1.0"
#endif

const char *cli_store_dir;
char **cli_argv;
ib_userns_mode_t cli_userns_mode = IB_USERNS_AUTO;

static const char usage_text[] =
  "Usage: imgbuild [GLOBAL OPTIONS] COMMAND [ARGS]\n"
  "\n"
  "Commands:\n"
  "  [build] RECIPE [--build-arg K=V] [--matrix K=V1,V2...] [--fail-fast] [--target STAGE]\n"
  "          [--output SPEC] [-t REF] [--context DIR]\n"
  "          [--compression gzip|zstd|none] [--compression-level N] [--reproducible]\n"
  "          [--device CDI-NAME] [--cdi-spec-dir DIR] [--no-cache] [--no-cache-filter STAGE]\n"
  "          [--keep-on-failure] [--debug-shell] [--cache-from SPEC] [--cache-to SPEC]\n"
  "          [--annotation KEY=VALUE] [-j N] [--platform OS/ARCH[/VARIANT][,...]]\n"
  "          [--secret id=ID[,src=FILE|,env=VAR]] [--ssh default|ID[=SOCKET]]\n"
  "          [--network host|none|default] [--allow network.host|security.insecure]...\n"
  "          [--pull[=always|missing|never]]\n"
  "          [--add-host NAME:IP] [--shm-size SIZE] [--ulimit NAME=SOFT[:HARD]]\n"
  "          [--label KEY=VALUE] [--build-context NAME=DIR|NAME=docker-image://REF]\n"
  "          [-o DIR|-|SPEC] [--push] [--load] [--iidfile FILE] [--metadata-file FILE]\n"
  "          [--shared-only] [--slurm [--slurm-opt ARG]... [--slurm-script FILE]\n"
  "           [--slurm-dir DIR] [--slurm-store PATTERN] [--slurm-checkpoint SECONDS]\n"
  "           [--detach]]\n"
  "                         build a recipe (a Dockerfile with OUTPUT); --matrix: once\n"
  "                         per combination of the values, then a summary; --slurm: as\n"
  "                         a Slurm array job, a task per combination; -q: only\n"
  "                         the image ID on stdout\n"
  "  plan RECIPE [--build-arg K=V] [--matrix K=V1,V2...] [--target STAGE]\n"
  "       [--platform OS/ARCH[/VARIANT]] [--json]\n"
  "                         print what a build would do (stages, steps after ARG\n"
  "                         expansion, cache key inputs, outputs) without running it\n"
  "  matrix status JOBID [--slurm-dir DIR] [--follow]\n"
  "                         the summary of a build --slurm job (--detach) so far;\n"
  "                         --follow: until it ends\n"
  "  pull REF [--platform OS/ARCH[/VARIANT]] [--authfile FILE] [--creds USER:PASS]\n"
  "           [--unpack]    pull an image into the store (--unpack: its tree too)\n"
  "  push SRC DST [DST...] [-t TAG] [--chunk-size SIZE] [--authfile FILE] [--creds USER:PASS]\n"
  "                         push a stored image to registries\n"
  "  login REGISTRY [-u USER] [-p PASS | --password-stdin] [--authfile FILE]\n"
  "                         check credentials with the registry and store them\n"
  "  logout (REGISTRY | --all) [--authfile FILE]\n"
  "                         remove stored credentials\n"
  "  unpack REF DIR         unpack an image's rootfs into DIR\n"
  "  run [-e K=V] [--env-file F] [-w DIR] [-u USER] [--entrypoint CMD] [--network host|none] [-v SRC:DST[:ro]]\n"
  "      [--mount type=bind|cache|tmpfs|secret|ssh,...] [--tmpfs DST[:size=N]] [--device CDI-NAME]\n"
  "      [--cdi-spec-dir DIR] [--secret id=ID,...] [--ssh default|ID[=SOCKET]]\n"
  "      [--add-host NAME:IP] [--shm-size SIZE] [--ulimit NAME=SOFT[:HARD]]\n"
  "      (REF | --rootfs DIR) [-- CMD...]\n"
  "                         run a command in the sandbox; exits with its status\n"
  "  inspect REF            print the manifest and config as JSON\n"
  "  images [-n]            list stored images; -n, --noheading: no header line\n"
  "  tag SOURCE TARGET...   give a stored image more names\n"
  "  rmi NAME...            remove names from the store (blobs go at the next prune)\n"
  "  save [-o FILE] [--format docker-archive|oci-archive|oci-dir] NAME\n"
  "                         write a stored image as an archive (docker save)\n"
  "  load [-i FILE]         read an archive or OCI layout into the store (docker load)\n"
  "  prune [--cache] [--all] [--keep-storage SIZE]\n"
  "                         remove leftovers of dead builds, blobs no tag or cache\n"
  "                         record names, unused snapshots; --cache: the build cache\n"
  "                         too; --all: also every snapshot; --keep-storage: the\n"
  "                         least recently used cache records until the store fits\n"
  "  wheel audit FILE.whl [--json] [--root DIR]\n"
  "                         verify a wheel (PEP 427) and print its manylinux audit\n"
  "                         (like auditwheel show); exit 1 when it does not verify\n"
  "  wheel repair FILE.whl --plat TAG [-w DIR] [--exclude PATTERN]... [--root DIR]\n"
  "                         graft external libraries into the wheel and retag it\n"
  "                         (like auditwheel repair; needs patchelf)\n"
  "  artifact push --lib FILE --licenses FILE... [--dependencies FILE...] [ARTIFACT OPTIONS]\n"
  "                         store a library build with its licenses and dependencies\n"
  "  artifact pull [--destination DIR | DIR] [ARTIFACT OPTIONS]\n"
  "                         fetch one into DIR (default: the current directory)\n"
  "  artifact --push|--pull ...\n"
  "                         the same in MXNet CD's tool's form (--libmxnet FILE too)\n"
  "         ARTIFACT OPTIONS: --repository s3://BUCKET[/PREFIX] | REGISTRY/REPOSITORY\n"
  "                         (env IMGBUILD_ARTIFACT_REPOSITORY), --bucket NAME (env\n"
  "                         ARTIFACT_REPOSITORY_BUCKET), --s3-endpoint URL, --git-sha SHA,\n"
  "                         --os OS, --variant VARIANT, --libtype static|dynamic\n"
  "                         (or --static, --dynamic)\n"
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

void
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
bool
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

/* The global options' state: applied (ib_verbosity, the progress mode)
 * after main's own parse and again after each one a command's parse
 * meets. */
static ib_progress_mode_t progress = IB_PROGRESS_AUTO;
static bool progress_given, quiet;

bool
cli_quiet (void)
{
  return quiet;
}

static void
apply_globals (void)
{
  /* -q silences progress too unless --progress says otherwise; -v's debug
   * lines would tear TTY redraws apart, so auto means plain with -v. */
  ib_progress_mode_t m = progress;
  if (quiet && !progress_given)
    m = IB_PROGRESS_QUIET;
  if (m == IB_PROGRESS_AUTO && ib_verbosity >= 2)
    m = IB_PROGRESS_PLAIN;
  ib_progress_set_mode (m);
}

/* The lines of usage_text's command list that are about `cmd` (a block
 * starts at a line with the command's name in column 3; "[build]" for
 * build), or false when there are none. */
static bool
print_command_usage (const char *cmd, FILE *f)
{
  const char *p = strstr (usage_text, "Commands:\n");
  const char *end = strstr (usage_text, "\nGlobal options:");
  bool found = false, in = false;
  size_t n = strlen (cmd);
  for (p = strchr (p, '\n') + 1; p < end;)
    {
      const char *nl = strchr (p, '\n');
      if (p[0] == ' ' && p[1] == ' ' && p[2] != ' ')
        {
          const char *name = p + 2;
          if (*name == '[')
            name++;
          in = strncmp (name, cmd, n) == 0 && (name[n] == ' ' || name[n] == ']' || name[n] == '\n');
          if (in && !found)
            fputs ("Usage: imgbuild [GLOBAL OPTIONS] COMMAND [ARGS]\n\n", f);
          found |= in;
        }
      if (in)
        fwrite (p, 1, (size_t) (nl - p + 1), f);
      p = nl + 1;
    }
  if (found)
    fprintf (f,
             "\nGlobal options (before or after the command) and registry options:\n"
             "'imgbuild --help'; 'man imgbuild-%s' (docs/cli.md) has the whole reference.\n",
             cmd);
  return found;
}

bool
global_option (int c, const char *arg, const char *cmd)
{
  switch (c)
    {
    case OPT_STORE: cli_store_dir = arg; return true;
    case OPT_USERNS:
      if (parse_userns (arg, &cli_userns_mode) < 0)
        usage_error ("--userns: expected auto, root, map or single, got '%s'", arg);
      return true;
    case OPT_PROGRESS:
      if (ib_progress_parse_mode (arg, &progress) < 0)
        usage_error ("--progress: expected auto, tty, plain, json or quiet, got '%s'", arg);
      progress_given = true;
      break;
    case 'q':
    case OPT_QUIET:
      ib_verbosity = 0;
      quiet = true;
      break;
    case OPT_VERBOSE: ib_verbosity = 2; break;
    case OPT_HELP:
      if (cmd == NULL || !print_command_usage (cmd, stdout))
        fputs (usage_text, stdout);
      exit (0);
    default: return false;
    }
  apply_globals ();
  return true;
}

int
command_operands (int argc, char **argv, const char *cmd)
{
  static const struct option opts[] = { GLOBAL_OPTIONS, { NULL, 0, NULL, 0 } };
  int c;
  optind = 0;
  while ((c = getopt_long (argc, argv, "q", opts, NULL)) != -1) /* options anywhere */
    if (!global_option (c, optarg, cmd))
      exit (2);
  return optind;
}

bool
store_exists (void)
{
  cleanup_free char *def = cli_store_dir ? NULL : ib_store_default_root ();
  struct stat st;
  return stat (cli_store_dir ? cli_store_dir : def, &st) == 0;
}

int
open_store (ib_store_t **store, ib_error_t *err)
{
  cleanup_free char *def = cli_store_dir ? NULL : ib_store_default_root ();
  if (ib_store_open (cli_store_dir ? cli_store_dir : def, store, err) < 0)
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

int
enter_userns (ib_error_t *err)
{
  /* The store's path is checked out here: inside, other users' files and
   * root's show as one overflow id (ib_store_vet). */
  cleanup_free char *def = cli_store_dir ? NULL : ib_store_default_root ();
  if (ib_store_vet (cli_store_dir ? cli_store_dir : def, err) < 0)
    return -1;
  ib_userns_mode_t got;
  if (ib_userns_enter (cli_userns_mode, &got, err) < 0)
    return ib_error_prefix (err, "enter user namespace");
  ib_debug ("user namespace mode: %s", ib_userns_mode_name (got));
  return 0;
}

int
main (int argc, char **argv)
{
  static const struct option opts[] = {
    GLOBAL_OPTIONS, { "version", no_argument, NULL, 'V' }, REGISTRY_OPTIONS, { NULL, 0, NULL, 0 },
  };
  ib_proctitle_init (argc, argv); /* the sandbox's pid 1 shows no host command line */
  cli_argv = ib_strv_dup (argv);
  const char *env_chunk = getenv ("IMGBUILD_PUSH_CHUNK_SIZE");
  if (env_chunk && *env_chunk)
    set_chunk_size ("IMGBUILD_PUSH_CHUNK_SIZE", env_chunk);
  const char *env_userns = getenv ("IMGBUILD_USERNS");
  if (env_userns && *env_userns && parse_userns (env_userns, &cli_userns_mode) < 0)
    usage_error ("IMGBUILD_USERNS: expected auto, root, map or single, got '%s'", env_userns);
  const char *env_progress = getenv ("IMGBUILD_PROGRESS");
  if (env_progress && *env_progress && ib_progress_parse_mode (env_progress, &progress) < 0)
    usage_error ("IMGBUILD_PROGRESS: expected auto, tty, plain, json or quiet, got '%s'",
                 env_progress);
  int c;
  while ((c = getopt_long (argc, argv, "+qvh", opts, NULL)) != -1)
    switch (c)
      {
      case 'v': ib_verbosity = 2; break;
      case 'h': fputs (usage_text, stdout); return 0;
      case 'V': printf ("imgbuild %s\n", IMGBUILD_VERSION); return 0;
      default:
        if (registry_option (c, optarg) || global_option (c, optarg, NULL))
          break;
        fputs (usage_text, stderr);
        return 2;
      }
  if (optind >= argc)
    {
      fputs (usage_text, stderr);
      return 2;
    }
  apply_globals ();
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
  else if (strcmp (cmd, "tag") == 0)
    r = cmd_tag (sub_argc, sub_argv, &err);
  else if (strcmp (cmd, "rmi") == 0)
    r = cmd_rmi (sub_argc, sub_argv, &err);
  else if (strcmp (cmd, "save") == 0)
    r = cmd_save (sub_argc, sub_argv, &err);
  else if (strcmp (cmd, "load") == 0)
    r = cmd_load (sub_argc, sub_argv, &err);
  else if (strcmp (cmd, "prune") == 0)
    r = cmd_prune (sub_argc, sub_argv, &err);
  else if (strcmp (cmd, "wheel") == 0)
    r = cmd_wheel (sub_argc, sub_argv, &err);
  else if (strcmp (cmd, "artifact") == 0)
    r = cmd_artifact (sub_argc, sub_argv, &err);
  else if (strcmp (cmd, "matrix") == 0)
    r = cmd_matrix (sub_argc, sub_argv, &err);
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
