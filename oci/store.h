/* oci/store.h — the content store: an OCI image layout (image-spec
 * image-layout.md: oci-layout, index.json, blobs/sha256/<hex>) that skopeo,
 * umoci and podman read as oci:DIR:NAME, plus imgbuild's own directories
 * beside it: snapshots/ (unpacked rootfs per chain id), cache/, tmp/ and
 * a lock file.
 *
 * Writes are temp file + fsync + rename: a blob is never visible under its
 * digest before its bytes were verified.  Tags live in index.json as
 * descriptors annotated org.opencontainers.image.ref.name = full normalized
 * reference ("docker.io/library/debian:bookworm").
 */
#ifndef IB_OCI_STORE_H
#define IB_OCI_STORE_H

#include "common/error.h"
#include "oci/digest.h"
#include "oci/manifest.h"
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct ib_store
{
  char *root;     /* absolute path of the layout */
  int lock_fd;    /* open lock file; flock()ed while a writer holds it */
  int lock_depth; /* nesting of ib_store_lock calls in this process */
  bool lock_exclusive; /* the flock held is LOCK_EX */
  int gc_fd;      /* open gc.lock while ib_store_gc_lock holds it, else -1 */
} ib_store_t;

/* The default root: $IMGBUILD_STORE, else $XDG_DATA_HOME/imgbuild, else
 * ~/.local/share/imgbuild.  Caller frees. */
char *ib_store_default_root (void);

/* Open (creating when missing, mode 0700) the layout at `root`.  Caller
 * closes.  The store is private to its owner: a `root` that belongs to
 * another uid fails (EPERM, naming both uids); one whose mode lets others
 * in is chmod'ed to 0700 with a warning.  Before anything is made or
 * changed, the path is checked as ib_store_check_path says (EPERM, ELOOP,
 * ENOTDIR), and an existing directory that holds anything but the names a
 * store has, without an oci-layout, is refused (ENOTEMPTY): it is no store
 * and imgbuild neither chmods nor fills it.  Errors begin
 * "open store ROOT: " and name the component at fault. */
int ib_store_open (const char *root, ib_store_t **out, ib_error_t *err);

/* The store's path as ib_store_open checks it, the way the kernel's
 * fs.protected_symlinks and OpenSSH's safe_path reason: another local
 * user must not be able to point the store somewhere else (at the owner's
 * home, which would be chmodded 0700 and filled, and whose tmp/ and
 * snapshots/ prune would empty).  `path` is made absolute from the working
 * directory and walked one component at a time, none followed unchecked
 * (O_NOFOLLOW):
 *   - a symbolic link is followed only when `uid` or root owns it (your
 *     own links, /var/run -> /run); one of another uid fails EPERM
 *     ("P is a symbolic link of uid N, not of this user (uid U) or root");
 *   - a directory on the way must belong to `uid` or root ("P belongs to
 *     uid N, not to this user (uid U) or root"), and one that every user
 *     may write must be sticky, as /tmp is ("P is writable by every user
 *     (mode 0777) and not sticky");
 *   - more than 40 links: ELOOP; a component that is no directory: ENOTDIR;
 *   - inside a user namespace that leaves ids unmapped (a rootless
 *     container), root's files and other outside users' show as one
 *     overflow id: it counts as root's for directories, and for a link
 *     only in a directory that neither group nor others may write.
 * The last directory is not judged here (ib_store_open wants it `uid`'s
 * own).  Nothing is made: a missing component ends the walk, and
 * *resolved (caller frees) is the path with the links that exist
 * resolved and the missing rest appended.  ib_store_open uses geteuid (). */
int ib_store_check_path (const char *path, uid_t uid, char **resolved, ib_error_t *err);

/* Check `root`'s path (ib_store_check_path, as geteuid ()) before this
 * process enters a user namespace, where other users' files and root's
 * read as one overflow id and the check cannot tell them apart.  A later
 * ib_store_open of the same `root` string, inside the namespace, walks
 * the path found here and trusts the components checked here; what it
 * makes beyond them must be its own.  Errors as ib_store_open's. */
int ib_store_vet (const char *root, ib_error_t *err);
void ib_store_close (ib_store_t *s);

