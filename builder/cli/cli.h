/* The CLI wing (builder/cli/): what its files share.  Private to the
 * wing, never part of libimgbuild.a.
 *
 * main.c parses the global options into the variables below and calls one
 * cmd_* function per command; each takes the command's own argv (argv[0]
 * the command's name), parses it with getopt_long, calls the library, and
 * returns 0, or -1 with *err set (main reports it and exits 1).  A usage
 * error exits 2 at once, from usage_error() or getopt's own message; these
 * are the only exits outside main(). */
#ifndef IB_BUILDER_CLI_CLI_H
#define IB_BUILDER_CLI_CLI_H

#include "builder/engine/build.h"
#include "builder/engine/matrix.h"
#include "common/error.h"
#include "oci/store.h"
#include "rootfs/sandbox.h"
#include "rootfs/userns.h"

#include <jansson.h>
#include <stdbool.h>

/* imgbuild run: the exit status for a failure of imgbuild itself, as
 * podman's and docker's (126 and 127 keep their meaning). */
#define EXIT_OWN_FAILURE 125

/* The whole command line as main() got it (a copy: getopt permutes
 * argv), what `build --slurm` hands its tasks. */
extern char **cli_argv;

/* --store DIR (global option), or NULL: the default store
 * (ib_store_default_root). */
extern const char *cli_store_dir;
/* --userns MODE or env IMGBUILD_USERNS (global), IB_USERNS_AUTO by default. */
extern ib_userns_mode_t cli_userns_mode;

/* Print "imgbuild: MESSAGE" and "Try 'imgbuild --help'." on stderr and
 * exit 2.  `fmt` takes one %s, `arg` (the user's words: control characters
 * are shown as '?'). */
__attribute__ ((noreturn)) void usage_error (const char *fmt, const char *arg);

/* The registry options (docs/cli.md), accepted globally and after build,
 * pull, push and artifact: put REGISTRY_OPTIONS in a getopt_long option
 * table, and hand every option the command does not know to
 * registry_option(). */
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

/* Apply registry option `c` (getopt_long's value) with argument `arg` to
 * the process-wide registry settings (oci/regconf.h, oci/auth.h).  True
 * when `c` is one of REGISTRY_OPTIONS, false otherwise (the caller decides:
 * usually exit 2); a bad argument is a usage_error(). */
bool registry_option (int c, const char *arg);

/* The global options (docs/cli.md), accepted before the command and after
 * it (as docker's and podman's flags are): put GLOBAL_OPTIONS in a
 * command's getopt_long table and hand every option the command does not
 * know to global_option().  -q is the short --quiet in every command
 * ('q' in its optstring); -v is --verbose only before the command (run's
 * -v is a volume).  --help prints the command's usage and exits 0. */
enum
{
  OPT_STORE = 0x200,
  OPT_USERNS,
  OPT_PROGRESS,
  OPT_QUIET,
  OPT_VERBOSE,
  OPT_HELP,
};
#define GLOBAL_OPTIONS                                                                           \
  { "store", required_argument, NULL, OPT_STORE },                                              \
  { "userns", required_argument, NULL, OPT_USERNS },                                            \
  { "progress", required_argument, NULL, OPT_PROGRESS },                                        \
  { "quiet", no_argument, NULL, OPT_QUIET }, { "verbose", no_argument, NULL, OPT_VERBOSE },      \
  { "help", no_argument, NULL, OPT_HELP }

/* docker build's and docker run's --add-host, --shm-size and --ulimit,
 * for every RUN of a build or for the command of a run (the sandbox's
 * add_hosts, shm_size and rlimits: rootfs/sandbox.h).  Put
 * SANDBOX_EXTRA_OPTIONS in the getopt_long table and hand options to
 * sandbox_extra_option(): true when it was one of them; a bad value is a
 * usage_error() naming `cmd`.  sandbox_extras_clear frees. */
enum
{
  OPT_ADD_HOST = 0x300,
  OPT_SHM_SIZE,
  OPT_ULIMIT,
};
#define SANDBOX_EXTRA_OPTIONS                                                                    \
  { "add-host", required_argument, NULL, OPT_ADD_HOST },                                        \
  { "shm-size", required_argument, NULL, OPT_SHM_SIZE },                                        \
  { "ulimit", required_argument, NULL, OPT_ULIMIT }
typedef struct sandbox_extras
{
  char **add_hosts; /* "IP\tNAME" lines for /etc/hosts */
  uint64_t shm_size;
  ib_rlimit_t *rlimits;
  size_t n_rlimits;
} sandbox_extras_t;
bool sandbox_extra_option (int c, const char *arg, sandbox_extras_t *x, const char *cmd);
void sandbox_extras_clear (sandbox_extras_t *x);
/* build -o ARG as an output spec (OUTPUT syntax, caller frees), buildx's
 * shorthands expanded: "-" is type=tar,dest=- (the tree to stdout), an
 * ARG without '=' is type=local,dest=ARG; anything else as given. */
char *build_output_spec (const char *arg);

/* Write a build's result (builder/engine/build.h) for scripts: `iidfile`
 * (NULL: none) gets the image ID (the config digest, "sha256:HEX", no
 * newline, as docker build --iidfile); `metadata_file` (NULL: none)
 * buildx's --metadata-file JSON: containerimage.digest (the manifest's),
 * containerimage.config.digest, containerimage.descriptor {mediaType,
 * digest, size}, image.name (the names, comma-joined; absent without),
 * plus imgbuild.wheels [{path, sha256}].  Each written atomically;
 * errors name the option and file. */
