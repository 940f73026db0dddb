/* builder/engine/fsops.h — file operations of build steps: resolving paths inside a
 * rootfs with chroot semantics, COPY into a rootfs, copying files out for
 * OUTPUT type=local, and user/group lookup in the rootfs's /etc files. */
#ifndef IB_BUILDER_FSOPS_H
#define IB_BUILDER_FSOPS_H

#include "builder/engine/ignore.h"
#include "common/error.h"
#include <stdbool.h>
#include <sys/types.h>

/* Resolve `path` (absolute or relative to "/") inside `root` as if root were
 * "/": ".." never climbs above root, symlinks (absolute ones relative to
 * root) are followed, the last component too when follow_last.  Components
 * that do not exist are appended as written.  *host_path (caller frees) is
 * root + the resolved path.  Error on more than 40 symlinks. */
int ib_root_resolve (const char *root, const char *path, bool follow_last, char **host_path,
                     ib_error_t *err);

typedef struct ib_copy_opts
{
  bool set_owner;        /* chown every copied entry to uid:gid; false: keep the source's owner */
  uid_t uid;
  gid_t gid;
  int chmod;             /* -1, or the mode bits for every copied entry (--chmod) */
  const ib_path_filter_t *filter; /* NULL, or entries under a copied directory to leave
                                     out (.dockerignore, --exclude); paths given to it
                                     are relative to the copied directory */
  const char *root;      /* NULL, or the host path of the image's root that the
                            destination is in: errors about destinations name
                            the path in the image ("write /usr/lib/big: No space
                            left on device"), not the host path */
  const char *name;      /* NULL, or the name a file gets when it is copied into a
                            directory: the source's name as written, when src is
                            the target of a symlink that source named (COPY
                            follows a source symlink for the content and names
                            the copy after the link, as BuildKit does) */
  bool atomic;           /* regular files are written under a temporary name beside
                            their destination and renamed over it when complete, so
                            a reader never sees one half-written (OUTPUT type=local:
                            a shared dist directory) */
} ib_copy_opts_t;

/* Dockerfile COPY semantics for one source: a directory's *contents* are
 * merged into dst (created with parents), a file is copied to dst, or into
 * dst (as o->name, else its own name) when dst is an existing directory or
 * dst_is_dir.  Existing files are replaced.  Symlinks are copied as links;
 * modes and mtimes kept; files hard-linked to each other among what this
 * call copies are hard-linked in the copy (BuildKit keeps the links within
 * one source); fifos and sockets are made, device nodes too where the user
 * namespace allows (never, in practice: left out, with one warning).  Both
 * paths are host paths (callers resolve them first). */
int ib_copy_into (const char *src, const char *dst, bool dst_is_dir, const ib_copy_opts_t *o,
                  ib_error_t *err);

/* ib_mkdir_p (mode 0755), and, when o->set_owner, the directories it made
 * are chowned to o->uid:o->gid (BuildKit makes a COPY --chown destination's
 * missing directories, and WORKDIR's after USER, as that user). */
int ib_mkdir_p_owned (const char *dir, const ib_copy_opts_t *o, ib_error_t *err);

/* Resolve "user[:group]" (names or numbers) against <root>/etc/passwd and
 * <root>/etc/group.  Without group: the user's primary group (0 when the
 * user is numeric and unknown).  Error names the user: ENOENT for a name
 * the image lacks, ERANGE for an id outside 0 to 4294967294 (given as a
 * number, or found in the image's files; (uid_t) -1 is never an id). */
int ib_lookup_user (const char *root, const char *spec, uid_t *uid, gid_t *gid,
                    ib_error_t *err);

/* The supplementary groups a step run as USER `spec` gets, as runc and
 * BuildKit give them (libcontainer's GetExecUser): when `spec` names no
 * group ("user", "uid", not "user:group"), the gids of the groups in
 * <root>/etc/group whose member list holds the user's name in
 * <root>/etc/passwd (found by name or by uid); none when the spec names a
 * group or the user has no passwd entry.  An empty spec is root ("0").  In
 * the file's order, at most IB_MAX_GROUPS; lines that do not parse are
 * skipped.  Sets *gids (caller frees; NULL when none) and returns the
 * count; never fails (a missing or unreadable file gives none). */
#define IB_MAX_GROUPS 65536
size_t ib_lookup_groups (const char *root, const char *spec, gid_t **gids);

/* The home directory of `uid` in <root>/etc/passwd (resolved in root), for
 * a step's HOME when its environment has none, as runc sets it: the
 * passwd entry's, else "/root" for uid 0 and "/" for others.  Never fails;
 * caller frees. */
char *ib_lookup_home (const char *root, uid_t uid);

/* Append HOME=<ib_lookup_home (root, uid)> to the NULL-terminated `*env`
 * (ib_strv_push) unless it has a HOME already: what RUN and `imgbuild run`
 * give a command, as runc does. */
void ib_env_default_home (char ***env, const char *root, uid_t uid);

#endif