/* flock the store: shared for readers, exclusive for index.json updates.
 * Blocks until granted.  Calls nest (one ib_store_unlock per ib_store_lock);
 * an exclusive request inside a shared one upgrades the lock (flock(2):
 * not atomically) and it stays exclusive until the outermost unlock.
 * ib_store_tag takes the exclusive lock itself. */
int ib_store_lock (ib_store_t *s, bool exclusive, ib_error_t *err);
void ib_store_unlock (ib_store_t *s);

/* In a process forked from the one that opened `s` (a -j stage's, one
 * platform's of several): the lock file opened again, so that
 * ib_store_lock excludes this process from its parent and its siblings
 * (flock(2) locks belong to the open file description, which fork
 * shares: without this two children updating index.json at once would
 * both "hold" the exclusive lock).  Call with no lock held (a held one
 * stays the parent's).  The gc lock needs nothing: the parent holds it
 * shared for both.  Errors: the lock file cannot be opened. */
int ib_store_after_fork (ib_store_t *s, ib_error_t *err);

/* The garbage-collection lock (<root>/gc.lock), separate from the
 * index.json lock above: every command that writes blobs, snapshots or
 * cache records holds it shared for its whole run (a blob is unreferenced
 * between its commit and the tag or cache record naming it); `imgbuild
 * prune` holds it exclusive, so it never removes what a running build is
 * about to reference.  Without `wait`, a busy lock fails with EWOULDBLOCK
 * (no message); otherwise blocks.  Released by ib_store_close. */
int ib_store_gc_lock (ib_store_t *s, bool exclusive, bool wait, ib_error_t *err);

/* The store's areas: every path under the store is made by this file
 * (ib_store_path and the functions below), so its layout is known in one
 * place.  What an area's entries are called is the business of the module
 * that writes them (cache records, snapshots per chain id). */
typedef enum ib_store_area
{
  IB_STORE_BLOBS,        /* blobs/sha256: content by digest hex (the OCI layout's) */
  IB_STORE_SNAPSHOTS,    /* snapshots: unpacked trees per chain id (rootfs/prepare.h, overlay.h) */
  IB_STORE_TMP,          /* tmp: temp files and trees, partial downloads */
  IB_STORE_CACHE_STEPS,  /* cache/steps: build-step records (builder/engine/cache.h) */
  IB_STORE_CACHE_MOUNTS, /* cache/mounts: RUN --mount=type=cache directories */
  IB_STORE_CACHE,        /* cache: the cache's own files (the file digest memo) */
} ib_store_area_t;

/* Whether `name` is one imgbuild makes in `area`: what `imgbuild prune`
 * may remove.  blobs/sha256: 64 hex digits; snapshots: a chain id's 64
 * hex, with ".ovl" for a layered one; cache/steps: 64 hex + ".json";
 * cache/mounts: 32 hex, alone or with a suffix (".id", ".lock"); tmp:
 * "blob-<64 hex>.partial", or a prefix ib_store_tmp_file and
 * ib_store_tmp_dir are given (stage-, layer-, pull-, snap-, debug-, ...).
 * Anything else (another program's file in a directory given as the
 * store) is left where it is. */
bool ib_store_name_ours (ib_store_area_t area, const char *name);

/* <root>/<area>, or <root>/<area>/<name> when `name` is not NULL (one
 * path component, or a relative path the caller vouches for).  Caller
 * frees.  Nothing is created. */
char *ib_store_path (ib_store_t *s, ib_store_area_t area, const char *name);

/* Where a blob's download is kept while it arrives, resumable across
 * processes: <root>/tmp/blob-<hex>.partial.  Caller frees. */
char *ib_store_partial_path (ib_store_t *s, const char *digest);

/* Path of blobs/sha256/<hex>; caller frees.  Exists only when stored. */
char *ib_store_blob_path (ib_store_t *s, const char *digest);
bool ib_store_has_blob (ib_store_t *s, const char *digest);

/* Create an empty temp file in <root>/tmp for the caller to fill; *path is
 * owned by the caller, fd is returned (O_RDWR|O_CLOEXEC).  Its name is
 * "<prefix>-XXXXXX": a prefix must be one ib_store_name_ours knows (the
 * list in store.c), or prune leaves what a killed process left. */