int write_build_result (const ib_build_result_t *r, const char *iidfile,
                        const char *metadata_file, ib_error_t *err);

/* Whether -q/--quiet was given (before or after the command). */
bool cli_quiet (void);

/* Apply global option `c` (getopt_long's value; 'q' counts as --quiet)
 * with argument `arg`, for command `cmd` (its --help).  True when `c` is
 * one of GLOBAL_OPTIONS; a bad argument is a usage_error(). */
bool global_option (int c, const char *arg, const char *cmd);

/* For a command without options of its own (unpack, inspect, images):
 * parse argv for the global options and return the index of its first
 * operand (getopt's optind); an unknown option exits 2. */
int command_operands (int argc, char **argv, const char *cmd);

/* Whether the store (--store, else the default) exists; a listing of a
 * store that does not exist is empty, and must not create it. */
bool store_exists (void);

/* Open the store (cli_store_dir or the default) into *store and hold its
 * gc lock shared for the rest of the command, so that `imgbuild prune`
 * waits for it.  0, or -1 with *err set and *store NULL. */
int open_store (ib_store_t **store, ib_error_t *err);

/* Move the process into a new user namespace in cli_userns_mode
 * (ib_userns_enter); for the commands that touch a rootfs themselves
 * (run, unpack, prune), which open the store inside: its path is checked
 * first, out here (ib_store_vet; errors "open store DIR: ...").  0, or -1
 * with *err set ("enter user namespace: "). */
int enter_userns (ib_error_t *err);

/* Make `dest` the rootfs of image `name`: from the store's snapshots, or
 * pulled (unpacked while it downloads) when the store lacks the image.
 * `snapshot`: record the result as the image's snapshot for later runs and
 * builds (run does; unpack, an export, does not).  `config_out` (may be
 * NULL): the image config, the caller's to json_decref.  0, or -1 with *err
 * set.  (images.c; used by unpack and run.) */
int image_rootfs (ib_store_t *store, const char *name, const char *dest, bool snapshot,
                  json_t **config_out, ib_error_t *err);

/* build.c: combination `i` of matrix `m` built in `store` with `base`'s
 * options and its values, timed; *cell (cells.h) gets its outcome and
 * summary lines (the caller clears it).  0, or -1 with *err set.  Used by
 * the local --matrix and by a Slurm task (slurm.c). */
struct matrix_cell;
int matrix_build_cell (ib_store_t *store, const ib_build_opts_t *base, const ib_matrix_t *m,
                       size_t i, struct matrix_cell *cell, ib_error_t *err);

/* The commands, one function each (argv[0] is the command's name).
 * build.c: imgbuild build (and `imgbuild RECIPE`, argv[1] the recipe), plan */
int cmd_build (int argc, char **argv, ib_error_t *err);
int cmd_plan (int argc, char **argv, ib_error_t *err);
/* images.c */
int cmd_pull (int argc, char **argv, ib_error_t *err);
int cmd_push (int argc, char **argv, ib_error_t *err);
int cmd_unpack (int argc, char **argv, ib_error_t *err);
int cmd_inspect (int argc, char **argv, ib_error_t *err);
int cmd_prune (int argc, char **argv, ib_error_t *err);
int cmd_images (int argc, char **argv, ib_error_t *err);
/* manage.c: tag, rmi, save, load */
int cmd_tag (int argc, char **argv, ib_error_t *err);
int cmd_rmi (int argc, char **argv, ib_error_t *err);
int cmd_save (int argc, char **argv, ib_error_t *err);
int cmd_load (int argc, char **argv, ib_error_t *err);

/* An image location as skopeo names it (manage.c): "oci:DIR[:NAME]",
 * "oci-archive:FILE[:NAME]", "docker-archive:FILE[:NAME]", "docker://REF";
 * anything else is TRANSPORT_NONE (a reference).  *path (DIR, FILE, REF or
 * the whole argument) and *name (NAME or NULL) are the caller's to free.
 * An empty path is a usage_error(). */
typedef enum
{
  TRANSPORT_NONE,
  TRANSPORT_REGISTRY,
  TRANSPORT_OCI_DIR,
  TRANSPORT_OCI_ARCHIVE,
  TRANSPORT_DOCKER_ARCHIVE,
} transport_t;
transport_t transport_parse (const char *arg, char **path, char **name);
/* Load an archive or layout (ib_import) and print "Loaded image: NAME"
 * (or "Loaded image ID: DIGEST") per image; `name` may be NULL. */
int load_archive (ib_store_t *store, const char *path, const char *name, ib_error_t *err);
/* Write stored `image` to `dest` as transport `t` (OCI_DIR,
 * DOCKER_ARCHIVE, OCI_ARCHIVE), named `name` (NULL: the image's own). */
int save_archive (ib_store_t *store, const char *image, transport_t t, const char *dest,
                  const char *name, ib_error_t *err);
/* login.c */
int cmd_login (int argc, char **argv, ib_error_t *err);
int cmd_logout (int argc, char **argv, ib_error_t *err);
/* run.c: 0 with *exit_status the command's exit status (or 128+signal);
 * -1 with *err set, *exit_status then 126 (cannot be run) or 127 (not
 * found) when the sandbox could not exec the command, else as the caller
 * set it (main: EXIT_OWN_FAILURE). */
int cmd_run (int argc, char **argv, int *exit_status, ib_error_t *err);
/* wheel.c: wheel audit|repair */
int cmd_wheel (int argc, char **argv, ib_error_t *err);
/* artifact.c: artifact push|pull */
int cmd_artifact (int argc, char **argv, ib_error_t *err);

#endif
