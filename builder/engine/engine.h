/* builder/engine/engine.h — what the build engine's files share (private
 * to builder/engine/; the engine's API is builder/build.h).
 *
 * A build (build_t) holds the recipe, the variables, and one stage_state_t
 * per stage; the files split it by phase: stage state and expansion
 * (stage.c), FROM (from.c), the step display (display.c), cache keys and
 * records (lookup.c), layers and their background jobs (layers.c), each
 * step kind (run.c, copy.c, config.c), outputs (outputs.c), a stage's
 * steps in order (steps.c), -j (parallel.c), the build itself (build.c)
 * and the plan (plan_build.c).  The functions below are defined in the
 * file named above each group; all return 0 / -1 with *err set unless
 * their comment there says otherwise. */
#ifndef IB_ENGINE_H
#define IB_ENGINE_H

#include "builder/engine/build.h"
#include "builder/engine/cache.h"
#include "builder/engine/ignore.h"
#include "builder/engine/recipe.h"
#include "common/progress.h"
#include "common/util.h"
#include "oci/digest.h"
#include "oci/manifest.h"
#include "rootfs/layer.h"
#include "rootfs/sandbox.h"

#include <jansson.h>
#include <stdbool.h>
#include <time.h>


#define DEFAULT_PATH "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define TAIL_LINES 20

/* A list of NAME=VALUE variables (ARGs in scope, build args). */
typedef struct vars
{
  char **names;
  char **values; /* NULL value = declared without one */
  size_t n, cap;
  json_t *idx;   /* name -> position: lookups and sets in O(1) (an ARG of 1M
                    names was O(n^2)); never copied, freed by vars_free */
} vars_t;



typedef struct stage_state
{
  const ib_stage_t *def;
  bool needed, built;
  bool stopped;              /* --shared-only stopped the stage (shared.c) */
  char *rootfs;              /* host path of the working rootfs */
  json_t *config;            /* image config being built */
  ib_descriptor_t *layers;   /* manifest layers */
  size_t n_layers;
  vars_t args;               /* ARGs declared in this stage */
  char **shell;              /* SHELL, default /bin/sh -c */
  bool cmd_set;              /* CMD seen in this stage: ENTRYPOINT keeps it */
  char manifest_digest[IB_DIGEST_LEN];
  int64_t manifest_size;
  char *foreign;             /* "linux/arm64" when the host cannot run the stage's binaries
                              * natively: RUN goes through binfmt_misc (qemu-user) */
  /* Build cache.  The rootfs is made lazily: while steps hit the cache only
   * config and layers advance; the first step that must run (or an output,
   * or a stage reading this one) makes it from the layers (ensure_rootfs). */
  char key[IB_DIGEST_LEN];   /* cache key of the last step (the stage's identity) */
  bool rootfs_ready;         /* st->rootfs holds the tree of st->layers */
  struct stage_state *copy_src; /* FROM <stage>: its tree may be copied ... */
  size_t copy_n_layers;         /* ... while the stage still has this many layers */
  bool no_cache;             /* --no-cache / --no-cache-filter: never look up */
  size_t step, n_steps;      /* progress: [name step/n_steps] */
  size_t *deps;              /* stages this one reads (FROM, COPY --from, --mount from=) */
  size_t n_deps;
  size_t n_pending;          /* layers of st->layers still compressing (layer_job_t) */
  json_t *emitted;           /* what its OUTPUTs wrote, for ib_build_result_t: {"names":
                              * [REF...], "wheels": [{path, sha256}...]} (NULL: nothing);
                              * relayed from a -j stage process */
} stage_state_t;

/* A layer compressed in the background (commit_layer): its tar is written
 * and its diff_id known; a child process compresses the tar into the blob
 * while the next steps run.  st->layers[index] has no digest until
 * join_layers takes the result. */
typedef struct layer_job
{
  stage_state_t *st;
  size_t index;
  pid_t pid;
  int fd;                    /* the child's struct job_result */
  char *tar, *blob;          /* temp files in the store */
  char *what;                /* "RECIPE:LINE: KEYWORD" of the step, for messages */
  char *label;               /* the step's "[build 2/5]" (or NULL), for its layer line */
  uint64_t entries;
  struct timespec t0;        /* when the step's layer write began */
} layer_job_t;

