/* rootfs/owner.h — ownership the kernel cannot give a file here.
 *
 * In the single-id mode (rootfs/userns.h) only one id exists in the user
 * namespace, so a chown to any other owner fails (EINVAL: the id is not
 * mapped); in map mode the same happens to ids beyond the subordinate
 * range, and without a user namespace (unit tests) to every other id
 * (EPERM).  The owner is then recorded on the file itself, in the
 * `user.rootlesscontainers` xattr: the convention of runc's and umoci's
 * rootless modes (github.com/rootless-containers/proto), so a tree
 * imgbuild unpacks reads the same way in umoci.  The xattr travels with
 * the inode through renames, hard links, overlayfs copy-up and tree copies
 * (rootfs/treecopy.c copies user.* xattrs), and is read back wherever a
 * tree becomes bytes (rootfs/layer.c's scan): layers and OUTPUT type=tar
 * carry the recorded owner in their tar headers, never the xattr itself.
 *
 * The value is the protobuf message `Resource { uint32 uid = 1; uint32 gid
 * = 2; }`: two varint fields, a zero field left out as proto3 encodes it;
 * IB_OWNER_NOOP in a field means "the file's own".  An owner of 0:0 (the
 * file's own in the single-id mode) is no xattr at all.
 *
 * A recorded owner is data: nothing on the host runs or checks access
 * under it (docs/security.md).  Symlinks and device nodes cannot carry
 * user.* xattrs (the kernel refuses them): their owner is lost, as before.
 */
#ifndef IB_ROOTFS_OWNER_H
#define IB_ROOTFS_OWNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define IB_OWNER_XATTR "user.rootlesscontainers"
#define IB_OWNER_NOOP 0xFFFFFFFFu
/* The longest encoded value: two tags and two 5-byte varints. */
#define IB_OWNER_MAX 12

/* The xattr's value for uid:gid into out (IB_OWNER_MAX bytes); returns its
 * length (0 for 0:0). */
size_t ib_owner_encode (uint32_t uid, uint32_t gid, unsigned char *out);

/* Parse a value: 0 with *uid and *gid set (a missing field is 0), -1 when
 * it is not a Resource message (truncated varint, a wire type protobuf
 * does not have).  Unknown fields are skipped, as protobuf readers do. */
int ib_owner_decode (const void *buf, size_t n, uint32_t *uid, uint32_t *gid);

/* fchown(fd, uid, gid); when the kernel refuses the ids (EINVAL, EPERM)
 * they are recorded on fd (a regular file or directory opened for reading
 * or writing) instead.  A chown that succeeds drops a record the file had
 * (but in the root mode, where none is made or read).  0 when set or
 * recorded; -1 with errno otherwise (the chown's error, or the xattr's:
 * ENOTSUP on a file system without user xattrs). */
int ib_owner_chown_fd (int fd, uid_t uid, gid_t gid);

/* The same for entry `name` of directory dfd (AT_FDCWD: name is a path;
 * "" with a directory fd: that directory), without following a symlink (a
 * symlink's refused owner is lost: 0, with a debug message). */
int ib_owner_chown_at (int dfd, const char *name, uid_t uid, gid_t gid);

/* The owner recorded on entry `name` of directory dfd (as for
 * ib_owner_chown_at; not followed when a symlink): 1 with *uid / *gid replaced by the recorded ids (a NOOP field
 * leaves its id as passed), 0 when none is recorded, -1 with errno when it
 * cannot be read.  A malformed value counts as none (a debug message). */
int ib_owner_get_at (int dfd, const char *name, uid_t *uid, gid_t *gid);

/* The same for an open regular file or directory (not an O_PATH fd),
 * without going through /proc/self (callers in another root: the chown
 * supervisor). */
int ib_owner_get_fd (int fd, uid_t *uid, gid_t *gid);

/* Whether xattr `name` is the ownership record (never copied into a
 * layer's PAX headers nor taken from one). */
bool ib_owner_is_xattr (const char *name);

#endif