int ib_store_tmp_file (ib_store_t *s, const char *prefix, char **path, ib_error_t *err);
/* A new empty temp directory under <root>/tmp; caller frees the path. */
int ib_store_tmp_dir (ib_store_t *s, const char *prefix, char **path, ib_error_t *err);

/* Directory of the cache mount `id` (RUN --mount=type=cache): kept across
 * builds under <root>/cache/mounts/<first 32 hex of sha256(id)>, with the
 * id written beside it in "<dir>.id".  With `create` the directory is made
 * (mode 0755) when missing and *created says whether it was; without it the
 * path is only computed.  *path is owned by the caller. */
int ib_store_cache_mount_dir (ib_store_t *s, const char *id, bool create, char **path,
                              bool *created, ib_error_t *err);
/* Take the cache mount `id`'s lock (RUN --mount=type=cache,sharing=locked):
 * an exclusive flock on "<dir>.lock" beside its directory, made when
 * missing.  Without `wait` a lock held elsewhere fails with EWOULDBLOCK
 * ("cache mount ID is in use"); with it, blocks until granted.  Returns the open fd
 * (O_CLOEXEC): the lock is held until it is closed.  Errors name the id
 * and the lock file. */
int ib_store_cache_mount_lock (ib_store_t *s, const char *id, bool wait, ib_error_t *err);
/* Move a finished temp file into blobs/.  Its sha256 is computed here; when
 * `expected` is not NULL and differs, the file is deleted and an error
 * "digest mismatch" returned.  out_digest/out_size may be NULL. */
int ib_store_commit_blob (ib_store_t *s, const char *tmp_path, const char *expected,
                          char out_digest[IB_DIGEST_LEN], uint64_t *out_size, ib_error_t *err);
/* Like ib_store_commit_blob for a caller that hashed the bytes while
 * writing them (the registry client, the layer writer): `digest` is trusted
 * and not recomputed.  The file is fsynced and renamed into blobs/. */
int ib_store_commit_blob_hashed (ib_store_t *s, const char *tmp_path, const char *digest,
                                 ib_error_t *err);
/* Put blob `digest` into another layout's blob directory `blobs_dir`
 * (".../blobs/sha256"), as the file named by its hex: nothing when it is
 * there already, else a hard link (store blobs are never changed in
 * place), else a copy (fsynced).  Errors name both paths. */
int ib_store_export_blob (ib_store_t *s, const char *digest, const char *blobs_dir,
                          ib_error_t *err);
/* Store bytes as a blob. */
int ib_store_put_blob (ib_store_t *s, const void *data, size_t len,
                       char out_digest[IB_DIGEST_LEN], ib_error_t *err);
/* Read a blob into memory (manifests, configs); verifies its digest. */
int ib_store_read_blob (ib_store_t *s, const char *digest, char **data, size_t *len,
                        ib_error_t *err);

/* Point tag `name` (a full normalized reference) at a manifest descriptor,
 * replacing any previous descriptor with that name. */
int ib_store_tag (ib_store_t *s, const char *name, const char *media_type, const char *digest,
                  int64_t size, ib_error_t *err);
/* Annotation on a tag in index.json: where a pulled image came from, as
 * "REGISTRY/REPOSITORY" actually contacted (a mirror or a location that
 * registries.conf rewrote, else the reference's own).  Push reads it to
 * mount blobs from another repository of the same registry. */
#define IB_SOURCE_ANNOTATION "org.imgbuild.source"
/* ib_store_tag that also records `source` (may be NULL: none) under
 * IB_SOURCE_ANNOTATION. */
int ib_store_tag_source (ib_store_t *s, const char *name, const char *media_type,
                         const char *digest, int64_t size, const char *source, ib_error_t *err);

/* Annotations on a pulled image's tag in index.json: the manifest as the
 * registry served it, when the tag points at another rendering of it (a
 * Docker schema 2 manifest is tagged as its OCI equivalent, which skopeo
 * and umoci read in an image layout), and the index the manifest was
 * chosen from.  The served bytes are a blob of the store; prune keeps
 * the blobs these name. */
