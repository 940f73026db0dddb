/* imgbuild build (and `imgbuild RECIPE`), imgbuild plan, and the --matrix
 * runner of both: options to ib_build_opts_t, then builder/build.h. */
#include "builder/engine/build.h"
#include "builder/cli/cli.h"
#include "builder/cli/cells.h"
#include "builder/cli/slurm.h"
#include "rootfs/gpu.h"
#include "builder/engine/matrix.h"
#include "builder/engine/recipe.h"
#include "builder/engine/plan.h"
#include "builder/wheel/wheel.h"
#include "common/util.h"
#include "oci/ref.h"
#include "rootfs/overlay.h"

#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <unistd.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* OUTPUT type=local's wheel checks: the wheel wing's, for the engine
 * (builder/engine/build.h, ib_wheel_hooks_t). */
static const ib_wheel_hooks_t wheel_hooks = {
  .policy_check = ib_wheel_policy_check,
  .check_required = ib_wheel_check_required,
  .check_copied = ib_wheel_check_copied,
  .check_one = ib_wheel_check_one,
};

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

/* --platform OS/ARCH[/VARIANT] of build and plan (build: a comma-separated
 * list of them, `list`): `arg` when it parses, else a usage error. */
static const char *
platform_option (const char *arg, bool list)
{
  cleanup_free char *copy = xstrdup (arg);
  char *save = NULL;
  size_t n = 0;
  for (char *one = strtok_r (copy, ",", &save); one; one = strtok_r (NULL, ",", &save), n++)
    {
      cleanup_free char *os = NULL, *arch = NULL, *variant = NULL;
      while (*one == ' ')
        one++;
      if (ib_platform_parse (one, &os, &arch, &variant, NULL) < 0)
        usage_error (list && strchr (arg, ',') ? "--platform: expected OS/ARCH[/VARIANT][,OS/ARCH[/VARIANT]...], "
                            "got '%s'"
                          : "--platform: expected OS/ARCH[/VARIANT], got '%s'",
                     arg);
    }
  if (n == 0 || (n > 1 && !list))
    usage_error ("--platform: expected OS/ARCH[/VARIANT] (one platform), got '%s'", arg);
  return arg;
}

/* One combination's lines of the matrix summary: its outputs as the plan
 * names them (needed stages, ARGs expanded), the wheels now in each
 * type=local dest, the images tagged with their manifest digests (the
 * store's tag; for a registry name the store lacks, the target stage's
 * image, `r`). */
static void
matrix_summary_outputs (ib_store_t *store, const ib_build_opts_t *bo,
                        const ib_build_result_t *r, char ***lines)
{
  json_t *plan = NULL;
  ib_error_t e = NULL;
  if (ib_build_plan (bo, &plan, &e) < 0)
    {
      ib_strv_push (lines, e->msg);
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
      cleanup_free char *line = NULL;
      if (type && strcmp (type, "local") == 0 && dest)
        {
          cleanup_strv char **wheels = NULL;
          list_wheels (dest, &wheels);
          if (wheels == NULL)
            line = xasprintf ("  local %s (no wheels)", dest);
          for (char **w = wheels; w && *w; w++)
            {
              cleanup_free char *wl = xasprintf ("  wheel %s", *w);
              ib_strv_push (lines, wl);
            }
        }
      else if (type && (strcmp (type, "image") == 0 || strcmp (type, "registry") == 0) && name)
        {
          ib_descriptor_t d = { 0 };
          ib_error_t re = NULL;
          if (ib_store_resolve (store, name, &d, &re) == 0)
            line = xasprintf ("  image %s %s", name, d.digest);
          else
            line = xasprintf ("  image %s %s", name, r && *r->manifest_digest ? r->manifest_digest
                                                                               : "(digest unknown)");
          ib_error_free (&re);
          free (d.media_type);
        }
      else if (type && dest)
        line = xasprintf ("  %s %s", type, dest);
      if (line)
        ib_strv_push (lines, line);
    }
  json_decref (plan);
}

/* Build combination `i` of `m` (base's options, its --build-args, the
 * combination's values) in `store`, timed, and fill *cell (cells.h) with
 * its outcome and its summary lines.  0, or -1 with *err set. */
