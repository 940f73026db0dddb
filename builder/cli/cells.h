/* builder/cli/cells.h — one combination of a `build --matrix` (a cell), as
 * the summary shows it: built here (build.c) or by a Slurm task and read
 * back by the submitting command (slurm.c).  Private to the CLI wing.
 *
 * A cell is a file in a Slurm job directory: JSON, written atomically
 * (ib_write_file_atomic), {"index", "n", "label", "state", "why",
 * "seconds", "node", "attempt", "lines"}. */
#ifndef IB_BUILDER_CLI_CELLS_H
#define IB_BUILDER_CLI_CELLS_H

#include "common/error.h"

#include <stdio.h>
#include <stddef.h>

typedef struct matrix_cell
{
  size_t index, n; /* 0-based position in the matrix (matrix.h's order), of n */
  char *label;     /* "K=V K=V" */
  char *state;     /* "ok", "FAILED" or "not built" */
  char *why;       /* FAILED: the error's first line; not built: the reason; else NULL */
  double seconds;  /* the build's wall time; < 0: not known */
  char *node;      /* the Slurm node it ran on; NULL when built here */
  int attempt;     /* Slurm: 1 + SLURM_RESTART_COUNT; 0 when built here */
  char **lines;    /* the outputs: "  wheel PATH", "  image NAME DIGEST", "  TYPE DEST" */
} matrix_cell_t;

void cell_clear (matrix_cell_t *c);

/* "matrix 2/4: K=V K=V: ok in 12.3 s on n1 (attempt 2)" (the parts known),
 * or ": FAILED in 1.2 s on n1: WHY", or ": not built (WHY)"; no newline;
 * the caller frees. */
char *cell_status_line (const matrix_cell_t *c);

/* The summary on `f`: "matrix summary: B of N combinations built, F
 * failed", then per cell its status line and its lines. */
void cells_print_summary (FILE *f, const matrix_cell_t *cells, size_t n);

/* Write `c` to `path` atomically; read one back (a malformed file:
 * EINVAL naming it).  cell_read fills *c, which the caller clears. */
int cell_write (const char *path, const matrix_cell_t *c, ib_error_t *err);
int cell_read (const char *path, matrix_cell_t *c, ib_error_t *err);

#endif