#define IB_REGISTRY_DIGEST_ANNOTATION "org.imgbuild.registry.digest"
#define IB_REGISTRY_MEDIA_TYPE_ANNOTATION "org.imgbuild.registry.mediaType"
#define IB_REGISTRY_INDEX_ANNOTATION "org.imgbuild.registry.index"

/* What a pulled image's tag records besides the descriptor it points at;
 * every field may be NULL (none). */
typedef struct ib_tag_meta
{
  const char *source;            /* IB_SOURCE_ANNOTATION */
  const char *served_digest;     /* IB_REGISTRY_DIGEST_ANNOTATION: the manifest's digest as
                                    served, when it differs from the tagged one */
  const char *served_media_type; /* IB_REGISTRY_MEDIA_TYPE_ANNOTATION, with served_digest */
  const char *index_digest;      /* IB_REGISTRY_INDEX_ANNOTATION: the (outermost) index the
                                    manifest was chosen from */
} ib_tag_meta_t;

/* ib_store_tag with the annotations of `meta` (may be NULL).  A tag that
 * is already exactly so leaves index.json untouched. */
int ib_store_tag_meta (ib_store_t *s, const char *name, const char *media_type,
                       const char *digest, int64_t size, const ib_tag_meta_t *meta,
                       ib_error_t *err);
/* The distinct sources (IB_SOURCE_ANNOTATION values) of stored images whose
 * manifest lists `digest` as config or layer, in index.json order.
 * *sources is a NULL-terminated vector owned by the caller (NULL when
 * none).  Error only when index.json cannot be read. */
int ib_store_blob_sources (ib_store_t *s, const char *digest, char ***sources, ib_error_t *err);
/* Look a name up: accepts the full name, or anything ib_ref_parse normalizes
 * to it, or a manifest digest.  A digest ("sha256:..", "NAME@sha256:..",
 * the tag in NAME@ ignored) also finds a tag by the digests its
 * IB_REGISTRY_* annotations record (the manifest as served, the index it
 * came from); with NAME the tag must be of NAME's repository.  A bare
 * digest that is no manifest's is taken as an image ID (docker's: the
 * config's digest, what `build -q` and --iidfile print): the first tag
 * whose manifest has that config.  *out is the descriptor the tag points
 * at (the store's own rendering).  Error "image NAME not found in store
 * DIR". */
int ib_store_resolve (ib_store_t *s, const char *name, ib_descriptor_t *out, ib_error_t *err);
/* Remove tag `name` from index.json (`docker rmi`, `podman untag`): the
 * exact name, else what ib_ref_parse normalizes it to.  The blobs stay
 * until `imgbuild prune`.  *removed (may be NULL) gets the name removed
 * (caller frees).  Error ENOENT "image NAME not found in store DIR". */
int ib_store_untag (ib_store_t *s, const char *name, char **removed, ib_error_t *err);

/* The manifest a name stands for as its registry served it (what docker
 * and skopeo show as its digest, what a push sends): ib_store_resolve's
 * descriptor, or the one IB_REGISTRY_DIGEST_ANNOTATION and
 * IB_REGISTRY_MEDIA_TYPE_ANNOTATION record when that blob is in the store.
 * `stored` (may be NULL) gets ib_store_resolve's descriptor, index_digest
 * (may be NULL) the IB_REGISTRY_INDEX_ANNOTATION ("" when none).  The
 * caller clears both descriptors.  Errors as ib_store_resolve. */
int ib_store_resolve_served (ib_store_t *s, const char *name, ib_descriptor_t *out,
                             ib_descriptor_t *stored, char index_digest[IB_DIGEST_LEN],
                             ib_error_t *err);
/* index.json's "manifests" array (new reference, caller decrefs). */
int ib_store_list (ib_store_t *s, json_t **manifests, ib_error_t *err);

/* Load manifest + config of a stored image by name or digest. */
int ib_store_load_image (ib_store_t *s, const char *name, ib_descriptor_t *desc,
                         ib_manifest_t **manifest, json_t **config, ib_error_t *err);

#endif
