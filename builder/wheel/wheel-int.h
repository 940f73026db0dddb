/* builder/wheel/wheel-int.h — what the files of the wheel wing share.
 * Private: only the files of builder/wheel/ include it; the contract with
 * the rest of imgbuild is wheel.h.  Everything else in the wing is static.
 *
 * The files, by job:
 *   record.c   file names (PEP 427), opening a wheel: the zip read with
 *              libarchive, members hashed and extracted, RECORD, .dist-info
 *   elf.c      ELF objects through libelf
 *   policy.c   the embedded manylinux policy table (PEP 600)
 *   ldd.c      library resolution, as auditwheel's lddtree
 *   audit.c    auditwheel's analyze_wheel_abi
 *   report.c   the audit as text (`auditwheel show`, require=) and JSON
 *   hook.c     the OUTPUT hooks: check, repair in place, require=
 *   zip.c      a repaired wheel written: RECORD and a reproducible zip
 *   repair.c   auditwheel repair: grafting with patchelf, retagging
 *   support.c  string vectors, the string map, the one directory walk
 *
 * Shared names carry the prefix ibw_.  The audit follows auditwheel 6.x
 * (src/auditwheel/wheel_abi.py, policy/__init__.py, lddtree.py,
 * elfutils.py; read, not copied): names (full tree, external references,
 * symbol / ref / blacklist / graft / machine policy) are auditwheel's.
 * Known departure: musllinux and Android policies are not shipped.
 */
#ifndef IB_BUILDER_WHEEL_WHEEL_INT_H
#define IB_BUILDER_WHEEL_WHEEL_INT_H

#include "builder/wheel/wheel.h"

#include <jansson.h>
#include <openssl/evp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ---- support.c: small containers, the walk ------------------------------- */

void ibw_strv_add_unique (char ***v, const char *s);

/* An insertion-ordered map from a string to a string vector. */
typedef struct smap_ent
{
  char *key;
  char **vals;
} smap_ent_t;
typedef struct smap
{
  smap_ent_t *e;
  size_t n;
} smap_t;

smap_ent_t *ibw_smap_find (const smap_t *m, const char *key);
smap_ent_t *ibw_smap_get (smap_t *m, const char *key); /* added when missing */
void ibw_smap_clear (smap_t *m);
void ibw_smap_merge (smap_t *dst, const smap_t *src);
void ibw_smap_copy (smap_t *dst, const smap_t *src);

/* A ':'-separated list appended to *out (empty entries kept). */
void ibw_split_path_list (const char *s, char ***out);

/* Called for each file ibw_walk finds: `rel` its path relative to the root. */
typedef int (*ibw_walk_fn) (const char *rel, void *ctx, ib_error_t *err);

/* The one recursive walk of the wing: fn (rel, ctx, err) for every regular
 * file under `root` whose name ends in `suffix` (NULL: every one).  A
 * directory's entries are taken in name order (strcmp): with `files_first`
 * its files before its subdirectories, else each subdirectory walked at
 * its place.  Links and special files are passed over.  Stops at the
 * first failure: fn's, "opendir DIR" or "stat PATH". */
int ibw_walk (const char *root, const char *suffix, bool files_first, ibw_walk_fn fn, void *ctx,
              ib_error_t *err);
/* An ibw_walk_fn that pushes `rel` on the string vector `ctx` (a char ***). */
int ibw_walk_push (const char *rel, void *ctx, ib_error_t *err);

/* ---- record.c: an open wheel --------------------------------------------- */

typedef struct member
{
  char *path;     /* relative, '/'-separated */
  uint64_t size;
  mode_t mode;    /* permission bits as stored (0644 when none) */
  int64_t mtime;
  unsigned char dos[4]; /* MS-DOS time and date fields as stored, when has_dos */
  bool has_dos;
  char *sha256;   /* urlsafe base64, no padding */
  bool extracted; /* written under the wheel's directory */
  int alt_bits;   /* 384 or 512: RECORD names sha384 / sha512 ... */
  char *alt_want; /* ... with this digest, checked in a second pass */
} member_t;

struct ib_wheel
{
  char *file;      /* the path given */
  char *base;      /* its base name */
  ib_wheel_name_t name;
  char *dir;       /* extraction directory (realpath) */
  char *dist_info; /* "foo-1.0.dist-info" */
  member_t *m;
  size_t n, cap;
  size_t *slot;      /* hash table of member paths: index + 1, 0 empty */
  size_t nslot;      /* a power of two, above twice n */
  bool root_is_purelib;
  char **wheel_tags; /* Tag lines of WHEEL */
  bool extract_all;  /* every member; else ELF objects and .dist-info only */
  char *last_parent; /* the directory last made while extracting */
  uint64_t unpacked; /* uncompressed bytes read so far (ib_unpack_max_bytes) */
};

/* ib_wheel_open, with `all`: every member extracted (for a repair). */
int ibw_open (const char *path, bool all, ib_wheel_t **out, ib_error_t *err);
/* The member named `path`, or NULL. */
member_t *ibw_find_member (ib_wheel_t *w, const char *path);
/* The digest `md` of a file's bytes, urlsafe base64 without padding (RECORD's
 * form) in *out (caller frees). */
int ibw_hash_file (const char *path, const EVP_MD *md, char **out, ib_error_t *err);
/* The same digest as raw bytes: d (EVP_MAX_MD_SIZE bytes), *dl of them set. */
int ibw_digest_file (const char *path, const EVP_MD *md, unsigned char *d, unsigned int *dl,
                     ib_error_t *err);

/* ---- elf.c: ELF objects --------------------------------------------------- */

