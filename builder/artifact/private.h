/* builder/artifact/private.h — what the artifact wing's files share and
 * nothing outside builder/artifact/ may use: the list of an artifact's
 * files, the temp-directory helpers of a pull, the "stored for commit"
 * hint, and the backends' entry points (s3_backend.c, oci_backend.c),
 * called by ib_artifact_push / ib_artifact_pull (artifact.c).
 */
#ifndef IB_BUILDER_ARTIFACT_PRIVATE_H
#define IB_BUILDER_ARTIFACT_PRIVATE_H

#include "builder/artifact/artifact.h"

#include <ctype.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

/* A file of an artifact: its path below the key prefix and, for push, its
 * local path (for pull, the same as rel: the file's path in the temp
 * directory). */
typedef struct art_file
{
  char *rel;
  char *path;
} art_file_t;

/* Append a copy of rel and path to (*f, *n). */
void ib_art_files_add (art_file_t **f, size_t *n, const char *rel, const char *path);
/* Whether one of the n files has `rel`. */
bool ib_art_files_has (const art_file_t *f, size_t n, const char *rel);

/* Create tmp/rel (parents too, 0755) for writing, O_EXCL, mode 0644:
 * the descriptor, or -1 with *err set. */
int ib_art_create_in (const char *tmp, const char *rel, ib_error_t *err);
/* fsync and close `fd` (closed on error too); `shown` names it in errors. */
int ib_art_finish_fd (int fd, const char *shown, ib_error_t *err);

/* "; stored for commit C: L/O/V, ..." from the distinct "L/O/V" in
 * `found` (NULL-terminated, may be NULL or empty: "").  Caller frees. */
char *ib_art_stored_hint (const char *commit, char **found);
/* Push a copy of s to the NULL-terminated vector *v unless it has it. */
void ib_art_add_distinct (char ***v, const char *s);

/* The backends.  Push: upload the n files (rel below `key`, local path)
 * of the artifact with key prefix `key`.  Pull: fetch every file under
 * `key` into the directory `tmp`, verified, adding each to (*f, *n);
 * ENOENT "no artifact found for KEY in REPO ..." when there is none.
 * The OCI backend needs `store` (its blobs pass through it). */
int ib_art_push_s3 (ib_artifact_opts_t *o, const char *key, const art_file_t *f, size_t n,
                    ib_error_t *err);
int ib_art_pull_s3 (ib_artifact_opts_t *o, const char *key, const char *tmp, art_file_t **f,
                    size_t *n, ib_error_t *err);
int ib_art_push_oci (ib_artifact_opts_t *o, ib_store_t *store, const char *key,
                     const art_file_t *f, size_t n, ib_error_t *err);
int ib_art_pull_oci (ib_artifact_opts_t *o, ib_store_t *store, const char *key, const char *tmp,
                     art_file_t **f, size_t *n, ib_error_t *err);

/* The last component of path p (p itself when it has no '/'). */
static inline const char *
ib_art_base_name (const char *p)
{
  const char *s = strrchr (p, '/');
  return s ? s + 1 : p;
}

/* s without leading and trailing blanks (isspace); edits s in place. */
static inline char *
ib_art_strip (char *s)
{
  while (*s && isspace ((unsigned char) *s))
    s++;
  size_t n = strlen (s);
  while (n > 0 && isspace ((unsigned char) s[n - 1]))
    s[--n] = '\0';
  return s;
}

#endif
