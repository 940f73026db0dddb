/* builder/engine/build.h — the build engine: runs a recipe's stages and emits
 * their outputs.
 *
 * Stages built: the --target stage (default: the last one) plus every stage
 * with an OUTPUT instruction, and what those depend on (FROM <stage>,
 * COPY --from=<stage>).  Each stage gets a private rootfs in the store's
 * tmp/ (removed at the end); each RUN/COPY/WORKDIR that changes the rootfs
 * becomes a layer (rootfs/layer.h); config-only instructions add history
 * entries with empty_layer.  At the end of a stage its image (config +
 * manifest) is stored, then its OUTPUTs run in order.
 */
#ifndef IB_BUILDER_BUILD_H
#define IB_BUILDER_BUILD_H

/* Bounds on expanded text (docs/recipe.md, "Limits"), over those of one
 * word (builder/recipe.h, IB_EXPAND_MAX): the words an instruction expands
 * (ARG, ENV, LABEL pairs, COPY sources, flag values, COPY heredoc bodies)
 * add up to at most IB_EXPAND_INSTR_MAX bytes; those of a whole build (or
 * plan) to at most IB_EXPAND_BUILD_MAX.  Either fails the instruction with
 * EFBIG, "PATH:LINE: KEYWORD: the expanded words of ... add up to more than
 * N bytes". */
#define IB_EXPAND_INSTR_MAX ((size_t) 4 << 20)
#define IB_EXPAND_BUILD_MAX ((size_t) 64 << 20)

#include "common/error.h"
#include "builder/engine/secrets.h"
#include "oci/digest.h"
#include "oci/store.h"
#include "rootfs/layer.h"
#include "rootfs/sandbox.h"
#include "rootfs/userns.h"

#include <jansson.h>

/* What OUTPUT type=local does with the Python wheels it writes: the wheel
 * wing's hooks (builder/wheel/wheel.h: ib_wheel_policy_check,
 * ib_wheel_check_required, ib_wheel_check_copied, and ib_wheel_check_one
 * for COPY --repair, whose comments give the
 * contracts; `root` is the stage's root filesystem, `ld_library_path` the
 * directories of its image config's LD_LIBRARY_PATH resolved inside it),
 * passed in by the caller so that the engine does not depend
 * on that wing.  NULL (ib_build_opts_t.wheels): wheels are copied
 * unchecked, and require= / repair= are refused. */
typedef struct ib_wheel_hooks
{
  int (*policy_check) (const char *plat, ib_error_t *err);
  int (*check_required) (const char *src, const char *root, char *const *ld_library_path,
                         const char *plat, ib_error_t *err);
  int (*check_copied) (const char *src, const char *dest, const char *root,
                       char *const *ld_library_path, const char *repair,
                       const char *repair_exclude, ib_error_t *err);
  int (*check_one) (const char *path, const char *root, char *const *ld_library_path,
                    const char *repair, const char *repair_exclude, char **out_path,
                    ib_error_t *err);
} ib_wheel_hooks_t;

/* --pull (docker build's and podman build's): MISSING (the default) pulls
 * a FROM image the store lacks (or has for another platform); ALWAYS
 * pulls every FROM image again (a moved tag is seen); NEVER pulls none:
 * an image the store lacks is an error. */
typedef enum
{
  IB_PULL_MISSING = 0,
  IB_PULL_ALWAYS,
  IB_PULL_NEVER,
} ib_pull_policy_t;

/* What a build made, for scripts (`imgbuild build -q`, `--iidfile`,
 * `--metadata-file`): the target stage's image, as buildx reports the
 * final target's, and the wheels every OUTPUT type=local wrote.  Filled by
 * ib_build when it succeeds and ib_build_opts_t.result is set; the caller
 * owns the contents (ib_build_result_clear). */
typedef struct ib_build_result
{
  char manifest_digest[IB_DIGEST_LEN]; /* the image's manifest (an OCI image manifest) */
  int64_t manifest_size;               /* its bytes */
  char config_digest[IB_DIGEST_LEN];   /* its config: the image ID, as docker's */
  char **names;   /* the names the build tagged it with (-t, the target stage's OUTPUT
                   * type=image|registry), normalized ("docker.io/library/app:1"), in
                   * order, each once; NULL when none */
  json_t *wheels; /* [{"path": DEST/REL, "sha256": HEX}] of every wheel (*.whl) an OUTPUT
                   * type=local wrote, in any stage, in the order written (a repaired
                   * wheel under its new name) */
} ib_build_result_t;