int
matrix_build_cell (ib_store_t *store, const ib_build_opts_t *base, const ib_matrix_t *m,
                   size_t i, matrix_cell_t *cell, ib_error_t *err)
{
  size_t n = ib_matrix_count (m);
  cleanup_strv char **combo = ib_matrix_combination (m, i);
  cleanup_strv char **args = ib_strv_dup (base->build_args);
  for (char **c = combo; *c; c++)
    ib_strv_push (&args, *c);
  cell->index = i;
  cell->n = n;
  cell->label = strv_join (combo, " ");
  ib_build_opts_t bo = *base;
  bo.build_args = args;
  ib_build_result_t result = { 0 };
  if (bo.result == NULL)
    bo.result = &result;
  struct timespec t0, t1;
  clock_gettime (CLOCK_MONOTONIC, &t0);
  int r = ib_build (store, &bo, err);
  clock_gettime (CLOCK_MONOTONIC, &t1);
  cell->seconds = (double) (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
  if (r < 0)
    {
      const char *msg = err && *err ? (*err)->msg : "failed";
      const char *nl = strchr (msg, '\n');
      cleanup_free char *first = xstrndup (msg, nl ? (size_t) (nl - msg) : strlen (msg));
      cell->state = xstrdup ("FAILED");
      cell->why = ib_str_printable (first, true); /* no escapes */
    }
  else
    {
      cell->state = xstrdup ("ok");
      matrix_summary_outputs (store, &bo, bo.result, &cell->lines);
    }
  ib_build_result_clear (&result);
  return r;
}

/* imgbuild build --matrix: ib_build once per combination (matrix.h's
 * order), each with the --build-args plus the combination's values, all
 * in one store (so steps that do not read a matrix ARG are cache hits
 * after the first combination).  A failed combination is reported and
 * the next one built (--fail-fast: none after it); at the end a summary
 * on stdout lists per combination its outcome and time, the wheels in
 * each type=local dest and the images tagged.  Fails when any
 * combination did. */
static int
build_matrix (ib_store_t *store, const ib_build_opts_t *base, const ib_matrix_t *m,
              bool fail_fast, ib_error_t *err)
{
  size_t n = ib_matrix_count (m), failed = 0;
  matrix_cell_t *cells = xmalloc (n * sizeof *cells); /* zeroed */
  for (size_t i = 0; i < n; i++)
    {
      cleanup_strv char **combo = ib_matrix_combination (m, i);
      cleanup_free char *label = strv_join (combo, " ");
      ib_info ("==> matrix %zu/%zu: %s", i + 1, n, label);
      ib_error_t e = NULL;
      if (matrix_build_cell (store, base, m, i, &cells[i], &e) < 0)
        {
          failed++;
          ib_error_prefix (&e, "matrix %s", label);
          ib_error_report (&e);
          if (fail_fast)
            {
              for (size_t k = i + 1; k < n; k++)
                {
                  cleanup_strv char **rest = ib_matrix_combination (m, k);
                  cells[k] = (matrix_cell_t){ .index = k, .n = n, .label = strv_join (rest, " "),
                                              .state = xstrdup ("not built"),
                                              .why = xstrdup ("--fail-fast"), .seconds = -1 };
                }
              break;
            }
        }
    }
  cells_print_summary (stdout, cells, n);
  for (size_t i = 0; i < n; i++)
    cell_clear (&cells[i]);
  free (cells);
  if (failed)
    return ib_error_set (err, EIO, "matrix: %zu of %zu combinations failed", failed, n);
  return 0;
}

/* --build-arg NAME=VALUE or NAME (the caller's value): a NAME is there. */
static const char *
build_arg_option (const char *arg)
{
  if (*arg == '\0' || *arg == '=')
    usage_error ("--build-arg '%s': expected NAME=VALUE, or NAME for the variable's value here",
                 arg);
  return arg;
}

/* The recipe and the context of `build` and `plan`, from -f FILE and the
 * operand, as docker build and buildah bud take them:
 *  - the operand is a directory: the build context; the recipe is -f FILE
 *    (as given: relative to the current directory), else the context's
 *    Dockerfile, else its Containerfile;
 *  - the operand is a file: the recipe (imgbuild's form: the context is
 *    its directory, or --context DIR); -f with it is a usage error;
 *  - no operand: -f FILE is the recipe (its directory the context);
 *  - -f -: the recipe is read from stdin (*text, caller frees) and named
 *    "stdin" in messages; it needs a context operand.
 * A missing operand or recipe is a usage error naming it. */
static void
recipe_and_context (const char *cmd, const char *file, const char *operand, const char **recipe,
                    const char **context, char **text)
{
  struct stat st;
  *text = NULL;
  *recipe = file;
  if (operand && stat (operand, &st) == 0 && S_ISDIR (st.st_mode))
    {
      *context = operand;
      if (file == NULL)
        {
          static char *found; /* lives as long as the command */
          const char *names[] = { "Dockerfile", "Containerfile" };
          for (size_t i = 0; i < 2 && *recipe == NULL; i++)
            {
              free (found);
              found = ib_path_join (operand, names[i]);
              if (access (found, F_OK) == 0)
                *recipe = found;
            }
          if (*recipe == NULL)
            {
              cleanup_free char *m = xasprintf ("%s: no Dockerfile or Containerfile in %s (give "
                                                "-f FILE)", cmd, operand);
              usage_error ("%s", m);
            }
        }
    }
  else if (operand && file)
    {
      cleanup_free char *m = xasprintf ("%s: the build context %s %s", cmd, operand,
                                        access (operand, F_OK) == 0 ? "is not a directory"
                                                                    : "does not exist");
      usage_error ("%s", m);
    }
  else if (operand && access (operand, F_OK) < 0)
    {
      cleanup_free char *m = xasprintf ("%s: %s: no such recipe file or context directory", cmd,
                                        operand);
      usage_error ("%s", m);
    }
  else if (operand)
    *recipe = operand;
  if (*recipe == NULL)
    {
      cleanup_free char *m = xasprintf ("%s: missing RECIPE (a file, or a context directory "
                                        "with a Dockerfile)", cmd);
      usage_error ("%s", m);
    }
  if (strcmp (*recipe, "-") == 0)
    {
      if (*context == NULL)
        {
          cleanup_free char *m = xasprintf ("%s: -f - reads the recipe from stdin: give the "
                                            "context directory too", cmd);
          usage_error ("%s", m);
        }
      ib_error_t e = NULL;
      if (ib_read_file_max ("/dev/stdin", IB_RECIPE_MAX, "recipe", text, NULL, &e) < 0)
        {
          cleanup_free char *m = xasprintf ("%s: -f -: %s", cmd, e->msg);
          usage_error ("%s", m);
        }
      *recipe = "stdin";
    }
}

/* --secret and --ssh (builder/engine/secrets.h), --network: long options only */
enum
{
  OPT_SECRET = 0x3a0,
  OPT_SSH,
  OPT_NETWORK,
  OPT_PULL,
  OPT_LABEL,
  OPT_BUILD_CONTEXT,
  OPT_ALLOW,
};

/* --secret VALUE or --ssh VALUE into *s; a malformed one is a usage error. */
static void
secret_option (ib_secrets_t *s, int c, const char *arg)
{
  ib_error_t e = NULL;
  if ((c == OPT_SECRET ? ib_secrets_add_secret (s, arg, &e) : ib_secrets_add_ssh (s, arg, &e))
      < 0)
    {
      cleanup_free char *m = xasprintf ("build: %s", e->msg);
      ib_error_free (&e);
      usage_error ("%s", m);
    }
}

/* --allow ENT[,ENT]: BuildKit's entitlements (buildx build --allow).
 * network.host lets a RUN --network=host have the host's network;
 * security.insecure is accepted, and changes nothing: imgbuild never runs
 * a step outside its sandbox (RUN --security=insecure stays refused). */
static void
allow_option (const char *arg, bool *network_host)
{
  cleanup_free char *copy = xstrdup (arg);
  char *save = NULL;
  for (char *e = strtok_r (copy, ",", &save); e; e = strtok_r (NULL, ",", &save))
    if (strcmp (e, "network.host") == 0)
      *network_host = true;
    else if (strcmp (e, "security.insecure") != 0)
      usage_error ("build: --allow %s: expected network.host or security.insecure", e);
}

/* build's long options without a letter (buildx's script outputs) */
enum
{
  OPT_PUSH = 0x3c0, /* clear of cli.h's 0x300 (SANDBOX_EXTRA_OPTIONS) and 0x3a0 */
  OPT_LOAD,
  OPT_IIDFILE,
  OPT_METADATA_FILE,
  OPT_SHARED_ONLY,
  OPT_SLURM,
  OPT_SLURM_OPT,
  OPT_SLURM_SCRIPT,
  OPT_SLURM_DIR,
  OPT_SLURM_STORE,
  OPT_SLURM_TASK,
  OPT_SLURM_CHECKPOINT,
  OPT_DETACH,
};

/* A --cache-to spec as the --cache-from that reads it (dest= -> src=);
 * caller frees. */
static char *
cache_src_spec (const char *to)
{
  char *from = xstrdup (to);
  char *dest = strstr (from, "dest=");
  if (dest && (dest == from || dest[-1] == ','))
    memcpy (dest, "src=", 4), memmove (dest + 4, dest + 5, strlen (dest + 5) + 1);
  return from;
}

static void
slurm_opts_clear (slurm_opts_t *so)
{
  ib_strv_free (so->sbatch_opts);
  so->sbatch_opts = NULL;
}

/* How many GPUs a --slurm build asks Slurm for: the most distinct
 * nvidia.com/gpu devices one RUN names (build --device plus its own
 * --device flags); "all" counts one. */
static int
gpus_wanted (char *const *devices, const char *recipe, const char *text)
{
  int base = 0, most = 0;
  for (char *const *d = devices; d && *d; d++)
    base += ib_str_has_prefix (*d, "nvidia.com/gpu=");
  ib_recipe_t *r = NULL;
  cleanup_free char *data = NULL;
  if (text == NULL && ib_read_file_max (recipe, IB_RECIPE_MAX, "recipe", &data, NULL, NULL) == 0)
    text = data;
  if (text && ib_recipe_parse (recipe, text, &r, NULL) == 0)
    for (size_t s = 0; s < r->n_stages; s++)
      for (size_t i = 0; i < r->stages[s].n_instrs; i++)
        {
          int k = 0;
          for (char **f = r->stages[s].instrs[i].flags; *f; f++)
            k += ib_str_has_prefix (*f, "--device=nvidia.com/gpu=");
          most = k > most ? k : most;
        }
  ib_recipe_free (r);
  return base + most;
}

int
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
    { "secret", required_argument, NULL, OPT_SECRET }, { "ssh", required_argument, NULL, OPT_SSH },
    { "network", required_argument, NULL, OPT_NETWORK },
    { "pull", optional_argument, NULL, OPT_PULL },
    { "label", required_argument, NULL, OPT_LABEL },
    { "build-context", required_argument, NULL, OPT_BUILD_CONTEXT },
    { "allow", required_argument, NULL, OPT_ALLOW },
    SANDBOX_EXTRA_OPTIONS,
    { "push", no_argument, NULL, OPT_PUSH },       { "load", no_argument, NULL, OPT_LOAD },
    { "iidfile", required_argument, NULL, OPT_IIDFILE },
    { "metadata-file", required_argument, NULL, OPT_METADATA_FILE },
    { "shared-only", no_argument, NULL, OPT_SHARED_ONLY },
    { "slurm", no_argument, NULL, OPT_SLURM },
    { "slurm-opt", required_argument, NULL, OPT_SLURM_OPT },
    { "slurm-script", required_argument, NULL, OPT_SLURM_SCRIPT },
    { "slurm-dir", required_argument, NULL, OPT_SLURM_DIR },
    { "slurm-store", required_argument, NULL, OPT_SLURM_STORE },
    { "slurm-task", required_argument, NULL, OPT_SLURM_TASK },
    { "slurm-checkpoint", required_argument, NULL, OPT_SLURM_CHECKPOINT },
    { "detach", no_argument, NULL, OPT_DETACH },
    REGISTRY_OPTIONS,                              GLOBAL_OPTIONS,
    { NULL, 0, NULL, 0 },
  };
  cleanup_strv char **args = NULL, **outputs = NULL, **tags = NULL, **devices = NULL,
                    **cdi_dirs = NULL, **no_cache_filter = NULL, **cache_from = NULL,
                    **cache_to = NULL, **annotations = NULL, **labels = NULL,
                    **contexts = NULL;
  bool no_cache = false, keep_on_failure = false, debug_shell = false, fail_fast = false,
       network_none = false, allow_network_host = false;
  ib_pull_policy_t pull = IB_PULL_MISSING;
  __attribute__ ((cleanup (sandbox_extras_clear))) sandbox_extras_t extras = { 0 };
  const char *target = NULL, *context = NULL, *file = NULL, *platform = NULL;
  __attribute__ ((cleanup (ib_matrix_clear))) ib_matrix_t matrix = { 0 };
  __attribute__ ((cleanup (ib_secrets_clear))) ib_secrets_t secrets = { 0 };
  __attribute__ ((cleanup (slurm_opts_clear))) slurm_opts_t slurm = { 0 };
  bool jobs_given = false;
  ib_compression_t compression = IB_COMPRESSION_GZIP;
  int level = -1;
  bool reproducible = false, push = false, load = false, shared_only = false;
  const char *iidfile = NULL, *metadata_file = NULL;
  char *end;
  int c;
  optind = 0; /* 0: GNU getopt re-reads the optstring's ordering flag */
  int jobs = 1;
  while ((c = getopt_long (argc, argv, "t:o:f:j:q", opts, NULL)) != -1)
    switch (c)
      {
      case 'a': ib_strv_push (&args, build_arg_option (optarg)); break;
      case 'M': { ib_error_t me = NULL; matrix_usage_error (ib_matrix_add (&matrix, optarg, &me), &me); } break;
      case 'X': fail_fast = true; break;
      case OPT_NETWORK:
        /* docker build --network: host and default are the sandbox's default */
        if (strcmp (optarg, "none") != 0 && strcmp (optarg, "host") != 0
            && strcmp (optarg, "default") != 0)
          usage_error ("build: --network takes host, none or default, got '%s'", optarg);
        network_none = strcmp (optarg, "none") == 0;
        break;
      case OPT_ALLOW:
        allow_option (optarg, &allow_network_host);
        break;
      case OPT_BUILD_CONTEXT:
        if (strchr (optarg, '=') == NULL || *optarg == '=')
          usage_error ("build: --build-context %s: expected NAME=DIR or NAME=docker-image://REF",
                       optarg);
        ib_strv_push (&contexts, optarg);
        break;
      case OPT_LABEL:
        if (strchr (optarg, '=') == NULL || *optarg == '=')
          usage_error ("build: --label %s: expected KEY=VALUE", optarg);
        ib_strv_push (&labels, optarg);
        break;
      case OPT_PULL:
        /* --pull alone is always (buildx, podman); true/false as buildx's bool */
        if (optarg == NULL || !strcmp (optarg, "always") || !strcmp (optarg, "true"))
          pull = IB_PULL_ALWAYS;
        else if (!strcmp (optarg, "missing") || !strcmp (optarg, "false"))
          pull = IB_PULL_MISSING;
        else if (!strcmp (optarg, "never"))
          pull = IB_PULL_NEVER;
        else
          usage_error ("build: --pull takes always, missing or never, got '%s'", optarg);
        break;
      case OPT_SECRET: case OPT_SSH: secret_option (&secrets, c, optarg); break;
      case 'T': target = optarg; break;
      case 'o':
        {
          cleanup_free char *spec = build_output_spec (optarg);
          ib_strv_push (&outputs, spec);
          break;
        }
      case OPT_PUSH: push = true; break;
      case OPT_LOAD: load = true; break;
      case OPT_IIDFILE: iidfile = optarg; break;
      case OPT_METADATA_FILE: metadata_file = optarg; break;
      case OPT_SHARED_ONLY: shared_only = true; break;
      case OPT_SLURM: slurm.submit = true; break;
      case OPT_SLURM_OPT: ib_strv_push (&slurm.sbatch_opts, optarg); break;
      case OPT_SLURM_SCRIPT: slurm.script = optarg; break;
      case OPT_SLURM_DIR: slurm.dir = optarg; break;
      case OPT_SLURM_STORE: slurm.store = optarg; break;
      case OPT_SLURM_TASK: slurm.task_dir = optarg; break;
      case OPT_SLURM_CHECKPOINT:
        {
          char *end = NULL;
          errno = 0;
          double s = strtod (optarg, &end);
          if (errno || end == optarg || *end || !(s >= 0 && s <= 1e9))
            usage_error ("--slurm-checkpoint: expected seconds (0 or more), got '%s'", optarg);
          slurm.checkpoint_s = s;
          slurm.checkpoint_given = true;
          break;
        }
      case OPT_DETACH: slurm.detach = true; break;
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
        jobs_given = true;
        break;
      case 'A':
        /* buildx spells it [TYPE:]KEY=VALUE; manifest is the only type here */
        ib_strv_push (&annotations, ib_str_has_prefix (optarg, "manifest:") ? optarg + 9 : optarg);
        break;
      case 'H': debug_shell = true; break;
      case 'P': platform = platform_option (optarg, true); break;
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
        if (!sandbox_extra_option (c, optarg, &extras, "build") && !registry_option (c, optarg)
            && !global_option (c, optarg, "build"))
          exit (2);
      }
  if (optind + 1 < argc)
    usage_error ("build: unexpected argument '%s'", argv[optind + 1]);
  const char *recipe = NULL;
  cleanup_free char *recipe_text = NULL;
  recipe_and_context ("build", file, optind < argc ? argv[optind] : NULL, &recipe, &context,
                      &recipe_text);
  /* a bad -t is the command line's fault: said before anything is built */
  for (char **t = tags; t && *t; t++)
    {
      ib_ref_t ref;
      ib_error_t te = NULL;
      if (ib_ref_parse (*t, &ref, &te) < 0)
        {
          cleanup_free char *m = xasprintf ("build: -t %s: %s", *t, te->msg);
          ib_error_free (&te);
          usage_error ("%s", m);
        }
      ib_ref_free (&ref);
    }
  {
    ib_error_t me = NULL;
    matrix_usage_error (ib_matrix_check_args (&matrix, args, &me), &me);
  }
  if (fail_fast && matrix.n_axes == 0)
    usage_error ("%s", "build: --fail-fast goes with --matrix");
  if (shared_only && matrix.n_axes == 0)
    usage_error ("%s", "build: --shared-only goes with --matrix");
  if (matrix.n_axes && (iidfile || metadata_file))
    usage_error ("build: %s describes one image; --matrix builds one per combination",
                 iidfile ? "--iidfile" : "--metadata-file");
  /* buildx: --push is --output type=registry, named by the -t references */
  if (push && tags == NULL)
    usage_error ("%s", "build: --push needs -t REF (the names to push)");
  if (push)
    ib_strv_push (&outputs, "type=registry");
  /* --load: no daemon to load into; the image is in the store already */
  if (load)
    ib_info ("--load: the image is in imgbuild's store already (imgbuild run REF); "
             "imgbuild save or -o type=docker,dest=FILE write a tarball for docker load");
  if (!ib_compression_level_ok (compression, level))
    {
      static const char *const ranges[] = { "0-9 for gzip", "1-19 for zstd", "none for none" };
      fprintf (stderr, "imgbuild: --compression-level %d: out of range (%s)\nTry 'imgbuild --help'.\n",
               level, ranges[compression]);
      exit (2);
    }
  if (!slurm.submit && (slurm.sbatch_opts || slurm.script || slurm.dir || slurm.detach
                        || ((slurm.store || slurm.checkpoint_given) && !slurm.task_dir)))
    usage_error ("build: %s goes with --slurm",
                 slurm.detach ? "--detach" : slurm.script ? "--slurm-script"
                 : slurm.dir ? "--slurm-dir" : slurm.store ? "--slurm-store"
                 : slurm.checkpoint_given ? "--slurm-checkpoint" : "--slurm-opt");
  if (slurm.submit && slurm.task_dir)
    usage_error ("%s", "build: --slurm submits, --slurm-task runs in a submitted task");
  if (slurm.submit && recipe_text)
    usage_error ("%s", "build: --slurm: the tasks cannot read the recipe from this stdin "
                       "(-f -): give a file on a shared file system");
  if (slurm.submit && (debug_shell || keep_on_failure))
    usage_error ("build: %s needs a terminal here; a Slurm task has none",
                 debug_shell ? "--debug-shell" : "--keep-on-failure");
  if (slurm.submit)
    {
      /* Slurm runs it: the recipe is checked here first, so a typo costs
       * no queue wait */
      json_t *plan = NULL;
      ib_build_opts_t po = { .recipe_path = recipe, .recipe_text = recipe_text,
                             .context_dir = context, .build_args = args, .target = target,
                             .platform = platform };
      cleanup_strv char **first = ib_strv_dup (args);
      cleanup_strv char **combo = ib_matrix_combination (&matrix, 0);
      for (char **c = combo; *c; c++)
        ib_strv_push (&first, *c);
      po.build_args = first;
      if (ib_build_plan (&po, &plan, err) < 0)
        return ib_error_prefix (err, "build --slurm");
      json_decref (plan);
      slurm.jobs = jobs_given ? jobs : 0;
      return slurm_submit (&slurm, cli_argv, &matrix, fail_fast, cache_to != NULL,
                           gpus_wanted (devices, recipe, recipe_text), err);
    }
  cleanup_free char *task_store = NULL;
  bool each_stage = false;
  if (slurm.task_dir)
    {
      /* a task of a --slurm job: its node's store, the cache never fatal,
       * only the GPUs Slurm gave */
      task_store = slurm_task_store (&slurm, cli_store_dir);
      cli_store_dir = task_store;
      /* the cache: what the --cache-to names (the seed's export) and, for
       * a cell, its own, which it exports to after each stage (a requeued
       * task resumes from it; cells never write over each other) */
      if (cache_from == NULL)
        for (char **c = cache_to; c && *c; c++)
          {
            cleanup_free char *from = cache_src_spec (*c);
            ib_strv_push (&cache_from, from);
          }
      const char *task = getenv ("SLURM_ARRAY_TASK_ID");
      if (!shared_only && task)
        {
          cleanup_free char *cell = xasprintf ("cell%s", task);
          for (char **c = cache_to; c && *c; c++)
            {
              char *own = slurm_cell_cache_spec (*c, cell);
              if (own == NULL)
                continue;
              cleanup_free char *from = cache_src_spec (own);
              ib_strv_push (&cache_from, from);
              free (*c);
              *c = own;
            }
          each_stage = true;
        }
      for (char **c = cache_to; c && *c; c++)
        if (strstr (*c, "ignore-error=") == NULL)
          {
            char *with = xasprintf ("%s,ignore-error=true", *c);
            free (*c);
            *c = with;
          }
      const char *gpus = getenv ("SLURM_JOB_GPUS") ? getenv ("SLURM_JOB_GPUS")
                                                    : getenv ("SLURM_STEP_GPUS");
      if (gpus)
        ib_gpu_restrict (gpus);
    }
  /* as BuildKit: the files and sockets must be there when the build starts */
  if (ib_secrets_check (&secrets, err) < 0)
    return ib_error_prefix (err, "build");
  /* The build enters the user namespace itself, when it first needs a
   * rootfs or the network (build.h). */
  ib_store_t *store = NULL;
  if (open_store (&store, err) < 0)
    return -1;
  ib_rootfs_allow_overlay (true); /* stage trees: overlays on the snapshots, not copies */
  ib_build_opts_t bo = { .userns = cli_userns_mode, .recipe_path = recipe,
                         .recipe_text = recipe_text, .context_dir = context, .build_args = args,
                         .target = target, .tags = tags, .outputs = outputs,
                         .compression = compression, .compression_level = level,
                         .reproducible = reproducible, .devices = devices,
                         .cdi_spec_dirs = cdi_dirs, .no_cache = no_cache,
                         .no_cache_filter = no_cache_filter, .platform = platform, .keep_on_failure = keep_on_failure,
                         .debug_shell = debug_shell, .cache_from = cache_from,
                         .cache_to = cache_to, .annotations = annotations, .jobs = jobs,
                         .wheels = &wheel_hooks };
  bo.secrets = &secrets;
  bo.cache_to_each_stage = each_stage;
  bo.cache_to_after_s = slurm.checkpoint_given ? slurm.checkpoint_s : SLURM_CHECKPOINT_S;
  bo.network_none = network_none;
  bo.allow_network_host = allow_network_host;
  bo.pull = pull;
  bo.labels = labels;
  bo.build_contexts = contexts;
  bo.add_hosts = extras.add_hosts;
  bo.shm_size = extras.shm_size;
  bo.rlimits = extras.rlimits;
  bo.n_rlimits = extras.n_rlimits;
  ib_build_result_t result = { 0 };
  if (matrix.n_axes == 0)
    bo.result = &result;
  /* --shared-only: one build, with the first combination's values, of
   * what no combination changes (build.h) */
  cleanup_strv char **axes = NULL, **first = NULL;
  if (shared_only)
    {
      for (size_t i = 0; i < matrix.n_axes; i++)
        ib_strv_push (&axes, matrix.axes[i].name);
      first = ib_strv_dup (args);
      cleanup_strv char **combo = ib_matrix_combination (&matrix, 0);
      for (char **c = combo; *c; c++)
        ib_strv_push (&first, *c);
      bo.build_args = first;
      bo.shared_only = axes;
    }
  int r = slurm.task_dir                  ? slurm_task_run (&slurm, store, &bo, &matrix, err)
          : matrix.n_axes && !shared_only ? build_matrix (store, &bo, &matrix, fail_fast, err)
                                          : ib_build (store, &bo, err);
  ib_store_close (store);
  if (r == 0 && matrix.n_axes == 0 && !slurm.task_dir)
    {
      r = write_build_result (&result, iidfile, metadata_file, err);
      /* docker build -q: the image ID alone on stdout (unless an output
       * went there: -o -, dest=-) */
      bool stdout_used = false;
      for (char **o = outputs; o && *o; o++)
        {
          const char *d = strstr (*o, "dest=-");
          stdout_used |= d && (d[6] == '\0' || d[6] == ',' || d[6] == '"');
        }
      if (r == 0 && cli_quiet () && !stdout_used)
        {
          printf ("%s\n", result.config_digest);
          fflush (stdout);
        }
    }
  ib_build_result_clear (&result);
  return r;
}

