/* builder/engine/matrix.h — `imgbuild build --matrix NAME=V1,V2,...`: build
 * arguments whose combinations are built one after the other.
 *
 * A matrix is a list of axes, each a build-arg NAME with one or more
 * values.  Its combinations are the cartesian product in a stable order:
 * the first axis varies slowest, the values in the order given (as nested
 * loops written in the order of the --matrix options).
 */
#ifndef IB_BUILDER_MATRIX_H
#define IB_BUILDER_MATRIX_H

#include "common/error.h"

#include <stddef.h>

typedef struct ib_matrix_axis
{
  char *name;    /* a build-arg name: [A-Za-z_][A-Za-z0-9_]* */
  char **values; /* NULL-terminated, at least one, none empty, no repeats */
} ib_matrix_axis_t;

typedef struct ib_matrix
{
  ib_matrix_axis_t *axes;
  size_t n_axes;
} ib_matrix_t;

/* Add the axis of one --matrix spec, "NAME=V1[,V2...]".  Errors (EINVAL,
 * the message names the spec): no '=', a NAME that is not a build-arg
 * name, NAME given by an earlier spec, an empty value list ("NAME="), an
 * empty value ("NAME=a,,b", a trailing comma), a value listed twice.  On
 * error `m` is unchanged. */
int ib_matrix_add (ib_matrix_t *m, const char *spec, ib_error_t *err);

/* Refuse a --build-arg ("K=V" or "K") that names a matrix axis: EINVAL,
 * "--build-arg K: K is a --matrix argument".  `build_args` may be NULL. */
int ib_matrix_check_args (const ib_matrix_t *m, char *const *build_args, ib_error_t *err);

/* The number of combinations: the product of the axes' value counts (1 for
 * a matrix without axes, whose one combination is empty). */
size_t ib_matrix_count (const ib_matrix_t *m);

/* Combination `index` (0 <= index < ib_matrix_count) as "NAME=VALUE"
 * strings, one per axis in axis order, NULL-terminated; the caller frees
 * it (ib_strv_free). */
char **ib_matrix_combination (const ib_matrix_t *m, size_t index);

/* Release the axes; `m` is empty afterwards. */
void ib_matrix_clear (ib_matrix_t *m);

#endif