/* Free what `r` holds (not `r`); a cleared result may be cleared again. */
void ib_build_result_clear (ib_build_result_t *r);

typedef struct ib_build_opts
{
  const char *recipe_path;   /* read for the recipe's text, unless recipe_text is set; in
                              * messages either way ("PATH:LINE: ...") */
  const char *recipe_text;   /* NULL, or the recipe itself (`-f -`: read from stdin by the
                              * CLI); then no RECIPE.dockerignore is looked for */
  const char *context_dir;   /* COPY sources; default: the recipe's directory */
  char **build_args;         /* "K=V", NULL-terminated; may be NULL */
  const char *target;        /* stage name or index; NULL = last stage */
  char **tags;               /* -t REF: tag the target stage's image */
  char **outputs;            /* --output SPEC for the target stage (OUTPUT syntax) */
  ib_compression_t compression; /* of the layers written (default gzip) */
  int compression_level;     /* -1: the compression's default */
  bool reproducible;         /* SOURCE_DATE_EPOCH defaults to 0 (else: the current time for
                              * `created`, file mtimes kept) */
  char **devices;            /* --device NAME: CDI devices for every RUN (rootfs/gpu.h);
                              * RUN --device adds its own */
  char **cdi_spec_dirs;      /* --cdi-spec-dir: NULL = /etc/cdi, /var/run/cdi */
  ib_userns_mode_t userns;   /* requested identity mode (--userns): the build enters the
                              * user namespace (ib_userns_enter) when it first needs a
                              * rootfs or the network, so a rebuild that only reads its
                              * cache never pays for it */
  bool no_cache;             /* --no-cache: run every step (results are still recorded) */
  int jobs;                  /* -j N: stages built at once (0 or 1: one after the other) */
  char **annotations;        /* --annotation KEY=VALUE: in the manifest of every image the
                              * build stores (image-spec annotations) */
  char *const *build_contexts; /* --build-context NAME=VALUE (buildx's named contexts): VALUE
                              * docker-image://REF (FROM NAME and COPY --from=NAME take REF)
                              * or a directory (COPY --from=NAME copies from it, as from
                              * the build context: files 0:0 unless --chown) */
  char *const *labels;       /* --label KEY=VALUE: config Labels of every image the build
                              * stores (over the recipe's LABELs); not inherited by a stage
                              * FROM another, and not part of any step's key */
  char **cache_from;         /* --cache-from SPEC: imported before the build (cache_io.h) */
  char **cache_to;           /* --cache-to SPEC: the build's records exported after it */
  bool cache_to_each_stage;  /* ... and after each stage but the last (-j 1 only; a failed
                              * export there is a warning): a build that is killed (a
                              * preempted Slurm task) leaves its finished stages in the
                              * cache for its rerun ... */
  double cache_to_after_s;   /* ... when at least this many seconds (wall clock) have
                              * passed since the cache import or the last such export
                              * (0: after every stage): a short stage is cheaper to
                              * rebuild than to export */
  bool keep_on_failure;      /* a failed RUN's tree is kept (store tmp/debug-*) and the
                              * `imgbuild run --rootfs` command that enters it printed */
  bool debug_shell;          /* keep_on_failure, and open a shell there when stdin is a tty */
  char **no_cache_filter;    /* --no-cache-filter STAGE: run every step of these stages */
  const char *platform;      /* --platform OS/ARCH[/VARIANT]: the target platform (FROM
                              * without --platform pulls it; TARGETPLATFORM & co.);
                              * NULL = the host's */
  const ib_wheel_hooks_t *wheels; /* OUTPUT type=local's wheel checks (above) */
  ib_pull_policy_t pull;     /* --pull: when FROM images are pulled (below) */
  char *const *add_hosts;    /* --add-host, --shm-size, --ulimit: the sandbox's add_hosts, */
  uint64_t shm_size;         /* shm_size and rlimits for every RUN (rootfs/sandbox.h); in */
  const ib_rlimit_t *rlimits; /* the RUN's key when given (BuildKit's ExecOp has them) */
  size_t n_rlimits;
  bool network_none;         /* --network none: every RUN without a --network of its own
                              * runs without a network (a RUN's key then says so); host
                              * and default are the sandbox's default, the host's network */
  bool allow_network_host;   /* --allow network.host, BuildKit's entitlement: without it a
                              * RUN --network=host fails (EPERM, naming the switch), cached
                              * or not, whatever --network the build has */
  const ib_secrets_t *secrets; /* --secret, --ssh: what RUN --mount=type=secret|ssh mounts
                              * (secrets.h); NULL: none.  Only a mount's flag text (its
                              * id, target...) is part of a step's cache key, never the
                              * bytes, as in BuildKit */
  ib_build_result_t *result; /* NULL, or filled on success (above) */
  char *const *shared_only;  /* NULL, or build-arg names (a --matrix's axes): build only what
                              * no value of these can change, to warm a cache for every
                              * combination (--shared-only).  A stage stops before its first
                              * instruction that reads one: an ARG declaring one (or a global
                              * ARG whose default reads one), a FROM or a --from/from= naming
                              * one or a stage that stopped; its steps so far are built and
                              * recorded, its OUTPUTs skipped; -j is ignored, no image is
                              * tagged and `result` is not filled */
} ib_build_opts_t;

