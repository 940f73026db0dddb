/* builder/cli/slurm.h — `imgbuild build --slurm`: a build or a --matrix
 * run as one Slurm array job, a task per combination (cell), followed from
 * the submitting command; `imgbuild matrix status JOBID`.  Private to the
 * CLI wing.  Slurm is the scheduler: sbatch submits, squeue reports,
 * scancel cancels; imgbuild adds no queue or worker protocol of its own.
 *
 * A job directory (--slurm-dir, default $XDG_STATE_HOME/imgbuild/slurm,
 * which must be on a file system the nodes share, as the home directory
 * usually is) holds per submission: job.json (the array's and the seed's
 * job ids, the cells' labels), the batch scripts, logs/cell-I.out (every
 * attempt's output, appended), cells/I.start (a task's node, attempt and
 * start time) and cells/I.json (its outcome: cells.h), and a symlink
 * JOBID naming it.  Each task builds in a store on its node
 * (--slurm-store); nodes share the build cache through --cache-to and
 * --cache-from. */
#ifndef IB_BUILDER_CLI_SLURM_H
#define IB_BUILDER_CLI_SLURM_H

#include "builder/cli/cells.h"
#include "builder/engine/build.h"
#include "builder/engine/matrix.h"
#include "common/error.h"

typedef struct slurm_opts
{
  bool submit;          /* --slurm */
  char **sbatch_opts;   /* --slurm-opt ARG: passed to sbatch, after imgbuild's own */
  const char *script;   /* --slurm-script FILE: its lines (#SBATCH, module load, exports)
                         * start every batch script */
  const char *dir;      /* --slurm-dir DIR (NULL: the default above) */
  const char *store;    /* --slurm-store PATTERN: the task's store; %n node, %u user,
                         * %j job id, %a array index, %% a '%' (NULL: --store if given,
                         * else ${SLURM_TMPDIR:-${TMPDIR:-/tmp}}/imgbuild-%u-%n) */
  bool detach;          /* --detach: print the job id and return */
  int jobs;             /* -j M: at most M cells at once (the array's %M); 0: no limit */
  const char *task_dir; /* --slurm-task DIR: this process is a task of DIR's job */
  double checkpoint_s;  /* --slurm-checkpoint SECONDS: a cell exports its own cache after
                         * a stage when this long has passed since its last export
                         * (0: after every stage) */
  bool checkpoint_given;
} slurm_opts_t;

/* --slurm-checkpoint's default, in seconds: exporting costs a few seconds
 * (the stage's new layers, compressed and pushed), so a stage shorter
 * than this is cheaper to rebuild after a requeue than to export */
#define SLURM_CHECKPOINT_S 60.0

/* Remove the submitting command's own options (--slurm, --slurm-opt,
 * --slurm-script, --slurm-dir, --detach, -j/--jobs; --slurm-store and
 * --slurm-checkpoint are the tasks') from a copy of `argv` (the whole command line,
 * argv[0] included): what every task runs, with --slurm-task added. */
char **slurm_task_argv (char *const *argv);

/* Submit: write the job directory and the batch scripts, sbatch a seed
 * job when there are several cells and a --cache-to (`--shared-only`: the
 * steps no matrix value changes, built once and exported before the
 * cells, which depend on it: afterany), then the array (`--array=0-N-1%M
 * --requeue`, GPUs asked for with --gres=gpu:N when `gpus` > 0 and no
 * --slurm-opt asks itself).  `argv` is the whole command line.  Unless
 * --detach, follow it (slurm_follow).  Errors: sbatch missing or refusing
 * (its message), the job directory not writable. */
int slurm_submit (const slurm_opts_t *so, char *const *argv, const ib_matrix_t *m,
                  bool fail_fast, bool seed, int gpus, ib_error_t *err);

/* Follow job directory `dir` until every cell has ended: a line on stderr
 * per cell as it starts, ends or is requeued (node, seconds), then the
 * summary on stdout (cells_print_summary).  `fail_fast`: scancel the rest
 * at the first failure.  SIGINT/SIGTERM cancel the jobs.  -1 (EIO) when a
 * cell failed or was not built. */
int slurm_follow (const char *dir, bool fail_fast, ib_error_t *err);

/* The task's side, in cmd_build: the store path for this task (`so`'s
 * pattern expanded; caller frees), and the run of its cell: combination
 * SLURM_ARRAY_TASK_ID of `m` built in `store` with `bo` (its start and its
 * outcome written to the job directory).  A seed task (bo->shared_only)
 * writes cells/seed.json. */
char *slurm_task_store (const slurm_opts_t *so, const char *store_opt);
/* A cell's own cache: `spec` (a --cache-to) with "-CELL" after its ref=
 * tag or dest= path ("type=registry,ref=r/c:buildcache" and "cell3":
 * "type=registry,ref=r/c:buildcache-cell3"); NULL when it has neither.
 * Caller frees. */
char *slurm_cell_cache_spec (const char *spec, const char *cell);
int slurm_task_run (const slurm_opts_t *so, ib_store_t *store, const ib_build_opts_t *bo,
                    const ib_matrix_t *m, ib_error_t *err);

/* imgbuild matrix status JOBID [--slurm-dir DIR] [--follow] */
int cmd_matrix (int argc, char **argv, ib_error_t *err);

#endif