/* A cache record of a step whose layers are not all compressed yet:
 * written when they are (join_layers). */
typedef struct pending_record
{
  stage_state_t *st;
  char key[IB_DIGEST_LEN];
  json_t *config;            /* the config after the step (a copy) */
  size_t n_layers;           /* st->layers[0..n_layers) are the step's */
} pending_record_t;

typedef struct build
{
  ib_store_t *store;
  const ib_build_opts_t *opts;
  ib_recipe_t *recipe;
  char *context;
  vars_t build_args;         /* --build-arg */
  vars_t global_args;        /* ARGs before the first FROM, resolved */
  vars_t auto_args;          /* TARGETPLATFORM, BUILDOS, ... (platform_args) */
  bool *build_arg_used;
  stage_state_t *stages;
  size_t n_stages;
  stage_state_t **image_sources; /* COPY --from=IMAGE trees (image_source), each
                                    with a def of its own naming the image */
  size_t n_image_sources;
  int64_t sde;
  size_t hits, misses;
  char **keys;               /* every step key this build looked up or recorded (--cache-to) */
  ib_userns_mode_t userns;   /* the mode the build runs in (planned, or in force) */
  ib_progress_t *prog;       /* TTY/JSON: the build's display (step items) */
  bool prog_paused;
  int step_item;             /* the display's item of the current step */
  char *step_label;          /* "[build 2/5]" of the current step */
  char *step_text;           /* its display item's text */
  bool step_open;            /* the current step runs (DONE to print) */
  struct timespec step_t0;
  ib_buf_t out_line;         /* a RUN's partial output line (TTY/JSON) */
  ib_cache_memo_t *memo;     /* content digests of context files (opened when first needed) */
  ib_ignore_t *ignore;       /* .dockerignore of the context (empty when none) */
  const ib_instr_t *cur_in;  /* the instruction running (messages of background work) */
  const ib_instr_t *budget_in; /* the instruction instr_expanded counts for */
  size_t instr_expanded;     /* bytes of expanded words of budget_in (IB_EXPAND_INSTR_MAX) */
  size_t build_expanded;     /* bytes of expanded words of the build (IB_EXPAND_BUILD_MAX) */
  bool stage_process;        /* -j: this is a stage's process (stage_child) */
  layer_job_t *jobs;         /* layers compressing in the background, oldest first */
  size_t n_jobs;
  pending_record_t *records; /* cache records waiting for them */
  size_t n_records;
  /* One platform of a build for several (platforms.c); all NULL otherwise. */
  const char *platform_label; /* "linux/arm64": leads every step's label */
  const char *platform_dir;  /* "linux_arm64": the subdirectory of each type=local dest */
  json_t *deferred;          /* the image outputs (type=image|registry|oci), appended as
                              * defer_output describes, made from every platform's
                              * images once all are built (index_output) */
} build_t;

/* What a build for several platforms gives the build of one (build_one):
 * build_t's fields of the same names. */
typedef struct platform_part
{
  const char *label, *dir;
  json_t *deferred;
} platform_part_t;


/* The state of a tree before a step, for its layer: a scan of the whole
 * tree, or, for an overlay tree with nothing in its upper directory yet,
 * that directory and the lower layers (nothing is scanned: the step's
 * changes will be what the upper directory holds). */
typedef struct step_scan
{
  ib_fs_scan_t *full;
  char *upper;
  char **lowers;
  char *const *exclude; /* ib_layer_exclude for RUN, NULL for the others */
} step_scan_t;

/* Variable lookup inside a stage: ENV of the image first (Dockerfile: ENV
 * overrides ARG), then the stage's ARGs. */
typedef struct lookup_ctx
{
  stage_state_t *st;
  const vars_t *args;
} lookup_ctx_t;

/* build.c */
/* The build of one platform: ib_build's work, with `part` (NULL: the only
 * platform) one of several (platforms.c). */
int build_one (ib_store_t *store, const ib_build_opts_t *opts, const platform_part_t *part,
               ib_error_t *err);