/* Run the build.  Relative OUTPUT dest paths resolve against the current
 * directory.  Errors name the recipe file and line:
 * "recipes/demo.recipe:12: RUN pip wheel .: exit status 1" followed by the
 * step's last output lines. */
int ib_build (ib_store_t *store, const ib_build_opts_t *opts, ib_error_t *err);

/* The plan of a build (`imgbuild plan`, builder/plan.h renders it): the
 * recipe parsed, build args, automatic platform ARGs and global ARGs
 * resolved and the needed stages marked exactly as ib_build() does, then
 * each needed stage walked with its ARG/ENV values, without pulling,
 * running or storing anything (no store, no user namespace).  Reads
 * opts->recipe_path, build_args, target, platform, outputs and tags (those
 * two are OUTPUTs at the end of the target stage, as in ib_build); the
 * rest is ignored.
 * *out (owned by the caller, json_decref) is a JSON object:
 *   recipe, platform (the target's), build_platform, build_args {K: V},
 *   global_args {NAME: value} (the recipe's, resolved, in order),
 *   target {index, name|null}, unused_build_args [NAME...] (what ib_build
 *   warns about), stages [{index, name|null, needed, and for needed stages:
 *   line, base ({image: REF} | {stage: INDEX, name} | {scratch: true}),
 *   platform (FROM --platform, expanded; absent without), depends_on
 *   [INDEX...], steps [{line, instruction, ...}], outputs [{line, type,
 *   KEY: VALUE...}]}].
 * Step fields by instruction: ARG args {NAME: value}; ENV env, LABEL labels
 * {K: V}; RUN form ("shell"|"exec"), shell [...] and command (shell form)
 * or argv (exec form), flags [expanded], args {every ARG in scope: part of
 * the step's cache key}; COPY/ADD flags, sources (heredoc words as
 * written), dest; WORKDIR path (absolute); USER/STOPSIGNAL value;
 * EXPOSE/VOLUME values; CMD/ENTRYPOINT/SHELL argv; others text as written.
 * Values come from the recipe only: what the base image's own ENV would
 * give is unknown here, and expands as unset.  Errors as ib_build's
 * ("r.recipe: no stage named 'x'", parse and expansion errors naming the
 * line). */
int ib_build_plan (const ib_build_opts_t *opts, json_t **out, ib_error_t *err);

/* Paths under a rootfs that are never part of a RUN step's layer: mount
 * points the sandbox covers.  COPY, ADD and WORKDIR layers leave nothing
 * out (`COPY --from=STAGE / /` copies the stage's dev/, proc/ and sys/ as
 * BuildKit does). */
extern char *const ib_layer_exclude[];

#endif