typedef struct elf_info
{
  char *path;
  int cls, data, machine, osabi;
  char *interp;
  char **needed, **rpath, **runpath;
  smap_t verneed;  /* needed library -> versions (ld-linux / ld64 skipped) */
  char **undef;    /* undefined, non-weak .dynsym names */
  bool pyext, py2, pyfpe, ucs2;
  unsigned isa_level; /* 0 baseline, 2..4: x86-64-v2..v4 */
} elf_info_t;

/* Read `path`.  *out NULL (and 0 returned) when the file is no ELF object.
 * `modname`: the Python module name the file would be (its name up to the
 * first '.'), to recognize an extension's init function; NULL: not asked. */
int ibw_elf_read (const char *path, const char *modname, elf_info_t **out, ib_error_t *err);
void ibw_elf_info_free (elf_info_t *i); /* NULL ok */
/* The policy table's name of the object's architecture ("x86_64"), or NULL. */
const char *ibw_base_arch (const elf_info_t *i);
/* Whether the loader would load `b` for `a` (class, data, machine, OS ABI). */
bool ibw_elf_compatible (const elf_info_t *a, const elf_info_t *b);

/* ---- policy.c: the manylinux policies ------------------------------------- */

typedef struct policy
{
  char *name; /* with the architecture: "manylinux_2_17_x86_64" */
  char **aliases;
  int priority;
  json_t *symvers;   /* prefix -> [versions], or NULL (linux) */
  json_t *whitelist; /* array */
  json_t *blacklist; /* soname -> [symbols] */
} policy_t;

/* The policies for `arch`, by priority (linux_<arch> first); their JSON
 * values are borrowed from *root, which the caller releases. */
int ibw_policies_load (const char *arch, json_t **root, policy_t **out, size_t *n,
                       ib_error_t *err);
void ibw_policies_free (policy_t *p, size_t n); /* the array and its names */
size_t ibw_symbols_policy (const policy_t *p, size_t np, const smap_t *vs);
/* The index of the policy named `name` or one of its aliases, or SIZE_MAX. */
size_t ibw_policy_index (const policy_t *p, size_t np, const char *name);
bool ibw_json_array_has (json_t *arr, const char *s);
/* The architecture the file name's platform tags name, or NULL. */
const char *ibw_name_arch (const char *platform);

/* ---- audit.c: the audit's state ------------------------------------------ */

typedef struct lib
{
  char *soname;
  char *realpath; /* NULL: not found */
  char **needed;
} lib_t;

typedef struct extref
{
  smap_t libs;      /* soname -> [realpath] or no value (not found) */
  smap_t blacklist; /* soname -> symbols */
} extref_t;

typedef struct tree
{
  char *rel;       /* path in the wheel */
  elf_info_t *info;
  char **needed;   /* DT_NEEDED minus excluded */
  lib_t *libs;
  size_t nlibs;
  bool full;       /* in auditwheel's full_elftree */
  extref_t *refs;  /* one per policy */
} tree_t;

struct ib_wheel_audit
{
  char *wheel;       /* base name */
  bool pure;
  json_t *root;
  policy_t *pol;
  size_t npol;
  tree_t *t;
  size_t nt;
  extref_t *refs;    /* merged, one per policy */
  smap_t versioned;  /* the symbol policy's versioned symbols */
  size_t overall, sym, ucs, pyfpe, blacklist, machine, ref, graft;
  /* cache of libraries read while resolving */
  elf_info_t **cache;
  size_t ncache;
  char **conf_paths, **env_paths;
  char *wheel_dir;
  char *sysroot; /* prefix of every library path ("" : this host) */
};

/* ---- ldd.c: library resolution (lddtree) ---------------------------------- */

/* os.path.normpath: lexical; "." and ".." resolved, "//" collapsed.  Caller frees. */
char *ibw_normpath (const char *p);
/* An RPATH/RUNPATH entry with $ORIGIN and ${ORIGIN} replaced by `dir`
 * (the directory of the object that holds it), as ld.so does; caller frees. */
char *ibw_expand_origin (const char *entry, const char *dir);
/* Whether `path` (NULL ok) is `dir` or below it, lexically. */
bool ibw_is_subdir (const char *path, const char *dir);
bool ibw_is_libpython (const char *s);
/* The library at `path` read once per audit (a->cache owns it); *out NULL
 * when it is no ELF object. */
int ibw_cached_elf (ib_wheel_audit_t *a, const char *path, elf_info_t **out, ib_error_t *err);
lib_t *ibw_tree_lib (tree_t *t, const char *soname);
/* The search paths every tree shares: LD_LIBRARY_PATH (`ld_library_path`,
 * see ib_wheel_audit_opts_t; when NULL, $LD_LIBRARY_PATH for this host
 * only), a->sysroot's /etc/ld.so.conf and the default directories. */
void ibw_ld_paths (ib_wheel_audit_t *a, char *const *ld_library_path);
/* Resolve t->info's libraries into t (t->needed, t->libs), skipping those
 * `exclude` (see ib_wheel_audit_opts_t) or the driver patterns name. */
int ibw_ldd_tree (ib_wheel_audit_t *a, tree_t *t, char *const *exclude, ib_error_t *err);

/* ---- report.c ------------------------------------------------------------- */

/* Why `a` does not satisfy policy `req` (a->overall < req).  Caller frees. */
char *ibw_unmet_reasons (const ib_wheel_audit_t *a, size_t req);

/* ---- zip.c ---------------------------------------------------------------- */

/* Write RECORD for the tree `w->dir` and zip it into `out` (reproducibly). */
int ibw_write_zip (ib_wheel_t *w, const char *out, ib_error_t *err);

#endif