void build_free (build_t *b);
int cli_outputs (build_t *b, stage_state_t *target, ib_error_t *err);
int mark_stages_needed (build_t *b, size_t target, ib_error_t *err);
int resolve_args (build_t *b, ib_error_t *err);
int resolve_target (build_t *b, size_t *target, ib_error_t *err);

/* config.c */
json_t *argv_json (build_t *b, stage_state_t *st, const ib_instr_t *in);
void config_step_cache (build_t *b, stage_state_t *st, const ib_instr_t *in);
int do_arg (build_t *b, stage_state_t *st, const ib_instr_t *in, ib_error_t *err);
int do_config (build_t *b, stage_state_t *st, const ib_instr_t *in, ib_error_t *err);
bool is_proxy_arg (const char *name);
void platform_args (build_t *b);

/* copy.c */
int do_copy (build_t *b, stage_state_t *st, const ib_instr_t *in, ib_error_t *err);
int do_workdir (build_t *b, stage_state_t *st, const ib_instr_t *in, ib_error_t *err);

/* display.c */
void prog_pause (build_t *b);
void prog_resume (build_t *b);
const char *stage_label (stage_state_t *st);
void step_end (build_t *b, bool ok);
void step_line (build_t *b, stage_state_t *st, const char *keyword, const char *what_full, bool cached, bool timed);
void step_output (void *ud, const char *data, size_t len);

/* from.c */
int from_target (build_t *b, const ib_instr_t *in, char **image, char **want, char **os, char **arch,
                 char **variant, ib_error_t *err);
/* The stage named `name` (case-insensitive), -1 if none.  A name given to
 * several stages means, as in BuildKit (dockerfile2llb): in FROM, the last
 * such stage before the one being defined (stage_index_before with that
 * stage's index); anywhere else (COPY --from, RUN --mount from=, --target),
 * the last in the recipe (stage_index). */
int stage_index (build_t *b, const char *name);
int stage_index_before (build_t *b, const char *name, size_t limit);
stage_state_t *earlier_stage (build_t *b, stage_state_t *st, const char *name);
/* COPY --from=IMAGE (BuildKit: "--from: image, stage or context name"):
 * the image, pulled for the build's platform when the store lacks it, as
 * a stage-like source with its tree made (its key from the manifest
 * digest); one per image per build.  `in`: the COPY, for its line.  NULL
 * with *err set when `image` is no reference or the pull fails. */
stage_state_t *image_source (build_t *b, const ib_instr_t *in, const char *image, ib_error_t *err);
/* --build-context NAME=VALUE: VALUE for `name` (the image reference of a
 * docker-image:// value, *is_image true; else the directory), or NULL when
 * the build names no such context. */
const char *named_context (build_t *b, const char *name, bool *is_image);
/* Check every --build-context (a name, docker-image://REF or an existing
 * directory); EINVAL naming the bad one. */
int check_named_contexts (build_t *b, ib_error_t *err);
/* COPY --from=NAME of a directory context: a source "stage" whose tree is
 * the directory (never removed: build_free knows it by def->index
 * DIR_CONTEXT_INDEX) and whose key hashes its content. */
#define DIR_CONTEXT_INDEX (-2)
stage_state_t *dir_context_source (build_t *b, const char *name, const char *dir,
                                   ib_error_t *err);
bool config_serves (json_t *config, const char *os, const char *arch, const char *variant);
int do_from (build_t *b, stage_state_t *st, const ib_instr_t *in, ib_error_t *err);
int ensure_rootfs (build_t *b, stage_state_t *st, ib_error_t *err);

/* layers.c */
/* Seconds (CLOCK_MONOTONIC) since *t0. */
double seconds_since (const struct timespec *t0);
int commit_layer (build_t *b, stage_state_t *st, step_scan_t *ss, const char *created_by, ib_error_t *err);
void drop_layer_jobs (build_t *b);
int join_layers (build_t *b, stage_state_t *only, ib_error_t *err);
/* The state before a step; `exclude`: paths its layer leaves out
 * (ib_layer_exclude for RUN, NULL for COPY, ADD, WORKDIR). */