/* imgbuild plan: the build's plan (build.h, plan.h); no store, no namespace. */
int
cmd_plan (int argc, char **argv, ib_error_t *err)
{
  static const struct option opts[] = {
    { "build-arg", required_argument, NULL, 'a' }, { "target", required_argument, NULL, 'T' },
    { "platform", required_argument, NULL, 'P' },  { "json", no_argument, NULL, 'J' },
    { "matrix", required_argument, NULL, 'M' },    { "file", required_argument, NULL, 'f' },
    GLOBAL_OPTIONS,                                { NULL, 0, NULL, 0 },
  };
  cleanup_strv char **args = NULL;
  __attribute__ ((cleanup (ib_matrix_clear))) ib_matrix_t matrix = { 0 };
  const char *target = NULL, *platform = NULL, *file = NULL;
  bool as_json = false;
  int c;
  optind = 0;
  while ((c = getopt_long (argc, argv, "f:q", opts, NULL)) != -1)
    switch (c)
      {
      case 'a': ib_strv_push (&args, build_arg_option (optarg)); break;
      case 'M': { ib_error_t me = NULL; matrix_usage_error (ib_matrix_add (&matrix, optarg, &me), &me); } break;
      case 'T': target = optarg; break;
      case 'J': as_json = true; break;
      case 'f': file = optarg; break;
      case 'P': platform = platform_option (optarg, false); break;
      default:
        if (!global_option (c, optarg, "plan"))
          exit (2);
      }
  if (optind + 1 < argc)
    usage_error ("plan: unexpected argument '%s'", argv[optind + 1]);
  const char *recipe = NULL, *context = NULL;
  cleanup_free char *recipe_text = NULL;
  recipe_and_context ("plan", file, optind < argc ? argv[optind] : NULL, &recipe, &context,
                      &recipe_text);
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
      ib_build_opts_t bo = { .recipe_path = recipe, .recipe_text = recipe_text,
                             .context_dir = context, .build_args = cargs, .target = target,
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
