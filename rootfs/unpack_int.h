/* rootfs/unpack_int.h — private to rootfs/: the state of one layer's
 * unpack (rootfs/unpack.c), shared with the merge of a layer unpacked on
 * the side (rootfs/unpack_side.c). */
#ifndef IB_ROOTFS_UNPACK_INT_H
#define IB_ROOTFS_UNPACK_INT_H

#include "rootfs/rootfs_int.h"
#include "rootfs/unpack.h"

#include <stdbool.h>
#include <sys/stat.h>

struct dirmeta
{
  char *path;            /* lexical path under the target ("" = the target) */
  dev_t dev;
  ino_t ino;
  mode_t mode;
  bool set_owner;
  uid_t uid;
  gid_t gid;
  bool set_times;
  struct timespec ts[2];
  bool dead;             /* the directory went and its inode was reused: ignored */
  bool late;             /* (side mode) its entry came after the layer made it as a parent */
};

/* (side mode) A whiteout met by a side unpack: applied to the target just
 * before the merge (unpack_side.c), as the in-order unpack applies it when
 * it meets it.  In order, a whiteout spares what the layer itself had put
 * beneath its path by then; `spared` is that, read from the side tree when
 * the whiteout came. */
enum
{
  WH_DIR = 1,            /* spared values: a directory, merged beneath */
  WH_NONDIR = 2          /* anything else: kept, and replaced by the merge */
};

struct side_whiteout
{
  char *path;            /* what it removes (plain) or empties (opaque) */
  bool opaque;
  hmap_t spared;         /* paths the layer had made beneath `path` (and
                            `path` itself, plain) -> WH_DIR / WH_NONDIR */
  size_t next;           /* index + 1 of an earlier whiteout of the same path */
};

struct unpack
{
  int rootfd;
  struct stat root_st;
  hmap_t names;          /* unp_name_key of every name this layer created or applied */
  hmap_t holders;        /* rfs_ino_key of directories that hold entries of this layer */
  hmap_t dir_idx;        /* rfs_ino_key -> index + 1 into dirs */
  struct dirmeta *dirs;
  size_t n_dirs, cap_dirs;
  struct src *src;
  ib_unpack_stats_t *stats;
  bool can_chown_warned;
  ib_buf_t skipped_names;  /* first few skipped entries, for one warning per layer */
  uint64_t caps_failed;    /* security.capability the kernel refused */
  int caps_errno;          /* why, the first time */
  ib_buf_t caps_names;     /* the first few of those files */
  /* The parent directory of the last regular file, reused while regular
   * files follow in the same directory (tars list files directory by
   * directory): saves resolving it again.  Dropped by any other entry,
   * since only those can change the directory structure. */
  char *pc_dir;
  int pc_fd;
  struct stat pc_st;
  uid_t euid;
  gid_t egid;
  /* Side mode (ib_unpack_layer_side): the layer goes into an empty
   * directory of its own, to be merged later; what would make the result
   * depend on the lower layers stops it (dependent says why). */
  bool side;
  const char *dependent;
  hmap_t links;          /* (side) names of the symlinks this layer made */
  hmap_t nondirs;        /* (side) names where a directory entry replaced a
                            non-directory of this layer: there the layer
                            replaced the lower layers' tree */
  struct side_whiteout *whs; /* (side) whiteouts, in the layer's order */
  size_t n_whs, cap_whs;
  hmap_t wh_idx;         /* (side) path -> index + 1 of its last whiteout */
};

/* "dev:ino/name": a name inside the directory `dir` (allocated). */
char *unp_name_key (const struct stat *dir, const char *name);
/* rm -rf pfd/name, never following a symlink; `shown` names it in errors. */
int unp_remove_at (int pfd, const char *name, const char *shown, ib_error_t *err);
/* Everything u holds (not u itself). */
void unp_free (struct unpack *u);
/* The record of directory `path` (stat st), made when new (*fresh). */
struct dirmeta *unp_dirmeta_get (struct unpack *u, const char *path, const struct stat *st,
                                 bool *fresh);
/* Directory `path` is about to change without an entry of its own: its
 * times are put back by unp_apply_dirmeta. */
void unp_keep_times (struct unpack *u, const char *path, const struct stat *st);
/* Owner write/search permission on directory `path` (O_PATH fd dfd) for
 * the rest of the unpack; its mode is put back by unp_apply_dirmeta. */
int unp_make_writable (struct unpack *u, const char *path, int dfd, const struct stat *st,
                       ib_error_t *err);
/* Remove the user.* and security.capability xattrs of fd. */
void unp_clear_xattrs (int fd, const char *name);
/* The recorded directory metadata applied beneath u->rootfd, deepest first. */
int unp_apply_dirmeta (struct unpack *u, ib_error_t *err);

/* unpack.c's run of one layer in side mode (ib_unpack_layer_side) into u
 * (zero-initialised; the caller frees it with unp_free). */
int unp_side_run (struct unpack *u, const char *name, ib_layer_read_fn read_fn, void *ud,
                  const char *side_dir, char diff_id[IB_DIGEST_LEN], ib_unpack_stats_t *stats,
                  ib_error_t *err);

#endif