int step_scan_begin (stage_state_t *st, step_scan_t *ss, char *const *exclude, ib_error_t *err);
void step_scan_free (step_scan_t *ss);

/* lookup.c */
int cache_lookup (build_t *b, stage_state_t *st, const char *key);
void cache_record (build_t *b, stage_state_t *st, const char *key);
void key_context_path (build_t *b, ib_buf_t *t, const char *path, const ib_ignore_t *excl);
void key_layer_format (build_t *b, ib_buf_t *t);
void key_str (ib_buf_t *t, const char *what, const char *s);

/* outputs.c */
const char *kv_get (const ib_instr_t *in, const char *key);
bool output_key_expanded (const char *key);
int run_output (build_t *b, stage_state_t *st, const ib_instr_t *in, ib_error_t *err);
/* An image output deferred by one platform's build (b->deferred: a JSON
 * object {type, name|null, dest|null, push, dir, stage, line, manifest,
 * size}), made from the index `index_digest` (`index_size` bytes) of
 * every platform's image: tagged and pushed (type=image|registry) or
 * written as an OCI layout (type=oci; dest "-": to stdout).  The names
 * it tags are appended to *names (may be NULL). */
int index_output (ib_store_t *store, json_t *rec, const char *index_digest, int64_t index_size,
                  char ***names, ib_error_t *err);
int store_stage_image (build_t *b, stage_state_t *st, ib_error_t *err);
/* st's LD_LIBRARY_PATH as host directories inside st->rootfs, for the
 * wheel hooks' ld_library_path (ib_wheel_hooks_t); NULL when it sets
 * none; caller frees (ib_strv_free).  Its comment in outputs.c says how
 * entries are taken. */
char **stage_ld_library_path (stage_state_t *st);

/* platforms.c */
/* --platform A,B: the recipe built once per platform (build_one), then
 * each image output made once, of an index of the platforms' images. */
int build_platforms (ib_store_t *store, const ib_build_opts_t *opts, ib_error_t *err);

/* parallel.c */
int run_stages_parallel (build_t *b, size_t jobs, ib_error_t *err);

/* run.c */
int do_run (build_t *b, stage_state_t *st, const ib_instr_t *in, ib_error_t *err);
/* RUN's flags typed (ib_run_spec_from_instr), expanded in st's scope, or
 * the global ARGs' when st is NULL; lenient: see there */
struct ib_run_spec;
int run_spec (build_t *b, stage_state_t *st, const ib_instr_t *in, bool lenient,
              struct ib_run_spec *spec, ib_error_t *err);

/* stage.c */
void add_history (build_t *b, stage_state_t *st, const char *created_by, bool empty_layer);
void add_history_at (build_t *b, stage_state_t *st, const char *created_by, bool empty_layer, const char *when);
const char *config_env_get (json_t *config, const char *name);
void config_env_set (json_t *config, const char *name, const char *value);
json_t *config_section (json_t *config);
const char *config_string (json_t *config, const char *key);
char *created_now (build_t *b);
char escape_char (build_t *b);
int expand (build_t *b, stage_state_t *st, const char *word, char **out, ib_error_t *err);
int expand_count (build_t *b, size_t len, ib_error_t *err);
int instr_error (build_t *b, const ib_instr_t *in, ib_error_t *err);
const char *lookup (void *p, const char *name);
int need_userns (build_t *b, ib_error_t *err);
bool vars_declared (const vars_t *v, const char *name);
void vars_free (vars_t *v);
const char *vars_get (const vars_t *v, const char *name, bool *found);
void vars_set (vars_t *v, const char *name, const char *value);

/* steps.c */
int finish_stage (build_t *b, stage_state_t *st, ib_error_t *err);
int run_instr (build_t *b, stage_state_t *st, const ib_instr_t *in, ib_error_t *err);
int run_stage (build_t *b, stage_state_t *st, ib_error_t *err);
/* shared.c: with opts->shared_only, must the stage stop before `in`? */
bool shared_stops_here (build_t *b, stage_state_t *st, const ib_instr_t *in);
void shell_from_config (stage_state_t *st);

#endif
